//! Stream topologies in the runtime (issue 16, spec 04): long-running jobs whose executors run
//! in worker processes that agents start. This module holds the server's side:
//!
//! - **Submission** parses the file with the core's one parser
//!   (`hetsched_core::input::stream_code`) and places it with the core's placers
//!   (`hetsched_core::policy::stream`): `one-phase` (one worker per node it uses) or `even` with a
//!   user-fixed worker count, on the nodes whose agents sync (capacity `cores × 100`).
//! - **Agents** call `SyncWorkers` about every 500 ms with the workers they run and each worker's
//!   latest cumulative counters; the answer is the workers their node should run, with the
//!   addresses of the topology's other workers.
//! - **Monitoring**: counter deltas feed the core's `TrafficMonitor` (spec 04's monitor); every
//!   `interval` — after asking every worker for a fresh report (the agents' next sync carries
//!   `report_now`; at most 1.5 s wait) — it is flushed into the executor traffic list, which is
//!   kept (with node loads) in
//!   the server's one store (tables `topologies` and `topology_traffic`) and handed to the core's
//!   `RescheduleController` with the same placer: overload → apply at once; traffic gain above
//!   `gain_threshold` → apply; at most one computation per `interval`.
//! - **Failures**: a node not heard from for `dead_timeout` is lost; its topologies are placed
//!   again on the nodes left (cause `node-lost`). A stall of the server itself (stopped, or
//!   holding its state) is not counted ([`JobKind::server_stalled`]).
//! - **Drained nodes** (`hetsched node drain`) are left out of every placement; a topology with
//!   workers on one is placed again on the other nodes at the next controller pass (cause
//!   `node-drained`), its workers there draining as in any move (state handed over), so the
//!   node empties. With no other node that may run it, the topology stays where it is. A worker that died is started again by its
//!   agent (the server keeps assigning it). After a server restart, topologies and placements are
//!   read back from the store; agents' workers keep running and are adopted when the agents sync
//!   (nodes get `dead_timeout` from the restart to show up).
//!
//! **A [`JobKind`]** ([`Kind::Topology`], a field of
//! [`Jobs`](super::Jobs)). Its records live in the server's one store and every change is
//! written by [`JobKind::persist`] inside the state's one transaction
//! per event, so the full-disk rollback and pause cover topologies as they cover batch jobs
//! (after a rollback, [`Topology::carry_over`] keeps what the store does not hold: the workers
//! seen, the monitors). A topology hands out no tasks on heartbeats: its workers are
//! long-running processes that agents supervise through their own sync call (`SyncWorkers`,
//! with a control channel — peers, reports — that tasks do not have), which reaches this kind
//! through `State::topology_sync`. Each running worker **books its executors' declared cores**
//! (⌈Σ declared load / 100⌉) in the cluster's `SchedulerView` on its node
//! ([`Topology::rebook`]), so batch tasks are not placed on them; they are charged to the
//! topology's owner, counting against its cap on cores and as its fair-share usage.
//!
//! Protobuf stays at the service edge (`crate::topology_service`): this module takes and
//! returns its own types ([`TopologySubmission`], [`WorkerSeen`], [`WorkersToRun`]).
//!
//! Applying a new placement starts a new **generation**: a worker of the new placement that runs
//! the same executors on the same node as a running one is kept (its agent hands it the new
//! routes); agents stop the other old workers and start the other new ones.

use crate::jobs::{Ctx, JobKind, Kind, Read};
use crate::state::StateError;
use crate::state::nodes::Nodes;
use crate::state::stall::{Grace, Stall};
use crate::state::types::{JobInfo, JobsPage, TaskCounts, TasksPage};
use crate::store::StoreError;
use crate::users::Users;
use hetsched_core::input::stream_code::parse_runnable_topology;
use hetsched_core::model::stream_code::RunnableTopology;
use hetsched_core::model::topology::{ExecutorId, ExecutorPair};
use hetsched_core::policy::stream::monitor::TrafficMonitor;
use hetsched_core::policy::stream::one_phase::OnePhase;
use hetsched_core::policy::stream::reschedule::{
    Cause, Decision, RescheduleController, RescheduleSettings,
};
use hetsched_core::policy::stream::{
    Placement, PlacementProblem, StreamNode, StreamPlacer, StreamPlacerKind, evaluate,
};
use hetsched_core::{NodeId, Resources, SchedulerView};
use hetsched_stream::{WorkerConfig, WorkerReport};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use serde::{Deserialize, Serialize};
use serde_json::json;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::path::PathBuf;
use std::sync::atomic::AtomicU64;
use std::time::{Duration, Instant};

/// Longest wait for fresh reports before a reschedule computation goes on without them.
const REPORT_WAIT: Duration = Duration::from_millis(1500);

/// Worker slots a node offers a placer (Storm's usual four).
const SLOTS_PER_NODE: u32 = 4;

/// Longest a draining worker (one a new placement no longer uses) is kept for its executors to
/// hand their state over.
const DRAIN_LIMIT: Duration = Duration::from_secs(30);

/// Least time a draining worker is kept, so that every worker has the new routes before it
/// stops.
const DRAIN_MIN: Duration = Duration::from_secs(3);

/// Least time, by a worker's own clock (its reports' `at_ns`), that its rate window spans
/// before it closes: workers report every second, so a window closes at the second report
/// after the one that opened it (2 s), however their reports' arrival at the server jitters; a
/// report asked for at once (`report_now`) may close one between 1.5 and 2 s.
const RATE_WINDOW_NS: u64 = 1_500_000_000;

/// A worker whose latest rate window closed longer ago than this (server time) reports no
/// more (its agent went silent, its node is about to be lost, or its worker hangs): its last
/// rates are not shown as the topology's.
const RATE_STALE: Duration = Duration::from_secs(5);

/// The tuples `report` says its worker's executors received, (all, between nodes) as the
/// placement `p` puts the executors of each pair.
fn passed_in(report: &WorkerReport, p: Option<&Placed>) -> (u64, u64) {
    let mut total: u64 = 0;
    let mut inter_node: u64 = 0;
    for pc in &report.pairs {
        // Agents' counts: summed without overflow, whatever they say.
        total = total.saturating_add(pc.tuples);
        if let Some(p) = p
            && p.nodes.get(pc.from as usize) != p.nodes.get(pc.to as usize)
        {
            inter_node = inter_node.saturating_add(pc.tuples);
        }
    }
    (total, inter_node)
}

/// The tuples a topology has passed on, (all, between nodes): what the worker processes that
/// no longer report had passed when they stopped (`Record::retired_tuples`), and what the live
/// ones' last reports say. A cumulative count: a process that stops, is started again, drains
/// or is lost with its node takes nothing of it away.
fn tuples_passed(run: &Run) -> (u64, u64) {
    let (mut total, mut inter_node) = run.rec.retired_tuples;
    for l in run.live.values() {
        let Some(r) = &l.report else { continue };
        let (t, i) = passed_in(r, run.rec.placement.as_ref());
        total = total.saturating_add(t);
        inter_node = inter_node.saturating_add(i);
    }
    (total, inter_node)
}

/// What the store keeps of a topology.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Record {
    /// Unique name (the topology file's `name`).
    pub name: String,
    /// The file it came from.
    pub origin: String,
    /// The file's text.
    pub text: String,
    /// Where relative paths in the file start.
    pub base_dir: String,
    /// Placer name.
    pub placer: String,
    /// User-fixed worker count.
    pub workers: Option<u32>,
    /// Least time between reschedule computations, ms (0 = never).
    pub interval_ms: u64,
    /// Least relative gain for a traffic reschedule.
    pub gain_threshold: f64,
    /// One-phase's utilisation limit.
    pub max_utilisation: f64,
    /// `running` or `killed`.
    pub state: String,
    /// Placement generation (0 = not placed yet).
    pub generation: u64,
    /// The placement running now.
    pub placement: Option<Placed>,
    /// Reschedules applied, oldest first.
    pub reschedules: Vec<Reschedule>,
    /// When it was submitted, ns since the Unix epoch.
    pub submitted_ns: u64,
    /// Once killed: the tuples its workers had passed on (all, and between nodes), as their
    /// last reports said, so `topology show` still tells what it did.
    #[serde(default)]
    pub final_tuples: Option<(u64, u64)>,
    /// When it was killed, ns since the Unix epoch (`None`: running, or killed before this was
    /// recorded — its submission time then stands for it in the retention rule).
    #[serde(default)]
    pub killed_ns: Option<u64>,
    /// The tuples (all, and between nodes) passed on by the worker processes that no longer
    /// report — stopped, started again, drained, or lost with their node — as each one's last
    /// report said when it went. A worker's counters start from zero in a new process, so
    /// without these `tuples_total` fell whenever one went (a drained node's workers took their
    /// counts with them). Stored, so that a restarted server, whose live workers report their
    /// own counts again, adds them to these as the one before did.
    #[serde(default)]
    pub retired_tuples: (u64, u64),
    /// Workers kept running across reschedules: worker index → the (generation, index) it
    /// started as, which its agent names its directory after (`topology log` reads it there).
    /// A worker not listed started as (`generation`, its index).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub started_as: BTreeMap<u32, (u64, u32)>,
    /// Running workers the latest placement keeps: worker index → the (generation, index) its
    /// agent runs it as until it takes the new placement. Stored, so that a server restarted
    /// before that agent's sync still hands the running worker the new placement instead of
    /// having it stopped and another started (its executors' state lost).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub kept: BTreeMap<u32, (u64, u32)>,
    /// Workers of an earlier placement draining (handing their executors' state over): worker
    /// index (beyond the placement's workers) → (its node, since when, wall-clock ms). Stored,
    /// so that a server restarted during a move still orders them until their executors have
    /// handed over (or [`DRAIN_LIMIT`] from when they began) instead of having them stopped,
    /// their executors' state lost.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub draining: BTreeMap<u32, (String, u64)>,
    /// Executors each worker of this generation waits for the state of (they move from a
    /// running worker), until the worker first reports. Stored, so that a new worker ordered
    /// by a restarted server still waits for the state its executors' earlier workers hand over.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub await_state: BTreeMap<u32, Vec<u32>>,
}

/// A placement by node name.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Placed {
    /// Node of each executor.
    pub nodes: Vec<String>,
    /// Process on its node of each executor.
    pub process: Vec<u32>,
    /// (node, process) of each worker.
    pub workers: Vec<(String, u32)>,
    /// Worker index of each executor.
    pub assignment: Vec<u32>,
}

/// One applied reschedule.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Reschedule {
    /// When, ns since the Unix epoch.
    pub at_ns: u64,
    /// `overload`, `traffic`, `node-lost`, `node-drained` or `rebalance`.
    pub cause: String,
    /// Relative inter-node traffic gain the controller computed.
    pub gain: f64,
    /// Nodes used afterwards.
    pub nodes: usize,
    /// The generation it started.
    pub generation: u64,
    /// Workers of the earlier placement kept running (same node and process; executors that
    /// did not move kept running in them).
    #[serde(default)]
    pub workers_kept: usize,
    /// Executors that changed worker (stopped in one, started in another); the others ran on.
    #[serde(default)]
    pub executors_moved: usize,
}

#[derive(Debug)]
struct Live {
    addr: String,
    pid: u32,
    report: Option<WorkerReport>,
    /// This process's rates, measured by its own reports' clock.
    window: ReportWindow,
}

impl Live {
    /// A process first seen now, at `addr`.
    fn new(addr: String, pid: u32) -> Self {
        Self {
            addr,
            pid,
            report: None,
            window: ReportWindow::default(),
        }
    }
}

/// One worker process's rate window, measured by the process's own clock: the counts its
/// reports added since the window opened, over the time between the report that opened it and
/// the one that closes it (`WorkerReport::at_ns`, both). Counts and time thus come from the
/// same two reports. (Before, counts were summed from whatever reports reached the server
/// within ~2 s of the server's time and divided by that time: a window that took three
/// one-second reports read 50 % more than one that took two, so a steady 200 tuples/s read
/// 133 to 250.)
#[derive(Debug, Default)]
struct ReportWindow {
    /// `at_ns` of the report that opened the window now open (`None`: no report of this
    /// process taken yet).
    opened_ns: Option<u64>,
    /// `at_ns` of the latest report taken.
    last_ns: u64,
    /// Tuples received per (from, to), CPU ns and tuples emitted per executor, since it opened.
    pairs: HashMap<(u32, u32), u64>,
    cpu_ns: HashMap<u32, u64>,
    emitted: HashMap<u32, u64>,
    /// The rates of the latest window closed, and when (server time) it closed.
    closed: Option<(WorkerRates, Instant)>,
}

/// What one worker process measured over its latest closed window.
#[derive(Debug, Default)]
struct WorkerRates {
    pairs: Vec<((u32, u32), f64)>,
    cpu_percent: Vec<(u32, f64)>,
    emitted_per_s: Vec<(u32, f64)>,
    /// The window's length by the process's clock, seconds.
    span_s: f64,
}

impl ReportWindow {
    /// Takes a report taken at `at_ns` whose counts grew by `pairs`, `cpu_ns` and `emitted`
    /// since the process's previous report, and closes the window once it spans
    /// [`RATE_WINDOW_NS`].
    fn take(
        &mut self,
        at_ns: u64,
        pairs: Vec<((u32, u32), u64)>,
        cpu_ns: Vec<(u32, u64)>,
        emitted: Vec<(u32, u64)>,
    ) {
        let opened = match self.opened_ns {
            // The process's first report here: its counts span the time since it started
            // (or, the server restarted, its whole history), which no report of it bounds.
            // It opens the window instead.
            None => {
                self.opened_ns = Some(at_ns);
                self.last_ns = at_ns;
                return;
            }
            Some(opened) => opened,
        };
        if at_ns == self.last_ns {
            // The same report again (an agent sends the latest one at each sync): no time
            // passed, and no count grew.
            return;
        }
        if at_ns < self.last_ns {
            // The process's clock was set back: the window opens again from here, as what it
            // holds spans no time it could be divided by.
            self.opened_ns = Some(at_ns);
            self.last_ns = at_ns;
            self.pairs.clear();
            self.cpu_ns.clear();
            self.emitted.clear();
            return;
        }
        self.last_ns = at_ns;
        for (k, n) in pairs {
            let c = self.pairs.entry(k).or_default();
            *c = c.saturating_add(n);
        }
        for (e, n) in cpu_ns {
            let c = self.cpu_ns.entry(e).or_default();
            *c = c.saturating_add(n);
        }
        for (e, n) in emitted {
            let c = self.emitted.entry(e).or_default();
            *c = c.saturating_add(n);
        }
        let span = at_ns - opened;
        if span < RATE_WINDOW_NS {
            return;
        }
        let secs = span as f64 / 1e9;
        let rates = WorkerRates {
            pairs: self
                .pairs
                .drain()
                .map(|(k, n)| (k, n as f64 / secs))
                .collect(),
            cpu_percent: self
                .cpu_ns
                .drain()
                .map(|(e, ns)| (e, ns as f64 / 1e9 / secs * 100.0))
                .collect(),
            emitted_per_s: self
                .emitted
                .drain()
                .map(|(e, n)| (e, n as f64 / secs))
                .collect(),
            span_s: secs,
        };
        self.closed = Some((rates, Instant::now()));
        self.opened_ns = Some(at_ns);
    }
}

#[derive(Debug)]
struct Run {
    rec: Record,
    topo: RunnableTopology,
    live: HashMap<u32, Live>,
    /// Last cumulative count per (worker, from, to) and per (worker, executor) CPU. At most
    /// [`MAX_MEASURED_PAIRS`] pairs, each joining two executors whose components a stream joins
    /// ([`Run::joins`]): what an agent reports is bounded before it is kept.
    prev_pairs: HashMap<(u32, u32, u32), u64>,
    /// Each executor's component (index: executor id), for [`Run::joins`].
    executor_component: Vec<usize>,
    /// `(from component, to component)` of every stream.
    linked: HashSet<(usize, usize)>,
    /// Pair counts refused: executors that do not exist or that no stream joins, or a new pair
    /// past [`MAX_MEASURED_PAIRS`] (logged when it first happens).
    pairs_refused: u64,
    prev_cpu: HashMap<(u32, u32), u64>,
    prev_emitted: HashMap<(u32, u32), u64>,
    /// Spec 04's monitor: what the controller reads every interval.
    monitor: TrafficMonitor,
    /// When this server began measuring the topology (its submission, or the server's start
    /// for a stored one). A counter first reported by an executor that ran before then holds
    /// counts the monitors never covered: it is taken as the base the next reports are
    /// measured against ([`Run::feed`]), not as traffic of the current window.
    measured_from: Instant,
    /// What `show` says of the last couple of seconds: the live workers' latest windows
    /// ([`Live::window`]) added up, at every tick ([`Run::roll_window`]).
    shown: Rates,
    /// The record changed where no caller stores it (a process's counts were retired into
    /// `Record::retired_tuples`): it is marked to be stored at the end of the event.
    unsaved: bool,
    /// The latest executor traffic list the controller saw.
    traffic: Vec<ExecutorPair>,
    controller: Option<RescheduleController>,
    last_compute: Instant,
    /// A computation is due: fresh reports were asked for at this time (wall ns, Instant).
    asked: Option<(u64, Instant)>,
    /// Workers of this generation that are running workers of an earlier one (new index →
    /// (old generation, old index)).
    kept: HashMap<u32, (u64, u32)>,
    /// Workers of an earlier placement on nodes this one does not use, kept (index beyond the
    /// placement's workers) until their executors have handed over: node, since when. What
    /// the store keeps of it is `Record::draining` (an `Instant` does not outlive the process).
    /// Which executors each new worker waits for the state of is `Record::await_state`.
    draining: BTreeMap<u32, (String, Instant)>,
    /// Why workers of this generation could not start, as their agents said at their latest
    /// sync (until the worker runs; not stored: the agent says it again).
    start_errors: HashMap<u32, String>,
    /// The controller's latest computations, oldest first (at most [`COMPUTATIONS_KEPT`]).
    computations: std::collections::VecDeque<Computation>,
    /// Executors whose worker gave up on their program, warned about once each: executor →
    /// the `started_ns` of the run given up on (a later run of it, started again by a new
    /// placement or worker, is warned about again). At most one entry per executor.
    given_up_warned: HashMap<u32, u64>,
}

