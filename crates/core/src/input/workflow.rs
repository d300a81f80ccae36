//! Workflow files (TOML): tasks of component instances whose dependencies come from the data flow
//! (spec 05 §3). See `examples/workflow-loop.toml` for a commented example.
//!
//! ```toml
//! [[task]]
//! name = "A"
//! component = "Interp"      # optional, for reports
//! instances = "1..=10"      # an argument range: one instance per value (or an integer count)
//! processes = 4             # optional: MPI-style multiplier, instances × processes
//! cost = "20s"              # per instance on a 1.0-speed core, or { mean = "20s", cv = 0.5 }
//!                           # (cv: 0 to 10)
//! requires = ["gpu"]        # optional: only nodes with these attributes accept it
//! outputs = ["m"]
//! [[task]]
//! name = "B"
//! instances = "1..=10"
//! cost = "5s"
//! inputs = ["m"]
//! ```
//!
//! [`parse_workflow`] checks everything one file can tell (ranges, costs, one producer per output,
//! a producer for every input, no cycles) and derives the dependencies
//! ([`DependencyKind::between`]): a consumer of the same `instances` range and the same
//! `processes` (more than one) as its producer waits, instance by instance, for the producer
//! instance of the same argument value and rank (one-to-one: spec 05's `<map>default</map>`); of
//! the same range and other `processes` — or one process on both sides, the same map — for every
//! process of the producer's same value (instance-wise); of another range, for every producer
//! instance (all-to-all);
//! [`ParsedWorkflow::check_requirements`] checks `requires` against the attributes a cluster
//! offers. The runtime reads the same file; its extra fields (a command, an environment) are new
//! optional fields of [`TaskSpec`], so the simulator and the runtime keep one parser.

use super::cluster::at;
use super::units::Duration;
use super::{InputError, Source, Step};
use crate::model::workflow::{ArgRange, Cost, Dependency, DependencyKind, Workflow, WorkflowTask};
use serde::{Deserialize, Serialize};
use serde_spanned::Spanned;
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// Largest coefficient of variation a lognormal `cost` may have. Past it nearly every sample
/// rounds to 0 ns while a rare one holds the mean (at `cv = 1e300` every cost was 0); 10 already
/// makes the median cost a tenth of the mean.
pub const MAX_COST_CV: f64 = 10.0;

/// Most instances one workflow may have, all its tasks together, processes included: the graph
/// simulator keeps a record of every instance in memory (10 million took 1.9 GB; 100 million,
/// which one task could declare, aborted it), and more is a typo likelier than a workflow.
/// (A runtime workflow holds at most [`MAX_WORKFLOW_INSTANCES`](super::limits::MAX_WORKFLOW_INSTANCES).)
pub const MAX_INSTANCES: u64 = 10_000_000;

/// Most instances one task may declare (values × processes): no more than a whole workflow.
pub const MAX_TASK_INSTANCES: u64 = MAX_INSTANCES;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct WorkflowFile {
    /// The workflow's name (a job's `name`; the runtime's default is the file's name).
    #[serde(default)]
    name: Option<Spanned<String>>,
    #[serde(default)]
    task: Vec<TaskSpec>,
    /// Runtime: `centralised` or `pcddb` (default: the server's).
    #[serde(default)]
    balancer: Option<Spanned<String>>,
}

/// A task as written. Fields the runtime will need later (a command, an environment) are added
/// here as optional fields.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct TaskSpec {
    /// Unique name.
    pub name: Spanned<String>,
    /// Component (reports only).
    pub component: Option<String>,
    /// `"a..=b"`, `"a..b"` or an integer count N (the values 1..=N).
    pub instances: Spanned<toml::Value>,
    /// MPI-style processes per argument value.
    #[serde(default = "one")]
    pub processes: Spanned<u32>,
    /// `"20s"`, a number of seconds, or `{ mean = "20s", cv = 0.5 }` (lognormal, `cv` 0 to
    /// [`MAX_COST_CV`]). The simulator needs it;
    /// the runtime, which runs the real program, does without.
    #[serde(default)]
    pub cost: Option<Spanned<toml::Value>>,
    /// Node attributes an instance needs.
    #[serde(default)]
    pub requires: Vec<Spanned<String>>,
    /// Data items consumed.
    #[serde(default)]
    pub inputs: Vec<Spanned<String>>,
    /// Data items produced.
    #[serde(default)]
    pub outputs: Vec<Spanned<String>>,
    /// Runtime: what an instance runs, with `{index}`, `{input:NAME}` and `{output:NAME}`
    /// placeholders (see [`crate::input::workflow_runtime`]).
    #[serde(default)]
    pub command: Option<Spanned<super::workload::Command>>,
    /// Runtime: environment added to the agent's.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Runtime: wall-clock limit of one instance (at least 1 ms), kept with where it is
    /// written so that a refusal names its line.
    #[serde(default)]
    pub time_limit: Option<Spanned<Duration>>,
    /// Runtime: failed attempts run again this many times.
    #[serde(default)]
    pub retries: Option<Spanned<u32>>,
    /// Runtime: cores one instance holds.
    #[serde(default)]
    pub cores: Option<Spanned<u32>>,
    /// Runtime: memory one instance holds.
    #[serde(default, deserialize_with = "super::units::spanned_byte_size")]
    pub memory: Option<Spanned<bytesize::ByteSize>>,
    /// Runtime: GPUs one instance holds.
    #[serde(default)]
    pub gpus: Option<Spanned<u32>>,
}

fn one() -> Spanned<u32> {
    Spanned::new(0..0, 1)
}

/// A parsed workflow: the model, and the text as written so later checks can still point at the
/// line that is wrong.
#[derive(Clone, Debug)]
pub struct ParsedWorkflow {
    /// Where the text came from.
    pub origin: String,
    /// The text.
    pub text: String,
    /// Tasks as written.
    pub specs: Vec<TaskSpec>,
    /// The checked model with its derived dependencies.
    pub workflow: Workflow,
    /// Runtime: the balancer the file asks for (`balancer =`), and where it is written.
    pub balancer: Option<Spanned<String>>,
    /// The name the file gives the workflow (`name =`), checked as a job's.
    pub name: Option<String>,
}

