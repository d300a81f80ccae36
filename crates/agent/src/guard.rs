//! The agent's guard: a small process that outlives the agent to kill the tasks it leaves
//! running.
//!
//! Each task runs in a process group of its own ([`crate::launch`]), so that a signal reaches its
//! whole tree; so it also outlives the agent. An agent that is SIGKILLed, picked by the kernel's
//! OOM killer or crashes leaves its tasks running, while the server declares the node dead after
//! its `dead_timeout` and runs those tasks again elsewhere: the work would run twice, the copies
//! writing the same outputs, and the orphans would hold the node's cores. A restarted agent
//! kills them before it registers ([`crate::ledger`]), but an agent that is not restarted — a
//! node taken out of service, a batch allocation's agent — never does.
//!
//! So an agent started with the `hetsched` binary ([`crate::AgentOptions::exe`]) starts
//! `hetsched agent-guard --work-dir DIR` ([`Guard::start`]) in a process group of its own (a
//! terminal's Ctrl-C does not reach it), with a pipe as its standard input. The agent holds the
//! pipe's write end for its whole life and never writes to it; the kernel closes it when the
//! agent's process ends, however it ends. The guard ([`run`]) then reads end of file, takes the
//! work directory's lock ([`crate::workdir::try_lock`]), SIGKILLs the process groups the
//! ledgers list as running (tasks and divisible chunks, with the ledger's check that a pid still
//! names the recorded process) and those of the processes that carry the agent's mark
//! ([`crate::marker`]: a task spawned in the instant before the agent died, which no ledger
//! lists yet, and an ANode's offloaded tasks), leaves the ledgers as they are (their
//! unacknowledged results are for the next agent) and exits. After an agent that ended on its own nothing is listed as
//! running and the guard just exits.
//!
//! The lock keeps the guard from acting while a new agent holds the directory: an agent takes it
//! before it reads its ledger, and the guard only acts once it holds it. If a new agent took it
//! first, that agent has killed what was left itself, and the guard gives up after
//! [`LOCK_WAIT`]; if the guard took it first, the new agent waits for it ([`AGENT_LOCK_WAIT`]).
//!
//! Tasks get no `PR_SET_PDEATHSIG` besides: the guard kills each task's whole group where a
//! death signal reaches only the direct child; it would take an `unsafe` `pre_exec` hook; and it
//! fires when the *thread* that forked the child ends — [`crate::run_as::hop`]'s thread, which
//! ends as soon as it has spawned the task, would kill every task run as its owner at start.

use crate::workdir::Locked;
use std::io::Read;
use std::path::Path;
use std::time::{Duration, Instant};

/// The hidden `hetsched` subcommand that runs the guard.
pub const SUBCOMMAND: &str = "agent-guard";

/// How long the guard waits for the work directory's lock once the agent is gone.
pub const LOCK_WAIT: Duration = Duration::from_secs(10);

/// How long a starting agent waits for the work directory's lock: the guard of the agent that
/// held it before may still be killing what that one left.
pub const AGENT_LOCK_WAIT: Duration = Duration::from_secs(5);

/// How often a held lock is tried again.
const LOCK_RETRY: Duration = Duration::from_millis(20);

/// Where the guard writes its one line: the agent's own log settings (`--log-file`,
/// `--log-format`), passed on as the same flags. The guard opens the file only when it has
/// something to write, at its path: a log rotated since the agent started gets the line in the
/// new file.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LogTo {
    /// The agent's log file; None: standard error, which the guard shares with its agent.
    pub file: Option<std::path::PathBuf>,
    /// The agent's log format.
    pub format: hetsched_core::input::log_format::LogFormat,
}

/// A running guard. Dropping it (the agent's run ends) closes the pipe: the guard looks at the
/// ledgers once and exits.
#[derive(Debug)]
pub struct Guard {
    _child: tokio::process::Child,
    _pipe: tokio::process::ChildStdin,
}

impl Guard {
    /// Starts `exe agent-guard --work-dir WORK_DIR --log-format FORMAT [--log-file PATH]`.
    pub fn start(exe: &Path, work_dir: &Path, log: &LogTo) -> std::io::Result<Guard> {
        let mut command = tokio::process::Command::new(exe);
        command
            .arg(SUBCOMMAND)
            .arg("--work-dir")
            .arg(work_dir)
            .arg("--log-format")
            .arg(log.format.as_str());
        if let Some(file) = &log.file {
            command.arg("--log-file").arg(file);
        }
        let mut child = command
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null())
            .process_group(0)
            .spawn()?;
        let pipe = child
            .stdin
            .take()
            .ok_or_else(|| std::io::Error::other("the guard's standard input is not a pipe"))?;
        Ok(Guard {
            _child: child,
            _pipe: pipe,
        })
    }
}

