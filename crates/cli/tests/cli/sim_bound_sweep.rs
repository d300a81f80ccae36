//! `hetsched sim run/compare/hdas-paper` show the makespan lower bound, and `hetsched sim sweep`
//! compares every batch policy on random cases: the real binary, as a user runs it.

use crate::support::binary::{assert_ok, hetsched, json_of as json, refused_at_once, sim_run};

const CLUSTER: &str = "examples/cluster-hdas-paper.toml";
const WORKLOAD: &str = "examples/workload-knn-nb-bp.toml";

#[test]
fn run_and_compare_report_the_bound_below_every_makespan() {
    let run = json(&sim_run(CLUSTER, WORKLOAD, &["--output", "json"]));
    let bound = run["lower_bound_s"].as_f64().expect("lower_bound_s");
    let makespan = run["makespan_s"].as_f64().expect("makespan_s");
    assert!(bound > 0.0 && bound <= makespan, "{bound} vs {makespan}");
    assert!((run["makespan_over_bound"].as_f64().unwrap_or(0.0) - makespan / bound).abs() < 1e-9);

    let table = sim_run(CLUSTER, WORKLOAD, &[]);
    assert!(String::from_utf8_lossy(&table.stdout).contains("makespan / bound"));

    let compare = json(&hetsched(&[
        "sim",
        "compare",
        "--cluster",
        CLUSTER,
        "--workload",
        WORKLOAD,
        "--policies",
        "fifo,hdas-hetero",
        "--output",
        "json",
    ]));
    for row in compare.as_array().expect("one row per policy") {
        assert_eq!(row["lower_bound_s"].as_f64(), Some(bound));
        assert!(row["makespan_over_bound"].as_f64().unwrap_or(0.0) >= 1.0);
    }
}

#[test]
fn hdas_paper_reports_a_lower_bound_per_workload() {
    let report = json(&hetsched(&[
        "sim",
        "hdas-paper",
        "--scale",
        "0.02",
        "--workloads",
        "C,I",
        "--output",
        "json",
    ]));
    for w in report["workloads"].as_array().expect("workloads") {
        let bound = w["lower_bound_s"].as_f64().expect("lower_bound_s");
        assert!(bound > 0.0);
        assert!(w["makespan_s"]["fifo"].as_f64().unwrap_or(0.0) >= bound);
        assert!(w["vs_bound"]["hdas"].as_f64().unwrap_or(0.0) >= 1.0);
    }
}

#[test]
fn a_tiny_sweep_prints_every_policy_and_is_reproducible() {
    let args = [
        "sim", "sweep", "--cases", "3", "--scale", "0.05", "--seed", "7",
    ];
    let out = hetsched(&args);
    assert_ok(&out);
    let table = String::from_utf8_lossy(&out.stdout).to_string();
    for policy in ["fifo", "drf", "hadoop-model", "hdas", "hdas-hetero"] {
        assert!(
            table.contains(&format!("| {policy} ")),
            "{policy} missing:\n{table}"
        );
    }
    assert!(table.contains("mean makespan / bound"));
    assert_eq!(hetsched(&args).stdout, out.stdout, "same seed, same output");

    let mut with_json = args.to_vec();
    with_json.extend(["--output", "json"]);
    let report = json(&hetsched(&with_json));
    let cases = report["cases"].as_array().expect("cases");
    assert_eq!(cases.len(), 3);
    for c in cases {
        let bound = c["lower_bound_s"].as_f64().unwrap_or(0.0);
        for m in c["makespan_s"].as_array().expect("makespans") {
            assert!(m.as_f64().unwrap_or(0.0) + 1e-6 >= bound);
        }
    }
}

#[test]
fn a_sweep_of_zero_cases_is_refused() {
    let out = hetsched(&["sim", "sweep", "--cases", "0"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cases"));
}

/// `--scale` is bounded above as `--cases` is, the refusal naming the flag: before, a large
/// scale was taken, and one case of millions of tasks ran for hours.
#[test]
fn a_sweep_past_its_scale_bound_is_refused_naming_the_flag() {
    refused_at_once(
        &["sim", "sweep", "--cases", "1", "--scale", "100"],
        "--scale: must be at most 10",
    );
}
