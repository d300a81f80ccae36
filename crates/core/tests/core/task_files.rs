//! The job file's `inputs` and `outputs` (spec 01, issue 11): the files each task reads and writes,
//! relative to its directory, `{index}` allowed; a path that leaves the directory names its line.
//! Also `stdout` and `stderr`: where each task's output streams go.

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

#[test]
fn stdout_and_stderr_templates_are_read_and_a_bad_one_names_its_line_and_field() {
    let w = parse_workload(
        "j.toml",
        &job(r#"stdout = "logs/{job}/{app}-{index}.out"
stderr = "none""#),
    )
    .unwrap();
    let a = &w.applications[0];
    assert_eq!(
        a.stdout.as_ref().map(|s| s.get_ref().as_str()),
        Some("logs/{job}/{app}-{index}.out")
    );
    assert_eq!(
        a.stderr.as_ref().map(|s| s.get_ref().as_str()),
        Some("none")
    );
    for (bad, field, says) in [
        (
            r#"stdout = "out-{jobid}.txt""#,
            "application[0].stdout",
            "unknown placeholder `{jobid}`",
        ),
        (
            r#"stderr = "slurm-%j.err""#,
            "application[0].stderr",
            "write `{job}`",
        ),
        (
            r#"stdout = "logs/""#,
            "application[0].stdout",
            "names a directory",
        ),
        (r#"stdout = """#, "application[0].stdout", "1 to 4096 bytes"),
    ] {
        let err = parse_workload("j.toml", &job(bad)).unwrap_err().to_string();
        assert!(err.starts_with("j.toml:6:"), "{err}");
        assert!(err.contains(field) && err.contains(says), "{err}");
    }
}

/// An output template that names one file for several tasks would have each task truncate the
/// others' output (only the last writer's survives, and `hetsched log` would show it for every
/// task): refused at submission (`check_commands`), naming the field and the placeholder that
/// tells the tasks apart. `parse_workload` alone still reads it, so a stored job restores.
#[test]
fn an_output_template_shared_by_several_tasks_is_refused() {
    for (bad, field) in [
        (r#"stdout = "logs/all.out""#, "application[0].stdout"),
        (
            r#"stderr = "logs/{job}-{attempt}.err""#,
            "application[0].stderr",
        ),
    ] {
        let err = parse_workload("j.toml", &job(bad))
            .unwrap()
            .check_commands()
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("j.toml:6:"), "{err}");
        assert!(
            err.contains(field) && err.contains("all 40 tasks") && err.contains("{index}"),
            "{err}"
        );
    }
    // Told apart by index or task id, discarded, a device, or one task: accepted.
    for good in [
        r#"stdout = "logs/{index}.out""#,
        r#"stdout = "logs/{task}.out""#,
        r#"stdout = "none""#,
        r#"stdout = "/dev/null""#,
    ] {
        parse_workload("j.toml", &job(good))
            .unwrap()
            .check_commands()
            .unwrap();
    }
    let one = job(r#"stdout = "logs/all.out""#).replace("tasks = 40", "tasks = 1");
    parse_workload("j.toml", &one)
        .unwrap()
        .check_commands()
        .unwrap();
    // Two applications with the same template and no `{app}` write the same files.
    let two = |template: &str| {
        format!(
            r#"
[[application]]
name = "a"
tasks = 2
stdout = "{template}"
[application.cpu]
command = "true"

[[application]]
name = "b"
tasks = 2
stdout = "{template}"
[application.cpu]
command = "true"
"#
        )
    };
    let err = parse_workload("j.toml", &two("out/{index}.log"))
        .unwrap()
        .check_commands()
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("application[1].stdout") && err.contains("`a`") && err.contains("{app}"),
        "{err}"
    );
    parse_workload("j.toml", &two("out/{app}-{index}.log"))
        .unwrap()
        .check_commands()
        .unwrap();
    // One application may send both streams to one file.
    let both = job(r#"stdout = "logs/{index}.log"
stderr = "logs/{index}.log""#);
    parse_workload("j.toml", &both)
        .unwrap()
        .check_commands()
        .unwrap();
}

/// A `workdir` is one directory for every task: a placeholder in it (`run/{index}`,
/// HyperQueue's `%{TASK_ID}` in its `--cwd`) is not filled in, and every task failed to start
/// on its node (`workdir … is not a directory`). Refused at submission, naming the field and
/// saying where placeholders are filled; `parse_workload` alone still reads it (a stored job).
#[test]
fn a_placeholder_in_the_workdir_is_refused_at_submission() {
    for (dir, shown) in [
        ("/scratch/run/{index}", "{index}"),
        ("out/{job}-{app}", "{job}"),
        ("/w/%{TASK_ID}", "%{TASK_ID}"),
    ] {
        let w = parse_workload("j.toml", &job(&format!("workdir = \"{dir}\"")))
            .unwrap_or_else(|e| panic!("{dir}: {e}"));
        let err = w.check_commands().unwrap_err().to_string();
        assert!(err.starts_with("j.toml:6:"), "{err}");
        assert!(
            err.contains("application[0].workdir")
                && err.contains(&format!("`{shown}`"))
                && err.contains("the same directory for every task"),
            "{err}"
        );
    }
    parse_workload("j.toml", &job(r#"workdir = "/scratch/run""#))
        .unwrap()
        .check_commands()
        .unwrap();
}
