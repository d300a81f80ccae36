//! Prometheus metrics, served at `/metrics` by the HTTP listener ([`crate::http`]).
//!
//! Two kinds of metrics, so the heartbeat path stays cheap:
//! - event counters and histograms ([`Metrics`]) are atomics (histograms: one short uncontended
//!   lock) updated where the event happens — dispatch, results, lost tasks, submissions,
//!   heartbeats;
//! - everything that describes the current state (tasks by state, nodes by liveness, per-node
//!   resources) is computed at scrape time by a collector that locks the [`State`] once, copies
//!   what it needs, and releases it before encoding; nothing is counted twice.
//!
//! The output is the OpenMetrics text format of the `prometheus-client` crate, which Prometheus
//! scrapes natively. `/metrics` takes the dashboard's credentials: Prometheus sends the read-only
//! token (`authorization: { credentials_file: DATA_DIR/read-token }` in its scrape config).

use crate::convert::Wire;
use crate::state::State;
use hetsched_core::{Resources, Variant};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::metrics::info::Info;
use prometheus_client::registry::{Registry, Unit};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::Duration;

type Label = [(&'static str, &'static str); 1];

/// How a reported task result was recorded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The attempt succeeded.
    Succeeded,
    /// The attempt failed and the task was re-queued (its application's `retries`).
    Retried,
    /// The attempt failed and the task failed for good.
    Failed,
}

/// Why a running task was lost (`hetsched_tasks_lost_total`'s `cause`): both are the node's
/// condition, not the task's fault, so neither counts against its `retries`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lost {
    /// Its node lost it: declared dead, removed or left, its agent no longer listing it, or
    /// the ANode it was offloaded to lost.
    Node,
    /// Its inputs found no room on its node's disk (a workflow instance whose agent reported
    /// `no room for inputs: `): the disk filled below the agent's `min_free_disk`.
    Disk,
}

/// The event metrics: shared handles to atomics, updated on the hot path.
#[derive(Debug)]
pub struct Metrics {
    dispatched_family: Family<Label, Counter>,
    dispatched: [Counter; 2],
    results_family: Family<Label, Counter>,
    results: [Counter; 3],
    lost_family: Family<Label, Counter>,
    lost: [Counter; 2],
    preempted: Counter,
    cpu_family: Family<Label, Counter<f64, AtomicU64>>,
    cpu: [Counter<f64, AtomicU64>; 2],
    jobs_submitted: Counter,
    heartbeats: Counter,
    heartbeat_seconds: Histogram,
    decision_seconds: Histogram,
}

impl Default for Metrics {
    fn default() -> Self {
        let dispatched_family = Family::<Label, Counter>::default();
        let dispatched =
            ["cpu", "gpu"].map(|v| dispatched_family.get_or_create(&[("variant", v)]).clone());
        let results_family = Family::<Label, Counter>::default();
        let results = ["succeeded", "retried", "failed"]
            .map(|o| results_family.get_or_create(&[("outcome", o)]).clone());
        // In the order of [`Lost`]'s variants.
        let lost_family = Family::<Label, Counter>::default();
        let lost = ["node", "disk"].map(|c| lost_family.get_or_create(&[("cause", c)]).clone());
        let cpu_family = Family::<Label, Counter<f64, AtomicU64>>::default();
        let cpu = ["user", "system"].map(|m| cpu_family.get_or_create(&[("mode", m)]).clone());
        Self {
            dispatched_family,
            dispatched,
            results_family,
            results,
            lost_family,
            lost,
            preempted: Counter::default(),
            cpu_family,
            cpu,
            jobs_submitted: Counter::default(),
            heartbeats: Counter::default(),
            // 50 µs … ~1.6 s: a heartbeat may commit to SQLite (an fsync).
            heartbeat_seconds: Histogram::new(exponential_buckets(50e-6, 2.0, 16)),
            // 5 µs … ~0.16 s: the policy's `on_node_update`.
            decision_seconds: Histogram::new(exponential_buckets(5e-6, 2.0, 16)),
        }
    }
}

