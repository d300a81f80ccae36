//! What the runtime needs of a workflow file beyond [`super::workflow`] (the one parser; this
//! module only checks the runtime fields it already read):
//!
//! ```toml
//! balancer = "pcddb"              # or "centralised" (default: the server's)
//! [[task]]
//! name = "B"
//! instances = "1..=10"
//! cost = "1s"                     # optional here: the simulator's, the runtime ignores it
//! inputs = ["m"]
//! outputs = ["r"]
//! command = "sort {input:m} > {output:r}"   # or an argument vector
//! env = { LC_ALL = "C" }
//! time_limit = "1m"
//! retries = 2
//! cores = 1
//! memory = "1GiB"
//! gpus = 0
//! ```
//!
//! Placeholders: `{index}` is the instance's argument value; `{output:NAME}` is the path the
//! instance must write its output `NAME` to (in the agent's directory for it); `{input:NAME}` is
//! the path(s) of the consumed output `NAME` — one per producer instance the consumer waits for,
//! in producer order. An argument that is exactly `{input:NAME}` becomes one argument per path;
//! inside a longer argument (a shell line) the paths are joined with spaces.

use super::cluster::at;
use super::workflow::{Costs, ParsedWorkflow, TaskSpec, parse_workflow_with};
use super::{InputError, Source};
use crate::input::limits::task_memory_problem;
use crate::input::workload::{Command, MAX_RETRIES};
use crate::model::Resources;
use crate::policy::graph::BalancerKind;
use std::collections::BTreeMap;

/// A task's runtime part, checked.
#[derive(Clone, Debug, PartialEq)]
pub struct RuntimeTask {
    /// The program and its arguments (a shell line becomes `sh -c LINE`).
    pub argv: Vec<String>,
    /// Environment added to the agent's.
    pub env: BTreeMap<String, String>,
    /// Wall-clock limit of one instance, ns (0 = none).
    pub time_limit_ns: u64,
    /// Failed attempts run again this many times.
    pub retries: u32,
    /// Cores one instance holds.
    pub cores: u32,
    /// Memory one instance holds, bytes.
    pub memory_bytes: u64,
    /// GPUs one instance holds.
    pub gpus: u32,
}

/// A workflow the runtime can run.
#[derive(Clone, Debug)]
pub struct RuntimeWorkflow {
    /// The parsed file (model, dependencies).
    pub parsed: ParsedWorkflow,
    /// Per task, in file order.
    pub tasks: Vec<RuntimeTask>,
    /// `balancer =` of the file.
    pub balancer: Option<BalancerKind>,
}

