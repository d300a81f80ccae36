//! The `Accel` gRPC service of an ANode: the remote-read stage (receive a task and its inputs into
//! a staging directory, enqueue it) and the remote-write stage (send stdout, stderr, the declared
//! outputs and the result back), on the agent's own listener. Calls must carry the agent token;
//! the listener speaks TLS when given a certificate and key.
//!
//! With `run_as_owner`, a user's offloaded task is staged in a directory of the account's own
//! (`WORK_DIR/users/NAME/accel/…`, made and filled by the account), runs there as the account,
//! and its declared outputs are read back as the account; its captured stdout and stderr stay
//! in the agent's private staging directory (`WORK_DIR/accel/…`). An owner with no account here
//! is refused (`PermissionDenied`, naming node and account).
//!
//! The agent token admits any agent, so it does not say which offloads the server assigned. An
//! offload runs only with the server's ticket for it ([`hetsched_proto::ticket`]): checked
//! against the offload key the server gave this ANode, for the call's task, attempt, account
//! (`spec.run_as`), NNode and this ANode, and what the shipped spec runs (its command,
//! environment, declared files, index, entry and device count:
//! [`offload_digest`](hetsched_proto::ticket::offload_digest)), before anything is staged.
//! Without a ticket, or with one that does not match, the call is refused (`PermissionDenied`,
//! marked [`REFUSED_HEADER`](hetsched_proto::ticket::REFUSED_HEADER)); while the ANode holds no
//! key — it has not heard from its server since it started, or its server predates tickets —
//! every offload is refused (`Unavailable`: the NNode tries again, then reports the attempt
//! interrupted).
//!
//! Its inputs are bounded as workflow fetches are: only the files the spec declares, each up to
//! the agent's `max_input_bytes`, none taking the work directory's disk below its
//! `min_free_disk` ([`crate::room::Room`]); a call past a bound is refused, marked as a
//! refused ticket is, and its staging directory removed.

use super::files::{self, Sink};
use super::{Job, Origin, Pipeline};
use crate::room::{Room, TakeError};
use hetsched_proto as pb;
use hetsched_proto::accel_server::{Accel, AccelServer};
use hetsched_proto::offload_reply::Part as ReplyPart;
use hetsched_proto::offload_request::Part as RequestPart;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::time::Duration;
use tokio::sync::{mpsc, watch};
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};
use tracing::{info, warn};

/// Where an offloaded task's reply goes: its call's reply stream.
pub(crate) type Reply = mpsc::Sender<Result<pb::OffloadReply, Status>>;

/// A remote task that ran, waiting in the write queue.
pub(crate) struct Finished {
    pub anode: String,
    pub assignment: pb::Assignment,
    pub spec: pb::TaskSpec,
    pub staging: PathBuf,
    /// The account it ran as (its declared outputs are read as it), if any.
    pub account: Option<crate::run_as::Account>,
    pub result: pb::TaskResult,
    pub reply: Reply,
}

/// Longest a result waits for its requester to read it before it is dropped.
const SEND_TIMEOUT: Duration = Duration::from_secs(30);

/// Removes a staging directory (best effort: it lies in the agent's own work directory).
pub(crate) fn cleanup(dir: &Path) {
    let _ = std::fs::remove_dir_all(dir);
}

/// Removes what an offloaded task was staged in: the agent's `staging` directory and, for a
/// task run as its owner, its directory in the account's (`task_dir`). `remove_dir_all` follows
/// no link the account may have put there.
pub(crate) fn cleanup_task(staging: &Path, task_dir: &Path) {
    cleanup(staging);
    if task_dir != staging {
        cleanup(task_dir);
    }
}

/// The service over one [`Pipeline`].
pub struct AccelService {
    pipeline: Pipeline,
}

#[tonic::async_trait]
impl Accel for AccelService {
    type OffloadStream = ReceiverStream<Result<pb::OffloadReply, Status>>;

