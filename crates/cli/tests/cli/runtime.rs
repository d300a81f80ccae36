//! End-to-end tests of the runtime with the real `hetsched` binary: a server and agents as child
//! processes on loopback, driven through the CLI exactly as a user would. Every wait is bounded.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::{BIN, Cluster, lines, tls_file, wait_until};

#[test]
fn a_job_of_200_tasks_runs_every_task_exactly_once() {
    let mut c = Cluster::start("200", false);
    c.start_agent("a", 4, &[]);
    c.start_agent("b", 4, &[]);
    c.wait_for_nodes(2);
    let log = c.dir.join("ran.log");
    let job = c.write(
        "job.toml",
        &format!(
            "[[application]]\nname = \"append\"\ntasks = 200\n[application.cpu]\n\
             command = \"echo {{index}} $HETSCHED_ATTEMPT >> {}\"\n",
            log.display()
        ),
    );
    let out = c.cli(&["submit", job.to_str().expect("path"), "--wait"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let ran = lines(&log);
    assert_eq!(ran.len(), 200, "every task ran once: {} lines", ran.len());
    let indices: BTreeSet<u32> = ran
        .iter()
        .map(|l| {
            l.split(' ')
                .next()
                .and_then(|i| i.parse().ok())
                .expect("index")
        })
        .collect();
    assert_eq!(indices, (0..200).collect());
    let jobs = c.json(&["jobs"]);
    assert_eq!(jobs.as_array().map(Vec::len), Some(1), "{jobs}");
    assert_eq!(jobs[0]["state"], "completed", "{jobs}");
    assert_eq!(jobs[0]["counts"]["succeeded"], 200, "{jobs}");
    let tasks = c.json(&["tasks", "--job", "1"]);
    let nodes: BTreeSet<&str> = tasks
        .as_array()
        .expect("tasks")
        .iter()
        .filter_map(|t| t["node"].as_str())
        .collect();
    assert_eq!(nodes, BTreeSet::from(["a", "b"]), "both agents ran tasks");

    // Without the right token, the server refuses.
    let wrong = c.write("wrong-token", "not-the-token");
    let out = Command::new(BIN)
        .args(["jobs", "--server", &c.url(), "--token-file"])
        .arg(&wrong)
        .output()
        .expect("run");
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("refused the token"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(c.data().join("token"))
            .expect("token")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600, "token file mode");
    }
}

#[test]
fn malformed_job_files_are_refused_with_file_line_and_field_and_nothing_is_stored() {
    let mut c = Cluster::start("malformed", false);
    c.start_agent("cpu-only", 2, &[]);
    c.wait_for_nodes(1);
    let fixtures =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/jobs-malformed");
    // (file, line, what the message must name)
    let expected: &[(&str, usize, &str)] = &[
        ("01-syntax-error.toml", 3, "string"),
        ("02-unknown-field.toml", 7, "unknown field `threads`"),
        ("03-negative-cores.toml", 7, "application[0].cpu.cores"),
        ("04-gpu-only-without-gpus.toml", 5, "application[0].gpu"),
        ("05-missing-command.toml", 5, "application[0].cpu.command"),
        ("06-zero-tasks.toml", 4, "application[0].tasks"),
        ("07-duplicate-name.toml", 9, "application[1].name"),
        ("08-bad-time-limit.toml", 7, "application[0].cpu.time_limit"),
        ("09-larger-than-any-node.toml", 5, "application[0].cpu"),
        ("10-wrong-type.toml", 4, "application[0].tasks"),
        ("11-no-applications.toml", 2, "title"),
        ("12-negative-retries.toml", 5, "application[0].retries"),
        ("13-app-name-leaves-work-dir.toml", 3, "application[0].name"),
        ("14-bad-env-name.toml", 8, "application[0].cpu.env"),
    ];
    let present: BTreeSet<String> = std::fs::read_dir(&fixtures)
        .expect("fixtures")
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .collect();
    let listed: BTreeSet<String> = expected.iter().map(|e| e.0.to_string()).collect();
    assert_eq!(present, listed, "every fixture has an expectation");
    for (file, line, field) in expected {
        let path = fixtures.join(file);
        let out = c.cli(&["submit", path.to_str().expect("path")]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{file} was accepted");
        let located = format!("{}:{line}:", path.display());
        assert!(
            err.contains(&located),
            "{file}: expected `{located}` in: {err}"
        );
        assert!(err.contains(field), "{file}: expected `{field}` in: {err}");
    }
    assert_eq!(c.json(&["jobs"]), serde_json::json!([]));
    // And nothing half-created in the store itself.
    let db = rusqlite::Connection::open(c.data().join("state.db")).expect("db");
    for table in ["jobs", "apps", "tasks"] {
        let n: i64 = db
            .query_row(&format!("SELECT COUNT(*) FROM {table}"), [], |r| r.get(0))
            .expect("count");
        assert_eq!(n, 0, "{table} rows");
    }
}

/// Parses `start|end INDEX ATTEMPT` lines.
fn events(path: &Path) -> Vec<(String, u32, u32)> {
    lines(path)
        .iter()
        .filter_map(|l| {
            let mut p = l.split_whitespace();
            Some((
                p.next()?.to_string(),
                p.next()?.parse().ok()?,
                p.next()?.parse().ok()?,
            ))
        })
        .collect()
}

#[test]
fn a_server_killed_mid_job_restarts_and_no_recorded_success_runs_again() {
    let mut c = Cluster::start("server-kill", false);
    c.start_agent("a", 3, &[]);
    c.start_agent("b", 3, &[]);
    c.wait_for_nodes(2);
    let log = c.dir.join("events.log");
    let job = c.write(
        "job.toml",
        &format!(
            "[[application]]\nname = \"steps\"\ntasks = 48\n[application.cpu]\n\
             command = \"echo start {{index}} $HETSCHED_ATTEMPT >> {log}; sleep 0.2; echo end {{index}} $HETSCHED_ATTEMPT >> {log}\"\n",
            log = log.display()
        ),
    );
    let out = c.cli(&["submit", job.to_str().expect("path")]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    wait_until("some tasks to succeed", Duration::from_secs(30), || {
        c.succeeded(1) >= 10
    });
    c.kill_server();
    std::thread::sleep(Duration::from_millis(400));
    c.start_server();
    let out = c.cli(&["wait", "1", "--timeout", "60s"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let tasks = c.json(&["tasks", "--job", "1"]);
    let recorded: BTreeMap<u32, u32> = tasks
        .as_array()
        .expect("tasks")
        .iter()
        .map(|t| {
            assert_eq!(t["state"], "succeeded", "{t}");
            (
                t["index"].as_u64().unwrap_or(0) as u32,
                t["attempt"].as_u64().unwrap_or(0) as u32,
            )
        })
        .collect();
    assert_eq!(recorded.len(), 48);
    let ev = events(&log);
    for (index, attempt) in &recorded {
        let ends: Vec<u32> = ev
            .iter()
            .filter(|e| e.0 == "end" && e.1 == *index)
            .map(|e| e.2)
            .collect();
        assert_eq!(
            ends,
            vec![*attempt],
            "task {index} finished exactly once, as the recorded attempt"
        );
        assert!(
            ev.iter().all(|e| e.1 != *index || e.2 <= *attempt),
            "task {index}: nothing ran after the recorded attempt"
        );
    }
}

#[test]
fn an_agent_killed_mid_job_loses_its_tasks_to_the_others() {
    let mut c = Cluster::start("agent-kill", false);
    c.start_agent("doomed", 2, &[]);
    c.start_agent("survivor", 2, &[]);
    c.wait_for_nodes(2);
    let log = c.dir.join("ran.log");
    let job = c.write(
        "job.toml",
        &format!(
            "[[application]]\nname = \"sleepy\"\ntasks = 16\n[application.cpu]\n\
             command = \"sleep 0.3; echo {{index}} $HETSCHED_NODE >> {}\"\n",
            log.display()
        ),
    );
    let out = c.cli(&["submit", job.to_str().expect("path")]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    wait_until(
        "the doomed agent to run tasks",
        Duration::from_secs(20),
        || {
            c.json(&["tasks", "--job", "1"])
                .as_array()
                .is_some_and(|ts| {
                    ts.iter()
                        .any(|t| t["node"] == "doomed" && t["state"] == "running")
                })
        },
    );
    c.kill_agent("doomed");
    let out = c.cli(&["wait", "1", "--timeout", "60s"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let tasks = c.json(&["tasks", "--job", "1"]);
    let tasks = tasks.as_array().expect("tasks");
    assert!(tasks.iter().all(|t| t["state"] == "succeeded"), "{tasks:?}");
    assert!(
        tasks
            .iter()
            .any(|t| t["node"] == "survivor" && t["attempt"] == 2),
        "a task lost with the dead agent ran again on the survivor: {tasks:?}"
    );
    let nodes = c.json(&["nodes"]);
    let doomed = nodes
        .as_array()
        .and_then(|ns| ns.iter().find(|n| n["name"] == "doomed"))
        .expect("doomed node");
    assert_eq!(doomed["alive"], false, "{doomed}");
    let survivor = nodes
        .as_array()
        .and_then(|ns| ns.iter().find(|n| n["name"] == "survivor"))
        .expect("survivor node");
    assert!(
        survivor["available_memory_bytes"]
            .as_u64()
            .is_some_and(|b| b > 0),
        "a live agent reports the memory it measures: {survivor}"
    );
    assert!(
        survivor["disk_free_bytes"].as_u64().is_some_and(|b| b > 0)
            && survivor["min_free_disk"].as_u64() == Some(1 << 30),
        "and its work directory's free disk, with its floor (1 GiB by default): {survivor}"
    );
}

/// `hetsched nodes` marks a node whose work directory's disk is below its agent's
/// `min_free_disk` (fetched workflow inputs fail there), and shows the others' free space.
#[test]
fn nodes_marks_a_node_whose_disk_is_below_its_agents_floor() {
    let mut c = Cluster::start("disk-floor", false);
    c.start_agent("roomy", 1, &[]);
    // No disk has this much free.
    c.start_agent_with_config("full", "min_free_disk = \"1000PiB\"\n");
    c.wait_for_nodes(2);
    wait_until(
        "both nodes' disks reported",
        Duration::from_secs(20),
        || {
            c.json(&["nodes"])
                .as_array()
                .is_some_and(|ns| ns.iter().all(|n| n["disk_free_bytes"].as_u64().is_some()))
        },
    );
    let table = c.ok(&["nodes"]);
    let full = table
        .lines()
        .find(|l| l.contains("full"))
        .expect("full's row");
    assert!(full.contains("(below min_free_disk 1000.0 PiB)"), "{table}");
    let roomy = table
        .lines()
        .find(|l| l.contains("roomy"))
        .expect("roomy's row");
    assert!(!roomy.contains("below min_free_disk"), "{table}");
    let nodes = c.json(&["nodes"]);
    let full = nodes
        .as_array()
        .and_then(|ns| ns.iter().find(|n| n["name"] == "full"))
        .expect("full");
    assert!(
        full["disk_free_bytes"].as_u64() < full["min_free_disk"].as_u64(),
        "{full}"
    );
}

/// Whether process `pid` is gone (no `/proc/PID`, or a zombie nobody has reaped yet).
pub(crate) fn process_gone(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rfind(')')
            .and_then(|i| stat[i + 1..].split_whitespace().next())
            .is_some_and(|state| state == "Z" || state == "X"),
    }
}

/// Agents told to beat only every 10 s still get work at once: the server wakes an idle agent
/// when a job arrives and when a running task is cancelled (`AwaitWork`), so neither waits for
/// the next heartbeat. Without wake-ups the first job would wait up to 10 s, and the cancelled
/// task would run until the agent's next beat.
#[test]
fn work_and_cancels_reach_an_idle_agent_at_once_not_at_its_next_heartbeat() {
    let mut c = Cluster::start_beating("wake", "10s", "60s");
    c.start_agent("a", 2, &[]);
    c.wait_for_nodes(1);
    // The registration's own beats are over: the agent's next periodic one is ~10 s away.
    std::thread::sleep(Duration::from_millis(500));
    let one = c.write(
        "one.toml",
        "[[application]]\nname = \"one\"\ntasks = 1\n[application.cpu]\ncommand = [\"true\"]\n",
    );
    let start = Instant::now();
    let out = c.cli(&["submit", one.to_str().expect("path"), "--wait"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        start.elapsed() < Duration::from_secs(4),
        "a one-task job on an idle cluster ran in {:?}, not at the next heartbeat",
        start.elapsed()
    );

    let pid_file = c.dir.join("sleeper.pid");
    let sleeper = c.write(
        "sleeper.toml",
        &format!(
            "[[application]]\nname = \"sleeper\"\ntasks = 1\n[application.cpu]\n\
             command = [\"sh\", \"-c\", \"echo $$ > {}; exec sleep 60\"]\n",
            pid_file.display()
        ),
    );
    let out = c.cli(&["submit", sleeper.to_str().expect("path")]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    wait_until("the sleeper to start", Duration::from_secs(5), || {
        std::fs::read_to_string(&pid_file).is_ok_and(|s| s.trim().parse::<u32>().is_ok())
    });
    let pid: u32 = std::fs::read_to_string(&pid_file)
        .expect("pid")
        .trim()
        .parse()
        .expect("pid");
    std::thread::sleep(Duration::from_millis(300));
    let cancelled = Instant::now();
    let out = c.cli(&["cancel", "2"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    wait_until(
        "the cancelled task to be killed",
        Duration::from_secs(4),
        || process_gone(pid),
    );
    assert!(cancelled.elapsed() < Duration::from_secs(4));
}

#[test]
fn a_sigkilled_agents_guard_kills_the_tasks_it_left_running_without_a_restart() {
    let mut c = Cluster::start("agent-guard", false);
    c.start_agent("n", 2, &[]);
    c.wait_for_nodes(1);
    let log = c.dir.join("events.log");
    // Each task logs its shell's pid and that of a child it sleeps in (one process group).
    let job = c.write(
        "job.toml",
        &format!(
            "[[application]]\nname = \"sleepy\"\ntasks = 2\n[application.cpu]\n\
             command = \"echo start {{index}} $$ >> {log}; sleep 60 & echo child {{index}} $! >> {log}; wait\"\n",
            log = log.display()
        ),
    );
    c.ok(&["submit", job.to_str().expect("path")]);
    let pids = || -> Vec<u32> {
        lines(&log)
            .iter()
            .filter_map(|l| l.split_whitespace().nth(2)?.parse().ok())
            .collect()
    };
    wait_until(
        "two tasks and their sleeps",
        Duration::from_secs(20),
        || pids().len() == 4,
    );
    let tasks = pids();
    assert_eq!(c.guards("n").len(), 1, "the agent runs one guard");
    c.kill_agent("n");
    wait_until(
        "the guard to kill the tasks the SIGKILLed agent left, children included",
        Duration::from_secs(5),
        || tasks.iter().all(|&p| process_gone(p)),
    );
    wait_until("the guard to exit", Duration::from_secs(5), || {
        c.guards("n").is_empty()
    });
    assert!(
        c.agent_log("n")
            .contains("ended with 2 task process groups running: killed them"),
        "{}",
        c.agent_log("n")
    );
    // An agent restarted in the directory finds nothing left to kill, and has a guard of its own.
    c.start_agent("n", 2, &[]);
    wait_until("a guard for the new agent", Duration::from_secs(10), || {
        c.guards("n").len() == 1
    });
    assert!(
        !c.agent_log("n").contains("killed tasks left running"),
        "{}",
        c.agent_log("n")
    );
}

/// An agent logging to a file (`--log-file`, `--log-format json`) gets its guard's line there,
/// in its format, not on the standard error a supervisor may not keep (it went there before).
#[test]
fn a_sigkilled_agents_guard_writes_its_line_to_the_agents_log_file() {
    let mut c = Cluster::start("agent-guard-log", false);
    let file = c.dir.join("agent-n.jsonl");
    let file_arg = file.display().to_string();
    c.start_agent("n", 1, &["--log-file", &file_arg, "--log-format", "json"]);
    c.wait_for_nodes(1);
    c.ok(&["submit", "--", "sleep", "60"]);
    // The server counts a task running once it is sent; the guard kills only what the agent
    // recorded as started (its ledger), so wait for that record before the SIGKILL.
    let ledger = c.dir.join("agent-n").join("running.tasks");
    wait_until(
        "the agent to record the task started",
        Duration::from_secs(20),
        || lines(&ledger).iter().any(|l| l.starts_with("start ")),
    );
    // Rotated without a SIGHUP: the guard opens the path when it writes, so it creates the
    // file anew, private.
    std::fs::rename(&file, c.dir.join("agent-n.jsonl.1")).expect("rotate");
    c.kill_agent("n");
    let guard_line = || {
        lines(&file).into_iter().find_map(|l| {
            let v: serde_json::Value = serde_json::from_str(&l).ok()?;
            v["fields"]["message"]
                .as_str()?
                .contains("ended with 1 task process group running: killed it")
                .then_some(v)
        })
    };
    wait_until(
        "the guard's line in the log file",
        Duration::from_secs(10),
        || guard_line().is_some(),
    );
    let line = guard_line().expect("the guard's line");
    assert_eq!(line["level"], "WARN", "{line}");
    assert!(
        line["timestamp"].as_str().is_some_and(|t| !t.is_empty()),
        "{line}"
    );
    assert!(
        !c.agent_log("n").contains("killed it"),
        "not on standard error: {}",
        c.agent_log("n")
    );
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(&file).expect("log file").permissions(),
    );
    assert_eq!(mode & 0o777, 0o600);
}

/// An agent whose token the server stopped taking (rotated while the server was down) exits,
/// and with `--log-file` the reason is the file's last line. Before, the file ended on
/// `server unreachable …; retrying` and the reason went only to standard error.
#[test]
fn an_agent_that_stops_on_an_error_says_why_as_the_last_line_of_its_log_file() {
    let mut c = Cluster::start("agent-fatal-log", false);
    // (Not `agent-n.log`: the cluster keeps the agent's standard error there.)
    let file = c.dir.join("agent-n-file.log");
    let file_arg = file.display().to_string();
    c.start_agent("n", 1, &["--log-file", &file_arg]);
    c.wait_for_nodes(1);
    c.kill_server();
    std::fs::write(
        c.data().join("agent-token"),
        "fedcba9876543210fedcba9876543210fedcba98\n",
    )
    .expect("rotate the agent token");
    c.start_server();
    assert_ne!(c.agent_exit("n", Duration::from_secs(60)), Some(0));
    let last = lines(&file).pop().unwrap_or_default();
    assert!(
        last.contains("ERROR") && last.contains("the agent stops: the server refused the token"),
        "{last}"
    );
}

#[test]
fn a_multi_node_task_runs_on_the_first_of_its_whole_nodes_with_their_host_names() {
    let mut c = Cluster::start("multi-node", false);
    // Heterogeneous nodes: 1, 2 and 3 cores.
    for (n, cores) in [("a", 1), ("b", 2), ("c", 3)] {
        c.start_agent(n, cores, &[]);
    }
    c.wait_for_nodes(3);
    let log = c.dir.join("mpi.txt");
    // What an MPI launcher reads: the node file, and the variables beside it.
    let command = format!(
        "cat \"$HETSCHED_NODE_FILE\" > {f}; echo \"$HETSCHED_NODES $HETSCHED_NUM_NODES $HETSCHED_NODE \
         $HETSCHED_NODE_CORES $HETSCHED_TOTAL_CORES\" >> {f}",
        f = log.display()
    );
    c.ok(&[
        "submit", "--nodes", "3", "--shell", "--wait", "--", &command,
    ]);
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").expect("host name");
    let lines = lines(&log);
    assert_eq!(lines.len(), 4, "{lines:?}");
    assert!(lines[..3].iter().all(|l| l == host.trim()), "{lines:?}");
    let words: Vec<&str> = lines[3].split_whitespace().collect();
    let [names, count, node, cores, total] = words[..] else {
        panic!("{lines:?}");
    };
    // Each node's cores, in the node file's order.
    let declared = |n: &str| match n {
        "a" => "1",
        "b" => "2",
        _ => "3",
    };
    let expected: Vec<&str> = names.split(',').map(declared).collect();
    assert_eq!(
        (cores, total),
        (expected.join(",").as_str(), "6"),
        "{lines:?}"
    );
    let mut sorted: Vec<&str> = names.split(',').collect();
    assert_eq!(sorted[0], node, "it runs on the first of its nodes");
    sorted.sort_unstable();
    assert_eq!((sorted, count), (vec!["a", "b", "c"], "3"));
    // Ended, its listing still names all three.
    let listed = c.json(&["tasks", "--job", "1"]);
    assert_eq!(
        listed[0]["nodes"].as_array().map(Vec::len),
        Some(3),
        "{listed}"
    );
    let shown = c.ok(&["job", "1"]);
    assert!(
        shown.contains("each task holds 3 whole nodes (HETSCHED_NODE_FILE)"),
        "{shown}"
    );
    assert_eq!(c.json(&["job", "1"])["apps"][0]["nodes"], 3);
    // More whole nodes than the cluster has: refused at once, naming the flag.
    let out = c.cli(&["submit", "--nodes", "4", "--", "true"]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("--nodes")
            && stderr.contains("needs 4 whole nodes per task, and the cluster has 3 nodes"),
        "{stderr}"
    );
}

/// A node held whole by a multi-node task still being gathered (waiting for its other node's
/// task to end) is the task's, not idle: its agent's idle timeout waits (`gathering` in every
/// reply). Before, the held agent left after its idle timeout, and the task waited on for a node
/// that would never come.
#[test]
fn an_agent_held_by_a_gathering_does_not_leave_at_its_idle_timeout() {
    let mut c = Cluster::start("multi-node-gathering-idle", false);
    c.start_agent("busy", 1, &[]);
    c.wait_for_nodes(1);
    c.ok(&["submit", "--", "sleep", "4"]);
    wait_until("the sleep to run", Duration::from_secs(20), || {
        c.tasks(1)[0]["state"] == "running"
    });
    c.start_agent("idle", 1, &["--idle-timeout", "1s"]);
    c.wait_for_nodes(2);
    // `idle` is held at once; `busy` as its sleep ends, 3 s after the idle timeout ran out.
    c.ok(&["submit", "--nodes", "2", "--", "true"]);
    let waited = c.cli(&["wait", "2", "--timeout", "40s"]);
    assert!(
        waited.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&waited.stdout),
        c.agent_log("idle")
    );
    assert!(
        c.agent_log("idle")
            .contains("held whole for a multi-node task being gathered"),
        "{}",
        c.agent_log("idle")
    );
    // Its work done, it leaves at its idle timeout as before.
    assert_eq!(c.agent_exit("idle", Duration::from_secs(20)), Some(0));
}

/// The other nodes of a multi-node task run no process of it: without the server's word that
/// they hold their cores for it (`member_of`), an agent's idle timeout ended it under the task
/// (the attempt was lost: "node `y` of the multi-node task is gone"), and `node stop --drain`
/// counted 0 running tasks there and stopped it at once.
#[test]
fn a_multi_node_tasks_other_nodes_wait_for_it_through_their_idle_timeout_and_a_drain() {
    let mut c = Cluster::start("multi-node-idle", false);
    for n in ["x", "y"] {
        c.start_agent(n, 1, &["--idle-timeout", "3s"]);
    }
    c.wait_for_nodes(2);
    // Longer than the idle timeout: its other node must not leave under it.
    c.ok(&["submit", "--nodes", "2", "--", "sleep", "7"]);
    wait_until(
        "the task to end or lose its attempt",
        Duration::from_secs(30),
        || {
            // A lost attempt says so ("attempt 1 lost: …") as the task waits again.
            let t = &c.tasks(1)[0];
            t["message"].as_str().is_some_and(|m| m.contains("lost"))
                || !["pending", "running"].contains(&t["state"].as_str().unwrap_or_default())
        },
    );
    let t = &c.tasks(1)[0];
    assert_eq!(
        (t["state"].as_str(), t["attempt"].as_u64()),
        (Some("succeeded"), Some(1)),
        "{t}"
    );
    let member = t["nodes"][1].as_str().unwrap_or_default().to_string();
    assert!(
        c.agent_log(&member)
            .contains("member of running multi-node tasks"),
        "{}",
        c.agent_log(&member)
    );
    // Then both end with the work, as before.
    for n in ["x", "y"] {
        assert_eq!(c.agent_exit(n, Duration::from_secs(20)), Some(0), "{n}");
    }
    let all = c.json(&["nodes", "--all"]);
    let left: Vec<&str> = all
        .as_array()
        .map(|a| a.iter().filter_map(|n| n["left"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(left, ["idle-timeout"; 2], "{all}");

    // `node stop --drain` on a member: the task is one of what runs there, and the agent waits
    // for it to end.
    for n in ["p", "q"] {
        c.start_agent(n, 1, &[]);
    }
    c.wait_for_nodes(2);
    c.ok(&["submit", "--nodes", "2", "--", "sleep", "4"]);
    wait_until("the task to run", Duration::from_secs(20), || {
        c.tasks(2)[0]["state"] == "running"
    });
    let t = &c.tasks(2)[0];
    let member = t["nodes"][1].as_str().unwrap_or_default().to_string();
    assert!(["p", "q"].contains(&member.as_str()), "{t}");
    let said = c.ok(&["node", "stop", &member, "--drain"]);
    assert_eq!(
        said,
        format!("node `{member}`: its agent is asked to stop; 1 running task ends there first\n")
    );
    assert_eq!(
        c.agent_exit(&member, Duration::from_secs(20)),
        Some(0),
        "its agent exits once the task ended"
    );
    let log = c.agent_log(&member);
    assert!(
        log.contains("waiting for the running tasks to end (--drain)")
            && log.contains("running=0 multi_node=1"),
        "{log}"
    );
    let t = &c.tasks(2)[0];
    assert_eq!(
        (t["state"].as_str(), t["attempt"].as_u64()),
        (Some("succeeded"), Some(1)),
        "{t}"
    );
    let all = c.ok(&["nodes", "--all"]);
    assert!(all.contains("left (operator)"), "{all}");
}

#[test]
fn a_second_agent_in_one_work_directory_is_refused() {
    let mut c = Cluster::start("agent-dir-lock", false);
    c.start_agent("n", 1, &[]);
    c.wait_for_nodes(1);
    let out = Command::new(BIN)
        .args([
            "agent",
            "--server",
            &c.url(),
            "--name",
            "other",
            "--cores",
            "1",
        ])
        .arg("--token-file")
        .arg(c.data().join("agent-token"))
        .arg("--work-dir")
        .arg(c.dir.join("agent-n"))
        .output()
        .expect("run a second agent");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("another agent (pid ")
            && stderr.contains("uses this work directory")
            && stderr.contains("agent-n"),
        "{stderr}"
    );
    // The first agent is untouched.
    assert_eq!(c.json(&["nodes"]).as_array().map(Vec::len), Some(1));
}

#[test]
fn a_restarted_agent_kills_the_tasks_its_sigkilled_predecessor_left_running() {
    let mut c = Cluster::start("agent-restart", false);
    c.start_agent("n", 3, &[]);
    c.wait_for_nodes(1);
    let log = c.dir.join("events.log");
    // The first attempt sleeps long in a child of the shell (both in the task's process group);
    // if it were left running it would log `end INDEX 1`.
    let job = c.write(
        "job.toml",
        &format!(
            "[[application]]\nname = \"sleepy\"\ntasks = 3\n[application.cpu]\n\
             command = \"echo start {{index}} $HETSCHED_ATTEMPT $$ >> {log}; \
             if [ $HETSCHED_ATTEMPT = 1 ]; then sleep 6 & echo child {{index}} 1 $! >> {log}; wait; fi; \
             echo end {{index}} $HETSCHED_ATTEMPT >> {log}\"\n",
            log = log.display()
        ),
    );
    let out = c.cli(&["submit", job.to_str().expect("path")]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let pids = || -> Vec<u32> {
        lines(&log)
            .iter()
            .filter_map(|l| {
                let p: Vec<&str> = l.split_whitespace().collect();
                match p.as_slice() {
                    ["start", _, "1", pid] | ["child", _, "1", pid] => pid.parse().ok(),
                    _ => None,
                }
            })
            .collect()
    };
    wait_until(
        "three first attempts and their sleeps",
        Duration::from_secs(20),
        || pids().len() == 6,
    );
    let old = pids();
    // A task the agent spawned just before its SIGKILL, whose `start` line it never wrote: no
    // ledger lists it, but it carries the agent's mark.
    let unrecorded = {
        use std::os::unix::process::CommandExt;
        Command::new("sleep")
            .arg("300")
            .env("HETSCHED_AGENT_WORK_DIR", c.dir.join("agent-n"))
            .process_group(0)
            .spawn()
            .expect("test setup")
    };
    // Without its guard (which would kill them at once: the next test), the orphans outlive
    // the SIGKILLed agent.
    c.kill_guard("n");
    c.kill_agent("n");
    assert!(
        old.iter().all(|&p| !process_gone(p)),
        "the orphans outlive the SIGKILLed agent"
    );
    c.start_agent("n", 3, &[]);
    let mut unrecorded = unrecorded;
    wait_until(
        "the restarted agent to kill the orphans (well before their 6 s sleep ends)",
        Duration::from_secs(4),
        || old.iter().all(|&p| process_gone(p)) && unrecorded.try_wait().ok().flatten().is_some(),
    );
    let out = c.cli(&["wait", "1", "--timeout", "30s"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let tasks = c.json(&["tasks", "--job", "1"]);
    let tasks = tasks.as_array().expect("tasks");
    assert_eq!(tasks.len(), 3);
    let ev = events(&log);
    for t in tasks {
        assert_eq!(t["state"], "succeeded", "{t}");
        let index = t["index"].as_u64().unwrap_or(99) as u32;
        let ends: Vec<u32> = ev
            .iter()
            .filter(|e| e.0 == "end" && e.1 == index)
            .map(|e| e.2)
            .collect();
        assert_eq!(
            ends,
            vec![t["attempt"].as_u64().unwrap_or(0) as u32],
            "task {index} finished once, as its recorded attempt"
        );
        assert!(t["attempt"].as_u64() >= Some(2), "{t}");
    }
    assert!(
        old.iter().all(|&p| process_gone(p)),
        "no orphan came back to life"
    );
}

#[test]
fn failed_attempts_run_again_while_retries_last_and_a_time_limit_counts_as_a_failure() {
    let mut c = Cluster::start("retries", false);
    c.start_agent("a", 4, &[]);
    c.wait_for_nodes(1);
    let job = c.write(
        "job.toml",
        "[[application]]\nname = \"flaky\"\ntasks = 2\nretries = 2\n[application.cpu]\n\
         command = 'test \"$HETSCHED_ATTEMPT\" -ge 2'\n\
         [[application]]\nname = \"slow-once\"\ntasks = 1\nretries = 1\n[application.cpu]\n\
         command = 'if [ $HETSCHED_ATTEMPT = 1 ]; then sleep 30; fi'\ntime_limit = \"300ms\"\n\
         [[application]]\nname = \"hopeless\"\ntasks = 1\nretries = 1\n[application.cpu]\n\
         command = \"exit 3\"\n",
    );
    let out = c.cli(&["submit", job.to_str().expect("path"), "--wait"]);
    assert!(!out.status.success(), "`hopeless` fails for good");
    let tasks = c.json(&["tasks", "--job", "1"]);
    let by_app = |app: &str| -> Vec<(String, u64, u64)> {
        tasks
            .as_array()
            .expect("tasks")
            .iter()
            .filter(|t| t["app"] == app)
            .map(|t| {
                (
                    t["state"].as_str().unwrap_or("").to_string(),
                    t["attempt"].as_u64().unwrap_or(0),
                    t["failed_attempts"].as_u64().unwrap_or(0),
                )
            })
            .collect()
    };
    let ok2 = ("succeeded".to_string(), 2, 1);
    assert_eq!(by_app("flaky"), vec![ok2.clone(), ok2.clone()], "{tasks}");
    assert_eq!(by_app("slow-once"), vec![ok2], "{tasks}");
    assert_eq!(
        by_app("hopeless"),
        vec![("failed".to_string(), 2, 1)],
        "one retry, then failed: {tasks}"
    );
    let table = c.cli(&["tasks", "--job", "1"]);
    assert!(
        String::from_utf8_lossy(&table.stdout).contains("2 (1 failed)"),
        "{}",
        String::from_utf8_lossy(&table.stdout)
    );
}

#[test]
fn a_submission_repeated_with_its_key_makes_one_job() {
    let mut c = Cluster::start("keys", false);
    let job = c.write(
        "job.toml",
        "[[application]]\nname = \"a\"\ntasks = 1\n[application.cpu]\ncommand = \"true\"\n",
    );
    let submit = |key: &str| {
        let out = c.cli(&[
            "submit",
            job.to_str().expect("path"),
            "--submission-key",
            key,
        ]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).to_string()
    };
    assert!(submit("k1").contains("job 1 submitted"));
    assert!(submit("k1").contains("job 1 was already submitted with this key"));
    assert!(submit("k2").contains("job 2 submitted"));
    // Without --submission-key each submission draws a fresh key: a new job each time.
    assert!(submit_plain(&c, &job).contains("job 3 submitted"));
    assert!(submit_plain(&c, &job).contains("job 4 submitted"));
    assert_eq!(c.json(&["jobs"]).as_array().map(Vec::len), Some(4));
    // The server is down when `submit` starts: it retries (same key) until the server is back.
    c.kill_server();
    let pending = Command::new(BIN)
        .args(["submit", job.to_str().expect("path")])
        .env("HETSCHED_SERVER", c.url())
        .env("HETSCHED_TOKEN_FILE", c.data().join("token"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("submit");
    std::thread::sleep(Duration::from_millis(300));
    c.start_server();
    let out = pending.wait_with_output().expect("submit ends");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("retrying"), "{err}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("job 5 submitted"));
    assert_eq!(c.json(&["jobs"]).as_array().map(Vec::len), Some(5));
}

/// Submission keys are a namespace per user: alice's and bob's `--submission-key K` make two
/// jobs, each retry says the user's own job was already submitted, and neither output names
/// the other's job (a key names nothing of another user's, not even that it exists).
#[test]
fn a_submission_key_is_a_namespace_per_user() {
    let c = Cluster::start("keys-per-user", false);
    let job = c.write(
        "job.toml",
        "[[application]]\nname = \"a\"\ntasks = 1\n[application.cpu]\ncommand = \"true\"\n",
    );
    let (alice, bob) = (c.add_user("alice"), c.add_user("bob"));
    let submit = |token: &Path| {
        c.ok_as(
            token,
            None,
            &[
                "submit",
                "--hold",
                "--submission-key",
                "run-7/align-3",
                job.to_str().expect("path"),
            ],
        )
    };
    assert!(submit(&alice).contains("job 1 submitted"));
    let said = submit(&bob);
    assert!(said.contains("job 2 submitted"), "{said}");
    assert!(!said.contains("job 1"), "{said}");
    for _ in 0..2 {
        let said = submit(&alice);
        assert!(
            said.contains("job 1 was already submitted with this key"),
            "{said}"
        );
        let said = submit(&bob);
        assert!(
            said.contains("job 2 was already submitted with this key"),
            "{said}"
        );
        assert!(!said.contains("job 1"), "{said}");
    }
    let owners: Vec<(u64, String)> = c
        .json(&["jobs"])
        .as_array()
        .expect("jobs")
        .iter()
        .map(|j| {
            (
                j["id"].as_u64().unwrap_or(0),
                j["owner"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect();
    assert_eq!(
        owners,
        vec![(1, "alice".to_string()), (2, "bob".to_string())]
    );
}

fn submit_plain(c: &Cluster, job: &Path) -> String {
    let out = c.cli(&["submit", job.to_str().expect("path")]);
    String::from_utf8_lossy(&out.stdout).to_string()
}

#[test]
fn cancel_stops_running_tasks_and_time_limits_are_enforced() {
    let mut c = Cluster::start("cancel", false);
    c.start_agent("a", 2, &[]);
    c.wait_for_nodes(1);
    let slow = c.write(
        "slow.toml",
        "[[application]]\nname = \"slow\"\ntasks = 6\n[application.cpu]\ncommand = \"sleep 30\"\n",
    );
    let out = c.cli(&["submit", slow.to_str().expect("path")]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    wait_until("tasks to run", Duration::from_secs(20), || {
        c.json(&["job", "1"])["counts"]["running"].as_u64() == Some(2)
    });
    let out = c.cli(&["cancel", "1"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(c.json(&["job", "1"])["state"], "cancelled");
    // Cancelled again: nothing left, and it says why.
    assert!(
        c.ok(&["cancel", "1"])
            .contains("job 1: nothing to cancel, it had already ended (cancelled)")
    );
    // The node is free again: a job with a time limit runs, and its task is killed at the limit.
    let limited = c.write(
        "limited.toml",
        "[[application]]\nname = \"limited\"\ntasks = 1\n[application.cpu]\n\
         command = \"sleep 30\"\ntime_limit = \"300ms\"\n",
    );
    let start = Instant::now();
    let out = c.cli(&["submit", limited.to_str().expect("path"), "--wait"]);
    assert!(!out.status.success(), "a task past its time limit fails");
    assert!(
        start.elapsed() < Duration::from_secs(15),
        "killed at its limit, not after 30 s"
    );
    let tasks = c.json(&["tasks", "--job", "2"]);
    assert!(
        tasks[0]["message"]
            .as_str()
            .is_some_and(|m| m.contains("time limit")),
        "{tasks}"
    );
}

/// `submit --signal USR1@2s` (Slurm's `--signal`): a task is warned before its time limit, and
/// one that saves its state and exits then succeeds instead of being stopped at the limit.
#[test]
fn a_task_warned_before_its_time_limit_saves_its_state_and_ends_in_time() {
    let mut c = Cluster::start("signal", false);
    c.start_agent("a", 2, &[]);
    c.wait_for_nodes(1);
    let saved = c.dir.join("saved");
    let script = format!(
        "trap 'echo step $i > {}; exit 0' USR1; i=0; while true; do i=$((i+1)); sleep 0.05; done",
        saved.display()
    );
    let start = Instant::now();
    let out = c.cli(&[
        "submit",
        "--time-limit",
        "20s",
        "--signal",
        "USR1@19s",
        "--wait",
        "--",
        "sh",
        "-c",
        &script,
    ]);
    assert!(
        out.status.success(),
        "it saved and ended before its limit: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        start.elapsed() < Duration::from_secs(15),
        "warned 1 s in, not stopped at 20 s"
    );
    let said = std::fs::read_to_string(&saved).expect("its state was saved");
    assert!(said.starts_with("step "), "{said}");
    // A signal a program cannot catch is refused, naming the flag.
    c.refused(
        &["submit", "--signal", "KILL@1m", "--", "true"],
        "--signal: invalid signal `KILL` in `KILL@1m`",
    );
}

/// `hetsched signal` (Slurm's `scancel --signal`): an operator asks running tasks to save
/// their state now; each picked task's processes get the signal once, and the tasks run on to
/// their own end — nothing is cancelled.
#[test]
fn signal_reaches_the_picked_running_tasks_once_and_they_run_on() {
    let mut c = Cluster::start("operator-signal", false);
    c.start_agent("a", 2, &[]);
    c.wait_for_nodes(1);
    let d = c.dir.display().to_string();
    let script = format!(
        "trap 'echo saved >> {d}/ck-{{index}}' USR1; echo > {d}/started-{{index}}; \
         while [ ! -e {d}/stop ]; do sleep 0.05; done"
    );
    c.ok(&["submit", "--tasks", "2", "--", "sh", "-c", &script]);
    wait_until("both tasks to start", Duration::from_secs(20), || {
        (0..2).all(|i| c.dir.join(format!("started-{i}")).exists())
    });
    let saved = |i: u32| lines(&c.dir.join(format!("ck-{i}"))).len();
    // Task 1 alone.
    let said = c.ok(&["signal", "1", "--signal", "USR1", "--tasks", "1"]);
    assert!(
        said.contains("job 1: SIGUSR1 sent to 1 running task"),
        "{said}"
    );
    wait_until("task 1 to save", Duration::from_secs(20), || saved(1) == 1);
    // Every running task of the newest job, as JSON.
    let j = c.json(&["signal", "last", "-s", "sigusr1"]);
    assert_eq!(j["tasks"].as_u64(), Some(2), "{j}");
    wait_until("both to save", Duration::from_secs(20), || {
        saved(0) == 1 && saved(1) == 2
    });
    // Slurm's way, `scancel --signal`: the same, nothing cancelled.
    let said = c.ok(&["cancel", "1", "--signal", "USR1", "--tasks", "0"]);
    assert!(said.contains("sent to 1 running task"), "{said}");
    wait_until("task 0 to save again", Duration::from_secs(20), || {
        saved(0) == 2
    });
    // Each signal went once: nothing more arrives at later heartbeats.
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!((saved(0), saved(1)), (2, 2));
    c.refused(
        &["signal", "1", "--signal", "SEGV"],
        "invalid signal `SEGV`: expected one of HUP",
    );
    c.refused(
        &["signal", "1", "--signal", "USR1", "--tasks", "5"],
        "job 1 has no task with index 5",
    );
    // They run on, and end as their program decides: completed, not cancelled.
    std::fs::write(c.dir.join("stop"), "").expect("stop");
    c.ok(&["wait", "1", "--timeout", "30s"]);
    assert_eq!(c.json(&["job", "1"])["state"].as_str(), Some("completed"));
    // Nothing runs now: the signal reaches nothing.
    let said = c.ok(&["signal", "1", "-s", "HUP"]);
    assert!(said.contains("job 1: no running task to signal"), "{said}");
}

/// `submit --after-corr JOB` (Slurm's `--dependency=aftercorr`): a pipeline of arrays, each
/// task of the second starting as soon as the first's task of its index succeeded — not once
/// the whole first array has.
#[test]
fn after_corr_runs_each_task_once_its_correspondent_succeeded() {
    let mut c = Cluster::start("after-corr", false);
    c.start_agent("a", 4, &[]);
    c.wait_for_nodes(1);
    let d = c.dir.display().to_string();
    // prep[2] waits for `go`; the others end at once.
    let prep = format!(
        "if [ {{index}} = 2 ]; then while [ ! -e {d}/go ]; do sleep 0.05; done; fi; \
         echo done > {d}/prep-{{index}}"
    );
    c.ok(&["submit", "--array", "1-3", "--", "sh", "-c", &prep]);
    let sim = format!("test -e {d}/prep-{{index}} && echo ok > {d}/sim-{{index}}");
    c.ok(&[
        "submit",
        "--array",
        "1-3",
        "--dependency",
        "aftercorr:1",
        "--",
        "sh",
        "-c",
        &sim,
    ]);
    let exists = |f: &str| c.dir.join(f).exists();
    wait_until("sim[1] and sim[3]", Duration::from_secs(20), || {
        exists("sim-1") && exists("sim-3")
    });
    assert!(
        !exists("prep-2") && !exists("sim-2"),
        "sim[2] waits for prep[2]"
    );
    let shown = c.ok(&["job", "2"]);
    assert!(
        shown.contains("runs after job 1 (each task once their task of its index succeeded)"),
        "{shown}"
    );
    assert!(
        shown.contains("pending because: waiting for the tasks of job 1 with the same indices"),
        "{shown}"
    );
    assert_eq!(c.json(&["job", "2"])["after_corr"], serde_json::json!([1]));
    std::fs::write(c.dir.join("go"), "").expect("go");
    c.ok(&["wait", "1,2", "--timeout", "30s"]);
    assert!(exists("sim-2"));
    c.refused(
        &[
            "submit",
            "--array",
            "1-5",
            "--after-corr",
            "1",
            "--",
            "true",
        ],
        "--after-corr: job 1 has no task with index 4 (nor 1 other indices of this job)",
    );
}

/// `submit --singleton` (Slurm's `--dependency=singleton`): jobs of one name run one at a time.
#[test]
fn a_singleton_waits_for_the_unfinished_job_of_its_name() {
    let mut c = Cluster::start("singleton", false);
    c.start_agent("a", 4, &[]);
    c.wait_for_nodes(1);
    let d = c.dir.display().to_string();
    let first = format!("while [ ! -e {d}/go ]; do sleep 0.05; done; echo > {d}/first");
    c.ok(&["submit", "--name", "nightly", "--", "sh", "-c", &first]);
    let second = format!("test -e {d}/first && echo > {d}/second");
    c.ok(&[
        "submit",
        "--name",
        "nightly",
        "--dependency",
        "singleton",
        "--",
        "sh",
        "-c",
        &second,
    ]);
    assert_eq!(c.json(&["job", "2"])["after_any"], serde_json::json!([1]));
    // `--after-start` (Slurm's `after`): job 1 runs, so a job after its start runs now.
    let beside = format!("echo > {d}/beside");
    c.ok(&["submit", "--after-start", "1", "--", "sh", "-c", &beside]);
    assert_eq!(c.json(&["job", "3"])["after_start"], serde_json::json!([1]));
    wait_until(
        "the job after job 1's start",
        Duration::from_secs(20),
        || c.dir.join("beside").exists(),
    );
    std::thread::sleep(Duration::from_millis(500));
    assert!(!c.dir.join("second").exists(), "it waits for job 1");
    std::fs::write(c.dir.join("go"), "").expect("go");
    c.ok(&["wait", "1,2,3", "--timeout", "30s"]);
    assert!(c.dir.join("second").exists());
}

/// A cancelled task gets SIGTERM and the agent's kill grace (`--kill-grace`) to end, and its
/// cores stay its own until it has ended: the task the server places on them next waits on the
/// agent instead of running beside it. One that ends on SIGTERM frees them at once.
#[test]
fn a_cancelled_task_keeps_its_cores_through_its_kill_grace() {
    let mut c = Cluster::start("grace", false);
    c.start_agent("a", 1, &["--kill-grace", "2s"]);
    c.wait_for_nodes(1);
    let now_ns = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("clock")
            .as_nanos()
    };
    let run_then_cancel = |job: u64, trap: &str| -> u128 {
        let started = c.dir.join(format!("started-{job}"));
        let file = c.write(
            &format!("stubborn-{job}.toml"),
            &format!(
                "[[application]]\nname = \"stubborn\"\ntasks = 1\n[application.cpu]\n\
                 command = [\"sh\", \"-c\", \"trap '{trap}' TERM; echo > {}; \
                 for i in $(seq 600); do sleep 0.05; done\"]\n",
                started.display()
            ),
        );
        c.ok(&["submit", file.to_str().expect("path")]);
        wait_until("the task to start", Duration::from_secs(20), || {
            started.exists()
        });
        let at = now_ns();
        c.ok(&["cancel", &job.to_string()]);
        at
    };
    // The next job's task writes when it started.
    let next = |job: u64| -> u128 {
        let mark = c.dir.join(format!("next-{job}"));
        let file = c.write(
            &format!("next-{job}.toml"),
            &format!(
                "[[application]]\nname = \"next\"\ntasks = 1\n[application.cpu]\n\
                 command = [\"sh\", \"-c\", \"date +%s%N > {}\"]\n",
                mark.display()
            ),
        );
        c.ok(&["submit", file.to_str().expect("path"), "--wait"]);
        std::fs::read_to_string(&mark)
            .expect("the next task ran")
            .trim()
            .parse()
            .expect("nanoseconds")
    };

    // (Each stubborn task ends by itself after 30 s, should the test fail and leave it behind.)
    // Ignores SIGTERM: SIGKILLed 2 s after the cancel; the next task starts after that.
    let cancelled = run_then_cancel(1, "");
    let started = next(2);
    assert!(
        started >= cancelled + 2_000_000_000,
        "the next task started {} ms after the cancel, inside the stopped task's grace",
        (started.saturating_sub(cancelled)) / 1_000_000
    );
    // The cancelled attempt's usage until it ended is kept with its row.
    wait_until(
        "the cancelled task's usage",
        Duration::from_secs(10),
        || {
            c.tasks(1)[0]["usage"]["max_rss_bytes"]
                .as_u64()
                .is_some_and(|b| b > 0)
        },
    );
    assert_eq!(c.tasks(1)[0]["state"], "cancelled");
    // Ends on SIGTERM: the next task does not wait for the grace.
    let cancelled = run_then_cancel(3, "exit 0");
    let started = next(4);
    assert!(
        started < cancelled + 1_500_000_000,
        "a task ending on SIGTERM held its core for {} ms",
        (started.saturating_sub(cancelled)) / 1_000_000
    );
}

/// `hetsched cancel N; hetsched wait N; rm -rf outdir` does not race the task's own SIGTERM
/// handler: the cancel is recorded at once, but the job stays `cancelled (stopping 1)` — its
/// JSON's `stopping` — until its agent says the task's process ended, and `wait` (with a
/// `--timeout` too) returns only then, as Slurm's job stays *completing* until its processes
/// are gone.
#[test]
fn wait_after_a_cancel_returns_once_the_tasks_sigterm_handler_has_finished() {
    let mut c = Cluster::start("stopping", false);
    c.start_agent("a", 1, &["--kill-grace", "30s"]);
    c.wait_for_nodes(1);
    let started = c.dir.join("started");
    let done = c.dir.join("done");
    // (It ends by itself after 30 s, should the test fail and leave it behind.)
    let file = c.write(
        "tidy.toml",
        &format!(
            "[[application]]\nname = \"tidy\"\ntasks = 1\n[application.cpu]\n\
             command = [\"sh\", \"-c\", \"trap 'sleep 3; echo > {}; exit 0' TERM; echo > {}; \
             for i in $(seq 600); do sleep 0.05; done\"]\n",
            done.display(),
            started.display()
        ),
    );
    c.ok(&["submit", file.to_str().expect("path")]);
    wait_until("the task to start", Duration::from_secs(20), || {
        started.exists()
    });
    c.ok(&["cancel", "1"]);
    let j = c.json(&["job", "1"]);
    assert_eq!(
        (&j["state"], &j["stopping"]),
        (&"cancelled".into(), &1.into()),
        "{j}"
    );
    assert!(
        c.ok(&["job", "1"]).contains("cancelled (stopping 1)"),
        "{}",
        c.ok(&["job", "1"])
    );
    let listed = c.ok(&["jobs"]);
    assert!(listed.contains("cancelled (stopping 1)"), "{listed}");
    // A wait that times out first says why the job is not over.
    let out = c.cli(&["wait", "1", "--timeout", "500ms"]);
    assert_eq!(out.status.code(), Some(124));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("job 1 still cancelled (stopping 1)"), "{err}");
    assert!(!done.exists(), "the handler was still sleeping");
    // The wait returns (the job was cancelled: status 1) once the handler has finished.
    let out = c.cli(&["wait", "1"]);
    assert!(!out.status.success());
    assert!(
        done.exists(),
        "wait returned before the task's SIGTERM handler had finished"
    );
    let j = c.json(&["job", "1"]);
    assert_eq!(
        (&j["state"], &j["stopping"]),
        (&"cancelled".into(), &0.into()),
        "{j}"
    );
    assert!(
        c.tasks(1)[0]["usage"].is_object(),
        "its process's end is recorded"
    );
}

/// `requires` on the runtime (`submit --requires`, a job file's `requires`): the tasks run only
/// on agents whose configuration lists the attributes; one that no registered node has is refused
/// naming the flag; an agent restarted with other attributes has them.
#[test]
fn a_job_that_requires_an_attribute_runs_only_on_the_agents_that_have_it() {
    let mut c = Cluster::start("requires", false);
    c.start_agent("plain", 2, &[]);
    c.start_agent_with_config("fat", "cores = 2\nattributes = [\"bigmem\", \"ssd\"]\n");
    c.wait_for_nodes(2);
    // `hetsched nodes` shows what each node offers.
    let nodes = c.json(&["nodes"]);
    let offered = |name: &str| -> serde_json::Value {
        nodes
            .as_array()
            .and_then(|n| n.iter().find(|n| n["name"] == name))
            .map_or(serde_json::Value::Null, |n| n["attributes"].clone())
    };
    assert_eq!(
        offered("fat"),
        serde_json::json!(["bigmem", "ssd"]),
        "{nodes}"
    );
    assert_eq!(offered("plain"), serde_json::json!([]), "{nodes}");
    assert!(c.ok(&["nodes"]).contains("bigmem,ssd"));
    c.ok(&[
        "submit",
        "--tasks",
        "8",
        "--requires",
        "bigmem",
        "--wait",
        "--",
        "sleep",
        "0.1",
    ]);
    let nodes: BTreeSet<String> = c
        .tasks(1)
        .iter()
        .map(|t| t["node"].as_str().unwrap_or("").to_string())
        .collect();
    assert_eq!(nodes, BTreeSet::from(["fat".to_string()]));
    // `hetsched job` shows what each application requires.
    assert_eq!(
        c.json(&["job", "1"])["apps"][0]["requires"],
        serde_json::json!(["bigmem"])
    );
    // Without the requirement both nodes take tasks.
    c.ok(&["submit", "--tasks", "8", "--wait", "--", "sleep", "0.3"]);
    let nodes: BTreeSet<String> = c
        .tasks(2)
        .iter()
        .map(|t| t["node"].as_str().unwrap_or("").to_string())
        .collect();
    assert_eq!(nodes.len(), 2, "{nodes:?}");
    // A divisible load that requires `ssd` is planned on `fat` alone, and says so.
    let load = c.write(
        "ranges.toml",
        "[[divisible]]\nname = \"ranges\"\nunits = 40\ncommand = \"echo {start} {end}\"\noutput = \"concat\"\nrequires = [\"ssd\"]\n",
    );
    c.ok(&["submit", load.to_str().expect("utf-8"), "--wait"]);
    let j = c.json(&["job", "3"]);
    assert_eq!(j["state"], "completed", "{j}");
    assert_eq!(j["divisible"]["requires"], serde_json::json!(["ssd"]));
    let chunk_nodes: BTreeSet<&str> = j["divisible"]["chunks"]
        .as_array()
        .expect("chunks")
        .iter()
        .filter_map(|c| c["worker"].as_str())
        .chain(
            j["divisible"]["workers"]
                .as_array()
                .expect("workers")
                .iter()
                .filter_map(|w| w["name"].as_str()),
        )
        .collect();
    assert_eq!(chunk_nodes, BTreeSet::from(["fat"]), "{j}");
    assert!(c.ok(&["job", "3"]).contains("(on nodes with ssd)"));
    let nowhere = c.write(
        "nowhere.toml",
        "[[divisible]]\nname = \"nowhere\"\nunits = 4\ncommand = \"echo {start} {end}\"\nrequires = [\"fpga\"]\n",
    );
    c.refused(
        &["submit", nowhere.to_str().expect("utf-8")],
        "nowhere.toml:5:13: divisible[0].requires[0]: divisible load `nowhere` requires `fpga`, which no node has (attributes offered: bigmem, ssd)",
    );
    c.refused(
        &["submit", "--requires", "ssd,avx512", "--", "true"],
        "--requires: application `true` requires `avx512`, which no node has (attributes offered: bigmem, ssd)",
    );
    // The plain agent restarted with `--attributes avx512`: the same job is accepted and runs
    // there.
    c.kill_agent("plain");
    c.start_agent("plain", 2, &["--attributes", "avx512"]);
    wait_until(
        "the restarted agent's new attribute",
        Duration::from_secs(20),
        || {
            c.cli(&["submit", "--requires", "avx512", "--", "true"])
                .status
                .success()
        },
    );
    // The submission woke the node that can take the task, not the one with the most free
    // cores (which lacks `avx512`): it runs at once, not at plain's next idle beat (60 s).
    c.ok(&["wait", "4", "--timeout", "20s"]);
    assert_eq!(c.tasks(4)[0]["node"], "plain");
}

#[test]
fn example_job_files_are_valid_runtime_jobs() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples");
    let mut seen = 0;
    for entry in std::fs::read_dir(&dir).expect("examples") {
        let path = entry.expect("entry").path();
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("")
            .to_string();
        if !(name.starts_with("job-") && name.ends_with(".toml")) {
            continue;
        }
        let text = std::fs::read_to_string(&path).expect("read");
        let w = hetsched_core::input::workload::parse_workload(&name, &text)
            .unwrap_or_else(|e| panic!("{e}"));
        w.check_commands().unwrap_or_else(|e| panic!("{e}"));
        seen += 1;
    }
    assert!(seen >= 2, "examples/job-*.toml");
}

#[test]
fn agents_and_clients_speak_tls_when_the_server_has_a_certificate() {
    let mut c = Cluster::start_tls("tls");
    c.start_agent("secure", 2, &[]);
    c.wait_for_nodes(1);
    let job = c.write(
        "job.toml",
        "[[application]]\nname = \"t\"\ntasks = 4\n[application.cpu]\ncommand = \"true\"\n",
    );
    let out = c.cli(&["submit", job.to_str().expect("path"), "--wait"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Plain text to a TLS server fails.
    let out = Command::new(BIN)
        .args([
            "jobs",
            "--server",
            &format!("http://{}", c.listen),
            "--token-file",
        ])
        .arg(c.data().join("token"))
        .output()
        .expect("run");
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("use an https:// URL"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // `submit` does not retry that (it is not a lost answer) and says what to do.
    let started = Instant::now();
    let out = Command::new(BIN)
        .args(["submit", job.to_str().expect("path"), "--server"])
        .arg(format!("http://{}", c.listen))
        .arg("--token-file")
        .arg(c.data().join("token"))
        .output()
        .expect("run");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("https://") && !err.contains("retrying"),
        "{err}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "no retries with backoff"
    );
    // https:// without the CA, or with a file that holds no certificate, says what to give.
    let out = c
        .command(&["jobs"])
        .env_remove("HETSCHED_CA")
        .output()
        .expect("run");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("--ca FILE or HETSCHED_CA"),
        "{err}"
    );
    let out = c
        .command(&["jobs", "--ca"])
        .arg(c.data().join("token"))
        .output()
        .expect("run");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("holds no PEM certificate"), "{err}");
    // An agent given `http://` gets the same diagnosis and stops, instead of retrying for ever.
    let mut agent = Command::new(BIN)
        .args(["agent", "--server", &format!("http://{}", c.listen)])
        .args(["--name", "plain", "--cores", "1", "--token-file"])
        .arg(c.data().join("agent-token"))
        .arg("--work-dir")
        .arg(c.dir.join("agent-plain"))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn agent");
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(status) = agent.try_wait().expect("wait") {
            break Some(status);
        }
        if Instant::now() > deadline {
            let _ = agent.kill();
            break None;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let mut err = String::new();
    std::io::Read::read_to_string(&mut agent.stderr.take().expect("stderr"), &mut err)
        .expect("stderr");
    assert!(
        status.is_some_and(|s| !s.success()),
        "the agent kept retrying: {err}"
    );
    assert!(
        err.contains("speaks TLS: use an https:// URL with --ca"),
        "{err}"
    );
}

#[test]
fn the_http_listener_speaks_https_when_the_server_has_a_certificate() {
    let c = Cluster::start_tls_http("https");
    let (status, _, body) = c.http_get("/healthz");
    assert!(status.contains(" 200 "), "{status}");
    assert_eq!(body, "ok");
    let (status, headers, body) = c.http_get("/metrics");
    assert!(status.contains(" 200 "), "{status}");
    assert!(
        headers.contains("content-type: application/openmetrics-text"),
        "{headers}"
    );
    assert!(body.contains("hetsched_nodes{state=\"alive\"} 0"), "{body}");
    let (status, _, _) = c.http_request("GET /metrics HTTP/1.1\r\n", "");
    assert!(status.contains(" 401 "), "{status}");
    // The session cookie is marked Secure: a browser never sends it in clear.
    let token = std::fs::read_to_string(c.data().join("read-token")).expect("read-token");
    let (status, headers, _) = c.http_request(
        "POST /login HTTP/1.1\r\nContent-Type: application/x-www-form-urlencoded\r\n",
        &format!("token={}", token.trim()),
    );
    assert!(status.contains(" 303 "), "{status}");
    let cookie = headers
        .lines()
        .find(|l| l.starts_with("set-cookie: hetsched_session="))
        .unwrap_or_else(|| panic!("a session cookie in {headers}"));
    assert!(cookie.contains("; secure"), "{cookie}");
    let addr = std::fs::read_to_string(c.data().join("http-address")).expect("http-address");
    // Plain HTTP to it gets no page.
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr.trim()).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    write!(
        s,
        "GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .expect("send");
    let mut raw = Vec::new();
    let _ = s.read_to_end(&mut raw);
    assert!(
        !String::from_utf8_lossy(&raw).contains("ok"),
        "{}",
        String::from_utf8_lossy(&raw)
    );
}

/// An agent's `[[accelerator]]` tables follow the cluster file's rules, all entries together: a
/// node has at most 256 devices, refused at the entry that passes it, before any connection.
#[test]
fn an_agent_configuration_with_too_many_accelerators_is_refused_at_its_line() {
    use std::os::unix::fs::PermissionsExt;
    let dir = crate::support::temp_dir("agent-accels");
    let token = dir.join("agent-token");
    std::fs::write(&token, "t0k3n\n").expect("token");
    std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o600)).expect("mode");
    let config = dir.join("agent.toml");
    std::fs::write(
        &config,
        "cores = 4\n[[accelerator]]\nkind = \"a\"\ncount = 200\n\
         [[accelerator]]\nkind = \"b\"\ncount = 200\n",
    )
    .expect("config");
    let out = Command::new(BIN)
        .args(["agent", "--server", "http://127.0.0.1:9", "--config"])
        .arg(&config)
        .arg("--token-file")
        .arg(&token)
        .arg("--work-dir")
        .arg(dir.join("work"))
        .output()
        .expect("run");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("agent.toml:7:9: accelerator[1].count: 400 accelerators on the node"),
        "{err}"
    );
}

#[test]
fn gpu_tasks_go_to_declared_gpus_with_cuda_visible_devices_set() {
    let mut c = Cluster::start("gpus", false);
    c.start_agent_with_config(
        "gpu-box",
        "cores = 4\nmemory = \"8GiB\"\n[[accelerator]]\nkind = \"test-gpu\"\ncount = 2\n",
    );
    c.wait_for_nodes(1);
    let nodes = c.json(&["nodes"]);
    assert_eq!(
        nodes[0]["accelerators"].as_array().map(Vec::len),
        Some(2),
        "{nodes}"
    );
    let log = c.dir.join("gpu.log");
    let job = c.write(
        "job.toml",
        &format!(
            "[[application]]\nname = \"cuda\"\ntasks = 4\n[application.gpu]\nkind = \"test-gpu\"\n\
             command = \"echo {{index}} $CUDA_VISIBLE_DEVICES $HETSCHED_VARIANT $CUDA_DEVICE_ORDER >> {}; sleep 0.1\"\n",
            log.display()
        ),
    );
    // The agent sets the device order for every task, so a job may not set its own: refused
    // at submission, naming the variable (before, the job's was dropped without a word).
    let mine = c.write(
        "order.toml",
        &(std::fs::read_to_string(&job).expect("job")
            + "env = { CUDA_DEVICE_ORDER = \"FASTEST_FIRST\" }\n"),
    );
    c.refused(
        &["submit", mine.to_str().expect("path")],
        "variable `CUDA_DEVICE_ORDER` is set by the agent for every task",
    );
    let out = c.cli(&["submit", job.to_str().expect("path"), "--wait"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let ran = lines(&log);
    assert_eq!(ran.len(), 4, "{ran:?}");
    for l in &ran {
        let f: Vec<&str> = l.split_whitespace().collect();
        assert!(
            matches!(f.get(1), Some(&"0") | Some(&"1")),
            "one device each: {l}"
        );
        assert_eq!(f.get(2), Some(&"gpu"), "{l}");
        // The agent's device numbers are NVML's, in PCI bus order: CUDA must count them so,
        // or a node with two kinds of GPU hands a task the other device.
        assert_eq!(f.get(3), Some(&"PCI_BUS_ID"), "{l}");
    }
    let tasks = c.json(&["tasks", "--job", "1"]);
    assert!(
        tasks.as_array().is_some_and(|ts| ts
            .iter()
            .all(|t| t["variant"] == "gpu" && t["devices"].as_array().map(Vec::len) == Some(1))),
        "{tasks}"
    );
    // `hetsched update --gpu-kind`: a held job's GPU kind, shown per task; `any` for any kind.
    c.ok(&["submit", job.to_str().expect("path"), "--hold"]);
    assert!(c.ok(&["job", "2"]).contains("1 core, 1 GPU (test-gpu)"));
    let said = c.ok(&["update", "2", "--gpu-kind", "any"]);
    assert!(said.ends_with(", GPUs of any kind\n"), "{said}");
    assert_eq!(c.json(&["job", "2"])["apps"][0]["gpu_kind"], "");
    assert!(
        c.ok(&["update", "2", "--gpu-kind", "test-gpu"])
            .ends_with(", GPUs of kind test-gpu\n")
    );
    c.ok(&["release", "2"]);
    c.cli(&["wait", "2", "--timeout", "20s"]);
    assert_eq!(c.json(&["job", "2"])["counts"]["succeeded"], 4);
}

/// A GPU split into MIG instances: CUDA programs see an instance only by its UUID, so the agent
/// declares them with `visible`, and a task given one finds its UUID in `CUDA_VISIBLE_DEVICES`
/// (a device declared without a name still goes by its index).
#[test]
fn gpu_tasks_on_declared_mig_instances_see_their_uuids() {
    let mut c = Cluster::start("mig", false);
    c.start_agent_with_config(
        "h100",
        "cores = 4\nmemory = \"8GiB\"\n\
         [[accelerator]]\nkind = \"h100-1g\"\nmemory = \"10GiB\"\n\
         visible = [\"MIG-4f1c-0001\", \"MIG-4f1c-0002\"]\n\
         [[accelerator]]\nkind = \"h100-3g\"\nmemory = \"40GiB\"\n",
    );
    c.wait_for_nodes(1);
    let nodes = c.json(&["nodes"]);
    assert_eq!(
        nodes[0]["accelerators"].as_array().map(Vec::len),
        Some(3),
        "{nodes}"
    );
    let log = c.dir.join("mig.log");
    let job = |kind: &str| {
        c.write(
            &format!("{kind}.toml"),
            &format!(
                "[[application]]\nname = \"{kind}\"\ntasks = 4\n[application.gpu]\n\
                 kind = \"{kind}\"\ncommand = \"echo {kind} $CUDA_VISIBLE_DEVICES >> {}; sleep 0.1\"\n",
                log.display()
            ),
        )
    };
    for kind in ["h100-1g", "h100-3g"] {
        let out = c.cli(&["submit", job(kind).to_str().expect("path"), "--wait"]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let ran = lines(&log);
    assert_eq!(ran.len(), 8, "{ran:?}");
    for l in &ran {
        let f: Vec<&str> = l.split_whitespace().collect();
        match f.first() {
            Some(&"h100-1g") => assert!(
                matches!(f.get(1), Some(&"MIG-4f1c-0001") | Some(&"MIG-4f1c-0002")),
                "one MIG instance each, by its UUID: {l}"
            ),
            _ => assert_eq!(f.get(1), Some(&"2"), "the unnamed device by its index: {l}"),
        }
    }
    // Listings name devices by index; the agent's log says which instance each index is.
    let log = c.agent_log("h100");
    assert!(
        log.contains("device 1 (h100-1g): tasks see it as `MIG-4f1c-0002`")
            && !log.contains("device 2 ("),
        "{log}"
    );
}

/// Parses OpenMetrics / Prometheus text: every sample's family has `# TYPE` and `# HELP`, every
/// value is a number, the text ends with `# EOF`. Returns sample (name with labels) → value.
fn parse_exposition(text: &str) -> BTreeMap<String, f64> {
    let mut types = BTreeMap::new();
    let mut helps = BTreeSet::new();
    let mut samples = BTreeMap::new();
    assert_eq!(text.lines().last(), Some("# EOF"), "ends with # EOF");
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').expect("# TYPE name kind");
            assert!(
                [
                    "counter",
                    "gauge",
                    "histogram",
                    "info",
                    "summary",
                    "unknown"
                ]
                .contains(&kind),
                "{line}"
            );
            assert!(
                types.insert(name.to_string(), kind.to_string()).is_none(),
                "one # TYPE per family: {line}"
            );
        } else if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, help) = rest.split_once(' ').expect("# HELP name text");
            assert!(!help.trim().is_empty(), "{line}");
            helps.insert(name.to_string());
        } else if line.starts_with('#') || line.is_empty() {
            continue;
        } else {
            let name_end = line.find(['{', ' ']).expect("name then labels or value");
            let name = &line[..name_end];
            let after_labels = match line[name_end..].strip_prefix('{') {
                Some(r) => r.split_once('}').expect("closing brace").1,
                None => &line[name_end..],
            };
            let value: f64 = after_labels
                .split_whitespace()
                .next()
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| panic!("numeric value: {line}"));
            let family = if types.contains_key(name) {
                name
            } else {
                ["_total", "_bucket", "_count", "_sum", "_created", "_info"]
                    .iter()
                    .find_map(|s| name.strip_suffix(s).filter(|f| types.contains_key(*f)))
                    .unwrap_or_else(|| panic!("no # TYPE for the sample {line}"))
            };
            assert!(helps.contains(family), "no # HELP for {family}");
            assert!(name.starts_with("hetsched_"), "prefixed: {line}");
            samples.insert(line[..line.len() - after_labels.len()].to_string(), value);
        }
    }
    samples
}

#[test]
fn metrics_over_http_match_a_finished_job() {
    let mut c = Cluster::start("metrics", true);
    let (status, _, body) = c.http_get("/healthz");
    assert!(status.contains(" 200 "), "{status}");
    assert_eq!(body, "ok");
    c.start_agent("a", 2, &[]);
    c.start_agent("b", 2, &[]);
    c.wait_for_nodes(2);
    let job = c.write(
        "job.toml",
        "[[application]]\nname = \"noop\"\ntasks = 20\n[application.cpu]\n\
         command = \"awk 'BEGIN { for (i = 0; i < 3000000; i++) s += i }'\"\n",
    );
    let out = c.cli(&["submit", job.to_str().expect("path"), "--wait"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Metrics name nodes and show load: never to a caller without a token.
    let (status, headers, body) = c.http_request("GET /metrics HTTP/1.1\r\n", "");
    assert!(status.contains(" 401 "), "{status}");
    assert!(headers.contains("www-authenticate: bearer"), "{headers}");
    assert!(!body.contains("hetsched_"), "{body}");
    let (status, _, _) = c.http_request(
        "GET /metrics HTTP/1.1\r\nAuthorization: Bearer not-the-token\r\n",
        "",
    );
    assert!(status.contains(" 401 "), "{status}");
    let (status, headers, body) = c.http_get("/metrics");
    assert!(status.contains(" 200 "), "{status}");
    assert!(
        headers.contains("content-type: application/openmetrics-text"),
        "{headers}"
    );
    // Over plain HTTP the session cookie cannot be Secure (the browser would drop it).
    let token = std::fs::read_to_string(c.data().join("read-token")).expect("read-token");
    let (_, login, _) = c.http_request(
        "POST /login HTTP/1.1\r\nContent-Type: application/x-www-form-urlencoded\r\n",
        &format!("token={}", token.trim()),
    );
    assert!(
        login.contains("set-cookie: hetsched_session=") && !login.contains("secure"),
        "{login}"
    );
    let m = parse_exposition(&body);
    let get = |k: &str| {
        m.get(k)
            .copied()
            .unwrap_or_else(|| panic!("no {k} in\n{body}"))
    };
    for (state, n) in [
        ("succeeded", 20.0),
        ("pending", 0.0),
        ("running", 0.0),
        ("failed", 0.0),
        ("cancelled", 0.0),
    ] {
        assert_eq!(
            get(&format!("hetsched_tasks{{state=\"{state}\"}}")),
            n,
            "{state}"
        );
    }
    assert_eq!(
        get("hetsched_tasks_dispatched_total{variant=\"cpu\"}"),
        20.0
    );
    assert_eq!(get("hetsched_tasks_dispatched_total{variant=\"gpu\"}"), 0.0);
    assert_eq!(
        get("hetsched_task_results_total{outcome=\"succeeded\"}"),
        20.0
    );
    assert_eq!(get("hetsched_task_results_total{outcome=\"failed\"}"), 0.0);
    assert_eq!(get("hetsched_jobs_submitted_total"), 1.0);
    assert_eq!(get("hetsched_nodes{state=\"alive\"}"), 2.0);
    assert_eq!(get("hetsched_nodes{state=\"dead\"}"), 0.0);
    assert_eq!(get("hetsched_policy_info{policy=\"hdas\"}"), 1.0);
    for node in ["a", "b"] {
        assert_eq!(
            get(&format!("hetsched_node_free_cores{{node=\"{node}\"}}")),
            2.0
        );
        assert_eq!(
            get(&format!("hetsched_node_running_tasks{{node=\"{node}\"}}")),
            0.0
        );
        assert_eq!(get(&format!("hetsched_node_up{{node=\"{node}\"}}")), 1.0);
    }
    assert!(get("hetsched_heartbeats_total") >= 2.0);
    assert!(get("hetsched_heartbeat_duration_seconds_count") >= 2.0);
    assert!(get("hetsched_scheduler_decision_duration_seconds_count") >= 1.0);
    assert!(get("hetsched_heartbeat_duration_seconds_bucket{le=\"+Inf\"}") >= 2.0);
    // The tasks' CPU time, as their agents measured it, adds up in the counter.
    let tasks = c.json(&["tasks", "--job", "1"]);
    let sum = |key: &str| -> f64 {
        tasks
            .as_array()
            .expect("tasks")
            .iter()
            .map(|t| t["usage"][key].as_u64().expect("measured") as f64 / 1e3)
            .sum()
    };
    for (mode, key) in [("user", "cpu_user_ms"), ("system", "cpu_system_ms")] {
        let counted = get(&format!(
            "hetsched_task_cpu_seconds_total{{mode=\"{mode}\"}}"
        ));
        assert!(
            (counted - sum(key)).abs() < 1e-6,
            "{mode}: {counted} s counted, {} s listed",
            sum(key)
        );
    }
    assert!(
        sum("cpu_user_ms") + sum("cpu_system_ms") > 0.0,
        "20 busy loops used some CPU"
    );
}

// ---------------------------------------------------------------- hardening (issue 10)

/// Runs `hetsched agent` with `args` (plus the cluster's server URL) until it exits by itself,
/// bounded: (success, stderr).
fn agent_exits(c: &Cluster, args: &[&str], env: &[(&str, &Path)]) -> (bool, String) {
    let mut child = Command::new(BIN)
        .args(["agent", "--server", &c.url()])
        .args(args)
        .envs(env.iter().map(|(k, v)| (*k, *v)))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn agent");
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().expect("wait") {
            let out = child.wait_with_output().expect("output");
            return (
                status.success(),
                String::from_utf8_lossy(&out.stderr).into_owned(),
            );
        }
        if start.elapsed() > Duration::from_secs(20) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the agent did not exit: {args:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn an_agent_with_the_client_token_is_refused_and_the_data_directory_is_private() {
    use std::os::unix::fs::PermissionsExt;
    let c = Cluster::start("roles", false);
    let client_token = c.data().join("token");
    let work = c.dir.join("w");
    let (ok, err) = agent_exits(
        &c,
        &[
            "--name",
            "intruder",
            "--token-file",
            client_token.to_str().expect("path"),
            "--work-dir",
            work.to_str().expect("path"),
        ],
        &[],
    );
    assert!(!ok);
    assert!(
        err.contains("the server refused this agent") && err.contains("agent-token"),
        "{err}"
    );
    assert!(c.json(&["nodes"]).as_array().is_some_and(Vec::is_empty));
    // The agent token cannot read jobs.
    let out = Command::new(BIN)
        .args(["jobs", "--server", &c.url(), "--token-file"])
        .arg(c.data().join("agent-token"))
        .output()
        .expect("run");
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("cannot call the client service"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mode = |p: PathBuf| std::fs::metadata(&p).expect("meta").permissions().mode() & 0o777;
    assert_eq!(mode(c.data()), 0o700);
    for f in ["token", "agent-token", "state.db"] {
        assert_eq!(mode(c.data().join(f)), 0o600, "{f}");
    }
    // `--ca` with a plain http:// URL would send the token in clear: refused.
    let out = c.cli(&["jobs", "--ca", tls_file("ca.pem").to_str().expect("path")]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("not https://"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // https:// to this plain server says it does not speak TLS.
    let out = c.cli(&[
        "jobs",
        "--server",
        &format!("https://{}", c.listen),
        "--ca",
        tls_file("ca.pem").to_str().expect("path"),
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("does not speak TLS; use an http:// URL"),
        "{err}"
    );
}

#[test]
fn a_second_agent_under_a_live_nodes_name_is_refused_and_the_first_keeps_its_tasks() {
    let mut c = Cluster::start("same-name", false);
    c.start_agent("host", 2, &[]);
    c.wait_for_nodes(1);
    let token = c.data().join("agent-token");
    let other = c.dir.join("other-work-dir");
    let (ok, err) = agent_exits(
        &c,
        &[
            "--name",
            "host",
            "--token-file",
            token.to_str().expect("path"),
            "--work-dir",
            other.to_str().expect("path"),
        ],
        &[],
    );
    assert!(!ok);
    assert!(
        err.contains("node name `host` is held by a live agent"),
        "{err}"
    );
    let job = c.write(
        "job.toml",
        "[[application]]\nname = \"t\"\ntasks = 4\n[application.cpu]\ncommand = \"sleep 0.2\"\n",
    );
    let out = c.cli(&["submit", job.to_str().expect("path"), "--wait"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let tasks = c.json(&["tasks", "--job", "1"]);
    assert!(
        tasks
            .as_array()
            .expect("tasks")
            .iter()
            .all(|t| t["attempt"] == 1),
        "no task was lost to the second agent: {tasks}"
    );
}

#[test]
fn the_default_work_directory_is_private_and_a_symlinked_one_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let mut c = Cluster::start("work-dirs", false);
    let state = c.dir.join("state");
    let token = c.data().join("agent-token");
    let child = Command::new(BIN)
        .args([
            "agent",
            "--server",
            &c.url(),
            "--name",
            "dflt",
            "--token-file",
        ])
        .arg(&token)
        .env("XDG_STATE_HOME", &state)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn");
    c.agents.insert("dflt".into(), child);
    c.wait_for_nodes(1);
    let work = state.join("hetsched/agent-dflt");
    let meta = std::fs::metadata(&work).expect("default work dir");
    assert_eq!(meta.permissions().mode() & 0o777, 0o700);
    assert!(work.join("identity").exists());
    c.kill_agent("dflt");
    // Another user's trick: a symlink where the work directory should be.
    let target = c.dir.join("victim");
    std::fs::create_dir_all(&target).expect("victim");
    let link = c.dir.join("linked");
    std::os::unix::fs::symlink(&target, &link).expect("symlink");
    let (ok, err) = agent_exits(
        &c,
        &[
            "--name",
            "linked",
            "--token-file",
            token.to_str().expect("path"),
            "--work-dir",
            link.to_str().expect("path"),
        ],
        &[],
    );
    assert!(!ok);
    assert!(err.contains("symbolic link"), "{err}");
    assert!(
        std::fs::read_dir(&target).expect("victim").next().is_none(),
        "nothing written through the link"
    );
}

#[test]
fn a_one_mebibyte_command_is_refused_and_64_tasks_of_a_60_kb_command_all_succeed() {
    let mut c = Cluster::start("big-commands", false);
    c.start_agent("wide", 64, &[]);
    c.wait_for_nodes(1);
    let huge = c.write(
        "huge.toml",
        &format!(
            "[[application]]\nname = \"h\"\ntasks = 1\n[application.cpu]\ncommand = \"true #{}\"\n",
            "x".repeat(1 << 20)
        ),
    );
    let out = c.cli(&["submit", huge.to_str().expect("path")]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("application[0].cpu.command: the command is 1048582 bytes; at most 65536"),
        "{err}"
    );
    let wide = c.write(
        "wide.toml",
        &format!(
            "[[application]]\nname = \"w\"\ntasks = 64\n[application.cpu]\ncommand = \"test {{index}} -ge 0 #{}\"\n",
            "x".repeat(60_000)
        ),
    );
    let out = c.cli(&["submit", wide.to_str().expect("path"), "--wait"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(c.succeeded(1), 64);
    let tasks = c.json(&["tasks", "--job", "1"]);
    assert!(
        tasks
            .as_array()
            .expect("tasks")
            .iter()
            .all(|t| t["attempt"] == 1),
        "every task ran once: {tasks}"
    );
}

#[test]
fn tasks_pages_through_a_long_listing() {
    let c = Cluster::start("pages", false);
    let job = c.write(
        "many.toml",
        "[[application]]\nname = \"m\"\ntasks = 2500\n[application.cpu]\ncommand = \"true\"\n",
    );
    let out = c.cli(&["submit", job.to_str().expect("path")]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let all = c.json(&["tasks", "--job", "1"]);
    let ids: Vec<u64> = all
        .as_array()
        .expect("array")
        .iter()
        .filter_map(|t| t["id"].as_u64())
        .collect();
    assert_eq!(ids, (0..2500).collect::<Vec<u64>>(), "three pages, joined");
    let some = c.json(&["tasks", "--job", "1", "--limit", "5"]);
    assert_eq!(some.as_array().map(Vec::len), Some(5));
    let out = c.cli(&["tasks", "--job", "1", "--limit", "1200"]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        text.matches(" pending ").count(),
        1200,
        "a table per page, every row"
    );
}

#[test]
fn a_dead_node_can_be_removed_and_a_live_one_cannot() {
    let mut c = Cluster::start("node-remove", false);
    c.start_agent("gone", 1, &[]);
    c.start_agent("gone2", 1, &[]);
    c.start_agent("stays", 1, &[]);
    c.wait_for_nodes(3);
    // Several at once, as `node drain` takes them: each in turn, past a refusal.
    c.kill_agent("gone2");
    c.wait_for_nodes(2);
    let out = c.cli(&["node", "remove", "gone2,stays"]);
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        !out.status.success() && said.contains("node `gone2` (id ") && said.contains(") removed"),
        "{said}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = c.cli(&["node", "remove", "stays"]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("is alive"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    c.kill_agent("gone");
    c.wait_for_nodes(1); // the dead timeout is 1 s
    let out = c.cli(&["node", "remove", "gone"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let nodes = c.json(&["nodes"]);
    let names: Vec<&str> = nodes
        .as_array()
        .expect("nodes")
        .iter()
        .filter_map(|n| n["name"].as_str())
        .collect();
    assert_eq!(names, ["stays"]);
}

#[test]
fn results_of_tasks_that_ended_while_the_server_was_down_survive_an_agent_sigkill() {
    let mut c = Cluster::start("results-survive", false);
    c.start_agent("n", 2, &[]);
    c.wait_for_nodes(1);
    let marks = c.dir.join("marks");
    let starts = c.dir.join("starts");
    let job = c.write(
        "job.toml",
        &format!(
            "[[application]]\nname = \"s\"\ntasks = 2\n[application.cpu]\ncommand = \"echo {{index}} >> {}; sleep 1; echo {{index}} >> {}\"\n",
            starts.display(),
            marks.display()
        ),
    );
    submit_plain(&c, &job);
    // Their processes started (`running` says they were sent: under load the agent may not
    // have the tasks' specs yet, and asks the server for them).
    wait_until("both tasks to start", Duration::from_secs(20), || {
        lines(&starts).len() == 2
    });
    c.kill_server();
    wait_until("both tasks to end", Duration::from_secs(20), || {
        lines(&marks).len() == 2
    });
    std::thread::sleep(Duration::from_millis(300)); // the agent records the results
    c.kill_agent("n"); // SIGKILL: the results were never acknowledged
    c.start_server();
    c.start_agent("n", 2, &[]);
    let out = c.cli(&["wait", "1", "--timeout", "30s"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(lines(&marks).len(), 2, "no task ran again");
    let tasks = c.json(&["tasks", "--job", "1"]);
    assert!(
        tasks
            .as_array()
            .expect("tasks")
            .iter()
            .all(|t| t["attempt"] == 1 && t["state"] == "succeeded"),
        "{tasks}"
    );
}

#[test]
fn bench_dispatch_measures_the_scheduler_alone_and_the_servers_cpu() {
    // Enough tasks that the server's CPU time spans several of /proc's 10 ms ticks: 300 tasks
    // took 19 ms once wake-ups and TCP_NODELAY sped dispatch up, and measured 0 ticks.
    let out = Command::new(BIN)
        .args([
            "bench-dispatch",
            "--tasks",
            "3000",
            "--scheduler-only",
            "--json",
        ])
        .output()
        .expect("run");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(v["succeeded"], 3000, "{v}");
    assert_eq!(v["scheduler_only"], true, "{v}");
    assert!(
        v["server_cpu_seconds"].as_f64().is_some_and(|s| s > 0.0),
        "{v}"
    );
}

/// Bytes of the server's store (database and write-ahead log).
fn store_bytes(c: &Cluster) -> u64 {
    ["state.db", "state.db-wal"]
        .iter()
        .filter_map(|f| std::fs::metadata(c.data().join(f)).ok())
        .map(|m| m.len())
        .sum()
}

/// Purge and the `[retention]` rule drop every kind of finished job, not only batch jobs: a
/// divisible job's rows and files (its input copy, chunk outputs, gathered output) and a
/// workflow's instance rows go; ids are never given twice and a purged job's submission key
/// keeps naming it, across a restart; a running job of either kind refuses.
#[test]
fn purge_drops_finished_divisible_jobs_and_workflows_their_files_and_keeps_ids_and_keys() {
    // Idle agents beat every second (not 60 s), so they learn of a purge at once.
    let mut c = Cluster::start_configured(
        "purge-kinds",
        false,
        "idle_heartbeat_interval = \"1s\"\n[retention]\nkeep_jobs = 2\n",
    );
    c.start_agent("a", 2, &[]);
    c.wait_for_nodes(1);
    std::fs::write(c.dir.join("in.bin"), vec![7u8; 64]).expect("input");
    let divisible = c.write(
        "div.toml",
        "[[divisible]]\nname = \"d\"\nunits = 16\ninput = \"in.bin\"\nunit_bytes = 4\n\
         command = \"wc -c < {input} # {start} {end}\"\n",
    );
    let workflow = c.write(
        "wf.toml",
        "[[task]]\nname = \"gen\"\ninstances = \"1..=3\"\noutputs = [\"n\"]\n\
         command = \"echo {index} > {output:n}\"\n\
         [[task]]\nname = \"sum\"\ninstances = 1\ninputs = [\"n\"]\ncommand = \"cat {input:n}\"\n",
    );
    let path = |p: &std::path::Path| p.to_str().expect("path").to_string();
    // Job 1: divisible; job 2: a workflow submitted under a key; job 3: a long divisible job.
    c.ok(&["submit", "--wait", &path(&divisible)]);
    c.ok(&[
        "submit",
        "--wait",
        "--submission-key",
        "wf-key",
        &path(&workflow),
    ]);
    let job_dir = c.data().join("divisible").join("job-1");
    assert!(job_dir.join("output").exists(), "job 1's files");
    // What the jobs left with the agent: job 1's chunk files, job 2's instance outputs.
    let agent = c.dir.join("agent-a");
    let (chunks_1, outputs_2) = (agent.join("divisible/job-1"), agent.join("wf/2"));
    assert!(chunks_1.is_dir() && outputs_2.is_dir(), "the agent's files");
    let long = c.write(
        "long.toml",
        "[[divisible]]\nname = \"l\"\nunits = 4\n\
         command = \"trap 'echo stopped >&2; exit 9' TERM; echo started >&2; sleep 30 & wait # {start} {end}\"\n",
    );
    c.ok(&["submit", &path(&long)]);
    wait_until(
        "job 3's first chunk to start",
        Duration::from_secs(30),
        || String::from_utf8_lossy(&c.cli(&["log", "3", "0", "--stderr"]).stdout) == "started\n",
    );
    c.refused(&["purge", "3"], "job 3 is not finished (0 of 4 units done)");
    // Named: the divisible job; its rows and files go.
    assert!(c.ok(&["purge", "1"]).contains("purged 1 job (16 tasks): 1"));
    assert!(!job_dir.exists(), "job 1's files are gone");
    wait_until(
        "the agent to delete job 1's chunk files",
        Duration::from_secs(20),
        || !chunks_1.exists(),
    );
    assert!(
        outputs_2.is_dir() && agent.join("divisible/job-3").is_dir(),
        "jobs not purged keep theirs"
    );
    c.refused(&["job", "1"], "no job 1");
    assert!(
        c.ok(&["purge", "1"])
            .contains("already purged (nothing to do): 1")
    );
    c.refused(&["output", "1"], "no job 1");
    c.refused(
        &["output", "2"],
        "job 2 is a workflow job: `hetsched output` gathers",
    );
    // By the rule's count across kinds: the workflow (2) is kept while it is among the 2 most
    // recently finished; cancel job 3 and submit a 4th (finished) job, then the rule keeps
    // only 3 and 4 and purges 2.
    c.ok(&["cancel", "3"]);
    c.ok(&["submit", "--wait", &path(&divisible)]);
    // The cancel stopped job 3's running chunk (SIGTERM to its process group), so job 4 did
    // not wait 30 s for the agent.
    assert_eq!(c.ok(&["log", "3", "0", "--stderr"]), "started\nstopped\n");
    let chunks = c.json(&["job", "3"])["divisible"]["chunks"].clone();
    assert_eq!(chunks[0]["state"], "stopped", "{chunks}");
    wait_until(
        "the retention rule to purge job 2",
        Duration::from_secs(30),
        || !c.cli(&["job", "2"]).status.success(),
    );
    let listed: Vec<u64> = c
        .json(&["jobs"])
        .as_array()
        .expect("jobs")
        .iter()
        .filter_map(|j| j["id"].as_u64())
        .collect();
    assert_eq!(listed, vec![3, 4]);
    wait_until(
        "the agent to delete the purged workflow's outputs",
        Duration::from_secs(20),
        || !outputs_2.exists(),
    );
    assert!(
        agent.join("divisible/job-4").is_dir(),
        "job 4 keeps its files"
    );
    // After a restart: ids go on from 5, the purged workflow's key still names job 2 and runs
    // nothing, and the purged jobs stay gone.
    c.kill_server();
    c.start_server();
    let again = c.json(&["submit", "--submission-key", "wf-key", &path(&workflow)]);
    assert_eq!(again["job_id"], 2, "{again}");
    assert_eq!(again["existing"], true, "{again}");
    c.refused(&["job", "2"], "no job 2");
    c.refused(&["job", "1"], "no job 1");
    let next = c.json(&["submit", &path(&divisible)]);
    assert_eq!(next["job_id"], 5, "{next}");
}

#[test]
fn purge_removes_finished_jobs_from_listings_and_store_and_the_server_restarts() {
    // Idle agents beat every 60 s (the default); a purge wakes them to beat at once.
    let mut c = Cluster::start("purge", false);
    // Job 1: 20,000 tasks, cancelled before any node came (finished: every task cancelled).
    let big = c.write(
        "big.toml",
        "[[application]]\nname = \"big\"\ntasks = 20000\n[application.cpu]\ncommand = \"true\"\n",
    );
    let out = c.cli(&["submit", big.to_str().expect("path")]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(c.cli(&["cancel", "1"]).status.success());
    // Job 2 runs to completion on an agent.
    c.start_agent("a", 2, &[]);
    c.wait_for_nodes(1);
    let small = c.write(
        "small.toml",
        "[[application]]\nname = \"small\"\ntasks = 4\n[application.cpu]\ncommand = \"echo {index}\"\n",
    );
    let out = c.cli(&["submit", "--wait", small.to_str().expect("path")]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let jobs = c.json(&["jobs"]);
    assert_eq!(jobs.as_array().map(Vec::len), Some(2));
    assert!(
        c.dir.join("agent-a/job-2").is_dir(),
        "job 2's task outputs on the agent"
    );
    let before = store_bytes(&c);
    // The agent's token may not purge; an unknown job is named.
    let out = Command::new(BIN)
        .args(["purge", "--keep", "0"])
        .env("HETSCHED_SERVER", c.url())
        .env("HETSCHED_TOKEN_FILE", c.data().join("agent-token"))
        .output()
        .expect("run hetsched");
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("refused this call"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = c.cli(&["purge", "7"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no job 7"));
    let out = c.cli(&["purge"]);
    assert!(!out.status.success(), "purge needs a selection");
    // Purge job 2 by id, then every job finished at least 0 s ago.
    let out = c.cli(&["purge", "2"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("purged 1 job (4 tasks): 2"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    // Named again, it says it was purged (not an id never given), wherever a job is named.
    for args in [vec!["job", "2"], vec!["log", "2", "0"], vec!["cancel", "2"]] {
        c.refused(
            &args,
            "no job 2: it was purged (by `hetsched purge` or the `[retention]` rule)",
        );
    }
    // The agent deletes the purged job's task outputs: nothing can read them any more.
    let outputs = c.dir.join("agent-a").join("job-2");
    wait_until(
        "the agent to delete job 2's task outputs (woken, well before its 60 s idle beat)",
        Duration::from_secs(10),
        || !outputs.exists(),
    );
    // A purge retried (its reply lost) does nothing for the purged job and purges the rest.
    let reply = c.json(&["purge", "2,1"]);
    assert_eq!(reply["purged"], serde_json::json!([1]), "{reply}");
    assert_eq!(reply["already_purged"], serde_json::json!([2]), "{reply}");
    assert!(
        c.ok(&["purge", "1"])
            .contains("already purged (nothing to do): 1"),
        "said so"
    );
    assert_eq!(c.json(&["jobs"]).as_array().map(Vec::len), Some(0));
    assert!(!c.cli(&["job", "1"]).status.success());
    let after = store_bytes(&c);
    assert!(
        after * 2 < before,
        "the store shrank: {before} bytes before the purge, {after} after"
    );
    // A restart reads the purged store; new jobs take new ids and run.
    c.kill_server();
    c.start_server();
    assert_eq!(c.json(&["jobs"]).as_array().map(Vec::len), Some(0));
    let out = c.cli(&["submit", "--wait", small.to_str().expect("path")]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let jobs = c.json(&["jobs"]);
    assert_eq!(jobs[0]["id"], 3, "{jobs}");
    assert_eq!(jobs[0]["state"], "completed", "{jobs}");
    // `last` names the newest job, as for the other commands.
    let said = c.ok(&["purge", "last"]);
    assert!(said.contains("purged 1 job (4 tasks): 3"), "{said}");
    // A range purges the finished jobs in it and leaves the unfinished (job 5 is held).
    c.ok(&["submit", "--wait", small.to_str().expect("path")]);
    c.ok(&["submit", "--hold", small.to_str().expect("path")]);
    let said = c.ok(&["purge", "4-5"]);
    assert!(said.contains("purged 1 job (4 tasks): 4"), "{said}");
    assert_eq!(c.json(&["job", "5"])["state"], "pending");
    // As `jobs` lists it: held, not pending.
    let shown = c.ok(&["job", "5"]);
    assert!(
        shown.starts_with("job 5 (") && shown.contains("): held — "),
        "{shown}"
    );
    c.refused(
        &["purge", "5-9"],
        "`5-9`: the server lists no finished job in this range",
    );
    c.refused(
        &["purge", "all"],
        "`--older-than 0s` purges every finished job",
    );
}

#[test]
fn a_command_after_the_double_dash_is_a_job_of_indexed_tasks_and_its_mistakes_name_the_flag() {
    let mut c = Cluster::start("command-jobs", false);
    c.start_agent("a", 4, &[]);
    c.wait_for_nodes(1);
    // A program and its arguments, `{index}` replaced in each task; tasks run where `submit` ran.
    let out = c.cli(&[
        "submit",
        "--tasks",
        "3",
        "--env",
        "GREETING=hi",
        "--wait",
        "--",
        "sh",
        "-c",
        "echo \"$GREETING {index}\" > out-{index}.txt",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for i in 0..3 {
        let text = std::fs::read_to_string(c.dir.join(format!("out-{i}.txt"))).expect("output");
        assert_eq!(text, format!("hi {i}\n"));
        // Nothing to warn about: `{index}` is a placeholder.
        assert!(!String::from_utf8_lossy(&out.stderr).contains("warning"));
    }
    // A shell line with a retry after a time limit.
    let out = c.cli(&[
        "submit",
        "--shell",
        "--retries",
        "1",
        "--time-limit",
        "300ms",
        "--name",
        "second try",
        "--wait",
        "--",
        "if [ $HETSCHED_ATTEMPT = 1 ]; then sleep 30; fi; echo done > s.txt",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        c.tasks(2)[0]["attempt"],
        2,
        "the first attempt hit the limit"
    );
    let jobs = c.json(&["jobs"]);
    let names: Vec<&str> = jobs
        .as_array()
        .expect("jobs")
        .iter()
        .filter_map(|j| j["name"].as_str())
        .collect();
    assert_eq!(
        names,
        ["sh", "second try"],
        "named after the program, not the command line every user lists: {jobs}"
    );
    assert_eq!(c.tasks(1)[0]["app"], "sh", "named after the program");
    // `-`: a job file on standard input, errors located in it as in a file.
    let from_stdin = |text: &str| {
        let mut child = c
            .command(&["submit", "-", "--wait"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("submit -");
        std::io::Write::write_all(&mut child.stdin.take().expect("stdin"), text.as_bytes())
            .expect("write the job");
        child.wait_with_output().expect("submit ends")
    };
    let out = from_stdin(
        "name = \"piped\"\n[[application]]\nname = \"a\"\ntasks = 2\n[application.cpu]\ncommand = \"true\"\n",
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(c.succeeded(3), 2);
    let out = from_stdin("[[application]]\nname = \"a\"\ntasks = -1\n");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("<stdin>:3:9: application[0].tasks"),
        "{err}"
    );
    // Mistakes name the flag, and nothing is stored.
    let refused = |args: &[&str], says: &str| {
        let out = c.cli(args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && err.contains(says),
            "{args:?}: {err}"
        );
    };
    refused(
        &["submit", "--gpus", "1", "--", "nvidia-smi"],
        "(--cores, --memory, --gpus): application `nvidia-smi` runs only on GPUs",
    );
    refused(&["submit", "--memory", "lots", "--", "true"], "--memory: ");
    refused(
        &["submit", "--env", "NOVALUE", "--", "true"],
        "--env NOVALUE: expected KEY=VALUE",
    );
    let file = c.write(
        "one.toml",
        "[[application]]\nname = \"a\"\ntasks = 1\n[application.cpu]\ncommand = \"true\"\n",
    );
    refused(
        &["submit", "--tasks", "2", file.to_str().expect("path")],
        "--tasks is for a command given after `--`",
    );
    refused(&["submit"], "nothing to submit");
    assert_eq!(c.json(&["jobs"]).as_array().map(Vec::len), Some(3));
    // `last` names the newest job wherever a job id goes.
    let out = c.cli(&["submit", "--tasks", "2", "--", "sleep", "0.2"]);
    assert!(out.status.success());
    let out = c.cli(&["wait", "last"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(c.json(&["job", "last"])["id"], 4);
    assert_eq!(c.succeeded(4), 2, "`wait last` waited for job 4");
    let listed = c.json(&["tasks", "--job", "last"]);
    let jobs: Vec<_> = listed
        .as_array()
        .expect("a list")
        .iter()
        .map(|t| t["job_id"].as_u64())
        .collect();
    assert_eq!(
        jobs,
        [Some(4), Some(4)],
        "`tasks --job last` lists job 4's tasks"
    );
    refused(
        &["cancel", "lats"],
        "`lats` is not a job id (a number), a range (`4-9`), `name:NAME`, `last` or `all`",
    );
    // A mistyped placeholder is submitted with a warning, and reaches the program as written.
    let out = c.cli(&["submit", "--wait", "--", "touch", "typo-{indx}"]);
    assert!(out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("`{indx}` is not a placeholder"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(c.dir.join("typo-{indx}").exists());
    // A job file is read up to the 2 MiB a job file may have, not whole.
    let out = c.cli(&["submit", "/dev/zero"]);
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("/dev/zero: a job file is at most 2097152 bytes"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `submit --after`: a job waits for the jobs it names (its file written by the first one is
/// there when it starts), `job` says what it waits for, and a failure cancels the job after it.
#[test]
fn a_job_submitted_after_another_starts_when_it_completes_and_is_cancelled_if_it_fails() {
    let mut c = Cluster::start("after-jobs", false);
    c.start_agent("a", 4, &[]);
    c.wait_for_nodes(1);
    // The first job writes a file after a while; the second, after it, reads it.
    c.ok(&["submit", "--shell", "--", "sleep 1; echo ready > first.txt"]);
    c.ok(&[
        "submit",
        "--after",
        "last",
        "--tasks",
        "2",
        "--",
        "sh",
        "-c",
        "cat first.txt > second-{index}.txt",
    ]);
    let shown = c.ok(&["job", "2"]);
    assert!(
        shown.contains("runs after job 1 (once completed): waiting"),
        "{shown}"
    );
    assert_eq!(c.json(&["job", "2"])["waiting"], true);
    // The listing's state says `waiting`; the reason names the job it waits for.
    let listed = c.ok(&["jobs"]);
    assert!(
        listed.contains("pending because") && listed.contains("waiting for job 1"),
        "{listed}"
    );
    c.ok(&["wait", "2"]);
    for i in 0..2 {
        let text = std::fs::read_to_string(c.dir.join(format!("second-{i}.txt"))).expect("read");
        assert_eq!(text, "ready\n", "the second job ran after the first ended");
    }
    assert_eq!(c.json(&["job", "2"])["waiting"], false);

    // A failing job: the one after it is cancelled, and `wait` on it fails.
    c.ok(&["submit", "--shell", "--", "sleep 0.3; exit 3"]);
    c.ok(&["submit", "--after", "3", "--", "touch", "never.txt"]);
    let out = c.cli(&["wait", "4"]);
    assert!(!out.status.success(), "a cancelled job does not complete");
    // No task ran: it ended, it has no makespan.
    let said =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(
        said.contains("1 cancelled, ended ") && !said.contains("makespan"),
        "{said}"
    );
    // And why: its dependency, not only a count.
    assert!(
        said.contains("job 4 cancelled: job 3, which this job runs after, ended failed"),
        "{said}"
    );
    let shown = c.ok(&["job", "4"]);
    assert!(
        shown.contains("ended ") && !shown.contains("makespan"),
        "{shown}"
    );
    assert_eq!(c.json(&["job", "4"])["state"], "cancelled");
    assert_eq!(
        c.tasks(4)[0]["message"],
        "cancelled: job 3, which this job runs after, ended failed"
    );
    assert!(!c.dir.join("never.txt").exists());
    // `--after-any`: runs after the failed job too.
    c.ok(&[
        "submit",
        "--after-any",
        "3",
        "--wait",
        "--",
        "touch",
        "gathered.txt",
    ]);
    assert!(c.dir.join("gathered.txt").exists());
    let shown = c.ok(&["job", "5"]);
    assert!(
        shown.contains("runs after job 3 (once ended, however)"),
        "{shown}"
    );
    c.refused(
        &["submit", "--after", "3,1", "--", "true"],
        "--after: job 3 ended failed",
    );
}

/// `hetsched tasks --state`: a job's failed tasks without paging through the rest, over one job
/// (filtered by the store) and over every job (filtered page by page); an unknown state is named.
#[test]
fn tasks_can_be_listed_by_state() {
    let mut c = Cluster::start("tasks-by-state", false);
    c.start_agent("a", 4, &[]);
    c.wait_for_nodes(1);
    let out = c.cli(&[
        "submit",
        "--tasks",
        "7",
        "--shell",
        "--wait",
        "--",
        "exit $((HETSCHED_TASK_INDEX % 3 == 0))",
    ]);
    assert!(!out.status.success(), "three tasks fail");
    let out = c.cli(&["submit", "--tasks", "2", "--wait", "--", "true"]);
    assert!(out.status.success());
    let indices = |args: &[&str]| -> Vec<(u64, u64, String)> {
        let mut a = vec!["tasks"];
        a.extend_from_slice(args);
        c.json(&a)
            .as_array()
            .expect("tasks")
            .iter()
            .map(|t| {
                (
                    t["job_id"].as_u64().expect("job"),
                    t["index"].as_u64().expect("index"),
                    t["state"].as_str().expect("state").to_string(),
                )
            })
            .collect()
    };
    let failed = |i: u64| (1, i, "failed".to_string());
    assert_eq!(
        indices(&["--job", "1", "--state", "failed"]),
        vec![failed(0), failed(3), failed(6)]
    );
    // Every job, two states: the pages of every job are filtered one by one, and one the filter
    // empties does not end the listing.
    let all = indices(&["--state", "failed", "--state", "cancelled"]);
    assert_eq!(all, vec![failed(0), failed(3), failed(6)]);
    let ok = indices(&["--state", "succeeded,failed"]);
    assert_eq!(ok.len(), 9);
    assert_eq!(indices(&["--job", "2", "--state", "failed"]), vec![]);
    // A table that matches nothing says so on stderr; its stdout stays empty.
    let out = c.cli(&["tasks", "--job", "2", "--state", "failed"]);
    assert!(out.status.success() && out.stdout.is_empty());
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "no tasks match job 2, --state failed\n"
    );
    assert_eq!(
        indices(&["--job", "1", "--state", "ready"]),
        vec![],
        "no batch state"
    );
    c.refused(
        &["tasks", "--state", "faild"],
        "invalid value 'faild' for '--state <STATE>'",
    );
}

/// `submit --each-line FILE -- COMMAND`: one task per line, `{entry}` and `$HETSCHED_ENTRY` the
/// task's line (spaces and braces kept as they are), from a file or standard input; mistakes
/// name the flag.
#[test]
fn each_line_of_a_file_is_one_task_with_its_line_as_entry() {
    let mut c = Cluster::start("each-line", false);
    c.start_agent("a", 4, &[]);
    c.wait_for_nodes(1);
    let lines = c.write("inputs.txt", "alpha\nbeta gamma\n{index} and {entry}\n");
    let out = c.cli(&[
        "submit",
        "--each-line",
        lines.to_str().expect("utf-8"),
        "--wait",
        "--",
        "sh",
        "-c",
        "printf '%s|%s' \"$1\" \"$HETSCHED_ENTRY\" > line-{index}.txt",
        "_",
        "{entry}",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for (i, line) in ["alpha", "beta gamma", "{index} and {entry}"]
        .iter()
        .enumerate()
    {
        let got = std::fs::read_to_string(c.dir.join(format!("line-{i}.txt"))).expect("output");
        assert_eq!(got, format!("{line}|{line}"), "task {i}");
    }
    assert_eq!(c.json(&["job", "1"])["tasks"], 3);
    let mut child = c
        .command(&[
            "submit",
            "--each-line",
            "-",
            "--wait",
            "--",
            "touch",
            "{entry}.done",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("submit");
    std::io::Write::write_all(&mut child.stdin.take().expect("stdin"), b"one\ntwo").expect("lines");
    let out = child.wait_with_output().expect("submit ends");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(c.dir.join("one.done").exists() && c.dir.join("two.done").exists());
    let empty = c.write("empty.txt", "");
    c.refused(
        &[
            "submit",
            "--each-line",
            empty.to_str().expect("utf-8"),
            "--",
            "true",
        ],
        "no lines, so no tasks",
    );
    let job = c.write(
        "job.toml",
        "[[application]]\nname = \"a\"\ntasks = 1\n[application.cpu]\ncommand = \"true\"\n",
    );
    c.refused(
        &["submit", job.to_str().expect("utf-8"), "--each-line", "x"],
        "--each-line is for a command",
    );
}

/// `hetsched hold` / `release`: a held job's pending tasks wait (the running one finishes), the
/// listing says `held`, and after the release the job completes.
#[test]
fn a_held_job_waits_for_its_release() {
    let mut c = Cluster::start("hold", false);
    c.start_agent("a", 1, &[]);
    c.wait_for_nodes(1);
    c.ok(&[
        "submit",
        "--tasks",
        "3",
        "--shell",
        "--",
        "sleep 0.5; touch t-{index}",
    ]);
    wait_until("the first task to run", Duration::from_secs(10), || {
        c.json(&["job", "1"])["counts"]["running"] == 1
    });
    let said = c.ok(&["hold", "last"]);
    assert!(said.contains("job 1: 2 pending tasks held"), "{said}");
    assert!(c.ok(&["jobs"]).contains("held"));
    let ids = |args: &[&str]| -> Vec<u64> {
        let mut full = vec!["jobs"];
        full.extend_from_slice(args);
        c.json(&full)
            .as_array()
            .expect("a list")
            .iter()
            .filter_map(|j| j["id"].as_u64())
            .collect()
    };
    assert_eq!(ids(&["--state", "held"]), [1]);
    assert_eq!(ids(&["--state", "active"]), [1]);
    assert!(
        c.ok(&["job", "1"])
            .contains("held: its pending tasks wait for `hetsched release 1`")
    );
    // The running task ends; nothing else starts while the job is held (the heartbeat that
    // recorded its result would have carried the next task).
    wait_until("the first task to end", Duration::from_secs(10), || {
        c.json(&["job", "1"])["counts"]["succeeded"] == 1
    });
    let counts = c.json(&["job", "1"])["counts"].clone();
    assert_eq!(
        (counts["running"].as_u64(), counts["pending"].as_u64()),
        (Some(0), Some(2))
    );
    assert_eq!(c.json(&["job", "1"])["held"], true);
    let said = c.ok(&["release", "1"]);
    assert!(said.contains("job 1: 2 pending tasks released"), "{said}");
    c.ok(&["wait", "1"]);
    assert!((0..3).all(|i| c.dir.join(format!("t-{i}")).exists()));
    // `jobs --state` and `--last` select from the listing.
    let failed = c.cli(&["submit", "--wait", "--", "false"]);
    assert!(!failed.status.success());
    assert_eq!(ids(&["--state", "held"]), Vec::<u64>::new());
    assert_eq!(ids(&["--state", "failed"]), [2]);
    assert_eq!(ids(&["--state", "completed,failed"]), [1, 2]);
    assert_eq!(ids(&["--state", "active"]), Vec::<u64>::new());
    assert_eq!(ids(&["--last", "1"]), [2]);
    assert_eq!(ids(&["--state", "completed", "--last", "1"]), [1]);
    c.refused(
        &["jobs", "--state", "done"],
        "invalid value 'done' for '--state <STATE>'",
    );
}

/// `submit --after-notok` and Slurm's `--dependency=afternotok:…` syntax: a job that handles a
/// failure runs once the job it names failed, and is cancelled when that job completes.
#[test]
fn a_job_after_a_failure_runs_when_it_fails_and_slurms_dependency_syntax_says_the_same() {
    let mut c = Cluster::start("after-notok", false);
    c.start_agent("a", 2, &[]);
    c.wait_for_nodes(1);
    c.ok(&["submit", "--", "false"]);
    c.ok(&[
        "submit",
        "--dependency",
        "afternotok:1",
        "--shell",
        "--",
        "touch handled",
    ]);
    c.cli(&["wait", "1", "--timeout", "20s"]);
    c.ok(&["wait", "2", "--timeout", "20s"]);
    assert!(c.dir.join("handled").exists());
    let said = c.ok(&["job", "2"]);
    assert!(
        said.contains("runs after job 1 (once failed or cancelled)"),
        "{said}"
    );
    assert_eq!(c.json(&["job", "2"])["after_notok"], serde_json::json!([1]));
    // A job that completes cancels the one after its failure.
    c.ok(&["submit", "--", "sleep", "1"]);
    c.ok(&[
        "submit",
        "--after-notok",
        "3",
        "--shell",
        "--",
        "touch never",
    ]);
    c.ok(&["wait", "3", "--timeout", "20s"]);
    wait_until("job 4 to be cancelled", Duration::from_secs(10), || {
        c.json(&["job", "4"])["state"] == "cancelled"
    });
    assert!(!c.dir.join("never").exists());
    c.refused(
        &["submit", "--dependency", "afterok:1", "--", "true"],
        "--after: job 1 ended failed",
    );
    c.refused(
        &["submit", "--dependency", "expand:1", "--", "true"],
        "Slurm's `expand` is not supported",
    );
}

/// `submit --hold` (Slurm's `--hold`): the job is stored held, so no task runs — not even one
/// dispatched before a `hold` could be typed — until `release`; a server restart keeps it held;
/// other kinds refuse it.
#[test]
fn a_job_submitted_held_runs_nothing_until_its_release_even_across_a_restart() {
    let mut c = Cluster::start("submit-hold", false);
    c.start_agent("a", 2, &[]);
    c.wait_for_nodes(1);
    let said = c.ok(&[
        "submit",
        "--hold",
        "--tasks",
        "3",
        "--shell",
        "--",
        "touch t-{index}",
    ]);
    assert!(
        said.contains("job 1 submitted (3 tasks), held: `hetsched release 1` lets it run"),
        "{said}"
    );
    let job = c.json(&["job", "1"]);
    assert_eq!(job["held"], true, "{job}");
    // An agent beats every 100 ms here: a second is ten chances to dispatch.
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(c.json(&["job", "1"])["counts"]["pending"], 3);
    c.kill_server();
    c.start_server();
    std::thread::sleep(Duration::from_secs(1));
    let job = c.json(&["job", "1"]);
    assert_eq!(
        (job["held"].as_bool(), job["counts"]["pending"].as_u64()),
        (Some(true), Some(3)),
        "{job}"
    );
    assert!((0..3).all(|i| !c.dir.join(format!("t-{i}")).exists()));
    // `wait` says what it waits for.
    c.refused(
        &["wait", "1", "--timeout", "1s"],
        "job 1 is held: it waits for `hetsched release 1`",
    );
    assert!(
        c.ok(&["release", "1"])
            .contains("job 1: 3 pending tasks released")
    );
    c.ok(&["wait", "1"]);
    assert!((0..3).all(|i| c.dir.join(format!("t-{i}")).exists()));
    let wf = c.write(
        "wf.toml",
        "[[task]]\nname = \"a\"\ninstances = 1\ncommand = \"true\"\n",
    );
    // A workflow held at submission starts at its release.
    c.ok(&["submit", "--hold", wf.to_str().expect("path")]);
    let held = c.json(&["job", "2"]);
    assert_eq!(held["held"], true, "{held}");
    c.refused(
        &["wait", "2", "--timeout", "1s"],
        "job 2 is held: it waits for `hetsched release 2`",
    );
    c.ok(&["release", "2"]);
    c.ok(&["wait", "2", "--timeout", "20s"]);
}

/// `submit --begin` (Slurm's `--begin`): the job is listed `deferred` and none of its tasks
/// starts before its begin time, which a server restart keeps; the reaper queues the tasks
/// when it comes, with no other event. `update --begin now` lets a deferred job run at once.
#[test]
fn a_job_submitted_with_a_begin_time_starts_no_sooner_even_across_a_restart() {
    let mut c = Cluster::start("submit-begin", false);
    c.start_agent("a", 2, &[]);
    c.wait_for_nodes(1);
    let said = c.ok(&[
        "submit",
        "--begin",
        "now+5s",
        "--tasks",
        "2",
        "--shell",
        "--",
        "touch t-{index}",
    ]);
    assert!(
        said.contains("job 1 submitted (2 tasks), deferred: begins "),
        "{said}"
    );
    let job = c.json(&["job", "1"]);
    let begin_ms = job["begin_ms"].as_u64().expect("begin_ms");
    assert_eq!(job["deferred"], true, "{job}");
    assert!(
        job["pending_reason"]
            .as_str()
            .is_some_and(|r| r.starts_with("begins at "))
    );
    // The listing says its begin time as `submit` and `job` do (the local date and time), not
    // as the server's RFC 3339 reason (`begins at 2026-12-03T14:51:31Z`).
    let listed = c.ok(&["jobs"]);
    assert!(
        listed.contains("deferred") && listed.contains("begins ") && !listed.contains("begins at"),
        "{listed}"
    );
    let deferred = c.json(&["jobs", "--state", "deferred"]);
    assert_eq!(deferred.as_array().map(Vec::len), Some(1), "{deferred}");
    // The server restarts before the time: the time is stored.
    c.kill_server();
    c.start_server();
    assert_eq!(c.json(&["job", "1"])["begin_ms"].as_u64(), Some(begin_ms));
    // `wait` says what it waits for.
    let out = c.cli(&["wait", "1", "--timeout", "30s"]);
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && said.contains("job 1 is deferred: it begins "),
        "{said}"
    );
    let tasks = c.json(&["tasks", "--job", "1"]);
    let starts: Vec<u64> = tasks
        .as_array()
        .expect("tasks")
        .iter()
        .map(|t| t["started_ns"].as_u64().expect("started"))
        .collect();
    assert_eq!(starts.len(), 2, "{tasks}");
    assert!(
        starts.iter().all(|&s| s >= begin_ms * 1_000_000),
        "every task starts at {begin_ms} ms or later: {starts:?}"
    );
    assert!(c.ok(&["job", "1"]).contains("began: "));
    // An hour on, then now: the update lets it run at once.
    c.ok(&["submit", "--begin", "now+1h", "--", "touch", "late"]);
    let said = c.ok(&["job", "2"]);
    assert!(
        said.contains("begins: ") && (said.contains("(in 59m") || said.contains("(in 1h)")),
        "{said}"
    );
    assert!(
        !said.contains("pending because"),
        "the begin line says it: {said}"
    );
    assert!(
        c.ok(&["update", "2", "--begin", "now"])
            .contains("its tasks may start now")
    );
    c.ok(&["wait", "2", "--timeout", "20s"]);
    assert!(c.dir.join("late").exists());
    c.refused(
        &["submit", "--begin", "soon", "--", "true"],
        "`soon` is not a time: give `now+30m`",
    );
    let wf = c.write(
        "wf.toml",
        "[[task]]\nname = \"a\"\ninstances = 1\ncommand = \"true\"\n",
    );
    // A workflow waits for its begin time too.
    c.ok(&["submit", "--begin", "now+1h", wf.to_str().expect("path")]);
    let wf_job = c.json(&["job", "3"]);
    assert_eq!(
        (wf_job["deferred"].as_bool(), wf_job["state"].as_str()),
        (Some(true), Some("pending")),
        "{wf_job}"
    );
    assert!(
        c.ok(&["jobs", "--state", "deferred"]).contains("wf.toml"),
        "listed deferred"
    );
    assert!(
        c.ok(&["update", "3", "--begin", "now"])
            .contains("job 3; its tasks may start now")
    );
    c.ok(&["wait", "3", "--timeout", "20s"]);
    c.refused(
        &["update", "3", "--priority", "5"],
        "job 3 is a workflow job: update changes its begin time only",
    );
}

/// `submit --array` (HyperQueue's and Slurm's array syntax, a job file's `indices`): one task
/// per listed index, `{index}` and `$HETSCHED_TASK_INDEX` are that index, listings and
/// `log JOB APP:INDEX` use it, and Slurm's `%N` throttles the job.
#[test]
fn an_array_job_runs_one_task_per_listed_index() {
    let mut c = Cluster::start("array", false);
    c.start_agent("a", 4, &[]);
    c.wait_for_nodes(1);
    c.ok(&[
        "submit",
        "--array",
        "3-7:2,20%2",
        "--app",
        "a",
        "--shell",
        "--wait",
        "--",
        "echo $HETSCHED_TASK_INDEX > idx-{index}.txt; echo out {index}",
    ]);
    for i in [3, 5, 7, 20] {
        let text = std::fs::read_to_string(c.dir.join(format!("idx-{i}.txt"))).expect("written");
        assert_eq!(text.trim(), i.to_string());
    }
    let indices: Vec<u64> = c
        .tasks(1)
        .iter()
        .filter_map(|t| t["index"].as_u64())
        .collect();
    assert_eq!(indices, [3, 5, 7, 20]);
    let job = c.json(&["job", "1"]);
    assert_eq!(job["apps"][0]["max_running"], 2, "`%2` is the throttle");
    assert_eq!(c.ok(&["log", "1", "a:20"]).trim(), "out 20");
    c.refused(
        &["log", "1", "a:4"],
        "application `a` of job 1 has 4 tasks (indices 3, 5, 7, 20), none with index 4",
    );
    c.refused(
        &["submit", "--array", "2-1", "--", "true"],
        "--array: `2-1`: the range ends before it starts",
    );
}

/// `submit --stdout/--stderr` (Slurm's `--output`/`--error`, HyperQueue's `--stdout`): each
/// task's streams go to the files named, placeholders filled in, directories created, one file
/// for both when the paths agree; `hetsched log` and `wait`'s failure report still read them;
/// `none` discards a stream and `log` says so; another scheduler's placeholder is refused with
/// ours.
#[test]
fn task_output_goes_to_the_files_the_job_names_and_log_still_reads_it() {
    let mut c = Cluster::start("stdout-paths", false);
    c.start_agent("a", 2, &[]);
    c.wait_for_nodes(1);
    c.ok(&[
        "submit",
        "--tasks",
        "3",
        "--app",
        "w",
        "--stdout",
        "out/{job}/{app}-{index}.log",
        "--stderr",
        "out/{job}/{app}-{index}.log",
        "--shell",
        "--wait",
        "--",
        "echo hello {index}; echo warn {index} >&2",
    ]);
    for i in 0..3 {
        let text = std::fs::read_to_string(c.dir.join(format!("out/1/w-{i}.log")))
            .expect("the task's file");
        assert_eq!(text, format!("hello {i}\nwarn {i}\n"));
    }
    assert_eq!(c.ok(&["log", "1", "w:1"]), "hello 1\nwarn 1\n");
    // `job` says where the application sends its output; the listing where each task's went.
    let shown = c.ok(&["job", "1"]);
    assert!(
        shown.contains("w: stdout and stderr to out/{job}/{app}-{index}.log"),
        "{shown}"
    );
    assert_eq!(
        c.json(&["job", "1"])["apps"][0]["stdout"],
        "out/{job}/{app}-{index}.log"
    );
    let listed = c.tasks(1);
    let dir = c.dir.display().to_string();
    assert_eq!(
        listed[2]["output"],
        format!("a:{dir}/out/1/w-2.log"),
        "{listed:?}"
    );
    assert_eq!(c.ok(&["log", "1", "w:2", "--stderr"]), "hello 2\nwarn 2\n");
    // Every task's, in task order (HyperQueue's `job cat`), with a line naming each if asked.
    assert_eq!(
        c.ok(&["log", "1", "--all"]),
        "hello 0\nwarn 0\nhello 1\nwarn 1\nhello 2\nwarn 2\n"
    );
    let headed = c.ok(&["log", "1", "--all", "--header", "--state", "succeeded"]);
    assert!(
        headed.starts_with("==> task 0 (w:0, succeeded on a) <==\nhello 0\nwarn 0\n==> task 1"),
        "{headed}"
    );
    // Discarded stdout; stderr to its own file, read back for a failed task.
    let out = c.cli(&[
        "submit",
        "--app",
        "f",
        "--stdout",
        "none",
        "--stderr",
        "err/{task}.{attempt}.txt",
        "--shell",
        "--wait",
        "--",
        "echo gone; echo boom >&2; exit 3",
    ]);
    assert!(!out.status.success());
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        said.contains("| boom"),
        "the failure report reads the file: {said}"
    );
    let failed = &c.tasks(2)[0];
    let task = failed["id"].as_u64().expect("task id");
    assert_eq!(
        failed["output"],
        format!("a:none (stdout), {dir}/err/{task}.1.txt (stderr)"),
        "{failed}"
    );
    assert_eq!(
        std::fs::read_to_string(c.dir.join(format!("err/{task}.1.txt"))).expect("stderr file"),
        "boom\n"
    );
    assert!(
        c.ok(&["job", "2"])
            .contains("f: stdout discarded; stderr to err/{task}.{attempt}.txt"),
        "{}",
        c.ok(&["job", "2"])
    );
    c.refused(
        &["log", "2", "f:0"],
        "kept no stdout: its application discards it (`stdout = \"none\"`)",
    );
    assert_eq!(c.ok(&["log", "2", "f:0", "--stderr"]), "boom\n");
    assert_eq!(
        c.ok(&["log", "2", "--all", "--stderr", "--state", "failed"]),
        "boom\n"
    );
    // A task whose output cannot be read is named, and the command fails.
    let out = c.cli(&["log", "2", "--all"]);
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success()
            && said.contains("kept no stdout")
            && said.contains("the output of 1 task of job 2 could not be read"),
        "{said}"
    );
    c.refused(
        &["submit", "--stdout", "slurm-%j.out", "--", "true"],
        "--stdout: `%j` in `slurm-%j.out` is another scheduler's placeholder: write `{job}`",
    );
}

/// A task that turns its own stdout file into a FIFO once it runs (`rm -f out.fifo; mkfifo
/// out.fifo; sleep …`) cannot hold its agent: `hetsched log` of it is refused at once, naming
/// the FIFO, however often it is asked; the agent still runs, reports and serves another
/// task, and stops on SIGTERM. A task whose stdout names a FIFO made beforehand fails to
/// start, saying so. Before, each `log` held a thread of the agent's blocking pool for good:
/// enough of them and the node served no output, reported no result and ignored SIGTERM.
#[test]
fn a_fifo_as_a_tasks_stdout_is_refused_and_holds_no_agent_thread() {
    let mut c = Cluster::start("stdout-fifo", false);
    c.start_agent("a", 2, &[]);
    c.wait_for_nodes(1);
    c.ok(&[
        "submit",
        "--app",
        "f",
        "--stdout",
        "out.fifo",
        "--shell",
        "--",
        "rm -f out.fifo; mkfifo out.fifo; touch fifo-made; exec sleep 900",
    ]);
    wait_until("the task made its FIFO", Duration::from_secs(30), || {
        c.dir.join("fifo-made").exists()
    });
    let fifo = c.dir.join("out.fifo");
    let refusal = format!(
        "node `a`: `{}` is a FIFO, not a regular file: only regular files are served as task \
         output",
        fifo.display()
    );
    for _ in 0..20 {
        let asked = Instant::now();
        c.refused(&["log", "1", "f:0"], &refusal);
        assert!(
            asked.elapsed() < Duration::from_secs(4),
            "answered in {:?}, not at once",
            asked.elapsed()
        );
    }
    // The agent still runs, reports and serves other tasks.
    c.ok(&[
        "submit",
        "--app",
        "g",
        "--wait",
        "--",
        "echo",
        "still served",
    ]);
    assert_eq!(c.ok(&["log", "2", "g:0"]), "still served\n");
    // A FIFO made before the task starts: the attempt fails to start, naming it.
    let out = c.cli(&[
        "submit", "--app", "h", "--stdout", "out.fifo", "--wait", "--", "true",
    ]);
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success()
            && said.contains(&format!(
                "its stdout file `{}` is a FIFO, not a regular file: task output is written only \
                 to a regular file",
                fifo.display()
            )),
        "{said}"
    );
    c.signal_agent("a", "TERM");
    assert_eq!(
        c.agent_exit("a", Duration::from_secs(30)),
        Some(0),
        "{}",
        c.agent_log("a")
    );
}

/// `submit --pin` (HyperQueue's `--pin`): each task runs bound to CPUs of its own, as many as
/// its cores, and is told which (`HETSCHED_CPUS`, `OMP_NUM_THREADS`); two tasks running at once
/// never share one; an unpinned task is neither bound nor told.
#[test]
fn pinned_tasks_run_bound_to_cpus_of_their_own() {
    let mine = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines().find_map(|l| {
                l.strip_prefix("Cpus_allowed_list:")
                    .map(|v| v.trim().to_string())
            })
        })
        .expect("this process's CPUs");
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut c = Cluster::start("pin", false);
    c.start_agent("a", 2, &[]);
    c.wait_for_nodes(1);
    let report = "grep Cpus_allowed_list /proc/self/status | cut -f2 > cpus-{index}.txt; \
                  echo $HETSCHED_CPUS $OMP_NUM_THREADS >> cpus-{index}.txt";
    let read = |i: u32| -> Vec<String> {
        std::fs::read_to_string(c.dir.join(format!("cpus-{i}.txt")))
            .expect("the task's report")
            .lines()
            .map(str::to_string)
            .collect()
    };
    if cpus >= 2 {
        // Both tasks run at once (each holds until the other has started).
        c.ok(&[
            "submit", "--pin", "--tasks", "2", "--shell", "--wait", "--",
            &format!("{report}; touch started-{{index}}; for i in $(seq 100); do [ -e started-0 ] && [ -e started-1 ] && break; sleep 0.05; done"),
        ]);
        let (a, b) = (read(0), read(1));
        assert!(a[0].parse::<u32>().is_ok(), "bound to one CPU: {a:?}");
        assert_ne!(a[0], b[0], "two running tasks share a CPU");
        for r in [&a, &b] {
            assert_eq!(
                r[1],
                format!("{} 1", r[0]),
                "HETSCHED_CPUS and OMP_NUM_THREADS"
            );
        }
        c.ok(&[
            "submit", "--pin", "--cores", "2", "--shell", "--wait", "--", report,
        ]);
        assert_eq!(c.json(&["job", "2"])["apps"][0]["pin"], true);
        let both = read(0);
        let listed: Vec<&str> = both[1].split(' ').collect();
        assert_eq!(
            listed[1], "2",
            "OMP_NUM_THREADS is the task's cores: {both:?}"
        );
        assert_eq!(listed[0].split(',').count(), 2, "{both:?}");
    }
    // Unpinned: the agent's CPUs, and no list.
    c.ok(&["submit", "--shell", "--wait", "--", report]);
    let free = read(0);
    assert_eq!(free[0], mine, "{free:?}");
    assert_eq!(free.get(1).map(String::as_str).unwrap_or(""), "");
}

/// Every task is told how many cores it holds on its node, `HETSCHED_CORES` (Slurm's
/// `SLURM_CPUS_PER_TASK`), pinned or not: a task's environment had no count of them unless
/// pinned (`OMP_NUM_THREADS`).
#[test]
fn every_task_is_told_the_cores_it_holds() {
    let mut c = Cluster::start("cores-env", false);
    c.start_agent("a", 2, &[]);
    c.wait_for_nodes(1);
    let report = "echo \"$HETSCHED_CORES\" > cores-{index}.txt";
    let read = |i: u32| {
        std::fs::read_to_string(c.dir.join(format!("cores-{i}.txt")))
            .expect("the task's report")
            .trim()
            .to_string()
    };
    c.ok(&["submit", "--cores", "2", "--shell", "--wait", "--", report]);
    assert_eq!(read(0), "2");
    c.ok(&["submit", "--tasks", "2", "--shell", "--wait", "--", report]);
    assert_eq!((read(0), read(1)), ("1".to_string(), "1".to_string()));
    // A job may not set it: its value would never be seen.
    c.refused(
        &["submit", "--env", "HETSCHED_CORES=4", "--", "true"],
        "HETSCHED_CORES",
    );
}

/// `hetsched cancel JOB --tasks INDICES`: the named tasks are cancelled (a pending one dropped,
/// a running one stopped), the others run on, the job ends `cancelled` and a job that runs
/// `--after` it is cancelled too; an index the job lacks is refused, naming it.
#[test]
fn cancelling_some_tasks_of_a_job_lets_the_others_run() {
    let mut c = Cluster::start("cancel-tasks", false);
    c.start_agent("a", 2, &[]);
    c.wait_for_nodes(1);
    c.ok(&[
        "submit",
        "--array",
        "0-7",
        "--max-running",
        "2",
        "--app",
        "s",
        "--",
        "sleep",
        "0.4",
    ]);
    c.ok(&["submit", "--after", "1", "--", "true"]);
    wait_until("task 0 to run", Duration::from_secs(10), || {
        c.json(&["job", "1"])["counts"]["running"] == 2
    });
    let said = c.ok(&["cancel", "1", "--tasks", "0,5-7"]);
    assert!(said.contains("job 1: 4 tasks cancelled"), "{said}");
    c.refused(
        &["cancel", "1", "--tasks", "42"],
        "job 1 has no task with index 42",
    );
    c.refused(
        &["cancel", "1", "--tasks", "1", "--app", "zzz"],
        "job 1 has no application `zzz`",
    );
    c.refused(
        &["cancel", "1", "--tasks", "3-1"],
        "--tasks: `3-1`: the range ends before it starts",
    );
    let out = c.cli(&["wait", "1"]);
    assert!(!out.status.success(), "not every task succeeded");
    let states: Vec<(u64, String)> = c
        .tasks(1)
        .iter()
        .map(|t| {
            (
                t["index"].as_u64().unwrap_or(99),
                t["state"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect();
    let state_of = |i: u64| {
        states
            .iter()
            .find(|(j, _)| *j == i)
            .map(|(_, s)| s.as_str())
    };
    for i in [0, 5, 6, 7] {
        assert_eq!(state_of(i), Some("cancelled"), "{states:?}");
    }
    for i in 1..=4 {
        assert_eq!(state_of(i), Some("succeeded"), "{states:?}");
    }
    assert_eq!(c.json(&["job", "1"])["state"], "cancelled");
    wait_until(
        "the job after it to be cancelled",
        Duration::from_secs(10),
        || c.json(&["job", "2"])["state"] == "cancelled",
    );
}

/// `submit --max-running N` (a job file's `max_running`): never more than N of the job's tasks
/// run at once, wherever there are free cores, and the job still runs through without waiting
/// for idle beats; `job N` shows the limit.
#[test]
fn a_job_with_max_running_never_runs_more_tasks_at_once() {
    let mut c = Cluster::start("max-running", false);
    c.start_agent("a", 2, &[]);
    c.start_agent("b", 2, &[]);
    c.wait_for_nodes(2);
    let begun = std::time::Instant::now();
    c.ok(&[
        "submit",
        "--tasks",
        "6",
        "--max-running",
        "2",
        "--wait",
        "--",
        "sleep",
        "0.4",
    ]);
    let took = begun.elapsed();
    // Three waves of two on four free cores: about 1.2 s; an idle beat would add a minute.
    assert!(took < Duration::from_secs(15), "took {took:?}");
    let tasks = c.tasks(1);
    let mut edges: Vec<(u64, bool)> = tasks
        .iter()
        .flat_map(|t| {
            let at = |k: &str| t[k].as_u64().expect("a finished task's times");
            [(at("started_ns"), true), (at("finished_ns"), false)]
        })
        .collect();
    edges.sort_unstable();
    let (mut running, mut most) = (0i32, 0i32);
    for (_, start) in edges {
        running += if start { 1 } else { -1 };
        most = most.max(running);
    }
    assert_eq!(most, 2, "at most two at once, and two did run together");
    assert_eq!(c.json(&["job", "1"])["apps"][0]["max_running"], 2);
    assert!(c.ok(&["job", "1"]).contains("max running"));
    c.refused(
        &["submit", "--max-running", "0", "--", "true"],
        "--max-running: must be at least 1 (leave it out for no limit)",
    );
}

/// A task's declared `memory` is enforced by its agent: one whose processes hold more is
/// stopped, and the attempt fails saying so; the server sends the limit with the task's command.
#[test]
fn a_task_that_holds_more_memory_than_it_declared_fails_saying_so() {
    let mut c = Cluster::start("memory-limit", false);
    c.start_agent("a", 2, &[]);
    c.wait_for_nodes(1);
    let hold = r#"x=$(head -c 67108864 /dev/zero | tr "\0" a); sleep 30; : "$x""#;
    let start = Instant::now();
    let out = c.cli(&[
        "submit", "--memory", "16MiB", "--wait", "--", "sh", "-c", hold,
    ]);
    assert!(!out.status.success(), "the job fails");
    assert!(
        start.elapsed() < Duration::from_secs(20),
        "stopped when a sample saw it, not after its 30 s"
    );
    let tasks = c.tasks(1);
    let message = tasks[0]["message"].as_str().unwrap_or("");
    assert!(
        message.starts_with("memory limit of 16.0 MiB exceeded: its processes held "),
        "{tasks:?}"
    );
    // Declared with room to spare, the same command's shorter variant succeeds.
    let fits = r#"x=$(head -c 1048576 /dev/zero | tr "\0" a); sleep 0.3; : "$x""#;
    c.ok(&[
        "submit", "--memory", "256MiB", "--wait", "--", "sh", "-c", fits,
    ]);
}

#[test]
fn each_task_reports_the_cpu_time_and_peak_memory_it_used_and_a_restart_keeps_them() {
    let mut c = Cluster::start("usage", false);
    c.start_agent("a", 2, &[]);
    c.wait_for_nodes(1);
    // Task 0 computes for about a second in `awk` (40 million additions: 0.97 s on this
    // project's VM, about five times the 200 ms asserted); task 1 has a child shell hold 48 MiB
    // for a second; task 2 sleeps. What is measured is what the task's shell ran, not the shell
    // alone.
    let out = c.cli(&[
        "submit",
        "--tasks",
        "3",
        "--shell",
        "--wait",
        "--",
        "case {index} in \
         0) awk 'BEGIN { for (i = 0; i < 40000000; i++) s += i }' ;; \
         1) sh -c 'x=$(head -c 50331648 /dev/zero | tr \"\\0\" a); sleep 1; : \"$x\"' ;; \
         *) sleep 0.5 ;; esac",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let usage = |c: &Cluster| -> Vec<(u64, u64)> {
        let tasks = c.json(&["tasks", "--job", "1"]);
        let mut v: Vec<(u64, u64, u64)> = tasks
            .as_array()
            .expect("tasks")
            .iter()
            .map(|t| {
                let u = &t["usage"];
                assert!(u.is_object(), "a finished task has its usage: {t}");
                // Beside its peak resident memory: a CPU task's GPU memory is not measured.
                assert_eq!(u["max_gpu_memory_bytes"].as_u64(), Some(0), "{t}");
                (
                    t["index"].as_u64().unwrap_or(9),
                    u["cpu_user_ms"].as_u64().unwrap_or(0)
                        + u["cpu_system_ms"].as_u64().unwrap_or(0),
                    u["max_rss_bytes"].as_u64().unwrap_or(0),
                )
            })
            .collect();
        v.sort_unstable();
        v.into_iter().map(|(_, cpu, rss)| (cpu, rss)).collect()
    };
    let before = usage(&c);
    assert_eq!(before.len(), 3);
    let ((busy_cpu, _), (_, holding_rss), (sleep_cpu, sleep_rss)) =
        (before[0], before[1], before[2]);
    assert!(
        busy_cpu >= 200,
        "the computing task's CPU time: {busy_cpu} ms"
    );
    assert!(sleep_cpu < 100, "sleeping costs no CPU: {sleep_cpu} ms");
    assert!(
        holding_rss >= 45 << 20,
        "the 48 MiB held by the task's child: {} MiB",
        holding_rss >> 20
    );
    assert!(
        sleep_rss < 20 << 20,
        "a sleeping shell is small: {} MiB",
        sleep_rss >> 20
    );
    // The job adds them up (CPU time) and keeps the largest peak, as `sacct` does per job.
    let job_usage = |c: &Cluster| {
        let j = c.json(&["job", "1"]);
        assert_eq!(j["max_gpu_memory_bytes"].as_u64(), Some(0), "{j}");
        (j["cpu_ms"].as_u64(), j["max_rss_bytes"].as_u64())
    };
    let job_before = job_usage(&c);
    assert_eq!(
        job_before,
        (
            Some(before.iter().map(|u| u.0).sum()),
            before.iter().map(|u| u.1).max()
        ),
        "the job's usage is its tasks'"
    );
    // The table shows them too.
    let table = c.cli(&["tasks", "--job", "1"]);
    let text = String::from_utf8_lossy(&table.stdout);
    assert!(text.contains("cpu") && text.contains("max rss"), "{text}");
    assert!(text.contains("MiB"), "peak memory is shown in MiB: {text}");
    let shown = c.cli(&["job", "1"]);
    let text = String::from_utf8_lossy(&shown.stdout);
    // Per application too, beside `max rss`: `-` for these CPU tasks (no GPU memory measured).
    let header = text
        .lines()
        .find(|l| l.contains("app") && l.contains("max rss"))
        .unwrap_or_default();
    assert!(header.contains("gpu mem"), "{text}");
    assert!(
        text.contains("used: cpu time") && text.contains("MiB"),
        "job N says what the job used: {text}"
    );
    // Stored with the task: a restarted server lists the same figures.
    c.kill_server();
    c.start_server();
    assert_eq!(usage(&c), before, "the usage survives a server restart");
    assert_eq!(job_usage(&c), job_before, "so does the job's");
}

/// A TCP relay to `target` whose connections can be hung: a hung connection stays open and the
/// relay keeps reading it (so the sender's kernel sees every byte acknowledged) but passes
/// nothing on — a proxy or NAT that lost its state. Connections made after the hang pass.
struct Relay {
    addr: std::net::SocketAddr,
    made: std::sync::Arc<std::sync::atomic::AtomicU64>,
    hung_below: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

impl Relay {
    fn start(target: std::net::SocketAddr) -> Relay {
        use std::sync::Arc;
        use std::sync::atomic::{AtomicU64, Ordering};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("relay listens");
        let addr = listener.local_addr().expect("addr");
        let made = Arc::new(AtomicU64::new(0));
        let hung_below = Arc::new(AtomicU64::new(0));
        let (m, h) = (made.clone(), hung_below.clone());
        std::thread::spawn(move || {
            for inbound in listener.incoming() {
                let Ok(inbound) = inbound else { continue };
                let Ok(outbound) = std::net::TcpStream::connect(target) else {
                    continue;
                };
                let n = m.fetch_add(1, Ordering::SeqCst);
                for (mut from, mut to) in [
                    (
                        inbound.try_clone().expect("clone"),
                        outbound.try_clone().expect("clone"),
                    ),
                    (outbound, inbound),
                ] {
                    let h = h.clone();
                    std::thread::spawn(move || {
                        use std::io::{Read, Write};
                        let mut buf = [0u8; 16 * 1024];
                        while let Ok(k) = from.read(&mut buf) {
                            if k == 0 {
                                break;
                            }
                            if n >= h.load(Ordering::SeqCst) && to.write_all(&buf[..k]).is_err() {
                                break;
                            }
                        }
                        let _ = to.shutdown(std::net::Shutdown::Write);
                    });
                }
            }
        });
        Relay {
            addr,
            made,
            hung_below,
        }
    }

    /// Hangs every connection made so far.
    fn hang(&self) {
        use std::sync::atomic::Ordering;
        self.hung_below
            .store(self.made.load(Ordering::SeqCst), Ordering::SeqCst);
    }
}

#[test]
fn an_agent_behind_a_relay_that_hangs_beats_over_a_new_connection_and_its_job_completes() {
    let mut c = Cluster::start("hung-relay", false);
    let relay = Relay::start(c.listen.parse().expect("server address"));
    let url = format!("http://{}", relay.addr);
    c.start_agent_at(&url, "a", 2, &[]);
    c.wait_for_nodes(1);
    let out = c.cli(&["submit", "--tasks", "20", "--", "sleep", "0.3"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    wait_until("some tasks to succeed", Duration::from_secs(30), || {
        c.succeeded(1) >= 4
    });
    // The relay hangs: the agent's calls are accepted and go nowhere. Its beats time out (10 s);
    // it then beats over a new connection, which passes.
    relay.hang();
    let hung = Instant::now();
    let out = c.cli(&["wait", "1", "--timeout", "90s"]);
    assert!(
        out.status.success(),
        "the job completes through a new connection: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        hung.elapsed() < Duration::from_secs(45),
        "within a few beat time-outs: {:?}",
        hung.elapsed()
    );
    // The agent's ask for divisible chunks, held on the hung connection, followed its beats to
    // the new one: a divisible job submitted now runs there.
    let rows: Vec<u8> = (0..40 * 4)
        .flat_map(|k| f64::from(k).to_le_bytes())
        .collect();
    std::fs::write(c.dir.join("a.bin"), rows).expect("a.bin");
    let job = c.write(
        "rows.toml",
        &format!(
            r#"[[divisible]]
name = "rows"
units = 40
command = ["{BIN}", "matrows", "--start", "{{start}}", "--end", "{{end}}", "--input", "{{input}}", "--cols", "4"]
input = "a.bin"
unit_bytes = 32
output = "concat"
algo = "static"
memory_per_unit = "1KiB"
"#
        ),
    );
    let id = c.json(&["submit", job.to_str().expect("path")])["job_id"]
        .as_u64()
        .expect("job id");
    let out = c.cli(&["wait", &id.to_string(), "--timeout", "60s"]);
    assert!(
        out.status.success(),
        "the divisible job runs over the new connection: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // So did the stream-worker sync: a topology submitted now gets its worker started here and
    // counts every word.
    use crate::topology_runtime::{expected, read_counts, wordcount};
    let topology = c.write("wc.toml", &wordcount("wc", 20, 200));
    c.ok(&[
        "topology",
        "submit",
        topology.to_str().expect("path"),
        "--placer",
        "even",
        "--workers",
        "1",
        "--interval",
        "0s",
    ]);
    let want = expected(20);
    wait_until(
        "the word count to run over the new connection",
        Duration::from_secs(60),
        || read_counts(&c.dir, "wc") == want,
    );
}

#[test]
fn submit_wait_goes_on_when_the_server_holds_as_many_waits_as_it_allows() {
    use hetsched_proto as pb;
    let mut c = Cluster::start("wait-bound", false);
    // Job 1 is held: it never ends while this test runs, so waits on it stay open.
    let out = c.cli(&["submit", "--hold", "--tasks", "1", "--", "true"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let token = std::fs::read_to_string(c.data().join("token")).expect("token");
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    // As many held waits on job 1 as the server allows one user (64), as other scripts would.
    let held: Vec<_> = rt.block_on(async {
        let channel = pb::endpoint(&c.url(), None)
            .expect("endpoint")
            .connect()
            .await
            .expect("connect");
        let auth = pb::TokenInterceptor::new(token.trim()).expect("token");
        (0..64)
            .map(|_| {
                let mut api = pb::client_client::ClientClient::with_interceptor(
                    channel.clone(),
                    auth.clone(),
                );
                tokio::spawn(async move {
                    api.get_job(pb::GetJobRequest {
                        job_id: 1,
                        wait_ms: 60_000,
                    })
                    .await
                })
            })
            .collect()
    });
    std::thread::sleep(Duration::from_secs(1));
    c.start_agent("n", 2, &[]);
    c.wait_for_nodes(1);
    // A 65th wait is refused its held call: `submit --wait` says so and looks instead, and
    // ends with its job.
    let out = c.cli(&["submit", "--wait", "--tasks", "3", "--", "true"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("looked at every 500 ms instead"),
        "{stderr}"
    );
    assert_eq!(c.succeeded(2), 3);
    // The 64 were held all along (job 1 did not change).
    for h in &held {
        assert!(!h.is_finished(), "a held wait ended early");
    }
    drop(rt);
}
