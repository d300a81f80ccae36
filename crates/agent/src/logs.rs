//! The agent's log listener: serves the task output files in its work directory
//! (`WORK_DIR/job-J/APP-INDEX.ATTEMPT.{out,err}`, written by [`crate::launch`], and divisible
//! chunks' `WORK_DIR/divisible/job-J/chunk-K.{out,err}`, written by [`crate::divisible`]) to the
//! server over gRPC (`AgentLogs.ReadLog`), which relays them to `hetsched log`.
//!
//! Calls must carry the agent token (the server holds it; users never talk to agents directly, so
//! the client token is not needed here) and the server's log ticket for the file they name
//! ([`hetsched_proto::ticket::Log`]). Every agent holds the agent token, so the token alone
//! would let any agent node read any other's task output, other users' included, past the
//! server's owner check: the server signs each read it relays with this node's data key (the
//! one its heartbeat replies give, shared with fetch tickets, [`crate::dataflow::DataKey`]), and
//! the listener verifies the ticket against what the request names and its own node name
//! before it opens anything ([`check_ticket`]): `PermissionDenied` naming the problem
//! otherwise. While it holds no key (it started moments ago) it serves nothing: `Unavailable`,
//! marked [`NO_KEY_HEADER`], which the server passes on as "not available yet". A read is one page: at most [`MAX_PAGE`] bytes from an
//! offset, or the last bytes of the file (negative offset). Files are opened with `O_NOFOLLOW`
//! and paths are built from sanitised components only, so a request cannot name a file outside
//! the work directory. A task whose application sent a stream to a file of its own
//! (`stdout = "out/{index}.txt"`) left a pointer in the capture file's place
//! ([`crate::launch::pointer_path`]), written by this agent: that file is served instead, so
//! `hetsched log` reads it wherever it is. A task that ran as its owner's account
//! (`run_as_owner`) left a pointer owned by that account: its file is opened as the account
//! ([`read_page_as`]), so a link the user put in its place reaches nothing the user could not read.
//!
//! A task's or chunk's file is served only from a job directory marked with the job nonce the
//! ticket names ([`crate::job_nonce::serves`]): job ids repeat after a restored backup or on a
//! fresh data directory, and this agent keeps older jobs' directories, so the job id alone
//! would serve one user's output to the owner of a later job of the same id. Another
//! incarnation's task file is answered `NotFound`, saying only that this job's output is not
//! here (a chunk's as a missing one, `exists: false`, so the server goes on to the other agents).
//!
//! A task's output that is gone — its job directory missing, its capture file removed after the
//! task printed on it, its application's own file removed — is answered `NotFound` naming the
//! task and the path, so that `hetsched log` fails rather than print nothing. A task that ran
//! and printed nothing on the stream (its capture file is made at the first byte) is an empty
//! page with `exists: false`: the job directory's records tell the two apart ([`crate::ran`]).
//! Such a `NotFound` carries what the records say ([`pb::LOG_ABSENT_HEADER`]): the attempt ran
//! here and its files are gone, or the job's directory is here but the attempt never ran here
//! (nothing: the node holds nothing of the job), so that the server, which asks every agent for
//! an earlier attempt, can say which.
//!
//! A running stream worker's stderr (`worker.err` in its directory, [`crate::stream_workers`]) is
//! served for `hetsched topology log`; one in an account's directory is read as the account.
//!
//! With a certificate and key (`hetsched agent --log-cert --log-key`) the listener speaks TLS, and
//! the server checks the certificate against its `[tls] agent_ca`; the token check is the same.

use crate::dataflow::DataKey;
use hetsched_proto as pb;
use hetsched_proto::agent_logs_server::{AgentLogs, AgentLogsServer};
use hetsched_proto::listen::Limits;
use hetsched_proto::ticket::{self, Log, LogFile, NO_KEY_HEADER};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use tonic::{Request, Response, Status};

/// Largest page one call returns.
pub const MAX_PAGE: u32 = pb::LOG_MAX_PAGE;

/// Where task `index` (attempt `attempt`) of application `app` of job `job` writes its stdout
/// (or stderr), `process` telling a multi-process workflow instance's processes apart (0: none):
/// the one place [`crate::launch`] and this listener agree on.
pub fn output_path(
    work_dir: &Path,
    job: u64,
    app: &str,
    (index, process): (u32, u32),
    attempt: u32,
    stderr: bool,
) -> PathBuf {
    // The processes of a multi-process workflow instance share its index (`-pPROCESS` tells
    // them apart; 0: a single process).
    let process = match process {
        0 => String::new(),
        p => format!("-p{p}"),
    };
    work_dir.join(format!("job-{job}")).join(format!(
        "{}-{index}{process}.{attempt}.{}",
        crate::launch::component(app),
        if stderr { "err" } else { "out" }
    ))
}

/// Reads one page of `path` (opened without following a link, a regular file only:
/// [`crate::workdir::open_regular`]; paging as [`pb::log_page`]): (data, offset where it
/// starts, file size, whether the file exists).
pub fn read_page(
    path: &Path,
    offset: i64,
    limit: u32,
) -> std::io::Result<(Vec<u8>, u64, u64, bool)> {
    let mut f = match crate::workdir::open_regular(path, false) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok((Vec::new(), 0, 0, false)),
        Err(e) => return Err(e),
    };
    let (data, start, size) = pb::log_page(&mut f, offset, limit)?;
    Ok((data, start, size, true))
}

/// Longest pointer read (a path of at most `hetsched_core::input::output_path::MAX_OUTPUT_PATH`
/// bytes joined to a task's directory).
const MAX_POINTER: u64 = 16 * 1024;

/// The file a task's stream went to instead of `captured`, if a pointer there says so (read
/// without following a link, a regular file only).
pub fn redirected(captured: &Path) -> std::io::Result<Option<PathBuf>> {
    Ok(redirected_owned(captured)?.map(|(path, _)| path))
}

/// [`redirected`], with the pointer's owner: the account the task ran as (`run_as_owner`, which
/// gives it the pointer), else the agent's user.
pub fn redirected_owned(captured: &Path) -> std::io::Result<Option<(PathBuf, u32)>> {
    use std::io::Read;
    use std::os::unix::ffi::OsStringExt;
    use std::os::unix::fs::MetadataExt;
    let f = match crate::workdir::open_no_follow(&crate::launch::pointer_path(captured), false) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let owner = f.metadata()?.uid();
    let mut bytes = Vec::new();
    f.take(MAX_POINTER).read_to_end(&mut bytes)?;
    Ok(Some((
        PathBuf::from(std::ffi::OsString::from_vec(bytes)),
        owner,
    )))
}

/// Reads one page of the file a pointer owned by `owner` names ([`redirected_owned`]): as
/// that account when it is not the agent's user, so that a link the account put in the way
/// leads only where the account may read.
pub fn read_page_as(
    owner: u32,
    path: &Path,
    offset: i64,
    limit: u32,
) -> std::io::Result<(Vec<u8>, u64, u64, bool)> {
    if owner == crate::workdir::euid() {
        return read_page(path, offset, limit);
    }
    let account = crate::run_as::Account::of_uid(owner).map_err(std::io::Error::other)?;
    crate::run_as::hop(Some(&account), || read_page(path, offset, limit))
        .map_err(std::io::Error::other)?
}

