//! What a worker measures (spec 04, "Monitoring API"): per (sender executor, receiver executor)
//! pair the tuples received (the tuple-received record, counted by the receiver), per executor
//! the tuples emitted, acked and failed and its thread's CPU time, tuples sent to and received
//! from other workers, and end-to-end latency at the terminal bolts (those with no outgoing
//! stream), from the spout's emit timestamp to the moment the terminal bolt takes the tuple.
//!
//! Counters are cumulative since the worker started; the server turns two reports into rates.

use serde::{Deserialize, Serialize};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// Counters of one local executor, written by its thread and read by reports.
#[derive(Debug)]
pub struct ExecutorCounters {
    /// Tuples received from each executor of the topology, indexed by sender executor id.
    pub received_from: Vec<AtomicU64>,
    /// Tuples emitted.
    pub emitted: AtomicU64,
    /// Tuple trees fully acknowledged (spouts).
    pub acked: AtomicU64,
    /// Tuple trees failed or timed out, and replayed (spouts).
    pub failed: AtomicU64,
    /// The executor thread's Linux thread id (0 until it starts).
    pub tid: AtomicU64,
    /// A spout that has emitted everything it will emit and has nothing in flight.
    pub done: AtomicBool,
    /// The executor moved to another worker (a new placement): its thread hands its state over
    /// and ends.
    pub moved: AtomicBool,
    /// When its thread started, nanoseconds since the Unix epoch (0 until it starts).
    pub started_ns: AtomicU64,
    /// Multi-lang bolts: inputs handed to the program that it has neither acked nor failed yet
    /// (and the worker has not expired), now.
    pub unacked: AtomicU64,
    /// Multi-lang bolts: inputs the worker stopped waiting on the program's ack for, in all:
    /// those of a reliable tree failed once their tree had timed out, those of an untracked
    /// tree forgotten (`multilang`'s module doc).
    pub expired: AtomicU64,
    /// Multi-lang executors: why its program last ended, if it did (it exited, or was killed
    /// for its silence; kept once the program runs again), or why the worker gave up starting
    /// it: what the worker's log says.
    pub ended: Mutex<Option<String>>,
    /// Multi-lang executors: times its program was started again after it ended, in all.
    pub restarts: AtomicU64,
    /// Multi-lang executors: the worker gave up starting its program again (too many ends in
    /// a row; `ended` says why): the executor runs no more until a new placement or worker.
    pub gave_up: AtomicBool,
}

impl ExecutorCounters {
    /// Counters for a topology of `executors` executors.
    pub fn new(executors: usize) -> Self {
        Self {
            received_from: (0..executors).map(|_| AtomicU64::new(0)).collect(),
            emitted: AtomicU64::new(0),
            acked: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            tid: AtomicU64::new(0),
            done: AtomicBool::new(false),
            moved: AtomicBool::new(false),
            started_ns: AtomicU64::new(0),
            unacked: AtomicU64::new(0),
            expired: AtomicU64::new(0),
            ended: Mutex::new(None),
            restarts: AtomicU64::new(0),
            gave_up: AtomicBool::new(false),
        }
    }
}

/// Latency histogram: bucket `b` holds latencies in `[2^(b/4), 2^((b+1)/4))` microseconds
/// (four buckets per doubling, so a percentile is within 19 % of the true value).
#[derive(Clone, Debug, Default)]
pub struct Histogram {
    buckets: Vec<u64>,
    count: u64,
    max_us: u64,
}

const BUCKETS: usize = 4 * 40;

impl Histogram {
    /// Records one latency.
    pub fn record(&mut self, us: u64) {
        if self.buckets.is_empty() {
            self.buckets = vec![0; BUCKETS];
        }
        let b = if us == 0 {
            0
        } else {
            let lg = (us as f64).log2() * 4.0;
            (lg as usize).min(BUCKETS - 1)
        };
        self.buckets[b] += 1;
        self.count += 1;
        self.max_us = self.max_us.max(us);
    }

    /// Adds `other` into this one and empties it.
    pub fn drain_into(&mut self, other: &mut Histogram) {
        if self.count == 0 {
            return;
        }
        if other.buckets.is_empty() {
            other.buckets = vec![0; BUCKETS];
        }
        for (o, s) in other.buckets.iter_mut().zip(&mut self.buckets) {
            *o += *s;
            *s = 0;
        }
        other.count += self.count;
        other.max_us = other.max_us.max(self.max_us);
        self.count = 0;
        self.max_us = 0;
    }

    /// The `q`-quantile (0..1) in microseconds: the upper edge of its bucket (capped at the max).
    pub fn quantile_us(&self, q: f64) -> u64 {
        if self.count == 0 {
            return 0;
        }
        let want = ((self.count as f64) * q).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (b, n) in self.buckets.iter().enumerate() {
            seen += n;
            if seen >= want {
                let upper = 2f64.powf((b + 1) as f64 / 4.0).ceil() as u64;
                return upper.min(self.max_us);
            }
        }
        self.max_us
    }

    /// The summary a report carries.
    pub fn summary(&self) -> LatencySummary {
        LatencySummary {
            count: self.count,
            p50_us: self.quantile_us(0.5),
            p99_us: self.quantile_us(0.99),
            max_us: self.max_us,
        }
    }
}

