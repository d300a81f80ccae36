//! Batch jobs: arrays of independent tasks in applications with a CPU and/or a GPU variant — the
//! job kind of `hetsched submit`.
//!
//! Everything batch-specific lives here: the job file (parsed by the core's shared parser), the
//! applications and their variants, the task rows, the core's [`BatchPolicy`] driving the
//! applications' queues in the [`SchedulerView`](hetsched_core::SchedulerView) (exactly as the
//! simulator drives it), observed run times feeding undeclared profiles, task specs sent once per
//! node, retries, losses and the `max_attempts` bound (and the attempts a node declared dead
//! brings back while their tasks still wait, taken back: [`JobKind::resume`]), the failing-node
//! back-off, resubmission, cancellation, listings, and retention (`batch/retention.rs`). One
//! function per event; the [`JobKind`] impl is the state's entry.

use super::stopping;
use super::{Ctx, JobKind, Kind, Outbox, Read};
use crate::backoff::{Backoff, Change};
use crate::config::ServerConfig;
use crate::metrics::Outcome;
use crate::state::StateError;
use crate::state::prefetch::{AutoQueue, Observed, RunTimes, Setting};
use crate::state::types::{
    AppInfo, BackedOffApp, Dispatch, HeartbeatReport, JobInfo, JobsPage, RunningAttempt,
    RunningTask, Submission, Submitted, TaskCounts, TaskInfo, TaskRef, TaskResult, TaskSpec,
    TasksPage,
};
use crate::store::{
    EndReason, JobRow, PurgedJob, Snapshot, StoreError, StoreReader, TaskRow, TaskState, TaskUsage,
};
use hetsched_core::input::limits;
use hetsched_core::input::workload::{Command, MissingProfile, Workload, parse_workload};
use hetsched_core::model::QueueAdmission;
use hetsched_core::model::Slots;
use hetsched_core::policy::batch::BatchPolicy;
use hetsched_core::policy::batch::preempt::{Candidate, Rules, preempt_on};
use hetsched_core::{
    AppId, Application, Assignment, Node, NodeId, NodeReport, Resources, TaskId, Variant,
};
use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::time::{Duration, Instant};
use tracing::{info, warn};

mod after;
mod corr;
mod multi_node;
mod reason;
mod retention;
mod update;

pub(crate) use retention::{delete_job_rows, delete_task_rows};

pub use crate::jobs::gate::MAX_AFTER;
pub use reason::Capable;
pub use retention::RETENTION_INTERVAL;
pub use update::{Update, Updated};

/// Most tasks one job may have (a typo of `tasks = 4000000000` should not exhaust memory).
pub const MAX_TASKS_PER_JOB: u64 = hetsched_core::input::workload::MAX_JOB_TASKS;

/// Longest submission key accepted.
pub const MAX_SUBMISSION_KEY: usize = 128;

/// Longest working directory a submission may name.
pub const MAX_WORKDIR: usize = 4096;

/// Where an application's spec generation sits in its spec keys (`app × 2 + variant` takes
/// the 33 bits below; the kinds' byte is above [`super::KIND_SHIFT`]).
const GENERATION_SHIFT: u32 = 34;

/// Most spec generations of one application: how many times `hetsched update` may change what
/// its tasks run.
pub const MAX_SPEC_GENERATION: u32 = (1 << (super::KIND_SHIFT - GENERATION_SHIFT)) - 1;

/// The key of application `app`'s variant `v` in `TaskSpec`s and assignments, in the spec's
/// `generation`: agents keep the specs they were sent by key, so a spec that changes after
/// submission (`hetsched update --time-limit`) is sent under a new key.
pub fn spec_key(app: u32, v: Variant, generation: u32) -> u64 {
    (u64::from(generation.min(MAX_SPEC_GENERATION)) << GENERATION_SHIFT)
        | (u64::from(app) * 2 + u64::from(variant_code(v)))
}

fn variant_code(v: Variant) -> u8 {
    match v {
        Variant::Cpu => 0,
        Variant::Gpu => 1,
    }
}

/// A job's applications with how their tasks are numbered (the same at submission and at a
/// restart: see [`retention::AppTasks`]).
fn app_tasks(apps: &[Application], w: &Workload) -> Vec<retention::AppTasks> {
    apps.iter()
        .zip(&w.applications)
        .map(|(a, spec)| retention::AppTasks {
            app: a.id.0,
            tasks: a.tasks,
            indices: spec.indices(),
        })
        .collect()
}

/// What [`Batch::install`] keeps of a job file: each application with what its tasks run, and
/// the file's `name`.
struct Installable {
    apps: Vec<(Application, AppSpec)>,
    name: Option<String>,
}

/// A stored job as a restart installs it.
enum Install {
    /// A job's row and its file, parsed (boxed: a restart holds one entry per stored job,
    /// and most are purged ones).
    Parsed(Box<(JobRow, Installable)>),
    /// A purged job, not parsed: where its application and task ids start, and end.
    Retired(PurgedJob, (u32, u64)),
}

/// What an application's entry of a job file says beyond its [`Application`].
struct AppSpec {
    retries: u32,
    cpu: Option<VariantRun>,
    gpu: Option<VariantRun>,
    workdir: Option<String>,
    streams: [String; 2],
    pin: bool,
    files: (Vec<String>, Vec<String>, String),
    entries: Option<Vec<String>>,
    accelerator: hetsched_core::model::application::AcceleratorNeed,
}

impl Installable {
    /// The applications `apps` of job file `w`, with what install keeps of each entry.
    fn new(w: &Workload, apps: Vec<Application>) -> Self {
        // The CPU and GPU variants are two types with these fields.
        macro_rules! run {
            ($v:expr) => {{
                let v = $v;
                v.command.clone().map(|command| VariantRun {
                    command,
                    env: v.env.clone(),
                    time_limit_ms: v.time_limit.map_or(0, |d| d.0 / 1_000_000),
                    memory_bytes: v.memory.as_u64(),
                    kill_grace_ms: v.kill_grace.map_or(0, |d| d.0.div_ceil(1_000_000)),
                    warn: v.signal,
                    declared: v.compute.is_some(),
                })
            }};
        }
        let apps = apps
            .into_iter()
            .zip(&w.applications)
            .map(|(app, spec)| {
                let accelerator = spec.accelerator_need();
                let kept = AppSpec {
                    retries: *spec.retries.get_ref(),
                    cpu: spec.cpu.as_ref().and_then(|c| run!(c.get_ref())),
                    gpu: spec.gpu.as_ref().and_then(|g| run!(g.get_ref())),
                    workdir: spec.workdir.as_ref().map(|w| w.get_ref().clone()),
                    streams: [&spec.stdout, &spec.stderr]
                        .map(|s| s.as_ref().map(|s| s.get_ref().clone()).unwrap_or_default()),
                    pin: spec.pin,
                    files: (
                        spec.inputs.iter().map(|f| f.get_ref().clone()).collect(),
                        spec.outputs.iter().map(|f| f.get_ref().clone()).collect(),
                        accelerator.as_str().to_string(),
                    ),
                    entries: spec.entries.as_ref().map(|e| e.get_ref().clone()),
                    accelerator,
                };
                (app, kept)
            })
            .collect();
        Installable {
            apps,
            name: w.name.clone(),
        }
    }
}

fn variant_of(code: Option<u8>) -> Variant {
    if code == Some(1) {
        Variant::Gpu
    } else {
        Variant::Cpu
    }
}

/// `prefetch = "auto"`'s admission to a node's queue during one decision
/// ([`hetsched_core::model::QueueAdmission`]): a task placed on a free core of a variant
/// measured short lets the queue drain through its cores; a queued one must be of a variant
/// measured short and fit what the queue may still take ([`AutoQueue`]).
struct AutoAdmission {
    queue: AutoQueue,
    /// What the CPU and GPU variants of each waiting application with a variant measured short
    /// measured, by application id; an application not here may not be queued.
    run_times: BTreeMap<u32, [RunTimes; 2]>,
}

impl QueueAdmission for AutoAdmission {
    fn admit(&mut self, app: AppId, variant: Variant, cores: u32, queued: bool) -> bool {
        let rt = self
            .run_times
            .get(&app.0)
            .map_or_else(RunTimes::default, |r| r[variant_code(variant) as usize]);
        if !queued {
            if rt.short() {
                self.queue.drain_through(cores);
            }
            return true;
        }
        self.queue.admit(rt, cores)
    }
}

/// What one variant of an application runs.
#[derive(Clone, Debug)]
struct VariantRun {
    command: Command,
    env: BTreeMap<String, String>,
    time_limit_ms: u64,
    /// Memory one task declared, bytes (0 = none): its agent enforces it.
    memory_bytes: u64,
    /// The variant's kill grace, ms (0 = its agent's).
    kill_grace_ms: u64,
    /// The variant's `signal`: sent that long before the time limit.
    warn: Option<hetsched_core::input::WarnSignal>,
    /// Whether the job file declared a profile (else the server learns one).
    declared: bool,
}

#[derive(Debug)]
struct AppRec {
    job: u64,
    name: String,
    split_bytes: u64,
    first_task: u64,
    tasks: u32,
    /// How many failed attempts of one task run again.
    retries: u32,
    cpu: Option<VariantRun>,
    gpu: Option<VariantRun>,
    observed: [Observed; 2],
    /// The application's `workdir =`, if any (relative to the job's working directory).
    workdir: Option<String>,
    /// Its `stdout =` and `stderr =` (empty: captured by the agent).
    streams: [String; 2],
    /// Its `pin`.
    pin: bool,
    /// Declared `inputs`, `outputs` and `accelerator` (spec 01), sent in its task specs.
    files: (Vec<String>, Vec<String>, String),
    /// Its tasks' entries in task order (`entries`, `submit --each-line`), sent with each
    /// dispatch.
    entries: Option<Vec<String>>,
    /// Its tasks by state (pending, running, succeeded, failed, cancelled), kept as tasks move
    /// ([`moved`]) so that job listings and `GetJob` cost one addition per application, not a
    /// scan of the job's rows.
    counts: [u64; 5],
    /// What its tasks' latest finished attempts used, kept as results arrive.
    used: Used,
    /// The node attributes its tasks require (`requires`).
    requires: Vec<String>,
    /// The most of its tasks that may run at once (0: no limit).
    max_running: u32,
    /// Whole nodes each task holds (1: an ordinary task; see [`multi_node`]).
    nodes: u32,
    /// Its scheduling priority (its job file's, or `hetsched update`'s).
    priority: i32,
    /// The time limit `hetsched update` set over the job file's (ms, 0: none); `None`: the
    /// file's.
    time_limit_update: Option<u64>,
    /// How many times `hetsched update` changed what its tasks run: part of their spec keys.
    spec_generation: u32,
    /// The (cores, memory bytes) of one task of its CPU and GPU variants `hetsched update` set
    /// over the job file's; `None`: the file's.
    request_update: [Option<Resources>; 2],
    /// Whether `hetsched update` set `requires` over the job file's.
    requires_updated: bool,
    /// The accelerator kind of its GPU variant `hetsched update --gpu-kind` set over the job
    /// file's (empty: any); `None`: the file's.
    gpu_kind_update: Option<String>,
}

/// Where an application's tasks send their stdout and stderr ([`Batch::streams`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AppStreams {
    /// `stdout =` and `stderr =` (empty: captured by the agent; `none`: discarded; else a path
    /// template, relative ones from `workdir`).
    pub streams: [String; 2],
    /// The directory the tasks run in, when it exists on their node.
    pub workdir: String,
}

/// An application's usage: its tasks' latest finished attempts' CPU time summed and the largest
/// peak memory among them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(super) struct Used {
    /// CPU time, user + system, ms.
    pub cpu_ms: u64,
    /// Peak resident memory, bytes.
    pub max_rss_bytes: u64,
    /// Peak GPU memory, bytes (absent from a summary stored before it: none measured).
    #[serde(default)]
    pub max_gpu_memory_bytes: u64,
}

impl Used {
    /// Over `rows`' recorded usage.
    fn of(rows: &[TaskRow]) -> Used {
        let mut u = Used::default();
        for r in rows.iter().filter_map(|t| t.usage.as_deref()) {
            u.cpu_ms = u.cpu_ms.saturating_add(r.cpu_ms());
            u.max_rss_bytes = u.max_rss_bytes.max(r.max_rss_bytes);
            u.max_gpu_memory_bytes = u.max_gpu_memory_bytes.max(r.max_gpu_memory_bytes);
        }
        u
    }
}

/// Where a state is counted in [`AppRec::counts`].
fn slot(s: TaskState) -> usize {
    match s {
        TaskState::Pending => 0,
        TaskState::Running => 1,
        TaskState::Succeeded => 2,
        TaskState::Failed => 3,
        TaskState::Cancelled => 4,
    }
}

/// One task of application `app` moved from state `from` to `to`.
fn moved(apps: &mut Slots<AppRec>, app: u32, from: TaskState, to: TaskState) {
    if let Some(r) = apps.get_mut(app as usize) {
        r.counts[slot(from)] = r.counts[slot(from)].saturating_sub(1);
        r.counts[slot(to)] += 1;
    }
}

fn to_counts(c: &[u64; 5]) -> TaskCounts {
    TaskCounts {
        pending: c[0],
        running: c[1],
        succeeded: c[2],
        failed: c[3],
        cancelled: c[4],
        queued: 0,
        fetching: 0,
    }
}

#[derive(Debug)]
struct JobRec {
    /// Its row as stored, without its `text`: the job file is in the store, and memory would
    /// hold every file (up to 2 MiB each) for the server's life ([`crate::store::Store::is_job_file`] reads it).
    row: JobRow,
    /// What listings show: the name given at submission, else the file's `name =`, else its path.
    name: String,
    apps: std::ops::Range<u32>,
    tasks: std::ops::Range<u64>,
    /// The length of its file, which the store holds (`max_stored_bytes_per_user`).
    text_bytes: u64,
}

/// The batch job kind.
pub struct Batch {
    policy: Box<dyn BatchPolicy>,
    /// Jobs not purged, in id order (a purged job's id stays taken by its store row and
    /// [`retention::Retention`]'s set).
    jobs: Vec<JobRec>,
    /// Applications by id; a purged job's are retired (8 bytes each).
    apps: Slots<AppRec>,
    /// Task rows held in memory (finished jobs' rows leave it; see [`retention`]).
    tasks: retention::TaskTable,
    /// `max_attempts`: a task lost this many times fails.
    max_attempts: u32,
    /// `preemption = "requeue"`: waiting work of a higher priority that fits nowhere stops
    /// lower-priority tasks ([`Batch::preempt`]).
    preemption: bool,
    /// `preempt_exempt_time`, ns: a task that ran less is not preempted.
    preempt_exempt: u64,
    estimate: u64,
    /// The failing-node back-off (memory only).
    backoff: Backoff,
    /// Finished jobs' summaries and purged jobs (see [`retention`]).
    retention: retention::Retention,
    /// Tasks changed since the last commit.
    dirty: Vec<u64>,
    /// Jobs cancelled since the last commit (a user's cancel and the jobs waiting on it).
    cancelled: Vec<u64>,
    /// Jobs whose tasks wait for the jobs they run after (`submit --after`), or held by a user
    /// (`hetsched hold`; see [`after`]).
    waiting: after::Waiting,
    /// Tasks that wait for other jobs' tasks of the same index (`submit --after-corr`; see
    /// [`corr`]).
    corr: corr::CorrWaits,
    /// Jobs of other kinds (workflows, divisible jobs) that unfinished batch jobs run after, as
    /// the state last told how they stand ([`Batch::foreign_end`]).
    foreign: BTreeMap<u64, after::Foreign>,
    /// The jobs of every kind set aside at a start (`hetsched server --set-aside`), each with
    /// the end the set-aside recorded ([`crate::set_aside::ends`]; read at each start, never
    /// changed while running): what [`Batch::purged_end`] answers for them. The batch kind
    /// keeps them for all kinds since it already answers, for its waiting jobs, how jobs of
    /// every kind stand.
    set_aside: HashMap<u64, super::JobEnd>,
    /// Jobs held or released since the last commit.
    held_changed: Vec<(u64, bool)>,
    /// Jobs whose begin time `hetsched update --begin` moved since the last commit.
    begin_changed: Vec<(u64, Option<u64>)>,
    /// Evicted jobs whose rows came back to memory since the last commit (their stored
    /// summaries are deleted with the rows' changes).
    revived: Vec<u64>,
    /// Multi-node tasks: the gathering of their nodes, and the nodes of those running.
    multi: multi_node::MultiNode,
    /// Whether any application has multi-node tasks (else a heartbeat skips [`multi_node`]).
    any_multi_node: bool,
    /// Applications whose priority or max_running `hetsched update` changed since the last
    /// commit.
    settings_changed: Vec<u32>,
    /// Running tasks that hold a request other than their application's: `hetsched update
    /// --cores --memory --gpus` changed it after they were placed. Each gives its node back
    /// what it holds when it ends ([`Assignment::request`]). Stored in `task_holds`, so a
    /// restart books it again.
    holds: HashMap<u64, Resources>,
    /// Tasks whose entry in `holds` was added or dropped since the last commit.
    holds_changed: Vec<u64>,
    /// The last dispatch's time, ns: each dispatch gets a later one than the one before
    /// ([`Batch::mark_running`]), so that the tasks sent in one reply keep, by their start
    /// times, the order their agent starts them in (its queue's, which preemption reads).
    last_dispatch_ns: u64,
    /// Tasks `resubmit --cancelled` put back and that were cancelled again at once, and the
    /// first one's message ([`Batch::take_recancelled`]).
    recancelled: (u64, String),
    /// Per node, the tasks sent to it `prefetched` (task, attempt), in the order sent, while
    /// they may still wait in its agent's queue: preemption spares them, for they hold no core
    /// (the node's prefetch debt says how many still wait). Pruned at each fill of the node.
    sent_queued: HashMap<u32, VecDeque<(u64, u32)>>,
    /// Tasks cancelled while they ran whose processes their agents have not said ended
    /// ([`stopping`]): their jobs are not over for a wait until none is left.
    stopping: stopping::Stopping,
}

