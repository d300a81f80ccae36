//! Multi-node tasks (`nodes = N`, `hetsched submit --nodes N`): a task that holds N whole nodes
//! and runs its command on the first of them, with the others' host names in
//! `HETSCHED_NODE_FILE` for an MPI launcher (HyperQueue's `--nodes`, Slurm's `--nodes`).
//!
//! No batch policy places one (the view's `fits` refuses it): the kind *gathers* its nodes, one
//! application at a time, the oldest of the highest priority first. While a gathering lasts,
//! each eligible node that beats joins it until it has N members — a live node, open to work,
//! with the application's attributes, time left for its time limit and not backed off — and a
//! member's free resources are held at each of its beats
//! ([`SchedulerView::hold_free`](hetsched_core::SchedulerView::hold_free)), so nothing new
//! starts there and what runs there drains: the reservation that keeps a stream of small tasks
//! from starving a wide one. A node that is wholly free replaces a member that is still busy.
//! Once every member is whole, the task starts on the node whose beat completed the gathering
//! (first in its node file) and holds all N until it ends; the view gives them back with the
//! task, whatever ends it.
//!
//! A gathering gives its nodes back when its application has nothing pending any more, and when
//! fewer than N nodes could join (dead, drained or left). A running task whose other node dies
//! or leaves is lost (its root's agent is told to kill it) and runs again, as one whose own node
//! dies. The nodes of running tasks are stored (`store::write_multi_node`), so a restarted
//! server holds them again.

use super::super::Ctx;
use hetsched_core::{AppId, Held, NodeId, Variant};
use std::collections::HashMap;

/// Nodes held for one multi-node application's next task.
#[derive(Debug)]
struct Gathering {
    app: AppId,
    held: Vec<Held>,
}

/// The multi-node tasks of the batch kind: the gathering, and the nodes of those running.
#[derive(Debug, Default)]
pub(super) struct MultiNode {
    gathering: Option<Gathering>,
    /// Running multi-node tasks' node ids, the first where the command runs, by task id
    /// (entries of tasks that ended are dropped after the commit that stored their end).
    pub running: HashMap<u64, Vec<u32>>,
}

/// Whether node `n` may take part in a task of multi-node application `app` now.
pub(super) fn eligible(cx: &Ctx, app: AppId, n: NodeId) -> bool {
    let open = cx
        .nodes
        .get(n.0)
        .is_some_and(|r| r.alive && !r.removed && !r.drained && !r.draining && r.left.is_none());
    open && cx.view.could_run(app, n)
        && !cx.view.is_excluded(app, n)
        && match (
            cx.view.time_left(n),
            cx.view.app(app).app.time_limit(Variant::Cpu),
        ) {
            (Some(left), Some(limit)) => limit <= left,
            _ => true,
        }
}

/// Whether another task of `app` may start: one is pending, and its `max_running` allows it.
fn startable(cx: &Ctx, app: AppId) -> bool {
    let a = cx.view.app(app);
    a.has_pending() && (a.app.max_running == 0 || a.running < a.app.max_running)
}

/// How many nodes may take part in a task of `app` now.
pub(super) fn eligible_count(cx: &Ctx, app: AppId) -> usize {
    (0..cx.view.nodes().len() as u32)
        .filter(|&n| eligible(cx, app, NodeId(n)))
        .count()
}

impl MultiNode {
    /// The application being gathered for and how many of its nodes are held, if any.
    pub fn gathering(&self) -> Option<(AppId, usize)> {
        self.gathering.as_ref().map(|g| (g.app, g.held.len()))
    }

