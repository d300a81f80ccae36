//! `hdas`: heterogeneous dynamic affinity scheduling (spec 02, Algorithm 1).
//!
//! On each heartbeat, for each priority level (highest first):
//! 1. while the node has a free GPU, give it to the GPU-capable application whose new task is
//!    **least delayed relative to its GPU_base task** under the node's live `TotalIO`/`#IOtask`
//!    (eqs. (1)–(3)); ties: fewest GPU tasks already dispatched, then GPU-only applications, then
//!    earliest start;
//! 2. while the node has a free core, give it to the CPU-capable application with the **slowest
//!    relative progress** (eq. (6)); progress values within [`HdasConfig::progress_tolerance`] of
//!    the slowest count as equal (spec 02 leaves this OPEN), and among those the highest ratio of
//!    predicted CPU speed to the application's best speed alone wins, then CPU-only applications,
//!    then earliest start.
//!
//! Each decision re-reads the view, which [`SchedulerView::assign`] has just updated, so a decision
//! costs O(#applications) and sees the load of the one before it.
//!
//! # The cost of `hdas-hetero`'s plan at scale
//! `hdas-hetero` follows a plan, the fluid optimum of the pending work
//! ([`super::bound::contended_plan`]: up to 1 + [`super::bound::CONTENTION_ROUNDS`] LP solves).
//! It used to re-plan whenever the number of pending applications changed, so each application
//! that drained cost a plan, and a plan's programme had a demand row per application and a
//! variable per application, node group and variant: with thousands of one-task jobs waiting,
//! a heartbeat cost tens of milliseconds (75 ms at 3,000) and a whole run grew about as the
//! cube of the applications. Two limits keep a decision near-linear in what waits:
//! - **a plan stands until the pending set has moved materially** (`Plan::outdated_by`): the
//!   applications planned that drained plus those waiting unplanned (arrived since) number at
//!   least `REPLAN_CHANGE` (1/16) of the applications planned. Draining from `q` applications
//!   then makes about `16 · ln(q / 32) + 32` plans, not `q`. Below 32 applications planned
//!   every change of the applications that wait re-plans, as before; the other triggers (the
//!   cluster or a request changed, the plan's makespan passed, a measured read stretch
//!   drifted) are unchanged. Between plans an
//!   application that drained leaves its share unused, and one that arrived is planned nothing:
//!   like any application the plan gives nothing, it gets a GPU or core when every planned
//!   application is ahead of its pace there, and the plan's expiry bounds how long that lasts.
//! - **a plan's programme has at most [`super::bound::MAX_PLANNED_APPS`] (32) demand rows**:
//!   beyond, applications the programme cannot tell apart are merged (which changes nothing in
//!   the optimum), then similar ones pooled on coarsening grids, each application taking its
//!   class's split in proportion to its tasks ([`super::bound::pool_applications`]).
//!
//! Both leave a workload of fewer than 32 applications planned exactly as before (the paper's
//! experiment has 2–4, the sweep's at most 10: both give byte-identical reports), so
//! `docs/results/hdas.md` stands. Simpler options were weighed: re-planning on a timer alone
//! keeps a plan that still counts work long done (and re-plans a small workload less often than
//! now, moving every figure); planning the `K` largest applications exactly with the tail
//! outside the programme leaves most of the work unplanned when thousands of small jobs wait;
//! warm-starting `microlp` from the last basis is not offered by `good_lp`, and would still
//! solve a programme of one row per application.

use super::predict::{cpu_task_time, gpu_task_time, gpu_time_alone};
use super::{BatchPolicy, assign_while};
use crate::model::view::elapsed_since;
use crate::model::{AppId, Assignment, Need, NodeId, SchedulerView, Variant};
use crate::time::Time;
use serde::{Deserialize, Serialize};
use std::cmp::Ordering;

/// HDAS settings.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HdasConfig {
    /// Relative tolerance within which two applications' relative progress count as equal, so the
    /// speed-ratio criterion can act (spec 02 leaves it OPEN). 0.05 = within 5 % of the slowest.
    pub progress_tolerance: f64,
    /// Beyond the paper (`hdas-hetero`): a mixed application gets a core only while its CPU task
    /// would end before the accelerators could reach it ([`gpu_backlogs`]).
    /// Off in `hdas`, which is Algorithm 1 as published.
    pub completion_aware: bool,
    /// Eq. (3) counts each of the node's `#IOtask` readers with at most one split
    /// ([`super::predict::contending_bytes`]). Off by default: `docs/results/hdas.md` gives the
    /// measured effect.
    pub cap_by_io_tasks: bool,
}

impl Default for HdasConfig {
    fn default() -> Self {
        Self {
            progress_tolerance: 0.05,
            completion_aware: false,
            cap_by_io_tasks: true,
        }
    }
}

