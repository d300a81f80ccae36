//! The server's live state and every rule that changes it: job submission, the heartbeat (results,
//! reconciliation with what the agent says it runs, the batch policy's decisions), dead nodes,
//! cancellation, and the rebuild from the store after a restart.
//!
//! The scheduling decision itself is the core's: the state holds a [`SchedulerView`] and a
//! [`BatchPolicy`] and calls [`BatchPolicy::on_node_update`] on every heartbeat, exactly as the
//! simulator does. Each public method changes memory, then writes every row it touched in one
//! transaction, and only then returns what the caller will acknowledge.
//!
//! Semantics (see `docs/runtime.md`):
//! - a task's success is recorded once, for the attempt the server dispatched last; results of other
//!   attempts are acknowledged and ignored, and a task with a recorded success is never dispatched
//!   again;
//! - a task the server believes runs on a node, but which that node's heartbeat neither lists as
//!   running nor reports finished, was lost (the assignment never arrived, or the agent restarted):
//!   it goes back to the front of its application's queue with the next attempt number, up to
//!   `max_attempts`, after which it fails;
//! - a task a node runs that the server does not expect there (cancelled, or re-queued while the
//!   node was silent) is killed;
//! - a failed attempt (non-zero exit, failure to start, time limit) is re-queued with the next
//!   attempt number while the application's `retries` last; then the task fails. Failed attempts do
//!   not count against `max_attempts`, which bounds lost ones;
//! - a submission with a client key the store already holds returns the job stored under it (one
//!   job per key, enforced by a UNIQUE index), so a client may retry a submission whose reply it
//!   never received.

use crate::config::ServerConfig;
use crate::metrics::{Metrics, Outcome};
use crate::store::{JobRow, NodeRow, Store, StoreError, TaskRow, TaskState};
use hetsched_core::input::InputError;
use hetsched_core::input::limits;
use hetsched_core::input::workload::{Command, MissingProfile, Workload, parse_workload};
use hetsched_core::policy::batch::BatchPolicy;
use hetsched_core::{
    AppId, Application, Assignment, Node, NodeId, NodeReport, SchedulerView, TaskId, Variant,
    ViewError,
};
use hetsched_proto as pb;
use prost::Message;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use thiserror::Error;
use tracing::{info, warn};

mod accel;
mod retention;
pub use retention::RETENTION_INTERVAL;

/// Most tasks one job may have (a typo of `tasks = 4000000000` should not exhaust memory).
pub const MAX_TASKS_PER_JOB: u64 = 1_000_000;

/// Longest submission key accepted.
pub const MAX_SUBMISSION_KEY: usize = 128;

/// Largest heartbeat reply the server builds (encoded bytes): a quarter of the agents' 4 MiB
/// decoding limit, so no job, however large its commands, makes a reply an agent cannot read.
pub const REPLY_BUDGET: usize = 1 << 20;

/// Most spec keys read from one heartbeat's `known_specs`.
pub const MAX_KNOWN_SPECS: usize = 1024;

/// Default page of a list call.
pub const DEFAULT_PAGE: u32 = 1000;
/// Largest page of a list call.
pub const MAX_PAGE: u32 = 10_000;

fn page_limit(limit: u32) -> usize {
    match limit {
        0 => DEFAULT_PAGE as usize,
        // In-process callers (tests, metrics) ask for everything.
        u32::MAX => usize::MAX,
        n => n.min(MAX_PAGE) as usize,
    }
}

/// How often a paused state tries the store again.
pub const PROBE_INTERVAL: Duration = Duration::from_millis(500);

/// Longest working directory a submission may name.
pub const MAX_WORKDIR: usize = 4096;

/// The key of application `app`'s variant `v` in `TaskSpec`s and assignments.
pub fn spec_key(app: u32, v: Variant) -> u64 {
    u64::from(app) * 2 + u64::from(variant_code(v))
}

/// After a restart, a node gets this many dead-timeouts (at least 5 s) to heartbeat again.
pub const RESTART_GRACE: u32 = 3;

/// Why a request failed.
#[derive(Debug, Error)]
pub enum StateError {
    /// The store failed; nothing was acknowledged.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A submitted file is wrong.
    #[error("{0}")]
    Input(#[from] InputError),
    /// The request is wrong.
    #[error("{0}")]
    Invalid(String),
    /// No such job.
    #[error("no job {0}")]
    NoJob(u64),
    /// No node of that name.
    #[error("no node named `{0}`")]
    NoNode(String),
    /// A registration under a name that a live node with another identity holds.
    #[error(
        "node name `{0}` is held by a live agent with another identity (another agent on this \
         host, or one with another work directory): give this agent its own --name, or stop the \
         other one and retry once it is declared dead"
    )]
    NameTaken(String),
    /// The view refused (a bug, or a corrupt store).
    #[error("scheduler view: {0}")]
    View(#[from] ViewError),
}

/// Compares two secrets without an early exit.
fn same_secret(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
}

fn node_json(spec: &Node) -> Result<String, StateError> {
    serde_json::to_string(spec).map_err(|e| StateError::Invalid(format!("node description: {e}")))
}

/// Nanoseconds since the Unix epoch: the time base of the server's policies and records.
pub fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

fn variant_code(v: Variant) -> u8 {
    match v {
        Variant::Cpu => 0,
        Variant::Gpu => 1,
    }
}

fn variant_of(code: Option<u8>) -> Variant {
    if code == Some(1) {
        Variant::Gpu
    } else {
        Variant::Cpu
    }
}

/// What one variant of an application runs.
#[derive(Clone, Debug)]
struct VariantRun {
    command: Command,
    env: BTreeMap<String, String>,
    time_limit_ms: u64,
    /// Whether the job file declared a profile (else the server learns one).
    declared: bool,
}

/// Observed run times of successful tasks of one variant.
#[derive(Clone, Copy, Debug, Default)]
struct Observed {
    total_ns: u128,
    count: u64,
}

impl Observed {
    fn mean_ns(&self) -> Option<u64> {
        (self.count > 0).then(|| (self.total_ns / self.count as u128) as u64)
    }
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
    /// Declared `inputs`, `outputs` and `accelerator` (spec 01), sent in its task specs.
    files: (Vec<String>, Vec<String>, String),
}

#[derive(Debug)]
struct JobRec {
    row: JobRow,
    /// What listings show: the name given at submission, else the file's `name =`, else its path.
    name: String,
    apps: std::ops::Range<u32>,
    tasks: std::ops::Range<u64>,
}

