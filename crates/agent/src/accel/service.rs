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
//! A ticket carries its expiry ([`Validity`](hetsched_proto::ticket::Validity)): an expired
//! one starts no run (refused, marked as a refused ticket, naming when it expired). Each attempt
//! runs once here ([`super::attempts`]): a call that brings the ticket of an attempt held here
//! takes over its run or gets it refused, never a second run.
//!
//! Its inputs are bounded as workflow fetches are: only the files the spec declares, each up to
//! the agent's `max_input_bytes`, none taking the work directory's disk below its
//! `min_free_disk` ([`crate::room::Room`]); a call past a bound is refused, marked as a
//! refused ticket is, and its staging directory removed.

use super::attempts::{self, Admit, Attempts, Controls, Live};
use super::files::{self, Sink};
use super::{Job, Origin, Pipeline};
use crate::room::{Room, TakeError};
use hetsched_proto as pb;
use hetsched_proto::accel_server::{Accel, AccelServer};
use hetsched_proto::offload_reply::Part as ReplyPart;
use hetsched_proto::offload_request::Part as RequestPart;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
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
    /// Its attempt, and the call its result goes to.
    pub key: attempts::Key,
    pub live: Arc<Live>,
}

/// Milliseconds since the Unix epoch by this node's clock (tickets' expiry is in them).
pub(crate) fn now_ms() -> u64 {
    crate::launch::now_ns() / 1_000_000
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
        // Before anything is looked at or staged: only the offloads the server assigned run,
        // each attempt once.
        let warn_refused = |s: &Status| {
            warn!(task = task.task_id, attempt = task.attempt, nnode = %task.node,
                "offload refused: {}", s.message());
        };
        let valid = check_ticket(p, &task, &spec).inspect_err(warn_refused)?;
        for name in spec.inputs.iter().chain(&spec.outputs) {
            files::resolve(name, task.index).map_err(Status::invalid_argument)?;
        }
        let account = crate::run_as::resolve(p.run_as_owner, &spec.run_as, &p.node)
            .await
            .map_err(|e| Status::permission_denied(e.to_string()))?;
        let key = (task.task_id, task.attempt);
        let call = match admit(p, &task, valid).inspect_err(warn_refused)? {
            Ok(call) => call,
            Err(live) => return Ok(take_over(inbound, &task, &spec, &live)),
        };
        let seq = p.seq.fetch_add(1, Ordering::Relaxed);
        let name = format!(
            "{}-{}-{}-{seq}",
            crate::launch::component(&task.node),
            task.task_id,
            task.attempt
        );
        let staging = p.staging.join(&name);
        if let Err(e) = crate::workdir::create_private_dir(&staging) {
            p.attempts.not_received(key, call);
            return Err(Status::internal(format!("{}: {e}", staging.display())));
        }
        // A user's task's inputs, directory and outputs are its account's.
        let task_dir = match &account {
            None => staging.clone(),
            Some(acc) => match staged_as(&p.work_dir, acc, &name) {
                Ok(dir) => dir,
                Err(e) => {
                    cleanup(&staging);
                    p.attempts.not_received(key, call);
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
            key,
            call,
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
            p.attempts.not_received(key, call);
            return Err(Status::unavailable("the accelerator service has stopped"));
        }
        Ok(Response::new(ReceiverStream::new(rx)))
    }
}

/// The refusal of an offload for its ticket or its inputs: `PermissionDenied`, marked
/// [`REFUSED_HEADER`](hetsched_proto::ticket::REFUSED_HEADER), so that the NNode reports the
/// attempt interrupted (run again with a fresh ticket: not the task's failure).
fn refused(message: String) -> Status {
    let mut s = Status::permission_denied(message);
    s.metadata_mut().insert(
        hetsched_proto::ticket::REFUSED_HEADER,
        tonic::metadata::MetadataValue::from_static("1"),
    );
    s
}

/// How an offload call is named in refusals and logs.
fn call_name(task: &pb::OffloadTask) -> String {
    format!(
        "offload of task {} attempt {} from {}",
        task.task_id, task.attempt, task.node
    )
}

/// Whether `task`, whose ticket verified as `valid`, runs ([`attempts::Attempts::admit`]): the
/// number of the call that receives its inputs, or the live attempt the call takes over; else
/// why not — its ticket expired before it started a run, the attempt ended here, or too many
/// are held.
fn admit(
    p: &Pipeline,
    task: &pb::OffloadTask,
    valid: hetsched_proto::ticket::Validity,
) -> Result<Result<u64, Arc<Live>>, Status> {
    let now = now_ms();
    let what = call_name(task);
    match p.attempts.admit((task.task_id, task.attempt), valid, now) {
        Admit::Run { call } => Ok(Ok(call)),
        Admit::TakeOver(live) => Ok(Err(live)),
        Admit::Expired => Err(refused(format!(
            "{what}: ticket expired {} s ago by this ANode's clock (issued {} s before it \
             expired; it starts no run once expired): the server runs the attempt again with a \
             fresh ticket",
            now.saturating_sub(valid.expires_ms).div_ceil(1000),
            valid.expires_ms.saturating_sub(valid.issued_ms) / 1000
        ))),
        Admit::Ended(outcome) => Err(refused(format!(
            "{what}: this attempt {outcome}; it does not run twice"
        ))),
        Admit::Full => Err(Status::unavailable(format!(
            "{what}: ANode {} holds {} offload attempts whose tickets have not expired: no \
             new one until some expire",
            p.node,
            attempts::MAX_REMEMBERED
        ))),
    }
}

/// A call that brings the ticket of an attempt live here takes its run over: it is told to
/// send no input (`resumed`), the run's result goes to it (the earlier call, broken, is let
/// go), and so do its time limit and what it says while the run goes on.
fn take_over(
    inbound: Streaming<pb::OffloadRequest>,
    task: &pb::OffloadTask,
    spec: &pb::TaskSpec,
    live: &Live,
) -> Response<ReceiverStream<Result<pb::OffloadReply, Status>>> {
    let (tx, rx) = mpsc::channel(8);
    let ready = pb::OffloadReply {
        part: Some(ReplyPart::Ready(pb::OffloadReady {
            controls: true,
            resumed: true,
        })),
    };
    // A fresh channel has room: the ready goes first, before any of the result.
    let _ = tx.try_send(Ok(ready));
    live.controls.limit.send_replace(spec.time_limit_ms);
    live.reply.send_replace(tx);
    info!(task = task.task_id, attempt = task.attempt, nnode = %task.node,
        "a call sent again takes over the attempt held here");
    tokio::spawn(controls(inbound, task.task_id, live.controls.clone(), true));
    Response::new(ReceiverStream::new(rx))
}

/// The validity of `task`'s ticket (of `spec`) when it may run here: the server's ticket for
/// it, checked with the offload key the server gave this ANode (the module's doc). Its expiry is
/// checked by [`admit`]: a call that brings the ticket of an attempt held here starts no run.
fn check_ticket(
    p: &Pipeline,
    task: &pb::OffloadTask,
    spec: &pb::TaskSpec,
) -> Result<hetsched_proto::ticket::Validity, Status> {
    use hetsched_proto::ticket;
    let what = call_name(task);
    let held = p.offload_keys();
    if held.is_empty() {
        return Err(Status::unavailable(format!(
            "{what}: ANode {} holds no offload key from its server yet (it has not heard from \
             the server since it started, or the server predates offload tickets): no offload \
             runs here until it does",
            p.node
        )));
    }
    let refused = |why: &str| refused(format!("{what}: {why}"));
    if task.ticket.is_empty() {
        return Err(refused("no ticket from the server"));
    }
    let does_not_match = || {
        refused(&format!(
            "ticket does not match (the server's ticket names another task, attempt, NNode, \
             ANode, command, environment, files or account than `{}`, or the server signs \
             tickets of another version)",
            if spec.run_as.is_empty() {
                "the agent's own"
            } else {
                &spec.run_as
            }
        ))
    };
    // The key of the epoch the ticket names: the server rotates them, and tells this ANode the
    // previous, current and next epochs' at every beat.
    let epoch = ticket::offload_key_epoch(&task.ticket).ok_or_else(does_not_match)?;
    let key = match held.iter().find(|(e, _)| *e == epoch) {
        Some((_, key)) => key.clone(),
        None => {
            let oldest = held.iter().map(|(e, _)| *e).min().unwrap_or(0);
            let newest = held.iter().map(|(e, _)| *e).max().unwrap_or(0);
            if epoch > newest {
                // This ANode has not heard from its server for a whole key period: its next
                // beat brings the key, and the NNode tries again meanwhile.
                return Err(Status::unavailable(format!(
                    "{what}: ANode {} holds no offload key of epoch {epoch} from its server yet \
                     (it holds epochs {oldest} to {newest}): no such offload runs here until \
                     it does",
                    p.node
                )));
            }
            return Err(refused(&format!(
                "ticket signed with the offload key of epoch {epoch}, which this ANode no \
                 longer holds (it holds epochs {oldest} to {newest}): that key was rotated out \
                 after its tickets expired"
            )));
        }
    };
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
    ticket::open_offload(&key, &offload, &task.ticket).ok_or_else(does_not_match)
}

/// An offload call waiting for the remote-read stage: its task has arrived, its inputs have not
/// been sent yet.
pub(crate) struct Incoming {
    inbound: Streaming<pb::OffloadRequest>,
    /// Its attempt, and the call's number for it ([`Attempts::admit`]).
    key: attempts::Key,
    call: u64,
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
    crate::run_as::hop(Some(account), || crate::workdir::create_private_dir(&dir))
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
            key,
            call,
            task,
            spec,
            staging,
            task_dir,
            account,
            reply,
        } = c;
        let held = &pipeline.attempts;
        // A later call brought the attempt again (this one broke while it waited): it takes
        // the attempt's place in the line.
        let superseded = || Status::aborted("a later call for this attempt took its place");
        if !held.is_current(key, call) {
            pipeline.counters.reading.fetch_sub(1, Ordering::SeqCst);
            let _ = reply.try_send(Err(superseded()));
            cleanup_task(&staging, &task_dir);
            continue;
        }
        let ready = pb::OffloadReply {
            part: Some(ReplyPart::Ready(pb::OffloadReady {
                controls: true,
                resumed: false,
            })),
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
                held.not_received(key, call);
                continue;
            }
        };
        // What the NNode is told for the task while it runs here: a new time limit, a signal.
        let (limit_tx, limit) = watch::channel(spec.time_limit_ms);
        let (signal_tx, signals) = mpsc::unbounded_channel();
        let told = Arc::new(Controls {
            limit: limit_tx,
            signals: signal_tx,
        });
        let live = Arc::new(Live {
            reply: watch::Sender::new(reply),
            controls: told.clone(),
        });
        if !held.received(key, call, live.clone()) {
            let _ = live.current().try_send(Err(superseded()));
            cleanup_task(&staging, &task_dir);
            continue;
        }
        if open {
            tokio::spawn(controls(inbound, task.task_id, told, false));
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
                key,
                live,
                limit,
                signals,
                account,
            },
        };
        if pipeline.submit(job).await.is_err() {
            cleanup_task(&staging, &task_dir);
            held.ended(
                key,
                "was not run: the accelerator service stopped".into(),
                now_ms(),
            );
        }
    }
}

