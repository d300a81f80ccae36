//! The naive baseline: one round, one chunk per worker, sized so every worker computes for the
//! same time (UMR's `chunk_i = α_i·W + β_i` with `M = 1`; spec 03 "UMR"), all workers used, sent
//! by decreasing link rate. Where a latency would make a chunk negative, chunks are simply
//! proportional to speed.

use super::PlanError;
use super::umr::bandwidth_order;
use super::{Algo, Chunk, Plan, StarPlatform, predict};

/// The static plan for `load`.
pub fn plan(platform: &StarPlatform, load: f64) -> Result<Plan, PlanError> {
    let ws = &platform.workers;
    let ss = platform.total_speed();
    let s_clat: f64 = ws.iter().map(|w| w.speed * w.compute_latency).sum();
    let equal_time: Vec<f64> = ws
        .iter()
        .map(|w| {
            let alpha = w.speed / ss;
            alpha * load + alpha * s_clat - w.speed * w.compute_latency
        })
        .collect();
    let sizes: Vec<f64> = if equal_time.iter().all(|&c| c > 0.0) {
        equal_time
    } else {
        ws.iter().map(|w| load * w.speed / ss).collect()
    };
    let chunks = bandwidth_order(platform)
        .into_iter()
        .map(|i| Chunk {
            round: 0,
            worker: i,
            size: sizes[i],
        })
        .collect();
    let mut plan = Plan {
        algo: Algo::Static,
        chunks,
        tail: Vec::new(),
        tail_load: 0.0,
        tail_workers: Vec::new(),
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
    fn one_chunk_per_worker_all_finishing_their_compute_after_the_same_time() {
        let mut rng = Rng(8);
        let p = random_platform(&mut rng);
        let plan = plan(&p, 1e5).expect("static");
        assert_eq!(plan.chunks.len(), p.workers.len());
        assert!((plan.load() - 1e5).abs() < 1e-6);
        let times: Vec<f64> = plan
            .chunks
            .iter()
            .map(|c| p.compute_time(c.worker, c.size))
            .collect();
        for t in &times {
            assert!((t - times[0]).abs() < 1e-9 * times[0]);
        }
    }
}
