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

use super::{
    Body, CoreLoad, GraphNode, InstanceId, LaunchEvent, Message, NodeEvent, Outgoing,
    dag::InstanceGraph,
};
use crate::model::NodeId;
use crate::time::Time;
use std::collections::HashMap;

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
    graph: InstanceGraph,
    /// Instances no member can run yet (requirements nobody in the deployment meets).
    unplaceable: Vec<InstanceId>,
}

impl Dispatcher {
    /// A dispatcher on `id` over `members`.
    pub fn new(id: NodeId, members: Vec<GraphNode>, graph: InstanceGraph) -> Self {
        Self {
            id,
            estimate: vec![0; members.len()],
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
        let estimate = members
            .iter()
            .map(|m| self.position.get(&m.id).map_or(0, |&k| self.estimate[k]))
            .collect();
        self.position = positions(&members);
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
                        self.estimate[k] = held;
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

    fn dispatch(&mut self, ready: Vec<InstanceId>, out: &mut Vec<Outgoing>) {
        for id in ready {
            out.push(Outgoing::Ready(id));
            let requires = self.graph.wanted(id).requires;
            // Least instances per core: compare a/ca < b/cb as a·cb < b·ca.
            let best = self
                .members
                .iter()
                .enumerate()
                .filter(|(_, m)| m.attributes & requires == requires)
                .min_by(|(i, a), (j, b)| {
                    let x = self.estimate[*i] as u64 * b.cores as u64;
                    let y = self.estimate[*j] as u64 * a.cores as u64;
                    x.cmp(&y).then(a.id.cmp(&b.id))
                })
                .map(|(k, m)| (k, m.id));
            match best {
                Some((k, node)) => {
                    self.estimate[k] += 1;
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
}

/// Each node's first position in `members`.
fn positions(members: &[GraphNode]) -> HashMap<NodeId, usize> {
    let mut position = HashMap::with_capacity(members.len());
    for (k, m) in members.iter().enumerate() {
        position.entry(m.id).or_insert(k);
    }
    position
}
