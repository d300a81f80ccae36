//! The server's live state: what every job kind shares, and the one dispatch path that routes
//! each event to the kind that owns it ([`crate::jobs`]).
//!
//! The state owns the node registry ([`nodes`]), the cluster's resource ledger (the core's
//! [`SchedulerView`]), the store with its transaction, and the pause on a full disk. Each event
//! is one public function taking and returning the server's own types ([`types`]); protobuf
//! stays at the service edge ([`crate::convert`]):
//! - [`State::on_register`], [`State::remove_node`], [`State::on_drain`], [`State::check_dead`]
//!   (nodes, in [`nodes`]);
//! - [`State::on_heartbeat`]: results go to the kind that owns each task, tasks the node no
//!   longer runs go to their kinds as lost, unexpected ones are killed, then every kind may hand
//!   the node work; one transaction writes what every kind changed;
//! - [`State::on_submit`] (to the submission's kind), [`State::on_cancel`],
//!   [`State::on_resubmit`], [`State::on_purge`];
//! - listings: [`State::list_jobs`], [`State::get_job`], [`State::list_tasks`],
//!   [`State::list_nodes`], [`State::count_tasks`], each asking the kinds.
//!
//! Atomicity: an event changes memory, then `State::commit` writes every row it touched in
//! one transaction, and only then is the reply (acknowledgements, assignments) returned. If the
//! store refuses the write (a full disk), memory is rolled back by rebuilding the state from the
//! store, and dispatch pauses until a probe write succeeds: nothing is acknowledged, assigned,
//! lost or failed meanwhile. Submissions and registrations are store-first.
//!
//! Semantics (see `docs/runtime.md`):
//! - a task's success is recorded once, for the attempt the server dispatched last; results of other
//!   attempts are acknowledged and ignored, and a task with a recorded success is never dispatched
//!   again;
//! - a task the server believes runs on a node, but which that node's heartbeat neither lists as
//!   running nor reports finished, was lost (the assignment never arrived, or the agent restarted):
//!   it goes back to the front of its application's queue with the next attempt number, up to
//!   `max_attempts`, after which it fails; one its agent's clean shutdown killed (`interrupted`,
//!   `hetsched_proto::SHUTDOWN_KILLED`) runs again too, but counts against `max_attempts` no more
//!   than a preempted one (`tasks.interruptions`);
//! - a task a node runs that the server does not expect there (cancelled, or re-queued while the
//!   node was silent) is killed;
//! - a failed attempt (non-zero exit, failure to start, time limit) is re-queued with the next
//!   attempt number while the application's `retries` last; then the task fails. Failed attempts do
//!   not count against `max_attempts`, which bounds lost ones;
//! - with `preemption = "requeue"`, a batch task stopped for waiting work of a higher priority
//!   goes back to the front of its queue at once, its attempt killed in the same reply that
//!   starts the waiting task there; preempted attempts count neither as failures nor against
//!   `max_attempts` (`tasks.preemptions`);
//! - a submission with a client key the store already holds returns the job stored under it (one
//!   job per key, enforced by a UNIQUE index), so a client may retry a submission whose reply it
//!   never received.

use crate::config::ServerConfig;
use crate::jobs::{Batch, Ctx, JobEnd, Jobs, Kind, Outbox, Read, gate};
use crate::metrics::Metrics;
use crate::store::{Store, StoreError, StoreReader};
use hetsched_core::input::InputError;
use hetsched_core::{NodeId, SchedulerView, ViewError};
use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use thiserror::Error;
use tracing::{info, warn};

pub mod accel;
pub mod alarm;
mod divisible;
mod fetch_tickets;
pub mod job_ids;
pub mod nodes;
pub mod prefetch;
pub mod purging;
pub mod signals;
pub mod stall;
mod topology;
mod users;

pub use users::{CapChange, MAX_SHARES, UserEntry, UserOverview, require_admin};
pub mod types;
pub mod wakes;

pub use crate::jobs::batch::{
    MAX_SUBMISSION_KEY, MAX_TASKS_PER_JOB, MAX_WORKDIR, RETENTION_INTERVAL, spec_key,
};
pub use crate::jobs::batch::{StoredTasks, TasksListing};
pub use crate::jobs::{MAX_KNOWN_SPECS, REPLY_BUDGET};
use nodes::Nodes;
use types::{
    HeartbeatReply, HeartbeatReport, JobInfo, JobsPage, PurgeSelection, Purged, Signalled,
    StateFilter, Submission, Submitted, TaskCounts, TaskRef, TasksPage,
};

/// Default page of a list call.
pub const DEFAULT_PAGE: u32 = 1000;
/// Largest page of a list call.
pub const MAX_PAGE: u32 = 10_000;

/// Jobs of other owners a filtered job listing passes over per entry its page may hold.
const SKIPS_PER_ENTRY: usize = 64;

fn page_limit(limit: u32) -> usize {
    match limit {
        0 => DEFAULT_PAGE as usize,
        // In-process callers (tests, metrics) ask for everything.
        u32::MAX => usize::MAX,
        n => n.min(MAX_PAGE) as usize,
    }
}

/// How many of the attempts a returning node gave away its `node is back` log line names; the
/// rest are counted ([`listed_away`]).
const AWAY_NAMED: usize = 10;

/// The attempts a node that came back gave away (task, whether it had finished, where its task
/// stands now), for its `node is back` log line: the first [`AWAY_NAMED`] named, the rest
/// counted, so a node that ran thousands of tasks logs one bounded line.
fn listed_away(gave: &[(TaskRef, bool, String)]) -> String {
    let mut line = gave
        .iter()
        .take(AWAY_NAMED)
        .map(|(t, finished, now)| {
            format!(
                "task {} attempt {}{}: {now}",
                t.task_id,
                t.attempt,
                if *finished { " (finished)" } else { "" }
            )
        })
        .collect::<Vec<_>>()
        .join("; ");
    if gave.len() > AWAY_NAMED {
        line.push_str(&format!("; and {} more", gave.len() - AWAY_NAMED));
    }
    line
}

/// How often a paused state tries the store again.
pub const PROBE_INTERVAL: Duration = Duration::from_millis(500);

/// Whether `e` is the store refusing a write for want of room or an I/O failure (SQLite's
/// "database or disk is full", a disk I/O error, the WAL not synced), not a refusal of the
/// request itself (a constraint, a corrupt row).
fn out_of_room(e: &StateError) -> bool {
    use rusqlite::ErrorCode::{DiskFull, SystemIoFailure};
    match e {
        StateError::Store(StoreError::Sqlite(rusqlite::Error::SqliteFailure(f, _))) => {
            matches!(f.code, DiskFull | SystemIoFailure)
        }
        StateError::Store(StoreError::Sync(_)) => true,
        _ => false,
    }
}

/// How often a store that still refuses writes is said in the log ([`PROBE_INTERVAL`] is how
/// often it is tried).
const REFUSAL_LOG_INTERVAL: Duration = Duration::from_secs(60);

/// Why a task assigned in a heartbeat reply its agent never read waits again.
pub const UNDELIVERED: &str = "its assignment never reached its agent (the agent gave up on that heartbeat's reply); not counted";

/// After a restart, a node gets this many dead-timeouts (at least 5 s) to heartbeat again.
pub const RESTART_GRACE: u32 = 3;

/// The owner as [`StateError::NotOwner`] names it: `the admin`, or a user's name.
fn owned_by(owner: &str) -> String {
    if owner == crate::users::ADMIN {
        "the admin".to_string()
    } else {
        owner.to_string()
    }
}

/// Who may act on what `owner` owns: the owner and the admin (the admin alone for its own).
fn allowed(owner: &str) -> String {
    if owner == crate::users::ADMIN {
        "the admin".to_string()
    } else {
        format!("{owner} or the admin")
    }
}

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
    /// A stored job's file no longer reads (a later version refuses what an earlier one
    /// accepted): the server does not start rather than lose or misread the job.
    #[error(
        "the store holds job {job}, whose file no longer reads under this version of hetsched: \
         {error}. Nothing was changed: run the version that accepted the job until it ends and \
         purge it (`hetsched purge {job}`), then start this one; or, to start this one now \
         without the job, `hetsched server --set-aside {job}` keeps its file and a record of it \
         in DATA_DIR/set-aside and drops its rows as a purge does"
    )]
    StoredJobUnreadable {
        /// The job's id.
        job: u64,
        /// Why its file is refused now.
        error: InputError,
    },
    /// A stored topology's file no longer reads (as [`StateError::StoredJobUnreadable`]).
    #[error(
        "the store holds topology `{name}`, whose file no longer reads under this version of \
         hetsched: {error}. Nothing was changed: run the version that accepted it, kill it if it \
         runs and purge it (`hetsched topology purge {name}`), then start this one; or, to \
         start this one now without it, `hetsched server --set-aside-topology {name}` keeps its \
         file and a record of it in DATA_DIR/set-aside and drops its rows as a purge does"
    )]
    StoredTopologyUnreadable {
        /// The topology's name.
        name: String,
        /// Why its file is refused now (boxed: a name beside it would make every
        /// `StateError` larger).
        error: Box<InputError>,
    },
    /// No such job.
    #[error("no job {0}")]
    NoJob(u64),
    /// No such job any more: it was purged ([`State::explain`]).
    #[error(
        "no job {0}: it was purged (by `hetsched purge` or the `[retention]` rule), with its \
         tasks' records and outputs"
    )]
    Purged(u64),
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
    /// A registration under the name of a node this server has not heard from since it
    /// started, with another identity: the node's own agent may still come back within the
    /// restart grace; the new one takes the name over once the node is declared dead.
    #[error(
        "node name `{name}` is held by a node not heard from since the server started, whose \
         agent had another identity: it has {left_s} s left to come back (the restart grace, \
         three dead timeouts); this agent (a new work directory, or another host) takes the name \
         over then, retrying meanwhile"
    )]
    NameAwaited {
        /// The node's name.
        name: String,
        /// Whole seconds until it is declared dead.
        left_s: u64,
    },
    /// An agent-service call that speaks for a node without proving it is that node's agent:
    /// no such node, or not the identity it registered with ([`State::prove_agent`]).
    #[error(
        "this call speaks for node `{0}` without the identity that node registered with (or \
         no such node is registered): only the node's own agent may speak for it"
    )]
    NotTheNodesAgent(String),
    /// An agent asked for work for a node the server does not hold as working (declared
    /// dead, its agent gone, removed, or kept out since a restart): `why` says which, and
    /// what brings it back.
    #[error("node `{node}` takes no work now: {why}")]
    NodeNotWorking {
        /// The node.
        node: String,
        /// Why it does not work ([`nodes::NodeRec::not_working`]).
        why: String,
    },
    /// A divisible chunk asked for, or reported, by an agent it is not out to.
    #[error(
        "chunk {chunk} of divisible job {job} is out to another node, not `{node}`: only the \
         agent it was sent to may fetch its input or send its result"
    )]
    ChunkNotOutTo {
        /// The job.
        job: u64,
        /// The chunk.
        chunk: u64,
        /// The node the caller proved it speaks for.
        node: String,
    },
    /// The view refused (a bug, or a corrupt store).
    #[error("scheduler view: {0}")]
    View(#[from] ViewError),
    /// A divisible job's call was refused ([`crate::jobs::divisible`]).
    #[error(transparent)]
    Divisible(#[from] crate::jobs::divisible::DivError),
    /// A topology request was refused.
    #[error(transparent)]
    Topology(#[from] crate::jobs::topology::TopologyError),
    /// A user asked to act on another user's job or topology ([`crate::users`]).
    #[error(
        "{what} belongs to {}: only {} may {action}",
        owned_by(owner),
        allowed(owner)
    )]
    NotOwner {
        /// The job (`job 7`) or topology (`topology `wc``).
        what: String,
        /// Its owner.
        owner: String,
        /// What was asked (`cancel it`, `read its logs` …).
        action: &'static str,
    },
    /// A user asked for what only the admin may do.
    #[error(
        "{what} is for the admin (who holds the server's DATA_DIR/token); this token is user \
         {user}'s"
    )]
    AdminOnly {
        /// What was asked.
        what: &'static str,
        /// Who asked.
        user: String,
    },
    /// No user of that name.
    #[error("no user `{0}` (`hetsched user list` lists them)")]
    NoUser(String),
    /// `hetsched user add` of a name taken.
    #[error("user `{0}` exists: `hetsched user add {0} --rotate` gives it a new token")]
    UserExists(String),
}

/// Whether a job in `state` (as [`JobInfo::state`] says it) has ended: `completed`, `failed` and
/// `cancelled` are never left.
pub fn is_final_job_state(state: &str) -> bool {
    matches!(state, "completed" | "failed" | "cancelled")
}