impl Metrics {
    /// A task was dispatched as variant `v`.
    pub fn dispatched(&self, v: Variant) {
        self.dispatched[match v {
            Variant::Cpu => 0,
            Variant::Gpu => 1,
        }]
        .inc();
    }

    /// A result of the current attempt of a running task was recorded.
    pub fn result(&self, o: Outcome) {
        self.results[o as usize].inc();
    }

    /// A recorded result's attempt used `usage` (a stale or repeated result is not counted).
    pub fn used(&self, usage: Option<&crate::store::TaskUsage>) {
        if let Some(u) = usage {
            self.cpu[0].inc_by(u.cpu_user_ms as f64 / 1e3);
            self.cpu[1].inc_by(u.cpu_system_ms as f64 / 1e3);
        }
    }

    /// Tasks dispatched since the server started (both variants).
    pub fn dispatched_total(&self) -> u64 {
        self.dispatched.iter().map(Counter::get).sum()
    }

    /// A running task was lost, for `cause`, and re-queued or failed at `max_attempts`.
    pub fn lost(&self, cause: Lost) {
        self.lost[cause as usize].inc();
    }

    /// A running task was preempted (stopped for work of a higher priority) and re-queued.
    pub fn preempted(&self) {
        self.preempted.inc();
    }

    /// A new job was stored.
    pub fn job_submitted(&self) {
        self.jobs_submitted.inc();
    }

    /// A heartbeat was handled in `took` (lock wait, decisions and commit included).
    pub fn heartbeat(&self, took: Duration) {
        self.heartbeats.inc();
        self.heartbeat_seconds.observe(took.as_secs_f64());
    }

    /// The policy took `took` to decide for one heartbeat.
    pub fn decision(&self, took: Duration) {
        self.decision_seconds.observe(took.as_secs_f64());
    }
}

/// Builds the registry: the event metrics of `metrics`, the policy's name, and the collector of
/// the state's gauges.
pub fn registry(metrics: &Metrics, state: Arc<Mutex<State>>, policy: &str) -> Registry {
    let mut r = Registry::with_prefix("hetsched");
    r.register(
        "tasks_dispatched",
        "Tasks dispatched to nodes (attempts), by variant",
        metrics.dispatched_family.clone(),
    );
    r.register(
        "task_results",
        "Results of current attempts recorded, by outcome (succeeded; failed and retried; failed \
         for good)",
        metrics.results_family.clone(),
    );
    r.register_with_unit(
        "task_cpu",
        "CPU time used by the tasks whose results were recorded (batch tasks and workflow \
         instances, as their agents measured it), by mode",
        Unit::Seconds,
        metrics.cpu_family.clone(),
    );
    r.register(
        "tasks_lost",
        "Running tasks lost and re-queued or failed, by cause (node: their node died or left, or \
         they vanished from it; disk: their inputs found no room on its disk)",
        metrics.lost_family.clone(),
    );
    r.register(
        "tasks_preempted",
        "Running batch tasks stopped for waiting work of a higher priority and re-queued \
         (`preemption = \"requeue\"`)",
        metrics.preempted.clone(),
    );
    r.register(
        "jobs_submitted",
        "Jobs accepted (repeated submissions with the same key not counted)",
        metrics.jobs_submitted.clone(),
    );
    r.register(
        "heartbeats",
        "Agent heartbeats handled",
        metrics.heartbeats.clone(),
    );
    r.register_with_unit(
        "heartbeat_duration",
        "Time to handle one heartbeat: lock wait, results, decisions and the store commit",
        Unit::Seconds,
        metrics.heartbeat_seconds.clone(),
    );
    r.register_with_unit(
        "scheduler_decision_duration",
        "Time the batch policy took to decide for one heartbeat",
        Unit::Seconds,
        metrics.decision_seconds.clone(),
    );
    r.register(
        "policy",
        "The batch policy in use",
        Info::new([("policy", policy.to_string())]),
    );
    r.register(
        "server",
        "The server's hetsched version",
        Info::new([("version", crate::VERSION.to_string())]),
    );
    r.register_collector(Box::new(StateCollector(state)));
    r
}

