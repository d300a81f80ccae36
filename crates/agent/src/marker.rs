//! The mark on every process the agent starts for work, and the scan that finds the marked
//! processes an agent left behind.
//!
//! The ledger ([`crate::ledger`]) names a task's process only once it has been spawned: the agent
//! learns the pid when the spawn returns, then appends the `start` line. An agent SIGKILLed
//! between the two leaves a task that no record lists, and its guard and its successor left it
//! running — an orphan that held the node's cores while the server ran the task again
//! elsewhere. And the ANode's offloaded tasks were in no record at all.
//!
//! So every task's process, divisible chunk and offloaded task carries [`VAR`] in its
//! environment, with the agent's work directory as its value (set after the job's own
//! environment, so a job cannot set it), and its children inherit it. Once the agent is gone, its
//! guard — and at start, the next agent in the directory, before it registers — reads
//! `/proc/PID/environ` of every process and SIGKILLs the process group of each one carrying the
//! directory's mark ([`kill_marked`]), besides what the ledgers list.
//!
//! The scan does not miss a process the agent had forked but not yet turned into the task: the
//! child holds a copy of the agent's end of the guard's pipe (close-on-exec) until its `exec`, so
//! the guard acts only once the child is in its `exec`; a process whose environment still reads
//! empty then (the kernel writes it last) is read again a moment later ([`SETTLE`]).
//! A process that clears its environment before `exec` (`env -i`) loses the mark, and one that
//! leaves its group is reached only if it kept it; the process group of a marked process is
//! killed whole.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// The environment variable that marks a process as the work of the agent whose work directory
/// it names.
pub const VAR: &str = "HETSCHED_AGENT_WORK_DIR";

/// `path` with its links resolved, or as it is when that fails (it may be gone).
fn resolved(path: &Path) -> PathBuf {
    std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf())
}

/// The value of [`VAR`] in an environment block (`/proc/PID/environ`: `NAME=VALUE` entries, each
/// ended by a NUL), if it is there.
fn mark_in(environ: &[u8]) -> Option<&OsStr> {
    let prefix = [VAR.as_bytes(), b"="].concat();
    environ
        .split(|&b| b == 0)
        .find_map(|entry| entry.strip_prefix(prefix.as_slice()))
        .map(OsStr::from_bytes)
}

/// Field 5 (`pgrp`) of `/proc/PID/stat`.
fn process_group(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    crate::usage::stat_fields(&stat)?.nth(2)?.parse().ok()
}

/// How long a process whose environment read empty is given before it is read once more: a
/// process in the middle of its `exec` has its new memory but not yet its environment (the
/// kernel lets a `vfork` parent go on, and closes close-on-exec files, before it writes the new
/// stack). Zombies and kernel threads, which read empty too, are not waited for, so a scan
/// that finds no process mid-`exec` does not wait at all.
const SETTLE: std::time::Duration = std::time::Duration::from_millis(50);

/// `PF_KTHREAD` in the flags of `/proc/PID/stat` (field 9): a kernel thread.
const PF_KTHREAD: u64 = 0x0020_0000;

/// Whether an empty environment may yet be filled: `pid` is neither a zombie (or dead) nor a
/// kernel thread.
fn may_be_in_exec(pid: u32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    let Some(mut fields) = crate::usage::stat_fields(&stat) else {
        return false;
    };
    let state = fields.next();
    // Field 9 is the 6th after field 3.
    let flags: Option<u64> = fields.nth(5).and_then(|f| f.parse().ok());
    !matches!(state, Some("Z" | "X" | "x")) && flags.is_some_and(|f| f & PF_KTHREAD == 0)
}

/// What a look at one process found.
enum Seen {
    Marked,
    /// Its environment read empty: see [`SETTLE`].
    Empty,
    Other,
}

/// Whether `pid`'s environment carries the mark of `work_dir` (or of `dir`, the same directory
/// with its links resolved).
fn look(pid: u32, work_dir: &Path, dir: &Path) -> Seen {
    // Gone since the listing, or not ours to read.
    let Ok(environ) = std::fs::read(format!("/proc/{pid}/environ")) else {
        return Seen::Other;
    };
    if environ.is_empty() {
        return Seen::Empty;
    }
    match mark_in(&environ) {
        Some(mark) if Path::new(mark) == work_dir || resolved(Path::new(mark)) == dir => {
            Seen::Marked
        }
        _ => Seen::Other,
    }
}

