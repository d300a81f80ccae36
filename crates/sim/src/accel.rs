//! Accelerator offload through node binding, and the accelerator service's three-stage pipeline
//! (spec 01, mechanisms 2 and 3).
//!
//! # The model
//! - **Binding.** The cluster's nodes join a core [`Binding`] in node order (ANodes with the summed
//!   speed weights of their devices); the simulator drives that one implementation, so the map is the
//!   one `hetsched binding replay` prints for the same joins.
//! - **Containers.** Every node has [`AccelConfig::slots`] containers (task slots). An application's
//!   tasks are spread over the nodes when it starts (see *Dispatch*); each node's containers take
//!   that node's tasks one at a time, each after a launch delay ([`AccelConfig::task_launch`]).
//! - **Where a task runs.** A task that wants an accelerator (`required`, or `preferred` where one is
//!   reachable) goes to its container's ANode: the node's own accelerator service on an ANode, the
//!   bound ANode's service on an NNode (in mode `container`, each container has its own ANode). Any
//!   other task runs on the node's CPU. A CPU task's time is the time of one task on the whole node
//!   (spec 01 Table 2 measures one MAGMA task per node), so a node runs one CPU task at a time, FIFO.
//! - **The accelerator service (AcCt)** of each ANode has spec 01's three stages, each its own
//!   resource so they overlap: the *remote-read* stage receives one offloaded input at a time over
//!   the network (FIFO) → **process queue** → any free *device* takes the next task and runs it for
//!   `gpu_time / speed` → **write queue** → the *remote-write* stage sends one result at a time back
//!   to the requesting node. The ANode's own tasks enter the process queue directly and need no
//!   write-back. Transfers go over [`Network`], so offloads from several nodes share the ANode's
//!   incoming link and an NNode bound (per container) to several ANodes shares its outgoing one.
//!
//! # The NNode's core stays reserved while its offloaded task waits
//! The container that took the task holds its slot until the result is back. This is YARN's and the
//! paper's semantics: the task *is* a process in a container on the NNode that sends its input and
//! waits asynchronously for the result (spec 01, mechanism 2); the container, and the core the RM
//! accounted to it, are released only when that process exits. Releasing the slot early would let
//! the RM over-commit the node (the waiting process still holds its memory and a connection), and it
//! is what makes the paper's result come out: a node's tasks queue behind its bound accelerator
//! instead of spilling to other work. The waiting container uses no CPU time, so the node's CPU is
//! free for `none` tasks of other containers.
//!
//! # Dispatch
//! When an application starts, its tasks are spread over the nodes that can run them (a `required`
//! task: nodes that reach an accelerator), one by one, each to the node with the least
//! `(assigned + 1) / share` (ties: the earlier node). A node's `share` is how much accelerator the
//! resource manager believes it has:
//! - `plain` and `container`: 1 for every node — the map is transparent to the application master
//!   (spec 01, mechanism 2), so it sees no difference between a node with its own GPU and one that
//!   shares one; this is why the paper's Cluster4-3 is no faster than Cluster4-2;
//! - `weighted`: the weight table is the resource manager's, so it knows what each node gets: the
//!   node's ANode's capacity divided by its users (an ANode counts itself, spec 01 "Known
//!   weakness"). A node sharing a GPU with another gets half the tasks of one that has a GPU alone.
//!
//! Tasks that will run on a CPU count 1 for every node. Applications run one after another, each
//! [`AccelConfig::app_startup`] after the previous one ended (the first after its start-up from 0),
//! as the K-means job's reduce follows its map.

use crate::engine::{self, EventQueue, Flow, Model};
use crate::error::SimError;
use crate::platform::network::{Link, Network};
use hetsched_core::Cluster;
use hetsched_core::model::application::AcceleratorNeed;
use hetsched_core::policy::binding::{Binding, BindingMode, MAX_CONTAINERS, Unit};
use hetsched_core::time::{Time, to_secs};
use serde::Serialize;
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

