//! The stream simulator (spec 04, issue 8): a topology placed by one of the core's stream placers
//! runs on a modelled cluster while its rates change over time; a simulated traffic monitor feeds
//! the placer, and the core's rescheduling controller decides when to move executors.
//!
//! The model is a fluid one, advanced in fixed steps by the engine's event queue (one `Step`
//! event per step, plus `Monitor` and `Rate` events); the last step ends at the duration, shorter
//! if the duration is not a whole number of steps, and counts in every average by its length:
//! - **Load**: an executor needs its declared CPU (per cent of one core) times the current rate
//!   factor; a tuple leaving its process costs serialisation CPU at both ends ([`link`]). A node's
//!   CPU utilisation is the sum over its capacity (`cores × 100`); its link utilisation is its
//!   larger direction of inter-node bytes per second over its bandwidth.
//! - **Throttle and queue**: the topology processes at most `offered / ρmax` tuples per second,
//!   where `ρmax` is the highest CPU or link utilisation of any node (Storm's backpressure: the
//!   slowest node paces the spouts). What is not processed waits (the *pending* queue) and every
//!   tuple entering waits `pending / capacity`. A tuple that would wait longer than the message
//!   timeout fails and is replayed: the queue is capped there and the excess counted as
//!   `failed_tuples`.
//! - **Latency**: each step samples tuple paths (seeded): a spout executor by its emission rate,
//!   then, hop by hop, a receiver by pair traffic until a sink; a hop costs the transfer
//!   ([`link::LinkModel::transfer`]), the receiver's service time per tuple and an M/M/1 wait of
//!   the receiver's *thread*: an executor is one thread, busy `cpu / 100` of the time at its
//!   current rate (its own utilisation, not its node's — a 16-core node at 90 % does not make
//!   each thread queue as a single 90 %-busy server would); when its node's CPU is
//!   oversubscribed (utilisation ρ > 1) the thread runs ρ times slower and its utilisation grows
//!   by ρ (capped at 0.99; beyond, the pending queue carries the excess). The pending wait is
//!   added once. A step's samples stand for the tuples it processed (weights), so mean and p99
//!   are over tuples: a step that processes little (a restart) weighs little.
//! - **Monitor and rescheduling**: every `monitor_period` the [`TrafficMonitor`] turns the counted
//!   tuples per executor pair (what senders emitted, queued or not) into the executor traffic
//!   list; with a controller, [`RescheduleController::tick`] sees it and the running placement.
//!   Applying a placement restarts only the executors whose (node, process) changes (spec 04:
//!   logical executors are mapped onto the new plan; unchanged ones keep running): for
//!   `migration_pause` the topology processes at `1 − φ` of its rate, where `φ` is the largest
//!   fraction of one component's executors that moved (tuples pass every component, so the
//!   most-disrupted one paces the spouts under backpressure). A placement that moves nothing
//!   costs nothing; one that moves everything stops the topology as a full restart would.
//!
//! Runs are deterministic: integer time, events in (time, scheduling order), one seeded RNG.

pub mod link;

use crate::engine::{EventQueue, Flow, Model, run};
use hetsched_core::model::topology::{ComponentKind, ExecutorId, Topology};
use hetsched_core::policy::stream::monitor::TrafficMonitor;
use hetsched_core::policy::stream::reschedule::{
    Cause, Decision, RescheduleController, RescheduleSettings,
};
use hetsched_core::policy::stream::{
    Placement, PlacementError, PlacementProblem, StreamNode, StreamPlacer, evaluate, stream_nodes,
};
use hetsched_core::time::{NANOS_PER_SEC, Time, to_secs};
use hetsched_core::{Cluster, Node};
use link::LinkModel;
use rand::{Rng, SeedableRng};
use serde::Serialize;
use thiserror::Error;

/// From `at` on, every stream's rate is its declared rate times `factor`.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct RateChange {
    /// When the change happens.
    pub at: Time,
    /// Multiplier of the declared rates (and so of the executors' CPU demand).
    pub factor: f64,
}