/// Reads a stored batch job's file as a restart does: the file, then its applications (ids from
/// `first_app`; `estimate` ns for a missing profile). A restart and `crate::set_aside` (which
/// sets aside only a job this refuses) share it, so both agree on what no longer reads.
pub(crate) fn read_stored(
    origin: &str,
    text: &str,
    first_app: u32,
    estimate: u64,
) -> Result<(Workload, Vec<Application>), hetsched_core::input::InputError> {
    let w = parse_workload(origin, text)?;
    let apps = w.to_applications(first_app, MissingProfile::Estimate(estimate))?;
    Ok((w, apps))
}

impl Batch {
    /// Rebuilds the batch jobs from the store's snapshot: tasks recorded as running are put back
    /// on their nodes (in the view and the registry) until those nodes' heartbeats confirm or
    /// deny them; finished tasks restore the view's counters and the observed run times.
    pub fn restore(
        config: &ServerConfig,
        snap: Snapshot,
        cx: &mut Ctx,
    ) -> Result<Self, StateError> {
        // Every job's file is parsed first: the applications' sizes say which task rows the
        // store did not need to hold (those still as submitted) for the jobs whose rows are read.
        let finished: HashSet<u64> = snap.finished.iter().map(|f| f.0).collect();
        let summarised = |id: u64| finished.contains(&id) || snap.purged.binary_search(&id).is_ok();
        let estimate = config.profile_estimate.0.max(1);
        let mut parsed = Vec::with_capacity(snap.jobs.len() + snap.purged_jobs.len());
        let mut held = Vec::new();
        // Whole rows and purged jobs' ids, in id order. A purged job is not parsed (the store
        // did not even read its file): the next job's first ids end its ranges. The last job is
        // always a whole row, parsed, purged or not: its sizes say which ids are taken.
        let mut whole = snap.jobs.into_iter().peekable();
        let mut purged = snap.purged_jobs.into_iter().peekable();
        loop {
            let row = match (whole.peek(), purged.peek()) {
                (None, None) => break,
                (Some(w), Some(p)) if p.id < w.id => None,
                (None, Some(_)) => None,
                _ => whole.next(),
            };
            let Some(row) = row else {
                let Some(p) = purged.next() else { break };
                let next = match (whole.peek(), purged.peek()) {
                    (Some(w), Some(q)) if q.id < w.id => Some((q.first_app, q.first_task)),
                    (Some(w), _) => Some((w.first_app, w.first_task)),
                    (None, Some(q)) => Some((q.first_app, q.first_task)),
                    (None, None) => None,
                };
                // The store reads the newest job whole, so a purged one has a next, or (set
                // aside, its file unread) its row says where its ids end.
                let end = next.or(p.end).unwrap_or((p.first_app, p.first_task));
                parsed.push(Install::Retired(p, end));
                continue;
            };
            let (w, mut apps) = read_stored(&row.origin, &row.text, row.first_app, estimate)
                .map_err(|error| StateError::StoredJobUnreadable { job: row.id, error })?;
            for a in &mut apps {
                a.submit_time = row.submitted_ns;
            }
            if !summarised(row.id) {
                held.push((row.first_task, app_tasks(&apps, &w)));
            }
            // What install keeps, not the parsed file: all jobs are read before any is
            // installed, and a store of many jobs would hold every parsed file at once.
            parsed.push(Install::Parsed(Box::new((row, Installable::new(&w, apps)))));
        }
        let mut b = Batch {
            policy: config.policy.build(),
            jobs: Vec::new(),
            apps: Slots::default(),
            tasks: retention::TaskTable::from_touched(snap.tasks, &held)?,
            max_attempts: config.max_attempts.max(1),
            preemption: config.preemption == crate::config::PreemptionMode::Requeue,
            preempt_exempt: config.preempt_exempt_time.0,
            estimate,
            backoff: Backoff::new(
                config.start_failures,
                Duration::from_nanos(config.start_failure_backoff.0),
            ),
            retention: retention::Retention::with_purged(snap.purged),
            dirty: Vec::new(),
            cancelled: Vec::new(),
            revived: Vec::new(),
            waiting: after::Waiting::default(),
            corr: corr::CorrWaits::default(),
            foreign: BTreeMap::new(),
            set_aside: crate::set_aside::ends(cx.store.conn())?,
            held_changed: Vec::new(),
            begin_changed: Vec::new(),
            multi: multi_node::MultiNode::default(),
            any_multi_node: false,
            settings_changed: Vec::new(),
            holds: HashMap::new(),
            holds_changed: Vec::new(),
            last_dispatch_ns: 0,
            recancelled: (0, String::new()),
            sent_queued: HashMap::new(),
            stopping: stopping::Stopping::default(),
        };
        // Every stored application at once (the last job's first; its others come as it is
        // installed).
        let apps = match parsed.last() {
            Some(Install::Parsed(job)) => job.0.first_app as usize + 1,
            Some(Install::Retired(_, (apps_end, _))) => *apps_end as usize,
            None => 0,
        };
        b.apps.reserve_exact(apps);
        cx.view.reserve_applications(apps);
        // Purged jobs get no record.
        let kept = parsed
            .iter()
            .filter(|j| matches!(j, Install::Parsed(job) if !b.retention.is_purged(job.0.id)))
            .count();
        b.jobs.reserve_exact(kept);
        for job in parsed {
            match job {
                Install::Parsed(job) => {
                    let (row, job) = *job;
                    let (id, purged) = (row.id, b.retention.is_purged(row.id));
                    b.install(cx, row, job)?;
                    if purged {
                        b.retire(cx, &[id]);
                    }
                }
                Install::Retired(p, (apps_end, tasks_end)) => {
                    b.install_retired(cx, p, apps_end, tasks_end)?;
                }
            }
        }
        // What `hetsched update` changed, over the job files.
        for set in snap.app_settings {
            if b.apps
                .get(set.app as usize)
                .is_some_and(|r| !b.retention.is_purged(r.job))
            {
                b.apply_settings(cx, &set)?;
            }
        }
        // What running tasks hold since an update changed their request; a row of an attempt
        // that has ended is deleted at the next commit.
        for h in snap.task_holds {
            let id = h.task;
            match b.tasks.get(id as usize) {
                Some(t) if t.state == TaskState::Running && t.attempt == h.attempt => {
                    b.holds.insert(id, h.request);
                }
                _ => b.holds_changed.push(id),
            }
        }
        // Running and finished tasks: take their resources / counters in the view (a running
        // multi-node task all of its nodes).
        let mut multi_nodes = snap.multi_node;
        let mut finished: HashMap<u32, (u32, u32, u32)> = HashMap::new();
        for i in b.tasks.ids() {
            let t = &b.tasks[i as usize];
            match t.state {
                TaskState::Pending => {}
                TaskState::Running => {
                    let a = assignment_of(cx.view, &b.holds, t);
                    match multi_nodes.remove(&t.id) {
                        Some(nodes) => {
                            let ids: Vec<NodeId> = nodes.iter().map(|&n| NodeId(n)).collect();
                            cx.view.restore_multi_node(&a, &ids)?;
                            b.multi.running.insert(t.id, nodes);
                        }
                        None => {
                            cx.nodes.prefetch.restoring_cores(
                                cx.view,
                                a.node,
                                t.id,
                                a.request.cores,
                            );
                            cx.view.restore_running(&a)?;
                        }
                    }
                    cx.nodes.started(a.node, t.id);
                }
                s => {
                    if t.attempt > 0 {
                        let e = finished.entry(t.app).or_default();
                        match variant_of(t.variant) {
                            Variant::Cpu => e.0 += 1,
                            Variant::Gpu => e.1 += 1,
                        }
                        if s == TaskState::Succeeded {
                            e.2 += 1;
                            let (app, v, d) = (
                                t.app,
                                variant_of(t.variant),
                                t.finished_ns.saturating_sub(t.started_ns),
                            );
                            b.observe(cx, app, v, d)?;
                        }
                    }
                }
            }
        }
        for (app, (cpu, gpu, ok)) in finished {
            cx.view.restore_finished(AppId(app), cpu, gpu, ok)?;
        }
        // Stopped tasks whose process end was not reported before the server stopped: still
        // stopping if their node may come back (its first heartbeat says whether the process
        // still runs; [`stopping`]). Before the eviction below, which keeps their jobs' rows.
        for (task, attempt, node) in snap.task_stops {
            if Kind::of(task) != Some(Kind::Batch) {
                continue; // another kind's (`Workflows::restore`)
            }
            let job = b
                .tasks
                .get(task as usize)
                .filter(|t| t.state == TaskState::Cancelled && t.attempt == attempt)
                .and_then(|t| b.apps.get(t.app as usize))
                .map(|r| r.job);
            let live = cx
                .nodes
                .get(node)
                .is_some_and(|r| (r.alive || r.kept_out_awaiting_return) && !r.removed);
            match job {
                Some(job) if live => b.stopping.restore(node, task, attempt, job),
                _ => b.stopping.drop_stored(task),
            }
        }
        b.restore_summaries(cx, snap.finished)?;
        // Jobs that run after others: queued if those completed (before or while the server was
        // away), else still waiting.
        b.settle_waiting(cx)?;
        if let Err(e) = b.evict_finished(cx.store) {
            warn!("finished jobs stay in memory: storing their summaries failed: {e}");
        }
        b.restore_backoffs(cx)?;
        Ok(b)
    }

    /// Keeps the memory-only back-off of `old` (the kind before a rollback) and applies its
    /// exclusions to the rebuilt view.
    pub fn carry_over(&mut self, old: &mut Batch, view: &mut hetsched_core::SchedulerView) {
        self.backoff = std::mem::take(&mut old.backoff);
        let excluded: Vec<(u32, u32)> = self.backoff.all().map(|(k, _)| k).collect();
        for (app, node) in excluded {
            view.set_excluded(AppId(app), NodeId(node), true);
        }
    }

    /// Records (`on`) or deletes a back-off of `app` on `node` in the store, so a restart keeps
    /// it. Advisory: a failed write is logged, not fatal (the back-off holds in memory).
    fn store_backoff(&self, cx: &mut Ctx, app: u32, node: u32, on: bool) {
        let until = on.then(|| {
            cx.now
                .saturating_add(u64::try_from(self.backoff.period().as_nanos()).unwrap_or(u64::MAX))
        });
        if let Err(e) = cx.store.put_backoff(app, node, until) {
            warn!(app, node, "the start-failure back-off was not stored: {e}");
        }
    }

    /// Puts back the stored back-offs that have not ended (a restart keeps them).
    fn restore_backoffs(&mut self, cx: &mut Ctx) -> Result<(), StateError> {
        let now = Instant::now();
        for (app, node, until) in cx.store.backoffs()? {
            // A purged job's application is retired: nothing to keep off the node.
            let known = self.apps.get(app as usize).is_some()
                && cx.nodes.iter().nth(node as usize).is_some();
            if until <= cx.now || !known {
                // Ended while the server was down (or names nothing): forget it.
                if let Err(e) = cx.store.put_backoff(app, node, None) {
                    warn!(
                        app,
                        node, "an ended start-failure back-off was not deleted: {e}"
                    );
                }
                continue;
            }
            self.backoff
                .restore(app, node, Duration::from_nanos(until - cx.now), now);
            cx.view.set_excluded(AppId(app), NodeId(node), true);
        }
        Ok(())
    }

    /// Installs purged job `job` as [`Batch::retire`] leaves one, without its file: its
    /// applications' ids (which end before `apps_end`) are taken retired, and its tasks' ids
    /// (which end before `tasks_end`) are never given again (its submission key still names it,
    /// in the store).
    fn install_retired(
        &mut self,
        cx: &mut Ctx,
        job: PurgedJob,
        apps_end: u32,
        tasks_end: u64,
    ) -> Result<(), StateError> {
        for a in job.first_app..apps_end {
            self.apps.push_retired();
            cx.view.add_retired_application(AppId(a))?;
        }
        self.tasks.reserve_ids(tasks_end);
        Ok(())
    }

    /// Adds an accepted job's applications to memory and to the view (pending tasks only).
    fn install(&mut self, cx: &mut Ctx, row: JobRow, job: Installable) -> Result<(), StateError> {
        let first_app = row.first_app;
        // A begin time still to come keeps its tasks out of the queues until then ([`after`]);
        // a cancelled job waits for nothing (its cancel forgot it).
        let deferred = row
            .begin_ms
            .filter(|&b| !row.cancelled && b.saturating_mul(1_000_000) > cx.now);
        let mut next_task = row.first_task;
        // Tasks that run after other jobs' tasks index by index wait for them ([`corr`]),
        // once the job itself does not wait.
        let mut after_corr: Vec<(u32, Vec<TaskId>)> = Vec::new();
        for (app, spec) in job.apps {
            let first_task = next_task;
            next_task += app.tasks as u64;
            // Rows not held (an evicted job's) are counted from its summary instead.
            let used = self
                .tasks
                .slice(first_task..next_task)
                .map_or_else(Used::default, Used::of);
            let mut counts = [0u64; 5];
            let mut pending: Vec<TaskId> = Vec::new();
            for t in first_task..next_task {
                if let Some(r) = self.tasks.get(t as usize) {
                    counts[slot(r.state)] += 1;
                    if r.state == TaskState::Pending {
                        pending.push(TaskId(t));
                    }
                }
            }
            let accelerator = spec.accelerator;
            self.apps.push(AppRec {
                job: row.id,
                name: app.name.clone(),
                split_bytes: app.split_bytes,
                first_task,
                tasks: app.tasks,
                retries: spec.retries,
                cpu: spec.cpu,
                gpu: spec.gpu,
                observed: [Observed::default(); 2],
                workdir: spec.workdir,
                streams: spec.streams,
                pin: spec.pin,
                files: spec.files,
                entries: spec.entries,
                counts,
                used,
                requires: app.requires.clone(),
                max_running: app.max_running,
                nodes: app.nodes,
                priority: app.priority,
                time_limit_update: None,
                spec_generation: 0,
                request_update: [None; 2],
                gpu_kind_update: None,
                requires_updated: false,
            });
            self.any_multi_node |= app.is_multi_node();
            // A job that runs after others keeps its tasks out of the queues until they
            // completed ([`after`]).
            let runs_after_others = !row.after.is_empty()
                || !row.after_any.is_empty()
                || !row.after_notok.is_empty()
                || !row.after_start.is_empty();
            if (runs_after_others || row.held || deferred.is_some()) && !pending.is_empty() {
                self.waiting
                    .hold(row.id, app.id.0, std::mem::take(&mut pending));
                self.waiting.name(row.id, row.named_jobs());
                self.waiting.name(row.id, row.after_start.iter().copied());
            } else if !row.after_corr.is_empty() && !row.cancelled && !pending.is_empty() {
                after_corr.push((app.id.0, std::mem::take(&mut pending)));
            }
            let id = cx.view.add_application(app, pending)?;
            // `accelerator = required|preferred` (spec 01) is applied by the view's `fits`.
            cx.view.set_accelerator_need(id, accelerator)?;
        }
        let apps = first_app..self.apps.len() as u32;
        // Its ids are taken, whether its rows are held or not (an evicted or purged job's).
        self.tasks.reserve_ids(next_task);
        if row.held && !row.cancelled {
            self.waiting.hold_by_user(row.id);
        }
        if deferred.is_some() {
            self.waiting.defer(row.id, deferred);
        }
        let mut row = row;
        let text_bytes = row.text.len() as u64;
        row.text = String::new();
        let (id, named) = (row.id, row.after_corr.clone());
        self.jobs.push(JobRec {
            text_bytes,
            name: row
                .name
                .clone()
                .or(job.name)
                .unwrap_or_else(|| row.origin.clone()),
            tasks: row.first_task..next_task,
            apps,
            row,
        });
        if !named.is_empty() {
            self.name_corr(cx.store, id, &named)?;
            for (app, tasks) in after_corr {
                self.corr_hold(cx.store, id, app, tasks)?;
            }
        }
        Ok(())
    }

