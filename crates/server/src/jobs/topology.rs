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
//!   the store — `DATA_DIR/topologies.sqlite` — and handed to the core's
//!   `RescheduleController` with the same placer: overload → apply at once; traffic gain above
//!   `gain_threshold` → apply; at most one computation per `interval`.
//! - **Failures**: a node not heard from for `dead_timeout` is lost; its topologies are placed
//!   again on the nodes left (cause `node-lost`). A worker that died is started again by its
//!   agent (the server keeps assigning it). After a server restart, topologies and placements are
//!   read back from the store; agents' workers keep running and are adopted when the agents sync
//!   (nodes get `dead_timeout` from the restart to show up).
//!
//! **Not a [`JobKind`](super::JobKind).** The kinds behind that contract hand out tasks on
//! heartbeats and take results; a topology's workers are long-running processes that agents
//! supervise through their own sync call, with a control channel (peers, reports) that tasks do
//! not have. So this module sits beside the batch kind, with its own service, state and store
//! file; it does not book its workers' cores in the `SchedulerView` (batch tasks and topology
//! workers on one node can share its cores — a known gap).
//!
//! Applying a new placement starts a new **generation**: a worker of the new placement that runs
//! the same executors on the same node as a running one is kept (its agent hands it the new
//! routes); agents stop the other old workers and start the other new ones.

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
use hetsched_proto as pb;
use hetsched_stream::{WorkerConfig, WorkerReport};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use serde::{Deserialize, Serialize};
use serde_json::json;
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tonic::{Request, Response, Status};

/// Longest wait for fresh reports before a reschedule computation goes on without them.
const REPORT_WAIT: Duration = Duration::from_millis(1500);

/// Worker slots a node offers a placer (Storm's usual four).
const SLOTS_PER_NODE: u32 = 4;

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
    /// `overload`, `traffic`, `node-lost` or `rebalance`.
    pub cause: String,
    /// Relative inter-node traffic gain the controller computed.
    pub gain: f64,
    /// Nodes used afterwards.
    pub nodes: usize,
    /// The generation it started.
    pub generation: u64,
    /// Workers of the earlier placement kept running (their executors did not move).
    #[serde(default)]
    pub workers_kept: usize,
}

#[derive(Debug)]
struct Live {
    addr: String,
    pid: u32,
    report: Option<WorkerReport>,
}

#[derive(Debug)]
struct Run {
    rec: Record,
    topo: RunnableTopology,
    live: HashMap<u32, Live>,
    /// Last cumulative count per (worker, from, to) and per (worker, executor) CPU.
    prev_pairs: HashMap<(u32, u32, u32), u64>,
    prev_cpu: HashMap<(u32, u32), u64>,
    prev_emitted: HashMap<(u32, u32), u64>,
    /// Spec 04's monitor: what the controller reads every interval.
    monitor: TrafficMonitor,
    /// A short window for `show`: traffic and CPU over the last couple of seconds.
    window: TrafficMonitor,
    window_cpu: HashMap<u32, u64>,
    window_emitted: HashMap<u32, u64>,
    window_start: Instant,
    shown: Rates,
    /// The latest executor traffic list the controller saw.
    traffic: Vec<ExecutorPair>,
    controller: Option<RescheduleController>,
    last_compute: Instant,
    /// A computation is due: fresh reports were asked for at this time (wall ns, Instant).
    asked: Option<(u64, Instant)>,
    /// Workers of this generation that are running workers of an earlier one (new index →
    /// (old generation, old index)).
    kept: HashMap<u32, (u64, u32)>,
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
    seen: Instant,
}

#[derive(Debug)]
struct Inner {
    runs: BTreeMap<String, Run>,
    nodes: BTreeMap<String, NodeSeen>,
}

type Labels = Vec<(String, String)>;

/// Topology series in `/metrics` (`hetsched_topology_*`), labelled by topology; updated every
/// controller tick from the same figures `topology show` prints.
#[derive(Debug, Default)]
struct TopologyMetrics {
    throughput: Family<Labels, Gauge<f64, AtomicU64>>,
    inter_node: Family<Labels, Gauge<f64, AtomicU64>>,
    inter_process: Family<Labels, Gauge<f64, AtomicU64>>,
    latency_p99: Family<Labels, Gauge<f64, AtomicU64>>,
    workers: Family<Labels, Gauge>,
    nodes: Family<Labels, Gauge>,
    reschedules: Family<Labels, Gauge>,
}

