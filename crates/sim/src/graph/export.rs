//! The `--export FILE.json` document of `hetsched sim graph`: every instance, every node's peak,
//! the message counters and the makespan, with times in seconds.
//!
//! ```json
//! {"balancer", "execution",
//!  "instances":[{"task","index","node","core","ready","placed","placement","start","end","cost"}],
//!  "nodes":[{"name","cores","peak_instances","core_speed","latency_from_launch","latency_to_launch"}],
//!  "messages":{"total","by_kind":{…},"launch_node":…},
//!  "makespan",
//!  "launch", "seed",
//!  "tasks":[{"name","instances","processes","depends_on":[{"task","kind"}]}]}
//! ```
//!
//! `execution` is `queue` or `time-share` ([`super::Execution`]; under `time-share` an instance
//! starts when placed and `core` is the one its agent spread it to). `cost` is the instance's
//! drawn cost on a 1.0-speed core; `kind` is `one-to-one` (consumer instance k waits for producer
//! instance k), `instance-wise` (for every process of the producer's same argument value) or `all`
//! ([`DependencyKind`]).
//! `placed` is when its node took it and queued it on `core` (static, centralised: when the launch
//! node's message arrived; pcddb: when the node accepted it from a request), `placement` its rank
//! among every placement of the run. With the nodes' speeds and latencies and the tasks' graph
//! the document is a complete replay input: `scripts/simgrid-graph.sh` re-runs the runs of every
//! balancer in SimGrid from it (pcddb's from its placements).

use super::GraphResult;
use hetsched_core::model::workflow::DependencyKind;
use hetsched_core::time::{NANOS_PER_SEC, Time};
use serde::Serialize;
use std::collections::BTreeMap;

fn secs(t: Time) -> f64 {
    t as f64 / NANOS_PER_SEC as f64
}

#[derive(Serialize)]
struct Instance<'a> {
    task: &'a str,
    index: u32,
    node: &'a str,
    core: u32,
    ready: f64,
    placed: f64,
    placement: u64,
    start: f64,
    end: f64,
    cost: f64,
}

#[derive(Serialize)]
struct Node<'a> {
    name: &'a str,
    cores: u32,
    peak_instances: u32,
    core_speed: f64,
    latency_from_launch: f64,
    latency_to_launch: f64,
}

#[derive(Serialize)]
struct Producer<'a> {
    task: &'a str,
    kind: &'static str,
}

#[derive(Serialize)]
struct Task<'a> {
    name: &'a str,
    instances: u64,
    processes: u32,
    depends_on: Vec<Producer<'a>>,
}

#[derive(Serialize)]
struct Messages<'a> {
    total: u64,
    by_kind: &'a BTreeMap<String, u64>,
    launch_node: u64,
}

#[derive(Serialize)]
struct Export<'a> {
    balancer: &'a str,
    execution: &'static str,
    instances: Vec<Instance<'a>>,
    nodes: Vec<Node<'a>>,
    messages: Messages<'a>,
    makespan: f64,
    launch: &'a str,
    /// The seed of the run: with the cluster, workflow and flags, it makes the run again.
    seed: u64,
    tasks: Vec<Task<'a>>,
}

impl GraphResult {
    /// The export document as JSON text.
    pub fn export_json(&self) -> Result<String, serde_json::Error> {
        let doc = Export {
            balancer: &self.balancer,
            execution: self.execution.as_str(),
            instances: self
                .instances
                .iter()
                .map(|r| Instance {
                    task: &self.task_names[r.task as usize],
                    index: r.index,
                    node: self
                        .nodes
                        .get(r.node.index())
                        .map_or("", |n| n.name.as_str()),
                    core: r.core,
                    ready: secs(r.ready),
                    placed: secs(r.placed),
                    placement: r.placement,
                    start: secs(r.start),
                    end: secs(r.end),
                    cost: secs(r.cost),
                })
                .collect(),
            nodes: self
                .nodes
                .iter()
                .map(|n| Node {
                    name: &n.name,
                    cores: n.cores,
                    peak_instances: n.peak_instances,
                    core_speed: n.core_speed,
                    latency_from_launch: secs(n.latency_from_launch),
                    latency_to_launch: secs(n.latency_to_launch),
                })
                .collect(),
            messages: Messages {
                total: self.messages.total,
                by_kind: &self.messages.by_kind,
                launch_node: self.messages.launch_node,
            },
            makespan: self.makespan_s(),
            seed: self.seed,
            launch: self
                .nodes
                .get(self.launch.index())
                .map_or("", |n| n.name.as_str()),
            tasks: self
                .task_names
                .iter()
                .zip(&self.task_shapes)
                .map(|(name, shape)| Task {
                    name,
                    instances: shape.instances,
                    processes: shape.processes,
                    depends_on: shape
                        .depends_on
                        .iter()
                        .map(|&(p, kind)| Producer {
                            task: &self.task_names[p],
                            kind: match kind {
                                DependencyKind::InstanceWise => "instance-wise",
                                DependencyKind::All => "all",
                                DependencyKind::OneToOne => "one-to-one",
                            },
                        })
                        .collect(),
                })
                .collect(),
        };
        serde_json::to_string(&doc)
    }
}