    async fn offload(
        &self,
        req: Request<Streaming<pb::OffloadRequest>>,
    ) -> Result<Response<Self::OffloadStream>, Status> {
        let mut inbound = req.into_inner();
        let task = match inbound.message().await? {
            Some(pb::OffloadRequest {
                part: Some(RequestPart::Task(t)),
            }) => t,
            _ => return Err(Status::invalid_argument("an offload starts with its task")),
        };
        let spec = task
            .spec
            .clone()
            .ok_or_else(|| Status::invalid_argument("the offloaded task has no spec"))?;
        let p = &self.pipeline;
        // Before anything is looked at or staged: only the offloads the server assigned run.
        check_ticket(p, &task, &spec).inspect_err(|s| {
            warn!(task = task.task_id, attempt = task.attempt, nnode = %task.node,
                "offload refused: {}", s.message());
        })?;
        for name in spec.inputs.iter().chain(&spec.outputs) {
            files::resolve(name, task.index).map_err(Status::invalid_argument)?;
        }
        let account = crate::run_as::resolve(p.run_as_owner, &spec.run_as, &p.node)
            .await
            .map_err(|e| Status::permission_denied(e.to_string()))?;
        let seq = p.seq.fetch_add(1, Ordering::Relaxed);
        let name = format!(
            "{}-{}-{}-{seq}",
            crate::launch::component(&task.node),
            task.task_id,
            task.attempt
        );
        let staging = p.staging.join(&name);
        std::fs::create_dir_all(&staging)
            .map_err(|e| Status::internal(format!("{}: {e}", staging.display())))?;
        // A user's task's inputs, directory and outputs are its account's.
        let task_dir = match &account {
            None => staging.clone(),
            Some(acc) => match staged_as(&p.work_dir, acc, &name) {
                Ok(dir) => dir,
                Err(e) => {
                    cleanup(&staging);
                    return Err(Status::internal(format!(
                        "node {}: staging the task of `{}`: {e}",
                        p.node, acc.name
                    )));
                }
            },
        };
        let (tx, rx) = mpsc::channel(8);
        // Join the remote-read stage's line; it tells the requester when to send its inputs.
        p.counters.reading.fetch_add(1, Ordering::SeqCst);
        let waiting = Incoming {
            inbound,
            task,
            spec,
            staging,
            task_dir,
            account,
            reply: tx,
        };
        if let Err(e) = p.read_tx.send(waiting).await {
            p.counters.reading.fetch_sub(1, Ordering::SeqCst);
            cleanup_task(&e.0.staging, &e.0.task_dir);
            return Err(Status::unavailable("the accelerator service has stopped"));
        }
        Ok(Response::new(ReceiverStream::new(rx)))
    }
}

/// Whether `task` (of `spec`) may run here: the server's ticket for it, checked with the
/// offload key the server gave this ANode (the module's doc).
fn check_ticket(p: &Pipeline, task: &pb::OffloadTask, spec: &pb::TaskSpec) -> Result<(), Status> {
    use hetsched_proto::ticket;
    let what = format!(
        "offload of task {} attempt {} from {}",
        task.task_id, task.attempt, task.node
    );
    let Some(key) = p.offload_key() else {
        return Err(Status::unavailable(format!(
            "{what}: ANode {} holds no offload key from its server yet (it has not heard from \
             the server since it started, or the server predates offload tickets): no offload \
             runs here until it does",
            p.node
        )));
    };
    let refused = |why: &str| {
        let mut s = Status::permission_denied(format!("{what}: {why}"));
        s.metadata_mut().insert(
            ticket::REFUSED_HEADER,
            tonic::metadata::MetadataValue::from_static("1"),
        );
        s
    };
    if task.ticket.is_empty() {
        return Err(refused("no ticket from the server"));
    }
    let offload = ticket::Offload {
        task_id: task.task_id,
        attempt: task.attempt,
        run_as: &spec.run_as,
        nnode: &task.node,
        anode: &p.node,
        // What the call asks to run, from the spec it brings: a ticket for another command,
        // environment or files does not verify.
        runs: ticket::offload_digest(spec, task.index, task.entry.as_deref(), task.gpus),
    };
    if !ticket::verify(&key, &offload, &task.ticket) {
        return Err(refused(&format!(
            "ticket does not match (the server's ticket names another task, attempt, NNode, \
             ANode, command, environment, files or account than `{}`)",
            if spec.run_as.is_empty() {
                "the agent's own"
            } else {
                &spec.run_as
            }
        )));
    }
    Ok(())
}

