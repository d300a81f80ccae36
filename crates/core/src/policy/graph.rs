//! Task graphs on a heterogeneous cluster (spec 05): the node catalogue, proximity clustering, and
//! three ways of placing a workflow's instances — `pcddb` (the paper's decentralised LT/MT
//! protocol), `centralised` (monitoring agents and one dispatcher) and `static` (pre-assigned by
//! core count).
//!
//! Every balancer is a set of sans-IO state machines: one [`NodeAgent`] per node (its local
//! resource agent) and one [`Manager`] on the launch node (its task manager). A driver — the
//! simulator today, real agents over gRPC later — feeds them events with the time
//! (`handle(event, now)`) and carries out what they return ([`Outgoing`]): messages to deliver
//! after the network's latency, instances to run on a core, instances that became ready.
//!
//! - [`catalogue`]: node classes and attribute masks (spec 05 §1);
//! - [`clustering`]: proximity clusters from a latency matrix (spec 05 §2);
//! - [`dag`]: instance readiness from the workflow's data flow (spec 05 §3, event 2);
//! - [`pcddb`]: the balancing protocol (spec 05 §4);
//! - [`centralised`], [`static_placement`]: the baselines.

pub mod catalogue;
pub mod centralised;
pub mod clustering;
pub mod dag;
pub mod pcddb;
pub mod static_placement;

/// A deterministic stream of small numbers for the modules' randomised tests (the core takes no
/// random-number crate).
#[cfg(test)]
pub(crate) mod test_stream {
    /// Numbers below `n`, one per call, from an LCG seeded with `seed`.
    pub fn stream(seed: u64) -> impl FnMut(u64) -> u64 {
        let mut x = seed;
        move |n| {
            x = x
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (x >> 33) % n
        }
    }
}

use crate::model::NodeId;
use crate::model::workflow::Workflow;
use crate::time::Time;
use serde::{Deserialize, Serialize};
use std::collections::{HashSet, VecDeque};
use std::fmt;
use std::str::FromStr;

/// One component instance of a workflow, dense from 0 in task order ([`dag::InstanceGraph`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct InstanceId(pub u32);

/// A set of node attributes as bits of a [`catalogue::NodeCatalogue`]'s vocabulary.
pub type AttrMask = u64;

/// A proximity cluster's id: each node keeps one underloaded-node table per cluster it is in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ClusterId(pub u32);

/// An instance as it travels in a request: its id and the attributes a node needs to accept it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Wanted {
    /// The instance.
    pub instance: InstanceId,
    /// Attributes required (spec 05 §3: "special requirements travel in allocation requests").
    pub requires: AttrMask,
}

/// Per-core thresholds (spec 05 §4): a node with n cores uses n·LT and n·MT.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Thresholds {
    /// Underload threshold per core: a node holding fewer than `lt × cores` instances is underloaded.
    pub lt: u32,
    /// Moderate-load cap per core: a node accepts work up to `mt × cores` instances.
    pub mt: u32,
}

impl Default for Thresholds {
    /// The paper's experiment: LT = 2, MT = 10 per core.
    fn default() -> Self {
        Self { lt: 2, mt: 10 }
    }
}

impl Thresholds {
    /// Whether `1 ≤ LT ≤ MT`: with LT 0 no node is ever underloaded, so none asks for work and a
    /// workflow never starts; with MT below LT an underloaded node has no room to take any.
    pub fn is_valid(&self) -> bool {
        1 <= self.lt && self.lt <= self.mt
    }

    /// The most instances one allocation request gives a node of `cores` cores that holds
    /// `held` (spec 05 §4 c b): `MT × cores − held` while it is underloaded (`held < LT ×
    /// cores`), none otherwise. The one acceptance rule: a node's machine takes by it
    /// ([`pcddb::PcddbNode`]), and the runtime's launch node bounds what a node may claim by it.
    pub fn room(&self, cores: u32, held: u32) -> u32 {
        if held < self.lt.saturating_mul(cores) {
            self.mt.saturating_mul(cores).saturating_sub(held)
        } else {
            0
        }
    }
}

