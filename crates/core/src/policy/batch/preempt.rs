//! Priority preemption: which running tasks to stop, on the node whose heartbeat is being
//! handled, so that waiting work of a higher priority starts there (Slurm's
//! `PreemptType=preempt/partition_prio` with `PreemptMode=REQUEUE`). The driver stops the
//! tasks this module names, puts them back in their queues (a preempted attempt is not a
//! failure), and fills the node again with its policy, which now places the waiting task.
//!
//! The rule, decided on one node's heartbeat ([`preempt_on`]):
//!
//! 1. **Who may preempt.** An application with pending tasks that fits on no node that takes
//!    work now, in any variant the driver's policy runs ([`SchedulerView::fits`]) — work that
//!    only waits for resources, not for its own `max_running`, its user's cap, or a node no
//!    task could use. Applications are
//!    tried by level, highest first (the order policies serve them in), at most
//!    [`MAX_BLOCKED`] of them. Multi-node tasks neither preempt nor are preempted: they hold
//!    whole nodes, gathered apart.
//! 2. **Who may be preempted.** A running task whose application's priority is strictly lower
//!    than the waiting application's, and that has run at least the exempt time (Slurm's
//!    `PreemptExemptTime`: every task makes that much progress). The fair-share standing never
//!    preempts: it orders work of one priority, it does not stop it.
//! 3. **Which tasks.** On a node, the candidates are taken lowest priority first, and among
//!    equals the one that started last first (it loses the least work), until the waiting task
//!    fits ([`SchedulerView::fits_freeing`]); then every chosen task that is not needed for the
//!    fit is spared, the most valuable (highest priority, then the one running longest) first.
//!    Each variant the driver's policy runs is tried ([`crate::policy::batch::BatchPolicy::variants`]);
//!    the cheaper set wins.
//! 4. **Which node.** A set's cost is, in order: the highest priority it stops, the work it
//!    throws away (cores × time run, summed), the number of tasks, then the node's id. The
//!    heartbeating node preempts only when its set is the cheapest of every live node's that
//!    takes work, for that application, so the least valuable work in the cluster goes first, whichever node
//!    beats first.
//!
//! One heartbeat preempts for one waiting task at most: the driver places it at once, and the
//! next heartbeat sees the cluster as it then is. The rule is pure: the same view and running
//! tasks give the same answer.

use crate::model::{AppId, Assignment, NodeId, SchedulerView, Variant};
use crate::time::Time;

/// The most waiting applications one heartbeat looks at, by level: a bound on its work when
/// much waits and nothing may be preempted.
pub const MAX_BLOCKED: usize = 8;

/// A running task that preemption may stop: where it runs and what it holds (its
/// [`Assignment`]), and when it started on the view's clock.
#[derive(Clone, Debug, PartialEq)]
pub struct Candidate {
    /// The task as it was placed.
    pub running: Assignment,
    /// When it started, on the clock of [`preempt_on`]'s `now`.
    pub started: Time,
}

/// What to stop on the heartbeating node: `victims`, so that a task of `app` runs there as
/// `variant`.
#[derive(Clone, Debug, PartialEq)]
pub struct Preemption {
    /// The waiting application that gets the room.
    pub app: AppId,
    /// The variant its task fits in once the victims stop.
    pub variant: Variant,
    /// The node.
    pub node: NodeId,
    /// The tasks to stop, as they were given (all on `node`).
    pub victims: Vec<Candidate>,
}

/// The cost of a victim set, compared in field order (lower is cheaper).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Cost {
    /// The highest priority it stops.
    priority: i32,
    /// Core-nanoseconds of work it throws away.
    lost: u128,
    /// How many tasks it stops.
    tasks: usize,
}

/// The driver's terms of the rule.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Rules<'a> {
    /// A task that has run less than this is not stopped (Slurm's `PreemptExemptTime`).
    pub exempt: Time,
    /// The variants the driver's policy runs ([`crate::policy::batch::BatchPolicy::variants`]):
    /// only those are placed.
    pub variants: &'a [Variant],
}

