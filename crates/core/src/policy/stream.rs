//! Placement of stream topologies on nodes (spec 04): which node, and which worker process on it,
//! runs each executor.
//!
//! | name | what it does |
//! |---|---|
//! | `even` | Storm's default: a user-fixed worker count; executors round-robin over workers, workers round-robin over nodes |
//! | `resource-aware` | R-Storm: executors in breadth-first order from the spouts; each to the node nearest a reference node in (CPU, memory, network) space |
//! | `two-phase-traffic` | T-Storm-like: executors to worker slots by traffic, then slots to nodes by traffic |
//! | `one-phase` | spec 04's best-schedule algorithm with configuration self-tuning: executors straight to nodes, one process per node |
//!
//! A placer is a pure function of a [`PlacementProblem`]: the topology, the nodes, each executor's
//! CPU demand and the executor traffic list (declared rates, or what the [`monitor`] measured).
//! It knows nothing of the simulator or the runtime; both call the same code. [`evaluate`] gives
//! the metrics of spec 04 ("Metrics") for any placement, so placers are compared on one yardstick.
//!
//! Units: a node's CPU capacity is `cores × 100` (per cent of one core) and an executor's load is
//! in the same unit (spec 04, OPEN "load unit"); traffic is in tuples per second. A node is
//! *overloaded* when the load placed on it (plus its background load) exceeds its capacity.
//!
//! Processes are numbered per node from 0 (a Storm supervisor's slots, ports 6700, 6701, …).

pub mod even;
pub mod monitor;
pub mod one_phase;
pub mod reschedule;
pub mod resource_aware;
pub mod two_phase_traffic;

use crate::model::Cluster;
use crate::model::topology::{ExecutorPair, Topology};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;
use thiserror::Error;

/// Relative slack when comparing loads with capacities, so rounding never decides overload.
pub const LOAD_EPSILON: f64 = 1e-9;

/// A node as a stream placer sees it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StreamNode {
    /// Name (host name in the runtime).
    pub name: String,
    /// Rack index (for network distance).
    pub rack: u32,
    /// CPU capacity, `cores × 100`.
    pub capacity: f64,
    /// Load already on the node from other work (same unit), which placements add to.
    pub background: f64,
    /// Memory in bytes the topology's executors may hold there (what other work holds already
    /// left out): a hard limit for `one-phase` and `resource-aware`; `even` and
    /// `two-phase-traffic` ignore it, as Storm's and T-Storm's schedulers do, and
    /// [`PlacementMetrics::memory_overcommitted_nodes`] counts where that overcommits.
    pub memory_bytes: u64,
    /// Worker-process slots.
    pub slots: u32,
}

impl StreamNode {
    /// Capacity left for this topology.
    pub fn available(&self) -> f64 {
        (self.capacity - self.background).max(0.0)
    }
}

/// The placer's view of `cluster` for a topology that `requires` these node attributes, with
/// `slots[i]` worker slots on node `i` (see `input::cluster::parse_cluster_with_slots`) and no
/// background load. A node without every required attribute has no slot: no placer puts a
/// worker there, and nodes keep their positions.
pub fn stream_nodes(cluster: &Cluster, slots: &[u32], requires: &[String]) -> Vec<StreamNode> {
    cluster
        .nodes
        .iter()
        .enumerate()
        .map(|(i, n)| StreamNode {
            name: n.name.clone(),
            rack: n.rack.0,
            capacity: f64::from(n.cores) * 100.0,
            background: 0.0,
            memory_bytes: n.memory_bytes,
            slots: if n.has_attributes(requires) {
                slots
                    .get(i)
                    .copied()
                    .unwrap_or(crate::input::cluster::DEFAULT_SLOTS)
            } else {
                0
            },
        })
        .collect()
}

