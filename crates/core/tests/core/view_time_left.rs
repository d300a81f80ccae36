//! Nodes with an end (an agent started with a `time_limit`, e.g. inside a batch allocation): a
//! task whose own time limit is longer than the time a node has left is not placed there, by
//! any policy, since it would be stopped half-way; tasks without a limit, and nodes without an
//! end, are placed as before.

use hetsched_core::model::{AppId, NodeId, SchedulerView, TaskId, Variant};
use hetsched_core::policy::batch::BatchPolicyKind;
use hetsched_core::testkit::{app, node};

const SEC: u64 = 1_000_000_000;

/// Two 4-core nodes with `left` seconds left each (`None`: no end; the view's clock at 0), and
/// one application of 8 one-core tasks with a limit of `limit` seconds (`None`: no limit).
fn view(left: [Option<u64>; 2], limit: Option<u64>) -> SchedulerView {
    let mut v = SchedulerView::new();
    for (i, l) in left.iter().enumerate() {
        v.add_node(node(&format!("n{i}")).cores(4).build(NodeId(i as u32)))
            .expect("node");
        v.set_node_end(NodeId(i as u32), l.map(|s| s * SEC))
            .expect("known node");
    }
    let mut a = app("solve").tasks(8).cpu(2.0, 0.0).build(AppId(0));
    if let Some(c) = a.cpu.as_mut() {
        c.time_limit = limit.map(|s| s * SEC);
    }
    v.add_application(a, (0..8).map(TaskId).collect::<Vec<_>>())
        .expect("app");
    v
}

/// How many tasks each node takes at one heartbeat of its own, under every batch policy.
fn placed(left: [Option<u64>; 2], limit: Option<u64>) -> Vec<(BatchPolicyKind, [usize; 2])> {
    BatchPolicyKind::ALL
        .iter()
        .map(|&kind| {
            let mut v = view(left, limit);
            let mut p = kind.build();
            let mut counts = [0; 2];
            for (n, count) in counts.iter_mut().enumerate() {
                *count = p.on_node_update(&mut v, NodeId(n as u32), SEC).len();
            }
            (kind, counts)
        })
        .collect()
}

#[test]
fn a_task_longer_than_a_nodes_time_left_goes_only_where_it_can_end() {
    // An hour's limit: the node with 30 minutes left takes none, the one with 2 hours all it can.
    for (kind, counts) in placed([Some(1800), Some(7200)], Some(3600)) {
        assert_eq!(counts, [0, 4], "{kind:?}");
    }
    // Exactly as long as the time left still fits.
    for (kind, counts) in placed([Some(3600), None], Some(3600)) {
        assert_eq!(counts, [4, 4], "{kind:?}");
    }
    // No limit: it may run anywhere (it is stopped, and runs again elsewhere, if the node ends).
    for (kind, counts) in placed([Some(10), Some(10)], None) {
        assert_eq!(counts, [4, 4], "{kind:?}");
    }
    // Nodes without an end take any limit.
    for (kind, counts) in placed([None, None], Some(1_000_000)) {
        assert_eq!(counts, [4, 4], "{kind:?}");
    }
}

#[test]
fn the_time_left_counts_from_the_views_clock_and_capacity_alone_says_could_run() {
    let mut v = view([Some(7200), None], Some(3600));
    assert!(v.fits(AppId(0), NodeId(0), Variant::Cpu));
    v.set_now(3600 * SEC);
    assert_eq!(v.time_left(NodeId(0)), Some(3600 * SEC));
    assert!(v.fits(AppId(0), NodeId(0), Variant::Cpu), "exactly enough");
    v.set_now(3601 * SEC);
    assert!(!v.fits(AppId(0), NodeId(0), Variant::Cpu), "a second short");
    assert!(v.fits(AppId(0), NodeId(1), Variant::Cpu), "no end");
    assert_eq!(v.time_left(NodeId(1)), None);
    v.set_now(10 * SEC);
    assert_eq!(v.now(), 3601 * SEC, "the clock never goes back");
    v.set_now(9000 * SEC);
    assert_eq!(v.time_left(NodeId(0)), Some(0), "past its end: none left");
    // `could_run` speaks of capacity: the node could run the task, had it the time (the pending
    // reason names the time left on its own).
    assert!(v.could_run(AppId(0), NodeId(0)));
    assert!(v.set_node_end(NodeId(9), None).is_err(), "unknown node");
}
