//! The server's TOML configuration (`hetsched server --config server.toml`). Every field has a
//! default, so an empty file (or none) gives a working server on 127.0.0.1:7420.
//!
//! ```toml
//! listen = "0.0.0.0:7420"
//! data_dir = "/var/lib/hetsched"
//! policy = "hdas"              # cpu-only, fifo, drf, hadoop-model, hdas
//! heartbeat_interval = "500ms" # agents with work beat at least this often (and at once when a task ends)
//! idle_heartbeat_interval = "60s" # agents with nothing to report (at least heartbeat_interval):
//!                              # their held `AwaitWork` call says they live; beats refresh
//!                              # what `hetsched nodes` shows (free memory, read rate, GPUs)
//! dead_timeout = "10s"         # no heartbeat for this long: the node is dead, its tasks re-queued
//! max_attempts = 3             # a task lost this many times fails
//! profile_estimate = "1s"      # compute-time guess for variants without a declared profile
//! http_listen = "127.0.0.1:7421" # optional: dashboard, /metrics (token), /healthz; HTTPS with [tls]
//! start_failures = 3           # consecutive start failures of an application on a node …
//! start_failure_backoff = "60s" # … keep it off that node this long (0 failures = never)
//! binding = "plain"            # NNode→ANode binding (spec 01): plain, weighted, container
//! binding_slots = 1            # containers per node with binding = "container" (at least 1)
//! prefetch = "auto"            # batch tasks a node may queue beyond its free cores: "auto"
//!                              # (short tasks only, sized from measured run times), N cores, or 0
//! preemption = "off"           # or "requeue": a batch task of a higher priority that fits
//!                              # nowhere stops lower-priority batch tasks, which run again later
//! preempt_exempt_time = "0s"   # a task that has run less than this is not preempted
//! log_format = "text"          # or "json": one JSON object a line (`--log-format`)
//! log_file = "/var/log/hetsched/server.log" # append the log here, not to stderr; reopened
//!                              # on SIGHUP (logrotate); `--log-file` overrides it
//! max_stored_bytes_per_user = 1073741824 # what a user's jobs' files and inputs may store
//! max_stored_tasks_per_user = 20000000 # tasks (finished too) a user's jobs may keep stored
//! max_output_streams = 256     # divisible jobs' output streams held at once, all users together
//! max_connections = 4096       # connections each listener (gRPC, HTTP) holds at once
//! [retention]                  # optional; finished jobs are kept forever without it
//! keep_finished = "24h"        # purge a job this long after its last task ended
//! keep_jobs = 1000             # purge all but the most recently finished 1000 jobs
//! [fair_share]                 # optional: within a priority, users who used least go first
//! half_life = "7d"             # usage (share of the cluster × time) halves this often
//! [offload]                    # optional: offload tickets (spec 01's accelerator sharing)
//! ticket_lifetime = "1h"       # a ticket starts runs this long after it is signed (at least 10s)
//! key_rotation = "1d"          # each ANode's offload key changes this often (1h to 30d, and
//!                              # at least ticket_lifetime + 5m; see `OffloadConfig`)
//! [workflow]                   # optional: workflows' default balancer, PCDDB thresholds per core
//! balancer = "centralised"     # or "pcddb"
//! lt = 2
//! mt = 10
//! cluster_size = 3             # minimum proximity-cluster size (default ⌊0.3·agents⌋)
//! check_interval = "100ms"     # how often each agent checks itself against LT (10 ms to 10 s)
//! offer_ttl = "60s"            # a PCDDB request unanswered this long is placed again (1 s to 1 h)
//! [[allocation]]               # optional, repeatable: ask Slurm or PBS for nodes while work waits
//! name = "cpu"                 # the queue (job names hetsched-cpu-TAG)
//! manager = "slurm"            # or "pbs"
//! time_limit = "4h"            # each allocation's wall time
//! nodes = 2                    # agents per allocation (default 1)
//! max_allocations = 4          # waiting or running at once (default 1)
//! backlog = 1                  # waiting in the batch system's queue at once (default 1)
//! idle_timeout = "5m"          # the agents exit once idle this long (default 5m)
//! attributes = ["bigmem"]      # what its agents offer: only work they could run counts
//! args = ["--partition=cpu"]   # more sbatch (qsub) arguments; check: `hetsched allocations --check`
//! agent_args = ["--attributes=bigmem"] # more agent arguments
//! [tls]                        # optional; PEM files
//! cert = "server.pem"
//! key = "server.key"
//! agent_ca = "ca.pem"          # optional: the CA of agents' own --log-cert; without it the
//!                              # server certifies its agents' listeners itself (`agent_ca`)
//! ```

use hetsched_core::input::Duration;
use hetsched_core::policy::batch::BatchPolicyKind;
use serde::Deserialize;
use std::net::SocketAddr;
use std::path::PathBuf;

