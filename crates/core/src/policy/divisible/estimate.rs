//! Online estimation of a worker's platform figures from finished chunks (spec 03, "Beyond the
//! seed": online re-estimation of `S_i`, `B_i`), for the runtime, which knows no declared speeds.
//!
//! Every finished chunk of `c` units gives two observations: its transfer took `t_net` seconds and
//! its compute `t_cpu` seconds. Spec 03's model says `t_net = nLat + c/B` and
//! `t_cpu = cLat + c/S`, both lines in `c`; [`LinearFit`] fits such a line by exponentially
//! weighted least squares, so that the latest chunks count most and a worker whose speed changes
//! mid-job is re-estimated within a few chunks.
//!
//! The intercept is the per-chunk overhead (a process start, a message), and a plan made with
//! none wants ever more, ever smaller chunks, so the fit keeps it whenever the data show one:
//! - the least-squares line when its intercept is at most `MAX_LATENCY_SHARE` (half) of the mean
//!   time; a negative intercept is 0, the rate then through the (weighted) mean point, `Σc/Σt`;
//! - an intercept above half the mean time, or times that do not grow with the size at all
//!   (covariance ≤ 0: e.g. a command that returns at once, whose every chunk is its process
//!   start), say the time is mostly overhead — or noise in a few points (one slow process start
//!   among two calibration chunks reads as a huge latency and a huge speed): half the mean time
//!   is latency, and the rate is the one at which the largest chunk seen takes the mean time.
//!   (Before, both read as latency 0 through the origin, and the planners cut 100,000 units into
//!   9,737 chunks, 3,507 of them of one unit. A rate through the mean point instead would follow
//!   the sizes a worker was given — small chunks, a slow estimate, small chunks again — and the
//!   same job went out in 4,307 chunks where 1,667 would do.)
//! - with one chunk size only the line cannot be fitted: the latency is the one last fitted from
//!   sizes that differed (0 if none ever did), at most half the mean time, and the rate goes
//!   through the mean point. (The weights forget old sizes: a job whose chunks are all at their
//!   memory cap would otherwise fall back to latency 0 after some thirty chunks.)

use super::StarWorker;
use serde::{Deserialize, Serialize};

/// Weight an observation keeps when the next one arrives: after 5 chunks an old one counts
/// about a third as much, so a changed speed dominates the estimate within a round or two.
pub const DECAY: f64 = 0.8;

/// Shortest time an observation is taken to have lasted (clock granularity, and a transfer of
/// no bytes still costs a message), seconds.
pub const MIN_SECONDS: f64 = 1e-6;

/// Largest rate an estimate reports, units per second (a link that moved nothing measurable
/// must still give the planners a finite bandwidth).
pub const MAX_RATE: f64 = 1e12;

/// Largest share of the mean observed time a fitted latency may take (see [`LinearFit::fit`]).
pub const MAX_LATENCY_SHARE: f64 = 0.5;

/// An exponentially weighted least-squares line `t = latency + size/rate`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LinearFit {
    w: f64,
    x: f64,
    y: f64,
    xx: f64,
    xy: f64,
    /// Observations seen.
    pub count: u32,
    /// The latency last fitted from sizes that differed (seconds; 0 before any).
    #[serde(default)]
    latency_seen: f64,
    /// The largest size observed (not weighted).
    #[serde(default)]
    max_size: f64,
}

impl LinearFit {
    /// Adds one observation: `size` units took `seconds`.
    pub fn observe(&mut self, size: f64, seconds: f64) {
        if !(size.is_finite() && size > 0.0 && seconds.is_finite()) {
            return;
        }
        let t = seconds.max(MIN_SECONDS);
        for s in [
            &mut self.w,
            &mut self.x,
            &mut self.y,
            &mut self.xx,
            &mut self.xy,
        ] {
            *s *= DECAY;
        }
        self.w += 1.0;
        self.x += size;
        self.y += t;
        self.xx += size * size;
        self.xy += size * t;
        self.count += 1;
        self.max_size = self.max_size.max(size);
        if let Some(latency) = self.line().map(|(latency, _)| latency) {
            self.latency_seen = latency;
        }
    }

    /// `(mean size, mean time)`, weighted.
    fn means(&self) -> (f64, f64) {
        (self.x / self.w, self.y / self.w)
    }