/// What a log ticket is checked with: this node's name (the node the server's tickets name)
/// and the data key its server gave it.
#[derive(Clone, Debug, Default)]
pub struct LogKey {
    /// This agent's node name.
    pub node: String,
    /// Its data key (none yet: every read is refused `Unavailable`).
    pub key: DataKey,
}

/// How many reads of task output one agent serves at once: each holds a thread of the
/// blocking pool while it opens and reads its file, and the pool (512 threads) is what the
/// agent's other work — starting tasks, reporting their results — needs too. A read that
/// hangs (a file system that stopped answering) keeps its turn, so at most this many threads
/// are ever held by reads.
pub const MAX_READS_IN_FLIGHT: usize = 32;

/// How long a read waits for its turn before it is refused as busy: well within the server's
/// 5 s wait for the agent's answer, so the user reads why.
const TURN_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// The `AgentLogs` service of one work directory.
pub struct LogService {
    work_dir: PathBuf,
    key: LogKey,
    /// The turns of the reads under way ([`MAX_READS_IN_FLIGHT`]), of `max_turns`.
    turns: std::sync::Arc<tokio::sync::Semaphore>,
    max_turns: usize,
}

impl LogService {
    /// The service of `work_dir`'s task outputs, its reads' tickets checked with `key`.
    pub fn new(work_dir: &Path, key: LogKey) -> Self {
        Self::with_turns(work_dir, key, MAX_READS_IN_FLIGHT)
    }

    /// [`LogService::new`] serving at most `turns` reads at once.
    fn with_turns(work_dir: &Path, key: LogKey, turns: usize) -> Self {
        Self {
            work_dir: work_dir.to_path_buf(),
            key,
            turns: std::sync::Arc::new(tokio::sync::Semaphore::new(turns)),
            max_turns: turns,
        }
    }

    /// A turn to read a file on the blocking pool, held until the read ends (however long the
    /// file system takes); refused `ResourceExhausted`, saying to try again, when none frees
    /// within [`TURN_WAIT`].
    async fn turn(&self) -> Result<tokio::sync::OwnedSemaphorePermit, Status> {
        match tokio::time::timeout(TURN_WAIT, self.turns.clone().acquire_owned()).await {
            Ok(Ok(turn)) => Ok(turn),
            _ => Err(Status::resource_exhausted(format!(
                "node {:?} is busy: all its {} turns for reads of task output are taken; try \
                 again in a few seconds",
                self.key.node, self.max_turns
            ))),
        }
    }
}

/// `read` in words, for a refusal.
fn described(read: &Log) -> String {
    let stream = if read.stderr { "stderr" } else { "stdout" };
    match read.file {
        LogFile::Task {
            job_id,
            app,
            index,
            process,
            attempt,
            ..
        } => {
            let process = match process {
                0 => String::new(),
                p => format!(" process {p}"),
            };
            format!(
                "read of the {stream} of job {job_id}'s task {app:?}:{index}{process} attempt {attempt}"
            )
        }
        LogFile::Chunk { job_id, chunk, .. } => {
            format!("read of the {stream} of chunk {chunk} of divisible job {job_id}")
        }
        LogFile::Worker {
            topology,
            generation,
            worker,
            ..
        } => format!(
            "read of the stderr of worker {worker} of topology {topology:?} (generation {generation})"
        ),
    }
}

/// Whether `req` may read what it names: the server's log ticket for it, checked with the data
/// key the server gave this node, before anything is opened (the module's doc).
fn check_ticket(key: &LogKey, req: &pb::AgentLogRequest) -> Result<(), Status> {
    let read = Log::of(req, &key.node);
    let Some(k) = key.key.get() else {
        let mut s = Status::unavailable(format!(
            "{}: node {:?} holds no data key from its server yet (it has not heard from the \
             server since it started, or the server predates log tickets): it serves no task \
             output until it does",
            described(&read),
            key.node
        ));
        s.metadata_mut().insert(
            NO_KEY_HEADER,
            tonic::metadata::MetadataValue::from_static("1"),
        );
        return Err(s);
    };
    if req.ticket.is_empty() {
        return Err(Status::permission_denied(format!(
            "{}: no ticket from the server (the caller is not the server, or the server \
             predates log tickets)",
            described(&read)
        )));
    }
    if !ticket::verify(&k, &read, &req.ticket) {
        return Err(Status::permission_denied(format!(
            "{}: the ticket does not match (it is the server's for another file or node, or \
             was signed before this node's data key changed)",
            described(&read)
        )));
    }
    Ok(())
}

#[tonic::async_trait]
impl AgentLogs for LogService {
    async fn read_log(
        &self,
        req: Request<pb::AgentLogRequest>,
    ) -> Result<Response<pb::ReadLogReply>, Status> {
        let r = req.into_inner();
        // Before any name in it is looked at: only the reads the server relayed.
        check_ticket(&self.key, &r).inspect_err(|s| {
            tracing::warn!("task output refused: {}", s.message());
        })?;
        // The file is chosen from the fields the ticket covers, as `Log::of` reads them, and
        // so is the job incarnation it must be of. A task's file comes with its attempt's
        // record of whether it ran here ([`crate::ran`]) and the read in words.
        let read = Log::of(&r, &self.key.node);
        let path = match read.file {
            LogFile::Worker { .. } => None,
            LogFile::Chunk {
                job_id,
                chunk,
                job_nonce,
            } => Some((
                crate::divisible::chunk_output_path(&self.work_dir, job_id, chunk, r.stderr),
                job_nonce,
                None,
            )),
            LogFile::Task {
                job_id,
                app,
                index,
                process,
                attempt,
                job_nonce,
            } => {
                let path = output_path(
                    &self.work_dir,
                    job_id,
                    app,
                    (index, process),
                    attempt,
                    r.stderr,
                );
                let record = TaskRecord {
                    file: crate::ran::path(
                        path.parent().unwrap_or(&self.work_dir),
                        app,
                        process,
                        attempt,
                    ),
                    index,
                    stderr: r.stderr,
                    what: task_output(&read),
                };
                Some((path, job_nonce, Some(record)))
            }
        };
        let Some((path, job_nonce, task)) = path else {
            return self.worker_log(r).await.map(Response::new);
        };
        let turn = self.turn().await?;
        tokio::task::spawn_blocking(move || {
            let _turn = turn;
            if let Some(task) = &task {
                task.job_dir_here(&path)?;
            }
            if !of_incarnation(&path, job_nonce) {
                // Another job's of the same id (kept from before a restore, or from another
                // data directory): nothing of it is served or said.
                tracing::info!(
                    file = %path.display(),
                    "task output of another incarnation of its job id not served"
                );
                // A task's read says its output is not here: an empty page would read as a
                // task that printed nothing (a chunk's reader goes on to the other agents).
                if let Some(task) = &task {
                    return Err(task.gone(format!(
                        "its job directory {} here holds another job of the same id (from \
                         before a server restore, or of another data directory), not this \
                         one's output",
                        path.parent().unwrap_or(&path).display()
                    )));
                }
                return Ok(pb::ReadLogReply {
                    path: path.display().to_string(),
                    ..Default::default()
                });
            }
            let (file, owner, pointed) = match redirected_owned(&path) {
                Ok(Some((p, owner))) => (p, owner, true),
                Ok(None) => (path.clone(), crate::workdir::euid(), false),
                Err(e) => return Err(file_error(&path.display().to_string(), &e)),
            };
            let reply = page_reply(owner, &file, r.offset, r.limit)?;
            match &task {
                Some(task) if !reply.exists => task.missing(&file, pointed).map(|()| reply),
                _ => Ok(reply),
            }
        })
        .await
        .map_err(|e| Status::internal(e.to_string()))?
        .map(Response::new)
    }
}

