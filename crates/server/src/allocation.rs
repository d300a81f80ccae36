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
//!    `attributes`), beyond the free cores of the live nodes that take work and have those
//!    attributes ([`State::allocation_demand`]);
//! 3. with demand, allocations are submitted (`sbatch --parsable SCRIPT`, `qsub SCRIPT`): as
//!    many as the missing cores need, beyond those the waiting allocations bring (each at the
//!    cores its agents had last, one per node before any registered: [`to_submit`]), while
//!    fewer than `backlog` wait (in the batch system's queue, or started with no agent
//!    registered yet) and fewer than `max_allocations` exist, unless an operator paused the
//!    queue ([`State::pause_allocations`]).
//!
//! An allocation runs one agent per node (`srun`; PBS: `pbsdsh` when it has several nodes),
//! started with `--time-limit auto` (the allocation's own time left, from `squeue` or `qstat`)
//! and `--idle-timeout`: it takes only tasks that end before the allocation does, and gives its
//! nodes back once the work is done. Its script and its output are under
//! `DATA_DIR/allocations/QUEUE/`.

use crate::state::State;
use hetsched_core::model::Resources;
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
    /// Each allocation's wall time (`sbatch --time`, `qsub -l walltime`).
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
        if self.time_limit.0 < 60_000_000_000 {
            return Err(format!("{}: at least 1m", at("time_limit")));
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
/// among the queue's `attributes`, it has a CPU variant or the queue offers `gpu`, and its time
/// limit (the shortest among its variants; none: any) fits in the queue's allocations.
pub fn serves(q: &QueueConfig, app: &hetsched_core::model::Application) -> bool {
    cores_per_task(q, app, None).is_some()
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
    use hetsched_core::model::Variant;
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
        .filter(|&(_, limit)| limit <= q.time_limit.0)
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
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
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
            hold_until: None,
            node: None,
        };
        let (cx, statuses) = (cx.clone(), statuses.clone());
        tokio::spawn(async move {
            let refresh = run.queue.config.refresh();
            info!(queue = %run.queue.config.name, job_name = %run.queue.job_name, "automatic allocation: looking at the queue every {}", humantime::format_duration(refresh));
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
            std::fs::write(&path, &t)?;
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
    /// Submissions that failed in a row, the last one's error, and until when none is tried
    /// ([`SUBMIT_BACKOFF_CAP`]).
    failures: u32,
    last_failure: Option<String>,
    hold_until: Option<std::time::Instant>,
    /// What this queue's agents have, as the last look that saw any found them (the smallest
    /// of each); `None` until then ([`to_submit`], [`State::allocation_demand`]).
    node: Option<Resources>,
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
    /// The cores of one of its agents ([`QueueRun::node_cores`]), if known.
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
impl QueueRun {
    async fn pass(&mut self, cx: &Context, statuses: &Statuses) {
        let listed = self.queue.list().await;
        let allocations = match listed {
            Ok(a) => a,
            Err(e) => {
                warn!(queue = %self.queue.config.name, "automatic allocation: {e}");
                self.record(statuses, None, Some(e), 0);
                return;
            }
        };
        let total = allocations.len() as u32;
        let (wanted_cores, free_cores, waiting, paused) = match cx.state.lock() {
            Ok(s) => {
                // Waiting: queued in the batch system, or given nodes whose agents have not
                // registered yet (their cores come soon: not a reason for another allocation).
                let mut waiting = 0;
                let mut smallest: Option<Resources> = None;
                for a in &allocations {
                    let suffix = format!("-{}", a.id);
                    let agents = s.live_nodes_ending(&suffix);
                    if a.counts_as_waiting(agents.len(), s.has_node_ending(&suffix)) {
                        waiting += 1;
                    }
                    for (_, has) in agents {
                        smallest = Some(smallest.map_or(has, |r| {
                            Resources::new(
                                r.cores.min(has.cores),
                                r.memory_bytes.min(has.memory_bytes),
                                r.gpus.min(has.gpus),
                            )
                        }));
                    }
                }
                if smallest.is_some() {
                    self.node = smallest;
                }
                let (wanted, free) = s.allocation_demand(&self.queue.config, self.node);
                (
                    wanted,
                    free,
                    waiting,
                    s.allocation_paused(&self.queue.config.name),
                )
            }
            Err(_) => return,
        };
        let mut submitted = 0;
        let mut allocations = allocations;
        let held = self
            .hold_until
            .is_some_and(|t| std::time::Instant::now() < t);
        let room = to_submit(
            &self.queue.config,
            Demand {
                wanted_cores,
                free_cores,
                waiting,
                total,
                node_cores: self.node.map(|n| n.cores),
            },
        );
        if room > 0 && !held && !paused {
            for _ in 0..room {
                match self.queue.submit().await {
                    Ok(id) => {
                        info!(queue = %self.queue.config.name, allocation = %id, wanted_cores, free_cores, waiting, node = ?self.node, "automatic allocation: submitted an allocation ({} node(s), {})", self.queue.config.nodes, humantime::format_duration(Duration::from_nanos(self.queue.config.time_limit.0)));
                        allocations.push(Allocation {
                            id,
                            state: "PENDING".into(),
                        });
                        submitted += 1;
                        (self.failures, self.last_failure, self.hold_until) = (0, None, None);
                    }
                    Err(e) => {
                        // A failing submission (a wrong partition, an account over quota) is
                        // not retried at every look: the wait doubles with each failure.
                        self.failures += 1;
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
                        break;
                    }
                }
            }
        }
        // A submission failure is shown until a submission succeeds.
        let error = self.last_failure.clone();
        self.record(statuses, Some(allocations), error, submitted);
        if let Ok(mut s) = statuses.lock()
            && let Some(st) = s.get_mut(self.index)
        {
            st.agent_capacity = self.node;
        }
    }

    fn record(
        &self,
        statuses: &Statuses,
        allocations: Option<Vec<Allocation>>,
        error: Option<String>,
        submitted: u64,
    ) {
        if let Ok(mut s) = statuses.lock()
            && let Some(st) = s.get_mut(self.index)
        {
            if let Some(a) = allocations {
                st.allocations = a;
            }
            st.error = error;
            st.submitted += submitted;
        }
    }
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
        std::fs::write(&path, &script).map_err(|e| format!("{}: {e}", path.display()))?;
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
        let mut agent: Vec<String> = vec![
            hetsched.display().to_string(),
            "agent".into(),
            "--server".into(),
            self.url.clone(),
            "--token-file".into(),
            crate::agent_token_path(&self.data_dir)
                .display()
                .to_string(),
            "--time-limit".into(),
            "auto".into(),
            "--idle-timeout".into(),
            format!("{}s", q.idle_timeout().as_secs().max(1)),
        ];
        let given: Vec<&str> = q
            .attributes
            .iter()
            .map(String::as_str)
            .filter(|a| *a != hetsched_core::model::cluster::GPU_ATTRIBUTE)
            .collect();
        if !given.is_empty() {
            agent.push(format!("--attributes={}", given.join(",")));
        }
        agent.extend(q.agent_args.iter().cloned());
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
}
