//! The `hetsched sim` front door as a user meets it: the real binary on the example files and on
//! the malformed fixture set.

use crate::support::binary::{
    assert_ok, fixtures, hetsched, hetsched_in, refusal, refused_at_once, repo, sim_run,
};
use hetsched_core::testkit::ScratchDir;

const CLUSTER: &str = "examples/cluster-hdas-paper.toml";
const WORKLOAD: &str = "examples/workload-knn-nb-bp.toml";

/// A one-node cluster file.
const ONE_NODE: &str = "[[node]]\nname = \"n\"\ncores = 1\nmemory = \"4GiB\"\n";

/// `sim run` on `cluster` and `workload` written to `c.toml` and `w.toml` in a fresh directory
/// named `name`, with `extra` arguments: its stderr, after checking it failed with status 1,
/// printed nothing and did not panic. Paths in the message read `c.toml` and `w.toml`.
fn sim_run_refuses(name: &str, cluster: &str, workload: &str, extra: &[&str]) -> String {
    let dir = ScratchDir::new("sim-cli", name);
    std::fs::write(dir.join("c.toml"), cluster).expect("write");
    std::fs::write(dir.join("w.toml"), workload).expect("write");
    let mut args = vec!["sim", "run", "--cluster", "c.toml", "--workload", "w.toml"];
    args.extend_from_slice(extra);
    refusal(&hetsched_in(&dir, &args), name)
}

#[test]
fn a_workload_of_billions_of_tasks_is_refused_at_its_line_not_allocated() {
    let e = sim_run_refuses(
        "billions",
        ONE_NODE,
        "[[application]]\nname = \"a\"\ntasks = 4000000000\nsplit = \"1MiB\"\n\
         [application.cpu]\ncompute = \"10s\"\nread = \"0s\"\n",
        &[],
    );
    assert!(
        e.contains("w.toml:3:9: application[0].tasks: 4000000000 tasks bring the workload to 4000000000: at most 10000000 tasks in all"),
        "{e}"
    );
}

#[test]
fn every_malformed_fixture_is_refused_with_file_line_and_no_panic() {
    let fixtures: Vec<String> = fixtures("malformed")
        .into_iter()
        .filter(|p| p.ends_with(".toml"))
        .collect();
    assert!(
        fixtures.len() >= 5,
        "the fixture set has at least five files"
    );
    for rel in fixtures {
        let is_cluster = std::fs::read_to_string(repo().join(&rel))
            .unwrap_or_default()
            .contains("[[node]]");
        let out = if is_cluster {
            sim_run(&rel, WORKLOAD, &[])
        } else {
            sim_run(CLUSTER, &rel, &[])
        };
        let stderr = refusal(&out, &rel);
        let name = rel.rsplit('/').next().unwrap_or_default();
        let located = stderr.lines().any(|l| {
            l.contains(&format!("{name}:"))
                && l.split(':')
                    .nth(2)
                    .is_some_and(|n| n.trim().parse::<u32>().is_ok())
        });
        assert!(located, "{rel}: the error names file and line: {stderr}");
    }
}

#[test]
fn a_gpu_only_workload_on_a_cluster_without_gpus_is_refused() {
    let dir = ScratchDir::new("sim-cli", "run");
    let cluster = dir.join("cpu-only.toml");
    std::fs::write(&cluster, "[[node]]\nname = \"n\"\ncores = 8\n").expect("write");
    let workload = dir.join("gpu-only.toml");
    std::fs::write(&workload, "[[application]]\nname = \"bp\"\ntasks = 2\n\n[application.gpu]\ncompute = \"1s\"\nread = \"0s\"\n")
        .expect("write");
    let out = sim_run(
        &cluster.display().to_string(),
        &workload.display().to_string(),
        &[],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr
            .contains("gpu-only.toml:5:1: application[0].gpu: application `bp` runs only on GPUs"),
        "{stderr}"
    );
}

#[test]
fn the_example_runs_under_every_policy_and_json_is_reproducible() {
    for policy in ["cpu-only", "fifo", "drf", "hadoop-model", "hdas"] {
        let a = sim_run(
            CLUSTER,
            WORKLOAD,
            &["--policy", policy, "--output", "json", "--seed", "7"],
        );
        assert!(
            a.status.success(),
            "{policy}: {}",
            String::from_utf8_lossy(&a.stderr)
        );
        let v: serde_json::Value = serde_json::from_slice(&a.stdout).expect("valid JSON");
        assert_eq!(v["policy"], policy);
        assert_eq!(v["total_tasks"], 288);
        assert!(v["makespan_s"].as_f64().is_some_and(|m| m > 0.0));
        let b = sim_run(
            CLUSTER,
            WORKLOAD,
            &["--policy", policy, "--output", "json", "--seed", "7"],
        );
        assert_eq!(a.stdout, b.stdout, "{policy}: same seed, same bytes");
    }
}

