//! What a task's process used — its accounting, as `sacct` shows it: CPU time in user and kernel
//! mode, and peak resident memory.
//!
//! - **CPU time is exact.** The agent learns that the task's process exited *before* reaping it
//!   (a pidfd, readable once the process exits, on the runtime's reactor): the zombie keeps its kernel counters, so `/proc/PID/stat` still gives its own
//!   user and system time (fields 14–15) and those of every descendant it waited for (16–17). A
//!   shell running a program counts the program. Descendants the task left running are not
//!   counted.
//! - **Peak memory is sampled**, as Slurm's `jobacct_gather/linux` does: 10 ms after the start,
//!   then at doubling intervals up to every second, the sampler sums the resident memory of the
//!   task's process tree (found through `/proc/PID/task/PID/children`); the peak is the largest
//!   such sum, or the process's own high-water mark (`VmHWM`) if larger. A tree's peak between
//!   two samples can be missed, and a task that ends within 10 ms gets no sample at all — so
//!   the peak reported is also at least `ru_maxrss` of the rusage `wait4` fills when it reaps
//!   the process ([`Process::reap`]): the largest resident set of the process itself and of the
//!   descendants it waited for. But the kernel counts in it the memory the process had before
//!   its `exec`, which was the agent's (a `vfork` shares the agent's memory, a `fork` copies
//!   it): a figure no larger than the agent's own peak (`VmHWM`, read once the spawn returned,
//!   after the `exec`) may be the agent's, and is not used; above it, it is the task's. So a
//!   short task shows its peak when it exceeds the agent's. That is why a task's process is spawned with std's `Command`
//!   and reaped here, not by tokio (whose `Child::wait`, like std's and rustix's `waitpid`, gives
//!   the kernel no rusage to fill; `getrusage(RUSAGE_CHILDREN)` is the largest peak of every
//!   child the agent ever reaped, not one task's). The `wait4` crate wraps the call (the
//!   workspace forbids `unsafe`).
//!
//! - **Peak GPU memory is sampled** with the resident memory, as Slurm's `gres/gpumem` (its
//!   NVML plugin) is: a GPU task's watch ([`Watch::with_gpu_memory`]) asks NVML at each sample
//!   for the processes using each of the task's devices and the memory each uses
//!   ([`crate::detect::Gpus::process_memory`]), sums that of the processes of the task's tree
//!   (the same walk as the resident memory's), and keeps the largest sum. Another task's
//!   processes on the same device are not counted. 0 when nothing was measured: a CPU task, a
//!   node without NVML, or a task that ended before its first sample (NVML keeps no
//!   high-water mark of a process).
//!
//! The same samples enforce a task's declared `memory`, as Slurm's `OverMemoryKill` does: a
//! sample above it ends the watch early ([`Exit::OverMemory`]) and the task is stopped.
//!
//! Where the kernel has no pidfd (before Linux 5.3) the task runs as before and its result
//! carries no usage (and its memory is not enforced).

use hetsched_proto as pb;
use rustix::process::{Pid, PidfdFlags};
use std::os::fd::OwnedFd;
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use tokio::io::unix::AsyncFd;
use tokio::time::Instant;

/// The first memory sample, after the start.
const FIRST_SAMPLE: Duration = Duration::from_millis(10);
/// Samples come at doubling intervals up to this one.
const MAX_SAMPLE_INTERVAL: Duration = Duration::from_secs(1);
/// A sample reads at most this many processes of the task's tree (a fork bomb costs the agent
/// no more than this per sample).
const MAX_TREE: usize = 1024;

/// A pidfd of the task's process, readable once the process has exited (before it is reaped),
/// registered with the runtime's reactor as tokio's own child reaper registers its pidfd.
fn exit_watch(pid: Pid) -> Option<AsyncFd<OwnedFd>> {
    let fd = rustix::process::pidfd_open(pid, PidfdFlags::NONBLOCK).ok()?;
    // Deprecated because a generic `T` need not own its descriptor; an `OwnedFd` does, and the
    // `AsyncFd` owns it until it is dropped, which is what `AsyncFd::register` requires.
    #[allow(deprecated)]
    let watch = AsyncFd::with_interest(fd, tokio::io::Interest::READABLE).ok()?;
    Some(watch)
}

/// The GPU memory each process uses on one device (NVML's index), as (pid, bytes): NVML's view
/// ([`crate::detect::Gpus::process_memory`]) on an agent, a fake in tests.
pub type GpuProcesses = Arc<dyn Fn(u32) -> Vec<(u32, u64)> + Send + Sync>;