/// The server's topologies.
#[derive(Debug)]
pub struct Topologies {
    metrics: TopologyMetrics,
    inner: Mutex<Inner>,
    db: Mutex<rusqlite::Connection>,
    dead_timeout: Duration,
    started: Instant,
    epoch: Instant,
}

/// A store or input problem.
#[derive(Debug, thiserror::Error)]
pub enum TopologyError {
    /// SQLite.
    #[error("topology store: {0}")]
    Store(#[from] rusqlite::Error),
    /// A stored record that does not parse.
    #[error("topology store: {0}")]
    Decode(#[from] serde_json::Error),
}

fn now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}

impl Run {
    fn new(rec: Record, topo: RunnableTopology, start: u64) -> Self {
        let controller = (rec.interval_ms > 0).then(|| {
            RescheduleController::new(
                RescheduleSettings {
                    interval: rec.interval_ms * 1_000_000,
                    gain_threshold: rec.gain_threshold,
                },
                start,
            )
        });
        Self {
            rec,
            topo,
            live: HashMap::new(),
            prev_pairs: HashMap::new(),
            prev_cpu: HashMap::new(),
            prev_emitted: HashMap::new(),
            monitor: TrafficMonitor::new(start),
            window: TrafficMonitor::new(start),
            window_cpu: HashMap::new(),
            window_emitted: HashMap::new(),
            window_start: Instant::now(),
            shown: Rates::default(),
            traffic: Vec::new(),
            controller,
            last_compute: Instant::now(),
            asked: None,
            kept: HashMap::new(),
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

    /// Takes a worker's cumulative counters: the increase since its last report feeds the
    /// monitors. A worker whose process changed starts from zero.
    fn feed(&mut self, worker: u32, pid: u32, report: WorkerReport, now: u64) {
        let restarted = self.live.get(&worker).is_some_and(|l| l.pid != pid);
        if restarted {
            self.prev_pairs.retain(|k, _| k.0 != worker);
            self.prev_cpu.retain(|k, _| k.0 != worker);
            self.prev_emitted.retain(|k, _| k.0 != worker);
        }
        let _ = now;
        for p in &report.pairs {
            let prev = self
                .prev_pairs
                .insert((worker, p.from, p.to), p.tuples)
                .unwrap_or(0);
            let delta = p.tuples.saturating_sub(prev) as f64;
            if delta > 0.0 {
                self.monitor
                    .tuples_received(ExecutorId(p.from), ExecutorId(p.to), delta);
                self.window
                    .tuples_received(ExecutorId(p.from), ExecutorId(p.to), delta);
            }
        }
        for e in &report.executors {
            let prev = self
                .prev_cpu
                .insert((worker, e.executor), e.cpu_ns)
                .unwrap_or(0);
            *self.window_cpu.entry(e.executor).or_default() += e.cpu_ns.saturating_sub(prev);
            let prev = self
                .prev_emitted
                .insert((worker, e.executor), e.emitted)
                .unwrap_or(0);
            *self.window_emitted.entry(e.executor).or_default() += e.emitted.saturating_sub(prev);
        }
    }

    fn roll_window(&mut self, now_core: u64) {
        let secs = self.window_start.elapsed().as_secs_f64();
        if secs < 2.0 {
            return;
        }
        let pairs = self.window.flush(now_core);
        self.shown = Rates {
            pairs,
            cpu_percent: self
                .window_cpu
                .drain()
                .map(|(e, ns)| (e, ns as f64 / 1e9 / secs * 100.0))
                .collect(),
            emitted_per_s: self
                .window_emitted
                .drain()
                .map(|(e, n)| (e, n as f64 / secs))
                .collect(),
            window_s: secs,
        };
        self.window_start = Instant::now();
    }

    /// Applies a new placement as a new generation. A worker of the new placement that runs
    /// exactly the executors an old worker runs, on the same node, is **kept**: its agent hands
    /// the running process the new routes (`keep_generation`/`keep_worker`) instead of starting
    /// one, so only the executors that move are restarted. Returns how many workers are kept.
    fn new_generation(&mut self, placed: Placed) -> usize {
        let old_gen = self.rec.generation;
        let sets = |p: &Placed| -> Vec<(String, Vec<usize>)> {
            (0..p.workers.len())
                .map(|w| {
                    let execs = (0..p.assignment.len())
                        .filter(|&e| p.assignment[e] as usize == w)
                        .collect();
                    (p.workers[w].0.clone(), execs)
                })
                .collect()
        };
        let mut kept: HashMap<u32, (u64, u32)> = HashMap::new();
        if let Some(old) = &self.rec.placement {
            let old_sets = sets(old);
            for (new_w, set) in sets(&placed).into_iter().enumerate() {
                if let Some(old_w) = old_sets.iter().position(|o| *o == set) {
                    kept.insert(new_w as u32, (old_gen, old_w as u32));
                }
            }
        }
        let by_old: HashMap<u32, u32> = kept.iter().map(|(n, (_, o))| (*o, *n)).collect();
        let renumber = |w: u32| by_old.get(&w).copied();
        self.live = std::mem::take(&mut self.live)
            .into_iter()
            .filter_map(|(w, l)| renumber(w).map(|n| (n, l)))
            .collect();
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
        self.rec.generation += 1;
        self.rec.placement = Some(placed);
        let n = kept.len();
        self.kept = kept;
        n
    }
}

fn stream_nodes(nodes: &[(String, u32)]) -> Vec<StreamNode> {
    nodes
        .iter()
        .map(|(name, cores)| StreamNode {
            name: name.clone(),
            rack: 0,
            capacity: f64::from(*cores) * 100.0,
            background: 0.0,
            memory_bytes: u64::MAX / 4,
            slots: SLOTS_PER_NODE,
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

fn invalid(e: impl std::fmt::Display) -> Status {
    Status::invalid_argument(e.to_string())
}

impl Topologies {
    /// Opens (or creates) `DATA_DIR/topologies.sqlite` and reads the topologies back.
    pub fn open(data_dir: &Path, dead_timeout: Duration) -> Result<Arc<Self>, TopologyError> {
        let conn = rusqlite::Connection::open(data_dir.join("topologies.sqlite"))?;
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "synchronous", "FULL")?;
        conn.execute_batch(
            "CREATE TABLE IF NOT EXISTS topologies(name TEXT PRIMARY KEY, record TEXT NOT NULL);
             CREATE TABLE IF NOT EXISTS topology_traffic(name TEXT PRIMARY KEY, at_ns INTEGER NOT NULL, traffic TEXT NOT NULL, node_loads TEXT NOT NULL);",
        )?;
        let mut runs = BTreeMap::new();
        {
            let mut stmt = conn.prepare("SELECT record FROM topologies")?;
            let records = stmt.query_map([], |r| r.get::<_, String>(0))?;
            for text in records {
                let rec: Record = serde_json::from_str(&text?)?;
                match parse_runnable_topology(&rec.origin, &rec.text) {
                    Ok(topo) => {
                        runs.insert(rec.name.clone(), Run::new(rec, topo, 0));
                    }
                    Err(e) => tracing::error!("stored topology {} no longer parses: {e}", rec.name),
                }
            }
        }
        if !runs.is_empty() {
            tracing::info!(
                topologies = runs.len(),
                "topologies read back from the store"
            );
        }
        Ok(Arc::new(Self {
            metrics: TopologyMetrics::default(),
            inner: Mutex::new(Inner {
                runs,
                nodes: BTreeMap::new(),
            }),
            db: Mutex::new(conn),
            dead_timeout,
            started: Instant::now(),
            epoch: Instant::now(),
        }))
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
    }

    fn update_metrics(&self, inner: &Inner) {
        let m = &self.metrics;
        for run in inner.runs.values() {
            let s = self.status(inner, run);
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
            m.latency_p99
                .get_or_create(&l)
                .set(f("latency_p99_us") / 1e6);
            m.workers
                .get_or_create(&l)
                .set(s["workers_running"].as_i64().unwrap_or(0));
            m.nodes
                .get_or_create(&l)
                .set(s["nodes_used"].as_i64().unwrap_or(0));
            for cause in ["overload", "traffic", "node-lost", "rebalance"] {
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

    fn core_now(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }

    fn save(&self, rec: &Record) {
        let db = lock(&self.db);
        let text = match serde_json::to_string(rec) {
            Ok(t) => t,
            Err(e) => {
                tracing::error!("topology {}: {e}", rec.name);
                return;
            }
        };
        if let Err(e) = db.execute(
            "INSERT INTO topologies(name, record) VALUES (?1, ?2) ON CONFLICT(name) DO UPDATE SET record = excluded.record",
            rusqlite::params![rec.name, text],
        ) {
            tracing::error!("storing topology {}: {e}", rec.name);
        }
    }

    fn save_traffic(&self, name: &str, traffic: &[ExecutorPair], loads: &serde_json::Value) {
        let db = lock(&self.db);
        let t = serde_json::to_string(traffic).unwrap_or_default();
        if let Err(e) = db.execute(
            "INSERT INTO topology_traffic(name, at_ns, traffic, node_loads) VALUES (?1, ?2, ?3, ?4) ON CONFLICT(name) DO UPDATE SET at_ns = excluded.at_ns, traffic = excluded.traffic, node_loads = excluded.node_loads",
            rusqlite::params![name, now_ns() as i64, t, loads.to_string()],
        ) {
            tracing::error!("storing the traffic of {name}: {e}");
        }
    }

    /// Nodes alive now, by name, with their cores. After a restart, nodes get `dead_timeout`
    /// to sync before placements on them count as lost.
    fn alive(&self, inner: &Inner) -> Vec<(String, u32)> {
        inner
            .nodes
            .iter()
            .filter(|(_, n)| n.seen.elapsed() < self.dead_timeout)
            .map(|(name, n)| (name.clone(), n.cores))
            .collect()
    }

    fn in_grace(&self) -> bool {
        self.started.elapsed() < self.dead_timeout
    }

    /// Submits a topology.
    pub fn submit(&self, req: pb::SubmitTopologyRequest) -> Result<serde_json::Value, Status> {
        let topo = parse_runnable_topology(&req.origin, &req.text).map_err(invalid)?;
        let placer: StreamPlacerKind = req.placer.parse().map_err(invalid)?;
        if !(req.max_utilisation > 0.0 && req.max_utilisation <= 1.0) {
            return Err(invalid("max_utilisation must be in (0, 1]"));
        }
        if !(req.gain_threshold.is_finite() && req.gain_threshold >= 0.0) {
            return Err(invalid("gain_threshold must be a non-negative number"));
        }
        let name = topo.topology.name.clone();
        let mut inner = lock(&self.inner);
        if let Some(r) = inner.runs.get(&name)
            && r.rec.state == "running"
        {
            return Err(Status::already_exists(format!(
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
        };
        let mut run = Run::new(rec, topo, self.core_now());
        let alive = self.alive(&inner);
        if !alive.is_empty() {
            let nodes = stream_nodes(&alive);
            let mut problem = PlacementProblem::declared(&run.topo.topology, &nodes);
            problem.workers = run.rec.workers;
            let p = run.placer().place(&problem).map_err(invalid)?;
            let pl = placed(&p, &nodes);
            run.new_generation(pl);
        }
        self.save(&run.rec);
        let status = self.status(&inner, &run);
        inner.runs.insert(name, run);
        Ok(status)
    }

    /// Every topology's status.
    pub fn list(&self) -> serde_json::Value {
        let inner = lock(&self.inner);
        serde_json::Value::Array(
            inner
                .runs
                .values()
                .map(|r| self.status(&inner, r))
                .collect(),
        )
    }

    /// One topology's status.
    pub fn show(&self, name: &str) -> Result<serde_json::Value, Status> {
        let inner = lock(&self.inner);
        let run = inner.runs.get(name).ok_or_else(|| not_found(name))?;
        Ok(self.status(&inner, run))
    }

    /// Kills a topology: agents stop its workers.
    pub fn kill(&self, name: &str) -> Result<serde_json::Value, Status> {
        let mut inner = lock(&self.inner);
        let run = inner.runs.get_mut(name).ok_or_else(|| not_found(name))?;
        run.rec.state = "killed".into();
        // Its workers stop at their agents' next sync; none is reported from now on.
        run.live.clear();
        let rec = run.rec.clone();
        self.save(&rec);
        let run = inner.runs.get(name).ok_or_else(|| not_found(name))?;
        Ok(self.status(&inner, run))
    }

    /// Places a topology again now from the measured traffic (the user's `rebalance`), applying
    /// the result when it differs from the running placement.
    pub fn rebalance(&self, name: &str) -> Result<serde_json::Value, Status> {
        let mut inner = lock(&self.inner);
        let alive = self.alive(&inner);
        let nodes = stream_nodes(&alive);
        let now = self.core_now();
        let run = inner.runs.get_mut(name).ok_or_else(|| not_found(name))?;
        if run.rec.state != "running" {
            return Err(Status::failed_precondition(format!(
                "topology `{name}` is not running"
            )));
        }
        if nodes.is_empty() {
            return Err(Status::failed_precondition("no node is alive"));
        }
        let mut traffic = run.monitor.flush(now);
        if traffic.is_empty() {
            traffic = run.traffic.clone();
        }
        run.traffic = traffic.clone();
        let current = run
            .rec
            .placement
            .as_ref()
            .and_then(|p| as_placement(p, &nodes));
        let mut problem = if traffic.is_empty() {
            PlacementProblem::declared(&run.topo.topology, &nodes)
        } else {
            PlacementProblem::measured(&run.topo.topology, &nodes, traffic)
        };
        problem.workers = run.rec.workers;
        problem.previous = current.as_ref();
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
            let workers_kept = run.new_generation(pl);
            let generation = run.rec.generation;
            run.rec.reschedules.push(Reschedule {
                workers_kept,
                at_ns: now_ns(),
                cause: "rebalance".into(),
                gain,
                nodes: used,
                generation,
            });
            let rec = run.rec.clone();
            self.save(&rec);
        }
        let run = inner.runs.get(name).ok_or_else(|| not_found(name))?;
        Ok(self.status(&inner, run))
    }

    /// One agent's sync: records its workers and reports, answers what it should run.
    pub fn sync(
        &self,
        req: pb::SyncWorkersRequest,
        from: Option<std::net::IpAddr>,
    ) -> pb::SyncWorkersReply {
        let mut inner = lock(&self.inner);
        let now = self.core_now();
        inner.nodes.insert(
            req.node.clone(),
            NodeSeen {
                cores: req.cores.max(1),
                seen: Instant::now(),
            },
        );
        for w in req.workers {
            let Some(run) = inner.runs.get_mut(&w.topology) else {
                continue;
            };
            if run.rec.generation != w.generation || run.rec.state != "running" {
                continue;
            }
            let mut addr = w.addr.clone();
            if let (Some(ip), Ok(sa)) = (from, w.addr.parse::<std::net::SocketAddr>())
                && sa.ip().is_unspecified()
            {
                addr = std::net::SocketAddr::new(ip, sa.port()).to_string();
            }
            let report: Option<WorkerReport> = if w.report_json.is_empty() {
                None
            } else {
                serde_json::from_str(&w.report_json).ok()
            };
            if let Some(r) = &report {
                run.feed(w.worker, w.pid, r.clone(), now);
            }
            let entry = run.live.entry(w.worker).or_insert(Live {
                addr: addr.clone(),
                pid: w.pid,
                report: None,
            });
            entry.addr = addr;
            entry.pid = w.pid;
            if report.is_some() {
                entry.report = report;
            }
        }
        let mut out = Vec::new();
        for run in inner.runs.values() {
            if run.rec.state != "running" {
                continue;
            }
            let Some(p) = &run.rec.placement else {
                continue;
            };
            for (idx, (node, _)) in p.workers.iter().enumerate() {
                if node != &req.node {
                    continue;
                }
                let config = WorkerConfig {
                    topology_origin: run.rec.origin.clone(),
                    topology_text: run.rec.text.clone(),
                    worker: idx as u32,
                    assignment: p.assignment.clone(),
                    base_dir: PathBuf::from(&run.rec.base_dir),
                    work_dir: PathBuf::new(),
                    listen: String::new(),
                };
                let peers = run
                    .live
                    .iter()
                    .filter(|(w, _)| **w != idx as u32)
                    .map(|(w, l)| (*w, l.addr.clone()))
                    .collect();
                let (keep_generation, keep_worker) =
                    run.kept.get(&(idx as u32)).copied().unwrap_or((0, 0));
                out.push(pb::WorkerAssignment {
                    topology: run.rec.name.clone(),
                    generation: run.rec.generation,
                    worker: idx as u32,
                    config_json: serde_json::to_string(&config).unwrap_or_default(),
                    peers,
                    keep_generation,
                    keep_worker,
                });
            }
        }
        let report_now = inner
            .runs
            .values()
            .any(|r| r.asked.is_some() && r.rec.state == "running");
        pb::SyncWorkersReply {
            workers: out,
            report_now,
        }
    }

    /// The controller's periodic pass: places topologies waiting for nodes, re-places those
    /// that lost a node, and runs spec 04's reschedule controller.
    pub fn tick(&self) {
        let mut inner = lock(&self.inner);
        let alive = self.alive(&inner);
        let grace = self.in_grace();
        let nodes = stream_nodes(&alive);
        let now = self.core_now();
        let mut saves = Vec::new();
        let mut traffic_saves = Vec::new();
        for run in inner.runs.values_mut() {
            run.roll_window(now);
            if run.rec.state != "running" || nodes.is_empty() {
                continue;
            }
            let current = run
                .rec
                .placement
                .as_ref()
                .and_then(|p| as_placement(p, &nodes));
            let lost = run.rec.placement.is_some() && current.is_none();
            if run.rec.placement.is_none() || (lost && !grace) {
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
                        let workers_kept = run.new_generation(placed(&p, &nodes));
                        if !first {
                            let generation = run.rec.generation;
                            run.rec.reschedules.push(Reschedule {
                                workers_kept,
                                at_ns: now_ns(),
                                cause: "node-lost".into(),
                                gain: 0.0,
                                nodes: used,
                                generation,
                            });
                            tracing::warn!(topology = %run.rec.name, "a node was lost: placed again on {used} node(s)");
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
            let node_loads = json!(
                nodes
                    .iter()
                    .zip(&loads)
                    .map(|(n, l)| json!({"node": n.name, "load": l, "capacity": n.capacity}))
                    .collect::<Vec<_>>()
            );
            traffic_saves.push((run.rec.name.clone(), traffic, node_loads));
            let placer = run.placer();
            let Some(controller) = run.controller.as_mut() else {
                continue;
            };
            match controller.tick(now, placer.as_ref(), &problem, &current) {
                Ok(Decision::Apply {
                    cause,
                    gain,
                    placement,
                }) => {
                    let used = placement.nodes_used().len();
                    let workers_kept = run.new_generation(placed(&placement, &nodes));
                    let generation = run.rec.generation;
                    let cause = match cause {
                        Cause::Overload => "overload",
                        Cause::Traffic => "traffic",
                    };
                    tracing::info!(topology = %run.rec.name, cause, gain, "rescheduled onto {used} node(s)");
                    run.rec.reschedules.push(Reschedule {
                        workers_kept,
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
        self.update_metrics(&inner);
        drop(inner);
        for rec in saves {
            self.save(&rec);
        }
        for (name, t, l) in traffic_saves {
            self.save_traffic(&name, &t, &l);
        }
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
                    "remote_out": live.and_then(|l| l.report.as_ref()).map(|r| r.remote_out),
                    "rss_bytes": live.and_then(|l| l.report.as_ref()).map(|r| r.rss_bytes),
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
            for l in run.live.values() {
                let Some(r) = &l.report else { continue };
                for pc in &r.pairs {
                    total += pc.tuples;
                    if p.nodes.get(pc.from as usize) != p.nodes.get(pc.to as usize) {
                        inter_node_total += pc.tuples;
                    }
                }
                for e in &r.executors {
                    if spouts.contains(&e.executor) {
                        seen_spouts += 1;
                        spouts_done &= e.done;
                    }
                }
                if r.latency.count > 0 {
                    p50 = p50.max(r.latency.p50_us);
                    p99 = p99.max(r.latency.p99_us);
                    latency_count += r.latency.count;
                }
            }
            spouts_done &= seen_spouts == spouts.len();
        } else {
            spouts_done = false;
        }
        let executors: Vec<serde_json::Value> = (0..topo.executor_count() as u32)
            .map(|e| {
                let received: f64 = run
                    .shown
                    .pairs
                    .iter()
                    .filter(|p| p.to.0 == e)
                    .map(|p| p.tuples_per_s)
                    .sum();
                json!({
                    "executor": name_of(e),
                    "node": run.rec.placement.as_ref().and_then(|p| p.nodes.get(e as usize)),
                    "received_per_s": received,
                    "emitted_per_s": run.shown.emitted_per_s.get(&e).copied().unwrap_or(0.0),
                    "cpu_percent": run.shown.cpu_percent.get(&e).copied().unwrap_or(0.0),
                })
            })
            .collect();
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
        let throughput: f64 = run
            .shown
            .emitted_per_s
            .iter()
            .filter(|(e, _)| {
                topo.locate(ExecutorId(**e)).is_some_and(|(c, _)| {
                    topo.components[c].kind == hetsched_core::model::topology::ComponentKind::Spout
                })
            })
            .map(|(_, r)| r)
            .sum();
        json!({
            "name": run.rec.name,
            "state": run.rec.state,
            "placer": run.rec.placer,
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
        })
    }
}

fn not_found(name: &str) -> Status {
    Status::not_found(format!(
        "no topology named `{name}` (hetsched topology list)"
    ))
}

/// The client-facing service.
#[derive(Clone, Debug)]
pub struct ClientService(pub Arc<Topologies>);

/// The agent-facing service.
#[derive(Clone, Debug)]
pub struct AgentService(pub Arc<Topologies>);

fn reply(v: serde_json::Value) -> Response<pb::TopologyReply> {
    Response::new(pb::TopologyReply {
        status_json: v.to_string(),
    })
}

#[tonic::async_trait]
impl pb::topology_client_server::TopologyClient for ClientService {
    async fn submit_topology(
        &self,
        r: Request<pb::SubmitTopologyRequest>,
    ) -> Result<Response<pb::TopologyReply>, Status> {
        self.0.submit(r.into_inner()).map(reply)
    }
    async fn list_topologies(
        &self,
        _r: Request<pb::ListTopologiesRequest>,
    ) -> Result<Response<pb::ListTopologiesReply>, Status> {
        Ok(Response::new(pb::ListTopologiesReply {
            statuses_json: self.0.list().to_string(),
        }))
    }
    async fn show_topology(
        &self,
        r: Request<pb::TopologyName>,
    ) -> Result<Response<pb::TopologyReply>, Status> {
        self.0.show(&r.into_inner().name).map(reply)
    }
    async fn kill_topology(
        &self,
        r: Request<pb::TopologyName>,
    ) -> Result<Response<pb::TopologyReply>, Status> {
        self.0.kill(&r.into_inner().name).map(reply)
    }
    async fn rebalance_topology(
        &self,
        r: Request<pb::TopologyName>,
    ) -> Result<Response<pb::TopologyReply>, Status> {
        self.0.rebalance(&r.into_inner().name).map(reply)
    }
}

#[tonic::async_trait]
impl pb::topology_agent_server::TopologyAgent for AgentService {
    async fn sync_workers(
        &self,
        r: Request<pb::SyncWorkersRequest>,
    ) -> Result<Response<pb::SyncWorkersReply>, Status> {
        let from = r.remote_addr().map(|a| a.ip());
        Ok(Response::new(self.0.sync(r.into_inner(), from)))
    }
}

/// Adds the topology services (behind the token checks) to the server's router and starts the
/// controller's tick.
pub fn add_services(
    router: tonic::transport::server::Router,
    topologies: Arc<Topologies>,
    creds: &crate::datadir::Credentials,
) -> tonic::transport::server::Router {
    let ticker = topologies.clone();
    tokio::spawn(async move {
        let mut every = tokio::time::interval(Duration::from_millis(250));
        loop {
            every.tick().await;
            let t = ticker.clone();
            let _ = tokio::task::spawn_blocking(move || t.tick()).await;
        }
    });
    router
        .add_service(
            pb::topology_client_server::TopologyClientServer::with_interceptor(
                ClientService(topologies.clone()),
                crate::service::CheckToken::new(crate::service::Role::Client, creds),
            ),
        )
        .add_service(
            pb::topology_agent_server::TopologyAgentServer::with_interceptor(
                AgentService(topologies),
                crate::service::CheckToken::new(crate::service::Role::Agent, creds),
            ),
        )
}