/// Heterogeneous dynamic affinity scheduling.
#[derive(Debug)]
pub struct Hdas {
    config: HdasConfig,
    /// Per application: its GPU backlog at the start of the current heartbeat (`hdas-hetero`
    /// only; see [`gpu_backlogs`]).
    backlog: GpuBacklogs,
    /// Per application: whether its GPU variant can run on some live node (`hdas-hetero` only).
    feasible: Vec<bool>,
    /// (nodes, applications, live capacity, attributes generation) when `feasible` was computed.
    feasible_for: Option<(usize, usize, crate::model::Resources, u64)>,
    /// `hdas-hetero` only: the fluid optimum of the work pending when it was made.
    plan: Option<Plan>,
    /// (applications, pending applications, live capacity, placement generation) when `plan`
    /// was made, or last found to stand ([`Plan::outdated_by`]).
    plan_for: Option<(usize, usize, crate::model::Resources, u64)>,
    /// The heartbeat being handled.
    now: Time,
    /// `hdas-hetero` only, per node (by index): the readers its heartbeats reported (`#IOtask`),
    /// as decayed sums ([`Readers`]).
    readers: Vec<Readers>,
    /// `hdas-hetero` only, per node: when the policy last handled its heartbeat.
    last_beat: Vec<Option<Time>>,
    /// `hdas-hetero` only: the heartbeat interval as measured — the shortest gap between two
    /// heartbeats of one node that the policy handled (nodes with nothing free are not brought to
    /// it, so gaps are whole multiples of the interval). `None` before any node beat twice.
    beat: Option<Time>,
}

/// What a node's heartbeats said about its disk: decayed sums over the heartbeats the policy saw
/// of 1, `k` and `k²`, `k` the `#IOtask` reported. `Σk² / Σk` is the mean number of tasks a
/// reading task shares the disk with (each of the `k` readers of a heartbeat sees `k`), so the
/// factor by which a read lasts longer than alone under processor sharing: the measured stretch
/// `hdas-hetero`'s plan uses for that node's reads.
#[derive(Clone, Copy, Debug, Default)]
struct Readers {
    beats: f64,
    sum: f64,
    sum_sq: f64,
}

/// Weight each new heartbeat keeps of the ones before (a memory of about 50 heartbeats, so the
/// measured stretch follows a change in the mix of applications).
const READERS_DECAY: f64 = 0.98;

/// Heartbeats (decayed) a group needs before its measured stretch replaces the predicted one.
const READERS_MIN_BEATS: f64 = 10.0;

/// A measured read stretch this much (relative) above the one the plan assumed makes a new plan.
const STRETCH_DRIFT: f64 = 0.25;

/// Share of its course a plan runs before a measured stretch may replace it.
const DRIFT_MIN_PACE: f64 = 0.1;

/// Share of the applications planned that must have drained or arrived (together) before a
/// change of the pending set makes a new plan ([`Plan::outdated_by`]; see the module doc). With
/// fewer than 32 applications planned, any change does, as before this threshold existed.
const REPLAN_CHANGE: f64 = 1.0 / 16.0;

impl Readers {
    fn record(&mut self, k: u32) {
        let k = f64::from(k);
        self.beats = self.beats * READERS_DECAY + 1.0;
        self.sum = self.sum * READERS_DECAY + k;
        self.sum_sq = self.sum_sq * READERS_DECAY + k * k;
    }
}

/// The measured read stretch over `nodes` (see [`Readers`]), once they have reported
/// [`READERS_MIN_BEATS`] heartbeats.
fn measured_stretch(readers: &[Readers], nodes: &[NodeId]) -> Option<f64> {
    let total =
        nodes
            .iter()
            .filter_map(|n| readers.get(n.index()))
            .fold(Readers::default(), |t, r| Readers {
                beats: t.beats + r.beats,
                sum: t.sum + r.sum,
                sum_sq: t.sum_sq + r.sum_sq,
            });
    if total.beats < READERS_MIN_BEATS {
        return None;
    }
    Some(if total.sum > 0.0 {
        (total.sum_sq / total.sum).max(1.0)
    } else {
        1.0
    })
}

/// The fluid optimum (`bound::fluid_plan`) of the work pending at `start`, which `hdas-hetero`
/// follows at an even pace, **per group of nodes**: by time `t`, the nodes of group `g` should have
/// started `planned[g, a, v] · (t − start) / makespan` of application `a`'s `v` tasks since
/// `start`. Following the split per group (not only in total) is what keeps each node's disk
/// loaded in proportion to its bandwidth: the optimum sends the IO-heavy applications to the fast
/// disks and the IO-light ones to the slow disks.
#[derive(Clone, Debug)]
struct Plan {
    start: Time,
    makespan: f64,
    /// Per node (by index): its group in `planned`, `usize::MAX` if none (a node that joined later).
    group_of: Vec<usize>,
    /// The applications planned, in id order: those pending when the plan was made (not
    /// every application ever added: a server keeps ended ones).
    apps: Vec<AppId>,
    /// Per group, per application (by its place in `apps`): planned (GPU, CPU) tasks.
    planned: Vec<Vec<(f64, f64)>>,
    /// Per group: its nodes, and the read stretch the plan assumed there.
    groups: Vec<(Vec<NodeId>, f64)>,
    /// Per group, per application: (GPU, CPU) tasks started there since `start`.
    started: Vec<Vec<(u32, u32)>>,
}