/// What the guard did once its agent was gone.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    /// It held the work directory and killed this many process groups (tasks, chunks and the
    /// marked processes no ledger listed).
    Killed(usize),
    /// Another agent took the work directory first (and killed what was left itself).
    TakenOver,
}

/// The guard's whole life: waits for end of file on `agent` (the pipe from its agent), then
/// kills what the agent in `work_dir` left running, unless another agent takes the directory
/// within `lock_wait` ([`LOCK_WAIT`]; see the module docs).
pub fn run(agent: impl Read, work_dir: &Path, lock_wait: Duration) -> std::io::Result<Outcome> {
    wait_for_end(agent)?;
    let deadline = Instant::now() + lock_wait;
    // Without locks on the work directory's file system, it acts at once (a new agent started
    // within that moment could lose its first tasks; the agent warned at its start).
    let _lock = loop {
        match crate::workdir::try_lock(work_dir)? {
            Locked::Held(lock) => break Some(lock),
            Locked::Unsupported(_) => break None,
            Locked::Busy if Instant::now() >= deadline => return Ok(Outcome::TakenOver),
            Locked::Busy => std::thread::sleep(LOCK_RETRY),
        }
    };
    let tasks = crate::ledger::kill_left_running(work_dir, crate::ledger::FILE_NAME)?;
    let chunks = crate::ledger::kill_left_running(work_dir, crate::ledger::CHUNKS_FILE_NAME)?;
    // Then whatever still carries the directory's mark: a task spawned just before the agent
    // died, whose `start` line was never written, and the ANode's offloaded tasks.
    let recorded: Vec<u32> = tasks.iter().chain(&chunks).map(|e| e.pid).collect();
    let marked = crate::marker::kill_marked(work_dir, &recorded);
    Ok(Outcome::Killed(tasks.len() + chunks.len() + marked.len()))
}

