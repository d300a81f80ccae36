//! The graph simulator (spec 05): a workflow's instances placed by one of the core's balancers
//! (`static`, `centralised`, `pcddb`) on nodes of different core counts and clock speeds.
//!
//! The simulator is only a driver: the placement logic is the core's state machines
//! ([`hetsched_core::policy::graph`]). It delivers their messages after the latency matrix's
//! one-way delay, fires every member's periodic self-check, runs the instances they start — one at
//! a time per core, for `cost / core_speed`, each core first its own queue and, when that is
//! empty, the longest queue of a sibling core (no core of a node idles while the node holds a
//! waiting instance) — and hands
//! finished instances back to their node's agent, whose result message readies dependants at the
//! launch node. Every message is counted by kind and by node.
//!
//! Deterministic: integer nanoseconds, ties broken by scheduling order, costs and self-check
//! phases drawn from [`GraphSimConfig::seed`].

pub mod export;

use crate::engine::{EventQueue, Flow, Model, run};
use hetsched_core::model::latency::LatencyMatrix;
use hetsched_core::model::workflow::{Cost, DependencyKind, Workflow};
use hetsched_core::policy::graph::catalogue::NodeCatalogue;
use hetsched_core::policy::graph::{
    self, BalancerKind, GraphSetup, InstanceId, LaunchEvent, Manager, Message, NodeAgent,
    NodeEvent, Outgoing, Thresholds,
};
use hetsched_core::text::count;
use hetsched_core::time::{NANOS_PER_SEC, Time, to_secs};
use hetsched_core::{Cluster, NodeId};
use rand::{Rng, SeedableRng};
use rand_pcg::Pcg64;
use serde::Serialize;
use std::collections::{BTreeMap, VecDeque};
use thiserror::Error;

/// The longest run a simulation may need: 100 years, in ns (as `sim divisible`'s schedules).
const HORIZON: Time = 100 * 365 * 24 * 3600 * NANOS_PER_SEC;

/// The most nodes a graph simulation takes (as many as a cluster file holds). The launch nodes
/// find a node's `status` or `report` through an index from node to entry, so a round of checks
/// costs O(nodes), not nodes²: on this 2-core VM (release build, docs/performance.md "Graph
/// simulator on 100,000 nodes") 100,000 nodes run about 0.15 s per simulated second under pcddb
/// and 0.2 s under centralised (2.2 s and 2.8 s when they looked every message up among the
/// members), 10,000 nodes 0.005 s and 0.01 s (0.03 s and 0.03 s). The nodes a pcddb request
/// passes share the underloaded-node table it carries (spec 05 §4 c merges it into theirs)
/// instead of copying it, which held nodes²/2 entries when a backlog walked one request through
/// every idle node (200,000 instances ready at once on 100,000 nodes: 2.6 GB, now the memory of
/// the nodes themselves).
pub const MAX_GRAPH_NODES: usize = 100_000;

/// Message kinds in the order reports list them.
pub const MESSAGE_KINDS: [&str; 7] = [
    "status", "request", "reply", "return", "result", "report", "dispatch",
];

/// Why a graph simulation cannot run or finish.
#[derive(Debug, Error, PartialEq)]
pub enum GraphSimError {
    /// A setting is unusable.
    #[error("{0}")]
    Config(String),
    /// Instances of a task need attributes no node of the deployment has.
    #[error("task `{task}` requires {requires:?}, which no node of the deployment offers")]
    Unplaceable {
        /// The task.
        task: String,
        /// Its requirements.
        requires: Vec<String>,
    },
    /// Nothing finished for far longer than any instance takes: the balancer will never finish.
    #[error(
        "no instance finished between t = {since_s:.3} s and t = {now_s:.3} s; {left} instances left"
    )]
    Stalled {
        /// Last progress.
        since_s: f64,
        /// Now.
        now_s: f64,
        /// Instances not finished.
        left: u64,
    },
    /// Nothing finished for as long as [`GraphSimError::Stalled`] allows, and a node has more
    /// messages waiting to be handled than that time: its messages (every member's periodic
    /// status or report, under pcddb and centralised) arrive faster than it handles them, so its
    /// queue grows without end and the run would never finish.
    #[error(
        "no instance finished between t = {since_s:.3} s and t = {now_s:.3} s ({} left): node `{node}` has {backlog_s:.3} s of messages waiting, at {message_cost_s:.3} s \
         each, and receives them faster than it handles them; a smaller message cost or a longer \
         check interval lets it keep up",
        count(*.left, "instance")
    )]
    Overloaded {
        /// Last progress.
        since_s: f64,
        /// Now.
        now_s: f64,
        /// Instances not finished.
        left: u64,
        /// The node with the longest queue of messages.
        node: String,
        /// How long that node will take to handle what it has been sent, seconds.
        backlog_s: f64,
        /// The time to handle one message, seconds.
        message_cost_s: f64,
    },
    /// The simulated clock (`u64` nanoseconds) reached its end: message or instance costs too
    /// large for this workflow.
    #[error(
        "the simulated clock reached its end (584 years) with {} left: the message cost or the \
         instances' costs are too large for this workflow",
        count(*.left, "instance")
    )]
    ClockEnd {
        /// Instances not finished.
        left: u64,
    },
}

