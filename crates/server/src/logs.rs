//! Task output for `hetsched log`: the server relays a client's `ReadLog` call to the agent that
//! ran the task (its `AgentLogs` listener, called with the agent token), so users need neither a
//! route to the agents nor their token.
//!
//! The [`LogRelay`] remembers, per node, where its listener is — the IP address the agent's
//! calls come from and the port it announces in `RegisterRequest`/`HeartbeatRequest` (so a
//! restarted server learns it from the next heartbeat) — and its work directory, which
//! `ListTasks` shows as the place of each task's output. This is memory only: nothing here is
//! needed to schedule, and every live agent repeats it on each heartbeat.
//!
//! Every agent holds the agent token, so the token alone cannot tell an agent that the server
//! checked the caller's right to the output (`State::authorize`): each request relayed carries
//! a log ticket ([`hetsched_proto::ticket::Log`]) under the node's data key — the key its
//! heartbeat replies give it, which the relay records from those replies ([`LogRelay::keyed`])
//! — over the file the request names and the node's name. The agent serves nothing else.
//!
//! A task's or chunk's file is named with its job's nonce ([`crate::job_nonces`]) as well:
//! job ids repeat after a restored backup or on a fresh data directory, while agents keep the
//! files of jobs their server no longer knows, and an earlier attempt is looked for on every
//! agent. The agent serves a file only from a job directory it marked with the nonce the ticket
//! names, and answers as for a missing file otherwise: another job's output of the same id is
//! never served, and the read says the attempt printed nothing (or that no agent holds it).
//!
//! With `[tls]`, every call to an agent goes over TLS and the agent's certificate must be signed
//! by the `agent_ca` configured, else by the server's own agent CA ([`crate::agent_ca`]), and
//! name the address the server calls; there is no fallback to plain text (it would hand the
//! agent token to whoever answers in clear).

use crate::convert::Wire;
use crate::jobs::divisible::DivisibleChunk;
use crate::state::State;
use hetsched_proto as pb;
use hetsched_proto::agent_logs_client::AgentLogsClient;
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tonic::Status;

/// Largest page relayed (the agents cap theirs at the same size).
pub const MAX_PAGE: u32 = pb::LOG_MAX_PAGE;

/// How long the server waits for an agent's answer.
const AGENT_TIMEOUT: Duration = Duration::from_secs(5);

#[derive(Clone, Default)]
struct AgentAt {
    name: String,
    addr: Option<SocketAddr>,
    work_dir: String,
    /// Its agent has called since this server started (registered or heartbeated): `addr` says
    /// where it listens. A node known only from the store ([`LogRelay::restored`]) has not.
    heard: bool,
    /// The data key its latest heartbeat reply gave the node (none since it registered, until
    /// its first heartbeat: its agent holds none either).
    data_key: Option<Arc<[u8]>>,
}

/// Where each node's log listener and work directory are.
pub struct LogRelay {
    nodes: Mutex<HashMap<u32, AgentAt>>,
    by_name: Mutex<HashMap<String, u32>>,
    agent_token: String,
    /// The CA of the agents' log-listener certificates: set, agents are called over TLS.
    pub agent_ca: Option<Vec<u8>>,
    /// The server's own agent CA ([`crate::agent_ca`]), when it certifies its agents' listeners
    /// (`[tls]` without `agent_ca`): `agent_ca` is then its certificate.
    pub issuer: Option<crate::agent_ca::AgentCa>,
    /// Each user's client calls held open or relayed to agents (`GetJob` waits, `ReadLog`,
    /// `WorkerLog`): bounded per user ([`crate::throttle::InFlight`]).
    pub calls: crate::throttle::InFlight,
    /// The `ReadOutput` streams of all users together: bounded by the server's
    /// `max_output_streams` ([`crate::throttle::OutputStreams`]).
    pub output_streams: crate::throttle::OutputStreams,
    /// The listener certificates signed per caller address ([`crate::throttle::CertifyRate`]).
    pub certify_rate: crate::throttle::CertifyRate,
}

impl LogRelay {
    /// A relay that calls agents with `agent_token`.
    pub fn new(agent_token: &str) -> Self {
        Self {
            nodes: Mutex::default(),
            by_name: Mutex::default(),
            agent_token: agent_token.to_string(),
            agent_ca: None,
            issuer: None,
            calls: crate::throttle::InFlight::default(),
            output_streams: crate::throttle::OutputStreams::default(),
            certify_rate: crate::throttle::CertifyRate::default(),
        }
    }

    /// Node `id` (named `name`, when known) registered or heartbeated from `ip`, announcing its
    /// listener's `port` (0 = none) and its work directory.
    pub fn seen(&self, id: u32, name: Option<&str>, ip: Option<IpAddr>, port: u32, work_dir: &str) {
        self.learn(id, name, work_dir, Some((ip, port)));
    }

    /// Records node `id`'s name and work directory, and where it listens when its agent
    /// called (`Some((ip, port))`).
    fn learn(
        &self,
        id: u32,
        name: Option<&str>,
        work_dir: &str,
        called: Option<(Option<IpAddr>, u32)>,
    ) {
        let mut nodes = self.nodes.lock().unwrap_or_else(|p| p.into_inner());
        let e = nodes.entry(id).or_default();
        if let Some(name) = name
            && e.name != name
        {
            e.name = name.to_string();
            self.by_name
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(name.to_string(), id);
        }
        if let Some((ip, port)) = called {
            e.heard = true;
            e.addr = match (ip, u16::try_from(port)) {
                (Some(ip), Ok(port)) if port != 0 => Some(SocketAddr::new(ip, port)),
                _ => None,
            };
        }
        if e.work_dir != work_dir {
            e.work_dir = work_dir.to_string();
        }
    }

