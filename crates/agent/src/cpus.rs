//! CPU binding of pinned tasks (`pin = true`, `hetsched submit --pin`; HyperQueue's `--pin`,
//! Slurm's task affinity): each such task gets CPUs of its own, as many as the cores it holds,
//! from the CPUs the agent may use, and its processes are bound to them.
//!
//! The binding is made by the task's own process before it becomes the task's program: the agent
//! starts `hetsched pin-exec --cpus LIST -- PROGRAM ARGS…` ([`pinned`]), which sets its CPU
//! affinity and then `exec`s the program ([`pin_exec`]). Every thread and child the program
//! makes inherits the binding, with no window in which it runs unbound (setting the affinity of a
//! started process by its pid would race with the threads it starts at once, as OpenMP runtimes
//! do), and without `unsafe` code in the agent. The task also gets `HETSCHED_CPUS` (the list)
//! and `OMP_NUM_THREADS` (its cores, unless its environment sets it).

use hetsched_proto as pb;
use std::collections::BTreeSet;
use std::ffi::OsString;
use std::path::Path;

/// The hidden subcommand of the `hetsched` binary that binds itself and becomes the task.
pub const PIN_EXEC: &str = "pin-exec";

/// The CPUs not given to a running pinned task.
#[derive(Clone, Debug, Default)]
pub struct CpuPool {
    free: BTreeSet<u32>,
}

impl CpuPool {
    /// A pool of `cpus`.
    pub fn new(cpus: impl IntoIterator<Item = u32>) -> Self {
        Self {
            free: cpus.into_iter().collect(),
        }
    }

    /// The first `cores` CPUs this process may run on (its affinity mask; all it may use when
    /// the node declares more cores than it has CPUs). Empty where the mask cannot be read.
    pub fn of_this_process(cores: u32) -> Self {
        use nix::sched::{CpuSet, sched_getaffinity};
        let Ok(set) = sched_getaffinity(nix::unistd::Pid::from_raw(0)) else {
            return Self::default();
        };
        let allowed = (0..CpuSet::count()).filter(|&c| set.is_set(c).unwrap_or(false));
        Self::new(
            allowed
                .take(cores as usize)
                .filter_map(|c| u32::try_from(c).ok()),
        )
    }

    /// `n` free CPUs, the lowest first, taken out of the pool; `None` (nothing taken) when `n`
    /// is 0 or fewer are free.
    pub fn take(&mut self, n: u32) -> Option<Vec<u32>> {
        if n == 0 || self.free.len() < n as usize {
            return None;
        }
        let cpus: Vec<u32> = self.free.iter().take(n as usize).copied().collect();
        for c in &cpus {
            self.free.remove(c);
        }
        Some(cpus)
    }

    /// Returns `cpus` (a finished task's) to the pool.
    pub fn give_back(&mut self, cpus: &[u32]) {
        self.free.extend(cpus.iter().copied());
    }

    /// How many CPUs are free.
    pub fn free(&self) -> usize {
        self.free.len()
    }
}

