//! Why a batch job's pending tasks are not running (`pending_reason` in `hetsched jobs` and
//! `hetsched job N`; Slurm's REASON column of `squeue`).
//!
//! The first that applies, in this order:
//!
//! - `held: …` — `hetsched hold` (or `submit --hold`) keeps it until `hetsched release`;
//! - `waiting for job M` — a job it runs `--after` (or `--after-any`) has not ended as needed;
//! - `waiting for job M to start` — a job it runs `--after-start` has not started;
//! - `begins at TIME (in 25m)` — its begin time (`submit --begin`) has not come;
//! - `waiting for the tasks of job M with the same indices` — every pending task waits for its
//!   correspondents (`--after-corr`);
//! - `every node that can run \`APP\` is drained: …` — an application's tasks fit on some live
//!   nodes, and an operator drained each of them;
//! - `every node that can run \`APP\` is leaving: …` — they are live, but their agents are shutting
//!   down (a signal, or the end of their `time_limit`);
//! - `no live node can run \`APP\` yet: waiting for an allocation of queue \`Q\`` — as the next,
//!   but the agents of a queue the server allocates for could run it (not blocked);
//! - `no live node can run \`APP\` (…)` — no live node has the attributes and the capacity (cores,
//!   memory, devices of the kind) one of its variants needs: it waits until such a node joins
//!   (the submission check passed while one was live, or none had registered yet);
//! - `\`APP\`'s time limit (1h) is longer than the time left on every node that can run it (at
//!   most 40m)` — each of those nodes' agents stops its tasks sooner (its `time_limit`, e.g. the
//!   end of the batch allocation it runs in): it waits for a node with more time;
//! - `\`APP\` is backed off on every node that can run it` — its tasks failed to start there
//!   (`start_failures`), and the back-off has not ended;
//! - `\`APP\` runs its max_running of N` — the application's own cap;
//! - `` `APP`: a task needs 2 cores, more than the 1 core user `alice` may hold at once (…)`` —
//!   its owner's cap, lowered since, holds back even one task alone: blocked until the admin
//!   raises it;
//! - `its user's running tasks hold C of the M cores the user may hold at once` — its owner's
//!   cap (`hetsched user limit --max-cores`);
//! - for a multi-node application: `gathering N whole nodes…`, `waits for multi-node tasks served
//!   before it to gather their nodes`, or `waits for N whole nodes: higher priority work may start on
//!   K of the M that can run it` (a gathering yields nodes to higher priority work);
//! - `dispatch is paused: the server's store has refused writes for …` — a full disk: nothing is
//!   dispatched until the store takes writes again;
//! - `resources: every node that can run it is held whole for a multi-node task` — running, or
//!   gathering its nodes (see `multi_node`);
//! - `resources: node \`N\` has room for it now` — a node it fits on has not beaten since the
//!   room came (a submission or a raised cap wakes it: it starts at that node's next beat);
//! - `resources` — the nodes that can run it are busy: it starts as they free up; under fair
//!   share it adds whose waiting work of the same priority goes first (users whose usage per
//!   share is lower).
//!
//! Computed when a job is listed, from the scheduler's view and the node registry; nothing is
//! stored.

use super::{Batch, JobRec};
use crate::jobs::{Read, request_in_words};
use hetsched_core::model::application::AcceleratorNeed;
use hetsched_core::model::fair_share::STANDING_BITS;
use hetsched_core::policy::batch::multi_node;
use hetsched_core::{AppId, CappedResource, NodeId, Resources, Variant};
use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;
use std::time::{Duration, Instant};

/// How many users a fair-share reason names before it counts the rest.
const SERVED_FIRST_NAMED: usize = 5;

/// What decides which nodes could run an application: its `requires`, its variants' requests
/// (with the device kind), its accelerator need, and whether its tasks hold whole nodes.
type Shape = (
    Vec<String>,
    Option<Resources>,
    Option<(Resources, Option<String>)>,
    AcceleratorNeed,
    bool,
);

/// The nodes that could run applications of one shape ([`Capable::of`]): those that take work,
/// in id order; the names of those an operator drained, and of those whose agents are shutting
/// down, each sorted.
type CapableNodes = Rc<(Vec<NodeId>, Vec<String>, Vec<String>)>;

/// The capable nodes of each application shape, found once per read of the state
/// ([`Read::capable`]): a listing of thousands of jobs of a few shapes scans the nodes a few
/// times, not once per job.
#[derive(Default)]
pub struct Capable(RefCell<HashMap<Shape, CapableNodes>>);

