//! The parsers' promises: every malformed file in `tests/fixtures/malformed` is refused with an
//! error that names the file, the line and the field; good files round-trip into the model.

use hetsched_core::NodeId;
use hetsched_core::input::InputError;
use hetsched_core::input::cluster::parse_cluster;
use hetsched_core::input::workload::{MissingProfile, parse_workload};
use hetsched_core::testkit::node;
use std::path::PathBuf;

fn fixture(name: &str) -> (String, String) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/malformed")
        .join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    (name.to_string(), text)
}

fn workload_error(name: &str) -> InputError {
    let (origin, text) = fixture(name);
    match parse_workload(&origin, &text) {
        Ok(_) => panic!("{name} was accepted"),
        Err(e) => e,
    }
}

fn cluster_error(name: &str) -> InputError {
    let (origin, text) = fixture(name);
    match parse_cluster(&origin, &text) {
        Ok(_) => panic!("{name} was accepted"),
        Err(e) => e,
    }
}

#[test]
fn syntax_error_points_at_the_unclosed_string() {
    let e = workload_error("01-syntax-error.toml");
    assert_eq!(e.line, Some(4), "{e}");
    assert!(e.to_string().starts_with("01-syntax-error.toml:4:"), "{e}");
}

#[test]
fn unknown_field_is_named_with_its_table() {
    let e = workload_error("02-unknown-field.toml");
    assert_eq!(e.line, Some(8), "{e}");
    assert!(e.message.contains("unknown field `comptue`"), "{e}");
    assert!(
        e.message.contains("compute"),
        "lists the expected fields: {e}"
    );
    assert_eq!(
        e.field.as_deref(),
        Some("application[0].cpu.comptue"),
        "{e}"
    );
}

#[test]
fn negative_cores_are_refused_at_their_line() {
    let e = cluster_error("03-negative-cores.toml");
    assert_eq!(e.line, Some(5), "{e}");
    assert_eq!(e.field.as_deref(), Some("node[0].cores"), "{e}");
    assert!(e.message.contains("-6"), "{e}");
}

/// A whole number of the wrong sign or size is told the range its field takes: not `0 or more`
/// where 0 is refused next, not the parser's internal `i128`, and always the largest value.
#[test]
fn a_whole_number_out_of_range_is_told_the_range_its_field_takes() {
    let cluster = |cores: &str| {
        let text = format!(
            "[[node]]\nname = \"n\"\ncount = 2\ncores = {cores}\ncore_speed = 1.0\n\
             memory = \"8GiB\"\ndisk_read = \"100MiB/s\"\nnetwork = \"125MB/s\"\n"
        );
        parse_cluster("c.toml", &text).expect_err(cores).to_string()
    };
    assert_eq!(
        cluster("-4"),
        "c.toml:4:9: node[0].cores: invalid value: integer `-4`, expected a whole number from 1 \
         to 65536"
    );
    assert_eq!(
        cluster("99999999999999999999999"),
        "c.toml:4:9: node[0].cores: invalid value: integer `99999999999999999999999` is out of \
         range, expected a whole number from 1 to 65536"
    );
    let workload = |line: &str| {
        let text =
            format!("[[application]]\nname = \"a\"\n{line}\n[application.cpu]\ncompute = \"1s\"\n");
        parse_workload("w.toml", &text).expect_err(line).to_string()
    };
    assert_eq!(
        workload("tasks = 1000000000000"),
        "w.toml:3:9: application[0].tasks: invalid value: integer `1000000000000`, expected a \
         whole number from 1 to 10000000"
    );
    assert_eq!(
        workload("tasks = 1\npriority = 99999999999"),
        "w.toml:4:12: application[0].priority: invalid value: integer `99999999999`, expected a \
         whole number from -2147483648 to 2147483647"
    );
}

#[test]
fn unknown_rack_is_named() {
    let e = cluster_error("04-unknown-rack.toml");
    assert_eq!(e.line, Some(7), "{e}");
    assert_eq!(e.field.as_deref(), Some("node[0].rack"), "{e}");
    assert!(e.message.contains("unknown rack `r2`"), "{e}");
}

#[test]
fn application_without_variant_is_refused() {
    let e = workload_error("05-no-variant.toml");
    assert_eq!(e.line, Some(3), "{e}");
    assert!(e.message.contains("neither"), "{e}");
}

#[test]
fn bad_duration_unit_is_explained() {
    let e = workload_error("06-bad-duration.toml");
    assert_eq!(e.line, Some(8), "{e}");
    assert_eq!(
        e.field.as_deref(),
        Some("application[0].gpu.compute"),
        "{e}"
    );
    assert!(e.message.contains("fortnights"), "{e}");
}

#[test]
fn zero_tasks_are_refused() {
    let e = workload_error("07-zero-tasks.toml");
    assert_eq!(
        (e.line, e.field.as_deref()),
        (Some(4), Some("application[0].tasks")),
        "{e}"
    );
}