/// Why `name` cannot name a data item (an entry of a task's `inputs` or `outputs`), if it
/// cannot. The simulator and the runtime accept the same names (one parser), and the rule is
/// what an agent needs of them:
///
/// - a command names the item in a placeholder, `{input:NAME}` or `{output:NAME}`, that the
///   agent fills after `{index}`: a `{` or `}` in the name would break the placeholder (in
///   `{output:x{index}}` the agent's `expand` first makes `{output:x3}`, which names nothing,
///   locally and offloaded alike, and the submission's check of the placeholders misreads it);
/// - the agent keeps the item in a file of that name (`out/NAME`, `in/NAME/K`), so it is one
///   path component that does not start with `.` (`..` would leave the instance's directory, and
///   `out/.hetsched-out` is the agent's own marker) and is not empty; the agent refuses
///   anything else, so it never has to rename an item (`component` mapped `""` to `_`, the
///   name of another item);
/// - a control character would act on the terminal that shows an error quoting the name;
/// - the agent pastes the item's path into the command as it is, a shell line included
///   (`sh -c "sort {input:m} > {output:r}"`): a character a shell splits at or interprets (a
///   blank, a quote, `;`, `$`, `*`…) would break the line or run what follows it (`x;echo hi`
///   ran `echo hi`), so a name is letters, digits and [`DATA_NAME_PUNCTUATION`] only
///   ([`shell_safe`]).
///
/// Its length is bounded for the runtime with an application name's
/// ([`super::limits::check_workflow`]).
pub fn data_name_problem(name: &str) -> Option<String> {
    if name.trim().is_empty() {
        return Some("must not be empty".into());
    }
    // Before the messages that quote the name.
    if name.chars().any(char::is_control) {
        return Some("holds a control character".into());
    }
    if let Some(problem) = crate::text::hidden_problem(name) {
        return Some(problem);
    }
    if name.contains(['{', '}']) {
        return Some(format!(
            "`{name}` holds a `{{` or `}}`; a command names the item in `{{input:NAME}}` or \
             `{{output:NAME}}`, which braces in the name would break"
        ));
    }
    if name.contains(['/', '\\']) {
        return Some(format!(
            "`{name}` holds a `/` or `\\`; an agent keeps the item in a file of that name, so it \
             must be one path component"
        ));
    }
    if name.starts_with('.') {
        return Some(format!(
            "`{name}` starts with `.`; an agent keeps the item in a file of that name (`..` would \
             leave the instance's directory, and names starting with `.` are the agent's own)"
        ));
    }
    if let Some(c) = name.chars().find(|&c| !shell_safe(c)) {
        return Some(format!(
            "`{name}` holds {}; a command gets the item's path pasted in as it is, where a shell \
             would split or interpret it, so a data name is letters, digits and `{}` only",
            char_named(c),
            DATA_NAME_PUNCTUATION
                .chars()
                .map(String::from)
                .collect::<Vec<_>>()
                .join(" ")
        ));
    }
    None
}

/// The punctuation a data name may hold besides letters and digits: characters no shell
/// splits a word at or gives a meaning to inside a path (what [`shell_safe`] accepts).
pub const DATA_NAME_PUNCTUATION: &str = "_.-+@%,=:";

/// Whether `c` may stand in a path that the runtime pastes into a command (a data name, and
/// every component of an agent's work directory): a letter or digit (any script: a shell gives
/// no byte past ASCII a meaning) or one of [`DATA_NAME_PUNCTUATION`]. Not a blank, quote, `$`,
/// backtick, `;`, `&`, `|`, `<`, `>`, parenthesis, glob character (`*`, `?`, `[`, `]`),
/// brace, `~`, `#`, `!` or `\`.
pub fn shell_safe(c: char) -> bool {
    c.is_alphanumeric() || DATA_NAME_PUNCTUATION.contains(c)
}

/// `c` as a message names it: quoted when it shows, by name when it is blank.
pub fn char_named(c: char) -> String {
    match c {
        ' ' => "a space".into(),
        '\t' => "a tab".into(),
        '\n' => "a newline".into(),
        '`' => "a backtick (`` ` ``)".into(),
        c if c.is_whitespace() || c.is_control() => format!("the character U+{:04X}", c as u32),
        c => format!("`{c}`"),
    }
}

/// Why `component` cannot be a task's `component`, if it cannot: it is at most
/// [`MAX_APP_NAME`](super::limits::MAX_APP_NAME) bytes (a task name's bound), without control
/// characters or invisible formatting characters ([`crate::text::unshown_problem`] names the
/// first by its place and code point).
pub fn component_problem(component: &str) -> Option<String> {
    use super::limits::MAX_APP_NAME;
    if component.len() > MAX_APP_NAME {
        return Some(format!(
            "is {} bytes long; at most {MAX_APP_NAME}",
            component.len()
        ));
    }
    crate::text::unshown_problem(component)
}

/// Whether a task must state its cost.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Costs {
    /// The simulator: every task states `cost` (it is how long an instance runs).
    Required,
    /// The runtime: the real program takes what it takes; a missing `cost` reads as zero.
    Optional,
}

/// Parses a workflow file for the simulator (every task states its `cost`), derives the
/// dependencies from the data flow and checks them.
pub fn parse_workflow(origin: &str, text: &str) -> Result<ParsedWorkflow, InputError> {
    parse_workflow_with(origin, text, Costs::Required)
}