/// Server settings.
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ServerConfig {
    /// Address to listen on (port 0 = any free port): an IP address and port.
    #[serde(deserialize_with = "hetsched_core::input::listen::deserialize")]
    pub listen: SocketAddr,
    /// Directory of the store (`state.db`), the token file and the address file.
    pub data_dir: PathBuf,
    /// Batch policy.
    pub policy: BatchPolicyKind,
    /// How often an agent with work (a task running, queued or unreported, a PCDDB workflow)
    /// heartbeats when nothing happens.
    pub heartbeat_interval: Duration,
    /// How often an agent with nothing to report heartbeats. New work reaches it at once through
    /// its held `AwaitWork` call, and that open call is its sign of life (`State::check_dead`),
    /// so its beats only refresh the free memory, read rate and device use the server shows.
    /// None: [`IDLE_HEARTBEAT`]; never below `heartbeat_interval`
    /// (see [`ServerConfig::idle_heartbeat`]).
    pub idle_heartbeat_interval: Option<Duration>,
    /// Silence after which a node is declared dead.
    pub dead_timeout: Duration,
    /// How many times a task may be lost (its node died, or it vanished) before it fails; and
    /// how many times a workflow instance may be lost for want of room for its inputs on its
    /// node's disk (`min_free_disk`).
    #[serde(deserialize_with = "whole_number_from_one")]
    pub max_attempts: u32,
    /// Compute-time estimate for variants without a declared profile, until one is learned.
    pub profile_estimate: Duration,
    /// TLS, if any.
    pub tls: Option<TlsConfig>,
    /// Address of the optional HTTP listener serving the dashboard, Prometheus `/metrics` (both
    /// behind a token) and `/healthz` (port 0 = any free port; the bound address goes to
    /// `DATA_DIR/http-address`); HTTPS with [`ServerConfig::tls`]'s certificate. None: no HTTP
    /// listener.
    #[serde(deserialize_with = "hetsched_core::input::listen::deserialize_option")]
    pub http_listen: Option<SocketAddr>,
    /// Consecutive start failures of one application on one node after which the server stops
    /// placing it there for `start_failure_backoff` (0 = never). See [`crate::backoff`].
    pub start_failures: u32,
    /// How long a failing node is kept from an application.
    pub start_failure_backoff: Duration,
    /// Retention of finished jobs (`[retention]`); none: kept until `hetsched purge`.
    pub retention: Option<RetentionConfig>,
    /// How NNodes are bound to ANodes (spec 01): `plain` (the paper's rule), `weighted` (by
    /// accelerator speed) or `container` (task slots bound one by one).
    pub binding: BindingKind,
    /// Containers per node in `binding = "container"` (at least 1).
    pub binding_slots: u32,
    /// Workflows (issue 13): the default balancer and the PCDDB thresholds.
    pub workflow: Option<WorkflowConfig>,
    /// Fair share between users over time (`[fair_share]`); none: the policies' own orders.
    pub fair_share: Option<FairShareConfig>,
    /// Offload tickets' lifetime and the offload keys' rotation (`[offload]`); none: an hour
    /// and a day ([`ServerConfig::offload_timing`]).
    pub offload: Option<OffloadConfig>,
    /// Batch tasks a node may be handed beyond its free cores: its agent queues them and
    /// starts each as soon as a running task ends, so one heartbeat carries many results and
    /// assignments (issue 10; see [`crate::state::prefetch`]). `"auto"` (the default): only
    /// applications whose measured tasks are short, sized so the queued work per core stays
    /// under a time budget; `N`: N cores' worth of any tasks; `0`: none.
    pub prefetch: crate::state::prefetch::Setting,
    /// `[[allocation]]` queues: batch systems the server asks for nodes while batch work waits
    /// ([`crate::allocation`]).
    pub allocation: Vec<crate::allocation::QueueConfig>,
    /// Priority preemption of batch tasks (`docs/runtime.md`, Preemption).
    pub preemption: PreemptionMode,
    /// Under preemption, a task that has run less than this is not stopped (Slurm's
    /// `PreemptExemptTime`): every task makes at least this much progress.
    pub preempt_exempt_time: Duration,
    /// The most unfinished tasks (pending or running batch tasks and workflow instances; an
    /// unfinished divisible job counts as one, a running topology as its executors) a user
    /// other than the admin may have at once: a submission that would pass it is refused,
    /// naming it (Slurm's `MaxSubmitJobsPerUser`, counted in tasks). Each waiting task costs the
    /// server memory (about 120 bytes) and store rows, and each job its stored file (and a
    /// divisible job its input), so one user's loop of submissions does not exhaust the
    /// server. Default [`MAX_UNFINISHED_TASKS_PER_USER`]; at least 1.
    pub max_unfinished_tasks_per_user: u64,
    /// The most bytes the submissions of a user other than the admin may keep stored: their
    /// jobs' files, divisible jobs' inputs and topologies' files, until purged. Each request is
    /// bounded by the gRPC message size (4 MiB) and each file by 2 MiB, but not how many a user
    /// keeps: a submission that would pass this is refused, naming it. Default
    /// [`MAX_STORED_BYTES_PER_USER`]; at least 1.
    pub max_stored_bytes_per_user: u64,
    /// The most tasks the jobs of a user other than the admin may keep stored — every task of
    /// every job not purged, finished ones too (a workflow's instances; a divisible job counts
    /// one): each is a store row that `max_unfinished_tasks_per_user` stops
    /// counting once it ends, so a loop of submissions cancelled at once grew the store without
    /// bound. A submission that would pass it is refused, naming it and `hetsched purge`.
    /// Default [`MAX_STORED_TASKS_PER_USER`]; at least 1.
    pub max_stored_tasks_per_user: u64,
    /// The most divisible jobs' `ReadOutput` streams the server holds at once, for all users
    /// together: each holds a blocking thread while its reader is slow, and one more is refused
    /// `RESOURCE_EXHAUSTED`, naming this key ([`crate::throttle::OutputStreams`]). Default
    /// [`crate::throttle::MAX_OUTPUT_STREAMS`]; 1 to [`MAX_OUTPUT_STREAMS_CAP`].
    pub max_output_streams: u32,
    /// The most connections each of the server's listeners (gRPC, and HTTP with
    /// `http_listen`) holds at once; one more is closed as soon as it is accepted, with a
    /// warning in the log, so a flood of connections cannot exhaust the server's file
    /// descriptors (`hetsched_proto::listen`). Each agent holds one or two to the gRPC
    /// listener. Default [`MAX_CONNECTIONS`]; 16 to [`MAX_CONNECTIONS_CAP`], and below the
    /// process's open-file limit (`LimitNOFILE`): a start lowers it to what that limit leaves
    /// room for, with a warning (`hetsched_proto::listen::fit_open_files`).
    pub max_connections: u32,
    /// How long a new connection has, from its accept, to send its greeting — on gRPC the TLS
    /// handshake and HTTP/2's preface and first frame, on HTTP the TLS handshake and then its
    /// first request's headers — before it is closed: [`hetsched_proto::listen::GREETING_TIMEOUT`].
    /// Not a key: tests shorten it.
    #[serde(skip)]
    pub greeting_timeout: std::time::Duration,
    /// How long a gRPC connection may have no call open before it is closed:
    /// [`hetsched_proto::listen::IDLE_TIMEOUT`]. Not a key: tests shorten it.
    #[serde(skip)]
    pub idle_timeout: std::time::Duration,
    /// How long a gRPC or HTTP connection's socket may refuse every byte the server writes to
    /// it — the peer reading nothing — before it is closed:
    /// [`hetsched_proto::listen::WRITE_STALL_TIMEOUT`]. Not a key: tests shorten it.
    #[serde(skip)]
    pub write_stall_timeout: std::time::Duration,
    /// The most task rows one purge transaction deletes: a purge deletes the rest of its jobs'
    /// rows in steps of that many, releasing the state between them
    /// ([`crate::state::purging::PURGE_CHUNK_TASKS`]). Not a key: tests shorten it.
    #[serde(skip)]
    pub purge_chunk_tasks: u64,
    /// Jobs to set aside at this start (`hetsched server --set-aside JOB`, see
    /// [`crate::set_aside`]): flags only, not configuration keys, for a set-aside is one act of
    /// an operator, not a setting that holds at every start.
    #[serde(skip)]
    pub set_aside: Vec<u64>,
    /// Topologies to set aside at this start (`hetsched server --set-aside-topology NAME`).
    #[serde(skip)]
    pub set_aside_topologies: Vec<String>,
    /// The format of the server's own log (`--log-format` overrides it).
    pub log_format: hetsched_core::input::log_format::LogFormat,
    /// The file the server appends its log to, reopened on SIGHUP; none: standard error
    /// (`--log-file` overrides it). Opened by the `hetsched` command, not by [`crate::start`].
    pub log_file: Option<PathBuf>,
}