/// What a placer is asked to place.
#[derive(Clone, Debug)]
pub struct PlacementProblem<'a> {
    /// The topology.
    pub topology: &'a Topology,
    /// The nodes that may run it.
    pub nodes: &'a [StreamNode],
    /// CPU demand of each executor (per cent of one core), indexed by executor id.
    pub loads: Vec<f64>,
    /// The executor traffic list (tuples/s per directed pair).
    pub traffic: Vec<ExecutorPair>,
    /// The user-fixed worker count (`even`, `two-phase-traffic`); `None`: one per node.
    pub workers: Option<u32>,
    /// The placement running now, if any (one-phase's self-tuning starts from it).
    pub previous: Option<&'a Placement>,
}

impl<'a> PlacementProblem<'a> {
    /// The problem with the topology's declared loads and rates.
    pub fn declared(topology: &'a Topology, nodes: &'a [StreamNode]) -> Self {
        Self {
            topology,
            nodes,
            loads: topology.declared_loads(),
            traffic: topology.declared_traffic(),
            workers: None,
            previous: None,
        }
    }

    /// The problem with measured traffic; executor loads follow from it
    /// ([`Topology::loads_from_traffic`]).
    pub fn measured(
        topology: &'a Topology,
        nodes: &'a [StreamNode],
        traffic: Vec<ExecutorPair>,
    ) -> Self {
        Self {
            topology,
            nodes,
            loads: topology.loads_from_traffic(&traffic),
            traffic,
            workers: None,
            previous: None,
        }
    }

    /// Checks the problem is well formed.
    pub fn check(&self) -> Result<(), PlacementError> {
        let n = self.topology.executor_count();
        if self.nodes.is_empty() {
            return Err(PlacementError::NoNodes);
        }
        if self.nodes.iter().all(|x| x.slots == 0) {
            return Err(PlacementError::NoSlots);
        }
        if self.loads.len() != n {
            return Err(PlacementError::Inconsistent(format!(
                "{} loads for {n} executors",
                self.loads.len()
            )));
        }
        if let Some(p) = self
            .traffic
            .iter()
            .find(|p| p.from.index() >= n || p.to.index() >= n)
        {
            return Err(PlacementError::Inconsistent(format!(
                "traffic names executor {} or {}, but the topology has {n}",
                p.from.0, p.to.0
            )));
        }
        if self.workers == Some(0) {
            return Err(PlacementError::ZeroWorkers);
        }
        Ok(())
    }

    /// The undirected traffic between executors: for each executor, its neighbours and the
    /// tuples/s exchanged in both directions together, neighbours in increasing id order.
    pub fn adjacency(&self) -> Vec<Vec<(usize, f64)>> {
        let n = self.topology.executor_count();
        let mut adj: Vec<Vec<(usize, f64)>> = vec![Vec::new(); n];
        for p in &self.traffic {
            let (a, b) = (p.from.index(), p.to.index());
            if a == b || p.tuples_per_s.is_nan() || p.tuples_per_s <= 0.0 {
                continue;
            }
            adj[a].push((b, p.tuples_per_s));
            adj[b].push((a, p.tuples_per_s));
        }
        for list in &mut adj {
            list.sort_by_key(|&(v, _)| v);
            list.dedup_by(|next, kept| {
                if next.0 == kept.0 {
                    kept.1 += next.1;
                    true
                } else {
                    false
                }
            });
        }
        adj
    }
}

/// Where every executor runs: node index and process (slot) number on that node.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Placement {
    /// Node index of each executor, indexed by executor id.
    pub node: Vec<usize>,
    /// Process number on its node of each executor, indexed by executor id.
    pub process: Vec<u32>,
}

impl Placement {
    /// Load placed on each node (without background), for `loads`.
    pub fn node_loads(&self, node_count: usize, loads: &[f64]) -> Vec<f64> {
        let mut l = vec![0.0; node_count];
        for (e, &n) in self.node.iter().enumerate() {
            l[n] += loads.get(e).copied().unwrap_or(0.0);
        }
        l
    }

    /// The distinct nodes used, in increasing order.
    pub fn nodes_used(&self) -> Vec<usize> {
        let mut v = self.node.clone();
        v.sort_unstable();
        v.dedup();
        v
    }
}

