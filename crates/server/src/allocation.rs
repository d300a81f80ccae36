//! Automatic allocation (HyperQueue's "autoalloc"): the server asks a batch system (Slurm or
//! PBS) for nodes while batch work waits, and the agents it starts there end with the work.
//!
//! Each `[[allocation]]` queue of the configuration is looked at every `refresh`:
//!
//! 1. its allocations are listed from the batch system itself (Slurm: `squeue --noheader --name
//!    NAME --format %i|%T`; PBS: `qselect -N NAME`, then `qselect -N NAME -s RE` for the running
//!    ones; every allocation of a queue carries the job name `hetsched-QUEUE-TAG`, `TAG` kept in
//!    `DATA_DIR/allocation-tag`), so a restarted server sees what it submitted before and
//!    nothing needs storing;
//! 2. the demand: the cores that batch tasks ready to dispatch (pending, not held, not waiting
//!    for other jobs) ask for, counting only tasks the queue's agents could run (its
//!    `attributes`, and a time limit within what an allocation leaves its agents for tasks:
//!    [`QueueConfig::time_for_tasks`]), beyond the free cores of the live nodes that take work
//!    and have those attributes ([`State::allocation_demand`]), less what the earlier queues
//!    of the configuration that serve the same work cover of it ([`plan`]);
//! 3. with demand, allocations are submitted (`sbatch --parsable SCRIPT`, `qsub SCRIPT`): as
//!    many as the missing cores need, beyond those the waiting allocations bring (each at the
//!    cores its agents had last, one per node before any registered: [`to_submit`]), while
//!    fewer than `backlog` wait (in the batch system's queue, or started with no agent
//!    registered yet) and fewer than `max_allocations` exist, unless an operator paused the
//!    queue ([`State::pause_allocations`]) or the queue holds back after failures: refused
//!    submissions, and allocations that ended before any of their agents registered
//!    ([`Failure`]).
//!
//! An allocation runs one agent per node (`srun`; PBS: `pbsdsh` when it has several nodes),
//! started with `--time-limit auto` (the allocation's own time left, from `squeue` or `qstat`,
//! less [`AUTO_MARGIN`]), `--kill-grace` ([`AGENT_KILL_GRACE`]) and `--idle-timeout`: it takes
//! only tasks that end before the allocation does, and gives its nodes back once the work is
//! done. Its script and its output are under `DATA_DIR/allocations/QUEUE/`.

use crate::state::State;
use hetsched_core::model::Resources;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::process::Command;
use tracing::{info, warn};

/// The longest a batch-system command may take before it is given up (a hung `squeue` must not
/// stop the queue for good).
const COMMAND_TIMEOUT: Duration = Duration::from_secs(60);

/// The file holding this server's tag in the job names of its allocations.
pub const TAG_FILE: &str = "allocation-tag";

/// One `[[allocation]]` queue of the server's configuration.
#[derive(Clone, Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QueueConfig {
    /// The queue's name (1 to 32 letters, digits, `-` or `_`): in job names and listings.
    pub name: String,
    /// The batch system: `slurm` or `pbs`.
    pub manager: Manager,
    /// Each allocation's wall time (`sbatch --time`, `qsub -l walltime`): at least what leaves
    /// its agents [`MIN_TASK_TIME`] for tasks ([`QueueConfig::time_for_tasks`]), checked as it is
    /// read so that the error names its line.
    #[serde(deserialize_with = "time_limit")]
    pub time_limit: hetsched_core::input::Duration,
    /// Nodes per allocation, one agent on each (default 1).
    #[serde(default = "one")]
    pub nodes: u32,
    /// The most allocations of this queue at once, waiting or running (default 1).
    #[serde(default = "one")]
    pub max_allocations: u32,
    /// The most allocations of this queue waiting in the batch system's queue at once
    /// (default 1; at most `max_allocations`).
    #[serde(default = "one")]
    pub backlog: u32,
    /// The agents' `--idle-timeout` (default 5 minutes).
    pub idle_timeout: Option<hetsched_core::input::Duration>,
    /// How often the queue is looked at (default 30 s; at least 1 s).
    pub refresh: Option<hetsched_core::input::Duration>,
    /// Where the agents reach the server (default: the address it listens on, which must then
    /// not be a wildcard such as 0.0.0.0).
    pub server: Option<String>,
    /// The attributes the queue's agents offer (given to them as `--attributes`; `gpu`, which
    /// comes with accelerators, is not passed): only ready tasks whose `requires` these satisfy
    /// count as work for this queue, and only GPU-only tasks when they include `gpu`.
    #[serde(default)]
    pub attributes: Vec<String>,
    /// More batch-system arguments, one per item, written as directives after the server's own
    /// (Slurm: `--partition=cpu`, `--account=P`; PBS: `-q workq`, `-A P`, `-l select=2:ncpus=32`).
    #[serde(default)]
    pub args: Vec<String>,
    /// More agent arguments, one per item (`--attributes=bigmem`, `--ca=/shared/ca.pem`).
    #[serde(default)]
    pub agent_args: Vec<String>,
    /// Slurm's programs (default `sbatch` and `squeue` from the server's PATH).
    pub sbatch: Option<PathBuf>,
    /// See `sbatch`.
    pub squeue: Option<PathBuf>,
    /// PBS's programs (default `qsub`, `qselect` and `qdel` from the server's PATH; `qdel` only
    /// for `hetsched allocations --check`).
    pub qsub: Option<PathBuf>,
    /// See `qsub`.
    pub qselect: Option<PathBuf>,
    /// See `qsub`.
    pub qdel: Option<PathBuf>,
    /// The `hetsched` program the agents run (default: this server's own executable; it must be
    /// at the same path on the allocated nodes).
    pub hetsched: Option<PathBuf>,
}

fn one() -> u32 {
    1
}

/// What an agent started with `--time-limit auto` keeps back from its allocation's time left,
/// for its last report to the server before the batch system ends the allocation. The agent
/// (`hetsched agent`) uses this one figure, and the server counts it out of every allocation's
/// time ([`QueueConfig::time_for_tasks`]).
pub const AUTO_MARGIN: Duration = Duration::from_secs(60);

/// The kill grace the server gives its allocations' agents (`--kill-grace`) unless the queue's
/// `agent_args` name one: written into the script rather than left to the agent's default, so
/// that the time the server counts on is the time the agents have.
pub const AGENT_KILL_GRACE: Duration = Duration::from_secs(10);

/// The agent arguments an allocation's script adds on each node, after
/// [`QueueConfig::agent_command`]: its name (host and allocation) and its work directory, on the
/// node's own disk. `agent_args` may not give them.
pub const NODE_ARGS: [&str; 2] = ["--name", "--work-dir"];

/// What an allocation's agent may take to start: from the start of the allocation (when the
/// batch system starts counting its wall time) to the agent asking for its time left. Without
/// it, a task whose time limit is just within the rest would bring allocation after allocation
/// whose agents, a few seconds short, never take it and idle out.
pub const START_ALLOWANCE: Duration = Duration::from_secs(30);

/// The least time an allocation must leave its agents for tasks: a shorter `time_limit` is
/// refused, as its agents would run nothing (or refuse to start at all).
pub const MIN_TASK_TIME: Duration = Duration::from_secs(60);

/// What one allocation's time goes to besides tasks, with the agents' kill grace `grace`.
fn overhead(grace: Duration) -> Duration {
    AUTO_MARGIN
        .saturating_add(grace)
        .saturating_add(START_ALLOWANCE)
}

/// The shortest `time_limit` with the agents' kill grace `grace`.
fn least_time_limit(grace: Duration) -> Duration {
    overhead(grace).saturating_add(MIN_TASK_TIME)
}

/// How `time_limit` is spent, in words: `1m for each agent's last report, …`.
fn overhead_in_words(grace: Duration, grace_from: &str) -> String {
    format!(
        "{} for each agent's last report, its {} kill grace{grace_from} and {} for it to start",
        humantime::format_duration(AUTO_MARGIN),
        humantime::format_duration(grace),
        humantime::format_duration(START_ALLOWANCE)
    )
}

/// The error of a `time_limit` shorter than [`least_time_limit`].
fn too_short(limit: Duration, grace: Duration, grace_from: &str) -> String {
    format!(
        "{} leaves the agents no time for tasks: at least {} ({}, then {} for tasks)",
        humantime::format_duration(limit),
        humantime::format_duration(least_time_limit(grace)),
        overhead_in_words(grace, grace_from),
        humantime::format_duration(MIN_TASK_TIME)
    )
}

/// Reads `time_limit`, refusing one too short for the agents' default kill grace (a longer
/// grace in `agent_args` is checked by [`QueueConfig::validate`]); the reader puts the field and
/// the line before the message.
fn time_limit<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<hetsched_core::input::Duration, D::Error> {
    let t = <hetsched_core::input::Duration as serde::Deserialize>::deserialize(d)?;
    let limit = Duration::from_nanos(t.0);
    if limit < least_time_limit(AGENT_KILL_GRACE) {
        return Err(serde::de::Error::custom(too_short(
            limit,
            AGENT_KILL_GRACE,
            "",
        )));
    }
    Ok(t)
}

/// The batch systems the server allocates from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Manager {
    /// Slurm: `sbatch`, `squeue`, `srun`.
    Slurm,
    /// PBS Professional and OpenPBS: `qsub`, `qselect`, `pbsdsh` (`-l select=N`).
    Pbs,
}

impl Manager {
    /// As the configuration writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            Manager::Slurm => "slurm",
            Manager::Pbs => "pbs",
        }
    }
}

/// The most `[[allocation]]` queues, nodes per allocation, allocations per queue and extra
/// arguments a configuration may give.
const MAX_QUEUES: usize = 16;
const MAX_NODES: u32 = 4096;
const MAX_ALLOCATIONS: u32 = 1000;
const MAX_ARGS: usize = 64;

