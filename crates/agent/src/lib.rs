//! hetsched's agent (node manager): detects the node's resources, registers with the server, and
//! heartbeats. A heartbeat carries the tasks running here (with the bytes each has read, from
//! `/proc/PID/io`) and every finished result the server has not acknowledged yet; the reply
//! acknowledges results, assigns new tasks, names tasks to kill, and names the running multi-node
//! tasks this node is a member of (their command runs on another node): those count as the
//! node's work, for its idle timeout and for a shutdown that lets tasks end.
//!
//! The agent heartbeats at once when a task ends (not only every interval), so a free slot is
//! refilled within one round trip. Results are kept until acknowledged, so none is lost when the
//! server is killed and restarted: the agent keeps retrying, and re-registers under its name if the
//! server has forgotten it.
//!
//! - [`accel`]: the accelerator service of an ANode and offload from NNodes (spec 01);
//! - [`config`]: the TOML configuration;
//! - [`divisible`]: chunks of divisible jobs (fetch the input, run, upload the output);
//! - [`fetch_bandwidth`]: the cap on the rate this agent fetches workflow inputs at
//!   (`fetch_bandwidth`), shared by all its fetches;
//! - [`detect`]: cores, memory, disks, NVIDIA GPUs, `/proc/PID/io`;
//! - [`mig`]: a GPU split by MIG, offered as its instances (listed by `nvidia-smi -L`);
//! - [`launch`]: one task as a child process;
//! - [`ledger`]: the durable record of running tasks, from which a restarted agent kills what its
//!   SIGKILLed predecessor left running (before it registers);
//! - [`marker`]: the mark every process the agent starts for work carries, and the scan that
//!   kills the marked processes an agent left behind (what no ledger lists);
//! - [`guard`]: the process that kills what the agent leaves running when it dies, even if it is
//!   never restarted, and the work directory's lock (one agent per directory);
//! - [`workdir`]: the private work directory (0700, no symlink, ours) and the agent's identity;
//! - [`logs`]: the log listener that serves task outputs to the server (`hetsched log`);
//! - [`run_as`]: tasks and divisible chunks run as their owners' Unix accounts
//!   (`run_as_owner`);
//! - [`shutdown`]: graceful shutdown on SIGTERM/SIGINT (stop taking work, kill or drain, report);
//! - [`version`]: this agent's version, and the warning when its server runs another.

pub mod accel;
pub mod balance;
pub mod check;
pub mod config;
pub mod cpus;
pub mod dataflow;
pub mod detect;
pub mod divisible;
pub mod fetch_bandwidth;
pub mod guard;
pub mod job_nonce;
pub mod launch;
pub mod ledger;
pub mod logs;
pub mod marker;
pub mod mig;
pub mod outside;
pub mod probe;
pub mod ran;
pub mod room;
pub mod run_as;
pub mod shutdown;
pub mod stream_workers;
pub mod sweep;
pub mod usage;
pub mod version;

/// The connection to the server that the agent's calls go over now: its heartbeats replace it
/// when a beat times out (the old one may be dead — a hung relay keeps it open), and every loop
/// that holds calls open follows.
pub type Connection = tokio::sync::watch::Receiver<tonic::transport::Channel>;

/// The node id while the agent is registered (`None` before the first registration, and while it
/// registers again).
pub type Registered = tokio::sync::watch::Receiver<Option<u32>>;

/// Returns once the agent has registered for the first time; `false`: the agent is ending
/// without having registered. The loops that speak for the node (divisible chunks, stream
/// workers) wait for it: until then the server does not know the node's identity, and their
/// refusals would come before — and read as the cause of — the registration's own error (a
/// wrong token, cores out of range).
pub(crate) async fn first_registration(registered: &mut Registered) -> bool {
    registered.wait_for(Option::is_some).await.is_ok()
}
pub mod workdir;

use hetsched_proto as pb;
use hetsched_proto::agent_client::AgentClient;
use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use thiserror::Error;
use tokio::sync::{Notify, oneshot, watch};
use tracing::{debug, info, warn};

/// How long the agent waits after something wakes it (a dataflow input, a PCDDB message)
/// before it heartbeats, so that events arriving together report together.
const COALESCE: Duration = Duration::from_millis(1);

/// How long a finished task's result may wait for others while tasks still run here, so that
/// results of short tasks ride on one heartbeat (one RPC, one server transaction and one WAL
/// sync for several tasks). A result is sent at once when nothing else runs here (waiting would
/// gain nothing), so a lone task's end — and its slot's next task — is not delayed.
const RESULT_WINDOW: Duration = Duration::from_millis(5);

/// While prefetched tasks wait in the queue, the node has work without asking: results wait
/// until the queue empties (then the agent beats at once, so its refill arrives while the last
/// tasks run), but no longer than this.
const QUEUE_WINDOW: Duration = Duration::from_millis(200);

/// Task specs kept beyond those of running tasks (the server reads at most 1024 keys).
const MAX_SPECS: usize = 256;

/// Why the server tells an agent to kill an attempt, in an operator's words: the server asks
/// only for attempts it no longer expects on this node.
const KILL_WHY: &str = "the server no longer expects this attempt on this node (given away while \
    this node was out of touch with the server, cancelled, stopped for work of a higher \
    priority, or moved to another node)";

/// Largest reply the agent decodes. The server caps its replies at 1 MiB; the margin is for a
/// server with another cap, and a reply beyond it is reported as undecodable, not as an
/// unreachable server.
const MAX_REPLY_BYTES: usize = 16 << 20;

/// Why the agent could not start.
#[derive(Debug, Error)]
pub enum AgentError {
    /// A bad setting.
    #[error("{0}")]
    Config(String),
    /// gRPC transport.
    #[error("transport: {0}")]
    Transport(#[from] tonic::transport::Error),
    /// The server refused the token.
    #[error("the server refused the token: {0}")]
    Unauthenticated(String),
    /// The server refused this agent (wrong role's token, or a name another live agent holds).
    #[error("the server refused this agent: {0}")]
    Refused(String),
    /// What answers at the server's URL speaks another protocol or version: TLS where the URL
    /// says `http://`, plain text where it says `https://`, or no agent registration (an older
    /// server, or no hetsched server there). Retrying never mends it ([`mismatch`]).
    #[error("{0}")]
    Protocol(String),
}

/// Whether the failed call `s` to `server` met a server of the other scheme: plain text to a
/// TLS server (which [`probe::speaks_tls`] asks the address, as the client commands do) or TLS
/// to a plain one (rustls could not read its answer). The error says which URL to use instead.
async fn mismatch(server: &str, s: &tonic::Status) -> Option<AgentError> {
    if server.starts_with("https://") && probe::answered_in_plain(s) {
        return Some(plain_server(server));
    }
    // A refusal is an answer: the server spoke our protocol.
    let answered = matches!(
        s.code(),
        tonic::Code::Unauthenticated
            | tonic::Code::PermissionDenied
            | tonic::Code::AlreadyExists
            | tonic::Code::InvalidArgument
            | tonic::Code::FailedPrecondition
    );
    // Nothing answered (refused, no route, a beat that timed out): no TLS server either, and
    // asking would add the probe's wait to every retry against a host that drops packets.
    let silent = s.code() == tonic::Code::DeadlineExceeded || probe::never_connected(s);
    if !answered && !silent && probe::speaks_tls(server).await {
        return Some(AgentError::Protocol(format!(
            "the server at {server} speaks TLS: use an https:// URL with --ca ({}: {})",
            s.code(),
            s.message()
        )));
    }
    None
}

/// The error for a server reached over `https://` that answers in plain text.
fn plain_server(server: &str) -> AgentError {
    AgentError::Protocol(format!(
        "connecting to {server}: the server does not speak TLS; use an http:// URL (without --ca)"
    ))
}

/// The error for a server that answers registration with `Unimplemented`.
fn no_registration(server: &str) -> AgentError {
    AgentError::Protocol(format!(
        "the server at {server} does not offer agent registration: is --server the address of a \
         hetsched server (DATA_DIR/address), not of an agent or another program, and is the \
         server as new as this agent (hetsched {}; `hetsched user whoami` prints the server's \
         version)?",
        version::VERSION
    ))
}

/// Whether a failed call means the server could not be reached (as opposed to an answer that
/// could not be decoded or was an error).
fn unreachable(s: &tonic::Status) -> bool {
    matches!(
        s.code(),
        tonic::Code::Unavailable | tonic::Code::DeadlineExceeded | tonic::Code::Cancelled
    ) || (s.code() == tonic::Code::Unknown && s.message().contains("transport"))
}

/// How long after its start an agent with a time limit stops its tasks (the limit less the kill
/// grace); None without a limit. A limit no longer than the grace leaves no time to run anything.
fn stop_margin(opts: &AgentOptions) -> Result<Option<Duration>, AgentError> {
    match opts.time_limit {
        Some(limit) if limit <= opts.kill_grace => Err(AgentError::Config(format!(
            "time limit {} is not longer than the kill grace {}: no task could run",
            humantime::format_duration(limit),
            humantime::format_duration(opts.kill_grace)
        ))),
        Some(limit) => Ok(Some(limit - opts.kill_grace)),
        None => Ok(None),
    }
}

/// Everything an agent needs to run.
#[derive(Clone, Debug)]
pub struct AgentOptions {
    /// Server URL, `http://host:port` or `https://host:port`.
    pub server: String,
    /// The server's token.
    pub token: String,
    /// CA certificate (PEM) for TLS.
    pub ca_pem: Option<Vec<u8>>,
    /// Unique node name.
    pub name: String,
    /// What the node offers.
    pub resources: detect::Resources,
    /// Relative core speed.
    pub core_speed: f64,
    /// Disk read bandwidth, bytes/s.
    pub disk_read_bw: f64,
    /// Where task outputs go.
    pub work_dir: PathBuf,
    /// Benchmarks only: report every assigned task as succeeded without starting a process
    /// (`hetsched bench-dispatch --scheduler-only`).
    pub no_exec: bool,
    /// Where the log listener binds (`hetsched log` reads task outputs through it); None = no
    /// listener.
    pub log_listen: Option<std::net::SocketAddr>,
    /// Certificate and key (PEM) of the log listener: with them it speaks TLS (`--log-cert`).
    pub log_tls: Option<(Vec<u8>, Vec<u8>)>,
    /// On shutdown, wait for running tasks to end instead of killing them.
    pub drain: bool,
    /// How long a task asked to stop has between SIGTERM and SIGKILL
    /// ([`launch::DEFAULT_KILL_GRACE`] unless configured).
    pub kill_grace: std::time::Duration,
    /// The running tasks' process groups, shared with a signal handler ([`shutdown`]).
    pub processes: shutdown::Processes,
    /// Rack and accelerator service settings (spec 01).
    pub accel: accel::AccelOptions,
    /// Where other agents reach this one (`host:port` of the log listener, which also serves
    /// workflow data); None = the address the server sees with the listener's port.
    pub advertise: Option<String>,
    /// Workflow settings: attributes, TLS between agents (issue 13).
    pub data: dataflow::DataOptions,
    /// The `hetsched` binary: its hidden `pin-exec` binds a pinned task to its CPUs ([`cpus`]),
    /// and its hidden `agent-guard` kills the tasks this agent leaves running if it dies
    /// ([`guard`]). None: pinned tasks run unbound, as any task, and nothing guards the agent.
    pub exe: Option<PathBuf>,
    /// The agent's own log (`--log-file`, `--log-format`): its guard writes its line there too.
    pub log: guard::LogTo,
    /// How long the agent runs (`--time-limit`: the batch allocation it runs in, e.g.); None:
    /// until a signal. Its heartbeats say how long tasks may still run here, so the server
    /// sends no task whose time limit is longer; `kill_grace` before the end it stops what still
    /// runs (the server runs those again elsewhere, not counting a failure) and exits.
    pub time_limit: Option<Duration>,
    /// `--idle-timeout`: the agent exits once nothing has run or waited here for this long (no
    /// task, workflow instance, divisible chunk, stream worker or accelerator work), so that a
    /// batch allocation holding it ends when the work does; None: it stays.
    pub idle_timeout: Option<Duration>,
    /// `--run-as-owner`: a user's tasks and divisible chunks run as the Unix account of the
    /// user's name, the admin's as the agent's own user ([`run_as`]); the agent must be root.
    /// Off: everything runs as the agent's user, whatever the server names.
    pub run_as_owner: bool,
    /// `--stale-keep`: how long job directories set aside into `WORK_DIR/stale/` (another
    /// incarnation's of a job id: [`job_nonce`]) are kept before the agent deletes them; None:
    /// never deleted.
    pub stale_keep: Option<Duration>,
}

/// Deletes, at the start and every hour after, what has been in `WORK_DIR/stale/` for
/// `keep` ([`job_nonce::remove_stale`]).
async fn remove_stale_every_hour(work_dir: PathBuf, keep: Duration) {
    loop {
        let dir = work_dir.clone();
        match tokio::task::spawn_blocking(move || {
            job_nonce::remove_stale(&dir, keep, launch::now_ns())
        })
        .await
        {
            Ok(removed) if !removed.is_empty() => info!(
                directories = removed.len(),
                keep = %humantime::format_duration(keep),
                "deleted job directories set aside in stale/ longer than the keep (--stale-keep)"
            ),
            Ok(_) => {}
            Err(e) => warn!("deleting job directories set aside in stale/: {e}"),
        }
        tokio::time::sleep(Duration::from_secs(3600)).await;
    }
}

struct RunningTask {
    attempt: u32,
    /// The TaskSpec it runs (kept in the cache while the task runs).
    spec: u64,
    pid: Option<u32>,
    kill: Option<oneshot::Sender<launch::Kill>>,
    /// Gives the task a new time limit (ms, 0: none; the server's `Respec`).
    limit: watch::Sender<u64>,
    read_bytes: u64,
    /// When it was started (ns since the epoch): for a workflow instance, when its agent began
    /// to fetch its inputs.
    started_ns: u64,
    /// A workflow instance whose inputs are still being fetched: its program has not started.
    /// Reported so the server can tell it from one whose program runs.
    fetching: bool,
    /// When its program started (ns since the epoch; 0 while its inputs are fetched), as its
    /// result will say.
    program_started_ns: u64,
    /// Sends its process group an operator's signal (`hetsched signal`).
    signal: tokio::sync::mpsc::UnboundedSender<nix::sys::signal::Signal>,
    /// The seqs of the signals this attempt was sent: the server resends a signal until it
    /// hears that it was handled, and each is sent to the task once.
    signalled: std::collections::HashSet<u64>,
}

/// What a task that an agent holds runs by once the server says its spec changed to `new` (a
/// `Respec`): its own spec with `new`'s time limit. Nothing else changes: a task keeps the
/// memory it was placed with, which the server booked for it on this node (`hetsched update
/// --memory` is for the tasks still to place).
fn respecced(own: &pb::TaskSpec, new: &pb::TaskSpec) -> pb::TaskSpec {
    pb::TaskSpec {
        time_limit_ms: new.time_limit_ms,
        ..own.clone()
    }
}

/// A task the server assigned beyond the node's free cores (`prefetched`), or onto cores or
/// devices that a stopped task still holds during its kill grace: started here, in order, as
/// soon as its cores and devices are free, without asking the server (issue 10). Tasks of the
/// second kind go before those of the first.
struct Queued {
    a: pb::Assignment,
    spec: Arc<pb::TaskSpec>,
}

struct Shared {
    running: HashMap<u64, RunningTask>,
    /// TaskSpecs received, by key: each application variant's command and environment arrive
    /// once; heartbeats list the keys held so the server does not send them again.
    specs: HashMap<u64, Arc<pb::TaskSpec>>,
    results: Vec<pb::TaskResult>,
    /// Prefetched tasks not started yet; heartbeats list them among the running tasks.
    queue: VecDeque<Queued>,
    /// Cores of the tasks started here and not yet ended.
    busy_cores: u32,
    /// Whether a task the agent was told to stop (preempted, cancelled) has ended since the
    /// last heartbeat: the agent then beats at once, without waiting for its queue to empty,
    /// so that the server, which gave the task's cores away, hears of it (and can stop the
    /// next task a waiting one needs) without delay.
    stopped_ended: bool,
    /// The devices (GPU indices) of the tasks started here and not yet ended, with how many
    /// such tasks hold each: the server gives a preempted or cancelled task's GPUs to new work
    /// at once, and the new task must not share them with the stopped one during its kill grace.
    busy_devices: HashMap<u32, u32>,
    /// The CPUs not held by a running pinned task.
    cpus: cpus::CpuPool,
    ledger: ledger::Ledger,
    /// The ANode this NNode offloads to, from the server's last reply (spec 01).
    binding: Option<accel::offload::Client>,
    /// Why the agent shuts down ([`begin_shutdown`]): its last heartbeat, once nothing runs,
    /// says so (`leaving`), and the server records that the node left instead of waiting to
    /// declare it dead.
    leaving: Option<Stop>,
    /// The seqs of the server's signals handled since the last heartbeat (its `signalled`).
    signal_acks: Vec<u64>,
    /// The divisible chunks being computed (an operator's signal may be for one).
    chunks: divisible::Computing,
    /// The running multi-node tasks this node is a member of without running their command
    /// (their first node runs it), from the server's last reply (`member_of`). No process of
    /// theirs runs here, yet leaving would lose them: they count as this node's work
    /// ([`Shared::holds_for_multi_node`]). Kept while the server is unreachable (a restarted
    /// server holds the tasks' nodes again).
    member_of: Vec<pb::TaskRef>,
    /// A multi-node task being gathered holds this node whole (the server's last reply,
    /// `gathering`): work is coming, so the idle timeout waits (leaving would make the
    /// gathering wait on for another node). Not for `--drain`: the server gives a draining
    /// node back.
    gathering: bool,
    /// The workflow jobs this node holds outputs of (an instance of theirs succeeded here with
    /// outputs, which consumers elsewhere fetch from this agent) that the server has not said
    /// ended (`outputs_needed`): they count as work for the idle timeout, since an agent that
    /// left would take them with it and their producers would run again elsewhere. Not for
    /// `--drain` or a signal, nor while the server is unreachable (it may be gone for good).
    holds_outputs: std::collections::BTreeSet<u64>,
}

impl Shared {
    /// The tasks a heartbeat lists: those started here (a workflow instance whose inputs are
    /// still fetched says so, without a program start), then the queued ones.
    fn reported_tasks(&self) -> Vec<pb::RunningTask> {
        self.running
            .iter()
            .map(|(&task_id, t)| pb::RunningTask {
                task_id,
                attempt: t.attempt,
                read_bytes: t.read_bytes,
                spec: Some(t.spec),
                queued: false,
                started_ns: t.started_ns,
                fetching: t.fetching,
                program_started_ns: t.program_started_ns,
            })
            .chain(self.queue.iter().map(|q| pb::RunningTask {
                task_id: q.a.task_id,
                attempt: q.a.attempt,
                read_bytes: 0,
                spec: Some(q.a.spec),
                queued: true,
                started_ns: 0,
                fetching: false,
                program_started_ns: 0,
            }))
            .collect()
    }

