//! The simulators against SimGrid. Divisible loads (docs/divisible.md, "Checked against SimGrid"):
//! `scripts/simgrid-divisible.sh` with this build's `hetsched` plans and simulates each case,
//! replays the schedule in SimGrid's S4U (with a prediction error: the durations the run drew),
//! and every case must agree — the makespan to 1e-8
//! relative, every send's start, arrival and compute end to 1 µs. Task graphs
//! (docs/results/graphs.md, "Checked against SimGrid"): `scripts/simgrid-graph.sh` replays static,
//! centralised and pcddb runs — messages, readiness, core choice and queues (or, under
//! `--execution time-share`, SimGrid's own sharing of a node's cores), given each instance's
//! node (and for pcddb when its node accepted it) — and every instance's ready, start and end must
//! agree to 1 µs. The network of the offload model (docs/results/accelerators.md, "The network beside
//! SimGrid"): `scripts/simgrid-accel.sh` replays every transfer, each must end within 1 µs. Batch
//! runs: below. Skips, saying so, where SimGrid's
//! headers or a C++ compiler are missing (`.ci/run` installs Debian's `libsimgrid-dev`).

use crate::support::binary::{assert_ok, hetsched};
use hetsched_core::testkit::ScratchDir;
use std::path::Path;
use std::process::Command;

/// Runs `script` with this build's binary; its table's rows (cells trimmed), or `None` (skipped)
/// without SimGrid.
fn table_of(script: &str, header: &str) -> Option<(String, Vec<Vec<String>>)> {
    if !Path::new("/usr/include/simgrid/s4u.hpp").exists()
        || Command::new("g++").arg("--version").output().is_err()
    {
        eprintln!(
            "SKIPPED: no SimGrid headers or no g++ (install Debian's `libsimgrid-dev`, as .ci/run does)"
        );
        return None;
    }
    let repo = crate::support::binary::repo();
    let out_dir = ScratchDir::new("simgrid", script.trim_end_matches(".sh"));
    let out = Command::new("sh")
        .arg(repo.join("scripts").join(script))
        .env("HETSCHED", env!("CARGO_BIN_EXE_hetsched"))
        .env("OUT", &out_dir)
        .env_remove("BIG")
        .current_dir(&repo)
        .output()
        .expect("the script runs");
    let table = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{table}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows = table
        .lines()
        .filter(|l| l.starts_with("| ") && !l.starts_with(header))
        .map(|l| {
            l.trim_matches('|')
                .split('|')
                .map(|c| c.trim().to_string())
                .collect()
        })
        .collect();
    Some((table, rows))
}

fn nanoseconds(cell: &str) -> f64 {
    cell.trim_end_matches(" ns").parse().expect("nanoseconds")
}

#[test]
fn every_divisible_schedule_replays_in_simgrid_to_the_same_times() {
    let Some((table, rows)) = table_of("simgrid-divisible.sh", "| platform |") else {
        return;
    };
    // Rows: | platform | algorithm | load | error | sends | ours | SimGrid | relative | largest (ns) |
    assert_eq!(rows.len(), 13, "every case ran:\n{table}");
    for r in &rows {
        let relative: f64 = r[7].parse().expect("a relative difference");
        let worst_ns: f64 = r[8].trim_end_matches(" ns").parse().expect("nanoseconds");
        assert!(
            relative <= 1e-8 && worst_ns <= 1_000.0,
            "{} {} {} (error {}): hetsched and SimGrid disagree\n{table}",
            r[0],
            r[1],
            r[2],
            r[3]
        );
    }
}

