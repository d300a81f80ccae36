//! `one-phase`: spec 04's cluster-adaptive scheduler — configuration self-tuning (Figure 3), then
//! the best-schedule algorithm (Figure 4), executors straight to nodes, and one worker process per
//! node for the topology (so intra-node traffic is shared memory only).
//!
//! ## Configuration self-tuning (spec 04, Figure 3)
//! A *configuration* is the set of nodes allowed to run the topology and each node's maximum load
//! (the patent's "maximum runnable executor count", in spec 04's OPEN load unit: per cent of one
//! core). The user gives no worker count.
//! - **First allocation** (no `previous` placement, or one that does not fit the problem): every
//!   node with a slot and available CPU, each allowed `max_utilisation × available`. When the
//!   total demand `D` exceeds the sum of these limits, the excess is spread over the nodes in
//!   proportion to their available CPU (their headroom), raising each node's limit accordingly.
//! - **Later allocations** (`previous` given): the nodes that ran the topology (`m` of them) are
//!   ranked by available CPU (ties: lower index). The tuner tries to **halve** the count, i.e. to
//!   schedule on the best `⌈m/2⌉` of them; a try succeeds when best-schedule places everything
//!   within the limits. When halving fails we search (bisection) for the smallest count between
//!   `⌈m/2⌉` and `m` that succeeds — our reading of "try to halve", so that repeated
//!   rescheduling converges instead of stopping at the first failed halving. On the chosen nodes
//!   each limit is `max_utilisation × available`, so the least-loaded rule spreads executors in
//!   proportion to CPU. If the previous nodes cannot carry `D` any more (rates grew), tuning
//!   starts again from the first-allocation rule.
//!
//! ## Best-schedule (spec 04, Figure 4), with every tie rule
//! - The executor traffic list is made undirected (both directions of a pair summed) and sorted
//!   by **descending traffic**; ties by (lower id, higher id) of the pair, ascending.
//! - A node *can carry* a load `x` when its placed load plus `x` is at most its limit.
//! - `leastLoadedNode(x)`: among the configuration's nodes that can carry `x`, the one with the
//!   lowest placed load relative to its available CPU (relative, because nodes differ); ties:
//!   the most room left under its limit (so an empty cluster is packed from its largest node),
//!   then the lower node index. When no node can carry `x`, the fallback for a *single* executor is the
//!   configuration node with the lowest relative load after adding `x` (the overload is then
//!   unavoidable for the greedy pass and is handled by the repair below).
//! - **Neither executor placed**, no `lastUsedNode`: both on `leastLoadedNode(l1 + l2)` if there
//!   is one (it becomes `lastUsedNode`); otherwise e1 on `leastLoadedNode(l1)` and then e2 on
//!   `leastLoadedNode(l2)`, and e2's node becomes `lastUsedNode`.
//! - **Neither placed**, `lastUsedNode` exists: both there if it can carry `l1 + l2`; else both on
//!   `leastLoadedNode(l1 + l2)` (it becomes `lastUsedNode`); else apart: each on `lastUsedNode` if
//!   it can carry that executor, otherwise on `leastLoadedNode` of it; e2's node becomes
//!   `lastUsedNode`.
//! - **At least one placed** (both placed included): `nodeList` = the nodes of the placed
//!   executor(s) (e1's first), then `leastLoadedNode(max(l1, l2))` and `lastUsedNode` if not
//!   already there. Every plan (e1 → n1, e2 → n2) with n1, n2 in `nodeList` — both on one node,
//!   or on two — is tried, *placed executors included*: the patent (seed text, Figure 4) says
//!   "try to assign e1, e2 to any one or two nodes of nodeList", and lists executor removal
//!   among the scheduler's basic operations; spec 04's restatement "the unplaced executor(s)"
//!   leaves "one or two nodes" without meaning, so we follow the original. A plan is allowed
//!   when every node whose load grows stays within its limit. Its cost is the inter-node
//!   traffic of e1 and e2 with the placed executors and with each other; the minimum wins;
//!   ties prefer a plan that uses `lastUsedNode`, then fewer moved executors, then `nodeList`
//!   order (n1 first). e2's node in the plan (the one assigned last) becomes `lastUsedNode`.
//!   If no plan is allowed (the unplaced executor fits on no node of `nodeList`), the placed
//!   one stays and the other goes on `leastLoadedNode` of its load (or the fallback), which
//!   becomes `lastUsedNode`.
//! - Executors in no pair are placed last, in id order, on `leastLoadedNode` of their load;
//!   `lastUsedNode` does not change.
//! - Afterwards each node's executors form one process (process 0).
//! - Executors' per-node traffic is kept incrementally (`NodeTraffic`), so a pair step costs
//!   O(|nodeList|²) and the pass O(traffic list + executors × nodes).
//!
//! ## Refinement (hetsched's addition beyond the patent; `Refine::LocalSearch`, the default)
//! Best-schedule is a one-pass greedy: on uniform or nearly uniform traffic the descending order
//! carries little information and it can end worse than Storm's round-robin (a property test
//! found all-to-all traffic of equal weight where it sent 47 tuples/s between nodes against
//! even's 42). After best-schedule, on the chosen configuration, a deterministic local search
//! runs: sweeps of (1) every executor in id order moving to the configuration node that saves
//! the most inter-node traffic (ties: lower node index), then (2) every executor `a` in id order
//! swapping with the executor `b` on another node B that saves the most (ties: lower id of
//! `b`), where `a` must gain by moving to B alone (a swap can only help if one side wants to
//! move). A step is taken only if it saves more than 10⁻⁹ of the total traffic (strict, so the
//! search ends) and no node whose load grows ends above its limit; the processes stay one per
//! node. Sweeps repeat until one changes nothing, at most `REFINE_MAX_SWEEPS`.
//! Local search alone still loses to round-robin on tightly packed, near-uniform all-to-all
//! traffic (shrunk counterexample: 14 executors of 15–48 % with `all` groupings on two 3-core
//! nodes at 87–88 %: single moves are blocked by the limits and one-for-one swaps cannot
//! rebalance; 31 vs even's 26 tuples/s). So the search runs from a second start too — the
//! executors round-robin over the configuration's nodes in index order, Storm's even order,
//! if that fits the limits — and the lower-traffic result wins (ties: best-schedule's start).
//! Hence on a first allocation one-phase never sends more traffic between nodes than `even`
//! with one worker per node whenever even's placement stays within one-phase's limits.
//! `Refine::None`
//! (CLI `--refine none`) keeps the patent's algorithm alone.
//!
//! ## Repair (ours, beyond the patent)
//! Greedy packing can overload a node when a packing without overload exists. Then executors are
//! moved off overloaded nodes, one at a time — the move (executor, target node that can take it
//! within its available CPU) adding the least inter-node traffic; ties: lower executor id, then
//! lower node index. If a node is still overloaded and first-fit-decreasing (executors by
//! descending load, ties lower id; nodes in index order) finds a packing without overload, that
//! packing is used. So a placement overloads a node only when first-fit-decreasing cannot avoid it
//! either (bin packing is NP-hard; first-fit-decreasing is our feasibility test).

