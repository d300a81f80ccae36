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
//! - **At least one placed**: `nodeList` = the nodes of the placed executor(s) (e1's first), then
//!   `leastLoadedNode(max(l1, l2))` and `lastUsedNode` if not already there. The unplaced executor
//!   (there is at most one: every handled pair places both) is tried on every node of `nodeList`
//!   that can carry it; the resulting inter-node traffic is computed over all placed neighbours;
//!   the minimum wins; ties prefer `lastUsedNode`, then `nodeList` order. If no node of `nodeList`
//!   can carry it, `leastLoadedNode` of it (or the fallback). The chosen node becomes
//!   `lastUsedNode`. When both are already placed nothing changes, `lastUsedNode` included.
//! - Executors in no pair are placed last, in id order, on `leastLoadedNode` of their load;
//!   `lastUsedNode` does not change.
//! - Afterwards each node's executors form one process (process 0).
//!
//! ## Repair (ours, beyond the patent)
//! Greedy packing can overload a node when a packing without overload exists. Then executors are
//! moved off overloaded nodes, one at a time — the move (executor, target node that can take it
//! within its available CPU) adding the least inter-node traffic; ties: lower executor id, then
//! lower node index. If a node is still overloaded and first-fit-decreasing (executors by
//! descending load, ties lower id; nodes in index order) finds a packing without overload, that
//! packing is used. So a placement overloads a node only when first-fit-decreasing cannot avoid it
//! either (bin packing is NP-hard; first-fit-decreasing is our feasibility test).

use super::{
    LOAD_EPSILON, Placement, PlacementError, PlacementProblem, StreamNode, StreamPlacer,
    least_relative,
};

/// The one-phase scheduler's settings.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct OnePhase {
    /// The fraction of a node's available CPU the tuner lets the topology use (0 < x ≤ 1): the
    /// headroom that keeps a measured-rate wobble from overloading a packed node. 1.0 packs to
    /// capacity, as the patent does.
    pub max_utilisation: f64,
}

