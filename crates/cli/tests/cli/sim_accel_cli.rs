//! `hetsched sim accel` as a user meets it: the real binary on the example cluster and workload
//! (examples/cluster-offload.toml, examples/workload-offload.toml), and bad input.

#![allow(clippy::unwrap_used)] // a failing test should panic with the error

use crate::support::binary::{assert_ok, hetsched, json_of, repo, sim_run, stderr};
use hetsched_core::testkit::ScratchDir;
use serde_json::Value;
use std::path::PathBuf;

const EXAMPLE: [&str; 6] = [
    "sim",
    "accel",
    "--cluster",
    "examples/cluster-offload.toml",
    "--workload",
    "examples/workload-offload.toml",
];

fn json(extra: &[&str]) -> Value {
    let mut args = EXAMPLE.to_vec();
    args.extend_from_slice(&["--output", "json"]);
    args.extend_from_slice(extra);
    json_of(&hetsched(&args))
}

fn node<'a>(report: &'a Value, name: &str) -> &'a Value {
    report["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["name"] == name)
        .unwrap()
}

#[test]
fn nnode_tasks_are_offloaded_to_the_anode_of_their_own_rack() {
    let r = json(&[]);
    let map: Vec<(String, Value)> = r["map"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| (m["nnode"].as_str().unwrap().to_string(), m["anode"].clone()))
        .collect();
    assert_eq!(
        map,
        vec![
            ("n1".into(), "a1".into()),
            ("n2".into(), "a1".into()),
            ("n3".into(), "a2".into()),
            ("n4".into(), Value::Null),
        ]
    );
    // lu (required, 40 tasks) goes to the five nodes that reach an accelerator, 8 each; cholesky
    // (preferred, 24) to all six, 4 each: an NNode's accelerator tasks are all offloaded.
    for n in ["n1", "n2", "n3"] {
        assert_eq!(node(&r, n)["offloaded_tasks"], 12, "{n}");
        assert_eq!(node(&r, n)["local_accelerator_tasks"], 0, "{n}");
    }
    for a in ["a1", "a2"] {
        assert_eq!(node(&r, a)["local_accelerator_tasks"], 12, "{a}");
        assert_eq!(node(&r, a)["offloaded_tasks"], 0, "{a}");
    }
    // n4's rack has no ANode: no lu task, its cholesky tasks and its reduce tasks on its CPU.
    assert_eq!(node(&r, "n4")["offloaded_tasks"], 0);
    assert_eq!(node(&r, "n4")["cpu_tasks"], 4 + 2);
    // a1 serves its two NNodes, a2 its one: offloaded work arrives only from the same rack.
    let anodes = r["anodes"].as_array().unwrap();
    assert_eq!(anodes[0]["name"], "a1");
    assert_eq!(anodes[0]["offloaded"], 24);
    assert_eq!(anodes[1]["name"], "a2");
    assert_eq!(anodes[1]["offloaded"], 12);
    assert!(anodes[0]["receive_busy_s"].as_f64().unwrap() > 0.0);
    assert_eq!(r["offloaded_tasks"], 36);
    assert_eq!(r["cpu_tasks"], 12 + 4);
}

#[test]
fn the_json_report_has_stable_keys() {
    let r = json(&["--binding", "container", "--slots", "2"]);
    let keys = |v: &Value| v.as_object().unwrap().keys().cloned().collect::<Vec<_>>();
    let mut top = keys(&r);
    top.sort();
    assert_eq!(
        top,
        [
            "accelerator_tasks",
            "anodes",
            "applications",
            "binding",
            "cluster",
            "cpu_tasks",
            "makespan_s",
            "map",
            "nodes",
            "offloaded_tasks",
            "slots",
            "workload"
        ]
    );
    assert_eq!(r["binding"], "container");
    assert_eq!(r["slots"], 2);
    let mut app = keys(&r["applications"][0]);
    app.sort();
    assert_eq!(app, ["accelerator", "end_s", "name", "tasks"]);
    let mut map = keys(&r["map"][0]);
    map.sort();
    assert_eq!(map, ["anode", "nnode"]);
    // container binding binds each container: `n1/0`, `n1/1`, …
    assert_eq!(r["map"][0]["nnode"], "n1/0");
    let mut n = keys(&r["nodes"][0]);
    n.sort();
    assert_eq!(
        n,
        [
            "anode",
            "cpu_tasks",
            "local_accelerator_tasks",
            "name",
            "offloaded_tasks",
            "rack"
        ]
    );
    let mut a = keys(&r["anodes"][0]);
    a.sort();
    assert_eq!(
        a,
        [
            "device_busy_s",
            "name",
            "offloaded",
            "receive_busy_s",
            "tasks",
            "write_busy_s"
        ]
    );
}

