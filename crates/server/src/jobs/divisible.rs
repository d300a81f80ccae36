//! Divisible jobs (spec 03 in the runtime; docs/divisible.md, "In the runtime"): a job kind
//! ([`Kind::Divisible`]) behind the one dispatch path of [`super`]. The server is the one-port
//! master of every `[[divisible]]` job: this kind drives the core's [`OnlineMaster`] — the same
//! planners and `StarMaster` protocol as `hetsched sim divisible` — with what the agents report,
//! records each chunk's result once, and gathers the chunks' outputs in unit order.
//!
//! **Where it sits in the [`super::JobKind`] contract.** Chunks do not travel in heartbeats: a
//! chunk's input and output are bulk bytes streamed on their own gRPC service
//! ([`crate::divisible_service`], the protobuf edge), which holds the one port (one input
//! transfer at a time) and calls into the state ([`crate::state`]'s `on_next_chunk`,
//! `on_chunk_done`, …) only for the bookkeeping, under the state's lock, never during a
//! transfer. Everything else is the contract's: the job id carries the kind
//! ([`Kind::id`]); `State::on_submit` routes a file with a `[[divisible]]` section here, which
//! stores the job row (store-first, in one transaction, with the client's submission key under a
//! UNIQUE index on its owner and key); `ListJobs`/`GetJob`/`ListTasks`/`Cancel` are answered by [`JobKind`]; every
//! change of a job or chunk row is a dirty row written by [`JobKind::persist`] inside the
//! state's one transaction per event, so the full-disk pause and rollback cover it (a rollback
//! rebuilds this kind from the store's `div_jobs`/`div_chunks`/`div_workers` tables, keeping
//! only the agents' liveness, which the store never held). Agents silent for the dead timeout are declared lost
//! in [`JobKind::housekeeping`] (every reaper tick; a stall of the server itself not counted,
//! [`JobKind::server_stalled`]), and an agent whose node the state declares
//! dead loses its chunks there ([`Divisible::lose_agent`]): their chunks are re-planned. An agent
//! computing a chunk holds one core of its node in the shared view ([`Divisible::rebook`]),
//! charged to its job's owner: batch tasks are not placed on it, and it counts against the
//! owner's cap on cores and as its fair-share usage (a job whose owner is at its cap hands no
//! agent a chunk that would take another core: [`ChunkRequest::capped`]).
//!
//! Files live under `DATA_DIR/divisible/job-N/`: `input` (the submitted input, written and
//! synced before the job row is committed), `chunk-K.out` (a finished chunk's output, synced
//! before its success is committed, and only while the chunk is out: a repeated or late result
//! is acknowledged and ignored) and `output` (the gathered output).
//!
//! **Waiting.** A job submitted `--after` other jobs, `--hold` or `--begin` is stored at once but
//! hands out no chunk until the state finds that what it waits for allows it ([`super::gate`],
//! `State::settle_gates`); its row's `started` says whether it has. One the jobs it names can
//! no longer allow is cancelled, saying why. Only a job that has not started is held or has its
//! begin time moved.
//!
//! **No room on an agent's disk.** An agent keeps `min_free_disk` free on its work directory's
//! disk, chunk inputs included. A chunk whose input found no room there is reported with the
//! agent's `NO_ROOM` prefix ([`NO_ROOM`]): a loss for that node's disk, not a failure (a full
//! disk says nothing of the chunk's command, so `retries` does not count it), counted against
//! [`MAX_UNIT_LOSSES`](hetsched_core::policy::divisible::online::MAX_UNIT_LOSSES) as every
//! loss is; its units are re-planned and its worker leaves the job's plan. An agent whose asks
//! say its disk is below its floor ([`ChunkRequest::disk_short`]) stays out of the plans of
//! jobs with input, and is handed none of their chunks, until an ask says it has room again.
//!
//! **Stopping.** A cancel ends the job at once, but the chunks it had out run on until their
//! agents have stopped their processes (SIGTERM, the kill grace): they are *stopping*
//! ([`super::stopping`], one mechanism with batch tasks and workflow instances, keyed by
//! [`chunk_task`]), and a wait on the job returns only once none is — when an ask of its agent no
//! longer lists it (past the chunk's [`GRACE`]), its result comes, or its agent is lost. Stored in
//! `task_stops`, so a restart keeps them.
//!
//! After a restart the master is rebuilt from the worker rows (`div_workers`: the workers in the
//! order they joined, with their memory, as listings showed them) and the chunk rows: finished chunks are measurements
//! again, failed chunks count their units' failures again (a restart gives no unit its
//! `retries` afresh), and chunks that were out stay their agents' (an agent keeps computing
//! while the server is away and uploads when it is back) until their agent says it no longer
//! holds them — its first ask after the restart does: such a chunk has no [`GRACE`] — or is
//! declared dead.

use super::gate::Gate;
use super::stopping::Stopping;
use super::workflow::NO_ROOM;
use super::{Ctx, JobKind, KIND_SHIFT, Kind, Read};
use crate::state::StateError;
use crate::state::nodes::Nodes;
use crate::state::stall::{Grace, Stall};
use crate::state::types::{
    JobInfo, JobsPage, RunningAttempt, Submission, Submitted, TaskCounts, TasksPage,
};
use crate::store::{EndReason, StoreError};
use hetsched_core::input::divisible::DivisibleSpec;
use hetsched_core::input::workload::{Command, parse_workload};
use hetsched_core::policy::divisible::online::{OnlineConfig, OnlineMaster, Order, Recorded};
use hetsched_core::{NodeId, Resources, SchedulerView};
use rusqlite::{Connection, params};
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use tracing::{info, warn};

/// Size of the pieces inputs and outputs are streamed in.
pub const PIECE: usize = 256 << 10;

/// A chunk the master believes out but its agent does not list is lost after this long (the
/// reply carrying it may still be on its way). An ask that comes within it says nothing of the
/// chunk, and one held open then is looked at again when it ends ([`Divisible::next_chunk`]).
/// A chunk rebuilt as out after a restart has none: the reply that carried it went with the
/// old server's connections, so the agent's first ask says whether it holds it.
pub const GRACE: Duration = Duration::from_secs(2);

/// The attempt a chunk's stopping entry names ([`super::stopping`]): a chunk is sent once (a
/// unit planned again goes out in a new chunk), so it has one attempt, 0, as a signal for a
/// chunk names it.
const CHUNK_ATTEMPT: u32 = 0;

/// Chunk `chunk` of job `job` as a task id of this kind, the key of its stopping entry
/// ([`super::stopping`]) and of its `task_stops` row: the job's id (the state's one sequence of
/// every kind) in bits 32 to 55, the chunk's number in bits 0 to 31, as a workflow numbers its
/// instances. `None` past those bounds — a job id above the sequence's last
/// (`state::job_ids::MAX_JOB_ID`: only a divisible job stored before the one sequence, whose id
/// holds the kind in its high byte), or a chunk numbered 2^32 or more —: such a chunk is not
/// waited for.
pub(crate) fn chunk_task(job: u64, chunk: u64) -> Option<u64> {
    (job < 1 << (KIND_SHIFT - 32) && chunk <= u64::from(u32::MAX))
        .then(|| Kind::Divisible.id((job << 32) | chunk))
}

/// The job and chunk that [`chunk_task`] id `task` names.
fn chunk_of_task(task: u64) -> (u64, u64) {
    let n = task & ((1 << KIND_SHIFT) - 1);
    (n >> 32, n & 0xffff_ffff)
}

/// This kind's tables in the main store (created by [`crate::store::Store::open`] with the
/// rest of the schema; a store from before them gains them there).
pub const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS div_jobs(
    id INTEGER PRIMARY KEY, origin TEXT NOT NULL, text TEXT NOT NULL,
    name TEXT NOT NULL DEFAULT '', submission_key TEXT, state TEXT NOT NULL,
    message TEXT NOT NULL DEFAULT '', submitted_ns INTEGER NOT NULL,
    finished_ns INTEGER NOT NULL DEFAULT 0, output_bytes INTEGER NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS div_chunks(
    job INTEGER NOT NULL, chunk INTEGER NOT NULL, round INTEGER NOT NULL, worker TEXT NOT NULL,
    start INTEGER NOT NULL, stop INTEGER NOT NULL, state TEXT NOT NULL,
    transfer_ns INTEGER NOT NULL DEFAULT 0, compute_ns INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY(job, chunk));
CREATE TABLE IF NOT EXISTS div_workers(
    job INTEGER NOT NULL, idx INTEGER NOT NULL, name TEXT NOT NULL, memory_units INTEGER,
    PRIMARY KEY(job, idx));
";

/// Why a divisible-job call was refused.
#[derive(Debug, thiserror::Error)]
pub enum DivError {
    /// The submission is not a runnable divisible job.
    #[error("{0}")]
    Invalid(String),
    /// No such job.
    #[error("{0}")]
    NotFound(String),
    /// Not now (a chunk not out, an output not gathered yet).
    #[error("{0}")]
    NotReady(String),
    /// The store or the disk.
    #[error("divisible jobs: {0}")]
    Internal(String),
}

fn internal(e: impl std::fmt::Display) -> DivError {
    tracing::error!("divisible: {e}");
    DivError::Internal(e.to_string())
}

/// A chunk of a job.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ChunkKey {
    /// Job id.
    pub job_id: u64,
    /// Chunk number.
    pub chunk: u64,
}

/// An agent asking for work (`NextChunk`).
#[derive(Clone, Debug, Default)]
pub struct ChunkRequest {
    /// Node name.
    pub name: String,
    /// Memory it offers, bytes.
    pub memory_bytes: u64,
    /// Random per agent process.
    pub incarnation: String,
    /// Chunks it holds.
    pub holding: Vec<ChunkKey>,
    /// Whether it can take a chunk.
    pub room: bool,
    /// Its node's attributes (with `gpu` where it has accelerators), sorted: set by the state
    /// from the agent's registration, for jobs that `require` some.
    pub attributes: Vec<String>,
    /// Its node is drained (`hetsched node drain`): it gets no new chunk; those it holds finish.
    /// Set by the state.
    pub drained: bool,
    /// How long its agent may still run chunks (an agent started with a `time_limit`, as its
    /// last heartbeat said); `None`: no end. A job whose chunks' `time_limit` is longer gets it
    /// out of its plan, as a drained one. Set by the state.
    pub time_left: Option<std::time::Duration>,
    /// Jobs whose owners are at their cap on cores (`hetsched user limit --max-cores`) and
    /// whose chunk would take another core on this agent: they hand it no chunk now (its
    /// chunks out stay its own). Set by the state.
    pub capped: Vec<u64>,
    /// Its disk is below its agent's `min_free_disk`, as the agent read it for this ask: it
    /// gets no chunk that carries input (its input would find no room), and leaves the plans of
    /// jobs whose chunks do until an ask says it has room again.
    pub disk_short: bool,
}

/// One chunk sent to an agent.
#[derive(Clone, Debug, Default)]
pub struct ChunkOrder {
    /// Job id.
    pub job_id: u64,
    /// Chunk number.
    pub chunk: u64,
    /// Round.
    pub round: u32,
    /// First unit.
    pub start: u64,
    /// One past the last unit.
    pub end: u64,
    /// The command, placeholders not yet replaced.
    pub argv: Vec<String>,
    /// Input bytes to fetch.
    pub input_bytes: u64,
    /// 0 = none.
    pub time_limit_ms: u64,
    /// The section's name.
    pub name: String,
    /// The job's owner, as [`crate::state::types::TaskSpec::run_as`] (filled by the state).
    pub run_as: String,
    /// The job's nonce ([`crate::job_nonces`]; filled by the state).
    pub job_nonce: u64,
}

/// The answer to a [`ChunkRequest`].
#[derive(Clone, Debug, Default)]
pub struct ChunkReply {
    /// At most one chunk.
    pub orders: Vec<ChunkOrder>,
    /// Chunks the agent holds that are not its own any more.
    pub drop: Vec<ChunkKey>,
}

/// A finished chunk as its agent reports it.
#[derive(Clone, Debug, Default)]
pub struct ChunkResult {
    /// Job id.
    pub job_id: u64,
    /// Chunk number.
    pub chunk: u64,
    /// Exit 0 and an output to gather.
    pub success: bool,
    /// Why not.
    pub message: String,
    /// Input transfer, ns (agent-measured).
    pub transfer_ns: u64,
    /// Command run, ns.
    pub compute_ns: u64,
    /// Why it failed, as its agent said (`None`: it succeeded, or nothing can be said).
    pub reason: Option<EndReason>,
}

/// A worker of a divisible job as `hetsched job N` shows it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DivisibleWorker {
    /// Node name.
    pub name: String,
    /// Measured units/s (0: not yet).
    pub speed: f64,
    /// Measured seconds.
    pub compute_latency: f64,
    /// Measured units/s.
    pub bandwidth: f64,
    /// Measured seconds.
    pub network_latency: f64,
    /// Units it may hold (0 = unlimited).
    pub memory_units: u64,
    /// Units finished.
    pub units_done: u64,
    /// Chunks finished.
    pub chunks_done: u32,
    /// Not lost.
    pub alive: bool,
}

/// One chunk as `hetsched job N` shows it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DivisibleChunk {
    /// Number.
    pub chunk: u64,
    /// Round.
    pub round: u32,
    /// Node name.
    pub worker: String,
    /// First unit.
    pub start: u64,
    /// One past the last.
    pub end: u64,
    /// out, done, failed, lost, undelivered, stopped.
    pub state: String,
    /// Why it ended without success ([`EndReason::as_str`]; empty: it did not, or nothing can
    /// be said): see [`ChunkRec::reason_shown`].
    pub reason: String,
    /// Seconds.
    pub transfer_s: f64,
    /// Seconds.
    pub compute_s: f64,
}

/// A divisible job's load, rounds, chunks and measured workers.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DivisibleInfo {
    /// Section name.
    pub name: String,
    /// Planner.
    pub algo: String,
    /// Units.
    pub units: u64,
    /// Units done.
    pub units_done: u64,
    /// `W/ΣS` on the measured speeds, seconds (0: nothing measured).
    pub lower_bound_s: f64,
    /// Why it failed.
    pub message: String,
    /// Workers.
    pub workers: Vec<DivisibleWorker>,
    /// Chunks.
    pub chunks: Vec<DivisibleChunk>,
    /// Gathered output size.
    pub output_bytes: u64,
    /// Rounds.
    pub rounds: u32,
    /// Node attributes a worker needs, sorted.
    pub requires: Vec<String>,
}

/// What a divisible job makes of a job listing's row: its state, its units as tasks, and its
/// [`DivisibleInfo`].
#[derive(Clone, Debug, Default)]
pub struct DivisibleView {
    /// running, completed, failed.
    pub state: String,
    /// Units.
    pub units: u64,
    /// 0 while running.
    pub finished_ns: u64,
    /// Units not yet sent (nor out, done, failed or cancelled).
    pub pending: u64,
    /// Units out.
    pub running: u64,
    /// Units done.
    pub succeeded: u64,
    /// Units not done, of a job that ended, that a chunk ran and failed.
    pub failed: u64,
    /// Units not done, of a job that ended, that no chunk ran to a failure: stopped when their
    /// job was cancelled or failed, or never sent.
    pub cancelled: u64,
    /// The rest.
    pub info: DivisibleInfo,
}

fn argv_of(c: &Command) -> Vec<String> {
    match c {
        Command::Shell(s) => vec!["sh".into(), "-c".into(), s.clone()],
        Command::Argv(v) => v.clone(),
    }
}