    /// Whether the multi-node tasks this node is a member of keep the agent: always while it
    /// runs on, and while it shuts down unless it stops its tasks (a signal without `--drain`,
    /// `node stop` without `--drain`, its time limit), when it leaves them (they are lost and
    /// run again, as its own tasks do).
    fn holds_for_multi_node(&self, opts: &AgentOptions) -> bool {
        !self.member_of.is_empty()
            && self
                .leaving
                .is_none_or(|why| why.waits_for_members(opts.drain))
    }
}

/// Runs the agent until `shutdown` resolves; then kills its tasks and returns.
pub async fn run(
    mut opts: AgentOptions,
    shutdown: impl Future<Output = ()>,
) -> Result<(), AgentError> {
    // Its listeners (log, data, accelerator) hold at most a cap of connections each: within
    // the open-file limit, raised toward the hard limit as far as they need.
    hetsched_proto::listen::fit_agent_cap(3);
    // Tasks, chunks and workflow instances run in directories of their own, so every path the
    // agent hands them (`{input}`, `{input:m}`, `{output:m}`, `HETSCHED_CHUNK_OUTPUT`) must not
    // depend on the agent's own working directory.
    // The agent's end (`time_limit`): tasks are stopped `kill_grace` before it, so that none
    // outlives it. Measured on the monotonic clock: heartbeats carry the time left, not a date,
    // so the server's clock need not agree with this host's.
    let stop_at = stop_margin(&opts)?.map(|left| Instant::now() + left);
    let shutdown = async move {
        let time_up = async {
            match stop_at {
                Some(at) => tokio::time::sleep_until(at.into()).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            () = shutdown => Stop::Signal,
            () = time_up => Stop::TimeLimit,
        }
    };
    opts.work_dir = std::path::absolute(&opts.work_dir).map_err(|e| {
        AgentError::Config(format!("work directory {}: {e}", opts.work_dir.display()))
    })?;
    if opts.run_as_owner {
        run_as::check_agent(&opts.work_dir).map_err(|e| AgentError::Config(e.to_string()))?;
        // Before anything is created in the work directory, which others may now pass through.
        run_as::keep_files_private();
    } else if crate::workdir::euid() == 0 {
        // Every task, every user's, runs as root and can read this agent's token and identity:
        // fine for one trusted user, not for a node shared by several. Said once per process:
        // `hetsched demo` runs three agents in one.
        static ROOT_WARNING: std::sync::Once = std::sync::Once::new();
        ROOT_WARNING.call_once(|| {
            warn!(
                "this agent runs as root without --run-as-owner: every task, whoever submitted it, \
             runs as root and can read the agent's token and identity; on a node that several \
             hetsched users share, start it with --run-as-owner (tasks run as their owner's \
             account) or as an unprivileged user"
            )
        });
    }
    let endpoint = pb::endpoint(&opts.server, opts.ca_pem.as_deref())?;
    let channel = endpoint.connect_lazy();
    let interceptor = pb::TokenInterceptor::new(&opts.token)
        .map_err(|e| AgentError::Config(format!("token: {e}")))?;
    // The connection the agent's calls go over, replaced when a beat times out (the old one may
    // be dead); every loop that holds calls follows it.
    let (connection, connection_rx) = tokio::sync::watch::channel(channel.clone());
    // Rung when a task ends.
    let notify = Arc::new(Notify::new());
    // What runs outside the heartbeat loop's own records, for the idle timeout and the queue.
    let outside = outside::Outside::default();
    let mut client = AgentClient::with_interceptor(channel.clone(), interceptor.clone())
        .max_decoding_message_size(MAX_REPLY_BYTES);
    let gpus = detect::Gpus::init();
    // Listings name devices by index (`hetsched tasks`): the log says which declared name each
    // index is, so an operator can tell which MIG instance a task had.
    for (i, (d, name)) in opts
        .resources
        .accelerators
        .iter()
        .zip(opts.resources.device_names.iter())
        .enumerate()
    {
        if let Some(name) = name {
            info!("device {i} ({}): tasks see it as `{name}`", d.kind);
        }
    }
    // Before anything is made there: workflow placeholders paste paths under it into commands.
    if let Some(problem) = workdir::placeholder_problem(&opts.work_dir) {
        return Err(AgentError::Config(format!("work directory {problem}")));
    }
    workdir::prepare_for(&opts.work_dir, opts.run_as_owner)
        .map_err(|e| AgentError::Config(format!("work directory: {e}")))?;
    // One agent per work directory, held for the agent's whole life (before the ledger is read:
    // see `guard`).
    let _work_dir_lock = guard::lock_for_agent(&opts.work_dir, guard::AGENT_LOCK_WAIT)
        .await
        .map_err(AgentError::Config)?;
    let identity = workdir::identity(&opts.work_dir)
        .map_err(|e| AgentError::Config(format!("agent identity: {e}")))?;
    // The node id while registered: the wake-up waiter asks for this node's work.
    let (registered, registered_rx) = tokio::sync::watch::channel(None);
    // The stream workers' sync speaks for this node: it carries the identity.
    stream_workers::spawn(
        connection_rx.clone(),
        registered_rx.clone(),
        interceptor.clone(),
        stream_workers::Secrecy {
            token: opts.token.clone(),
            encrypt: opts.server.starts_with("https://"),
        },
        stream_workers::Host {
            node: opts.name.clone(),
            identity: identity.clone(),
            cores: opts.resources.cores,
            work_dir: opts.work_dir.clone(),
            run_as_owner: opts.run_as_owner,
        },
        outside.clone(),
    );
    // Set by the waiter: the server has work for this node (beat at once, without coalescing).
    let woken = Arc::new(Notify::new());
    let _waiter = divisible::Running(tokio::spawn(await_work(
        connection_rx.clone(),
        interceptor.clone(),
        identity.clone(),
        registered_rx.clone(),
        woken.clone(),
    )));
    let _stale = opts.stale_keep.map(|keep| {
        divisible::Running(tokio::spawn(remove_stale_every_hour(
            opts.work_dir.clone(),
            keep,
        )))
    });
    let computing = divisible::Computing::default();
    let _divisible = divisible::Running(tokio::spawn(divisible::run(
        connection_rx,
        registered_rx,
        interceptor.clone(),
        divisible::DivisibleAgent {
            name: opts.name.clone(),
            identity: identity.clone(),
            memory_bytes: opts.resources.memory_bytes,
            work_dir: opts.work_dir.clone(),
            kill_grace: opts.kill_grace,
            held: outside.clone(),
            run_as_owner: opts.run_as_owner,
            computing: computing.clone(),
            min_free_disk: opts.data.min_free_disk,
            free_space: room::FreeSpace::default(),
        },
    )));
    // Before registering: kill what a previous agent with this work directory left running
    // (it was SIGKILLed; the server has given its tasks away or will).
    let (ledger, recovered) = ledger::Ledger::recover(&opts.work_dir).map_err(|e| {
        AgentError::Config(format!(
            "{}: {e}",
            opts.work_dir.join(ledger::FILE_NAME).display()
        ))
    })?;
    if !recovered.killed.is_empty() {
        warn!(
            tasks = recovered.killed.len(),
            "killed tasks left running by a previous agent in this work directory"
        );
    }
    // And what still carries the directory's mark, which no ledger lists: a task spawned just
    // before that agent died, an ANode's offloaded task (its guard took them, unless this agent
    // took the directory first).
    // (The divisible chunks' record is recovered by the divisible loop, which may not have
    // read it yet: its processes are left to it.)
    let mut recorded: Vec<u32> = recovered.killed.iter().map(|e| e.pid).collect();
    recorded.extend(
        ledger::recorded_running(&opts.work_dir, ledger::CHUNKS_FILE_NAME).unwrap_or_default(),
    );
    let work_dir = opts.work_dir.clone();
    let marked = tokio::task::spawn_blocking(move || marker::kill_marked(&work_dir, &recorded))
        .await
        .unwrap_or_default();
    if !marked.is_empty() {
        warn!(
            process_groups = marked.len(),
            "killed processes a previous agent in this work directory left running, which its \
             record did not list"
        );
    }
    // Kills what this agent leaves running if it dies without stopping its tasks.
    let _guard = opts.exe.as_deref().and_then(|exe| {
        match guard::Guard::start(exe, &opts.work_dir, &opts.log) {
            Ok(g) => Some(g),
            Err(e) => {
                warn!(
                    exe = %exe.display(),
                    "the agent's guard did not start ({e}): if this agent dies, its tasks run on"
                );
                None
            }
        }
    });
    tokio::pin!(shutdown);
    // A TLS server without an operator's agent CA certifies this agent's listeners: they then
    // speak TLS too, and the peers' certificates are checked against the server's agent CA.
    let issued = match (&opts.log_listen, &opts.log_tls) {
        (Some(_), None) if opts.server.starts_with("https://") => {
            tokio::select! {
                issued = listener_certificate(&mut client, &opts, &identity) => issued?,
                _ = &mut shutdown => return Ok(()),
            }
        }
        _ => None,
    };
    let log_tls = opts.log_tls.clone().or_else(|| {
        issued.as_ref().map(|i| {
            (
                i.cert_pem.clone().into_bytes(),
                i.key_pem.clone().into_bytes(),
            )
        })
    });
    let balance: balance::Handle = Arc::default();
    let auth = dataflow::PeerAuth {
        token: opts.token.clone(),
        // Peers serve with certificates from the server's agent CA, unless this agent's
        // configuration gives its data listener a certificate of the operator's own.
        ca: match &issued {
            Some(i) if opts.data.tls.is_none() => Some(i.ca_pem.clone().into_bytes()),
            _ => opts.ca_pem.clone(),
        },
        node: opts.name.clone(),
    };
    // The key this agent's outputs are served with (fetch tickets, and log tickets for task
    // output): none until the server's first heartbeat reply, so every fetch and every read of
    // task output is refused until then.
    let data_key = dataflow::DataKey::default();
    let data_service = dataflow::DataService {
        work_dir: opts.work_dir.clone(),
        balance: balance.clone(),
        auth: auth.clone(),
        wake: notify.clone(),
        node: opts.name.clone(),
        key: data_key.clone(),
    };
    // Workflow data and PCDDB between agents: on the (plain) log listener, or over TLS on a
    // listener of their own — with the configuration's `[tls]`, else with the log listener's
    // certificate (`--log-cert`), so a TLS agent never serves its peers in clear.
    let (logs, data_listener) = match opts.log_listen {
        Some(at) => {
            let (plain, tls) = match opts.data.tls.clone().or_else(|| log_tls.clone()) {
                None => (Some(data_service), None),
                Some(tls) => (None, Some((data_service, tls))),
            };
            let logs = logs::LogListener::bind_tls(
                at,
                &opts.work_dir,
                &opts.token,
                // Task output is read with the server's log tickets, under the same data key as
                // the fetches (set by the heartbeat loop).
                logs::LogKey {
                    node: opts.name.clone(),
                    key: data_key.clone(),
                },
                log_tls.clone(),
                plain,
            )
            .await
            .map_err(|e| AgentError::Config(format!("log listener on {at}: {e}")))?;
            let data = match tls {
                Some((svc, tls)) => Some(
                    dataflow::DataListener::bind(
                        std::net::SocketAddr::new(at.ip(), 0),
                        svc,
                        &opts.token,
                        tls,
                    )
                    .await
                    .map_err(|e| AgentError::Config(format!("agent data listener: {e}")))?,
                ),
                None => None,
            };
            (Some(logs), data)
        }
        None => (None, None),
    };
    let data_port = data_listener
        .as_ref()
        .map_or(0, |l| u32::from(l.addr.port()));
    let advertise = match (&opts.advertise, data_port) {
        (Some(a), p) if p != 0 => format!("https://{a}"),
        (Some(a), _) => a.clone(),
        (None, _) => String::new(),
    };
    let log_port = logs.as_ref().map_or(0, |l| u32::from(l.addr.port()));
    if let Some(l) = &logs {
        info!(addr = %l.addr, "serving task outputs to the server");
        if opts.server.starts_with("https://") && log_tls.is_none() {
            warn!(
                addr = %l.addr,
                "the server is reached over TLS but this listener is plain: task output (and the \
                 agent token of the calls) travel in clear; give it --log-cert and --log-key, or \
                 --log-listen none"
            );
        }
    }
    let work_dir_shown = opts.work_dir.display().to_string();
    let shared = Arc::new(Mutex::new(Shared {
        running: HashMap::new(),
        specs: HashMap::new(),
        results: recovered.results,
        queue: VecDeque::new(),
        busy_cores: 0,
        busy_devices: HashMap::new(),
        stopped_ended: false,
        cpus: cpus::CpuPool::of_this_process(opts.resources.cores),
        ledger,
        binding: None,
        leaving: None,
        signal_acks: Vec::new(),
        chunks: computing.clone(),
        member_of: Vec::new(),
        gathering: false,
        // Outputs a previous run of this agent produced: the first reply says which of their
        // workflows still run.
        holds_outputs: dataflow::jobs_with_outputs(&opts.work_dir),
    }));
    // An ANode's accelerator service (spec 01's AcCt): every GPU task of this node, its own and
    // its NNodes', runs through its process stage.
    let (pipeline, accel_listener) = accel::start(&opts, &opts.resources.accelerators).await?;
    let (accel_port, accel_tls) = accel_listener
        .as_ref()
        .map_or((0, false), |l| (u32::from(l.addr.port()), l.tls));
    let register = pb::RegisterRequest {
        name: opts.name.clone(),
        cores: opts.resources.cores,
        memory_bytes: opts.resources.memory_bytes,
        core_speed: opts.core_speed,
        disk_read_bw: opts.disk_read_bw,
        net_bw: 0.0,
        accelerators: opts.resources.accelerators.clone(),
        rack: opts.accel.rack.clone(),
        identity: identity.clone(),
        log_port,
        work_dir: work_dir_shown.clone(),
        accel_port,
        accel_tls,
        advertise: advertise.clone(),
        attributes: opts.data.attributes.clone(),
        hostname: detect::host_name(),
        version: version::VERSION.to_string(),
    };
    let checks = balance::spawn_checks(balance.clone(), auth.clone(), notify.clone());
    let probes = balance::spawn_probes(balance.clone(), auth.clone());
    let mut node_id: Option<u32> = None;
    let sweeper: Arc<sweep::Sweeper> = Arc::default();
    let mut interval = Duration::from_millis(500);
    // How often to beat with nothing to report (the server's `idle_heartbeat_interval`).
    let mut idle_interval = interval;
    let mut backoff = Duration::from_millis(50);
    let mut io_sampled = Instant::now();
    let mut read_bps = 0.0;
    let mut memory_sampled: Option<Instant> = None;
    let mut available_memory = 0;
    let mut disk_free = None;
    let mut first_failure: Option<Instant> = None;
    // Registered with the server at least once: it speaks this agent's protocol.
    let mut ever_registered = false;
    // The last reply said it was cut at its size cap: beat again at once.
    let mut more = false;
    // The `seq` of the last heartbeat reply read (0: none yet), sent back in every beat: the
    // server then counts no attempt for a task of a reply this agent gave up on (a timeout).
    let mut reply_seq = 0;
    // An operator asked this agent to stop (`hetsched node stop`): `Some(drain)`.
    let mut stop_asked: Option<bool> = None;
    // Since when the agent shuts down (first signal): it takes no new work.
    let mut draining: Option<Instant> = None;
    // Since when nothing has run or waited here (`idle_timeout` counts from it).
    let mut idle_since: Option<Instant> = None;
    // The idle timeout ended: one more beat first, whose reply may say that this node has just
    // become a member of a multi-node task (an idle agent beats seldom), before it shuts down.
    let mut idle_check = false;
    // The last heartbeat sent said the agent leaves (`leaving`): once it is answered, the server
    // has recorded that the node left, and the agent may exit.
    let mut said_leaving = false;
    // The time limit stopped the tasks (at once, or after a `--drain` signal).
    let mut stopped_at_limit = false;
    // Benchmarks may try other windows (`HETSCHED_RESULT_WINDOW_US`); 0 sends every result at once.
    let result_window = std::env::var("HETSCHED_RESULT_WINDOW_US")
        .ok()
        .and_then(|v| v.parse().ok())
        .map_or(RESULT_WINDOW, Duration::from_micros);
    let launcher = Launcher {
        shared: &shared,
        notify: &notify,
        outside: &outside,
        opts: &opts,
        pipeline: pipeline.as_ref(),
        balance: &balance,
        auth: &auth,
    };
    'main: loop {
        let ok = 'beat: {
            let Some(id) = node_id else {
                match client.register(register.clone()).await {
                    Ok(r) => {
                        let r = r.into_inner();
                        node_id = Some(r.node_id);
                        ever_registered = true;
                        registered.send_replace(node_id);
                        // Spec keys are a server's: after a (re-)registration, hold none, so a
                        // server with a fresh store never meets a key it did not send.
                        shared
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .specs
                            .clear();
                        interval = Duration::from_millis(r.heartbeat_interval_ms.max(1));
                        // Named until a heartbeat reply is read: replies of an earlier server
                        // (or of this one before the agent registered again) say nothing here.
                        reply_seq = r.reply_seq;
                        // 0: a server that predates the field; beat as often as with work.
                        idle_interval = match r.idle_heartbeat_interval_ms {
                            0 => interval,
                            ms => Duration::from_millis(ms).max(interval),
                        };
                        info!(node = %opts.name, id = r.node_id, "registered");
                        if !r.note.is_empty() {
                            warn!(node = %opts.name, "{}", r.note);
                        }
                        if let Some(w) =
                            version::server_version_warning(version::VERSION, &r.version)
                        {
                            warn!(node = %opts.name, "{w}");
                        }
                        continue 'main;
                    }
                    Err(s) => break 'beat Err(s),
                }
            };
            let req = {
                let mut bal = balance.lock().unwrap_or_else(|p| p.into_inner());
                let mut sh = shared.lock().unwrap_or_else(|p| p.into_inner());
                launcher.start_queued(&mut sh);
                // Sample /proc/PID/io at most every 200 ms (short tasks would otherwise pay for it).
                let elapsed = io_sampled.elapsed();
                if elapsed >= Duration::from_millis(200) {
                    let mut delta = 0;
                    for t in sh.running.values_mut() {
                        if let Some(pid) = t.pid {
                            let now = detect::proc_read_bytes(pid).max(t.read_bytes);
                            delta += now - t.read_bytes;
                            t.read_bytes = now;
                        }
                    }
                    read_bps = delta as f64 / elapsed.as_secs_f64();
                    io_sampled = Instant::now();
                }
                // Available memory and free disk change slowly; once a second is plenty. But a
                // beat that reports an instance interrupted for want of disk reads the disk
                // afresh: the server keeps work with inputs off this node until a later beat
                // says it has room, and a reading from before the fetch filled it would say so
                // too soon.
                let no_room = sh
                    .results
                    .iter()
                    .any(|r| r.interrupted && r.message.starts_with(dataflow::NO_ROOM));
                if no_room || memory_sampled.is_none_or(|t| t.elapsed() >= Duration::from_secs(1)) {
                    available_memory = detect::available_memory_bytes();
                    disk_free = dataflow::statvfs_free(&opts.work_dir).ok();
                    memory_sampled = Some(Instant::now());
                }
                pb::HeartbeatRequest {
                    node_id: id,
                    running: sh.reported_tasks(),
                    results: sh.results.clone(),
                    read_bytes_per_sec: read_bps,
                    available_memory_bytes: available_memory,
                    disk_free_bytes: disk_free,
                    min_free_disk: opts.data.min_free_disk,
                    gpus: gpus.utilisation(&opts.resources.device_names),
                    identity: identity.clone(),
                    known_specs: sh.specs.keys().copied().collect(),
                    log_port,
                    work_dir: work_dir_shown.clone(),
                    draining: draining.is_some(),
                    time_left_ms: stop_at
                        .map(|at| at.saturating_duration_since(Instant::now()).as_millis() as u64),
                    // Nothing runs or waits any more: the agent exits once this is answered.
                    leaving: match sh.leaving {
                        Some(why)
                            if sh.running.is_empty()
                                && sh.queue.is_empty()
                                && !sh.holds_for_multi_node(&opts) =>
                        {
                            why.as_str().to_string()
                        }
                        _ => String::new(),
                    },
                    accel: pipeline
                        .as_ref()
                        .map(|p| p.state(&gpus, &opts.resources.device_names)),
                    accel_port,
                    accel_tls,
                    rack: opts.accel.rack.clone(),
                    advertise: advertise.clone(),
                    attributes: opts.data.attributes.clone(),
                    data_port,
                    balance: bal.take_outbox(),
                    balance_sent: bal.sent,
                    balance_received: bal.received,
                    balance_held: bal.held(),
                    rtt_ns: bal.rtt_ns.clone().into_iter().collect(),
                    // The server sends its PCDDB address book only when this is not its
                    // version (`Balancer::sync`).
                    peers_version: bal.peers_version(),
                    // And its proximity clusters only when this is not their version.
                    clusters_version: bal.clusters_version(),
                    // Lost with a failed beat: the server sends those signals again, and
                    // they are acknowledged again without being sent twice.
                    signalled: std::mem::take(&mut sh.signal_acks),
                    // The newest first, should there be more than a beat lists.
                    holds_outputs_of: sh
                        .holds_outputs
                        .iter()
                        .rev()
                        .take(pb::MAX_HELD_OUTPUT_JOBS)
                        .copied()
                        .collect(),
                    reply_seq,
                }
            };
            said_leaving = !req.leaving.is_empty();
            // What the reply's `outputs_needed` answers: a job added meanwhile was not asked.
            let asked_holds = req.holds_outputs_of.clone();
            let mut reply =
                match tokio::time::timeout(Duration::from_secs(10), client.heartbeat(req)).await {
                    Ok(Ok(r)) => {
                        let r: pb::HeartbeatReply = r.into_inner();
                        r
                    }
                    Ok(Err(s)) => break 'beat Err(s),
                    Err(_) => {
                        // The connection may be dead without the kernel knowing — data in
                        // flight is retransmitted for many minutes, and a hung relay between
                        // agent and server accepts it forever: beat over a new one.
                        let fresh = endpoint.connect_lazy();
                        client = AgentClient::with_interceptor(fresh.clone(), interceptor.clone())
                            .max_decoding_message_size(MAX_REPLY_BYTES);
                        connection.send_replace(fresh);
                        break 'beat Err(tonic::Status::deadline_exceeded("heartbeat timed out"));
                    }
                };
            if reply.seq != 0 {
                reply_seq = reply.seq;
            }
            if reply.reregister {
                info!("the server does not know this node; registering again");
                node_id = None;
                registered.send_replace(None);
                continue 'main;
            }
            // Files of jobs purged on the server go (`sweep`), in the background.
            sweeper.seen(
                reply.purge_epoch,
                &client,
                sweep::Asker {
                    node_id: id,
                    identity: identity.clone(),
                },
                &opts.work_dir,
            );
            // PCDDB: the workflows this node balances, and the launch node's messages. What the
            // machines answer the launch node (a `reply` to a request: the server assigns the
            // instances on receiving it) goes at once, in the next heartbeat.
            let (fwd, answer) = {
                let mut b = balance.lock().unwrap_or_else(|p| p.into_inner());
                b.sync(id, opts.resources.cores, &reply.pcddb);
                let mut fwd = Vec::new();
                for m in std::mem::take(&mut reply.balance) {
                    fwd.extend(b.deliver(m, launch::now_ns(), false));
                }
                (fwd, b.has_outbox())
            };
            balance::send(&balance, &auth, fwd, notify.clone());
            let mut sh = shared.lock().unwrap_or_else(|p| p.into_inner());
            more = reply.more || answer;
            if reply.stop {
                stop_asked = Some(reply.stop_drain);
            }
            if sh.member_of != reply.member_of {
                info!(
                    tasks = ?reply.member_of.iter().map(|t| t.task_id).collect::<Vec<_>>(),
                    "member of running multi-node tasks (their command runs on another node): \
                     this node holds its cores for them"
                );
                sh.member_of = std::mem::take(&mut reply.member_of);
            }
            if !asked_holds.is_empty() {
                let ended: Vec<u64> = asked_holds
                    .iter()
                    .copied()
                    .filter(|j| !reply.outputs_needed.contains(j))
                    .collect();
                for j in &ended {
                    sh.holds_outputs.remove(j);
                }
                if !ended.is_empty() {
                    info!(
                        jobs = ?ended,
                        "workflows ended: the outputs held for them no longer keep this agent"
                    );
                }
            }
            if sh.gathering != reply.gathering {
                info!(
                    held = reply.gathering,
                    "held whole for a multi-node task being gathered: the idle timeout waits"
                );
                sh.gathering = reply.gathering;
            }
            if let Some(b) = &reply.binding {
                accel::apply_binding(&mut sh.binding, b, &opts);
            }
            // An ANode's offload keys (by epoch: the server rotates them): from now on it runs
            // the offloads whose tickets they verify (until the first, it refuses every
            // offload).
            if let Some(p) = &pipeline
                && !reply.offload_keys.is_empty()
                && p.set_offload_keys(&reply.offload_keys)
            {
                let epochs: Vec<u64> = reply.offload_keys.iter().map(|k| k.epoch).collect();
                info!(
                    ?epochs,
                    "the server gave this ANode its offload keys: it runs the offloads the server assigned"
                );
            }
            // The node's data key: from now on its workflow outputs are served to the fetches,
            // and its task output to the server's reads, whose tickets it verifies (until the
            // first, it serves none).
            if !reply.data_key.is_empty() && data_key.set(&reply.data_key) {
                info!(
                    "the server gave this node its data key: it serves its workflow outputs to the consumers the server sends, and task output to the server's reads"
                );
            }
            for spec in reply.specs {
                sh.specs.insert(spec.key, Arc::new(spec));
            }
            // Tasks whose spec changed after they were sent: each takes the new time limit
            // (`hetsched update --time-limit`), a running one from now on, a queued one when it
            // starts. Nothing else: a task keeps the memory it was placed with (`hetsched update
            // --memory` is for the tasks still to place), which the server booked for it.
            for r in &reply.respecs {
                let Some(spec) = sh.specs.get(&r.spec).cloned() else {
                    warn!(
                        task = r.task_id,
                        spec = r.spec,
                        "respec to an unknown task spec"
                    );
                    continue;
                };
                for q in sh.queue.iter_mut() {
                    if q.a.task_id == r.task_id && q.a.attempt == r.attempt {
                        q.a.spec = r.spec;
                        q.spec = Arc::new(respecced(&q.spec, &spec));
                    }
                }
                if let Some(t) = sh.running.get_mut(&r.task_id)
                    && t.attempt == r.attempt
                {
                    debug!(
                        task = r.task_id,
                        time_limit_ms = spec.time_limit_ms,
                        "a running task's time limit changed"
                    );
                    t.spec = r.spec;
                    t.limit.send_replace(spec.time_limit_ms);
                }
            }
            sh.results.retain(|r| {
                !reply
                    .acked
                    .iter()
                    .any(|a| a.task_id == r.task_id && a.attempt == r.attempt)
            });
            for a in &reply.acked {
                sh.ledger.acked(a.task_id, a.attempt);
            }
            // An operator's signals (`hetsched signal`): each to its attempt's process group,
            // once; one for an attempt not running here (ended, or queued and not started)
            // is only acknowledged.
            for g in &reply.signals {
                sh.signal_acks.push(g.seq);
                if g.chunk_of != 0 {
                    // A divisible chunk's: to its process group if it is being computed.
                    match format!("SIG{}", g.signal).parse::<nix::sys::signal::Signal>() {
                        Ok(signal) => {
                            if sh.chunks.signal((g.chunk_of, g.task_id), g.seq, signal) {
                                debug!(
                                    job = g.chunk_of,
                                    chunk = g.task_id,
                                    ?signal,
                                    "an operator's signal"
                                );
                            }
                        }
                        Err(_) => {
                            warn!(signal = %g.signal, "a signal this system does not know: not sent")
                        }
                    }
                    continue;
                }
                let Some(t) = sh.running.get_mut(&g.task_id) else {
                    continue;
                };
                if t.attempt != g.attempt || !t.signalled.insert(g.seq) {
                    continue;
                }
                match format!("SIG{}", g.signal).parse::<nix::sys::signal::Signal>() {
                    Ok(signal) => {
                        debug!(task = g.task_id, ?signal, "an operator's signal");
                        let _ = t.signal.send(signal);
                    }
                    Err(_) => warn!(
                        task = g.task_id,
                        signal = %g.signal,
                        "a signal this system does not know: not sent"
                    ),
                }
            }
            // The server kills only an attempt it no longer expects on this node. An operator
            // reading the agent's log alone should learn why its task stopped, the usual
            // reasons included.
            for k in &reply.kill {
                let queued = sh.queue.len();
                sh.queue
                    .retain(|q| !(q.a.task_id == k.task_id && q.a.attempt == k.attempt));
                if sh.queue.len() < queued {
                    info!(
                        task = k.task_id,
                        attempt = k.attempt,
                        "{KILL_WHY}: dropped from the queue unstarted"
                    );
                }
                if let Some(t) = sh.running.get_mut(&k.task_id)
                    && t.attempt == k.attempt
                    && let Some(tx) = t.kill.take()
                {
                    info!(
                        task = k.task_id,
                        attempt = k.attempt,
                        "{KILL_WHY}: killing it"
                    );
                    let _ = tx.send(launch::Kill::Server);
                }
            }
            for a in reply.assignments {
                if draining.is_some() {
                    // Sent before the server saw `draining`: not started; the server sees the
                    // task vanish and runs it elsewhere.
                    warn!(
                        task = a.task_id,
                        "assignment while shutting down: not started"
                    );
                    continue;
                }
                let Some(spec) = sh.specs.get(&a.spec).cloned() else {
                    // Cannot happen with a correct server; not running it makes the server see
                    // the task vanish and send it again, with its spec.
                    warn!(
                        task = a.task_id,
                        spec = a.spec,
                        "assignment of an unknown task spec: not started"
                    );
                    continue;
                };
                if spec.job_nonce != a.job_nonce {
                    // A spec kept from another incarnation of the job's id (a restored or new
                    // store hands ids out again): its command, and its owner, are not this
                    // job's. Dropped, so the next beat does not list it; the server sees the
                    // task vanish and sends it again with its own spec.
                    warn!(
                        task = a.task_id,
                        spec = a.spec,
                        "assignment whose spec is another incarnation's of its job: not started; the spec is dropped"
                    );
                    sh.specs.remove(&a.spec);
                    continue;
                }
                if opts.no_exec {
                    // Benchmark mode: the task "succeeds" at once, without a process, so the
                    // scheduler's own ceiling is measured apart from process start-up.
                    let now = launch::now_ns();
                    sh.results.push(pb::TaskResult {
                        task_id: a.task_id,
                        attempt: a.attempt,
                        exit_code: 0,
                        message: String::new(),
                        started_ns: now,
                        finished_ns: now,
                        success: true,
                        interrupted: false,
                        start_failed: false,
                        usage: None,
                        offload_started_ns: 0,
                        offload_devices: Vec::new(),
                        fetch_ms: 0,
                        end: pb::TaskEnd::Exited.into(),
                        signal: String::new(),
                    });
                    notify.notify_one();
                    continue;
                }
                // A new attempt replaces a queued older one, and stops a running one.
                sh.queue.retain(|q| q.a.task_id != a.task_id);
                if let Some(t) = sh.running.get_mut(&a.task_id)
                    && t.attempt != a.attempt
                    && let Some(tx) = t.kill.take()
                {
                    let _ = tx.send(launch::Kill::Server);
                }
                // A task the server placed on cores or devices that a stopped task still
                // holds (it has its kill grace to end) waits here for them, as a prefetched
                // one does.
                if a.prefetched {
                    sh.queue.push_back(Queued { a, spec });
                } else if !launcher.fits(&sh, &a) {
                    // Its cores are free to the server, not yet here: it starts before the
                    // prefetched tasks, which wait for cores the server has not given them.
                    let at = sh
                        .queue
                        .iter()
                        .position(|q| q.a.prefetched)
                        .unwrap_or(sh.queue.len());
                    sh.queue.insert(at, Queued { a, spec });
                } else {
                    launcher.launch(&mut sh, a, spec);
                }
            }
            launcher.start_queued(&mut sh);
            // Forget specs no running task uses once many are held (long-lived agents see many
            // jobs); the server sends a forgotten one again when it is needed.
            if sh.specs.len() > MAX_SPECS {
                let used: std::collections::HashSet<u64> =
                    sh.running.values().map(|t| t.spec).collect();
                sh.specs.retain(|k, _| used.contains(k));
            }
            Ok(())
        };
        match ok {
            Ok(()) => {
                if let Some(since) = first_failure.take() {
                    info!(after = ?since.elapsed(), "server reachable again");
                }
                backoff = Duration::from_millis(50);
                if let Some(drain) = stop_asked.take()
                    && (draining.is_none() || escalates(&shared, &opts, drain))
                {
                    draining.get_or_insert_with(Instant::now);
                    begin_shutdown(&shared, &opts, Stop::Operator { drain });
                    // The next beat says `draining` at once.
                    continue 'main;
                }
                if let Some(since) = draining {
                    let sh = shared.lock().unwrap_or_else(|p| p.into_inner());
                    if sh.running.is_empty()
                        && sh.results.is_empty()
                        && !sh.holds_for_multi_node(&opts)
                    {
                        // The multi-node tasks it waited for ended with this reply, which its
                        // beat, sent while they ran, did not say it leaves: it says so now.
                        if !said_leaving {
                            continue 'main;
                        }
                        info!(
                            after = ?since.elapsed(),
                            "shut down: every result was acknowledged by the server"
                        );
                        break 'main;
                    }
                }
                if std::mem::take(&mut more) {
                    continue 'main;
                }
                // Nothing to report (no task running, queued or unreported, no multi-node task
                // held, no workflow being balanced, the accelerator stages empty): new work
                // arrives through `AwaitWork` and wakes this loop, so beats only need to say the
                // node lives. A member of a multi-node task beats as often as a node running
                // one, so that it hears of the task's end within a beat.
                let (idle, queue_waits, holds_outputs) = {
                    let sh = shared.lock().unwrap_or_else(|p| p.into_inner());
                    (
                        sh.running.is_empty()
                            && sh.queue.is_empty()
                            && sh.results.is_empty()
                            && sh.member_of.is_empty()
                            && !sh.gathering,
                        !sh.queue.is_empty(),
                        !sh.holds_outputs.is_empty(),
                    )
                };
                let idle = idle
                    && !balance
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .is_balancing()
                    && pipeline.as_ref().is_none_or(accel::Pipeline::is_idle);
                let pause = if idle { idle_interval } else { interval };
                // Nor a divisible chunk, a stream worker or accelerator work (they run outside
                // this loop, which not all of them wake: looked at again when the idle timeout
                // ends).
                let others_rest = || outside_work_rests(&outside, pipeline.as_ref(), &balance);
                // Outputs a running workflow may still fetch keep the agent, but not its beats
                // quick: nothing changes here until the workflow ends, which the next (idle)
                // beat's reply says.
                let nothing_here = idle && !holds_outputs && others_rest();
                if !nothing_here {
                    idle_since = None;
                } else if idle_since.is_none() {
                    idle_since = Some(Instant::now());
                }
                // The beat after the idle timeout ended found nothing here either.
                if std::mem::take(&mut idle_check) && idle_since.is_some() && draining.is_none() {
                    draining = Some(Instant::now());
                    begin_shutdown(&shared, &opts, Stop::Idle);
                    continue 'main;
                }
                let idle_end = match (opts.idle_timeout, idle_since) {
                    (Some(t), Some(since)) if draining.is_none() => Some(since + t),
                    _ => None,
                };
                tokio::select! {
                    () = notify.notified() => {
                        // Group commit, agent side: results of tasks ending within the next moment
                        // ride on the same heartbeat (one RPC and one server transaction for many).
                        coalesce(&launcher, result_window).await;
                    }
                    () = woken.notified() => {}
                    // A chunk or stream worker freed cores a queued task waits for: the next
                    // beat starts it and says so.
                    () = outside.freed(), if queue_waits => {}
                    () = tokio::time::sleep(pause) => {}
                    why = &mut shutdown, if draining.is_none() => {
                        draining = Some(Instant::now());
                        stopped_at_limit |= why == Stop::TimeLimit;
                        begin_shutdown(&shared, &opts, why);
                    }
                    // Draining (`--drain`) when the time limit comes: the tasks are stopped now.
                    () = tokio::time::sleep_until(
                        stop_at.unwrap_or_else(|| Instant::now() + pause).into()
                    ), if stop_at.is_some() && draining.is_some() && !stopped_at_limit => {
                        stopped_at_limit = true;
                        begin_shutdown(&shared, &opts, Stop::TimeLimit);
                    }
                    () = tokio::time::sleep_until(
                        idle_end.unwrap_or_else(|| Instant::now() + pause).into()
                    ), if idle_end.is_some() => {
                        if others_rest() {
                            idle_check = true;
                        } else {
                            idle_since = None;
                        }
                    }
                }
            }
            Err(s) => {
                // Until the agent has registered once, a URL of the wrong scheme or a server
                // without agent registration ends it with the same diagnosis as the client
                // commands give, not retries that can never succeed; every failure is looked
                // at, as a server started after its agent fails first with nothing listening
                // (such a failure is not probed: `mismatch` asks only an address that answered).
                // Once registered, the server has spoken this protocol: failures are waited out.
                if !ever_registered {
                    if node_id.is_none() && s.code() == tonic::Code::Unimplemented {
                        return Err(no_registration(&opts.server));
                    }
                    if let Some(e) = mismatch(&opts.server, &s).await {
                        return Err(e);
                    }
                }
                match s.code() {
                    tonic::Code::Unauthenticated => {
                        return Err(AgentError::Unauthenticated(s.message().to_string()));
                    }
                    // The client token, or a name held by another live agent: retrying cannot
                    // help.
                    tonic::Code::PermissionDenied | tonic::Code::AlreadyExists => {
                        return Err(AgentError::Refused(s.message().to_string()));
                    }
                    // The server refused this node's description (e.g. no cores): retrying
                    // cannot help.
                    tonic::Code::InvalidArgument => {
                        return Err(AgentError::Config(format!(
                            "the server refused to register this node: {}",
                            s.message()
                        )));
                    }
                    _ => {}
                }
                // The server may come back with fresh launch nodes: PCDDB machines start over.
                balance.lock().unwrap_or_else(|p| p.into_inner()).reset();
                if first_failure.is_none() {
                    if unreachable(&s) {
                        warn!("server unreachable ({}); retrying", s.message());
                    } else if s.code() == tonic::Code::FailedPrecondition {
                        // The server's own words: why it cannot take this call yet (a name held
                        // by a node not back since its restart), and when it can.
                        warn!("{}", s.message());
                    } else {
                        // The server answered, but the answer could not be used (e.g. a reply
                        // too large to decode): not a network problem, and worth reporting.
                        tracing::error!(
                            code = ?s.code(),
                            "the server's reply could not be read ({}); retrying",
                            s.message()
                        );
                    }
                    first_failure = Some(Instant::now());
                }
                if let Some(since) = draining {
                    // A multi-node task this node was last told it is a member of keeps a
                    // draining agent while the server is away, as its own running task would.
                    let (idle, unreported) = {
                        let sh = shared.lock().unwrap_or_else(|p| p.into_inner());
                        (
                            sh.running.is_empty() && !sh.holds_for_multi_node(&opts),
                            !sh.results.is_empty(),
                        )
                    };
                    if idle && !unreported {
                        info!("shut down: nothing left to report (the server is unreachable)");
                        break 'main;
                    }
                    if idle && (node_id.is_none() || since.elapsed() > shutdown::RESULT_GRACE) {
                        warn!(
                            "shutting down without the server's acknowledgement of every result \
                             (they stay in the ledger; the next agent in this work directory \
                             sends them)"
                        );
                        break 'main;
                    }
                }
                // The idle timeout runs on while the server is away: an agent with nothing to
                // run or report (an allocation whose server stopped, say) still ends.
                let at_rest = {
                    let sh = shared.lock().unwrap_or_else(|p| p.into_inner());
                    sh.running.is_empty()
                        && sh.queue.is_empty()
                        && sh.results.is_empty()
                        && sh.member_of.is_empty()
                } && outside_work_rests(&outside, pipeline.as_ref(), &balance);
                if !at_rest {
                    idle_since = None;
                } else if idle_since.is_none() {
                    idle_since = Some(Instant::now());
                }
                if let (Some(t), Some(since)) = (opts.idle_timeout, idle_since)
                    && draining.is_none()
                    && since.elapsed() >= t
                {
                    draining = Some(Instant::now());
                    begin_shutdown(&shared, &opts, Stop::Idle);
                }
                tokio::select! {
                    () = tokio::time::sleep(backoff) => {}
                    why = &mut shutdown, if draining.is_none() => {
                        draining = Some(Instant::now());
                        stopped_at_limit |= why == Stop::TimeLimit;
                        begin_shutdown(&shared, &opts, why);
                    }
                    // Draining (`--drain`) when the time limit comes: the tasks are stopped now.
                    () = tokio::time::sleep_until(
                        stop_at.unwrap_or_else(|| Instant::now() + backoff).into()
                    ), if stop_at.is_some() && draining.is_some() && !stopped_at_limit => {
                        stopped_at_limit = true;
                        begin_shutdown(&shared, &opts, Stop::TimeLimit);
                    }
                }
                backoff = (backoff * 2).min(Duration::from_millis(500));
            }
        }
    }
    // Shutting down: kill what still runs here.
    {
        let mut sh = shared.lock().unwrap_or_else(|p| p.into_inner());
        for t in sh.running.values_mut() {
            if let Some(tx) = t.kill.take() {
                let _ = tx.send(launch::Kill::Shutdown);
            }
        }
    }
    checks.abort();
    probes.abort();
    if let Some(l) = logs {
        l.stop().await;
    }
    if let Some(l) = data_listener {
        l.stop();
    }
    if let Some(l) = accel_listener {
        l.stop().await;
    }
    Ok(())
}