impl QueueConfig {
    /// Checks the queue `i` of the configuration; the message names the field.
    pub fn validate(&self, i: usize) -> Result<(), String> {
        let at = |field: &str| format!("allocation[{i}].{field}");
        if self.name.is_empty()
            || self.name.len() > 32
            || !self
                .name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        {
            return Err(format!(
                "{}: `{}` must be 1 to 32 letters, digits, `-` or `_`",
                at("name"),
                self.name
            ));
        }
        let grace = self
            .kill_grace()
            .map_err(|(j, e)| format!("{}: {e}", at(&format!("agent_args[{j}]"))))?;
        // Read as it is, `time_limit` was checked against the default kill grace; `agent_args`
        // may give a longer one (or the queue was built without being read).
        let limit = Duration::from_nanos(self.time_limit.0);
        if limit < least_time_limit(grace) {
            let from = if grace == AGENT_KILL_GRACE {
                ""
            } else {
                " (agent_args)"
            };
            return Err(format!(
                "{}: {}",
                at("time_limit"),
                too_short(limit, grace, from)
            ));
        }
        if self.nodes == 0 || self.nodes > MAX_NODES {
            return Err(format!("{}: 1 to {MAX_NODES}", at("nodes")));
        }
        if self.max_allocations == 0 || self.max_allocations > MAX_ALLOCATIONS {
            return Err(format!("{}: 1 to {MAX_ALLOCATIONS}", at("max_allocations")));
        }
        if self.backlog == 0 || self.backlog > self.max_allocations {
            return Err(format!(
                "{}: 1 to max_allocations ({})",
                at("backlog"),
                self.max_allocations
            ));
        }
        let (theirs, other) = match self.manager {
            Manager::Slurm => (
                vec![
                    ("qsub", &self.qsub),
                    ("qselect", &self.qselect),
                    ("qdel", &self.qdel),
                ],
                "PBS",
            ),
            Manager::Pbs => (
                vec![("sbatch", &self.sbatch), ("squeue", &self.squeue)],
                "Slurm",
            ),
        };
        if let Some((field, _)) = theirs.iter().find(|(_, p)| p.is_some()) {
            return Err(format!(
                "{}: a {other} program, but this queue's manager is `{}`",
                at(field),
                self.manager.as_str()
            ));
        }
        if self.refresh().as_secs() < 1 {
            return Err(format!("{}: at least 1s", at("refresh")));
        }
        // Written into the agents' command line: one they would refuse makes every allocation
        // start agents that exit at once.
        if self.idle_timeout.is_some_and(|d| d.0 < 1_000_000_000) {
            return Err(format!(
                "{}: at least 1s (leave it out for 5 minutes)",
                at("idle_timeout")
            ));
        }
        if let Some(url) = &self.server {
            let rest = url
                .strip_prefix("http://")
                .or_else(|| url.strip_prefix("https://"));
            if rest.is_none_or(|r| r.trim_end_matches('/').is_empty()) {
                return Err(format!(
                    "{}: `{}`: write the URL its agents reach the server at, \
                     http://HOST:PORT or https://HOST:PORT",
                    at("server"),
                    url.escape_debug()
                ));
            }
        }
        hetsched_core::model::cluster::attribute_set(self.attributes.iter().map(String::as_str))
            .map_err(|(j, e)| match j {
                Some(j) => format!("{}: {e}", at(&format!("attributes[{j}]"))),
                None => format!("{}: {e}", at("attributes")),
            })?;
        if self.args.len() > MAX_ARGS || self.agent_args.len() > MAX_ARGS {
            return Err(format!("{}: at most {MAX_ARGS} arguments", at("args")));
        }
        // One line of the script each: a newline would start a command of its own.
        if let Some(bad) = self
            .args
            .iter()
            .chain(&self.agent_args)
            .chain(&self.server)
            .find(|a| a.contains(['\n', '\r', '\0']))
        {
            return Err(format!(
                "{}: {bad:?} holds a line break",
                at("args or agent_args")
            ));
        }
        Ok(())
    }

    /// The kill grace of the queue's agents: the `--kill-grace` its `agent_args` give (the last
    /// one, `--kill-grace=D` or `--kill-grace D`), else [`AGENT_KILL_GRACE`], which the script
    /// passes them. An error names the index of the argument in `agent_args`.
    pub fn kill_grace(&self) -> Result<Duration, (usize, String)> {
        const FLAG: &str = "--kill-grace";
        let mut grace = AGENT_KILL_GRACE;
        let mut args = self.agent_args.iter().enumerate();
        while let Some((j, a)) = args.next() {
            let (at, value) = if a == FLAG {
                match args.next() {
                    Some((k, v)) => (k, v.as_str()),
                    None => return Err((j, format!("`{FLAG}` needs a duration after it"))),
                }
            } else if let Some(v) = a.strip_prefix(FLAG).and_then(|v| v.strip_prefix('=')) {
                (j, v)
            } else {
                continue;
            };
            grace = value
                .trim()
                .parse::<humantime::Duration>()
                .map_err(|e| (at, format!("{FLAG} `{value}`: {e}")))?
                .into();
        }
        Ok(grace)
    }

    /// The agents' command line after the `hetsched` program, as the allocation's script runs
    /// it on every node: `agent`, the server's own arguments, then `agent_args`; the script adds
    /// [`NODE_ARGS`] on each node. `server` is the URL the agents reach the server at.
    pub fn agent_command(&self, server: &str, token_file: &Path) -> Vec<String> {
        let mut agent: Vec<String> = vec![
            "agent".into(),
            "--server".into(),
            server.to_string(),
            "--token-file".into(),
            token_file.display().to_string(),
            "--time-limit".into(),
            "auto".into(),
            "--idle-timeout".into(),
            format!("{}s", self.idle_timeout().as_secs().max(1)),
        ];
        // The agents' kill grace is part of the time the server counts on
        // (`QueueConfig::time_for_tasks`): given, unless `agent_args` give their own.
        if !self.gives_kill_grace() {
            agent.push("--kill-grace".into());
            agent.push(format!("{}s", AGENT_KILL_GRACE.as_secs()));
        }
        let given: Vec<&str> = self
            .attributes
            .iter()
            .map(String::as_str)
            .filter(|a| *a != hetsched_core::model::cluster::GPU_ATTRIBUTE)
            .collect();
        if !given.is_empty() {
            agent.push(format!("--attributes={}", given.join(",")));
        }
        agent.extend(self.agent_args.iter().cloned());
        agent
    }

    /// Whether `agent_args` name the agents' kill grace ([`QueueConfig::kill_grace`]).
    fn gives_kill_grace(&self) -> bool {
        self.agent_args
            .iter()
            .any(|a| a == "--kill-grace" || a.starts_with("--kill-grace="))
    }

    /// The time an agent of this queue has for tasks, at most: the allocation's `time_limit`
    /// less what `--time-limit auto` keeps back ([`AUTO_MARGIN`]), the agents' kill grace
    /// (tasks are stopped that long before the agent ends) and [`START_ALLOWANCE`]. A task
    /// with a longer time limit is not work for the queue ([`cores_per_task`]): its agents
    /// would never take it.
    pub fn time_for_tasks(&self) -> Duration {
        // An unreadable `--kill-grace` is refused by `validate`; meanwhile the default.
        let grace = self.kill_grace().unwrap_or(AGENT_KILL_GRACE);
        Duration::from_nanos(self.time_limit.0).saturating_sub(overhead(grace))
    }

    /// [`QueueConfig::time_for_tasks`] and how it comes from `time_limit`, in words.
    pub fn time_for_tasks_in_words(&self) -> String {
        let grace = self.kill_grace().unwrap_or(AGENT_KILL_GRACE);
        format!(
            "{}: its `time_limit`, {}, less {}",
            humantime::format_duration(self.time_for_tasks()),
            humantime::format_duration(Duration::from_nanos(self.time_limit.0)),
            overhead_in_words(grace, "")
        )
    }

    fn refresh(&self) -> Duration {
        self.refresh
            .map_or(Duration::from_secs(30), |d| Duration::from_nanos(d.0))
    }

    fn idle_timeout(&self) -> Duration {
        self.idle_timeout
            .map_or(Duration::from_secs(300), |d| Duration::from_nanos(d.0))
    }
}

/// Whether the agents of queue `q` could run a task of `app`: every attribute it `requires` is
/// among the queue's `attributes`, it has a CPU variant or the queue offers `gpu`, and that
/// variant's time limit (none: any) is within the time the queue's agents have for tasks
/// ([`QueueConfig::time_for_tasks`]).
pub fn serves(q: &QueueConfig, app: &hetsched_core::model::Application) -> bool {
    cores_per_task(q, app, None).is_some()
}

/// Why no queue serves `app` when only its time limit stands in the way: the longest time an
/// allocation of the `queues` that would otherwise serve it leaves its agents for tasks, and
/// how it comes from that queue's `time_limit`. `None` when a queue serves it, or when none
/// would, whatever its time limit. For the submission's refusal and the pending reason.
pub fn time_limit_too_long(
    queues: &[QueueConfig],
    app: &hetsched_core::model::Application,
) -> Option<String> {
    if queues.iter().any(|q| serves(q, app)) {
        return None;
    }
    let q = queues
        .iter()
        .filter(|q| cores_within(q, app, None, Duration::MAX).is_some())
        .max_by_key(|q| q.time_for_tasks())?;
    let limit = [hetsched_core::Variant::Cpu, hetsched_core::Variant::Gpu]
        .into_iter()
        .filter(|&v| app.request(v).is_some())
        .map(|v| app.time_limit(v).unwrap_or(0))
        .min()
        .unwrap_or(0);
    Some(format!(
        "`{}`'s time limit ({}) is longer than queue `{}`'s allocations leave their agents for \
         tasks (at most {})",
        app.name,
        humantime::format_duration(Duration::from_nanos(limit)),
        q.name,
        q.time_for_tasks_in_words()
    ))
}

/// The cores one task of `app` asks of the queue's agents (the fewest among the variants they
/// could run, at least one); `None` when they could run none ([`serves`]). With `node`, what
/// the queue's agents turned out to have ([`QueueStatus::agent_capacity`]), a variant that does
/// not fit on one is not counted, and one that asks for a larger share of a node's memory than
/// of its cores counts as that share of its cores (a task that takes half the memory of a
/// 16-core node holds 8 cores' worth of it).
pub fn cores_per_task(
    q: &QueueConfig,
    app: &hetsched_core::model::Application,
    node: Option<Resources>,
) -> Option<u64> {
    cores_within(q, app, node, q.time_for_tasks())
}

/// [`cores_per_task`], counting only variants whose time limit is within `time`.
fn cores_within(
    q: &QueueConfig,
    app: &hetsched_core::model::Application,
    node: Option<Resources>,
    time: Duration,
) -> Option<u64> {
    use hetsched_core::model::Variant;
    let time = u64::try_from(time.as_nanos()).unwrap_or(u64::MAX);
    let gpu = hetsched_core::model::cluster::GPU_ATTRIBUTE;
    let with_gpus = q.attributes.iter().any(|a| a == gpu);
    // Its agents' names are not known before they start: `node:NAME` is not met, `!node:NAME` is.
    if !hetsched_core::model::cluster::meets(None, &q.attributes, &app.requires) {
        return None;
    }
    [Variant::Cpu, Variant::Gpu]
        .into_iter()
        .filter(|&v| v == Variant::Cpu || with_gpus)
        .filter_map(|v| Some((app.request(v)?, app.time_limit(v).unwrap_or(0))))
        .filter(|&(_, limit)| limit <= time)
        .filter(|(r, _)| node.is_none_or(|n| n.fits(r)))
        .map(|(r, _)| {
            let memory_share = node.filter(|n| n.memory_bytes > 0).map_or(0, |n| {
                (u128::from(r.memory_bytes) * u128::from(n.cores))
                    .div_ceil(u128::from(n.memory_bytes)) as u64
            });
            u64::from(r.cores.max(1)).max(memory_share)
        })
        .min()
        // A multi-node task holds its nodes whole: as many agents' cores (one each before any
        // agent of the queue registered).
        .map(|c| {
            if app.is_multi_node() {
                u64::from(app.nodes) * node.map_or(1, |n| u64::from(n.cores.max(1)))
            } else {
                c
            }
        })
}