/// Nanoseconds since the Unix epoch: the time base of the server's policies and records.
pub fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// The server's whole state.
pub struct State {
    store: Store,
    view: SchedulerView,
    nodes: Nodes,
    jobs: Jobs,
    heartbeat_interval_ms: u64,
    /// How often idle agents heartbeat ([`ServerConfig::idle_heartbeat`]).
    idle_heartbeat_interval_ms: u64,
    /// Event counters (dispatch, results, lost tasks, submissions, decision time).
    metrics: Arc<Metrics>,
    /// The configuration the state was built with (to rebuild it from the store).
    config: ServerConfig,
    /// Since when the store refuses writes: dispatch is paused (see [`State::on_heartbeat`]).
    paused_since: Option<Instant>,
    /// When the store was last tried while paused.
    last_probe: Option<Instant>,
    /// When a refused probe was last logged: once a minute, not at every probe (twice a
    /// second, 7,200 lines an hour on a full disk).
    last_refusal_logged: Option<Instant>,
    /// When each owner's fair-share usage (`[fair_share]`) and the accounts were last staged
    /// for the store.
    usage_stored: Option<Instant>,
    /// The accounts: what each owner's work held, by day ([`crate::accounting`]).
    ledger: crate::accounting::Ledger,
    /// After a restart, until every node restored live was heard from: what ran while the
    /// server was down, credited to the accounts as the nodes confirm it.
    downtime: Option<crate::accounting::Downtime>,
    /// Accelerator sharing: the node binding (memory only; see [`accel`]).
    sharing: accel::Sharing,
    /// The ANodes' offload keys, the nodes' data keys, and the tickets of offloads and input
    /// fetches ([`crate::tickets`]): the data directory's secret once
    /// [`State::set_offload_keys`] gave it, else one drawn at start.
    offload_keys: crate::tickets::OffloadKeys,
    /// Which kind owns each job id; the next id ([`job_ids`]).
    ids: job_ids::JobIds,
    /// Bumped after every commit in which a job of any kind ended or runs again
    /// (`JobKind::ends_in_event`), after a purge and after a rollback or a rebuild (memory
    /// changed back): what a client waiting for a job's end (`GetJob` with `wait_ms`) waits on,
    /// instead of polling. Not after every commit: a heartbeat that ends no job wakes none of
    /// the waiting clients, however many wait.
    job_ends: Arc<tokio::sync::watch::Sender<u64>>,
    /// When the reaper runs next ([`alarm`]).
    alarm: alarm::Alarm,
    /// A job finished since the `[retention]` rule was last applied: the next retention pass
    /// is planned ([`State::plan_housekeeping`]).
    retention_pending: bool,
    /// When the oldest finished job the `[retention]` rule still keeps passes its
    /// `keep_finished`: the next retention pass is not planned before it (a pass that came
    /// sooner found the job too young, and nothing planned another until the calm re-check,
    /// up to a minute late).
    retention_next: Option<Instant>,
    /// Changes with every purge, and differs across server starts (it starts at the start
    /// time): sent in every heartbeat reply, so that an agent that sees a new value asks which
    /// of the jobs it holds files of were purged ([`State::purged_jobs`]) and deletes those.
    purge_epoch: u64,
    /// Purged batch jobs' task rows still to be deleted, in steps ([`purging`]). Stored.
    purging: purging::Purging,
    /// The automatic allocation queues' status, kept by their loops ([`crate::allocation`]).
    allocations: Option<crate::allocation::Statuses>,
    /// The automatic allocation queues an operator paused (`hetsched allocations --pause`):
    /// they submit nothing. Stored.
    paused_queues: std::collections::BTreeSet<String>,
    /// Waiting jobs are to be decided on again in this event whatever ended (a submission, a
    /// hold or release, a begin time moved or come, a resubmission, a restart): see
    /// [`State::settle_waits`].
    waits_due: bool,
    /// Signals for running tasks waiting for their agents (`hetsched signal`). Stored.
    signals: signals::Signals,
    /// The users, their tokens' hashes and the owners of their jobs ([`crate::users`]). Stored.
    users: crate::users::Users,
    /// Each job's nonce ([`crate::job_nonces`]): what ties the files agents keep for a job to
    /// this job and no other of the same id. Stored.
    nonces: crate::job_nonces::JobNonces,
}

/// Borrows the shared parts of a state as a kind's [`Ctx`] (a macro, so the borrow of
/// `self.jobs` beside it stays separate).
macro_rules! ctx {
    ($s:ident) => {
        Ctx {
            view: &mut $s.view,
            nodes: &mut $s.nodes,
            store: &mut $s.store,
            metrics: &$s.metrics,
            now: now_ns(),
        }
    };
}

impl State {
    /// Opens the store in `config.data_dir` and rebuilds the state from it: finished tasks stay
    /// finished; tasks recorded as running stay assigned to their nodes until those nodes'
    /// heartbeats confirm or deny them (or the nodes are declared dead).
    pub fn open(config: &ServerConfig, mut store: Store) -> Result<Self, StateError> {
        // What the operator set aside (`--set-aside`) leaves the store before anything reads it.
        crate::set_aside::apply(config, &mut store)?;
        job_ids::check_store(&store)?;
        let snap = store.load()?;
        let div = crate::jobs::divisible::load(store.conn())?;
        let mut state = Self::from_snapshot(config, store, snap, div, None)?;
        // A purge the last run committed but did not finish: the purger deletes the rest.
        state.purging = purging::Purging::restore(state.store.conn())?;
        state.purging.chunk = config.purge_chunk_tasks.max(1);
        state.jobs.batch.set_undeleted(state.purging.ranges());
        state.queue_restored();
        state.start_accounts()?;
        Ok(state)
    }

    fn from_snapshot(
        config: &ServerConfig,
        mut store: Store,
        mut snap: crate::store::Snapshot,
        div: Vec<crate::jobs::divisible::StoredJob>,
        source: Option<&rusqlite::Connection>,
    ) -> Result<Self, StateError> {
        config.validate().map_err(StateError::Invalid)?;
        let idle_heartbeat = config.idle_heartbeat().map_err(StateError::Invalid)?;
        let offload_timing = config.offload_timing().map_err(StateError::Invalid)?;
        let mut view = SchedulerView::new();
        let mut nodes = Nodes::default();
        nodes.prefetch = prefetch::Prefetch::new(config.prefetch);
        for row in std::mem::take(&mut snap.nodes) {
            let removed = row.removed;
            let rec = nodes.restore(row)?;
            let id = rec.spec.id;
            let out_of_bounds = rec.out_of_bounds.is_some();
            view.add_node(rec.spec.clone())?;
            if removed || out_of_bounds {
                view.set_alive(id, false)?;
            }
        }
        nodes.restore_drains(&store)?;
        nodes.restore_left(&store, &mut view)?;
        let paused_queues = store.paused_allocation_queues()?.into_iter().collect();
        let signals = signals::Signals::restore(&store, now_ns() / 1_000)?;
        let mut users = crate::users::Users::restore(store.conn(), Default::default())?;
        let nonces = crate::job_nonces::JobNonces::restore(store.conn())?;
        let metrics: Arc<Metrics> = Arc::default();
        let topology = crate::jobs::Topology::restore(
            std::mem::take(&mut snap.topologies),
            Duration::from_nanos(config.dead_timeout.0.max(1_000_000)),
        )?;
        // Each kind rebuilds its jobs and puts its running tasks back on their nodes.
        let batch = {
            let mut cx = Ctx {
                view: &mut view,
                nodes: &mut nodes,
                store: &mut store,
                metrics: &metrics,
                now: now_ns(),
            };
            Batch::restore(config, snap, &mut cx)?
        };
        let divisible = crate::jobs::Divisible::restore(
            config.data_dir.join("divisible"),
            Duration::from_nanos(config.dead_timeout.0.max(1_000_000)),
            div,
            &nodes,
        )?;
        let workflow = crate::jobs::Workflows::restore(
            config,
            &mut Ctx {
                view: &mut view,
                nodes: &mut nodes,
                store: &mut store,
                metrics: &metrics,
                now: now_ns(),
            },
            source,
        )?;
        let mut jobs = Jobs {
            batch,
            divisible,
            topology,
            workflow,
        };
        // Stream workers outlive a restart: the placements' workers hold their cores until their
        // agents' first syncs say what runs.
        jobs.topology.rebook(&mut view, &nodes, &mut users);
        // Agents computing chunks keep doing so through a restart: their cores stay held.
        jobs.divisible
            .rebook(&mut view, &nodes, |job| users.job_group(job));
        // Batch jobs after workflows and divisible jobs: told how those stand below.
        jobs.batch.index_foreign();
        let mut state = State {
            store,
            view,
            nodes,
            ids: job_ids::JobIds::of(&jobs),
            jobs,
            heartbeat_interval_ms: (config.heartbeat_interval.0 / 1_000_000).max(1),
            idle_heartbeat_interval_ms: (idle_heartbeat.as_millis() as u64).max(1),
            metrics,
            config: config.clone(),
            paused_since: None,
            last_probe: None,
            last_refusal_logged: None,
            usage_stored: None,
            ledger: Default::default(),
            downtime: None,
            sharing: accel::Sharing::new(config.binding, config.binding_slots),
            offload_keys: crate::tickets::OffloadKeys::ephemeral().with_timing(offload_timing),
            job_ends: Arc::new(tokio::sync::watch::Sender::new(0)),
            alarm: alarm::Alarm::default(),
            // With a rule, its first pass comes at once: restored jobs may be past it.
            retention_pending: config.retention.is_some(),
            retention_next: None,
            purge_epoch: now_ns().max(1),
            purging: purging::Purging::default(),
            allocations: None,
            paused_queues,
            waits_due: true,
            signals,
            users,
            nonces,
        };
        state.apply_user_groups();
        state.restore_offloads();
        state.restore_fair_usage()?;
        state.settle_waits(true)?;
        Ok(state)
    }

    /// A receiver that sees every later commit that ended a job, or may have (see the
    /// `job_ends` field).
    pub fn job_ends(&self) -> tokio::sync::watch::Receiver<u64> {
        self.job_ends.subscribe()
    }

    /// The event metrics this state updates (shared with the service and the `/metrics` registry).
    pub fn metrics(&self) -> Arc<Metrics> {
        self.metrics.clone()
    }

    /// Hands the automatic allocation queues' status to the state, for listings.
    pub fn set_allocations(&mut self, statuses: crate::allocation::Statuses) {
        self.allocations = Some(statuses);
    }

    /// Whether automatic allocation queue `queue` is paused ([`State::pause_allocations`]).
    pub fn allocation_paused(&self, queue: &str) -> bool {
        self.paused_queues.contains(queue)
    }

    /// `hetsched allocations --pause QUEUE` (`paused`) / `--resume QUEUE`: a paused queue submits
    /// no allocation (those it has go on) until resumed; it stays paused across a restart.
    pub fn pause_allocations(&mut self, queue: &str, paused: bool) -> Result<(), StateError> {
        let names: Vec<&str> = self
            .config
            .allocation
            .iter()
            .map(|q| q.name.as_str())
            .collect();
        if !names.contains(&queue) {
            return Err(StateError::Invalid(if names.is_empty() {
                "no automatic allocation: the server's configuration has no [[allocation]] queue"
                    .into()
            } else {
                format!(
                    "no allocation queue `{}`: the server's queues are {}",
                    hetsched_core::text::clip(queue),
                    names.join(", ")
                )
            }));
        }
        if self.paused_queues.contains(queue) != paused {
            self.store.put_allocation_pause(queue, paused)?;
            info!(
                queue,
                paused,
                "automatic allocation queue {}",
                if paused { "paused" } else { "resumed" }
            );
            if paused {
                self.paused_queues.insert(queue.to_string());
            } else {
                self.paused_queues.remove(queue);
            }
        }
        Ok(())
    }

    /// The automatic allocation queues as last looked at (empty without `[[allocation]]`).
    pub fn allocations(&self) -> Vec<crate::allocation::QueueStatus> {
        let mut queues = self
            .allocations
            .as_ref()
            .and_then(|s| s.lock().ok().map(|s| s.clone()))
            .unwrap_or_default();
        for q in &mut queues {
            q.paused = self.paused_queues.contains(&q.name);
        }
        queues
    }

    /// Whether any node (live, dead or left; not removed) has a name ending with `suffix`.
    pub fn has_node_ending(&self, suffix: &str) -> bool {
        self.nodes
            .iter()
            .any(|n| !n.removed && n.spec.name.ends_with(suffix))
    }

    /// The live nodes whose names end with `suffix`, with their capacity (automatic allocation
    /// names its agents `HOST-JOBID`: an allocation whose agents have not registered yet is still
    /// starting).
    pub fn live_nodes_ending(&self, suffix: &str) -> Vec<(&str, hetsched_core::model::Resources)> {
        self.nodes
            .iter()
            .filter(|n| n.alive && !n.removed && n.spec.name.ends_with(suffix))
            .map(|n| (n.spec.name.as_str(), n.spec.capacity()))
            .collect()
    }

    /// What automatic allocation ([`crate::allocation`]) asks for `queue`: the cores that batch
    /// tasks ready to dispatch (pending, neither held nor waiting for other jobs: those are kept
    /// out of the scheduler's queues) ask for, counting tasks its agents could run
    /// ([`crate::allocation::cores_per_task`]; with `node`, what its agents have, only tasks
    /// that fit on one), and the free cores of the live nodes that take work and offer the
    /// queue's attributes.
    pub fn allocation_demand(
        &self,
        queue: &crate::allocation::QueueConfig,
        node: Option<hetsched_core::model::Resources>,
    ) -> (u64, u64) {
        let attributes = &queue.attributes;
        let ready = self
            .view
            .pending_apps()
            .filter_map(|a| {
                let cores = crate::allocation::cores_per_task(queue, &a.app, node)?;
                Some(cores.saturating_mul(a.pending.len() as u64))
            })
            .fold(0u64, u64::saturating_add);
        let free = self
            .nodes
            .iter()
            .zip(self.view.nodes())
            // A node restored at a restart counts once it is heard from: until then its agent
            // may be gone, and its cores would hide the demand for RESTART_GRACE × dead timeout.
            .filter(|(n, _)| n.alive && n.seen && !n.removed && !n.drained && !n.draining)
            .filter(|(n, _)| n.spec.has_attributes(attributes))
            .map(|(_, v)| u64::from(v.free.cores))
            .sum();
        (ready, free)
    }

    /// Moves the scheduler's clock to now before an event changes anything: fair share charges
    /// what each user held until this moment at what it held, before the event's releases and
    /// dispatches ([`hetsched_core::model::fair_share`]). Every call the service runs, and the
    /// housekeeping timer, begin with it.
    pub fn begin_event(&mut self) {
        self.nodes.set_now(&mut self.view, Instant::now());
    }

