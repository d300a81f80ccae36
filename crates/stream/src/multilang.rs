//! Apache Storm's multi-lang protocol, so components written for Storm in Python (or any
//! language with a multi-lang library: pystorm, storm.py, …) run unchanged as
//! `command = [...]` components. As Storm's ShellBolt and ShellSpout do, the worker:
//!
//! - starts the program (working directory: the submitting directory) with pipes on stdin and
//!   stdout; its stderr goes to the worker's, at most `LOG_BUDGET` bytes a minute with its `log`
//!   messages (what is over is counted and said, so a program printing in a loop cannot fill the
//!   disk the worker's log is on);
//! - exchanges JSON messages, each followed by a line `end`;
//! - **handshake**: sends `{"conf": {...params}, "pidDir": DIR, "context": {"task->component":
//!   {...}, "taskid": T, "componentid": C, "stormid": TOPOLOGY}}` and waits for `{"pid": N}`
//!   (the program writes an empty file named after its pid in `pidDir`);
//! - **bolts**: sends each input as `{"id", "comp", "stream": "default", "task", "tuple"}`;
//!   handles `emit` (with `anchors`; answers the receiving task ids unless `need_task_ids` is
//!   false), `ack`, `fail`, `log`, `error`, `metrics` (ignored); every second sends a
//!   **heartbeat** tuple (`"task": -1, "stream": "__heartbeat"`) that the program answers with
//!   `sync`;
//! - **spouts**: sends `{"command": "next"}`, then `ack`/`fail` with the message `id` the
//!   program gave its emit, and reads until the program's `sync`.
//!
//! What a program writes is bounded: a message is at most [`MAX_MESSAGE`] bytes (more without a
//! line `end` — a program printing to stdout — ends the program, logged), and at most
//! `MESSAGE_QUEUE` messages are read ahead of the executor, so a program emitting faster than
//! the topology takes its tuples blocks on its output. The executor writes to the program
//! through a thread of its own, so it keeps reading the program's output while the program is
//! not reading its input; a bolt takes no more input while `MAX_QUEUED_INPUT` messages wait
//! to be written.
//!
//! **A silent program is killed.** As Storm's ShellBolt and ShellSpout, the worker gives a
//! program `topology.subprocess.timeout.secs` (a `command` component's `params`, quoted in
//! TOML; default 30 s, Storm's `supervisor.worker.timeout.secs`) to say anything while the
//! worker waits on it: a bolt from the first heartbeat it has not answered (any message
//! answers, as in Storm), a spout from its `next`, `ack` or `fail` (or its last message since)
//! until its `sync`. Time the executor itself spends blocked on the topology does not count.
//! Past it the program is ended as when it exits: [`ShellError`] in the worker's log (naming
//! the executor, the pid, how long it was silent and the limit) and in the executor's counters
//! (`ended`).
//!
//! **A program is ended with everything it started.** It runs in a process group of its own,
//! and whenever the worker ends it ([`Program`] drops: silent, restarted, moved, stopping) the
//! whole group gets SIGTERM, then SIGKILL after [`KILL_GRACE`], so a shell wrapper's children
//! do not outlive it (Storm's ShellProcess kills the program's own process only).
//!
//! **An ended program is started again in place.** Storm ends the whole worker, which its
//! supervisor restarts; here the worker and its other executors run on, and the executor
//! starts its program again with a fresh handshake under the same task id, after a wait that
//! grows with its ends ([`Restarts`]; a restart is counted in `restarts`). A bolt first fails
//! the inputs the ended program held back to their spouts, so reliable trees replay at once; a
//! spout forgets its trees in flight (the new program does not know their message ids). Past
//! too many restarts the worker gives up (`gave_up`, and `ended` says so): the executor runs
//! no more until a new placement or worker starts it.
//!
//! **A bolt's unacked inputs are bounded.** The worker keeps each input it hands a program
//! until the program acks or fails it, for its anchored emits and the ack it owes the tree.
//! A program that never acks would grow that without bound, so the worker stops waiting on it
//! at the input's tree's timeout (the `timeout` of the spout that began the tree — Storm's
//! `topology.message.timeout.secs` — counted from when the input reached the bolt, 30 s for an
//! untracked tree): by then the spout has failed and replayed the tree, so the input is failed
//! (a no-op for a tree the spout already ended) and forgotten, counted in the executor's
//! `expired`. An ack, fail or anchor naming it later is ignored (its emits go out untracked;
//! Storm would end the bolt instead). And at most `MAX_UNACKED` inputs are held
//! (`ExecutorCounters::unacked`, plus at most one batch): past it the oldest inputs of
//! untracked trees are forgotten (no spout waits on them; stalling an unreliable stream on a
//! program that never acks would serve no one), and while the oldest is a reliable tree's the
//! bolt takes no more input — back-pressure, as under Storm's `max.spout.pending` — until the
//! program acks or the tree times out. What was failed and forgotten is said in the worker's
//! log at most once a minute.
//!
//! Task ids are executor ids. Deviations: one output stream (`stream` in an emit is ignored,
//! every outgoing stream of the component gets the tuple); `direct` emits are sent as normal
//! emits; a tuple anchored to inputs of several different trees joins the first anchor's tree
//! only (the others are acked without it).

use crate::metrics::{ExecutorCounters, Histogram, bump, now_ns};
use crate::process_tree;
use crate::tuple::{AckMsg, Tuple, Value};
use crate::worker::{Emitter, Pending, Shared, Tracker};
use crossbeam_channel::{Receiver, RecvTimeoutError, Sender, bounded, never, select, unbounded};
use hetsched_core::model::stream_code::{
    ComponentCode, SUBPROCESS_TIMEOUT_KEY, restart_wait_ms, subprocess_timeout_secs,
};
use hetsched_core::model::topology::ExecutorId;
use serde_json::{Value as Json, json};
use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead, BufReader, BufWriter, Read, Write};
use std::os::unix::process::CommandExt;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use thiserror::Error;

/// Largest message a program may send (its JSON text before the line `end`).
pub const MAX_MESSAGE: usize = 16 << 20;

/// Bytes of a program's stderr (and `log` messages) the worker's log takes per [`LOG_WINDOW`].
const LOG_BUDGET: u64 = 1 << 20;
/// See [`LOG_BUDGET`].
const LOG_WINDOW: Duration = Duration::from_secs(60);

/// Program messages read ahead of its executor.
const MESSAGE_QUEUE: usize = 1024;
/// Bolts: messages queued for the program beyond which no more input is taken from the inbox
/// (the inbox then fills and its senders block, as for a built-in bolt).
const MAX_QUEUED_INPUT: usize = 512;

/// How long a program may take to answer the handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(30);
/// Heartbeat period (bolts).
const HEARTBEAT: Duration = Duration::from_secs(1);
/// Spouts: trees in flight before `next` waits for acks.
const SHELL_MAX_PENDING: usize = 1000;
/// Spouts: a tree not acked after this fails.
const SHELL_TIMEOUT: Duration = Duration::from_secs(30);
/// Bolts: inputs the program may hold neither acked nor failed; past it the oldest inputs of
/// untracked trees are forgotten, and while the oldest belongs to a reliable tree the bolt
/// takes no more input (back-pressure) until the program acks or the tree times out.
const MAX_UNACKED: usize = 20_000;
/// Bolts: how long an input of an untracked tree (an unreliable spout's) is kept for the
/// program's ack or anchored emits: Storm's default message timeout.
const UNTRACKED_TIMEOUT: Duration = Duration::from_secs(30);

