//! `two-phase-traffic`: a T-Storm-like scheduler (Xu et al., ICDCS 2014) — traffic-aware, but in
//! Storm's two phases and with the user's worker count.
//!
//! - **Phase 1, executors → workers**: `K` workers (`--workers`; one per node when not given, at
//!   most the cluster's slots), each holding at most `⌈E / K⌉` executors so work stays balanced as
//!   T-Storm's slots are. Executors go in descending order of their total traffic (in + out; ties:
//!   lower id), each to the worker with room with which it exchanges the most traffic; ties: the
//!   worker with fewer executors, then the lower worker index.
//! - **Phase 2, workers → nodes**: workers in descending order of CPU load (ties: lower index),
//!   each to a node with a free slot and the CPU left to carry it, choosing the node with which
//!   it exchanges the most traffic; ties: the lower relative load, then the lower node index. When
//!   no node with a free slot can carry it, the node with a free slot and the lowest relative load
//!   after adding it.
//!
//! Two workers that land on one node are two processes, so traffic between them is inter-process
//! traffic: the cost spec 04's one-phase scheduling removes.

use super::{
    LOAD_EPSILON, Placement, PlacementError, PlacementProblem, StreamPlacer, least_relative,
};

/// The T-Storm-like two-phase traffic-aware scheduler.
#[derive(Clone, Copy, Debug, Default)]
pub struct TwoPhaseTraffic;

impl StreamPlacer for TwoPhaseTraffic {
    fn name(&self) -> &'static str {
        "two-phase-traffic"
    }

    fn place(&self, problem: &PlacementProblem<'_>) -> Result<Placement, PlacementError> {
        problem.check()?;
        problem.check_pairs(self.name())?;
        let nodes = problem.nodes;
        let total_slots: u64 = nodes.iter().map(|n| u64::from(n.slots)).sum();
        let k = (problem.workers.unwrap_or(nodes.len() as u32) as u64).min(total_slots) as usize;
        if k == 0 {
            return Err(PlacementError::NoSlots);
        }
        let e_count = problem.topology.executor_count();
        let adj = problem.adjacency();
        // Phase 1.
        let room = e_count.div_ceil(k).max(1);
        let mut order: Vec<usize> = (0..e_count).collect();
        let volume: Vec<f64> = adj.iter().map(|l| l.iter().map(|x| x.1).sum()).collect();
        order.sort_by(|&a, &b| volume[b].total_cmp(&volume[a]).then(a.cmp(&b)));
        let mut worker_of = vec![usize::MAX; e_count];
        let mut size = vec![0usize; k];
        let mut with = vec![0.0f64; k];
        for &e in &order {
            for (v, t) in &adj[e] {
                if worker_of[*v] != usize::MAX {
                    with[worker_of[*v]] += t;
                }
            }
            let mut best: Option<usize> = None;
            for w in 0..k {
                if size[w] >= room {
                    continue;
                }
                best = match best {
                    Some(b) if with[b] > with[w] || (with[b] == with[w] && size[b] <= size[w]) => {
                        Some(b)
                    }
                    _ => Some(w),
                };
            }
            let w = best.unwrap_or(0);
            worker_of[e] = w;
            size[w] += 1;
            for (v, _) in &adj[e] {
                if worker_of[*v] != usize::MAX {
                    with[worker_of[*v]] = 0.0;
                }
            }
        }
        // Phase 2.
        let mut wload = vec![0.0; k];
        for e in 0..e_count {
            wload[worker_of[e]] += problem.loads[e];
        }
        // Traffic between workers.
        let mut wtraffic = vec![vec![0.0f64; k]; k];
        for (a, list) in adj.iter().enumerate() {
            for &(b, t) in list {
                if a < b && worker_of[a] != worker_of[b] {
                    wtraffic[worker_of[a]][worker_of[b]] += t;
                    wtraffic[worker_of[b]][worker_of[a]] += t;
                }
            }
        }
        let mut worder: Vec<usize> = (0..k).collect();
        worder.sort_by(|&a, &b| wload[b].total_cmp(&wload[a]).then(a.cmp(&b)));
        let mut node_load = vec![0.0; nodes.len()];
        let mut node_slots_used = vec![0u32; nodes.len()];
        let mut node_of_worker = vec![usize::MAX; k];
        let mut slot_of_worker = vec![0u32; k];
        for &w in &worder {
            let mut best: Option<(f64, f64, usize)> = None;
            for (n, node) in nodes.iter().enumerate() {
                if node_slots_used[n] >= node.slots {
                    continue;
                }
                let avail = node.available();
                if node_load[n] + wload[w] > avail + LOAD_EPSILON * node.capacity {
                    continue;
                }
                let shared: f64 = (0..k)
                    .filter(|&x| node_of_worker[x] == n)
                    .map(|x| wtraffic[w][x])
                    .sum();
                let rel = if avail > 0.0 {
                    node_load[n] / avail
                } else {
                    f64::INFINITY
                };
                if best.is_none_or(|(bs, br, _)| shared > bs || (shared == bs && rel < br)) {
                    best = Some((shared, rel, n));
                }
            }
            let n = match best {
                Some((_, _, n)) => n,
                None => least_relative(
                    nodes,
                    &node_load,
                    (0..nodes.len()).filter(|&n| node_slots_used[n] < nodes[n].slots),
                    wload[w],
                )
                .ok_or(PlacementError::NoSlots)?,
            };
            node_of_worker[w] = n;
            slot_of_worker[w] = node_slots_used[n];
            node_slots_used[n] += 1;
            node_load[n] += wload[w];
        }
        Ok(Placement {
            node: worker_of.iter().map(|&w| node_of_worker[w]).collect(),
            process: worker_of.iter().map(|&w| slot_of_worker[w]).collect(),
        })
    }
}