/// NVML's view of the processes on each device, for the agent's GPU tasks (nothing where NVML
/// does not load). Loaded once, by the first GPU task (a CPU-only agent never loads it), and
/// shared by every task: `launch::run` has no handle of the agent's own to take. A device the
/// agent's configuration names (`names`: `[[accelerator]] visible`, a MIG instance's UUID) is
/// looked up by that name, not by its index, which NVML numbers otherwise.
pub fn nvml_processes(names: &[Option<String>]) -> GpuProcesses {
    static NVML: OnceLock<Arc<crate::detect::Gpus>> = OnceLock::new();
    let gpus = NVML
        .get_or_init(|| Arc::new(crate::detect::Gpus::init()))
        .clone();
    let names = names.to_vec();
    Arc::new(move |device| match names.get(device as usize) {
        Some(Some(name)) => gpus.process_memory_by_uuid(name),
        _ => gpus.process_memory(device),
    })
}

/// What a GPU task's watch asks at each sample.
struct GpuWatch {
    /// The task's devices.
    devices: Vec<u32>,
    processes: GpuProcesses,
    /// The largest sum yet, bytes.
    peak_bytes: u64,
}

/// A running task's process, watched until it exits.
pub struct Watch {
    pid: u32,
    /// Readable once the process exited.
    exited: AsyncFd<OwnedFd>,
    next_sample: Instant,
    interval: Duration,
    peak_bytes: u64,
    /// The task's declared memory, bytes (0 = none); cleared once exceeded.
    limit_bytes: u64,
    /// A GPU task's devices, sampled too ([`Watch::with_gpu_memory`]).
    gpu: Option<GpuWatch>,
}

/// A task's process, spawned with std's `Command` and reaped here with `wait4`, for its rusage
/// (the module's doc). Until it is reaped the process keeps its pid, so signals sent to that pid
/// (or its group) reach no other process. Dropped unreaped (the task's run was abandoned), it is
/// SIGKILLed and reaped on a thread of its own, as tokio's `kill_on_drop` does.
#[derive(Debug)]
pub struct Process {
    /// `None` once reaped.
    child: Option<std::process::Child>,
    pid: u32,
    /// The agent's own peak resident memory once the process had `exec`ed, bytes: what its
    /// `ru_maxrss` may hold of the agent's (the module's doc).
    inherited: u64,
}

impl Process {
    /// Takes charge of `child` (its pipes taken or not), as soon as its spawn has returned.
    pub fn new(child: std::process::Child) -> Self {
        let pid = child.id();
        Self {
            child: Some(child),
            pid,
            inherited: agents_peak(),
        }
    }

    /// The process's id.
    pub fn id(&self) -> u32 {
        self.pid
    }

    /// Waits until the process has exited, leaving it unreaped (`waitid` with `WNOWAIT`, on a
    /// blocking thread): where there is no [`Watch`] (no pidfd). Returns at once once reaped.
    pub async fn exited(&self) {
        if self.child.is_none() {
            return;
        }
        let Some(pid) = i32::try_from(self.pid).ok().and_then(Pid::from_raw) else {
            return;
        };
        let waited = tokio::task::spawn_blocking(move || {
            use rustix::process::{WaitId, WaitIdOptions, waitid};
            loop {
                match waitid(
                    WaitId::Pid(pid),
                    WaitIdOptions::EXITED | WaitIdOptions::NOWAIT,
                ) {
                    Err(rustix::io::Errno::INTR) => {}
                    _ => return,
                }
            }
        });
        let _ = waited.await;
    }

    /// Reaps the exited process (waiting for its exit first if need be): its exit status and
    /// its `ru_maxrss` in bytes, the peak resident memory of the process and of the descendants
    /// it waited for — or 0 when that is no more than the agent's own peak, which it may be.
    pub async fn reap(&mut self) -> std::io::Result<(std::process::ExitStatus, u64)> {
        use wait4::Wait4;
        for first in [true, false] {
            let Some(child) = self.child.as_mut() else {
                break;
            };
            if let Some(r) = child.try_wait4()? {
                // Reaped: its pid may name another process from now on; nothing signals it.
                self.child = None;
                let peak = r.rusage.maxrss;
                return Ok((r.status, if peak > self.inherited { peak } else { 0 }));
            }
            if first {
                self.exited().await;
            }
        }
        Err(std::io::Error::other(
            "the task's process was reaped already, or has not exited",
        ))
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            // Unreaped, so the pid is still this process's.
            let _ = child.kill();
            std::thread::spawn(move || {
                let _ = child.wait();
            });
        }
    }
}

