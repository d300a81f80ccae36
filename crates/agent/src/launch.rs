//! Runs one assigned task as a child process in its own process group: environment
//! (`CUDA_VISIBLE_DEVICES` = the assigned devices, `HETSCHED_*`), working directory, stdout and
//! stderr captured to files; waits for it, kills the whole group on a kill request or when its time
//! limit passes, and reports the result.

use hetsched_proto as pb;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::sync::oneshot;

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
        crate::logs::output_path(work_dir, spec.job_id, &spec.app, a.index, a.attempt, stderr)
    };
    (path(false), path(true))
}

fn kill_group(pid: Option<u32>) {
    if let Some(pid) = pid.and_then(|p| i32::try_from(p).ok()) {
        let _ = nix::sys::signal::killpg(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        );
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

/// How a task's process came to an end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ended {
    /// By itself.
    Exited,
    /// Killed on a request.
    Killed(Kill),
    /// Killed when its time limit passed.
    TimedOut,
}

/// Runs `a`, a task of `spec`, to the end; `on_spawn` receives the child's pid. `{index}` in the
/// spec's arguments becomes the task's index and then `{entry}` its entry (an application with
/// `entries`; the entry is inserted as it is), and the task gets the `HETSCHED_*` variables.
pub async fn run(
    a: &pb::Assignment,
    spec: &pb::TaskSpec,
    node: &str,
    work_dir: &Path,
    kill: oneshot::Receiver<Kill>,
    on_spawn: impl FnOnce(u32),
) -> pb::TaskResult {
    let started = now_ns();
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
    };
    let fail = |mut r: pb::TaskResult, m: String| {
        r.message = m;
        r.finished_ns = now_ns();
        r
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
        return fail(result, "the assignment has no command".into());
    };
    let (out, err) = output_paths(work_dir, spec, a);
    let dir = Path::new(&spec.workdir);
    let cwd = if !spec.workdir.is_empty() && dir.is_dir() {
        dir
    } else {
        work_dir
    };
    let devices: Vec<String> = a.devices.iter().map(u32::to_string).collect();
    let mut cmd = tokio::process::Command::new(program);
    cmd.args(&argv[1..])
        .envs(&spec.env)
        .env("HETSCHED_JOB_ID", spec.job_id.to_string())
        .env("HETSCHED_APP", &spec.app)
        .env("HETSCHED_TASK_ID", a.task_id.to_string())
        .env("HETSCHED_TASK_INDEX", &index)
        .env("HETSCHED_ATTEMPT", a.attempt.to_string())
        .env("HETSCHED_VARIANT", &spec.variant)
        .env("HETSCHED_NODE", node)
        .env("CUDA_VISIBLE_DEVICES", devices.join(","))
        .envs(a.entry.as_ref().map(|e| ("HETSCHED_ENTRY", e)))
        .current_dir(cwd)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            result.start_failed = true;
            return fail(result, format!("cannot start `{program}`: {e}"));
        }
    };
    let pid = child.id();
    if let Some(pid) = pid {
        on_spawn(pid);
    }
    // Watches the process until it exits, leaving it unreaped so that its counters can be read.
    let mut watch = pid.and_then(crate::usage::Watch::new);
    let drains = [
        child.stdout.take().map(|s| tokio::spawn(drain(s, out))),
        child.stderr.take().map(|s| tokio::spawn(drain(s, err))),
    ];
    let limit = (spec.time_limit_ms > 0).then(|| Duration::from_millis(spec.time_limit_ms));
    let sleep = async {
        match limit {
            Some(d) => tokio::time::sleep(d).await,
            None => std::future::pending().await,
        }
    };
    let exited = async {
        match watch.as_mut() {
            Some(w) => w.exited().await,
            // Unwatched: reaped here; the status is kept for the `wait` below.
            None => drop(child.wait().await),
        }
    };
    let ended = tokio::select! {
        () = exited => Ended::Exited,
        Ok(why) = kill => Ended::Killed(why),
        () = sleep => Ended::TimedOut,
    };
    if ended != Ended::Exited {
        kill_group(pid);
        // Killed: still measured, once the group's leader has exited.
        if let Some(w) = watch.as_mut() {
            w.exited().await;
        }
    }
    result.usage = watch.as_ref().and_then(crate::usage::Watch::usage);
    let status = child.wait().await;
    match ended {
        Ended::Exited => match status {
            Ok(s) => {
                result.exit_code = s.code().unwrap_or(-1);
                result.success = s.success();
                // The shell's "cannot execute" (126) and "command not found" (127).
                result.start_failed = matches!(result.exit_code, 126 | 127);
                if !s.success() {
                    result.message = format!("exited with {s}");
                }
            }
            Err(e) => result.message = format!("wait: {e}"),
        },
        Ended::Killed(why) => {
            result.message = match why {
                Kill::Server => "killed at the server's request".into(),
                Kill::Shutdown => {
                    result.interrupted = true;
                    "killed: its agent shut down".into()
                }
            };
        }
        Ended::TimedOut => {
            result.message = format!(
                "time limit of {} exceeded",
                humanize(limit.unwrap_or_default())
            );
        }
    }
    // The pipes close when the process (group) ends; a daemon that keeps them open is not waited
    // for long.
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
    result.finished_ns = now_ns();
    result
}

/// Copies a task's output stream to `path`, creating the file (and its directory) only when the
/// first byte arrives: most short tasks print nothing, and creating two files per task dominated
/// the agent's cost of running them.
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
                file.insert(std::fs::File::create(&path)?)
            }
        };
        f.write_all(&buf[..n])?;
    }
}

fn humanize(d: Duration) -> String {
    format!("{:.3}s", d.as_secs_f64())
}