/// Parses a workflow file for the runtime: the simulator's parser with `cost` optional (the
/// runtime runs the real program), then every task must have a command whose placeholders name
/// its own inputs and outputs, and `balancer` must be a runtime balancer.
pub fn parse_runtime_workflow(origin: &str, text: &str) -> Result<RuntimeWorkflow, InputError> {
    let src = Source::new(origin, text);
    if let Some(e) = mixed_kinds(origin, text) {
        return Err(e);
    }
    let parsed = parse_workflow_with(origin, text, Costs::Optional)?;
    let balancer = file_balancer(&parsed)?;
    let mut tasks = Vec::with_capacity(parsed.specs.len());
    for (i, t) in parsed.specs.iter().enumerate() {
        let field = |f: &str| Some(format!("task[{i}].{f}"));
        let Some(command) = &t.command else {
            return Err(src.error(
                at(&t.name),
                field("command"),
                format!(
                    "missing: task `{}` has no command (the runtime needs what an instance runs, \
                     e.g. command = \"prog {{input:m}} > {{output:r}}\")",
                    t.name.get_ref()
                ),
            ));
        };
        if command.get_ref().is_blank() {
            return Err(src.error(at(command), field("command"), "must not be empty"));
        }
        let argv = match command.get_ref() {
            Command::Shell(s) => vec!["sh".to_string(), "-c".to_string(), s.clone()],
            Command::Argv(v) => v.clone(),
        };
        for arg in &argv {
            for (kind, name) in placeholders(arg) {
                let (list, what) = match kind {
                    "input" => (&t.inputs, "inputs"),
                    "output" => (&t.outputs, "outputs"),
                    // A misspelt kind reaches the program as written: `{outputs:m}` became a
                    // file of that name in the submission's directory, and the instance failed
                    // for want of its output. Other `{word:…}` are the command's own.
                    _ => match ["input", "output"]
                        .into_iter()
                        .map(|k| (strsim::levenshtein(kind, k), k))
                        .min()
                        .filter(|&(d, _)| d <= 2)
                        .map(|(_, k)| k)
                    {
                        Some(meant) => {
                            return Err(src.error(
                                at(command),
                                field("command"),
                                format!(
                                    "`{{{kind}:{name}}}` is no placeholder: did you mean \
                                     `{{{meant}:{name}}}`? (a workflow task's are {{index}}, \
                                     {{input:NAME}} and {{output:NAME}})"
                                ),
                            ));
                        }
                        None => continue,
                    },
                };
                if !list.iter().any(|x| x.get_ref() == name) {
                    let listed: Vec<&str> = list.iter().map(|x| x.get_ref().as_str()).collect();
                    return Err(src.error(
                        at(command),
                        field("command"),
                        format!(
                            "`{{{kind}:{name}}}` names no {} of task `{}` ({what}: {})",
                            if kind == "input" {
                                "consumed output"
                            } else {
                                "output"
                            },
                            t.name.get_ref(),
                            if listed.is_empty() {
                                "none".to_string()
                            } else {
                                listed.join(", ")
                            }
                        ),
                    ));
                }
            }
        }
        let cores = instance_cores(&src, i, t)?;
        if let Some(r) = &t.retries
            && *r.get_ref() > MAX_RETRIES
        {
            return Err(src.error(
                at(r),
                field("retries"),
                format!("must be at most {MAX_RETRIES}"),
            ));
        }
        let memory_bytes = instance_memory(&src, i, t)?;
        tasks.push(RuntimeTask {
            argv,
            env: t.env.clone(),
            time_limit_ns: t.time_limit.as_ref().map_or(0, |d| d.get_ref().0),
            retries: t.retries.as_ref().map_or(0, |r| *r.get_ref()),
            cores,
            memory_bytes,
            gpus: t.gpus.as_ref().map_or(0, |g| *g.get_ref()),
        });
    }
    Ok(RuntimeWorkflow {
        parsed,
        tasks,
        balancer,
    })
}

/// The balancer the file asks for (`balancer =`), checked: `centralised` (or `centralized`) or
/// `pcddb`, the balancers the runtime runs; `None` when the file has no `balancer` line. The one
/// check of that line: `hetsched submit` and `hetsched sim graph` refuse the same file with the
/// same words (`wf.toml:2:12: balancer: unknown balancer …`).
pub fn file_balancer(parsed: &ParsedWorkflow) -> Result<Option<BalancerKind>, InputError> {
    let Some(b) = &parsed.balancer else {
        return Ok(None);
    };
    match b.get_ref().as_str() {
        "centralised" | "centralized" => Ok(Some(BalancerKind::Centralised)),
        "pcddb" => Ok(Some(BalancerKind::Pcddb)),
        other => Err(Source::new(&parsed.origin, &parsed.text).error(
            at(b),
            Some("balancer".into()),
            format!("unknown balancer `{other}`: expected centralised or pcddb"),
        )),
    }
}

/// The cores one instance of the `i`th task (`t`) holds: its `cores`, 1 by default, at least 1.
fn instance_cores(src: &Source<'_>, i: usize, t: &TaskSpec) -> Result<u32, InputError> {
    let cores = t.cores.as_ref().map_or(1, |c| *c.get_ref());
    if cores == 0 {
        return Err(src.error(
            t.cores.as_ref().and_then(at).or_else(|| at(&t.name)),
            Some(format!("task[{i}].cores")),
            "must be at least 1",
        ));
    }
    Ok(cores)
}

/// The memory one instance of the `i`th task (`t`) holds, bytes (0 without `memory`), within a
/// batch task's bound, in its words: an instance runs on one node, and the sums of what
/// instances hold must not overflow the scheduler's.
fn instance_memory(src: &Source<'_>, i: usize, t: &TaskSpec) -> Result<u64, InputError> {
    let Some(m) = &t.memory else {
        return Ok(0);
    };
    if let Some(problem) = task_memory_problem(m.get_ref().as_u64()) {
        return Err(src.error(at(m), Some(format!("task[{i}].memory")), problem));
    }
    Ok(m.get_ref().as_u64())
}

