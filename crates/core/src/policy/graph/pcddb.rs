//! PCDDB, the decentralised LT/MT balancing protocol of spec 05 §4, as two sans-IO state
//! machines: [`PcddbNode`] (every node's local resource agent) and [`LaunchNode`] (the task
//! manager on the cluster's launch node).
//!
//! The protocol, step by step (spec 05 §4):
//! - a) every node checks itself periodically; holding fewer than `LT × cores` instances it records
//!   itself in its own underloaded-node table and sends `status` to the launch node;
//! - b) the launch node packs its ready instances and its table into an allocation `request` and
//!   sends it to the first node of its table;
//! - c) a node receiving a request merges the request's table into its own, keeping its own entry
//!   (its local state is fresher); (a) not underloaded: it removes itself from the request's table
//!   and forwards the request to the first node of its table; (b) underloaded with x instances: it
//!   takes `MT × cores − x` instances (those whose requirements it meets), spreads them over its
//!   cores, removes itself from both tables, `reply`s to the launch node and forwards the rest;
//! - d) the launch node removes each replying node from its table;
//! - e) a node holding a request with instances left and an empty table `return`s it to the launch
//!   node for reallocation;
//! - f) `result`s return to the launch node, which readies dependants (new requests).
//!
//! Choices where the spec is OPEN (documented in docs/results/graphs.md):
//! - **merge**: the request's view of *other* nodes replaces the local one (the paper's figure 3:
//!   node 6 drops 12, node 3 drops 6, 8 and 9 — entries the request no longer carries); the node's
//!   own entry follows its live instance count;
//! - **status**: a node reports at *every* self-check that finds it below LT (seed 004 §2.5 a:
//!   "每个节点周期性地检查自身状态,若…小于LT,则…并将自身状态发给启动节点"), so the launch node's
//!   entry is refreshed while the node stays underloaded;
//! - **one request per activation**: every event that readies instances (program start, a result,
//!   seed 004 §2.4) packs what is ready into a request at once, without waiting for earlier
//!   requests to end (§2.5 b says nothing of waiting); instances that find the table empty wait
//!   in the launch node's queue;
//! - "wait and retry" with an empty table = the next status report (one arrives every check
//!   period from every underloaded node);
//! - a node that is underloaded but meets no instance's requirements passes the request on like a
//!   loaded node, and also drops its own entry, so its next self-check reports it again;
//! - on a return, the launch node drops the entries the request's travel disproved (nodes that
//!   removed themselves and have not reported since it was sent).

use super::{
    AllocationRequest, Body, ClusterId, CoreLoad, GraphNode, InstanceId, LaunchEvent, Message,
    NodeEvent, Outgoing, Thresholds, Wanted, dag::InstanceGraph,
};
use crate::model::NodeId;
use crate::time::Time;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::collections::hash_map::Entry;
use std::collections::{HashMap, HashSet, VecDeque};
use std::fmt;
use std::sync::Arc;

/// An underloaded-node table as a request carries it: node ids in order, shared — not copied —
/// between the request and the tables of the nodes it passed.
///
/// Spec 05 §4 c has every node a request reaches merge the request's table into its own; a
/// copy per node held nodes²/2 entries when one request walked every idle node of a
/// 100,000-node cluster (2.6 GB for a walk of 3,963 nodes). A node the request reaches is the
/// first entry of the table it carries (the launch node and every node send it to the first
/// entry), so a hop drops the front entry: that moves a start index over the shared entries,
/// and the node keeps a clone of the handle. Any other change copies the entries it keeps
/// (copy on write), so a table changes only itself.
///
/// It reads as a slice (`Deref`), prints as a list, and serialises as a plain list of node ids:
/// the message between runtime agents is the same JSON as when the table was a `Vec`.
#[derive(Clone)]
pub struct SharedTable {
    entries: Arc<[NodeId]>,
    /// Entries before `start` are not in this table (the front entries its hops dropped).
    start: usize,
}

impl SharedTable {
    /// Keeps the entries `keep` accepts, in order (as `Vec::retain`, calling `keep` once per
    /// entry). Dropping only front entries shares the rest; anything else copies what is kept.
    pub fn retain(&mut self, mut keep: impl FnMut(&NodeId) -> bool) {
        let list: &[NodeId] = self;
        // Entries before `first_kept` are dropped; the one at `first_kept` is kept.
        let first_kept = list.iter().position(&mut keep).unwrap_or(list.len());
        let rest = list.get(first_kept..).unwrap_or_default();
        match rest.iter().skip(1).position(|n| !keep(n)) {
            None if first_kept == list.len() => *self = Self::default(),
            None => self.start += first_kept,
            Some(j) => {
                // `rest[1 + j]` is dropped: copy what stays.
                let (head, tail) = rest.split_at(1 + j);
                let mut kept = Vec::with_capacity(rest.len() - 1);
                kept.extend_from_slice(head);
                kept.extend(tail.iter().skip(1).copied().filter(|n| keep(n)));
                *self = kept.into();
            }
        }
    }
}

impl Default for SharedTable {
    fn default() -> Self {
        Vec::new().into()
    }
}

impl std::ops::Deref for SharedTable {
    type Target = [NodeId];