/// How many controller computations `topology show` lists.
const COMPUTATIONS_KEPT: usize = 64;

/// One computation of the reschedule controller, as `topology show` lists it (`controller`).
#[derive(Clone, Debug, Serialize)]
struct Computation {
    /// When, ns since the Unix epoch.
    at_ns: u64,
    /// Overloaded nodes under the running placement and the measured loads.
    overloaded_nodes: usize,
    /// Relative inter-node traffic gain of the computed placement over the running one.
    gain: f64,
    /// `overload` or `traffic` (applied), or `keep`.
    decision: String,
}

#[derive(Clone, Debug, Default, Serialize)]
struct Rates {
    pairs: Vec<ExecutorPair>,
    cpu_percent: HashMap<u32, f64>,
    emitted_per_s: HashMap<u32, f64>,
    window_s: f64,
}

#[derive(Debug)]
struct NodeSeen {
    cores: u32,
    /// Its node's attributes (from the agent's registration), for topologies that `require`
    /// some.
    attributes: Vec<String>,
    seen: Instant,
    /// Syncs of this node's agent held open now ([`Topology::held`]): while one is, the node
    /// is alive whatever `seen` says.
    held: u32,
    /// What the server's stalls during its silence gave it ([`JobKind::server_stalled`]).
    grace: Grace,
}

#[derive(Debug, Default)]
struct Inner {
    runs: BTreeMap<String, Run>,
    nodes: BTreeMap<String, NodeSeen>,
    /// Topologies whose record changed since the last commit.
    dirty: BTreeSet<String>,
    /// Latest traffic lists not yet written: name → (at ns, traffic, node loads).
    traffic_dirty: BTreeMap<String, (u64, Vec<ExecutorPair>, serde_json::Value)>,
    /// Killed topologies purged since the last commit (their rows are deleted in it).
    purged: BTreeSet<String>,
    /// Nodes the state's registry declared dead (the dead-node path) or that were removed.
    down: BTreeSet<String>,
    /// Nodes an operator drained (`hetsched node drain`): alive, but no placement uses them.
    drained: BTreeSet<String>,
}

type Labels = Vec<(String, String)>;

impl Inner {
    /// Marks to be stored the records that changed where no caller marked them
    /// ([`Run::unsaved`]).
    fn mark_unsaved(&mut self) {
        for run in self.runs.values_mut() {
            if std::mem::take(&mut run.unsaved) {
                self.dirty.insert(run.rec.name.clone());
            }
        }
    }
}

/// Topology series in `/metrics` (`hetsched_topology_*`), labelled by topology; updated every
/// controller tick from the same figures `topology show` prints.
#[derive(Clone, Debug, Default)]
struct TopologyMetrics {
    throughput: Family<Labels, Gauge<f64, AtomicU64>>,
    inter_node: Family<Labels, Gauge<f64, AtomicU64>>,
    inter_process: Family<Labels, Gauge<f64, AtomicU64>>,
    latency_p99: Family<Labels, Gauge<f64, AtomicU64>>,
    workers: Family<Labels, Gauge>,
    nodes: Family<Labels, Gauge>,
    reschedules: Family<Labels, Gauge>,
    restarts: Family<Labels, Gauge>,
    given_up: Family<Labels, Gauge>,
    degraded: Family<Labels, Gauge>,
    unacked: Family<Labels, Gauge>,
    expired: Family<Labels, Gauge>,
    /// The topologies that have series now, so that those of a topology no longer kept (purged,
    /// by hand or by the retention rule) are removed rather than left at their last values.
    /// Shared as the families are (a rollback's rebuilt kind keeps both).
    exported: std::sync::Arc<std::sync::Mutex<BTreeSet<String>>>,
}

/// Every cause a reschedule may have: each is a `hetsched_topology_reschedules` series.
const CAUSES: [&str; 5] = [
    "overload",
    "traffic",
    "node-lost",
    "node-drained",
    "rebalance",
];

impl TopologyMetrics {
    /// Removes every series of topology `name`.
    fn forget(&self, name: &str) {
        let l: Labels = vec![("topology".into(), name.to_string())];
        for family in [
            &self.throughput,
            &self.inter_node,
            &self.inter_process,
            &self.latency_p99,
        ] {
            family.remove(&l);
        }
        for family in [
            &self.workers,
            &self.nodes,
            &self.restarts,
            &self.given_up,
            &self.degraded,
            &self.unacked,
            &self.expired,
        ] {
            family.remove(&l);
        }
        for cause in CAUSES {
            let mut lc = l.clone();
            lc.push(("cause".into(), cause.into()));
            self.reschedules.remove(&lc);
        }
    }
}

/// Times the kind keeps beside its records.
#[derive(Clone, Copy, Debug)]
struct Cfg {
    dead_timeout: Duration,
    started: Instant,
    epoch: Instant,
}

/// The topology job kind: the server's topologies.
pub struct Topology {
    metrics: TopologyMetrics,
    inner: Inner,
    cfg: Cfg,
    /// Cores each running worker holds in the view, by (topology, worker).
    held: HashMap<(String, u32), Booked>,
    /// Nodes whose agents have not synced since the store was read at start-up: their workers
    /// outlive a server restart, so the placement's workers on them are taken to run (and hold
    /// their cores) until the first sync says what really runs.
    unsynced: HashSet<String>,
    /// Cores in use in the view on each node (by batch tasks and every topology's workers), by
    /// node name, with the node's id and its memory no task holds, as of the last event
    /// ([`Topology::see_view`]).
    in_use: HashMap<String, (u32, u32, u64)>,
    /// Counts changes of where workers run ([`Topology::placements_key`]): syncs held open
    /// (agents running no worker) and the idle controller tick wait on it. Shared with the
    /// kind rebuilt after a rollback, so nothing waiting on it is stranded.
    changes: super::Changes,
}

/// Why a topology request was refused (the service edge maps each to a gRPC status).
#[derive(Debug, thiserror::Error)]
pub enum TopologyError {
    /// The request or its file is wrong.
    #[error("{0}")]
    Invalid(String),
    /// No topology of that name.
    #[error("{0}")]
    NotFound(String),
    /// A running topology has that name.
    #[error("{0}")]
    Exists(String),
    /// The topology is not in a state that allows the request.
    #[error("{0}")]
    Precondition(String),
}

/// A topology submission (`hetsched topology submit`).
#[derive(Clone, Debug, Default)]
pub struct TopologySubmission {
    /// Where the file came from (for error locations).
    pub origin: String,
    /// The topology file's text.
    pub text: String,
    /// Where relative paths in the file start.
    pub base_dir: String,
    /// Placer name.
    pub placer: String,
    /// User-fixed worker count (0: the placer chooses).
    pub workers: u32,
    /// Least time between reschedule computations, ms (0 = never).
    pub interval_ms: u64,
    /// Least relative gain for a traffic reschedule.
    pub gain_threshold: f64,
    /// One-phase's utilisation limit.
    pub max_utilisation: f64,
}

/// One worker an agent runs, as its sync reports it.
#[derive(Clone, Debug, Default)]
pub struct WorkerSeen {
    /// Topology name.
    pub topology: String,
    /// Placement generation the worker was started for.
    pub generation: u64,
    /// Worker index in that generation.
    pub worker: u32,
    /// Where its peers reach it.
    pub addr: String,
    /// Its process id.
    pub pid: u32,
    /// Its latest cumulative counters, if it reported.
    pub report: Option<WorkerReport>,
}

/// One agent's sync.
#[derive(Clone, Debug, Default)]
pub struct WorkersSeen {
    /// The agent's node name.
    pub node: String,
    /// Its cores.
    pub cores: u32,
    /// Its node's attributes (with `gpu` where it has accelerators), sorted: set by the state
    /// from the agent's registration.
    pub attributes: Vec<String>,
    /// The workers it runs.
    pub workers: Vec<WorkerSeen>,
    /// Workers assigned to it that it cannot start, and why.
    pub start_errors: Vec<WorkerStartError>,
    /// A held call looked at again: its lists are as old as the call, so they do not speak
    /// for a worker the node's agent started (and reported in another call) since.
    pub restated: bool,
}

/// A worker an agent cannot start (its process failed to spawn, its owner's account is not on
/// the node, …), as the agent says at each sync while it lasts.
#[derive(Clone, Debug, Default)]
pub struct WorkerStartError {
    /// Topology name.
    pub topology: String,
    /// Placement generation.
    pub generation: u64,
    /// Worker index in that generation.
    pub worker: u32,
    /// Why, as the agent says it (cut to [`MAX_START_ERROR`] bytes).
    pub message: String,
}

/// The longest start error of a worker kept (an agent's text, bounded before it is held).
pub const MAX_START_ERROR: usize = 1000;

/// The most (worker, sender, receiver) pair counts a running topology's measurement keeps:
/// `one-phase` and `two-phase-traffic` walk at most this many pairs anyway
/// ([`hetsched_core::policy::stream::MAX_TRAFFIC_PAIRS`]); `even` and `resource-aware` accept
/// topologies with more (4,096 executors joined by shuffles have 4·10⁶ pairs per stream), whose
/// counts past this are not kept.
pub const MAX_MEASURED_PAIRS: usize = hetsched_core::policy::stream::MAX_TRAFFIC_PAIRS as usize;

/// The longest topology name a submission may give, in bytes (as an application's name): it
/// names the topology's workers' directories on the agents, its metrics' label and every
/// request about it (the dashboard's `/api/topology?name=` refuses a longer one).
pub const MAX_NAME: usize = 128;

/// One worker a node should run.
#[derive(Clone, Debug)]
pub struct WorkerOrder {
    /// Topology name.
    pub topology: String,
    /// Placement generation.
    pub generation: u64,
    /// Worker index.
    pub worker: u32,
    /// What the worker process is started with.
    pub config: WorkerConfig,
    /// Addresses of the topology's other running workers.
    pub peers: HashMap<u32, String>,
    /// A running worker of this generation (non-zero) to keep with new routes, not restart.
    pub keep_generation: u64,
    /// Its index in `keep_generation`.
    pub keep_worker: u32,
    /// The account it runs as on an agent with `run_as_owner`: the topology owner's name, empty
    /// for the admin's (set by the state, which knows the owners).
    pub run_as: String,
    /// The cores booked for it on its node ([`worker_cores`]; 0 for a draining worker, which
    /// hosts no executor of the placement): its agent starts queued tasks only in what its
    /// workers leave.
    pub cores: u32,
}

/// The cores worker `w` holds on its node: its executors' declared loads (per cent of a core,
/// `assignment` giving each executor's worker), rounded up to whole cores.
fn worker_cores(assignment: &[u32], loads: &[f64], w: u32) -> u32 {
    let percent: f64 = assignment
        .iter()
        .enumerate()
        .filter(|(_, a)| **a == w)
        .map(|(e, _)| loads.get(e).copied().unwrap_or(0.0))
        .sum();
    (percent / 100.0).ceil().max(0.0) as u32
}

/// The memory worker `w` holds on its node: its executors' declared memory (`memory`, bytes per
/// executor, `assignment` giving each executor's worker).
fn worker_memory(assignment: &[u32], memory: &[u64], w: u32) -> u64 {
    assignment
        .iter()
        .enumerate()
        .filter(|(_, a)| **a == w)
        .map(|(e, _)| memory.get(e).copied().unwrap_or(0))
        .fold(0, u64::saturating_add)
}

/// The answer to an agent's sync.
#[derive(Clone, Debug, Default)]
pub struct WorkersToRun {
    /// Every worker the node should run.
    pub workers: Vec<WorkerOrder>,
    /// Workers should report at once (a reschedule is being considered).
    pub report_now: bool,
}