    /// The durability of the store's writes: replies wait on it (see [`crate::durable`]).
    pub fn durable(&self) -> Arc<crate::durable::Durable> {
        self.store.durable()
    }

    /// How many writes the store committed so far (a reply sent after an event waits until the
    /// WAL is synced past this count).
    pub fn written(&self) -> u64 {
        self.store.durable().written()
    }

    /// Job `job`'s nonce ([`crate::job_nonces`]; 0: a job stored before nonces): the log reads
    /// the server relays for it name it, and agents serve only the files it wrote.
    pub fn job_nonce(&self, job: u64) -> u64 {
        self.nonces.get(job)
    }

    /// Heartbeat interval agents are told to use.
    pub fn heartbeat_interval_ms(&self) -> u64 {
        self.heartbeat_interval_ms
    }

    // ---------------------------------------------------------------- agents

    /// One heartbeat: hand results to their kinds, reconcile what the node runs with what the
    /// server dispatched there, let every kind fill the node, commit, and answer with
    /// acknowledgements, assignments and kills. A node left running tasks lives by its beats
    /// from here: the reaper is told when it would die.
    pub fn on_heartbeat(&mut self, req: HeartbeatReport) -> Result<HeartbeatReply, StateError> {
        let node = req.node_id;
        let reply = self.beat(req);
        self.node_may_die(node);
        reply
    }

    fn beat(&mut self, mut req: HeartbeatReport) -> Result<HeartbeatReply, StateError> {
        let nid = NodeId(req.node_id);
        let paused = self.paused();
        self.nodes.note_beat(nid.0);
        let Some(rec) = self.nodes.get_mut(nid.0) else {
            return Ok(HeartbeatReply {
                reregister: true,
                ..Default::default()
            });
        };
        // Only the agent that registered the node speaks for it: another caller (or an agent of a
        // server whose data directory was replaced) changes nothing and is told to register.
        if rec.removed
            || rec.identity.is_empty()
            || !nodes::same_secret(&rec.identity, &req.identity)
        {
            warn!(node = %rec.spec.name, "heartbeat with another identity than the node's: ignored");
            return Ok(HeartbeatReply {
                reregister: true,
                ..Default::default()
            });
        }
        // Its stored description was past a registration bound: only a registration, which
        // checks the figures, brings it back (a beat would revive it as it is).
        if rec.out_of_bounds.is_some() {
            return Ok(HeartbeatReply {
                reregister: true,
                ..Default::default()
            });
        }
        rec.heard();
        rec.seen = true;
        rec.read_bps = req.read_bytes_per_sec;
        rec.available_memory = req.available_memory_bytes;
        rec.disk = req.disk;
        rec.gpus = req.gpus.clone();
        if rec.draining != req.draining {
            info!(node = %rec.spec.name, draining = req.draining, "the agent is shutting down: no new work for it");
        }
        rec.draining = req.draining;
        // A time left past the longest time limit an agent may be given (10 years,
        // `input::MAX_DURATION`) is no end the server can place: `u64::MAX` ms made an end 584
        // million years away, listed as such, whose nanoseconds on the view's clock (a `u64`)
        // wrapped to any time at all. It is taken as no end, and said.
        let most = Duration::from_nanos(hetsched_core::input::MAX_DURATION);
        let ends_at = req.time_left.and_then(|left| {
            let end = (left <= most).then(|| rec.last_seen.checked_add(left)).flatten();
            if end.is_none() {
                warn!(node = %rec.spec.name, time_left_ms = left.as_millis() as u64, "the agent's time left is past 10 years: taken as no end");
            }
            end
        });
        // No new work for a drained node or a shutting-down agent (a leaving one says it, one
        // asked to stop is about to).
        let open = !(rec.drained || rec.draining || req.leaving.is_some() || rec.stop.is_some());
        let stop = rec.stop;
        if paused {
            // The store refuses writes: the node is alive (in memory), but nothing is recorded,
            // so nothing is acknowledged (the agent keeps its results), assigned or lost; a
            // member of a running multi-node task is still told so (else it might leave). What
            // the agent runs that the store no longer gives it (a task cancelled before the
            // disk filled, its kill not yet delivered) is still killed: that needs no write,
            // and memory is the store's since the rollback. Before, such a task ran on until
            // the disk had room again. An attempt given up for lost that the first beat after
            // the pause may take back is not killed either.
            let kill = req
                .running
                .iter()
                .filter(|rt| {
                    !self.jobs.owner(rt.task_id).is_some_and(|k| {
                        k.expects(nid, rt) || k.resumable(nid, rt.task_id, rt.attempt)
                    })
                })
                .map(|rt| TaskRef {
                    task_id: rt.task_id,
                    attempt: rt.attempt,
                })
                .collect();
            return Ok(HeartbeatReply {
                kill,
                member_of: self.jobs.batch.multi_node_member_of(nid.0),
                gathering: self.jobs.batch.held_for_gathering(nid),
                // Nor may it leave at its idle timeout with outputs a workflow still needs.
                outputs_needed: self.jobs.workflow.unfinished(&req.holds_outputs_of),
                // Its agent (started meanwhile, say) serves the outputs it holds to the fetches
                // sent before the pause.
                data_key: self.data_key(nid.0),
                ..Default::default()
            });
        }
        // A node that left is not back for its agent's last beat said again (a lost reply).
        let back = !(rec.alive || rec.left.is_some() && req.leaving.is_some());
        if back {
            self.nodes.set_alive(nid.0, true);
            self.view.set_alive(nid, true)?;
            if self
                .nodes
                .get_mut(nid.0)
                .is_some_and(|rec| rec.left.take().is_some())
            {
                self.store.put_left(nid.0, None)?;
            }
        }
        self.nodes.set_end(&mut self.view, nid.0, ends_at);
        let mut reply = HeartbeatReply {
            stop,
            ..Default::default()
        };
        // Fair share integrates what work holds over time: settle it up to now with what ran
        // until now, before these results release it (settled after, the tasks' time since the
        // last settle was charged at the holdings left: a user of short tasks was charged about
        // half their use).
        self.begin_event();
        // An agent's messages are kept with their tasks until the jobs are purged: bounded.
        for r in &mut req.results {
            crate::limits::clip_result_message(&mut r.message);
        }
        for r in &req.results {
            reply.acked.push(TaskRef {
                task_id: r.task_id,
                attempt: r.attempt,
            });
            self.accel_result(nid, r.task_id, r.attempt, r.interrupted && !r.success)?;
            if let Some(kind) = self.jobs.owner_mut(r.task_id) {
                kind.on_result(&mut ctx!(self), nid, r)?;
            }
            self.offload_ended(r.task_id, r.attempt);
        }
        // Reconcile: what the agent runs against what the server dispatched there.
        let mut reported = HashSet::new();
        for rt in &req.running {
            // An attempt given up for lost while the node was out of touch, whose task has
            // not started since, is taken back here, before any kind fills the node.
            let kept = match self.jobs.owner_mut(rt.task_id) {
                Some(k) => {
                    k.expects(nid, rt) || k.resume(&mut ctx!(self), nid, rt.task_id, rt.attempt)
                }
                None => false,
            };
            if kept {
                reported.insert(rt.task_id);
                // The accounts charge a task from when its agent starts it.
                if !rt.queued {
                    self.nodes
                        .prefetch
                        .queued
                        .started(rt.task_id, rt.started_ns);
                } else if !self.nodes.prefetch.queued.contains(rt.task_id) {
                    self.note_queued(rt.task_id, nid);
                }
            } else {
                reply.kill.push(TaskRef {
                    task_id: rt.task_id,
                    attempt: rt.attempt,
                });
            }
        }
        if back {
            let gave = self.given_away(nid, &req, &reply.kill);
            let name = self.nodes.name(nid.0);
            if gave.is_empty() {
                info!(node = %name, "node is back");
            } else {
                info!(node = %name, given_away = gave.len(), attempts = %listed_away(&gave), "node is back; attempts it still ran or finished were given away meanwhile and are not taken");
            }
        }
        self.confirm_downtime(nid, &req, &reported);
        // A task assigned in a reply the agent has not read when it sent this beat is not
        // missing; one assigned in a reply it gave up on never reached it.
        let unread = self.nodes.read_up_to(nid.0, req.reply_seq);
        let mut lost: Vec<u64> = self.nodes.get(nid.0).map_or(Vec::new(), |n| {
            n.running
                .iter()
                .filter(|t| !reported.contains(t) && !unread.pending.contains(t))
                .copied()
                .collect()
        });
        // Each re-queued task goes to the front: the last first, so they keep their order.
        lost.sort_unstable_by(|a, b| b.cmp(a));
        for t in lost {
            if unread.never.contains(&t) {
                self.undelivered(t)?;
            } else {
                self.lose(t, "the task vanished from its node")?;
            }
        }
        // A job these results ended releases the jobs that run after it now (batch jobs after
        // workflows, workflows after any job), so that this reply can carry their tasks.
        self.settle_waits(false)?;
        // Cores released above may owe a prefetch debt: no kind sees them free.
        self.nodes.prefetch.repay_all(&mut self.view);
        // What is still free goes first to the chunks and workers running short of their cores.
        self.top_up_outside_work();
        self.nodes.set_now(&mut self.view, Instant::now());
        self.stage_usage_when_due();
        {
            let mut out = Outbox::new(&mut reply, &req.known_specs);
            for kind in self.jobs.all_mut() {
                let mut cx = Ctx {
                    view: &mut self.view,
                    nodes: &mut self.nodes,
                    store: &mut self.store,
                    metrics: &self.metrics,
                    now: now_ns(),
                };
                kind.on_heartbeat(&mut cx, nid, &req, open, &mut out)?;
            }
        }
        // Until the agent's next beat says it read this reply, its tasks are not missing.
        reply.seq = self.nodes.next_reply_seq();
        self.nodes.sent(
            nid.0,
            reply.seq,
            reply.assignments.iter().map(|d| d.task_id),
        );
        // What this reply sends beyond the node's free cores waits in its agent's queue.
        for d in &reply.assignments {
            if d.prefetched {
                self.note_queued(d.task_id, nid);
            }
        }
        self.accel_heartbeat(nid, &req, &mut reply)?;
        // Each task writes its files as this incarnation of its job id (`crate::job_nonces`);
        // its fetches are signed for it.
        for d in &mut reply.assignments {
            d.job_nonce = self.nonces.get(d.job_id);
        }
        self.sign_fetches(nid.0, &mut reply);
        self.sign_grants(&mut reply);
        self.signal_heartbeat(nid, &req.signalled, &mut reply);
        // Every kind's tasks run as their job's owner (on agents that switch accounts).
        for spec in &mut reply.specs {
            spec.run_as = self.users.run_as(spec.job_id);
            spec.job_nonce = self.nonces.get(spec.job_id);
        }
        // Its last beat: nothing runs there any more, and its agent exits once this is answered.
        if let Some(why) = req.leaving
            && req.running.is_empty()
        {
            self.node_left(nid.0, why)?;
        }
        self.commit()?;
        self.wake(Some(nid));
        reply.purge_epoch = self.purge_epoch;
        // After this beat's results: the one that ended a workflow frees its outputs' holders.
        reply.outputs_needed = self.jobs.workflow.unfinished(&req.holds_outputs_of);
        Ok(reply)
    }

    /// What node `nid`, back after it was declared dead, still ran or finished that the server
    /// does not take: the attempts this beat kills (`kill`) and the results of attempts whose
    /// task went on without them, each with where its task stands now in its kind's words
    /// ([`crate::jobs::JobKind::whereabouts`]).
    fn given_away(
        &self,
        nid: NodeId,
        req: &HeartbeatReport,
        kill: &[TaskRef],
    ) -> Vec<(TaskRef, bool, String)> {
        let words = |task: u64, attempt: u32| {
            self.jobs
                .owner(task)
                .and_then(|k| k.whereabouts(&self.nodes, nid, task, attempt))
        };
        let killed = kill.iter().map(|k| {
            let w = words(k.task_id, k.attempt)
                .unwrap_or_else(|| "not expected on this node any more".into());
            (*k, false, w)
        });
        let finished = req.results.iter().filter_map(|r| {
            let t = TaskRef {
                task_id: r.task_id,
                attempt: r.attempt,
            };
            words(r.task_id, r.attempt).map(|w| (t, true, w))
        });
        killed.chain(finished).collect()
    }

    /// Fills in what a page of tasks cannot say by itself: where each ran (an ANode it was
    /// offloaded to), which of the running ones still wait in their agent's queue, and when
    /// those that waited there started.
    fn listed(&self, page: &mut TasksPage) {
        self.accel_tasks(page);
        let queued = &self.nodes.prefetch.queued;
        if queued.is_idle() {
            return;
        }
        for t in page.tasks.iter_mut().filter(|t| t.state == "running") {
            t.queued = queued.contains(t.id);
            if let Some(at) = queued.began(t.id).filter(|_| !t.queued) {
                t.started_ns = at;
            }
        }
    }

    /// After a restart or a rollback: the work restored beyond its node's free cores is queued
    /// there, as far as the server can tell until the node's next heartbeat says (called once
    /// the owners' groups are known again: a rollback's users come from the real store, after
    /// [`State::from_snapshot`]).
    fn queue_restored(&mut self) {
        for (node, task) in self.nodes.prefetch.take_restored() {
            self.note_queued(task, node);
        }
    }

    /// Running task `task` waits in the queue of `node`'s agent: the accounts leave out what
    /// it holds until it starts ([`prefetch::Queued`]).
    fn note_queued(&mut self, task: u64, node: NodeId) {
        if let Some((group, held)) = self.jobs.owner(task).and_then(|k| k.held(&self.view, task)) {
            self.nodes.prefetch.queued.hold(task, node, group, held);
        }
    }