/// How a watch ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exit {
    /// The process exited.
    Exited,
    /// A sample of its tree's resident memory (this many bytes) exceeded the limit; the
    /// process still runs.
    OverMemory(u64),
}

impl Watch {
    /// Starts watching process `pid`, a child of this agent not reaped yet, whose tree may hold
    /// `limit_bytes` of resident memory (0 = no limit); `None` where the kernel has no pidfd or
    /// epoll.
    pub fn new(pid: u32, limit_bytes: u64) -> Option<Self> {
        let raw = Pid::from_raw(i32::try_from(pid).ok()?)?;
        Some(Watch {
            pid,
            exited: exit_watch(raw)?,
            next_sample: Instant::now() + FIRST_SAMPLE,
            interval: FIRST_SAMPLE,
            peak_bytes: 0,
            limit_bytes,
            gpu: None,
        })
    }

    /// Samples also the GPU memory that the processes of the task's tree use on `devices`,
    /// as `processes` gives it (the module's doc); no devices: nothing to sample.
    pub fn with_gpu_memory(mut self, devices: &[u32], processes: GpuProcesses) -> Self {
        if !devices.is_empty() {
            self.gpu = Some(GpuWatch {
                devices: devices.to_vec(),
                processes,
                peak_bytes: 0,
            });
        }
        self
    }

    /// One sample: the tree's resident memory now, bytes (the peaks are kept).
    fn sample(&mut self) -> u64 {
        let mut tree = tree_pids(self.pid);
        let now = tree_resident_bytes(&tree);
        self.peak_bytes = self.peak_bytes.max(now);
        if let Some(g) = &mut self.gpu {
            tree.sort_unstable();
            let used = gpu_bytes(&tree, &g.devices, &*g.processes);
            g.peak_bytes = g.peak_bytes.max(used);
        }
        now
    }

    /// Waits until the process has exited, sampling its tree's memory meanwhile — or until a
    /// sample exceeds the limit, once (a later call waits for the exit). The process is left for
    /// the caller to reap (a zombie, with its counters).
    pub async fn exited(&mut self) -> Exit {
        loop {
            tokio::select! {
                // An error: the runtime is shutting down; the process is then waited for
                // without its usage.
                _ = self.exited.readable() => return Exit::Exited,
                () = tokio::time::sleep_until(self.next_sample) => {
                    let now = self.sample();
                    self.interval = (self.interval * 2).min(MAX_SAMPLE_INTERVAL);
                    self.next_sample = Instant::now() + self.interval;
                    if self.limit_bytes > 0 && now > self.limit_bytes {
                        self.limit_bytes = 0;
                        return Exit::OverMemory(now);
                    }
                }
            }
        }
    }

    /// What the exited, not yet reaped, process used; `None` if its counters cannot be read.
    pub fn usage(&self) -> Option<pb::TaskUsage> {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.pid)).ok()?;
        let ticks = stat_cpu_ticks(&stat)?;
        let per_s = rustix::param::clock_ticks_per_second().max(1);
        let ms = |t: u64| t.saturating_mul(1000) / per_s;
        Some(pb::TaskUsage {
            cpu_user_ms: ms(ticks.user),
            cpu_system_ms: ms(ticks.system),
            max_rss_bytes: self.peak_bytes,
            max_gpu_memory_bytes: self.gpu.as_ref().map_or(0, |g| g.peak_bytes),
        })
    }
}

/// User and system CPU time in clock ticks, the process's own plus its waited-for children's.
#[derive(Debug, PartialEq, Eq)]
struct CpuTicks {
    user: u64,
    system: u64,
}

/// The fields of a `/proc/PID/stat` line from field 3 (the state) on. The command name (field 2)
/// is in parentheses and may hold spaces and parentheses: the fields start after the last `)`.
pub(crate) fn stat_fields(stat: &str) -> Option<std::str::SplitWhitespace<'_>> {
    Some(stat[stat.rfind(')')? + 1..].split_whitespace())
}