    fn deref(&self) -> &[NodeId] {
        self.entries.get(self.start..).unwrap_or_default()
    }
}

impl From<Vec<NodeId>> for SharedTable {
    fn from(entries: Vec<NodeId>) -> Self {
        Self {
            entries: entries.into(),
            start: 0,
        }
    }
}

impl FromIterator<NodeId> for SharedTable {
    fn from_iter<I: IntoIterator<Item = NodeId>>(iter: I) -> Self {
        Self {
            entries: iter.into_iter().collect(),
            start: 0,
        }
    }
}

impl PartialEq for SharedTable {
    fn eq(&self, other: &Self) -> bool {
        **self == **other
    }
}

impl Eq for SharedTable {}

impl fmt::Debug for SharedTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&**self, f)
    }
}

impl Serialize for SharedTable {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        (**self).serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for SharedTable {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Vec::<NodeId>::deserialize(deserializer).map(Self::from)
    }
}

/// An ordered underloaded-node table (one per cluster a node belongs to).
///
/// What the last request brought stays shared with that request ([`SharedTable`]); what the
/// node changed since — in practice only its own entry, added when a self-check finds it
/// underloaded — lies beside it, so a node that passed a request holds a handle and a few
/// entries, not a copy of the table.
///
/// A node asks its table only about itself (at every self-check: list me, or drop me), and its
/// table may list every member of a 100,000-node cluster, so the table remembers where the last
/// node added or removed stands (`known`), kept true by every change: a self-check is O(1), and
/// only the first change after a new table scans it.
#[derive(Clone, Default)]
pub struct UnderloadTable {
    /// The entries the last request brought, less those removed since.
    shared: SharedTable,
    /// Entries added since, after `shared`.
    added: Vec<NodeId>,
    /// The last node added or removed and the index of its first entry (`None`: not listed).
    known: Option<(NodeId, Option<usize>)>,
}

impl PartialEq for UnderloadTable {
    fn eq(&self, other: &Self) -> bool {
        self.iter().eq(other.iter())
    }
}

impl Eq for UnderloadTable {}

impl fmt::Debug for UnderloadTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UnderloadTable")
            .field("entries", &self.entries())
            .finish()
    }
}

impl UnderloadTable {
    /// A table holding `entries` in order.
    pub fn new(entries: Vec<NodeId>) -> Self {
        Self {
            shared: entries.into(),
            added: Vec::new(),
            known: None,
        }
    }

    /// A table holding `entries`, which do not list `absent` (known, so not scanned for).
    fn without(entries: SharedTable, absent: NodeId) -> Self {
        debug_assert!(!entries.contains(&absent));
        Self {
            shared: entries,
            added: Vec::new(),
            known: Some((absent, None)),
        }
    }

    /// The entries in order (a copy: see [`UnderloadTable::iter`]).
    pub fn entries(&self) -> Vec<NodeId> {
        self.iter().collect()
    }

    /// The entries in order.
    pub fn iter(&self) -> impl Iterator<Item = NodeId> + '_ {
        self.shared.iter().chain(&self.added).copied()
    }

    /// How many entries it holds.
    pub fn len(&self) -> usize {
        self.shared.len() + self.added.len()
    }

    /// Index of `n`'s first entry: O(1) when `n` was the last node added or removed.
    fn position(&self, n: NodeId) -> Option<usize> {
        match self.known {
            Some((k, at)) if k == n => at,
            _ => self.iter().position(|e| e == n),
        }
    }

    /// Whether `n` is listed.
    pub fn contains(&self, n: NodeId) -> bool {
        self.position(n).is_some()
    }

    /// Removes `n` if listed.
    pub fn remove(&mut self, n: NodeId) {
        match self.position(n) {
            None => {}
            // Its first entry was added since the request: the shared entries do not list it.
            Some(at) if at >= self.shared.len() => self.added.retain(|&e| e != n),
            Some(_) => {
                self.shared.retain(|&e| e != n);
                self.added.retain(|&e| e != n);
            }
        }
        self.known = Some((n, None));
    }

    /// Appends `n` if not listed.
    pub fn add(&mut self, n: NodeId) {
        match self.position(n) {
            Some(at) => self.known = Some((n, Some(at))),
            None => {
                self.added.push(n);
                self.known = Some((n, Some(self.len() - 1)));
            }
        }
    }

    /// The first entry other than `me`.
    pub fn first_other(&self, me: NodeId) -> Option<NodeId> {
        self.iter().find(|&e| e != me)
    }

    /// Whether the table is empty.
    pub fn is_empty(&self) -> bool {
        self.shared.is_empty() && self.added.is_empty()
    }
}

#[derive(Clone, Debug)]
struct Membership {
    cluster: ClusterId,
    launch: NodeId,
    table: UnderloadTable,
}

/// A node's local resource agent under PCDDB.
#[derive(Clone, Debug)]
pub struct PcddbNode {
    node: GraphNode,
    /// Per-core LT and MT (the node's are × its cores, [`Thresholds::room`]).
    per_core: Thresholds,
    load: CoreLoad,
    memberships: Vec<Membership>,
    /// Instances held and the launch node each result goes to. A map, so a request carrying an
    /// instance this node already holds (the runtime re-sends after a retry or a restart) is
    /// found at once and not given a second core slot.
    holding: HashMap<InstanceId, NodeId>,
    /// The load other work puts on the node, in cores ([`PcddbNode::set_foreign_load`]):
    /// counted in x beside this machine's own instances. 0 in the simulator.
    foreign: u32,
}