/// How to run a graph simulation.
#[derive(Clone, Debug)]
pub struct GraphSimConfig {
    /// The balancer.
    pub balancer: BalancerKind,
    /// Per-core LT and MT (pcddb).
    pub thresholds: Thresholds,
    /// The launch node (task manager; the centralised dispatcher).
    pub launch: NodeId,
    /// The deployment: nodes the program may use (a proximity cluster); all nodes when `None`.
    pub members: Option<Vec<NodeId>>,
    /// Period of every node's self-check (pcddb) or monitoring report (centralised).
    pub check_interval: Time,
    /// Seed of instance costs and self-check phases.
    pub seed: u64,
    /// Time a node needs to handle one incoming message (its agent or task manager handles
    /// messages one at a time, in the order they were sent). 0 = free and instant: the model then
    /// has no central bottleneck.
    pub message_cost: Time,
    /// How a node runs the instances it took.
    pub execution: Execution,
}

/// How a node runs the instances it holds.
///
/// Seed 004 says only that a node "generates and executes" what it accepts locally, "evenly
/// spread over its cores" (§2.5 c(b)); its LT and MT (2–4 and 6–10 per core) read like load
/// averages. Both readings are modelled.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Execution {
    /// Each core runs one instance at a time from its queue; an idle core takes a sibling's
    /// waiting instance (the default).
    #[default]
    Queue,
    /// Every instance a node holds runs at once, as a process: the operating system shares the
    /// node's cores among them equally, so each of `n` instances on a `c`-core node runs at
    /// `min(1, c / n)` of a core (processor sharing, no core idles while the node holds work).
    TimeShare,
}

impl Execution {
    /// The name the CLI and the export use.
    pub fn as_str(self) -> &'static str {
        match self {
            Execution::Queue => "queue",
            Execution::TimeShare => "time-share",
        }
    }
}

impl std::str::FromStr for Execution {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "queue" => Ok(Execution::Queue),
            "time-share" => Ok(Execution::TimeShare),
            other => Err(format!(
                "unknown execution `{other}`: expected queue or time-share"
            )),
        }
    }
}

impl Default for GraphSimConfig {
    fn default() -> Self {
        Self {
            balancer: BalancerKind::Pcddb,
            thresholds: Thresholds::default(),
            launch: NodeId(0),
            members: None,
            check_interval: NANOS_PER_SEC,
            seed: 1,
            message_cost: 0,
            execution: Execution::Queue,
        }
    }
}

/// Everything about one node after a run.
#[derive(Clone, Debug, PartialEq)]
pub struct NodeOutcome {
    /// Name.
    pub name: String,
    /// Cores.
    pub cores: u32,
    /// Relative core speed.
    pub core_speed: f64,
    /// Whether it was part of the deployment.
    pub member: bool,
    /// Most instances held at once.
    pub peak_instances: u32,
    /// Instances completed on each core.
    pub instances_per_core: Vec<u32>,
    /// Busy time of each core.
    pub busy_per_core: Vec<Time>,
    /// Messages this node sent.
    pub sent: u64,
    /// Messages this node received.
    pub received: u64,
    /// One-way latency of a message from the launch node to this node.
    pub latency_from_launch: Time,
    /// One-way latency of a message from this node to the launch node.
    pub latency_to_launch: Time,
}

/// One instance's life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InstanceRecord {
    /// Task index in the workflow.
    pub task: u32,
    /// Index within the task.
    pub index: u32,
    /// Node that ran it.
    pub node: NodeId,
    /// Core on that node.
    pub core: u32,
    /// When the launch node found it ready.
    pub ready: Time,
    /// When its node took it and queued it on `core` (static and centralised: when the launch
    /// node's message reached the node; pcddb: when the node accepted it from a request).
    pub placed: Time,
    /// Its place in the order of every placement of the run (0, 1, …): instances placed at one
    /// instant were queued in this order.
    pub placement: u64,
    /// When it started on its core.
    pub start: Time,
    /// When it ended.
    pub end: Time,
    /// How many times it was started (1 in a correct run).
    pub runs: u32,
    /// Its cost on a 1.0-speed core (as drawn from the seed).
    pub cost: Time,
}

