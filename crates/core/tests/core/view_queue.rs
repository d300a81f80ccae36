//! A node's queue during one decision ([`SchedulerView::open_queue`], the runtime's prefetch):
//! what the admission refuses ends the node's placements in that decision, so nothing is queued
//! ahead of the task the policy ranked first.

use hetsched_core::model::{AppId, NodeId, QueueAdmission, SchedulerView, TaskId, Variant};
use hetsched_core::policy::batch::BatchPolicyKind;
use hetsched_core::testkit::{app, node};
use std::sync::{Arc, Mutex};

/// Admits every task on a free core, and queued ones of `queueable` only; records each ask.
struct Only {
    queueable: AppId,
    asked: Arc<Mutex<Vec<(AppId, bool)>>>,
}

impl QueueAdmission for Only {
    fn admit(&mut self, app: AppId, _: Variant, _: u32, queued: bool) -> bool {
        self.asked.lock().expect("asks").push((app, queued));
        !queued || app == self.queueable
    }
}

/// One node of 6 cores, and applications `short` (0) and `new` (1) of 10 one-core tasks each.
fn view() -> SchedulerView {
    let mut v = SchedulerView::new();
    v.add_node(node("n").cores(6).build(NodeId(0))).expect("n");
    for (i, name) in ["short", "new"].into_iter().enumerate() {
        let first = 10 * i as u64;
        let a = app(name).tasks(10).cpu(1.0, 0.0).build(AppId(i as u32));
        v.add_application(a, (first..first + 10).map(TaskId).collect::<Vec<_>>())
            .expect("app");
    }
    v
}

fn gate(v: &mut SchedulerView, free_cores: u32) -> Arc<Mutex<Vec<(AppId, bool)>>> {
    let asked = Arc::new(Mutex::new(Vec::new()));
    v.open_queue(
        NodeId(0),
        free_cores,
        Box::new(Only {
            queueable: AppId(0),
            asked: asked.clone(),
        }),
    );
    asked
}

#[test]
fn a_refused_queued_task_ends_the_nodes_placements_until_the_queue_closes() {
    let mut v = view();
    // 2 cores free, 4 lent for the queue.
    let asked = gate(&mut v, 2);
    let (short, new) = (AppId(0), AppId(1));
    let n = NodeId(0);
    assert!(v.assign(short, n, Variant::Cpu).is_some());
    assert!(v.assign(new, n, Variant::Cpu).is_some(), "a free core");
    assert!(v.assign(short, n, Variant::Cpu).is_some(), "queued");
    assert!(
        v.assign(new, n, Variant::Cpu).is_none(),
        "may not be queued"
    );
    assert!(
        !v.fits(short, n, Variant::Cpu),
        "the node takes nothing more"
    );
    assert!(v.assign(short, n, Variant::Cpu).is_none());
    assert_eq!(
        *asked.lock().expect("asks"),
        vec![(short, false), (new, false), (short, true), (new, true)]
    );
    assert!(v.close_queue(), "it refused one");
    // Closed: the node's 3 cores left take anything again.
    assert!(v.assign(new, n, Variant::Cpu).is_some());
    assert!(!v.close_queue(), "no queue open");
}

#[test]
fn under_hdas_nothing_is_queued_ahead_of_the_application_it_ranks_first() {
    let mut v = view();
    let mut hdas = BatchPolicyKind::Hdas.build();
    // `short` has run 4 tasks elsewhere; `new`, none: HDAS ranks `new` first (least progress).
    v.add_node(node("m").cores(4).build(NodeId(1))).expect("m");
    for _ in 0..4 {
        v.assign(AppId(0), NodeId(1), Variant::Cpu).expect("on m");
    }
    let _asked = gate(&mut v, 2);
    let placed = hdas.on_node_update(&mut v, NodeId(0), 1_000_000_000);
    assert!(v.close_queue());
    // The 2 free cores go to `new` (its progress stays least); the first core beyond them would
    // too, and `new` may not be queued: nothing of `short` is queued ahead of it.
    assert_eq!(
        placed.iter().map(|a| a.app).collect::<Vec<_>>(),
        vec![AppId(1), AppId(1)]
    );
    // Without a queue the policy fills all 6 cores (both applications' progress evens out).
    let mut v = view();
    let all = hdas.on_node_update(&mut v, NodeId(0), 1_000_000_000);
    assert_eq!(all.len(), 6);
}
