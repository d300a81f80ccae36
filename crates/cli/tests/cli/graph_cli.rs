//! `hetsched sim graph` and `hetsched sim pcddb-paper` as a user meets them: the real binary on the
//! example files, the export document, and bad workflows refused with file, line and field.

use crate::support::binary::{assert_ok, hetsched};
use hetsched_core::testkit::ScratchDir;
use std::path::PathBuf;
use std::process::Output;

/// An object's keys, sorted.
fn keys(v: &serde_json::Value) -> Vec<String> {
    let mut k: Vec<String> = v
        .as_object()
        .map(|o| o.keys().cloned().collect())
        .unwrap_or_default();
    k.sort();
    k
}

const CLUSTER: &str = "examples/cluster-graph-small.toml";
const WORKFLOW: &str = "examples/workflow-loop.toml";

fn graph(workflow: &str, extra: &[&str]) -> Output {
    let mut args = vec!["sim", "graph", "--cluster", CLUSTER, "--workflow", workflow];
    args.extend_from_slice(extra);
    hetsched(&args)
}

/// A fresh directory for the test (held by it: removed when it passes) and the path `name` in it.
fn temp(name: &str) -> (ScratchDir, PathBuf) {
    let dir = ScratchDir::new("graph-cli", name);
    let path = dir.join(name);
    (dir, path)
}

#[test]
fn the_export_lists_every_instance_node_and_message_counter() {
    let (_path_dir, path) = temp("pcddb.json");
    let p = path.display().to_string();
    let out = graph(
        WORKFLOW,
        &[
            "--balancer",
            "pcddb",
            "--lt",
            "2",
            "--mt",
            "10",
            "--launch",
            "eight-1",
            "--seed",
            "3",
            "--export",
            &p,
        ],
    );
    assert_ok(&out);
    let text = std::fs::read_to_string(&path).expect("export written");
    let doc: serde_json::Value = serde_json::from_str(&text).expect("export is JSON");
    assert_eq!(
        keys(&doc),
        [
            "balancer",
            "execution",
            "instances",
            "launch",
            "makespan",
            "messages",
            "nodes",
            "seed",
            "tasks"
        ]
    );
    assert_eq!(
        doc["seed"], 3,
        "the seed that, with the files, makes the run again"
    );
    assert_eq!(doc["launch"], "eight-1");
    assert_eq!(doc["balancer"], "pcddb");
    assert_eq!(doc["execution"], "queue", "the default");
    // The task graph, as the launch node's task manager sees it.
    assert_eq!(
        doc["tasks"],
        serde_json::json!([
            {"name": "A", "instances": 40, "processes": 4, "depends_on": []},
            {"name": "B", "instances": 40, "processes": 4,
             "depends_on": [{"task": "A", "kind": "one-to-one"}]},
            {"name": "C", "instances": 2, "processes": 1,
             "depends_on": [{"task": "B", "kind": "all"}]},
        ])
    );
    assert_eq!(keys(&doc["messages"]), ["by_kind", "launch_node", "total"]);
    let instances = doc["instances"].as_array().expect("instances");
    assert_eq!(
        instances.len(),
        40 + 40 + 2,
        "A [p4]{{1-10}}, B [p4]{{1-10}}, C ×2"
    );
    for i in instances {
        assert_eq!(
            keys(i),
            [
                "core",
                "cost",
                "end",
                "index",
                "node",
                "placed",
                "placement",
                "ready",
                "start",
                "task"
            ]
        );
        // An instance runs for its cost over its node's core speed.
        let speed = doc["nodes"]
            .as_array()
            .and_then(|ns| ns.iter().find(|n| n["name"] == i["node"]))
            .and_then(|n| n["core_speed"].as_f64())
            .expect("its node");
        let ran = i["end"].as_f64().unwrap_or(0.0) - i["start"].as_f64().unwrap_or(0.0);
        let cost = i["cost"].as_f64().unwrap_or(0.0);
        assert!(cost > 0.0 && (ran - cost / speed).abs() < 1e-6, "{i}");
        assert!(
            i["ready"].as_f64() <= i["placed"].as_f64()
                && i["placed"].as_f64() <= i["start"].as_f64()
                && i["start"].as_f64() <= i["end"].as_f64(),
            "ready, placed, started, ended in this order: {i}"
        );
        if i["task"] == "C" {
            assert_eq!(i["node"], "gpu", "C requires a GPU");
        }
    }
    // Every instance was placed once: the placements number 0, 1, … in time order.
    let mut placed: Vec<(f64, u64)> = instances
        .iter()
        .map(|i| {
            (
                i["placed"].as_f64().unwrap_or(f64::NAN),
                i["placement"].as_u64().unwrap_or(u64::MAX),
            )
        })
        .collect();
    placed.sort_by_key(|p| p.1);
    assert!(placed.iter().enumerate().all(|(k, p)| p.1 == k as u64));
    assert!(placed.windows(2).all(|w| w[0].0 <= w[1].0), "{placed:?}");
    let nodes = doc["nodes"].as_array().expect("nodes");
    assert_eq!(nodes.len(), 7);
    for n in nodes {
        assert_eq!(
            keys(n),
            [
                "core_speed",
                "cores",
                "latency_from_launch",
                "latency_to_launch",
                "name",
                "peak_instances"
            ]
        );
        if n["name"] == "eight-1" {
            assert_eq!(n["latency_from_launch"], 0.0, "the launch node itself");
        } else {
            assert!(n["latency_to_launch"].as_f64() > Some(0.0), "{n}");
        }
        let cores = n["cores"].as_u64().unwrap_or(0);
        assert!(
            n["peak_instances"].as_u64().unwrap_or(u64::MAX) <= 10 * cores,
            "MT × cores: {n}"
        );
    }
    let m = &doc["messages"];
    assert_eq!(m["by_kind"]["result"], 82);
    assert!(m["by_kind"]["request"].as_u64() > Some(0));
    assert!(m["launch_node"].as_u64() <= m["total"].as_u64());
    assert!(
        doc["makespan"].as_f64() > Some(20.0),
        "at least one A and one B and one C"
    );
    // Same seed, same bytes.
    let (_again_dir, again) = temp("pcddb-again.json");
    let a = again.display().to_string();
    let out = graph(
        WORKFLOW,
        &[
            "--balancer",
            "pcddb",
            "--launch",
            "eight-1",
            "--seed",
            "3",
            "--export",
            &a,
        ],
    );
    assert!(out.status.success());
    assert_eq!(std::fs::read(&path).ok(), std::fs::read(&again).ok());
}

