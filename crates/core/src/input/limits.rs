//! Bounds on what one job may carry into the runtime, checked at submission with the same
//! `file:line:col: field: message` errors as every other input check.
//!
//! A job's commands, environments and names travel to agents in heartbeat replies and land in
//! paths on the agents' disks, so each is bounded: an oversized command would make a reply that
//! an agent cannot decode (and other users' tasks in the same reply would be lost with it), and an
//! application name with `/` or a leading `.` would put task outputs outside the agent's work
//! directory. The limits are generous for real work and clear when hit.

use super::cluster::at;
use super::workflow::ParsedWorkflow;
use super::workload::{Command, Workload};
use super::{InputError, Source, Step::Index, Step::Key};
use std::collections::BTreeMap;

/// Largest job file, in bytes.
pub const MAX_JOB_FILE_BYTES: usize = 2 << 20;
/// The longest kill grace (a variant's `kill_grace`, an agent's): a stopped task's cores stay
/// taken that long, and a shutting-down agent may wait that long.
pub const MAX_KILL_GRACE: crate::time::Time = 3600 * crate::time::NANOS_PER_SEC;
/// Largest command of one variant (all its arguments together), in bytes.
pub const MAX_COMMAND_BYTES: usize = 64 << 10;
/// Most arguments of one command.
pub const MAX_ARGS: usize = 4096;
/// Largest environment of one variant (names and values together), in bytes.
pub const MAX_ENV_BYTES: usize = 64 << 10;
/// Most environment variables of one variant.
pub const MAX_ENV_VARS: usize = 1024;
/// Longest application name, in bytes.
pub const MAX_APP_NAME: usize = 128;
/// The most memory one batch task may hold, as its variant's `memory` or `hetsched update
/// --memory` gives it: what one node may have ([`MAX_NODE_MEMORY`](super::cluster::MAX_NODE_MEMORY),
/// 1 PiB), since a task runs on one node. Submission and `update` refuse more with the same words
/// ([`task_memory_problem`]), and so do a workflow task's `memory` (one instance) and a divisible
/// job's `memory_per_unit` (one unit), which run on one node too.
pub const MAX_TASK_MEMORY: u64 = super::cluster::MAX_NODE_MEMORY;

/// Why a task cannot hold `bytes` of memory, if it cannot: more than [`MAX_TASK_MEMORY`]. The
/// one wording of the bound, after the field (`application[0].cpu.memory: `, `memory: `).
pub fn task_memory_problem(bytes: u64) -> Option<String> {
    (bytes > MAX_TASK_MEMORY)
        .then(|| format!("{bytes} bytes is more than a task may take, {MAX_TASK_MEMORY} (1 PiB)"))
}

/// The least memory one batch task may declare, other than none (0): 1 MiB. Every process
/// holds more than that, and its agent stops a task whose processes hold more than its
/// memory, so a smaller figure — mostly a bare number meant as megabytes, as Slurm's `--mem`
/// reads one — would fail every task. Submission and `update` refuse it with the same words
/// ([`task_memory_floor_problem`]).
pub const MIN_TASK_MEMORY: u64 = 1 << 20;

/// Why a task cannot declare `bytes` of memory for being too little, if it cannot: more than
/// none and less than [`MIN_TASK_MEMORY`]. After the field, as [`task_memory_problem`].
pub fn task_memory_floor_problem(bytes: u64) -> Option<String> {
    (bytes > 0 && bytes < MIN_TASK_MEMORY).then(|| {
        format!(
            "{bytes} bytes is less than any process holds (at least 1 MiB, or none): its agent \
             stops a task whose processes hold more than its memory, so every task would fail; \
             a size without a unit is bytes (Slurm's `--mem` counts megabytes): write e.g. \
             `{bytes}MiB`"
        )
    })
}

/// Most applications one job may have, and tasks one workflow: the scheduler keeps counters per
/// application and ranks them at every dispatch, so 20,000 one-task applications dispatch ~17×
/// slower than one application of 20,000 tasks, for every job on the cluster.
pub const MAX_APPLICATIONS: usize = 1000;