impl PcddbNode {
    /// An idle node in the clusters `memberships` (cluster id, its launch node).
    pub fn new(
        node: GraphNode,
        per_core: Thresholds,
        memberships: Vec<(ClusterId, NodeId)>,
    ) -> Self {
        Self {
            per_core,
            load: CoreLoad::new(node.cores),
            memberships: memberships
                .into_iter()
                .map(|(cluster, launch)| Membership {
                    cluster,
                    launch,
                    table: UnderloadTable::default(),
                })
                .collect(),
            holding: HashMap::new(),
            foreign: 0,
            node,
        }
    }

    /// Sets the load other work puts on the node: the cores held by anything but this machine's
    /// instances (in the runtime: batch tasks, stream workers, other workflows).
    ///
    /// Seed 004's instance table counts the instances of *every* program on the node (spec 05
    /// §4: the local resource agent counts what runs on its node), so x — the count the self-check
    /// compares with `LT × cores` and the one `MT × cores − x` takes room from — includes them.
    /// A machine that counted its workflow's instances only reported a node full of other work
    /// as underloaded and took `MT × cores` instances that then waited there for its cores while
    /// other nodes idled. The simulator runs one workflow alone, so it never sets this (0).
    ///
    /// [`PcddbNode::held`] and [`PcddbNode::peak`] stay this machine's own instances.
    pub fn set_foreign_load(&mut self, cores: u32) {
        self.foreign = cores;
    }

    /// The load other work puts on the node ([`PcddbNode::set_foreign_load`]).
    pub fn foreign_load(&self) -> u32 {
        self.foreign
    }

    /// x, the node's instance count as the protocol compares it: this machine's instances and
    /// the load other work puts on the node.
    fn counted(&self) -> u32 {
        self.load.held().saturating_add(self.foreign)
    }

    /// Sets the node's instance count and table for `cluster` as a scenario describes them (the
    /// worked example starts mid-run). Instances are spread over cores; they belong to no program
    /// of this launch node, so they never finish here.
    pub fn preset(&mut self, held: u32, cluster: ClusterId, table: Vec<NodeId>) {
        for _ in 0..held {
            self.load.place();
        }
        if let Some(m) = self.memberships.iter_mut().find(|m| m.cluster == cluster) {
            m.table = UnderloadTable::new(table);
        }
    }

    /// The clusters this node is in change (proximity clusters computed again from fresh
    /// round trips): a cluster it stays in keeps its table; a new one starts empty, so the next
    /// self-check reports to that cluster's launch node when the node is underloaded.
    pub fn set_memberships(&mut self, memberships: Vec<(ClusterId, NodeId)>) {
        let mut old = std::mem::take(&mut self.memberships);
        for (cluster, launch) in memberships {
            let table = old
                .iter_mut()
                .find(|m| m.cluster == cluster && m.launch == launch)
                .map(|m| std::mem::take(&mut m.table))
                .unwrap_or_default();
            self.memberships.push(Membership {
                cluster,
                launch,
                table,
            });
        }
    }

    /// The clusters this node is in.
    pub fn clusters(&self) -> Vec<ClusterId> {
        self.memberships.iter().map(|m| m.cluster).collect()
    }

    /// The node's attributes change (the requests it accepts from are matched against them).
    pub fn set_attributes(&mut self, attributes: super::AttrMask) {
        self.node.attributes = attributes;
    }

    /// Instances held (queued or running).
    pub fn held(&self) -> u32 {
        self.load.held()
    }

    /// Most instances held at once.
    pub fn peak(&self) -> u32 {
        self.load.peak()
    }

    /// This node's underloaded-node table for `cluster`.
    pub fn table(&self, cluster: ClusterId) -> Option<&UnderloadTable> {
        self.memberships
            .iter()
            .find(|m| m.cluster == cluster)
            .map(|m| &m.table)
    }

    fn underloaded(&self) -> bool {
        self.counted() < self.per_core.lt.saturating_mul(self.node.cores)
    }

    /// Handles one event at `now`.
    pub fn handle(&mut self, event: NodeEvent, _now: Time) -> Vec<Outgoing> {
        match event {
            NodeEvent::SelfCheck => self.self_check(),
            NodeEvent::Deliver(Message {
                body: Body::Request(request),
                ..
            }) => self.on_request(request),
            NodeEvent::Deliver(_) => Vec::new(),
            NodeEvent::Finished { instance, core } => {
                self.load.release(core);
                let Some(launch) = self.holding.remove(&instance) else {
                    return Vec::new();
                };
                vec![self.send(launch, Body::Result { instance })]
            }
        }
    }

    fn send(&self, to: NodeId, body: Body) -> Outgoing {
        Outgoing::Send(Message {
            from: self.node.id,
            to,
            body,
        })
    }

