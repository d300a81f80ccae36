//! The centralised dynamic baseline (spec 05, "Baselines"): a monitoring agent on every node
//! reports its load to one dispatcher on the launch node, which sends each ready instance to the
//! least-loaded node.
//!
//! The dispatcher's idea of a node's load is the node's last report plus what it dispatched there
//! since (it knows what it sent; it learns of completions only from the next report). It has no
//! MT cap: every ready instance goes out at once, to the node with the fewest instances per core
//! (ties: lowest node id) among those meeting the instance's requirements. That is the push model
//! the paper compares PCDDB's pull model with.
//!
//! [`ExecutorNode`] is also the static baseline's node: it runs what it is sent and reports
//! results, without monitoring reports.
//!
//! The dispatcher keeps its members ordered by (instances per core, node id, position) in one
//! ordered set per attribute mask, updated at every report and dispatch, so a pick costs
//! O(log members) per mask meeting the instance's requirements instead of a scan of every
//! member (instances × members on a 100,000-node deployment). The order is the scan's, so the
//! choices are the same.

use super::{
    AttrMask, Body, CoreLoad, GraphNode, InstanceId, LaunchEvent, Message, NodeEvent, Outgoing,
    dag::InstanceGraph,
};
use crate::model::NodeId;
use crate::time::Time;
use std::cmp::Ordering;
use std::collections::{BTreeSet, HashMap};

/// A node that runs the instances it is sent, spread over its cores, and returns results.
#[derive(Clone, Debug)]
pub struct ExecutorNode {
    node: GraphNode,
    manager: NodeId,
    monitored: bool,
    load: CoreLoad,
}

impl ExecutorNode {
    /// A node whose results go to `manager`; a `monitored` node reports its load on every
    /// self-check.
    pub fn new(node: GraphNode, manager: NodeId, monitored: bool) -> Self {
        Self {
            load: CoreLoad::new(node.cores),
            node,
            manager,
            monitored,
        }
    }

    /// Instances held (queued or running).
    pub fn held(&self) -> u32 {
        self.load.held()
    }

    /// Most instances held at once.
    pub fn peak(&self) -> u32 {
        self.load.peak()
    }

    fn send(&self, body: Body) -> Outgoing {
        Outgoing::Send(Message {
            from: self.node.id,
            to: self.manager,
            body,
        })
    }

    /// Handles one event at `now`.
    pub fn handle(&mut self, event: NodeEvent, _now: Time) -> Vec<Outgoing> {
        match event {
            NodeEvent::SelfCheck if self.monitored => vec![self.send(Body::Report {
                held: self.load.held(),
            })],
            NodeEvent::SelfCheck => Vec::new(),
            NodeEvent::Deliver(Message {
                body: Body::Dispatch { instance },
                ..
            }) => {
                let core = self.load.place();
                vec![Outgoing::Run { instance, core }]
            }
            NodeEvent::Deliver(_) => Vec::new(),
            NodeEvent::Finished { instance, core } => {
                self.load.release(core);
                vec![self.send(Body::Result { instance })]
            }
        }
    }
}

/// The central dispatcher.
#[derive(Clone, Debug)]
pub struct Dispatcher {
    id: NodeId,
    members: Vec<GraphNode>,
    /// Each member's position in `members` (its first, should it be listed twice), so a report —
    /// one per member per check period — finds its member in O(1): a scan of the members made a
    /// round of reports cost nodes² steps.
    position: HashMap<NodeId, usize>,
    /// Estimated instances per member: last report + dispatched since.
    estimate: Vec<u32>,
    /// The members ordered by load, kept true at every change of `estimate`.
    index: LoadIndex,
    graph: InstanceGraph,
    /// Instances no member can run yet (requirements nobody in the deployment meets).
    unplaceable: Vec<InstanceId>,
}

impl Dispatcher {
    /// A dispatcher on `id` over `members`.
    pub fn new(id: NodeId, members: Vec<GraphNode>, graph: InstanceGraph) -> Self {
        let estimate = vec![0; members.len()];
        Self {
            id,
            index: LoadIndex::new(&members, &estimate),
            estimate,
            position: positions(&members),
            members,
            graph,
            unplaceable: Vec::new(),
        }
    }

    /// The instance graph it tracks.
    pub fn graph(&self) -> &InstanceGraph {
        &self.graph
    }

    /// The members change (nodes joined, died, or their attributes changed): estimates are
    /// kept for members that stay; instances nobody could run are tried again.
    pub fn set_members(&mut self, members: Vec<GraphNode>) -> Vec<Outgoing> {
        let estimate: Vec<u32> = members
            .iter()
            .map(|m| self.position.get(&m.id).map_or(0, |&k| self.estimate[k]))
            .collect();
        self.position = positions(&members);
        self.index = LoadIndex::new(&members, &estimate);
        self.members = members;
        self.estimate = estimate;
        let mut out = Vec::new();
        let waiting = std::mem::take(&mut self.unplaceable);
        self.dispatch(waiting, &mut out);
        out
    }