/// The default of `max_unfinished_tasks_per_user`: ten jobs of the most tasks a job may have.
pub const MAX_UNFINISHED_TASKS_PER_USER: u64 = 10_000_000;

/// The default of `max_stored_bytes_per_user`: 1 GiB, five hundred of the largest job files.
pub const MAX_STORED_BYTES_PER_USER: u64 = 1 << 30;

/// The default of `max_stored_tasks_per_user`: twice `max_unfinished_tasks_per_user`'s (about
/// 1.3 GB of store at the rate docs/runtime.md, "Users", measured).
pub const MAX_STORED_TASKS_PER_USER: u64 = 20_000_000;

/// The default of `max_connections`: a cluster of a couple of thousand agents, their users'
/// clients and the dashboards, well below the documented unit's `LimitNOFILE=65536`.
pub const MAX_CONNECTIONS: u32 = 4096;

/// The highest `max_connections`.
pub const MAX_CONNECTIONS_CAP: u32 = 1 << 20;

/// The highest `max_output_streams`: tokio's blocking threads (512) less a few for the state's
/// own blocking work.
pub const MAX_OUTPUT_STREAMS_CAP: u32 = 448;

/// What happens to running batch tasks when waiting batch work of a higher priority fits
/// nowhere (the rule: `hetsched_core::policy::batch::preempt`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PreemptionMode {
    /// Nothing running is stopped: higher priorities only go first as resources free up.
    #[default]
    Off,
    /// The cheapest set of strictly lower-priority tasks on one node is stopped (their kill
    /// grace, then SIGKILL) and put back at the front of their queues; a preempted attempt
    /// counts neither as a failure nor against `max_attempts` (Slurm's `PreemptMode=REQUEUE`).
    Requeue,
}

/// The node binding mode a server uses (spec 01; the rules are `hetsched_core::policy::binding`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BindingKind {
    /// The paper's rule: whole NNodes, balanced by count.
    #[default]
    Plain,
    /// Whole NNodes, balanced by the ANodes' summed accelerator speed.
    Weighted,
    /// `binding_slots` containers per node, bound one by one.
    Container,
}

/// `[workflow]`: how workflows are balanced unless their file says `balancer =`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkflowConfig {
    /// `centralised` (default) or `pcddb`; any other name is refused with its line.
    pub balancer: Option<WorkflowBalancer>,
    /// PCDDB lower threshold, instances per core (default 2).
    pub lt: Option<u32>,
    /// PCDDB upper threshold, instances per core (default 10; 0 is refused: a node could take
    /// nothing).
    pub mt: Option<std::num::NonZeroU32>,
    /// Minimum proximity-cluster size m (spec 05 §2; default ⌊0.3·N⌋ of the N live agents, at
    /// least 1 — which makes every node a cluster of its own below 7 agents).
    pub cluster_size: Option<u32>,
    /// The period of each agent's PCDDB self-check (spec 05 §4 a, whose period the paper does not
    /// give): default 100 ms. A stage of a chain waits for it (about half a period on average);
    /// each check of an underloaded agent sends a `status`, so a shorter period costs more calls.
    pub check_interval: Option<Duration>,
    /// How long the instances of a PCDDB allocation request stay offered to the nodes it was
    /// sent to: a request that no node claimed or handed back within it (an agent on its path
    /// died holding it, kept it, or sent it off its table) is withdrawn and its instances
    /// placed again. Default 60 s. A genuine request is answered within seconds, and a claim
    /// that comes later is refused, so a short one wastes work (an instance taken too late is
    /// placed again) but never runs an instance twice.
    pub offer_ttl: Option<Duration>,
}

/// The bounds of `[workflow] offer_ttl`.
pub const OFFER_TTL_RANGE: (std::time::Duration, std::time::Duration) = (
    std::time::Duration::from_secs(1),
    std::time::Duration::from_secs(3600),
);

/// The default of `[workflow] offer_ttl`.
pub const DEFAULT_OFFER_TTL: std::time::Duration = std::time::Duration::from_secs(60);

