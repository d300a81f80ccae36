//! The agent's durable record of the tasks it runs, so that a restarted agent can kill what its
//! SIGKILLed predecessor left behind.
//!
//! Each task runs in its own process group, so it survives the agent's death; the server, meanwhile,
//! declares the node's tasks lost and runs them again, and the work would run twice. The agent
//! therefore appends a line to `WORK_DIR/running.tasks` when a task's process starts and another
//! when it ends:
//!
//! ```text
//! start TASK ATTEMPT PID STARTTIME   # STARTTIME: field 22 of /proc/PID/stat (clock ticks since boot)
//! end TASK ATTEMPT                   # (older agents) the process ended
//! usage TASK ATTEMPT USER_MS SYSTEM_MS MAX_RSS_BYTES [GPU_BYTES]  # what it used (written with
//!                                    # its result; GPU_BYTES, peak GPU memory: only when measured)
//! offload TASK ATTEMPT STARTED_NS DEVICES  # offloaded: the ANode's start and devices (`0,1`, `-`)
//! fetch TASK ATTEMPT FETCH_MS        # a workflow instance: how long its inputs took to fetch
//! ending TASK ATTEMPT END [SIGNAL]   # how it ended: `TaskResult.end` by its proto name
//!                                    # (`TASK_END_SIGNALLED`), and its signal (`SEGV`) if any
//! result TASK ATTEMPT OK EXIT STARTED FINISHED MESSAGE   # it ended; the result awaits its ack
//! acked TASK ATTEMPT                 # the server recorded that result
//! ```
//!
//! A result's `usage`, `offload`, `fetch` and `ending` lines come before its `result` line, in
//! the same write, and only when it has them (a task whose usage was not measured, that was not
//! offloaded to an ANode, that fetched no inputs, or whose end was not said, has none): a file
//! written by an older agent, without them, is read as results without them, and an older agent
//! skips the lines it does not know. The `fetch` line keeps a replayed workflow result's
//! `fetch_ms`: without it a result re-sent after a restart would say 0, and the server would
//! keep the estimate its heartbeats gave. The `ending` line keeps how it ended (not `end`, the
//! line of a process that ended, which older agents read): without it a replayed result would
//! say nothing, and the server would infer less (a signal or a time limit is then no reason).
//!
//! A result stays in the record until the server acknowledges it, so an agent SIGKILLed while the
//! server was away re-sends, after its restart, the results of the tasks that finished meanwhile
//! (they are not run again).
//!
//! At start-up, before it registers, the agent reads the file ([`Ledger::recover`]) and kills
//! (SIGKILL to the whole process group) every task started and not ended, unless its pid now
//! belongs to another process (a different start time): a pid is recycled, a start time is not.
//! If the group leader is gone, its group may still hold the task's children; the pid cannot have
//! been given to a new process while that group exists, so the group is killed too.
//!
//! A write that fails is logged and the agent carries on. One cut short (a full disk) leaves a
//! line without its newline, so the next record begins on a line of its own: only the damaged
//! line is lost, not the record after it. A damaged line that still reads as a record is possible
//! only for a `start` line cut inside its start time (recovery then takes its pid for another
//! process's and leaves it alone, as if the line were lost), or an `end`/`acked` line cut inside
//! its attempt number; a `result` line without all its fields is refused. Once a write finds room
//! again, the file is rewritten from what the agent holds (as a compaction), which puts the
//! damaged record back whole. The agent's own record is opened empty at start, so a torn last
//! line of its predecessor's is never glued to.
//!
//! The file is written without `fsync` (a write reaches the kernel's page cache, which outlives the
//! agent's process; only a crash of the whole machine loses it, and that kills the tasks too) and
//! compacted — rewritten with the live entries only — when it grows, so it stays small and costs
//! two small `write`s per task.
//!
//! Divisible chunks' processes are recorded the same way in `WORK_DIR/running.chunks`
//! ([`CHUNKS_FILE_NAME`]: `start JOB CHUNK PID STARTTIME`, `end JOB CHUNK`), which the agent's
//! divisible loop recovers before it asks for a chunk: a chunk left running by a SIGKILLed agent
//! is killed, not left to compete with its re-planned copy.

use hetsched_proto as pb;
use std::collections::HashMap;
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use tracing::{info, warn};

/// The record's file name in the agent's work directory.
pub const FILE_NAME: &str = "running.tasks";

/// The record of divisible chunks' processes ([`crate::divisible`]): the same format, with the
/// job id in place of the task and the chunk number in place of the attempt.
pub const CHUNKS_FILE_NAME: &str = "running.chunks";

/// Rewrite the file once it holds this many more lines than live entries.
const COMPACT_AFTER: usize = 4096;

/// One recorded task process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry {
    /// Task id.
    pub task: u64,
    /// Attempt number.
    pub attempt: u32,
    /// Pid of the task's process, which leads its process group (pgid = pid).
    pub pid: u32,
    /// Field 22 of `/proc/PID/stat` when the task started (0 if it could not be read).
    pub start_time: u64,
}

/// What recovery found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Recovered {
    /// Entries whose process (group) was still there and was killed.
    pub killed: Vec<Entry>,
    /// Entries whose pid now belongs to another process: left alone.
    pub recycled: Vec<Entry>,
    /// Results the previous agent had not seen acknowledged: send them again.
    pub results: Vec<pb::TaskResult>,
}

