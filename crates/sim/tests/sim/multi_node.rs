//! Multi-node tasks in the simulator: the same gathering as the runtime (the core's `Gatherer`),
//! whole nodes held while the task runs, and the task's time set by its slowest node.

use crate::common::{aligned, cluster, run};
use hetsched_core::policy::batch::BatchPolicyKind;
use hetsched_core::testkit::{app, node};
use hetsched_core::time::Time;
use hetsched_core::{AppId, NodeId};

const S: Time = 1_000_000_000;

#[test]
fn a_multi_node_task_holds_its_nodes_whole_and_runs_at_its_slowest_nodes_pace_under_every_policy() {
    // Three 2-core nodes, one at half speed; eight 4-second one-core tasks, then a three-node
    // task of 10 s submitted at 1 s.
    let mut slow = node("slow").cores(2).build(NodeId(0));
    slow.core_speed = 0.5;
    let c = cluster(vec![
        slow,
        node("a").cores(2).build(NodeId(1)),
        node("b").cores(2).build(NodeId(2)),
    ]);
    let apps = [
        app("small").tasks(8).cpu(4.0, 0.0).build(AppId(0)),
        app("mpi")
            .tasks(1)
            .split_mib(0)
            .cpu(10.0, 0.0)
            .nodes(3)
            .submitted_at(S)
            .build(AppId(1)),
    ];
    for kind in BatchPolicyKind::ALL.iter().copied() {
        let r = run(&c, &apps, kind, &aligned()).unwrap_or_else(|e| panic!("{kind:?}: {e}"));
        assert_eq!(r.tasks.len(), 9, "{kind:?}: every task once");
        let mpi = r
            .tasks
            .iter()
            .find(|t| t.app == AppId(1))
            .unwrap_or_else(|| panic!("{kind:?}: the multi-node task ran"));
        assert_eq!(
            mpi.end_ns - mpi.start_ns,
            20 * S,
            "{kind:?}: 10 s at the slow node's half speed"
        );
        // No small task runs beside it, on any node.
        for t in r.tasks.iter().filter(|t| t.app == AppId(0)) {
            assert!(
                t.end_ns <= mpi.start_ns || t.start_ns >= mpi.end_ns,
                "{kind:?}: {t:?} overlaps {mpi:?}"
            );
        }
        // Small tasks submitted before it may finish first, but none starts while it gathers.
        let started_after = r
            .tasks
            .iter()
            .filter(|t| t.app == AppId(0) && t.start_ns > S && t.start_ns < mpi.start_ns)
            .count();
        assert_eq!(
            started_after, 0,
            "{kind:?}: its nodes are held as they drain"
        );
    }
}

#[test]
fn a_multi_node_task_wider_than_the_cluster_is_refused() {
    let c = cluster(vec![node("a").cores(2).build(NodeId(0))]);
    let apps = [app("mpi").tasks(1).cpu(1.0, 0.0).nodes(2).build(AppId(0))];
    let e = run(&c, &apps, BatchPolicyKind::Fifo, &aligned())
        .expect_err("refused")
        .to_string();
    assert!(
        e.contains("it holds 2 whole nodes per task, and 1 node of the cluster has its attributes"),
        "{e}"
    );
}