/// A task as the launch node's task manager sees it: how its instances are numbered and whom
/// they wait for.
#[derive(Clone, Debug, PartialEq)]
pub struct TaskShape {
    /// Instances (argument values × processes).
    pub instances: u64,
    /// Processes per argument value.
    pub processes: u32,
    /// Producer tasks (indices) and how each is waited for.
    pub depends_on: Vec<(usize, DependencyKind)>,
}

/// Message counters.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MessageCounts {
    /// All messages.
    pub total: u64,
    /// By kind (every kind of [`MESSAGE_KINDS`], zeros included).
    pub by_kind: BTreeMap<String, u64>,
    /// Messages the launch node sent or received (its agent and its task manager together).
    pub launch_node: u64,
    /// Summed one-way latency of the balancing messages (status, request, reply, return): the
    /// network time the protocol itself costs.
    pub balancing_delay: Time,
}

/// The outcome of a graph simulation.
#[derive(Clone, Debug, PartialEq)]
pub struct GraphResult {
    /// The balancer's name.
    pub balancer: String,
    /// How nodes ran their instances.
    pub execution: Execution,
    /// Time the last instance ended.
    pub makespan: Time,
    /// Every instance, by instance id.
    pub instances: Vec<InstanceRecord>,
    /// Task names, by task index.
    pub task_names: Vec<String>,
    /// Each task's processes and the producers it waits for (the workflow's task graph).
    pub task_shapes: Vec<TaskShape>,
    /// Every node of the cluster.
    pub nodes: Vec<NodeOutcome>,
    /// Message counters.
    pub messages: MessageCounts,
    /// The launch node.
    pub launch: NodeId,
    /// The seed the run drew its costs and phases from ([`GraphSimConfig::seed`]).
    pub seed: u64,
}

impl GraphResult {
    /// Makespan in seconds.
    pub fn makespan_s(&self) -> f64 {
        self.makespan as f64 / NANOS_PER_SEC as f64
    }

    /// Where ready instances waited: for a node to take them (ready → placed: the balancer's
    /// delay, a pcddb request's travel and its wait for a taker) and in their node's queue
    /// (placed → start: work handed to a node faster than its cores run it).
    pub fn waits(&self) -> Waits {
        let mut w = Waits::default();
        let n = self.instances.len().max(1) as f64;
        for r in &self.instances {
            let for_node = r.placed.saturating_sub(r.ready);
            let in_queue = r.start.saturating_sub(r.placed);
            w.for_node_mean_s += to_secs(for_node) / n;
            w.for_node_max_s = w.for_node_max_s.max(to_secs(for_node));
            w.in_queue_mean_s += to_secs(in_queue) / n;
            w.in_queue_max_s = w.in_queue_max_s.max(to_secs(in_queue));
        }
        w
    }
}

/// How long a run's instances waited after they became ready, in seconds ([`GraphResult::waits`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Waits {
    /// Mean time from ready to placed on a node.
    pub for_node_mean_s: f64,
    /// Longest time from ready to placed on a node.
    pub for_node_max_s: f64,
    /// Mean time from placed to started (queued on the node).
    pub in_queue_mean_s: f64,
    /// Longest time from placed to started.
    pub in_queue_max_s: f64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Event {
    Start,
    /// A message (slot in the in-flight slab) arrives.
    Deliver(usize),
    SelfCheck(u32),
    Finish {
        node: u32,
        core: u32,
    },
    /// Under [`Execution::TimeShare`]: the node's next instance to end ends now, unless the
    /// node's set of running instances changed since this was scheduled (`generation`).
    ShareFinish {
        node: u32,
        generation: u64,
    },
}

/// A node's running instances under [`Execution::TimeShare`].
#[derive(Clone, Debug, Default)]
struct Shared {
    /// Each running instance and its remaining run time at a full core of this node, in ns.
    running: Vec<(InstanceId, f64)>,
    /// When `running`'s remaining times were last brought up to date.
    updated: Time,
    /// Bumped whenever `running` changes: a `ShareFinish` of an older generation is stale.
    generation: u64,
}

impl Shared {
    /// Run time each instance gets per unit of time on `cores` cores.
    fn rate(&self, cores: usize) -> f64 {
        (cores as f64 / self.running.len().max(1) as f64).min(1.0)
    }