/// An offload call waiting for the remote-read stage: its task has arrived, its inputs have not
/// been sent yet.
pub(crate) struct Incoming {
    inbound: Streaming<pb::OffloadRequest>,
    task: pb::OffloadTask,
    spec: pb::TaskSpec,
    /// The agent's private staging directory (captured stdout and stderr).
    staging: PathBuf,
    /// Where the inputs go and the task runs: `staging`, or the account's own directory.
    task_dir: PathBuf,
    account: Option<crate::run_as::Account>,
    reply: Reply,
}

/// Makes `WORK_DIR/users/NAME/accel/NAME` afresh, as `account`: an offloaded task's directory.
fn staged_as(
    work_dir: &Path,
    account: &crate::run_as::Account,
    name: &str,
) -> std::io::Result<PathBuf> {
    let dir = crate::run_as::area(work_dir, account)?
        .join("accel")
        .join(name);
    cleanup(&dir);
    crate::run_as::hop(Some(account), || std::fs::create_dir_all(&dir))
        .map_err(std::io::Error::other)??;
    Ok(dir)
}

/// Longest the remote-read stage waits for the next message of the call it receives; a requester
/// silent that long is dropped so the calls behind it are served.
const READ_IDLE: Duration = Duration::from_secs(30);

/// The remote-read stage (spec 01: one remote-read thread): takes the waiting calls in the order
/// they arrived and receives one at a time — it tells the call's requester to send its inputs
/// (`OffloadReady`), receives them all into the call's staging directory, and enqueues the task
/// on the process queue (waiting while that queue is full) before it takes the next call.
///
/// Receiving one call at a time is what makes the pipeline overlap: the first task's inputs
/// arrive at the link's full rate and its device starts while the next inputs arrive, instead of
/// every call sharing the link and all inputs arriving together at the end. Calls that wait have
/// sent no input, so they hold none of their HTTP/2 connection's flow-control window and cannot
/// stall the call being received.
pub(crate) async fn read_stage(mut rx: mpsc::Receiver<Incoming>, pipeline: Pipeline) {
    while let Some(c) = rx.recv().await {
        let Incoming {
            mut inbound,
            task,
            spec,
            staging,
            task_dir,
            account,
            reply,
        } = c;
        let ready = pb::OffloadReply {
            part: Some(ReplyPart::Ready(pb::OffloadReady { controls: true })),
        };
        let received = if reply.send(Ok(ready)).await.is_err() {
            // The requester went away while it waited.
            Err(Status::cancelled("the requester went away"))
        } else {
            let declared = Declared::of(&spec, task.index);
            let limits = &pipeline.input_limits;
            receive(&mut inbound, &task_dir, account.clone(), &declared, limits).await
        };
        pipeline.counters.reading.fetch_sub(1, Ordering::SeqCst);
        let open = match received {
            Ok(open) => open,
            Err(e) => {
                warn!(
                    task = task.task_id,
                    "offload: receiving the inputs failed: {e}"
                );
                let _ = reply.try_send(Err(e));
                cleanup_task(&staging, &task_dir);
                continue;
            }
        };
        // What the NNode is told for the task while it runs here: a new time limit, a signal.
        let (limit_tx, limit) = watch::channel(spec.time_limit_ms);
        let (signal_tx, signals) = mpsc::unbounded_channel();
        if open {
            tokio::spawn(controls(inbound, task.task_id, limit_tx, signal_tx));
        }
        let assignment = pb::Assignment {
            task_id: task.task_id,
            attempt: task.attempt,
            index: task.index,
            devices: Vec::new(),
            spec: spec.key,
            entry: task.entry.clone(),
            ..Default::default()
        };
        let mut spec = spec;
        spec.workdir = task_dir.display().to_string();
        // The task's output streams are captured here and shipped back: the NNode writes them
        // where the application says (`stdout =`), as if the task had run there.
        spec.stdout.clear();
        spec.stderr.clear();
        let job = Job {
            assignment,
            spec,
            work_dir: staging.clone(),
            gpus: task.gpus.max(1),
            origin: Origin::Remote {
                reply,
                limit,
                signals,
                account,
            },
        };
        if pipeline.submit(job).await.is_err() {
            cleanup_task(&staging, &task_dir);
        }
    }
}