/// The one `[[divisible]]` section of a job file that has one, checked for the runtime (one
/// section, no `[[application]]` beside it, the input as long as it must be, some node of
/// `live` with the attributes it `requires` — unless none is alive: then it waits for nodes —
/// and no exclusion `!node:NAME` naming none of the nodes `known`).
/// `Ok(None)`: a batch job file.
pub fn prepare(
    origin: &str,
    text: &str,
    input: &[u8],
    live: &[hetsched_core::model::cluster::Node],
    known: &[String],
) -> Result<Option<Prepared>, DivError> {
    let Ok(w) = parse_workload(origin, text) else {
        // The batch path reports the error with its location.
        return Ok(None);
    };
    if w.divisible.is_empty() {
        return Ok(None);
    }
    if !w.applications.is_empty() || w.divisible.len() > 1 {
        // At the line of the table out of place.
        if let Some(e) = hetsched_core::input::workflow_runtime::mixed_kinds(origin, text) {
            return Err(DivError::Invalid(e.to_string()));
        }
        return Err(DivError::Invalid(format!(
            "{origin}: divisible: a job file holds either [[application]] tables or one [[divisible]] load; submit the others as their own jobs"
        )));
    }
    w.check_excluded_nodes(known)
        .map_err(|e| DivError::Invalid(e.to_string()))?;
    if !live.is_empty() {
        w.check_runnable(live)
            .map_err(|e| DivError::Invalid(e.to_string()))?;
    }
    let d = w.divisible[0].clone();
    let src = hetsched_core::input::Source::new(origin, text);
    d.check_input_len(&src, 0, input.len() as u64)
        .map_err(|e| DivError::Invalid(e.to_string()))?;
    Ok(Some(Prepared {
        spec: d,
        file_name: w.name,
    }))
}

/// A submission [`prepare`] found to be a divisible job.
pub struct Prepared {
    /// The checked `[[divisible]]` section.
    pub spec: DivisibleSpec,
    /// `name =` at the top of the file.
    pub file_name: Option<String>,
}

/// A divisible job's name, as a batch job's: the one given at submission, else the file's
/// `name`, else the file's path.
fn job_name(given: &str, file_name: Option<String>, origin: &str) -> String {
    if given.is_empty() {
        file_name.unwrap_or_else(|| origin.to_string())
    } else {
        given.to_string()
    }
}

/// A purged job's row state.
pub(crate) const PURGED: &str = "purged";

/// Deletes a purged job's files (its input, chunk outputs and gathered output); a failure only
/// leaves disk space taken, so it is logged.
/// Reads a stored divisible job's file as a restart does: its load and the file's name. A
/// restart and `crate::set_aside` (which sets aside only a job this refuses) share it.
pub(crate) fn read_stored(
    origin: &str,
    text: &str,
) -> Result<(DivisibleSpec, Option<String>), hetsched_core::input::InputError> {
    let w = parse_workload(origin, text)?;
    let name = w.name;
    match w.divisible.into_iter().next() {
        Some(spec) => Ok((spec, name)),
        None => Err(hetsched_core::input::InputError {
            origin: origin.to_string(),
            line: None,
            column: None,
            field: None,
            message: "the file has no [[divisible]] section any more".into(),
        }),
    }
}

/// Deletes divisible job `id`'s chunk rows and marks its job row purged (a tombstone: its id
/// and submission key stay taken), inside `tx`: for a job set aside at a start
/// (`crate::set_aside`). A purge ([`JobKind::purge_rows`]) marks the job with [`mark_purged`]
/// and deletes its chunk rows with [`delete_chunk_rows`] in bounded steps
/// (`crate::state::purging`). Its files (under [`job_dir`]) go after the commit, or before it
/// to the set-aside directory.
pub(crate) fn delete_job_rows(tx: &rusqlite::Transaction, id: u64) -> Result<(), StoreError> {
    tx.prepare_cached("DELETE FROM div_chunks WHERE job = ?1")?
        .execute(params![id as i64])?;
    mark_purged(tx, id)
}

/// Marks divisible job `id`'s row purged and deletes its few worker rows, inside `tx`: from
/// then on no reader (a restart, a set-aside record) looks at its chunk rows, deleted yet or
/// not. Its job file gives way to its digest (`store::drop_job_text`): a submission repeating
/// its key is checked against the digest and told the units of the file it sent.
fn mark_purged(tx: &rusqlite::Transaction, id: u64) -> Result<(), StoreError> {
    tx.prepare_cached("DELETE FROM div_workers WHERE job = ?1")?
        .execute(params![id as i64])?;
    tx.prepare_cached("UPDATE div_jobs SET state = ?2 WHERE id = ?1")?
        .execute(params![id as i64, PURGED])?;
    crate::store::drop_job_text(tx, crate::store::JobTable::Divisible, id)?;
    Ok(())
}

/// Deletes divisible job `id`'s chunk rows numbered in `chunks`, inside `tx`.
pub(crate) fn delete_chunk_rows(
    tx: &rusqlite::Transaction,
    id: u64,
    chunks: std::ops::Range<u64>,
) -> Result<u64, StoreError> {
    if chunks.is_empty() {
        return Ok(0);
    }
    let n = tx
        .prepare_cached("DELETE FROM div_chunks WHERE job = ?1 AND chunk >= ?2 AND chunk < ?3")?
        .execute(params![id as i64, chunks.start as i64, chunks.end as i64])?;
    Ok(n as u64)
}

/// Where a deletion of at most `most` of divisible job `id`'s chunk rows numbered in `chunks`
/// ends (`crate::state::purging`): the number of the row after the `most`-th, or `chunks.end`
/// when no more are stored. An index walk of at most `most` entries, inside `tx`.
pub(crate) fn chunk_rows_end(
    tx: &rusqlite::Transaction,
    id: u64,
    chunks: std::ops::Range<u64>,
    most: u64,
) -> Result<u64, StoreError> {
    use rusqlite::OptionalExtension;
    let end: Option<i64> = tx
        .prepare_cached(
            "SELECT chunk FROM div_chunks WHERE job = ?1 AND chunk >= ?2 AND chunk < ?3 \
             ORDER BY chunk LIMIT 1 OFFSET ?4",
        )?
        .query_row(
            params![
                id as i64,
                chunks.start as i64,
                chunks.end as i64,
                most.min(i64::MAX as u64) as i64
            ],
            |r| r.get(0),
        )
        .optional()?;
    Ok(end.map_or(chunks.end, |c| c as u64))
}

fn remove_job_dir(dir: &Path, id: u64) {
    let jd = job_dir(dir, id);
    match std::fs::remove_dir_all(&jd) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => warn!(
            job = id,
            "a purged divisible job's files stay: {}: {e}",
            jd.display()
        ),
    }
}

pub(crate) fn job_dir(dir: &Path, id: u64) -> PathBuf {
    dir.join(format!("job-{id}"))
}

fn write_durably(path: &Path, data: &[u8]) -> std::io::Result<()> {
    let tmp = path.with_extension("tmp");
    let mut f = crate::datadir::create_private(&tmp)?;
    f.write_all(data)?;
    f.sync_all()?;
    std::fs::rename(&tmp, path)?;
    if let Some(parent) = path.parent() {
        std::fs::File::open(parent)?.sync_all()?;
    }
    Ok(())
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ChunkState {
    Out,
    Done,
    Failed,
    Lost,
    /// Never reached its worker: the agent process it was sent to asked again without it (the
    /// reply carrying it was lost, e.g. with a server that crashed after handing it out). Its
    /// units are re-planned, as a lost chunk's, but count no loss.
    Undelivered,
    /// Out when its job ended (cancelled, or failed by another chunk): its agent stops it.
    Stopped,
}

impl ChunkState {
    fn as_str(self) -> &'static str {
        match self {
            ChunkState::Out => "out",
            ChunkState::Done => "done",
            ChunkState::Failed => "failed",
            ChunkState::Lost => "lost",
            ChunkState::Undelivered => "undelivered",
            ChunkState::Stopped => "stopped",
        }
    }
    fn parse(s: &str) -> Self {
        match s {
            "out" => ChunkState::Out,
            "done" => ChunkState::Done,
            "failed" => ChunkState::Failed,
            "stopped" => ChunkState::Stopped,
            "undelivered" => ChunkState::Undelivered,
            _ => ChunkState::Lost,
        }
    }
}

struct ChunkRec {
    order: Order,
    worker: String,
    state: ChunkState,
    transfer_ns: u64,
    compute_ns: u64,
    /// Its place among the job's chunks in the order their successes were recorded (1, 2, …;
    /// 0: not done, or done in a store from before the column). A restart replays the done
    /// chunks' times into the workers' estimates in this order: the estimates weigh recent
    /// chunks most, and an agent computes two chunks at once, so chunks end out of number order.
    done_seq: u64,
    /// The process of its worker's agent it was sent to (`NextChunkRequest.incarnation`; empty
    /// in a store from before the column): an ask of that same process that does not list it
    /// says it never arrived ([`ChunkState::Undelivered`]); another process's, that it was lost
    /// with the agent.
    incarnation: String,
    /// Why a failed chunk failed, as its agent said (`None`: any other state, or not said).
    /// Stored (`div_chunks.reason`): the other states' reasons follow from the state.
    reason: Option<EndReason>,
    /// When it was sent (by this server; a restored chunk: when it was rebuilt), which orders
    /// an agent's chunks ([`Divisible::rebook`]).
    sent: Instant,
    /// Until when an ask of its agent that does not list it says nothing of it ([`GRACE`]);
    /// `None`: no grace (rebuilt after a restart, or never out).
    grace_until: Option<Instant>,
    /// Held asks are woken when its grace ends ([`Divisible::recheck_at`]), once.
    recheck_planned: bool,
}

impl ChunkRec {
    /// The chunk as `hetsched job N` and `hetsched log` show it, of a job whose state is
    /// `job_state`.
    fn shown(&self, job_state: &str) -> DivisibleChunk {
        DivisibleChunk {
            chunk: self.order.chunk,
            round: self.order.round,
            worker: self.worker.clone(),
            start: self.order.start,
            end: self.order.end,
            state: self.state.as_str().into(),
            reason: self
                .reason_shown(job_state)
                .map_or("", EndReason::as_str)
                .into(),
            transfer_s: self.transfer_ns as f64 / 1e9,
            compute_s: self.compute_ns as f64 / 1e9,
        }
    }

    /// Why it ended without success, in the words a batch task's `reason` uses, so that a
    /// script reads one vocabulary: a failed chunk's as its agent said; a lost or undelivered
    /// one's (its units went out again as new chunks) `lost`; one stopped by its job's cancel
    /// `cancelled`. None for one out or done, one stopped because another chunk failed its job
    /// (the job's message says why; nothing went wrong with this one), and a failed one whose
    /// agent did not say (an older agent, with no exit code of its own, or a row stored before
    /// reasons were).
    fn reason_shown(&self, job_state: &str) -> Option<EndReason> {
        match self.state {
            ChunkState::Failed => self.reason,
            ChunkState::Lost | ChunkState::Undelivered => Some(EndReason::Lost),
            ChunkState::Stopped if job_state == "cancelled" => Some(EndReason::Cancelled),
            ChunkState::Out | ChunkState::Done | ChunkState::Stopped => None,
        }
    }
}

struct Job {
    spec: DivisibleSpec,
    argv: Vec<String>,
    master: OnlineMaster,
    /// The job's name: given at submission, else the file's `name`, else its path.
    name: String,
    /// The client's submission key (empty = none), in its owner's namespace.
    key: String,
    /// Who submitted it (a user's name, or [`crate::users::ADMIN`]): whose key `key` is.
    owner: String,
    submitted_ns: u64,
    /// running, completed, failed, cancelled.
    state: String,
    message: String,
    finished_ns: u64,
    output_bytes: u64,
    /// What its submission stored: its file and its input (`max_stored_bytes_per_user`).
    stored_bytes: u64,
    chunks: BTreeMap<u64, ChunkRec>,
    /// The last [`ChunkRec::done_seq`] given.
    done_seq: u64,
    /// The chunks of `chunks` that are out, by number: what every ask, result and event looks
    /// at, so that none scans the finished ones (a job of 100,000 units went out in 9,737
    /// chunks, and each ask scanned them all, twice: O(chunks²)). Kept by [`Job::insert`] and
    /// [`set_chunk`], the only places a chunk's state changes.
    out: BTreeSet<u64>,
    /// What it waits for before it starts (`submit --after`, `--hold`, `--begin`).
    gate: Gate,
}

impl Job {
    /// Records chunk `c` (new, or rebuilt after a restart).
    fn insert(&mut self, c: ChunkRec) {
        let k = c.order.chunk;
        if c.state == ChunkState::Out {
            self.out.insert(k);
        } else {
            self.out.remove(&k);
        }
        self.chunks.insert(k, c);
    }

    /// The chunks out, in number order.
    fn out_chunks(&self) -> impl Iterator<Item = &ChunkRec> {
        self.out.iter().filter_map(|k| self.chunks.get(k))
    }
}

/// What the server knows of an agent that asks for chunks: memory only (a rollback or a
/// restart keeps or rebuilds it, the store never holds it).
#[derive(Clone)]
struct AgentSeen {
    last_seen: Instant,
    incarnation: String,
    memory_bytes: u64,
    /// Its node's attributes at its last ask.
    attributes: Vec<String>,
    /// Asks of this agent held open now ([`Divisible::held`]): while one is, the agent is
    /// present whatever `last_seen` says.
    held: u32,
    /// Whether it has asked since it was noted (false: noted at its node's registration only,
    /// [`Divisible::agent_registered`]).
    asked: bool,
    /// Its last ask said its disk is below its floor ([`ChunkRequest::disk_short`]).
    disk_short: bool,
    /// What the server's stalls during its silence gave it ([`JobKind::server_stalled`]).
    grace: Grace,
}

impl AgentSeen {
    /// Whether the agent counts as alive: an ask held open, or one within the dead timeout
    /// (a stall of the server not counted: [`Grace::silent_from`]).
    fn present(&self, dead_timeout: Duration) -> bool {
        self.held > 0 || self.silent_from().elapsed() < dead_timeout
    }

    /// From when its silence counts: its last call, or later by the server's stalls since.
    fn silent_from(&self) -> Instant {
        self.grace.silent_from(self.last_seen)
    }
}

/// The divisible jobs of one server: the [`Kind::Divisible`] job kind.
pub struct Divisible {
    /// `DATA_DIR/divisible`.
    dir: PathBuf,
    dead_timeout: Duration,
    jobs: BTreeMap<u64, Job>,
    agents: HashMap<String, AgentSeen>,
    /// Jobs whose row changed since the last commit.
    dirty_jobs: BTreeSet<u64>,
    /// Chunks whose row changed since the last commit.
    dirty_chunks: BTreeSet<(u64, u64)>,
    /// Jobs a worker joined (or whose worker's memory changed) since the last commit.
    dirty_workers: BTreeSet<u64>,
    /// Bumped when what decides an agent's next chunk changed — a committed row, a new job, a
    /// job's turn moving to another worker — so that asks held open by
    /// [`crate::divisible_service`] are answered then, not at the next poll.
    changes: super::Changes,
    /// Purged jobs: their rows stay as tombstones (`state = 'purged'`, no chunks) so that their
    /// ids are never given again and their submission keys keep naming them.
    purged: BTreeMap<u64, Tombstone>,
    /// Jobs that may not have started (submitted waiting): looked at instead of every job
    /// after each event (one that started or ended leaves it when next looked at).
    maybe_unstarted: BTreeSet<u64>,
    /// The core each agent computing a chunk holds in the scheduler's view, by agent (node)
    /// name ([`Divisible::rebook`]).
    booked: HashMap<String, Booked>,
    /// Whether an agent computing a chunk waits for its core (every core of its node was
    /// held at the last [`Divisible::rebook`]).
    short: bool,
    /// Running jobs an ask with room got no chunk of because their owner was at its cap on
    /// cores, since held asks were last woken for them ([`Divisible::wake_capped_asks`]).
    capped_asks: BTreeSet<u64>,
    /// Chunks out when their job was cancelled whose processes their agents have not said
    /// ended ([`super::stopping`], keyed by [`chunk_task`]): their jobs are not over for a wait
    /// until none is left.
    stopping: Stopping,
    /// The node of each agent with stopping chunks, by the agent's name: this kind knows agents
    /// by name, the stopping entries and their rows by node.
    stopping_nodes: HashMap<String, u32>,
    /// A cancelled job's last stopping chunk ended since the last commit: its waiters are woken
    /// ([`JobKind::ends_in_event`]).
    stopped_in_event: bool,
}