    /// Charges the time since the last update to every running instance.
    fn advance(&mut self, now: Time, cores: usize) {
        let ran = (now - self.updated) as f64 * self.rate(cores);
        for (_, left) in &mut self.running {
            *left -= ran;
        }
        self.updated = now;
    }
}

#[derive(Clone, Debug, Default)]
struct Core {
    queue: VecDeque<InstanceId>,
    running: Option<InstanceId>,
    done: u32,
    busy: Time,
}

struct Sim<'a> {
    agents: Vec<NodeAgent>,
    manager: Manager,
    cores: Vec<Vec<Core>>,
    execution: Execution,
    shared: Vec<Shared>,
    speed: Vec<f64>,
    costs: Vec<Time>,
    latency: &'a LatencyMatrix,
    launch: NodeId,
    in_flight: Vec<Option<Message>>,
    free_slots: Vec<usize>,
    records: Vec<InstanceRecord>,
    /// Placements so far (the next one's `placement`).
    placements: u64,
    /// The core each instance's agent assigned it to (it may run on an idle sibling).
    assigned_core: Vec<u32>,
    total: u64,
    check_interval: Time,
    kind_counts: [u64; MESSAGE_KINDS.len()],
    sent: Vec<u64>,
    received: Vec<u64>,
    launch_count: u64,
    balancing_delay: Time,
    message_cost: Time,
    handler_free: Vec<Time>,
    /// Node names, for errors.
    names: Vec<String>,
    last_progress: Time,
    stall_after: Time,
    makespan: Time,
    error: Option<GraphSimError>,
}

impl Sim<'_> {
    fn apply(&mut self, at: NodeId, outs: Vec<Outgoing>, q: &mut EventQueue<Event>) {
        let now = q.now();
        for o in outs {
            match o {
                Outgoing::Send(m) => {
                    let kind = MESSAGE_KINDS
                        .iter()
                        .position(|k| *k == m.body.kind())
                        .unwrap_or(0);
                    self.kind_counts[kind] += 1;
                    self.sent[m.from.index()] += 1;
                    self.received[m.to.index()] += 1;
                    if m.from == self.launch || m.to == self.launch {
                        self.launch_count += 1;
                    }
                    let delay = self.latency.get(m.from.index(), m.to.index());
                    let m_to = m.to;
                    // The first four kinds are the balancing protocol's own.
                    if kind < 4 {
                        self.balancing_delay = self.balancing_delay.saturating_add(delay);
                    }
                    let slot = match self.free_slots.pop() {
                        Some(s) => {
                            self.in_flight[s] = Some(m);
                            s
                        }
                        None => {
                            self.in_flight.push(Some(m));
                            self.in_flight.len() - 1
                        }
                    };
                    // A node handles one message at a time: it is delivered when it has arrived
                    // and the receiver has handled what was sent to it before.
                    let to = m_to.index();
                    // Saturating: a long message cost queues deliveries far ahead, and the clock's
                    // end (checked in `handle`) must stop the run rather than wrap.
                    let at = now
                        .saturating_add(delay)
                        .max(self.handler_free[to])
                        .saturating_add(self.message_cost);
                    if self.message_cost > 0 {
                        self.handler_free[to] = at;
                    }
                    q.schedule(at, Event::Deliver(slot));
                }
                Outgoing::Run { instance, core } => {
                    let r = &mut self.records[instance.0 as usize];
                    r.node = at;
                    r.core = core;
                    r.runs += 1;
                    r.placed = now;
                    r.placement = self.placements;
                    self.placements += 1;
                    self.assigned_core[instance.0 as usize] = core;
                    let node = at.index();
                    if self.execution == Execution::TimeShare {
                        self.share_start(node, core as usize, instance, q);
                        continue;
                    }
                    self.cores[node][core as usize].queue.push_back(instance);
                    // The assigned core starts it if idle; otherwise an idle sibling takes it.
                    if self.cores[node][core as usize].running.is_none() {
                        self.start_next(node, core as usize, q);
                    } else if let Some(idle) =
                        self.cores[node].iter().position(|c| c.running.is_none())
                    {
                        self.start_next(node, idle, q);
                    }
                }
                Outgoing::Ready(id) => self.records[id.0 as usize].ready = now,
            }
        }
    }

    /// Starts the next instance on an idle core: the front of its own queue, or else — as an
    /// operating system's scheduler moves a runnable process to an idle core — the front of the
    /// longest queue among its siblings (ties: lowest core index). A node whose instances
    /// outnumber its cores therefore never leaves a core idle while one of them waits.
    fn start_next(&mut self, node: usize, core: usize, q: &mut EventQueue<Event>) {
        let next = match self.cores[node][core].queue.pop_front() {
            Some(i) => Some(i),
            None => {
                let busiest = self.cores[node]
                    .iter()
                    .enumerate()
                    .max_by_key(|&(k, c)| (c.queue.len(), std::cmp::Reverse(k)))
                    .filter(|(_, c)| !c.queue.is_empty())
                    .map(|(k, _)| k);
                busiest.and_then(|k| self.cores[node][k].queue.pop_front())
            }
        };
        let c = &mut self.cores[node][core];
        if let Some(i) = next {
            let d = ((self.costs[i.0 as usize] as f64) / self.speed[node]).ceil() as Time;
            c.running = Some(i);
            c.busy = c.busy.saturating_add(d);
            self.records[i.0 as usize].core = core as u32;
            self.records[i.0 as usize].start = q.now();
            q.schedule_in(
                d,
                Event::Finish {
                    node: node as u32,
                    core: core as u32,
                },
            );
        }
    }
}

