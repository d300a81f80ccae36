//! Prefetch through the real binaries (issue 10): with `prefetch = N` in the server's
//! configuration an agent holds up to N cores' worth of tasks beyond its cores in a queue and
//! starts each as a slot frees — never more at once than its cores — and the tasks queued on an
//! agent that is SIGKILLed are re-queued and run exactly once elsewhere.

use crate::support::{Cluster, lines, wait_until};
use hetsched_core::testkit::ScratchDir;
use std::time::Duration;

fn running_on(c: &Cluster, node: &str) -> u64 {
    c.json(&["nodes"])
        .as_array()
        .and_then(|a| a.iter().find(|n| n["name"] == node).cloned())
        .and_then(|n| n["running"].as_u64())
        .unwrap_or(0)
}

#[test]
fn an_agent_queues_prefetched_tasks_and_never_runs_more_than_its_cores() {
    let mut c = Cluster::start_configured("prefetch-cores", false, "prefetch = 2\n");
    c.start_agent("n", 2, &[]);
    c.wait_for_nodes(1);
    let log = c.dir.join("events");
    // Each task logs its start and its end (appends of a few bytes are atomic).
    c.submit_file("job.toml",
        &format!(
            "[[application]]\nname = \"s\"\ntasks = 12\n[application.cpu]\ncommand = \"echo s {{index}} >> {0}; sleep 0.5; echo e {{index}} >> {0}\"\n",
            log.display()
        ),
    );
    // The 2-core node holds four tasks: two running, two queued by its agent.
    wait_until(
        "the node to hold four tasks",
        Duration::from_secs(20),
        || running_on(&c, "n") == 4,
    );
    let out = c.cli(&["wait", "1", "--timeout", "60s"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let events = lines(&log);
    let (mut now, mut most) = (0i32, 0i32);
    for e in &events {
        now += if e.starts_with("s ") { 1 } else { -1 };
        most = most.max(now);
    }
    assert_eq!(most, 2, "never more tasks at once than cores: {events:?}");
    let mut started: Vec<&str> = events.iter().filter_map(|e| e.strip_prefix("s ")).collect();
    started.sort_unstable_by_key(|i| i.parse::<u32>().unwrap_or(u32::MAX));
    let want: Vec<String> = (0..12).map(|i| i.to_string()).collect();
    assert_eq!(started, want, "each task started once");
    let tasks = c.tasks(1);
    assert!(
        tasks
            .iter()
            .all(|t| t["attempt"] == 1 && t["state"] == "succeeded"),
        "{tasks:?}"
    );
}

/// The accounts charge a task from when its agent starts it, not from its dispatch: a one-core
/// agent sent three two-second tasks at once (one running, two in its queue) is charged about
/// six core-seconds, and never more than its one core offered. Meanwhile `tasks` says which
/// two wait in the agent's queue.
#[test]
fn the_accounts_charge_what_an_agent_queues_from_its_start() {
    let mut c = Cluster::start_configured("prefetch-usage", false, "prefetch = 2\n");
    c.start_agent("a", 1, &[]);
    c.wait_for_nodes(1);
    c.ok(&["submit", "--tasks", "3", "--", "sleep", "2"]);
    wait_until("a to hold all three tasks", Duration::from_secs(20), || {
        running_on(&c, "a") == 3
    });
    let tasks = c.tasks(1);
    let queued: Vec<bool> = tasks.iter().map(|t| t["queued"] == true).collect();
    assert_eq!(queued, [false, true, true], "{tasks:?}");
    let table = c.ok(&["tasks", "--job", "1"]);
    assert_eq!(table.matches("queued").count(), 2, "{table}");
    let nodes = c.json(&["nodes"]);
    assert_eq!(nodes[0]["queued"], 2, "{nodes}");
    let table = c.ok(&["nodes"]);
    assert!(table.contains("3 (2 queued)"), "{table}");
    // So do the job's counts: three running, two of them queued.
    let jobs = c.json(&["jobs"]);
    assert_eq!(
        (&jobs[0]["counts"]["running"], &jobs[0]["counts"]["queued"]),
        (&serde_json::json!(3), &serde_json::json!(2)),
        "{jobs}"
    );
    let table = c.ok(&["jobs"]);
    assert!(table.contains("3 (2 queued)"), "{table}");
    let line = c.ok(&["job", "1"]);
    assert!(
        line.contains("0 pending, 3 running (2 queued), 0 succeeded"),
        "{line}"
    );
    // Once the first ends, the second runs from when the agent started it.
    wait_until("task 1 to start", Duration::from_secs(20), || {
        c.tasks(1)[1]["queued"] == false
    });
    let tasks = c.tasks(1);
    let started = |i: usize| tasks[i]["started_ns"].as_u64().unwrap_or(0);
    assert!(
        tasks[1]["state"] == "running" && started(1) >= started(0) + 1_500_000_000,
        "{tasks:?}"
    );
    c.ok(&["wait", "1", "--timeout", "30s"]);
    let usage = c.json(&["usage"]);
    let admin = crate::support::core_seconds_of(&usage, "admin");
    let offered = usage["capacity"]["core_seconds"].as_f64().unwrap_or(0.0);
    assert!(
        admin <= offered + 1e-6,
        "charged {admin} core-seconds of the {offered} one core offered: {usage}"
    );
    assert!(
        (5.0..=8.0).contains(&admin),
        "three two-second tasks, one after another: {usage}"
    );
}

/// A workflow's instances are queued as batch tasks are: each tells its agent the cores it takes,
/// so an agent never starts a queued instance beside the ones holding its cores.
#[test]
fn an_agent_never_runs_more_workflow_instances_than_its_cores() {
    let mut c = Cluster::start_configured("prefetch-workflow", false, "prefetch = 2\n");
    c.start_agent("n", 1, &[]);
    c.wait_for_nodes(1);
    let log = c.dir.join("events");
    c.submit_file(
        "wf.toml",
        &format!(
            "balancer = \"centralised\"\n[[task]]\nname = \"w\"\ninstances = 4\ncommand = \"echo s >> {0}; sleep 0.4; echo e >> {0}\"\n",
            log.display()
        ),
    );
    wait_until(
        "the node to hold three instances",
        Duration::from_secs(20),
        || running_on(&c, "n") == 3,
    );
    c.ok(&["wait", "1", "--timeout", "60s"]);
    let events = lines(&log);
    let (mut now, mut most) = (0i32, 0i32);
    for e in &events {
        now += if e == "s" { 1 } else { -1 };
        most = most.max(now);
    }
    assert_eq!(events.len(), 8, "{events:?}");
    assert_eq!(most, 1, "one instance at a time on one core: {events:?}");
}

#[test]
fn tasks_queued_on_a_sigkilled_agent_run_exactly_once_elsewhere() {
    let mut c = Cluster::start_configured("prefetch-kill", false, "prefetch = 2\n");
    c.start_agent("a", 1, &[]);
    c.wait_for_nodes(1);
    let marks = c.dir.join("marks");
    // Task 0 runs long on a's one core; tasks 1 and 2 wait in a's queue.
    c.submit_file("job.toml",
        &format!(
            "[[application]]\nname = \"q\"\ntasks = 3\n[application.cpu]\ncommand = \"echo {{index}} >> {}; sleep 3\"\n",
            marks.display()
        ),
    );
    // Held by a (the server's view) and task 0's shell started (it writes its mark a moment after
    // the agent starts it).
    wait_until(
        "a to hold all three tasks and task 0 to start",
        Duration::from_secs(20),
        || running_on(&c, "a") == 3 && !lines(&marks).is_empty(),
    );
    assert_eq!(lines(&marks), ["0"], "only task 0 started on a");
    c.signal_agent("a", "KILL");
    let _ = c.agent_exit("a", Duration::from_secs(10));
    c.start_agent("b", 3, &[]);
    let out = c.cli(&["wait", "1", "--timeout", "60s"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let marks = lines(&marks);
    for queued in ["1", "2"] {
        assert_eq!(
            marks.iter().filter(|m| *m == queued).count(),
            1,
            "task {queued} (queued on a, never started there) ran once: {marks:?}"
        );
    }
    let tasks = c.tasks(1);
    assert!(tasks.iter().all(|t| t["state"] == "succeeded"), "{tasks:?}");
}

/// A divisible chunk holds a core of its agent, as the server books it: a batch task sent to a
/// one-core agent while a chunk is computed there waits in the agent's queue until the chunk is
/// done, and never runs beside it.
#[test]
fn a_queued_task_waits_for_the_core_a_divisible_chunk_holds() {
    // An agent computing only chunks beats at its idle interval: short here, so that the task
    // reaches it while the chunk runs.
    let mut c = Cluster::start_configured(
        "prefetch-chunk",
        false,
        "prefetch = 1\nidle_heartbeat_interval = \"200ms\"\n",
    );
    c.start_agent("n", 1, &[]);
    c.wait_for_nodes(1);
    let log = c.dir.join("events");
    c.submit_file(
        "chunk.toml",
        &format!(
            "[[divisible]]\nname = \"slow\"\nunits = 1\ncommand = \"echo s chunk{{start}} >> {0}; sleep 3; echo e chunk{{end}} >> {0}\"\n",
            log.display()
        ),
    );
    wait_until("the chunk to start", Duration::from_secs(20), || {
        lines(&log).iter().any(|e| e == "s chunk0")
    });
    c.submit_file(
        "task.toml",
        &format!(
            "[[application]]\nname = \"t\"\ntasks = 1\n[application.cpu]\ncommand = \"echo s task >> {0}; sleep 0.2; echo e task >> {0}\"\n",
            log.display()
        ),
    );
    // Sent to the node beyond its free cores (the chunk holds its one core): queued there.
    wait_until("the task to be queued", Duration::from_secs(20), || {
        c.tasks(2).first().is_some_and(|t| t["queued"] == true)
    });
    c.ok(&["wait", "2", "--timeout", "30s"]);
    let events = lines(&log);
    assert_eq!(
        events,
        ["s chunk0", "e chunk1", "s task", "e task"],
        "the task starts once the chunk's core is free"
    );
    assert_eq!(c.json(&["job", "1"])["state"], "completed");
}

/// A stream topology whose one worker holds a whole core: a spout and a bolt at 50 % each.
const HALF_AND_HALF: &str = r#"name = "live"
[[component]]
name = "numbers"
kind = "spout"
parallelism = 1
cpu = 50.0
builtin = "sequence-spout"
params = { rate = 20.0 }
[[component]]
name = "keep"
kind = "bolt"
parallelism = 1
cpu = 50.0
builtin = "filter"
[[stream]]
from = "numbers"
to = "keep"
rate = 20.0
"#;

/// A stream worker holds the cores the server books for it: a batch task sent to a one-core
/// agent whose worker holds its core waits in the agent's queue while the topology runs, and
/// starts once it is killed.
#[test]
fn a_queued_task_waits_for_the_cores_a_stream_worker_holds() {
    let mut c = Cluster::start_configured(
        "prefetch-worker",
        false,
        "prefetch = 1\nidle_heartbeat_interval = \"200ms\"\n",
    );
    c.start_agent("n", 1, &[]);
    c.wait_for_nodes(1);
    let topology = c.write("live.toml", HALF_AND_HALF);
    c.ok(&["topology", "submit", topology.to_str().expect("path")]);
    wait_until("the worker to run", Duration::from_secs(60), || {
        c.json(&["topology", "show", "live"])["workers"][0]["pid"]
            .as_u64()
            .is_some_and(|p| p != 0)
    });
    let log = c.dir.join("events");
    c.submit_file(
        "task.toml",
        &format!(
            "[[application]]\nname = \"t\"\ntasks = 1\n[application.cpu]\ncommand = \"echo s task >> {0}\"\n",
            log.display()
        ),
    );
    wait_until("the task to be queued", Duration::from_secs(20), || {
        c.tasks(1).first().is_some_and(|t| t["queued"] == true)
    });
    std::thread::sleep(Duration::from_secs(2));
    assert!(
        lines(&log).is_empty(),
        "the task must not start beside the worker holding the node's core"
    );
    assert_eq!(c.tasks(1)[0]["queued"], true);
    c.ok(&["topology", "kill", "live"]);
    let out = c.cli(&["wait", "1", "--timeout", "30s"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(lines(&log), ["s task"]);
}

#[test]
fn a_prefetch_setting_that_is_neither_auto_nor_a_number_is_refused_with_its_line() {
    let dir = ScratchDir::new("prefetch", "bad");
    let config = dir.join("server.toml");
    std::fs::write(&config, "listen = \"127.0.0.1:0\"\nprefetch = \"lots\"\n").expect("config");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_hetsched"))
        .args(["server", "--config"])
        .arg(&config)
        .arg("--data-dir")
        .arg(dir.join("data"))
        .output()
        .expect("run");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("server.toml:2") && err.contains("\"auto\" or a number of cores"),
        "{err}"
    );
    // bench-dispatch refuses the same before starting anything.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_hetsched"))
        .args(["bench-dispatch", "--prefetch", "lots"])
        .output()
        .expect("run");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("expected `auto` or a number of cores"),
        "{err}"
    );
}
