//! A multi-lang program's whole process tree, so that what a program started ends with it even
//! when it left the program's process group (`setsid`, `setpgid`): a group kill alone misses
//! such a process, and it would outlive its executor and its worker.
//!
//! On Linux:
//! - [`descendants`] walks `/proc/PID/task/*/children` from a program down, so a process that
//!   left the group but whose parents still run is found and signalled with the group
//!   (`multilang::end_group`);
//! - the worker process makes itself a **child subreaper** ([`become_subreaper`],
//!   `prctl(PR_SET_CHILD_SUBREAPER)`), so a process whose parents exited (a daemon that forked
//!   twice) is re-parented to the worker rather than to init, and is still below the worker
//!   when it stops: [`end_all_descendants`] ends them all then, and [`reap_adopted`] reaps
//!   those that exit before, so none lingers as a zombie of a long-running worker.
//!
//! - every program carries a **mark** in its environment ([`MARK`]: the worker's pid and start
//!   time and the program's serial), which what it starts inherits. An orphan re-parented to the
//!   worker is no longer below its program, so [`adopted_of`] finds it by its mark and its
//!   program's end takes it too (`multilang::end_group`), while the worker runs on;
//! - a worker that was SIGKILLed ends nothing: the agent that started it, finding it gone,
//!   ends every process still carrying its mark ([`end_marked_by`]), the programs and what
//!   they started, in their group or not (`setsid`). A process that cleared its environment
//!   (`env -i`, an exec with an empty environment) carries no mark; one that stayed in its
//!   program's process group is ended with the marked ones all the same, that group being the
//!   program's (a group with a marked member whose leader is marked too or gone: see
//!   `programs_groups`);
//! - a worker that died with its agent (both SIGKILLed, a crash) has no agent to end what its
//!   programs left: an agent starting sweeps every process of its workers' users whose mark
//!   names a worker (pid and start time) that no longer runs
//!   ([`end_marked_by_dead_workers`]), never one whose worker runs (another agent's).
//!
//! What the sweeps cannot find once the worker was SIGKILLed (while it runs, the walk below a
//! program and the subreaper still do), short of a cgroup per program:
//! - a process that both cleared its environment and left its program's group (`setsid`,
//!   `setpgid`): nothing ties it to the program any more;
//! - an unmarked process in a group with no marked member left (the program and all it
//!   started that kept the mark exited);
//! - what stayed in the group of a program that cleared its own environment (`env -i` as its
//!   command, or an exec with an empty one): a group whose leader runs unmarked is never taken,
//!   as the agent's or a shell's group, which a marked process may join, looks the same.
//!
//! Such a process runs on until someone ends it.
//!
//! Each process is named by its pid **and** its start time (`/proc/PID/stat`, field 22), and
//! is signalled only while both still match, so a pid the kernel reused for an unrelated
//! process in the meantime is never signalled.
//!
//! Elsewhere there is no `/proc` to walk: the functions find nothing and the group kill alone
//! stands.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The environment variable that marks every program a worker starts, and what the program
/// starts in turn (inherited): `PID:START:SERIAL`, the worker's pid and start time and the
/// program's serial in that worker.
pub const MARK: &str = "HETSCHED_STREAM_PROGRAM";

/// The serial the next program gets (its [`MARK`]).
static SERIAL: AtomicU64 = AtomicU64::new(1);

/// Whether this process made itself a subreaper ([`become_subreaper`]): only then are children
/// it did not start its own (adopted orphans), which [`reap_adopted`] may reap. In another
/// process (a test binary running workers in process) they are its other code's, whose exit
/// statuses are not ours to take.
static SUBREAPER: AtomicBool = AtomicBool::new(false);

/// Most processes one walk collects: a fork bomb below a program cannot make a walk endless.
const MAX_WALKED: usize = 65_536;

/// A process as signalled: its pid and its start time (clock ticks since boot), which a
/// reused pid does not share.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Proc {
    /// Its pid.
    pub pid: u32,
    /// When it started, `/proc/PID/stat` field 22.
    start: u64,
}

/// The pids of the programs this process started and has not reaped yet: [`reap_adopted`]
/// leaves them to their `Child` handles (reaping one would take its exit status from them).
/// The lock is held from before a program is spawned until its pid is noted, so a reaper can
/// never see a program's pid unnoted. Counted: a pid reaped by its `Child` may be reused by
/// the next program before the first one's handle is dropped and forgets it.
static PROGRAMS: Mutex<BTreeMap<u32, u32>> = Mutex::new(BTreeMap::new());