/// A task's output file's read, with what tells a missing file's reason ([`crate::ran`]).
struct TaskRecord {
    /// Its attempt's record.
    file: PathBuf,
    /// Its byte there.
    index: u32,
    /// The stream read.
    stderr: bool,
    /// The output in words ([`task_output`]).
    what: String,
}

impl TaskRecord {
    /// Output that is not here: `NotFound`, naming it and why (the server passes it on after
    /// the node's name). `hetsched log` fails on it, counting it, rather than print nothing.
    fn gone(&self, why: String) -> Status {
        Status::not_found(format!("{} is gone: {why}", self.what))
    }

    /// [`TaskRecord::gone`], marked with what this node's records say of the attempt
    /// (`known`: [`pb::LOG_RAN_HERE`] or [`pb::LOG_NOT_RUN_HERE`]), which the server reads
    /// when it asks every agent for an earlier attempt.
    fn gone_known(&self, why: String, known: &'static str) -> Status {
        let mut s = self.gone(why);
        s.metadata_mut().insert(
            pb::LOG_ABSENT_HEADER,
            tonic::metadata::MetadataValue::from_static(known),
        );
        s
    }

    /// Ok when capture file `path`'s job directory is on this node; else its output is gone.
    fn job_dir_here(&self, path: &Path) -> Result<(), Status> {
        let dir = path.parent().unwrap_or(path);
        match std::fs::symlink_metadata(dir) {
            Ok(_) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(self.gone(format!(
                "its job directory {} is not on this node (it was removed, or the attempt \
                 never ran here)",
                dir.display()
            ))),
            Err(e) => Err(file_error(&dir.display().to_string(), &e)),
        }
    }

    /// Ok when `file`, which does not exist, is a stream the attempt printed nothing on (or
    /// has not printed on yet); else its output is gone. `pointed`: `file` is the one its
    /// application named (`stdout =`), which the agent created when the task started — unless
    /// the records say the attempt printed nothing there (it never started: its pointer was
    /// left, as the account's, before the account failed to open the file).
    fn missing(&self, file: &Path, pointed: bool) -> Result<(), Status> {
        use crate::ran::Record;
        let stream = if self.stderr { "stderr" } else { "stdout" };
        let record = crate::ran::read(&self.file, self.index)
            .map_err(|e| file_error(&self.file.display().to_string(), &e))?;
        if pointed {
            return match record {
                Record::Ended {
                    silent_out,
                    silent_err,
                } if (if self.stderr { silent_err } else { silent_out }) => Ok(()),
                _ => Err(self.gone_known(
                    format!(
                        "{}, the file its application sent its {stream} to, was removed",
                        file.display()
                    ),
                    pb::LOG_RAN_HERE,
                )),
            };
        }
        match record {
            // Its capture file is made at its first byte: nothing yet, or nothing at all.
            Record::Unrecorded | Record::Running => Ok(()),
            Record::Ended {
                silent_out,
                silent_err,
            } => {
                let silent = if self.stderr { silent_err } else { silent_out };
                if silent {
                    Ok(())
                } else {
                    Err(self.gone_known(
                        format!(
                            "{} was removed (the attempt printed on its {stream})",
                            file.display()
                        ),
                        pb::LOG_RAN_HERE,
                    ))
                }
            }
            Record::None => Err(self.gone_known(
                format!(
                    "{} does not exist, and {} records no run of this attempt here (it ran on \
                     another node, or the record was removed)",
                    file.display(),
                    self.file.display()
                ),
                pb::LOG_NOT_RUN_HERE,
            )),
        }
    }
}

/// A task's output in words, for a reply that says it is gone: `the stdout of job 4's task
/// "sim":2 attempt 1`.
fn task_output(read: &Log) -> String {
    described(read)
        .strip_prefix("read of ")
        .map(str::to_string)
        .unwrap_or_else(|| described(read))
}

/// Whether `file` (a task's or chunk's output, in its job's directory) may be served to a read
/// naming job nonce `nonce`: its directory is marked with it ([`crate::job_nonce::serves`]).
fn of_incarnation(file: &Path, nonce: u64) -> bool {
    file.parent()
        .is_some_and(|dir| crate::job_nonce::serves(dir, nonce))
}

/// Why the output file `shown` cannot be read, as a status whose code says the agent answered
/// (the server passes such a refusal on as it is, without a hint about the network): a file the
/// task's owner may not read, a symbolic link (never followed), or what is not a regular file
/// (a FIFO the task made in its place, never read: the read would wait for a writer for good)
/// is refused as such.
fn file_error(shown: &str, e: &std::io::Error) -> Status {
    if let Some(n) = crate::workdir::not_regular(e) {
        Status::failed_precondition(format!(
            "`{shown}` is {}, not a regular file: only regular files are served as task output",
            n.what
        ))
    } else if e.raw_os_error() == Some(nix::errno::Errno::ELOOP as i32) {
        Status::failed_precondition(format!(
            "{shown} is a symbolic link: task output is not read through links"
        ))
    } else if e.kind() == std::io::ErrorKind::PermissionDenied {
        Status::permission_denied(format!(
            "{shown}: {e} (read as the account that ran the task)"
        ))
    } else {
        Status::internal(format!("{shown}: {e}"))
    }
}

/// One page of `path`, read as `owner` ([`read_page_as`]), as the reply; an error names the
/// file.
fn page_reply(
    owner: u32,
    path: &Path,
    offset: i64,
    limit: u32,
) -> Result<pb::ReadLogReply, Status> {
    let shown = path.display().to_string();
    let (data, offset, size, exists) =
        read_page_as(owner, path, offset, limit).map_err(|e| file_error(&shown, &e))?;
    Ok(pb::ReadLogReply {
        data,
        offset,
        size,
        exists,
        path: shown,
        ..Default::default()
    })
}

