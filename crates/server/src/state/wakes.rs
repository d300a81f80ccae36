//! Wake-ups: telling an agent to heartbeat now instead of at its next interval.
//!
//! Work reaches a node only in a heartbeat reply, and an idle agent beats every
//! `heartbeat_interval` (500 ms by default). Without wake-ups a job submitted to an idle cluster
//! waited half an interval on average before it started, and a cancelled task ran on until its
//! node's next beat. Each agent therefore keeps one `AwaitWork` call open (see `service.rs`); it
//! answers when the node's counter here moves, and the agent beats at once.
//!
//! Events mark what they made waiting — a node ([`Wakes::node`]) or "batch work any node with
//! free cores may take" ([`Wakes::free`]) — and the state sends the marks once, at the end of the
//! event ([`super::nodes::Nodes::flush_wakes`]), so an event wakes each node once. A wake-up is
//! only a hint: the heartbeat decides, so a lost or needless one costs a beat, never a task.

use std::collections::BTreeSet;
use std::sync::Arc;
use tokio::sync::watch;

/// Per node, the wake-up counter its agent's `AwaitWork` watches; and the marks of the event
/// being handled.
#[derive(Debug, Default)]
pub struct Wakes {
    /// By node id; a node's counter exists once its agent has waited for work.
    counters: Vec<Option<Arc<watch::Sender<u64>>>>,
    /// Nodes to wake at the end of this event.
    nodes: BTreeSet<u32>,
    /// Batch tasks that became pending in this event: wake up to this many nodes with free cores.
    free: usize,
}

impl Wakes {
    /// A receiver of node `node`'s counter (created on first use).
    pub fn subscribe(&mut self, node: u32) -> watch::Receiver<u64> {
        let i = node as usize;
        if self.counters.len() <= i {
            self.counters.resize(i + 1, None);
        }
        self.counters[i]
            .get_or_insert_with(|| Arc::new(watch::Sender::new(0)))
            .subscribe()
    }

    /// Node `node` has something waiting for it (an instance, a message, a task to kill).
    pub fn node(&mut self, node: u32) {
        self.nodes.insert(node);
    }

    /// `tasks` batch tasks became pending: any node with free cores may take them.
    pub fn free(&mut self, tasks: usize) {
        self.free = self.free.saturating_add(tasks);
    }

    /// How many nodes with free cores the event asked to wake, and forgets it.
    pub(super) fn take_free(&mut self) -> usize {
        std::mem::take(&mut self.free)
    }

    /// Sends this event's wake-ups, except to `except` (the node whose heartbeat is being
    /// answered: its reply carries the work), and forgets the marks.
    pub(super) fn send(&mut self, except: Option<u32>) {
        for n in std::mem::take(&mut self.nodes) {
            if Some(n) == except {
                continue;
            }
            if let Some(Some(c)) = self.counters.get(n as usize) {
                c.send_modify(|v| *v = v.wrapping_add(1));
            }
        }
    }

    /// Keeps the counters of `old` (agents wait on them) across a rebuild of the state.
    pub(super) fn carry_over(&mut self, old: &Wakes) {
        self.counters = old.counters.clone();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_marked_node_is_woken_once_and_the_answered_node_not_at_all() {
        let mut w = Wakes::default();
        let mut a = w.subscribe(0);
        let b = w.subscribe(3);
        w.node(0);
        w.node(0);
        w.node(3);
        w.send(Some(3));
        assert_eq!(a.has_changed().ok(), Some(true));
        assert_eq!(*a.borrow_and_update(), 1);
        assert_eq!(b.has_changed().ok(), Some(false));
        // Marks are forgotten once sent.
        w.send(None);
        assert_eq!(a.has_changed().ok(), Some(false));
        // A node that never waited has no counter: marking it costs nothing.
        w.node(7);
        w.send(None);
    }
}