/// An allocation request (spec 05 §4 b): ready instances and the launch node's underloaded-node
/// table, passed from node to node.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AllocationRequest {
    /// The cluster whose tables it uses.
    pub cluster: ClusterId,
    /// The launch node that sent it (replies and returns go there).
    pub launch: NodeId,
    /// When the launch node sent it (to tell stale table entries from fresh reports on return).
    pub sent_at: Time,
    /// Instances still to place, in the order they became ready (taken from the front).
    pub instances: VecDeque<Wanted>,
    /// The underloaded-node table it carries, in order, shared with the nodes it passed
    /// (serialised as a plain list).
    pub table: pcddb::SharedTable,
}

/// What one message says.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Body {
    /// pcddb a): "I am underloaded" (node → launch node).
    Status {
        /// The cluster whose table to update.
        cluster: ClusterId,
    },
    /// pcddb b)/c): an allocation request (launch → node, node → node).
    Request(AllocationRequest),
    /// pcddb c)(b): "I took these" (node → launch node).
    Reply {
        /// The cluster of the request.
        cluster: ClusterId,
        /// Instances the node took.
        taken: Vec<InstanceId>,
        /// Instances still in the request after this node (0: the request is done).
        remaining: u32,
    },
    /// pcddb e): a request with instances left whose holder's table ran dry (node → launch node).
    Return(AllocationRequest),
    /// f): an instance finished (node → launch node / dispatcher), every balancer.
    Result {
        /// The finished instance.
        instance: InstanceId,
    },
    /// centralised: a monitoring agent's load report (node → dispatcher).
    Report {
        /// Instances the node holds (queued or running). A runtime's node also runs other
        /// work (batch tasks, stream workers, other workflows): each core that holds counts
        /// as one instance, so a node full of it reads full, not idle.
        held: u32,
    },
    /// centralised and static: "run this instance" (dispatcher → node).
    Dispatch {
        /// The instance.
        instance: InstanceId,
    },
}

impl Body {
    /// The message kind, as counted by drivers and reports.
    pub fn kind(&self) -> &'static str {
        match self {
            Body::Status { .. } => "status",
            Body::Request(_) => "request",
            Body::Reply { .. } => "reply",
            Body::Return(_) => "return",
            Body::Result { .. } => "result",
            Body::Report { .. } => "report",
            Body::Dispatch { .. } => "dispatch",
        }
    }

    /// Whether the launch node's task manager (rather than its local agent) handles it.
    pub fn for_manager(&self) -> bool {
        matches!(
            self,
            Body::Status { .. }
                | Body::Reply { .. }
                | Body::Return(_)
                | Body::Result { .. }
                | Body::Report { .. }
        )
    }
}

/// A message between two nodes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Message {
    /// Sender.
    pub from: NodeId,
    /// Receiver.
    pub to: NodeId,
    /// Content.
    pub body: Body,
}

/// What a state machine asks its driver to do.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Outgoing {
    /// Deliver a message (after the network's latency).
    Send(Message),
    /// Start an instance on one of this node's cores (queued behind what that core already runs).
    Run {
        /// The instance.
        instance: InstanceId,
        /// Core index on the node.
        core: u32,
    },
    /// The task manager found this instance ready (all its producers ended).
    Ready(InstanceId),
}

/// Events a node's local agent handles.
#[derive(Clone, Debug, PartialEq)]
pub enum NodeEvent {
    /// A message addressed to this node's agent.
    Deliver(Message),
    /// The periodic self-check (pcddb) or monitoring tick (centralised).
    SelfCheck,
    /// An instance this node ran finished on `core`.
    Finished {
        /// The instance.
        instance: InstanceId,
        /// Its core.
        core: u32,
    },
}