/// Checks every queue of a configuration.
pub fn validate(queues: &[QueueConfig]) -> Result<(), String> {
    if queues.len() > MAX_QUEUES {
        return Err(format!("allocation: at most {MAX_QUEUES} queues"));
    }
    for (i, q) in queues.iter().enumerate() {
        q.validate(i)?;
        if queues[..i].iter().any(|p| p.name == q.name) {
            return Err(format!(
                "allocation[{i}].name: `{}` names two queues",
                q.name
            ));
        }
    }
    Ok(())
}

/// One allocation as the batch system lists it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Allocation {
    /// The batch system's job id.
    pub id: String,
    /// Its state there (Slurm's: `PENDING`, `RUNNING`, …; PBS's, as two: `RUNNING` for its
    /// states `R` and `E`, `QUEUED` for the others: queued, held, waiting, …).
    pub state: String,
}

impl Allocation {
    /// Whether its cores are still to come: waiting in the batch system's queue, or given
    /// nodes whose agents have not registered yet (`live_agents` of them live now, `registered`:
    /// any ever did). One whose agents registered and are gone (they left, or died) is ending.
    fn counts_as_waiting(&self, live_agents: usize, registered: bool) -> bool {
        self.waiting() || (live_agents == 0 && !registered)
    }

    /// Waiting in the batch system's queue (not yet given nodes).
    fn waiting(&self) -> bool {
        matches!(
            self.state.as_str(),
            "PENDING"
                | "CONFIGURING"
                | "REQUEUED"
                | "REQUEUE_HOLD"
                | "REQUEUE_FED"
                | "RESIZING"
                | "QUEUED"
        )
    }
}

/// What the server last saw of one queue (`hetsched allocations`).
#[derive(Clone, Debug, serde::Serialize)]
pub struct QueueStatus {
    /// The queue's name.
    pub name: String,
    /// The queue itself (its configuration: `queue.config`).
    #[serde(skip)]
    pub queue: Arc<Queue>,
    /// Its allocations at the last look.
    pub allocations: Vec<Allocation>,
    /// Allocations submitted since the server started.
    pub submitted: u64,
    /// The last failure of the batch system's commands, if the last look failed.
    pub error: Option<String>,
    /// Paused by an operator ([`State::pause_allocations`]; filled in by [`State::allocations`]).
    pub paused: bool,
    /// What one of its agents has (cores, memory, devices; the smallest of each among the
    /// agents of its allocations when last seen); `None` until one has registered. Work that
    /// does not fit is not work for this queue.
    pub agent_capacity: Option<Resources>,
    /// Until when it submits nothing after failures (its submissions, or allocations that
    /// ended before any of their agents registered); the later queues' passes take over its
    /// work meanwhile ([`plan`]).
    #[serde(skip)]
    pub held_until: Option<std::time::Instant>,
    /// Its last look at the batch system failed: it submits nothing until one succeeds.
    #[serde(skip)]
    pub list_failed: bool,
}

/// Every queue's status, shared with the service that lists it.
pub type Statuses = Arc<Mutex<Vec<QueueStatus>>>;

/// What the queues' loops need from the server.
pub struct Context {
    /// The server's state (for the demand).
    pub state: Arc<Mutex<State>>,
    /// The data directory (scripts, outputs, the tag, the agent token).
    pub data_dir: PathBuf,
    /// The URL agents reach the server at, unless a queue names its own.
    pub server_url: Option<String>,
}

/// Starts one loop per queue; they end with the runtime.
pub fn spawn(queues: &[QueueConfig], cx: Context) -> Result<Statuses, String> {
    let statuses: Statuses = Arc::new(Mutex::new(Vec::new()));
    if queues.is_empty() {
        return Ok(statuses);
    }
    let tag =
        tag(&cx.data_dir).map_err(|e| format!("{}: {e}", cx.data_dir.join(TAG_FILE).display()))?;
    let mut made = Vec::with_capacity(queues.len());
    for (i, q) in queues.iter().enumerate() {
        let url = q
            .server
            .clone()
            .or_else(|| cx.server_url.clone())
            .ok_or_else(|| {
                format!(
                    "allocation[{i}].server: the server listens on a wildcard address; name the \
                 address its agents reach it at"
                )
            })?;
        let dir = cx.data_dir.join("allocations").join(&q.name);
        // 0700, as the data directory's directories (0755 before).
        for d in [dir.parent().unwrap_or(&dir), &dir] {
            crate::datadir::create_private_dir(d).map_err(|e| format!("{}: {e}", d.display()))?;
        }
        made.push(Arc::new(Queue {
            job_name: format!("hetsched-{}-{tag}", q.name),
            config: q.clone(),
            url,
            dir,
            data_dir: cx.data_dir.clone(),
        }));
    }
    if let Ok(mut s) = statuses.lock() {
        *s = made
            .iter()
            .map(|queue| QueueStatus {
                name: queue.config.name.clone(),
                queue: queue.clone(),
                allocations: Vec::new(),
                submitted: 0,
                error: None,
                paused: false,
                agent_capacity: None,
                held_until: None,
                list_failed: false,
            })
            .collect();
    }
    let cx = Arc::new(cx);
    for (index, queue) in made.into_iter().enumerate() {
        let mut run = QueueRun {
            queue,
            index,
            failures: 0,
            last_failure: None,
            failing: None,
            hold_until: None,
            node: None,
            known: HashMap::new(),
        };
        let (cx, statuses) = (cx.clone(), statuses.clone());
        tokio::spawn(async move {
            let refresh = run.queue.config.refresh();
            info!(queue = %run.queue.config.name, job_name = %run.queue.job_name, "automatic allocation: looking at the queue every {}; its agents have at most {} for tasks", humantime::format_duration(refresh), run.queue.config.time_for_tasks_in_words());
            loop {
                run.pass(&cx, &statuses).await;
                tokio::time::sleep(refresh).await;
            }
        });
    }
    Ok(statuses)
}

/// This server's tag: 8 random hex digits kept in `DATA_DIR/allocation-tag`.
fn tag(dir: &Path) -> std::io::Result<String> {
    let path = dir.join(TAG_FILE);
    match std::fs::read_to_string(&path) {
        Ok(t) if t.trim().len() == 8 && t.trim().chars().all(|c| c.is_ascii_hexdigit()) => {
            Ok(t.trim().to_string())
        }
        Ok(_) | Err(_) => {
            let t = format!("{:08x}", rand::random::<u32>());
            crate::datadir::write_private(&path, t.as_bytes())?;
            Ok(t)
        }
    }
}
/// A queue as the server runs it: its configuration and what the server made of it (the job
/// name its allocations carry, the URL its agents reach the server at, its directory). Its loop
/// and `hetsched allocations --check` share it.
#[derive(Debug)]
pub struct Queue {
    /// Its configuration.
    pub config: QueueConfig,
    job_name: String,
    url: String,
    dir: PathBuf,
    data_dir: PathBuf,
}

/// A queue's loop: what it keeps from one look to the next.
struct QueueRun {
    queue: Arc<Queue>,
    index: usize,
    /// Failures in a row (submissions, or allocations that ended before any of their agents
    /// registered), the last one's error, which kind it was, and until when nothing is
    /// submitted ([`SUBMIT_BACKOFF_CAP`]).
    failures: u32,
    last_failure: Option<String>,
    failing: Option<Failure>,
    hold_until: Option<std::time::Instant>,
    /// What this queue's agents have, as the last look that saw any found them (the smallest
    /// of each); `None` until then ([`to_submit`], [`State::allocation_demand`]).
    node: Option<Resources>,
    /// The allocations of the last look and those submitted since, each with whether one of
    /// its agents ever registered: one that leaves the batch system's list without that failed.
    known: HashMap<String, bool>,
}

/// What a queue's failures in a row are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Failure {
    /// The batch system refused a submission: a submission that succeeds ends the streak.
    Submit,
    /// An allocation ended before any of its agents registered (an agent that cannot start:
    /// a wrong `hetsched` path or `agent_args`, an allocation too short for `--time-limit
    /// auto`): only an agent that registers ends the streak, as a submission succeeds anyway.
    Start,
}

/// What one look at a queue found ([`to_submit`]).
#[derive(Clone, Copy, Debug)]
struct Demand {
    /// Cores that ready tasks the queue's agents could run ask for.
    wanted_cores: u64,
    /// Free cores of the live nodes that take work and offer the queue's attributes.
    free_cores: u64,
    /// The queue's allocations waiting: queued, or started without a registered agent.
    waiting: u32,
    /// All the queue's allocations.
    total: u32,
    /// The cores of one of its agents, if known.
    node_cores: Option<u32>,
}

/// How many allocations to submit now: enough for the cores the ready work asks for beyond the
/// free ones and those the waiting allocations bring, each allocation counted at `nodes` agents
/// of the cores its agents had (one core each before any registered: never fewer allocations
/// than the work needs), within `backlog` waiting and `max_allocations` in all.
fn to_submit(q: &QueueConfig, d: Demand) -> u32 {
    let per_allocation = u64::from(q.nodes) * u64::from(d.node_cores.unwrap_or(1).max(1));
    let short = d
        .wanted_cores
        .saturating_sub(d.free_cores)
        .saturating_sub(u64::from(d.waiting) * per_allocation);
    let needed = u32::try_from(short.div_ceil(per_allocation)).unwrap_or(u32::MAX);
    needed
        .min(q.backlog.saturating_sub(d.waiting))
        .min(q.max_allocations.saturating_sub(d.total))
}

/// The longest a queue whose submissions keep failing waits before trying again: the wait
/// doubles from twice its `refresh` with each failure in a row, up to this.
const SUBMIT_BACKOFF_CAP: Duration = Duration::from_secs(3600);

/// One queue as a pass sees it, for [`plan`].
#[derive(Clone, Copy, Debug)]
struct Look {
    demand: Demand,
    /// It submits nothing now: paused, holding back after failures, or unable to list its
    /// allocations.
    stopped: bool,
}

/// How many allocations each queue submits now, and how many cores of its work the earlier
/// queues cover, `looks` in configuration order. Work that several queues serve is left to the
/// first of them, as far as its allocations cover it: queue `k` counts the cores of its work
/// less, for each earlier queue `j`, the cores of the work both serve (`overlap(j, k)`) up to
/// what `j`'s waiting allocations and those it submits now bring (all the work it serves
/// while none of its agents has registered: their size is not known). So one waiting task
/// brings one allocation whichever queues could serve it, every queue's pass works the same
/// answer out from the same picture, and a queue that submits nothing (paused, holding back
/// after failures, at its `max_allocations`) leaves the work to the next.
fn plan(
    queues: &[&QueueConfig],
    looks: &[Look],
    mut overlap: impl FnMut(usize, usize) -> u64,
) -> Vec<(u32, u64)> {
    let mut cover: Vec<u64> = Vec::with_capacity(looks.len());
    let mut out = Vec::with_capacity(looks.len());
    for (k, (q, look)) in queues.iter().zip(looks).enumerate() {
        let wanted = look.demand.wanted_cores;
        let mut claimed = 0u64;
        for (j, &c) in cover.iter().enumerate() {
            if c > 0 && claimed < wanted {
                claimed = claimed.saturating_add(overlap(j, k).min(c));
            }
        }
        let d = Demand {
            wanted_cores: wanted.saturating_sub(claimed),
            ..look.demand
        };
        let n = if look.stopped { 0 } else { to_submit(q, d) };
        let coming = u64::from(d.waiting) + u64::from(n);
        cover.push(match d.node_cores {
            _ if coming == 0 => 0,
            None => u64::MAX,
            Some(c) => coming
                .saturating_mul(u64::from(q.nodes))
                .saturating_mul(u64::from(c.max(1))),
        });
        out.push((n, claimed.min(wanted)));
    }
    out
}