/// Starts tasks on this node: assignments at once, prefetched ones from the queue as their
/// cores free up.
/// Runs `work` unless `kill` answers first (`Err` with why). A kill sender dropped unused is
/// no kill: `work` goes on, and `kill` is replaced by a receiver that answers the same, since a
/// oneshot that answered must not be polled again (the task's run polls it next).
async fn unless_killed<T>(
    work: impl std::future::Future<Output = T>,
    kill: &mut oneshot::Receiver<launch::Kill>,
) -> Result<T, launch::Kill> {
    tokio::pin!(work);
    let mut kill_open = true;
    loop {
        tokio::select! {
            done = &mut work => return Ok(done),
            why = &mut *kill, if kill_open => match why {
                Ok(why) => return Err(why),
                Err(_) => {
                    kill_open = false;
                    *kill = oneshot::channel().1;
                }
            },
        }
    }
}

struct Launcher<'a> {
    shared: &'a Arc<Mutex<Shared>>,
    notify: &'a Arc<Notify>,
    /// What chunks and stream workers hold here: queued tasks start only in what it leaves.
    outside: &'a outside::Outside,
    opts: &'a AgentOptions,
    pipeline: Option<&'a accel::Pipeline>,
    balance: &'a balance::Handle,
    auth: &'a dataflow::PeerAuth,
}

