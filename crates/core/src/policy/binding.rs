//! Dynamic node binding (spec 01, "Binding algorithm"): every node without an accelerator (an
//! **NNode**) is bound to one node with accelerators (an **ANode**) in the *same rack*, and sends its
//! accelerator work there. The map changes as nodes join and leave; each change comes back as a list
//! of [`BindingEvent`]s (`Bound`, `Unbound`) that a driver forwards — the simulator applies them, the
//! runtime's server will push them to its agents on register, death and removal.
//!
//! # Data structures (per rack)
//! - for each ANode a **stack** of the units bound to it, in push order ([`Binding::stacks`]);
//! - a **queue** of those stacks sorted by load, smallest first, ties by ANode name;
//! - NNodes of a rack that has no ANode **wait** unbound, in join order.
//!
//! Racks are isolated: nothing is ever bound across racks. Each event costs `O(log n)` in its rack
//! per unit it moves (stacks are ordered maps keyed by push number, queues are ordered sets).
//!
//! # Mode `plain` — the paper's rule, exactly
//! A stack's load is the number of NNodes on it; the queue is ordered by (size, ANode name); the
//! *smallest* stack is the queue's first entry, the *largest* its last; a pop takes the NNode pushed
//! most recently.
//! - **add NNode**: push it on the smallest stack. In a rack without ANodes it waits.
//! - **add ANode**: create its empty stack; while the largest stack holds at least two more NNodes
//!   than the new one, pop the largest's top and push it on the new stack; then insert the new
//!   stack. (The paper's test "the new stack's size equals the smallest's" never ends for one
//!   ANode with one NNode; spec 01 fixes this reading.) If NNodes were waiting (the rack's first
//!   ANode), they are then added one by one in join order.
//! - **remove NNode**: take it off its stack; no rebalance (the paper only refreshes the queue).
//! - **remove ANode**: take its stack out of the queue and re-add its NNodes, in push order, with the
//!   add-NNode rule; if it was the rack's last ANode they wait again, in push order.
//!
//! Worked example (the paper's Figure 3): ANodes `a1`, `a2` with stacks `a1:[n1,n3,n5]`,
//! `a2:[n2,n4,n6]`. Adding `a3`: the largest is `a2` (size ties go to the later name), so `n6` moves
//! to `a3` → `[3,2,1]`; now the largest is `a1` (3 ≥ 1 + 2), so `n5` moves → `a1:[n1,n3]`,
//! `a2:[n2,n4]`, `a3:[n6,n5]`. Stacks `[2,1]` and a new ANode → one steal → `[1,1,1]`.
//!
//! # Mode `weighted` — balance by accelerator speed (the paper's future work (b))
//! An ANode's capacity `W` is the sum of its devices' speed weights (read as thousandths, so loads
//! compare exactly as integer fractions); its **users** are itself (its own work counts as one user,
//! spec 01 "Known weakness") plus its NNodes. Load = users / `W`.
//! - **add NNode**: to the stack where the NNode would get the largest share, i.e. the least
//!   `(users + 1) / W`; ties by ANode name.
//! - **add ANode**: steal the top NNode of the most loaded stack that has an NNode (ties: the later
//!   name) while its load `users / W` exceeds the load the new stack would have after the steal,
//!   `(users_new + 1) / W_new`.
//! - removals as in `plain`.
//!
//! With equal weights this is `plain` (the `+1` of the ANode itself shifts every stack alike). With
//! weights, `fast` (`W = 2`) and `slow` (`W = 1`) and four NNodes: `n1` → `fast` (`(1+1)/2 = 1`
//! beats `2/1`), `n2` → `fast` (`3/2` beats `2`), `n3` → `fast` (the tie `4/2 = 2/1` goes to the
//! earlier name), `n4` → `slow` (`2` beats `5/2`): users 4 : 2, so the 2× GPU serves 2× the users.
//!
//! # Mode `container` — bind task slots, not nodes (the paper's future work (a))
//! Every node has `slots` containers. Each container of an NNode is a unit of its own, named
//! `NNODE/k`, bound by the `weighted` rules where an ANode's own `slots` containers count as its
//! own users. So one NNode's containers spread over several ANodes: with three ANodes of 4
//! containers each and one NNode `n` of 4 containers, `n/0 → a1`, `n/1 → a2`, `n/2 → a3`,
//! `n/3 → a1` (ties by name): 6 : 5 : 5 containers use each ANode's accelerators, where whole-node
//! binding puts all of `n`'s containers on `a1`, 8 : 4 : 4. (The ANode's service feeds all its
//! devices from one queue, so these users are spread over its devices.)
//!
//! # Ties, once more
//! Every choice is a function of the loads (exact integer fractions; weights in thousandths) and the
//! ANode names (byte order): a new unit goes to the *earliest* name among the least loaded, a steal
//! takes from the *latest* name among the most loaded, a pop takes the most recent push, and units
//! that are re-added (an ANode's stack, a rack's waiting list) go in push or join order. So any two
//! correct implementations give the same map for the same events —
//! `crates/core/tests/core/binding.rs` checks this one against a naive transcription of the rules.

