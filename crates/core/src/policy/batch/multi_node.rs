//! Multi-node tasks (`nodes = N`, [`Application::nodes`](crate::model::Application::nodes)): the
//! gathering of N whole nodes for the next task, as a driver's node beats.
//!
//! No batch policy places a multi-node task ([`SchedulerView::fits`] refuses it on any one
//! node). A [`Gatherer`] gathers its nodes instead: one *gathering* per waiting multi-node
//! application, served in order — the highest level first (priority, then fair-share standing:
//! `SchedulerView::level`), then the lowest id (the oldest).
//! Each eligible node that beats joins the first gathering it may take part in that misses a
//! member, and a member's free resources are held at each of its beats
//! ([`SchedulerView::hold_free`], [`SchedulerView::hold_more`]), so nothing new starts there and
//! what runs there drains: the reservation that keeps a stream of small tasks from starving a
//! wide one. A node that is wholly free (or held whole by a gathering served later) replaces a
//! member that is still busy (the one holding the fewest cores). Once every member is whole,
//! [`Gatherer::on_node_update`] answers the nodes, the beating node first, for the driver to
//! start the task on ([`SchedulerView::start_multi_node`]).
//!
//! Several gatherings go on side by side, so a multi-node task whose nodes are free now starts
//! while another, served before it, waits for its nodes to drain (backfill). A gathering served
//! earlier takes precedence over later ones: it takes their members when it misses one, and a
//! later gathering starts (and goes on) only while N nodes are available to it besides the
//! members of the earlier ones — so it never holds nodes idle that it cannot complete with. A
//! beat tries at most [`TRIES_PER_BEAT`] waiting applications without a gathering (each try
//! counts the nodes).
//!
//! A node is *eligible* for an application ([`eligible`]) when the view could run the
//! application there at all (alive, its `requires`), it is not backed off for it, it has time
//! left for the task's time limit, and the driver says it takes work (`open`: not drained, not
//! shutting down). A gathering *yields* an eligible node to higher priority work: while a
//! one-node application of a higher priority than the gathering's has a task that may start and
//! the node is eligible for it, the node is not held (a member is given back), so priorities
//! hold across the two kinds of work — the reservation keeps lower and equal priorities off the
//! nodes, never higher ones. A gathering gives its nodes back when its application cannot start
//! another task (nothing pending, or its `max_running` reached), and when it misses members and
//! fewer than N nodes are available to it. Sans-IO: the driver passes the node that beats and
//! `open`, and wakes the nodes the gatherer names.

use crate::model::{AppId, Held, NodeId, Resources, SchedulerView, Variant};

/// Nodes held for one multi-node application's next task.
#[derive(Clone, Debug)]
struct Gathering {
    app: AppId,
    held: Vec<Held>,
}

/// Gathers whole nodes for multi-node tasks, several applications side by side (module docs).
#[derive(Clone, Debug, Default)]
pub struct Gatherer {
    /// The gatherings, in the order they are served ([`served_before`]).
    gatherings: Vec<Gathering>,
    /// Where the next beat's turn begins among the waiting applications after the first.
    turn: usize,
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
    let level = view.level(view.app(app));
    view.pending_apps()
        .filter(|a| view.level(a) > level && !a.app.is_multi_node() && startable(view, a.app.id))
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

/// Whether another task of `app` may start: one is pending, and its `max_running` and its
/// group's cap allow it.
fn startable(view: &SchedulerView, app: AppId) -> bool {
    let a = view.app(app);
    // Its group's cap (a user's `--max-cores`, `--max-gpus`, `--max-memory`) must have room for
    // what it asks of each node (at least a core) on each of its nodes; once started, the task
    // counts everything of its nodes.
    a.has_pending()
        && (a.app.max_running == 0 || a.running < a.app.max_running)
        && view.group_room(app, &least_held(&a.app))
}

/// The least a multi-node task of `app` holds once started: its per-node request (at least a
/// core) on each of its nodes.
fn least_held(app: &crate::model::Application) -> Resources {
    let per_node = app.request(Variant::Cpu).unwrap_or_default();
    let nodes = app.nodes.max(1);
    Resources::new(
        per_node.cores.max(1).saturating_mul(nodes),
        per_node.memory_bytes.saturating_mul(u64::from(nodes)),
        per_node.gpus.saturating_mul(nodes),
    )
}

/// Whether nothing runs on node `n` and all of it is free.
fn is_idle(view: &SchedulerView, n: NodeId) -> bool {
    let node = view.node(n);
    node.free == node.node.capacity() && node.device_free.iter().all(|&f| f)
}

/// Applications without a gathering tried per beat (the first waiting one always, the others
/// in turn): each try counts the cluster's nodes, so many multi-node applications that cannot
/// gather cost a beat a bounded number of passes.
const TRIES_PER_BEAT: usize = 4;

impl Gatherer {
    /// The applications being gathered for, in the order they are served, each with how many of
    /// its nodes are held.
    pub fn gatherings(&self) -> impl Iterator<Item = (AppId, usize)> + '_ {
        self.gatherings.iter().map(|g| (g.app, g.held.len()))
    }