/// Fields 14–17 of a `/proc/PID/stat` line: utime, stime, cutime, cstime.
fn stat_cpu_ticks(stat: &str) -> Option<CpuTicks> {
    // Field 14 is the 12th from field 3.
    let mut f = stat_fields(stat)?.skip(11);
    let mut next = || -> Option<u64> {
        // cutime and cstime are signed in the kernel's format; they are never negative.
        let v: i64 = f.next()?.parse().ok()?;
        u64::try_from(v).ok()
    };
    let (utime, stime, cutime, cstime) = (next()?, next()?, next()?, next()?);
    Some(CpuTicks {
        user: utime + cutime,
        system: stime + cstime,
    })
}

/// One process's resident memory now and its high-water mark, bytes, from `/proc/PID/status`
/// (both 0 for a zombie or a process that is gone).
fn resident_bytes(pid: u32) -> (u64, u64) {
    let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
        return (0, 0);
    };
    status_memory(&status)
}

/// The agent's own peak resident memory (`VmHWM`), bytes; unreadable, the largest figure (no
/// `ru_maxrss` is then known to be the task's).
fn agents_peak() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .map(|s| status_memory(&s).1)
        .filter(|&b| b > 0)
        .unwrap_or(u64::MAX)
}

/// `VmRSS` and `VmHWM` of a `/proc/PID/status` text, bytes.
fn status_memory(status: &str) -> (u64, u64) {
    let kib = |key: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .map_or(0, |k| k.saturating_mul(1024))
    };
    (kib("VmRSS:"), kib("VmHWM:"))
}

/// The processes of the tree rooted at `pid`, the root first; at most [`MAX_TREE`].
fn tree_pids(pid: u32) -> Vec<u32> {
    let mut tree = vec![pid];
    let mut stack = children(pid);
    while let Some(p) = stack.pop() {
        if tree.len() >= MAX_TREE {
            break;
        }
        tree.push(p);
        stack.extend(children(p));
    }
    tree
}

/// The peak to record now for `tree` (its root first): its summed resident memory, or the
/// root's own high-water mark if larger.
fn tree_resident_bytes(tree: &[u32]) -> u64 {
    let Some((&root, rest)) = tree.split_first() else {
        return 0;
    };
    let (root_rss, root_hwm) = resident_bytes(root);
    let sum = rest
        .iter()
        .fold(root_rss, |sum, &p| sum.saturating_add(resident_bytes(p).0));
    sum.max(root_hwm)
}

/// The GPU memory the processes of `tree` (sorted) use on `devices` now, bytes, as `processes`
/// gives each device's; other processes on those devices are not counted.
fn gpu_bytes(tree: &[u32], devices: &[u32], processes: &dyn Fn(u32) -> Vec<(u32, u64)>) -> u64 {
    devices
        .iter()
        .flat_map(|&d| processes(d))
        .filter(|(pid, _)| tree.binary_search(pid).is_ok())
        .fold(0, |sum, (_, bytes)| sum.saturating_add(bytes))
}

