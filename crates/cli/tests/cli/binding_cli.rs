//! `hetsched binding replay` and `hetsched sim accel-paper` as a user meets them: the real binary.

#![allow(clippy::unwrap_used)] // a failing test should panic with the error

use crate::support::binary::{assert_ok, hetsched, stderr, stdout};
use std::path::PathBuf;
use std::process::Output;

/// `hetsched binding replay FILE EXTRA…`.
fn replay(file: &str, extra: &[&str]) -> Output {
    hetsched(&[&["binding", "replay", file][..], extra].concat())
}

/// Writes `text` to a fresh file in the target directory and returns its path.
fn events_file(name: &str, text: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("binding-cli");
    std::fs::create_dir_all(&dir).expect("a scratch directory");
    let path = dir.join(name);
    std::fs::write(&path, text).expect("the events file is written");
    path
}

#[test]
fn replaying_figure_3_prints_the_spec_map() {
    let out = replay("examples/binding-figure3.txt", &[]);
    assert_ok(&out);
    assert_eq!(
        stdout(&out),
        "m1 -> unbound\nn1 -> a1\nn2 -> a2\nn3 -> a1\nn4 -> a2\nn5 -> a3\nn6 -> a3\n"
    );
}

#[test]
fn trace_prints_each_event_and_the_map_after_it() {
    let out = replay("examples/binding-figure3.txt", &["--trace"]);
    assert_ok(&out);
    let text = stdout(&out);
    assert!(
        text.contains(
            "line 11: add-anode a3 rack1 1\n  event: bound n6 -> a3\n  event: bound n5 -> a3\n"
        ),
        "{text}"
    );
    assert!(
        text.contains("line 13: add-nnode m1 rack2\n  map: m1 -> unbound\n"),
        "{text}"
    );
    assert!(text.ends_with(
        "final map:\nm1 -> unbound\nn1 -> a1\nn2 -> a2\nn3 -> a1\nn4 -> a2\nn5 -> a3\nn6 -> a3\n"
    ));
}

#[test]
fn the_modes_differ_where_the_spec_says() {
    // Cluster4-3: plain gives a1 the NNode; container spreads its containers.
    let f = events_file(
        "4-3.txt",
        "add-anode a1 r\nadd-anode a2 r\nadd-anode a3 r\nadd-nnode n r\n",
    );
    let f = f.to_str().unwrap();
    let plain = replay(f, &[]);
    assert_eq!(stdout(&plain), "n -> a1\n");
    let container = replay(f, &["--mode", "container", "--slots", "3"]);
    assert_eq!(stdout(&container), "n/0 -> a1\nn/1 -> a2\nn/2 -> a3\n");
    // Weighted: a 2× ANode takes three of four NNodes.
    let w = events_file(
        "weighted.txt",
        "add-anode fast r 2\nadd-anode slow r 1\nadd-nnode n1 r\nadd-nnode n2 r\nadd-nnode n3 r\nadd-nnode n4 r\n",
    );
    let out = replay(w.to_str().unwrap(), &["--mode", "weighted"]);
    assert_eq!(
        stdout(&out),
        "n1 -> fast\nn2 -> fast\nn3 -> fast\nn4 -> slow\n"
    );
}

#[test]
fn a_bad_line_is_an_error_naming_it_and_nothing_is_printed() {
    let cases = [
        (
            "verb.txt",
            "add-anode a1 r\njump n1 r\n",
            ":2:1: unknown event `jump`",
        ),
        (
            "dup.txt",
            "add-anode a1 r\nadd-nnode n1 r\n\nadd-nnode n1 r\n",
            ":4: add-nnode n1 r: node `n1` is already in the cluster",
        ),
        (
            "unknown.txt",
            "# nothing yet\nremove ghost\n",
            ":2: remove ghost: no node is called `ghost`",
        ),
        (
            "missing.txt",
            "add-anode a1 r\nadd-nnode n1\n",
            ":2:13: missing RACK",
        ),
    ];
    for (name, text, expected) in cases {
        let f = events_file(name, text);
        for trace in [false, true] {
            let mut args = vec!["binding", "replay", f.to_str().unwrap()];
            if trace {
                args.push("--trace");
            }
            let out = hetsched(&args);
            assert_eq!(out.status.code(), Some(1), "{name}");
            assert!(stderr(&out).contains(expected), "{name}: {}", stderr(&out));
            assert_eq!(stdout(&out), "", "{name}: printed as if it were fine");
        }
    }
    let out = replay("no/such/file.txt", &[]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("cannot read no/such/file.txt"));
}

