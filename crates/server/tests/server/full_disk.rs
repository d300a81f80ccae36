//! A full disk pauses dispatch and fails nothing: a heartbeat whose commit the store refuses
//! leaves memory as the store has it (rolled back), later heartbeats are answered without
//! acknowledging, assigning, losing or failing anything, the dead-node check declares nobody
//! dead, and once the store accepts writes again everything carries on. Run twice: with a
//! simulated full disk (everywhere) and with a real one, a small tmpfs (where mounting is
//! allowed; otherwise the test says why it skipped).

use crate::common;
use crate::common::Scratch;

use common::heartbeat_request;
use hetsched_proto as pb;
use hetsched_server::ServerConfig;
use hetsched_server::convert::Wire;
use hetsched_server::state::{PROBE_INTERVAL, State};
use hetsched_server::store::Store;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

const JOB: &str =
    "[[application]]\nname = \"a\"\ntasks = 3\n[application.cpu]\ncommand = \"true\"\n";

fn open(dir: &Path) -> State {
    let config = ServerConfig {
        data_dir: dir.to_path_buf(),
        max_attempts: 3,
        ..Default::default()
    };
    State::open(&config, Store::open(&dir.join("state.db")).expect("store")).expect("state")
}

fn states(s: &State) -> Vec<(String, u32)> {
    s.tasks(1)
        .expect("tasks")
        .tasks
        .into_iter()
        .map(|t| (t.state, t.attempt))
        .collect()
}

/// The scenario, with `fill` making the disk full and `free` freeing it.
fn a_full_disk_pauses_dispatch(
    dir: &Path,
    fill: &mut dyn FnMut(&mut State),
    free: &mut dyn FnMut(&mut State),
) {
    let mut s = open(dir);
    let n = common::register(&mut s, "n", 2);
    s.submit("job.toml", JOB, "/").expect("submit");
    let r = s.heartbeat(heartbeat_request(n, &[], &[])).expect("beat");
    assert_eq!(r.assignments.len(), 2);
    fill(&mut s);
    // Both tasks succeed, and the agent says so; the commit fails.
    let done = [(0, 1, true), (1, 1, true)];
    s.heartbeat(heartbeat_request(n, &[], &done))
        .expect_err("the store refused the heartbeat's commit");
    assert!(s.is_paused());
    let before = vec![
        ("running".to_string(), 1),
        ("running".to_string(), 1),
        ("pending".to_string(), 0),
    ];
    assert_eq!(states(&s), before, "memory rolled back to the store");
    // While the disk is full: answered, nothing acknowledged (the agent keeps its results),
    // nothing assigned, nothing lost although the agent runs nothing.
    for _ in 0..3 {
        let r = s.heartbeat(heartbeat_request(n, &[], &done)).expect("beat");
        assert!(r.acked.is_empty() && r.assignments.is_empty() && r.kill.is_empty());
        std::thread::sleep(PROBE_INTERVAL / 2);
    }
    s.check_dead(Duration::from_millis(1)).expect("dead check");
    assert!(
        s.nodes(true).nodes[0].alive,
        "nobody declared dead on a full disk"
    );
    assert_eq!(states(&s), before);
    let job = s.job(1).expect("job");
    assert_eq!(job.state, "running");
    // The pending task waits for the store, not for busy nodes, and says so.
    assert!(
        job.pending_reason
            .starts_with("dispatch is paused: the server's store has refused writes for"),
        "{}",
        job.pending_reason
    );
    assert_eq!(states(&open(dir)), before, "the store agrees");
    // The disk is freed: within a probe interval the results are recorded and the last task
    // dispatched.
    free(&mut s);
    std::thread::sleep(PROBE_INTERVAL);
    let r = s.heartbeat(heartbeat_request(n, &[], &done)).expect("beat");
    assert!(!s.is_paused());
    assert_eq!(r.acked.len(), 2);
    assert_eq!(
        r.assignments
            .iter()
            .map(|a| (a.task_id, a.attempt))
            .collect::<Vec<_>>(),
        vec![(2, 1)]
    );
    s.heartbeat(heartbeat_request(n, &[], &[(2, 1, true)]))
        .expect("beat");
    assert_eq!(s.job(1).expect("job").state, "completed");
    assert!(
        states(&s)
            .iter()
            .all(|(st, a)| st == "succeeded" && *a == 1)
    );
    drop(s);
    assert_eq!(
        s_states_after_restart(dir),
        vec![("succeeded".to_string(), 1); 3]
    );
}

fn s_states_after_restart(dir: &Path) -> Vec<(String, u32)> {
    states(&open(dir))
}