fn command_size(c: &Command) -> (usize, usize) {
    match c {
        Command::Shell(s) => (s.len(), 1),
        Command::Argv(v) => (v.iter().map(String::len).sum(), v.len()),
    }
}

fn has_nul(c: &Command) -> bool {
    match c {
        Command::Shell(s) => s.contains('\0'),
        Command::Argv(v) => v.iter().any(|a| a.contains('\0')),
    }
}

/// Why an application name cannot name files on an agent, if it cannot. Every workload's
/// application names meet it (the simulator prints them in its tables), as do a runtime
/// workflow's task and data names.
pub fn app_name_problem(name: &str) -> Option<String> {
    if name.len() > MAX_APP_NAME {
        return Some(format!(
            "is {} bytes long; at most {MAX_APP_NAME}",
            name.len()
        ));
    }
    // Before the messages that quote the name: a control character (an ANSI escape) would act
    // on the terminal that shows the message.
    if name.chars().any(char::is_control) {
        return Some("holds a control character".into());
    }
    // A bidi override or a zero-width joiner would make the name read otherwise than it is.
    if let Some(problem) = crate::text::hidden_problem(name) {
        return Some(problem);
    }
    if name.contains('/') || name.contains('\\') {
        return Some(format!(
            "`{name}` holds a `/` or `\\`; task outputs are named after the application, so it \
             must be one path component"
        ));
    }
    if name.starts_with('.') {
        return Some(format!(
            "`{name}` starts with `.`; task outputs are named after the application (`..` would \
             leave the work directory)"
        ));
    }
    None
}

/// A submitted file is at most [`MAX_JOB_FILE_BYTES`]; `what` names its kind in the error.
fn check_file_size(src: &Source<'_>, what: &str, text: &str) -> Result<(), InputError> {
    if text.len() > MAX_JOB_FILE_BYTES {
        return Err(src.error(
            None,
            None,
            format!(
                "the {what} file is {} bytes; at most {MAX_JOB_FILE_BYTES} (2 MiB)",
                text.len()
            ),
        ));
    }
    Ok(())
}