    /// The line's `(latency, rate)` from sizes that differ enough to separate them, the latency
    /// clamped ([`LinearFit::fit`]); `None` with one size only.
    fn line(&self) -> Option<(f64, f64)> {
        if self.count == 0 {
            return None;
        }
        let (mean_x, mean_y) = self.means();
        let var = self.xx / self.w - mean_x * mean_x;
        let cov = self.xy / self.w - mean_x * mean_y;
        // Sizes that differ by less than 1% relative cannot separate the latency from the rate.
        if var <= (0.01 * mean_x).powi(2) {
            return None;
        }
        if cov > 0.0 {
            let latency = mean_y - cov / var * mean_x;
            if latency <= MAX_LATENCY_SHARE * mean_y {
                // The line; a negative intercept is 0 (through the mean point).
                return Some(self.through_mean(latency));
            }
        }
        // The time grows little or not at all with the size: it is mostly overhead (or noise
        // in a few points), and the data only say that the largest chunk took about as long
        // as the others. Half the mean time is latency (the clamp), and the rate is the one at
        // which the largest chunk takes the mean time: it errs slow by at most the latency
        // share, never fast. (A rate through the mean point follows the sizes the worker was
        // given — smaller chunks, a slower estimate, smaller chunks again — where workers that
        // computed the same calibration chunks read alike this way; one at which the largest
        // chunk fills only the other half made a fast agent whose first process started slowly
        // look 1.4 times too fast, and the slow agent of the runtime test starve.)
        let latency = MAX_LATENCY_SHARE * mean_y;
        Some((latency, (self.max_size / mean_y).min(MAX_RATE)))
    }

    /// `(latency, rate)` with `latency` clamped to `[0, MAX_LATENCY_SHARE × mean time]` and the
    /// rate through the mean point (one size, or the line).
    fn through_mean(&self, latency: f64) -> (f64, f64) {
        let (mean_x, mean_y) = self.means();
        let latency = latency.clamp(0.0, MAX_LATENCY_SHARE * mean_y);
        (latency, (mean_x / (mean_y - latency)).min(MAX_RATE))
    }

    /// `(latency, rate)` — seconds and units per second — or `None` before any observation
    /// (module doc: the least-squares line, its latency clamped to `[0, half the mean time]`; with
    /// one size only, the latency last fitted).
    pub fn fit(&self) -> Option<(f64, f64)> {
        if self.count == 0 {
            return None;
        }
        Some(
            self.line()
                .unwrap_or_else(|| self.through_mean(self.latency_seen)),
        )
    }
}

/// What the runtime has measured of one worker.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct WorkerEstimate {
    /// `t_cpu = cLat + c/S`.
    pub compute: LinearFit,
    /// `t_net = nLat + c/B`.
    pub link: LinearFit,
}

impl WorkerEstimate {
    /// One finished chunk of `size` units: its transfer and compute times, seconds.
    pub fn observe(&mut self, size: f64, transfer: f64, compute: f64) {
        self.link.observe(size, transfer);
        self.compute.observe(size, compute);
    }

    /// Whether any chunk has been measured.
    pub fn measured(&self) -> bool {
        self.compute.count > 0
    }