    /// Node `id`, named `name`, as the store recorded it at the agent's last registration: its
    /// work directory, so a restarted server lists its tasks' output files before that agent
    /// is heard from again — and for good if it never is. Where it listens is learnt from its
    /// next call ([`LogRelay::seen`]).
    pub fn restored(&self, id: u32, name: &str, work_dir: &str) {
        self.learn(id, Some(name), work_dir, None);
    }

    /// Node `id`'s agent registered (again): it holds no data key until its first heartbeat
    /// reply, so no ticket is signed for it until then.
    pub fn registered(&self, id: u32) {
        if let Some(e) = self
            .nodes
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get_mut(&id)
        {
            e.data_key = None;
        }
    }

    /// Node `id` was given `data_key` in a heartbeat reply: log reads relayed to it are signed
    /// with it (an empty one, from no state that signs, is ignored).
    pub fn keyed(&self, id: u32, data_key: &[u8]) {
        if data_key.is_empty() {
            return;
        }
        let mut nodes = self.nodes.lock().unwrap_or_else(|p| p.into_inner());
        let e = nodes.entry(id).or_default();
        if e.data_key.as_deref() != Some(data_key) {
            e.data_key = Some(data_key.into());
        }
    }

    /// Whether node `id`'s name is known (a server restarted since its registration learns it
    /// from the state on the first heartbeat).
    pub fn knows(&self, id: u32) -> bool {
        self.nodes
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&id)
            .is_some_and(|e| !e.name.is_empty())
    }

    /// Node `name`'s agent, once it has called since this server started (before, where it
    /// listens is unknown).
    fn by_name(&self, name: &str) -> Option<AgentAt> {
        let id = *self
            .by_name
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(name)?;
        self.nodes
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&id)
            .filter(|at| at.heard)
            .cloned()
    }

    /// Where a listed task's output is: `NODE:WORK_DIR/job-J/APP-INDEX.ATTEMPT.{out,err}`
    /// (`APP-INDEX-pPROCESS.ATTEMPT` for a multi-process workflow instance), the
    /// agent's capture files; for an application in `own` (`stdout =`, `stderr =`), the files it
    /// named, filled in for the task (relative ones from its directory), or `none`:
    /// `NODE:PATH` when both streams share a file, else `NODE:STDOUT (stdout), STDERR (stderr)`.
    pub fn fill_outputs(
        &self,
        tasks: &mut [pb::TaskInfo],
        own: &HashMap<(u64, String), crate::jobs::batch::AppStreams>,
    ) {
        let nodes = self.nodes.lock().unwrap_or_else(|p| p.into_inner());
        let by_name = self.by_name.lock().unwrap_or_else(|p| p.into_inner());
        for t in tasks {
            if t.attempt == 0 || t.node.is_empty() {
                continue;
            }
            let Some(at) = by_name.get(&t.node).and_then(|id| nodes.get(id)) else {
                continue;
            };
            if at.work_dir.is_empty() {
                continue;
            }
            // A multi-process workflow instance's processes share its index: each has its own
            // files (`-pPROCESS`, as its agent names them).
            let process = match t.process {
                0 => String::new(),
                p => format!("-p{p}"),
            };
            let captured = format!(
                "{}/job-{}/{}-{}{process}.{}",
                at.work_dir.trim_end_matches('/'),
                t.job_id,
                t.app,
                t.index,
                t.attempt
            );
            let Some(own) = own.get(&(t.job_id, t.app.clone())) else {
                t.output = format!("{}:{captured}.{{out,err}}", t.node);
                continue;
            };
            let fill = hetsched_core::input::output_path::Fill {
                job: t.job_id,
                app: &t.app,
                index: t.index,
                task: t.id,
                attempt: t.attempt,
            };
            let place = |k: usize| match own.streams[k].as_str() {
                "" => format!("{captured}.{}", ["out", "err"][k]),
                hetsched_core::input::output_path::DISCARD => "none".to_string(),
                template => Path::new(&own.workdir)
                    .join(hetsched_core::input::output_path::expand(template, &fill))
                    .display()
                    .to_string(),
            };
            let (out, err) = (place(0), place(1));
            t.output = if out == err && out != "none" {
                format!("{}:{out}", t.node)
            } else {
                format!("{}:{out} (stdout), {err} (stderr)", t.node)
            };
        }
    }

    /// Asks the agent of node `node` for `req` (a stream worker's stderr: `hetsched topology
    /// log`); the reply names the node.
    pub async fn read_from(
        &self,
        node: &str,
        req: pb::AgentLogRequest,
    ) -> Result<pb::ReadLogReply, Status> {
        let at = self.by_name(node).ok_or_else(|| {
            Status::unavailable(format!(
                "node `{node}` has not heartbeated since the server started: its output cannot \
                 be reached now"
            ))
        })?;
        let mut reply = self.ask(&at, req).await?;
        reply.node = at.name;
        Ok(reply)
    }

    /// `req` with the log ticket of node `at` for what it names ([`hetsched_proto::ticket`]).
    fn signed(at: &AgentAt, mut req: pb::AgentLogRequest) -> Result<pb::AgentLogRequest, Status> {
        let Some(key) = &at.data_key else {
            return Err(Status::unavailable(format!(
                "node `{}`: its agent has not heartbeated since it registered, so it holds no \
                 data key to check the server's ticket with: its output is not available yet; \
                 try again in a few seconds",
                at.name
            )));
        };
        req.ticket =
            hetsched_proto::ticket::sign(key, &hetsched_proto::ticket::Log::of(&req, &at.name));
        Ok(req)
    }

    async fn ask(
        &self,
        at: &AgentAt,
        req: pb::AgentLogRequest,
    ) -> Result<pb::ReadLogReply, Status> {
        let Some(addr) = at.addr else {
            return Err(Status::failed_precondition(format!(
                "node `{}` serves no task output (its agent runs with --log-listen none, or is \
                 older); read the files on the node, in {}",
                at.name, at.work_dir
            )));
        };
        let req = Self::signed(at, req)?;
        let unreachable = |e: String| {
            Status::unavailable(format!(
                "node `{}` ({addr}) did not answer for the task's output: {e}",
                at.name
            ))
        };
        let scheme = if self.agent_ca.is_some() {
            "https"
        } else {
            "http"
        };
        let channel = pb::endpoint(&format!("{scheme}://{addr}"), self.agent_ca.as_deref())
            .map_err(|e| unreachable(e.to_string()))?
            .timeout(AGENT_TIMEOUT)
            .connect()
            .await
            .map_err(|e| unreachable(e.to_string()))?;
        let interceptor = pb::TokenInterceptor::new(&self.agent_token)
            .map_err(|e| Status::internal(e.to_string()))?;
        let mut client = AgentLogsClient::with_interceptor(channel, interceptor)
            .max_decoding_message_size(2 * MAX_PAGE as usize);
        match tokio::time::timeout(AGENT_TIMEOUT, client.read_log(req)).await {
            Ok(Ok(r)) => Ok(r.into_inner()),
            // The agent answered: it holds no data key yet (it started moments ago; its next
            // heartbeat reply gives it one). Not a network problem: its words, and when to ask.
            Ok(Err(s))
                if s.metadata()
                    .get(hetsched_proto::ticket::NO_KEY_HEADER)
                    .is_some() =>
            {
                Err(Status::unavailable(format!(
                    "node `{}`: its output is not available yet ({}); try again in a few seconds",
                    at.name,
                    s.message()
                )))
            }
            // The agent answered, and refused: its reason stands (no hint about transport).
            // `ResourceExhausted`: every turn for reads there is taken (the agent says to try
            // again).
            Ok(Err(s))
                if matches!(
                    s.code(),
                    tonic::Code::NotFound
                        | tonic::Code::InvalidArgument
                        | tonic::Code::PermissionDenied
                        | tonic::Code::FailedPrecondition
                        | tonic::Code::OutOfRange
                        | tonic::Code::ResourceExhausted
                ) =>
            {
                let mut e = Status::new(s.code(), format!("node `{}`: {}", at.name, s.message()));
                // What its records say of an attempt it does not hold goes on (`read_earlier`).
                if let Some(known) = s.metadata().get(pb::LOG_ABSENT_HEADER) {
                    e.metadata_mut()
                        .insert(pb::LOG_ABSENT_HEADER, known.clone());
                }
                Err(e)
            }
            Ok(Err(s)) if self.agent_ca.is_none() && s.code() != tonic::Code::Unauthenticated => {
                Err(unreachable(format!(
                    "{} (if the agent serves its output over TLS, with --log-cert, give the \
                     server the CA that signed it as `[tls] agent_ca`)",
                    s.message()
                )))
            }
            Ok(Err(s)) => Err(unreachable(s.message().to_string())),
            Err(_) => Err(unreachable("timed out".into())),
        }
    }
}