#[test]
fn a_simulated_full_disk_pauses_dispatch_and_fails_nothing() {
    let dir = Scratch::new("full-disk", "sim");
    a_full_disk_pauses_dispatch(&dir, &mut |s| s.simulate_full_disk(true), &mut |s| {
        s.simulate_full_disk(false)
    });
    let _ = std::fs::remove_dir_all(&dir);
}

/// A tmpfs mounted for the test on a directory in its scratch directory, unmounted when dropped:
/// before the scratch directory is removed, as it is declared after it.
struct Tmpfs(PathBuf);

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

fn fill_up(dir: &Path) {
    use std::io::Write;
    let mut f = std::fs::File::create(dir.join("filler")).expect("filler");
    let block = vec![0u8; 4096];
    while f.write_all(&block).is_ok() {}
    let _ = f.sync_all();
}

#[test]
fn a_real_full_disk_pauses_dispatch_and_fails_nothing() {
    let scratch = Scratch::new("full-disk", "tmpfs");
    let mnt = scratch.join("mnt");
    let _ = std::fs::create_dir_all(&mnt);
    let mounted = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=2m", "tmpfs"])
        .arg(&mnt)
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !mounted {
        eprintln!(
            "skipped: cannot mount a tmpfs here (needs root or CAP_SYS_ADMIN); \
             a_simulated_full_disk_pauses_dispatch_and_fails_nothing covers the same path"
        );
        return;
    }
    let fs = Tmpfs(mnt);
    let dir = fs.0.join("data");
    std::fs::create_dir_all(&dir).expect("dir");
    let filler_dir = fs.0.clone();
    a_full_disk_pauses_dispatch(&dir, &mut |_| fill_up(&filler_dir), &mut |_| {
        let _ = std::fs::remove_file(filler_dir.join("filler"));
    });
}

#[tokio::test]
async fn a_read_only_data_directory_is_named_once_in_the_error() {
    let scratch = Scratch::new("full-disk", "ro");
    let mnt = scratch.join("mnt");
    let _ = std::fs::create_dir_all(&mnt);
    let mounted = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=1m", "tmpfs"])
        .arg(&mnt)
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !mounted {
        eprintln!("skipped: cannot mount a tmpfs here (needs root or CAP_SYS_ADMIN)");
        return;
    }
    let fs = Tmpfs(mnt);
    let dir = fs.0.join("data");
    {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&dir)
            .expect("data dir");
    }
    let remount = Command::new("mount")
        .args(["-o", "remount,ro"])
        .arg(&fs.0)
        .status()
        .expect("remount");
    assert!(remount.success());
    let e = match hetsched_server::start(ServerConfig {
        listen: "127.0.0.1:0".parse().expect("addr"),
        data_dir: dir.clone(),
        ..Default::default()
    })
    .await
    {
        Ok(_) => panic!("a server started on a read-only data directory"),
        Err(e) => anyhow_like(&e),
    };
    assert!(
        e.starts_with(&dir.display().to_string()),
        "names the data directory's file: {e}"
    );
    assert_eq!(e.matches("Read-only file system").count(), 1, "{e}");
}

/// The error with its chain of sources, as `anyhow`'s `{:#}` prints it in the binary.
fn anyhow_like(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut next = e.source();
    while let Some(cause) = next {
        s += &format!(": {cause}");
        next = cause.source();
    }
    s
}