#[test]
fn accel_paper_prints_json_with_the_documented_keys() {
    let out = hetsched(&[
        "sim",
        "accel-paper",
        "--kernels",
        "LU",
        "--intensities",
        "8",
        "--data-mb",
        "10",
        "--kmeans-images",
        "5000",
        "--output",
        "json",
    ]);
    assert_ok(&out);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON on stdout");
    let row = &v["rows"][0];
    for key in [
        "kernel",
        "cluster",
        "binding",
        "intensity",
        "data_mb",
        "makespan_s",
        "speedup",
    ] {
        assert!(row.get(key).is_some(), "rows[0] lacks {key}");
    }
    let k = &v["kmeans"][0];
    for key in ["cluster", "binding", "makespan_s"] {
        assert!(k.get(key).is_some(), "kmeans[0] lacks {key}");
    }
    let bad = hetsched(&["sim", "accel-paper", "--intensities", "3"]);
    assert_eq!(bad.status.code(), Some(1));
    assert!(stderr(&bad).contains("intensity 3 is not one of the paper's"));
}

#[test]
fn slots_past_1024_per_node_or_a_million_in_all_are_refused_before_binding() {
    // --slots 4000000000 allocated 96 GB for the first NNode's containers.
    let f = events_file("slots.txt", "add-anode a r\nadd-nnode n r\n");
    let f = f.to_str().unwrap();
    for slots in ["4000000000", "1025", "0"] {
        let out = replay(f, &["--mode", "container", "--slots", slots]);
        assert_eq!(out.status.code(), Some(2), "{slots}");
        assert!(
            stderr(&out).contains(&format!(
                "'--slots <SLOTS>': {slots} containers per node: give 1 to 1024"
            )),
            "{}",
            stderr(&out)
        );
    }
    let out = replay(f, &["--mode", "container", "--slots", "1024"]);
    assert_ok(&out);
    assert_eq!(stdout(&out).lines().count(), 1024);
    // 1,000 NNodes of 1,024 containers each: over a million to bind.
    let text: String = std::iter::once("add-anode a r\n".to_string())
        .chain((0..1000).map(|i| format!("add-nnode n{i} r\n")))
        .collect();
    let many = events_file("many.txt", &text);
    let out = replay(
        many.to_str().unwrap(),
        &["--mode", "container", "--slots", "1024"],
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains(
            "many.txt: 1000 NNodes × --slots 1024 is 1024000 containers to bind; at most 1000000"
        ),
        "{}",
        stderr(&out)
    );
    assert_eq!(stdout(&out), "");
}

#[test]
fn slots_without_container_mode_are_noted_as_ignored() {
    // Plain and weighted binding bind whole nodes: `--slots 8` changed nothing, silently.
    for mode in ["plain", "weighted"] {
        let out = replay(
            "examples/binding-figure3.txt",
            &["--mode", mode, "--slots", "8"],
        );
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{stderr}");
        assert!(
            stderr.contains(&format!(
                "note: --slots 8 is ignored by --mode {mode} (only --mode container binds containers)"
            )),
            "{stderr}"
        );
    }
    let out = replay(
        "examples/binding-figure3.txt",
        &["--mode", "container", "--slots", "8"],
    );
    assert!(out.status.success() && out.stderr.is_empty());
}

/// An ANode's WEIGHT is bounded to what a node's accelerators can sum to, the refusal naming the
/// file, the line, the value (compactly) and the range: `1e300` was taken, and a weight below
/// 0.001 was taken as 0.001.
#[test]
fn a_weight_past_its_range_is_refused_naming_line_value_and_range() {
    for (weight, shown) in [("1e300", "1e300"), ("0.0001", "1e-4"), ("300000", "300000")] {
        let f = events_file(
            "weight.txt",
            &format!("add-nnode n r\nadd-anode a r {weight}\n"),
        );
        let out = replay(f.to_str().unwrap(), &["--mode", "weighted"]);
        assert_eq!(out.status.code(), Some(1), "{weight}");
        assert!(
            stderr(&out).contains(&format!(
                "weight.txt:2:15: invalid WEIGHT `{shown}`: expected a number from 0.001 to \
                 256000 (an ANode's accelerators' summed speeds: at most 256, each 0.001 to 1000)"
            )),
            "{weight}: {}",
            stderr(&out)
        );
        assert_eq!(stdout(&out), "", "{weight}");
    }
}