/// The id of the task with index `index` among the `tasks` tasks of `job` from id `first`
/// (one application's). Its index is its position from the first task's index unless the
/// application lists `indices` (`submit --array`): then its tasks are read page by page. A
/// workflow task of `processes` > 1 has that many tasks per index, ranks 1 to N in id order:
/// `APP:INDEX` names rank 1 (docs/runtime.md, "Workflows"), never another rank that happens to
/// sit where the index would be.
fn with_index(state: &State, job: u64, first: u64, tasks: u64, index: u32) -> Option<u64> {
    let page_of = |from: u64, n: u32| state.tasks_page(job, from, n).ok();
    // Rank 1 of a multi-process task, or the one task of a single-process index (rank 0).
    let first_rank = |t: &pb::TaskInfo| t.process <= 1;
    // The fast path: the application's first tasks give its first index and how many tasks
    // share an index (its processes), so rank 1 of `index` is at `first + (index - first
    // index) × processes` when the indices are contiguous. Two tasks tell a single-process
    // application (the usual case) from a multi-process one, whose processes are then counted
    // on a page of up to 1,000.
    let head = page_of(first, u32::try_from(tasks.min(2)).unwrap_or(2))?;
    let of_app = |t: &&pb::TaskInfo| t.id < first + tasks;
    if let Some(t0) = head.tasks.first()
        && let Some(offset) = index.checked_sub(t0.index)
    {
        let shared = head
            .tasks
            .iter()
            .filter(of_app)
            .filter(|t| t.index == t0.index)
            .count();
        let per_index = if shared < 2 {
            Some(1)
        } else {
            let page = page_of(first, u32::try_from(tasks.min(1000)).unwrap_or(1000))?;
            let n = page
                .tasks
                .iter()
                .filter(of_app)
                .take_while(|t| t.index == t0.index)
                .count() as u64;
            // A whole page of one index may not be all its processes: scan instead.
            (n < page.tasks.len() as u64 || n == tasks).then_some(n)
        };
        if let Some(per_index) = per_index
            && let Some(at) = u64::from(offset)
                .checked_mul(per_index)
                .and_then(|k| first.checked_add(k))
            && at < first + tasks
            && let Some(p) = page_of(at, 1)
            && let Some(t) = p.tasks.first()
            && t.index == index
            && first_rank(t)
        {
            return Some(t.id);
        }
    }
    let end = first + tasks;
    let mut from = first;
    while from < end {
        let page = page_of(from, 1000)?;
        for t in page.tasks.iter().take_while(|t| t.id < end) {
            if t.index == index && first_rank(t) {
                return Some(t.id);
            }
        }
        if page.next_cursor == 0 || page.next_cursor <= from {
            return None;
        }
        from = page.next_cursor;
    }
    None
}