/// A queue whose work is what both `a` and `b` serve ([`plan`]): the attributes both offer,
/// and the shorter time for tasks of the two. (A task that requires `!x` of one of them only
/// is counted as both queues' work: the later queue then allocates less, never more.)
fn meet(a: &QueueConfig, b: &QueueConfig) -> QueueConfig {
    let mut m = if a.time_for_tasks() <= b.time_for_tasks() {
        a.clone()
    } else {
        b.clone()
    };
    m.attributes = a
        .attributes
        .iter()
        .filter(|x| b.attributes.contains(x))
        .cloned()
        .collect();
    m
}

/// The smaller of each of two agents' resources, either when only one is known.
fn smaller(a: Option<Resources>, b: Option<Resources>) -> Option<Resources> {
    match (a, b) {
        (Some(a), Some(b)) => Some(Resources::new(
            a.cores.min(b.cores),
            a.memory_bytes.min(b.memory_bytes),
            a.gpus.min(b.gpus),
        )),
        (x, None) | (None, x) => x,
    }
}

/// How many of `allocations` wait for their cores ([`Allocation::counts_as_waiting`]).
fn waiting_of(s: &State, allocations: &[Allocation]) -> u32 {
    let n = allocations
        .iter()
        .filter(|a| {
            let suffix = format!("-{}", a.id);
            a.counts_as_waiting(
                s.live_nodes_ending(&suffix).len(),
                s.has_node_ending(&suffix),
            )
        })
        .count();
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// An earlier queue as its loop last recorded it: the queue, its allocations, what its agents
/// have, and whether it submits nothing now (holding back after failures, or unable to list).
type Earlier = (Arc<Queue>, Vec<Allocation>, Option<Resources>, bool);

/// What one pass decided under the state's lock.
struct Decision {
    room: u32,
    wanted_cores: u64,
    claimed_cores: u64,
    free_cores: u64,
    waiting: u32,
    paused: bool,
    /// Allocations that left the batch system's list before any of their agents registered.
    ended: Vec<String>,
}

impl QueueRun {
    async fn pass(&mut self, cx: &Context, statuses: &Statuses) {
        let allocations = match self.queue.list().await {
            Ok(a) => a,
            Err(e) => {
                warn!(queue = %self.queue.config.name, "automatic allocation: {e}");
                self.record(statuses, None, 0, Some(e));
                return;
            }
        };
        let total = u32::try_from(allocations.len()).unwrap_or(u32::MAX);
        let now = std::time::Instant::now();
        // The earlier queues as their own loops last recorded them ([`plan`]); taken before
        // the state, whose readers lock the statuses while they hold it.
        let earlier: Vec<Earlier> = match statuses.lock() {
            Ok(s) => s
                .iter()
                .take(self.index)
                .map(|st| {
                    let stopped = st.list_failed || st.held_until.is_some_and(|t| now < t);
                    (
                        st.queue.clone(),
                        st.allocations.clone(),
                        st.agent_capacity,
                        stopped,
                    )
                })
                .collect(),
            Err(_) => return,
        };
        let decision = match cx.state.lock() {
            Ok(s) => self.decide(&s, &allocations, total, &earlier, now),
            Err(_) => return,
        };
        let Decision {
            room,
            wanted_cores,
            claimed_cores,
            free_cores,
            waiting,
            paused,
            ended,
        } = decision;
        if !ended.is_empty() {
            let e = self.ended_message(&ended);
            self.fail(Failure::Start, e);
        }
        let mut submitted = 0;
        let mut allocations = allocations;
        let held = self
            .hold_until
            .is_some_and(|t| std::time::Instant::now() < t);
        if room > 0 && !held && !paused {
            for _ in 0..room {
                match self.queue.submit().await {
                    Ok(id) => {
                        info!(queue = %self.queue.config.name, allocation = %id, wanted_cores, claimed_by_earlier_queues = claimed_cores, free_cores, waiting, node = ?self.node, "automatic allocation: submitted an allocation ({} node(s), {})", self.queue.config.nodes, humantime::format_duration(Duration::from_nanos(self.queue.config.time_limit.0)));
                        self.known.insert(id.clone(), false);
                        allocations.push(Allocation {
                            id,
                            state: "PENDING".into(),
                        });
                        submitted += 1;
                        // Allocations whose agents never registered are not redeemed by the
                        // batch system taking one more: only a registering agent is.
                        if self.failing != Some(Failure::Start) {
                            self.reset();
                        }
                    }
                    Err(e) => {
                        // A failing submission (a wrong partition, an account over quota) is
                        // not retried at every look: the wait doubles with each failure.
                        self.fail(Failure::Submit, e);
                        break;
                    }
                }
            }
        }
        self.record(statuses, Some(allocations), submitted, None);
    }

    /// Under the state's lock: which allocations ended without an agent, what this queue's
    /// agents have, and how many allocations to submit ([`plan`]).
    fn decide(
        &mut self,
        s: &State,
        allocations: &[Allocation],
        total: u32,
        earlier: &[Earlier],
        now: std::time::Instant,
    ) -> Decision {
        // An allocation that left the list (ended, or was cancelled) before any of its agents
        // ever registered failed: its agents could not start or reach the server.
        let ended: Vec<String> = self
            .known
            .iter()
            .filter(|&(id, &registered)| {
                !registered
                    && !allocations.iter().any(|a| &a.id == id)
                    && !s.has_node_ending(&format!("-{id}"))
            })
            .map(|(id, _)| id.clone())
            .collect();
        let mut known = HashMap::with_capacity(allocations.len());
        let mut fresh = false;
        let mut smallest: Option<Resources> = None;
        for a in allocations {
            let suffix = format!("-{}", a.id);
            let was = self.known.get(&a.id).copied().unwrap_or(false);
            let registered = s.has_node_ending(&suffix);
            fresh |= registered && !was;
            known.insert(a.id.clone(), was || registered);
            for (_, has) in s.live_nodes_ending(&suffix) {
                smallest = smaller(smallest, Some(has));
            }
        }
        self.known = known;
        // An agent that registers shows the queue's allocations work again.
        if fresh && self.failing == Some(Failure::Start) {
            self.reset();
        }
        if smallest.is_some() {
            self.node = smallest;
        }
        let paused = s.allocation_paused(&self.queue.config.name);
        // Waiting: queued in the batch system, or given nodes whose agents have not
        // registered yet (their cores come soon: not a reason for another allocation).
        let waiting = waiting_of(s, allocations);
        let mut queues: Vec<&QueueConfig> = Vec::with_capacity(earlier.len() + 1);
        let mut nodes = Vec::with_capacity(earlier.len() + 1);
        let mut looks = Vec::with_capacity(earlier.len() + 1);
        for (q, their, node, stopped) in earlier {
            let (wanted, free) = s.allocation_demand(&q.config, *node);
            looks.push(Look {
                demand: Demand {
                    wanted_cores: wanted,
                    free_cores: free,
                    waiting: waiting_of(s, their),
                    total: u32::try_from(their.len()).unwrap_or(u32::MAX),
                    node_cores: node.map(|n| n.cores),
                },
                stopped: *stopped || s.allocation_paused(&q.config.name),
            });
            queues.push(&q.config);
            nodes.push(*node);
        }
        let (wanted, free) = s.allocation_demand(&self.queue.config, self.node);
        looks.push(Look {
            demand: Demand {
                wanted_cores: wanted,
                free_cores: free,
                waiting,
                total,
                node_cores: self.node.map(|n| n.cores),
            },
            stopped: paused || !ended.is_empty() || self.hold_until.is_some_and(|t| now < t),
        });
        queues.push(&self.queue.config);
        nodes.push(self.node);
        let planned = plan(&queues, &looks, |j, k| {
            s.allocation_demand(&meet(queues[j], queues[k]), smaller(nodes[j], nodes[k]))
                .0
        });
        let (room, claimed) = planned.last().copied().unwrap_or((0, 0));
        Decision {
            room,
            wanted_cores: wanted,
            claimed_cores: claimed,
            free_cores: free,
            waiting,
            paused,
            ended,
        }
    }

    /// One more failure in a row: nothing is submitted for twice the `refresh`, doubled with
    /// each further failure, up to [`SUBMIT_BACKOFF_CAP`]; the queue says so until the streak
    /// ends.
    fn fail(&mut self, kind: Failure, e: String) {
        self.failures = self.failures.saturating_add(1);
        self.failing = Some(kind);
        let wait = self
            .queue
            .config
            .refresh()
            .saturating_mul(1 << self.failures.min(20))
            .min(SUBMIT_BACKOFF_CAP);
        self.hold_until = Some(std::time::Instant::now() + wait);
        let e = format!(
            "{e}; submitting again in {} ({} failure(s) in a row)",
            humantime::format_duration(wait),
            self.failures
        );
        warn!(queue = %self.queue.config.name, "automatic allocation: {e}");
        self.last_failure = Some(e);
    }

    /// The streak of failures ends.
    fn reset(&mut self) {
        (
            self.failures,
            self.last_failure,
            self.failing,
            self.hold_until,
        ) = (0, None, None, None);
    }

    /// What the failure of allocations that `ended` before any of their agents registered
    /// says: their ids, and the last line of the last one's output (the agent's error, as a
    /// rule: a wrong `hetsched` path, a bad argument, too little time).
    fn ended_message(&self, ended: &[String]) -> String {
        let mut ids = ended.to_vec();
        ids.sort();
        let shown = |ids: &[String]| {
            let mut words = ids.iter().take(5).cloned().collect::<Vec<_>>().join(", ");
            if ids.len() > 5 {
                words += &format!(" and {} more", ids.len() - 5);
            }
            words
        };
        let Some(last) = ids.last() else {
            return String::new();
        };
        let head = if ids.len() == 1 {
            format!("allocation {last} ended before any of its agents registered")
        } else {
            format!(
                "allocations {} ended before any of their agents registered",
                shown(&ids)
            )
        };
        if !safe_id(last) {
            return head;
        }
        let path = self.queue.dir.join(format!("{last}.out"));
        let whose = if ids.len() == 1 {
            "its output".to_string()
        } else {
            format!("the output of {last}")
        };
        match last_line(&path) {
            Ok(Some(line)) => format!("{head}; {whose} ({}) ends: {line}", path.display()),
            Ok(None) => format!("{head}; {whose} ({}) is empty", path.display()),
            Err(e) => format!("{head}; {whose} ({}): {e}", path.display()),
        }
    }

    /// Records what this look found for `hetsched allocations`, the pending reasons and the
    /// later queues' passes; `list_error`: the look itself failed.
    fn record(
        &self,
        statuses: &Statuses,
        allocations: Option<Vec<Allocation>>,
        submitted: u64,
        list_error: Option<String>,
    ) {
        if let Ok(mut s) = statuses.lock()
            && let Some(st) = s.get_mut(self.index)
        {
            if let Some(a) = allocations {
                st.allocations = a;
            }
            st.list_failed = list_error.is_some();
            // A failure is shown until the streak ends ([`Failure`]).
            st.error = list_error.or_else(|| self.last_failure.clone());
            st.submitted += submitted;
            st.held_until = self.hold_until;
            st.agent_capacity = self.node;
        }
    }
}

/// Whether a job id the batch system listed may name a file (`ID.out`) in the queue's
/// directory.
fn safe_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 128
        && !id.starts_with('.')
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
}