/// What one instance of each task holds on its node (`cores`, `memory`, `gpus`), in file order,
/// checked as [`parse_runtime_workflow`] checks them, for a reader of a workflow file without
/// the runtime's other fields (the simulator: tasks there need no `command`).
pub fn instance_sizes(parsed: &ParsedWorkflow) -> Result<Vec<Resources>, InputError> {
    let src = Source::new(&parsed.origin, &parsed.text);
    parsed
        .specs
        .iter()
        .enumerate()
        .map(|(i, t)| {
            Ok(Resources::new(
                instance_cores(&src, i, t)?,
                instance_memory(&src, i, t)?,
                t.gpus.as_ref().map_or(0, |g| *g.get_ref()),
            ))
        })
        .collect()
}

/// Checks that one instance of every task of `parsed` (sizes `requests`, in file order, as
/// [`instance_sizes`] gives them) fits on at least one of the nodes whose capacities are `nodes`
/// (cores, memory, devices) that `eligible(task, node)` lets run the task (those that offer its
/// `requires`; a task no node is eligible for is left to the caller's own refusal of its
/// `requires`); the error names the task's field that no node can give
/// (`file:line:col: task[i].cores: no live node can hold one instance of …`) and the largest of
/// the eligible nodes. The one check: the server runs it against its live nodes at `submit`,
/// `sim graph` against the cluster file's.
pub fn check_instances_fit(
    parsed: &ParsedWorkflow,
    requests: &[Resources],
    nodes: &[Resources],
    eligible: impl Fn(usize, usize) -> bool,
) -> Result<(), InputError> {
    let src = Source::new(&parsed.origin, &parsed.text);
    for (i, (r, spec)) in requests.iter().zip(&parsed.specs).enumerate() {
        let nodes: Vec<Resources> = (0..nodes.len())
            .filter(|&n| eligible(i, n))
            .map(|n| nodes[n])
            .collect();
        if nodes.is_empty() || nodes.iter().any(|n| n.fits(r)) {
            continue;
        }
        let (f, span, what) = if !nodes.iter().any(|n| n.cores >= r.cores) {
            (
                "cores",
                spec.cores.as_ref().and_then(at),
                format!("{} cores", r.cores),
            )
        } else if !nodes.iter().any(|n| n.gpus >= r.gpus) {
            (
                "gpus",
                spec.gpus.as_ref().and_then(at),
                format!("{} GPUs", r.gpus),
            )
        } else if !nodes.iter().any(|n| n.memory_bytes >= r.memory_bytes) {
            (
                "memory",
                spec.memory.as_ref().and_then(at),
                format!("{} of memory", bytesize::ByteSize(r.memory_bytes)),
            )
        } else {
            // Each alone fits somewhere, but no node has them all.
            (
                "name",
                None,
                format!(
                    "{} cores, {} of memory and {} GPUs on one node",
                    r.cores,
                    bytesize::ByteSize(r.memory_bytes),
                    r.gpus
                ),
            )
        };
        let span = span.or_else(|| at(&spec.name));
        let most = |g: fn(&Resources) -> u64| nodes.iter().map(g).max().unwrap_or(0);
        return Err(src.error(
            span,
            Some(format!("task[{i}].{f}")),
            format!(
                "no live node can hold one instance of `{}` ({what}; the largest nodes have \
                 {} cores, {} of memory, {} GPUs)",
                spec.name.get_ref(),
                most(|n| u64::from(n.cores)),
                bytesize::ByteSize(most(|n| n.memory_bytes)),
                most(|n| u64::from(n.gpus)),
            ),
        ));
    }
    Ok(())
}

impl RuntimeTask {
    /// What one running instance holds on its node (booked in the scheduler's view).
    pub fn request(&self) -> Resources {
        Resources::new(self.cores, self.memory_bytes, self.gpus)
    }
}

impl RuntimeWorkflow {
    /// Checks that one instance of every task fits on at least one of the nodes whose
    /// capacities are `nodes` (cores, memory, devices); the error names the task's field that no
    /// node can give (`file:line:col: task[i].cores: …`).
    pub fn check_fits(&self, nodes: &[Resources]) -> Result<(), InputError> {
        let requests: Vec<Resources> = self.tasks.iter().map(RuntimeTask::request).collect();
        // Any live node: the submission checks sizes apart from `requires` (each checked
        // against what some live node offers).
        check_instances_fit(&self.parsed, &requests, nodes, |_, _| true)
    }
}