#[test]
fn every_balancer_runs_and_prints_json() {
    for balancer in ["static", "centralised", "pcddb"] {
        let out = graph(WORKFLOW, &["--balancer", balancer, "--output", "json"]);
        assert!(
            out.status.success(),
            "{balancer}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON on stdout");
        assert_eq!(v["balancer"], balancer);
        assert_eq!(v["instances"], 82);
        // Where ready instances waited: static and centralised send each to its node at once.
        let wait = |k: &str| v["waits"][k].as_f64().unwrap_or(f64::NAN);
        assert!(wait("for_node_mean_s") <= wait("for_node_max_s"), "{v}");
        assert!(wait("in_queue_mean_s") <= wait("in_queue_max_s"), "{v}");
        if balancer != "pcddb" {
            assert!(wait("for_node_max_s") < 0.01, "sent when ready: {v}");
        }
        // With nodes time-sharing their cores, an instance starts when its node takes it.
        let out = graph(
            WORKFLOW,
            &[
                "--balancer",
                balancer,
                "--execution",
                "time-share",
                "--output",
                "json",
            ],
        );
        assert!(out.status.success(), "{balancer}, time-share");
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON on stdout");
        assert_eq!(v["instances"], 82);
        assert_eq!(
            v["waits"]["in_queue_max_s"], 0.0,
            "{balancer}: no queue: {v}"
        );
    }
}

