//! The NNode side of accelerator offload (spec 01, mechanism 2): ship a task placed here to the
//! ANode this node is bound to, wait for it asynchronously, and put its outputs where a local run
//! would have: the declared output files in the task's directory, stdout and stderr in
//! `WORK_DIR/job-J/APP-INDEX.ATTEMPT.{out,err}`.
//!
//! - A declared input missing on the NNode fails the attempt at once, naming the file; nothing is
//!   shipped.
//! - A transfer that breaks (the call fails before the result arrives) is tried again, with the
//!   same attempt number and ticket, up to [`TRANSFER_TRIES`] times; then the attempt is reported
//!   `interrupted`, so the server runs the task again (as a lost one, not a failure). An ANode
//!   that holds the attempt already (it was queued or ran when the call broke) runs it once: the
//!   new call takes the run over (`OffloadReady.resumed`: no input is sent again) and gets its
//!   result ([`super::attempts`]).
//! - Each offload carries the server's ticket for it (`Assignment.offload_ticket`), which the
//!   ANode checks, with what the shipped spec runs, before it takes anything. An ANode that
//!   refuses the ticket, or the inputs (an undeclared file, one over its `max_input_bytes`, no
//!   room above its `min_free_disk`), ends the attempt `interrupted` (run again with a fresh
//!   ticket); one that holds no key from its server yet answers `Unavailable`, which is tried
//!   again as a broken transfer.
//! - Output files are written under a temporary name and renamed once the result has arrived, so
//!   a broken transfer never leaves a half-written output in the task's directory.
//! - With `run_as_owner` a user's task's files are the account's business: its inputs are read,
//!   and its outputs, `stdout`/`stderr` files and temporary directory created and moved, as the
//!   account ([`crate::run_as`]); its directory, when its `workdir` is not on this node, is the
//!   account's own, as for a local run.

use super::files::{self, Sink};
use crate::launch;
use hetsched_proto as pb;
use hetsched_proto::accel_client::AccelClient;
use hetsched_proto::offload_reply::Part as ReplyPart;
use hetsched_proto::offload_request::Part as RequestPart;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};
use tracing::{debug, warn};

/// How many times one attempt's transfer is tried.
pub const TRANSFER_TRIES: u32 = 5;

/// Where to offload: the bound ANode's accelerator service.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    /// The ANode's name.
    pub anode: String,
    /// `http://host:port` or `https://host:port`.
    pub address: String,
}

/// A connection to one ANode's service (cheap to clone).
#[derive(Clone)]
pub struct Client {
    /// The ANode it reaches.
    pub target: Target,
    inner: AccelClient<
        tonic::service::interceptor::InterceptedService<
            tonic::transport::Channel,
            pb::TokenInterceptor,
        >,
    >,
    token: Arc<str>,
    ca_pem: Option<Arc<[u8]>>,
    /// Connections to other ANodes a task was sent to (container binding: an NNode's containers
    /// may be bound to different ANodes), by address.
    peers: Arc<Mutex<HashMap<String, Client>>>,
}

impl Client {
    /// A lazily connecting client of `target`'s service, calling with the agent `token`; `ca_pem`
    /// verifies a TLS service.
    pub fn new(target: Target, token: &str, ca_pem: Option<&[u8]>) -> Result<Self, String> {
        let tls = target.address.starts_with("https://");
        let endpoint = pb::endpoint(&target.address, if tls { ca_pem } else { None })
            .map_err(|e| format!("{}: {e}", target.address))?;
        let interceptor = pb::TokenInterceptor::new(token).map_err(|e| format!("token: {e}"))?;
        let inner = AccelClient::with_interceptor(endpoint.connect_lazy(), interceptor)
            .max_decoding_message_size(2 * files::CHUNK + (64 << 10));
        Ok(Self {
            target,
            inner,
            token: token.into(),
            ca_pem: ca_pem.map(Into::into),
            peers: Arc::default(),
        })
    }

    /// The client for the ANode an assignment names (`offload_anode`/`offload_address`): this
    /// one when it names none or this one's ANode, else a connection to the other ANode, made once
    /// and kept.
    pub fn for_assignment(&self, a: &pb::Assignment) -> Result<Client, String> {
        if a.offload_address.is_empty() || a.offload_address == self.target.address {
            return Ok(self.clone());
        }
        let mut peers = self.peers.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(c) = peers.get(&a.offload_address) {
            return Ok(c.clone());
        }
        let c = Client::new(
            Target {
                anode: a.offload_anode.clone(),
                address: a.offload_address.clone(),
            },
            &self.token,
            self.ca_pem.as_deref(),
        )?;
        peers.insert(a.offload_address.clone(), c.clone());
        Ok(c)
    }
}