impl Plan {
    /// How far `a` is behind the plan on `variant` at `now` on `node`'s group, in seconds of work:
    /// positive when it should get more there (0 for a node outside the plan).
    fn behind(&self, a: &crate::model::AppState, variant: Variant, node: NodeId, now: Time) -> f64 {
        let Some(&g) = self.group_of.get(node.index()) else {
            return 0.0;
        };
        let Ok(i) = self.apps.binary_search(&a.app.id) else {
            return 0.0;
        };
        let (Some(planned), Some(started)) = (
            self.planned.get(g).and_then(|p| p.get(i)),
            self.started.get(g).and_then(|p| p.get(i)),
        ) else {
            return 0.0;
        };
        let (planned, done, task) = match variant {
            Variant::Gpu => (planned.0, started.0, a.app.gpu_base_time()),
            Variant::Cpu => (planned.1, started.1, a.app.cpu_base_time()),
        };
        (planned * self.pace(now) - f64::from(done)) * task.unwrap_or(0) as f64 / 1e9
    }

    /// Share of the plan due by `now` (1 once the plan's makespan has passed).
    fn pace(&self, now: Time) -> f64 {
        ((now.saturating_sub(self.start) as f64 / 1e9 + 1.0) / self.makespan.max(1.0)).min(1.0)
    }

    /// Whether the plan's makespan has passed: the work left is then re-planned.
    fn expired(&self, now: Time) -> bool {
        now.saturating_sub(self.start) as f64 / 1e9 > self.makespan.max(1.0)
    }

    /// Whether the pending set moved far enough from the one planned to make a new plan: the
    /// applications planned that no longer wait plus those that wait unplanned (arrived since,
    /// or waiting again) number at least [`REPLAN_CHANGE`] of the applications planned, and at
    /// least one. Below `2 / REPLAN_CHANGE` applications planned, any change. O(q log q) for
    /// the q applications that wait; called only when their count or the applications' changed.
    fn outdated_by(&self, view: &SchedulerView) -> bool {
        let (mut planned, mut unplanned) = (0usize, 0usize);
        for a in view.pending_apps().filter(|a| !a.app.is_multi_node()) {
            if self.apps.binary_search(&a.app.id).is_ok() {
                planned += 1;
            } else {
                unplanned += 1;
            }
        }
        let moved = (self.apps.len() - planned) + unplanned;
        let needed = ((self.apps.len() as f64 * REPLAN_CHANGE).floor() as usize).max(1);
        moved >= needed
    }

    /// Counts a task of `app` started as `variant` on `node`.
    fn record(&mut self, app: AppId, variant: Variant, node: NodeId) {
        let (Some(&g), Ok(i)) = (
            self.group_of.get(node.index()),
            self.apps.binary_search(&app),
        ) else {
            return;
        };
        if let Some(s) = self.started.get_mut(g).and_then(|s| s.get_mut(i)) {
            match variant {
                Variant::Gpu => s.0 += 1,
                Variant::Cpu => s.1 += 1,
            }
        }
    }
}

/// Relative tolerance for "equal" predicted delays: predictions are sums of f64 nanoseconds.
const DELAY_EPSILON: f64 = 1e-9;

fn approx_cmp(a: f64, b: f64, rel: f64) -> Ordering {
    if (a - b).abs() <= rel * a.abs().max(b.abs()) {
        Ordering::Equal
    } else {
        a.total_cmp(&b)
    }
}

/// A GPU candidate's sort key (smaller is better).
struct GpuKey {
    delay: f64,
    /// `hdas-hetero` only: minus the core-time one GPU task saves (predicted CPU over GPU time);
    /// 0 in `hdas`.
    neg_advantage: f64,
    /// Relative tolerance within which two delays count as equal.
    tolerance: f64,
    gpu_dispatched: u32,
    not_gpu_only: bool,
    start: Time,
    app: AppId,
}

/// A CPU candidate.
struct CpuCandidate {
    /// `hdas-hetero`: seconds of CPU work behind the plan on this node's group **once this task
    /// is started** (behind the plan now, minus the task's predicted time on this node's core);
    /// 0 in `hdas`.
    behind_after: f64,
    progress: f64,
    /// Predicted CPU speed over best speed alone (higher is better).
    speed_ratio: f64,
    not_cpu_only: bool,
    start: Time,
    app: AppId,
}

