//! `--out DIR` means a directory in every command that writes files: it is created when missing,
//! the command writes its named files into it, and a path that is a file is refused before any
//! work starts. The real binary, as a user meets it.

use crate::support::binary::{assert_ok, command, repo, sim_run};
use hetsched_core::testkit::ScratchDir;
use std::path::Path;
use std::process::Output;

/// `hetsched ARGS` with a server address where none listens: a command that would call one
/// (`hetsched output`) fails there instead of reaching one.
fn hetsched(args: &[&str]) -> Output {
    command(args)
        .env("HETSCHED_SERVER", "http://127.0.0.1:9")
        .output()
        .expect("the hetsched binary runs")
}

fn scratch(name: &str) -> ScratchDir {
    ScratchDir::new("out-dir-cli", name)
}

fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

const CLUSTER: &str = "examples/cluster-hdas-paper.toml";
const WORKLOAD: &str = "examples/workload-knn-nb-bp.toml";

#[test]
fn sim_run_and_sim_sweep_write_their_named_file_into_a_new_directory() {
    let base = scratch("written");
    let run_dir = base.join("runs/knn");
    let out = sim_run(CLUSTER, WORKLOAD, &["--out", s(&run_dir)]);
    assert_ok(&out);
    let written = std::fs::read(run_dir.join("result.json")).expect("result.json");
    let result: serde_json::Value = serde_json::from_slice(&written).expect("json");
    assert!(result["makespan_s"].as_f64() > Some(0.0), "{result}");
    // A text file ends in a newline, as the paper commands' JSON files and `cat`ing it expect.
    assert!(
        written.ends_with(b"}\n"),
        "result.json ends without a newline"
    );
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("result.json"),
        "it says what it wrote"
    );
    // Again into the same (now existing) directory: fine.
    let again = sim_run(CLUSTER, WORKLOAD, &["--out", s(&run_dir)]);
    assert!(again.status.success());

    let sweep_dir = base.join("sweep");
    let out = hetsched(&[
        "sim",
        "sweep",
        "--cases",
        "2",
        "--scale",
        "0.05",
        "--out",
        s(&sweep_dir),
    ]);
    assert_ok(&out);
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(sweep_dir.join("report.json")).expect("report"))
            .expect("json");
    assert!(report.is_object(), "{report}");
}

#[test]
fn every_out_flag_refuses_a_file_before_starting_and_its_help_says_dir() {
    let base = scratch("refused");
    let file = base.join("taken.json");
    std::fs::write(&file, "not a directory").expect("file");
    let f = s(&file);
    let commands: Vec<Vec<&str>> = vec![
        vec![
            "sim",
            "run",
            "--cluster",
            CLUSTER,
            "--workload",
            WORKLOAD,
            "--out",
            f,
        ],
        vec!["sim", "sweep", "--cases", "2", "--out", f],
        vec!["sim", "hdas-paper", "--out", f],
        vec!["sim", "accel-paper", "--out", f],
        vec!["sim", "divisible-paper", "--out", f],
        vec!["sim", "stream-paper", "--out", f],
        vec!["sim", "pcddb-paper", "--out", f],
    ];
    for args in &commands {
        let out = hetsched(args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} accepted a file");
        assert!(
            err.contains("is a file, not a directory"),
            "{args:?}: {err}"
        );
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        // The help names a directory.
        let mut help = args[..2].to_vec();
        help.push("--help");
        let h = String::from_utf8_lossy(&hetsched(&help).stdout).into_owned();
        assert!(h.contains("--out <DIR>"), "{help:?}: {h}");
        assert!(h.contains("directory"), "{help:?}: {h}");
    }
    assert_eq!(
        std::fs::read_to_string(&file).expect("file"),
        "not a directory",
        "the file is left alone"
    );
    // `hetsched output JOB -o DIR` too (refused before it calls the server).
    let token = base.join("token");
    std::fs::write(&token, "t").expect("token");
    let out = command(&["output", "1", "-o", f])
        .env("HETSCHED_SERVER", "http://127.0.0.1:9")
        .env("HETSCHED_TOKEN_FILE", &token)
        .output()
        .expect("runs");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("is a file, not a directory"), "{err}");
    let h = hetsched(&["output", "--help"]);
    assert!(
        String::from_utf8_lossy(&h.stdout).contains("--out <DIR>"),
        "{}",
        String::from_utf8_lossy(&h.stdout)
    );
}