/// Group commit: when the WAL cannot be synced, the replies waiting for it are refused (the
/// service answers `Unavailable`) and the state pauses as on a full disk; once a probe write is
/// synced again, the agent's results — which it kept, never acknowledged — are recorded.
#[test]
fn a_failed_wal_sync_pauses_dispatch_until_a_write_is_synced_again() {
    let dir = Scratch::new("full-disk", "sync-fail");
    let mut s = open(&dir);
    let n = common::register(&mut s, "n", 2);
    s.submit("job.toml", JOB, "/").expect("submit");
    let durable = s.durable();
    durable.wait_blocking(s.written()).expect("synced");
    durable.simulate_sync_failure(true);
    // The heartbeat is committed (to the WAL) but its reply cannot be made durable.
    let r = s.heartbeat(heartbeat_request(n, &[], &[])).expect("beat");
    assert_eq!(r.assignments.len(), 2);
    let e = durable
        .wait_blocking(s.written())
        .expect_err("the sync fails");
    s.sync_failed(&e);
    assert!(s.is_paused());
    // Paused: nothing acknowledged or assigned, whatever the agent says.
    let done = [(0, 1, true), (1, 1, true)];
    let r = s.heartbeat(heartbeat_request(n, &[], &done)).expect("beat");
    assert!(r.acked.is_empty() && r.assignments.is_empty() && r.kill.is_empty());
    std::thread::sleep(PROBE_INTERVAL);
    let r = s.heartbeat(heartbeat_request(n, &[], &done)).expect("beat");
    assert!(r.acked.is_empty(), "still paused: the probe's sync fails");
    assert!(s.is_paused());
    durable.simulate_sync_failure(false);
    std::thread::sleep(PROBE_INTERVAL);
    // Resumed: the results the agent kept are recorded (the dispatch was committed, and the
    // rollback rebuilt it from the store).
    let r = s.heartbeat(heartbeat_request(n, &[], &done)).expect("beat");
    assert!(!s.is_paused());
    assert_eq!(r.acked.len(), 2);
    durable.wait_blocking(s.written()).expect("synced");
    drop(s);
    let after: Vec<(String, u32)> = states(&open(&dir));
    assert_eq!(
        after[..2],
        [("succeeded".to_string(), 1), ("succeeded".to_string(), 1)]
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// The disk freed (`simulate_full_disk(false)`), the probe interval waited out and a node
/// `n` registered, whose heartbeat makes the probe write that resumes dispatch.
fn free_and_probe(s: &mut State) {
    s.simulate_full_disk(false);
    std::thread::sleep(PROBE_INTERVAL);
    let n = common::register(s, "n", 2);
    s.heartbeat(heartbeat_request(n, &[], &[])).expect("beat");
    assert!(!s.is_paused(), "a probe write resumed it");
}

/// A submission the store refuses for want of room pauses dispatch at once, as a refused
/// commit does: `hetsched_store_writable` reads 0 from that refusal, not from a later
/// heartbeat's, and a probe write resumes it as usual.
#[test]
fn a_submission_refused_by_a_full_disk_marks_the_store_unwritable_at_once() {
    let dir = Scratch::new("full-disk", "submit-refused");
    let mut s = open(&dir);
    s.simulate_full_disk(true);
    let e = s
        .submit("job.toml", JOB, "/")
        .expect_err("the store refuses the job's rows")
        .to_string();
    assert!(e.contains("database or disk is full"), "{e}");
    assert!(s.is_paused(), "the refusal paused dispatch");
    free_and_probe(&mut s);
    s.submit("job.toml", JOB, "/").expect("taken again");
    s.simulate_full_disk(true);
    assert!(s.submit("job.toml", JOB, "/").is_err());
    common::assert_metrics(s, "hdas", &["hetsched_store_writable 0"]);
}

/// What the server writes outside events goes the same way as a submission (above): a purger
/// step and a retention pass the store refuses for want of room pause dispatch at once
/// (`hetsched_store_writable` 0 from that refusal on), and a probe write resumes it; the purge
/// then goes on where it stopped.
#[test]
fn a_purge_step_or_a_retention_pass_refused_by_a_full_disk_marks_the_store_unwritable_at_once() {
    let dir = Scratch::new("full-disk", "purge-step-refused");
    let config = ServerConfig {
        data_dir: dir.to_path_buf(),
        purge_chunk_tasks: 1_000,
        ..Default::default()
    };
    let mut s =
        State::open(&config, Store::open(&dir.join("state.db")).expect("store")).expect("state");
    let big =
        "[[application]]\nname = \"a\"\ntasks = 3000\n[application.cpu]\ncommand = \"true\"\n";
    let job = s.submit("big.toml", big, "/").expect("submit").job_id;
    s.on_cancel(job).expect("cancelled");
    s.purge(&pb::PurgeRequest {
        job_ids: vec![job],
        ..Default::default()
    })
    .expect("purged");
    assert_eq!(s.purge_left(), 2_000);
    // The purger's step.
    s.simulate_full_disk(true);
    let e = s.purge_step().expect_err("refused").to_string();
    assert!(e.contains("database or disk is full"), "{e}");
    assert!(s.is_paused(), "the refused step paused dispatch");
    assert_eq!(s.purge_left(), 2_000, "nothing was deleted");
    free_and_probe(&mut s);
    assert_eq!(s.purge_step().expect("the purge goes on"), 1_000);
    // The retention pass: a finished job's summary, stored as its rows leave memory.
    let other = s.submit("job.toml", JOB, "/").expect("submit").job_id;
    s.on_cancel(other).expect("cancelled");
    s.simulate_full_disk(true);
    let e = s
        .apply_retention()
        .expect_err("the summary was refused")
        .to_string();
    assert!(e.contains("database or disk is full"), "{e}");
    assert!(s.is_paused(), "the refused pass paused dispatch");
    common::assert_metrics(s, "hdas", &["hetsched_store_writable 0"]);
}