#[test]
fn a_workload_of_billions_of_tasks_is_refused_at_the_field_not_allocated() {
    let app = |name: &str, tasks: u64| {
        format!(
            "[[application]]\nname = \"{name}\"\ntasks = {tasks}\nsplit = \"1MiB\"\n\
             [application.cpu]\ncompute = \"10s\"\nread = \"0s\"\n"
        )
    };
    // The batch simulator allocated a record per task up front: 4e9 tasks aborted it.
    let e = hetsched_core::input::workload::parse_sim_workload("w.toml", &app("a", 4_000_000_000))
        .expect_err("refused")
        .to_string();
    assert!(
        e.starts_with("w.toml:3:9: application[0].tasks: 4000000000 tasks bring the workload to 4000000000: at most 10000000 tasks in all"),
        "{e}"
    );
    // The bound is on the whole workload, named at the application that passes it.
    let text = app("a", 6_000_000) + &app("b", 4_000_001);
    let e = hetsched_core::input::workload::parse_sim_workload("w.toml", &text)
        .expect_err("refused")
        .to_string();
    assert!(
        e.starts_with(
            "w.toml:10:9: application[1].tasks: 4000001 tasks bring the workload to 10000001"
        ),
        "{e}"
    );
    let text = app("a", 6_000_000) + &app("b", 4_000_000);
    assert_eq!(
        hetsched_core::input::workload::parse_sim_workload("w.toml", &text)
            .expect("at the bound")
            .total_tasks(),
        hetsched_core::input::workload::MAX_WORKLOAD_TASKS
    );
    // The runtime's parser says the runtime's bound, 1,000,000 per job, not the simulator's
    // (`submit --tasks 100000000` was told the simulator holds every task in memory).
    for (tasks, total) in [(100_000_000, 100_000_001), (1_000_000, 1_000_001)] {
        let text = app("a", 1) + &app("b", tasks);
        let e = parse_workload("w.toml", &text)
            .expect_err("refused")
            .to_string();
        assert_eq!(
            e,
            format!(
                "w.toml:10:9: application[1].tasks: {tasks} tasks bring the job to {total}: \
                 at most 1000000 per job"
            )
        );
    }
    let text = app("a", 1) + &app("b", 999_999);
    assert_eq!(
        parse_workload("w.toml", &text)
            .expect("at the bound")
            .total_tasks(),
        hetsched_core::input::workload::MAX_JOB_TASKS
    );
}

const GOOD_WORKLOAD: &str = r#"
[[application]]
name = "bp"
tasks = 4
split = "4MiB"

[application.gpu]
compute = "23.6s"
copy = "0.1s"
read = "0.03s"
"#;

#[test]
fn a_gpu_only_application_cannot_run_without_gpus() {
    let w = parse_workload("w.toml", GOOD_WORKLOAD).expect("valid");
    let cpu_only = [node("n0").cores(6).build(NodeId(0))];
    let e = w.check_runnable(&cpu_only).expect_err("no GPU anywhere");
    assert_eq!(e.field.as_deref(), Some("application[0].gpu"), "{e}");
    assert_eq!(e.line, Some(7), "{e}");
    let with_gpu = [node("n0").cores(6).gpus(4, "c2050").build(NodeId(0))];
    assert_eq!(w.check_runnable(&with_gpu), Ok(()));
}

/// A task larger than every node is refused saying what it asks and what the largest nodes
/// offer.
#[test]
fn a_task_larger_than_every_node_is_refused_with_what_it_asks_and_what_is_offered() {
    let w = parse_workload(
        "w.toml",
        "[[application]]\nname = \"big\"\ntasks = 1\n[application.cpu]\ncommand = \"x\"\n\
         cores = 1\nmemory = \"100TiB\"\n",
    )
    .expect("valid");
    let nodes = [
        node("n0").cores(8).memory(16 << 30).build(NodeId(0)),
        node("n1").cores(2).memory(64 << 30).build(NodeId(1)),
    ];
    let e = w.check_runnable(&nodes).expect_err("too large").to_string();
    assert!(
        e.contains("no node has the cores and memory one task asks for (1 core, 100.0 TiB; the largest nodes offer 8 cores, 64.0 GiB)"),
        "{e}"
    );
    // One that asks for no memory is not said to ask for `0 B`.
    let w = parse_workload(
        "w.toml",
        "[[application]]\nname = \"wide\"\ntasks = 1\n[application.cpu]\ncommand = \"x\"\n\
         cores = 1000\n",
    )
    .expect("valid");
    let e = w.check_runnable(&nodes).expect_err("too wide").to_string();
    assert!(
        e.contains("one task asks for (1000 cores; the largest nodes offer 8 cores, 64.0 GiB)"),
        "{e}"
    );
}