/// Settings of one stream simulation.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct StreamSimConfig {
    /// Simulated time. When it is not a whole number of steps, the last step is cut at it
    /// (shorter, weighted by its length in every average), so that throughput and the averages
    /// are over exactly this time.
    pub duration: Time,
    /// Length of one fluid step.
    pub step: Time,
    /// Period of the traffic monitor (and of the controller's ticks).
    pub monitor_period: Time,
    /// The rescheduling controller's thresholds; `None` keeps the first placement.
    pub reschedule: Option<RescheduleSettings>,
    /// Rate changes, in any order.
    pub rate_changes: Vec<RateChange>,
    /// Tuple transfer costs.
    pub link: LinkModel,
    /// Storm's message timeout: a tuple waiting longer fails and is replayed.
    pub timeout: Time,
    /// How long a reschedule stops the topology (workers restart).
    pub migration_pause: Time,
    /// Latency samples per step.
    pub latency_samples: usize,
    /// The user-fixed worker count (even, two-phase-traffic).
    pub workers: Option<u32>,
    /// Seed of the latency sampler.
    pub seed: u64,
}

impl Default for StreamSimConfig {
    fn default() -> Self {
        Self {
            duration: 120 * NANOS_PER_SEC,
            step: NANOS_PER_SEC / 10,
            monitor_period: 5 * NANOS_PER_SEC,
            reschedule: None,
            rate_changes: Vec::new(),
            link: LinkModel::default(),
            timeout: 30 * NANOS_PER_SEC,
            migration_pause: 2 * NANOS_PER_SEC,
            latency_samples: 20,
            workers: None,
            seed: 1,
        }
    }
}

/// One applied reschedule.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RescheduleRecord {
    /// When, in seconds.
    pub at_s: f64,
    /// Why.
    pub cause: Cause,
    /// Relative inter-node traffic gain.
    pub gain: f64,
    /// Nodes used by the new placement.
    pub nodes_used: usize,
    /// The largest fraction of one component's executors that moved (`φ`): the share of the
    /// topology's rate lost for `migration_pause`.
    pub moved_fraction: f64,
}

/// What one stream simulation measured.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct StreamSimResult {
    /// The placer.
    pub placer: String,
    /// The topology.
    pub topology: String,
    /// Time-averaged tuples/s between executors on different nodes.
    pub inter_node_traffic: f64,
    /// Time-averaged tuples/s between processes on one node.
    pub inter_process_traffic: f64,
    /// Nodes used by the placement at the end.
    pub nodes_used: usize,
    /// Processes used by the placement at the end.
    pub processes_used: usize,
    /// Highest CPU utilisation of any node at any step, in per cent (serialisation included).
    pub max_node_load: f64,
    /// Seconds during which some node's CPU was above capacity.
    pub overloaded_s: f64,
    /// Average tuples/s the spouts were asked to emit.
    pub offered: f64,
    /// Average tuples/s the spouts' tuples were processed at (acked).
    pub throughput: f64,
    /// Mean sampled end-to-end latency, milliseconds.
    pub mean_latency_ms: f64,
    /// 99th percentile of sampled end-to-end latency, milliseconds.
    pub p99_latency_ms: f64,
    /// Tuples that timed out and were replayed.
    pub failed_tuples: f64,
    /// Applied reschedules.
    pub reschedules: Vec<RescheduleRecord>,
}