/// Finds `job`'s task named `task` (an id, or `APP:INDEX`).
fn resolve(state: &State, job: u64, task: &str) -> Result<pb::TaskInfo, Status> {
    let info = state
        .job(job)
        .map_err(|e| crate::service::status(state.explain(e)))?;
    // The first task's id, and its index (a workflow's `instances = "1..=10"` starts at 1).
    let (first, first_index) = state
        .tasks_page(job, 0, 1)
        .map_err(|e| Status::internal(e.to_string()))?
        .tasks
        .first()
        .map(|t| (t.id, t.index))
        .ok_or_else(|| Status::not_found(format!("job {job} has no tasks")))?;
    let id = if let Ok(id) = task.parse::<u64>() {
        id
    } else if let Some((app, index)) = task.rsplit_once(':') {
        let index: u32 = index.parse().map_err(|_| {
            Status::invalid_argument(format!(
                "task `{}`: expected a task id or APP:INDEX",
                hetsched_core::text::clip(task)
            ))
        })?;
        // A job of one application answers to the job's name too: `submit --name sweep --
        // ./prog` names the job `sweep` and its application `prog`, and `log 4 sweep:3` is what
        // its user types.
        let app = match &info.apps[..] {
            [only] if only.name != app && !info.name.is_empty() && info.name == app => {
                only.name.as_str()
            }
            _ => app,
        };
        let mut start = first;
        let mut found = None;
        for a in &info.apps {
            if a.name == app {
                found = Some(with_index(state, job, start, a.tasks, index).ok_or_else(|| {
                    // Say which indices it has: a workflow's `instances = "1..=10"` starts at 1,
                    // an array (`--array 3,5,7,20`) has gaps. Up to 8 are listed, else the first
                    // three and the last.
                    const LISTED: u64 = 8;
                    let shown = a.tasks.min(LISTED) as u32;
                    let first_ones: Vec<u32> = state
                        .tasks_page(job, start, shown)
                        .map(|p| p.tasks.iter().take(shown as usize).map(|t| t.index).collect())
                        .unwrap_or_default();
                    let last = state
                        .tasks_page(job, start + a.tasks.saturating_sub(1), 1)
                        .ok()
                        .and_then(|p| p.tasks.first().map(|t| t.index));
                    let list = |v: &[u32]| v.iter().map(u32::to_string).collect::<Vec<_>>().join(", ");
                    let span = match last {
                        Some(_) if a.tasks == 1 && !first_ones.is_empty() => {
                            format!(" (index {})", list(&first_ones))
                        }
                        Some(_) if a.tasks <= LISTED && !first_ones.is_empty() => {
                            format!(" (indices {})", list(&first_ones))
                        }
                        Some(last) if first_ones.len() >= 3 => {
                            format!(" (indices {}, … {last})", list(&first_ones[..3]))
                        }
                        _ => String::new(),
                    };
                    Status::not_found(format!(
                        "application `{}` of job {job} has {} task{}{span}, none with index {index}",
                        hetsched_core::text::clip(app),
                        a.tasks,
                        if a.tasks == 1 { "" } else { "s" }
                    ))
                })?);
                break;
            }
            start += a.tasks;
        }
        found.ok_or_else(|| {
            Status::not_found(format!(
                "job {job} has no application `{}` (it has: {})",
                hetsched_core::text::clip(app),
                hetsched_core::text::some_names(info.apps.iter().map(|a| a.name.as_str()))
            ))
        })?
    } else {
        return Err(Status::invalid_argument(format!(
            "task `{}`: expected a task id (as `hetsched tasks` lists it) or APP:INDEX",
            hetsched_core::text::clip(task)
        )));
    };
    let page = state
        .tasks_page(job, id, 1)
        .map_err(|e| Status::internal(e.to_string()))?;
    page.tasks.into_iter().find(|t| t.id == id).ok_or_else(|| {
        // Say what it has: a user who typed an index (`log 4 0`) learns the ids and the
        // APP:INDEX form.
        let example = info
            .apps
            .first()
            .map_or(String::new(), |a| format!(" (`{}:{first_index}`)", a.name));
        let last = first + info.tasks.saturating_sub(1);
        let ids = if last == first {
            format!("its one task's id is {first}")
        } else {
            format!("its task ids are {first}–{last}")
        };
        Status::not_found(format!(
            "job {job} has no task {id}: {ids} (`hetsched tasks --job {job}`), or name one as \
             APP:INDEX{example}"
        ))
    })
}

/// What a `ReadLog` call names: a task of a batch job or workflow (with where its application
/// sends its stdout and stderr), or a divisible job's chunk (with the server's copy of its stdout
/// once it is done).
enum Target {
    Task(Box<pb::TaskInfo>, [String; 2]),
    Chunk(DivisibleChunk, Option<PathBuf>),
}

/// What a `ReadLog` call names, with its job's nonce ([`crate::job_nonces`]).
struct Named {
    target: Target,
    job_nonce: u64,
}

/// The chunk number in `task` (`K`, `chunk:K` or `chunk-K`) of divisible job `job`.
fn chunk_number(job: u64, task: &str) -> Result<u64, Status> {
    let number = task
        .strip_prefix("chunk:")
        .or_else(|| task.strip_prefix("chunk-"))
        .unwrap_or(task);
    number.parse().map_err(|_| {
        Status::invalid_argument(format!(
            "`{}`: job {job} is a divisible job: name one of its chunks by number (`3` or \
             `chunk:3`, as `hetsched job {job} --output json` and its failure message give it)",
            hetsched_core::text::clip(task)
        ))
    })
}

