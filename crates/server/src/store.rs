//! The server's durable state in SQLite (WAL journal, `synchronous=FULL`): nodes, jobs (with the
//! job file's text, from which applications are rebuilt by the one shared parser) and one row per
//! task with its state, attempt and placement.
//!
//! Every change that matters is written here, in one transaction per request, *before* the server
//! acknowledges it: a job is accepted only once its job row and all its task rows are committed; a
//! heartbeat's results are acknowledged and its assignments sent only once their rows are
//! committed. One transaction per heartbeat batches the writes of every task it touches (group
//! commit), so dispatching thousands of short tasks costs a few fsyncs per second, not one each.

use rusqlite::{Connection, OptionalExtension, params};
use std::path::Path;
use thiserror::Error;

mod operator;
pub use operator::{DrainNote, StoredSignal};

/// A store failure.
#[derive(Debug, Error)]
pub enum StoreError {
    /// SQLite refused.
    #[error("store: {0}")]
    Sqlite(#[from] rusqlite::Error),
    /// A row holds something this version cannot read.
    #[error("store: corrupt row: {0}")]
    Corrupt(String),
    /// The write-ahead log could not be synced.
    #[error("store: {0}")]
    Sync(#[from] crate::durable::SyncError),
    /// A newer binary's store: its schema number is above [`SCHEMA_VERSION`].
    #[error(
        "store: its schema is number {schema}, newer than this binary's {SCHEMA_VERSION} (it was \
         last opened by hetsched {by}): this binary would misread it; run hetsched {by} or \
         newer, or restore a backup taken before that version opened it"
    )]
    Newer {
        /// The store's schema number.
        schema: i64,
        /// The version of the binary that last opened it (`unknown`: not recorded).
        by: String,
    },
}

/// The store's schema number, kept as SQLite's `PRAGMA user_version`: raised by a change an
/// older binary would misread (a meaning changed, a column it would not keep), so that such a
/// binary refuses the store ([`StoreError::Newer`]) instead of misreading it. 0: a store no
/// binary stamped yet (opened as this number's).
///
/// - 2: purges in steps. The `purging` table lists rows of purged jobs still to be deleted
///   (`crate::state::purging`): batch task ids, and a divisible job's chunk numbers or a
///   workflow's instance numbers, by the job's id. A binary of schema 1 would leave them (its
///   listings would show a purged job's tasks) or, if it knew the table, read a chunk number
///   as a task id and delete another job's task. A schema-1 store opens as schema 2 (nothing
///   to convert: the table is created when missing).
pub const SCHEMA_VERSION: i64 = 2;

/// The most bytes the `-wal` file keeps once a checkpoint emptied it (`PRAGMA
/// journal_size_limit`, set by [`Store::open`]).
pub const JOURNAL_SIZE_LIMIT: i64 = 16 << 20;

/// The `meta` row that holds the hetsched version of the binary that last opened the store.
const VERSION_KEY: &str = "binary_version";

/// What a store says of the binaries that opened it ([`stamp`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stamp {
    /// Its schema number (`PRAGMA user_version`; 0: not stamped).
    pub schema: i64,
    /// The hetsched version that last opened it, if recorded.
    pub version: Option<String>,
}

/// The stamp of the store open on `conn`, refused as [`StoreError::Newer`] when its schema is
/// newer than this binary's.
pub fn stamp(conn: &Connection) -> Result<Stamp, StoreError> {
    let schema: i64 = conn.pragma_query_value(None, "user_version", |r| r.get(0))?;
    let has_meta: bool = conn.query_row(
        "SELECT COUNT(*) > 0 FROM sqlite_master WHERE type = 'table' AND name = 'meta'",
        [],
        |r| r.get(0),
    )?;
    let version = if has_meta {
        conn.query_row(
            "SELECT CAST(value AS TEXT) FROM meta WHERE key = ?1",
            params![VERSION_KEY],
            |r| r.get::<_, String>(0),
        )
        .optional()?
    } else {
        None
    };
    if schema > SCHEMA_VERSION {
        return Err(StoreError::Newer {
            schema,
            by: version.unwrap_or_else(|| "unknown".into()),
        });
    }
    Ok(Stamp { schema, version })
}

/// Stamps the store open on `conn` as this binary's ([`SCHEMA_VERSION`], [`crate::VERSION`]),
/// writing only what changed (a write on every start would be refused on a full disk).
fn write_stamp(conn: &Connection, was: &Stamp) -> Result<(), StoreError> {
    if was.schema != SCHEMA_VERSION {
        conn.pragma_update(None, "user_version", SCHEMA_VERSION)?;
    }
    if was.version.as_deref() != Some(crate::VERSION) {
        conn.execute(
            "INSERT INTO meta(key, value) VALUES (?1, ?2) \
             ON CONFLICT(key) DO UPDATE SET value = excluded.value",
            params![VERSION_KEY, crate::VERSION],
        )?;
    }
    Ok(())
}

/// A task's life cycle as stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TaskState {
    /// Waiting for a node.
    Pending,
    /// Assigned to a node (the agent may not have started it yet).
    Running,
    /// Finished with exit code 0; never runs again.
    Succeeded,
    /// Finished otherwise, or lost too many times.
    Failed,
    /// Cancelled by a user.
    Cancelled,
}

impl TaskState {
    /// The name users see.
    pub fn as_str(self) -> &'static str {
        match self {
            TaskState::Pending => "pending",
            TaskState::Running => "running",
            TaskState::Succeeded => "succeeded",
            TaskState::Failed => "failed",
            TaskState::Cancelled => "cancelled",
        }
    }

    fn code(self) -> i64 {
        self as i64
    }

    /// The state named `name` (as [`TaskState::as_str`] names it), if it is one.
    pub fn from_name(name: &str) -> Option<Self> {
        [
            TaskState::Pending,
            TaskState::Running,
            TaskState::Succeeded,
            TaskState::Failed,
            TaskState::Cancelled,
        ]
        .into_iter()
        .find(|s| s.as_str() == name)
    }

    pub(crate) fn from_code(c: i64) -> Result<Self, StoreError> {
        Ok(match c {
            0 => TaskState::Pending,
            1 => TaskState::Running,
            2 => TaskState::Succeeded,
            3 => TaskState::Failed,
            4 => TaskState::Cancelled,
            _ => return Err(StoreError::Corrupt(format!("task state {c}"))),
        })
    }

    /// Whether the task will never run again.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            TaskState::Succeeded | TaskState::Failed | TaskState::Cancelled
        )
    }
}

/// Why a task's latest attempt ended without success, or why the task ended without running
/// (`TaskInfo.reason`, the `reason` of a task's JSON): one type for batch tasks (`tasks.reason`),
/// workflow instances (`wf_instances.reason`) and divisible chunks, stored by
/// [`EndReason::as_str`]. A task has
/// none while it never ran, while it runs (cleared at its dispatch) and once it succeeded; one
/// pending again after an attempt that ended keeps that attempt's reason until its next
/// dispatch, and so does one resubmitted. A divisible job's chunk shows one too
/// (`jobs::divisible`): a failed chunk's is stored (`div_chunks.reason`), the others' follow
/// from its state.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EndReason {
    /// Its process exited with a non-zero code (in `exit_code`).
    Exited,
    /// Its process was killed by a signal hetsched did not send to stop it (one it raised,
    /// one from outside, a user's `hetsched signal`); the task's `signal` names it if known.
    Signal,
    /// Stopped by its agent when its time limit passed.
    TimeLimit,
    /// Stopped by its agent when its processes held more memory than it declared.
    MemoryLimit,
    /// It could not be started: its program could not be spawned or was not found (exit 126
    /// or 127), or what it needs to start was not there (its directory, its account, its
    /// inputs).
    StartFailed,
    /// A workflow instance that exited 0 without writing its declared outputs.
    OutputsMissing,
    /// A user cancelled it, running or pending.
    Cancelled,
    /// Its node or agent was lost, or shut down, while it ran: pending again, or failed once
    /// lost `max_attempts` times.
    Lost,
    /// Stopped for work of a higher priority and pending again (`preemption = "requeue"`).
    Preempted,
    /// Not run because what it depends on ended so that it never can: a workflow producer
    /// failed or was cancelled, a task it runs `--after-corr` failed or was cancelled, or a
    /// job it runs `--after` (`--after-notok`) did not end as it needs.
    DependencyFailed,
}

impl EndReason {
    /// Every reason, in the order docs/json.md lists them.
    pub const ALL: [EndReason; 10] = [
        EndReason::Exited,
        EndReason::Signal,
        EndReason::TimeLimit,
        EndReason::MemoryLimit,
        EndReason::StartFailed,
        EndReason::OutputsMissing,
        EndReason::Cancelled,
        EndReason::Lost,
        EndReason::Preempted,
        EndReason::DependencyFailed,
    ];

    /// The name users and scripts read, and the store keeps (never renamed).
    pub fn as_str(self) -> &'static str {
        match self {
            EndReason::Exited => "exited",
            EndReason::Signal => "signal",
            EndReason::TimeLimit => "time_limit",
            EndReason::MemoryLimit => "memory_limit",
            EndReason::StartFailed => "start_failed",
            EndReason::OutputsMissing => "outputs_missing",
            EndReason::Cancelled => "cancelled",
            EndReason::Lost => "lost",
            EndReason::Preempted => "preempted",
            EndReason::DependencyFailed => "dependency_failed",
        }
    }

    /// The reason named `name` (as [`EndReason::as_str`] names it), if it is one: a stored
    /// name this version does not know (a later version's) reads as none.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|r| r.as_str() == name)
    }
}

/// The longest signal name kept from an agent (`RTMIN+15` is 8).
pub const MAX_SIGNAL_NAME: usize = 16;

/// `name`, an agent's name of a signal, if it is one to keep: at most [`MAX_SIGNAL_NAME`]
/// characters of `A`–`Z`, `0`–`9` and `+` (what an agent writes); anything else is dropped,
/// not shown.
pub fn signal_name(name: &str) -> Option<Box<str>> {
    (!name.is_empty()
        && name.len() <= MAX_SIGNAL_NAME
        && name
            .bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'+'))
    .then(|| name.into())
}

/// What one attempt of a task used, as its agent measured it (`TaskUsage` on the wire).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TaskUsage {
    /// CPU time in user mode, ms (the process and the descendants it waited for).
    pub cpu_user_ms: u64,
    /// CPU time in kernel mode, ms.
    pub cpu_system_ms: u64,
    /// Peak resident memory of its process tree, bytes (sampled).
    pub max_rss_bytes: u64,
    /// Peak GPU memory of its process tree on its devices, bytes (sampled; 0: not measured).
    pub max_gpu_memory_bytes: u64,
}

impl TaskUsage {
    /// Its CPU time, user + system, ms. The figures are an agent's u64s: the sum saturates
    /// (a plain addition of two near the top panicked under the state's lock in a debug
    /// build), as every sum of them over tasks must.
    pub fn cpu_ms(&self) -> u64 {
        self.cpu_user_ms.saturating_add(self.cpu_system_ms)
    }
}

/// One task row.
#[derive(Clone, Debug, PartialEq)]
pub struct TaskRow {
    /// Global task id.
    pub id: u64,
    /// Global application id.
    pub app: u32,
    /// Index within the application.
    pub index: u32,
    /// State.
    pub state: TaskState,
    /// Number of the latest attempt (0 = never dispatched).
    pub attempt: u32,
    /// Node of the latest attempt.
    pub node: Option<u32>,
    /// Variant of the latest attempt: 0 = CPU, 1 = GPU.
    pub variant: Option<u8>,
    /// Devices of the latest attempt (a boxed slice: one word less than a `Vec` in every row,
    /// and most rows have none).
    pub devices: Box<[u32]>,
    /// Start (ns since the Unix epoch), 0 if unknown.
    pub started_ns: u64,
    /// End (ns since the Unix epoch), 0 if not finished.
    pub finished_ns: u64,
    /// Exit code of the finished attempt.
    pub exit_code: Option<i32>,
    /// Why it failed.
    pub message: String,
    /// Attempts that failed (non-zero exit, failure to start, time limit) and were retried;
    /// `attempt - failures - preemptions - interruptions` attempts were lost with their nodes
    /// or not finished yet.
    pub failures: u32,
    /// Attempts stopped for work of a higher priority and re-queued (`preemption =
    /// "requeue"`): neither failures nor losses.
    pub preemptions: u32,
    /// Attempts killed by their agent's own clean shutdown (SIGTERM, `hetsched node stop`, the
    /// agent's `--time-limit`; the result says `interrupted`) and re-queued: an operator's act,
    /// not the task's failure, so, as preemptions, they do not count against `max_attempts`.
    pub interruptions: u32,
    /// What the latest finished attempt used, if its agent measured it. Boxed: a row without
    /// (pending, running, or measured by no agent) costs one word, which keeps a million-task
    /// job's rows small.
    pub usage: Option<Box<TaskUsage>>,
    /// Accelerator sharing (spec 01): the ANode (node id) its latest attempt was offloaded to
    /// by the NNode in `node`; `None`: it ran where it was placed. Written with the dispatch,
    /// so it outlives a restart; `devices` and `started_ns` are the ANode's once its result
    /// says them.
    pub executed: Option<u32>,
    /// Why its latest attempt ended without success, or why it ended without running
    /// ([`EndReason`]); `None` while it never ran, while it runs, once it succeeded, or when not
    /// known.
    pub reason: Option<EndReason>,
    /// With reason [`EndReason::Signal`]: the signal's name (`SEGV`), when its agent said one
    /// ([`signal_name`]). Boxed as `devices`: most rows have none.
    pub signal: Option<Box<str>>,
}