impl LogService {
    /// A page of stream worker `r.worker`'s stderr: in the directory of account `r.run_as` when
    /// the agent runs it as that account (read as it), else in the work directory's.
    async fn worker_log(&self, r: pb::AgentLogRequest) -> Result<pb::ReadLogReply, Status> {
        if !r.run_as.is_empty() && !crate::run_as::is_user_name(&r.run_as) {
            return Err(Status::invalid_argument(format!(
                "`{}` is not a user name",
                r.run_as
            )));
        }
        let key = (r.topology.clone(), r.generation, r.worker);
        let work_dir = self.work_dir.clone();
        let turn = self.turn().await?;
        tokio::task::spawn_blocking(move || {
            use std::os::unix::fs::MetadataExt;
            let _turn = turn;
            let own = crate::stream_workers::worker_dir(&work_dir, &key);
            let theirs = (!r.run_as.is_empty()).then(|| {
                crate::stream_workers::worker_dir(
                    &work_dir.join(crate::run_as::AREA).join(&r.run_as),
                    &key,
                )
            });
            // The directory it runs in, and whose it is (not followed if a link).
            let (dir, owner) = theirs
                .into_iter()
                .chain([own])
                .find_map(|d| {
                    let m = std::fs::symlink_metadata(&d).ok()?;
                    m.is_dir().then(|| (d, m.uid()))
                })
                .ok_or_else(|| {
                    Status::not_found(format!(
                        "worker {} of topology `{}` does not run here",
                        r.worker, r.topology
                    ))
                })?;
            page_reply(owner, &dir.join("worker.err"), r.offset, r.limit)
        })
        .await
        .map_err(|e| Status::internal(e.to_string()))?
    }
}

/// Admits calls carrying `authorization: Bearer <agent token>` only: the check of every
/// listener of the agent (this one, the dataflow service, the accelerator service), so that they
/// cannot come to differ on who gets in.
#[derive(Clone)]
pub struct CheckToken(std::sync::Arc<str>);

/// The interceptor admitting calls that carry `token`.
pub fn check_token(token: &str) -> CheckToken {
    CheckToken(token.into())
}

impl tonic::service::Interceptor for CheckToken {
    fn call(&mut self, req: Request<()>) -> Result<Request<()>, Status> {
        // The header read as the server reads it (`pb::bearer_token`: the scheme in any case).
        let ok = req
            .metadata()
            .get(pb::AUTH_HEADER)
            .and_then(|v| v.to_str().ok())
            .and_then(pb::bearer_token)
            .is_some_and(|t| {
                let (a, b) = (t.as_bytes(), self.0.as_bytes());
                a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
            });
        if ok {
            Ok(req)
        } else {
            Err(Status::unauthenticated("wrong or missing agent token"))
        }
    }
}

/// A bound log listener.
pub struct LogListener {
    /// The bound address.
    pub addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    join: tokio::task::JoinHandle<()>,
}

impl LogListener {
    /// Binds `at` and serves `work_dir`'s task outputs to callers holding `token` and the
    /// server's log ticket, checked with `key` — over TLS when `tls` = (certificate, key) in PEM
    /// is given — and also workflow outputs and PCDDB messages to other agents (`AgentData`,
    /// issue 13) when `data` is given.
    pub async fn bind_tls(
        at: SocketAddr,
        work_dir: &Path,
        token: &str,
        key: LogKey,
        tls: Option<(Vec<u8>, Vec<u8>)>,
        data: Option<crate::dataflow::DataService>,
    ) -> std::io::Result<Self> {
        Self::bind_limited(at, work_dir, token, key, tls, data, Limits::agent()).await
    }

    /// [`LogListener::bind_tls`] with its connections bounded by `limits` (the greeting
    /// timeout, the cap: `hetsched_proto::listen`).
    pub(crate) async fn bind_limited(
        at: SocketAddr,
        work_dir: &Path,
        token: &str,
        key: LogKey,
        tls: Option<(Vec<u8>, Vec<u8>)>,
        data: Option<crate::dataflow::DataService>,
        limits: Limits,
    ) -> std::io::Result<Self> {
        let tls = tls
            .map(|(cert, key)| hetsched_proto::listen::tls_config(&cert, &key))
            .transpose()
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
        let mut builder = hetsched_proto::listen::server();
        let listener = tokio::net::TcpListener::bind(at).await?;
        let addr = listener.local_addr()?;
        let service =
            AgentLogsServer::with_interceptor(LogService::new(work_dir, key), check_token(token));
        let data = data.map(|d| {
            pb::agent_data_server::AgentDataServer::with_interceptor(d, check_token(token))
        });
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let join = tokio::spawn(async move {
            // Without TCP_NODELAY every input fetch and PCDDB hop (served here without TLS) paid
            // a 40 ms delayed ACK.
            // TCP keepalive too: a vanished peer's connection ends (`agent_tcp`).
            let tcp = hetsched_proto::listen::agent_tcp(listener);
            let incoming = hetsched_proto::listen::incoming(
                tcp,
                tls,
                limits,
                format!("the log listener {addr}"),
            );
            if let Err(e) = builder
                .add_service(service)
                .add_optional_service(data)
                .serve_with_incoming_shutdown(incoming, async {
                    let _ = rx.await;
                })
                .await
            {
                tracing::error!("log listener: {e}");
            }
        });
        Ok(Self {
            addr,
            stop: Some(tx),
            join,
        })
    }

    /// Stops serving.
    pub async fn stop(mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        let _ = tokio::time::timeout(std::time::Duration::from_secs(2), &mut self.join).await;
        self.join.abort();
    }
}

/// The listener's connections as the stream tonic serves.
#[cfg(test)]
mod tests {
    use super::*;
    use hetsched_core::testkit::ScratchDir;

    /// A stream worker's stderr is read from its directory; a name cannot lead elsewhere (the
    /// topology's is made safe, an account's must be a user name).
    #[tokio::test]
    async fn a_workers_stderr_is_served_and_names_cannot_leave_the_work_directory() {
        let dir = ScratchDir::new("logs", "worker");
        let key = ("../../etc".to_string(), 2, 0);
        let wd = crate::stream_workers::worker_dir(&dir, &key);
        assert!(wd.starts_with(dir.join("stream")), "{}", wd.display());
        std::fs::create_dir_all(&wd).expect("dir");
        std::fs::write(wd.join("worker.err"), "a warning\n").expect("err");
        let service = LogService::new(&dir, LogKey::default());
        let ask = |run_as: &str| pb::AgentLogRequest {
            topology: key.0.clone(),
            generation: 2,
            worker: 0,
            run_as: run_as.into(),
            ..Default::default()
        };
        let r = service.worker_log(ask("")).await.expect("served");
        assert_eq!(r.data, b"a warning\n");
        // An account without such a directory: the work directory's.
        assert!(service.worker_log(ask("alice")).await.is_ok());
        let e = service
            .worker_log(ask("../root"))
            .await
            .expect_err("not a name");
        assert_eq!(e.code(), tonic::Code::InvalidArgument);
        let mut other = ask("");
        other.worker = 1;
        let e = service.worker_log(other).await.expect_err("no such worker");
        assert!(e.message().contains("does not run here"), "{}", e.message());
    }