impl Hdas {
    /// HDAS with `config`.
    pub fn new(config: HdasConfig) -> Self {
        Self {
            config,
            backlog: GpuBacklogs::default(),
            plan: None,
            plan_for: None,
            now: 0,
            readers: Vec::new(),
            last_beat: Vec::new(),
            beat: None,
            feasible: Vec::new(),
            feasible_for: None,
        }
    }

    /// Step 1: the GPU-capable application at `level` whose next GPU task on `node` is least
    /// delayed relative to its GPU_base task.
    pub fn pick_gpu(&self, view: &SchedulerView, node: NodeId, level: i64) -> Option<AppId> {
        let n = view.node(node);
        let mut keys: Vec<GpuKey> = Vec::new();
        for a in view.pending_apps() {
            if view.level(a) != level || !view.fits(a.app.id, node, Variant::Gpu) {
                continue;
            }
            let (Some(predicted), Some(base)) = (
                gpu_task_time(&a.app, n, self.config.cap_by_io_tasks),
                a.app.gpu_base_time(),
            ) else {
                continue;
            };
            // hdas-hetero: delays within the progress tolerance of the least delayed count as
            // equal, and then the GPU goes to the application whose task it speeds up most
            // against a core (on an idle disk every delay is 1.0, and "fewest GPU tasks" would
            // alternate applications whatever they gain).
            // The delay is measured against the task alone on this very device, so a slow
            // accelerator does not pass for a contended disk (with accelerators of different
            // speeds, `hdas` would otherwise hand slow devices to IO-heavy applications).
            let (tolerance, neg_advantage, base) = if self.config.completion_aware {
                let cpu = cpu_task_time(&a.app, n, self.config.cap_by_io_tasks);
                (
                    self.config.progress_tolerance,
                    cpu.map_or(f64::NEG_INFINITY, |c| -(c / predicted.max(1.0))),
                    gpu_time_alone(&a.app, n).unwrap_or(base as f64),
                )
            } else {
                (DELAY_EPSILON, 0.0, base as f64)
            };
            keys.push(GpuKey {
                tolerance,
                neg_advantage,
                delay: predicted / base.max(1.0),
                gpu_dispatched: a.dispatched_gpu,
                not_gpu_only: a.need != Need::GpuOnly,
                start: a.app.submit_time,
                app: a.app.id,
            });
        }
        if let (true, Some(plan)) = (self.config.completion_aware, self.plan.as_ref()) {
            // hdas-hetero: the application furthest behind the fluid optimum's GPU share, among
            // those whose predicted delay is within the tolerance of the least delayed.
            let least = keys.iter().map(|k| k.delay).min_by(f64::total_cmp)?;
            let behind = |k: &GpuKey| plan.behind(view.app(k.app), Variant::Gpu, node, self.now);
            return keys
                .into_iter()
                .filter(|k| k.delay <= least * (1.0 + 4.0 * k.tolerance))
                .map(|k| (behind(&k), k))
                .min_by(|(bx, x), (by, y)| {
                    by.total_cmp(bx)
                        .then(x.delay.total_cmp(&y.delay))
                        .then(x.neg_advantage.total_cmp(&y.neg_advantage))
                        .then(x.app.cmp(&y.app))
                })
                .map(|(_, k)| k.app);
        }
        let least = keys.iter().map(|k| k.delay).min_by(f64::total_cmp)?;
        keys.into_iter()
            .filter(|k| approx_cmp(k.delay, least, k.tolerance) != Ordering::Greater)
            .min_by(|x, y| {
                x.neg_advantage
                    .total_cmp(&y.neg_advantage)
                    .then(x.gpu_dispatched.cmp(&y.gpu_dispatched))
                    .then(x.not_gpu_only.cmp(&y.not_gpu_only))
                    .then(x.start.cmp(&y.start))
                    .then(x.app.cmp(&y.app))
            })
            .map(|k| k.app)
    }