/// Hands what an NNode says on an offload call after its inputs (`OffloadControl`) to its task,
/// until the call ends.
async fn controls(
    mut inbound: Streaming<pb::OffloadRequest>,
    task: u64,
    limit: watch::Sender<u64>,
    signals: mpsc::UnboundedSender<nix::sys::signal::Signal>,
) {
    while let Ok(Some(m)) = inbound.message().await {
        let Some(RequestPart::Control(c)) = m.part else {
            warn!(
                task,
                "offload: a message other than a control after the inputs: ignored"
            );
            continue;
        };
        if let Some(ms) = c.time_limit_ms {
            limit.send_replace(ms);
        }
        if !c.signal.is_empty() {
            match format!("SIG{}", c.signal).parse() {
                Ok(signal) => {
                    let _ = signals.send(signal);
                }
                Err(_) => warn!(task, signal = %c.signal, "offload: an unknown signal: not sent"),
            }
        }
    }
}

/// The input files an offloaded task declares (`spec.inputs`, `{index}` filled): the only files
/// its call may send.
struct Declared {
    files: Vec<PathBuf>,
    index: u32,
}

impl Declared {
    fn of(spec: &pb::TaskSpec, index: u32) -> Self {
        // Checked when the call arrived (`offload`): a name that does not resolve names nothing.
        let files = spec
            .inputs
            .iter()
            .filter_map(|n| files::resolve(n, index).ok())
            .collect();
        Self { files, index }
    }

    /// Where a chunk for `path` goes, if `path` is a declared input.
    fn target(&self, path: &str) -> Result<PathBuf, Status> {
        let target = files::resolve(path, self.index).map_err(Status::invalid_argument)?;
        if !self.files.contains(&target) {
            return Err(refused_input(format!(
                "`{}` is not an input file the task declares",
                path.escape_debug()
            )));
        }
        Ok(target)
    }
}

/// A refusal of an offload's inputs: the staging directory goes (with every file received),
/// and the NNode reports the attempt interrupted, as for a ticket it refused (the server runs
/// it again: not the task's failure). `PermissionDenied` with [`REFUSED_HEADER`], which NNodes
/// of every version with tickets report so.
///
/// [`REFUSED_HEADER`]: hetsched_proto::ticket::REFUSED_HEADER
fn refused_input(message: String) -> Status {
    let mut s = Status::permission_denied(message);
    s.metadata_mut().insert(
        hetsched_proto::ticket::REFUSED_HEADER,
        tonic::metadata::MetadataValue::from_static("1"),
    );
    s
}