/// The bytes an unprivileged process may still write on the filesystem holding `path`
/// (`f_bavail`: the blocks reserved for root are not counted).
#[allow(clippy::useless_conversion)] // u64 here; narrower on some targets
fn store_disk_free(path: &std::path::Path) -> Option<u64> {
    let s = nix::sys::statvfs::statvfs(path).ok()?;
    Some(u64::from(s.blocks_available()).saturating_mul(u64::from(s.fragment_size())))
}

/// Computes the state's gauges at scrape time.
struct StateCollector(Arc<Mutex<State>>);

impl std::fmt::Debug for StateCollector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("StateCollector")
    }
}

fn gauge<V: prometheus_client::encoding::EncodeGaugeValue + Send + Sync + std::fmt::Debug>(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    samples: impl IntoIterator<Item = (Vec<(&'static str, String)>, V)>,
) -> Result<(), std::fmt::Error> {
    let mut m = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
    for (labels, v) in samples {
        ConstGauge::new(v).encode(m.encode_family(&labels)?)?;
    }
    Ok(())
}

fn counter<V: prometheus_client::encoding::EncodeCounterValue + Send + Sync + std::fmt::Debug>(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    samples: impl IntoIterator<Item = (Vec<(&'static str, String)>, V)>,
) -> Result<(), std::fmt::Error> {
    let mut m = encoder.encode_descriptor(name, help, None, MetricType::Counter)?;
    for (labels, v) in samples {
        ConstCounter::new(v).encode(m.encode_family(&labels)?)?;
    }
    Ok(())
}

/// A gauge without labels.
fn single_gauge(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    value: i64,
) -> Result<(), std::fmt::Error> {
    let m = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
    ConstGauge::new(value).encode(m)
}

/// A counter without labels, if `value` is known.
fn single_counter(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    value: Option<f64>,
) -> Result<(), std::fmt::Error> {
    let Some(v) = value else { return Ok(()) };
    let m = encoder.encode_descriptor(name, help, None, MetricType::Counter)?;
    ConstCounter::new(v).encode(m)
}

impl Collector for StateCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        // Copy under the lock, encode after releasing it. A poisoned lock: no state gauges.
        let Ok((counts, nodes, queues, users, accounts, (paused, store))) =
            self.0.lock().map(|s| {
                (
                    s.task_counts(),
                    s.nodes(false).nodes,
                    s.allocations(),
                    s.user_usage_all(),
                    s.usage_since_start(),
                    (s.is_paused(), s.store_path()),
                )
            })
        else {
            return Ok(());
        };
        let e = &mut encoder;
        single_gauge(
            e,
            "store_writable",
            "1 while the store accepts writes; 0 once it refused one (a full disk, a failed sync): \
             dispatch is paused and submissions are refused until a probe write succeeds.",
            i64::from(!paused),
        )?;
        // Read outside the lock; left out when it cannot be read (a store in memory).
        if let Some(path) = &store {
            let mut wal = path.clone().into_os_string();
            wal.push("-wal");
            let sizes: Vec<_> = [("db", path.clone()), ("wal", std::path::PathBuf::from(wal))]
                .into_iter()
                .filter_map(|(file, p)| {
                    let bytes = std::fs::metadata(p).ok()?.len();
                    Some((vec![("file", file.to_string())], bytes as f64))
                })
                .collect();
            gauge(
                e,
                "store_bytes",
                "Size of the server's store: file=\"db\" DATA_DIR/state.db, file=\"wal\" its \
                 write-ahead log (emptied into the db at checkpoints; one that keeps growing has \
                 its checkpoints held back).",
                sizes,
            )?;
        }
        if let Some(free) = store.and_then(|p| store_disk_free(&p)) {
            let m = e.encode_descriptor(
                "store_disk_free_bytes",
                "Free space on the filesystem of the server's store (DATA_DIR/state.db), as an \
                 unprivileged process may use it: when it runs out the store refuses writes.",
                None,
                MetricType::Gauge,
            )?;
            ConstGauge::new(free as f64).encode(m)?;
        }
        gauge(
            e,
            "tasks",
            "Tasks by state.",
            [
                ("pending", counts.pending),
                ("running", counts.running),
                ("succeeded", counts.succeeded),
                ("failed", counts.failed),
                ("cancelled", counts.cancelled),
            ]
            .map(|(s, n)| (vec![("state", s.to_string())], n as i64)),
        )?;
        single_gauge(
            e,
            "tasks_queued",
            "Running tasks (counted in tasks{state=\"running\"}) that wait in their agent's queue \
             (prefetch) and have not started.",
            counts.queued as i64,
        )?;
        single_gauge(
            e,
            "tasks_fetching",
            "Running workflow instances (counted in tasks{state=\"running\"}) whose agent still \
             fetches their inputs: their program has not started.",
            counts.fetching as i64,
        )?;
        // A node restored from the store whose agent has not beaten since a server restart
        // (`returning_ms`) is not dead: `hetsched nodes --state dead` leaves it out, and it is
        // declared dead only once its wait runs out. Counted as dead, it made every server
        // restart fire the usual `hetsched_node_up == 0` alert.
        let returning = |n: &hetsched_proto::NodeInfo| !n.alive && n.returning_ms.is_some();
        let alive = nodes.iter().filter(|n| n.alive).count() as i64;
        let back = nodes.iter().filter(|n| returning(n)).count() as i64;
        gauge(
            e,
            "nodes",
            "Registered nodes by liveness (returning: not heard since the server's restart, not \
             yet declared dead; dead: no heartbeat within dead_timeout). Nodes whose agents \
             left on purpose are not counted.",
            [
                (vec![("state", "alive".to_string())], alive),
                (vec![("state", "returning".to_string())], back),
                (
                    vec![("state", "dead".to_string())],
                    nodes.len() as i64 - alive - back,
                ),
            ],
        )?;
        let node = |n: &hetsched_proto::NodeInfo| vec![("node", n.name.clone())];
        gauge(
            e,
            "node_up",
            "1 if the node is not declared dead (alive, or returning after the server's \
             restart), 0 if declared dead.",
            nodes
                .iter()
                .map(|n| (node(n), i64::from(n.alive || returning(n)))),
        )?;
        gauge(
            e,
            "node_agent_info",
            "The hetsched version of the node's agent, as it last registered (version=\"unknown\": \
             an agent that predates saying it); compare with hetsched_server_info.",
            nodes.iter().map(|n| {
                let version = if n.version.is_empty() {
                    "unknown".to_string()
                } else {
                    n.version.clone()
                };
                (vec![("node", n.name.clone()), ("version", version)], 1i64)
            }),
        )?;
        gauge(
            e,
            "node_drained",
            "1 if an operator drained the node (hetsched node drain): it takes no new work.",
            nodes.iter().map(|n| (node(n), i64::from(n.drained))),
        )?;
        gauge(
            e,
            "node_cores",
            "Cores the node offers.",
            nodes.iter().map(|n| (node(n), i64::from(n.cores))),
        )?;
        gauge(
            e,
            "node_free_cores",
            "Cores of the node not taken by running tasks.",
            nodes.iter().map(|n| (node(n), i64::from(n.free_cores))),
        )?;
        gauge(
            e,
            "node_gpus",
            "GPUs the node offers.",
            nodes.iter().map(|n| (node(n), n.accelerators.len() as i64)),
        )?;
        gauge(
            e,
            "node_free_gpus",
            "GPUs of the node not taken by running tasks.",
            nodes.iter().map(|n| (node(n), i64::from(n.free_gpus))),
        )?;
        gauge(
            e,
            "node_running_tasks",
            "Tasks the server has dispatched to the node and not seen finish.",
            nodes.iter().map(|n| (node(n), i64::from(n.running))),
        )?;
        gauge(
            e,
            "node_queued_tasks",
            "Of the node's running tasks, those its agent holds queued (prefetch), not started.",
            nodes.iter().map(|n| (node(n), i64::from(n.queued))),
        )?;
        gauge(
            e,
            "node_disk_read_bytes_per_second",
            "Disk read rate of the node's tasks, as its last heartbeat reported.",
            nodes.iter().map(|n| (node(n), n.read_bytes_per_sec)),
        )?;
        gauge(
            e,
            "node_available_memory_bytes",
            "Memory the node's kernel reports as available (MemAvailable), as its last heartbeat reported.",
            nodes
                .iter()
                .map(|n| (node(n), n.available_memory_bytes as f64)),
        )?;
        gauge(
            e,
            "node_disk_free_bytes",
            "Free space on the filesystem of the node's agent's work directory (what an unprivileged process may still write), as its last heartbeat reported; nodes that did not report it are left out.",
            nodes
                .iter()
                .filter_map(|n| Some((node(n), n.disk_free_bytes? as f64))),
        )?;
        gauge(
            e,
            "node_min_free_disk_bytes",
            "The node's agent's `min_free_disk`: the free space fetched workflow inputs never take its work directory's filesystem below (0: no floor).",
            nodes.iter().map(|n| (node(n), n.min_free_disk as f64)),
        )?;
        gauge(
            e,
            "node_backed_off_applications",
            "Applications kept off the node for a while after consecutive start failures there.",
            nodes.iter().map(|n| (node(n), n.backed_off.len() as i64)),
        )?;
        gauge(
            e,
            "node_gpu_utilisation_ratio",
            "Utilisation of each GPU (0 to 1), as the node's last heartbeat reported.",
            nodes.iter().flat_map(|n| {
                n.gpus.iter().map(|g| {
                    (
                        vec![("node", n.name.clone()), ("device", g.device.to_string())],
                        f64::from(g.percent) / 100.0,
                    )
                })
            }),
        )?;
        gauge(
            e,
            "node_time_left_seconds",
            "How long tasks may still run on the node, for an agent started with a time limit \
             (--time-limit); nodes without one are not listed.",
            nodes.iter().filter_map(|n| {
                n.time_left_ms
                    .filter(|_| n.alive)
                    .map(|ms| (node(n), ms as f64 / 1000.0))
            }),
        )?;
        // Automatic allocation ([[allocation]] queues), as the batch system last listed them.
        let mut by_state: std::collections::BTreeMap<(String, String), i64> = Default::default();
        for q in &queues {
            for a in &q.allocations {
                *by_state
                    .entry((q.name.clone(), a.state.clone()))
                    .or_default() += 1;
            }
        }
        gauge(
            e,
            "allocations",
            "Allocations of each automatic allocation queue, by their state in the batch system.",
            by_state
                .into_iter()
                .map(|((q, s), n)| (vec![("queue", q), ("state", s)], n)),
        )?;
        gauge(
            e,
            "allocations_submitted",
            "Allocations each automatic allocation queue submitted since the server started.",
            queues
                .iter()
                .map(|q| (vec![("queue", q.name.clone())], q.submitted as i64)),
        )?;
        gauge(
            e,
            "allocation_queue_paused",
            "1 if an operator paused the queue (`hetsched allocations --pause`): it submits nothing.",
            queues
                .iter()
                .map(|q| (vec![("queue", q.name.clone())], i64::from(q.paused))),
        )?;
        type Dimension = fn(&Resources) -> i64;
        let dimensions: [(&str, &str, &str, Dimension); 3] = [
            ("cores", "Cores", "cores", |r| i64::from(r.cores)),
            ("gpus", "GPUs", "GPUs", |r| i64::from(r.gpus)),
            ("memory_bytes", "Bytes of memory", "bytes of memory", |r| {
                i64::try_from(r.memory_bytes).unwrap_or(i64::MAX)
            }),
        ];
        for (unit, held, most, of) in dimensions {
            gauge(
                e,
                &format!("user_{unit}"),
                &format!(
                    "{held} each user's running batch tasks and workflow instances hold \
                     (docs/runtime.md, Users); user=\"admin\": what the live nodes hold \
                     outside every user's."
                ),
                users
                    .iter()
                    .map(|(u, usage, ..)| (vec![("user", u.clone())], of(usage))),
            )?;
            gauge(
                e,
                &format!("user_max_{unit}"),
                &format!(
                    "The most {most} each user capped on them may hold at once (`hetsched user \
                     limit`)."
                ),
                users
                    .iter()
                    .filter(|(_, _, cap, _)| of(cap) > 0)
                    .map(|(u, _, cap, _)| (vec![("user", u.clone())], of(cap))),
            )?;
        }
        gauge(
            e,
            "user_fair_usage",
            "Each user's fair-share usage with [fair_share]: the share of the cluster its running \
             work held, integrated over time in share-seconds and decayed (the admin's as \
             user=\"admin\").",
            users
                .iter()
                .filter_map(|(u, _, _, fair)| fair.map(|f| (vec![("user", u.clone())], f))),
        )?;
        // The accounts since the server started (`hetsched usage` reads them by day).
        type Amount = fn(&crate::accounting::Held) -> f64;
        let amounts: [(&str, &str, Amount); 3] = [
            ("core", "Core", |h| h.core_seconds),
            ("gpu", "GPU", |h| h.gpu_seconds),
            ("memory_byte", "Memory byte", |h| h.memory_byte_seconds),
        ];
        for (unit, what, of) in amounts {
            counter(
                e,
                &format!("user_{unit}_seconds"),
                &format!(
                    "{what}-seconds each owner's running work held since the server started (the \
                     admin's as user=\"admin\"; docs/runtime.md, Accounting)."
                ),
                accounts
                    .iter()
                    .filter(|(o, _)| o.as_str() != crate::accounting::CAPACITY)
                    .map(|(o, h)| (vec![("user", o.clone())], of(h))),
            )?;
            single_counter(
                e,
                &format!("capacity_{unit}_seconds"),
                &format!(
                    "{what}-seconds the live nodes offered since the server started (a user's \
                     rate over this one's is its share of the cluster)."
                ),
                accounts.get(crate::accounting::CAPACITY).map(of),
            )?;
        }
        gauge(
            e,
            "allocation_queue_failing",
            "1 if the queue's last look at the batch system failed (see `hetsched allocations`).",
            queues.iter().map(|q| {
                (
                    vec![("queue", q.name.clone())],
                    i64::from(q.error.is_some()),
                )
            }),
        )?;
        Ok(())
    }
}

/// The `/metrics` route: the registry, encoded per scrape on a blocking thread (the collector
/// takes the state's lock). Its caller puts it behind the dashboard's credentials.
pub fn router(registry: Registry) -> axum::Router {
    let registry = Arc::new(registry);
    axum::Router::new().route(
        "/metrics",
        axum::routing::get(move || scrape(registry.clone())),
    )
}

const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

async fn scrape(registry: Arc<Registry>) -> axum::response::Response {
    use axum::http::{StatusCode, header};
    use axum::response::IntoResponse;
    let encoded = tokio::task::spawn_blocking(move || {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).map(|()| text)
    })
    .await;
    match encoded {
        Ok(Ok(text)) => ([(header::CONTENT_TYPE, OPENMETRICS)], text).into_response(),
        _ => {
            tracing::error!("encoding the metrics failed");
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                "encoding the metrics failed\n",
            )
                .into_response()
        }
    }
}
