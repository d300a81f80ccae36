//! `hetsched demo` end to end (the real binary): the batch job, the divisible job and the small
//! workflow balanced by PCDDB (issue 13) all finish, and the workflow's sum is right.

use std::process::Command;

#[test]
fn the_demo_runs_its_workflow_and_prints_the_checked_sum() {
    let out = Command::new(env!("CARGO_BIN_EXE_hetsched"))
        .args(["demo", "--tasks", "1", "--task-secs", "0.05"])
        .env("NO_COLOR", "1")
        .output()
        .expect("run hetsched demo");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    // Σ (100·k)² for k = 1..=4.
    assert!(
        stdout.contains("workflow sum 300000 (expected 300000): correct"),
        "{stdout}"
    );
    assert!(
        stdout.contains("split ×4 → square ×4 → sum ×1 (balancer pcddb)"),
        "{stdout}"
    );
    for task in ["split", "square", "sum"] {
        assert!(stdout.contains(&format!("{task}[")), "{task}: {stdout}");
    }
    assert!(stdout.contains("launch node:"), "{stdout}");
}
