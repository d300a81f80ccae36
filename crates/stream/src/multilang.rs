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
//! line `end` — a program printing to stdout — ends the executor, logged), and at most
//! `MESSAGE_QUEUE` messages are read ahead of the executor, so a program emitting faster than
//! the topology takes its tuples blocks on its output. The executor writes to the program
//! through a thread of its own, so it keeps reading the program's output while the program is
//! not reading its input; a bolt takes no more input while `MAX_QUEUED_INPUT` messages wait
//! to be written.
//!
//! Task ids are executor ids. Deviations: one output stream (`stream` in an emit is ignored,
//! every outgoing stream of the component gets the tuple); `direct` emits are sent as normal
//! emits; a tuple anchored to inputs of several different trees joins the first anchor's tree
//! only (the others are acked without it).

use crate::metrics::{Histogram, bump, now_ns};
use crate::tuple::{AckMsg, Tuple, Value};
use crate::worker::{Emitter, Pending, Shared, Tracker};
use crossbeam_channel::{Receiver, RecvTimeoutError, Sender, bounded, never, select, unbounded};
use hetsched_core::model::topology::ExecutorId;
use serde_json::{Value as Json, json};
use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead, BufReader, BufWriter, Read, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

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

/// A running multi-lang program.
#[derive(Debug)]
pub struct Shell {
    child: Child,
    /// Messages for the program, written by its writer thread (`spawn_writer`).
    stdin: Sender<Vec<u8>>,
    msgs: Receiver<Json>,
    /// What it may write to the worker's log ([`LogBudget`]).
    budget: Arc<LogBudget>,
    name: String,
    /// The program's pid, from the handshake.
    pub pid: u64,
}

impl Drop for Shell {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
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
        let mut child = Command::new(program)
            .args(args)
            .current_dir(&shared.base_dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|err| format!("cannot start `{}`: {err}", argv.join(" ")))?;
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
            child,
            stdin,
            msgs,
            budget,
            name: name.clone(),
            pid: 0,
        };
        let pid_dir = shared.work_dir.join("pids").join(e.to_string());
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
            Err(_) => {
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
        matches!(self.child.try_wait(), Ok(None))
    }
}

/// Starts the thread that reads the program's messages from `stdout`, into a queue of at most
/// [`MESSAGE_QUEUE`]: once it is full the thread stops reading, the pipe fills and the program
/// blocks on its writes, so a program emitting faster than its executor passes tuples on is
/// slowed down rather than queued in memory without bound. A message longer than `max` bytes
/// ends the reading (and so the executor): no line, nor the text before `end`, is kept past it.
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

/// A bolt input handed to the program and not yet acked.
struct InFlight {
    root: u64,
    edge: u64,
    emitted_ns: u64,
    xor: u64,
}