    /// Step 2: the CPU-capable application at `level` to receive `node`'s next core.
    pub fn pick_cpu(
        &self,
        view: &SchedulerView,
        node: NodeId,
        level: i64,
        now: Time,
    ) -> Option<AppId> {
        let n = view.node(node);
        let mut candidates = Vec::new();
        for a in view.pending_apps() {
            if view.level(a) != level || !view.fits(a.app.id, node, Variant::Cpu) {
                continue;
            }
            let (Some(cpu_base), Some(best_alone), Some(predicted)) = (
                a.app.cpu_base_time(),
                a.app.best_base_time(),
                cpu_task_time(&a.app, n, self.config.cap_by_io_tasks),
            ) else {
                continue;
            };
            // Eq. (6): dispatched (not completed) tasks, so applications of many short tasks
            // are not favoured.
            let progress = a.dispatched() as f64 * cpu_base as f64
                / elapsed_since(now, a.app.submit_time) as f64;
            // hdas-hetero: how far behind its plan the application would be once this core's
            // task is started. A start commits the core for the whole task, so a long task the
            // plan does not ask for (BP's 900 s on a group where the plan runs BP on GPUs only)
            // would put its application far ahead of the plan, and a short one (Kmeans's 40 s)
            // barely: ranking by "behind" before the start made an application the plan gives
            // nothing (behind 0) win a core from every application a task ahead of its even
            // pace (behind < 0) — which all of them are, right after their cores are filled.
            let behind_after = match (self.config.completion_aware, self.plan.as_ref()) {
                (true, Some(plan)) => plan.behind(a, Variant::Cpu, node, now) - predicted / 1e9,
                _ => 0.0,
            };
            // hdas-hetero: a mixed application whose GPU variant can run somewhere gets no core
            // when its CPU task would end after the accelerators could have run it.
            let gated = self.config.completion_aware
                && a.need == Need::Mixed
                && self
                    .feasible
                    .get(a.app.id.index())
                    .copied()
                    .unwrap_or(false)
                && predicted > self.backlog.of(a.app.id);
            if gated {
                continue;
            }
            candidates.push(CpuCandidate {
                behind_after,
                progress,
                // speed = V / T, so the ratio of speeds is the inverse ratio of times.
                speed_ratio: best_alone as f64 / predicted.max(1.0),
                not_cpu_only: a.need != Need::CpuOnly,
                start: a.app.submit_time,
                app: a.app.id,
            });
        }
        if self.config.completion_aware && self.plan.is_some() {
            // hdas-hetero: the application that would be furthest behind the plan's CPU share
            // once the task is started first (least ahead of it, when all are ahead).
            return candidates
                .into_iter()
                .min_by(|x, y| {
                    y.behind_after
                        .total_cmp(&x.behind_after)
                        .then(x.progress.total_cmp(&y.progress))
                        .then(x.app.cmp(&y.app))
                })
                .map(|c| c.app);
        }
        let slowest = candidates
            .iter()
            .map(|c| c.progress)
            .min_by(f64::total_cmp)?;
        let bound = slowest + self.config.progress_tolerance * slowest.abs();
        candidates
            .into_iter()
            .filter(|c| c.progress <= bound)
            .min_by(|x, y| {
                y.speed_ratio
                    .total_cmp(&x.speed_ratio)
                    .then(x.not_cpu_only.cmp(&y.not_cpu_only))
                    .then(x.start.cmp(&y.start))
                    .then(x.app.cmp(&y.app))
            })
            .map(|c| c.app)
    }
}

/// Whether some live node could ever run a GPU task of `app` (capacity, accelerator kind and the
/// attributes it `requires`).
fn gpu_feasible(view: &SchedulerView, app: &crate::model::AppState) -> bool {
    let Some(g) = app.app.gpu.as_ref() else {
        return false;
    };
    view.nodes().iter().any(|n| {
        let devices = n
            .node
            .accelerators
            .iter()
            .filter(|acc| g.kind.as_deref().is_none_or(|k| acc.kind == k))
            .count();
        n.alive
            && n.node.has_attributes(&app.app.requires)
            && n.node.capacity().fits(&g.request)
            && devices as u32 >= g.request.gpus
    })
}

/// Per application `a`, how long (ns) before the accelerators could have run `a`'s next task: the
/// pending GPU work of every application whose GPU advantage (CPU_base / GPU_base, the order in
/// which `hdas-hetero` hands out GPUs) is at least `a`'s (within `tolerance`), `a` included, at the
/// cluster's mean device speed over all its devices — and no less than the time the disks of the
/// nodes with accelerators need to read those tasks' inputs after what they are reading now
/// (`TotalIO`). A CPU task of `a` that
/// would take longer than this finishes after a GPU could have finished the same task: it becomes
/// the straggler `hdas-hetero` avoids. Applications whose GPU variant fits no node (`feasible`
/// false) get infinity: nothing to wait for.
pub fn gpu_backlogs(view: &SchedulerView, feasible: &[bool], tolerance: f64) -> GpuBacklogs {
    gpu_backlogs_between_beats(view, feasible, tolerance, 0.0)
}

/// Each application's GPU backlog ([`gpu_backlogs`]): held for the applications with pending
/// GPU work that can wait for a GPU, infinity for every other — so a heartbeat costs what waits,
/// not every application the view ever held.
#[derive(Clone, Debug, Default)]
pub struct GpuBacklogs {
    /// (application index, backlog in ns), sorted by application index.
    by_app: Vec<(usize, f64)>,
}

impl GpuBacklogs {
    /// Application `app`'s backlog, ns (infinity: nothing to wait for).
    pub fn of(&self, app: AppId) -> f64 {
        self.by_app
            .binary_search_by_key(&app.index(), |&(a, _)| a)
            .map_or(f64::INFINITY, |i| self.by_app[i].1)
    }
}

