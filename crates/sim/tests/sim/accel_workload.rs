//! `hetsched_sim::accel::workload`: a user's cluster and workload files become the offload
//! simulator's inputs, and a run on them offloads rack-locally.

use hetsched_core::input::cluster::parse_cluster;
use hetsched_core::input::workload::parse_workload;
use hetsched_core::model::application::AcceleratorNeed;
use hetsched_core::time::secs;
use hetsched_sim::accel::workload::accel_apps;
use hetsched_sim::accel::{AccelConfig, simulate_accel};

const CLUSTER: &str = r#"
[[rack]]
name = "r1"

[[node]]
name = "a"
rack = "r1"
cores = 8
memory = "32GiB"
network = "1GB/s"
accelerator = [{ kind = "gpu", count = 1, memory = "16GiB" }]

[[node]]
name = "n"
count = 2
rack = "r1"
cores = 8
memory = "32GiB"
network = "1GB/s"
"#;

const WORKLOAD: &str = r#"
[[application]]
name = "lu"
tasks = 20
split = "10MB"
accelerator = "required"
[application.gpu]
compute = "6s"
copy = "0.2s"

[[application]]
name = "mixed"
tasks = 4
accelerator = "preferred"
[application.cpu]
compute = "50s"
[application.gpu]
compute = "5s"

[[application]]
name = "plain"
tasks = 3
split = "1MB"
[application.cpu]
compute = "7s"
"#;

#[test]
fn each_application_becomes_an_accel_app_with_its_profiles_and_sizes() {
    let cluster = parse_cluster("c.toml", CLUSTER).unwrap();
    let workload = parse_workload("w.toml", WORKLOAD).unwrap();
    let apps = accel_apps(&workload, &cluster).unwrap();
    assert_eq!(apps.len(), 3);
    assert_eq!(apps[0].name, "lu");
    assert_eq!(apps[0].tasks, 20);
    assert_eq!(apps[0].need, AcceleratorNeed::Required);
    assert_eq!(apps[0].gpu_time, secs(6.0) + secs(0.2));
    assert_eq!(
        (apps[0].input_bytes, apps[0].output_bytes),
        (10_000_000, 10_000_000)
    );
    assert_eq!(apps[1].need, AcceleratorNeed::Preferred);
    assert_eq!(
        (apps[1].cpu_time, apps[1].gpu_time),
        (secs(50.0), secs(5.0))
    );
    assert_eq!(apps[1].input_bytes, 0);
    assert_eq!(apps[2].need, AcceleratorNeed::None);
    assert_eq!((apps[2].cpu_time, apps[2].gpu_time), (secs(7.0), 0));
}

#[test]
fn a_required_application_on_a_cluster_without_accelerators_is_refused_at_its_field() {
    let cpu_only = CLUSTER.replace(
        "accelerator = [{ kind = \"gpu\", count = 1, memory = \"16GiB\" }]",
        "",
    );
    let cluster = parse_cluster("c.toml", &cpu_only).unwrap();
    let workload = parse_workload("w.toml", WORKLOAD).unwrap();
    let e = accel_apps(&workload, &cluster).unwrap_err();
    assert_eq!(e.line, Some(6));
    assert_eq!(e.field.as_deref(), Some("application[0].accelerator"));
    assert!(e.to_string().starts_with("w.toml:6:"), "{e}");
}

#[test]
fn nnode_tasks_of_a_required_application_are_offloaded_to_their_rack_s_anode() {
    let cluster = parse_cluster("c.toml", CLUSTER).unwrap();
    let workload = parse_workload("w.toml", WORKLOAD).unwrap();
    let apps = accel_apps(&workload, &cluster).unwrap();
    let r = simulate_accel(&cluster, &apps[..1], &AccelConfig::default()).unwrap();
    assert_eq!(r.map, vec!["n-1 -> a".to_string(), "n-2 -> a".to_string()]);
    let by_name = |n: &str| r.nodes.iter().find(|x| x.name == n).unwrap();
    // 20 required tasks spread evenly over 3 nodes: the NNodes' go to a's device.
    assert_eq!(by_name("a").local_accelerator_tasks, 7);
    assert_eq!(
        by_name("n-1").offloaded_tasks + by_name("n-2").offloaded_tasks,
        13
    );
    assert_eq!(r.cpu_tasks, 0);
    assert_eq!(r.anodes[0].offloaded, 13);
    assert!(r.anodes[0].receive_busy_ns > 0 && r.anodes[0].write_busy_ns > 0);
    // One device runs all 20 tasks one after another.
    assert!(r.makespan_ns >= 20 * apps[0].gpu_time);
}

/// `WORKLOAD`'s first application (`lu`, required, GPU only) with `extra` lines added to its
/// GPU variant, or to the application when `extra` starts with `@`.
fn lu_with(extra: &str) -> String {
    let (app, gpu) = extra.strip_prefix('@').map_or(("", extra), |a| (a, ""));
    format!(
        "[[application]]\nname = \"lu\"\ntasks = 2\naccelerator = \"required\"\n{app}\n\
         [application.gpu]\ncompute = \"6s\"\n{gpu}\n"
    )
}