/// Where the record's lines are written: its file (a test puts a disk that fills up in its
/// place).
struct Sink(Box<dyn Write + Send>);

impl std::fmt::Debug for Sink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Sink")
    }
}

impl From<File> for Sink {
    fn from(f: File) -> Self {
        Self(Box::new(f))
    }
}

/// The durable record of running tasks.
#[derive(Debug)]
pub struct Ledger {
    path: PathBuf,
    file: Option<Sink>,
    live: HashMap<(u64, u32), Entry>,
    unacked: Unacked,
    lines: usize,
    /// A write failed, maybe part-way (a full disk): the file may end inside a line, so the
    /// next record begins with a newline.
    torn: bool,
    /// A record is missing from the file or damaged there: the file is rewritten from what the
    /// ledger holds ([`Ledger::compact`]) at the next write that finds room.
    damaged: bool,
}

/// Field 22 (`starttime`) of `/proc/PID/stat`, `None` if the process does not exist.
pub fn proc_start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Field 22 is the 20th from field 3.
    crate::usage::stat_fields(&stat)?.nth(19)?.parse().ok()
}

/// Whether `pid` is a zombie (dead, not yet reaped) according to `/proc/PID/stat`.
pub fn is_zombie(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| crate::usage::stat_fields(&s)?.next().map(|st| st == "Z"))
        .unwrap_or(false)
}

#[cfg(test)]
fn parse(text: &str) -> HashMap<(u64, u32), Entry> {
    parse_all(text).0
}

/// Results not acknowledged, by (task, attempt).
type Unacked = HashMap<(u64, u32), pb::TaskResult>;

fn parse_result(line: &str) -> Option<pb::TaskResult> {
    let mut f = line.splitn(8, ' ');
    let ok;
    if f.next()? != "result" {
        return None;
    }
    Some(pb::TaskResult {
        task_id: f.next()?.parse().ok()?,
        attempt: f.next()?.parse().ok()?,
        success: {
            ok = f.next()?;
            ok == "1"
        },
        // 2: killed because the agent shut down (see `launch::Kill::Shutdown`).
        interrupted: ok == "2",
        // 3: the task could not be started (see `TaskResult.start_failed`).
        start_failed: ok == "3",
        exit_code: f.next()?.parse().ok()?,
        started_ns: f.next()?.parse().ok()?,
        finished_ns: f.next()?.parse().ok()?,
        // Always written, after a space even when empty: a line without it was cut short
        // (inside FINISHED, perhaps), not a result without a message.
        message: f.next()?.to_string(),
        usage: None,
        offload_started_ns: 0,
        offload_devices: Vec::new(),
        // From the `fetch` line before it, if any.
        fetch_ms: 0,
        // From the `ending` line before it, if any.
        end: pb::TaskEnd::Unsaid.into(),
        signal: String::new(),
    })
}

/// The `ending` line's fields after TASK ATTEMPT: the end by its proto name, and the signal's
/// name if one follows.
fn parse_ending(mut f: std::str::SplitWhitespace<'_>) -> Option<(pb::TaskEnd, String)> {
    let end = pb::TaskEnd::from_str_name(f.next()?)?;
    Some((end, f.next().unwrap_or_default().to_string()))
}

/// The `usage` line's fields after TASK ATTEMPT.
fn parse_usage(mut f: std::str::SplitWhitespace<'_>) -> Option<pb::TaskUsage> {
    Some(pb::TaskUsage {
        cpu_user_ms: f.next()?.parse().ok()?,
        cpu_system_ms: f.next()?.parse().ok()?,
        max_rss_bytes: f.next()?.parse().ok()?,
        // An older agent's line ends before it: not measured.
        max_gpu_memory_bytes: f.next().map_or(Some(0), |b| b.parse().ok())?,
    })
}

/// The `offload` line's fields after TASK ATTEMPT: the ANode's start and its devices (`-`: none).
fn parse_offload(mut f: std::str::SplitWhitespace<'_>) -> Option<(u64, Vec<u32>)> {
    let started = f.next()?.parse().ok()?;
    let devices = match f.next()? {
        "-" => Vec::new(),
        list => list
            .split(',')
            .map(|d| d.parse().ok())
            .collect::<Option<_>>()?,
    };
    Some((started, devices))
}

/// A result's lines: its `usage` (if measured) and `offload` (if offloaded to an ANode), then the
/// `result` itself — one write, so a torn write loses the result with them.
fn result_line(r: &pb::TaskResult) -> String {
    let usage = r.usage.as_ref().map_or(String::new(), |u| {
        format!(
            "usage {} {} {} {} {}{}\n",
            r.task_id,
            r.attempt,
            u.cpu_user_ms,
            u.cpu_system_ms,
            u.max_rss_bytes,
            // Only when measured: the line stays as an older agent wrote (and reads) it.
            match u.max_gpu_memory_bytes {
                0 => String::new(),
                b => format!(" {b}"),
            }
        )
    });
    let offload = if r.offload_started_ns == 0 && r.offload_devices.is_empty() {
        String::new()
    } else {
        let devices = if r.offload_devices.is_empty() {
            "-".to_string()
        } else {
            let d: Vec<String> = r.offload_devices.iter().map(u32::to_string).collect();
            d.join(",")
        };
        format!(
            "offload {} {} {} {devices}\n",
            r.task_id, r.attempt, r.offload_started_ns
        )
    };
    let fetch = if r.fetch_ms == 0 {
        String::new()
    } else {
        format!("fetch {} {} {}\n", r.task_id, r.attempt, r.fetch_ms)
    };
    let ending = match r.end() {
        pb::TaskEnd::Unsaid => String::new(),
        end => {
            // One word or none: the agent names signals so, and anything else would shift the
            // line's fields.
            let signal = if r.signal.is_empty() || r.signal.contains(char::is_whitespace) {
                String::new()
            } else {
                format!(" {}", r.signal)
            };
            format!(
                "ending {} {} {}{signal}\n",
                r.task_id,
                r.attempt,
                end.as_str_name()
            )
        }
    };
    usage
        + &offload
        + &fetch
        + &ending
        + &format!(
            "result {} {} {} {} {} {} {}\n",
            r.task_id,
            r.attempt,
            if r.interrupted {
                2
            } else if r.start_failed && !r.success {
                3
            } else {
                u8::from(r.success)
            },
            r.exit_code,
            r.started_ns,
            r.finished_ns,
            r.message.replace(['\n', '\r'], " ")
        )
}