    /// Records a successful run time and, for a variant without a declared profile, hands the
    /// policy the mean observed time as the variant's base time.
    fn observe(
        &mut self,
        cx: &mut Ctx,
        app: u32,
        v: Variant,
        duration_ns: u64,
    ) -> Result<(), StateError> {
        let Some(rec) = self.apps.get_mut(app as usize) else {
            return Ok(());
        };
        let o = &mut rec.observed[variant_code(v) as usize];
        o.record(duration_ns);
        let mean = o.mean_ns().unwrap_or(self.estimate).max(1);
        let declared = match v {
            Variant::Cpu => rec.cpu.as_ref().is_some_and(|r| r.declared),
            Variant::Gpu => rec.gpu.as_ref().is_some_and(|r| r.declared),
        };
        if !declared {
            cx.view.update_profile(AppId(app), v, mean, 0)?;
        }
        Ok(())
    }

    /// Where job `id` is in `self.jobs` (held in id order; ids come from the state's one
    /// sequence across kinds, so they need not be dense).
    fn job_index(&self, id: u64) -> Option<usize> {
        self.jobs.binary_search_by_key(&id, |j| j.row.id).ok()
    }

    /// Where the tasks of application `app` of job `job` send their stdout and stderr: the
    /// application's `stdout =` and `stderr =` (empty: captured by their agent), with the
    /// directory its tasks run in. `None`: no such batch application.
    pub fn streams(&self, job: u64, app: &str) -> Option<AppStreams> {
        let j = self.job_rec(job)?;
        let a = j
            .apps
            .clone()
            .find(|&a| self.apps.get(a as usize).is_some_and(|r| r.name == app))?;
        let rec = self.apps.get(a as usize)?;
        Some(AppStreams {
            streams: rec.streams.clone(),
            workdir: self.app_workdir(a),
        })
    }

    /// The directory application `app`'s tasks run in (when it exists on their node): its
    /// `workdir =` from the job's working directory, else the job's.
    fn app_workdir(&self, app: u32) -> String {
        let Some(rec) = self.apps.get(app as usize) else {
            return String::new();
        };
        let job_workdir = self.job_rec(rec.job).map_or("", |j| j.row.workdir.as_str());
        match &rec.workdir {
            Some(w) => std::path::Path::new(job_workdir)
                .join(w)
                .display()
                .to_string(),
            None => job_workdir.to_string(),
        }
    }

    /// The applications of job `id` in the scheduler's view (`None`: no such job in memory).
    pub fn apps_of(&self, id: u64) -> Option<std::ops::Range<u32>> {
        self.job_rec(id).map(|j| j.apps.clone())
    }

    /// Job `id`.
    fn job_rec(&self, id: u64) -> Option<&JobRec> {
        self.job_index(id).map(|i| &self.jobs[i])
    }

    /// The key of `app`'s variant `v` in its current spec generation.
    fn spec_key_of(&self, app: u32, v: Variant) -> u64 {
        let generation = self.apps.get(app as usize).map_or(0, |r| r.spec_generation);
        spec_key(app, v, generation)
    }

    /// What every task of `app`'s variant `v` runs, for an agent that does not hold it yet.
    fn task_spec(&self, app: u32, v: Variant) -> TaskSpec {
        // Asked for applications with tasks to run, never retired ones (their jobs ended).
        let Some(rec) = self.apps.get(app as usize) else {
            return TaskSpec::default();
        };
        let job_id = self.job_rec(rec.job).map_or(rec.job, |j| j.row.id);
        let run = match v {
            Variant::Cpu => rec.cpu.as_ref(),
            Variant::Gpu => rec.gpu.as_ref(),
        };
        let (argv, env, limit, memory, grace, warn) = match run {
            Some(r) => {
                let argv = match &r.command {
                    Command::Shell(s) => vec!["sh".to_string(), "-c".to_string(), s.clone()],
                    Command::Argv(v) => v.clone(),
                };
                (
                    argv,
                    r.env.clone(),
                    r.time_limit_ms,
                    r.memory_bytes,
                    r.kill_grace_ms,
                    r.warn,
                )
            }
            None => (Vec::new(), BTreeMap::new(), 0, 0, 0, None),
        };
        TaskSpec {
            key: spec_key(app, v, rec.spec_generation),
            job_id,
            app: rec.name.clone(),
            variant: v.to_string(),
            argv,
            env,
            workdir: self.app_workdir(app),
            workdir_required: rec.workdir.is_some(),
            time_limit_ms: limit,
            inputs: rec.files.0.clone(),
            outputs: rec.files.1.clone(),
            accelerator: rec.files.2.clone(),
            memory_limit_bytes: memory,
            kill_grace_ms: grace,
            warn_signal: warn.map(|w| w.signal.to_string()).unwrap_or_default(),
            warn_before_ms: warn.map_or(0, |w| w.before.div_ceil(1_000_000)),
            stdout: rec.streams[0].clone(),
            stderr: rec.streams[1].clone(),
            pin: rec.pin,
            // The state fills it from the job's owner.
            run_as: String::new(),
            job_nonce: 0,
        }
    }

    /// Accepts a job file as job `id` (the state's next job id): parses it with the shared
    /// parser, checks it can run on the `live` nodes and excludes (`!node:NAME`) only nodes of
    /// `known` (every name when empty), and stores the job with all its tasks in
    /// one transaction. On any error nothing is stored. A submission key the store already
    /// holds for the submission's owner answers its job (`existing`); another owner's job
    /// under the same key is neither found nor named.
    pub fn submit(
        &mut self,
        cx: &mut Ctx,
        live: &[Node],
        known: &[String],
        queues: &[crate::allocation::QueueConfig],
        sub: Submission,
        id: u64,
    ) -> Result<Submitted, StateError> {
        let Submission {
            origin,
            text,
            workdir,
            key,
            owner,
            name,
            after,
            after_any,
            after_notok,
            after_corr,
            after_start,
            hold,
            begin_ms,
            max_priority,
            task_room,
            cap,
            ..
        } = sub;
        if let Some(b) = begin_ms {
            crate::jobs::gate::check_begin(b, cx.now)?;
        }
        // A key names its owner's job for good, purged or not: the store's index finds it.
        let keyed = match key.as_str() {
            "" => None,
            k => cx.store.job_with_key(&owner, k)?,
        };
        if let Some(k) = keyed {
            let id = k.id;
            let end = match (self.job_rec(id), k.next_first_task) {
                (Some(j), _) => j.tasks.end,
                (None, Some(next)) => next,
                (None, None) => self.tasks.len() as u64,
            };
            let tasks = end.saturating_sub(k.first_task);
            if !cx.store.is_job_file(id, &text)? {
                return Err(StateError::Invalid(format!(
                    "submission key `{}` already names job {id}, submitted with another file",
                    hetsched_core::text::clip(&key)
                )));
            }
            info!(
                job = id,
                "submission repeated with the same key: the job exists"
            );
            return Ok(Submitted {
                job_id: id,
                tasks,
                existing: true,
                kind: Kind::Batch,
            });
        }
        let (after, after_any, after_notok) = self.check_after(&after, &after_any, &after_notok)?;
        let after_start = self.check_after_start(&after_start)?;
        let w = parse_workload(&origin, &text)?;
        w.check_commands()?;
        limits::check(&w)?;
        w.check_excluded_nodes(known)?;
        if let Some(max) = max_priority
            && let Some(a) = w.applications.iter().find(|a| a.priority > max)
        {
            return Err(StateError::Invalid(format!(
                "{origin}: application `{}`: priority {} is above {max}, the most its owner may \
                 give its work (`hetsched user limit NAME --max-priority`, set by the admin)",
                a.name.get_ref(),
                a.priority
            )));
        }
        // Live nodes only: a dead node's resources make no job runnable. With none alive (none
        // registered yet, or all away), the job waits for nodes; so it does when an automatic
        // allocation queue's agents could run each of its applications.
        if !live.is_empty()
            && let Err(e) = w.check_runnable(live)
        {
            let apps = w.to_applications(0, MissingProfile::Estimate(self.estimate))?;
            let allocated = !queues.is_empty()
                && apps
                    .iter()
                    .all(|a| queues.iter().any(|q| crate::allocation::serves(q, a)));
            if !allocated {
                // A queue whose agents would run it but for its time limit: say how long
                // they have, or the refusal reads as if no queue could run it at all.
                if let Some(why) = apps
                    .iter()
                    .find_map(|a| crate::allocation::time_limit_too_long(queues, a))
                {
                    return Err(StateError::Invalid(format!("{e}; {why}")));
                }
                return Err(e.into());
            }
        }
        let total = w.total_tasks();
        if total > MAX_TASKS_PER_JOB {
            return Err(StateError::Invalid(format!(
                "{origin}: the job has {total} tasks; at most {MAX_TASKS_PER_JOB} per job"
            )));
        }
        if let Some(room) = &task_room {
            room.check(&origin, total).map_err(StateError::Invalid)?;
        }
        let first_app = self.apps.len() as u32;
        let first_task = self.tasks.len() as u64;
        let mut apps = w.to_applications(first_app, MissingProfile::Estimate(self.estimate))?;
        // A task past its owner's cap on its own would wait forever (a running task keeps what
        // it holds, but none starts past a cap): refused, as a topology over the cap is.
        for a in &apps {
            if let Some(why) = super::beyond_cap(cap, &task_needs(a), &owner) {
                return Err(StateError::Invalid(format!(
                    "{origin}: application `{}`: {why}: its tasks would never start; ask for \
                     less, or ask the admin to raise the cap",
                    a.name
                )));
            }
        }
        let after_corr = if after_corr.is_empty() {
            after_corr
        } else {
            let tasks = app_tasks(&apps, &w);
            let indices = tasks.iter().flat_map(|a| (0..a.tasks).map(|k| a.index(k)));
            self.check_after_corr(cx.store, &after_corr, indices)?
        };
        let submitted_ns = cx.now;
        for a in &mut apps {
            a.submit_time = submitted_ns;
        }
        let row = JobRow {
            id,
            origin: origin.clone(),
            text,
            workdir,
            submitted_ns,
            first_app,
            first_task,
            cancelled: false,
            submission_key: (!key.is_empty()).then_some(key),
            owner,
            name: (!name.is_empty()).then_some(name),
            after,
            after_any,
            after_notok,
            after_corr,
            after_start,
            held: hold,
            begin_ms,
        };
        let mut rows = Vec::with_capacity(total as usize);
        for a in app_tasks(&apps, &w) {
            for k in 0..a.tasks {
                rows.push(TaskRow::submitted(
                    first_task + rows.len() as u64,
                    a.app,
                    a.index(k),
                ));
            }
        }
        let names: Vec<(u32, String)> = apps.iter().map(|a| (a.id.0, a.name.clone())).collect();
        cx.store.insert_job(&row, &names, &rows)?;
        self.tasks.extend(rows);
        let named: Vec<u64> = row.named_jobs().collect();
        self.install(cx, row, Installable::new(&w, apps))?;
        self.name_foreign(id, named.into_iter());
        // Runs after jobs that already completed: queued at once (and woken for below); a job
        // that waits wakes no agent.
        self.settle_waiting(cx)?;
        if !self.waiting.waits(id) {
            for &(a, _) in &names {
                let tasks = self.apps.get(a as usize).map_or(0, |r| r.tasks);
                cx.nodes.wakes.free(a, tasks as usize);
            }
        }
        info!(job = id, origin, tasks = total, "job accepted");
        Ok(Submitted {
            job_id: id,
            tasks: total,
            existing: false,
            kind: Kind::Batch,
        })
    }

    /// `hetsched resubmit JOB --failed` (`ended` = failed) or `--cancelled` (`ended` =
    /// cancelled: the tasks `cancel JOB --tasks` cancelled): every task of the job that ended
    /// so is queued again (at the end of its application's queue); its next dispatch is a new
    /// attempt, and its retries count afresh. The other tasks stay as they are. A job cancelled
    /// as a whole is refused. Returns how many were queued.
    pub fn requeue_ended(
        &mut self,
        cx: &mut Ctx,
        job: u64,
        ended: TaskState,
    ) -> Result<u64, StateError> {
        let Some(j) = self.job_rec(job) else {
            return Err(StateError::NoJob(job));
        };
        if j.row.cancelled {
            return Err(StateError::Invalid(format!(
                "job {job} was cancelled: submit it again instead"
            )));
        }
        if self.retention.is_purged(job) {
            return Err(StateError::NoJob(job));
        }
        let range = j.tasks.clone();
        // A finished job's rows may have left memory: with failed tasks, they come back (the job
        // is no longer finished; its stored summary goes in this event's transaction).
        if self
            .retention
            .ended_of_evicted(job, ended)
            .is_some_and(|f| f > 0)
        {
            let rows = cx.store.task_rows(range.clone())?;
            if rows.len() as u64 != range.end - range.start {
                return Err(StoreError::Corrupt(format!("job {job}: task rows missing")).into());
            }
            self.tasks.extend(rows);
            self.retention.revive(job);
            self.revived.push(job);
        }
        let mut by_app: BTreeMap<u32, Vec<TaskId>> = BTreeMap::new();
        let mut n = 0;
        let mut requeued = Vec::new();
        for id in range {
            let Some(t) = self.tasks.get_mut(id as usize) else {
                continue;
            };
            if t.state != ended {
                continue;
            }
            requeued.push(id);
            moved(&mut self.apps, t.app, ended, TaskState::Pending);
            t.state = TaskState::Pending;
            t.failures = 0;
            t.finished_ns = 0;
            t.message = match (ended, t.attempt) {
                (TaskState::Cancelled, 0) => "resubmitted after it was cancelled".into(),
                (TaskState::Cancelled, a) => {
                    format!("resubmitted after attempt {a} was cancelled")
                }
                (_, a) => format!("resubmitted after attempt {a} failed"),
            };
            by_app.entry(t.app).or_default().push(TaskId(id));
            self.dirty.push(id);
            n += 1;
        }
        for (app, tasks) in by_app {
            if self.waiting.waits(job) {
                // Held: they wait with the job's other pending tasks.
                self.waiting.hold(job, app, tasks);
            } else if self.runs_after_corr(job) {
                // Each waits for its correspondents again (cancelled because one failed, it
                // is cancelled again unless that one has run again).
                self.corr_hold(cx.store, job, app, tasks)?;
            } else {
                cx.nodes.wakes.free(app, tasks.len());
                cx.view.resubmit(AppId(app), tasks);
            }
        }
        if n > 0 {
            // The job is unfinished again: the jobs after it wait for its new end.
            self.wait_again_on(cx, job);
            // Tasks that wait for their correspondents again are looked at in this event.
            if !self.corr.nothing_due() {
                self.settle_waiting(cx)?;
            }
        }
        // Those cancelled again at once (a correspondent still failed or cancelled) were not
        // queued: they are not counted, and the reply says why.
        let again: Vec<&TaskRow> = requeued
            .iter()
            .filter_map(|&id| self.tasks.get(id as usize))
            .filter(|t| t.state == TaskState::Cancelled)
            .collect();
        if let Some(first) = again.first() {
            self.recancelled.0 += again.len() as u64;
            if self.recancelled.1.is_empty() {
                self.recancelled.1.clone_from(&first.message);
            }
        }
        Ok(n - again.len() as u64)
    }