impl Launcher<'_> {
    /// Starts queued tasks, in order, while their cores fit in what the started tasks leave and
    /// their devices are free (a task larger than the node starts once nothing else runs).
    fn start_queued(&self, sh: &mut Shared) {
        while let Some(q) = sh.queue.front() {
            if !self.fits(sh, &q.a) {
                break;
            }
            let Some(q) = sh.queue.pop_front() else {
                break;
            };
            self.launch(sh, q.a, q.spec);
        }
    }

    /// Whether task `a` can start beside the tasks started and not yet ended, the divisible
    /// chunks and the stream workers: its cores fit (a task larger than the node starts once
    /// nothing else runs) and none of its devices is held.
    fn fits(&self, sh: &Shared, a: &pb::Assignment) -> bool {
        let busy = sh.busy_cores.saturating_add(self.outside.cores());
        let cores = busy == 0 || busy.saturating_add(a.cores) <= self.opts.resources.cores;
        cores && a.devices.iter().all(|d| !sh.busy_devices.contains_key(d))
    }

    /// Starts task `a` running `spec`: its result goes to `results` and wakes the agent.
    fn launch(&self, sh: &mut Shared, a: pb::Assignment, spec: Arc<pb::TaskSpec>) {
        let (tx, rx) = oneshot::channel();
        let (limit_tx, limit_rx) = watch::channel(spec.time_limit_ms);
        let (signal_tx, signal_rx) = tokio::sync::mpsc::unbounded_channel();
        // A workflow instance with inputs fetches them before its program starts; any other
        // task's program starts now (an instance without inputs only has its directory made,
        // which is no fetch: `fetch_ms` 0 says "no inputs").
        let fetching = !a.instance_dir.is_empty() && !a.inputs.is_empty();
        let started_ns = launch::now_ns();
        let old = sh.running.insert(
            a.task_id,
            RunningTask {
                attempt: a.attempt,
                spec: a.spec,
                pid: None,
                kill: Some(tx),
                limit: limit_tx,
                read_bytes: 0,
                started_ns,
                fetching,
                program_started_ns: if fetching { 0 } else { started_ns },
                signal: signal_tx,
                signalled: Default::default(),
            },
        );
        let control = launch::Control {
            kill: rx,
            limit: Some(limit_rx),
            signals: Some(signal_rx),
        };
        sh.busy_cores += a.cores;
        for d in &a.devices {
            *sh.busy_devices.entry(*d).or_default() += 1;
        }
        // A new attempt of a task that still runs here: the old attempt is stale.
        if let Some(tx) = old.and_then(|mut o| o.kill.take()) {
            let _ = tx.send(launch::Kill::Server);
        }
        // A workflow instance placed here with a device of the ANode this NNode is bound to
        // runs there, as a GPU task does (a workflow task's spec says `cpu` whatever its size).
        let route = if dataflow::offloaded(&a) {
            accel::Route::Offload(sh.binding.clone().map(Box::new))
        } else {
            accel::route(&spec, self.opts, self.pipeline, sh.binding.as_ref())
        };
        // A pinned task run here gets CPUs of its own while enough are free (a task that starts
        // beyond the node's CPUs, or holds no cores, runs unbound); an offloaded one is its
        // ANode's to place.
        let held = match (&self.opts.exe, &route) {
            (Some(exe), accel::Route::Direct | accel::Route::Local(_)) if spec.pin => {
                sh.cpus.take(a.cores).map(|cpus| (exe, cpus))
            }
            _ => None,
        };
        if spec.pin && held.is_none() {
            debug!(
                task = a.task_id,
                cores = a.cores,
                free = sh.cpus.free(),
                "a pinned task runs unbound: not enough free CPUs"
            );
        }
        let (spec, held) = match held {
            Some((exe, cpus)) => (Arc::new(cpus::pinned(&spec, exe, &cpus)), cpus),
            None => (spec, Vec::new()),
        };
        let (shared, notify, opts) = (self.shared.clone(), self.notify.clone(), self.opts.clone());
        let (bal, auth) = (self.balance.clone(), self.auth.clone());
        let cores = a.cores;
        tokio::spawn(async move {
            let pid_shared = shared.clone();
            let (task, attempt) = (a.task_id, a.attempt);
            let procs = opts.processes.clone();
            let spawned = Arc::new(std::sync::atomic::AtomicU32::new(0));
            let spawned_in = spawned.clone();
            let on_spawn = move |pid| {
                procs.add(pid);
                spawned_in.store(pid, std::sync::atomic::Ordering::Relaxed);
                let mut sh = pid_shared.lock().unwrap_or_else(|p| p.into_inner());
                sh.ledger.started(task, attempt, pid);
                if let Some(t) = sh.running.get_mut(&task)
                    && t.attempt == attempt
                {
                    t.pid = Some(pid);
                }
            };
            // A workflow instance: its inputs first, from their producers' agents (into a
            // directory of its account's, when it runs as one: a refused account is a failure
            // to start).
            // A kill (a cancel, the attempt no longer this node's, the agent shutting down)
            // stops the preparation too: fetching a large input may take long, and the
            // instance's time limit only starts with its command.
            let mut control = control;
            // Before it writes anything: the job's directories are this incarnation's of its
            // id, not an older job's of the same id that this agent kept (`job_nonce`).
            let claimed = {
                let (work_dir, job, nonce) = (opts.work_dir.clone(), spec.job_id, a.job_nonce);
                let instance = a
                    .instance_dir
                    .split('/')
                    .next()
                    .unwrap_or_default()
                    .to_string();
                tokio::task::spawn_blocking(move || {
                    let mut dirs = vec![work_dir.join(format!("job-{job}"))];
                    // `wf/J`, for a workflow instance (`J/TASK-I`; the server names it).
                    if !instance.is_empty() && instance.bytes().all(|b| b.is_ascii_digit()) {
                        dirs.push(work_dir.join("wf").join(instance));
                    }
                    dirs.iter().enumerate().try_for_each(|(k, d)| {
                        // The first, `job-J`, holds the captured output and its records.
                        let claimed = if k == 0 {
                            job_nonce::claim_task_dir(&work_dir, d, nonce)
                        } else {
                            job_nonce::claim(&work_dir, d, nonce)
                        };
                        claimed
                            .map(drop)
                            .map_err(|e| format!("{}: {e}", d.display()))
                    })
                })
                .await
                .unwrap_or_else(|e| Err(e.to_string()))
            };
            // Where an attempt that ends before its process starts is recorded as one that
            // printed nothing (`ran`).
            let record = ran::Attempt::of(&opts.work_dir, &spec, &a);
            let spec = if let Err(e) = claimed {
                Err((
                    format!(
                        "cannot claim the job's directory on node {}: {e}",
                        opts.name
                    ),
                    true,
                    pb::TaskEnd::StartFailed,
                ))
            } else if a.instance_dir.is_empty() {
                Ok(spec)
            } else {
                let prepared = async {
                    match run_as::resolve(opts.run_as_owner, &spec.run_as, &opts.name).await {
                        Err(e) => Err((e.to_string(), true, pb::TaskEnd::StartFailed)),
                        Ok(account) => {
                            dataflow::prepare(
                                &a,
                                &spec,
                                &opts.work_dir,
                                &auth,
                                account.as_ref(),
                                &opts.data.input_limits(),
                            )
                            .await
                            .map(Arc::new)
                            // Not the instance's failure when an input was lost (the server
                            // produces it again) or this node's disk had no room for it (the
                            // server runs the instance again, elsewhere while this node has
                            // none): interrupted. Any other failure (an input too large,
                            // say) is: its program never started.
                            .map_err(|m| {
                                let end = if dataflow::interrupts(&m) {
                                    pb::TaskEnd::Interrupted
                                } else {
                                    pb::TaskEnd::StartFailed
                                };
                                (m, false, end)
                            })
                        }
                    }
                };
                let prepared = unless_killed(prepared, &mut control.kill).await;
                if prepared.is_err() && !a.inputs.is_empty() {
                    // The preparation was abandoned mid-way: its partial input copies go now,
                    // not when the job is purged (the take-back of an instance still fetching
                    // on a node whose disk ran short most needs the space back). Only while
                    // this attempt is the task's here, and set aside under the lock: a new
                    // attempt of the instance on this node (whose launch killed this one)
                    // fetches into the same `in`, and cannot start between the look and the
                    // rename.
                    let aside = {
                        let sh = shared.lock().unwrap_or_else(|p| p.into_inner());
                        let current = sh.running.get(&task).is_some_and(|t| t.attempt == attempt);
                        current.then(|| {
                            dataflow::set_aside_input_copies(
                                &opts.work_dir,
                                &a.instance_dir,
                                attempt,
                            )
                        })
                    };
                    let removed = match aside {
                        Some(Ok(Some(aside))) => dataflow::remove_set_aside(&aside).await,
                        Some(Err(e)) => Err(e),
                        Some(Ok(None)) | None => Ok(()),
                    };
                    if let Err(e) = removed {
                        warn!(
                            task,
                            attempt, "removing a killed instance's input copies: {e}"
                        );
                    }
                }
                match prepared {
                    Ok(prepared) => prepared,
                    Err(launch::Kill::Shutdown) => Err((
                        "killed while its inputs were fetched: its agent shut down".into(),
                        false,
                        pb::TaskEnd::Interrupted,
                    )),
                    Err(launch::Kill::Server) => Err((
                        "killed at the server's request while its inputs were fetched".into(),
                        false,
                        pb::TaskEnd::Killed,
                    )),
                }
            };
            // Its inputs are all here: from now on its program runs, and the server is told
            // so (at the next heartbeat, and in the result's `fetch_ms`).
            let fetch_ms = if fetching && spec.is_ok() {
                let now = launch::now_ns();
                let mut sh = shared.lock().unwrap_or_else(|p| p.into_inner());
                if let Some(t) = sh.running.get_mut(&task)
                    && t.attempt == attempt
                {
                    t.fetching = false;
                    t.program_started_ns = now;
                }
                // It had inputs: a fetch under a millisecond reads 1, as 0 says "no inputs".
                hetsched_core::time::fetch_ms(started_ns, now).max(1)
            } else {
                0
            };
            let result = match spec {
                Err((m, start_failed, end)) => {
                    record.never_started();
                    pb::TaskResult {
                        task_id: a.task_id,
                        attempt: a.attempt,
                        exit_code: -1,
                        interrupted: end == pb::TaskEnd::Interrupted,
                        start_failed,
                        end: end.into(),
                        message: m,
                        started_ns: launch::now_ns(),
                        finished_ns: launch::now_ns(),
                        ..Default::default()
                    }
                }
                Ok(spec) => {
                    let mut r = accel::run(route, &a, &spec, &opts, control, on_spawn).await;
                    dataflow::check_outputs(&a, &opts.work_dir, &mut r);
                    r.fetch_ms = fetch_ms;
                    r
                }
            };
            // Its outputs stay here for the workflow's consumers: they keep the agent from its
            // idle timeout until the workflow ends.
            let produced_for = (result.success && !a.outputs.is_empty())
                .then(|| dataflow::job_of_instance(&a.instance_dir))
                .flatten();
            opts.processes
                .remove(spawned.load(std::sync::atomic::Ordering::Relaxed));
            end_task(&shared, &bal, task, |sh| {
                sh.ledger.finished(&result);
                sh.busy_cores = sh.busy_cores.saturating_sub(cores);
                for d in &a.devices {
                    if let Some(n) = sh.busy_devices.get_mut(d) {
                        *n -= 1;
                        if *n == 0 {
                            sh.busy_devices.remove(d);
                        }
                    }
                }
                sh.cpus.give_back(&held);
                if let Some(t) = sh.running.get(&task)
                    && t.attempt == attempt
                {
                    sh.stopped_ended |= t.kill.is_none();
                    sh.running.remove(&task);
                }
                if let Some(job) = produced_for {
                    sh.holds_outputs.insert(job);
                }
                sh.results.push(result);
            });
            notify.notify_one();
        });
    }
}

