//! Multi-node tasks (`nodes = N`, [`Application::nodes`](crate::model::Application::nodes)): the
//! gathering of N whole nodes for the next task, as a driver's node beats.
//!
//! No batch policy places a multi-node task ([`SchedulerView::fits`] refuses it on any one
//! node). A [`Gatherer`] gathers its nodes instead, for one application at a time — the highest
//! priority first, then the lowest id (the oldest). While a gathering lasts, each eligible node
//! that beats joins it until it has N members, and a member's free resources are held at each of
//! its beats ([`SchedulerView::hold_free`], [`SchedulerView::hold_more`]), so nothing new starts
//! there and what runs there drains: the reservation that keeps a stream of small tasks from
//! starving a wide one. A node that is wholly free replaces a member that is still busy (the
//! one holding the fewest cores). Once every member is whole, [`Gatherer::on_node_update`]
//! answers the nodes, the beating node first, for the driver to start the task on
//! ([`SchedulerView::start_multi_node`]).
//!
//! A node is *eligible* for an application ([`eligible`]) when the view could run the
//! application there at all (alive, its `requires`), it is not backed off for it, it has time
//! left for the task's time limit, and the driver says it takes work (`open`: not drained, not
//! shutting down). A gathering *yields* an eligible node to higher priority work: while a
//! one-node application of a higher priority than the gathering's has a task that may start and
//! the node is eligible for it, the node is not held (a member is given back), so priorities
//! hold across the two kinds of work — the reservation keeps lower and equal priorities off the
//! nodes, never higher ones. A gathering gives its nodes back when its application cannot start
//! another task (nothing pending, or its `max_running` reached), and when fewer than N eligible
//! nodes are left to it. Sans-IO: the driver passes the node that beats and `open`, and wakes
//! the nodes the gatherer names.

use crate::model::{AppId, Held, NodeId, SchedulerView, Variant};

/// Nodes held for one multi-node application's next task.
#[derive(Clone, Debug)]
struct Gathering {
    app: AppId,
    held: Vec<Held>,
}

/// Gathers whole nodes for multi-node tasks, one application at a time (module docs).
#[derive(Clone, Debug, Default)]
pub struct Gatherer {
    gathering: Option<Gathering>,
}

/// Whether node `n` may take part in a task of multi-node application `app` now; `open(n)` is
/// the driver's word that the node takes work.
pub fn eligible(
    view: &SchedulerView,
    app: AppId,
    n: NodeId,
    open: &dyn Fn(NodeId) -> bool,
) -> bool {
    open(n)
        && view.could_run(app, n)
        && !view.is_excluded(app, n)
        && match (
            view.time_left(n),
            view.app(app).app.time_limit(Variant::Cpu),
        ) {
            (Some(left), Some(limit)) => limit <= left,
            _ => true,
        }
}

/// The one-node applications that a gathering for `app` yields nodes to: a task of theirs may
/// start, and their priority is higher than `app`'s.
pub fn yields_to(view: &SchedulerView, app: AppId) -> Vec<AppId> {
    let priority = view.app(app).app.priority;
    view.pending_apps()
        .filter(|a| {
            a.app.priority > priority && !a.app.is_multi_node() && startable(view, a.app.id)
        })
        .map(|a| a.app.id)
        .collect()
}

/// Whether node `n` is left to a gathering for `app`: it is eligible for `app`, and for none of
/// the applications it yields to (`above`, from [`yields_to`]).
pub fn left_to(
    view: &SchedulerView,
    app: AppId,
    above: &[AppId],
    n: NodeId,
    open: &dyn Fn(NodeId) -> bool,
) -> bool {
    eligible(view, app, n, open) && !above.iter().any(|&b| eligible(view, b, n, open))
}

/// How many nodes are left to a gathering for `app` ([`left_to`]).
pub fn left_count(
    view: &SchedulerView,
    app: AppId,
    above: &[AppId],
    open: &dyn Fn(NodeId) -> bool,
) -> usize {
    (0..view.nodes().len() as u32)
        .filter(|&n| left_to(view, app, above, NodeId(n), open))
        .count()
}

/// Whether another task of `app` may start: one is pending, and its `max_running` allows it.
fn startable(view: &SchedulerView, app: AppId) -> bool {
    let a = view.app(app);
    a.has_pending() && (a.app.max_running == 0 || a.running < a.app.max_running)
}

/// Whether nothing runs on node `n` and all of it is free.
fn is_idle(view: &SchedulerView, n: NodeId) -> bool {
    let node = view.node(n);
    node.free == node.node.capacity() && node.device_free.iter().all(|&f| f)
}

impl Gatherer {
    /// The application being gathered for and how many of its nodes are held, if any.
    pub fn gathering(&self) -> Option<(AppId, usize)> {
        self.gathering.as_ref().map(|g| (g.app, g.held.len()))
    }