use serde::{Deserialize, Serialize};

use super::{
    LOAD_EPSILON, Placement, PlacementError, PlacementProblem, StreamNode, StreamPlacer,
    least_relative,
};

/// The one-phase scheduler's settings.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct OnePhase {
    /// The fraction of a node's available CPU the tuner lets the topology use (0 < x ≤ 1): the
    /// headroom that keeps a measured-rate wobble from overloading a packed node. 1.0 packs to
    /// capacity, as the patent does. Default 0.9; CLI `--max-utilisation`. Lower limits spread
    /// the topology over more nodes (more inter-node traffic) and leave room for rate surges
    /// (`docs/results/streams.md`, "Choosing the utilisation limit").
    pub max_utilisation: f64,
    /// What runs after best-schedule: [`Refine::LocalSearch`] (default) or nothing
    /// ([`Refine::None`], the patent's algorithm alone). CLI `--refine`.
    pub refine: Refine,
}

impl Default for OnePhase {
    fn default() -> Self {
        Self {
            max_utilisation: 0.9,
            refine: Refine::LocalSearch,
        }
    }
}

impl OnePhase {
    /// The patent's algorithm alone (no refinement), at `max_utilisation`.
    pub fn exact(max_utilisation: f64) -> Self {
        Self {
            max_utilisation,
            refine: Refine::None,
        }
    }
}

/// The refinement step one-phase runs after spec 04's best-schedule (hetsched's addition).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Refine {
    /// None: the placement is best-schedule's (spec 04, Figure 4, as written).
    None,
    /// Local search: single-executor moves and pairwise swaps between the configuration's
    /// nodes that strictly reduce inter-node traffic within every node's limit.
    #[default]
    LocalSearch,
}

impl Refine {
    /// The name users write (`none`, `local-search`).
    pub fn as_str(self) -> &'static str {
        match self {
            Refine::None => "none",
            Refine::LocalSearch => "local-search",
        }
    }
}

impl std::fmt::Display for Refine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Refine {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "none" => Ok(Refine::None),
            "local-search" => Ok(Refine::LocalSearch),
            _ => Err(format!(
                "unknown refinement `{s}` (expected one of: none, local-search)"
            )),
        }
    }
}

/// Which nodes may run the topology and up to what load (spec 04, Figure 3).
#[derive(Clone, Debug, PartialEq)]
pub struct Configuration {
    /// Allowed nodes, in increasing index order.
    pub nodes: Vec<usize>,
    /// Load limit of every node (indexed by node; 0 for nodes not allowed).
    pub limit: Vec<f64>,
}