/// The core an agent computing a chunk holds in the view.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Booked {
    /// The agent's node.
    node: u32,
    /// The group of the job whose chunk it computes (its owner's; `None`: the admin's),
    /// charged with `taken`.
    group: Option<u32>,
    /// 1 once the core was free (0 while the node's cores were all held: it takes it when one
    /// is).
    taken: u32,
}

/// Why job `id` hands out no chunk while its owner is at its cap on cores (`None`: it is not,
/// or has none): in the words the batch kind uses for a capped application.
fn capped_reason(rd: &Read, id: u64) -> Option<String> {
    let group = rd.view.group(rd.users.group(rd.users.owner(id))?);
    group.capped_by(&ONE_CORE)?;
    Some(super::capped_words(
        &group,
        hetsched_core::CappedResource::Cores,
        "work holds",
    ))
}

/// What an agent computing a chunk holds: one core.
pub const ONE_CORE: Resources = Resources::new(1, 0, 0);

/// What is left of a purged job: its submission key (with its owner, whose namespace it is
/// in). Its file is not (the store keeps its digest), so a submission repeating its key is
/// told the units of the file it sent, which is the same file.
#[derive(Clone, Debug)]
struct Tombstone {
    key: String,
    owner: String,
}

/// One stored job with its chunks, as [`load`] reads them.
pub struct StoredJob {
    id: u64,
    origin: String,
    text: String,
    name: String,
    key: String,
    owner: String,
    state: String,
    message: String,
    submitted_ns: u64,
    finished_ns: u64,
    output_bytes: u64,
    chunks: Vec<ChunkRow>,
    /// Its workers in the order they joined: name and the units its memory holds (`None`: no
    /// limit). Empty in a store from before the table: the chunks' workers are taken then.
    workers: Vec<(String, Option<u64>)>,
    gate: Gate,
    /// Its stopping chunks' `task_stops` rows: chunk, attempt and node.
    stops: Vec<(u64, u32, u32)>,
}

/// A stored chunk: number, round, worker, start, end, state, transfer ns, compute ns,
/// [`ChunkRec::done_seq`], [`ChunkRec::incarnation`] and [`ChunkRec::reason`] as stored.
type ChunkRow = (
    u64,
    u32,
    String,
    u64,
    u64,
    String,
    u64,
    u64,
    u64,
    String,
    Option<String>,
);

/// Reads this kind's rows from the store (at start and for a rollback).
pub fn load(conn: &Connection) -> Result<Vec<StoredJob>, StoreError> {
    let mut st = conn.prepare(
        "SELECT id, origin, text, name, COALESCE(submission_key, ''), state, message, submitted_ns, \
         finished_ns, output_bytes, after, after_any, after_notok, held, begin_ms, started, owner \
         FROM div_jobs ORDER BY id",
    )?;
    let list = |s: String| crate::store::parse_list(&s, "job ids");
    let mut jobs: Vec<StoredJob> = st
        .query_map([], |r| {
            let begin_ms = r.get::<_, i64>(14)? as u64;
            Ok(StoredJob {
                id: r.get::<_, i64>(0)? as u64,
                origin: r.get(1)?,
                text: r.get(2)?,
                name: r.get(3)?,
                key: r.get(4)?,
                owner: r.get(16)?,
                state: r.get(5)?,
                message: r.get(6)?,
                submitted_ns: r.get::<_, i64>(7)? as u64,
                finished_ns: r.get::<_, i64>(8)? as u64,
                output_bytes: r.get::<_, i64>(9)? as u64,
                chunks: Vec::new(),
                workers: Vec::new(),
                stops: Vec::new(),
                gate: Gate {
                    after: list(r.get(10)?).unwrap_or_default(),
                    after_any: list(r.get(11)?).unwrap_or_default(),
                    after_notok: list(r.get(12)?).unwrap_or_default(),
                    held: r.get::<_, i64>(13)? != 0,
                    begin_ms: (begin_ms > 0).then_some(begin_ms),
                    started: r.get::<_, i64>(15)? != 0,
                    waiting_for: None,
                },
            })
        })?
        .collect::<Result<_, _>>()?;
    let mut st = conn.prepare(
        "SELECT chunk, round, worker, start, stop, state, transfer_ns, compute_ns, done_seq, \
         incarnation, reason FROM div_chunks WHERE job = ?1 ORDER BY chunk",
    )?;
    // A purged job's chunk rows may still wait for the purger (`crate::state::purging`): not
    // read, as its tombstone needs none.
    for j in jobs.iter_mut().filter(|j| j.state != PURGED) {
        j.chunks = st
            .query_map([j.id as i64], |r| {
                Ok((
                    r.get::<_, i64>(0)? as u64,
                    r.get(1)?,
                    r.get(2)?,
                    r.get::<_, i64>(3)? as u64,
                    r.get::<_, i64>(4)? as u64,
                    r.get(5)?,
                    r.get::<_, i64>(6)? as u64,
                    r.get::<_, i64>(7)? as u64,
                    r.get::<_, i64>(8)? as u64,
                    r.get(9)?,
                    r.get(10)?,
                ))
            })?
            .collect::<Result<_, _>>()?;
    }
    let mut st =
        conn.prepare("SELECT name, memory_units FROM div_workers WHERE job = ?1 ORDER BY idx")?;
    for j in &mut jobs {
        j.workers = st
            .query_map([j.id as i64], |r| {
                Ok((r.get(0)?, r.get::<_, Option<i64>>(1)?.map(|u| u as u64)))
            })?
            .collect::<Result<_, _>>()?;
    }
    // Its stopping chunks' rows, with each job (a job row is never deleted, only marked
    // purged, so every row this kind wrote has its job).
    let index: HashMap<u64, usize> = jobs.iter().enumerate().map(|(i, j)| (j.id, i)).collect();
    for (task, attempt, node) in crate::store::task_stops(conn)? {
        if Kind::of(task) != Some(Kind::Divisible) {
            continue; // another kind's
        }
        let (job, chunk) = chunk_of_task(task);
        if let Some(&i) = index.get(&job) {
            jobs[i].stops.push((chunk, attempt, node));
        }
    }
    Ok(jobs)
}

fn memory_units(spec: &DivisibleSpec, memory_bytes: u64) -> Option<u64> {
    match spec.memory_per_unit {
        Some(m) if memory_bytes > 0 => Some(memory_bytes / m.as_u64().max(1)),
        _ => None,
    }
}

/// Whether an agent of `memory_bytes` can hold one unit of `spec`'s load (`memory_per_unit`):
/// one that cannot takes none of its chunks.
fn holds_a_unit(spec: &DivisibleSpec, memory_bytes: u64) -> bool {
    memory_units(spec, memory_bytes) != Some(0)
}

fn new_job(
    spec: DivisibleSpec,
    name: String,
    (key, owner): (String, String),
    submitted_ns: u64,
) -> Job {
    let master = OnlineMaster::new(OnlineConfig {
        algo: spec.algo(),
        units: spec.units(),
        retries: spec.retries(),
    });
    Job {
        argv: argv_of(spec.command.get_ref()),
        spec,
        master,
        name,
        key,
        owner,
        submitted_ns,
        state: "running".into(),
        message: String::new(),
        finished_ns: 0,
        output_bytes: 0,
        stored_bytes: 0,
        chunks: BTreeMap::new(),
        done_seq: 0,
        out: BTreeSet::new(),
        gate: Gate::started(),
    }
}

/// A fresh temporary file for a chunk's output, in the job's directory under `dir`
/// (`DATA_DIR/divisible`).
pub fn temp_output(dir: &Path, h: &ChunkResult) -> PathBuf {
    job_dir(dir, h.job_id).join(format!(
        "chunk-{}.{:016x}.part",
        h.chunk,
        rand::random::<u64>()
    ))
}

impl Divisible {
    /// Rebuilds the kind from its stored rows; files are under `dir` (`DATA_DIR/divisible`).
    /// A cancelled job's chunks still stopping when the server stopped stay so if their node
    /// (in `nodes`, rebuilt already) may come back: its agent's first ask says whether their
    /// processes still run.
    ///
    /// # Errors
    /// [`StateError::StoredJobUnreadable`] when a job's file (not purged) no longer reads under
    /// this version: the server does not start rather than lose the job, as for batch jobs.
    pub fn restore(
        dir: PathBuf,
        dead_timeout: Duration,
        rows: Vec<StoredJob>,
        nodes: &Nodes,
    ) -> Result<Self, StateError> {
        let mut d = Divisible {
            dir,
            dead_timeout,
            jobs: BTreeMap::new(),
            agents: HashMap::new(),
            dirty_jobs: BTreeSet::new(),
            dirty_chunks: BTreeSet::new(),
            dirty_workers: BTreeSet::new(),
            changes: super::Changes::default(),
            purged: BTreeMap::new(),
            maybe_unstarted: BTreeSet::new(),
            booked: HashMap::new(),
            short: false,
            capped_asks: BTreeSet::new(),
            stopping: Stopping::default(),
            stopping_nodes: HashMap::new(),
            stopped_in_event: false,
        };
        for row in rows {
            if row.state == PURGED {
                // (A job set aside at a start leaves its stopping rows.)
                for &(chunk, _, _) in &row.stops {
                    if let Some(task) = chunk_task(row.id, chunk) {
                        d.stopping.drop_stored(task);
                    }
                }
                d.purged.insert(
                    row.id,
                    Tombstone {
                        key: row.key,
                        owner: row.owner,
                    },
                );
                // The purge committed before its files went: a crash in between left them.
                remove_job_dir(&d.dir, row.id);
                continue;
            }
            let (spec, file_name) = read_stored(&row.origin, &row.text)
                .map_err(|error| StateError::StoredJobUnreadable { job: row.id, error })?;
            // Rows stored before names were resolved at submission hold an empty name.
            let name = job_name(&row.name, file_name, &row.origin);
            let input = if spec.input.is_some() {
                spec.input_bytes()
            } else {
                0
            };
            let mut job = new_job(spec, name, (row.key, row.owner), row.submitted_ns);
            job.stored_bytes = (row.text.len() as u64).saturating_add(input);
            job.state = row.state;
            job.message = row.message;
            job.finished_ns = row.finished_ns;
            job.output_bytes = row.output_bytes;
            job.gate = row.gate;
            if !job.gate.started {
                d.maybe_unstarted.insert(row.id);
            }
            // The workers in the order they joined, each with its memory, as listings showed
            // them: a worker that never got a chunk is one of them too.
            for (worker, memory_units) in &row.workers {
                job.master.join(worker, *memory_units);
            }
            // Done chunks are replayed once the rest is rebuilt, in the order they ended.
            let mut done = Vec::new();
            for (chunk, round, worker, start, end, state, t, c, seq, incarnation, reason) in
                row.chunks
            {
                // (A stored worker keeps its memory; a chunk's worker missing from the stored
                // ones — a store from before the table — joins in chunk order, as before it.)
                let w = match job.master.workers().iter().position(|w| w.name == worker) {
                    Some(w) => w,
                    None => job.master.join(&worker, None),
                };
                let order = Order {
                    chunk,
                    worker: w,
                    round,
                    start,
                    end,
                };
                let state = ChunkState::parse(&state);
                match state {
                    ChunkState::Done => done.push((seq, order, t, c)),
                    ChunkState::Out => job.master.restore_out(order),
                    // A failed chunk's units count its failure again: a restart does not give
                    // them their `retries` afresh.
                    ChunkState::Failed => job.master.restore_failed(order),
                    // Lost, undelivered and stopped chunks' units are in the pool; such a chunk
                    // still takes its number, and a lost one's units count the loss again (a
                    // restart does not give them their losses afresh).
                    ChunkState::Lost => job.master.restore_lost(order),
                    ChunkState::Undelivered | ChunkState::Stopped => {
                        job.master.restore_stopped(order)
                    }
                }
                job.insert(ChunkRec {
                    order,
                    worker,
                    state,
                    transfer_ns: t,
                    compute_ns: c,
                    done_seq: seq,
                    incarnation,
                    // A name a later version stored reads as none.
                    reason: reason.as_deref().and_then(EndReason::from_name),
                    sent: Instant::now(),
                    // Sent by the server before this one: the reply that carried it reached
                    // its agent or died with the old server's connections, so the agent's
                    // first ask says whether it holds it. (A grace from now would leave an
                    // agent restarted meanwhile, whose ask lists nothing and is held for
                    // minutes, holding a chunk it does not have.)
                    grace_until: None,
                    recheck_planned: false,
                });
            }
            // Chunks done before the column (sequence 0) first, in number order, as before it.
            done.sort_by_key(|(seq, order, _, _)| (*seq, order.chunk));
            for (seq, order, t, c) in done {
                job.master
                    .restore_done(order, t as f64 / 1e9, c as f64 / 1e9);
                job.done_seq = job.done_seq.max(seq);
            }
            for (chunk, attempt, node) in row.stops {
                let Some(task) = chunk_task(row.id, chunk) else {
                    continue;
                };
                // Still stopping if the job is cancelled with the chunk stopped, and its
                // agent's node may come back; else nothing will say more of it.
                let worker = job
                    .chunks
                    .get(&chunk)
                    .filter(|c| c.state == ChunkState::Stopped && job.state == "cancelled")
                    .map(|c| c.worker.as_str());
                let live = nodes.get(node).is_some_and(|r| {
                    (r.alive || r.kept_out_awaiting_return)
                        && !r.removed
                        && Some(r.spec.name.as_str()) == worker
                });
                match worker {
                    Some(worker) if live && attempt == CHUNK_ATTEMPT => {
                        d.stopping.restore(node, task, attempt, row.id);
                        d.stopping_nodes.insert(worker.to_string(), node);
                    }
                    _ => d.stopping.drop_stored(task),
                }
            }
            d.jobs.insert(row.id, job);
        }
        let now = Instant::now();
        // Every worker of a running job's rebuilt master — those that held chunks and those
        // that held none at that moment (between two rounds, or calibrating) — gets a dead
        // timeout to come back before it is taken for gone and its chunks move. Before, one that
        // held nothing was lost at once: the first agent to ask after the restart was planned
        // the whole rest of the load (UMRLM had planned one round), and the others joined only
        // for a round that never came: twice the makespan. (Not the workers of a finished job:
        // its record stays as it ended.)
        let names: HashSet<String> = d
            .jobs
            .values()
            .filter(|j| j.state == "running")
            .flat_map(|j| j.master.workers().iter().map(|w| w.name.clone()))
            .chain(
                d.jobs
                    .values()
                    .flat_map(Job::out_chunks)
                    .map(|c| c.worker.clone()),
            )
            .collect();
        for name in names {
            d.agents.insert(
                name,
                AgentSeen {
                    last_seen: now,
                    incarnation: String::new(),
                    memory_bytes: 0,
                    attributes: Vec::new(),
                    held: 0,
                    // Reaped if silent, as one that asked: it held chunks before the restart.
                    asked: true,
                    disk_short: false,
                    grace: Grace::default(),
                },
            );
        }
        Ok(d)
    }