    /// Which of `ids` (jobs whose files an agent holds) were purged, for the agent of node
    /// `node` that proves its `identity`: it deletes their files. `None`: not that node's agent.
    /// Unknown ids (a work directory that served another server) are not purged: their files
    /// stay.
    pub fn purged_jobs(&self, node: u32, identity: &str, ids: &[u64]) -> Option<Vec<u64>> {
        let rec = self.nodes.get(node)?;
        if rec.removed || rec.identity.is_empty() || !nodes::same_secret(&rec.identity, identity) {
            return None;
        }
        Some(
            ids.iter()
                .copied()
                .filter(|&id| self.is_purged(id))
                .collect(),
        )
    }

    /// Whether the caller of an agent-service call that speaks for node `name` proves it is
    /// that node's agent: `identity` is the one the node registered with (as heartbeats must,
    /// [`State::on_heartbeat`]). A node removed, registered by no identity (restored from an old
    /// store) or unknown is refused too.
    pub fn prove_agent(&self, name: &str, identity: &str) -> Result<(), StateError> {
        let rec = self.nodes.by_name(name).and_then(|id| self.nodes.get(id));
        match rec {
            Some(rec)
                if !rec.removed
                    && !rec.identity.is_empty()
                    && nodes::same_secret(&rec.identity, identity) =>
            {
                Ok(())
            }
            // An agent asks before its registration is through: refused, quietly.
            None => Err(StateError::NotTheNodesAgent(name.to_string())),
            Some(_) => {
                warn!(node = %name, "an agent call for the node with another identity: refused");
                Err(StateError::NotTheNodesAgent(name.to_string()))
            }
        }
    }

    /// Sends the wake-ups this event marked ([`wakes`]): every kind hands over its marks, and
    /// the agents concerned (but `answered`, whose reply carries its work) heartbeat at once.
    fn wake(&mut self, answered: Option<NodeId>) {
        // Room freed under a user's cap: its waiting work may start on nodes nothing marked.
        self.mark_capped_work();
        for kind in self.jobs.all_mut() {
            kind.take_wakes(&mut self.nodes.wakes);
        }
        self.nodes.set_now(&mut self.view, Instant::now());
        self.nodes.flush_wakes(&self.view, answered.map(|n| n.0));
    }

    /// Node `id` is gone (dead, left): the workflows place again what waited for it
    /// ([`crate::jobs::workflow::Workflows::node_gone`]).
    fn workflow_node_gone(&mut self, id: u32) {
        self.jobs.workflow.node_gone(&mut ctx!(self), id);
    }

    /// Node `id` is gone (dead, left): the batch tasks stopped there are waited for no more
    /// ([`crate::jobs::batch::Batch::node_gone`]; workflows' instances go in
    /// [`State::workflow_node_gone`]).
    fn stopping_node_gone(&mut self, id: u32) -> Result<(), StateError> {
        self.jobs.batch.node_gone(&mut ctx!(self), id)
    }

    /// Loses the running multi-node tasks one of whose nodes is gone (dead, left, removed).
    fn lose_broken_multi_node(&mut self) -> Result<(), StateError> {
        self.jobs.batch.lose_broken_multi_node(&mut ctx!(self))
    }

    /// Hands a lost task to its kind (and off its node).
    /// Running task `task` was assigned in a heartbeat reply its agent never read: it waits
    /// again, its kind counting no lost attempt ([`crate::jobs::JobKind::on_undelivered`]).
    fn undelivered(&mut self, task: u64) -> Result<(), StateError> {
        match self.jobs.owner_mut(task) {
            Some(kind) => kind.on_undelivered(&mut ctx!(self), task),
            None => self.lose(task, UNDELIVERED),
        }
    }

    fn lose(&mut self, task: u64, reason: &str) -> Result<(), StateError> {
        match self.jobs.owner_mut(task) {
            Some(kind) => kind.on_lost(&mut ctx!(self), task, reason),
            None => {
                // No kind owns it: nothing to re-run; just forget it.
                for n in 0..self.nodes.len() {
                    self.nodes.ended(NodeId(n as u32), task);
                }
                Ok(())
            }
        }
    }

    /// Gives the divisible chunks and stream workers running short of their cores (they started
    /// on a busy node) what their nodes have free now, before any kind fills a node: new tasks
    /// never take the cores such work already runs on (its agent counts them, `outside`).
    fn top_up_outside_work(&mut self) {
        self.rebook_chunks();
        self.jobs.topology.top_up(&mut self.view);
    }

    /// Writes what every kind changed in one transaction. If the store refuses (a full disk),
    /// the event's changes to memory are rolled back — the state is rebuilt from the store, which
    /// holds exactly what was committed before — and dispatch pauses until the store accepts
    /// writes again: nothing is acknowledged, assigned, lost or failed meanwhile.
    fn commit(&mut self) -> Result<(), StateError> {
        if let Err(e) = self.settle_waits(false) {
            self.roll_back(&e);
            return Err(e);
        }
        // Chunks that went out or ended in this event book or free their agents' cores.
        self.rebook_chunks();
        // Cores this event released on a node that still owes prefetched cores repay the debt
        // now: no listing, and no decision for another node, sees a core the node lacks.
        self.nodes.prefetch.repay_all(&mut self.view);
        // Then the workers short of their cores take what is free.
        self.jobs.topology.top_up(&mut self.view);
        // What each owner held until now is credited; what it holds from now on is noted.
        self.settle_accounts();
        if !self.jobs.all().iter().any(|k| k.has_changes())
            && !self.users.has_changes()
            && !self.ledger.has_changes()
            && !self.nodes.has_heard_staged()
        {
            return Ok(());
        }
        let (jobs, users, ledger, nodes) = (&self.jobs, &self.users, &self.ledger, &self.nodes);
        let written = self.store.transaction(|tx| {
            for kind in jobs.all() {
                kind.persist(tx)?;
            }
            users.persist(tx)?;
            ledger.persist(tx)?;
            nodes.persist_heard(tx)
        });
        match written {
            Ok(()) => {
                let ended = self.jobs.all().iter().any(|k| k.ends_in_event());
                // A job that finished may be one the retention rule no longer keeps.
                if self.config.retention.is_some()
                    && self.jobs.all().iter().any(|k| k.finished_in_event())
                {
                    self.retention_pending = true;
                    self.alarm.due(self.jobs.batch.retention_due());
                }
                for kind in self.jobs.all_mut() {
                    kind.committed();
                }
                self.users.committed();
                self.ledger.committed();
                self.nodes.heard_committed();
                if ended {
                    self.job_ends.send_modify(|c| *c = c.wrapping_add(1));
                }
                Ok(())
            }
            Err(e) => {
                self.roll_back(&e);
                Err(e.into())
            }
        }
    }

    /// A workflow or a divisible job waits by the same rules as a batch job (`jobs::gate`), for
    /// jobs of any kind: checks what submission `sub` names (sorting its lists, without
    /// repeats) and its begin time.
    fn check_gate(&self, sub: &mut Submission) -> Result<(), StateError> {
        if !sub.after_corr.is_empty() {
            return Err(StateError::Invalid(
                "--after-corr applies to batch jobs, whose tasks have indices; a workflow's \
                 instances follow their producers index by index already"
                    .into(),
            ));
        }
        if !sub.after_start.is_empty() {
            return Err(StateError::Invalid(
                "--after-start applies to batch jobs; a workflow or divisible job waits with \
                 --after, --after-any or --after-notok"
                    .into(),
            ));
        }
        let (after, after_any, after_notok) =
            gate::check_named(&sub.after, &sub.after_any, &sub.after_notok, |j| {
                self.job_end(j)
            })?;
        (sub.after, sub.after_any, sub.after_notok) = (after, after_any, after_notok);
        if let Some(b) = sub.begin_ms {
            gate::check_begin(b, now_ns())?;
        }
        Ok(())
    }

    /// A deferred job's begin time (of any kind: `JobKind::next_begin`) wakes the reaper, whose
    /// pass queues its tasks, or starts it, then.
    fn plan_begin(&mut self) {
        let begins = Kind::ALL
            .iter()
            .filter_map(|&k| self.jobs.of_kind(k).next_begin());
        if let Some(at) = begins.min() {
            self.alarm.due(at);
        }
    }

    /// How job `id` stands, whatever its kind (`None`: no such job, or one no job may run
    /// after).
    fn job_end(&self, id: u64) -> Option<JobEnd> {
        let k = self.ids.kind(id)?;
        self.jobs.job_end(k, id)
    }

    /// Settles every job that waits for others across kinds, until nothing more changes (a
    /// job's end may cancel a waiting workflow, whose end cancels a batch job after it, …):
    /// the waiting workflows ([`State::settle_gates`]) and the batch jobs after jobs of other
    /// kinds ([`State::settle_foreign`]).
    ///
    /// Only when something they wait for may have changed: a job ended or runs again in this
    /// event (`JobKind::ends_in_event`), or the event asked (`waits_due`: a submission, a hold,
    /// a begin time, a resubmission; `always`: a restart). A heartbeat that ends no job pays
    /// for none of the waiting jobs.
    fn settle_waits(&mut self, always: bool) -> Result<(), StateError> {
        let forced = always || std::mem::take(&mut self.waits_due);
        let ended = |s: &Self| Kind::ALL.iter().any(|&k| s.jobs.of_kind(k).ends_in_event());
        if !forced && !ended(self) {
            return Ok(());
        }
        // Each round that changes something ends a job or starts one, so this ends; the bound
        // only guards against a mistake.
        for _ in 0..1024 {
            let started = self.settle_gates()?;
            let foreign = self.settle_foreign(forced || started)?;
            if !started && !foreign {
                break;
            }
        }
        Ok(())
    }

    /// The jobs of the kinds that wait before they start (workflows, divisible jobs;
    /// `JobKind::waiting`): each starts once the jobs it names allow it (`jobs::gate::verdict`)
    /// and its begin time came, or is cancelled when one of them ended as it does not allow; a
    /// held one waits for its release. Returns whether one started or was cancelled. Nothing to
    /// do, and no look, when none waits.
    fn settle_gates(&mut self) -> Result<bool, StateError> {
        let now_ms = now_ns() / 1_000_000;
        let mut changed = false;
        for &kind in Kind::ALL {
            if !self.jobs.of_kind(kind).any_waiting() {
                continue;
            }
            for (id, g) in self.jobs.of_kind(kind).waiting() {
                let first = gate::first_unfinished(g.named(), |d| self.job_end(d));
                self.jobs.of_kind_mut(kind).set_waiting_for(id, first);
                if g.held {
                    continue;
                }
                let verdict = gate::verdict(
                    &g.after,
                    &g.after_any,
                    &g.after_notok,
                    g.deferred(now_ms),
                    |d| self.job_end(d),
                );
                match verdict {
                    gate::Verdict::Wait => {}
                    gate::Verdict::Release => {
                        self.jobs
                            .of_kind_mut(kind)
                            .start_waiting(&mut ctx!(self), id);
                        changed = true;
                    }
                    gate::Verdict::Cancel { why, .. } => {
                        self.jobs
                            .of_kind_mut(kind)
                            .cancel_waiting(&mut ctx!(self), id, &why)?;
                        changed = true;
                    }
                }
            }
        }
        Ok(changed)
    }

    /// Tells the batch kind how the workflows and divisible jobs its unfinished jobs run after
    /// stand (`jobs::batch::after`, *Jobs of other kinds*): after an event that changed one of
    /// those kinds (`always`: after a restart), before the event's transaction, so what their
    /// end releases or cancels is stored with it. Nothing to do, and no look, when no batch
    /// job names such a job.
    fn settle_foreign(&mut self, always: bool) -> Result<bool, StateError> {
        if !self.jobs.batch.has_foreign()
            || !(always
                || self
                    .jobs
                    .all()
                    .iter()
                    .any(|k| k.kind() != Kind::Batch && k.ends_in_event()))
        {
            return Ok(false);
        }
        let mut changed = false;
        for id in self.jobs.batch.foreign_jobs() {
            let end = self.job_end(id);
            changed |= self.jobs.batch.foreign_end(&mut ctx!(self), id, end)?;
        }
        Ok(changed)
    }

