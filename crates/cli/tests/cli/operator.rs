//! End-to-end tests of the operator's commands with the real binary: `hetsched log`, the failing
//! tasks' stderr after `submit --wait`, graceful agent shutdown (SIGTERM/SIGINT, `--drain`),
//! `node drain`/`node resume`.

use crate::support;

use std::io::BufRead;
use std::time::Duration;
use support::{Cluster, group_members, wait_until};

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn a_failing_tasks_stderr_is_shown_by_submit_wait_and_by_log() {
    let mut c = Cluster::start("log", false);
    c.start_agent("a", 2, &[]);
    c.wait_for_nodes(1);
    let job = c.write(
        "job.toml",
        "[[application]]\nname = \"bad\"\ntasks = 1\n[application.cpu]\n\
         command = 'echo out-line; printf \"\\033]0;owned\\007x\\n\" >&2; echo \"frobnicate: command not found\" >&2; exit 127'\n\
         [[application]]\nname = \"good\"\ntasks = 1\n[application.cpu]\n\
         command = 'echo hello from $HETSCHED_TASK_INDEX'\n",
    );
    let out = c.cli(&["submit", job.to_str().expect("path"), "--wait"]);
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(
        err.contains("task 0 (bad:0) failed on a")
            && err.contains("| frobnicate: command not found"),
        "submit --wait shows the failing task's last stderr lines:\n{err}"
    );
    let out = c.cli(&["wait", "1"]);
    assert!(text(&out.stderr).contains("| frobnicate"), "wait does too");
    // The excerpt is escaped: the task's OSC (a terminal title) does not reach the terminal.
    assert!(
        !err.contains('\u{1b}') && err.contains("| \\u{1b}]0;owned\\u{7}x"),
        "{err}"
    );

    let out = c.cli(&["log", "1", "0", "--stderr"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout),
        "\u{1b}]0;owned\u{7}x\nfrobnicate: command not found\n",
        "log gives the bytes as they are"
    );
    let out = c.cli(&["log", "1", "bad:0"]);
    assert_eq!(text(&out.stdout), "out-line\n");
    let out = c.cli(&["log", "1", "good:0"]);
    assert_eq!(text(&out.stdout), "hello from 0\n");
    let out = c.cli(&["log", "1", "good:0", "--stderr"]);
    assert!(out.status.success());
    assert!(out.stdout.is_empty() && text(&out.stderr).contains("printed nothing on stderr"));

    // Where the output is, in `tasks`.
    let tasks = c.tasks(1);
    let output = tasks[0]["output"].as_str().unwrap_or("");
    assert!(
        output.starts_with("a:") && output.ends_with("/job-1/bad-0.1.{out,err}"),
        "{output}"
    );
    // Bad requests are refused with the reason.
    for (args, why) in [
        (vec!["log", "1", "nope:0"], "no application `nope`"),
        (
            vec!["log", "1", "bad:5"],
            "application `bad` of job 1 has 1 task (index 0), none with index 5",
        ),
        (
            vec!["log", "1", "7"],
            "job 1 has no task 7: its task ids are 0–1 (`hetsched tasks --job 1`), or name one as APP:INDEX (`bad:0`)",
        ),
        (vec!["log", "9", "0"], "no job 9"),
        (vec!["log", "1", "0", "--attempt", "3"], "no attempt 3"),
    ] {
        let out = c.cli(&args);
        assert!(!out.status.success(), "{args:?}");
        assert!(
            text(&out.stderr).contains(why),
            "{args:?}: {}",
            text(&out.stderr)
        );
    }
    // An agent that is gone cannot serve its files: said plainly.
    c.signal_agent("a", "KILL");
    let _ = c.agent_exit("a", Duration::from_secs(10));
    let out = c.cli(&["log", "1", "0", "--stderr"]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("node `a`"),
        "{}",
        text(&out.stderr)
    );
    // A restarted server still names where the output is, from the node's stored description,
    // though the agent is not heard from again; reading it says why it cannot be reached.
    c.kill_server();
    c.start_server();
    assert_eq!(
        c.tasks(1)[0]["output"].as_str(),
        Some(output),
        "after a restart"
    );
    let out = c.cli(&["log", "1", "0", "--stderr"]);
    assert!(
        !out.status.success()
            && text(&out.stderr).contains("node `a` has not heartbeated since the server started"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn log_follow_prints_a_running_tasks_output_until_it_ends() {
    let mut c = Cluster::start("follow", false);
    c.start_agent("a", 1, &[]);
    c.wait_for_nodes(1);
    let job = c.write(
        "job.toml",
        "[[application]]\nname = \"ticker\"\ntasks = 1\n[application.cpu]\n\
         command = 'echo tick-1; while [ ! -e stop ]; do sleep 0.05; done; echo tick-2'\n",
    );
    let out = c.cli(&["submit", job.to_str().expect("path")]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    wait_until("the task to run", Duration::from_secs(30), || {
        c.tasks(1)[0]["state"] == "running"
    });
    let mut follow = c
        .command(&["log", "1", "ticker:0", "--follow"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("log --follow");
    let stdout = follow.stdout.take().expect("stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines() {
            let _ = tx.send(line.unwrap_or_default());
        }
    });
    assert_eq!(
        rx.recv_timeout(Duration::from_secs(20)).expect("tick-1"),
        "tick-1"
    );
    // Still following: the task runs until `stop` exists.
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        follow.try_wait().expect("try_wait").is_none(),
        "--follow waits for more"
    );
    std::fs::write(c.dir.join("stop"), "").expect("stop");
    assert_eq!(
        rx.recv_timeout(Duration::from_secs(20)).expect("tick-2"),
        "tick-2"
    );
    wait_until(
        "log --follow to end with the task",
        Duration::from_secs(20),
        || follow.try_wait().expect("try_wait").is_some(),
    );
    assert!(follow.wait().expect("status").success());
}

/// Job whose tasks record their process group and, on agent `a`, run for minutes (with a child).
fn long_on_a(c: &Cluster, tasks: u32) -> std::path::PathBuf {
    c.write(
        "job.toml",
        &format!(
            "[[application]]\nname = \"long\"\ntasks = {tasks}\n[application.cpu]\n\
             command = 'echo $$ > pgid-$HETSCHED_NODE-$HETSCHED_TASK_INDEX; \
             if [ $HETSCHED_NODE = a ]; then sleep 300 & wait; fi'\n"
        ),
    )
}

fn pgids(c: &Cluster, node: &str, n: u32) -> Vec<u32> {
    wait_until("the tasks to start", Duration::from_secs(30), || {
        (0..n).all(|i| {
            std::fs::read_to_string(c.dir.join(format!("pgid-{node}-{i}")))
                .is_ok_and(|s| s.trim().parse::<u32>().is_ok())
        })
    });
    (0..n)
        .map(|i| {
            std::fs::read_to_string(c.dir.join(format!("pgid-{node}-{i}")))
                .expect("pgid")
                .trim()
                .parse()
                .expect("pgid")
        })
        .collect()
}

#[test]
fn sigterm_kills_the_running_tasks_reports_them_and_leaves_no_orphan() {
    let mut c = Cluster::start("sigterm", false);
    c.start_agent("a", 2, &[]);
    c.wait_for_nodes(1);
    let job = long_on_a(&c, 2);
    assert!(
        c.cli(&["submit", job.to_str().expect("path")])
            .status
            .success()
    );
    let groups = pgids(&c, "a", 2);
    wait_until(
        "a child in each task's group",
        Duration::from_secs(20),
        || groups.iter().all(|&g| group_members(g).len() >= 2),
    );
    c.signal_agent("a", "TERM");
    assert_eq!(
        c.agent_exit("a", Duration::from_secs(30)),
        Some(0),
        "{}",
        c.agent_log("a")
    );
    for g in &groups {
        assert!(group_members(*g).is_empty(), "group {g} left running");
    }
    let log = c.agent_log("a");
    assert!(
        log.contains("shutting down") && log.contains("acknowledged"),
        "{log}"
    );
    // The results were reported: the tasks wait for another node, not failed.
    for t in c.tasks(1) {
        assert_eq!(t["state"], "pending", "{t}");
        assert!(
            t["message"].as_str().unwrap_or("").contains("shut down"),
            "{t}"
        );
    }
    c.start_agent("b", 2, &[]);
    let out = c.cli(&["wait", "1", "--timeout", "60s"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
}

#[test]
fn drain_waits_for_running_tasks_and_a_second_signal_exits_at_once() {
    let mut c = Cluster::start("drain-agent", false);
    c.start_agent("d", 1, &["--drain"]);
    c.wait_for_nodes(1);
    let job = c.write(
        "short.toml",
        "[[application]]\nname = \"short\"\ntasks = 1\n[application.cpu]\n\
         command = 'touch started; while [ ! -e finish ]; do sleep 0.05; done'\n",
    );
    assert!(
        c.cli(&["submit", job.to_str().expect("path")])
            .status
            .success()
    );
    wait_until("the task to start", Duration::from_secs(30), || {
        c.dir.join("started").exists()
    });
    c.signal_agent("d", "INT");
    wait_until(
        "the agent to say it drains",
        Duration::from_secs(20),
        || c.agent_log("d").contains("--drain"),
    );
    std::fs::write(c.dir.join("finish"), "").expect("finish");
    assert_eq!(c.agent_exit("d", Duration::from_secs(30)), Some(0));
    assert_eq!(
        c.tasks(1)[0]["state"],
        "succeeded",
        "the drained task's result was reported"
    );

    // Second signal: the running task is killed and the agent exits at once.
    c.start_agent("a", 1, &["--drain"]);
    c.wait_for_nodes(1);
    let job = long_on_a(&c, 1);
    assert!(
        c.cli(&["submit", job.to_str().expect("path")])
            .status
            .success()
    );
    let groups = pgids(&c, "a", 1);
    c.signal_agent("a", "TERM");
    wait_until(
        "the agent to say it drains",
        Duration::from_secs(20),
        || c.agent_log("a").contains("--drain"),
    );
    c.signal_agent("a", "TERM");
    let code = c.agent_exit("a", Duration::from_secs(10));
    assert_eq!(code, Some(130), "{}", c.agent_log("a"));
    // The agent SIGKILLs the group before it exits; a killed process still takes a moment to die
    // on a loaded machine, so the check is bounded rather than instantaneous.
    wait_until(
        "no orphan after the second signal",
        Duration::from_secs(5),
        || group_members(groups[0]).is_empty(),
    );
}

#[test]
fn a_drained_node_gets_no_new_work_until_it_is_resumed() {
    let mut c = Cluster::start("node-drain", false);
    c.start_agent("a", 2, &[]);
    c.start_agent("b", 2, &[]);
    c.wait_for_nodes(2);
    let out = c.cli(&["node", "drain", "a", "--reason", "bad fan"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("node `a` drained (bad fan)"));
    // Drained again without a reason: the kept reason is said, not dropped from the line.
    let again = c.ok(&["node", "drain", "a"]);
    assert!(
        again.contains("node `a` already drained (bad fan): no new work"),
        "{again}"
    );
    let nodes = c.json(&["nodes"]);
    let a = nodes
        .as_array()
        .expect("nodes")
        .iter()
        .find(|n| n["name"] == "a")
        .expect("a")
        .clone();
    assert_eq!(
        (&a["drained"], &a["drain_reason"]),
        (&serde_json::json!(true), &serde_json::json!("bad fan")),
        "{a}"
    );
    assert!(a["drained_since_ms"].as_u64().is_some_and(|t| t > 0), "{a}");
    assert!(
        c.ok(&["nodes"]).contains("drained: bad fan, "),
        "the listing says why and since when"
    );
    let job = c.write(
        "job.toml",
        "[[application]]\nname = \"t\"\ntasks = 8\n[application.cpu]\ncommand = 'sleep 0.05'\n",
    );
    let out = c.cli(&["submit", job.to_str().expect("path"), "--wait"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        c.tasks(1).iter().all(|t| t["node"] == "b"),
        "nothing ran on the drained node"
    );
    // `tasks --node`: what ran where.
    let on = |node: &str| {
        c.json(&["tasks", "--job", "1", "--node", node])
            .as_array()
            .map_or(0, Vec::len)
    };
    assert_eq!((on("a"), on("b"), on("a,b"), on("x[1-3],b")), (0, 8, 8, 8));
    c.refused(
        &["tasks", "--node", "n[1-1025]"],
        "nodes: 1025 names, more than the 1024 accepted",
    );
    c.refused(&["tasks", "--node", "n[3-1]"], "goes from the lower number");
    c.refused(&["tasks", "--limit", "0"], "invalid value '0' for '--limit");
    assert!(c.cli(&["node", "resume", "a"]).status.success());
    c.signal_agent("b", "KILL");
    let _ = c.agent_exit("b", Duration::from_secs(10));
    let out = c.cli(&["submit", job.to_str().expect("path"), "--wait"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(c.tasks(2).iter().all(|t| t["node"] == "a"));
    // A filter that drops most of a server page still prints one table: job 2's eight tasks on
    // `a`, found across the pages of job 1's tasks on `b`.
    let listed = c.ok(&["tasks", "--node", "a", "--limit", "9"]);
    assert_eq!(
        listed.matches("run time").count(),
        1,
        "one table:\n{listed}"
    );
    assert_eq!(listed.matches("succeeded").count(), 8, "{listed}");
    // A filter with a limit below the matches: whole pages are asked for (a page of `limit`
    // rows, filtered, made `--limit 1` one call per row scanned) and exactly `limit` shown.
    let few = c.json(&["tasks", "--node", "a", "--limit", "3"]);
    assert_eq!(few.as_array().map_or(0, Vec::len), 3, "{few}");
    let few = c.ok(&[
        "tasks",
        "--node",
        "a",
        "--state",
        "succeeded",
        "--limit",
        "2",
    ]);
    assert_eq!(few.matches("succeeded").count(), 2, "{few}");
    // With every node drained a job waits for an operator, and says so where users look.
    c.ok(&["node", "drain", "a"]);
    c.ok(&["node", "drain", "b"]);
    let out = c.cli(&["submit", job.to_str().expect("path")]);
    assert!(out.status.success(), "accepted: {}", text(&out.stderr));
    // Node b's agent was killed: it is drained and still alive, or (on a slow machine, past the
    // dead timeout) dead; either way the reason names a, drained.
    let why = "every node that can run `t` is drained: a";
    let names_a = |said: &str| {
        said.starts_with(why)
            && (said.starts_with(&format!("{why}, b ")) || said.starts_with(&format!("{why} ")))
            && said.ends_with("(`hetsched node resume NAME`)")
    };
    let err = text(&out.stderr);
    let warned = err
        .lines()
        .find_map(|l| l.strip_prefix("warning: job 3 waits: "))
        .unwrap_or("");
    assert!(names_a(warned), "the submission says it at once: {err}");
    let listed = c.ok(&["jobs"]);
    assert!(
        listed.contains("pending because") && listed.contains("every node that can run `t`"),
        "{listed}"
    );
    let reason = c.json(&["job", "3"])["pending_reason"]
        .as_str()
        .unwrap_or("")
        .to_string();
    assert!(names_a(&reason), "{reason}");
    let blocked: Vec<u64> = c
        .json(&["jobs", "--state", "blocked"])
        .as_array()
        .expect("jobs")
        .iter()
        .filter_map(|j| j["id"].as_u64())
        .collect();
    assert_eq!(blocked, [3], "only the job no node can run now");
    assert!(
        c.ok(&["job", "3"])
            .contains("pending because: every node that can run `t` is drained: a")
    );
    let out = c.cli(&["wait", "3", "--timeout", "1s"]);
    assert!(!out.status.success());
    let err = text(&out.stderr);
    let told = err
        .lines()
        .find_map(|l| l.strip_prefix("job 3 waits: "))
        .unwrap_or("");
    assert!(names_a(told), "{err}");
    // `undrain` is `resume`, as operators of other schedulers type it.
    c.ok(&["node", "undrain", "a"]);
    c.ok(&["wait", "3"]);
    assert_eq!(c.json(&["job", "3"])["pending_reason"], "");
    let out = c.cli(&["node", "drain", "nosuch"]);
    assert!(!out.status.success() && text(&out.stderr).contains("no node named `nosuch`"));
    // Several at once: each in turn, the refusals named at the end.
    let out = c.cli(&["node", "resume", "a,nosuch"]);
    assert!(!out.status.success());
    // `a` was resumed above: this resume changes nothing there, and says so.
    assert!(text(&out.stdout).contains("node `a` was not drained"));
    assert!(
        text(&out.stderr).contains("1 of 2 nodes not resumed: nosuch"),
        "{}",
        text(&out.stderr)
    );
}

/// `hetsched node stop NAME` (HyperQueue's `hq worker stop`): the agent stops its task, reports
/// it, exits 0, and the node is listed as left; the task runs again on the other node. A node
/// without a live agent is refused.
/// An idle agent beats only every `idle_heartbeat_interval` (60 s): `node stop` wakes it, so
/// it hears the stop and exits at once (it waited for its next idle beat).
#[test]
fn a_stopped_idle_agent_exits_at_once() {
    let mut c = Cluster::start("node-stop-idle", false);
    c.start_agent("a", 1, &[]);
    c.wait_for_nodes(1);
    // Past its first beats (a new agent beats a few times at once): it waits on its held call
    // now, and would beat next in a minute.
    std::thread::sleep(Duration::from_millis(3000));
    let asked = std::time::Instant::now();
    c.ok(&["node", "stop", "a"]);
    assert_eq!(
        c.agent_exit("a", Duration::from_secs(20)),
        Some(0),
        "the agent exits cleanly"
    );
    assert!(
        asked.elapsed() < Duration::from_secs(5),
        "the idle agent took {:?} to hear the stop",
        asked.elapsed()
    );
}

#[test]
fn a_stopped_nodes_agent_exits_and_its_task_runs_elsewhere() {
    let mut c = Cluster::start("node-stop", false);
    c.start_agent("a", 1, &[]);
    c.wait_for_nodes(1);
    c.ok(&["submit", "--", "sleep", "30"]);
    wait_until("the task to run on a", Duration::from_secs(10), || {
        c.tasks(1)[0]["state"] == "running"
    });
    c.start_agent("b", 1, &[]);
    c.wait_for_nodes(2);
    let said = c.ok(&["node", "stop", "a"]);
    assert_eq!(
        said,
        "node `a`: its agent is asked to stop; 1 running task is stopped and runs again elsewhere\n"
    );
    assert_eq!(
        c.agent_exit("a", Duration::from_secs(20)),
        Some(0),
        "the agent exits cleanly"
    );
    wait_until("the task to run on b", Duration::from_secs(20), || {
        let t = &c.tasks(1)[0];
        t["state"] == "running" && t["node"] == "b"
    });
    let all = c.ok(&["nodes", "--all"]);
    assert!(all.contains("left (operator)"), "{all}");
    c.refused(
        &["node", "stop", "a"],
        "node `a` has no agent running to stop (its agent left: operator)",
    );
    c.ok(&["cancel", "1"]);
}

/// `node stop` after `node stop --drain` escalates, as Slurm's second `scancel` does: the
/// draining agent stops its running task now (it ignored the second stop, though the CLI said
/// the task was stopped), exits 0, and the task runs again on the other node.
#[test]
fn a_plain_stop_after_a_drain_stop_stops_the_running_task() {
    let mut c = Cluster::start("node-stop-escalate", false);
    c.start_agent("a", 1, &[]);
    c.wait_for_nodes(1);
    c.ok(&["submit", "--", "sleep", "60"]);
    wait_until("the task to run on a", Duration::from_secs(10), || {
        c.tasks(1)[0]["state"] == "running"
    });
    c.start_agent("b", 1, &[]);
    c.wait_for_nodes(2);
    let said = c.ok(&["node", "stop", "a", "--drain"]);
    assert!(said.contains("1 running task ends there first"), "{said}");
    // Draining: its task goes on.
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(c.tasks(1)[0]["node"], "a");
    assert_eq!(c.tasks(1)[0]["attempt"], 1);
    let said = c.ok(&["node", "stop", "a"]);
    assert!(
        said.contains("1 running task is stopped and runs again elsewhere"),
        "{said}"
    );
    assert_eq!(
        c.agent_exit("a", Duration::from_secs(20)),
        Some(0),
        "the agent stops its task and exits cleanly, long before the task's 60 s"
    );
    wait_until("the task to run on b", Duration::from_secs(20), || {
        let t = &c.tasks(1)[0];
        t["state"] == "running" && t["node"] == "b"
    });
    c.ok(&["cancel", "1"]);
}

#[test]
fn a_node_that_cannot_start_an_application_is_backed_off_and_the_queue_runs_elsewhere() {
    let mut c = Cluster::start("backoff", true);
    c.start_agent("a", 4, &[]);
    c.start_agent("b", 1, &[]);
    c.wait_for_nodes(2);
    // On `a` the program "is missing" (exit 127, as the shell says for a command not found).
    let job = c.write(
        "job.toml",
        "[[application]]\nname = \"needs-tool\"\ntasks = 10\nretries = 3\n[application.cpu]\n\
         command = 'if [ $HETSCHED_NODE = a ]; then exit 127; fi; sleep 0.02'\n",
    );
    let out = c.cli(&["submit", job.to_str().expect("path"), "--wait"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let tasks = c.tasks(1);
    assert!(
        tasks
            .iter()
            .all(|t| t["node"] == "b" && t["state"] == "succeeded")
    );
    let failed_attempts: u64 = tasks
        .iter()
        .map(|t| t["failed_attempts"].as_u64().unwrap_or(0))
        .sum();
    // 3 start failures back `a` off; at most its 3 other slots were already running tasks there.
    assert!(
        (3..=6).contains(&failed_attempts),
        "a failed 3 to 6 attempts before it was backed off, not the queue: {failed_attempts}"
    );
    let nodes = c.json(&["nodes"]);
    let a = nodes
        .as_array()
        .expect("nodes")
        .iter()
        .find(|n| n["name"] == "a")
        .expect("a")
        .clone();
    assert_eq!(a["backed_off"][0]["app"], "needs-tool", "{a}");
    assert!(a["backed_off"][0]["failures"].as_u64() >= Some(3), "{a}");
    let table = text(&c.cli(&["nodes"]).stdout);
    assert!(table.contains("needs-tool (job 1"), "{table}");
    let (_, _, metrics) = c.http_get("/metrics");
    assert!(
        metrics.contains("hetsched_node_backed_off_applications{node=\"a\"} 1"),
        "{metrics}"
    );
}

/// A node restored at a restart is not alive until its agent is heard again, and is listed as
/// waited for, not `DEAD`, while its grace lasts.
#[test]
fn nodes_restored_after_a_server_restart_are_returning_until_they_heartbeat() {
    let mut c = Cluster::start("restart-dead", false);
    c.start_agent("a", 1, &[]);
    c.wait_for_nodes(1);
    c.signal_agent("a", "KILL");
    let _ = c.agent_exit("a", Duration::from_secs(10));
    c.kill_server();
    c.start_server();
    let nodes = c.json(&["nodes"]);
    assert_eq!(nodes[0]["name"], "a");
    assert_eq!(nodes[0]["alive"], false, "{nodes}");
    assert!(
        nodes[0]["returning_ms"].as_u64().is_some_and(|ms| ms > 0),
        "{nodes}"
    );
    let table = text(&c.cli(&["nodes"]).stdout);
    assert!(
        table.contains("not back since the server's restart (dead in") && !table.contains("DEAD"),
        "{table}"
    );
    let returning = c.json(&["nodes", "--state", "returning"]);
    assert_eq!(returning[0]["name"], "a", "{returning}");
    assert_eq!(c.json(&["nodes", "--state", "dead"]), serde_json::json!([]));
    c.start_agent("a", 1, &[]);
    c.wait_for_nodes(1);
    assert_eq!(
        c.json(&["nodes"])[0]["returning_ms"],
        serde_json::Value::Null
    );
}

/// `hetsched server --set-aside JOB`: a server that refuses to start on a stored job whose file
/// this version no longer reads (here rewritten in the store, as a stricter rule would make it)
/// says so, naming the flag; started with it, it sets the job aside in DATA_DIR/set-aside and
/// serves the other jobs.
#[test]
fn the_server_starts_past_an_unreadable_stored_job_set_aside_by_its_flag() {
    let mut c = Cluster::start("set-aside", false);
    let job = c.write(
        "job.toml",
        "[[application]]\nname = \"a\"\ntasks = 2\n[application.cpu]\ncommand = \"true\"\n",
    );
    let job = job.to_str().expect("path");
    c.ok(&["submit", job]);
    c.ok(&["submit", job]);
    c.kill_server();
    let db = rusqlite::Connection::open(c.data().join("state.db")).expect("db");
    db.execute(
        "UPDATE jobs SET text = replace(text, 'name = \"a\"', 'name = \"a/b\"') WHERE id = 1",
        [],
    )
    .expect("rewrite");
    drop(db);
    // Without the flag: refused, naming the job and both ways out.
    let mut server = std::process::Command::new(support::BIN)
        .args(["server", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(c.data())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn server");
    let mut exited = None;
    wait_until(
        "the refused server to exit",
        Duration::from_secs(20),
        || {
            exited = server.try_wait().ok().flatten();
            exited.is_some()
        },
    );
    let out = server.wait_with_output().expect("server output");
    let err = text(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("the store holds job 1, whose file no longer reads")
            && err.contains("`hetsched server --set-aside 1`"),
        "{err}"
    );
    c.server_args = vec!["--set-aside".into(), "1".into()];
    c.start_server();
    let ids: Vec<u64> = c
        .json(&["jobs"])
        .as_array()
        .map(|a| a.iter().filter_map(|j| j["id"].as_u64()).collect())
        .unwrap_or_default();
    assert_eq!(ids, vec![2], "job 1 set aside, job 2 kept");
    let aside = c.data().join("set-aside");
    assert!(
        std::fs::read_to_string(aside.join("job-1.toml"))
            .expect("its file")
            .contains("a/b")
    );
    let record: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(aside.join("job-1.json")).expect("record"))
            .expect("json");
    assert_eq!(
        (record["id"].as_u64(), record["state"].as_str()),
        (Some(1), Some("pending"))
    );
    let log = std::fs::read_to_string(c.dir.join("server.log")).expect("log");
    assert!(log.contains("job 1 set aside"), "{log}");
    let help = text(&c.cli(&["server", "--help"]).stdout);
    assert!(
        help.contains("--set-aside <JOB>") && help.contains("--set-aside-topology <NAME>"),
        "{help}"
    );
}

/// A job set aside while its task runs on a live agent: the server that starts past it no longer
/// knows the task, so the agent is told to stop it (the heartbeat's rule for tasks the server
/// did not assign) — its process ends, nothing of it is reported back as a job, and the agent
/// goes on running new work.
#[test]
fn a_running_job_set_aside_has_its_task_stopped_by_its_live_agent() {
    let mut c = Cluster::start("set-aside-running", false);
    c.start_agent("a", 2, &[]);
    c.wait_for_nodes(1);
    let pid_file = c.dir.join("pid");
    let script = format!("echo $$ > {}; exec sleep 300", pid_file.display());
    c.ok(&["submit", "--name", "long", "--", "sh", "-c", &script]);
    let mut pid = None;
    wait_until("the task's process", Duration::from_secs(30), || {
        pid = std::fs::read_to_string(&pid_file)
            .ok()
            .and_then(|s| s.trim().parse::<u32>().ok());
        pid.is_some()
    });
    let pid = pid.expect("a pid");
    let alive = |pid: u32| {
        std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
            s.rsplit(')')
                .next()
                .is_some_and(|f| !f.trim_start().starts_with('Z'))
        })
    };
    assert!(alive(pid), "the task runs");
    c.kill_server();
    let db = rusqlite::Connection::open(c.data().join("state.db")).expect("db");
    // The job's stored file no longer reads (an application name the parser now refuses).
    let changed = db
        .execute(
            "UPDATE jobs SET text = replace(text, 'name = \"', 'name = \"x/') WHERE id = 1",
            [],
        )
        .expect("rewrite");
    assert_eq!(changed, 1);
    drop(db);
    c.server_args = vec!["--set-aside".into(), "1".into()];
    c.start_server();
    wait_until(
        "the agent to stop the set-aside task",
        Duration::from_secs(30),
        || !alive(pid),
    );
    let record: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(c.data().join("set-aside").join("job-1.json")).expect("record"),
    )
    .expect("json");
    assert_eq!(record["state"].as_str(), Some("running"), "{record}");
    assert!(c.json(&["jobs"]).as_array().is_some_and(|a| a.is_empty()));
    // The agent is still the server's and runs new work; the new job's id is not job 1's.
    c.ok(&["submit", "--wait", "--", "true"]);
    let jobs = c.json(&["jobs"]);
    let done: Vec<(u64, String)> = jobs
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|j| Some((j["id"].as_u64()?, j["state"].as_str()?.to_string())))
        .collect();
    assert_eq!(done, vec![(2, "completed".to_string())], "{jobs}");
}

/// `submit --wait` and `wait` wait through a server restart (SIGKILL, started again on the same
/// data directory a second later): the job completes, so they succeed, having said that the
/// server stopped answering.
#[test]
fn waiting_clients_wait_through_a_server_restart() {
    use std::process::Stdio;
    let mut c = Cluster::start("wait-restart", false);
    c.start_agent("a", 2, &[]);
    c.wait_for_nodes(1);
    let piped = |mut cmd: std::process::Command| {
        cmd.stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn the client")
    };
    let submitter = piped(c.command(&["submit", "--wait", "--", "sleep", "3"]));
    wait_until("job 1 running", Duration::from_secs(20), || {
        c.cli(&["job", "1", "--output", "json"]).status.success()
            && c.json(&["job", "1"])["state"] == "running"
    });
    let waiter = piped(c.command(&["wait", "1"]));
    std::thread::sleep(Duration::from_millis(300));
    c.kill_server();
    std::thread::sleep(Duration::from_secs(1));
    c.start_server();
    for (what, client) in [("submit --wait", submitter), ("wait", waiter)] {
        let out = client.wait_with_output().expect("the client ends");
        let stderr = text(&out.stderr);
        assert!(out.status.success(), "{what}: {stderr}");
        assert!(
            stderr.contains("the server does not answer")
                && stderr.contains("the server answers again"),
            "{what}: {stderr}"
        );
    }
    assert_eq!(c.json(&["job", "1"])["state"], "completed");
}

/// Node `name` in `hetsched nodes --output json`.
fn node(c: &Cluster, name: &str) -> serde_json::Value {
    c.json(&["nodes"])
        .as_array()
        .expect("nodes")
        .iter()
        .find(|n| n["name"] == name)
        .cloned()
        .unwrap_or_else(|| panic!("no node {name}"))
}

fn failed_attempts(c: &Cluster, job: u64) -> u64 {
    c.tasks(job)
        .iter()
        .map(|t| t["failed_attempts"].as_u64().unwrap_or(0))
        .sum()
}

#[test]
fn drains_and_back_offs_survive_a_server_restart() {
    let mut c = Cluster::start("restart-operator", false);
    c.start_agent("a", 2, &[]);
    c.start_agent("b", 1, &[]);
    c.wait_for_nodes(2);
    // `a` cannot start the application: backed off after 3 start failures, while `b` works
    // through the queue one task at a time.
    let job = c.write(
        "job.toml",
        "[[application]]\nname = \"needs-tool\"\ntasks = 8\nretries = 5\n[application.cpu]\n\
         command = 'if [ $HETSCHED_NODE = a ]; then exit 127; fi; sleep 0.5'\n",
    );
    assert!(
        c.cli(&["submit", job.to_str().expect("path")])
            .status
            .success()
    );
    wait_until("the back-off of a", Duration::from_secs(30), || {
        node(&c, "a")["backed_off"][0]["app"] == "needs-tool"
    });
    // A task already started on a's other slot may still fail after the back-off began.
    wait_until("a's last attempt to end", Duration::from_secs(30), || {
        !c.tasks(1)
            .iter()
            .any(|t| t["node"] == "a" && t["state"] == "running")
    });
    let before = failed_attempts(&c, 1);
    assert!((3..=4).contains(&before), "{before} start failures on a");
    let pending = c
        .tasks(1)
        .iter()
        .filter(|t| t["state"] == "pending")
        .count();
    assert!(pending > 0, "the restart comes while tasks wait");

    c.kill_server();
    c.start_server();
    c.wait_for_nodes(2);
    let a = node(&c, "a");
    assert_eq!(a["backed_off"][0]["app"], "needs-tool", "kept: {a}");
    let left = a["backed_off"][0]["remaining_ms"]
        .as_u64()
        .expect("remaining");
    assert!(
        left > 0 && left <= 60_000,
        "the time left goes on: {left} ms"
    );
    // …and in force: the rest of the queue runs on b, and a fails nothing more.
    wait_until("job 1 to finish", Duration::from_secs(60), || {
        c.tasks(1).iter().all(|t| t["state"] == "succeeded")
    });
    assert_eq!(failed_attempts(&c, 1), before, "no new start failure on a");
    assert!(c.tasks(1).iter().all(|t| t["node"] == "b"));

    // A drain is kept across a restart too, and so is its end.
    assert!(c.cli(&["node", "drain", "b"]).status.success());
    c.kill_server();
    c.start_server();
    c.wait_for_nodes(2);
    assert_eq!(node(&c, "b")["drained"], true, "the drain is kept");
    let quick = c.write(
        "quick.toml",
        "[[application]]\nname = \"t\"\ntasks = 4\n[application.cpu]\ncommand = 'true'\n",
    );
    let out = c.cli(&["submit", quick.to_str().expect("path"), "--wait"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        c.tasks(2).iter().all(|t| t["node"] == "a"),
        "nothing ran on b"
    );
    assert!(c.cli(&["node", "resume", "b"]).status.success());
    c.kill_server();
    c.start_server();
    c.wait_for_nodes(2);
    assert_eq!(node(&c, "b")["drained"], false, "the resume is kept");
}

#[test]
fn job_names_application_workdirs_and_resubmit_failed() {
    let mut c = Cluster::start("names", false);
    c.start_agent("a", 2, &[]);
    c.wait_for_nodes(1);
    std::fs::create_dir_all(c.dir.join("out")).expect("out");
    // Task 1 of `flaky` fails until the file `fixed` exists; `pwd` shows the workdir.
    let job = c.write(
        "job.toml",
        "name = \"nightly-qr\"\n\
         [[application]]\nname = \"flaky\"\ntasks = 3\nworkdir = \"out\"\n[application.cpu]\n\
         command = 'pwd > where-{index}; echo attempt $HETSCHED_ATTEMPT; if [ {index} = 1 ] && [ ! -e ../fixed ]; then exit 4; fi'\n",
    );
    let out = c.cli(&["submit", job.to_str().expect("path"), "--wait"]);
    assert!(!out.status.success());
    let jobs = c.json(&["jobs"]);
    assert_eq!(jobs[0]["name"], "nightly-qr", "{jobs}");
    let canonical = std::fs::canonicalize(c.dir.join("out")).expect("out");
    assert_eq!(
        std::fs::read_to_string(c.dir.join("out/where-0"))
            .expect("where-0")
            .trim(),
        canonical.display().to_string(),
        "the application's workdir, relative to the submit directory"
    );
    assert!(!c.dir.join("where-0").exists());
    // `--failed` or `--cancelled` is required (a command line that does not parse: exit 2,
    // clap's message); then only task 1 runs again, as attempt 2.
    let out = c.cli(&["resubmit", "1"]);
    assert!(
        out.status.code() == Some(2)
            && text(&out.stderr).contains("required arguments were not provided")
            && text(&out.stderr).contains("<--failed|--cancelled>"),
        "{:?}: {}",
        out.status,
        text(&out.stderr)
    );
    assert!(
        c.ok(&["resubmit", "1", "--cancelled"])
            .contains("0 cancelled tasks queued again")
    );
    std::fs::write(c.dir.join("fixed"), "").expect("fixed");
    let out = c.cli(&["resubmit", "1", "--failed", "--wait"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("1 failed task queued again"));
    let attempts: Vec<u64> = c
        .tasks(1)
        .iter()
        .map(|t| t["attempt"].as_u64().unwrap_or(0))
        .collect();
    assert_eq!(attempts, vec![1, 2, 1]);
    assert_eq!(c.json(&["job", "1"])["state"], "completed");
    // An earlier attempt's output is read wherever it is; once it was removed from the node
    // that ran it, `log` fails naming it rather than say it printed nothing.
    let out = c.cli(&["log", "1", "flaky:1", "--attempt", "1"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "attempt 1\n");
    let output = c.tasks(1)[1]["output"].as_str().unwrap_or("").to_string();
    let (_, path) = output.split_once(':').expect("NODE:PATH");
    let first = path.replace(".2.{out,err}", ".1.out");
    std::fs::remove_file(&first).unwrap_or_else(|e| panic!("{first}: {e}"));
    let out = c.cli(&["log", "1", "flaky:1", "--attempt", "1"]);
    assert!(
        !out.status.success()
            && text(&out.stderr).contains(&format!(
                "the stdout of job 1's task \"flaky\":1 attempt 1 is gone: {first} was removed"
            )),
        "{}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    // `--name` overrides the file's name; a bad name is refused with where it is.
    let out = c.cli(&["submit", job.to_str().expect("path"), "--name", "adhoc"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(c.json(&["job", "2"])["name"], "adhoc");
    let bad = c.write(
        "bad.toml",
        "name = \"\"\n[[application]]\nname = \"x\"\ntasks = 1\n[application.cpu]\ncommand = 'true'\n",
    );
    let out = c.cli(&["submit", bad.to_str().expect("path")]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("bad.toml:1:") && text(&out.stderr).contains("name"),
        "{}",
        text(&out.stderr)
    );
    // A workdir the application names that the node lacks fails the task, naming it, instead
    // of running it in the agent's own directory.
    let out = c.cli(&[
        "submit",
        "--workdir",
        "nowhere",
        "--wait",
        "--",
        "touch",
        "here",
    ]);
    assert!(!out.status.success());
    let tasks = c.json(&["tasks", "--job", "3"]);
    let message = tasks[0]["message"].as_str().unwrap_or("");
    assert!(
        message.contains("workdir `") && message.contains("nowhere` is not a directory"),
        "{tasks}"
    );
    assert!(!c.dir.join("here").exists() && !c.dir.join("nowhere").exists());
}

#[test]
fn the_cli_exits_quietly_on_a_closed_pipe_and_speaks_plainly() {
    use std::io::Read;
    let mut c = Cluster::start("polish", false);
    let job = c.write(
        "big.toml",
        "[[application]]\nname = \"many\"\ntasks = 3000\n[application.cpu]\ncommand = 'true'\n",
    );
    let out = c.cli(&["submit", job.to_str().expect("path")]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    // `hetsched tasks | head -c 100`: the reader goes away after 100 bytes.
    for format in ["table", "json"] {
        let mut child = c
            .command(&["tasks", "--job", "1", "--output", format])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("tasks");
        let mut head = [0u8; 100];
        child
            .stdout
            .take()
            .expect("stdout")
            .read_exact(&mut head)
            .expect("head");
        // (the pipe's read end is dropped here)
        let out = child.wait_with_output().expect("wait");
        let err = text(&out.stderr);
        assert!(
            matches!(out.status.code(), Some(0 | 141)),
            "{format}: {:?} {err}",
            out.status
        );
        assert!(!err.contains("panicked"), "{err}");
    }
    // JSON: RFC 3339 beside nanoseconds, null for what is not there yet, one job shape.
    let one = c.json(&["job", "1"]);
    let all = c.json(&["jobs"]);
    let keys = |v: &serde_json::Value| -> Vec<String> {
        v.as_object().expect("object").keys().cloned().collect()
    };
    assert_eq!(
        keys(&one),
        keys(&all[0]),
        "jobs and job N give the same shape"
    );
    assert!(
        one["submitted"]
            .as_str()
            .is_some_and(|s| s.ends_with('Z') && s.contains('T')),
        "{one}"
    );
    assert_eq!(one["finished_ns"], serde_json::Value::Null);
    assert_eq!(one["apps"][0]["mean_cpu_ms"], serde_json::Value::Null);
    let t = &c.tasks(1)[0];
    assert_eq!(t["started"], serde_json::Value::Null, "{t}");
    assert_eq!(t["node"], serde_json::Value::Null, "{t}");

    // A refused connection says what to do, once.
    let out = c
        .command(&["jobs", "--server", "http://127.0.0.1:1"])
        .output()
        .expect("jobs");
    let err = text(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("is the server running?") && err.contains("hetsched server"),
        "{err}"
    );
    let parts: Vec<&str> = err
        .trim()
        .trim_start_matches("error: ")
        .split(": ")
        .collect();
    let unique: std::collections::BTreeSet<&str> = parts.iter().copied().collect();
    assert_eq!(parts.len(), unique.len(), "no part repeated: {err}");

    // Help lists every policy of the core and the defaults.
    let help = text(&c.cli(&["server", "--help"]).stdout);
    for p in [
        "cpu-only",
        "fifo",
        "drf",
        "hadoop-model",
        "hdas",
        "hdas-hetero",
    ] {
        assert!(help.contains(p), "{p} in:\n{help}");
    }
    assert!(
        help.contains("[default: hdas]") && help.contains("[default: 127.0.0.1:7420]"),
        "{help}"
    );
    assert!(help.contains("[default: 10s]"), "{help}");
    let help = text(&c.cli(&["agent", "--help"]).stdout);
    assert!(help.contains("[default: http://127.0.0.1:7420]"), "{help}");

    // Logs carry no colour when they do not go to a terminal.
    c.start_agent("a", 1, &[]);
    c.wait_for_nodes(1);
    // The server may list the node before the agent has logged its registration.
    wait_until(
        "the agent's registration in its log",
        Duration::from_secs(30),
        || c.agent_log("a").contains("registered"),
    );
    let log = c.agent_log("a");
    assert!(!log.contains('\u{1b}'), "{log}");
}

#[test]
fn several_jobs_are_held_released_cancelled_and_waited_for_by_ids_ranges_names_last_and_all() {
    let mut c = Cluster::start("select", false);
    c.start_agent("a", 1, &[]);
    c.wait_for_nodes(1);
    // Job 1 holds the agent's one core; jobs 2–4 are submitted held.
    c.ok(&["submit", "--", "sleep", "30"]);
    for _ in 0..3 {
        c.ok(&["submit", "--hold", "--tasks", "2", "--", "true"]);
    }
    let said = c.ok(&["release", "2-3"]);
    assert_eq!(
        said,
        "job 2: 2 pending tasks released\njob 3: 2 pending tasks released\n"
    );
    c.ok(&["cancel", "1"]);
    let said = c.ok(&["wait", "2,3"]);
    let lines: Vec<&str> = said.lines().collect();
    assert_eq!(lines.len(), 2, "{said}");
    assert!(
        lines[0].starts_with("job 2 completed: 2 succeeded")
            && lines[1].starts_with("job 3 completed: 2 succeeded"),
        "{said}"
    );
    // Job 4 is still held: a wait for it runs out of time, naming it (status 124).
    let out = c.cli(&["wait", "2", "4", "--timeout", "1s"]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(124), "{err}");
    assert!(
        err.contains("timed out after 1s: job 4 still pending"),
        "{err}"
    );
    // `--timeout 0s` looks once: it answers at once, the time in plain words. "At once" is
    // told from waiting a step (500 ms held by the server, after a first look) by the
    // fastest of three tries: one process start on a loaded machine may take longer alone.
    let mut fastest = std::time::Duration::MAX;
    for _ in 0..3 {
        let asked = std::time::Instant::now();
        let out = c.cli(&["wait", "4", "--timeout", "0s"]);
        fastest = fastest.min(asked.elapsed());
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(124), "{err}");
        assert!(
            err.contains("timed out after 0s: job 4 still pending") && !err.contains('.'),
            "{err}"
        );
        if fastest < std::time::Duration::from_millis(400) {
            break;
        }
    }
    assert!(
        fastest < std::time::Duration::from_millis(400),
        "`wait --timeout 0s` took {fastest:?} at the fastest of three"
    );
    // An unknown id among others: the rest are done, the refusal is named, the status fails.
    let out = c.cli(&["hold", "4", "99"]);
    assert!(!out.status.success());
    // Held already: none newly held.
    assert_eq!(text(&out.stdout), "job 4: 0 pending tasks held\n");
    let err = text(&out.stderr);
    assert!(
        err.contains("error: no job 99") && err.contains("1 of 2 jobs not held: 99"),
        "{err}"
    );
    // `all`: every job not finished — job 4 only.
    let cancelled = c.json(&["cancel", "all"]);
    assert_eq!(
        cancelled,
        serde_json::json!([{"job_id": 4, "cancelled": 2, "kind": "batch"}]),
        "{cancelled}"
    );
    let out = c.cli(&["wait", "all"]);
    assert!(out.status.success());
    assert!(
        text(&out.stderr).contains("no unfinished job"),
        "{}",
        text(&out.stderr)
    );
    // A range of finished jobs: each is told, and the failure names the jobs that did not
    // complete.
    let out = c.cli(&["wait", "1-4"]);
    assert!(!out.status.success());
    assert_eq!(
        text(&out.stdout).lines().count(),
        4,
        "{}",
        text(&out.stdout)
    );
    assert!(
        text(&out.stderr).contains("2 of 4 jobs did not complete: 1 cancelled, 4 cancelled"),
        "{}",
        text(&out.stderr)
    );
    // Ended jobs cannot be held, and each refusal names its job.
    let out = c.cli(&["hold", "last", "99"]);
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(
        err.contains("job 4 has ended (cancelled): nothing to hold")
            && err.contains("no job 99")
            && err.contains("2 of 2 jobs not held: 4, 99"),
        "{err}"
    );
    c.refused(
        &["cancel", "2-3", "--tasks", "0"],
        "--tasks names tasks of one job; 2 jobs are selected",
    );
    c.refused(
        &["cancel", "7-9"],
        "`7-9`: the server lists no job in this range",
    );
    c.refused(
        &["cancel", "3-x"],
        "is not a job id (a number), a range (`4-9`), `name:NAME`, `last` or `all`",
    );
    // `name:NAME`: the jobs listed with that name (Slurm's `scancel --name`); `jobs --name`
    // lists them.
    for name in ["sweep", "other", "sweep"] {
        c.ok(&["submit", "--hold", "--name", name, "--", "true"]);
    }
    let listed = c.json(&["jobs", "--name", "sweep"]);
    let ids: Vec<u64> = listed
        .as_array()
        .map(|a| a.iter().filter_map(|j| j["id"].as_u64()).collect())
        .unwrap_or_default();
    assert_eq!(ids, [5, 7], "{listed}");
    let said = c.ok(&["release", "name:sweep"]);
    assert_eq!(
        said,
        "job 5: 1 pending task released\njob 7: 1 pending task released\n"
    );
    let said = c.ok(&["wait", "name:sweep"]);
    assert_eq!(said.lines().count(), 2, "{said}");
    assert_eq!(
        c.json(&["job", "6"])["held"],
        true,
        "another name is left alone"
    );
    c.refused(
        &["cancel", "name:nobody"],
        "`name:nobody`: the server lists no job named `nobody`",
    );
    // A divisible job's pending work is counted in units, a workflow's in instances (before,
    // `60 pending tasks released` for both).
    let div = c.write(
        "div.toml",
        "[[divisible]]\nname = \"count\"\nunits = 60\ncommand = \"echo {start} {end}\"\n",
    );
    let wf = c.write(
        "wf.toml",
        "[[task]]\nname = \"t\"\ninstances = 3\ncommand = \"true\"\n",
    );
    for file in [&div, &wf] {
        c.ok(&["submit", "--hold", file.to_str().expect("path")]);
    }
    let said = c.ok(&["release", "8-9"]);
    assert_eq!(
        said,
        "job 8: 60 pending units released\njob 9: 3 pending instances released\n"
    );
}

/// An agent started with `--time-limit` (inside a batch allocation, say): its heartbeats say how
/// long tasks may still run there, `hetsched nodes` shows it, a task whose own time limit is
/// longer waits (and says why) instead of being started and cut off, a shorter one runs there,
/// and at the end the agent stops what still runs and exits — the server runs it again on the
/// next node, without counting a failure.
#[test]
fn an_agent_with_a_time_limit_takes_only_tasks_that_end_in_time_and_hands_back_the_rest() {
    let mut c = Cluster::start("time-limit", true);
    c.start_agent("brief", 2, &["--time-limit", "9s", "--kill-grace", "1s"]);
    c.wait_for_nodes(1);
    let nodes = c.json(&["nodes"]);
    let left = nodes[0]["time_left_ms"].as_u64().expect("a time left");
    assert!(
        left > 0 && left <= 8_000,
        "9 s less the kill grace: {left} ms"
    );
    assert!(c.ok(&["nodes"]).contains("time left"));
    let (_, _, metrics) = c.http_get("/metrics");
    assert!(
        metrics.contains("hetsched_node_time_left_seconds{node=\"brief\"} "),
        "{metrics}"
    );
    // Longer than the node has: it waits, and says why, at once.
    let out = c.cli(&[
        "submit",
        "--name",
        "long",
        "--time-limit",
        "1m",
        "--",
        "true",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let why = "`true`'s time limit (1m) is longer than the time left on every node that can run it";
    assert!(text(&out.stderr).contains(why), "{}", text(&out.stderr));
    let job = c.json(&["job", "1"]);
    assert!(
        job["pending_reason"]
            .as_str()
            .is_some_and(|r| r.starts_with(why)),
        "{job}"
    );
    assert_eq!(job["blocked"], true, "{job}");
    // Short enough: it runs there.
    c.ok(&["submit", "--time-limit", "2s", "--wait", "--", "true"]);
    assert_eq!(c.tasks(2)[0]["node"], "brief");
    // No limit: it may run anywhere, and is stopped when the agent's time is up. It sleeps only
    // on `brief`, so its second attempt ends at once.
    c.ok(&[
        "submit",
        "--name",
        "open",
        "--shell",
        "--",
        "test \"$HETSCHED_NODE\" != brief || exec sleep 60",
    ]);
    wait_until(
        "the open task runs on brief",
        Duration::from_secs(10),
        || c.tasks(3)[0]["state"] == "running",
    );
    assert_eq!(c.agent_exit("brief", Duration::from_secs(20)), Some(0));
    assert!(
        c.agent_log("brief")
            .contains("the time limit is one kill grace away")
    );
    assert_eq!(c.tasks(3)[0]["state"], "pending", "handed back, not failed");
    c.start_agent("lasting", 2, &[]);
    c.ok(&["wait", "1", "3", "--timeout", "20s"]);
    let open = &c.tasks(3)[0];
    assert_eq!(open["node"], "lasting");
    assert_eq!(open["attempt"], 2);
    assert_eq!(c.tasks(1)[0]["node"], "lasting");
    // A limit the kill grace eats whole is refused at start.
    let token = c.data().join("agent-token");
    let out = c
        .command(&[
            "agent",
            "--time-limit",
            "1s",
            "--kill-grace",
            "2s",
            "--name",
            "x",
        ])
        .arg("--token-file")
        .arg(token)
        .output()
        .expect("agent");
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("time limit 1s is not longer than the kill grace 2s"),
        "{}",
        text(&out.stderr)
    );
}

/// A task that ran and printed nothing reads as "printed nothing" (exit 0); output that is gone
/// — its job directory removed on the agent, or the node re-joined under its name with another
/// work directory — fails `log` naming the task, node and path, and `log --all` counts it.
/// Before, both read as "printed nothing" and exited 0: `log --all > results.txt` lost results.
#[test]
fn log_fails_on_output_that_is_gone_and_prints_nothing_for_a_silent_task() {
    let mut c = Cluster::start("log-gone", false);
    c.start_agent("a1", 1, &[]);
    c.wait_for_nodes(1);
    c.ok(&["submit", "--wait", "--", "echo", "important-result"]);
    c.ok(&["submit", "--wait", "--", "true"]);
    let out = c.cli(&["log", "1", "echo:0"]);
    assert_eq!(text(&out.stdout), "important-result\n");
    let out = c.cli(&["log", "2", "true:0"]);
    assert!(
        out.status.success() && out.stdout.is_empty(),
        "{}",
        text(&out.stderr)
    );
    assert!(
        text(&out.stderr).contains("printed nothing on stdout"),
        "{}",
        text(&out.stderr)
    );
    let out = c.cli(&["log", "2", "--all"]);
    assert!(out.status.success(), "{}", text(&out.stderr));

    let job_dir = c.dir.join("agent-a1").join("job-1");
    std::fs::remove_dir_all(&job_dir).expect("rm -rf job-1");
    let out = c.cli(&["log", "1", "echo:0"]);
    let err = text(&out.stderr);
    assert!(!out.status.success() && out.stdout.is_empty(), "{err}");
    assert!(
        err.contains("node `a1`")
            && err.contains("job 1's task \"echo\":0 attempt 1 is gone")
            && err.contains(&format!("its job directory {}", job_dir.display())),
        "{err}"
    );
    let out = c.cli(&["log", "1", "--all"]);
    let err = text(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("task 0 (echo:0") && err.contains("the output of 1 task of job 1 could not"),
        "{err}"
    );

    // The node back under its name with another work directory (the old one moved away, a
    // new one made in its place): job 2's output stays in the old one, and this agent says it
    // is not here rather than that the task printed nothing.
    c.kill_agent("a1");
    // Its name is free again once the node is declared dead (another identity: a new work
    // directory holds a new one).
    wait_until("a1 declared dead", Duration::from_secs(30), || {
        c.json(&["nodes", "--state", "dead"])
            .as_array()
            .is_some_and(|n| n.len() == 1)
    });
    let work = c.dir.join("agent-a1");
    std::fs::rename(&work, c.dir.join("agent-a1.old")).expect("move the work dir away");
    c.start_agent("a1", 1, &[]);
    wait_until("a1 back", Duration::from_secs(30), || {
        let out = c.cli(&["log", "2", "true:0"]);
        text(&out.stderr).contains("is gone")
    });
    let out = c.cli(&["log", "2", "true:0"]);
    let err = text(&out.stderr);
    assert!(
        !out.status.success() && err.contains(&work.join("job-2").display().to_string()),
        "{err}"
    );
}

/// The agent file's `time_limit = "auto"` means what `--time-limit auto` does: asked of the
/// batch system (a stand-in `squeue`), less the minute kept back; outside an allocation it is
/// refused naming the file's key. Before, the file refused it: `invalid duration \`auto\``.
#[test]
fn an_agent_files_time_limit_auto_asks_the_batch_system() {
    let c = Cluster::stopped("time-limit-auto-file");
    let bin = c.dir.join("fake-bin");
    std::fs::create_dir_all(&bin).expect("dir");
    install(&bin, &[("squeue", "#!/bin/sh\necho '  1:05:00'\n")]);
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let file = c.write("agent.toml", "time_limit = \"auto\"\n");
    let token = c.write("agent-token", "0123456789abcdef0123456789abcdef\n");
    std::fs::set_permissions(&token, std::os::unix::fs::PermissionsExt::from_mode(0o600))
        .expect("chmod");
    let check = |job: Option<&str>| {
        let mut cmd = std::process::Command::new(support::BIN);
        cmd.args(["agent", "--check", "--offline", "--name", "n1"])
            .current_dir(&c.dir)
            .arg("--config")
            .arg(&file)
            .arg("--token-file")
            .arg(&token)
            .arg("--work-dir")
            .arg(c.dir.join("work"))
            .env("PATH", &path)
            .env_remove("SLURM_JOB_ID")
            .env_remove("PBS_JOBID");
        if let Some(job) = job {
            cmd.env("SLURM_JOB_ID", job);
        }
        cmd.output().expect("agent --check")
    };
    let out = check(Some("4242"));
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("time limit 1h 4m"),
        "{}",
        text(&out.stdout)
    );
    let out = check(None);
    let err = text(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("agent.toml: time_limit = \"auto\"")
            && err.contains("not inside a batch allocation"),
        "{err}"
    );
}

/// `--time-limit auto` inside a Slurm job: the agent asks `squeue` for its job's time left (a
/// stand-in `squeue` here) and keeps a minute back; outside any allocation it says so and
/// stops, and a batch system that fails is named.
#[test]
fn an_agent_asks_slurm_for_its_allocations_time_left() {
    let c = Cluster::start("time-limit-auto", false);
    let bin = c.dir.join("fake-bin");
    std::fs::create_dir_all(&bin).expect("dir");
    install(
        &bin,
        &[(
            "squeue",
            "#!/bin/sh\n\
             [ \"$*\" = \"--noheader --jobs 4242 --format %L\" ] || { echo \"no job $*\" >&2; exit 1; }\n\
             echo '  1:05:00'\n",
        )],
    );
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let agent = |job: Option<&str>, name: &str| {
        let mut cmd = c.command(&[
            "agent",
            "--server",
            &c.url(),
            "--name",
            name,
            "--cores",
            "1",
            "--log-listen",
            "127.0.0.1:0",
            "--kill-grace",
            "10s",
            "--time-limit",
            "auto",
        ]);
        cmd.arg("--token-file")
            .arg(c.data().join("agent-token"))
            .arg("--work-dir")
            .arg(c.dir.join(format!("agent-{name}")))
            .env("PATH", &path)
            .env_remove("SLURM_JOB_ID")
            .env_remove("PBS_JOBID");
        if let Some(job) = job {
            cmd.env("SLURM_JOB_ID", job);
        }
        cmd
    };
    let mut child = agent(Some("4242"), "slurm")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("agent");
    c.wait_for_nodes(1);
    let left = c.json(&["nodes"])[0]["time_left_ms"].as_u64().unwrap_or(0);
    // 65 minutes, less the minute `auto` keeps back and the 10 s kill grace.
    let want = (65 * 60 - 60 - 10) * 1000;
    assert!(left <= want && left + 10_000 > want, "{left} ms");
    let _ = child.kill();
    let _ = child.wait();
    let out = agent(None, "outside").output().expect("agent");
    assert!(!out.status.success());
    assert!(
        text(&out.stderr)
            .contains("not inside a batch allocation (neither SLURM_JOB_ID nor PBS_JOBID is set)"),
        "{}",
        text(&out.stderr)
    );
    let out = agent(Some("77"), "other").output().expect("agent");
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("`squeue --noheader --jobs 77 --format %L` failed")
            && text(&out.stderr).contains("no job"),
        "{}",
        text(&out.stderr)
    );
}

/// `--idle-timeout`: an agent exits once nothing has run on its node for that long (so a batch
/// allocation holding it ends with the work), never while a task runs, however long the task.
#[test]
fn an_idle_agent_exits_after_its_idle_timeout_and_never_while_a_task_runs() {
    let mut c = Cluster::start("idle-timeout", false);
    // Submitted first: the agent finds the work at once, and each task outlasts the timeout.
    c.ok(&["submit", "--tasks", "2", "--", "sleep", "2"]);
    let start = std::time::Instant::now();
    c.start_agent("a", 1, &["--idle-timeout", "1s"]);
    assert_eq!(c.agent_exit("a", Duration::from_secs(30)), Some(0));
    let took = start.elapsed();
    assert_eq!(c.succeeded(1), 2, "both tasks ran to their end");
    assert!(
        took >= Duration::from_secs(5),
        "two 2 s tasks one after the other, then 1 s idle: {took:?}"
    );
    assert!(c.agent_log("a").contains("idle for the idle timeout"));
}

/// An `[[allocation]]` queue `name` on the stand-in Slurm in `dir` ([`fake_slurm`]):
/// 10-minute allocations, looked at every second, agents of `cores` cores (each with a log
/// listener of its own), and the `extra` lines.
pub(crate) fn slurm_queue(dir: &std::path::Path, name: &str, cores: u32, extra: &str) -> String {
    format!(
        "[[allocation]]\nname = \"{name}\"\nmanager = \"slurm\"\ntime_limit = \"10m\"\n\
         refresh = \"1s\"\n{extra}\
         agent_args = [\"--cores\", \"{cores}\", \"--log-listen\", \"127.0.0.1:0\"]\n\
         sbatch = \"{0}/sbatch\"\nsqueue = \"{0}/squeue\"\n",
        dir.display()
    )
}

/// Writes each `(name, text)` as an executable script in `dir`.
fn install(dir: &std::path::Path, scripts: &[(&str, &str)]) {
    use std::os::unix::fs::PermissionsExt;
    for (name, text) in scripts {
        let p = dir.join(name);
        std::fs::write(&p, text).expect("write");
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    }
}

/// An agent that exits on purpose (its idle timeout, its time limit, a signal) says so in its
/// last heartbeat: its node is listed as left, with why, and only by `hetsched nodes --all` (not
/// as dead, which needs an operator); a restarted server still knows it left; an agent
/// registering under that name again makes it a live node.
#[test]
fn agents_that_leave_on_purpose_are_listed_as_left_and_only_with_all() {
    let mut c = Cluster::start("leave", false);
    c.start_agent("idle", 1, &["--idle-timeout", "1s"]);
    c.start_agent("limited", 1, &["--time-limit", "3s", "--kill-grace", "1s"]);
    c.start_agent("stopped", 1, &[]);
    c.wait_for_nodes(3);
    c.signal_agent("stopped", "TERM");
    for name in ["idle", "limited", "stopped"] {
        assert_eq!(
            c.agent_exit(name, Duration::from_secs(20)),
            Some(0),
            "{name}"
        );
    }
    // Well within the dead timeout (10 s): the server knew at once.
    let listed = c.json(&["nodes"]);
    assert_eq!(listed.as_array().map(Vec::len), Some(0), "{listed}");
    let left = |c: &Cluster| -> Vec<(String, String)> {
        let mut l: Vec<(String, String)> = c
            .json(&["nodes", "--all"])
            .as_array()
            .expect("nodes")
            .iter()
            .map(|n| {
                assert_eq!(n["alive"], false, "{n}");
                (
                    n["name"].as_str().unwrap_or("").to_string(),
                    n["left"].as_str().unwrap_or("").to_string(),
                )
            })
            .collect();
        l.sort();
        l
    };
    let expected: Vec<(String, String)> = [
        ("idle", "idle-timeout"),
        ("limited", "time-limit"),
        ("stopped", "signal"),
    ]
    .iter()
    .map(|(a, b)| (a.to_string(), b.to_string()))
    .collect();
    assert_eq!(left(&c), expected);
    let table = text(&c.cli(&["nodes", "--all"]).stdout);
    assert!(
        table.contains("left (idle-timeout)") && !table.contains("DEAD"),
        "{table}"
    );
    // When each was last heard (Unix ms), which a restart keeps: not `null`, not the restart.
    let heard = |c: &Cluster| -> Vec<(String, u64)> {
        let mut l: Vec<(String, u64)> = c
            .json(&["nodes", "--all"])
            .as_array()
            .expect("nodes")
            .iter()
            .map(|n| {
                let ms = n["last_heard_ms"].as_u64().unwrap_or(0);
                assert!(ms > 0, "{n}");
                (n["name"].as_str().unwrap_or("").to_string(), ms)
            })
            .collect();
        l.sort();
        l
    };
    let before = heard(&c);
    c.kill_server();
    c.start_server();
    assert_eq!(left(&c), expected, "a restarted server still knows");
    assert_eq!(heard(&c), before, "and when it last heard from each");
    let table = text(&c.cli(&["nodes", "--all"]).stdout);
    assert!(
        table.lines().filter(|l| l.contains("left (")).count() == 3
            && table
                .lines()
                .filter(|l| l.contains("left ("))
                .all(|l| l.contains(" ago")),
        "each row says how long ago: {table}"
    );
    c.start_agent("idle", 1, &[]);
    c.wait_for_nodes(1);
    let listed = c.json(&["nodes"]);
    assert_eq!(listed[0]["name"], "idle", "{listed}");
    assert_eq!(listed[0]["alive"], true);
    assert_eq!(listed[0]["left"], "", "registered again: {listed}");
}

/// A stand-in for Slurm, enough for automatic allocation: `sbatch` runs the script here in the
/// background (as job 101, 102, …, with this directory first on its PATH and its own TMPDIR),
/// or with `--test-only` says when it would start it (refusing `--partition=nope`), `squeue`
/// lists the jobs still running by name and tells a job its time left (9 minutes), and `srun`
/// runs its command once, here.
pub(crate) fn fake_slurm(dir: &std::path::Path) {
    std::fs::create_dir_all(dir.join("tmp")).expect("dir");
    let scripts = [
        (
            "sbatch",
            r#"#!/bin/sh
D=$(cd "$(dirname "$0")" && pwd)
if [ "$1" = "--test-only" ]; then
  grep -q '^#SBATCH --partition=nope$' "$2" && { echo 'sbatch: error: invalid partition specified: nope' >&2; exit 1; }
  echo "sbatch: Job 555 to start at 2026-11-29T04:00:00 using 1 processors on nodes here in partition debug" >&2
  exit 0
fi
[ "$1" = "--parsable" ] || { echo "expected --parsable: $*" >&2; exit 2; }
n=$(( $(cat "$D/next" 2>/dev/null || echo 100) + 1 )); echo $n > "$D/next"
sed -n 's/^#SBATCH --job-name=//p' "$2" > "$D/job-$n.name"
out=$(sed -n 's/^#SBATCH --output=//p' "$2" | sed "s/%j/$n/")
cp "$2" "$D/job-$n.sh"
PATH="$D:$PATH" TMPDIR="$D/tmp" SLURM_JOB_ID=$n sh "$D/job-$n.sh" > "$out" 2>&1 < /dev/null &
echo $! > "$D/job-$n.pid"
echo "$n"
"#,
        ),
        (
            "squeue",
            r#"#!/bin/sh
D=$(cd "$(dirname "$0")" && pwd)
if [ "$1 $2 $4 $5" = "--noheader --jobs --format %L" ]; then echo "9:00"; exit 0; fi
if [ "$1 $2 $4 $5" = "--noheader --name --format %i|%T" ]; then
  for f in "$D"/job-*.name; do
    [ -e "$f" ] || continue
    n=${f##*/job-}; n=${n%.name}
    [ "$(cat "$f")" = "$3" ] && kill -0 "$(cat "$D/job-$n.pid")" 2>/dev/null && echo "$n|RUNNING"
  done
  exit 0
fi
echo "unexpected: $*" >&2; exit 1
"#,
        ),
        (
            "srun",
            "#!/bin/sh\nwhile [ \"${1#--}\" != \"$1\" ]; do shift; done\nexec \"$@\"\n",
        ),
    ];
    install(dir, &scripts);
}

/// Automatic allocation (`[[allocation]]`): with batch work waiting and no agent, the server
/// submits an allocation (a stand-in Slurm here), whose agent runs the work, knows its time left
/// from `squeue`, and exits once idle; the queue never holds more than `max_allocations`, and
/// nothing is submitted while nothing waits. `hetsched allocations` lists them.
#[test]
fn the_server_allocates_agents_from_slurm_while_work_waits_and_they_leave_with_it() {
    let dir = support::temp_dir("alloc-slurm-bin");
    fake_slurm(&dir);
    let config = slurm_queue(
        &dir,
        "local",
        1,
        "max_allocations = 2\nbacklog = 1\nidle_timeout = \"2s\"\n",
    );
    let c = Cluster::start_configured("alloc-slurm", true, &config);
    // Nothing waits: nothing is submitted.
    std::thread::sleep(Duration::from_millis(2500));
    assert!(!dir.join("next").exists(), "no allocation without work");
    let listed = c.json(&["allocations"]);
    assert_eq!(listed[0]["name"], "local", "{listed}");
    // Six one-second tasks and no agent: allocations come, at most two, and run them.
    c.ok(&["submit", "--tasks", "6", "--", "sleep", "1"]);
    c.ok(&["wait", "1", "--timeout", "60s"]);
    let submitted = std::fs::read_to_string(dir.join("next"))
        .expect("allocations were submitted")
        .trim()
        .parse::<u32>()
        .expect("a count")
        - 100;
    assert!((1..=2).contains(&submitted), "{submitted} allocations");
    let nodes: Vec<String> = c
        .tasks(1)
        .iter()
        .filter_map(|t| t["node"].as_str().map(str::to_string))
        .collect();
    assert!(
        nodes
            .iter()
            .all(|n| n.ends_with("-101") || n.ends_with("-102")),
        "each task ran on an allocation's agent: {nodes:?}"
    );
    // Each agent knew its allocation's time left: 9 minutes, less a minute and its kill grace.
    let log =
        std::fs::read_to_string(c.data().join("allocations/local/101.out")).unwrap_or_default();
    assert!(log.contains("time_limit=8m"), "{log}");
    // Idle for 2 s, the agents leave, and with nothing waiting no allocation follows.
    wait_until("the allocations to end", Duration::from_secs(30), || {
        c.json(&["allocations"])[0]["allocations"]
            .as_array()
            .is_some_and(Vec::is_empty)
    });
    std::thread::sleep(Duration::from_millis(2500));
    let after = std::fs::read_to_string(dir.join("next")).unwrap_or_default();
    assert_eq!(after.trim().parse::<u32>().ok(), Some(100 + submitted));
    let table = c.ok(&["allocations"]);
    assert!(
        table.contains(
            "local: slurm, 1 node for 10m 0s per allocation, at most 2 at once, at most 1 of \
             them waiting, agents of 1 core and "
        ) && table.contains(&format!("; {submitted} submitted since the server started")),
        "{table}"
    );
    let (_, _, api) = c.http_get("/api/allocations");
    let api: serde_json::Value = serde_json::from_str(&api).expect("JSON");
    assert_eq!(api[0]["name"], "local", "the dashboard's view: {api}");
    assert_eq!(api[0]["submitted"], u64::from(submitted));
    let (_, _, metrics) = c.http_get("/metrics");
    assert!(
        metrics.contains(&format!(
            "hetsched_allocations_submitted{{queue=\"local\"}} {submitted}"
        )) && metrics.contains("hetsched_allocation_queue_failing{queue=\"local\"} 0"),
        "{metrics}"
    );
}

/// A stand-in for PBS, enough for automatic allocation: `qsub` runs the script here in the
/// background (as job `101.fake`, `102.fake`, …; with `-h`, held: it only takes the number),
/// `qdel` notes the job in `deleted`, `qselect -N NAME [-s RE]` lists the jobs still running by
/// name, `qstat -f` tells a job its walltime (10 minutes, one used), `pbsdsh` starts its command
/// twice, as hosts `h1` and `h2` (a stand-in `hostname` says which).
fn fake_pbs(dir: &std::path::Path) {
    std::fs::create_dir_all(dir.join("tmp")).expect("dir");
    let scripts = [
        (
            "qsub",
            r#"#!/bin/sh
D=$(cd "$(dirname "$0")" && pwd)
n=$(( $(cat "$D/next" 2>/dev/null || echo 100) + 1 )); echo $n > "$D/next"
if [ "$1" = -h ]; then cp "$2" "$D/held-$n.sh"; echo "$n.fake"; exit 0; fi
sed -n 's/^#PBS -N //p' "$1" > "$D/job-$n.name"
cp "$1" "$D/job-$n.sh"
PATH="$D:$PATH" TMPDIR="$D/tmp" PBS_JOBID=$n.fake sh "$D/job-$n.sh" > /dev/null 2>&1 < /dev/null &
echo $! > "$D/job-$n.pid"
echo "$n.fake"
"#,
        ),
        (
            "qselect",
            r#"#!/bin/sh
D=$(cd "$(dirname "$0")" && pwd)
[ "$1" = "-N" ] || { echo "unexpected: $*" >&2; exit 1; }
[ $# = 2 ] || [ "$3 $4" = "-s RE" ] || { echo "unexpected: $*" >&2; exit 1; }
for f in "$D"/job-*.name; do
  [ -e "$f" ] || continue
  n=${f##*/job-}; n=${n%.name}
  [ "$(cat "$f")" = "$2" ] && kill -0 "$(cat "$D/job-$n.pid")" 2>/dev/null && echo "$n.fake"
done
exit 0
"#,
        ),
        (
            "qstat",
            "#!/bin/sh
[ \"$1\" = -f ] || exit 1
printf 'Job Id: %s\\n    resources_used.walltime = 00:01:00\\n    \
             Resource_List.walltime = 00:10:00\\n' \"$2\"\n",
        ),
        (
            "pbsdsh",
            "#!/bin/sh\n[ \"$1\" = -- ] && shift\nFAKE_HOST=h1 \"$@\" &\nFAKE_HOST=h2 \"$@\" &\nwait\n",
        ),
        ("hostname", "#!/bin/sh\necho \"${FAKE_HOST:-here}\"\n"),
        (
            "qdel",
            "#!/bin/sh\necho \"$1\" >> \"$(dirname \"$0\")/deleted\"\n",
        ),
    ];
    install(dir, &scripts);
}

/// `manager = "pbs"`: the same as with Slurm, through `qsub` and `qselect`; an allocation of two
/// nodes starts an agent on each (`pbsdsh`), named after its host and the job, and each knows
/// its time left from `qstat`.
#[test]
fn the_server_allocates_agents_from_pbs_one_per_node_of_each_allocation() {
    let dir = support::temp_dir("alloc-pbs-bin");
    fake_pbs(&dir);
    let config = format!(
        "[[allocation]]\nname = \"pq\"\nmanager = \"pbs\"\ntime_limit = \"10m\"\nnodes = 2\n\
         idle_timeout = \"2s\"\nrefresh = \"1s\"\nargs = [\"-q workq\"]\n\
         agent_args = [\"--cores\", \"1\", \"--log-listen\", \"127.0.0.1:0\"]\n\
         qsub = \"{0}/qsub\"\nqselect = \"{0}/qselect\"\n",
        dir.display()
    );
    let c = Cluster::start_configured("alloc-pbs", false, &config);
    c.ok(&["submit", "--tasks", "6", "--", "sleep", "1"]);
    c.ok(&["wait", "1", "--timeout", "60s"]);
    assert_eq!(
        std::fs::read_to_string(dir.join("next"))
            .unwrap_or_default()
            .trim(),
        "101",
        "one allocation: a backlog of 1, and its two agents came before a second look"
    );
    let mut nodes: Vec<String> = c
        .tasks(1)
        .iter()
        .filter_map(|t| t["node"].as_str().map(str::to_string))
        .collect();
    nodes.sort();
    nodes.dedup();
    assert_eq!(
        nodes,
        ["h1-101.fake", "h2-101.fake"],
        "an agent on each node"
    );
    let script = std::fs::read_to_string(dir.join("job-101.sh")).expect("script");
    assert!(script.contains("#PBS -l select=2\n") && script.contains("#PBS -q workq\n"));
    let log =
        std::fs::read_to_string(c.data().join("allocations/pq/101.fake.out")).unwrap_or_default();
    assert!(
        log.matches("time_limit=8m").count() == 2,
        "both agents knew the allocation's time left: {log}"
    );
    wait_until("the allocation to end", Duration::from_secs(30), || {
        c.json(&["allocations"])[0]["allocations"]
            .as_array()
            .is_some_and(Vec::is_empty)
    });
    let table = c.ok(&["allocations"]);
    assert!(
        table.contains("pq: pbs, 2 nodes for 10m 0s per allocation"),
        "{table}"
    );
}

/// A queue submits as many allocations as the waiting work needs, not its whole backlog: one
/// for a single task (one core per node assumed before any agent registered), then, knowing its
/// agents have two cores, two for four more cores than are free, and none for tasks larger than
/// its agents. `hetsched allocations` names each allocation's agents and what they have.
#[test]
fn a_queue_submits_only_the_allocations_the_waiting_cores_need() {
    let dir = support::temp_dir("alloc-size-bin");
    fake_slurm(&dir);
    let config = slurm_queue(
        &dir,
        "q",
        2,
        "max_allocations = 5\nbacklog = 5\nidle_timeout = \"20s\"\n",
    );
    let c = Cluster::start_configured("alloc-size", false, &config);
    let count = || {
        std::fs::read_to_string(dir.join("next"))
            .unwrap_or_default()
            .trim()
            .parse::<u32>()
            .map_or(0, |n| n - 100)
    };
    c.ok(&["submit", "--", "true"]);
    c.ok(&["wait", "1", "--timeout", "60s"]);
    assert_eq!(
        count(),
        1,
        "one task: one allocation, not a backlog of five"
    );
    let agents = c.json(&["allocations"])[0]["allocations"][0]["agents"].clone();
    assert!(
        agents.as_array().is_some_and(|a| a.len() == 1)
            && agents[0].as_str().is_some_and(|n| n.ends_with("-101")),
        "the allocation's agent: {agents}"
    );
    // Six 2-second tasks; the first agent's two cores are free: four cores short, two 2-core
    // allocations.
    c.ok(&["submit", "--tasks", "6", "--", "sleep", "2"]);
    c.ok(&["wait", "2", "--timeout", "60s"]);
    assert_eq!(count(), 3, "two more allocations");
    let mut nodes: Vec<String> = c
        .tasks(2)
        .iter()
        .filter_map(|t| t["node"].as_str().map(str::to_string))
        .collect();
    nodes.sort();
    nodes.dedup();
    assert_eq!(
        nodes.len(),
        3,
        "all three allocations' agents ran tasks: {nodes:?}"
    );
    let table = c.ok(&["allocations"]);
    assert!(table.contains("agents"), "{table}");
    assert!(table.contains(", agents of 2 cores and "), "{table}");
    // Tasks of 4 cores: the queue's agents have 2, so allocating more of them would not help
    // (they would idle out and be allocated again, without end): none is submitted, and the
    // job says no node can run it.
    c.ok(&["submit", "--cores", "4", "--tasks", "2", "--", "true"]);
    std::thread::sleep(Duration::from_millis(2500));
    assert_eq!(count(), 3, "no allocation for work its agents cannot run");
    let job = c.json(&["job", "3"]);
    let reason = job["pending_reason"].as_str().unwrap_or("");
    assert!(
        reason.starts_with("no live node can run") && !reason.contains("allocation"),
        "{job}"
    );
}

/// `hetsched allocations --check` asks the batch system whether it would take each queue's
/// allocation without running one (`sbatch --test-only`): a wrong partition shows at once, the
/// command fails, and nothing is submitted.
#[test]
fn allocations_check_asks_slurm_without_running_anything() {
    let dir = support::temp_dir("alloc-check-bin");
    fake_slurm(&dir);
    let queue = |name: &str, partition: &str| {
        slurm_queue(
            &dir,
            name,
            1,
            &format!("args = [\"--partition={partition}\"]\n"),
        )
    };
    let config = queue("good", "debug") + &queue("bad", "nope");
    let c = Cluster::start_configured("alloc-check", false, &config);
    let out = c.cli(&["allocations", "--check"]);
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(!out.status.success(), "a queue failed: {stdout}");
    assert!(
        stdout.contains("good: ok: sbatch: Job 555 to start at 2026-11-29T04:00:00"),
        "{stdout}"
    );
    assert!(
        stdout.contains("bad: FAILED:") && stdout.contains("invalid partition specified: nope"),
        "{stdout}"
    );
    assert!(
        stderr.contains("would not take an allocation of bad"),
        "{stderr}"
    );
    c.ok(&["allocations", "--check", "--queue", "good"]);
    let checks = c.json(&["allocations", "--check", "--queue", "good"]);
    assert_eq!(checks[0]["ok"], true, "{checks}");
    assert!(
        checks[0]["script"]
            .as_str()
            .is_some_and(|s| s.contains("#SBATCH --job-name=hetsched-check-good\n")
                && s.contains("#SBATCH --partition=debug\n")),
        "the queue's own script, under another name: {checks}"
    );
    c.refused(
        &["allocations", "--check", "--queue", "nosuch"],
        "no allocation queue `nosuch`: the server's queues are good, bad",
    );
    assert!(!dir.join("next").exists(), "nothing was submitted");
}

/// With PBS, which has no test-only submission, the check submits the allocation held and
/// deletes it at once.
#[test]
fn allocations_check_with_pbs_submits_held_and_deletes() {
    let dir = support::temp_dir("alloc-check-pbs-bin");
    fake_pbs(&dir);
    let config = format!(
        "[[allocation]]\nname = \"pq\"\nmanager = \"pbs\"\ntime_limit = \"10m\"\n\
         qsub = \"{0}/qsub\"\nqselect = \"{0}/qselect\"\nqdel = \"{0}/qdel\"\n",
        dir.display()
    );
    let c = Cluster::start_configured("alloc-check-pbs", false, &config);
    let out = c.ok(&["allocations", "--check"]);
    assert!(
        out.contains(
            "pq: ok: PBS took the allocation as job 101.fake (submitted held, and deleted)"
        ),
        "{out}"
    );
    assert_eq!(
        std::fs::read_to_string(dir.join("deleted")).unwrap_or_default(),
        "101.fake\n"
    );
    let held = std::fs::read_to_string(dir.join("held-101.sh")).expect("submitted held");
    assert!(held.contains("#PBS -N hetsched-check-pq\n"), "{held}");
    assert!(
        c.json(&["allocations"])[0]["allocations"]
            .as_array()
            .is_some_and(Vec::is_empty),
        "the check is no allocation of the queue"
    );
}

/// `hetsched allocations --pause QUEUE`: the queue submits nothing while work waits (the job
/// says why, and is blocked: it needs an operator), even after a server restart, until
/// `--resume QUEUE`.
#[test]
fn a_paused_queue_submits_nothing_until_resumed_even_across_a_restart() {
    let dir = support::temp_dir("alloc-pause-bin");
    fake_slurm(&dir);
    let config = slurm_queue(&dir, "q", 1, "idle_timeout = \"2s\"\n");
    let mut c = Cluster::start_configured("alloc-pause", true, &config);
    let out = c.ok(&["allocations", "--pause", "q"]);
    assert!(out.contains("queue `q` paused"), "{out}");
    c.refused(
        &["allocations", "--pause", "nosuch"],
        "no allocation queue `nosuch`: the server's queues are q",
    );
    c.ok(&["submit", "--", "true"]);
    std::thread::sleep(Duration::from_millis(2500));
    assert!(!dir.join("next").exists(), "a paused queue submits nothing");
    let job = c.json(&["job", "1"]);
    assert!(
        job["pending_reason"]
            .as_str()
            .is_some_and(|r| r.contains("queue `q`, whose agents could, is paused")
                && r.contains("hetsched allocations --resume q")),
        "{job}"
    );
    let blocked = c.json(&["jobs", "--state", "blocked"]);
    assert_eq!(blocked[0]["id"], 1, "it needs an operator: {blocked}");
    assert_eq!(c.json(&["allocations"])[0]["paused"], true);
    let table = c.ok(&["allocations"]);
    assert!(
        table.contains("q (paused: `hetsched allocations --resume` it): slurm"),
        "{table}"
    );
    let (_, _, metrics) = c.http_get("/metrics");
    assert!(
        metrics.contains("hetsched_allocation_queue_paused{queue=\"q\"} 1"),
        "{metrics}"
    );
    c.kill_server();
    c.start_server();
    std::thread::sleep(Duration::from_millis(2500));
    assert!(!dir.join("next").exists(), "still paused after a restart");
    assert_eq!(c.json(&["allocations"])[0]["paused"], true);
    let out = c.ok(&["allocations", "--resume", "q"]);
    assert!(out.contains("queue `q` resumed"), "{out}");
    c.ok(&["wait", "1", "--timeout", "60s"]);
    assert!(dir.join("next").exists(), "resumed: it allocated");
}

/// Two queues: one whose agents offer `bigmem`, one plain. Work that requires `bigmem` brings
/// allocations from the first only, whose agents are given the attribute and run it.
#[test]
fn only_a_queue_whose_agents_offer_what_the_work_requires_allocates_for_it() {
    let dir = support::temp_dir("alloc-queues-bin");
    fake_slurm(&dir);
    let queue = |name: &str, extra: &str| {
        slurm_queue(&dir, name, 1, &format!("idle_timeout = \"1s\"\n{extra}"))
    };
    let config = queue("plain", "") + &queue("fat", "attributes = [\"bigmem\"]\n");
    let c = Cluster::start_configured("alloc-queues", false, &config);
    c.ok(&[
        "submit",
        "--requires",
        "bigmem",
        "--tasks",
        "2",
        "--",
        "true",
    ]);
    c.ok(&["wait", "1", "--timeout", "60s"]);
    let names: Vec<String> = std::fs::read_dir(&dir)
        .expect("dir")
        .filter_map(|e| {
            let p = e.ok()?.path();
            (p.extension()? == "name").then(|| std::fs::read_to_string(p).ok())?
        })
        .collect();
    assert!(!names.is_empty());
    assert!(
        names.iter().all(|n| n.starts_with("hetsched-fat-")),
        "only the bigmem queue allocated: {names:?}"
    );
    let listed = c.json(&["allocations"]);
    assert_eq!(listed[0]["name"], "plain");
    assert_eq!(listed[0]["submitted"], 0, "{listed}");
}

/// An idle agent whose server went away (an allocation outliving its server, say) still ends at
/// its idle timeout, instead of retrying until its allocation is killed.
#[test]
fn an_idle_agent_ends_at_its_idle_timeout_while_the_server_is_away() {
    let mut c = Cluster::start("idle-no-server", false);
    c.start_agent("a", 1, &["--idle-timeout", "3s"]);
    c.wait_for_nodes(1);
    c.kill_server();
    assert_eq!(c.agent_exit("a", Duration::from_secs(20)), Some(0));
    let log = c.agent_log("a");
    assert!(log.contains("idle for the idle timeout"), "{log}");
    assert!(log.contains("nothing left to report"), "{log}");
}

/// A restarted server lists the allocations it submitted before from the batch system (nothing
/// is stored): they still count toward `max_allocations`, so it submits no more.
#[test]
fn a_restarted_server_finds_its_allocations_in_the_batch_system() {
    let dir = support::temp_dir("alloc-restart-bin");
    fake_slurm(&dir);
    let config = slurm_queue(&dir, "q", 1, "idle_timeout = \"2s\"\n");
    let mut c = Cluster::start_configured("alloc-restart", false, &config);
    // More work than one 1-core agent runs at once: demand stays while it runs.
    c.ok(&["submit", "--tasks", "4", "--", "sleep", "2"]);
    wait_until("a task running", Duration::from_secs(30), || {
        c.tasks(1).iter().any(|t| t["state"] == "running")
    });
    c.kill_server();
    c.start_server();
    wait_until(
        "the allocation listed again",
        Duration::from_secs(10),
        || c.json(&["allocations"])[0]["allocations"][0]["id"] == "101",
    );
    c.ok(&["wait", "1", "--timeout", "60s"]);
    assert_eq!(
        std::fs::read_to_string(dir.join("next"))
            .expect("count")
            .trim(),
        "101",
        "one allocation, before and after the restart"
    );
}

/// `--drain` waits for the running tasks, but not past the agent's time limit: its allocation
/// ends then, so the tasks are stopped and handed back.
#[test]
fn a_draining_agent_still_stops_its_tasks_at_its_time_limit() {
    let mut c = Cluster::start("drain-limit", false);
    c.start_agent(
        "a",
        1,
        &["--drain", "--time-limit", "8s", "--kill-grace", "1s"],
    );
    c.wait_for_nodes(1);
    c.ok(&["submit", "--", "sleep", "60"]);
    wait_until("the task runs", Duration::from_secs(10), || {
        c.tasks(1)[0]["state"] == "running"
    });
    c.signal_agent("a", "TERM");
    assert_eq!(c.agent_exit("a", Duration::from_secs(20)), Some(0));
    let log = c.agent_log("a");
    assert!(
        log.contains("waiting for the running tasks to end (--drain)"),
        "{log}"
    );
    assert!(
        log.contains("the time limit is one kill grace away"),
        "{log}"
    );
    assert_eq!(c.tasks(1)[0]["state"], "pending", "handed back, not failed");
}

/// A queue whose submissions fail (a wrong partition, say) is not retried at every look: the
/// wait doubles with each failure, and `hetsched allocations` and `/metrics` say why.
#[test]
fn failing_submissions_back_off_and_say_why() {
    let dir = support::temp_dir("alloc-failing-bin");
    fake_slurm(&dir);
    install(
        &dir,
        &[(
            "sbatch",
            "#!/bin/sh\necho x >> \"$(dirname \"$0\")/tries\"\n\
             echo 'sbatch: error: invalid partition specified: nope' >&2\nexit 1\n",
        )],
    );
    let config = slurm_queue(&dir, "q", 1, "args = [\"--partition=nope\"]\n");
    let c = Cluster::start_configured("alloc-failing", true, &config);
    c.ok(&["submit", "--", "true"]);
    std::thread::sleep(Duration::from_millis(7500));
    // Looked at every second for 7 s, but tried at about 0, 2 and 6 s (then waits 8 s).
    let tries = std::fs::read_to_string(dir.join("tries"))
        .unwrap_or_default()
        .lines()
        .count();
    assert!((2..=4).contains(&tries), "{tries} submissions in 7.5 s");
    let listed = c.json(&["allocations"]);
    let error = listed[0]["error"].as_str().unwrap_or("");
    assert!(
        error.contains("invalid partition specified: nope")
            && error.contains("submitting again in"),
        "{listed}"
    );
    let (_, _, metrics) = c.http_get("/metrics");
    assert!(
        metrics.contains("hetsched_allocation_queue_failing{queue=\"q\"} 1"),
        "{metrics}"
    );
    // The job says so, and is blocked: an operator must look at the queue.
    let job = c.json(&["job", "1"]);
    assert_eq!(
        job["pending_reason"],
        "no live node can run `true`, and queue `q`, whose agents could, fails to get \
         allocations (`hetsched allocations` says why)",
        "{job}"
    );
    assert_eq!(c.json(&["jobs", "--state", "blocked"])[0]["id"], 1);
}

/// `hetsched update`: a waiting job's priority, max_running and time limit change; the higher
/// priority job runs first, the agent stops a task at its new time limit, `hetsched job` shows the
/// new values, and refusals name their job.
#[test]
fn an_update_changes_a_waiting_jobs_priority_max_running_and_time_limit() {
    let mut c = Cluster::start("update", false);
    c.start_agent("a", 1, &[]);
    c.wait_for_nodes(1);
    // The only core is busy; two jobs wait, the later one raised above the earlier.
    c.ok(&["submit", "--app", "blocker", "--", "sleep", "30"]);
    wait_until("the blocker to run", Duration::from_secs(10), || {
        c.json(&["job", "1"])["counts"]["running"] == 1
    });
    c.ok(&["submit", "--app", "early", "--tasks", "2", "--", "true"]);
    c.ok(&["submit", "--app", "late", "--", "true"]);
    let said = c.ok(&["update", "last", "--priority", "5"]);
    assert_eq!(
        said,
        "job 3: `late` priority 5, no max_running, no time limit\n"
    );
    let said = c.json(&["update", "2", "--app", "early", "--max-running", "1"]);
    assert_eq!(
        said,
        serde_json::json!({"apps": [{"name": "early", "priority": 0, "max_running": 1,
            "cpu_time_limit_ms": 0, "gpu_time_limit_ms": 0, "cpu_cores": 1,
            "cpu_memory_bytes": 0, "gpu_cores": 0, "gpu_memory_bytes": 0, "gpus": 0,
            "requires": [], "running_kept": 0, "gpu_kind": ""}], "job_id": 2,
            "warning": null})
    );
    let shown = c.json(&["job", "2"]);
    assert_eq!(
        (
            &shown["apps"][0]["priority"],
            &shown["apps"][0]["max_running"]
        ),
        (&serde_json::json!(0), &serde_json::json!(1))
    );
    assert!(c.ok(&["job", "3"]).contains("priority"));
    c.refused(
        &["update", "2", "--app", "other", "--priority", "1"],
        "job 2 has no application `other` (it has: early)",
    );
    c.refused(
        &["update", "2"],
        "nothing to update: give --priority, --max-running, --time-limit, --cores, --memory, --gpus, --gpu-kind, --requires or --begin",
    );
    c.refused(
        &["update", "2", "--time-limit", "soon"],
        "invalid value 'soon' for '--time-limit <DURATION>'",
    );
    // The blocker ends: the raised job runs first.
    c.ok(&["cancel", "1"]);
    c.ok(&["wait", "2,3"]);
    let started = |job: &str| {
        c.json(&["tasks", "--job", job])
            .as_array()
            .expect("tasks")
            .iter()
            .map(|t| t["started_ns"].as_u64().expect("started"))
            .min()
            .expect("a task")
    };
    assert!(started("3") < started("2"), "the raised job started first");
    c.refused(
        &["update", "2", "--priority", "1"],
        "job 2 has ended (completed): nothing to update",
    );
    // A held job's hour becomes a second: its agent stops the task at the new limit.
    c.ok(&[
        "submit",
        "--hold",
        "--app",
        "long",
        "--time-limit",
        "1h",
        "--",
        "sleep",
        "30",
    ]);
    assert!(
        c.ok(&["job", "4"]).contains("1h 0m"),
        "the file's limit shows"
    );
    let said = c.ok(&["update", "4", "--time-limit", "1s"]);
    assert_eq!(
        said,
        "job 4: `long` priority 0, no max_running, time limit 1.0s\n"
    );
    assert_eq!(c.json(&["job", "4"])["apps"][0]["cpu_time_limit_ms"], 1000);
    c.ok(&["release", "4"]);
    c.cli(&["wait", "4", "--timeout", "20s"]);
    let task = &c.json(&["tasks", "--job", "4"])[0];
    assert_eq!(task["state"], "failed", "{task}");
    assert!(
        task["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("time limit of 1.000s exceeded")),
        "{task}"
    );
    // Stopped with SIGTERM by its agent: its time limit, not a signal of its own.
    assert_eq!(
        (&task["reason"], &task["signal"]),
        (&"time_limit".into(), &serde_json::Value::Null),
        "{task}"
    );
    // A running task takes a new limit too, counted from its start: its agent stops it.
    c.ok(&[
        "submit",
        "--app",
        "running",
        "--time-limit",
        "1h",
        "--",
        "sleep",
        "30",
    ]);
    wait_until("the task to run", Duration::from_secs(10), || {
        c.json(&["job", "5"])["counts"]["running"] == 1
    });
    c.ok(&["update", "5", "--time-limit", "1s"]);
    c.cli(&["wait", "5", "--timeout", "20s"]);
    let task = &c.json(&["tasks", "--job", "5"])[0];
    assert!(
        task["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("time limit of 1.000s exceeded")),
        "{task}"
    );
    assert_eq!(task["reason"], "time_limit", "{task}");
}

/// `hetsched update --cores --memory`: a job that asks for more than any node has waits
/// saying so; given what a node has, it runs, under the memory limit the update set (its agent
/// enforces it). A task already running keeps its cores until it ends, while the tasks still to
/// start take the new ones; `--requires` changes while one runs.
#[test]
fn an_update_of_cores_and_memory_lets_a_job_that_fits_nowhere_run_under_its_new_limit() {
    let mut c = Cluster::start("update-resources", false);
    let hold = r#"x=$(head -c 67108864 /dev/zero | tr "\0" a); sleep 30; : "$x""#;
    // Submitted before any agent registered (so accepted): 8 cores, on a 2-core agent.
    c.ok(&[
        "submit", "--app", "big", "--cores", "8", "--", "sh", "-c", hold,
    ]);
    c.start_agent("a", 2, &[]);
    c.wait_for_nodes(1);
    wait_until("job 1 to say why it waits", Duration::from_secs(10), || {
        c.json(&["job", "1"])["pending_reason"]
            .as_str()
            .is_some_and(|r| r.starts_with("no live node can run `big` (cpu: 8 cores"))
    });
    let said = c.ok(&["update", "1", "--cores", "2", "--memory", "16MiB"]);
    assert_eq!(
        said,
        "job 1: `big` priority 0, no max_running, no time limit, cpu 2 cores 16.0 MiB\n"
    );
    assert!(
        c.ok(&["job", "1"]).contains("2 cores, 16.0 MiB"),
        "the per-task column"
    );
    let app = &c.json(&["job", "1"])["apps"][0];
    assert_eq!(
        (&app["cpu_cores"], &app["cpu_memory_bytes"]),
        (&serde_json::json!(2), &serde_json::json!(16 << 20))
    );
    // It runs now, and holds 64 MiB: its agent stops it at the new 16 MiB.
    c.cli(&["wait", "1", "--timeout", "25s"]);
    let task = &c.tasks(1)[0];
    assert!(
        task["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("memory limit of 16.0 MiB exceeded")),
        "{task}"
    );
    assert_eq!(task["reason"], "memory_limit", "{task}");
    // A running task keeps what it was given; the tasks still to start take 1 core each, and
    // start two at once when it ends.
    c.ok(&[
        "submit", "--app", "nap", "--tasks", "3", "--cores", "2", "--", "sleep", "30",
    ]);
    wait_until("job 2 to run", Duration::from_secs(10), || {
        c.json(&["job", "2"])["counts"]["running"] == 1
    });
    let said = c.ok(&["update", "2", "--cores", "1"]);
    assert_eq!(
        said,
        "job 2: `nap` priority 0, no max_running, no time limit, cpu 1 core (1 running task \
         keeps what it was given)\n"
    );
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(
        c.json(&["job", "2"])["counts"]["running"],
        1,
        "the running task holds both cores"
    );
    c.ok(&["cancel", "2", "--tasks", "0"]);
    wait_until("two 1-core tasks to run", Duration::from_secs(10), || {
        c.json(&["job", "2"])["counts"]["running"] == 2
    });
    c.refused(
        &["update", "2", "--priority", "1", "--variant", "gpu"],
        "--variant names whose --cores, --memory or --gpus change",
    );
    c.refused(
        &["update", "2", "--memory", "lots"],
        "invalid value 'lots' for '--memory <SIZE>'",
    );
    c.refused(
        &["update", "2", "--cores", "0"],
        "invalid value '0' for '--cores <N>'",
    );
    // What its tasks require changes while one runs (it stays where it is).
    let said = c.ok(&["update", "2", "--requires", "ssd,bigmem"]);
    assert_eq!(
        said,
        "job 2: `nap` priority 0, no max_running, no time limit, requires bigmem + ssd\n"
    );
    assert_eq!(
        c.json(&["job", "2"])["apps"][0]["requires"],
        serde_json::json!(["bigmem", "ssd"])
    );
    // No task of it pending: nothing stranded, nothing said.
    let out = c.cli(&["update", "2", "--requires", "none"]);
    assert!(
        String::from_utf8_lossy(&out.stdout).ends_with("requires nothing\n")
            && out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(c.json(&["job", "2"])["counts"]["running"], 2);
    c.ok(&["cancel", "2"]);
    // An update no live node can meet is kept, but says so on stderr, as `submit` would; a
    // held job too (its pending reason is its hold). In JSON as `warning` (null when every
    // pending task can run somewhere).
    c.ok(&["submit", "--hold", "--app", "wide", "--", "true"]);
    let out = c.cli(&["update", "3", "--requires", "ssd,bigmem"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains(
            "warning: job 3 waits: no live node can run `wide` (cpu: 1 core; requires bigmem + ssd)"
        ),
        "{err}"
    );
    c.ok(&["update", "3", "--requires", "none"]);
    let said = c.json(&["update", "3", "--cores", "8"]);
    assert_eq!(
        said["warning"], "no live node can run `wide` (cpu: 8 cores)",
        "{said}"
    );
    assert_eq!(
        c.json(&["update", "3", "--cores", "1"])["warning"],
        serde_json::Value::Null
    );
    c.ok(&["cancel", "3"]);
}

/// `submit --exclude NODES` (Slurm's `--exclude`) keeps a job's tasks off those nodes, as the
/// requirement `!node:NAME`; `--requires node:NAME` runs them on that node only; `update
/// --requires` moves the tasks still to start; a requirement no node can meet is refused.
#[test]
fn excluded_nodes_run_none_of_a_jobs_tasks_and_a_node_name_picks_its_node() {
    let mut c = Cluster::start("exclude", false);
    c.start_agent("a", 2, &[]);
    c.start_agent("b", 2, &[]);
    c.wait_for_nodes(2);
    let nodes_of = |job: &str| -> Vec<String> {
        let tasks = c.json(&["tasks", "--job", job]);
        let mut n: Vec<String> = tasks
            .as_array()
            .expect("tasks")
            .iter()
            .map(|t| t["node"].as_str().unwrap_or("-").to_string())
            .collect();
        n.sort();
        n.dedup();
        n
    };
    c.ok(&[
        "submit",
        "--exclude",
        "a",
        "--tasks",
        "6",
        "--wait",
        "--",
        "true",
    ]);
    assert_eq!(nodes_of("1"), ["b"]);
    assert_eq!(
        c.json(&["job", "1"])["apps"][0]["requires"],
        serde_json::json!(["!node:a"])
    );
    c.ok(&[
        "submit",
        "--requires",
        "node:a",
        "--tasks",
        "6",
        "--wait",
        "--",
        "true",
    ]);
    assert_eq!(nodes_of("2"), ["a"]);
    // Held, moved onto b by an update, released: it runs there.
    c.ok(&[
        "submit",
        "--hold",
        "--exclude",
        "b",
        "--tasks",
        "4",
        "--",
        "true",
    ]);
    let said = c.ok(&["update", "3", "--requires", "!node:a"]);
    assert!(said.ends_with("requires !node:a\n"), "{said}");
    c.ok(&["release", "3"]);
    c.ok(&["wait", "3", "--timeout", "20s"]);
    assert_eq!(nodes_of("3"), ["b"]);
    c.refused(
        &["submit", "--exclude", "a,b", "--", "true"],
        "--exclude: application `true` requires !node:a + !node:b, and no node has them all",
    );
    // A node name no node has is refused as `node:NAME` is (Slurm refuses it): a typo would
    // exclude nothing; the refusal names the flag the requirement came from.
    c.refused(
        &["submit", "--hold", "--exclude", "zz9", "--", "true"],
        "--exclude: application `true` requires `!node:zz9`, and no node is named `zz9`",
    );
    c.refused(
        &["submit", "--requires", "node:a", "--exclude", "a", "--", "true"],
        "--requires/--exclude: application `true` requires !node:a + node:a, and no node has them all",
    );
    c.refused(
        &["submit", "--requires", "node:c", "--", "true"],
        "requires `node:c`, and no node is named `c`",
    );
    c.refused(
        &["submit", "--requires", "!", "--", "true"],
        "a requirement `!` must name what a node must lack",
    );
}

/// `hetsched nodes NODES --state STATE` (Slurm's `sinfo --nodes --states`): only the nodes named
/// (brackets as `node drain` takes them) and in the states asked; a name not listed is warned of.
#[test]
fn nodes_lists_only_the_nodes_named_and_in_the_states_asked() {
    let mut c = Cluster::start("nodes-filter", false);
    c.start_agent("n1", 1, &[]);
    c.start_agent("n2", 1, &[]);
    c.start_agent("n3", 1, &[]);
    c.wait_for_nodes(3);
    // (Listed in the order the agents registered, which is theirs: sorted here.)
    let names = |args: &[&str]| -> Vec<String> {
        let mut full = vec!["nodes"];
        full.extend_from_slice(args);
        let mut names: Vec<String> = c
            .json(&full)
            .as_array()
            .expect("nodes")
            .iter()
            .map(|n| n["name"].as_str().unwrap_or("").to_string())
            .collect();
        names.sort();
        names
    };
    c.ok(&["node", "drain", "n3", "--reason", "fan"]);
    c.ok(&["submit", "--requires", "node:n2", "--", "sleep", "30"]);
    wait_until("n2 to run its task", Duration::from_secs(10), || {
        names(&["--state", "busy"]) == ["n2"]
    });
    assert_eq!(names(&["--state", "idle"]), ["n1"]);
    assert_eq!(names(&["--state", "drained"]), ["n3"]);
    assert_eq!(names(&["--state", "idle,drained"]), ["n1", "n3"]);
    assert_eq!(names(&["n[1-2]"]), ["n1", "n2"]);
    assert_eq!(names(&["n[2-3]", "--state", "drained"]), ["n3"]);
    assert!(names(&["--state", "dead"]).is_empty());
    let out = c.cli(&["nodes", "n1,n9"]);
    let warned = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && warned.contains("warning: no node `n9`"),
        "{warned}"
    );
    c.refused(
        &["nodes", "--state", "asleep"],
        "invalid value 'asleep' for '--state <STATE>'",
    );
    c.ok(&["cancel", "1"]);
    // A drained node that dies is still drained (it comes back so): listed as both, and the
    // table says both.
    c.kill_agent("n3");
    let named = |state: &str| -> Vec<String> {
        c.json(&["nodes", "--state", state])
            .as_array()
            .expect("nodes")
            .iter()
            .map(|n| n["name"].as_str().unwrap_or("").to_string())
            .collect()
    };
    wait_until("n3 to be declared dead", Duration::from_secs(15), || {
        named("dead") == ["n3"]
    });
    assert_eq!(named("drained"), ["n3"]);
    let table = c.ok(&["nodes", "n3"]);
    assert!(table.contains("DEAD, drained: fan"), "{table}");
}

/// `#HETSCHED` lines (`sbatch`'s `#SBATCH`): a script submitted as the command brings its own
/// flags, typed flags win, a mistake names its line, and `--directives off` reads nothing.
#[test]
fn a_scripts_hetsched_lines_are_its_submit_flags_and_typed_flags_win() {
    use std::os::unix::fs::PermissionsExt;
    let mut c = Cluster::start("directives", false);
    c.start_agent("a", 2, &[]);
    c.wait_for_nodes(1);
    let write = |name: &str, text: &str| {
        let path = c.dir.join(name);
        std::fs::write(&path, text).expect("script");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        path.to_string_lossy().to_string()
    };
    let sweep = write(
        "sweep.sh",
        "#!/bin/sh\n#HETSCHED --tasks 5 --name sweep\n#HETSCHED --env 'GREETING=hello there' --app greet\n\
         echo \"$GREETING\" > out-$HETSCHED_TASK_INDEX\n",
    );
    c.ok(&["submit", "--tasks", "2", "--wait", "--", &sweep]);
    let job = c.json(&["job", "1"]);
    assert_eq!(
        (&job["name"], &job["tasks"], &job["apps"][0]["name"]),
        (
            &serde_json::json!("sweep"),
            &serde_json::json!(2),
            &serde_json::json!("greet")
        ),
        "{job}"
    );
    for i in 0..2 {
        let out = std::fs::read_to_string(c.dir.join(format!("out-{i}"))).expect("output");
        assert_eq!(out, "hello there\n");
    }
    assert!(
        !c.dir.join("out-2").exists(),
        "--tasks 2 typed wins over the script's 5"
    );
    let bad = write("bad.sh", "#!/bin/sh\n#HETSCHED --coress 2\ntrue\n");
    c.refused(
        &["submit", "--", &bad],
        &format!("{bad}:2: #HETSCHED: unexpected argument '--coress'"),
    );
    c.ok(&["submit", "--directives", "off", "--wait", "--", &bad]);
}

/// `hetsched user add NAME --save FILE` gives a user a token of its own (a new 0600 file); the
/// user's jobs are its own: another user sees them (`jobs` gets a `user` column) but cannot
/// change them, and a job name in a user's selection picks among its own jobs only. A removed
/// user's token is refused at its next call.
#[test]
fn users_get_tokens_of_their_own_and_change_only_their_own_jobs() {
    use std::os::unix::fs::MetadataExt;
    let mut c = Cluster::start("users", false);
    c.start_agent("a", 2, &[]);
    c.wait_for_nodes(1);
    let (alice, bob) = (c.dir.join("alice.token"), c.dir.join("bob.token"));
    let said = c.ok(&[
        "user",
        "add",
        "alice",
        "--save",
        alice.to_str().expect("path"),
    ]);
    assert!(said.contains("user alice added"), "{said}");
    assert_eq!(
        std::fs::metadata(&alice).expect("token file").mode() & 0o777,
        0o600
    );
    c.refused(
        &[
            "user",
            "add",
            "carol",
            "--save",
            alice.to_str().expect("path"),
        ],
        "it must not exist",
    );
    // A call that fails before or at the server leaves no empty token file behind, which the
    // next `--save` to that path would refuse as existing.
    let dave = c.dir.join("dave.token");
    let out = c
        .command(&[
            "user",
            "add",
            "dave",
            "--save",
            dave.to_str().expect("path"),
        ])
        .env("HETSCHED_TOKEN_FILE", c.dir.join("no-such-token"))
        .output()
        .expect("run hetsched");
    assert!(!out.status.success(), "no admin token");
    assert!(!dave.exists(), "no file left: {}", text(&out.stderr));
    c.refused(
        &[
            "user",
            "add",
            "alice",
            "--save",
            dave.to_str().expect("path"),
        ],
        "alice",
    );
    assert!(!dave.exists(), "no file left after a refusal");
    c.ok(&["user", "add", "bob", "--save", bob.to_str().expect("path")]);
    let as_user = |token: &std::path::Path, args: &[&str]| {
        c.command(args)
            .env("HETSCHED_TOKEN_FILE", token)
            .output()
            .expect("run hetsched")
    };
    let ok = |token: &std::path::Path, args: &[&str]| {
        let out = as_user(token, args);
        assert!(out.status.success(), "{args:?}: {}", text(&out.stderr));
        text(&out.stdout)
    };
    let refused = |token: &std::path::Path, args: &[&str], says: &str| {
        let out = as_user(token, args);
        let err = text(&out.stderr);
        assert!(
            !out.status.success() && err.contains(says),
            "{args:?}: {err}"
        );
    };
    assert_eq!(ok(&alice, &["user", "whoami"]).trim(), "alice");
    // Without --token-file or HETSCHED_TOKEN_FILE (and no hetsched-data here), a user's own
    // token is read from ~/.config/hetsched/token.
    let home = c.dir.join("home-alice");
    std::fs::create_dir_all(home.join(".config/hetsched")).expect("config dir");
    std::fs::copy(&alice, home.join(".config/hetsched/token")).expect("token");
    let out = c
        .command(&["user", "whoami"])
        .env_remove("HETSCHED_TOKEN_FILE")
        .env_remove("XDG_CONFIG_HOME")
        .env("HOME", &home)
        .current_dir(&home)
        .output()
        .expect("run hetsched");
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout).trim(), "alice");
    let d = c.dir.display().to_string();
    // Each submits a held job named `nightly` that leaves a file named after its user.
    for (token, who) in [(&alice, "alice"), (&bob, "bob")] {
        let mark = format!("echo > {d}/{who}");
        let args = ["submit", "--hold", "--name", "nightly", "--", "sh", "-c"];
        ok(token, &[&args[..], &[mark.as_str()]].concat());
    }

    let table = ok(&bob, &["jobs"]);
    assert!(table.contains("user") && table.contains("alice"), "{table}");
    refused(
        &bob,
        &["cancel", "1"],
        "job 1 belongs to alice: only alice or the admin may cancel it",
    );
    // Bob's `nightly` is his own job 2, not Alice's job 1 of the same name.
    ok(&bob, &["release", "name:nightly"]);
    ok(&bob, &["wait", "2", "--timeout", "30s"]);
    // The server's log says who changed what.
    let log = std::fs::read_to_string(c.dir.join("server.log")).expect("server log");
    assert!(
        log.lines()
            .any(|l| l.contains("user=bob") && l.contains("job held or released")),
        "{log}"
    );
    assert!(c.dir.join("bob").exists());
    assert_eq!(
        c.json(&["job", "1"])["held"],
        true,
        "alice's job is still held"
    );
    let mine = ok(&alice, &["jobs", "--mine", "--output", "json"]);
    let mine: serde_json::Value = serde_json::from_str(&mine).expect("json");
    assert_eq!(mine.as_array().map(Vec::len), Some(1), "{mine}");
    assert_eq!(mine[0]["owner"], "alice");
    // Bob sees the state and exit code of alice's task that failed to start, not its message
    // (which names her program's path) nor where its output is; alice and the admin see both.
    let failed = ok(
        &alice,
        &[
            "submit",
            "--output",
            "json",
            "--",
            "/alice-private/bin/prog",
        ],
    );
    let failed: serde_json::Value = serde_json::from_str(&failed).expect("json");
    let failed = failed["job_id"].to_string();
    let waited = as_user(&alice, &["wait", &failed, "--timeout", "30s"]);
    assert!(!waited.status.success(), "the task fails to start");
    let task_of = |token: &std::path::Path| -> serde_json::Value {
        let out = ok(token, &["tasks", "--job", &failed, "--output", "json"]);
        let tasks: serde_json::Value = serde_json::from_str(&out).expect("json");
        tasks[0].clone()
    };
    let (hers, his) = (task_of(&alice), task_of(&bob));
    assert!(
        hers["message"]
            .as_str()
            .is_some_and(|m| m.contains("/alice-private/bin/prog")),
        "{hers}"
    );
    assert_eq!(his["state"], hers["state"], "{his}");
    assert_eq!(his["exit_code"], hers["exit_code"], "{his}");
    assert!(
        !his.to_string().contains("alice-private") && his["output"].is_null(),
        "{his}"
    );
    let admins = &c.json(&["tasks", "--job", &failed])[0];
    assert!(
        admins.to_string().contains("/alice-private/bin/prog"),
        "{admins}"
    );

    // Users are the admin's to manage.
    refused(&alice, &["user", "list"], "is for the admin");
    let users = c.json(&["user", "list"]);
    assert_eq!(users[0]["name"], "alice");
    assert_eq!(users[0]["unfinished_jobs"], 1);
    assert_eq!(users[0]["max_cores"], serde_json::Value::Null);
    // Bob's job has just ended: not unfinished any more, at once.
    let bob_row = users
        .as_array()
        .and_then(|u| u.iter().find(|u| u["name"] == "bob"))
        .cloned()
        .unwrap_or_default();
    assert_eq!(
        (&bob_row["jobs"], &bob_row["unfinished_jobs"]),
        (&serde_json::json!(1), &serde_json::json!(0)),
        "{users}"
    );
    let said = c.ok(&["user", "limit", "alice", "--max-cores", "1"]);
    assert!(
        said.contains("user alice: at most 1 core at once"),
        "{said}"
    );
    assert_eq!(c.json(&["user", "list"])[0]["max_cores"], 1);
    c.refused(
        &["user", "limit", "alice", "--max-cores", "lots"],
        "a number of cores, or `none`",
    );
    // Caps on memory and GPUs beside it; the cap on cores keeps its value.
    let said = c.ok(&[
        "user",
        "limit",
        "alice",
        "--max-memory",
        "8GiB",
        "--max-gpus",
        "2",
    ]);
    assert!(
        said.contains("user alice: at most 1 core, 8.0 GiB of memory, 2 GPUs at once"),
        "{said}"
    );
    let listed = &c.json(&["user", "list"])[0];
    assert_eq!(listed["max_cores"], 1);
    assert_eq!(listed["max_memory_bytes"], 8u64 << 30);
    assert_eq!(listed["max_gpus"], 2);
    assert_eq!(listed["gpus"], 0);
    // No `[fair_share]` on this server: no usage to speak of, `null` as in `/api/users`
    // (not 0, which would read as a measured nothing).
    assert_eq!(listed["fair_usage"], serde_json::Value::Null, "{listed}");
    assert_eq!(listed["fair_usage_per_share"], serde_json::Value::Null);
    // The words of `/api/users` (the same builder): a user's row is no admin's, and its
    // unfinished jobs are those pending and those running.
    assert_eq!(listed["admin"], false);
    assert_eq!(
        listed["pending_jobs"]
            .as_u64()
            .zip(listed["running_jobs"].as_u64())
            .map(|(p, r)| p + r),
        listed["unfinished_jobs"].as_u64(),
        "{listed}"
    );
    assert_eq!(listed["shares"], 1);
    let said = c.ok(&["user", "limit", "alice", "--shares", "3"]);
    assert!(said.contains("3 fair-share shares"), "{said}");
    assert_eq!(c.json(&["user", "list"])[0]["shares"], 3);
    assert_eq!(
        c.json(&["user", "list"])[0]["max_gpus"],
        2,
        "shares alone leave the caps"
    );
    c.refused(
        &["user", "limit", "alice", "--shares", "0"],
        "shares: 0 is not 1 to 1000000",
    );
    // A cap on the priority alice may give her work (what her work may preempt).
    let said = c.ok(&["user", "limit", "alice", "--max-priority", "-1"]);
    assert!(said.contains("priority at most -1"), "{said}");
    assert_eq!(c.json(&["user", "list"])[0]["max_priority"], -1);
    refused(
        &alice,
        &["update", "1", "--priority", "0"],
        "priority 0 is above -1",
    );
    c.refused(
        &["user", "limit", "alice", "--max-priority", "high"],
        "a priority (an integer), or `none`",
    );
    c.ok(&["user", "limit", "alice", "--max-priority", "none"]);
    assert_eq!(
        c.json(&["user", "list"])[0]["max_priority"],
        serde_json::Value::Null
    );
    c.refused(&["user", "limit", "alice"], "--max-cores");
    c.refused(
        &["user", "limit", "alice", "--max-memory", "lots"],
        "is not a size such as 512MiB",
    );
    c.ok(&["user", "limit", "alice", "--max-gpus", "none"]);
    assert_eq!(
        c.json(&["user", "list"])[0]["max_gpus"],
        serde_json::Value::Null
    );
    c.ok(&["user", "remove", "bob"]);
    refused(&bob, &["jobs"], "the server refused the token");
    ok(&alice, &["release", "1"]);
    ok(&alice, &["wait", "1", "--timeout", "30s"]);
    assert!(c.dir.join("alice").exists());
}

/// A user's cap on cores holds back her task that only node `b` may run while her task on `a`
/// runs. When that one ends, `b` — idle, its agent beating once a minute — starts the waiting
/// task within about a second: the freed room under her cap wakes it, as a raised cap does,
/// rather than leaving the task to `b`'s next idle beat.
#[test]
fn a_task_held_back_by_its_users_cap_starts_on_another_idle_node_as_soon_as_room_frees() {
    let mut c = Cluster::start_configured("cap-wake", false, "idle_heartbeat_interval = \"60s\"\n");
    c.start_agent("a", 1, &[]);
    c.start_agent("b", 1, &[]);
    c.wait_for_nodes(2);
    let alice = c.add_user("alice");
    c.ok(&["user", "limit", "alice", "--max-cores", "1"]);
    let submit = |node: &str, command: &[&str]| {
        let mut args = vec!["submit", "--requires", node, "--"];
        args.extend(command);
        c.ok_as(&alice, None, &args);
    };
    submit("node:a", &["sleep", "3"]);
    wait_until("her task on a to run", Duration::from_secs(20), || {
        c.tasks(1)[0]["state"] == "running"
    });
    submit("node:b", &["true"]);
    // Not woken, `b` would beat next a minute after its last beat: this waits far less.
    wait_until("her task on b to succeed", Duration::from_secs(20), || {
        c.tasks(2)[0]["state"] == "succeeded"
    });
    let ns = |job: u64, field: &str| c.tasks(job)[0][field].as_u64().expect(field);
    let gap = ns(2, "started_ns").saturating_sub(ns(1, "finished_ns"));
    assert!(
        gap < 3_000_000_000,
        "her task on b started {gap} ns after her task on a ended"
    );
}

/// `hetsched usage`: the accounts, per user (the admin's as `admin`) and per day, as a table
/// and as JSON, from the work the agents really ran; a user reads its own only; a day that is
/// not one is refused naming the format.
#[test]
fn usage_reports_the_core_hours_each_users_running_work_held() {
    let mut c = Cluster::start("usage", false);
    c.start_agent("a", 2, &[]);
    c.wait_for_nodes(1);
    let alice = c.add_user("alice");
    let as_alice = |args: &[&str]| {
        let out = c
            .command(args)
            .env("HETSCHED_TOKEN_FILE", &alice)
            .output()
            .expect("run hetsched");
        assert!(out.status.success(), "{args:?}: {}", text(&out.stderr));
        text(&out.stdout)
    };
    as_alice(&["submit", "--wait", "--", "sleep", "2"]);
    c.ok(&["submit", "--wait", "--", "sleep", "1"]);
    let all = c.json(&["usage"]);
    // Credited from the event that dispatched each to the one that recorded its end.
    let (a, admin) = (
        support::core_seconds_of(&all, "alice"),
        support::core_seconds_of(&all, "admin"),
    );
    assert!(
        (1.0..=3.5).contains(&a),
        "alice's sleep 2 on one core: {all}"
    );
    assert!(
        (0.0..=2.5).contains(&admin) && admin > 0.0,
        "the admin's sleep 1: {all}"
    );
    assert!(
        (all["total"]["core_seconds"].as_f64().unwrap_or(0.0) - a - admin).abs() < 1e-6,
        "{all}"
    );
    assert!((all["users"][0]["core_hours"].as_f64().unwrap_or(0.0) * 3600.0 - admin).abs() < 1e-6);
    let offered = all["capacity"]["core_seconds"].as_f64().unwrap_or(0.0);
    assert!(
        offered > a + admin,
        "the agent's two cores all along: {all}"
    );
    let used = all["utilisation"]["cores"].as_f64().unwrap_or(-1.0);
    assert!((used - (a + admin) / offered).abs() < 1e-9, "{all}");
    let table = c.ok(&["usage", "--by-day"]);
    assert!(table.contains("capacity:"), "{table}");
    assert!(
        table.contains("core-hours") && table.contains("alice") && table.contains("total"),
        "{table}"
    );
    let mine: serde_json::Value =
        serde_json::from_str(&as_alice(&["usage", "--output", "json"])).expect("json");
    let users = mine["users"].as_array().cloned().unwrap_or_default();
    assert_eq!(users.len(), 1, "alice reads her own account only: {mine}");
    assert_eq!(users[0]["user"], "alice");
    // Her table has no share column (a share of herself alone says nothing); the admin's has.
    let hers = as_alice(&["usage"]);
    assert!(
        hers.contains("core-hours") && hers.contains("alice") && !hers.contains("core share"),
        "{hers}"
    );
    assert!(c.ok(&["usage"]).contains("core share"));
    c.refused(
        &["usage", "--since", "1/11/2026"],
        "a day is YYYY-MM-DD (UTC)",
    );
}

/// The accounts count what ran while the server was down: a `sleep 3` whose server is
/// SIGKILLed half a second in and started again 1.5 s later is charged its whole run, by its
/// agent's start and end times (before, about one second of it).
#[test]
fn usage_counts_what_ran_while_the_server_was_down() {
    let mut c = Cluster::start("usage-down", false);
    c.start_agent("a", 1, &[]);
    c.wait_for_nodes(1);
    c.ok(&["submit", "--", "sleep", "3"]);
    wait_until("the task to run", Duration::from_secs(20), || {
        c.tasks(1)[0]["state"] == "running"
    });
    std::thread::sleep(Duration::from_millis(500));
    c.kill_server();
    std::thread::sleep(Duration::from_millis(1_500));
    c.start_server();
    c.ok(&["wait", "1", "--timeout", "30s"]);
    let usage = c.json(&["usage"]);
    let admin = support::core_seconds_of(&usage, "admin");
    assert!(
        (2.8..=3.8).contains(&admin),
        "one core for the 3 s the task ran, the server down or not: {usage}"
    );
}

/// `--server` takes what the server writes to `DATA_DIR/address` (`HOST:PORT`, no scheme): the
/// client and the agent add `http://`, or `https://` with a CA. A server named wrongly is refused
/// at once, saying what is expected, instead of retried.
#[test]
fn clients_and_agents_reach_the_server_by_its_address_file() {
    for tls in [false, true] {
        let mut c = if tls {
            Cluster::start_tls("bare-address-tls")
        } else {
            Cluster::start("bare-address", false)
        };
        let address = std::fs::read_to_string(c.data().join("address")).expect("address");
        let address = address.trim().to_string();
        assert!(!address.contains("://"), "{address}");
        c.start_agent_at(&address, "n", 1, &[]);
        c.wait_for_nodes(1);
        let out = c.ok(&[
            "submit", "--server", &address, "--wait", "--", "echo", "reached",
        ]);
        assert!(out.contains("job 1 submitted (1 task)"), "{out}");
        // (The TLS cluster's server reads task output only from agents with a certificate.)
        if !tls {
            assert_eq!(
                c.ok(&["log", "1", "0", "--server", &address]).trim(),
                "reached"
            );
        }
    }
    let c = Cluster::start("bad-address", false);
    let started = std::time::Instant::now();
    let out = c.cli(&["submit", "--server", "ftp://head:7420", "--", "true"]);
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(
        err.contains("invalid value 'ftp://head:7420' for '--server <SERVER>'")
            && err.contains("neither http:// nor https://"),
        "{err}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(2) && !err.contains("retrying"),
        "refused at once: {err}"
    );
}

/// `user add NAME --save FILE` run as root gives FILE (still 0600) to the Unix account of the
/// user's name, uid and primary group, so the user can read the token the docs have the admin
/// write into its home; without such an account it stays root's and a note says so. Run by
/// another user, the file stays its maker's with a note (the unit test
/// `runtime::users::tests::a_saved_token_goes_to_the_users_account_only_when_root_can_give_it`).
#[test]
fn a_token_saved_by_root_is_given_to_the_users_account() {
    use std::os::unix::fs::MetadataExt;
    let c = Cluster::start("users-save-owner", false);
    let me = std::fs::metadata(&c.dir).expect("dir").uid();
    // The account of a user this test may name without creating one: `nobody`, if it exists.
    let nobody = std::fs::read_to_string("/etc/passwd").ok().and_then(|p| {
        p.lines()
            .map(|l| l.split(':').collect::<Vec<_>>())
            .find(|f| f.first() == Some(&"nobody") && f.len() > 3)
            .and_then(|f| Some((f[2].parse::<u32>().ok()?, f[3].parse::<u32>().ok()?)))
    });
    let (Some((uid, gid)), 0) = (nobody, me) else {
        eprintln!("skipped: needs root and a `nobody` account (runs as uid {me})");
        return;
    };
    let saved = c.dir.join("nobody.token");
    let said = c.ok(&[
        "user",
        "add",
        "nobody",
        "--save",
        saved.to_str().expect("path"),
    ]);
    assert!(
        said.contains("(mode 0600, owned by account `nobody`)"),
        "{said}"
    );
    let meta = std::fs::metadata(&saved).expect("token file");
    assert_eq!(
        (meta.uid(), meta.gid(), meta.mode() & 0o777),
        (uid, gid, 0o600)
    );
    // No account of the name: root's, with a note saying so.
    let kept = c.dir.join("zed.token");
    let out = c
        .command(&[
            "user",
            "add",
            "zed-no-account",
            "--save",
            kept.to_str().expect("path"),
        ])
        .output()
        .expect("run hetsched");
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains(&format!(
            "note: {} is root's (mode 0600): there is no Unix account `zed-no-account`",
            kept.display()
        )),
        "{}",
        text(&out.stderr)
    );
    assert_eq!(std::fs::metadata(&kept).expect("token file").uid(), 0);
}

/// A frozen idle agent (SIGSTOP: its kernel still answers TCP keepalive, its `AwaitWork` call
/// stays open) is declared dead within a few dead timeouts: the server's HTTP/2 pings, sized
/// from the dead timeout, go unanswered and end its call, so its node is judged by its beats.
/// Before, the pings came after 30 s of silence and waited 20 s more, and the node read alive,
/// `last seen 0ms ago`, for about a minute. A healthy idle agent answers them and lives; the
/// frozen one comes back once resumed.
#[test]
fn a_frozen_idle_agent_is_declared_dead_and_a_healthy_idle_one_lives() {
    let mut c = Cluster::start_beating("frozen-idle", "200ms", "2s");
    c.start_agent("a", 1, &[]);
    c.start_agent("b", 1, &[]);
    c.wait_for_nodes(2);
    let alive = |c: &Cluster, name: &str| {
        c.json(&["nodes"])
            .as_array()
            .into_iter()
            .flatten()
            .any(|n| n["name"] == name && n["alive"] == true)
    };
    c.signal_agent("a", "STOP");
    let frozen = std::time::Instant::now();
    wait_until(
        "the frozen agent's node to die",
        Duration::from_secs(20),
        || !alive(&c, "a"),
    );
    let took = frozen.elapsed();
    assert!(alive(&c, "b"), "a healthy idle agent lives ({took:?})");
    c.signal_agent("a", "CONT");
    wait_until(
        "the resumed agent's node to come back",
        Duration::from_secs(30),
        || alive(&c, "a"),
    );
}
