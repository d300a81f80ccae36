//! Accelerator sharing end to end (spec 01, issue 11) with the real `hetsched` binary on loopback:
//! rack A holds one ANode (a declared GPU and its accelerator service) and two NNodes, rack B one
//! NNode. GPU-only tasks placed on rack-A NNodes are offloaded to the ANode; rack B gets none.

use crate::support;
use hetsched_core::testkit::ScratchDir;

use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;
use support::{BIN, Cluster, wait_until};

/// An agent with 2 cores in `rack`; with `gpu`, it declares one GPU and serves the accelerator
/// service.
fn start_rack_agent(c: &mut Cluster, name: &str, rack: &str, gpu: bool) {
    start_rack_agent_with(c, name, rack, gpu, &[]);
}

/// [`start_rack_agent`] with the agent's `extra` flags.
fn start_rack_agent_with(c: &mut Cluster, name: &str, rack: &str, gpu: bool, extra: &[&str]) {
    let text = if gpu {
        "[[accelerator]]\nkind = \"sim\"\ncount = 1\n"
    } else {
        ""
    };
    start_configured_rack_agent(c, name, rack, text, extra);
}

/// An agent with 2 cores in `rack`, the agent configuration `text` (an ANode when it declares
/// an accelerator) and `extra` flags; it serves the accelerator service.
pub(crate) fn start_configured_rack_agent(
    c: &mut Cluster,
    name: &str,
    rack: &str,
    text: &str,
    extra: &[&str],
) {
    let config = c.write(&format!("agent-{name}.toml"), text);
    let config = config.display().to_string();
    let mut flags = vec![
        "--rack",
        rack,
        "--accel-listen",
        "127.0.0.1:0",
        "--config",
        &config,
    ];
    flags.extend_from_slice(extra);
    c.start_agent(name, 2, &flags);
}