impl Capable {
    /// The nodes that could run `app` (core `SchedulerView::could_run`): alive and not
    /// removed; those that take work, and the drained ones (or whose agents shut down).
    fn of(&self, rd: &Read, app: AppId) -> CapableNodes {
        let Some(state) = rd.view.get_app(app) else {
            return CapableNodes::default();
        };
        let a = &state.app;
        let shape: Shape = (
            a.requires.clone(),
            a.request(Variant::Cpu),
            a.gpu.as_ref().map(|g| (g.request, g.kind.clone())),
            state.accelerator,
            a.is_multi_node(),
        );
        if let Some(found) = self.0.borrow().get(&shape) {
            return found.clone();
        }
        let (mut open, mut drained, mut leaving) = (Vec::new(), Vec::new(), Vec::new());
        for (i, n) in rd.nodes.iter().enumerate() {
            let node = NodeId(i as u32);
            if !n.alive || n.removed || !rd.view.could_run(app, node) {
                continue;
            }
            if n.drained {
                drained.push(n.spec.name.clone());
            } else if n.draining {
                leaving.push(n.spec.name.clone());
            } else {
                open.push(node);
            }
        }
        drained.sort_unstable();
        leaving.sort_unstable();
        let found = Rc::new((open, drained, leaving));
        self.0.borrow_mut().insert(shape, found.clone());
        found
    }
}

/// Index of the pending count in an application's `counts`.
const PENDING: usize = 0;

impl Batch {
    /// Why job `j`'s pending tasks are not running (empty when it has none pending), and
    /// whether that blocks it until an operator acts (no node can run it now).
    pub(super) fn pending_reason(&self, rd: &Read, j: &JobRec) -> (String, bool) {
        self.reason(rd, j, true)
    }

    /// Why job `id`'s pending tasks could not run on any node now, were it released and what
    /// it waits for done: the words of [`Batch::pending_reason`] when it blocks the job (`no
    /// live node can run `APP` (…)`, every node that can is drained, …), past its hold, the jobs
    /// it runs after and its begin time. `None` when some node could run them, or it has none
    /// pending. `hetsched update` warns with it: an update that strands a job is kept.
    pub fn unrunnable(&self, rd: &Read, id: u64) -> Option<String> {
        let j = self.job_rec(id)?;
        match self.reason(rd, j, false) {
            (why, true) => Some(why),
            _ => None,
        }
    }