    /// The agent token alone reads no one's output (log tickets): a read is served only with
    /// the server's ticket for that file on this node, checked before anything is opened — a
    /// refused read of a link is refused for its ticket, not as a link, and a refused read of
    /// a worker or chunk that does not exist is refused, not found missing. Before, any holder
    /// of the agent token read any task's output here.
    #[tokio::test]
    async fn a_read_is_served_only_with_the_servers_ticket_for_it_and_nothing_is_opened_without() {
        let dir = ScratchDir::new("logs", "ticket");
        let out = output_path(&dir, 4, "sim", (2, 0), 1, false);
        std::fs::create_dir_all(out.parent().expect("job dir")).expect("job dir");
        std::fs::write(&out, "alice's result\n").expect("out");
        // Another attempt's capture file is a link: opening it would answer "symbolic link".
        let linked = output_path(&dir, 4, "sim", (2, 0), 2, false);
        std::os::unix::fs::symlink(&out, &linked).expect("link");
        let key = LogKey {
            node: "a".into(),
            key: DataKey::default(),
        };
        let service = LogService::new(&dir, key.clone());
        let ask = |r: pb::AgentLogRequest| service.read_log(Request::new(r));
        let task = pb::AgentLogRequest {
            job_id: 4,
            app: "sim".into(),
            index: 2,
            attempt: 1,
            ..Default::default()
        };

        // No key from the server yet: nothing is served, even with a valid ticket.
        let e = ask(ticketed(&task)).await.expect_err("no key");
        assert_eq!(e.code(), tonic::Code::Unavailable, "{}", e.message());
        assert!(e.metadata().get(NO_KEY_HEADER).is_some(), "{e:?}");
        assert!(e.message().contains("holds no data key"), "{}", e.message());
        assert!(key.key.set(&KEY));

        let attempt_2 = pb::AgentLogRequest {
            attempt: 2,
            ..task.clone()
        };
        let worker = pb::AgentLogRequest {
            topology: "t".into(),
            worker: 9,
            ..Default::default()
        };
        let chunk = pb::AgentLogRequest {
            job_id: 5,
            divisible: true,
            chunk: 1,
            ..Default::default()
        };
        let with = |r: &pb::AgentLogRequest, ticket: Vec<u8>| pb::AgentLogRequest {
            ticket,
            ..r.clone()
        };
        let other_node = ticket::sign(&KEY, &Log::of(&task, "b"));
        let other_key = ticket::sign(&[8; 32], &Log::of(&task, "a"));
        let valid = ticketed(&task).ticket;
        for (case, req, says) in [
            ("no ticket", task.clone(), "no ticket from the server"),
            ("forged", with(&task, vec![0; 32]), "does not match"),
            ("another node's", with(&task, other_node), "does not match"),
            (
                "under another key",
                with(&task, other_key),
                "does not match",
            ),
            // The ticket of attempt 1, for attempt 2 (a link: had it been opened, the answer
            // would say so), for another task's, for its stderr.
            (
                "another attempt's",
                with(&attempt_2, valid.clone()),
                "does not match",
            ),
            (
                "another task's",
                with(
                    &pb::AgentLogRequest {
                        index: 3,
                        ..task.clone()
                    },
                    valid.clone(),
                ),
                "does not match",
            ),
            (
                "the other stream's",
                with(
                    &pb::AgentLogRequest {
                        stderr: true,
                        ..task.clone()
                    },
                    valid.clone(),
                ),
                "does not match",
            ),
            ("a worker's, none", worker.clone(), "no ticket"),
            (
                "a chunk's, a task's",
                with(&chunk, valid.clone()),
                "does not match",
            ),
        ] {
            let e = ask(req).await.expect_err(case);
            assert_eq!(e.code(), tonic::Code::PermissionDenied, "{case}: {e:?}");
            assert!(e.message().contains(says), "{case}: {}", e.message());
        }

        // With its ticket: served, any page of it; the link is reached (and refused as one)
        // only with attempt 2's own ticket.
        let r = ask(ticketed(&task)).await.expect("served").into_inner();
        assert_eq!(r.data, b"alice's result\n");
        let r = ask(ticketed(&pb::AgentLogRequest {
            offset: -7,
            ..task.clone()
        }))
        .await
        .expect("a page")
        .into_inner();
        assert_eq!(r.data, b"result\n");
        let e = ask(ticketed(&attempt_2)).await.expect_err("a link");
        assert_eq!(e.code(), tonic::Code::FailedPrecondition, "{e:?}");
        let e = ask(ticketed(&worker)).await.expect_err("no such worker");
        assert_eq!(e.code(), tonic::Code::NotFound, "{e:?}");
        let r = ask(ticketed(&chunk)).await.expect("a chunk").into_inner();
        assert!(!r.exists);
    }

    /// The key these tests sign their tickets with.
    const KEY: [u8; 32] = [7; 32];

    /// A log service of node `a` over a scratch work directory (named `name`), holding
    /// [`KEY`] as the server's data key.
    fn keyed_service(name: &str) -> (ScratchDir, LogService) {
        let dir = ScratchDir::new("logs", name);
        let service = LogService::new(
            &dir,
            LogKey {
                node: "a".into(),
                key: DataKey::default(),
            },
        );
        assert!(service.key.key.set(&KEY));
        (dir, service)
    }

    /// `r` with the server's ticket for it on node `a` (signed with [`KEY`]).
    fn ticketed(r: &pb::AgentLogRequest) -> pb::AgentLogRequest {
        pb::AgentLogRequest {
            ticket: ticket::sign(&KEY, &Log::of(r, "a")),
            ..r.clone()
        }
    }

    /// `service`'s answer to `r` with its ticket ([`ticketed`]), as the server relays a read.
    async fn read_ticketed(
        service: &LogService,
        r: pb::AgentLogRequest,
    ) -> Result<pb::ReadLogReply, Status> {
        service
            .read_log(Request::new(ticketed(&r)))
            .await
            .map(Response::into_inner)
    }

    /// Job ids repeat (a restored backup, a fresh data directory) while the agent keeps older
    /// jobs' directories: a task's or chunk's file is served only to a read whose (ticketed)
    /// job nonce is the one its directory is marked with. Another incarnation's read — with
    /// another nonce, or a legacy one (0) of a marked directory, or one with a nonce of an
    /// unmarked (legacy) directory — gets none of its data: a task's read is refused as output
    /// that is not here (`NotFound`), a chunk's answered as a missing file.
    #[tokio::test]
    async fn a_file_is_served_only_to_reads_of_the_job_incarnation_that_wrote_it() {
        let (dir, service) = keyed_service("nonce");
        let read = |job_id, job_nonce, divisible| {
            let r = pb::AgentLogRequest {
                job_id,
                app: "sh".into(),
                attempt: 1,
                divisible,
                chunk: 2,
                job_nonce,
                ..Default::default()
            };
            read_ticketed(&service, r)
        };
        // Job 1 of this incarnation (nonce 0xa) printed a secret; job 2 is an unmarked
        // (legacy) directory of an agent before nonces; chunk 2 of divisible job 3 is 0xc's.
        let job_1 = dir.join("job-1");
        crate::job_nonce::claim(&dir, &job_1, 0xa).expect("claim");
        std::fs::write(output_path(&dir, 1, "sh", (0, 0), 1, false), "SECRET\n").expect("out");
        std::fs::create_dir_all(dir.join("job-2")).expect("legacy");
        std::fs::write(output_path(&dir, 2, "sh", (0, 0), 1, false), "legacy\n").expect("out");
        let chunk_dir = crate::divisible::chunk_output_path(&dir, 3, 2, false);
        let chunk_dir = chunk_dir.parent().expect("dir");
        crate::job_nonce::claim(&dir, chunk_dir, 0xc).expect("claim");
        std::fs::write(
            crate::divisible::chunk_output_path(&dir, 3, 2, false),
            "chunk\n",
        )
        .expect("chunk");

        let r = read(1, 0xa, false).await.expect("its own");
        assert!(r.exists && r.data == b"SECRET\n", "{r:?}");
        // A task's read of another incarnation: its output is not here, said as such (an
        // empty page would read as a task that printed nothing), nothing of the other job's.
        for (case, job, nonce) in [
            ("another incarnation of job 1", 1, 0xb),
            ("a legacy read of a marked directory", 1, 0),
            ("a read with a nonce of an unmarked directory", 2, 0xa),
        ] {
            let e = read(job, nonce, false).await.expect_err(case);
            assert_eq!(e.code(), tonic::Code::NotFound, "{case}: {e:?}");
            assert!(
                e.message().contains("is gone")
                    && e.message().contains("holds another job of the same id")
                    && e.message().contains(&format!("job-{job}"))
                    && !e.message().contains("SECRET")
                    && !e.message().contains("legacy"),
                "{case}: {}",
                e.message()
            );
        }
        // A chunk's: a missing file (the server asks the other agents).
        for (case, job, nonce) in [
            ("another incarnation's chunk", 3, 0xd),
            ("a legacy read of a marked chunk", 3, 0),
        ] {
            let r = read(job, nonce, true).await.expect(case);
            assert!(
                !r.exists && r.data.is_empty() && r.size == 0,
                "{case}: {r:?}"
            );
        }
        let r = read(2, 0, false).await.expect("legacy");
        assert!(r.exists && r.data == b"legacy\n", "{r:?}");
        let r = read(3, 0xc, true).await.expect("chunk");
        assert!(r.exists && r.data == b"chunk\n", "{r:?}");
    }