/// Spec 04's metrics of one placement.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PlacementMetrics {
    /// Tuples/s between executors on different nodes.
    pub inter_node_traffic: f64,
    /// Tuples/s between executors on one node in different processes.
    pub inter_process_traffic: f64,
    /// Nodes running at least one executor.
    pub nodes_used: usize,
    /// Distinct (node, process) pairs.
    pub processes_used: usize,
    /// Highest node load, background included, in per cent of the node's capacity.
    pub max_node_load: f64,
    /// Nodes loaded above their capacity.
    pub overloaded_nodes: usize,
    /// Nodes given more executors' declared memory than they have (`StreamNode::memory_bytes`).
    #[serde(default)]
    pub memory_overcommitted_nodes: usize,
}

/// Measures `placement` under the problem's loads and traffic.
pub fn evaluate(problem: &PlacementProblem<'_>, placement: &Placement) -> PlacementMetrics {
    let mut inter_node = 0.0;
    let mut inter_process = 0.0;
    for p in &problem.traffic {
        let (a, b) = (p.from.index(), p.to.index());
        if placement.node[a] != placement.node[b] {
            inter_node += p.tuples_per_s;
        } else if placement.process[a] != placement.process[b] {
            inter_process += p.tuples_per_s;
        }
    }
    let loads = placement.node_loads(problem.nodes.len(), &problem.loads);
    let memory = problem.topology.memory();
    let mut mem = vec![0u64; problem.nodes.len()];
    for (e, &n) in placement.node.iter().enumerate() {
        if let (Some(m), Some(&b)) = (mem.get_mut(n), memory.get(e)) {
            *m = m.saturating_add(b);
        }
    }
    let memory_overcommitted = problem
        .nodes
        .iter()
        .zip(&mem)
        .filter(|(node, m)| **m > node.memory_bytes)
        .count();
    let mut max_load: f64 = 0.0;
    let mut overloaded = 0;
    for (n, node) in problem.nodes.iter().enumerate() {
        if placement.node.contains(&n) || loads[n] > 0.0 {
            let total = loads[n] + node.background;
            max_load = max_load.max(if node.capacity > 0.0 {
                total / node.capacity * 100.0
            } else {
                f64::INFINITY
            });
            if total > node.capacity * (1.0 + LOAD_EPSILON) {
                overloaded += 1;
            }
        }
    }
    let mut procs: Vec<(usize, u32)> = placement
        .node
        .iter()
        .zip(&placement.process)
        .map(|(&n, &p)| (n, p))
        .collect();
    procs.sort_unstable();
    procs.dedup();
    PlacementMetrics {
        inter_node_traffic: inter_node,
        inter_process_traffic: inter_process,
        nodes_used: placement.nodes_used().len(),
        processes_used: procs.len(),
        max_node_load: max_load,
        overloaded_nodes: overloaded,
        memory_overcommitted_nodes: memory_overcommitted,
    }
}

/// A placement that cannot be computed.
#[derive(Clone, Debug, Error, PartialEq)]
pub enum PlacementError {
    /// No node to place on.
    #[error("the cluster has no nodes")]
    NoNodes,
    /// Every node has zero worker slots.
    #[error("no node has a worker slot")]
    NoSlots,
    /// A worker count of zero.
    #[error("the worker count must be at least 1")]
    ZeroWorkers,
    /// Loads or traffic do not match the topology.
    #[error("inconsistent problem: {0}")]
    Inconsistent(String),
}

/// A stream placer: decides where every executor of a topology runs.
pub trait StreamPlacer: Send {
    /// The placer's name as users write it (`"one-phase"`).
    fn name(&self) -> &'static str;

    /// Places every executor of `problem.topology`.
    fn place(&self, problem: &PlacementProblem<'_>) -> Result<Placement, PlacementError>;
}

/// The stream placers hetsched ships, by name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum StreamPlacerKind {
    /// Storm's even (round-robin) scheduler.
    Even,
    /// R-Storm's resource-aware scheduler.
    ResourceAware,
    /// T-Storm-like two-phase traffic-aware scheduler.
    TwoPhaseTraffic,
    /// Spec 04's one-phase scheduler with self-tuning.
    OnePhase,
}

