//! A frozen agent (SIGSTOP) whose node is declared dead and then comes back (SIGCONT) keeps the
//! work nobody else started: with the real binary, one node and nowhere else to run.

use std::time::{Duration, Instant};

use crate::support::{Cluster, lines, wait_until};

/// Two tasks start on the only node, each appending a line to a file; its agent is frozen past
/// the dead timeout, during which the short task ends and the long one runs on. Back, the
/// agent's result and its running task are taken back: both succeed as attempt 1, and the file
/// holds one line each — neither ran twice. Before, the server killed the running one and
/// ignored the result, and both ran again as attempt 2. An attempt the server wants killed
/// (cancelled) is killed with the reason in the agent's log (before: at debug level, without).
#[test]
fn a_frozen_agents_tasks_end_as_their_first_attempt_once_it_thaws() {
    let mut c = Cluster::start("returning-node", false);
    c.start_agent("a", 2, &[]);
    c.wait_for_nodes(1);
    let log = c.dir.join("ran.log");
    c.submit_file(
        "job.toml",
        &format!(
            "[[application]]\nname = \"append\"\ntasks = 2\n[application.cpu]\n\
             command = \"echo {{index}} $HETSCHED_ATTEMPT >> {}; sleep $((1 + 5 * {{index}}))\"\n",
            log.display()
        ),
    );
    wait_until("both tasks to start", Duration::from_secs(20), || {
        lines(&log).len() == 2
    });
    c.signal_agent("a", "STOP");
    let frozen = Instant::now();
    let alive = |c: &Cluster| {
        c.json(&["nodes"])
            .as_array()
            .into_iter()
            .flatten()
            .any(|n| n["name"] == "a" && n["alive"] == true)
    };
    wait_until(
        "the frozen agent's node to be declared dead",
        Duration::from_secs(20),
        || !alive(&c),
    );
    // Task 0 (1 s) has ended meanwhile; task 1 (6 s) runs on.
    std::thread::sleep(Duration::from_secs(2).saturating_sub(frozen.elapsed()));
    let tasks = c.tasks(1);
    assert!(
        tasks.iter().all(|t| t["state"] == "pending"),
        "given up for lost: {tasks:?}"
    );
    c.signal_agent("a", "CONT");
    let out = c.cli(&["wait", "1", "--timeout", "60s"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let tasks = c.tasks(1);
    for t in &tasks {
        assert_eq!(
            (&t["state"], &t["attempt"], &t["node"]),
            (
                &serde_json::json!("succeeded"),
                &serde_json::json!(1),
                &serde_json::json!("a")
            ),
            "{tasks:?}"
        );
    }
    let mut ran = lines(&log);
    ran.sort();
    assert_eq!(ran, ["0 1", "1 1"], "each task ran once, as attempt 1");
    let agent = c.agent_log("a");
    assert!(
        !agent.contains("killing it"),
        "nothing was killed:\n{agent}"
    );
    // An attempt the server does not want any more is killed, and the agent's log says why.
    c.submit_file(
        "cancelled.toml",
        "[[application]]\nname = \"long\"\ntasks = 1\n[application.cpu]\ncommand = \"sleep 60\"\n",
    );
    wait_until("the long task to run", Duration::from_secs(20), || {
        c.tasks(2).iter().any(|t| t["state"] == "running")
    });
    c.ok(&["cancel", "2"]);
    wait_until("the agent to log the kill", Duration::from_secs(20), || {
        c.agent_log("a").lines().any(|l| {
            l.contains("the server no longer expects this attempt on this node")
                && l.contains("cancelled")
                && l.contains("killing it")
        })
    });
}