#[test]
fn bad_workflows_are_refused_with_file_line_and_field() {
    for (file, line, what) in [
        (
            "cycle.toml",
            6,
            "task[0].inputs: the data flow has a cycle: A → B → A",
        ),
        (
            "missing-producer.toml",
            5,
            "task[0].inputs[0]: input `m` has no producer",
        ),
        (
            "two-producers.toml",
            11,
            "task[1].outputs[0]: output `m` has two producers: task `A` and task `A2`",
        ),
        (
            "bad-range.toml",
            3,
            "task[0].instances: bad range `10..=1`: it is empty",
        ),
        (
            "unknown-requirement.toml",
            5,
            "task[0].requires[0]: unknown requirement `fpga`",
        ),
    ] {
        let path = format!("tests/fixtures/workflow/{file}");
        let out = graph(&path, &[]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{file}: {stderr}");
        assert!(
            stderr.contains(&format!("{path}:{line}:")),
            "{file}: {stderr}"
        );
        assert!(stderr.contains(what), "{file}: {stderr}");
        assert!(!stderr.contains("panicked"));
        assert!(out.stdout.is_empty());
    }
}

#[test]
fn a_cost_spread_past_ten_is_refused_at_its_line() {
    // cv = 1e300 made every sampled cost 0.
    let (_path_dir, path) = temp("cv.toml");
    std::fs::write(
        &path,
        "[[task]]\nname = \"A\"\ninstances = 4\ncost = { mean = \"1s\", cv = 1e300 }\n",
    )
    .expect("write");
    let shown = path.display().to_string();
    let out = graph(&shown, &[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "{shown}:4:28: task[0].cost.cv: must be at most 10, got 1e300"
        )),
        "{stderr}"
    );
    assert!(out.stdout.is_empty());
}

#[test]
fn a_latency_pair_of_a_node_with_itself_is_refused_at_its_line() {
    let (_path_dir, path) = temp("self-latency.toml");
    std::fs::write(
        &path,
        "[[pair]]\nbetween = [\"dual-1\", \"dual-1\"]\nlatency = \"1ms\"\n",
    )
    .expect("write");
    let shown = path.display().to_string();
    let out = graph(WORKFLOW, &["--latency", &shown]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "{shown}:2:22: pair[0].between[1]: pairs node `dual-1` with itself"
        )),
        "{stderr}"
    );
}