/// [`gpu_backlogs`] when an accelerator that finishes a task gets its next one only on its node's
/// next heartbeat, `beat_ns` apart: each GPU task then holds its device `beat_ns / 2` longer on
/// average (the wait from a finish at a random moment to the next beat). With 5 s heartbeats and
/// RS's 12 s GPU tasks that is a fifth more GPU time than the profile says; without it, the gate
/// keeps cores idle near the end, believing the accelerators will be done sooner than they can.
pub fn gpu_backlogs_between_beats(
    view: &SchedulerView,
    feasible: &[bool],
    tolerance: f64,
    beat_ns: f64,
) -> GpuBacklogs {
    let gpus = view.totals().gpus;
    if gpus == 0 {
        return GpuBacklogs::default();
    }
    let speed = view.mean_device_speed().max(f64::MIN_POSITIVE);
    let mut disk_bw = 0.0;
    let mut in_flight = 0.0;
    // A GPU task reads its split from the disk of the node whose accelerator runs it: only the
    // disks of nodes with accelerators bound how soon the GPUs can have read the queue. Counting
    // the other nodes' disks too made a CPU-only node's fast disk shorten the backlog, and the
    // gate then kept IO-heavy tasks off those nodes' cores while the accelerators queued behind
    // their own slow disk (#772 of sweep seed 6).
    for n in view
        .nodes()
        .iter()
        .filter(|n| n.alive && !n.node.accelerators.is_empty())
    {
        disk_bw += n.node.disk_read_bw;
        in_flight += n.total_io_bytes;
    }
    // (application, advantage, GPU work ns, bytes) of every application that can wait for a GPU.
    let mut queue: Vec<(usize, f64, f64, f64)> = view
        .pending_apps()
        .filter(|a| feasible.get(a.app.id.index()).copied().unwrap_or(false))
        .filter_map(|a| {
            let g = a.app.gpu.as_ref()?;
            let task = g.compute as f64 / speed + g.copy as f64 + g.read as f64 + beat_ns / 2.0;
            let advantage = a
                .app
                .cpu_base_time()
                .map_or(f64::INFINITY, |c| c as f64 / task.max(1.0));
            let pending = a.pending.len() as f64;
            Some((
                a.app.id.index(),
                advantage,
                pending * task * g.request.gpus.max(1) as f64,
                pending * a.app.split_bytes as f64,
            ))
        })
        .collect();
    // Each application counts the work of those whose advantage is at least its own (less the
    // tolerance): with the queue in decreasing advantage, a prefix of it, whose sums are kept
    // as the queue is walked — O(q log q) a beat, not O(q²).
    queue.sort_by(|a, b| b.1.total_cmp(&a.1));
    let mut prefix = Vec::with_capacity(queue.len() + 1);
    prefix.push((0.0, 0.0));
    let (mut work, mut bytes) = (0.0, 0.0);
    for &(_, _, w, b) in &queue {
        work += w;
        bytes += b;
        prefix.push((work, bytes));
    }
    let mut by_app: Vec<(usize, f64)> = queue
        .iter()
        .map(|&(app, advantage, _, _)| {
            let threshold = advantage * (1.0 - tolerance);
            let counted = queue.partition_point(|&(_, other, _, _)| other >= threshold);
            let (work, bytes) = prefix[counted];
            let disk = if disk_bw > 0.0 {
                (in_flight + bytes) / disk_bw * crate::time::NANOS_PER_SEC as f64
            } else {
                0.0
            };
            (app, (work / gpus as f64).max(disk))
        })
        .collect();
    by_app.sort_unstable_by_key(|&(app, _)| app);
    GpuBacklogs { by_app }
}