/// Task `task` ended here: `record` puts its result where the next heartbeat takes it (under
/// the lock of `shared`, as the heartbeat reads it), and only then does its PCDDB machine, if
/// one took it, free the core it held ([`balance::Balancer::finished`]).
///
/// In that order because the server bounds a node's PCDDB claims by `MT × cores − x`, `x`
/// what it placed there from the node's replies and still sees queued or running: a machine
/// that freed the core first could take another instance and have its `reply` ride a heartbeat
/// built before the result was queued — one that still lists the task as running — and the
/// server would refuse that claim as one past the bound (dropped, placed again). Queued first,
/// a heartbeat that carries such a reply (it reads the machine's outbox and the results under
/// both locks at once) carries the result too, or a beat before it did.
fn end_task<S>(
    shared: &Mutex<S>,
    balance: &balance::Handle,
    task: u64,
    record: impl FnOnce(&mut S),
) {
    record(&mut shared.lock().unwrap_or_else(|p| p.into_inner()));
    balance
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .finished(task, launch::now_ns());
}

/// The agent's listeners' certificate from a server that certifies them (`[tls]` without
/// `agent_ca`), with the private key made here and the agents' CA.
struct Issued {
    cert_pem: String,
    key_pem: String,
    ca_pem: String,
}

/// How long an agent whose ask for a listener certificate the server refused for its bound
/// per address waits before asking again.
const CERTIFY_RETRY: Duration = Duration::from_secs(5);