struct Pass<'p, 'a> {
    problem: &'p PlacementProblem<'a>,
    adj: &'p [Vec<(usize, f64)>],
    config: &'p Configuration,
    load: Vec<f64>,
    /// Memory of each executor (bytes, declared), placed on each node so far, and each node's.
    memory: Vec<u64>,
    mem: Vec<u64>,
    mem_cap: Vec<u64>,
    node_of: Vec<Option<usize>>,
    /// Per-node traffic of each executor with its *placed* neighbours ([`NodeTraffic`]).
    traffic: NodeTraffic,
    /// Whether some executor had to go above its node's limit.
    exceeded: bool,
}

/// For every executor `e` and configuration node `k`, the tuples/s `e` exchanges with the
/// executors placed on `k` (`on[e][k]`), and with all placed executors (`placed[e]`), kept up to
/// date as executors are placed and moved. The cut of `e` on node `k` is
/// `placed[e] − on[e][k]`, in O(1) — which keeps the pair step and the refinement linear in the
/// traffic list.
struct NodeTraffic {
    /// Compact index of each node in the configuration (`usize::MAX`: not allowed).
    slot: Vec<usize>,
    width: usize,
    on: Vec<f64>,
    placed: Vec<f64>,
}

impl NodeTraffic {
    fn new(config: &Configuration, node_count: usize, executors: usize) -> Self {
        let mut slot = vec![usize::MAX; node_count];
        for (k, &n) in config.nodes.iter().enumerate() {
            slot[n] = k;
        }
        let width = config.nodes.len();
        Self {
            slot,
            width,
            on: vec![0.0; executors * width],
            placed: vec![0.0; executors],
        }
    }

    /// Tuples/s between `e` and the placed executors on node `n`.
    fn on(&self, e: usize, n: usize) -> f64 {
        match self.slot.get(n) {
            Some(&k) if k != usize::MAX => self.on[e * self.width + k],
            _ => 0.0,
        }
    }

    /// `e`'s neighbours see it arrive on (`sign` = 1) or leave (`sign` = −1) node `n`.
    fn update(&mut self, adj: &[Vec<(usize, f64)>], e: usize, n: usize, sign: f64) {
        let k = self.slot.get(n).copied().unwrap_or(usize::MAX);
        for &(v, t) in &adj[e] {
            self.placed[v] += sign * t;
            if k != usize::MAX {
                self.on[v * self.width + k] += sign * t;
            }
        }
    }
}

impl<'p, 'a> Pass<'p, 'a> {
    fn new(
        problem: &'p PlacementProblem<'a>,
        adj: &'p [Vec<(usize, f64)>],
        config: &'p Configuration,
    ) -> Self {
        let executors = problem.topology.executor_count();
        Self {
            problem,
            adj,
            config,
            load: vec![0.0; problem.nodes.len()],
            memory: problem.topology.memory(),
            mem: vec![0; problem.nodes.len()],
            mem_cap: problem.nodes.iter().map(|n| n.memory_bytes).collect(),
            node_of: vec![None; executors],
            traffic: NodeTraffic::new(config, problem.nodes.len(), executors),
            exceeded: false,
        }
    }

    /// Whether node `n` can carry `x` more load and `m` more bytes of memory. (The hot loop of
    /// `leastLoadedNode`: executors that declare no memory skip the memory check.)
    fn can_carry(&self, n: usize, x: f64, m: u64) -> bool {
        fits(self.config.limit[n], self.load[n] + x)
            && (m == 0 || self.mem[n].saturating_add(m) <= self.mem_cap[n])
    }

    fn least_loaded(&self, x: f64, m: u64) -> Option<usize> {
        let nodes = self.problem.nodes;
        let mut best: Option<(f64, f64, usize)> = None;
        for &n in &self.config.nodes {
            if !fits(self.config.limit[n], self.load[n] + x) {
                continue;
            }
            let r = self.load[n] / nodes[n].available().max(f64::MIN_POSITIVE);
            let free = self.config.limit[n] - self.load[n];
            // The memory check only for a node that would win: this loop runs for every pair
            // (O(P·N)), and checking every node's memory cost a third of the pass.
            if best.is_none_or(|(br, bf, _)| r < br || (r == br && free > bf))
                && self.can_carry(n, x, m)
            {
                best = Some((r, free, n));
            }
        }
        best.map(|(_, _, n)| n)
    }

    /// `leastLoadedNode(x)`, or the least-overloaded fallback (marking the pass as exceeded).
    fn least_loaded_or_fallback(&mut self, x: f64, m: u64) -> usize {
        match self.least_loaded(x, m) {
            Some(n) => n,
            None => {
                self.exceeded = true;
                least_relative(
                    self.problem.nodes,
                    &self.load,
                    self.config.nodes.iter().copied(),
                    x,
                )
                .unwrap_or(0)
            }
        }
    }