impl TaskRow {
    /// The row a submission writes: task `id`, the `index`th of application `app`, pending.
    pub fn submitted(id: u64, app: u32, index: u32) -> Self {
        TaskRow {
            id,
            app,
            index,
            state: TaskState::Pending,
            attempt: 0,
            node: None,
            variant: None,
            devices: Box::default(),
            started_ns: 0,
            finished_ns: 0,
            exit_code: None,
            message: String::new(),
            failures: 0,
            preemptions: 0,
            interruptions: 0,
            usage: None,
            executed: None,
            reason: None,
            signal: None,
        }
    }
}

/// One job row.
#[derive(Clone, Debug, PartialEq)]
pub struct JobRow {
    /// Job id (from 1).
    pub id: u64,
    /// File name as submitted.
    pub origin: String,
    /// The job file's text.
    pub text: String,
    /// Directory the tasks run in.
    pub workdir: String,
    /// Submission time, ns since the Unix epoch.
    pub submitted_ns: u64,
    /// Id of its first application.
    pub first_app: u32,
    /// Id of its first task.
    pub first_task: u64,
    /// Whether a user cancelled it.
    pub cancelled: bool,
    /// The client's submission key (unique among its owner's jobs), if it sent one.
    pub submission_key: Option<String>,
    /// Who submitted it (a user's name, or [`crate::users::ADMIN`]): the namespace of its
    /// submission key. The state learns owners from `job_owners`; this copy, which a purge
    /// keeps with the row, scopes the key.
    pub owner: String,
    /// The name given at submission (`submit --name`), which overrides the file's `name =`.
    pub name: Option<String>,
    /// The batch jobs it runs after once each completed (`submit --after`), ascending.
    pub after: Vec<u64>,
    /// The batch jobs it runs after once each ended, however (`submit --after-any`), ascending.
    pub after_any: Vec<u64>,
    /// The batch jobs it runs after once each ended failed or cancelled (`--after-notok`),
    /// ascending.
    pub after_notok: Vec<u64>,
    /// The batch jobs whose tasks its tasks run after, index by index (`--after-corr`),
    /// ascending.
    pub after_corr: Vec<u64>,
    /// The batch jobs it runs after once each started or ended (`--after-start`), ascending.
    pub after_start: Vec<u64>,
    /// Held by `hetsched hold` (until `release`).
    pub held: bool,
    /// When its tasks may start (`submit --begin`, `update --begin`), ms since the Unix epoch.
    pub begin_ms: Option<u64>,
}

impl JobRow {
    /// Every job it runs after: `after`, `after_any`, `after_notok`.
    pub fn named_jobs(&self) -> impl Iterator<Item = u64> + '_ {
        self.after
            .iter()
            .chain(&self.after_any)
            .chain(&self.after_notok)
            .copied()
    }
}

/// One node row: its name and its description as JSON (`hetsched_core::Node`).
#[derive(Clone, Debug, PartialEq)]
pub struct NodeRow {
    /// Node id (dense from 0).
    pub id: u32,
    /// Unique name.
    pub name: String,
    /// `Node` as JSON.
    pub spec: String,
    /// The identity of the agent that registered it (empty in stores from before identities).
    pub identity: String,
    /// Removed by an operator: kept for its id, never used again.
    pub removed: bool,
}

/// Everything the store holds, for rebuilding the server's state at start.
#[derive(Debug, Default)]
pub struct Snapshot {
    /// Nodes by id.
    pub nodes: Vec<NodeRow>,
    /// Jobs by id, but those in `purged_jobs`.
    pub jobs: Vec<JobRow>,
    /// Purged batch jobs but the newest job, by id: their ids only (a restart reads no more of
    /// them, so what it holds meanwhile does not grow with what they said).
    pub purged_jobs: Vec<PurgedJob>,
    /// Rows of unfinished jobs' tasks that changed since the job was submitted, by id. A task
    /// without one here is pending and was never dispatched: its row is still the one the
    /// submission wrote, which its job's applications imply (see [`Store::load`]).
    pub tasks: Vec<TaskRow>,
    /// Ids of purged batch jobs (tombstones: see [`crate::jobs::JobKind::purge_rows`]).
    pub purged: Vec<u64>,
    /// Summaries of finished jobs whose task rows were not read (job id, summary).
    pub finished: Vec<(u64, String)>,
    /// Stream topologies' records with their measured traffic ([`crate::jobs::topology`]).
    pub topologies: Vec<crate::jobs::topology::Stored>,
    /// The nodes of each running multi-node task, by task id, the first (`node`) first.
    pub multi_node: std::collections::HashMap<u64, Vec<u32>>,
    /// Applications whose settings `hetsched update` changed.
    pub app_settings: Vec<AppSettings>,
    /// What running tasks hold when an update changed their application's request after they
    /// were placed ([`write_task_hold`]), by task id.
    pub task_holds: Vec<TaskHold>,
    /// Attempts of cancelled tasks whose processes may still run on their nodes
    /// ([`write_task_stop`]): (task, attempt, node), by task id.
    pub task_stops: Vec<(u64, u32, u32)>,
}

/// What the `attempt`th attempt of a running task holds on its node (`task_holds`), when that is
/// not its application's request: `hetsched update --cores --memory --gpus` changed it while
/// the task ran.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TaskHold {
    /// The task's id.
    pub task: u64,
    /// The attempt that holds it.
    pub attempt: u32,
    /// Its cores, memory and device count.
    pub request: hetsched_core::Resources,
}

/// An application's settings as `hetsched update` left them, applied over its job file's at a
/// restart.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AppSettings {
    /// The application's id.
    pub app: u32,
    /// Its priority.
    pub priority: i32,
    /// Its `max_running` (0: no limit).
    pub max_running: u32,
    /// Its tasks' time limit, every variant, ms (0: none); `None`: as its job file says.
    pub time_limit_ms: Option<u64>,
    /// How many times an update changed what its tasks run (part of its spec keys: agents keep
    /// specs by key).
    pub spec_generation: u32,
    /// What one task of its CPU and GPU variants holds (cores, memory bytes, devices), as an
    /// update set it; `None`: as its job file says.
    pub requests: [Option<hetsched_core::Resources>; 2],
    /// The node attributes its tasks require, as an update set them; `None`: as its job file
    /// says.
    pub requires: Option<Vec<String>>,
    /// The accelerator kind its GPU variant's tasks take, as an update set it (empty: any);
    /// `None`: as its job file says.
    pub gpu_kind: Option<String>,
}

/// What a restart reads of a purged batch job ([`Snapshot::purged_jobs`]): where its ids start
/// (the next job's first ids end them).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PurgedJob {
    /// Its id.
    pub id: u64,
    /// Its first application's id.
    pub first_app: u32,
    /// Its first task's id.
    pub first_task: u64,
    /// Where its application and task ids end when no next job says so: kept for a job set
    /// aside at a start (`crate::set_aside`), whose file is not read again.
    pub end: Option<(u32, u64)>,
}

/// The batch job an owner's submission key names ([`Store::job_with_key`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KeyedJob {
    /// Its id.
    pub id: u64,
    /// Its first task's id.
    pub first_task: u64,
    /// The next job's first task id (its tasks end there), if a job came after it.
    pub next_first_task: Option<u64>,
}