/// What to preempt on `node` at time `now` (the clock of the candidates' `started`, as a
/// policy's `now`), if anything: see the module docs for the rule. `takes_work` says which
/// nodes the driver places work on now (not drained, not shutting down: the view does not
/// know); `running` gives the running tasks that may be stopped on a node (the driver's batch
/// tasks there; multi-node ones are skipped). `None`: nothing waits that preemption would start
/// here.
pub fn preempt_on(
    view: &SchedulerView,
    node: NodeId,
    now: Time,
    rules: &Rules,
    takes_work: impl Fn(NodeId) -> bool,
    running: impl Fn(NodeId) -> Vec<Candidate>,
) -> Option<Preemption> {
    let live = |n: NodeId| view.nodes().get(n.index()).is_some_and(|s| s.alive) && takes_work(n);
    if !live(node) {
        return None;
    }
    let (exempt, variants) = (rules.exempt, rules.variants);
    let running = |n: NodeId| {
        let mut r = running(n);
        r.retain(|c| now.saturating_sub(c.started) >= exempt);
        r
    };
    let here = running(node);
    // Only work of a priority above the lowest running here may preempt here: in the common
    // case (one priority) nothing more is looked at.
    let lowest = here
        .iter()
        .filter_map(|c| view.get_app(c.running.app))
        .map(|a| a.app.priority)
        .min()?;
    for app in blocked(view, lowest, variants, &live) {
        let Some((variant, cost, victims)) = cheapest_on(view, app, node, now, variants, &here)
        else {
            continue;
        };
        // Another live node whose set is cheaper (or as cheap, with a lower id) preempts at its
        // own heartbeat.
        let cheaper_elsewhere = (0..view.nodes().len() as u32).map(NodeId).any(|other| {
            other != node
                && live(other)
                && cheapest_on(view, app, other, now, variants, &running(other))
                    .is_some_and(|(_, c, _)| (c, other.0) < (cost, node.0))
        });
        if cheaper_elsewhere {
            continue;
        }
        return Some(Preemption {
            app,
            variant,
            node,
            victims,
        });
    }
    None
}

/// Applications with pending tasks of a priority above `lowest` that fit on no node now,
/// highest level first (then in submission order), at most [`MAX_BLOCKED`]: fitting in none
/// of `variants` on a node that is `live`.
fn blocked(
    view: &SchedulerView,
    lowest: i32,
    variants: &[Variant],
    live: &impl Fn(NodeId) -> bool,
) -> Vec<AppId> {
    let mut waiting: Vec<(std::cmp::Reverse<i64>, AppId)> = view
        .pending_apps()
        .filter(|a| a.app.priority > lowest && !a.app.is_multi_node())
        .map(|a| (std::cmp::Reverse(view.level(a)), a.app.id))
        .collect();
    waiting.sort_unstable();
    waiting
        .into_iter()
        .map(|(_, app)| app)
        .filter(|&app| {
            !(0..view.nodes().len() as u32)
                .map(NodeId)
                .any(|n| live(n) && variants.iter().any(|&v| view.fits(app, n, v)))
        })
        .take(MAX_BLOCKED)
        .collect()
}

/// The cheapest victim set on `node` that lets a task of `app` start there, over `variants`.
fn cheapest_on(
    view: &SchedulerView,
    app: AppId,
    node: NodeId,
    now: Time,
    variants: &[Variant],
    running: &[Candidate],
) -> Option<(Variant, Cost, Vec<Candidate>)> {
    let priority = view.get_app(app)?.app.priority;
    let priority_of = |c: &Candidate| view.get_app(c.running.app).map(|a| a.app.priority);
    // Lowest priority first, then the one that started last (it loses least), then the
    // highest task id: the order victims are taken in.
    let mut candidates: Vec<(i32, &Candidate)> = running
        .iter()
        .filter(|c| c.running.node == node)
        .filter_map(|c| {
            let p = priority_of(c)?;
            let multi = view.get_app(c.running.app)?.app.is_multi_node();
            (p < priority && !multi).then_some((p, c))
        })
        .collect();
    if candidates.is_empty() {
        return None;
    }
    candidates.sort_by(|(pa, a), (pb, b)| {
        pa.cmp(pb)
            .then(b.started.cmp(&a.started))
            .then(b.running.task.cmp(&a.running.task))
    });
    let mut best: Option<(Variant, Cost, Vec<Candidate>)> = None;
    for &variant in variants {
        if view.get_app(app)?.app.request(variant).is_none() {
            continue;
        }
        let mut chosen: Vec<(i32, &Candidate)> = Vec::new();
        let fits = |chosen: &[(i32, &Candidate)]| {
            let freed: Vec<&Assignment> = chosen.iter().map(|(_, c)| &c.running).collect();
            view.fits_freeing(app, node, variant, &freed)
        };
        for &c in &candidates {
            chosen.push(c);
            if fits(&chosen) {
                break;
            }
        }
        if !fits(&chosen) {
            continue;
        }
        // Spare what the fit does not need, the most valuable first: the last taken.
        let mut i = chosen.len();
        while i > 0 {
            i -= 1;
            let spared = chosen.remove(i);
            if !fits(&chosen) {
                chosen.insert(i, spared);
            }
        }
        let cost = Cost {
            priority: chosen.iter().map(|(p, _)| *p).max().unwrap_or(i32::MIN),
            lost: chosen
                .iter()
                .map(|(_, c)| {
                    u128::from(c.running.request.cores.max(1))
                        * u128::from(now.saturating_sub(c.started))
                })
                .sum(),
            tasks: chosen.len(),
        };
        if best.as_ref().is_none_or(|(_, b, _)| cost < *b) {
            best = Some((
                variant,
                cost,
                chosen.into_iter().map(|(_, c)| c.clone()).collect(),
            ));
        }
    }
    best
}