    fn put(&mut self, e: usize, n: usize) {
        self.node_of[e] = Some(n);
        self.load[n] += self.problem.loads[e];
        self.mem[n] += self.memory[e];
        self.traffic.update(self.adj, e, n, 1.0);
    }

    fn lift(&mut self, e: usize) {
        if let Some(n) = self.node_of[e].take() {
            self.load[n] -= self.problem.loads[e];
            self.mem[n] -= self.memory[e];
            self.traffic.update(self.adj, e, n, -1.0);
        }
    }

    /// Inter-node traffic between `e` on node `n` and its placed neighbours other than `other`
    /// (whose traffic with `e` is `t`).
    fn cut_without(&self, e: usize, n: usize, other: usize, t: f64) -> f64 {
        let (mut all, mut here) = (self.traffic.placed[e], self.traffic.on(e, n));
        if let Some(m) = self.node_of[other] {
            all -= t;
            if m == n {
                here -= t;
            }
        }
        all - here
    }

    /// The "at least one placed" step of Figure 4: every plan (e1 → n1, e2 → n2) with n1, n2 in
    /// `nodeList` (one node or two), placed executors included — they may move.
    fn pair_step(&mut self, a: usize, b: usize, t: f64, last: &mut Option<usize>) {
        let loads = &self.problem.loads;
        let (la, lb) = (loads[a], loads[b]);
        let mut list: Vec<usize> = Vec::with_capacity(4);
        for n in [
            self.node_of[a],
            self.node_of[b],
            self.least_loaded(la.max(lb), self.memory[a].max(self.memory[b])),
            *last,
        ]
        .into_iter()
        .flatten()
        {
            if !list.contains(&n) {
                list.push(n);
            }
        }
        let current = [self.node_of[a], self.node_of[b]];
        // Each executor's cut on each node of the list, computed once (O(1) each).
        let mut cut_a = [0.0; 4];
        let mut cut_b = [0.0; 4];
        for (i, &n) in list.iter().enumerate() {
            cut_a[i] = self.cut_without(a, n, b, t);
            cut_b[i] = self.cut_without(b, n, a, t);
        }
        // (cost, uses lastUsedNode, executors moved, n1, n2) of the best plan so far.
        let mut best: Option<(f64, bool, u8, usize, usize)> = None;
        for (i, &n1) in list.iter().enumerate() {
            for (j, &n2) in list.iter().enumerate() {
                let cost = cut_a[i] + cut_b[j] + if n1 != n2 { t } else { 0.0 };
                let uses_last = last.is_some_and(|l| l == n1 || l == n2);
                let moved = u8::from(current[0].is_some_and(|c| c != n1))
                    + u8::from(current[1].is_some_and(|c| c != n2));
                let better = match best {
                    None => true,
                    Some((bc, bl, bm, _, _)) => {
                        cost < bc
                            || (cost == bc && uses_last && !bl)
                            || (cost == bc && uses_last == bl && moved < bm)
                    }
                };
                // Whether the plan fits is asked only of one that would win (it is the costly
                // part of the step).
                if better && self.plan_fits(a, n1, b, n2) {
                    best = Some((cost, uses_last, moved, n1, n2));
                }
            }
        }
        match best {
            Some((_, _, _, n1, n2)) => {
                for (e, n) in [(a, n1), (b, n2)] {
                    if self.node_of[e] != Some(n) {
                        self.lift(e);
                        self.put(e, n);
                    }
                }
                *last = Some(n2);
            }
            None => {
                // Only when the unplaced executor fits on no node of nodeList: it goes on
                // leastLoadedNode of its own load (or the fallback); the placed one stays.
                let u = if self.node_of[a].is_none() { a } else { b };
                let n = self.least_loaded_or_fallback(loads[u], self.memory[u]);
                self.put(u, n);
                *last = Some(n);
            }
        }
    }

    /// Whether moving/placing `a` on `n1` and `b` on `n2` keeps every node whose load or
    /// memory grows within its limit.
    fn plan_fits(&self, a: usize, n1: usize, b: usize, n2: usize) -> bool {
        let loads = &self.problem.loads;
        if self.memory[a] == 0 && self.memory[b] == 0 {
            // No memory to place: loads alone decide (the common case, and a hot one).
            let delta = |n: usize| {
                let mut d = 0.0;
                for (e, to) in [(a, n1), (b, n2)] {
                    if to == n {
                        d += loads[e];
                    }
                    if self.node_of[e] == Some(n) {
                        d -= loads[e];
                    }
                }
                d
            };
            return [n1, n2].into_iter().all(|n| {
                let d = delta(n);
                d <= 0.0 || fits(self.config.limit[n], self.load[n] + d)
            });
        }
        // (load, memory) node `n` gains under the plan; memory signed.
        let delta = |n: usize| {
            let (mut d, mut m) = (0.0, 0i128);
            for (e, to) in [(a, n1), (b, n2)] {
                if to == n {
                    d += loads[e];
                    m += i128::from(self.memory[e]);
                }
                if self.node_of[e] == Some(n) {
                    d -= loads[e];
                    m -= i128::from(self.memory[e]);
                }
            }
            (d, m)
        };
        [n1, n2].into_iter().all(|n| {
            let (d, m) = delta(n);
            let grows = u64::try_from(m.max(0)).unwrap_or(u64::MAX);
            (d <= 0.0 || fits(self.config.limit[n], self.load[n] + d))
                && (grows == 0 || self.mem[n].saturating_add(grows) <= self.mem_cap[n])
        })
    }

