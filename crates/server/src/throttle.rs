//! Bounds on calls that cost the server more than a look at its state, so that one caller
//! holding a token cannot exhaust it:
//!
//! - [`InFlight`]: a client's calls held open or relayed to an agent — `GetJob` with `wait_ms`
//!   (what `hetsched wait` holds), `ReadLog` (the dashboard's log reads too), `WorkerLog` and
//!   a divisible job's `ReadOutput` stream (until it ends) —
//!   at most [`MAX_CALLS_IN_FLIGHT_PER_USER`] at once per user (the admin's token included);
//!   one more is refused `RESOURCE_EXHAUSTED`, naming the bound. Each such call holds a task,
//!   a subscription to the state's commits or a connection to an agent until it ends.
//! - [`OutputStreams`]: the `ReadOutput` streams of all users together, at most the server's
//!   `max_output_streams` (default [`MAX_OUTPUT_STREAMS`]). Each holds one of tokio's blocking
//!   threads (512 in all, shared with the state's work) while its reader is slow, so several
//!   users, each within their own bound, could otherwise take them all.
//! - [`CertifyRate`]: `Agent.ListenerCertificate` signs a key (CPU) for the address the call
//!   comes from; at most [`CERTIFICATES_PER_ADDRESS`] per address in any
//!   [`CERTIFY_WINDOW`] (an agent asks once at each start; several agents may share a host or
//!   a NAT address, and an agent refused asks again a few seconds later). A signature costs
//!   about a millisecond: the bound keeps a loop of asks from taking more than a little of a
//!   core.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tonic::Status;

/// The most calls one user may have held open or relayed at once ([`InFlight`]).
pub const MAX_CALLS_IN_FLIGHT_PER_USER: u32 = 64;

/// Each user's calls in flight.
#[derive(Debug)]
pub struct InFlight {
    calls: Arc<Mutex<HashMap<Arc<str>, u32>>>,
    most: u32,
}

impl Default for InFlight {
    fn default() -> Self {
        Self::new(MAX_CALLS_IN_FLIGHT_PER_USER)
    }
}

/// One call in flight, counted until dropped (the call answered, or cancelled with its
/// connection).
#[derive(Debug)]
pub struct Slot {
    calls: Arc<Mutex<HashMap<Arc<str>, u32>>>,
    who: Arc<str>,
}

impl InFlight {
    /// At most `most` calls per user at once.
    pub fn new(most: u32) -> Self {
        Self {
            calls: Arc::default(),
            most,
        }
    }

    /// Counts one more call (`what`, for the message) of user `who`, or refuses it when the
    /// user has the most in flight already.
    pub fn enter(&self, who: &Arc<str>, what: &str) -> Result<Slot, Status> {
        let mut calls = self.calls.lock().unwrap_or_else(|p| p.into_inner());
        let n = calls.entry(who.clone()).or_insert(0);
        if *n >= self.most {
            return Err(Status::resource_exhausted(format!(
                "{what}: user `{who}` has {} held open or relayed to agents already, the most \
                 one user may have at once ({} `GetJob` waits, `ReadLog`, `WorkerLog` and \
                 `ReadOutput` calls together); wait for some to end",
                *n, self.most
            )));
        }
        *n += 1;
        Ok(Slot {
            calls: self.calls.clone(),
            who: who.clone(),
        })
    }

    /// How many calls user `who` has in flight.
    pub fn of(&self, who: &str) -> u32 {
        let calls = self.calls.lock().unwrap_or_else(|p| p.into_inner());
        calls.get(who).copied().unwrap_or(0)
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut calls = self.calls.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = calls.get_mut(&self.who) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                calls.remove(&self.who);
            }
        }
    }
}

/// The default of the server's `max_output_streams`: half of tokio's blocking threads, so the
/// state's own blocking work always finds one.
pub const MAX_OUTPUT_STREAMS: u32 = 256;

/// The server-wide bound on `ReadOutput` streams held at once.
#[derive(Debug)]
pub struct OutputStreams {
    permits: Arc<tokio::sync::Semaphore>,
    most: u32,
}

impl Default for OutputStreams {
    fn default() -> Self {
        Self::new(MAX_OUTPUT_STREAMS)
    }
}

impl OutputStreams {
    /// At most `most` streams at once.
    pub fn new(most: u32) -> Self {
        Self {
            permits: Arc::new(tokio::sync::Semaphore::new(most as usize)),
            most,
        }
    }