    /// The tasks the last resubmissions cancelled again at once, and why the first was: read
    /// (and forgotten) by the state to tell the client ([`State::on_resubmit_told`]).
    ///
    /// [`State::on_resubmit_told`]: crate::state::State::on_resubmit_told
    pub fn take_recancelled(&mut self) -> (u64, String) {
        std::mem::take(&mut self.recancelled)
    }

    /// A task of application `app` recorded `new` as its latest attempt's usage in place of
    /// `old`: the application's totals follow. A peak that may have been the largest is
    /// recounted from the application's rows (rare: a retried attempt with a lower peak).
    fn account(&mut self, app: u32, old: Option<&TaskUsage>, new: Option<&TaskUsage>) {
        let Some(r) = self.apps.get_mut(app as usize) else {
            return;
        };
        // Agents' figures: saturating, as [`TaskUsage::cpu_ms`] (a saturated sum stays so).
        let cpu = |u: Option<&TaskUsage>| u.map_or(0, TaskUsage::cpu_ms);
        r.used.cpu_ms = r
            .used
            .cpu_ms
            .saturating_sub(cpu(old))
            .saturating_add(cpu(new));
        let (old_rss, new_rss) = (
            old.map_or(0, |u| u.max_rss_bytes),
            new.map_or(0, |u| u.max_rss_bytes),
        );
        let (old_gpu, new_gpu) = (
            old.map_or(0, |u| u.max_gpu_memory_bytes),
            new.map_or(0, |u| u.max_gpu_memory_bytes),
        );
        let rss_fell = if new_rss >= r.used.max_rss_bytes {
            r.used.max_rss_bytes = new_rss;
            false
        } else {
            old_rss == r.used.max_rss_bytes
        };
        let gpu_fell = if new_gpu >= r.used.max_gpu_memory_bytes {
            r.used.max_gpu_memory_bytes = new_gpu;
            false
        } else {
            old_gpu == r.used.max_gpu_memory_bytes
        };
        if rss_fell || gpu_fell {
            let range = r.first_task..r.first_task + u64::from(r.tasks);
            if let Some(rows) = self.tasks.slice(range) {
                let of = Used::of(rows);
                r.used.max_rss_bytes = of.max_rss_bytes;
                r.used.max_gpu_memory_bytes = of.max_gpu_memory_bytes;
            }
        }
    }

    /// A task of application `app` ended for good: if that ended its job, the jobs waiting on
    /// it are due ([`after`]). One addition per application of the job, not a look at every
    /// waiting job.
    fn task_ended(&mut self, app: u32) {
        let Some(job) = self.apps.get(app as usize).map(|r| r.job) else {
            return;
        };
        if let Some(j) = self.job_rec(job) {
            let c = self.job_counts(j);
            if c.pending + c.running == 0 {
                self.waiting.job_ended(job);
            }
        }
    }

    /// A dispatched task goes back to the front of its application's queue (a retry, a loss),
    /// or, when its job is held, to the job's waiting tasks.
    fn requeue(&mut self, cx: &mut Ctx, a: &Assignment) {
        let job = self.apps.get(a.app.index()).map_or(0, |r| r.job);
        if self.waiting.waits(job) {
            // Its node's resources come back; the task joins the job's waiting ones.
            cx.view.task_abandoned(a);
            self.waiting.hold(job, a.app.0, vec![a.task]);
        } else {
            cx.view.requeue(a);
            cx.nodes.wakes.free(a.app.0, 1);
        }
    }

    /// The task rows of application `app` held in memory, by id.
    fn tasks_of_app(&self, app: u32) -> impl Iterator<Item = &TaskRow> {
        let range = self
            .apps
            .get(app as usize)
            .map_or(0..0, |r| r.first_task..r.first_task + u64::from(r.tasks));
        range.filter_map(|t| self.tasks.get(t as usize))
    }

    /// Cancels job `job`: its pending tasks are dropped and its running ones killed by their
    /// agents; each task's message says why (`message`), and its reason is `reason` (a user's
    /// cancel, or a job it runs after that did not end as it needs).
    fn cancel_job(
        &mut self,
        cx: &mut Ctx,
        job: u64,
        message: &str,
        reason: EndReason,
    ) -> Result<u64, StateError> {
        let Some(j) = self.job_rec(job) else {
            return Err(StateError::NoJob(job));
        };
        if self.retention.is_purged(job) {
            return Err(StateError::NoJob(job));
        }
        let (apps, range) = (j.apps.clone(), j.tasks.clone());
        let mut n = 0;
        for app in apps {
            cx.view.cancel_pending(AppId(app));
        }
        self.waiting.forget(job);
        self.corr.forget(job);
        // Jobs waiting on this one are looked at again.
        self.waiting.job_ended(job);
        for id in range {
            // A finished job's rows may have left memory: none of them is pending or running.
            if self.cancel_task(cx, id, message, reason) {
                n += 1;
            }
        }
        if let Some(i) = self.job_index(job) {
            self.jobs[i].row.cancelled = true;
        }
        self.cancelled.push(job);
        Ok(n)
    }

    /// Cancels task `id` if it is pending or running (a running one's resources come back and
    /// its node is woken to kill it; a pending one must already be out of the queues), saying
    /// `message` for `reason`. Returns whether it did.
    fn cancel_task(&mut self, cx: &mut Ctx, id: u64, message: &str, reason: EndReason) -> bool {
        let Some(t) = self.tasks.get(id as usize) else {
            return false;
        };
        match t.state {
            TaskState::Pending => {}
            TaskState::Running => {
                let a = assignment_of(cx.view, &self.holds, t);
                // Its process runs on until its agent has stopped it (SIGTERM, the kill grace,
                // SIGKILL): a wait on its job waits for that.
                let job = self.apps.get(t.app as usize).map_or(0, |r| r.job);
                self.stopping.add(a.node.0, id, t.attempt, job);
                cx.view.task_abandoned(&a);
                self.drop_hold(id);
                cx.nodes.ended(a.node, id);
                // Its agent learns to kill it from its next heartbeat: now.
                cx.nodes.wakes.node(a.node.0);
                throttle_opened(cx, a.app);
            }
            _ => return false,
        }
        let t = &mut self.tasks[id as usize];
        moved(&mut self.apps, t.app, t.state, TaskState::Cancelled);
        t.state = TaskState::Cancelled;
        t.finished_ns = cx.now;
        t.message = message.to_string();
        t.reason = Some(reason);
        t.signal = None;
        let (app, index) = (t.app, t.index);
        self.dirty.push(id);
        self.corr_ended(app, index);
        true
    }

    /// `hetsched cancel JOB --tasks INDICES [--app NAME]`: cancels job `job`'s pending and
    /// running tasks whose index is in `indices` (of application `app`, or of every
    /// application); the rest of the job goes on. Returns how many it cancelled. An index that
    /// no task of the job has is refused, naming it; a job that has ended cancels nothing.
    fn cancel_some(
        &mut self,
        cx: &mut Ctx,
        job: u64,
        app: Option<&str>,
        indices: &[u32],
        why: &str,
    ) -> Result<u64, StateError> {
        let (state, selected) = self.select(job, app, Some(indices))?;
        if !matches!(state, "pending" | "running") {
            return Ok(0);
        }
        let mut pending: HashMap<u32, HashSet<TaskId>> = HashMap::new();
        let mut chosen = Vec::new();
        for id in selected {
            let Some(t) = self.tasks.get(id as usize) else {
                continue;
            };
            match t.state {
                TaskState::Pending => {
                    pending.entry(t.app).or_default().insert(TaskId(id));
                }
                TaskState::Running => {}
                _ => continue,
            }
            chosen.push(id);
        }
        for (&app, tasks) in &pending {
            cx.view.cancel_pending_tasks(AppId(app), tasks);
            self.waiting.drop_tasks(job, tasks);
            self.corr.drop_tasks(job, tasks);
        }
        for &id in &chosen {
            self.cancel_task(cx, id, why, EndReason::Cancelled);
        }
        if let Some(&id) = chosen.first() {
            let app = self.tasks[id as usize].app;
            // The job may have ended with them: the jobs waiting on it are looked at again.
            self.task_ended(app);
            self.settle_waiting(cx)?;
        }
        Ok(chosen.len() as u64)
    }

    /// The tasks of job `job` whose index is in `indices` (all: `None`), of application `app`
    /// only, if given, with the job's state. An application or an index the job does not have
    /// is refused, naming it.
    fn select(
        &self,
        job: u64,
        app: Option<&str>,
        indices: Option<&[u32]>,
    ) -> Result<(&'static str, Vec<u64>), StateError> {
        let Some(j) = self.job_rec(job).filter(|_| !self.retention.is_purged(job)) else {
            return Err(StateError::NoJob(job));
        };
        let (apps, range, state) = (j.apps.clone(), j.tasks.clone(), self.job_state(j));
        let all = apps.clone();
        let apps: Vec<u32> = apps
            .filter(|&a| app.is_none_or(|n| self.apps.get(a as usize).is_some_and(|r| r.name == n)))
            .collect();
        if let Some(name) = app
            && apps.is_empty()
        {
            return Err(StateError::Invalid(format!(
                "job {job} has no application `{}` (it has: {})",
                hetsched_core::text::clip(name),
                hetsched_core::text::some_names(
                    all.filter_map(|a| self.apps.get(a as usize).map(|r| r.name.as_str()))
                )
            )));
        }
        let wanted: Option<HashSet<u32>> = indices.map(|i| i.iter().copied().collect());
        let mut seen = HashSet::new();
        let mut selected = Vec::new();
        for id in range {
            let Some(t) = self.tasks.get(id as usize) else {
                continue;
            };
            if !apps.contains(&t.app) || wanted.as_ref().is_some_and(|w| !w.contains(&t.index)) {
                continue;
            }
            seen.insert(t.index);
            selected.push(id);
        }
        super::check_indices_seen(
            job,
            indices,
            &seen,
            app.map(|n| format!("application `{n}`")),
        )?;
        Ok((state, selected))
    }

    /// The rows of one page of a listing, as listings show them.
    fn task_infos(&self, rd: &Read, rows: &[TaskRow]) -> Result<Vec<TaskInfo>, StateError> {
        // Multi-node tasks' nodes in their latest attempt, from the store (the running ones'
        // are stored as they start).
        let multi_node = match (rows.first(), rows.last()) {
            (Some(first), Some(last))
                if rows
                    .iter()
                    .any(|t| self.apps.get(t.app as usize).is_some_and(|a| a.nodes > 1)) =>
            {
                rd.store.multi_node_tasks_in(first.id..last.id + 1)?
            }
            _ => HashMap::new(),
        };
        Ok(rows
            .iter()
            .map(|t| {
                // Rows are of jobs not purged, whose applications are not retired.
                let (name, job) = self
                    .apps
                    .get(t.app as usize)
                    .map_or(("", 0), |a| (a.name.as_str(), a.job));
                let mut info = task_info(
                    t,
                    name,
                    job,
                    t.node
                        .and_then(|n| rd.nodes.get(n))
                        .map_or("", |n| n.spec.name.as_str()),
                );
                // The ANode it was offloaded to, as stored (the state fills in the others).
                if let Some(anode) = t.executed.and_then(|n| rd.nodes.get(n)) {
                    info.executed_node = anode.spec.name.clone();
                }
                if let Some(nodes) = multi_node.get(&t.id) {
                    info.nodes = nodes
                        .iter()
                        .map(|&n| rd.nodes.name(n).to_string())
                        .collect();
                }
                info
            })
            .collect())
    }

    /// What it takes to read one page of a job's tasks from the store after the state's lock is
    /// released ([`StoredTasks::read`]) — for a running job as for a finished one whose rows left
    /// memory, and for job 0 (every batch job): the read sees the store's latest commit, which is
    /// the state as of some moment after the plan (issue 10).
    ///
    /// `states` (empty: every state) filters a single job's page in the store's query; a page
    /// of every job is filtered by the caller.
    pub fn plan_tasks_page(
        &self,
        rd: &Read,
        job: u64,
        cursor: u64,
        limit: usize,
        states: &[TaskState],
    ) -> Result<TasksListing, StateError> {
        // Every committed row is in the store: each event commits what it changed before the
        // lock is released, so the store's latest commit is exactly the state's memory. A page —
        // of a running or finished job, or of every job — is read there, through the read-only
        // connection, after the lock is released; under the lock only this plan is made
        // (O(the page's jobs' applications + nodes)).
        let nodes = || rd.nodes.iter().map(|n| n.spec.name.clone()).collect();
        if job == 0 {
            return Ok(TasksListing::FromStore(Box::new(self.plan_every_job_page(
                cursor,
                limit,
                nodes(),
            ))));
        }
        let stored = self
            .job_rec(job)
            .filter(|j| !self.retention.is_purged(j.row.id))
            .filter(|j| !j.tasks.is_empty());
        let Some(j) = stored else {
            return self
                .tasks_page(rd, job, cursor, limit)
                .map(TasksListing::Ready);
        };
        let range = j.tasks.clone();
        let start = cursor.clamp(range.start, range.end);
        let end = start.saturating_add(limit as u64).min(range.end);
        // Filtered: the first `limit` matching rows from the cursor, wherever they are in the
        // job; the total counts the matching tasks.
        let (end, total) = if states.is_empty() {
            (end, range.end - range.start)
        } else {
            let c = self.job_counts(j);
            let counted = |s: &TaskState| match s {
                TaskState::Pending => c.pending,
                TaskState::Running => c.running,
                TaskState::Succeeded => c.succeeded,
                TaskState::Failed => c.failed,
                TaskState::Cancelled => c.cancelled,
            };
            (range.end, states.iter().map(counted).sum())
        };
        let nodes = nodes();
        Ok(TasksListing::FromStore(Box::new(StoredTasks {
            job,
            page: start..end,
            scan: start..end,
            skip: Vec::new(),
            want: if states.is_empty() {
                (end - start) as usize
            } else {
                limit
            },
            states: states.to_vec(),
            last: range.end,
            total,
            apps: self.app_names(j),
            nodes,
            executed: HashMap::new(),
            queued: HashSet::new(),
            began: HashMap::new(),
            after: 0,
        })))
    }

    /// Job 0's page from `cursor`: the store's first `limit` rows from there, by id. Purged jobs'
    /// rows are gone from the store, so the plan names the applications of the jobs those rows
    /// can come from — the unpurged jobs from the cursor on, until they hold `limit` tasks.
    fn plan_every_job_page(&self, cursor: u64, limit: usize, nodes: Vec<String>) -> StoredTasks {
        let last = self.tasks.len() as u64;
        let start = cursor.min(last);
        let mut apps = HashMap::new();
        let mut held = 0u64;
        let mut scan_end = start;
        let first = self.jobs.partition_point(|j| j.tasks.end <= start);
        for j in &self.jobs[first..] {
            if held >= limit as u64 {
                break;
            }
            if self.retention.is_purged(j.row.id) {
                continue;
            }
            let from = j.tasks.start.max(start);
            held += j.tasks.end.saturating_sub(from);
            scan_end = j.tasks.end;
            apps.extend(self.app_names(j));
        }
        let page = start..start.saturating_add(limit as u64).min(last);
        StoredTasks {
            job: 0,
            want: (page.end - page.start) as usize,
            states: Vec::new(),
            page,
            scan: start..scan_end.max(start),
            skip: self.retention.undeleted.clone(),
            last,
            total: last,
            apps,
            nodes,
            executed: HashMap::new(),
            queued: HashSet::new(),
            began: HashMap::new(),
            after: 0,
        }
    }