/// The refusal of a file that mixes kinds of job, at the first table of the kind that comes
/// second: `[[application]]` tables (a batch job), `[[task]]` tables (a workflow), or more than
/// one `[[divisible]]` load. Such a file would otherwise reach one kind's parser, which calls
/// the other kind's key an unknown field, as if the user had mistyped it. `None`: one kind.
pub fn mixed_kinds(origin: &str, text: &str) -> Option<InputError> {
    let src = Source::new(origin, text);
    let table = text.parse::<toml::Table>().ok()?;
    let has = |k: &str| table.contains_key(k);
    let (application, task, divisible) = (has("application"), has("task"), has("divisible"));
    let at = |key: &str, nth: usize| table_offset_nth(text, key, nth);
    let (offset, message) = if application && task {
        (
            at("application", 0),
            "a file is either a batch job ([[application]] tables) or a workflow ([[task]] \
             tables), not both: put the applications and the tasks in files of their own",
        )
    } else if divisible && (application || task) {
        let other = if application { "application" } else { "task" };
        // Whichever of the two comes later in the file is the one out of place.
        let (d, o) = (at("divisible", 0), at(other, 0));
        (
            d.max(o),
            if application {
                "a file is either a batch job ([[application]] tables) or one divisible load \
                 ([[divisible]]), not both: put each in a file of its own"
            } else {
                "a file is either a workflow ([[task]] tables) or one divisible load \
                 ([[divisible]]), not both: put each in a file of its own"
            },
        )
    } else if table
        .get("divisible")
        .and_then(toml::Value::as_array)
        .is_some_and(|d| d.len() > 1)
    {
        (
            at("divisible", 1),
            "a job file holds one [[divisible]] load: submit the others as their own jobs",
        )
    } else {
        return None;
    };
    Some(src.error(offset, None, message))
}

/// [`table_offset`] of the `nth` (from 0) line that opens table array `key`.
fn table_offset_nth(text: &str, key: &str, nth: usize) -> Option<usize> {
    let mut seen = 0;
    let mut offset = 0;
    for line in text.split_inclusive('\n') {
        if table_offset(line, key).is_some() {
            if seen == nth {
                return Some(offset + line.len() - line.trim_start().len());
            }
            seen += 1;
        }
        offset += line.len();
    }
    None
}

/// The byte offset of the first line that opens top-level table array `key` (`[[key]]`) or
/// sets it (`key = [...]`); `None` when none does plainly (a quoted key, say).
fn table_offset(text: &str, key: &str) -> Option<usize> {
    let mut offset = 0;
    for line in text.split_inclusive('\n') {
        let trimmed = line.trim_start();
        let header = trimmed
            .strip_prefix("[[")
            .and_then(|r| r.split_once("]]"))
            .is_some_and(|(name, _)| name.trim() == key);
        let set = trimmed
            .strip_prefix(key)
            .is_some_and(|r| r.trim_start().starts_with('='));
        if header || set {
            return Some(offset + line.len() - trimmed.len());
        }
        offset += line.len();
    }
    None
}

/// Whether a submitted file is a workflow (it has `[[task]]` tables) rather than a batch job.
pub fn is_workflow(text: &str) -> bool {
    match text.parse::<toml::Table>() {
        Ok(t) => t.contains_key("task"),
        Err(_) => false,
    }
}

/// The `{kind:NAME}` placeholders of `arg`; not the shell's `${VAR:-default}`.
fn placeholders(arg: &str) -> Vec<(&str, &str)> {
    let mut out = Vec::new();
    let mut rest = arg;
    while let Some(open) = rest.find('{') {
        let after = &rest[open + 1..];
        let Some(close) = after.find('}') else { break };
        let shell = rest[..open].ends_with('$');
        if let Some((kind, name)) = after[..close].split_once(':')
            && !shell
        {
            out.push((kind, name));
        }
        rest = &after[close + 1..];
    }
    out
}