/// The kind's tables in the store (created with the store's schema).
pub const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS topologies(name TEXT PRIMARY KEY, record TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS topology_traffic(
    name TEXT PRIMARY KEY, at_ns INTEGER NOT NULL, traffic TEXT NOT NULL,
    node_loads TEXT NOT NULL);
";

/// Deletes topology `name`'s record and measured traffic inside `tx`. The one way a topology's
/// rows go: a purge (committed with its event) and a set-aside at a start (`crate::set_aside`).
pub(crate) fn delete_rows(tx: &rusqlite::Transaction, name: &str) -> Result<(), StoreError> {
    tx.execute("DELETE FROM topologies WHERE name = ?1", [name])?;
    tx.execute("DELETE FROM topology_traffic WHERE name = ?1", [name])?;
    Ok(())
}

/// Whether a stored topology's file reads under this version, as a restart reads it: a
/// restart and `crate::set_aside` (which sets aside only a topology this refuses) share it.
pub(crate) fn read_stored(
    origin: &str,
    text: &str,
) -> Result<(), hetsched_core::input::InputError> {
    parse_runnable_topology(origin, text).map(|_| ())
}

/// A stored topology, as a restart reads it back.
#[derive(Clone, Debug)]
pub struct Stored {
    /// Its record.
    pub record: Record,
    /// The latest executor traffic list its controller measured (table `topology_traffic`;
    /// empty before its first computation): what a placement made after the restart starts
    /// from, as it would have without the restart.
    pub traffic: Vec<ExecutorPair>,
}

/// Reads every stored topology record with its latest measured traffic (for
/// [`crate::store::Snapshot`]).
pub fn load(conn: &rusqlite::Connection) -> Result<Vec<Stored>, StoreError> {
    let mut stmt = conn.prepare(
        "SELECT t.name, t.record, f.traffic FROM topologies t \
         LEFT JOIN topology_traffic f ON f.name = t.name ORDER BY t.name",
    )?;
    let rows = stmt.query_map([], |r| {
        Ok((
            r.get::<_, String>(0)?,
            r.get::<_, String>(1)?,
            r.get::<_, Option<String>>(2)?,
        ))
    })?;
    let mut out = Vec::new();
    for row in rows {
        let (name, text, traffic) = row?;
        let record = serde_json::from_str(&text)
            .map_err(|e| StoreError::Corrupt(format!("topology {name}: {e}")))?;
        let traffic = match traffic {
            Some(t) => serde_json::from_str(&t)
                .map_err(|e| StoreError::Corrupt(format!("traffic of topology {name}: {e}")))?,
            None => Vec::new(),
        };
        out.push(Stored { record, traffic });
    }
    Ok(out)
}

fn now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// The sum of `rates`, 0 for none. (Rust sums floats from −0.0, so an executor that received
/// nothing showed `-0.0` in JSON and `-0` in `topology show`.)
fn rate_sum(rates: impl Iterator<Item = f64>) -> f64 {
    rates.fold(0.0, |sum, r| sum + r)
}

/// Wall-clock ms since the Unix epoch (what the store keeps of a drain's start).
fn now_ms() -> u64 {
    now_ns() / 1_000_000
}

impl Run {
    fn new(rec: Record, topo: RunnableTopology, start: u64) -> Self {
        // The workers the stored placement keeps, for agents that have not taken it yet.
        let kept = rec.kept.iter().map(|(&w, &k)| (w, k)).collect();
        // The workers still draining from the stored move, measured from when they began (by
        // the wall clock: the time the server was down counts), so that a handover that never
        // completes still ends within [`DRAIN_LIMIT`]. A clock set back counts from now.
        let (now_ms, now) = (now_ms(), Instant::now());
        let draining = rec
            .draining
            .iter()
            .map(|(&w, (node, since_ms))| {
                let past = Duration::from_millis(now_ms.saturating_sub(*since_ms))
                    .min(DRAIN_LIMIT + Duration::from_secs(1));
                (w, (node.clone(), now.checked_sub(past).unwrap_or(now)))
            })
            .collect();
        let controller = (rec.interval_ms > 0).then(|| {
            RescheduleController::new(
                RescheduleSettings {
                    // Saturating: a record stored before submissions bounded the interval.
                    interval: rec.interval_ms.saturating_mul(1_000_000),
                    gain_threshold: rec.gain_threshold,
                },
                start,
            )
        });
        let executor_component = topo.topology.executor_components();
        let linked = topo
            .topology
            .streams
            .iter()
            .map(|st| (st.from, st.to))
            .collect();
        Self {
            rec,
            topo,
            live: HashMap::new(),
            prev_pairs: HashMap::new(),
            executor_component,
            linked,
            pairs_refused: 0,
            prev_cpu: HashMap::new(),
            prev_emitted: HashMap::new(),
            monitor: TrafficMonitor::new(start),
            measured_from: Instant::now(),
            shown: Rates::default(),
            unsaved: false,
            traffic: Vec::new(),
            controller,
            last_compute: Instant::now(),
            asked: None,
            kept,
            draining,
            start_errors: HashMap::new(),
            computations: std::collections::VecDeque::new(),
            given_up_warned: HashMap::new(),
        }
    }

    /// Warns once per give-up (`tracing::warn!`, the server's log) about executors that worker
    /// `worker` on `node` reports it gave up on: their program ended too often to be started
    /// again, so they pass no tuple and the topology is degraded (`topology show`). An executor
    /// the topology does not have is not kept (the report is an agent's).
    fn warn_given_up(&mut self, worker: u32, node: &str, report: &WorkerReport) {
        let executors = self.topo.topology.executor_count();
        for x in &report.executors {
            if !x.gave_up || x.executor as usize >= executors {
                continue;
            }
            if self.given_up_warned.insert(x.executor, x.started_ns) == Some(x.started_ns) {
                continue;
            }
            tracing::warn!(
                topology = %self.rec.name,
                worker,
                node = %hetsched_core::text::clip(node),
                "topology degraded: executor {} was given up on by its worker (its program ended too often to be started again): {}",
                self.topo.topology.executor_name(ExecutorId(x.executor)),
                hetsched_core::text::clip(x.ended.as_deref().unwrap_or("no reason reported"))
            );
        }
    }

    fn placer(&self) -> Box<dyn StreamPlacer> {
        match self.rec.placer.parse::<StreamPlacerKind>() {
            Ok(StreamPlacerKind::OnePhase) | Err(_) => Box::new(OnePhase {
                max_utilisation: self.rec.max_utilisation,
                ..OnePhase::default()
            }),
            Ok(k) => k.build(),
        }
    }

    /// Forgets worker `worker`'s process, which its node runs no more: its address and report
    /// (no peer is sent to it, its counters pass nothing) and the counts its next process,
    /// starting from zero, would otherwise be measured against. What it passed on stays
    /// counted ([`Run::retire`]).
    fn forget_worker(&mut self, worker: u32) {
        if let Some(l) = self.live.remove(&worker) {
            self.retire(&l);
            self.prev_pairs.retain(|k, _| k.0 != worker);
            self.prev_cpu.retain(|k, _| k.0 != worker);
            self.prev_emitted.retain(|k, _| k.0 != worker);
        }
    }

    /// Keeps what a worker process that reports no more had passed on (its last report's
    /// counts, placed by the placement it ran under) in `Record::retired_tuples`.
    fn retire(&mut self, l: &Live) {
        let Some(r) = &l.report else { return };
        let (t, i) = passed_in(r, self.rec.placement.as_ref());
        if t == 0 && i == 0 {
            return;
        }
        let (total, inter_node) = &mut self.rec.retired_tuples;
        *total = total.saturating_add(t);
        *inter_node = inter_node.saturating_add(i);
        self.unsaved = true;
    }

    /// Takes a worker's cumulative counters: the increase since its last report feeds the
    /// monitor and the process's rate window. (A worker whose process changed was forgotten
    /// first, by [`Topology::sync`]: it starts from zero.)
    fn feed(&mut self, worker: u32, pid: u32, report: &mut WorkerReport) {
        // What the agent sent is kept (`Live::report`) only as far as it is accepted here.
        let refused_before = self.pairs_refused;
        report.pairs.retain(|p| {
            let known = self.prev_pairs.contains_key(&(worker, p.from, p.to));
            let keep =
                known || (self.joins(p.from, p.to) && self.prev_pairs.len() < MAX_MEASURED_PAIRS);
            if !keep {
                self.pairs_refused += 1;
            }
            keep
        });
        // Executors' figures likewise: only the topology's executors, each once. The counters
        // below are kept from report to report by executor, so numbers an agent makes up would
        // otherwise grow them for ever (and every status walks the report's list).
        let executors = self.executor_component.len();
        let mut listed = HashSet::new();
        report
            .executors
            .retain(|e| (e.executor as usize) < executors && listed.insert(e.executor));
        // Why a multi-lang program ended: the worker's words about the owner's program, shown
        // to every user (`hetsched topology show`), so bounded and with no terminal escape in
        // it, as a worker's start error.
        for e in &mut report.executors {
            if let Some(m) = &mut e.ended {
                crate::limits::truncate(m, MAX_START_ERROR);
                hetsched_core::text::escape_controls(m);
                crate::limits::truncate(m, MAX_START_ERROR);
            }
        }
        if refused_before == 0 && self.pairs_refused > 0 {
            tracing::warn!(
                topology = %self.rec.name,
                "worker {worker} reported traffic between executors no stream joins, or past the \
                 {MAX_MEASURED_PAIRS} pairs a topology's measurement keeps: not counted"
            );
        }
        // Executors of this report that ran before this server measured the topology (a
        // server restarted under running workers): their first counts since then span hours
        // the monitors never covered, and would show as one window's rate (and one interval's
        // traffic for the controller). Those counts are the base later reports are measured
        // from. The age is the worker's own (`at_ns` − `started_ns`, one clock), so no clock
        // skew between agent and server enters; `started_ns` 0 is an agent that does not say.
        let measured_for = self.measured_from.elapsed();
        let predates: HashSet<u32> = report
            .executors
            .iter()
            .filter(|e| {
                e.started_ns != 0
                    && Duration::from_nanos(report.at_ns.saturating_sub(e.started_ns))
                        > measured_for
            })
            .map(|e| e.executor)
            .collect();
        let mut pair_deltas = Vec::new();
        for p in &report.pairs {
            let first = !self.prev_pairs.contains_key(&(worker, p.from, p.to));
            let prev = self
                .prev_pairs
                .insert((worker, p.from, p.to), p.tuples)
                .unwrap_or(if first && predates.contains(&p.to) {
                    p.tuples
                } else {
                    0
                });
            let delta = p.tuples.saturating_sub(prev);
            if delta > 0 {
                self.monitor
                    .tuples_received(ExecutorId(p.from), ExecutorId(p.to), delta as f64);
                pair_deltas.push(((p.from, p.to), delta));
            }
        }
        let mut cpu_deltas = Vec::new();
        let mut emitted_deltas = Vec::new();
        for e in &report.executors {
            let base = |count: u64| {
                if predates.contains(&e.executor) {
                    count
                } else {
                    0
                }
            };
            let prev = self
                .prev_cpu
                .insert((worker, e.executor), e.cpu_ns)
                .unwrap_or_else(|| base(e.cpu_ns));
            cpu_deltas.push((e.executor, e.cpu_ns.saturating_sub(prev)));
            let prev = self
                .prev_emitted
                .insert((worker, e.executor), e.emitted)
                .unwrap_or_else(|| base(e.emitted));
            emitted_deltas.push((e.executor, e.emitted.saturating_sub(prev)));
        }
        self.live
            .entry(worker)
            .or_insert_with(|| Live::new(String::new(), pid))
            .window
            .take(report.at_ns, pair_deltas, cpu_deltas, emitted_deltas);
    }

    /// The node worker `w` of the current generation runs on: the placement's, or, beyond the
    /// placement's workers, the node it drains from. `None`: no such worker.
    fn node_of(&self, w: u32) -> Option<&str> {
        let placed = self
            .rec
            .placement
            .as_ref()
            .and_then(|p| p.workers.get(w as usize))
            .map(|(node, _)| node.as_str());
        placed.or_else(|| self.draining.get(&w).map(|(node, _)| node.as_str()))
    }

    /// Whether a stream joins executor `from` to executor `to` (both of this topology).
    fn joins(&self, from: u32, to: u32) -> bool {
        let component = |e: u32| self.executor_component.get(e as usize).copied();
        component(from)
            .zip(component(to))
            .is_some_and(|link| self.linked.contains(&link))
    }

    /// Adds up what `show` says: each live worker process's latest closed window (its own
    /// rates, [`ReportWindow`]), summed over the workers (two report one executor while it
    /// moves). `window_s` is the longest of those windows.
    fn roll_window(&mut self) {
        let mut pairs: BTreeMap<(u32, u32), f64> = BTreeMap::new();
        let mut cpu_percent: HashMap<u32, f64> = HashMap::new();
        let mut emitted_per_s: HashMap<u32, f64> = HashMap::new();
        let mut window_s: f64 = 0.0;
        for l in self.live.values() {
            let Some((r, closed)) = &l.window.closed else {
                continue;
            };
            if closed.elapsed() > RATE_STALE {
                continue;
            }
            for (k, v) in &r.pairs {
                *pairs.entry(*k).or_default() += v;
            }
            for (e, v) in &r.cpu_percent {
                *cpu_percent.entry(*e).or_default() += v;
            }
            for (e, v) in &r.emitted_per_s {
                *emitted_per_s.entry(*e).or_default() += v;
            }
            window_s = window_s.max(r.span_s);
        }
        self.shown = Rates {
            pairs: pairs
                .into_iter()
                .map(|((from, to), tuples_per_s)| ExecutorPair {
                    from: ExecutorId(from),
                    to: ExecutorId(to),
                    tuples_per_s,
                })
                .collect(),
            cpu_percent,
            emitted_per_s,
            window_s,
        };
    }

    /// Applies a new placement as a new generation, moving only the executors that change.
    /// A running worker whose (node, process) the new placement uses again is **kept**: its
    /// agent hands the running process the new routes (`keep_generation`/`keep_worker`), its
    /// executors that stay keep running, and only those that leave or arrive stop or start. A
    /// running worker on a node still alive that the new placement no longer uses **drains**: it
    /// stays, hosting nothing, until its executors have handed their state over, then its agent
    /// stops it. An executor that leaves a running worker hands its state to its new worker,
    /// which waits for it (`await_state`); one whose worker is gone (a lost node) starts empty.
    /// `alive`: the nodes alive now. Returns (workers kept, executors moved).
    fn new_generation(&mut self, placed: Placed, alive: &[(String, u32)]) -> (usize, usize) {
        let old_gen = self.rec.generation;
        let alive: BTreeSet<&str> = alive.iter().map(|(n, _)| n.as_str()).collect();
        let mut kept: HashMap<u32, (u64, u32)> = HashMap::new();
        let mut renumber: HashMap<u32, u32> = HashMap::new();
        let mut await_state: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
        let mut draining: BTreeMap<u32, (String, Instant)> = BTreeMap::new();
        let mut moved = 0;
        if let Some(old) = &self.rec.placement {
            // Every worker that runs now, by (node, process): the old placement's workers and
            // those still draining from an earlier one.
            let running = |w: u32| self.live.contains_key(&w);
            for (new_w, key) in placed.workers.iter().enumerate() {
                if let Some(old_w) = old.workers.iter().position(|o| o == key)
                    && running(old_w as u32)
                {
                    kept.insert(new_w as u32, (old_gen, old_w as u32));
                    renumber.insert(old_w as u32, new_w as u32);
                }
            }
            let mut next = placed.workers.len() as u32;
            for (old_w, (node, _)) in old.workers.iter().enumerate() {
                let old_w = old_w as u32;
                if renumber.contains_key(&old_w)
                    || !running(old_w)
                    || !alive.contains(node.as_str())
                {
                    continue;
                }
                kept.insert(next, (old_gen, old_w));
                renumber.insert(old_w, next);
                draining.insert(next, (node.clone(), Instant::now()));
                next += 1;
            }
            for (e, (&ow, &nw)) in old.assignment.iter().zip(&placed.assignment).enumerate() {
                if old.workers.get(ow as usize) == placed.workers.get(nw as usize) {
                    continue;
                }
                moved += 1;
                let source_runs = running(ow)
                    && old
                        .workers
                        .get(ow as usize)
                        .is_some_and(|(n, _)| alive.contains(n.as_str()));
                if source_runs {
                    await_state.entry(nw).or_default().push(e as u32);
                }
            }
        }
        let renumber = |w: u32| renumber.get(&w).copied();
        // The new generation's workers are new orders: their agents say again what fails.
        self.start_errors.clear();
        // Processes neither kept nor draining (their node was lost) report no more: what they
        // passed stays counted, placed as they ran (the old placement, still the record's).
        let mut live = HashMap::new();
        for (w, l) in std::mem::take(&mut self.live) {
            match renumber(w) {
                Some(n) => {
                    live.insert(n, l);
                }
                None => self.retire(&l),
            }
        }
        self.live = live;
        self.prev_pairs = std::mem::take(&mut self.prev_pairs)
            .into_iter()
            .filter_map(|((w, a, b), c)| renumber(w).map(|n| ((n, a, b), c)))
            .collect();
        self.prev_cpu = std::mem::take(&mut self.prev_cpu)
            .into_iter()
            .filter_map(|((w, e), c)| renumber(w).map(|n| ((n, e), c)))
            .collect();
        self.prev_emitted = std::mem::take(&mut self.prev_emitted)
            .into_iter()
            .filter_map(|((w, e), c)| renumber(w).map(|n| ((n, e), c)))
            .collect();
        // What each kept worker started as, through every reschedule that kept it.
        let started_as = |w: u32| self.rec.started_as.get(&w).copied().unwrap_or((old_gen, w));
        self.rec.started_as = kept
            .iter()
            .map(|(&new_w, &(_, old_w))| (new_w, started_as(old_w)))
            .collect();
        self.rec.generation += 1;
        let workers_kept = kept.len() - draining.len();
        self.rec.placement = Some(placed);
        self.rec.kept = kept.iter().map(|(&w, &k)| (w, k)).collect();
        self.kept = kept;
        self.rec.await_state = await_state;
        let since_ms = now_ms();
        self.rec.draining = draining
            .iter()
            .map(|(&w, (node, _))| (w, (node.clone(), since_ms)))
            .collect();
        self.draining = draining;
        (workers_kept, moved)
    }

    /// Stops ordering draining workers once they host nothing (their last report lists no
    /// executor) or after [`DRAIN_LIMIT`]. Returns whether the record changed (to be stored).
    fn retire_drained(&mut self) -> bool {
        let live = &self.live;
        self.draining.retain(|w, (_, since)| {
            let empty = live
                .get(w)
                .and_then(|l| l.report.as_ref())
                .is_some_and(|r| r.executors.is_empty());
            // Empty, and long enough for every other worker to have taken the new routes
            // (agents sync every 500 ms): nothing is sent to it any more.
            !((empty && since.elapsed() > DRAIN_MIN) || since.elapsed() > DRAIN_LIMIT)
        });
        let placed = self.rec.placement.as_ref().map_or(0, |p| p.workers.len()) as u32;
        let done: Vec<u32> = self
            .live
            .keys()
            .copied()
            .filter(|w| *w >= placed && !self.draining.contains_key(w))
            .collect();
        // A drained process's counts stay counted; its index may serve a later move's draining
        // worker, whose counts start from zero.
        for w in done {
            self.forget_worker(w);
        }
        let stored = self.rec.draining.len();
        self.rec
            .draining
            .retain(|w, _| self.draining.contains_key(w));
        self.rec.draining.len() != stored
    }
}

/// The cores and memory one running worker holds in the view.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Booked {
    /// The worker's node.
    node: u32,
    /// The cores its executors declare (⌈Σ declared load / 100⌉).
    wanted: u32,
    /// The cores it holds: what was free of `wanted` (it takes the rest as tasks end).
    taken: u32,
    /// The memory its executors declare (Σ `memory`), in bytes.
    memory_wanted: u64,
    /// The memory it holds: what was free of `memory_wanted` (the rest as tasks end).
    memory_taken: u64,
    /// Its topology's owner's group (`None`: the admin's), charged with what it holds: the
    /// cores and memory count against the owner's caps and as its fair-share usage.
    group: Option<u32>,
}

impl Booked {
    /// What it holds, as the view's groups count it.
    fn held(&self) -> Resources {
        Resources::new(self.taken, self.memory_taken, 0)
    }

    /// Takes on its node what is free of what it still lacks, charging its group.
    fn take_free(&mut self, view: &mut SchedulerView) {
        let node = NodeId(self.node);
        let cores = view.hold_cores(node, self.wanted - self.taken);
        let memory = view.hold_memory(node, self.memory_wanted - self.memory_taken);
        view.charge_group(self.group, Resources::new(cores, memory, 0));
        self.taken += cores;
        self.memory_taken += memory;
    }

    /// Whether `other` asks for the same (node, cores, memory, group), whatever either holds.
    fn same_request(&self, other: &Booked) -> bool {
        (self.node, self.wanted, self.memory_wanted, self.group)
            == (other.node, other.wanted, other.memory_wanted, other.group)
    }

    /// Whether it still lacks cores or memory it declares.
    fn short(&self) -> bool {
        self.taken < self.wanted || self.memory_taken < self.memory_wanted
    }
}

/// What the rest of the cluster holds on a node, as one topology's placer sees it.
#[derive(Clone, Copy, Debug)]
struct Background {
    /// The load (per cent of a core) of the cores in use there (batch tasks, other topologies'
    /// workers), less those the topology's own workers hold (they move with its placement).
    load: f64,
    /// The memory free there, plus what the topology's own workers hold.
    memory_bytes: u64,
}

/// Per node name, what the rest of the cluster holds there as topology `name`'s placer sees it
/// ([`Background`]).
fn background(
    held: &HashMap<(String, u32), Booked>,
    in_use: &HashMap<String, (u32, u32, u64)>,
    name: &str,
) -> HashMap<String, Background> {
    let mut own: HashMap<u32, (u32, u64)> = HashMap::new();
    for ((t, _), b) in held {
        if t == name {
            let o = own.entry(b.node).or_default();
            o.0 += b.taken;
            o.1 = o.1.saturating_add(b.memory_taken);
        }
    }
    in_use
        .iter()
        .map(|(n, (id, used, free_memory))| {
            let (cores, memory) = own.get(id).copied().unwrap_or((0, 0));
            let bg = Background {
                load: f64::from(used.saturating_sub(cores)) * 100.0,
                memory_bytes: free_memory.saturating_add(memory),
            };
            (n.clone(), bg)
        })
        .collect()
}

