//! The `--export FILE.json` document of `hetsched sim graph`: every instance, every node's peak,
//! the message counters and the makespan, with times in seconds.
//!
//! ```json
//! {"instances":[{"task","index","node","core","ready","start","end"}],
//!  "nodes":[{"name","cores","peak_instances"}],
//!  "messages":{"total","by_kind":{…},"launch_node":…},
//!  "makespan"}
//! ```

use super::GraphResult;
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
    start: f64,
    end: f64,
}

#[derive(Serialize)]
struct Node<'a> {
    name: &'a str,
    cores: u32,
    peak_instances: u32,
}

#[derive(Serialize)]
struct Messages<'a> {
    total: u64,
    by_kind: &'a BTreeMap<String, u64>,
    launch_node: u64,
}

#[derive(Serialize)]
struct Export<'a> {
    instances: Vec<Instance<'a>>,
    nodes: Vec<Node<'a>>,
    messages: Messages<'a>,
    makespan: f64,
}

impl GraphResult {
    /// The export document as JSON text.
    pub fn export_json(&self) -> Result<String, serde_json::Error> {
        let doc = Export {
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
                    start: secs(r.start),
                    end: secs(r.end),
                })
                .collect(),
            nodes: self
                .nodes
                .iter()
                .map(|n| Node {
                    name: &n.name,
                    cores: n.cores,
                    peak_instances: n.peak_instances,
                })
                .collect(),
            messages: Messages {
                total: self.messages.total,
                by_kind: &self.messages.by_kind,
                launch_node: self.messages.launch_node,
            },
            makespan: self.makespan_s(),
        };
        serde_json::to_string(&doc)
    }
}