    fn run(mut self, pairs: &[(usize, usize, f64)]) -> (Vec<usize>, Vec<f64>, bool) {
        let loads = &self.problem.loads;
        let mut last: Option<usize> = None;
        for &(a, b, t) in pairs {
            let (la, lb) = (loads[a], loads[b]);
            let (ma, mb) = (self.memory[a], self.memory[b]);
            match (self.node_of[a], self.node_of[b]) {
                (None, None) => match last {
                    Some(u) if self.can_carry(u, la + lb, ma.saturating_add(mb)) => {
                        self.put(a, u);
                        self.put(b, u);
                    }
                    _ => {
                        if let Some(n) = self.least_loaded(la + lb, ma.saturating_add(mb)) {
                            self.put(a, n);
                            self.put(b, n);
                            last = Some(n);
                        } else {
                            for e in [a, b] {
                                let n = match last {
                                    Some(u) if self.can_carry(u, loads[e], self.memory[e]) => u,
                                    _ => self.least_loaded_or_fallback(loads[e], self.memory[e]),
                                };
                                self.put(e, n);
                                if e == b {
                                    last = Some(n);
                                }
                            }
                        }
                    }
                },
                _ => self.pair_step(a, b, t, &mut last),
            }
        }
        for (e, &load) in loads.iter().enumerate() {
            if self.node_of[e].is_none() {
                let n = self.least_loaded_or_fallback(load, self.memory[e]);
                self.put(e, n);
            }
        }
        let nodes = self.node_of.iter().map(|n| n.unwrap_or(0)).collect();
        (nodes, self.load, self.exceeded)
    }
}

/// Whether a node with limit `limit` may carry `load` (with [`LOAD_EPSILON`] slack).
fn fits(limit: f64, load: f64) -> bool {
    load <= limit + LOAD_EPSILON * limit.max(1.0)
}

/// Whether `node` holds `bytes` of executors' declared memory: a hard limit, never raised by
/// the self-tuning (a node short of memory fails its executors, a busy CPU only slows them).
fn memory_fits(node: &StreamNode, bytes: u64) -> bool {
    bytes <= node.memory_bytes
}