    /// [`Batch::pending_reason`]; without `gates`, past the hold, the jobs it runs after, its
    /// begin time and its correspondents.
    fn reason(&self, rd: &Read, j: &JobRec, gates: bool) -> (String, bool) {
        let pending = |a: u32| self.apps.get(a as usize).map_or(0, |r| r.counts[PENDING]);
        if j.apps.clone().all(|a| pending(a) == 0) {
            return (String::new(), false);
        }
        let id = j.row.id;
        if gates && j.row.held {
            return (format!("held: `hetsched release {id}` lets it run"), false);
        }
        if gates && self.waiting.waits(id) {
            let why = match (self.first_unfinished_after(j), j.row.begin_ms) {
                (Some(d), _) => format!("waiting for job {d}"),
                (None, _) if self.first_unstarted(j).is_some() => format!(
                    "waiting for job {} to start",
                    self.first_unstarted(j).unwrap_or_default()
                ),
                (None, Some(b)) if self.waiting.deferred(id) => {
                    let now_ms = crate::state::now_ns() / 1_000_000;
                    let left = Duration::from_secs(b.saturating_sub(now_ms).div_ceil(1000));
                    format!(
                        "begins at {} (in {})",
                        crate::jobs::gate::rfc3339(b),
                        humantime::format_duration(left)
                    )
                }
                _ => "waiting for the jobs it runs after".to_string(),
            };
            return (why, false);
        }
        let all_pending: u64 = j.apps.clone().map(pending).sum();
        let corr = self.corr.waiting(id) as u64;
        if gates && corr > 0 && corr >= all_pending {
            let why = match j.row.after_corr.as_slice() {
                [d] => format!("waiting for the tasks of job {d} with the same indices"),
                named => format!(
                    "waiting for the tasks of jobs {} with the same indices",
                    named
                        .iter()
                        .map(u64::to_string)
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            };
            return (why, false);
        }
        for a in j.apps.clone().filter(|&a| pending(a) > 0) {
            let app = AppId(a);
            let Some(rec) = self.apps.get(a as usize) else {
                continue;
            };
            let name = &rec.name;
            // The nodes able to run it at all (the same for every application of its shape,
            // so a listing scans the nodes once per shape): those that take work, and the
            // drained ones, named.
            let capable = rd.capable.of(rd, app);
            let (open, drained, leaving) = (&capable.0, &capable.1, &capable.2);
            if open.is_empty() {
                if !drained.is_empty() {
                    let why = format!(
                        "every node that can run `{name}` is drained: {} (`hetsched node resume NAME`)",
                        drained.join(", ")
                    );
                    return (why, true);
                }
                if !leaving.is_empty() {
                    // Not the operator's doing: `node resume` cannot bring them back.
                    let why = format!(
                        "every node that can run `{name}` is leaving: the agents of {} are shutting down",
                        leaving.join(", ")
                    );
                    return (why, true);
                }
                if let Some((q, state)) = Self::allocating(rd, app) {
                    let why = match state {
                        QueueState::Paused => format!(
                            "no live node can run `{name}`, and queue `{q}`, whose agents could, \
                             is paused (`hetsched allocations --resume {q}`)"
                        ),
                        QueueState::Failing => format!(
                            "no live node can run `{name}`, and queue `{q}`, whose agents could, \
                             fails to get allocations (`hetsched allocations` says why)"
                        ),
                        QueueState::Allocating => format!(
                            "no live node can run `{name}` yet: waiting for an allocation of \
                             queue `{q}` (`hetsched allocations`)"
                        ),
                    };
                    return (why, state != QueueState::Allocating);
                }
                let mut why = format!("no live node can run `{name}` ({})", self.needs(rd, app));
                if let Some(more) = rd
                    .view
                    .get_app(app)
                    .and_then(|a| crate::allocation::time_limit_too_long(rd.allocation, &a.app))
                {
                    why = format!("{why}; {more}");
                }
                return (why, true);
            }
            if let Some(why) = Self::out_of_time(rd, app, name, open) {
                if let Some((q, state)) = Self::allocating(rd, app) {
                    let why = match state {
                        QueueState::Paused => format!(
                            "{why}; queue `{q}` could allocate, but is paused (`hetsched \
                             allocations --resume {q}`)"
                        ),
                        QueueState::Failing => format!(
                            "{why}; queue `{q}` could allocate, but fails to (`hetsched \
                             allocations` says why)"
                        ),
                        QueueState::Allocating => {
                            format!("{why}; waiting for an allocation of queue `{q}`")
                        }
                    };
                    return (why, state != QueueState::Allocating);
                }
                return (why, true);
            }
            // Its user's caps, lowered since it was accepted, hold back even one task alone:
            // no task ending gives it room, only the admin can.
            let group = rd.view.app(app).group;
            if let Some(g) = group
                && let Some(state) = rd.view.get_app(app)
                && let Some(why) = crate::jobs::beyond_cap(
                    rd.view.group(g).cap,
                    &super::task_needs(&state.app),
                    rd.users.owner(id),
                )
            {
                return (
                    format!("`{name}`: {why}: it waits until the admin raises the cap"),
                    true,
                );
            }
            if rec.nodes > 1 {
                if open.len() < rec.nodes as usize {
                    let why = format!(
                        "`{name}` needs {} whole nodes per task, and {} can run it",
                        rec.nodes,
                        match open.len() {
                            1 => "1 live node".to_string(),
                            n => format!("{n} live nodes"),
                        }
                    );
                    return (why, true);
                }
                let whole = rec.nodes as usize;
                let why = if let Some(held) = self.multi.gathering_of(app) {
                    format!(
                        "gathering {whole} whole nodes for `{name}`: {held} held, waiting for what runs on them to end"
                    )
                } else {
                    // Fewer nodes than it needs may be left to it by higher priority one-node
                    // work, or by multi-node tasks gathered for before it.
                    let above = multi_node::yields_to(rd.view, app);
                    let left = open
                        .iter()
                        .filter(|&&n| multi_node::left_to(rd.view, app, &above, n, &|_| true))
                        .count();
                    if left < whole {
                        format!(
                            "`{name}` waits for {whole} whole nodes: higher priority work may \
                             start on {} of the {} that can run it",
                            open.len() - left,
                            open.len()
                        )
                    } else if self.multi.available_to(rd.view, rd.nodes, app) < whole {
                        format!(
                            "`{name}` waits for multi-node tasks served before it to gather \
                             their nodes"
                        )
                    } else {
                        format!("`{name}` waits for {whole} whole nodes")
                    }
                };
                return (why, false);
            }
            if open.iter().all(|&n| rd.view.is_excluded(app, n)) {
                let why = format!(
                    "`{name}` is backed off on every node that can run it (its tasks failed to start there)"
                );
                return (why, false);
            }
            let running = rec.counts[1];
            if rec.max_running > 0 && running >= u64::from(rec.max_running) {
                let why = format!("`{name}` runs its max_running of {}", rec.max_running);
                return (why, false);
            }
            // Its user's cap (`hetsched user limit`) leaves no room for one task of any variant.
            let state = rd.view.app(app);
            if let Some(by) = capped(state, rd) {
                let group = state.group.map(|g| rd.view.group(g)).unwrap_or_default();
                return (crate::jobs::capped_words(&group, by, "tasks hold"), false);
            }
        }
        // Nothing is dispatched while the store refuses writes: not the nodes' doing.
        if let Some(since) = rd.store_paused_since {
            return (
                format!(
                    "dispatch is paused: the server's store has refused writes for {} (a full \
                     disk? the server's log says why); tasks start once it takes them again",
                    humantime::format_duration(Duration::from_secs(since.elapsed().as_secs()))
                ),
                false,
            );
        }
        // Every node able to run them is held whole for multi-node tasks (running, or gathering).
        let held = j.apps.clone().filter(|&a| pending(a) > 0).all(|a| {
            let capable = rd.capable.of(rd, AppId(a));
            !capable.0.is_empty() && capable.0.iter().all(|&n| rd.view.is_held(n))
        });
        if held
            && !j
                .apps
                .clone()
                .any(|a| self.apps.get(a as usize).is_some_and(|r| r.nodes > 1))
        {
            return (
                "resources: every node that can run it is held whole for a multi-node task"
                    .to_string(),
                false,
            );
        }
        // A node that can take a task now (free room, its user's cap, every rule of the view's
        // `fits`) has not beaten since the room came: a submission, a raised cap or a node
        // resumed wakes it, and its next beat starts the task. Saying its nodes are busy then
        // sent the reader looking for load that is not there.
        let ready = j.apps.clone().filter(|&a| pending(a) > 0).find_map(|a| {
            let capable = rd.capable.of(rd, AppId(a));
            capable.0.iter().copied().find(|&n| {
                rd.view.fits(AppId(a), n, Variant::Cpu) || rd.view.fits(AppId(a), n, Variant::Gpu)
            })
        });
        if let Some(name) = ready.and_then(|n| rd.nodes.get(n.0)).map(|n| &n.spec.name) {
            return (
                format!(
                    "resources: node `{name}` has room for it now: it starts at the node's next heartbeat"
                ),
                false,
            );
        }
        let first = Self::served_first(rd, j.apps.clone().filter(|&a| pending(a) > 0));
        if !first.is_empty() {
            return (
                format!(
                    "resources: the nodes that can run it are busy, and fair share serves first \
                     the waiting work of users who used less of the cluster per share: {} \
                     (`hetsched user list`)",
                    first.join(", ")
                ),
                false,
            );
        }
        (
            "resources: the nodes that can run it are busy".to_string(),
            false,
        )
    }

    /// Under fair share, the owners (by name; the admin as `the admin`) of other users' waiting
    /// work of the same priority that every policy serves before the best of `apps` (a job's
    /// applications with tasks waiting): their usage per share is lower. At most
    /// [`SERVED_FIRST_NAMED`] names, then how many more. Empty without fair share.
    fn served_first(rd: &Read, apps: impl Iterator<Item = u32>) -> Vec<String> {
        if rd.view.fair_share().is_none() {
            return Vec::new();
        }
        let Some(mine) = apps.map(|a| rd.view.app(AppId(a))).max_by_key(|s| s.level) else {
            return Vec::new();
        };
        let priority = |level: i64| level >> STANDING_BITS;
        // A user whose waiting work its own cap holds back is not served first: it waits too.
        let mut groups: Vec<Option<u32>> = rd
            .view
            .pending_apps()
            .filter(|a| {
                a.group != mine.group
                    && a.level > mine.level
                    && priority(a.level) == priority(mine.level)
                    && capped(a, rd).is_none()
            })
            .map(|a| a.group)
            .collect();
        groups.sort_unstable();
        groups.dedup();
        let names: HashMap<u32, &str> = rd.users.groups().map(|(n, g)| (g, n)).collect();
        let mut named: Vec<String> = groups
            .iter()
            .map(|g| match g {
                None => "the admin".to_string(),
                Some(g) => names
                    .get(g)
                    .map_or_else(|| format!("group {g}"), |n| n.to_string()),
            })
            .collect();
        named.sort_unstable();
        if named.len() > SERVED_FIRST_NAMED {
            let more = named.len() - SERVED_FIRST_NAMED;
            named.truncate(SERVED_FIRST_NAMED);
            named.push(format!("and {more} more"));
        }
        named
    }

    /// The first automatic allocation queue whose agents could run `app` (what they have, once
    /// one registered: [`crate::allocation::QueueStatus::agent_capacity`]), preferring one that
    /// allocates to one whose batch system refuses (an operator must look) to a paused one.
    fn allocating<'r>(rd: &'r Read, app: AppId) -> Option<(&'r str, QueueState)> {
        let a = &rd.view.get_app(app)?.app;
        rd.allocation
            .iter()
            .filter(|q| {
                let node = rd.queue_capacity.get(&q.name).copied();
                crate::allocation::cores_per_task(q, a, node).is_some()
            })
            .map(|q| {
                let state = if rd.paused_queues.contains(&q.name) {
                    QueueState::Paused
                } else if rd.failing_queues.contains(&q.name) {
                    QueueState::Failing
                } else {
                    QueueState::Allocating
                };
                (q.name.as_str(), state)
            })
            .min_by_key(|&(_, state)| state)
    }

