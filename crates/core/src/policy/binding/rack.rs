//! One rack's binding structures: a stack per ANode and the two orderings of those stacks that the
//! rules read — by the load a new user would bring (add-NNode picks the first) and by the current
//! load (add-ANode steals from the last). In `plain` both orderings are (size, ANode name).
//!
//! A stack's key changes whenever its size does, so every change is *detach → mutate → attach*:
//! the stack's keys are taken out of the ordered sets, the stack changes, and the new keys go
//! back in. Each of these is `O(log n)`.

use super::Unit;
use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

/// A position in one of the rack's orderings: the load `num / cap` (compared exactly as a fraction
/// of integers), then the ANode's name.
#[derive(Clone, Debug)]
struct Key {
    num: u64,
    cap: u64,
    name: Arc<str>,
}

impl Ord for Key {
    fn cmp(&self, other: &Self) -> Ordering {
        (u128::from(self.num) * u128::from(other.cap))
            .cmp(&(u128::from(other.num) * u128::from(self.cap)))
            .then_with(|| self.name.cmp(&other.name))
    }
}

impl PartialOrd for Key {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for Key {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Key {}

/// An ANode's stack: its bound units keyed by push number (the last entry is the top).
#[derive(Clone, Debug)]
struct Stack {
    units: BTreeMap<u64, Unit>,
    /// Users the ANode has of its own (0 in `plain`, 1 in `weighted`, its slots in `container`).
    own: u64,
    /// Capacity (1 in `plain`, else the weight in thousandths).
    cap: u64,
    /// Whether the stack is in the orderings (a new ANode's stack is not, while it steals).
    queued: bool,
}

impl Stack {
    fn users(&self) -> u64 {
        self.own + self.units.len() as u64
    }
}

/// The binding structures of one rack.
#[derive(Clone, Debug, Default)]
pub(super) struct RackState {
    stacks: HashMap<Arc<str>, Stack>,
    /// Ordered by `(users + 1) / cap`, then name: the first entry is where a new unit goes.
    by_next_load: BTreeSet<Key>,
    /// Stacks with at least one unit, ordered by `users / cap`, then name: the last entry is
    /// where a new ANode steals from.
    by_load: BTreeSet<Key>,
    /// Units of a rack without ANodes, by join number.
    waiting: BTreeMap<u64, Unit>,
}

impl RackState {
    fn keys(name: &Arc<str>, s: &Stack) -> (Key, Option<Key>) {
        let next = Key {
            num: s.users() + 1,
            cap: s.cap,
            name: name.clone(),
        };
        let now = (!s.units.is_empty()).then(|| Key {
            num: s.users(),
            cap: s.cap,
            name: name.clone(),
        });
        (next, now)
    }

    fn detach(&mut self, name: &Arc<str>) {
        let Some(s) = self.stacks.get(name) else {
            return;
        };
        if !s.queued {
            return;
        }
        let (next, now) = Self::keys(name, s);
        self.by_next_load.remove(&next);
        if let Some(now) = now {
            self.by_load.remove(&now);
        }
    }

    fn attach(&mut self, name: &Arc<str>) {
        let Some(s) = self.stacks.get(name) else {
            return;
        };
        if !s.queued {
            return;
        }
        let (next, now) = Self::keys(name, s);
        self.by_next_load.insert(next);
        if let Some(now) = now {
            self.by_load.insert(now);
        }
    }

    /// The add-NNode rule: pushes `unit` (push number `seq`) on the first stack of the queue and
    /// returns its ANode; with no ANode in the rack the unit waits and `None` is returned.
    pub(super) fn push_smallest(&mut self, unit: Unit, seq: u64) -> Option<Arc<str>> {
        let Some(first) = self.by_next_load.first().map(|k| k.name.clone()) else {
            self.waiting.insert(seq, unit);
            return None;
        };
        self.detach(&first);
        if let Some(s) = self.stacks.get_mut(&first) {
            s.units.insert(seq, unit);
        }
        self.attach(&first);
        Some(first)
    }