    /// After a rollback: keeps what the store does not hold (the agents' liveness and when each
    /// chunk still out was sent, with its grace: the server did not restart, so a reply carrying
    /// it may still be on its way).
    pub fn carry_over(&mut self, old: &Divisible) {
        // Asks held open wait on the old channel: keep it, and wake them to ask the rebuilt kind.
        self.changes = old.changes.clone();
        self.changes.bump();
        for (name, a) in &old.agents {
            self.agents.insert(name.clone(), a.clone());
        }
        for (id, job) in &mut self.jobs {
            let Some(oj) = old.jobs.get(id) else { continue };
            for (k, c) in &mut job.chunks {
                if let Some(oc) = oj.chunks.get(k) {
                    c.sent = oc.sent;
                    c.grace_until = oc.grace_until;
                    c.recheck_planned = oc.recheck_planned;
                }
            }
        }
    }

    /// How often the chunk service looks again at an ask with room it holds open while it has
    /// nothing to hand out (and how long it holds an ask that did not say how long it may
    /// wait): [`super::look_period`].
    pub fn hold(&self) -> Duration {
        super::look_period(self.dead_timeout)
    }

    /// A receiver that sees every later change (see [`Divisible::changes`]'s field).
    pub fn changes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.changes.subscribe()
    }

    fn changed(&self) {
        self.changes.bump();
    }

    /// Wakes the asks held open because something outside the kind changed what an ask may
    /// get (a node resumed from a drain): an idle agent's ask is held for minutes.
    pub fn wake_asks(&self) {
        self.changed();
    }

    /// Wakes the asks held open if a job an ask got nothing of for its owner's cap has room
    /// now (`has_room(job)`: its owner's cores freed outside this kind, as a batch task ended
    /// or the cap was raised). Costs nothing while no ask met a cap.
    pub fn wake_capped_asks(&mut self, mut has_room: impl FnMut(u64) -> bool) {
        if self.capped_asks.is_empty() {
            return;
        }
        let jobs = &self.jobs;
        self.capped_asks
            .retain(|id| jobs.get(id).is_some_and(|j| j.state == "running"));
        if self.capped_asks.iter().any(|&id| has_room(id)) {
            self.capped_asks.clear();
            self.changed();
        }
    }

    /// Whether job `id` is a divisible job.
    pub fn knows(&self, id: u64) -> bool {
        self.jobs.contains_key(&id)
    }

    /// A submission with a `[[divisible]]` section (`spec`, checked by [`prepare`]) and its input:
    /// the input is written and synced, then the job row is stored in one transaction, and only
    /// then does memory change. A key the store already holds returns that job.
    pub fn submit(
        &mut self,
        cx: &mut Ctx,
        sub: Submission,
        prepared: Prepared,
        id: u64,
    ) -> Result<Submitted, StateError> {
        let Prepared { spec, file_name } = prepared;
        let name = job_name(&sub.name, file_name, &sub.origin);
        // As a batch task no node could hold: with agents that could take its chunks, none of
        // which can hold one unit, it is refused (it would wait for ever).
        let takers: Vec<u64> = self
            .agents
            .iter()
            .filter(|(n, a)| {
                a.present(self.dead_timeout) && a.memory_bytes > 0 && spec.admits(n, &a.attributes)
            })
            .map(|(_, a)| a.memory_bytes)
            .collect();
        if let (Some(per_unit), Some(&most)) = (spec.memory_per_unit, takers.iter().max())
            && !takers.iter().any(|&m| holds_a_unit(&spec, m))
        {
            // Where the field is (the spec keeps its value, not its place).
            let at = sub
                .text
                .lines()
                .position(|l| {
                    l.trim_start()
                        .strip_prefix("memory_per_unit")
                        .is_some_and(|r| r.trim_start().starts_with('='))
                })
                .map_or(String::new(), |i| {
                    let col = sub
                        .text
                        .lines()
                        .nth(i)
                        .map_or(0, |l| l.len() - l.trim_start().len());
                    format!("{}:{}:", i + 1, col + 1)
                });
            return Err(StateError::Invalid(format!(
                "{}:{at} divisible[0].memory_per_unit: one unit needs {per_unit}, more than any \
                 live agent that could take its chunks has (the most: {})",
                sub.origin,
                bytesize::ByteSize(most)
            )));
        }
        // Keys are a namespace per owner: another owner's job under the same key is not this
        // submission's.
        if !sub.key.is_empty() {
            let live = self
                .jobs
                .iter()
                .find(|(_, j)| j.key == sub.key && j.owner == sub.owner)
                .map(|(&id, j)| (id, j.spec.units()));
            let purged = || {
                self.purged
                    .iter()
                    .find(|(_, t)| t.key == sub.key && t.owner == sub.owner)
                    .map(|(&id, _)| (id, spec.units()))
            };
            if let Some((id, units)) = live.or_else(purged) {
                // The same key with another file is not a retry, as for a batch job: refused.
                let stored: Option<String> = cx
                    .store
                    .conn()
                    .query_row(
                        "SELECT text FROM div_jobs WHERE id = ?1",
                        params![id as i64],
                        |r| r.get(0),
                    )
                    .ok();
                if stored.is_some_and(|t| !crate::store::is_same_file(&t, &sub.text)) {
                    return Err(StateError::Invalid(format!(
                        "submission key `{}` already names job {id}, submitted with another file",
                        hetsched_core::text::clip(&sub.key)
                    )));
                }
                return Ok(Submitted {
                    job_id: id,
                    tasks: units,
                    existing: true,
                    kind: Kind::Divisible,
                });
            }
        }
        // Counted against its owner's `max_unfinished_tasks_per_user` (a new job only: the
        // same key above returns the stored one).
        if let Some(room) = &sub.task_room {
            room.check_divisible(&sub.origin)
                .map_err(StateError::Invalid)?;
        }
        // The state's next job id (one sequence across kinds).
        let jd = job_dir(&self.dir, id);
        // 0700, both (0755 before): the data directory's directories are private.
        for d in [&self.dir, &jd] {
            crate::datadir::create_private_dir(d)
                .map_err(|e| StateError::Divisible(internal(format!("{}: {e}", d.display()))))?;
        }
        let mut input_stored = 0;
        if spec.input.is_some() {
            let need = spec.input_bytes() as usize;
            let input = &sub.divisible_input;
            let kept = &input[..need.min(input.len())];
            write_durably(&jd.join("input"), kept)
                .map_err(|e| StateError::Divisible(internal(e)))?;
            input_stored = kept.len() as u64;
        }
        let submitted = cx.now;
        let key = (!sub.key.is_empty()).then_some(sub.key.clone());
        // The state checked the jobs it runs after (it knows every kind's) and the begin time.
        let gate = Gate::of(&sub);
        let g = &gate;
        cx.store.transaction(|tx| {
            tx.execute(
                "INSERT INTO div_jobs(id, origin, text, name, submission_key, state, submitted_ns, \
                 after, after_any, after_notok, held, begin_ms, started, owner) \
                 VALUES (?1, ?2, ?3, ?4, ?5, 'running', ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)",
                params![
                    id as i64,
                    sub.origin,
                    sub.text,
                    name,
                    key,
                    submitted as i64,
                    crate::store::list_text(&g.after),
                    crate::store::list_text(&g.after_any),
                    crate::store::list_text(&g.after_notok),
                    i64::from(g.held),
                    g.begin_ms.unwrap_or(0) as i64,
                    i64::from(g.started),
                    sub.owner
                ],
            )?;
            Ok(())
        })?;
        let mut job = new_job(spec, name, (sub.key, sub.owner), submitted);
        job.stored_bytes = (sub.text.len() as u64).saturating_add(input_stored);
        if !gate.started {
            self.maybe_unstarted.insert(id);
        }
        job.gate = gate;
        let mut live: Vec<(String, u64)> = self
            .agents
            .iter()
            .filter(|(n, a)| {
                a.present(self.dead_timeout)
                    && a.memory_bytes > 0
                    && job.spec.admits(n, &a.attributes)
                    && holds_a_unit(&job.spec, a.memory_bytes)
            })
            .map(|(n, a)| (n.clone(), a.memory_bytes))
            .collect();
        live.sort();
        for (name, mem) in live {
            let units = memory_units(&job.spec, mem);
            job.master.join(&name, units);
        }
        self.dirty_workers.insert(id);
        info!(job = id, units = job.spec.units(), algo = %job.spec.algo(), "divisible job accepted");
        let job_units = job.spec.units();
        self.jobs.insert(id, job);
        self.changed();
        Ok(Submitted {
            job_id: id,
            tasks: job_units,
            existing: false,
            kind: Kind::Divisible,
        })
    }

    /// Notes that agent `req.name` called (while the store refuses writes nothing else is done,
    /// but a live agent must not be declared lost meanwhile).
    pub fn seen(&mut self, req: &ChunkRequest) {
        if let Some(a) = self.agents.get_mut(&req.name) {
            a.last_seen = Instant::now();
        }
    }

    /// An ask of agent `name` held open by the chunk service began (`open`) or ended: while one
    /// is open the agent is present without calling again, and its silence is counted from the
    /// end of the last one (the call ends when answered, or when its connection closes).
    pub fn held(&mut self, name: &str, open: bool) {
        if let Some(a) = self.agents.get_mut(name) {
            if open {
                a.held += 1;
            } else {
                a.held = a.held.saturating_sub(1);
                a.last_seen = Instant::now();
            }
        }
    }

    /// Agent `name` registered its node (memory and attributes as registered): it is a live
    /// worker from now on, before its first ask, so that a job submitted in between plans for
    /// it too. (Its asks are refused until it has registered: the server checks the node's
    /// identity.) An agent already seen keeps what its asks said, its incarnation included.
    pub fn agent_registered(&mut self, name: &str, memory_bytes: u64, attributes: Vec<String>) {
        let a = self.agents.entry(name.to_string()).or_insert(AgentSeen {
            last_seen: Instant::now(),
            incarnation: String::new(),
            memory_bytes,
            attributes,
            held: 0,
            asked: false,
            disk_short: false,
            grace: Grace::default(),
        });
        a.last_seen = Instant::now();
    }

    /// `NextChunk`: notes the agent, reconciles what it holds, and, when it has room, hands it
    /// the next chunk some running job planned for it.
    pub fn next_chunk(&mut self, req: ChunkRequest) -> Result<ChunkReply, DivError> {
        let name = req.name.clone();
        let now = Instant::now();
        let restarted = match self.agents.get(&name) {
            Some(a) => !a.incarnation.is_empty() && a.incarnation != req.incarnation,
            None => false,
        };
        let held = self.agents.get(&name).map_or(0, |a| a.held);
        self.agents.insert(
            name.clone(),
            AgentSeen {
                last_seen: now,
                incarnation: req.incarnation.clone(),
                memory_bytes: req.memory_bytes,
                attributes: req.attributes.clone(),
                held,
                asked: true,
                disk_short: req.disk_short,
                // Heard now: the stalls before are past.
                grace: Grace::default(),
            },
        );
        let holding: HashSet<(u64, u64)> =
            req.holding.iter().map(|k| (k.job_id, k.chunk)).collect();
        if let Some(&node) = self.stopping_nodes.get(&name) {
            self.settle_stopping(&name, node, &holding, now);
        }
        let mut reply = ChunkReply::default();
        let turns_before = self.turns();
        // Chunks it holds that are not its own any more.
        for k in &req.holding {
            let mine = self.jobs.get(&k.job_id).is_some_and(|j| {
                j.state == "running"
                    && j.chunks
                        .get(&k.chunk)
                        .is_some_and(|c| c.state == ChunkState::Out && c.worker == name)
            });
            if !mine {
                reply.drop.push(*k);
            }
        }
        let mut orders = Vec::new();
        let mut recheck = Vec::new();
        for (&id, job) in self.jobs.iter_mut() {
            // (One that waits to start hands out nothing yet.)
            if job.state != "running" || !job.gate.started {
                continue;
            }
            if req.drained || job.spec.outlasts(req.time_left) {
                // No new work on a drained node, nor chunks that might outlast its agent; its
                // chunks out stay its own.
                if let Some(w) = job.master.workers().iter().position(|w| w.name == name) {
                    job.master.retire(w);
                }
                continue;
            }
            if !job.spec.admits(&name, &req.attributes)
                || !holds_a_unit(&job.spec, req.memory_bytes)
            {
                // Not a worker of this job (it lacks an attribute, or cannot hold one unit); one
                // that was (its node lost an attribute when its agent re-registered) leaves the
                // plan, its chunks planned again elsewhere.
                leave_plan(&mut self.dirty_chunks, &mut self.dirty_jobs, id, job, &name);
                continue;
            }
            // Its disk is below its floor: its chunks out are reconciled below, but it does not
            // join the plan of a job whose chunks carry input, nor get one of them.
            let short = req.disk_short && job.spec.unit_bytes() > 0;
            let units = memory_units(&job.spec, req.memory_bytes);
            let known = job
                .master
                .workers()
                .iter()
                .any(|w| w.name == name && w.memory_units == units);
            let w = (!short).then(|| job.master.join(&name, units));
            if !known && !short {
                self.dirty_workers.insert(id);
            }
            // Reconcile: chunks out on this agent that it does not hold are lost — unless the
            // reply carrying one may still be on its way (its grace).
            let unlisted = |c: &ChunkRec| {
                c.state == ChunkState::Out
                    && c.worker == name
                    && !holding.contains(&(id, c.order.chunk))
            };
            // (Out chunks only: a job's finished chunks are never looked at by an ask.)
            let lost: Vec<u64> = job
                .out_chunks()
                .filter(|c| {
                    c.worker == name
                        && (restarted || (unlisted(c) && c.grace_until.is_none_or(|g| now >= g)))
                })
                .map(|c| c.order.chunk)
                .collect();
            // The others this ask does not list are judged when their grace ends: this ask may
            // be held open (an agent listing nothing is held for minutes) and nothing else need
            // change meanwhile, so held asks are woken then to look again.
            for k in &job.out {
                let Some(c) = job.chunks.get_mut(k) else {
                    continue;
                };
                if let Some(g) = c.grace_until
                    && now < g
                    && !c.recheck_planned
                    && unlisted(c)
                {
                    c.recheck_planned = true;
                    recheck.push(g);
                }
            }
            for chunk in lost {
                // Sent to this very process, which asks without it: it never arrived, and
                // nothing of it ran. Counted as a loss it would let a server that crashed after
                // handing units out (three times) fail the job as if they took agents down.
                let undelivered = job
                    .chunks
                    .get(&chunk)
                    .is_some_and(|c| !c.incarnation.is_empty() && c.incarnation == req.incarnation);
                if undelivered {
                    if job.master.return_chunk(chunk) == Recorded::Yes {
                        warn!(job = id, chunk, node = %name, "chunk undelivered: the agent it was sent to never got it; its units are re-planned");
                        set_chunk(
                            &mut self.dirty_chunks,
                            id,
                            job,
                            chunk,
                            ChunkState::Undelivered,
                            0,
                            0,
                        );
                    }
                } else if job.master.lose_chunk(chunk) == Recorded::Yes {
                    warn!(job = id, chunk, node = %name, "chunk lost: its agent no longer holds it; its units are re-planned");
                    set_chunk(
                        &mut self.dirty_chunks,
                        id,
                        job,
                        chunk,
                        ChunkState::Lost,
                        0,
                        0,
                    );
                }
            }
            // A loss that took some unit to its limit fails the job (its chunks out stopped).
            fail_if_the_master_failed(&mut self.dirty_chunks, &mut self.dirty_jobs, id, job);
            if job.state != "running" {
                continue;
            }
            if short {
                // Out of the plan (as a drained node): its turns go to the others, once, not
                // at every ask (`retire` of a retired worker changes nothing).
                if let Some(w) = job.master.workers().iter().position(|w| w.name == name) {
                    job.master.retire(w);
                }
                continue;
            }
            if req.room && orders.is_empty() && req.capped.contains(&id) {
                // Its owner's cores may free outside this kind: held asks are woken then.
                self.capped_asks.insert(id);
            }
            if req.room
                && orders.is_empty()
                && !req.capped.contains(&id)
                && let Some(w) = w
                && let Some(o) = job.master.next(w)
            {
                job.insert(ChunkRec {
                    order: o,
                    worker: name.clone(),
                    state: ChunkState::Out,
                    transfer_ns: 0,
                    compute_ns: 0,
                    done_seq: 0,
                    incarnation: req.incarnation.clone(),
                    reason: None,
                    sent: now,
                    grace_until: Some(now + GRACE),
                    recheck_planned: false,
                });
                self.dirty_chunks.insert((id, o.chunk));
                orders.push(ChunkOrder {
                    job_id: id,
                    chunk: o.chunk,
                    round: o.round,
                    start: o.start,
                    end: o.end,
                    argv: job.argv.clone(),
                    input_bytes: (o.end - o.start) * job.spec.unit_bytes(),
                    time_limit_ms: job.spec.time_limit.map_or(0, |d| d.0 / 1_000_000),
                    name: job.spec.name.get_ref().clone(),
                    run_as: String::new(),
                    job_nonce: 0,
                });
            }
        }
        reply.orders = orders;
        if self.turns() != turns_before {
            // This ask made or replaced a plan: another worker's held ask may now be served.
            self.changed();
        }
        for at in recheck {
            self.recheck_at(at);
        }
        Ok(reply)
    }

    /// An ask of agent `name` (of node `node`), which has stopping chunks, lists `holding`: the
    /// stopping chunks it does not list have no process left (the agent lists a chunk it was
    /// told to drop until its process has ended) — but one still in its grace, whose reply may
    /// still be on its way, as a chunk believed out is ([`GRACE`]): judged when the grace ends.
    fn settle_stopping(
        &mut self,
        name: &str,
        node: u32,
        holding: &HashSet<(u64, u64)>,
        now: Instant,
    ) {
        let mut listed: HashSet<(u64, u32)> = holding
            .iter()
            .filter_map(|&(job, chunk)| chunk_task(job, chunk))
            .map(|task| (task, CHUNK_ATTEMPT))
            .collect();
        let mut recheck = Vec::new();
        for (task, attempt, _) in self.stopping.on(node) {
            if listed.contains(&(task, attempt)) {
                continue;
            }
            let (job, chunk) = chunk_of_task(task);
            let Some(c) = self
                .jobs
                .get_mut(&job)
                .and_then(|j| j.chunks.get_mut(&chunk))
            else {
                continue;
            };
            if let Some(g) = c.grace_until
                && now < g
            {
                listed.insert((task, attempt));
                if !c.recheck_planned {
                    c.recheck_planned = true;
                    recheck.push(g);
                }
            }
        }
        for job in self.stopping.beat(node, &listed) {
            self.stopped(job);
        }
        if !self.stopping.on_node(node) {
            self.stopping_nodes.remove(name);
        }
        for at in recheck {
            self.recheck_at(at);
        }
    }

    /// Chunk `chunk` of job `job` reported its result: if it was stopping, its process ended.
    fn result_came(&mut self, job: u64, chunk: u64) {
        if self.stopping.is_empty() {
            return;
        }
        let Some(worker) = self
            .jobs
            .get(&job)
            .and_then(|j| j.chunks.get(&chunk))
            .filter(|c| c.state == ChunkState::Stopped)
            .map(|c| c.worker.clone())
        else {
            return;
        };
        let (Some(&node), Some(task)) = (self.stopping_nodes.get(&worker), chunk_task(job, chunk))
        else {
            return;
        };
        if let Some(ended) = self.stopping.ended(node, task, CHUNK_ATTEMPT) {
            self.stopped(ended);
        }
        if !self.stopping.on_node(node) {
            self.stopping_nodes.remove(&worker);
        }
    }

    /// The last of job `job`'s stopping chunks ended: if it has ended (it was cancelled), it is
    /// over now, and the clients waiting on it are woken after the commit.
    fn stopped(&mut self, job: u64) {
        if self.jobs.get(&job).is_some_and(|j| j.state != "running") {
            self.stopped_in_event = true;
        }
    }

    /// Wakes every ask held open at `at` (when a chunk's grace ends), so each looks again and
    /// one whose agent does not list the chunk declares it lost then: without this, an agent
    /// holding no chunk would have its ask held for minutes ([`crate::divisible_service`]) while
    /// the server believed a chunk out on it. Outside a Tokio runtime (the state driven by hand)
    /// nothing holds an ask open, and nothing is planned.
    fn recheck_at(&self, at: Instant) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let changes = self.changes.clone();
        runtime.spawn(async move {
            tokio::time::sleep_until(at.into()).await;
            changes.bump();
        });
    }

    /// Whose turn it is in each running job.
    fn turns(&self) -> Vec<(u64, Option<usize>)> {
        self.jobs
            .iter()
            .filter(|(_, j)| j.state == "running")
            .map(|(&id, j)| (id, j.master.turn()))
            .collect()
    }

    /// Where chunk `key`'s input is: the job's input file, offset and length — if the chunk is
    /// out.
    pub fn input_slice(&self, key: &ChunkKey) -> Result<(PathBuf, u64, u64), DivError> {
        let job = self
            .jobs
            .get(&key.job_id)
            .ok_or_else(|| DivError::NotFound(format!("no divisible job {}", key.job_id)))?;
        let c = job
            .chunks
            .get(&key.chunk)
            .filter(|c| c.state == ChunkState::Out)
            .ok_or_else(|| DivError::NotReady(format!("chunk {} is not out", key.chunk)))?;
        let ub = job.spec.unit_bytes();
        Ok((
            job_dir(&self.dir, key.job_id).join("input"),
            c.order.start * ub,
            (c.order.end - c.order.start) * ub,
        ))
    }

    /// Records a chunk's result; its output is in `tmp` (on disk, synced) when it succeeded.
    /// True when it counted. The rows it changes are written by the state's commit.
    pub fn record(&mut self, h: &ChunkResult, tmp: Option<&Path>) -> Result<bool, DivError> {
        // A stopped chunk's result (it ended before its agent heard of the cancel) says its
        // process ended: not recorded, but no longer waited for.
        self.result_came(h.job_id, h.chunk);
        let Some(job) = self.jobs.get_mut(&h.job_id) else {
            return Ok(false);
        };
        let out = job
            .chunks
            .get(&h.chunk)
            .is_some_and(|c| c.state == ChunkState::Out);
        if job.state != "running" || !out {
            return Ok(false);
        }
        let jd = job_dir(&self.dir, h.job_id);
        if h.success {
            if let Some(tmp) = tmp {
                std::fs::rename(tmp, jd.join(format!("chunk-{}.out", h.chunk)))
                    .map_err(internal)?;
                std::fs::File::open(&jd)
                    .and_then(|d| d.sync_all())
                    .map_err(internal)?;
            }
            set_chunk(
                &mut self.dirty_chunks,
                h.job_id,
                job,
                h.chunk,
                ChunkState::Done,
                h.transfer_ns,
                h.compute_ns,
            );
            job.done_seq += 1;
            if let Some(c) = job.chunks.get_mut(&h.chunk) {
                c.done_seq = job.done_seq;
            }
            job.master.finish(
                h.chunk,
                h.transfer_ns as f64 / 1e9,
                h.compute_ns as f64 / 1e9,
            );
            if job.master.is_done() {
                gather(&jd, h.job_id, job);
                self.dirty_jobs.insert(h.job_id);
            }
        } else if let Some(cause) = h.message.strip_prefix(NO_ROOM) {
            // Its input found no room on its node's disk: the node's condition, not the
            // chunk's failure (`retries` counts those). Lost, as a chunk lost with its agent:
            // its units are re-planned and count a loss against `MAX_UNIT_LOSSES`, so a cluster
            // whose every disk stays full ends the job rather than looping. Its worker leaves
            // the plan, so the units go elsewhere; its next ask with room rejoins it.
            let worker = job
                .chunks
                .get(&h.chunk)
                .map(|c| c.worker.clone())
                .unwrap_or_default();
            warn!(
                job = h.job_id,
                chunk = h.chunk,
                node = %worker,
                "no room for a chunk's input on its node's disk: it is re-planned elsewhere"
            );
            if job.master.lose_chunk(h.chunk) == Recorded::Yes {
                set_chunk(
                    &mut self.dirty_chunks,
                    h.job_id,
                    job,
                    h.chunk,
                    ChunkState::Lost,
                    0,
                    0,
                );
            }
            if let Some(w) = job.master.workers().iter().position(|w| w.name == worker) {
                job.master.retire(w);
            }
            if let Some(why) = job.master.failure() {
                // The master names a loss with its worker; say this one was the disk's.
                let why = format!(
                    "{why}; the last loss: no room for its input on node `{worker}`: {cause}"
                );
                finish_job(h.job_id, job, "failed", &why);
                stop_out_chunks(&mut self.dirty_chunks, h.job_id, job);
                self.dirty_jobs.insert(h.job_id);
            }
        } else {
            set_chunk(
                &mut self.dirty_chunks,
                h.job_id,
                job,
                h.chunk,
                ChunkState::Failed,
                h.transfer_ns,
                h.compute_ns,
            );
            if let Some(c) = job.chunks.get_mut(&h.chunk) {
                c.reason = h.reason;
            }
            warn!(
                job = h.job_id,
                chunk = h.chunk,
                "chunk failed: {}",
                h.message
            );
            job.master.fail(h.chunk, &h.message);
            fail_if_the_master_failed(&mut self.dirty_chunks, &mut self.dirty_jobs, h.job_id, job);
        }
        Ok(true)
    }

    /// Declares agents silent for the dead timeout lost: their chunks are re-planned.
    fn reap(&mut self) {
        let dead: Vec<String> = self
            .agents
            .iter()
            .filter(|(_, a)| !a.present(self.dead_timeout))
            .map(|(n, _)| n.clone())
            .collect();
        for name in dead {
            self.lose_agent(&name);
        }
    }

    /// Agent `name` is lost (silent for the dead timeout here, or its node declared dead by the
    /// state's dead-node path): its chunks are re-planned onto the others; it is used again from
    /// its next call.
    pub fn lose_agent(&mut self, name: &str) {
        self.agents.remove(name);
        // Nothing will say more of the processes of the chunks stopped there: not waited for.
        if let Some(node) = self.stopping_nodes.remove(name) {
            for job in self.stopping.node_gone(node) {
                self.stopped(job);
            }
        }
        let turns_before = self.turns();
        // A finished job has no plan left to leave: its record stays as it ended, whatever
        // happens to its agents afterwards.
        for (&id, job) in self.jobs.iter_mut().filter(|(_, j)| j.state == "running") {
            leave_plan(&mut self.dirty_chunks, &mut self.dirty_jobs, id, job, name);
        }
        // Its items left the plan: the turn may have passed to another worker, whose ask is
        // held open. A loss of chunks wakes it with the commit; one of no chunk writes no row.
        if self.turns() != turns_before {
            self.changed();
        }
    }

    /// Job `id` as a listing shows it, if it is a divisible job.
    pub fn view(&self, id: u64) -> Option<DivisibleView> {
        let job = self.jobs.get(&id)?;
        let m = &job.master;
        let out: u64 = m.outstanding().map(Order::units).sum();
        let units = job.spec.units();
        let done = m.units_done();
        let running = job.state == "running";
        let workers = m
            .workers()
            .iter()
            .map(|w| {
                let s = w.estimate.star_worker(&w.name, None);
                DivisibleWorker {
                    name: w.name.clone(),
                    speed: s.as_ref().map_or(0.0, |s| s.speed),
                    compute_latency: s.as_ref().map_or(0.0, |s| s.compute_latency),
                    bandwidth: s.as_ref().map_or(0.0, |s| s.bandwidth),
                    network_latency: s.as_ref().map_or(0.0, |s| s.network_latency),
                    memory_units: w.memory_units.unwrap_or(0),
                    units_done: w.units_done,
                    chunks_done: w.chunks_done,
                    alive: w.alive,
                }
            })
            .collect();
        let chunks: Vec<DivisibleChunk> =
            job.chunks.values().map(|c| c.shown(&job.state)).collect();
        let rounds = chunks.iter().map(|c| c.round + 1).max().unwrap_or(0);
        let info = DivisibleInfo {
            name: job.spec.name.get_ref().clone(),
            algo: job.spec.algo().to_string(),
            units,
            units_done: done,
            lower_bound_s: m.lower_bound().unwrap_or(0.0),
            message: job.message.clone(),
            workers,
            chunks,
            output_bytes: job.output_bytes,
            rounds,
            requires: job.spec.requires(),
        };
        // A job that ended without completing counts each unit not done once: failed if a
        // chunk of it ran and failed, else not run (stopped with its job, or never sent) —
        // counted as cancelled, as a cancelled job's are, so that no unit reads as a failure
        // it never had.
        let (failed, cancelled) = if matches!(job.state.as_str(), "failed" | "cancelled") {
            let failed = units_failed(job);
            (failed, (units - done).saturating_sub(failed))
        } else {
            (0, 0)
        };
        Some(DivisibleView {
            state: job.state.clone(),
            units,
            finished_ns: job.finished_ns,
            pending: if running { units - done - out } else { 0 },
            running: if running { out } else { 0 },
            succeeded: done,
            failed,
            cancelled,
            info,
        })
    }

    /// Why job `job`'s units wait, when no agent can take its chunks now: none that asks has
    /// the attributes it `requires` (or none asks at all), or each that has them is drained.
    /// Empty while some agent can (its chunks go out as agents ask) and once it has ended.
    fn pending_reason(&self, rd: &Read, job: &Job, pending: u64) -> String {
        if job.state != "running" || pending == 0 {
            return String::new();
        }
        let admitted: Vec<(&str, u64)> = self
            .agents
            .iter()
            .filter(|(n, a)| a.present(self.dead_timeout) && job.spec.admits(n, &a.attributes))
            .map(|(n, a)| (n.as_str(), a.memory_bytes))
            .collect();
        let mut able: Vec<&str> = admitted
            .iter()
            .filter(|(_, m)| holds_a_unit(&job.spec, *m))
            .map(|(n, _)| *n)
            .collect();
        if let (Some(per_unit), Some(most)) = (
            job.spec.memory_per_unit,
            admitted.iter().map(|(_, m)| *m).max(),
        ) && able.is_empty()
        {
            return format!(
                "no live agent can hold one unit (memory_per_unit {per_unit}; the most memory an \
                 agent that could take its chunks has: {})",
                bytesize::ByteSize(most)
            );
        }
        let open: Vec<&str> = able
            .iter()
            .copied()
            .filter(|n| !rd.nodes.is_drained(n))
            .collect();
        // An agent whose last ask said its disk is below its floor takes no chunk that carries
        // input.
        let roomy = |n: &str| {
            job.spec.unit_bytes() == 0 || !self.agents.get(n).is_some_and(|a| a.disk_short)
        };
        if !open.is_empty() && !open.iter().any(|n| roomy(n)) {
            let mut short = open.clone();
            short.sort_unstable();
            return format!(
                "every agent that can take its chunks has its disk below its `min_free_disk`, \
                 with no room for their input: {} (it goes on once one has room)",
                short.join(", ")
            );
        }
        let time_left = |n: &str| rd.nodes.time_left(n);
        if open
            .iter()
            .any(|n| roomy(n) && !job.spec.outlasts(time_left(n)))
        {
            return String::new();
        }
        if let (Some(limit), Some(most)) = (
            job.spec.time_limit,
            open.iter().filter_map(|n| time_left(n)).max(),
        ) {
            let words = |d: Duration| {
                humantime::format_duration(Duration::from_secs(d.as_secs())).to_string()
            };
            return format!(
                "its chunks' time limit ({}) is longer than the time left on every agent that can \
                 take them (at most {}: their agents' `time_limit`)",
                words(Duration::from_nanos(limit.0)),
                words(most)
            );
        }
        let requires: Vec<&str> = job
            .spec
            .requires
            .iter()
            .map(|r| r.get_ref().as_str())
            .collect();
        if able.is_empty() {
            return if requires.is_empty() {
                "no live agent takes chunks: it starts when one asks".to_string()
            } else {
                format!(
                    "no live agent can take its chunks (requires {})",
                    requires.join(" + ")
                )
            };
        }
        able.sort_unstable();
        format!(
            "every agent that can take its chunks is drained: {} (`hetsched node resume NAME`)",
            able.join(", ")
        )
    }

    fn job_info(&self, rd: &Read, id: u64) -> Option<JobInfo> {
        let job = self.jobs.get(&id)?;
        let v = self.view(id)?;
        let running = job.state == "running";
        // One that has not started waits for what it names (not for an operator), `pending`.
        let unstarted = running && !job.gate.started;
        let (pending_reason, blocked, state) = if unstarted {
            (job.gate.reason(id), false, "pending".to_string())
        } else {
            let r = self.pending_reason(rd, job, v.pending);
            // Each reason a started one gives is that no agent can take its chunks now.
            let blocked = !r.is_empty();
            // Agents could take its chunks, but its owner's cap keeps every one of them back.
            let out = !job.out.is_empty();
            let r = match capped_reason(rd, id) {
                Some(capped) if r.is_empty() && v.pending > 0 && !out => capped,
                _ => r,
            };
            (r, blocked, v.state)
        };
        let mut info = JobInfo {
            blocked,
            pending_reason,
            id,
            kind: super::Kind::Divisible,
            name: job.name.clone(),
            state,
            tasks: v.units,
            counts: TaskCounts {
                pending: v.pending,
                running: v.running,
                succeeded: v.succeeded,
                failed: v.failed,
                cancelled: v.cancelled,
                // Chunks are never queued behind other work on an agent.
                queued: 0,
                fetching: 0,
            },
            submitted_ns: job.submitted_ns,
            finished_ns: v.finished_ns,
            apps: Vec::new(),
            divisible: Some(Box::new(v.info)),
            stopping: self.stopping.of_job(id),
            ..Default::default()
        };
        job.gate.fill(&mut info, !running);
        Some(info)
    }

    /// The jobs that have not started (nor ended), found among the few that may not have.
    fn unstarted_jobs(&self) -> impl Iterator<Item = (u64, &Job)> {
        self.maybe_unstarted
            .iter()
            .filter_map(|&id| Some((id, self.jobs.get(&id)?)))
            .filter(|(_, j)| j.state == "running" && !j.gate.started)
    }

    /// Job `id`, which has not started, to change (`what` applies to such jobs only).
    fn unstarted(&mut self, id: u64, what: &str) -> Result<&mut Job, StateError> {
        let j = self.jobs.get_mut(&id).ok_or(StateError::NoJob(id))?;
        if j.gate.started || j.state != "running" {
            return Err(StateError::Invalid(format!(
                "job {id} is a divisible job that has {}: {what} a divisible job before it \
                 starts (`hetsched cancel {id}` stops one that runs)",
                if j.state != "running" {
                    "ended"
                } else {
                    "started"
                }
            )));
        }
        Ok(j)
    }

    /// Books in `view` one core on the node of every agent computing a chunk, charged to the
    /// group (`group_of` a job: its owner's) of the job whose chunk it computes, and gives back
    /// the cores of agents that no longer compute one. An agent computes its chunks one at a
    /// time, in the order they were sent, so the oldest chunk out on it is the one running and
    /// one core is what it holds, whatever else it buffers. Like a stream worker's cores
    /// ([`super::topology::Topology::rebook`]), the core is taken when free: tasks already
    /// running are not preempted ([`Divisible::needs_rebook`] says when to look again).
    pub fn rebook(
        &mut self,
        view: &mut SchedulerView,
        nodes: &Nodes,
        mut group_of: impl FnMut(u64) -> Option<u32>,
    ) {
        // The running chunk of each agent: its oldest out, (sent, job, chunk) breaking ties.
        let mut running: HashMap<&str, (Instant, u64, u64)> = HashMap::new();
        for (&id, job) in &self.jobs {
            if job.state != "running" {
                continue;
            }
            for c in job.out_chunks() {
                let key = (c.sent, id, c.order.chunk);
                running
                    .entry(c.worker.as_str())
                    .and_modify(|k| *k = (*k).min(key))
                    .or_insert(key);
            }
        }
        let mut want: HashMap<String, (u32, Option<u32>)> = HashMap::new();
        for (name, (_, job, _)) in running {
            if let Some(node) = nodes.by_name(name) {
                want.insert(name.to_string(), (node, group_of(job)));
            }
        }
        self.booked.retain(|name, b| {
            if want.get(name) == Some(&(b.node, b.group)) {
                return true;
            }
            view.release_cores(NodeId(b.node), b.taken);
            view.release_group(b.group, Resources::new(b.taken, 0, 0));
            false
        });
        let mut all = true;
        for (name, (node, group)) in want {
            let b = self.booked.entry(name).or_insert(Booked {
                node,
                group,
                taken: 0,
            });
            if b.taken == 0 {
                b.taken = view.hold_cores(NodeId(node), 1);
                view.charge_group(group, Resources::new(b.taken, 0, 0));
            }
            all &= b.taken == 1;
        }
        self.short = !all;
    }

    /// Whether [`Divisible::rebook`] has something to do: a chunk or job changed in this event,
    /// or an agent computing a chunk still waits for its core.
    pub fn needs_rebook(&self) -> bool {
        self.short || self.rows_changed()
    }

    /// Whether a job, chunk or worker row changed since the last commit (what stops aside).
    fn rows_changed(&self) -> bool {
        !self.dirty_jobs.is_empty()
            || !self.dirty_chunks.is_empty()
            || !self.dirty_workers.is_empty()
    }

    /// The group charged with the core agent `name` holds ([`Divisible::rebook`]): `None` when
    /// it computes no chunk, `Some(None)` for the admin's job.
    pub fn booked_group(&self, name: &str) -> Option<Option<u32>> {
        self.booked.get(name).map(|b| b.group)
    }

    /// The running jobs (those that may hand out chunks).
    pub fn running_jobs(&self) -> impl Iterator<Item = u64> + '_ {
        self.jobs
            .iter()
            .filter(|(_, j)| j.state == "running" && j.gate.started)
            .map(|(&id, _)| id)
    }

    /// Chunks out on the agent of node `name` now, over every running job (what a drain lets
    /// finish there).
    pub fn chunks_on(&self, name: &str) -> u32 {
        self.jobs
            .values()
            .filter(|j| j.state == "running")
            .flat_map(Job::out_chunks)
            .filter(|c| c.worker == name)
            .count() as u32
    }

    /// The gathered output of a completed job.
    pub fn output_path(&self, id: u64) -> Result<PathBuf, DivError> {
        let job = self
            .jobs
            .get(&id)
            .ok_or_else(|| DivError::NotFound(format!("no divisible job {id}")))?;
        if job.state != "completed" {
            return Err(DivError::NotReady(format!(
                "divisible job {id} is {}: its output is gathered when it completes",
                job.state
            )));
        }
        Ok(job_dir(&self.dir, id).join("output"))
    }

    /// Chunk `chunk` of job `id` as `hetsched log` needs it: who ran it and how it stands, and,
    /// once it is done, the file where the server keeps its stdout (its agent removes its copy
    /// once the server holds it).
    pub fn chunk(
        &self,
        id: u64,
        chunk: u64,
    ) -> Result<(DivisibleChunk, Option<PathBuf>), DivError> {
        let job = self
            .jobs
            .get(&id)
            .ok_or_else(|| DivError::NotFound(format!("no divisible job {id}")))?;
        let c = job.chunks.get(&chunk).ok_or_else(|| {
            DivError::NotFound(format!(
                "divisible job {id} has no chunk {chunk} (it has sent {}: `hetsched job {id} \
                 --output json` lists them)",
                job.chunks.len()
            ))
        })?;
        let stdout = (c.state == ChunkState::Done)
            .then(|| job_dir(&self.dir, id).join(format!("chunk-{chunk}.out")));
        Ok((c.shown(&job.state), stdout))
    }

    /// `DATA_DIR/divisible`, where the jobs' files are.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