    /// Undoes every change to memory since the last commit by rebuilding the state from the
    /// store, keeps what the store does not hold (nodes' liveness and last figures), and pauses.
    fn roll_back(&mut self, cause: &dyn std::fmt::Display) {
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

    /// After error `e` of an event or of a write outside events (the reaper's pass,
    /// [`State::apply_retention`]; the purger's steps, [`State::purge_step`]; the eviction of
    /// finished jobs, [`State::evict_finished`]): when it is the store refusing a write for
    /// want of room (a full disk, an I/O error), dispatch pauses and memory is rebuilt from the
    /// store, as after a refused commit ([`State::commit`]), so `/metrics`'
    /// `hetsched_store_writable` reads 0 from that refusal on and the probe resumes as usual.
    /// A write made store-first (a submission, a user's cap, a drain, a purge's transaction, a
    /// purge step: the store before memory) is refused before memory changed; only a commit
    /// rolled memory back before. Once paused, nothing is rebuilt again: the pause's rebuild
    /// stands. The one place every refused write goes through.
    pub fn note_refused_write(&mut self, e: &StateError) {
        if self.paused_since.is_none() && out_of_room(e) {
            self.roll_back(e);
        }
    }

    /// Rebuilds the state from the store (see [`State::roll_back`]). On error, `self` is unchanged.
    fn reload(&mut self) -> Result<(), StateError> {
        let snap = self.store.load()?;
        let div = crate::jobs::divisible::load(self.store.conn())?;
        // The workflow kind reads its rows itself, from the real store (not the scratch one).
        let mut fresh = Self::from_snapshot(
            &self.config,
            Store::in_memory()?,
            snap,
            div,
            Some(self.store.conn()),
        )?;
        std::mem::swap(&mut fresh.store, &mut self.store);
        // What the scratch store could not give: the signals and users the real one holds (the
        // token check keeps reading the same index).
        fresh.signals = signals::Signals::restore(&fresh.store, now_ns() / 1_000)?;
        fresh.users = crate::users::Users::restore(fresh.store.conn(), self.users.index())?;
        fresh.nonces = crate::job_nonces::JobNonces::restore(fresh.store.conn())?;
        fresh.purging = purging::Purging::restore(fresh.store.conn())?;
        fresh.purging.carry_over(&self.purging);
        fresh.apply_user_groups();
        fresh.queue_restored();
        let running: HashSet<u64> = fresh
            .nodes
            .iter()
            .flat_map(|n| n.running.iter().copied())
            .collect();
        fresh
            .nodes
            .prefetch
            .queued
            .carry_began(&self.nodes.prefetch.queued, |t| running.contains(&t));
        fresh.carry_fair_usage(self);
        fresh.nodes.carry_over(&self.nodes);
        fresh.nodes.restore_ends(&mut fresh.view);
        for (i, n) in fresh.nodes.iter().enumerate() {
            if !n.alive {
                fresh.view.set_alive(NodeId(i as u32), false)?;
            }
        }
        // Memory-only facts of the kinds.
        fresh
            .jobs
            .batch
            .carry_over(&mut self.jobs.batch, &mut fresh.view);
        fresh.jobs.divisible.carry_over(&self.jobs.divisible);
        fresh.jobs.workflow.carry_over(&self.jobs.workflow);
        fresh.jobs.topology.carry_over(&mut self.jobs.topology);
        fresh
            .jobs
            .topology
            .rebook(&mut fresh.view, &fresh.nodes, &mut fresh.users);
        let users = &mut fresh.users;
        fresh
            .jobs
            .divisible
            .rebook(&mut fresh.view, &fresh.nodes, |job| users.job_group(job));
        fresh.metrics = self.metrics.clone();
        fresh.paused_since = self.paused_since;
        fresh.last_probe = self.last_probe;
        fresh.last_refusal_logged = self.last_refusal_logged;
        fresh.usage_stored = self.usage_stored;
        fresh.ledger.carry_over(&self.ledger);
        fresh.downtime = self.downtime.take();
        // Waiters hold receivers of this state's channel; memory changed back.
        fresh.job_ends = self.job_ends.clone();
        fresh.job_ends.send_modify(|c| *c = c.wrapping_add(1));
        // The reaper watches this state's plan.
        fresh.alarm = std::mem::take(&mut self.alarm);
        fresh.allocations = self.allocations.take();
        fresh.paused_queues = std::mem::take(&mut self.paused_queues);
        // The ANodes keep their keys, and tickets already sent stay good.
        fresh.offload_keys = self.offload_keys.clone();
        // Listings skip the rows purges left to delete.
        fresh.jobs.batch.set_undeleted(fresh.purging.ranges());
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
        let durable = self.store.durable();
        match self.store.probe().and_then(|()| {
            durable
                .wait_blocking(durable.written())
                .map_err(StoreError::from)
        }) {
            Ok(()) => {
                info!(after = ?since.elapsed(), "the store accepts writes again: dispatch resumes");
                self.paused_since = None;
                false
            }
            Err(e) => {
                if self
                    .last_refusal_logged
                    .is_none_or(|t| t.elapsed() >= REFUSAL_LOG_INTERVAL)
                {
                    self.last_refusal_logged = Some(Instant::now());
                    warn!(
                        paused_for = ?since.elapsed(),
                        "the store still refuses writes ({e}); dispatch stays paused (tried every {:?}, said once a minute)",
                        PROBE_INTERVAL
                    );
                }
                true
            }
        }
    }

    /// The WAL could not be synced: what was committed since the last sync may not be on disk,
    /// and the replies waiting for it were refused. Memory is rolled back to what the store
    /// holds and dispatch pauses, as after a refused commit, until a probe write is synced.
    pub fn sync_failed(&mut self, cause: &crate::durable::SyncError) {
        self.roll_back(cause);
    }

    /// Whether dispatch is paused because the store refuses writes.
    pub fn is_paused(&self) -> bool {
        self.paused_since.is_some()
    }

    /// The store's file (`None` for a store in memory): `/metrics` gauges the room left on its
    /// filesystem.
    pub fn store_path(&self) -> Option<std::path::PathBuf> {
        self.store.path()
    }

    /// Makes the store refuse (or accept again) every write as a full disk does: for tests of the
    /// rollback path where a small filesystem cannot be mounted.
    #[doc(hidden)]
    pub fn simulate_full_disk(&mut self, full: bool) {
        self.store.simulate_full_disk(full);
    }

    /// The dead timeout (at least 1 ms).
    pub fn dead_timeout(&self) -> Duration {
        Duration::from_nanos(self.config.dead_timeout.0.max(1_000_000))
    }

    /// What the reaper watches: when it must run next ([`alarm`]).
    pub fn alarm(&self) -> tokio::sync::watch::Receiver<Instant> {
        self.alarm.subscribe()
    }

    /// After a pass of the reaper ([`State::apply_retention`], [`State::check_dead`]): the first
    /// instant a node can be declared dead or a kind has housekeeping due, at most
    /// [`alarm::CALM_RECHECK`] from now — or a quarter of the dead timeout from now while the
    /// store refuses writes (the checks wait for it then). Becomes the reaper's plan.
    pub fn plan_housekeeping(&mut self) -> Instant {
        let now = Instant::now();
        let timeout = self.dead_timeout();
        let next = if self.paused_since.is_some() {
            now + timeout / 4
        } else {
            let nodes = self.nodes.iter().filter_map(|n| n.dies_at(timeout));
            let kinds = self
                .jobs
                .all()
                .into_iter()
                .filter_map(|k| k.housekeeping_due());
            let retention = self.retention_pending.then(|| {
                let due = self.jobs.batch.retention_due();
                self.retention_next.map_or(due, |at| due.max(at))
            });
            nodes
                .chain(kinds)
                .chain(retention)
                .fold(now + alarm::CALM_RECHECK, Instant::min)
        };
        self.alarm.plan(next);
        next
    }

    /// Every reaper pass: each kind's housekeeping, then retention (at most every
    /// [`RETENTION_INTERVAL`]): eviction of finished batch jobs' rows, and the `[retention]`
    /// rule over the finished jobs of every kind. A write the store refuses for want of room
    /// marks it unwritable at once ([`State::note_refused_write`]).
    pub fn apply_retention(&mut self) -> Result<(), StateError> {
        let done = self.retention_pass();
        if let Err(e) = &done {
            self.note_refused_write(e);
        }
        done
    }

    /// [`State::apply_retention`], but for what a refused write does to the state.
    fn retention_pass(&mut self) -> Result<(), StateError> {
        for kind in self.jobs.all_mut() {
            let mut cx = Ctx {
                view: &mut self.view,
                nodes: &mut self.nodes,
                store: &mut self.store,
                metrics: &self.metrics,
                now: now_ns(),
            };
            kind.housekeeping(&mut cx)?;
        }
        // A waiting job's begin time may have come.
        self.waits_due = true;
        // What housekeeping changed (divisible: chunks of lost agents) in one transaction.
        self.commit()?;
        // The agents that can take what housekeeping queued (a deferred job's tasks) beat now.
        self.wake(None);
        // Retention: newly finished batch jobs leave memory, then the `[retention]` rule
        // purges the finished jobs of every kind it no longer keeps.
        if self.jobs.batch.apply_retention(&mut self.store)?
            && let Some(rule) = &self.config.retention
        {
            self.retention_pending = false;
            let sel = PurgeSelection {
                job_ids: Vec::new(),
                older_than_ms: rule.keep_finished.map(|d| d.0 / 1_000_000),
                keep: rule.keep_jobs,
                owner: None,
            };
            if sel.older_than_ms.is_some() || sel.keep.is_some() {
                self.on_purge(&sel)?;
            }
            // A finished job kept only for being too young is dropped when it is old enough:
            // the next pass is planned for then.
            self.retention_next = None;
            if let Some(keep) = self.config.retention.as_ref().and_then(|r| r.keep_finished) {
                let now = now_ns();
                let next = self
                    .jobs
                    .all()
                    .iter()
                    .flat_map(|k| k.finished_jobs())
                    .map(|(_, end)| end.saturating_add(keep.0))
                    .filter(|&at| at > now)
                    .min();
                if let Some(at) = next {
                    self.retention_pending = true;
                    let at = Instant::now() + std::time::Duration::from_nanos(at - now);
                    self.retention_next = Some(at);
                    self.alarm.due(at);
                }
            }
        }
        // Killed topologies, `keep_finished` after their kill.
        if let Some(keep) = self.config.retention.as_ref().and_then(|r| r.keep_finished) {
            let purged = self.purge_killed_topologies(keep.0)?;
            if purged > 0 {
                info!(
                    topologies = purged,
                    "killed topologies purged by the retention rule"
                );
            }
        }
        Ok(())
    }

    /// Drops the rows of every newly finished batch job from memory, keeping its summary.
    /// Returns how many jobs were evicted: none when the store refused their summaries (a
    /// refusal for want of room marks it unwritable, [`State::note_refused_write`]).
    pub fn evict_finished(&mut self) -> usize {
        match self.jobs.batch.evict_finished(&mut self.store) {
            Ok(n) => n,
            Err(e) => {
                let e = StateError::from(e);
                warn!("finished jobs stay in memory: storing their summaries failed: {e}");
                self.note_refused_write(&e);
                0
            }
        }
    }

    /// How many batch task rows memory holds (finished jobs' rows are not held).
    pub fn tasks_in_memory(&self) -> usize {
        self.jobs.batch.tasks_in_memory()
    }

    // ---------------------------------------------------------------- clients

    /// Accepts a submission: its kind parses it, checks it can run on the live nodes, and stores
    /// it in one transaction before memory changes. On any error nothing is stored.
    /// The job gets the next id of the one sequence shared by every kind ([`job_ids`]).
    pub fn on_submit(&mut self, sub: Submission) -> Result<Submitted, StateError> {
        self.on_submit_as(sub, crate::users::ADMIN)
    }

    /// [`State::on_submit`] of a job that `owner` submits (a user's name, or
    /// [`crate::users::ADMIN`]): the job is `owner`'s, and `--singleton` waits for `owner`'s
    /// jobs of its name only. Submission keys are a namespace per owner: a key names one of
    /// `owner`'s jobs, and the same key from another owner makes (or names) that owner's.
    pub fn on_submit_as(&mut self, sub: Submission, owner: &str) -> Result<Submitted, StateError> {
        let done = self.submit_as(sub, owner);
        if let Err(e) = &done {
            // Its rows go in before memory changes: a refused write would leave the store
            // unwritable unseen until the next commit failed (a heartbeat's, maybe a minute on).
            self.note_refused_write(e);
        }
        done
    }

    /// [`State::on_submit_as`], but for what a refused write does to the state.
    fn submit_as(&mut self, mut sub: Submission, owner: &str) -> Result<Submitted, StateError> {
        crate::limits::submission(&sub).map_err(StateError::Invalid)?;
        sub.owner = owner.to_string();
        sub.max_priority = (owner != crate::users::ADMIN)
            .then(|| self.users.max_priority(owner))
            .flatten();
        sub.cap = if owner == crate::users::ADMIN {
            hetsched_core::Resources::default()
        } else {
            self.users.cap(owner)
        };
        sub.task_room = (owner != crate::users::ADMIN).then(|| types::TaskRoom {
            adding_bytes: (sub.text.len() as u64).saturating_add(sub.divisible_input.len() as u64),
            ..self.task_room(owner)
        });
        if sub.singleton {
            self.singleton(&mut sub, owner)?;
        }
        // `--after-corr` and `--after-start` name batch jobs (the batch kind checks them).
        let batch_only = (sub.after_corr.iter().map(|&j| ("--after-corr", j)))
            .chain(sub.after_start.iter().map(|&j| ("--after-start", j)));
        for (flag, job) in batch_only {
            if let Some(k) = self.ids.kind(job).filter(|&k| k != Kind::Batch) {
                return Err(StateError::Invalid(format!(
                    "{flag}: job {job} is a {} job; {flag} names batch jobs",
                    k.as_str()
                )));
            }
        }
        // `--after`, `--after-any` and `--after-notok` name batch jobs, workflows or divisible
        // jobs; the batch kind checks how they stand, told how the others do.
        let named = (sub.after.iter().map(|&j| ("--after", j)))
            .chain(sub.after_any.iter().map(|&j| ("--after-any", j)))
            .chain(sub.after_notok.iter().map(|&j| ("--after-notok", j)));
        for (flag, job) in named {
            match self.ids.kind(job) {
                Some(Kind::Batch) => {}
                Some(k) => match self.jobs.job_end(k, job) {
                    Some(end) => self.jobs.batch.note_foreign(job, end),
                    None => {
                        return Err(StateError::Invalid(format!(
                            "{flag}: job {job} is a {} job; a job runs after batch jobs, \
                             workflows and divisible jobs",
                            k.as_str()
                        )));
                    }
                },
                None => return Err(StateError::Invalid(format!("{flag}: no job {job}"))),
            }
        }
        let id = self.ids.next()?;
        // The owner's row and the job's nonce go first, under the id the job will get (see
        // `crate::users`, `crate::job_nonces`): a job stored is never without them. An admin's
        // job writes no owner row unless a refused user submission left one for the id.
        let nonce = crate::job_nonces::JobNonces::draw();
        let new_owner = self.users.owner(id) != owner;
        self.store.transaction(|tx| {
            crate::job_nonces::JobNonces::write(tx, id, nonce)?;
            if new_owner {
                crate::users::Users::write_owner(tx, id, owner)?;
            }
            Ok(())
        })?;
        self.nonces.set(id, nonce);
        if new_owner {
            self.users.set_owner(id, owner);
        }
        let live = self.reachable_specs();
        // The names an exclusion `!node:NAME` may give: every node the server knows, live or
        // not (a node away for now may be excluded), unless automatic allocation queues may
        // start nodes of names not known yet.
        let known: Vec<String> = if self.config.allocation.is_empty() {
            self.nodes
                .iter()
                .filter(|n| !n.removed)
                .map(|n| n.spec.name.clone())
                .collect()
        } else {
            Vec::new()
        };
        let prepared = crate::jobs::divisible::prepare(
            &sub.origin,
            &sub.text,
            &sub.divisible_input,
            &live,
            &known,
        )?;
        let kind = if prepared.is_some() {
            Kind::Divisible
        } else if hetsched_core::input::workflow_runtime::is_workflow(&sub.text) {
            Kind::Workflow
        } else {
            Kind::Batch
        };
        self.check_key_of_other_kinds(&sub.key, owner, kind)?;
        let (kind, done) = if let Some(prepared) = prepared {
            let mut sub = sub;
            self.check_gate(&mut sub)?;
            let done = self
                .jobs
                .divisible
                .submit(&mut ctx!(self), sub, prepared, id);
            (Kind::Divisible, done)
        } else {
            if hetsched_core::input::workflow_runtime::is_workflow(&sub.text) {
                let mut sub = sub;
                self.check_gate(&mut sub)?;
                let mut cx = ctx!(self);
                (Kind::Workflow, self.jobs.workflow.submit(&mut cx, sub, id))
            } else {
                let mut cx = ctx!(self);
                let queues = &self.config.allocation;
                (
                    Kind::Batch,
                    self.jobs
                        .batch
                        .submit(&mut cx, &live, &known, queues, sub, id),
                )
            }
        };
        let done = done?;
        // An existing job is `owner`'s own: each kind looks a key up among its owner's jobs.
        if !done.existing {
            self.ids.add(done.job_id, kind);
            self.group_job(done.job_id, owner);
            // Every kind's new job counts (`hetsched_jobs_submitted_total`).
            self.metrics.job_submitted();
        }
        self.waits_due = true;
        if let Err(e) = self.commit() {
            // A workflow or divisible job after jobs that ended as it needs starts at once, and
            // a batch job's task after a failed correspondent (`--after-corr`) is cancelled at
            // once (found by the day fuzz: it was not stored). The job itself is stored (a
            // store-first submission): if this commit fails, the state rolls back to the store
            // and pauses, and the job is decided on again once it resumes — the submission
            // stands.
            warn!(
                job = done.job_id,
                "a waiting job's start was not stored: {e}"
            );
        }
        self.wake(None);
        self.plan_begin();
        Ok(done)
    }

    /// A submission key is one namespace per owner across the job kinds: each kind looks a key
    /// up among its own jobs (a retry returns the job), so a key its owner gave a job of another
    /// kind is refused here, as the same key with another file is.
    fn check_key_of_other_kinds(
        &self,
        key: &str,
        owner: &str,
        kind: Kind,
    ) -> Result<(), StateError> {
        if key.is_empty() {
            return Ok(());
        }
        // A workflow's `key != ''` lets SQLite use its index, which holds only keyed rows.
        let tables = [
            (
                Kind::Batch,
                "SELECT id FROM jobs WHERE owner = ?1 AND submission_key = ?2",
            ),
            (
                Kind::Divisible,
                "SELECT id FROM div_jobs WHERE owner = ?1 AND submission_key = ?2",
            ),
            (
                Kind::Workflow,
                "SELECT id FROM wf_jobs WHERE owner = ?1 AND key = ?2 AND key != ''",
            ),
        ];
        use rusqlite::OptionalExtension;
        for (other, sql) in tables.into_iter().filter(|&(k, _)| k != kind) {
            let found: Option<i64> = self
                .store
                .conn()
                .query_row(
                    &format!("{sql} ORDER BY id LIMIT 1"),
                    rusqlite::params![owner, key],
                    |r| r.get(0),
                )
                .optional()
                .map_err(StoreError::from)?;
            if let Some(id) = found {
                return Err(StateError::Invalid(format!(
                    "submission key `{}` already names job {id} (a {} job), submitted with \
                     another file",
                    hetsched_core::text::clip(key),
                    other.as_str()
                )));
            }
        }
        Ok(())
    }

    /// What user `owner` may still submit: its unfinished tasks of every kind against the
    /// server's `max_unfinished_tasks_per_user` (its jobs' counts, O(jobs owned by users)),
    /// its running topologies' executors included (O(topologies)).
    fn task_room(&self, owner: &str) -> types::TaskRoom {
        let (mut jobs, mut stored_bytes, mut stored_tasks) = (0u64, 0u64, 0u64);
        for (job, o) in self.users.owned() {
            let Some(kind) = self.ids.kind(job).filter(|_| o == owner) else {
                continue;
            };
            let k = self.jobs.of_kind(kind);
            jobs = jobs.saturating_add(k.unfinished_tasks(job));
            stored_bytes = stored_bytes.saturating_add(k.stored_bytes(job));
            stored_tasks = stored_tasks.saturating_add(k.stored_tasks(job));
        }
        for (name, bytes) in self.jobs.topology.stored_bytes() {
            if self.users.topology_owner(name) == owner {
                stored_bytes = stored_bytes.saturating_add(bytes);
            }
        }
        let executors: u64 = self
            .jobs
            .topology
            .running_executors()
            .filter(|&(name, _)| self.users.topology_owner(name) == owner)
            .map(|(_, n)| n)
            .sum();
        let unfinished = jobs.saturating_add(executors);
        types::TaskRoom {
            user: owner.to_string(),
            unfinished,
            cap: self.config.max_unfinished_tasks_per_user,
            stored_bytes,
            adding_bytes: 0,
            bytes_cap: self.config.max_stored_bytes_per_user,
            stored_tasks,
            stored_tasks_cap: self.config.max_stored_tasks_per_user,
        }
    }

    /// `submit --singleton` (Slurm's `--dependency=singleton`): submission `sub` runs after
    /// every unfinished job of its name, of any kind — added to its `after_any` list, so that
    /// it is stored and decided on as any other. Its name is the one the job will have: the
    /// given one, else the file's `name =`, else its origin.
    fn singleton(&self, sub: &mut Submission, owner: &str) -> Result<(), StateError> {
        let name = if sub.name.is_empty() {
            sub.text
                .parse::<toml::Table>()
                .ok()
                .and_then(|t| t.get("name").and_then(|n| n.as_str().map(String::from)))
                .unwrap_or_else(|| sub.origin.clone())
        } else {
            sub.name.clone()
        };
        let mut earlier: Vec<u64> = self
            .jobs
            .all()
            .iter()
            .flat_map(|k| k.unfinished_named(&name))
            .filter(|&j| self.users.owner(j) == owner)
            .collect();
        earlier.sort_unstable();
        if earlier.len() > gate::MAX_AFTER {
            return Err(StateError::Invalid(format!(
                "--singleton: {} unfinished jobs are named `{name}`; a job may run after at most \
                 {}",
                earlier.len(),
                gate::MAX_AFTER
            )));
        }
        sub.after_any.extend(earlier);
        Ok(())
    }

    /// `e` as a client should read it: a job that is not found because it was purged says so
    /// (its id stays taken by a tombstone), instead of reading as an id never given.
    pub fn explain(&self, e: StateError) -> StateError {
        match e {
            StateError::NoJob(id) if self.is_purged(id) => StateError::Purged(id),
            e => e,
        }
    }

    /// Whether job `id` was purged (its kind keeps a tombstone).
    fn is_purged(&self, id: u64) -> bool {
        self.ids
            .kind(id)
            .is_some_and(|k| Kind::ALL.contains(&k) && self.jobs.of_kind(k).is_purged(id))
    }

    /// Where the tasks of application `app` of batch job `job` send their stdout and stderr
    /// (`stdout =`, `stderr =`; empty: captured by their agent, which `hetsched log` reads).
    /// Other kinds' tasks are always captured.
    pub fn task_streams(&self, job: u64, app: &str) -> crate::jobs::batch::AppStreams {
        match self.ids.kind(job) {
            Some(Kind::Batch) => self.jobs.batch.streams(job, app).unwrap_or_default(),
            _ => Default::default(),
        }
    }

    /// [`State::task_streams`] of the applications of `tasks` (job, application) whose tasks do
    /// not leave both streams to their agents.
    pub fn own_streams(
        &self,
        tasks: &[(u64, String)],
    ) -> std::collections::HashMap<(u64, String), crate::jobs::batch::AppStreams> {
        let mut found = std::collections::HashMap::new();
        for (job, app) in tasks {
            if found.contains_key(&(*job, app.clone())) {
                continue;
            }
            let s = self.task_streams(*job, app);
            if s.streams.iter().any(|s| !s.is_empty()) {
                found.insert((*job, app.clone()), s);
            }
        }
        found
    }

    fn job_owner(&self, job: u64) -> Option<&dyn crate::jobs::JobKind> {
        self.ids.kind(job).map(|k| self.jobs.of_kind(k))
    }

    /// `hetsched resubmit JOB --failed`: every failed task of the job runs again.
    pub fn on_resubmit(&mut self, job: u64) -> Result<u64, StateError> {
        self.on_resubmit_ended(job, true, false)
    }

    /// `hetsched resubmit JOB [--failed] [--cancelled]`: every task of the job that failed, and
    /// every one cancelled by itself (`cancel JOB --tasks`), runs again; in one event.
    pub fn on_resubmit_ended(
        &mut self,
        job: u64,
        failed: bool,
        cancelled: bool,
    ) -> Result<u64, StateError> {
        if !failed && !cancelled {
            return Err(StateError::Invalid(
                "resubmit re-runs a job's failed or cancelled tasks: pass --failed, --cancelled \
                 or both"
                    .into(),
            ));
        }
        let k = match self.ids.kind(job) {
            Some(Kind::Topology) | None => return Err(StateError::NoJob(job)),
            Some(k) => k,
        };
        // Tasks brought back are unfinished again: a user's count against its cap as a
        // submission's do, checked before anything changes. From the job's counts: exact for
        // a batch job; a workflow's instances not run because of a failure are left out, so
        // this never refuses more than it should.
        let owner = self.users.owner(job).to_string();
        if owner != crate::users::ADMIN && matches!(k, Kind::Batch | Kind::Workflow) {
            let c = self.get_job(job)?.counts;
            let again = [(failed, c.failed), (cancelled, c.cancelled)]
                .iter()
                .filter(|(asked, _)| *asked)
                .fold(0u64, |n, (_, count)| n.saturating_add(*count));
            if again > 0 {
                self.task_room(&owner)
                    .check_resubmit(job, again)
                    .map_err(StateError::Invalid)?;
            }
        }
        // Cancelled first: a kind that has none refuses before anything changed, and a batch
        // job that takes them takes its failed ones too.
        let mut n = 0;
        // It runs again: what waits for it is looked at again.
        self.waits_due = true;
        if cancelled {
            n += self
                .jobs
                .of_kind_mut(k)
                .resubmit_cancelled(&mut ctx!(self), job)?;
        }
        if failed {
            n += self
                .jobs
                .of_kind_mut(k)
                .resubmit_failed(&mut ctx!(self), job)?;
        }
        self.commit()?;
        // A job brought back into memory (it had left it finished) counts against its
        // owner's cap again.
        self.group_job(job, &owner);
        self.wake(None);
        info!(job, tasks = n, failed, cancelled, "ended tasks resubmitted");
        Ok(n)
    }

    /// [`State::on_resubmit_ended`], also saying which tasks were cancelled again at once (a
    /// task `--after-corr` a task still failed or cancelled) and why the first was: the reply
    /// to `hetsched resubmit`.
    pub fn on_resubmit_told(
        &mut self,
        job: u64,
        failed: bool,
        cancelled: bool,
    ) -> Result<types::Resubmitted, StateError> {
        self.jobs.batch.take_recancelled();
        let tasks = self.on_resubmit_ended(job, failed, cancelled)?;
        let (cancelled_again, why) = self.jobs.batch.take_recancelled();
        Ok(types::Resubmitted {
            tasks,
            cancelled_again,
            why,
        })
    }

    /// Cancels a job: pending tasks are dropped, running ones killed at their nodes' next heartbeat.
    pub fn on_cancel(&mut self, job: u64) -> Result<u64, StateError> {
        self.cancel_because(job, "cancelled")
    }

    /// [`State::on_cancel`] asked by `who` (a user's name or [`crate::users::ADMIN`]): its
    /// tasks say `cancelled`, or `cancelled by the admin` when the admin cancelled a user's job
    /// (a user cancels its own jobs only).
    pub fn on_cancel_by(&mut self, job: u64, who: &str) -> Result<u64, StateError> {
        let why = self.cancelled_by(job, who);
        self.cancel_because(job, &why)
    }

    /// What job `job`'s tasks say when `who` cancels them: `cancelled` when it is the owner,
    /// else `cancelled by the admin` (or by whom).
    fn cancelled_by(&self, job: u64, who: &str) -> String {
        if who == self.users.owner(job) {
            "cancelled".to_string()
        } else if who == crate::users::ADMIN {
            "cancelled by the admin".to_string()
        } else {
            format!("cancelled by {who}")
        }
    }

    fn cancel_because(&mut self, job: u64, why: &str) -> Result<u64, StateError> {
        let n = match self.ids.kind(job) {
            Some(k) => self.jobs.of_kind_mut(k).cancel(&mut ctx!(self), job, why)?,
            None => return Err(StateError::NoJob(job)),
        };
        self.commit()?;
        self.wake(None);
        info!(job, tasks = n, "job cancelled");
        Ok(n)
    }

    /// `hetsched cancel JOB --tasks INDICES [--app NAME]`: cancels some of a batch job's tasks or
    /// a workflow's instances (pending ones dropped, running ones killed at their nodes' next
    /// heartbeat; a cancelled instance's dependants are not run); the rest of the job goes on.
    pub fn on_cancel_tasks(
        &mut self,
        job: u64,
        app: Option<&str>,
        indices: &[u32],
    ) -> Result<u64, StateError> {
        self.on_cancel_tasks_by(
            job,
            app,
            indices,
            self.users.owner(job).to_string().as_str(),
        )
    }

    /// [`State::on_cancel_tasks`] asked by `who`: the tasks say who cancelled them as
    /// [`State::on_cancel_by`] has them.
    pub fn on_cancel_tasks_by(
        &mut self,
        job: u64,
        app: Option<&str>,
        indices: &[u32],
        who: &str,
    ) -> Result<u64, StateError> {
        let why = self.cancelled_by(job, who);
        let n = match self.ids.kind(job) {
            Some(k) => {
                self.jobs
                    .of_kind_mut(k)
                    .cancel_tasks(&mut ctx!(self), job, app, indices, &why)?
            }
            None => return Err(StateError::NoJob(job)),
        };
        self.commit()?;
        self.wake(None);
        info!(job, tasks = n, "tasks cancelled");
        Ok(n)
    }

    /// `hetsched signal JOB --signal SIG [--tasks INDICES] [--app NAME]` (Slurm's `scancel
    /// --signal`): `signal` goes to the job's attempts running now (those with these indices,
    /// of that application or workflow task), or a divisible job's chunks out to agents, at
    /// their agents' next heartbeat, which they are woken for ([`signals`]). Nothing is
    /// cancelled. Returns how many attempts and chunks it goes to (0: none runs).
    pub fn on_signal(
        &mut self,
        job: u64,
        signal: &'static str,
        app: Option<&str>,
        indices: Option<&[u32]>,
    ) -> Result<Signalled, StateError> {
        let mut attempts = match self.ids.kind(job) {
            Some(k) => self
                .jobs
                .of_kind(k)
                .running_attempts(job, app, indices, &self.nodes)?,
            None => return Err(StateError::NoJob(job)),
        };
        // A task waiting in its agent's queue (`prefetch`) has no process to signal: it is
        // neither signalled nor counted.
        attempts.retain(|a| a.chunk_of != 0 || !self.nodes.prefetch.queued.contains(a.task_id));
        // Signals whose tasks left their nodes (a dead node never beats to drop them).
        let mut signals = std::mem::take(&mut self.signals);
        let gone = signals
            .sweep(|p| self.nodes.get(p.node).is_some_and(|n| n.alive) && self.still_runs(p));
        self.signals = signals;
        if !gone.is_empty() {
            self.store.drop_task_signals(&gone)?;
        }
        if self.signals.len() + attempts.len() > signals::MAX_PENDING {
            return Err(StateError::Invalid(format!(
                "{} signals already wait for their agents (at most {}): try again once they have \
                 been delivered",
                self.signals.len(),
                signals::MAX_PENDING
            )));
        }
        let planned = self.signals.plan(&attempts, signal);
        let rows: Vec<crate::store::StoredSignal> = planned
            .iter()
            .map(|(seq, p)| crate::store::StoredSignal {
                seq: *seq,
                node: p.node,
                task: p.task,
                attempt: p.attempt,
                signal: p.signal.to_string(),
                chunk_of: p.chunk_of,
            })
            .collect();
        self.store.put_task_signals(&rows)?;
        self.signals.insert(planned);
        for a in &attempts {
            self.nodes.wakes.node(a.node);
        }
        self.wake(None);
        let chunks = attempts.iter().filter(|a| a.chunk_of != 0).count() as u64;
        let tasks = attempts.len() as u64 - chunks;
        info!(job, signal, tasks, chunks, "signal sent to running tasks");
        Ok(Signalled { tasks, chunks })
    }

    /// Whether the attempt or chunk a pending signal is for is still on its node: a task the
    /// node runs, or a divisible chunk out to the node's agent.
    fn still_runs(&self, p: &signals::Pending) -> bool {
        match p.chunk_of {
            0 => self
                .nodes
                .get(p.node)
                .is_some_and(|n| n.running.contains(&p.task)),
            job => self.ids.kind(job).is_some_and(|k| {
                self.jobs
                    .of_kind(k)
                    .chunk_out_to(job, p.task, self.nodes.name(p.node))
            }),
        }
    }

    /// Adds the signals pending for node `nid` to its heartbeat's reply, and forgets those its
    /// agent handled (`handled`) or whose tasks left it.
    fn signal_heartbeat(&mut self, nid: NodeId, handled: &[u64], reply: &mut HeartbeatReply) {
        if self.signals.is_empty() {
            return;
        }
        let mut signals = std::mem::take(&mut self.signals);
        let out = signals.for_node(nid.0, handled, |p| self.still_runs(p));
        self.signals = signals;
        if !out.done.is_empty()
            && let Err(e) = self.store.drop_task_signals(&out.done)
        {
            // Kept in the store: a restarted server sends them again, and the agent, which
            // delivers a seq once per attempt, only acknowledges them.
            warn!(error = %e, "cannot forget delivered signals in the store");
        }
        reply.more |= out.more;
        reply.signals = out.send;
    }

    /// `hetsched hold JOB` (`hold`) / `release JOB`: whether a batch job's pending tasks may be
    /// dispatched; running ones go on. Returns how many pending tasks it held or queued again.
    pub fn on_hold(&mut self, job: u64, hold: bool) -> Result<u64, StateError> {
        let n = match self.ids.kind(job) {
            Some(Kind::Batch) => self.jobs.batch.hold(&mut ctx!(self), job, hold)?,
            // A job that waits before it starts (released: it starts once what it waits for
            // allows, in the commit below).
            Some(k) => self.jobs.of_kind_mut(k).hold_waiting(job, hold)?,
            None => return Err(StateError::NoJob(job)),
        };
        self.waits_due = true;
        self.commit()?;
        self.wake(None);
        info!(job, tasks = n, hold, "job held or released");
        Ok(n)
    }

    /// `hetsched update JOB`: a batch job's applications' priority, max_running or time limit
    /// change (see `jobs::batch::update`). Returns the applications as the update left them.
    pub fn on_update(
        &mut self,
        job: u64,
        update: &crate::jobs::batch::Update,
    ) -> Result<Vec<crate::jobs::batch::Updated>, StateError> {
        let apps = match self.ids.kind(job) {
            Some(Kind::Batch) => self.jobs.batch.update(&mut ctx!(self), job, update)?,
            Some(k) => {
                // A job that waits before it starts: its begin time only (it starts, in the
                // commit below, if that has come and nothing else keeps it).
                let only_begin = crate::jobs::batch::Update {
                    begin_ms: update.begin_ms,
                    ..Default::default()
                };
                let Some(b) = update.begin_ms.filter(|_| *update == only_begin) else {
                    return Err(StateError::Invalid(format!(
                        "job {job} is a {} job: update changes its begin time only (`--begin`), \
                         before it starts",
                        k.as_str()
                    )));
                };
                gate::check_begin(b, now_ns())?;
                self.jobs.of_kind_mut(k).set_begin(job, b)?;
                Vec::new()
            }
            None => return Err(StateError::NoJob(job)),
        };
        self.waits_due = true;
        self.commit()?;
        self.wake(None);
        // A begin time moved: the reaper queues the job's tasks (or starts it) then.
        self.plan_begin();
        info!(job, ?update, "job updated");
        Ok(apps)
    }

    /// Purges the finished jobs of every kind that `sel` selects (see [`PurgeSelection`]): the
    /// named ones, those that finished at least `older_than` ago, and all but the `keep` most
    /// recently finished. A named job that does not exist, is purged already or is not finished
    /// refuses the whole request. The jobs are purged for every reader in one transaction —
    /// job rows marked, summaries, owners, nonces and divisible jobs' workers deleted — with at
    /// most [`purging::PURGE_CHUNK_TASKS`] of their task, chunk and instance rows; the rest of
    /// those are recorded in it and deleted afterwards in steps ([`State::purge_step`]), so the
    /// state is not held for the whole deletion. Memory (and a divisible job's files) change
    /// only once it committed.
    pub fn on_purge(&mut self, sel: &PurgeSelection) -> Result<Purged, StateError> {
        // Batch jobs that finished since the last retention pass are listed once evicted, and
        // only a choice by age or count reads that list. A purge of named jobs evicts nothing:
        // the eviction reads every row of each newly finished job under the state's lock (5
        // million rows: 26–236 ms) to store a summary that the purge deletes in the same
        // instant; the named jobs' rows simply leave memory with them (docs/performance.md,
        // "Purges in steps").
        if sel.older_than_ms.is_some() || sel.keep.is_some() {
            self.jobs.batch.evict_finished(&mut self.store)?;
        }
        let mut chosen: BTreeSet<u64> = BTreeSet::new();
        let mut already_purged = Vec::new();
        for &id in &sel.job_ids {
            if let Some(owner) = &sel.owner {
                self.check_owner(owner, id, "purge")?;
            }
            // What a purge would make of it already: a retried purge (its reply lost) or a
            // retention pass in between must not refuse the rest.
            if self.is_purged(id) {
                already_purged.push(id);
                continue;
            }
            match self.ids.kind(id) {
                Some(kind) if Kind::ALL.contains(&kind) => {
                    self.jobs.of_kind(kind).check_purge(id)?;
                }
                _ => return Err(StateError::NoJob(id)),
            }
            chosen.insert(id);
        }
        // Every kind's finished jobs, most recently finished first (ties: the later job).
        let mut finished: Vec<(u64, u64)> = self
            .jobs
            .all()
            .iter()
            .flat_map(|k| k.finished_jobs())
            .filter(|&(id, _)| {
                sel.owner
                    .as_deref()
                    .is_none_or(|o| self.users.owner(id) == o)
            })
            .collect();
        finished.sort_unstable_by(|a, b| b.1.cmp(&a.1).then(b.0.cmp(&a.0)));
        if let Some(older_than_ms) = sel.older_than_ms {
            let cutoff = now_ns().saturating_sub(older_than_ms.saturating_mul(1_000_000));
            chosen.extend(
                finished
                    .iter()
                    .filter(|(_, end)| *end <= cutoff)
                    .map(|(id, _)| *id),
            );
        }
        if let Some(keep) = sel.keep {
            chosen.extend(
                finished
                    .iter()
                    .skip(keep.min(usize::MAX as u64) as usize)
                    .map(|(id, _)| *id),
            );
        }
        if chosen.is_empty() {
            return Ok(Purged {
                already_purged,
                ..Purged::default()
            });
        }
        let mut by_kind: BTreeMap<Kind, Vec<u64>> = BTreeMap::new();
        for &id in &chosen {
            if let Some(kind) = self.ids.kind(id) {
                by_kind.entry(kind).or_default().push(id);
            }
        }
        let mut tasks = 0;
        let mut left = Vec::new();
        let mut budget = self.purging.chunk;
        let jobs = &self.jobs;
        self.store.transaction(|tx| {
            for (kind, ids) in &by_kind {
                let (n, rest) = jobs.of_kind(*kind).purge_rows(tx, ids, &mut budget)?;
                tasks += n;
                for l in &rest {
                    purging::record(tx, l)?;
                }
                left.extend(rest);
                crate::users::Users::delete_owners(tx, ids)?;
                crate::job_nonces::JobNonces::delete(tx, ids)?;
            }
            Ok(())
        })?;
        self.store
            .give_back_free_pages(left.is_empty() && self.purging.rows_left() == 0);
        self.purging.queue(left);
        self.jobs.batch.set_undeleted(self.purging.ranges());
        for (kind, ids) in &by_kind {
            self.jobs.of_kind_mut(*kind).purged(&mut ctx!(self), ids);
            self.users.purged(ids);
            self.nonces.purged(ids);
        }
        let purged: Vec<u64> = chosen.into_iter().collect();
        info!(jobs = ?purged, tasks, "finished jobs purged");
        // Agents delete what these jobs left with them ([`State::purged_jobs`]) once a reply
        // carries the new epoch: idle ones are woken to beat now, not at their next idle beat.
        self.purge_epoch = self.purge_epoch.wrapping_add(1).max(1);
        self.job_ends.send_modify(|g| *g = g.wrapping_add(1));
        let live: Vec<u32> = (0..self.nodes.len() as u32)
            .filter(|&n| self.nodes.get(n).is_some_and(|r| r.alive && !r.removed))
            .collect();
        for n in live {
            self.nodes.wakes.node(n);
        }
        self.wake(None);
        Ok(Purged {
            purged,
            tasks,
            already_purged,
        })
    }

    /// Deletes the next step of what purges left (at most the chunk bound of rows, in one
    /// transaction; see [`purging`]) and gives their pages back. Returns how many rows it
    /// deleted (at least 1 while anything was left); 0 once nothing is left. The server's
    /// purger task calls it until then, taking
    /// the state for each step only. A step the store refuses changes nothing (it is tried
    /// again) and answers the calls waiting for the purge ([`State::purge_progress`]).
    pub fn purge_step(&mut self) -> Result<u64, StateError> {
        if self.purging.rows_left() == 0 {
            return Ok(0);
        }
        let (purging, most) = (&self.purging, self.purging.chunk);
        let mut done = (Vec::new(), 0);
        let stepped = self.store.transaction(|tx| {
            done = purging::delete_step(tx, purging.left(), most)?;
            Ok(())
        });
        if let Err(e) = stepped {
            self.purging.failed();
            let e = StateError::from(e);
            self.note_refused_write(&e);
            return Err(e);
        }
        let (step, deleted) = done;
        self.purging.stepped(&step);
        self.store
            .give_back_free_pages(self.purging.rows_left() == 0);
        self.jobs.batch.set_undeleted(self.purging.ranges());
        // A step that found none of its rows stored (a record from before steps counted rows)
        // still moved the queue on: said as one, so that the purger goes on while any is left.
        Ok(deleted.max(u64::from(!step.is_empty())))
    }

    /// Purged jobs' rows not deleted yet ([`State::purge_step`] deletes them).
    pub fn purge_left(&self) -> u64 {
        self.purging.rows_left()
    }

    /// What a purge call waits for: the value of [`purging::Progress::deleted`] at which the
    /// rows of every purge so far are deleted, and a receiver of the purger's progress.
    pub fn purge_progress(&self) -> (u64, tokio::sync::watch::Receiver<purging::Progress>) {
        (self.purging.target(), self.purging.progress())
    }

    /// Notified whenever a purge leaves rows for the purger task ([`State::purge_step`]).
    pub fn purge_work(&self) -> Arc<tokio::sync::Notify> {
        self.purging.work()
    }

    fn read(&self) -> Read<'_> {
        // What the queues' loops last found: which fail, and what their agents have.
        let (failing_queues, queue_capacity) = self
            .allocations
            .as_ref()
            .and_then(|s| {
                s.lock().ok().map(|s| {
                    (
                        s.iter()
                            .filter(|q| q.error.is_some())
                            .map(|q| q.name.clone())
                            .collect(),
                        s.iter()
                            .filter_map(|q| Some((q.name.clone(), q.agent_capacity?)))
                            .collect(),
                    )
                })
            })
            .unwrap_or_default();
        Read {
            view: &self.view,
            nodes: &self.nodes,
            users: &self.users,
            store: &self.store,
            capable: Default::default(),
            allocation: &self.config.allocation,
            paused_queues: &self.paused_queues,
            store_paused_since: self.paused_since,
            failing_queues,
            queue_capacity,
        }
    }