fn programs() -> std::sync::MutexGuard<'static, BTreeMap<u32, u32>> {
    PROGRAMS.lock().unwrap_or_else(|p| p.into_inner())
}

/// This process as its programs' [`MARK`] names it (start time 0 where there is no `/proc`).
fn me() -> Proc {
    static ME: OnceLock<Proc> = OnceLock::new();
    *ME.get_or_init(|| {
        let pid = std::process::id();
        proc_of(pid).unwrap_or(Proc { pid, start: 0 })
    })
}

/// The [`MARK`] of program `serial` of worker `worker`.
fn mark(worker: Proc, serial: u64) -> String {
    format!("{}:{}:{serial}", worker.pid, worker.start)
}

/// Spawns `cmd` as a program of this process, noted so that [`reap_adopted`] leaves it to
/// its `Child`; [`forget_program`] once the child is reaped. It carries its [`MARK`]; the
/// serial returned names it to [`adopted_of`].
pub fn spawn_program(
    cmd: &mut std::process::Command,
) -> std::io::Result<(std::process::Child, u64)> {
    let serial = SERIAL.fetch_add(1, Ordering::Relaxed);
    cmd.env(MARK, mark(me(), serial));
    let mut noted = programs();
    let child = cmd.spawn()?;
    *noted.entry(child.id()).or_default() += 1;
    Ok((child, serial))
}

/// The [`MARK`] process `pid` carries, if any (its environment as it was when it started).
fn mark_of(pid: u32) -> Option<String> {
    let environ = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
    let prefix = format!("{MARK}=");
    environ
        .split(|&b| b == 0)
        .find_map(|var| var.strip_prefix(prefix.as_bytes()))
        .map(|v| String::from_utf8_lossy(v).into_owned())
}

/// The orphans of program `serial` re-parented to this process (a subreaper): its children it
/// did not start that carry the program's [`MARK`], and every process below them. Its
/// descendants whose parents still run are below the program instead ([`descendants`]).
pub fn adopted_of(serial: u64) -> Vec<Proc> {
    if !SUBREAPER.load(Ordering::Relaxed) {
        return Vec::new();
    }
    let me = me();
    let wanted = mark(me, serial);
    let orphans: Vec<u32> = {
        let noted = programs();
        children(me.pid)
            .into_iter()
            .filter(|c| !noted.contains_key(c))
            .collect()
    };
    let mut out = Vec::new();
    for c in orphans {
        if mark_of(c).as_deref() == Some(wanted.as_str())
            && let Some(p) = proc_of(c)
        {
            out.push(p);
            out.extend(descendants(c));
        }
    }
    out
}

/// Ends (SIGKILL) every process that carries a [`MARK`] of `worker`, a worker process that is
/// gone (SIGKILLed: it ended nothing): its programs and everything they started, wherever they
/// were re-parented. Only processes of user `uid` (the worker's) are signalled, so that a mark
/// copied into another user's process cannot have it killed. Returns how many it signalled;
/// 0 where there is no `/proc`.
pub fn end_marked_by(worker: Proc, uid: u32) -> usize {
    let prefix = format!("{}:{}:", worker.pid, worker.start);
    end_marked_where(|u| u == uid, |mark| mark.starts_with(&prefix))
}

/// The worker a [`MARK`] names (`PID:START:SERIAL`), if it reads as one.
fn worker_of(mark: &str) -> Option<Proc> {
    let mut parts = mark.split(':');
    let pid = parts.next()?.parse().ok()?;
    let start = parts.next()?.parse().ok()?;
    parts.next()?.parse::<u64>().ok()?;
    Some(Proc { pid, start })
}

/// Ends (SIGKILL) every process of a user in `uids` that carries a [`MARK`] whose worker (pid
/// and start time) no longer runs: what the programs of workers that died with their agent
/// (crash, SIGKILL, the machine's agent restarted) left running, which no agent ended since.
/// A process whose worker still runs (another agent's on this machine) is never signalled,
/// nor one whose mark does not read as a mark. Returns how many it signalled; 0 where there is
/// no `/proc`.
pub fn end_marked_by_dead_workers(uids: &BTreeSet<u32>) -> usize {
    end_marked_where(
        |u| uids.contains(&u),
        |mark| worker_of(mark).is_some_and(|w| !runs(w)),
    )
}