impl JobKind for Divisible {
    fn kind(&self) -> Kind {
        Kind::Divisible
    }

    fn chunk_out_to(&self, job: u64, chunk: u64, agent: &str) -> bool {
        self.jobs
            .get(&job)
            .and_then(|j| j.chunks.get(&chunk))
            .is_some_and(|c| c.state == ChunkState::Out && c.worker == agent)
    }

    /// `hetsched signal`: every chunk of `job` out to an agent whose node is known (its agent
    /// sends it to the chunk it computes, and only acknowledges one it holds but has not
    /// started). A divisible job has no applications or task indices to pick from.
    fn running_attempts(
        &self,
        job: u64,
        app: Option<&str>,
        indices: Option<&[u32]>,
        nodes: &Nodes,
    ) -> Result<Vec<RunningAttempt>, StateError> {
        let j = self.jobs.get(&job).ok_or(StateError::NoJob(job))?;
        if app.is_some() || indices.is_some() {
            return Err(StateError::Invalid(format!(
                "job {job} is a divisible job: its signal goes to every chunk being computed; \
                 --app and --tasks pick a batch job's or a workflow's tasks"
            )));
        }
        Ok(j.out_chunks()
            .filter_map(|c| {
                Some(RunningAttempt {
                    task_id: c.order.chunk,
                    attempt: 0,
                    node: nodes.by_name(&c.worker)?,
                    chunk_of: job,
                })
            })
            .collect())
    }

