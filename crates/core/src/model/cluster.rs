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

/// What every node implicitly has, followed by its name: `requires = ["node:gpu07"]` runs only
/// there (Slurm's `--nodelist` of one node), `"!node:gpu07"` anywhere else (`--exclude`).
pub const NODE_NAME_PREFIX: &str = "node:";

/// Marks a requirement a node must lack: `"!bigmem"`, `"!node:gpu07"`.
pub const NOT_PREFIX: char = '!';

/// Longest node name a requirement may name (`node:NAME`), in bytes (a host name's longest).
pub const MAX_NODE_NAME_BYTES: usize = 253;

/// Longest rack name, in bytes (an agent's `--rack` has the same bound).
pub const MAX_RACK_NAME_BYTES: usize = 128;

/// Why `name` cannot name a rack, if it cannot: it must be 1 to [`MAX_RACK_NAME_BYTES`] bytes
/// without control characters (an agent's `--rack` rule) or invisible formatting characters
/// ([`crate::text::hidden`]: a bidi override would make it read otherwise), since every listing
/// of nodes shows it as written.
pub fn rack_name_problem(name: &str) -> Option<String> {
    if name.is_empty() {
        return Some("a rack name must not be empty".into());
    }
    if name.len() > MAX_RACK_NAME_BYTES {
        return Some(format!(
            "rack name is {} bytes long; at most {MAX_RACK_NAME_BYTES}",
            name.len()
        ));
    }
    if name.chars().any(char::is_control) {
        return Some(format!(
            "rack name `{}` holds a control character",
            name.escape_debug()
        ));
    }
    crate::text::hidden_problem(name)
        .map(|problem| format!("rack name `{}`: {problem}", name.escape_debug()))
}

/// Checks one attribute name of a node: 1 to [`MAX_ATTRIBUTE_BYTES`] bytes, no whitespace or
/// control characters, not beginning with `!` or `node:` (those read otherwise in a
/// requirement: [`check_requirement`]).
pub fn check_attribute(name: &str) -> Result<(), String> {
    check_name(name)?;
    if name.starts_with(NOT_PREFIX) || name.starts_with(NODE_NAME_PREFIX) {
        return Err(format!(
            "attribute `{name}` begins with `{}`, which a requirement reads otherwise (`!` a \
             node must lack it, `{NODE_NAME_PREFIX}` a node's name)",
            if name.starts_with(NOT_PREFIX) {
                "!"
            } else {
                NODE_NAME_PREFIX
            }
        ));
    }
    Ok(())
}

/// Checks one requirement of a task: an attribute (`bigmem`), a node's name (`node:gpu07`), or
/// either after `!` for a node that must lack it (`!bigmem`, `!node:gpu07`).
pub fn check_requirement(req: &str) -> Result<(), String> {
    let positive = req.strip_prefix(NOT_PREFIX).unwrap_or(req);
    if let Some(name) = positive.strip_prefix(NODE_NAME_PREFIX) {
        if name.is_empty() || name.len() > MAX_NODE_NAME_BYTES {
            return Err(format!(
                "requirement `{}` must name a node of 1 to {MAX_NODE_NAME_BYTES} bytes after \
                 `{NODE_NAME_PREFIX}`",
                req.chars().take(32).collect::<String>().escape_debug()
            ));
        }
        if name.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(format!(
                "requirement `{}` has whitespace or a control character",
                req.escape_debug()
            ));
        }
        if let Some(problem) = crate::text::hidden_problem(name) {
            return Err(format!("requirement `{}`: {problem}", req.escape_debug()));
        }
        return Ok(());
    }
    if positive.is_empty() && !req.is_empty() {
        return Err("a requirement `!` must name what a node must lack: `!bigmem`".into());
    }
    check_attribute(positive)
}