mod rack;
mod replay;

pub use replay::replay;

use rack::RackState;
use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::Arc;
use thiserror::Error;

/// The most containers a node may have in mode `container`. Each is bound on its own (about 250
/// bytes of binding state per NNode container), and no node runs more task slots than this.
pub const MAX_CONTAINER_SLOTS: u32 = 1024;

/// The most containers a binding or an offload simulation holds in all (nodes × slots): a
/// million cost about 270 MB and seconds of replay; `--slots 4000000000` asked for 96 GB.
pub const MAX_CONTAINERS: u64 = 1_000_000;

/// How binding balances (see the module doc for each mode's rules).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum BindingMode {
    /// The paper's rule: whole NNodes, balanced by count.
    #[default]
    Plain,
    /// Whole NNodes, balanced by the ANodes' summed accelerator speed weights (the ANode counts as
    /// one user).
    Weighted,
    /// Every node has `slots` containers; NNode containers are bound one by one, by weight, with an
    /// ANode's own containers counting as its users.
    Container {
        /// Containers per node (at least 1).
        slots: u32,
    },
}

impl BindingMode {
    /// The mode's name on the command line and in reports.
    pub fn as_str(&self) -> &'static str {
        match self {
            BindingMode::Plain => "plain",
            BindingMode::Weighted => "weighted",
            BindingMode::Container { .. } => "container",
        }
    }

    /// Units one NNode contributes.
    fn units_per_nnode(&self) -> u32 {
        match self {
            BindingMode::Container { slots } => (*slots).max(1),
            _ => 1,
        }
    }

    /// Users an ANode has before any NNode binds to it.
    fn own_users(&self) -> u64 {
        match self {
            BindingMode::Plain => 0,
            BindingMode::Weighted => 1,
            BindingMode::Container { slots } => u64::from((*slots).max(1)),
        }
    }
}

impl fmt::Display for BindingMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The thing that is bound: a whole NNode, or (mode `container`) one of its containers.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Unit {
    /// The NNode's name.
    pub nnode: Arc<str>,
    /// The container number in mode `container`; `None` for a whole node.
    pub container: Option<u32>,
}

impl fmt::Display for Unit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.container {
            Some(k) => write!(f, "{}/{k}", self.nnode),
            None => f.write_str(&self.nnode),
        }
    }
}

/// A change of the map, for a driver to forward to the node concerned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BindingEvent {
    /// `nnode` (or one container of it) now sends its accelerator work to `anode` (a new binding or
    /// a move).
    Bound {
        /// The unit bound.
        nnode: Unit,
        /// Its ANode.
        anode: Arc<str>,
    },
    /// `nnode` has no ANode any more (it was removed, or its rack lost its last ANode).
    Unbound {
        /// The unit.
        nnode: Unit,
    },
}

impl fmt::Display for BindingEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BindingEvent::Bound { nnode, anode } => write!(f, "bound {nnode} -> {anode}"),
            BindingEvent::Unbound { nnode } => write!(f, "unbound {nnode}"),
        }
    }
}

/// A membership change that cannot be applied.
#[derive(Clone, Debug, Error, PartialEq)]
pub enum BindingError {
    /// A node with this name is already known.
    #[error("node `{0}` is already in the cluster")]
    Duplicate(String),
    /// No node has this name.
    #[error("no node is called `{0}`")]
    Unknown(String),
    /// A name is empty.
    #[error("a node name must not be empty")]
    EmptyName,
    /// An ANode's weight is not a positive number.
    #[error("ANode `{name}`: weight {weight} must be a positive number")]
    BadWeight {
        /// The ANode.
        name: String,
        /// The weight given.
        weight: f64,
    },
}

#[derive(Clone, Debug)]
enum Member {
    NNode { rack: Arc<str> },
    ANode { rack: Arc<str> },
}

