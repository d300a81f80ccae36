//! `hetsched log --attempt N` across nodes, end to end: a server and two agents on loopback, a
//! task whose attempts ran on different nodes, and each attempt's output read from the agent
//! that ran it (the server records only the latest attempt's node, so it asks every agent for
//! an earlier one).

use crate::support::{Cluster, wait_until};
use std::time::Duration;

/// Attempt 1 of a task runs (and fails) on node `a`, attempt 2 on node `b`: `log --attempt 1`
/// prints what attempt 1 printed on `a` (stdout and stderr), `--attempt 2` and a plain `log`
/// what attempt 2 printed on `b`; an attempt that never ran is refused, saying how many the
/// task has had, with nothing on stdout.
#[test]
fn log_attempt_reads_each_attempt_from_the_node_that_ran_it() {
    let mut c = Cluster::start("log-attempts", false);
    c.start_agent("a", 1, &[]);
    c.start_agent("b", 1, &[]);
    c.wait_for_nodes(2);
    // Attempt 1 goes to `a`, `b` taking no new work; it fails once `go` exists (on `b` the
    // task succeeds at once).
    c.ok(&["node", "drain", "b"]);
    let go = c.dir.join("go");
    let job = c.write(
        "job.toml",
        &format!(
            r#"[[application]]
name = "t"
tasks = 1
retries = 1
[application.cpu]
command = '''echo "attempt $HETSCHED_ATTEMPT on $HETSCHED_NODE"; echo "stderr of $HETSCHED_ATTEMPT" >&2; [ "$HETSCHED_NODE" = b ] && exit 0; while [ ! -e {go} ]; do sleep 0.05; done; exit 1'''
"#,
            go = go.display()
        ),
    );
    c.ok(&["submit", job.to_str().expect("path")]);
    wait_until("attempt 1 to run on a", Duration::from_secs(20), || {
        let t = c.tasks(1);
        t.first()
            .is_some_and(|t| t["state"] == "running" && t["node"] == "a")
    });
    // Attempt 2 goes to `b`: `a` takes no new work, `b` does again; then attempt 1 fails.
    c.ok(&["node", "drain", "a"]);
    c.ok(&["node", "resume", "b"]);
    std::fs::write(&go, "").expect("go");
    wait_until("the job to complete", Duration::from_secs(20), || {
        c.json(&["job", "1"])["state"] == "completed"
    });
    let t = &c.tasks(1)[0];
    assert_eq!(
        (&t["attempt"], &t["node"]),
        (&serde_json::json!(2), &serde_json::json!("b")),
        "{t}"
    );
    assert_eq!(
        c.ok(&["log", "1", "t:0", "--attempt", "1"]),
        "attempt 1 on a\n"
    );
    assert_eq!(
        c.ok(&["log", "1", "t:0", "--attempt", "1", "--stderr"]),
        "stderr of 1\n"
    );
    assert_eq!(
        c.ok(&["log", "1", "t:0", "--attempt", "2"]),
        "attempt 2 on b\n"
    );
    assert_eq!(c.ok(&["log", "1", "t:0"]), "attempt 2 on b\n");
    let out = c.cli(&["log", "1", "t:0", "--attempt", "3"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success()
            && out.stdout.is_empty()
            && err.contains("task 0 has had 2 attempts; there is no attempt 3"),
        "{err}"
    );
}

/// A task its node was sent but has not started — here queued in the agent behind another
/// job's task on the node's one core (`prefetch`) — reads as one that printed nothing so far,
/// and a follower reads its output once it runs. Its node holds no directory of its job yet:
/// before, the read failed `its job directory … is not on this node (it was removed, or the
/// attempt never ran here)`, which also ended a `--follow` begun between the task's assignment
/// and its start.
#[test]
fn a_task_its_agent_has_not_started_yet_printed_nothing_so_far() {
    let mut c = Cluster::start_configured("log-not-started", false, "prefetch = 1\n");
    c.start_agent("a", 1, &[]);
    c.wait_for_nodes(1);
    c.ok(&["submit", "--", "sleep", "3"]);
    wait_until("job 1 to run", Duration::from_secs(20), || {
        c.tasks(1).first().is_some_and(|t| t["state"] == "running")
    });
    c.ok(&["submit", "--app", "greet", "--shell", "--", "echo hello"]);
    wait_until("job 2's task queued on a", Duration::from_secs(20), || {
        c.tasks(2).first().is_some_and(|t| t["queued"] == true)
    });
    let out = c.cli(&["log", "2", "greet:0"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(out.stdout.is_empty(), "{err}");
    assert!(
        err.contains("task 1 (attempt 1, on a) printed nothing on stdout"),
        "{err}"
    );
    // Followed from its queue to its end.
    assert_eq!(c.ok(&["log", "2", "greet:0", "--follow"]), "hello\n");
}