/// The bounds of `[workflow] check_interval`.
pub const CHECK_INTERVAL_RANGE: (std::time::Duration, std::time::Duration) = (
    std::time::Duration::from_millis(10),
    std::time::Duration::from_secs(10),
);

impl WorkflowConfig {
    /// The PCDDB thresholds per core, `lt` and `mt` or their defaults, refused unless
    /// `1 ≤ lt ≤ mt`: with `lt = 0` no node is ever underloaded, so none asks for work and a
    /// PCDDB workflow never starts; with `mt` below `lt` an underloaded node has no room.
    pub fn thresholds(&self) -> Result<hetsched_core::policy::graph::Thresholds, String> {
        let d = hetsched_core::policy::graph::Thresholds::default();
        let t = hetsched_core::policy::graph::Thresholds {
            lt: self.lt.unwrap_or(d.lt),
            mt: self.mt.map_or(d.mt, std::num::NonZeroU32::get),
        };
        if t.is_valid() {
            Ok(t)
        } else {
            Err(format!(
                "workflow.lt ({}) must be at least 1 and at most workflow.mt ({}): a PCDDB node \
                 asks for work only below lt × cores and takes up to mt × cores",
                t.lt, t.mt
            ))
        }
    }

    /// The agents' self-check period: `check_interval`, else 100 ms; refused outside
    /// [`CHECK_INTERVAL_RANGE`].
    pub fn check_interval(&self) -> Result<std::time::Duration, String> {
        let d = self
            .check_interval
            .map_or(std::time::Duration::from_millis(100), |d| {
                std::time::Duration::from_nanos(d.0)
            });
        let (lo, hi) = CHECK_INTERVAL_RANGE;
        if d < lo || d > hi {
            return Err(format!(
                "workflow.check_interval ({}) must be between {} and {}",
                humantime::format_duration(d),
                humantime::format_duration(lo),
                humantime::format_duration(hi),
            ));
        }
        Ok(d)
    }

    /// How long a PCDDB request's instances stay offered: `offer_ttl`, else
    /// [`DEFAULT_OFFER_TTL`]; refused outside [`OFFER_TTL_RANGE`].
    pub fn offer_ttl(&self) -> Result<std::time::Duration, String> {
        let d = self
            .offer_ttl
            .map_or(DEFAULT_OFFER_TTL, |d| std::time::Duration::from_nanos(d.0));
        let (lo, hi) = OFFER_TTL_RANGE;
        if d < lo || d > hi {
            return Err(format!(
                "workflow.offer_ttl ({}) must be between {} and {}",
                humantime::format_duration(d),
                humantime::format_duration(lo),
                humantime::format_duration(hi),
            ));
        }
        Ok(d)
    }
}

/// The balancers the runtime runs workflows under (the simulator also has `static`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum WorkflowBalancer {
    /// One dispatcher in the server (the core's `Dispatcher`).
    #[default]
    Centralised,
    /// Spec 05's decentralised protocol among the agents (the core's `PcddbNode`s).
    Pcddb,
}

impl From<WorkflowBalancer> for hetsched_core::policy::graph::BalancerKind {
    fn from(b: WorkflowBalancer) -> Self {
        match b {
            WorkflowBalancer::Centralised => Self::Centralised,
            WorkflowBalancer::Pcddb => Self::Pcddb,
        }
    }
}

/// Fair share between users over time (`[fair_share]`; `docs/runtime.md`, Users): within a
/// priority level, the user whose running work held the least of the cluster, decayed with
/// `half_life`, goes first (`hetsched_core::model::fair_share`).
#[derive(Clone, Copy, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FairShareConfig {
    /// Usage halves every this long (Slurm's `PriorityDecayHalfLife`); default 7 days.
    #[serde(default = "FairShareConfig::default_half_life")]
    pub half_life: Duration,
}

impl FairShareConfig {
    /// Slurm's default.
    pub const DEFAULT_HALF_LIFE: Duration = Duration(7 * 24 * 3600 * 1_000_000_000);
    /// The shortest half-life: usage decays, and users are ranked, once a second
    /// (`hetsched_core::model::fair_share::MIN_HALF_LIFE`, the simulator's too).
    pub const MIN_HALF_LIFE: Duration = Duration(hetsched_core::model::fair_share::MIN_HALF_LIFE);

    fn default_half_life() -> Duration {
        Self::DEFAULT_HALF_LIFE
    }
}

/// `[offload]`: how long an offload ticket starts runs, and how often the ANodes' offload keys
/// rotate (`docs/runtime.md`, "Which offloads an ANode runs"; [`crate::tickets`]).
///
/// The rule between them, checked at load ([`ServerConfig::offload_timing`]):
/// `ticket_lifetime + 5 min <= key_rotation` ([`OFFLOAD_CLOCK_MARGIN`]). A ticket signed at the last instant of
/// an epoch expires `ticket_lifetime` into the next one; its ANode holds that epoch's key — as
/// the previous epoch's, in every heartbeat reply — until the epoch after the next begins, a
/// whole `key_rotation` after the ticket's epoch ended. So every ticket's key is still held
/// when the ticket expires, with `key_rotation - ticket_lifetime` (at least 5 min) to spare for
/// an ANode whose clock is behind the server's (it reads the expiry by its own clock).
#[derive(Clone, Copy, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OffloadConfig {
    /// How long after the server signs it an offload ticket starts runs (default 1 h, at least
    /// [`MIN_TICKET_LIFETIME`]). It covers the assignment's way to its ANode (the heartbeat
    /// reply, the NNode agent's queue, its tries of a broken transfer), not the run; an ANode
    /// also remembers each attempt it took this long (`docs/runtime.md`).
    #[serde(default = "OffloadConfig::default_ticket_lifetime")]
    pub ticket_lifetime: Duration,
    /// How often each ANode's offload key changes (default 1 day; between
    /// [`MIN_KEY_ROTATION`] and [`MAX_KEY_ROTATION`], longer than the idle heartbeat, and at
    /// least `ticket_lifetime` + [`OFFLOAD_CLOCK_MARGIN`]). A key taken from an ANode stops
    /// working within two periods.
    #[serde(default = "OffloadConfig::default_key_rotation")]
    pub key_rotation: Duration,
}