/// Checks every bound above on a parsed job file.
pub fn check(w: &Workload) -> Result<(), InputError> {
    let src = Source::new(&w.origin, &w.text);
    check_file_size(&src, "job", &w.text)?;
    if let Some(a) = w.applications.get(MAX_APPLICATIONS) {
        return Err(src.error(
            Some(a.name.span().start),
            Some(format!("application[{MAX_APPLICATIONS}]")),
            format!(
                "the job has {} applications; at most {MAX_APPLICATIONS} (give an application \
                 more `tasks`, `entries` or `indices` instead)",
                w.applications.len()
            ),
        ));
    }
    for (i, a) in w.applications.iter().enumerate() {
        if let Some(problem) = app_name_problem(a.name.get_ref()) {
            return Err(src.error(
                Some(a.name.span().start),
                Some(format!("application[{i}].name")),
                problem,
            ));
        }
        // Each variant's (time limit, kill grace, where it is written).
        let timings = [
            (
                "cpu",
                a.cpu.as_ref().map(|c| {
                    let v = c.get_ref();
                    (v.time_limit, v.kill_grace, c.span().start)
                }),
            ),
            (
                "gpu",
                a.gpu.as_ref().map(|g| {
                    let v = g.get_ref();
                    (v.time_limit, v.kill_grace, g.span().start)
                }),
            ),
        ];
        for (variant, timing) in timings {
            let Some((limit, grace, at)) = timing else {
                continue;
            };
            // Agents count time limits in whole milliseconds, 0 meaning none: a shorter limit
            // would silently be no limit at all. (Checked at submission only, like every bound
            // here, so a job stored before the check still loads.)
            if limit.is_some_and(|t| t.0 < crate::time::NANOS_PER_SEC / 1000) {
                return Err(src.error(
                    variant_value_at(&src, i, variant, "time_limit").or(Some(at)),
                    Some(format!("application[{i}].{variant}.time_limit")),
                    "must be at least 1ms (leave it out for no limit)",
                ));
            }
            if grace.is_some_and(|g| g.0 > MAX_KILL_GRACE) {
                return Err(src.error(
                    variant_value_at(&src, i, variant, "kill_grace").or(Some(at)),
                    Some(format!("application[{i}].{variant}.kill_grace")),
                    "must be at most 1h",
                ));
            }
        }
        // A task runs on one node: more memory than a node may have never fits anywhere.
        let memories = [
            a.cpu
                .as_ref()
                .map(|c| ("cpu", c.get_ref().memory.as_u64(), c.span().start)),
            a.gpu
                .as_ref()
                .map(|g| ("gpu", g.get_ref().memory.as_u64(), g.span().start)),
        ];
        for (variant, memory, header) in memories.into_iter().flatten() {
            if let Some(problem) =
                task_memory_problem(memory).or_else(|| task_memory_floor_problem(memory))
            {
                return Err(src.error(
                    variant_value_at(&src, i, variant, "memory").or(Some(header)),
                    Some(format!("application[{i}].{variant}.memory")),
                    problem,
                ));
            }
        }
        let variants = [
            a.cpu.as_ref().map(|c| {
                let v = c.get_ref();
                ("cpu", v.command.as_ref(), &v.env, c.span().start)
            }),
            a.gpu.as_ref().map(|g| {
                let v = g.get_ref();
                ("gpu", v.command.as_ref(), &v.env, g.span().start)
            }),
        ];
        for (variant, command, env, header) in variants.into_iter().flatten() {
            let prefix = format!("application[{i}].{variant}");
            // Each field at its own value, the header when the text does not say.
            let place = |p: Place<'_>| {
                match p {
                    Place::Command => variant_value_at(&src, i, variant, "command"),
                    Place::Env => variant_value_at(&src, i, variant, "env"),
                    Place::Var(name) => src
                        .value_at(&[
                            Key("application"),
                            Index(i),
                            Key(variant),
                            Key("env"),
                            Key(name),
                        ])
                        .or_else(|| variant_value_at(&src, i, variant, "env")),
                }
                .or(Some(header))
            };
            check_command_env(&src, &prefix, command, env, &place)?;
        }
        // The device kind is matched against nodes' device kinds and shown in every listing:
        // the rule `update --gpu-kind` applies.
        if let Some(g) = &a.gpu
            && let Some(kind) = &g.get_ref().kind
            && let Err(problem) = crate::model::cluster::check_attribute(kind)
        {
            return Err(src.error(
                variant_value_at(&src, i, "gpu", "kind").or(Some(g.span().start)),
                Some(format!("application[{i}].gpu.kind")),
                problem,
            ));
        }
    }
    Ok(())
}

/// Where the value of `key` in the `index`th application's `variant` table (`cpu` or `gpu`) is
/// written: the variants keep their fields without their place (the runtime reads them as plain
/// values), so the text is read again when one is refused ([`Source::value_at`]).
fn variant_value_at(src: &Source<'_>, index: usize, variant: &str, key: &str) -> Option<usize> {
    src.value_at(&[Key("application"), Index(index), Key(variant), Key(key)])
}

/// Most instances one workflow may have (a batch job's bound on tasks).
pub const MAX_WORKFLOW_INSTANCES: u64 = 1_000_000;

