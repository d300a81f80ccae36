//! Data flow between agents (issue 13): a workflow instance's outputs stay in the directory of
//! the agent that produced them (`WORK_DIR/wf/JOB/TASK-I/out/NAME`); before a consumer starts,
//! its agent fetches each input from the producer's agent — `AgentData.Fetch`, a stream of
//! chunks, calls carrying the agent token — into the consumer's own directory
//! (`WORK_DIR/wf/JOB/TASK-I/in/NAME/K`), then fills the command's `{input:NAME}`,
//! `{output:NAME}` and `{index}` placeholders (the core's [`expand`]).
//!
//! The service also takes PCDDB messages from other agents ([`crate::balance`]) and answers
//! their round-trip probes. It is served on the agent's log listener, whose address the agent
//! announces (`advertise`) — or, when the agent configuration has a `[tls]` section (`cert`,
//! `key`: the same options as the server's), over TLS on a listener of its own
//! ([`DataListener`]), announced as `https://HOST:PORT`; other agents then verify its certificate
//! with their `ca`. Every call carries the agent token either way.
//!
//! The agent token admits any agent, so it does not say which outputs the server sent a
//! consumer to fetch. A fetch is served only with the server's ticket for it
//! ([`hetsched_proto::ticket::Fetch`]): each input an assignment names carries one, signed with
//! the producer's data key over the output's path, the producer's and consumer's node names and
//! the consumer's task and attempt; the consumer's agent sends it with the request, and the
//! producer's agent verifies it with the data key its server gave it (heartbeat replies'
//! `data_key`) before it opens anything ([`check_ticket`]). No ticket, or one that does not
//! match: `PermissionDenied`, naming the problem — the consumer reports the input unavailable
//! and the server produces it again with fresh tickets (bounded by its `MAX_INPUT_LOSSES`).
//! While the agent holds no key (it started moments ago and its server has not answered yet)
//! every fetch is refused `Unavailable`, marked [`NO_KEY_HEADER`]: the consumer's agent asks
//! again for up to [`KEY_WAIT`] — a restart's window costs no output — and then reports the
//! producer's agent unreachable.

use crate::balance;
use hetsched_core::input::workflow::data_name_problem;
use hetsched_core::input::workflow_runtime::{expand, offloaded_instance};
use hetsched_proto as pb;
use hetsched_proto::agent_data_server::AgentData;
use hetsched_proto::ticket::NO_KEY_HEADER;
use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Component, Path, PathBuf};
use std::pin::Pin;
use tokio::io::AsyncWriteExt;
use tonic::{Request, Response, Status};

/// How the result of an instance whose input could not be fetched begins (the server reads the
/// node and path that follow, and produces that output again).
pub const INPUT_UNAVAILABLE: &str = "input unavailable: node ";

/// How the result of an instance whose inputs found no room on this node's disk begins (the
/// one prefix for workflow inputs and divisible chunks' inputs: [`crate::room::NO_ROOM`]).
/// Reported `interrupted`, as an unavailable input is.
pub use crate::room::NO_ROOM;

/// Whether a failed preparation ([`prepare`]'s error) is not the instance's failure: an input
/// that could not be had ([`INPUT_UNAVAILABLE`]: its producer runs again) or no room for the
/// inputs on this node's disk ([`NO_ROOM`]: the instance runs again). Such an attempt is
/// reported `interrupted`.
pub fn interrupts(message: &str) -> bool {
    message.starts_with(INPUT_UNAVAILABLE) || message.starts_with(NO_ROOM)
}

/// How the cause in such a result begins when the producer's agent could not be reached at all:
/// the server then counts every output on that node as lost until the node beats again, not
/// only the one named.
pub const PRODUCER_UNREACHABLE: &str = "the producer's agent: ";

/// Bytes per streamed chunk.
pub const CHUNK: usize = 256 << 10;

/// The most an agent writes for one fetched input unless its configuration says otherwise
/// (`max_input_bytes`): generous for real workflow data, and a bound on what one producer's
/// agent (any holder of the agent token, misbehaving or hostile) can put on this agent's disk.
pub const DEFAULT_MAX_INPUT_BYTES: u64 = 64 << 30;

// The disk floor's helpers are shared with divisible chunks' inputs ([`crate::room`]); they
// keep their names here for the agent's configuration and tests.
pub use crate::fetch_bandwidth::FetchBandwidth;
pub use crate::room::{DEFAULT_MIN_FREE_DISK, FREE_RECHECK, FreeSpace, statvfs_free};
use crate::room::{NoRoom, Room, TakeError};

/// What fetching a workflow instance's inputs may write on this node.
#[derive(Clone, Debug)]
pub struct InputLimits {
    /// The most bytes written for one fetched input (`max_input_bytes`).
    pub max_input_bytes: u64,
    /// The free space no fetch takes the work directory's filesystem below (`min_free_disk`;
    /// 0: not checked).
    pub min_free_disk: u64,
    /// Where the free space is read.
    pub free_space: FreeSpace,
    /// The agent's cap on the rate it fetches inputs at (`fetch_bandwidth`), shared by all its
    /// fetches: each chunk waits its turn in it before it is written.
    pub fetch_bandwidth: FetchBandwidth,
}

impl Default for InputLimits {
    fn default() -> Self {
        Self {
            max_input_bytes: DEFAULT_MAX_INPUT_BYTES,
            min_free_disk: DEFAULT_MIN_FREE_DISK,
            free_space: FreeSpace::default(),
            fetch_bandwidth: FetchBandwidth::default(),
        }
    }
}

/// An agent's workflow settings (issue 13).
#[derive(Clone, Debug)]
pub struct DataOptions {
    /// Attributes workflow tasks may `require` (`attributes = [...]` in the configuration).
    pub attributes: Vec<String>,
    /// (certificate, key) in PEM: serve `AgentData` over TLS on its own listener.
    pub tls: Option<(Vec<u8>, Vec<u8>)>,
    /// The most bytes written for one fetched input (`max_input_bytes`): a producer's agent
    /// that sends more fails the fetch, and the consumer with it.
    pub max_input_bytes: u64,
    /// The free space fetched inputs leave on the work directory's filesystem
    /// (`min_free_disk`; 0: not checked): a fetch that would go below fails the consumer.
    pub min_free_disk: u64,
    /// The cap on the rate this agent fetches inputs at, all fetches together
    /// (`fetch_bandwidth`; [`FetchBandwidth::default`]: none). Clones of these options, and the
    /// limits they give, share the one bucket.
    pub fetch_bandwidth: FetchBandwidth,
}

impl Default for DataOptions {
    fn default() -> Self {
        Self {
            attributes: Vec::new(),
            tls: None,
            max_input_bytes: DEFAULT_MAX_INPUT_BYTES,
            min_free_disk: DEFAULT_MIN_FREE_DISK,
            fetch_bandwidth: FetchBandwidth::default(),
        }
    }
}

impl DataOptions {
    /// The limits [`prepare`] fetches an instance's inputs under, free space read by `statvfs`,
    /// paced by the agent's one `fetch_bandwidth` bucket.
    pub fn input_limits(&self) -> InputLimits {
        InputLimits {
            max_input_bytes: self.max_input_bytes,
            min_free_disk: self.min_free_disk,
            free_space: FreeSpace::default(),
            fetch_bandwidth: self.fetch_bandwidth.clone(),
        }
    }
}

/// What a call to another agent carries: the agent token, the CA that signed the other
/// agents' certificates (for `https://` peers), and this agent's node name (the consumer a
/// fetch ticket names).
#[derive(Clone, Debug, Default)]
pub struct PeerAuth {
    /// The agent token.
    pub token: String,
    /// CA certificate (PEM), the agent's `ca`.
    pub ca: Option<Vec<u8>>,
    /// This agent's node name: the consumer its fetches name, as the server's tickets do.
    pub node: String,
}

/// The data key this agent's server gave it (heartbeat replies' `data_key`), shared between the
/// heartbeat loop that takes it and the data service that verifies fetch tickets with it.
/// Memory only: an agent that starts holds none until its server's first reply.
#[derive(Clone, Debug, Default)]
pub struct DataKey(std::sync::Arc<std::sync::RwLock<Option<std::sync::Arc<[u8]>>>>);

impl DataKey {
    /// Takes `key` (what the server's reply said); whether it is new (the first, or another
    /// after the server's secret changed).
    pub fn set(&self, key: &[u8]) -> bool {
        let mut held = self.0.write().unwrap_or_else(|p| p.into_inner());
        if held.as_deref() == Some(key) {
            return false;
        }
        *held = Some(key.into());
        true
    }