/// SIGKILLs the process group of every process (other than this one) whose environment carries
/// the mark of `work_dir` (spelled the same way, or naming the same directory once links are
/// resolved), and the process itself where it has left its group — alone where the group it
/// joined is led by a live process without the mark (not a task's group). Returns the groups
/// killed, in order; a marked process in this process's own group is killed alone and counts by
/// its pid. Groups in `ledgers` (process groups a ledger lists: killed by it already, or to be
/// killed by its recovery, which logs them in its own words) are left alone and not counted.
/// Processes whose environment this process may not read (another account's, for an agent that
/// is not root) are not found. It blocks for [`SETTLE`] when a process may be in the middle of
/// its `exec`.
pub fn kill_marked(work_dir: &Path, ledgers: &[u32]) -> Vec<u32> {
    let me = std::process::id();
    let own_group = process_group(me);
    let dir = resolved(work_dir);
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let pids: Vec<u32> = entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| pid > 1 && pid != me)
        .collect();
    let mut killed = Vec::new();
    let mut kill = |pid: u32| {
        let group = process_group(pid).filter(|&g| g > 1 && Some(g) != own_group);
        // A group a ledger kills (or has killed) is left to it, which says so in its own words.
        if group.is_some_and(|g| ledgers.contains(&g)) || ledgers.contains(&pid) {
            return;
        }
        let group = match group {
            Some(group) => {
                // A group whose leader lives without the mark is not a task's: a marked process
                // that joined it (its own shell's, say) is killed alone, so an environment
                // variable anyone can set never takes another group down.
                let foreign = group != pid
                    && Path::new(&format!("/proc/{group}")).exists()
                    && matches!(look(group, work_dir, &dir), Seen::Other);
                if !foreign {
                    crate::launch::signal_group(group, nix::sys::signal::Signal::SIGKILL);
                }
                group
            }
            None => pid,
        };
        if let Ok(p) = i32::try_from(pid) {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(p),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
        killed.push(group);
    };
    let mut empty = Vec::new();
    for pid in pids {
        match look(pid, work_dir, &dir) {
            Seen::Marked => kill(pid),
            Seen::Empty if may_be_in_exec(pid) => empty.push(pid),
            Seen::Empty => {}
            Seen::Other => {}
        }
    }
    if !empty.is_empty() {
        std::thread::sleep(SETTLE);
    }
    for pid in empty {
        if let Seen::Marked = look(pid, work_dir, &dir) {
            kill(pid);
        }
    }
    killed.sort_unstable();
    killed.dedup();
    killed
}

#[cfg(test)]
mod tests {
    use super::*;
    use hetsched_core::testkit::ScratchDir;
    use std::os::unix::process::CommandExt;
    use std::time::{Duration, Instant};

    /// Whether process `pid` (not a child of the test) is gone or a zombie within 5 s.
    fn dead_within(pid: u32) -> bool {
        let dead =
            || crate::ledger::proc_start_time(pid).is_none() || crate::ledger::is_zombie(pid);
        let deadline = Instant::now() + Duration::from_secs(5);
        while !dead() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        dead()
    }

    /// The pid a test's shell writes to `path`, once it is there whole (within 5 s).
    fn pid_written(path: &Path) -> u32 {
        let read = || -> Option<u32> { std::fs::read_to_string(path).ok()?.trim().parse().ok() };
        let deadline = Instant::now() + Duration::from_secs(5);
        while read().is_none() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        read().expect("the shell wrote its child's pid")
    }

    #[test]
    fn zombies_and_kernel_threads_are_not_waited_for_but_a_live_process_may_be() {
        assert!(may_be_in_exec(std::process::id()));
        // kthreadd, the parent of every kernel thread, where the kernel has one.
        if std::fs::read_to_string("/proc/2/comm").is_ok_and(|c| c.trim() == "kthreadd") {
            assert!(!may_be_in_exec(2));
        }
        let mut child = std::process::Command::new("true")
            .spawn()
            .expect("test setup");
        let pid = child.id();
        let deadline = Instant::now() + Duration::from_secs(5);
        while !crate::ledger::is_zombie(pid) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(!may_be_in_exec(pid), "a zombie");
        let _ = child.wait();
    }