#[derive(Debug)]
struct NodeRec {
    spec: Node,
    alive: bool,
    last_seen: Instant,
    /// Whether the node has registered or heartbeated since this server started (nodes restored
    /// from the store get a longer grace period to come back after a restart).
    seen: bool,
    /// Tasks the server has dispatched here and not seen finish.
    running: HashSet<u64>,
    read_bps: f64,
    available_memory: u64,
    gpus: Vec<pb::GpuUtilisation>,
    /// The identity of the agent that registered the node (empty: restored from a store written
    /// before identities; the next registration sets it).
    identity: String,
    /// Removed by an operator (`hetsched node remove`): dead for good, unlisted, its name free.
    removed: bool,
    /// Drained by an operator (`hetsched node drain`): no new work until `node resume`. Kept in
    /// memory only: a restarted server forgets drains.
    drained: bool,
    /// The agent's last heartbeat said it is shutting down: no new work.
    draining: bool,
}

/// The server's whole state.
pub struct State {
    store: Store,
    view: SchedulerView,
    policy: Box<dyn BatchPolicy>,
    nodes: Vec<NodeRec>,
    node_by_name: HashMap<String, u32>,
    jobs: Vec<JobRec>,
    apps: Vec<AppRec>,
    /// Task rows held in memory (finished jobs' rows leave it; see [`retention`]).
    tasks: retention::TaskTable,
    /// Job id by submission key.
    by_key: HashMap<String, u64>,
    max_attempts: u32,
    estimate: u64,
    heartbeat_interval_ms: u64,
    /// Event counters (dispatch, results, lost tasks, submissions, decision time).
    metrics: Arc<Metrics>,
    /// The configuration the state was built with (to rebuild it from the store).
    config: ServerConfig,
    /// Since when the store refuses writes: dispatch is paused (see [`State::heartbeat`]).
    paused_since: Option<Instant>,
    /// When the store was last tried while paused.
    last_probe: Option<Instant>,
    /// The failing-node back-off (memory only).
    backoff: crate::backoff::Backoff,
    /// Finished jobs' summaries and purged jobs (see [`retention`]).
    retention: retention::Retention,
    /// Accelerator sharing: the node binding (memory only; see [`accel`]).
    sharing: accel::Sharing,
}

impl State {
    /// Opens the store in `config.data_dir` and rebuilds the state from it: finished tasks stay
    /// finished; tasks recorded as running stay assigned to their nodes until those nodes'
    /// heartbeats confirm or deny them (or the nodes are declared dead).
    pub fn open(config: &ServerConfig, store: Store) -> Result<Self, StateError> {
        let snap = store.load()?;
        Self::from_snapshot(config, store, snap)
    }

