//! `resource-aware`: R-Storm (Peng et al., Middleware 2015) as spec 04 describes it.
//!
//! - **Executor order**: components breadth-first from the spouts (spouts in declaration order,
//!   each component's outgoing streams in declaration order; components the search does not reach
//!   follow in declaration order); each component's executors in index order.
//! - **Reference node**: first, the node with the most available CPU in the rack with the most
//!   available CPU (ties: lower index); afterwards, the node that took the previous executor.
//! - **Node choice**: among nodes whose remaining CPU and memory can hold the executor, the one
//!   with the smallest distance
//!   `sqrt(((cpu_left − cpu)/C)² + ((mem_left − mem)/M)² + net(ref, node)²)`, where `C` and `M`
//!   are the largest node CPU capacity and memory (so the dimensions are comparable) and `net` is
//!   0 on the reference node, 0.5 in its rack and 1 elsewhere (R-Storm's network distance).
//!   Ties go to the lower node index. When no node can hold it, the executor goes to the node with
//!   the lowest relative load after adding it.
//! - **Processes**: our choice: all of a topology's executors on one node share one worker
//!   process (process 0), as Storm's resource-aware scheduler packs a node's executors into one
//!   worker when memory allows; so its inter-process traffic is zero like one-phase's.

use super::{
    LOAD_EPSILON, Placement, PlacementError, PlacementProblem, StreamPlacer, least_relative,
};
use crate::model::topology::ComponentKind;
use std::collections::VecDeque;

/// R-Storm's resource-aware scheduler.
#[derive(Clone, Copy, Debug, Default)]
pub struct ResourceAware;

/// Component order: breadth-first from the spouts, then the unreached in declaration order.
pub fn bfs_components(topology: &crate::model::topology::Topology) -> Vec<usize> {
    let c = topology.components.len();
    let mut seen = vec![false; c];
    let mut order = Vec::with_capacity(c);
    let mut queue: VecDeque<usize> = VecDeque::new();
    for (i, comp) in topology.components.iter().enumerate() {
        if comp.kind == ComponentKind::Spout {
            seen[i] = true;
            queue.push_back(i);
        }
    }
    loop {
        while let Some(x) = queue.pop_front() {
            order.push(x);
            for s in topology.streams.iter().filter(|s| s.from == x) {
                if !seen[s.to] {
                    seen[s.to] = true;
                    queue.push_back(s.to);
                }
            }
        }
        match seen.iter().position(|s| !s) {
            Some(i) => {
                seen[i] = true;
                queue.push_back(i);
            }
            None => break,
        }
    }
    order
}

impl StreamPlacer for ResourceAware {
    fn name(&self) -> &'static str {
        "resource-aware"
    }

    fn place(&self, problem: &PlacementProblem<'_>) -> Result<Placement, PlacementError> {
        problem.check()?;
        let nodes = problem.nodes;
        let topo = problem.topology;
        let usable: Vec<usize> = (0..nodes.len()).filter(|&n| nodes[n].slots > 0).collect();
        let mut cpu_used = vec![0.0; nodes.len()];
        let mut mem_used = vec![0u64; nodes.len()];
        let memory = topo.memory();
        let cpu_scale = nodes.iter().map(|n| n.capacity).fold(1e-9, f64::max);
        let mem_scale = nodes
            .iter()
            .map(|n| n.memory_bytes)
            .max()
            .unwrap_or(1)
            .max(1) as f64;
        // Reference node: the rack with the most available CPU, then its node with the most.
        let mut racks: Vec<(u32, f64)> = Vec::new();
        for &n in &usable {
            match racks.iter_mut().find(|(r, _)| *r == nodes[n].rack) {
                Some((_, a)) => *a += nodes[n].available(),
                None => racks.push((nodes[n].rack, nodes[n].available())),
            }
        }
        let best_rack = racks
            .iter()
            .fold(None::<(u32, f64)>, |b, &(r, a)| match b {
                Some((_, ba)) if ba >= a => b,
                _ => Some((r, a)),
            })
            .map(|(r, _)| r);
        let mut reference = usable
            .iter()
            .copied()
            .filter(|&n| Some(nodes[n].rack) == best_rack)
            .fold(None::<usize>, |b, n| match b {
                Some(x) if nodes[x].available() >= nodes[n].available() => b,
                _ => Some(n),
            })
            .ok_or(PlacementError::NoSlots)?;
        let mut placed = vec![usize::MAX; topo.executor_count()];
        for c in bfs_components(topo) {
            let first = topo.first_executor(c).index();
            for e in first..first + topo.components[c].parallelism as usize {
                let (cpu, mem) = (problem.loads[e], memory[e]);
                let mut best: Option<(f64, usize)> = None;
                for &n in &usable {
                    let cpu_left = nodes[n].available() - cpu_used[n];
                    let mem_left = nodes[n].memory_bytes.saturating_sub(mem_used[n]);
                    if cpu_left + LOAD_EPSILON * nodes[n].capacity < cpu || mem_left < mem {
                        continue;
                    }
                    let net = if n == reference {
                        0.0
                    } else if nodes[n].rack == nodes[reference].rack {
                        0.5
                    } else {
                        1.0
                    };
                    let d = (((cpu_left - cpu) / cpu_scale).powi(2)
                        + ((mem_left - mem) as f64 / mem_scale).powi(2)
                        + net * net)
                        .sqrt();
                    if best.is_none_or(|(b, _)| d < b) {
                        best = Some((d, n));
                    }
                }
                let n = match best {
                    Some((_, n)) => n,
                    None => least_relative(nodes, &cpu_used, usable.iter().copied(), cpu)
                        .ok_or(PlacementError::NoSlots)?,
                };
                cpu_used[n] += cpu;
                mem_used[n] += mem;
                placed[e] = n;
                reference = n;
            }
        }
        let process = vec![0; placed.len()];
        Ok(Placement {
            node: placed,
            process,
        })
    }
}