/// Reads `agent` until end of file (anything written is ignored; an interrupted read is retried).
fn wait_for_end(mut agent: impl Read) -> std::io::Result<()> {
    let mut buf = [0u8; 64];
    loop {
        match agent.read(&mut buf) {
            Ok(0) => return Ok(()),
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

/// Takes the work directory's lock for a starting agent, waiting up to `wait`
/// ([`AGENT_LOCK_WAIT`]) for the guard of a previous agent; an error names the process that
/// holds it. `None` where the file system has no locks: the agent goes on, warning.
pub async fn lock_for_agent(
    work_dir: &Path,
    wait: Duration,
) -> Result<Option<crate::workdir::DirLock>, String> {
    let deadline = Instant::now() + wait;
    loop {
        match crate::workdir::try_lock(work_dir) {
            Ok(Locked::Held(lock)) => return Ok(Some(lock)),
            Ok(Locked::Unsupported(e)) => {
                tracing::warn!(
                    dir = %work_dir.display(),
                    "the work directory's file system has no locks ({e}): nothing stops a second \
                     agent from using it, so start only one"
                );
                return Ok(None);
            }
            Ok(Locked::Busy) if Instant::now() < deadline => tokio::time::sleep(LOCK_RETRY).await,
            Ok(Locked::Busy) => {
                let holder = crate::workdir::lock_holder(work_dir)
                    .map_or_else(String::new, |pid| format!(" (pid {pid})"));
                return Err(format!(
                    "{}: another agent{holder} uses this work directory; two agents in one \
                     directory would kill each other's tasks, so give each its own `--work-dir`",
                    work_dir.display()
                ));
            }
            Err(e) => {
                return Err(format!(
                    "{}: {e}",
                    work_dir.join(crate::workdir::LOCK).display()
                ));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hetsched_core::testkit::ScratchDir;
    use std::io::Write;

    /// The work directory's lock, taken by this test.
    fn held(dir: &Path) -> crate::workdir::DirLock {
        match crate::workdir::try_lock(dir).expect("lock file") {
            Locked::Held(lock) => lock,
            other => panic!("the lock is not free: {other:?}"),
        }
    }

    /// A fresh directory for test `name`.
    fn scratch(name: &str) -> ScratchDir {
        ScratchDir::new("guard", name)
    }

    /// A `sleep` in a process group of its own, recorded as task `task` in `dir`'s ledger.
    fn recorded_sleep(ledger: &mut crate::ledger::Ledger, task: u64) -> u32 {
        use std::os::unix::process::CommandExt;
        let child = std::process::Command::new("sleep")
            .arg("300")
            .process_group(0)
            .spawn()
            .expect("test setup");
        let pid = child.id();
        ledger.started(task, 1, pid);
        // Reaped by the test's end; the guard kills it first.
        std::mem::forget(child);
        pid
    }

    fn alive(pid: u32) -> bool {
        // A killed child of this test stays a zombie until reaped: count it as gone.
        crate::ledger::proc_start_time(pid).is_some() && !crate::ledger::is_zombie(pid)
    }

    #[test]
    fn once_its_agent_is_gone_the_guard_kills_what_the_ledger_lists_and_keeps_the_record() {
        let dir = scratch("kills");
        let (mut ledger, _) = crate::ledger::Ledger::recover(&dir).expect("test setup");
        let running = recorded_sleep(&mut ledger, 7);
        let ended = recorded_sleep(&mut ledger, 8);
        let (mut chunks, _) =
            crate::ledger::Ledger::recover_file(&dir, crate::ledger::CHUNKS_FILE_NAME)
                .expect("test setup");
        let chunk = recorded_sleep(&mut chunks, 3);
        let result = hetsched_proto::TaskResult {
            task_id: 8,
            attempt: 1,
            success: true,
            ..Default::default()
        };
        ledger.finished(&result);
        let record =
            std::fs::read_to_string(dir.join(crate::ledger::FILE_NAME)).expect("test setup");
        // The agent holds the directory while it lives; the guard waits for the end of its pipe.
        let agent_lock = held(&dir);
        drop(agent_lock);
        let outcome = run(std::io::empty(), &dir, LOCK_WAIT).expect("test setup");
        assert_eq!(outcome, Outcome::Killed(2));
        let deadline = Instant::now() + Duration::from_secs(5);
        while (alive(running) || alive(chunk)) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(
            !alive(running),
            "the task the agent left running was killed"
        );
        assert!(!alive(chunk), "and so was its divisible chunk");
        assert!(alive(ended), "a task recorded as ended is not the guard's");
        assert_eq!(
            std::fs::read_to_string(dir.join(crate::ledger::FILE_NAME)).expect("test setup"),
            record,
            "the record, with its unacknowledged result, is left for the next agent"
        );
        crate::launch::signal_group(ended, nix::sys::signal::Signal::SIGKILL);
    }

    /// A task spawned in the instant before its agent died: it carries the agent's mark, and
    /// the ledger has no `start` line for it yet.
    #[test]
    fn the_guard_kills_a_marked_task_no_ledger_lists() {
        use std::os::unix::process::CommandExt;
        let dir = scratch("marked");
        let (mut ledger, _) = crate::ledger::Ledger::recover(&dir).expect("test setup");
        let recorded = recorded_sleep(&mut ledger, 5);
        let mut unrecorded = std::process::Command::new("sleep")
            .arg("300")
            .env(crate::marker::VAR, &dir)
            .process_group(0)
            .spawn()
            .expect("test setup");
        let outcome = run(std::io::empty(), &dir, LOCK_WAIT).expect("test setup");
        assert_eq!(
            outcome,
            Outcome::Killed(2),
            "the recorded task and the marked one"
        );
        let deadline = Instant::now() + Duration::from_secs(5);
        while (unrecorded.try_wait().expect("test setup").is_none() || alive(recorded))
            && Instant::now() < deadline
        {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(
            unrecorded.try_wait().expect("test setup").is_some(),
            "the task no ledger listed was killed"
        );
        assert!(!alive(recorded));
    }

    #[test]
    fn a_guard_that_finds_a_new_agent_in_the_directory_leaves_its_tasks_alone() {
        let dir = scratch("taken");
        let (mut ledger, _) = crate::ledger::Ledger::recover(&dir).expect("test setup");
        let new_agents_task = recorded_sleep(&mut ledger, 9);
        let _new_agent = held(&dir);
        let start = Instant::now();
        let wait = Duration::from_millis(200);
        assert_eq!(
            run(std::io::empty(), &dir, wait).expect("test setup"),
            Outcome::TakenOver
        );
        assert!(start.elapsed() >= wait, "it waited for the lock");
        assert!(alive(new_agents_task));
        crate::launch::signal_group(new_agents_task, nix::sys::signal::Signal::SIGKILL);
        drop(_new_agent);
    }

    #[test]
    fn the_guard_waits_until_its_agent_closes_the_pipe() {
        let (mut reader, mut writer) = std::io::pipe().expect("test setup");
        let waiter = std::thread::spawn(move || wait_for_end(&mut reader));
        writer.write_all(b"ignored").expect("test setup");
        std::thread::sleep(Duration::from_millis(50));
        assert!(!waiter.is_finished(), "the guard acts only at end of file");
        drop(writer);
        waiter.join().expect("lock file").expect("free");
    }

    #[tokio::test]
    async fn a_second_agent_in_a_work_directory_is_refused_naming_the_first() {
        let dir = scratch("second");
        let _first = lock_for_agent(&dir, AGENT_LOCK_WAIT)
            .await
            .expect("test setup");
        let start = Instant::now();
        let e = lock_for_agent(&dir, Duration::from_millis(200))
            .await
            .expect_err("refused");
        assert!(start.elapsed() >= Duration::from_millis(200), "it waited");
        assert!(
            e.contains(&format!("another agent (pid {})", std::process::id()))
                && e.contains("--work-dir"),
            "{e}"
        );
        drop(_first);
    }
}