    /// Instances that must run again although the graph already counts them ready (a failed
    /// attempt with retries left, a lost run, a lost output) are dispatched like ready ones.
    pub fn resubmit(&mut self, ids: &[InstanceId]) -> Vec<Outgoing> {
        let mut out = Vec::new();
        self.dispatch(ids.to_vec(), &mut out);
        out
    }

    /// Instances that will not run (a runtime's cancel): never dispatched, nor made ready by
    /// their producers' results.
    pub fn withdraw(&mut self, ids: &[InstanceId]) {
        let ids: std::collections::HashSet<InstanceId> = ids.iter().copied().collect();
        for &id in &ids {
            self.graph.withdraw(id);
        }
        self.unplaceable.retain(|i| !ids.contains(i));
    }

    /// Instances that ended without succeeding come back (a runtime's resubmit): see
    /// [`InstanceGraph::reinstate`]. Returns those ready now, in the order given; the caller
    /// places them with [`Dispatcher::resubmit`].
    pub fn reinstate(&mut self, ids: &[InstanceId]) -> Vec<InstanceId> {
        ids.iter()
            .copied()
            .filter(|&id| self.graph.reinstate(id))
            .collect()
    }

    /// Instance `id`, dispatched to `from`, cannot start there now (a runtime's node whose
    /// resources other work holds, which no simulated node has): it goes to the least-loaded
    /// member meeting its requirements if that member is not `from` and has room by the
    /// dispatcher's estimate (fewer instances than cores). Else it stays, and nothing is
    /// returned: with every member at or over its cores it would only wait elsewhere, and a
    /// pick of `from` itself means the dispatcher sees room there (its next report corrects
    /// that). Without this, an instance pushed to a node that another job then held for an
    /// hour waited that hour while other members idled.
    pub fn relocate(&mut self, id: InstanceId, from: NodeId) -> Vec<Outgoing> {
        let requires = self.graph.wanted(id).requires;
        let best = match &self.index {
            LoadIndex::Sets { .. } => self.index.least(requires),
            LoadIndex::Scan => self.scan(requires),
        };
        let Some(k) = best.filter(|&k| {
            let m = &self.members[k];
            m.id != from && self.estimate[k] < m.cores
        }) else {
            return Vec::new();
        };
        if let Some(&f) = self.position.get(&from) {
            self.set_estimate(f, self.estimate[f].saturating_sub(1));
        }
        self.set_estimate(k, self.estimate[k] + 1);
        vec![Outgoing::Send(Message {
            from: self.id,
            to: self.members[k].id,
            body: Body::Dispatch { instance: id },
        })]
    }

    /// Instances waiting for a member that meets their requirements.
    pub fn unplaceable(&self) -> &[InstanceId] {
        &self.unplaceable
    }

    /// Handles one event at `now`.
    pub fn handle(&mut self, event: LaunchEvent, _now: Time) -> Vec<Outgoing> {
        let mut out = Vec::new();
        match event {
            LaunchEvent::Start => {
                let ready = self.graph.start();
                self.dispatch(ready, &mut out);
            }
            LaunchEvent::Deliver(msg) => match msg.body {
                Body::Report { held } => {
                    if let Some(&k) = self.position.get(&msg.from) {
                        self.set_estimate(k, held);
                    }
                }
                Body::Result { instance } => {
                    if let Ok(ready) = self.graph.finish(instance) {
                        self.dispatch(ready, &mut out);
                    }
                }
                _ => {}
            },
        }
        out
    }

    /// Sets member `k`'s estimate, keeping the index in step.
    fn set_estimate(&mut self, k: usize, estimate: u32) {
        let old = self.estimate[k];
        if old != estimate {
            self.index.moved(&self.members[k], k, old, estimate);
            self.estimate[k] = estimate;
        }
    }

    fn dispatch(&mut self, ready: Vec<InstanceId>, out: &mut Vec<Outgoing>) {
        for id in ready {
            out.push(Outgoing::Ready(id));
            let requires = self.graph.wanted(id).requires;
            let best = match &self.index {
                LoadIndex::Sets { .. } => self.index.least(requires),
                LoadIndex::Scan => self.scan(requires),
            };
            // Every test in a debug build checks the index against the scan it replaces.
            debug_assert_eq!(best, self.scan(requires));
            match best {
                Some(k) => {
                    let node = self.members[k].id;
                    self.set_estimate(k, self.estimate[k] + 1);
                    out.push(Outgoing::Send(Message {
                        from: self.id,
                        to: node,
                        body: Body::Dispatch { instance: id },
                    }));
                }
                None => self.unplaceable.push(id),
            }
        }
    }