/// Asks the server to certify a fresh key for this agent's listeners (see the server's
/// `agent_ca`): `None` when it does not certify agents (no `[tls]`, or an operator's
/// `agent_ca`); a server not reached yet is asked again every second. The request says which
/// node this agent is, with its `identity`, so the server tells it apart from other agents at
/// its address and knows it again from a new one.
async fn listener_certificate<T>(
    client: &mut AgentClient<T>,
    opts: &AgentOptions,
    identity: &str,
) -> Result<Option<Issued>, AgentError>
where
    T: tonic::client::GrpcService<tonic::body::Body>,
    T::Error: Into<tonic::codegen::StdError>,
    T::ResponseBody: tonic::codegen::Body<Data = tonic::codegen::Bytes> + Send + 'static,
    <T::ResponseBody as tonic::codegen::Body>::Error: Into<tonic::codegen::StdError> + Send,
{
    let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)
        .map_err(|e| AgentError::Config(format!("listener key: {e}")))?;
    let advertise_host = opts
        .advertise
        .as_deref()
        .map(|a| {
            a.rsplit_once(':')
                .map_or(a, |(host, _port)| host)
                .trim_matches(['[', ']'])
                .to_string()
        })
        .unwrap_or_default();
    let mut told = false;
    loop {
        let call = client
            .listener_certificate(pb::ListenerCertificateRequest {
                public_key: key.public_key_raw().to_vec(),
                advertise_host: advertise_host.clone(),
                node: opts.name.clone(),
                identity: identity.to_string(),
            })
            .await;
        match call {
            Ok(r) => {
                let r = r.into_inner();
                info!("the server certified this agent's listeners: they speak TLS");
                return Ok(Some(Issued {
                    cert_pem: r.cert_pem,
                    key_pem: key.serialize_pem(),
                    ca_pem: r.ca_pem,
                }));
            }
            Err(s)
                if matches!(
                    s.code(),
                    tonic::Code::FailedPrecondition | tonic::Code::Unimplemented
                ) =>
            {
                debug!("the server certifies no agent listeners: {}", s.message());
                return Ok(None);
            }
            Err(s) if s.code() == tonic::Code::Unauthenticated => {
                return Err(AgentError::Unauthenticated(s.message().to_string()));
            }
            // Asked over `https://` only: a plain server never answers.
            Err(s) if probe::answered_in_plain(&s) => return Err(plain_server(&opts.server)),
            // The server bounds the certificates it signs per address (agents behind one NAT
            // address starting together): asked again a few seconds later.
            Err(s) if s.code() == tonic::Code::ResourceExhausted => {
                warn!("{}", s.message());
                tokio::time::sleep(CERTIFY_RETRY).await;
            }
            Err(s) if unreachable(&s) => {
                if !told {
                    told = true;
                    warn!(
                        "the server is not reachable yet ({}): asking it to certify this agent's \
                         listeners every second",
                        s.message()
                    );
                }
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            Err(s) => {
                return Err(AgentError::Refused(format!(
                    "certifying this agent's listeners: {}",
                    s.message()
                )));
            }
        }
    }
}

/// Keeps one `AwaitWork` call open while the agent is registered, and makes the agent beat
/// (through `woken`) when the server answers that work waits for this node: a job submitted
/// to an idle cluster, a kill or a workflow message then arrives at once, not at the next
/// interval. A call that fails only costs that: the periodic heartbeats go on. The first
/// failure after a success — or after a call held open for a second or more, which a server
/// restarted while the call was held breaks before answering anything — also makes the agent
/// beat at once, so an idle agent (which beats seldom) meets a restarted server without
/// waiting for its next beat. The call goes over the heartbeats' connection, and moves when they
/// move to a new one.
async fn await_work(
    mut connection: Connection,
    token: pb::TokenInterceptor,
    identity: String,
    mut registered: tokio::sync::watch::Receiver<Option<u32>>,
    woken: Arc<Notify>,
) {
    let mut seen = 0;
    let mut failing = false;
    loop {
        let Some(node_id) = *registered.borrow_and_update() else {
            if registered.changed().await.is_err() {
                return;
            }
            continue;
        };
        let mut client =
            AgentClient::with_interceptor(connection.borrow_and_update().clone(), token.clone());
        let call = client.await_work(pb::AwaitWorkRequest {
            node_id,
            identity: identity.clone(),
            seen,
        });
        let called = std::time::Instant::now();
        tokio::select! {
            r = call => match r {
                Ok(r) => {
                    failing = false;
                    let wake = r.into_inner().wake;
                    if wake != seen {
                        seen = wake;
                        woken.notify_one();
                    }
                }
                Err(s) if s.code() == tonic::Code::Unimplemented => {
                    debug!("the server does not wake agents: heartbeats alone bring work");
                    return;
                }
                Err(_) => {
                    // A call the server had held open for a while broke (it stopped or
                    // restarted, maybe again before any call was answered): a new failure.
                    if called.elapsed() >= Duration::from_secs(1) {
                        failing = false;
                    }
                    if !std::mem::replace(&mut failing, true) {
                        woken.notify_one();
                    }
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            },
            changed = registered.changed() => {
                if changed.is_err() {
                    return;
                }
                // Registered again (maybe under another id): its counter starts afresh.
                seen = 0;
            }
            // The heartbeats moved to a new connection (the old one may be dead): so does the
            // call.
            changed = connection.changed() => if changed.is_err() {
                return;
            },
        }
    }
}

/// Waits before a heartbeat that reports results: while tasks still run here, up to `window`
/// for more of them to end (each end wakes `notify`), and no longer once none runs; otherwise
/// [`COALESCE`].
///
/// Queued (prefetched) tasks are started at each wake-up. While some still wait in the queue the
/// node has work without asking, so results wait — up to [`QUEUE_WINDOW`] — until the queue
/// empties; then the agent beats at once, and its refill arrives while the last tasks run. The
/// end of a task the agent was told to stop is told at once ([`Shared::stopped_ended`]).
async fn coalesce(l: &Launcher<'_>, window: Duration) {
    let start = tokio::time::Instant::now();
    // Whether prefetched tasks waited during this pause.
    let mut had_queue = false;
    loop {
        let (results, running, queued, stopped) = {
            let mut sh = l.shared.lock().unwrap_or_else(|p| p.into_inner());
            l.start_queued(&mut sh);
            (
                !sh.results.is_empty(),
                !sh.running.is_empty(),
                !sh.queue.is_empty(),
                std::mem::take(&mut sh.stopped_ended),
            )
        };
        // A stopped task ended: the server hears of it now.
        if stopped {
            return;
        }
        if !results || !running {
            if !results {
                tokio::time::sleep(COALESCE).await;
            }
            return;
        }
        if queued {
            had_queue = true;
        } else if had_queue {
            // The queue just emptied: ask for more while the last tasks run.
            return;
        }
        let deadline = start + if queued { QUEUE_WINDOW } else { window };
        tokio::select! {
            () = l.notify.notified() => {}
            () = tokio::time::sleep_until(deadline) => return,
        }
    }
}

/// Whether nothing runs outside the heartbeat loop's own records (the idle timeout's test): no
/// divisible chunk held, no stream worker, no accelerator work, no PCDDB machine balancing.
fn outside_work_rests(
    outside: &outside::Outside,
    pipeline: Option<&accel::Pipeline>,
    balance: &balance::Handle,
) -> bool {
    outside.chunks() == 0
        && outside.workers() == 0
        && pipeline.is_none_or(accel::Pipeline::is_idle)
        && !balance
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_balancing()
}

/// Why the agent shuts down.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stop {
    /// The first SIGTERM or SIGINT (or the embedding program's shutdown).
    Signal,
    /// Its `time_limit` less the kill grace has passed.
    TimeLimit,
    /// Nothing has run or waited here for its `idle_timeout`.
    Idle,
    /// An operator asked it to (`hetsched node stop`); `drain`: its running tasks end first.
    Operator {
        /// Let the running tasks end instead of stopping them.
        drain: bool,
    },
}

impl Stop {
    /// Whether the agent lets its running tasks end (`--drain` on a signal, `drain` being the
    /// agent's `--drain`; `node stop --drain`) rather than stopping them.
    fn lets_tasks_end(self, drain: bool) -> bool {
        self == Stop::Signal && drain || self == (Stop::Operator { drain: true })
    }

    /// Whether the agent, shutting down, waits for the multi-node tasks it is a member of to
    /// end: when it lets its tasks end, and at its idle timeout (a membership told in the last
    /// instant: nothing else ran here, and leaving would lose the task); not when it stops its
    /// tasks.
    fn waits_for_members(self, drain: bool) -> bool {
        self == Stop::Idle || self.lets_tasks_end(drain)
    }

    /// As the last heartbeat says it (`leaving`).
    fn as_str(self) -> &'static str {
        match self {
            Stop::Signal => "signal",
            Stop::TimeLimit => "time-limit",
            Stop::Idle => "idle-timeout",
            Stop::Operator { .. } => "operator",
        }
    }
}

/// Whether a `hetsched node stop` the server relays (`drain`: with `--drain`) to an agent already
/// shutting down changes what it does: a plain stop while it lets its tasks end (`node stop
/// --drain`, or a signal with `--drain`) stops them now, as Slurm's second `scancel` does; any
/// other stop asks nothing it is not already doing.
fn escalates(shared: &Mutex<Shared>, opts: &AgentOptions, drain: bool) -> bool {
    let sh = shared.lock().unwrap_or_else(|p| p.into_inner());
    !drain && sh.leaving.is_some_and(|why| why.lets_tasks_end(opts.drain))
}