    // Chunks do not travel in heartbeats (see the module documentation): the heartbeat hooks
    // keep their defaults.

    fn has_changes(&self) -> bool {
        self.rows_changed() || !self.stopping.changes().is_empty()
    }

    fn persist(&self, tx: &rusqlite::Transaction) -> Result<(), StoreError> {
        for id in &self.dirty_jobs {
            let Some(j) = self.jobs.get(id) else { continue };
            tx.execute(
                "UPDATE div_jobs SET state = ?2, message = ?3, finished_ns = ?4, output_bytes = ?5, \
                 held = ?6, begin_ms = ?7, started = ?8 WHERE id = ?1",
                params![
                    *id as i64,
                    j.state,
                    j.message,
                    j.finished_ns as i64,
                    j.output_bytes as i64,
                    i64::from(j.gate.held),
                    j.gate.begin_ms.unwrap_or(0) as i64,
                    i64::from(j.gate.started)
                ],
            )?;
        }
        for (id, chunk) in &self.dirty_chunks {
            let Some(c) = self.jobs.get(id).and_then(|j| j.chunks.get(chunk)) else {
                continue;
            };
            tx.execute(
                "INSERT OR REPLACE INTO div_chunks(job, chunk, round, worker, start, stop, state, \
                 transfer_ns, compute_ns, done_seq, incarnation, reason) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)",
                params![
                    *id as i64,
                    *chunk as i64,
                    c.order.round,
                    c.worker,
                    c.order.start as i64,
                    c.order.end as i64,
                    c.state.as_str(),
                    c.transfer_ns as i64,
                    c.compute_ns as i64,
                    c.done_seq as i64,
                    c.incarnation,
                    c.reason.map(EndReason::as_str)
                ],
            )?;
        }
        for &(task, stop) in self.stopping.changes() {
            crate::store::write_task_stop(tx, task, stop)?;
        }
        // A job's workers are few (its nodes): all of them are written again.
        for id in &self.dirty_workers {
            let Some(j) = self.jobs.get(id) else { continue };
            for (idx, w) in j.master.workers().iter().enumerate() {
                tx.prepare_cached(
                    "INSERT OR REPLACE INTO div_workers(job, idx, name, memory_units) \
                     VALUES (?1, ?2, ?3, ?4)",
                )?
                .execute(params![
                    *id as i64,
                    idx as i64,
                    w.name,
                    w.memory_units.map(|u| u as i64)
                ])?;
            }
        }
        Ok(())
    }

    fn committed(&mut self) {
        // (What stops changes nothing an ask gets.)
        if self.rows_changed() {
            self.changed();
        }
        self.dirty_jobs.clear();
        self.dirty_chunks.clear();
        self.dirty_workers.clear();
        self.stopping.committed();
        self.stopped_in_event = false;
    }

    fn housekeeping(&mut self, _cx: &mut Ctx) -> Result<(), StateError> {
        self.reap();
        Ok(())
    }

    /// No agent's silence counts the stall: before, the reaper's first pass after a stop of
    /// the server longer than the dead timeout lost every agent's chunks, before their
    /// queued asks were read.
    fn server_stalled(&mut self, stall: Stall) {
        for a in self.agents.values_mut() {
            a.grace.stalled(a.last_seen, stall);
        }
    }

    /// When the first agent holding no ask open is lost if it stays silent, or a waiting job's
    /// begin time comes.
    fn housekeeping_due(&self) -> Option<Instant> {
        // An agent noted at its registration that never asked matters only to a running job
        // (which may have planned chunks for it): else the reaper need not wake for it.
        let running = self.jobs.values().any(|j| j.state == "running");
        self.agents
            .values()
            .filter(|a| a.held == 0 && (a.asked || running))
            .map(|a| a.silent_from() + self.dead_timeout)
            .chain(JobKind::next_begin(self))
            .min()
    }

    fn waiting(&self) -> Vec<(u64, Gate)> {
        self.unstarted_jobs()
            .map(|(id, j)| (id, j.gate.clone()))
            .collect()
    }

    fn any_waiting(&self) -> bool {
        self.unstarted_jobs().next().is_some()
    }

    fn set_waiting_for(&mut self, id: u64, job: Option<u64>) {
        if let Some(j) = self.jobs.get_mut(&id) {
            j.gate.waiting_for = job;
        }
    }

    /// Its agents' asks plan it from now on (held asks are answered at once).
    fn start_waiting(&mut self, _cx: &mut Ctx, id: u64) {
        if let Some(j) = self.jobs.get_mut(&id) {
            j.gate.started = true;
            j.gate.waiting_for = None;
            self.maybe_unstarted.remove(&id);
            self.dirty_jobs.insert(id);
            info!(
                job = id,
                "what it waited for allows it: the divisible job starts"
            );
            self.changed();
        }
    }

    fn cancel_waiting(&mut self, _cx: &mut Ctx, id: u64, why: &str) -> Result<u64, StateError> {
        let job = self.jobs.get_mut(&id).ok_or(StateError::NoJob(id))?;
        if job.state != "running" {
            return Ok(0);
        }
        let units = job.spec.units();
        finish_job(id, job, "cancelled", why);
        self.maybe_unstarted.remove(&id);
        self.dirty_jobs.insert(id);
        info!(
            job = id,
            "divisible job cancelled: a job it runs after did not end as it needs"
        );
        Ok(units)
    }