/// An instance's command line: `{index}` → `index`, `{output:NAME}` → `outputs[NAME]`,
/// `{input:NAME}` → the paths `inputs[NAME]` (one argument each when the argument is exactly the
/// placeholder; joined by spaces inside a longer argument).
pub fn expand(
    argv: &[String],
    index: &str,
    inputs: &BTreeMap<String, Vec<String>>,
    outputs: &BTreeMap<String, String>,
) -> Vec<String> {
    let mut out = Vec::with_capacity(argv.len());
    for arg in argv {
        if let Some(name) = arg
            .strip_prefix("{input:")
            .and_then(|r| r.strip_suffix('}'))
            .filter(|n| !n.contains('}'))
        {
            out.extend(inputs.get(name).cloned().unwrap_or_default());
            continue;
        }
        let mut s = arg.replace("{index}", index);
        for (name, paths) in inputs {
            s = s.replace(&format!("{{input:{name}}}"), &paths.join(" "));
        }
        for (name, path) in outputs {
            s = s.replace(&format!("{{output:{name}}}"), path);
        }
        out.push(s);
    }
    out
}

/// An empty file in an instance's `out/` that runs on an ANode, shipped with its inputs so that
/// the ANode's temporary directory has `out/` for the command to write its outputs in. No output
/// is named so: a data name never starts with `.` (the parser's `data_name_problem`).
pub const OUT_MARKER: &str = "out/.hetsched-out";

/// What a workflow instance that runs on an ANode (accelerator sharing) is shipped with, in
/// place of its task's command and files.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OffloadedInstance {
    /// The command, its placeholders filled with paths relative to the instance's directory:
    /// `{input:NAME}` → `in/NAME/K` (`K`: the input's position among the instance's inputs),
    /// `{output:NAME}` → `out/NAME`, `{index}` → the index.
    pub argv: Vec<String>,
    /// The files shipped: [`OUT_MARKER`] when it has outputs, then every input, in order.
    pub inputs: Vec<String>,
    /// The outputs written back, by name.
    pub outputs: Vec<String>,
    /// `HETSCHED_PROCESS`: its rank among its index's processes (none for a single process),
    /// which the ANode cannot take from an assignment.
    pub process: Option<String>,
}