/// Runs a multi-lang bolt: inputs go to the program, its commands come back.
pub fn run_shell_bolt(shared: Arc<Shared>, me: u32, mut shell: Shell, inbox: Receiver<Vec<Tuple>>) {
    let Some(counters) = shared.counter(me) else {
        return;
    };
    let topo = &shared.topo.topology;
    let mut em = Emitter::new(shared.clone(), me);
    let terminal = !em.has_outputs();
    let mut hist = Histogram::default();
    let mut inflight: HashMap<String, InFlight> = HashMap::new();
    let mut next_id: u64 = 0;
    let mut last_heartbeat = Instant::now();
    let mut last_sync = Instant::now();
    let msgs = shell.msgs.clone();
    let no_input = never();
    let mut warned = false;
    while !shared.stopping() {
        if inbox.is_empty() && msgs.is_empty() {
            em.flush();
            if let Ok(mut h) = shared.latency.lock() {
                hist.drain_into(&mut h);
            }
        }
        if last_heartbeat.elapsed() >= HEARTBEAT {
            last_heartbeat = Instant::now();
            let _ = shell.send(&json!({
                "id": "-1", "comp": Json::Null, "stream": "__heartbeat", "task": -1, "tuple": []
            }));
            if last_sync.elapsed() > 10 * HEARTBEAT && !warned {
                tracing::warn!("{}: no heartbeat answer for 10 s", shell.name);
                warned = true;
            }
            if !shell.alive() {
                tracing::error!("{}: the program exited", shell.name);
                return;
            }
        }
        // Input only while the program keeps up with what it was given, so the writer's queue
        // stays bounded and back-pressure reaches the senders.
        let input = if shell.queued() < MAX_QUEUED_INPUT {
            &inbox
        } else {
            &no_input
        };
        select! {
            recv(input) -> b => {
                let Ok(batch) = b else { break };
                let now = if terminal { now_ns() } else { 0 };
                for t in batch {
                    if let Some(c) = counters.received_from.get(t.src as usize) {
                        bump(c, 1);
                    }
                    if terminal {
                        hist.record(now.saturating_sub(t.emitted_ns) / 1000);
                    }
                    next_id += 1;
                    let id = next_id.to_string();
                    let comp = topo.locate(ExecutorId(t.src)).map(|(c, _)| topo.components[c].name.clone());
                    let tuple: Vec<Json> = t.values.iter().map(Value::to_json).collect();
                    let msg = json!({"id": id, "comp": comp, "stream": "default", "task": t.src, "tuple": tuple});
                    inflight.insert(id, InFlight { root: t.root, edge: t.edge, emitted_ns: t.emitted_ns, xor: 0 });
                    if let Err(err) = shell.send(&msg) {
                        tracing::error!("{}: cannot write to the program: {err}", shell.name);
                        return;
                    }
                }
            }
            recv(msgs) -> m => {
                let Ok(m) = m else {
                    tracing::error!("{}: the program closed its output", shell.name);
                    return;
                };
                match m.get("command").and_then(Json::as_str) {
                    Some("emit") => {
                        let anchors: Vec<String> = m.get("anchors").and_then(Json::as_array).map(|a| {
                            a.iter().map(|x| x.as_str().map_or_else(|| x.to_string(), str::to_owned)).collect()
                        }).unwrap_or_default();
                        let anchor = anchors.iter().find_map(|a| inflight.get(a).map(|f| (a.clone(), f.root, f.emitted_ns)));
                        let (root, ts) = anchor.as_ref().map_or((0, now_ns()), |(_, r, ts)| (*r, *ts));
                        let mut targets = Vec::new();
                        let xor = em.emit(values(m.get("tuple")), root, ts, Some(&mut targets));
                        if let Some((a, _, _)) = anchor && let Some(f) = inflight.get_mut(&a) {
                            f.xor ^= xor;
                        }
                        if m.get("need_task_ids").and_then(Json::as_bool) != Some(false) {
                            let _ = shell.send(&json!(targets));
                        }
                    }
                    Some("ack") | Some("fail") => {
                        let fail = m.get("command").and_then(Json::as_str) == Some("fail");
                        let id = m.get("id").map(|x| x.as_str().map_or_else(|| x.to_string(), str::to_owned)).unwrap_or_default();
                        if let Some(f) = inflight.remove(&id) && f.root != 0 {
                            shared.route_ack(AckMsg { root: f.root, xor: f.edge ^ f.xor, fail }, false);
                        }
                    }
                    Some("sync") => { last_sync = Instant::now(); warned = false; }
                    Some("log") => log(&shell, &m),
                    Some("error") => tracing::warn!("{}: error: {}", shell.name, m.get("msg").and_then(Json::as_str).unwrap_or("")),
                    Some("metrics") => {}
                    other => tracing::warn!("{}: unknown command {other:?}", shell.name),
                }
            }
            default(Duration::from_millis(100)) => {}
        }
    }
    em.flush();
    if let Ok(mut h) = shared.latency.lock() {
        hist.drain_into(&mut h);
    }
}

