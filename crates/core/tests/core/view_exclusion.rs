//! The view's exclusion of an (application, node) pair (the runtime's failing-node back-off) and
//! the re-queueing of abandoned tasks (`resubmit --failed`).

use hetsched_core::model::{AppId, NodeId, SchedulerView, TaskId, Variant};
use hetsched_core::testkit::{app, node};

fn view() -> SchedulerView {
    let mut v = SchedulerView::new();
    v.add_node(node("a").cores(4).build(NodeId(0))).expect("a");
    v.add_node(node("b").cores(4).build(NodeId(1))).expect("b");
    let a = app("x").tasks(3).cpu(1.0, 0.0).build(AppId(0));
    v.add_application(a, (0..3).map(TaskId).collect::<Vec<_>>())
        .expect("app");
    v
}

#[test]
fn an_excluded_application_fits_nowhere_on_that_node_until_allowed_again() {
    let mut v = view();
    v.set_excluded(AppId(0), NodeId(0), true);
    assert!(!v.fits(AppId(0), NodeId(0), Variant::Cpu));
    assert!(v.assign(AppId(0), NodeId(0), Variant::Cpu).is_none());
    assert!(
        v.fits(AppId(0), NodeId(1), Variant::Cpu),
        "other nodes are not affected"
    );
    v.set_excluded(AppId(0), NodeId(0), false);
    assert!(v.assign(AppId(0), NodeId(0), Variant::Cpu).is_some());
}

#[test]
fn abandoned_tasks_resubmitted_are_dispatched_again_after_the_others() {
    let mut v = view();
    let first = v.assign(AppId(0), NodeId(0), Variant::Cpu).expect("task 0");
    assert_eq!(first.task, TaskId(0));
    v.task_abandoned(&first);
    v.resubmit(AppId(0), [TaskId(0)]);
    let order: Vec<TaskId> = (0..3)
        .filter_map(|_| v.assign(AppId(0), NodeId(1), Variant::Cpu).map(|a| a.task))
        .collect();
    assert_eq!(order, vec![TaskId(1), TaskId(2), TaskId(0)]);
}