fn parse_all(text: &str) -> (HashMap<(u64, u32), Entry>, Unacked) {
    let mut live = HashMap::new();
    let mut unacked = HashMap::new();
    // Usage and offload read from `usage` and `offload` lines, for the `result` line that
    // follows them.
    let mut usage = HashMap::new();
    let mut offload = HashMap::new();
    let mut fetch_ms = HashMap::new();
    let mut ending = HashMap::new();
    for line in text.lines() {
        if line.starts_with("result ") {
            // Only a whole line counts (a torn last line has no message field and may be cut
            // inside a number: parse_result refuses both when fields are missing).
            if let Some(mut r) = parse_result(line) {
                r.usage = usage.remove(&(r.task_id, r.attempt));
                if let Some((started, devices)) = offload.remove(&(r.task_id, r.attempt)) {
                    r.offload_started_ns = started;
                    r.offload_devices = devices;
                }
                r.fetch_ms = fetch_ms.remove(&(r.task_id, r.attempt)).unwrap_or(0);
                if let Some((end, signal)) = ending.remove(&(r.task_id, r.attempt)) {
                    r.set_end(end);
                    r.signal = signal;
                }
                live.remove(&(r.task_id, r.attempt));
                unacked.insert((r.task_id, r.attempt), r);
            }
            continue;
        }
        let mut f = line.split_whitespace();
        let kind = f.next();
        let (Some(task), Some(attempt)) = (
            f.next().and_then(|x| x.parse::<u64>().ok()),
            f.next().and_then(|x| x.parse::<u32>().ok()),
        ) else {
            continue; // a torn last line, or garbage: nothing to act on
        };
        match kind {
            Some("start") => {
                let (Some(pid), Some(start_time)) = (
                    f.next().and_then(|x| x.parse::<u32>().ok()),
                    f.next().and_then(|x| x.parse::<u64>().ok()),
                ) else {
                    continue;
                };
                live.insert(
                    (task, attempt),
                    Entry {
                        task,
                        attempt,
                        pid,
                        start_time,
                    },
                );
            }
            Some("end") => {
                live.remove(&(task, attempt));
            }
            Some("acked") => {
                unacked.remove(&(task, attempt));
            }
            Some("usage") => {
                if let Some(u) = parse_usage(f) {
                    usage.insert((task, attempt), u);
                }
            }
            Some("offload") => {
                if let Some(o) = parse_offload(f) {
                    offload.insert((task, attempt), o);
                }
            }
            // Written with its `result` line, after it in the same write: a write torn inside
            // this line lost that result too, so a damaged time is never read with it.
            Some("fetch") => {
                if let Some(ms) = f.next().and_then(|x| x.parse::<u64>().ok()) {
                    fetch_ms.insert((task, attempt), ms);
                }
            }
            // As `fetch`: written with its `result` line, in the same write.
            Some("ending") => {
                if let Some(e) = parse_ending(f) {
                    ending.insert((task, attempt), e);
                }
            }
            _ => {}
        }
    }
    (live, unacked)
}

/// SIGKILLs process group `pid`; whether a process received it.
fn kill_group(pid: u32) -> bool {
    crate::launch::signal_group(pid, nix::sys::signal::Signal::SIGKILL)
}