/// The refinement after best-schedule (hetsched's addition, see the module docs): a
/// deterministic local search of single-executor moves and pairwise swaps between the
/// configuration's nodes, each strictly reducing inter-node traffic, no node whose load grows
/// going above its limit; to a fixed point or [`REFINE_MAX_SWEEPS`] sweeps.
fn refine(
    problem: &PlacementProblem<'_>,
    adj: &[Vec<(usize, f64)>],
    config: &Configuration,
    placed: &mut [usize],
) {
    let nodes = problem.nodes;
    let loads = &problem.loads;
    let memory = problem.topology.memory();
    let executors = placed.len();
    if config.nodes.len() < 2 || executors < 2 {
        return;
    }
    let mut traffic = NodeTraffic::new(config, nodes.len(), executors);
    let mut load = vec![0.0; nodes.len()];
    let mut mem = vec![0u64; nodes.len()];
    let mut members: Vec<Vec<usize>> = vec![Vec::new(); nodes.len()];
    for (e, &n) in placed.iter().enumerate() {
        traffic.update(adj, e, n, 1.0);
        load[n] += loads[e];
        mem[n] += memory[e];
        members[n].push(e);
    }
    let total: f64 = traffic.placed.iter().sum::<f64>() / 2.0;
    // A step must save more than this: strict improvement, immune to rounding, so the search
    // ends.
    let min_gain = 1e-9 * total.max(1.0);
    let weight = |a: usize, b: usize| {
        adj[a]
            .binary_search_by_key(&b, |x| x.0)
            .map_or(0.0, |i| adj[a][i].1)
    };
    let move_to = |e: usize,
                   to: usize,
                   placed: &mut [usize],
                   traffic: &mut NodeTraffic,
                   load: &mut [f64],
                   mem: &mut [u64],
                   members: &mut [Vec<usize>]| {
        let from = placed[e];
        traffic.update(adj, e, from, -1.0);
        traffic.update(adj, e, to, 1.0);
        load[from] -= loads[e];
        load[to] += loads[e];
        mem[from] -= memory[e];
        mem[to] += memory[e];
        if let Some(i) = members[from].iter().position(|&x| x == e) {
            members[from].remove(i);
        }
        members[to].push(e);
        placed[e] = to;
    };
    for _ in 0..REFINE_MAX_SWEEPS {
        let mut improved = false;
        // Single-executor moves: each executor, in id order, to the node that saves most
        // (ties: lower node index).
        for e in 0..executors {
            let from = placed[e];
            let here = traffic.on(e, from);
            let mut best: Option<(f64, usize)> = None;
            for &n in &config.nodes {
                if n == from
                    || !fits(config.limit[n], load[n] + loads[e])
                    || !memory_fits(&nodes[n], mem[n] + memory[e])
                {
                    continue;
                }
                let gain = traffic.on(e, n) - here;
                if gain > min_gain && best.is_none_or(|(g, _)| gain > g) {
                    best = Some((gain, n));
                }
            }
            if let Some((_, to)) = best {
                move_to(
                    e,
                    to,
                    placed,
                    &mut traffic,
                    &mut load,
                    &mut mem,
                    &mut members,
                );
                improved = true;
            }
        }
        // Pairwise swaps: executor `a` on A and `b` on B trade nodes. A swap saves
        // g_a(B) + g_b(A) − 2·t(a, b), where g_x(Y) is what moving x alone to Y would save, so one
        // of the two must want to move: `a` is taken in id order with each node B it wants to
        // move to (g_a(B) > 0), and the best partner `b` on B (ties: lower id).
        for a in 0..executors {
            let from = placed[a];
            if traffic.slot[from] == usize::MAX {
                continue;
            }
            let here = traffic.on(a, from);
            let mut best: Option<(f64, usize)> = None;
            for &n in &config.nodes {
                let ga = traffic.on(a, n) - here;
                if n == from || ga <= 0.0 {
                    continue;
                }
                for &b in &members[n] {
                    let (la, lb) = (loads[a], loads[b]);
                    let (ma, mb) = (memory[a], memory[b]);
                    if (lb > la && !fits(config.limit[from], load[from] - la + lb))
                        || (la > lb && !fits(config.limit[n], load[n] - lb + la))
                        || (mb > ma && !memory_fits(&nodes[from], mem[from] - ma + mb))
                        || (ma > mb && !memory_fits(&nodes[n], mem[n] - mb + ma))
                    {
                        continue;
                    }
                    let gain = ga + traffic.on(b, from) - traffic.on(b, n) - 2.0 * weight(a, b);
                    if gain > min_gain
                        && best.is_none_or(|(g, bb)| gain > g || (gain == g && b < bb))
                    {
                        best = Some((gain, b));
                    }
                }
            }
            if let Some((_, b)) = best {
                let (na, nb) = (placed[a], placed[b]);
                move_to(
                    a,
                    nb,
                    placed,
                    &mut traffic,
                    &mut load,
                    &mut mem,
                    &mut members,
                );
                move_to(
                    b,
                    na,
                    placed,
                    &mut traffic,
                    &mut load,
                    &mut mem,
                    &mut members,
                );
                improved = true;
            }
        }
        if !improved {
            break;
        }
    }
}

/// Executor `i` on the configuration's node `i mod m` (nodes in index order), if every node
/// stays within its limit.
fn round_robin_start(problem: &PlacementProblem<'_>, config: &Configuration) -> Option<Vec<usize>> {
    let m = config.nodes.len();
    if m < 2 {
        return None;
    }
    let placed: Vec<usize> = (0..problem.loads.len())
        .map(|e| config.nodes[e % m])
        .collect();
    let memory = problem.topology.memory();
    let mut load = vec![0.0; problem.nodes.len()];
    let mut mem = vec![0u64; problem.nodes.len()];
    for (e, &n) in placed.iter().enumerate() {
        load[n] += problem.loads[e];
        mem[n] += memory[e];
    }
    config
        .nodes
        .iter()
        .all(|&n| fits(config.limit[n], load[n]) && memory_fits(&problem.nodes[n], mem[n]))
        .then_some(placed)
}

/// Tuples/s between executors on different nodes.
fn inter_node(adj: &[Vec<(usize, f64)>], placed: &[usize]) -> f64 {
    adj.iter()
        .enumerate()
        .flat_map(|(a, list)| {
            list.iter()
                .filter(move |(b, _)| a < *b && placed[a] != placed[*b])
                .map(|x| x.1)
        })
        .sum()
}

/// The refinement's bound on sweeps (each sweep tries every executor's move and swaps); it stops
/// earlier at a fixed point, which is the usual case (a handful of sweeps).
pub const REFINE_MAX_SWEEPS: usize = 50;

