//! The naive baseline: one round, one chunk per worker, sized so every worker computes for the
//! same time (UMR's `chunk_i = α_i·W + β_i` with `M = 1`; spec 03 "UMR"), all workers used, sent
//! by decreasing link rate. Where a latency would make a chunk negative, chunks are simply
//! proportional to speed. Where a chunk would be below one load unit ([`super::min_chunk`]), the
//! worker with the smallest chunk is left out, until every chunk holds a unit.

use super::PlanError;
use super::umr::bandwidth_order;
use super::{Algo, Chunk, Plan, StarPlatform, min_chunk, predict};

/// Chunk sizes of the equal split of `load` over `used` (by worker index; 0 for the others). The
/// sums go in send `order`, so that they round the same whatever the file's order.
fn split(platform: &StarPlatform, order: &[usize], used: &[bool], load: f64) -> Vec<f64> {
    let ws = &platform.workers;
    let on = |i: usize| used[i];
    let ss: f64 = order.iter().filter(|&&i| on(i)).map(|&i| ws[i].speed).sum();
    let s_clat: f64 = order
        .iter()
        .copied()
        .filter(|&i| on(i))
        .map(|i| ws[i].speed * ws[i].compute_latency)
        .sum();
    let equal_time: Vec<f64> = (0..ws.len())
        .map(|i| {
            let w = &ws[i];
            let alpha = w.speed / ss;
            if on(i) {
                alpha * load + alpha * s_clat - w.speed * w.compute_latency
            } else {
                0.0
            }
        })
        .collect();
    if (0..ws.len())
        .filter(|&i| on(i))
        .all(|i| equal_time[i] > 0.0)
    {
        equal_time
    } else {
        (0..ws.len())
            .map(|i| if on(i) { load * ws[i].speed / ss } else { 0.0 })
            .collect()
    }
}

/// The workers the static plan uses, in send order, and every worker's chunk size (by index; 0
/// for a worker left out). UMR weighs the same workers as one of its candidate sets: the static
/// split is UMR's one-round schedule on them where its compute times are equal, so there UMR
/// never plans worse ([`super::umr`]).
fn split_and_workers(platform: &StarPlatform, load: f64) -> (Vec<usize>, Vec<f64>) {
    let unit = min_chunk(load) * (1.0 - 1e-9);
    let mut used = vec![true; platform.workers.len()];
    // Equal chunks: the worker last in send order goes first (not the one last in the file, which
    // made the plan depend on the file's order).
    let order = bandwidth_order(platform);
    let sizes = loop {
        let sizes = split(platform, &order, &used, load);
        let smallest = order
            .iter()
            .rev()
            .copied()
            .filter(|&i| used[i])
            .min_by(|&a, &b| sizes[a].total_cmp(&sizes[b]));
        match smallest {
            Some(i) if sizes[i] < unit && used.iter().filter(|&&u| u).count() > 1 => {
                used[i] = false;
            }
            _ => break sizes,
        }
    };
    let workers = order.into_iter().filter(|&i| used[i]).collect();
    (workers, sizes)
}

/// The workers the static plan for `load` uses, in send order.
pub fn workers(platform: &StarPlatform, load: f64) -> Vec<usize> {
    split_and_workers(platform, load).0
}

/// The static plan for `load`.
pub fn plan(platform: &StarPlatform, load: f64) -> Result<Plan, PlanError> {
    let (workers, sizes) = split_and_workers(platform, load);
    let chunks = workers
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