    /// The key, if the server gave one.
    pub fn get(&self) -> Option<std::sync::Arc<[u8]>> {
        self.0.read().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

impl PeerAuth {
    /// A client of the `AgentData` service at `address` (`host:port`, or `https://host:port`
    /// for a TLS peer), with the token.
    pub async fn connect(
        &self,
        address: &str,
    ) -> Result<
        pb::agent_data_client::AgentDataClient<
            tonic::service::interceptor::InterceptedService<
                tonic::transport::Channel,
                pb::TokenInterceptor,
            >,
        >,
        String,
    > {
        if address.is_empty() {
            return Err(
                "it serves no outputs (it runs with `--log-listen none`, or predates the data \
                 service)"
                    .into(),
            );
        }
        let (url, ca) = if address.starts_with("https://") {
            let Some(ca) = self.ca.as_deref() else {
                return Err(format!(
                    "{address} speaks TLS but this agent has no CA certificate (`ca`)"
                ));
            };
            (address.to_string(), Some(ca))
        } else {
            (format!("http://{address}"), None)
        };
        let ep = pb::endpoint(&url, ca).map_err(|e| e.to_string())?;
        let ch = ep.connect().await.map_err(|e| e.to_string())?;
        let icpt = pb::TokenInterceptor::new(&self.token).map_err(|e| e.to_string())?;
        Ok(pb::agent_data_client::AgentDataClient::with_interceptor(
            ch, icpt,
        ))
    }
}

/// `AgentData` over TLS on a listener of its own.
pub struct DataListener {
    /// The bound address.
    pub addr: std::net::SocketAddr,
    join: tokio::task::JoinHandle<()>,
}

impl DataListener {
    /// Binds `at` and serves `service` over TLS with (certificate, key) to callers holding
    /// `token`.
    pub async fn bind(
        at: std::net::SocketAddr,
        service: DataService,
        token: &str,
        tls: (Vec<u8>, Vec<u8>),
    ) -> Result<Self, String> {
        Self::bind_limited(
            at,
            service,
            token,
            tls,
            hetsched_proto::listen::Limits::agent(),
        )
        .await
    }

    /// [`DataListener::bind`] with its connections bounded by `limits` (the greeting timeout,
    /// the cap: `hetsched_proto::listen`).
    pub(crate) async fn bind_limited(
        at: std::net::SocketAddr,
        service: DataService,
        token: &str,
        tls: (Vec<u8>, Vec<u8>),
        limits: hetsched_proto::listen::Limits,
    ) -> Result<Self, String> {
        let tls =
            hetsched_proto::listen::tls_config(&tls.0, &tls.1).map_err(|e| format!("TLS: {e}"))?;
        let listener = tokio::net::TcpListener::bind(at)
            .await
            .map_err(|e| format!("{at}: {e}"))?;
        let addr = listener.local_addr().map_err(|e| e.to_string())?;
        let svc = pb::agent_data_server::AgentDataServer::with_interceptor(
            service,
            crate::logs::check_token(token),
        );
        let mut builder = hetsched_proto::listen::server();
        let join = tokio::spawn(async move {
            // Without TCP_NODELAY every input fetch and PCDDB hop paid a 40 ms delayed ACK.
            // TCP keepalive too: a vanished peer's connection ends (`agent_tcp`).
            let tcp = hetsched_proto::listen::agent_tcp(listener);
            let incoming = hetsched_proto::listen::incoming(
                tcp,
                Some(tls),
                limits,
                format!("the data listener {addr}"),
            );
            if let Err(e) = builder.add_service(svc).serve_with_incoming(incoming).await {
                tracing::error!("agent data listener: {e}");
            }
        });
        tracing::info!(%addr, "serving workflow data and PCDDB to other agents over TLS");
        Ok(Self { addr, join })
    }

    /// Stops serving.
    pub fn stop(self) {
        self.join.abort();
    }
}

/// Whether `rel` is a plain relative path (no `..`, no root) under `wf/`.
fn safe_rel(rel: &str) -> bool {
    let p = Path::new(rel);
    p.starts_with("wf") && p.components().all(|c| matches!(c, Component::Normal(_)))
}

/// Opens the workflow output `rel` (`wf/JOB/TASK-I/out/NAME`, checked by [`safe_rel`]) without
/// following a link at its end, a regular file only (a FIFO the instance left there would hold
/// the serving thread for good: [`crate::workdir::open_regular`]); in an instance directory an
/// account owns (an instance that ran as its owner, `run_as_owner`), as that account, so that a
/// link the account put in the way leads only where the account may read.
fn open_output(work_dir: &Path, rel: &str) -> std::io::Result<std::fs::File> {
    let path = work_dir.join(rel);
    as_instance_owner(work_dir, rel, || crate::workdir::open_regular(&path, false))
}

/// Runs `f` as the owner of the workflow instance directory `rel` (`wf/JOB/TASK-I…`) is in:
/// directly when it is the agent's, else on a thread that has become the account it was given
/// to ([`give_instance`]), so that what `f` looks at there, links included, it sees with the
/// account's rights only.
fn as_instance_owner<T: Send>(
    work_dir: &Path,
    rel: &str,
    f: impl FnOnce() -> std::io::Result<T> + Send,
) -> std::io::Result<T> {
    use std::os::unix::fs::MetadataExt;
    // `wf/JOB/TASK-I`: only the agent writes in `wf/JOB`, so the instance directory is what
    // the agent made (and gave, [`give_instance`]).
    let instance: PathBuf = Path::new(rel).components().take(3).collect();
    let owner = std::fs::symlink_metadata(work_dir.join(instance))?.uid();
    if owner == crate::workdir::euid() {
        return f();
    }
    let account = crate::run_as::Account::of_uid(owner).map_err(std::io::Error::other)?;
    crate::run_as::hop(Some(&account), f).map_err(std::io::Error::other)?
}

/// Gives workflow instance directory `dir` (`WORK_DIR/wf/JOB/TASK-I`, made afresh by the agent
/// and private to it until now) and all in it to `account`, its own last, and lets the account
/// pass through `wf` and `wf/JOB` (0711) to it.
fn give_instance(
    work_dir: &Path,
    dir: &Path,
    account: &crate::run_as::Account,
) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    fn give_below(dir: &Path, account: &crate::run_as::Account) -> std::io::Result<()> {
        for entry in std::fs::read_dir(dir)? {
            let entry = entry?;
            let path = entry.path();
            if entry.file_type()?.is_dir() {
                give_below(&path, account)?;
            }
            std::os::unix::fs::lchown(&path, Some(account.uid), Some(account.gid))?;
        }
        Ok(())
    }
    give_below(dir, account)?;
    std::os::unix::fs::lchown(dir, Some(account.uid), Some(account.gid))?;
    for pass in [
        work_dir.join("wf"),
        dir.parent().map_or_else(PathBuf::new, Path::to_path_buf),
    ] {
        std::fs::set_permissions(pass, std::fs::Permissions::from_mode(0o711))?;
    }
    Ok(())
}

/// The `AgentData` service of one agent.
pub struct DataService {
    /// The agent's work directory.
    pub work_dir: PathBuf,
    /// Its PCDDB machines.
    pub balance: balance::Handle,
    /// The token and CA for calls to other agents (to pass requests on).
    pub auth: PeerAuth,
    /// Woken when a message waits for the next heartbeat.
    pub wake: std::sync::Arc<tokio::sync::Notify>,
    /// This agent's node name: the producer its outputs' fetch tickets name.
    pub node: String,
    /// The data key fetch tickets are verified with (none yet: every fetch is refused).
    pub key: DataKey,
}

/// Whether `req` may read what it asks for: the server's ticket for it, checked with the data
/// key the server gave this agent (`node`), before anything is opened (the module's doc).
fn check_ticket(node: &str, key: &DataKey, req: &pb::FetchRequest) -> Result<(), Status> {
    use hetsched_proto::ticket;
    let what = format!(
        "fetch of {:?} by node {:?} (task {} attempt {})",
        req.path, req.consumer, req.task_id, req.attempt
    );
    let Some(key) = key.get() else {
        let mut s = Status::unavailable(format!(
            "{what}: node {node:?} holds no data key from its server yet (it has not heard from \
             the server since it started, or the server predates fetch tickets): it serves no \
             workflow output until it does"
        ));
        s.metadata_mut().insert(
            NO_KEY_HEADER,
            tonic::metadata::MetadataValue::from_static("1"),
        );
        return Err(s);
    };
    if req.ticket.is_empty() {
        return Err(Status::permission_denied(format!(
            "{what}: no ticket from the server (the consumer's agent or the server predates \
             fetch tickets)"
        )));
    }
    let fetch = ticket::Fetch {
        path: &req.path,
        producer: node,
        consumer: &req.consumer,
        task_id: req.task_id,
        attempt: req.attempt,
        job_nonce: req.job_nonce,
    };
    if !ticket::verify(&key, &fetch, &req.ticket) {
        return Err(Status::permission_denied(format!(
            "{what}: the ticket does not match (the server's ticket is for another output, \
             producer, consumer, task or attempt, or was signed before this node's data key \
             changed)"
        )));
    }
    Ok(())
}

type ChunkStream =
    Pin<Box<dyn tokio_stream::Stream<Item = Result<pb::FetchChunk, Status>> + Send + 'static>>;

#[tonic::async_trait]
impl AgentData for DataService {
    type FetchStream = ChunkStream;

    async fn fetch(
        &self,
        req: Request<pb::FetchRequest>,
    ) -> Result<Response<Self::FetchStream>, Status> {
        let req = req.into_inner();
        // Before the path is looked at: only the fetches the server sent a consumer on.
        check_ticket(&self.node, &self.key, &req).inspect_err(|s| {
            tracing::warn!("workflow output refused: {}", s.message());
        })?;
        let rel = req.path;
        if !safe_rel(&rel) {
            return Err(Status::invalid_argument(format!(
                "`{rel}` is not a workflow output path"
            )));
        }
        let work_dir = self.work_dir.clone();
        let nonce = req.job_nonce;
        let mut f = tokio::task::spawn_blocking(move || {
            // Only an output of the job incarnation the ticket names: job ids repeat (a
            // restored backup, a fresh data directory) and `wf/J` may be an older job's
            // (`crate::job_nonce`), which is answered as a missing output.
            let job = Path::new(&rel).components().nth(1);
            if !job.is_some_and(|j| crate::job_nonce::serves(&work_dir.join("wf").join(j), nonce)) {
                tracing::info!(
                    path = %rel,
                    "workflow output of another incarnation of its job id not served"
                );
                return Err(Status::not_found(format!(
                    "{rel}: not this job's (another job of the same id wrote it)"
                )));
            }
            open_output(&work_dir, &rel).map_err(|e| match crate::workdir::not_regular(&e) {
                Some(n) => Status::not_found(format!(
                    "{rel} is {}, not a regular file: a workflow output is served only as one",
                    n.what
                )),
                None => Status::not_found(format!("{rel}: {e}")),
            })
        })
        .await
        .map_err(|e| Status::internal(e.to_string()))??;
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        tokio::task::spawn_blocking(move || {
            loop {
                let mut buf = vec![0u8; CHUNK];
                match f.read(&mut buf) {
                    Ok(0) => break,
                    Ok(n) => {
                        buf.truncate(n);
                        if tx.blocking_send(Ok(pb::FetchChunk { data: buf })).is_err() {
                            break;
                        }
                    }
                    Err(e) => {
                        let _ = tx.blocking_send(Err(Status::internal(e.to_string())));
                        break;
                    }
                }
            }
        });
        Ok(Response::new(Box::pin(
            tokio_stream::wrappers::ReceiverStream::new(rx),
        )))
    }

    async fn deliver(
        &self,
        req: Request<pb::BalanceMessage>,
    ) -> Result<Response<pb::BalanceAck>, Status> {
        let env = req.into_inner();
        let fwd = {
            let mut b = self.balance.lock().unwrap_or_else(|p| p.into_inner());
            if let Err(e) = b.check_peer(&env) {
                tracing::warn!("PCDDB request from another agent refused: {e}");
                return Err(e.into());
            }
            b.deliver(env, crate::launch::now_ns(), true)
        };
        balance::send(&self.balance, &self.auth, fwd, self.wake.clone());
        self.wake.notify_one();
        Ok(Response::new(pb::BalanceAck {}))
    }

    async fn ping(
        &self,
        _req: Request<pb::BalanceAck>,
    ) -> Result<Response<pb::BalanceAck>, Status> {
        Ok(Response::new(pb::BalanceAck {}))
    }
}

/// Longest a fetch waits for the producer's agent to answer, or for its next chunk: an agent
/// that takes the connection and then says nothing (stopped, its disk hung) fails the fetch
/// as an unreachable one, instead of holding the consumer in its preparation for ever.
pub const FETCH_IDLE: std::time::Duration = std::time::Duration::from_secs(60);

/// Why an input could not be fetched.
#[derive(Debug, thiserror::Error)]
enum FetchError {
    /// It could not be had (the producer's agent, the network, this agent's disk): the server
    /// produces it again ([`INPUT_UNAVAILABLE`]).
    #[error("{0}")]
    Unavailable(String),
    /// The producer's agent sent more than `limit` bytes (`max_input_bytes`). Not a lost
    /// output: producing it again would send as much again, so the consumer fails.
    #[error(
        "the producer's agent sent more than this agent's `max_input_bytes` ({}) for it",
        bytesize::ByteSize(*.limit)
    )]
    TooLarge {
        /// `max_input_bytes`.
        limit: u64,
    },
    /// No room on this node's disk for (more of) it: below `min_free_disk`, or the disk
    /// refused a write for want of space. The node's condition, not a lost output: producing
    /// it again would not make room here.
    #[error(transparent)]
    NoRoom(#[from] NoRoom),
}

/// A write into `to` that failed: for want of space, the node's disk ([`NoRoom::Disk`]);
/// otherwise unavailable, as before.
fn write_error(to: &Path, e: &std::io::Error) -> FetchError {
    let what = format!("{}: {e}", to.display());
    if crate::room::is_full(e) {
        FetchError::NoRoom(NoRoom::Disk(what))
    } else {
        FetchError::Unavailable(what)
    }
}

/// How long a consumer's agent asks again a producer's agent that holds no data key yet
/// ([`NO_KEY_HEADER`]: it started moments ago, and its server's first reply gives it one)
/// before it reports that agent unreachable: the window of an agent's restart costs no output
/// (the server would produce it again), while an agent whose server never answers it is, for
/// the consumer, out of reach.
pub const KEY_WAIT: std::time::Duration = std::time::Duration::from_secs(15);

/// Fetches one file from another agent into `to`, at most `limits.max_input_bytes` bytes and
/// never below `limits.min_free_disk` free; `req` names it and carries the server's ticket.
async fn fetch(
    address: &str,
    auth: &PeerAuth,
    req: pb::FetchRequest,
    to: &Path,
    limits: &InputLimits,
) -> Result<u64, FetchError> {
    fetch_within(address, auth, req, to, (FETCH_IDLE, KEY_WAIT), limits).await
}

/// [`fetch`], waiting at most `idle` for each step (connection, answer, next chunk), and
/// asking again for at most `key_wait` while the producer's agent holds no data key. Each chunk
/// received waits its turn in `limits.fetch_bandwidth` (the agent's cap, shared with its other
/// fetches) before it is written; that wait is not the producer's silence and counts in no
/// `idle`. A fetch
/// that fails leaves no file at `to`: a partial copy is never read as the input, and one cut
/// at `max_input_bytes` or at the free-space floor is exactly what the bound keeps off the
/// disk. `to`'s directory must exist: its filesystem's free space is read before the producer
/// is asked anything (a node already below the floor costs the producer nothing).
async fn fetch_within(
    address: &str,
    auth: &PeerAuth,
    req: pb::FetchRequest,
    to: &Path,
    (idle, key_wait): (std::time::Duration, std::time::Duration),
    limits: &InputLimits,
) -> Result<u64, FetchError> {
    use FetchError::Unavailable;
    let limit = limits.max_input_bytes;
    let dir = to.parent().unwrap_or(Path::new("."));
    let mut room = Room::new(limits.min_free_disk, &limits.free_space, dir).await?;
    let silent = || {
        Unavailable(format!(
            "{PRODUCER_UNREACHABLE}{address} said nothing for {} s",
            idle.as_secs_f64()
        ))
    };
    let mut c = tokio::time::timeout(idle, auth.connect(address))
        .await
        .map_err(|_| silent())?
        .map_err(|e| Unavailable(format!("{PRODUCER_UNREACHABLE}{e}")))?;
    let asked = tokio::time::Instant::now();
    let mut pause = std::time::Duration::from_millis(100);
    let mut stream = loop {
        let answer = tokio::time::timeout(idle, c.fetch(req.clone()))
            .await
            .map_err(|_| silent())?;
        match answer {
            Ok(r) => break r.into_inner(),
            // Its agent has not heard from its server yet: it will soon (or never, and is
            // then as good as unreachable: its outputs are produced again elsewhere).
            Err(s) if s.metadata().get(NO_KEY_HEADER).is_some() => {
                if asked.elapsed() + pause > key_wait {
                    return Err(Unavailable(format!(
                        "{PRODUCER_UNREACHABLE}{} (still after {} s)",
                        s.message(),
                        asked.elapsed().as_secs()
                    )));
                }
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(std::time::Duration::from_secs(1));
            }
            Err(s) => return Err(Unavailable(s.message().to_string())),
        }
    };
    // Private, and never through a link in its place: a task that ran in the instance's
    // directory cannot redirect the copy.
    let mut file = crate::workdir::create_private(to)
        .map(tokio::fs::File::from_std)
        .map_err(|e| write_error(to, &e))?;
    let copied = async {
        let mut n = 0u64;
        while let Some(chunk) = tokio::time::timeout(idle, stream.message())
            .await
            .map_err(|_| silent())?
            .map_err(|s| Unavailable(s.message().to_string()))?
        {
            // Both checked before the chunk is written: the file never holds more than
            // `limit`, nor does it take the disk below the floor.
            n = n.saturating_add(chunk.data.len() as u64);
            if n > limit {
                return Err(FetchError::TooLarge { limit });
            }
            // Before the stream is read further: the producer's agent is held back by the
            // stream's flow control, and the link carries no more than the cap lets through.
            limits.fetch_bandwidth.take(chunk.data.len() as u64).await;
            room.take(chunk.data.len() as u64, Some(&mut file))
                .await
                .map_err(|e| match e {
                    TakeError::NoRoom(e) => FetchError::NoRoom(e),
                    TakeError::Write(e) => write_error(to, &e),
                })?;
            file.write_all(&chunk.data)
                .await
                .map_err(|e| write_error(to, &e))?;
        }
        file.flush().await.map_err(|e| write_error(to, &e))?;
        Ok(n)
    }
    .await;
    if copied.is_err() {
        drop(file);
        if let Err(e) = tokio::fs::remove_file(to).await {
            tracing::warn!("removing the partial input {}: {e}", to.display());
        }
    }
    copied
}

