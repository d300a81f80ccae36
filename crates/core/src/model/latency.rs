//! One-way message latency between every pair of nodes: what the simulator delays messages by and
//! what proximity clustering (spec 05 §2) orders replies by.

use super::cluster::Cluster;
use crate::time::Time;
use serde::{Deserialize, Serialize};

/// A dense, symmetric matrix of one-way latencies; the diagonal is 0.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LatencyMatrix {
    n: usize,
    one_way: Vec<Time>,
}

impl LatencyMatrix {
    /// A matrix of `n` nodes with every pair at `latency`.
    pub fn uniform(n: usize, latency: Time) -> Self {
        let mut m = Self {
            n,
            one_way: vec![latency; n * n],
        };
        for i in 0..n {
            m.one_way[i * n + i] = 0;
        }
        m
    }

    /// The default for a cluster file without a latency file: nodes in one rack are the mean of
    /// their two `latency` values apart, nodes in different racks the sum (one more switch).
    pub fn from_cluster(cluster: &Cluster) -> Self {
        let n = cluster.nodes.len();
        let mut m = Self::uniform(n, 0);
        for a in &cluster.nodes {
            for b in &cluster.nodes {
                if a.id != b.id {
                    let sum = a.net_latency.saturating_add(b.net_latency);
                    let l = if a.rack == b.rack { sum / 2 } else { sum };
                    m.set(a.id.index(), b.id.index(), l);
                }
            }
        }
        m
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
        self.one_way[a * self.n + b]
    }

    /// Round-trip time between `a` and `b`: what a broadcast's reply order follows.
    pub fn round_trip(&self, a: usize, b: usize) -> Time {
        self.get(a, b).saturating_add(self.get(b, a))
    }

    /// Sets the latency of the pair in both directions (a node's latency to itself stays 0).
    pub fn set(&mut self, a: usize, b: usize, latency: Time) {
        if a != b {
            self.one_way[a * self.n + b] = latency;
            self.one_way[b * self.n + a] = latency;
        }
    }
}