#[test]
fn the_table_shows_makespan_map_and_stages() {
    let out = hetsched(&EXAMPLE);
    assert_ok(&out);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("makespan: "), "{text}");
    assert!(text.contains("n4 -> unbound"), "{text}");
    assert!(text.contains("receive busy s"), "{text}");
}

#[test]
fn a_required_application_on_a_cluster_without_accelerators_is_refused() {
    let cluster = std::fs::read_to_string(repo().join("examples/cluster-offload.toml")).unwrap();
    let cpu_only: String = cluster
        .lines()
        .filter(|l| !l.starts_with("accelerator"))
        .map(|l| format!("{l}\n"))
        .collect();
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("sim-accel-cli");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("cpu-only.toml");
    std::fs::write(&path, cpu_only).unwrap();
    let out = hetsched(&[
        "sim",
        "accel",
        "--cluster",
        path.to_str().unwrap(),
        "--workload",
        "examples/workload-offload.toml",
    ]);
    assert!(!out.status.success());
    assert!(out.stdout.is_empty());
    let err = stderr(&out);
    assert!(
        err.contains("examples/workload-offload.toml:11:")
            && err.contains("application[0].accelerator")
            && err.contains("requires an accelerator, and no node of the cluster has one"),
        "{err}"
    );
}

/// A GPU-only application written for `sim run` (no `accelerator` field, as in
/// examples/workload-mixed.toml) is refused by `sim accel`, whose default is `none` (on CPUs): the
/// error says so and names the field that makes it run, rather than an `accelerator = "none"` the
/// user never wrote.
#[test]
fn a_gpu_only_application_without_the_field_is_told_to_add_accelerator_required() {
    let out = hetsched(&[
        "sim",
        "accel",
        "--cluster",
        "examples/cluster-mixed-generations.toml",
        "--workload",
        "examples/workload-mixed.toml",
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty());
    let err = stderr(&out);
    assert!(
        err.contains("examples/workload-mixed.toml:")
            && err.contains("application[2].cpu")
            && err.contains("no `accelerator` field")
            && err.contains("accelerator = \"required\""),
        "{err}"
    );
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn a_bad_binding_mode_is_refused() {
    let mut args = EXAMPLE.to_vec();
    args.extend_from_slice(&["--binding", "fastest"]);
    let out = hetsched(&args);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("fastest"), "{}", stderr(&out));
}

#[test]
fn the_export_lists_every_link_and_an_input_and_a_result_per_offloaded_task() {
    let dir = ScratchDir::new("accel", "export");
    let path = dir.join("export.json");
    let report = json(&["--export", path.to_str().expect("path")]);
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(&path).expect("export written"))
        .expect("JSON");
    let keys: Vec<&str> = doc
        .as_object()
        .expect("object")
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(keys, ["links", "makespan", "transfers"]);
    let links = doc["links"].as_array().expect("links");
    assert_eq!(links.len(), report["nodes"].as_array().map_or(0, Vec::len));
    assert!(
        links
            .iter()
            .all(|l| l["bandwidth"] == 1e9 && l["latency"] == 1e-4),
        "{links:?}"
    );
    let transfers = doc["transfers"].as_array().expect("transfers");
    let offloaded = report["offloaded_tasks"].as_u64().expect("offloaded tasks");
    assert!(offloaded > 0);
    assert_eq!(
        transfers.len() as u64,
        2 * offloaded,
        "an input and a result each"
    );
    for t in transfers {
        let (start, end) = (
            t["start"].as_f64().unwrap_or(0.0),
            t["end"].as_f64().unwrap_or(0.0),
        );
        let bytes = t["bytes"].as_f64().unwrap_or(0.0);
        // Two nodes' latencies, then the bytes at no more than the link's bandwidth.
        assert!(end - start >= 2e-4 + bytes / 1e9 - 1e-9, "{t}");
        assert_ne!(t["src"], t["dst"], "{t}");
    }
    assert!(
        doc["makespan"].as_f64()
            >= transfers
                .iter()
                .filter_map(|t| t["end"].as_f64())
                .reduce(f64::max)
    );
}