/// The first shutdown signal, or the end of the agent's time limit: from now on heartbeats say
/// `draining`; running tasks are killed (their results say `interrupted`), or on a signal with
/// `--drain` left to finish (at the time limit they are stopped whatever `--drain` says: the
/// agent's time is up). The multi-node tasks this node is a member of are waited for likewise
/// ([`Stop::waits_for_members`]), or left (the server then runs them again).
fn begin_shutdown(shared: &Mutex<Shared>, opts: &AgentOptions, why: Stop) {
    let mut sh = shared.lock().unwrap_or_else(|p| p.into_inner());
    let running = sh.running.len();
    // What `running` leaves out: no process of theirs runs here.
    let multi_node = sh.member_of.len();
    // The time limit after a `--drain` signal: it is the time limit that ends the agent.
    sh.leaving = Some(why);
    // Prefetched tasks not started yet stay unstarted: the server sees them vanish from this
    // node's heartbeats and runs them elsewhere.
    sh.queue.clear();
    if why == Stop::Idle {
        info!(
            idle_timeout = ?opts.idle_timeout.unwrap_or_default(),
            multi_node,
            "idle for the idle timeout: shutting down (--idle-timeout)"
        );
        // Work that reached it in the last instant is given back, as at any shutdown (a
        // multi-node task it became a member of in that instant is waited for: leaving would
        // lose it).
        for t in sh.running.values_mut() {
            if let Some(tx) = t.kill.take() {
                let _ = tx.send(launch::Kill::Shutdown);
            }
        }
    } else if why == Stop::TimeLimit {
        info!(
            running,
            multi_node,
            grace = ?opts.kill_grace,
            "the time limit is one kill grace away: taking no new work, stopping the running \
             tasks (SIGTERM, then SIGKILL after the kill grace, which ends with the time limit) \
             and leaving the multi-node tasks this node is a member of; the server runs them \
             again elsewhere"
        );
        for t in sh.running.values_mut() {
            if let Some(tx) = t.kill.take() {
                let _ = tx.send(launch::Kill::Shutdown);
            }
        }
    } else if why.lets_tasks_end(opts.drain) {
        info!(
            running,
            multi_node,
            by_operator = why != Stop::Signal,
            "shutting down: taking no new work, waiting for the running tasks to end (--drain), the \
             multi-node tasks this node is a member of too; a second signal kills them and exits \
             at once"
        );
    } else {
        info!(
            running,
            multi_node,
            grace = ?opts.kill_grace,
            "shutting down: taking no new work, stopping the running tasks (SIGTERM, then SIGKILL \
             after the kill grace) and leaving the multi-node tasks this node is a member of; the \
             server runs them again elsewhere; a second signal kills them at once"
        );
        for t in sh.running.values_mut() {
            if let Some(tx) = t.kill.take() {
                let _ = tx.send(launch::Kill::Shutdown);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hetsched_core::testkit::ScratchDir;

    /// A PCDDB instance that ends here has its result queued before its machine frees the core
    /// it held: while a heartbeat is being built (it holds the shared state), the machine still
    /// holds the instance, so no `reply` it makes can ride a beat that lacks the result (the
    /// server, bounding claims by `MT × cores − x`, would still count the task as running and
    /// refuse one claim). Seen where it matters: what the machine holds at the moment the result
    /// is queued, under the shared state's lock (where a heartbeat reads the results), with no
    /// thread to wait for.
    #[test]
    fn a_task_that_ends_has_its_result_queued_before_its_pcddb_core_is_freed() {
        let balance: balance::Handle = Arc::default();
        {
            let mut b = balance.lock().expect("balancer");
            let key = balance::testing::key(1);
            b.sync(1, 2, &[balance::testing::job(vec![0], 0, &key)]);
            // From the launch node (a heartbeat reply): instance 0, task 1000, taken here.
            b.deliver(balance::testing::request(99, 1, &[(0, 0)], &[1]), 0, false);
            assert_eq!(b.held(), 1);
        }
        let results: Arc<Mutex<Vec<u64>>> = Arc::default();
        let mut held_when_queued = None;
        end_task(&results, &balance, 1000, |r| {
            held_when_queued = Some(balance.lock().expect("balancer").held());
            r.push(1000);
        });
        assert_eq!(
            held_when_queued,
            Some(1),
            "the core was freed before the result was queued"
        );
        assert_eq!(*results.lock().expect("results"), [1000]);
        assert_eq!(balance.lock().expect("balancer").held(), 0, "freed after");
    }

    #[test]
    fn a_respecced_task_takes_the_new_time_limit_and_keeps_its_memory_and_command() {
        let own = pb::TaskSpec {
            key: 7,
            argv: vec!["sleep".into(), "30".into()],
            memory_limit_bytes: 256 << 20,
            time_limit_ms: 60_000,
            ..Default::default()
        };
        let new = pb::TaskSpec {
            key: 8,
            argv: vec!["sleep".into(), "30".into()],
            memory_limit_bytes: 16 << 20,
            time_limit_ms: 7_200_000,
            ..Default::default()
        };
        let r = respecced(&own, &new);
        assert_eq!(r.time_limit_ms, 7_200_000);
        assert_eq!(
            r.memory_limit_bytes,
            256 << 20,
            "booked for it on this node"
        );
        assert_eq!((r.key, &r.argv), (7, &own.argv));
    }

    #[test]
    fn a_shutdown_waits_for_the_multi_node_tasks_it_is_a_member_of_only_when_its_tasks_may_end() {
        // (why, the agent's --drain) → waits.
        let cases = [
            (Stop::Signal, false, false),
            (Stop::Signal, true, true),
            (Stop::Operator { drain: false }, true, false),
            (Stop::Operator { drain: true }, false, true),
            (Stop::TimeLimit, true, false),
            // Told in the last instant before its idle timeout shut it down: leaving would lose
            // the task, and nothing else runs there.
            (Stop::Idle, false, true),
        ];
        for (why, drain, waits) in cases {
            assert_eq!(
                why.waits_for_members(drain),
                waits,
                "{why:?}, --drain {drain}"
            );
        }
    }

    /// What a test's [`Launcher`] borrows besides the agent's shared state and options: its
    /// own wake-up, nothing running outside its records, no balancer's work, and node `b`'s
    /// credentials towards other agents ([`consumer_agent`]'s node).
    struct LaunchParts {
        notify: Arc<Notify>,
        outside: outside::Outside,
        balance: balance::Handle,
        auth: dataflow::PeerAuth,
    }

    impl Default for LaunchParts {
        fn default() -> Self {
            Self {
                notify: Arc::new(Notify::new()),
                outside: outside::Outside::default(),
                balance: balance::Handle::default(),
                auth: dataflow::tests::consumer_auth(),
            }
        }
    }

    /// A launcher of the agent whose state and options are `shared` and `opts` (from
    /// [`consumer_agent`]), without an accelerator pipeline.
    fn launcher_of<'a>(
        shared: &'a Arc<Mutex<Shared>>,
        opts: &'a AgentOptions,
        parts: &'a LaunchParts,
    ) -> Launcher<'a> {
        Launcher {
            shared,
            notify: &parts.notify,
            outside: &parts.outside,
            opts,
            pipeline: None,
            balance: &parts.balance,
            auth: &parts.auth,
        }
    }

    /// The first result the agent of `shared` queued for the server, waited for until
    /// `deadline`.
    async fn first_result(shared: &Arc<Mutex<Shared>>, deadline: Instant) -> pb::TaskResult {
        loop {
            if let Some(r) = shared
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .results
                .first()
            {
                return r.clone();
            }
            assert!(Instant::now() < deadline, "no result");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// A one-core agent (node `b`) working in `work_dir`, with nothing running: its shared
    /// state and options, for tests that launch workflow instances on it.
    fn consumer_agent(work_dir: &std::path::Path) -> (Arc<Mutex<Shared>>, AgentOptions) {
        let (ledger, _) = ledger::Ledger::recover(work_dir).expect("ledger");
        let shared = Arc::new(Mutex::new(Shared {
            running: HashMap::new(),
            specs: HashMap::new(),
            results: Vec::new(),
            queue: VecDeque::new(),
            busy_cores: 0,
            busy_devices: HashMap::new(),
            stopped_ended: false,
            cpus: cpus::CpuPool::of_this_process(1),
            ledger,
            binding: None,
            leaving: None,
            signal_acks: Vec::new(),
            chunks: Default::default(),
            member_of: Vec::new(),
            gathering: false,
            holds_outputs: Default::default(),
        }));
        let opts = AgentOptions {
            server: "http://127.0.0.1:1".into(),
            token: "t".into(),
            ca_pem: None,
            name: "b".into(),
            resources: detect::Resources {
                cores: 1,
                memory_bytes: 1 << 30,
                accelerators: Vec::new(),
                device_names: launch::unnamed_devices(0),
            },
            core_speed: 1.0,
            disk_read_bw: 200e6,
            work_dir: work_dir.to_path_buf(),
            no_exec: false,
            log: Default::default(),
            log_listen: None,
            log_tls: None,
            drain: false,
            kill_grace: launch::DEFAULT_KILL_GRACE,
            processes: Default::default(),
            accel: Default::default(),
            advertise: None,
            data: Default::default(),
            exe: None,
            time_limit: None,
            idle_timeout: None,
            run_as_owner: false,
            stale_keep: None,
        };
        (shared, opts)
    }

    /// An agent service that refuses the first `refusals` listener-certificate asks for its
    /// bound per address, then certifies; nothing else.
    struct Certifier {
        refusals: std::sync::atomic::AtomicU32,
        /// The node and identity of each request.
        asked: Arc<std::sync::Mutex<Vec<(String, String)>>>,
    }

    #[tonic::async_trait]
    impl pb::agent_server::Agent for Certifier {
        async fn register(
            &self,
            _: tonic::Request<pb::RegisterRequest>,
        ) -> Result<tonic::Response<pb::RegisterReply>, tonic::Status> {
            Err(tonic::Status::unimplemented("register"))
        }
        async fn heartbeat(
            &self,
            _: tonic::Request<pb::HeartbeatRequest>,
        ) -> Result<tonic::Response<pb::HeartbeatReply>, tonic::Status> {
            Err(tonic::Status::unimplemented("heartbeat"))
        }
        async fn await_work(
            &self,
            _: tonic::Request<pb::AwaitWorkRequest>,
        ) -> Result<tonic::Response<pb::AwaitWorkReply>, tonic::Status> {
            Err(tonic::Status::unimplemented("await_work"))
        }
        async fn purged_jobs(
            &self,
            _: tonic::Request<pb::PurgedJobsRequest>,
        ) -> Result<tonic::Response<pb::PurgedJobsReply>, tonic::Status> {
            Err(tonic::Status::unimplemented("purged_jobs"))
        }
        async fn listener_certificate(
            &self,
            req: tonic::Request<pb::ListenerCertificateRequest>,
        ) -> Result<tonic::Response<pb::ListenerCertificateReply>, tonic::Status> {
            use std::sync::atomic::Ordering;
            let r = req.into_inner();
            self.asked.lock().expect("asked").push((r.node, r.identity));
            let left = self.refusals.load(Ordering::SeqCst);
            if left > 0 {
                self.refusals.store(left - 1, Ordering::SeqCst);
                return Err(tonic::Status::resource_exhausted(
                    "the server certified 64 listener keys for 127.0.0.1 in the last 60 s",
                ));
            }
            Ok(tonic::Response::new(pb::ListenerCertificateReply {
                cert_pem: "cert".into(),
                ca_pem: "ca".into(),
            }))
        }
    }

    /// An agent whose ask for a listener certificate the server refuses for its bound per
    /// address (agents behind one NAT address starting together) asks again a little later and
    /// is certified; before, it exited at once.
    #[tokio::test]
    async fn an_agent_refused_a_certificate_for_the_servers_bound_asks_again() {
        let asked = Arc::new(std::sync::Mutex::new(Vec::new()));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let address = listener.local_addr().expect("address");
        let server = tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(pb::agent_server::AgentServer::new(Certifier {
                    refusals: 1.into(),
                    asked: asked.clone(),
                }))
                .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
        );
        let channel = tonic::transport::Endpoint::from_shared(format!("http://{address}"))
            .expect("endpoint")
            .connect_lazy();
        let mut client = AgentClient::new(channel);
        let dir = ScratchDir::new("agent", "certify");
        let (_, opts) = consumer_agent(&dir);
        let issued = listener_certificate(&mut client, &opts, "the-identity")
            .await
            .expect("certified once the bound allows")
            .expect("a certificate");
        assert_eq!(
            (issued.cert_pem.as_str(), issued.ca_pem.as_str()),
            ("cert", "ca")
        );
        // Each ask says which node this agent is, and proves it (the server tells agents at one
        // address apart by it).
        let asked = asked.lock().expect("asked").clone();
        assert_eq!(
            asked,
            vec![(opts.name.clone(), "the-identity".to_string()); 2]
        );
        server.abort();
    }

    /// Attempt `attempt` of task 5, instance `7/C-0` of spec 9 ([`cat_x_and_y`]) on node `b`:
    /// its input `x` from the producer's agent at `x_address`, `y` from the one at `y_address`.
    fn x_and_y_instance(attempt: u32, x_address: &str, y_address: &str) -> pb::Assignment {
        use dataflow::tests::signed_input;
        pb::Assignment {
            task_id: 5,
            attempt,
            spec: 9,
            cores: 1,
            instance_dir: "7/C-0".into(),
            inputs: vec![
                signed_input(x_address, "x", "b", 5, attempt),
                signed_input(y_address, "y", "b", 5, attempt),
            ],
            outputs: vec!["o".into()],
            ..Default::default()
        }
    }

    /// Spec 9: its output `o` is its inputs `x` and `y` one after the other.
    fn cat_x_and_y() -> pb::TaskSpec {
        pb::TaskSpec {
            key: 9,
            argv: vec![
                "sh".into(),
                "-c".into(),
                "cat {input:x} {input:y} > {output:o}".into(),
            ],
            ..Default::default()
        }
    }

    /// A workflow instance whose inputs are still being fetched is listed by the heartbeat as
    /// `fetching`, without a program start; once its inputs are all here, as running, with its
    /// program's start (after the fetch), and its result says how long the fetch took
    /// (`fetch_ms`). The producer's agent holds no data key at first (its server has not
    /// answered yet), so the consumer's fetch waits until the test gives it one.
    #[tokio::test]
    async fn a_workflow_instance_is_reported_fetching_until_its_inputs_are_here_then_running() {
        use dataflow::tests::{KEY, serve_producer, signed_input};
        let root = ScratchDir::new("fetch", "fetching");
        let (producer, consumer) = (root.join("producer"), root.join("consumer"));
        let out = producer.join("wf/7/P-0/out");
        std::fs::create_dir_all(&out).expect("out");
        std::fs::create_dir_all(&consumer).expect("consumer");
        std::fs::write(out.join("x"), "x's data").expect("x");
        let (address, key, server) = serve_producer(&producer, None).await;
        let (shared, opts) = consumer_agent(&consumer);
        let parts = LaunchParts::default();
        let launcher = launcher_of(&shared, &opts, &parts);
        let a = pb::Assignment {
            task_id: 5,
            attempt: 1,
            spec: 9,
            cores: 1,
            instance_dir: "7/C-0".into(),
            inputs: vec![signed_input(&address, "x", "b", 5, 1)],
            outputs: vec!["o".into()],
            ..Default::default()
        };
        let spec = pb::TaskSpec {
            key: 9,
            argv: vec![
                "sh".into(),
                "-c".into(),
                "cat {input:x} > {output:o}; sleep 1".into(),
            ],
            ..Default::default()
        };
        let reported = || {
            let sh = shared.lock().unwrap_or_else(|p| p.into_inner());
            let tasks = sh.reported_tasks();
            assert_eq!(tasks.len(), 1, "listed until its program ends: {tasks:?}");
            tasks[0]
        };
        launcher.launch(
            &mut shared.lock().unwrap_or_else(|p| p.into_inner()),
            a,
            Arc::new(spec),
        );
        // The fetch waits for the producer's key: fetching, no program started.
        tokio::time::sleep(Duration::from_millis(700)).await;
        let t = reported();
        assert!(
            !t.queued && t.fetching && t.program_started_ns == 0 && t.started_ns > 0,
            "{t:?}"
        );
        let released = launch::now_ns();
        key.set(&KEY);
        let deadline = Instant::now() + Duration::from_secs(10);
        let t = loop {
            let t = reported();
            if !t.fetching {
                break t;
            }
            assert!(Instant::now() < deadline, "still fetching: {t:?}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        assert!(
            t.program_started_ns >= released && t.started_ns < released,
            "its program started once its input was here: {t:?}"
        );
        let r = first_result(&shared, deadline).await;
        assert!(r.success, "{r:?}");
        assert_eq!(
            r.fetch_ms,
            hetsched_core::time::fetch_ms(t.started_ns, t.program_started_ns),
            "the fetch's time, from its start to its program's: {r:?}"
        );
        assert!(r.fetch_ms >= 700, "{r:?}");
        assert_eq!(
            std::fs::read_to_string(consumer.join("wf/7/C-0/out/o")).expect("output"),
            "x's data"
        );
        server.abort();
    }

    /// A workflow instance without inputs fetches nothing: it is never listed `fetching`, its
    /// program's start is its launch, and its result's `fetch_ms` is 0 ("no inputs", as the
    /// protocol says) — not the few milliseconds its directory took to make.
    #[tokio::test]
    async fn a_workflow_instance_without_inputs_reports_no_fetch() {
        let root = ScratchDir::new("fetch", "none");
        let (shared, opts) = consumer_agent(&root);
        let parts = LaunchParts::default();
        let launcher = launcher_of(&shared, &opts, &parts);
        let a = pb::Assignment {
            task_id: 5,
            attempt: 1,
            spec: 9,
            cores: 1,
            instance_dir: "7/P-0".into(),
            outputs: vec!["o".into()],
            ..Default::default()
        };
        let spec = pb::TaskSpec {
            key: 9,
            argv: vec![
                "sh".into(),
                "-c".into(),
                "echo x > {output:o}; sleep 0.3".into(),
            ],
            ..Default::default()
        };
        launcher.launch(
            &mut shared.lock().unwrap_or_else(|p| p.into_inner()),
            a,
            Arc::new(spec),
        );
        let t = {
            let sh = shared.lock().unwrap_or_else(|p| p.into_inner());
            sh.reported_tasks()[0]
        };
        assert!(
            !t.fetching && t.program_started_ns == t.started_ns && t.started_ns > 0,
            "{t:?}"
        );
        let deadline = Instant::now() + Duration::from_secs(10);
        let r = first_result(&shared, deadline).await;
        assert!(r.success, "{r:?}");
        assert_eq!(r.fetch_ms, 0, "{r:?}");
        assert_eq!(
            std::fs::read_to_string(root.join("wf/7/P-0/out/o")).expect("output"),
            "x\n"
        );
    }

    /// A workflow instance killed while its inputs are fetched — a cancel (`Kill::Server`, also
    /// the take-back of an instance still fetching on a node whose disk ran short) or the agent
    /// shutting down (`Kill::Shutdown`) — leaves no input copy: its `in` directory (an input
    /// fetched whole, another still waiting) is removed, while its `out` directory stays until
    /// the job is purged, and nothing outside the instance's directory is touched (another
    /// instance's inputs stay). Before, the copies stayed on disk until the job was purged —
    /// on a disk already short, too.
    #[tokio::test]
    async fn a_workflow_instance_killed_while_fetching_its_inputs_leaves_no_input_copy() {
        use dataflow::tests::{KEY, serve_producer};
        let root = ScratchDir::new("fetch", "killed");
        // Input `x` comes from a producer's agent that serves it at once, `y` from one that holds
        // no data key yet: the fetch of `y` waits (for up to `KEY_WAIT`) with `x` here.
        let (keyed, keyless, consumer) = (
            root.join("keyed"),
            root.join("keyless"),
            root.join("consumer"),
        );
        for (producer, name) in [(&keyed, "x"), (&keyless, "y")] {
            let out = producer.join("wf/7/P-0/out");
            std::fs::create_dir_all(&out).expect("out");
            std::fs::write(out.join(name), format!("{name}'s data")).expect("data");
        }
        let (x_address, _, x_server) = serve_producer(&keyed, Some(&KEY)).await;
        let (y_address, _, y_server) = serve_producer(&keyless, None).await;
        std::fs::create_dir_all(&consumer).expect("consumer");
        // Another instance's input copy, beside the killed one's: it stays.
        let other = consumer.join("wf/7/C-1/in/x/0");
        std::fs::create_dir_all(other.parent().expect("parent")).expect("other");
        std::fs::write(&other, "another instance's copy").expect("other copy");
        let (shared, opts) = consumer_agent(&consumer);
        let parts = LaunchParts::default();
        let launcher = launcher_of(&shared, &opts, &parts);
        let instance = consumer.join("wf/7/C-0");
        let cases = [
            (
                launch::Kill::Server,
                "killed at the server's request while its inputs were fetched",
            ),
            (
                launch::Kill::Shutdown,
                "killed while its inputs were fetched: its agent shut down",
            ),
        ];
        for (attempt, (why, message)) in (1..).zip(cases) {
            launcher.launch(
                &mut shared.lock().unwrap_or_else(|p| p.into_inner()),
                x_and_y_instance(attempt, &x_address, &y_address),
                Arc::new(cat_x_and_y()),
            );
            // `x` is here whole; `y`'s fetch waits for its producer's key.
            let deadline = Instant::now() + Duration::from_secs(10);
            while std::fs::read_to_string(instance.join("in/x/0"))
                .ok()
                .as_deref()
                != Some("x's data")
            {
                assert!(Instant::now() < deadline, "{why:?}: x never fetched");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
            assert!(
                instance.join("in/y").is_dir(),
                "{why:?}: y is being fetched"
            );
            {
                let mut sh = shared.lock().unwrap_or_else(|p| p.into_inner());
                let t = sh.running.get_mut(&5).expect("running");
                assert!(t.fetching, "{why:?}: still fetching");
                let tx = t.kill.take().expect("a kill sender");
                let _ = tx.send(why);
            }
            let r = loop {
                if let Some(r) = shared
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .results
                    .pop()
                {
                    break r;
                }
                assert!(Instant::now() < deadline, "{why:?}: no result");
                tokio::time::sleep(Duration::from_millis(20)).await;
            };
            assert_eq!(
                (r.attempt, r.success, r.message.as_str()),
                (attempt, false, message)
            );
            assert!(
                !instance.join("in").exists(),
                "{why:?}: the input copies are removed"
            );
            assert!(
                instance.join("out").is_dir(),
                "{why:?}: the instance's `out` stays until the job is purged"
            );
            let left: Vec<_> = std::fs::read_dir(&instance)
                .expect("instance dir")
                .map(|e| e.expect("entry").file_name())
                .collect();
            assert_eq!(left, ["out"], "{why:?}: nothing set aside is left");
            assert_eq!(
                std::fs::read_to_string(&other).expect("other copy"),
                "another instance's copy",
                "{why:?}: only the killed instance's inputs go"
            );
        }
        x_server.abort();
        y_server.abort();
    }

    /// A new attempt of an instance launched here while the old one still fetches kills the old
    /// one and fetches into the same `in`. The old attempt's clean-up of its partial copies must
    /// not take the new attempt's: it sets `in` aside only while it is still the task's attempt
    /// here, looked at under the shared lock the launch holds. The test holds that lock from
    /// the new attempt's launch until the new attempt has its first input copy, so the killed
    /// attempt's clean-up runs after that copy exists (the ordering that would lose it); the
    /// new attempt's copy stays, nothing is left set aside, and the new attempt runs with its
    /// own inputs. Seen failing with the look at the attempt removed.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    // The shared lock is held across the wait on purpose: it is what orders the killed
    // attempt's clean-up after the new attempt's copy (on a thread of its own, the test's, while
    // the runtime's workers fetch).
    #[allow(clippy::await_holding_lock)]
    async fn agent_a_killed_fetchs_clean_up_leaves_the_new_attempts_input_copies() {
        use dataflow::tests::{KEY, serve_producer};
        let root = ScratchDir::new("fetch", "race");
        // `x` from a producer that serves it at once (another for the new attempt, with other
        // data), `y` from one that holds no data key yet: each attempt's fetch of `y` waits.
        let (old_x, new_x, keyless, consumer) = (
            root.join("old-x"),
            root.join("new-x"),
            root.join("keyless"),
            root.join("consumer"),
        );
        for (producer, name, data) in [
            (&old_x, "x", "old x"),
            (&new_x, "x", "new x"),
            (&keyless, "y", "y"),
        ] {
            let out = producer.join("wf/7/P-0/out");
            std::fs::create_dir_all(&out).expect("out");
            std::fs::write(out.join(name), data).expect("data");
        }
        let (old_x_address, _, old_x_server) = serve_producer(&old_x, Some(&KEY)).await;
        let (new_x_address, _, new_x_server) = serve_producer(&new_x, Some(&KEY)).await;
        let (y_address, y_key, y_server) = serve_producer(&keyless, None).await;
        std::fs::create_dir_all(&consumer).expect("consumer");
        let (shared, opts) = consumer_agent(&consumer);
        let parts = LaunchParts::default();
        let launcher = launcher_of(&shared, &opts, &parts);
        let instance = consumer.join("wf/7/C-0");
        let assignment =
            |attempt, x_address: &str| x_and_y_instance(attempt, x_address, &y_address);
        let spec = Arc::new(cat_x_and_y());
        // Waits until the instance's `in` holds `x` with `data` and a fetch of `y` under way.
        let fetching = |data: &'static str, what: &'static str| {
            let instance = instance.clone();
            async move {
                let deadline = Instant::now() + Duration::from_secs(10);
                while std::fs::read_to_string(instance.join("in/x/0"))
                    .ok()
                    .as_deref()
                    != Some(data)
                    || !instance.join("in/y").is_dir()
                {
                    assert!(Instant::now() < deadline, "{what}: x never fetched");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            }
        };
        launcher.launch(
            &mut shared.lock().unwrap_or_else(|p| p.into_inner()),
            assignment(1, &old_x_address),
            spec.clone(),
        );
        fetching("old x", "attempt 1").await;
        {
            // The new attempt's launch kills the old one; the old one's clean-up waits for
            // this lock until the new attempt's copies are in `in`.
            let mut sh = shared.lock().unwrap_or_else(|p| p.into_inner());
            launcher.launch(&mut sh, assignment(2, &new_x_address), spec.clone());
            fetching("new x", "attempt 2").await;
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        let result_of = |attempt: u32| {
            shared
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .results
                .iter()
                .find(|r| r.attempt == attempt)
                .cloned()
        };
        let old = loop {
            if let Some(r) = result_of(1) {
                break r;
            }
            assert!(Instant::now() < deadline, "attempt 1: no result");
            tokio::time::sleep(Duration::from_millis(10)).await;
        };
        assert!(!old.success, "{old:?}");
        assert_eq!(
            std::fs::read_to_string(instance.join("in/x/0"))
                .ok()
                .as_deref(),
            Some("new x"),
            "the new attempt's copy of x stays"
        );
        // The new attempt's `y` comes, and it runs with its own inputs.
        y_key.set(&KEY);
        let new = loop {
            if let Some(r) = result_of(2) {
                break r;
            }
            assert!(Instant::now() < deadline, "attempt 2: no result");
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        assert!(new.success, "{new:?}");
        assert_eq!(
            std::fs::read_to_string(instance.join("out/o")).expect("output"),
            "new xy"
        );
        let aside: Vec<_> = std::fs::read_dir(&instance)
            .expect("instance dir")
            .map(|e| e.expect("entry").file_name())
            .filter(|n| n.to_string_lossy().starts_with(".in-abandoned"))
            .collect();
        assert!(aside.is_empty(), "nothing left set aside: {aside:?}");
        old_x_server.abort();
        new_x_server.abort();
        y_server.abort();
    }

    /// A workflow instance's preparation (its inputs fetched from producers' agents, which may
    /// take long) ends at a kill — a cancel, or the agent shutting down — instead of running to
    /// its end first, where neither its time limit nor a cancel reached it; a kill sender
    /// dropped unused lets it finish, and the run after it may still poll the receiver.
    #[tokio::test]
    async fn a_kill_ends_a_workflow_instances_preparation_and_a_dropped_sender_does_not() {
        // A fetch that never ends, killed by the server, then by a shutdown.
        for why in [launch::Kill::Server, launch::Kill::Shutdown] {
            let (tx, mut rx) = oneshot::channel();
            let waited =
                tokio::spawn(
                    async move { unless_killed(std::future::pending::<()>(), &mut rx).await },
                );
            tokio::time::sleep(Duration::from_millis(20)).await;
            let _ = tx.send(why);
            let ended = tokio::time::timeout(Duration::from_secs(5), waited)
                .await
                .expect("the kill ended the preparation")
                .expect("joined");
            assert_eq!(ended, Err(why));
        }
        // The sender dropped while it prepares: no kill; the receiver answers the same after.
        let (tx, mut rx) = oneshot::channel::<launch::Kill>();
        drop(tx);
        let done = unless_killed(
            async {
                tokio::time::sleep(Duration::from_millis(20)).await;
                7
            },
            &mut rx,
        )
        .await;
        assert_eq!(done, Ok(7));
        assert!(rx.await.is_err(), "polled again without a panic: no kill");
        // Prepared before any kill: the receiver still gets a later kill.
        let (tx, mut rx) = oneshot::channel();
        assert_eq!(unless_killed(async { 1 }, &mut rx).await, Ok(1));
        let _ = tx.send(launch::Kill::Server);
        assert!(matches!(rx.await, Ok(launch::Kill::Server)));
    }
}
