//! RUMR, robust UMR (Yang & Casanova, HPDC 2003; spec 03 "Beyond the seed"): a first phase of
//! growing UMR rounds over `(1 − φ)·W`, then a second phase of shrinking, factoring-style chunks
//! handed out at run time to whichever worker has room first ([`super::StarMaster`]), so that
//! prediction errors accumulated in phase 1 are absorbed by small chunks at the end.
//!
//! Choices (RUMR's paper sizes phase 2 from the expected error; hetsched keeps that shape):
//! - `φ = min(error, 0.5)`: with no error RUMR is UMR; the tail never takes more than half.
//! - Phase 2 is factoring with factor 2, in time: batches of `N` chunks (`N` = UMR's selected
//!   workers) worth `q = R/(2·ΣS)` seconds of compute each, `R` what is left, so a batch hands out
//!   about half of `R` and a worker of speed `S_i` gets `q·S_i` units (weighted factoring: equal
//!   sizes would leave the slowest worker last). Batches go on until `q` would fall below
//!   `q_min = max_i max(cLat_i, nLat_i·B_i/S_i, 1/S_i)` (a chunk that short spends as long in
//!   latencies as in work, or holds less than one load unit on some worker: no chunk is cut below
//!   a unit, [`super::MIN_CHUNK`]); then one batch of `q = max(R/ΣS, max_i 1/S_i)` takes the
//!   rest (repeated until it is sent), and a remainder below a unit joins the chunk before it. A
//!   tail that would hold less than a unit is none.

use super::umr;
use super::{Algo, MIN_CHUNK, Plan, PlanError, StarPlatform, TailChunk, predict};

/// The share of the load RUMR leaves to its second phase for an expected `error`.
pub fn tail_share(error: f64) -> f64 {
    error.clamp(0.0, 0.5)
}

/// The RUMR plan for `load`, expecting relative prediction errors of about `error`.
pub fn plan(platform: &StarPlatform, load: f64, error: f64) -> Result<Plan, PlanError> {
    let phi = if load * tail_share(error) < MIN_CHUNK {
        0.0
    } else {
        tail_share(error)
    };
    let head = load * (1.0 - phi);
    let sol = umr::select(platform, head)?;
    let chunks = sol.chunks(head);
    let n = sol.workers.len();
    let ss: f64 = sol.workers.iter().map(|&i| platform.workers[i].speed).sum();
    // A unit's compute on the slowest tail worker: no tail chunk is shorter.
    let q_unit = sol
        .workers
        .iter()
        .map(|&i| MIN_CHUNK / platform.workers[i].speed)
        .fold(0.0_f64, f64::max);
    let q_min = sol
        .workers
        .iter()
        .map(|&i| {
            let w = &platform.workers[i];
            w.compute_latency
                .max(w.network_latency * w.bandwidth / w.speed)
        })
        .fold(q_unit, f64::max);
    let tail_load = load - chunks.iter().map(|c| c.size).sum::<f64>();
    let mut tail = Vec::new();
    let mut left = tail_load;
    let mut round = sol.rounds;
    while left > 0.0 {
        let q = left / (2.0 * ss);
        let last = q < q_min || tail.len() > 64 * n;
        let time = if last { (left / ss).max(q_unit) } else { q };
        for _ in 0..n {
            tail.push(TailChunk { round, time });
        }
        left -= time * ss;
        round += 1;
        if last {
            break;
        }
    }
    let mut plan = Plan {
        algo: Algo::Rumr,
        chunks,
        tail,
        tail_load,
        tail_workers: sol.workers.clone(),
        predicted_makespan: 0.0,
    };
    plan.predicted_makespan = predict(platform, &plan).makespan;
    Ok(plan)
}

#[cfg(test)]
mod tests {
    use super::super::StarMaster;
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
    fn the_tail_goes_to_the_worker_with_room_first() {
        let mut rng = Rng(6);
        let p = random_platform(&mut rng);
        let plan = plan(&p, 1e5, 0.3).expect("rumr");
        // Replay with the linear scan of `first_with_room`: the same workers, in the same order.
        let mut m = StarMaster::<f64>::new(p.workers.len());
        let mut fixed = 0;
        let mut scanned = Vec::new();
        let mut driven = Vec::new();
        let _ = plan.drive(&p, &mut m, |m: &mut StarMaster<f64>, _r, i, size| {
            if fixed < plan.chunks.len() {
                fixed += 1;
            } else {
                scanned.push(m.first_with_room(&plan.tail_workers).expect("a worker"));
                driven.push(i);
            }
            m.send(i, size, p.send_time(i, size), p.compute_time(i, size));
            Ok::<(), ()>(())
        });
        assert!(!driven.is_empty());
        assert_eq!(scanned, driven);
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
            let batches: Vec<f64> = r
                .tail
                .chunks(r.tail_workers.len())
                .map(|b| b[0].time)
                .collect();
            for pair in batches.windows(2).take(batches.len().saturating_sub(2)) {
                assert!(pair[1] < pair[0], "factoring chunks shrink: {batches:?}");
            }
            assert!(r.predicted_makespan >= p.lower_bound(w));
        }
    }
}