    /// Node `node` beats, taking work if `open(node)`: the gathering goes on, starting one if a
    /// multi-node application waits (its eligible nodes are pushed onto `wake`, so that they
    /// beat and join). Returns the application and its nodes, `node` first, once all are whole:
    /// the caller starts the task on them or gives them back.
    pub fn on_node_update(
        &mut self,
        view: &mut SchedulerView,
        node: NodeId,
        open: &dyn Fn(NodeId) -> bool,
        wake: &mut Vec<NodeId>,
    ) -> Option<(AppId, Vec<Held>)> {
        let mut above = self.settle(view, open, wake);
        if self.gathering.is_none() {
            above = self.start(view, open, wake);
        }
        let g = self.gathering.as_mut()?;
        let whole = view.app(g.app).app.nodes as usize;
        if left_to(view, g.app, &above, node, open) {
            if let Some(h) = g.held.iter_mut().find(|h| h.node == node) {
                // What ended there since its last beat.
                view.hold_more(h);
            } else if g.held.len() < whole {
                g.held.push(view.hold_free(node));
            } else if is_idle(view, node) {
                // A wholly free node serves now; the busiest member would keep the task waiting.
                if let Some(k) = (0..g.held.len())
                    .filter(|&k| !view.holds_whole(&g.held[k]))
                    .min_by_key(|&k| (g.held[k].resources.cores, g.held[k].node))
                {
                    let busy = g.held.swap_remove(k);
                    view.give_back(&busy);
                    wake.push(busy.node);
                    g.held.push(view.hold_free(node));
                }
            }
        }
        let ready = g.held.len() == whole
            && g.held.iter().any(|h| h.node == node)
            && g.held.iter().all(|h| view.holds_whole(h));
        if !ready {
            return None;
        }
        let mut g = self.gathering.take()?;
        if let Some(k) = g.held.iter().position(|h| h.node == node) {
            let root = g.held.remove(k);
            g.held.insert(0, root);
        }
        Some((g.app, g.held))
    }

    /// Gives back a gathering's members that may no longer take part (or are yielded to higher
    /// priority work, which they are woken for), and the whole gathering when its application
    /// cannot start a task or too few nodes are left to it. Returns what the gathering yields to.
    fn settle(
        &mut self,
        view: &mut SchedulerView,
        open: &dyn Fn(NodeId) -> bool,
        wake: &mut Vec<NodeId>,
    ) -> Vec<AppId> {
        let Some(g) = self.gathering.as_mut() else {
            return Vec::new();
        };
        let app = g.app;
        let above = yields_to(view, app);
        let mut k = 0;
        while k < g.held.len() {
            let n = g.held[k].node;
            if left_to(view, app, &above, n, open) {
                k += 1;
            } else {
                let gone = g.held.swap_remove(k);
                view.give_back(&gone);
                wake.push(n);
            }
        }
        // Counting the nodes left scans the cluster: only while some are missing.
        let whole = view.app(app).app.nodes as usize;
        if !startable(view, app)
            || (g.held.len() < whole && left_count(view, app, &above, open) < whole)
        {
            self.release(view, wake);
        }
        above
    }

    /// Gives every node of the gathering back (they are pushed onto `wake`: work held off them
    /// may start there now).
    pub fn release(&mut self, view: &mut SchedulerView, wake: &mut Vec<NodeId>) {
        if let Some(g) = self.gathering.take() {
            for h in &g.held {
                view.give_back(h);
                wake.push(h.node);
            }
        }
    }

    /// Starts gathering for the first multi-node application that can start a task and has
    /// enough nodes left to it (highest priority first, then the oldest), waking those nodes.
    /// Returns what the new gathering yields to.
    fn start(
        &mut self,
        view: &SchedulerView,
        open: &dyn Fn(NodeId) -> bool,
        wake: &mut Vec<NodeId>,
    ) -> Vec<AppId> {
        let mut waiting: Vec<(i32, AppId, u32)> = view
            .pending_apps()
            .filter(|a| a.app.is_multi_node() && startable(view, a.app.id))
            .map(|a| (a.app.priority, a.app.id, a.app.nodes))
            .collect();
        waiting.sort_by_key(|&(priority, id, _)| (std::cmp::Reverse(priority), id));
        for (_, app, whole) in waiting {
            let above = yields_to(view, app);
            if left_count(view, app, &above, open) < whole as usize {
                continue;
            }
            wake.extend(
                (0..view.nodes().len() as u32)
                    .map(NodeId)
                    .filter(|&n| left_to(view, app, &above, n, open)),
            );
            self.gathering = Some(Gathering {
                app,
                held: Vec::new(),
            });
            return above;
        }
        Vec::new()
    }
}