/// [`parse_workflow`], with `cost` required or not.
pub fn parse_workflow_with(
    origin: &str,
    text: &str,
    costs: Costs,
) -> Result<ParsedWorkflow, InputError> {
    let src = Source::new(origin, text);
    let file: WorkflowFile = src.parse_toml()?;
    if file.task.is_empty() {
        return Err(src.error(
            None,
            Some("task".into()),
            "no tasks: add at least one [[task]] table",
        ));
    }
    let mut names: HashMap<&str, usize> = HashMap::new();
    let mut tasks = Vec::with_capacity(file.task.len());
    let mut total_instances = 0u64;
    for (i, t) in file.task.iter().enumerate() {
        let field = |f: &str| Some(format!("task[{i}].{f}"));
        let name = t.name.get_ref();
        if name.trim().is_empty() {
            return Err(src.error(at(&t.name), field("name"), "must not be empty"));
        }
        // The runtime's rule for a task name, for the simulator too, before the messages that
        // quote the name (declared twice, a cycle, a missing cost).
        if let Some(problem) = super::limits::app_name_problem(name) {
            return Err(src.error(at(&t.name), field("name"), problem));
        }
        if let Some(first) = names.insert(name, i) {
            return Err(src.error(
                at(&t.name),
                field("name"),
                format!("task `{name}` is declared twice (first as task[{first}])"),
            ));
        }
        let args = arg_range(&src, &t.instances, &format!("task[{i}].instances"))?;
        let processes = *t.processes.get_ref();
        if processes == 0 {
            return Err(src.error(at(&t.processes), field("processes"), "must be at least 1"));
        }
        if args.len().saturating_mul(processes as u64) > MAX_TASK_INSTANCES {
            return Err(src.error(
                at(&t.instances),
                field("instances"),
                format!(
                    "{} values × {processes} processes is more than {MAX_TASK_INSTANCES} instances",
                    args.len()
                ),
            ));
        }
        let instances = args.len() * u64::from(processes);
        total_instances += instances;
        if total_instances > MAX_INSTANCES {
            return Err(src.error(
                at(&t.instances),
                field("instances"),
                format!(
                    "{instances} instances bring the workflow to {total_instances}: at most \
                     {MAX_INSTANCES} instances in all, processes included (the simulator holds \
                     every instance in memory)"
                ),
            ));
        }
        let cost = match (&t.cost, costs) {
            (Some(c), _) => cost(&src, c, i)?,
            (None, Costs::Optional) => Cost::Fixed(0),
            (None, Costs::Required) => {
                return Err(src.error(
                    at(&t.name),
                    field("cost"),
                    format!(
                        "missing: task `{name}` has no cost (the simulator needs the work of one \
                         instance on a 1.0-speed core, e.g. cost = \"20s\")"
                    ),
                ));
            }
        };
        for (j, r) in t.requires.iter().enumerate() {
            if r.get_ref().trim().is_empty() {
                return Err(src.error(
                    at(r),
                    field(&format!("requires[{j}]")),
                    "must not be empty",
                ));
            }
            let name = r.get_ref();
            if name.starts_with(crate::model::cluster::NOT_PREFIX)
                || name.starts_with(crate::model::cluster::NODE_NAME_PREFIX)
            {
                // The balancing protocols match attributes only (each one a bit).
                return Err(src.error(
                    at(r),
                    field(&format!("requires[{j}]")),
                    format!(
                        "`{}`: a workflow task requires node attributes only (`!ATTR` and \
                         `node:NAME` are for batch, divisible and stream jobs)",
                        crate::text::clip(name)
                    ),
                ));
            }
        }
        // Named as a node's attributes are (at most 64, each at most 64 bytes without blanks
        // or control characters), as every other kind's `requires`: one that no node can have
        // was stored by the runtime until a node came, and quoted as written in its messages.
        super::cluster::requirement_list(&src, &t.requires, &format!("task[{i}].requires"))?;
        // Reports and listings show it as written: bounded and without control or invisible
        // formatting characters, as a task's name (a bidi override would make it read otherwise).
        if let Some(component) = &t.component
            && let Some(problem) = component_problem(component)
        {
            return Err(src.error(
                src.value_at(&[Step::Key("task"), Step::Index(i), Step::Key("component")])
                    .or(at(&t.name)),
                field("component"),
                problem,
            ));
        }
        let data = [("inputs", &t.inputs), ("outputs", &t.outputs)];
        for (list, names) in data {
            for (j, n) in names.iter().enumerate() {
                if let Some(problem) = data_name_problem(n.get_ref()) {
                    return Err(src.error(at(n), field(&format!("{list}[{j}]")), problem));
                }
            }
        }
        tasks.push(WorkflowTask {
            name: name.clone(),
            component: t.component.clone(),
            args,
            processes,
            cost,
            requires: t.requires.iter().map(|r| r.get_ref().clone()).collect(),
            inputs: t.inputs.iter().map(|r| r.get_ref().clone()).collect(),
            outputs: t.outputs.iter().map(|r| r.get_ref().clone()).collect(),
            depends_on: Vec::new(),
        });
    }

    // One producer per data item.
    let mut producer: HashMap<&str, usize> = HashMap::new();
    for (i, t) in file.task.iter().enumerate() {
        for (j, o) in t.outputs.iter().enumerate() {
            if let Some(&first) = producer.get(o.get_ref().as_str()) {
                let message = if first == i {
                    format!("output `{}` is listed twice", o.get_ref())
                } else {
                    format!(
                        "output `{}` has two producers: task `{}` and task `{}`",
                        o.get_ref(),
                        file.task[first].name.get_ref(),
                        t.name.get_ref()
                    )
                };
                return Err(src.error(at(o), Some(format!("task[{i}].outputs[{j}]")), message));
            }
            producer.insert(o.get_ref(), i);
        }
    }

    // Dependencies from the data flow.
    for (i, t) in file.task.iter().enumerate() {
        let mut deps: Vec<Dependency> = Vec::new();
        for (j, input) in t.inputs.iter().enumerate() {
            let Some(&p) = producer.get(input.get_ref().as_str()) else {
                return Err(src.error(
                    at(input),
                    Some(format!("task[{i}].inputs[{j}]")),
                    format!(
                        "input `{}` has no producer: no task lists it in `outputs`",
                        input.get_ref()
                    ),
                ));
            };
            match deps.iter_mut().find(|d| d.producer == p) {
                Some(d) => d.data.push(input.get_ref().clone()),
                None => deps.push(Dependency {
                    producer: p,
                    data: vec![input.get_ref().clone()],
                    kind: DependencyKind::between(&tasks[p], &tasks[i]),
                }),
            }
        }
        tasks[i].depends_on = deps;
    }

    if let Some(cycle) = find_cycle(&tasks) {
        let first = cycle[0];
        let path: Vec<&str> = cycle
            .iter()
            .chain(std::iter::once(&first))
            .map(|&k| tasks[k].name.as_str())
            .collect();
        let span = file.task[first]
            .inputs
            .first()
            .and_then(at)
            .or_else(|| at(&file.task[first].name));
        return Err(src.error(
            span,
            Some(format!("task[{first}].inputs")),
            format!(
                "the data flow has a cycle: {} (a task cannot wait for its own results)",
                path.join(" → ")
            ),
        ));
    }

    let name = match &file.name {
        Some(n) => {
            let v = n.get_ref();
            let most = super::workload::MAX_JOB_NAME;
            if v.trim().is_empty() || v.len() > most || v.chars().any(char::is_control) {
                return Err(src.error(
                    at(n),
                    Some("name".into()),
                    format!(
                        "a workflow's name must be 1 to {most} bytes without control characters"
                    ),
                ));
            }
            if let Some(problem) = crate::text::hidden_problem(v) {
                return Err(src.error(at(n), Some("name".into()), problem));
            }
            Some(v.clone())
        }
        None => None,
    };
    Ok(ParsedWorkflow {
        origin: origin.to_string(),
        text: text.to_string(),
        specs: file.task,
        workflow: Workflow { tasks },
        balancer: file.balancer,
        name,
    })
}