    /// A job's applications: id → (name, job).
    fn app_names(&self, j: &JobRec) -> HashMap<u32, (String, u64)> {
        j.apps
            .clone()
            .filter_map(|a| Some((a, (self.apps.get(a as usize)?.name.clone(), j.row.id))))
            .collect()
    }

    /// A job's tasks by state: the sum of its applications' counts.
    fn job_counts(&self, j: &JobRec) -> TaskCounts {
        let mut c = [0u64; 5];
        for a in j.apps.clone() {
            if let Some(r) = self.apps.get(a as usize) {
                for (s, n) in c.iter_mut().zip(r.counts) {
                    *s += n;
                }
            }
        }
        to_counts(&c)
    }

    /// `pending`, `running`, `completed`, `failed` or `cancelled`.
    fn job_state(&self, j: &JobRec) -> &'static str {
        state_of(&self.job_counts(j), j.row.cancelled)
    }

    /// The last of job `job`'s stopping tasks ended: if the job had ended, it is over now —
    /// the clients waiting on it are woken after the commit (`State::job_ends`), and the jobs
    /// that run after it are looked at again. (A job still running changes nothing for them.)
    fn stopped(&mut self, job: u64) {
        let over = self
            .job_rec(job)
            .is_some_and(|j| matches!(self.job_state(j), "completed" | "failed" | "cancelled"));
        if over {
            self.waiting.job_ended(job);
        }
    }

    /// Node `node` is gone (dead, left): what was stopped there will never be said to have
    /// ended, so nothing waits for it any more.
    pub fn node_gone(&mut self, cx: &mut Ctx, node: u32) -> Result<(), StateError> {
        let jobs = self.stopping.node_gone(node);
        if jobs.is_empty() {
            return Ok(());
        }
        for job in jobs {
            self.stopped(job);
        }
        self.settle_waiting(cx)
    }

    fn job_info(&self, rd: &Read, j: &JobRec, with_apps: bool) -> JobInfo {
        let (pending_reason, blocked) = self.pending_reason(rd, j);
        let queued = &rd.nodes.prefetch.queued;
        let mut counts = self.job_counts(j);
        counts.queued = queued.count_within(j.tasks.clone());
        let state = shown_state(&counts, j.row.cancelled, j.row.held);
        let finished_ns = if counts.pending + counts.running == 0 {
            self.job_finished_ns(j)
        } else {
            0
        };
        // The job's usage: its applications' added up (one addition each, as the counts).
        let mut used = Used::default();
        for r in j.apps.clone().filter_map(|a| self.apps.get(a as usize)) {
            used.cpu_ms = used.cpu_ms.saturating_add(r.used.cpu_ms);
            used.max_rss_bytes = used.max_rss_bytes.max(r.used.max_rss_bytes);
            used.max_gpu_memory_bytes = used.max_gpu_memory_bytes.max(r.used.max_gpu_memory_bytes);
        }
        let apps = if with_apps {
            j.apps
                .clone()
                .filter_map(|a| Some((a, self.apps.get(a as usize)?)))
                .map(|(a, r)| {
                    let mean = |i: usize| r.observed[i].mean_ns().map_or(0.0, |n| n as f64 / 1e6);
                    AppInfo {
                        id: a,
                        name: r.name.clone(),
                        tasks: r.tasks as u64,
                        counts: TaskCounts {
                            queued: queued
                                .count_within(r.first_task..r.first_task + u64::from(r.tasks)),
                            ..to_counts(&r.counts)
                        },
                        mean_cpu_ms: mean(0),
                        mean_gpu_ms: mean(1),
                        has_cpu: r.cpu.is_some(),
                        has_gpu: r.gpu.is_some(),
                        ready: 0,
                        cpu_ms: r.used.cpu_ms,
                        max_rss_bytes: r.used.max_rss_bytes,
                        max_gpu_memory_bytes: r.used.max_gpu_memory_bytes,
                        requires: r.requires.clone(),
                        max_running: r.max_running,
                        streams: r.streams.clone(),
                        pin: r.pin,
                        nodes: r.nodes,
                        priority: r.priority,
                        time_limit_ms: r.time_limits_ms(),
                        requests: requests_of(rd.view, a),
                        gpu_kind: gpu_kind_of(rd.view, a),
                    }
                })
                .collect()
        } else {
            Vec::new()
        };
        JobInfo {
            id: j.row.id,
            kind: super::Kind::Batch,
            name: j.name.clone(),
            state: state.to_string(),
            tasks: j.tasks.end - j.tasks.start,
            counts,
            submitted_ns: j.row.submitted_ns,
            finished_ns,
            apps,
            after: j.row.after.clone(),
            after_any: j.row.after_any.clone(),
            after_notok: j.row.after_notok.clone(),
            after_corr: j.row.after_corr.clone(),
            after_start: j.row.after_start.clone(),
            // Waiting for the jobs it runs after (or after the start of): not for its begin time,
            // not for its release (`held`, below); a job that ended waits for nothing (before a restart as after it:
            // found by the day fuzz).
            waiting: self.waiting.waits(j.row.id)
                && (self.first_unfinished_after(j).is_some() || self.first_unstarted(j).is_some())
                && matches!(state, "pending" | "running"),
            // A hold is a pending or running job's: one that ended is its state only.
            held: j.row.held && matches!(state, "pending" | "running"),
            begin_ms: j.row.begin_ms,
            // (A job that ended waits for nothing, whatever its begin time.)
            deferred: self.waiting.deferred(j.row.id) && matches!(state, "pending" | "running"),
            cpu_ms: used.cpu_ms,
            max_rss_bytes: used.max_rss_bytes,
            max_gpu_memory_bytes: used.max_gpu_memory_bytes,
            pending_reason,
            blocked,
            stopping: self.stopping.of_job(j.row.id),
            ..Default::default()
        }
    }
}

/// A job's state from its tasks' counts and whether it was cancelled.
fn state_of(counts: &TaskCounts, cancelled: bool) -> &'static str {
    if counts.pending + counts.running > 0 {
        if counts.running + counts.succeeded + counts.failed > 0 {
            "running"
        } else {
            "pending"
        }
    } else if cancelled || counts.cancelled > 0 {
        // Some of its tasks were cancelled (`cancel JOB --tasks`): it did not complete.
        "cancelled"
    } else if counts.failed > 0 {
        "failed"
    } else {
        "completed"
    }
}

/// A job's state as listings show it (`hetsched jobs`, `hetsched job N`, the dashboard, the
/// users' counts): [`state_of`], except that a started job that is held with none of its tasks
/// running is `pending`, as a job held at submission: nothing of it runs until it is released,
/// when it is `running` again. (Dependencies and cancellation go by [`state_of`]: it started.)
fn shown_state(counts: &TaskCounts, cancelled: bool, held: bool) -> &'static str {
    match state_of(counts, cancelled) {
        "running" if held && counts.running == 0 => "pending",
        state => state,
    }
}

/// A task row as listings show it.
fn task_info(t: &TaskRow, app: &str, job: u64, node: &str) -> TaskInfo {
    TaskInfo {
        id: t.id,
        job_id: job,
        app: app.to_string(),
        index: t.index,
        state: t.state.as_str().to_string(),
        attempt: t.attempt,
        node: node.to_string(),
        variant: t
            .variant
            .map_or(String::new(), |v| variant_of(Some(v)).to_string()),
        devices: t.devices.to_vec(),
        started_ns: t.started_ns,
        finished_ns: t.finished_ns,
        exit_code: t.exit_code.unwrap_or(-1),
        message: t.message.clone(),
        failed_attempts: t.failures,
        preemptions: t.preemptions,
        // Filled by the state (it knows what the agents hold queued).
        queued: false,
        // Filled from the row's `executed` by the caller (it knows the nodes' names), else by
        // the state (accelerator sharing knows where it ran).
        executed_node: String::new(),
        // The latest attempt's, once it ended: a task running again (resubmitted, retried,
        // lost) or waiting for its next attempt shows none yet, not its previous attempt's.
        usage: t
            .usage
            .as_deref()
            .copied()
            .filter(|_| t.state.is_terminal()),
        nodes: Vec::new(),
        process: 0,
        // Only workflow instances fetch inputs before their program starts.
        fetching: false,
        fetch_ms: 0,
        reason: t.reason,
        signal: t.signal.clone(),
    }
}

/// A page of tasks, ready or still to be read from the store.
pub enum TasksListing {
    /// Built under the state's lock (rows held in memory).
    Ready(TasksPage),
    /// To read from the store without the lock.
    FromStore(Box<StoredTasks>),
}

/// A page of tasks to read from the store (see [`Batch::plan_tasks_page`]): everything needed to
/// show the rows, copied out of the state.
#[derive(Debug)]
pub struct StoredTasks {
    /// The job listed (0: every batch job).
    job: u64,
    /// The ids the page starts at and, without gaps (and unfiltered), would end at.
    page: std::ops::Range<u64>,
    /// How many rows the page holds at most.
    want: usize,
    /// Only rows in these states (empty: every state).
    states: Vec<TaskState>,
    /// The ids the page's rows can have (job 0: past purged jobs' gaps).
    scan: std::ops::Range<u64>,
    /// Purged jobs' task ids whose rows are not deleted yet: the read skips them.
    skip: Vec<std::ops::Range<u64>>,
    last: u64,
    total: u64,
    /// The applications' names and jobs by id.
    apps: HashMap<u32, (String, u64)>,
    /// Node names by id.
    nodes: Vec<String>,
    /// Where a task's attempt ran when it is not where it was placed (accelerator offload):
    /// task id → (attempt, node name), filled under the lock by the state.
    pub executed: HashMap<u64, (u32, String)>,
    /// The page's running tasks that still wait in their agent's queue, filled under the lock
    /// by the state.
    pub queued: HashSet<u64>,
    /// When those of the page's running tasks that waited in their agent's queue started,
    /// filled under the lock by the state.
    pub began: HashMap<u64, u64>,
    /// Job 0: where the listing goes on once this kind's rows are done (the next kind's first
    /// id, 0 = nowhere), filled under the lock by the state.
    pub after: u64,
}

impl StoredTasks {
    /// The task ids the page's rows can have.
    pub fn ids(&self) -> std::ops::Range<u64> {
        self.scan.start..self.scan.end.max(self.page.end)
    }

    /// Reads the page through `reader` (a read-only connection; no state lock).
    pub fn read(self, reader: &StoreReader) -> Result<TasksPage, StateError> {
        let want = self.want;
        let rows = retention::rows_past(
            |r, n| {
                if self.states.is_empty() {
                    reader.task_rows_from(r, n)
                } else {
                    reader.task_rows_in_states(r, n, &self.states)
                }
            },
            self.page.start..self.last,
            want,
            &self.skip,
        )?;
        if self.job != 0 && want > 0 && rows.is_empty() && self.states.is_empty() {
            // Purged since the page was planned.
            return Err(StateError::NoJob(self.job));
        }
        // Where the next page starts: after the last row read, unless the rows ran out.
        let end = if rows.len() < want {
            self.last
        } else {
            rows.last().map_or(self.last, |t| t.id + 1)
        };
        // Job 0: rows of a job the plan did not name (one purged after the plan let later jobs'
        // rows in) are left to the next page, which plans them.
        let known = rows
            .iter()
            .take_while(|t| self.job != 0 || self.apps.contains_key(&t.app))
            .count();
        let next_cursor = match rows.get(known) {
            Some(t) => t.id,
            None if end < self.last => end,
            None => self.after,
        };
        // Multi-node tasks' nodes in their latest attempt (the partial index: what they are).
        let multi_node = match (rows.first(), rows[..known].last()) {
            (Some(first), Some(last)) => reader.multi_node_tasks_in(first.id..last.id + 1)?,
            _ => HashMap::new(),
        };
        let tasks = rows[..known]
            .iter()
            .map(|t| {
                let (app, job) = self
                    .apps
                    .get(&t.app)
                    .map_or(("", self.job), |(name, job)| (name.as_str(), *job));
                let node = t
                    .node
                    .and_then(|n| self.nodes.get(n as usize))
                    .map_or("", String::as_str);
                let mut info = task_info(t, app, job, node);
                if t.state == TaskState::Running {
                    info.queued = self.queued.contains(&t.id);
                    if let Some(&at) = self.began.get(&t.id).filter(|_| !info.queued) {
                        info.started_ns = at;
                    }
                }
                // Where its latest attempt ran: the ANode the row names (stored with the
                // dispatch), else the one the state remembers, else where it was placed.
                let anode = t.executed.and_then(|n| self.nodes.get(n as usize));
                info.executed_node = match (anode, self.executed.get(&t.id)) {
                    (Some(name), _) => name.clone(),
                    (None, Some((at, name))) if *at == t.attempt => name.clone(),
                    _ => info.node.clone(),
                };
                if let Some(nodes) = multi_node.get(&t.id) {
                    info.nodes = nodes
                        .iter()
                        .map(|&n| self.nodes.get(n as usize).cloned().unwrap_or_default())
                        .collect();
                }
                info
            })
            .collect();
        Ok(TasksPage {
            tasks,
            next_cursor,
            total: self.total,
        })
    }
}

/// A task of `app` stopped holding resources. Under `max_running` that may let one of its
/// pending tasks run on any node it fits on — not only the one whose heartbeat reported the end
/// (that one's reply may carry it; another may be waiting in a held call, with free cores).
fn throttle_opened(cx: &mut Ctx, app: AppId) {
    if let Some(s) = cx.view.get_app(app)
        && s.app.max_running > 0
        && !s.pending.is_empty()
    {
        cx.nodes.wakes.free(app.0, 1);
    }
}

/// What one task of application `app`'s CPU and GPU variants holds in the view, (cores,
/// memory bytes); `None`: no such variant.
/// The accelerator kind application `app`'s GPU variant takes (`None`: any, or no GPU variant).
fn gpu_kind_of(view: &hetsched_core::SchedulerView, app: u32) -> Option<String> {
    view.get_app(AppId(app))
        .and_then(|a| a.app.gpu.as_ref())
        .and_then(|g| g.kind.clone())
}

fn requests_of(view: &hetsched_core::SchedulerView, app: u32) -> [Option<Resources>; 2] {
    [Variant::Cpu, Variant::Gpu].map(|v| view.get_app(AppId(app)).and_then(|a| a.app.request(v)))
}

/// Running task `t` as the view placed it: what it holds is in `holds` if an update changed its
/// application's request since, else that request.
fn assignment_of(
    view: &hetsched_core::SchedulerView,
    holds: &HashMap<u64, Resources>,
    t: &TaskRow,
) -> Assignment {
    let variant = variant_of(t.variant);
    let request = holds.get(&t.id).copied().unwrap_or_else(|| {
        view.get_app(AppId(t.app))
            .and_then(|a| a.app.request(variant))
            .unwrap_or_default()
    });
    Assignment {
        task: TaskId(t.id),
        app: AppId(t.app),
        node: NodeId(t.node.unwrap_or(0)),
        variant,
        devices: t.devices.to_vec(),
        request,
    }
}

impl Batch {
    /// Task `id` ended (or runs no more): its node got back what it held.
    fn drop_hold(&mut self, id: u64) {
        if self.holds.remove(&id).is_some() {
            self.holds_changed.push(id);
        }
    }