    /// Tasks of every kind by state.
    pub fn count_tasks(&self) -> TaskCounts {
        let mut c = TaskCounts::default();
        for kind in self.jobs.all() {
            c.add(&kind.counts());
        }
        c.queued = self.nodes.prefetch.queued.len() as u64;
        c
    }

    /// The units of the running divisible loads, which [`State::count_tasks`] leaves out (the
    /// dashboard's header counts them apart).
    pub fn running_units(&self) -> crate::jobs::RunningUnits {
        let mut r = crate::jobs::RunningUnits::default();
        for kind in self.jobs.all() {
            let k = kind.running_units();
            r.jobs += k.jobs;
            r.done += k.done;
            r.units += k.units;
        }
        r
    }

    /// What kind job `id` is (`None`: no such job).
    pub fn job_kind(&self, id: u64) -> Option<Kind> {
        self.ids.kind(id)
    }

    /// How many jobs were ever submitted.
    pub fn job_count(&self) -> u64 {
        self.jobs.all().iter().map(|k| k.job_count()).sum()
    }

    /// How many of [`State::job_count`]'s jobs were purged (their ids are listed no more).
    pub fn purged_job_count(&self) -> u64 {
        self.jobs.all().iter().map(|k| k.purged_count()).sum()
    }

    /// One page of jobs of every kind, in id order: from job id `cursor` (0 = the first), at
    /// most `limit` (0 = the default). Each job's entry costs its kind a lookup and a few
    /// additions (batch keeps its counts as tasks move), never a scan of its tasks, so the
    /// state's lock is held for the page's copy only.
    pub fn list_jobs(&self, cursor: u64, limit: u32) -> JobsPage {
        self.list_jobs_of(cursor, limit, None)
    }