/// An application of independent, identical tasks that may use an accelerator.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct AccelApp {
    /// Name, for reports.
    pub name: String,
    /// Number of tasks.
    pub tasks: u32,
    /// Whether a task needs an accelerator.
    pub need: AcceleratorNeed,
    /// Time of one task on a node's CPU (core speed 1).
    pub cpu_time: Time,
    /// Time of one task on one accelerator device of speed 1.
    pub gpu_time: Time,
    /// Bytes an offloaded task ships to its ANode.
    pub input_bytes: u64,
    /// Bytes of result shipped back.
    pub output_bytes: u64,
}

/// Settings of an offload simulation.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct AccelConfig {
    /// How NNodes are bound (in `container` mode its `slots` must equal [`AccelConfig::slots`]).
    #[serde(skip)]
    pub binding: BindingMode,
    /// Containers (task slots) per node.
    pub slots: u32,
    /// Start-up of each application (its application master) before its first task.
    pub app_startup: Time,
    /// Launch delay of each task in its container.
    pub task_launch: Time,
}

impl Default for AccelConfig {
    fn default() -> Self {
        Self {
            binding: BindingMode::Plain,
            slots: 8,
            app_startup: 0,
            task_launch: 0,
        }
    }
}

/// One ANode's work in a run.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ANodeStats {
    /// Node name.
    pub name: String,
    /// Tasks its devices ran (its own and offloaded ones).
    pub tasks: u64,
    /// Of those, tasks offloaded from other nodes.
    pub offloaded: u64,
    /// Device-busy time summed over its devices.
    pub device_busy_ns: Time,
    /// Time its remote-read stage spent receiving offloaded inputs (latency included).
    pub receive_busy_ns: Time,
    /// Time its remote-write stage spent sending results back (latency included).
    pub write_busy_ns: Time,
}

/// Where one node's tasks ran.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct NodeStats {
    /// Node name.
    pub name: String,
    /// Its rack.
    pub rack: String,
    /// `true` for an ANode (it has accelerators).
    pub anode: bool,
    /// Tasks it ran on its own CPU.
    pub cpu_tasks: u64,
    /// Tasks it ran on its own accelerators.
    pub local_accelerator_tasks: u64,
    /// Its tasks that ran on another node's accelerator service.
    pub offloaded_tasks: u64,
}

/// What an offload run measures.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct AccelResult {
    /// Binding mode.
    pub binding: String,
    /// When the last task finished.
    pub makespan_ns: Time,
    /// The same in seconds.
    pub makespan_s: f64,
    /// When each application's last task finished.
    pub app_end_ns: Vec<Time>,
    /// Tasks run on an accelerator.
    pub accelerator_tasks: u64,
    /// Tasks run on a CPU.
    pub cpu_tasks: u64,
    /// Tasks sent to another node's accelerator service.
    pub offloaded_tasks: u64,
    /// Sum of the network transfers' durations (input and result), latency included.
    pub transfer_ns: Time,
    /// Sum of device compute time.
    pub compute_ns: Time,
    /// Per ANode, in node order.
    pub anodes: Vec<ANodeStats>,
    /// Per node (ANodes and NNodes), in node order.
    pub nodes: Vec<NodeStats>,
    /// The binding map as `NNODE -> ANODE` lines.
    pub map: Vec<String>,
    /// Events handled.
    pub events: u64,
    /// Every network transfer, in start order (written by `sim accel --export`, not in the
    /// report).
    #[serde(skip)]
    pub transfers: Vec<TransferRecord>,
}

