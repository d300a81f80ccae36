//! The worker as a process: what its multi-lang programs leave behind ends with them. These
//! tests need a process that is a child subreaper, as `hetsched stream-worker` is, and a test
//! binary running workers in process must not be one (it would adopt its other tests'
//! orphans): each runs a copy of this binary as the worker ([`as_worker`]), told by
//! [`AS_WORKER`] which part to play.
#![cfg(target_os = "linux")]

use hetsched_core::testkit::ScratchDir;
use hetsched_stream::process_tree;
use hetsched_stream::{Worker, WorkerConfig};
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

/// Set (to `PART:DIR`) in the copy of this binary that plays the worker.
const AS_WORKER: &str = "HETSCHED_TEST_AS_WORKER";

/// How long anything asserted here may take: far more than it needs.
const DEADLINE: Duration = Duration::from_secs(30);

/// Whether python3 runs the multi-lang bolt; says the test is skipped when it does not.
fn python3_or_skip() -> bool {
    let runs = Command::new("python3")
        .args(["-c", "import json"])
        .status()
        .is_ok_and(|s| s.success());
    if !runs {
        eprintln!("SKIPPED: python3 is not installed; the multi-lang bolt test needs it");
    }
    runs
}

/// A spout feeding `misbehaving.py` as a bolt (executor 1) with `params`.
fn topology(params: &str) -> String {
    let program = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/misbehaving.py");
    format!(
        r#"name = "wc"
[[component]]
name = "source"
kind = "spout"
parallelism = 1
cpu = 10.0
builtin = "sequence-spout"
params = {{ rate = 20.0 }}
[[component]]
name = "sink"
kind = "bolt"
parallelism = 1
cpu = 10.0
command = ["python3", "{}"]
params = {{ {params} }}
[[stream]]
from = "source"
to = "sink"
rate = 10.0
"#,
        program.display()
    )
}

fn config(dir: &Path, text: &str) -> WorkerConfig {
    WorkerConfig {
        topology_origin: "wc.toml".into(),
        topology_text: text.into(),
        worker: 0,
        assignment: vec![0, 0],
        base_dir: dir.to_path_buf(),
        work_dir: dir.join("worker-0"),
        listen: "127.0.0.1:0".into(),
        started_ns: 0,
        await_state: Vec::new(),
        key: hetsched_stream::auth::topology_key("test", "wc", 0),
        encrypt: false,
    }
}