/// End-to-end latency percentiles, microseconds.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LatencySummary {
    /// Tuples measured.
    pub count: u64,
    /// Median.
    pub p50_us: u64,
    /// 99th percentile.
    pub p99_us: u64,
    /// Largest.
    pub max_us: u64,
}

/// A latency histogram shared by a worker's terminal executors (each merges its own now and then).
#[derive(Debug, Default)]
pub struct SharedHistogram(pub Mutex<Histogram>);

/// Tuples received by `to` from `from`, cumulative.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PairCount {
    /// Sender executor.
    pub from: u32,
    /// Receiver executor.
    pub to: u32,
    /// Tuples.
    pub tuples: u64,
}

/// One local executor's figures, cumulative.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ExecutorReport {
    /// Executor id.
    pub executor: u32,
    /// `<component>#<index>`.
    pub name: String,
    /// CPU time of its thread, nanoseconds (0 where the platform does not say).
    pub cpu_ns: u64,
    /// Tuples emitted.
    pub emitted: u64,
    /// Tuples received.
    pub received: u64,
    /// Tuple trees acknowledged (reliable spouts).
    pub acked: u64,
    /// Tuple trees failed and replayed (reliable spouts).
    pub failed: u64,
    /// A spout that has emitted everything and has nothing in flight.
    pub done: bool,
    /// When its thread started in this worker, nanoseconds since the Unix epoch: unchanged
    /// while the executor runs on, new when it was (re)started.
    #[serde(default)]
    pub started_ns: u64,
    /// Multi-lang bolts: inputs its program holds neither acked nor failed, now.
    #[serde(default)]
    pub unacked: u64,
    /// Multi-lang bolts: inputs the worker stopped waiting on the program's ack for (failed
    /// at their tree's timeout, or forgotten), in all.
    #[serde(default)]
    pub expired: u64,
    /// Multi-lang executors: times its program was started again after it ended.
    #[serde(default)]
    pub restarts: u64,
    /// Multi-lang executors: why its program last ended (it exited, or was killed for its
    /// silence), if it did; kept once the program runs again, so a restart can be explained.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended: Option<String>,
    /// Multi-lang executors: the worker gave up starting its program again (`ended` says
    /// why): the executor passes no tuple until a new placement or a new worker starts it.
    #[serde(default)]
    pub gave_up: bool,
}

/// What a worker reports: cumulative counters since it started.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WorkerReport {
    /// The worker's index in the placement.
    pub worker: u32,
    /// When the report was taken, nanoseconds since the Unix epoch.
    pub at_ns: u64,
    /// Tuples per (sender, receiver) pair received by this worker's executors.
    pub pairs: Vec<PairCount>,
    /// This worker's executors.
    pub executors: Vec<ExecutorReport>,
    /// Tuples sent to other workers over TCP.
    pub remote_out: u64,
    /// Tuples received from other workers over TCP.
    pub remote_in: u64,
    /// Tuples lost on a broken connection or for an executor no longer here (reliable spouts
    /// replay them).
    pub dropped: u64,
    /// End-to-end latency at this worker's terminal executors.
    pub latency: LatencySummary,
    /// Resident memory of the worker process, bytes (0 where unknown).
    pub rss_bytes: u64,
    /// Whether its connections to and from other workers are TLS.
    #[serde(default)]
    pub encrypted: bool,
    /// Connections refused since it started: no proof of the topology's key, a failed
    /// handshake, or too many handshakes at once.
    #[serde(default)]
    pub refused_connections: u64,
}

/// This thread's Linux thread id, from `/proc/thread-self` (0 elsewhere).
pub fn current_tid() -> u64 {
    std::fs::read_link("/proc/thread-self")
        .ok()
        .and_then(|p| p.file_name()?.to_str()?.parse().ok())
        .unwrap_or(0)
}

/// CPU time (user + system) of thread `tid` of this process, nanoseconds (0 if unknown).
pub fn thread_cpu_ns(tid: u64) -> u64 {
    if tid == 0 {
        return 0;
    }
    let Ok(stat) = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")) else {
        return 0;
    };
    // Fields after the command name (which may hold spaces): state is field 3; utime 14, stime 15.
    let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else {
        return 0;
    };
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = f.get(11).and_then(|s| s.parse::<u64>().ok()).unwrap_or(0)
        + f.get(12).and_then(|s| s.parse::<u64>().ok()).unwrap_or(0);
    // Linux reports in clock ticks of 1/100 s (USER_HZ is 100 on every Linux ABI).
    ticks * 10_000_000
}

/// Resident memory of this process, bytes (0 if unknown).
pub fn rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map_or(0, |pages| pages * 4096)
}

/// Nanoseconds since the Unix epoch.
pub fn now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// Relaxed add, the only ordering counters need.
pub fn bump(c: &AtomicU64, n: u64) {
    c.fetch_add(n, Ordering::Relaxed);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_come_from_the_buckets() {
        let mut h = Histogram::default();
        for us in 1..=1000 {
            h.record(us);
        }
        let p50 = h.quantile_us(0.5);
        assert!((500..=600).contains(&p50), "{p50}");
        let p99 = h.quantile_us(0.99);
        assert!((990..=1000).contains(&p99), "{p99}");
        assert_eq!(h.summary().max_us, 1000);
    }
}