/// Checks every bound above on a workflow submitted to the runtime: the file's size, its
/// instance count, task and data names (each becomes a path component on the agents, as an
/// application name does), and each task's command, environment and time limit.
pub fn check_workflow(w: &ParsedWorkflow) -> Result<(), InputError> {
    let src = Source::new(&w.origin, &w.text);
    check_file_size(&src, "workflow", &w.text)?;
    if let Some(t) = w.specs.get(MAX_APPLICATIONS) {
        return Err(src.error(
            at(&t.name),
            Some(format!("task[{MAX_APPLICATIONS}]")),
            format!(
                "the workflow has {} tasks; at most {MAX_APPLICATIONS} (give a task more \
                 `instances` instead)",
                w.specs.len()
            ),
        ));
    }
    let total = w.workflow.total_instances();
    if total > MAX_WORKFLOW_INSTANCES {
        // Point at the task whose instances carry the count over the bound.
        let mut so_far = 0u64;
        let over = w
            .workflow
            .tasks
            .iter()
            .position(|t| {
                so_far = so_far.saturating_add(t.instances());
                so_far > MAX_WORKFLOW_INSTANCES
            })
            .unwrap_or(0);
        let spec = w.specs.get(over);
        return Err(src.error(
            spec.and_then(|t| at(&t.instances)),
            Some(format!("task[{over}].instances")),
            format!(
                "the workflow has {total} instances (processes included); at most \
                 {MAX_WORKFLOW_INSTANCES}, and the count passes that at this task"
            ),
        ));
    }
    for (i, t) in w.specs.iter().enumerate() {
        if let Some(problem) = app_name_problem(t.name.get_ref()) {
            return Err(src.error(at(&t.name), Some(format!("task[{i}].name")), problem));
        }
        let data = [("inputs", &t.inputs), ("outputs", &t.outputs)];
        for (list, names) in data {
            for (j, n) in names.iter().enumerate() {
                if let Some(problem) = app_name_problem(n.get_ref()) {
                    return Err(src.error(at(n), Some(format!("task[{i}].{list}[{j}]")), problem));
                }
            }
        }
        if let Some(limit) = &t.time_limit
            && limit.get_ref().0 < crate::time::NANOS_PER_SEC / 1000
        {
            return Err(src.error(
                at(limit).or_else(|| at(&t.name)),
                Some(format!("task[{i}].time_limit")),
                "must be at least 1ms (leave it out for no limit)",
            ));
        }
        let command = t.command.as_ref();
        // Each field at its own value (the environment is kept without its place, so it is read
        // again from the text), the task's name when the text does not say.
        let place = |p: Place<'_>| {
            let env = || src.value_at(&[Key("task"), Index(i), Key("env")]);
            match p {
                Place::Command => command.and_then(at),
                Place::Env => env(),
                Place::Var(name) => src
                    .value_at(&[Key("task"), Index(i), Key("env"), Key(name)])
                    .or_else(env),
            }
            .or_else(|| at(&t.name))
        };
        check_command_env(
            &src,
            &format!("task[{i}]"),
            command.map(|c| c.get_ref()),
            &t.env,
            &place,
        )?;
    }
    Ok(())
}

/// What [`check_command_env`] refuses, for its caller to say where that is written.
enum Place<'a> {
    /// The command.
    Command,
    /// The environment as a whole.
    Env,
    /// The environment variable of this name.
    Var(&'a str),
}

/// The variables an agent sets for a task itself (`crates/agent/src/launch.rs`, `cpus.rs`):
/// its job's own value would never be seen, so a job may not set one (before, it was dropped
/// without a word). Other `HETSCHED_` names stay the job's (`HETSCHED_SERVER` for a task that
/// submits work).
pub const AGENT_SET_VARS: &[&str] = &[
    "HETSCHED_JOB_ID",
    "HETSCHED_APP",
    "HETSCHED_TASK_ID",
    "HETSCHED_TASK_INDEX",
    "HETSCHED_ATTEMPT",
    "HETSCHED_VARIANT",
    "HETSCHED_NODE",
    "HETSCHED_CORES",
    "HETSCHED_ENTRY",
    "HETSCHED_PROCESS",
    "HETSCHED_CPUS",
    "HETSCHED_NODE_FILE",
    "HETSCHED_NODES",
    "HETSCHED_NUM_NODES",
    "HETSCHED_NODE_CORES",
    "HETSCHED_TOTAL_CORES",
    "HETSCHED_AGENT_WORK_DIR",
    "CUDA_VISIBLE_DEVICES",
    "CUDA_DEVICE_ORDER",
];