impl Hdas {
    /// Refreshes which applications' GPU variants can run anywhere, when the cluster or the set
    /// of applications changed since the last heartbeat (O(apps × nodes) then, O(1) otherwise).
    fn refresh_plan(&mut self, view: &SchedulerView, now: Time) {
        // A node's attributes or an application's request changing (`hetsched update`) moves the
        // placement generation: where the work may run, and what it takes, are not what the
        // plan assumed.
        let signature = (
            view.app_count(),
            view.pending_apps().count(),
            view.totals(),
            view.placement_generation(),
        );
        // Re-planned when the pending set changes materially (`Plan::outdated_by`), when the
        // cluster or a request changes, when the plan's makespan has passed (the run is
        // slower than the fluid optimum: heartbeats, contention, noise), and when a group's
        // disk is measured to stretch reads [`STRETCH_DRIFT`] more than the plan assumed (the
        // plan's core time is then too short) — not before the plan has run
        // [`DRIFT_MIN_PACE`] of its course, so that a run is not re-planned at every heartbeat
        // while the measurements settle (each new plan starts its pacing afresh).
        let expired = self.plan.as_ref().is_some_and(|p| p.expired(now));
        let drifted = self.plan.as_ref().is_some_and(|p| {
            p.pace(now) >= DRIFT_MIN_PACE
                && p.groups.iter().any(|(nodes, assumed)| {
                    measured_stretch(&self.readers, nodes)
                        .is_some_and(|m| m > assumed.max(1.0) * (1.0 + STRETCH_DRIFT))
                })
        });
        if !expired && !drifted {
            match self.plan_for {
                Some(known) if known == signature => return,
                // Only the pending set moved, and by less than [`REPLAN_CHANGE`] of the
                // applications planned: the plan stands (see the module doc). The signature is
                // noted so that the set is compared again only at its next change.
                Some((_, _, totals, generation))
                    if (totals, generation) == (signature.2, signature.3)
                        && self.plan.as_ref().is_some_and(|p| !p.outdated_by(view)) =>
                {
                    self.plan_for = Some(signature);
                    return;
                }
                _ => {}
            }
        }
        self.plan_for = Some(signature);
        // Multi-node tasks are not the policy's to place (the runtime gathers their nodes).
        let pending: Vec<crate::model::Application> = view
            .pending_apps()
            .filter(|a| !a.app.is_multi_node())
            .map(|a| crate::model::Application {
                tasks: a.pending.len() as u32,
                ..a.app.clone()
            })
            .collect();
        let refs: Vec<&crate::model::Application> = pending.iter().collect();
        let nodes = view.nodes().iter().filter(|n| n.alive).map(|n| &n.node);
        let apps: Vec<AppId> = pending.iter().map(|a| a.id).collect();
        let readers = &self.readers;
        let observed = |ids: &[NodeId]| measured_stretch(readers, ids);
        self.plan = super::bound::contended_plan(nodes, &refs, &observed)
            .ok()
            .map(|p| {
                let mut group_of = vec![usize::MAX; view.nodes().len()];
                let mut planned = vec![vec![(0.0, 0.0); apps.len()]; p.groups.len()];
                for (g, group) in p.groups.iter().enumerate() {
                    for n in &group.nodes {
                        if let Some(slot) = group_of.get_mut(n.index()) {
                            *slot = g;
                        }
                    }
                    for (i, slot) in planned[g].iter_mut().enumerate() {
                        *slot = (group.gpu_tasks[i], group.cpu_tasks[i]);
                    }
                }
                Plan {
                    start: now,
                    makespan: p.makespan_s,
                    groups: p
                        .groups
                        .iter()
                        .map(|g| (g.nodes.clone(), g.read_stretch))
                        .collect(),
                    group_of,
                    started: vec![vec![(0, 0); apps.len()]; planned.len()],
                    planned,
                    apps,
                }
            });
    }

    fn refresh_feasible(&mut self, view: &SchedulerView) {
        let signature = (
            view.nodes().len(),
            view.app_count(),
            view.totals(),
            view.placement_generation(),
        );
        match self.feasible_for {
            Some(known) if known == signature => {}
            // Only applications were added (a submission): the new ones alone are looked at,
            // so a server that ran many jobs does not go through all of them again.
            Some((nodes, apps, totals, attributes))
                if (nodes, totals, attributes) == (signature.0, signature.2, signature.3)
                    && apps <= signature.1
                    && self.feasible.len() == apps =>
            {
                self.feasible.resize(signature.1, false);
                for a in view.apps_from(apps) {
                    self.feasible[a.app.id.index()] = gpu_feasible(view, a);
                }
                self.feasible_for = Some(signature);
            }
            _ => {
                // Retired applications (purged jobs) read as infeasible: they wait for nothing.
                self.feasible = vec![false; signature.1];
                for a in view.apps() {
                    self.feasible[a.app.id.index()] = gpu_feasible(view, a);
                }
                self.feasible_for = Some(signature);
            }
        }
    }
}