/// A process of a swept user as the sweep found it.
struct Found {
    proc: Proc,
    /// Its process group.
    pgid: u32,
    /// Its [`MARK`], if it carries one.
    mark: Option<String>,
}

/// SIGKILLs every running process of a user `of_user` accepts whose [`MARK`] `ends` accepts,
/// and every unmarked one of those users left in such a process's program group
/// ([`programs_groups`]); how many.
fn end_marked_where(of_user: impl Fn(u32) -> bool, ends: impl Fn(&str) -> bool) -> usize {
    let found = processes_of(of_user);
    let marked: Vec<&Found> = found
        .iter()
        .filter(|f| f.mark.as_deref().is_some_and(&ends))
        .collect();
    let groups = programs_groups(&marked);
    let mut ended = 0;
    for f in &found {
        // A process marked otherwise (another worker's, or not a mark) is never taken for
        // its group: its mark says it is not this program's.
        let take = match &f.mark {
            Some(m) => ends(m),
            None => groups.contains(&f.pgid),
        };
        if take && runs(f.proc) {
            signal(f.proc, nix::sys::signal::Signal::SIGKILL);
            ended += 1;
        }
    }
    ended
}

/// Every process of a user `of_user` accepts, with its group and mark; empty where there is
/// no `/proc`.
fn processes_of(of_user: impl Fn(u32) -> bool) -> Vec<Found> {
    use std::os::unix::fs::MetadataExt;
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .take(MAX_WALKED)
        .filter_map(|entry| {
            let pid = entry.file_name().to_str()?.parse::<u32>().ok()?;
            if !entry.metadata().is_ok_and(|m| of_user(m.uid())) {
                return None;
            }
            Some(Found {
                proc: proc_of(pid)?,
                pgid: pgid_of(pid)?,
                mark: mark_of(pid),
            })
        })
        .collect()
}

/// The process groups of `marked` (processes whose mark a sweep ends) that are their
/// programs' own: a program is started as the leader of a group of its own
/// (`multilang`, `process_group(0)`), and what it starts stays in it unless it leaves, so an
/// unmarked process there (one that cleared its environment, `env -i`) is the program's too.
///
/// A group is taken when a marked process is in it and its leader (the process whose pid is
/// the group's id, which created it) is one of `marked` or no longer runs. The kernel does
/// not give a new process the pid of a group that still has members, so that leader is the
/// group's creator and not a pid reused since. A group whose leader runs unmarked (the
/// agent's, a shell's job, a test harness's, which a marked process may have joined with
/// `setpgid`) or carries a mark not ended (a running worker's program) is never taken, nor
/// the sweeping process's own group.
fn programs_groups(marked: &[&Found]) -> BTreeSet<u32> {
    let own = pgid_of(std::process::id());
    marked
        .iter()
        .map(|f| f.pgid)
        .filter(|&g| {
            // Never 0 or 1 (init's), whatever `/proc` said.
            g > 1
                && Some(g) != own
                && (marked.iter().any(|m| m.proc.pid == g) || !proc_of(g).is_some_and(runs))
        })
        .collect()
}

/// Program `pid` was reaped by its `Child`: its pid may be reused.
pub fn forget_program(pid: u32) {
    let mut noted = programs();
    if let Some(n) = noted.get_mut(&pid) {
        *n -= 1;
        if *n == 0 {
            noted.remove(&pid);
        }
    }
}

/// Fields of `/proc/PID/stat` after the command's closing parenthesis (the command may hold
/// spaces and parentheses itself).
fn stat_fields(pid: u32) -> Option<Vec<String>> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = stat.rsplit_once(')')?;
    Some(rest.split_whitespace().map(str::to_owned).collect())
}

/// Process `pid` as it is now, if it exists (a zombie included).
pub fn proc_of(pid: u32) -> Option<Proc> {
    // Field 22 of the whole line: the 20th after the command (state is field 3).
    let start = stat_fields(pid)?.get(19)?.parse().ok()?;
    Some(Proc { pid, start })
}

/// The process group of process `pid`, `/proc/PID/stat` field 5.
fn pgid_of(pid: u32) -> Option<u32> {
    stat_fields(pid)?.get(2)?.parse().ok()
}