    /// The least-loaded member meeting `requires` by a scan of every member: the reference the
    /// index follows, and what a deployment with a zero-core member uses (see [`LoadIndex`]).
    fn scan(&self, requires: AttrMask) -> Option<usize> {
        // Least instances per core: compare a/ca < b/cb as a·cb < b·ca.
        self.members
            .iter()
            .enumerate()
            .filter(|(_, m)| m.attributes & requires == requires)
            .min_by(|(i, a), (j, b)| {
                let x = self.estimate[*i] as u64 * b.cores as u64;
                let y = self.estimate[*j] as u64 * a.cores as u64;
                x.cmp(&y).then(a.id.cmp(&b.id))
            })
            .map(|(k, _)| k)
    }
}

/// A member's place in the dispatcher's order: its estimate and cores (compared as the ratio
/// estimate / cores, by cross-multiplying, as the scan does), then its node id, then its
/// position in the members (the scan keeps the first of equal members: a node listed twice).
#[derive(Clone, Copy, Debug)]
struct LoadKey {
    estimate: u32,
    cores: u32,
    node: NodeId,
    position: usize,
}

impl Ord for LoadKey {
    fn cmp(&self, other: &Self) -> Ordering {
        let x = self.estimate as u64 * other.cores as u64;
        let y = other.estimate as u64 * self.cores as u64;
        x.cmp(&y)
            .then(self.node.cmp(&other.node))
            .then(self.position.cmp(&other.position))
    }
}

impl PartialOrd for LoadKey {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for LoadKey {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for LoadKey {}

/// The members ordered by load, one ordered set per attribute mask: the least-loaded member
/// meeting a requirement is the least of the first members of the sets whose mask contains it.
/// A deployment has few masks (the catalogue's vocabulary is what tasks require), so a pick is
/// O(log members).
#[derive(Clone, Debug)]
enum LoadIndex {
    /// Per attribute mask, its members in order.
    Sets {
        sets: Vec<(AttrMask, BTreeSet<LoadKey>)>,
        /// Each member's set.
        set_of: Vec<usize>,
    },
    /// A member has no cores: a ratio with a zero denominator is no order a set can keep (the
    /// scan's comparison is not transitive then), so such a deployment is scanned as before.
    Scan,
}

impl LoadIndex {
    fn new(members: &[GraphNode], estimate: &[u32]) -> Self {
        if members.iter().any(|m| m.cores == 0) {
            return Self::Scan;
        }
        let mut sets: Vec<(AttrMask, BTreeSet<LoadKey>)> = Vec::new();
        let mut by_mask: HashMap<AttrMask, usize> = HashMap::new();
        let mut set_of = Vec::with_capacity(members.len());
        for (position, (m, &estimate)) in members.iter().zip(estimate).enumerate() {
            let k = *by_mask.entry(m.attributes).or_insert_with(|| {
                sets.push((m.attributes, BTreeSet::new()));
                sets.len() - 1
            });
            set_of.push(k);
            sets[k].1.insert(LoadKey {
                estimate,
                cores: m.cores,
                node: m.id,
                position,
            });
        }
        Self::Sets { sets, set_of }
    }

    /// Member `position` (`m`) goes from estimate `old` to `new`.
    fn moved(&mut self, m: &GraphNode, position: usize, old: u32, new: u32) {
        let Self::Sets { sets, set_of } = self else {
            return;
        };
        if let Some((_, set)) = set_of.get(position).and_then(|&k| sets.get_mut(k)) {
            let key = LoadKey {
                estimate: old,
                cores: m.cores,
                node: m.id,
                position,
            };
            set.remove(&key);
            set.insert(LoadKey {
                estimate: new,
                ..key
            });
        }
    }