    /// The policy fills node `nid`: each decision goes to the reply, what the reply has no room
    /// for back to the front of its queue (then `true`: the agent beats again at once). With
    /// `prefetch`, the policy sees the node with more free cores; tasks placed beyond its real
    /// free cores are queued by the agent (crate::state::prefetch). Under "auto" the policy
    /// first fills the node's free cores as with prefetch off, then the loan, which is sized for
    /// the shortest measured pending variant; each task placed in it must be of a variant
    /// measured short and fit the time budget of the node's cores that free up soon — those its
    /// tasks measured short hold, running or placed now ([`AutoQueue`]): a short task is never
    /// queued behind long (or unmeasured) work. The first placement the queue refuses ends the
    /// decision on the node ([`hetsched_core::model::SchedulerView::open_queue`]): the refused
    /// task gets one of the node's next free cores, not a place behind the queue. (Two
    /// decisions in one beat: `hdas-hetero` counts the node's readers at each.)
    fn fill(&mut self, cx: &mut Ctx, nid: NodeId, out: &mut Outbox) -> bool {
        // What was sent queued and has since ended, been re-queued or sent again is forgotten.
        if let Some(q) = self.sent_queued.get_mut(&nid.0) {
            let tasks = &self.tasks;
            q.retain(|&(id, attempt)| {
                tasks.get(id as usize).is_some_and(|t| {
                    t.state == TaskState::Running && t.attempt == attempt && t.node == Some(nid.0)
                })
            });
            if q.is_empty() {
                self.sent_queued.remove(&nid.0);
            }
        }
        let (lend, auto) = match cx.nodes.prefetch.setting() {
            Setting::Cores(n) => (n, None),
            Setting::Auto => {
                let node_cores = cx.view.node(nid).node.cores;
                let mut queue = AutoQueue::draining(node_cores);
                queue.drain_through(self.short_cores_on(cx, nid));
                // What the waiting applications with a variant measured short measured (any
                // other may not be queued): the loan is sized for the shortest, and each
                // placement is admitted by its own. Kept small where many jobs wait unmeasured.
                let run_times: BTreeMap<u32, [RunTimes; 2]> = cx
                    .view
                    .pending_apps()
                    .filter_map(|p| {
                        let r = self.apps.get(p.app.id.index())?;
                        let rts = r.observed.map(|o| o.run_times());
                        rts.iter().any(RunTimes::short).then_some((p.app.id.0, rts))
                    })
                    .collect();
                let depth = run_times
                    .values()
                    .flatten()
                    .map(|rt| rt.depth())
                    .max()
                    .unwrap_or(0);
                (depth * node_cores, Some(AutoAdmission { queue, run_times }))
            }
        };
        let start = Instant::now();
        // Each placement, with whether it lies beyond the node's free cores (queued there).
        let mut placed: Vec<(Assignment, bool)> = Vec::new();
        let beyond =
            |placed: &mut Vec<(Assignment, bool)>, decisions: Vec<Assignment>, free: u32| {
                let mut used = 0u32;
                for a in decisions {
                    let cores = a.request.cores;
                    placed.push((a, used + cores > free));
                    used += cores;
                }
            };
        let credit = match auto {
            Some(mut admission) if lend > 0 => {
                // Under "auto" the node's free cores are filled first, as with prefetch off: a
                // task that would fit only in the loan does not keep a free core from what
                // fits it now.
                let own = cx.nodes.prefetch.open(cx.view, nid, 0);
                if own.free > 0 {
                    for a in self.policy.on_node_update(cx.view, nid, cx.now) {
                        admission.admit(a.app, a.variant, a.request.cores, false);
                        placed.push((a, false));
                    }
                }
                cx.nodes.prefetch.close(cx.view, nid, own);
                // Then the loan, each placement in it admitted by the queue (AutoAdmission);
                // the first it refuses ends the decision, so nothing is queued ahead of a task
                // the policy ranked first but which may not wait in a queue.
                let credit = cx.nodes.prefetch.open(cx.view, nid, lend);
                if credit.lent > 0 {
                    cx.view.open_queue(nid, credit.free, Box::new(admission));
                    let decisions = self.policy.on_node_update(cx.view, nid, cx.now);
                    cx.view.close_queue();
                    beyond(&mut placed, decisions, credit.free);
                }
                credit
            }
            _ => {
                let credit = cx.nodes.prefetch.open(cx.view, nid, lend);
                let decisions = self.policy.on_node_update(cx.view, nid, cx.now);
                beyond(&mut placed, decisions, credit.free);
                credit
            }
        };
        cx.metrics.decision(start.elapsed());
        let mut deferred: Vec<Assignment> = Vec::new();
        for (a, prefetched) in placed {
            if !deferred.is_empty() || !self.offer_task(cx, &a, prefetched, out) {
                deferred.push(a);
            }
        }
        if !deferred.is_empty() {
            // The last first, so they keep their order at the front of their queues.
            for a in deferred.iter().rev() {
                cx.view.requeue(a);
            }
            info!(
                node = nid.0,
                deferred = deferred.len(),
                "reply size cap reached; the rest goes on the next heartbeat"
            );
            out.more();
        }
        cx.nodes.prefetch.close(cx.view, nid, credit);
        !deferred.is_empty()
    }

    /// What application `app`'s tasks of `variant` measured (no samples: not short).
    fn run_times(&self, app: u32, variant: Variant) -> RunTimes {
        self.apps
            .get(app as usize)
            .map_or_else(RunTimes::default, |r| {
                r.observed[variant_code(variant) as usize].run_times()
            })
    }

    /// Cores that node `nid`'s running batch tasks of variants measured short hold (tasks
    /// queued there included): the cores a queue there drains through.
    fn short_cores_on(&self, cx: &Ctx, nid: NodeId) -> u32 {
        cx.nodes.get(nid.0).map_or(0, |rec| {
            rec.running
                .iter()
                .filter(|&&id| Kind::of(id) == Some(Kind::Batch))
                .filter_map(|&id| self.tasks.get(id as usize))
                .filter(|t| t.state == TaskState::Running)
                .map(|t| assignment_of(cx.view, &self.holds, t))
                .filter(|a| self.run_times(a.app.0, a.variant).short())
                .map(|a| a.request.cores)
                .sum()
        })
    }

    /// Offers the task `a` placed to the reply (with its spec the first time the node needs it)
    /// and records it as running; `false`: the reply has no room for it (nothing changed).
    fn offer_task(
        &mut self,
        cx: &mut Ctx,
        a: &Assignment,
        prefetched: bool,
        out: &mut Outbox,
    ) -> bool {
        let Some(t) = self.tasks.get(a.task.0 as usize) else {
            return true;
        };
        let key = self.spec_key_of(a.app.0, a.variant);
        let d = Dispatch {
            task_id: t.id,
            attempt: t.attempt + 1,
            index: t.index,
            devices: a.devices.clone(),
            spec: key,
            workflow: None,
            cores: a.request.cores,
            prefetched,
            nodes: Vec::new(),
            // The task's position in its application (its index may come from `indices`).
            entry: self.apps.get(a.app.index()).and_then(|r| {
                let e = r.entries.as_ref()?;
                e.get(usize::try_from(t.id.checked_sub(r.first_task)?).ok()?)
                    .cloned()
            }),
            job_id: self.apps.get(a.app.index()).map_or(0, |r| r.job),
            job_nonce: 0,
        };
        let spec = out
            .needs_spec(key)
            .then(|| self.task_spec(a.app.0, a.variant));
        if out.offer(d, spec).is_err() {
            return false;
        }
        self.mark_running(cx, a);
        if prefetched && let Some(t) = self.tasks.get(a.task.0 as usize) {
            self.sent_queued
                .entry(a.node.0)
                .or_default()
                .push_back((t.id, t.attempt));
        }
        true
    }

    /// The batch tasks running on node `n` that preemption may stop ([`Batch::preempt`]), with
    /// when each was sent.
    fn preemption_candidates(
        &self,
        view: &hetsched_core::SchedulerView,
        nodes: &crate::state::nodes::Nodes,
        n: NodeId,
    ) -> Vec<Candidate> {
        let (tasks, holds, sent_queued) = (&self.tasks, &self.holds, &self.sent_queued);
        let mut on = nodes.get(n.0).map_or_else(Vec::new, |rec| {
            rec.running
                .iter()
                .filter(|&&id| Kind::of(id) == Some(Kind::Batch))
                .filter_map(|&id| tasks.get(id as usize))
                .filter(|t| t.state == TaskState::Running && t.node == Some(n.0))
                .map(|t| Candidate {
                    running: assignment_of(view, holds, t),
                    started: t.started_ns,
                })
                .collect::<Vec<_>>()
        });
        // Tasks its agent still holds in its queue (prefetched beyond its free cores)
        // hold no core: stopping one would free nothing. The agent starts its queue in
        // the order it was sent, so they are the last sent prefetched, as many cores'
        // worth as the node owes (a debt that counts other kinds' queued work too only
        // spares more). After a restart, which were sent prefetched is not known: the
        // last sent.
        let mut owed = nodes.prefetch.debt(n);
        if owed > 0 {
            on.sort_by_key(|c| std::cmp::Reverse((c.started, c.running.task.0)));
            let mut queued = HashSet::new();
            let sent = sent_queued.get(&n.0).into_iter().flatten().rev();
            for &(id, _) in sent {
                if owed == 0 {
                    break;
                }
                if let Some(c) = on.iter().find(|c| c.running.task.0 == id) {
                    queued.insert(id);
                    owed = owed.saturating_sub(c.running.request.cores);
                }
            }
            for c in &on {
                if owed == 0 {
                    break;
                }
                if queued.insert(c.running.task.0) {
                    owed = owed.saturating_sub(c.running.request.cores);
                }
            }
            on.retain(|c| !queued.contains(&c.running.task.0));
        }
        on
    }

    /// Priority preemption on node `nid` (`preemption = "requeue"`; the rule is
    /// [`hetsched_core::policy::batch::preempt`]): stops the lower-priority tasks the rule
    /// names — re-queued at once, their agent told in this reply to kill them (their kill
    /// grace, then SIGKILL) — and places the waiting task on the room they leave, in this
    /// reply too (the agent starts it once the stopped tasks' cores are free, before the tasks
    /// it holds prefetched). Tasks the agent still holds in its queue are never stopped: they
    /// hold no core. Returns whether it preempted.
    fn preempt(&mut self, cx: &mut Ctx, nid: NodeId, out: &mut Outbox) -> bool {
        let choice = {
            let (view, nodes) = (&*cx.view, &*cx.nodes);
            let running = |n: NodeId| self.preemption_candidates(view, nodes, n);
            let rules = Rules {
                exempt: self.preempt_exempt,
                variants: self.policy.variants(),
            };
            // Drained, stopping and departed nodes get no work: they neither hold room for
            // waiting work nor preempt for it.
            let takes_work = |n: NodeId| {
                nodes
                    .get(n.0)
                    .is_some_and(crate::state::nodes::NodeRec::takes_work)
            };
            preempt_on(view, nid, cx.now, &rules, takes_work, running)
        };
        let Some(p) = choice else {
            return false;
        };
        let (job, app_name, priority) = self.apps.get(p.app.index()).map_or_else(
            || (0, String::new(), 0),
            |r| (r.job, r.name.clone(), cx.view.app(p.app).app.priority),
        );
        let why = format!(
            "preempted for job {job} (`{app_name}`, priority {priority}), which fitted nowhere"
        );
        for v in &p.victims {
            if let Some(stopped) = self.preempt_task(cx, v.running.task.0, &why) {
                out.kill(stopped);
            }
        }
        info!(
            node = %cx.nodes.name(nid.0),
            job,
            app = %app_name,
            stopped = p.victims.len(),
            "lower-priority tasks preempted for waiting work"
        );
        match cx.view.assign(p.app, nid, p.variant) {
            Some(a) => {
                if !self.offer_task(cx, &a, false, out) {
                    cx.view.requeue(&a);
                    out.more();
                }
            }
            // Cannot happen: the rule checked that the task fits once they stop. The stopped
            // tasks run again; the node is filled as usual.
            None => warn!(
                node = nid.0,
                job, "a preempted node has no room for the task it was preempted for"
            ),
        }
        true
    }

    /// Stops running task `id` for work of a higher priority: it goes back to the front of its
    /// queue at once (what it held comes back to its node) with `why` as its message, and the
    /// attempt counts neither as a failure nor as lost. Returns the attempt its agent must kill.
    fn preempt_task(&mut self, cx: &mut Ctx, id: u64, why: &str) -> Option<TaskRef> {
        let t = self.tasks.get(id as usize)?;
        if t.state != TaskState::Running {
            return None;
        }
        let a = assignment_of(cx.view, &self.holds, t);
        self.drop_hold(id);
        cx.nodes.ended(a.node, id);
        let t = &mut self.tasks[id as usize];
        let stopped = TaskRef {
            task_id: id,
            attempt: t.attempt,
        };
        moved(&mut self.apps, t.app, t.state, TaskState::Pending);
        t.state = TaskState::Pending;
        t.preemptions += 1;
        t.message = format!("attempt {} {why}; it runs again", t.attempt);
        t.reason = Some(EndReason::Preempted);
        t.signal = None;
        self.dirty.push(id);
        cx.metrics.preempted();
        self.requeue(cx, &a);
        throttle_opened(cx, a.app);
        Some(stopped)
    }

    /// Records task `a.task` as running where `a` placed it (its row, its node's registry).
    fn mark_running(&mut self, cx: &mut Ctx, a: &Assignment) {
        let started = cx.now.max(self.last_dispatch_ns + 1);
        let Some(t) = self.tasks.get_mut(a.task.0 as usize) else {
            return;
        };
        self.last_dispatch_ns = started;
        moved(&mut self.apps, t.app, t.state, TaskState::Running);
        t.state = TaskState::Running;
        t.attempt += 1;
        t.node = Some(a.node.0);
        t.variant = Some(variant_code(a.variant));
        t.devices = a.devices.as_slice().into();
        t.started_ns = started;
        // Where it is offloaded to, if it is, is noted once the state knows ([`Batch::offloaded`]).
        t.executed = None;
        t.finished_ns = 0;
        t.exit_code = None;
        // Running: no reason until this attempt ends (a retry's, a loss's, goes now).
        t.reason = None;
        t.signal = None;
        let app = t.app;
        cx.nodes.started(a.node, t.id);
        self.dirty.push(t.id);
        cx.metrics.dispatched(a.variant);
        self.maybe_first_start(app);
    }

    /// Starts the next task of multi-node application `app` on the gathered nodes `held`
    /// (`nid`, the node beating, first): its command runs on `nid` with the others' host names.
    /// A reply without room for it gives the nodes back (the next beat gathers again).
    fn start_multi_node(
        &mut self,
        cx: &mut Ctx,
        nid: NodeId,
        app: AppId,
        held: Vec<hetsched_core::Held>,
        out: &mut Outbox,
    ) {
        let ids: Vec<u32> = held.iter().map(|h| h.node.0).collect();
        let a = match cx.view.start_multi_node(app, held) {
            Ok(a) => a,
            Err(held) => {
                for h in &held {
                    cx.view.give_back(h);
                }
                return;
            }
        };
        let Some(t) = self.tasks.get(a.task.0 as usize) else {
            cx.view.requeue(&a);
            return;
        };
        let key = self.spec_key_of(app.0, Variant::Cpu);
        let d = Dispatch {
            task_id: t.id,
            attempt: t.attempt + 1,
            index: t.index,
            devices: Vec::new(),
            spec: key,
            workflow: None,
            cores: cx.view.node(nid).node.cores,
            prefetched: false,
            nodes: ids
                .iter()
                .map(|&n| {
                    let name = cx.nodes.name(n).to_string();
                    crate::state::types::DispatchNode {
                        host: cx
                            .nodes
                            .get(n)
                            .map_or_else(|| name.clone(), |r| r.host().to_string()),
                        cores: cx.view.node(NodeId(n)).node.cores,
                        name,
                    }
                })
                .collect(),
            entry: self.apps.get(app.index()).and_then(|r| {
                let e = r.entries.as_ref()?;
                e.get(usize::try_from(t.id.checked_sub(r.first_task)?).ok()?)
                    .cloned()
            }),
            job_id: self.apps.get(app.index()).map_or(0, |r| r.job),
            job_nonce: 0,
        };
        let spec = out
            .needs_spec(key)
            .then(|| self.task_spec(app.0, Variant::Cpu));
        if out.offer(d, spec).is_err() {
            cx.view.requeue(&a);
            out.more();
            return;
        }
        info!(
            task = a.task.0,
            nodes = ?ids.iter().map(|&n| cx.nodes.name(n)).collect::<Vec<_>>(),
            "multi-node task started"
        );
        self.mark_running(cx, &a);
        // The other nodes hear at once that they hold cores for it (`member_of`): an idle
        // agent beats seldom, and its idle timeout would otherwise end it under the task.
        for &n in ids.get(1..).unwrap_or_default() {
            cx.nodes.wakes.node(n);
        }
        self.multi.running.insert(a.task.0, ids);
    }