/// The nodes of `alive` a new placement may use: those no operator drained.
fn open_nodes(alive: &[(String, u32)], drained: &BTreeSet<String>) -> Vec<(String, u32)> {
    alive
        .iter()
        .filter(|(name, _)| !drained.contains(name))
        .cloned()
        .collect()
}

/// The nodes of `alive` whose attributes include every one of `requires` (a topology's): the
/// only ones its placement may use.
fn admitted(
    alive: Vec<(String, u32)>,
    nodes: &BTreeMap<String, NodeSeen>,
    requires: &[String],
) -> Vec<(String, u32)> {
    if requires.is_empty() {
        return alive;
    }
    alive
        .into_iter()
        .filter(|(name, _)| {
            nodes.get(name).is_some_and(|n| {
                hetsched_core::model::cluster::meets(Some(name), &n.attributes, requires)
            })
        })
        .collect()
}

/// The placers' nodes: capacity `cores × 100`, background load and memory what the rest of the
/// cluster leaves there ([`background`]; memory unlimited for a node the view has not shown
/// yet). Workers hold their executors' declared memory in the view, as tasks do, so a placement
/// puts no more declared memory on a node than tasks and other topologies leave free.
fn stream_nodes(nodes: &[(String, u32)], busy: &HashMap<String, Background>) -> Vec<StreamNode> {
    nodes
        .iter()
        .map(|(name, cores)| {
            let bg = busy.get(name);
            StreamNode {
                name: name.clone(),
                rack: 0,
                capacity: f64::from(*cores) * 100.0,
                background: bg.map_or(0.0, |b| b.load),
                memory_bytes: bg.map_or(u64::MAX / 4, |b| b.memory_bytes),
                slots: SLOTS_PER_NODE,
            }
        })
        .collect()
}

fn placed(p: &Placement, nodes: &[StreamNode]) -> Placed {
    let mut workers: Vec<(String, u32)> = Vec::new();
    let mut index: HashMap<(usize, u32), u32> = HashMap::new();
    let mut assignment = Vec::with_capacity(p.node.len());
    for (e, &n) in p.node.iter().enumerate() {
        let key = (n, p.process[e]);
        let w = *index.entry(key).or_insert_with(|| {
            workers.push((nodes[n].name.clone(), p.process[e]));
            (workers.len() - 1) as u32
        });
        assignment.push(w);
    }
    Placed {
        nodes: p.node.iter().map(|&n| nodes[n].name.clone()).collect(),
        process: p.process.clone(),
        workers,
        assignment,
    }
}

fn as_placement(p: &Placed, nodes: &[StreamNode]) -> Option<Placement> {
    let node = p
        .nodes
        .iter()
        .map(|name| nodes.iter().position(|n| &n.name == name))
        .collect::<Option<Vec<usize>>>()?;
    Some(Placement {
        node,
        process: p.process.clone(),
    })
}

/// The node loads stored beside a traffic list: each node's load under the running placement
/// (`loads`, by node of `nodes`) and its capacity.
fn node_loads_json(nodes: &[StreamNode], loads: &[f64]) -> serde_json::Value {
    json!(
        nodes
            .iter()
            .zip(loads)
            .map(|(n, l)| json!({"node": n.name, "load": l, "capacity": n.capacity}))
            .collect::<Vec<_>>()
    )
}

/// Why topology `run` cannot fit `nodes` (those it may run on, by their whole capacity,
/// `cores × 100`), or `None` when its executors' declared CPU packs onto them; `true` with it
/// when one executor alone declares more than the largest node has (refused at submission). Other work is
/// left out (it ends; a placement beside it is the placers' and the controller's business):
/// this is about a topology larger than the cluster, whose workers would hold every core of
/// its nodes for as long as it runs. The test is the core's own feasibility test, one-phase's
/// first-fit-decreasing (`policy::stream::one_phase::first_fit_decreasing`), on empty nodes.
fn beyond_capacity(run: &Run, nodes: &[StreamNode]) -> Option<(bool, String)> {
    let topo = &run.topo.topology;
    let loads = topo.declared_loads();
    let empty: Vec<StreamNode> = nodes
        .iter()
        .map(|n| StreamNode {
            background: 0.0,
            memory_bytes: u64::MAX / 4,
            ..n.clone()
        })
        .collect();
    if hetsched_core::policy::stream::one_phase::first_fit_decreasing(&empty, &loads, &[]).is_some()
    {
        return None;
    }
    let need: f64 = loads.iter().sum();
    let capacity: f64 = nodes.iter().map(|n| n.capacity).sum();
    let largest = nodes.iter().map(|n| n.capacity).fold(0.0, f64::max);
    let biggest = loads
        .iter()
        .enumerate()
        .max_by(|a, b| a.1.total_cmp(b.1).then(b.0.cmp(&a.0)));
    // One executor larger than every node: no placement can hold it (refused at submission).
    let refused = matches!(biggest, Some((_, &l)) if l > largest);
    let detail = match biggest {
        Some((e, &l)) if l > largest => format!(
            "; `{}` alone declares {l:.0} %, more than the largest node's {largest:.0} %",
            topo.executor_name(ExecutorId(e as u32))
        ),
        _ if need <= capacity => "; no packing of them fits those nodes".to_string(),
        _ => String::new(),
    };
    let util = if run.rec.placer == StreamPlacerKind::OnePhase.as_str() {
        format!(
            " (and one-phase fills a node to --max-utilisation {} of it: {:.0} % in all)",
            run.rec.max_utilisation,
            capacity * run.rec.max_utilisation
        )
    } else {
        String::new()
    };
    let outcome = if refused {
        "no node can hold that executor"
    } else {
        "placed, its workers hold those nodes' cores for as long as it runs and other work waits"
    };
    Some((
        refused,
        format!(
            "{}: topology `{}` needs more CPU than the {} it may run on have: its {} declare {need:.0} % \
         (100 % = one core) against their {capacity:.0} %{detail}{util}; {outcome}. Lower the \
         executors' `cpu` or `parallelism`, or add nodes",
            run.rec.origin,
            topo.name,
            hetsched_core::text::count(nodes.len() as u64, "node"),
            hetsched_core::text::count(loads.len() as u64, "executor"),
        ),
    ))
}

/// Where placement `p` puts more declared executor load on a node than the node's whole
/// capacity (`cores_of`, by name), as `topology show` and the server's log say it: a
/// placement after nodes were lost may have to (the topology keeps running, on fewer nodes),
/// and its workers then hold every core there. Empty when none does.
fn overcommitted(run: &Run, p: &Placed, cores_of: impl Fn(&str) -> Option<u32>) -> String {
    let loads = run.topo.topology.declared_loads();
    let mut on: BTreeMap<&str, f64> = BTreeMap::new();
    for (e, node) in p.nodes.iter().enumerate() {
        *on.entry(node.as_str()).or_default() += loads.get(e).copied().unwrap_or(0.0);
    }
    let over: Vec<String> = on
        .into_iter()
        .filter_map(|(node, load)| {
            let capacity = f64::from(cores_of(node)?) * 100.0;
            (load > capacity + 1e-9).then(|| format!("{node} {load:.0} % of its {capacity:.0} %"))
        })
        .collect();
    if over.is_empty() {
        return String::new();
    }
    format!(
        "its executors declare more CPU than their nodes have (100 % = one core): {}; its \
         workers hold every core there and other work waits",
        over.join(", ")
    )
}

fn invalid(e: impl std::fmt::Display) -> TopologyError {
    TopologyError::Invalid(e.to_string())
}

impl Topology {
    /// Rebuilds the kind from its stored records (a server restart, or a rollback).
    ///
    /// # Errors
    /// [`StateError::StoredTopologyUnreadable`] when a record's file no longer reads under this
    /// version: the server does not start rather than lose the topology, as for jobs.
    pub fn restore(stored: Vec<Stored>, dead_timeout: Duration) -> Result<Self, StateError> {
        let mut runs = BTreeMap::new();
        let mut unsynced = HashSet::new();
        for Stored {
            record: rec,
            traffic,
        } in stored
        {
            let topo = parse_runnable_topology(&rec.origin, &rec.text).map_err(|error| {
                StateError::StoredTopologyUnreadable {
                    name: rec.name.clone(),
                    error: Box::new(error),
                }
            })?;
            if rec.state == "running"
                && let Some(p) = &rec.placement
            {
                unsynced.extend(p.workers.iter().map(|(node, _)| node.clone()));
            }
            let mut run = Run::new(rec, topo, 0);
            // What the controller measured last: a placement made before the workers report
            // again (a node lost or drained, a rebalance) starts from it, not from the declared
            // rates.
            // (Only pairs a stream of this topology joins: a store from before a replaced
            // topology's list was cleared may hold the list of an earlier one of its name.)
            run.traffic = traffic
                .into_iter()
                .filter(|p| run.joins(p.from.0, p.to.0))
                .collect();
            runs.insert(run.rec.name.clone(), run);
        }
        Ok(Topology {
            metrics: TopologyMetrics::default(),
            inner: Inner {
                runs,
                ..Inner::default()
            },
            cfg: Cfg {
                dead_timeout,
                started: Instant::now(),
                epoch: Instant::now(),
            },
            held: HashMap::new(),
            unsynced,
            in_use: HashMap::new(),
            changes: super::Changes::default(),
        })
    }

    /// What an agent's held sync and the idle controller wait on: a receiver of every later
    /// change of where workers run, and how long a held sync may go without a look (a quarter
    /// of the dead timeout, at most 5 s: each look notes the node seen).
    pub fn changes(&self) -> (tokio::sync::watch::Receiver<u64>, Duration) {
        (
            self.changes.subscribe(),
            super::look_period(self.cfg.dead_timeout),
        )
    }

    /// A digest of where the running topologies' workers run (name, generation, the nodes of
    /// their workers and of the workers still draining): what decides whether a sync answer can
    /// name a worker for a node that runs none.
    pub fn placements_key(&self) -> u64 {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        for run in self.inner.runs.values() {
            if run.rec.state != "running" {
                continue;
            }
            run.rec.name.hash(&mut h);
            run.rec.generation.hash(&mut h);
            if let Some(p) = &run.rec.placement {
                for (node, _) in &p.workers {
                    node.hash(&mut h);
                }
            }
            for (i, (node, _)) in &run.draining {
                (i, node).hash(&mut h);
            }
        }
        h.finish()
    }

    /// Wakes what waits on [`Topology::changes`] when `before` (a [`Topology::placements_key`]
    /// taken before an event) no longer holds.
    pub fn note_changes(&self, before: u64) {
        if self.placements_key() != before {
            self.changes.bump();
        }
    }

    /// Each running (or waiting) topology's name with what its executors declare in all: CPU
    /// in percent of a core, and memory in bytes (what its workers hold, charged to its owner).
    pub fn running_declared(&self) -> Vec<(&str, f64, u64)> {
        self.inner
            .runs
            .values()
            .filter(|r| r.rec.state == "running")
            .map(|r| {
                let t = &r.topo.topology;
                (
                    r.rec.name.as_str(),
                    t.declared_loads().iter().sum(),
                    t.memory().into_iter().fold(0u64, u64::saturating_add),
                )
            })
            .collect()
    }

    /// Each running topology's name and executor count (what it counts against its owner's
    /// `max_unfinished_tasks_per_user`).
    pub fn running_executors(&self) -> impl Iterator<Item = (&str, u64)> {
        self.inner
            .runs
            .values()
            .filter(|r| r.rec.state == "running")
            .map(|r| (r.rec.name.as_str(), r.topo.topology.executor_count() as u64))
    }

    /// Each stored topology's name and the length of its file (what it counts against its
    /// owner's `max_stored_bytes_per_user` until it is purged).
    pub fn stored_bytes(&self) -> impl Iterator<Item = (&str, u64)> {
        self.inner
            .runs
            .values()
            .map(|r| (r.rec.name.as_str(), r.rec.text.len() as u64))
    }

    /// Whether a topology runs (or waits to be placed): the controller's tick has work.
    pub fn is_running(&self) -> bool {
        self.inner.runs.values().any(|r| r.rec.state == "running")
    }

    /// After a rollback (`self` rebuilt from the store, `old` the memory before it): keeps what
    /// the store does not hold — the nodes seen, the metrics' families, the clock, and the
    /// workers and monitors of every topology whose stored record the rollback did not change.
    pub fn carry_over(&mut self, old: &mut Topology) {
        // Held syncs and the idle tick wait on the old channel: keep it, and wake them to look
        // at the rebuilt kind.
        self.changes = old.changes.clone();
        self.changes.bump();
        self.metrics = old.metrics.clone();
        self.cfg = old.cfg;
        self.inner.nodes = std::mem::take(&mut old.inner.nodes);
        self.unsynced = std::mem::take(&mut old.unsynced);
        for (name, run) in self.inner.runs.iter_mut() {
            let Some(o) = old.inner.runs.remove(name) else {
                continue;
            };
            if o.rec.generation == run.rec.generation
                && o.rec.text == run.rec.text
                && o.rec.state == run.rec.state
            {
                let mut rec = run.rec.clone();
                // The counts of processes retired since the last commit are no longer in the
                // kept workers' reports: the memory's figure, not the store's, goes with them
                // (and is stored at the next commit).
                if rec.retired_tuples != o.rec.retired_tuples {
                    rec.retired_tuples = o.rec.retired_tuples;
                    self.inner.dirty.insert(name.clone());
                }
                *run = o;
                run.rec = rec;
            }
        }
    }

    /// Books in `view` the declared cores and memory of every running worker on its node, and
    /// gives back what workers that stopped (or moved) held. A worker takes what is free: tasks
    /// already running are not preempted, and it takes the rest as they finish. What a worker
    /// holds is charged to its topology's owner's group (`users`), as a batch task's cores and
    /// memory are: it counts against the owner's caps (a worker is not refused for it: like
    /// tasks running above a lowered cap, it goes on, and the owner's other work waits) and as
    /// its fair-share usage.
    pub fn rebook(&mut self, view: &mut SchedulerView, nodes: &Nodes, users: &mut Users) {
        // What each running worker should hold (nothing taken yet).
        let mut want: HashMap<(String, u32), Booked> = HashMap::new();
        for run in self.inner.runs.values() {
            let Some(p) = &run.rec.placement else {
                continue;
            };
            if run.rec.state != "running" {
                continue;
            }
            let loads = run.topo.topology.declared_loads();
            let memory = run.topo.topology.memory();
            let assumed = (0..p.workers.len() as u32)
                .filter(|&w| self.unsynced.contains(&p.workers[w as usize].0))
                .filter(|w| !run.live.contains_key(w));
            for w in run.live.keys().copied().chain(assumed) {
                let Some((node, _)) = p.workers.get(w as usize) else {
                    continue;
                };
                let Some(id) = nodes.by_name(node) else {
                    continue;
                };
                let cores = worker_cores(&p.assignment, &loads, w);
                let bytes = worker_memory(&p.assignment, &memory, w);
                let group = users.topology_group(&run.rec.name);
                let b = Booked {
                    node: id,
                    wanted: cores,
                    taken: 0,
                    memory_wanted: bytes,
                    memory_taken: 0,
                    group,
                };
                want.insert((run.rec.name.clone(), w), b);
            }
        }
        self.held.retain(|k, b| {
            if want.get(k).is_some_and(|w| w.same_request(b)) {
                return true;
            }
            view.release_cores(NodeId(b.node), b.taken);
            view.release_memory(NodeId(b.node), b.memory_taken);
            view.release_group(b.group, b.held());
            false
        });
        for (k, w) in want {
            let b = self.held.entry(k).or_insert(w);
            if b.short() {
                b.take_free(view);
            }
        }
    }

    /// Gives the workers booked short of their cores or memory (they started on a busy node)
    /// what is free on their nodes now. Called when an event frees resources, before any kind
    /// fills the node, so that new tasks do not take what a worker already runs on.
    pub fn top_up(&mut self, view: &mut SchedulerView) {
        for b in self.held.values_mut().filter(|b| b.short()) {
            b.take_free(view);
        }
    }

    /// Notes the cores in use on every node in `view` (batch tasks, other kinds' work and every
    /// topology's workers), so placements see what the rest of the cluster holds.
    pub fn see_view(&mut self, view: &SchedulerView, nodes: &Nodes) {
        self.in_use = nodes
            .iter()
            .filter_map(|n| {
                let id = nodes.by_name(&n.spec.name)?;
                let st = view.nodes().get(id as usize)?;
                Some((
                    n.spec.name.clone(),
                    (
                        id,
                        st.node.cores.saturating_sub(st.free.cores),
                        st.free.memory_bytes,
                    ),
                ))
            })
            .collect();
    }

    /// Takes the state's verdicts on nodes: a node the registry declared dead (its heartbeats
    /// stopped) or removed is not alive for topologies either, whatever its last worker sync;
    /// a drained one (`hetsched node drain`, or an agent shutting down) is alive but takes no
    /// placement.
    pub fn see_nodes(&mut self, nodes: &Nodes) {
        self.inner.down = nodes
            .iter()
            .filter(|n| !n.alive || n.removed)
            .map(|n| n.spec.name.clone())
            .collect();
        self.inner.drained = nodes
            .iter()
            .filter(|n| n.drained || n.draining)
            .map(|n| n.spec.name.clone())
            .collect();
        // A node declared dead (or removed) runs nothing any more, restarted server or not.
        let down = &self.inner.down;
        self.unsynced.retain(|n| !down.contains(n));
    }

