//! Wake-ups: telling an agent to heartbeat now instead of at its next interval.
//!
//! Work reaches a node only in a heartbeat reply, and an idle agent beats every
//! `heartbeat_interval` (500 ms by default). Without wake-ups a job submitted to an idle cluster
//! waited half an interval on average before it started, and a cancelled task ran on until its
//! node's next beat. Each agent therefore keeps one `AwaitWork` call open (see `service.rs`); it
//! answers when the node's counter here moves, and the agent beats at once.
//!
//! Events mark what they made waiting — a node ([`Wakes::node`]) or "batch work of an
//! application, for nodes it fits on" ([`Wakes::free`]) — and the state sends the marks once, at
//! the end of the event ([`super::nodes::Nodes::flush_wakes`]), so an event wakes each node once.
//! A wake-up is only a hint: the heartbeat decides, so a needless one costs a beat, never a task;
//! but a node that could take the work and is not woken waits for its next beat (an idle one
//! beats once a minute), so batch work wakes the nodes the application fits on
//! (`SchedulerView::fits`: resources, GPUs, `requires`), not merely those with free cores.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use tokio::sync::watch;

/// Per node, the wake-up counter its agent's `AwaitWork` watches; and the marks of the event
/// being handled.
#[derive(Debug)]
pub struct Wakes {
    /// By node id; a node's counter exists once its agent has waited for work or the node was
    /// marked.
    counters: Vec<Option<Arc<watch::Sender<u64>>>>,
    /// Where this server's counters start: its start time in nanoseconds. An agent's `seen`
    /// comes from the counter of the server it last waited on; a restarted server's counters
    /// start elsewhere, so the agent's first wait on it is answered at once (it beats, and the
    /// server meets it), and a mark made before that wait is never taken for one already seen.
    base: u64,
    /// Nodes to wake at the end of this event.
    nodes: BTreeSet<u32>,
    /// Batch tasks that became pending in this event, by application: wake up to this many
    /// nodes the application fits on.
    free: BTreeMap<u32, usize>,
}

impl Default for Wakes {
    fn default() -> Self {
        Wakes {
            counters: Vec::new(),
            base: super::now_ns(),
            nodes: BTreeSet::new(),
            free: BTreeMap::new(),
        }
    }
}

impl Wakes {
    /// Node `node`'s counter (created on first use).
    fn counter(&mut self, node: u32) -> &watch::Sender<u64> {
        let i = node as usize;
        if self.counters.len() <= i {
            self.counters.resize(i + 1, None);
        }
        let base = self.base;
        self.counters[i].get_or_insert_with(|| Arc::new(watch::Sender::new(base)))
    }

    /// A receiver of node `node`'s counter.
    pub fn subscribe(&mut self, node: u32) -> watch::Receiver<u64> {
        self.counter(node).subscribe()
    }

    /// Node `node` has something waiting for it (an instance, a message, a task to kill).
    pub fn node(&mut self, node: u32) {
        self.nodes.insert(node);
    }

    /// `tasks` batch tasks of application `app` became pending: any node it fits on may take
    /// them.
    pub fn free(&mut self, app: u32, tasks: usize) {
        if tasks > 0 {
            let n = self.free.entry(app).or_default();
            *n = n.saturating_add(tasks);
        }
    }

    /// The applications whose pending tasks the event asked to wake nodes for (with how many
    /// tasks each), and forgets them.
    pub(super) fn take_free(&mut self) -> BTreeMap<u32, usize> {
        std::mem::take(&mut self.free)
    }

    /// Sends this event's wake-ups, except to `except` (the node whose heartbeat is being
    /// answered: its reply carries the work), and forgets the marks.
    pub(super) fn send(&mut self, except: Option<u32>) {
        for n in std::mem::take(&mut self.nodes) {
            if Some(n) == except {
                continue;
            }
            // Also for a node whose agent is not waiting yet (it is between two calls, or has
            // just met a restarted server): its next wait is answered at once.
            self.counter(n).send_modify(|v| *v = v.wrapping_add(1));
        }
    }

    /// Keeps the counters of `old` (agents wait on them) across a rebuild of the state.
    pub(super) fn carry_over(&mut self, old: &Wakes) {
        self.counters = old.counters.clone();
        self.base = old.base;
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
        assert_eq!(*a.borrow_and_update(), w.base + 1);
        assert_eq!(b.has_changed().ok(), Some(false));
        // Marks are forgotten once sent.
        w.send(None);
        assert_eq!(a.has_changed().ok(), Some(false));
    }

    #[test]
    fn a_mark_made_before_the_agent_waits_is_kept_and_a_restarted_servers_counters_start_apart() {
        let mut w = Wakes::default();
        // Node 7's agent is between two calls (or meets this server for the first time).
        w.node(7);
        w.send(None);
        let seen_before = w.base;
        assert_ne!(
            *w.subscribe(7).borrow(),
            seen_before,
            "its next wait, with what it saw before, is answered at once"
        );
        // Another server (a restart) starts its counters elsewhere: an agent that saw this one's
        // counters is answered at once by it, even if no mark was made there.
        std::thread::sleep(std::time::Duration::from_millis(1));
        let mut restarted = Wakes::default();
        assert_ne!(*restarted.subscribe(7).borrow(), *w.subscribe(7).borrow());
    }
}