/// The task's directory on this node: the spec's `workdir` if it exists here, else the agent's
/// work directory (as for a local run, [`launch::run`]), for a task that runs as the agent's own
/// user (one that runs as an account looks its `workdir` up as the account, [`run`]).
pub fn task_dir(spec: &pb::TaskSpec, work_dir: &Path) -> PathBuf {
    launch::task_cwd(work_dir, spec, None).to_path_buf()
}

/// Offloads `a` (a task of `spec`) from node `node` through `client` and waits for its result.
/// `control`'s kill ends the wait (the ANode kills the task when the call goes away); its new
/// time limits and signals go to the ANode on the call (`OffloadControl`), and a transfer tried
/// again ships the latest limit. `run_as_owner`: a user's task's files are handled as its
/// account (the module's doc).
///
/// The attempt is recorded in its job directory's records here, where its output comes back,
/// as a local run is ([`crate::ran::Attempt`]): one whose inputs are not here never started;
/// one shipped started, and ended with the streams it printed nothing on, so that a capture
/// file removed later reads as gone rather than as a task that printed nothing.
pub async fn run(
    client: &Client,
    a: &pb::Assignment,
    spec: &pb::TaskSpec,
    node: &str,
    work_dir: &Path,
    run_as_owner: bool,
    control: impl Into<launch::Control>,
) -> pb::TaskResult {
    let record = crate::ran::Attempt::of(work_dir, spec, a);
    let (account, dir, inputs) = match prepare(a, spec, node, work_dir, run_as_owner).await {
        Ok(prepared) => prepared,
        Err(r) => {
            record.never_started();
            return r;
        }
    };
    record.started();
    let r = transfer(
        client,
        (a, spec),
        (node, account.as_ref()),
        (work_dir, &dir),
        &inputs,
        control.into(),
    )
    .await;
    let (out, err) = launch::output_paths(work_dir, spec, a);
    record.ended(
        &launch::stream_targets(work_dir, &dir, spec, a),
        [&out, &err],
    );
    r
}

/// What an offload of `a` needs before anything is shipped: the account its files are handled
/// as (`run_as_owner`), its directory on this node, and its declared inputs' paths there, each
/// checked; else the attempt's result (it never started).
async fn prepare(
    a: &pb::Assignment,
    spec: &pb::TaskSpec,
    node: &str,
    work_dir: &Path,
    run_as_owner: bool,
) -> Result<(Option<crate::run_as::Account>, PathBuf, Vec<String>), pb::TaskResult> {
    let refused = |message: String| {
        let mut r = super::failed(a, &message);
        r.start_failed = true;
        r
    };
    let account = match crate::run_as::resolve(run_as_owner, &spec.run_as, node).await {
        Ok(account) => account,
        Err(e) => return Err(refused(e.to_string())),
    };
    // An account's task whose directory is not on this node uses the account's own, as a
    // local run does.
    let dir = match &account {
        None => task_dir(spec, work_dir),
        Some(acc) => match crate::run_as::area(work_dir, acc) {
            Ok(area) => launch::task_cwd(&area, spec, Some(acc)).to_path_buf(),
            Err(e) => {
                return Err(refused(format!(
                    "node {node}: the directory of account `{}` in the work directory: {e}",
                    acc.name
                )));
            }
        },
    };
    let mut inputs = Vec::new();
    for name in &spec.inputs {
        let rel = match files::resolve(name, a.index) {
            Ok(r) => r,
            Err(e) => return Err(super::failed(a, &format!("input {e}"))),
        };
        let path = dir.join(&rel);
        let checked = match &account {
            None => std::fs::metadata(&path),
            Some(_) => crate::run_as::open_as(account.as_ref(), &path).and_then(|f| f.metadata()),
        };
        match checked {
            Ok(m) if m.is_file() => {}
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(super::failed(
                    a,
                    &format!(
                        "input file `{}` in {} on {node} cannot be read{}: {e}",
                        rel.display(),
                        dir.display(),
                        account
                            .as_ref()
                            .map_or(String::new(), |acc| format!(" by `{}`", acc.name))
                    ),
                ));
            }
            _ => {
                return Err(super::failed(
                    a,
                    &format!(
                        "input file `{}` is missing in {} on {node}",
                        rel.display(),
                        dir.display()
                    ),
                ));
            }
        }
        inputs.push(rel.display().to_string());
    }
    Ok((account, dir, inputs))
}