#[test]
fn unknown_policy_is_refused_with_the_list_of_names() {
    let out = sim_run(CLUSTER, WORKLOAD, &["--policy", "round-robin"]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("hadoop-model"), "{stderr}");
}

#[test]
fn completions_are_generated() {
    let out = hetsched(&["completions", "bash"]);
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("hetsched"));
}

/// `--fair-share HALF_LIFE` with a workload whose applications name their `user`: per-user
/// results, and the light user's jobs pass the heavy user's backlog under FIFO.
#[test]
fn compare_with_fair_share_reports_each_user_and_serves_the_light_one_first() {
    let dir = ScratchDir::new("sim", "fair");
    let workload = dir.join("two-users.toml");
    let mut text = String::from(
        "[[application]]\nname = \"sweep\"\nuser = \"alice\"\ntasks = 2000\n\
         [application.cpu]\ncompute = \"20s\"\nread = \"0s\"\n",
    );
    for k in 1..=3 {
        text.push_str(&format!(
            "[[application]]\nname = \"bob-{k}\"\nuser = \"bob\"\nsubmit_at = \"{}s\"\n\
             tasks = 4\n[application.cpu]\ncompute = \"20s\"\nread = \"0s\"\n",
            60 * k
        ));
    }
    std::fs::write(&workload, text).expect("workload");
    let bob = |fair: bool| {
        let mut args = vec![
            "sim",
            "compare",
            "--cluster",
            CLUSTER,
            "--workload",
            workload.to_str().expect("path"),
            "--policies",
            "fifo",
            "--output",
            "json",
        ];
        if fair {
            args.extend(["--fair-share", "1h"]);
        }
        let out = hetsched(&args);
        assert_ok(&out);
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("valid JSON");
        let users = &v[0]["users"];
        assert_eq!(users[0]["user"], "alice", "{v}");
        assert_eq!(users[1]["user"], "bob", "{v}");
        users[1]["mean_turnaround_s"].as_f64().expect("turnaround")
    };
    let (off, on) = (bob(false), bob(true));
    assert!(
        on * 2.0 < off,
        "bob's mean turnaround: {on} s with, {off} s without"
    );
    let out = sim_run(
        CLUSTER,
        workload.to_str().expect("path"),
        &["--policy", "fifo", "--fair-share", "0s"],
    );
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--fair-share (0s) must be at least 1m"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A half-life tuned in the simulator works on the server: `sim run --fair-share` and the
/// server's `[fair_share] half_life` accept the same values and refuse the rest in the same
/// words, each naming its own flag or field (`hetsched_core::model::fair_share::MIN_HALF_LIFE`).
#[test]
fn fair_share_half_lives_are_bounded_as_the_server_bounds_them() {
    for half_life in ["0s", "1ms", "10s", "59s", "1m", "90s", "1h"] {
        let sim = sim_run(CLUSTER, WORKLOAD, &["--fair-share", half_life]);
        let server = hetsched_server::config::ServerConfig::parse(
            "s.toml",
            &format!("[fair_share]\nhalf_life = \"{half_life}\"\n"),
        )
        .expect("parses")
        .validate();
        let sim_err = String::from_utf8_lossy(&sim.stderr).into_owned();
        assert_eq!(
            sim.status.success(),
            server.is_ok(),
            "{half_life}: sim {sim_err}, server {server:?}"
        );
        if let Err(e) = server {
            let said = e
                .strip_prefix("fair_share.half_life ")
                .unwrap_or_else(|| panic!("{half_life}: the server names its field: {e}"));
            assert!(
                sim_err.contains(&format!("--fair-share {said}")),
                "{half_life}: the same words, naming the flag: sim {sim_err}, server {e}"
            );
        }
    }
}

/// A workload's `[[user]]` shares and caps (`examples/workload-two-users-shares.toml`): each
/// user's JSON carries them under the keys of the runtime's `user list --output json`, the cap
/// holds in the task records, the user with 3 shares ends first under fair share, and the
/// tables show both.
#[test]
fn sim_run_reports_each_users_shares_and_caps_and_keeps_the_cap() {
    let cluster = "examples/cluster-mixed-generations.toml";
    let workload = "examples/workload-two-users-shares.toml";
    let out = sim_run(
        cluster,
        workload,
        &["--policy", "fifo", "--fair-share", "1h", "--output", "json"],
    );
    assert_ok(&out);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("valid JSON");
    let (alice, bob) = (&v["users"][0], &v["users"][1]);
    assert_eq!(alice["user"], "alice", "{alice}");
    assert_eq!(
        (&alice["shares"], &alice["max_cores"]),
        (&serde_json::json!(1), &serde_json::json!(144))
    );
    assert!(alice["max_memory_bytes"].is_null() && alice["max_gpus"].is_null());
    assert_eq!(
        (&bob["user"], &bob["shares"], &bob["max_cores"]),
        (
            &serde_json::json!("bob"),
            &serde_json::json!(3),
            &serde_json::Value::Null
        )
    );
    let end = |u: &serde_json::Value| u["last_end_s"].as_f64().expect("last end");
    assert!(end(bob) < end(alice), "{bob} {alice}");
    // Every task of Alice's (application 0) holds one core, as a CPU or a GPU task: never more
    // than 144 of them at once.
    let mut changes: Vec<(u64, i32)> = Vec::new();
    for t in v["tasks"].as_array().expect("task records") {
        if t["app"] == 0 {
            changes.push((t["start_ns"].as_u64().expect("start"), 1));
            changes.push((t["end_ns"].as_u64().expect("end"), -1));
        }
    }
    assert_eq!(changes.len(), 8000);
    changes.sort();
    let (mut held, mut peak) = (0, 0);
    for (_, d) in changes {
        held += d;
        peak = peak.max(held);
    }
    assert!(
        (100..=144).contains(&peak),
        "alice held {peak} cores at once"
    );
    // The tables: one column of shares and caps, or a note beside each user's turnaround.
    let out = sim_run(cluster, workload, &["--policy", "fifo"]);
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(table.contains("shares, caps"), "{table}");
    assert!(
        table.contains("≤ 144 cores") && table.contains("3 shares"),
        "{table}"
    );
    let out = hetsched(&[
        "sim",
        "compare",
        "--cluster",
        cluster,
        "--workload",
        workload,
        "--policies",
        "drf",
    ]);
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(
        table.contains("(≤ 144 cores)") && table.contains("(3 shares)"),
        "{table}"
    );
}

#[test]
fn compare_runs_every_policy_side_by_side() {
    let out = hetsched(&[
        "sim",
        "compare",
        "--cluster",
        CLUSTER,
        "--workload",
        WORKLOAD,
        "--output",
        "json",
    ]);
    assert_ok(&out);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("valid JSON");
    let rows = v.as_array().expect("one summary per policy");
    let names: Vec<&str> = rows.iter().filter_map(|r| r["policy"].as_str()).collect();
    assert_eq!(
        names,
        [
            "cpu-only",
            "fifo",
            "drf",
            "hadoop-model",
            "hdas",
            "hdas-hetero"
        ]
    );
    let makespan = |p: &str| {
        rows.iter()
            .find(|r| r["policy"] == p)
            .and_then(|r| r["makespan_s"].as_f64())
            .unwrap_or(f64::NAN)
    };
    assert!(
        makespan("hdas") < makespan("fifo"),
        "HDAS beats FIFO on workload P: {v}"
    );
    assert_eq!(
        rows.iter()
            .find(|r| r["policy"] == "fifo")
            .map(|r| r["vs_reference"].clone()),
        Some(serde_json::json!(0.0))
    );
}

/// `--policies` as a user types it: spaces after the commas are allowed, and a policy named twice
/// (or named beside `all`) runs once, in the place it was first named.
#[test]
fn compare_policies_trims_spaces_and_runs_each_policy_once() {
    let compare = |policies: &str| {
        hetsched(&[
            "sim",
            "compare",
            "--cluster",
            CLUSTER,
            "--workload",
            WORKLOAD,
            "--policies",
            policies,
            "--output",
            "json",
        ])
    };
    // The policies a run compared, in its order.
    let ran = |policies: &str| -> Vec<String> {
        let out = compare(policies);
        assert!(
            out.status.success(),
            "{policies}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("valid JSON");
        v.as_array()
            .expect("one summary per policy")
            .iter()
            .filter_map(|r| r["policy"].as_str().map(str::to_string))
            .collect()
    };
    assert_eq!(ran("fifo, hdas,fifo , hdas"), ["fifo", "hdas"]);
    assert_eq!(
        ran("hdas,all"),
        [
            "hdas",
            "cpu-only",
            "fifo",
            "drf",
            "hadoop-model",
            "hdas-hetero"
        ]
    );
    // An empty name (`--policies ''`, or a stray comma) is said so, not "unknown batch policy ``".
    for given in ["", "fifo,"] {
        let out = compare(given);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && err.contains("--policies: an empty name"),
            "{given:?}: {err}"
        );
    }
    // An unknown name is refused under the flag, as `sim run --policy` names its flag.
    let out = compare("fifo,hdsa");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("--policies: unknown batch policy `hdsa`"),
        "{err}"
    );
}