    /// a) Below LT: record itself and tell each launch node — at every check that finds it so
    /// (seed 004 §2.5 a), not only the first.
    fn self_check(&mut self) -> Vec<Outgoing> {
        let me = self.node.id;
        let underloaded = self.underloaded();
        let mut out = Vec::new();
        for k in 0..self.memberships.len() {
            let m = &mut self.memberships[k];
            if !underloaded {
                m.table.remove(me);
            } else {
                m.table.add(me);
                let (launch, cluster) = (m.launch, m.cluster);
                out.push(self.send(launch, Body::Status { cluster }));
            }
        }
        out
    }

    /// c) Merge, then pass on or take MT − x.
    fn on_request(&mut self, mut request: AllocationRequest) -> Vec<Outgoing> {
        let me = self.node.id;
        let underloaded = self.underloaded();
        let Some(k) = self
            .memberships
            .iter()
            .position(|m| m.cluster == request.cluster)
        else {
            // Not a member of this cluster: nothing to merge into; send it home.
            return vec![self.send(request.launch, Body::Return(request))];
        };
        // Merge: the request's entries for other nodes replace ours; our own follows our load,
        // and is dropped from both tables whichever way (c)(a) and (b) go: a loaded node is no
        // longer underloaded, an underloaded one takes what it can and is not any more. So the
        // table kept is the request's without this node, the one the request travels on with.
        request.table.retain(|&n| n != me);
        // Shared, not copied: the node and the request hold the same entries from here on.
        self.memberships[k].table = UnderloadTable::without(request.table.clone(), me);

        let mut out = Vec::new();
        if underloaded {
            // b) Take up to MT − x instances this node can run, in request order (x counts
            // what other work holds on the node too).
            let room = self.per_core.room(self.node.cores, self.counted()) as usize;
            let attrs = self.node.attributes;
            let fits = |w: &Wanted| w.requires & attrs == w.requires;
            let mut taken = Vec::new();
            // The common case — the front instances fit — pops them in O(1) each; only a
            // requirement this node misses makes it scan and keep the rest in order.
            while taken.len() < room && request.instances.front().is_some_and(fits) {
                if let Some(w) = request.instances.pop_front() {
                    taken.push(w.instance);
                }
            }
            if taken.len() < room && !request.instances.is_empty() {
                request.instances.retain(|w: &Wanted| {
                    if taken.len() < room && fits(w) {
                        taken.push(w.instance);
                        false
                    } else {
                        true
                    }
                });
            }
            if !taken.is_empty() {
                for &instance in &taken {
                    // Already held here: the reply says so again, but it keeps its one slot.
                    if self.holding.contains_key(&instance) {
                        continue;
                    }
                    let core = self.load.place();
                    self.holding.insert(instance, request.launch);
                    out.push(Outgoing::Run { instance, core });
                }
                out.push(self.send(
                    request.launch,
                    Body::Reply {
                        cluster: request.cluster,
                        taken,
                        remaining: request.instances.len() as u32,
                    },
                ));
            }
        }
        if !request.instances.is_empty() {
            out.push(self.forward(k, request));
        }
        out
    }

    /// Forward to the first node of the local table, or (e) home when the table ran dry.
    fn forward(&self, k: usize, request: AllocationRequest) -> Outgoing {
        match self.memberships[k].table.first_other(self.node.id) {
            Some(next) => self.send(next, Body::Request(request)),
            None => self.send(request.launch, Body::Return(request)),
        }
    }
}

/// A launch node's underloaded-node table of one cluster: its entries in order, each with the
/// time it was last reported, and an index from node to slot, so a `status` or a `reply` — one
/// per underloaded node per check period — finds its entry in O(1) instead of scanning a table
/// that may list every member (a round of checks cost nodes² steps).
///
/// A removed entry leaves a hole; the table closes them up when they outnumber its entries, so
/// that costs O(1) per removal on average.
#[derive(Clone, Debug, Default)]
struct LaunchTable {
    /// Entries in order; `None`: a removed entry.
    slots: Vec<Option<(NodeId, Time)>>,
    /// Each listed node's slot (its first, should a preset table list it twice).
    index: HashMap<NodeId, usize>,
    /// A node is listed twice (only a preset table can do that): removals then look at every
    /// entry, as a plain list would.
    repeats: bool,
}

impl LaunchTable {
    fn from_entries(entries: impl IntoIterator<Item = (NodeId, Time)>) -> Self {
        let mut t = Self::default();
        for (n, at) in entries {
            t.slots.push(Some((n, at)));
            let slot = t.slots.len() - 1;
            match t.index.entry(n) {
                Entry::Vacant(e) => {
                    e.insert(slot);
                }
                Entry::Occupied(_) => t.repeats = true,
            }
        }
        t
    }