#[test]
fn profiles_become_nanoseconds_and_missing_ones_are_refused_for_simulation() {
    let w = parse_workload("w.toml", GOOD_WORKLOAD).expect("valid");
    let apps = w
        .to_applications(0, MissingProfile::Refuse)
        .expect("complete profile");
    let gpu = apps[0].gpu.as_ref().expect("gpu variant");
    assert_eq!(
        (gpu.compute, gpu.copy, gpu.read),
        (23_600_000_000, 100_000_000, 30_000_000)
    );
    assert_eq!(apps[0].split_bytes, 4 << 20);

    let partial = GOOD_WORKLOAD.replace("read = \"0.03s\"\n", "");
    let w = parse_workload("w.toml", &partial).expect("valid file");
    let e = w
        .to_applications(0, MissingProfile::Refuse)
        .expect_err("read missing");
    assert_eq!(e.field.as_deref(), Some("application[0].gpu.read"), "{e}");
    assert!(
        w.to_applications(0, MissingProfile::Estimate(1_000_000_000))
            .is_ok()
    );
}

#[test]
fn a_read_time_without_a_split_is_refused_for_simulation_and_says_what_to_write() {
    // The simulator reads `split` bytes; a `read` without them never happened (a 1 s task with
    // read = "100s" ran in 1.9 s and reported a delay of 0.01×).
    let text = "[[application]]\nname = \"x\"\ntasks = 1\n[application.cpu]\ncompute = \"1s\"\n\
                read = \"100s\"\n";
    let w = parse_workload("w.toml", text).expect("a valid file");
    let e = w
        .to_applications(0, MissingProfile::Refuse)
        .expect_err("a read of nothing")
        .to_string();
    assert!(
        e.starts_with(
            "w.toml:4:1: application[0].cpu.read: read = \"1m 40s\" but the application has no \
             `split`"
        ) && e.contains("split = \"1GiB\"")
            && e.contains("read = \"0s\""),
        "{e}"
    );
    // The GPU variant's read too.
    let gpu = "[[application]]\nname = \"x\"\ntasks = 1\n[application.gpu]\ncompute = \"1s\"\n\
               read = \"2s\"\n";
    let e = parse_workload("w.toml", gpu)
        .expect("a valid file")
        .to_applications(0, MissingProfile::Refuse)
        .expect_err("a read of nothing");
    assert_eq!(e.field.as_deref(), Some("application[0].gpu.read"), "{e}");
    // With a split, or a read of 0, it runs; the runtime, which learns profiles, takes it.
    for ok in [
        text.replace("tasks = 1\n", "tasks = 1\nsplit = \"1GiB\"\n"),
        text.replace("read = \"100s\"", "read = \"0s\""),
    ] {
        let w = parse_workload("w.toml", &ok).expect("valid");
        assert!(w.to_applications(0, MissingProfile::Refuse).is_ok(), "{ok}");
    }
    assert!(w.to_applications(0, MissingProfile::Estimate(1)).is_ok());
}

#[test]
fn a_profile_that_takes_no_time_is_refused_for_simulation_at_its_variant() {
    // Such a task made `sim run` report an average task delay of 32768000×.
    let w = parse_workload(
        "w.toml",
        "[[application]]\nname = \"a\"\ntasks = 4\n[application.cpu]\ncompute = \"0s\"\n\
         read = \"0s\"\n",
    )
    .expect("a valid file");
    let e = w
        .to_applications(0, MissingProfile::Refuse)
        .expect_err("no time")
        .to_string();
    assert_eq!(
        e,
        "w.toml:4:1: application[0].cpu.compute: the base profile takes no time (compute and read \
         are 0): the simulator needs a task that takes time"
    );
    let zero_gpu = GOOD_WORKLOAD
        .replace("23.6s", "0s")
        .replace("0.1s", "0ms")
        .replace("0.03s", "0");
    let e = parse_workload("w.toml", &zero_gpu)
        .expect("a valid file")
        .to_applications(0, MissingProfile::Refuse)
        .expect_err("no time");
    assert_eq!(
        (e.line, e.field.as_deref()),
        (Some(7), Some("application[0].gpu.compute")),
        "{e}"
    );
    assert!(e.message.contains("(compute, copy and read are 0)"), "{e}");
    // One phase that takes time is enough; the runtime, which learns profiles, is not concerned.
    let read_only = GOOD_WORKLOAD.replace("23.6s", "0s").replace("0.1s", "0ms");
    assert!(
        parse_workload("w.toml", &read_only)
            .expect("valid")
            .to_applications(0, MissingProfile::Refuse)
            .is_ok()
    );
    assert!(
        w.to_applications(0, MissingProfile::Estimate(1_000_000_000))
            .is_ok()
    );
}

#[test]
fn node_groups_expand_with_numbered_names() {
    let c = parse_cluster(
        "c.toml",
        r#"
[[node]]
name = "slave"
count = 3
cores = 6
disk_read = "128MiB/s"
accelerator = [{ kind = "c2050", count = 4, speed = 1.0 }]
"#,
    )
    .expect("valid");
    let names: Vec<_> = c.nodes.iter().map(|n| n.name.as_str()).collect();
    assert_eq!(names, ["slave-1", "slave-2", "slave-3"]);
    assert_eq!(c.nodes[2].accelerators.len(), 4);
    assert_eq!(c.nodes[0].disk_read_bw, 128.0 * 1024.0 * 1024.0);
    assert_eq!(c.totals().gpus, 12);
}