    fn hold_waiting(&mut self, id: u64, hold: bool) -> Result<u64, StateError> {
        let j = self.unstarted(id, "hold and release apply to")?;
        if j.gate.held == hold {
            return Ok(0);
        }
        j.gate.held = hold;
        let units = j.spec.units();
        self.dirty_jobs.insert(id);
        Ok(units)
    }

    fn set_begin(&mut self, id: u64, begin_ms: u64) -> Result<(), StateError> {
        self.unstarted(id, "a begin time applies to")?.gate.begin_ms = Some(begin_ms);
        self.dirty_jobs.insert(id);
        Ok(())
    }

    fn next_begin(&self) -> Option<Instant> {
        super::gate::next_begin(self.unstarted_jobs().map(|(_, j)| &j.gate))
    }

    fn counts(&self) -> TaskCounts {
        // A divisible job has units and chunks, not tasks.
        TaskCounts::default()
    }

    fn running_units(&self) -> super::RunningUnits {
        let mut r = super::RunningUnits::default();
        for job in self.jobs.values().filter(|j| j.state == "running") {
            r.jobs += 1;
            r.done += job.master.units_done();
            r.units += job.spec.units();
        }
        r
    }

    fn job_count(&self) -> u64 {
        (self.jobs.len() + self.purged.len()) as u64
    }

    fn purged_count(&self) -> u64 {
        self.purged.len() as u64
    }

    fn job_ids(&self) -> Vec<u64> {
        // Purged jobs' ids too: the state's sequence never gives them again.
        self.jobs
            .keys()
            .chain(self.purged.keys())
            .copied()
            .collect()
    }

    fn finished_in_event(&self) -> bool {
        self.dirty_jobs
            .iter()
            .any(|id| self.jobs.get(id).is_some_and(|j| j.state != "running"))
    }

    /// A cancelled job's last stopping chunk ended in this event, or a job ended: its waiters
    /// are woken.
    fn ends_in_event(&self) -> bool {
        self.stopped_in_event || self.finished_in_event()
    }

    fn stopping(&self, id: u64) -> u32 {
        self.stopping.of_job(id)
    }

    fn finished_jobs(&self) -> Vec<(u64, u64)> {
        self.jobs
            .iter()
            // (One whose stopped chunks may still run is not purged under them.)
            .filter(|(id, j)| j.state != "running" && self.stopping.of_job(**id) == 0)
            .map(|(&id, j)| (id, j.finished_ns))
            .collect()
    }

    fn check_purge(&self, id: u64) -> Result<(), StateError> {
        let job = self.jobs.get(&id).ok_or(StateError::NoJob(id))?;
        if job.state == "running" {
            return Err(StateError::Invalid(format!(
                "job {id} is not finished ({} of {} units done): cancel it first \
                 (`hetsched cancel {id}`) or wait for it",
                job.master.units_done(),
                job.spec.units()
            )));
        }
        let stopping = self.stopping.of_job(id);
        if stopping > 0 {
            return Err(StateError::Invalid(format!(
                "job {id} is still stopping: the processes of {} may still run (their SIGTERM \
                 handlers, for at most the kill grace); `hetsched wait {id}` returns once they \
                 ended",
                hetsched_core::text::count(u64::from(stopping), "chunk")
            )));
        }
        Ok(())
    }

    fn purge_rows(
        &self,
        tx: &rusqlite::Transaction,
        ids: &[u64],
        budget: &mut u64,
    ) -> Result<(u64, Vec<crate::state::purging::Left>), StoreError> {
        let mut units = 0;
        let mut left = Vec::new();
        for &id in ids {
            let Some(job) = self.jobs.get(&id) else {
                continue;
            };
            mark_purged(tx, id)?;
            units += job.spec.units();
            // Every chunk it ever had is in memory (none is dropped before a purge).
            let first = job.chunks.keys().next().copied().unwrap_or(0);
            let end = job.chunks.keys().next_back().map_or(0, |c| c + 1);
            left.extend(crate::state::purging::delete_bounded(
                tx,
                Kind::Divisible,
                id,
                first..end,
                budget,
            )?);
        }
        Ok((units, left))
    }

    fn is_purged(&self, id: u64) -> bool {
        self.purged.contains_key(&id)
    }

    fn unfinished_named(&self, name: &str) -> Vec<u64> {
        self.jobs
            .iter()
            .filter(|(_, j)| j.name == name && j.state == "running")
            .map(|(&id, _)| id)
            .collect()
    }

    fn job_end(&self, id: u64) -> Option<super::JobEnd> {
        use super::JobEnd;
        if self.is_purged(id) {
            return Some(JobEnd::Purged);
        }
        // Ended, but processes of its stopped chunks may still run: the jobs after it wait for
        // them too, as `wait` does.
        if self.stopping.of_job(id) > 0 {
            return Some(JobEnd::Unfinished);
        }
        Some(match self.jobs.get(&id)?.state.as_str() {
            "completed" => JobEnd::Completed,
            "failed" => JobEnd::Failed,
            "cancelled" => JobEnd::Cancelled,
            _ => JobEnd::Unfinished,
        })
    }

    fn purged(&mut self, _cx: &mut Ctx, ids: &[u64]) {
        // (A purge takes no stopping job, but one set aside at a start may have been.)
        if !self.stopping.is_empty() {
            self.stopping.forget_jobs(&ids.iter().copied().collect());
            let stopping = &self.stopping;
            self.stopping_nodes.retain(|_, &mut n| stopping.on_node(n));
        }
        for &id in ids {
            self.maybe_unstarted.remove(&id);
            let Some(job) = self.jobs.remove(&id) else {
                continue;
            };
            self.purged.insert(
                id,
                Tombstone {
                    key: job.key,
                    owner: job.owner,
                },
            );
            remove_job_dir(&self.dir, id);
        }
        self.changed();
    }

    fn jobs_page(&self, rd: &Read, cursor: u64, limit: usize) -> JobsPage {
        let mut ids = self.jobs.range(cursor..).map(|(&id, _)| id);
        let jobs: Vec<JobInfo> = ids
            .by_ref()
            .take(limit)
            .filter_map(|id| self.job_info(rd, id))
            .collect();
        JobsPage {
            jobs,
            next_cursor: ids.next().unwrap_or(0),
        }
    }

    /// An unfinished divisible job counts as one task against its owner's
    /// `max_unfinished_tasks_per_user`, whatever its units: what it stores is one job row, its
    /// input and the chunk rows of its own progress.
    fn stored_bytes(&self, id: u64) -> u64 {
        self.jobs.get(&id).map_or(0, |j| j.stored_bytes)
    }

    fn unfinished_tasks(&self, id: u64) -> u64 {
        self.jobs
            .get(&id)
            .filter(|j| !crate::state::is_final_job_state(&j.state))
            .map_or(0, |_| 1)
    }

    /// One, as its `unfinished_tasks`: one job row, its input and its own chunks' rows.
    fn stored_tasks(&self, id: u64) -> u64 {
        u64::from(self.jobs.contains_key(&id))
    }

    fn listed_state(&self, id: u64) -> Option<&str> {
        let job = self.jobs.get(&id)?;
        // As its entry says it ([`Divisible::job_info`]): one that has not started is pending.
        Some(if job.state == "running" && !job.gate.started {
            "pending"
        } else {
            job.state.as_str()
        })
    }

    fn job(&self, rd: &Read, id: u64) -> Result<JobInfo, StateError> {
        self.job_info(rd, id).ok_or(StateError::NoJob(id))
    }

    fn tasks_page(
        &self,
        _rd: &Read,
        job: u64,
        _cursor: u64,
        _limit: usize,
    ) -> Result<TasksPage, StateError> {
        // Its chunks are shown by `job N` (the `divisible` view), not as tasks.
        if job == Kind::Divisible.id(0) || self.jobs.contains_key(&job) {
            Ok(TasksPage::default())
        } else {
            Err(StateError::NoJob(job))
        }
    }

    fn resubmit_failed(&mut self, _cx: &mut Ctx, job: u64) -> Result<u64, StateError> {
        Err(StateError::Invalid(format!(
            "job {job} is a divisible job: its failed chunks are re-planned while it runs; submit it again"
        )))
    }

    /// Cancels a running job: no more chunks are sent, results are ignored, and agents are told
    /// to drop the chunks they hold; those out are stopping until their processes ended. The
    /// units it cancelled: not done, nor run to a failure (0 if it had finished).
    fn cancel(&mut self, cx: &mut Ctx, id: u64, why: &str) -> Result<u64, StateError> {
        let job = self.jobs.get_mut(&id).ok_or(StateError::NoJob(id))?;
        if job.state != "running" {
            return Ok(0);
        }
        // Its chunks out run on until their agents have stopped them (SIGTERM, the kill grace,
        // SIGKILL): a wait on the job waits for that. (A chunk out to a node no longer known
        // has nothing to wait for.)
        for c in job.out_chunks() {
            let (Some(node), Some(task)) =
                (cx.nodes.by_name(&c.worker), chunk_task(id, c.order.chunk))
            else {
                continue;
            };
            self.stopping.add(node, task, CHUNK_ATTEMPT, id);
            self.stopping_nodes.insert(c.worker.clone(), node);
        }
        // The units it stops: not done, and not run to a failure (those stay failed, as the
        // job's counts say).
        let left = (job.spec.units() - job.master.units_done()).saturating_sub(units_failed(job));
        let why = if why == "cancelled" {
            "cancelled by a user"
        } else {
            why
        };
        finish_job(id, job, "cancelled", why);
        stop_out_chunks(&mut self.dirty_chunks, id, job);
        self.maybe_unstarted.remove(&id);
        self.dirty_jobs.insert(id);
        Ok(left)
    }
}

/// Worker `name` leaves job `id`'s plan (if it is an alive worker of it): its chunks out are
/// lost and their units planned again onto the others, unless a loss took some unit to
/// [`MAX_UNIT_LOSSES`](hetsched_core::policy::divisible::online::MAX_UNIT_LOSSES): then the job
/// fails.
fn leave_plan(
    dirty: &mut BTreeSet<(u64, u64)>,
    dirty_jobs: &mut BTreeSet<u64>,
    id: u64,
    job: &mut Job,
    name: &str,
) {
    let Some(w) = job.master.workers().iter().position(|w| w.name == name) else {
        return;
    };
    if !job.master.workers()[w].alive {
        return;
    }
    let lost = job.master.lose(w);
    if job.state == "running" && !lost.is_empty() {
        warn!(job = id, node = %name, chunks = lost.len(), "worker left the plan: its chunks are re-planned");
    }
    for o in lost {
        set_chunk(dirty, id, job, o.chunk, ChunkState::Lost, 0, 0);
    }
    fail_if_the_master_failed(dirty, dirty_jobs, id, job);
}

/// A running job whose master failed it (a unit failed past `retries`, or was lost
/// `MAX_UNIT_LOSSES` times) ends failed with the master's reason; its chunks still out are
/// stopped.
fn fail_if_the_master_failed(
    dirty: &mut BTreeSet<(u64, u64)>,
    dirty_jobs: &mut BTreeSet<u64>,
    id: u64,
    job: &mut Job,
) {
    if job.state != "running" {
        return;
    }
    if let Some(why) = job.master.failure() {
        let why = why.to_string();
        finish_job(id, job, "failed", &why);
        stop_out_chunks(dirty, id, job);
        dirty_jobs.insert(id);
    }
}

/// The chunks of `job` (just ended) still out are stopped: their agents are told to drop them.
fn stop_out_chunks(dirty: &mut BTreeSet<(u64, u64)>, id: u64, job: &mut Job) {
    for k in std::mem::take(&mut job.out) {
        if let Some(c) = job.chunks.get_mut(&k) {
            c.state = ChunkState::Stopped;
            dirty.insert((id, k));
        }
    }
}

fn set_chunk(
    dirty: &mut BTreeSet<(u64, u64)>,
    id: u64,
    job: &mut Job,
    chunk: u64,
    state: ChunkState,
    transfer_ns: u64,
    compute_ns: u64,
) {
    if let Some(c) = job.chunks.get_mut(&chunk) {
        c.state = state;
        // A failed chunk's is set by its caller, after.
        c.reason = None;
        c.transfer_ns = transfer_ns;
        c.compute_ns = compute_ns;
        dirty.insert((id, chunk));
        if state == ChunkState::Out {
            job.out.insert(chunk);
        } else {
            job.out.remove(&chunk);
        }
    }
}

/// How many of `job`'s units not done a chunk ran and failed (a unit whose failed chunk was
/// re-planned and then done is done; one in two failed chunks counts once).
fn units_failed(job: &Job) -> u64 {
    failed_not_done(
        job.chunks
            .values()
            .map(|c| (c.state, c.order.start, c.order.end)),
    )
}

/// Of chunks `(state, start, end)`, how many units lie in a failed chunk and in no done one.
fn failed_not_done(chunks: impl Iterator<Item = (ChunkState, u64, u64)> + Clone) -> u64 {
    let merged = |state: ChunkState| {
        let mut r: Vec<(u64, u64)> = chunks
            .clone()
            .filter(|c| c.0 == state)
            .map(|c| (c.1, c.2))
            .collect();
        r.sort_unstable();
        let mut m: Vec<(u64, u64)> = Vec::with_capacity(r.len());
        for (start, end) in r {
            match m.last_mut() {
                Some(last) if start <= last.1 => last.1 = last.1.max(end),
                _ => m.push((start, end)),
            }
        }
        m
    };
    let failed = merged(ChunkState::Failed);
    if failed.is_empty() {
        return 0;
    }
    let done = merged(ChunkState::Done);
    let mut n = 0;
    let mut d = 0;
    for (start, end) in failed {
        n += end - start;
        // Both are sorted and disjoint: take off the done units inside this failed range.
        while d < done.len() && done[d].1 <= start {
            d += 1;
        }
        let mut k = d;
        while k < done.len() && done[k].0 < end {
            n -= done[k].1.min(end) - done[k].0.max(start);
            k += 1;
        }
    }
    n
}

fn finish_job(id: u64, job: &mut Job, state: &str, message: &str) {
    job.state = state.into();
    job.message = message.into();
    job.finished_ns = crate::state::now_ns();
    info!(job = id, state, "divisible job finished {message}");
}