    /// The entries in order.
    fn iter(&self) -> impl Iterator<Item = (NodeId, Time)> + '_ {
        self.slots.iter().flatten().copied()
    }

    fn is_empty(&self) -> bool {
        self.index.is_empty()
    }

    /// `n` reported at `now`: its entry's time is refreshed, or it is appended.
    fn report(&mut self, n: NodeId, now: Time) {
        match self.index.get(&n) {
            Some(&slot) => {
                if let Some(entry) = &mut self.slots[slot] {
                    entry.1 = now;
                }
            }
            None => {
                self.slots.push(Some((n, now)));
                self.index.insert(n, self.slots.len() - 1);
            }
        }
    }

    /// Drops every entry of `n`.
    fn remove(&mut self, n: NodeId) {
        if self.repeats {
            self.retain(|m, _| m != n);
            return;
        }
        if let Some(slot) = self.index.remove(&n) {
            self.slots[slot] = None;
            if self.slots.len() > 2 * self.index.len() + 16 {
                self.retain(|_, _| true);
            }
        }
    }

    /// Keeps the entries `keep` accepts, in order, and closes the holes.
    fn retain(&mut self, mut keep: impl FnMut(NodeId, Time) -> bool) {
        let kept: Vec<(NodeId, Time)> = self.iter().filter(|&(n, at)| keep(n, at)).collect();
        *self = Self::from_entries(kept);
    }
}

/// The task manager on a launch node: one underloaded-node table per proximity cluster it
/// launches into (spec 05 §2: "a user picks a launch node per cluster"; the runtime's server is
/// the launch node of every cluster).
///
/// A request carries one cluster's table and travels only among that cluster's members
/// (members forward to the first node of *their* table for that cluster). With several
/// clusters, the launch node sends its next request into the first cluster, in the order it was
/// given, whose table lists an underloaded node: a request travels within one cluster first,
/// and what it could not place returns (event e) and goes into the next cluster whose table
/// is not empty.
#[derive(Clone, Debug)]
pub struct LaunchNode {
    id: NodeId,
    /// Per cluster, in preference order: the underloaded-node table with the time each entry
    /// was last reported.
    tables: Vec<(ClusterId, LaunchTable)>,
    graph: InstanceGraph,
    pending: VecDeque<Wanted>,
    /// Requests sent and not yet ended (a reply with nothing left, or a return).
    in_flight: u32,
}

impl LaunchNode {
    /// The launch node `id` of `cluster`, running the workflow `graph`.
    pub fn new(id: NodeId, cluster: ClusterId, graph: InstanceGraph) -> Self {
        Self::with_clusters(id, vec![cluster], graph)
    }

    /// The launch node `id` of every cluster in `clusters` (in preference order).
    pub fn with_clusters(id: NodeId, clusters: Vec<ClusterId>, graph: InstanceGraph) -> Self {
        Self {
            id,
            tables: clusters
                .into_iter()
                .map(|c| (c, LaunchTable::default()))
                .collect(),
            graph,
            pending: VecDeque::new(),
            in_flight: 0,
        }
    }

    /// The clusters change (proximity clusters are computed again from fresh round trips):
    /// each `(cluster, members)` keeps its table with the entries still members; a new cluster
    /// starts with an empty table (its members report to it at their next self-check).
    pub fn set_clusters(&mut self, clusters: &[(ClusterId, Vec<NodeId>)]) {
        let mut old = std::mem::take(&mut self.tables);
        for (c, members) in clusters {
            let mut table = old
                .iter_mut()
                .find(|(k, _)| k == c)
                .map(|(_, t)| std::mem::take(t))
                .unwrap_or_default();
            let members: HashSet<NodeId> = members.iter().copied().collect();
            table.retain(|n, _| members.contains(&n));
            self.tables.push((*c, table));
        }
    }

    /// The clusters it launches into, in preference order.
    pub fn clusters(&self) -> Vec<ClusterId> {
        self.tables.iter().map(|(c, _)| *c).collect()
    }

    /// Sets the first cluster's table as a scenario describes it (the worked example starts
    /// mid-run).
    pub fn preset_table(&mut self, table: Vec<NodeId>) {
        if let Some((_, t)) = self.tables.first_mut() {
            *t = LaunchTable::from_entries(table.into_iter().map(|n| (n, 0)));
        }
    }

    /// The first cluster's underloaded-node table in order.
    pub fn table(&self) -> Vec<NodeId> {
        self.tables
            .first()
            .map(|(_, t)| t.iter().map(|(n, _)| n).collect())
            .unwrap_or_default()
    }

    /// The underloaded-node table of `cluster` in order (empty for a cluster it does not know).
    pub fn table_of(&self, cluster: ClusterId) -> Vec<NodeId> {
        self.tables
            .iter()
            .find(|(c, _)| *c == cluster)
            .map(|(_, t)| t.iter().map(|(n, _)| n).collect())
            .unwrap_or_default()
    }

    fn table_mut(&mut self, cluster: ClusterId) -> Option<&mut LaunchTable> {
        self.tables
            .iter_mut()
            .find(|(c, _)| *c == cluster)
            .map(|(_, t)| t)
    }

    /// The instance graph it tracks.
    pub fn graph(&self) -> &InstanceGraph {
        &self.graph
    }

    /// Whether an allocation request is travelling.
    pub fn request_in_flight(&self) -> bool {
        self.in_flight > 0
    }

    /// Instances that will not run (a runtime's cancel): dropped from the next request and
    /// never made ready by their producers' results.
    pub fn withdraw(&mut self, ids: &[InstanceId]) {
        let ids: std::collections::HashSet<InstanceId> = ids.iter().copied().collect();
        for &id in &ids {
            self.graph.withdraw(id);
        }
        self.pending.retain(|w| !ids.contains(&w.instance));
    }