/// `sim compare`, `sim graph`, `sim divisible` and `sim accel` take `--out DIR` as `sim run`
/// does: each writes its named file there, the same JSON `--output json` prints, ending in a
/// newline.
#[test]
fn compare_graph_divisible_and_accel_write_their_json_as_their_named_file() {
    let base = scratch("named");
    let cases: Vec<(&str, Vec<&str>)> = vec![
        (
            "compare.json",
            vec![
                "sim",
                "compare",
                "--cluster",
                CLUSTER,
                "--workload",
                WORKLOAD,
                "--policies",
                "fifo,hdas",
            ],
        ),
        (
            "graph.json",
            vec![
                "sim",
                "graph",
                "--cluster",
                "examples/cluster-graph-small.toml",
                "--workflow",
                "examples/workflow-loop.toml",
            ],
        ),
        (
            "divisible.json",
            vec![
                "sim",
                "divisible",
                "--platform",
                "examples/platform-divisible-paper.toml",
                "--load",
                "5000",
                "--algo",
                "umr",
            ],
        ),
        (
            "accel.json",
            vec![
                "sim",
                "accel",
                "--cluster",
                "examples/cluster-offload.toml",
                "--workload",
                "examples/workload-offload.toml",
            ],
        ),
    ];
    for (name, args) in cases {
        let dir = base.join(args[1]).join("new");
        let mut with_out = args.clone();
        with_out.extend(["--output", "json", "--out", s(&dir)]);
        let out = hetsched(&with_out);
        assert!(
            out.status.success(),
            "{with_out:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let written =
            std::fs::read(dir.join(name)).unwrap_or_else(|e| panic!("{with_out:?}: {name}: {e}"));
        assert_eq!(
            written, out.stdout,
            "{with_out:?}: {name} is what --output json prints"
        );
        assert!(written.ends_with(b"\n"), "{name} ends in a newline");
        let json: serde_json::Value = serde_json::from_slice(&written).expect("json");
        assert!(json.is_object() || json.is_array(), "{json}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains(name),
            "{with_out:?}: it says what it wrote"
        );
        // With the table on stdout, the file is the same JSON.
        let mut table = args.clone();
        let dir2 = base.join(args[1]).join("table");
        table.extend(["--out", s(&dir2)]);
        let out = hetsched(&table);
        assert!(out.status.success(), "{table:?}");
        assert_eq!(
            std::fs::read(dir2.join(name)).expect("written"),
            written,
            "{table:?}"
        );
        // A file for --out is refused, and the help names the file.
        let mut refused = args.clone();
        let file = base.join(format!("{name}.taken"));
        std::fs::write(&file, "x").expect("file");
        refused.extend(["--out", s(&file)]);
        let out = hetsched(&refused);
        assert!(!out.status.success(), "{refused:?}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("is a file, not a directory"),
            "{refused:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let help = hetsched(&[args[0], args[1], "--help"]);
        let h = String::from_utf8_lossy(&help.stdout);
        assert!(h.contains("--out <DIR>") && h.contains(name), "{h}");
    }
}

/// An output file that is one of the command's inputs is refused before any work, naming both
/// flags, and the input is left as it was: `sim graph --export WORKFLOW` destroyed the workflow.
#[test]
fn an_export_or_out_file_that_is_an_input_is_refused_and_the_input_kept() {
    let base = scratch("inputs");
    let copy = |from: &str, name: &str| {
        let to = base.join(name);
        std::fs::copy(repo().join(from), &to).expect("copy");
        to
    };
    let workflow = copy("examples/workflow-loop.toml", "workflow.toml");
    let platform = copy("examples/platform-divisible-paper.toml", "platform.toml");
    let offload = copy("examples/workload-offload.toml", "offload.toml");
    let workload = copy(WORKLOAD, "result.json");
    // Another spelling of the same file.
    let spelled = base.join(".").join("workflow.toml");
    let cases: Vec<(Vec<&str>, &Path, &str, &str)> = vec![
        (
            vec![
                "sim",
                "graph",
                "--cluster",
                "examples/cluster-graph-small.toml",
                "--workflow",
                s(&workflow),
                "--export",
                s(&spelled),
            ],
            &workflow,
            "--export",
            "--workflow",
        ),
        (
            vec![
                "sim",
                "divisible",
                "--platform",
                s(&platform),
                "--load",
                "5000",
                "--algo",
                "umr",
                "--export-schedule",
                s(&platform),
            ],
            &platform,
            "--export-schedule",
            "--platform",
        ),
        (
            vec![
                "sim",
                "accel",
                "--cluster",
                "examples/cluster-offload.toml",
                "--workload",
                s(&offload),
                "--export",
                s(&offload),
            ],
            &offload,
            "--export",
            "--workload",
        ),
        (
            vec![
                "sim",
                "run",
                "--cluster",
                CLUSTER,
                "--workload",
                s(&workload),
                "--out",
                s(&base),
            ],
            &workload,
            "--out",
            "--workload",
        ),
    ];
    for (args, input, out_flag, in_flag) in cases {
        let before = std::fs::read(input).expect("input");
        let out = hetsched(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} wrote over its input");
        assert!(
            err.contains(out_flag) && err.contains(in_flag),
            "{args:?}: {err}"
        );
        assert_eq!(
            std::fs::read(input).expect("input"),
            before,
            "{args:?}: the input is kept"
        );
    }
    // `--export` a directory, or into a missing one: refused before the run, not after.
    for export in [s(&base).to_string(), format!("{}/missing/g.json", s(&base))] {
        let out = hetsched(&[
            "sim",
            "graph",
            "--cluster",
            "examples/cluster-graph-small.toml",
            "--workflow",
            s(&workflow),
            "--export",
            &export,
        ]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{export}");
        assert!(
            err.contains("--export") && !err.contains("cannot write"),
            "{export}: {err}"
        );
    }
}

/// Every `--export` file is a text file as `--out`'s are: valid JSON ending in a newline, and
/// the command says on stderr what it wrote.
#[test]
fn export_files_end_in_a_newline_and_are_announced() {
    let base = scratch("exports");
    let file = |name: &str| base.join(name);
    let (g, d, a) = (file("g.json"), file("d.json"), file("a.json"));
    let runs: Vec<(Vec<&str>, &Path)> = vec![
        (
            vec![
                "sim",
                "graph",
                "--cluster",
                "examples/cluster-graph-small.toml",
                "--workflow",
                "examples/workflow-loop.toml",
                "--export",
                s(&g),
            ],
            &g,
        ),
        (
            vec![
                "sim",
                "divisible",
                "--platform",
                "examples/platform-divisible-paper.toml",
                "--load",
                "100",
                "--algo",
                "umr",
                "--export-schedule",
                s(&d),
            ],
            &d,
        ),
        (
            vec![
                "sim",
                "accel",
                "--cluster",
                "examples/cluster-offload.toml",
                "--workload",
                "examples/workload-offload.toml",
                "--export",
                s(&a),
            ],
            &a,
        ),
    ];
    for (args, path) in runs {
        let out = hetsched(&args);
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let written = std::fs::read(path).expect("exported");
        let _: serde_json::Value = serde_json::from_slice(&written).expect("json");
        assert!(
            written.ends_with(b"}\n"),
            "{args:?}: the export ends without a newline"
        );
        assert!(
            String::from_utf8_lossy(&out.stderr).contains(&format!("wrote {}", s(path))),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// A directory the command cannot write into is refused before the run, not after it: `sim
/// sweep --out /proc` ran every case, then failed to write `report.json`.
#[test]
fn an_out_directory_that_cannot_be_written_is_refused_before_the_run() {
    for args in [
        vec![
            "sim", "sweep", "--cases", "1", "--scale", "0.05", "--out", "/proc",
        ],
        vec![
            "sim",
            "run",
            "--cluster",
            CLUSTER,
            "--workload",
            WORKLOAD,
            "--out",
            "/proc",
        ],
        vec!["sim", "divisible-paper", "--seeds", "1", "--out", "/proc"],
    ] {
        let out = hetsched(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?}");
        assert!(
            err.contains("--out /proc: cannot write into this directory"),
            "{args:?}: {err}"
        );
        assert!(out.stdout.is_empty(), "{args:?} ran before refusing");
    }
    // `--export` alike.
    let out = hetsched(&[
        "sim",
        "graph",
        "--cluster",
        "examples/cluster-graph-small.toml",
        "--workflow",
        "examples/workflow-loop.toml",
        "--export",
        "/proc/graph.json",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--export /proc/graph.json: cannot write into the directory /proc"),
        "{err}"
    );
    assert!(out.stdout.is_empty(), "it ran before refusing");
}