    /// A task that ran and printed nothing reads as an empty page (`exists: false`), as
    /// before; output that is gone — its capture file removed after the task printed on it,
    /// its job directory removed, an attempt this node never ran — is refused `NotFound`
    /// naming the task and the path, so that `hetsched log` fails instead of saying the task
    /// printed nothing (`log --all > results.txt` lost results that way, exiting 0). A task
    /// still running that has printed nothing yet, and a job directory an older agent made
    /// (no records), read as before.
    #[tokio::test]
    async fn output_that_is_gone_is_refused_naming_it_and_a_silent_task_reads_empty() {
        let (dir, service) = keyed_service("gone");
        let job = dir.join("job-1");
        crate::job_nonce::claim_task_dir(&dir, &job, 0).expect("claim");
        let run = |index: u32, script: &str| {
            // `missing-dir`: its application's directory is not on this node, so it never
            // starts.
            let (workdir, workdir_required) = match script {
                "missing-dir" => (dir.join("no-such-dir").display().to_string(), true),
                _ => (String::new(), false),
            };
            let spec = pb::TaskSpec {
                job_id: 1,
                app: "sh".into(),
                argv: vec!["sh".into(), "-c".into(), script.into()],
                workdir,
                workdir_required,
                ..Default::default()
            };
            let a = pb::Assignment {
                task_id: u64::from(index) + 1,
                index,
                attempt: 1,
                ..Default::default()
            };
            let dir = dir.to_path_buf();
            async move {
                let (_tx, rx) = tokio::sync::oneshot::channel();
                let r = crate::launch::run(
                    &a,
                    &spec,
                    &[],
                    "a",
                    &dir,
                    &dir,
                    rx,
                    std::time::Duration::from_secs(10),
                    false,
                    |_| {},
                )
                .await;
                assert_eq!(r.success, !r.start_failed, "{r:?}");
            }
        };
        run(0, "true").await;
        run(1, "echo important-result").await;
        run(2, "missing-dir").await;
        let read = |job_id: u64, index: u32, stderr: bool| {
            let r = pb::AgentLogRequest {
                job_id,
                app: "sh".into(),
                index,
                attempt: 1,
                stderr,
                ..Default::default()
            };
            read_ticketed(&service, r)
        };
        // Ran and printed nothing, on either stream, or never started: an empty page.
        for (index, stderr) in [(0, false), (0, true), (2, false), (2, true)] {
            let r = read(1, index, stderr).await.expect("silent");
            assert!(!r.exists && r.data.is_empty(), "{r:?}");
        }
        let r = read(1, 1, false).await.expect("printed");
        assert_eq!(r.data, b"important-result\n");
        // Its stderr: nothing printed there.
        let r = read(1, 1, true).await.expect("no stderr");
        assert!(!r.exists, "{r:?}");
        // What its records say of an attempt it holds no output of, for the server, which
        // asks every agent for an earlier attempt (none: nothing of the job here).
        let known = |e: &Status| {
            e.metadata()
                .get(pb::LOG_ABSENT_HEADER)
                .map(|v| v.to_str().expect("ascii").to_string())
        };
        // Its capture file removed: gone, named.
        let out = output_path(&dir, 1, "sh", (1, 0), 1, false);
        std::fs::remove_file(&out).expect("rm");
        let e = read(1, 1, false).await.expect_err("removed");
        assert_eq!(e.code(), tonic::Code::NotFound, "{e:?}");
        assert_eq!(known(&e).as_deref(), Some(pb::LOG_RAN_HERE));
        assert!(
            e.message()
                .contains("the stdout of job 1's task \"sh\":1 attempt 1 is gone")
                && e.message().contains(&out.display().to_string())
                && e.message().contains("was removed"),
            "{}",
            e.message()
        );
        // An attempt that never ran here.
        let e = read(1, 7, false).await.expect_err("never ran");
        assert_eq!(e.code(), tonic::Code::NotFound, "{e:?}");
        assert!(e.message().contains("records no run"), "{}", e.message());
        assert_eq!(known(&e).as_deref(), Some(pb::LOG_NOT_RUN_HERE));
        // Started, nothing printed yet: an empty page, as a follower expects.
        crate::ran::mark(&crate::ran::path(&job, "sh", 0, 1), 9, crate::ran::STARTED)
            .expect("mark");
        assert!(!read(1, 9, false).await.expect("running").exists);
        // The job directory removed (`rm -rf WORK_DIR/job-1`): gone, the directory named.
        std::fs::remove_dir_all(&job).expect("rm -rf");
        let e = read(1, 0, false).await.expect_err("no job directory");
        assert_eq!(e.code(), tonic::Code::NotFound, "{e:?}");
        assert_eq!(known(&e), None);
        assert!(
            e.message().contains("is gone")
                && e.message().contains(&format!(
                    "its job directory {} is not on this node",
                    job.display()
                )),
            "{}",
            e.message()
        );
        // A directory an older agent made, without records: a missing file is an empty page.
        std::fs::create_dir_all(dir.join("job-2")).expect("legacy");
        assert!(!read(2, 0, false).await.expect("legacy").exists);
    }