    /// Whether a multi-node task's gathering holds node `nid` whole.
    pub fn held_for_gathering(&self, nid: NodeId) -> bool {
        self.any_multi_node && self.multi.gathering_holding(nid).is_some()
    }

    /// The running multi-node tasks (task and attempt) node `node` is a member of without
    /// running their command: told to its agent in every heartbeat reply, and counted among
    /// what runs there when it is drained or stopped.
    pub fn multi_node_member_of(&self, node: u32) -> Vec<TaskRef> {
        self.multi
            .member_of(node)
            .into_iter()
            .filter_map(|id| {
                let t = self.tasks.get(id as usize)?;
                (t.state == TaskState::Running).then_some(TaskRef {
                    task_id: id,
                    attempt: t.attempt,
                })
            })
            .collect()
    }

    /// Running multi-node tasks one of whose other nodes died, left or was removed: lost (they
    /// run again), and the agent of their first node is told to kill them.
    pub fn lose_broken_multi_node(&mut self, cx: &mut Ctx) -> Result<(), StateError> {
        for (task, node) in self.multi.broken(cx) {
            let root = self
                .multi
                .running
                .remove(&task)
                .and_then(|n| n.first().copied());
            self.on_lost(
                cx,
                task,
                &format!("node `{node}` of the multi-node task is gone"),
            )?;
            if let Some(root) = root {
                cx.nodes.wakes.node(root);
            }
        }
        Ok(())
    }
}

impl JobKind for Batch {
    fn kind(&self) -> Kind {
        Kind::Batch
    }

    /// A result from node `nid`: success, a retry, a failure for good, or (interrupted by its
    /// agent's shutdown) a loss.
    fn on_result(&mut self, cx: &mut Ctx, nid: NodeId, r: &TaskResult) -> Result<(), StateError> {
        // A stopped attempt's process ended, whatever became of its task since (resubmitted).
        if !self.stopping.is_empty()
            && let Some(job) = self.stopping.ended(nid.0, r.task_id, r.attempt)
        {
            self.stopped(job);
        }
        let Some(t) = self.tasks.get(r.task_id as usize) else {
            return Ok(());
        };
        if t.attempt != r.attempt || t.node != Some(nid.0) {
            return Ok(()); // an old attempt: acknowledged, ignored
        }
        // The result of an attempt given up for lost while its node was out of touch, whose
        // task waits still: taken, as if the loss had not been (an interrupted attempt is a
        // loss again, and one killed at the server's word was not wanted).
        let taken_back = t.state == TaskState::Pending
            && !r.interrupted
            && !matches!(r.reason, Some(EndReason::Lost | EndReason::Cancelled))
            && self.resume(cx, nid, r.task_id, r.attempt);
        let t = &self.tasks[r.task_id as usize];
        match t.state {
            TaskState::Running => {}
            // Sent again after a commit failed: write the row again (idempotent).
            TaskState::Succeeded | TaskState::Failed => {
                self.dirty.push(t.id);
                return Ok(());
            }
            // The attempt a cancel stopped: what it used until it ended is kept, as `sacct`
            // shows a cancelled job's usage, and so is when its process ended — after the
            // cancel, by the time its SIGTERM handler took (up to the kill grace), as a time
            // limit's end is its process's.
            TaskState::Cancelled
                if t.usage.is_none() && (r.usage.is_some() || r.finished_ns > 0) =>
            {
                let t = &mut self.tasks[r.task_id as usize];
                if r.finished_ns > t.finished_ns {
                    t.finished_ns = r.finished_ns;
                }
                t.usage = r.usage.map(Box::new);
                let app = t.app;
                self.dirty.push(r.task_id);
                self.account(app, None, r.usage.as_ref());
                cx.metrics.used(r.usage.as_ref());
                return Ok(());
            }
            _ => return Ok(()),
        }
        if r.interrupted && !r.success {
            // Killed because its agent shut down: not the task's failure; it runs again, as a
            // lost task does.
            let reason = if r.message.is_empty() {
                "its agent shut down".to_string()
            } else {
                r.message.clone()
            };
            // An agent's clean shutdown is an operator's act (`systemctl restart`, `node
            // stop`, its `--time-limit`): it counts against `max_attempts` no more than a
            // preemption does, or restarting an agent three times would fail its tasks. A
            // node that dies without a word, and an offload its ANode refused or broke (also
            // `interrupted`, with their own words), still count ([`Self::on_lost`]).
            if r.message.starts_with(hetsched_proto::SHUTDOWN_KILLED) {
                self.tasks[r.task_id as usize].interruptions += 1;
            }
            return self.on_lost(cx, r.task_id, &reason);
        }
        let a = assignment_of(cx.view, &self.holds, t);
        self.drop_hold(r.task_id);
        if self
            .backoff
            .result(a.app.0, nid.0, r.start_failed, r.success, Instant::now())
            == Change::BackedOff
        {
            cx.view.set_excluded(a.app, nid, true);
            self.store_backoff(cx, a.app.0, nid.0, true);
            warn!(
                node = %cx.nodes.name(nid.0),
                app = %self.apps.get(a.app.index()).map_or("?", |x| x.name.as_str()),
                "consecutive start failures: the application is kept off this node for a while"
            );
        }
        cx.nodes.ended(nid, r.task_id);
        let t = &mut self.tasks[r.task_id as usize];
        if r.started_ns > 0 {
            t.started_ns = r.started_ns;
        }
        // Offloaded: it ran on its ANode's devices from its start there (the view's booking,
        // released above, was the NNode's; what the result does not say, or says wrong, stays
        // the dispatch's).
        if let Some(anode) = t.executed {
            let ran = super::offload_run(cx.nodes, anode, t.devices.len(), r);
            if let Some(started) = ran.started_ns {
                t.started_ns = started;
            }
            if let Some(devices) = ran.devices {
                t.devices = devices.into();
            }
        }
        t.finished_ns = r.finished_ns.max(t.started_ns);
        t.exit_code = Some(r.exit_code);
        t.message = r.message.clone();
        // None on a success; a retry keeps this attempt's until its next dispatch.
        t.reason = r.reason;
        t.signal = r.signal.clone();
        let (app, old) = (t.app, t.usage.take());
        t.usage = r.usage.map(Box::new);
        self.dirty.push(t.id);
        self.account(app, old.as_deref(), r.usage.as_ref());
        cx.metrics.used(r.usage.as_ref());
        let t = &mut self.tasks[r.task_id as usize];
        if r.success {
            moved(&mut self.apps, t.app, t.state, TaskState::Succeeded);
            t.state = TaskState::Succeeded;
            cx.metrics.result(Outcome::Succeeded);
            let (app, d, index) = (t.app, t.finished_ns - t.started_ns, t.index);
            self.corr_ended(app, index);
            cx.view.task_finished(&a);
            self.task_ended(a.app.0);
            self.observe(cx, app, a.variant, d)?;
        } else {
            let retries = self.apps.get(t.app as usize).map_or(0, |app| app.retries);
            if t.failures < retries {
                t.failures += 1;
                moved(&mut self.apps, t.app, t.state, TaskState::Pending);
                t.state = TaskState::Pending;
                t.message = format!(
                    "attempt {} failed ({}); retry {} of {retries}",
                    t.attempt,
                    if r.message.is_empty() {
                        format!("exit code {}", r.exit_code)
                    } else {
                        r.message.clone()
                    },
                    t.failures
                );
                self.requeue(cx, &a);
                cx.metrics.result(Outcome::Retried);
            } else {
                moved(&mut self.apps, t.app, t.state, TaskState::Failed);
                t.state = TaskState::Failed;
                let index = t.index;
                cx.view.task_abandoned(&a);
                self.task_ended(a.app.0);
                self.corr_ended(a.app.0, index);
                cx.metrics.result(Outcome::Failed);
            }
        }
        if taken_back {
            let name = cx.nodes.name(nid.0);
            let t = &mut self.tasks[r.task_id as usize];
            let note = format!(
                "node `{name}` came back with this attempt's result after it was given up for lost"
            );
            t.message = if t.message.is_empty() {
                note
            } else {
                format!("{}; {note}", t.message)
            };
            info!(
                node = %name,
                task = r.task_id,
                attempt = r.attempt,
                success = r.success,
                "the result of an attempt given up for lost came back with its node: taken"
            );
        }
        throttle_opened(cx, a.app);
        Ok(())
    }

    fn offloaded(&mut self, task: u64, attempt: u32, anode: u32) {
        if let Some(t) = self.tasks.get_mut(task as usize)
            && t.state == TaskState::Running
            && t.attempt == attempt
            && t.executed != Some(anode)
        {
            t.executed = Some(anode);
            self.dirty.push(task);
        }
    }

    fn job_of_task(&self, task: u64) -> Option<u64> {
        let app = self.apps.get(self.tasks.get(task as usize)?.app as usize)?;
        // As its task spec names it (`task_spec`), whose `job_id` gives its `run_as`.
        Some(self.job_rec(app.job).map_or(app.job, |j| j.row.id))
    }

    fn offloaded_to(&self, task: u64) -> Option<(u32, u32)> {
        let t = self.tasks.get(task as usize)?;
        Some((t.attempt, t.executed?))
    }

    fn dispatched_spec(&self, task: u64, key: u64) -> Option<TaskSpec> {
        let app = self.tasks.get(task as usize)?.app;
        // The variant whose current key the dispatch named (it was made in this heartbeat).
        [Variant::Gpu, Variant::Cpu]
            .into_iter()
            .find(|&v| self.spec_key_of(app, v) == key)
            .map(|v| self.task_spec(app, v))
    }

    fn expects(&self, nid: NodeId, rt: &RunningTask) -> bool {
        self.tasks.get(rt.task_id as usize).is_some_and(|t| {
            t.state == TaskState::Running && t.attempt == rt.attempt && t.node == Some(nid.0)
        })
    }

    /// Only a single-node task run where it was placed (not offloaded to an ANode), pending
    /// since its loss with this very attempt the latest: the next dispatch would have made
    /// the next attempt. A row reads so only after [`Batch::on_lost`] (a result's reason is
    /// never `lost` where it is taken back, and a failure's retry keeps the result's reason),
    /// so a stored row says it across a restart too.
    fn resumable(&self, nid: NodeId, task: u64, attempt: u32) -> bool {
        Kind::of(task) == Some(Kind::Batch)
            && self.tasks.get(task as usize).is_some_and(|t| {
                t.state == TaskState::Pending
                    && t.reason == Some(EndReason::Lost)
                    && attempt > 0
                    && t.attempt == attempt
                    && t.node == Some(nid.0)
                    && t.executed.is_none()
                    && self.apps.get(t.app as usize).is_some_and(|a| a.nodes <= 1)
            })
    }

    /// Running again on its node as the same attempt: out of its queue (or its held job's
    /// waiting tasks), its request booked in the view; the loss no longer counts, since
    /// attempts are counted at dispatch. Refused, and so killed, where the view has no room
    /// for it (work placed on the node since, which a dead node does not get).
    fn resume(&mut self, cx: &mut Ctx, nid: NodeId, task: u64, attempt: u32) -> bool {
        if !self.resumable(nid, task, attempt) {
            return false;
        }
        let a = assignment_of(cx.view, &self.holds, &self.tasks[task as usize]);
        let name = cx.nodes.name(nid.0).to_string();
        if !cx.view.resume(&a) {
            warn!(
                node = %name,
                task,
                attempt,
                "an attempt given up for lost runs on where its node came back, but the node has no room for it now: killed"
            );
            return false;
        }
        let job = self.apps.get(a.app.index()).map_or(0, |r| r.job);
        self.waiting.drop_tasks(job, &HashSet::from([a.task]));
        let t = &mut self.tasks[task as usize];
        moved(&mut self.apps, t.app, t.state, TaskState::Running);
        t.state = TaskState::Running;
        t.reason = None;
        t.message = format!("attempt {attempt} taken back: node `{name}` came back running it");
        cx.nodes.started(nid, task);
        self.dirty.push(task);
        info!(
            node = %name,
            task,
            attempt,
            "an attempt given up for lost runs on where its node came back: taken back"
        );
        true
    }

    fn whereabouts(
        &self,
        nodes: &crate::state::nodes::Nodes,
        nid: NodeId,
        task: u64,
        attempt: u32,
    ) -> Option<String> {
        let t = self.tasks.get(task as usize)?;
        let same = t.attempt == attempt && t.node == Some(nid.0);
        let on = |n: Option<u32>| n.map_or("?", |n| nodes.name(n));
        match t.state {
            TaskState::Running | TaskState::Succeeded | TaskState::Failed if same => None,
            // This attempt failed and waits for its retry.
            TaskState::Pending if same && t.reason != Some(EndReason::Lost) => None,
            TaskState::Running => {
                Some(format!("runs on `{}` as attempt {}", on(t.node), t.attempt))
            }
            TaskState::Pending => Some("waits to run again".into()),
            TaskState::Succeeded => Some(format!(
                "succeeded on `{}` as attempt {}",
                on(t.node),
                t.attempt
            )),
            TaskState::Failed => Some(format!("failed as attempt {}", t.attempt)),
            TaskState::Cancelled => Some("cancelled".into()),
        }
    }

    fn held(
        &self,
        view: &hetsched_core::SchedulerView,
        task: u64,
    ) -> Option<(Option<u32>, Resources)> {
        let t = self.tasks.get(task as usize)?;
        if t.state != TaskState::Running || self.multi.running.contains_key(&task) {
            return None;
        }
        let a = assignment_of(view, &self.holds, t);
        Some((view.get_app(a.app).and_then(|s| s.group), a.request))
    }

    /// A running task was lost: re-queue it with the next attempt, or fail it at the limit.
    fn on_undelivered(&mut self, cx: &mut Ctx, task: u64) -> Result<(), StateError> {
        // Never started: counted against `max_attempts` no more than an agent's clean shutdown.
        match self.tasks.get_mut(task as usize) {
            Some(t) if t.state == TaskState::Running => t.interruptions += 1,
            _ => return Ok(()),
        }
        self.on_lost(cx, task, crate::state::UNDELIVERED)
    }

    fn on_lost(&mut self, cx: &mut Ctx, task: u64, reason: &str) -> Result<(), StateError> {
        let Some(t) = self.tasks.get(task as usize) else {
            return Ok(());
        };
        if t.state != TaskState::Running {
            return Ok(());
        }
        let a = assignment_of(cx.view, &self.holds, t);
        self.drop_hold(task);
        cx.nodes.ended(a.node, task);
        let max = self.max_attempts;
        let t = &mut self.tasks[task as usize];
        self.dirty.push(task);
        cx.metrics.lost(crate::metrics::Lost::Node);
        // Pending again, or given up on: either way its node or agent lost it.
        t.reason = Some(EndReason::Lost);
        t.signal = None;
        // Failed attempts were retried on purpose, preempted ones were stopped for other work
        // and interrupted ones by their agent's clean shutdown; only lost ones count against
        // `max_attempts`.
        if t.attempt
            .saturating_sub(t.failures)
            .saturating_sub(t.preemptions)
            .saturating_sub(t.interruptions)
            >= max
        {
            moved(&mut self.apps, t.app, t.state, TaskState::Failed);
            t.state = TaskState::Failed;
            t.finished_ns = cx.now;
            t.exit_code = None;
            t.message = format!(
                "{reason}; gave up after {}",
                hetsched_core::text::count(t.attempt, "attempt")
            );
            let index = t.index;
            cx.view.task_abandoned(&a);
            self.task_ended(a.app.0);
            self.corr_ended(a.app.0, index);
            // In this event, not at the next heartbeat: a purge in between would hide how the
            // job ended from the jobs waiting on it.
            self.settle_waiting(cx)?;
        } else {
            moved(&mut self.apps, t.app, t.state, TaskState::Pending);
            t.state = TaskState::Pending;
            t.message = format!("attempt {} lost: {reason}", t.attempt);
            self.requeue(cx, &a);
        }
        Ok(())
    }