impl Sim<'_> {
    /// Under [`Execution::TimeShare`]: `instance` starts at once beside the node's other running
    /// instances; it is accounted on `core`, the core its agent spread it to.
    fn share_start(
        &mut self,
        node: usize,
        core: usize,
        instance: InstanceId,
        q: &mut EventQueue<Event>,
    ) {
        let now = q.now();
        let cores = self.cores[node].len();
        let run = self.run_time(instance, node);
        let busy = &mut self.cores[node][core].busy;
        *busy = busy.saturating_add(run);
        let r = &mut self.records[instance.0 as usize];
        r.core = core as u32;
        r.start = now;
        let shared = &mut self.shared[node];
        shared.advance(now, cores);
        shared.running.push((instance, run as f64));
        self.share_schedule(node, q);
    }

    /// Schedules the end of the node's running instance with the least run time left.
    fn share_schedule(&mut self, node: usize, q: &mut EventQueue<Event>) {
        let cores = self.cores[node].len();
        let shared = &mut self.shared[node];
        shared.generation += 1;
        let Some(least) = shared
            .running
            .iter()
            .map(|&(_, left)| left)
            .min_by(f64::total_cmp)
        else {
            return;
        };
        let wait = (least.max(0.0) / shared.rate(cores)).ceil() as Time;
        q.schedule_in(
            wait,
            Event::ShareFinish {
                node: node as u32,
                generation: shared.generation,
            },
        );
    }

    /// Ends every running instance of the node whose run time is used up (those ending within
    /// the same nanosecond end together, in the order they started).
    fn share_finish(&mut self, node: usize, q: &mut EventQueue<Event>) {
        let now = q.now();
        let cores = self.cores[node].len();
        let shared = &mut self.shared[node];
        shared.advance(now, cores);
        // An instance ends if what it has left would take it less than a nanosecond.
        let rate = shared.rate(cores);
        let mut ended = Vec::new();
        shared.running.retain(|&(i, left)| {
            let done = left < rate;
            if done {
                ended.push(i);
            }
            !done
        });
        for i in ended {
            let core = self.assigned_core[i.0 as usize] as usize;
            self.cores[node][core].done += 1;
            self.finished(node, i, q);
        }
        self.share_schedule(node, q);
    }

    /// An instance's run time on a core of `node`, rounded up to the nanosecond.
    fn run_time(&self, i: InstanceId, node: usize) -> Time {
        ((self.costs[i.0 as usize] as f64) / self.speed[node]).ceil() as Time
    }

    /// Records the end of `i` on `node` and tells the node's agent, which accounts it on the core
    /// it assigned it to.
    fn finished(&mut self, node: usize, i: InstanceId, q: &mut EventQueue<Event>) {
        let now = q.now();
        let assigned = self.assigned_core[i.0 as usize];
        self.records[i.0 as usize].end = now;
        self.makespan = self.makespan.max(now);
        self.last_progress = now;
        let outs = self.agents[node].handle(
            NodeEvent::Finished {
                instance: i,
                core: assigned,
            },
            now,
        );
        self.apply(NodeId(node as u32), outs, q);
    }
}

