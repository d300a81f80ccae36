//! Helpers shared by the tests.

use hetsched_core::policy::batch::{BatchPolicy, BatchPolicyKind};
use hetsched_core::{Application, Cluster, Node, NodeId, RackId};
use hetsched_sim::{SimConfig, SimError, SimResult, simulate};

/// A one-rack cluster of `nodes` (ids are set from their position).
pub fn cluster(nodes: Vec<Node>) -> Cluster {
    Cluster {
        racks: vec![hetsched_core::Rack {
            id: RackId(0),
            name: "rack0".into(),
        }],
        nodes: nodes
            .into_iter()
            .enumerate()
            .map(|(i, mut n)| {
                n.id = NodeId(i as u32);
                n
            })
            .collect(),
    }
}

/// A configuration whose heartbeats fall on whole seconds, so times can be computed by hand.
pub fn aligned() -> SimConfig {
    SimConfig {
        randomize_heartbeat_phase: false,
        ..SimConfig::default()
    }
}

/// Runs `apps` under `policy`.
pub fn run_with(
    cluster: &Cluster,
    apps: &[Application],
    policy: &mut dyn BatchPolicy,
    config: &SimConfig,
) -> Result<SimResult, SimError> {
    simulate(cluster, apps, policy, config, &mut |_| {})
}

/// Runs `apps` under the policy `kind`.
pub fn run(
    cluster: &Cluster,
    apps: &[Application],
    kind: BatchPolicyKind,
    config: &SimConfig,
) -> Result<SimResult, SimError> {
    run_with(cluster, apps, kind.build().as_mut(), config)
}
