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