    /// Creates `name`'s empty stack, outside the queue until [`RackState::close_stack`].
    pub(super) fn open_stack(&mut self, name: Arc<str>, own: u64, cap: u64) {
        self.stacks.insert(
            name,
            Stack {
                units: BTreeMap::new(),
                own,
                cap,
                queued: false,
            },
        );
    }

    /// One step of the add-ANode rule for the unqueued stack `new`: if the most loaded stack that
    /// holds a unit is loaded more than `new` would be after taking one, moves that stack's top unit
    /// onto `new` (push number `seq`) and returns it.
    pub(super) fn steal_into(&mut self, new: &Arc<str>, seq: u64) -> Option<Unit> {
        let (new_users, new_cap) = {
            let s = self.stacks.get(new)?;
            (s.users(), s.cap)
        };
        let largest = self.by_load.last()?.clone();
        // users_L / cap_L > (users_new + 1) / cap_new, exactly. In `plain` (cap 1, own 0):
        // size_L ≥ size_new + 2.
        if u128::from(largest.num) * u128::from(new_cap)
            <= u128::from(new_users + 1) * u128::from(largest.cap)
        {
            return None;
        }
        self.detach(&largest.name);
        let unit = self
            .stacks
            .get_mut(&largest.name)
            .and_then(|s| s.units.pop_last())
            .map(|(_, u)| u);
        self.attach(&largest.name);
        let unit = unit?;
        if let Some(s) = self.stacks.get_mut(new) {
            s.units.insert(seq, unit.clone());
        }
        Some(unit)
    }

    /// Puts `name`'s stack into the queue.
    pub(super) fn close_stack(&mut self, name: &Arc<str>) {
        if let Some(s) = self.stacks.get_mut(name) {
            s.queued = true;
        }
        self.attach(name);
    }

    /// The waiting units in join order, taken out of the waiting list — if the rack has an ANode
    /// to place them on (otherwise none).
    pub(super) fn take_waiting(&mut self) -> Vec<Unit> {
        if self.stacks.is_empty() {
            return Vec::new();
        }
        std::mem::take(&mut self.waiting).into_values().collect()
    }

    /// Takes the unit pushed as `seq` off `anode`'s stack.
    pub(super) fn remove_from(&mut self, anode: &Arc<str>, seq: u64) {
        self.detach(anode);
        if let Some(s) = self.stacks.get_mut(anode) {
            s.units.remove(&seq);
        }
        self.attach(anode);
    }

    /// Drops the waiting unit that joined as `seq`.
    pub(super) fn remove_waiting(&mut self, seq: u64) {
        self.waiting.remove(&seq);
    }

    /// Adds `unit` to the waiting list as `seq`.
    pub(super) fn wait(&mut self, unit: Unit, seq: u64) {
        self.waiting.insert(seq, unit);
    }

    /// Removes `name`'s stack from the rack and returns its units in push order.
    pub(super) fn close_anode(&mut self, name: &Arc<str>) -> Vec<Unit> {
        self.detach(name);
        self.stacks
            .remove(name)
            .map(|s| s.units.into_values().collect())
            .unwrap_or_default()
    }

    /// Whether the rack has an ANode.
    pub(super) fn has_anode(&self) -> bool {
        !self.stacks.is_empty()
    }

    /// Users of `anode`.
    pub(super) fn users(&self, anode: &str) -> Option<u64> {
        self.stacks.get(anode).map(Stack::users)
    }

    /// Capacity of `anode`.
    pub(super) fn capacity(&self, anode: &str) -> Option<u64> {
        self.stacks.get(anode).map(|s| s.cap)
    }

    /// Stacks in queue order, units bottom to top.
    pub(super) fn stacks_in_order(&self) -> Vec<(Arc<str>, Vec<Unit>)> {
        self.by_next_load
            .iter()
            .filter_map(|k| {
                let s = self.stacks.get(&k.name)?;
                Some((k.name.clone(), s.units.values().cloned().collect()))
            })
            .collect()
    }

    /// Waiting units in join order.
    pub(super) fn waiting_units(&self) -> Vec<Unit> {
        self.waiting.values().cloned().collect()
    }
}