    /// Whether a listing by owner `name` may find jobs (see [`crate::users::Users::owns_or_may_own`]).
    pub fn knows_owner(&self, name: &str) -> bool {
        self.users.owns_or_may_own(name)
    }

    /// [`State::list_jobs`] of `owner`'s jobs only (`None`: everyone's). The page still walks
    /// at most `limit` jobs of any owner, so it may hold fewer (and still have a next cursor).
    pub fn list_jobs_of(&self, cursor: u64, limit: u32, owner: Option<&str>) -> JobsPage {
        let limit = page_limit(limit);
        let rd = self.read();
        let mut page = JobsPage::default();
        let mut seen = 0;
        for (id, kind) in self.ids.from(cursor) {
            if page.jobs.len() >= limit || seen >= limit.saturating_mul(SKIPS_PER_ENTRY) {
                page.next_cursor = id;
                break;
            }
            if !Kind::ALL.contains(&kind) {
                continue;
            }
            let job_owner = self.users.owner(id);
            if owner.is_some_and(|o| o != job_owner) {
                // Counted against the page (a look-up each, far cheaper than an entry): a
                // listing of one user's few jobs among many others' holds the lock for about
                // as long as a full page.
                seen += 1;
                continue;
            }
            // The kind's page from `id`, one long: this job, unless the kind hides it (purged).
            let one = self.jobs.of_kind(kind).jobs_page(&rd, id, 1);
            page.jobs
                .extend(one.jobs.into_iter().filter(|j| j.id == id).map(|mut j| {
                    j.owner = job_owner.to_string();
                    j
                }));
        }
        page
    }

