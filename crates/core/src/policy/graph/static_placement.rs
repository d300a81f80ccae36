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

/// The deck of the members meeting one set of requirements, dealt lazily: the deck itself has one
/// card per core (the first core of every member, then the second of every member with two or
/// more…), billions with large nodes, so only the members of the current round (those with more
/// cores than its number, in member order) are held, and each round is cut from the one before.
/// Dealing costs O(1) amortised: a round is cut only after the one before was dealt whole.
#[derive(Debug)]
struct Deck<'a> {
    members: &'a [GraphNode],
    requires: u64,
    /// The round dealt: the core index every member of it has.
    round: u32,
    /// The members (indices into `members`) of this round.
    holders: Vec<usize>,
    /// The next of `holders` to deal to.
    next: usize,
    /// The most cores of a matching member: the number of rounds.
    rounds: u32,
}

impl<'a> Deck<'a> {
    fn new(members: &'a [GraphNode], requires: u64) -> Self {
        let mut deck = Deck {
            members,
            requires,
            round: 0,
            holders: Vec::new(),
            next: 0,
            rounds: 0,
        };
        deck.first_round();
        deck.rounds = deck
            .holders
            .iter()
            .map(|&m| members[m].cores)
            .max()
            .unwrap_or(0);
        deck
    }

    /// Starts the deck again from its first round: every matching member with a core.
    fn first_round(&mut self) {
        let requires = self.requires;
        self.round = 0;
        self.next = 0;
        self.holders = (0..self.members.len())
            .filter(|&m| {
                let m = &self.members[m];
                m.cores > 0 && m.attributes & requires == requires
            })
            .collect();
    }

    /// The next card's node (`None`: no member meets the requirements).
    fn deal(&mut self) -> Option<NodeId> {
        if self.holders.is_empty() {
            return None;
        }
        if self.next == self.holders.len() {
            self.round += 1;
            self.next = 0;
            if self.round >= self.rounds {
                self.first_round();
            } else {
                let (members, round) = (self.members, self.round);
                self.holders.retain(|&m| members[m].cores > round);
            }
        }
        let node = self.members[self.holders[self.next]].id;
        self.next += 1;
        Some(node)
    }
}

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
        let mut decks: HashMap<u64, Deck<'_>> = HashMap::new();
        let assigned = (0..graph.len())
            .map(|i| {
                let requires = graph.wanted(InstanceId(i)).requires;
                decks
                    .entry(requires)
                    .or_insert_with(|| Deck::new(members, requires))
                    .deal()
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::input::workflow::parse_workflow;

    /// The deck as it was built whole: one card per core, round by round.
    fn whole_deck(members: &[GraphNode], instances: u32, requires: u64) -> Vec<Option<NodeId>> {
        let max_cores = members.iter().map(|m| m.cores).max().unwrap_or(0);
        let cards: Vec<NodeId> = (0..max_cores)
            .flat_map(|c| members.iter().filter(move |m| m.cores > c))
            .filter(|m| m.attributes & requires == requires)
            .map(|m| m.id)
            .collect();
        (0..instances as usize)
            .map(|i| (!cards.is_empty()).then(|| cards[i % cards.len()]))
            .collect()
    }

    #[test]
    fn the_lazy_deck_deals_as_the_whole_deck_did() {
        let node = |id: u32, cores: u32, attributes: u64| GraphNode {
            id: NodeId(id),
            cores,
            attributes,
        };
        let clusters = [
            vec![node(0, 4, 0)],
            vec![node(0, 1, 0), node(1, 3, 1), node(2, 2, 0), node(3, 0, 1)],
            vec![
                node(5, 8, 1),
                node(2, 1, 1),
                node(7, 3, 0),
                node(1, 8, 0),
                node(0, 2, 1),
            ],
            vec![node(0, 0, 1)],
            vec![],
        ];
        for members in &clusters {
            for requires in [0, 1] {
                for instances in [1, 7, 23, 50] {
                    let wf = parse_workflow(
                        "w.toml",
                        &format!(
                            "[[task]]\nname = \"A\"\ninstances = {instances}\ncost = \"1s\"\n"
                        ),
                    )
                    .expect("workflow")
                    .workflow;
                    let l = StaticLauncher::new(
                        NodeId(0),
                        members,
                        InstanceGraph::new(&wf, &[requires]),
                    );
                    let got: Vec<_> = (0..instances).map(|i| l.assigned(InstanceId(i))).collect();
                    assert_eq!(
                        got,
                        whole_deck(members, instances, requires),
                        "{members:?} requires {requires}, {instances} instances"
                    );
                }
            }
        }
    }
}