/// A divisible chunk's stdout or stderr. A chunk runs once (a failed chunk's units go out again
/// as new chunks), so it has one attempt. Its stderr, and the stdout of a chunk not done, are on
/// the agent that ran it; a done chunk's stdout is the server's own copy.
async fn read_chunk_log(
    relay: &LogRelay,
    r: pb::ReadLogRequest,
    (chunk, job_nonce): (DivisibleChunk, u64),
    stdout: Option<PathBuf>,
) -> Result<pb::ReadLogReply, Status> {
    if r.attempt > 1 {
        return Err(Status::not_found(format!(
            "chunk {} of job {} ran once (a failed chunk's units go out again as new chunks): \
             there is no attempt {}",
            chunk.chunk, r.job_id, r.attempt
        )));
    }
    let limit = r.limit.min(MAX_PAGE);
    let mut reply = match stdout.filter(|_| !r.stderr) {
        Some(path) => {
            let shown = path.display().to_string();
            tokio::task::spawn_blocking(move || own_page(&path, r.offset, limit))
                .await
                .map_err(|e| Status::internal(e.to_string()))?
                .map_err(|e| Status::internal(format!("{shown}: {e}")))?
        }
        None => {
            let at = relay.by_name(&chunk.worker).ok_or_else(|| {
                Status::unavailable(format!(
                    "node `{}` has not heartbeated since the server started: chunk {}'s output \
                     cannot be reached now",
                    chunk.worker, chunk.chunk
                ))
            })?;
            let req = pb::AgentLogRequest {
                job_id: r.job_id,
                stderr: r.stderr,
                offset: r.offset,
                limit,
                divisible: true,
                chunk: chunk.chunk,
                job_nonce,
                ..Default::default()
            };
            relay.ask(&at, req).await?
        }
    };
    reply.node = chunk.worker;
    reply.attempt = 1;
    reply.latest_attempt = 1;
    reply.task_id = chunk.chunk;
    reply.divisible_chunk = true;
    reply.task_state = match chunk.state.as_str() {
        "out" => "running",
        "done" => "succeeded",
        "stopped" => "cancelled",
        other => other,
    }
    .to_string();
    Ok(reply)
}

/// One page of a file the server itself keeps (a missing one reads as empty).
fn own_page(path: &Path, offset: i64, limit: u32) -> std::io::Result<pb::ReadLogReply> {
    let mut f = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Ok(pb::ReadLogReply {
                path: path.display().to_string(),
                ..Default::default()
            });
        }
        Err(e) => return Err(e),
    };
    let (data, offset, size) = pb::log_page(&mut f, offset, limit)?;
    Ok(pb::ReadLogReply {
        data,
        offset,
        size,
        exists: true,
        path: path.display().to_string(),
        ..Default::default()
    })
}

/// `ReadLog`: resolves the task, then asks the agent that ran the attempt (for an earlier attempt
/// than the latest, every agent in turn: the server records only the latest attempt's node).
pub async fn read_log(
    state: &Arc<Mutex<State>>,
    relay: &LogRelay,
    r: pb::ReadLogRequest,
    caller: &crate::users::Caller,
) -> Result<pb::ReadLogReply, Status> {
    // Counted among the caller's calls in flight until answered (it may call an agent).
    let _slot = relay.calls.enter(&caller.name, "ReadLog")?;
    {
        let s = state
            .lock()
            .map_err(|_| Status::internal("server state poisoned"))?;
        s.authorize(caller, r.job_id, "read its logs")
            .map_err(crate::service::status)?;
    }
    let lookup = || {
        let s = state
            .lock()
            .map_err(|_| Status::internal("server state poisoned"))?;
        resolve(&s, r.job_id, &r.task)
    };
    let multi = tokio::runtime::Handle::current().runtime_flavor()
        == tokio::runtime::RuntimeFlavor::MultiThread;
    let lookup = || -> Result<Named, Status> {
        let s = state
            .lock()
            .map_err(|_| Status::internal("server state poisoned"))?;
        let job_nonce = s.job_nonce(r.job_id);
        if s.is_divisible(r.job_id) {
            let number = chunk_number(r.job_id, &r.task)?;
            let (chunk, stdout) = s
                .divisible_chunk(r.job_id, number)
                .map_err(|e| Status::not_found(e.to_string()))?;
            return Ok(Named {
                target: Target::Chunk(chunk, stdout),
                job_nonce,
            });
        }
        drop(s);
        let task = lookup()?;
        let streams = state
            .lock()
            .map_err(|_| Status::internal("server state poisoned"))?
            .task_streams(task.job_id, &task.app)
            .streams;
        Ok(Named {
            target: Target::Task(Box::new(task), streams),
            job_nonce,
        })
    };
    let Named { target, job_nonce } = if multi {
        tokio::task::block_in_place(lookup)?
    } else {
        lookup()?
    };
    let task = match target {
        Target::Task(task, streams) => {
            let (stream, field) = if r.stderr {
                (&streams[1], "stderr")
            } else {
                (&streams[0], "stdout")
            };
            if stream == hetsched_core::input::output_path::DISCARD {
                return Err(Status::failed_precondition(format!(
                    "task {} ({}:{}) kept no {field}: its application discards it (`{field} = \"{}\"`)",
                    task.id,
                    task.app,
                    task.index,
                    hetsched_core::input::output_path::DISCARD
                )));
            }
            task
        }
        Target::Chunk(chunk, stdout) => {
            return read_chunk_log(relay, r, (chunk, job_nonce), stdout).await;
        }
    };
    if task.attempt == 0 {
        // One that ended without running (cancelled, or not run because a producer failed)
        // never will: say so, and why.
        let why = if matches!(task.state.as_str(), "cancelled" | "failed") {
            // A message that only repeats the state (`cancelled`) says nothing more.
            let said = if task.message.is_empty() || task.message == task.state {
                String::new()
            } else {
                format!(": {}", task.message)
            };
            format!("never ran (it is {}{said})", task.state)
        } else if r.follow {
            // The follower waits for the start: an empty page says which task and its state.
            return Ok(pb::ReadLogReply {
                task_id: task.id,
                task_state: task.state.clone(),
                ..Default::default()
            });
        } else {
            "has not run yet".to_string()
        };
        return Err(Status::failed_precondition(format!(
            "task {} ({}:{}) {why}: it has no output",
            task.id, task.app, task.index
        )));
    }
    let attempt = if r.attempt == 0 {
        task.attempt
    } else {
        r.attempt
    };
    if attempt > task.attempt {
        return Err(Status::not_found(format!(
            "task {} has had {}; there is no attempt {attempt}",
            task.id,
            hetsched_core::text::count(task.attempt, "attempt")
        )));
    }
    let req = pb::AgentLogRequest {
        job_id: task.job_id,
        app: task.app.clone(),
        index: task.index,
        attempt,
        stderr: r.stderr,
        offset: r.offset,
        limit: r.limit.min(MAX_PAGE),
        process: task.process,
        // Only this job's files: not those of an older job of the same id that an agent
        // kept (the agent answers as for a missing file).
        job_nonce,
        ..Default::default()
    };
    let mut reply = if attempt != task.attempt {
        read_earlier(relay, &req, task.id).await?
    } else {
        let Some(at) = relay.by_name(&task.node) else {
            // Unknown to the relay since the start: a node that left or died says so.
            let e = Status::unavailable(format!(
                "node `{}` has not heartbeated since the server started: its task outputs \
                 cannot be reached now",
                task.node
            ));
            return Err(unanswered(state, relay, &task, e));
        };
        let mut reply = match relay.ask(&at, req).await {
            Ok(reply) => reply,
            // Its agent holds nothing of the job yet: the attempt is assigned there but has
            // not started (the reply that carries it is still on its way, or it waits in the
            // agent's queue), so it has printed nothing yet. An empty page, as for a task
            // that printed nothing: a follower goes on reading rather than stop at "its job
            // directory is not on this node" in the moment between assignment and start.
            Err(e) if task.state == "running" && holds_nothing_of_the_job(&e) => {
                pb::ReadLogReply::default()
            }
            Err(e) => return Err(unanswered(state, relay, &task, e)),
        };
        reply.node = at.name;
        reply
    };
    reply.attempt = attempt;
    reply.task_id = task.id;
    reply.task_state = task.state.clone();
    reply.latest_attempt = task.attempt;
    Ok(reply)
}