/// Where one unit is: on an ANode's stack (with its push number) or waiting (join number).
#[derive(Clone, Debug)]
struct Place {
    anode: Option<Arc<str>>,
    seq: u64,
}

/// The binding map of a whole cluster and the per-rack structures that maintain it.
#[derive(Clone, Debug, Default)]
pub struct Binding {
    mode: BindingMode,
    members: HashMap<Arc<str>, Member>,
    places: HashMap<Unit, Place>,
    racks: BTreeMap<Arc<str>, RackState>,
    seq: u64,
}

/// Weights are kept in thousandths so loads compare exactly; at least 1.
fn weight_units(weight: f64) -> u64 {
    ((weight * 1000.0).round() as u64).max(1)
}

impl Binding {
    /// An empty cluster under `mode`.
    pub fn new(mode: BindingMode) -> Self {
        Self {
            mode,
            ..Self::default()
        }
    }

    /// The mode.
    pub fn mode(&self) -> BindingMode {
        self.mode
    }

    fn next_seq(&mut self) -> u64 {
        self.seq += 1;
        self.seq
    }

    fn check_new(&self, name: &str) -> Result<Arc<str>, BindingError> {
        if name.is_empty() {
            return Err(BindingError::EmptyName);
        }
        if self.members.contains_key(name) {
            return Err(BindingError::Duplicate(name.to_string()));
        }
        Ok(Arc::from(name))
    }

    fn rack_mut(&mut self, rack: &str) -> &mut RackState {
        if !self.racks.contains_key(rack) {
            self.racks.insert(Arc::from(rack), RackState::default());
        }
        self.racks
            .get_mut(rack)
            .expect("the rack was inserted just above")
    }

    /// Adds a unit to `rack` with the add-NNode rule: onto the first stack of the queue, or to the
    /// waiting list if the rack has no ANode.
    fn place(&mut self, rack: &Arc<str>, unit: Unit, events: &mut Vec<BindingEvent>) {
        let seq = self.next_seq();
        let r = self.rack_mut(rack);
        let anode = r.push_smallest(unit.clone(), seq);
        if let Some(anode) = &anode {
            events.push(BindingEvent::Bound {
                nnode: unit.clone(),
                anode: anode.clone(),
            });
        }
        self.places.insert(unit, Place { anode, seq });
    }

    /// An NNode joins `rack` (spec 01 "Add an NNode"). In mode `container` each of its containers is
    /// added in turn.
    pub fn add_nnode(&mut self, name: &str, rack: &str) -> Result<Vec<BindingEvent>, BindingError> {
        let name = self.check_new(name)?;
        let rack: Arc<str> = Arc::from(rack);
        self.members
            .insert(name.clone(), Member::NNode { rack: rack.clone() });
        let mut events = Vec::new();
        for unit in self.units_of(&name) {
            self.place(&rack, unit, &mut events);
        }
        Ok(events)
    }

    fn units_of(&self, nnode: &Arc<str>) -> Vec<Unit> {
        match self.mode {
            BindingMode::Container { .. } => (0..self.mode.units_per_nnode())
                .map(|k| Unit {
                    nnode: nnode.clone(),
                    container: Some(k),
                })
                .collect(),
            _ => vec![Unit {
                nnode: nnode.clone(),
                container: None,
            }],
        }
    }

    /// An ANode joins `rack` with accelerators whose speed weights sum to `weight` (spec 01 "Add an
    /// ANode"; `plain` ignores the weight).
    pub fn add_anode(
        &mut self,
        name: &str,
        rack: &str,
        weight: f64,
    ) -> Result<Vec<BindingEvent>, BindingError> {
        let name = self.check_new(name)?;
        if !(weight.is_finite() && weight > 0.0) {
            return Err(BindingError::BadWeight {
                name: name.to_string(),
                weight,
            });
        }
        let rack: Arc<str> = Arc::from(rack);
        self.members
            .insert(name.clone(), Member::ANode { rack: rack.clone() });
        let capacity = match self.mode {
            BindingMode::Plain => 1,
            _ => weight_units(weight),
        };
        let own = self.mode.own_users();
        let mut events = Vec::new();
        self.rack_mut(&rack).open_stack(name.clone(), own, capacity);
        loop {
            let seq = self.seq + 1;
            let Some(unit) = self.rack_mut(&rack).steal_into(&name, seq) else {
                break;
            };
            self.seq = seq;
            self.places.insert(
                unit.clone(),
                Place {
                    anode: Some(name.clone()),
                    seq,
                },
            );
            events.push(BindingEvent::Bound {
                nnode: unit,
                anode: name.clone(),
            });
        }
        self.rack_mut(&rack).close_stack(&name);
        let waiting = self.rack_mut(&rack).take_waiting();
        for unit in waiting {
            self.place(&rack, unit, &mut events);
        }
        Ok(events)
    }

