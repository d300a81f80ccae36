//! `--out DIR` means a directory in every command that writes files: it is created when missing,
//! the command writes its named files into it, and a path that is a file is refused before any
//! work starts. The real binary, as a user meets it.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn hetsched(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_hetsched"))
        .args(args)
        .current_dir(repo())
        .env("HETSCHED_SERVER", "http://127.0.0.1:9")
        .output()
        .expect("the hetsched binary runs")
}

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("hetsched-out-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("scratch dir");
    d
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
    let out = hetsched(&[
        "sim",
        "run",
        "--cluster",
        CLUSTER,
        "--workload",
        WORKLOAD,
        "--out",
        s(&run_dir),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
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
    let again = hetsched(&[
        "sim",
        "run",
        "--cluster",
        CLUSTER,
        "--workload",
        WORKLOAD,
        "--out",
        s(&run_dir),
    ]);
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
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(sweep_dir.join("report.json")).expect("report"))
            .expect("json");
    assert!(report.is_object(), "{report}");
    let _ = std::fs::remove_dir_all(&base);
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
    let out = Command::new(env!("CARGO_BIN_EXE_hetsched"))
        .args(["output", "1", "-o", f])
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
    let _ = std::fs::remove_dir_all(&base);
}