    /// The application whose gathering holds `node`, if any.
    pub fn holding(&self, node: NodeId) -> Option<AppId> {
        self.gatherings
            .iter()
            .find(|g| g.held.iter().any(|h| h.node == node))
            .map(|g| g.app)
    }

    /// How many nodes are held for `app`'s next task, if it is being gathered for.
    pub fn gathering_of(&self, app: AppId) -> Option<usize> {
        self.gatherings
            .iter()
            .find(|g| g.app == app)
            .map(|g| g.held.len())
    }

    /// How many nodes a new gathering for `app` could have: those left to it ([`left_to`])
    /// that no gathering served before it holds.
    pub fn available_to(
        &self,
        view: &SchedulerView,
        app: AppId,
        open: &dyn Fn(NodeId) -> bool,
    ) -> usize {
        let above = yields_to(view, app);
        let before = self
            .gatherings
            .partition_point(|g| served_before(view, g.app, app));
        self.available(view, app, &above, before, open)
    }

    /// Node `node` beats, taking work if `open(node)`: the gatherings go on, new ones starting
    /// for multi-node applications that wait (their nodes are pushed onto `wake`, so that they
    /// beat and join). Returns an application and its nodes, `node` first, once all of them
    /// are whole: the caller starts the task on them or gives them back.
    pub fn on_node_update(
        &mut self,
        view: &mut SchedulerView,
        node: NodeId,
        open: &dyn Fn(NodeId) -> bool,
        wake: &mut Vec<NodeId>,
    ) -> Option<(AppId, Vec<Held>)> {
        let mut above = self.settle(view, open, wake);
        self.start(view, open, wake, &mut above);
        let at = self.join(view, node, open, wake, &above)?;
        let g = &self.gatherings[at];
        let whole = view.app(g.app).app.nodes as usize;
        let ready = g.held.len() == whole && g.held.iter().all(|h| view.holds_whole(h));
        if !ready {
            return None;
        }
        let mut g = self.gatherings.remove(at);
        if let Some(k) = g.held.iter().position(|h| h.node == node) {
            let root = g.held.remove(k);
            g.held.insert(0, root);
        }
        Some((g.app, g.held))
    }

    /// How many nodes a gathering for `app` after the first `before` gatherings could have: the
    /// nodes left to it ([`left_to`]) that none of those holds, less the members those still
    /// miss (they may come from the same nodes).
    fn available(
        &self,
        view: &SchedulerView,
        app: AppId,
        above: &[AppId],
        before: usize,
        open: &dyn Fn(NodeId) -> bool,
    ) -> usize {
        let earlier = &self.gatherings[..before];
        let missing: usize = earlier
            .iter()
            .map(|g| (view.app(g.app).app.nodes as usize).saturating_sub(g.held.len()))
            .sum();
        (0..view.nodes().len() as u32)
            .map(NodeId)
            .filter(|&n| {
                left_to(view, app, above, n, open)
                    && !earlier.iter().any(|g| g.held.iter().any(|h| h.node == n))
            })
            .count()
            .saturating_sub(missing)
    }

    /// Gives back each gathering's members that may no longer take part in it (or are yielded
    /// to higher priority work, which they are woken for), and a whole gathering when its
    /// application cannot start a task, or it misses members and too few nodes are available to
    /// it. Returns what each gathering left yields to, in order.
    fn settle(
        &mut self,
        view: &mut SchedulerView,
        open: &dyn Fn(NodeId) -> bool,
        wake: &mut Vec<NodeId>,
    ) -> Vec<Vec<AppId>> {
        // Levels may have changed (`SchedulerView::set_priority`, fair-share standings) since
        // the last beat.
        self.gatherings.sort_by_key(|g| {
            let a = view.app(g.app);
            (std::cmp::Reverse(view.level(a)), a.app.id)
        });
        let mut aboves = Vec::with_capacity(self.gatherings.len());
        let mut i = 0;
        while i < self.gatherings.len() {
            let app = self.gatherings[i].app;
            let above = yields_to(view, app);
            let g = &mut self.gatherings[i];
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
            // Counting the available nodes scans the cluster: only while members are missing.
            let whole = view.app(app).app.nodes as usize;
            let missing = g.held.len() < whole;
            if !startable(view, app)
                || (missing && self.available(view, app, &above, i, open) < whole)
            {
                let g = self.gatherings.remove(i);
                for h in &g.held {
                    view.give_back(h);
                    wake.push(h.node);
                }
                continue;
            }
            aboves.push(above);
            i += 1;
        }
        aboves
    }

    /// Gives every node of every gathering back (they are pushed onto `wake`: work held off
    /// them may start there now).
    pub fn release(&mut self, view: &mut SchedulerView, wake: &mut Vec<NodeId>) {
        for g in self.gatherings.drain(..) {
            for h in &g.held {
                view.give_back(h);
                wake.push(h.node);
            }
        }
    }