/// The SQLite store.
pub struct Store {
    conn: Connection,
    /// Refuse every write as a full disk does (tests; see [`Store::simulate_full_disk`]).
    full: bool,
    /// Counts committed writes; syncs the WAL for the replies that wait on them.
    durable: std::sync::Arc<crate::durable::Durable>,
}

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS nodes(
    id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE, spec TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS jobs(
    id INTEGER PRIMARY KEY, origin TEXT NOT NULL, text TEXT NOT NULL, workdir TEXT NOT NULL,
    submitted_ns INTEGER NOT NULL, first_app INTEGER NOT NULL, first_task INTEGER NOT NULL,
    cancelled INTEGER NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS apps(
    id INTEGER PRIMARY KEY, job INTEGER NOT NULL REFERENCES jobs(id), idx INTEGER NOT NULL,
    name TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS finished(job INTEGER PRIMARY KEY, summary TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS tasks(
    id INTEGER PRIMARY KEY, app INTEGER NOT NULL REFERENCES apps(id), idx INTEGER NOT NULL,
    state INTEGER NOT NULL, attempt INTEGER NOT NULL, node INTEGER, variant INTEGER,
    devices TEXT NOT NULL DEFAULT '', started_ns INTEGER NOT NULL DEFAULT 0,
    finished_ns INTEGER NOT NULL DEFAULT 0, exit_code INTEGER, message TEXT NOT NULL DEFAULT '');
CREATE TABLE IF NOT EXISTS node_drains(
    node INTEGER PRIMARY KEY, since_ms INTEGER NOT NULL, reason TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS task_holds(
    task INTEGER PRIMARY KEY, attempt INTEGER NOT NULL, cores INTEGER NOT NULL,
    memory_bytes INTEGER NOT NULL, gpus INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS users(
    name TEXT PRIMARY KEY, token_sha256 BLOB NOT NULL, created_ms INTEGER NOT NULL,
    max_cores INTEGER NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS job_owners(job INTEGER PRIMARY KEY, owner TEXT NOT NULL);
-- Each job's nonce (`crate::job_nonces`; none: a job stored before nonces, whose nonce is 0).
CREATE TABLE IF NOT EXISTS job_nonces(job INTEGER PRIMARY KEY, nonce INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS topology_owners(name TEXT PRIMARY KEY, owner TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS fair_usage(
    owner TEXT PRIMARY KEY, usage REAL NOT NULL, at_ms INTEGER NOT NULL);
-- Jobs set aside at a start (`hetsched server --set-aside`, `crate::set_aside`): how each
-- stood then (`unfinished`, `completed`, `failed`, `cancelled`), for the jobs that run after it.
CREATE TABLE IF NOT EXISTS set_aside_ends(job INTEGER PRIMARY KEY, end TEXT NOT NULL);
-- Tasks cancelled while they ran whose process end their agents have not reported yet
-- (`crate::jobs::batch`'s stopping tasks): the attempt stopped, and its node.
CREATE TABLE IF NOT EXISTS task_stops(
    task INTEGER PRIMARY KEY, attempt INTEGER NOT NULL, node INTEGER NOT NULL);
-- Purged jobs' rows still to be deleted, in steps after the purge committed
-- (`crate::state::purging`): numbered from `next` to `end`, excluded (`kind` says which rows).
CREATE TABLE IF NOT EXISTS purging(
    job INTEGER PRIMARY KEY, next INTEGER NOT NULL, end INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS task_signals(
    seq INTEGER PRIMARY KEY, node INTEGER NOT NULL, task INTEGER NOT NULL,
    attempt INTEGER NOT NULL, signal TEXT NOT NULL);
";

/// Columns added after the first schema: added to stores created before them (`table`, `column`,
/// definition). A submission key is unique among its owner's jobs (see [`scope_keys_to_owners`]).
const MIGRATIONS: &[(&str, &str, &str)] = &[
    ("jobs", "submission_key", "TEXT"),
    ("tasks", "failures", "INTEGER NOT NULL DEFAULT 0"),
    ("nodes", "identity", "TEXT NOT NULL DEFAULT ''"),
    ("nodes", "removed", "INTEGER NOT NULL DEFAULT 0"),
    ("jobs", "name", "TEXT"),
    ("jobs", "purged", "INTEGER NOT NULL DEFAULT 0"),
    ("jobs", "after", "TEXT NOT NULL DEFAULT ''"),
    ("jobs", "after_any", "TEXT NOT NULL DEFAULT ''"),
    ("jobs", "after_notok", "TEXT NOT NULL DEFAULT ''"),
    ("jobs", "after_corr", "TEXT NOT NULL DEFAULT ''"),
    ("jobs", "after_start", "TEXT NOT NULL DEFAULT ''"),
    ("jobs", "held", "INTEGER NOT NULL DEFAULT 0"),
    // When its tasks may start (`submit --begin`), ms since the Unix epoch; NULL: at once.
    ("jobs", "begin_ms", "INTEGER"),
    // A task's usage: all three NULL when not measured.
    ("tasks", "cpu_user_ms", "INTEGER"),
    ("tasks", "cpu_system_ms", "INTEGER"),
    ("tasks", "max_rss_bytes", "INTEGER"),
    // A multi-node task's other nodes in its latest attempt (see [`write_other_nodes`]).
    ("tasks", "other_nodes", "TEXT NOT NULL DEFAULT ''"),
    // An application's priority and max_running as `hetsched update` set them (NULL: as its job
    // file says).
    ("apps", "priority", "INTEGER"),
    ("apps", "max_running", "INTEGER"),
    // Its time limit as `hetsched update` set it (ms, 0: none; NULL: as its job file says), and
    // how many times an update changed what its tasks run.
    ("apps", "time_limit_ms", "INTEGER"),
    ("apps", "spec_generation", "INTEGER NOT NULL DEFAULT 0"),
    // What one task of its CPU and GPU variants holds as `hetsched update` set it (NULL: as its
    // job file says).
    ("apps", "cpu_cores", "INTEGER"),
    ("apps", "cpu_memory_bytes", "INTEGER"),
    ("apps", "gpu_cores", "INTEGER"),
    ("apps", "gpu_memory_bytes", "INTEGER"),
    ("apps", "gpu_gpus", "INTEGER"),
    // The node attributes its tasks require as `hetsched update` set them, one per line (NULL:
    // as its job file says).
    ("apps", "requires", "TEXT"),
    // The accelerator kind of its GPU variant as `hetsched update` set it (empty: any; NULL: as
    // its job file says).
    ("apps", "gpu_kind", "TEXT"),
    // What a divisible job waits for before it starts (`jobs::gate`); a job stored before
    // waited for nothing and has started.
    ("div_jobs", "after", "TEXT NOT NULL DEFAULT ''"),
    ("div_jobs", "after_any", "TEXT NOT NULL DEFAULT ''"),
    ("div_jobs", "after_notok", "TEXT NOT NULL DEFAULT ''"),
    ("div_jobs", "held", "INTEGER NOT NULL DEFAULT 0"),
    ("div_jobs", "begin_ms", "INTEGER NOT NULL DEFAULT 0"),
    ("div_jobs", "started", "INTEGER NOT NULL DEFAULT 1"),
    // A user's caps on GPUs and memory (`hetsched user limit --max-gpus/--max-memory`).
    ("users", "max_gpus", "INTEGER NOT NULL DEFAULT 0"),
    ("users", "max_memory_bytes", "INTEGER NOT NULL DEFAULT 0"),
    // A user's fair-share shares (`hetsched user limit --shares`).
    ("users", "shares", "INTEGER NOT NULL DEFAULT 1"),
    // A signal for a divisible job's chunk: the job (0: `task` is a task).
    ("task_signals", "chunk_of", "INTEGER NOT NULL DEFAULT 0"),
    ("tasks", "preemptions", "INTEGER NOT NULL DEFAULT 0"),
    ("users", "max_priority", "INTEGER"),
    // The ANode its latest attempt was offloaded to (node id; NULL: it ran where placed).
    ("tasks", "executed_node", "INTEGER"),
    // Where a job set aside at a start (`hetsched server --set-aside`) ended its application
    // and task ids, for when it is the newest job: a restart cannot learn that from its file,
    // which no longer reads (NULL: any other job, whose file or next job says).
    ("jobs", "apps_end", "INTEGER"),
    ("jobs", "tasks_end", "INTEGER"),
    // The order a divisible job's chunks' successes were recorded in (0: before the column), so
    // that a restart replays their times into the estimates in the order they were measured.
    ("div_chunks", "done_seq", "INTEGER NOT NULL DEFAULT 0"),
    // The agent process a divisible chunk was sent to (`jobs::divisible`; '': before the column).
    ("div_chunks", "incarnation", "TEXT NOT NULL DEFAULT ''"),
    // Why a failed divisible chunk failed, as its agent said (`EndReason::as_str`; NULL: any
    // other state, not said, or stored before the column).
    ("div_chunks", "reason", "TEXT"),
    // A task's peak GPU memory (NULL: stored before the column, or not measured; read as 0).
    ("tasks", "max_gpu_memory_bytes", "INTEGER"),
    // Why its latest attempt ended without success, or why it ended without running
    // (`EndReason::as_str`), and the signal that killed it (NULL: none, or stored before the
    // columns).
    ("tasks", "reason", "TEXT"),
    ("tasks", "signal", "TEXT"),
    // Attempts its agent's clean shutdown killed (0: none, or stored before the column: those
    // counted as lost then).
    ("tasks", "interruptions", "INTEGER NOT NULL DEFAULT 0"),
    // Whose rows a purge left to delete in steps (`crate::state::purging`): the job's kind's
    // number (`jobs::Kind`): 0 batch task ids, 1 a divisible job's chunk numbers, 13 a
    // workflow's instance numbers (0: before the column, when only batch rows were).
    ("purging", "kind", "INTEGER NOT NULL DEFAULT 0"),
];

/// The indexes; `tasks_other_nodes` lists only multi-node tasks' rows, so finding them (a
/// restart, a page of a listing) costs what they are, not the table. The submission keys'
/// indexes are [`scope_keys_to_owners`]'s.
const INDEXES: &str = "
CREATE INDEX IF NOT EXISTS tasks_other_nodes ON tasks(id) WHERE other_nodes != '';";

const UPDATE_TASK: &str = "UPDATE tasks SET state=?1, attempt=?2, node=?3, variant=?4, devices=?5,
    started_ns=?6, finished_ns=?7, exit_code=?8, message=?9, failures=?10, cpu_user_ms=?11,
    cpu_system_ms=?12, max_rss_bytes=?13, preemptions=?15, executed_node=?16,
    max_gpu_memory_bytes=?17, reason=?18, signal=?19, interruptions=?20 WHERE id=?14";

/// Adds each (`table`, `column`, definition) of `columns` that `table` lacks: a column added
/// after a store was created.
pub(crate) fn add_missing_columns(
    conn: &Connection,
    columns: &[(&str, &str, &str)],
) -> Result<(), StoreError> {
    for (table, column, definition) in columns {
        let exists: bool = conn.query_row(
            &format!("SELECT COUNT(*) > 0 FROM pragma_table_info('{table}') WHERE name = ?1"),
            params![column],
            |r| r.get(0),
        )?;
        if !exists {
            conn.execute_batch(&format!(
                "ALTER TABLE {table} ADD COLUMN {column} {definition}"
            ))?;
        }
    }
    Ok(())
}

/// Makes `table`'s submission keys (column `key`) a namespace per owner: the table gains an
/// `owner` column (a user's name, or [`crate::users::ADMIN`], its default), filled for the rows
/// it had from `job_owners` (a user's job has a row there until it is purged or set aside;
/// an admin's has none), and `old_index` — the UNIQUE index that made keys one namespace for
/// the whole server — goes, all in one transaction; then `table_owner_key` indexes
/// `(owner, key)` as `index` says. The old index made the rows' keys unique, so the new one
/// cannot fail on them. Does nothing more once done.
pub(crate) fn scope_keys_to_owners(
    conn: &Connection,
    table: &str,
    key: &str,
    old_index: Option<&str>,
    index: KeyIndex,
) -> Result<(), StoreError> {
    let has_owner: bool = conn.query_row(
        &format!("SELECT COUNT(*) > 0 FROM pragma_table_info('{table}') WHERE name = 'owner'"),
        [],
        |r| r.get(0),
    )?;
    let old_exists: bool = match old_index {
        Some(old) => conn.query_row(
            "SELECT COUNT(*) > 0 FROM sqlite_master WHERE type = 'index' AND name = ?1",
            params![old],
            |r| r.get(0),
        )?,
        None => false,
    };
    if !has_owner || old_exists {
        let tx = conn.unchecked_transaction()?;
        if !has_owner {
            tx.execute_batch(&format!(
                "ALTER TABLE {table} ADD COLUMN owner TEXT NOT NULL DEFAULT '{admin}';
                 UPDATE {table} SET owner = (SELECT o.owner FROM job_owners o WHERE o.job = {table}.id)
                 WHERE id IN (SELECT job FROM job_owners);",
                admin = crate::users::ADMIN
            ))?;
        }
        if let Some(old) = old_index.filter(|_| old_exists) {
            tx.execute_batch(&format!("DROP INDEX {old}"))?;
        }
        tx.commit()?;
    }
    match index {
        KeyIndex::Unique => conn.execute_batch(&format!(
            "CREATE UNIQUE INDEX IF NOT EXISTS {table}_owner_key ON {table}(owner, {key})"
        ))?,
        KeyIndex::UniqueUnlessEmpty => unique_keys_unless_empty(conn, table, key)?,
    }
    Ok(())
}

/// How [`scope_keys_to_owners`] indexes a table's `(owner, key)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum KeyIndex {
    /// UNIQUE: a row without a key holds NULL, which a UNIQUE index never compares equal
    /// (`jobs`, `div_jobs`).
    Unique,
    /// UNIQUE among the rows with a key: the column is `NOT NULL` and `''` is none (`wf_jobs`),
    /// so every keyless row of an owner would otherwise collide. A store from before held a
    /// plain index, which let a key name two jobs: see [`unique_keys_unless_empty`].
    UniqueUnlessEmpty,
}

/// Makes `table_owner_key` a UNIQUE index on `(owner, key)` over the rows whose `key` is not
/// `''`. A store from before held a plain index of that name and may hold an owner's key on
/// several jobs: in one transaction, the lowest job id of each such group keeps the key (the
/// job a lookup by key found, `ORDER BY id LIMIT 1`, so a retry gets back what it got before),
/// the others' keys are cleared to `''` (the jobs stay, only no longer named by that key; a
/// warning names them), the plain index goes and the UNIQUE one comes. Does nothing once done.
fn unique_keys_unless_empty(conn: &Connection, table: &str, key: &str) -> Result<(), StoreError> {
    let name = format!("{table}_owner_key");
    // `unique` of `pragma_index_list`: whether the index is UNIQUE (None: no such index).
    let unique: Option<bool> = conn
        .query_row(
            &format!("SELECT \"unique\" FROM pragma_index_list('{table}') WHERE name = ?1"),
            params![name],
            |r| r.get(0),
        )
        .optional()?;
    if unique == Some(true) {
        return Ok(());
    }
    let tx = conn.unchecked_transaction()?;
    // Every job of a group but its lowest id, with its owner and key.
    let extra: Vec<(i64, String, String)> = {
        let mut q = tx.prepare(&format!(
            "SELECT t.id, t.owner, t.{key} FROM {table} t
             WHERE t.{key} != '' AND t.id > (SELECT MIN(f.id) FROM {table} f
                                             WHERE f.owner = t.owner AND f.{key} = t.{key})
             ORDER BY t.owner, t.{key}, t.id"
        ))?;
        q.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?
            .collect::<Result<_, _>>()?
    };
    for (id, owner, k) in &extra {
        tx.execute(
            &format!("UPDATE {table} SET {key} = '' WHERE id = ?1"),
            params![id],
        )?;
        tracing::warn!(
            table,
            job = id,
            owner = %owner,
            key = %hetsched_core::text::clip(k),
            "a submission key named more than one job of its owner: it keeps naming the \
             lowest id, and job {id} no longer has it"
        );
    }
    if unique.is_some() {
        tx.execute_batch(&format!("DROP INDEX {name}"))?;
    }
    tx.execute_batch(&format!(
        "CREATE UNIQUE INDEX {name} ON {table}(owner, {key}) WHERE {key} != ''"
    ))?;
    tx.commit()?;
    Ok(())
}

/// `tasks` cut into runs whose rows a submission writes alike: consecutive ids and indices of
/// one application, in one state and attempt ([`Store::insert_job`] writes a run in one
/// statement).
fn task_runs(tasks: &[TaskRow]) -> impl Iterator<Item = &[TaskRow]> {
    tasks.chunk_by(|a, b| {
        Some(b.id) == a.id.checked_add(1)
            && b.app == a.app
            && Some(b.index) == a.index.checked_add(1)
            && b.state == a.state
            && b.attempt == a.attempt
    })
}

/// A list of numbers as stored: a task's devices, a job's `after`, `after_any` and `after_notok`.
pub(crate) fn list_text<T: std::fmt::Display>(items: &[T]) -> String {
    items
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

/// What a purged job's row keeps in its `text` column in place of its job file:
/// `sha256:` and the file's SHA-256 in hex, 71 bytes. A purge drops the file (up to 2 MiB,
/// which `max_stored_bytes_per_user` no longer counts once the job is purged), but a
/// submission repeating the job's key is still told whether it sent the same file
/// ([`is_same_file`]). No accepted job file reads as this (it is not TOML), so a row's text is
/// one or the other whatever binary wrote it.
pub(crate) fn purged_text(text: &str) -> String {
    use std::fmt::Write as _;
    let digest = ring::digest::digest(&ring::digest::SHA256, text.as_bytes());
    let mut out = String::with_capacity(PURGED_TEXT_PREFIX.len() + 64);
    out.push_str(PURGED_TEXT_PREFIX);
    for b in digest.as_ref() {
        // Writing to a String does not fail.
        let _ = write!(out, "{b:02x}");
    }
    out
}

/// How [`purged_text`] begins.
const PURGED_TEXT_PREFIX: &str = "sha256:";

/// Whether a job row's stored `text` is the file `submitted`: the file itself, or, of a
/// purged job, its digest ([`purged_text`]). (A row purged by a binary from before purges
/// dropped the file still holds it whole.)
pub(crate) fn is_same_file(stored: &str, submitted: &str) -> bool {
    stored == submitted
        || (stored.starts_with(PURGED_TEXT_PREFIX) && stored == purged_text(submitted))
}

/// Replaces the job file in the `text` column of row `id` of `table` (`jobs`, `wf_jobs` or
/// `div_jobs`) with its digest ([`purged_text`]), inside a purge's transaction `tx`: what a
/// purge keeps of a job's file. A row whose text is a digest already is left as it is.
pub(crate) fn drop_job_text(
    tx: &rusqlite::Transaction,
    table: JobTable,
    id: u64,
) -> Result<(), StoreError> {
    let (select, update) = match table {
        JobTable::Batch => (
            "SELECT text FROM jobs WHERE id = ?1",
            "UPDATE jobs SET text = ?2 WHERE id = ?1",
        ),
        JobTable::Workflow => (
            "SELECT text FROM wf_jobs WHERE id = ?1",
            "UPDATE wf_jobs SET text = ?2 WHERE id = ?1",
        ),
        JobTable::Divisible => (
            "SELECT text FROM div_jobs WHERE id = ?1",
            "UPDATE div_jobs SET text = ?2 WHERE id = ?1",
        ),
    };
    let text: Option<String> = tx
        .prepare_cached(select)?
        .query_row(params![id as i64], |r| r.get(0))
        .optional()?;
    if let Some(text) = text.filter(|t| !t.starts_with(PURGED_TEXT_PREFIX)) {
        tx.prepare_cached(update)?
            .execute(params![id as i64, purged_text(&text)])?;
    }
    Ok(())
}

/// Drops the job files that rows purged by a binary from before purges dropped them still
/// hold ([`drop_job_text`]), at every open (an older binary may have opened the store since):
/// the scan reads only purged rows' texts, which are digests once dropped. The newest batch
/// job, purged without its ids' end in its row, keeps its file: a restart reads that from it.
/// A failure (a full disk) leaves the files, logged: nothing reads them.
fn drop_old_purged_texts(conn: &Connection) {
    let run = || -> Result<usize, StoreError> {
        let mut found = Vec::new();
        for (table, sql) in [
            (
                JobTable::Batch,
                "SELECT id FROM jobs WHERE purged != 0 AND substr(text, 1, 7) != 'sha256:'
                 AND NOT (id = (SELECT MAX(id) FROM jobs) AND tasks_end IS NULL)",
            ),
            (
                JobTable::Workflow,
                "SELECT id FROM wf_jobs WHERE purged != 0 AND substr(text, 1, 7) != 'sha256:'",
            ),
            (
                JobTable::Divisible,
                "SELECT id FROM div_jobs WHERE state = 'purged' AND substr(text, 1, 7) != 'sha256:'",
            ),
        ] {
            let mut stmt = conn.prepare(sql)?;
            for id in stmt.query_map([], |r| r.get::<_, i64>(0))? {
                found.push((table, id?.max(0) as u64));
            }
        }
        if found.is_empty() {
            return Ok(0);
        }
        let tx = conn.unchecked_transaction()?;
        for &(table, id) in &found {
            drop_job_text(&tx, table, id)?;
        }
        tx.commit()?;
        // A store made with incremental auto-vacuum gives the pages back now (a no-op on
        // another: its freed pages are reused by later rows).
        let mut stmt = conn.prepare("PRAGMA incremental_vacuum")?;
        let mut rows = stmt.query([])?;
        while rows.next()?.is_some() {}
        Ok(found.len())
    };
    match run() {
        Ok(0) => {}
        Ok(n) => tracing::info!("dropped the job files of {n} jobs purged by an older binary"),
        Err(e) => tracing::warn!("dropping the files of jobs purged by an older binary: {e}"),
    }
}

/// The table a kind of job's rows (and job file) are in, for [`drop_job_text`].
#[derive(Clone, Copy, Debug)]
pub(crate) enum JobTable {
    /// `jobs`: batch jobs.
    Batch,
    /// `wf_jobs`: workflows.
    Workflow,
    /// `div_jobs`: divisible jobs.
    Divisible,
}

/// A list stored by [`list_text`]; `what` names it in the error.
pub(crate) fn parse_list<T: std::str::FromStr>(s: &str, what: &str) -> Result<Vec<T>, StoreError> {
    if s.is_empty() {
        return Ok(Vec::new());
    }
    s.split(',')
        .map(|d| {
            d.parse()
                .map_err(|_| StoreError::Corrupt(format!("{what} `{s}`")))
        })
        .collect()
}

/// A job row as read, before its `after` list is parsed.
struct StoredJobRow {
    id: u64,
    origin: String,
    text: String,
    workdir: String,
    submitted_ns: u64,
    first_app: u32,
    first_task: u64,
    cancelled: bool,
    submission_key: Option<String>,
    owner: String,
    name: Option<String>,
    after: String,
    after_any: String,
    after_notok: String,
    after_corr: String,
    after_start: String,
    held: bool,
    begin_ms: Option<i64>,
}

impl Store {
    /// Opens (or creates) the store at `path`.
    pub fn open(path: &Path) -> Result<Self, StoreError> {
        let conn = Connection::open(path)?;
        // Pages freed by a purge go back to the file system (a new store only: SQLite fixes this
        // mode when the first table is created; an older store reuses freed pages instead).
        // Set on a new file only: on an existing one it is a write (refused on a full disk).
        let tables: i64 = conn.query_row("SELECT COUNT(*) FROM sqlite_master", [], |r| r.get(0))?;
        if tables == 0 {
            conn.pragma_update(None, "auto_vacuum", "INCREMENTAL")?;
        }
        conn.pragma_update(None, "journal_mode", "WAL")?;
        // Without a limit the `-wal` file keeps the size of the largest transaction it ever
        // held (4.9 MB after a 40,000-task submission, hundreds of MB after a far larger one),
        // for the server's life. With it, each time the log restarts after a checkpoint it is
        // truncated to this. 16 MiB is four times what the log holds between SQLite's automatic
        // checkpoints (1000 pages of 4 KiB), so ordinary transactions never pay for truncating
        // and growing the file again; only what a rare large one left is given back.
        conn.pragma_update(None, "journal_size_limit", JOURNAL_SIZE_LIMIT)?;
        // Commits are not fsynced one by one: the replies that depend on them wait for one
        // shared fdatasync of the WAL (`crate::durable`), so nothing acknowledged is lost.
        conn.pragma_update(None, "synchronous", "NORMAL")?;
        conn.pragma_update(None, "foreign_keys", "ON")?;
        // Before anything is changed: a newer binary's store is refused as it is.
        let was = stamp(&conn)?;
        create_tables(&conn)?;
        move_multi_node_meta(&conn)?;
        write_stamp(&conn, &was)?;
        drop_old_purged_texts(&conn);
        Ok(Self {
            conn,
            full: false,
            durable: crate::durable::Durable::for_file(path),
        })
    }

    /// An empty store in memory (a placeholder while the state is rebuilt), with every table
    /// and column a store on disk has: the rebuild reads it as it reads a real one.
    pub fn in_memory() -> Result<Self, StoreError> {
        let conn = Connection::open_in_memory()?;
        create_tables(&conn)?;
        Ok(Self {
            conn,
            full: false,
            durable: crate::durable::Durable::in_memory(),
        })
    }

    /// Makes every write fail with SQLite's "database or disk is full" (or stop failing):
    /// for tests of what a full disk does where a small filesystem cannot be mounted.
    pub fn simulate_full_disk(&mut self, full: bool) {
        self.full = full;
    }

    fn check_full(&self) -> Result<(), StoreError> {
        if self.full {
            return Err(StoreError::Sqlite(rusqlite::Error::SqliteFailure(
                rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_FULL),
                Some("database or disk is full (simulated)".into()),
            )));
        }
        Ok(())
    }

    /// A small durable write: whether the store accepts writes (again).
    pub fn probe(&mut self) -> Result<(), StoreError> {
        self.check_full()?;
        self.conn.execute(
            "INSERT INTO meta(key, value) VALUES ('probe', ?1)
             ON CONFLICT(key) DO UPDATE SET value = excluded.value",
            params![rand::random::<u32>()],
        )?;
        self.durable.wrote();
        Ok(())
    }

    /// Reads everything.
    pub fn load(&self) -> Result<Snapshot, StoreError> {
        let mut snap = Snapshot::default();
        let mut stmt = self
            .conn
            .prepare("SELECT id, name, spec, identity, removed FROM nodes ORDER BY id")?;
        let rows = stmt.query_map([], |r| {
            Ok(NodeRow {
                id: r.get(0)?,
                name: r.get(1)?,
                spec: r.get(2)?,
                identity: r.get(3)?,
                removed: r.get(4)?,
            })
        })?;
        for r in rows {
            snap.nodes.push(r?);
        }
        // Of a purged job only its first ids are read (a restart does not parse its file), and,
        // for the newest job, where they end: its row says so (a purge, or a set-aside since
        // its file no longer reads, wrote it). Only a newest job purged by an older binary,
        // whose row does not say, is read whole: its sizes say which ids are taken.
        let mut stmt = self.conn.prepare(
            "SELECT id, first_app, first_task, apps_end, tasks_end FROM jobs
             WHERE purged != 0 AND (id != (SELECT MAX(id) FROM jobs) OR tasks_end IS NOT NULL)
             ORDER BY id",
        )?;
        let rows = stmt.query_map([], |r| {
            let apps_end: Option<u32> = r.get(3)?;
            let tasks_end: Option<i64> = r.get(4)?;
            Ok(PurgedJob {
                id: r.get::<_, i64>(0)? as u64,
                first_app: r.get(1)?,
                first_task: r.get::<_, i64>(2)? as u64,
                end: apps_end.zip(tasks_end.map(|t| t as u64)),
            })
        })?;
        for r in rows {
            snap.purged_jobs.push(r?);
        }
        let mut stmt = self.conn.prepare(
            "SELECT id, origin, text, workdir, submitted_ns, first_app, first_task, cancelled,
                    submission_key, name, after, after_any, held, begin_ms, after_notok, after_corr, after_start,
                    owner FROM jobs
             WHERE purged = 0 OR (id = (SELECT MAX(id) FROM jobs) AND tasks_end IS NULL)
             ORDER BY id",
        )?;
        let rows = stmt.query_map([], |r| {
            Ok(StoredJobRow {
                id: r.get(0)?,
                origin: r.get(1)?,
                text: r.get(2)?,
                workdir: r.get(3)?,
                submitted_ns: r.get::<_, i64>(4)? as u64,
                first_app: r.get(5)?,
                first_task: r.get::<_, i64>(6)? as u64,
                cancelled: r.get(7)?,
                submission_key: r.get(8)?,
                name: r.get(9)?,
                after: r.get::<_, String>(10)?,
                after_any: r.get::<_, String>(11)?,
                held: r.get(12)?,
                begin_ms: r.get(13)?,
                after_notok: r.get::<_, String>(14)?,
                after_corr: r.get::<_, String>(15)?,
                after_start: r.get::<_, String>(16)?,
                owner: r.get::<_, String>(17)?,
            })
        })?;
        for r in rows {
            let r = r?;
            snap.jobs.push(JobRow {
                id: r.id,
                origin: r.origin,
                text: r.text,
                workdir: r.workdir,
                submitted_ns: r.submitted_ns,
                first_app: r.first_app,
                first_task: r.first_task,
                cancelled: r.cancelled,
                submission_key: r.submission_key,
                owner: r.owner,
                name: r.name,
                after: parse_list(&r.after, "job ids")?,
                after_any: parse_list(&r.after_any, "job ids")?,
                after_notok: parse_list(&r.after_notok, "job ids")?,
                after_corr: parse_list(&r.after_corr, "job ids")?,
                after_start: parse_list(&r.after_start, "job ids")?,
                held: r.held,
                begin_ms: r.begin_ms.map(|b| b.max(0) as u64),
            });
        }
        snap.purged = self.purged_jobs()?;
        snap.multi_node = self.multi_node_tasks()?;
        let mut stmt = self.conn.prepare(
            "SELECT id, priority, max_running, time_limit_ms, spec_generation, cpu_cores,
             cpu_memory_bytes, gpu_cores, gpu_memory_bytes, requires, gpu_gpus, gpu_kind FROM apps
             WHERE priority IS NOT NULL ORDER BY id",
        )?;
        let rows = stmt.query_map([], |r| {
            // (cores, memory, devices) columns of one variant.
            let request = |cores: usize,
                           gpus: Option<usize>|
             -> rusqlite::Result<Option<hetsched_core::Resources>> {
                let c: Option<u32> = r.get(cores)?;
                let m: Option<i64> = r.get(cores + 1)?;
                let g: Option<u32> = match gpus {
                    Some(i) => r.get(i)?,
                    None => None,
                };
                Ok(c.map(|c| {
                    hetsched_core::Resources::new(c, m.unwrap_or(0).max(0) as u64, g.unwrap_or(0))
                }))
            };
            Ok(AppSettings {
                app: r.get(0)?,
                priority: r.get(1)?,
                max_running: r.get(2)?,
                time_limit_ms: r.get::<_, Option<i64>>(3)?.map(|ms| ms.max(0) as u64),
                spec_generation: r.get(4)?,
                requests: [request(5, None)?, request(7, Some(10))?],
                requires: r
                    .get::<_, Option<String>>(9)?
                    .map(|t| t.lines().map(str::to_string).collect()),
                gpu_kind: r.get(11)?,
            })
        })?;
        for r in rows {
            snap.app_settings.push(r?);
        }
        let mut stmt = self.conn.prepare(
            "SELECT task, attempt, cores, memory_bytes, gpus FROM task_holds ORDER BY task",
        )?;
        let rows = stmt.query_map([], |r| {
            Ok(TaskHold {
                task: r.get::<_, i64>(0)? as u64,
                attempt: r.get(1)?,
                request: hetsched_core::Resources::new(
                    r.get(2)?,
                    r.get::<_, i64>(3)?.max(0) as u64,
                    r.get(4)?,
                ),
            })
        })?;
        for r in rows {
            snap.task_holds.push(r?);
        }
        snap.task_stops = task_stops(&self.conn)?;
        let mut stmt = self
            .conn
            .prepare("SELECT job, summary FROM finished ORDER BY job")?;
        let rows = stmt.query_map([], |r| Ok((r.get::<_, i64>(0)? as u64, r.get(1)?)))?;
        for r in rows {
            snap.finished.push(r?);
        }
        // Task rows of every job but the finished (summarised) and purged ones: a job's ids run
        // up to the next job's first task (a purged job's rows are deleted, so a range may span
        // its ids).
        let finished: std::collections::HashSet<u64> = snap.finished.iter().map(|f| f.0).collect();
        // A purged job read from its row only (`purged_jobs`, the newest one too once its row
        // says where its ids end) also ends the range before it: its rows may be still to
        // delete (`purging`).
        let mut ranges: Vec<std::ops::Range<u64>> = Vec::new();
        for (i, j) in snap.jobs.iter().enumerate() {
            if finished.contains(&j.id) || snap.purged.binary_search(&j.id).is_ok() {
                continue;
            }
            let next_purged = snap
                .purged_jobs
                .get(snap.purged_jobs.partition_point(|p| p.id <= j.id))
                .map(|p| p.first_task);
            let end = snap
                .jobs
                .get(i + 1)
                .map_or(i64::MAX as u64, |n| n.first_task)
                .min(next_purged.unwrap_or(u64::MAX));
            match ranges.last_mut() {
                Some(r) if r.end == j.first_task => r.end = end,
                _ => ranges.push(j.first_task..end),
            }
        }
        // Rows still as submitted (pending, never dispatched, no message) are not read: a
        // million-task job that has not started restarts without reading a million rows.
        let mut stmt = self.conn.prepare(&format!(
            "{TASK_COLUMNS} WHERE id >= ?1 AND id < ?2 AND (state != 0 OR attempt != 0 OR message != '')
             ORDER BY id"
        ))?;
        for r in ranges {
            let mut rows = stmt.query(params![r.start as i64, r.end as i64])?;
            while let Some(row) = rows.next()? {
                snap.tasks.push(task_row(row)?);
            }
        }
        snap.topologies = crate::jobs::topology::load(&self.conn)?;
        Ok(snap)
    }

    /// Records a node (new, or its description changed).
    pub fn put_node(&mut self, node: &NodeRow) -> Result<(), StoreError> {
        self.check_full()?;
        self.conn.execute(
            "INSERT INTO nodes(id, name, spec, identity, removed) VALUES (?1, ?2, ?3, ?4, ?5)
             ON CONFLICT(id) DO UPDATE SET name=excluded.name, spec=excluded.spec,
                                           identity=excluded.identity, removed=excluded.removed",
            params![node.id, node.name, node.spec, node.identity, node.removed],
        )?;
        self.durable.wrote();
        Ok(())
    }

    /// Records an accepted job, its applications (`(id, name)` in order) and its tasks, all in
    /// one transaction: either all of it is stored or none.
    pub fn insert_job(
        &mut self,
        job: &JobRow,
        apps: &[(u32, String)],
        tasks: &[TaskRow],
    ) -> Result<(), StoreError> {
        self.check_full()?;
        let tx = self.conn.transaction()?;
        tx.execute(
            "INSERT INTO jobs(id, origin, text, workdir, submitted_ns, first_app, first_task, cancelled,
                              submission_key, name, after, after_any, held, begin_ms,
                              after_notok, after_corr, after_start, owner)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17,
                     ?18)",
            params![
                job.id,
                job.origin,
                job.text,
                job.workdir,
                job.submitted_ns as i64,
                job.first_app,
                job.first_task as i64,
                job.cancelled,
                job.submission_key,
                job.name,
                list_text(&job.after),
                list_text(&job.after_any),
                job.held,
                job.begin_ms.map(|b| b as i64),
                list_text(&job.after_notok),
                list_text(&job.after_corr),
                list_text(&job.after_start),
                job.owner
            ],
        )?;
        {
            let mut stmt =
                tx.prepare("INSERT INTO apps(id, job, idx, name) VALUES (?1, ?2, ?3, ?4)")?;
            for (i, (id, name)) in apps.iter().enumerate() {
                stmt.execute(params![id, job.id, i as u32, name])?;
            }
            let mut one = tx.prepare(
                "INSERT INTO tasks(id, app, idx, state, attempt) VALUES (?1, ?2, ?3, ?4, ?5)",
            )?;
            // A run of rows numbered alike (an array's tasks: ids and indices counting up
            // together) is one statement that SQLite expands itself: binding and stepping a
            // statement per row was most of a million-task submission's hold on the state.
            let mut run = tx.prepare(
                "WITH RECURSIVE k(n) AS (SELECT 0 UNION ALL SELECT n + 1 FROM k WHERE n + 1 < ?1)
                 INSERT INTO tasks(id, app, idx, state, attempt)
                 SELECT ?2 + n, ?3, ?4 + n, ?5, ?6 FROM k",
            )?;
            for r in task_runs(tasks) {
                let t = &r[0];
                if r.len() == 1 {
                    one.execute(params![
                        t.id as i64,
                        t.app,
                        t.index,
                        t.state.code(),
                        t.attempt
                    ])?;
                } else {
                    run.execute(params![
                        r.len() as i64,
                        t.id as i64,
                        t.app,
                        t.index,
                        t.state.code(),
                        t.attempt
                    ])?;
                }
            }
        }
        tx.commit()?;
        self.durable.wrote();
        Ok(())
    }

    /// Writes `tasks` (their whole rows) and optionally marks `cancel_job` cancelled, in one
    /// transaction.
    pub fn update_tasks<'a>(
        &mut self,
        tasks: impl IntoIterator<Item = &'a TaskRow>,
        cancelled_jobs: &[u64],
    ) -> Result<(), StoreError> {
        self.transaction(|tx| write_tasks(tx, tasks, cancelled_jobs))
    }

    /// Ids of the jobs purged (their task rows deleted; the job row stays as a tombstone so job
    /// and application ids stay dense and a submission key keeps naming its job).
    pub fn purged_jobs(&self) -> Result<Vec<u64>, StoreError> {
        let mut stmt = self
            .conn
            .prepare("SELECT id FROM jobs WHERE purged != 0 ORDER BY id")?;
        let rows = stmt.query_map([], |r| r.get::<_, i64>(0))?;
        rows.map(|r| Ok(r? as u64)).collect()
    }

    /// The batch job `owner`'s submission key `key` names, purged or not (an indexed lookup:
    /// memory keeps no map of keys, which would grow with every job the server ever ran). Keys
    /// are a namespace per owner: another owner's job under the same key is not found.
    pub fn job_with_key(&self, owner: &str, key: &str) -> Result<Option<KeyedJob>, StoreError> {
        use rusqlite::OptionalExtension;
        Ok(self
            .conn
            .query_row(
                "SELECT id, first_task,
                        (SELECT n.first_task FROM jobs n WHERE n.id > jobs.id ORDER BY n.id LIMIT 1)
                 FROM jobs WHERE owner = ?1 AND submission_key = ?2",
                params![owner, key],
                |r| {
                    Ok(KeyedJob {
                        id: r.get::<_, i64>(0)? as u64,
                        first_task: r.get::<_, i64>(1)? as u64,
                        next_first_task: r.get::<_, Option<i64>>(2)?.map(|t| t as u64),
                    })
                },
            )
            .optional()?)
    }

    /// Whether batch job `id` was submitted with the file `text` (false: no such job): the
    /// check of a submission that repeats a key. A purged job's row keeps only its file's
    /// digest ([`purged_text`]), which answers it as well.
    pub fn is_job_file(&self, id: u64, text: &str) -> Result<bool, StoreError> {
        use rusqlite::OptionalExtension;
        let stored: Option<String> = self
            .conn
            .query_row(
                "SELECT text FROM jobs WHERE id = ?1",
                params![id as i64],
                |r| r.get(0),
            )
            .optional()?;
        Ok(stored.is_some_and(|s| is_same_file(&s, text)))
    }

    /// After a purge (or a step of one) committed: gives the freed pages back to the file
    /// system (incremental vacuum) and, with `truncate_wal` (the purge's last step), truncates
    /// the write-ahead log into the database. Steps before the last leave the log to SQLite's
    /// own checkpoints: truncating it after each cost a 50,000-row step a third more
    /// (docs/performance.md, "Purges in steps"). A failure only leaves the file larger (its
    /// pages are reused by later jobs), so it is logged, not returned.
    pub fn give_back_free_pages(&self, truncate_wal: bool) {
        let run = || -> Result<(), StoreError> {
            let mut stmt = self.conn.prepare("PRAGMA incremental_vacuum")?;
            let mut rows = stmt.query([])?;
            while rows.next()?.is_some() {}
            if truncate_wal {
                self.conn
                    .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))?;
            }
            Ok(())
        };
        if let Err(e) = run() {
            tracing::warn!("after a purge, returning freed pages failed: {e}");
        }
    }

    /// Records finished jobs' summaries (job id, summary), in one transaction: after a restart
    /// their task rows are not read (see [`Snapshot::finished`]).
    pub fn put_finished(&mut self, summaries: &[(u64, String)]) -> Result<(), StoreError> {
        self.check_full()?;
        let tx = self.conn.transaction()?;
        {
            let mut put =
                tx.prepare_cached("INSERT OR REPLACE INTO finished(job, summary) VALUES (?1, ?2)")?;
            for (job, summary) in summaries {
                put.execute(params![*job as i64, summary])?;
            }
        }
        tx.commit()?;
        self.durable.wrote();
        Ok(())
    }

    /// Task rows with ids in `range`, by id.
    pub fn task_rows(&self, range: std::ops::Range<u64>) -> Result<Vec<TaskRow>, StoreError> {
        self.task_rows_from(range, usize::MAX)
    }

    /// The first `limit` task rows with ids in `range`, by id (a page of a listing read back
    /// from the store).
    pub fn task_rows_from(
        &self,
        range: std::ops::Range<u64>,
        limit: usize,
    ) -> Result<Vec<TaskRow>, StoreError> {
        task_rows_from(&self.conn, range, limit, &[])
    }

    /// The store's file (`None` for a store in memory).
    pub fn path(&self) -> Option<std::path::PathBuf> {
        self.conn
            .path()
            .filter(|p| !p.is_empty())
            .map(std::path::PathBuf::from)
    }

    /// A second, read-only connection to this store (`None` for a store in memory): listings
    /// read finished jobs' rows through it without the state's lock (WAL readers do not block
    /// the writer, nor it them).
    pub fn reader(&self) -> Result<Option<StoreReader>, StoreError> {
        let Some(path) = self.conn.path().filter(|p| !p.is_empty()) else {
            return Ok(None);
        };
        let conn = Connection::open_with_flags(
            path,
            rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )?;
        Ok(Some(StoreReader(std::sync::Mutex::new(conn))))
    }

    /// Number of stored jobs (for tests and checks).
    pub fn job_count(&self) -> Result<u64, StoreError> {
        let n: Option<i64> = self
            .conn
            .query_row("SELECT COUNT(*) FROM jobs", [], |r| r.get(0))
            .optional()?;
        Ok(n.unwrap_or(0) as u64)
    }
}

impl Store {
    /// Runs `f` in one transaction and commits it; a failure of `f` or of the commit rolls it
    /// back. The state writes every job kind's changes of one event this way.
    pub fn transaction(
        &mut self,
        f: impl FnOnce(&rusqlite::Transaction) -> Result<(), StoreError>,
    ) -> Result<(), StoreError> {
        self.check_full()?;
        let tx = self.conn.transaction()?;
        f(&tx)?;
        tx.commit()?;
        self.durable.wrote();
        Ok(())
    }

    /// The durability of this store's writes (group commit; see [`crate::durable`]).
    pub fn durable(&self) -> std::sync::Arc<crate::durable::Durable> {
        self.durable.clone()
    }

    /// The connection, for a job kind that reads its own tables.
    pub fn conn(&self) -> &Connection {
        &self.conn
    }
}

/// Records whether each job is held (`hetsched hold` / `release`), inside `tx`.
pub fn write_held(tx: &rusqlite::Transaction, jobs: &[(u64, bool)]) -> Result<(), StoreError> {
    let mut stmt = tx.prepare_cached("UPDATE jobs SET held = ?1 WHERE id = ?2")?;
    for &(job, held) in jobs {
        stmt.execute(params![held, job])?;
    }
    Ok(())
}

/// Records jobs' new begin times (`hetsched update --begin`; `None`: at once) inside `tx`.
pub fn write_begin(
    tx: &rusqlite::Transaction,
    jobs: &[(u64, Option<u64>)],
) -> Result<(), StoreError> {
    let mut stmt = tx.prepare_cached("UPDATE jobs SET begin_ms = ?1 WHERE id = ?2")?;
    for &(job, begin) in jobs {
        stmt.execute(params![begin.map(|b| b as i64), job])?;
    }
    Ok(())
}

/// Records the other nodes (`others`, in order) of multi-node task `task`'s attempt that starts,
/// inside `tx`: its row's `other_nodes`, beside `node` (where its command runs). They stay when
/// the attempt ends, as `node` does, so a listing names them all; a running task's are held
/// again at a restart ([`Store::multi_node_tasks`]).
pub fn write_other_nodes(
    tx: &rusqlite::Transaction,
    task: u64,
    others: &[u32],
) -> Result<(), StoreError> {
    tx.prepare_cached("UPDATE tasks SET other_nodes = ?1 WHERE id = ?2")?
        .execute(params![list_text(others), task as i64])?;
    Ok(())
}

/// The multi-node tasks with ids in `range` (only the running ones if `running_only`) and their
/// nodes in their latest attempt, `node` first (through the partial index `tasks_other_nodes`).
fn multi_node_rows(
    conn: &Connection,
    range: std::ops::Range<u64>,
    running_only: bool,
) -> Result<std::collections::HashMap<u64, Vec<u32>>, StoreError> {
    let state = if running_only {
        format!(" AND state = {}", TaskState::Running.code())
    } else {
        String::new()
    };
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT id, node, other_nodes FROM tasks \
         WHERE other_nodes != '' AND id >= ?1 AND id < ?2{state}"
    ))?;
    let end = i64::try_from(range.end).unwrap_or(i64::MAX);
    let mut rows = stmt.query(params![range.start as i64, end])?;
    let mut out = std::collections::HashMap::new();
    while let Some(r) = rows.next()? {
        let id = r.get::<_, i64>(0)? as u64;
        let Some(first) = r.get::<_, Option<u32>>(1)? else {
            continue;
        };
        let others: String = r.get(2)?;
        let mut nodes = vec![first];
        nodes.extend(parse_list::<u32>(&others, "other_nodes")?);
        out.insert(id, nodes);
    }
    Ok(out)
}

/// Creates what is missing of every table, column and index a store has: the core schema, the
/// divisible, topology and accounting kinds' tables, the columns later versions added, the
/// per-owner submission keys ([`scope_keys_to_owners`]), then the indexes (some are on those
/// columns). Shared by a store on disk and one in memory, so
/// that the state's rebuild reads a placeholder exactly as it reads a real store.
fn create_tables(conn: &Connection) -> Result<(), StoreError> {
    conn.execute_batch(SCHEMA)?;
    conn.execute_batch(crate::jobs::divisible::SCHEMA)?;
    conn.execute_batch(crate::jobs::topology::SCHEMA)?;
    conn.execute_batch(crate::accounting::SCHEMA)?;
    add_missing_columns(conn, MIGRATIONS)?;
    scope_keys_to_owners(
        conn,
        "jobs",
        "submission_key",
        Some("jobs_submission_key"),
        KeyIndex::Unique,
    )?;
    scope_keys_to_owners(
        conn,
        "div_jobs",
        "submission_key",
        Some("div_jobs_submission_key"),
        KeyIndex::Unique,
    )?;
    conn.execute_batch(INDEXES)?;
    Ok(())
}

/// Moves what a store of an earlier version kept of running multi-node tasks' nodes (`meta`
/// rows `multi-node/TASK/K`, K = 0 the first node) into their rows' `other_nodes`.
fn move_multi_node_meta(conn: &Connection) -> Result<(), StoreError> {
    let prefix = "multi-node/";
    let mut by_task: std::collections::BTreeMap<u64, Vec<u32>> = Default::default();
    {
        // Keys are `TASK/K` with K zero-padded: in key order, each task's nodes come in order.
        let mut stmt =
            conn.prepare("SELECT key, value FROM meta WHERE substr(key, 1, ?1) = ?2 ORDER BY key")?;
        let mut rows = stmt.query(params![prefix.len() as i64, prefix])?;
        while let Some(r) = rows.next()? {
            let key: String = r.get(0)?;
            let bad = || StoreError::Corrupt(format!("meta key {key}"));
            let task = key[prefix.len()..]
                .split_once('/')
                .and_then(|(t, _)| t.parse().ok())
                .ok_or_else(bad)?;
            let node = u32::try_from(r.get::<_, i64>(1)?).map_err(|_| bad())?;
            by_task.entry(task).or_default().push(node);
        }
    }
    if by_task.is_empty() {
        return Ok(());
    }
    let tx = conn.unchecked_transaction()?;
    for (task, nodes) in &by_task {
        tx.execute(
            "UPDATE tasks SET other_nodes = ?1 WHERE id = ?2",
            params![list_text(nodes.get(1..).unwrap_or_default()), *task as i64],
        )?;
    }
    tx.execute(
        "DELETE FROM meta WHERE substr(key, 1, ?1) = ?2",
        params![prefix.len() as i64, prefix],
    )?;
    tx.commit()?;
    Ok(())
}

/// Records an application's settings as `hetsched update` left them, inside `tx` (a restart
/// applies them over what its job file says).
pub fn write_app_settings(tx: &rusqlite::Transaction, set: &AppSettings) -> Result<(), StoreError> {
    tx.prepare_cached(
        "UPDATE apps SET priority = ?1, max_running = ?2, time_limit_ms = ?3,
         spec_generation = ?4, cpu_cores = ?5, cpu_memory_bytes = ?6, gpu_cores = ?7,
         gpu_memory_bytes = ?8, requires = ?9, gpu_gpus = ?10, gpu_kind = ?12 WHERE id = ?11",
    )?
    .execute(params![
        set.priority,
        set.max_running,
        set.time_limit_ms.map(|ms| ms.min(i64::MAX as u64) as i64),
        set.spec_generation,
        set.requests[0].map(|r| r.cores),
        set.requests[0].map(|r| r.memory_bytes.min(i64::MAX as u64) as i64),
        set.requests[1].map(|r| r.cores),
        set.requests[1].map(|r| r.memory_bytes.min(i64::MAX as u64) as i64),
        set.requires.as_ref().map(|r| r.join("\n")),
        set.requests[1].map(|r| r.gpus),
        set.app,
        set.gpu_kind
    ])?;
    Ok(())
}

/// The stored stopping tasks ([`write_task_stop`]) of every kind: (task, attempt, node), by
/// task id.
pub fn task_stops(conn: &Connection) -> Result<Vec<(u64, u32, u32)>, StoreError> {
    let mut stmt = conn.prepare("SELECT task, attempt, node FROM task_stops ORDER BY task")?;
    let rows = stmt.query_map([], |r| {
        Ok((r.get::<_, i64>(0)? as u64, r.get(1)?, r.get(2)?))
    })?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// Records that attempt `attempt` of task `task`, cancelled while it ran, may still run its
/// process on node `node` (`Some((attempt, node))`), or forgets it (`None`: its process ended,
/// or its node is gone), inside `tx`.
pub fn write_task_stop(
    tx: &rusqlite::Transaction,
    task: u64,
    stop: Option<(u32, u32)>,
) -> Result<(), StoreError> {
    match stop {
        Some((attempt, node)) => {
            tx.prepare_cached(
                "INSERT OR REPLACE INTO task_stops(task, attempt, node) VALUES (?1, ?2, ?3)",
            )?
            .execute(params![task as i64, attempt, node])?;
        }
        None => {
            tx.prepare_cached("DELETE FROM task_stops WHERE task = ?1")?
                .execute(params![task as i64])?;
        }
    }
    Ok(())
}

/// Records what running task `task` holds (`Some`: an update changed its application's request
/// after it was placed), or forgets it (`None`: it ended), inside `tx`.
pub fn write_task_hold(
    tx: &rusqlite::Transaction,
    task: u64,
    hold: Option<&TaskHold>,
) -> Result<(), StoreError> {
    match hold {
        Some(h) => {
            tx.prepare_cached(
                "INSERT OR REPLACE INTO task_holds(task, attempt, cores, memory_bytes, gpus)
                 VALUES (?1, ?2, ?3, ?4, ?5)",
            )?
            .execute(params![
                task as i64,
                h.attempt,
                h.request.cores,
                h.request.memory_bytes.min(i64::MAX as u64) as i64,
                h.request.gpus
            ])?;
        }
        None => {
            tx.prepare_cached("DELETE FROM task_holds WHERE task = ?1")?
                .execute(params![task as i64])?;
        }
    }
    Ok(())
}

/// Writes `tasks` (their whole rows) and marks `cancelled_jobs` cancelled, inside `tx`.
pub fn write_tasks<'a>(
    tx: &rusqlite::Transaction,
    tasks: impl IntoIterator<Item = &'a TaskRow>,
    cancelled_jobs: &[u64],
) -> Result<(), StoreError> {
    let mut stmt = tx.prepare_cached(UPDATE_TASK)?;
    for t in tasks {
        stmt.execute(params![
            t.state.code(),
            t.attempt,
            t.node,
            t.variant,
            list_text(&t.devices),
            t.started_ns as i64,
            t.finished_ns as i64,
            t.exit_code,
            t.message,
            t.failures,
            t.usage.as_ref().map(|u| u.cpu_user_ms as i64),
            t.usage.as_ref().map(|u| u.cpu_system_ms as i64),
            t.usage.as_ref().map(|u| u.max_rss_bytes as i64),
            t.id as i64,
            t.preemptions,
            t.executed,
            t.usage.as_ref().map(|u| u.max_gpu_memory_bytes as i64),
            t.reason.map(EndReason::as_str),
            t.signal.as_deref(),
            t.interruptions
        ])?;
    }
    for job in cancelled_jobs {
        tx.execute("UPDATE jobs SET cancelled=1 WHERE id=?1", params![job])?;
    }
    Ok(())
}

/// Deletes the stored summaries of `jobs` inside `tx` (they are no longer finished).
pub fn forget_finished(tx: &rusqlite::Transaction, jobs: &[u64]) -> Result<(), StoreError> {
    let mut stmt = tx.prepare_cached("DELETE FROM finished WHERE job = ?1")?;
    for &job in jobs {
        stmt.execute(params![job as i64])?;
    }
    Ok(())
}

/// A read-only connection to the store (see [`Store::reader`]).
pub struct StoreReader(std::sync::Mutex<Connection>);

impl StoreReader {
    /// The multi-node tasks with ids in `range` and their nodes in their latest attempt, the
    /// first (`node`) first.
    pub fn multi_node_tasks_in(
        &self,
        range: std::ops::Range<u64>,
    ) -> Result<std::collections::HashMap<u64, Vec<u32>>, StoreError> {
        let conn = self.0.lock().unwrap_or_else(|p| p.into_inner());
        multi_node_rows(&conn, range, false)
    }

    /// The first `limit` task rows with ids in `range`, by id.
    pub fn task_rows_from(
        &self,
        range: std::ops::Range<u64>,
        limit: usize,
    ) -> Result<Vec<TaskRow>, StoreError> {
        let conn = self.0.lock().unwrap_or_else(|p| p.into_inner());
        task_rows_from(&conn, range, limit, &[])
    }

    /// The first `limit` task rows with ids in `range` whose state is one of `states`, by id
    /// (`hetsched tasks --state`: one scan of the range, however few rows match).
    pub fn task_rows_in_states(
        &self,
        range: std::ops::Range<u64>,
        limit: usize,
        states: &[TaskState],
    ) -> Result<Vec<TaskRow>, StoreError> {
        let conn = self.0.lock().unwrap_or_else(|p| p.into_inner());
        task_rows_from(&conn, range, limit, states)
    }
}

/// The columns of a task row, in [`task_row`]'s order.
const TASK_COLUMNS: &str =
    "SELECT id, app, idx, state, attempt, node, variant, devices, started_ns,
    finished_ns, exit_code, message, failures, cpu_user_ms, cpu_system_ms, max_rss_bytes,
    preemptions, executed_node, max_gpu_memory_bytes, reason, signal, interruptions FROM tasks";

/// One row of a query on [`TASK_COLUMNS`].
fn task_row(r: &rusqlite::Row) -> Result<TaskRow, StoreError> {
    let devices: String = r.get(7)?;
    Ok(TaskRow {
        id: r.get::<_, i64>(0)? as u64,
        app: r.get(1)?,
        index: r.get(2)?,
        state: TaskState::from_code(r.get(3)?)?,
        attempt: r.get(4)?,
        node: r.get(5)?,
        variant: r.get(6)?,
        devices: parse_list(&devices, "devices")?.into(),
        started_ns: r.get::<_, i64>(8)? as u64,
        finished_ns: r.get::<_, i64>(9)? as u64,
        exit_code: r.get(10)?,
        message: r.get(11)?,
        failures: r.get(12)?,
        preemptions: r.get(16)?,
        interruptions: r.get(21)?,
        executed: r.get(17)?,
        reason: r
            .get::<_, Option<String>>(19)?
            .as_deref()
            .and_then(EndReason::from_name),
        signal: r
            .get::<_, Option<String>>(20)?
            .as_deref()
            .and_then(signal_name),
        usage: match (
            r.get::<_, Option<i64>>(13)?,
            r.get::<_, Option<i64>>(14)?,
            r.get::<_, Option<i64>>(15)?,
        ) {
            (Some(user), Some(system), Some(rss)) => Some(Box::new(TaskUsage {
                cpu_user_ms: user as u64,
                cpu_system_ms: system as u64,
                max_rss_bytes: rss as u64,
                max_gpu_memory_bytes: r.get::<_, Option<i64>>(18)?.unwrap_or(0) as u64,
            })),
            _ => None,
        },
    })
}

/// The first `limit` task rows with ids in `range`, by id; only rows in `states` unless it is
/// empty.
fn task_rows_from(
    conn: &Connection,
    range: std::ops::Range<u64>,
    limit: usize,
    states: &[TaskState],
) -> Result<Vec<TaskRow>, StoreError> {
    // The codes are ours, not a client's text; each set of states is its own cached statement.
    let filter = if states.is_empty() {
        String::new()
    } else {
        let codes: Vec<i64> = states.iter().map(|s| s.code()).collect();
        format!(" AND state IN ({})", list_text(&codes))
    };
    let mut stmt = conn.prepare_cached(&format!(
        "{TASK_COLUMNS} WHERE id >= ?1 AND id < ?2{filter} ORDER BY id LIMIT ?3"
    ))?;
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let mut rows = stmt.query(params![range.start as i64, range.end as i64, limit])?;
    let mut out = Vec::new();
    while let Some(r) = rows.next()? {
        out.push(task_row(r)?);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use hetsched_core::testkit::ScratchDir;

    /// A fresh directory for test `name` (held by the test: removed when it passes) and the
    /// path of a store in it, not made yet.
    fn temp_db(name: &str) -> (ScratchDir, std::path::PathBuf) {
        let dir = ScratchDir::new("store", name);
        let path = dir.join("state.db");
        (dir, path)
    }

    /// Job 1 as a plain submission (`job.toml`, the admin's, no key, name, dependencies, hold
    /// or begin time): the job row of a test about its task rows.
    fn job_row() -> JobRow {
        JobRow {
            id: 1,
            origin: "job.toml".into(),
            text: "x".into(),
            workdir: "/".into(),
            submitted_ns: 5,
            first_app: 0,
            first_task: 0,
            cancelled: false,
            submission_key: None,
            owner: crate::users::ADMIN.into(),
            name: None,
            after: Vec::new(),
            after_any: Vec::new(),
            after_notok: Vec::new(),
            after_corr: Vec::new(),
            after_start: Vec::new(),
            held: false,
            begin_ms: None,
        }
    }

    /// The `-wal` file does not keep the size of the largest transaction for good: the
    /// writing connection of a freshly opened store (new or existing) has a journal size
    /// limit.
    #[test]
    fn a_store_opens_with_a_journal_size_limit() {
        let (_dir, path) = temp_db("journal-limit");
        for _ in 0..2 {
            let store = Store::open(&path).expect("open");
            let limit: i64 = store
                .conn
                .pragma_query_value(None, "journal_size_limit", |r| r.get(0))
                .expect("pragma");
            assert_eq!(limit, JOURNAL_SIZE_LIMIT);
            assert_eq!(JOURNAL_SIZE_LIMIT, 16 << 20);
        }
    }

    /// A store is stamped with its schema number and the version of the binary that opened
    /// it last; one whose schema is newer than this binary knows is refused, before anything
    /// in it changes, naming both numbers and that version.
    #[test]
    fn a_store_is_stamped_and_a_newer_schema_is_refused() {
        let (_dir, path) = temp_db("stamp");
        drop(Store::open(&path).expect("create"));
        let conn = Connection::open(&path).expect("raw");
        assert_eq!(
            stamp(&conn).expect("stamp"),
            Stamp {
                schema: SCHEMA_VERSION,
                version: Some(crate::VERSION.to_string())
            }
        );
        // A newer binary opened it.
        conn.pragma_update(None, "user_version", SCHEMA_VERSION + 1)
            .expect("newer");
        conn.execute(
            "UPDATE meta SET value = '9.9.9' WHERE key = ?1",
            params![VERSION_KEY],
        )
        .expect("by");
        drop(conn);
        let e = Store::open(&path).err().expect("refused").to_string();
        assert!(
            e.contains(&format!(
                "its schema is number {}, newer than this binary's {SCHEMA_VERSION} (it was last \
                 opened by hetsched 9.9.9)",
                SCHEMA_VERSION + 1
            )),
            "{e}"
        );
        let conn = Connection::open(&path).expect("raw");
        let kept: String = conn
            .query_row(
                "SELECT value FROM meta WHERE key = ?1",
                params![VERSION_KEY],
                |r| r.get(0),
            )
            .expect("kept");
        assert_eq!(kept, "9.9.9", "nothing changed");
    }

    /// A store of schema 1 (before purges in steps) opens, keeps what it holds and is stamped 2;
    /// from then on a binary of schema 1 refuses it (it would misread the `purging` table's
    /// rows), saying which version opened it.
    #[test]
    fn a_schema_1_store_is_upgraded_to_2_which_a_schema_1_binary_refuses() {
        let (_dir, path) = temp_db("schema-1");
        drop(Store::open(&path).expect("create"));
        let conn = Connection::open(&path).expect("raw");
        conn.pragma_update(None, "user_version", 1)
            .expect("schema 1");
        conn.execute("INSERT INTO purging(job, next, end) VALUES (7, 10, 20)", [])
            .expect("a purge left unfinished");
        drop(conn);
        drop(Store::open(&path).expect("a schema-1 store opens"));
        let conn = Connection::open(&path).expect("raw");
        assert_eq!(stamp(&conn).expect("stamp").schema, 2);
        let left: (i64, i64, i64) = conn
            .query_row("SELECT job, next, end FROM purging", [], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?))
            })
            .expect("kept");
        assert_eq!(left, (7, 10, 20));
        // What a binary of schema 1 checks at its start.
        let older_binary_refuses = stamp(&conn).expect("stamp").schema > 1;
        assert!(older_binary_refuses);
    }

    /// Every table, index and column of a store, as SQLite lists them.
    fn schema_of(conn: &Connection) -> Vec<String> {
        let mut out = Vec::new();
        let mut q = conn
            .prepare("SELECT type, name, tbl_name FROM sqlite_master ORDER BY type, name")
            .expect("sqlite_master");
        let items: Vec<(String, String, String)> = q
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .expect("query")
            .collect::<Result<_, _>>()
            .expect("rows");
        for (kind, name, table) in items {
            out.push(format!("{kind} {name} on {table}"));
            if kind == "table" {
                let mut c = conn
                    .prepare("SELECT name, type FROM pragma_table_info(?1) ORDER BY cid")
                    .expect("table_info");
                let columns: Vec<(String, String)> = c
                    .query_map([&name], |r| Ok((r.get(0)?, r.get(1)?)))
                    .expect("query")
                    .collect::<Result<_, _>>()
                    .expect("rows");
                out.extend(columns.iter().map(|(c, t)| format!("  {name}.{c} {t}")));
            }
        }
        out
    }

    /// The placeholder the state's rebuild reads must be read as a real store is.
    #[test]
    fn a_store_in_memory_has_every_table_index_and_column_of_a_new_store_on_disk() {
        let (_dir, path) = temp_db("in-memory-schema");
        let disk = Store::open(&path).expect("open");
        let memory = Store::in_memory().expect("in memory");
        let on_disk = schema_of(&disk.conn);
        assert!(
            on_disk.iter().any(|l| l.starts_with("table tasks")),
            "{on_disk:?}"
        );
        assert_eq!(schema_of(&memory.conn), on_disk);
    }

    #[test]
    fn a_job_and_its_task_updates_survive_reopening() {
        let (_dir, path) = temp_db("roundtrip");
        let job = JobRow {
            workdir: "/tmp".into(),
            submission_key: Some("k".into()),
            after: vec![3, 7],
            after_any: vec![5],
            after_notok: vec![2, 4],
            after_corr: vec![3],
            after_start: vec![5],
            begin_ms: Some(1_893_456_000_000),
            ..job_row()
        };
        let mut task = TaskRow::submitted(0, 0, 0);
        {
            let mut s = Store::open(&path).expect("open");
            s.insert_job(&job, &[(0, "a".into())], std::slice::from_ref(&task))
                .expect("insert");
            task.state = TaskState::Succeeded;
            task.attempt = 1;
            task.node = Some(0);
            task.variant = Some(1);
            task.devices = vec![0, 2].into();
            task.exit_code = Some(0);
            task.failures = 2;
            task.preemptions = 3;
            task.executed = Some(4);
            task.usage = Some(Box::new(TaskUsage {
                cpu_user_ms: 61_000,
                cpu_system_ms: 250,
                max_rss_bytes: 5 << 30,
                max_gpu_memory_bytes: 3 << 30,
            }));
            s.update_tasks([&task], &[1]).expect("update");
        }
        let s = Store::open(&path).expect("reopen");
        let snap = s.load().expect("load");
        assert_eq!(snap.jobs.len(), 1);
        assert!(snap.jobs[0].cancelled);
        assert_eq!(snap.tasks, vec![task]);
        assert_eq!(snap.jobs[0].submission_key.as_deref(), Some("k"));
        assert_eq!(snap.jobs[0].after, vec![3, 7]);
        assert_eq!(snap.jobs[0].after_any, vec![5]);
        assert_eq!(snap.jobs[0].after_notok, vec![2, 4]);
        assert_eq!(snap.jobs[0].after_corr, vec![3]);
        assert_eq!(snap.jobs[0].after_start, vec![5]);
        assert_eq!(snap.jobs[0].begin_ms, Some(1_893_456_000_000));
    }

    /// A submission's rows are written in runs (ids and indices counting up together, one
    /// statement each) and one by one where the numbering breaks (an array's listed indices,
    /// a new application): every row reads back as given, and nothing else is written.
    #[test]
    fn a_submissions_rows_read_back_as_given_whether_written_in_runs_or_alone() {
        let (_dir, path) = temp_db("runs");
        let job = job_row();
        // Application 0: indices 0..1000, then listed 2000, 2001, 7, u32::MAX; application 1:
        // 0..3, one alone.
        let indices = (0..1000).chain([2000, 2001, 7, u32::MAX]);
        let mut rows: Vec<TaskRow> = indices
            .enumerate()
            .map(|(i, k)| TaskRow::submitted(i as u64, 0, k))
            .collect();
        let n = rows.len() as u64;
        rows.extend((0..3).map(|k| TaskRow::submitted(n + u64::from(k), 1, k)));
        rows.push(TaskRow::submitted(n + 3, 1, 9));
        assert_eq!(
            task_runs(&rows).map(<[TaskRow]>::len).collect::<Vec<_>>(),
            [1000, 2, 1, 1, 3, 1]
        );
        let mut s = Store::open(&path).expect("open");
        s.insert_job(&job, &[(0, "a".into()), (1, "b".into())], &rows)
            .expect("insert");
        assert_eq!(s.task_rows(0..1_000_000).expect("read"), rows);
    }

    /// Why a task's attempt ended, and its signal, are read back after a restart; a name this
    /// version does not know (a later version's reason, a signal an agent should not have
    /// sent) reads as none.
    #[test]
    fn a_tasks_reason_and_signal_survive_reopening_and_unknown_names_read_as_none() {
        let (_dir, path) = temp_db("reason");
        let job = job_row();
        let rows: Vec<TaskRow> = (0..2).map(|i| TaskRow::submitted(i, 0, i as u32)).collect();
        let signalled = TaskRow {
            state: TaskState::Failed,
            attempt: 1,
            node: Some(0),
            exit_code: Some(-1),
            message: "exited with signal: 11 (SIGSEGV)".into(),
            reason: Some(EndReason::Signal),
            signal: signal_name("SEGV"),
            ..rows[0].clone()
        };
        let retried = TaskRow {
            attempt: 1,
            message: "attempt 1 failed (time limit of 1s exceeded); retry 1 of 1".into(),
            failures: 1,
            reason: Some(EndReason::TimeLimit),
            ..rows[1].clone()
        };
        {
            let mut s = Store::open(&path).expect("open");
            s.insert_job(&job, &[(0, "a".into())], &rows)
                .expect("insert");
            s.update_tasks([&signalled, &retried], &[]).expect("update");
        }
        let snap = Store::open(&path).expect("reopen").load().expect("load");
        assert_eq!(snap.tasks, vec![signalled.clone(), retried]);
        {
            let conn = Connection::open(&path).expect("open");
            conn.execute_batch(
                "UPDATE tasks SET reason = 'abducted', signal = 'segv; rm' WHERE id = 0",
            )
            .expect("later names");
        }
        let snap = Store::open(&path).expect("reopen").load().expect("load");
        assert_eq!((snap.tasks[0].reason, &snap.tasks[0].signal), (None, &None));
        for r in EndReason::ALL {
            assert_eq!(EndReason::from_name(r.as_str()), Some(r));
        }
        assert_eq!(signal_name("RTMIN+2").as_deref(), Some("RTMIN+2"));
        for bad in ["", "segv", "SEGV ", "S-E", "ABCDEFGHIJKLMNOPQ"] {
            assert_eq!(signal_name(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn load_reads_back_only_the_task_rows_that_changed_since_submission() {
        let (_dir, path) = temp_db("touched");
        let job = job_row();
        let rows: Vec<TaskRow> = (0..4).map(|i| TaskRow::submitted(i, 0, i as u32)).collect();
        {
            let mut s = Store::open(&path).expect("open");
            s.insert_job(&job, &[(0, "a".into())], &rows)
                .expect("insert");
            let running = TaskRow {
                state: TaskState::Running,
                attempt: 1,
                node: Some(0),
                variant: Some(0),
                ..rows[1].clone()
            };
            // Lost with its node and queued again: pending, but not as submitted.
            let requeued = TaskRow {
                attempt: 1,
                message: "attempt 1 lost: node `n` stopped heartbeating".into(),
                ..rows[3].clone()
            };
            s.update_tasks([&running, &requeued], &[]).expect("update");
        }
        let snap = Store::open(&path).expect("reopen").load().expect("load");
        let read: Vec<(u64, TaskState, u32)> = snap
            .tasks
            .iter()
            .map(|t| (t.id, t.state, t.attempt))
            .collect();
        assert_eq!(
            read,
            vec![(1, TaskState::Running, 1), (3, TaskState::Pending, 1)]
        );
    }

    #[test]
    fn a_store_from_before_keys_and_retries_gains_their_columns() {
        let (_dir, path) = temp_db("migrate");
        {
            let old = Connection::open(&path).expect("open");
            old.execute_batch(SCHEMA).expect("old schema");
            old.execute(
                "INSERT INTO jobs(id, origin, text, workdir, submitted_ns, first_app, first_task)
                 VALUES (1, 'j', 't', '/', 0, 0, 0)",
                [],
            )
            .expect("old job");
            old.execute_batch(
                "INSERT INTO apps(id, job, idx, name) VALUES (0, 1, 0, 'a');
                 INSERT INTO tasks(id, app, idx, state, attempt, node) VALUES (0, 0, 0, 2, 1, 0);",
            )
            .expect("old task");
        }
        for _ in 0..2 {
            let s = Store::open(&path).expect("migrates, then opens as is");
            let snap = s.load().expect("load");
            assert_eq!(snap.jobs[0].submission_key, None);
            assert!(snap.jobs[0].after.is_empty());
            // A task stored before offloads were: it ran where it was placed. Before reasons
            // were: it has none.
            let t = snap.tasks.first().expect("the finished task is read");
            assert_eq!(
                (t.state, t.node, t.executed, t.reason, &t.signal),
                (TaskState::Succeeded, Some(0), None, None, &None)
            );
        }
    }

    /// A store from when submission keys were one namespace for the whole server (a UNIQUE
    /// index on the key alone, in `jobs` and in `div_jobs`) opens with keys per owner: each
    /// stored key still names its owner's job, and the same key from another owner is stored.
    #[test]
    fn a_store_with_one_namespace_of_keys_gains_one_per_owner() {
        use crate::users::ADMIN;
        let (_dir, path) = temp_db("keys-per-owner");
        {
            let old = Connection::open(&path).expect("open");
            old.execute_batch(SCHEMA).expect("old schema");
            old.execute_batch(crate::jobs::divisible::SCHEMA)
                .expect("old divisible schema");
            add_missing_columns(&old, MIGRATIONS).expect("old columns");
            old.execute_batch(
                "CREATE UNIQUE INDEX jobs_submission_key ON jobs(submission_key);
                 CREATE UNIQUE INDEX div_jobs_submission_key ON div_jobs(submission_key);
                 INSERT INTO job_owners(job, owner) VALUES (1, 'alice'), (3, 'alice');
                 INSERT INTO jobs(id, origin, text, workdir, submitted_ns, first_app, first_task,
                                  submission_key)
                     VALUES (1, 'j', 't', '/', 0, 0, 0, 'k'), (2, 'j', 't', '/', 0, 0, 0, 'r');
                 INSERT INTO div_jobs(id, origin, text, state, submitted_ns, submission_key)
                     VALUES (3, 'd', 't', 'running', 0, 'k');",
            )
            .expect("old rows");
        }
        let job = |id: u64, key: &str, owner: &str| JobRow {
            id,
            origin: "j".into(),
            text: "t".into(),
            submitted_ns: 0,
            submission_key: Some(key.into()),
            owner: owner.into(),
            ..job_row()
        };
        for round in 0..2 {
            let mut s = Store::open(&path).expect("migrates, then opens as is");
            let found = |s: &Store, owner: &str, key: &str| {
                s.job_with_key(owner, key).expect("lookup").map(|k| k.id)
            };
            assert_eq!(found(&s, "alice", "k"), Some(1), "{round}");
            assert_eq!(found(&s, ADMIN, "r"), Some(2), "{round}");
            assert_eq!(found(&s, ADMIN, "k"), None, "{round}");
            let div_owner: String = s
                .conn
                .query_row("SELECT owner FROM div_jobs WHERE id = 3", [], |r| r.get(0))
                .expect("div owner");
            assert_eq!(div_owner, "alice");
            if round == 0 {
                assert_eq!(found(&s, "bob", "k"), None);
                assert_eq!(found(&s, "alice", "r"), None);
                s.insert_job(&job(4, "k", "bob"), &[], &[])
                    .expect("bob's key `k` is his own");
                s.insert_job(&job(5, "r", "alice"), &[], &[])
                    .expect("alice's key `r` is her own");
                s.conn
                    .execute(
                        "INSERT INTO div_jobs(id, origin, text, state, submitted_ns,
                                              submission_key, owner)
                         VALUES (6, 'd', 't', 'running', 0, 'k', 'bob')",
                        [],
                    )
                    .expect("bob's divisible key `k` is his own");
            }
            assert_eq!(found(&s, "bob", "k"), Some(4), "{round}");
            assert_eq!(found(&s, "alice", "r"), Some(5), "{round}");
            s.insert_job(&job(7, "k", "alice"), &[], &[])
                .expect_err("one owner's key names one job");
            s.conn
                .execute(
                    "INSERT INTO div_jobs(id, origin, text, state, submitted_ns, submission_key,
                                          owner)
                     VALUES (8, 'd', 't', 'running', 0, 'k', 'alice')",
                    [],
                )
                .expect_err("nor a divisible job's");
        }
    }
    /// The names of `table`'s indexes that are UNIQUE.
    fn unique_indexes(conn: &Connection, table: &str) -> Vec<String> {
        conn.prepare("SELECT name FROM pragma_index_list(?1) WHERE \"unique\" = 1 ORDER BY name")
            .expect("index_list")
            .query_map([table], |r| r.get(0))
            .expect("query")
            .collect::<Result<_, _>>()
            .expect("names")
    }

    /// A store from before workflows' keys had a UNIQUE index (a plain one, so one owner's key
    /// could name several workflows) opens: every job stays, the lowest id keeps the key (what a
    /// retry found before), the other loses it, and the index is UNIQUE from then on, while
    /// any number of keyless workflows still fit.
    #[test]
    fn a_store_whose_workflow_key_names_two_jobs_keeps_both_and_then_refuses_a_duplicate() {
        use crate::jobs::workflow::create_tables as workflow_tables;
        let (_dir, path) = temp_db("wf-duplicate-keys");
        let insert = |conn: &Connection, id: i64, owner: &str, key: &str| {
            conn.execute(
                "INSERT INTO wf_jobs(id, name, origin, text, workdir, balancer, submitted_ns,
                                     finished_ns, key, owner)
                 VALUES (?1, 'w', 'w.toml', 't', '/', 'centralised', 0, 0, ?2, ?3)",
                params![id, key, owner],
            )
        };
        {
            let s = Store::open(&path).expect("open");
            workflow_tables(&s.conn).expect("workflow tables");
            // Back to the old index, then the duplicates it let in.
            s.conn
                .execute_batch(
                    "DROP INDEX wf_jobs_owner_key;
                     CREATE INDEX wf_jobs_owner_key ON wf_jobs(owner, key);",
                )
                .expect("the old index");
            for (id, owner, key) in [
                (3, "alice", "k"),
                (5, "alice", "k"),
                (7, "alice", "k"),
                (4, "bob", "k"),
                (6, "alice", ""),
                (8, "alice", ""),
            ] {
                insert(&s.conn, id, owner, key).expect("an old row");
            }
        }
        for round in 0..2 {
            let s = Store::open(&path).expect("open");
            workflow_tables(&s.conn).expect("migrates, then opens as is");
            let rows: Vec<(i64, String, String)> = s
                .conn
                .prepare("SELECT id, owner, key FROM wf_jobs ORDER BY id")
                .expect("prepare")
                .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
                .expect("query")
                .collect::<Result<_, _>>()
                .expect("rows");
            let row = |id: i64, owner: &str, key: &str| (id, owner.to_string(), key.to_string());
            assert_eq!(
                rows,
                [
                    row(3, "alice", "k"),
                    row(4, "bob", "k"),
                    row(5, "alice", ""),
                    row(6, "alice", ""),
                    row(7, "alice", ""),
                    row(8, "alice", ""),
                ],
                "{round}: every job stays; the lowest id keeps alice's key"
            );
            assert_eq!(unique_indexes(&s.conn, "wf_jobs"), ["wf_jobs_owner_key"]);
            insert(&s.conn, 100 + round, "alice", "k").expect_err("alice's key names job 3");
            insert(&s.conn, 110 + round, "bob", "k").expect_err("bob's names job 4");
            insert(&s.conn, 120 + round, "carol", "k").expect("carol's key is her own");
            insert(&s.conn, 130 + round, "alice", "").expect("keyless workflows never collide");
            s.conn
                .execute("DELETE FROM wf_jobs WHERE id >= 100", [])
                .expect("the probes go");
        }
    }

    /// A fresh store's submission keys are UNIQUE per owner for every kind.
    #[test]
    fn a_fresh_store_has_a_unique_owner_key_index_for_every_kind() {
        let s = Store::in_memory().expect("in memory");
        crate::jobs::workflow::create_tables(&s.conn).expect("workflow tables");
        for table in ["jobs", "div_jobs", "wf_jobs"] {
            assert_eq!(
                unique_indexes(&s.conn, table),
                [format!("{table}_owner_key")],
                "{table}"
            );
        }
    }
}