    /// An offloaded task whose application sends its stdout to a file of its own (`stdout =`),
    /// interrupted before its output came back to this NNode — here the ANode refuses the
    /// offload, as it does one whose ticket expired — never had that file opened here: it
    /// printed nothing here, and `hetsched log` says so (an empty page) for its stdout as for
    /// its captured stderr. Before, its stdout read as a capture file that "was removed (the
    /// attempt printed on its stdout)".
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_offloaded_task_interrupted_before_its_stdout_file_was_opened_printed_nothing() {
        use crate::accel::offload::{self, Client, Target};
        let (dir, service) = keyed_service("offload-interrupted");
        crate::job_nonce::claim_task_dir(&dir, &dir.join("job-1"), 0).expect("claim");
        let anode_work = ScratchDir::new("logs", "offload-anode");
        let pipeline = crate::accel::Pipeline::start(
            "anode-1",
            crate::launch::unnamed_devices(1),
            &anode_work,
            Default::default(),
            crate::launch::DEFAULT_KILL_GRACE,
            false,
            Default::default(),
        )
        .expect("pipeline");
        // It holds a key, so the offload below is refused for its missing ticket at once
        // (an ANode with none is asked again, as a broken transfer).
        pipeline.set_offload_keys(&[pb::OffloadKey {
            epoch: 1,
            key: vec![9; 32],
        }]);
        let listener = crate::accel::service::AccelListener::bind(
            "127.0.0.1:0".parse().expect("addr"),
            pipeline.clone(),
            "token",
            None,
        )
        .await
        .expect("listener");
        let client = Client::new(
            Target {
                anode: "anode-1".into(),
                address: format!("http://{}", listener.addr),
            },
            "token",
            None,
        )
        .expect("client");
        let spec = pb::TaskSpec {
            job_id: 1,
            app: "sh".into(),
            argv: vec!["sh".into(), "-c".into(), "echo important-result".into()],
            workdir: dir.display().to_string(),
            stdout: "out/{index}.txt".into(),
            accelerator: "required".into(),
            ..Default::default()
        };
        // No ticket: refused before anything runs or comes back.
        let a = pb::Assignment {
            task_id: 1,
            index: 0,
            attempt: 1,
            devices: vec![0],
            ..Default::default()
        };
        let (_kill, kill) = tokio::sync::oneshot::channel();
        let r = offload::run(&client, &a, &spec, "a", &dir, false, kill).await;
        assert!(r.interrupted && !r.success, "{r:?}");
        assert!(!dir.join("out/0.txt").exists(), "nothing opened its file");
        for stderr in [false, true] {
            let req = pb::AgentLogRequest {
                job_id: 1,
                app: "sh".into(),
                index: 0,
                attempt: 1,
                stderr,
                ..Default::default()
            };
            let r = read_ticketed(&service, req)
                .await
                .expect("printed nothing here");
            assert!(!r.exists && r.data.is_empty(), "stderr {stderr}: {r:?}");
        }
    }

    /// An attempt that never started although its pointer to its application's own file was
    /// left (`run_as_owner`: the pointers are written before the account opens the files, and
    /// the account could not) printed nothing, as its records say: an empty page, not a file
    /// that "was removed". A file that was made and removed since is still gone, named.
    #[tokio::test]
    async fn a_pointer_left_by_an_attempt_that_never_started_reads_as_printed_nothing() {
        let (dir, service) = keyed_service("pointer-never-started");
        let job = dir.join("job-1");
        crate::job_nonce::claim_task_dir(&dir, &job, 0).expect("claim");
        let record = crate::ran::path(&job, "sh", 0, 1);
        for (index, flags) in [
            (0, crate::ran::NEVER_STARTED),
            (1, crate::ran::STARTED | crate::ran::ENDED),
        ] {
            let captured = output_path(&dir, 1, "sh", (index, 0), 1, false);
            let own = dir.join(format!("own-{index}.txt"));
            std::fs::write(
                crate::launch::pointer_path(&captured),
                own.as_os_str().as_encoded_bytes(),
            )
            .expect("pointer");
            crate::ran::mark(&record, index, flags).expect("mark");
        }
        let read = |index: u32| {
            let r = pb::AgentLogRequest {
                job_id: 1,
                app: "sh".into(),
                index,
                attempt: 1,
                ..Default::default()
            };
            read_ticketed(&service, r)
        };
        let r = read(0).await.expect("never started: printed nothing");
        assert!(!r.exists && r.data.is_empty(), "{r:?}");
        let e = read(1).await.expect_err("made and removed");
        assert_eq!(e.code(), tonic::Code::NotFound, "{e:?}");
        assert!(
            e.message().contains(&format!(
                "{}, the file its application sent its stdout to, was removed",
                dir.join("own-1.txt").display()
            )),
            "{}",
            e.message()
        );
    }

    /// A FIFO a task made where its output is read — its capture file, or its own `stdout =`
    /// file after it started (`rm -f out.fifo; mkfifo out.fifo`) — is refused at once, naming
    /// it, with a code the server passes on as the agent's word; the next read of a regular
    /// file is served. Before, each such read held a thread of the agent's blocking pool for
    /// good, and enough of them stopped the agent from serving, reporting and shutting down.
    #[tokio::test]
    async fn a_fifo_in_an_outputs_place_is_refused_at_once_naming_it() {
        let (dir, service) = keyed_service("fifo");
        let read = |attempt: u32| {
            let r = pb::AgentLogRequest {
                job_id: 4,
                app: "sim".into(),
                index: 2,
                attempt,
                ..Default::default()
            };
            let read = read_ticketed(&service, r);
            async move {
                tokio::time::timeout(std::time::Duration::from_secs(5), read)
                    .await
                    .expect("an answer within 5 s, not a hang")
            }
        };
        let fifo = |p: &Path| {
            nix::unistd::mkfifo(p, nix::sys::stat::Mode::from_bits_truncate(0o600)).expect("fifo")
        };
        // Attempt 1's capture file is a FIFO; attempt 2 sent its stdout to its own file,
        // which the task then replaced with one; attempt 3's is a file.
        let captured = output_path(&dir, 4, "sim", (2, 0), 1, false);
        std::fs::create_dir_all(captured.parent().expect("job dir")).expect("job dir");
        fifo(&captured);
        let own = dir.join("out.fifo");
        fifo(&own);
        let pointer = crate::launch::pointer_path(&output_path(&dir, 4, "sim", (2, 0), 2, false));
        std::fs::write(&pointer, own.as_os_str().as_encoded_bytes()).expect("pointer");
        std::fs::write(output_path(&dir, 4, "sim", (2, 0), 3, false), "done\n").expect("out");
        for (attempt, path) in [(1, &captured), (2, &own)] {
            let e = read(attempt).await.expect_err("a FIFO");
            assert_eq!(e.code(), tonic::Code::FailedPrecondition, "{e:?}");
            assert_eq!(
                e.message(),
                format!(
                    "`{}` is a FIFO, not a regular file: only regular files are served as task \
                     output",
                    path.display()
                )
            );
        }
        let r = read(3).await.expect("a file");
        assert_eq!(r.data, b"done\n");
    }