/// The shortest `[offload] ticket_lifetime`: the heartbeat reply, the NNode agent's queue and
/// its tries of a broken transfer (about 3 s) must fit in it.
pub const MIN_TICKET_LIFETIME: std::time::Duration = std::time::Duration::from_secs(10);

/// The shortest `[offload] key_rotation`.
pub const MIN_KEY_ROTATION: std::time::Duration = std::time::Duration::from_secs(3600);

/// The longest `[offload] key_rotation`: a key taken from an ANode works for up to two periods.
pub const MAX_KEY_ROTATION: std::time::Duration = std::time::Duration::from_secs(30 * 24 * 3600);

/// How much longer `[offload] key_rotation` must be than `ticket_lifetime`: the room left for
/// an ANode's clock behind the server's ([`OffloadConfig`]).
pub const OFFLOAD_CLOCK_MARGIN: std::time::Duration = std::time::Duration::from_secs(5 * 60);

impl OffloadConfig {
    fn default_ticket_lifetime() -> Duration {
        Duration(crate::tickets::OFFLOAD_TICKET_LIFETIME_MS * 1_000_000)
    }

    fn default_key_rotation() -> Duration {
        Duration(crate::tickets::OFFLOAD_KEY_PERIOD_MS * 1_000_000)
    }
}

impl Default for OffloadConfig {
    fn default() -> Self {
        Self {
            ticket_lifetime: Self::default_ticket_lifetime(),
            key_rotation: Self::default_key_rotation(),
        }
    }
}

/// When finished jobs are purged on their own (see `docs/runtime.md`, Retention).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetentionConfig {
    /// Purge a finished job this long after its last task ended.
    pub keep_finished: Option<Duration>,
    /// Keep at most this many finished jobs (the most recently finished).
    pub keep_jobs: Option<u64>,
}

/// The shortest `profile_estimate`: a variant predicted to take no time at all is a slip.
pub const MIN_PROFILE_ESTIMATE: std::time::Duration = std::time::Duration::from_millis(1);

/// The shortest `start_failure_backoff` while `start_failures` is on.
pub const MIN_START_FAILURE_BACKOFF: std::time::Duration = std::time::Duration::from_secs(1);

impl RetentionConfig {
    /// Whether it names no rule (an empty `[retention]` table): it purges nothing.
    pub fn is_empty(&self) -> bool {
        self.keep_finished.is_none() && self.keep_jobs.is_none()
    }
}

/// TLS settings (PEM files).
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsConfig {
    /// Certificate chain.
    pub cert: PathBuf,
    /// Private key.
    pub key: PathBuf,
    /// CA certificate that signed the agents' log-listener certificates (`hetsched agent
    /// --log-cert`). Set: the server reads task output from every agent over TLS, checking the
    /// agent's certificate against it (never falling back to plain text). Unset: the server is
    /// its agents' CA ([`crate::agent_ca`]), certifies their listeners, and calls them over TLS
    /// all the same.
    #[serde(default)]
    pub agent_ca: Option<PathBuf>,
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 7420)),
            data_dir: PathBuf::from("hetsched-data"),
            policy: BatchPolicyKind::Hdas,
            heartbeat_interval: Duration(500_000_000),
            idle_heartbeat_interval: None,
            dead_timeout: Duration(10_000_000_000),
            max_attempts: 3,
            profile_estimate: Duration(1_000_000_000),
            tls: None,
            http_listen: None,
            start_failures: 3,
            start_failure_backoff: Duration(60_000_000_000),
            retention: None,
            binding: BindingKind::Plain,
            binding_slots: 1,
            workflow: None,
            fair_share: None,
            offload: None,
            prefetch: crate::state::prefetch::Setting::Auto,
            allocation: Vec::new(),
            preemption: PreemptionMode::Off,
            preempt_exempt_time: Duration(0),
            max_unfinished_tasks_per_user: MAX_UNFINISHED_TASKS_PER_USER,
            max_stored_bytes_per_user: MAX_STORED_BYTES_PER_USER,
            max_stored_tasks_per_user: MAX_STORED_TASKS_PER_USER,
            max_output_streams: crate::throttle::MAX_OUTPUT_STREAMS,
            max_connections: MAX_CONNECTIONS,
            greeting_timeout: hetsched_proto::listen::GREETING_TIMEOUT,
            idle_timeout: hetsched_proto::listen::IDLE_TIMEOUT,
            write_stall_timeout: hetsched_proto::listen::WRITE_STALL_TIMEOUT,
            purge_chunk_tasks: crate::state::purging::PURGE_CHUNK_TASKS,
            set_aside: Vec::new(),
            set_aside_topologies: Vec::new(),
            log_format: Default::default(),
            log_file: None,
        }
    }
}

/// The shortest `heartbeat_interval`: below it, agents with work would beat without pause.
pub const MIN_HEARTBEAT: std::time::Duration = std::time::Duration::from_millis(10);

/// The shortest `dead_timeout`.
pub const MIN_DEAD_TIMEOUT: std::time::Duration = std::time::Duration::from_millis(100);

/// How often an idle agent heartbeats unless `idle_heartbeat_interval` says otherwise.
/// HyperQueue's workers beat every 8 s; ours need not beat to live while idle (their held
/// `AwaitWork` call does that), so this only bounds how stale an idle node's figures get.
pub const IDLE_HEARTBEAT: std::time::Duration = std::time::Duration::from_secs(60);