/// Whether agent refusal `e` says its node holds nothing of the read's job: `NotFound` with no
/// word of what its records say of the attempt ([`pb::LOG_ABSENT_HEADER`]).
fn holds_nothing_of_the_job(e: &Status) -> bool {
    e.code() == tonic::Code::NotFound && e.metadata().get(pb::LOG_ABSENT_HEADER).is_none()
}

/// An earlier attempt's output (`req`, of task `task`): its node is not recorded, so every
/// live agent is asked. The page of the one that holds its file (named); else the error of one
/// that ran it and says its files are gone (or cannot be served); else an empty page, as an agent whose records say
/// the attempt printed nothing there answers (no node named: it may be a dead node's); else
/// what is true of the others ([`Absent::nowhere`]).
async fn read_earlier(
    relay: &LogRelay,
    req: &pb::AgentLogRequest,
    task: u64,
) -> Result<pb::ReadLogReply, Status> {
    let candidates: Vec<AgentAt> = relay
        .nodes
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .values()
        .filter(|a| a.addr.is_some())
        .cloned()
        .collect();
    let mut empty = None;
    let mut absent = Absent::default();
    for at in candidates {
        match relay.ask(&at, req.clone()).await {
            Ok(mut reply) if reply.exists => {
                reply.node = at.name;
                return Ok(reply);
            }
            Ok(mut reply) => {
                reply.node.clear();
                empty.get_or_insert(reply);
            }
            Err(e) => absent.note(&at.name, e),
        }
    }
    if let Some(e) = absent.ran_here {
        return Err(e);
    }
    empty.ok_or_else(|| absent.nowhere(req.attempt, task, req.job_id))
}

/// What the agents asked for an earlier attempt's output answered when none served it: the
/// answer of one that ran it (its files are gone, [`pb::LOG_ABSENT_HEADER`], or what is in
/// their place is not served: a FIFO, a link), the nodes that hold the job's files but never
/// ran it (their records say so), and the agents that could not be asked.
#[derive(Default)]
struct Absent {
    ran_here: Option<Status>,
    not_run_here: Vec<String>,
    unasked: Vec<Status>,
}

impl Absent {
    /// Node `node`'s refusal `e`.
    fn note(&mut self, node: &str, e: Status) {
        let known = e
            .metadata()
            .get(pb::LOG_ABSENT_HEADER)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        match known.as_deref() {
            // Its files are gone, or what is in their place is not served (a FIFO, a link).
            _ if known.as_deref() == Some(pb::LOG_RAN_HERE)
                || e.code() == tonic::Code::FailedPrecondition =>
            {
                self.ran_here.get_or_insert(e);
            }
            Some(pb::LOG_NOT_RUN_HERE) => self.not_run_here.push(node.to_string()),
            // Holds nothing of this job: nothing to say of it.
            _ if e.code() == tonic::Code::NotFound => {}
            _ => self.unasked.push(e),
        }
    }

    /// The error when no agent holds attempt `attempt` of task `task` of job `job`:
    /// `NotFound`, or `Unavailable` when an agent could not be asked (it may hold it).
    fn nowhere(self, attempt: u32, task: u64, job: u64) -> Status {
        let mut m = format!(
            "attempt {attempt} of task {task} of job {job}: no connected agent holds its output \
             (it ran on a node that is gone, or its files were removed)"
        );
        if !self.not_run_here.is_empty() {
            let n = self.not_run_here.len() as u64;
            m.push_str(&format!(
                "; {} {} {} the job's files but never ran this attempt",
                hetsched_core::text::agree(n, "node", "nodes"),
                hetsched_core::text::some_names(self.not_run_here.iter().map(String::as_str)),
                hetsched_core::text::agree(n, "holds", "hold"),
            ));
        }
        let Some(first) = self.unasked.first() else {
            return Status::not_found(m);
        };
        let n = self.unasked.len() as u64;
        m.push_str(&format!(
            "; {} could not be asked ({} may hold it): {}",
            hetsched_core::text::count(n, "agent"),
            hetsched_core::text::agree(n, "it", "they"),
            first.message()
        ));
        Status::unavailable(m)
    }
}