/// Waits until `ok` holds, at most [`DEADLINE`]; panics saying `what` otherwise.
fn wait_until(what: &str, mut ok: impl FnMut() -> bool) {
    let started = Instant::now();
    while !ok() {
        assert!(
            started.elapsed() < DEADLINE,
            "waited {DEADLINE:?} for {what}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The pids in `path`, one a line, once there are at least `n`.
fn pids(path: &Path, n: usize) -> Vec<u32> {
    let mut out = Vec::new();
    wait_until(&format!("{n} pids in {}", path.display()), || {
        out = std::fs::read_to_string(path)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .collect();
        out.len() >= n
    });
    out
}

/// The pid of executor 1's program, once it passed its handshake.
fn program_pid(dir: &Path) -> u32 {
    let pids = dir.join("worker-0/pids/1");
    let mut pid = None;
    wait_until("the program's pid file", || {
        pid = std::fs::read_dir(&pids)
            .into_iter()
            .flatten()
            .flatten()
            .find_map(|e| e.file_name().to_str()?.parse().ok());
        pid.is_some()
    });
    pid.unwrap_or_default()
}

fn running(pid: u32) -> bool {
    process_tree::proc_of(pid).is_some_and(process_tree::runs)
}

/// SIGKILLs every pid listed in `path` (what a failed test left behind).
fn kill_listed(path: &Path) {
    for pid in std::fs::read_to_string(path).unwrap_or_default().lines() {
        let _ = Command::new("kill").args(["-9", pid.trim()]).status();
    }
}

/// The worker's copy of this binary, killed if a test fails before it ends.
struct WorkerProcess(Child);

impl Drop for WorkerProcess {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Runs part `part` of [`as_worker`] in a copy of this binary, in `dir`.
fn spawn_worker(part: &str, dir: &Path) -> WorkerProcess {
    WorkerProcess(
        Command::new(std::env::current_exe().expect("the test binary"))
            .args(["--exact", "as_worker", "--nocapture", "--test-threads=1"])
            .env(AS_WORKER, format!("{part}:{}", dir.display()))
            .spawn()
            .expect("the worker's copy of the test binary"),
    )
}

/// The worker's side of the tests below; does nothing in a plain test run.
#[test]
fn as_worker() {
    let Ok(what) = std::env::var(AS_WORKER) else {
        return;
    };
    let (part, dir) = what.split_once(':').expect("PART:DIR");
    let dir = PathBuf::from(dir);
    process_tree::become_subreaper().expect("a subreaper");
    let escapees = dir.join("escapees");
    match part {
        // The program leaves a `setsid` child and an orphan (its parent exited) behind, then
        // exits after its first input; it is started again (and leaves two more) until stopped.
        "orphans" => {
            let text = topology(&format!(
                "escapee = \"{}\", mode = \"exit\", after = \"1\"",
                escapees.display()
            ));
            let w = Worker::start(config(&dir, &text)).expect("starts");
            let first = pids(&escapees, 2);
            wait_until("the first program to exit and its orphans to end", || {
                first.iter().all(|&p| !running(p))
            });
            // Reaped by the worker, not left as its zombies.
            wait_until("the ended orphans to be reaped", || {
                first
                    .iter()
                    .all(|p| !Path::new(&format!("/proc/{p}")).exists())
            });
            w.stop();
        }
        // The program hangs (a sleep) with a `setsid` child and an orphan: the test SIGKILLs
        // this worker meanwhile.
        "hold" => {
            let text = topology(&format!(
                "escapee = \"{}\", mode = \"hang\", \"topology.subprocess.timeout.secs\" = \"600\"",
                escapees.display()
            ));
            let _w = Worker::start(config(&dir, &text)).expect("starts");
            // Bounded, should the test itself be gone.
            std::thread::sleep(Duration::from_secs(300));
        }
        other => panic!("no part {other}"),
    }
}

/// A program's child that left its group (`setsid`) and whose parent exited is re-parented
/// to the worker, no longer below the program: it ends when its program ends, while the
/// worker runs on, and is reaped.
#[test]
fn an_orphan_that_left_its_programs_group_ends_with_its_program_while_the_worker_runs() {
    if !python3_or_skip() {
        return;
    }
    let dir = ScratchDir::new("stream", "orphans");
    let mut worker = spawn_worker("orphans", &dir);
    let status = worker.0.wait().expect("the worker's exit");
    kill_listed(&dir.join("escapees"));
    assert!(status.success(), "the worker's part failed: {status}");
}

/// A SIGKILLed worker ends nothing itself: the agent that started it ends what carries its
/// mark, its hanging program and the program's `setsid` child and orphan alike.
#[test]
fn what_a_sigkilled_workers_programs_left_running_is_ended_by_its_mark() {
    if !python3_or_skip() {
        return;
    }
    let dir = ScratchDir::new("stream", "sigkilled");
    let escapees = dir.join("escapees");
    let worker = spawn_worker("hold", &dir);
    let gone = process_tree::proc_of(worker.0.id()).expect("the worker runs");
    let program = program_pid(&dir);
    let mut left = pids(&escapees, 2);
    left.push(program);
    drop(worker);
    assert!(left.iter().all(|&p| running(p)), "{left:?} run on");
    let ended = process_tree::end_marked_by(gone, nix_uid());
    let started = Instant::now();
    while left.iter().any(|&p| running(p)) {
        if started.elapsed() > DEADLINE {
            kill_listed(&escapees);
            let _ = Command::new("kill")
                .args(["-9", &program.to_string()])
                .status();
            panic!("{left:?} outlive their SIGKILLed worker ({ended} ended)");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(ended >= 3, "{ended}");
}

/// This process's user id.
fn nix_uid() -> u32 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self").map_or(0, |m| m.uid())
}
