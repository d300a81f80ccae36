//! The stream simulator's own, deliberately small model of moving a tuple between executors
//! (issue 8). It should merge with the shared simulated network model
//! (`platform/network.rs`, issue 6) once that lands; until then it lives here, self-contained.
//!
//! - **Same process**: executors hand tuples over through shared memory: no latency, no CPU.
//! - **Same node, different processes**: the tuple is serialised and deserialised (Storm's
//!   inter-worker path): [`LinkModel::ipc_latency`] per tuple and [`LinkModel::serde_cpu`] of
//!   CPU at the sending and at the receiving node.
//! - **Different nodes**: serialisation CPU as above, the larger of the two nodes' one-way
//!   latencies (the cluster file's `latency`), and the tuple's bytes over the slower of the two
//!   nodes' links (`network`), stretched by `1 / (1 − ρ)` where `ρ` is that link's utilisation
//!   (an M/M/1 queue at the NIC). A node's link is one full-duplex port: its utilisation is the
//!   larger of its outgoing and incoming bytes per second over its bandwidth.

use hetsched_core::Node;
use serde::Serialize;

/// Costs of moving one tuple.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct LinkModel {
    /// Size of one tuple on the wire, in bytes.
    pub tuple_bytes: f64,
    /// Latency of one tuple between two processes on one node, in seconds.
    pub ipc_latency: f64,
    /// CPU one tuple costs to serialise (sender) or deserialise (receiver) when it leaves its
    /// process, in core-seconds.
    pub serde_cpu: f64,
    /// Link utilisation above which queueing is capped (the throttle handles ρ ≥ 1).
    pub max_link_utilisation: f64,
}

impl Default for LinkModel {
    fn default() -> Self {
        Self {
            tuple_bytes: 200.0,
            ipc_latency: 50e-6,
            serde_cpu: 5e-6,
            max_link_utilisation: 0.99,
        }
    }
}

impl LinkModel {
    /// Seconds for one tuple from a process on `a` to another process on `b` (`same_process`
    /// only when `a` and `b` are the same node and process), with the links at utilisation
    /// `rho_a` and `rho_b`.
    pub fn transfer(
        &self,
        a: &Node,
        b: &Node,
        same_node: bool,
        same_process: bool,
        rho_a: f64,
        rho_b: f64,
    ) -> f64 {
        if same_process {
            return 0.0;
        }
        if same_node {
            return self.ipc_latency;
        }
        let latency = a.net_latency.max(b.net_latency) as f64 * 1e-9;
        let bw = a.net_bw.min(b.net_bw).max(1.0);
        let rho = rho_a.max(rho_b).min(self.max_link_utilisation);
        latency + self.tuple_bytes / bw / (1.0 - rho)
    }
}
