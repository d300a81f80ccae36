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
//! CPU demand and the executor traffic (the declared rates, kept per stream, or the pair list the
//! [`monitor`] measured; see [`Traffic`]). `even` and `resource-aware` read no traffic and place
//! any parallelism; `one-phase` and `two-phase-traffic` walk every executor pair that exchanges
//! traffic and take at most [`MAX_TRAFFIC_PAIRS`].
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
use crate::model::topology::{ExecutorPair, Grouping, Topology, Traffic};
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
    /// The executor traffic: per stream for the declared rates (nothing quadratic is built
    /// unless a traffic-aware placer asks for the pairs), or a measured pair list.
    pub traffic: Traffic,
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
        Self::with_traffic(topology, nodes, Traffic::Pairs(traffic))
    }

    /// The problem under `traffic` in either form (a pair list, or per-stream rates such as
    /// [`Topology::traffic_scaled`]'s); executor loads follow from it ([`Topology::loads_under`]).
    pub fn with_traffic(topology: &'a Topology, nodes: &'a [StreamNode], traffic: Traffic) -> Self {
        Self {
            topology,
            nodes,
            loads: topology.loads_under(&traffic),
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
        match &self.traffic {
            Traffic::Pairs(pairs) => {
                if let Some(p) = pairs
                    .iter()
                    .find(|p| p.from.index() >= n || p.to.index() >= n)
                {
                    return Err(PlacementError::Inconsistent(format!(
                        "traffic names executor {} or {}, but the topology has {n}",
                        p.from.0, p.to.0
                    )));
                }
            }
            Traffic::Streams(streams) => {
                let c = self.topology.components.len();
                if let Some(s) = streams.iter().find(|s| s.from >= c || s.to >= c) {
                    return Err(PlacementError::Inconsistent(format!(
                        "traffic names component {} or {}, but the topology has {c}",
                        s.from, s.to
                    )));
                }
            }
        }
        if self.workers == Some(0) {
            return Err(PlacementError::ZeroWorkers);
        }
        Ok(())
    }

    /// The undirected traffic between executors: for each executor, its neighbours and the
    /// tuples/s exchanged in both directions together, neighbours in increasing id order
    /// ([`Traffic::adjacency`]). As large as the executor pairs: callers check
    /// [`PlacementProblem::check_pairs`] first.
    pub fn adjacency(&self) -> Vec<Vec<(usize, f64)>> {
        self.traffic.adjacency(self.topology)
    }

    /// For a placer that walks every executor pair (`one-phase`, `two-phase-traffic`): refuses a
    /// problem with more than [`MAX_TRAFFIC_PAIRS`] pairs carrying traffic, naming the streams
    /// that make them, rather than take memory and time quadratic in the parallelism.
    pub fn check_pairs(&self, placer: &str) -> Result<(), PlacementError> {
        let pairs = self.traffic.pair_count(self.topology);
        if pairs <= MAX_TRAFFIC_PAIRS {
            return Ok(());
        }
        let comps = &self.topology.components;
        let by_stream = self.traffic.pairs_by_stream(self.topology);
        let streams = if by_stream.is_empty() {
            "a measured traffic list".to_string()
        } else {
            let mut shown: Vec<String> = by_stream
                .iter()
                .take(4)
                .map(|(s, n)| {
                    let (p, q) = (comps[s.from].parallelism, comps[s.to].parallelism);
                    let grouping = match s.grouping {
                        Grouping::Shuffle => "shuffle",
                        Grouping::Fields => "fields",
                        Grouping::All => "all",
                        Grouping::Global => "global",
                    };
                    format!(
                        "`{}` -> `{}` ({grouping}, {p} x {q} executors: {} pairs)",
                        comps[s.from].name,
                        comps[s.to].name,
                        thousands(*n)
                    )
                })
                .collect();
            if by_stream.len() > 4 {
                shown.push(format!("{} more", by_stream.len() - 4));
            }
            let noun = if by_stream.len() == 1 {
                "stream"
            } else {
                "streams"
            };
            format!("{noun} {}", shown.join(", "))
        };
        Err(PlacementError::TooManyPairs {
            placer: placer.to_string(),
            pairs,
            streams,
        })
    }
}

/// Most executor pairs carrying traffic a traffic-aware placer (`one-phase`,
/// `two-phase-traffic`) takes: they walk every pair (spec 04's best-schedule sorts the pair
/// list), about 60 bytes and a few hundred nanoseconds each. A shuffle, fields or all grouping
/// joins every executor of one component to every executor of the next, so the pairs grow with
/// the product of their parallelisms: 4,000,000 is two components of 2,000 executors, or
/// 25 × 160,000. `even` and `resource-aware` never look at pairs and place up to
/// [`crate::input::topology::MAX_TOPOLOGY_EXECUTORS`] executors whatever the groupings.
pub const MAX_TRAFFIC_PAIRS: u64 = 4_000_000;