/// Runs a multi-lang spout: `next`, `ack` and `fail` go to the program; it emits and syncs.
pub fn run_shell_spout(shared: Arc<Shared>, me: u32, mut shell: Shell, acks: Receiver<AckMsg>) {
    let Some(counters) = shared.counter(me) else {
        return;
    };
    let mut em = Emitter::new(shared.clone(), me);
    let mut tracker = Tracker::default();
    let mut ids: HashMap<u64, Json> = HashMap::new();
    let mut next_msg: u64 = 0;
    let mut last_expire = Instant::now();
    while !shared.stopping() && !counters.moved.load(std::sync::atomic::Ordering::Acquire) {
        let mut done: Vec<(u64, bool)> = Vec::new();
        while let Ok(a) = acks.try_recv() {
            if let Some(d) = tracker.apply(a) {
                done.push(d);
            }
        }
        if last_expire.elapsed() >= Duration::from_millis(100) {
            last_expire = Instant::now();
            done.extend(
                tracker
                    .expire(SHELL_TIMEOUT)
                    .into_iter()
                    .map(|m| (m, false)),
            );
        }
        for (msg, ok) in done {
            bump(
                if ok {
                    &counters.acked
                } else {
                    &counters.failed
                },
                1,
            );
            if let Some(id) = ids.remove(&msg) {
                let command = if ok { "ack" } else { "fail" };
                if shell.send(&json!({"command": command, "id": id})).is_err()
                    || !read_until_sync(
                        &shared,
                        &mut shell,
                        &mut em,
                        &mut tracker,
                        &mut ids,
                        &mut next_msg,
                        me,
                    )
                    .0
                {
                    return;
                }
            }
        }
        if tracker.pending.len() >= SHELL_MAX_PENDING {
            em.flush();
            match acks.recv_timeout(Duration::from_millis(20)) {
                Ok(a) => {
                    if let Some((msg, ok)) = tracker.apply(a) {
                        bump(
                            if ok {
                                &counters.acked
                            } else {
                                &counters.failed
                            },
                            1,
                        );
                        if let Some(id) = ids.remove(&msg) {
                            let command = if ok { "ack" } else { "fail" };
                            let _ = shell.send(&json!({"command": command, "id": id}));
                            read_until_sync(
                                &shared,
                                &mut shell,
                                &mut em,
                                &mut tracker,
                                &mut ids,
                                &mut next_msg,
                                me,
                            );
                        }
                    }
                }
                Err(RecvTimeoutError::Disconnected) => return,
                Err(RecvTimeoutError::Timeout) => {}
            }
            continue;
        }
        if shell.send(&json!({"command": "next"})).is_err() {
            tracing::error!("{}: the program exited", shell.name);
            return;
        }
        let (alive, emitted) = read_until_sync(
            &shared,
            &mut shell,
            &mut em,
            &mut tracker,
            &mut ids,
            &mut next_msg,
            me,
        );
        if !alive {
            return;
        }
        if emitted == 0 {
            // Storm sleeps a little when `next` emitted nothing.
            em.flush();
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    em.flush();
}

/// Reads the program's messages up to its `sync`; returns (still alive, tuples emitted).
fn read_until_sync(
    shared: &Shared,
    shell: &mut Shell,
    em: &mut Emitter,
    tracker: &mut Tracker,
    ids: &mut HashMap<u64, Json>,
    next_msg: &mut u64,
    me: u32,
) -> (bool, u64) {
    let mut emitted = 0;
    loop {
        let m = match shell.msgs.recv_timeout(Duration::from_millis(200)) {
            Ok(m) => m,
            Err(RecvTimeoutError::Timeout) => {
                if shared.stopping() || !shell.alive() {
                    return (false, emitted);
                }
                continue;
            }
            Err(RecvTimeoutError::Disconnected) => return (false, emitted),
        };
        match m.get("command").and_then(Json::as_str) {
            Some("sync") => return (true, emitted),
            Some("emit") => {
                let vals = values(m.get("tuple"));
                let mut targets = Vec::new();
                let ts = now_ns();
                match m.get("id").filter(|id| !id.is_null()) {
                    Some(id) => {
                        let root = tracker.new_root(me);
                        let xor = em.emit(vals, root, ts, Some(&mut targets));
                        *next_msg += 1;
                        ids.insert(*next_msg, id.clone());
                        if xor != 0 {
                            tracker.pending.insert(
                                root,
                                Pending {
                                    xor,
                                    at: Instant::now(),
                                    msg: *next_msg,
                                },
                            );
                        } else {
                            // No receiver: nothing to track (an ack now would interleave with
                            // this read's `sync`).
                            ids.remove(next_msg);
                        }
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
}