/// The last non-empty line of the file at `path` (of its last 4 KiB), without terminal
/// escapes, control characters and invisible formatting characters, at most 300 characters.
fn last_line(path: &Path) -> std::io::Result<Option<String>> {
    use std::io::{Read, Seek, SeekFrom};
    const TAIL: u64 = 4096;
    let mut f = std::fs::File::open(path)?;
    let len = f.metadata()?.len();
    f.seek(SeekFrom::Start(len.saturating_sub(TAIL)))?;
    let mut buf = Vec::new();
    f.take(TAIL).read_to_end(&mut buf)?;
    let text = String::from_utf8_lossy(&buf);
    Ok(text
        .lines()
        .map(|l| plain(l).trim().to_string())
        .rfind(|l| !l.is_empty())
        .map(|l| l.chars().take(300).collect()))
}

/// `s` without ANSI escape sequences (`ESC [ … letter`), control characters and invisible
/// formatting characters ([`hetsched_core::text::hidden`]: a bidi override would reorder the
/// line every user's `hetsched allocations` shows).
fn plain(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            if chars.next() == Some('[') {
                for d in chars.by_ref() {
                    if d.is_ascii_alphabetic() {
                        break;
                    }
                }
            }
        } else if !c.is_control() && !hetsched_core::text::hidden(c) {
            out.push(c);
        }
    }
    out
}

impl Queue {
    /// The queue's allocations, from `squeue` or `qselect`.
    async fn list(&self) -> Result<Vec<Allocation>, String> {
        let name = self.job_name.as_str();
        match self.config.manager {
            Manager::Slurm => {
                let squeue = program(&self.config.squeue, "squeue");
                let out = run(
                    &squeue,
                    &["--noheader", "--name", name, "--format", "%i|%T"],
                )
                .await?;
                Ok(parse_squeue(&out))
            }
            Manager::Pbs => {
                // `qselect` lists unfinished jobs, so two calls tell the running ones apart
                // (it is in every PBS, unlike `qstat -F json`). A job that starts between
                // them is seen as queued for one look.
                let qselect = program(&self.config.qselect, "qselect");
                let all = run(&qselect, &["-N", name]).await?;
                let running = run(&qselect, &["-N", name, "-s", "RE"]).await?;
                Ok(parse_qselect(&all, &running))
            }
        }
    }

    /// Writes the allocation's script and submits it; its job id.
    async fn submit(&self) -> Result<String, String> {
        let (path, _) = self.write_script("allocation.sh", &self.job_name)?;
        let path_arg = path.display().to_string();
        let (program, out) = match self.config.manager {
            Manager::Slurm => {
                let sbatch = program(&self.config.sbatch, "sbatch");
                let out = run(&sbatch, &["--parsable", &path_arg]).await?;
                (format!("{} --parsable", sbatch.display()), out)
            }
            Manager::Pbs => {
                let qsub = program(&self.config.qsub, "qsub");
                let out = run(&qsub, &[&path_arg]).await?;
                (qsub.display().to_string(), out)
            }
        };
        job_id(&out).ok_or_else(|| format!("`{program}` printed no job id: {out:?}"))
    }

    /// Writes the queue's script for job name `job_name` to `DIR/file`: its path and text.
    fn write_script(&self, file: &str, job_name: &str) -> Result<(PathBuf, String), String> {
        let hetsched = match &self.config.hetsched {
            Some(p) => p.clone(),
            None => std::env::current_exe().map_err(|e| format!("this program's path: {e}"))?,
        };
        let script = self.script(&hetsched, job_name);
        let path = self.dir.join(file);
        // The batch system reads it as the server's user, which submits it.
        crate::datadir::write_private(&path, script.as_bytes())
            .map_err(|e| format!("{}: {e}", path.display()))?;
        Ok((path, script))
    }

    /// `hetsched allocations --check`: whether the batch system would take one of the queue's
    /// allocations, asked without running one; what it said, and the script checked (the
    /// queue's own, named `hetsched-check-QUEUE`, in `DIR/check.sh`). Slurm checks the
    /// partition, account and limits of `sbatch --test-only` and says when the job would start.
    /// PBS has no such test: the script is submitted held (`qsub -h`) and deleted at once.
    pub async fn check(&self) -> (Result<String, String>, String) {
        let name = format!("hetsched-check-{}", self.config.name);
        let (path, script) = match self.write_script("check.sh", &name) {
            Ok(written) => written,
            Err(e) => return (Err(e), String::new()),
        };
        let path_arg = path.display().to_string();
        let answer = match self.config.manager {
            Manager::Slurm => {
                let sbatch = program(&self.config.sbatch, "sbatch");
                // Its answer is on stderr: `sbatch: Job 12 to start at … using 4 processors on
                // nodes n1 in partition cpu`.
                run_both(&sbatch, &["--test-only", &path_arg])
                    .await
                    .map(|(out, err)| format!("{}{}", out.trim(), err.trim()))
            }
            Manager::Pbs => self.check_pbs(&path_arg).await,
        };
        (answer, script)
    }

    async fn check_pbs(&self, path_arg: &str) -> Result<String, String> {
        let qsub = program(&self.config.qsub, "qsub");
        let out = run(&qsub, &["-h", path_arg]).await?;
        let id = job_id(&out)
            .ok_or_else(|| format!("`{} -h` printed no job id: {out:?}", qsub.display()))?;
        let qdel = program(&self.config.qdel, "qdel");
        run(&qdel, &[&id]).await.map_err(|e| {
            format!("PBS took the allocation (job {id}, held), but deleting it failed: {e}; delete it yourself")
        })?;
        Ok(format!(
            "PBS took the allocation as job {id} (submitted held, and deleted)"
        ))
    }

    /// The batch script: one agent per node, named after its host and the allocation.
    fn script(&self, hetsched: &Path, job_name: &str) -> String {
        let q = &self.config;
        let limit = Duration::from_nanos(q.time_limit.0).as_secs();
        let walltime = format!(
            "{}:{:02}:{:02}",
            limit / 3600,
            (limit % 3600) / 60,
            limit % 60
        );
        let mut agent = vec![hetsched.display().to_string()];
        agent.extend(q.agent_command(&self.url, &crate::agent_token_path(&self.data_dir)));
        let agent = agent.iter().map(|a| quote(a)).collect::<Vec<_>>().join(" ");
        let mut s = String::from("#!/bin/sh\n");
        let (job_var, start) = match q.manager {
            Manager::Slurm => {
                s += &format!("#SBATCH --job-name={job_name}\n");
                s += &format!("#SBATCH --nodes={}\n#SBATCH --ntasks-per-node=1\n", q.nodes);
                s += &format!("#SBATCH --time={walltime}\n");
                s += &format!("#SBATCH --output={}\n", self.dir.join("%j.out").display());
                for a in &q.args {
                    s += &format!("#SBATCH {a}\n");
                }
                ("SLURM_JOB_ID", "srun --ntasks-per-node=1 ")
            }
            Manager::Pbs => {
                s += &format!("#PBS -N {job_name}\n");
                // One chunk per host, each host whole: one agent there uses all its cores.
                s += &format!("#PBS -l select={}\n#PBS -l place=scatter:excl\n", q.nodes);
                s += &format!("#PBS -l walltime={walltime}\n");
                // PBS copies a job's output back only at its end and cannot name the file
                // after the job: the script writes it itself, as it goes.
                s += "#PBS -j oe\n";
                s += &format!("#PBS -o {}\n", self.dir.join("pbs.out").display());
                for a in &q.args {
                    s += &format!("#PBS {a}\n");
                }
                let out = quote(&self.dir.display().to_string());
                s += &format!("exec >{out}/\"$PBS_JOBID.out\" 2>&1\n");
                // `pbsdsh` starts the command once on each chunk's host.
                ("PBS_JOBID", if q.nodes > 1 { "pbsdsh -- " } else { "" })
            }
        };
        s += "# Written by the hetsched server for its automatic allocation queue; one agent per node.\n";
        // Made on each node: the agent's name (its host and this allocation) and its work
        // directory, on the node's own temporary disk (its task outputs go with the allocation).
        s += &format!(
            "exec {start}sh -c 'exec \"$0\" \"$@\" --name \"$(hostname)-${job_var}\" \
             --work-dir \"${{TMPDIR:-/tmp}}/hetsched-${job_var}-$(hostname)\"' {agent}\n"
        );
        s
    }
}

/// The batch-system program a queue names, or `name` from the server's PATH.
fn program(set: &Option<PathBuf>, name: &str) -> PathBuf {
    set.clone().unwrap_or_else(|| name.into())
}

/// `s` as one word of a POSIX shell line.
fn quote(s: &str) -> String {
    shlex::try_quote(s).map_or_else(|_| "''".into(), |q| q.into_owned())
}

/// The job id `sbatch --parsable` (`ID` or `ID;CLUSTER`) or `qsub` (`ID.SERVER`) printed.
fn job_id(out: &str) -> Option<String> {
    out.lines()
        .next()
        .and_then(|l| l.split(';').next())
        .map(str::trim)
        .filter(|id| {
            !id.is_empty()
                && id.len() <= 128
                && id
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
        })
        .map(str::to_string)
}

/// Two `qselect` listings, one job id per line: every unfinished job, and the running ones.
fn parse_qselect(all: &str, running: &str) -> Vec<Allocation> {
    let running: Vec<&str> = running.lines().map(str::trim).collect();
    all.lines()
        .map(str::trim)
        .filter(|id| !id.is_empty())
        .map(|id| Allocation {
            id: id.to_string(),
            state: if running.contains(&id) {
                "RUNNING"
            } else {
                "QUEUED"
            }
            .into(),
        })
        .collect()
}

/// `ID|STATE` lines.
fn parse_squeue(out: &str) -> Vec<Allocation> {
    out.lines()
        .filter_map(|l| {
            let (id, state) = l.trim().split_once('|')?;
            Some(Allocation {
                id: id.trim().to_string(),
                state: state.trim().to_string(),
            })
        })
        .collect()
}

/// Runs a batch-system command (bounded by [`COMMAND_TIMEOUT`]); its stdout.
async fn run(program: &Path, args: &[&str]) -> Result<String, String> {
    run_both(program, args).await.map(|(out, _)| out)
}