/// `n` with thousands separated by commas.
fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, ch) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(ch);
    }
    out
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
    let (inter_node, inter_process) = match &problem.traffic {
        Traffic::Pairs(pairs) => {
            let mut inter_node = 0.0;
            let mut inter_process = 0.0;
            for p in pairs {
                let (a, b) = (p.from.index(), p.to.index());
                if placement.node[a] != placement.node[b] {
                    inter_node += p.tuples_per_s;
                } else if placement.process[a] != placement.process[b] {
                    inter_process += p.tuples_per_s;
                }
            }
            (inter_node, inter_process)
        }
        Traffic::Streams(streams) => stream_cut(problem.topology, streams, placement),
    };
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

/// Inter-node and inter-process traffic of `placement` under per-stream traffic, without
/// listing pairs: a stream's rate per pair is uniform over its receivers (module docs of
/// [`crate::model::topology`]), so each stream counts, over its senders, the receivers on
/// another node and those on the sender's node in another process (integers), and adds
/// `rate per pair × count`. O(executors × streams), where the pair list is quadratic; the
/// sums equal the pair list's up to rounding (they are more exact: one product per stream).
fn stream_cut(
    topology: &Topology,
    streams: &[crate::model::topology::Stream],
    placement: &Placement,
) -> (f64, f64) {
    use std::collections::HashMap;
    let comps = &topology.components;
    let mut first = Vec::with_capacity(comps.len());
    let mut next = 0usize;
    for c in comps {
        first.push(next);
        next += c.parallelism as usize;
    }
    // Per receiving component: its executors per node and per (node, process).
    type Counts = (HashMap<usize, u64>, HashMap<(usize, u32), u64>);
    let mut counts: HashMap<usize, Counts> = HashMap::new();
    let (mut inter_node, mut inter_process) = (0.0, 0.0);
    for s in streams {
        if s.rate.is_nan() || s.rate <= 0.0 || s.from >= comps.len() || s.to >= comps.len() {
            continue;
        }
        let (f0, p) = (first[s.from], comps[s.from].parallelism as usize);
        let (t0, q) = (first[s.to], comps[s.to].parallelism as usize);
        let (mut off_node, mut off_process) = (0u64, 0u64);
        let per_pair = match s.grouping {
            Grouping::Global => {
                let (rn, rp) = (placement.node[t0], placement.process[t0]);
                for a in f0..f0 + p {
                    if placement.node[a] != rn {
                        off_node += 1;
                    } else if placement.process[a] != rp {
                        off_process += 1;
                    }
                }
                s.rate
            }
            Grouping::Shuffle | Grouping::Fields | Grouping::All => {
                let (per_node, per_process) = counts.entry(s.to).or_insert_with(|| {
                    let mut per_node: HashMap<usize, u64> = HashMap::new();
                    let mut per_process: HashMap<(usize, u32), u64> = HashMap::new();
                    for b in t0..t0 + q {
                        *per_node.entry(placement.node[b]).or_default() += 1;
                        *per_process
                            .entry((placement.node[b], placement.process[b]))
                            .or_default() += 1;
                    }
                    (per_node, per_process)
                });
                for a in f0..f0 + p {
                    let (n, pr) = (placement.node[a], placement.process[a]);
                    let same_node = per_node.get(&n).copied().unwrap_or(0);
                    let same_process = per_process.get(&(n, pr)).copied().unwrap_or(0);
                    off_node += q as u64 - same_node;
                    off_process += same_node - same_process;
                }
                if s.grouping == Grouping::All {
                    s.rate
                } else {
                    s.rate / q as f64
                }
            }
        };
        inter_node += per_pair * off_node as f64;
        inter_process += per_pair * off_process as f64;
    }
    (inter_node, inter_process)
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
    /// More executor pairs carry traffic than a traffic-aware placer takes
    /// ([`MAX_TRAFFIC_PAIRS`]).
    #[error(
        "{placer} looks at every executor pair that exchanges traffic, and this topology has {} \
         of them (at most {}), from {streams}: lower those components' parallelism (or use \
         `global` groupings), or place it with `even` or `resource-aware`, which do not look at \
         pairs",
        thousands(*pairs),
        thousands(MAX_TRAFFIC_PAIRS)
    )]
    TooManyPairs {
        /// The placer's name.
        placer: String,
        /// Executor pairs carrying traffic.
        pairs: u64,
        /// The streams that make most of them, as users write them.
        streams: String,
    },
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

    /// Whether placers of this kind walk every executor pair that exchanges traffic (and so
    /// take at most [`MAX_TRAFFIC_PAIRS`] of them): `one-phase` and `two-phase-traffic`.
    pub fn walks_pairs(self) -> bool {
        matches!(
            self,
            StreamPlacerKind::OnePhase | StreamPlacerKind::TwoPhaseTraffic
        )
    }

    /// [`PlacementProblem::check_pairs`] of `topology` at its declared rates for this kind (`Ok`
    /// for a kind that does not walk pairs), without nodes: what a submission can check before
    /// any node is there to place on.
    pub fn check_pairs(self, topology: &Topology) -> Result<(), PlacementError> {
        if !self.walks_pairs() {
            return Ok(());
        }
        PlacementProblem::declared(topology, &[]).check_pairs(self.as_str())
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
            .ok_or_else(|| UnknownPlacer(crate::text::clip(s)))
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