#[test]
fn slots_past_1024_per_node_or_a_million_containers_in_all_are_refused() {
    // --slots 4000000000 allocated 5 GB of containers.
    for slots in ["4000000000", "1025"] {
        let mut args = EXAMPLE.to_vec();
        args.extend_from_slice(&["--binding", "container", "--slots", slots]);
        let out = hetsched(&args);
        assert_eq!(out.status.code(), Some(2), "{slots}");
        assert!(
            stderr(&out).contains("containers per node: give 1 to 1024"),
            "{}",
            stderr(&out)
        );
    }
    let out = hetsched(&["sim", "accel-paper", "--slots", "4000000000"]);
    assert_eq!(out.status.code(), Some(2));
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("sim-accel-cli");
    std::fs::create_dir_all(&dir).unwrap();
    let cluster = dir.join("nodes-1000.toml");
    std::fs::write(
        &cluster,
        "[[node]]\nname = \"a\"\ncores = 4\n[[node.accelerator]]\nkind = \"k\"\n\
         [[node]]\nname = \"n\"\ncount = 999\ncores = 4\n",
    )
    .unwrap();
    let out = hetsched(&[
        "sim",
        "accel",
        "--cluster",
        cluster.to_str().unwrap(),
        "--workload",
        "examples/workload-offload.toml",
        "--slots",
        "1024",
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("1000 nodes × 1024 slots is 1024000 containers; at most 1000000"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn what_sim_run_refuses_sim_accel_refuses_with_the_same_located_error() {
    // Each ran "on accelerators" with a makespan of 2 s; submit_at = "100s" was ignored.
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("sim-accel-cli-fields");
    std::fs::create_dir_all(&dir).unwrap();
    let cluster = dir.join("c.toml");
    std::fs::write(
        &cluster,
        "[[node]]\nname = \"n\"\ncount = 2\ncores = 4\n[[node.accelerator]]\nkind = \"k\"\ncount = 2\n",
    )
    .unwrap();
    let gpu = |extra: &str| {
        format!(
            "[[application]]\nname = \"a\"\ntasks = 4\naccelerator = \"required\"\n\
             [application.gpu]\ncompute = \"1s\"\nread = \"1s\"\ncopy = \"1s\"\n{extra}\n"
        )
    };
    let cases = [
        gpu("kind = \"nope\""),
        gpu("gpus = 3"),
        gpu("cores = 99"),
        "[[application]]\nname = \"a\"\ntasks = 4\n[application.cpu]\ncompute = \"1s\"\n\
         read = \"1s\"\ncores = 99\nmemory = \"900GiB\"\n"
            .to_string(),
        "[[application]]\nname = \"a\"\ntasks = 4\nrequires = [\"bigmem\"]\n\
         [application.cpu]\ncompute = \"1s\"\nread = \"1s\"\n"
            .to_string(),
    ];
    let workload = dir.join("w.toml");
    let c = cluster.to_str().unwrap();
    let w = workload.to_str().unwrap();
    for text in &cases {
        std::fs::write(&workload, text).unwrap();
        let run = sim_run(c, w, &[]);
        let accel = hetsched(&["sim", "accel", "--cluster", c, "--workload", w]);
        assert_eq!(run.status.code(), Some(1), "{text}");
        assert_eq!(accel.status.code(), Some(1), "{text}");
        assert!(stderr(&run).contains("w.toml:"), "{}", stderr(&run));
        assert_eq!(stderr(&accel), stderr(&run), "{text}");
        assert!(accel.stdout.is_empty());
    }
    std::fs::write(
        &workload,
        "[[application]]\nname = \"a\"\ntasks = 4\nsubmit_at = \"100s\"\n\
         [application.cpu]\ncompute = \"1s\"\nread = \"1s\"\n",
    )
    .unwrap();
    let accel = hetsched(&["sim", "accel", "--cluster", c, "--workload", w]);
    assert_eq!(accel.status.code(), Some(1));
    assert!(
        stderr(&accel).contains(
            "w.toml:4:1: application[0].submit_at: application `a` is submitted at 100 s: sim \
             accel has no arrival times"
        ),
        "{}",
        stderr(&accel)
    );
}
