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
    // `--tasks 1` reads as one task, not `1 tasks`.
    assert!(
        stdout.contains("cholesky (GPU+CPU), 1 task each,"),
        "{stdout}"
    );
    // The learned means carry their unit; a variant never run does not read as a time.
    assert!(
        stdout.contains("learned profile of qr        cpu ") && !stdout.contains("not run ms"),
        "{stdout}"
    );
    // Run as root, the three in-process agents warn about it once, not three times.
    let root_warnings = stderr
        .matches("runs as root without --run-as-owner")
        .count();
    assert!(root_warnings <= 1, "{root_warnings} warnings: {stderr}");
}

/// The directory the demo said it keeps its data in (`…, data in DIR`).
fn data_dir(stdout: &str) -> std::path::PathBuf {
    let line = stdout
        .lines()
        .find(|l| l.contains(", data in "))
        .unwrap_or_else(|| panic!("no data directory named: {stdout}"));
    let (_, dir) = line.split_once(", data in ").expect("data in");
    std::path::PathBuf::from(dir.trim())
}

#[test]
fn the_demo_removes_its_data_directory_when_it_ends_and_when_interrupted() {
    // Finished: nothing left behind.
    let out = Command::new(env!("CARGO_BIN_EXE_hetsched"))
        .args(["demo", "--tasks", "1", "--task-secs", "0.05"])
        .env("NO_COLOR", "1")
        .output()
        .expect("run hetsched demo");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    let dir = data_dir(&stdout);
    assert!(!dir.exists(), "{} left behind", dir.display());

    // Interrupted while its job runs: removed as well, and the demo says why it stopped.
    use std::io::BufRead;
    let mut child = Command::new(env!("CARGO_BIN_EXE_hetsched"))
        .args(["demo", "--tasks", "4", "--task-secs", "2"])
        .env("NO_COLOR", "1")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start hetsched demo");
    let mut lines = std::io::BufReader::new(child.stdout.take().expect("stdout")).lines();
    let mut seen = String::new();
    let dir = loop {
        let line = lines
            .next()
            .unwrap_or_else(|| panic!("the demo ended early: {seen}"))
            .expect("line");
        seen.push_str(&line);
        seen.push('\n');
        if line.starts_with("submitted job") {
            break data_dir(&seen);
        }
    };
    assert!(dir.exists(), "{} while the demo runs", dir.display());
    let sent = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .expect("kill");
    assert!(sent.success());
    let out = child.wait_with_output().expect("demo exits");
    assert!(!out.status.success(), "an interrupted demo fails");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("interrupted"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!dir.exists(), "{} left behind after ^C", dir.display());
}