/// Events the launch node's task manager handles.
#[derive(Clone, Debug, PartialEq)]
pub enum LaunchEvent {
    /// The program starts (spec 05 §2.4, event 1).
    Start,
    /// A message addressed to the task manager.
    Deliver(Message),
}

/// Which balancer places the instances.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum BalancerKind {
    /// Pre-assigned by core count, never moved.
    Static,
    /// Monitoring agents and one dispatcher sending each ready instance to the least-loaded node.
    Centralised,
    /// The paper's decentralised LT/MT protocol.
    Pcddb,
}

impl BalancerKind {
    /// Every balancer, baselines first.
    pub const ALL: [BalancerKind; 3] = [
        BalancerKind::Static,
        BalancerKind::Centralised,
        BalancerKind::Pcddb,
    ];

    /// The name users type.
    pub fn as_str(self) -> &'static str {
        match self {
            BalancerKind::Static => "static",
            BalancerKind::Centralised => "centralised",
            BalancerKind::Pcddb => "pcddb",
        }
    }
}

impl fmt::Display for BalancerKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for BalancerKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "static" => Ok(BalancerKind::Static),
            "centralised" | "centralized" => Ok(BalancerKind::Centralised),
            "pcddb" => Ok(BalancerKind::Pcddb),
            _ => Err(format!(
                "unknown balancer `{s}`: expected static, centralised or pcddb"
            )),
        }
    }
}

/// One node as a balancer sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GraphNode {
    /// Its id.
    pub id: NodeId,
    /// CPU cores (each runs one instance at a time).
    pub cores: u32,
    /// Its attributes.
    pub attributes: AttrMask,
}

/// Everything a balancer needs to start: the deployment, the launch node and the workflow.
#[derive(Clone, Debug)]
pub struct GraphSetup<'a> {
    /// Every node of the cluster, indexed by `NodeId`.
    pub nodes: Vec<GraphNode>,
    /// The nodes the program is deployed on (a proximity cluster, or all), in table order.
    pub members: Vec<NodeId>,
    /// The launch node (a member).
    pub launch: NodeId,
    /// The workflow.
    pub workflow: &'a Workflow,
    /// Required attributes of each task, as masks.
    pub task_requires: Vec<AttrMask>,
    /// Per-core LT and MT (pcddb; centralised and static ignore them).
    pub thresholds: Thresholds,
}

/// A node's local agent under one of the balancers.
#[derive(Clone, Debug)]
pub enum NodeAgent {
    /// pcddb's local resource agent.
    Pcddb(pcddb::PcddbNode),
    /// A monitored node (centralised) or a plain executor (static).
    Executor(centralised::ExecutorNode),
}

impl NodeAgent {
    /// Handles one event at `now`.
    pub fn handle(&mut self, event: NodeEvent, now: Time) -> Vec<Outgoing> {
        match self {
            NodeAgent::Pcddb(n) => n.handle(event, now),
            NodeAgent::Executor(n) => n.handle(event, now),
        }
    }

    /// Instances the node holds (queued or running).
    pub fn held(&self) -> u32 {
        match self {
            NodeAgent::Pcddb(n) => n.held(),
            NodeAgent::Executor(n) => n.held(),
        }
    }

    /// Most instances the node held at once.
    pub fn peak(&self) -> u32 {
        match self {
            NodeAgent::Pcddb(n) => n.peak(),
            NodeAgent::Executor(n) => n.peak(),
        }
    }
}

/// The launch node's task manager under one of the balancers.
#[derive(Clone, Debug)]
pub enum Manager {
    /// pcddb's launch node.
    Pcddb(pcddb::LaunchNode),
    /// The centralised dispatcher.
    Centralised(centralised::Dispatcher),
    /// The static launcher.
    Static(static_placement::StaticLauncher),
}

impl Manager {
    /// Handles one event at `now`.
    pub fn handle(&mut self, event: LaunchEvent, now: Time) -> Vec<Outgoing> {
        match self {
            Manager::Pcddb(m) => m.handle(event, now),
            Manager::Centralised(m) => m.handle(event, now),
            Manager::Static(m) => m.handle(event, now),
        }
    }