/// An unknown placer name.
#[derive(Debug, Error, PartialEq)]
#[error(
    "unknown placer `{0}` (expected one of: even, resource-aware, two-phase-traffic, one-phase)"
)]
pub struct UnknownPlacer(pub String);

impl StreamPlacerKind {
    /// Every placer, baselines first.
    pub const ALL: [StreamPlacerKind; 4] = [
        StreamPlacerKind::Even,
        StreamPlacerKind::ResourceAware,
        StreamPlacerKind::TwoPhaseTraffic,
        StreamPlacerKind::OnePhase,
    ];

    /// The name users write.
    pub fn as_str(self) -> &'static str {
        match self {
            StreamPlacerKind::Even => "even",
            StreamPlacerKind::ResourceAware => "resource-aware",
            StreamPlacerKind::TwoPhaseTraffic => "two-phase-traffic",
            StreamPlacerKind::OnePhase => "one-phase",
        }
    }

    /// A placer of this kind with default settings.
    pub fn build(self) -> Box<dyn StreamPlacer> {
        match self {
            StreamPlacerKind::Even => Box::new(even::Even),
            StreamPlacerKind::ResourceAware => Box::new(resource_aware::ResourceAware),
            StreamPlacerKind::TwoPhaseTraffic => Box::new(two_phase_traffic::TwoPhaseTraffic),
            StreamPlacerKind::OnePhase => Box::new(one_phase::OnePhase::default()),
        }
    }
}

impl fmt::Display for StreamPlacerKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for StreamPlacerKind {
    type Err = UnknownPlacer;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|k| k.as_str() == s)
            .ok_or_else(|| UnknownPlacer(s.to_string()))
    }
}

/// The node, among `candidates`, whose load after adding `extra` is the lowest fraction of its
/// available capacity; ties go to the lower node index. Shared "least overloaded" fallback.
pub(crate) fn least_relative(
    nodes: &[StreamNode],
    load: &[f64],
    candidates: impl Iterator<Item = usize>,
    extra: f64,
) -> Option<usize> {
    let mut best: Option<(f64, usize)> = None;
    for n in candidates {
        let avail = nodes[n].available();
        let r = if avail > 0.0 {
            (load[n] + extra) / avail
        } else {
            f64::INFINITY
        };
        if best.is_none_or(|(b, _)| r < b) {
            best = Some((r, n));
        }
    }
    best.map(|(_, n)| n)
}

/// Worker slots in Storm's even order: slot 0 of every node (in node order), then slot 1 of every
/// node that has one, and so on; the first `k` of them.
pub(crate) fn interleaved_slots(nodes: &[StreamNode], k: usize) -> Vec<(usize, u32)> {
    let max = nodes.iter().map(|n| n.slots).max().unwrap_or(0);
    // Never more than the slots there are: `k` is the user's, 4,000,000,000 reserved 64 GB.
    let total: usize = nodes.iter().map(|n| n.slots as usize).sum();
    let mut out = Vec::with_capacity(k.min(total));
    'rounds: for r in 0..max {
        for (i, n) in nodes.iter().enumerate() {
            if r < n.slots {
                out.push((i, r));
                if out.len() == k {
                    break 'rounds;
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(slots: u32) -> StreamNode {
        StreamNode {
            name: format!("n{slots}"),
            rack: 0,
            capacity: 400.0,
            background: 0.0,
            memory_bytes: 1 << 30,
            slots,
        }
    }

    #[test]
    fn a_worker_count_past_the_slots_takes_every_slot_and_reserves_no_more() {
        // `Vec::with_capacity(k)` before clamping: 4,000,000,000 workers reserved 64 GB, and
        // `usize::MAX` overflows the capacity.
        let nodes = [node(2), node(3)];
        let slots = interleaved_slots(&nodes, usize::MAX);
        assert_eq!(slots, [(0, 0), (1, 0), (0, 1), (1, 1), (1, 2)]);
        assert!(slots.capacity() <= 5);
        assert_eq!(interleaved_slots(&nodes, 3).len(), 3);
    }
}