/// `0,1,4`.
pub fn list(cpus: &[u32]) -> String {
    cpus.iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

/// `spec` run bound to `cpus` through `exe` (this binary): its command behind
/// `exe pin-exec --cpus LIST --`, and `HETSCHED_CPUS` and `OMP_NUM_THREADS` in its environment.
pub fn pinned(spec: &pb::TaskSpec, exe: &Path, cpus: &[u32]) -> pb::TaskSpec {
    let mut s = spec.clone();
    let shown = list(cpus);
    let mut argv = vec![
        exe.display().to_string(),
        PIN_EXEC.to_string(),
        "--cpus".to_string(),
        shown.clone(),
        "--".to_string(),
    ];
    argv.append(&mut s.argv);
    s.argv = argv;
    s.env.insert("HETSCHED_CPUS".into(), shown);
    s.env
        .entry("OMP_NUM_THREADS".into())
        .or_insert_with(|| cpus.len().to_string());
    s
}

/// Why `pin-exec` could not become the task.
#[derive(Debug, thiserror::Error)]
pub enum PinError {
    /// `--cpus` is not a list of CPU numbers.
    #[error("--cpus `{0}`: expected CPU numbers separated by commas (`0,1`)")]
    BadList(String),
    /// The kernel refused the binding.
    #[error("cannot bind to CPUs {cpus}: {source}")]
    Bind {
        /// The list.
        cpus: String,
        /// The kernel's answer.
        source: nix::Error,
    },
    /// No program after `--`.
    #[error("no program to run after `--`")]
    NoProgram,
    /// `exec` failed (the program is missing, or not executable).
    #[error("cannot start `{program}`: {source}")]
    Exec {
        /// The program.
        program: String,
        /// What `exec` said.
        source: std::io::Error,
    },
}

impl PinError {
    /// The exit status the task reports: the shell's 127 (not found) or 126 (cannot execute),
    /// which the server counts as a failure to start, else 1.
    pub fn exit_code(&self) -> i32 {
        match self {
            PinError::Exec { source, .. } if source.kind() == std::io::ErrorKind::NotFound => 127,
            PinError::Exec { .. } => 126,
            _ => 1,
        }
    }
}

/// Binds this process to `cpus` (`0,1,4`) and replaces it with `argv` (program, arguments);
/// returns only on failure.
pub fn pin_exec(cpus: &str, argv: &[OsString]) -> PinError {
    use nix::sched::{CpuSet, sched_setaffinity};
    use std::os::unix::process::CommandExt;
    let mut set = CpuSet::new();
    for c in cpus.split(',') {
        match c.trim().parse::<usize>().map(|c| set.set(c)) {
            Ok(Ok(())) => {}
            _ => return PinError::BadList(cpus.to_string()),
        }
    }
    if let Err(source) = sched_setaffinity(nix::unistd::Pid::from_raw(0), &set) {
        return PinError::Bind {
            cpus: cpus.to_string(),
            source,
        };
    }
    let Some((program, args)) = argv.split_first() else {
        return PinError::NoProgram;
    };
    let source = std::process::Command::new(program).args(args).exec();
    PinError::Exec {
        program: program.to_string_lossy().to_string(),
        source,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tasks_take_the_lowest_free_cpus_and_give_them_back() {
        let mut pool = CpuPool::new([0, 1, 2, 3]);
        assert_eq!(pool.take(2), Some(vec![0, 1]));
        assert_eq!(pool.take(3), None, "only two are free");
        assert_eq!(pool.take(0), None);
        assert_eq!(pool.take(1), Some(vec![2]));
        pool.give_back(&[0, 1]);
        assert_eq!(pool.take(3), Some(vec![0, 1, 3]));
        assert_eq!(pool.free(), 0);
    }

    #[test]
    fn this_process_offers_at_most_the_declared_cores() {
        let pool = CpuPool::of_this_process(1);
        assert_eq!(pool.free(), 1);
        let all = CpuPool::of_this_process(u32::MAX);
        assert!(all.free() >= 1);
    }

    #[test]
    fn a_pinned_spec_runs_behind_pin_exec_with_its_cpus_in_the_environment() {
        let spec = pb::TaskSpec {
            argv: vec!["sh".into(), "-c".into(), "work {index}".into()],
            env: [("OMP_NUM_THREADS".to_string(), "8".to_string())].into(),
            ..Default::default()
        };
        let p = pinned(&spec, Path::new("/usr/bin/hetsched"), &[2, 3]);
        assert_eq!(
            p.argv,
            [
                "/usr/bin/hetsched",
                "pin-exec",
                "--cpus",
                "2,3",
                "--",
                "sh",
                "-c",
                "work {index}"
            ]
        );
        assert_eq!(p.env["HETSCHED_CPUS"], "2,3");
        assert_eq!(
            p.env["OMP_NUM_THREADS"], "8",
            "the task's own setting stays"
        );
        let p = pinned(&pb::TaskSpec::default(), Path::new("/h"), &[5]);
        assert_eq!(p.env["OMP_NUM_THREADS"], "1");
    }

    /// Set in the child process [`pin_exec_refuses_a_bad_list_and_a_missing_program`] starts:
    /// the child runs the failing `exec`.
    const EXEC_CHILD: &str = "HETSCHED_TEST_PIN_EXEC_CHILD";

    /// Whether this process ignores SIGPIPE (bit 13 of `SigIgn` in `/proc/self/status`), as the
    /// test harness sets it up to: with it back at its default, a write to a closed pipe or
    /// socket (an `writev` by a gRPC connection whose peer went away) kills the whole test
    /// process.
    fn sigpipe_ignored() -> bool {
        let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
        let mask = status
            .lines()
            .find_map(|l| l.strip_prefix("SigIgn:"))
            .and_then(|m| u64::from_str_radix(m.trim(), 16).ok())
            .expect("SigIgn");
        mask & (1 << (nix::sys::signal::Signal::SIGPIPE as u64 - 1)) != 0
    }

    /// A failed `exec` leaves its process changed: std's `CommandExt::exec` sets the child's
    /// state up in the calling process before `execvp` — SIGPIPE back to its default among it —
    /// and nothing undoes that when `execvp` fails. Run in the test process, this test left
    /// every later test of the binary to die of SIGPIPE at the first write to a connection
    /// whose peer had gone (seen in CI after `dataflow`'s silent-producer test). So the failing
    /// `exec` runs in a child process: this test binary, running only this test.
    #[test]
    fn pin_exec_refuses_a_bad_list_and_a_missing_program() {
        assert!(matches!(pin_exec("0,x", &[]), PinError::BadList(_)));
        // Bound to a CPU this process may use, the program cannot be found: 127.
        let cpu = CpuPool::of_this_process(1).take(1).expect("a CPU")[0];
        if std::env::var_os(EXEC_CHILD).is_some() {
            let e = pin_exec(&cpu.to_string(), &[OsString::from("/nonexistent/program")]);
            let exec = matches!(e, PinError::Exec { .. });
            println!("pin-exec: exec error {exec}: {e}");
            std::process::exit(e.exit_code());
        }
        assert!(sigpipe_ignored(), "the harness ignores SIGPIPE");
        let name = concat!(
            module_path!(),
            "::pin_exec_refuses_a_bad_list_and_a_missing_program"
        );
        let name = name.split_once("::").map_or(name, |(_crate, path)| path);
        let out = std::process::Command::new(std::env::current_exe().expect("the test binary"))
            .args(["--exact", name, "--nocapture", "--test-threads=1"])
            .env(EXEC_CHILD, "1")
            .output()
            .expect("the test binary runs");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.code(), Some(127), "{out:?}");
        assert!(
            stdout.contains("pin-exec: exec error true: ")
                && stdout.contains("/nonexistent/program"),
            "{stdout}"
        );
        assert!(
            sigpipe_ignored(),
            "this process still ignores SIGPIPE: the failed exec was the child's"
        );
    }
}
