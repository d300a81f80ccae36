//! Online estimation of a worker's platform figures from finished chunks (spec 03, "Beyond the
//! seed": online re-estimation of `S_i`, `B_i`), for the runtime, which knows no declared speeds.
//!
//! Every finished chunk of `c` units gives two observations: its transfer took `t_net` seconds and
//! its compute `t_cpu` seconds. Spec 03's model says `t_net = nLat + c/B` and
//! `t_cpu = cLat + c/S`, both lines in `c`; [`LinearFit`] fits such a line by exponentially
//! weighted least squares, so that the latest chunks count most and a worker whose speed changes
//! mid-job is re-estimated within a few chunks. With one chunk size only, or a fit whose intercept
//! is negative or above half the mean time (noise larger than the latency: one slow process
//! start among two calibration chunks would otherwise read as a huge latency and a huge speed),
//! the line goes through the origin: the rate is `Σc/Σt` and the latency 0.

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
    }

    /// `(latency, rate)` — seconds and units per second — or `None` before any observation.
    pub fn fit(&self) -> Option<(f64, f64)> {
        if self.count == 0 {
            return None;
        }
        let mean_x = self.x / self.w;
        let mean_y = self.y / self.w;
        let var = self.xx / self.w - mean_x * mean_x;
        let cov = self.xy / self.w - mean_x * mean_y;
        // Sizes that differ by less than 1% relative cannot separate the latency from the rate.
        if var > (0.01 * mean_x).powi(2) && cov > 0.0 {
            let slope = cov / var;
            let latency = mean_y - slope * mean_x;
            // A latency above half the mean time says more about noise in a few points (a
            // process that started slowly once) than about the worker: trust the rate instead.
            if latency >= 0.0 && latency <= MAX_LATENCY_SHARE * mean_y {
                return Some((latency, (1.0 / slope).min(MAX_RATE)));
            }
        }
        Some((0.0, (self.x / self.y).min(MAX_RATE)))
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
        // the worker really does about 67 units/s.
        let mut f = LinearFit::default();
        f.observe(6.0, 0.13);
        f.observe(12.0, 0.14);
        let (latency, rate) = f.fit().expect("fit");
        assert_eq!(latency, 0.0);
        // Σc/Σt, the older point weighted by DECAY.
        let expected = (6.0 * DECAY + 12.0) / (0.13 * DECAY + 0.14);
        assert!((rate - expected).abs() < 1e-9, "{rate}");
        assert!(rate < 70.0);
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