/// Hands what an NNode says on an offload call after its inputs (`OffloadControl`) to its task
/// (`told`), until the call ends. A call that took over a run (`resumed`) may send the inputs
/// again first (an NNode that predates `resumed`): they are read and dropped.
async fn controls(
    mut inbound: Streaming<pb::OffloadRequest>,
    task: u64,
    told: Arc<Controls>,
    resumed: bool,
) {
    let (limit, signals) = (&told.limit, &told.signals);
    while let Ok(Some(m)) = inbound.message().await {
        if resumed
            && matches!(
                m.part,
                Some(RequestPart::Chunk(_) | RequestPart::InputsDone(_))
            )
        {
            continue;
        }
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
    refused(message)
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

/// The remote-write stage: results in the order they finished, one at a time. A result whose
/// requester went away while it was sent waits [`attempts::REATTACH_GRACE`] beside the stage for
/// the attempt to be sent again, its files kept, and goes to the call that takes it over
/// ([`resend`]).
pub(crate) async fn write_stage(
    mut rx: mpsc::Receiver<Finished>,
    counters: std::sync::Arc<super::Counters>,
    held: Arc<Attempts>,
) {
    while let Some(f) = rx.recv().await {
        let to = f.live.current();
        let sent = deliver(&f, &to, &held).await;
        counters.write_queue.fetch_sub(1, Ordering::SeqCst);
        if !sent {
            tokio::spawn(resend(f, to, held.clone()));
        }
    }
}

/// Sends `f`'s result to the call `to`: whether it is done with (sent, or failed for good, its
/// files removed and its attempt ended); false when the requester went away before its
/// outputs were all sent — its files are kept for a re-send.
async fn deliver(f: &Finished, to: &Reply, held: &Attempts) -> bool {
    let sent = match send_back(f, to).await {
        Ok(done) => done,
        Err(_) if to.is_closed() => return false,
        Err(e) => {
            warn!(
                task = f.assignment.task_id,
                "offload: sending the result back failed: {e}"
            );
            cleanup_task(&f.staging, Path::new(&f.spec.workdir));
            held.ended(
                f.key,
                format!("ran here, but its outputs could not be sent back: {e}"),
                now_ms(),
            );
            return true;
        }
    };
    // Cleaned up before the result goes: a requester that has its result finds nothing of its
    // task left here.
    cleanup_task(&f.staging, Path::new(&f.spec.workdir));
    let went = matches!(
        tokio::time::timeout(SEND_TIMEOUT, to.send(Ok(sent))).await,
        Ok(Ok(()))
    );
    let r = &f.result;
    let how = if r.success {
        "success".to_string()
    } else {
        format!("exit code {}", r.exit_code)
    };
    let outcome = if went {
        format!("ran here and its result was sent ({how}); its files are gone")
    } else {
        warn!(
            task = f.assignment.task_id,
            "offload: sending the result back failed: the requester went away"
        );
        format!(
            "ran here ({how}), but its call broke as its result was sent, after its files were \
             removed"
        )
    };
    held.ended(f.key, outcome, now_ms());
    true
}

/// `f`'s result, whose requester (`gone`) went away while it was sent: to the call that takes
/// the attempt over within [`attempts::REATTACH_GRACE`], else dropped with its files.
async fn resend(f: Finished, mut gone: Reply, held: Arc<Attempts>) {
    let mut calls = f.live.reply.subscribe();
    loop {
        let now = calls.borrow_and_update().clone();
        if now.same_channel(&gone) {
            drop(now);
            if matches!(
                tokio::time::timeout(attempts::REATTACH_GRACE, calls.changed()).await,
                Ok(Ok(()))
            ) {
                continue;
            }
            warn!(
                task = f.assignment.task_id,
                attempt = f.assignment.attempt,
                "the requesting node is gone: its result is dropped"
            );
            cleanup_task(&f.staging, Path::new(&f.spec.workdir));
            held.ended(
                f.key,
                format!(
                    "ran here, but its call broke while its result was sent and it was not \
                     sent again within {} s",
                    attempts::REATTACH_GRACE.as_secs()
                ),
                now_ms(),
            );
            return;
        }
        gone = now;
        if deliver(&f, &gone, &held).await {
            return;
        }
    }
}

/// Sends a finished task's logs and declared outputs back to `to`; returns the reply that ends
/// the call (its result), for [`deliver`] to send once the task's directories are gone.
async fn send_back(f: &Finished, to: &Reply) -> Result<pb::OffloadReply, String> {
    let send = |chunk: pb::FileChunk| {
        let reply = to.clone();
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
                    result.set_end(pb::TaskEnd::OutputsMissing);
                    result.message = format!("the task did not write its declared output `{rel}`");
                }
            }
            // A FIFO (or the like) the task left there: never read (the read could wait for
            // good), and said as what it is.
            Err(e) if crate::workdir::not_regular(&e).is_some() => {
                if result.success {
                    let what = crate::workdir::not_regular(&e).map_or("", |n| n.what);
                    result.success = false;
                    result.set_end(pb::TaskEnd::OutputsMissing);
                    result.message = format!(
                        "the task made its declared output `{rel}` {what}: an output is one \
                         regular file"
                    );
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
        Self::bind_limited(
            at,
            pipeline,
            token,
            tls,
            hetsched_proto::listen::Limits::agent(),
        )
        .await
    }

    /// [`AccelListener::bind`] with its connections bounded by `limits` (the greeting
    /// timeout, the cap: `hetsched_proto::listen`).
    pub(crate) async fn bind_limited(
        at: SocketAddr,
        pipeline: Pipeline,
        token: &str,
        tls: Option<(Vec<u8>, Vec<u8>)>,
        limits: hetsched_proto::listen::Limits,
    ) -> Result<Self, String> {
        let has_tls = tls.is_some();
        let tls = tls
            .map(|(cert, key)| hetsched_proto::listen::tls_config(&cert, &key))
            .transpose()
            .map_err(|e| e.to_string())?;
        let listener = tokio::net::TcpListener::bind(at)
            .await
            .map_err(|e| e.to_string())?;
        let addr = listener.local_addr().map_err(|e| e.to_string())?;
        let service = AccelServer::with_interceptor(
            AccelService { pipeline },
            // The same token check as the agent's other listeners (logs, dataflow).
            crate::logs::check_token(token),
        );
        let mut builder = hetsched_proto::listen::server();
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let join = tokio::spawn(async move {
            // Small messages (a task's result, the last chunk of a file) must not wait for
            // Nagle's algorithm: without TCP_NODELAY every offload paid a 40 ms delayed ACK.
            // TCP keepalive too: a vanished peer's connection ends (`agent_tcp`).
            let tcp = hetsched_proto::listen::agent_tcp(listener);
            let incoming = hetsched_proto::listen::incoming(
                tcp,
                tls,
                limits,
                format!("the accelerator listener {addr}"),
            );
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