    /// One more stream, held until the permit drops (the stream ended, or its reader gone),
    /// or a refusal naming the bound when the server holds the most already.
    pub fn enter(&self) -> Result<tokio::sync::OwnedSemaphorePermit, Status> {
        self.permits.clone().try_acquire_owned().map_err(|_| {
            Status::resource_exhausted(format!(
                "ReadOutput: the server streams {} outputs already, the most it streams at once \
                 for all users together (its `max_output_streams`); try again when some end",
                self.most
            ))
        })
    }
}

/// The most listener certificates signed for one address in a [`CERTIFY_WINDOW`].
pub const CERTIFICATES_PER_ADDRESS: u32 = 64;

/// The window [`CERTIFICATES_PER_ADDRESS`] counts in.
pub const CERTIFY_WINDOW: Duration = Duration::from_secs(60);

/// The certificates signed per caller address in the current window of each.
#[derive(Debug, Default)]
pub struct CertifyRate {
    seen: Mutex<HashMap<IpAddr, (Instant, u32)>>,
}

impl CertifyRate {
    /// Admits one more certificate for a call from `ip` at `now`, or refuses it naming the
    /// bound and when to ask again. Windows that ended are forgotten as calls come, so the map
    /// holds only the addresses of the last window.
    pub fn admit(&self, ip: IpAddr, now: Instant) -> Result<(), String> {
        let ip = ip.to_canonical();
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        seen.retain(|_, (start, _)| now.saturating_duration_since(*start) < CERTIFY_WINDOW);
        let (start, n) = seen.entry(ip).or_insert((now, 0));
        if *n >= CERTIFICATES_PER_ADDRESS {
            let left = CERTIFY_WINDOW.saturating_sub(now.saturating_duration_since(*start));
            return Err(format!(
                "the server certified {} listener keys for {ip} in the last {} s, the most it \
                 signs for one address (an agent asks once at each start): ask again in {} s",
                *n,
                CERTIFY_WINDOW.as_secs(),
                left.as_secs().max(1)
            ));
        }
        *n += 1;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A user's calls in flight are bounded, each user apart; a call that ends gives its
    /// place back.
    #[test]
    fn a_users_calls_in_flight_are_bounded_and_given_back() {
        let f = InFlight::new(2);
        let (alice, bob): (Arc<str>, Arc<str>) = ("alice".into(), "bob".into());
        let a = f.enter(&alice, "GetJob").expect("1 of 2");
        let _b = f.enter(&alice, "ReadLog").expect("2 of 2");
        let e = f.enter(&alice, "GetJob").expect_err("3 of 2");
        assert_eq!(e.code(), tonic::Code::ResourceExhausted);
        assert!(
            e.message()
                .contains("GetJob: user `alice` has 2 held open or relayed to agents already"),
            "{}",
            e.message()
        );
        let _c = f.enter(&bob, "GetJob").expect("bob's own");
        drop(a);
        assert_eq!(f.of("alice"), 1);
        let _d = f.enter(&alice, "GetJob").expect("given back");
    }

    /// The server's output streams are bounded for all users together; one that ends gives
    /// its place back.
    #[test]
    fn output_streams_are_bounded_server_wide_and_given_back() {
        let o = OutputStreams::new(2);
        let a = o.enter().expect("1 of 2");
        let _b = o.enter().expect("2 of 2");
        let e = o.enter().expect_err("3 of 2");
        assert_eq!(e.code(), tonic::Code::ResourceExhausted);
        assert!(
            e.message()
                .contains("streams 2 outputs already, the most it streams at once for all users")
                && e.message().contains("`max_output_streams`"),
            "{}",
            e.message()
        );
        drop(a);
        let _c = o.enter().expect("given back");
    }

    /// Listener certificates are bounded per address and window; another address, and the
    /// same one once its window ended, are certified.
    #[test]
    fn listener_certificates_are_bounded_per_address_and_window() {
        let r = CertifyRate::default();
        let t0 = Instant::now();
        let ip: IpAddr = "10.1.2.3".parse().expect("ip");
        for _ in 0..CERTIFICATES_PER_ADDRESS {
            r.admit(ip, t0).expect("within the bound");
        }
        let e = r
            .admit(ip, t0 + Duration::from_secs(10))
            .expect_err("one more");
        assert!(
            e.contains(&format!(
                "certified {CERTIFICATES_PER_ADDRESS} listener keys for 10.1.2.3 in the last 60 s"
            )) && e.contains("ask again in 50 s"),
            "{e}"
        );
        // The same address written as IPv4-mapped IPv6 is the same caller.
        let mapped: IpAddr = "::ffff:10.1.2.3".parse().expect("ip");
        assert!(r.admit(mapped, t0).is_err());
        r.admit("10.1.2.4".parse().expect("ip"), t0)
            .expect("another address");
        r.admit(ip, t0 + CERTIFY_WINDOW).expect("a new window");
    }
}
