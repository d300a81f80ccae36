//! Runs one assigned task as a child process in its own process group: environment
//! (`CUDA_VISIBLE_DEVICES` = the assigned devices, numbered in PCI bus order as
//! `CUDA_DEVICE_ORDER=PCI_BUS_ID` tells CUDA; `HETSCHED_*`), working directory, stdout and
//! stderr captured to files; waits for it and reports the result. With `run_as_owner` a user's
//! task runs as the user's Unix account ([`crate::run_as`]).
//!
//! Stopping a task (a kill request, its time limit, its agent shutting down) is graceful, as
//! Slurm does it: the whole group gets SIGTERM (and SIGCONT, so that a stopped process sees it),
//! and SIGKILL only if the task's process is still there after the agent's kill grace — time to
//! write a checkpoint or remove temporary files. However the task's process ends, whatever it
//! left running in its group is SIGKILLed before the result is reported: a finished task leaves
//! nothing behind on the node (a process that made itself a new session has left the group and
//! is not found).
//!
//! The result says how the attempt ended (`TaskResult.end`): exited, killed by a signal it did
//! not get from the agent's stop (named in `signal`), its time or memory limit, a failure to
//! start, the server's kill or the agent's shutdown. A stop the agent made is said as the stop,
//! whatever the process then did on its SIGTERM (a handler that exits 0 is still a time limit).

use hetsched_proto as pb;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::sync::{mpsc, oneshot, watch};

/// Nanoseconds since the Unix epoch.
pub fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// An application name as one path component: the server refuses names with `/` or a leading
/// `.` at submission; this keeps an agent safe from a server that did not (older, or hostile).
pub(crate) fn component(name: &str) -> String {
    let s: String = name
        .chars()
        .map(|c| if c == '/' || c == '\0' { '_' } else { c })
        .collect();
    if s.is_empty() || s.starts_with('.') {
        format!("_{s}")
    } else {
        s
    }
}

/// Where a task's stdout and stderr go: `WORK_DIR/job-J/APP-INDEX.ATTEMPT.{out,err}`.
pub fn output_paths(
    work_dir: &Path,
    spec: &pb::TaskSpec,
    a: &pb::Assignment,
) -> (PathBuf, PathBuf) {
    let path = |stderr| {
        crate::logs::output_path(
            work_dir,
            spec.job_id,
            &spec.app,
            (a.index, a.process),
            a.attempt,
            stderr,
        )
    };
    (path(false), path(true))
}

/// Writes a multi-node task's node file, `WORK_DIR/job-J/APP-INDEX.ATTEMPT.nodes`: the host
/// names of its nodes, this one first, one per line (an MPI launcher's host file). Returns its
/// path.
fn write_node_file(
    work_dir: &Path,
    spec: &pb::TaskSpec,
    a: &pb::Assignment,
) -> std::io::Result<PathBuf> {
    use std::io::Write;
    let path = work_dir
        .join(format!("job-{}", spec.job_id))
        .join(node_file_name(spec, a));
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let mut f = crate::workdir::create_regular(&path, 0o600)?;
    for host in &a.hosts {
        writeln!(f, "{host}")?;
    }
    Ok(path)
}

/// A task's node file's name: `APP-INDEX.ATTEMPT.nodes`.
fn node_file_name(spec: &pb::TaskSpec, a: &pb::Assignment) -> String {
    format!("{}-{}.{}.nodes", component(&spec.app), a.index, a.attempt)
}

/// The directory a task runs in: its spec's `workdir` if that exists on this node (one its
/// application named, `workdir_required`, is checked before: the attempt fails without it), else
/// `work_dir` (the agent's work directory; for a task that runs as an account, the account's own
/// directory there, [`crate::run_as::area`]). Whether the `workdir` exists is looked up as
/// `account` (the one the task runs as, when it does): one the account cannot see is not on
/// this node for it ([`crate::run_as::is_dir_as`]).
pub fn task_cwd<'a>(
    work_dir: &'a Path,
    spec: &'a pb::TaskSpec,
    account: Option<&crate::run_as::Account>,
) -> &'a Path {
    let dir = Path::new(&spec.workdir);
    if !spec.workdir.is_empty() && crate::run_as::is_dir_as(account, dir) {
        dir
    } else {
        work_dir
    }
}

/// Where one of a task's output streams goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StreamTo {
    /// The agent's capture file ([`output_paths`]), created at the first byte.
    Captured(PathBuf),
    /// The file its application named (`stdout =`, `stderr =`; absolute), created empty when
    /// the task starts; the capture file's place holds a pointer to it ([`crate::logs`]).
    File(PathBuf),
    /// Nowhere (`"none"`).
    Discarded,
}

/// Where task `a` of `spec` sends its stdout and stderr: the spec's `stdout` and `stderr`
/// templates filled in for the task, relative ones from `cwd` (the task's directory), else the
/// capture files in `work_dir`.
pub fn stream_targets(
    work_dir: &Path,
    cwd: &Path,
    spec: &pb::TaskSpec,
    a: &pb::Assignment,
) -> [StreamTo; 2] {
    use hetsched_core::input::output_path::{DISCARD, Fill, expand};
    let (out, err) = output_paths(work_dir, spec, a);
    let fill = Fill {
        job: spec.job_id,
        app: &spec.app,
        index: a.index,
        task: a.task_id,
        attempt: a.attempt,
    };
    let to = |template: &str, captured: PathBuf| match template {
        "" => StreamTo::Captured(captured),
        DISCARD => StreamTo::Discarded,
        t => {
            let p = cwd.join(expand(t, &fill));
            StreamTo::File(std::path::absolute(&p).unwrap_or(p))
        }
    };
    [to(&spec.stdout, out), to(&spec.stderr, err)]
}

/// The pointer in a capture file's place to the file a stream went to instead: the capture
/// path with `.path` added. [`crate::logs`] follows it.
pub fn pointer_path(captured: &Path) -> PathBuf {
    let mut p = captured.as_os_str().to_owned();
    p.push(".path");
    PathBuf::from(p)
}

/// Creates (empty) the files of `targets` that are an application's, with their missing
/// directories, and leaves a pointer to each in its capture file's place (`captured`): what
/// Slurm does with `--output`, so that a task that prints nothing still leaves its file. Both
/// streams to one path share one file, as `2>&1` does. The opened files, stdout's then
/// stderr's (`None` for a stream not sent to a file).
pub fn open_stream_files(
    targets: &[StreamTo; 2],
    captured: [&Path; 2],
) -> Result<[Option<std::fs::File>; 2], String> {
    let mut files: [Option<std::fs::File>; 2] = [None, None];
    for k in 0..2 {
        let Some(file) = open_stream(targets, &files, k)? else {
            continue;
        };
        if let StreamTo::File(path) = &targets[k] {
            write_pointer(captured[k], path, None)
                .map_err(|e| format!("cannot record where its {} goes: {e}", STREAMS[k]))?;
        }
        files[k] = Some(file);
    }
    Ok(files)
}

/// The streams' names, stdout's then stderr's.
const STREAMS: [&str; 2] = ["stdout", "stderr"];

/// Creates (empty) the files of `targets` that are an application's, with their missing
/// directories, as [`open_stream_files`] does, without the pointers: run by the task's own
/// account ([`crate::run_as::hop`]), whose rights and ownership they then have.
pub fn open_streams(targets: &[StreamTo; 2]) -> Result<[Option<std::fs::File>; 2], String> {
    let mut files: [Option<std::fs::File>; 2] = [None, None];
    for k in 0..2 {
        files[k] = open_stream(targets, &files, k)?;
    }
    Ok(files)
}

/// Opens stream `k`'s file (`None` for a stream not sent to a file): the one stdout opened
/// (`files[0]`) when both name one file.
fn open_stream(
    targets: &[StreamTo; 2],
    files: &[Option<std::fs::File>; 2],
    k: usize,
) -> Result<Option<std::fs::File>, String> {
    let StreamTo::File(path) = &targets[k] else {
        return Ok(None);
    };
    // The same file however it is spelt (`a.log`, `./a.log`, a link to it): one shared
    // handle, else the second `create` would truncate what the first writes.
    let shared = match (k, &files[0]) {
        (1, Some(f)) if same_file(f.metadata(), std::fs::metadata(path)) => Some(f),
        _ => None,
    };
    // A regular file, or a device (`/dev/null`): a FIFO made there beforehand would hold the
    // open (and this thread) until something read it, so it is refused, as anything else is
    // (`workdir::create_users`), and the attempt fails to start saying so.
    match shared {
        Some(f) => f.try_clone(),
        None => path
            .parent()
            .map_or(Ok(()), std::fs::create_dir_all)
            .and_then(|()| crate::workdir::create_users(path)),
    }
    .map(Some)
    .map_err(|e| match crate::workdir::not_regular(&e) {
        Some(n) => format!(
            "its {} file `{}` is {}, not a regular file: task output is written only to a \
             regular file (or a device, such as `/dev/null`)",
            STREAMS[k],
            path.display(),
            n.what
        ),
        None => format!(
            "cannot open its {} file `{}`: {e}",
            STREAMS[k],
            path.display()
        ),
    })
}

/// Leaves the pointers to the application's files of `targets` in their capture files' places
/// (`captured`), owned by `account` when given: [`crate::logs`] then opens the file as that
/// account.
pub fn write_pointers(
    targets: &[StreamTo; 2],
    captured: [&Path; 2],
    account: Option<&crate::run_as::Account>,
) -> Result<(), String> {
    for k in 0..2 {
        if let StreamTo::File(path) = &targets[k] {
            write_pointer(captured[k], path, account)
                .map_err(|e| format!("cannot record where its {} goes: {e}", STREAMS[k]))?;
        }
    }
    Ok(())
}

