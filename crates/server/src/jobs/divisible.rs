//! Divisible jobs (spec 03 in the runtime; docs/divisible.md, "In the runtime"): the server is the
//! one-port master of every `[[divisible]]` job. It drives the core's
//! [`OnlineMaster`] — the same planners and `StarMaster` protocol as `hetsched sim divisible` — with
//! what the agents report, streams each chunk's input slice to the agent it planned the chunk
//! for (one transfer at a time: a single `port` lock), records each chunk's result once, and
//! gathers the chunks' outputs in unit order.
//!
//! **How it sits beside the [`super::JobKind`] contract.** Chunks do not travel in heartbeats: a
//! chunk's input and output are streamed (the one port must be a real, serial stream, and an
//! output may be large), so agents fetch work from their own `Divisible` service
//! ([`crate::divisible_service`], the protobuf edge) and this module keeps its own lock, store
//! file and reaper tick. It is therefore not (yet) a `Kind` of [`super::Kind`]: its jobs take
//! batch-kind job ids, because the batch side of the server stores the job row (its id, file
//! text, submission key and name — idempotent submission is the batch path's, and a divisible
//! job is a batch job of no tasks there), and the service edge overrides the listing rows of
//! those ids with [`Divisible::view`]. This module keeps the rest in its own SQLite file,
//! `DATA_DIR/divisible.db` (WAL, `synchronous=FULL`), and files under `DATA_DIR/divisible/job-N/`:
//! `input` (the submitted input), `chunk-K.out` (a finished chunk's output) and `output` (the
//! gathered output). A chunk's success is committed only after its output file is on disk, and
//! only while the chunk is out: a repeated or late result is acknowledged and ignored.
//!
//! After a restart the master is rebuilt from the chunk rows: finished chunks are measurements
//! again, chunks that were out stay their agents' (an agent keeps computing while the server is
//! away and uploads when it is back) until their agent says it no longer holds them or is
//! declared dead.

use hetsched_core::input::divisible::DivisibleSpec;
use hetsched_core::input::workload::{Command, parse_workload};
use hetsched_core::policy::divisible::online::{OnlineConfig, OnlineMaster, Order, Recorded};
use rusqlite::{Connection, params};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tracing::{info, warn};

/// Size of the pieces inputs and outputs are streamed in.
pub const PIECE: usize = 256 << 10;

/// A chunk the master believes out but its agent does not list is lost after this long (the
/// reply carrying it may still be on its way).
const GRACE: Duration = Duration::from_secs(2);

const SCHEMA: &str = "
PRAGMA journal_mode=WAL;
PRAGMA synchronous=FULL;
CREATE TABLE IF NOT EXISTS div_jobs(
    id INTEGER PRIMARY KEY, origin TEXT NOT NULL, text TEXT NOT NULL, state TEXT NOT NULL,
    message TEXT NOT NULL DEFAULT '', submitted_ns INTEGER NOT NULL,
    finished_ns INTEGER NOT NULL DEFAULT 0, output_bytes INTEGER NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS div_chunks(
    job INTEGER NOT NULL, chunk INTEGER NOT NULL, round INTEGER NOT NULL, worker TEXT NOT NULL,
    start INTEGER NOT NULL, stop INTEGER NOT NULL, state TEXT NOT NULL,
    transfer_ns INTEGER NOT NULL DEFAULT 0, compute_ns INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY(job, chunk));
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
}

/// A worker of a divisible job as `hetsched job N` shows it.
#[derive(Clone, Debug, Default)]
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
#[derive(Clone, Debug, Default)]
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
    /// out, done, failed, lost.
    pub state: String,
    /// Seconds.
    pub transfer_s: f64,
    /// Seconds.
    pub compute_s: f64,
}

/// A divisible job's load, rounds, chunks and measured workers.
#[derive(Clone, Debug, Default)]
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
    /// Units: not yet sent, out, done, lost with a failed job.
    pub pending: u64,
    /// Units out.
    pub running: u64,
    /// Units done.
    pub succeeded: u64,
    /// Units not done when the job failed.
    pub failed: u64,
    /// The rest.
    pub info: DivisibleInfo,
}

