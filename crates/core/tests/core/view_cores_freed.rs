//! The nodes whose free cores rose ([`SchedulerView::take_cores_freed`]): the runtime repays what
//! it booked beyond a node's capacity (prefetch debt) from these alone, so a node left out while
//! its cores came back would show free cores it does not have.

use hetsched_core::model::{NodeId, Resources, SchedulerView};
use hetsched_core::policy::batch::BatchPolicyKind;
use hetsched_core::testkit::{app, node};

#[test]
fn every_node_whose_free_cores_rose_is_listed_once_until_taken() {
    let mut v = SchedulerView::new();
    for n in 0..4 {
        v.add_node(node(&format!("n{n}")).cores(4).build(NodeId(n)))
            .expect("node");
    }
    let a = app("a")
        .tasks(1)
        .cpu(1.0, 0.0)
        .cpu_cores(2)
        .build(hetsched_core::model::AppId(0));
    v.add_application(a, vec![hetsched_core::model::TaskId(0)])
        .expect("app");
    let mut freed = vec![NodeId(9)];
    v.take_cores_freed(&mut freed);
    assert!(freed.is_empty(), "nothing released yet: {freed:?}");

    // Cores taken are not listed; cores given back are, once however often.
    assert_eq!(v.hold_cores(NodeId(0), 3), 3);
    let booked = Resources::new(1, 0, 0);
    v.book(NodeId(1), booked).expect("a core of n1");
    v.take_cores_freed(&mut freed);
    assert!(freed.is_empty(), "only taken: {freed:?}");
    v.release_cores(NodeId(0), 1);
    v.release_cores(NodeId(0), 2);
    v.unbook(NodeId(1), booked, &[]);
    // A task placed and then ending on n2.
    let placed = BatchPolicyKind::ALL[0]
        .build()
        .on_node_update(&mut v, NodeId(2), 1_000_000_000);
    assert_eq!(placed.len(), 1);
    v.take_cores_freed(&mut freed);
    assert_eq!(freed, [NodeId(0), NodeId(1)]);
    v.task_finished(&placed[0]);
    // New figures for n3 while nothing holds it: more cores.
    v.set_node_resources(NodeId(3), &node("n3").cores(8).build(NodeId(3)))
        .expect("n3 idle");
    v.take_cores_freed(&mut freed);
    assert_eq!(freed, [NodeId(2), NodeId(3)]);
    v.take_cores_freed(&mut freed);
    assert!(freed.is_empty(), "taken: {freed:?}");
}