#[test]
fn a_cluster_files_link_in_gb_per_s_is_gigabits_and_in_gb_upper_gigabytes() {
    // `"1Gb/s"` is a 1 Gbit/s link, 125 MB/s: it used to read as 1 GB/s, eight times too fast.
    let c = parse_cluster(
        "c.toml",
        r#"
[[node]]
name = "bits"
cores = 2
network = "1Gb/s"
disk_read = "800Mbit/s"
[[node]]
name = "bytes"
cores = 2
network = "1GB/s"
disk_read = "125MB/s"
"#,
    )
    .expect("valid");
    assert_eq!(c.nodes[0].net_bw, 125e6);
    assert_eq!(c.nodes[0].disk_read_bw, 100e6);
    assert_eq!(c.nodes[1].net_bw, 1e9);
    assert_eq!(c.nodes[1].disk_read_bw, 125e6);
}

#[test]
fn a_cluster_of_absurd_size_or_speed_is_refused_at_the_field_not_allocated() {
    let err = |text: &str| {
        parse_cluster("c.toml", text)
            .expect_err("refused")
            .to_string()
    };
    // Four billion nodes, or accelerators, would exhaust memory before anything else was said.
    let e = err("[[node]]\nname = \"n\"\ncount = 4294967295\ncores = 2\n");
    assert!(
        e.starts_with("c.toml:3:9: node[0].count: 4294967295 nodes in all")
            && e.contains("at most 100000"),
        "{e}"
    );
    let e = err(
        "[[node]]\nname = \"a\"\ncount = 60000\ncores = 1\n[[node]]\nname = \"b\"\ncount = 40001\ncores = 1\n",
    );
    assert!(
        e.starts_with("c.toml:7:9: node[1].count: 100001 nodes in all"),
        "{e}"
    );
    let e = err(
        "[[node]]\nname = \"n\"\ncores = 1\naccelerator = [{ kind = \"k\", count = 100000 }]\n",
    );
    assert!(
        e.contains("node[0].accelerator[0].count: 100000 accelerators; a node has at most 256"),
        "{e}"
    );
    // A speed a billion times the reference's overflows the clock (and made the bound's LP fail
    // with a message that named neither the file nor the field).
    for (speed, at) in [
        ("1e-9", "c.toml:4:14"),
        ("0", "c.toml:4:14"),
        ("-1", "c.toml:4:14"),
    ] {
        let e = err(&format!(
            "[[node]]\nname = \"n\"\ncores = 1\ncore_speed = {speed}\n"
        ));
        assert!(
            e.starts_with(&format!(
                "{at}: node[0].core_speed: must be between 0.001 and 1000"
            )),
            "{speed}: {e}"
        );
    }
    let e =
        err("[[node]]\nname = \"n\"\ncores = 1\naccelerator = [{ kind = \"k\", speed = 1e6 }]\n");
    assert!(
        e.contains("node[0].accelerator[0].speed: must be between"),
        "{e}"
    );
    parse_cluster(
        "c.toml",
        "[[node]]\nname = \"n\"\ncount = 100000\ncores = 1\ncore_speed = 1000\n",
    )
    .expect("at the bounds");
}

/// The node past the cluster's bound is named where it is written even when no `count` is: one
/// node per [[node]] table (it was `c.toml: node[2].count: …`, no line, a field not written).
#[test]
fn the_node_table_past_the_cluster_bound_is_named_at_its_line() {
    let text = "[[node]]\nname = \"a\"\ncount = 99999\ncores = 1\n\
                [[node]]\nname = \"b\"\ncores = 1\n[[node]]\nname = \"c\"\ncores = 1\n";
    assert_eq!(
        parse_cluster("c.toml", text)
            .expect_err("refused")
            .to_string(),
        "c.toml:8:1: node[2]: this [[node]] table brings the cluster to 100001 nodes; a cluster \
         file describes at most 100000"
    );
    // 100,001 tables of one node each: the last one's header.
    let many: String = (0..100_001)
        .map(|i| format!("[[node]]\nname = \"n{i}\"\ncores = 1\n"))
        .collect();
    assert_eq!(
        parse_cluster("c.toml", &many)
            .expect_err("refused")
            .to_string(),
        "c.toml:300001:1: node[100000]: this [[node]] table brings the cluster to 100001 nodes; \
         a cluster file describes at most 100000"
    );
}

