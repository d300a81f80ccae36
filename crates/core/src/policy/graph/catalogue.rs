//! The node catalogue (spec 05 §1): every node is an object with performance attributes; nodes
//! with identical attributes share a **node class**. A joining node is matched to an existing
//! class or founds a new one. Attributes a task may `require` (e.g. `gpu`, `fpga`) are kept as a
//! bit mask over the catalogue's vocabulary, so matching a request is one AND.

use super::{AttrMask, GraphNode};
use crate::model::{Cluster, Node, NodeId};
use std::collections::BTreeMap;

/// What makes two nodes the same class: cores, clock, memory, network, accelerators, attributes.
#[derive(Clone, Debug, PartialEq)]
pub struct NodeClass {
    /// Dense id in order of first appearance.
    pub id: usize,
    /// Cores.
    pub cores: u32,
    /// Relative core speed.
    pub core_speed: f64,
    /// Memory in bytes.
    pub memory_bytes: u64,
    /// Network bandwidth in bytes/s.
    pub net_bw: f64,
    /// Accelerator kinds, one entry per device.
    pub accelerators: Vec<String>,
    /// Attribute names, sorted.
    pub attributes: Vec<String>,
    /// Member nodes.
    pub nodes: Vec<NodeId>,
}

impl NodeClass {
    fn matches(&self, n: &Node, attributes: &[String]) -> bool {
        self.cores == n.cores
            && self.core_speed == n.core_speed
            && self.memory_bytes == n.memory_bytes
            && self.net_bw == n.net_bw
            && self.accelerators.len() == n.accelerators.len()
            && self
                .accelerators
                .iter()
                .zip(&n.accelerators)
                .all(|(k, a)| *k == a.kind)
            && self.attributes == attributes
    }

    /// A short label: `8 cores × 2.10, 64 GiB`.
    pub fn label(&self) -> String {
        format!(
            "{} cores × {:.2}, {} GiB{}",
            self.cores,
            self.core_speed,
            self.memory_bytes >> 30,
            if self.attributes.is_empty() {
                String::new()
            } else {
                format!(", {}", self.attributes.join("+"))
            }
        )
    }
}

/// The catalogue: classes, each node's class, and the attribute vocabulary.
#[derive(Clone, Debug, Default)]
pub struct NodeCatalogue {
    /// Classes in order of first appearance.
    pub classes: Vec<NodeClass>,
    /// Class of each node (indexed by `NodeId`).
    pub class_of: Vec<usize>,
    /// Attribute vocabulary: name → bit.
    vocabulary: BTreeMap<String, u32>,
    masks: Vec<AttrMask>,
}

/// More distinct attributes than a mask holds.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("more than 64 distinct node attributes")]
pub struct TooManyAttributes;

impl NodeCatalogue {
    /// Catalogues `cluster`'s nodes; `attributes[i]` are node i's attributes (missing = none).
    pub fn new(cluster: &Cluster, attributes: &[Vec<String>]) -> Result<Self, TooManyAttributes> {
        let mut cat = NodeCatalogue::default();
        for n in &cluster.nodes {
            let mut attrs = attributes.get(n.id.index()).cloned().unwrap_or_default();
            attrs.sort();
            attrs.dedup();
            cat.join(n, attrs)?;
        }
        Ok(cat)
    }

    /// Adds a node: matched to an existing class or founding a new one (spec 05 §1).
    pub fn join(&mut self, n: &Node, attributes: Vec<String>) -> Result<usize, TooManyAttributes> {
        let mut mask = 0;
        for a in &attributes {
            let next = self.vocabulary.len() as u32;
            let bit = *self.vocabulary.entry(a.clone()).or_insert(next);
            if bit >= 64 {
                return Err(TooManyAttributes);
            }
            mask |= 1u64 << bit;
        }
        let class = match self.classes.iter().position(|c| c.matches(n, &attributes)) {
            Some(c) => c,
            None => {
                self.classes.push(NodeClass {
                    id: self.classes.len(),
                    cores: n.cores,
                    core_speed: n.core_speed,
                    memory_bytes: n.memory_bytes,
                    net_bw: n.net_bw,
                    accelerators: n.accelerators.iter().map(|a| a.kind.clone()).collect(),
                    attributes,
                    nodes: Vec::new(),
                });
                self.classes.len() - 1
            }
        };
        self.classes[class].nodes.push(n.id);
        let i = n.id.index();
        if self.class_of.len() <= i {
            self.class_of.resize(i + 1, 0);
            self.masks.resize(i + 1, 0);
        }
        self.class_of[i] = class;
        self.masks[i] = mask;
        Ok(class)
    }

    /// Node `id`'s attribute mask.
    pub fn mask(&self, id: NodeId) -> AttrMask {
        self.masks.get(id.index()).copied().unwrap_or(0)
    }

    /// The mask of a list of required attributes; `None` if one is offered by no node.
    pub fn requirement_mask(&self, requires: &[String]) -> Option<AttrMask> {
        requires.iter().try_fold(0, |m, r| {
            self.vocabulary.get(r).map(|&bit| m | (1u64 << bit))
        })
    }

    /// How many nodes offer each attribute (for [`crate::input::workflow::ParsedWorkflow::check_requirements`]).
    pub fn offered(&self) -> BTreeMap<String, usize> {
        self.vocabulary
            .iter()
            .map(|(name, &bit)| {
                let count = self
                    .masks
                    .iter()
                    .filter(|m| *m & (1u64 << bit) != 0)
                    .count();
                (name.clone(), count)
            })
            .collect()
    }

    /// The balancer's view of every node of `cluster`.
    pub fn graph_nodes(&self, cluster: &Cluster) -> Vec<GraphNode> {
        cluster
            .nodes
            .iter()
            .map(|n| GraphNode {
                id: n.id,
                cores: n.cores,
                attributes: self.mask(n.id),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::input::cluster::{parse_cluster, parse_node_attributes};

    #[test]
    fn identical_nodes_share_a_class_and_attributes_become_bits() {
        let text = "[[node]]\nname = \"dual\"\ncount = 3\ncores = 2\ncore_speed = 1.2\n\
                    [[node]]\nname = \"fpga\"\ncores = 2\ncore_speed = 1.2\nattributes = [\"fpga\"]\n\
                    [[node]]\nname = \"gpu\"\ncores = 8\n[[node.accelerator]]\nkind = \"k20\"\n";
        let cluster = parse_cluster("c.toml", text).unwrap_or_else(|e| panic!("{e}"));
        let attrs = parse_node_attributes("c.toml", text).unwrap_or_else(|e| panic!("{e}"));
        let cat = NodeCatalogue::new(&cluster, &attrs).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(cat.classes.len(), 3, "dual ×3, the FPGA node, the GPU node");
        assert_eq!(cat.classes[0].nodes.len(), 3);
        assert_eq!(cat.class_of, vec![0, 0, 0, 1, 2]);
        let fpga = cat.requirement_mask(&["fpga".into()]).unwrap_or(0);
        assert_ne!(fpga, 0);
        assert_eq!(cat.mask(NodeId(3)) & fpga, fpga);
        assert_eq!(cat.mask(NodeId(0)) & fpga, 0);
        assert_eq!(cat.requirement_mask(&["tpu".into()]), None);
        assert_eq!(cat.offered().get("gpu"), Some(&1));
    }
}
