//! Time as the core sees it: an integer number of nanoseconds since an origin the driver chooses.
//!
//! Integer time keeps simulations deterministic (no floating-point drift in event order); drivers
//! convert to and from seconds only at the edges.

/// Nanoseconds since the driver's origin (simulation start, or the server's epoch).
pub type Time = u64;

/// Nanoseconds in one second.
pub const NANOS_PER_SEC: u64 = 1_000_000_000;

/// Converts seconds (as `f64`) to [`Time`], rounding up so a positive duration never becomes zero.
pub fn secs(s: f64) -> Time {
    if s <= 0.0 {
        0
    } else {
        (s * NANOS_PER_SEC as f64).ceil() as Time
    }
}

/// Converts a [`Time`] to seconds.
pub fn to_secs(t: Time) -> f64 {
    t as f64 / NANOS_PER_SEC as f64
}

/// A workflow instance's input fetch, from its launch at `started` to its program's start at
/// `program_started`, in whole milliseconds rounded up: `fetch_ms` 0 means "no inputs" (the
/// CLI and the dashboard show `-`), so a fetch under a millisecond (small inputs on loopback)
/// must read 1, not 0. Equal instants (an instance without inputs) give 0. The agent and the
/// server both compute it so.
pub fn fetch_ms(started: Time, program_started: Time) -> u64 {
    program_started.saturating_sub(started).div_ceil(1_000_000)
}

#[cfg(test)]
mod tests {
    use super::fetch_ms;

    #[test]
    fn a_fetch_under_a_millisecond_reads_one_not_none() {
        assert_eq!(fetch_ms(5, 5), 0, "no fetch");
        assert_eq!(fetch_ms(1_000, 1_000 + 300_000), 1);
        assert_eq!(fetch_ms(0, 1_000_000), 1);
        assert_eq!(fetch_ms(0, 1_000_001), 2);
        assert_eq!(fetch_ms(10, 0), 0, "a clock that went back is no fetch");
    }
}