/// An empty file in an offloaded instance's `out/`, shipped with its inputs so that the ANode's
/// temporary directory has `out/` for the command to write its outputs in (the core's, whose
/// `offloaded_instance` lists it: what the server signs the offload's ticket over).
pub use hetsched_core::input::workflow_runtime::OUT_MARKER;

/// Whether workflow instance `a` runs on an ANode (accelerator sharing, spec 01): the server
/// placed it on this NNode with a device this node reaches through its binding, and named the
/// ANode (`offload_anode`). Such an instance is offloaded as a GPU task is ([`prepare`]).
pub fn offloaded(a: &pb::Assignment) -> bool {
    !a.instance_dir.is_empty() && !a.offload_anode.is_empty()
}

/// Sets aside the input copies of the workflow instance in `instance_dir` (`JOB/TASK-I`, as the
/// server names it), attempt `attempt`, for removal: `WORK_DIR/wf/JOB/TASK-I/in` renamed to
/// `.in-abandoned-ATTEMPT` beside it, where [`remove_set_aside`] removes it. For an instance
/// whose preparation was abandoned — killed while its inputs were fetched (a cancel, the
/// take-back of an instance still fetching on a node whose disk ran short, the agent shutting
/// down) — so that its partial copies do not hold the disk until its job is purged, as a fetch
/// that fails removes them ([`prepare`]). A rename, at once: the caller does it while no new
/// attempt of the instance can start here, whose copies go to a new `in`. The rest of the
/// instance's directory stays (`out`: the job's purge sweeps it). Nothing outside the
/// instance's directory is touched: an `instance_dir` that is not a plain relative path under
/// `wf/` moves nothing, and a rename follows no link. `None`: there was no `in`.
pub fn set_aside_input_copies(
    work_dir: &Path,
    instance_dir: &str,
    attempt: u32,
) -> Result<Option<PathBuf>, String> {
    let rel = format!("wf/{instance_dir}");
    if instance_dir.is_empty() || !safe_rel(&rel) {
        return Err(format!(
            "bad instance directory `{}`",
            instance_dir.escape_debug()
        ));
    }
    let dir = work_dir.join(rel);
    let (inputs, aside) = (dir.join("in"), dir.join(format!(".in-abandoned-{attempt}")));
    match std::fs::rename(&inputs, &aside) {
        Ok(()) => Ok(Some(aside)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(format!("{}: {e}", inputs.display())),
    }
}

/// Removes what [`set_aside_input_copies`] set aside (the removal follows no link).
pub async fn remove_set_aside(aside: &Path) -> Result<(), String> {
    match tokio::fs::remove_dir_all(aside).await {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            Err(format!("{}: {e}", aside.display()))
        }
        _ => Ok(()),
    }
}