/// Whether `p` still runs: the same process (pid and start time), not a zombie.
pub fn runs(p: Proc) -> bool {
    stat_fields(p.pid).is_some_and(|f| {
        f.first().map(String::as_str) != Some("Z")
            && f.get(19).and_then(|s| s.parse().ok()) == Some(p.start)
    })
}

/// The children of every thread of `pid` (a child belongs to the thread that forked it, and
/// a re-parented orphan to any thread of its subreaper).
fn children(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return out;
    };
    for task in tasks.flatten() {
        if let Ok(text) = std::fs::read_to_string(task.path().join("children")) {
            out.extend(
                text.split_whitespace()
                    .filter_map(|c| c.parse::<u32>().ok()),
            );
        }
    }
    out
}

/// Every process below `pid` (not `pid` itself), parents before their children; empty where
/// there is no `/proc`.
pub fn descendants(pid: u32) -> Vec<Proc> {
    let mut seen: BTreeSet<u32> = BTreeSet::from([pid]);
    let mut out = Vec::new();
    let mut next = vec![pid];
    while let Some(p) = next.pop() {
        for c in children(p) {
            if out.len() >= MAX_WALKED {
                return out;
            }
            if seen.insert(c)
                && let Some(proc) = proc_of(c)
            {
                out.push(proc);
                next.push(c);
            }
        }
    }
    out
}

/// Sends `signal` to `p` if it is still the same process.
pub fn signal(p: Proc, signal: nix::sys::signal::Signal) {
    // Never 0 (the caller's group) or 1 (init), whatever `/proc` said.
    if p.pid > 1
        && runs(p)
        && let Ok(pid) = i32::try_from(p.pid)
    {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), signal);
    }
}

/// Makes this process a child subreaper (Linux): an orphan below it is re-parented to it, not
/// to init, so the worker still finds its programs' escaped descendants when it stops. Only
/// the worker process calls it (`process::run_process`): a test binary running workers in
/// process must not adopt its other tests' orphans.
#[cfg(target_os = "linux")]
pub fn become_subreaper() -> Result<(), String> {
    nix::sys::prctl::set_child_subreaper(true)
        .map_err(|e| format!("cannot become a child subreaper (prctl): {e}"))?;
    SUBREAPER.store(true, Ordering::Relaxed);
    Ok(())
}

/// Not Linux: nothing to do; the group kill alone stands.
#[cfg(not(target_os = "linux"))]
pub fn become_subreaper() -> Result<(), String> {
    Ok(())
}

/// Reaps this process's children that are neither programs it started (noted by
/// [`spawn_program`]) nor running: orphans re-parented to it as a subreaper that exited.
/// Returns how many.
pub fn reap_adopted() -> usize {
    use nix::sys::wait::{WaitPidFlag, waitpid};
    if !SUBREAPER.load(Ordering::Relaxed) {
        return 0;
    }
    let noted = programs();
    let mut reaped = 0;
    for c in children(std::process::id()) {
        if noted.contains_key(&c) {
            continue;
        }
        let zombie = stat_fields(c).is_some_and(|f| f.first().map(String::as_str) == Some("Z"));
        if zombie
            && let Ok(pid) = i32::try_from(c)
            && waitpid(nix::unistd::Pid::from_raw(pid), Some(WaitPidFlag::WNOHANG)).is_ok()
        {
            reaped += 1;
        }
    }
    reaped
}