    /// Instances that ended without succeeding come back (a runtime's resubmit): see
    /// [`InstanceGraph::reinstate`]. Returns those ready now, in the order given; the caller
    /// places them with [`LaunchNode::resubmit`] (the others are readied by their producers'
    /// results).
    pub fn reinstate(&mut self, ids: &[InstanceId]) -> Vec<InstanceId> {
        ids.iter()
            .copied()
            .filter(|&id| self.graph.reinstate(id))
            .collect()
    }

    /// Instances that must run again although the graph already counts them ready — a failed
    /// attempt with retries left, an attempt lost with its node, an output lost with its node
    /// (produced again) — join the front of the next request, like ready instances: the runtime
    /// places every run through the protocol.
    pub fn resubmit(&mut self, ids: &[InstanceId], now: Time) -> Vec<Outgoing> {
        for &id in ids.iter().rev() {
            if !self.pending.iter().any(|w| w.instance == id) {
                self.pending.push_front(self.graph.wanted(id));
            }
        }
        let mut out = Vec::new();
        self.dispatch(now, &mut out);
        out
    }

    /// Handles one event at `now`.
    pub fn handle(&mut self, event: LaunchEvent, now: Time) -> Vec<Outgoing> {
        let mut out = Vec::new();
        match event {
            LaunchEvent::Start => {
                let ready = self.graph.start();
                self.ready(ready, &mut out);
            }
            LaunchEvent::Deliver(msg) => match msg.body {
                Body::Status { cluster } => {
                    // A status for a cluster this launch node does not launch into (stale
                    // after the clusters changed) is ignored.
                    if let Some(table) = self.table_mut(cluster) {
                        table.report(msg.from, now);
                    }
                }
                Body::Reply {
                    cluster, remaining, ..
                } => {
                    // d) The replying node is no longer underloaded (in that cluster's table:
                    // the node dropped itself from its own table of that cluster only).
                    if let Some(table) = self.table_mut(cluster) {
                        table.remove(msg.from);
                    }
                    if remaining == 0 {
                        self.in_flight = self.in_flight.saturating_sub(1);
                    }
                }
                Body::Return(request) => {
                    // The travel disproved every entry that left the request's table, unless
                    // that node reported again after the request was sent.
                    let sent_at = request.sent_at;
                    let carried: HashSet<NodeId> = request.table.iter().copied().collect();
                    if let Some(table) = self.table_mut(request.cluster) {
                        table.retain(|n, at| at > sent_at || carried.contains(&n));
                    }
                    // The returned instances go first, before those that became ready since —
                    // moving the shorter of the two queues (several requests may be out, so the
                    // queue a return meets can be long).
                    let mut returned = request.instances;
                    if returned.len() <= self.pending.len() {
                        while let Some(w) = returned.pop_back() {
                            self.pending.push_front(w);
                        }
                    } else {
                        returned.append(&mut self.pending);
                        self.pending = returned;
                    }
                    self.in_flight = self.in_flight.saturating_sub(1);
                }
                Body::Result { instance } => {
                    // f) A finished instance readies its dependants (event 2). A result the
                    // graph refuses (a duplicate) changes nothing.
                    if let Ok(ready) = self.graph.finish(instance) {
                        self.ready(ready, &mut out);
                    }
                }
                _ => {}
            },
        }
        self.dispatch(now, &mut out);
        out
    }

    /// Queues newly ready instances for the next request.
    pub fn ready(&mut self, ready: Vec<InstanceId>, out: &mut Vec<Outgoing>) {
        for id in ready {
            out.push(Outgoing::Ready(id));
            self.pending.push_back(self.graph.wanted(id));
        }
    }