    /// Workers that running topologies' placements put on node `node` (what a drain moves off).
    pub fn workers_on(&self, node: &str) -> u32 {
        self.inner
            .runs
            .values()
            .filter(|r| r.rec.state == "running")
            .filter_map(|r| r.rec.placement.as_ref())
            .map(|p| p.workers.iter().filter(|(n, _)| n == node).count() as u32)
            .sum()
    }

    /// The workers holding cores or memory in the view: (topology, worker index, node, owner
    /// group, what they hold).
    pub fn booked_workers(&self) -> impl Iterator<Item = (&str, u32, u32, Option<u32>, Resources)> {
        self.held
            .iter()
            .filter(|(_, b)| b.taken > 0 || b.memory_taken > 0)
            .map(|((t, w), b)| (t.as_str(), *w, b.node, b.group, b.held()))
    }

    /// Memory the running workers hold on node `node`, in bytes (for tests and listings).
    pub fn held_memory(&self, node: u32) -> u64 {
        self.held
            .values()
            .filter(|b| b.node == node)
            .map(|b| b.memory_taken)
            .sum()
    }

    /// Cores the running workers hold on node `node` (for tests and listings).
    pub fn held_cores(&self, node: u32) -> u32 {
        self.held
            .values()
            .filter(|b| b.node == node)
            .map(|b| b.taken)
            .sum()
    }

    /// Registers the `hetsched_topology_*` series.
    pub fn register_metrics(&self, r: &mut Registry) {
        let m = &self.metrics;
        r.register(
            "topology_throughput_tuples_per_second",
            "Tuples per second emitted by a topology's spouts (last ~2 s)",
            m.throughput.clone(),
        );
        r.register(
            "topology_inter_node_tuples_per_second",
            "Tuples per second between executors on different nodes (last ~2 s)",
            m.inter_node.clone(),
        );
        r.register(
            "topology_inter_process_tuples_per_second",
            "Tuples per second between executors in different processes of one node (last ~2 s)",
            m.inter_process.clone(),
        );
        r.register(
            "topology_latency_p99_seconds",
            "End-to-end latency, 99th percentile, worst of the workers' cumulative histograms",
            m.latency_p99.clone(),
        );
        r.register(
            "topology_workers_running",
            "Worker processes reporting",
            m.workers.clone(),
        );
        r.register(
            "topology_nodes_used",
            "Nodes the placement uses",
            m.nodes.clone(),
        );
        r.register(
            "topology_reschedules",
            "Reschedules applied, by cause",
            m.reschedules.clone(),
        );
        r.register(
            "topology_program_restarts",
            "Times the running workers started a multi-lang executor's program again after it \
             exited or was killed for its silence",
            m.restarts.clone(),
        );
        r.register(
            "topology_executors_given_up",
            "Multi-lang executors whose program the running workers gave up starting again \
             (too many ends in a row): they pass no tuple",
            m.given_up.clone(),
        );
        r.register(
            "topology_degraded",
            "1 while a running topology has executors its workers gave up on (`topology show` \
             names them), else 0",
            m.degraded.clone(),
        );
        r.register(
            "topology_unacked_inputs",
            "Inputs multi-lang bolts' programs hold neither acked nor failed, now",
            m.unacked.clone(),
        );
        r.register(
            "topology_expired_inputs",
            "Inputs of multi-lang bolts the running workers stopped waiting on the program's ack \
             for (failed at their tree's timeout, or forgotten)",
            m.expired.clone(),
        );
    }

    fn update_metrics(&self) {
        let m = &self.metrics;
        let inner = &self.inner;
        // Topologies gone since the last update (purged) lose their series; a poisoned lock
        // (a panic elsewhere while it was held) still holds a usable set.
        {
            let mut exported = m
                .exported
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            exported.retain(|name| {
                let kept = inner.runs.contains_key(name);
                if !kept {
                    m.forget(name);
                }
                kept
            });
            exported.extend(inner.runs.keys().cloned());
        }
        for run in inner.runs.values() {
            let s = self.cfg.status(inner, run);
            let l: Labels = vec![("topology".into(), run.rec.name.clone())];
            let f = |k: &str| s[k].as_f64().unwrap_or(0.0);
            m.throughput
                .get_or_create(&l)
                .set(f("throughput_tuples_per_s"));
            m.inter_node
                .get_or_create(&l)
                .set(f("inter_node_tuples_per_s"));
            m.inter_process
                .get_or_create(&l)
                .set(f("inter_process_tuples_per_s"));
            // No tuple measured yet: no series (Prometheus practice), not a p99 of 0 s that
            // reads as a very fast topology.
            if s["latency_count"].as_u64().unwrap_or(0) == 0 {
                m.latency_p99.remove(&l);
            } else {
                m.latency_p99
                    .get_or_create(&l)
                    .set(f("latency_p99_us") / 1e6);
            }
            m.workers
                .get_or_create(&l)
                .set(s["workers_running"].as_i64().unwrap_or(0));
            m.nodes
                .get_or_create(&l)
                .set(s["nodes_used"].as_i64().unwrap_or(0));
            let executors = s["executors"].as_array().map(Vec::as_slice).unwrap_or(&[]);
            let sum = |k: &str| -> i64 {
                executors
                    .iter()
                    .map(|x| x[k].as_i64().unwrap_or(0))
                    .fold(0, i64::saturating_add)
            };
            m.restarts.get_or_create(&l).set(sum("restarts"));
            m.unacked.get_or_create(&l).set(sum("unacked"));
            m.expired.get_or_create(&l).set(sum("expired"));
            let given_up = executors
                .iter()
                .filter(|x| x["gave_up"].as_bool() == Some(true))
                .count();
            m.given_up
                .get_or_create(&l)
                .set(i64::try_from(given_up).unwrap_or(i64::MAX));
            m.degraded
                .get_or_create(&l)
                .set(i64::from(s["degraded"].as_bool() == Some(true)));
            for cause in CAUSES {
                let n = run
                    .rec
                    .reschedules
                    .iter()
                    .filter(|r| r.cause == cause)
                    .count();
                let mut lc = l.clone();
                lc.push(("cause".into(), cause.into()));
                m.reschedules.get_or_create(&lc).set(n as i64);
            }
        }
    }

    /// Submits a topology.
    pub fn submit(&mut self, req: TopologySubmission) -> Result<serde_json::Value, TopologyError> {
        // Before parsing: the text is stored and sent to every agent that runs one of its
        // workers, and the origin is shown in every status, as a job's are.
        crate::limits::file("topology", &req.origin, &req.text).map_err(invalid)?;
        // Counted in ns by the reschedule controller: a longer interval would overflow there.
        let max_ms = hetsched_core::input::MAX_DURATION / 1_000_000;
        if req.interval_ms > max_ms {
            return Err(invalid(format!(
                "interval: {} ms is longer than the longest accepted, {max_ms} ms (10 years); \
                 0 turns rescheduling off",
                req.interval_ms
            )));
        }
        let topo = parse_runnable_topology(&req.origin, &req.text).map_err(invalid)?;
        let placer: StreamPlacerKind = req.placer.parse().map_err(invalid)?;
        // A placer that walks every executor pair refuses too many of them: said now, not at
        // the first node's beat (with no node up the placement waits, and would fail then).
        placer.check_pairs(&topo.topology).map_err(invalid)?;
        crate::limits::workdir("the base directory", &req.base_dir).map_err(invalid)?;
        if !(req.max_utilisation > 0.0 && req.max_utilisation <= 1.0) {
            return Err(invalid("max_utilisation must be in (0, 1]"));
        }
        hetsched_core::policy::stream::reschedule::check_gain_threshold(
            "gain_threshold",
            req.gain_threshold,
        )
        .map_err(invalid)?;
        // A worker per executor at most: more would only be clamped by the placers.
        let most = hetsched_core::input::stream_code::MAX_RUNTIME_EXECUTORS;
        if u64::from(req.workers) > most {
            return Err(invalid(format!(
                "workers: {} is more than the {most} executors a topology may have",
                req.workers
            )));
        }
        let name = topo.topology.name.clone();
        if name.len() > MAX_NAME {
            return Err(invalid(format!(
                "{}: name: the topology's name is {} bytes long; at most {MAX_NAME}",
                req.origin,
                name.len()
            )));
        }
        let inner = &mut self.inner;
        if let Some(r) = inner.runs.get(&name)
            && r.rec.state == "running"
        {
            return Err(TopologyError::Exists(format!(
                "topology `{name}` is running: kill it first (hetsched topology kill {name})"
            )));
        }
        let rec = Record {
            name: name.clone(),
            origin: req.origin,
            text: req.text,
            base_dir: req.base_dir,
            placer: placer.as_str().to_string(),
            workers: (req.workers > 0).then_some(req.workers),
            interval_ms: req.interval_ms,
            gain_threshold: req.gain_threshold,
            max_utilisation: req.max_utilisation,
            state: "running".into(),
            generation: 0,
            placement: None,
            reschedules: Vec::new(),
            submitted_ns: now_ns(),
            final_tuples: None,
            killed_ns: None,
            retired_tuples: (0, 0),
            started_as: BTreeMap::new(),
            kept: BTreeMap::new(),
            draining: BTreeMap::new(),
            await_state: BTreeMap::new(),
        };
        let mut run = Run::new(rec, topo, self.cfg.core_now());
        let live = self.cfg.alive(inner);
        let requires = &run.topo.topology.requires;
        let alive = admitted(live.clone(), &inner.nodes, requires);
        // Drained nodes may run it (the check above), but are not placed on: with only those,
        // it waits for a node as with none.
        let open = open_nodes(&alive, &inner.drained);
        if !live.is_empty() && alive.is_empty() {
            // As a batch job is refused: live nodes, none of which may run it. Said at the
            // requirement's place in the file, as every other refusal of the file is.
            let mut offered: Vec<&str> = live
                .iter()
                .filter_map(|(n, _)| inner.nodes.get(n))
                .flat_map(|n| n.attributes.iter().map(String::as_str))
                .collect();
            offered.sort_unstable();
            offered.dedup();
            let offered = if offered.is_empty() {
                "none".to_string()
            } else {
                offered.join(", ")
            };
            let met_alone =
                |r: &str| !admitted(live.clone(), &inner.nodes, &[r.to_string()]).is_empty();
            let e = hetsched_core::input::topology::requirement_error(
                &run.rec.origin,
                &run.rec.text,
                |r| !met_alone(r),
                |blamed| match blamed {
                    Some(r) => match r.strip_prefix(hetsched_core::model::cluster::NOT_PREFIX) {
                        Some(lacked) => {
                            format!(
                                "`{r}`: every live node has `{lacked}` (attributes offered: {offered})"
                            )
                        }
                        None => format!(
                            "unknown requirement `{r}`: no live node has it (attributes offered: {offered})"
                        ),
                    },
                    None => format!(
                        "no live node has them all, {} (attributes offered: {offered})",
                        requires.join(" + ")
                    ),
                },
            );
            return Err(invalid(e));
        }
        // An executor declaring more CPU than any node it may run on has (drained ones
        // included: they come back) can never be held: refused, as a batch task no node can
        // hold is. A topology that only declares more than its nodes have together is placed
        // (declared loads are estimates, and the user may mean to overcommit), said in the
        // server's log, and `overcommitted` in the reply (`topology submit` and `show` print
        // it as a warning) names each node it overcommits.
        if !alive.is_empty() {
            let whole = stream_nodes(&alive, &HashMap::new());
            if let Some((refused, why)) = beyond_capacity(&run, &whole) {
                if refused {
                    return Err(TopologyError::Precondition(why));
                }
                tracing::warn!("{why}");
            }
        }
        if !open.is_empty() {
            let busy = background(&self.held, &self.in_use, &name);
            let nodes = stream_nodes(&open, &busy);
            let mut problem = PlacementProblem::declared(&run.topo.topology, &nodes);
            problem.workers = run.rec.workers;
            let p = run.placer().place(&problem).map_err(invalid)?;
            let pl = placed(&p, &nodes);
            run.new_generation(pl, &alive);
        }
        inner.dirty.insert(name.clone());
        let mut status = self.cfg.status(inner, &run);
        // A killed topology of this name (its owner's, or the admin's doing) gives its record up,
        // and its measured traffic: an empty list replaces it, so a restart does not place the
        // new topology by what the old one's workers passed.
        if inner.runs.insert(name.clone(), run).is_some() {
            status["replaced_killed"] = serde_json::Value::Bool(true);
            inner
                .traffic_dirty
                .insert(name, (now_ns(), Vec::new(), json!([])));
        }
        Ok(status)
    }

    /// Every topology's status.
    pub fn list(&self) -> serde_json::Value {
        let inner = &self.inner;
        serde_json::Value::Array(
            inner
                .runs
                .values()
                .map(|r| self.cfg.status(inner, r))
                .collect(),
        )
    }

    /// One topology's status.
    pub fn show(&self, name: &str) -> Result<serde_json::Value, TopologyError> {
        let inner = &self.inner;
        let run = inner.runs.get(name).ok_or_else(|| not_found(name))?;
        Ok(self.cfg.status(inner, run))
    }

    /// Where worker `worker` of topology `name` runs: its placement's generation and its node.
    pub fn worker_place(
        &self,
        name: &str,
        worker: u32,
    ) -> Result<(u64, u32, String), TopologyError> {
        let run = self.inner.runs.get(name).ok_or_else(|| not_found(name))?;
        if run.rec.state != "running" {
            return Err(TopologyError::Precondition(format!(
                "topology `{name}` is {}: its workers no longer run",
                run.rec.state
            )));
        }
        let workers = run
            .rec
            .placement
            .as_ref()
            .map_or(&[][..], |p| &p.workers[..]);
        match workers.get(worker as usize) {
            // A worker kept across reschedules runs (and writes) where it started.
            Some((node, _)) => {
                let (generation, index) = run
                    .rec
                    .started_as
                    .get(&worker)
                    .copied()
                    .unwrap_or((run.rec.generation, worker));
                Ok((generation, index, node.clone()))
            }
            None if workers.is_empty() => Err(TopologyError::Precondition(format!(
                "topology `{name}` is not placed yet: it has no workers"
            ))),
            None => Err(TopologyError::NotFound(format!(
                "topology `{name}` has {}, 0 to {}: no worker {worker}",
                hetsched_core::text::count(workers.len() as u64, "worker"),
                workers.len() - 1
            ))),
        }
    }

    /// Kills a topology: agents stop its workers.
    pub fn kill(&mut self, name: &str) -> Result<serde_json::Value, TopologyError> {
        let inner = &mut self.inner;
        let run = inner.runs.get_mut(name).ok_or_else(|| not_found(name))?;
        if run.rec.state == "killed" {
            // Killed before: what it passed and when it was killed stand (its workers, no longer
            // reported, would count nothing now).
            let run = inner.runs.get(name).ok_or_else(|| not_found(name))?;
            let mut status = self.cfg.status(inner, run);
            status["already_killed"] = serde_json::Value::Bool(true);
            return Ok(status);
        }
        run.rec.state = "killed".into();
        run.rec.final_tuples = Some(tuples_passed(run));
        run.rec.killed_ns = Some(now_ns());
        // Its workers stop at their agents' next sync; none is reported from now on, and no
        // tuple flows: the last window's rates are not its rates any more.
        run.live.clear();
        run.shown = Rates::default();
        inner.dirty.insert(name.to_string());
        let run = inner.runs.get(name).ok_or_else(|| not_found(name))?;
        Ok(self.cfg.status(inner, run))
    }

    /// Forgets killed topology `name` (`hetsched topology purge`, the `[retention]` rule): its
    /// record and traffic rows are deleted in this event's commit. A running one is refused.
    pub fn purge(&mut self, name: &str) -> Result<(), TopologyError> {
        let inner = &mut self.inner;
        let run = inner.runs.get(name).ok_or_else(|| not_found(name))?;
        if run.rec.state == "running" {
            return Err(TopologyError::Precondition(format!(
                "topology `{name}` is running: kill it first (`hetsched topology kill {name}`)"
            )));
        }
        inner.runs.remove(name);
        inner.dirty.remove(name);
        inner.traffic_dirty.remove(name);
        inner.purged.insert(name.to_string());
        // Its series go now, not at the next tick (which sweeps them too): a scrape in between
        // would read a topology `topology show` no longer knows.
        self.metrics.forget(name);
        Ok(())
    }

    /// The killed topologies killed at or before `cutoff_ns` (ns since the Unix epoch), by name.
    pub fn killed_before(&self, cutoff_ns: u64) -> Vec<String> {
        self.inner
            .runs
            .values()
            .filter(|r| {
                r.rec.state == "killed"
                    && r.rec.killed_ns.unwrap_or(r.rec.submitted_ns) <= cutoff_ns
            })
            .map(|r| r.rec.name.clone())
            .collect()
    }

