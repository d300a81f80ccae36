//! What a review of the parsers found them to accept, panic on or misplace: each test here
//! failed before its fix.

use hetsched_core::input::Source;
use hetsched_core::input::binding::parse_binding_events;

/// The error a binding event file gets, as a line.
fn binding_error(text: &str) -> String {
    match parse_binding_events("b.txt", text) {
        Ok(lines) => panic!("accepted {text:?}: {lines:?}"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn a_binding_line_with_a_multibyte_blank_names_the_right_column_without_panicking() {
    // U+00A0 and U+3000 are whitespace of 2 and 3 bytes: counting each as one byte put the
    // column of `extra` inside a character, and line_col panicked.
    assert_eq!(
        binding_error("add-nnode n1 r\u{a0}extra\n"),
        "b.txt:1:16: unexpected `extra`: expected `add-nnode NAME RACK`"
    );
    assert_eq!(
        binding_error("add-anode\u{a0}a1 r heavy\n"),
        "b.txt:1:16: invalid WEIGHT `heavy`: expected a number from 0.001 to 256000 (an ANode's \
         accelerators' summed speeds: at most 256, each 0.001 to 1000)"
    );
    assert_eq!(
        binding_error("remove\u{3000}a\u{3000}b\n"),
        "b.txt:1:10: unexpected `b`: expected `remove NAME`"
    );
}

#[test]
fn a_location_inside_a_character_is_its_start_not_a_panic() {
    let src = Source::new("x.txt", "ab\n\u{e9}\u{3000}z");
    // Byte 4 is inside `é` (bytes 3..5), byte 6 inside U+3000 (bytes 5..8).
    assert_eq!(src.line_col(4), (2, 1));
    assert_eq!(src.line_col(6), (2, 2));
    assert_eq!(src.line_col(8), (2, 3));
    assert_eq!(src.line_col(1000), (2, 4));
}

/// A one-node cluster file whose node has `extra` lines.
fn cluster(extra: &str) -> String {
    format!("[[node]]\nname = \"n\"\ncores = 4\n{extra}\n")
}

fn cluster_error(text: &str) -> String {
    match hetsched_core::input::cluster::parse_cluster("c.toml", text) {
        Ok(_) => panic!("accepted:\n{text}"),
        Err(e) => e.to_string(),
    }
}

fn workload_error(text: &str) -> String {
    match hetsched_core::input::workload::parse_workload("w.toml", text) {
        Ok(_) => panic!("accepted:\n{text}"),
        Err(e) => e.to_string(),
    }
}

fn workflow_error(text: &str) -> String {
    match hetsched_core::input::workflow::parse_workflow("wf.toml", text) {
        Ok(_) => panic!("accepted:\n{text}"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn a_size_past_16_eib_or_below_one_byte_is_refused_not_saturated() {
    // A node has at most 1 PiB (`MAX_NODE_MEMORY`); a size as such holds up to 16 EiB less a
    // byte, as a workflow task's `memory` does.
    let task_memory = |m: &str| {
        hetsched_core::input::workflow::parse_workflow(
            "wf.toml",
            &format!("[[task]]\nname = \"A\"\ninstances = 1\ncost = \"1s\"\nmemory = {m}\n"),
        )
        .map(|w| w.specs[0].memory.as_ref().map(|m| m.get_ref().as_u64()))
    };
    assert_eq!(task_memory("\"15EiB\""), Ok(Some(15 << 60)));
    assert_eq!(task_memory("\"18446744073709551615\""), Ok(Some(u64::MAX)));
    assert_eq!(task_memory("\"1.5 KiB\""), Ok(Some(1536)));
    for (m, said) in [
        ("\"1000000EB\"", "invalid size `1000000EB`: over 16 EiB"),
        ("\"20EB\"", "invalid size `20EB`: over 16 EiB"),
        ("\"16EiB\"", "invalid size `16EiB`: over 16 EiB"),
        ("\"17.5EiB\"", "invalid size `17.5EiB`: over 16 EiB"),
        ("\"18446744073709551616\"", "over 16 EiB"),
        ("\"0.1B\"", "invalid size `0.1B`: below 1 byte"),
        ("\"0.0000001KB\"", "below 1 byte"),
    ] {
        let e = cluster_error(&cluster(&format!("memory = {m}")));
        assert!(e.starts_with("c.toml:4:10: node[0].memory: "), "{m}: {e}");
        assert!(e.contains(said), "{m}: {e}");
    }
}

#[test]
fn every_size_field_says_how_to_write_a_size_at_its_line() {
    const HOW: &str = "write a number of bytes or a size such as \"512MiB\" or \"4GB\"";
    // An accelerator's memory read bytesize's own messages: "expected parsable string",
    // "expected integer overflow".
    for (m, said) in [
        ("\"1e30GB\"", "invalid size `1e30GB`"),
        ("-1", "invalid size -1"),
    ] {
        let e = cluster_error(&cluster(&format!(
            "[[node.accelerator]]\nkind = \"k\"\nmemory = {m}"
        )));
        assert!(
            e.starts_with("c.toml:6:10: node[0].accelerator[0].memory: ") && e.contains(said),
            "{m}: {e}"
        );
        assert!(e.contains(HOW), "{e}");
        let e = workload_error(&format!(
            "[[user]]\nname = \"alice\"\nmax_memory = {m}\n[[application]]\nname = \"a\"\n\
             tasks = 1\n[application.cpu]\ncompute = \"1s\"\nread = \"1s\"\n"
        ));
        assert!(
            e.starts_with("w.toml:3:14: user[0].max_memory: ") && e.contains(said),
            "{m}: {e}"
        );
        assert!(e.contains(HOW), "{e}");
        let e = workflow_error(&format!(
            "[[task]]\nname = \"A\"\ninstances = 1\ncost = \"1s\"\nmemory = {m}\n"
        ));
        assert!(
            e.starts_with("wf.toml:5:10: task[0].memory: ") && e.contains(said),
            "{m}: {e}"
        );
        assert!(e.contains(HOW), "{e}");
    }
    let e = workload_error(
        "[[user]]\nname = \"alice\"\nmax_memory = \"20EB\"\n[[application]]\nname = \"a\"\n\
         tasks = 1\n[application.cpu]\ncompute = \"1s\"\nread = \"1s\"\n",
    );
    assert!(e.contains("over 16 EiB"), "{e}");
    let e = workload_error(
        "[[divisible]]\nname = \"rows\"\nunits = 10\ncommand = \"x\"\nmemory_per_unit = \"20EB\"\n",
    );
    assert!(
        e.starts_with(
            "w.toml:5:19: divisible[0].memory_per_unit: invalid size `20EB`: over 16 EiB"
        ),
        "{e}"
    );
    let topology = "name = \"t\"\n[[component]]\nname = \"s\"\nkind = \"spout\"\nparallelism = 1\n\
                    cpu = 1.0\nmemory = -1\n";
    let e = hetsched_core::input::topology::parse_topology("t.toml", topology)
        .expect_err("refused")
        .to_string();
    assert!(
        e.starts_with("t.toml:7:10: component[0].memory: invalid size -1") && e.contains(HOW),
        "{e}"
    );
    let e = cluster_error(&cluster("disk_read = \"20EB/s\""));
    assert!(
        e.starts_with("c.toml:4:13: node[0].disk_read: invalid bandwidth `20EB/s`")
            && e.contains("over 16 EiB"),
        "{e}"
    );
}

#[test]
fn a_nodes_accelerators_are_bounded_all_entries_together_and_each_has_memory() {
    let entry = |count: u32| format!("[[node.accelerator]]\nkind = \"k\"\ncount = {count}\n");
    let at_bound = cluster(&format!("{}{}", entry(200), entry(56)));
    let c = hetsched_core::input::cluster::parse_cluster("c.toml", &at_bound).expect("256");
    assert_eq!(c.nodes[0].accelerators.len(), 256);
    // Three entries of 256 were 768 accelerators on one node.
    let e = cluster_error(&cluster(&format!(
        "{}{}{}",
        entry(256),
        entry(256),
        entry(256)
    )));
    assert_eq!(
        e,
        "c.toml:9:9: node[0].accelerator[1].count: 512 accelerators on the node with these 256; \
         a node has at most 256 in all"
    );
    let e = cluster_error(&cluster(&format!("{}{}", entry(200), entry(57))));
    assert!(
        e.starts_with("c.toml:9:9: node[0].accelerator[1].count: 257 accelerators"),
        "{e}"
    );
    // A node's memory of 0 was refused, an accelerator's accepted.
    for zero in ["0", "\"0B\"", "\"0GiB\""] {
        let e = cluster_error(&cluster(&format!(
            "[[node.accelerator]]\nkind = \"k\"\nmemory = {zero}\n"
        )));
        assert!(
            e.starts_with("c.toml:6:10: node[0].accelerator[0].memory: must be more than 0"),
            "{zero}: {e}"
        );
    }
}

#[test]
fn a_workflows_instances_are_bounded_all_tasks_together() {
    let task = |name: &str, instances: u64| {
        format!("[[task]]\nname = \"{name}\"\ninstances = {instances}\ncost = \"1s\"\n")
    };
    let at_bound = format!("{}{}", task("A", 6_000_000), task("B", 4_000_000));
    let w = hetsched_core::input::workflow::parse_workflow("wf.toml", &at_bound).expect("10M");
    assert_eq!(w.workflow.total_instances(), 10_000_000);
    // Each task under the old per-task cap of 100M, 200M in all: the simulator ran out of memory.
    let e = workflow_error(&format!("{}{}", task("A", 6_000_000), task("B", 4_000_001)));
    assert_eq!(
        e,
        "wf.toml:7:13: task[1].instances: 4000001 instances bring the workflow to 10000001: at \
         most 10000000 instances in all, processes included (the simulator holds every instance \
         in memory)"
    );
    let e = workflow_error(
        "[[task]]\nname = \"A\"\ninstances = 1\ncost = \"1s\"\n\
         [[task]]\nname = \"B\"\ninstances = \"1..=10\"\nprocesses = 1000000\ncost = \"1s\"\n",
    );
    assert!(
        e.starts_with(
            "wf.toml:7:13: task[1].instances: 10000000 instances bring the workflow to 10000001"
        ),
        "{e}"
    );
    let e = workflow_error(&task("A", 99_999_999));
    assert!(
        e.starts_with("wf.toml:3:13: task[0].instances: 99999999 values × 1 processes is more than 10000000 instances"),
        "{e}"
    );
}

#[test]
fn the_batch_simulator_refuses_a_divisible_load_instead_of_dropping_it() {
    use hetsched_core::input::workload::{MissingProfile, parse_workload};
    let app = "[[application]]\nname = \"a\"\ntasks = 1\n[application.cpu]\ncompute = \"1s\"\nread = \"1s\"\n";
    let load = "[[divisible]]\nname = \"rows\"\nunits = 10\ncommand = \"x {start} {end}\"\n";
    for (text, line) in [(load.to_string(), 2), (format!("{app}{load}"), 8)] {
        let w = parse_workload("w.toml", &text).expect("the runtime runs it");
        let e = w
            .to_applications(0, MissingProfile::Refuse)
            .expect_err("the batch simulator does not")
            .to_string();
        assert_eq!(
            e,
            format!(
                "w.toml:{line}:8: divisible[0]: the batch simulator (`sim run`, `sim compare`) \
                 does not simulate divisible loads: run them with `hetsched sim divisible`"
            )
        );
        // The runtime's path keeps them.
        assert!(w.to_applications(0, MissingProfile::Estimate(1)).is_ok());
    }
}

#[test]
fn a_gpu_variant_of_no_cores_is_refused_as_a_cpu_variant_is() {
    let job = |variant: &str| {
        format!(
            "[[application]]\nname = \"a\"\ntasks = 1\n[application.{variant}]\ncompute = \"1s\"\n\
             read = \"1s\"\ncores = 0\n"
        )
    };
    for variant in ["cpu", "gpu"] {
        assert_eq!(
            workload_error(&job(variant)),
            format!("w.toml:7:9: application[0].{variant}.cores: must be at least 1")
        );
    }
}

const WORDCOUNT: &str = "name = \"wordcount\"\n[[component]]\nname = \"sentences\"\nkind = \"spout\"\n\
    parallelism = 2\ncpu = 30.0\n[[component]]\nname = \"split\"\nkind = \"bolt\"\nparallelism = 4\n\
    cpu = 40.0\n[[stream]]\nfrom = \"sentences\"\nto = \"split\"\nrate = 1000.0\n";

#[test]
fn measured_traffic_needs_rows_in_range_and_reads_past_a_byte_order_mark() {
    use hetsched_core::input::topology::{parse_topology, parse_traffic};
    let t = parse_topology("t.toml", WORDCOUNT).expect("parses");
    let traffic = |csv: &str| parse_traffic("m.csv", csv, &t).map_err(|e| e.to_string());
    // Without a row every pair's traffic was 0, silently.
    for empty in ["", "\n\n", "from,to,tuples_per_s\n", "# nothing measured\n"] {
        assert_eq!(
            traffic(empty),
            Err(
                "m.csv: no rows: write one `from,to,tuples_per_s` line per pair of executors \
                 measured"
                    .into()
            ),
            "{empty:?}"
        );
    }
    // 1e308 tuples/s made infinite loads.
    for bad in ["1e308", "1.5e12", "-1", "inf", "NaN"] {
        let e = traffic(&format!(
            "sentences#0,split#1,1\nsentences#1,split#1,{bad}\n"
        ))
        .expect_err(bad);
        assert!(
            e.starts_with("m.csv:2:21: tuples_per_s: must be a number of tuples/s from 0 to 1e12"),
            "{bad}: {e}"
        );
    }
    assert_eq!(
        traffic("sentences#0,split#1,1e12\n").map(|p| p.len()),
        Ok(1)
    );
    // A spreadsheet's byte-order mark hid the header, which then was no executor.
    let pairs = traffic("\u{feff}from,to,tuples_per_s\nsentences#0,split#1,10\n").expect("BOM");
    assert_eq!(pairs.len(), 1);
    assert_eq!(pairs[0].tuples_per_s, 10.0);
    let pairs = traffic("\u{feff}sentences#0,split#1,10\n").expect("BOM before a row");
    assert_eq!(pairs.len(), 1);
}

#[test]
fn a_streams_rate_is_bounded_as_measured_traffic_is() {
    use hetsched_core::input::topology::parse_topology;
    let e = parse_topology(
        "t.toml",
        &WORDCOUNT.replace("rate = 1000.0", "rate = 1e308"),
    )
    .expect_err("refused")
    .to_string();
    assert_eq!(
        e,
        "t.toml:15:8: stream[0].rate: must be a number of tuples/s from 0 to 1e12; got 1e308 \
         (tuples/s per sending executor)"
    );
    assert!(parse_topology("t.toml", &WORDCOUNT.replace("rate = 1000.0", "rate = 1e12")).is_ok());
}

#[test]
fn a_disk_or_network_slower_than_a_byte_per_second_is_refused_at_its_line() {
    for (field, value, said) in [
        (
            "disk_read",
            "1e-300",
            "invalid bandwidth 1e-300: must be at least 1 byte/s",
        ),
        (
            "network",
            "0.5",
            "invalid bandwidth 0.5: must be at least 1 byte/s",
        ),
        (
            "network",
            "0",
            "invalid bandwidth 0: must be at least 1 byte/s",
        ),
        (
            "disk_read",
            "\"0B/s\"",
            "invalid bandwidth 0: must be at least 1 byte/s",
        ),
    ] {
        let e = cluster_error(&cluster(&format!("{field} = {value}")));
        let col = field.len() + 4;
        assert!(
            e.starts_with(&format!("c.toml:4:{col}: node[0].{field}: {said}")),
            "{field} = {value}: {e}"
        );
    }
    let c = hetsched_core::input::cluster::parse_cluster(
        "c.toml",
        &cluster("disk_read = 1\nnetwork = \"1B/s\""),
    )
    .expect("a byte per second");
    assert_eq!((c.nodes[0].disk_read_bw, c.nodes[0].net_bw), (1.0, 1.0));
}

#[test]
fn a_duration_with_an_overflowing_exponent_is_too_long_not_of_an_unknown_unit() {
    // It said `unknown time unit "e"`.
    for d in ["1e400s", "1e309ms", "9e999h"] {
        let e = cluster_error(&cluster(&format!("latency = \"{d}\"")));
        assert_eq!(
            e,
            format!(
                "c.toml:4:11: node[0].latency: invalid duration `{d}`: at most 10 years (87600h)"
            )
        );
    }
}

#[test]
fn names_the_simulator_prints_hold_no_control_character_and_are_bounded() {
    let long = "x".repeat(300);
    // Application names: the runtime's rule (input::limits::app_name_problem).
    let app = |name: &str| {
        format!(
            "[[application]]\nname = \"{name}\"\ntasks = 1\n[application.cpu]\ncompute = \"1s\"\n\
             read = \"1s\"\n"
        )
    };
    assert_eq!(
        workload_error(&app("red\\u001b[31m")),
        "w.toml:2:8: application[0].name: holds a control character"
    );
    assert_eq!(
        workload_error(&app(&long)),
        "w.toml:2:8: application[0].name: is 300 bytes long; at most 128"
    );
    // A control character is refused before a message quotes the name.
    assert_eq!(
        workload_error(&app("a/\\u001b[2J")),
        "w.toml:2:8: application[0].name: holds a control character"
    );
    // Racks: 1 to 128 bytes, no control character (an agent's --rack rule).
    let rack = |name: &str| {
        format!(
            "[[rack]]\nname = \"{name}\"\n[[node]]\nname = \"n\"\ncores = 1\nrack = \"{name}\"\n"
        )
    };
    for (name, said) in [
        ("", "a rack name must not be empty"),
        (
            "r\\u001b[31m",
            "rack name `r\\u{1b}[31m` holds a control character",
        ),
        (long.as_str(), "rack name is 300 bytes long; at most 128"),
    ] {
        assert_eq!(
            cluster_error(&rack(name)),
            format!("c.toml:2:8: rack[0].name: {said}")
        );
    }
    assert!(hetsched_core::input::cluster::parse_cluster("c.toml", &rack("rack A")).is_ok());
    let e = cluster_error("[[node]]\nname = \"n\"\ncores = 1\nrack = \"r\\u001b[31m\"\n");
    assert!(e.contains("unknown rack `r\\u{1b}[31m`"), "{e}");
    // Accelerator kinds: a GPU variant's rule (as an attribute).
    for (kind, said) in [
        ("", "an attribute must not be empty"),
        ("k\\u001b[31m", "has whitespace or a control character"),
        (long.as_str(), "is longer than 64 bytes"),
    ] {
        let e = cluster_error(&cluster(&format!(
            "[[node.accelerator]]\nkind = \"{kind}\""
        )));
        assert!(
            e.starts_with(
                "c.toml:5:8: node[0].accelerator[0].kind: an accelerator kind is named as a node \
                 attribute: "
            ) && e.contains(said),
            "{kind}: {e}"
        );
    }
    // Topology and component names.
    use hetsched_core::input::topology::parse_topology;
    let topology_error = |text: &str| {
        parse_topology("t.toml", text)
            .expect_err("refused")
            .to_string()
    };
    assert_eq!(
        topology_error(&WORDCOUNT.replace("\"wordcount\"", "\"w\\u001b[2J\"")),
        "t.toml:1:8: name: holds a control character"
    );
    assert_eq!(
        topology_error(&WORDCOUNT.replace("\"wordcount\"", &format!("\"{long}\""))),
        "t.toml:1:8: name: is 300 bytes long; at most 128"
    );
    assert_eq!(
        topology_error(&WORDCOUNT.replace("name = \"split\"", "name = \"s\\u0007\"")),
        "t.toml:8:8: component[1].name: holds a control character"
    );
    // Latency files: a name that is no node's is quoted escaped and cut short.
    let c = hetsched_core::input::cluster::parse_cluster("c.toml", &cluster("")).expect("one node");
    let e = hetsched_core::input::latency::parse_latency(
        "l.toml",
        &format!("[[pair]]\nbetween = [\"n\", \"{long}\\u001b\"]\nlatency = \"1ms\"\n"),
        &c,
    )
    .expect_err("unknown")
    .to_string();
    assert_eq!(
        e,
        format!(
            "l.toml:2:17: pair[0].between[1]: unknown node `{}…`: not in the cluster file",
            "x".repeat(64)
        )
    );
}

#[test]
fn a_latency_group_names_at_least_two_nodes_each_once() {
    use hetsched_core::input::latency::parse_latency;
    let c = hetsched_core::input::cluster::parse_cluster("c.toml", &cluster("count = 3"))
        .expect("three nodes");
    let group = |nodes: &str| {
        parse_latency(
            "l.toml",
            &format!("[[group]]\nnodes = {nodes}\nlatency = \"1s\"\n"),
            &c,
        )
        .map(|m| m.get(0, 1))
        .map_err(|e| e.to_string())
    };
    assert_eq!(group("[\"n-1\", \"n-2\"]"), Ok(1_000_000_000));
    for (nodes, found) in [("[]", 0), ("[\"n-1\"]", 1)] {
        assert_eq!(
            group(nodes),
            Err(format!(
                "l.toml:2:9: group[0].nodes: a group sets the latency between its nodes: name at \
                 least two, found {found}"
            ))
        );
    }
    assert_eq!(
        group("[\"n-1\", \"n-2\", \"n-1\"]"),
        Err(
            "l.toml:2:24: group[0].nodes[2]: node `n-1` is listed twice in this group: name each \
             node once"
                .into()
        )
    );
}

/// A cluster's cores and memory are summed into the model's totals (`Cluster::totals`, the
/// scheduler view's): two nodes of 4294967295 cores, or of 15 EiB, were accepted and every
/// `sim run` then panicked with "attempt to add with overflow" (and wrapped in a release build).
/// A node's memory is bounded as its cores are (1 PiB, the bound on an agent's registration),
/// and the cluster's in all still is: 16,384 nodes of 1 PiB pass 16 EiB.
#[test]
fn a_clusters_cores_and_memory_are_bounded_per_node_and_in_all() {
    let node = |name: &str, count: u32, cores: u32, memory: &str| {
        format!(
            "[[node]]\nname = \"{name}\"\ncount = {count}\ncores = {cores}\nmemory = \"{memory}\"\n"
        )
    };
    assert_eq!(
        cluster_error(&node("n", 2, u32::MAX, "1GiB")),
        "c.toml:4:9: node[0].cores: 4294967295 cores; a node has at most 65536"
    );
    assert_eq!(
        cluster_error(&node("n", 1, 4, "15EiB")),
        "c.toml:5:10: node[0].memory: 15.0 EiB (17293822569102704640 bytes); a node has at \
         most 1 PiB (1125899906842624 bytes)"
    );
    assert_eq!(
        cluster_error(&node("n", 1, 4, "1125899906842625")),
        "c.toml:5:10: node[0].memory: 1.0 PiB (1125899906842625 bytes); a node has at most 1 \
         PiB (1125899906842624 bytes)"
    );
    assert_eq!(
        cluster_error(&node("n", 16_384, 4, "1PiB")),
        "c.toml:5:10: node[0].memory: 16384 nodes of 1.0 PiB bring the cluster past 16 EiB of \
         memory, the most it may have in all"
    );
    let two = format!(
        "{}{}",
        node("a", 50_000, 65_536, "1GiB"),
        node("b", 50_000, 65_536, "1GiB")
    );
    assert_eq!(
        cluster_error(&two),
        "c.toml:9:9: node[1].cores: 50000 nodes of 65536 cores bring the cluster to 6553600000 \
         cores; at most 4294967295 in all"
    );
    // At the bounds, the totals hold what was declared.
    let c = hetsched_core::input::cluster::parse_cluster(
        "c.toml",
        &format!(
            "{}{}",
            node("a", 1, 65_536, "1PiB"),
            node("b", 65_535, 65_535, "16GiB")
        ),
    )
    .expect("at the bounds");
    let t = c.totals();
    assert_eq!(t.cores, 65_536 + 65_535 * 65_535);
    assert_eq!(t.memory_bytes, (1 << 50) + 65_535 * (16 << 30));
    let c = hetsched_core::input::cluster::parse_cluster(
        "c.toml",
        &format!(
            "{}{}",
            node("a", 16_383, 1, "1PiB"),
            node("b", 1, 1, &((1u64 << 50) - 1).to_string())
        ),
    )
    .expect("16 EiB less a byte in all");
    assert_eq!(c.totals().memory_bytes, u64::MAX);
}

/// A node's accelerator memory is bounded as the node's is, and a node's disk and network
/// bandwidths at 10 TB/s, the bounds on an agent's registration: the cluster file took a device
/// of 15 EiB and a disk of 1e300 bytes/s, on which every read took no time.
#[test]
fn a_nodes_device_memory_and_bandwidths_are_bounded_as_a_registration_is() {
    assert_eq!(
        cluster_error(&cluster(
            "[[node.accelerator]]\nkind = \"k\"\n\nmemory = \"2PiB\""
        )),
        "c.toml:7:10: node[0].accelerator[0].memory: 2.0 PiB (2251799813685248 bytes); a device \
         has at most 1 PiB (1125899906842624 bytes)"
    );
    for (field, value, shown) in [
        ("disk_read", "1e300", "1e300"),
        ("network", "\"20TB/s\"", "2e13"),
        ("disk_read", "10000000000001", "1.0000000000001e13"),
    ] {
        let e = cluster_error(&cluster(&format!("{field} = {value}")));
        let col = field.len() + 4;
        assert_eq!(
            e,
            format!(
                "c.toml:4:{col}: node[0].{field}: invalid bandwidth {shown}: must be at most 10 \
                 TB/s (1e13 bytes/s)"
            ),
            "{field} = {value}"
        );
    }
    let c = hetsched_core::input::cluster::parse_cluster(
        "c.toml",
        &cluster(
            "disk_read = \"10TB/s\"\nnetwork = 1e13\n[[node.accelerator]]\nkind = \"k\"\n\
             memory = \"1PiB\"",
        ),
    )
    .expect("at the bounds");
    let n = &c.nodes[0];
    assert_eq!((n.disk_read_bw, n.net_bw), (1e13, 1e13));
    assert_eq!(n.accelerators[0].memory_bytes, 1 << 50);
}

/// Agents count a divisible load's `time_limit` in whole milliseconds, 0 meaning none (the
/// server sends `limit / 1_000_000`): `"500us"` or `"0s"` was accepted and every chunk then ran
/// without a limit, as applications' and workflow tasks' were refused already. And a
/// `memory_per_unit` of 0 was refused at the load's `name`, not its own line.
#[test]
fn a_divisible_loads_time_limit_under_a_millisecond_is_refused_at_its_line() {
    let job = |extra: &str| {
        format!(
            "[[divisible]]\nname = \"rows\"\nunits = 10\ncommand = \"mm {{start}} {{end}}\"\n{extra}\n"
        )
    };
    for limit in ["\"500us\"", "\"0s\"", "0", "0.0001"] {
        assert_eq!(
            workload_error(&job(&format!("retries = 1\ntime_limit = {limit}"))),
            "w.toml:6:14: divisible[0].time_limit: must be at least 1ms (leave it out for no limit)",
            "{limit}"
        );
    }
    let w = hetsched_core::input::workload::parse_workload("w.toml", &job("time_limit = \"1ms\""))
        .expect("a millisecond is a limit");
    assert_eq!(w.divisible[0].time_limit.map(|d| d.0), Some(1_000_000));
    assert_eq!(
        workload_error(&job("algo = \"umr\"\n\nmemory_per_unit = 0")),
        "w.toml:7:19: divisible[0].memory_per_unit: must be at least 1 byte (leave it out when a \
         unit needs no memory worth counting)"
    );
}

/// A workflow task's `requires` is named as every other kind's (a batch application's, a
/// divisible load's, a topology's): at most 64 attributes of at most 64 bytes, without blanks or
/// control characters. A workflow took any string, of any length and in any number, so the
/// runtime stored requirements no node can have (`"has space"`, a megabyte-long name) until a
/// node came, and a simulator's or the server's message quoted an ANSI escape as written.
#[test]
fn a_workflow_tasks_requirements_are_named_as_node_attributes_are() {
    let wf = |requires: &str| {
        format!("[[task]]\nname = \"A\"\ninstances = 1\ncost = \"1s\"\nrequires = {requires}\n")
    };
    for (requires, says) in [
        (
            "[\"gpu\", \"has space\"]",
            "wf.toml:5:20: task[0].requires[1]: attribute `has space` has whitespace or a \
             control character",
        ),
        (
            "[\"a\\u001b[2J\"]",
            "wf.toml:5:13: task[0].requires[0]: attribute `a\\u{1b}[2J` has whitespace or a \
             control character",
        ),
        (
            "[\"!\\u001b[2J\"]",
            "wf.toml:5:13: task[0].requires[0]: `!\\u{1b}[2J`: a workflow task requires node \
             attributes only",
        ),
    ] {
        let e = workflow_error(&wf(requires));
        assert!(e.starts_with(says), "{requires}: {e}");
        assert!(!e.contains('\u{1b}'), "{e}");
    }
    let long = format!("[\"{}\"]", "x".repeat(100_000));
    assert!(workflow_error(&wf(&long)).starts_with(
        "wf.toml:5:13: task[0].requires[0]: attribute `xxxxxxxxxxxxxxxx…` is longer than 64 bytes"
    ));
    let many = format!(
        "[{}]",
        (0..65)
            .map(|k| format!("\"a{k}\""))
            .collect::<Vec<_>>()
            .join(", ")
    );
    assert_eq!(
        workflow_error(&wf(&many)),
        "wf.toml:5:13: task[0].requires: at most 64 requirements"
    );
    // A repeat is accepted, as elsewhere.
    assert!(
        hetsched_core::input::workflow::parse_workflow("wf.toml", &wf("[\"gpu\", \"gpu\"]"))
            .is_ok()
    );
}

/// The latency matrix keeps every pair a file sets, and a group of `n` nodes sets `n(n−1)/2`:
/// a group of a 100,000-node cluster's nodes (both within the bounds) set five billion pairs,
/// hundreds of GB, before anything was said. A group of 3,000 sets 4.5 million, past the bound.
#[test]
fn a_latency_file_sets_a_bounded_number_of_pairs() {
    use hetsched_core::input::latency::{MAX_LATENCY_PAIRS, parse_latency};
    let c = hetsched_core::input::cluster::parse_cluster("c.toml", &cluster("count = 3000"))
        .expect("3000 nodes");
    let names = (1..=3000)
        .map(|k| format!("\"n-{k}\""))
        .collect::<Vec<_>>()
        .join(", ");
    let e = match parse_latency(
        "l.toml",
        &format!("default = \"1ms\"\n[[group]]\nnodes = [{names}]\nlatency = \"50us\"\n"),
        &c,
    ) {
        Ok(_) => panic!("a group of 3000 nodes was accepted"),
        Err(e) => e.to_string(),
    };
    assert_eq!(
        e,
        format!(
            "l.toml:3:9: group[0].nodes: a group of 3000 nodes sets 4498500 pairs, which brings \
             the file to 4498500; at most {MAX_LATENCY_PAIRS} pairs in all (give the latency most \
             pairs share as `default`)"
        )
    );
}

#[test]
fn a_tasks_split_is_at_most_one_tib_at_its_line() {
    let app = |split: &str| {
        format!(
            "[[application]]\nname = \"a\"\ntasks = 2\nsplit = {split}\n[application.cpu]\n\
             compute = \"1s\"\nread = \"1s\"\n"
        )
    };
    // 15 EiB was accepted, and two such tasks on one node overflowed the simulator's sum of
    // outstanding reads.
    for split in ["\"15EiB\"", "\"1.5TiB\"", "1099511627777"] {
        let e = workload_error(&app(split));
        assert!(
            e.starts_with("w.toml:4:9: application[0].split: is ")
                && e.contains("a task's split is at most 1099511627776 (1 TiB)"),
            "{split}: {e}"
        );
    }
    let w = hetsched_core::input::workload::parse_workload("w.toml", &app("\"1TiB\""))
        .expect("1 TiB is a split");
    assert_eq!(w.applications[0].split.as_u64(), 1 << 40);
}

#[test]
fn a_long_attributes_quoted_start_is_escaped() {
    // Its first 16 characters were quoted raw: an escape sequence reached the terminal.
    let e = cluster_error(&cluster(&format!(
        "attributes = [\"\\u001b[2J{}\"]",
        "x".repeat(70)
    )));
    assert!(
        e.contains("attribute `\\u{1b}[2Jxxxxxxxxxxxx…` is longer than 64 bytes")
            && !e.contains('\u{1b}'),
        "{e}"
    );
}

/// Names a parser took as written and a table or message later printed raw: a star platform's
/// worker names (`hetsched sim divisible`'s tables), a binding event file's node and rack names
/// (`hetsched binding replay`'s trace) and a simulator workflow's task names (quoted in the
/// "declared twice", cycle and missing-cost messages) took control characters, and the first
/// two an empty name. Each is refused at its line and field by the rule its kind already has
/// elsewhere: a node's ([`node_name_problem`]), a rack's, an application's (the runtime's rule
/// for a workflow's task names).
///
/// [`node_name_problem`]: hetsched_core::input::cluster::node_name_problem
#[test]
fn worker_binding_and_workflow_task_names_hold_no_control_character() {
    use hetsched_core::input::star_platform::parse_star_platform;
    let platform = |name: &str| {
        format!(
            "[[worker]]\nname = \"{name}\"\nspeed = 1.0\ncompute_latency = 0.0\nbandwidth = 1.0\n\
             network_latency = 0.0\n"
        )
    };
    let platform_error = |name: &str| {
        parse_star_platform("p.toml", &platform(name))
            .expect_err(name)
            .to_string()
    };
    assert_eq!(
        platform_error("w\\u001b[31m"),
        "p.toml:2:8: worker[0].name: node name `w\\u{1b}[31m` may hold only letters, digits, `.`, \
         `-` and `_`"
    );
    assert_eq!(
        platform_error(""),
        "p.toml:2:8: worker[0].name: a node name must not be empty"
    );
    assert!(parse_star_platform("p.toml", &platform("p4-3.0a")).is_ok());

    assert_eq!(
        binding_error("add-anode a r\nadd-nnode n\u{1b}[2J r\n"),
        "b.txt:2:11: NAME: node name `n\\u{1b}[2J` may hold only letters, digits, `.`, `-` and `_`"
    );
    assert_eq!(
        binding_error("remove \u{7}\n"),
        "b.txt:1:8: NAME: node name `\\u{7}` may hold only letters, digits, `.`, `-` and `_`"
    );
    assert_eq!(
        binding_error("add-anode a r\u{1b}[31m 2\n"),
        "b.txt:1:13: RACK: rack name `r\\u{1b}[31m` holds a control character"
    );

    let task =
        |name: &str, extra: &str| format!("[[task]]\nname = \"{name}\"\ninstances = 1\n{extra}\n");
    assert_eq!(
        workflow_error(&task("t\\u001b[2J", "cost = \"1s\"")),
        "wf.toml:2:8: task[0].name: holds a control character"
    );
    // Refused before the messages that quote it: declared twice, or without a cost.
    assert_eq!(
        workflow_error(&format!(
            "{}{}",
            task("t\\u001b[2J", "cost = \"1s\""),
            task("t\\u001b[2J", "cost = \"1s\"")
        )),
        "wf.toml:2:8: task[0].name: holds a control character"
    );
    assert_eq!(
        workflow_error(&task("t\\u0007", "")),
        "wf.toml:2:8: task[0].name: holds a control character"
    );
}

/// An application variant's `time_limit` under a millisecond and its `kill_grace` over an hour
/// were refused at the variant's `[application.cpu]` (or gpu) header, lines away from the value
/// at fault: they are refused at the value, as a divisible load's and a workflow task's are.
#[test]
fn a_variants_time_limit_and_kill_grace_are_refused_at_their_own_line() {
    let job = |variant: &str, fields: &str| {
        format!(
            "[[application]]\nname = \"a\"\ntasks = 1\n[application.{variant}]\ncommand = \"true\"\n\
             {fields}\n"
        )
    };
    let submit_error = |text: &str| {
        let w = hetsched_core::input::workload::parse_workload("w.toml", text).expect("parses");
        hetsched_core::input::limits::check(&w)
            .expect_err("refused at submission")
            .to_string()
    };
    for variant in ["cpu", "gpu"] {
        assert_eq!(
            submit_error(&job(variant, "time_limit = \"500us\"")),
            format!(
                "w.toml:6:14: application[0].{variant}.time_limit: must be at least 1ms (leave it \
                 out for no limit)"
            )
        );
        assert_eq!(
            submit_error(&job(variant, "memory = \"1GiB\"\n\nkill_grace = \"2h\"")),
            format!("w.toml:8:14: application[0].{variant}.kill_grace: must be at most 1h")
        );
    }
    // The second application's variant, its fields in another order.
    let two = format!(
        "{}{}",
        job("cpu", "time_limit = \"1s\""),
        job("gpu", "kill_grace = \"1s\"\ntime_limit = \"0s\"")
            .replace("name = \"a\"", "name = \"b\"")
    );
    assert_eq!(
        submit_error(&two),
        "w.toml:13:14: application[1].gpu.time_limit: must be at least 1ms (leave it out for no \
         limit)"
    );
}

/// An application variant's `command`, `env` and `kind` were refused at the variant's
/// `[application.cpu]` (or gpu) header however far below it the field was written: each is
/// refused at its own value, and a malformed environment variable at that variable.
#[test]
fn a_variants_command_env_and_kind_are_refused_at_their_own_line() {
    let job = |variant: &str, fields: &str| {
        format!("[[application]]\nname = \"a\"\ntasks = 1\n[application.{variant}]\n{fields}\n")
    };
    let submit_error = |text: &str| {
        let w = hetsched_core::input::workload::parse_workload("w.toml", text).expect("parses");
        hetsched_core::input::limits::check(&w)
            .expect_err("refused at submission")
            .to_string()
    };
    let long = "x".repeat(70_000);
    for variant in ["cpu", "gpu"] {
        assert_eq!(
            submit_error(&job(
                variant,
                &format!("memory = \"1GiB\"\n\ncommand = \"{long}\"")
            )),
            format!(
                "w.toml:7:11: application[0].{variant}.command: the command is 70000 bytes; \
                 at most 65536 (64 KiB): put long inputs in a file the command reads"
            )
        );
        assert_eq!(
            submit_error(&job(
                variant,
                "memory = \"1GiB\"\ncommand = [\"a\", \"b\\u0000\"]"
            )),
            format!("w.toml:6:11: application[0].{variant}.command: holds a NUL character")
        );
        // An inline environment too large as a whole: at the table.
        assert_eq!(
            submit_error(&job(
                variant,
                &format!("command = \"true\"\nenv = {{ BIG = \"{long}\" }}")
            )),
            format!(
                "w.toml:6:7: application[0].{variant}.env: the environment is 70003 bytes; at \
                 most 65536 (64 KiB)"
            )
        );
        // A malformed variable of an `[application.cpu.env]` table: at that variable.
        assert_eq!(
            submit_error(&job(
                variant,
                &format!(
                    "command = \"true\"\n[application.{variant}.env]\nOK = \"1\"\n\"A=B\" = \"1\""
                )
            )),
            format!(
                "w.toml:8:9: application[0].{variant}.env: variable `A=B`: a name must be \
                 non-empty without `=` or NUL, a value without NUL"
            )
        );
    }
    assert_eq!(
        submit_error(&job(
            "gpu",
            "command = \"true\"\ngpus = 1\n\nkind = \"a 100\""
        )),
        "w.toml:8:8: application[0].gpu.kind: attribute `a 100` has whitespace or a control character"
    );
}

/// A workflow task's `env` was refused at its `command` (the environment is kept without its
/// place) whatever line it was written on: the environment as a whole is refused at its own
/// value, and a malformed variable at that variable, in the task it belongs to.
#[test]
fn a_workflow_tasks_env_is_refused_at_its_own_line() {
    let submit_error = |text: &str| {
        let w = hetsched_core::input::workflow_runtime::parse_runtime_workflow("wf.toml", text)
            .expect("parses");
        hetsched_core::input::limits::check_workflow(&w.parsed)
            .expect_err("refused at submission")
            .to_string()
    };
    let first = "[[task]]\nname = \"a\"\ninstances = 1\ncommand = \"true\"\nenv = { OK = \"1\" }\n";
    let second = |fields: &str| {
        format!("{first}[[task]]\nname = \"b\"\ninstances = 1\ncommand = \"true\"\n{fields}\n")
    };
    assert_eq!(
        submit_error(&second("retries = 1\nenv = { \"A=B\" = \"1\" }")),
        "wf.toml:11:17: task[1].env: variable `A=B`: a name must be non-empty without `=` or NUL, \
         a value without NUL"
    );
    assert_eq!(
        submit_error(&second("[task.env]\nOK = \"1\"\n\n\"A=B\" = \"1\"")),
        "wf.toml:13:9: task[1].env: variable `A=B`: a name must be non-empty without `=` or NUL, \
         a value without NUL"
    );
    let long = "x".repeat(70_000);
    assert_eq!(
        submit_error(&second(&format!(
            "retries = 1\nenv = {{ BIG = \"{long}\" }}"
        ))),
        "wf.toml:11:7: task[1].env: the environment is 70003 bytes; at most 65536 (64 KiB)"
    );
}

/// Measured traffic's errors named column 1 of their line whichever column was at fault; they
/// name the column of the field at fault, past blanks around it.
#[test]
fn measured_traffic_errors_name_the_column_at_fault() {
    use hetsched_core::input::topology::{parse_topology, parse_traffic};
    let t = parse_topology("t.toml", WORDCOUNT).expect("parses");
    let traffic = |csv: &str| {
        parse_traffic("m.csv", csv, &t)
            .expect_err("refused")
            .to_string()
    };
    assert!(
        traffic("sentences#9,split#1,1\n")
            .starts_with("m.csv:1:1: from: unknown executor `sentences#9`"),
    );
    assert!(
        traffic("sentences#0,split#1,1\n  sentences#0 ,  split#9,1\n")
            .starts_with("m.csv:2:18: to: unknown executor `split#9`"),
    );
    assert_eq!(
        traffic("sentences#0, split#1 , many\n"),
        "m.csv:1:24: tuples_per_s: `many` is not a non-negative number"
    );
    assert!(
        traffic("sentences#0,split#1,-1\n")
            .starts_with("m.csv:1:21: tuples_per_s: must be a number of tuples/s"),
    );
    assert!(
        traffic("split#0,sentences#1,10\n")
            .starts_with("m.csv:1:9: to: no stream of topology `wordcount`"),
    );
    assert!(
        traffic("sentences#0,split#1,1,2\n")
            .starts_with("m.csv:1:23: expected 3 columns `from,to,tuples_per_s`, found 4"),
    );
    assert!(
        traffic("sentences#0,split#1\n")
            .starts_with("m.csv:1:20: expected 3 columns `from,to,tuples_per_s`, found 2"),
    );
}

/// A key written twice in one table: TOML's error names no key, so the one written again is
/// read from where it points.
#[test]
fn a_duplicate_key_is_named() {
    let e = workload_error("[[application]]\nname = \"a\"\ntasks = 1\ntasks = 2\n");
    assert!(
        e.starts_with("w.toml:4:1: duplicate key `tasks`: a key is written once"),
        "{e}"
    );
}