#[test]
fn what_sim_run_refuses_sim_accel_refuses_with_the_same_error() {
    // They all ran "on accelerators" in 2 s, where `sim run` refused them.
    let cluster = parse_cluster("c.toml", CLUSTER).unwrap();
    for extra in [
        "kind = \"nope\"",
        "gpus = 3",
        "cores = 99",
        "@requires = [\"bigmem\"]",
    ] {
        let workload = parse_workload("w.toml", &lu_with(extra)).unwrap();
        let want = workload.check_runnable(&cluster.nodes).unwrap_err();
        let got = accel_apps(&workload, &cluster).unwrap_err();
        assert_eq!(got, want, "{extra}");
    }
    let cpu = "[[application]]\nname = \"c\"\ntasks = 2\n[application.cpu]\ncompute = \"1s\"\n\
               cores = 99\nmemory = \"900GiB\"\n";
    let workload = parse_workload("w.toml", cpu).unwrap();
    let want = workload.check_runnable(&cluster.nodes).unwrap_err();
    assert_eq!(accel_apps(&workload, &cluster).unwrap_err(), want);
}

#[test]
fn a_field_the_offload_model_does_not_honour_is_refused_at_it() {
    let cluster = parse_cluster("c.toml", CLUSTER).unwrap();
    for (extra, field, says) in [
        (
            "@submit_at = \"100s\"",
            "application[0].submit_at",
            "no arrival times",
        ),
        (
            "@priority = 3",
            "application[0].priority",
            "one after another",
        ),
        (
            "@max_running = 2",
            "application[0].max_running",
            "as many as there are",
        ),
        (
            "@requires = [\"gpu\"]",
            "application[0].requires[0]",
            "not by node attributes",
        ),
        ("@user = \"ann\"", "application[0].user", "no users"),
        (
            "kind = \"gpu\"",
            "application[0].gpu.kind",
            "one device of any kind",
        ),
        (
            "cores = 2",
            "application[0].gpu.cores",
            "one device of any kind",
        ),
        (
            "memory = \"1GiB\"",
            "application[0].gpu.memory",
            "one device of any kind",
        ),
    ] {
        let workload = parse_workload("w.toml", &lu_with(extra)).unwrap();
        workload
            .check_runnable(&cluster.nodes)
            .unwrap_or_else(|e| panic!("{extra}: runnable under sim run: {e}"));
        let e = accel_apps(&workload, &cluster).unwrap_err();
        assert_eq!(e.field.as_deref(), Some(field), "{extra}: {e}");
        assert!(e.line.is_some(), "{extra}: located: {e}");
        // `lu_with` writes an application's field on line 5, a GPU variant's on line 8; the
        // name is on line 2, the variant's header on line 6: the error points at the key
        // refused, as `priority`, `submit_at`, `kind` and `memory` once did not.
        let line = if extra.starts_with('@') { 5 } else { 8 };
        assert_eq!(e.line, Some(line), "{extra}: at its own line: {e}");
        assert!(
            e.message.contains(says) && e.message.ends_with("`hetsched sim run` honours it"),
            "{extra}: {e}"
        );
    }
    for (extra, field) in [
        ("cores = 2", "application[0].cpu.cores"),
        ("memory = \"1GiB\"", "application[0].cpu.memory"),
    ] {
        let text = format!(
            "[[application]]\nname = \"c\"\ntasks = 2\n[application.cpu]\ncompute = \"1s\"\n{extra}\n"
        );
        let workload = parse_workload("w.toml", &text).unwrap();
        let e = accel_apps(&workload, &cluster).unwrap_err();
        assert_eq!(e.field.as_deref(), Some(field), "{extra}: {e}");
        assert_eq!(e.line, Some(6), "{extra}: at its own line: {e}");
        assert!(e.message.contains("one container of its node"), "{e}");
    }
    // A variant the application's `accelerator` never runs is not looked at.
    let unused = "[[application]]\nname = \"c\"\ntasks = 2\n[application.cpu]\ncompute = \"1s\"\n\
                  [application.gpu]\ncompute = \"1s\"\ngpus = 2\n";
    let workload = parse_workload("w.toml", unused).unwrap();
    assert!(accel_apps(&workload, &cluster).is_ok());
}

#[test]
fn a_user_table_is_refused_for_what_it_holds() {
    let cluster = parse_cluster("c.toml", CLUSTER).unwrap();
    let app = "[[application]]\nname = \"c\"\ntasks = 2\n[application.cpu]\ncompute = \"1s\"\n";
    // A bare `[[user]]` has no shares or caps: the error must not say it has.
    let bare = format!("{app}[[user]]\nname = \"u\"\n");
    let e = accel_apps(&parse_workload("w.toml", &bare).unwrap(), &cluster).unwrap_err();
    assert_eq!(
        e.to_string(),
        "w.toml:7:8: user[0]: a `[[user]]` table declares user `u`: sim accel has no users, \
         shares or caps; `hetsched sim run` honours it"
    );
    let capped = format!("{app}[[user]]\nname = \"u\"\nmax_cores = 2\n");
    let e = accel_apps(&parse_workload("w.toml", &capped).unwrap(), &cluster).unwrap_err();
    assert!(
        e.message.starts_with("user `u` has shares or caps: "),
        "{e}"
    );
}