/// `e`, the error of asking the node that ran `task`'s latest attempt for its output — unless
/// the server knows why that node cannot answer: its agent left or it was declared dead. Then
/// that, and where the output stays (a transport error alone sent the user to the network).
fn unanswered(
    state: &Arc<Mutex<State>>,
    relay: &LogRelay,
    task: &pb::TaskInfo,
    e: Status,
) -> Status {
    if e.code() != tonic::Code::Unavailable {
        return e;
    }
    let (why, own) = {
        let Ok(s) = state.lock() else {
            return e;
        };
        let Some(why) = s.node_not_working(&task.node) else {
            return e;
        };
        (why, s.own_streams(&[(task.job_id, task.app.clone())]))
    };
    let mut shown = [task.clone()];
    relay.fill_outputs(&mut shown, &own);
    let place = match shown[0].output.as_str() {
        "" => String::new(),
        at => format!(", in {at},"),
    };
    Status::unavailable(format!(
        "node `{}` cannot be asked for the task's output: {why}; the output stays on the \
         node{place} until its agent runs there again",
        task.node
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use hetsched_proto::agent_logs_server::{AgentLogs, AgentLogsServer};
    use hetsched_proto::ticket;

    /// An agent's log listener as far as tickets go: it answers with what the ticket was
    /// verified as, under the key given (none: the agent's no-key refusal).
    struct Agent {
        node: &'static str,
        key: Option<Vec<u8>>,
    }

    #[tonic::async_trait]
    impl AgentLogs for Agent {
        async fn read_log(
            &self,
            req: tonic::Request<pb::AgentLogRequest>,
        ) -> Result<tonic::Response<pb::ReadLogReply>, Status> {
            let r = req.into_inner();
            let Some(key) = &self.key else {
                let mut s = Status::unavailable("node \"a\" holds no data key from its server yet");
                s.metadata_mut().insert(
                    ticket::NO_KEY_HEADER,
                    tonic::metadata::MetadataValue::from_static("1"),
                );
                return Err(s);
            };
            let ok = ticket::verify(key, &ticket::Log::of(&r, self.node), &r.ticket);
            Ok(tonic::Response::new(pb::ReadLogReply {
                data: if ok {
                    b"verified".to_vec()
                } else {
                    b"refused".to_vec()
                },
                exists: true,
                ..Default::default()
            }))
        }
    }

    /// An agent's log listener that holds no file of any read: it refuses `NotFound`, marked
    /// with what its records say of the attempt (`known`), as the agent's listener does.
    struct Without {
        node: &'static str,
        known: Option<&'static str>,
    }

    /// An agent's log listener that answers every read `FailedPrecondition`, as one whose file
    /// in the read's place is not served (a FIFO the task made there).
    struct Fifo;

    #[tonic::async_trait]
    impl AgentLogs for Fifo {
        async fn read_log(
            &self,
            _req: tonic::Request<pb::AgentLogRequest>,
        ) -> Result<tonic::Response<pb::ReadLogReply>, Status> {
            Err(Status::failed_precondition(
                "`/w/job-7/sim-2.1.out` is a FIFO",
            ))
        }
    }

    #[tonic::async_trait]
    impl AgentLogs for Without {
        async fn read_log(
            &self,
            _req: tonic::Request<pb::AgentLogRequest>,
        ) -> Result<tonic::Response<pb::ReadLogReply>, Status> {
            let mut s = Status::not_found(format!(
                "the stdout of job 7's task \"sim\":2 attempt 1 is gone ({} on {})",
                self.known.unwrap_or("nothing of the job"),
                self.node
            ));
            if let Some(known) = self.known {
                s.metadata_mut().insert(
                    pb::LOG_ABSENT_HEADER,
                    tonic::metadata::MetadataValue::from_static(known),
                );
            }
            Err(s)
        }
    }

    /// An earlier attempt's node is not recorded, so every agent is asked: when none holds its
    /// output, the error says so (and which nodes hold the job but never ran the attempt, and
    /// that an agent that could not be asked may hold it), whichever agent answered last; one
    /// that ran it and says its files are gone is named. Before, the error was the last
    /// agent's `NotFound`, true of that node only.
    #[tokio::test]
    async fn an_earlier_attempt_no_agent_holds_is_said_so_and_one_that_ran_it_is_named() {
        let relay = LogRelay::new("agent-token");
        let join = |id: u32, name: &str, addr: SocketAddr| {
            relay.seen(
                id,
                Some(name),
                Some(addr.ip()),
                u32::from(addr.port()),
                "/w",
            );
            relay.keyed(id, &[5; 32]);
        };
        let (a, b) = (
            agent(Without {
                node: "a",
                known: Some(pb::LOG_NOT_RUN_HERE),
            })
            .await,
            agent(Without {
                node: "b",
                known: None,
            })
            .await,
        );
        join(1, "a", a);
        join(2, "b", b);
        let req = pb::AgentLogRequest {
            job_id: 7,
            app: "sim".into(),
            index: 2,
            attempt: 1,
            ..Default::default()
        };
        let e = read_earlier(&relay, &req, 3).await.expect_err("nowhere");
        assert_eq!(e.code(), tonic::Code::NotFound, "{e:?}");
        assert_eq!(
            e.message(),
            "attempt 1 of task 3 of job 7: no connected agent holds its output (it ran on a \
             node that is gone, or its files were removed); node a holds the job's files but \
             never ran this attempt"
        );
        // An agent that does not answer may hold it.
        let gone = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind")
            .local_addr()
            .expect("addr");
        join(3, "d", gone);
        let e = read_earlier(&relay, &req, 3).await.expect_err("unasked");
        assert_eq!(e.code(), tonic::Code::Unavailable, "{e:?}");
        assert!(
            e.message().contains("no connected agent holds its output")
                && e.message()
                    .contains("; 1 agent could not be asked (it may hold it): node `d`"),
            "{}",
            e.message()
        );
        // One whose file is there but not served: its word, named.
        join(5, "f", agent(Fifo).await);
        let e = read_earlier(&relay, &req, 3).await.expect_err("a FIFO");
        assert_eq!(e.code(), tonic::Code::FailedPrecondition, "{e:?}");
        assert_eq!(e.message(), "node `f`: `/w/job-7/sim-2.1.out` is a FIFO");
        relay.seen(5, Some("f"), None, 0, "/w");
        // The node that ran it: its word, named, whatever the others said.
        let c = agent(Without {
            node: "c",
            known: Some(pb::LOG_RAN_HERE),
        })
        .await;
        join(4, "c", c);
        let e = read_earlier(&relay, &req, 3).await.expect_err("gone");
        assert_eq!(e.code(), tonic::Code::NotFound, "{e:?}");
        assert_eq!(
            e.message(),
            "node `c`: the stdout of job 7's task \"sim\":2 attempt 1 is gone (ran-here on c)"
        );
    }

    async fn agent(a: impl AgentLogs) -> SocketAddr {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(AgentLogsServer::new(a))
                .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener)),
        );
        addr
    }

    /// Every read the relay sends an agent carries the log ticket of what it names under the
    /// data key the node's heartbeat reply gave it (the key its agent verifies with); before
    /// the first heartbeat since its registration none is sent, and an agent without a key
    /// yet is said to be not ready, not unreachable.
    #[tokio::test]
    async fn a_relayed_read_carries_the_ticket_the_nodes_data_key_verifies() {
        let keys = crate::tickets::OffloadKeys::new(&[3; 32]);
        let key = keys.data_key("a", "id-a");
        let addr = agent(Agent {
            node: "a",
            key: Some(key.clone()),
        })
        .await;
        let relay = LogRelay::new("agent-token");
        relay.seen(1, Some("a"), Some(addr.ip()), u32::from(addr.port()), "/w");
        let task = pb::AgentLogRequest {
            job_id: 4,
            app: "sim".into(),
            index: 2,
            attempt: 1,
            ..Default::default()
        };
        let e = relay
            .read_from("a", task.clone())
            .await
            .expect_err("no heartbeat yet");
        assert_eq!(e.code(), tonic::Code::Unavailable);
        assert!(e.message().contains("not available yet"), "{}", e.message());

        relay.keyed(1, &key);
        let worker = pb::AgentLogRequest {
            topology: "t".into(),
            generation: 2,
            worker: 1,
            run_as: "alice".into(),
            ..Default::default()
        };
        let chunk = pb::AgentLogRequest {
            job_id: 5,
            divisible: true,
            chunk: 3,
            stderr: true,
            ..Default::default()
        };
        for req in [task.clone(), worker, chunk] {
            let r = relay.read_from("a", req.clone()).await.expect("read");
            assert_eq!(r.data, b"verified", "{req:?}");
        }
        // Another node's key (the relay's record of it changed): the agent's key refuses it.
        relay.keyed(1, &keys.data_key("b", "id-a"));
        let r = relay.read_from("a", task.clone()).await.expect("read");
        assert_eq!(r.data, b"refused");
        // A new registration forgets the key until the next heartbeat.
        relay.registered(1);
        assert!(relay.read_from("a", task.clone()).await.is_err());

        let addr = agent(Agent {
            node: "a",
            key: None,
        })
        .await;
        relay.seen(1, Some("a"), Some(addr.ip()), u32::from(addr.port()), "/w");
        relay.keyed(1, &key);
        let e = relay.read_from("a", task).await.expect_err("no key there");
        assert_eq!(e.code(), tonic::Code::Unavailable);
        assert!(
            e.message()
                .starts_with("node `a`: its output is not available yet")
                && !e.message().contains("did not answer"),
            "{}",
            e.message()
        );
    }

    /// `APP:INDEX` of a workflow task of several processes names rank 1 of that index, for
    /// every index and task, as docs/runtime.md says; each rank is still read by its task id.
    /// Before, the fast path took the task at `first + index`, rank 2 of index 1 and rank 1 of
    /// index 2, and the scan took whichever rank came first.
    #[test]
    fn app_index_of_a_multi_process_workflow_task_names_rank_1() {
        use crate::convert::Wire;
        let dir = hetsched_core::testkit::ScratchDir::new("logs", "ranks");
        let config = crate::ServerConfig {
            data_dir: dir.to_path_buf(),
            ..Default::default()
        };
        let store = crate::store::Store::open(&dir.join("state.db")).expect("store");
        let mut s = State::open(&config, store).expect("state");
        let wf = r#"
[[task]]
name = "A"
instances = 2
processes = 2
outputs = ["a"]
command = "echo A{index}p$HETSCHED_PROCESS > {output:a}"

[[task]]
name = "B"
instances = 2
processes = 2
inputs = ["a"]
command = "cat {input:a}"

[[task]]
name = "C"
instances = "3..=5"
command = "true"
"#;
        let job = s.submit("wf.toml", wf, "/").expect("submit").job_id;
        for (app, processes) in [("A", 2), ("B", 2), ("C", 0)] {
            let values: &[u32] = if app == "C" { &[3, 4, 5] } else { &[1, 2] };
            for &index in values {
                let t = resolve(&s, job, &format!("{app}:{index}")).expect("resolve");
                assert_eq!(
                    (t.app.as_str(), t.index, t.process),
                    (app, index, processes.min(1)),
                    "{app}:{index}"
                );
            }
        }
        // Rank 2 is read by its id.
        let all = s.tasks(job).expect("tasks").tasks;
        let rank2 = all
            .iter()
            .find(|t| t.app == "B" && t.index == 2 && t.process == 2)
            .expect("B:2 rank 2");
        let t = resolve(&s, job, &rank2.id.to_string()).expect("by id");
        assert_eq!((t.index, t.process), (2, 2));
        assert!(resolve(&s, job, "C:6").is_err());
    }
}