fn now_ns() -> u64 {
    crate::state::now_ns()
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ChunkState {
    Out,
    Done,
    Failed,
    Lost,
}

impl ChunkState {
    fn as_str(self) -> &'static str {
        match self {
            ChunkState::Out => "out",
            ChunkState::Done => "done",
            ChunkState::Failed => "failed",
            ChunkState::Lost => "lost",
        }
    }
    fn parse(s: &str) -> Self {
        match s {
            "out" => ChunkState::Out,
            "done" => ChunkState::Done,
            "failed" => ChunkState::Failed,
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
    sent: Instant,
}

struct Job {
    spec: DivisibleSpec,
    argv: Vec<String>,
    master: OnlineMaster,
    /// running, completed, failed, cancelled.
    state: String,
    message: String,
    finished_ns: u64,
    output_bytes: u64,
    chunks: BTreeMap<u64, ChunkRec>,
}

struct AgentSeen {
    last_seen: Instant,
    incarnation: String,
    memory_bytes: u64,
}

struct Inner {
    conn: Connection,
    jobs: BTreeMap<u64, Job>,
    agents: HashMap<String, AgentSeen>,
}

/// The divisible jobs of one server.
pub struct Divisible {
    inner: Mutex<Inner>,
    port: Arc<tokio::sync::Mutex<()>>,
    dir: PathBuf,
    dead_timeout: Duration,
}

fn argv_of(c: &Command) -> Vec<String> {
    match c {
        Command::Shell(s) => vec!["sh".into(), "-c".into(), s.clone()],
        Command::Argv(v) => v.clone(),
    }
}

/// The one `[[divisible]]` section of a job file that has one, checked for the runtime (one
/// section, no `[[application]]` beside it, the input as long as it must be). `Ok(None)`: a
/// batch job file.
pub fn prepare(origin: &str, text: &str, input: &[u8]) -> Result<Option<DivisibleSpec>, DivError> {
    let Ok(w) = parse_workload(origin, text) else {
        // The batch path reports the error with its location.
        return Ok(None);
    };
    if w.divisible.is_empty() {
        return Ok(None);
    }
    if !w.applications.is_empty() || w.divisible.len() > 1 {
        return Err(DivError::Invalid(format!(
            "{origin}: divisible: a job file holds either [[application]] tables or one [[divisible]] load; submit the others as their own jobs"
        )));
    }
    let d = w.divisible[0].clone();
    let src = hetsched_core::input::Source::new(origin, text);
    d.check_input_len(&src, 0, input.len() as u64)
        .map_err(|e| DivError::Invalid(e.to_string()))?;
    Ok(Some(d))
}

fn job_dir(dir: &Path, id: u64) -> PathBuf {
    dir.join(format!("job-{id}"))
}

fn write_durably(path: &Path, data: &[u8]) -> std::io::Result<()> {
    let tmp = path.with_extension("tmp");
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(data)?;
    f.sync_all()?;
    std::fs::rename(&tmp, path)?;
    if let Some(parent) = path.parent() {
        std::fs::File::open(parent)?.sync_all()?;
    }
    Ok(())
}

impl Divisible {
    /// Opens (or creates) the divisible store in `data_dir` and rebuilds the running jobs.
    pub fn open(data_dir: &Path, dead_timeout: Duration) -> Result<Self, String> {
        let dir = data_dir.join("divisible");
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let conn = Connection::open(data_dir.join("divisible.db")).map_err(|e| e.to_string())?;
        conn.execute_batch(SCHEMA).map_err(|e| e.to_string())?;
        let mut inner = Inner {
            conn,
            jobs: BTreeMap::new(),
            agents: HashMap::new(),
        };
        restore(&mut inner).map_err(|e| format!("divisible store: {e}"))?;
        let now = Instant::now();
        // Agents that held chunks get a dead timeout to come back before their chunks move.
        let names: HashSet<String> = inner
            .jobs
            .values()
            .flat_map(|j| j.chunks.values())
            .filter(|c| c.state == ChunkState::Out)
            .map(|c| c.worker.clone())
            .collect();
        // Workers of the rebuilt masters that held nothing are taken for gone until they call.
        for job in inner.jobs.values_mut() {
            let gone: Vec<usize> = (0..job.master.workers().len())
                .filter(|&i| !names.contains(&job.master.workers()[i].name))
                .collect();
            for i in gone {
                job.master.lose(i);
            }
        }
        for name in names {
            inner.agents.insert(
                name,
                AgentSeen {
                    last_seen: now,
                    incarnation: String::new(),
                    memory_bytes: 0,
                },
            );
        }
        Ok(Divisible {
            inner: Mutex::new(inner),
            port: Arc::new(tokio::sync::Mutex::new(())),
            dir,
            dead_timeout,
        })
    }

    fn lock(&self) -> Result<std::sync::MutexGuard<'_, Inner>, DivError> {
        self.inner
            .lock()
            .map_err(|_| DivError::Internal("state poisoned".into()))
    }

    /// The one port: held while a chunk's input is streamed.
    pub fn port(&self) -> Arc<tokio::sync::Mutex<()>> {
        self.port.clone()
    }

    /// Whether job `id` is a divisible job.
    pub fn knows(&self, id: u64) -> bool {
        self.lock().is_ok_and(|i| i.jobs.contains_key(&id))
    }

    /// Stores job `id` (whose row the batch side has just stored) and its input. A job already
    /// known (a repeated submission) is left as it is.
    pub fn create(
        &self,
        id: u64,
        origin: &str,
        text: &str,
        spec: DivisibleSpec,
        input: &[u8],
    ) -> Result<(), DivError> {
        let mut inner = self.lock()?;
        if inner.jobs.contains_key(&id) {
            return Ok(());
        }
        let jd = job_dir(&self.dir, id);
        std::fs::create_dir_all(&jd).map_err(internal)?;
        if spec.input.is_some() {
            let need = spec.input_bytes() as usize;
            write_durably(&jd.join("input"), &input[..need.min(input.len())]).map_err(internal)?;
        }
        let submitted = now_ns();
        inner
            .conn
            .execute(
                "INSERT INTO div_jobs(id, origin, text, state, submitted_ns) VALUES (?1, ?2, ?3, 'running', ?4)",
                params![id as i64, origin, text, submitted as i64],
            )
            .map_err(internal)?;
        let mut job = new_job(spec);
        let live: Vec<(String, u64)> = inner
            .agents
            .iter()
            .filter(|(_, a)| a.last_seen.elapsed() < self.dead_timeout && a.memory_bytes > 0)
            .map(|(n, a)| (n.clone(), a.memory_bytes))
            .collect();
        let mut live = live;
        live.sort();
        for (name, mem) in live {
            let units = memory_units(&job.spec, mem);
            job.master.join(&name, units);
        }
        info!(job = id, units = job.spec.units(), algo = %job.spec.algo(), "divisible job accepted");
        inner.jobs.insert(id, job);
        Ok(())
    }

    /// `NextChunk`: notes the agent, reconciles what it holds, and, when it has room, hands it
    /// the next chunk some running job planned for it.
    pub fn next_chunk(&self, req: ChunkRequest) -> Result<ChunkReply, DivError> {
        let mut guard = self.lock()?;
        let inner = &mut *guard;
        let name = req.name.clone();
        let now = Instant::now();
        let restarted = match inner.agents.get(&name) {
            Some(a) => !a.incarnation.is_empty() && a.incarnation != req.incarnation,
            None => false,
        };
        inner.agents.insert(
            name.clone(),
            AgentSeen {
                last_seen: now,
                incarnation: req.incarnation.clone(),
                memory_bytes: req.memory_bytes,
            },
        );
        let holding: HashSet<(u64, u64)> =
            req.holding.iter().map(|k| (k.job_id, k.chunk)).collect();
        let mut reply = ChunkReply::default();
        // Chunks it holds that are not its own any more.
        for k in &req.holding {
            let mine = inner.jobs.get(&k.job_id).is_some_and(|j| {
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
        for (&id, job) in inner.jobs.iter_mut() {
            if job.state != "running" {
                continue;
            }
            let w = job
                .master
                .join(&name, memory_units(&job.spec, req.memory_bytes));
            // Reconcile: chunks out on this agent that it does not hold are lost.
            let lost: Vec<u64> = job
                .chunks
                .values()
                .filter(|c| {
                    c.state == ChunkState::Out
                        && c.worker == name
                        && (restarted
                            || (!holding.contains(&(id, c.order.chunk))
                                && c.sent.elapsed() > GRACE))
                })
                .map(|c| c.order.chunk)
                .collect();
            for chunk in lost {
                if job.master.lose_chunk(chunk) == Recorded::Yes {
                    warn!(job = id, chunk, node = %name, "chunk lost: its agent no longer holds it; its units are re-planned");
                    set_chunk(&inner.conn, id, job, chunk, ChunkState::Lost, 0, 0)?;
                }
            }
            if req.room
                && orders.is_empty()
                && let Some(o) = job.master.next(w)
            {
                inner
                    .conn
                    .execute(
                        "INSERT INTO div_chunks(job, chunk, round, worker, start, stop, state) VALUES (?1, ?2, ?3, ?4, ?5, ?6, 'out')",
                        params![id as i64, o.chunk as i64, o.round, name, o.start as i64, o.end as i64],
                    )
                    .map_err(internal)?;
                job.chunks.insert(
                    o.chunk,
                    ChunkRec {
                        order: o,
                        worker: name.clone(),
                        state: ChunkState::Out,
                        transfer_ns: 0,
                        compute_ns: 0,
                        sent: now,
                    },
                );
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
                });
            }
        }
        reply.orders = orders;
        Ok(reply)
    }

    /// Where chunk `key`'s input is: the job's input file, offset and length — if the chunk is
    /// out.
    pub fn input_slice(&self, key: &ChunkKey) -> Result<(PathBuf, u64, u64), DivError> {
        let inner = self.lock()?;
        let job = inner
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
    /// True when it counted.
    pub fn record(&self, h: &ChunkResult, tmp: Option<&Path>) -> Result<bool, DivError> {
        let mut guard = self.lock()?;
        let inner = &mut *guard;
        let Some(job) = inner.jobs.get_mut(&h.job_id) else {
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
                &inner.conn,
                h.job_id,
                job,
                h.chunk,
                ChunkState::Done,
                h.transfer_ns,
                h.compute_ns,
            )?;
            job.master.finish(
                h.chunk,
                h.transfer_ns as f64 / 1e9,
                h.compute_ns as f64 / 1e9,
            );
            if job.master.is_done() {
                gather(&inner.conn, &jd, h.job_id, job)?;
            }
        } else {
            set_chunk(
                &inner.conn,
                h.job_id,
                job,
                h.chunk,
                ChunkState::Failed,
                h.transfer_ns,
                h.compute_ns,
            )?;
            warn!(
                job = h.job_id,
                chunk = h.chunk,
                "chunk failed: {}",
                h.message
            );
            job.master.fail(h.chunk, &h.message);
            if let Some(why) = job.master.failure() {
                let why = why.to_string();
                finish_job(&inner.conn, h.job_id, job, "failed", &why)?;
            }
        }
        Ok(true)
    }

    /// Cancels a running job: no more chunks are sent, results are ignored, and agents are told
    /// to drop the chunks they hold. The units not done (0 if it had finished).
    pub fn cancel(&self, id: u64) -> Result<u64, DivError> {
        let mut guard = self.lock()?;
        let inner = &mut *guard;
        let job = inner
            .jobs
            .get_mut(&id)
            .ok_or_else(|| DivError::NotFound(format!("no job {id}")))?;
        if job.state != "running" {
            return Ok(0);
        }
        let left = job.spec.units() - job.master.units_done();
        finish_job(&inner.conn, id, job, "cancelled", "cancelled by a user")?;
        Ok(left)
    }

    /// Declares agents silent for the dead timeout lost: their chunks are re-planned.
    pub fn reap(&self) {
        let Ok(mut guard) = self.inner.lock() else {
            return;
        };
        let inner = &mut *guard;
        let dead: Vec<String> = inner
            .agents
            .iter()
            .filter(|(_, a)| a.last_seen.elapsed() >= self.dead_timeout)
            .map(|(n, _)| n.clone())
            .collect();
        for name in dead {
            inner.agents.remove(&name);
            for (&id, job) in inner.jobs.iter_mut() {
                let Some(w) = job.master.workers().iter().position(|w| w.name == name) else {
                    continue;
                };
                if !job.master.workers()[w].alive {
                    continue;
                }
                let lost = job.master.lose(w);
                if job.state == "running" && !lost.is_empty() {
                    warn!(job = id, node = %name, chunks = lost.len(), "agent lost: its chunks are re-planned");
                }
                for o in lost {
                    if let Err(e) = set_chunk(&inner.conn, id, job, o.chunk, ChunkState::Lost, 0, 0)
                    {
                        tracing::error!("divisible: {e}");
                    }
                }
            }
        }
    }

    /// Job `id` as a listing shows it, if it is a divisible job.
    pub fn view(&self, id: u64) -> Option<DivisibleView> {
        let inner = self.inner.lock().ok()?;
        let job = inner.jobs.get(&id)?;
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
        let chunks: Vec<DivisibleChunk> = job
            .chunks
            .values()
            .map(|c| DivisibleChunk {
                chunk: c.order.chunk,
                round: c.order.round,
                worker: c.worker.clone(),
                start: c.order.start,
                end: c.order.end,
                state: c.state.as_str().into(),
                transfer_s: c.transfer_ns as f64 / 1e9,
                compute_s: c.compute_ns as f64 / 1e9,
            })
            .collect();
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
        };
        Some(DivisibleView {
            state: job.state.clone(),
            units,
            finished_ns: job.finished_ns,
            pending: if running { units - done - out } else { 0 },
            running: if running { out } else { 0 },
            succeeded: done,
            failed: if job.state == "failed" {
                units - done
            } else {
                0
            },
            info,
        })
    }

    /// The gathered output of a completed job.
    pub fn output_path(&self, id: u64) -> Result<PathBuf, DivError> {
        let inner = self.lock()?;
        let job = inner
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

    /// A fresh temporary file for a chunk's output.
    pub fn temp_output(&self, h: &ChunkResult) -> PathBuf {
        job_dir(&self.dir, h.job_id).join(format!(
            "chunk-{}.{:016x}.part",
            h.chunk,
            rand::random::<u64>()
        ))
    }
}

fn memory_units(spec: &DivisibleSpec, memory_bytes: u64) -> Option<u64> {
    match spec.memory_per_unit {
        Some(m) if memory_bytes > 0 => Some(memory_bytes / m.as_u64().max(1)),
        _ => None,
    }
}

fn new_job(spec: DivisibleSpec) -> Job {
    let master = OnlineMaster::new(OnlineConfig {
        algo: spec.algo(),
        units: spec.units(),
        retries: spec.retries(),
    });
    Job {
        argv: argv_of(spec.command.get_ref()),
        spec,
        master,
        state: "running".into(),
        message: String::new(),
        finished_ns: 0,
        output_bytes: 0,
        chunks: BTreeMap::new(),
    }
}

fn set_chunk(
    conn: &Connection,
    id: u64,
    job: &mut Job,
    chunk: u64,
    state: ChunkState,
    transfer_ns: u64,
    compute_ns: u64,
) -> Result<(), DivError> {
    conn.execute(
        "UPDATE div_chunks SET state = ?3, transfer_ns = ?4, compute_ns = ?5 WHERE job = ?1 AND chunk = ?2",
        params![id as i64, chunk as i64, state.as_str(), transfer_ns as i64, compute_ns as i64],
    )
    .map_err(internal)?;
    if let Some(c) = job.chunks.get_mut(&chunk) {
        c.state = state;
        c.transfer_ns = transfer_ns;
        c.compute_ns = compute_ns;
    }
    Ok(())
}

fn finish_job(
    conn: &Connection,
    id: u64,
    job: &mut Job,
    state: &str,
    message: &str,
) -> Result<(), DivError> {
    job.state = state.into();
    job.message = message.into();
    job.finished_ns = now_ns();
    conn.execute(
        "UPDATE div_jobs SET state = ?2, message = ?3, finished_ns = ?4, output_bytes = ?5 WHERE id = ?1",
        params![id as i64, state, message, job.finished_ns as i64, job.output_bytes as i64],
    )
    .map_err(internal)?;
    info!(job = id, state, "divisible job finished {message}");
    Ok(())
}

/// Concatenates the finished chunks' outputs in unit order into `output`.
fn gather(conn: &Connection, jd: &Path, id: u64, job: &mut Job) -> Result<(), DivError> {
    let mut done: Vec<&ChunkRec> = job
        .chunks
        .values()
        .filter(|c| c.state == ChunkState::Done)
        .collect();
    done.sort_by_key(|c| c.order.start);
    let tmp = jd.join("output.tmp");
    let result = (|| -> Result<u64, String> {
        let mut out = std::fs::File::create(&tmp).map_err(|e| format!("output: {e}"))?;
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
            finish_job(conn, id, job, "completed", "")
        }
        Err(why) => finish_job(conn, id, job, "failed", &why),
    }
}

/// A stored chunk: number, round, worker, start, end, state, transfer ns, compute ns.
type ChunkRow = (u64, u32, String, u64, u64, String, u64, u64);

fn restore(inner: &mut Inner) -> rusqlite::Result<()> {
    let rows: Vec<(u64, String, String, String, String, u64, u64)> = {
        let mut st = inner.conn.prepare(
            "SELECT id, origin, text, state, message, finished_ns, output_bytes FROM div_jobs ORDER BY id",
        )?;
        st.query_map([], |r| {
            Ok((
                r.get::<_, i64>(0)? as u64,
                r.get(1)?,
                r.get(2)?,
                r.get(3)?,
                r.get(4)?,
                r.get::<_, i64>(5)? as u64,
                r.get::<_, i64>(6)? as u64,
            ))
        })?
        .collect::<Result<_, _>>()?
    };
    for (id, origin, text, state, message, finished_ns, output_bytes) in rows {
        let spec = match parse_workload(&origin, &text)
            .ok()
            .and_then(|w| w.divisible.into_iter().next())
        {
            Some(s) => s,
            None => {
                warn!(job = id, "divisible job's file no longer parses; skipped");
                continue;
            }
        };
        let mut job = new_job(spec);
        job.state = state;
        job.message = message;
        job.finished_ns = finished_ns;
        job.output_bytes = output_bytes;
        let mut st = inner.conn.prepare(
            "SELECT chunk, round, worker, start, stop, state, transfer_ns, compute_ns FROM div_chunks WHERE job = ?1 ORDER BY chunk",
        )?;
        let chunks: Vec<ChunkRow> = st
            .query_map([id as i64], |r| {
                Ok((
                    r.get::<_, i64>(0)? as u64,
                    r.get(1)?,
                    r.get(2)?,
                    r.get::<_, i64>(3)? as u64,
                    r.get::<_, i64>(4)? as u64,
                    r.get(5)?,
                    r.get::<_, i64>(6)? as u64,
                    r.get::<_, i64>(7)? as u64,
                ))
            })?
            .collect::<Result<_, _>>()?;
        for (chunk, round, worker, start, end, state, t, c) in chunks {
            let w = job.master.join(&worker, None);
            let order = Order {
                chunk,
                worker: w,
                round,
                start,
                end,
            };
            let state = ChunkState::parse(&state);
            match state {
                ChunkState::Done => job
                    .master
                    .restore_done(order, t as f64 / 1e9, c as f64 / 1e9),
                ChunkState::Out => job.master.restore_out(order),
                // Lost and failed chunks' units are in the pool; a lost or failed chunk still
                // takes its number.
                _ => job.master.restore_lost(order),
            }
            job.chunks.insert(
                chunk,
                ChunkRec {
                    order,
                    worker,
                    state,
                    transfer_ns: t,
                    compute_ns: c,
                    sent: Instant::now(),
                },
            );
        }
        inner.jobs.insert(id, job);
    }
    Ok(())
}