/// The children of `pid`'s main thread (`/proc/PID/task/PID/children`).
fn children(pid: u32) -> Vec<u32> {
    std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
        .map(|s| {
            s.split_whitespace()
                .filter_map(|x| x.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_ticks_are_read_after_a_command_name_with_spaces_and_parentheses() {
        // Fields: pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt majflt
        // cmajflt utime stime cutime cstime …
        let line = "4242 (my (odd) prog) Z 1 4242 4242 0 -1 4227084 120 0 0 0 30 5 200 7 20 0 1";
        assert_eq!(
            stat_cpu_ticks(line),
            Some(CpuTicks {
                user: 230,
                system: 12
            })
        );
        assert_eq!(stat_cpu_ticks("4242 (cut short) Z 1 2 3"), None);
    }

    #[test]
    fn resident_memory_is_read_in_kib_from_status() {
        let status = "Name:\tx\nVmHWM:\t  204800 kB\nVmRSS:\t  102400 kB\nThreads:\t1\n";
        assert_eq!(status_memory(status), (100 << 20, 200 << 20));
        assert_eq!(status_memory("Name:\tzombie\nState:\tZ (zombie)\n"), (0, 0));
    }

    /// Runs `sh -c script` as the agent runs a task: watched, then reaped.
    async fn usage_of(script: &str) -> pb::TaskUsage {
        let mut child = tokio::process::Command::new("sh")
            .args(["-c", script])
            .spawn()
            .expect("sh starts");
        let mut watch = Watch::new(child.id().expect("running"), 0).expect("this kernel has pidfd");
        assert_eq!(watch.exited().await, Exit::Exited);
        let usage = watch.usage().expect("the zombie's counters are readable");
        let status = child.wait().await.expect("reaped");
        assert!(status.success());
        usage
    }

    #[tokio::test]
    async fn a_tasks_cpu_time_counts_the_programs_its_shell_ran() {
        // The work is done by a child (`awk`) the shell waits for: counted in cutime.
        let u = usage_of("awk 'BEGIN { for (i = 0; i < 20000000; i++) s += i }'").await;
        assert!(
            u.cpu_user_ms + u.cpu_system_ms >= 100,
            "a busy loop of about a second shows its CPU time: {u:?}"
        );
        let idle = usage_of("sleep 0.3").await;
        assert!(
            idle.cpu_user_ms + idle.cpu_system_ms < 100,
            "sleeping costs no CPU: {idle:?}"
        );
    }

    #[tokio::test]
    async fn a_tasks_peak_memory_counts_its_children() {
        // The inner shell, a child of the task's, holds 64 MiB in a variable for a second.
        let hold = r#"sh -c 'x=$(head -c 67108864 /dev/zero | tr "\0" a); sleep 1; : "$x"'; true"#;
        let u = usage_of(hold).await;
        assert!(
            u.max_rss_bytes >= 60 << 20,
            "a child holding 64 MiB is seen: {} MiB",
            u.max_rss_bytes >> 20
        );
        let small = usage_of("sleep 0.2").await;
        assert!(
            small.max_rss_bytes > 0 && small.max_rss_bytes < 60 << 20,
            "{small:?}"
        );
    }

    /// Runs `sh -c script` as the agent runs a GPU task on `devices`, NVML's view of each
    /// device given by `processes` (called with the device and the task's pid).
    async fn gpu_usage_of(
        script: &str,
        devices: &[u32],
        processes: impl Fn(u32, u32) -> Vec<(u32, u64)> + Send + Sync + 'static,
    ) -> pb::TaskUsage {
        let mut child = tokio::process::Command::new("sh")
            .args(["-c", script])
            .spawn()
            .expect("sh starts");
        let pid = child.id().expect("running");
        let watch = Watch::new(pid, 0).expect("this kernel has pidfd");
        let mut watch = watch.with_gpu_memory(devices, Arc::new(move |d| processes(d, pid)));
        assert_eq!(watch.exited().await, Exit::Exited);
        let usage = watch.usage().expect("the zombie's counters are readable");
        child.wait().await.expect("reaped");
        usage
    }

    #[tokio::test]
    async fn a_gpu_tasks_peak_gpu_memory_counts_its_tree_on_its_devices_only() {
        // The shell's child (`sleep`) holds 2 GiB on device 0 and the shell 1 GiB on device 2;
        // pid 1 (no part of the tree) holds 8 GiB on device 0, and device 1 is not the task's.
        let u = gpu_usage_of("sleep 0.3; true", &[0, 2], |device, root| match device {
            0 => {
                let mut on = vec![(1, 8 << 30)];
                on.extend(children(root).into_iter().map(|p| (p, 2 << 30)));
                on
            }
            1 => vec![(root, 16 << 30)],
            2 => vec![(root, 1 << 30)],
            _ => Vec::new(),
        })
        .await;
        assert_eq!(u.max_gpu_memory_bytes, 3 << 30, "{u:?}");
    }

    #[tokio::test]
    async fn a_gpu_tasks_peak_gpu_memory_is_the_largest_sample() {
        // The first sample sees 5 GiB, every later one 1 GiB.
        let calls = std::sync::atomic::AtomicU32::new(0);
        let u = gpu_usage_of("sleep 0.3", &[0], move |_, root| {
            let n = calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            vec![(root, if n == 0 { 5 << 30 } else { 1 << 30 })]
        })
        .await;
        assert_eq!(u.max_gpu_memory_bytes, 5 << 30, "{u:?}");
    }

    #[tokio::test]
    async fn no_gpu_memory_is_measured_for_a_cpu_task_or_a_device_without_the_tasks_processes() {
        let cpu = usage_of("sleep 0.1").await;
        assert_eq!(cpu.max_gpu_memory_bytes, 0);
        let no_devices = gpu_usage_of("sleep 0.1", &[], |_, root| vec![(root, 1 << 30)]).await;
        assert_eq!(no_devices.max_gpu_memory_bytes, 0);
        let others_only = gpu_usage_of("sleep 0.1", &[0], |_, _| vec![(1, 1 << 30)]).await;
        assert_eq!(others_only.max_gpu_memory_bytes, 0);
    }
}