/// Why a multi-lang executor ended on its own. Said in the worker's log (the agent keeps it in
/// the worker's `worker.err`) and kept in the executor's counters
/// ([`ExecutorCounters::ended`](crate::metrics::ExecutorCounters::ended)).
#[derive(Debug, Error)]
pub enum ShellError {
    /// The program exited.
    #[error("{name}: the program exited{status}")]
    Exited {
        /// The executor, `<component>#<index>`.
        name: String,
        /// `" (exit status: 1)"`, or empty when it is not known yet.
        status: String,
    },
    /// The program runs on but closed its input or its output, or wrote more than a message
    /// may hold (the reader stopped, and said so).
    #[error(
        "{name}: the program closed its input or output, or wrote more than a message may hold: killed"
    )]
    Closed {
        /// The executor, `<component>#<index>`.
        name: String,
    },
    /// The program wrote nothing for longer than its timeout while the worker waited on it.
    #[error(
        "{name}: the program (pid {pid}) sent nothing for {silent_s:.1} s while the worker waited for {waited} (at most {limit_s} s, `{SUBPROCESS_TIMEOUT_KEY}`): killed"
    )]
    Silent {
        /// The executor, `<component>#<index>`.
        name: String,
        /// The program's pid.
        pid: u32,
        /// How long it had been silent, seconds.
        silent_s: f64,
        /// Its timeout, seconds.
        limit_s: u64,
        /// What the worker waited for (`an answer to its heartbeats`, `its sync after next`).
        waited: &'static str,
    },
}

/// How long a program's process group has between SIGTERM and SIGKILL when its executor ends
/// it: time for a wrapper to pass the signal on and for the program to exit cleanly, short
/// enough that a restart ([`Restarts`]) or the worker's stop is not held up for long.
const KILL_GRACE: Duration = Duration::from_secs(2);

/// A program's process, the leader of a process group of its own, ended with its whole group
/// and every process below it when dropped: however its executor ends (it returns, it fails
/// to start, the worker stops, the program is restarted), neither the program nor anything it
/// started outlives it — a shell wrapper's children (`sh -c "python3 bolt.py"`), a program's
/// own helpers, and on Linux those that left the group (`setsid`, `setpgid`) while their
/// parents run ([`crate::process_tree`]). Storm's ShellProcess kills the program's process
/// only, which leaves such children running. With it go its orphans that were re-parented
/// to the worker (a child that left the group and whose parent exited), found by the
/// program's serial ([`process_tree::adopted_of`]).
#[derive(Debug)]
struct Program(Child, u64);

impl Drop for Program {
    fn drop(&mut self) {
        end_group(&mut self.0, self.1, KILL_GRACE);
    }
}