#[test]
fn bad_options_say_what_is_wrong() {
    let out = graph(WORKFLOW, &["--launch", "nowhere"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown node `nowhere`"));
    let out = graph(WORKFLOW, &["--lt", "5", "--mt", "3"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("LT ≤ MT"));
    // LT 0 leaves no node ever underloaded, so no node would ask for work and PCDDB would stall:
    // refused up front rather than reported as a simulation that never finishes.
    let out = graph(WORKFLOW, &["--lt", "0"]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("--lt 0") && stderr.contains("1 ≤ LT ≤ MT"),
        "{stderr}"
    );
    let out = graph(WORKFLOW, &["--balancer", "round-robin"]);
    assert_eq!(out.status.code(), Some(2), "clap refuses unknown balancers");
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown balancer `round-robin`"));
    let out = graph(WORKFLOW, &["--execution", "fifo"]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("--execution") && stderr.contains("expected queue or time-share"),
        "{stderr}"
    );
    let out = graph(
        WORKFLOW,
        &["--latency", "tests/fixtures/workflow/cycle.toml"],
    );
    assert_eq!(
        out.status.code(),
        Some(1),
        "a workflow is not a latency file"
    );
}

#[test]
fn a_check_interval_under_1ms_and_a_message_cost_over_1h_are_refused() {
    // 1 ns self-checks ran a one-second workflow for minutes; 5000h per message overflowed the
    // clock (a panic in debug builds).
    for balancer in ["pcddb", "centralised"] {
        let out = graph(
            WORKFLOW,
            &["--balancer", balancer, "--check-interval", "1ns"],
        );
        assert_eq!(out.status.code(), Some(1), "{balancer}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("--check-interval must be at least 1ms"),
            "{stderr}"
        );
    }
    let out = graph(WORKFLOW, &["--message-cost", "5000h"]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("--message-cost must be at most 1h") && !stderr.contains("panicked"),
        "{stderr}"
    );
    // An hour is accepted; a node that cannot keep up with its messages is named as such.
    let out = graph(WORKFLOW, &["--message-cost", "1h"]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("receives them faster than it handles them"),
        "{stderr}"
    );
}

#[test]
fn a_cluster_past_100000_nodes_is_refused_and_one_of_100000_runs_in_little_memory() {
    // 100,000 nodes once allocated an 80 GB latency matrix and aborted, and the launch nodes'
    // lookups made a round of checks cost nodes² steps (sim graph stopped at 10,000). sim graph
    // stops at 100,000, where cluster files stop too (the parser names its limit).
    let (_big_dir, big) = temp("nodes-100001.toml");
    std::fs::write(&big, "[[node]]\nname = \"n\"\ncount = 100001\ncores = 4\n").expect("write");
    let out = hetsched(&[
        "sim",
        "graph",
        "--cluster",
        &big.display().to_string(),
        "--workflow",
        WORKFLOW,
    ]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("nodes-100001.toml:")
            && stderr.contains("100001 nodes in all")
            && stderr.contains("at most 100000"),
        "{stderr}"
    );
    let (_small_dir, small) = temp("nodes-100000.toml");
    std::fs::write(
        &small,
        "[[node]]\nname = \"n\"\ncount = 100000\ncores = 4\n[[node.accelerator]]\nkind = \"k\"\n",
    )
    .expect("write");
    // Static (no checks) keeps a debug test short; every balancer runs 20,000 nodes in
    // hetsched-sim's test `a_cluster_of_20000_nodes_runs_every_instance_once_under_every_balancer`.
    let out = hetsched(&[
        "sim",
        "graph",
        "--cluster",
        &small.display().to_string(),
        "--workflow",
        WORKFLOW,
        "--balancer",
        "static",
        "--output",
        "json",
    ]);
    assert_ok(&out);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(v["instances"], 82);
}

#[test]
fn the_pcddb_paper_scenario_reports_the_papers_figures() {
    let (_scratch, dir) = temp("pcddb-paper-out");
    let d = dir.display().to_string();
    let out = hetsched(&[
        "sim",
        "pcddb-paper",
        "--seeds",
        "1",
        "--output",
        "json",
        "--out",
        &d,
    ]);
    assert_ok(&out);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(
        v["deployment_cores"], 52,
        "Sc2: 14 dual-core + 3 eight-core nodes"
    );
    // At the paper's 48 h pcddb's launch node handles fewer messages than the dispatcher (at
    // 12–24 h its idle nodes' status reports outweigh the saved dispatches: graphs.md (ii)).
    let launch_msgs = |balancer: &str| {
        v["run_time"]
            .as_array()
            .and_then(|rows| {
                rows.iter()
                    .find(|r| r["hours"] == 48 && r["balancer"] == balancer)
            })
            .and_then(|r| r["launch_node_messages"].as_f64())
    };
    let (pcddb, centralised) = (launch_msgs("pcddb"), launch_msgs("centralised"));
    assert!(
        pcddb.is_some() && pcddb < centralised,
        "{pcddb:?} < {centralised:?}"
    );
    assert_eq!(v["per_core"][0]["paper_mean"], 34.0);
    assert_eq!(v["run_time"].as_array().map(Vec::len), Some(12));
    assert_eq!(v["speedup"].as_array().map(Vec::len), Some(20));
    // 4 input sizes × 5 message costs × 4 MT values.
    assert_eq!(v["ordering"].as_array().map(Vec::len), Some(80));
    // The run times again with nodes time-sharing their cores: 4 input sizes × 3 balancers.
    assert_eq!(v["time_share"].as_array().map(Vec::len), Some(12));
    assert!(v["ordering_holds_time_sharing"].is_boolean());
    // Every core of Sc2, dual-core first as in the paper's figures 5 and 6.
    let cores = v["cores"].as_array().expect("cores");
    assert_eq!(cores.len(), 52);
    assert_eq!(cores[0]["node_type"], "dual-core");
    assert_eq!(cores[51]["node_type"], "eight-core");

    // --out: the JSON, a CSV per part and the paper's figures.
    let read = |name: &str| {
        std::fs::read_to_string(dir.join(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
    };
    let json: serde_json::Value =
        serde_json::from_str(&read("pcddb-paper.json")).expect("pcddb-paper.json");
    assert_eq!(json["cores"], v["cores"], "the file is the printed report");
    let csv = read("cores.csv");
    assert_eq!(csv.lines().count(), 53, "a header and 52 cores: {csv}");
    assert!(csv.starts_with("seed,node,core,node_type,instances,busy_s\n"));
    let completed: u64 = csv
        .lines()
        .skip(1)
        .filter_map(|l| l.split(',').nth(4)?.parse::<u64>().ok())
        .sum();
    let instances_48h = v["run_time"]
        .as_array()
        .and_then(|rows| rows.iter().find(|r| r["hours"] == 48))
        .and_then(|r| r["instances"].as_u64());
    assert_eq!(
        Some(completed),
        instances_48h,
        "every instance on some core"
    );
    assert_eq!(read("run_time.csv").lines().count(), 13);
    assert_eq!(read("ordering.csv").lines().count(), 81);
    assert_eq!(read("time_share.csv").lines().count(), 13);
    assert_eq!(read("speedup.csv").lines().count(), 21);
    for svg in [
        "fig5_instances_per_core.svg",
        "fig6_busy_per_core.svg",
        "fig7_run_time.svg",
        "fig8_balancing_latency.svg",
        "table4_speedup.svg",
        "message_cost.svg",
        "ordering_12h.svg",
        "ordering_48h.svg",
    ] {
        let text = read(svg);
        assert!(text.starts_with("<svg") && text.contains("</svg>"), "{svg}");
    }
    assert!(
        read("fig7_run_time.svg").contains("centralised"),
        "figure 7 names its series"
    );
}

/// A seed named twice in `pcddb-paper --seeds` would count its runs twice in every mean; it is
/// refused, naming the flag and the seed, before any run.
#[test]
fn pcddb_paper_refuses_a_seed_given_twice() {
    let out = hetsched(&["sim", "pcddb-paper", "--seeds", "1,2,1"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("--seeds") && err.contains("seed 1"), "{err}");
    assert!(out.stdout.is_empty(), "it ran");
}

/// The summary carries the seed it ran with (a run is made again from its inputs and seed),
/// and each node's busy time is also named in seconds (`busy_s`, beside `busy`).
#[test]
fn the_summary_carries_its_seed_and_busy_seconds() {
    let out = graph(
        WORKFLOW,
        &["--balancer", "pcddb", "--seed", "7", "--output", "json"],
    );
    assert_ok(&out);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(v["seed"], 7, "{v}");
    let nodes = v["nodes"].as_array().expect("nodes");
    assert!(!nodes.is_empty());
    let makespan = v["makespan_s"].as_f64().expect("makespan");
    for n in nodes {
        assert_eq!(n["busy_s"], n["busy"], "{n}");
        assert!(n["busy_s"].is_number(), "{n}");
        // Core-seconds, named so, and the share of the node's core time (the table's %).
        assert_eq!(n["busy_core_s"], n["busy_s"], "{n}");
        let cores = n["cores"].as_f64().expect("cores");
        let fraction = n["busy_fraction"].as_f64().expect("busy_fraction");
        let core_s = n["busy_core_s"].as_f64().expect("busy_core_s");
        assert!((0.0..=1.0).contains(&fraction), "{n}");
        assert!((fraction * cores * makespan - core_s).abs() < 1e-6, "{n}");
    }
}

/// `sim graph` on a workflow file written to a fresh directory: its exit code, stdout, stderr and
/// the path it was given.
fn graph_text(name: &str, text: &str, extra: &[&str]) -> (Option<i32>, String, String, String) {
    let (_dir, path) = temp(name);
    std::fs::write(&path, text).expect("write the workflow");
    let shown = path.display().to_string();
    let out = graph(&shown, extra);
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
        shown,
    )
}

const ONE_TASK: &str = "[[task]]\nname = \"A\"\ninstances = 6\ncost = \"1s\"\n";

/// The file's `balancer` line is the run `hetsched submit` would make of it: `sim graph` runs it
/// unless `--balancer` names another (flag > file > pcddb, the flag's documented default, so a
/// file without the line still runs under pcddb as docs/results/graphs.md's do). It simulated
/// pcddb for a file asking for `centralised`.
#[test]
fn the_files_balancer_runs_unless_the_flag_names_another() {
    let balancer_of = |text: &str, extra: &[&str]| {
        let mut args = vec!["--output", "json"];
        args.extend_from_slice(extra);
        let (code, stdout, stderr, _) = graph_text("balancer.toml", text, &args);
        assert_eq!(code, Some(0), "{stderr}");
        let v: serde_json::Value = serde_json::from_str(&stdout).expect("JSON");
        v["balancer"].as_str().unwrap_or_default().to_string()
    };
    let centralised = format!("balancer = \"centralised\"\n{ONE_TASK}");
    assert_eq!(balancer_of(&centralised, &[]), "centralised");
    assert_eq!(
        balancer_of(&format!("balancer = \"centralized\"\n{ONE_TASK}"), &[]),
        "centralised",
        "spelt as submit takes it"
    );
    assert_eq!(
        balancer_of(&format!("balancer = \"pcddb\"\n{ONE_TASK}"), &[]),
        "pcddb"
    );
    assert_eq!(
        balancer_of(&centralised, &["--balancer", "static"]),
        "static",
        "the flag wins"
    );
    assert_eq!(balancer_of(ONE_TASK, &[]), "pcddb", "no line: the default");
    let out = hetsched(&["sim", "graph", "--help"]);
    // As one line: clap wraps it to the terminal.
    let help = String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    assert!(
        help.contains("the flag wins over the file, the file over the default"),
        "{help}"
    );
}

/// A `balancer` line `hetsched submit` refuses is refused by `sim graph` with the same words, at
/// its line and column, whatever `--balancer` says (the file is wrong for the runtime either
/// way). It was accepted silently.
#[test]
fn a_balancer_submit_refuses_is_refused_at_its_line() {
    for (value, extra) in [
        ("no-such-balancer", &[][..]),
        ("bogus", &["--balancer", "pcddb"][..]),
        // The simulator's baseline: the runtime runs no `static` workflow.
        ("static", &[][..]),
    ] {
        let text = format!("name = \"w\"\nbalancer = \"{value}\"\n{ONE_TASK}");
        let (code, stdout, stderr, shown) = graph_text("unknown.toml", &text, extra);
        assert_eq!(code, Some(1), "{value}: {stderr}");
        assert!(
            stderr.contains(&format!(
                "{shown}:2:12: balancer: unknown balancer `{value}`: expected centralised or pcddb"
            )),
            "{value}: {stderr}"
        );
        assert!(stdout.is_empty(), "{stdout}");
    }
}

/// An instance no node of the cluster can hold (`cores`, `gpus`, `memory` beyond every node
/// that offers the task's `requires`) is refused as `hetsched submit` refuses it, at the field;
/// `sim graph` ran such a task as one-core instances.
#[test]
fn an_instance_no_node_can_hold_is_refused_at_its_field() {
    for (extra_fields, line_col, what) in [
        (
            "cores = 64\ngpus = 3\nmemory = \"9TiB\"\n",
            "5:9",
            "task[0].cores: no live node can hold one instance of `A` (64 cores; the largest \
             nodes have 8 cores, 64.0 GiB of memory, 1 GPUs)",
        ),
        (
            "gpus = 2\n",
            "5:8",
            "task[0].gpus: no live node can hold one instance of `A` (2 GPUs;",
        ),
        // The eight-core nodes have 64 GiB, but only the gpu node (16 GiB) offers `gpu`.
        (
            "requires = [\"gpu\"]\nmemory = \"32GiB\"\n",
            "6:10",
            "task[0].memory: no live node can hold one instance of `A` (32.0 GiB of memory; the \
             largest nodes have 4 cores, 16.0 GiB of memory, 1 GPUs)",
        ),
    ] {
        let text = format!("{ONE_TASK}{extra_fields}");
        let (code, stdout, stderr, shown) = graph_text("big.toml", &text, &[]);
        assert_eq!(code, Some(1), "{extra_fields}: {stderr}");
        assert!(
            stderr.contains(&format!("{shown}:{line_col}: {what}")),
            "{extra_fields}: {stderr}"
        );
        assert!(stdout.is_empty(), "{stdout}");
    }
    // Within the 64 GiB eight-core nodes' means: it runs.
    let text = format!("{ONE_TASK}requires = [\"bigmem\"]\nmemory = \"32GiB\"\n");
    let (code, _, stderr, _) = graph_text("fits.toml", &text, &[]);
    assert_eq!(code, Some(0), "{stderr}");
}

/// The simulator runs every instance on one core and books no memory or GPU; a task that asks
/// for more runs, with a warning saying so (its nodes may run more instances at once than the
/// runtime would) — one per such task, none for a one-core task.
#[test]
fn a_task_of_several_cores_runs_with_a_warning_that_it_is_run_on_one() {
    let text = format!(
        "{ONE_TASK}cores = 2\nmemory = \"1GiB\"\n[[task]]\nname = \"B\"\ninstances = 2\ncost = \"1s\"\ncores = 1\n"
    );
    let (code, stdout, stderr, _) = graph_text("cores.toml", &text, &["--output", "json"]);
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(
        stderr.trim_end(),
        "warning: sim graph: task `A` asks for 2 cores and 1.0 GiB of memory per instance; the \
         simulator runs each instance on one core and books no memory or GPU, so a node may run \
         more of them at once than the runtime would"
    );
    let v: serde_json::Value = serde_json::from_str(&stdout).expect("JSON on stdout alone");
    assert_eq!(v["instances"], 8);
}
