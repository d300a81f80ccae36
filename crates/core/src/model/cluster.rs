//! What a cluster is: racks of nodes that differ in cores, clock, memory, disk, network and
//! accelerators.

use super::ids::{NodeId, RackId};
use super::resources::Resources;
use crate::time::Time;
use serde::{Deserialize, Serialize};
use thiserror::Error;

/// One accelerator device on a node.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Accelerator {
    /// Kind, e.g. `"tesla-c2050"`; tasks may ask for a kind.
    pub kind: String,
    /// Device memory in bytes.
    pub memory_bytes: u64,
    /// Relative speed: a GPU task's compute time is its base compute time divided by this.
    pub speed: f64,
}

/// A rack: nodes behind one switch.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Rack {
    /// Dense identifier.
    pub id: RackId,
    /// Name as the user wrote it.
    pub name: String,
}

/// The attribute every node with accelerators has.
pub const GPU_ATTRIBUTE: &str = "gpu";

/// Longest attribute name, in bytes.
pub const MAX_ATTRIBUTE_BYTES: usize = 64;

/// Most attributes a node may have, or a task may require.
pub const MAX_ATTRIBUTES: usize = 64;

/// Checks one attribute name (of a node, or required by a task): 1 to [`MAX_ATTRIBUTE_BYTES`]
/// bytes, no whitespace or control characters.
pub fn check_attribute(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("an attribute must not be empty".into());
    }
    if name.len() > MAX_ATTRIBUTE_BYTES {
        return Err(format!(
            "attribute `{}…` is longer than {MAX_ATTRIBUTE_BYTES} bytes",
            name.chars().take(16).collect::<String>()
        ));
    }
    if name.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(format!(
            "attribute `{}` has whitespace or a control character",
            name.escape_debug()
        ));
    }
    Ok(())
}

/// A list of attribute names (a node's, or those a task requires) checked as a whole: at most
/// [`MAX_ATTRIBUTES`], each as [`check_attribute`]; sorted, without repeats. An error says which
/// name is wrong (its position), or none when there are too many.
pub fn attribute_set<'a>(
    names: impl ExactSizeIterator<Item = &'a str>,
) -> Result<Vec<String>, (Option<usize>, String)> {
    if names.len() > MAX_ATTRIBUTES {
        return Err((None, format!("at most {MAX_ATTRIBUTES} attributes")));
    }
    let mut out = Vec::with_capacity(names.len());
    for (j, name) in names.enumerate() {
        check_attribute(name).map_err(|e| (Some(j), e))?;
        out.push(name.to_string());
    }
    out.sort();
    out.dedup();
    Ok(out)
}

/// One machine that runs tasks.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Node {
    /// Dense identifier.
    pub id: NodeId,
    /// Name as the user wrote it (host name in the runtime).
    pub name: String,
    /// The rack the node sits in.
    pub rack: RackId,
    /// CPU cores available to tasks.
    pub cores: u32,
    /// Relative core speed: a CPU task's compute time is its base compute time divided by this.
    pub core_speed: f64,
    /// Main memory in bytes.
    pub memory_bytes: u64,
    /// Disk read bandwidth in bytes per second, shared by the tasks reading at one moment.
    pub disk_read_bw: f64,
    /// Network bandwidth in bytes per second.
    pub net_bw: f64,
    /// One-way network latency.
    pub net_latency: Time,
    /// Accelerator devices, indexed by device number.
    pub accelerators: Vec<Accelerator>,
    /// Attributes tasks may `require` (`"bigmem"`, `"avx512"`): the cluster file's or the agent
    /// configuration's `attributes`, sorted and without repeats. `gpu` is implied by
    /// accelerators ([`Node::has_attributes`]).
    #[serde(default)]
    pub attributes: Vec<String>,
}

impl Node {
    /// Its attributes with `gpu` added when it has accelerators, sorted.
    pub fn all_attributes(&self) -> Vec<String> {
        let mut all = self.attributes.clone();
        if !self.accelerators.is_empty() {
            all.push(GPU_ATTRIBUTE.to_string());
            all.sort();
            all.dedup();
        }
        all
    }