    /// Places a topology again now from the measured traffic (the user's `rebalance`), applying
    /// the result when it differs from the running placement.
    pub fn rebalance(&mut self, name: &str) -> Result<serde_json::Value, TopologyError> {
        let inner = &mut self.inner;
        let requires = inner
            .runs
            .get(name)
            .map(|r| r.topo.topology.requires.clone())
            .unwrap_or_default();
        let alive = admitted(self.cfg.alive(inner), &inner.nodes, &requires);
        let busy = background(&self.held, &self.in_use, name);
        let nodes = stream_nodes(&open_nodes(&alive, &inner.drained), &busy);
        let now = self.cfg.core_now();
        let run = inner.runs.get_mut(name).ok_or_else(|| not_found(name))?;
        if run.rec.state != "running" {
            return Err(TopologyError::Precondition(format!(
                "topology `{name}` is not running"
            )));
        }
        if nodes.is_empty() {
            return Err(TopologyError::Precondition(if alive.is_empty() {
                "no node that may run it is alive".into()
            } else {
                "every node alive that may run it is drained (hetsched node resume NAME)".into()
            }));
        }
        let current = run
            .rec
            .placement
            .as_ref()
            .and_then(|p| as_placement(p, &nodes));
        // As the controller's pass does: after a restart the nodes get the dead timeout to sync
        // before a placement on them counts as lost. Placing now on the nodes heard from so far
        // would move executors off nodes whose workers run on, which no handover knows of
        // (their state would be lost).
        if run.rec.placement.is_some() && current.is_none() && self.cfg.in_grace() {
            return Err(TopologyError::Precondition(
                "the server restarted moments ago and has not heard yet from every node the \
                 topology runs on (they have the dead timeout to sync): try again in a moment"
                    .into(),
            ));
        }
        let mut traffic = run.monitor.flush(now);
        let fresh = !traffic.is_empty();
        if !fresh {
            traffic = run.traffic.clone();
        }
        run.traffic = traffic.clone();
        let mut problem = if traffic.is_empty() {
            PlacementProblem::declared(&run.topo.topology, &nodes)
        } else {
            PlacementProblem::measured(&run.topo.topology, &nodes, traffic.clone())
        };
        problem.workers = run.rec.workers;
        problem.previous = current.as_ref();
        if fresh {
            // The traffic measured since the last computation is the latest now (the
            // monitor's period is spent): stored as the controller's is, so that a restart
            // places from it too.
            let loads = current
                .as_ref()
                .map_or_else(Vec::new, |c| c.node_loads(nodes.len(), &problem.loads));
            inner.traffic_dirty.insert(
                name.to_string(),
                (now_ns(), traffic, node_loads_json(&nodes, &loads)),
            );
        }
        let p = run.placer().place(&problem).map_err(invalid)?;
        let gain = current.as_ref().map_or(0.0, |c| {
            let before = evaluate(&problem, c).inter_node_traffic;
            let after = evaluate(&problem, &p).inter_node_traffic;
            if before > 0.0 {
                (before - after) / before
            } else {
                0.0
            }
        });
        if current.as_ref() != Some(&p) {
            let pl = placed(&p, &nodes);
            let used = p.nodes_used().len();
            let (workers_kept, executors_moved) = run.new_generation(pl, &alive);
            let generation = run.rec.generation;
            run.rec.reschedules.push(Reschedule {
                workers_kept,
                executors_moved,
                at_ns: now_ns(),
                cause: "rebalance".into(),
                gain,
                nodes: used,
                generation,
            });
            inner.dirty.insert(name.to_string());
        }
        inner.mark_unsaved();
        let run = inner.runs.get(name).ok_or_else(|| not_found(name))?;
        Ok(self.cfg.status(inner, run))
    }

    /// A sync of node `node`'s agent held open by the topology service began (`open`) or ended:
    /// while one is open the node is alive without syncing again, and its silence is counted
    /// from the end of the last one (the call ends when answered, or when its connection closes).
    pub fn held(&mut self, node: &str, open: bool) {
        if let Some(n) = self.inner.nodes.get_mut(node) {
            if open {
                n.held += 1;
            } else {
                n.held = n.held.saturating_sub(1);
                n.seen = Instant::now();
            }
        }
    }

    /// One agent's sync: records its workers and reports, answers what it should run.
    pub fn sync(&mut self, req: WorkersSeen, from: Option<std::net::IpAddr>) -> WorkersToRun {
        self.unsynced.remove(&req.node);
        let inner = &mut self.inner;
        let held = inner.nodes.get(&req.node).map_or(0, |n| n.held);
        inner.nodes.insert(
            req.node.clone(),
            NodeSeen {
                cores: req.cores.max(1),
                attributes: req.attributes.clone(),
                seen: Instant::now(),
                held,
                // Heard now: the stalls before are past.
                grace: Grace::default(),
            },
        );
        // The workers of this generation this node says it runs now: a start error it sends
        // for one of them is about an earlier process (the agent keeps a worker's last words
        // until a new process listens).
        let mut running_here: HashSet<(String, u32)> = HashSet::new();
        // Every key the agent reports, of any generation: a worker a new placement keeps runs
        // under its old key until the agent has taken the new routes.
        let reported: HashSet<(String, u64, u32)> = req
            .workers
            .iter()
            .map(|w| (w.topology.clone(), w.generation, w.worker))
            .collect();
        for w in req.workers {
            let Some(run) = inner.runs.get_mut(&w.topology) else {
                continue;
            };
            if run.rec.generation != w.generation || run.rec.state != "running" {
                continue;
            }
            // An agent speaks for its own node's workers only: those the placement puts there
            // and those draining from there. Another node's worker taken from it would have
            // its address handed to every peer and its cores booked on a node that runs
            // nothing of it (as `start_errors` below, checked the same way).
            if run.node_of(w.worker) != Some(req.node.as_str()) {
                continue;
            }
            // A worker says where it listens as a socket address (empty until it listens):
            // anything else is no address its peers could use, and it would be sent to each
            // of them at every sync, so it is kept as none.
            let addr = match w.addr.parse::<std::net::SocketAddr>() {
                Ok(sa) => match from {
                    Some(ip) if sa.ip().is_unspecified() => {
                        std::net::SocketAddr::new(ip, sa.port()).to_string()
                    }
                    _ => sa.to_string(),
                },
                Err(_) => String::new(),
            };
            // Another process under this worker's key (started again by its agent): the one
            // before reports no more. Forgotten, what it passed stays counted and the new one's
            // counters, from zero, are measured from zero.
            if run.live.get(&w.worker).is_some_and(|l| l.pid != w.pid) {
                run.forget_worker(w.worker);
            }
            let mut report = w.report;
            if let Some(r) = &mut report {
                run.feed(w.worker, w.pid, r);
                run.warn_given_up(w.worker, &req.node, r);
                // It runs (and has taken what was handed over, or stopped waiting): a restart
                // from now on starts its executors without waiting.
                if run.rec.await_state.remove(&w.worker).is_some() {
                    inner.dirty.insert(run.rec.name.clone());
                }
            }
            let entry = run
                .live
                .entry(w.worker)
                .or_insert_with(|| Live::new(addr.clone(), w.pid));
            entry.addr = addr;
            entry.pid = w.pid;
            run.start_errors.remove(&w.worker);
            running_here.insert((w.topology, w.worker));
            if report.is_some() {
                entry.report = report;
            }
        }
        // The agent speaks for every worker of its node: one it does not report runs no more
        // (an agent started again runs none of its predecessor's), so its process and address
        // go — `topology show` names no dead process and peers are sent no dead address. A
        // held call looked at again speaks only for when it was sent.
        for run in inner.runs.values_mut() {
            if req.restated || run.rec.state != "running" {
                continue;
            }
            let gone: Vec<u32> = run
                .live
                .keys()
                .copied()
                .filter(|&w| run.node_of(w) == Some(req.node.as_str()))
                .filter(|&w| !running_here.contains(&(run.rec.name.clone(), w)))
                .filter(|w| {
                    !run.kept
                        .get(w)
                        .is_some_and(|&(g, old)| reported.contains(&(run.rec.name.clone(), g, old)))
                })
                .collect();
            for w in gone {
                run.forget_worker(w);
            }
        }
        // What this node cannot start replaces what it said before (a held call looked at
        // again says nothing new).
        let start_errors = if req.restated {
            Vec::new()
        } else {
            req.start_errors
        };
        for run in inner.runs.values_mut().filter(|_| !req.restated) {
            let placed_here = |w: u32| {
                run.rec.placement.as_ref().is_some_and(|p| {
                    p.workers
                        .get(w as usize)
                        .is_some_and(|(n, _)| *n == req.node)
                })
            };
            run.start_errors.retain(|&w, _| !placed_here(w));
        }
        for e in start_errors {
            let Some(run) = inner.runs.get_mut(&e.topology) else {
                continue;
            };
            let placed_here = run.rec.placement.as_ref().is_some_and(|p| {
                p.workers
                    .get(e.worker as usize)
                    .is_some_and(|(n, _)| *n == req.node)
            });
            if run.rec.generation != e.generation
                || run.rec.state != "running"
                || !placed_here
                || running_here.contains(&(e.topology.clone(), e.worker))
            {
                continue;
            }
            // Its node runs it no more (a process started again after a back-off, seen by an
            // earlier sync, failed again): it is not running, and its last report counts
            // nothing. Kept, it read running for ever and its start error was never shown.
            run.forget_worker(e.worker);
            // The worker's last words: what the owner's components wrote, shown to every
            // user (`hetsched topology show`), so with no terminal escape in it.
            let mut message = e.message;
            crate::limits::truncate(&mut message, MAX_START_ERROR);
            hetsched_core::text::escape_controls(&mut message);
            crate::limits::truncate(&mut message, MAX_START_ERROR);
            run.start_errors.insert(e.worker, message);
        }
        let mut out = Vec::new();
        for run in inner.runs.values_mut() {
            if run.retire_drained() {
                inner.dirty.insert(run.rec.name.clone());
            }
        }
        for run in inner.runs.values() {
            if run.rec.state != "running" {
                continue;
            }
            let Some(p) = &run.rec.placement else {
                continue;
            };
            let workers = p
                .workers
                .iter()
                .enumerate()
                .map(|(i, (node, _))| (i as u32, node))
                .chain(run.draining.iter().map(|(i, (node, _))| (*i, node)));
            for (idx, node) in workers {
                if node != &req.node {
                    continue;
                }
                let config = WorkerConfig {
                    topology_origin: run.rec.origin.clone(),
                    topology_text: run.rec.text.clone(),
                    worker: idx,
                    assignment: p.assignment.clone(),
                    base_dir: PathBuf::from(&run.rec.base_dir),
                    work_dir: PathBuf::new(),
                    listen: String::new(),
                    started_ns: run.rec.submitted_ns,
                    await_state: run.rec.await_state.get(&idx).cloned().unwrap_or_default(),
                    // Each agent derives the worker key from the agent token: it never travels.
                    key: String::new(),
                    // Each agent decides: TLS when it reaches the server over TLS.
                    encrypt: false,
                };
                let peers = run
                    .live
                    .iter()
                    .filter(|(w, _)| **w != idx)
                    .map(|(w, l)| (*w, l.addr.clone()))
                    .collect();
                let (keep_generation, keep_worker) = run.kept.get(&idx).copied().unwrap_or((0, 0));
                let cores = if (idx as usize) < p.workers.len() {
                    worker_cores(&p.assignment, &run.topo.topology.declared_loads(), idx)
                } else {
                    0
                };
                out.push(WorkerOrder {
                    topology: run.rec.name.clone(),
                    generation: run.rec.generation,
                    worker: idx,
                    config,
                    peers,
                    keep_generation,
                    keep_worker,
                    run_as: String::new(),
                    cores,
                });
            }
        }
        inner.mark_unsaved();
        let report_now = inner
            .runs
            .values()
            .any(|r| r.asked.is_some() && r.rec.state == "running");
        WorkersToRun {
            workers: out,
            report_now,
        }
    }

    /// The controller's periodic pass: places topologies waiting for nodes, re-places those
    /// that lost a node, and runs spec 04's reschedule controller.
    pub fn tick(&mut self) {
        let inner = &mut self.inner;
        let alive = self.cfg.alive(inner);
        let grace = self.cfg.in_grace();
        let now = self.cfg.core_now();
        let mut saves = Vec::new();
        let mut traffic_saves = Vec::new();
        for run in inner.runs.values_mut() {
            // A killed topology's rates stay zero: what its window held before the kill is not
            // a rate of it any more (`kill` cleared what it shows).
            if run.rec.state == "running" {
                run.roll_window();
            }
            let alive = admitted(alive.clone(), &inner.nodes, &run.topo.topology.requires);
            let busy = background(&self.held, &self.in_use, &run.rec.name);
            // Placements use the nodes not drained; with none of those, a topology stays
            // where it is (on drained nodes) or waits.
            let nodes = stream_nodes(&open_nodes(&alive, &inner.drained), &busy);
            if run.rec.state != "running" || nodes.is_empty() {
                continue;
            }
            let current = run
                .rec
                .placement
                .as_ref()
                .and_then(|p| as_placement(p, &nodes));
            // Off the open nodes: a node it uses died (lost) or was drained.
            let moved_off = run.rec.placement.is_some() && current.is_none();
            let lost = moved_off
                && run
                    .rec
                    .placement
                    .as_ref()
                    .is_some_and(|p| as_placement(p, &stream_nodes(&alive, &busy)).is_none());
            if run.rec.placement.is_none() || (moved_off && !grace) {
                let traffic = run.traffic.clone();
                let mut problem = if traffic.is_empty() {
                    PlacementProblem::declared(&run.topo.topology, &nodes)
                } else {
                    PlacementProblem::measured(&run.topo.topology, &nodes, traffic)
                };
                problem.workers = run.rec.workers;
                match run.placer().place(&problem) {
                    Ok(p) => {
                        let first = run.rec.placement.is_none();
                        let used = p.nodes_used().len();
                        let pl = placed(&p, &nodes);
                        let over = overcommitted(run, &pl, |n| inner.nodes.get(n).map(|s| s.cores));
                        if !over.is_empty() {
                            tracing::warn!(topology = %run.rec.name, "placed on {}: {over}", hetsched_core::text::count(used as u64, "node"));
                        }
                        let (workers_kept, executors_moved) = run.new_generation(pl, &alive);
                        if !first {
                            let generation = run.rec.generation;
                            run.rec.reschedules.push(Reschedule {
                                workers_kept,
                                executors_moved,
                                at_ns: now_ns(),
                                cause: if lost { "node-lost" } else { "node-drained" }.into(),
                                gain: 0.0,
                                nodes: used,
                                generation,
                            });
                            if lost {
                                tracing::warn!(topology = %run.rec.name, "a node was lost: placed again on {}", hetsched_core::text::count(used as u64, "node"));
                            } else {
                                tracing::info!(topology = %run.rec.name, "a node was drained: placed again on {}", hetsched_core::text::count(used as u64, "node"));
                            }
                        }
                        saves.push(run.rec.clone());
                    }
                    Err(e) => tracing::error!(topology = %run.rec.name, "cannot place: {e}"),
                }
                continue;
            }
            let Some(current) = current else { continue };
            if run.controller.is_none() {
                continue;
            }
            if run.last_compute.elapsed() < Duration::from_millis(run.rec.interval_ms) {
                continue;
            }
            // Spec 04: when a reschedule is considered, the monitors report at once. Ask every
            // worker (through the agents' next sync) and compute when all have answered, or
            // after REPORT_WAIT.
            match run.asked {
                None => {
                    run.asked = Some((now_ns(), Instant::now()));
                    continue;
                }
                Some((asked_ns, asked_at)) => {
                    let fresh = run
                        .live
                        .values()
                        .all(|l| l.report.as_ref().is_some_and(|r| r.at_ns >= asked_ns));
                    if !fresh && asked_at.elapsed() < REPORT_WAIT {
                        continue;
                    }
                }
            }
            run.asked = None;
            run.last_compute = Instant::now();
            let traffic = run.monitor.flush(now);
            if traffic.is_empty() {
                continue;
            }
            run.traffic = traffic.clone();
            let mut problem =
                PlacementProblem::measured(&run.topo.topology, &nodes, traffic.clone());
            problem.workers = run.rec.workers;
            let loads = current.node_loads(nodes.len(), &problem.loads);
            let node_loads = node_loads_json(&nodes, &loads);
            traffic_saves.push((run.rec.name.clone(), traffic, node_loads));
            let placer = run.placer();
            let overloaded_nodes = evaluate(&problem, &current).overloaded_nodes;
            let Some(controller) = run.controller.as_mut() else {
                continue;
            };
            let decision = controller.tick(now, placer.as_ref(), &problem, &current);
            let logged = match &decision {
                Ok(Decision::Apply { cause, gain, .. }) => Some((
                    *gain,
                    match cause {
                        Cause::Overload => "overload",
                        Cause::Traffic => "traffic",
                    },
                )),
                Ok(Decision::Keep { gain }) => Some((*gain, "keep")),
                _ => None,
            };
            if let Some((gain, what)) = logged {
                if run.computations.len() >= COMPUTATIONS_KEPT {
                    run.computations.pop_front();
                }
                run.computations.push_back(Computation {
                    at_ns: now_ns(),
                    overloaded_nodes,
                    gain,
                    decision: what.into(),
                });
            }
            match decision {
                Ok(Decision::Apply {
                    cause,
                    gain,
                    placement,
                }) => {
                    let used = placement.nodes_used().len();
                    let (workers_kept, executors_moved) =
                        run.new_generation(placed(&placement, &nodes), &alive);
                    let generation = run.rec.generation;
                    let cause = match cause {
                        Cause::Overload => "overload",
                        Cause::Traffic => "traffic",
                    };
                    tracing::info!(topology = %run.rec.name, cause, gain, "rescheduled onto {}", hetsched_core::text::count(used as u64, "node"));
                    run.rec.reschedules.push(Reschedule {
                        workers_kept,
                        executors_moved,
                        at_ns: now_ns(),
                        cause: cause.into(),
                        gain,
                        nodes: used,
                        generation,
                    });
                    saves.push(run.rec.clone());
                }
                Ok(_) => {}
                Err(e) => tracing::error!(topology = %run.rec.name, "reschedule: {e}"),
            }
        }
        for rec in saves {
            inner.dirty.insert(rec.name);
        }
        for (name, t, l) in traffic_saves {
            inner.traffic_dirty.insert(name, (now_ns(), t, l));
        }
        inner.mark_unsaved();
        self.update_metrics();
    }
}