/// A count whose least is 1 (`max_attempts`), read as a `u32` is, but whose type error says
/// what the file may hold: `expected a whole number, 1 or more` (serde's words for a `u32`,
/// `0 or more`, offered a 0 that [`ServerConfig::validate`] then refuses). 0 itself is read
/// and refused there, at the key's line.
fn whole_number_from_one<'de, D: serde::Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    struct Count;
    impl serde::de::Visitor<'_> for Count {
        type Value = u32;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a whole number, 1 or more")
        }
        fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<u32, E> {
            u32::try_from(v).map_err(|_| E::invalid_value(serde::de::Unexpected::Signed(v), &self))
        }
        fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<u32, E> {
            u32::try_from(v)
                .map_err(|_| E::invalid_value(serde::de::Unexpected::Unsigned(v), &self))
        }
    }
    d.deserialize_u32(Count)
}

impl ServerConfig {
    /// How often an idle agent heartbeats: `idle_heartbeat_interval`, else [`IDLE_HEARTBEAT`];
    /// never below `heartbeat_interval`. Not bounded by the dead timeout: an idle node lives by
    /// its open `AwaitWork` call, not by its beats.
    pub fn idle_heartbeat(&self) -> Result<std::time::Duration, String> {
        let busy = self.heartbeat_interval.0;
        let idle = match self.idle_heartbeat_interval {
            Some(d) if d.0 == 0 => {
                return Err("idle_heartbeat_interval must be above 0".to_string());
            }
            Some(d) => std::time::Duration::from_nanos(d.0),
            None => IDLE_HEARTBEAT,
        };
        Ok(idle.max(std::time::Duration::from_nanos(busy)))
    }

    /// Checks the values whose bounds depend on the field's meaning (the heartbeat at least
    /// [`MIN_HEARTBEAT`] and below the dead timeout, a zero idle heartbeat, the PCDDB self-check
    /// period); the message names the field.
    pub fn validate(&self) -> Result<(), String> {
        let shown = |ns: u64| humantime::format_duration(std::time::Duration::from_nanos(ns));
        let (beat, dead) = (self.heartbeat_interval.0, self.dead_timeout.0);
        if beat < MIN_HEARTBEAT.as_nanos() as u64 {
            return Err(format!(
                "heartbeat_interval ({}) must be at least {}: agents with work would beat \
                 without pause",
                shown(beat),
                humantime::format_duration(MIN_HEARTBEAT)
            ));
        }
        if dead < MIN_DEAD_TIMEOUT.as_nanos() as u64 {
            return Err(format!(
                "dead_timeout ({}) must be at least {}",
                shown(dead),
                humantime::format_duration(MIN_DEAD_TIMEOUT)
            ));
        }
        if beat >= dead {
            return Err(format!(
                "heartbeat_interval ({}) must be below dead_timeout ({}): a node running tasks \
                 would be declared dead between two of its beats",
                shown(beat),
                shown(dead)
            ));
        }
        self.idle_heartbeat()?;
        if self.profile_estimate.0 < MIN_PROFILE_ESTIMATE.as_nanos() as u64 {
            // A variant predicted to take no time: HDAS's progress and delays divide by it, and
            // the simulator refuses such a profile outright.
            return Err(format!(
                "profile_estimate ({}) must be at least {}: it is the compute time a variant \
                 without a declared profile is predicted to take until its tasks are measured",
                shown(self.profile_estimate.0),
                humantime::format_duration(MIN_PROFILE_ESTIMATE)
            ));
        }
        if self.start_failures > 0
            && self.start_failure_backoff.0 < MIN_START_FAILURE_BACKOFF.as_nanos() as u64
        {
            // A back-off of 0s keeps nobody off a failing node: it read as on and was off.
            return Err(format!(
                "start_failure_backoff ({}) must be at least {} while start_failures is {}: a \
                 shorter one keeps no application off a node where it fails to start (set \
                 start_failures = 0 to turn the back-off off)",
                shown(self.start_failure_backoff.0),
                humantime::format_duration(MIN_START_FAILURE_BACKOFF),
                self.start_failures
            ));
        }
        if self.data_dir.as_os_str().is_empty() {
            return Err("data_dir must not be empty (leave it out for ./hetsched-data)".into());
        }
        if self.binding_slots == 0 {
            // It acted as 1.
            return Err("binding_slots must be at least 1 (containers per node)".into());
        }
        if self.max_attempts == 0 {
            // A task is lost at least once before it can fail for it: 0 would read as "never
            // re-run" and act as 1.
            return Err("max_attempts must be at least 1 (1: a task lost once fails)".into());
        }
        if self.max_unfinished_tasks_per_user == 0 {
            return Err("max_unfinished_tasks_per_user must be at least 1".into());
        }
        if self.max_stored_bytes_per_user == 0 {
            return Err("max_stored_bytes_per_user must be at least 1".into());
        }
        if self.max_stored_tasks_per_user == 0 {
            return Err("max_stored_tasks_per_user must be at least 1".into());
        }
        if !(1..=MAX_OUTPUT_STREAMS_CAP).contains(&self.max_output_streams) {
            return Err(format!(
                "max_output_streams ({}) must be from 1 to {MAX_OUTPUT_STREAMS_CAP}: each stream \
                 holds one of the server's 512 blocking threads",
                self.max_output_streams
            ));
        }
        if !(16..=MAX_CONNECTIONS_CAP).contains(&self.max_connections) {
            return Err(format!(
                "max_connections ({}) must be from 16 to {MAX_CONNECTIONS_CAP}",
                self.max_connections
            ));
        }
        if let Some(w) = &self.workflow {
            w.thresholds()?;
            w.check_interval()?;
            w.offer_ttl()?;
        }
        if let Some(f) = &self.fair_share {
            hetsched_core::model::fair_share::check_half_life(
                "fair_share.half_life",
                f.half_life.0,
            )
            .map_err(|e| e.to_string())?;
        }
        self.offload_timing()?;
        crate::allocation::validate(&self.allocation)?;
        // What a start refuses, so that `--check` does too.
        if self.listen.ip().is_unspecified()
            && let Some(i) = self.allocation.iter().position(|q| q.server.is_none())
        {
            return Err(format!(
                "allocation[{i}].server: the server listens on a wildcard address ({}); name \
                 the address its agents reach it at",
                self.listen
            ));
        }
        if let Some(h) = self.http_listen
            && h.port() != 0
            && h.port() == self.listen.port()
            && (h.ip() == self.listen.ip()
                || h.ip().is_unspecified()
                || self.listen.ip().is_unspecified())
        {
            return Err(format!(
                "http_listen ({h}) takes the port of listen ({}): give each its own",
                self.listen
            ));
        }
        Ok(())
    }