/// The bounds on one command and its environment; `prefix` names where they are written
/// (`application[0].cpu`, `task[2]`), and `place` the offset of what is refused.
fn check_command_env(
    src: &Source<'_>,
    prefix: &str,
    command: Option<&Command>,
    env: &BTreeMap<String, String>,
    place: &dyn Fn(Place<'_>) -> Option<usize>,
) -> Result<(), InputError> {
    let field = |f: &str| Some(format!("{prefix}.{f}"));
    if let Some(c) = command {
        // Only when refused: finding the place reads the text again.
        let at = || place(Place::Command);
        let (bytes, args) = command_size(c);
        if bytes > MAX_COMMAND_BYTES {
            return Err(src.error(
                at(),
                field("command"),
                format!(
                    "the command is {bytes} bytes; at most {MAX_COMMAND_BYTES} (64 KiB): put \
                     long inputs in a file the command reads"
                ),
            ));
        }
        if args > MAX_ARGS {
            return Err(src.error(
                at(),
                field("command"),
                format!("the command has {args} arguments; at most {MAX_ARGS}"),
            ));
        }
        if has_nul(c) {
            return Err(src.error(at(), field("command"), "holds a NUL character"));
        }
    }
    if env.len() > MAX_ENV_VARS {
        return Err(src.error(
            place(Place::Env),
            field("env"),
            format!("{} variables; at most {MAX_ENV_VARS}", env.len()),
        ));
    }
    let bytes: usize = env.iter().map(|(k, v)| k.len() + v.len()).sum();
    if bytes > MAX_ENV_BYTES {
        return Err(src.error(
            place(Place::Env),
            field("env"),
            format!("the environment is {bytes} bytes; at most {MAX_ENV_BYTES} (64 KiB)"),
        ));
    }
    for (k, v) in env {
        if k.is_empty() || k.contains('=') || k.contains('\0') || v.contains('\0') {
            return Err(src.error(
                place(Place::Var(k)),
                field("env"),
                format!(
                    "variable `{}`: a name must be non-empty without `=` or NUL, a value without NUL",
                    k.escape_debug()
                ),
            ));
        }
        if AGENT_SET_VARS.contains(&k.as_str()) {
            return Err(src.error(
                place(Place::Var(k)),
                field("env"),
                format!(
                    "variable `{k}` is set by the agent for every task (the task would never \
                     see the job's value): leave it out"
                ),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::input::workload::parse_workload;

    fn job(name: &str, command: &str, env: &str) -> String {
        format!(
            "[[application]]\nname = \"{name}\"\ntasks = 1\n[application.cpu]\ncommand = \"{command}\"\n{env}"
        )
    }

    fn err(text: &str) -> String {
        let w = parse_workload("job.toml", text).expect("parses");
        check(&w).expect_err("over a limit").to_string()
    }

    /// A variable the agent sets for every task is refused in a job's environment, naming it
    /// and its line; another `HETSCHED_` name is the job's own.
    #[test]
    fn a_variable_the_agent_sets_is_refused_in_a_jobs_environment() {
        for var in [
            "HETSCHED_JOB_ID",
            "CUDA_VISIBLE_DEVICES",
            "HETSCHED_AGENT_WORK_DIR",
        ] {
            let text = job("a", "true", &format!("env = {{ {var} = \"9\" }}\n"));
            let e = err(&text);
            assert!(
                e.starts_with("job.toml:6:")
                    && e.contains(&format!(
                        "application[0].cpu.env: variable `{var}` is set by the agent"
                    )),
                "{var}: {e}"
            );
        }
        let own = job(
            "a",
            "true",
            "env = { HETSCHED_SERVER = \"http://head:7420\" }\n",
        );
        let w = parse_workload("job.toml", &own).expect("parses");
        assert!(check(&w).is_ok(), "a name the agent does not set");
    }

    /// `memory = "4000"` (or `submit --memory 4000`, Slurm's `--mem=4000`, megabytes there)
    /// is 4000 bytes here: less than any process holds, so its agent would stop every task at
    /// once. Refused, saying a bare number is bytes; 1 MiB and up, and none, are accepted.
    #[test]
    fn a_task_memory_under_a_mebibyte_is_refused_saying_a_bare_number_is_bytes() {
        let with = |memory: &str| {
            let text = format!("{}memory = {memory}\n", job("a", "true", ""));
            parse_workload("job.toml", &text).expect("parses")
        };
        let e = check(&with("\"4000\""))
            .expect_err("4000 bytes")
            .to_string();
        assert!(
            e.starts_with("job.toml:6:10: application[0].cpu.memory: 4000 bytes is less than")
                && e.contains("a size without a unit is bytes")
                && e.contains("4000MiB"),
            "{e}"
        );
        assert!(check(&with("\"512KiB\"")).is_err());
        check(&with("\"1MiB\"")).expect("a mebibyte");
        check(&with("0")).expect("none declared");
        assert_eq!(task_memory_floor_problem(0), None);
        assert!(task_memory_floor_problem(MIN_TASK_MEMORY - 1).is_some());
        assert_eq!(task_memory_floor_problem(MIN_TASK_MEMORY), None);
    }

    #[test]
    fn a_one_mebibyte_command_is_refused_naming_the_limit() {
        let e = err(&job("a", &"x".repeat(1 << 20), ""));
        assert!(
            e.starts_with("job.toml:5:11: application[0].cpu.command: the command is 1048576 bytes; at most 65536"),
            "{e}"
        );
        let w = parse_workload("job.toml", &job("a", &"x".repeat(60_000), "")).expect("parses");
        check(&w).expect("a 60 KB command is fine");
    }

    #[test]
    fn application_names_that_leave_the_work_directory_are_refused() {
        // Every workload's names meet the rule: parsing refuses them already.
        let refused = |text: &str| {
            parse_workload("job.toml", text)
                .and_then(|w| check(&w))
                .expect_err("refused")
                .to_string()
        };
        for name in ["../escape", "a/b", ".hidden", ".."] {
            let e = refused(&job(name, "true", ""));
            assert!(e.contains("application[0].name"), "{name}: {e}");
        }
        let e = refused(&job(&"n".repeat(200), "true", ""));
        assert!(e.contains("at most 128"), "{e}");
    }

    #[test]
    fn oversized_or_malformed_environments_are_refused() {
        let big = format!("[application.cpu.env]\nBIG = \"{}\"\n", "v".repeat(70_000));
        let e = err(&job("a", "true", &big));
        assert!(e.contains("at most 65536"), "{e}");
        assert!(
            e.starts_with("job.toml:6:1: application[0].cpu.env: "),
            "{e}"
        );
        let bad = "[application.cpu.env]\n\"A=B\" = \"1\"\n";
        let e = err(&job("a", "true", bad));
        assert!(e.contains("without `=`"), "{e}");
        assert!(
            e.starts_with("job.toml:7:9: application[0].cpu.env: "),
            "{e}"
        );
    }

    fn workflow_err(task: &str) -> String {
        let text = format!("[[task]]\nname = \"a\"\n{task}\n");
        let w = crate::input::workflow::parse_workflow_with(
            "wf.toml",
            &text,
            crate::input::workflow::Costs::Optional,
        )
        .expect("parses");
        check_workflow(&w).expect_err("over a limit").to_string()
    }

    #[test]
    fn applications_per_job_and_tasks_per_workflow_are_bounded() {
        let apps = |n: usize| {
            (0..n)
                .map(|i| format!("[[application]]\nname = \"a{i}\"\ntasks = 1\n[application.cpu]\ncommand = \"true\"\n"))
                .collect::<String>()
        };
        check(&parse_workload("job.toml", &apps(MAX_APPLICATIONS)).expect("parses"))
            .expect("at the bound");
        let e = err(&apps(MAX_APPLICATIONS + 1));
        assert!(
            e.starts_with(
                "job.toml:5002:8: application[1000]: the job has 1001 applications; at most 1000"
            ),
            "{e}"
        );
        let tasks = (1..=MAX_APPLICATIONS)
            .map(|i| format!("[[task]]\nname = \"t{i}\"\ninstances = 1\ncommand = \"true\"\n"))
            .collect::<String>();
        let e = workflow_err(&format!("instances = 1\ncommand = \"true\"\n{tasks}"));
        assert!(
            e.contains("task[1000]: the workflow has 1001 tasks; at most 1000"),
            "{e}"
        );
    }

    #[test]
    fn a_gpu_kind_is_bounded_as_an_attribute_is() {
        let job = |kind: &str| {
            format!(
                "[[application]]\nname = \"a\"\ntasks = 1\n[application.gpu]\n\
                 command = \"true\"\ngpus = 1\nkind = \"{kind}\"\n"
            )
        };
        let w = parse_workload("job.toml", &job("a100")).expect("parses");
        check(&w).expect("a short kind");
        let e = err(&job(&"k".repeat(1_000_000)));
        assert!(
            e.starts_with("job.toml:7:8: application[0].gpu.kind: attribute `kkkkkkkkkkkkkkkk…` is longer than 64 bytes"),
            "{}",
            &e[..e.len().min(200)]
        );
        assert!(err(&job("a 100")).contains("whitespace"));
    }

    #[test]
    fn too_many_instances_are_refused_at_the_task_that_passes_the_bound() {
        let e = workflow_err(
            "instances = 600000\ncommand = \"true\"\n[[task]]\nname = \"b\"\n\
             instances = \"1..=600000\"\ncommand = \"true\"",
        );
        assert!(
            e.starts_with("wf.toml:7:13: task[1].instances: the workflow has 1200000 instances"),
            "{e}"
        );
    }

    #[test]
    fn a_workflow_is_bounded_as_a_batch_job_is() {
        let big = format!("instances = 2\ncommand = \"{}\"", "x".repeat(1 << 20));
        for (task, says) in [
            (
                big.as_str(),
                "wf.toml:4:11: task[0].command: the command is 1048576 bytes; at most 65536",
            ),
            (
                "instances = 1000001\ncommand = \"true\"",
                "wf.toml:3:13: task[0].instances: the workflow has 1000001 instances (processes included); at most 1000000",
            ),
            (
                "instances = 500000\nprocesses = 3\ncommand = \"true\"",
                "wf.toml:3:13: task[0].instances: the workflow has 1500000 instances",
            ),
            (
                "instances = 1\ncommand = \"true\"\ntime_limit = \"10us\"",
                "wf.toml:5:14: task[0].time_limit: must be at least 1ms",
            ),
            (
                "instances = 1\ncommand = \"true\"\nenv = { \"A=B\" = \"1\" }",
                "wf.toml:5:17: task[0].env: variable `A=B`",
            ),
        ] {
            let e = workflow_err(task);
            assert!(e.starts_with(says), "{e}");
        }
        let text = format!(
            "[[task]]\nname = \"{}\"\ninstances = 1\ncommand = \"true\"\n",
            "n".repeat(200)
        );
        // A task name's rule is the parser's too (the simulator prints the name).
        let e = crate::input::workflow::parse_workflow_with(
            "wf.toml",
            &text,
            crate::input::workflow::Costs::Optional,
        )
        .expect_err("long name")
        .to_string();
        assert!(
            e.starts_with("wf.toml:2:8: task[0].name: is 200 bytes long; at most 128"),
            "{e}"
        );
        // A data name's other rules are the parser's (`workflow::data_name_problem`); its
        // length is bounded here.
        let long_output = format!(
            "instances = 1\ncommand = \"true\"\noutputs = [\"{}\"]",
            "d".repeat(200)
        );
        let e = workflow_err(&long_output);
        assert!(
            e.starts_with("wf.toml:5:12: task[0].outputs[0]: is 200 bytes long; at most 128"),
            "{e}"
        );
        let e = crate::input::workflow::parse_workflow_with(
            "wf.toml",
            "[[task]]\nname = \"a\"\ninstances = 1\n[[task]]\nname = \".x\"\ninstances = 1\n",
            crate::input::workflow::Costs::Optional,
        )
        .expect_err("a task name starting with `.`")
        .to_string();
        assert!(
            e.starts_with("wf.toml:5:8: task[1].name: `.x` starts with `.`"),
            "{e}"
        );
    }
}