/// A cycle of tasks (each waits for the next, the last for the first), starting at its task that
/// comes first in the file; `None` when the graph is acyclic.
fn find_cycle(tasks: &[WorkflowTask]) -> Option<Vec<usize>> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        New,
        OnPath,
        Done,
    }
    let mut mark = vec![Mark::New; tasks.len()];
    for root in 0..tasks.len() {
        if mark[root] != Mark::New {
            continue;
        }
        // Iterative DFS along "waits for" edges; `path` is the current chain.
        let mut path: Vec<(usize, usize)> = vec![(root, 0)];
        mark[root] = Mark::OnPath;
        while let Some(&mut (node, ref mut next)) = path.last_mut() {
            if let Some(dep) = tasks[node].depends_on.get(*next) {
                *next += 1;
                let p = dep.producer;
                match mark[p] {
                    Mark::New => {
                        mark[p] = Mark::OnPath;
                        path.push((p, 0));
                    }
                    Mark::OnPath => {
                        let from = path.iter().position(|&(n, _)| n == p).unwrap_or(0);
                        // The chain runs consumer → producer; report it in data-flow order
                        // (producer → consumer) and start at the earliest task in the file.
                        let mut cycle: Vec<usize> = path[from..].iter().map(|&(n, _)| n).collect();
                        cycle.reverse();
                        let min = cycle
                            .iter()
                            .enumerate()
                            .min_by_key(|&(_, &t)| t)
                            .map_or(0, |(k, _)| k);
                        cycle.rotate_left(min);
                        return Some(cycle);
                    }
                    Mark::Done => {}
                }
            } else {
                mark[node] = Mark::Done;
                path.pop();
            }
        }
    }
    None
}

fn arg_range(
    src: &Source<'_>,
    value: &Spanned<toml::Value>,
    field: &str,
) -> Result<ArgRange, InputError> {
    let bad = |msg: String| src.error(at(value), Some(field.to_string()), msg);
    // Values are indices: `{index}`, `hetsched log JOB TASK:INDEX` and listings take them
    // unsigned (u32).
    let most = i64::from(u32::MAX);
    match value.get_ref() {
        toml::Value::Integer(n) if (1..=most).contains(n) => Ok(ArgRange {
            start: 1,
            end: *n as u32,
        }),
        toml::Value::Integer(n) if *n >= 1 => Err(bad(format!(
            "bad range: a count must be at most {most}, found {n}"
        ))),
        toml::Value::Integer(n) => Err(bad(format!(
            "bad range: a count must be at least 1, found {n}"
        ))),
        toml::Value::String(s) => {
            let text = s.trim();
            let (lo, hi, inclusive) = if let Some((lo, hi)) = text.split_once("..=") {
                (lo, hi, true)
            } else if let Some((lo, hi)) = text.split_once("..") {
                (lo, hi, false)
            } else {
                return Err(bad(format!(
                    "bad range `{s}`: expected \"a..=b\", \"a..b\" or an integer count"
                )));
            };
            let parse = |x: &str| {
                x.trim()
                    .parse::<i64>()
                    .map_err(|_| bad(format!("bad range `{s}`: `{}` is not an integer", x.trim())))
            };
            let (start, hi) = (parse(lo)?, parse(hi)?);
            // Before the other checks: `-1..=1` ran its `-1` as `{index}` 0, and no command
            // can address a negative index (`hetsched log JOB a:-1`).
            if let Some(v) = [start, hi].into_iter().find(|v| *v < 0) {
                return Err(bad(format!(
                    "bad range `{s}`: argument values must be 0 or more, found {v} (an \
                     instance's value is its `{{index}}` and how `hetsched log JOB TASK:INDEX` \
                     names it, which are unsigned)"
                )));
            }
            let end = if inclusive {
                hi
            } else {
                hi.checked_sub(1)
                    .ok_or_else(|| bad(format!("bad range `{s}`: out of bounds")))?
            };
            if end < start {
                return Err(bad(format!("bad range `{s}`: it is empty")));
            }
            if end > most {
                return Err(bad(format!(
                    "bad range `{s}`: argument values must be at most {most}, found {end}"
                )));
            }
            // Both in 0..=u32::MAX: checked above.
            let (Ok(start), Ok(end)) = (u32::try_from(start), u32::try_from(end)) else {
                return Err(bad(format!("bad range `{s}`: out of bounds")));
            };
            Ok(ArgRange { start, end })
        }
        other => Err(bad(format!(
            "bad range: expected \"a..=b\" or an integer count, found a {}",
            other.type_str()
        ))),
    }
}

