//! The agent's cap on the rate at which it fetches workflow inputs from other agents
//! (`fetch_bandwidth` in the agent configuration): one token bucket shared by every fetch the
//! agent makes, so that all of them together — many instances fetching at once, each with many
//! inputs — stay under the cap and leave the node's link to the tasks running on it.
//!
//! [`crate::dataflow`]'s fetch takes each chunk it received from the bucket before writing it
//! ([`FetchBandwidth::take`]). A chunk waits until the bytes let through before it are paid for
//! at the cap, so over any stretch of time the agent writes at most `cap × time` plus the one
//! chunk in hand ([`crate::dataflow::CHUNK`]): a fetch of N bytes alone takes at least
//! `(N − CHUNK) / cap`. Time left unused (no fetch running) is not saved up: the first chunk
//! after a pause goes at once, the next ones at the cap. Waiting on the bucket, the fetch reads
//! nothing more from the producer's stream, whose flow control then holds the producer's agent
//! back: what crosses the link is paced too, ahead by at most the stream's buffers.

use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;

/// The least cap `fetch_bandwidth` accepts (other than 0, no cap): a cap below it is more
/// likely a typo ("64" for "64MiB") than a setting — at 64 KiB/s one chunk already takes 4 s,
/// and a few GiB of inputs would hold the node's workflow instances in their fetches for hours.
pub const MIN_FETCH_BANDWIDTH: u64 = 64 << 10;

/// A handle on the agent's fetch bucket: clones share it. [`FetchBandwidth::default`] is no cap.
#[derive(Clone, Debug, Default)]
pub struct FetchBandwidth {
    bucket: Option<Arc<Bucket>>,
}

#[derive(Debug)]
struct Bucket {
    bytes_per_sec: u64,
    /// When the bytes let through so far are paid for at the cap (none let through yet: `None`).
    paid_until: Mutex<Option<Instant>>,
}

impl FetchBandwidth {
    /// A bucket letting `bytes_per_sec` through (0: no cap). The configuration refuses caps below
    /// [`MIN_FETCH_BANDWIDTH`]; this takes any.
    pub fn new(bytes_per_sec: u64) -> Self {
        Self {
            bucket: (bytes_per_sec > 0).then(|| {
                Arc::new(Bucket {
                    bytes_per_sec,
                    paid_until: Mutex::new(None),
                })
            }),
        }
    }

    /// The cap in bytes per second (0: none).
    pub fn bytes_per_sec(&self) -> u64 {
        self.bucket.as_ref().map_or(0, |b| b.bytes_per_sec)
    }

    /// Waits until `bytes` more may be written under the cap (at once without one), and counts
    /// them against it.
    pub async fn take(&self, bytes: u64) {
        let Some(bucket) = &self.bucket else {
            return;
        };
        let start = {
            let mut paid_until = bucket.paid_until.lock().unwrap_or_else(|p| p.into_inner());
            let now = Instant::now();
            // Time the bucket was idle is not credit: a pause buys no burst.
            let start = paid_until.map_or(now, |p| p.max(now));
            let cost = Duration::from_secs_f64(bytes as f64 / bucket.bytes_per_sec as f64);
            *paid_until = Some(start + cost);
            start
        };
        tokio::time::sleep_until(start).await;
    }
}

/// The cap as the agent's start-up log and its operator write it: `100.0 MiB/s`, or `no cap`.
impl std::fmt::Display for FetchBandwidth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.bytes_per_sec() {
            0 => f.write_str("no cap"),
            rate => write!(f, "{}/s", bytesize::ByteSize(rate)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the agent logs of its `fetch_bandwidth` at start.
    #[test]
    fn agent_fetch_bandwidth_reads_as_a_rate_or_no_cap() {
        assert_eq!(FetchBandwidth::default().to_string(), "no cap");
        assert_eq!(FetchBandwidth::new(0).to_string(), "no cap");
        assert_eq!(FetchBandwidth::new(100 << 20).to_string(), "100.0 MiB/s");
        assert_eq!(
            FetchBandwidth::new(MIN_FETCH_BANDWIDTH).to_string(),
            "64.0 KiB/s"
        );
    }

    const CHUNK: u64 = 256 << 10;

    /// Under a cap of 4 MiB/s, sixteen 256 KiB chunks (4 MiB) taken by two fetches at once take
    /// at least the 15/16 s the cap allows (the first chunk goes at once): the two share one
    /// bucket, each alone would have taken half that. Only a lower bound is checked.
    #[tokio::test]
    async fn concurrent_takes_share_one_cap() {
        let cap = FetchBandwidth::new(4 << 20);
        assert_eq!(cap.bytes_per_sec(), 4 << 20);
        let fetch = |cap: FetchBandwidth| async move {
            for _ in 0..8 {
                cap.take(CHUNK).await;
            }
        };
        let begin = Instant::now();
        tokio::join!(fetch(cap.clone()), fetch(cap.clone()));
        assert!(
            begin.elapsed() >= Duration::from_millis(930),
            "{:?}",
            begin.elapsed()
        );
        assert_eq!(FetchBandwidth::default().bytes_per_sec(), 0, "no cap");
        assert_eq!(FetchBandwidth::new(0).bytes_per_sec(), 0, "0 is no cap");
    }

    /// A pause is not saved up: after the bucket sat idle for half a second, four chunks at
    /// 4 MiB/s still take at least the 3/16 s the cap allows.
    #[tokio::test]
    async fn idle_time_buys_no_burst() {
        let cap = FetchBandwidth::new(4 << 20);
        cap.take(CHUNK).await;
        tokio::time::sleep(Duration::from_millis(500)).await;
        let begin = Instant::now();
        for _ in 0..4 {
            cap.take(CHUNK).await;
        }
        assert!(
            begin.elapsed() >= Duration::from_millis(185),
            "{:?}",
            begin.elapsed()
        );
    }
}
