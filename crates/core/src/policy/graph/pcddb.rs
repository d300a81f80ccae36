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
use std::collections::VecDeque;

/// An ordered underloaded-node table (one per cluster a node belongs to).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UnderloadTable {
    entries: Vec<NodeId>,
}

impl UnderloadTable {
    /// A table holding `entries` in order.
    pub fn new(entries: Vec<NodeId>) -> Self {
        Self { entries }
    }

    /// The entries in order.
    pub fn entries(&self) -> &[NodeId] {
        &self.entries
    }

    /// Whether `n` is listed.
    pub fn contains(&self, n: NodeId) -> bool {
        self.entries.contains(&n)
    }

    /// Removes `n` if listed.
    pub fn remove(&mut self, n: NodeId) {
        self.entries.retain(|&e| e != n);
    }

    /// Appends `n` if not listed.
    pub fn add(&mut self, n: NodeId) {
        if !self.contains(n) {
            self.entries.push(n);
        }
    }

    /// The first entry other than `me`.
    pub fn first_other(&self, me: NodeId) -> Option<NodeId> {
        self.entries.iter().copied().find(|&e| e != me)
    }

    /// Whether the table is empty.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
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
    /// Node-level thresholds: per-core LT and MT × cores.
    lt: u32,
    mt: u32,
    load: CoreLoad,
    memberships: Vec<Membership>,
    /// Instances held and the launch node each result goes to.
    holding: Vec<(InstanceId, NodeId)>,
}

impl PcddbNode {
    /// An idle node in the clusters `memberships` (cluster id, its launch node).
    pub fn new(
        node: GraphNode,
        per_core: Thresholds,
        memberships: Vec<(ClusterId, NodeId)>,
    ) -> Self {
        Self {
            lt: per_core.lt * node.cores,
            mt: per_core.mt * node.cores,
            load: CoreLoad::new(node.cores),
            memberships: memberships
                .into_iter()
                .map(|(cluster, launch)| Membership {
                    cluster,
                    launch,
                    table: UnderloadTable::default(),
                })
                .collect(),
            holding: Vec::new(),
            node,
        }
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
        self.load.held() < self.lt
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
                let launch = match self.holding.iter().position(|&(i, _)| i == instance) {
                    Some(k) => self.holding.swap_remove(k).1,
                    None => return Vec::new(),
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
        // Merge: the request's entries for other nodes replace ours; our own follows our load.
        let mut merged = request.table.clone();
        merged.retain(|&n| n != me || underloaded);
        if underloaded && !merged.contains(&me) {
            merged.push(me);
        }
        self.memberships[k].table = UnderloadTable::new(merged);

        let mut out = Vec::new();
        if underloaded {
            // b) Take up to MT − x instances this node can run, in request order.
            let room = self.mt.saturating_sub(self.load.held()) as usize;
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
            request.table.retain(|&n| n != me);
            self.memberships[k].table.remove(me);
            if !taken.is_empty() {
                for &instance in &taken {
                    let core = self.load.place();
                    self.holding.push((instance, request.launch));
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
        } else {
            // a) Not underloaded: remove itself from the request's table.
            request.table.retain(|&n| n != me);
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

/// The task manager on a cluster's launch node.
#[derive(Clone, Debug)]
pub struct LaunchNode {
    id: NodeId,
    cluster: ClusterId,
    /// The underloaded-node table with the time each entry was last reported.
    table: Vec<(NodeId, Time)>,
    graph: InstanceGraph,
    pending: VecDeque<Wanted>,
    /// Requests sent and not yet ended (a reply with nothing left, or a return).
    in_flight: u32,
}

impl LaunchNode {
    /// The launch node `id` of `cluster`, running the workflow `graph`.
    pub fn new(id: NodeId, cluster: ClusterId, graph: InstanceGraph) -> Self {
        Self {
            id,
            cluster,
            table: Vec::new(),
            graph,
            pending: VecDeque::new(),
            in_flight: 0,
        }
    }

    /// Sets the table as a scenario describes it (the worked example starts mid-run).
    pub fn preset_table(&mut self, table: Vec<NodeId>) {
        self.table = table.into_iter().map(|n| (n, 0)).collect();
    }

    /// The underloaded-node table in order.
    pub fn table(&self) -> Vec<NodeId> {
        self.table.iter().map(|&(n, _)| n).collect()
    }

    /// The instance graph it tracks.
    pub fn graph(&self) -> &InstanceGraph {
        &self.graph
    }

    /// Whether an allocation request is travelling.
    pub fn request_in_flight(&self) -> bool {
        self.in_flight > 0
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
                Body::Status { .. } => match self.table.iter_mut().find(|(n, _)| *n == msg.from) {
                    Some(entry) => entry.1 = now,
                    None => self.table.push((msg.from, now)),
                },
                Body::Reply { remaining, .. } => {
                    // d) The replying node is no longer underloaded.
                    self.table.retain(|&(n, _)| n != msg.from);
                    if remaining == 0 {
                        self.in_flight = self.in_flight.saturating_sub(1);
                    }
                }
                Body::Return(request) => {
                    // The travel disproved every entry that left the request's table, unless
                    // that node reported again after the request was sent.
                    self.table
                        .retain(|&(n, at)| at > request.sent_at || request.table.contains(&n));
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

    /// b) Packs every pending instance and the table into a request to the table's first node —
    /// at once, whether or not earlier requests are still travelling (seed 004 §2.4: each event
    /// that readies instances starts the balancing for them).
    fn dispatch(&mut self, now: Time, out: &mut Vec<Outgoing>) {
        if self.pending.is_empty() || self.table.is_empty() {
            return;
        }
        let table: Vec<NodeId> = self.table.iter().map(|&(n, _)| n).collect();
        let request = AllocationRequest {
            cluster: self.cluster,
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
