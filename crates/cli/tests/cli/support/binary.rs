//! The real `hetsched` binary without a cluster: the commands that read files (`sim …`, `stream
//! place`, `binding replay`) as a user runs them, from the repository's root, so that the example
//! files' paths (`examples/…`) read as the docs write them.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

/// The repository's root.
pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `hetsched ARGS`, to run from the repository's root (a test adds what it needs: an
/// environment variable, another directory).
pub fn command(args: &[&str]) -> Command {
    let mut cmd = Command::new(super::BIN);
    cmd.args(args).current_dir(repo());
    cmd
}

/// Runs `hetsched ARGS` from the repository's root.
pub fn hetsched(args: &[&str]) -> Output {
    command(args).output().expect("the hetsched binary runs")
}

/// Runs `hetsched sim run --cluster CLUSTER --workload WORKLOAD EXTRA…`.
pub fn sim_run(cluster: &str, workload: &str, extra: &[&str]) -> Output {
    let mut args = vec!["sim", "run", "--cluster", cluster, "--workload", workload];
    args.extend_from_slice(extra);
    hetsched(&args)
}

/// Runs `hetsched ARGS` from `dir` (file names in the arguments and in messages then read as a
/// user in that directory writes them).
pub fn hetsched_in(dir: &Path, args: &[&str]) -> Output {
    command(args)
        .current_dir(dir)
        .output()
        .expect("the hetsched binary runs")
}

/// What a run printed on standard output.
pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// What a run printed on standard error.
pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Asserts the run succeeded (showing its standard error if not).
pub fn assert_ok(out: &Output) {
    assert!(out.status.success(), "stderr: {}", stderr(out));
}

/// The JSON a run printed, after asserting it succeeded.
pub fn json_of(out: &Output) -> serde_json::Value {
    assert_ok(out);
    serde_json::from_slice(&out.stdout).expect("JSON on stdout")
}

/// Runs `hetsched ARGS` and asserts it was refused saying `says` on standard error within 10
/// seconds: a bound that keeps a run from going on for hours is checked before the run starts.
pub fn refused_at_once(args: &[&str], says: &str) {
    let asked = Instant::now();
    let out = hetsched(args);
    let err = stderr(&out);
    assert!(
        !out.status.success() && err.contains(says),
        "{args:?}: {err}"
    );
    assert!(
        asked.elapsed() < Duration::from_secs(10),
        "{args:?} took {:?} to be refused",
        asked.elapsed()
    );
}

/// The standard error of a run that refused its input as a user's mistake: exit status 1,
/// nothing on standard output, no panic. `what` names the case in a failure.
pub fn refusal(out: &Output, what: &str) -> String {
    let err = stderr(out);
    assert_eq!(out.status.code(), Some(1), "{what}: {err}");
    assert!(
        out.stdout.is_empty() && !err.contains("panicked"),
        "{what}: {err}"
    );
    err
}

/// The files of `tests/fixtures/NAME`, sorted, each as its path from the repository's root: the
/// path the binary, run there, names in its messages.
pub fn fixtures(name: &str) -> Vec<String> {
    let dir = repo().join("tests/fixtures").join(name);
    let mut files: Vec<String> = std::fs::read_dir(&dir)
        .expect("the fixture directory")
        .filter_map(|e| e.ok())
        .map(|e| format!("tests/fixtures/{name}/{}", e.file_name().to_string_lossy()))
        .collect();
    files.sort();
    files
}
