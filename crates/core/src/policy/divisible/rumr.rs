//! RUMR, robust UMR (Yang & Casanova, HPDC 2003; spec 03 "Beyond the seed"): a first phase of
//! growing UMR rounds over `(1 − φ)·W`, then a second phase of shrinking, factoring-style chunks
//! handed out at run time to whichever worker has room first ([`super::StarMaster`]), so that
//! prediction errors accumulated in phase 1 are absorbed by small chunks at the end.
//!
//! Choices (RUMR's paper sizes phase 2 from the expected error; hetsched keeps that shape):
//! - `φ = min(error, 0.5)`: with no error RUMR is UMR; the tail never takes more than half.
//! - Phase 2 is factoring with factor 2: batches of `N` equal chunks (`N` = UMR's selected
//!   workers), each batch half of what is left, until a chunk would fall below `min_chunk =
//!   max_i max(S_i·cLat_i, B_i·nLat_i)` (a chunk that small spends as long in latencies as in
//!   work), and the rest goes as one last batch of `N` equal chunks.

use super::umr;
use super::{Algo, Plan, PlanError, StarPlatform, TailChunk, predict};

/// The share of the load RUMR leaves to its second phase for an expected `error`.
pub fn tail_share(error: f64) -> f64 {
    error.clamp(0.0, 0.5)
}

/// The RUMR plan for `load`, expecting relative prediction errors of about `error`.
pub fn plan(platform: &StarPlatform, load: f64, error: f64) -> Result<Plan, PlanError> {
    let phi = tail_share(error);
    let head = load * (1.0 - phi);
    let sol = umr::select(platform, head)?;
    let chunks = sol.chunks(head);
    let n = sol.workers.len();
    let min_chunk = sol
        .workers
        .iter()
        .map(|&i| {
            let w = &platform.workers[i];
            (w.speed * w.compute_latency).max(w.bandwidth * w.network_latency)
        })
        .fold(load * 1e-9, f64::max);
    let mut tail = Vec::new();
    let mut left = load - head;
    let mut round = sol.rounds;
    while left > 0.0 {
        let chunk = left / (2 * n) as f64;
        let last = chunk < min_chunk;
        let size = if last { left / n as f64 } else { chunk };
        for _ in 0..n {
            tail.push(TailChunk { round, size });
        }
        left -= size * n as f64;
        round += 1;
        if last {
            break;
        }
    }
    // Make the sizes add up to the load exactly as summed.
    let total = chunks.iter().map(|c| c.size).sum::<f64>() + tail.iter().map(|c| c.size).sum::<f64>();
    if let Some(c) = tail.last_mut() {
        c.size += load - total;
    }
    let mut plan = Plan {
        algo: Algo::Rumr,
        chunks,
        tail,
        tail_workers: sol.workers.clone(),
        predicted_makespan: 0.0,
    };
    plan.predicted_makespan = predict(platform, &plan).makespan;
    Ok(plan)
}

#[cfg(test)]
mod tests {
    use super::super::testing::{Rng, random_platform};
    use super::*;

    #[test]
    fn without_error_rumr_is_umr() {
        let mut rng = Rng(2);
        let p = random_platform(&mut rng);
        let r = plan(&p, 1e5, 0.0).expect("rumr");
        let u = umr::plan(&p, 1e5).expect("umr");
        assert!(r.tail.is_empty());
        assert_eq!(r.chunks, u.chunks);
    }

    #[test]
    fn the_tail_shrinks_and_the_load_adds_up() {
        let mut rng = Rng(4);
        for _ in 0..20 {
            let p = random_platform(&mut rng);
            let w = rng.uniform(1e4, 1e6);
            let r = plan(&p, w, 0.3).expect("rumr");
            assert!(!r.tail.is_empty());
            assert!((r.load() - w).abs() < 1e-6 * w);
            let batches: Vec<f64> = r.tail.chunks(r.tail_workers.len()).map(|b| b[0].size).collect();
            for pair in batches.windows(2).take(batches.len().saturating_sub(2)) {
                assert!(pair[1] < pair[0], "factoring chunks shrink: {batches:?}");
            }
            assert!(r.predicted_makespan >= p.lower_bound(w));
        }
    }
}