    /// Why `app` waits when its time limit is longer than the time left on every one of `open`
    /// (the nodes that could run it otherwise); `None` when one has the time, or it has a
    /// variant without a limit.
    fn out_of_time(rd: &Read, app: AppId, name: &str, open: &[NodeId]) -> Option<String> {
        let a = &rd.view.get_app(app)?.app;
        // The shortest limit among its variants; a variant without one runs anywhere.
        let mut limit: Option<u64> = None;
        for v in [Variant::Cpu, Variant::Gpu] {
            if a.request(v).is_some() {
                let l = a.time_limit(v)?;
                limit = Some(limit.map_or(l, |m| m.min(l)));
            }
        }
        let limit = Duration::from_nanos(limit?);
        let now = Instant::now();
        let mut most = Duration::ZERO;
        for n in open {
            let left = rd.nodes.get(n.0)?.ends_at?.saturating_duration_since(now);
            if left >= limit {
                return None;
            }
            most = most.max(left);
        }
        let words =
            |d: Duration| humantime::format_duration(Duration::from_secs(d.as_secs())).to_string();
        Some(format!(
            "`{name}`'s time limit ({}) is longer than the time left on every node that can run it \
             (at most {}: their agents' `time_limit`)",
            words(limit),
            words(most)
        ))
    }