    /// A node leaves (heartbeat timeout or removal): an NNode is taken off its stack (no
    /// rebalance); an ANode's NNodes are re-added in push order (spec 01 "Remove").
    pub fn remove(&mut self, name: &str) -> Result<Vec<BindingEvent>, BindingError> {
        let (name, member) = self
            .members
            .remove_entry(name)
            .ok_or_else(|| BindingError::Unknown(name.to_string()))?;
        let mut events = Vec::new();
        match member {
            Member::NNode { rack } => {
                for unit in self.units_of(&name) {
                    let Some(place) = self.places.remove(&unit) else {
                        continue;
                    };
                    let r = self.rack_mut(&rack);
                    match &place.anode {
                        Some(anode) => {
                            r.remove_from(anode, place.seq);
                            events.push(BindingEvent::Unbound { nnode: unit });
                        }
                        None => r.remove_waiting(place.seq),
                    }
                }
            }
            Member::ANode { rack } => {
                let orphans = self.rack_mut(&rack).close_anode(&name);
                let has_anode = self.rack_mut(&rack).has_anode();
                for unit in orphans {
                    if has_anode {
                        self.place(&rack, unit, &mut events);
                    } else {
                        let seq = self.next_seq();
                        self.rack_mut(&rack).wait(unit.clone(), seq);
                        self.places.insert(unit.clone(), Place { anode: None, seq });
                        events.push(BindingEvent::Unbound { nnode: unit });
                    }
                }
            }
        }
        Ok(events)
    }

    /// The ANode `unit` is bound to, `None` if it waits or is unknown.
    pub fn anode_of(&self, unit: &Unit) -> Option<&Arc<str>> {
        self.places.get(unit)?.anode.as_ref()
    }

    /// Whether `name` is a known ANode.
    pub fn is_anode(&self, name: &str) -> bool {
        matches!(self.members.get(name), Some(Member::ANode { .. }))
    }

    /// Whether `name` is a known node of either kind.
    pub fn contains(&self, name: &str) -> bool {
        self.members.contains_key(name)
    }

    /// The rack a known node is in.
    pub fn rack_of(&self, name: &str) -> Option<&Arc<str>> {
        match self.members.get(name)? {
            Member::NNode { rack } | Member::ANode { rack } => Some(rack),
        }
    }

    /// Every unit and its ANode (`None`: waiting), sorted by NNode name then container.
    pub fn map(&self) -> Vec<(Unit, Option<Arc<str>>)> {
        let mut out: Vec<_> = self
            .places
            .iter()
            .map(|(u, p)| (u.clone(), p.anode.clone()))
            .collect();
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out
    }

    /// The stacks of `rack` in queue order (smallest first), each with its units bottom to top.
    pub fn stacks(&self, rack: &str) -> Vec<(Arc<str>, Vec<Unit>)> {
        self.racks
            .get(rack)
            .map(|r| r.stacks_in_order())
            .unwrap_or_default()
    }

    /// The units waiting in `rack` (it has no ANode), in join order.
    pub fn waiting(&self, rack: &str) -> Vec<Unit> {
        self.racks
            .get(rack)
            .map(|r| r.waiting_units())
            .unwrap_or_default()
    }

    /// Racks known, by name.
    pub fn racks(&self) -> impl Iterator<Item = &Arc<str>> {
        self.racks.keys()
    }

    /// Users of `anode`'s accelerators: its own (mode-dependent, see the module doc) plus the units
    /// bound to it.
    pub fn users(&self, anode: &str) -> Option<u64> {
        let rack = self.rack_of(anode)?;
        self.racks.get(rack)?.users(anode)
    }

    /// Capacity of `anode` as binding sees it: 1 in `plain`, else its weight in thousandths.
    pub fn capacity(&self, anode: &str) -> Option<u64> {
        let rack = self.rack_of(anode)?;
        self.racks.get(rack)?.capacity(anode)
    }
}

#[cfg(test)]
mod tests;