/// The `index`th task's `cost`, checked.
fn cost(src: &Source<'_>, value: &Spanned<toml::Value>, index: usize) -> Result<Cost, InputError> {
    // `f` is `.KEY` for a key of a `{ mean, cv }` table, refused at that key's value (its place
    // read again from the text: the table is kept as a plain value), else at the cost.
    let bad = |f: &str, msg: String| {
        let place = f.strip_prefix('.').and_then(|key| {
            src.value_at(&[
                Step::Key("task"),
                Step::Index(index),
                Step::Key("cost"),
                Step::Key(key),
            ])
        });
        src.error(
            place.or_else(|| at(value)),
            Some(format!("task[{index}].cost{f}")),
            msg,
        )
    };
    let duration = |v: &toml::Value, f: &str| -> Result<Duration, InputError> {
        let d: Duration = v
            .clone()
            .try_into()
            .map_err(|e: toml::de::Error| bad(f, super::in_words(e.message())))?;
        if d.0 == 0 {
            return Err(bad(f, "must be positive".into()));
        }
        Ok(d)
    };
    match value.get_ref() {
        toml::Value::Table(t) => {
            let keys: BTreeSet<&str> = t.keys().map(String::as_str).collect();
            if let Some(k) = keys.iter().find(|k| !matches!(**k, "mean" | "cv")) {
                return Err(bad(
                    &format!(".{k}"),
                    format!("unknown field `{k}`, expected `mean` or `cv`"),
                ));
            }
            let mean = t
                .get("mean")
                .ok_or_else(|| bad(".mean", "missing: the mean cost, e.g. \"20s\"".into()))?;
            let mean = duration(mean, ".mean")?;
            let cv = match t.get("cv") {
                None => 0.0,
                Some(toml::Value::Float(f)) => *f,
                Some(toml::Value::Integer(n)) => *n as f64,
                Some(v) => {
                    return Err(bad(
                        ".cv",
                        format!("expected a number, found a {}", v.type_str()),
                    ));
                }
            };
            if !(cv.is_finite() && cv >= 0.0) {
                return Err(bad(".cv", "must be a non-negative number".into()));
            }
            if cv > MAX_COST_CV {
                let got = if cv < 1e9 {
                    cv.to_string()
                } else {
                    format!("{cv:e}")
                };
                return Err(bad(
                    ".cv",
                    format!(
                        "must be at most {MAX_COST_CV}, got {got}: a larger spread makes almost \
                         every sampled cost 0"
                    ),
                ));
            }
            Ok(if cv == 0.0 {
                Cost::Fixed(mean.0)
            } else {
                Cost::LogNormal { mean: mean.0, cv }
            })
        }
        v => Ok(Cost::Fixed(duration(v, "")?.0)),
    }
}