/// One network transfer of a run: an offloaded task's input to its ANode or its result back.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct TransferRecord {
    /// Sending node (index in the cluster).
    pub src: u32,
    /// Receiving node.
    pub dst: u32,
    /// Bytes moved.
    pub bytes: u64,
    /// When it was started (its path latency begins).
    pub start: Time,
    /// When its last byte arrived.
    pub end: Time,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Event {
    AppStart(u32),
    Launched(u32),
    CpuDone(u32),
    DeviceDone { anode: u32, device: u32 },
    Net(u64),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Leg {
    Input,
    Result,
}

#[derive(Clone, Debug)]
struct Task {
    app: u32,
    node: u32,
    container: u32,
    transfer_start: Time,
    /// Its transfer in flight, as an index into [`AccelResult::transfers`].
    transfer: usize,
}

#[derive(Clone, Debug)]
struct Container {
    node: u32,
    /// The ANode whose service runs this container's accelerator work, if any.
    target: Option<u32>,
    task: Option<u32>,
}

/// The accelerator service of one ANode.
#[derive(Clone, Debug, Default)]
struct Service {
    receive_queue: VecDeque<u32>,
    receiving: bool,
    process_queue: VecDeque<u32>,
    device_task: Vec<Option<u32>>,
    device_speed: Vec<f64>,
    write_queue: VecDeque<u32>,
    writing: bool,
    stats_tasks: u64,
    stats_offloaded: u64,
    busy_ns: Time,
    receive_busy_ns: Time,
    write_busy_ns: Time,
}

struct AccelSim<'a> {
    cluster: &'a Cluster,
    apps: &'a [AccelApp],
    config: &'a AccelConfig,
    containers: Vec<Container>,
    node_queue: Vec<VecDeque<u32>>,
    node_containers: Vec<Vec<u32>>,
    cpu_queue: Vec<VecDeque<u32>>,
    cpu_task: Vec<Option<u32>>,
    services: Vec<Option<Service>>,
    share: Vec<f64>,
    reaches: Vec<bool>,
    tasks: Vec<Task>,
    network: Network<(u32, Leg)>,
    net_scheduled: Option<u64>,
    done_transfers: Vec<(u32, Leg)>,
    app_left: Vec<u32>,
    app_end: Vec<Time>,
    result: AccelResult,
}