/// Concatenates the finished chunks' outputs in unit order into `output`; the job completes, or
/// fails naming the chunk whose output cannot be read.
fn gather(jd: &Path, id: u64, job: &mut Job) {
    let mut done: Vec<&ChunkRec> = job
        .chunks
        .values()
        .filter(|c| c.state == ChunkState::Done)
        .collect();
    done.sort_by_key(|c| c.order.start);
    let tmp = jd.join("output.tmp");
    let result = (|| -> Result<u64, String> {
        let mut out = crate::datadir::create_private(&tmp).map_err(|e| format!("output: {e}"))?;
        let mut total = 0;
        for c in &done {
            let path = jd.join(format!("chunk-{}.out", c.order.chunk));
            let mut f = std::fs::File::open(&path).map_err(|e| {
                format!(
                    "chunk {} (units {}..{}): its output cannot be gathered: {}: {e}",
                    c.order.chunk,
                    c.order.start,
                    c.order.end,
                    path.display()
                )
            })?;
            total += std::io::copy(&mut f, &mut out).map_err(|e| {
                format!(
                    "chunk {} (units {}..{}): its output cannot be gathered: {e}",
                    c.order.chunk, c.order.start, c.order.end
                )
            })?;
        }
        out.sync_all().map_err(|e| format!("output: {e}"))?;
        std::fs::rename(&tmp, jd.join("output")).map_err(|e| format!("output: {e}"))?;
        Ok(total)
    })();
    match result {
        Ok(total) => {
            job.output_bytes = total;
            finish_job(id, job, "completed", "");
        }
        Err(why) => finish_job(id, job, "failed", &why),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hetsched_core::testkit::ScratchDir;

    /// Job 1 of `units` units, restored with `done` finished one-unit chunks on agent `a`
    /// (times that vary a little) and `out` chunks out to `b` after them. An agent of 1 GiB
    /// takes chunks of at most 8 units.
    fn stored(units: u64, done: u64, out: u64) -> StoredJob {
        let row = |k: u64, worker: &str, state: &str| -> ChunkRow {
            (
                k,
                0,
                worker.to_string(),
                k,
                k + 1,
                state.to_string(),
                1_000,
                1_000_000 + (k % 7) * 10_000,
                // Ended in number order.
                if state == "done" { k + 1 } else { 0 },
                format!("{worker}-1"),
                None,
            )
        };
        StoredJob {
            id: 1,
            origin: "rows.toml".into(),
            text: format!(
                "[[divisible]]\nname = \"rows\"\nunits = {units}\ncommand = \"echo {{start}} {{end}}\"\n\
                 memory_per_unit = \"64MiB\"\n"
            ),
            name: "rows".into(),
            key: String::new(),
            owner: crate::users::ADMIN.into(),
            state: "running".into(),
            message: String::new(),
            submitted_ns: 0,
            finished_ns: 0,
            output_bytes: 0,
            chunks: (0..done)
                .map(|k| row(k, "a", "done"))
                .chain((done..done + out).map(|k| row(k, "b", "out")))
                .collect(),
            workers: Vec::new(),
            gate: Gate::started(),
            stops: Vec::new(),
        }
    }

    /// A chunk's stopping entry is keyed by a task id of this kind (so no other kind's
    /// restart takes its stored row for its own) that names the chunk back; a job or chunk
    /// number past its bits has none rather than another chunk's.
    #[test]
    fn a_chunks_stopping_key_is_a_divisible_task_id_that_names_it_back() {
        let t = chunk_task(7, 3).expect("fits");
        assert_eq!(Kind::of(t), Some(Kind::Divisible));
        assert_eq!(chunk_of_task(t), (7, 3));
        assert_ne!(chunk_task(7, 4), Some(t));
        assert_eq!(
            chunk_of_task(chunk_task((1 << 24) - 1, 0xffff_ffff).expect("fits")),
            ((1 << 24) - 1, 0xffff_ffff)
        );
        assert_eq!(chunk_task(1 << 24, 0), None);
        assert_eq!(chunk_task(1, 1 << 32), None);
    }

    fn ask(name: &str, room: bool, holding: &[u64]) -> ChunkRequest {
        ChunkRequest {
            name: name.into(),
            memory_bytes: 1 << 30,
            incarnation: format!("{name}-1"),
            holding: holding
                .iter()
                .map(|&chunk| ChunkKey { job_id: 1, chunk })
                .collect(),
            room,
            attributes: Vec::new(),
            drained: false,
            time_left: None,
            capped: Vec::new(),
            disk_short: false,
        }
    }

    /// The index of chunks out is exactly the chunks whose state is out.
    fn index_holds(d: &Divisible) {
        for job in d.jobs.values() {
            let out: BTreeSet<u64> = job
                .chunks
                .values()
                .filter(|c| c.state == ChunkState::Out)
                .map(|c| c.order.chunk)
                .collect();
            assert_eq!(job.out, out);
        }
    }

    /// An ask scanned every chunk of every running job, done ones included, twice (the lost
    /// ones, then the grace re-check): a job of 100,000 units in 9,737 chunks made the server
    /// spend 28 s of CPU, O(chunks²). Asks now look at the chunks out only, so 2,000 asks cost
    /// about the same beside 200,000 finished chunks as beside 2.
    #[test]
    fn an_ask_costs_the_same_whatever_number_of_chunks_have_finished() {
        let dir = ScratchDir::new("div", "index");
        let time = |done: u64| {
            let mut d = Divisible::restore(
                dir.clone(),
                Duration::from_secs(60),
                vec![stored(done + 1_000, done, 2)],
                &Nodes::default(),
            )
            .expect("restored");
            index_holds(&d);
            let start = Instant::now();
            for _ in 0..1_000 {
                // b holds its two chunks; a asks without room: only the reconciling is done.
                d.next_chunk(ask("b", false, &[done, done + 1]))
                    .expect("asked");
                d.next_chunk(ask("a", false, &[])).expect("asked");
            }
            index_holds(&d);
            start.elapsed()
        };
        let few = time(2);
        let many = time(200_000);
        assert!(
            many < few * 10 + Duration::from_secs(1),
            "2,000 asks took {many:?} beside 200,000 finished chunks, {few:?} beside 2"
        );
    }

    /// A finished job's record does not change with what happens to its agents afterwards:
    /// `hetsched job N` of a job that completed kept saying its agent `a` was not alive once
    /// `a` died, hours later, while it showed the same agent alive in every other job.
    #[test]
    fn an_agent_lost_after_a_job_ended_stays_alive_in_that_jobs_record() {
        let dir = ScratchDir::new("div", "ended");
        let mut ended = stored(4, 4, 0);
        ended.state = "completed".into();
        let mut d = Divisible::restore(
            dir.to_path_buf(),
            Duration::from_secs(60),
            vec![ended],
            &Nodes::default(),
        )
        .expect("restored");
        let alive = |d: &Divisible| -> Vec<(String, bool)> {
            d.view(1)
                .expect("a divisible job")
                .info
                .workers
                .into_iter()
                .map(|w| (w.name, w.alive))
                .collect()
        };
        let before = alive(&d);
        assert_eq!(before, vec![("a".to_string(), true)]);
        d.lose_agent("a");
        assert_eq!(alive(&d), before);
    }

    /// Asks held open wait for their agent's turn in the plan, and are woken when it changes. An
    /// agent lost while holding no chunk (silent for the dead timeout, or its node declared
    /// dead) leaves the plan, and the turn passes to the next worker, with no row written: that
    /// next worker's held ask was not woken, and the job waited for the ask's whole hold (the
    /// accelerator chaos soak, seed 11100: 9 units pending for over 90 s, every agent idle).
    #[test]
    fn a_worker_lost_holding_nothing_wakes_the_ask_whose_turn_it_becomes() {
        let dir = ScratchDir::new("div", "turn");
        let mut d = Divisible::restore(
            dir.to_path_buf(),
            Duration::from_secs(60),
            vec![stored(400, 20, 0)],
            &Nodes::default(),
        )
        .expect("restored");
        // a, b and c join; b's ask makes a plan over the three.
        for name in ["a", "c"] {
            d.next_chunk(ask(name, false, &[])).expect("asked");
        }
        let mut holds: HashMap<&str, Vec<u64>> = HashMap::new();
        // Only b has room (a and c compute something else): it takes what its turns give it.
        for _ in 0..2 {
            let name = "b";
            let holding = holds.get(name).cloned().unwrap_or_default();
            let got = d.next_chunk(ask(name, true, &holding)).expect("asked");
            holds
                .entry(name)
                .or_default()
                .extend(got.orders.iter().map(|o| o.chunk));
        }
        let job = &d.jobs[&1];
        let turn = job.master.turn().expect("a plan is queued");
        let whose = job.master.workers()[turn].name.clone();
        assert!(
            holds.get(whose.as_str()).is_none_or(Vec::is_empty),
            "the worker whose turn it is holds no chunk (else its loss writes rows)"
        );
        let changes = d.changes();
        d.lose_agent(&whose);
        let next = d.jobs[&1].master.turn();
        assert_ne!(next, Some(turn), "the turn passed on");
        assert!(
            changes.has_changed().expect("the kind lives"),
            "the asks held open were woken when the turn passed from {whose} to {next:?}"
        );
    }

    /// A stall of the server longer than the dead timeout loses no agent's chunks: after it,
    /// the reaper's passes before the agents' queued asks are read find none silent, and are
    /// not due for them before a dead timeout from the stall's end; an agent still silent a
    /// dead timeout after the stall is lost as ever. Before, the first pass after the stall
    /// lost every agent, and their chunks were planned again.
    #[test]
    fn a_stall_of_the_server_loses_no_agent_and_one_silent_after_it_is_lost() {
        let timeout = Duration::from_secs(5);
        let stalled = |ended_ago: u64| {
            let dir = ScratchDir::new("div", "stalled");
            let mut d = Divisible::restore(
                dir.to_path_buf(),
                timeout,
                vec![stored(6_000, 4, 2)],
                &Nodes::default(),
            )
            .expect("restored");
            // Both last asked 14 s ago; the server stopped meanwhile, and listens again since
            // `ended_ago` seconds.
            let now = Instant::now();
            let ago = |s: u64| now.checked_sub(Duration::from_secs(s)).expect("after boot");
            for a in d.agents.values_mut() {
                a.last_seen = ago(14);
            }
            d.server_stalled(Stall {
                end: ago(ended_ago),
                new: Duration::from_secs(8),
            });
            d.reap();
            (d, now)
        };
        let (d, now) = stalled(0);
        assert!(d.agents.contains_key("b"), "lost on a stall");
        assert_eq!(d.jobs[&1].out.len(), 2, "b's chunks are still out");
        assert!(
            d.housekeeping_due()
                .is_some_and(|at| at >= now + timeout - Duration::from_millis(100)),
            "due a dead timeout after the stall"
        );
        let (d, _) = stalled(6);
        assert!(!d.agents.contains_key("b"), "silent after the stall");
        assert!(d.jobs[&1].out.is_empty(), "b's chunks planned again");
    }

    /// Every way a chunk changes state keeps the index: handed out, done, failed, lost at an
    /// ask, lost with its agent, rebuilt at a restart, stopped when its job fails.
    #[test]
    fn the_index_of_chunks_out_follows_every_change_of_state() {
        let dir = ScratchDir::new("div", "states");
        let mut d = Divisible::restore(
            dir.to_path_buf(),
            Duration::from_secs(60),
            vec![stored(6_000, 4, 2)],
            &Nodes::default(),
        )
        .expect("restored");
        index_holds(&d);
        // b restarted (another process): the two chunks it held are lost.
        let mut req = ask("b", true, &[]);
        req.incarnation = "b-2".into();
        d.agents.insert(
            "b".into(),
            AgentSeen {
                last_seen: Instant::now(),
                incarnation: "b-1".into(),
                memory_bytes: 1 << 30,
                attributes: Vec::new(),
                held: 0,
                asked: true,
                disk_short: false,
                grace: Grace::default(),
            },
        );
        let mut held: HashMap<&str, Vec<u64>> = HashMap::new();
        let mut recorded = 0;
        let got = d.next_chunk(req).expect("asked");
        held.entry("b")
            .or_default()
            .extend(got.orders.iter().map(|o| o.chunk));
        index_holds(&d);
        assert!(d.jobs[&1].out.iter().all(|&k| k >= 6), "4 and 5 lost");
        for _ in 0..40 {
            for name in ["a", "b"] {
                let holding = held.get(name).cloned().unwrap_or_default();
                let mut req = ask(name, holding.len() < 2, &holding);
                if name == "b" {
                    // Its new process, from now on.
                    req.incarnation = "b-2".into();
                }
                let got = d.next_chunk(req).expect("asked");
                held.entry(name)
                    .or_default()
                    .extend(got.orders.iter().map(|o| o.chunk));
                index_holds(&d);
            }
            // Each agent's oldest chunk succeeds.
            for name in ["a", "b"] {
                let Some(h) = held.get_mut(name).filter(|h| !h.is_empty()) else {
                    continue;
                };
                let k = h.remove(0);
                recorded += 1;
                let r = ChunkResult {
                    job_id: 1,
                    chunk: k,
                    success: true,
                    message: String::new(),
                    transfer_ns: 1_000,
                    compute_ns: 2_000_000 + k * 1_000,
                    reason: None,
                };
                assert!(d.record(&r, None).expect("recorded"));
                index_holds(&d);
            }
        }
        assert!(recorded > 20, "{recorded} chunks finished");
        // Both take chunks and keep them.
        for _ in 0..3 {
            for (name, incarnation) in [("a", "a-1"), ("b", "b-2")] {
                let holding = held.get(name).cloned().unwrap_or_default();
                let mut req = ask(name, holding.len() < 2, &holding);
                req.incarnation = incarnation.into();
                let got = d.next_chunk(req).expect("asked");
                held.entry(name)
                    .or_default()
                    .extend(got.orders.iter().map(|o| o.chunk));
                index_holds(&d);
            }
        }
        assert!(held["a"].len() + held["b"].len() >= 3, "{held:?}");
        // a is lost: its chunks go back.
        d.lose_agent("a");
        index_holds(&d);
        assert!(
            d.jobs[&1].out_chunks().all(|c| c.worker == "b"),
            "a's chunks are lost"
        );
        // One of b's fails: with no retries the job fails and the others are stopped.
        let k = *d.jobs[&1].out.iter().next().expect("b holds one");
        let r = ChunkResult {
            job_id: 1,
            chunk: k,
            success: false,
            message: "exit 3".into(),
            transfer_ns: 0,
            compute_ns: 0,
            reason: None,
        };
        assert!(d.record(&r, None).expect("recorded"));
        assert_eq!(d.jobs[&1].state, "failed");
        assert!(d.jobs[&1].out.is_empty());
        index_holds(&d);
    }

    /// A failed job's units that never ran are not failures: `hetsched job N` of a 100-unit job
    /// that failed when its unit 4 failed (no retries) said `96 failed`, though only that one
    /// unit ran and failed; the chunk out beside it was stopped and 94 were never sent.
    #[test]
    fn a_failed_jobs_units_that_never_ran_are_not_counted_failed() {
        let dir = ScratchDir::new("div", "notrun");
        // Units 0..4 done on a; b holds chunk 4 (unit 4) and chunk 5 (unit 5).
        let mut d = Divisible::restore(
            dir.to_path_buf(),
            Duration::from_secs(60),
            vec![stored(100, 4, 2)],
            &Nodes::default(),
        )
        .expect("restored");
        let r = ChunkResult {
            job_id: 1,
            chunk: 4,
            success: false,
            message: "exit 3".into(),
            transfer_ns: 0,
            compute_ns: 0,
            reason: None,
        };
        assert!(d.record(&r, None).expect("recorded"));
        let v = d.view(1).expect("a divisible job");
        assert_eq!(v.state, "failed");
        assert_eq!(
            (v.succeeded, v.failed, v.cancelled, v.pending, v.running),
            (4, 1, 95, 0, 0),
            "done, ran and failed, not run (stopped or never sent), pending, running"
        );
    }

    /// A unit counts as failed once however many failed chunks held it, and not at all once a
    /// re-planned chunk did it.
    #[test]
    fn units_that_failed_and_were_done_again_are_done() {
        use ChunkState::*;
        let chunks = [
            (Done, 0, 4),
            // Units 4..10 failed; 4..6 and 9..10 were done again after, in other cuts.
            (Failed, 4, 10),
            (Done, 4, 6),
            (Failed, 6, 8),
            (Done, 9, 10),
            (Stopped, 10, 12),
            (Failed, 12, 13),
            (Lost, 13, 20),
        ];
        assert_eq!(failed_not_done(chunks.iter().copied()), 3 + 1);
        assert_eq!(failed_not_done([(Done, 0, 5)].into_iter()), 0);
    }
}