/// Node name → the ANode it is bound to ("" = unbound), for live nodes.
fn bindings(c: &Cluster) -> BTreeMap<String, String> {
    c.json(&["nodes"])
        .as_array()
        .expect("nodes")
        .iter()
        .filter(|n| n["alive"] == true)
        .map(|n| {
            (
                n["name"].as_str().unwrap_or("").to_string(),
                n["bound_to"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect()
}

/// Waits until the live nodes' binding map is `expected` (node, ANode or "").
pub(crate) fn wait_bound(c: &Cluster, expected: &[(&str, &str)]) {
    let want: BTreeMap<String, String> = expected
        .iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect();
    wait_until("the binding map", Duration::from_secs(20), || {
        bindings(c) == want
    });
}

/// The job file: `tasks` GPU-only tasks that read `in/INDEX.dat` and write `out/INDEX.dat`
/// in `tasks/`, each logging its index, attempt, node and entry (`entry-INDEX`, one per task:
/// `entries` instead of `tasks`) to `ran.log`, and printing a line on stdout and one on stderr,
/// which go to `tasks/logs/solve-INDEX.log` (`stdout =`, `stderr =`).
fn job(c: &Cluster, tasks: u32, sleep: &str) -> PathBuf {
    let work = c.dir.join("tasks");
    std::fs::create_dir_all(work.join("in")).expect("in");
    for i in 0..tasks {
        std::fs::write(work.join(format!("in/{i}.dat")), input(i)).expect("input");
    }
    let path = c.dir.join("job.toml");
    std::fs::write(
        &path,
        format!(
            r#"
[[application]]
name = "solve"
entries = [{entries}]
accelerator = "required"
workdir = "{work}"
inputs = ["in/{{index}}.dat"]
outputs = ["out/{{index}}.dat"]
stdout = "logs/{{app}}-{{index}}.log"
stderr = "logs/{{app}}-{{index}}.log"
[application.gpu]
command = "sleep {sleep}; mkdir -p out && tr a-z A-Z < in/{{index}}.dat > out/{{index}}.dat && echo {{index}} $HETSCHED_ATTEMPT $HETSCHED_NODE {{entry}} $HETSCHED_ENTRY >> {log}; echo said {{index}}; echo warned {{index}} >&2"
"#,
            entries = (0..tasks)
                .map(|i| format!("\"entry-{i}\""))
                .collect::<Vec<_>>()
                .join(", "),
            work = work.display(),
            log = c.dir.join("ran.log").display(),
        ),
    )
    .expect("job");
    path
}

/// Task `i`'s input: some kilobytes that differ per task.
fn input(i: u32) -> Vec<u8> {
    (0..20_000u32)
        .map(|k| b'a' + ((k * 7 + i) % 26) as u8)
        .collect()
}

/// What a local run of the command writes.
fn expected_output(i: u32) -> Vec<u8> {
    input(i).to_ascii_uppercase()
}

fn rack_a_and_b(name: &str) -> Cluster {
    let mut c = Cluster::start(name, false);
    start_rack_agent(&mut c, "anode", "A", true);
    start_rack_agent(&mut c, "nnode-a1", "A", false);
    start_rack_agent(&mut c, "nnode-a2", "A", false);
    start_rack_agent(&mut c, "nnode-b", "B", false);
    wait_bound(
        &c,
        &[
            ("anode", ""),
            ("nnode-a1", "anode"),
            ("nnode-a2", "anode"),
            ("nnode-b", ""),
        ],
    );
    c
}

fn tasks_of(c: &Cluster) -> Vec<Value> {
    c.json(&["tasks", "--job", "1"])
        .as_array()
        .expect("tasks")
        .clone()
}

fn check_outputs(c: &Cluster, tasks: u32) {
    for i in 0..tasks {
        let got = std::fs::read(c.dir.join(format!("tasks/out/{i}.dat"))).expect("output");
        assert_eq!(got, expected_output(i), "output of task {i}");
        // An offloaded task's streams come back to the NNode, which writes them where the
        // application says, as a local run would.
        let said = std::fs::read_to_string(c.dir.join(format!("tasks/logs/solve-{i}.log")))
            .expect("the task's stdout file");
        assert_eq!(
            said,
            format!("said {i}\nwarned {i}\n"),
            "streams of task {i}"
        );
    }
}

#[test]
fn gpu_tasks_placed_on_rack_a_nnodes_run_on_its_anode_and_rack_b_gets_none() {
    let c = rack_a_and_b("e2e");
    let job = job(&c, 40, "0.05");
    let out = c.cli(&["submit", job.to_str().expect("path"), "--wait"]);
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stderr),
        std::fs::read_to_string(c.dir.join("server.log")).unwrap_or_default()
    );
    let tasks = tasks_of(&c);
    assert_eq!(tasks.len(), 40);
    let mut placed: BTreeMap<String, u32> = BTreeMap::new();
    for t in &tasks {
        assert_eq!(t["state"], "succeeded", "{t}");
        let node = t["node"].as_str().expect("node").to_string();
        // Every task ran on the rack's only device, wherever it was placed.
        assert_eq!(t["executed_node"], "anode", "{t}");
        assert_ne!(node, "nnode-b", "the rack-B NNode got a GPU task: {t}");
        *placed.entry(node).or_default() += 1;
    }
    assert!(
        placed.keys().any(|n| n.starts_with("nnode-a")),
        "no task was placed on a rack-A NNode: {placed:?}"
    );
    eprintln!("placed: {placed:?}");
    check_outputs(&c, 40);
    // `hetsched log` reads an offloaded task's stdout file through the NNode that placed it.
    let offloaded = tasks
        .iter()
        .find(|t| t["node"] != "anode")
        .expect("a task placed on an NNode");
    let index = offloaded["index"].as_u64().expect("index");
    assert_eq!(
        c.ok(&["log", "1", &format!("solve:{index}")]),
        format!("said {index}\nwarned {index}\n")
    );
    // Each task ran (and succeeded) exactly once, all on the ANode.
    let ran = std::fs::read_to_string(c.dir.join("ran.log")).expect("ran.log");
    let mut seen = BTreeSet::new();
    for l in ran.lines() {
        let f: Vec<&str> = l.split(' ').collect();
        assert_eq!(f[2], "anode", "{l}");
        // Offloaded or not, the task's argument and variable carry its own entry.
        let entry = format!("entry-{}", f[0]);
        assert_eq!((f[3], f[4]), (entry.as_str(), entry.as_str()), "{l}");
        assert!(seen.insert(f[0].to_string()), "task {} ran twice", f[0]);
    }
    assert_eq!(seen.len(), 40);
    // The CLI shows the map per rack.
    let maps = c.json(&["bindings"]);
    assert_eq!(maps[0]["rack"], "A", "{maps}");
    assert_eq!(maps[0]["anodes"][0]["name"], "anode", "{maps}");
    assert_eq!(
        maps[0]["anodes"][0]["nnodes"],
        serde_json::json!(["nnode-a1", "nnode-a2"])
    );
    assert_eq!(maps[1]["rack"], "B", "{maps}");
    assert_eq!(maps[1]["unbound"], serde_json::json!(["nnode-b"]));
    // Every heartbeat carries the ANode's device state and queue lengths; nodes show their rack
    // and role.
    let nodes = c.json(&["nodes"]);
    let by_name = |name: &str| -> Value {
        nodes
            .as_array()
            .and_then(|a| a.iter().find(|n| n["name"] == name))
            .cloned()
            .unwrap_or(Value::Null)
    };
    let anode = by_name("anode");
    assert_eq!(anode["role"], "anode", "{anode}");
    assert_eq!(anode["rack"], "A", "{anode}");
    assert_eq!(anode["accel"]["devices"][0]["device"], 0, "{anode}");
    assert_eq!(anode["accel"]["process_queue"], 0, "{anode}");
    let b = by_name("nnode-b");
    assert_eq!(
        (&b["role"], &b["rack"]),
        (&Value::from("nnode"), &Value::from("B"))
    );
    assert!(
        b["accel"].is_null(),
        "an NNode has no accelerator service: {b}"
    );
    let text = String::from_utf8_lossy(&c.cli(&["bindings"]).stdout).to_string();
    assert!(
        text.contains("rack A\n  anode (queues r/p/w 0/0/0) <- nnode-a1, nnode-a2")
            && text.contains("rack B\n  (no ANode")
            && text.contains("unbound: nnode-b"),
        "{text}"
    );
    let table = String::from_utf8_lossy(&c.cli(&["nodes"]).stdout).to_string();
    assert!(
        table.contains("-> anode") && table.contains("unbound"),
        "{table}"
    );
}

#[test]
fn an_anode_killed_mid_job_unbinds_its_nnodes_and_after_a_restart_the_job_completes_once() {
    let mut c = rack_a_and_b("kill");
    let job = job(&c, 24, "0.2");
    let out = c.cli(&["submit", job.to_str().expect("path")]);
    assert!(out.status.success());
    // Mid-job: some tasks done, others offloaded and running.
    wait_until("a few successes", Duration::from_secs(30), || {
        c.json(&["job", "1"])["counts"]["succeeded"]
            .as_u64()
            .unwrap_or(0)
            >= 4
    });
    c.kill_agent("anode");
    // Declared dead after the 1 s timeout: both rack-A NNodes wait unbound.
    wait_bound(&c, &[("nnode-a1", ""), ("nnode-a2", ""), ("nnode-b", "")]);
    let before = c.json(&["job", "1"])["counts"]["succeeded"]
        .as_u64()
        .unwrap_or(0);
    assert!(before < 24, "the job ended before the ANode was killed");
    // The restarted ANode (same name, same work directory) takes them back.
    start_rack_agent(&mut c, "anode", "A", true);
    wait_bound(
        &c,
        &[
            ("anode", ""),
            ("nnode-a1", "anode"),
            ("nnode-a2", "anode"),
            ("nnode-b", ""),
        ],
    );
    let out = c.cli(&["wait", "1"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let tasks = tasks_of(&c);
    assert!(tasks.iter().all(|t| t["state"] == "succeeded"));
    assert!(
        tasks.iter().any(|t| t["attempt"].as_u64() > Some(1)),
        "no task was re-queued by the ANode's loss"
    );
    assert!(tasks.iter().all(|t| t["node"] != "nnode-b"));
    let attempts: Vec<(u64, String)> = tasks
        .iter()
        .map(|t| {
            (
                t["attempt"].as_u64().unwrap_or(0),
                t["node"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect();
    eprintln!("attempts: {attempts:?}; succeeded before the restart: {before}");
    let job = c.json(&["job", "1"]);
    assert_eq!(job["counts"]["succeeded"], 24, "{job}");
    check_outputs(&c, 24);
}

/// An ANode SIGKILLed while it runs an NNode's offloaded task: no ledger lists the task's
/// processes (the NNode runs none; the ANode records only its own tasks), so before they carried
/// the agent's mark (`HETSCHED_AGENT_WORK_DIR`) the guard left them running, beside the copy the
/// server starts once the NNode is unbound.
#[test]
fn a_sigkilled_anodes_guard_kills_the_offloaded_task_it_was_running() {
    let mut c = Cluster::start("anode-guard", false);
    start_rack_agent(&mut c, "anode", "A", true);
    start_rack_agent(&mut c, "nnode-a1", "A", false);
    wait_bound(&c, &[("anode", ""), ("nnode-a1", "anode")]);
    let log = c.dir.join("pids.log");
    let job = c.write(
        "job.toml",
        &format!(
            "[[application]]\nname = \"held\"\ntasks = 1\naccelerator = \"required\"\n\
             requires = [\"node:nnode-a1\"]\n[application.gpu]\n\
             command = \"echo $$ >> {log}; sleep 60 & echo $! >> {log}; wait\"\n",
            log = log.display()
        ),
    );
    c.ok(&["submit", job.to_str().expect("path")]);
    let pids = || -> Vec<u32> {
        support::lines(&log)
            .iter()
            .filter_map(|l| l.trim().parse().ok())
            .collect()
    };
    wait_until(
        "the offloaded task and its sleep",
        Duration::from_secs(30),
        || pids().len() == 2,
    );
    let task = &c.json(&["tasks", "--job", "1"])[0];
    assert_eq!(task["node"], "nnode-a1", "{task}");
    let running = pids();
    c.kill_agent("anode");
    wait_until(
        "the ANode's guard to kill the offloaded task, its child included",
        Duration::from_secs(5),
        || running.iter().all(|&p| crate::runtime::process_gone(p)),
    );
}

/// An offloaded task's attempt is recorded on the NNode that placed it, where its output comes
/// back, as a local run's is: its capture file removed after it ended, `log` fails naming the
/// task, the node and the file, while a task that printed nothing still reads "printed
/// nothing" (exit 0). Before, neither was recorded, and `log` of either read as output this
/// node never ran ("records no run of this attempt here").
#[test]
fn log_of_an_offloaded_tasks_removed_output_fails_and_a_silent_one_printed_nothing() {
    let mut c = Cluster::start("accel-log-gone", false);
    start_rack_agent(&mut c, "anode", "A", true);
    start_rack_agent(&mut c, "nnode-a1", "A", false);
    wait_bound(&c, &[("anode", ""), ("nnode-a1", "anode")]);
    let app = |name: &str, command: &str| {
        format!(
            "[[application]]\nname = \"{name}\"\ntasks = 1\naccelerator = \"required\"\n\
             requires = [\"node:nnode-a1\"]\n[application.gpu]\ncommand = \"{command}\"\n"
        )
    };
    let job = c.write(
        "job.toml",
        &(app("said", "echo important-result") + &app("quiet", "true")),
    );
    c.ok(&["submit", job.to_str().expect("path"), "--wait"]);
    for t in tasks_of(&c) {
        assert_eq!(
            (&t["node"], &t["executed_node"]),
            (&Value::from("nnode-a1"), &Value::from("anode")),
            "{t}"
        );
    }
    let text = |b: &[u8]| String::from_utf8_lossy(b).to_string();
    assert_eq!(c.ok(&["log", "1", "said:0"]), "important-result\n");
    let silent = || {
        let out = c.cli(&["log", "1", "quiet:0"]);
        assert!(
            out.status.success()
                && out.stdout.is_empty()
                && text(&out.stderr).contains("printed nothing on stdout"),
            "{}",
            text(&out.stderr)
        );
    };
    silent();
    let captured = c.dir.join("agent-nnode-a1/job-1/said-0.1.out");
    std::fs::remove_file(&captured).expect("rm the capture file");
    let out = c.cli(&["log", "1", "said:0"]);
    let err = text(&out.stderr);
    assert!(!out.status.success() && out.stdout.is_empty(), "{err}");
    assert!(
        err.contains("node `nnode-a1`")
            && err.contains("job 1's task \"said\":0 attempt 1 is gone")
            && err.contains(&format!(
                "{} was removed (the attempt printed on its stdout)",
                captured.display()
            )),
        "{err}"
    );
    silent();
}

#[test]
fn with_container_binding_an_nnodes_containers_offload_to_the_anodes_they_are_bound_to() {
    // `binding = "container"`, two containers per node: rack A holds two ANodes (a1, a2; one GPU
    // each) and two NNodes. By spec 01's container rule (weighted, an ANode's own containers
    // count as its users, ties by name) each NNode's container 0 goes to a1 and container 1 to
    // a2, so every NNode reaches both ANodes, which node binding never gives.
    let mut c = Cluster::start_configured(
        "container",
        false,
        "binding = \"container\"\nbinding_slots = 2\n",
    );
    start_rack_agent(&mut c, "a1", "A", true);
    start_rack_agent(&mut c, "a2", "A", true);
    wait_bound(&c, &[("a1", ""), ("a2", "")]);
    start_rack_agent(&mut c, "n1", "A", false);
    start_rack_agent(&mut c, "n2", "A", false);
    let containers = |c: &Cluster| -> BTreeMap<String, Value> {
        c.json(&["nodes"])
            .as_array()
            .expect("nodes")
            .iter()
            .filter(|n| n["alive"] == true && n["role"] == "nnode")
            .map(|n| {
                (
                    n["name"].as_str().unwrap_or("").to_string(),
                    n["containers"].clone(),
                )
            })
            .collect()
    };
    let want: BTreeMap<String, Value> = [
        ("n1".to_string(), serde_json::json!(["a1", "a2"])),
        ("n2".to_string(), serde_json::json!(["a1", "a2"])),
    ]
    .into();
    wait_until("the container map", Duration::from_secs(20), || {
        containers(&c) == want
    });
    // `hetsched bindings` lists each container as a unit of its own.
    let maps = c.json(&["bindings"]);
    assert_eq!(maps[0]["anodes"][0]["name"], "a1", "{maps}");
    assert_eq!(
        maps[0]["anodes"][0]["nnodes"],
        serde_json::json!(["n1/0", "n2/0"]),
        "{maps}"
    );
    assert_eq!(
        maps[0]["anodes"][1]["nnodes"],
        serde_json::json!(["n1/1", "n2/1"]),
        "{maps}"
    );

    let job = job(&c, 16, "0.1");
    let out = c.cli(&["submit", job.to_str().expect("path"), "--wait"]);
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stderr),
        std::fs::read_to_string(c.dir.join("server.log")).unwrap_or_default()
    );
    let tasks = tasks_of(&c);
    // Where each task was placed → the ANodes that ran the ones offloaded from there.
    let mut ran_on: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut executed = BTreeMap::new();
    for t in &tasks {
        assert_eq!(t["state"], "succeeded", "{t}");
        let node = t["node"].as_str().expect("node").to_string();
        let ex = t["executed_node"].as_str().expect("executed").to_string();
        assert!(ex == "a1" || ex == "a2", "{t}");
        if node.starts_with('n') {
            ran_on.entry(node).or_default().insert(ex.clone());
        } else {
            assert_eq!(node, ex, "an ANode runs its own tasks: {t}");
        }
        executed.insert(t["index"].as_u64().expect("index").to_string(), ex);
    }
    eprintln!("offloads by NNode: {ran_on:?}");
    assert!(
        ran_on.values().any(|a| a.len() == 2),
        "no NNode used both of its containers' ANodes: {ran_on:?}"
    );
    // Each task really ran where the server says (its command logs the node it ran on), once.
    let ran = std::fs::read_to_string(c.dir.join("ran.log")).expect("ran.log");
    let mut seen = BTreeSet::new();
    for l in ran.lines() {
        let f: Vec<&str> = l.split(' ').collect();
        assert_eq!(Some(&f[2].to_string()), executed.get(f[0]), "{l}");
        assert!(seen.insert(f[0].to_string()), "task {} ran twice", f[0]);
    }
    assert_eq!(seen.len(), 16);
    check_outputs(&c, 16);
}

#[test]
fn required_and_preferred_tasks_use_a_reachable_device_and_only_preferred_ones_fall_back_to_cpus() {
    // Both applications have a CPU and a GPU variant. `required` runs only on a device (the
    // ANode's, or offloaded from a bound NNode); `preferred` runs on a device wherever one is
    // reachable and on the CPUs of rack B's NNode (which reaches none) only when the devices are
    // busy. So no task runs a CPU variant in rack A, and rack B never gets a required one.
    let c = rack_a_and_b("need");
    let work = c.dir.join("tasks");
    std::fs::create_dir_all(&work).expect("work");
    let app = |name: &str, need: &str, tasks: u32| {
        format!(
            "[[application]]\nname = \"{name}\"\ntasks = {tasks}\naccelerator = \"{need}\"\n\
             workdir = \"{work}\"\n[application.cpu]\ncommand = \"sleep 0.1\"\n\
             [application.gpu]\ncommand = \"sleep 0.1\"\n",
            work = work.display()
        )
    };
    let path = c.dir.join("needs.toml");
    std::fs::write(
        &path,
        app("req", "required", 8) + &app("pref", "preferred", 16),
    )
    .expect("job");
    let out = c.cli(&["submit", path.to_str().expect("path"), "--wait"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut seen: BTreeMap<(String, String, String), u32> = BTreeMap::new();
    for t in tasks_of(&c) {
        assert_eq!(t["state"], "succeeded", "{t}");
        let (app, node, variant) = (
            t["app"].as_str().unwrap_or("").to_string(),
            t["node"].as_str().unwrap_or("").to_string(),
            t["variant"].as_str().unwrap_or("").to_string(),
        );
        if node == "nnode-b" {
            assert_eq!((app.as_str(), variant.as_str()), ("pref", "cpu"), "{t}");
        } else {
            assert_eq!(variant, "gpu", "{t}");
            assert_eq!(t["executed_node"], "anode", "{t}");
        }
        *seen.entry((app, node, variant)).or_default() += 1;
    }
    eprintln!("(application, node, variant) → tasks: {seen:?}");
    assert_eq!(seen.values().sum::<u32>(), 24);
}

#[test]
fn bad_rack_and_service_flags_are_refused_with_the_flag_named() {
    let dir = ScratchDir::new("accel", "flags");
    let token = dir.join("token");
    std::fs::write(&token, "t").expect("token");
    for (flag, value, says) in [
        ("--rack", "", "--rack ``"),
        (
            "--accel-listen",
            "not-an-address",
            "--accel-listen `not-an-address`",
        ),
    ] {
        let out = Command::new(BIN)
            .args(["agent", "--server", "http://127.0.0.1:9", "--name", "x"])
            .args([flag, value])
            .arg("--token-file")
            .arg(&token)
            .output()
            .expect("run");
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(says), "{err}");
    }
}

/// With `--run-as-owner` on every agent a user's GPU tasks run as its account wherever they
/// run, offloaded from an NNode or on the ANode itself: the outputs, `stdout` files and their
/// directories in the user's directory are the account's. Needs root (CI runs as root).
#[test]
fn with_run_as_owner_a_users_offloaded_gpu_tasks_run_as_its_account() {
    use std::os::unix::fs::MetadataExt;
    if !std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0) {
        eprintln!("skipped: needs root");
        return;
    }
    let mut c = Cluster::start("accel-run-as", false);
    for (name, gpu) in [("anode", true), ("nnode-a1", false)] {
        start_rack_agent_with(&mut c, name, "A", gpu, &["--run-as-owner"]);
    }
    wait_bound(&c, &[("anode", ""), ("nnode-a1", "anode")]);
    let token = c.add_user("nobody");
    let file = job(&c, 12, "0.05");
    let work = c.dir.join("tasks");
    for entry in std::fs::read_dir(work.join("in"))
        .expect("inputs")
        .flatten()
    {
        std::os::unix::fs::chown(entry.path(), Some(65534), Some(65534)).expect("chown");
    }
    for dir in [work.clone(), work.join("in")] {
        std::os::unix::fs::chown(&dir, Some(65534), Some(65534)).expect("chown");
    }
    // The job's log of runs is the account's to write.
    std::fs::write(c.dir.join("ran.log"), "").expect("ran.log");
    std::os::unix::fs::chown(c.dir.join("ran.log"), Some(65534), Some(65534)).expect("chown");
    // Who ran each task, wherever it ran (an undeclared file, so written where it is read).
    let who = c.dir.join("who");
    std::fs::create_dir_all(&who).expect("who");
    std::os::unix::fs::chown(&who, Some(65534), Some(65534)).expect("chown");
    let text = std::fs::read_to_string(&file).expect("job").replace(
        "echo said {index};",
        &format!("echo said {{index}}; id -un > {}/{{index}};", who.display()),
    );
    std::fs::write(&file, text).expect("job");
    c.ok_as(
        &token,
        None,
        &["submit", file.to_str().expect("path"), "--wait"],
    );
    let tasks = tasks_of(&c);
    assert!(
        tasks.iter().any(|t| t["node"] == "nnode-a1"),
        "no task was offloaded: {tasks:?}"
    );
    check_outputs(&c, 12);
    for i in 0..12 {
        let ran_as = std::fs::read_to_string(who.join(i.to_string())).expect("who");
        assert_eq!(ran_as, "nobody\n", "task {i}");
        for made in [format!("out/{i}.dat"), format!("logs/solve-{i}.log")] {
            assert_eq!(
                std::fs::metadata(work.join(&made)).expect("made").uid(),
                65534,
                "{made} is the account's"
            );
        }
    }
}