impl Sim<'_> {
    /// Why nothing has finished since `last_progress`: a node whose queue of messages to handle
    /// is longer than that whole time is overloaded (its queue only grows); otherwise the
    /// balancer is stuck.
    fn stalled(&self, now: Time) -> GraphSimError {
        let since_s = to_secs(self.last_progress);
        let now_s = to_secs(now);
        let left = self.total - self.manager.finished();
        let busiest = self
            .handler_free
            .iter()
            .enumerate()
            .map(|(n, &free)| (free.saturating_sub(now), std::cmp::Reverse(n)))
            .max();
        match busiest {
            Some((backlog, std::cmp::Reverse(n)))
                if self.message_cost > 0 && backlog > now - self.last_progress =>
            {
                GraphSimError::Overloaded {
                    since_s,
                    now_s,
                    left,
                    node: self.names[n].clone(),
                    backlog_s: to_secs(backlog),
                    message_cost_s: to_secs(self.message_cost),
                }
            }
            _ => GraphSimError::Stalled {
                since_s,
                now_s,
                left,
            },
        }
    }
}

impl Model for Sim<'_> {
    type Event = Event;
    type Error = GraphSimError;

    fn handle(&mut self, event: Event, q: &mut EventQueue<Event>) -> Result<Flow, GraphSimError> {
        let now = q.now();
        if now == Time::MAX {
            self.error = Some(GraphSimError::ClockEnd {
                left: self.total - self.manager.finished(),
            });
            return Ok(Flow::Stop);
        }
        match event {
            Event::Start => {
                let outs = self.manager.handle(LaunchEvent::Start, now);
                self.apply(self.launch, outs, q);
            }
            Event::Deliver(slot) => {
                let Some(m) = self.in_flight[slot].take() else {
                    return Ok(Flow::Continue);
                };
                self.free_slots.push(slot);
                let to = m.to;
                let outs = if m.body.for_manager() && to == self.launch {
                    self.manager.handle(LaunchEvent::Deliver(m), now)
                } else {
                    self.agents[to.index()].handle(NodeEvent::Deliver(m), now)
                };
                self.apply(to, outs, q);
                if self.manager.finished() == self.total {
                    self.makespan = self.makespan.max(now);
                    return Ok(Flow::Stop);
                }
            }
            Event::SelfCheck(n) => {
                let outs = self.agents[n as usize].handle(NodeEvent::SelfCheck, now);
                self.apply(NodeId(n), outs, q);
                q.schedule_in(self.check_interval, Event::SelfCheck(n));
                if now > self.last_progress.saturating_add(self.stall_after) {
                    self.error = Some(self.stalled(now));
                    return Ok(Flow::Stop);
                }
            }
            Event::Finish { node, core } => {
                let c = &mut self.cores[node as usize][core as usize];
                let Some(i) = c.running.take() else {
                    return Ok(Flow::Continue);
                };
                // The core that ran it counts it done; the agent accounts it on the core it
                // assigned it to.
                c.done += 1;
                self.finished(node as usize, i, q);
                self.start_next(node as usize, core as usize, q);
            }
            Event::ShareFinish { node, generation } => {
                if self.shared[node as usize].generation == generation {
                    self.share_finish(node as usize, q);
                }
            }
        }
        Ok(Flow::Continue)
    }
}

