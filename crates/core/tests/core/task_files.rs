//! The job file's `inputs` and `outputs` (spec 01, issue 11): the files each task reads and writes,
//! relative to its directory, `{index}` allowed; a path that leaves the directory names its line.

#![allow(clippy::unwrap_used)] // a failing test should panic with the error

use hetsched_core::input::workload::parse_workload;

fn job(files: &str) -> String {
    format!(
        r#"
[[application]]
name = "solve"
tasks = 40
accelerator = "required"
{files}
[application.gpu]
command = "solve in/{{index}}.dat"
"#
    )
}

#[test]
fn inputs_and_outputs_are_read_in_order_with_index_placeholders() {
    let w = parse_workload(
        "j.toml",
        &job(r#"inputs = ["in/{index}.dat", "shared/model.bin"]
outputs = ["out/{index}.dat"]"#),
    )
    .unwrap();
    let a = &w.applications[0];
    let names = |l: &Vec<serde_spanned::Spanned<String>>| -> Vec<String> {
        l.iter().map(|s| s.get_ref().clone()).collect()
    };
    assert_eq!(names(&a.inputs), ["in/{index}.dat", "shared/model.bin"]);
    assert_eq!(names(&a.outputs), ["out/{index}.dat"]);
    // Absent: no files.
    assert!(
        parse_workload("j.toml", &job("")).unwrap().applications[0]
            .inputs
            .is_empty()
    );
}

#[test]
fn a_path_outside_the_task_directory_is_refused_with_its_line() {
    for (bad, field) in [
        (r#"inputs = ["../secret"]"#, "application[0].inputs[0]"),
        (
            r#"outputs = ["ok.txt", "/etc/passwd"]"#,
            "application[0].outputs[1]",
        ),
        (r#"inputs = [""]"#, "application[0].inputs[0]"),
    ] {
        let err = parse_workload("j.toml", &job(bad)).unwrap_err().to_string();
        assert!(err.starts_with("j.toml:6:"), "{err}");
        assert!(err.contains(field), "{err}");
    }
}