#[test]
fn every_batch_task_ends_within_a_microsecond_of_the_exact_replay() {
    // The replay's input is written from the cluster and workload files by Python's tomllib (3.11+).
    let tomllib = Command::new("python3")
        .args(["-c", "import tomllib"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !tomllib {
        eprintln!("SKIPPED: no python3 with tomllib (Python 3.11 or later)");
        return;
    }
    let Some((table, rows)) = table_of("simgrid-batch.sh", "| cluster |") else {
        return;
    };
    // Rows: | cluster | workload | policy | heartbeat | tasks | ours | SimGrid | relative |
    //         largest difference (ns) | hetsched from exact (ns) | SimGrid from exact (ns) |
    assert_eq!(rows.len(), 7, "every case ran:\n{table}");
    for r in &rows {
        assert!(
            nanoseconds(&r[9]) <= 1_000.0 && nanoseconds(&r[10]) <= 100_000.0,
            "{} {} {}: a task's end is off the exact replay\n{table}",
            r[0],
            r[1],
            r[2]
        );
    }
}

#[test]
fn every_graph_run_replays_in_simgrid_to_the_same_times() {
    let Some((table, rows)) = table_of("simgrid-graph.sh", "| cluster |") else {
        return;
    };
    // Rows: | cluster | workflow | balancer | execution | launch | seed | instances | ours |
    //         SimGrid | relative | largest difference (ns) |
    assert_eq!(
        rows.len(),
        7 * 3 * 2,
        "every case ran under every balancer and both executions:\n{table}"
    );
    for balancer in ["static", "centralised", "pcddb"] {
        for execution in ["queue", "time-share"] {
            assert_eq!(
                rows.iter()
                    .filter(|r| r[2] == balancer && r[3] == execution)
                    .count(),
                7,
                "{balancer}, {execution}:\n{table}"
            );
        }
    }
    for r in &rows {
        let relative: f64 = r[9].parse().expect("a relative difference");
        // Under time-sharing SimGrid's CPU model computes the shares itself, in floating point:
        // it may differ from hetsched's nanosecond clock by a few nanoseconds per share change.
        assert!(
            relative <= 1e-8 && nanoseconds(&r[10]) <= 1_000.0,
            "{} {} {} {} (launch {}, seed {}): hetsched and SimGrid disagree\n{table}",
            r[0],
            r[1],
            r[2],
            r[3],
            r[4],
            r[5]
        );
    }
}

#[test]
fn every_offload_transfer_ends_in_simgrid_when_it_ends_in_hetsched() {
    let Some((table, rows)) = table_of("simgrid-accel.sh", "| cluster |") else {
        return;
    };
    // Rows: | cluster | workload | binding | transfers | ours | SimGrid | largest difference
    //         (ns) | transfers that shared a link | latency-weighted (ms) |: the last transfer's
    //         end is within the largest difference of any.
    assert_eq!(rows.len(), 9, "every case ran:\n{table}");
    for r in &rows {
        assert!(
            nanoseconds(&r[6]) <= 1_000.0,
            "{} {} {}: hetsched and SimGrid disagree\n{table}",
            r[0],
            r[1],
            r[2]
        );
    }
    // The cases share links: max-min sharing is what is checked, not only latency and bandwidth.
    let shared: u64 = rows.iter().map(|r| r[7].parse::<u64>().unwrap_or(0)).sum();
    assert!(shared >= 100, "too few transfers shared a link:\n{table}");
}

/// `scripts/simgrid-accel.sh` prints the table of docs/results/accelerators.md ("The network
/// beside SimGrid"): the same header, and rows of as many cells (it printed a relative
/// difference the table has no column for). Runs without SimGrid: the row is what
/// `scripts/simgrid/network.py compare` makes of an exported run and a replay that agrees with
/// it, written here in network_replay.cpp's format.
#[test]
fn the_network_scripts_header_and_rows_are_the_documented_tables() {
    if Command::new("python3").arg("--version").output().is_err() {
        eprintln!("SKIPPED: no python3");
        return;
    }
    let repo = crate::support::binary::repo();
    let cells = |line: &str| line.trim().trim_matches('|').split('|').count();
    let script = std::fs::read_to_string(repo.join("scripts/simgrid-accel.sh")).expect("script");
    let header = script
        .lines()
        .find_map(|l| l.trim().strip_prefix("echo \"| cluster |"))
        .map(|rest| format!("| cluster |{}", rest.trim_end_matches('"')))
        .expect("the script's header");
    let doc = std::fs::read_to_string(repo.join("docs/results/accelerators.md")).expect("doc");
    let documented = doc
        .lines()
        .find(|l| l.starts_with("| cluster | workload | binding | transfers |"))
        .expect("the documented table");
    assert_eq!(header, documented);
    let dir = ScratchDir::new("simgrid", "accel-columns");
    let run = dir.join("run.json");
    assert_ok(&hetsched(&[
        "sim",
        "accel",
        "--cluster",
        "examples/cluster-offload.toml",
        "--workload",
        "examples/workload-offload.toml",
        "--export",
        run.to_str().expect("a UTF-8 path"),
    ]));
    let exported: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&run).expect("run")).expect("json");
    let ends: Vec<f64> = exported["transfers"]
        .as_array()
        .expect("transfers")
        .iter()
        .map(|t| t["end"].as_f64().expect("end"))
        .collect();
    let mut replay = format!("makespan {}\n", ends.iter().copied().fold(0.0, f64::max));
    for end in &ends {
        replay.push_str(&format!("transfer {end}\n"));
    }
    for name in ["equal.out", "rtt.out"] {
        std::fs::write(dir.join(name), &replay).expect("write");
    }
    let out = Command::new("python3")
        .arg(repo.join("scripts/simgrid/network.py"))
        .arg("compare")
        .args([&run, &dir.join("equal.out"), &dir.join("rtt.out")])
        .output()
        .expect("python3 runs");
    let row = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The script prefixes the case's three cells: cluster, workload, binding.
    assert_eq!(cells(&row) + 3, cells(&header), "{row}");
    assert_eq!(cells(documented), cells(&header));
}