    /// b) Packs every pending instance and a table into a request to the table's first node —
    /// the first cluster (in preference order) whose table is not empty — at once, whether or not
    /// earlier requests are still travelling (seed 004 §2.4: each event that readies instances
    /// starts the balancing for them).
    fn dispatch(&mut self, now: Time, out: &mut Vec<Outgoing>) {
        if self.pending.is_empty() {
            return;
        }
        let Some((cluster, table)) = self.tables.iter().find(|(_, t)| !t.is_empty()) else {
            return;
        };
        let cluster = *cluster;
        let table: SharedTable = table.iter().map(|(n, _)| n).collect();
        let request = AllocationRequest {
            cluster,
            launch: self.id,
            sent_at: now,
            instances: std::mem::take(&mut self.pending),
            table,
        };
        self.in_flight += 1;
        out.push(Outgoing::Send(Message {
            from: self.id,
            to: request.table[0],
            body: Body::Request(request),
        }));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::policy::graph::test_stream::stream;

    #[test]
    fn the_indexed_tables_answer_as_plain_lists_do() {
        for seed in 0..20 {
            let mut next = stream(seed);
            // Presets may list a node twice; the plain list is the reference.
            let preset: Vec<NodeId> = (0..next(12)).map(|_| NodeId(next(10) as u32)).collect();
            let mut table = UnderloadTable::new(preset.clone());
            let mut list = preset.clone();
            let mut launch = LaunchTable::from_entries(preset.iter().map(|&n| (n, 0)));
            let mut launch_list: Vec<(NodeId, Time)> = preset.iter().map(|&n| (n, 0)).collect();
            for step in 0..400 {
                let n = NodeId(next(10) as u32);
                match next(5) {
                    0 => {
                        table.add(n);
                        if !list.contains(&n) {
                            list.push(n);
                        }
                    }
                    1 => {
                        table.remove(n);
                        list.retain(|&e| e != n);
                    }
                    2 => {
                        launch.report(n, step);
                        match launch_list.iter_mut().find(|(m, _)| *m == n) {
                            Some(e) => e.1 = step,
                            None => launch_list.push((n, step)),
                        }
                    }
                    3 => {
                        launch.remove(n);
                        launch_list.retain(|&(m, _)| m != n);
                    }
                    _ => {
                        let since = step.saturating_sub(next(40));
                        launch.retain(|m, at| at > since || m.0 % 3 == 0);
                        launch_list.retain(|&(m, at)| at > since || m.0 % 3 == 0);
                    }
                }
                assert_eq!(table.entries(), &list[..], "seed {seed} step {step}");
                assert_eq!(table.contains(n), list.contains(&n));
                assert_eq!(table.first_other(n), list.iter().copied().find(|&e| e != n));
                assert_eq!(
                    launch.iter().collect::<Vec<_>>(),
                    launch_list,
                    "seed {seed} step {step}"
                );
                assert_eq!(launch.is_empty(), launch_list.is_empty());
            }
        }
    }

    #[test]
    fn a_shared_table_retains_as_a_vec_does_and_changes_no_other_copy() {
        for seed in 0..50 {
            let mut next = stream(seed);
            let list: Vec<NodeId> = (0..next(20)).map(|_| NodeId(next(8) as u32)).collect();
            let mut table = SharedTable::from(list.clone());
            let mut reference = list.clone();
            let mut copies = Vec::new();
            for _ in 0..12 {
                copies.push((table.clone(), reference.clone()));
                // Mostly the front entry (a hop), sometimes any entry.
                let n = match (next(3), reference.first()) {
                    (0, _) | (_, None) => NodeId(next(8) as u32),
                    (_, Some(&front)) => front,
                };
                let mut calls = 0;
                table.retain(|&e| {
                    calls += 1;
                    e != n
                });
                assert_eq!(calls, reference.len(), "keep is called once per entry");
                reference.retain(|&e| e != n);
                assert_eq!(&table[..], &reference[..], "seed {seed}");
            }
            for (copy, expected) in copies {
                assert_eq!(&copy[..], &expected[..], "seed {seed}: a copy changed");
            }
        }
    }

    #[test]
    fn a_shared_table_reads_prints_and_serialises_as_the_list_it_holds() {
        let list = vec![NodeId(4), NodeId(2), NodeId(9)];
        let mut table = SharedTable::from(list.clone());
        assert_eq!(format!("{table:?}"), format!("{list:?}"));
        let json = serde_json::to_string(&table).unwrap_or_default();
        assert_eq!(json, serde_json::to_string(&list).unwrap_or_default());
        let back: Result<SharedTable, _> = serde_json::from_str(&json);
        assert_eq!(back.ok(), Some(table.clone()));
        // A table whose front was dropped serialises what it holds, not what it shares.
        table.retain(|&n| n != NodeId(4));
        assert_eq!(serde_json::to_string(&table).unwrap_or_default(), "[2,9]");
        table.retain(|_| false);
        assert!(table.is_empty());
        assert_eq!(table, SharedTable::default());
    }

    #[test]
    fn a_node_that_passed_a_request_shares_its_table() {
        let launch = NodeId(0);
        let graph_node = |id| GraphNode {
            id: NodeId(id),
            cores: 1,
            attributes: 0,
        };
        let mut node = PcddbNode::new(
            graph_node(1),
            Thresholds { lt: 1, mt: 1 },
            vec![(ClusterId(0), launch)],
        );
        // Loaded: the request passes through.
        node.preset(1, ClusterId(0), vec![]);
        let request = AllocationRequest {
            cluster: ClusterId(0),
            launch,
            sent_at: 0,
            instances: [Wanted {
                instance: InstanceId(0),
                requires: 0,
            }]
            .into(),
            table: (1..1000).map(NodeId).collect(),
        };
        let out = node.handle(
            NodeEvent::Deliver(Message {
                from: launch,
                to: NodeId(1),
                body: Body::Request(request),
            }),
            0,
        );
        let [
            Outgoing::Send(Message {
                to,
                body: Body::Request(forwarded),
                ..
            }),
        ] = &out[..]
        else {
            panic!("forwarded: {out:?}");
        };
        assert_eq!(*to, NodeId(2));
        let Some(kept) = node.table(ClusterId(0)) else {
            panic!("no table");
        };
        assert_eq!(kept.entries(), (2..1000).map(NodeId).collect::<Vec<_>>());
        assert!(Arc::ptr_eq(&kept.shared.entries, &forwarded.table.entries));
    }

    /// The acceptance rule (spec 05 §4 c b): MT × cores − x while x < LT × cores, else none.
    #[test]
    fn a_node_takes_mt_times_cores_less_what_it_holds_only_while_underloaded() {
        let t = Thresholds { lt: 2, mt: 10 };
        assert_eq!(t.room(2, 0), 20);
        assert_eq!(t.room(2, 3), 17);
        assert_eq!(t.room(2, 4), 0, "at LT × cores it is not underloaded");
        assert_eq!(t.room(1, 1), 9);
        assert_eq!(Thresholds { lt: 5, mt: 3 }.room(1, 4), 0, "above MT: none");
        assert_eq!(
            Thresholds {
                lt: u32::MAX,
                mt: u32::MAX
            }
            .room(3, 1),
            u32::MAX - 1
        );
    }

    /// A request from launch node 0 in cluster 0 to node 1 offering instances `ids` (no
    /// requirements), with the table `table`.
    fn request_to_node_1(ids: std::ops::Range<u32>, table: Vec<NodeId>) -> NodeEvent {
        NodeEvent::Deliver(Message {
            from: NodeId(0),
            to: NodeId(1),
            body: Body::Request(AllocationRequest {
                cluster: ClusterId(0),
                launch: NodeId(0),
                sent_at: 0,
                instances: ids
                    .map(|i| Wanted {
                        instance: InstanceId(i),
                        requires: 0,
                    })
                    .collect(),
                table: table.into(),
            }),
        })
    }

    /// Node 1 (2 cores, LT 2, MT 5 per core) in cluster 0 of launch node 0.
    fn two_core_node() -> PcddbNode {
        PcddbNode::new(
            GraphNode {
                id: NodeId(1),
                cores: 2,
                attributes: 0,
            },
            Thresholds { lt: 2, mt: 5 },
            vec![(ClusterId(0), NodeId(0))],
        )
    }

    /// Seed 004's instance table counts every program's instances on the node: a node whose
    /// cores other work holds at LT × cores or more is not underloaded, though it holds none of
    /// the workflow's instances. It sends no `status` (and drops itself from its table), and a
    /// request reaching it passes on untouched.
    #[test]
    fn a_node_other_work_loads_to_lt_reports_no_status_and_passes_a_request_on() {
        let mut node = two_core_node();
        // Idle: it reports.
        let out = node.handle(NodeEvent::SelfCheck, 0);
        assert!(
            matches!(
                &out[..],
                [Outgoing::Send(Message {
                    body: Body::Status { .. },
                    ..
                })]
            ),
            "{out:?}"
        );
        node.set_foreign_load(4);
        assert_eq!(node.foreign_load(), 4);
        assert!(node.handle(NodeEvent::SelfCheck, 1).is_empty());
        assert_eq!(node.table(ClusterId(0)).map(UnderloadTable::len), Some(0));
        let out = node.handle(request_to_node_1(0..3, vec![NodeId(1), NodeId(2)]), 2);
        let [
            Outgoing::Send(Message {
                to,
                body: Body::Request(r),
                ..
            }),
        ] = &out[..]
        else {
            panic!("passed on: {out:?}");
        };
        assert_eq!(*to, NodeId(2));
        assert_eq!(r.instances.len(), 3, "nothing taken");
        assert_eq!((node.held(), node.peak()), (0, 0));
        // More than LT × cores: the same.
        node.set_foreign_load(9);
        assert!(node.handle(NodeEvent::SelfCheck, 3).is_empty());
        // The other work ends: it reports again.
        node.set_foreign_load(0);
        assert_eq!(node.handle(NodeEvent::SelfCheck, 4).len(), 1);
    }

    /// Below LT × cores with other work on the node, it takes MT × cores − x, where x counts
    /// its own instances and the other work; `held` and `peak` stay its own instances.
    #[test]
    fn a_node_takes_mt_times_cores_less_its_own_instances_and_the_other_work() {
        let mut node = two_core_node();
        // One instance of its own.
        let out = node.handle(request_to_node_1(0..1, vec![NodeId(1)]), 0);
        assert!(
            out.iter().any(|o| matches!(o, Outgoing::Run { .. })),
            "{out:?}"
        );
        assert_eq!(node.held(), 1);
        // Other work holds two cores: x = 3 < LT × cores = 4; room = 10 − 3 = 7.
        node.set_foreign_load(2);
        let out = node.handle(request_to_node_1(10..30, vec![NodeId(1)]), 1);
        let runs = out
            .iter()
            .filter(|o| matches!(o, Outgoing::Run { .. }))
            .count();
        assert_eq!(runs, 7, "{out:?}");
        let reply = out.iter().find_map(|o| match o {
            Outgoing::Send(Message {
                body: Body::Reply {
                    taken, remaining, ..
                },
                ..
            }) => Some((taken.len(), *remaining)),
            _ => None,
        });
        assert_eq!(reply, Some((7, 13)));
        assert_eq!((node.held(), node.peak()), (8, 8));
    }

    #[test]
    fn a_table_without_a_node_knows_it_is_absent() {
        let mut t = UnderloadTable::without(vec![NodeId(3), NodeId(1)].into(), NodeId(2));
        assert!(!t.contains(NodeId(2)));
        t.add(NodeId(2));
        assert_eq!(t.entries(), [NodeId(3), NodeId(1), NodeId(2)]);
        t.remove(NodeId(1));
        t.remove(NodeId(2));
        assert_eq!(t.entries(), &[NodeId(3)]);
        assert_eq!(t, UnderloadTable::new(vec![NodeId(3)]));
    }
}