/// Prepares workflow instance `a`: its directory, its inputs fetched from their producers'
/// agents (at most `max_input_bytes` each, none taking the disk below `min_free_disk`: the
/// `limits`), and the command with its placeholders filled. Errors say which input failed; one
/// for which [`interrupts`] holds is not the instance's failure (its attempt is reported
/// `interrupted`: an input lost, or no room for the inputs on this node's disk). An
/// instance that runs as `account` (`run_as_owner`) gets a new directory, the account's once
/// its inputs are in.
///
/// An instance that runs on an ANode ([`offloaded`]) has its placeholders filled with paths
/// relative to its directory (`in/NAME/K`, `out/NAME`), and the spec returned runs there
/// (`workdir`), lists those inputs (and [`OUT_MARKER`]) as its `inputs` and its outputs as its
/// `outputs`: the offload ships the inputs into a temporary directory on the ANode, runs the
/// command in it, and writes the outputs back into the instance's `out/`, where a local run
/// leaves them.
pub async fn prepare(
    a: &pb::Assignment,
    spec: &pb::TaskSpec,
    work_dir: &Path,
    auth: &PeerAuth,
    account: Option<&crate::run_as::Account>,
    limits: &InputLimits,
) -> Result<pb::TaskSpec, String> {
    let rel = format!("wf/{}", a.instance_dir);
    // An account's is `JOB/TASK-I`, as the server names them: [`open_output`] finds its owner.
    let account = account.filter(|_| !a.inputs.is_empty() || !a.outputs.is_empty());
    if !safe_rel(&rel) || (account.is_some() && Path::new(&rel).components().count() != 3) {
        return Err(format!("bad instance directory `{}`", a.instance_dir));
    }
    // The names the core's parser accepts, and only those: each is one file name kept as it is
    // and a placeholder `expand` can fill. A name outside the rule (a workflow stored before the
    // rule, a server that does not check) would be renamed by [`crate::launch::component`] onto
    // another item's file, or its placeholder left unfilled.
    for name in a.inputs.iter().map(|i| &i.name).chain(&a.outputs) {
        if let Some(problem) = data_name_problem(name) {
            return Err(format!("data name `{}`: {problem}", name.escape_debug()));
        }
    }
    let dir = work_dir.join(&rel);
    let remote = offloaded(a);
    // A path the command reads or writes: absolute here, relative to the instance's directory
    // (the ANode's temporary one) when it runs on an ANode.
    let named = |relative: PathBuf| {
        if remote {
            relative.display().to_string()
        } else {
            dir.join(relative).display().to_string()
        }
    };
    if account.is_some() {
        // A previous attempt's directory was the account's: nothing of it is trusted (the
        // removal follows no link).
        match tokio::fs::remove_dir_all(&dir).await {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(format!("{}: {e}", dir.display()));
            }
            _ => {}
        }
        crate::workdir::create_private_dir(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    // Only the directories the instance uses (`in/NAME` below, `out`): a wide workflow's
    // instances make many, and making directories was most of what an agent spent on a short
    // instance (ext4 looks for a free inode on every one).
    if !a.inputs.is_empty() {
        // A previous attempt's copies are fetched again.
        let _ = tokio::fs::remove_dir_all(dir.join("in")).await;
    }
    if !a.outputs.is_empty() {
        crate::workdir::create_private_dir(&dir.join("out"))
            .map_err(|e| format!("{}: {e}", dir.join("out").display()))?;
    }
    // An instance run on an ANode ships the marker that makes its `out/` there (the outputs'
    // directory need not exist on the ANode otherwise) with its inputs.
    if remote {
        crate::workdir::create_private_dir(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        if !a.outputs.is_empty() {
            crate::workdir::create_private(&dir.join(OUT_MARKER))
                .map(drop)
                .map_err(|e| format!("{}: {e}", dir.join(OUT_MARKER).display()))?;
        }
    }
    let mut inputs: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (k, input) in a.inputs.iter().enumerate() {
        let name = crate::launch::component(&input.name);
        let into = dir.join("in").join(&name);
        crate::workdir::create_private_dir(&into)
            .map_err(|e| format!("{}: {e}", into.display()))?;
        let to = into.join(k.to_string());
        // What the server's ticket was signed for: the producer's agent checks it.
        let req = pb::FetchRequest {
            path: input.path.clone(),
            ticket: input.ticket.clone(),
            consumer: auth.node.clone(),
            task_id: a.task_id,
            attempt: a.attempt,
            job_nonce: a.job_nonce,
        };
        if let Err(e) = fetch(&input.address, auth, req, &to, limits).await {
            // The copies fetched so far go too: the next attempt fetches them again, and an
            // instance that failed should not keep up to `max_input_bytes` per input here (nor
            // hold the space a full disk lacks).
            let _ = tokio::fs::remove_dir_all(dir.join("in")).await;
            let from = || {
                format!(
                    "input `{}` from node {} ({} at {})",
                    input.name,
                    input.node_id,
                    input.path,
                    if input.address.is_empty() {
                        "no address"
                    } else {
                        &input.address
                    }
                )
            };
            // Neither a too large input nor a full disk is a lost output: producing it again
            // would send as much again, or find the disk as full. A too large input fails the
            // attempt (the server's retries apply), saying what to change. A full disk is this
            // node's condition, which its next report tells the server: the attempt is
            // interrupted ([`NO_ROOM`]), and the instance runs again where there is room.
            return Err(match e {
                FetchError::Unavailable(e) => format!(
                    "{INPUT_UNAVAILABLE}{} {}: input `{}`: {e}",
                    input.node_id, input.path, input.name
                ),
                FetchError::TooLarge { .. } => format!(
                    "{}: {e}; the partial copy was removed (raise `max_input_bytes` in this \
                     agent's configuration for inputs that large)",
                    from()
                ),
                FetchError::NoRoom(_) => format!(
                    "{NO_ROOM}{}: {e}; this instance's input copies were removed, and it runs \
                     again where there is room (free space on this node's disk, or lower \
                     `min_free_disk` in this agent's configuration; 0 turns the floor off)",
                    from()
                ),
            });
        }
        let path = named(Path::new("in").join(&name).join(k.to_string()));
        inputs.entry(input.name.clone()).or_default().push(path);
    }
    let outputs: BTreeMap<String, String> = a
        .outputs
        .iter()
        .map(|o| {
            let path = named(Path::new("out").join(crate::launch::component(o)));
            (o.clone(), path)
        })
        .collect();
    if let Some(account) = account {
        give_instance(work_dir, &dir, account).map_err(|e| {
            format!(
                "{}: giving the instance's directory to account `{}`: {e}",
                dir.display(),
                account.name
            )
        })?;
    }
    let mut s = spec.clone();
    if remote {
        // What it ships is the core's rule, which the server signs the offload's ticket over:
        // the paths above, relative (the names were checked above, so `component` kept them).
        let names: Vec<&str> = a.inputs.iter().map(|i| i.name.as_str()).collect();
        let x = offloaded_instance(&spec.argv, a.index, a.process, &names, &a.outputs);
        s.argv = x.argv;
        // The offload ships `inputs` from, and writes `outputs` back into, the task's directory.
        s.workdir = dir.display().to_string();
        s.inputs = x.inputs;
        s.outputs = x.outputs;
        // The ANode runs it from its spec alone: its rank among its index's processes goes
        // with it (a local run gets it from the assignment).
        if let Some(p) = x.process {
            s.env.insert("HETSCHED_PROCESS".into(), p);
        }
    } else {
        s.argv = expand(&spec.argv, &a.index.to_string(), &inputs, &outputs);
    }
    Ok(s)
}

/// The outputs workflow instance `a` declared that it did not write (no file at
/// `WORK_DIR/wf/JOB/TASK-I/out/NAME` once it exited): an instance that exits 0 without them has
/// failed — else it would succeed, and each consumer fail later fetching what was never there.
///
/// It looks as [`open_output`] serves them, so "written" means "a consumer can fetch it": as
/// the instance directory's owner (the account an instance that ran as its owner was given it
/// to), and without following a link at the output's own place. The instance's account
/// controls that directory: looked at with root's rights, a link it planted there (`out/NAME`,
/// or `out` itself) would tell it whether a file exists where it cannot look (under `/root`),
/// through whether its instance is said to miss the output. A link at `out/NAME` is missing
/// even when it leads to a file the account may read: serving does not follow it, so every
/// consumer's fetch would fail; what a user expects is to hear so now, naming the output (the
/// command is to write the file itself, `{output:NAME}`, not a link to it).
pub fn missing_outputs(a: &pb::Assignment, work_dir: &Path) -> Vec<String> {
    unwritten_outputs(a, work_dir)
        .into_iter()
        .map(|(name, _)| name)
        .collect()
}

/// The job of workflow instance directory `instance_dir` (`JOB/TASK-I`, as the server names
/// it); `None` for one not named so.
pub fn job_of_instance(instance_dir: &str) -> Option<u64> {
    let (job, _) = instance_dir.split_once('/')?;
    job.bytes()
        .all(|b| b.is_ascii_digit())
        .then(|| job.parse().ok())
        .flatten()
}

/// The workflow jobs whose outputs `work_dir` holds (a `wf/JOB/TASK-I/out` directory with
/// something in it), as a restarted agent finds them: the server then says which still run.
pub fn jobs_with_outputs(work_dir: &Path) -> std::collections::BTreeSet<u64> {
    let has_outputs = |job: &Path| {
        std::fs::read_dir(job).is_ok_and(|instances| {
            instances.flatten().any(|i| {
                std::fs::read_dir(i.path().join("out")).is_ok_and(|mut out| {
                    out.any(|e| e.is_ok_and(|e| e.file_name() != ".hetsched-out"))
                })
            })
        })
    };
    crate::sweep::job_dirs(work_dir)
        .into_iter()
        .filter(|(_, dirs)| {
            dirs.iter()
                .any(|d| d.parent().is_some_and(|p| p.ends_with("wf")) && has_outputs(d))
        })
        .map(|(job, _)| job)
        .collect()
}

/// What stands at a declared output's place that is not an output ([`unwritten_outputs`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unwritten {
    /// Nothing, a link, or what cannot be looked at (as the instance's owner).
    Missing,
    /// A directory: an output is one regular file, which a consumer's fetch streams whole.
    Directory,
    /// Something else that is not a regular file (in words: "a FIFO", "a socket"), which the
    /// agent never serves ([`open_output`]).
    Special(&'static str),
}

/// [`missing_outputs`] with what stands at each one's place: a directory is told apart (the
/// command made `{output:d}` a directory, `mkdir -p {output:d}`), so that its message says
/// what to do instead of that nothing was written. Looked at as [`missing_outputs`] says: as
/// the instance directory's owner, without following a final link (a link to a directory is
/// missing, as a link to a file is).
pub fn unwritten_outputs(a: &pb::Assignment, work_dir: &Path) -> Vec<(String, Unwritten)> {
    let rel = Path::new("wf").join(&a.instance_dir);
    let out = work_dir.join(&rel).join("out");
    let state = |o: &String| match std::fs::symlink_metadata(out.join(crate::launch::component(o)))
    {
        Ok(m) if m.is_file() => None,
        Ok(m) if m.is_dir() => Some(Unwritten::Directory),
        Ok(m) if !m.is_symlink() => Some(Unwritten::Special(crate::workdir::type_in_words(
            m.file_type(),
        ))),
        _ => Some(Unwritten::Missing),
    };
    // An instance directory gone, or an owner that is no account here: none can be served.
    as_instance_owner(work_dir, &rel.to_string_lossy(), || {
        Ok(a.outputs
            .iter()
            .filter_map(|o| state(o).map(|s| (o.clone(), s)))
            .collect())
    })
    .unwrap_or_else(|_| {
        a.outputs
            .iter()
            .map(|o| (o.clone(), Unwritten::Missing))
            .collect()
    })
}

/// [`missing_outputs`] applied to a successful instance's `result`: it fails, naming them
/// (a directory as a directory, saying an output is one regular file).
pub fn check_outputs(a: &pb::Assignment, work_dir: &Path, result: &mut pb::TaskResult) {
    if !result.success || a.instance_dir.is_empty() || a.outputs.is_empty() {
        return;
    }
    let unwritten = unwritten_outputs(a, work_dir);
    if unwritten.is_empty() {
        return;
    }
    let names = |kind: Unwritten| -> Vec<String> {
        unwritten
            .iter()
            .filter(|(_, k)| *k == kind)
            .map(|(m, _)| format!("`{m}`"))
            .collect()
    };
    let (missing, dirs) = (names(Unwritten::Missing), names(Unwritten::Directory));
    let mut says = Vec::new();
    if !missing.is_empty() {
        says.push(format!(
            "did not write its declared output{} {} (`{{output:NAME}}` in its command is the \
             file to write, not a link to one)",
            if missing.len() == 1 { "" } else { "s" },
            missing.join(", ")
        ));
    }
    if !dirs.is_empty() {
        // Outputs are served and fetched as one file's bytes; a directory cannot be.
        let first = unwritten
            .iter()
            .find(|(_, k)| *k == Unwritten::Directory)
            .map_or("NAME", |(m, _)| m.as_str());
        says.push(format!(
            "made its declared output{} {} a directory: an output is one regular file, which \
             consumers fetch whole (to pass a directory on, write an archive of it, e.g. \
             `tar cf {{output:{first}}} -C DIR .`, and unpack it in the consumer)",
            if dirs.len() == 1 { "" } else { "s" },
            dirs.join(", ")
        ));
    }
    for (name, kind) in &unwritten {
        if let Unwritten::Special(what) = kind {
            says.push(format!(
                "made its declared output `{name}` {what}: an output is one regular file, which \
                 consumers fetch whole"
            ));
        }
    }
    result.success = false;
    result.set_end(pb::TaskEnd::OutputsMissing);
    result.message = format!("it exited 0 but {}", says.join("; and it "));
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use hetsched_core::testkit::ScratchDir;

    /// An instance that exited 0 without writing a declared output fails, naming it; one that
    /// wrote them all, or failed anyway, is left as it was.
    #[test]
    fn an_instance_that_did_not_write_a_declared_output_fails_naming_it() {
        let dir = ScratchDir::new("dataflow", "outputs");
        let a = pb::Assignment {
            instance_dir: "7/P-0".into(),
            outputs: vec!["x".into(), "y".into()],
            ..Default::default()
        };
        let out = dir.join("wf/7/P-0/out");
        std::fs::create_dir_all(&out).expect("dir");
        std::fs::write(out.join("x"), "x").expect("x");
        let ok = pb::TaskResult {
            success: true,
            end: pb::TaskEnd::Exited.into(),
            ..Default::default()
        };
        let mut r = ok.clone();
        check_outputs(&a, &dir, &mut r);
        assert!(!r.success, "{r:?}");
        assert_eq!(r.end(), pb::TaskEnd::OutputsMissing, "{r:?}");
        assert!(
            r.message
                .starts_with("it exited 0 but did not write its declared output `y`"),
            "{r:?}"
        );
        std::fs::write(out.join("y"), "").expect("y");
        let mut r = ok.clone();
        check_outputs(&a, &dir, &mut r);
        assert!(
            r.success && r.message.is_empty() && r.end() == ok.end(),
            "an empty output is written: {r:?}"
        );
    }

    /// An instance that made its declared output a directory (`mkdir -p {output:d}; echo hi >
    /// {output:d}/f1`) fails saying so — an output is one regular file, and what to write
    /// instead — not that it wrote nothing (before: ``did not write its declared output `d`
    /// (… is the file to write, not a link to one)``). With an output missing beside it, each
    /// is named for what it is.
    #[test]
    fn an_output_made_a_directory_fails_saying_an_output_is_one_regular_file() {
        let dir = ScratchDir::new("wf", "dir-output");
        let a = pb::Assignment {
            instance_dir: "7/P-0".into(),
            outputs: vec!["d".into(), "x".into()],
            ..Default::default()
        };
        let out = dir.join("wf/7/P-0/out");
        std::fs::create_dir_all(out.join("d")).expect("dir");
        std::fs::write(out.join("d/f1"), "hi").expect("f1");
        std::fs::write(out.join("x"), "x").expect("x");
        let ok = pb::TaskResult {
            success: true,
            end: pb::TaskEnd::Exited.into(),
            ..Default::default()
        };
        let mut r = ok.clone();
        check_outputs(&a, &dir, &mut r);
        assert!(!r.success, "{r:?}");
        assert_eq!(r.end(), pb::TaskEnd::OutputsMissing, "{r:?}");
        assert_eq!(
            r.message,
            "it exited 0 but made its declared output `d` a directory: an output is one regular \
             file, which consumers fetch whole (to pass a directory on, write an archive of it, \
             e.g. `tar cf {output:d} -C DIR .`, and unpack it in the consumer)"
        );
        std::fs::remove_file(out.join("x")).expect("rm x");
        let mut r = ok.clone();
        check_outputs(&a, &dir, &mut r);
        assert!(
            r.message.starts_with(
                "it exited 0 but did not write its declared output `x` (`{output:NAME}` in its \
                 command is the file to write, not a link to one); and it made its declared \
                 output `d` a directory: "
            ),
            "{r:?}"
        );
        assert_eq!(missing_outputs(&a, &dir), ["d", "x"]);
    }

    /// An instance that runs as its account and leaves, as its output, a link to a file of
    /// root's the account cannot read (at the output's place, or as its `out` directory) is
    /// told it did not write it, naming it, exactly as if no file were there: whether the agent
    /// (root) finds a file through the account's link tells the account nothing. A link to a
    /// file the account may read is not an output either (serving would not follow it).
    #[tokio::test]
    async fn an_output_an_account_links_to_a_file_it_cannot_read_is_missing_naming_it() {
        use std::os::unix::fs::PermissionsExt;
        if !crate::run_as::tests::root() {
            return;
        }
        let work = ScratchDir::new("wf", "link");
        let nobody = crate::run_as::Account::lookup("n1", "nobody").expect("nobody");
        // Root's: a directory only root may enter, with a file in it; and a file anyone reads.
        let secret = work.join("secret");
        std::fs::create_dir_all(&secret).expect("secret dir");
        std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o700)).expect("chmod");
        std::fs::write(secret.join("res"), "root's").expect("secret");
        let public = work.join("public");
        std::fs::write(&public, "anyone's").expect("public");
        let a = pb::Assignment {
            task_id: 1,
            attempt: 1,
            instance_dir: "7/make-0".into(),
            outputs: vec!["res".into()],
            ..Default::default()
        };
        let run_it = |script: String| {
            let (a, work, nobody) = (a.clone(), work.clone(), nobody.clone());
            async move {
                let spec = pb::TaskSpec {
                    job_id: 7,
                    app: "make".into(),
                    argv: vec!["sh".into(), "-c".into(), script],
                    run_as: "nobody".into(),
                    ..Default::default()
                };
                let ready = prepare(
                    &a,
                    &spec,
                    &work,
                    &PeerAuth::default(),
                    Some(&nobody),
                    &InputLimits::default(),
                )
                .await
                .expect("prepared");
                let (_tx, rx) = tokio::sync::oneshot::channel();
                let mut r = crate::launch::run(
                    &a,
                    &ready,
                    &[],
                    "n1",
                    &work,
                    &work,
                    rx,
                    std::time::Duration::from_secs(5),
                    true,
                    |_| {},
                )
                .await;
                assert!(r.success, "{script:?}: {r:?}", script = spec.argv[2]);
                check_outputs(&a, &work, &mut r);
                r
            }
        };
        let missing = |r: &pb::TaskResult, what: &str| {
            assert!(!r.success, "{what}: {r:?}");
            assert!(
                r.message
                    .starts_with("it exited 0 but did not write its declared output `res`"),
                "{what}: {r:?}"
            );
        };
        let secret_file = secret.join("res").display().to_string();
        let r = run_it(format!("ln -s {secret_file} {{output:res}}")).await;
        missing(&r, "a link to root's file");
        let r = run_it(format!(
            "rmdir $(dirname {{output:res}}) && ln -s {} $(dirname {{output:res}})",
            secret.display()
        ))
        .await;
        missing(&r, "`out`, a link to root's directory");
        let r = run_it(format!("ln -s {} {{output:res}}", public.display())).await;
        missing(&r, "a link to a file the account may read");
        // The file itself, written by the account, is its output.
        let r = run_it("echo made > {output:res}".into()).await;
        assert!(r.success && r.message.is_empty(), "{r:?}");
    }

    #[tokio::test]
    async fn an_instance_that_runs_as_its_account_writes_its_outputs_and_they_are_read_as_it() {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        if !crate::run_as::tests::root() {
            return;
        }
        let work = ScratchDir::new("wf", "as");
        let nobody = crate::run_as::Account::lookup("n1", "nobody").expect("nobody");
        let a = pb::Assignment {
            task_id: 1,
            attempt: 1,
            instance_dir: "7/make-0".into(),
            outputs: vec!["res".into()],
            ..Default::default()
        };
        let spec = pb::TaskSpec {
            job_id: 7,
            app: "make".into(),
            argv: vec!["sh".into(), "-c".into(), "id -un > {output:res}".into()],
            run_as: "nobody".into(),
            ..Default::default()
        };
        // A previous attempt's leftovers (the account's) go.
        let dir = work.join("wf/7/make-0");
        std::fs::create_dir_all(dir.join("old")).expect("old");
        let ready = prepare(
            &a,
            &spec,
            &work,
            &PeerAuth::default(),
            Some(&nobody),
            &InputLimits::default(),
        )
        .await
        .expect("prepared");
        assert!(!dir.join("old").exists());
        for d in [dir.clone(), dir.join("out")] {
            let m = std::fs::metadata(&d).expect("meta");
            assert_eq!((m.uid(), m.gid()), (65534, nobody.gid), "{}", d.display());
        }
        let mode = |p: &Path| std::fs::metadata(p).expect("meta").mode() & 0o7777;
        assert_eq!(
            (mode(&work.join("wf")), mode(&work.join("wf/7"))),
            (0o711, 0o711)
        );
        let (_tx, rx) = tokio::sync::oneshot::channel();
        let r = crate::launch::run(
            &a,
            &ready,
            &[],
            "n1",
            &work,
            &work,
            rx,
            std::time::Duration::from_secs(5),
            true,
            |_| {},
        )
        .await;
        assert!(r.success, "{r:?}");
        let mut f = open_output(&work, "wf/7/make-0/out/res").expect("output");
        let mut text = String::new();
        f.read_to_string(&mut text).expect("read");
        assert_eq!(text, "nobody\n");
        // The account's links lead only where it may read: served as the account, a file of
        // root's is refused.
        let secret = work.join("secret");
        std::fs::create_dir_all(&secret).expect("secret dir");
        std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o700)).expect("chmod");
        std::fs::write(secret.join("res"), "root's").expect("secret");
        std::fs::remove_dir_all(dir.join("out")).expect("rm out");
        std::os::unix::fs::symlink(&secret, dir.join("out")).expect("link");
        let e = open_output(&work, "wf/7/make-0/out/res").expect_err("root's file");
        assert_eq!(e.kind(), std::io::ErrorKind::PermissionDenied, "{e}");
    }
    /// `AgentData.Deliver` refuses, naming the problem, another agent's allocation request
    /// that names a launch node other than the workflow's, and the machine takes nothing from
    /// it; before, it took the instances and its reply went nowhere, so it held them for ever
    /// (and, held up to MT × cores, took no more work).
    #[tokio::test]
    async fn a_pcddb_request_from_another_launch_node_is_refused_and_nothing_is_taken() {
        use balance::testing::{granted, job, key, request};
        use hetsched_core::NodeId;
        use hetsched_core::policy::graph::{Body, Message};
        let handle: balance::Handle = std::sync::Arc::default();
        let k = key(1);
        handle
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .sync(1, 2, &[job(vec![0], 0, &k)]);
        let service = balance_service(&handle);
        let from_launch = |launch: u32| {
            let mut env = request(2, 1, &[(0, 0)], &[1]);
            let mut msg: Message = serde_json::from_str(&env.message_json).expect("json");
            if let Body::Request(r) = &mut msg.body {
                r.launch = NodeId(launch);
            }
            env.message_json = serde_json::to_string(&msg).expect("json");
            granted(env, &k, 7, 1, &[(0, 0)])
        };
        let held = || handle.lock().unwrap_or_else(|p| p.into_inner()).held();
        let e = service
            .deliver(Request::new(from_launch(5)))
            .await
            .expect_err("refused");
        assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");
        assert!(
            e.message()
                .contains("from launch node 5, not the workflow's (99)"),
            "{e:?}"
        );
        assert_eq!(held(), 0, "nothing taken");
        service
            .deliver(Request::new(from_launch(99)))
            .await
            .expect("the launch node's");
        assert_eq!(held(), 1);
    }

    /// The data service of an agent (node 1) whose PCDDB machines are `handle`'s.
    fn balance_service(handle: &balance::Handle) -> DataService {
        DataService {
            work_dir: std::env::temp_dir(),
            balance: handle.clone(),
            auth: PeerAuth::default(),
            wake: std::sync::Arc::default(),
            node: "n1".into(),
            key: DataKey::default(),
        }
    }

    /// Every agent holds the agent token, so `AgentData.Deliver` takes another agent's
    /// allocation request only with the launch node's grant for exactly the instances it
    /// offers: a request with no grant, one offering an instance the grant lacks (invented) or
    /// with its requirements stripped, a grant whose list was widened, a grant of another
    /// workflow or launch-node epoch, one signed with a key an agent made up, and any request
    /// while this node holds no balancing key (an older server) or does not balance the
    /// workflow are refused with `PermissionDenied` naming the problem, and the machine takes
    /// nothing. A genuine hop — the grant of the launch node's request, offering what the
    /// agents before took none of — is taken.
    #[tokio::test]
    async fn a_pcddb_request_without_the_launch_nodes_grant_for_its_instances_is_refused_and_nothing_is_taken()
     {
        use balance::testing::{granted, job, key, request};
        let handle: balance::Handle = std::sync::Arc::default();
        let k = key(1);
        let sync = |j: pb::PcddbJob| {
            handle
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .sync(1, 2, &[j]);
        };
        sync(job(vec![0], 0, &k));
        let service = balance_service(&handle);
        let held = || handle.lock().unwrap_or_else(|p| p.into_inner()).held();
        let received = || handle.lock().unwrap_or_else(|p| p.into_inner()).received;
        // The launch node granted instances 0, 3 and 4 (none requiring an attribute).
        let grant = [(0, 0), (3, 0), (4, 0)];
        let hop = |offered: &[(u32, u64)]| request(2, 1, offered, &[1]);
        let forged_key = key(66);
        let refused: Vec<(&str, pb::BalanceMessage, &str)> = vec![
            ("no grant", hop(&[(0, 0)]), "no grant from the launch node"),
            (
                "an invented instance",
                granted(hop(&[(0, 0), (9, 0)]), &k, 7, 1, &grant),
                "instance 9 (requirements 0x0) is not among the 3 the launch node granted",
            ),
            (
                "requirements stripped",
                granted(hop(&[(3, 0)]), &k, 7, 1, &[(0, 0), (3, 2), (4, 0)]),
                "instance 3 (requirements 0x0) is not among",
            ),
            (
                "the granted list widened",
                {
                    let mut e = granted(hop(&[(9, 0)]), &k, 7, 1, &grant);
                    e.granted_instances.push(9);
                    e.granted_requires.push(0);
                    e
                },
                "the grant does not match",
            ),
            (
                "another workflow's grant",
                granted(hop(&[(0, 0)]), &k, 8, 1, &grant),
                "the grant does not match",
            ),
            (
                "another epoch's grant",
                granted(hop(&[(0, 0)]), &k, 7, 2, &grant),
                "the grant does not match",
            ),
            (
                "a key an agent made up",
                granted(hop(&[(0, 0)]), &forged_key, 7, 1, &grant),
                "the grant does not match",
            ),
        ];
        for (case, env, says) in refused {
            let e = service.deliver(Request::new(env)).await.expect_err(case);
            assert_eq!(e.code(), tonic::Code::PermissionDenied, "{case}: {e:?}");
            assert!(
                e.message()
                    .contains("a PCDDB request of workflow 7 from node 2: "),
                "{case}: {e:?}"
            );
            assert!(e.message().contains(says), "{case}: {e:?}");
            assert_eq!((held(), received()), (0, 0), "{case}: nothing taken");
        }
        // A workflow this node does not balance, and one it balances under an older server
        // (no key): nothing to check a grant with, so nothing from another agent.
        let other = pb::BalanceMessage {
            job_id: 8,
            ..granted(hop(&[(0, 0)]), &k, 8, 1, &grant)
        };
        let e = service
            .deliver(Request::new(other))
            .await
            .expect_err("not balanced here");
        assert_eq!(e.code(), tonic::Code::PermissionDenied, "{e:?}");
        assert!(
            e.message().contains("does not balance the workflow"),
            "{e:?}"
        );
        sync(pb::PcddbJob {
            balance_key: Vec::new(),
            ..job(vec![0], 0, &k)
        });
        let e = service
            .deliver(Request::new(granted(hop(&[(0, 0)]), &k, 7, 1, &grant)))
            .await
            .expect_err("no key");
        assert_eq!(e.code(), tonic::Code::PermissionDenied, "{e:?}");
        assert!(e.message().contains("holds no balancing key"), "{e:?}");
        assert_eq!(held(), 0);
        // A genuine hop: what the agents before left of the grant.
        sync(job(vec![0], 0, &k));
        service
            .deliver(Request::new(granted(
                hop(&[(3, 0), (4, 0)]),
                &k,
                7,
                1,
                &grant,
            )))
            .await
            .expect("a genuine hop");
        assert_eq!((held(), received()), (2, 1));
    }

    /// A request this agent passes on keeps the launch node's grant, and the next agent takes
    /// it; a next agent that refuses it (here: it holds another key, as it would for a forged
    /// grant) makes this agent return the request, with its grant and every instance it did not
    /// take, to the launch node (event e), so nothing is lost.
    #[tokio::test]
    async fn a_request_passed_on_keeps_its_grant_and_one_the_next_agent_refuses_returns_home() {
        use balance::testing::{granted, job, key, request};
        use hetsched_core::policy::graph::{Body, Message};
        let k = key(1);
        // Node 2's agent, on loopback.
        let serve_node2 = |node2_key: hetsched_proto::ticket::GrantKey| async move {
            let h2: balance::Handle = std::sync::Arc::default();
            h2.lock()
                .unwrap_or_else(|p| p.into_inner())
                .sync(2, 2, &[job(vec![0], 0, &node2_key)]);
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
                .await
                .expect("bind");
            let address = listener.local_addr().expect("addr").to_string();
            let server = tokio::spawn(
                tonic::transport::Server::builder()
                    .add_service(pb::agent_data_server::AgentDataServer::with_interceptor(
                        balance_service(&h2),
                        crate::logs::check_token("t"),
                    ))
                    .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
            );
            (h2, address, server)
        };
        for node2_key in [key(1), key(2)] {
            let accepts = node2_key.public() == k.public();
            let (h2, address, server) = serve_node2(node2_key).await;
            // Node 1's agent: the launch node hands it 8 instances (it takes MT × cores = 6)
            // in a heartbeat reply, table [1, 2].
            let h1: balance::Handle = std::sync::Arc::default();
            let mut j = job(vec![0], 0, &k);
            j.peers.insert(2, address.clone());
            h1.lock()
                .unwrap_or_else(|p| p.into_inner())
                .sync(1, 2, &[j]);
            let all: Vec<(u32, u64)> = (0..8).map(|i| (i, 0)).collect();
            let env = granted(request(99, 1, &all, &[1, 2]), &k, 7, 1, &all);
            let original = env.grant.clone();
            let fwd = h1
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .deliver(env, 0, false);
            assert_eq!(fwd.len(), 1, "passed on to node 2");
            assert_eq!(fwd[0].message.grant_serial, 1);
            assert_eq!(
                fwd[0].message.granted_instances,
                (0..8).collect::<Vec<u32>>()
            );
            let auth = PeerAuth {
                token: "t".into(),
                ca: None,
                node: "n1".into(),
            };
            let wake = std::sync::Arc::new(tokio::sync::Notify::new());
            balance::send(&h1, &auth, fwd, wake.clone());
            // Node 1's messages for the launch node until node 2 took the rest, or node 1
            // returned it.
            let mut returned = Vec::new();
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
            loop {
                returned.extend(h1.lock().unwrap_or_else(|p| p.into_inner()).take_outbox());
                let h2_held = h2.lock().unwrap_or_else(|p| p.into_inner()).held();
                if accepts && h2_held == 2 || !accepts && returned.len() >= 2 {
                    break;
                }
                assert!(
                    std::time::Instant::now() < deadline,
                    "node 2 answers within 10 s: {returned:?}"
                );
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
            let bodies: Vec<Body> = returned
                .iter()
                .map(|m| {
                    serde_json::from_str::<Message>(&m.message_json)
                        .expect("json")
                        .body
                })
                .collect();
            assert!(
                matches!(&bodies[0], Body::Reply { taken, remaining: 2, .. } if taken.len() == 6),
                "{bodies:?}"
            );
            if accepts {
                assert_eq!(bodies.len(), 1, "{bodies:?}");
                assert_eq!(h2.lock().unwrap_or_else(|p| p.into_inner()).received, 1);
            } else {
                let Body::Return(r) = &bodies[1] else {
                    panic!("returned home: {bodies:?}");
                };
                let back: Vec<u32> = r.instances.iter().map(|w| w.instance.0).collect();
                assert_eq!(back, [6, 7], "what node 1 did not take goes home");
                assert_eq!(returned[1].grant, original, "with its grant");
                assert_eq!(h2.lock().unwrap_or_else(|p| p.into_inner()).held(), 0);
            }
            server.abort();
        }
    }

    /// A producer's agent that takes the connection and says nothing (stopped, say) fails the
    /// fetch after the idle time as an unreachable producer; before, the consumer waited in its
    /// preparation for ever, where neither its time limit nor a cancel reaches it.
    #[tokio::test]
    async fn a_producer_that_says_nothing_fails_the_fetch_as_unreachable() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let address = listener.local_addr().expect("addr").to_string();
        // Takes connections and holds them, silent.
        let held = tokio::spawn(async move {
            let mut kept = Vec::new();
            while let Ok((c, _)) = listener.accept().await {
                kept.push(c);
            }
        });
        let dir = ScratchDir::new("dataflow", "silent");
        let idle = std::time::Duration::from_millis(300);
        let fetched = tokio::time::timeout(
            std::time::Duration::from_secs(10),
            fetch_within(
                &address,
                &PeerAuth::default(),
                pb::FetchRequest {
                    path: "wf/1/P-0/out/o".into(),
                    ..Default::default()
                },
                &dir.join("o"),
                (idle, KEY_WAIT),
                &InputLimits::default(),
            ),
        )
        .await
        .expect("the fetch gave up within its idle time");
        let e = fetched.expect_err("nothing fetched").to_string();
        assert!(
            e.starts_with(PRODUCER_UNREACHABLE) && e.contains("said nothing for 0.3 s"),
            "{e}"
        );
        held.abort();
    }

    /// An instance that runs on an ANode (its assignment names one) gets paths relative to its
    /// directory and a spec the offload ships from it: that directory as `workdir`, its inputs
    /// (with the marker that makes `out/` there) and its declared outputs; a local one keeps
    /// absolute paths and its spec's own directory.
    #[tokio::test]
    async fn an_offloaded_instance_gets_relative_paths_and_ships_from_its_directory() {
        let work = ScratchDir::new("wf", "offload");
        let mut a = pb::Assignment {
            instance_dir: "7/G-0".into(),
            index: 3,
            outputs: vec!["o".into()],
            process: 2,
            ..Default::default()
        };
        let spec = pb::TaskSpec {
            argv: vec!["sh".into(), "-c".into(), "echo {index} > {output:o}".into()],
            workdir: "/submitted/here".into(),
            ..Default::default()
        };
        let dir = work.join("wf/7/G-0");
        let local = prepare(
            &a,
            &spec,
            &work,
            &PeerAuth::default(),
            None,
            &InputLimits::default(),
        )
        .await
        .expect("local");
        assert_eq!(
            local.argv[2],
            format!("echo 3 > {}", dir.join("out/o").display())
        );
        assert_eq!(local.workdir, "/submitted/here");
        assert!(local.inputs.is_empty() && local.outputs.is_empty());
        assert!(!dir.join(OUT_MARKER).exists());
        a.offload_anode = "anode".into();
        let remote = prepare(
            &a,
            &spec,
            &work,
            &PeerAuth::default(),
            None,
            &InputLimits::default(),
        )
        .await
        .expect("offloaded");
        assert_eq!(remote.argv[2], "echo 3 > out/o");
        assert_eq!(remote.workdir, dir.display().to_string());
        assert_eq!(remote.inputs, [OUT_MARKER]);
        assert_eq!(remote.outputs, ["out/o"]);
        assert_eq!(
            remote.env.get("HETSCHED_PROCESS").map(String::as_str),
            Some("2")
        );
        assert!(dir.join(OUT_MARKER).is_file());
    }

    /// A data name outside the parser's rule (`x{index}`, a workflow stored before it) fails
    /// the instance naming it, before anything is made or fetched, locally and offloaded: its
    /// placeholder would be left unfilled (`{index}` is filled first), and an empty name or
    /// one starting with `.` was renamed onto another item's file (`""` → `_`).
    #[tokio::test]
    async fn an_instance_whose_data_name_breaks_placeholders_or_paths_is_refused() {
        let work = ScratchDir::new("wf", "names");
        let spec = pb::TaskSpec {
            argv: vec!["sh".into(), "-c".into(), "echo > {output:x{index}}".into()],
            ..Default::default()
        };
        for anode in ["", "anode"] {
            for (outputs, input, says) in [
                (
                    vec!["x{index}"],
                    "",
                    "data name `x{index}`: `x{index}` holds a `{` or `}`",
                ),
                (vec![""], "", "data name ``: must not be empty"),
                (vec!["o"], ".x", "data name `.x`: `.x` starts with `.`"),
                // Its path would be pasted into the shell line as it is: `;` ran what
                // followed (a workflow stored before the parser refused it).
                (
                    vec!["x;echo INJECTED"],
                    "",
                    "data name `x;echo INJECTED`: `x;echo INJECTED` holds `;`",
                ),
                (
                    vec!["o"],
                    "my data",
                    "data name `my data`: `my data` holds a space",
                ),
            ] {
                let a = pb::Assignment {
                    instance_dir: "7/G-0".into(),
                    index: 3,
                    outputs: outputs.into_iter().map(String::from).collect(),
                    inputs: if input.is_empty() {
                        Vec::new()
                    } else {
                        vec![pb::WorkflowInput {
                            name: input.into(),
                            address: "127.0.0.1:1".into(),
                            path: "wf/7/P-0/out/x".into(),
                            ..Default::default()
                        }]
                    },
                    offload_anode: anode.into(),
                    ..Default::default()
                };
                let e = prepare(
                    &a,
                    &spec,
                    &work,
                    &PeerAuth::default(),
                    None,
                    &InputLimits::default(),
                )
                .await
                .expect_err("refused");
                assert!(e.starts_with(says), "{anode}: {e}");
                assert!(!work.join("wf/7/G-0").exists(), "nothing made");
            }
        }
    }

    /// The paths placeholders expand to need no quoting (the work directory and data names
    /// are held to characters no shell splits or interprets), so a command that pastes them
    /// bare and one that quotes them itself (`"{output:p}"`, as many did to be safe) both
    /// write the output the agent then finds.
    #[tokio::test]
    async fn placeholder_paths_work_bare_and_in_the_commands_own_quotes() {
        let work = ScratchDir::new("wf", "quoted");
        assert_eq!(crate::workdir::placeholder_problem(&work), None);
        let spec = pb::TaskSpec {
            argv: vec![
                "sh".into(),
                "-c".into(),
                "echo a > {output:o}; echo b > \"{output:v1-2+3@h%4,k=5:x}\"".into(),
            ],
            ..Default::default()
        };
        let a = pb::Assignment {
            instance_dir: "7/G-0".into(),
            outputs: vec!["o".into(), "v1-2+3@h%4,k=5:x".into()],
            ..Default::default()
        };
        let s = prepare(
            &a,
            &spec,
            &work,
            &PeerAuth::default(),
            None,
            &InputLimits::default(),
        )
        .await
        .expect("prepared");
        let out = work.join("wf/7/G-0/out");
        assert_eq!(
            s.argv[2],
            format!(
                "echo a > {}; echo b > \"{}\"",
                out.join("o").display(),
                out.join("v1-2+3@h%4,k=5:x").display()
            )
        );
        let status = std::process::Command::new(&s.argv[0])
            .args(&s.argv[1..])
            .status()
            .expect("sh runs");
        assert!(status.success());
        assert_eq!(missing_outputs(&a, &work), Vec::<String>::new());
    }

    /// A producer's agent that streams more than `max_input_bytes` for one input (misbehaving,
    /// or any holder of the agent token) fails the consumer's preparation naming the input, the
    /// producer and the limit, and leaves nothing of it on the disk: no partial copy, nor the
    /// inputs fetched before it. Not as an unavailable input (producing it again would send as
    /// much again). Before, the agent wrote whatever came, until its disk was full.
    #[tokio::test]
    async fn an_input_larger_than_max_input_bytes_fails_the_fetch_and_leaves_nothing() {
        let root = ScratchDir::new("wf", "big");
        let (producer, consumer) = (root.join("producer"), root.join("consumer"));
        let out = producer.join("wf/7/P-0/out");
        std::fs::create_dir_all(&out).expect("out");
        std::fs::write(out.join("small"), vec![b's'; 1000]).expect("small");
        // Four and a half chunks.
        std::fs::write(out.join("big"), vec![b'b'; 4 * CHUNK + CHUNK / 2]).expect("big");
        let (address, _key, server) = serve_producer(&producer, Some(&KEY)).await;
        let auth = consumer_auth();
        let input = |name: &str| signed_input(&address, name, "b", 5, 1);
        let a = pb::Assignment {
            task_id: 5,
            attempt: 1,
            instance_dir: "7/C-0".into(),
            inputs: vec![input("small"), input("big")],
            ..Default::default()
        };
        let spec = pb::TaskSpec {
            argv: vec!["cat".into(), "{input:small}".into(), "{input:big}".into()],
            ..Default::default()
        };
        let limits = |max_input_bytes| InputLimits {
            max_input_bytes,
            ..InputLimits::default()
        };
        let e = prepare(&a, &spec, &consumer, &auth, None, &limits(2 * CHUNK as u64))
            .await
            .expect_err("too large");
        assert_eq!(
            e,
            format!(
                "input `big` from node 3 (wf/7/P-0/out/big at {address}): the producer's agent \
                 sent more than this agent's `max_input_bytes` (512.0 KiB) for it; the partial \
                 copy was removed (raise `max_input_bytes` in this agent's configuration for \
                 inputs that large)"
            )
        );
        assert!(!e.starts_with(INPUT_UNAVAILABLE), "not produced again");
        assert!(!interrupts(&e), "the attempt fails: {e}");
        let dir = consumer.join("wf/7/C-0");
        assert!(dir.is_dir() || !dir.exists());
        assert!(!dir.join("in").exists(), "nothing of the inputs is left");
        // At the limit exactly, it is fetched whole.
        let ready = prepare(
            &a,
            &spec,
            &consumer,
            &auth,
            None,
            &limits(4 * CHUNK as u64 + CHUNK as u64 / 2),
        )
        .await
        .expect("at the limit");
        assert_eq!(
            std::fs::metadata(&ready.argv[2]).expect("big").len(),
            4 * CHUNK as u64 + CHUNK as u64 / 2
        );
        server.abort();
    }

    /// What a consumer's agent fetches for a workflow instance (its inputs) and the
    /// directories it makes for them (the instance's, `in`, `in/NAME`, `out`) are private to the
    /// agent's user — files 0600, directories 0700 — even under umask 000. Before, they were
    /// created with the agent's umask (0666 and 0777 here).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn fetched_inputs_and_their_directories_are_private_whatever_the_umask() {
        let root = ScratchDir::new("wf", "private");
        let (producer, consumer) = (root.join("producer"), root.join("consumer"));
        let out = producer.join("wf/7/P-0/out");
        std::fs::create_dir_all(&out).expect("out");
        std::fs::write(out.join("x"), "x's data").expect("x");
        let (address, _key, server) = serve_producer(&producer, Some(&KEY)).await;
        let a = pb::Assignment {
            task_id: 5,
            attempt: 1,
            instance_dir: "7/C-0".into(),
            inputs: vec![signed_input(&address, "x", "b", 5, 1)],
            outputs: vec!["y".into()],
            ..Default::default()
        };
        let spec = pb::TaskSpec {
            argv: vec!["cat".into(), "{input:x}".into()],
            ..Default::default()
        };
        let auth = consumer_auth();
        let limits = InputLimits::default();
        crate::workdir::under_umask(0, prepare(&a, &spec, &consumer, &auth, None, &limits))
            .expect("prepared");
        let dir = consumer.join("wf/7/C-0");
        assert_eq!(
            std::fs::read_to_string(dir.join("in/x/0")).expect("fetched"),
            "x's data"
        );
        assert_eq!(crate::workdir::mode_of(&dir.join("in/x/0")), 0o600);
        for d in [
            "wf",
            "wf/7",
            "wf/7/C-0",
            "wf/7/C-0/in",
            "wf/7/C-0/in/x",
            "wf/7/C-0/out",
        ] {
            assert_eq!(crate::workdir::mode_of(&consumer.join(d)), 0o700, "{d}");
        }
        server.abort();
    }

    /// A symbolic link in an input copy's place does not redirect the fetch: it fails, naming
    /// the path and why, and the link's target keeps what it held. Before, the fetch truncated
    /// and overwrote the target.
    #[tokio::test]
    async fn a_fetch_does_not_write_through_a_link_in_the_inputs_place() {
        let root = ScratchDir::new("wf", "link");
        let (producer, consumer) = (root.join("producer"), root.join("consumer"));
        let out = producer.join("wf/7/P-0/out");
        std::fs::create_dir_all(&out).expect("out");
        std::fs::write(out.join("x"), "x's data").expect("x");
        std::fs::create_dir_all(&consumer).expect("consumer");
        let target = root.join("elsewhere");
        std::fs::write(&target, "keep").expect("target");
        let to = consumer.join("0");
        std::os::unix::fs::symlink(&target, &to).expect("link");
        let (address, _key, server) = serve_producer(&producer, Some(&KEY)).await;
        let input = signed_input(&address, "x", "b", 5, 1);
        let req = pb::FetchRequest {
            path: input.path.clone(),
            ticket: input.ticket.clone(),
            consumer: "b".into(),
            task_id: 5,
            attempt: 1,
            job_nonce: 0,
        };
        let e = fetch(
            &address,
            &consumer_auth(),
            req,
            &to,
            &InputLimits::default(),
        )
        .await
        .expect_err("not through the link");
        assert_eq!(
            e.to_string(),
            format!("{}: {}", to.display(), crate::workdir::LINK_IN_PLACE)
        );
        assert_eq!(std::fs::read_to_string(&target).expect("target"), "keep");
        server.abort();
    }

    /// A node whose disk has less free than the agent's `min_free_disk` (read for real, with
    /// `statvfs`: the floor set above what the test's disk has) fetches nothing: the instance's
    /// attempt ends before the producer is asked, naming the input, the producer, the
    /// directory, the free space, the floor and the setting, and nothing of its inputs is on the
    /// disk. Not as an unavailable input (producing it again would not make room here), and not
    /// as the instance's failure: interrupted for want of room ([`NO_ROOM`]), so the server
    /// runs it again elsewhere without counting it against its `retries`. Before, free space
    /// was never read, and fetches wrote until the disk was full; then such an attempt failed.
    #[tokio::test]
    async fn a_node_below_min_free_disk_fetches_nothing_and_says_why() {
        let root = ScratchDir::new("wf", "floor");
        let (producer, consumer) = (root.join("producer"), root.join("consumer"));
        let out = producer.join("wf/7/P-0/out");
        std::fs::create_dir_all(&out).expect("out");
        std::fs::create_dir_all(&consumer).expect("consumer");
        std::fs::write(out.join("x"), "x's data").expect("x");
        let (address, _key, server) = serve_producer(&producer, Some(&KEY)).await;
        let a = pb::Assignment {
            task_id: 5,
            attempt: 1,
            instance_dir: "7/C-0".into(),
            inputs: vec![signed_input(&address, "x", "b", 5, 1)],
            ..Default::default()
        };
        let spec = pb::TaskSpec {
            argv: vec!["cat".into(), "{input:x}".into()],
            ..Default::default()
        };
        let free = statvfs_free(&consumer).expect("statvfs");
        let limits = InputLimits {
            min_free_disk: free + (1 << 40),
            ..InputLimits::default()
        };
        let e = prepare(&a, &spec, &consumer, &consumer_auth(), None, &limits)
            .await
            .expect_err("below the floor");
        let dir = consumer.join("wf/7/C-0/in/x");
        let head = format!(
            "{NO_ROOM}input `x` from node 3 (wf/7/P-0/out/x at {address}): this node's disk is \
             too full for it: the filesystem of {} has ",
            dir.display()
        );
        let tail = format!(
            " free, and this agent keeps `min_free_disk` ({}) free; this instance's input copies \
             were removed, and it runs again where there is room (free space on this node's \
             disk, or lower `min_free_disk` in this agent's configuration; 0 turns the floor \
             off)",
            bytesize::ByteSize(limits.min_free_disk)
        );
        assert!(e.starts_with(&head) && e.ends_with(&tail), "{e}");
        assert!(!e.starts_with(INPUT_UNAVAILABLE), "not produced again");
        assert!(interrupts(&e), "interrupted, not failed: {e}");
        assert!(!consumer.join("wf/7/C-0/in").exists(), "nothing fetched");
        // Turned off, the same node fetches it.
        let off = InputLimits {
            min_free_disk: 0,
            ..limits
        };
        let ready = prepare(&a, &spec, &consumer, &consumer_auth(), None, &off)
            .await
            .expect("no floor");
        assert_eq!(
            std::fs::read_to_string(&ready.argv[1]).expect("x"),
            "x's data"
        );
        server.abort();
    }

    /// A fetch that would take the disk below `min_free_disk` while it streams stops before
    /// the chunk that would, and leaves nothing of the instance's inputs: neither its partial
    /// copy nor the input fetched before it. The disk is a stand-in (the test cannot fill a
    /// real one): its free space is a budget less what the consumer's instance holds, as a
    /// real disk's would be, so the fetch's own writes must be counted, or read again, for it
    /// to stop. The floor is never crossed, and the attempt is interrupted for want of room
    /// ([`NO_ROOM`]), not failed; with exactly enough room, everything is fetched.
    #[tokio::test]
    async fn a_fetch_that_would_go_below_min_free_disk_stops_and_leaves_nothing() {
        let root = ScratchDir::new("wf", "fill");
        let (producer, consumer) = (root.join("producer"), root.join("consumer"));
        let out = producer.join("wf/7/P-0/out");
        std::fs::create_dir_all(&out).expect("out");
        std::fs::write(out.join("small"), vec![b's'; 1000]).expect("small");
        let big = 4 * CHUNK as u64 + CHUNK as u64 / 2;
        std::fs::write(out.join("big"), vec![b'b'; big as usize]).expect("big");
        let (address, _key, server) = serve_producer(&producer, Some(&KEY)).await;
        let input = |name: &str| signed_input(&address, name, "b", 5, 1);
        let a = pb::Assignment {
            task_id: 5,
            attempt: 1,
            instance_dir: "7/C-0".into(),
            inputs: vec![input("small"), input("big")],
            ..Default::default()
        };
        let spec = pb::TaskSpec {
            argv: vec!["cat".into(), "{input:small}".into(), "{input:big}".into()],
            ..Default::default()
        };
        /// The bytes of the files below `dir`.
        fn used(dir: &Path) -> u64 {
            std::fs::read_dir(dir).map_or(0, |entries| {
                entries
                    .flatten()
                    .map(|e| match e.file_type() {
                        Ok(t) if t.is_dir() => used(&e.path()),
                        _ => e.metadata().map_or(0, |m| m.len()),
                    })
                    .sum()
            })
        }
        let floor = 1 << 20;
        // The most the instance's inputs ever held when the disk was read.
        let most = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let disk = |budget: u64| {
            let (instance, most) = (consumer.join("wf/7/C-0"), most.clone());
            InputLimits {
                min_free_disk: floor,
                free_space: FreeSpace::with(move |_| {
                    let held = used(&instance);
                    most.fetch_max(held, std::sync::atomic::Ordering::Relaxed);
                    Ok(budget.saturating_sub(held))
                }),
                ..InputLimits::default()
            }
        };
        // Room for `small` and two and a half chunks of `big` above the floor.
        let budget = floor + 1000 + 2 * CHUNK as u64 + CHUNK as u64 / 2;
        let e = prepare(&a, &spec, &consumer, &consumer_auth(), None, &disk(budget))
            .await
            .expect_err("the disk fills");
        let dir = consumer.join("wf/7/C-0/in/big");
        assert_eq!(
            e,
            format!(
                "{NO_ROOM}input `big` from node 3 (wf/7/P-0/out/big at {address}): this node's \
                 disk is too full for it: the filesystem of {} has {} free, and this agent keeps \
                 `min_free_disk` (1.0 MiB) free; this instance's input copies were removed, and \
                 it runs again where there is room (free space on this node's disk, or lower \
                 `min_free_disk` in this agent's configuration; 0 turns the floor off)",
                dir.display(),
                bytesize::ByteSize(floor + CHUNK as u64 / 2)
            )
        );
        assert!(!e.starts_with(INPUT_UNAVAILABLE), "not produced again");
        assert!(interrupts(&e), "interrupted, not failed: {e}");
        assert_eq!(
            most.load(std::sync::atomic::Ordering::Relaxed),
            1000 + 2 * CHUNK as u64,
            "stopped before the chunk that would cross the floor"
        );
        assert!(
            !consumer.join("wf/7/C-0/in").exists(),
            "nothing of the inputs is left"
        );
        // With room for both exactly, both are fetched.
        let ready = prepare(
            &a,
            &spec,
            &consumer,
            &consumer_auth(),
            None,
            &disk(floor + 1000 + big),
        )
        .await
        .expect("room enough");
        assert_eq!(std::fs::metadata(&ready.argv[2]).expect("big").len(), big);
        // A disk whose free space cannot be read is the node's disk too: interrupted, as one
        // that refuses a write for want of space (`NoRoom::Disk`, the same arm).
        let unreadable = InputLimits {
            min_free_disk: floor,
            free_space: FreeSpace::with(|_| Err(std::io::Error::from_raw_os_error(5))),
            ..InputLimits::default()
        };
        let e = prepare(&a, &spec, &consumer, &consumer_auth(), None, &unreadable)
            .await
            .expect_err("unreadable");
        assert!(
            e.starts_with(&format!(
                "{NO_ROOM}input `small` from node 3 (wf/7/P-0/out/small at {address}): this \
                 node's disk: its free space could not be read at "
            )) && interrupts(&e),
            "{e}"
        );
        assert!(!consumer.join("wf/7/C-0/in").exists(), "nothing fetched");
        server.abort();
    }

    /// A write the disk refuses for want of space is the node's disk, not an unavailable
    /// input. (How a fetch reads the disk between writes is [`crate::room`]'s test.)
    #[test]
    fn enospc_is_the_disk() {
        let dir = std::env::temp_dir();
        for (errno, disk) in [(28, true), (122, true), (5, false)] {
            let e = write_error(&dir, &std::io::Error::from_raw_os_error(errno));
            assert_eq!(
                matches!(e, FetchError::NoRoom(NoRoom::Disk(_))),
                disk,
                "{errno}: {e:?}"
            );
            assert_eq!(matches!(e, FetchError::Unavailable(_)), !disk, "{errno}");
        }
    }

    /// The data key the test producers' server gave them.
    pub(crate) const KEY: [u8; 32] = [7; 32];

    /// A producer's agent (node `a`) on loopback: its data service over `work_dir`, holding
    /// `key` (none: its server has not answered yet), for callers with the agent token `t`.
    /// Returns its address, its key (to give one later) and the serving task.
    pub(crate) async fn serve_producer(
        work_dir: &Path,
        key: Option<&[u8]>,
    ) -> (
        String,
        DataKey,
        tokio::task::JoinHandle<Result<(), tonic::transport::Error>>,
    ) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let address = listener.local_addr().expect("addr").to_string();
        let held = DataKey::default();
        if let Some(k) = key {
            held.set(k);
        }
        let service = DataService {
            work_dir: work_dir.to_path_buf(),
            balance: std::sync::Arc::default(),
            auth: PeerAuth::default(),
            wake: std::sync::Arc::default(),
            node: "a".into(),
            key: held.clone(),
        };
        let server = tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(pb::agent_data_server::AgentDataServer::with_interceptor(
                    service,
                    crate::logs::check_token("t"),
                ))
                .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
        );
        (address, held, server)
    }

    /// The consumer's agent (node `b`): the agent token every agent holds.
    pub(crate) fn consumer_auth() -> PeerAuth {
        PeerAuth {
            token: "t".into(),
            ca: None,
            node: "b".into(),
        }
    }

    /// The server's ticket for `consumer`'s task `task` attempt `attempt` to fetch `path` from
    /// node `a`, under [`KEY`].
    fn ticket_for(path: &str, consumer: &str, task: u64, attempt: u32) -> Vec<u8> {
        hetsched_proto::ticket::sign(
            &KEY,
            &hetsched_proto::ticket::Fetch {
                path,
                producer: "a",
                consumer,
                task_id: task,
                attempt,
                job_nonce: 0,
            },
        )
    }

    /// Output `name` of instance `wf/7/P-0` on node `a` (id 3), as the server names it for
    /// `consumer`'s task `task` attempt `attempt`, with its ticket.
    pub(crate) fn signed_input(
        address: &str,
        name: &str,
        consumer: &str,
        task: u64,
        attempt: u32,
    ) -> pb::WorkflowInput {
        let path = format!("wf/7/P-0/out/{name}");
        pb::WorkflowInput {
            name: name.into(),
            node_id: 3,
            address: address.into(),
            ticket: ticket_for(&path, consumer, task, attempt),
            path,
        }
    }

    /// What the producer's agent answers `req`: the bytes it streams, or its refusal.
    async fn ask(address: &str, req: pb::FetchRequest) -> Result<Vec<u8>, Status> {
        let mut c = consumer_auth().connect(address).await.expect("connect");
        let mut stream = c.fetch(req).await?.into_inner();
        let mut got = Vec::new();
        while let Some(chunk) = stream.message().await? {
            got.extend(chunk.data);
        }
        Ok(got)
    }

    /// A FIFO an instance left at its output's place (`mkfifo {output:y}`) is never opened
    /// for reading: the instance fails saying so, and a fetch of it is refused at once, naming
    /// what it is, while the regular output beside it is served. Before, the fetch opened it
    /// and waited for a writer for good, holding a thread of the producer's agent.
    #[tokio::test]
    async fn an_output_that_is_a_fifo_fails_its_instance_and_is_refused_at_once() {
        let root = ScratchDir::new("wf", "fifo-output");
        let producer = root.join("producer");
        crate::job_nonce::claim(&producer, &producer.join("wf/7"), 0xa).expect("claim");
        let out = producer.join("wf/7/P-0/out");
        std::fs::create_dir_all(&out).expect("out");
        std::fs::write(out.join("x"), "x's data").expect("x");
        nix::unistd::mkfifo(
            &out.join("y"),
            nix::sys::stat::Mode::from_bits_truncate(0o600),
        )
        .expect("fifo");
        let a = pb::Assignment {
            instance_dir: "7/P-0".into(),
            outputs: vec!["x".into(), "y".into()],
            ..Default::default()
        };
        let mut r = pb::TaskResult {
            success: true,
            end: pb::TaskEnd::Exited.into(),
            ..Default::default()
        };
        check_outputs(&a, &producer, &mut r);
        assert!(!r.success, "{r:?}");
        assert_eq!(
            r.message,
            "it exited 0 but made its declared output `y` a FIFO: an output is one regular \
             file, which consumers fetch whole"
        );
        assert_eq!(missing_outputs(&a, &producer), ["y"]);
        let (address, _key, server) = serve_producer(&producer, Some(&KEY)).await;
        let fetch = |path: &'static str| {
            let job_nonce = 0xa;
            let ticket = hetsched_proto::ticket::sign(
                &KEY,
                &hetsched_proto::ticket::Fetch {
                    path,
                    producer: "a",
                    consumer: "b",
                    task_id: 5,
                    attempt: 1,
                    job_nonce,
                },
            );
            let req = pb::FetchRequest {
                path: path.into(),
                ticket,
                consumer: "b".into(),
                task_id: 5,
                attempt: 1,
                job_nonce,
            };
            let address = address.clone();
            async move {
                tokio::time::timeout(std::time::Duration::from_secs(5), ask(&address, req))
                    .await
                    .expect("an answer within 5 s, not a hang")
            }
        };
        let e = fetch("wf/7/P-0/out/y").await.expect_err("a FIFO");
        assert_eq!(e.code(), tonic::Code::NotFound, "{e:?}");
        assert_eq!(
            e.message(),
            "wf/7/P-0/out/y is a FIFO, not a regular file: a workflow output is served only as one"
        );
        assert_eq!(fetch("wf/7/P-0/out/x").await.expect("x"), b"x's data");
        server.abort();
    }

    /// Job ids repeat (a restored backup, a fresh data directory) while agents keep older jobs'
    /// `wf/J`: an output is served only to a fetch whose (ticketed) job nonce is the one its
    /// workflow directory is marked with; another incarnation's fetch, or a legacy one (0) of a
    /// marked directory, is answered as for a missing output, and so is a fetch with a nonce of
    /// an unmarked (legacy) one.
    #[tokio::test]
    async fn an_output_is_served_only_to_fetches_of_the_job_incarnation_that_wrote_it() {
        let root = ScratchDir::new("wf", "nonce");
        let producer = root.join("producer");
        crate::job_nonce::claim(&producer, &producer.join("wf/7"), 0xa).expect("claim");
        let out = producer.join("wf/7/P-0/out");
        std::fs::create_dir_all(&out).expect("out");
        std::fs::write(out.join("x"), "x's data").expect("x");
        let legacy = producer.join("wf/8/P-0/out");
        std::fs::create_dir_all(&legacy).expect("legacy");
        std::fs::write(legacy.join("x"), "old data").expect("x");
        let (address, _key, server) = serve_producer(&producer, Some(&KEY)).await;
        let fetch = |path: &'static str, job_nonce| {
            let ticket = hetsched_proto::ticket::sign(
                &KEY,
                &hetsched_proto::ticket::Fetch {
                    path,
                    producer: "a",
                    consumer: "b",
                    task_id: 5,
                    attempt: 1,
                    job_nonce,
                },
            );
            ask(
                &address,
                pb::FetchRequest {
                    path: path.into(),
                    ticket,
                    consumer: "b".into(),
                    task_id: 5,
                    attempt: 1,
                    job_nonce,
                },
            )
        };
        assert_eq!(
            fetch("wf/7/P-0/out/x", 0xa).await.expect("its own"),
            b"x's data"
        );
        assert_eq!(
            fetch("wf/8/P-0/out/x", 0).await.expect("legacy"),
            b"old data"
        );
        for (case, path, nonce) in [
            ("another incarnation", "wf/7/P-0/out/x", 0xb),
            ("a legacy fetch of a marked directory", "wf/7/P-0/out/x", 0),
            (
                "a fetch with a nonce of an unmarked one",
                "wf/8/P-0/out/x",
                0xa,
            ),
        ] {
            let e = fetch(path, nonce).await.expect_err(case);
            assert_eq!(e.code(), tonic::Code::NotFound, "{case}: {e:?}");
            assert!(!e.message().contains("data"), "{case}: {}", e.message());
        }
        server.abort();
    }

    /// The agent token, which every agent holds, no longer reads another agent's workflow
    /// outputs: a fetch is served only with the server's ticket for that output, producer,
    /// consumer, task and attempt, checked before anything is opened (a refused fetch of a
    /// file that does not exist, or of a path outside `wf/`, is refused for its ticket, not
    /// found missing or bad). Before, any holder of the token read any output by its path.
    #[tokio::test]
    async fn a_fetch_is_served_only_with_the_servers_ticket_for_it_and_nothing_is_opened_without() {
        let root = ScratchDir::new("wf", "ticket");
        let out = root.join("producer/wf/7/P-0/out");
        std::fs::create_dir_all(&out).expect("out");
        std::fs::write(out.join("x"), "x's data").expect("x");
        std::fs::write(out.join("y"), "y's data").expect("y");
        let (address, _key, server) = serve_producer(&root.join("producer"), Some(&KEY)).await;
        let x = "wf/7/P-0/out/x";
        let valid = pb::FetchRequest {
            path: x.into(),
            ticket: ticket_for(x, "b", 5, 1),
            consumer: "b".into(),
            task_id: 5,
            attempt: 1,
            job_nonce: 0,
        };
        let another_key = hetsched_proto::ticket::sign(
            &[8; 32],
            &hetsched_proto::ticket::Fetch {
                path: x,
                producer: "a",
                consumer: "b",
                task_id: 5,
                attempt: 1,
                job_nonce: 0,
            },
        );
        for (case, req, says) in [
            (
                "no ticket",
                pb::FetchRequest {
                    ticket: Vec::new(),
                    ..valid.clone()
                },
                "no ticket from the server",
            ),
            (
                "forged",
                pb::FetchRequest {
                    ticket: vec![0; 32],
                    ..valid.clone()
                },
                "the ticket does not match",
            ),
            (
                "another output's path",
                pb::FetchRequest {
                    path: "wf/7/P-0/out/y".into(),
                    ..valid.clone()
                },
                "the ticket does not match",
            ),
            (
                "another consumer",
                pb::FetchRequest {
                    consumer: "c".into(),
                    ..valid.clone()
                },
                "the ticket does not match",
            ),
            (
                "another attempt",
                pb::FetchRequest {
                    attempt: 2,
                    ..valid.clone()
                },
                "the ticket does not match",
            ),
            (
                "another node's key",
                pb::FetchRequest {
                    ticket: another_key,
                    ..valid.clone()
                },
                "the ticket does not match",
            ),
            (
                "a missing file, no ticket",
                pb::FetchRequest {
                    path: "wf/7/P-0/out/none".into(),
                    ticket: Vec::new(),
                    ..valid.clone()
                },
                "no ticket from the server",
            ),
            (
                "outside wf/, no ticket",
                pb::FetchRequest {
                    path: "../secret".into(),
                    ticket: Vec::new(),
                    ..valid.clone()
                },
                "no ticket from the server",
            ),
        ] {
            let e = ask(&address, req).await.expect_err(case);
            assert_eq!(e.code(), tonic::Code::PermissionDenied, "{case}: {e:?}");
            assert!(e.message().contains(says), "{case}: {e:?}");
        }
        assert_eq!(ask(&address, valid).await.expect("valid"), b"x's data");
        // Through a consumer's preparation: a refused input is unavailable (the server
        // produces it again with fresh tickets), and nothing of it is left.
        let consumer = root.join("consumer");
        let mut forged = signed_input(&address, "x", "b", 5, 1);
        forged.ticket[0] ^= 1;
        let mut a = pb::Assignment {
            task_id: 5,
            attempt: 1,
            instance_dir: "7/C-0".into(),
            inputs: vec![forged],
            ..Default::default()
        };
        let spec = pb::TaskSpec {
            argv: vec!["cat".into(), "{input:x}".into()],
            ..Default::default()
        };
        let auth = consumer_auth();
        let e = prepare(&a, &spec, &consumer, &auth, None, &InputLimits::default())
            .await
            .expect_err("refused");
        assert!(
            e.starts_with(&format!("{INPUT_UNAVAILABLE}3 {x}: input `x`: "))
                && e.contains("the ticket does not match")
                && !e.contains(PRODUCER_UNREACHABLE),
            "{e}"
        );
        assert!(!consumer.join("wf/7/C-0/in").exists(), "nothing fetched");
        a.inputs = vec![signed_input(&address, "x", "b", 5, 1)];
        let ready = prepare(&a, &spec, &consumer, &auth, None, &InputLimits::default())
            .await
            .expect("the server's ticket");
        assert_eq!(
            std::fs::read_to_string(&ready.argv[1]).expect("fetched"),
            "x's data"
        );
        server.abort();
    }

    /// The agent's `fetch_bandwidth` paces its fetches, all of them together: two inputs of
    /// 1 MiB fetched at once under a cap of 1 MiB/s take at least the 1.75 s the cap allows for
    /// their 2 MiB (the first 256 KiB chunk goes at once), each whole. Before, nothing paced a
    /// fetch: on loopback both took milliseconds. Only a lower bound on the time is checked.
    #[tokio::test]
    async fn fetches_together_stay_under_the_agents_fetch_bandwidth() {
        let root = ScratchDir::new("wf", "cap");
        let out = root.join("producer/wf/7/P-0/out");
        std::fs::create_dir_all(&out).expect("out");
        let data: Vec<u8> = (0..1u32 << 20).map(|i| (i % 251) as u8).collect();
        for name in ["x", "y"] {
            std::fs::write(out.join(name), &data).expect("input");
        }
        let (address, _key, server) = serve_producer(&root.join("producer"), Some(&KEY)).await;
        let limits = InputLimits {
            fetch_bandwidth: FetchBandwidth::new(1 << 20),
            ..InputLimits::default()
        };
        let one = |name: &str| {
            let path = format!("wf/7/P-0/out/{name}");
            let req = pb::FetchRequest {
                ticket: ticket_for(&path, "b", 5, 1),
                path,
                consumer: "b".into(),
                task_id: 5,
                attempt: 1,
                job_nonce: 0,
            };
            let to = root.join(name);
            let (address, limits) = (address.clone(), limits.clone());
            async move {
                let n = fetch(&address, &consumer_auth(), req, &to, &limits).await;
                (n.map_err(|e| e.to_string()), to)
            }
        };
        let begin = std::time::Instant::now();
        let (x, y) = tokio::join!(one("x"), one("y"));
        let took = begin.elapsed();
        for (n, to) in [x, y] {
            assert_eq!(n, Ok(1 << 20), "{}", to.display());
            assert!(std::fs::read(&to).expect("fetched") == data, "whole");
        }
        assert!(
            took >= std::time::Duration::from_millis(1700),
            "2 MiB under 1 MiB/s in {took:?}"
        );
        server.abort();
    }

    /// An agent that holds no data key yet (its server has not answered since it started)
    /// serves nothing, saying so (`Unavailable`, marked): a consumer's agent asks again while
    /// it waits for its key, and fetches once it has one; one that never gets a key is reported
    /// unreachable after the wait (the server produces its outputs again elsewhere), not
    /// failed.
    #[tokio::test]
    async fn an_agent_without_a_data_key_serves_nothing_and_a_consumer_waits_for_its_key() {
        let root = ScratchDir::new("wf", "nokey");
        let out = root.join("producer/wf/7/P-0/out");
        std::fs::create_dir_all(&out).expect("out");
        std::fs::write(out.join("x"), "x's data").expect("x");
        let (address, key, server) = serve_producer(&root.join("producer"), None).await;
        let x = "wf/7/P-0/out/x";
        let req = pb::FetchRequest {
            path: x.into(),
            ticket: ticket_for(x, "b", 5, 1),
            consumer: "b".into(),
            task_id: 5,
            attempt: 1,
            job_nonce: 0,
        };
        let e = ask(&address, req.clone()).await.expect_err("no key");
        assert_eq!(e.code(), tonic::Code::Unavailable, "{e:?}");
        assert!(e.metadata().get(NO_KEY_HEADER).is_some(), "{e:?}");
        assert!(e.message().contains("holds no data key"), "{e:?}");
        let to = root.join("x");
        let idle = std::time::Duration::from_secs(5);
        let e = fetch_within(
            &address,
            &consumer_auth(),
            req.clone(),
            &to,
            (idle, std::time::Duration::from_millis(300)),
            &InputLimits::default(),
        )
        .await
        .expect_err("still no key")
        .to_string();
        assert!(
            e.starts_with(PRODUCER_UNREACHABLE) && e.contains("holds no data key"),
            "{e}"
        );
        assert!(!to.exists());
        // Its server answers while the consumer asks again.
        let later = key.clone();
        tokio::spawn(async move {
            tokio::time::sleep(std::time::Duration::from_millis(300)).await;
            later.set(&KEY);
        });
        let n = fetch_within(
            &address,
            &consumer_auth(),
            req,
            &to,
            (idle, std::time::Duration::from_secs(10)),
            &InputLimits::default(),
        )
        .await
        .expect("fetched once the producer has its key");
        assert_eq!(n, 8);
        assert_eq!(std::fs::read_to_string(&to).expect("x"), "x's data");
        server.abort();
    }
}