    fn from_snapshot(
        config: &ServerConfig,
        store: Store,
        snap: crate::store::Snapshot,
    ) -> Result<Self, StateError> {
        let mut state = State {
            store,
            view: SchedulerView::new(),
            policy: config.policy.build(),
            nodes: Vec::new(),
            node_by_name: HashMap::new(),
            jobs: Vec::new(),
            apps: Vec::new(),
            tasks: Default::default(),
            by_key: HashMap::new(),
            max_attempts: config.max_attempts.max(1),
            estimate: config.profile_estimate.0.max(1),
            heartbeat_interval_ms: (config.heartbeat_interval.0 / 1_000_000).max(1),
            metrics: Arc::default(),
            config: config.clone(),
            paused_since: None,
            last_probe: None,
            backoff: crate::backoff::Backoff::new(
                config.start_failures,
                Duration::from_nanos(config.start_failure_backoff.0),
            ),
            retention: retention::Retention::with_purged(snap.purged),
            sharing: accel::Sharing::new(config.binding, config.binding_slots),
        };
        for row in snap.nodes {
            let spec: Node = serde_json::from_str(&row.spec)
                .map_err(|e| StoreError::Corrupt(format!("node {}: {e}", row.id)))?;
            if spec.id != NodeId(row.id) {
                return Err(
                    StoreError::Corrupt(format!("node {} has id {}", row.id, spec.id)).into(),
                );
            }
            state.view.add_node(spec.clone())?;
            if row.removed {
                state.view.set_alive(NodeId(row.id), false)?;
            } else {
                state.node_by_name.insert(row.name, row.id);
            }
            state.nodes.push(NodeRec {
                removed: row.removed,
                spec,
                alive: !row.removed,
                seen: false,
                last_seen: Instant::now(),
                running: HashSet::new(),
                read_bps: 0.0,
                available_memory: 0,
                gpus: Vec::new(),
                identity: row.identity,
                drained: false,
                draining: false,
            });
        }
        let starts: Vec<u64> = snap.jobs.iter().map(|j| j.first_task).collect();
        let summaries = snap.finished;
        state.tasks = retention::TaskTable::from_rows(snap.tasks, &starts)?;
        for row in snap.jobs {
            let w = parse_workload(&row.origin, &row.text)?;
            let mut apps =
                w.to_applications(row.first_app, MissingProfile::Estimate(state.estimate))?;
            for a in &mut apps {
                a.submit_time = row.submitted_ns;
            }
            state.install(row, &w, apps)?;
        }
        // A purged last job's ids stay taken.
        if let Some(a) = state.apps.last() {
            state.tasks.reserve_ids(a.first_task + u64::from(a.tasks));
        }
        // Running and finished tasks: take their resources / counters in the view.
        let mut finished: HashMap<u32, (u32, u32, u32)> = HashMap::new();
        for i in state.tasks.ids() {
            let t = &state.tasks[i as usize];
            match t.state {
                TaskState::Pending => {}
                TaskState::Running => {
                    let a = state.assignment_of(t);
                    state.view.restore_running(&a)?;
                    if let Some(n) = state.nodes.get_mut(a.node.index()) {
                        n.running.insert(t.id);
                    }
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
                            state.observe(app, v, d)?;
                        }
                    }
                }
            }
        }
        for (app, (cpu, gpu, ok)) in finished {
            state.view.restore_finished(AppId(app), cpu, gpu, ok)?;
        }
        state.restore_summaries(summaries)?;
        state.evict_finished();
        Ok(state)
    }

    /// Adds an accepted job's applications to memory and to the view (pending tasks only).
    fn install(
        &mut self,
        row: JobRow,
        w: &Workload,
        apps: Vec<Application>,
    ) -> Result<(), StateError> {
        let first_app = row.first_app;
        let mut next_task = row.first_task;
        for (i, app) in apps.into_iter().enumerate() {
            let spec = &w.applications[i];
            let cpu = spec.cpu.as_ref().and_then(|c| {
                let c = c.get_ref();
                Some(VariantRun {
                    command: c.command.clone()?,
                    env: c.env.clone(),
                    time_limit_ms: c.time_limit.map_or(0, |d| d.0 / 1_000_000),
                    declared: c.compute.is_some(),
                })
            });
            let gpu = spec.gpu.as_ref().and_then(|g| {
                let g = g.get_ref();
                Some(VariantRun {
                    command: g.command.clone()?,
                    env: g.env.clone(),
                    time_limit_ms: g.time_limit.map_or(0, |d| d.0 / 1_000_000),
                    declared: g.compute.is_some(),
                })
            });
            let first_task = next_task;
            next_task += app.tasks as u64;
            let pending: Vec<TaskId> = (first_task..next_task)
                .filter(|&t| {
                    self.tasks
                        .get(t as usize)
                        .is_some_and(|r| r.state == TaskState::Pending)
                })
                .map(TaskId)
                .collect();
            self.apps.push(AppRec {
                job: row.id,
                name: app.name.clone(),
                split_bytes: app.split_bytes,
                first_task,
                tasks: app.tasks,
                retries: *spec.retries.get_ref(),
                cpu,
                gpu,
                observed: [Observed::default(); 2],
                workdir: spec.workdir.as_ref().map(|w| w.get_ref().clone()),
                files: (
                    spec.inputs.iter().map(|f| f.get_ref().clone()).collect(),
                    spec.outputs.iter().map(|f| f.get_ref().clone()).collect(),
                    spec.accelerator_need().as_str().to_string(),
                ),
            });
            self.view.add_application(app, pending)?;
        }
        let apps = first_app..self.apps.len() as u32;
        if let Some(key) = &row.submission_key {
            self.by_key.insert(key.clone(), row.id);
        }
        self.jobs.push(JobRec {
            name: row
                .name
                .clone()
                .or_else(|| w.name.clone())
                .unwrap_or_else(|| row.origin.clone()),
            tasks: row.first_task..next_task,
            apps,
            row,
        });
        Ok(())
    }

    fn assignment_of(&self, t: &TaskRow) -> Assignment {
        Assignment {
            task: TaskId(t.id),
            app: AppId(t.app),
            node: NodeId(t.node.unwrap_or(0)),
            variant: variant_of(t.variant),
            devices: t.devices.clone(),
        }
    }

    /// Records a successful run time and, for a variant without a declared profile, hands the
    /// policy the mean observed time as the variant's base time.
    fn observe(&mut self, app: u32, v: Variant, duration_ns: u64) -> Result<(), StateError> {
        let Some(rec) = self.apps.get_mut(app as usize) else {
            return Ok(());
        };
        let o = &mut rec.observed[variant_code(v) as usize];
        o.total_ns += duration_ns as u128;
        o.count += 1;
        let mean = o.mean_ns().unwrap_or(self.estimate).max(1);
        let declared = match v {
            Variant::Cpu => rec.cpu.as_ref().is_some_and(|r| r.declared),
            Variant::Gpu => rec.gpu.as_ref().is_some_and(|r| r.declared),
        };
        if !declared {
            self.view.update_profile(AppId(app), v, mean, 0)?;
        }
        Ok(())
    }

    /// The event metrics this state updates (shared with the service and the `/metrics` registry).
    pub fn metrics(&self) -> Arc<Metrics> {
        self.metrics.clone()
    }

    /// Heartbeat interval agents are told to use.
    pub fn heartbeat_interval_ms(&self) -> u64 {
        self.heartbeat_interval_ms
    }

    // ---------------------------------------------------------------- agents

    /// An agent (re-)registers: a new name gets the next node id; a known name gets its old id,
    /// if the caller proves the identity that registered it, or if that node is dead (a
    /// replacement agent takes the name over). A name held by a live node with another identity
    /// is refused ([`StateError::NameTaken`]): two agents must not share a node.
    pub fn register(&mut self, req: pb::RegisterRequest) -> Result<pb::RegisterReply, StateError> {
        let spec = crate::limits::node_spec(&req).map_err(StateError::Invalid)?;
        crate::limits::identity(&req.identity).map_err(StateError::Invalid)?;
        let mut spec = spec;
        let id = if let Some(&id) = self.node_by_name.get(&req.name) {
            spec.id = NodeId(id);
            let rec = &self.nodes[id as usize];
            let same = !rec.identity.is_empty() && same_secret(&rec.identity, &req.identity);
            if !same && rec.alive && !rec.identity.is_empty() {
                warn!(node = %req.name, "registration refused: the name is held by a live node with another identity");
                return Err(StateError::NameTaken(req.name.clone()));
            }
            if !same {
                // A replacement (or the first registration since identities were introduced):
                // the node is now this agent's.
                self.store.put_node(&NodeRow {
                    id,
                    name: req.name.clone(),
                    spec: node_json(&self.nodes[id as usize].spec)?,
                    identity: req.identity.clone(),
                    removed: false,
                })?;
                info!(node = %req.name, id, "node name taken over by a new agent identity");
            }
            let rec = &mut self.nodes[id as usize];
            rec.identity = req.identity.clone();
            if rec.spec != spec {
                warn!(
                    node = %req.name,
                    "node registered again with different resources; the server keeps the first \
                     description until it restarts with a fresh data directory"
                );
            }
            rec.last_seen = Instant::now();
            rec.seen = true;
            if !rec.alive {
                rec.alive = true;
                self.view.set_alive(NodeId(id), true)?;
            }
            info!(node = %req.name, id, "node registered again");
            id
        } else {
            let id = self.nodes.len() as u32;
            spec.id = NodeId(id);
            self.store.put_node(&NodeRow {
                id,
                name: req.name.clone(),
                spec: node_json(&spec)?,
                identity: req.identity.clone(),
                removed: false,
            })?;
            self.view.add_node(spec.clone())?;
            self.node_by_name.insert(req.name.clone(), id);
            self.nodes.push(NodeRec {
                spec,
                alive: true,
                seen: true,
                last_seen: Instant::now(),
                running: HashSet::new(),
                read_bps: 0.0,
                available_memory: 0,
                gpus: Vec::new(),
                identity: req.identity.clone(),
                removed: false,
                drained: false,
                draining: false,
            });
            info!(node = %req.name, id, cores = req.cores, gpus = req.accelerators.len(), "node registered");
            id
        };
        Ok(pb::RegisterReply {
            node_id: id,
            heartbeat_interval_ms: self.heartbeat_interval_ms,
        })
    }

    /// One heartbeat: record results, reconcile running tasks, let the policy fill the node, commit,
    /// and answer with acknowledgements, assignments and kills.
    pub fn heartbeat(
        &mut self,
        req: pb::HeartbeatRequest,
    ) -> Result<pb::HeartbeatReply, StateError> {
        let nid = NodeId(req.node_id);
        let paused = self.paused();
        let Some(rec) = self.nodes.get_mut(nid.index()) else {
            return Ok(pb::HeartbeatReply {
                reregister: true,
                ..Default::default()
            });
        };
        // Only the agent that registered the node speaks for it: another caller (or an agent of a
        // server whose data directory was replaced) changes nothing and is told to register.
        if rec.removed || rec.identity.is_empty() || !same_secret(&rec.identity, &req.identity) {
            warn!(node = %rec.spec.name, "heartbeat with another identity than the node's: ignored");
            return Ok(pb::HeartbeatReply {
                reregister: true,
                ..Default::default()
            });
        }
        rec.last_seen = Instant::now();
        rec.seen = true;
        rec.read_bps = req.read_bytes_per_sec;
        rec.available_memory = req.available_memory_bytes;
        rec.gpus = req.gpus.clone();
        if rec.draining != req.draining {
            info!(node = %rec.spec.name, draining = req.draining, "the agent is shutting down: no new work for it");
        }
        rec.draining = req.draining;
        // No new work for a drained node or a shutting-down agent.
        let closed = rec.drained || rec.draining;
        if paused {
            // The store refuses writes: the node is alive (in memory), but nothing is recorded,
            // so nothing is acknowledged (the agent keeps its results), assigned or reconciled.
            return Ok(pb::HeartbeatReply::default());
        }
        if !rec.alive {
            rec.alive = true;
            info!(node = %rec.spec.name, "node is back");
            self.view.set_alive(nid, true)?;
        }
        let now = now_ns();
        let mut dirty = Vec::new();
        let mut reply = pb::HeartbeatReply::default();
        for r in &req.results {
            reply.acked.push(pb::TaskRef {
                task_id: r.task_id,
                attempt: r.attempt,
            });
            self.finish(nid, r, &mut dirty)?;
        }
        // Reconcile: what the agent runs against what the server dispatched there.
        let mut reported = HashSet::new();
        let mut total_io = 0.0;
        let mut io_tasks = 0;
        for rt in &req.running {
            let expected = self.tasks.get(rt.task_id as usize).is_some_and(|t| {
                t.state == TaskState::Running && t.attempt == rt.attempt && t.node == Some(nid.0)
            });
            if expected {
                reported.insert(rt.task_id);
                let app = self.tasks[rt.task_id as usize].app as usize;
                let split = self.apps.get(app).map_or(0, |a| a.split_bytes);
                let remaining = split.saturating_sub(rt.read_bytes);
                if remaining > 0 {
                    total_io += remaining as f64;
                    io_tasks += 1;
                }
            } else {
                reply.kill.push(pb::TaskRef {
                    task_id: rt.task_id,
                    attempt: rt.attempt,
                });
            }
        }
        let mut lost: Vec<u64> = self.nodes[nid.index()]
            .running
            .iter()
            .filter(|t| !reported.contains(t))
            .copied()
            .collect();
        lost.sort_unstable_by(|a, b| b.cmp(a));
        for t in lost {
            self.lose(t, "the task vanished from its node", now, &mut dirty)?;
        }
        self.view.node_report(
            nid,
            NodeReport {
                total_io_bytes: total_io,
                io_tasks,
            },
        )?;
        for app in self.backoff.expire(nid.0, Instant::now()) {
            self.view.set_excluded(AppId(app), nid, false);
            info!(
                node = nid.0,
                app, "start-failure back-off over: the node is tried again"
            );
        }
        if !closed && self.view.pending_apps().next().is_some() {
            let start = Instant::now();
            let decisions = self.policy.on_node_update(&mut self.view, nid, now);
            self.metrics.decision(start.elapsed());
            // Each application variant's command and environment go to a node once (the agent
            // lists the specs it holds); the reply stops growing at REPLY_BUDGET, and what the
            // policy decided beyond it goes back to the front of its queues for the next beat.
            let known: HashSet<u64> = req
                .known_specs
                .iter()
                .take(MAX_KNOWN_SPECS)
                .copied()
                .collect();
            let mut sent: HashSet<u64> = HashSet::new();
            let mut size = reply.encoded_len();
            let mut deferred: Vec<Assignment> = Vec::new();
            for a in decisions {
                if !deferred.is_empty() {
                    deferred.push(a);
                    continue;
                }
                let Some(t) = self.tasks.get(a.task.0 as usize) else {
                    continue;
                };
                let key = spec_key(a.app.0, a.variant);
                let assignment = pb::Assignment {
                    task_id: t.id,
                    attempt: t.attempt + 1,
                    index: t.index,
                    devices: a.devices.clone(),
                    spec: key,
                };
                let spec = (!known.contains(&key) && !sent.contains(&key))
                    .then(|| self.task_spec(a.app.0, a.variant));
                // Field tag and length prefix: at most 6 bytes each.
                let bytes =
                    assignment.encoded_len() + 6 + spec.as_ref().map_or(0, |s| s.encoded_len() + 6);
                if size + bytes > REPLY_BUDGET && !reply.assignments.is_empty() {
                    deferred.push(a);
                    continue;
                }
                size += bytes;
                if let Some(spec) = spec {
                    sent.insert(key);
                    reply.specs.push(spec);
                }
                reply.assignments.push(assignment);
                let Some(t) = self.tasks.get_mut(a.task.0 as usize) else {
                    continue;
                };
                t.state = TaskState::Running;
                t.attempt += 1;
                t.node = Some(nid.0);
                t.variant = Some(variant_code(a.variant));
                t.devices = a.devices.clone();
                t.started_ns = now;
                t.finished_ns = 0;
                t.exit_code = None;
                self.nodes[nid.index()].running.insert(t.id);
                dirty.push(t.id);
                self.metrics.dispatched(a.variant);
            }
            if !deferred.is_empty() {
                // The last first, so they keep their order at the front of their queues.
                for a in deferred.iter().rev() {
                    self.view.requeue(a);
                }
                info!(
                    node = nid.0,
                    deferred = deferred.len(),
                    "reply size cap reached; the rest goes on the next heartbeat"
                );
                reply.more = true;
            }
        }
        self.accel_heartbeat(nid, &req, &mut reply, &mut dirty)?;
        self.commit(dirty, None)?;
        Ok(reply)
    }

    /// Writes the rows an event changed in one transaction. If the store refuses (a full disk),
    /// the event's changes to memory are rolled back — the state is rebuilt from the store, which
    /// holds exactly what was committed before — and dispatch pauses until the store accepts
    /// writes again: nothing is acknowledged, assigned, lost or failed meanwhile.
    fn commit(&mut self, mut dirty: Vec<u64>, cancel_job: Option<u64>) -> Result<(), StateError> {
        if dirty.is_empty() && cancel_job.is_none() {
            return Ok(());
        }
        dirty.sort_unstable();
        dirty.dedup();
        let tasks = &self.tasks;
        if let Err(e) = self.store.update_tasks(
            dirty.iter().filter_map(|&t| tasks.get(t as usize)),
            cancel_job,
        ) {
            self.roll_back(&e);
            return Err(e.into());
        }
        Ok(())
    }

    /// Undoes every change to memory since the last commit by rebuilding the state from the
    /// store, keeps what the store does not hold (nodes' liveness and last figures), and pauses.
    fn roll_back(&mut self, cause: &StoreError) {
        tracing::error!(
            "the store refused a write ({cause}): rolling memory back to the store and pausing \
             dispatch until it accepts writes (is the disk full?)"
        );
        self.paused_since.get_or_insert_with(Instant::now);
        self.last_probe = Some(Instant::now());
        if let Err(e) = self.reload() {
            tracing::error!("rebuilding the state from the store failed ({e}); staying paused");
        }
    }

    /// Rebuilds the state from the store (see [`State::roll_back`]). On error, `self` is unchanged.
    fn reload(&mut self) -> Result<(), StateError> {
        let snap = self.store.load()?;
        let mut fresh = Self::from_snapshot(&self.config, Store::in_memory()?, snap)?;
        std::mem::swap(&mut fresh.store, &mut self.store);
        for (new, old) in fresh.nodes.iter_mut().zip(&self.nodes) {
            new.alive = old.alive;
            new.seen = old.seen;
            new.last_seen = old.last_seen;
            new.read_bps = old.read_bps;
            new.available_memory = old.available_memory;
            new.gpus = old.gpus.clone();
            new.drained = old.drained;
            new.draining = old.draining;
            if !old.alive {
                fresh.view.set_alive(new.spec.id, false)?;
            }
        }
        fresh.metrics = self.metrics.clone();
        fresh.backoff = std::mem::take(&mut self.backoff);
        let excluded: Vec<(u32, u32)> = fresh.backoff.all().map(|(k, _)| k).collect();
        for (app, node) in excluded {
            fresh.view.set_excluded(AppId(app), NodeId(node), true);
        }
        fresh.paused_since = self.paused_since;
        fresh.last_probe = self.last_probe;
        *self = fresh;
        Ok(())
    }

    /// Whether dispatch is paused because the store refused a write; while paused, tries a small
    /// write at most every [`PROBE_INTERVAL`] and resumes when it succeeds.
    fn paused(&mut self) -> bool {
        let Some(since) = self.paused_since else {
            return false;
        };
        if self
            .last_probe
            .is_some_and(|t| t.elapsed() < PROBE_INTERVAL)
        {
            return true;
        }
        self.last_probe = Some(Instant::now());
        match self.store.probe() {
            Ok(()) => {
                info!(after = ?since.elapsed(), "the store accepts writes again: dispatch resumes");
                self.paused_since = None;
                false
            }
            Err(e) => {
                warn!("the store still refuses writes ({e}); dispatch stays paused");
                true
            }
        }
    }

    /// Whether dispatch is paused because the store refuses writes.
    pub fn is_paused(&self) -> bool {
        self.paused_since.is_some()
    }

    /// Makes the store refuse (or accept again) every write as a full disk does: for tests of the
    /// rollback path where a small filesystem cannot be mounted.
    #[doc(hidden)]
    pub fn simulate_full_disk(&mut self, full: bool) {
        self.store.simulate_full_disk(full);
    }

    /// A result from node `nid`.
    fn finish(
        &mut self,
        nid: NodeId,
        r: &pb::TaskResult,
        dirty: &mut Vec<u64>,
    ) -> Result<(), StateError> {
        let Some(t) = self.tasks.get(r.task_id as usize) else {
            return Ok(());
        };
        if t.attempt != r.attempt || t.node != Some(nid.0) {
            return Ok(()); // an old attempt: acknowledged, ignored
        }
        match t.state {
            TaskState::Running => {}
            // Sent again after a commit failed: write the row again (idempotent).
            TaskState::Succeeded | TaskState::Failed => {
                dirty.push(t.id);
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
            return self.lose(r.task_id, &reason, now_ns(), dirty);
        }
        let a = self.assignment_of(t);
        if self
            .backoff
            .result(t.app, nid.0, r.start_failed, r.success, Instant::now())
            == crate::backoff::Change::BackedOff
        {
            self.view.set_excluded(a.app, nid, true);
            warn!(
                node = %self.nodes[nid.index()].spec.name,
                app = %self.apps.get(t.app as usize).map_or("?", |x| x.name.as_str()),
                "consecutive start failures: the application is kept off this node for a while"
            );
        }
        self.nodes[nid.index()].running.remove(&r.task_id);
        let t = &mut self.tasks[r.task_id as usize];
        if r.started_ns > 0 {
            t.started_ns = r.started_ns;
        }
        t.finished_ns = r.finished_ns.max(t.started_ns);
        t.exit_code = Some(r.exit_code);
        t.message = r.message.clone();
        dirty.push(t.id);
        if r.success {
            t.state = TaskState::Succeeded;
            self.metrics.result(Outcome::Succeeded);
            let (app, d) = (t.app, t.finished_ns - t.started_ns);
            self.view.task_finished(&a);
            self.observe(app, a.variant, d)?;
        } else {
            let retries = self.apps.get(t.app as usize).map_or(0, |app| app.retries);
            if t.failures < retries {
                t.failures += 1;
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
                self.view.requeue(&a);
                self.metrics.result(Outcome::Retried);
            } else {
                t.state = TaskState::Failed;
                self.view.task_abandoned(&a);
                self.metrics.result(Outcome::Failed);
            }
        }
        Ok(())
    }

    /// A running task was lost: re-queue it with the next attempt, or fail it at the limit.
    fn lose(
        &mut self,
        task: u64,
        reason: &str,
        now: u64,
        dirty: &mut Vec<u64>,
    ) -> Result<(), StateError> {
        let Some(t) = self.tasks.get(task as usize) else {
            return Ok(());
        };
        if t.state != TaskState::Running {
            return Ok(());
        }
        let a = self.assignment_of(t);
        if let Some(n) = self.nodes.get_mut(a.node.index()) {
            n.running.remove(&task);
        }
        let max = self.max_attempts;
        let t = &mut self.tasks[task as usize];
        dirty.push(task);
        self.metrics.lost();
        // Failed attempts were retried on purpose; only lost ones count against `max_attempts`.
        if t.attempt.saturating_sub(t.failures) >= max {
            t.state = TaskState::Failed;
            t.finished_ns = now;
            t.exit_code = None;
            t.message = format!("{reason}; gave up after {} attempts", t.attempt);
            self.view.task_abandoned(&a);
        } else {
            t.state = TaskState::Pending;
            t.message = format!("attempt {} lost: {reason}", t.attempt);
            self.view.requeue(&a);
        }
        Ok(())
    }

    /// Declares dead every live node silent for longer than `timeout` and re-queues its tasks.
    /// Nodes not heard from since this server started get [`RESTART_GRACE`] timeouts, so agents
    /// that were retrying during a restart reconnect before their tasks are given away.
    pub fn check_dead(&mut self, timeout: Duration) -> Result<(), StateError> {
        if self.paused() {
            // Nothing can be recorded: declaring nodes dead now would fail their tasks in memory
            // only. Heartbeats keep `last_seen` fresh meanwhile.
            return Ok(());
        }
        let now = now_ns();
        let mut dirty = Vec::new();
        for i in 0..self.nodes.len() {
            let n = &mut self.nodes[i];
            let limit = if n.seen {
                timeout
            } else {
                (timeout * RESTART_GRACE).max(Duration::from_secs(5))
            };
            if !n.alive || n.last_seen.elapsed() <= limit {
                continue;
            }
            n.alive = false;
            warn!(node = %n.spec.name, tasks = n.running.len(), "node stopped heartbeating: declared dead");
            let reason = format!("node `{}` stopped heartbeating", n.spec.name);
            let mut lost: Vec<u64> = n.running.iter().copied().collect();
            // Each re-queued task goes to the front: re-queue the last first, so they keep order.
            lost.sort_unstable_by(|a, b| b.cmp(a));
            self.view.set_alive(NodeId(i as u32), false)?;
            for t in lost {
                self.lose(t, &reason, now, &mut dirty)?;
            }
        }
        self.accel_left(&mut dirty)?;
        self.commit(dirty, None)
    }

    /// What every task of `app`'s variant `v` runs, for an agent that does not hold it yet.
    fn task_spec(&self, app: u32, v: Variant) -> pb::TaskSpec {
        let rec = &self.apps[app as usize];
        let job = &self.jobs[(rec.job - 1) as usize];
        let run = match v {
            Variant::Cpu => rec.cpu.as_ref(),
            Variant::Gpu => rec.gpu.as_ref(),
        };
        let (argv, env, limit) = match run {
            Some(r) => {
                let argv = match &r.command {
                    Command::Shell(s) => vec!["sh".to_string(), "-c".to_string(), s.clone()],
                    Command::Argv(v) => v.clone(),
                };
                (argv, r.env.clone(), r.time_limit_ms)
            }
            None => (Vec::new(), BTreeMap::new(), 0),
        };
        pb::TaskSpec {
            key: spec_key(app, v),
            job_id: job.row.id,
            app: rec.name.clone(),
            variant: v.to_string(),
            argv,
            env: env.into_iter().collect(),
            workdir: match &rec.workdir {
                Some(w) => std::path::Path::new(&job.row.workdir)
                    .join(w)
                    .display()
                    .to_string(),
                None => job.row.workdir.clone(),
            },
            time_limit_ms: limit,
            inputs: rec.files.0.clone(),
            outputs: rec.files.1.clone(),
            accelerator: rec.files.2.clone(),
        }
    }

    // ---------------------------------------------------------------- clients

    /// Accepts a job file: parses it with the shared parser, checks it can run here, and stores
    /// the job with all its tasks in one transaction. On any error nothing is stored.
    pub fn submit(
        &mut self,
        origin: &str,
        text: &str,
        workdir: &str,
    ) -> Result<pb::SubmitReply, StateError> {
        self.submit_keyed(origin, text, workdir, "")
    }

    /// [`State::submit`] with a client's submission key (empty = none): if a job was already
    /// stored under `key`, returns it (`existing: true`) and stores nothing.
    pub fn submit_keyed(
        &mut self,
        origin: &str,
        text: &str,
        workdir: &str,
        key: &str,
    ) -> Result<pb::SubmitReply, StateError> {
        self.submit_named(origin, text, workdir, key, "")
    }

    /// [`State::submit_keyed`] with a job name given at submission (empty = none; it overrides
    /// the file's `name =`).
    pub fn submit_named(
        &mut self,
        origin: &str,
        text: &str,
        workdir: &str,
        key: &str,
        name: &str,
    ) -> Result<pb::SubmitReply, StateError> {
        if !name.is_empty()
            && (name.trim().is_empty()
                || name.len() > hetsched_core::input::workload::MAX_JOB_NAME
                || name.chars().any(char::is_control))
        {
            return Err(StateError::Invalid(format!(
                "a job name must be 1 to {} bytes without control characters",
                hetsched_core::input::workload::MAX_JOB_NAME
            )));
        }
        if key.len() > MAX_SUBMISSION_KEY {
            return Err(StateError::Invalid(format!(
                "the submission key is {} bytes long; at most {MAX_SUBMISSION_KEY}",
                key.len()
            )));
        }
        if let Some(&id) = self.by_key.get(key) {
            let j = &self.jobs[(id - 1) as usize];
            if j.row.text != text {
                return Err(StateError::Invalid(format!(
                    "submission key `{key}` already names job {id}, submitted with another file"
                )));
            }
            info!(
                job = id,
                "submission repeated with the same key: the job exists"
            );
            return Ok(pb::SubmitReply {
                job_id: id,
                tasks: j.tasks.end - j.tasks.start,
                existing: true,
            });
        }
        if workdir.len() > MAX_WORKDIR {
            return Err(StateError::Invalid(format!(
                "the working directory is {} bytes long; at most {MAX_WORKDIR}",
                workdir.len()
            )));
        }
        if text.len() > limits::MAX_JOB_FILE_BYTES {
            return Err(StateError::Invalid(format!(
                "{origin}: the job file is {} bytes; at most {} (2 MiB)",
                text.len(),
                limits::MAX_JOB_FILE_BYTES
            )));
        }
        let w = parse_workload(origin, text)?;
        w.check_commands()?;
        limits::check(&w)?;
        // Live nodes only: a dead node's resources make no job runnable. With none alive (none
        // registered yet, or all away), the job waits for nodes.
        let live: Vec<Node> = self
            .nodes
            .iter()
            .filter(|n| n.alive && !n.removed)
            .map(|n| n.spec.clone())
            .collect();
        if !live.is_empty() {
            w.check_runnable(&live)?;
        }
        let total = w.total_tasks();
        if total > MAX_TASKS_PER_JOB {
            return Err(StateError::Invalid(format!(
                "{origin}: the job has {total} tasks; at most {MAX_TASKS_PER_JOB} per job"
            )));
        }
        let first_app = self.apps.len() as u32;
        let first_task = self.tasks.len() as u64;
        let mut apps = w.to_applications(first_app, MissingProfile::Estimate(self.estimate))?;
        let submitted_ns = now_ns();
        for a in &mut apps {
            a.submit_time = submitted_ns;
        }
        let row = JobRow {
            id: self.jobs.len() as u64 + 1,
            origin: origin.to_string(),
            text: text.to_string(),
            workdir: workdir.to_string(),
            submitted_ns,
            first_app,
            first_task,
            cancelled: false,
            submission_key: (!key.is_empty()).then(|| key.to_string()),
            name: (!name.is_empty()).then(|| name.to_string()),
        };
        let mut rows = Vec::with_capacity(total as usize);
        for a in &apps {
            for index in 0..a.tasks {
                rows.push(TaskRow {
                    id: first_task + rows.len() as u64,
                    app: a.id.0,
                    index,
                    state: TaskState::Pending,
                    attempt: 0,
                    node: None,
                    variant: None,
                    devices: Vec::new(),
                    started_ns: 0,
                    finished_ns: 0,
                    exit_code: None,
                    message: String::new(),
                    failures: 0,
                });
            }
        }
        let names: Vec<(u32, String)> = apps.iter().map(|a| (a.id.0, a.name.clone())).collect();
        self.store.insert_job(&row, &names, &rows)?;
        let id = row.id;
        self.tasks.extend(rows);
        self.install(row, &w, apps)?;
        self.metrics.job_submitted();
        info!(job = id, origin, tasks = total, "job accepted");
        Ok(pb::SubmitReply {
            job_id: id,
            tasks: total,
            existing: false,
        })
    }

    /// `hetsched resubmit JOB --failed`: every failed task of the job is queued again (at the end
    /// of its application's queue); its next dispatch is a new attempt, and its retries count
    /// afresh. Cancelled and succeeded tasks stay as they are.
    pub fn resubmit_failed(&mut self, job: u64) -> Result<pb::ResubmitReply, StateError> {
        let Some(j) = job.checked_sub(1).and_then(|i| self.jobs.get(i as usize)) else {
            return Err(StateError::NoJob(job));
        };
        if j.row.cancelled {
            return Err(StateError::Invalid(format!(
                "job {job} was cancelled: submit it again instead"
            )));
        }
        let range = j.tasks.clone();
        let mut by_app: BTreeMap<u32, Vec<TaskId>> = BTreeMap::new();
        let mut dirty = Vec::new();
        for id in range {
            let t = &mut self.tasks[id as usize];
            if t.state != TaskState::Failed {
                continue;
            }
            t.state = TaskState::Pending;
            t.failures = 0;
            t.finished_ns = 0;
            t.message = format!("resubmitted after attempt {} failed", t.attempt);
            by_app.entry(t.app).or_default().push(TaskId(id));
            dirty.push(id);
        }
        for (app, tasks) in by_app {
            self.view.resubmit(AppId(app), tasks);
        }
        let n = dirty.len() as u64;
        self.commit(dirty, None)?;
        info!(job, tasks = n, "failed tasks resubmitted");
        Ok(pb::ResubmitReply { tasks: n })
    }

    /// Cancels a job: pending tasks are dropped, running ones killed at their nodes' next heartbeat.
    pub fn cancel(&mut self, job: u64) -> Result<pb::CancelReply, StateError> {
        let Some(j) = job.checked_sub(1).and_then(|i| self.jobs.get(i as usize)) else {
            return Err(StateError::NoJob(job));
        };
        if self.retention.is_purged(job) {
            return Err(StateError::NoJob(job));
        }
        let (apps, range) = (j.apps.clone(), j.tasks.clone());
        let now = now_ns();
        let mut dirty = Vec::new();
        for app in apps {
            self.view.cancel_pending(AppId(app));
        }
        for id in range {
            // A finished job's rows may have left memory: none of them is pending or running.
            let Some(t) = self.tasks.get(id as usize) else {
                continue;
            };
            match t.state {
                TaskState::Pending => {}
                TaskState::Running => {
                    let a = self.assignment_of(t);
                    self.view.task_abandoned(&a);
                    if let Some(n) = self.nodes.get_mut(a.node.index()) {
                        n.running.remove(&id);
                    }
                }
                _ => continue,
            }
            let t = &mut self.tasks[id as usize];
            t.state = TaskState::Cancelled;
            t.finished_ns = now;
            t.message = "cancelled".into();
            dirty.push(id);
        }
        let n = dirty.len() as u64;
        self.jobs[(job - 1) as usize].row.cancelled = true;
        self.commit(dirty, Some(job))?;
        info!(job, tasks = n, "job cancelled");
        Ok(pb::CancelReply { cancelled: n })
    }

    fn counts(&self, range: std::ops::Range<u64>) -> pb::TaskCounts {
        match self.tasks.slice(range.clone()) {
            Some(rows) => retention::count_rows(rows),
            None => self.counts_beyond_memory(range),
        }
    }

    fn job_info(&self, j: &JobRec, with_apps: bool) -> pb::JobInfo {
        let counts = self.counts(j.tasks.clone());
        let state = if counts.pending + counts.running > 0 {
            if counts.running + counts.succeeded + counts.failed > 0 {
                "running"
            } else {
                "pending"
            }
        } else if j.row.cancelled {
            "cancelled"
        } else if counts.failed > 0 {
            "failed"
        } else {
            "completed"
        };
        let finished_ns = if counts.pending + counts.running == 0 {
            self.job_finished_ns(j)
        } else {
            0
        };
        let apps = if with_apps {
            j.apps
                .clone()
                .map(|a| {
                    let r = &self.apps[a as usize];
                    let mean = |i: usize| r.observed[i].mean_ns().map_or(0.0, |n| n as f64 / 1e6);
                    pb::AppInfo {
                        id: a,
                        name: r.name.clone(),
                        tasks: r.tasks as u64,
                        counts: Some(self.counts(r.first_task..r.first_task + r.tasks as u64)),
                        mean_cpu_ms: mean(0),
                        mean_gpu_ms: mean(1),
                        has_cpu: r.cpu.is_some(),
                        has_gpu: r.gpu.is_some(),
                    }
                })
                .collect()
        } else {
            Vec::new()
        };
        pb::JobInfo {
            id: j.row.id,
            name: j.name.clone(),
            state: state.to_string(),
            tasks: j.tasks.end - j.tasks.start,
            counts: Some(counts),
            submitted_ns: j.row.submitted_ns,
            finished_ns,
            apps,
        }
    }

    /// Tasks of every job by state.
    pub fn task_counts(&self) -> pb::TaskCounts {
        self.counts(0..self.tasks.len() as u64)
    }

    /// Every job.
    pub fn jobs(&self) -> pb::ListJobsReply {
        self.jobs_page(0, u32::MAX)
    }

    /// One page of jobs: from job id `cursor` (0 = the first), at most `limit` (0 = the default).
    pub fn jobs_page(&self, cursor: u64, limit: u32) -> pb::ListJobsReply {
        let limit = page_limit(limit);
        let start = cursor.saturating_sub(1).min(self.jobs.len() as u64) as usize;
        let end = start.saturating_add(limit).min(self.jobs.len());
        pb::ListJobsReply {
            jobs: self.jobs[start..end]
                .iter()
                .filter(|j| !self.retention.is_purged(j.row.id))
                .map(|j| self.job_info(j, false))
                .collect(),
            next_cursor: if end < self.jobs.len() {
                end as u64 + 1
            } else {
                0
            },
        }
    }

    /// One job with its applications.
    pub fn job(&self, id: u64) -> Result<pb::JobInfo, StateError> {
        id.checked_sub(1)
            .and_then(|i| self.jobs.get(i as usize))
            .filter(|j| !self.retention.is_purged(j.row.id))
            .map(|j| self.job_info(j, true))
            .ok_or(StateError::NoJob(id))
    }

    /// Tasks of one job (0 = all).
    pub fn tasks(&self, job: u64) -> Result<pb::ListTasksReply, StateError> {
        self.tasks_page(job, 0, u32::MAX)
    }

    /// One page of a job's tasks (job 0 = every job): from task id `cursor` (0 = the first), at
    /// most `limit` (0 = the default). The scheduler's lock is held for one page only.
    pub fn tasks_page(
        &self,
        job: u64,
        cursor: u64,
        limit: u32,
    ) -> Result<pb::ListTasksReply, StateError> {
        let range = if job == 0 {
            0..self.tasks.len() as u64
        } else {
            job.checked_sub(1)
                .and_then(|i| self.jobs.get(i as usize))
                .filter(|j| !self.retention.is_purged(j.row.id))
                .map(|j| j.tasks.clone())
                .ok_or(StateError::NoJob(job))?
        };
        let start = cursor.clamp(range.start, range.end);
        let end = start
            .saturating_add(page_limit(limit) as u64)
            .min(range.end);
        // Rows not held in memory come from the store; a page skips purged jobs' ids.
        let (rows, end) = self.rows_for_listing(start..end, range.end)?;
        let tasks = rows
            .iter()
            .map(|t| {
                let app = &self.apps[t.app as usize];
                pb::TaskInfo {
                    id: t.id,
                    job_id: app.job,
                    app: app.name.clone(),
                    index: t.index,
                    state: t.state.as_str().to_string(),
                    attempt: t.attempt,
                    node: t
                        .node
                        .and_then(|n| self.nodes.get(n as usize))
                        .map_or(String::new(), |n| n.spec.name.clone()),
                    variant: t
                        .variant
                        .map_or(String::new(), |v| variant_of(Some(v)).to_string()),
                    devices: t.devices.clone(),
                    started_ns: t.started_ns,
                    finished_ns: t.finished_ns,
                    exit_code: t.exit_code.unwrap_or(-1),
                    message: t.message.clone(),
                    failed_attempts: t.failures,
                    output: String::new(),
                    executed_node: self.executed_node(t.id, t.attempt, t.node),
                }
            })
            .collect();
        Ok(pb::ListTasksReply {
            tasks,
            next_cursor: if end < range.end { end } else { 0 },
            total: range.end - range.start,
        })
    }

    /// Removes a dead node (`hetsched node remove`): it is no longer listed, counted or offered
    /// to policies, and its name is free for another agent. A live node is refused: stop its
    /// agent first and wait until it is declared dead. (Its id stays taken: ids are dense.)
    pub fn remove_node(&mut self, name: &str) -> Result<u32, StateError> {
        let Some(&id) = self.node_by_name.get(name) else {
            return Err(StateError::NoNode(name.to_string()));
        };
        let rec = &self.nodes[id as usize];
        if rec.alive {
            return Err(StateError::Invalid(format!(
                "node `{name}` is alive (last heartbeat {} ms ago): stop its agent, wait until the \
                 node is declared dead, then remove it",
                rec.last_seen.elapsed().as_millis()
            )));
        }
        self.store.put_node(&NodeRow {
            id,
            // The name is UNIQUE in the store: a removed node's row gives it up (`#` is not
            // allowed in node names).
            name: format!("#removed-{id}"),
            spec: node_json(&rec.spec)?,
            identity: String::new(),
            removed: true,
        })?;
        self.node_by_name.remove(name);
        let rec = &mut self.nodes[id as usize];
        rec.removed = true;
        rec.identity.clear();
        info!(node = %name, id, "node removed");
        Ok(id)
    }

    /// Every node.
    pub fn nodes(&self) -> pb::ListNodesReply {
        let mut reply = pb::ListNodesReply {
            nodes: self
                .nodes
                .iter()
                .enumerate()
                .filter(|(_, n)| !n.removed)
                .map(|(i, n)| {
                    let v = &self.view.nodes()[i];
                    pb::NodeInfo {
                        id: i as u32,
                        name: n.spec.name.clone(),
                        // A node restored from the store is shown dead until it heartbeats
                        // (the scheduler still gives it RESTART_GRACE to come back).
                        alive: n.alive && n.seen,
                        cores: n.spec.cores,
                        free_cores: v.free.cores,
                        memory_bytes: n.spec.memory_bytes,
                        accelerators: n
                            .spec
                            .accelerators
                            .iter()
                            .map(|a| pb::Accelerator {
                                kind: a.kind.clone(),
                                memory_bytes: a.memory_bytes,
                                speed: a.speed,
                            })
                            .collect(),
                        free_gpus: v.free_devices(None),
                        running: n.running.len() as u32,
                        last_seen_ms: n.last_seen.elapsed().as_millis() as u64,
                        read_bytes_per_sec: n.read_bps,
                        available_memory_bytes: n.available_memory,
                        gpus: n.gpus.clone(),
                        drained: n.drained,
                        draining: n.draining,
                        rack: n.spec.rack.to_string(),
                        backed_off: self
                            .backoff
                            .of_node(i as u32)
                            .map(|(app, e)| pb::BackedOffApp {
                                app: self
                                    .apps
                                    .get(app as usize)
                                    .map_or(String::new(), |a| a.name.clone()),
                                job_id: self.apps.get(app as usize).map_or(0, |a| a.job),
                                failures: e.failures,
                                remaining_ms: e
                                    .until
                                    .saturating_duration_since(Instant::now())
                                    .as_millis()
                                    as u64,
                            })
                            .collect(),
                        ..Default::default()
                    }
                })
                .collect(),
        };
        self.accel_nodes(&mut reply);
        reply
    }

    /// How many jobs were ever submitted (ids run from 1 to this).
    pub fn job_count(&self) -> u64 {
        self.jobs.len() as u64
    }

    /// The name of node `id`, if it has one.
    pub fn node_name(&self, id: u32) -> Option<String> {
        self.nodes
            .get(id as usize)
            .filter(|n| !n.removed)
            .map(|n| n.spec.name.clone())
    }

    /// `hetsched node drain` (`drain`) / `node resume` (`!drain`): stops or restarts placing new
    /// work on a node; its running tasks go on.
    pub fn drain_node(
        &mut self,
        name: &str,
        drain: bool,
    ) -> Result<pb::DrainNodeReply, StateError> {
        let Some(&id) = self.node_by_name.get(name) else {
            return Err(StateError::NoNode(name.to_string()));
        };
        let rec = &mut self.nodes[id as usize];
        if rec.drained != drain {
            rec.drained = drain;
            info!(node = %name, drained = drain, running = rec.running.len(), "node {}", if drain { "drained" } else { "resumed" });
        }
        Ok(pb::DrainNodeReply {
            node_id: id,
            running: rec.running.len() as u32,
        })
    }
}