    /// The worker in spec 03's terms, or `None` before any measurement.
    pub fn star_worker(&self, name: &str, memory: Option<f64>) -> Option<StarWorker> {
        let (compute_latency, speed) = self.compute.fit()?;
        let (network_latency, bandwidth) = self.link.fit().unwrap_or((0.0, MAX_RATE));
        Some(StarWorker {
            name: name.to_string(),
            speed,
            compute_latency,
            bandwidth,
            network_latency,
            memory,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_chunk_sizes_separate_latency_from_speed() {
        let mut e = WorkerEstimate::default();
        // cLat = 0.05 s, S = 100 units/s; nLat = 0.001 s, B = 1e4 units/s.
        for c in [10.0, 20.0, 40.0] {
            e.observe(c, 0.001 + c / 1e4, 0.05 + c / 100.0);
        }
        let w = e.star_worker("a", None).expect("measured");
        assert!((w.speed - 100.0).abs() < 1e-6, "{}", w.speed);
        assert!((w.compute_latency - 0.05).abs() < 1e-9);
        assert!((w.bandwidth - 1e4).abs() < 1e-3);
        assert!((w.network_latency - 0.001).abs() < 1e-9);
    }

    #[test]
    fn a_noisy_pair_of_points_does_not_make_a_slow_worker_look_fast() {
        // 6 units in 0.13 s, 12 in 0.14 s: the line says 600 units/s after 0.12 s of latency;
        // the worker may do about 67 units/s (Σc/Σt) after a slow first start. The latency is
        // clamped to half the mean time and the rate is 12 units in the mean time: 89 units/s,
        // not 600.
        let mut f = LinearFit::default();
        f.observe(6.0, 0.13);
        f.observe(12.0, 0.14);
        let (latency, rate) = f.fit().expect("fit");
        let mean_t = (0.13 * DECAY + 0.14) / (DECAY + 1.0);
        assert!((latency - 0.5 * mean_t).abs() < 1e-12, "{latency}");
        assert!((rate - 12.0 / mean_t).abs() < 1e-9, "{rate}");
        assert!(rate < 90.0);
    }

    /// A command whose every chunk takes the same 2 ms whatever its size (the process start):
    /// the fit read latency 0 and a speed of Σc/Σt, and the planners then cut 100,000 units
    /// into thousands of 1-unit chunks.
    #[test]
    fn a_constant_per_chunk_overhead_reads_as_latency_not_zero() {
        let mut f = LinearFit::default();
        for (c, t) in [
            (30.0, 0.0021),
            (60.0, 0.0019),
            (1.0, 0.0022),
            (45.0, 0.0020),
            (60.0, 0.0018),
            (12.0, 0.0021),
        ] {
            f.observe(c, t);
        }
        let (latency, rate) = f.fit().expect("fit");
        assert!(latency > 0.0009, "{latency}");
        // 60 units in the mean time, whatever sizes came last.
        let mean_t = latency / MAX_LATENCY_SHARE;
        assert!((rate - 60.0 / mean_t).abs() < 1e-6, "{rate}");
        // Two sizes whose times happen to grow a little: the same.
        let mut g = LinearFit::default();
        g.observe(30.0, 0.0020);
        g.observe(60.0, 0.0021);
        let (latency, _) = g.fit().expect("fit");
        assert!(latency > 0.0009, "{latency}");
    }

    #[test]
    fn a_latency_once_fitted_survives_chunks_of_one_size() {
        let mut f = LinearFit::default();
        // cLat = 0.05 s, S = 100 units/s, from two sizes; then 60 chunks at one size (a cap).
        f.observe(30.0, 0.05 + 0.3);
        f.observe(60.0, 0.05 + 0.6);
        for _ in 0..60 {
            f.observe(60.0, 0.05 + 0.6);
        }
        let (latency, rate) = f.fit().expect("fit");
        assert!((latency - 0.05).abs() < 1e-6, "{latency}");
        assert!((rate - 100.0).abs() < 1e-3, "{rate}");
    }

    #[test]
    fn one_size_gives_a_rate_through_the_origin() {
        let mut f = LinearFit::default();
        f.observe(10.0, 2.0);
        f.observe(10.0, 2.0);
        assert_eq!(f.fit(), Some((0.0, 5.0)));
        assert_eq!(LinearFit::default().fit(), None);
    }

    #[test]
    fn a_speed_that_halves_is_tracked_within_a_few_chunks() {
        let mut f = LinearFit::default();
        for k in 0..6 {
            let c = 10.0 + k as f64;
            f.observe(c, c / 100.0);
        }
        for k in 0..6 {
            let c = 10.0 + k as f64;
            f.observe(c, c / 50.0);
        }
        let (_, rate) = f.fit().expect("fit");
        assert!(rate < 70.0, "the new speed dominates: {rate}");
    }

    #[test]
    fn transfers_too_short_to_measure_give_a_finite_bandwidth() {
        let mut e = WorkerEstimate::default();
        e.observe(5.0, 0.0, 0.1);
        let w = e.star_worker("a", Some(8.0)).expect("measured");
        assert!(w.bandwidth.is_finite() && w.bandwidth > 0.0);
        assert_eq!(w.memory, Some(8.0));
    }
}