/// Ships the prepared attempt (`a` of `spec`, from `node`, its files handled as `account`,
/// its directory `dir`, its checked `inputs`) and waits for its result, trying a broken
/// transfer again ([`TRANSFER_TRIES`]).
async fn transfer(
    client: &Client,
    (a, spec): (&pb::Assignment, &pb::TaskSpec),
    (node, account): (&str, Option<&crate::run_as::Account>),
    (work_dir, dir): (&Path, &Path),
    inputs: &[String],
    control: launch::Control,
) -> pb::TaskResult {
    let launch::Control {
        mut kill,
        mut limit,
        mut signals,
    } = control;
    // The spec each transfer ships: with the latest time limit it was told.
    let mut shipped = std::borrow::Cow::Borrowed(spec);
    let mut latest_limit = None;
    let started = launch::now_ns();
    let mut last_error = String::new();
    // A kill sender dropped unused (a oneshot must not be polled again once it answered).
    let mut kill_open = true;
    for try_no in 1..=TRANSFER_TRIES {
        if let Some(ms) = latest_limit {
            shipped.to_mut().time_limit_ms = ms;
        }
        let (tell, told) = mpsc::unbounded_channel();
        let attempt = once(
            client,
            a,
            &shipped,
            (node, account),
            work_dir,
            dir,
            inputs,
            told,
        );
        tokio::pin!(attempt);
        let r = loop {
            tokio::select! {
                r = &mut attempt => break r,
                why = &mut kill, if kill_open => match why {
                    Ok(why) => {
                        if why == launch::Kill::Shutdown {
                            return super::interrupted(a, hetsched_proto::SHUTDOWN_KILLED);
                        }
                        let mut r = super::failed(a, "killed at the server's request");
                        r.set_end(pb::TaskEnd::Killed);
                        return r;
                    }
                    Err(_) => kill_open = false,
                },
                ms = launch::next_limit(&mut limit) => match ms {
                    Some(ms) => {
                        latest_limit = Some(ms);
                        let _ = tell.send(pb::OffloadControl {
                            time_limit_ms: Some(ms),
                            signal: String::new(),
                        });
                    }
                    None => limit = None,
                },
                signal = launch::next_signal(&mut signals) => {
                    let name = signal.as_str();
                    let _ = tell.send(pb::OffloadControl {
                        time_limit_ms: None,
                        signal: name.strip_prefix("SIG").unwrap_or(name).to_string(),
                    });
                }
            }
        };
        match r {
            Ok(mut result) => {
                result.started_ns = started;
                return result;
            }
            Err(Transfer::Final(mut result)) => {
                result.task_id = a.task_id;
                result.attempt = a.attempt;
                return result;
            }
            Err(Transfer::Broken(e)) => {
                warn!(task = a.task_id, attempt = a.attempt, try_no, anode = %client.target.anode,
                    "offload transfer broke ({e}); trying again with the same attempt");
                last_error = e;
            }
        }
        tokio::time::sleep(Duration::from_millis(100 << (try_no - 1).min(4))).await;
    }
    super::interrupted(
        a,
        &format!(
            "offload to {} failed {TRANSFER_TRIES} times: {last_error}",
            client.target.anode
        ),
    )
}

enum Transfer {
    /// Try again with the same attempt.
    Broken(String),
    /// A result that is final although no task result arrived (e.g. a local file error).
    Final(pb::TaskResult),
}