    /// Starts gatherings for multi-node applications that can start a task and have none, in
    /// the order they are served, each once enough nodes are available to it; their nodes are
    /// woken. The first such application is tried at every beat, at most
    /// [`TRIES_PER_BEAT`] − 1 others in turn. `aboves` (what each gathering yields to) grows
    /// with the gatherings.
    fn start(
        &mut self,
        view: &SchedulerView,
        open: &dyn Fn(NodeId) -> bool,
        wake: &mut Vec<NodeId>,
        aboves: &mut Vec<Vec<AppId>>,
    ) {
        let mut waiting: Vec<(i64, AppId, u32)> = view
            .pending_apps()
            .filter(|a| {
                a.app.is_multi_node()
                    && startable(view, a.app.id)
                    && self.gathering_of(a.app.id).is_none()
            })
            .map(|a| (view.level(a), a.app.id, a.app.nodes))
            .collect();
        if waiting.is_empty() {
            return;
        }
        waiting.sort_by_key(|&(level, id, _)| (std::cmp::Reverse(level), id));
        let rest = waiting.len() - 1;
        let turns = rest.min(TRIES_PER_BEAT - 1);
        let first = self.turn % rest.max(1);
        self.turn = self.turn.wrapping_add(turns);
        let mut tries: Vec<usize> = std::iter::once(0)
            .chain((0..turns).map(|k| 1 + (first + k) % rest.max(1)))
            .collect();
        tries.sort_unstable();
        tries.dedup();
        for k in tries {
            let (_, app, whole) = waiting[k];
            let above = yields_to(view, app);
            let at = self
                .gatherings
                .partition_point(|g| served_before(view, g.app, app));
            if self.available(view, app, &above, at, open) < whole as usize {
                continue;
            }
            wake.extend((0..view.nodes().len() as u32).map(NodeId).filter(|&n| {
                left_to(view, app, &above, n, open)
                    && !self.gatherings[..at]
                        .iter()
                        .any(|g| g.held.iter().any(|h| h.node == n))
            }));
            self.gatherings.insert(
                at,
                Gathering {
                    app,
                    held: Vec::new(),
                },
            );
            aboves.insert(at, above);
        }
    }

    /// Where the beating node `node` goes: it stays in its gathering, or moves to one served
    /// before it that it may take part in and that misses a member — or has a busy member, when
    /// `node` is wholly free or held whole (it replaces the busy member holding the fewest
    /// cores, which is woken). Returns the index of the gathering it is in, if any.
    fn join(
        &mut self,
        view: &mut SchedulerView,
        node: NodeId,
        open: &dyn Fn(NodeId) -> bool,
        wake: &mut Vec<NodeId>,
        aboves: &[Vec<AppId>],
    ) -> Option<usize> {
        let cur = self
            .gatherings
            .iter()
            .position(|g| g.held.iter().any(|h| h.node == node));
        let free = match cur {
            Some(c) => self.gatherings[c]
                .held
                .iter()
                .any(|h| h.node == node && view.holds_whole(h)),
            None => is_idle(view, node),
        };
        // `aboves` has one entry per gathering.
        for (i, above) in aboves.iter().enumerate() {
            if Some(i) == cur {
                if let Some(h) = self.gatherings[i].held.iter_mut().find(|h| h.node == node) {
                    // What ended there since its last beat.
                    view.hold_more(h);
                }
                return Some(i);
            }
            let g = &self.gatherings[i];
            if !left_to(view, g.app, above, node, open) {
                continue;
            }
            let whole = view.app(g.app).app.nodes as usize;
            let busy = if g.held.len() < whole {
                None
            } else if free {
                // A node free now serves sooner than the busiest member would.
                match (0..g.held.len())
                    .filter(|&k| !view.holds_whole(&g.held[k]))
                    .min_by_key(|&k| (g.held[k].resources.cores, g.held[k].node))
                {
                    Some(k) => Some(k),
                    None => continue,
                }
            } else {
                continue;
            };
            // `node` joins gathering i, moving from its own (served later) if it had one.
            let mut held = match cur {
                Some(c) => {
                    let from = &mut self.gatherings[c].held;
                    let k = from.iter().position(|h| h.node == node)?;
                    from.swap_remove(k)
                }
                None => view.hold_free(node),
            };
            view.hold_more(&mut held);
            let g = &mut self.gatherings[i];
            if let Some(k) = busy {
                let out = g.held.swap_remove(k);
                view.give_back(&out);
                wake.push(out.node);
            }
            g.held.push(held);
            return Some(i);
        }
        None
    }
}

/// Whether a gathering for `a` is served before one for `b`: a higher level (priority, then
/// fair-share standing), then the lower id (the older).
fn served_before(view: &SchedulerView, a: AppId, b: AppId) -> bool {
    let key = |x: AppId| (std::cmp::Reverse(view.level(view.app(x))), x);
    key(a) < key(b)
}