/// A refused speed is echoed as written, not as Rust writes out an f64 (`1e300` was 301
/// digits, `1e-300` 302 characters).
#[test]
fn a_refused_speed_or_duration_is_echoed_compactly() {
    for (speed, shown) in [
        ("1e300", "1e300"),
        ("1e-300", "1e-300"),
        ("2000.5", "2000.5"),
    ] {
        let e = parse_cluster(
            "c.toml",
            &format!("[[node]]\nname = \"n\"\ncores = 1\ncore_speed = {speed}\n"),
        )
        .expect_err("refused")
        .to_string();
        assert_eq!(
            e,
            format!(
                "c.toml:4:14: node[0].core_speed: must be between 0.001 and 1000 (relative to \
                 the reference, 1.0); got {shown}"
            )
        );
    }
    let e = parse_cluster(
        "c.toml",
        "[[node]]\nname = \"n\"\ncores = 1\naccelerator = [{ kind = \"k\", speed = 1e300 }]\n",
    )
    .expect_err("refused")
    .to_string();
    assert_eq!(
        e,
        "c.toml:4:38: node[0].accelerator[0].speed: must be between 0.001 and 1000 (relative to \
         the reference, 1.0); got 1e300"
    );
    // A duration written as a number of seconds.
    let e = parse_cluster(
        "c.toml",
        "[[node]]\nname = \"n\"\ncores = 1\nlatency = 1e300\n",
    )
    .expect_err("refused")
    .to_string();
    assert_eq!(
        e,
        "c.toml:4:11: node[0].latency: invalid duration 1e300: at most 10 years (87600h)"
    );
    let e = parse_cluster(
        "c.toml",
        "[[node]]\nname = \"n\"\ncores = 1\nlatency = -1e300\n",
    )
    .expect_err("refused")
    .to_string();
    assert_eq!(
        e,
        "c.toml:4:11: node[0].latency: invalid duration -1e300: expected a non-negative number \
         of seconds"
    );
}

/// A float where a whole number is expected is echoed as written could be, not as serde writes
/// it out (`priority = 1e300` was 301 digits).
#[test]
fn a_float_for_a_whole_number_is_echoed_compactly() {
    let e = parse_workload(
        "w.toml",
        "[[application]]\nname = \"a\"\ntasks = 3\npriority = 1e300\n\
         cpu = { compute = \"1s\", read = \"1s\" }\n",
    )
    .expect_err("refused")
    .to_string();
    assert_eq!(
        e,
        "w.toml:4:12: application[0].priority: invalid type: floating point `1e300`, expected \
         a whole number from -2147483648 to 2147483647"
    );
    let e = parse_cluster("c.toml", "[[node]]\nname = \"n\"\ncores = 2.5\n")
        .expect_err("refused")
        .to_string();
    assert_eq!(
        e,
        "c.toml:3:9: node[0].cores: invalid type: floating point `2.5`, expected a whole number \
         from 1 to 65536"
    );
}

/// A typo'd key of an [[application]] entry that has sub-tables is named at its own line and
/// column, on the entry (not on `[application.cpu]`), with the key it most likely meant.
#[test]
fn a_typod_application_key_is_named_at_its_line_with_the_key_meant() {
    let text = "[[application]]\nname = \"a\"\ntaks = 4\nsplit = \"1MiB\"\n\n\
                [application.cpu]\ncompute = \"1s\"\nread = \"1s\"\n\n\
                [application.gpu]\ncompute = \"1s\"\ncopy = \"1s\"\nread = \"1s\"\n";
    assert_eq!(
        parse_workload("w.toml", text)
            .expect_err("refused")
            .to_string(),
        "w.toml:3:1: application[0].taks: unknown field `taks`, expected one of `name`, \
         `tasks`, `indices`, `entries`, `split`, `priority`, `submit_at`, `retries`, \
         `max_running`, `accelerator`, `inputs`, `outputs`, `nodes`, `requires`, `cpu`, `gpu`, \
         `workdir`, `stdout`, `stderr`, `pin`, `user`: did you mean `tasks`?"
    );
    // In a sub-table, the sub-table's own keys are offered.
    let e = parse_workload("w.toml", &text.replace("copy =", "cpoy ="))
        .expect_err("refused")
        .to_string();
    assert!(
        e.starts_with("w.toml:12:1: application[0].gpu.cpoy: unknown field `cpoy`")
            && e.ends_with(": did you mean `copy`?"),
        "{e}"
    );
}

#[test]
fn a_node_without_memory_or_devices_or_with_a_bad_name_is_refused_at_the_field() {
    let err = |text: &str| {
        parse_cluster("c.toml", text)
            .expect_err("refused")
            .to_string()
    };
    let e = err("[[node]]\nname = \"n\"\ncores = 1\nmemory = \"0\"\n");
    assert!(
        e.starts_with("c.toml:4:10: node[0].memory: must be more than 0"),
        "{e}"
    );
    let e = err("[[node]]\nname = \"n\"\ncores = 1\nmemory = 0\n");
    assert!(e.starts_with("c.toml:4:10: node[0].memory:"), "{e}");
    let e =
        err("[[node]]\nname = \"n\"\ncores = 1\n[[node.accelerator]]\nkind = \"k\"\ncount = 0\n");
    assert!(
        e.starts_with("c.toml:6:9: node[0].accelerator[0].count: must be at least 1"),
        "{e}"
    );
    // The runtime's rule for node names: letters, digits, `.`, `-`, `_`, 1 to 253 bytes.
    for (name, problem) in [
        ("", "a node name must not be empty"),
        ("a\\nb", "node name `a\\nb` may hold only letters"),
        ("a\\tb", "node name `a\\tb` may hold only letters"),
        ("two words", "node name `two words` may hold only letters"),
    ] {
        let e = err(&format!(
            "[[node]]\nname = \"{name}\"\ncount = 2\ncores = 1\n"
        ));
        assert!(
            e.starts_with(&format!("c.toml:2:8: node[0].name: {problem}")),
            "{name:?}: {e}"
        );
    }
    let long = "n".repeat(252);
    let e = err(&format!(
        "[[node]]\nname = \"{long}\"\ncount = 2\ncores = 1\n"
    ));
    assert!(
        e.contains("node[0].name: node name is 254 bytes long; at most 253"),
        "{e}"
    );
    let c = parse_cluster(
        "c.toml",
        &format!(
            "[[node]]\nname = \"{long}\"\ncores = 1\n[[node]]\nname = \"a.b_c-D9\"\ncores = 1\n"
        ),
    )
    .expect("valid names");
    assert_eq!(c.nodes[1].name, "a.b_c-D9");
    assert_eq!(c.nodes[0].memory_bytes, 16 << 30, "16 GiB when left out");
}

