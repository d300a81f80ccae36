//! Multi-node tasks (`nodes = N`, `hetsched submit --nodes N`) in the runtime: a task that holds
//! N whole nodes and runs its command on the first of them, with the others' host names in
//! `HETSCHED_NODE_FILE` for an MPI launcher (HyperQueue's `--nodes`, Slurm's `--nodes`).
//!
//! The gathering of the nodes is the core's ([`Gatherer`]: one gathering per waiting
//! application, served by priority; each eligible node that beats joins and is held as it
//! drains, a wholly free node replaces a busy member); this module feeds it the beating node and the registry's word on which nodes take
//! work (alive, not removed, drained, shutting down or gone), and wakes the nodes it names. It
//! keeps the nodes of each running task: a running task whose other node dies, leaves or is
//! removed is lost (its root's agent is told to kill it) and runs again, as one whose own node
//! dies. A task's other nodes are stored in its row as its attempt starts
//! (`store::write_other_nodes`, kept after it ends for listings), so a restarted server holds a
//! running task's nodes again. Those other nodes run no process of the task, so every heartbeat
//! reply tells each of them which running tasks it is a member of
//! ([`MultiNode::member_of`], `HeartbeatReply.member_of`): its agent counts them as its work, and
//! neither its idle timeout nor a `--drain` shutdown ends it under them.

use super::super::Ctx;
use crate::state::nodes::{NodeRec, Nodes};
use hetsched_core::policy::batch::multi_node::Gatherer;
use hetsched_core::{AppId, Held, NodeId, SchedulerView};
use std::collections::HashMap;

/// The multi-node tasks of the batch kind: the gathering, and the nodes of those running.
#[derive(Debug, Default)]
pub(super) struct MultiNode {
    gatherer: Gatherer,
    /// Running multi-node tasks' node ids, the first where the command runs, by task id
    /// (entries of tasks that ended are dropped after the commit that stored their end).
    pub running: HashMap<u64, Vec<u32>>,
}

impl MultiNode {
    /// The application whose gathering holds `node`, if any.
    pub fn gathering_holding(&self, node: NodeId) -> Option<AppId> {
        self.gatherer.holding(node)
    }

    /// How many nodes are held for `app`'s next task, if it is being gathered for.
    pub fn gathering_of(&self, app: AppId) -> Option<usize> {
        self.gatherer.gathering_of(app)
    }

    /// How many nodes a new gathering for `app` could have now: those left to it that no
    /// gathering served before it holds ([`Gatherer::available_to`]).
    pub fn available_to(&self, view: &SchedulerView, nodes: &Nodes, app: AppId) -> usize {
        self.gatherer
            .available_to(view, app, &|n| takes_work(nodes, n))
    }

    /// Node `nid` beats: the gathering goes on ([`Gatherer::on_node_update`]). Returns the nodes
    /// for a task to start here, `nid` first, once all are whole.
    pub fn on_heartbeat(&mut self, cx: &mut Ctx, nid: NodeId) -> Option<(AppId, Vec<Held>)> {
        let nodes = &*cx.nodes;
        let open = |n: NodeId| takes_work(nodes, n);
        let mut wake = Vec::new();
        let started = self.gatherer.on_node_update(cx.view, nid, &open, &mut wake);
        for n in wake {
            cx.nodes.wakes.node(n.0);
        }
        started
    }

    /// The running tasks node `node` is a member of without being their first node (where the
    /// command runs), in task order. Entries of tasks that ended linger until the next commit:
    /// the caller checks the task's state.
    pub fn member_of(&self, node: u32) -> Vec<u64> {
        let mut out: Vec<u64> = self
            .running
            .iter()
            .filter(|(_, nodes)| nodes.iter().skip(1).any(|&n| n == node))
            .map(|(&task, _)| task)
            .collect();
        out.sort_unstable();
        out
    }

    /// Running tasks one of whose nodes (other than the first, whose own loss its kind hears
    /// of) is dead, left or removed: (task, node name).
    pub fn broken(&self, cx: &Ctx) -> Vec<(u64, String)> {
        let mut out: Vec<(u64, String)> = self
            .running
            .iter()
            .filter_map(|(&task, nodes)| {
                let gone = nodes.iter().skip(1).find(|&&n| {
                    cx.nodes
                        .get(n)
                        .is_none_or(|r| !r.alive || r.removed || r.left.is_some())
                })?;
                Some((task, cx.nodes.name(*gone).to_string()))
            })
            .collect();
        out.sort_unstable();
        out
    }
}

/// Whether the registry says node `n` takes work ([`NodeRec::takes_work`], the rule divisible
/// chunks and preemption follow too).
fn takes_work(nodes: &Nodes, n: NodeId) -> bool {
    nodes.get(n.0).is_some_and(NodeRec::takes_work)
}