    /// The offload tickets' lifetime and the keys' rotation period (`[offload]`, else an hour
    /// and a day), checked: the lifetime at least [`MIN_TICKET_LIFETIME`], the rotation between
    /// [`MIN_KEY_ROTATION`] and [`MAX_KEY_ROTATION`] and longer than the idle heartbeat (an
    /// idle ANode must be told the next epoch's key before that epoch begins), and
    /// `ticket_lifetime` + [`OFFLOAD_CLOCK_MARGIN`] at most `key_rotation` (the rule:
    /// [`OffloadConfig`]); the message names the field.
    pub fn offload_timing(&self) -> Result<crate::tickets::OffloadTiming, String> {
        let c = self.offload.unwrap_or_default();
        let shown = |d: std::time::Duration| humantime::format_duration(d);
        let lifetime = std::time::Duration::from_nanos(c.ticket_lifetime.0);
        let rotation = std::time::Duration::from_nanos(c.key_rotation.0);
        if lifetime < MIN_TICKET_LIFETIME {
            return Err(format!(
                "offload.ticket_lifetime ({}) must be at least {}: an offload's way from the \
                 server to its ANode (the heartbeat reply, the NNode's queue, its tries of a \
                 broken transfer) must fit in it",
                shown(lifetime),
                shown(MIN_TICKET_LIFETIME)
            ));
        }
        if rotation < MIN_KEY_ROTATION || rotation > MAX_KEY_ROTATION {
            return Err(format!(
                "offload.key_rotation ({}) must be between {} and {}",
                shown(rotation),
                shown(MIN_KEY_ROTATION),
                shown(MAX_KEY_ROTATION)
            ));
        }
        let idle = self.idle_heartbeat()?;
        if rotation <= idle {
            return Err(format!(
                "offload.key_rotation ({}) must be longer than the idle heartbeat ({}): an idle \
                 ANode would miss the next offload key before its epoch begins",
                shown(rotation),
                shown(idle)
            ));
        }
        if lifetime.saturating_add(OFFLOAD_CLOCK_MARGIN) > rotation {
            return Err(format!(
                "offload.ticket_lifetime ({}) must be at most offload.key_rotation ({}) less {}: \
                 an ANode holds a ticket's key for one key_rotation after the ticket's epoch \
                 ended, so a longer-lived ticket would outlive its key",
                shown(lifetime),
                shown(rotation),
                shown(OFFLOAD_CLOCK_MARGIN)
            ));
        }
        Ok(crate::tickets::OffloadTiming {
            ticket_lifetime_ms: lifetime.as_millis() as u64,
            key_rotation_ms: rotation.as_millis() as u64,
        })
    }