/// As [`run`]: its stdout and stderr.
async fn run_both(program: &Path, args: &[&str]) -> Result<(String, String), String> {
    let shown = format!("`{} {}`", program.display(), args.join(" "));
    let out = tokio::time::timeout(
        COMMAND_TIMEOUT,
        Command::new(program).args(args).kill_on_drop(true).output(),
    )
    .await
    .map_err(|_| format!("{shown} took more than {}s", COMMAND_TIMEOUT.as_secs()))?
    .map_err(|e| format!("{shown}: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "{shown} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok((
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use hetsched_core::testkit::ScratchDir;
    use std::os::unix::fs::MetadataExt;

    fn queue(text: &str) -> QueueConfig {
        let c = crate::config::ServerConfig::parse("s.toml", text).expect("parses");
        c.allocation.into_iter().next().expect("a queue")
    }

    /// Queue `q` of a server whose data directory is `/d`, tag `0badf00d`.
    fn queue_at_d(q: QueueConfig) -> Queue {
        Queue {
            job_name: format!("hetsched-{}-0badf00d", q.name),
            url: "http://head:7420".into(),
            dir: PathBuf::from("/d/allocations").join(&q.name),
            data_dir: PathBuf::from("/d"),
            config: q,
        }
    }

    #[test]
    fn squeue_lines_are_read_and_waiting_states_told_apart() {
        let a = parse_squeue("101|PENDING\n 102|RUNNING \n\nnonsense\n103|CONFIGURING\n");
        assert_eq!(a.len(), 3);
        assert_eq!(
            a.iter().map(Allocation::waiting).collect::<Vec<_>>(),
            [true, false, true]
        );
        assert_eq!(a[1].id, "102");
    }

    #[test]
    fn the_script_runs_one_named_agent_per_node_with_the_allocations_time() {
        let q = queue(
            "[[allocation]]\nname = \"cpu\"\nmanager = \"slurm\"\ntime_limit = \"1h 30m\"\nnodes = 4\n\
             idle_timeout = \"2m\"\nargs = [\"--partition=short\"]\nagent_args = [\"--attributes=it's\"]\n",
        );
        let run = queue_at_d(q);
        let s = run.script(Path::new("/opt/bin/hetsched"), "hetsched-cpu-0badf00d");
        for line in [
            "#SBATCH --job-name=hetsched-cpu-0badf00d\n",
            "#SBATCH --nodes=4\n",
            "#SBATCH --time=1:30:00\n",
            "#SBATCH --output=/d/allocations/cpu/%j.out\n",
            "#SBATCH --partition=short\n",
        ] {
            assert!(s.contains(line), "{line} in\n{s}");
        }
        let last = s.lines().last().expect("a command");
        assert!(
            last.starts_with("exec srun --ntasks-per-node=1 sh -c"),
            "{last}"
        );
        assert!(
            last.contains(
                "/opt/bin/hetsched agent --server http://head:7420 --token-file /d/agent-token \
                 --time-limit auto --idle-timeout 120s"
            ),
            "{last}"
        );
        // Quoted as one word, quote and all.
        assert!(last.ends_with(r#""--attributes=it's""#), "{last}");
    }

    #[test]
    fn every_argument_reaches_the_agent_as_written() {
        for arg in [
            "plain",
            "it's",
            "a b",
            "$(touch /tmp/x)",
            "`id`",
            "\\\"",
            "*",
            "--x=\"y\"",
        ] {
            let out = std::process::Command::new("sh")
                .arg("-c")
                .arg(format!("printf %s {}", quote(arg)))
                .output()
                .expect("sh");
            assert_eq!(String::from_utf8_lossy(&out.stdout), arg);
        }
    }

    #[test]
    fn bad_queues_are_refused_naming_the_field() {
        let base = "[[allocation]]\nmanager = \"slurm\"\ntime_limit = \"1h\"\n";
        let refused = |extra: &str| {
            let c = crate::config::ServerConfig::parse("s.toml", &format!("{base}{extra}"))
                .expect("parses");
            validate(&c.allocation).expect_err(extra)
        };
        assert_eq!(
            refused("name = \"a b\"\n"),
            "allocation[0].name: `a b` must be 1 to 32 letters, digits, `-` or `_`"
        );
        assert_eq!(
            refused("name = \"q\"\nbacklog = 3\nmax_allocations = 2\n"),
            "allocation[0].backlog: 1 to max_allocations (2)"
        );
        assert_eq!(
            refused("name = \"q\"\nnodes = 0\n"),
            "allocation[0].nodes: 1 to 4096"
        );
        assert!(refused("name = \"q\"\nargs = [\"--x\\nrm -rf /\"]\n").contains("line break"));
        assert_eq!(
            refused("name = \"q\"\nqsub = \"/usr/bin/qsub\"\n"),
            "allocation[0].qsub: a PBS program, but this queue's manager is `slurm`"
        );
        let pbs = |extra: &str| {
            let c = crate::config::ServerConfig::parse(
                "s.toml",
                &format!(
                    "[[allocation]]\nname = \"q\"\nmanager = \"pbs\"\ntime_limit = \"1h\"\n{extra}"
                ),
            )
            .expect("parses");
            validate(&c.allocation)
        };
        assert_eq!(pbs(""), Ok(()));
        assert_eq!(
            pbs("squeue = \"squeue\"\n"),
            Err("allocation[0].squeue: a Slurm program, but this queue's manager is `pbs`".into())
        );
        let e = crate::config::ServerConfig::parse(
            "s.toml",
            "[[allocation]]\nname = \"q\"\nmanager = \"lsf\"\ntime_limit = \"1h\"\n",
        )
        .expect_err("lsf");
        assert!(e.to_string().starts_with("s.toml:3:"), "{e}");
    }

    #[test]
    fn the_pbs_script_asks_for_whole_hosts_and_starts_an_agent_on_each() {
        let q = queue(
            "[[allocation]]\nname = \"cpu\"\nmanager = \"pbs\"\ntime_limit = \"1h 30m\"\nnodes = 3\n\
             idle_timeout = \"2m\"\nargs = [\"-q workq\", \"-A proj\"]\n",
        );
        let mut run = queue_at_d(q);
        let s = run.script(Path::new("/opt/bin/hetsched"), "hetsched-cpu-0badf00d");
        let directives: Vec<&str> = s.lines().filter(|l| l.starts_with("#PBS")).collect();
        assert_eq!(
            directives,
            [
                "#PBS -N hetsched-cpu-0badf00d",
                "#PBS -l select=3",
                "#PBS -l place=scatter:excl",
                "#PBS -l walltime=1:30:00",
                "#PBS -j oe",
                "#PBS -o /d/allocations/cpu/pbs.out",
                "#PBS -q workq",
                "#PBS -A proj",
            ],
            "{s}"
        );
        // Directives first (PBS stops reading them at the first command), then the output.
        assert!(s.contains("#PBS -A proj\nexec >/d/allocations/cpu/\"$PBS_JOBID.out\" 2>&1\n"));
        let last = s.lines().last().expect("a command");
        assert!(
            last.starts_with(
                "exec pbsdsh -- sh -c 'exec \"$0\" \"$@\" --name \"$(hostname)-$PBS_JOBID\" \
                 --work-dir \"${TMPDIR:-/tmp}/hetsched-$PBS_JOBID-$(hostname)\"' /opt/bin/hetsched agent"
            ),
            "{last}"
        );
        // One node: the script itself runs the agent.
        run.config.nodes = 1;
        let s = run.script(Path::new("/opt/bin/hetsched"), "hetsched-cpu-0badf00d");
        assert!(
            s.lines()
                .last()
                .is_some_and(|l| l.starts_with("exec sh -c ")),
            "{s}"
        );
    }

    #[test]
    fn a_multi_node_task_wants_its_nodes_whole() {
        use hetsched_core::testkit::app;
        let q = queue("[[allocation]]\nname = \"q\"\nmanager = \"slurm\"\ntime_limit = \"1h\"\n");
        let one = app("one").cpu(1.0, 0.0).build(hetsched_core::AppId(0));
        let mpi = app("mpi")
            .cpu(1.0, 0.0)
            .nodes(3)
            .build(hetsched_core::AppId(1));
        assert_eq!(cores_per_task(&q, &one, None), Some(1));
        assert_eq!(
            cores_per_task(&q, &mpi, None),
            Some(3),
            "one core per node unseen"
        );
        let agent = Some(Resources::new(8, 16 << 30, 0));
        assert_eq!(cores_per_task(&q, &one, agent), Some(1));
        assert_eq!(
            cores_per_task(&q, &mpi, agent),
            Some(24),
            "three whole 8-core agents"
        );
    }

    #[test]
    fn as_many_allocations_as_the_missing_cores_need_within_the_backlog_and_the_maximum() {
        let mut q = queue(
            "[[allocation]]\nname = \"q\"\nmanager = \"slurm\"\ntime_limit = \"1h\"\nnodes = 2\n\
             max_allocations = 10\nbacklog = 4\n",
        );
        let d = |wanted_cores, free_cores, waiting, total, node_cores| Demand {
            wanted_cores,
            free_cores,
            waiting,
            total,
            node_cores,
        };
        // No agent seen yet: one core per node, never fewer allocations than needed.
        assert_eq!(
            to_submit(&q, d(1, 0, 0, 0, None)),
            1,
            "one task, one allocation"
        );
        assert_eq!(to_submit(&q, d(3, 0, 0, 0, None)), 2, "two nodes each");
        assert_eq!(to_submit(&q, d(100, 0, 0, 0, None)), 4, "the backlog");
        assert_eq!(to_submit(&q, d(3, 3, 0, 0, None)), 0, "free cores suffice");
        // Agents of 8 cores: an allocation brings 16.
        assert_eq!(to_submit(&q, d(17, 0, 0, 0, Some(8))), 2);
        assert_eq!(
            to_submit(&q, d(40, 10, 1, 1, Some(8))),
            1,
            "one waiting brings 16"
        );
        assert_eq!(
            to_submit(&q, d(40, 10, 2, 2, Some(8))),
            0,
            "two waiting bring 32"
        );
        assert_eq!(to_submit(&q, d(1000, 0, 3, 9, Some(8))), 1, "the maximum");
        q.max_allocations = 9;
        assert_eq!(to_submit(&q, d(1000, 0, 0, 9, Some(8))), 0);
        assert_eq!(
            to_submit(&q, d(u64::MAX, 0, 0, 0, Some(0))),
            4,
            "no overflow"
        );
    }

    #[test]
    fn an_allocation_waits_until_its_agents_register_and_ends_once_they_are_gone() {
        let a = |state: &str| Allocation {
            id: "7".into(),
            state: state.into(),
        };
        assert!(a("PENDING").counts_as_waiting(0, false), "queued");
        assert!(a("RUNNING").counts_as_waiting(0, false), "agents starting");
        assert!(!a("RUNNING").counts_as_waiting(2, true), "agents running");
        assert!(
            !a("RUNNING").counts_as_waiting(0, true),
            "agents gone, the batch system not done with it yet"
        );
    }

    #[test]
    fn qsub_and_qselect_output_is_read() {
        assert_eq!(
            job_id("1234.pbs-server01\n").as_deref(),
            Some("1234.pbs-server01")
        );
        assert_eq!(job_id("77;cluster2\n").as_deref(), Some("77"));
        for bad in ["", "\n", "qsub: illegal -l value", "1 2", "$(id)"] {
            assert_eq!(job_id(bad), None, "{bad:?}");
        }
        let a = parse_qselect("10.s\n11.s\n\n12.s\n", "11.s\n");
        assert_eq!(
            a.iter()
                .map(|a| (a.id.as_str(), a.state.as_str(), a.waiting()))
                .collect::<Vec<_>>(),
            [
                ("10.s", "QUEUED", true),
                ("11.s", "RUNNING", false),
                ("12.s", "QUEUED", true)
            ]
        );
    }

    /// A 10-minute allocation leaves its agents 8m 20s for tasks (less the minute `--time-limit
    /// auto` keeps, the 10 s kill grace the script gives them and 30 s for them to start): a
    /// task of 10 minutes is no work for the queue, whose agents would never take it (each
    /// allocation's agent idled out, and the next came, forever).
    #[test]
    fn only_tasks_within_the_time_an_allocation_leaves_its_agents_are_work_for_the_queue() {
        use hetsched_core::testkit::app;
        let q = queue("[[allocation]]\nname = \"q\"\nmanager = \"slurm\"\ntime_limit = \"10m\"\n");
        assert_eq!(q.time_for_tasks(), Duration::from_secs(500));
        let limited = |t: &str| {
            let ns = humantime::parse_duration(t).expect(t).as_nanos() as u64;
            let mut a = app("sim").cpu(1.0, 0.0).build(hetsched_core::AppId(0));
            if let Some(c) = a.cpu.as_mut() {
                c.time_limit = Some(ns);
            }
            a
        };
        assert!(!serves(&q, &limited("10m")), "the queue's whole time_limit");
        assert!(!serves(&q, &limited("8m 21s")));
        assert!(serves(&q, &limited("8m 20s")));
        assert_eq!(cores_per_task(&q, &limited("8m 21s"), None), None);
        assert_eq!(
            time_limit_too_long(std::slice::from_ref(&q), &limited("10m")).as_deref(),
            Some(
                "`sim`'s time limit (10m) is longer than queue `q`'s allocations leave their \
                 agents for tasks (at most 8m 20s: its `time_limit`, 10m, less 1m for each \
                 agent's last report, its 10s kill grace and 30s for it to start)"
            )
        );
        assert_eq!(
            time_limit_too_long(std::slice::from_ref(&q), &limited("5m")),
            None
        );
        // A kill grace of the queue's own, in `agent_args`, is the agents' (and no other is
        // given them).
        let graced = |args: &str| {
            queue(&format!(
                "[[allocation]]\nname = \"q\"\nmanager = \"slurm\"\ntime_limit = \"10m\"\n\
                 agent_args = [{args}]\n"
            ))
        };
        let q2 = graced("\"--kill-grace=1m\"");
        assert_eq!(q2.time_for_tasks(), Duration::from_secs(450));
        let q3 = graced("\"--cores\", \"2\", \"--kill-grace\", \"2m\"");
        assert_eq!(q3.time_for_tasks(), Duration::from_secs(390));
        let script = queue_at_d(q3).script(Path::new("/h"), "j");
        assert_eq!(script.matches("--kill-grace").count(), 1, "{script}");
        let script = queue_at_d(q).script(Path::new("/h"), "j");
        assert!(
            script.contains(" --idle-timeout 300s --kill-grace 10s"),
            "{script}"
        );
    }

    /// A `time_limit` that leaves the agents no time for tasks is refused, naming the field,
    /// its line and the least one (`--time-limit auto` refused to start the agents of a
    /// `1m` queue, whose allocations then came one after the other).
    #[test]
    fn a_time_limit_too_short_for_the_agents_is_refused_naming_its_line_and_the_least() {
        let text = "[[allocation]]\nname = \"tiny\"\nmanager = \"slurm\"\ntime_limit = \"70s\"\n";
        let e = crate::config::ServerConfig::parse("s.toml", text).expect_err("70s");
        assert_eq!(
            e.to_string(),
            "s.toml:4:14: allocation[0].time_limit: 1m 10s leaves the agents no time for \
             tasks: at least 2m 40s (1m for each agent's last report, its 10s kill grace and \
             30s for it to start, then 1m for tasks)"
        );
        assert!(
            crate::config::ServerConfig::parse("s.toml", &text.replace("70s", "2m 40s")).is_ok()
        );
        // A longer kill grace in `agent_args` asks for more.
        let c = crate::config::ServerConfig::parse(
            "s.toml",
            &text.replace("\"70s\"\n", "\"3m\"\nagent_args = [\"--kill-grace=1m\"]\n"),
        )
        .expect("parses");
        assert_eq!(
            validate(&c.allocation),
            Err(
                "allocation[0].time_limit: 3m leaves the agents no time for tasks: at least \
                 3m 30s (1m for each agent's last report, its 1m kill grace (agent_args) and \
                 30s for it to start, then 1m for tasks)"
                    .into()
            )
        );
        let c = crate::config::ServerConfig::parse(
            "s.toml",
            &text.replace(
                "\"70s\"\n",
                "\"1h\"\nagent_args = [\"--cores=2\", \"--kill-grace=soon\"]\n",
            ),
        )
        .expect("parses");
        let e = validate(&c.allocation).expect_err("soon");
        assert!(
            e.starts_with("allocation[0].agent_args[1]: --kill-grace `soon`: "),
            "{e}"
        );
        let c = crate::config::ServerConfig::parse(
            "s.toml",
            &text.replace("\"70s\"\n", "\"1h\"\nagent_args = [\"--kill-grace\"]\n"),
        )
        .expect("parses");
        assert_eq!(
            validate(&c.allocation),
            Err("allocation[0].agent_args[0]: `--kill-grace` needs a duration after it".into())
        );
    }

    /// Queue `name` whose demand is `wanted` cores (none free), with `waiting` of its `total`
    /// allocations waiting and agents of `node_cores` cores.
    fn look(wanted: u64, waiting: u32, total: u32, node_cores: Option<u32>) -> Look {
        Look {
            demand: Demand {
                wanted_cores: wanted,
                free_cores: 0,
                waiting,
                total,
                node_cores,
            },
            stopped: false,
        }
    }

    /// Work that several queues serve is allocated for once, by the first of them in the
    /// configuration that can: each queue had submitted its own allocation for the same task.
    #[test]
    fn work_several_queues_serve_is_allocated_for_once_by_the_first_that_can() {
        let q = |name: &str, extra: &str| {
            queue(&format!(
                "[[allocation]]\nname = \"{name}\"\nmanager = \"slurm\"\ntime_limit = \"1h\"\n\
                 max_allocations = 10\nbacklog = 2\n{extra}"
            ))
        };
        let (q1, q2, q3) = (q("q1", ""), q("q2", ""), q("q3", "nodes = 2\n"));
        let queues = [&q1, &q2, &q3];
        let all = |_: usize, _: usize| 1;
        // One task, three queues that serve it: one allocation, the first queue's.
        let none_known = [
            look(1, 0, 0, None),
            look(1, 0, 0, None),
            look(1, 0, 0, None),
        ];
        assert_eq!(
            plan(&queues, &none_known, all),
            [(1, 0), (0, 1), (0, 1)],
            "one task, one allocation"
        );
        // The first queue's allocation waits: still none from the others.
        let waiting = [
            look(1, 1, 1, None),
            look(1, 0, 0, None),
            look(1, 0, 0, None),
        ];
        assert_eq!(
            plan(&queues, &waiting, all)
                .iter()
                .map(|p| p.0)
                .sum::<u32>(),
            0
        );
        // Paused or holding back, the first leaves the work to the second.
        let mut stopped = none_known;
        stopped[0].stopped = true;
        assert_eq!(
            plan(&queues, &stopped, all)
                .iter()
                .map(|p| p.0)
                .collect::<Vec<_>>(),
            [0, 1, 0]
        );
        // At its maximum too.
        let full = [
            look(1, 0, 10, None),
            look(1, 0, 0, None),
            look(1, 0, 0, None),
        ];
        assert_eq!(
            plan(&queues, &full, all)
                .iter()
                .map(|p| p.0)
                .collect::<Vec<_>>(),
            [0, 1, 0]
        );
        // Agents of 4 cores known everywhere, 20 cores of work they all serve: the first
        // queue's backlog brings 8, the second's 8, the third (two nodes each) the last 4.
        let known = [
            look(20, 0, 0, Some(4)),
            look(20, 0, 0, Some(4)),
            look(20, 0, 0, Some(4)),
        ];
        let twenty = |_: usize, _: usize| 20;
        assert_eq!(
            plan(&queues, &known, twenty),
            [(2, 0), (2, 8), (1, 16)],
            "each queue beyond what the earlier ones bring"
        );
        // Work only the second serves is not the first's to cover: two queues, one task each.
        let disjoint = |_: usize, _: usize| 0;
        assert_eq!(
            plan(&queues[..2], &none_known[..2], disjoint),
            [(1, 0), (1, 0)]
        );
    }

    /// A stand-in Slurm in `dir`: `sbatch` numbers the jobs 101, 102, … and notes each in
    /// `submitted`; `squeue` lists those of the name asked as `PENDING` (`RUNNING` once
    /// `job-ID.running` is in `dir`), unless `ended` is in `dir` (they end at once: each job's
    /// output file then says `Error: boom`).
    fn stand_in_slurm(dir: &Path) {
        use std::os::unix::fs::PermissionsExt;
        for (name, text) in [
            (
                "sbatch",
                r#"#!/bin/sh
D=$(dirname "$0")
n=$(( $(cat "$D/next" 2>/dev/null || echo 100) + 1 )); echo $n > "$D/next"
sed -n 's/^#SBATCH --job-name=//p' "$2" > "$D/job-$n.name"
echo "$n" >> "$D/submitted"
if [ -e "$D/ended" ]; then
  out=$(sed -n 's/^#SBATCH --output=//p' "$2" | sed "s/%j/$n/")
  printf 'starting\n\033[31mError:\033[0m boom\n\n' > "$out"
  touch "$D/job-$n.ended"
fi
echo "$n"
"#,
            ),
            (
                "squeue",
                r#"#!/bin/sh
D=$(dirname "$0")
for f in "$D"/job-*.name; do
  [ -e "$f" ] || continue
  n=${f##*/job-}; n=${n%.name}
  [ "$(cat "$f")" = "$3" ] && [ ! -e "$D/job-$n.ended" ] || continue
  if [ -e "$D/job-$n.running" ]; then echo "$n|RUNNING"; else echo "$n|PENDING"; fi
done
exit 0
"#,
            ),
        ] {
            let p = dir.join(name);
            std::fs::write(&p, text).expect("write");
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        }
    }

    /// The allocations submitted so far, in order.
    fn submitted(dir: &Path) -> Vec<String> {
        std::fs::read_to_string(dir.join("submitted"))
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect()
    }

    /// A server's state and queues `names` (at most two allocations each, one waiting) on the
    /// stand-in Slurm of `dir`, each with its loop
    /// (not started: the test runs each pass), and the statuses they share with the state.
    fn queues_on(
        dir: &Path,
        names: &[&str],
    ) -> (Context, Statuses, Vec<QueueRun>, Arc<Mutex<State>>) {
        stand_in_slurm(dir);
        let configs: Vec<QueueConfig> = names
            .iter()
            .map(|n| {
                queue(&format!(
                    "[[allocation]]\nname = \"{n}\"\nmanager = \"slurm\"\ntime_limit = \"10m\"\n\
                     refresh = \"1s\"\nmax_allocations = 2\nsbatch = \"{0}/sbatch\"\nsqueue = \"{0}/squeue\"\n",
                    dir.display()
                ))
            })
            .collect();
        let config = crate::ServerConfig {
            data_dir: dir.to_path_buf(),
            allocation: configs.clone(),
            ..Default::default()
        };
        let store = crate::store::Store::open(&dir.join("state.db")).expect("store");
        let state = Arc::new(Mutex::new(State::open(&config, store).expect("state")));
        let runs: Vec<QueueRun> = configs
            .into_iter()
            .enumerate()
            .map(|(index, config)| {
                let d = dir.join("allocations").join(&config.name);
                std::fs::create_dir_all(&d).expect("dir");
                QueueRun {
                    queue: Arc::new(Queue {
                        job_name: format!("hetsched-{}-0badf00d", config.name),
                        url: "http://head:7420".into(),
                        dir: d,
                        data_dir: dir.to_path_buf(),
                        config,
                    }),
                    index,
                    failures: 0,
                    last_failure: None,
                    failing: None,
                    hold_until: None,
                    node: None,
                    known: HashMap::new(),
                }
            })
            .collect();
        let statuses: Statuses = Arc::new(Mutex::new(
            runs.iter()
                .map(|r| QueueStatus {
                    name: r.queue.config.name.clone(),
                    queue: r.queue.clone(),
                    allocations: Vec::new(),
                    submitted: 0,
                    error: None,
                    paused: false,
                    agent_capacity: None,
                    held_until: None,
                    list_failed: false,
                })
                .collect(),
        ));
        if let Ok(mut s) = state.lock() {
            s.set_allocations(statuses.clone());
        }
        let cx = Context {
            state: state.clone(),
            data_dir: dir.to_path_buf(),
            server_url: None,
        };
        (cx, statuses, runs, state)
    }

    /// Submits a job of one one-core task `app` to `state`: its id.
    fn one_task(state: &Arc<Mutex<State>>, app: &str) -> u64 {
        use crate::convert::Wire;
        state
            .lock()
            .expect("state")
            .submit(
                "job.toml",
                &format!(
                    "[[application]]\nname = \"{app}\"\ntasks = 1\n[application.cpu]\n\
                     command = \"true\"\n"
                ),
                "/",
            )
            .expect("submitted")
            .job_id
    }

    /// A scratch directory for test `name`, removed when the test passes.
    fn scratch(name: &str) -> ScratchDir {
        ScratchDir::new("allocation", name)
    }

    /// The queue whose job allocation `id` is (its job name).
    fn queue_of(dir: &Path, id: &str) -> String {
        std::fs::read_to_string(dir.join(format!("job-{id}.name")))
            .unwrap_or_default()
            .trim()
            .to_string()
    }

    /// Three queues that could all serve a one-core task: one allocation comes for it, the
    /// first queue's, whichever queue looks first (each brought its own: three nodes for one
    /// task). While the size of its agents is not known, its waiting allocation covers all
    /// the work; once known (1 core), what it does not cover goes to the next queue.
    #[tokio::test]
    async fn one_task_brings_one_allocation_whichever_queues_could_serve_it() {
        use crate::convert::Wire;
        let dir = scratch("once");
        let (cx, statuses, mut runs, state) = queues_on(&dir, &["q1", "q2", "q3"]);
        one_task(&state, "a");
        // The later queues look first: they leave the task to the first.
        for i in [2, 1, 0, 2, 1, 0] {
            runs[i].pass(&cx, &statuses).await;
        }
        assert_eq!(submitted(&dir), ["101"], "one allocation");
        assert_eq!(queue_of(&dir, "101"), "hetsched-q1-0badf00d");
        // Another task while it waits, its agents' size unknown: nothing more.
        one_task(&state, "b");
        for i in [2, 1, 0] {
            runs[i].pass(&cx, &statuses).await;
        }
        assert_eq!(submitted(&dir), ["101"]);
        // Its agent (one core) registers and takes a task; the other brings an allocation of
        // the first queue (its backlog has room again).
        std::fs::write(dir.join("job-101.running"), "").expect("running");
        {
            let mut s = state.lock().expect("state");
            let node = s
                .register(hetsched_proto::RegisterRequest {
                    identity: "i".into(),
                    name: "host-101".into(),
                    cores: 1,
                    memory_bytes: 1 << 30,
                    ..Default::default()
                })
                .expect("register")
                .node_id;
            let beat = hetsched_proto::HeartbeatRequest {
                node_id: node,
                identity: "i".into(),
                ..Default::default()
            };
            assert_eq!(s.heartbeat(beat).expect("beat").assignments.len(), 1);
        }
        for i in [2, 1, 0, 2, 1, 0] {
            runs[i].pass(&cx, &statuses).await;
        }
        assert_eq!(submitted(&dir), ["101", "102"]);
        assert_eq!(queue_of(&dir, "102"), "hetsched-q1-0badf00d");
        // A third task: the first queue's backlog (one) is full, and its waiting allocation
        // brings one core: the second queue allocates, the third does not.
        one_task(&state, "c");
        for i in [2, 1, 0, 2, 1, 0] {
            runs[i].pass(&cx, &statuses).await;
        }
        assert_eq!(submitted(&dir), ["101", "102", "103"]);
        assert_eq!(queue_of(&dir, "103"), "hetsched-q2-0badf00d");
        // The scripts are private, as the data directory's files are.
        let script = dir.join("allocations/q1/allocation.sh");
        let mode = std::fs::metadata(&script).expect("script").mode() & 0o777;
        assert_eq!(mode, 0o600, "{}: {mode:o}", script.display());
    }

    /// What the queues keep in the data directory is private: their directories 0700 and the
    /// server's tag 0600 (0755 and 0644 before, with the usual umask).
    #[tokio::test]
    async fn the_queues_directories_and_the_tag_are_private() {
        let dir = scratch("private");
        std::fs::create_dir_all(&dir).expect("dir");
        let config = crate::ServerConfig {
            data_dir: dir.to_path_buf(),
            ..Default::default()
        };
        let store = crate::store::Store::open(&dir.join("state.db")).expect("store");
        let state = Arc::new(Mutex::new(State::open(&config, store).expect("state")));
        let q = queue(&format!(
            "[[allocation]]\nname = \"q\"\nmanager = \"slurm\"\ntime_limit = \"10m\"\n\
             sbatch = \"{0}/sbatch\"\nsqueue = \"{0}/squeue\"\n",
            dir.display()
        ));
        let cx = Context {
            state,
            data_dir: dir.to_path_buf(),
            server_url: Some("http://head:7420".into()),
        };
        spawn(&[q], cx).expect("spawned");
        for (path, want) in [
            (dir.join("allocations"), 0o700),
            (dir.join("allocations/q"), 0o700),
            (dir.join(TAG_FILE), 0o600),
        ] {
            let mode = std::fs::metadata(&path).expect("made").mode() & 0o777;
            assert_eq!(mode, want, "{}: {mode:o}", path.display());
        }
    }

    /// An allocation that ends before any of its agents registered (an agent that cannot
    /// start) is a failure: the queue holds back, doubling the wait each time, says why with
    /// the end of the allocation's output, and the job it allocates for is blocked on it; an
    /// agent that registers ends the streak. (Such allocations came one after the other, at
    /// every look, forever.)
    #[tokio::test]
    async fn an_allocation_that_ends_before_its_agents_register_is_a_failure_and_the_queue_backs_off()
     {
        use crate::convert::Wire;
        let dir = scratch("start-failure");
        let (cx, statuses, mut runs, state) = queues_on(&dir, &["q"]);
        std::fs::write(dir.join("ended"), "").expect("ended");
        let job = one_task(&state, "a");
        let run = &mut runs[0];
        run.pass(&cx, &statuses).await;
        assert_eq!(submitted(&dir), ["101"]);
        // Gone at the next look, with no agent ever registered: a failure.
        run.pass(&cx, &statuses).await;
        let error = statuses.lock().expect("statuses")[0].error.clone();
        let out = dir.join("allocations/q/101.out");
        assert_eq!(
            error.as_deref(),
            Some(
                format!(
                    "allocation 101 ended before any of its agents registered; its output ({}) \
                     ends: Error: boom; submitting again in 2s (1 failure(s) in a row)",
                    out.display()
                )
                .as_str()
            )
        );
        for _ in 0..3 {
            run.pass(&cx, &statuses).await;
        }
        assert_eq!(submitted(&dir), ["101"], "held back");
        let info = state.lock().expect("state").job(job).expect("job");
        assert!(info.blocked, "{}", info.pending_reason);
        assert!(
            info.pending_reason
                .contains("and queue `q`, whose agents could, fails to get allocations"),
            "{}",
            info.pending_reason
        );
        // Once the wait is over, another; a taken submission does not end the streak.
        run.hold_until = None;
        run.pass(&cx, &statuses).await;
        assert_eq!(submitted(&dir), ["101", "102"]);
        assert!(statuses.lock().expect("statuses")[0].error.is_some());
        run.pass(&cx, &statuses).await;
        let error = statuses.lock().expect("statuses")[0]
            .error
            .clone()
            .unwrap_or_default();
        assert!(
            error.contains("allocation 102 ended")
                && error.ends_with("submitting again in 4s (2 failure(s) in a row)"),
            "{error}"
        );
        // Allocations that start their agents: the next one's agent registers, and the queue
        // allocates as before.
        std::fs::remove_file(dir.join("ended")).expect("rm");
        run.hold_until = None;
        run.pass(&cx, &statuses).await;
        assert_eq!(submitted(&dir), ["101", "102", "103"]);
        {
            use crate::convert::Wire;
            let mut s = state.lock().expect("state");
            s.register(hetsched_proto::RegisterRequest {
                identity: "i".into(),
                name: "host-103".into(),
                cores: 1,
                memory_bytes: 1 << 30,
                ..Default::default()
            })
            .expect("register");
        }
        run.pass(&cx, &statuses).await;
        let st = statuses.lock().expect("statuses")[0].clone();
        assert_eq!(st.error, None);
        assert_eq!(run.failures, 0);
        let info = state.lock().expect("state").job(job).expect("job");
        assert!(!info.blocked, "{}", info.pending_reason);
    }

    /// The last line of an allocation's output is shown to every user (`hetsched allocations`,
    /// the dashboard): its terminal escapes, control characters and bidi or zero-width
    /// characters are dropped, so that `sbatch: error\u{202e}` cannot reorder what it says.
    #[test]
    fn an_allocations_last_line_keeps_no_escape_control_or_bidi_character() {
        assert_eq!(
            plain("\u{1b}[31msbatch: error\u{202e}: inv\u{200b}alid\u{2066} partition\r"),
            "sbatch: error: invalid partition"
        );
        assert_eq!(plain("作业 عمل: ok"), "作业 عمل: ok");
    }
}