/// Whether two files' metadata name one file (device and inode); an unreadable one names none.
pub(crate) fn same_file(
    a: std::io::Result<std::fs::Metadata>,
    b: std::io::Result<std::fs::Metadata>,
) -> bool {
    use std::os::unix::fs::MetadataExt;
    matches!((a, b), (Ok(a), Ok(b)) if a.dev() == b.dev() && a.ino() == b.ino())
}

/// Writes the pointer to `target` in `captured`'s place (not through a symbolic link), owned by
/// `account` when given.
fn write_pointer(
    captured: &Path,
    target: &Path,
    account: Option<&crate::run_as::Account>,
) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::ffi::OsStrExt;
    if let Some(dir) = captured.parent() {
        std::fs::create_dir_all(dir)?;
    }
    // The agent's work directory: a regular file there, or nothing (`create_regular`).
    let mut f = crate::workdir::create_regular(&pointer_path(captured), 0o666)?;
    if let Some(a) = account {
        a.give(&f)?;
    }
    f.write_all(target.as_os_str().as_bytes())
}

/// How long a task asked to stop has between SIGTERM and SIGKILL when the agent's configuration
/// says nothing (`kill_grace`). Slurm's `KillWait` is 30 s; HyperQueue sends SIGINT and waits 1 s.
/// Long enough for a program to save its state, short enough that a cancelled task frees its
/// cores soon.
pub const DEFAULT_KILL_GRACE: Duration = Duration::from_secs(10);

/// The longest kill grace an agent accepts: a cancelled task's cores stay taken that long, and a
/// shutting-down agent may wait that long.
pub const MAX_KILL_GRACE: Duration =
    Duration::from_nanos(hetsched_core::input::limits::MAX_KILL_GRACE);

/// Sends `signal` to process group `pgid` (a task's group: its id is its first process's pid);
/// whether a process received it. Groups 0 and 1 (the caller's own, init's) are never signalled.
pub(crate) fn signal_group(pgid: u32, signal: nix::sys::signal::Signal) -> bool {
    match i32::try_from(pgid) {
        Ok(p) if p > 1 => nix::sys::signal::killpg(nix::unistd::Pid::from_raw(p), signal).is_ok(),
        _ => false,
    }
}

/// Why a running task is killed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kill {
    /// The server asked (cancelled, or no longer this node's).
    Server,
    /// The agent is shutting down: the result says `interrupted`, and the server runs the task
    /// again elsewhere instead of counting a failure.
    Shutdown,
}

/// What the agent may tell a running task: to stop (`kill`), and, where `limit` is given, a new
/// time limit in ms (0: none), counted from its start (`hetsched update --time-limit` on a
/// running task; the server's `Respec`), and, where `signals` is given, signals for its
/// process group (`hetsched signal`).
pub struct Control {
    /// Stops the task.
    pub kill: oneshot::Receiver<Kill>,
    /// Its time limit from now on; absent: the spec's for the task's life.
    pub limit: Option<watch::Receiver<u64>>,
    /// Signals an operator sends it; absent: none.
    pub signals: Option<mpsc::UnboundedReceiver<nix::sys::signal::Signal>>,
}

impl From<oneshot::Receiver<Kill>> for Control {
    fn from(kill: oneshot::Receiver<Kill>) -> Self {
        Control {
            kill,
            limit: None,
            signals: None,
        }
    }
}

/// The next signal `signals` gives; never resolves without a sender or a receiver.
pub(crate) async fn next_signal(
    signals: &mut Option<mpsc::UnboundedReceiver<nix::sys::signal::Signal>>,
) -> nix::sys::signal::Signal {
    match signals.as_mut() {
        Some(rx) => match rx.recv().await {
            Some(s) => s,
            None => std::future::pending().await,
        },
        None => std::future::pending().await,
    }
}

/// The next time limit `limit` is given (ms), or `None` once nobody can give one; never
/// resolves without a receiver.
pub(crate) async fn next_limit(limit: &mut Option<watch::Receiver<u64>>) -> Option<u64> {
    match limit.as_mut() {
        Some(rx) => match rx.changed().await {
            Ok(()) => Some(*rx.borrow_and_update()),
            Err(_) => None,
        },
        None => std::future::pending().await,
    }
}

/// A signal a task's processes get before its time limit (the spec's `warn_signal`, Slurm's
/// `--signal`): `before` its limit, once per limit (a limit changed later warns again).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Warning {
    /// The signal.
    pub signal: nix::sys::signal::Signal,
    /// How long before the limit.
    pub before: Duration,
}

impl Warning {
    /// The spec's warning, if it names one: `None` for none, and for a name this system does not
    /// know (the server sends only the names a job file's `signal =` accepts).
    pub fn of(spec: &pb::TaskSpec) -> Option<Warning> {
        if spec.warn_signal.is_empty() {
            return None;
        }
        let signal = format!("SIG{}", spec.warn_signal).parse().ok()?;
        Some(Warning {
            signal,
            before: Duration::from_millis(spec.warn_before_ms),
        })
    }
}

/// Resolves with the limit (ms) once a task started at `began` has run for its time limit:
/// `ms` at first (0: none), then each limit `limit` gives. Meanwhile `warn` calls `signal` with
/// its signal when the limit is its `before` away (at once, when it is nearer already), once
/// per limit.
async fn time_limit(
    began: tokio::time::Instant,
    mut ms: u64,
    mut limit: Option<watch::Receiver<u64>>,
    warn: Option<Warning>,
    signal: impl Fn(nix::sys::signal::Signal),
) -> u64 {
    // The limit whose warning was sent.
    let mut warned: Option<u64> = None;
    loop {
        let end = began + Duration::from_millis(ms);
        let passed = async {
            match ms {
                0 => std::future::pending().await,
                _ => tokio::time::sleep_until(end).await,
            }
        };
        let warning = async {
            match warn {
                Some(w) if ms > 0 && warned != Some(ms) => {
                    let at = end.checked_sub(w.before).unwrap_or(began).max(began);
                    tokio::time::sleep_until(at).await;
                    w.signal
                }
                _ => std::future::pending().await,
            }
        };
        tokio::select! {
            biased;
            () = passed => return ms,
            sig = warning => {
                signal(sig);
                warned = Some(ms);
            }
            next = next_limit(&mut limit) => match next {
                Some(next) => ms = next,
                None => limit = None,
            },
        }
    }
}

/// How a task's process came to an end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ended {
    /// By itself.
    Exited,
    /// Killed on a request.
    Killed(Kill),
    /// Killed when its time limit (ms) passed.
    TimedOut(u64),
    /// Killed when its process tree held more resident memory (bytes) than the task declared.
    OverMemory(u64),
}

/// Each accelerator's name in `CUDA_VISIBLE_DEVICES`, by the agent's device index
/// ([`crate::detect::Resources::device_names`]).
pub type DeviceNames = std::sync::Arc<[Option<String>]>;

/// `count` devices known by their indices alone.
pub fn unnamed_devices(count: u32) -> DeviceNames {
    vec![None; count as usize].into()
}