/// The record at `path` (empty if there is none). O_NOFOLLOW: a symlink planted as the record is
/// an error, never followed (the agent would truncate its target, or kill the process groups it
/// lists). Bytes that are not UTF-8 (a write cut inside a character, a full disk's short
/// write, a damaged block) spoil only their own line: the record was read as one string, and
/// one such byte anywhere kept the agent from starting ("stream did not contain valid UTF-8"),
/// its tasks left running and its results unsent.
fn read_record(path: &Path) -> std::io::Result<String> {
    match crate::workdir::open_no_follow(path, false) {
        Ok(mut f) => {
            let mut t = Vec::new();
            std::io::Read::read_to_end(&mut f, &mut t)?;
            Ok(String::from_utf8_lossy(&t).into_owned())
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(String::new()),
        Err(e) => Err(e),
    }
}

/// SIGKILLs the process group of every recorded entry whose process is still the one recorded
/// (see the module docs).
fn kill_recorded(live: HashMap<(u64, u32), Entry>) -> Recovered {
    let mut found = Recovered::default();
    let mut entries: Vec<Entry> = live.into_values().collect();
    entries.sort_unstable_by_key(|e| (e.task, e.attempt));
    for e in entries {
        match proc_start_time(e.pid) {
            Some(t) if t != e.start_time || e.start_time == 0 => {
                warn!(
                    task = e.task,
                    pid = e.pid,
                    "recorded task's pid now belongs to another process; left alone"
                );
                found.recycled.push(e);
            }
            // A killed leader waiting to be reaped (by init, once its agent is gone): its
            // group may still hold children, so it is signalled, but nothing ran on.
            Some(_) if is_zombie(e.pid) => {
                kill_group(e.pid);
            }
            _ => {
                if kill_group(e.pid) {
                    info!(
                        task = e.task,
                        attempt = e.attempt,
                        pid = e.pid,
                        "killed a task left running by a previous agent"
                    );
                    found.killed.push(e);
                }
            }
        }
    }
    found
}

/// Kills what the record named `name` in `work_dir` lists as running, and leaves the record as
/// it is (its unacknowledged results are for the next agent): the agent's guard calls this once
/// the agent is gone ([`crate::guard`]). Returns the entries killed.
pub fn kill_left_running(work_dir: &Path, name: &str) -> std::io::Result<Vec<Entry>> {
    let text = read_record(&work_dir.join(name))?;
    Ok(kill_recorded(parse_all(&text).0).killed)
}

/// The pids the record named `name` in `work_dir` lists as running, killing nothing (empty if
/// there is no record): the agent's start leaves these to the ledger's own recovery
/// ([`crate::marker::kill_marked`]).
pub fn recorded_running(work_dir: &Path, name: &str) -> std::io::Result<Vec<u32>> {
    let text = read_record(&work_dir.join(name))?;
    Ok(parse_all(&text).0.values().map(|e| e.pid).collect())
}

impl Ledger {
    /// Reads the record in `work_dir`, kills every recorded task that is still running (see the
    /// module docs), and starts an empty record.
    pub fn recover(work_dir: &Path) -> std::io::Result<(Self, Recovered)> {
        Self::recover_file(work_dir, FILE_NAME)
    }

    /// As [`Ledger::recover`], for the record named `name` in `work_dir`.
    pub fn recover_file(work_dir: &Path, name: &str) -> std::io::Result<(Self, Recovered)> {
        let path = work_dir.join(name);
        let text = read_record(&path)?;
        let (live, unacked) = parse_all(&text);
        let mut found = kill_recorded(live);
        let file = crate::workdir::open_no_follow(&path, true)?;
        // Opened empty (truncated), so a torn last line of the previous agent's record, read
        // above, is never followed by this agent's lines.
        let mut ledger = Self {
            path,
            file: Some(file.into()),
            live: HashMap::new(),
            unacked: HashMap::new(),
            lines: 0,
            torn: false,
            damaged: false,
        };
        // The new record starts with the results still awaiting their acknowledgement.
        let mut results: Vec<pb::TaskResult> = unacked.into_values().collect();
        results.sort_unstable_by_key(|r| (r.task_id, r.attempt));
        for r in &results {
            ledger.finished(r);
        }
        if !results.is_empty() {
            info!(
                results = results.len(),
                "results of tasks that ended before the previous agent stopped: sending them"
            );
        }
        found.results = results;
        Ok((ledger, found))
    }

    /// A record that writes nothing (tests of other parts).
    pub fn disabled() -> Self {
        Self {
            path: PathBuf::new(),
            file: None,
            live: HashMap::new(),
            unacked: HashMap::new(),
            lines: 0,
            torn: false,
            damaged: false,
        }
    }

    /// Appends `line` (one record, its lines ending in `\n`). A write that fails is logged and
    /// the agent carries on (its tasks matter more than their record), but a failure part-way
    /// (a full disk's short write) leaves a line without its newline: the next record would be
    /// glued to it and both lost at recovery — a `start` line, say, so that its task would not
    /// be killed. So the next record begins on a line of its own (only the damaged line is
    /// lost), and once a write finds room again the file is rewritten from memory, the damaged
    /// record whole again.
    fn append(&mut self, line: &str) {
        self.lines += 1;
        let Some(f) = &mut self.file else {
            return;
        };
        let written = if self.torn {
            f.0.write_all(format!("\n{line}").as_bytes())
        } else {
            f.0.write_all(line.as_bytes())
        };
        match written {
            Err(e) => {
                warn!("{}: {e}", self.path.display());
                self.torn = true;
                self.damaged = true;
            }
            Ok(()) => {
                self.torn = false;
                if self.damaged {
                    self.compact();
                }
            }
        }
    }

    /// Records that a task's process started.
    pub fn started(&mut self, task: u64, attempt: u32, pid: u32) {
        let e = Entry {
            task,
            attempt,
            pid,
            start_time: proc_start_time(pid).unwrap_or(0),
        };
        self.live.insert((task, attempt), e);
        self.append(&format!("start {task} {attempt} {pid} {}\n", e.start_time));
    }

    /// Records a task's result (its process ended, or never started); kept until [`Ledger::acked`].
    pub fn finished(&mut self, r: &pb::TaskResult) {
        self.live.remove(&(r.task_id, r.attempt));
        self.unacked.insert((r.task_id, r.attempt), r.clone());
        self.append(&result_line(r));
    }

    /// Records that the server acknowledged a result.
    pub fn acked(&mut self, task: u64, attempt: u32) {
        if self.unacked.remove(&(task, attempt)).is_none() {
            return;
        }
        self.append(&format!("acked {task} {attempt}\n"));
        if self.lines > self.live.len() + self.unacked.len() + COMPACT_AFTER {
            self.compact();
        }
    }

    /// Records that a task's process ended (without keeping its result).
    pub fn ended(&mut self, task: u64, attempt: u32) {
        if self.live.remove(&(task, attempt)).is_none() {
            return; // never started (or already recorded)
        }
        self.append(&format!("end {task} {attempt}\n"));
        if self.lines > self.live.len() + COMPACT_AFTER {
            self.compact();
        }
    }

    /// Rewrites the file with the live entries and unacknowledged results only (a temporary
    /// file renamed over it); on success the file holds every record whole.
    fn compact(&mut self) {
        if self.file.is_none() {
            self.lines = self.live.len();
            return;
        }
        let mut text: String = self
            .live
            .values()
            .map(|e| {
                format!(
                    "start {} {} {} {}\n",
                    e.task, e.attempt, e.pid, e.start_time
                )
            })
            .collect();
        text.extend(self.unacked.values().map(result_line));
        let done = crate::workdir::rewrite_for_append(&self.path, &text);
        match done {
            Ok(f) => {
                self.file = Some(f.into());
                self.lines = self.live.len() + self.unacked.len();
                self.torn = false;
                self.damaged = false;
            }
            Err(e) => warn!("compacting {}: {e}", self.path.display()),
        }
    }

    /// Entries recorded as running.
    pub fn live(&self) -> impl Iterator<Item = &Entry> {
        self.live.values()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hetsched_core::testkit::ScratchDir;

    #[test]
    fn started_and_not_ended_entries_survive_a_torn_line() {
        let live = parse("start 1 1 100 5\nstart 2 1 101 6\nend 1 1\nstart 3 2 10");
        assert_eq!(live.len(), 1);
        assert_eq!(live[&(2, 1)].pid, 101);
    }

    /// A record with bytes that are not UTF-8 is read line by line as any other: the lines
    /// around them count (before, the agent refused to start).
    #[test]
    fn a_record_with_bytes_that_are_not_utf8_is_still_recovered() {
        let dir = ScratchDir::new("ledger", "utf8");
        let mut text = b"result 7 1 1 0 10 20 d\xe9j\xe0 vu\n".to_vec();
        text.extend_from_slice(b"offload 8 1 15 0,1\nresult 8 1 1 0 10 20 ok\nresult 9 1 0 1 1");
        text.extend_from_slice(&[0xc3]);
        std::fs::write(dir.join(FILE_NAME), &text).expect("write");
        let (_ledger, found) = Ledger::recover(&dir).expect("recovered");
        let ids: Vec<(u64, &str)> = found
            .results
            .iter()
            .map(|r| (r.task_id, r.message.as_str()))
            .collect();
        assert_eq!(ids, [(7, "d\u{fffd}j\u{fffd} vu"), (8, "ok")]);
        assert_eq!(found.results[1].offload_devices, [0, 1]);
        assert!(kill_left_running(&dir, FILE_NAME).is_ok());
    }

    #[test]
    fn our_own_start_time_is_read_and_stable() {
        let me = std::process::id();
        let t = proc_start_time(me).expect("own stat");
        assert_eq!(proc_start_time(me), Some(t));
        assert!(!is_zombie(me));
    }

    #[test]
    fn recovery_kills_a_recorded_process_group_and_compaction_keeps_live_entries() {
        let dir = ScratchDir::new("ledger", "recovery");
        let mut child = {
            use std::os::unix::process::CommandExt;
            std::process::Command::new("sleep")
                .arg("30")
                .process_group(0)
                .spawn()
                .expect("sleep")
        };
        let (mut l, found) = Ledger::recover(&dir).expect("recover");
        assert_eq!(found, Recovered::default());
        for t in 0..(COMPACT_AFTER as u64 + 10) {
            l.started(t + 100, 1, 1);
            l.ended(t + 100, 1);
        }
        l.started(7, 2, child.id());
        // A recycled pid: our own, with another start time.
        l.append(&format!("start 8 1 {} 1\n", std::process::id()));
        drop(l);
        let (l, found) = Ledger::recover(&dir).expect("recover");
        assert_eq!(found.killed.len(), 1, "{found:?}");
        assert_eq!((found.killed[0].task, found.killed[0].attempt), (7, 2));
        assert_eq!(found.recycled.len(), 1);
        let status = child.wait().expect("wait");
        assert!(!status.success(), "sleep was killed");
        assert_eq!(l.live().count(), 0);
        let text = std::fs::read_to_string(dir.join(FILE_NAME)).expect("file");
        assert!(text.is_empty(), "recovery starts an empty record");
    }

    #[test]
    fn a_result_survives_the_agent_until_it_is_acknowledged() {
        let dir = ScratchDir::new("ledger", "res");
        let r = |task: u64, ok: bool| pb::TaskResult {
            task_id: task,
            attempt: 1,
            exit_code: if ok { 0 } else { 3 },
            message: if ok {
                String::new()
            } else {
                "exited with\nstatus 3".into()
            },
            started_ns: 10,
            finished_ns: 20,
            success: ok,
            interrupted: false,
            start_failed: false,
            // What the task used comes back with its result.
            usage: ok.then_some(pb::TaskUsage {
                cpu_user_ms: 1_250,
                cpu_system_ms: 40,
                max_rss_bytes: 3 << 30,
                max_gpu_memory_bytes: 2 << 30,
            }),
            offload_started_ns: 0,
            offload_devices: Vec::new(),
            fetch_ms: 0,
            end: pb::TaskEnd::Exited.into(),
            signal: String::new(),
        };
        let (mut l, _) = Ledger::recover(&dir).expect("recover");
        l.started(1, 1, 1);
        l.finished(&r(1, true));
        l.finished(&r(2, false));
        l.finished(&r(3, true));
        l.acked(3, 1);
        drop(l); // SIGKILL: nothing else happens
        let (mut l, found) = Ledger::recover(&dir).expect("recover");
        let mut expected = vec![r(1, true), r(2, false)];
        expected[1].message = "exited with status 3".into();
        assert_eq!(found.results, expected, "unacknowledged results come back");
        assert!(found.killed.is_empty(), "a finished task is not killed");
        l.acked(1, 1);
        drop(l);
        let (_, found) = Ledger::recover(&dir).expect("recover");
        assert_eq!(
            found.results.len(),
            1,
            "kept until acknowledged, across restarts"
        );
    }

    /// A fresh directory for one test's ledger.
    fn test_dir(name: &str) -> ScratchDir {
        ScratchDir::new("ledger", name)
    }

    /// The result of a task an NNode offloaded to its ANode, as the ANode reported it.
    fn offloaded(task: u64, devices: Vec<u32>) -> pb::TaskResult {
        pb::TaskResult {
            task_id: task,
            attempt: 2,
            exit_code: 0,
            message: String::new(),
            started_ns: 1_000,
            finished_ns: 9_000,
            success: true,
            interrupted: false,
            start_failed: false,
            usage: Some(pb::TaskUsage {
                cpu_user_ms: 70,
                cpu_system_ms: 5,
                max_rss_bytes: 1 << 20,
                max_gpu_memory_bytes: 0,
            }),
            offload_started_ns: 1_500,
            offload_devices: devices,
            fetch_ms: 0,
            // (An ANode that predates saying it.)
            end: pb::TaskEnd::Unsaid.into(),
            signal: String::new(),
        }
    }

    #[test]
    fn an_offloaded_result_keeps_the_anodes_start_and_devices_through_restarts_and_compaction() {
        let dir = test_dir("offload");
        let two = offloaded(1, vec![0, 3]);
        // An ANode that predates `offload_devices` said its start only.
        let start_only = offloaded(2, Vec::new());
        let (mut l, _) = Ledger::recover(&dir).expect("recover");
        l.finished(&two);
        l.finished(&start_only);
        drop(l); // SIGKILL
        let (mut l, found) = Ledger::recover(&dir).expect("recover");
        assert_eq!(
            found.results,
            vec![two.clone(), start_only.clone()],
            "re-sent with the ANode's start and devices, and the usage"
        );
        // Acknowledged results until the file is compacted, which keeps the unacknowledged.
        let mut t = 100;
        loop {
            l.finished(&offloaded(t, vec![1]));
            l.acked(t, 2);
            t += 1;
            if l.lines == l.unacked.len() {
                break;
            }
            assert!(t < 100 + COMPACT_AFTER as u64, "never compacted");
        }
        let text = std::fs::read_to_string(dir.join(FILE_NAME)).expect("file");
        // Each result with its `usage` and `offload` lines, nothing else.
        assert_eq!(text.lines().count(), 6, "compacted: {text}");
        assert!(text.contains("offload 1 2 1500 0,3\n"), "{text}");
        assert!(text.contains("offload 2 2 1500 -\n"), "{text}");
        drop(l);
        let (_, found) = Ledger::recover(&dir).expect("recover");
        assert_eq!(found.results, vec![two, start_only], "after compaction");
    }

    /// A workflow instance's result says how long its inputs took to fetch (`fetch_ms`); re-sent
    /// after the agent restarts (its server away meanwhile), it says so still, through the
    /// ledger's compaction too. Before, the ledger did not keep it: the replayed result said 0.
    #[test]
    fn a_workflow_results_fetch_time_survives_a_restart_and_compaction() {
        let dir = test_dir("fetch");
        let fetched = pb::TaskResult {
            task_id: 4,
            attempt: 3,
            success: true,
            started_ns: 2_000_000_000,
            finished_ns: 3_000_000_000,
            fetch_ms: 1_750,
            ..Default::default()
        };
        let none = pb::TaskResult {
            task_id: 5,
            attempt: 1,
            success: true,
            started_ns: 10,
            finished_ns: 20,
            ..Default::default()
        };
        let (mut l, _) = Ledger::recover(&dir).expect("recover");
        l.finished(&fetched);
        l.finished(&none);
        drop(l); // SIGKILL
        let (mut l, found) = Ledger::recover(&dir).expect("recover");
        assert_eq!(found.results, vec![fetched.clone(), none.clone()]);
        let mut t = 100;
        loop {
            l.finished(&offloaded(t, vec![1]));
            l.acked(t, 2);
            t += 1;
            if l.lines == l.unacked.len() {
                break;
            }
            assert!(t < 100 + COMPACT_AFTER as u64, "never compacted");
        }
        let text = std::fs::read_to_string(dir.join(FILE_NAME)).expect("file");
        assert!(text.contains("fetch 4 3 1750\nresult 4 3 1 "), "{text}");
        assert!(!text.contains("fetch 5 "), "no line for no fetch: {text}");
        drop(l);
        let (_, found) = Ledger::recover(&dir).expect("recover");
        assert_eq!(found.results, vec![fetched, none], "after compaction");
        // Another task's line, or a garbled one, gives this result no fetch time.
        for bad in ["fetch 6 1 40", "fetch 5 1 4x", "fetch 5 1"] {
            let (_, unacked) = parse_all(&format!("{bad}\nresult 5 1 1 0 10 20 \n"));
            assert_eq!(unacked[&(5, 1)].fetch_ms, 0, "{bad}");
        }
    }

    /// How an attempt ended (`TaskResult.end`, and the signal that killed it) is re-sent after
    /// the agent restarts, through the ledger's compaction too. Before, the ledger did not keep
    /// it: a replayed result said nothing, and the server could not tell a signal from a time
    /// limit.
    #[test]
    fn how_an_attempt_ended_survives_a_restart_and_compaction() {
        let dir = test_dir("ending");
        let ended = |task: u64, end: pb::TaskEnd, signal: &str| pb::TaskResult {
            task_id: task,
            attempt: 2,
            exit_code: -1,
            message: "it ended".into(),
            started_ns: 10,
            finished_ns: 20,
            end: end.into(),
            signal: signal.into(),
            ..Default::default()
        };
        let signalled = ended(1, pb::TaskEnd::Signalled, "SEGV");
        let unnamed = ended(2, pb::TaskEnd::Signalled, "");
        let timed_out = ended(3, pb::TaskEnd::TimeLimit, "");
        let unsaid = ended(4, pb::TaskEnd::Unsaid, "");
        let all = vec![
            signalled.clone(),
            unnamed.clone(),
            timed_out.clone(),
            unsaid.clone(),
        ];
        let (mut l, _) = Ledger::recover(&dir).expect("recover");
        for r in &all {
            l.finished(r);
        }
        let text = std::fs::read_to_string(dir.join(FILE_NAME)).expect("file");
        assert!(
            text.contains("ending 1 2 TASK_END_SIGNALLED SEGV\nresult 1 2 0 "),
            "{text}"
        );
        assert!(text.contains("ending 2 2 TASK_END_SIGNALLED\n"), "{text}");
        assert!(!text.contains("ending 4 "), "no line for no end: {text}");
        drop(l); // SIGKILL
        let (mut l, found) = Ledger::recover(&dir).expect("recover");
        assert_eq!(found.results, all);
        let mut t = 100;
        loop {
            l.finished(&offloaded(t, vec![1]));
            l.acked(t, 2);
            t += 1;
            if l.lines == l.unacked.len() {
                break;
            }
            assert!(t < 100 + COMPACT_AFTER as u64, "never compacted");
        }
        drop(l);
        let (_, found) = Ledger::recover(&dir).expect("recover");
        assert_eq!(found.results, all, "after compaction");
        // Another attempt's line, an unknown or torn end, gives this result none; a torn
        // signal is read as written (the result line after it, in the same write, is lost
        // with it).
        for bad in [
            "ending 5 2 TASK_END_TIME_LIMIT",
            "ending 5 1 TASK_END_NEW_ONE",
            "ending 5 1 TASK_END_TIME_LIM",
            "ending 5 1",
        ] {
            let (_, unacked) = parse_all(&format!("{bad}\nresult 5 1 0 -1 10 20 \n"));
            let r = &unacked[&(5, 1)];
            assert_eq!(
                (r.end(), r.signal.as_str()),
                (pb::TaskEnd::Unsaid, ""),
                "{bad}"
            );
        }
    }

    #[test]
    fn offload_lines_that_are_torn_or_garbled_are_skipped() {
        let result = "result 5 1 1 0 10 20 \n";
        let read = |offload: &str| {
            let (_, unacked) = parse_all(&format!("{offload}\n{result}"));
            let r = &unacked[&(5, 1)];
            (r.offload_started_ns, r.offload_devices.clone())
        };
        assert_eq!(read("offload 5 1 15 0,2"), (15, vec![0, 2]));
        assert_eq!(read("offload 5 1 15 -"), (15, vec![]));
        for bad in [
            "offload 5 1 15",
            "offload 5 1 15 0,",
            "offload 5 1 1x 0",
            "offload 5 1 15 0,-1",
            "offload 5 1",
            // Another task's.
            "offload 6 1 15 0",
        ] {
            assert_eq!(read(bad), (0, vec![]), "{bad}");
        }
    }

    #[test]
    fn an_older_agents_ledger_without_offload_lines_is_still_read() {
        let dir = test_dir("old");
        std::fs::write(
            dir.join(FILE_NAME),
            "start 1 1 1 0\n\
             usage 1 1 1250 40 3221225472\n\
             result 1 1 1 0 10 20 \n\
             result 2 1 0 3 10 20 exited with status 3\n\
             result 3 1 2 -1 10 20 interrupted\n\
             acked 3 1\n",
        )
        .expect("old ledger");
        let (_, found) = Ledger::recover(&dir).expect("recover");
        let expected = vec![
            pb::TaskResult {
                task_id: 1,
                attempt: 1,
                started_ns: 10,
                finished_ns: 20,
                success: true,
                usage: Some(pb::TaskUsage {
                    cpu_user_ms: 1_250,
                    cpu_system_ms: 40,
                    max_rss_bytes: 3 << 30,
                    // Not in an older agent's line: not measured.
                    max_gpu_memory_bytes: 0,
                }),
                ..Default::default()
            },
            pb::TaskResult {
                task_id: 2,
                attempt: 1,
                exit_code: 3,
                message: "exited with status 3".into(),
                started_ns: 10,
                finished_ns: 20,
                ..Default::default()
            },
        ];
        // How they ended was not said: the server infers what it can.
        assert!(
            found.results.iter().all(|r| r.end() == pb::TaskEnd::Unsaid),
            "{found:?}"
        );
        assert_eq!(found.results, expected);
        // Rewritten as it was: no offload line for a result that has none.
        let text = std::fs::read_to_string(dir.join(FILE_NAME)).expect("file");
        assert_eq!(
            text,
            "usage 1 1 1250 40 3221225472\nresult 1 1 1 0 10 20 \n\
             result 2 1 0 3 10 20 exited with status 3\n"
        );
    }

    #[test]
    fn a_ledger_planted_as_a_symlink_is_refused_and_its_target_untouched() {
        let dir = ScratchDir::new("ledger", "link");
        let victim = dir.join("victim");
        std::fs::write(&victim, "precious").expect("victim");
        std::os::unix::fs::symlink(&victim, dir.join(FILE_NAME)).expect("symlink");
        let e = Ledger::recover(&dir).expect_err("a symlinked ledger is refused");
        assert_eq!(
            e.raw_os_error(),
            Some(nix::errno::Errno::ELOOP as i32),
            "{e}"
        );
        assert_eq!(
            std::fs::read_to_string(&victim).expect("victim"),
            "precious",
            "the link's target was not truncated"
        );
    }

    /// A disk with `room` bytes left: a write takes what fits and fails once none is left, as
    /// a full disk's short write does.
    struct FillingDisk {
        file: File,
        room: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    }

    impl Write for FillingDisk {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            use std::sync::atomic::Ordering::SeqCst;
            let room = self.room.load(SeqCst);
            if room == 0 && !buf.is_empty() {
                return Err(std::io::Error::from_raw_os_error(nix::libc::ENOSPC));
            }
            let n = self.file.write(&buf[..buf.len().min(room)])?;
            self.room.fetch_sub(n, SeqCst);
            Ok(n)
        }

        fn flush(&mut self) -> std::io::Result<()> {
            self.file.flush()
        }
    }

    /// A write cut short by a full disk damages its own line only: the next record starts on a
    /// line of its own (before, it was glued to the torn one and both were lost at recovery — a
    /// `start` line, so that its task would not have been killed), and once a write finds room
    /// and the file can be rewritten, the damaged record is whole again.
    #[test]
    fn a_short_write_loses_only_its_own_line_and_the_record_is_whole_once_there_is_room() {
        use std::sync::atomic::Ordering::SeqCst;
        let dir = test_dir("short");
        let (mut l, _) = Ledger::recover(&dir).expect("recover");
        let room = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(usize::MAX));
        let file = std::fs::OpenOptions::new()
            .append(true)
            .open(dir.join(FILE_NAME))
            .expect("record");
        l.file = Some(Sink(Box::new(FillingDisk {
            file,
            room: room.clone(),
        })));
        // The rewrite cannot happen yet: its temporary file's name is taken by a directory.
        let tmp = dir.join(FILE_NAME).with_extension("tmp");
        std::fs::create_dir(&tmp).expect("block the rewrite");
        let live = || {
            let text = std::fs::read_to_string(dir.join(FILE_NAME)).expect("record");
            let mut ids: Vec<(u64, u32)> = parse(&text).into_keys().collect();
            ids.sort_unstable();
            (ids, text)
        };
        l.started(1, 1, 9_000_001);
        room.store(7, SeqCst);
        l.started(2, 1, 9_000_002); // "start 2" and no more
        room.store(usize::MAX, SeqCst);
        l.started(3, 1, 9_000_003);
        let (ids, text) = live();
        assert_eq!(
            ids,
            [(1, 1), (3, 1)],
            "only the torn line is lost: {text:?}"
        );
        assert!(text.contains("\nstart 2\nstart 3 1 9000003 "), "{text:?}");
        // A write that fails whole (no room at all) is damage too: the next one starts afresh.
        room.store(0, SeqCst);
        l.finished(&pb::TaskResult {
            task_id: 4,
            attempt: 1,
            message: "m".into(),
            ..Default::default()
        });
        room.store(usize::MAX, SeqCst);
        std::fs::remove_dir(&tmp).expect("unblock the rewrite");
        l.ended(1, 1);
        let (ids, text) = live();
        assert_eq!(ids, [(2, 1), (3, 1)], "the damaged start is back: {text:?}");
        assert!(text.contains("result 4 1 "), "and the result: {text:?}");
        assert!(!l.torn && !l.damaged);
        drop(l);
        // A result line cut inside its numbers, then ended by the next record's newline, is not
        // read as a result (its FINISHED would be wrong, and it has no message field).
        let (_, unacked) = parse_all("result 7 1 1 0 10 2\nresult 8 1 1 0 10 20 \n");
        let mut ids: Vec<u64> = unacked.keys().map(|k| k.0).collect();
        ids.sort_unstable();
        assert_eq!(ids, [8]);
    }
}