    /// The position of the least-loaded member whose attributes contain `requires`.
    fn least(&self, requires: AttrMask) -> Option<usize> {
        let Self::Sets { sets, .. } = self else {
            return None;
        };
        sets.iter()
            .filter(|(a, _)| a & requires == requires)
            .filter_map(|(_, set)| set.first())
            .min()
            .map(|key| key.position)
    }
}

/// Each node's first position in `members`.
fn positions(members: &[GraphNode]) -> HashMap<NodeId, usize> {
    let mut position = HashMap::with_capacity(members.len());
    for (k, m) in members.iter().enumerate() {
        position.entry(m.id).or_insert(k);
    }
    position
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::policy::graph::test_stream::stream;

    /// The scan the index replaces, as it was written.
    fn scan(members: &[GraphNode], estimate: &[u32], requires: AttrMask) -> Option<usize> {
        members
            .iter()
            .enumerate()
            .filter(|(_, m)| m.attributes & requires == requires)
            .min_by(|(i, a), (j, b)| {
                let x = estimate[*i] as u64 * b.cores as u64;
                let y = estimate[*j] as u64 * a.cores as u64;
                x.cmp(&y).then(a.id.cmp(&b.id))
            })
            .map(|(k, _)| k)
    }

    #[test]
    fn the_load_index_picks_what_the_scan_picks() {
        for seed in 0..40 {
            let mut next = stream(seed);
            // Nodes listed twice, equal ratios (1/2 = 4/8) and masks that nest.
            let members: Vec<GraphNode> = (0..1 + next(30))
                .map(|_| GraphNode {
                    id: NodeId(next(20) as u32),
                    cores: [1, 2, 4, 8][next(4) as usize],
                    attributes: next(4),
                })
                .collect();
            let mut estimate: Vec<u32> = members.iter().map(|_| next(6) as u32).collect();
            let mut index = LoadIndex::new(&members, &estimate);
            for step in 0..300 {
                let requires = next(4);
                let picked = index.least(requires);
                assert_eq!(
                    picked,
                    scan(&members, &estimate, requires),
                    "seed {seed} step {step}"
                );
                // A dispatch to the pick, or a report from anyone.
                let (k, new) = match picked {
                    Some(k) if next(2) == 0 => (k, estimate[k] + 1),
                    _ => {
                        let k = next(members.len() as u64) as usize;
                        (k, next(10) as u32)
                    }
                };
                index.moved(&members[k], k, estimate[k], new);
                estimate[k] = new;
            }
        }
    }

    /// Where each `Dispatch` in `out` goes, by instance.
    fn sent(out: &[Outgoing]) -> Vec<(u32, u32)> {
        out.iter()
            .filter_map(|o| match o {
                Outgoing::Send(Message {
                    to,
                    body: Body::Dispatch { instance },
                    ..
                }) => Some((instance.0, to.0)),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn an_instance_stuck_on_a_full_node_moves_only_to_a_member_with_room() {
        let w = crate::input::workflow::parse_workflow(
            "wf.toml",
            "[[task]]\nname = \"A\"\ninstances = 6\ncost = \"1s\"\n",
        )
        .unwrap_or_else(|e| panic!("{e}"))
        .workflow;
        let node = |id, cores| GraphNode {
            id: NodeId(id),
            cores,
            attributes: 0,
        };
        let mut d = Dispatcher::new(
            NodeId(9),
            vec![node(0, 2), node(1, 2)],
            InstanceGraph::new(&w, &[0]),
        );
        // Node 0's cores are held by other work: its report counts them.
        let report = |d: &mut Dispatcher, from, held| {
            d.handle(
                LaunchEvent::Deliver(Message {
                    from: NodeId(from),
                    to: NodeId(9),
                    body: Body::Report { held },
                }),
                0,
            )
        };
        report(&mut d, 0, 2);
        let out = d.handle(LaunchEvent::Start, 0);
        // 1 and 1 first; then every member is at its cores, and ties go to the lowest id.
        assert_eq!(sent(&out), [(0, 1), (1, 1), (2, 0), (3, 1), (4, 0), (5, 1)]);
        // Everyone full: nothing moves, and never to the node it waits on.
        assert!(d.relocate(InstanceId(2), NodeId(0)).is_empty());
        assert!(d.relocate(InstanceId(3), NodeId(1)).is_empty());
        // Node 1 ran its first two and started the other two: still full.
        report(&mut d, 1, 2);
        assert!(d.relocate(InstanceId(2), NodeId(0)).is_empty());
        // Those ended too: both instances stuck on node 0 move there, one core each.
        report(&mut d, 1, 0);
        assert_eq!(sent(&d.relocate(InstanceId(2), NodeId(0))), [(2, 1)]);
        assert_eq!(sent(&d.relocate(InstanceId(4), NodeId(0))), [(4, 1)]);
        assert!(
            d.relocate(InstanceId(4), NodeId(0)).is_empty(),
            "node 1 is full again"
        );
        // Node 0's estimate went down with each move: 2 cores held + 2 waiting - 2 moved.
        assert_eq!(d.estimate, [2, 2]);
    }

    #[test]
    fn a_member_without_cores_makes_the_dispatcher_scan() {
        let members = vec![GraphNode {
            id: NodeId(0),
            cores: 0,
            attributes: 0,
        }];
        assert!(matches!(LoadIndex::new(&members, &[0]), LoadIndex::Scan));
    }
}