/// Ends `child`'s process group (its id is the child's pid, `process_group(0)`), every
/// process below the child and its orphans adopted by the worker (program `serial`): SIGTERM to each, then SIGKILL to those left after `grace`, and
/// reaps the child. The processes below are found before anything is signalled (once the
/// child is reaped they are no longer below it) and signalled only while each is still the
/// same process ([`process_tree::Proc`]). The group's id stays reserved while any member
/// lives, so the signals cannot reach an unrelated process once the child itself has been
/// reaped (`alive` reaps it): an empty group answers ESRCH. The orphans it kills are reaped
/// here, not left as the worker's zombies.
fn end_group(child: &mut Child, serial: u64, grace: Duration) {
    use nix::sys::signal::{Signal, killpg};
    let pid = child.id();
    let group = match i32::try_from(pid) {
        // Never group 0 (the caller's own) or 1 (init's).
        Ok(p) if p > 1 => nix::unistd::Pid::from_raw(p),
        _ => {
            let _ = child.kill();
            let _ = child.wait();
            process_tree::forget_program(pid);
            return;
        }
    };
    // Those that left the group are found below the program while their parents run, and
    // among the worker's children by their mark once those parents exited.
    let mut below = process_tree::descendants(pid);
    below.extend(process_tree::adopted_of(serial));
    let group_there = killpg(group, Signal::SIGTERM).is_ok();
    for &p in &below {
        process_tree::signal(p, Signal::SIGTERM);
    }
    if group_there || !below.is_empty() {
        let until = Instant::now() + grace;
        loop {
            // Reaped first: an exited leader left as a zombie still counts as a member.
            let _ = child.try_wait();
            let group_left = killpg(group, None).is_ok();
            if !group_left && !below.iter().any(|&p| process_tree::runs(p)) {
                break;
            }
            if Instant::now() >= until {
                let _ = killpg(group, Signal::SIGKILL);
                // And what those left started meanwhile.
                let mut left: Vec<process_tree::Proc> = below
                    .iter()
                    .copied()
                    .filter(|&p| process_tree::runs(p))
                    .collect();
                for p in left.clone() {
                    left.extend(process_tree::descendants(p.pid));
                }
                for p in left {
                    process_tree::signal(p, Signal::SIGKILL);
                }
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    // Whether or not the group was there to signal, the child is reaped: it may be a zombie.
    let _ = child.kill();
    let _ = child.wait();
    process_tree::forget_program(pid);
    process_tree::reap_adopted();
}

/// A running multi-lang program.
#[derive(Debug)]
pub struct Shell {
    program: Program,
    /// Messages for the program, written by its writer thread (`spawn_writer`).
    stdin: Sender<Vec<u8>>,
    msgs: Receiver<Json>,
    /// What it may write to the worker's log ([`LogBudget`]).
    budget: Arc<LogBudget>,
    name: String,
    /// The program's pid, from the handshake.
    pub pid: u64,
    /// How long the program may go without a message while the worker waits on it
    /// ([`SUBPROCESS_TIMEOUT_KEY`]).
    timeout: Duration,
}

impl Shell {
    /// Starts `argv` for executor `e` and completes the handshake.
    pub fn start(
        shared: &Arc<Shared>,
        e: u32,
        argv: &[String],
        conf: &BTreeMap<String, String>,
    ) -> Result<Shell, String> {
        let topo = &shared.topo.topology;
        let name = topo.executor_name(ExecutorId(e));
        let (program, args) = argv.split_first().ok_or("empty command")?;
        // Checked by the topology's parser; a worker given an unchecked text refuses it here.
        let timeout = Duration::from_secs(subprocess_timeout_secs(conf)?);
        let mut command = Command::new(program);
        command
            .args(args)
            // A group of its own, so that ending the program ends what it started too
            // ([`Program`]).
            .process_group(0)
            .current_dir(&shared.base_dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let (child, serial) = process_tree::spawn_program(&mut command)
            .map_err(|err| format!("cannot start `{}`: {err}", argv.join(" ")))?;
        // From here on every early return kills it.
        let mut program = Program(child, serial);
        let child = &mut program.0;
        let stdout = child.stdout.take().ok_or("no stdout pipe")?;
        let budget = Arc::new(LogBudget::default());
        let stderr = child.stderr.take().ok_or("no stderr pipe")?;
        spawn_stderr_relay(stderr, &name, budget.clone(), std::io::stderr())
            .map_err(|err| format!("cannot start the stderr thread: {err}"))?;
        let msgs = spawn_reader(stdout, name.clone(), MAX_MESSAGE, budget.clone())
            .map_err(|err| format!("cannot start the reader thread: {err}"))?;
        let stdin = child.stdin.take().ok_or("no stdin pipe")?;

        let stdin = spawn_writer(stdin, &name)
            .map_err(|err| format!("cannot start the writer thread: {err}"))?;
        let mut shell = Shell {
            program,
            stdin,
            msgs,
            budget,
            name: name.clone(),
            pid: 0,
            timeout,
        };
        let pid_dir = shared.work_dir.join("pids").join(e.to_string());
        // Emptied first: a program started again finds only its own pid file there, not its
        // ended predecessor's.
        let _ = std::fs::remove_dir_all(&pid_dir);
        std::fs::create_dir_all(&pid_dir)
            .map_err(|err| format!("cannot create {}: {err}", pid_dir.display()))?;
        let task_to_component: serde_json::Map<String, Json> = topo
            .executor_components()
            .iter()
            .enumerate()
            .map(|(x, &c)| (x.to_string(), Json::from(topo.components[c].name.clone())))
            .collect();
        let component = topo
            .locate(ExecutorId(e))
            .map(|(c, _)| topo.components[c].name.clone())
            .unwrap_or_default();
        shell
            .send(&json!({
                "conf": conf,
                "pidDir": pid_dir.to_string_lossy(),
                "context": {
                    "task->component": task_to_component,
                    "taskid": e,
                    "componentid": component,
                    "stormid": topo.name,
                },
            }))
            .map_err(|err| format!("handshake: {err}"))?;
        match shell.msgs.recv_timeout(HANDSHAKE_TIMEOUT) {
            Ok(m) => match m.get("pid").and_then(Json::as_u64) {
                Some(pid) => shell.pid = pid,
                None => return Err(format!("handshake: expected {{\"pid\": N}}, got {m}")),
            },
            // Its output closed before it answered: it exited (or closed its stdout), which
            // is what to say, with its exit status — not a timeout it never reached.
            Err(RecvTimeoutError::Disconnected) => {
                return Err(format!(
                    "`{}` ended before it answered the multi-lang handshake: {}",
                    argv.join(" "),
                    shell.gone()
                ));
            }
            Err(RecvTimeoutError::Timeout) => {
                return Err(format!(
                    "`{}` did not answer the multi-lang handshake within {}s",
                    argv.join(" "),
                    HANDSHAKE_TIMEOUT.as_secs()
                ));
            }
        }
        Ok(shell)
    }

    /// Queues one message (JSON, then `end`) for the program; an error once the program's
    /// input is closed (it exited).
    pub fn send(&mut self, v: &Json) -> std::io::Result<()> {
        let mut m = serde_json::to_vec(v)?;
        m.extend_from_slice(b"\nend\n");
        self.stdin.send(m).map_err(|_| {
            std::io::Error::new(
                std::io::ErrorKind::BrokenPipe,
                "the program's input is closed",
            )
        })
    }

    /// Messages queued for the program and not yet written to it.
    fn queued(&self) -> usize {
        self.stdin.len()
    }

    fn alive(&mut self) -> bool {
        matches!(self.program.0.try_wait(), Ok(None))
    }

    /// What ended the program's side of the protocol: its exit, or (still running) a pipe
    /// it closed.
    fn gone(&mut self) -> ShellError {
        // Its pipes close as it exits, a moment before it can be reaped: waited for briefly,
        // so that an exit is not told as a closed pipe (and the exit status is said).
        let until = Instant::now() + Duration::from_millis(500);
        while matches!(self.program.0.try_wait(), Ok(None)) && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(10));
        }
        match self.program.0.try_wait() {
            Ok(None) => ShellError::Closed {
                name: self.name.clone(),
            },
            Ok(Some(status)) => ShellError::Exited {
                name: self.name.clone(),
                status: format!(" ({status})"),
            },
            Err(_) => ShellError::Exited {
                name: self.name.clone(),
                status: String::new(),
            },
        }
    }

    /// The error for a program silent for `silent` while the worker waited for `waited`.
    fn silent(&self, silent: Duration, waited: &'static str) -> ShellError {
        ShellError::Silent {
            name: self.name.clone(),
            pid: self.program.0.id(),
            // Rounded up to the tenth it is written with, so a program killed just past its
            // limit does not read as silent for exactly the limit.
            silent_s: (silent.as_secs_f64() * 10.0).ceil() / 10.0,
            limit_s: self.timeout.as_secs(),
            waited,
        }
    }
}

/// Ends executor `me` for `err`: said in the worker's log and kept in its counters. Its
/// program is killed when its [`Shell`] drops, right after.
fn end(shared: &Shared, me: u32, err: &ShellError) {
    tracing::error!("{err}");
    if let Some(c) = shared.counter(me)
        && let Ok(mut ended) = c.ended.lock()
    {
        *ended = Some(err.to_string());
    }
}

/// Longest wait before a restart: the wait doubles from the first (the component's
/// `topology.subprocess.restart.wait.ms`, default 1 s) up to it.
const RESTART_MAX: Duration = Duration::from_secs(30);
/// A program that ran this long before it ended was healthy: its next restart waits the
/// first wait again.
const RESTART_HEALTHY: Duration = Duration::from_secs(60);
/// Restarts allowed within [`RESTART_WINDOW`]: one more end within it and the worker gives
/// up on the executor.
const RESTART_LIMIT: usize = 5;
/// See [`RESTART_LIMIT`].
const RESTART_WINDOW: Duration = Duration::from_secs(300);

/// When an executor whose program ended (it exited, closed its pipes, or was killed for its
/// silence) starts it again. Storm ends the whole worker, which its supervisor starts again;
/// here the executor starts its own program again in place, the worker and its other
/// executors running on: after a wait that doubles from its first (`first`) up to
/// [`RESTART_MAX`] (back to the first once a program ran [`RESTART_HEALTHY`]), and not after
/// more than [`RESTART_LIMIT`] restarts within [`RESTART_WINDOW`]: a program that cannot stay
/// up is then left ended, and the executor reported as given up, rather than started for ever.
#[derive(Debug)]
struct Restarts {
    /// When each program ended, within the window.
    ends: std::collections::VecDeque<Instant>,
    /// The wait before the next restart.
    wait: Duration,
    /// The wait before a first restart (`hetsched_core::model::stream_code::RESTART_WAIT_KEY`).
    first: Duration,
}

impl Default for Restarts {
    fn default() -> Self {
        Self::first_after(Duration::from_secs(1))
    }
}

/// What [`Restarts::ended`] decided.
#[derive(Debug, PartialEq)]
enum Restart {
    /// Start the program again after this wait.
    After(Duration),
    /// Give up: this many ends within [`RESTART_WINDOW`].
    GiveUp(usize),
}

impl Restarts {
    /// Restarts of a program whose first restart waits `first`.
    fn first_after(first: Duration) -> Self {
        Self {
            ends: std::collections::VecDeque::new(),
            wait: first,
            first,
        }
    }

    /// Restarts of the program `code`, as its component's params say.
    fn of(code: &ProgramCode) -> Self {
        // Checked by the topology's parser; a worker given an unchecked text waits the default.
        restart_wait_ms(&code.conf).map_or_else(
            |_| Self::default(),
            |ms| Self::first_after(Duration::from_millis(ms)),
        )
    }

    /// A program started at `started` ended at `now` (a program that could not be started
    /// counts as one that ended at once).
    fn ended(&mut self, started: Instant, now: Instant) -> Restart {
        if now.saturating_duration_since(started) >= RESTART_HEALTHY {
            self.wait = self.first;
        }
        while self
            .ends
            .front()
            .is_some_and(|&t| now.saturating_duration_since(t) >= RESTART_WINDOW)
        {
            self.ends.pop_front();
        }
        self.ends.push_back(now);
        if self.ends.len() > RESTART_LIMIT {
            return Restart::GiveUp(self.ends.len());
        }
        let wait = self.wait;
        self.wait = (self.wait * 2).min(RESTART_MAX);
        Restart::After(wait)
    }
}

/// A `command` component's program, as its executor starts it (again).
#[derive(Clone, Debug)]
pub struct ProgramCode {
    /// The command line.
    pub argv: Vec<String>,
    /// The component's `params`, the handshake's `conf`.
    pub conf: BTreeMap<String, String>,
}

/// Executor `me`'s program as its worker started it, or, where it could not start (a program
/// that is not there, say), as after a program that ended at once: said in the log and the
/// executor's `ended`, and started again as [`Restarts`] says, until the worker gives up on it
/// — the worker and its other executors run on (before, the worker failed to start, and every
/// executor of it with it).
fn first_start(
    shared: &Arc<Shared>,
    me: u32,
    counters: &ExecutorCounters,
    code: &ProgramCode,
    restarts: &mut Restarts,
    shell: Result<Shell, String>,
) -> Option<Shell> {
    match shell {
        Ok(shell) => Some(shell),
        Err(err) => {
            let why = format!("{}: {err}", shell_name(shared, me));
            tracing::error!("{why}");
            if let Ok(mut ended) = counters.ended.lock() {
                *ended = Some(why);
            }
            restart(shared, me, counters, code, restarts, Instant::now())
        }
    }
}

/// After executor `me`'s program (started at `started`) ended: waits as [`Restarts`] says and
/// starts the program again, with a fresh handshake under the same task id. `None` when the
/// worker stops or the executor moves meanwhile, or when the worker gives up on it (then said
/// in its log and its counters: `ended`, `gave_up`).
fn restart(
    shared: &Arc<Shared>,
    me: u32,
    counters: &ExecutorCounters,
    code: &ProgramCode,
    restarts: &mut Restarts,
    mut started: Instant,
) -> Option<Shell> {
    let name = shared.topo.topology.executor_name(ExecutorId(me));
    let gone = || shared.stopping() || counters.moved.load(Ordering::Acquire);
    loop {
        let wait = match restarts.ended(started, Instant::now()) {
            Restart::After(wait) => wait,
            Restart::GiveUp(ends) => {
                let why = format!(
                    "{name}: the program ended {ends} times within {} s (at most {RESTART_LIMIT} restarts): not started again",
                    RESTART_WINDOW.as_secs()
                );
                tracing::error!("{why}");
                counters.gave_up.store(true, Ordering::Relaxed);
                if let Ok(mut ended) = counters.ended.lock() {
                    let last = ended.take().unwrap_or_default();
                    *ended = Some(if last.is_empty() {
                        why
                    } else {
                        format!("{why}; last: {last}")
                    });
                }
                return None;
            }
        };
        tracing::warn!(
            "{name}: starting the program again in {:.1} s",
            wait.as_secs_f64()
        );
        let until = Instant::now() + wait;
        while Instant::now() < until {
            if gone() {
                return None;
            }
            std::thread::sleep(
                until
                    .saturating_duration_since(Instant::now())
                    .min(Duration::from_millis(50)),
            );
        }
        if gone() {
            return None;
        }
        started = Instant::now();
        bump(&counters.restarts, 1);
        match Shell::start(shared, me, &code.argv, &code.conf) {
            Ok(shell) => {
                tracing::warn!(
                    "{name}: the program started again (pid {}, restart {})",
                    shell.program.0.id(),
                    counters.restarts.load(Ordering::Relaxed)
                );
                return Some(shell);
            }
            Err(err) => {
                let why = format!("{name}: cannot start the program again: {err}");
                tracing::error!("{why}");
                if let Ok(mut ended) = counters.ended.lock() {
                    *ended = Some(why);
                }
            }
        }
    }
}

/// Starts the thread that reads the program's messages from `stdout`, into a queue of at most
/// [`MESSAGE_QUEUE`]: once it is full the thread stops reading, the pipe fills and the program
/// blocks on its writes, so a program emitting faster than its executor passes tuples on is
/// slowed down rather than queued in memory without bound. A message longer than `max` bytes
/// ends the reading (and so the program): no line, nor the text before `end`, is kept past it.
fn spawn_reader(
    stdout: impl std::io::Read + Send + 'static,
    name: String,
    max: usize,
    budget: Arc<LogBudget>,
) -> std::io::Result<Receiver<Json>> {
    let (tx, msgs) = bounded(MESSAGE_QUEUE);
    std::thread::Builder::new()
        .name(format!("{name}-stdout"))
        .spawn(move || {
            let mut r = BufReader::new(stdout);
            let mut text = String::new();
            let mut line = String::new();
            loop {
                line.clear();
                // Room for the rest of the message and an `end` line after it.
                let left = max.saturating_sub(text.len()) + "end\r\n".len();
                match (&mut r).take(left as u64).read_line(&mut line) {
                    Ok(0) => return,
                    Ok(_) => {}
                    Err(err) => {
                        tracing::error!("{name}: cannot read the program's output: {err}");
                        return;
                    }
                }
                if line.trim_end_matches(['\n', '\r']) == "end" {
                    match serde_json::from_str::<Json>(&text) {
                        Ok(v) => {
                            if tx.send(v).is_err() {
                                return;
                            }
                        }
                        Err(err) => {
                            // Said within the program's log budget, and only its start: a
                            // program printing to stdout must not copy it all to the log.
                            let (pass, left_out) = budget.take(text.len().min(200));
                            if left_out > 0 {
                                tracing::warn!("{}", LogBudget::notice(&name, left_out));
                            }
                            if pass {
                                let head: String = text.trim().chars().take(200).collect();
                                tracing::warn!("{name}: not a multi-lang message ({err}): {head}");
                            }
                        }
                    }
                    text.clear();
                } else if text.len() + line.len() > max {
                    tracing::error!(
                        "{name}: the program wrote more than {max} bytes without a line `end` \
                         (a multi-lang message at most; anything else on stdout breaks the \
                         protocol): stopped"
                    );
                    return;
                } else {
                    text.push_str(&line);
                }
            }
        })?;
    Ok(msgs)
}

/// Longest piece of a program's stderr line read at once (a longer line goes on in pieces, each
/// counted against the budget), so a line without an end cannot grow the relay's memory.
const MAX_LOG_LINE: usize = 16 << 10;

/// Starts the thread that passes the program's stderr on to `out` (the worker's stderr, which
/// its agent keeps in a file), within `budget`: a program printing in a loop must not fill the
/// node's disk. It reads on past the budget, dropping, so the program never blocks on stderr.
fn spawn_stderr_relay(
    stderr: impl std::io::Read + Send + 'static,
    name: &str,
    budget: Arc<LogBudget>,
    mut out: impl Write + Send + 'static,
) -> std::io::Result<()> {
    let name = name.to_string();
    std::thread::Builder::new()
        .name(format!("{name}-stderr"))
        .spawn(move || {
            let mut r = BufReader::new(stderr);
            let mut line = Vec::new();
            loop {
                line.clear();
                match (&mut r)
                    .take(MAX_LOG_LINE as u64)
                    .read_until(b'\n', &mut line)
                {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {}
                }
                let (pass, left_out) = budget.take(line.len());
                if left_out > 0 {
                    let _ = writeln!(out, "{}", LogBudget::notice(&name, left_out));
                }
                if pass {
                    if !line.ends_with(b"\n") {
                        line.push(b'\n');
                    }
                    let _ = out.write_all(&line);
                }
            }
        })?;
    Ok(())
}

/// What a program may write to the worker's log: [`LOG_BUDGET`] bytes per [`LOG_WINDOW`], its
/// stderr and its `log` messages together; what is over is counted and said once the next
/// window opens.
#[derive(Debug)]
pub struct LogBudget {
    /// (window start, bytes written in it, bytes left out in it).
    state: std::sync::Mutex<(Instant, u64, u64)>,
}

impl Default for LogBudget {
    fn default() -> Self {
        Self {
            state: std::sync::Mutex::new((Instant::now(), 0, 0)),
        }
    }
}

impl LogBudget {
    /// Whether `n` more bytes may be written now, and the bytes left out in the window that just
    /// ended (to be said), if one did.
    fn take(&self, n: usize) -> (bool, u64) {
        let Ok(mut s) = self.state.lock() else {
            return (false, 0);
        };
        let mut left_out = 0;
        if s.0.elapsed() >= LOG_WINDOW {
            left_out = s.2;
            *s = (Instant::now(), 0, 0);
        }
        let n = n as u64;
        if s.1.saturating_add(n) <= LOG_BUDGET {
            s.1 += n;
            (true, left_out)
        } else {
            s.2 = s.2.saturating_add(n);
            (false, left_out)
        }
    }

    fn notice(name: &str, left_out: u64) -> String {
        format!(
            "{name}: {left_out} bytes of the program's stderr and log left out (over {LOG_BUDGET} bytes per {}s)",
            LOG_WINDOW.as_secs()
        )
    }
}

/// Starts the thread that writes the executor's messages to the program's `stdin`, so the
/// executor never blocks on a program that is not reading (it would then not read the program's
/// output either, and the two would wait on each other once the output queue is full).
fn spawn_writer(stdin: ChildStdin, name: &str) -> std::io::Result<Sender<Vec<u8>>> {
    let (tx, rx) = unbounded::<Vec<u8>>();
    std::thread::Builder::new()
        .name(format!("{name}-stdin"))
        .spawn(move || {
            let mut w = BufWriter::new(stdin);
            while let Ok(m) = rx.recv() {
                if w.write_all(&m).is_err() {
                    return;
                }
                if rx.is_empty() && w.flush().is_err() {
                    return;
                }
            }
        })?;
    Ok(tx)
}

fn values(v: Option<&Json>) -> Vec<Value> {
    v.and_then(Json::as_array)
        .map(|a| a.iter().map(Value::from_json).collect())
        .unwrap_or_default()
}

fn log(shell: &Shell, m: &Json) {
    let text = m.get("msg").and_then(Json::as_str).unwrap_or("");
    let (pass, left_out) = shell.budget.take(text.len());
    if left_out > 0 {
        tracing::warn!("{}", LogBudget::notice(&shell.name, left_out));
    }
    if pass {
        tracing::info!(target: "multilang", "{}: {text}", shell.name);
    }
}

/// A bolt input handed to the program and not yet acked or failed by it.
#[derive(Debug)]
struct InFlight {
    root: u64,
    edge: u64,
    emitted_ns: u64,
    /// XOR of the edges the program emitted anchored to it.
    xor: u64,
    /// When the worker stops waiting on the program's ack: its tree's timeout after the input
    /// reached the bolt ([`TreeTimeouts`]).
    deadline: Instant,
}

/// A bolt's inputs handed to its program and not yet acked or failed by it, by id: ids
/// increase, so the first is the oldest.
#[derive(Debug, Default)]
struct Unacked(BTreeMap<u64, InFlight>);

impl Unacked {
    /// Whether the bolt may take more input now: fewer than `max` inputs are unacked, after
    /// forgetting the oldest ones while they belong to untracked trees (no spout waits on
    /// them, so holding up the topology for them would stall an unreliable stream for a
    /// program that never acks). Forgotten inputs are appended to `gone`.
    fn room(&mut self, max: usize, gone: &mut Vec<InFlight>) -> bool {
        while self.0.len() >= max {
            match self.0.first_entry() {
                Some(e) if e.get().root == 0 => gone.push(e.remove()),
                _ => return false,
            }
        }
        true
    }

    /// Removes the inputs whose deadline is not after `now`, into `gone`.
    fn expire(&mut self, now: Instant, gone: &mut Vec<InFlight>) {
        if !self.0.values().any(|f| f.deadline <= now) {
            return;
        }
        let (old, keep) = std::mem::take(&mut self.0)
            .into_iter()
            .partition(|(_, f)| f.deadline <= now);
        self.0 = keep;
        gone.extend(old.into_values());
    }
}

/// How long each spout's trees live before the spout fails them (its `timeout`), so a bolt
/// knows when the tree of an input it holds has timed out.
struct TreeTimeouts(Vec<Duration>);

impl TreeTimeouts {
    fn new(shared: &Shared) -> Self {
        let topo = &shared.topo;
        TreeTimeouts(
            topo.code
                .iter()
                .map(|code| match code {
                    ComponentCode::Builtin(b) => {
                        Duration::from_nanos(crate::worker::spout_settings(b).timeout_ns)
                    }
                    ComponentCode::Command { .. } => SHELL_TIMEOUT,
                })
                .collect(),
        )
    }

    /// The timeout of tree `root`'s spout; [`UNTRACKED_TIMEOUT`] for an untracked tree (0).
    fn of(&self, shared: &Shared, root: u64) -> Duration {
        AckMsg::spout_of(root)
            .and_then(|spout| shared.components.get(spout as usize))
            .and_then(|&c| self.0.get(c))
            .copied()
            .unwrap_or(UNTRACKED_TIMEOUT)
    }
}

/// A message id the worker gave an input (`"17"`), as the program sends it back (a string,
/// or a number from a library that converted it).
fn input_id(v: &Json) -> Option<u64> {
    match v {
        Json::String(s) => s.parse().ok(),
        other => other.as_u64(),
    }
}

/// A bolt's figures that it says to the worker's log at most once a [`LOG_WINDOW`].
struct ExpiryNotice {
    said: Option<Instant>,
    failed: u64,
    forgotten: u64,
}

impl ExpiryNotice {
    fn say(&mut self, name: &str, force: bool) {
        if self.failed + self.forgotten == 0
            || (!force && self.said.is_some_and(|t| t.elapsed() < LOG_WINDOW))
        {
            return;
        }
        self.said = Some(Instant::now());
        tracing::warn!(
            "{name}: the program neither acked nor failed {} inputs in time: {} failed at \
             their tuple tree's timeout (their spouts replay them), {} of untracked trees \
             forgotten past {MAX_UNACKED} unacked",
            self.failed + self.forgotten,
            self.failed,
            self.forgotten
        );
        self.failed = 0;
        self.forgotten = 0;
    }
}

/// Runs a multi-lang bolt: inputs go to the program, its commands come back. When the
/// program ends (it exits, or stays silent past its timeout: [`ShellError`]) it is killed, the
/// inputs it held are failed back to their spouts (which replay reliable trees), and it is
/// started again as [`Restarts`] says; the inbox waits meanwhile.
pub fn run_shell_bolt(
    shared: Arc<Shared>,
    me: u32,
    shell: Result<Shell, String>,
    code: ProgramCode,
    inbox: Receiver<Vec<Tuple>>,
) {
    let Some(counters) = shared.counter(me) else {
        return;
    };
    let mut em = Emitter::new(shared.clone(), me);
    let mut hist = Histogram::default();
    let mut restarts = Restarts::of(&code);
    let mut next = first_start(&shared, me, &counters, &code, &mut restarts, shell);
    while let Some(mut shell) = next.take() {
        let started = Instant::now();
        let mut unacked = Unacked::default();
        let result = bolt_loop(
            &shared,
            &counters,
            &mut shell,
            &inbox,
            &mut em,
            &mut hist,
            &mut unacked,
        );
        if let Err(err) = &result {
            end(&shared, me, err);
        }
        // Killed before the flush, which may wait on the topology.
        drop(shell);
        counters.unacked.store(0, Ordering::Relaxed);
        if result.is_err() {
            fail_back(&shared, &shell_name(&shared, me), unacked);
            em.flush();
            next = restart(&shared, me, &counters, &code, &mut restarts, started);
        } else {
            em.flush();
        }
    }
    if let Ok(mut h) = shared.latency.lock() {
        hist.drain_into(&mut h);
    }
}

fn shell_name(shared: &Shared, me: u32) -> String {
    shared.topo.topology.executor_name(ExecutorId(me))
}

/// Fails the tuple tree of input `f`, which the program will not ack, at its spout: the ack
/// message the spout's acker reads as a failure of the tree (the input's edge and the edges
/// anchored to it cleared), so a reliable spout replays the tree now. An input of no tree
/// (an unreliable spout's, root 0) has nothing to fail: false.
fn fail_tree(shared: &Arc<Shared>, f: &InFlight) -> bool {
    if f.root == 0 {
        return false;
    }
    shared.route_ack(
        AckMsg {
            root: f.root,
            xor: f.edge ^ f.xor,
            fail: true,
        },
        false,
    );
    true
}

/// Fails the inputs a bolt's program held when it ended back to their spouts, so the spouts
/// replay their trees now rather than at their timeout (the program that would have acked them
/// is gone; a new one knows nothing of them).
fn fail_back(shared: &Arc<Shared>, name: &str, unacked: Unacked) {
    let failed = unacked
        .0
        .into_values()
        .filter(|f| fail_tree(shared, f))
        .count() as u64;
    if failed > 0 {
        tracing::warn!(
            "{name}: {} the program held failed back to their spouts",
            hetsched_core::text::count(failed, "input")
        );
    }
}

fn bolt_loop(
    shared: &Arc<Shared>,
    counters: &ExecutorCounters,
    shell: &mut Shell,
    inbox: &Receiver<Vec<Tuple>>,
    em: &mut Emitter,
    hist: &mut Histogram,
    unacked: &mut Unacked,
) -> Result<(), ShellError> {
    let topo = &shared.topo.topology;
    let terminal = !em.has_outputs();
    let timeouts = TreeTimeouts::new(shared);
    let mut gone: Vec<InFlight> = Vec::new();
    let mut notice = ExpiryNotice {
        said: None,
        failed: 0,
        forgotten: 0,
    };
    let mut next_id: u64 = 0;
    let mut last_heartbeat = Instant::now();
    // When the oldest heartbeat the program has not answered was sent. Any message answers
    // (as in Storm's ShellBolt), so a program busy emitting and acking is never silent; and
    // silence counts from a question only, so time the executor itself spent blocked (on a
    // full downstream inbox, sending no heartbeat) is not held against the program.
    let mut asked: Option<Instant> = None;
    let msgs = shell.msgs.clone();
    let no_input = never();
    while !shared.stopping() {
        counters
            .unacked
            .store(unacked.0.len() as u64, Ordering::Relaxed);
        if inbox.is_empty() && msgs.is_empty() {
            em.flush();
            if let Ok(mut h) = shared.latency.lock() {
                hist.drain_into(&mut h);
            }
        }
        if last_heartbeat.elapsed() >= HEARTBEAT {
            last_heartbeat = Instant::now();
            let sent = shell.send(&json!({
                "id": "-1", "comp": Json::Null, "stream": "__heartbeat", "task": -1, "tuple": []
            }));
            if sent.is_err() || !shell.alive() {
                return Err(shell.gone());
            }
            let since = *asked.get_or_insert(last_heartbeat);
            // A message waiting to be handled answers too: then the executor was slow, not
            // the program.
            if msgs.is_empty() && since.elapsed() > shell.timeout {
                return Err(shell.silent(since.elapsed(), "an answer to its heartbeats"));
            }
            unacked.expire(Instant::now(), &mut gone);
        }
        // Input only while the program keeps up with what it was given, so the writer's queue
        // stays bounded and back-pressure reaches the senders; and while it holds fewer than
        // MAX_UNACKED inputs unacked, so a program that never acks cannot grow the worker.
        let input = if shell.queued() < MAX_QUEUED_INPUT && unacked.room(MAX_UNACKED, &mut gone) {
            inbox
        } else {
            &no_input
        };
        for f in gone.drain(..) {
            // Its tree has timed out at its spout (the input reached this bolt after the
            // tree began, and waited the tree's whole timeout here), which replays it: the
            // fail only ends it at once where the spout's clock started later (a tree handed
            // over with its spout). A fail for a tree the spout no longer holds is ignored.
            if fail_tree(shared, &f) {
                notice.failed += 1;
            } else {
                notice.forgotten += 1;
            }
            bump(&counters.expired, 1);
        }
        notice.say(&shell.name, false);
        select! {
            recv(input) -> b => {
                let Ok(batch) = b else { break };
                let now = if terminal { now_ns() } else { 0 };
                let received = Instant::now();
                for t in batch {
                    if let Some(c) = counters.received_from.get(t.src as usize) {
                        bump(c, 1);
                    }
                    if terminal {
                        hist.record(now.saturating_sub(t.emitted_ns) / 1000);
                    }
                    next_id += 1;
                    let comp = topo.locate(ExecutorId(t.src)).map(|(c, _)| topo.components[c].name.clone());
                    let tuple: Vec<Json> = t.values.iter().map(Value::to_json).collect();
                    let msg = json!({"id": next_id.to_string(), "comp": comp, "stream": "default", "task": t.src, "tuple": tuple});
                    let deadline = received + timeouts.of(shared, t.root);
                    unacked.0.insert(next_id, InFlight { root: t.root, edge: t.edge, emitted_ns: t.emitted_ns, xor: 0, deadline });
                    if shell.send(&msg).is_err() {
                        return Err(shell.gone());
                    }
                }
            }
            recv(msgs) -> m => {
                let Ok(m) = m else {
                    return Err(shell.gone());
                };
                match m.get("command").and_then(Json::as_str) {
                    Some("emit") => {
                        // An anchor the worker no longer holds (acked, failed or expired)
                        // anchors nothing: the tuple goes out in no tree, as an unreliable one.
                        let anchor = m.get("anchors").and_then(Json::as_array).and_then(|a| {
                            a.iter().filter_map(input_id).find(|id| unacked.0.contains_key(id))
                        });
                        let (root, ts) = anchor
                            .and_then(|id| unacked.0.get(&id))
                            .map_or((0, now_ns()), |f| (f.root, f.emitted_ns));
                        let mut targets = Vec::new();
                        let xor = em.emit(values(m.get("tuple")), root, ts, Some(&mut targets));
                        if let Some(f) = anchor.and_then(|id| unacked.0.get_mut(&id)) {
                            f.xor ^= xor;
                        }
                        if m.get("need_task_ids").and_then(Json::as_bool) != Some(false) {
                            let _ = shell.send(&json!(targets));
                        }
                    }
                    Some("ack") | Some("fail") => {
                        let fail = m.get("command").and_then(Json::as_str) == Some("fail");
                        if let Some(f) = m.get("id").and_then(input_id).and_then(|id| unacked.0.remove(&id))
                            && f.root != 0
                        {
                            shared.route_ack(AckMsg { root: f.root, xor: f.edge ^ f.xor, fail }, false);
                        }
                    }
                    Some("sync") => {}
                    Some("log") => log(shell, &m),
                    Some("error") => tracing::warn!("{}: error: {}", shell.name, m.get("msg").and_then(Json::as_str).unwrap_or("")),
                    Some("metrics") => {}
                    other => tracing::warn!("{}: unknown command {other:?}", shell.name),
                }
                // Answered, once handled (an emit may have waited on the topology meanwhile).
                asked = None;
            }
            default(Duration::from_millis(100)) => {}
        }
    }
    notice.say(&shell.name, true);
    Ok(())
}

/// Runs a multi-lang spout: `next`, `ack` and `fail` go to the program; it emits and syncs.
/// When the program ends (it exits, or stays silent past its timeout: [`ShellError`]) it is
/// killed and started again as [`Restarts`] says. Its trees in flight are forgotten then: the
/// new program knows nothing of the old one's message ids (acks for them are ignored), and
/// what its source replays is its own affair, as after Storm's worker restart.
pub fn run_shell_spout(
    shared: Arc<Shared>,
    me: u32,
    shell: Result<Shell, String>,
    code: ProgramCode,
    acks: Receiver<AckMsg>,
) {
    let Some(counters) = shared.counter(me) else {
        return;
    };
    let mut em = Emitter::new(shared.clone(), me);
    // One tracker across restarts: its roots keep increasing, so a late ack for a forgotten
    // tree cannot settle a new one.
    let mut trees = SpoutTrees {
        tracker: Tracker::default(),
        ids: HashMap::new(),
        next_msg: 0,
    };
    let mut restarts = Restarts::of(&code);
    let mut next = first_start(&shared, me, &counters, &code, &mut restarts, shell);
    while let Some(mut shell) = next.take() {
        let started = Instant::now();
        let result = spout_loop(
            &shared, me, &counters, &mut shell, &acks, &mut em, &mut trees,
        );
        if let Err(err) = &result {
            end(&shared, me, err);
        }
        drop(shell);
        em.flush();
        if result.is_err() {
            let lost = trees.tracker.pending.len();
            trees.tracker.pending.clear();
            trees.ids.clear();
            if lost > 0 {
                tracing::warn!(
                    "{}: {} in flight forgotten with the program",
                    shell_name(&shared, me),
                    hetsched_core::text::count(lost as u64, "tuple tree")
                );
            }
            next = restart(&shared, me, &counters, &code, &mut restarts, started);
        }
    }
}

/// A multi-lang spout's trees in flight and the message ids its program gave them.
struct SpoutTrees {
    tracker: Tracker,
    ids: HashMap<u64, Json>,
    next_msg: u64,
}

fn spout_loop(
    shared: &Arc<Shared>,
    me: u32,
    counters: &ExecutorCounters,
    shell: &mut Shell,
    acks: &Receiver<AckMsg>,
    em: &mut Emitter,
    trees: &mut SpoutTrees,
) -> Result<(), ShellError> {
    let mut last_expire = Instant::now();
    while !shared.stopping() && !counters.moved.load(Ordering::Acquire) {
        let mut done: Vec<(u64, bool)> = Vec::new();
        while let Ok(a) = acks.try_recv() {
            if let Some(d) = trees.tracker.apply(a) {
                done.push(d);
            }
        }
        if last_expire.elapsed() >= Duration::from_millis(100) {
            last_expire = Instant::now();
            done.extend(
                trees
                    .tracker
                    .expire(SHELL_TIMEOUT)
                    .into_iter()
                    .map(|m| (m, false)),
            );
        }
        for (msg, ok) in done {
            settle(shared, me, counters, shell, em, trees, msg, ok)?;
        }
        if trees.tracker.pending.len() >= SHELL_MAX_PENDING {
            em.flush();
            match acks.recv_timeout(Duration::from_millis(20)) {
                Ok(a) => {
                    if let Some((msg, ok)) = trees.tracker.apply(a) {
                        settle(shared, me, counters, shell, em, trees, msg, ok)?;
                    }
                }
                Err(RecvTimeoutError::Disconnected) => return Ok(()),
                Err(RecvTimeoutError::Timeout) => {}
            }
            continue;
        }
        if shell.send(&json!({"command": "next"})).is_err() {
            return Err(shell.gone());
        }
        let emitted = read_until_sync(shared, shell, em, trees, me, "its sync after next")?;
        if emitted == 0 {
            // Storm sleeps a little when `next` emitted nothing.
            em.flush();
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    Ok(())
}

/// Counts tree `msg` done (`ok`) or failed and tells the program, then reads its answer.
#[allow(clippy::too_many_arguments)]
fn settle(
    shared: &Shared,
    me: u32,
    counters: &ExecutorCounters,
    shell: &mut Shell,
    em: &mut Emitter,
    trees: &mut SpoutTrees,
    msg: u64,
    ok: bool,
) -> Result<(), ShellError> {
    bump(
        if ok {
            &counters.acked
        } else {
            &counters.failed
        },
        1,
    );
    let Some(id) = trees.ids.remove(&msg) else {
        return Ok(());
    };
    let (command, waited) = if ok {
        ("ack", "its sync after ack")
    } else {
        ("fail", "its sync after fail")
    };
    if shell.send(&json!({"command": command, "id": id})).is_err() {
        return Err(shell.gone());
    }
    read_until_sync(shared, shell, em, trees, me, waited).map(|_| ())
}

/// Reads the program's messages up to its `sync`; returns the tuples it emitted (or those so
/// far when the worker stops). An error when the program exits, or writes nothing for longer
/// than its timeout while the worker waits (`waited` says for what).
fn read_until_sync(
    shared: &Shared,
    shell: &mut Shell,
    em: &mut Emitter,
    trees: &mut SpoutTrees,
    me: u32,
    waited: &'static str,
) -> Result<u64, ShellError> {
    let mut emitted = 0;
    // Since the command, or the last message once handled (an emit may have waited on the
    // topology meanwhile, which is not the program's silence).
    let mut since = Instant::now();
    loop {
        let m = match shell.msgs.recv_timeout(Duration::from_millis(200)) {
            Ok(m) => m,
            Err(RecvTimeoutError::Timeout) => {
                if shared.stopping() {
                    return Ok(emitted);
                }
                if !shell.alive() {
                    return Err(shell.gone());
                }
                if since.elapsed() > shell.timeout {
                    return Err(shell.silent(since.elapsed(), waited));
                }
                continue;
            }
            Err(RecvTimeoutError::Disconnected) => return Err(shell.gone()),
        };
        match m.get("command").and_then(Json::as_str) {
            Some("sync") => return Ok(emitted),
            Some("emit") => {
                let vals = values(m.get("tuple"));
                let mut targets = Vec::new();
                let ts = now_ns();
                match m.get("id").filter(|id| !id.is_null()) {
                    Some(id) => {
                        let root = trees.tracker.new_root(me);
                        let xor = em.emit(vals, root, ts, Some(&mut targets));
                        trees.next_msg += 1;
                        let msg = trees.next_msg;
                        if xor != 0 {
                            trees.ids.insert(msg, id.clone());
                            trees.tracker.pending.insert(
                                root,
                                Pending {
                                    xor,
                                    at: Instant::now(),
                                    msg,
                                },
                            );
                        }
                        // Else no receiver: nothing to track (an ack now would interleave with
                        // this read's `sync`).
                    }
                    None => {
                        em.emit(vals, 0, ts, Some(&mut targets));
                    }
                }
                emitted += 1;
                if m.get("need_task_ids").and_then(Json::as_bool) != Some(false) {
                    let _ = shell.send(&json!(targets));
                }
            }
            Some("log") => log(shell, &m),
            Some("error") => tracing::warn!(
                "{}: error: {}",
                shell.name,
                m.get("msg").and_then(Json::as_str).unwrap_or("")
            ),
            Some("metrics") => {}
            other => tracing::warn!("{}: unknown command {other:?}", shell.name),
        }
        since = Instant::now();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};

    /// A program's stdout: `pattern` over and over, `total` bytes in all, counting what was read.
    struct Endless {
        pattern: &'static [u8],
        total: u64,
        read: Arc<AtomicU64>,
    }

    impl std::io::Read for Endless {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            let at = self.read.load(Ordering::Relaxed);
            let n = (self.total.saturating_sub(at) as usize).min(buf.len());
            for (i, b) in buf[..n].iter_mut().enumerate() {
                *b = self.pattern[(at as usize + i) % self.pattern.len()];
            }
            self.read.fetch_add(n as u64, Ordering::Relaxed);
            Ok(n)
        }
    }

    /// What `reader` had read once it stopped reading (or read everything), with its messages.
    fn read_until_still(pattern: &'static [u8], total: u64, max: usize) -> (u64, Receiver<Json>) {
        let read = Arc::new(AtomicU64::new(0));
        let out = Endless {
            pattern,
            total,
            read: read.clone(),
        };
        let msgs =
            spawn_reader(out, "test".into(), max, Arc::new(LogBudget::default())).expect("reader");
        let mut last = u64::MAX;
        loop {
            std::thread::sleep(Duration::from_millis(300));
            let now = read.load(Ordering::Relaxed);
            if now == last || now == total {
                return (now, msgs);
            }
            last = now;
        }
    }

    #[test]
    fn a_program_that_writes_without_end_is_not_read_past_the_largest_message() {
        let max = 64 << 10;
        // Lines that never end a message (a program printing to stdout), then one endless line.
        for pattern in [&b"debug output\n"[..], b"x"] {
            let (read, msgs) = read_until_still(pattern, 8 << 20, max);
            assert!(
                read <= (max + (16 << 10)) as u64,
                "{read} bytes read into one message"
            );
            assert!(msgs.try_recv().is_err(), "no message from it");
        }
        // Messages up to the largest pass.
        let (_, msgs) = read_until_still(b"{\"command\": \"sync\"}\nend\n", 1 << 10, max);
        assert_eq!(msgs.try_recv().ok(), Some(json!({"command": "sync"})));
    }

    /// A writer counting what it was given.
    #[derive(Clone, Default)]
    struct Counted(Arc<std::sync::Mutex<Vec<u8>>>);

    impl Write for Counted {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            if let Ok(mut v) = self.0.lock() {
                v.extend_from_slice(buf);
            }
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_program_flooding_its_stderr_writes_at_most_its_budget_to_the_worker_log() {
        let read = Arc::new(AtomicU64::new(0));
        let total = 64 << 20;
        let flood = Endless {
            pattern: b"Traceback (most recent call last): something went wrong\n",
            total,
            read: read.clone(),
        };
        let out = Counted::default();
        spawn_stderr_relay(flood, "b#0", Arc::new(LogBudget::default()), out.clone())
            .expect("relay");
        let start = Instant::now();
        while read.load(Ordering::Relaxed) < total {
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "the relay stopped reading: the program would block on its stderr"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        std::thread::sleep(Duration::from_millis(100));
        let written = out.0.lock().map(|v| v.len()).unwrap_or(usize::MAX);
        assert!(
            written as u64 <= LOG_BUDGET + 4096,
            "{written} bytes of a {total}-byte flood reached the worker's log"
        );
        assert!(written > 0, "the first lines are passed on");
    }

    #[test]
    fn a_program_whose_messages_are_not_taken_is_not_read_ahead_without_bound() {
        let (read, msgs) = read_until_still(
            b"{\"command\": \"emit\", \"tuple\": [\"w\"], \"need_task_ids\": false}\nend\n",
            16 << 20,
            MAX_MESSAGE,
        );
        assert!(read < 1 << 20, "{read} bytes of messages read ahead");
        assert!(msgs.try_recv().is_ok());
    }

    fn in_flight(root: u64, deadline: Instant) -> InFlight {
        InFlight {
            root,
            edge: 1,
            emitted_ns: 0,
            xor: 0,
            deadline,
        }
    }

    #[test]
    fn past_the_most_unacked_inputs_untracked_ones_are_forgotten_and_a_reliable_one_holds_input_back()
     {
        let later = Instant::now() + Duration::from_secs(60);
        let reliable = (7 << 48) | 1;
        let mut u = Unacked::default();
        for id in 1..=4 {
            u.0.insert(id, in_flight(0, later));
        }
        u.0.insert(5, in_flight(reliable, later));
        u.0.insert(6, in_flight(0, later));
        let mut gone = Vec::new();
        assert!(u.room(10, &mut gone));
        assert!(gone.is_empty());
        // Six held, room for input below two: the four oldest (untracked) are forgotten,
        // then the oldest is a reliable tree's, which a spout waits on: no more input.
        assert!(!u.room(2, &mut gone));
        assert_eq!(gone.len(), 4);
        assert!(gone.iter().all(|f| f.root == 0));
        assert_eq!(u.0.keys().copied().collect::<Vec<_>>(), [5, 6]);
        assert!(!u.room(2, &mut gone), "still held back");
        // The program acks it: input again.
        u.0.remove(&5);
        assert!(u.room(2, &mut gone));
        assert_eq!(gone.len(), 4);
    }

    #[test]
    fn inputs_past_their_deadline_expire_and_the_others_stay() {
        let now = Instant::now();
        let mut u = Unacked::default();
        u.0.insert(1, in_flight(1 << 48, now + Duration::from_secs(5)));
        u.0.insert(2, in_flight(1 << 48, now));
        u.0.insert(3, in_flight(0, now - Duration::from_secs(1)));
        u.0.insert(4, in_flight(2 << 48, now + Duration::from_secs(1)));
        let mut gone = Vec::new();
        u.expire(now, &mut gone);
        assert_eq!(gone.len(), 2);
        assert_eq!(u.0.keys().copied().collect::<Vec<_>>(), [1, 4]);
        u.expire(now, &mut gone);
        assert_eq!(gone.len(), 2, "nothing more");
        u.expire(now + Duration::from_secs(5), &mut gone);
        assert!(u.0.is_empty());
        assert_eq!(gone.len(), 4);
    }

    /// `topology.subprocess.restart.wait.ms` sets the first wait; it doubles from there, back
    /// to it after a healthy minute, and the limit is the same.
    #[test]
    fn a_programs_restart_wait_starts_where_its_params_say() {
        let t0 = Instant::now();
        let ms = |n: u64| Duration::from_millis(n);
        let code = ProgramCode {
            argv: vec!["true".into()],
            conf: BTreeMap::from([(
                "topology.subprocess.restart.wait.ms".to_string(),
                "100".to_string(),
            )]),
        };
        let mut r = Restarts::of(&code);
        for want in [100, 200, 400, 800, 1600] {
            assert_eq!(r.ended(t0, t0), Restart::After(ms(want)));
        }
        assert_eq!(r.ended(t0, t0), Restart::GiveUp(6));
        let mut r = Restarts::of(&code);
        assert_eq!(r.ended(t0, t0), Restart::After(ms(100)));
        assert_eq!(
            r.ended(t0, t0 + Duration::from_secs(60)),
            Restart::After(ms(100))
        );
    }

    #[test]
    fn restarts_wait_longer_each_time_reset_after_a_healthy_minute_and_give_up_past_the_limit() {
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        let mut r = Restarts::default();
        // A program ending at once: 1, 2, 4, 8, 16 s, then given up (5 restarts in 300 s).
        let mut now = 0;
        for want in [1, 2, 4, 8, 16] {
            assert_eq!(
                r.ended(at(now), at(now)),
                Restart::After(Duration::from_secs(want))
            );
            now += want;
        }
        assert_eq!(r.ended(at(now), at(now)), Restart::GiveUp(6));

        // The wait stops doubling at 30 s; ends spread past the window are not held against it.
        let mut r = Restarts::default();
        let mut waits = Vec::new();
        let mut now = 0;
        for _ in 0..12 {
            match r.ended(at(now), at(now + 50)) {
                Restart::After(w) => waits.push(w.as_secs()),
                Restart::GiveUp(n) => panic!("given up after {n} ends 50 s apart and more"),
            }
            now += 50 + waits.last().copied().unwrap_or(0) + 60;
        }
        assert_eq!(&waits[..7], [1, 2, 4, 8, 16, 30, 30]);

        // A program that ran a minute before it ended was healthy: back to 1 s.
        let mut r = Restarts::default();
        assert_eq!(
            r.ended(at(0), at(1)),
            Restart::After(Duration::from_secs(1))
        );
        assert_eq!(
            r.ended(at(2), at(3)),
            Restart::After(Duration::from_secs(2))
        );
        assert_eq!(
            r.ended(at(5), at(5 + 60)),
            Restart::After(Duration::from_secs(1))
        );
        assert_eq!(
            r.ended(at(66), at(67)),
            Restart::After(Duration::from_secs(2))
        );
    }

    #[test]
    fn an_input_id_is_read_as_the_worker_wrote_it_or_as_a_number() {
        assert_eq!(input_id(&json!("17")), Some(17));
        assert_eq!(input_id(&json!(17)), Some(17));
        assert_eq!(input_id(&json!("-1")), None);
        assert_eq!(input_id(&json!(["17"])), None);
    }
}