/// Why a stream simulation could not run.
#[derive(Debug, Error)]
pub enum StreamSimError {
    /// The placer refused the problem.
    #[error("placement: {0}")]
    Placement(#[from] PlacementError),
    /// A setting is out of range.
    #[error("invalid stream simulator setting `{field}`: {problem}")]
    Config {
        /// The setting.
        field: &'static str,
        /// What is wrong.
        problem: String,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Event {
    Rate(usize),
    Monitor,
    Step,
}

struct StreamModel<'a> {
    topology: &'a Topology,
    cluster: &'a Cluster,
    nodes: Vec<StreamNode>,
    placer: &'a dyn StreamPlacer,
    config: &'a StreamSimConfig,
    base_traffic: Vec<(usize, usize, f64)>,
    base_loads: Vec<f64>,
    /// Outgoing pairs of each executor: (receiver, declared tuples/s).
    out: Vec<Vec<(usize, f64)>>,
    /// Per-tuple service time of each executor, seconds.
    service: Vec<f64>,
    spouts: Vec<(usize, f64)>,
    spout_rate: f64,
    placement: Placement,
    controller: Option<RescheduleController>,
    monitor: TrafficMonitor,
    factor: f64,
    pending: f64,
    paused_until: Time,
    /// Fraction of the topology's rate lost until `paused_until` (`φ`, see the module docs).
    paused_fraction: f64,
    /// Component of each executor.
    component_of: Vec<usize>,
    rng: rand_pcg::Pcg64Mcg,
    // Accumulators. Steps are counted in whole steps, a last partial one as its fraction (see
    // `step`), and the per-step sums weigh it the same.
    steps: f64,
    inter_node_sum: f64,
    inter_process_sum: f64,
    offered_sum: f64,
    processed: f64,
    max_load: f64,
    overloaded_steps: f64,
    failed: f64,
    /// Sampled latencies (seconds) with the tuples each one stands for (the step's processed
    /// tuples shared by its samples), so percentiles are over tuples, not over time.
    samples: Vec<(f64, f64)>,
    reschedules: Vec<RescheduleRecord>,
    error: Option<StreamSimError>,
}

impl StreamModel<'_> {
    fn node(&self, n: usize) -> &Node {
        &self.cluster.nodes[n]
    }

    fn step(&mut self, now: Time) {
        // The last step is cut at the duration: a run of 150 ms is a step of 100 ms and one of
        // 50 ms, not two whole steps whose 200 ms of tuples were divided by 150 ms (throughput
        // above the offered rate). `handle` steps only before the duration, so `now < duration`.
        let dt_ns = self
            .config
            .step
            .min(self.config.duration.saturating_sub(now));
        let dt = to_secs(dt_ns);
        // 1.0 exactly for a whole step, so a duration of whole steps sums as it always did.
        let weight = if dt_ns == self.config.step {
            1.0
        } else {
            dt_ns as f64 / self.config.step as f64
        };
        let f = self.factor;
        let n_nodes = self.nodes.len();
        let mut cpu = vec![0.0; n_nodes];
        for (e, &n) in self.placement.node.iter().enumerate() {
            cpu[n] += self.base_loads[e] * f;
        }
        let mut out_bytes = vec![0.0; n_nodes];
        let mut in_bytes = vec![0.0; n_nodes];
        let (mut inter_node, mut inter_process) = (0.0, 0.0);
        let serde = self.config.link.serde_cpu * 100.0;
        for &(a, b, r) in &self.base_traffic {
            let r = r * f;
            let (na, nb) = (self.placement.node[a], self.placement.node[b]);
            if na != nb {
                inter_node += r;
                cpu[na] += r * serde;
                cpu[nb] += r * serde;
                out_bytes[na] += r * self.config.link.tuple_bytes;
                in_bytes[nb] += r * self.config.link.tuple_bytes;
            } else if self.placement.process[a] != self.placement.process[b] {
                inter_process += r;
                cpu[na] += 2.0 * r * serde;
            }
            self.monitor
                .tuples_received(ExecutorId(a as u32), ExecutorId(b as u32), r * dt);
        }
        let rho_cpu: Vec<f64> = (0..n_nodes)
            .map(|n| cpu[n] / self.nodes[n].capacity.max(1e-9))
            .collect();
        let rho_net: Vec<f64> = (0..n_nodes)
            .map(|n| out_bytes[n].max(in_bytes[n]) / self.node(n).net_bw.max(1.0))
            .collect();
        let bottleneck = rho_cpu.iter().chain(&rho_net).copied().fold(0.0, f64::max);
        let offered = self.spout_rate * f;
        let running = if now < self.paused_until {
            1.0 - self.paused_fraction
        } else {
            1.0
        };
        let cap_rate = if running <= 0.0 {
            0.0
        } else if bottleneck > 0.0 {
            running * offered / bottleneck.max(1e-12)
        } else if running < 1.0 {
            running * offered
        } else {
            f64::INFINITY
        };
        let backlog = self.pending + offered * dt;
        let processed = backlog.min(cap_rate * dt);
        self.pending = backlog - processed;
        let timeout = to_secs(self.config.timeout);
        if cap_rate > 0.0 && self.pending / cap_rate > timeout {
            let keep = timeout * cap_rate;
            self.failed += self.pending - keep;
            self.pending = keep;
        }
        self.steps += weight;
        self.inter_node_sum += inter_node * weight;
        self.inter_process_sum += inter_process * weight;
        self.offered_sum += offered * weight;
        self.processed += processed;
        let max_cpu = rho_cpu.iter().copied().fold(0.0, f64::max);
        self.max_load = self.max_load.max(max_cpu * 100.0);
        if max_cpu > 1.0 + 1e-9 {
            self.overloaded_steps += weight;
        }
        if cap_rate <= 0.0 || processed <= 0.0 || self.spouts.is_empty() {
            return;
        }
        let wait = if cap_rate.is_finite() {
            self.pending / cap_rate
        } else {
            0.0
        };
        for _ in 0..self.config.latency_samples {
            let mut e = pick(&mut self.rng, &self.spouts, self.spout_rate);
            let mut lat = wait;
            for _ in 0..64 {
                let outs = &self.out[e];
                if outs.is_empty() {
                    break;
                }
                let total: f64 = outs.iter().map(|x| x.1).sum();
                let v = pick(&mut self.rng, outs, total);
                let (na, nb) = (self.placement.node[e], self.placement.node[v]);
                let same_process =
                    na == nb && self.placement.process[e] == self.placement.process[v];
                let transfer = self.config.link.transfer(
                    self.node(na),
                    self.node(nb),
                    na == nb,
                    same_process,
                    rho_net[na],
                    rho_net[nb],
                );
                let stretch = rho_cpu[nb].max(1.0);
                let rho = (self.base_loads[v] * f / 100.0 * stretch).min(0.99);
                lat += transfer + self.service[v] * stretch * (1.0 + rho / (1.0 - rho));
                e = v;
            }
            self.samples
                .push((lat, processed / self.config.latency_samples as f64));
        }
    }

    fn monitor_tick(&mut self, now: Time) {
        let measured = self.monitor.flush(now);
        let Some(controller) = self.controller.as_mut() else {
            return;
        };
        let mut problem = PlacementProblem::measured(self.topology, &self.nodes, measured);
        problem.workers = self.config.workers;
        match controller.tick(now, self.placer, &problem, &self.placement) {
            Ok(Decision::Apply {
                cause,
                gain,
                placement,
            }) => {
                let nodes_used = evaluate(&problem, &placement).nodes_used;
                let mut moved = vec![0usize; self.topology.components.len()];
                for e in 0..placement.node.len() {
                    if placement.node[e] != self.placement.node[e]
                        || placement.process[e] != self.placement.process[e]
                    {
                        moved[self.component_of[e]] += 1;
                    }
                }
                let fraction = self
                    .topology
                    .components
                    .iter()
                    .zip(&moved)
                    .map(|(c, &m)| m as f64 / f64::from(c.parallelism.max(1)))
                    .fold(0.0, f64::max);
                self.placement = placement;
                if fraction > 0.0 {
                    self.paused_until = now + self.config.migration_pause;
                    self.paused_fraction = fraction;
                }
                self.reschedules.push(RescheduleRecord {
                    at_s: to_secs(now),
                    cause,
                    gain,
                    nodes_used,
                    moved_fraction: fraction,
                });
            }
            Ok(_) => {}
            Err(e) => self.error = Some(e.into()),
        }
    }
}

/// An index from `items` with probability proportional to its weight.
fn pick(rng: &mut rand_pcg::Pcg64Mcg, items: &[(usize, f64)], total: f64) -> usize {
    let mut x = rng.random::<f64>() * total;
    for &(i, w) in items {
        if x < w {
            return i;
        }
        x -= w;
    }
    items.last().map_or(0, |&(i, _)| i)
}

impl Model for StreamModel<'_> {
    type Event = Event;
    type Error = StreamSimError;