    /// Parses a configuration file's text; errors name the line and field.
    pub fn parse(origin: &str, text: &str) -> Result<Self, hetsched_core::input::InputError> {
        hetsched_core::input::Source::new(origin, text).parse_toml()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn timing(text: &str) -> Result<crate::tickets::OffloadTiming, String> {
        ServerConfig::parse("server.toml", text)
            .map_err(|e| e.to_string())?
            .offload_timing()
    }

    /// `max_attempts` of the wrong type says what it takes, 1 or more (it said `0 or more`,
    /// though 0 is refused), at its line; a number is read.
    #[test]
    fn max_attempts_of_the_wrong_type_says_one_or_more() {
        let e = ServerConfig::parse("server.toml", "max_attempts = \"3\"\n")
            .expect_err("a string")
            .to_string();
        assert!(
            e.starts_with("server.toml:1:16: max_attempts: ")
                && e.contains("expected a whole number, 1 or more"),
            "{e}"
        );
        let e = ServerConfig::parse("server.toml", "max_attempts = -1\n")
            .expect_err("negative")
            .to_string();
        assert!(e.contains("expected a whole number, 1 or more"), "{e}");
        let c = ServerConfig::parse("server.toml", "max_attempts = 5\n").expect("parses");
        assert_eq!(c.max_attempts, 5);
    }

    /// `max_output_streams` is read from the file, defaults to 256, and is refused at 0 and
    /// above what the blocking threads allow, naming the key.
    #[test]
    fn max_output_streams_is_read_and_bounded() {
        let parse = |text: &str| ServerConfig::parse("server.toml", text).expect("parses");
        assert_eq!(parse("").max_output_streams, 256);
        let c = parse("max_output_streams = 8\n");
        assert_eq!(c.max_output_streams, 8);
        assert_eq!(c.validate(), Ok(()));
        for bad in [0, MAX_OUTPUT_STREAMS_CAP + 1] {
            let e = parse(&format!("max_output_streams = {bad}\n"))
                .validate()
                .expect_err("out of bounds");
            assert!(
                e.contains(&format!("max_output_streams ({bad}) must be from 1 to 448")),
                "{e}"
            );
        }
    }

    /// `max_connections` is read from the file, defaults to 4096, and is refused below 16 and
    /// above its cap, naming the key.
    #[test]
    fn max_connections_is_read_and_bounded() {
        let parse = |text: &str| ServerConfig::parse("server.toml", text).expect("parses");
        assert_eq!(parse("").max_connections, 4096);
        let c = parse("max_connections = 100\n");
        assert_eq!(c.max_connections, 100);
        assert_eq!(c.validate(), Ok(()));
        for bad in [0, 15, MAX_CONNECTIONS_CAP + 1] {
            let e = parse(&format!("max_connections = {bad}\n"))
                .validate()
                .expect_err("out of bounds");
            assert!(
                e.contains(&format!(
                    "max_connections ({bad}) must be from 16 to 1048576"
                )),
                "{e}"
            );
        }
    }

    #[test]
    fn offload_timing_defaults_to_an_hour_and_a_day_and_reads_the_offload_table() {
        let default = crate::tickets::OffloadTiming::default();
        assert_eq!(timing(""), Ok(default));
        assert_eq!(default.ticket_lifetime_ms, 3_600_000);
        assert_eq!(default.key_rotation_ms, 86_400_000);
        assert_eq!(timing("[offload]\n"), Ok(default));
        assert_eq!(
            timing("[offload]\nticket_lifetime = \"10m\"\nkey_rotation = \"12h\"\n"),
            Ok(crate::tickets::OffloadTiming {
                ticket_lifetime_ms: 600_000,
                key_rotation_ms: 43_200_000,
            })
        );
        // The rule's edge: the lifetime 5 minutes short of the rotation.
        assert!(timing("[offload]\nticket_lifetime = \"55m\"\nkey_rotation = \"1h\"\n").is_ok());
    }

    #[test]
    fn offload_timing_out_of_bounds_is_refused_naming_the_field() {
        let refused = |text: &str, field: &str, why: &str| {
            let e = timing(text).expect_err(text);
            assert!(e.contains(field) && e.contains(why), "{text}: {e}");
            // `validate`, which a server's start calls, says the same.
            let c = ServerConfig::parse("server.toml", text).expect("parses");
            assert_eq!(c.validate(), Err(e));
        };
        refused(
            "[offload]\nticket_lifetime = \"0s\"\n",
            "offload.ticket_lifetime",
            "at least 10s",
        );
        refused(
            "[offload]\nticket_lifetime = \"5s\"\n",
            "offload.ticket_lifetime",
            "at least 10s",
        );
        refused(
            "[offload]\nkey_rotation = \"0s\"\n",
            "offload.key_rotation",
            "between 1h and 30days",
        );
        refused(
            "[offload]\nkey_rotation = \"60d\"\n",
            "offload.key_rotation",
            "between 1h and 30days",
        );
        refused(
            "[offload]\nticket_lifetime = \"1d\"\n",
            "offload.ticket_lifetime (1day) must be at most offload.key_rotation (1day) less 5m",
            "outlive its key",
        );
        refused(
            "[offload]\nticket_lifetime = \"56m\"\nkey_rotation = \"1h\"\n",
            "offload.ticket_lifetime",
            "at most offload.key_rotation (1h) less 5m",
        );
        refused(
            "idle_heartbeat_interval = \"2h\"\n[offload]\nkey_rotation = \"1h\"\nticket_lifetime = \"10m\"\n",
            "offload.key_rotation (1h)",
            "longer than the idle heartbeat (2h)",
        );
    }

    /// `[workflow] lt = 0` left every PCDDB node never underloaded, so a workflow never started;
    /// `lt` above `mt` left an underloaded node no room. Both are refused at the start, naming
    /// the fields; the defaults (2, 10) and `1 ≤ lt ≤ mt` are taken.
    #[test]
    fn workflow_thresholds_out_of_order_are_refused_naming_the_fields() {
        let validate = |text: &str| {
            ServerConfig::parse("server.toml", text)
                .map_err(|e| e.to_string())
                .and_then(|c| c.validate())
        };
        for text in [
            "[workflow]\nlt = 0\n",
            "[workflow]\nlt = 12\n",
            "[workflow]\nlt = 3\nmt = 2\n",
        ] {
            let e = validate(text).expect_err(text);
            assert!(
                e.contains("workflow.lt (")
                    && e.contains("must be at least 1 and at most workflow.mt"),
                "{text}: {e}"
            );
        }
        for text in ["", "[workflow]\nlt = 1\nmt = 1\n", "[workflow]\nlt = 10\n"] {
            assert_eq!(validate(text), Ok(()), "{text}");
        }
    }

    #[test]
    fn workflow_offer_ttl_defaults_to_a_minute_and_out_of_bounds_is_refused_naming_the_field() {
        let ttl = |text: &str| {
            ServerConfig::parse("server.toml", text)
                .map_err(|e| e.to_string())
                .and_then(|c| c.validate().map(|()| c))
                .map(|c| c.workflow.unwrap_or_default().offer_ttl())
        };
        assert_eq!(ttl(""), Ok(Ok(DEFAULT_OFFER_TTL)));
        assert_eq!(DEFAULT_OFFER_TTL, std::time::Duration::from_secs(60));
        assert_eq!(
            ttl("[workflow]\noffer_ttl = \"3s\"\n"),
            Ok(Ok(std::time::Duration::from_secs(3)))
        );
        for bad in ["0s", "500ms", "2h"] {
            let e = ttl(&format!("[workflow]\noffer_ttl = \"{bad}\"\n")).expect_err(bad);
            assert!(
                e.contains("workflow.offer_ttl") && e.contains("between 1s and 1h"),
                "{bad}: {e}"
            );
        }
        let e = ServerConfig::parse("server.toml", "[workflow]\noffer_ttl = \"soon\"\n")
            .expect_err("not a duration")
            .to_string();
        assert!(
            e.contains("server.toml:2") && e.contains("offer_ttl"),
            "{e}"
        );
    }

    #[test]
    fn an_unknown_offload_field_is_refused_with_its_line() {
        let e = ServerConfig::parse("server.toml", "[offload]\nticket_life = \"1h\"\n")
            .expect_err("unknown field");
        let e = e.to_string();
        assert!(
            e.contains("server.toml:2") && e.contains("ticket_life"),
            "{e}"
        );
    }
}