/// Ends every process below this one (the worker's, when it stops after its executors did):
/// what its programs started and left behind, re-parented to it as a subreaper. SIGTERM to
/// each, SIGKILL to what is left after `grace`, then reaped. Returns how many it found.
pub fn end_all_descendants(grace: Duration) -> usize {
    use nix::sys::signal::Signal;
    let me = std::process::id();
    let found = descendants(me);
    for &p in &found {
        signal(p, Signal::SIGTERM);
    }
    let until = Instant::now() + grace;
    while found.iter().any(|&p| runs(p)) && Instant::now() < until {
        reap_adopted();
        std::thread::sleep(Duration::from_millis(20));
    }
    // What was started meanwhile is taken too.
    let mut left: BTreeSet<Proc> = found.iter().copied().filter(|&p| runs(p)).collect();
    left.extend(descendants(me));
    for &p in &left {
        signal(p, Signal::SIGKILL);
    }
    let until = Instant::now() + Duration::from_secs(1);
    while left.iter().any(|&p| runs(p)) && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(10));
    }
    reap_adopted();
    found.len()
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    /// Held by each test that sweeps or starts processes marked by a gone worker: another's
    /// sweep would end them under it (every such mark names a worker that no longer runs).
    static SWEEPS: Mutex<()> = Mutex::new(());

    fn sweeping() -> std::sync::MutexGuard<'static, ()> {
        SWEEPS.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A grandchild that left its group (`setsid`) is still found below the process that
    /// started it, and a process is not taken for another of its pid.
    #[test]
    fn a_descendant_that_left_its_group_is_found_below_its_ancestor() {
        let mut sh = std::process::Command::new("sh")
            .args(["-c", "setsid sleep 30 & echo $!; wait"])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("sh");
        let mut line = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(sh.stdout.take().expect("stdout")),
            &mut line,
        )
        .expect("the sleeper's pid");
        let sleeper: u32 = line.trim().parse().expect("a pid");
        let found = descendants(sh.id());
        assert!(
            found.iter().any(|p| p.pid == sleeper),
            "{sleeper} not in {found:?}"
        );
        let p = proc_of(sleeper).expect("it runs");
        assert!(runs(p));
        assert!(!runs(Proc {
            pid: p.pid,
            start: p.start + 1
        }));
        signal(p, nix::sys::signal::Signal::SIGKILL);
        let _ = sh.wait();
        assert!(!runs(p));
    }

    /// At an agent's start, a process whose mark names a worker that no longer runs is ended,
    /// and one whose mark names a running worker (here: this test process) is left alone, as
    /// is one whose mark does not read as one.
    #[test]
    fn only_processes_marked_by_a_worker_that_no_longer_runs_are_swept() {
        let _sweeping = sweeping();
        use std::process::Command;
        let mut gone = Command::new("true").spawn().expect("true");
        let gone_pid = gone.id();
        let dead = proc_of(gone_pid).expect("it exists until reaped");
        let _ = gone.wait();
        let sleeper = |mark: String| {
            Command::new("sleep")
                .arg("30")
                .env(MARK, mark)
                .spawn()
                .expect("sleep")
        };
        let mut orphan = sleeper(format!("{}:{}:7", dead.pid, dead.start));
        let mut kept = sleeper(mark(me(), 8));
        let mut odd = sleeper(format!("{}:x:9", dead.pid));
        let (o, k, d) = (
            proc_of(orphan.id()).expect("runs"),
            proc_of(kept.id()).expect("runs"),
            proc_of(odd.id()).expect("runs"),
        );
        let uids = BTreeSet::from([nix::unistd::geteuid().as_raw()]);
        assert!(end_marked_by_dead_workers(&uids) >= 1);
        let _ = orphan.wait();
        assert!(!runs(o));
        assert!(runs(k), "a running worker's program was swept");
        assert!(runs(d), "a process with an unreadable mark was swept");
        for (c, p) in [(&mut kept, k), (&mut odd, d)] {
            signal(p, nix::sys::signal::Signal::SIGKILL);
            let _ = c.wait();
        }
        assert_eq!(worker_of("12:34:5"), Some(Proc { pid: 12, start: 34 }));
        assert_eq!(worker_of("12:34"), None);
    }

    /// How long a process may take to start or to end here: far more than it needs.
    const DEADLINE: Duration = Duration::from_secs(30);

    /// Waits until `done`, failing with `what` past [`DEADLINE`].
    fn wait_until(what: &str, done: impl Fn() -> bool) {
        let started = Instant::now();
        while !done() {
            assert!(started.elapsed() < DEADLINE, "timed out waiting for {what}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// A worker process that no longer runs (pid and start time), as a SIGKILLed one is.
    fn a_gone_worker() -> Proc {
        let mut gone = std::process::Command::new("true").spawn().expect("true");
        let dead = proc_of(gone.id()).expect("it exists until reaped");
        let _ = gone.wait();
        dead
    }

    /// Runs `script` under `sh` in a process group of its own, as `multilang` starts a
    /// program, carrying `mark` if any (and never this process's), and reads the pids it
    /// prints, one a line, `n` of them.
    fn program(script: &str, mark: Option<String>, n: usize) -> (std::process::Child, Vec<u32>) {
        use std::os::unix::process::CommandExt;
        let mut cmd = std::process::Command::new("sh");
        cmd.args(["-c", script])
            .process_group(0)
            .env_remove(MARK)
            .stdout(std::process::Stdio::piped());
        if let Some(m) = mark {
            cmd.env(MARK, m);
        }
        let mut sh = cmd.spawn().expect("sh");
        let mut out = std::io::BufReader::new(sh.stdout.take().expect("stdout"));
        let pids = (0..n)
            .map(|_| {
                let mut line = String::new();
                std::io::BufRead::read_line(&mut out, &mut line).expect("a pid");
                line.trim().parse().expect("a pid")
            })
            .collect();
        (sh, pids)
    }

    /// `pid` once it runs `sleep` (its `env -i` exec'd) with no mark left: before the exec
    /// it still carries its parent's environment, and a sweep then would find it by its mark.
    fn unmarked_sleeper(pid: u32) -> Proc {
        let comm = || std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
        wait_until("`env -i` to exec `sleep`", || comm().trim() == "sleep");
        assert_eq!(comm().trim(), "sleep");
        assert_eq!(mark_of(pid), None, "{pid} still carries a mark");
        proc_of(pid).expect("it runs")
    }

    /// A program's child that cleared its environment (`env -i`) carries no mark, but it
    /// stayed in its program's process group: when the program's worker is gone, both sweeps
    /// (the agent's for a SIGKILLed worker, and an agent's at its start) end it with its
    /// program. An unmarked process of the same user in another group is left alone.
    #[test]
    fn an_unmarked_process_left_in_a_gone_workers_program_group_is_ended_with_it() {
        let _sweeping = sweeping();
        let uid = nix::unistd::geteuid().as_raw();
        let sweeps: [(&str, &dyn Fn(Proc) -> usize); 2] = [
            ("end_marked_by", &|w| end_marked_by(w, uid)),
            ("end_marked_by_dead_workers", &|_| {
                end_marked_by_dead_workers(&BTreeSet::from([uid]))
            }),
        ];
        for (name, sweep) in sweeps {
            let worker = a_gone_worker();
            let (mut sh, pids) =
                program("env -i sleep 300 & echo $!; wait", Some(mark(worker, 1)), 1);
            let leader = proc_of(sh.id()).expect("the program runs");
            let child = unmarked_sleeper(pids[0]);
            assert_eq!(
                pgid_of(child.pid),
                Some(leader.pid),
                "in its program's group"
            );
            assert!(mark_of(leader.pid).is_some(), "the program is marked");
            let (mut other, _) = program("echo $$; exec sleep 300", None, 1);
            let stranger = proc_of(other.id()).expect("it runs");
            let ended = sweep(worker);
            let _ = sh.wait();
            wait_until(&format!("{name} to end the unmarked child"), || {
                !runs(child)
            });
            assert!(ended >= 2, "{name}: {ended}");
            assert!(
                runs(stranger),
                "{name} ended an unmarked process of another group"
            );
            signal(stranger, nix::sys::signal::Signal::SIGKILL);
            let _ = other.wait();
        }
    }

    /// A group whose leader runs unmarked is not a program's, though a process in it carries
    /// a gone worker's mark (one that joined it, or was started there marked): the marked
    /// process is ended, the group's unmarked members are not.
    #[test]
    fn a_marked_process_in_an_unmarked_leaders_group_does_not_take_the_group() {
        let _sweeping = sweeping();
        let worker = a_gone_worker();
        let script = format!(
            "{MARK}={} sleep 300 & echo $!; sleep 300 & echo $!; wait",
            mark(worker, 1)
        );
        let (mut sh, pids) = program(&script, None, 2);
        let leader = proc_of(sh.id()).expect("the leader runs");
        let marked = proc_of(pids[0]).expect("runs");
        let sibling = proc_of(pids[1]).expect("runs");
        wait_until("the marked sleeper to exec", || {
            mark_of(marked.pid).is_some()
        });
        assert_eq!(pgid_of(marked.pid), Some(leader.pid));
        assert_eq!(pgid_of(sibling.pid), Some(leader.pid));
        let uid = nix::unistd::geteuid().as_raw();
        assert!(end_marked_by(worker, uid) >= 1);
        wait_until("the marked process to end", || !runs(marked));
        assert!(runs(leader), "an unmarked leader was ended");
        assert!(runs(sibling), "an unmarked member of its group was ended");
        for p in [sibling, leader] {
            signal(p, nix::sys::signal::Signal::SIGKILL);
        }
        let _ = sh.wait();
    }
}