    /// Whether the node has every attribute of `required` (sorted or not); `gpu` when it has
    /// accelerators.
    pub fn has_attributes(&self, required: &[String]) -> bool {
        required.iter().all(|r| {
            (r == GPU_ATTRIBUTE && !self.accelerators.is_empty())
                || self.attributes.binary_search(r).is_ok()
        })
    }

    /// The resources this node offers to tasks.
    pub fn capacity(&self) -> Resources {
        Resources::new(
            self.cores,
            self.memory_bytes,
            self.accelerators.len() as u32,
        )
    }

    /// Speed weight of accelerator `device` (1.0 when the index is out of range).
    pub fn accelerator_speed(&self, device: u32) -> f64 {
        self.accelerators
            .get(device as usize)
            .map_or(1.0, |a| a.speed)
    }
}

/// A whole cluster: racks and nodes, with dense identifiers.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Cluster {
    /// Racks, `racks[i].id == RackId(i)`.
    pub racks: Vec<Rack>,
    /// Nodes, `nodes[i].id == NodeId(i)`.
    pub nodes: Vec<Node>,
}

/// A cluster description that cannot be used.
#[derive(Debug, Error, PartialEq)]
pub enum ClusterError {
    /// Identifiers are not dense and in order.
    #[error("{what} {index} has id {found}; ids must be dense and in order")]
    IdOutOfOrder {
        /// "node" or "rack".
        what: &'static str,
        /// Position in the list.
        index: usize,
        /// The id found there.
        found: u32,
    },
    /// A node names a rack that does not exist.
    #[error("node `{node}` is in rack {rack}, which does not exist")]
    UnknownRack {
        /// Node name.
        node: String,
        /// The missing rack.
        rack: RackId,
    },
    /// A node has a value that is not allowed.
    #[error("node `{node}`: {field} {problem}")]
    InvalidNode {
        /// Node name.
        node: String,
        /// Field name.
        field: &'static str,
        /// What is wrong.
        problem: &'static str,
    },
    /// The cluster has no nodes.
    #[error("the cluster has no nodes")]
    Empty,
}

impl Cluster {
    /// Checks the invariants every driver relies on: dense ids, known racks, positive speeds.
    pub fn validate(&self) -> Result<(), ClusterError> {
        if self.nodes.is_empty() {
            return Err(ClusterError::Empty);
        }
        for (i, r) in self.racks.iter().enumerate() {
            if r.id.index() != i {
                return Err(ClusterError::IdOutOfOrder {
                    what: "rack",
                    index: i,
                    found: r.id.0,
                });
            }
        }
        for (i, n) in self.nodes.iter().enumerate() {
            if n.id.index() != i {
                return Err(ClusterError::IdOutOfOrder {
                    what: "node",
                    index: i,
                    found: n.id.0,
                });
            }
            if n.rack.index() >= self.racks.len() {
                return Err(ClusterError::UnknownRack {
                    node: n.name.clone(),
                    rack: n.rack,
                });
            }
            let bad = |field, problem| ClusterError::InvalidNode {
                node: n.name.clone(),
                field,
                problem,
            };
            if !(n.core_speed.is_finite() && n.core_speed > 0.0) {
                return Err(bad("core_speed", "must be a positive number"));
            }
            if !(n.disk_read_bw.is_finite() && n.disk_read_bw > 0.0) {
                return Err(bad("disk_read_bw", "must be a positive number"));
            }
            if n.accelerators
                .iter()
                .any(|a| !(a.speed.is_finite() && a.speed > 0.0))
            {
                return Err(bad("accelerator speed", "must be a positive number"));
            }
        }
        Ok(())
    }

    /// Sum of every node's capacity.
    pub fn totals(&self) -> Resources {
        self.nodes
            .iter()
            .fold(Resources::default(), |acc, n| acc + n.capacity())
    }

    /// A cluster of `count` identical nodes in one rack, for tests and benchmarks.
    pub fn uniform(count: usize, template: &Node) -> Cluster {
        let racks = vec![Rack {
            id: RackId(0),
            name: "rack0".into(),
        }];
        let nodes = (0..count)
            .map(|i| Node {
                id: NodeId(i as u32),
                name: format!("node{i}"),
                rack: RackId(0),
                ..template.clone()
            })
            .collect();
        Cluster { racks, nodes }
    }
}
