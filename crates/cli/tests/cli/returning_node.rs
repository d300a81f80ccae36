//! A frozen agent (SIGSTOP) whose node is declared dead and then comes back (SIGCONT) keeps the
//! work nobody else started: with the real binary, one node and nowhere else to run.

use std::time::{Duration, Instant};

use crate::support::{Cluster, lines, wait_until};

/// Two tasks start on the only node, each appending a line to a file; its agent is frozen past
/// the dead timeout, during which the short task ends and the long one runs on. Back, the
/// agent's result and its running task are taken back: both succeed as attempt 1, and the file
/// holds one line each — neither ran twice. Before, the server killed the running one and
/// ignored the result, and both ran again as attempt 2.
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
}