/// One standard-normal draw (Box–Muller), truncated to ±4σ: a lognormal cost with cv = 1 and
/// z = 5 is 60 times its median, and one such instance would decide the makespan of every
/// balancer alike (the clipped tail has probability 6·10⁻⁵).
fn standard_normal(rng: &mut Pcg64) -> f64 {
    let u1: f64 = rng.random::<f64>().max(f64::MIN_POSITIVE);
    let u2: f64 = rng.random();
    ((-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()).clamp(-4.0, 4.0)
}

/// Every instance's cost, in instance order, drawn from `seed`.
pub fn instance_costs(workflow: &Workflow, seed: u64) -> Vec<Time> {
    let mut rng = Pcg64::seed_from_u64(seed ^ 0x5eed_c057);
    let mut costs = Vec::with_capacity(workflow.total_instances() as usize);
    for t in &workflow.tasks {
        for _ in 0..t.instances() {
            costs.push(match t.cost {
                Cost::Fixed(c) => c,
                c @ Cost::LogNormal { .. } => c.sample(standard_normal(&mut rng)),
            });
        }
    }
    costs
}

/// Simulates `workflow` on `cluster` (node `attributes` as [`hetsched_core::input::cluster::parse_node_attributes`]
/// gives them) under `config`.
pub fn simulate_graph(
    cluster: &Cluster,
    attributes: &[Vec<String>],
    latency: &LatencyMatrix,
    workflow: &Workflow,
    config: &GraphSimConfig,
) -> Result<GraphResult, GraphSimError> {
    let n = cluster.nodes.len();
    if n > MAX_GRAPH_NODES {
        return Err(GraphSimError::Config(format!(
            "the cluster has {n} nodes; a graph simulation takes at most {MAX_GRAPH_NODES} (as \
             many as a cluster file holds)"
        )));
    }
    if latency.len() != n {
        return Err(GraphSimError::Config(format!(
            "the latency matrix has {} nodes, the cluster {n}",
            latency.len()
        )));
    }
    if config.launch.index() >= n {
        return Err(GraphSimError::Config(format!(
            "launch node {} is not in the cluster",
            config.launch.0
        )));
    }
    if config.check_interval == 0 {
        return Err(GraphSimError::Config(
            "the self-check interval must be positive".into(),
        ));
    }
    if !config.thresholds.is_valid() {
        return Err(GraphSimError::Config(format!(
            "need 1 ≤ LT ≤ MT, got LT = {} and MT = {}",
            config.thresholds.lt, config.thresholds.mt
        )));
    }
    let catalogue = NodeCatalogue::new(cluster, attributes)
        .map_err(|e| GraphSimError::Config(e.to_string()))?;
    let members: Vec<NodeId> = match &config.members {
        Some(m) => m.clone(),
        None => cluster.nodes.iter().map(|n| n.id).collect(),
    };
    if !members.contains(&config.launch) {
        return Err(GraphSimError::Config(format!(
            "launch node `{}` is not in the deployment",
            cluster.nodes[config.launch.index()].name
        )));
    }
    let mut task_requires = Vec::with_capacity(workflow.tasks.len());
    for t in &workflow.tasks {
        let unplaceable = || GraphSimError::Unplaceable {
            task: t.name.clone(),
            requires: t.requires.clone(),
        };
        let mask = catalogue
            .requirement_mask(&t.requires)
            .ok_or_else(unplaceable)?;
        if !members.iter().any(|m| catalogue.mask(*m) & mask == mask) {
            return Err(unplaceable());
        }
        task_requires.push(mask);
    }
    if workflow.total_instances() > u32::MAX as u64 {
        return Err(GraphSimError::Config("more than 2^32 instances".into()));
    }
    let setup = GraphSetup {
        nodes: catalogue.graph_nodes(cluster),
        members: members.clone(),
        launch: config.launch,
        workflow,
        task_requires,
        thresholds: config.thresholds,
    };
    let (agents, manager) = graph::build(config.balancer, &setup);
    let costs = instance_costs(workflow, config.seed);
    let total = costs.len() as u64;
    let slowest = cluster
        .nodes
        .iter()
        .map(|n| n.core_speed)
        .fold(f64::INFINITY, f64::min);
    let longest = costs.iter().copied().max().unwrap_or(0) as f64 / slowest;
    let all_work = costs.iter().map(|&c| c as f64).sum::<f64>() / slowest;
    // A run that cannot end within 100 years is refused before it starts: its members' periodic
    // self-checks would be billions of events before the clock (584 years) ran out.
    let deployed = || members.iter().filter_map(|m| cluster.nodes.get(m.index()));
    let fastest = deployed().map(|n| n.core_speed).fold(0.0, f64::max);
    let capacity: f64 = deployed()
        .map(|n| f64::from(n.cores.max(1)) * n.core_speed)
        .sum();
    let at_least = (longest * slowest / fastest).max(all_work * slowest / capacity);
    if at_least > HORIZON as f64 {
        return Err(GraphSimError::Config(format!(
            "the workflow needs at least {:.0} years on the deployment (its longest instance on \
             the fastest core, or all its work spread over every core); a simulation ends within \
             100 years",
            at_least / HORIZON as f64 * 100.0
        )));
    }
    let mut records = Vec::with_capacity(costs.len());
    for (t, task) in workflow.tasks.iter().enumerate() {
        for index in 0..task.instances() as u32 {
            records.push(InstanceRecord {
                task: t as u32,
                index,
                node: NodeId(u32::MAX),
                core: 0,
                ready: Time::MAX,
                placed: Time::MAX,
                placement: u64::MAX,
                start: Time::MAX,
                end: Time::MAX,
                runs: 0,
                cost: 0,
            });
        }
    }
    for (r, c) in records.iter_mut().zip(&costs) {
        r.cost = *c;
    }
    let mut sim = Sim {
        agents,
        manager,
        cores: cluster
            .nodes
            .iter()
            .map(|n| vec![Core::default(); n.cores.max(1) as usize])
            .collect(),
        execution: config.execution,
        shared: vec![Shared::default(); n],
        speed: cluster.nodes.iter().map(|n| n.core_speed).collect(),
        costs,
        latency,
        launch: config.launch,
        in_flight: Vec::new(),
        free_slots: Vec::new(),
        assigned_core: vec![0; records.len()],
        records,
        placements: 0,
        total,
        check_interval: config.check_interval,
        kind_counts: [0; MESSAGE_KINDS.len()],
        sent: vec![0; n],
        received: vec![0; n],
        launch_count: 0,
        balancing_delay: 0,
        message_cost: config.message_cost,
        handler_free: vec![0; n],
        names: cluster.nodes.iter().map(|n| n.name.clone()).collect(),
        last_progress: 0,
        // Far longer than any instance, any queue of MT instances, and many check rounds. Under
        // time-sharing nothing may end until a node has run all it holds (a push of every ready
        // instance onto one node): bounded by the whole workflow's work on the slowest core.
        stall_after: (match config.execution {
            Execution::Queue => longest * (config.thresholds.mt as f64 + 2.0),
            Execution::TimeShare => all_work,
        } as Time)
            .saturating_add(config.check_interval.saturating_mul(1000)),
        makespan: 0,
        error: None,
    };
    // The nodes' agents run before the program does (they are deployed when a node joins the
    // cluster, seed 004 §1.1, and check themselves periodically, §2.5 a): the program starts one
    // check period in, when every member has checked itself once — under pcddb the launch node's
    // underloaded-node table then lists the idle members, as it would on a running cluster.
    // Reported times count from the program's start.
    let origin = if config.balancer == BalancerKind::Static {
        0
    } else {
        config.check_interval
    };
    sim.last_progress = origin;
    let mut q = EventQueue::with_capacity(1024);
    q.schedule(origin, Event::Start);
    if config.balancer != BalancerKind::Static {
        let mut rng = Pcg64::seed_from_u64(config.seed);
        for m in &members {
            // Self-checks start at a random phase so nodes do not report in lockstep.
            let phase = rng.random_range(0..config.check_interval);
            q.schedule(phase, Event::SelfCheck(m.0));
        }
    }
    if total > 0 {
        run(&mut sim, &mut q)?;
    }
    if let Some(e) = sim.error {
        return Err(e);
    }
    let since_start = |t: Time| {
        if t == Time::MAX {
            t
        } else {
            t.saturating_sub(origin)
        }
    };
    for r in &mut sim.records {
        r.ready = since_start(r.ready);
        r.placed = since_start(r.placed);
        r.start = since_start(r.start);
        r.end = since_start(r.end);
    }
    let mut by_kind: BTreeMap<String, u64> = BTreeMap::new();
    for (k, c) in MESSAGE_KINDS.iter().zip(sim.kind_counts) {
        by_kind.insert((*k).to_string(), c);
    }
    // A flag per node: `members.contains` per node was quadratic (10¹⁰ steps on 100,000 nodes).
    let mut member = vec![false; n];
    for m in &members {
        if let Some(f) = member.get_mut(m.index()) {
            *f = true;
        }
    }
    let nodes = cluster
        .nodes
        .iter()
        .map(|node| {
            let i = node.id.index();
            NodeOutcome {
                name: node.name.clone(),
                cores: node.cores,
                core_speed: node.core_speed,
                member: member.get(i).copied().unwrap_or(false),
                peak_instances: sim.agents[i].peak(),
                instances_per_core: sim.cores[i].iter().map(|c| c.done).collect(),
                busy_per_core: sim.cores[i].iter().map(|c| c.busy).collect(),
                sent: sim.sent[i],
                received: sim.received[i],
                latency_from_launch: latency.get(config.launch.index(), i),
                latency_to_launch: latency.get(i, config.launch.index()),
            }
        })
        .collect();
    Ok(GraphResult {
        seed: config.seed,
        balancer: config.balancer.as_str().to_string(),
        execution: config.execution,
        makespan: sim.makespan.saturating_sub(origin),
        instances: sim.records,
        task_names: workflow.tasks.iter().map(|t| t.name.clone()).collect(),
        task_shapes: workflow
            .tasks
            .iter()
            .map(|t| TaskShape {
                instances: t.instances(),
                processes: t.processes,
                depends_on: t.depends_on.iter().map(|d| (d.producer, d.kind)).collect(),
            })
            .collect(),
        nodes,
        messages: MessageCounts {
            total: sim.kind_counts.iter().sum(),
            by_kind,
            launch_node: sim.launch_count,
            balancing_delay: sim.balancing_delay,
        },
        launch: config.launch,
    })
}