    /// Instances whose result has reached the manager.
    pub fn finished(&self) -> u64 {
        match self {
            Manager::Pcddb(m) => m.graph().finished(),
            Manager::Centralised(m) => m.graph().finished(),
            Manager::Static(m) => m.graph().finished(),
        }
    }
}

/// Builds the agents (one per node of `setup.nodes`) and the launch node's manager.
pub fn build(kind: BalancerKind, setup: &GraphSetup<'_>) -> (Vec<NodeAgent>, Manager) {
    let graph = dag::InstanceGraph::new(setup.workflow, &setup.task_requires);
    // A set: `members.contains` per node was nodes² steps (10¹⁰ on 100,000 nodes).
    let is_member: HashSet<NodeId> = setup.members.iter().copied().collect();
    match kind {
        BalancerKind::Pcddb => {
            let cluster = ClusterId(0);
            let agents = setup
                .nodes
                .iter()
                .map(|n| {
                    let member = is_member.contains(&n.id);
                    NodeAgent::Pcddb(pcddb::PcddbNode::new(
                        *n,
                        setup.thresholds,
                        if member {
                            vec![(cluster, setup.launch)]
                        } else {
                            Vec::new()
                        },
                    ))
                })
                .collect();
            (
                agents,
                Manager::Pcddb(pcddb::LaunchNode::new(setup.launch, cluster, graph)),
            )
        }
        BalancerKind::Centralised => {
            let agents = setup
                .nodes
                .iter()
                .map(|n| {
                    let member = is_member.contains(&n.id);
                    NodeAgent::Executor(centralised::ExecutorNode::new(*n, setup.launch, member))
                })
                .collect();
            let members = setup
                .members
                .iter()
                .map(|m| setup.nodes[m.index()])
                .collect();
            (
                agents,
                Manager::Centralised(centralised::Dispatcher::new(setup.launch, members, graph)),
            )
        }
        BalancerKind::Static => {
            let agents = setup
                .nodes
                .iter()
                .map(|n| {
                    NodeAgent::Executor(centralised::ExecutorNode::new(*n, setup.launch, false))
                })
                .collect();
            let members: Vec<GraphNode> = setup
                .members
                .iter()
                .map(|m| setup.nodes[m.index()])
                .collect();
            (
                agents,
                Manager::Static(static_placement::StaticLauncher::new(
                    setup.launch,
                    &members,
                    graph,
                )),
            )
        }
    }
}

/// The instances a node holds, per core, so new ones are spread evenly (spec 05 §4 c)(b): "spread
/// evenly over its cores") and a finished one is found again.
#[derive(Clone, Debug, Default)]
pub struct CoreLoad {
    per_core: Vec<u32>,
    held: u32,
    peak: u32,
}

impl CoreLoad {
    /// An idle node of `cores` cores.
    pub fn new(cores: u32) -> Self {
        Self {
            per_core: vec![0; cores.max(1) as usize],
            held: 0,
            peak: 0,
        }
    }

    /// Places one instance on the core holding fewest (lowest index on ties); returns the core.
    pub fn place(&mut self) -> u32 {
        let (core, _) = self
            .per_core
            .iter()
            .enumerate()
            .min_by_key(|&(i, &n)| (n, i))
            .unwrap_or((0, &0));
        self.per_core[core] += 1;
        self.held += 1;
        self.peak = self.peak.max(self.held);
        core as u32
    }

    /// One instance on `core` ended.
    pub fn release(&mut self, core: u32) {
        if let Some(n) = self.per_core.get_mut(core as usize) {
            *n = n.saturating_sub(1);
        }
        self.held = self.held.saturating_sub(1);
    }

    /// Instances held now.
    pub fn held(&self) -> u32 {
        self.held
    }

    /// Most instances held at once.
    pub fn peak(&self) -> u32 {
        self.peak
    }
}