    /// What one task of `app` needs, in words: each variant's request and the attributes.
    fn needs(&self, rd: &Read, app: AppId) -> String {
        let Some(state) = rd.view.get_app(app) else {
            return String::new();
        };
        let a = &state.app;
        let mut parts = Vec::new();
        for (v, what) in [(Variant::Cpu, "cpu"), (Variant::Gpu, "gpu")] {
            if let Some(r) = a.request(v) {
                let kind = a.gpu.as_ref().and_then(|g| g.kind.as_deref());
                parts.push(format!("{what}: {}", request_in_words(&r, kind)));
            }
        }
        if !a.requires.is_empty() {
            parts.push(format!("requires {}", a.requires.join(" + ")));
        }
        parts.join("; ")
    }
}

/// What an automatic allocation queue does for work it could serve, best first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum QueueState {
    /// It submits allocations as work waits.
    Allocating,
    /// Its last look at the batch system failed (a submission refused, say).
    Failing,
    /// An operator paused it.
    Paused,
}

/// The resource of its user's cap (`hetsched user limit`) that leaves no room for one more task
/// of `app`, whichever variant it would run (`None`: it has room, or no user).
fn capped(app: &hetsched_core::model::view::AppState, rd: &Read) -> Option<CappedResource> {
    let group = rd.view.group(app.group?);
    let capped: Vec<_> = [Variant::Cpu, Variant::Gpu]
        .into_iter()
        .filter_map(|v| app.app.request(v))
        .map(|r| group.capped_by(&r))
        .collect();
    match capped.first() {
        Some(Some(by)) if capped.iter().all(Option::is_some) => Some(*by),
        _ => None,
    }
}
