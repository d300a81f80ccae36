//! A task's peak memory when it ends too soon for a sample: `ru_maxrss` from the agent's
//! `wait4`, and only what is the task's (`hetsched_agent::usage::Process`). A test binary of its
//! own: what it checks depends on this process's own peak memory, which other tests running
//! beside it would raise.

use hetsched_agent::launch::{self, Kill};
use hetsched_core::testkit::ScratchDir;
use hetsched_proto as pb;
use std::time::Duration;

/// Runs `argv` as the agent runs a task (no `run_as_owner`) in `dir`; its result.
async fn run(dir: &std::path::Path, argv: &[&str]) -> pb::TaskResult {
    let spec = pb::TaskSpec {
        job_id: 1,
        app: "app".into(),
        argv: argv.iter().map(|a| a.to_string()).collect(),
        ..Default::default()
    };
    let a = pb::Assignment {
        task_id: 1,
        attempt: 1,
        ..Default::default()
    };
    let (_kill, rx) = tokio::sync::oneshot::channel::<Kill>();
    let r = launch::run(
        &a,
        &spec,
        &[],
        "n",
        dir,
        dir,
        rx,
        Duration::from_secs(1),
        false,
        |_| {},
    )
    .await;
    assert!(r.success, "{argv:?}: {r:?}");
    r
}

fn peak(r: &pb::TaskResult) -> u64 {
    r.usage.as_ref().expect("its usage").max_rss_bytes
}

/// A task that ends before the first memory sample (10 ms after its start: Python allocating
/// 50 MB and exiting at once) reports its peak: its `ru_maxrss`. Before, its peak was what a
/// sample caught, if any (`-` with none). Then, with the agent's own peak raised to 150 MB, a
/// task that does nothing (`true`) does not report the agent's memory, which the kernel counts
/// in a child's `ru_maxrss` (the memory it had before its `exec`). One test, in this order: the
/// first part needs the agent (this process) smaller than the task.
#[tokio::test]
async fn a_short_tasks_peak_memory_is_its_own() {
    let dir = ScratchDir::new("peak-memory", "run");
    let python = run(&dir, &["python3", "-c", "b = b'x' * 50_000_000"]).await;
    assert!(
        peak(&python) >= 40_000_000,
        "python3 holding 50 MB: {} bytes",
        peak(&python)
    );
    let held = std::hint::black_box(vec![1u8; 150 << 20]);
    let idle = run(&dir, &["true"]).await;
    assert!(
        peak(&idle) < 40_000_000,
        "`true` beside an agent of 150 MB: {} bytes",
        peak(&idle)
    );
    drop(held);
}