/// What instance `index` (rank `process`, 0: none) of a task whose command is `argv` ships to an
/// ANode, given the names of its inputs (in the assignment's order) and of its outputs. The one
/// rule the NNode's agent ships by and the server signs the offload's ticket over (the ticket
/// covers the command the ANode runs): names are data names the parser accepted, each one path
/// component kept as it is.
pub fn offloaded_instance(
    argv: &[String],
    index: u32,
    process: u32,
    inputs: &[&str],
    outputs: &[String],
) -> OffloadedInstance {
    let mut paths: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut shipped = Vec::with_capacity(inputs.len() + 1);
    if !outputs.is_empty() {
        shipped.push(OUT_MARKER.to_string());
    }
    for (k, name) in inputs.iter().enumerate() {
        let path = format!("in/{name}/{k}");
        shipped.push(path.clone());
        paths.entry((*name).to_string()).or_default().push(path);
    }
    let outs: BTreeMap<String, String> = outputs
        .iter()
        .map(|o| (o.clone(), format!("out/{o}")))
        .collect();
    OffloadedInstance {
        argv: expand(argv, &index.to_string(), &paths, &outs),
        inputs: shipped,
        outputs: outs.into_values().collect(),
        process: (process > 0).then(|| process.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::input::workflow::parse_workflow;

    /// The simulator reads a file without commands through the same checks as `submit`: the
    /// balancer line, the instance sizes, and whether some eligible node holds one instance
    /// (the largest eligible node named, an ineligible larger one ignored).
    #[test]
    fn a_simulator_file_gets_submits_balancer_and_size_checks() {
        let text = "balancer = \"centralized\"\n[[task]]\nname = \"A\"\ninstances = 2\n\
                    cost = \"1s\"\ncores = 4\nmemory = \"1GiB\"\ngpus = 1\n";
        let parsed = parse_workflow("wf.toml", text).expect("a simulator's file");
        assert_eq!(file_balancer(&parsed), Ok(Some(BalancerKind::Centralised)));
        let sizes = instance_sizes(&parsed).expect("sizes");
        assert_eq!(sizes, [Resources::new(4, 1 << 30, 1)]);
        let small = Resources::new(2, 1 << 34, 1);
        let big = Resources::new(8, 1 << 34, 1);
        assert_eq!(
            check_instances_fit(&parsed, &sizes, &[small, big], |_, _| true),
            Ok(())
        );
        let e = check_instances_fit(&parsed, &sizes, &[small, big], |_, n| n == 0)
            .expect_err("only the 2-core node is eligible");
        assert_eq!(
            e.to_string(),
            "wf.toml:6:9: task[0].cores: no live node can hold one instance of `A` (4 cores; \
             the largest nodes have 2 cores, 16.0 GiB of memory, 1 GPUs)"
        );
        // No eligible node at all is the `requires` check's to refuse.
        assert_eq!(
            check_instances_fit(&parsed, &sizes, &[small], |_, _| false),
            Ok(())
        );
        let bogus =
            parse_workflow("wf.toml", &text.replace("centralized", "bogus")).expect("parsed");
        assert_eq!(
            file_balancer(&bogus).map_err(|e| e.to_string()),
            Err(
                "wf.toml:1:12: balancer: unknown balancer `bogus`: expected centralised or pcddb"
                    .to_string()
            )
        );
        let zero =
            parse_workflow("wf.toml", &text.replace("cores = 4", "cores = 0")).expect("parsed");
        assert_eq!(
            instance_sizes(&zero).map_err(|e| e.to_string()),
            Err("wf.toml:6:9: task[0].cores: must be at least 1".to_string())
        );
    }

    #[test]
    fn an_offloaded_instance_names_its_files_relative_to_its_directory() {
        let argv = vec![
            "sh".to_string(),
            "-c".into(),
            "cat {input:a} {input:b} > {output:r}; echo {index}".into(),
            "{input:a}".into(),
        ];
        let x = offloaded_instance(
            &argv,
            7,
            2,
            &["a", "b", "a"],
            &["r".to_string(), "q".to_string()],
        );
        assert_eq!(
            x.argv,
            [
                "sh",
                "-c",
                "cat in/a/0 in/a/2 in/b/1 > out/r; echo 7",
                "in/a/0",
                "in/a/2"
            ]
        );
        assert_eq!(x.inputs, [OUT_MARKER, "in/a/0", "in/b/1", "in/a/2"]);
        assert_eq!(x.outputs, ["out/q", "out/r"]);
        assert_eq!(x.process.as_deref(), Some("2"));
        let none = offloaded_instance(&argv, 0, 0, &[], &[]);
        assert!(none.inputs.is_empty() && none.outputs.is_empty() && none.process.is_none());
    }

    const GOOD: &str = r#"balancer = "pcddb"
[[task]]
name = "A"
instances = 3
cost = "1s"
outputs = ["m"]
command = "echo {index} > {output:m}"
retries = 2
[[task]]
name = "B"
instances = 1
cost = "1s"
inputs = ["m"]
outputs = ["r"]
command = ["sumfiles", "{input:m}", "{output:r}"]
env = { X = "1" }
time_limit = "10s"
"#;

    #[test]
    fn the_runtime_fields_are_read_and_checked() {
        let w = parse_runtime_workflow("wf.toml", GOOD).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(w.balancer, Some(BalancerKind::Pcddb));
        assert_eq!(w.tasks[0].argv[..2], ["sh", "-c"]);
        assert_eq!(w.tasks[0].retries, 2);
        assert_eq!(w.tasks[1].time_limit_ns, 10_000_000_000);
        assert_eq!(w.tasks[1].env.get("X").map(String::as_str), Some("1"));
        assert!(is_workflow(GOOD));
        assert!(!is_workflow("[[application]]\nname = \"x\"\n"));
    }

    /// A file with `[[application]]` and `[[task]]` is refused as both kinds, at the first
    /// application's line (the workflow parser called `application` an unknown field).
    #[test]
    fn a_file_with_applications_and_tasks_is_refused_as_both_kinds() {
        let text = format!("{GOOD}\n  [[application]]\nname = \"x\"\ncommand = \"true\"\n");
        let line = text
            .lines()
            .position(|l| l.contains("[[application]]"))
            .map(|i| i + 1);
        let e = parse_runtime_workflow("job.toml", &text)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert_eq!(
            e,
            format!(
                "job.toml:{}:3: a file is either a batch job ([[application]] tables) or a \
                 workflow ([[task]] tables), not both: put the applications and the tasks in \
                 files of their own",
                line.unwrap_or(0)
            )
        );
        assert!(!e.contains("unknown field"), "{e}");
    }

    /// A divisible load beside a workflow's tasks, beside a batch job's applications, or twice:
    /// refused at the table out of place, saying what a file may hold (the workflow parser
    /// called `divisible` an unknown field; the others had no line).
    #[test]
    fn a_file_mixing_a_divisible_load_with_another_kind_is_refused_at_the_table_out_of_place() {
        let load = "[[divisible]]\nname = \"x\"\nunits = 10\ncommand = \"echo {start} {end}\"\n";
        let task = "[[task]]\nname = \"t\"\ninstances = 1\ncommand = \"true\"\n";
        let app =
            "[[application]]\nname = \"a\"\ntasks = 1\n[application.cpu]\ncommand = \"true\"\n";
        for (text, says) in [
            (
                format!("{task}{load}"),
                "job.toml:5:1: a file is either a workflow ([[task]] tables) or one divisible load",
            ),
            (
                format!("{load}{task}"),
                "job.toml:5:1: a file is either a workflow ([[task]] tables) or one divisible load",
            ),
            (
                format!("{app}{load}"),
                "job.toml:6:1: a file is either a batch job ([[application]] tables) or one divisible load",
            ),
            (
                format!("{load}{load}"),
                "job.toml:5:1: a job file holds one [[divisible]] load",
            ),
        ] {
            let e = mixed_kinds("job.toml", &text)
                .map(|e| e.to_string())
                .unwrap_or_default();
            assert!(e.starts_with(says), "{text}\n{e}");
        }
        assert!(mixed_kinds("job.toml", load).is_none());
        assert!(mixed_kinds("job.toml", task).is_none());
        let e = parse_runtime_workflow("job.toml", &format!("{task}{load}"))
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(!e.contains("unknown field"), "{e}");
    }

    #[test]
    fn the_runtime_does_without_costs() {
        let w = parse_runtime_workflow("wf.toml", &GOOD.replace("cost = \"1s\"\n", ""))
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(w.tasks.len(), 2);
        assert_eq!(w.parsed.workflow.tasks[1].depends_on.len(), 1);
    }

    #[test]
    fn an_input_placeholder_must_name_a_consumed_output() {
        let bad = GOOD.replace("{input:m}", "{input:x}");
        let e = parse_runtime_workflow("wf.toml", &bad)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            e.starts_with("wf.toml:15:") && e.contains("task[1].command"),
            "{e}"
        );
        assert!(e.contains("`{input:x}` names no consumed output"), "{e}");
    }

    /// A misspelt placeholder kind (`{outputs:m}`) reached the program as written — a file of
    /// that name in the submission's directory, and an instance that failed for want of its
    /// output: refused with the kind meant. The command's own `{word:…}` (far from both) and
    /// the shell's `${VAR:-x}` are left alone.
    #[test]
    fn a_misspelt_placeholder_kind_is_refused_with_the_one_meant() {
        for (typo, meant) in [("{outputs:m}", "{output:m}"), ("{ouput:m}", "{output:m}")] {
            let bad = GOOD.replace("{output:m}", typo);
            let e = parse_runtime_workflow("wf.toml", &bad)
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default();
            assert!(
                e.contains(&format!(
                    "`{typo}` is no placeholder: did you mean `{meant}`?"
                )),
                "{e}"
            );
        }
        let bad = GOOD.replace("{input:m}", "{inptu:m}");
        let e = parse_runtime_workflow("wf.toml", &bad)
            .err()
            .map(|e| e.to_string());
        assert!(
            e.as_deref()
                .is_some_and(|e| e.contains("did you mean `{input:m}`?")),
            "{e:?}"
        );
        let own = GOOD.replace(
            "{output:m}\"",
            "{output:m}; echo ${HOME:-/} {key:value} {outputfile:x}\"",
        );
        assert!(parse_runtime_workflow("wf.toml", &own).is_ok(), "{own}");
    }

    #[test]
    fn a_task_without_a_command_is_refused_at_its_name() {
        let bad = GOOD.replace("command = \"echo {index} > {output:m}\"\n", "");
        let e = parse_runtime_workflow("wf.toml", &bad)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            e.starts_with("wf.toml:3:") && e.contains("task[0].command"),
            "{e}"
        );
    }

    #[test]
    fn retries_are_bounded_as_a_batch_applications_are() {
        let e = parse_runtime_workflow("wf.toml", &GOOD.replace("retries = 2", "retries = 1000"))
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            e.starts_with("wf.toml:8:") && e.contains("task[0].retries: must be at most 100"),
            "{e}"
        );
    }

    /// A task's `memory` past what a batch task may hold (1 PiB) is refused at parse time, at its
    /// line and column, in the batch bound's words; 1 PiB itself is taken. Before, any figure
    /// was taken, up to 16 EiB.
    #[test]
    fn a_task_memory_past_a_batch_tasks_bound_is_refused_naming_the_field() {
        use crate::input::limits::MAX_TASK_MEMORY;
        let past = MAX_TASK_MEMORY + 1;
        let e = parse_runtime_workflow(
            "wf.toml",
            &GOOD.replace("retries = 2", &format!("retries = 2\nmemory = {past}")),
        )
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
        assert!(
            e.starts_with("wf.toml:9:10: task[0].memory: ")
                && e.contains(&format!(
                    "{past} bytes is more than a task may take, {MAX_TASK_MEMORY} (1 PiB)"
                )),
            "{e}"
        );
        let e = parse_runtime_workflow(
            "wf.toml",
            &GOOD.replace("time_limit = \"10s\"", "memory = \"16EiB\""),
        )
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
        assert!(
            e.starts_with("wf.toml:17:") && e.contains("task[1].memory: "),
            "{e}"
        );
        let w = parse_runtime_workflow(
            "wf.toml",
            &GOOD.replace("retries = 2", "retries = 2\nmemory = \"1PiB\""),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(w.tasks[0].memory_bytes, MAX_TASK_MEMORY);
    }

    #[test]
    fn an_instance_no_node_can_hold_is_refused_at_the_field_it_asks_too_much_of() {
        let w = parse_runtime_workflow(
            "wf.toml",
            &GOOD.replace("retries = 2", "retries = 2\nmemory = \"1PiB\"\ncores = 2"),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let node = |cores, gib: u64| Resources::new(cores, gib << 30, 0);
        let e = w
            .check_fits(&[node(4, 16)])
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            e.starts_with("wf.toml:9:") && e.contains("task[0].memory") && e.contains("1.0 PiB"),
            "{e}"
        );
        // Each alone fits somewhere, not both on one node: the task is named, not one field.
        let w = parse_runtime_workflow(
            "wf.toml",
            &GOOD.replace("retries = 2", "retries = 2\nmemory = \"8GiB\"\ncores = 4"),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let e = w
            .check_fits(&[node(4, 4), node(2, 16)])
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            e.starts_with("wf.toml:3:")
                && e.contains("task[0].name")
                && e.contains("4 cores, 8.0 GiB of memory and 0 GPUs on one node"),
            "{e}"
        );
        assert!(w.check_fits(&[node(4, 4), node(4, 16)]).is_ok());
    }

    #[test]
    fn a_blank_command_is_refused() {
        for blank in [
            "command = \"\"",
            "command = \"  \"",
            "command = []",
            "command = [\" \", \"x\"]",
        ] {
            let bad = GOOD.replace("command = \"echo {index} > {output:m}\"", blank);
            let e = parse_runtime_workflow("wf.toml", &bad)
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default();
            assert!(
                e.contains("task[0].command") && e.contains("must not be empty"),
                "{blank}: {e}"
            );
        }
    }

    #[test]
    fn inputs_expand_to_one_argument_per_path_or_a_spaced_list() {
        let inputs = BTreeMap::from([("m".to_string(), vec!["a".to_string(), "b".to_string()])]);
        let outputs = BTreeMap::from([("r".to_string(), "out/r".to_string())]);
        let argv: Vec<String> = ["p", "{input:m}", "x{index}", "cat {input:m} > {output:r}"]
            .map(String::from)
            .to_vec();
        assert_eq!(
            expand(&argv, "7", &inputs, &outputs),
            ["p", "a", "b", "x7", "cat a b > out/r"]
        );
    }
}