/// Whether a node named `name` (`None`: not known yet, as an allocation's agents) with
/// `attributes` (all of them, `gpu` included where it has accelerators; sorted or not) meets
/// every requirement of `required`: it has each attribute named (`node:NAME` when that is its
/// name) and lacks each one named after `!`. A node not known by name meets no `node:NAME` and
/// every `!node:NAME`.
pub fn meets(name: Option<&str>, attributes: &[String], required: &[String]) -> bool {
    meets_by(required, |a| match a.strip_prefix(NODE_NAME_PREFIX) {
        Some(n) => name == Some(n),
        None => attributes.iter().any(|x| x == a),
    })
}

/// Whether a node with the attributes `has` says it has meets every requirement of
/// `required`: the one reading of `!` ([`meets`], [`Node::has_attributes`]).
fn meets_by(required: &[String], has: impl Fn(&str) -> bool) -> bool {
    required.iter().all(|r| match r.strip_prefix(NOT_PREFIX) {
        Some(lacked) => !has(lacked),
        None => has(r),
    })
}

/// One attribute name: 1 to [`MAX_ATTRIBUTE_BYTES`] bytes, no whitespace, control or invisible
/// formatting characters ([`crate::text::hidden`]).
fn check_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("an attribute must not be empty".into());
    }
    if name.len() > MAX_ATTRIBUTE_BYTES {
        return Err(format!(
            "attribute `{}…` is longer than {MAX_ATTRIBUTE_BYTES} bytes",
            name.chars().take(16).collect::<String>().escape_debug()
        ));
    }
    if name.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(format!(
            "attribute `{}` has whitespace or a control character",
            name.escape_debug()
        ));
    }
    if let Some(problem) = crate::text::hidden_problem(name) {
        return Err(format!("attribute `{}`: {problem}", name.escape_debug()));
    }
    Ok(())
}

/// A node's attribute names checked as a whole: at most [`MAX_ATTRIBUTES`], each as
/// [`check_attribute`]; sorted, without repeats. An error says which name is wrong (its
/// position), or none when there are too many.
pub fn attribute_set<'a>(
    names: impl ExactSizeIterator<Item = &'a str>,
) -> Result<Vec<String>, (Option<usize>, String)> {
    checked_set(names, "attributes", check_attribute)
}

/// A task's requirements checked as a whole: at most [`MAX_ATTRIBUTES`], each as
/// [`check_requirement`]; sorted, without repeats. Errors as [`attribute_set`]'s.
pub fn requirement_set<'a>(
    names: impl ExactSizeIterator<Item = &'a str>,
) -> Result<Vec<String>, (Option<usize>, String)> {
    checked_set(names, "requirements", check_requirement)
}

fn checked_set<'a>(
    names: impl ExactSizeIterator<Item = &'a str>,
    what: &str,
    check: fn(&str) -> Result<(), String>,
) -> Result<Vec<String>, (Option<usize>, String)> {
    if names.len() > MAX_ATTRIBUTES {
        return Err((None, format!("at most {MAX_ATTRIBUTES} {what}")));
    }
    let mut out = Vec::with_capacity(names.len());
    for (j, name) in names.enumerate() {
        check(name).map_err(|e| (Some(j), e))?;
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

    /// Whether the node meets every requirement of `required` (sorted or not): it has each
    /// attribute named (`gpu` when it has accelerators, `node:NAME` when that is its name) and
    /// lacks each one named after `!`.
    pub fn has_attributes(&self, required: &[String]) -> bool {
        meets_by(required, |a| self.has_attribute(a))
    }

    /// Whether the node has attribute `a`: its own, `gpu` with accelerators, `node:` + its name.
    pub fn has_attribute(&self, a: &str) -> bool {
        (a == GPU_ATTRIBUTE && !self.accelerators.is_empty())
            || a.strip_prefix(NODE_NAME_PREFIX) == Some(self.name.as_str())
            || self
                .attributes
                .binary_search_by(|x| x.as_str().cmp(a))
                .is_ok()
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