    /// Reads take turns, at most [`MAX_READS_IN_FLIGHT`] at once: one that finds none free
    /// within [`TURN_WAIT`] is refused as busy, saying to try again, instead of holding yet
    /// another thread of the agent's blocking pool; once a turn is free, reads are served.
    #[tokio::test]
    async fn a_read_finding_every_turn_taken_is_refused_as_busy() {
        let dir = ScratchDir::new("logs", "busy");
        let key = ("t".to_string(), 1, 0);
        let wd = crate::stream_workers::worker_dir(&dir, &key);
        std::fs::create_dir_all(&wd).expect("dir");
        std::fs::write(wd.join("worker.err"), "a warning\n").expect("err");
        let service = LogService::with_turns(&dir, LogKey::default(), 1);
        let ask = || pb::AgentLogRequest {
            topology: key.0.clone(),
            generation: 1,
            ..Default::default()
        };
        let held = service
            .turns
            .clone()
            .try_acquire_owned()
            .expect("the one turn");
        let e = service.worker_log(ask()).await.expect_err("busy");
        assert_eq!(e.code(), tonic::Code::ResourceExhausted, "{e:?}");
        assert!(
            e.message()
                .contains("is busy: all its 1 turns for reads of task output are taken; try again"),
            "{}",
            e.message()
        );
        drop(held);
        let r = service.worker_log(ask()).await.expect("served");
        assert_eq!(r.data, b"a warning\n");
    }

    /// A link in place of an output file is refused as such, with a code that says the agent
    /// answered (the server adds no network hint to it).
    #[test]
    fn an_output_file_replaced_by_a_link_is_refused_as_a_link() {
        let dir = ScratchDir::new("logs", "link");
        std::fs::write(dir.join("victim"), "secret\n").expect("victim");
        let link = dir.join("out.txt");
        std::os::unix::fs::symlink(dir.join("victim"), &link).expect("link");
        let e = page_reply(crate::workdir::euid(), &link, 0, 100).expect_err("a link");
        assert_eq!(e.code(), tonic::Code::FailedPrecondition, "{}", e.message());
        assert!(
            e.message().contains("is a symbolic link"),
            "{}",
            e.message()
        );
    }

    #[test]
    fn pages_come_from_an_offset_or_from_the_end_and_a_missing_file_is_empty() {
        let dir = ScratchDir::new("logs", "output");
        let p = output_path(&dir, 3, "app/../x", (2, 0), 1, true);
        assert!(p.starts_with(dir.join("job-3")), "{}", p.display());
        // The processes of a multi-process instance share its index, not its files.
        let (one, two) = (
            output_path(&dir, 3, "p", (2, 1), 1, false),
            output_path(&dir, 3, "p", (2, 2), 1, false),
        );
        assert_ne!(one, two);
        assert_eq!(one, dir.join("job-3/p-2-p1.1.out"));
        assert_eq!(
            output_path(&dir, 3, "p", (2, 0), 1, false),
            dir.join("job-3/p-2.1.out")
        );
        assert_eq!(read_page(&p, 0, 0).expect("read"), (vec![], 0, 0, false));
        std::fs::create_dir_all(p.parent().expect("parent")).expect("job dir");
        std::fs::write(&p, b"hello world").expect("write");
        assert_eq!(
            read_page(&p, 6, 0).expect("read"),
            (b"world".to_vec(), 6, 11, true)
        );
        assert_eq!(
            read_page(&p, -5, 3).expect("read"),
            (b"wor".to_vec(), 6, 11, true)
        );
        assert_eq!(read_page(&p, 99, 0).expect("read"), (vec![], 11, 11, true));
    }
    /// The agent's listeners read `authorization` as the server does (`pb::bearer_token`):
    /// the scheme in any case, spaces around; before, only `Bearer` and one space passed.
    #[test]
    fn the_token_check_reads_the_bearer_scheme_as_the_server_does() {
        use tonic::service::Interceptor;
        let mut check = check_token("t0k");
        let mut admits = |value: &str| {
            let mut r = Request::new(());
            r.metadata_mut()
                .insert(pb::AUTH_HEADER, value.parse().expect("ascii"));
            check.call(r).is_ok()
        };
        for value in ["Bearer t0k", "bearer t0k", "  BEARER  t0k  "] {
            assert!(admits(value), "{value:?}");
        }
        for value in ["Bearer t0", "Bearer t0kk", "Basic t0k", "t0k", "Bearer"] {
            assert!(!admits(value), "{value:?}");
        }
        assert!(check_token("t0k").call(Request::new(())).is_err(), "none");
    }

    /// Whether the listener at `addr` closes a connection that sends nothing within `within`.
    async fn closes_a_silent_connection(addr: SocketAddr, within: std::time::Duration) -> bool {
        use tokio::io::AsyncReadExt;
        let mut s = tokio::net::TcpStream::connect(addr).await.expect("connect");
        let mut buf = [0u8; 256];
        let started = tokio::time::Instant::now();
        loop {
            let left = within.saturating_sub(started.elapsed());
            match tokio::time::timeout(left, s.read(&mut buf)).await {
                Err(_) => return false,
                Ok(Ok(0) | Err(_)) => return true,
                Ok(Ok(_)) => {}
            }
        }
    }

    /// Every listener of an agent — log (plain and TLS), data (TLS) and accelerator — closes a
    /// connection that has not sent its greeting within the greeting timeout (10 s; short
    /// here). Before, one that sent nothing stayed open for good, so anyone who could reach an
    /// agent's port could exhaust its file descriptors.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn every_listener_closes_a_connection_that_does_not_greet_in_time() {
        let dir = ScratchDir::new("logs", "greeting");
        let limits = Limits {
            greeting: std::time::Duration::from_millis(300),
            max_connections: 16,
            ..Limits::AGENT
        };
        let within = std::time::Duration::from_secs(3);
        let any: SocketAddr = "127.0.0.1:0".parse().expect("addr");
        let key = rcgen::KeyPair::generate().expect("key");
        let cert = rcgen::CertificateParams::new(vec!["localhost".to_string()])
            .expect("params")
            .self_signed(&key)
            .expect("cert");
        let pem = || Some((cert.pem().into_bytes(), key.serialize_pem().into_bytes()));
        for tls in [None, pem()] {
            let l = LogListener::bind_limited(any, &dir, "t", LogKey::default(), tls, None, limits)
                .await
                .expect("log listener");
            assert!(
                closes_a_silent_connection(l.addr, within).await,
                "log listener"
            );
            l.stop().await;
        }
        let (cert_pem, key_pem) = pem().expect("pem");
        let service = crate::dataflow::DataService {
            work_dir: dir.to_path_buf(),
            balance: std::sync::Arc::default(),
            auth: crate::dataflow::PeerAuth::default(),
            wake: std::sync::Arc::default(),
            node: "a".into(),
            key: crate::dataflow::DataKey::default(),
        };
        let data = crate::dataflow::DataListener::bind_limited(
            any,
            service,
            "t",
            (cert_pem, key_pem),
            limits,
        )
        .await
        .expect("data listener");
        assert!(
            closes_a_silent_connection(data.addr, within).await,
            "data listener"
        );
        data.stop();
        let pipeline = crate::accel::Pipeline::start(
            "a",
            crate::launch::unnamed_devices(1),
            &dir,
            Default::default(),
            std::time::Duration::from_secs(1),
            false,
            Default::default(),
        )
        .expect("pipeline");
        let accel =
            crate::accel::service::AccelListener::bind_limited(any, pipeline, "t", None, limits)
                .await
                .expect("accelerator listener");
        assert!(
            closes_a_silent_connection(accel.addr, within).await,
            "accelerator listener"
        );
        accel.stop().await;
    }
}