/// A workload's `requires` in the simulator: the cluster file's `attributes` decide which nodes
/// take an application's tasks, under every policy; a requirement no node has is refused at its
/// line.
#[test]
fn sim_run_keeps_an_applications_tasks_on_the_nodes_with_its_required_attributes() {
    let dir = ScratchDir::new("sim", "requires");
    let cluster = dir.join("cluster.toml");
    std::fs::write(
        &cluster,
        "[[node]]\nname = \"plain\"\ncount = 2\ncores = 4\nmemory = \"8GiB\"\n\
         [[node]]\nname = \"fat\"\ncount = 2\ncores = 4\nmemory = \"64GiB\"\nattributes = [\"bigmem\"]\n",
    )
    .expect("cluster");
    let workload = dir.join("workload.toml");
    let text = "[[application]]\nname = \"big\"\ntasks = 40\nrequires = [\"bigmem\"]\n\
                [application.cpu]\ncompute = \"2s\"\nread = \"0s\"\n\
                [[application]]\nname = \"any\"\ntasks = 40\n[application.cpu]\ncompute = \"2s\"\nread = \"0s\"\n";
    std::fs::write(&workload, text).expect("workload");
    let (c, w) = (
        cluster.to_str().expect("path"),
        workload.to_str().expect("path"),
    );
    for policy in ["fifo", "hdas", "hdas-hetero", "drf", "cpu-only"] {
        let out = sim_run(c, w, &["--policy", policy, "--output", "json"]);
        assert!(
            out.status.success(),
            "{policy}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
        let tasks = v["tasks"].as_array().expect("tasks");
        assert_eq!(tasks.len(), 80, "{policy}");
        // Nodes 0–1 are `plain-1`, `plain-2`; 2–3 the `fat` ones.
        let on = |app: u64| -> Vec<u64> {
            tasks
                .iter()
                .filter(|t| t["app"] == app)
                .map(|t| t["node"].as_u64().expect("node"))
                .collect()
        };
        assert!(on(0).iter().all(|&n| n >= 2), "{policy}: {:?}", on(0));
        assert!(
            on(1).iter().any(|&n| n < 2),
            "{policy}: the other uses every node"
        );
    }
    std::fs::write(&workload, text.replace("\"bigmem\"", "\"avx512\"")).expect("workload");
    let out = sim_run(c, w, &["--policy", "fifo"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(
            "workload.toml:4:13: application[0].requires[0]: application `big` requires `avx512`, \
             which no node has (attributes offered: bigmem)"
        ),
        "{err}"
    );
}

#[test]
fn preemption_runs_urgent_work_at_once_and_says_what_it_stopped() {
    let urgent = "examples/workload-urgent.toml";
    let turnaround = |extra: &[&str]| -> (f64, u64) {
        let mut args = vec!["--policy", "fifo", "--output", "json"];
        args.extend_from_slice(extra);
        let out = sim_run(CLUSTER, urgent, &args);
        assert_ok(&out);
        let r: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
        let apps = r["apps"].as_array().expect("apps");
        let a = apps
            .iter()
            .find(|a| a["name"] == "urgent-1")
            .expect("urgent-1");
        let secs = (a["completion_ns"].as_u64().unwrap_or(0) - a["submit_ns"].as_u64().unwrap_or(0))
            as f64
            / 1e9;
        (secs, r["preemptions"].as_u64().unwrap_or(0))
    };
    let (waited, none) = turnaround(&[]);
    let (ran, stopped) = turnaround(&["--preemption"]);
    assert_eq!(none, 0);
    assert!(stopped >= 12, "{stopped} preempted");
    assert!(
        waited > 300.0 && ran < 90.0,
        "urgent-1 took {waited:.1} s without preemption, {ran:.1} s with it"
    );
    let out = sim_run(CLUSTER, urgent, &["--policy", "fifo", "--preemption"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("preempted for work of a higher priority") && text.contains("turnaround (s)"),
        "{text}"
    );
    // An exempt time means nothing without preemption.
    let out = sim_run(CLUSTER, urgent, &["--preempt-exempt-time", "10m"]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--preemption"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn a_profile_that_takes_no_time_is_refused_at_its_variant() {
    let e = sim_run_refuses(
        "zero-profile",
        ONE_NODE,
        "[[application]]\nname = \"a\"\ntasks = 4\n[application.cpu]\ncompute = \"0s\"\n\
         read = \"0s\"\n",
        &[],
    );
    assert!(
        e.contains(
            "w.toml:4:1: application[0].cpu.compute: the base profile takes no time (compute and \
             read are 0)"
        ),
        "{e}"
    );
}

/// Cluster figures that used to be accepted silently are refused at their line and field, as
/// is a heartbeat too short to simulate.
#[test]
fn silently_accepted_cluster_figures_and_heartbeats_are_refused() {
    let workload = "[[application]]\nname = \"a\"\ntasks = 2\n[application.cpu]\n\
                    compute = \"1s\"\nread = \"0s\"\n";
    for (name, cluster, expected) in [
        (
            "memory",
            "[[node]]\nname = \"n\"\ncores = 1\nmemory = \"0\"\n",
            "c.toml:4:10: node[0].memory: must be more than 0",
        ),
        (
            "accelerators",
            "[[node]]\nname = \"n\"\ncores = 1\n[[node.accelerator]]\nkind = \"k\"\ncount = 0\n",
            "c.toml:6:9: node[0].accelerator[0].count: must be at least 1",
        ),
        (
            "empty-name",
            "[[node]]\nname = \"\"\ncores = 1\n",
            "c.toml:2:8: node[0].name: a node name must not be empty",
        ),
        (
            "newline-name",
            "[[node]]\nname = \"a\\nb\"\ncores = 1\n",
            "c.toml:2:8: node[0].name: node name `a\\nb` may hold only letters, digits, `.`, `-` and `_`",
        ),
    ] {
        let e = sim_run_refuses(name, cluster, workload, &[]);
        assert!(e.contains(expected), "{name}: {e}");
    }
    for heartbeat in ["0s", "999us"] {
        let e = sim_run_refuses("heartbeat", ONE_NODE, workload, &["--heartbeat", heartbeat]);
        assert!(
            e.contains("--heartbeat must be at least 1ms"),
            "{heartbeat}: {e}"
        );
    }
}

#[test]
fn one_task_and_one_workload_read_in_the_singular() {
    let dir = ScratchDir::new("sim", "one");
    let workload = dir.join("w.toml");
    std::fs::write(
        &workload,
        "[[application]]\nname = \"a\"\ntasks = 1\n[application.cpu]\ncompute = \"2s\"\n\
         read = \"0s\"\n",
    )
    .expect("write");
    let out = sim_run(CLUSTER, &workload.display().to_string(), &[]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_ok(&out);
    assert!(
        stdout.contains(" s, 1 task (0 on GPUs, 1 on CPUs), "),
        "{stdout}"
    );
    let out = hetsched(&["sim", "hdas-paper", "--workloads", "A", "--scale", "0.05"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_ok(&out);
    assert!(
        stdout.contains("hdas-paper: 1 workload, scale 0.05"),
        "{stdout}"
    );
}

/// `accelerator = "required"` keeps an application's tasks on GPUs in `sim run` and `sim
/// compare`, as on the runtime; the cpu-only policy cannot run it and says so.
#[test]
fn a_required_accelerator_keeps_the_tasks_on_gpus_and_cpu_only_refuses_it() {
    let dir = ScratchDir::new("sim", "accel");
    let workload = |need: &str| {
        let path = dir.join(format!("{need}.toml"));
        std::fs::write(
            &path,
            format!(
                "[[application]]\nname = \"a\"\ntasks = 40\nsplit = \"1GiB\"\n\
                 accelerator = \"{need}\"\n\
                 [application.cpu]\ncompute = \"10s\"\nread = \"8s\"\n\
                 [application.gpu]\ncompute = \"30s\"\ncopy = \"0.3s\"\nread = \"8s\"\n"
            ),
        )
        .expect("workload");
        path.display().to_string()
    };
    let (required, none) = (workload("required"), workload("none"));
    let tasks = |w: &str| {
        let out = sim_run(CLUSTER, w, &["--policy", "hdas", "--output", "json"]);
        assert_ok(&out);
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
        (v["gpu_tasks"].as_u64(), v["cpu_tasks"].as_u64())
    };
    assert_eq!(tasks(&required), (Some(40), Some(0)));
    let (_, cpu) = tasks(&none);
    assert!(cpu > Some(0), "without the need HDAS uses the CPUs too");

    let out = sim_run(CLUSTER, &required, &["--policy", "cpu-only"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "{required}: application `a` requires an accelerator (`accelerator = \"required\"`), \
             so the cpu-only policy cannot run it"
        )),
        "{stderr}"
    );
    let out = hetsched(&[
        "sim",
        "compare",
        "--cluster",
        CLUSTER,
        "--workload",
        &required,
        "--output",
        "json",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("skipping cpu-only: "), "{stderr}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    for row in v.as_array().expect("rows") {
        assert_eq!(row["cpu_tasks"], 0, "{row}");
    }
}

#[test]
fn every_input_file_is_read_only_if_it_is_a_regular_file_of_at_most_256_mib() {
    // `sim run --cluster /dev/zero` read 2.1 GB before failing; every simulator, stream and
    // binding front door reads its files through one bounded helper.
    let dir = ScratchDir::new("sim-cli", "big");
    let big = dir.join("big.toml");
    let f = std::fs::File::create(&big).expect("create");
    f.set_len((256 << 20) + 1)
        .expect("a sparse file, no disk written");
    let big = big.display().to_string();
    let b = big.as_str();
    let doors: [&[&str]; 13] = [
        &["sim", "run", "--cluster", b, "--workload", WORKLOAD],
        &["sim", "compare", "--cluster", CLUSTER, "--workload", b],
        &["sim", "accel", "--cluster", b, "--workload", WORKLOAD],
        &["sim", "accel", "--cluster", CLUSTER, "--workload", b],
        &[
            "sim",
            "graph",
            "--cluster",
            b,
            "--workflow",
            "examples/workflow-loop.toml",
        ],
        &[
            "sim",
            "graph",
            "--cluster",
            "examples/cluster-graph-small.toml",
            "--workflow",
            b,
        ],
        &[
            "sim",
            "graph",
            "--cluster",
            "examples/cluster-graph-small.toml",
            "--workflow",
            "examples/workflow-loop.toml",
            "--latency",
            b,
        ],
        &[
            "sim",
            "divisible",
            "--platform",
            b,
            "--load",
            "10",
            "--algo",
            "umr",
        ],
        &[
            "stream",
            "place",
            "--topology",
            b,
            "--cluster",
            "examples/cluster-streams-10.toml",
            "--placer",
            "even",
        ],
        &[
            "stream",
            "place",
            "--topology",
            "examples/topology-wordcount.toml",
            "--cluster",
            b,
            "--placer",
            "even",
        ],
        &[
            "stream",
            "place",
            "--topology",
            "examples/topology-wordcount.toml",
            "--cluster",
            "examples/cluster-streams-10.toml",
            "--placer",
            "even",
            "--traffic",
            b,
        ],
        &["binding", "replay", b],
        // Read before the server is contacted.
        &["topology", "submit", b],
    ];
    for args in doors {
        let out = hetsched(args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
        assert!(
            stderr.contains(
                "big.toml: the file is 268435457 bytes; an input file may be at most 256 MiB"
            ),
            "{args:?}: {stderr}"
        );
    }
    let out = sim_run("/dev/zero", WORKLOAD, &[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(
            "cannot read /dev/zero: it is not a regular file (a device, a pipe or a socket)"
        ),
        "{stderr}"
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// A negative or non-finite number for a scenario's numeric flag is refused in words that name
/// the flag and the value given — not clap's "unexpected argument '-1'" (a negative number read
/// as a flag), nor the library's field name — and `stream-paper --gain-threshold` refuses NaN,
/// infinity and negatives, as the server's topology settings do.
#[test]
fn scenario_numbers_out_of_range_are_refused_naming_the_flag_and_the_value() {
    let cases: Vec<(Vec<&str>, &str, &str)> = vec![
        (
            vec!["sweep", "--cases", "1", "--scale", "-1"],
            "--scale",
            "-1",
        ),
        (
            vec!["sweep", "--cases", "1", "--scale", "NaN"],
            "--scale",
            "NaN",
        ),
        (vec!["sweep", "--cases", "0"], "--cases", "at least 1"),
        // Once a "capacity overflow" panic (every case's slot was allocated up front; 10^12
        // cases asked for 120 TB).
        (
            vec!["sweep", "--cases", "18446744073709551615"],
            "--cases",
            "18446744073709551615",
        ),
        (
            vec!["sweep", "--cases", "1000000000000"],
            "--cases",
            "1000000000000",
        ),
        (
            vec!["hdas-paper", "--workloads", "A", "--scale", "-0.5"],
            "--scale",
            "-0.5",
        ),
        (vec!["stream-paper", "--surge", "-1"], "--surge", "-1"),
        (
            vec!["stream-paper", "--max-utilisation", "-0.5"],
            "--max-utilisation",
            "-0.5",
        ),
        (
            vec!["stream-paper", "--gain-threshold", "-0.1"],
            "--gain-threshold",
            "-0.1",
        ),
        (
            vec!["stream-paper", "--gain-threshold", "NaN"],
            "--gain-threshold",
            "NaN",
        ),
        (
            vec!["stream-paper", "--gain-threshold", "inf"],
            "--gain-threshold",
            "inf",
        ),
        (vec!["accel-paper", "--kernels", "foo"], "--kernels", "foo"),
        (
            vec!["accel-paper", "--intensities", "3"],
            "--intensities",
            "3",
        ),
        (vec!["accel-paper", "--data-mb", "7"], "--data-mb", "7"),
        // Gigabytes allocated before the first simulation (a 2 GB allocation failed).
        (
            vec!["accel-paper", "--tasks", "4294967295"],
            "--tasks",
            "4294967295",
        ),
        (
            vec!["accel-paper", "--kmeans-images", "4294967295"],
            "--kmeans-images",
            "4294967295",
        ),
    ];
    for (args, flag, value) in cases {
        let mut full = vec!["sim"];
        full.extend(&args);
        let out = hetsched(&full);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{full:?}: {err}");
        assert!(
            err.contains(flag) && err.contains(value),
            "{full:?}: names {flag} and {value}: {err}"
        );
        assert!(out.stdout.is_empty(), "{full:?} printed a result");
    }
}

/// Every simulator command that prints a run's JSON names its makespan `makespan_s` (seconds),
/// so one script reads them all; `sim graph` and `sim divisible` keep their `makespan` beside it.
#[test]
fn every_runs_json_carries_makespan_s() {
    let runs: Vec<Vec<&str>> = vec![
        vec!["run", "--cluster", CLUSTER, "--workload", WORKLOAD],
        vec![
            "compare",
            "--cluster",
            CLUSTER,
            "--workload",
            WORKLOAD,
            "--policies",
            "fifo",
        ],
        vec![
            "graph",
            "--cluster",
            "examples/cluster-graph-small.toml",
            "--workflow",
            "examples/workflow-loop.toml",
        ],
        vec![
            "divisible",
            "--platform",
            "examples/platform-divisible-paper.toml",
            "--load",
            "1000",
            "--algo",
            "umr",
        ],
        vec![
            "accel",
            "--cluster",
            "examples/cluster-offload.toml",
            "--workload",
            "examples/workload-offload.toml",
        ],
    ];
    for args in runs {
        let mut full = vec!["sim"];
        full.extend(&args);
        full.extend(["--output", "json"]);
        let out = hetsched(&full);
        assert!(out.status.success(), "{full:?}");
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
        let run = if v.is_array() { &v[0] } else { &v };
        let s = run["makespan_s"].as_f64();
        assert!(s > Some(0.0), "{full:?}: makespan_s {run}");
        if let Some(m) = run.get("makespan") {
            assert_eq!(m.as_f64(), s, "{full:?}");
        }
    }
}

/// `sim compare`'s summaries carry the seed they ran with, as `sim divisible`'s do: a
/// comparison is made again from its files and seed.
#[test]
fn compare_summaries_carry_their_seed() {
    let out = hetsched(&[
        "sim",
        "compare",
        "--cluster",
        CLUSTER,
        "--workload",
        WORKLOAD,
        "--policies",
        "fifo,hdas",
        "--seed",
        "9",
        "--output",
        "json",
    ]);
    assert_ok(&out);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("valid JSON");
    let rows = v.as_array().expect("one summary per policy");
    assert_eq!(rows.len(), 2, "{v}");
    for r in rows {
        assert_eq!(r["seed"], 9, "{r}");
    }
}

/// `stream-paper --duration` is bounded, the refusal naming the flag: before, any duration up
/// to the parser's ten years was taken, and twenty runs of it ran for days.
#[test]
fn stream_paper_refuses_a_duration_past_its_bound() {
    refused_at_once(
        &["sim", "stream-paper", "--duration", "2h"],
        "--duration must be at most 1h",
    );
}

/// `stream-paper --surge` is bounded above, the refusal naming the flag, the value (compactly)
/// and the range: `--surge 1e300` ran and reported latencies of 1e301 ms.
#[test]
fn stream_paper_refuses_a_surge_past_its_bound() {
    for (surge, shown) in [("1e300", "1e300"), ("100.5", "100.5"), ("inf", "inf")] {
        let out = hetsched(&["sim", "stream-paper", "--surge", surge]);
        assert_eq!(out.status.code(), Some(1), "{surge}");
        assert_eq!(
            String::from_utf8_lossy(&out.stderr),
            format!(
                "error: --surge must be from 0 to 100 (a factor on the declared rates; at 100 \
                 every placement's busiest node is loaded over 40 times its capacity), got \
                 {shown}\n"
            ),
            "{surge}"
        );
        assert!(out.stdout.is_empty(), "{surge}");
    }
}

/// `hdas-paper --scale` is bounded above, as `sweep --scale` is, the refusal naming the flag:
/// before, `--scale 1000` was taken and ran for hours under the simulator's bound on tasks.
#[test]
fn hdas_paper_refuses_a_scale_past_its_bound() {
    refused_at_once(
        &["sim", "hdas-paper", "--scale", "1000"],
        "--scale: must be at most 10",
    );
}

#[test]
fn an_empty_workload_is_told_to_add_an_application_not_a_divisible_load_sim_run_refuses() {
    let e = sim_run_refuses("empty", ONE_NODE, "# nothing yet\n", &[]);
    assert!(
        e.contains("w.toml: application: no applications: add at least one [[application]] table")
            && !e.contains("(or a [[divisible]] load)")
            && e.contains("hetsched sim divisible"),
        "{e}"
    );
}

#[test]
fn a_read_time_without_a_split_is_refused_by_sim_run_at_its_variant() {
    // It used to run with the read never happening: makespan 1.9 s, task delay 0.01×.
    let e = sim_run_refuses(
        "read-no-split",
        "[[node]]\nname = \"a\"\ncores = 4\n",
        "[[application]]\nname = \"x\"\ntasks = 1\n[application.cpu]\ncompute = \"1s\"\n\
         read = \"100s\"\n",
        &["--policy", "cpu-only"],
    );
    assert!(
        e.contains("w.toml:4:1: application[0].cpu.read: read = \"1m 40s\" but the application has no `split`"),
        "{e}"
    );
}

/// A variant no node can hold (`gpus = 5` on 1-GPU nodes) beside one that fits runs, on the other
/// variant only, and says so on stderr naming the application and variant: it used to pass in
/// silence, the results then those of the CPU variant alone.
#[test]
fn a_variant_no_node_holds_is_warned_of_and_the_other_runs() {
    let dir = ScratchDir::new("sim-cli", "unfit-variant");
    std::fs::write(
        dir.join("c.toml"),
        "[[node]]\nname = \"n\"\ncount = 2\ncores = 4\nmemory = \"8GiB\"\n\
         [[node.accelerator]]\nkind = \"g\"\ncount = 1\nmemory = \"4GiB\"\n",
    )
    .expect("write");
    std::fs::write(
        dir.join("w.toml"),
        "[[application]]\nname = \"a\"\ntasks = 10\n[application.cpu]\ncompute = \"10s\"\n\
         read = \"0s\"\n[application.gpu]\ngpus = 5\ncompute = \"1s\"\ncopy = \"0s\"\nread = \"0s\"\n",
    )
    .expect("write");
    let out = hetsched_in(
        &dir,
        &["sim", "run", "--cluster", "c.toml", "--workload", "w.toml"],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains(
            "warning: w.toml:7:1: application[0].gpu: application `a`: no node has 5 GPUs with \
             the cores and memory a task of its GPU variant asks for (the most on a node: 1 GPU): \
             its tasks run on CPUs only"
        ),
        "{stderr}"
    );
    assert!(!out.stdout.is_empty());
}

/// A typo'd key of an [[application]] entry (the example's `tasks` written `taks`, the entry
/// having `[application.cpu]` and `[application.gpu]` sub-tables) is named at its own line and
/// column by `sim run` and `sim compare` alike, with the key meant.
#[test]
fn a_typod_application_key_is_named_at_its_line_by_sim_run_and_compare() {
    let dir = ScratchDir::new("sim-cli", "typo-key");
    let text =
        std::fs::read_to_string(repo().join("examples/workload-mixed.toml")).expect("example");
    assert!(text.contains("\ntasks = 400\n"));
    std::fs::write(
        dir.join("w.toml"),
        text.replacen("\ntasks = 400\n", "\ntaks = 400\n", 1),
    )
    .expect("write");
    let cluster = repo().join("examples/cluster-mixed-generations.toml");
    let cluster = cluster.display().to_string();
    for command in [&["run", "--policy", "fifo"][..], &["compare"][..]] {
        let args = [
            &["sim"][..],
            command,
            &["--cluster", cluster.as_str(), "--workload", "w.toml"],
        ];
        let out = hetsched_in(&dir, &args.concat());
        assert_eq!(out.status.code(), Some(1), "{command:?}");
        assert_eq!(
            String::from_utf8_lossy(&out.stderr),
            "error: w.toml:10:1: application[0].taks: unknown field `taks`, expected one of \
             `name`, `tasks`, `indices`, `entries`, `split`, `priority`, `submit_at`, `retries`, \
             `max_running`, `accelerator`, `inputs`, `outputs`, `nodes`, `requires`, `cpu`, \
             `gpu`, `workdir`, `stdout`, `stderr`, `pin`, `user`: did you mean `tasks`?\n",
            "{command:?}"
        );
    }
}

/// A number a simulator's flag refuses is echoed compactly (`-1e300` was printed with 300
/// digits).
#[test]
fn a_refused_numeric_flag_is_echoed_compactly() {
    let platform = "examples/platform-divisible-paper.toml";
    for (args, says) in [
        (
            vec![
                "divisible",
                "--platform",
                platform,
                "--algo",
                "umr",
                "--load=-1e300",
            ],
            "error: --load must be a positive number of load units, got -1e300\n",
        ),
        (
            vec![
                "divisible",
                "--platform",
                platform,
                "--algo",
                "umr",
                "--load",
                "10",
                "--error",
                "1e300",
            ],
            "error: --error must be in [0, 1), got 1e300\n",
        ),
        (
            vec![
                "divisible",
                "--platform",
                platform,
                "--algo",
                "umrlm",
                "--load",
                "10",
                "--c1=-1e300",
            ],
            "error: --c1 must be a finite number, 0 or more, got -1e300\n",
        ),
        (
            vec!["stream-paper", "--surge=-1e300"],
            "error: --surge must be from 0 to 100 (a factor on the declared rates; at 100 every \
             placement's busiest node is loaded over 40 times its capacity), got -1e300\n",
        ),
        (
            vec!["stream-paper", "--max-utilisation", "1e300"],
            "error: --max-utilisation must be in (0, 1], got 1e300\n",
        ),
    ] {
        let out = hetsched(&[&["sim"][..], &args].concat());
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        assert_eq!(String::from_utf8_lossy(&out.stderr), says, "{args:?}");
    }
}