/// One transfer: ships the task and its inputs, then `told` (what the NNode's agent is told
/// for the task meanwhile) if the ANode takes controls, and waits for the result. `node` is
/// this node, with the account its task's files are handled as, if any.
#[allow(clippy::too_many_arguments)]
async fn once(
    client: &Client,
    a: &pb::Assignment,
    spec: &pb::TaskSpec,
    (node, account): (&str, Option<&crate::run_as::Account>),
    work_dir: &Path,
    dir: &Path,
    inputs: &[String],
    mut told: mpsc::UnboundedReceiver<pb::OffloadControl>,
) -> Result<pb::TaskResult, Transfer> {
    let (tx, rx) = mpsc::channel::<pb::OffloadRequest>(4);
    let task = pb::OffloadRequest {
        part: Some(RequestPart::Task(pb::OffloadTask {
            task_id: a.task_id,
            attempt: a.attempt,
            index: a.index,
            spec: Some(spec.clone()),
            node: node.to_string(),
            gpus: (a.devices.len() as u32).max(1),
            entry: a.entry.clone(),
            // The server's authorisation: the ANode runs nothing without it.
            ticket: a.offload_ticket.clone(),
        })),
    };
    // The inputs are sent once the ANode's remote-read stage takes the call (`OffloadReady`),
    // then paced by HTTP/2 flow control; until then the call holds only its task.
    let (dir_in, inputs_in, account_in) = (dir.to_path_buf(), inputs.to_vec(), account.cloned());
    // `OffloadReady` says whether the ANode takes controls after the inputs, and whether this
    // call took over a run the ANode holds (a re-send: no input is sent again).
    let (go, go_rx) = oneshot::channel::<(bool, bool)>();
    let mut go = Some(go);
    let sender = tokio::spawn(async move {
        if tx.send(task).await.is_err() {
            return Ok(());
        }
        let Ok((controls, resumed)) = go_rx.await else {
            return Ok(());
        };
        for name in inputs_in.iter().filter(|_| !resumed) {
            let tx = tx.clone();
            files::send_file(&dir_in, name, 0, account_in.as_ref(), move |c| {
                let tx = tx.clone();
                async move {
                    tx.send(pb::OffloadRequest {
                        part: Some(RequestPart::Chunk(c)),
                    })
                    .await
                    .is_ok()
                }
            })
            .await
            .map_err(|e| format!("input file `{name}`: {e}"))?;
        }
        if controls {
            let done = pb::OffloadRequest {
                part: Some(RequestPart::InputsDone(pb::OffloadInputsDone {})),
            };
            if tx.send(done).await.is_err() {
                return Ok(());
            }
            // Until the result: the call ends (this task is aborted) or nothing more is told.
            while let Some(c) = told.recv().await {
                let m = pb::OffloadRequest {
                    part: Some(RequestPart::Control(c)),
                };
                if tx.send(m).await.is_err() {
                    break;
                }
            }
        }
        Ok::<(), String>(())
    });
    let mut inner = client.inner.clone();
    let call = inner
        .offload(tokio_stream::wrappers::ReceiverStream::new(rx))
        .await;
    let mut stream = match call {
        Ok(s) => s.into_inner(),
        Err(s) => {
            sender.abort();
            return Err(classify(s));
        }
    };
    let tmp = dir.join(format!(".hetsched-offload-{}-{}", a.task_id, a.attempt));
    let _ = std::fs::remove_dir_all(&tmp);
    // The task's stdout and stderr come back as streams 1 and 2 and go where its application
    // says, as a local run's would; the files are created before any byte arrives.
    let (out, err) = launch::output_paths(work_dir, spec, a);
    let targets = launch::stream_targets(work_dir, dir, spec, a);
    // A user's `stdout =`/`stderr =` files are opened by its account, as a local run's are.
    let opened = match account {
        None => launch::open_stream_files(&targets, [&out, &err]),
        // The files first, the pointers once they are open: a pointer says its file was
        // opened here (`ran::Attempt::ended` reads a missing one as a stream never written).
        Some(acc) => crate::run_as::hop(Some(acc), || launch::open_streams(&targets))
            .unwrap_or_else(|e| Err(format!("node {node}: {e}")))
            .and_then(|files| {
                launch::write_pointers(&targets, [&out, &err], Some(acc)).map(|()| files)
            }),
    };
    let files = match opened {
        Ok(files) => files,
        Err(m) => {
            let _ = std::fs::remove_dir_all(&tmp);
            return Err(Transfer::Final(super::failed(a, &m)));
        }
    };
    let stream_path = |k: usize| match &targets[k] {
        launch::StreamTo::Captured(p) | launch::StreamTo::File(p) => Some(p.clone()),
        launch::StreamTo::Discarded => None,
    };
    let (out, err) = (stream_path(0), stream_path(1));
    // Both streams to one file (however its paths are spelt): stderr's chunks are appended to
    // what stdout's wrote.
    let merged = match &files {
        [Some(o), Some(e)] => launch::same_file(o.metadata(), e.metadata()),
        _ => false,
    };
    drop(files);
    let mut outputs = Sink::users_files(&tmp, account.cloned());
    // The capture files are the agent's; an application's own files its account's.
    let mut captured = Sink::new(Path::new("/"));
    let mut own = Sink::users_files(Path::new("/"), account.cloned());
    let is_file = |k: usize| matches!(targets[k], launch::StreamTo::File(_));
    let (out_own, err_own) = (is_file(0), is_file(1));
    let result = loop {
        let m = match stream.message().await {
            Ok(Some(m)) => m,
            Ok(None) => {
                let _ = std::fs::remove_dir_all(&tmp);
                return Err(Transfer::Broken(
                    "the ANode closed the call before the result".into(),
                ));
            }
            Err(s) => {
                let _ = std::fs::remove_dir_all(&tmp);
                return Err(classify(s));
            }
        };
        match m.part {
            Some(ReplyPart::Chunk(mut c)) => {
                if c.stream == 2 && merged {
                    c.stream = 1;
                }
                let written = match (c.stream, &out, &err) {
                    (1, Some(out), _) if out_own => own.write(out, &c).await,
                    (1, Some(out), _) => captured.write(out, &c).await,
                    (2, _, Some(err)) if err_own => own.write(err, &c).await,
                    (2, _, Some(err)) => captured.write(err, &c).await,
                    (1 | 2, _, _) => Ok(()),
                    _ => match files::resolve(&c.path, a.index) {
                        Ok(rel) => outputs.write(&rel, &c).await,
                        Err(e) => Err(std::io::Error::other(e)),
                    },
                };
                if let Err(e) = written {
                    let _ = std::fs::remove_dir_all(&tmp);
                    // The task runs on; how it ends is not known here.
                    let mut r = super::failed(
                        a,
                        &format!("writing the offloaded task's output `{}`: {e}", c.path),
                    );
                    r.set_end(pb::TaskEnd::Unsaid);
                    return Err(Transfer::Final(r));
                }
            }
            Some(ReplyPart::Ready(r)) => {
                if let Some(go) = go.take() {
                    let _ = go.send((r.controls, r.resumed));
                }
            }
            Some(ReplyPart::Done(d)) => {
                let mut result = d.result.unwrap_or_default();
                // An ANode that predates `offload_started_ns` says its start in `started_ns`
                // alone (which the caller replaces with the NNode's own).
                if result.offload_started_ns == 0 {
                    result.offload_started_ns = result.started_ns;
                }
                break result;
            }
            None => {}
        }
    };
    // With controls it waits for more to tell until the call ends: the result has arrived.
    sender.abort();
    let finished = outputs
        .finish()
        .await
        .and(captured.finish().await)
        .and(own.finish().await);
    // Move the outputs into the task's directory only now that all of them arrived (as the
    // account, whose directory it is, when it runs as its owner).
    let move_all = || -> std::io::Result<()> {
        for name in &spec.outputs {
            let Ok(rel) = files::resolve(name, a.index) else {
                continue;
            };
            let from = tmp.join(&rel);
            if from.exists() {
                let to = dir.join(&rel);
                if let Some(p) = to.parent() {
                    std::fs::create_dir_all(p)?;
                }
                std::fs::rename(&from, &to)?;
            }
        }
        Ok(())
    };
    let moved = finished.and_then(|()| match account {
        None => move_all(),
        Some(acc) => crate::run_as::hop(Some(acc), move_all).map_err(std::io::Error::other)?,
    });
    let _ = std::fs::remove_dir_all(&tmp);
    if let Err(e) = moved {
        // It ran and ended as its result says, but its outputs are not where it wrote them:
        // no end of the task's fits.
        let mut r = super::failed(
            a,
            &format!(
                "writing the offloaded task's outputs in {}: {e}",
                dir.display()
            ),
        );
        r.set_end(pb::TaskEnd::Unsaid);
        return Err(Transfer::Final(r));
    }
    debug!(task = a.task_id, anode = %client.target.anode, success = result.success, "offloaded task done");
    Ok(pb::TaskResult {
        task_id: a.task_id,
        attempt: a.attempt,
        ..result
    })
}