/// The undirected traffic list in best-schedule order: descending traffic, ties by the pair's
/// (lower id, higher id).
pub fn traffic_order(adj: &[Vec<(usize, f64)>]) -> Vec<(usize, usize, f64)> {
    let mut pairs: Vec<(usize, usize, f64)> = adj
        .iter()
        .enumerate()
        .flat_map(|(a, list)| {
            list.iter()
                .filter(move |(b, _)| a < *b)
                .map(move |&(b, t)| (a, b, t))
        })
        .collect();
    pairs.sort_by(|x, y| y.2.total_cmp(&x.2).then(x.0.cmp(&y.0)).then(x.1.cmp(&y.1)));
    pairs
}

impl OnePhase {
    /// The first-allocation configuration (spec 04, Figure 3).
    pub fn first_configuration(&self, nodes: &[StreamNode], demand: f64) -> Configuration {
        let allowed: Vec<usize> = (0..nodes.len())
            .filter(|&n| nodes[n].slots > 0 && nodes[n].available() > 0.0)
            .collect();
        let mut limit = vec![0.0; nodes.len()];
        let mut sum = 0.0;
        let mut headroom = 0.0;
        for &n in &allowed {
            limit[n] = self.max_utilisation * nodes[n].available();
            sum += limit[n];
            headroom += nodes[n].available();
        }
        if demand > sum && headroom > 0.0 {
            let excess = demand - sum;
            for &n in &allowed {
                limit[n] += excess * nodes[n].available() / headroom;
            }
        }
        // With no usable node at all, fall back to every node so the pass still places.
        let nodes_list = if allowed.is_empty() {
            for (n, node) in nodes.iter().enumerate() {
                limit[n] = node.capacity;
            }
            (0..nodes.len()).collect()
        } else {
            allowed
        };
        Configuration {
            nodes: nodes_list,
            limit,
        }
    }

    fn subset_configuration(&self, nodes: &[StreamNode], subset: &[usize]) -> Configuration {
        let mut limit = vec![0.0; nodes.len()];
        for &n in subset {
            limit[n] = self.max_utilisation * nodes[n].available();
        }
        let mut list = subset.to_vec();
        list.sort_unstable();
        Configuration { nodes: list, limit }
    }

    /// The configuration for `problem` (spec 04, Figure 3), and the best-schedule result on it.
    pub fn configure(&self, problem: &PlacementProblem<'_>) -> (Configuration, Vec<usize>) {
        self.configure_with(problem, &problem.adjacency())
    }

    /// [`OnePhase::configure`] on the problem's adjacency (built once per placement).
    fn configure_with(
        &self,
        problem: &PlacementProblem<'_>,
        adj: &[Vec<(usize, f64)>],
    ) -> (Configuration, Vec<usize>) {
        let nodes = problem.nodes;
        let pairs = traffic_order(adj);
        let demand: f64 = problem.loads.iter().sum();
        let schedule = |c: &Configuration| Pass::new(problem, adj, c).run(&pairs);
        let previous = problem.previous.filter(|p| {
            p.node.len() == problem.topology.executor_count()
                && p.node.iter().all(|&n| n < nodes.len())
        });
        if let Some(prev) = previous {
            let mut used = prev.nodes_used();
            used.retain(|&n| nodes[n].slots > 0 && nodes[n].available() > 0.0);
            used.sort_by(|&a, &b| {
                nodes[b]
                    .available()
                    .total_cmp(&nodes[a].available())
                    .then(a.cmp(&b))
            });
            let m = used.len();
            let whole = self.subset_configuration(nodes, &used);
            let (whole_nodes, _, whole_exceeded) = schedule(&whole);
            if m > 0 && !whole_exceeded {
                // Halve; on failure, bisect for the smallest count in (⌈m/2⌉, m].
                let mut best = (whole, whole_nodes);
                let half = m.div_ceil(2);
                if half < m {
                    let c = self.subset_configuration(nodes, &used[..half]);
                    let (placed, _, exceeded) = schedule(&c);
                    if !exceeded {
                        best = (c, placed);
                    } else {
                        let (mut lo, mut hi) = (half, m);
                        while hi - lo > 1 {
                            let mid = (lo + hi) / 2;
                            let c = self.subset_configuration(nodes, &used[..mid]);
                            let (placed, _, exceeded) = schedule(&c);
                            if exceeded {
                                lo = mid;
                            } else {
                                hi = mid;
                                best = (c, placed);
                            }
                        }
                    }
                }
                return best;
            }
        }
        let c = self.first_configuration(nodes, demand);
        let (placed, _, _) = schedule(&c);
        (c, placed)
    }