    /// Node `nid` beats (`open`: it takes work): the gathering goes on, starting one if a
    /// multi-node application waits. Returns the nodes for a task to start here, `nid` first,
    /// once all are whole.
    pub fn on_heartbeat(
        &mut self,
        cx: &mut Ctx,
        nid: NodeId,
        open: bool,
    ) -> Option<(AppId, Vec<Held>)> {
        self.settle(cx);
        if self.gathering.is_none() {
            self.start(cx);
        }
        let g = self.gathering.as_mut()?;
        let whole = cx.view.app(g.app).app.nodes as usize;
        if open && eligible(cx, g.app, nid) {
            if let Some(h) = g.held.iter_mut().find(|h| h.node == nid) {
                // What ended there since its last beat.
                cx.view.hold_more(h);
            } else if g.held.len() < whole {
                g.held.push(cx.view.hold_free(nid));
            } else if is_idle(cx, nid) {
                // A wholly free node serves now; the busiest member would keep the task waiting.
                if let Some(k) = (0..g.held.len())
                    .filter(|&k| !cx.view.holds_whole(&g.held[k]))
                    .min_by_key(|&k| (g.held[k].resources.cores, g.held[k].node))
                {
                    let busy = g.held.swap_remove(k);
                    cx.view.give_back(&busy);
                    g.held.push(cx.view.hold_free(nid));
                }
            }
        }
        let ready = g.held.len() == whole
            && g.held.iter().any(|h| h.node == nid)
            && g.held.iter().all(|h| cx.view.holds_whole(h));
        if !ready {
            return None;
        }
        let mut g = self.gathering.take()?;
        if let Some(k) = g.held.iter().position(|h| h.node == nid) {
            let root = g.held.remove(k);
            g.held.insert(0, root);
        }
        Some((g.app, g.held))
    }

    /// Gives back a gathering's members that may no longer take part, and the whole gathering
    /// when its application has nothing pending or too few nodes are left.
    fn settle(&mut self, cx: &mut Ctx) {
        let Some(g) = self.gathering.as_mut() else {
            return;
        };
        let app = g.app;
        let mut k = 0;
        while k < g.held.len() {
            if eligible(cx, app, g.held[k].node) {
                k += 1;
            } else {
                let gone = g.held.swap_remove(k);
                cx.view.give_back(&gone);
            }
        }
        // Counting the eligible nodes scans the cluster: only while some are missing.
        let whole = cx.view.app(app).app.nodes as usize;
        if !startable(cx, app) || (g.held.len() < whole && eligible_count(cx, app) < whole) {
            self.release(cx);
        }
    }

    /// Gives every node of the gathering back.
    pub fn release(&mut self, cx: &mut Ctx) {
        if let Some(g) = self.gathering.take() {
            for h in &g.held {
                cx.view.give_back(h);
            }
            // Work held off them may start there now.
            for h in &g.held {
                cx.nodes.wakes.node(h.node.0);
            }
        }
    }

    /// Starts gathering for the first multi-node application with a pending task and enough
    /// eligible nodes (highest priority first, then the oldest), and wakes the eligible nodes
    /// so that they beat and join.
    fn start(&mut self, cx: &mut Ctx) {
        let mut waiting: Vec<(i32, AppId, u32)> = cx
            .view
            .pending_apps()
            .filter(|a| a.app.is_multi_node() && startable(cx, a.app.id))
            .map(|a| (a.app.priority, a.app.id, a.app.nodes))
            .collect();
        waiting.sort_by_key(|&(priority, id, _)| (std::cmp::Reverse(priority), id));
        let Some(&(_, app, _)) = waiting
            .iter()
            .find(|&&(_, app, whole)| eligible_count(cx, app) >= whole as usize)
        else {
            return;
        };
        for n in 0..cx.view.nodes().len() as u32 {
            if eligible(cx, app, NodeId(n)) {
                cx.nodes.wakes.node(n);
            }
        }
        self.gathering = Some(Gathering {
            app,
            held: Vec::new(),
        });
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

/// Whether nothing runs on node `n` and all of it is free.
fn is_idle(cx: &Ctx, n: NodeId) -> bool {
    let node = cx.view.node(n);
    node.free == node.node.capacity() && node.device_free.iter().all(|&f| f)
}