/// Simulates `apps` (in sequence) on `cluster` with binding and offload.
pub fn simulate_accel(
    cluster: &Cluster,
    apps: &[AccelApp],
    config: &AccelConfig,
) -> Result<AccelResult, SimError> {
    cluster.validate()?;
    if config.slots == 0 {
        return Err(SimError::Config {
            field: "slots",
            problem: "must be at least 1".into(),
        });
    }
    // Every node's containers are allocated (and bound, in mode container) one by one.
    let containers = (cluster.nodes.len() as u64).saturating_mul(u64::from(config.slots));
    if containers > MAX_CONTAINERS {
        return Err(SimError::Config {
            field: "slots",
            problem: format!(
                "{} × {} slots is {containers} containers; at most {MAX_CONTAINERS}",
                hetsched_core::text::count(cluster.nodes.len() as u64, "node"),
                config.slots
            ),
        });
    }
    if let BindingMode::Container { slots } = config.binding
        && slots != config.slots
    {
        return Err(SimError::Config {
            field: "binding",
            problem: format!(
                "container binding of {slots} containers per node, but nodes have {} slots",
                config.slots
            ),
        });
    }
    if let Some(node) = cluster
        .nodes
        .iter()
        .find(|node| !(node.net_bw.is_finite() && node.net_bw > 0.0))
    {
        return Err(SimError::Config {
            field: "network",
            problem: format!(
                "node `{}` has a link of {} bytes/s; it must be positive",
                node.name, node.net_bw
            ),
        });
    }
    let n = cluster.nodes.len();
    let mut binding = Binding::new(config.binding);
    let index: HashMap<&str, u32> = cluster
        .nodes
        .iter()
        .enumerate()
        .map(|(i, node)| (node.name.as_str(), i as u32))
        .collect();
    for node in &cluster.nodes {
        let rack = cluster
            .racks
            .get(node.rack.index())
            .map_or("default", |r| r.name.as_str());
        let joined = if node.accelerators.is_empty() {
            binding.add_nnode(&node.name, rack)
        } else {
            binding.add_anode(
                &node.name,
                rack,
                node.accelerators.iter().map(|a| a.speed).sum(),
            )
        };
        joined.map_err(|e| SimError::Internal(format!("binding the cluster's nodes: {e}")))?;
    }
    let target_of = |node: usize, container: Option<u32>| -> Option<u32> {
        if !cluster.nodes[node].accelerators.is_empty() {
            return Some(node as u32);
        }
        let unit = Unit {
            nnode: Arc::from(cluster.nodes[node].name.as_str()),
            container,
        };
        binding
            .anode_of(&unit)
            .and_then(|a| index.get(a.as_ref()).copied())
    };
    let mut containers = Vec::new();
    let mut node_containers = vec![Vec::new(); n];
    for (node, list) in node_containers.iter_mut().enumerate() {
        for k in 0..config.slots {
            let container = match config.binding {
                BindingMode::Container { .. } => Some(k),
                _ => None,
            };
            list.push(containers.len() as u32);
            containers.push(Container {
                node: node as u32,
                target: target_of(node, container),
                task: None,
            });
        }
    }
    let reaches: Vec<bool> = (0..n)
        .map(|i| {
            node_containers[i]
                .iter()
                .any(|&c| containers[c as usize].target.is_some())
        })
        .collect();
    let share: Vec<f64> = (0..n)
        .map(|i| {
            let Some(t) = containers[node_containers[i][0] as usize].target else {
                return 1.0;
            };
            match config.binding {
                BindingMode::Weighted => {
                    let name = &cluster.nodes[t as usize].name;
                    let cap = binding.capacity(name).unwrap_or(1000) as f64 / 1000.0;
                    let users = binding.users(name).unwrap_or(1).max(1) as f64;
                    cap / users
                }
                _ => 1.0,
            }
        })
        .collect();
    for (i, a) in apps.iter().enumerate() {
        if a.need == AcceleratorNeed::Required && !reaches.iter().any(|&r| r) {
            return Err(SimError::Unrunnable {
                app: a.name.clone(),
                policy: format!("binding {}", config.binding),
                reason: format!("application {i} requires an accelerator and no node reaches one"),
            });
        }
    }
    let services = cluster
        .nodes
        .iter()
        .map(|node| {
            (!node.accelerators.is_empty()).then(|| Service {
                device_task: vec![None; node.accelerators.len()],
                device_speed: node.accelerators.iter().map(|a| a.speed).collect(),
                ..Service::default()
            })
        })
        .collect();
    let network = Network::new(
        cluster
            .nodes
            .iter()
            .map(|node| Link {
                bandwidth: node.net_bw,
                latency: node.net_latency,
            })
            .collect(),
    );
    let map = binding.map_lines();
    let mut sim = AccelSim {
        cluster,
        apps,
        config,
        containers,
        node_queue: vec![VecDeque::new(); n],
        node_containers,
        cpu_queue: vec![VecDeque::new(); n],
        cpu_task: vec![None; n],
        services,
        share,
        reaches,
        tasks: Vec::new(),
        network,
        net_scheduled: None,
        done_transfers: Vec::new(),
        app_left: apps.iter().map(|a| a.tasks).collect(),
        app_end: vec![0; apps.len()],
        result: AccelResult {
            binding: config.binding.as_str().to_string(),
            makespan_ns: 0,
            makespan_s: 0.0,
            app_end_ns: Vec::new(),
            accelerator_tasks: 0,
            cpu_tasks: 0,
            offloaded_tasks: 0,
            transfer_ns: 0,
            compute_ns: 0,
            transfers: Vec::new(),
            anodes: Vec::new(),
            nodes: cluster
                .nodes
                .iter()
                .map(|node| NodeStats {
                    name: node.name.clone(),
                    rack: cluster
                        .racks
                        .get(node.rack.index())
                        .map_or("default", |r| r.name.as_str())
                        .to_string(),
                    anode: !node.accelerators.is_empty(),
                    cpu_tasks: 0,
                    local_accelerator_tasks: 0,
                    offloaded_tasks: 0,
                })
                .collect(),
            map,
            events: 0,
        },
    };
    let mut queue = EventQueue::new();
    if !apps.is_empty() {
        queue.schedule(config.app_startup, Event::AppStart(0));
    }
    engine::run(&mut sim, &mut queue)?;
    let total: u64 = apps.iter().map(|a| u64::from(a.tasks)).sum();
    if sim.result.accelerator_tasks + sim.result.cpu_tasks != total {
        return Err(SimError::Internal(format!(
            "the offload run ended with {} of {total} tasks finished",
            sim.result.accelerator_tasks + sim.result.cpu_tasks
        )));
    }
    let mut result = sim.result;
    result.events = queue.handled();
    result.app_end_ns = sim.app_end;
    result.makespan_ns = result.app_end_ns.iter().copied().max().unwrap_or(0);
    result.makespan_s = to_secs(result.makespan_ns);
    result.anodes = sim
        .services
        .iter()
        .enumerate()
        .filter_map(|(i, s)| {
            s.as_ref().map(|s| ANodeStats {
                name: cluster.nodes[i].name.clone(),
                tasks: s.stats_tasks,
                offloaded: s.stats_offloaded,
                device_busy_ns: s.busy_ns,
                receive_busy_ns: s.receive_busy_ns,
                write_busy_ns: s.write_busy_ns,
            })
        })
        .collect();
    Ok(result)
}