impl ParsedWorkflow {
    /// Checks that every requirement is offered by at least one node: `offered` maps each
    /// attribute to the nodes that have it.
    pub fn check_requirements(&self, offered: &BTreeMap<String, usize>) -> Result<(), InputError> {
        let src = Source::new(&self.origin, &self.text);
        for (i, t) in self.specs.iter().enumerate() {
            for (j, r) in t.requires.iter().enumerate() {
                if !offered.contains_key(r.get_ref()) {
                    let known: Vec<&str> = offered.keys().map(String::as_str).collect();
                    return Err(src.error(
                        at(r),
                        Some(format!("task[{i}].requires[{j}]")),
                        format!(
                            "unknown requirement `{}`: no node of the cluster has it (attributes offered: {})",
                            r.get_ref(),
                            if known.is_empty() {
                                "none".to_string()
                            } else {
                                known.join(", ")
                            }
                        ),
                    ));
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<ParsedWorkflow, InputError> {
        parse_workflow("wf.toml", text)
    }

    fn error(text: &str) -> String {
        match parse(text) {
            Ok(_) => panic!("accepted:\n{text}"),
            Err(e) => e.to_string(),
        }
    }

    /// A task's `component` is shown in reports as written: a control character, an invisible
    /// formatting character (a bidi override) or a megabyte of it is refused at its place,
    /// naming the field and the character.
    #[test]
    fn a_component_with_a_control_or_invisible_character_or_too_long_is_refused() {
        let with = |component: &str| {
            format!(
                "[[task]]\nname = \"A\"\ncomponent = \"{component}\"\ninstances = 1\ncost = \"1s\"\n"
            )
        };
        assert_eq!(
            error(&with("In\\u001b[2Jterp")),
            "wf.toml:3:13: task[0].component: character 3 is U+001B (a control character), \
             which is not allowed"
        );
        assert_eq!(
            error(&with("Interp\\u202Efdp.exe")),
            "wf.toml:3:13: task[0].component: character 7 is U+202E RIGHT-TO-LEFT OVERRIDE, \
             which is not allowed"
        );
        assert_eq!(
            error(&with(&"c".repeat(129))),
            "wf.toml:3:13: task[0].component: is 129 bytes long; at most 128"
        );
        let w = parse(&with("Interp (v2)")).expect("a plain component");
        assert_eq!(
            w.workflow.tasks[0].component.as_deref(),
            Some("Interp (v2)")
        );
    }

    #[test]
    fn the_loop_example_gives_instance_wise_dependencies() {
        let w = parse(
            r#"
[[task]]
name = "A"
component = "Interp"
instances = "1..=10"
processes = 4
cost = "20s"
outputs = ["m"]
[[task]]
name = "B"
instances = "1..=10"
cost = { mean = "5s", cv = 0.5 }
inputs = ["m"]
"#,
        )
        .map(|p| p.workflow)
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(w.tasks[0].instances(), 40, "[p4]{{1-10}} is 40 instances");
        assert_eq!(w.tasks[1].instances(), 10);
        assert_eq!(
            w.tasks[1].depends_on,
            vec![Dependency {
                producer: 0,
                data: vec!["m".into()],
                kind: DependencyKind::InstanceWise
            }]
        );
        assert_eq!(
            w.tasks[1].cost,
            Cost::LogNormal {
                mean: 5_000_000_000,
                cv: 0.5
            }
        );
        assert_eq!(w.total_instances(), 50);
    }

    #[test]
    fn the_kind_follows_the_range_and_the_processes() {
        // (consumer's instances, consumer's processes) → its kind on A = [p4]{1-10}.
        for (instances, processes, kind) in [
            ("\"1..=10\"", 4, DependencyKind::OneToOne),
            ("\"1..=10\"", 1, DependencyKind::InstanceWise),
            ("\"1..=10\"", 2, DependencyKind::InstanceWise),
            ("10", 4, DependencyKind::OneToOne),
            ("\"0..10\"", 4, DependencyKind::All),
            ("\"1..=9\"", 4, DependencyKind::All),
        ] {
            let text = format!(
                "[[task]]\nname = \"A\"\ninstances = \"1..=10\"\nprocesses = 4\ncost = \"1s\"\n\
                 outputs = [\"m\"]\n[[task]]\nname = \"B\"\ninstances = {instances}\n\
                 processes = {processes}\ncost = \"1s\"\ninputs = [\"m\"]\n"
            );
            let w = parse(&text).unwrap_or_else(|e| panic!("{e}")).workflow;
            assert_eq!(w.tasks[1].depends_on[0].kind, kind, "{text}");
        }
        // One process on both sides: instance-wise, as before (the one-to-one map is the same).
        let w = parse(
            "[[task]]\nname = \"A\"\ninstances = 3\ncost = \"1s\"\noutputs = [\"m\"]\n\
             [[task]]\nname = \"B\"\ninstances = 3\ncost = \"1s\"\ninputs = [\"m\"]\n",
        )
        .unwrap_or_else(|e| panic!("{e}"))
        .workflow;
        assert_eq!(w.tasks[1].depends_on[0].kind, DependencyKind::InstanceWise);
    }

    #[test]
    fn a_workflow_may_name_itself_as_a_job_file_does() {
        let one = "[[task]]\nname = \"A\"\ninstances = 2\ncost = \"1s\"\n";
        let named = parse(&format!("name = \"nightly\"\n{one}")).expect("named");
        assert_eq!(named.name.as_deref(), Some("nightly"));
        assert_eq!(parse(one).expect("unnamed").name, None);
        let e = error(&format!("name = \"a\\u0007b\"\n{one}"));
        assert!(
            e.starts_with("wf.toml:1:8: name: a workflow's name must be 1 to 256 bytes"),
            "{e}"
        );
    }

    #[test]
    fn different_ranges_wait_for_every_producer_instance() {
        let w = parse(
            r#"
[[task]]
name = "A"
instances = 10
cost = 1
outputs = ["m"]
[[task]]
name = "B"
instances = "0..10"
cost = "1s"
inputs = ["m"]
"#,
        )
        .map(|p| p.workflow)
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(w.tasks[0].args, ArgRange { start: 1, end: 10 });
        assert_eq!(w.tasks[1].args, ArgRange { start: 0, end: 9 });
        assert_eq!(w.tasks[1].depends_on[0].kind, DependencyKind::All);
    }

    #[test]
    fn a_cycle_is_named_at_its_first_task() {
        let e = error(
            r#"[[task]]
name = "A"
instances = 1
cost = "1s"
inputs = ["c"]
outputs = ["a"]
[[task]]
name = "B"
instances = 1
cost = "1s"
inputs = ["a"]
outputs = ["b"]
[[task]]
name = "C"
instances = 1
cost = "1s"
inputs = ["b"]
outputs = ["c"]
"#,
        );
        assert_eq!(
            e,
            "wf.toml:5:11: task[0].inputs: the data flow has a cycle: A → B → C → A (a task cannot wait for its own results)"
        );
    }

    #[test]
    fn a_task_reading_its_own_output_is_a_cycle() {
        let e = error(
            "[[task]]\nname = \"A\"\ninstances = 1\ncost = \"1s\"\ninputs = [\"a\"]\noutputs = [\"a\"]\n",
        );
        assert!(e.contains("cycle: A → A"), "{e}");
    }

    #[test]
    fn a_missing_producer_points_at_the_input() {
        let e = error(
            "[[task]]\nname = \"B\"\ninstances = 1\ncost = \"1s\"\ninputs = [\"x\", \"m\"]\n",
        );
        assert_eq!(
            e,
            "wf.toml:5:11: task[0].inputs[0]: input `x` has no producer: no task lists it in `outputs`"
        );
    }

    /// A data name is written into `{input:NAME}`/`{output:NAME}` and is a file name on the
    /// agents: braces, a path, a leading `.`, nothing at all or a control character are refused
    /// where they are written, for the simulator and the runtime alike (before, `x{index}` was
    /// accepted and its placeholder, filled after `{index}`, named nothing).
    #[test]
    fn data_names_that_break_placeholders_or_paths_are_refused_where_written() {
        let wf = |outputs: &str, inputs: &str| {
            format!(
                "[[task]]\nname = \"A\"\ninstances = 3\ncost = \"1s\"\noutputs = [{outputs}]\n\
                 [[task]]\nname = \"B\"\ninstances = 3\ncost = \"1s\"\ninputs = [{inputs}]\n"
            )
        };
        for (outputs, says) in [
            (
                r#""m", "x{index}""#,
                "wf.toml:5:17: task[0].outputs[1]: `x{index}` holds a `{` or `}`",
            ),
            (
                r#""a}b""#,
                "wf.toml:5:12: task[0].outputs[0]: `a}b` holds a `{` or `}`",
            ),
            (
                r#""{m""#,
                "wf.toml:5:12: task[0].outputs[0]: `{m` holds a `{` or `}`",
            ),
            (
                r#""a/b""#,
                "wf.toml:5:12: task[0].outputs[0]: `a/b` holds a `/`",
            ),
            (
                r#""../up""#,
                "wf.toml:5:12: task[0].outputs[0]: `../up` holds a `/`",
            ),
            (
                r#""a\\b""#,
                "wf.toml:5:12: task[0].outputs[0]: `a\\b` holds a `/`",
            ),
            (
                r#"".x""#,
                "wf.toml:5:12: task[0].outputs[0]: `.x` starts with `.`",
            ),
            (
                r#""""#,
                "wf.toml:5:12: task[0].outputs[0]: must not be empty",
            ),
            (
                r#"" ""#,
                "wf.toml:5:12: task[0].outputs[0]: must not be empty",
            ),
            (
                r#""a\u001bb""#,
                "wf.toml:5:12: task[0].outputs[0]: holds a control character",
            ),
        ] {
            let e = error(&wf(outputs, r#""m""#));
            assert!(e.starts_with(says), "{outputs}: {e}");
        }
        let e = error(&wf(r#""m""#, r#""m{index}""#));
        assert!(
            e.starts_with("wf.toml:10:11: task[1].inputs[0]: `m{index}` holds a `{` or `}`"),
            "{e}"
        );
        // What an agent takes as it is: one path component of letters, digits and the
        // punctuation no shell splits at or interprets.
        assert!(
            parse(&wf(
                r#""m", "a:b", "b.dat", "_x", "v1-2+3@h%4,k=5", "données""#,
                r#""m", "b.dat""#
            ))
            .is_ok()
        );
    }

    /// A data name's path is pasted into the command as it is (`sh -c "… > {output:NAME}"`):
    /// a name a shell would split or interpret is refused where it is written, saying which
    /// characters a name may hold (before, `x;echo INJECTED` ran `echo INJECTED`, and
    /// `my data` wrote a file `my`).
    #[test]
    fn data_names_a_shell_would_split_or_interpret_are_refused_saying_what_is_allowed() {
        let wf = |outputs: &str| {
            format!("[[task]]\nname = \"A\"\ninstances = 1\ncost = \"1s\"\noutputs = [{outputs}]\n")
        };
        for (name, holds) in [
            ("my data", "a space"),
            ("x;echo INJECTED", "`;`"),
            ("a$b", "`$`"),
            ("a'b", "`'`"),
            ("a\\\"b", "`\"`"),
            ("a`b", "a backtick (`` ` ``)"),
            ("a|b", "`|`"),
            ("a&b", "`&`"),
            ("a>b", "`>`"),
            ("a(b", "`(`"),
            ("a*b", "`*`"),
            ("a?b", "`?`"),
            ("a[b", "`[`"),
            ("~a", "`~`"),
            ("a#b", "`#`"),
            ("a!b", "`!`"),
        ] {
            let e = error(&wf(&format!("\"m\", \"{name}\"")));
            let name = name.replace("\\\"", "\"");
            assert!(
                e.starts_with(&format!(
                    "wf.toml:5:17: task[0].outputs[1]: `{name}` holds {holds}; "
                )),
                "{name:?}: {e}"
            );
            assert!(
                e.ends_with("so a data name is letters, digits and `_ . - + @ % , = :` only"),
                "{e}"
            );
        }
        // Inputs too, and the simulator's parse is the runtime's.
        let e = error(
            "[[task]]\nname = \"A\"\ninstances = 1\ncost = \"1s\"\noutputs = [\"m\"]\n\
             [[task]]\nname = \"B\"\ninstances = 1\ncost = \"1s\"\ninputs = [\"m n\"]\n",
        );
        assert!(
            e.starts_with("wf.toml:10:11: task[1].inputs[0]: `m n` holds a space"),
            "{e}"
        );
    }

    /// Argument values are indices (`{index}`, `hetsched log JOB TASK:INDEX`), unsigned: a
    /// negative one is refused where it is written (before, `-1..=1` ran `-1` as `{index}` 0,
    /// beside the real 0), and so is one past u32.
    #[test]
    fn negative_or_too_large_argument_values_are_refused_where_written() {
        let wf = |instances: &str| {
            format!("[[task]]\nname = \"A\"\ninstances = {instances}\ncost = \"1s\"\n")
        };
        for (instances, says) in [
            (
                r#""-1..=1""#,
                "wf.toml:3:13: task[0].instances: bad range `-1..=1`: argument values must be 0 or more, found -1",
            ),
            (
                r#""-5..-2""#,
                "wf.toml:3:13: task[0].instances: bad range `-5..-2`: argument values must be 0 or more, found -5",
            ),
            (
                r#""0..=-1""#,
                "wf.toml:3:13: task[0].instances: bad range `0..=-1`: argument values must be 0 or more, found -1",
            ),
            (
                r#""0..=4294967296""#,
                "wf.toml:3:13: task[0].instances: bad range `0..=4294967296`: argument values must be at most 4294967295",
            ),
            (
                "-3",
                "wf.toml:3:13: task[0].instances: bad range: a count must be at least 1, found -3",
            ),
            (
                "4294967296",
                "wf.toml:3:13: task[0].instances: bad range: a count must be at most 4294967295",
            ),
        ] {
            let e = error(&wf(instances));
            assert!(e.starts_with(says), "{instances}: {e}");
        }
        let w = parse(&wf(r#""0..=2""#))
            .map(|p| p.workflow)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(w.tasks[0].args, ArgRange { start: 0, end: 2 });
        assert_eq!(w.tasks[0].args.value(2), 2);
        let top = parse(&wf(r#""4294967294..=4294967295""#))
            .map(|p| p.workflow)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(top.tasks[0].args.len(), 2);
    }

    #[test]
    fn the_simulator_refuses_a_task_without_a_cost_at_its_name() {
        let text = "[[task]]\nname = \"A\"\ninstances = 1\noutputs = [\"m\"]\n";
        let e = error(text);
        assert!(
            e.starts_with("wf.toml:2:8: task[0].cost: missing: task `A` has no cost"),
            "{e}"
        );
        let w =
            parse_workflow_with("wf.toml", text, Costs::Optional).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(w.workflow.tasks[0].cost, Cost::Fixed(0));
    }

    #[test]
    fn two_producers_of_one_output_are_refused_at_the_second() {
        let e = error(
            "[[task]]\nname = \"A\"\ninstances = 1\ncost = \"1s\"\noutputs = [\"m\"]\n\
             [[task]]\nname = \"B\"\ninstances = 1\ncost = \"1s\"\noutputs = [\"m\"]\n",
        );
        assert_eq!(
            e,
            "wf.toml:10:12: task[1].outputs[0]: output `m` has two producers: task `A` and task `B`"
        );
    }

    #[test]
    fn bad_ranges_say_what_is_wrong() {
        for (range, why) in [
            ("\"5..=1\"", "it is empty"),
            ("\"3..3\"", "it is empty"),
            ("\"1-10\"", "expected \"a..=b\""),
            ("\"a..=3\"", "`a` is not an integer"),
            ("0", "a count must be at least 1"),
            ("1.5", "found a float"),
        ] {
            let e = error(&format!(
                "[[task]]\nname = \"A\"\ninstances = {range}\ncost = \"1s\"\n"
            ));
            assert!(
                e.starts_with("wf.toml:3:13: task[0].instances: bad range"),
                "{e}"
            );
            assert!(e.contains(why), "{range}: {e}");
        }
    }

    #[test]
    fn bad_costs_and_fields_are_located() {
        let e = error("[[task]]\nname = \"A\"\ninstances = 1\ncost = \"fast\"\n");
        assert!(
            e.starts_with("wf.toml:4:8: task[0].cost: invalid duration"),
            "{e}"
        );
        let e = error("[[task]]\nname = \"A\"\ninstances = 1\ncost = { mean = \"1s\", cv = -1 }\n");
        assert!(e.starts_with("wf.toml:4:28: task[0].cost.cv:"), "{e}");
        // A `{ mean, cv }` table's key is refused at its own value, however far below the
        // `[task.cost]` header it is written.
        let e =
            error("[[task]]\nname = \"A\"\ninstances = 1\n[task.cost]\nmean = \"0s\"\n\ncv = 1\n");
        assert!(
            e.starts_with("wf.toml:5:8: task[0].cost.mean: must be positive"),
            "{e}"
        );
        let e =
            error("[[task]]\nname = \"A\"\ninstances = 1\n[task.cost]\nmean = \"1s\"\n\ncv = 50\n");
        assert!(
            e.starts_with("wf.toml:7:6: task[0].cost.cv: must be at most 10, got 50"),
            "{e}"
        );
        // Every cost sampled as 0 under such a spread.
        for cv in ["1e300", "10.5"] {
            let e = error(&format!(
                "[[task]]\nname = \"A\"\ninstances = 1\ncost = {{ mean = \"1s\", cv = {cv} }}\n"
            ));
            assert!(
                e.starts_with("wf.toml:4:28: task[0].cost.cv: must be at most 10, got"),
                "{e}"
            );
        }
        let ok = "[[task]]\nname = \"A\"\ninstances = 1\ncost = { mean = \"1s\", cv = 10 }\n";
        assert!(parse_workflow("wf.toml", ok).is_ok());
        let e = error("[[task]]\nname = \"A\"\ninstances = 1\ncost = \"1s\"\noutput = [\"m\"]\n");
        assert!(e.starts_with("wf.toml:5:1:"), "{e}");
        assert!(e.contains("unknown field `output`"), "{e}");
        let e = error("[[task]]\nname = \"A\"\ninstances = 1\ncost = \"1s\"\nprocesses = 0\n");
        assert!(e.starts_with("wf.toml:5:13: task[0].processes"), "{e}");
        let e = error(
            "[[task]]\nname = \"A\"\ninstances = 1\ncost = \"1s\"\n[[task]]\nname = \"A\"\ninstances = 1\ncost = \"1s\"\n",
        );
        assert!(e.contains("task `A` is declared twice"), "{e}");
        assert!(error("").contains("no tasks"));
    }

    #[test]
    fn an_unknown_requirement_names_what_the_cluster_offers() {
        let p = parse(
            "[[task]]\nname = \"A\"\ninstances = 1\ncost = \"1s\"\nrequires = [\"gpu\", \"fpga\"]\n",
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let offered = BTreeMap::from([("gpu".to_string(), 2), ("bigmem".to_string(), 1)]);
        let e = p.check_requirements(&offered).err().map(|e| e.to_string());
        assert_eq!(
            e.as_deref(),
            Some(
                "wf.toml:5:20: task[0].requires[1]: unknown requirement `fpga`: no node of the cluster has it (attributes offered: bigmem, gpu)"
            )
        );
        let offered = BTreeMap::from([("gpu".to_string(), 2), ("fpga".to_string(), 1)]);
        assert!(p.check_requirements(&offered).is_ok());
        // Negations and node names are for the other kinds: said so, not "unknown".
        let e =
            parse("[[task]]\nname = \"A\"\ninstances = 1\ncost = \"1s\"\nrequires = [\"!gpu\"]\n")
                .err()
                .map(|e| e.to_string());
        assert!(
            e.as_deref().is_some_and(|e| e.starts_with("wf.toml:5:13: task[0].requires[0]: `!gpu`: a workflow task requires node attributes only")),
            "{e:?}"
        );
    }
}
