//! One-way message latency between every pair of nodes: what the simulator delays messages by and
//! what proximity clustering (spec 05 §2) orders replies by.

use super::cluster::Cluster;
use super::ids::RackId;
use crate::time::Time;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// A symmetric matrix of one-way latencies; the diagonal is 0.
///
/// Stored as the rule every pair not set explicitly follows (one latency for all, or the
/// cluster's per-node figures and racks) plus the pairs set explicitly: a cluster of `n` nodes
/// costs `O(n)`, not `n²` (100,000 nodes were 80 GB dense), and only what a latency file or a
/// measurement names costs more.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LatencyMatrix {
    n: usize,
    base: Base,
    /// The pairs set explicitly, keyed by [`key`] (smaller index first).
    pairs: BTreeMap<u64, Time>,
}

/// What a pair not set explicitly is.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
enum Base {
    /// The same latency for every pair.
    Uniform(Time),
    /// The cluster's own figures ([`LatencyMatrix::from_cluster`]), by node index.
    Cluster {
        /// Each node's `latency`.
        latency: Vec<Time>,
        /// Each node's rack.
        rack: Vec<RackId>,
    },
}

/// A pair's key in either direction. Node indices fit in 32 bits: a cluster file holds at most
/// 100,000 nodes.
fn key(a: usize, b: usize) -> u64 {
    let (lo, hi) = if a < b { (a, b) } else { (b, a) };
    ((lo as u64) << 32) | (hi as u64 & 0xffff_ffff)
}

impl LatencyMatrix {
    /// A matrix of `n` nodes with every pair at `latency`.
    pub fn uniform(n: usize, latency: Time) -> Self {
        Self {
            n,
            base: Base::Uniform(latency),
            pairs: BTreeMap::new(),
        }
    }

    /// The default for a cluster file without a latency file: nodes in one rack are the mean of
    /// their two `latency` values apart, nodes in different racks the sum (one more switch).
    pub fn from_cluster(cluster: &Cluster) -> Self {
        // Indexed by node index (`NodeId`), whatever the order of `cluster.nodes`.
        let n = cluster.nodes.len();
        let mut latency = vec![0; n];
        let mut rack = vec![RackId(0); n];
        for node in &cluster.nodes {
            if let (Some(l), Some(r)) = (
                latency.get_mut(node.id.index()),
                rack.get_mut(node.id.index()),
            ) {
                *l = node.net_latency;
                *r = node.rack;
            }
        }
        Self {
            n,
            base: Base::Cluster { latency, rack },
            pairs: BTreeMap::new(),
        }
    }

    /// Number of nodes.
    pub fn len(&self) -> usize {
        self.n
    }

    /// Whether the matrix has no nodes.
    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    /// One-way latency from node `a` to node `b` (indices).
    pub fn get(&self, a: usize, b: usize) -> Time {
        debug_assert!(a < self.n && b < self.n, "node {a} or {b} of {}", self.n);
        if a == b {
            return 0;
        }
        if !self.pairs.is_empty()
            && let Some(&l) = self.pairs.get(&key(a, b))
        {
            return l;
        }
        match &self.base {
            Base::Uniform(l) => *l,
            Base::Cluster { latency, rack } => {
                let sum = latency[a].saturating_add(latency[b]);
                if rack[a] == rack[b] { sum / 2 } else { sum }
            }
        }
    }

    /// Round-trip time between `a` and `b`: what a broadcast's reply order follows.
    pub fn round_trip(&self, a: usize, b: usize) -> Time {
        self.get(a, b).saturating_add(self.get(b, a))
    }

    /// Sets the latency of the pair in both directions (a node's latency to itself stays 0).
    pub fn set(&mut self, a: usize, b: usize, latency: Time) {
        debug_assert!(a < self.n && b < self.n, "node {a} or {b} of {}", self.n);
        if a != b {
            self.pairs.insert(key(a, b), latency);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::input::cluster::parse_cluster;

    #[test]
    fn unset_pairs_follow_the_rule_and_set_ones_override_it_both_ways() {
        let mut m = LatencyMatrix::uniform(4, 7);
        m.set(3, 1, 2);
        assert_eq!((m.get(1, 3), m.get(3, 1), m.get(0, 1)), (2, 2, 7));
        assert_eq!((m.get(2, 2), m.round_trip(0, 3)), (0, 14));
        m.set(2, 2, 9);
        assert_eq!(m.get(2, 2), 0, "a node's latency to itself stays 0");

        let c = parse_cluster(
            "c.toml",
            "[[rack]]\nname = \"r1\"\n[[rack]]\nname = \"r2\"\n\
             [[node]]\nname = \"a\"\ncount = 2\ncores = 1\nlatency = \"100us\"\nrack = \"r1\"\n\
             [[node]]\nname = \"b\"\ncores = 1\nlatency = \"300us\"\nrack = \"r1\"\n\
             [[node]]\nname = \"c\"\ncores = 1\nlatency = \"50us\"\nrack = \"r2\"\n",
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let m = LatencyMatrix::from_cluster(&c);
        assert_eq!(m.get(0, 1), 100_000, "same rack: the mean");
        assert_eq!(m.get(0, 2), 200_000);
        assert_eq!(m.get(2, 3), 350_000, "another rack: the sum");
        assert_eq!(m.get(3, 3), 0);
    }

    #[test]
    fn a_hundred_thousand_nodes_cost_kilobytes_not_gigabytes() {
        // Dense, this was 10¹⁰ latencies (80 GB): `sim graph` on the largest cluster a file
        // may describe aborted allocating it.
        let m = LatencyMatrix::uniform(100_000, 5);
        assert_eq!((m.get(0, 99_999), m.get(99_999, 99_999)), (5, 0));
        let text = "[[node]]\nname = \"n\"\ncount = 100000\ncores = 1\nlatency = \"1ms\"\n";
        let c = parse_cluster("c.toml", text).unwrap_or_else(|e| panic!("{e}"));
        let m = LatencyMatrix::from_cluster(&c);
        assert_eq!(m.get(12, 99_998), 1_000_000);
    }
}