    #[test]
    fn the_mark_is_read_from_an_environment_block() {
        let block = b"PATH=/bin\0HETSCHED_AGENT_WORK_DIR=/var/lib/a\0HOME=/\0";
        assert_eq!(mark_in(block), Some(OsStr::new("/var/lib/a")));
        assert_eq!(mark_in(b"XHETSCHED_AGENT_WORK_DIR=/a\0"), None);
        assert_eq!(mark_in(b"HETSCHED_AGENT_WORK_DIR_2=/a\0"), None);
        assert_eq!(mark_in(b""), None);
    }

    fn gone(child: &mut std::process::Child) -> bool {
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if child.try_wait().expect("test setup").is_some() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        false
    }

    /// A marked process in a group led by a live process without the mark (its own shell's,
    /// not a task's): killed alone, the group's leader left running.
    #[test]
    fn a_marked_process_in_a_group_it_does_not_lead_takes_only_itself_down() {
        let base = ScratchDir::new("marker", "foreign");
        let dir = base.join("agent");
        std::fs::create_dir_all(&dir).expect("test setup");
        let pid_file = base.join("marked.pid");
        let mut leader = std::process::Command::new("sh")
            .args([
                "-c",
                &format!(
                    "{VAR}={} sleep 300 & echo $! > {}; sleep 300",
                    dir.display(),
                    pid_file.display()
                ),
            ])
            .process_group(0)
            .spawn()
            .expect("test setup");
        let marked = pid_written(&pid_file);
        // Marked once the subshell has `exec`ed `sleep` with the variable: until then it is the
        // shell's copy, unmarked (on a loaded machine the pid is written well before).
        let deadline = Instant::now() + Duration::from_secs(5);
        while !std::fs::read(format!("/proc/{marked}/environ"))
            .is_ok_and(|e| e.windows(VAR.len()).any(|w| w == VAR.as_bytes()))
            && Instant::now() < deadline
        {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(
            kill_marked(&dir, &[]),
            vec![leader.id()],
            "counted by its group"
        );
        assert!(dead_within(marked), "the marked process was killed");
        assert_eq!(
            leader.try_wait().expect("test setup"),
            None,
            "its group's unmarked leader runs on"
        );
        crate::launch::signal_group(leader.id(), nix::sys::signal::Signal::SIGKILL);
        let _ = leader.wait();
    }

    #[test]
    fn processes_marked_with_the_directory_are_killed_with_their_groups_and_no_others() {
        let base = ScratchDir::new("marker", "groups");
        let (dir, other) = (base.join("agent"), base.join("other"));
        std::fs::create_dir_all(&dir).expect("test setup");
        std::fs::create_dir_all(&other).expect("test setup");
        std::os::unix::fs::symlink(&dir, base.join("link")).expect("test setup");
        let start = |mark: &Path, script: &str| {
            std::process::Command::new("sh")
                .args(["-c", script])
                .env(VAR, mark)
                .process_group(0)
                .spawn()
                .expect("test setup")
        };
        // A task whose child stays in its group, its pid written for the test.
        let pid_file = base.join("grandchild.pid");
        let mut task = start(
            &dir,
            &format!("sleep 300 & echo $! > {}; wait", pid_file.display()),
        );
        // Marked through a link to the same directory (a successor started with another
        // spelling of it).
        let mut linked = start(&base.join("link"), "exec sleep 300");
        let mut others = start(&other, "exec sleep 300");
        let grandchild = pid_written(&pid_file);
        // The linked process's group is a ledger's: left to it.
        let killed = kill_marked(&dir, &[linked.id()]);
        assert_eq!(killed, vec![task.id()], "the task's group, once");
        assert!(gone(&mut task), "the marked task was killed");
        assert!(dead_within(grandchild), "and the task's child with it");
        assert_eq!(
            linked.try_wait().expect("test setup"),
            None,
            "a ledger's group is its own"
        );
        assert_eq!(
            kill_marked(&dir, &[]),
            vec![linked.id()],
            "a link resolves to the directory"
        );
        assert!(gone(&mut linked));
        assert_eq!(kill_marked(&dir, &[]), Vec::<u32>::new(), "nothing is left");
        assert_eq!(
            others.try_wait().expect("test setup"),
            None,
            "another directory's process runs on"
        );
        crate::launch::signal_group(others.id(), nix::sys::signal::Signal::SIGKILL);
        let _ = others.wait();
    }
}