/// Receives the input chunks of one call into `staging` (as `account`, when given): whether
/// the call stays open for controls (the NNode said `inputs_done`; an older one ends its stream
/// instead). Only `declared` files are taken, each up to `limits.max_input_bytes`, none taking
/// the disk below `limits.min_free_disk` (the agent's settings for workflow fetches): an NNode
/// (any holder of the agent token) could otherwise fill this node's disk. Such a chunk is
/// refused ([`refused_input`]) before a byte of it is written.
async fn receive(
    inbound: &mut Streaming<pb::OffloadRequest>,
    staging: &Path,
    account: Option<crate::run_as::Account>,
    declared: &Declared,
    limits: &crate::dataflow::InputLimits,
) -> Result<bool, Status> {
    let no_room = |e: &dyn std::fmt::Display| {
        refused_input(format!(
            "this ANode's disk has no room for the offload's inputs: {e}; they were removed, and \
             the task runs again"
        ))
    };
    // Read at the first byte to write: an offload that ships nothing (or only empty files)
    // takes no room, as a workflow instance without inputs fetches nothing.
    let mut room = None;
    // Bytes taken per file, over the whole call: a file sent again (after another) counts on.
    let mut taken: std::collections::HashMap<PathBuf, u64> = std::collections::HashMap::new();
    let mut sink = Sink::as_account(staging, account);
    let mut open = false;
    loop {
        let m = match tokio::time::timeout(READ_IDLE, inbound.message()).await {
            Ok(m) => m?,
            Err(_) => {
                return Err(Status::deadline_exceeded(format!(
                    "no input arrived for {} s",
                    READ_IDLE.as_secs()
                )));
            }
        };
        let Some(m) = m else { break };
        let c = match m.part {
            Some(RequestPart::Chunk(c)) => c,
            Some(RequestPart::InputsDone(_)) => {
                open = true;
                break;
            }
            Some(RequestPart::Task(_)) => {
                return Err(Status::invalid_argument("a second task in one offload"));
            }
            _ => {
                return Err(Status::invalid_argument(
                    "a control before the inputs were sent",
                ));
            }
        };
        let target = declared.target(&c.path)?;
        let len = c.data.len() as u64;
        let n = taken.entry(target.clone()).or_default();
        *n = n.saturating_add(len);
        if *n > limits.max_input_bytes {
            return Err(refused_input(format!(
                "input file `{}` is larger than this ANode's `max_input_bytes` ({}); it was \
                 removed, and the task runs again",
                c.path.escape_debug(),
                bytesize::ByteSize(limits.max_input_bytes)
            )));
        }
        if len > 0 {
            let room = match &mut room {
                Some(room) => room,
                None => room.insert(
                    Room::new(limits.min_free_disk, &limits.free_space, staging)
                        .await
                        .map_err(|e| no_room(&e))?,
                ),
            };
            room.take(len, sink.file_mut()).await.map_err(|e| match e {
                TakeError::NoRoom(e) => no_room(&e),
                // The flush before the reading failed otherwise: as a failed write.
                TakeError::Write(e) => Status::internal(format!("staging {}: {e}", c.path)),
            })?;
        }
        sink.write(&target, &c).await.map_err(|e| {
            if crate::room::is_full(&e) {
                no_room(&format!("staging {}: {e}", c.path))
            } else {
                Status::internal(format!("staging {}: {e}", c.path))
            }
        })?;
    }
    sink.finish()
        .await
        .map_err(|e| Status::internal(format!("staging: {e}")))?;
    Ok(open)
}

/// The remote-write stage: results in the order they finished, one at a time.
pub(crate) async fn write_stage(
    mut rx: mpsc::Receiver<Finished>,
    counters: std::sync::Arc<super::Counters>,
) {
    while let Some(f) = rx.recv().await {
        let sent = send_back(&f).await;
        // Cleaned up before the result goes: a requester that has its result finds nothing of
        // its task left here.
        cleanup_task(&f.staging, Path::new(&f.spec.workdir));
        let sent = match sent {
            Ok(done) => match tokio::time::timeout(SEND_TIMEOUT, f.reply.send(Ok(done))).await {
                Ok(Ok(())) => Ok(()),
                _ => Err("the requester went away".to_string()),
            },
            Err(e) => Err(e),
        };
        counters.write_queue.fetch_sub(1, Ordering::SeqCst);
        if let Err(e) = sent {
            warn!(
                task = f.assignment.task_id,
                "offload: sending the result back failed: {e}"
            );
        }
    }
}