    /// The node's I/O figures go to the view, expired back-offs are lifted, and the policy
    /// fills the node. Each application variant's command and environment go to a node once
    /// (the agent lists the specs it holds); what the policy decided beyond the reply's budget
    /// goes back to the front of its queues for the next beat.
    fn on_heartbeat(
        &mut self,
        cx: &mut Ctx,
        nid: NodeId,
        report: &HeartbeatReport,
        open: bool,
        out: &mut Outbox,
    ) -> Result<(), StateError> {
        // What was stopped on this node and is neither listed running nor reported (its
        // result came above) has no process left.
        if self.stopping.on_node(nid.0) {
            let running: HashSet<(u64, u32)> = report
                .running
                .iter()
                .map(|rt| (rt.task_id, rt.attempt))
                .collect();
            for job in self.stopping.beat(nid.0, &running) {
                self.stopped(job);
            }
        }
        // Results just recorded may have completed a job others run after.
        self.settle_waiting(cx)?;
        let mut total_io = 0.0;
        let mut io_tasks = 0;
        for rt in &report.running {
            if Kind::of(rt.task_id) != Some(Kind::Batch) || !self.expects(nid, rt) {
                continue;
            }
            let t = &self.tasks[rt.task_id as usize];
            let (app, variant) = (t.app, variant_of(t.variant));
            let Some(rec) = self.apps.get(app as usize) else {
                continue;
            };
            let remaining = rec.split_bytes.saturating_sub(rt.read_bytes);
            if remaining > 0 {
                total_io += remaining as f64;
                io_tasks += 1;
            }
            // Its spec changed since it was sent (`hetsched update --time-limit`): told at
            // every beat until the agent reports the task under the new key.
            let key = spec_key(app, variant, rec.spec_generation);
            if rt.spec.is_some_and(|held| held != key) {
                let spec = out.needs_spec(key).then(|| self.task_spec(app, variant));
                out.respec(
                    crate::state::types::Respec {
                        task_id: rt.task_id,
                        attempt: rt.attempt,
                        spec: key,
                    },
                    spec,
                );
            }
        }
        cx.view.node_report(
            nid,
            NodeReport {
                total_io_bytes: total_io,
                io_tasks,
            },
        )?;
        for app in self.backoff.expire(nid.0, Instant::now()) {
            cx.view.set_excluded(AppId(app), nid, false);
            self.store_backoff(cx, app, nid.0, false);
            info!(
                node = nid.0,
                app, "start-failure back-off over: the node is tried again"
            );
        }
        if self.any_multi_node {
            self.lose_broken_multi_node(cx)?;
            if let Some((app, held)) = self.multi.on_heartbeat(cx, nid) {
                self.start_multi_node(cx, nid, app, held, out);
            }
        }
        // A member runs no process of its task: without this, its agent would see nothing to
        // wait for and leave (idle timeout, `--drain`), and the task would be lost.
        for t in self.multi_node_member_of(nid.0) {
            out.member_of(t);
        }
        // Nor may a node a gathering holds leave at its idle timeout: the gathering would lose
        // it, and wait on for another.
        if self.held_for_gathering(nid) {
            out.held_for_gathering();
        }
        if !open || cx.view.pending_apps().next().is_none() {
            return Ok(());
        }
        let deferred = self.fill(cx, nid, out);
        // Waiting work of a higher priority that fits nowhere may take this node from
        // lower-priority tasks (`preemption = "requeue"`); what room is left is filled again.
        if self.preemption && !deferred && self.preempt(cx, nid, out) {
            self.fill(cx, nid, out);
        }
        Ok(())
    }

    fn has_changes(&self) -> bool {
        !self.stopping.changes().is_empty()
            || !self.dirty.is_empty()
            || !self.cancelled.is_empty()
            || !self.revived.is_empty()
            || !self.held_changed.is_empty()
            || !self.begin_changed.is_empty()
            || !self.settings_changed.is_empty()
            || !self.holds_changed.is_empty()
    }

    fn persist(&self, tx: &rusqlite::Transaction) -> Result<(), StoreError> {
        let mut dirty = self.dirty.clone();
        dirty.sort_unstable();
        dirty.dedup();
        crate::store::write_tasks(
            tx,
            dirty.iter().filter_map(|&t| self.tasks.get(t as usize)),
            &self.cancelled,
        )?;
        crate::store::write_held(tx, &self.held_changed)?;
        crate::store::write_begin(tx, &self.begin_changed)?;
        for &a in &self.settings_changed {
            if let Some(r) = self.apps.get(a as usize) {
                crate::store::write_app_settings(tx, &r.settings(a))?;
            }
        }
        for &id in &self.holds_changed {
            let hold = self.holds.get(&id).and_then(|&request| {
                let t = self.tasks.get(id as usize)?;
                Some(crate::store::TaskHold {
                    task: id,
                    attempt: t.attempt,
                    request,
                })
            });
            crate::store::write_task_hold(tx, id, hold.as_ref())?;
        }
        for &(task, stop) in self.stopping.changes() {
            crate::store::write_task_stop(tx, task, stop)?;
        }
        // A multi-node task's other nodes are stored as its attempt starts.
        for &id in &dirty {
            if let Some(t) = self.tasks.get(id as usize)
                && t.state == TaskState::Running
                && let Some(nodes) = self.multi.running.get(&id)
            {
                crate::store::write_other_nodes(tx, id, nodes.get(1..).unwrap_or_default())?;
            }
        }
        crate::store::forget_finished(tx, &self.revived)
    }

    fn committed(&mut self) {
        self.waiting.ended_in_event = false;
        let tasks = &self.tasks;
        self.multi.running.retain(|&id, _| {
            tasks
                .get(id as usize)
                .is_some_and(|t| t.state == TaskState::Running)
        });
        self.dirty.clear();
        self.cancelled.clear();
        self.held_changed.clear();
        self.begin_changed.clear();
        self.revived.clear();
        self.settings_changed.clear();
        self.holds_changed.clear();
        self.stopping.committed();
    }

    fn housekeeping(&mut self, cx: &mut Ctx) -> Result<(), StateError> {
        // A multi-node task's other node may have been declared dead between its beats.
        self.lose_broken_multi_node(cx)?;
        // Jobs whose begin time has come join the queues (unless held, or waiting for a job).
        self.waiting.begin_until(cx.now / 1_000_000);
        // Tasks lost for good between heartbeats may have ended a job others run after.
        self.settle_waiting(cx)
    }

    fn finished_jobs(&self) -> Vec<(u64, u64)> {
        self.purgeable_jobs()
    }

    fn check_purge(&self, id: u64) -> Result<(), StateError> {
        self.check_purgeable(id)
    }

    fn purge_rows(
        &self,
        tx: &rusqlite::Transaction,
        ids: &[u64],
        budget: &mut u64,
    ) -> Result<(u64, Vec<crate::state::purging::Left>), StoreError> {
        self.delete_purged_rows(tx, ids, budget)
    }

    fn purged(&mut self, cx: &mut Ctx, ids: &[u64]) {
        self.forget_purged(cx, ids);
    }

    fn is_purged(&self, id: u64) -> bool {
        self.retention.is_purged(id)
    }

    fn job_end(&self, id: u64) -> Option<super::JobEnd> {
        self.end_of(id)
    }

    fn stopping(&self, id: u64) -> u32 {
        self.stopping.of_job(id)
    }

    fn ends_in_event(&self) -> bool {
        self.waiting.ended_in_event
    }

    /// A job ended (or runs again, which is rare and costs one early pass): the state plans
    /// the `[retention]` pass. [`JobKind::housekeeping_due`] covers only jobs whose rows are
    /// still in memory, and a job cancelled while held had left memory already.
    fn finished_in_event(&self) -> bool {
        self.waiting.ended_in_event
    }

    fn next_begin(&self) -> Option<Instant> {
        Batch::next_begin(self)
    }

    /// While some job's task rows are in memory (it has not finished, or has just finished and
    /// awaits eviction), the retention pass is due every [`RETENTION_INTERVAL`]. A retention
    /// rule's time running out is not announced: on an idle cluster it is seen within
    /// `alarm::CALM_RECHECK`. A deferred job's begin time is ([`Batch::next_begin`]).
    fn housekeeping_due(&self) -> Option<Instant> {
        let retention = (self.tasks_in_memory() > 0).then(|| self.retention_due());
        match (retention, self.next_begin()) {
            (Some(r), Some(b)) => Some(r.min(b)),
            (r, b) => r.or(b),
        }
    }

    fn counts(&self) -> TaskCounts {
        let mut c = TaskCounts::default();
        for j in self
            .jobs
            .iter()
            .filter(|j| !self.retention.is_purged(j.row.id))
        {
            c.add(&self.job_counts(j));
        }
        c
    }

    fn job_count(&self) -> u64 {
        (self.jobs.len() + self.retention.purged_count()) as u64
    }

    fn purged_count(&self) -> u64 {
        self.retention.purged_count() as u64
    }

    fn job_ids(&self) -> Vec<u64> {
        let mut ids: Vec<u64> = self
            .jobs
            .iter()
            .map(|j| j.row.id)
            .chain(self.retention.purged_ids())
            .collect();
        ids.sort_unstable();
        ids.dedup();
        ids
    }

    fn jobs_page(&self, rd: &Read, cursor: u64, limit: usize) -> JobsPage {
        let start = self.jobs.partition_point(|j| j.row.id < cursor);
        let end = start.saturating_add(limit).min(self.jobs.len());
        JobsPage {
            jobs: self.jobs[start..end]
                .iter()
                .filter(|j| !self.retention.is_purged(j.row.id))
                .map(|j| self.job_info(rd, j, false))
                .collect(),
            next_cursor: if end < self.jobs.len() {
                self.jobs[end].row.id
            } else {
                0
            },
        }
    }

    fn unfinished_tasks(&self, id: u64) -> u64 {
        self.job_rec(id)
            .filter(|j| !self.retention.is_purged(j.row.id))
            .map_or(0, |j| {
                let c = self.job_counts(j);
                c.pending + c.running
            })
    }

    fn stored_bytes(&self, id: u64) -> u64 {
        self.job_rec(id)
            .filter(|j| !self.retention.is_purged(j.row.id))
            .map_or(0, |j| j.text_bytes)
    }

    fn stored_tasks(&self, id: u64) -> u64 {
        self.job_rec(id)
            .filter(|j| !self.retention.is_purged(j.row.id))
            .map_or(0, |j| {
                let c = self.job_counts(j);
                c.pending + c.running + c.succeeded + c.failed + c.cancelled
            })
    }

    fn listed_state(&self, id: u64) -> Option<&str> {
        self.job_rec(id)
            .filter(|j| !self.retention.is_purged(j.row.id))
            .map(|j| shown_state(&self.job_counts(j), j.row.cancelled, j.row.held))
    }

    fn job(&self, rd: &Read, id: u64) -> Result<JobInfo, StateError> {
        self.job_rec(id)
            .filter(|j| !self.retention.is_purged(j.row.id))
            .map(|j| self.job_info(rd, j, true))
            .ok_or(StateError::NoJob(id))
    }

    fn tasks_page(
        &self,
        rd: &Read,
        job: u64,
        cursor: u64,
        limit: usize,
    ) -> Result<TasksPage, StateError> {
        let range = if job == 0 {
            0..self.tasks.len() as u64
        } else {
            self.job_rec(job)
                .filter(|j| !self.retention.is_purged(j.row.id))
                .map(|j| j.tasks.clone())
                .ok_or(StateError::NoJob(job))?
        };
        let start = cursor.clamp(range.start, range.end);
        let end = start.saturating_add(limit as u64).min(range.end);
        // Rows not held in memory come from the store; a page skips purged jobs' ids.
        let (rows, end) = self.rows_for_listing(rd.store, start..end, range.end)?;
        Ok(TasksPage {
            tasks: self.task_infos(rd, &rows)?,
            next_cursor: if end < range.end { end } else { 0 },
            total: range.end - range.start,
        })
    }

    /// Cancels a job: pending tasks are dropped, running ones killed at their nodes' next
    /// heartbeat.
    fn cancel(&mut self, cx: &mut Ctx, job: u64, why: &str) -> Result<u64, StateError> {
        // A job that has ended stays as it ended: marking a completed job cancelled would
        // rewrite what the jobs that ran after it were told (and a restart would then cancel
        // them, running as they are).
        if let Some(j) = self.job_rec(job)
            && !self.retention.is_purged(job)
            && !matches!(self.job_state(j), "pending" | "running")
        {
            return Ok(0);
        }
        let n = self.cancel_job(cx, job, why, EndReason::Cancelled)?;
        // Jobs waiting on this one can never start now.
        self.settle_waiting(cx)?;
        Ok(n)
    }

    fn cancel_tasks(
        &mut self,
        cx: &mut Ctx,
        job: u64,
        app: Option<&str>,
        indices: &[u32],
        why: &str,
    ) -> Result<u64, StateError> {
        self.cancel_some(cx, job, app, indices, why)
    }

    fn unfinished_named(&self, name: &str) -> Vec<u64> {
        self.jobs
            .iter()
            .filter(|j| j.name == name && matches!(self.job_state(j), "pending" | "running"))
            .map(|j| j.row.id)
            .collect()
    }

    fn running_attempts(
        &self,
        job: u64,
        app: Option<&str>,
        indices: Option<&[u32]>,
        _nodes: &crate::state::nodes::Nodes,
    ) -> Result<Vec<RunningAttempt>, StateError> {
        let (_, selected) = self.select(job, app, indices)?;
        Ok(selected
            .into_iter()
            .filter_map(|id| {
                let t = self.tasks.get(id as usize)?;
                let node = t.node.filter(|_| t.state == TaskState::Running)?;
                Some(RunningAttempt {
                    task_id: id,
                    attempt: t.attempt,
                    node,
                    chunk_of: 0,
                })
            })
            .collect())
    }

    fn resubmit_failed(&mut self, cx: &mut Ctx, job: u64) -> Result<u64, StateError> {
        self.requeue_ended(cx, job, TaskState::Failed)
    }

    fn resubmit_cancelled(&mut self, cx: &mut Ctx, job: u64) -> Result<u64, StateError> {
        self.requeue_ended(cx, job, TaskState::Cancelled)
    }

    fn held_for(&self, node: u32) -> String {
        let named = |app: u32| {
            self.apps
                .get(app as usize)
                .map_or_else(String::new, |a| format!("job {} (`{}`)", a.job, a.name))
        };
        let running = self
            .multi
            .running
            .iter()
            .filter(|(_, nodes)| nodes.contains(&node))
            .map(|(&task, _)| task)
            .min();
        if let Some(task) = running
            && let Some(t) = self.tasks.get(task as usize)
        {
            return format!("task {task} of {}", named(t.app));
        }
        match self.multi.gathering_holding(NodeId(node)) {
            Some(app) => format!("gathering for {}", named(app.0)),
            None => String::new(),
        }
    }

    fn backed_off(&self, node: u32) -> Vec<BackedOffApp> {
        self.backoff
            .of_node(node)
            .map(|(app, e)| BackedOffApp {
                app: self
                    .apps
                    .get(app as usize)
                    .map_or(String::new(), |a| a.name.clone()),
                job_id: self.apps.get(app as usize).map_or(0, |a| a.job),
                failures: e.failures,
                remaining_ms: e
                    .until
                    .saturating_duration_since(Instant::now())
                    .as_millis() as u64,
            })
            .collect()
    }
}

/// What one task of `a` holds each way it may run, as the view's caps count it (for
/// [`super::beyond_cap`]): each variant's request, labelled when there are two; a multi-node
/// task what the core's gathering asks room for before it starts — its per-node request (at
/// least a core) on each of its nodes (`policy::batch::multi_node`'s `least_held`).
pub(crate) fn task_needs(a: &hetsched_core::Application) -> Vec<(&'static str, Resources)> {
    if a.is_multi_node() {
        let per_node = a.request(Variant::Cpu).unwrap_or_default();
        let nodes = a.nodes.max(1);
        return vec![(
            "",
            Resources::new(
                per_node.cores.max(1).saturating_mul(nodes),
                per_node.memory_bytes.saturating_mul(u64::from(nodes)),
                per_node.gpus.saturating_mul(nodes),
            ),
        )];
    }
    let variants: Vec<(&'static str, Resources)> = [(Variant::Cpu, "cpu"), (Variant::Gpu, "gpu")]
        .into_iter()
        .filter_map(|(v, label)| a.request(v).map(|r| (label, r)))
        .collect();
    if variants.len() == 1 {
        return variants.into_iter().map(|(_, r)| ("", r)).collect();
    }
    variants
}