impl Default for OnePhase {
    fn default() -> Self {
        Self {
            max_utilisation: 0.9,
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
    node_of: Vec<Option<usize>>,
    /// Whether some executor had to go above its node's limit.
    exceeded: bool,
}

impl<'p, 'a> Pass<'p, 'a> {
    fn new(
        problem: &'p PlacementProblem<'a>,
        adj: &'p [Vec<(usize, f64)>],
        config: &'p Configuration,
    ) -> Self {
        Self {
            problem,
            adj,
            config,
            load: vec![0.0; problem.nodes.len()],
            node_of: vec![None; problem.topology.executor_count()],
            exceeded: false,
        }
    }

    fn can_carry(&self, n: usize, x: f64) -> bool {
        let limit = self.config.limit[n];
        self.load[n] + x <= limit + LOAD_EPSILON * limit.max(1.0)
    }

    fn least_loaded(&self, x: f64) -> Option<usize> {
        let nodes = self.problem.nodes;
        let mut best: Option<(f64, f64, usize)> = None;
        for &n in &self.config.nodes {
            if !self.can_carry(n, x) {
                continue;
            }
            let r = self.load[n] / nodes[n].available().max(f64::MIN_POSITIVE);
            let free = self.config.limit[n] - self.load[n];
            if best.is_none_or(|(br, bf, _)| r < br || (r == br && free > bf)) {
                best = Some((r, free, n));
            }
        }
        best.map(|(_, _, n)| n)
    }

    /// `leastLoadedNode(x)`, or the least-overloaded fallback (marking the pass as exceeded).
    fn least_loaded_or_fallback(&mut self, x: f64) -> usize {
        match self.least_loaded(x) {
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
    }

    /// Inter-node traffic `e` adds with its placed neighbours if it goes on `n`.
    fn cut(&self, e: usize, n: usize) -> f64 {
        self.adj[e]
            .iter()
            .filter(|(v, _)| self.node_of[*v].is_some_and(|m| m != n))
            .map(|(_, t)| t)
            .sum()
    }

    fn run(mut self, pairs: &[(usize, usize, f64)]) -> (Vec<usize>, Vec<f64>, bool) {
        let loads = &self.problem.loads;
        let mut last: Option<usize> = None;
        for &(a, b, _) in pairs {
            let (la, lb) = (loads[a], loads[b]);
            match (self.node_of[a], self.node_of[b]) {
                (Some(_), Some(_)) => {}
                (None, None) => match last {
                    Some(u) if self.can_carry(u, la + lb) => {
                        self.put(a, u);
                        self.put(b, u);
                    }
                    _ => {
                        if let Some(n) = self.least_loaded(la + lb) {
                            self.put(a, n);
                            self.put(b, n);
                            last = Some(n);
                        } else {
                            for e in [a, b] {
                                let n = match last {
                                    Some(u) if self.can_carry(u, loads[e]) => u,
                                    _ => self.least_loaded_or_fallback(loads[e]),
                                };
                                self.put(e, n);
                                if e == b {
                                    last = Some(n);
                                }
                            }
                        }
                    }
                },
                (pa, pb) => {
                    let (u, placed_node) = match (pa, pb) {
                        (Some(n), None) => (b, n),
                        (None, Some(n)) => (a, n),
                        _ => unreachable!("both-placed and neither-placed are handled above"),
                    };
                    let mut list = vec![placed_node];
                    if let Some(ll) = self.least_loaded(la.max(lb))
                        && !list.contains(&ll)
                    {
                        list.push(ll);
                    }
                    if let Some(l) = last
                        && !list.contains(&l)
                    {
                        list.push(l);
                    }
                    let mut best: Option<(f64, bool, usize)> = None;
                    for &n in &list {
                        if !self.can_carry(n, loads[u]) {
                            continue;
                        }
                        let cost = self.cut(u, n);
                        let is_last = last == Some(n);
                        let better = match best {
                            None => true,
                            Some((bc, bl, _)) => cost < bc || (cost == bc && is_last && !bl),
                        };
                        if better {
                            best = Some((cost, is_last, n));
                        }
                    }
                    let n = match best {
                        Some((_, _, n)) => n,
                        None => self.least_loaded_or_fallback(loads[u]),
                    };
                    self.put(u, n);
                    last = Some(n);
                }
            }
        }
        for (e, &load) in loads.iter().enumerate() {
            if self.node_of[e].is_none() {
                let n = self.least_loaded_or_fallback(load);
                self.put(e, n);
            }
        }
        let nodes = self.node_of.iter().map(|n| n.unwrap_or(0)).collect();
        (nodes, self.load, self.exceeded)
    }
}

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
        let nodes = problem.nodes;
        let adj = problem.adjacency();
        let pairs = traffic_order(&adj);
        let demand: f64 = problem.loads.iter().sum();
        let schedule = |c: &Configuration| Pass::new(problem, &adj, c).run(&pairs);
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
    fn repair(&self, problem: &PlacementProblem<'_>, mut placed: Vec<usize>) -> Vec<usize> {
        let nodes = problem.nodes;
        let loads = &problem.loads;
        let over = |load: &[f64], n: usize| {
            load[n] > nodes[n].available() + LOAD_EPSILON * nodes[n].capacity.max(1.0)
        };
        let mut load = vec![0.0; nodes.len()];
        for (e, &n) in placed.iter().enumerate() {
            load[n] += loads[e];
        }
        if !(0..nodes.len()).any(|n| over(&load, n)) {
            return placed;
        }
        let adj = problem.adjacency();
        let usable: Vec<usize> = (0..nodes.len()).filter(|&n| nodes[n].slots > 0).collect();
        for n in 0..nodes.len() {
            while over(&load, n) {
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
            }
        }
        if !(0..nodes.len()).any(|n| over(&load, n)) {
            return placed;
        }
        match first_fit_decreasing(nodes, loads) {
            Some(ffd) => ffd,
            None => placed,
        }
    }
}

/// First-fit decreasing of `loads` onto the nodes' available CPU (nodes with a slot, in index
/// order); `None` when some executor fits nowhere.
pub fn first_fit_decreasing(nodes: &[StreamNode], loads: &[f64]) -> Option<Vec<usize>> {
    let mut order: Vec<usize> = (0..loads.len()).collect();
    order.sort_by(|&a, &b| loads[b].total_cmp(&loads[a]).then(a.cmp(&b)));
    let mut load = vec![0.0; nodes.len()];
    let mut placed = vec![0; loads.len()];
    for e in order {
        let n = (0..nodes.len()).find(|&n| {
            nodes[n].slots > 0
                && load[n] + loads[e] <= nodes[n].available() + LOAD_EPSILON * nodes[n].capacity
        })?;
        load[n] += loads[e];
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
        let (_, placed) = self.configure(problem);
        let node = self.repair(problem, placed);
        let process = vec![0; node.len()];
        Ok(Placement { node, process })
    }
}