#[test]
fn retries_default_to_zero_and_bad_values_name_the_field() {
    let job = |retries: &str| {
        format!(
            "[[application]]\nname = \"a\"\ntasks = 1\n{retries}\n[application.cpu]\ncommand = \"true\"\n"
        )
    };
    let w = parse_workload("j.toml", &job("")).expect("valid");
    assert_eq!(*w.applications[0].retries.get_ref(), 0);
    let w = parse_workload("j.toml", &job("retries = 3")).expect("valid");
    assert_eq!(*w.applications[0].retries.get_ref(), 3);
    for (value, says) in [
        ("retries = -1", "expected a whole number from 0 to 100"),
        ("retries = \"two\"", "expected a whole number from 0 to 100"),
        ("retries = 101", "must be at most 100"),
    ] {
        let e = parse_workload("j.toml", &job(value)).expect_err(value);
        let text = e.to_string();
        assert!(
            text.starts_with("j.toml:4:") && text.contains("application[0].retries"),
            "{value}: {text}"
        );
        assert!(text.contains(says), "{value}: {text}");
    }
}

/// `user` (simulator workloads, for fair share and per-user reports): a user name as the
/// runtime's, named at its line when bad; the runtime's check refuses it altogether.
#[test]
fn a_workloads_user_is_a_user_name_and_runtime_jobs_may_not_set_one() {
    let job = |user: &str| {
        format!(
            "[[application]]\nname = \"a\"\ntasks = 1\n{user}\n[application.cpu]\ncommand = \"true\"\ncompute = \"1s\"\nread = \"0s\"\n"
        )
    };
    let w = parse_workload("w.toml", &job("user = \"alice\"")).expect("valid");
    let apps = w
        .to_applications(0, hetsched_core::input::workload::MissingProfile::Refuse)
        .expect("apps");
    assert_eq!(apps[0].user.as_deref(), Some("alice"));
    let e = w.check_commands().expect_err("the runtime refuses it");
    let text = e.to_string();
    assert!(
        text.starts_with("w.toml:4:") && text.contains("application[0].user"),
        "{text}"
    );
    assert!(
        text.contains("belongs to the user its token names"),
        "{text}"
    );
    for bad in [
        "\"\"",
        "\"Alice\"",
        "\"1st\"",
        "\"a b\"",
        "\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"",
    ] {
        let e = parse_workload("w.toml", &job(&format!("user = {bad}"))).expect_err(bad);
        let text = e.to_string();
        assert!(
            text.starts_with("w.toml:4:") && text.contains("application[0].user"),
            "{bad}: {text}"
        );
        assert!(
            text.contains("a user name is 1 to 32 characters"),
            "{bad}: {text}"
        );
    }
    let w = parse_workload("w.toml", &job("")).expect("valid");
    w.check_commands().expect("no user: a runtime job");
}

/// `[[user]]` (simulator workloads): a user's fair-share shares and caps, as the runtime's
/// `hetsched user add|limit` sets them. Parsed into the model's limits; users no table names
/// keep the defaults; a table whose user no application names is allowed.
#[test]
fn a_workloads_user_tables_give_shares_and_caps() {
    let text = "[[application]]\nname = \"a\"\nuser = \"alice\"\ntasks = 1\n\
                [application.cpu]\ncompute = \"1s\"\nread = \"0s\"\n\
                [[user]]\nname = \"alice\"\nshares = 2\nmax_cores = 8\nmax_memory = \"64GiB\"\n\
                max_gpus = 1\n\
                [[user]]\nname = \"carol\"\n";
    let w = parse_workload("w.toml", text).expect("valid");
    let limits = w.user_limits();
    assert_eq!(
        limits,
        vec![
            hetsched_core::UserLimits {
                name: "alice".into(),
                shares: 2,
                cap: hetsched_core::Resources::new(8, 64 << 30, 1),
            },
            // Named by no application: allowed, with the defaults it did not override.
            hetsched_core::UserLimits::new("carol"),
        ]
    );
    assert_eq!(limits[0].max_memory_bytes(), Some(64 << 30));
    assert_eq!(limits[1].max_cores(), None);
    // No [[user]]: no limits, and every user keeps 1 share and no caps.
    let plain =
        parse_workload("w.toml", &text[..text.find("[[user]]").expect("table")]).expect("valid");
    assert!(plain.user_limits().is_empty());
}

