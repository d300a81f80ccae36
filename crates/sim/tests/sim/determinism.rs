//! The same inputs and seed give byte-identical results.

use crate::common::{cluster, run};
use hetsched_core::policy::batch::BatchPolicyKind;
use hetsched_core::testkit::{app, node};
use hetsched_core::{AppId, Application, Cluster, NodeId};
use hetsched_sim::SimConfig;

fn workload() -> (Cluster, Vec<Application>) {
    let c = cluster(
        (0..3)
            .map(|i| node("n").cores(4 + i).gpus(i, "c2050").build(NodeId(0)))
            .collect(),
    );
    let apps = vec![
        app("io")
            .split_mib(256)
            .tasks(30)
            .cpu(10.0, 2.0)
            .gpu(0.5, 0.1, 2.0)
            .build(AppId(0)),
        app("compute")
            .split_mib(4)
            .tasks(25)
            .cpu(30.0, 0.03125)
            .gpu(2.0, 0.0, 0.03125)
            .build(AppId(1)),
        app("cpu")
            .split_mib(64)
            .tasks(20)
            .cpu(5.0, 0.5)
            .build(AppId(2)),
    ];
    (c, apps)
}

#[test]
fn same_seed_gives_byte_identical_json() {
    let (c, apps) = workload();
    for kind in BatchPolicyKind::ALL {
        let config = SimConfig {
            seed: 42,
            ..SimConfig::default()
        };
        let a = run(&c, &apps, kind, &config).unwrap().to_json().unwrap();
        let b = run(&c, &apps, kind, &config).unwrap().to_json().unwrap();
        assert_eq!(a, b, "{kind}");
    }
}

#[test]
fn another_seed_moves_the_heartbeats() {
    let (c, apps) = workload();
    let with = |seed| {
        let config = SimConfig {
            seed,
            ..SimConfig::default()
        };
        run(&c, &apps, BatchPolicyKind::Hdas, &config).unwrap()
    };
    assert_ne!(with(1).tasks[0].start_ns, with(2).tasks[0].start_ns);
}