impl BatchPolicy for Hdas {
    fn name(&self) -> &'static str {
        if self.config.completion_aware {
            "hdas-hetero"
        } else {
            "hdas"
        }
    }

    fn on_node_update(
        &mut self,
        view: &mut SchedulerView,
        node: NodeId,
        now: Time,
    ) -> Vec<Assignment> {
        let mut out = Vec::new();
        self.now = now;
        if self.config.completion_aware {
            if self.readers.len() < view.nodes().len() {
                self.readers.resize(view.nodes().len(), Readers::default());
            }
            if let Some(r) = self.readers.get_mut(node.index()) {
                r.record(view.node(node).io_tasks);
            }
            if self.last_beat.len() < view.nodes().len() {
                self.last_beat.resize(view.nodes().len(), None);
            }
            if let Some(last) = self.last_beat.get_mut(node.index()) {
                if let Some(gap) = last.and_then(|t| now.checked_sub(t)).filter(|&g| g > 0) {
                    self.beat = Some(self.beat.map_or(gap, |b| b.min(gap)));
                }
                *last = Some(now);
            }
            self.refresh_plan(view, now);
            self.refresh_feasible(view);
            self.backlog = gpu_backlogs_between_beats(
                view,
                &self.feasible,
                self.config.progress_tolerance,
                self.beat.map_or(0.0, |b| b as f64),
            );
        }
        for level in view.pending_levels() {
            if self.config.completion_aware {
                // hdas-hetero counts each start against its node group's plan as it goes.
                for variant in [Variant::Gpu, Variant::Cpu] {
                    loop {
                        let pick = match variant {
                            Variant::Gpu => self.pick_gpu(view, node, level),
                            Variant::Cpu => self.pick_cpu(view, node, level, now),
                        };
                        let Some(a) = pick.and_then(|app| view.assign(app, node, variant)) else {
                            break;
                        };
                        if let Some(plan) = self.plan.as_mut() {
                            plan.record(a.app, variant, node);
                        }
                        out.push(a);
                    }
                }
                continue;
            }
            assign_while(view, node, Variant::Gpu, &mut out, |v| {
                self.pick_gpu(v, node, level)
            });
            assign_while(view, node, Variant::Cpu, &mut out, |v| {
                self.pick_cpu(v, node, level, now)
            });
        }
        out
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::model::TaskId;
    use crate::testkit::{app, node};
    use crate::time::secs;

    /// One node of one core, `apps` CPU-only one-task applications of 10 s: each heartbeat starts
    /// one task, which drains one application.
    fn one_core(apps: u32) -> SchedulerView {
        let mut view = SchedulerView::new();
        view.add_node(node("n").cores(1).build(NodeId(0))).unwrap();
        for i in 0..apps {
            let a = app(&format!("a{i}"))
                .tasks(1)
                .split_mib(0)
                .cpu(10.0 + f64::from(i), 0.0)
                .build(AppId(i));
            view.add_application(a, [TaskId(u64::from(i))]).unwrap();
        }
        view
    }

    /// An application arrives, at a lower priority so that the beats keep draining the
    /// planned ones.
    fn add(view: &mut SchedulerView) {
        let i = view.app_count() as u32;
        let a = app(&format!("a{i}"))
            .tasks(1)
            .split_mib(0)
            .cpu(10.0, 0.0)
            .priority(-1)
            .build(AppId(i));
        view.add_application(a, [TaskId(u64::from(i))]).unwrap();
    }

    /// Beats node 0 at `t` seconds, ends what it started, and returns when the plan then in
    /// force was made (seconds).
    fn beat(policy: &mut Hdas, view: &mut SchedulerView, t: f64) -> f64 {
        let got = policy.on_node_update(view, NodeId(0), secs(t));
        assert_eq!(got.len(), 1, "one core, one task");
        for a in &got {
            view.task_finished(a);
        }
        policy.plan.as_ref().unwrap().start as f64 / 1e9
    }

    fn hetero() -> Hdas {
        Hdas::new(HdasConfig {
            completion_aware: true,
            ..HdasConfig::default()
        })
    }

    /// 100 applications planned: the plan stands while fewer than 100 / 16 = 6 of them drained,
    /// and is made again at the sixth; arrivals count the same.
    #[test]
    fn hdas_hetero_replans_only_when_the_pending_set_moved_by_a_sixteenth() {
        let mut view = one_core(100);
        let mut policy = hetero();
        assert_eq!(beat(&mut policy, &mut view, 0.0), 0.0);
        for t in 1..6 {
            // 1..5 drained before this beat's plan check.
            assert_eq!(beat(&mut policy, &mut view, f64::from(t)), 0.0, "beat {t}");
        }
        // 6 drained since the plan of 100.
        assert_eq!(beat(&mut policy, &mut view, 6.0), 6.0);
        assert_eq!(policy.plan.as_ref().unwrap().apps.len(), 94);
        // 94 planned: 5 changes are needed. 3 arrivals and the last beat's drain: not yet.
        for _ in 0..3 {
            add(&mut view);
        }
        assert_eq!(beat(&mut policy, &mut view, 7.0), 6.0);
        // One more drain: 5 changes.
        assert_eq!(beat(&mut policy, &mut view, 8.0), 8.0);
    }

    /// Below 32 applications planned every change of the pending set makes a new plan, as it
    /// always did.
    #[test]
    fn hdas_hetero_replans_a_small_workload_at_every_drain() {
        let mut view = one_core(31);
        let mut policy = hetero();
        for t in 0..5 {
            assert_eq!(beat(&mut policy, &mut view, f64::from(t)), f64::from(t));
        }
        add(&mut view);
        assert_eq!(beat(&mut policy, &mut view, 5.0), 5.0);
    }
}