    /// Why batch job `id`'s pending tasks could not run on any node now, were it released and
    /// what it waits for done ([`crate::jobs::batch::Batch::unrunnable`]); `None` for a job they
    /// could run on, or of another kind.
    pub fn unrunnable(&self, id: u64) -> Option<String> {
        match self.ids.kind(id) {
            Some(Kind::Batch) => self.jobs.batch.unrunnable(&self.read(), id),
            _ => None,
        }
    }

    /// One job with its applications.
    pub fn get_job(&self, id: u64) -> Result<JobInfo, StateError> {
        match self.job_owner(id) {
            Some(kind) => kind.job(&self.read(), id).map(|mut j| {
                j.owner = self.users.owner(id).to_string();
                j
            }),
            None => Err(StateError::NoJob(id)),
        }
    }

    /// Whether job `id` has ended: its state (as [`State::get_job`] shows it) is `completed`,
    /// `failed` or `cancelled`, states it never leaves. A look-up
    /// ([`crate::jobs::JobKind::listed_state`]) where the job's kind has one, not the whole entry:
    /// a call held until a job ends asks this at each wake-up (`State::job_ends`).
    pub fn job_ended(&self, id: u64) -> Result<bool, StateError> {
        let kind = self.job_owner(id).ok_or(StateError::NoJob(id))?;
        match kind.listed_state(id) {
            Some(state) => Ok(is_final_job_state(state)),
            None => kind
                .job(&self.read(), id)
                .map(|j| is_final_job_state(&j.state)),
        }
    }

    /// Whether job `id` is over for a client waiting on it: it ended ([`State::job_ended`]) and
    /// none of its stopped tasks' processes may still run (`JobInfo::stopping`, Slurm's
    /// *completing*): what a `GetJob` held until the job ends waits for.
    pub fn job_over(&self, id: u64) -> Result<bool, StateError> {
        let kind = self.job_owner(id).ok_or(StateError::NoJob(id))?;
        Ok(self.job_ended(id)? && kind.stopping(id) == 0)
    }

    /// One page of a job's tasks (job 0 = every job of every kind): from task id `cursor`
    /// (0 = the first), at most `limit` (0 = the default). The state's lock is held for one page
    /// only.
    pub fn list_tasks(&self, job: u64, cursor: u64, limit: u32) -> Result<TasksPage, StateError> {
        let limit = page_limit(limit);
        if job != 0 {
            let mut page = match self.job_owner(job) {
                Some(kind) => kind.tasks_page(&self.read(), job, cursor, limit)?,
                None => return Err(StateError::NoJob(job)),
            };
            self.listed(&mut page);
            return Ok(page);
        }
        // Every job: the cursor's kind says where the listing is.
        let cursor = self.first_listed(cursor);
        let Some(kind) = self.jobs.owner(cursor) else {
            return Ok(TasksPage::default());
        };
        let all = kind.kind().id(0);
        let mut page = kind.tasks_page(&self.read(), all, cursor, limit)?;
        if page.next_cursor == 0 {
            page.next_cursor = self.next_listed(kind.kind());
        }
        self.listed(&mut page);
        Ok(page)
    }

    /// Where a listing over every kind starts from `cursor`: past a kind with nothing to list, so
    /// that its first page is not empty (without batch jobs, cursor 0 would list the empty batch
    /// kind first).
    fn first_listed(&self, cursor: u64) -> u64 {
        match self.jobs.owner(cursor) {
            Some(k) if nothing_listed(k) => self.next_listed(k.kind()),
            _ => cursor,
        }
    }

    /// Where a listing over every kind goes on after `kind`: the next kind that has something to
    /// list (0: none), so no page of the listing is empty.
    fn next_listed(&self, mut kind: Kind) -> u64 {
        loop {
            let next = next_kind_start(kind);
            if next == 0 {
                return 0;
            }
            match self.jobs.owner(next) {
                Some(k) if nothing_listed(k) => kind = k.kind(),
                _ => return next,
            }
        }
    }
}

impl State {
    /// [`State::list_tasks`] in two steps: under the state's lock, either the page itself or —
    /// for a batch job, and for job 0 while the listing is in the batch kind's ids — a plan to
    /// read it from the store afterwards without the lock ([`StoredTasks::read`] on
    /// [`State::store_reader`]).
    ///
    /// With a filter (`states`), a single batch job's page is filtered by the store's query; other
    /// pages come whole, and the caller keeps the tasks `states` admits.
    pub fn plan_tasks(
        &self,
        job: u64,
        cursor: u64,
        limit: u32,
        states: &StateFilter,
    ) -> Result<TasksListing, StateError> {
        let cursor = if job == 0 {
            self.first_listed(cursor)
        } else {
            cursor
        };
        let every_job_in_batch = job == 0 && Kind::of(cursor) == Some(Kind::Batch);
        if self.ids.kind(job) != Some(Kind::Batch) && !every_job_in_batch {
            return self.list_tasks(job, cursor, limit).map(TasksListing::Ready);
        }
        if job != 0 && !states.is_all() && states.batch().is_empty() {
            // No batch state asked for: nothing of a batch job is listed.
            return Ok(TasksListing::Ready(TasksPage {
                tasks: Vec::new(),
                next_cursor: 0,
                total: 0,
            }));
        }
        let mut listing = self.jobs.batch.plan_tasks_page(
            &self.read(),
            job,
            cursor,
            page_limit(limit),
            states.batch(),
        )?;
        match &mut listing {
            TasksListing::Ready(page) => self.listed(page),
            TasksListing::FromStore(stored) => {
                stored.executed = self.executed_in(stored.ids());
                stored.queued = self.nodes.prefetch.queued.within(stored.ids());
                stored.began = self.nodes.prefetch.queued.began_within(stored.ids());
                if job == 0 {
                    stored.after = self.next_listed(Kind::Batch);
                }
            }
        }
        Ok(listing)
    }

    /// A second, read-only connection to the store (`None` for a store in memory).
    pub fn store_reader(&self) -> Result<Option<StoreReader>, StateError> {
        Ok(self.store.reader()?)
    }
}

/// Whether a kind has no task to list.
fn nothing_listed(k: &dyn crate::jobs::JobKind) -> bool {
    let c = k.counts();
    c.pending + c.running + c.succeeded + c.failed + c.cancelled == 0
}

/// Where a listing over every kind goes on after `kind`'s last page (0: it was the last kind).
fn next_kind_start(kind: Kind) -> u64 {
    Kind::ALL.iter().find(|k| **k > kind).map_or(0, |k| k.id(0))
}

impl State {
    /// A workflow's task graph in DOT (issue 13).
    pub fn workflow_dot(&self, job: u64) -> Result<String, StateError> {
        match self.ids.kind(job) {
            Some(Kind::Workflow) => {}
            // A job of another kind has no task graph: say so, not that it does not exist.
            Some(kind) => {
                return Err(StateError::Invalid(format!(
                    "job {job} is a {} job: only a workflow has a task graph (`hetsched job \
                     {job}` shows it)",
                    kind.as_str()
                )));
            }
            None => return Err(StateError::NoJob(job)),
        }
        self.jobs.workflow.dot(job).ok_or(StateError::NoJob(job))
    }

    /// How many round trips between nodes the workflow kind keeps (one per ordered pair
    /// measured): for the tests that bound what agents' reports make it hold.
    #[doc(hidden)]
    pub fn workflow_round_trips(&self) -> usize {
        self.jobs.workflow.round_trips()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A node that comes back having run thousands of tasks logs one bounded line: the first
    /// ten attempts it gave away named, with where each task stands, and the rest counted.
    #[test]
    fn the_attempts_a_returning_node_gave_away_are_listed_ten_then_counted() {
        let gave: Vec<(TaskRef, bool, String)> = (0..25)
            .map(|i| {
                let t = TaskRef {
                    task_id: i,
                    attempt: 1,
                };
                (t, i == 1, "cancelled".to_string())
            })
            .collect();
        let line = listed_away(&gave);
        assert!(
            line.starts_with(
                "task 0 attempt 1: cancelled; task 1 attempt 1 (finished): cancelled; "
            ),
            "{line}"
        );
        assert!(line.contains("task 9 attempt 1"), "{line}");
        assert!(!line.contains("task 10 "), "{line}");
        assert!(line.ends_with("; and 15 more"), "{line}");
        assert_eq!(listed_away(&gave[..2]).matches("; ").count(), 1);
    }
}