    /// Moves executors off overloaded nodes, then falls back to first-fit-decreasing (see the
    /// module docs, "Repair").
    fn repair(
        &self,
        problem: &PlacementProblem<'_>,
        adj: &[Vec<(usize, f64)>],
        mut placed: Vec<usize>,
    ) -> Vec<usize> {
        let nodes = problem.nodes;
        let loads = &problem.loads;
        let memory = problem.topology.memory();
        let over = |load: &[f64], mem: &[u64], n: usize| {
            load[n] > nodes[n].available() + LOAD_EPSILON * nodes[n].capacity.max(1.0)
                || !memory_fits(&nodes[n], mem[n])
        };
        let mut load = vec![0.0; nodes.len()];
        let mut mem = vec![0u64; nodes.len()];
        for (e, &n) in placed.iter().enumerate() {
            load[n] += loads[e];
            mem[n] += memory[e];
        }
        if !(0..nodes.len()).any(|n| over(&load, &mem, n)) {
            return placed;
        }
        let usable: Vec<usize> = (0..nodes.len()).filter(|&n| nodes[n].slots > 0).collect();
        for n in 0..nodes.len() {
            while over(&load, &mem, n) {
                let mut best: Option<(f64, usize, usize)> = None;
                for e in (0..placed.len()).filter(|&e| placed[e] == n) {
                    let before: f64 = adj[e]
                        .iter()
                        .filter(|(v, _)| placed[*v] != n)
                        .map(|x| x.1)
                        .sum();
                    for &m in &usable {
                        if m == n
                            || load[m] + loads[e]
                                > nodes[m].available() + LOAD_EPSILON * nodes[m].capacity
                            || !memory_fits(&nodes[m], mem[m] + memory[e])
                        {
                            continue;
                        }
                        let after: f64 = adj[e]
                            .iter()
                            .filter(|(v, _)| placed[*v] != m)
                            .map(|x| x.1)
                            .sum();
                        let delta = after - before;
                        if best.is_none_or(|(b, _, _)| delta < b) {
                            best = Some((delta, e, m));
                        }
                    }
                }
                let Some((_, e, m)) = best else { break };
                placed[e] = m;
                load[n] -= loads[e];
                load[m] += loads[e];
                mem[n] -= memory[e];
                mem[m] += memory[e];
            }
        }
        if !(0..nodes.len()).any(|n| over(&load, &mem, n)) {
            return placed;
        }
        match first_fit_decreasing(nodes, loads, &memory) {
            Some(ffd) => ffd,
            None => placed,
        }
    }
}

/// First-fit decreasing of `loads` (with each executor's `memory`, bytes) onto the nodes'
/// available CPU and memory (nodes with a slot, in index order); `None` when some executor fits
/// nowhere.
pub fn first_fit_decreasing(
    nodes: &[StreamNode],
    loads: &[f64],
    memory: &[u64],
) -> Option<Vec<usize>> {
    let mut order: Vec<usize> = (0..loads.len()).collect();
    order.sort_by(|&a, &b| loads[b].total_cmp(&loads[a]).then(a.cmp(&b)));
    let mut load = vec![0.0; nodes.len()];
    let mut mem = vec![0u64; nodes.len()];
    let mut placed = vec![0; loads.len()];
    for e in order {
        let bytes = memory.get(e).copied().unwrap_or(0);
        let n = (0..nodes.len()).find(|&n| {
            nodes[n].slots > 0
                && load[n] + loads[e] <= nodes[n].available() + LOAD_EPSILON * nodes[n].capacity
                && memory_fits(&nodes[n], mem[n] + bytes)
        })?;
        load[n] += loads[e];
        mem[n] += bytes;
        placed[e] = n;
    }
    Some(placed)
}

impl StreamPlacer for OnePhase {
    fn name(&self) -> &'static str {
        "one-phase"
    }

    fn place(&self, problem: &PlacementProblem<'_>) -> Result<Placement, PlacementError> {
        problem.check()?;
        if !(self.max_utilisation > 0.0 && self.max_utilisation <= 1.0) {
            return Err(PlacementError::Inconsistent(format!(
                "one-phase max_utilisation {} is not in (0, 1]",
                self.max_utilisation
            )));
        }
        problem.check_pairs(self.name())?;
        let adj = problem.adjacency();
        let (config, mut placed) = self.configure_with(problem, &adj);
        if self.refine == Refine::LocalSearch {
            refine(problem, &adj, &config, &mut placed);
            // Second start: the executors round-robin over the configuration's nodes (Storm's
            // even order), when that spread fits the limits; the better local optimum wins
            // (ties: best-schedule's).
            if let Some(mut spread) = round_robin_start(problem, &config) {
                refine(problem, &adj, &config, &mut spread);
                if inter_node(&adj, &spread) < inter_node(&adj, &placed) {
                    placed = spread;
                }
            }
        }
        let node = self.repair(problem, &adj, placed);
        let process = vec![0; node.len()];
        Ok(Placement { node, process })
    }
}
