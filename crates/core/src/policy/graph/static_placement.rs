//! The static baseline (spec 05, "Baselines"): every instance is assigned to a node before the run,
//! by core count, and never moved.
//!
//! The deployment's cores are dealt out like cards — the first core of every node, then the second
//! core of every node with two or more, and so on — and each task's instances go round this deck
//! (one deck position per instance, continuing across tasks), so a node's share is proportional to
//! its cores. Instances that require attributes go round the deck of the matching nodes only. When
//! an instance becomes ready the launcher tells its node to start it (`dispatch`), and the node
//! returns the `result`, as under every balancer.

use super::{Body, GraphNode, InstanceId, LaunchEvent, Message, Outgoing, dag::InstanceGraph};
use crate::model::NodeId;
use crate::time::Time;
use std::collections::HashMap;

/// The launch node's manager under static placement.
#[derive(Clone, Debug)]
pub struct StaticLauncher {
    id: NodeId,
    graph: InstanceGraph,
    /// Pre-assigned node of every instance (`None`: no member meets its requirements).
    assigned: Vec<Option<NodeId>>,
}

impl StaticLauncher {
    /// Assigns every instance of `graph` over `members` before the run.
    pub fn new(id: NodeId, members: &[GraphNode], graph: InstanceGraph) -> Self {
        let max_cores = members.iter().map(|m| m.cores).max().unwrap_or(0);
        let deck: Vec<&GraphNode> = (0..max_cores)
            .flat_map(|c| members.iter().filter(move |m| m.cores > c))
            .collect();
        let mut decks: HashMap<u64, (Vec<NodeId>, usize)> = HashMap::new();
        let assigned = (0..graph.len())
            .map(|i| {
                let requires = graph.wanted(InstanceId(i)).requires;
                let (cards, next) = decks.entry(requires).or_insert_with(|| {
                    (
                        deck.iter()
                            .filter(|m| m.attributes & requires == requires)
                            .map(|m| m.id)
                            .collect(),
                        0,
                    )
                });
                if cards.is_empty() {
                    return None;
                }
                let node = cards[*next % cards.len()];
                *next += 1;
                Some(node)
            })
            .collect();
        Self {
            id,
            graph,
            assigned,
        }
    }

    /// The node instance `i` was assigned to.
    pub fn assigned(&self, i: InstanceId) -> Option<NodeId> {
        self.assigned.get(i.0 as usize).copied().flatten()
    }

    /// The instance graph it tracks.
    pub fn graph(&self) -> &InstanceGraph {
        &self.graph
    }

    /// Handles one event at `now`.
    pub fn handle(&mut self, event: LaunchEvent, _now: Time) -> Vec<Outgoing> {
        let ready = match event {
            LaunchEvent::Start => self.graph.start(),
            LaunchEvent::Deliver(Message {
                body: Body::Result { instance },
                ..
            }) => self.graph.finish(instance).unwrap_or_default(),
            LaunchEvent::Deliver(_) => Vec::new(),
        };
        let mut out = Vec::with_capacity(ready.len() * 2);
        for id in ready {
            out.push(Outgoing::Ready(id));
            if let Some(node) = self.assigned(id) {
                out.push(Outgoing::Send(Message {
                    from: self.id,
                    to: node,
                    body: Body::Dispatch { instance: id },
                }));
            }
        }
        out
    }
}