/// `CUDA_VISIBLE_DEVICES` for a task given `devices` (the agent's indices): each device's
/// name where `names` gives one (a MIG instance's `MIG-…` UUID: CUDA sees a MIG instance only
/// by it), else its index.
pub fn cuda_visible(devices: &[u32], names: &[Option<String>]) -> String {
    devices
        .iter()
        .map(|&d| match names.get(d as usize) {
            Some(Some(name)) => name.clone(),
            _ => d.to_string(),
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// Runs `a`, a task of `spec`, to the end; `on_spawn` receives the child's pid. `{index}` in the
/// spec's arguments becomes the task's index and then `{entry}` its entry (an application with
/// `entries`; the entry is inserted as it is), and the task gets the `HETSCHED_*` variables and
/// `CUDA_VISIBLE_DEVICES` (its devices by `device_names`, [`cuda_visible`]). Its files go below
/// `work_dir` (the agent's work directory; an ANode's staging directory for an offloaded task);
/// it carries the mark of `agent_dir`, the agent's work directory ([`crate::marker`]).
/// A kill request or the time limit (the spec's, or one `control` gives later) stops it with
/// SIGTERM, then SIGKILL after the spec's `kill_grace_ms` or, without one, `grace` (the agent's).
#[allow(clippy::too_many_arguments)]
pub async fn run(
    a: &pb::Assignment,
    spec: &pb::TaskSpec,
    device_names: &[Option<String>],
    node: &str,
    work_dir: &Path,
    agent_dir: &Path,
    control: impl Into<Control>,
    grace: Duration,
    run_as_owner: bool,
    on_spawn: impl FnOnce(u32),
) -> pb::TaskResult {
    let Control {
        mut kill,
        limit,
        mut signals,
    } = control.into();
    let started = now_ns();
    let grace = match spec.kill_grace_ms {
        0 => grace,
        ms => Duration::from_millis(ms).min(MAX_KILL_GRACE),
    };
    let mut result = pb::TaskResult {
        task_id: a.task_id,
        attempt: a.attempt,
        exit_code: -1,
        message: String::new(),
        started_ns: started,
        finished_ns: 0,
        success: false,
        interrupted: false,
        start_failed: false,
        usage: None,
        offload_started_ns: 0,
        offload_devices: Vec::new(),
        fetch_ms: 0,
        // Each way out below says how it ended; a failure of the agent's own (an output it
        // could not capture) is not said.
        end: pb::TaskEnd::Unsaid.into(),
        signal: String::new(),
    };
    let fail = |mut r: pb::TaskResult, m: String| {
        r.message = m;
        r.finished_ns = now_ns();
        r
    };
    // What the task needs to start was not there: it never ran, so it printed nothing (a
    // read of its output says so, not that the output is gone: `ran`).
    let record = crate::ran::Attempt::of(work_dir, spec, a);
    let not_started = |mut r: pb::TaskResult, m: String| {
        record.never_started();
        r.start_failed = true;
        r.set_end(pb::TaskEnd::StartFailed);
        fail(r, m)
    };
    let index = a.index.to_string();
    let argv: Vec<String> = spec
        .argv
        .iter()
        .map(|x| {
            let x = x.replace("{index}", &index);
            match &a.entry {
                Some(entry) => x.replace("{entry}", entry),
                None => x,
            }
        })
        .collect();
    let Some(program) = argv.first() else {
        // Nothing to run (not the node's fault, so not `start_failed`, which backs it off).
        result.set_end(pb::TaskEnd::StartFailed);
        return fail(result, "the assignment has no command".into());
    };
    // `run_as_owner`: the account the task runs as (none: the agent's own user, as for the
    // admin's jobs, and on an agent without the setting).
    let account = match crate::run_as::resolve(run_as_owner, &spec.run_as, node).await {
        Ok(account) => account,
        Err(e) => return not_started(result, e.to_string()),
    };
    let area = match &account {
        None => None,
        Some(acc) => match crate::run_as::area(work_dir, acc) {
            Ok(dir) => Some(dir),
            Err(e) => {
                return not_started(
                    result,
                    format!(
                        "node {node}: the directory of account `{}` in the work directory: {e}",
                        acc.name
                    ),
                );
            }
        },
    };
    if spec.workdir_required
        && !crate::run_as::is_dir_as(account.as_ref(), Path::new(&spec.workdir))
    {
        // Its application named the directory: running it elsewhere would write its files
        // where no one looks (Slurm fails a job whose `--chdir` is missing the same way). As
        // the account: one it cannot see is missing for it, whatever root would find there.
        return not_started(
            result,
            format!(
                "node {node}: its application's workdir `{}` is not a directory on this node",
                spec.workdir
            ),
        );
    }
    let (out, err) = output_paths(work_dir, spec, a);
    // An account's task whose directory is not on this node runs in the account's own.
    let cwd = task_cwd(area.as_deref().unwrap_or(work_dir), spec, account.as_ref());
    let targets = stream_targets(work_dir, cwd, spec, a);
    let stdio = |target: &StreamTo, file: Option<std::fs::File>| match (target, file) {
        (StreamTo::Captured(_), _) => Stdio::piped(),
        (StreamTo::File(_), Some(f)) => Stdio::from(f),
        _ => Stdio::null(),
    };
    // A multi-node task: its nodes' host names, this node first, for an MPI launcher. An
    // account's is in the account's directory, written by the account when its task starts.
    let hosts: String = a.hosts.iter().map(|h| format!("{h}\n")).collect();
    let node_file = match (&area, a.hosts.is_empty()) {
        (_, true) => None,
        (Some(area), false) => {
            Some(area.join(format!("job-{}-{}", spec.job_id, node_file_name(spec, a))))
        }
        (None, false) => match write_node_file(work_dir, spec, a) {
            Ok(path) => Some(path),
            Err(e) => {
                return not_started(result, format!("cannot write the task's node file: {e}"));
            }
        },
    };
    let visible = cuda_visible(&a.devices, device_names);
    let mut cmd = tokio::process::Command::new(program);
    if let Some(acc) = &account {
        // First (it clears the environment): none of the agent's (root's); the job's own
        // environment and ours are set after it, and win.
        acc.environment(&mut cmd);
    }
    if let Some(path) = &node_file {
        let cores: Vec<String> = a.node_cores.iter().map(u32::to_string).collect();
        let total: u64 = a.node_cores.iter().map(|&c| u64::from(c)).sum();
        cmd.env("HETSCHED_NODE_FILE", path)
            .env("HETSCHED_NODES", a.node_names.join(","))
            .env("HETSCHED_NUM_NODES", a.hosts.len().to_string())
            .env("HETSCHED_NODE_CORES", cores.join(","))
            .env("HETSCHED_TOTAL_CORES", total.to_string());
    }
    cmd.args(&argv[1..])
        .envs(&spec.env)
        .env("HETSCHED_JOB_ID", spec.job_id.to_string())
        .env("HETSCHED_APP", &spec.app)
        .env("HETSCHED_TASK_ID", a.task_id.to_string())
        .env("HETSCHED_TASK_INDEX", &index)
        .env("HETSCHED_ATTEMPT", a.attempt.to_string())
        .env("HETSCHED_VARIANT", &spec.variant)
        .env("HETSCHED_NODE", node)
        // The cores it holds on this node (Slurm's `SLURM_CPUS_PER_TASK`), pinned or not; not
        // said by servers that predate `Assignment.cores`.
        .envs((a.cores > 0).then(|| ("HETSCHED_CORES", a.cores.to_string())))
        .env("CUDA_VISIBLE_DEVICES", visible)
        // After the job's environment: a job cannot unmark its processes, nor mark them as
        // another agent's.
        .env(crate::marker::VAR, agent_dir)
        // The device numbers are NVML's (`detect::Gpus`), which counts in PCI bus order; CUDA
        // counts fastest first unless told otherwise, so on a node with GPUs of two models
        // device 0 would be the other card. Set after the job's environment: the numbers are
        // the agent's, so their order is too.
        .env("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
        .envs(a.entry.as_ref().map(|e| ("HETSCHED_ENTRY", e)))
        // A workflow instance's rank among the processes of its argument value (`processes = N`).
        .envs((a.process > 0).then(|| ("HETSCHED_PROCESS", a.process.to_string())))
        .current_dir(cwd)
        .stdin(Stdio::null())
        .process_group(0);
    // Spawned with std's `Command` and reaped by `usage::Process` (with its rusage), not by
    // tokio; the process is SIGKILLed if the run is abandoned.
    let spawned = if run_as_owner {
        // The pointers first (the agent's, in its work directory); then, on a thread that has
        // become the account (with the tasks' umask), the task's own files and its process.
        match write_pointers(&targets, [&out, &err], account.as_ref()) {
            Err(m) => Err(m),
            Ok(()) => crate::run_as::hop(account.as_ref(), || {
                if let (Some(_), Some(path)) = (&account, &node_file) {
                    std::fs::write(path, &hosts)
                        .map_err(|e| format!("cannot write the task's node file: {e}"))?;
                }
                let [out_file, err_file] = open_streams(&targets)?;
                cmd.stdout(stdio(&targets[0], out_file))
                    .stderr(stdio(&targets[1], err_file));
                cmd.as_std_mut().spawn().map_err(|e| match &account {
                    Some(acc) => format!(
                        "cannot start `{program}` as `{}` in {}: {e}",
                        acc.name,
                        cwd.display()
                    ),
                    None => format!("cannot start `{program}`: {e}"),
                })
            })
            .unwrap_or_else(|e| Err(format!("node {node}: {e}"))),
        }
    } else {
        open_stream_files(&targets, [&out, &err]).and_then(|[out_file, err_file]| {
            cmd.stdout(stdio(&targets[0], out_file))
                .stderr(stdio(&targets[1], err_file));
            cmd.as_std_mut()
                .spawn()
                .map_err(|e| format!("cannot start `{program}`: {e}"))
        })
    };
    // The account's node file goes with the task (the agent's stays with its outputs).
    let node_file = node_file.filter(|_| account.is_some());
    let mut child = match spawned {
        Ok(c) => c,
        Err(m) => {
            if let Some(path) = &node_file {
                let _ = std::fs::remove_file(path);
            }
            return not_started(result, m);
        }
    };
    // From now on a missing capture file is a task that has printed nothing yet, not output
    // that is gone (`ran`).
    record.started();
    let pipes = (child.stdout.take(), child.stderr.take());
    let mut process = crate::usage::Process::new(child);
    let pid = Some(process.id());
    if let Some(pid) = pid {
        on_spawn(pid);
    }
    // Watches the process until it exits, leaving it unreaped so that its counters can be read.
    // A GPU task's watch samples its devices' memory too (NVML loaded by the first).
    let mut watch = pid
        .and_then(|p| crate::usage::Watch::new(p, spec.memory_limit_bytes))
        .map(|w| {
            if a.devices.is_empty() {
                w
            } else {
                w.with_gpu_memory(&a.devices, crate::usage::nvml_processes(device_names))
            }
        });
    let drains = match (
        pipes
            .0
            .map(tokio::process::ChildStdout::from_std)
            .transpose(),
        pipes
            .1
            .map(tokio::process::ChildStderr::from_std)
            .transpose(),
    ) {
        (Ok(o), Ok(e)) => [
            // (Cloned: the record of its end looks for the pointers in their places.)
            o.map(|s| tokio::spawn(drain(s, out.clone()))),
            e.map(|s| tokio::spawn(drain(s, err.clone()))),
        ],
        // (The process is SIGKILLed and reaped as `process` is dropped.)
        (Err(e), _) | (_, Err(e)) => return fail(result, format!("capturing output: {e}")),
    };
    // The warning signal once sent: a task that does not handle it dies of it (most signals'
    // default), and its result then says so rather than look like a stray `kill`.
    // (Its number; 0: not sent.)
    let warned_with = std::sync::atomic::AtomicI32::new(0);
    let warn_group = |signal: nix::sys::signal::Signal| {
        warned_with.store(signal as i32, std::sync::atomic::Ordering::Relaxed);
        if let Some(p) = pid {
            tracing::debug!(pid = p, ?signal, "the time limit nears: the task is warned");
            signal_group(p, signal);
        }
    };
    // (In a block: the futures borrow the process until it ended.)
    let ended = {
        let timer = time_limit(
            tokio::time::Instant::now(),
            spec.time_limit_ms,
            limit,
            Warning::of(spec),
            warn_group,
        );
        let exited = async {
            match watch.as_mut() {
                Some(w) => match w.exited().await {
                    crate::usage::Exit::Exited => Ended::Exited,
                    crate::usage::Exit::OverMemory(bytes) => Ended::OverMemory(bytes),
                },
                // Unwatched: waited for, not reaped.
                None => {
                    process.exited().await;
                    Ended::Exited
                }
            }
        };
        tokio::pin!(exited, timer);
        // A kill sender dropped unused (a oneshot must not be polled again once it answered).
        let mut kill_open = true;
        loop {
            tokio::select! {
                e = &mut exited => break e,
                why = &mut kill, if kill_open => match why {
                    Ok(why) => break Ended::Killed(why),
                    Err(_) => kill_open = false,
                },
                ms = &mut timer => break Ended::TimedOut(ms),
                // Only while the process is not reaped: its group's id is still its own.
                signal = next_signal(&mut signals) => {
                    if let Some(p) = pid {
                        tracing::debug!(pid = p, ?signal, "an operator's signal for the task");
                        signal_group(p, signal);
                    }
                }
            }
        }
    };
    // Whether the task outlived its grace and was SIGKILLed.
    let mut forced = false;
    if ended != Ended::Exited {
        use nix::sys::signal::Signal;
        let group = |signal| pid.is_some_and(|p| signal_group(p, signal));
        group(Signal::SIGTERM);
        group(Signal::SIGCONT);
        let gone = match watch.as_mut() {
            Some(w) => tokio::time::timeout(grace, w.exited()).await.is_ok(),
            None => tokio::time::timeout(grace, process.exited()).await.is_ok(),
        };
        if !gone {
            forced = true;
            group(Signal::SIGKILL);
            // Still measured, once the group's leader has exited.
            if let Some(w) = watch.as_mut() {
                w.exited().await;
            }
        }
    }
    // What the task left running in its group. While the leader is unreaped (until `reap`): it
    // keeps the group's id from being given to a new process group.
    if let Some(pid) = pid {
        signal_group(pid, nix::sys::signal::Signal::SIGKILL);
    }
    result.usage = watch.as_ref().and_then(crate::usage::Watch::usage);
    // Reaped here, with its rusage: its peak memory is at least `ru_maxrss` (a task too short
    // for a sample has no other figure).
    let status = process.reap().await.map(|(status, max_rss)| {
        if let Some(u) = result.usage.as_mut() {
            u.max_rss_bytes = u.max_rss_bytes.max(max_rss);
        }
        status
    });
    let forced = if forced {
        format!("; SIGKILLed after ignoring SIGTERM for {}", humanize(grace))
    } else {
        String::new()
    };
    match ended {
        Ended::Exited => match status {
            Ok(s) => {
                result.exit_code = s.code().unwrap_or(-1);
                result.success = s.success();
                // The shell's "cannot execute" (126) and "command not found" (127).
                result.start_failed = matches!(result.exit_code, 126 | 127);
                result.set_end(match s.code() {
                    _ if result.start_failed => pb::TaskEnd::StartFailed,
                    Some(_) => pb::TaskEnd::Exited,
                    None => pb::TaskEnd::Signalled,
                });
                if let Some(n) = std::os::unix::process::ExitStatusExt::signal(&s) {
                    result.signal = signal_name(n);
                }
                if !s.success() {
                    result.message = format!("exited with {s}");
                }
                if let Some(n) = std::os::unix::process::ExitStatusExt::signal(&s)
                    && n == warned_with.load(std::sync::atomic::Ordering::Relaxed)
                {
                    result.message.push_str(&format!(
                        ": the warning signal it was sent {} before its time limit, which it \
                         does not handle (a `trap` does; Slurm's `--signal`)",
                        humanize(Duration::from_millis(spec.warn_before_ms))
                    ));
                }
            }
            Err(e) => result.message = format!("wait: {e}"),
        },
        Ended::Killed(why) => {
            result.message = match why {
                Kill::Server => {
                    result.set_end(pb::TaskEnd::Killed);
                    format!("killed at the server's request{forced}")
                }
                Kill::Shutdown => {
                    result.interrupted = true;
                    result.set_end(pb::TaskEnd::Interrupted);
                    format!("{}{forced}", hetsched_proto::SHUTDOWN_KILLED)
                }
            };
        }
        Ended::TimedOut(ms) => {
            result.set_end(pb::TaskEnd::TimeLimit);
            result.message = format!("{}{forced}", time_limit_exceeded(Duration::from_millis(ms)));
        }
        Ended::OverMemory(bytes) => {
            result.set_end(pb::TaskEnd::MemoryLimit);
            result.message = format!(
                "memory limit of {} exceeded: its processes held {}{forced}",
                bytesize::ByteSize(spec.memory_limit_bytes),
                bytesize::ByteSize(bytes)
            );
        }
    }
    // The pipes close when the process group ends; a process that left the group (a new
    // session) and keeps them open is not waited for long.
    for d in drains.into_iter().flatten() {
        let abort = d.abort_handle();
        match tokio::time::timeout(Duration::from_secs(2), d).await {
            Ok(Ok(Err(e))) if result.message.is_empty() => {
                result.message = format!("capturing output: {e}");
            }
            Ok(_) => {}
            Err(_) => abort.abort(),
        }
    }
    if let Some(path) = node_file {
        let _ = std::fs::remove_file(path);
    }
    record.ended(&targets, [&out, &err]);
    result.finished_ns = now_ns();
    result
}

/// Signal `n`'s name without `SIG` (`SEGV`; a real-time one as `RTMIN+K`), as
/// `TaskResult.signal` says it; empty for a number with no name.
pub(crate) fn signal_name(n: i32) -> String {
    use nix::sys::signal::Signal;
    if let Ok(s) = Signal::try_from(n) {
        let name = s.as_str();
        return name.strip_prefix("SIG").unwrap_or(name).to_string();
    }
    let (min, max) = (nix::libc::SIGRTMIN(), nix::libc::SIGRTMAX());
    if (min..=max).contains(&n) {
        format!("RTMIN+{}", n - min)
    } else {
        String::new()
    }
}

/// Copies a task's output stream to `path`, creating the file (mode 0600, and its directory)
/// only when the first byte arrives: most short tasks print nothing, and creating two files per
/// task dominated the agent's cost of running them.
async fn drain(
    mut stream: impl tokio::io::AsyncRead + Unpin,
    path: PathBuf,
) -> std::io::Result<()> {
    use std::io::Write;
    use tokio::io::AsyncReadExt;
    let mut buf = vec![0u8; 16 * 1024];
    let mut file: Option<std::fs::File> = None;
    loop {
        let n = stream.read(&mut buf).await?;
        if n == 0 {
            return Ok(());
        }
        let f = match &mut file {
            Some(f) => f,
            None => {
                if let Some(dir) = path.parent() {
                    std::fs::create_dir_all(dir)?;
                }
                // Private to the agent's user (0600): what a task prints may be its data.
                file.insert(crate::workdir::open_no_follow(&path, true)?)
            }
        };
        f.write_all(&buf[..n])?;
    }
}

fn humanize(d: Duration) -> String {
    format!("{:.3}s", d.as_secs_f64())
}

/// Why a task or a divisible chunk was stopped at its time limit `limit`: `time limit of
/// 1.500s exceeded`, one wording for both ([`crate::divisible`]), which users and scripts match.
pub(crate) fn time_limit_exceeded(limit: Duration) -> String {
    format!("time limit of {} exceeded", humanize(limit))
}

#[cfg(test)]
mod tests {
    use super::*;
    use hetsched_core::testkit::ScratchDir;

    #[test]
    fn a_task_sees_its_devices_by_their_declared_names_else_by_index() {
        let names = [Some("MIG-a".to_string()), None, Some("MIG-c".to_string())];
        assert_eq!(cuda_visible(&[2, 0], &names), "MIG-c,MIG-a");
        assert_eq!(cuda_visible(&[1], &names), "1");
        // Devices past the list (detected ones) keep their index.
        assert_eq!(cuda_visible(&[0, 5], &names[..1]), "MIG-a,5");
        assert_eq!(cuda_visible(&[], &names), "");
    }

    #[tokio::test]
    async fn a_task_carries_its_agents_mark_which_its_job_cannot_set() {
        let dir = test_dir("mark");
        let agent_dir = dir.join("agent");
        let (a, mut spec) = task(&dir, r#"echo "$HETSCHED_AGENT_WORK_DIR" > "$D/mark""#, 0);
        spec.env
            .insert(crate::marker::VAR.into(), "/elsewhere".into());
        let (_tx, rx) = oneshot::channel();
        let r = run(
            &a,
            &spec,
            &[],
            "n",
            &dir,
            &agent_dir,
            rx,
            Duration::from_secs(1),
            false,
            |_| {},
        )
        .await;
        assert!(r.success, "{}", r.message);
        assert_eq!(
            std::fs::read_to_string(dir.join("mark")).expect("the task wrote its mark"),
            format!("{}\n", agent_dir.display())
        );
    }

    /// A fresh directory for one test, given to its script as `$D`.
    fn test_dir(name: &str) -> ScratchDir {
        ScratchDir::new("launch", name)
    }

    fn task(dir: &Path, script: &str, time_limit_ms: u64) -> (pb::Assignment, pb::TaskSpec) {
        let spec = pb::TaskSpec {
            job_id: 1,
            app: "app".into(),
            argv: vec!["sh".into(), "-c".into(), script.into()],
            env: [("D".to_string(), dir.display().to_string())].into(),
            time_limit_ms,
            ..Default::default()
        };
        (
            pb::Assignment {
                task_id: 1,
                attempt: 1,
                ..Default::default()
            },
            spec,
        )
    }

    /// Waits until the script has written `$D/started` (its trap is set by then).
    async fn started(dir: &Path) {
        for _ in 0..500 {
            if dir.join("started").exists() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("the task did not start");
    }

    /// Runs the task in `dir` and, once it has started, asks it to stop.
    async fn run_and_kill(dir: &Path, script: &str, grace: Duration) -> pb::TaskResult {
        let (a, spec) = task(dir, script, 0);
        let (tx, rx) = oneshot::channel();
        let run = run_by_agent(&a, &spec, dir, rx, grace);
        let kill = async {
            started(dir).await;
            let _ = tx.send(Kill::Server);
            std::future::pending::<()>().await
        };
        tokio::select! {
            r = run => r,
            () = kill => unreachable!(),
        }
    }

    /// Whether process `pid` is gone: no longer listed, or a zombie waiting for its new parent.
    fn gone(pid: u32) -> bool {
        std::fs::read_to_string(format!("/proc/{pid}/stat")).map_or(true, |s| {
            s.rsplit(')')
                .next()
                .is_some_and(|f| f.trim_start().starts_with('Z'))
        })
    }

    /// A time limit (ms) that a task's shell has set its `trap` well within, and that a change
    /// of limit sent at 0.1 s reaches well within, even on a loaded machine (where starting a
    /// process, or the test's runtime getting a CPU again, can take a few hundred
    /// milliseconds): a shell that gets SIGTERM before its `trap` ends without running its
    /// handler or ignoring it. 200 and 300 ms limits made these tests depend on the machine's
    /// load.
    const LIMIT_MS: u64 = 1_000;

    /// [`LIMIT_MS`] as results word it.
    fn limit_words() -> String {
        humanize(Duration::from_millis(LIMIT_MS))
    }

    const SAVES_ON_TERM: &str = r#"trap 'echo saved > "$D/saved"; exit 0' TERM; echo > "$D/started"; for i in $(seq 600); do sleep 0.05; done"#;

    /// Runs `a` by `spec` on node `n` as the agent's own user (no `run_as_owner`), noting no
    /// pid: how most tests start a task.
    async fn run_by_agent(
        a: &pb::Assignment,
        spec: &pb::TaskSpec,
        dir: &Path,
        control: impl Into<Control>,
        grace: Duration,
    ) -> pb::TaskResult {
        run(a, spec, &[], "n", dir, dir, control, grace, false, |_| {}).await
    }

    /// A workdir its application named that is not on the node fails the attempt before the
    /// command runs, naming it (a failure to start); the directory the job was submitted from,
    /// missing, falls back to the agent's work directory.
    #[tokio::test]
    async fn a_named_workdir_missing_on_the_node_fails_the_attempt_and_a_submit_dir_falls_back() {
        let dir = test_dir("workdir");
        let (a, mut spec) = task(&dir, "pwd > \"$D/ran-in\"", 0);
        spec.workdir = dir.join("nowhere").display().to_string();
        spec.workdir_required = true;
        let (_tx, rx) = oneshot::channel::<Kill>();
        let r = run_by_agent(&a, &spec, &dir, rx, Duration::from_secs(1)).await;
        assert!(!r.success && r.start_failed, "{r:?}");
        assert_eq!(r.end(), pb::TaskEnd::StartFailed, "{r:?}");
        assert!(
            r.message.contains("workdir `") && r.message.contains("nowhere` is not a directory"),
            "{r:?}"
        );
        assert!(!dir.join("ran-in").exists(), "the command did not run");
        spec.workdir_required = false;
        let (_tx, rx) = oneshot::channel::<Kill>();
        let r = run_by_agent(&a, &spec, &dir, rx, Duration::from_secs(1)).await;
        assert!(r.success, "{r:?}");
        let ran_in = std::fs::read_to_string(dir.join("ran-in")).expect("ran");
        assert_eq!(Path::new(ran_in.trim()), dir.canonicalize().expect("dir"));
    }

    /// How each attempt ended is said (`TaskResult.end`): a signal it got by itself with the
    /// signal's name, an exit with its code, a program that is not there as a failure to
    /// start, whether the spawn fails or the shell says 127.
    #[tokio::test]
    async fn the_result_says_how_the_attempt_ended_a_signal_by_its_name() {
        let scratch = test_dir("ends");
        let dir: &Path = &scratch;
        let ended = |script: &str| {
            let (a, spec) = task(dir, script, 0);
            async move {
                let (_tx, rx) = oneshot::channel::<Kill>();
                let r = run_by_agent(&a, &spec, dir, rx, Duration::from_secs(5)).await;
                (r.end(), r.signal.clone(), r.exit_code, r.success)
            }
        };
        assert_eq!(
            ended("kill -SEGV $$").await,
            (pb::TaskEnd::Signalled, "SEGV".into(), -1, false)
        );
        assert_eq!(
            ended("exit 3").await,
            (pb::TaskEnd::Exited, String::new(), 3, false)
        );
        assert_eq!(
            ended("true").await,
            (pb::TaskEnd::Exited, String::new(), 0, true)
        );
        assert_eq!(
            ended("no-such-program-here").await,
            (pb::TaskEnd::StartFailed, String::new(), 127, false)
        );
        let (a, mut spec) = task(dir, "", 0);
        spec.argv = vec![dir.join("no-such-program").display().to_string()];
        let (_tx, rx) = oneshot::channel::<Kill>();
        let r = run_by_agent(&a, &spec, dir, rx, Duration::from_secs(5)).await;
        assert!(r.start_failed && !r.success, "{r:?}");
        assert_eq!(r.end(), pb::TaskEnd::StartFailed, "{r:?}");
    }

    #[test]
    fn signals_are_named_without_sig_and_real_time_ones_by_their_offset() {
        assert_eq!(signal_name(11), "SEGV");
        assert_eq!(signal_name(9), "KILL");
        assert_eq!(signal_name(nix::libc::SIGRTMIN() + 2), "RTMIN+2");
        assert_eq!(signal_name(0), "");
        assert_eq!(signal_name(1_000), "");
    }

    #[tokio::test]
    async fn a_cancelled_task_gets_sigterm_first_and_its_handler_runs() {
        let dir = test_dir("term");
        let r = run_and_kill(&dir, SAVES_ON_TERM, Duration::from_secs(60)).await;
        assert_eq!(r.message, "killed at the server's request", "{r:?}");
        assert!(!r.success);
        // Its handler exited 0: it was still the server's kill that ended it.
        assert_eq!(r.end(), pb::TaskEnd::Killed, "{r:?}");
        assert!(
            dir.join("saved").exists(),
            "the task's SIGTERM handler ran before it ended"
        );
    }

    #[tokio::test]
    async fn a_task_that_ignores_sigterm_is_sigkilled_once_its_grace_has_passed() {
        let dir = test_dir("kill");
        let grace = Duration::from_millis(300);
        let script =
            r#"trap '' TERM; echo > "$D/started"; for i in $(seq 600); do sleep 0.05; done"#;
        let (a, spec) = task(&dir, script, 0);
        let (tx, rx) = oneshot::channel();
        let run = run_by_agent(&a, &spec, &dir, rx, grace);
        tokio::pin!(run);
        tokio::select! {
            r = &mut run => panic!("ended before it was killed: {r:?}"),
            () = started(&dir) => {}
        }
        let asked = std::time::Instant::now();
        let _ = tx.send(Kill::Server);
        let r = run.await;
        assert!(
            asked.elapsed() >= grace,
            "not killed before its grace: {:?}",
            asked.elapsed()
        );
        assert_eq!(
            r.message,
            "killed at the server's request; SIGKILLed after ignoring SIGTERM for 0.300s"
        );
    }

    #[tokio::test]
    async fn a_tasks_own_kill_grace_replaces_the_agents() {
        let dir = test_dir("own-grace");
        let script =
            r#"trap '' TERM; echo > "$D/started"; for i in $(seq 600); do sleep 0.05; done"#;
        // The agent's grace is a minute; the task's own, 200 ms.
        let (a, mut spec) = task(&dir, script, LIMIT_MS);
        spec.kill_grace_ms = 200;
        let (_tx, rx) = oneshot::channel();
        let started = std::time::Instant::now();
        let r = run_by_agent(&a, &spec, &dir, rx, Duration::from_secs(60)).await;
        assert_eq!(
            r.message,
            format!(
                "time limit of {} exceeded; SIGKILLed after ignoring SIGTERM for 0.200s",
                limit_words()
            )
        );
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "not the agent's minute"
        );
    }

    #[tokio::test]
    async fn a_task_past_its_time_limit_gets_sigterm_first() {
        let dir = test_dir("limit");
        let (a, spec) = task(&dir, SAVES_ON_TERM, LIMIT_MS);
        let (_tx, rx) = oneshot::channel();
        let r = run_by_agent(&a, &spec, &dir, rx, Duration::from_secs(60)).await;
        assert_eq!(
            r.message,
            format!("time limit of {} exceeded", limit_words()),
            "{r:?}"
        );
        assert!(!r.success);
        assert_eq!(
            (r.end(), r.signal.as_str()),
            (pb::TaskEnd::TimeLimit, ""),
            "the agent's SIGTERM is no signal of the task's: {r:?}"
        );
        assert!(dir.join("saved").exists(), "the SIGTERM handler ran");
    }

    /// Runs a task of `script` whose time limit (ms) starts at `limit_ms` and becomes
    /// `new_ms` after 0.1 s; its result and how long it took.
    async fn run_told(
        dir: &Path,
        script: &str,
        limit_ms: u64,
        new_ms: u64,
    ) -> (pb::TaskResult, Duration) {
        let (a, spec) = task(dir, script, limit_ms);
        let (_kill, rx) = oneshot::channel();
        let (limit, limit_rx) = watch::channel(limit_ms);
        let control = Control {
            kill: rx,
            limit: Some(limit_rx),
            signals: None,
        };
        let started = std::time::Instant::now();
        let tell = async {
            tokio::time::sleep(Duration::from_millis(100)).await;
            limit.send_replace(new_ms);
            std::future::pending::<()>().await
        };
        tokio::select! {
            r = run_by_agent(&a, &spec, dir, control, Duration::from_secs(60)) => {
                (r, started.elapsed())
            }
            () = tell => unreachable!(),
        }
    }

    #[tokio::test]
    async fn a_running_tasks_time_limit_changes_when_its_agent_is_told() {
        let dir = test_dir("new-limit");
        // An hour, shortened to 0.4 s from the start after 0.1 s.
        let (r, took) = run_told(&dir, "sleep 30", 3_600_000, 400).await;
        assert_eq!(r.message, "time limit of 0.400s exceeded", "{r:?}");
        assert!(
            took >= Duration::from_millis(400) && took < Duration::from_secs(20),
            "{took:?}"
        );
        // `LIMIT_MS`, lifted (0: none) after 0.1 s: the task runs to its end, past it.
        let sleep = format!("sleep {:.1}", (LIMIT_MS + 300) as f64 / 1000.0);
        let (r, _) = run_told(&dir, &sleep, LIMIT_MS, 0).await;
        assert!(r.success, "{r:?}");
    }

    /// `hetsched signal`: an operator's signal reaches the task's process group — its shell and
    /// the program the shell started — and the task runs on to its own end.
    #[tokio::test]
    async fn an_operators_signal_reaches_the_tasks_process_group_and_the_task_runs_on() {
        let dir = test_dir("operator-signal");
        let script = r#"sh -c 'trap "echo child >> \"\$D/got\"" USR1; echo > "$D/child"; while [ ! -e "$D/stop" ]; do sleep 0.02; done' & trap 'echo parent >> "$D/got"' USR1; echo > "$D/started"; while [ ! -e "$D/stop" ]; do sleep 0.02; done; wait"#;
        let got = |dir: &Path| {
            let mut lines: Vec<String> = std::fs::read_to_string(dir.join("got"))
                .unwrap_or_default()
                .lines()
                .map(String::from)
                .collect();
            lines.sort();
            lines
        };
        let (a, spec) = task(&dir, script, 0);
        let (_kill, kill) = oneshot::channel();
        let (signal, signals) = mpsc::unbounded_channel();
        let control = Control {
            kill,
            limit: None,
            signals: Some(signals),
        };
        let running = run_by_agent(&a, &spec, &dir, control, Duration::from_secs(5));
        let operator = async {
            started(&dir).await;
            for _ in 0..500 {
                if dir.join("child").exists() {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            signal
                .send(nix::sys::signal::Signal::SIGUSR1)
                .expect("the task listens");
            for _ in 0..500 {
                if got(&dir).len() == 2 {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            std::fs::write(dir.join("stop"), "").expect("stop");
            std::future::pending::<()>().await
        };
        let r = tokio::select! {
            r = running => r,
            () = operator => unreachable!(),
        };
        assert!(r.success, "a caught signal does not end the task: {r:?}");
        assert_eq!(got(&dir), ["child", "parent"], "once each");
    }

    /// A task that does not handle its warning signal dies of it (USR1's default): the result
    /// says it was the warning, not a stray `kill`, and is a `signal` end naming it.
    #[tokio::test]
    async fn a_task_killed_by_its_own_warning_signal_is_told_so() {
        let dir = test_dir("warn-unhandled");
        let (a, mut spec) = task(&dir, "sleep 5", 3_000);
        spec.warn_signal = "USR1".into();
        spec.warn_before_ms = 2_800;
        let (_tx, rx) = oneshot::channel();
        let r = run_by_agent(&a, &spec, &dir, rx, Duration::from_secs(5)).await;
        assert_eq!(r.end(), pb::TaskEnd::Signalled, "{r:?}");
        assert_eq!(r.signal, "USR1", "{r:?}");
        assert!(
            r.message
                .contains("(SIGUSR1): the warning signal it was sent 2.800s before its time limit"),
            "{r:?}"
        );
    }

    /// Slurm's `--signal=USR1@1`: the task is warned before its time limit, once per limit, and
    /// a limit moved later warns again.
    #[tokio::test]
    async fn a_task_gets_its_warning_signal_before_its_time_limit_once_per_limit() {
        let dir = test_dir("warn");
        let script = r#"trap 'echo warned >> "$D/w"' USR1; echo > "$D/started"; for i in $(seq 200); do sleep 0.05; done"#;
        let warnings = |dir: &Path| {
            std::fs::read_to_string(dir.join("w"))
                .unwrap_or_default()
                .lines()
                .count()
        };
        let (a, mut spec) = task(&dir, script, 1_500);
        spec.warn_signal = "USR1".into();
        spec.warn_before_ms = 1_000;
        let (_tx, rx) = oneshot::channel();
        let began = std::time::Instant::now();
        let r = run_by_agent(&a, &spec, &dir, rx, Duration::from_secs(5)).await;
        assert!(
            r.message.starts_with("time limit of 1.500s exceeded"),
            "{r:?}"
        );
        assert!(
            began.elapsed() < Duration::from_secs(5),
            "stopped at its limit"
        );
        assert_eq!(warnings(&dir), 1, "warned once, then stopped");
        // The limit moves to 2.5 s after the first warning: a second one comes 1 s before it.
        let _ = std::fs::remove_file(dir.join("w"));
        let _ = std::fs::remove_file(dir.join("started"));
        let (kill_tx, kill) = oneshot::channel();
        let (limit_tx, limit) = watch::channel(1_500u64);
        let control = Control {
            kill,
            limit: Some(limit),
            signals: None,
        };
        let running = run_by_agent(&a, &spec, &dir, control, Duration::from_secs(5));
        let extend = async {
            for _ in 0..200 {
                if warnings(&dir) == 1 {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            limit_tx.send_replace(2_500);
            std::future::pending::<()>().await
        };
        let r = tokio::select! {
            r = running => r,
            () = extend => unreachable!(),
        };
        drop(kill_tx);
        assert!(
            r.message.starts_with("time limit of 2.500s exceeded"),
            "{r:?}"
        );
        assert_eq!(warnings(&dir), 2, "once for each limit");
        // Without a time limit, nothing warns.
        let (a, mut spec) = task(&dir, "sleep 0.2", 0);
        spec.warn_signal = "USR1".into();
        spec.warn_before_ms = 60_000;
        let (_tx, rx) = oneshot::channel();
        let r = run_by_agent(&a, &spec, &dir, rx, Duration::from_secs(5)).await;
        assert!(r.success, "{r:?}");
    }

    #[test]
    fn a_spec_names_its_warning_signal_as_kill_l_does() {
        let mut spec = pb::TaskSpec::default();
        assert_eq!(Warning::of(&spec), None);
        spec.warn_signal = "USR2".into();
        spec.warn_before_ms = 90_000;
        assert_eq!(
            Warning::of(&spec),
            Some(Warning {
                signal: nix::sys::signal::Signal::SIGUSR2,
                before: Duration::from_secs(90)
            })
        );
        spec.warn_signal = "NOSUCH".into();
        assert_eq!(Warning::of(&spec), None);
    }

    #[tokio::test]
    async fn a_task_whose_processes_hold_more_memory_than_it_declared_is_stopped() {
        let dir = test_dir("memory");
        // A child shell holds 64 MiB in a variable for 30 s; the task declared 16 MiB.
        let hold = r#"sh -c 'x=$(head -c 67108864 /dev/zero | tr "\0" a); sleep 30; : "$x"'"#;
        let (a, mut spec) = task(&dir, hold, 0);
        spec.memory_limit_bytes = 16 << 20;
        let (_tx, rx) = oneshot::channel();
        let started = std::time::Instant::now();
        let r = run_by_agent(&a, &spec, &dir, rx, Duration::from_secs(60)).await;
        assert!(!r.success);
        assert!(
            r.message
                .starts_with("memory limit of 16.0 MiB exceeded: its processes held "),
            "{r:?}"
        );
        assert_eq!(r.end(), pb::TaskEnd::MemoryLimit, "{r:?}");
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "stopped at a sample, not at its end"
        );
        // Within its limit, the same task runs to its end.
        let small = r#"sh -c 'x=$(head -c 1048576 /dev/zero | tr "\0" a); sleep 0.3; : "$x"'"#;
        let (a, mut spec) = task(&dir, small, 0);
        spec.memory_limit_bytes = 256 << 20;
        let (_tx, rx) = oneshot::channel();
        let r = run_by_agent(&a, &spec, &dir, rx, Duration::from_secs(60)).await;
        assert!(r.success, "{r:?}");
    }

    #[tokio::test]
    async fn what_a_finished_task_left_running_in_its_group_is_killed() {
        let dir = test_dir("leftover");
        // The background `sleep` also holds the task's stdout open.
        let script = r#"sleep 300 & echo $! > "$D/pid""#;
        let (a, spec) = task(&dir, script, 0);
        let (_tx, rx) = oneshot::channel();
        let r = run_by_agent(&a, &spec, &dir, rx, Duration::from_secs(60)).await;
        assert!(r.success, "{r:?}");
        let pid: u32 = std::fs::read_to_string(dir.join("pid"))
            .expect("the script wrote the pid")
            .trim()
            .parse()
            .expect("a pid");
        // SIGKILL is delivered before `killpg` returns; the exit itself may take a moment (on
        // a loaded machine, more than the second this waited).
        let mut tries = 0;
        while !gone(pid) && tries < 1_000 {
            tokio::time::sleep(Duration::from_millis(10)).await;
            tries += 1;
        }
        assert!(gone(pid), "the task's background process {pid} still runs");
    }

    /// Runs `script` as task index 3, attempt 2, of job 1 with the given `stdout` and `stderr`
    /// templates, in `dir`; what a `hetsched log` read of each stream would return.
    async fn run_with_streams(
        dir: &Path,
        script: &str,
        stdout: &str,
        stderr: &str,
    ) -> (pb::TaskResult, [Option<(Vec<u8>, String)>; 2]) {
        // Each run is attempt 2 of the same task: the agent's pointers of the last run go.
        let _ = std::fs::remove_dir_all(dir.join("job-1"));
        let (mut a, mut spec) = task(dir, script, 0);
        a.index = 3;
        a.attempt = 2;
        a.task_id = 13;
        spec.workdir = dir.display().to_string();
        spec.stdout = stdout.into();
        spec.stderr = stderr.into();
        let (_tx, rx) = oneshot::channel();
        let r = run_by_agent(&a, &spec, dir, rx, Duration::from_secs(60)).await;
        let (out, err) = output_paths(dir, &spec, &a);
        let read = |captured: &Path| {
            let path = crate::logs::redirected(captured)
                .expect("pointer")
                .unwrap_or_else(|| captured.to_path_buf());
            let (data, _, _, exists) = crate::logs::read_page(&path, 0, 0).expect("read");
            exists.then(|| (data, path.display().to_string()))
        };
        (r, [read(&out), read(&err)])
    }

    #[tokio::test]
    async fn streams_go_to_the_applications_files_and_the_log_reader_follows_them() {
        let dir = test_dir("streams");
        let both = "echo to-out; echo to-err >&2";
        // Separate files, placeholders filled in, the directory created, relative to the task's.
        let (r, [out, err]) = run_with_streams(
            &dir,
            both,
            "logs/{job}/{app}-{index}.{attempt}.out",
            "/dev/null/never",
        )
        .await;
        // A path that cannot be opened is a start failure that names it, and runs nothing.
        assert!(r.start_failed && !r.success, "{r:?}");
        assert!(r.message.contains("cannot open its stderr file"), "{r:?}");
        assert!(out.is_some() && err.is_none());
        let (r, [out, err]) = run_with_streams(
            &dir,
            both,
            "logs/{job}/{app}-{index}.{attempt}.out",
            &format!("{}/t{{task}}.err", dir.display()),
        )
        .await;
        assert!(r.success, "{r:?}");
        let written = std::fs::read(dir.join("logs/1/app-3.2.out")).expect("stdout file");
        assert_eq!(written, b"to-out\n");
        assert_eq!(
            std::fs::read(dir.join("t13.err")).expect("stderr file"),
            b"to-err\n"
        );
        let (data, path) = out.expect("stdout served");
        assert_eq!(
            (data.as_slice(), path.as_str()),
            (
                &b"to-out\n"[..],
                dir.join("logs/1/app-3.2.out").to_str().expect("utf-8")
            )
        );
        assert_eq!(err.expect("stderr served").0, b"to-err\n");
        // One path for both, however it is spelt: one file, as `2>&1`.
        std::fs::create_dir_all(dir.join("sub")).expect("sub");
        for err_path in ["all-{index}.log", "./sub/../all-{index}.log"] {
            let (r, [out, err]) = run_with_streams(
                &dir,
                "echo a; echo b >&2; echo c",
                "all-{index}.log",
                err_path,
            )
            .await;
            assert!(r.success, "{r:?}");
            let text = std::fs::read(dir.join("all-3.log")).expect("file");
            assert_eq!(text, b"a\nb\nc\n", "{err_path}");
            assert_eq!(out.expect("served").0, b"a\nb\nc\n");
            assert_eq!(err.expect("served").0, b"a\nb\nc\n");
        }
        // Discarded: nothing kept anywhere; a task that prints nothing still leaves its file.
        let (r, [out, err]) = run_with_streams(&dir, both, "none", "quiet.err").await;
        assert!(r.success, "{r:?}");
        assert!(out.is_none(), "stdout was discarded");
        assert_eq!(err.expect("served").0, b"to-err\n");
        let (r, [_, err]) = run_with_streams(&dir, "true", "none", "empty.err").await;
        assert!(r.success, "{r:?}");
        assert_eq!(err.expect("the empty file exists").0, b"");
    }

    /// An application's `stdout =` file that is a FIFO (made there before the task started)
    /// fails the attempt to start at once, naming the file and what it is, and runs nothing;
    /// the FIFO is left as it was. A device (`/dev/null`, which the parser admits) is still
    /// written to. Before, the open waited for a reader for good: the attempt never started
    /// nor ended, and a cancel left the job `cancelled (stopping 1)` for good.
    #[tokio::test]
    async fn a_stdout_file_that_is_a_fifo_fails_the_start_naming_it() {
        let dir = test_dir("fifo-stream");
        let fifo = dir.join("out.fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).expect("fifo");
        let (r, [out, _]) = tokio::time::timeout(
            Duration::from_secs(10),
            run_with_streams(&dir, "echo > \"$D/ran\"", "out.fifo", ""),
        )
        .await
        .expect("an answer within 10 s, not a hang");
        assert!(r.start_failed && !r.success, "{r:?}");
        assert_eq!(
            r.message,
            format!(
                "its stdout file `{}` is a FIFO, not a regular file: task output is written only \
                 to a regular file (or a device, such as `/dev/null`)",
                fifo.display()
            ),
            "{r:?}"
        );
        assert!(!dir.join("ran").exists(), "nothing ran");
        assert!(out.is_none(), "{out:?}");
        use std::os::unix::fs::FileTypeExt;
        assert!(
            std::fs::symlink_metadata(&fifo)
                .expect("kept")
                .file_type()
                .is_fifo()
        );
        // (Not through `run_with_streams`: the log reader refuses the device, as it should.)
        let (a, mut spec) = task(&dir, "echo gone", 0);
        spec.stdout = "/dev/null".into();
        let (_tx, rx) = oneshot::channel();
        let r = run_by_agent(&a, &spec, &dir, rx, Duration::from_secs(60)).await;
        assert!(r.success, "{r:?}");
    }

    /// Runs `script` as task 0, attempt 1, of job 1 whose owner is `run_as`, on an agent with
    /// `run_as_owner` as given, in `dir` (its work directory); the result and the task's
    /// captured stdout.
    async fn run_owned(
        dir: &Path,
        script: &str,
        run_as: &str,
        run_as_owner: bool,
        shape: impl FnOnce(&mut pb::Assignment, &mut pb::TaskSpec),
    ) -> (pb::TaskResult, String) {
        let _ = std::fs::remove_dir_all(dir.join("job-1"));
        let (mut a, mut spec) = task(dir, script, 0);
        spec.run_as = run_as.into();
        shape(&mut a, &mut spec);
        let (_tx, rx) = oneshot::channel();
        let r = run(
            &a,
            &spec,
            &[],
            "n1",
            dir,
            dir,
            rx,
            Duration::from_secs(60),
            run_as_owner,
            |_| {},
        )
        .await;
        let out = std::fs::read_to_string(output_paths(dir, &spec, &a).0).unwrap_or_default();
        (r, out)
    }

    /// A run abandoned (its future dropped, as when the agent's runtime shuts down) SIGKILLs its
    /// task's process and reaps it: nothing is left running, nor a zombie. (tokio's
    /// `kill_on_drop` did it until the agent reaped its tasks itself, `usage::Process`.)
    #[tokio::test]
    async fn an_abandoned_run_kills_and_reaps_its_tasks_process() {
        let dir = test_dir("abandoned");
        let (a, spec) = task(&dir, "echo > \"$D/started\"; exec sleep 100", 0);
        let (pid_tx, pid_rx) = std::sync::mpsc::channel();
        let (_tx, rx) = oneshot::channel::<Kill>();
        {
            let run = run(
                &a,
                &spec,
                &[],
                "n",
                &dir,
                &dir,
                rx,
                Duration::from_secs(1),
                false,
                |p| {
                    let _ = pid_tx.send(p);
                },
            );
            tokio::select! {
                r = run => panic!("the task ended: {r:?}"),
                () = started(&dir) => {}
            }
        }
        let pid = pid_rx.recv().expect("its pid");
        let proc_dir = PathBuf::from(format!("/proc/{pid}"));
        for _ in 0..500 {
            if !proc_dir.exists() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(
            !proc_dir.exists(),
            "process {pid} was left running or unreaped"
        );
    }

    /// A task's captured stdout and stderr (in the agent's work directory) are private to the
    /// agent's user, mode 0600 whatever its umask: they may hold what the task printed of its
    /// data. Before, they were created 0644 (kept private only by their directories).
    #[tokio::test]
    async fn a_tasks_captured_output_files_are_private() {
        use std::os::unix::fs::PermissionsExt;
        let dir = test_dir("private-output");
        let (a, spec) = task(&dir, "echo to-out; echo to-err >&2", 0);
        let (_tx, rx) = oneshot::channel();
        let r = run(
            &a,
            &spec,
            &[],
            "n1",
            &dir,
            &dir,
            rx,
            Duration::from_secs(60),
            false,
            |_| {},
        )
        .await;
        assert!(r.success, "{r:?}");
        let (out, err) = output_paths(&dir, &spec, &a);
        for p in [out, err] {
            let mode = std::fs::metadata(&p)
                .expect("captured")
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600, "{}: {mode:o}", p.display());
        }
    }

    #[tokio::test]
    async fn with_run_as_owner_a_task_runs_as_its_owners_account() {
        if !crate::run_as::tests::root() {
            return;
        }
        let dir = test_dir("run-as");
        let nobody = crate::run_as::Account::lookup("n1", "nobody").expect("nobody");
        let groups: Vec<String> = nobody.groups.iter().map(u32::to_string).collect();
        // Its ids, groups, home and name; from the account's own directory (its `workdir` is
        // not on this node).
        let script = r#"id -u; id -g; id -G; echo "$HOME $USER $LOGNAME"; pwd"#;
        let (r, out) = run_owned(&dir, script, "nobody", true, |_, spec| {
            spec.workdir = "/no/such/dir".into();
        })
        .await;
        assert!(r.success, "{r:?}");
        let area = dir.join("users/nobody");
        assert_eq!(
            out,
            format!(
                "65534\n{}\n{}\n{} nobody nobody\n{}\n",
                nobody.gid,
                groups.join(" "),
                nobody.home.display(),
                area.display()
            )
        );
        // The job's own environment wins over the account's.
        let (r, out) = run_owned(&dir, r#"echo "$HOME $USER""#, "nobody", true, |_, spec| {
            spec.env.insert("HOME".into(), "/scratch".into());
        })
        .await;
        assert!(r.success, "{r:?}");
        assert_eq!(out, "/scratch nobody\n");
        // The admin's job (no owner) runs as the agent's user, as does every job on an agent
        // without the setting.
        let (r, out) = run_owned(&dir, "id -u", "", true, |_, _| {}).await;
        assert!(r.success, "{r:?}");
        assert_eq!(out, "0\n");
        let (r, out) = run_owned(&dir, "id -u; echo $USER", "nobody", false, |_, _| {}).await;
        assert!(r.success, "{r:?}");
        assert!(out.starts_with("0\n"), "{out}");
    }

    /// A task's `workdir` is looked up as its account: one only root may see (named itself, or
    /// through a link the account planted in its own directory) is not on the node for it —
    /// refused when its application named it, else the task runs in the account's directory —
    /// exactly as a `workdir` that is nowhere; one the account may reach is where it runs.
    #[tokio::test]
    async fn a_workdir_its_account_cannot_see_is_missing_for_it_whatever_root_finds() {
        use std::os::unix::fs::PermissionsExt;
        if !crate::run_as::tests::root() {
            return;
        }
        let dir = test_dir("run-as-workdir");
        let secret = dir.join("secret");
        std::fs::create_dir_all(secret.join("inner")).expect("secret dir");
        std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o700)).expect("chmod");
        let area = dir.join("users/nobody");
        let link = area.join("link");
        let public = dir.join("public");
        std::fs::create_dir_all(&public).expect("public dir");
        for (n, named) in [secret.join("inner"), link.clone()].iter().enumerate() {
            let named = named.display().to_string();
            let (r, out) = run_owned(&dir, "pwd", "nobody", true, |_, spec| {
                spec.workdir = named.clone();
                spec.workdir_required = true;
            })
            .await;
            assert!(r.start_failed && !r.success, "{named}: {r:?}");
            assert_eq!(
                r.message,
                format!(
                    "node n1: its application's workdir `{named}` is not a directory on this node"
                ),
            );
            assert_eq!(out, "", "{named}: the command did not run");
            let (r, out) = run_owned(&dir, "pwd", "nobody", true, |_, spec| {
                spec.workdir = named.clone();
            })
            .await;
            assert!(r.success, "{named}: {r:?}");
            assert_eq!(out, format!("{}\n", area.display()), "{named}");
            if n == 0 {
                // The account's link to root's directory (its directory exists by now).
                std::os::unix::fs::symlink(secret.join("inner"), &link).expect("link");
                std::os::unix::fs::lchown(&link, Some(65534), None).expect("lchown");
            }
        }
        let (r, out) = run_owned(&dir, "pwd", "nobody", true, |_, spec| {
            spec.workdir = public.display().to_string();
            spec.workdir_required = true;
        })
        .await;
        assert!(r.success, "{r:?}");
        assert_eq!(out, format!("{}\n", public.display()));
    }

    #[tokio::test]
    async fn root_and_unknown_accounts_are_refused_as_failures_to_start() {
        let dir = test_dir("run-as-refused");
        let mark = dir.join("ran");
        let script = format!("echo > {}", mark.display());
        let (r, _) = run_owned(&dir, &script, "root", true, |_, _| {}).await;
        assert!(r.start_failed && !r.success, "{r:?}");
        assert_eq!(
            r.message,
            "node n1: account `root` is uid 0 (root): a user's task never runs as root"
        );
        let (r, _) = run_owned(&dir, &script, "no-such-user-x", true, |_, _| {}).await;
        assert!(r.start_failed && !r.success, "{r:?}");
        assert!(
            r.message
                .starts_with("node n1: no Unix account `no-such-user-x`"),
            "{r:?}"
        );
        assert!(!mark.exists(), "a refused task ran");
    }

    #[tokio::test]
    async fn an_accounts_stream_files_are_its_own_and_opened_with_its_rights() {
        use std::os::unix::fs::MetadataExt;
        if !crate::run_as::tests::root() {
            return;
        }
        let dir = test_dir("run-as-streams");
        // The account's own directory elsewhere (a home on a shared file system).
        let own = dir.join("own");
        std::fs::create_dir_all(&own).expect("own");
        std::os::unix::fs::chown(&own, Some(65534), Some(65534)).expect("chown");
        let (r, _) = run_owned(&dir, "id -un; echo oops >&2", "nobody", true, |_, spec| {
            spec.workdir = own.display().to_string();
            spec.stdout = "logs/{job}-{index}.out".into();
            spec.stderr = "logs/{job}-{index}.out".into();
        })
        .await;
        assert!(r.success, "{r:?}");
        let file = own.join("logs/1-0.out");
        assert_eq!(
            std::fs::read_to_string(&file).expect("stdout file"),
            "nobody\noops\n"
        );
        let m = std::fs::metadata(&file).expect("meta");
        assert_eq!(m.uid(), 65534, "the account's file");
        assert_eq!(
            std::fs::metadata(own.join("logs")).expect("dir").uid(),
            65534
        );
        // `hetsched log` reads it through the pointer, as the account.
        let a = pb::Assignment {
            task_id: 1,
            attempt: 1,
            ..Default::default()
        };
        let spec = pb::TaskSpec {
            job_id: 1,
            app: "app".into(),
            ..Default::default()
        };
        let captured = output_paths(&dir, &spec, &a).0;
        let (path, owner) = crate::logs::redirected_owned(&captured)
            .expect("pointer")
            .expect("a pointer");
        assert_eq!((path.as_path(), owner), (file.as_path(), 65534));
        let (data, ..) = crate::logs::read_page_as(owner, &path, 0, 0).expect("read");
        assert_eq!(data, b"nobody\noops\n");
        // ... and only as the account: a file it may not read is refused, not served.
        std::fs::write(dir.join("secret"), "root's").expect("secret");
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(dir.join("secret"), std::fs::Permissions::from_mode(0o600))
            .expect("chmod");
        assert!(crate::logs::read_page_as(owner, &dir.join("secret"), 0, 0).is_err());
        // The agent creates no file the account could not: a stream to a directory of root's
        // is a failure to start.
        let (r, _) = run_owned(&dir, "id -un", "nobody", true, |_, spec| {
            spec.workdir = own.display().to_string();
            spec.stdout = dir.join("roots.out").display().to_string();
        })
        .await;
        assert!(r.start_failed && !r.success, "{r:?}");
        assert!(r.message.contains("cannot open its stdout file"), "{r:?}");
        assert!(!dir.join("roots.out").exists());
    }

    #[tokio::test]
    async fn an_accounts_multi_node_task_reads_its_node_file() {
        if !crate::run_as::tests::root() {
            return;
        }
        let dir = test_dir("run-as-nodes");
        let (r, out) = run_owned(
            &dir,
            r#"id -un; cat "$HETSCHED_NODE_FILE"; echo "$HETSCHED_NODE_FILE""#,
            "nobody",
            true,
            |a, _| {
                a.hosts = vec!["h1".into(), "h2".into()];
                a.node_names = vec!["n1".into(), "n2".into()];
                a.node_cores = vec![1, 1];
            },
        )
        .await;
        assert!(r.success, "{r:?}");
        let path = dir.join("users/nobody/job-1-app-0.1.nodes");
        assert_eq!(out, format!("nobody\nh1\nh2\n{}\n", path.display()));
        assert!(!path.exists(), "the node file goes with the task");
    }
}