/// Whether a failed call is worth another try of the same attempt. An ANode that refuses the
/// offload's ticket or its inputs ends the attempt `interrupted`: the task is not at fault (a
/// ticket signed before the ANode's key changed, the ANode's disk full), and the server runs it
/// again with a fresh ticket.
fn classify(s: tonic::Status) -> Transfer {
    match s.code() {
        tonic::Code::PermissionDenied
            if s.metadata()
                .get(hetsched_proto::ticket::REFUSED_HEADER)
                .is_some() =>
        {
            let mut r = pb::TaskResult {
                exit_code: -1,
                message: format!("the ANode refused the offload: {}", s.message()),
                interrupted: true,
                end: pb::TaskEnd::Interrupted.into(),
                ..Default::default()
            };
            r.finished_ns = launch::now_ns();
            r.started_ns = r.finished_ns;
            Transfer::Final(r)
        }
        tonic::Code::InvalidArgument
        | tonic::Code::Unauthenticated
        | tonic::Code::PermissionDenied => {
            // It never ran there.
            let mut r = pb::TaskResult {
                exit_code: -1,
                message: format!("the ANode refused the offload: {}", s.message()),
                end: pb::TaskEnd::StartFailed.into(),
                ..Default::default()
            };
            r.finished_ns = launch::now_ns();
            r.started_ns = r.finished_ns;
            Transfer::Final(r)
        }
        _ => Transfer::Broken(format!("{}: {}", s.code(), s.message())),
    }
}