/// `base / speed`, rounded to the nanosecond.
fn scale(base: Time, speed: f64) -> Time {
    if speed == 1.0 {
        base
    } else {
        (base as f64 / speed).round() as Time
    }
}

impl AccelSim<'_> {
    fn wants_accelerator(&self, task: u32, container: u32) -> bool {
        let app = &self.apps[self.tasks[task as usize].app as usize];
        app.need != AcceleratorNeed::None && self.containers[container as usize].target.is_some()
    }

    /// Spreads application `a`'s tasks over the nodes (module doc, "Dispatch").
    fn dispatch(&mut self, a: u32, queue: &mut EventQueue<Event>) {
        let app = &self.apps[a as usize];
        let n = self.cluster.nodes.len();
        let accelerated = app.need != AcceleratorNeed::None;
        let eligible: Vec<usize> = (0..n)
            .filter(|&i| app.need != AcceleratorNeed::Required || self.reaches[i])
            .collect();
        let share = |i: usize| {
            if accelerated && self.reaches[i] {
                self.share[i]
            } else {
                1.0
            }
        };
        let mut assigned = vec![0u32; n];
        let Some(&first) = eligible.first() else {
            // Refused before the run starts (a required application with nothing to run it).
            return;
        };
        for _ in 0..app.tasks {
            let mut best = first;
            for &i in eligible.iter().skip(1) {
                let (x, y) = (
                    f64::from(assigned[i] + 1) / share(i),
                    f64::from(assigned[best] + 1) / share(best),
                );
                if x < y {
                    best = i;
                }
            }
            assigned[best] += 1;
            let id = self.tasks.len() as u32;
            self.tasks.push(Task {
                app: a,
                node: best as u32,
                container: 0,
                transfer_start: 0,
                transfer: usize::MAX,
            });
            self.node_queue[best].push_back(id);
        }
        for node in 0..n {
            for k in 0..self.node_containers[node].len() {
                let c = self.node_containers[node][k];
                if self.containers[c as usize].task.is_none() {
                    self.pull(c, queue);
                }
            }
        }
    }

    /// A free container takes its node's next task.
    fn pull(&mut self, c: u32, queue: &mut EventQueue<Event>) {
        let node = self.containers[c as usize].node as usize;
        let Some(task) = self.node_queue[node].pop_front() else {
            return;
        };
        self.containers[c as usize].task = Some(task);
        self.tasks[task as usize].container = c;
        queue.schedule_in(self.config.task_launch, Event::Launched(c));
    }

    fn launched(&mut self, c: u32, queue: &mut EventQueue<Event>) {
        let Some(task) = self.containers[c as usize].task else {
            return;
        };
        let node = self.containers[c as usize].node;
        match self.containers[c as usize].target {
            Some(anode) if self.wants_accelerator(task, c) => {
                if anode == node {
                    self.service(anode).process_queue.push_back(task);
                    self.start_devices(anode, queue);
                } else {
                    self.service(anode).receive_queue.push_back(task);
                    self.start_receive(anode, queue.now());
                }
            }
            _ => {
                self.cpu_queue[node as usize].push_back(task);
                self.start_cpu(node, queue);
            }
        }
    }

    fn service(&mut self, anode: u32) -> &mut Service {
        self.services[anode as usize]
            .as_mut()
            .expect("containers target only ANodes, which have a service")
    }

    fn start_cpu(&mut self, node: u32, queue: &mut EventQueue<Event>) {
        let n = node as usize;
        if self.cpu_task[n].is_some() {
            return;
        }
        let Some(task) = self.cpu_queue[n].pop_front() else {
            return;
        };
        self.cpu_task[n] = Some(task);
        let app = &self.apps[self.tasks[task as usize].app as usize];
        let d = scale(app.cpu_time, self.cluster.nodes[n].core_speed);
        queue.schedule_in(d, Event::CpuDone(node));
    }

    fn start_receive(&mut self, anode: u32, now: Time) {
        let s = self.service(anode);
        if s.receiving {
            return;
        }
        let Some(task) = s.receive_queue.pop_front() else {
            return;
        };
        s.receiving = true;
        let record = self.result.transfers.len();
        let t = &mut self.tasks[task as usize];
        t.transfer_start = now;
        t.transfer = record;
        let (src, bytes) = (t.node as usize, self.apps[t.app as usize].input_bytes);
        self.record_transfer(src, anode as usize, bytes, now);
        self.network
            .start(now, src, anode as usize, bytes, (task, Leg::Input));
    }

    fn start_write(&mut self, anode: u32, now: Time) {
        let s = self.service(anode);
        if s.writing {
            return;
        }
        let Some(task) = s.write_queue.pop_front() else {
            return;
        };
        s.writing = true;
        let record = self.result.transfers.len();
        let t = &mut self.tasks[task as usize];
        t.transfer_start = now;
        t.transfer = record;
        let (dst, bytes) = (t.node as usize, self.apps[t.app as usize].output_bytes);
        self.record_transfer(anode as usize, dst, bytes, now);
        self.network
            .start(now, anode as usize, dst, bytes, (task, Leg::Result));
    }

    fn record_transfer(&mut self, src: usize, dst: usize, bytes: u64, now: Time) {
        self.result.transfers.push(TransferRecord {
            src: src as u32,
            dst: dst as u32,
            bytes,
            start: now,
            end: Time::MAX,
        });
    }

    fn start_devices(&mut self, anode: u32, queue: &mut EventQueue<Event>) {
        let apps = self.apps;
        let tasks = &self.tasks;
        let s = self.services[anode as usize]
            .as_mut()
            .expect("only ANodes have a service");
        for d in 0..s.device_task.len() {
            if s.device_task[d].is_some() {
                continue;
            }
            let Some(task) = s.process_queue.pop_front() else {
                break;
            };
            s.device_task[d] = Some(task);
            let app = &apps[tasks[task as usize].app as usize];
            let time = scale(app.gpu_time, s.device_speed[d]);
            s.busy_ns += time;
            self.result.compute_ns += time;
            queue.schedule_in(
                time,
                Event::DeviceDone {
                    anode,
                    device: d as u32,
                },
            );
        }
    }

    fn device_done(&mut self, anode: u32, device: u32, queue: &mut EventQueue<Event>) {
        let s = self.service(anode);
        let Some(task) = s.device_task[device as usize].take() else {
            return;
        };
        s.stats_tasks += 1;
        self.result.accelerator_tasks += 1;
        let owner = self.tasks[task as usize].node;
        if owner == anode {
            self.result.nodes[owner as usize].local_accelerator_tasks += 1;
            self.finish(task, queue);
        } else {
            self.result.nodes[owner as usize].offloaded_tasks += 1;
            self.service(anode).stats_offloaded += 1;
            self.result.offloaded_tasks += 1;
            self.service(anode).write_queue.push_back(task);
            self.start_write(anode, queue.now());
        }
        self.start_devices(anode, queue);
    }

    fn net(&mut self, generation: u64, queue: &mut EventQueue<Event>) {
        let now = queue.now();
        let mut done = std::mem::take(&mut self.done_transfers);
        if !self.network.handle(now, generation, &mut done) {
            self.done_transfers = done;
            return;
        }
        self.net_scheduled = None;
        for &(task, leg) in &done {
            let t = &self.tasks[task as usize];
            let took = now - t.transfer_start;
            if let Some(r) = self.result.transfers.get_mut(t.transfer) {
                r.end = now;
            }
            self.result.transfer_ns += took;
            let anode = self.containers[t.container as usize]
                .target
                .expect("an offloaded task's container has an ANode");
            match leg {
                Leg::Input => {
                    let s = self.service(anode);
                    s.receive_busy_ns += took;
                    s.receiving = false;
                    s.process_queue.push_back(task);
                    self.start_devices(anode, queue);
                    self.start_receive(anode, now);
                }
                Leg::Result => {
                    let s = self.service(anode);
                    s.write_busy_ns += took;
                    s.writing = false;
                    self.finish(task, queue);
                    self.start_write(anode, now);
                }
            }
        }
        done.clear();
        self.done_transfers = done;
    }

    fn cpu_done(&mut self, node: u32, queue: &mut EventQueue<Event>) {
        let Some(task) = self.cpu_task[node as usize].take() else {
            return;
        };
        self.result.cpu_tasks += 1;
        self.result.nodes[node as usize].cpu_tasks += 1;
        self.finish(task, queue);
        self.start_cpu(node, queue);
    }

    fn finish(&mut self, task: u32, queue: &mut EventQueue<Event>) {
        let now = queue.now();
        let (app, c) = {
            let t = &self.tasks[task as usize];
            (t.app as usize, t.container)
        };
        self.containers[c as usize].task = None;
        self.app_left[app] -= 1;
        if self.app_left[app] == 0 {
            self.app_end[app] = now;
            if app + 1 < self.apps.len() {
                queue.schedule_in(self.config.app_startup, Event::AppStart(app as u32 + 1));
            }
        }
        self.pull(c, queue);
    }

    /// Keeps exactly one current wake-up of the network in the queue.
    fn schedule_network(&mut self, queue: &mut EventQueue<Event>) {
        let generation = self.network.generation();
        if self.net_scheduled == Some(generation) {
            return;
        }
        if let Some(at) = self.network.next_event() {
            queue.schedule(at, Event::Net(generation));
            self.net_scheduled = Some(generation);
        }
    }
}

impl Model for AccelSim<'_> {
    type Event = Event;
    type Error = SimError;

    fn handle(&mut self, event: Event, queue: &mut EventQueue<Event>) -> Result<Flow, SimError> {
        match event {
            Event::AppStart(a) => {
                if self.apps[a as usize].tasks == 0 {
                    self.app_left[a as usize] = 1;
                    self.finish_empty(a, queue);
                } else {
                    self.dispatch(a, queue);
                }
            }
            Event::Launched(c) => self.launched(c, queue),
            Event::CpuDone(node) => self.cpu_done(node, queue),
            Event::DeviceDone { anode, device } => self.device_done(anode, device, queue),
            Event::Net(generation) => self.net(generation, queue),
        }
        self.schedule_network(queue);
        Ok(Flow::Continue)
    }
}

impl AccelSim<'_> {
    /// An application without tasks ends as it starts.
    fn finish_empty(&mut self, a: u32, queue: &mut EventQueue<Event>) {
        let app = a as usize;
        self.app_left[app] = 0;
        self.app_end[app] = queue.now();
        if app + 1 < self.apps.len() {
            queue.schedule_in(self.config.app_startup, Event::AppStart(a + 1));
        }
    }
}

#[cfg(test)]
mod tests;
pub mod workload;