impl Cfg {
    fn core_now(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }

    /// Nodes alive now, by name, with their cores. After a restart, nodes get `dead_timeout`
    /// to sync before placements on them count as lost.
    fn alive(&self, inner: &Inner) -> Vec<(String, u32)> {
        inner
            .nodes
            .iter()
            .filter(|(name, n)| {
                (n.held > 0 || n.grace.silent_from(n.seen).elapsed() < self.dead_timeout)
                    && !inner.down.contains(*name)
            })
            .map(|(name, n)| (name.clone(), n.cores))
            .collect()
    }

    fn in_grace(&self) -> bool {
        self.started.elapsed() < self.dead_timeout
    }

    fn status(&self, inner: &Inner, run: &Run) -> serde_json::Value {
        let topo = &run.topo.topology;
        let name_of = |e: u32| topo.executor_name(ExecutorId(e));
        let alive = self.alive(inner);
        let mut workers = Vec::new();
        let mut placement = Vec::new();
        let mut inter_node = 0.0;
        let mut inter_process = 0.0;
        let mut inter_node_total: u64 = 0;
        let mut total: u64 = 0;
        let mut spouts_done = true;
        let mut p50: u64 = 0;
        let mut p99: u64 = 0;
        let mut latency_count: u64 = 0;
        let mut running_workers = 0;
        if let Some(p) = &run.rec.placement {
            for (e, node) in p.nodes.iter().enumerate() {
                placement.push(json!({"executor": name_of(e as u32), "node": node, "process": p.process[e], "worker": p.assignment[e]}));
            }
            for (w, (node, process)) in p.workers.iter().enumerate() {
                let live = run.live.get(&(w as u32));
                let executors: Vec<String> = p
                    .assignment
                    .iter()
                    .enumerate()
                    .filter(|(_, a)| **a == w as u32)
                    .map(|(e, _)| name_of(e as u32))
                    .collect();
                if live.is_some() {
                    running_workers += 1;
                }
                workers.push(json!({
                    "worker": w, "node": node, "process": process, "executors": executors,
                    "addr": live.map(|l| l.addr.clone()), "pid": live.map(|l| l.pid),
                    "start_error": run.start_errors.get(&(w as u32)),
                    "remote_out": live.and_then(|l| l.report.as_ref()).map(|r| r.remote_out),
                    "rss_bytes": live.and_then(|l| l.report.as_ref()).map(|r| r.rss_bytes),
                    "encrypted": live.and_then(|l| l.report.as_ref()).map(|r| r.encrypted),
                    "refused_connections": live.and_then(|l| l.report.as_ref()).map(|r| r.refused_connections),
                }));
            }
            for pair in &run.shown.pairs {
                let (a, b) = (pair.from.index(), pair.to.index());
                if p.nodes.get(a) != p.nodes.get(b) {
                    inter_node += pair.tuples_per_s;
                } else if p.process.get(a) != p.process.get(b) {
                    inter_process += pair.tuples_per_s;
                }
            }
            let spouts: Vec<u32> = topo
                .executor_components()
                .iter()
                .enumerate()
                .filter(|(_, c)| {
                    topo.components[**c].kind
                        == hetsched_core::model::topology::ComponentKind::Spout
                })
                .map(|(e, _)| e as u32)
                .collect();
            let mut seen_spouts = 0;
            (total, inter_node_total) = run.rec.final_tuples.unwrap_or_else(|| tuples_passed(run));
            for l in run.live.values() {
                let Some(r) = &l.report else { continue };
                for e in &r.executors {
                    if spouts.contains(&e.executor) {
                        seen_spouts += 1;
                        spouts_done &= e.done;
                    }
                }
                if r.latency.count > 0 {
                    p50 = p50.max(r.latency.p50_us);
                    p99 = p99.max(r.latency.p99_us);
                    latency_count = latency_count.saturating_add(r.latency.count);
                }
            }
            spouts_done &= seen_spouts == spouts.len();
        } else {
            spouts_done = false;
        }
        // Where each executor runs now, as the workers report: (worker, pid, its figures there).
        let mut running_at: HashMap<u32, (u32, u32, &hetsched_stream::metrics::ExecutorReport)> =
            HashMap::new();
        for (w, l) in &run.live {
            let Some(r) = &l.report else { continue };
            for x in &r.executors {
                let mine = run
                    .rec
                    .placement
                    .as_ref()
                    .and_then(|p| p.assignment.get(x.executor as usize))
                    == Some(w);
                if mine || !running_at.contains_key(&x.executor) {
                    running_at.insert(x.executor, (*w, l.pid, x));
                }
            }
        }
        let executors: Vec<serde_json::Value> = (0..topo.executor_count() as u32)
            .map(|e| {
                let received = rate_sum(
                    run.shown
                        .pairs
                        .iter()
                        .filter(|p| p.to.0 == e)
                        .map(|p| p.tuples_per_s),
                );
                json!({
                    "executor": name_of(e),
                    "node": run.rec.placement.as_ref().and_then(|p| p.nodes.get(e as usize)),
                    "received_per_s": received,
                    "emitted_per_s": run.shown.emitted_per_s.get(&e).copied().unwrap_or(0.0),
                    "cpu_percent": run.shown.cpu_percent.get(&e).copied().unwrap_or(0.0),
                    "running_in_worker": running_at.get(&e).map(|r| r.0),
                    "pid": running_at.get(&e).map(|r| r.1),
                    "started_ns": running_at.get(&e).map(|r| r.2.started_ns),
                    "unacked": running_at.get(&e).map(|r| r.2.unacked),
                    "expired": running_at.get(&e).map(|r| r.2.expired),
                    "restarts": running_at.get(&e).map(|r| r.2.restarts),
                    "ended": running_at.get(&e).and_then(|r| r.2.ended.as_deref()),
                    "gave_up": running_at.get(&e).map(|r| r.2.gave_up),
                })
            })
            .collect();
        // Executors the workers gave up on pass no tuple: a running topology with any is
        // degraded, whatever its throughput says.
        let executors_given_up: Vec<String> = if run.rec.state == "running" {
            (0..topo.executor_count() as u32)
                .filter(|e| running_at.get(e).is_some_and(|r| r.2.gave_up))
                .map(name_of)
                .collect()
        } else {
            Vec::new()
        };
        let mut node_loads: BTreeMap<String, (f64, f64)> = BTreeMap::new();
        if let Some(p) = &run.rec.placement {
            let declared = topo.loads_from_traffic(&run.shown.pairs);
            for (e, n) in p.nodes.iter().enumerate() {
                let entry = node_loads.entry(n.clone()).or_default();
                entry.0 += run
                    .shown
                    .cpu_percent
                    .get(&(e as u32))
                    .copied()
                    .unwrap_or(0.0);
                if !run.shown.pairs.is_empty() {
                    entry.1 += declared.get(e).copied().unwrap_or(0.0);
                }
            }
        }
        let throughput = rate_sum(
            run.shown
                .emitted_per_s
                .iter()
                .filter(|(e, _)| {
                    topo.locate(ExecutorId(**e)).is_some_and(|(c, _)| {
                        topo.components[c].kind
                            == hetsched_core::model::topology::ComponentKind::Spout
                    })
                })
                .map(|(_, r)| *r),
        );
        json!({
            "name": run.rec.name,
            "state": run.rec.state,
            "degraded": !executors_given_up.is_empty(),
            "executors_given_up": executors_given_up,
            "overcommitted": match &run.rec.placement {
                Some(p) if run.rec.state == "running" => {
                    overcommitted(run, p, |n| inner.nodes.get(n).map(|s| s.cores))
                }
                _ => String::new(),
            },
            "placer": run.rec.placer,
            "requires": topo.requires,
            // Set by a submission's and a kill's own replies ([`TopologyStatus`]'s keys all).
            "replaced_killed": false,
            "already_killed": false,
            "workers_requested": run.rec.workers,
            "generation": run.rec.generation,
            "submitted_ns": run.rec.submitted_ns,
            "nodes_alive": alive.len(),
            "nodes_used": run.rec.placement.as_ref().map_or(0, |p| { let mut v = p.nodes.clone(); v.sort(); v.dedup(); v.len() }),
            "workers": workers,
            "workers_running": running_workers,
            "placement": placement,
            "executors": executors,
            "traffic": run.shown.pairs.iter().map(|p| json!({"from": name_of(p.from.0), "to": name_of(p.to.0), "tuples_per_s": p.tuples_per_s})).collect::<Vec<_>>(),
            "node_loads": node_loads.iter().map(|(n, (cpu, model))| json!({"node": n, "cpu_percent": cpu, "model_load_percent": model})).collect::<Vec<_>>(),
            "window_s": run.shown.window_s,
            "throughput_tuples_per_s": throughput,
            "inter_node_tuples_per_s": inter_node,
            "inter_process_tuples_per_s": inter_process,
            "tuples_total": total,
            "inter_node_tuples_total": inter_node_total,
            "latency_p50_us": p50,
            "latency_p99_us": p99,
            "latency_count": latency_count,
            "spouts_done": spouts_done,
            "reschedules": run.rec.reschedules,
            "workers_draining": run.draining.len(),
            "controller": {
                "interval_ms": run.rec.interval_ms,
                "gain_threshold": run.rec.gain_threshold,
                "computations": run.computations,
            },
        })
    }
}

fn not_found(name: &str) -> TopologyError {
    TopologyError::NotFound(format!(
        "no topology named `{}` (hetsched topology list)",
        hetsched_core::text::clip(name)
    ))
}

const UPSERT_RECORD: &str = "INSERT INTO topologies(name, record) VALUES (?1, ?2)
    ON CONFLICT(name) DO UPDATE SET record = excluded.record";
const UPSERT_TRAFFIC: &str = "INSERT INTO topology_traffic(name, at_ns, traffic, node_loads)
    VALUES (?1, ?2, ?3, ?4) ON CONFLICT(name) DO UPDATE SET at_ns = excluded.at_ns,
    traffic = excluded.traffic, node_loads = excluded.node_loads";

fn encode(what: &str, e: serde_json::Error) -> StoreError {
    StoreError::Corrupt(format!("{what}: {e}"))
}

/// A topology hands out no tasks: the heartbeat hooks keep their defaults, and its workers are
/// supervised through the agents' sync (`State::topology_sync`). Its jobs are listed by
/// `hetsched topology list`, not `ListJobs`.
impl JobKind for Topology {
    fn kind(&self) -> Kind {
        Kind::Topology
    }

    /// No node's silence counts the stall: before, the controller's first pass after a stop
    /// of the server longer than the dead timeout found the nodes whose syncs it had not read
    /// yet lost, and moved their topologies onto those it had (cause `node-lost`).
    fn server_stalled(&mut self, stall: Stall) {
        for n in self.inner.nodes.values_mut() {
            n.grace.stalled(n.seen, stall);
        }
    }

    fn has_changes(&self) -> bool {
        !self.inner.dirty.is_empty()
            || !self.inner.traffic_dirty.is_empty()
            || !self.inner.purged.is_empty()
    }

    fn persist(&self, tx: &rusqlite::Transaction) -> Result<(), StoreError> {
        for name in &self.inner.dirty {
            let Some(run) = self.inner.runs.get(name) else {
                continue;
            };
            let text = serde_json::to_string(&run.rec)
                .map_err(|e| encode(&format!("topology {name}"), e))?;
            tx.execute(UPSERT_RECORD, rusqlite::params![name, text])?;
        }
        for (name, (at, traffic, loads)) in &self.inner.traffic_dirty {
            let t = serde_json::to_string(traffic)
                .map_err(|e| encode(&format!("traffic of {name}"), e))?;
            tx.execute(
                UPSERT_TRAFFIC,
                rusqlite::params![name, *at as i64, t, loads.to_string()],
            )?;
        }
        for name in &self.inner.purged {
            delete_rows(tx, name)?;
        }
        Ok(())
    }

    fn committed(&mut self) {
        self.inner.dirty.clear();
        self.inner.traffic_dirty.clear();
        self.inner.purged.clear();
    }

    fn counts(&self) -> TaskCounts {
        TaskCounts::default()
    }

    /// 0: a topology takes no job id and is listed by `hetsched topology list`, not among
    /// the jobs (counted, it made the dashboard's jobs total, which it reads as the newest
    /// job's id, name a job that does not exist).
    fn job_count(&self) -> u64 {
        0
    }

    fn jobs_page(&self, _rd: &Read, _cursor: u64, _limit: usize) -> JobsPage {
        JobsPage::default()
    }

    fn job(&self, _rd: &Read, id: u64) -> Result<JobInfo, StateError> {
        Err(StateError::NoJob(id))
    }

    fn tasks_page(
        &self,
        _rd: &Read,
        _job: u64,
        _cursor: u64,
        _limit: usize,
    ) -> Result<TasksPage, StateError> {
        Ok(TasksPage::default())
    }