    fn handle(
        &mut self,
        event: Event,
        queue: &mut EventQueue<Event>,
    ) -> Result<Flow, StreamSimError> {
        let now = queue.now();
        if now >= self.config.duration {
            return Ok(Flow::Stop);
        }
        match event {
            Event::Rate(i) => self.factor = self.config.rate_changes[i].factor,
            Event::Monitor => {
                self.monitor_tick(now);
                if let Some(e) = self.error.take() {
                    return Err(e);
                }
                queue.schedule_in(self.config.monitor_period, Event::Monitor);
            }
            Event::Step => {
                self.step(now);
                queue.schedule_in(self.config.step, Event::Step);
            }
        }
        Ok(Flow::Continue)
    }
}

/// Runs `topology` on `cluster` (`slots[i]` worker slots on node `i`) under `placer`.
pub fn simulate_stream(
    topology: &Topology,
    cluster: &Cluster,
    slots: &[u32],
    placer: &dyn StreamPlacer,
    config: &StreamSimConfig,
) -> Result<StreamSimResult, StreamSimError> {
    let bad = |field, problem: &str| StreamSimError::Config {
        field,
        problem: problem.to_string(),
    };
    if config.step == 0 {
        return Err(bad("step", "must be positive"));
    }
    if config.monitor_period == 0 {
        return Err(bad("monitor_period", "must be positive"));
    }
    if config
        .rate_changes
        .iter()
        .any(|r| !(r.factor.is_finite() && r.factor >= 0.0))
    {
        return Err(bad("rate_changes", "factors must be non-negative numbers"));
    }
    let nodes = stream_nodes(cluster, slots, &topology.requires);
    let mut problem = PlacementProblem::declared(topology, &nodes);
    problem.workers = config.workers;
    let placement = placer.place(&problem)?;
    let n = topology.executor_count();
    // The fluid model moves tuples pair by pair (and its monitor measures pairs), so it lists
    // the declared traffic's pairs (quadratic in the parallelism: the simulator is for the
    // topologies of the scenarios, placers bound what they walk themselves).
    let base_traffic: Vec<(usize, usize, f64)> = problem
        .traffic
        .pairs(topology)
        .iter()
        .map(|p| (p.from.index(), p.to.index(), p.tuples_per_s))
        .collect();
    let mut out = vec![Vec::new(); n];
    let mut incoming = vec![0.0; n];
    for &(a, b, r) in &base_traffic {
        out[a].push((b, r));
        incoming[b] += r;
    }
    let comps = topology.executor_components();
    let base_loads = problem.loads.clone();
    let service = (0..n)
        .map(|e| {
            if incoming[e] > 0.0 {
                base_loads[e] / 100.0 / incoming[e]
            } else {
                0.0
            }
        })
        .collect();
    let spouts: Vec<(usize, f64)> = (0..n)
        .filter(|&e| topology.components[comps[e]].kind == ComponentKind::Spout)
        .map(|e| (e, out[e].iter().map(|x| x.1).sum::<f64>()))
        .filter(|&(_, r)| r > 0.0)
        .collect();
    let spout_rate = spouts.iter().map(|x| x.1).sum();
    let mut model = StreamModel {
        topology,
        cluster,
        nodes: nodes.clone(),
        placer,
        config,
        base_traffic,
        base_loads,
        out,
        service,
        spouts,
        spout_rate,
        placement,
        controller: config.reschedule.map(|s| RescheduleController::new(s, 0)),
        monitor: TrafficMonitor::new(0),
        factor: 1.0,
        pending: 0.0,
        paused_until: 0,
        paused_fraction: 0.0,
        component_of: comps.clone(),
        rng: rand_pcg::Pcg64Mcg::seed_from_u64(config.seed),
        steps: 0.0,
        inter_node_sum: 0.0,
        inter_process_sum: 0.0,
        offered_sum: 0.0,
        processed: 0.0,
        max_load: 0.0,
        overloaded_steps: 0.0,
        failed: 0.0,
        samples: Vec::new(),
        reschedules: Vec::new(),
        error: None,
    };
    let mut queue = EventQueue::new();
    let mut changes: Vec<(usize, Time)> = config
        .rate_changes
        .iter()
        .enumerate()
        .map(|(i, r)| (i, r.at))
        .collect();
    changes.sort_by_key(|&(i, at)| (at, i));
    // Rate changes first, so a step at the same instant already sees the new rate.
    for (i, at) in changes {
        queue.schedule(at, Event::Rate(i));
    }
    queue.schedule(config.monitor_period, Event::Monitor);
    queue.schedule(0, Event::Step);
    run(&mut model, &mut queue)?;
    let steps = model.steps.max(1e-12);
    let duration = to_secs(config.duration).max(1e-9);
    let mut samples = std::mem::take(&mut model.samples);
    samples.sort_by(|x, y| x.0.total_cmp(&y.0));
    let weight: f64 = samples.iter().map(|x| x.1).sum();
    let mean = if weight > 0.0 {
        samples.iter().map(|x| x.0 * x.1).sum::<f64>() / weight
    } else {
        0.0
    };
    // The smallest latency at or below which 99 % of the processed tuples' weight lies.
    let mut p99 = 0.0;
    let mut seen = 0.0;
    for &(lat, w) in &samples {
        seen += w;
        p99 = lat;
        if seen >= 0.99 * weight {
            break;
        }
    }
    let final_metrics = evaluate(&problem, &model.placement);
    Ok(StreamSimResult {
        placer: placer.name().to_string(),
        topology: topology.name.clone(),
        inter_node_traffic: model.inter_node_sum / steps,
        inter_process_traffic: model.inter_process_sum / steps,
        nodes_used: final_metrics.nodes_used,
        processes_used: final_metrics.processes_used,
        max_node_load: model.max_load,
        overloaded_s: model.overloaded_steps * to_secs(config.step),
        offered: model.offered_sum / steps,
        throughput: model.processed / duration,
        mean_latency_ms: mean * 1e3,
        p99_latency_ms: p99 * 1e3,
        failed_tuples: model.failed,
        reschedules: model.reschedules,
    })
}