/// Each bad `[[user]]` is refused at its line, naming the field and what to write instead.
#[test]
fn a_bad_user_table_is_refused_naming_its_line_and_field() {
    let workload = |user: &str| {
        format!(
            "[[application]]\nname = \"a\"\ntasks = 1\n[application.cpu]\ncompute = \"1s\"\n\
             read = \"0s\"\n[[user]]\nname = \"alice\"\n{user}\n"
        )
    };
    // (the table's last lines, the line of the error, its field, what it says)
    for (user, line, field, says) in [
        (
            "shares = 0",
            9,
            "user[0].shares",
            "must be 1 to 1000000 (default 1)",
        ),
        (
            "shares = 1000001",
            9,
            "user[0].shares",
            "must be 1 to 1000000",
        ),
        (
            "shares = -2",
            9,
            "user[0].shares",
            "expected a whole number from 1 to 1000000",
        ),
        (
            "max_cores = 0",
            9,
            "user[0].max_cores",
            "a cap of 0 lets nothing run: omit it for no cap",
        ),
        (
            "max_memory = \"0B\"",
            9,
            "user[0].max_memory",
            "omit it for no cap",
        ),
        ("max_gpus = 0", 9, "user[0].max_gpus", "omit it for no cap"),
        ("max_memory = \"lots\"", 9, "user[0].max_memory", ""),
        ("max_core = 4", 9, "user[0]", "unknown field `max_core`"),
        (
            "[[user]]\nname = \"alice\"",
            10,
            "user[1].name",
            "user `alice` has two [[user]] tables",
        ),
        (
            "[[user]]\nname = \"Bob\"",
            10,
            "user[1].name",
            "a user name is 1 to 32 characters",
        ),
    ] {
        let e = parse_workload("w.toml", &workload(user)).expect_err(user);
        let text = e.to_string();
        assert_eq!(e.line, Some(line), "{user}: {text}");
        assert!(
            text.starts_with(&format!("w.toml:{line}:")) && text.contains(field),
            "{user}: {text}"
        );
        assert!(text.contains(says), "{user}: {text}");
    }
}

/// The runtime refuses `[[user]]` as it refuses `user`: an admin sets a user's shares and caps.
#[test]
fn a_runtime_job_may_not_carry_user_tables() {
    let job = "[[application]]\nname = \"a\"\ntasks = 1\n[application.cpu]\ncommand = \"true\"\n\
               [[user]]\nname = \"alice\"\nmax_cores = 4\n";
    let w = parse_workload("j.toml", job).expect("parses");
    let e = w.check_commands().expect_err("the runtime refuses it");
    let text = e.to_string();
    assert!(
        text.starts_with("j.toml:7:") && text.contains("user[0]"),
        "{text}"
    );
    assert!(
        text.contains("set with `hetsched user add|limit`"),
        "{text}"
    );
}

#[test]
fn a_time_limit_under_a_millisecond_is_refused_not_dropped() {
    // Agents count limits in whole milliseconds with 0 meaning none: `500us` would be no limit.
    let job = |variant: &str, limit: &str| {
        format!(
            "[[application]]\nname = \"a\"\ntasks = 1\n[application.{variant}]\ncommand = \"true\"\ntime_limit = \"{limit}\"\n"
        )
    };
    let w = parse_workload("j.toml", &job("cpu", "1ms")).expect("valid");
    hetsched_core::input::limits::check(&w).expect("1ms is a limit");
    let cpu = w.applications[0].cpu.as_ref().expect("cpu").get_ref();
    assert_eq!(cpu.time_limit.map(|t| t.0), Some(1_000_000));
    for (variant, limit) in [("cpu", "0s"), ("cpu", "500us"), ("gpu", "0ms")] {
        // It parses (a stored job must still load), and the submission check refuses it.
        let w = parse_workload("j.toml", &job(variant, limit)).expect(limit);
        let e = hetsched_core::input::limits::check(&w).expect_err(limit);
        assert_eq!(
            (e.line, e.column, e.field.as_deref()),
            (
                Some(6),
                Some(14),
                Some(format!("application[0].{variant}.time_limit").as_str())
            ),
            "{e}"
        );
        assert!(e.message.contains("at least 1ms"), "{e}");
    }
}