/// Sends a finished task's logs and declared outputs back; returns the reply that ends the
/// call (its result), for [`write_stage`] to send once the task's directories are gone.
async fn send_back(f: &Finished) -> Result<pb::OffloadReply, String> {
    let send = |chunk: pb::FileChunk| {
        let reply = f.reply.clone();
        async move {
            let m = pb::OffloadReply {
                part: Some(ReplyPart::Chunk(chunk)),
            };
            matches!(
                tokio::time::timeout(SEND_TIMEOUT, reply.send(Ok(m))).await,
                Ok(Ok(()))
            )
        }
    };
    let mut result = f.result.clone();
    // Where and when it ran here: the NNode keeps them beside its own start (`started_ns` is
    // when it began the offload, for its server).
    result.offload_started_ns = result.started_ns;
    result.offload_devices = f.assignment.devices.clone();
    let (out, err) = crate::launch::output_paths(&f.staging, &f.spec, &f.assignment);
    for (path, stream) in [(out, 1), (err, 2)] {
        if path.exists() {
            let name = path.file_name().map(|n| n.to_string_lossy().to_string());
            let dir = path.parent().unwrap_or(&f.staging);
            if !files::send_file(dir, &name.unwrap_or_default(), stream, None, send)
                .await
                .map_err(|e| e.to_string())?
            {
                return Err("the requester went away".into());
            }
        }
    }
    for name in &f.spec.outputs {
        let Ok(rel) = files::resolve(name, f.assignment.index) else {
            continue;
        };
        let rel = rel.display().to_string();
        // Where the task ran (its account's directory when it ran as its owner), read as it.
        let task_dir = Path::new(&f.spec.workdir);
        match files::send_file(task_dir, &rel, 0, f.account.as_ref(), send).await {
            Ok(true) => {}
            Ok(false) => return Err("the requester went away".into()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                if result.success {
                    result.success = false;
                    result.message = format!("the task did not write its declared output `{rel}`");
                }
            }
            Err(e) => return Err(format!("{rel}: {e}")),
        }
    }
    Ok(pb::OffloadReply {
        part: Some(ReplyPart::Done(pb::OffloadDone {
            result: Some(result),
            anode: f.anode.clone(),
        })),
    })
}

/// Admits calls carrying `authorization: Bearer <agent token>` only.
#[derive(Clone)]
struct CheckToken(std::sync::Arc<str>);

impl tonic::service::Interceptor for CheckToken {
    fn call(&mut self, req: Request<()>) -> Result<Request<()>, Status> {
        let ok = req.metadata().get(pb::AUTH_HEADER).is_some_and(|v| {
            let (a, b) = (v.as_bytes(), self.0.as_bytes());
            a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
        });
        if ok {
            Ok(req)
        } else {
            Err(Status::unauthenticated("wrong or missing agent token"))
        }
    }
}

/// A bound accelerator service listener.
pub struct AccelListener {
    /// The bound address.
    pub addr: SocketAddr,
    /// Whether it speaks TLS.
    pub tls: bool,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    join: tokio::task::JoinHandle<()>,
}

impl AccelListener {
    /// Binds `at` and serves `pipeline` to callers holding `token`; with `tls` = (certificate,
    /// key) in PEM, over TLS.
    pub async fn bind(
        at: SocketAddr,
        pipeline: Pipeline,
        token: &str,
        tls: Option<(Vec<u8>, Vec<u8>)>,
    ) -> Result<Self, String> {
        let listener = tokio::net::TcpListener::bind(at)
            .await
            .map_err(|e| e.to_string())?;
        let addr = listener.local_addr().map_err(|e| e.to_string())?;
        let service = AccelServer::with_interceptor(
            AccelService { pipeline },
            CheckToken(pb::bearer(token).into()),
        );
        let mut builder = tonic::transport::Server::builder();
        let has_tls = tls.is_some();
        if let Some((cert, key)) = tls {
            builder = builder
                .tls_config(
                    tonic::transport::ServerTlsConfig::new()
                        .identity(tonic::transport::Identity::from_pem(cert, key)),
                )
                .map_err(|e| e.to_string())?;
        }
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let join = tokio::spawn(async move {
            // Small messages (a task's result, the last chunk of a file) must not wait for
            // Nagle's algorithm: without TCP_NODELAY every offload paid a 40 ms delayed ACK.
            let incoming =
                tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true));
            if let Err(e) = builder
                .add_service(service)
                .serve_with_incoming_shutdown(incoming, async {
                    let _ = rx.await;
                })
                .await
            {
                tracing::error!("accelerator service: {e}");
            }
        });
        info!(%addr, tls = has_tls, "accelerator service listening");
        Ok(Self {
            addr,
            tls: has_tls,
            stop: Some(tx),
            join,
        })
    }

    /// Stops serving.
    pub async fn stop(mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        let _ = tokio::time::timeout(Duration::from_secs(2), &mut self.join).await;
        self.join.abort();
    }
}