    fn cancel(&mut self, _cx: &mut Ctx, job: u64, _why: &str) -> Result<u64, StateError> {
        Err(StateError::NoJob(job))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hetsched_stream::metrics::{ExecutorReport, LatencySummary};

    const PIPE: &str = "name = \"pipe\"\n\
        [[component]]\nname = \"numbers\"\nkind = \"spout\"\nparallelism = 2\ncpu = 50.0\nbuiltin = \"sequence-spout\"\n\
        [[component]]\nname = \"keep\"\nkind = \"bolt\"\nparallelism = 2\ncpu = 50.0\nbuiltin = \"filter\"\n\
        [[stream]]\nfrom = \"numbers\"\nto = \"keep\"\ngrouping = \"shuffle\"\nrate = 10.0\n";

    fn seen(workers: Vec<WorkerSeen>) -> WorkersSeen {
        WorkersSeen {
            restated: false,
            node: "n".into(),
            cores: 4,
            attributes: Vec::new(),
            workers,
            start_errors: Vec::new(),
        }
    }

    fn executor(executor: u32, count: u64) -> ExecutorReport {
        ExecutorReport {
            executor,
            name: String::new(),
            cpu_ns: count,
            emitted: count,
            received: 0,
            acked: 0,
            failed: 0,
            done: false,
            started_ns: 0,
            unacked: 0,
            expired: 0,
            restarts: 0,
            ended: None,
            gave_up: false,
        }
    }

    /// A server with no node, running `PIPE` placed by `placer` on `workers` workers (0: the
    /// placer's choice).
    fn pipe(placer: &str, workers: u32) -> Topology {
        let mut t = Topology::restore(Vec::new(), Duration::from_secs(60)).expect("empty");
        t.sync(seen(Vec::new()), None);
        t.submit(TopologySubmission {
            origin: "pipe.toml".into(),
            text: PIPE.into(),
            base_dir: "/".into(),
            placer: placer.into(),
            workers,
            max_utilisation: 0.9,
            ..Default::default()
        })
        .expect("submit");
        t
    }

    /// A stall of the server longer than the dead timeout moves no topology: after it, the
    /// controller's pass that has read one node's sync but not yet the other's (both were
    /// queued in its sockets) finds both alive, and leaves the topology where it runs; a node
    /// still silent a dead timeout after the stall is lost as ever. Before, the pass moved the
    /// topology off the node it had not read yet (cause `node-lost`).
    #[test]
    fn a_stall_of_the_server_moves_no_topology() {
        let timeout = Duration::from_secs(5);
        let on = |node: &str| WorkersSeen {
            node: node.into(),
            ..seen(Vec::new())
        };
        let stalled = |ended_ago: u64| {
            let mut t = Topology::restore(Vec::new(), timeout).expect("empty");
            t.sync(on("n"), None);
            t.sync(on("m"), None);
            t.submit(TopologySubmission {
                origin: "pipe.toml".into(),
                text: PIPE.into(),
                base_dir: "/".into(),
                placer: "even".into(),
                workers: 2,
                max_utilisation: 0.9,
                ..Default::default()
            })
            .expect("submit");
            t.tick();
            // Both last synced 14 s ago; the server stopped meanwhile, and listens again since
            // `ended_ago` seconds; `m`'s queued sync is read, `n`'s not yet.
            let now = Instant::now();
            let ago = |s: u64| now.checked_sub(Duration::from_secs(s)).expect("after boot");
            for n in t.inner.nodes.values_mut() {
                n.seen = ago(14);
            }
            // Long after the server's start (no restart's grace).
            t.cfg.started = ago(60);
            t.server_stalled(Stall {
                end: ago(ended_ago),
                new: Duration::from_secs(8),
            });
            t.sync(on("m"), None);
            t
        };
        let mut t = stalled(0);
        let before = t.inner.runs["pipe"].rec.placement.clone();
        let used = before.as_ref().map(|p| {
            let mut nodes = p.nodes.clone();
            nodes.sort();
            nodes.dedup();
            nodes
        });
        assert_eq!(used, Some(vec!["m".to_string(), "n".to_string()]));
        t.tick();
        assert_eq!(
            t.inner.runs["pipe"].rec.placement, before,
            "moved on a stall"
        );
        // Silent for a dead timeout after the stall: lost, and the topology moves.
        let mut t = stalled(6);
        t.tick();
        let after = t.inner.runs["pipe"].rec.placement.clone().expect("placed");
        assert!(after.nodes.iter().all(|n| n == "m"), "{after:?}");
    }

    /// What a worker's report says of executors is kept only for the topology's executors,
    /// once each: the per-executor counters kept from report to report no longer grow with
    /// whatever executor numbers an agent sends. Before, each report naming new numbers added
    /// entries that were never dropped (and every status walked the report's list once per
    /// spout, under the state's lock, every controller tick).
    #[test]
    fn executor_counters_are_kept_only_for_the_topologys_executors() {
        let mut t = pipe("one-phase", 0);
        for round in 0..3u32 {
            let report = WorkerReport {
                worker: 0,
                at_ns: 0,
                pairs: Vec::new(),
                // Executor 1 listed three times, and numbers the topology (4 executors) lacks.
                executors: (0..3)
                    .map(|_| executor(1, 1_000))
                    .chain((4 + round * 10_000..4 + (round + 1) * 10_000).map(|e| executor(e, 1)))
                    .collect(),
                remote_out: 0,
                remote_in: 0,
                dropped: 0,
                latency: LatencySummary::default(),
                rss_bytes: 0,
                encrypted: false,
                refused_connections: 0,
            };
            t.sync(
                seen(vec![WorkerSeen {
                    topology: "pipe".into(),
                    generation: 1,
                    worker: 0,
                    addr: "127.0.0.1:1".into(),
                    pid: 1,
                    report: Some(report),
                }]),
                None,
            );
        }
        let run = &t.inner.runs["pipe"];
        assert_eq!(run.prev_cpu.len(), 1, "executor 1's CPU only");
        assert_eq!(run.prev_emitted.len(), 1, "executor 1's emitted count only");
        let window = &run.live[&0].window;
        assert!(window.cpu_ns.len() <= 1 && window.emitted.len() <= 1);
        let kept = run.live[&0].report.as_ref().expect("report");
        assert_eq!(kept.executors.len(), 1, "kept once");
    }

    /// Counters in reports are the agents' numbers: their sums over workers (tuples passed,
    /// latency samples, an executor's CPU while two workers hand it over) saturate rather than
    /// overflow. Before, two workers' counts near `u64::MAX` overflowed under the state's lock
    /// — a panic that poisoned it in a debug build (every controller tick computes the sums),
    /// a wrapped total in a release one.
    #[test]
    fn counters_near_the_top_of_u64_saturate_when_summed_over_workers() {
        let mut t = pipe("even", 2);
        let big = u64::MAX - 1;
        let report = |worker: u32| WorkerReport {
            worker,
            at_ns: 0,
            pairs: vec![hetsched_stream::metrics::PairCount {
                from: worker,
                to: 2 + worker,
                tuples: big,
            }],
            executors: vec![executor(0, big)],
            remote_out: 0,
            remote_in: 0,
            dropped: 0,
            latency: LatencySummary {
                count: big,
                p50_us: 1,
                p99_us: 1,
                max_us: 1,
            },
            rss_bytes: 0,
            encrypted: false,
            refused_connections: 0,
        };
        let worker = |worker: u32| WorkerSeen {
            topology: "pipe".into(),
            generation: 1,
            worker,
            addr: "127.0.0.1:7".into(),
            pid: 1,
            report: Some(report(worker)),
        };
        t.sync(seen(vec![worker(0), worker(1)]), None);
        let shown = t.show("pipe").expect("show");
        assert_eq!(shown["tuples_total"], u64::MAX, "{shown}");
        assert_eq!(shown["latency_count"], u64::MAX, "{shown}");
        t.tick();
        let killed = t.kill("pipe").expect("kill");
        assert_eq!(killed["tuples_total"], u64::MAX, "{killed}");
    }

    /// A worker's address is what its peers are sent at every sync: one that is not a socket
    /// address (what a worker listening says) is not kept nor passed on. Before, any string was,
    /// a megabyte included, and went to every other agent of the topology twice a second.
    #[test]
    fn a_worker_address_that_is_not_a_socket_address_is_not_passed_on() {
        let mut t = pipe("even", 2);
        let worker = |worker: u32, addr: String| WorkerSeen {
            topology: "pipe".into(),
            generation: 1,
            worker,
            addr,
            pid: 1,
            report: None,
        };
        let told = t.sync(
            seen(vec![
                worker(0, "x".repeat(1 << 20)),
                worker(1, "127.0.0.1:7".into()),
            ]),
            None,
        );
        let run = &t.inner.runs["pipe"];
        assert_eq!(run.live[&0].addr, "", "running, but not reachable at that");
        assert_eq!(run.live[&1].addr, "127.0.0.1:7");
        assert!(
            told.workers
                .iter()
                .flat_map(|w| w.peers.values())
                .all(|a| a.len() < 64),
            "{:?}",
            told.workers
                .iter()
                .map(|w| w.peers.len())
                .collect::<Vec<_>>()
        );
    }

    /// A server restarted under a running topology measures its rates from then on. The
    /// workers' counters are cumulative since their executors started; before, the first
    /// report after the restart was taken whole as the current window's traffic, so `topology
    /// show` gave a spout that had emitted 1,000 tuples a second for an hour 1.8 million a
    /// second, and the controller's monitor saw the hour as one interval.
    #[test]
    fn after_a_restart_the_first_window_shows_the_rate_not_the_workers_whole_history() {
        let t = pipe("even", 2);
        let stored = t
            .inner
            .runs
            .values()
            .map(|run| Stored {
                record: run.rec.clone(),
                traffic: Vec::new(),
            })
            .collect();
        let mut t = Topology::restore(stored, Duration::from_secs(60)).expect("restored");
        let hour = 3_600_000_000_000u64;
        let now = now_ns();
        // Executor 0 (a spout) started an hour ago at 1,000 tuples a second; its receiver,
        // executor 2, has received them all.
        let report = |at_ns: u64, count: u64| WorkerReport {
            worker: 0,
            at_ns,
            pairs: vec![hetsched_stream::metrics::PairCount {
                from: 0,
                to: 2,
                tuples: count,
            }],
            executors: [0, 2]
                .map(|e| ExecutorReport {
                    started_ns: now - hour,
                    ..executor(e, count)
                })
                .to_vec(),
            remote_out: 0,
            remote_in: 0,
            dropped: 0,
            latency: LatencySummary::default(),
            rss_bytes: 0,
            encrypted: false,
            refused_connections: 0,
        };
        let sync = |t: &mut Topology, r: WorkerReport| {
            t.sync(
                seen(vec![WorkerSeen {
                    topology: "pipe".into(),
                    generation: 1,
                    worker: 0,
                    addr: "127.0.0.1:1".into(),
                    pid: 1,
                    report: Some(r),
                }]),
                None,
            );
        };
        sync(&mut t, report(now, 3_600_000));
        // Two seconds on: 2,000 more.
        sync(&mut t, report(now + 2_000_000_000, 3_602_000));
        // The window closed two seconds after it opened, by the worker's clock.
        t.inner.runs.get_mut("pipe").expect("run").roll_window();
        let shown = t.show("pipe").expect("show");
        // `executors` lists every executor in order of its number.
        let rate = |e: usize, key: &str| {
            shown["executors"]
                .as_array()
                .expect("executors")
                .get(e)
                .and_then(|x| x[key].as_f64())
                .unwrap_or_else(|| panic!("executor {e}'s {key}: {shown}"))
        };
        let emitted = rate(0, "emitted_per_s");
        assert!(
            (900.0..=1_100.0).contains(&emitted),
            "the spout emits about 1,000 a second, shown {emitted}: {shown}"
        );
        let idle = &shown["executors"][3]["received_per_s"];
        assert_eq!(
            idle.to_string(),
            "0.0",
            "an executor that received nothing: {shown}"
        );
        let received = rate(2, "received_per_s");
        assert!(
            (900.0..=1_100.0).contains(&received),
            "the bolt receives about 1,000 a second, shown {received}: {shown}"
        );
    }

    /// A worker's report of the pipe (`pipe("even", 2)`): each pair `(from, to, tuples)`
    /// received, and each executor `(executor, emitted)`, at `at_ns` by its clock.
    fn report_at(
        worker: u32,
        at_ns: u64,
        pairs: &[(u32, u32, u64)],
        emitted: &[(u32, u64)],
    ) -> WorkerReport {
        WorkerReport {
            worker,
            at_ns,
            pairs: pairs
                .iter()
                .map(|&(from, to, tuples)| hetsched_stream::metrics::PairCount { from, to, tuples })
                .collect(),
            executors: emitted
                .iter()
                .map(|&(e, n)| ExecutorReport {
                    // Half a core.
                    cpu_ns: at_ns / 2,
                    emitted: n,
                    ..executor(e, 0)
                })
                .collect(),
            remote_out: 0,
            remote_in: 0,
            dropped: 0,
            latency: LatencySummary::default(),
            rss_bytes: 0,
            encrypted: false,
            refused_connections: 0,
        }
    }

    fn worker_seen(
        worker: u32,
        generation: u64,
        pid: u32,
        report: Option<WorkerReport>,
    ) -> WorkerSeen {
        WorkerSeen {
            topology: "pipe".into(),
            generation,
            worker,
            addr: format!("127.0.0.1:{}", 7000 + worker),
            pid,
            report,
        }
    }

    /// A steady input reads steady. Two spouts emit exactly 100 tuples a second each; their
    /// workers report every second of their own clock, each 0 to 80 ms late, and each report
    /// reaches the server 0 to 0.9 s later, at the agents' syncs (every 0.5 s, carrying the
    /// latest report, so one report is often sent twice, and a late one and the next arrive
    /// together). Whatever the server's tick sees, the throughput reads 200 tuples a second
    /// within 2 %, each spout at most its cap, and the window about 2 s. Before, counts were
    /// summed over the reports that reached the server within 2 s of its own time (two or
    /// three reports' worth) and divided by that time: 133 to 250 tuples a second, a spout
    /// capped at 100 read 133.
    #[test]
    fn a_steady_input_reads_steady_however_its_reports_jitter() {
        let mut t = pipe("even", 2);
        let assignment = t.inner.runs["pipe"]
            .rec
            .placement
            .as_ref()
            .expect("placed")
            .assignment
            .clone();
        let hosted = |w: u32| -> Vec<u32> {
            (0..4u32)
                .filter(|e| assignment.get(*e as usize) == Some(&w))
                .collect()
        };
        let t0 = 1_700_000_000_000_000_000u64;
        let second = 1_000_000_000u64;
        // Report `i` of worker `w`: when the worker took it (ns past t0), and how long after
        // that the server has it, both from a fixed pseudo-random jitter.
        let taken = |w: u32, i: u64| {
            let jitter = (i * 7_919 + u64::from(w) * 104_729) % 81;
            i * second + jitter * 1_000_000
        };
        let delay = |w: u32, i: u64| ((i * 31 + u64::from(w) * 17) % 10) * 90_000_000;
        let report = |w: u32, i: u64| {
            let at = taken(w, i);
            // Each spout emits 100 a second; the bolts (no outgoing stream) emit nothing, and
            // receive half of each spout's tuples (shuffle).
            let mut pairs = Vec::new();
            let mut emitted = Vec::new();
            for e in hosted(w) {
                if e < 2 {
                    emitted.push((e, at * 100 / second));
                } else {
                    emitted.push((e, 0));
                    pairs.extend((0..2).map(|s| (s, e, at * 50 / second)));
                }
            }
            report_at(w, t0 + at, &pairs, &emitted)
        };
        let mut readings = Vec::new();
        // The server's time, in ticks of 250 ms; agents sync every other tick.
        for tick in 0..80u64 {
            let now = tick * 250_000_000;
            if tick % 2 == 0 {
                let workers = (0..2u32)
                    .map(|w| {
                        let latest = (0..=now / second + 1)
                            .filter(|&i| taken(w, i) + delay(w, i) <= now)
                            .max();
                        worker_seen(w, 1, 10 + w, latest.map(|i| report(w, i)))
                    })
                    .collect();
                t.sync(seen(workers), None);
            }
            t.tick();
            let shown = t.show("pipe").expect("show");
            if now >= 5 * second {
                readings.push(shown);
            }
        }
        for shown in &readings {
            let throughput = shown["throughput_tuples_per_s"].as_f64().unwrap_or(0.0);
            assert!(
                (196.0..=204.0).contains(&throughput),
                "throughput {throughput}, not 200 within 2 %: {shown}"
            );
            for e in 0..2 {
                let emitted = shown["executors"][e]["emitted_per_s"]
                    .as_f64()
                    .unwrap_or(0.0);
                assert!(
                    (98.0..=102.0).contains(&emitted),
                    "spout {e} emitted {emitted}/s, capped at 100: {shown}"
                );
                let received = shown["executors"][2 + e]["received_per_s"]
                    .as_f64()
                    .unwrap_or(0.0);
                assert!(
                    (98.0..=102.0).contains(&received),
                    "bolt {e} received {received}/s: {shown}"
                );
            }
            let window = shown["window_s"].as_f64().unwrap_or(0.0);
            assert!((1.5..=2.2).contains(&window), "window {window} s: {shown}");
        }
    }

    /// `tuples_total` (and `inter_node_tuples_total`) is cumulative: it never falls when a
    /// worker process goes — started again by its agent, no longer reported by it, drained
    /// off a node, lost with its node — and what was counted stays counted across a server
    /// restart and a kill. Before, the total was the sum of the live processes' counters
    /// alone, so each of these took that process's count away (a drained node's: 36,800
    /// tuples passed, 28,467 shown; an agent killed: the total fell from 106,457 to 84,199).
    #[test]
    fn tuples_total_never_falls_when_a_worker_process_goes() {
        let mut t = pipe("even", 2);
        let total = |t: &Topology| {
            let shown = t.show("pipe").expect("show");
            shown["tuples_total"].as_u64().expect("tuples_total")
        };
        let on = |node: &str, workers: Vec<WorkerSeen>| WorkersSeen {
            node: node.into(),
            ..seen(workers)
        };
        t.sync(
            seen(vec![
                worker_seen(0, 1, 10, Some(report_at(0, 1, &[(0, 2, 100)], &[]))),
                worker_seen(1, 1, 11, Some(report_at(1, 1, &[(1, 3, 50)], &[]))),
            ]),
            None,
        );
        assert_eq!(total(&t), 150);
        // Worker 1 started again by its agent: a new process, counting from zero.
        t.sync(
            seen(vec![
                worker_seen(0, 1, 10, Some(report_at(0, 2, &[(0, 2, 100)], &[]))),
                worker_seen(1, 1, 21, Some(report_at(1, 2, &[(1, 3, 10)], &[]))),
            ]),
            None,
        );
        assert_eq!(total(&t), 160, "the process before passed 50");
        // Its agent reports it no more.
        t.sync(
            seen(vec![worker_seen(
                0,
                1,
                10,
                Some(report_at(0, 3, &[(0, 2, 120)], &[])),
            )]),
            None,
        );
        assert_eq!(
            total(&t),
            180,
            "60 by worker 1's processes, 120 by worker 0"
        );
        // Node `n` drained: the topology moves to `m`, worker 0 drains (as worker 1) and
        // stops.
        t.sync(on("m", Vec::new()), None);
        let onto = |node: &str| Placed {
            nodes: vec![node.to_string(); 4],
            process: vec![0; 4],
            workers: vec![(node.to_string(), 0)],
            assignment: vec![0; 4],
        };
        let run = t.inner.runs.get_mut("pipe").expect("run");
        run.new_generation(onto("m"), &[("n".into(), 4), ("m".into(), 4)]);
        assert_eq!(total(&t), 180, "draining, still reporting");
        let run = t.inner.runs.get_mut("pipe").expect("run");
        for (_, since) in run.draining.values_mut() {
            *since = Instant::now() - DRAIN_LIMIT - Duration::from_secs(1);
        }
        run.retire_drained();
        assert!(run.live.is_empty(), "the drained process is gone");
        assert_eq!(total(&t), 180, "drained");
        t.sync(
            on(
                "m",
                vec![worker_seen(
                    0,
                    2,
                    30,
                    Some(report_at(0, 4, &[(0, 2, 5)], &[])),
                )],
            ),
            None,
        );
        assert_eq!(total(&t), 185);
        // Node `m` lost: placed again on `k`; its worker's count stays.
        let run = t.inner.runs.get_mut("pipe").expect("run");
        run.new_generation(onto("k"), &[("k".into(), 4)]);
        assert!(run.live.is_empty(), "the lost node's process is gone");
        assert_eq!(total(&t), 185, "lost with its node");
        // The store keeps what the gone processes passed: a restarted server, which has heard
        // from no worker yet, says it.
        let stored = t
            .inner
            .runs
            .values()
            .map(|run| Stored {
                record: run.rec.clone(),
                traffic: Vec::new(),
            })
            .collect();
        let mut t = Topology::restore(stored, Duration::from_secs(60)).expect("restored");
        assert_eq!(total(&t), 185, "after a restart");
        let killed = t.kill("pipe").expect("kill");
        assert_eq!(killed["tuples_total"], 185, "{killed}");
    }
}