/// `entries`: one task per entry (tasks may be left out), each task's entry by index; a count
/// that disagrees, an empty list, neither field, and an oversized entry are refused naming the
/// field.
#[test]
fn entries_make_one_task_each_and_their_mistakes_are_named() {
    let job = |fields: &str| {
        format!(
            "[[application]]\nname = \"a\"\n{fields}\n[application.cpu]\ncommand = \"echo {{entry}}\"\n"
        )
    };
    let w = parse_workload("j.toml", &job("entries = [\"x\", \"y y\", \"{index}\"]")).expect("ok");
    let a = &w.applications[0];
    assert_eq!((a.task_count(), w.total_tasks()), (3, 3));
    assert_eq!(
        (a.entry(1), a.entry(2), a.entry(3)),
        (Some("y y"), Some("{index}"), None)
    );
    let apps = w
        .to_applications(0, MissingProfile::Estimate(1))
        .expect("model");
    assert_eq!(apps[0].tasks, 3);
    let w = parse_workload("j.toml", &job("tasks = 2\nentries = [\"x\", \"y\"]")).expect("ok");
    assert_eq!(w.applications[0].task_count(), 2);
    assert_eq!(w.applications[0].entry(0), Some("x"));
    assert_eq!(
        parse_workload("j.toml", &job("tasks = 4"))
            .expect("ok")
            .applications[0]
            .entry(0),
        None
    );

    let refused = |fields: &str, field: &str, says: &str| {
        let e = parse_workload("j.toml", &job(fields)).expect_err(fields);
        assert_eq!(e.field.as_deref(), Some(field), "{fields}: {e}");
        assert!(e.message.contains(says), "{fields}: {e}");
    };
    refused(
        "tasks = 3\nentries = [\"x\"]",
        "application[0].tasks",
        "is 3 but `entries` holds 1",
    );
    refused(
        "entries = []",
        "application[0].entries",
        "at least one entry",
    );
    refused(
        "retries = 0",
        "application[0].tasks",
        "give `tasks` (how many) or `entries`",
    );
    let long = format!("entries = [\"ok\", \"{}\"]", "z".repeat(16 * 1024 + 1));
    refused(&long, "application[0].entries[1]", "at most 16384 bytes");
}

/// `signal = "USR1@2m"` (Slurm's `--signal`): read on either variant; a signal a program cannot
/// catch, or one written on the application, is refused naming its line and field.
#[test]
fn a_variants_warning_signal_is_read_and_its_mistakes_are_named() {
    let job = |variant_fields: &str, app_fields: &str| {
        format!(
            "[[application]]\nname = \"a\"\ntasks = 1\n{app_fields}\n[application.cpu]\ncommand = \"true\"\n{variant_fields}\n"
        )
    };
    let w = parse_workload("j.toml", &job("signal = \"USR1@2m\"", "")).expect("valid");
    let cpu = w.applications[0].cpu.as_ref().expect("cpu").get_ref();
    assert_eq!(
        cpu.signal.map(|s| (s.signal, s.before)),
        Some(("USR1", 120_000_000_000))
    );
    let e = parse_workload("j.toml", &job("signal = \"KILL\"", "")).expect_err("KILL");
    assert_eq!(
        (e.line, e.field.as_deref()),
        (Some(7), Some("application[0].cpu.signal")),
        "{e}"
    );
    assert!(e.message.contains("invalid signal `KILL`"), "{e}");
    let e = parse_workload("j.toml", &job("", "signal = \"USR1\"")).expect_err("misplaced");
    assert!(e.to_string().contains("[application.cpu]"), "{e}");
}

/// A variant no node can hold, beside one that fits, is runnable (the tasks run on the other)
/// and said as a warning at its table, naming the application and what no node has; a variant
/// the application never runs, or a workload refused outright, gives none.
#[test]
fn a_variant_no_node_holds_beside_one_that_fits_is_warned_of() {
    let cluster = parse_cluster(
        "c.toml",
        "[[node]]\nname = \"n\"\ncount = 2\ncores = 4\ncore_speed = 1.0\nmemory = \"8GiB\"\n\
         disk_read = \"100MiB/s\"\nnetwork = \"125MB/s\"\n\
         [[node.accelerator]]\nkind = \"g\"\ncount = 1\nmemory = \"4GiB\"\nspeed = 1.0\n",
    )
    .expect("cluster");
    let warnings = |cpu: &str, gpu: &str, extra: &str| {
        let text = format!(
            "[[application]]\nname = \"a\"\ntasks = 10\n{extra}\n[application.cpu]\n\
             compute = \"10s\"\n{cpu}\n[application.gpu]\ncompute = \"1s\"\n{gpu}\n"
        );
        let w = parse_workload("w.toml", &text).expect("workload");
        w.check_runnable(&cluster.nodes).expect("runnable");
        w.unfit_variants(&cluster.nodes)
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
    };
    assert_eq!(
        warnings("", "gpus = 5", ""),
        vec![
            "w.toml:8:1: application[0].gpu: application `a`: no node has 5 GPUs with the cores \
             and memory a task of its GPU variant asks for (the most on a node: 1 GPU): its tasks \
             run on CPUs only"
        ]
    );
    assert_eq!(
        warnings("cores = 64", "", ""),
        vec![
            "w.toml:5:1: application[0].cpu: application `a`: no node has the cores and memory a \
             task of its CPU variant asks for (64 cores; the largest nodes offer 4 cores, 8.0 \
             GiB): its tasks run on GPUs only"
        ]
    );
    assert!(warnings("", "", "").is_empty());
    // A required application never runs its CPU variant: nothing to warn of.
    assert!(warnings("cores = 64", "", "accelerator = \"required\"").is_empty());
}
