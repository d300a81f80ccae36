//! `SchedulerView::pending_apps` is an index of the applications with pending tasks: it follows
//! every change of their queues (dispatch, requeue, resubmit, cancel), in submission order; and
//! `SchedulerView::pending_apps_in`, the same by group.

use hetsched_core::model::{AppId, NodeId, Resources, SchedulerView, TaskId, Variant};
use hetsched_core::testkit::{app, node};
use std::collections::HashSet;

fn pending(v: &SchedulerView) -> Vec<u32> {
    v.pending_apps().map(|a| a.app.id.0).collect()
}

#[test]
fn pending_apps_follows_every_change_of_the_queues() {
    let mut v = SchedulerView::new();
    v.add_node(node("n").cores(8).build(NodeId(0)))
        .expect("node");
    for (i, tasks) in [1u32, 2, 0, 1].into_iter().enumerate() {
        let ids: Vec<TaskId> = (0..tasks)
            .map(|t| TaskId(10 * i as u64 + u64::from(t)))
            .collect();
        v.add_application(
            app(&format!("a{i}"))
                .tasks(tasks)
                .cpu(1.0, 0.0)
                .build(AppId(i as u32)),
            ids,
        )
        .expect("app");
    }
    assert_eq!(
        pending(&v),
        [0, 1, 3],
        "an application without tasks waits for nothing"
    );
    // Its only task dispatched, a0 leaves; requeued, it is back in its place.
    let a = v.assign(AppId(0), NodeId(0), Variant::Cpu).expect("fits");
    assert_eq!(pending(&v), [1, 3]);
    v.requeue(&a);
    assert_eq!(pending(&v), [0, 1, 3]);
    // a1 keeps one task after a dispatch; cancelled, it leaves.
    let b = v.assign(AppId(1), NodeId(0), Variant::Cpu).expect("fits");
    assert_eq!(pending(&v), [0, 1, 3]);
    assert_eq!(v.cancel_pending(AppId(1)), 1);
    assert_eq!(pending(&v), [0, 3]);
    // A resubmitted task brings it back; a cancel of that one task takes it away again.
    v.task_abandoned(&b);
    v.resubmit(AppId(1), [b.task]);
    assert_eq!(pending(&v), [0, 1, 3]);
    let only: HashSet<TaskId> = [b.task].into_iter().collect();
    assert_eq!(v.cancel_pending_tasks(AppId(1), &only), 1);
    assert_eq!(pending(&v), [0, 3]);
    // A resubmit of nothing adds nothing.
    v.resubmit(AppId(2), []);
    assert_eq!(pending(&v), [0, 3]);
}

fn pending_in(v: &SchedulerView, group: u32) -> Vec<u32> {
    v.pending_apps_in(group).map(|a| a.app.id.0).collect()
}

/// `pending_apps_in` lists a group's applications with pending tasks — what a driver wakes when
/// room under that group's cap grows — through every change of their queues and groups, and
/// none of another group's or of no group.
#[test]
fn pending_apps_in_a_group_follows_the_queues_and_the_groups() {
    let mut v = SchedulerView::new();
    v.add_node(node("n").cores(8).build(NodeId(0)))
        .expect("node");
    for i in 0..4u32 {
        v.add_application(
            app(&format!("a{i}")).tasks(1).cpu(1.0, 0.0).build(AppId(i)),
            [TaskId(u64::from(i))],
        )
        .expect("app");
    }
    // a0 and a2 are group 7's, a1 group 8's, a3 in none.
    for (a, g) in [(0, 7), (1, 8), (2, 7)] {
        v.set_app_group(AppId(a), Some(g)).expect("grouped");
    }
    assert_eq!(
        (pending_in(&v, 7), pending_in(&v, 8)),
        (vec![0, 2], vec![1])
    );
    assert!(pending_in(&v, 9).is_empty(), "a group with nothing");
    // Dispatched, a0 leaves its group's list; requeued, it is back.
    let a = v.assign(AppId(0), NodeId(0), Variant::Cpu).expect("fits");
    assert_eq!(pending_in(&v, 7), [2]);
    v.requeue(&a);
    assert_eq!(pending_in(&v, 7), [0, 2]);
    // a2 moves to group 8; a3 joins group 7; a1 is cancelled.
    v.set_app_group(AppId(2), Some(8)).expect("moved");
    v.set_app_group(AppId(3), Some(7)).expect("grouped");
    assert_eq!(v.cancel_pending(AppId(1)), 1);
    assert_eq!(
        (pending_in(&v, 7), pending_in(&v, 8)),
        (vec![0, 3], vec![2])
    );
    // Out of every group: in none's list, still pending.
    v.set_app_group(AppId(0), None).expect("ungrouped");
    assert_eq!(pending_in(&v, 7), [3]);
    assert_eq!(pending(&v), [0, 2, 3]);
    // A resubmitted task brings its application back to its group's list.
    let b = v.assign(AppId(3), NodeId(0), Variant::Cpu).expect("fits");
    assert!(pending_in(&v, 7).is_empty());
    v.task_abandoned(&b);
    v.resubmit(AppId(3), [b.task]);
    assert_eq!(pending_in(&v, 7), [3]);
}

/// A purged job's applications keep their ids and nothing else; one with tasks waiting or
/// running cannot be retired, and a retired one is never placed.
#[test]
fn a_retired_application_keeps_its_id_only_and_an_active_one_is_not_retired() {
    let mut v = SchedulerView::new();
    v.add_node(node("n").cores(8).build(NodeId(0)))
        .expect("node");
    for i in 0..2u32 {
        v.add_application(
            app(&format!("a{i}"))
                .tasks(1)
                .requires(&["ssd"])
                .cpu(1.0, 0.0)
                .build(AppId(i)),
            [TaskId(u64::from(i))],
        )
        .expect("app");
    }
    assert!(v.retire_application(AppId(0)).is_err(), "a task waits");
    let a = v.assign(AppId(0), NodeId(0), Variant::Cpu);
    assert!(a.is_none(), "n lacks ssd");
    v.cancel_pending(AppId(0));
    v.retire_application(AppId(0)).expect("retired");
    v.retire_application(AppId(0))
        .expect("retiring again does nothing");
    assert!(v.get_app(AppId(0)).is_none(), "its state is dropped");
    let retired = v.app(AppId(0));
    assert_eq!(
        (
            retired.app.name.as_str(),
            retired.app.tasks,
            retired.app.requires.len(),
            retired.pending.len(),
        ),
        ("", 0, 0, 0)
    );
    assert_eq!(pending(&v), [1]);
    assert_eq!(v.apps().map(|a| a.app.id).collect::<Vec<_>>(), [AppId(1)]);
    assert!(v.assign(AppId(0), NodeId(0), Variant::Cpu).is_none());
    assert!(!v.fits(AppId(0), NodeId(0), Variant::Cpu));
    // What a driver may still say of it changes nothing and does not panic.
    v.resubmit(AppId(0), [TaskId(0)]);
    assert_eq!(v.cancel_pending(AppId(0)), 0);
    assert!(v.set_priority(AppId(0), 3).is_err());
    assert_eq!(pending(&v), [1]);
    // A restart adds retired applications in id order; the next id goes on after them.
    v.add_retired_application(AppId(2)).expect("in order");
    assert!(v.add_retired_application(AppId(5)).is_err(), "out of order");
    assert_eq!(v.app_count(), 3);
    assert_eq!(pending(&v), [1]);
    assert!(v.all_complete() == v.app(AppId(1)).is_complete());
}

/// `hetsched update --cores --memory`: an application's request changes at any time; placements
/// book the new one, and a task gives back what it took when it ends, whatever the request is
/// by then (also after a driver restart restores it).
#[test]
fn a_request_changes_while_tasks_run_and_each_task_gives_back_what_it_took() {
    let mut v = SchedulerView::new();
    v.add_node(node("n").cores(4).build(NodeId(0)))
        .expect("node");
    let mut a = app("a").tasks(5).cpu(1.0, 0.0).build(AppId(0));
    if let Some(cpu) = a.cpu.as_mut() {
        cpu.request.cores = 8;
    }
    v.add_application(a, (0..5).map(TaskId)).expect("app");
    assert!(
        !v.fits(AppId(0), NodeId(0), Variant::Cpu),
        "8 cores on a 4-core node"
    );
    let generation = v.placement_generation();
    v.set_request(AppId(0), Variant::Cpu, Resources::new(2, 1 << 20, 0))
        .expect("changed");
    assert!(
        v.placement_generation() > generation,
        "cached placements are looked at again"
    );
    assert_eq!(
        v.app(AppId(0))
            .app
            .request(Variant::Cpu)
            .map(|r| (r.cores, r.memory_bytes)),
        Some((2, 1 << 20))
    );
    let two = v
        .assign(AppId(0), NodeId(0), Variant::Cpu)
        .expect("fits now");
    assert_eq!(two.request, Resources::new(2, 1 << 20, 0));
    assert_eq!(v.node(NodeId(0)).free.cores, 2);
    // While it runs, the tasks to start take 1 core; it keeps its 2.
    v.set_request(AppId(0), Variant::Cpu, Resources::new(1, 0, 0))
        .expect("a task runs: it keeps what it took");
    assert!(
        v.set_request(AppId(0), Variant::Gpu, Resources::new(1, 0, 0))
            .is_err(),
        "no GPU variant"
    );
    let generation = v.placement_generation();
    v.set_request(AppId(0), Variant::Cpu, Resources::new(1, 0, 0))
        .expect("the same");
    assert_eq!(v.placement_generation(), generation, "nothing changed");
    let ones: Vec<_> = std::iter::from_fn(|| v.assign(AppId(0), NodeId(0), Variant::Cpu)).collect();
    assert_eq!(ones.len(), 2, "two 1-core tasks beside the 2-core one");
    assert_eq!(v.node(NodeId(0)).free.cores, 0);
    assert_eq!(v.app(AppId(0)).usage.cores, 4);
    v.task_finished(&two);
    assert_eq!(v.node(NodeId(0)).free.cores, 2, "it gave back its 2 cores");
    assert_eq!(
        v.node(NodeId(0)).free.memory_bytes,
        v.node(NodeId(0)).node.memory_bytes,
        "and its 1 MiB"
    );
    assert_eq!(v.app(AppId(0)).usage.cores, 2);
    // A driver restart puts a running task back with what it holds, not the request.
    let mut w = SchedulerView::new();
    w.add_node(node("n").cores(4).build(NodeId(0)))
        .expect("node");
    let mut a = app("a").tasks(5).cpu(1.0, 0.0).build(AppId(0));
    if let Some(cpu) = a.cpu.as_mut() {
        cpu.request.cores = 1;
    }
    w.add_application(a, (3..5).map(TaskId)).expect("app");
    for running in [&ones[0], &ones[1], &two] {
        w.restore_running(running).expect("restored");
    }
    assert_eq!(w.node(NodeId(0)).free.cores, 0);
    w.task_finished(&two);
    assert_eq!(w.node(NodeId(0)).free.cores, 2);
}

/// `hetsched update --gpu-kind`: the accelerator kind a GPU variant's tasks take changes;
/// placements pick devices of the new kind, and cached placements are looked at again.
#[test]
fn a_gpu_variants_kind_changes_and_placements_pick_devices_of_the_new_kind() {
    let mut v = SchedulerView::new();
    v.add_node(
        node("n")
            .cores(4)
            .gpus(1, "k20")
            .gpus(1, "a100")
            .build(NodeId(0)),
    )
    .expect("node");
    let mut a = app("a").tasks(3).gpu(1.0, 0.0, 0.0).build(AppId(0));
    if let Some(gpu) = a.gpu.as_mut() {
        gpu.kind = Some("h100".into());
    }
    v.add_application(a, (0..3).map(TaskId)).expect("app");
    v.add_application(app("c").tasks(1).cpu(1.0, 0.0).build(AppId(1)), [TaskId(3)])
        .expect("app");
    assert!(!v.fits(AppId(0), NodeId(0), Variant::Gpu), "no h100 here");
    let generation = v.placement_generation();
    v.set_gpu_kind(AppId(0), Some("a100".into()))
        .expect("changed");
    assert!(v.placement_generation() > generation);
    let t = v
        .assign(AppId(0), NodeId(0), Variant::Gpu)
        .expect("the a100 is free");
    let a100 = v.node(NodeId(0)).node.accelerators[t.devices[0] as usize]
        .kind
        .clone();
    assert_eq!(a100, "a100");
    assert!(
        !v.fits(AppId(0), NodeId(0), Variant::Gpu),
        "the k20 is not one"
    );
    // Any kind: the k20 takes the next.
    v.set_gpu_kind(AppId(0), None).expect("changed");
    assert!(v.assign(AppId(0), NodeId(0), Variant::Gpu).is_some());
    let generation = v.placement_generation();
    v.set_gpu_kind(AppId(0), None).expect("the same");
    assert_eq!(v.placement_generation(), generation, "nothing changed");
    assert!(
        v.set_gpu_kind(AppId(1), Some("a100".into())).is_err(),
        "no GPU variant"
    );
}

/// A task given up for lost with its node, re-queued, and then found running there still (the
/// runtime: the node came back) resumes: it leaves its queue and holds its cores and devices
/// again, not counted as a second dispatch. Refused, changing nothing, where the node is dead
/// or the room is gone: a node is never booked past what it has.
#[test]
fn a_requeued_task_found_running_on_its_node_resumes_there_only_where_it_still_fits() {
    let mut v = SchedulerView::new();
    v.add_node(node("n").cores(2).gpus(1, "a100").build(NodeId(0)))
        .expect("node");
    v.add_application(
        app("a").tasks(2).gpu(1.0, 0.0, 0.0).build(AppId(0)),
        [TaskId(0), TaskId(1)],
    )
    .expect("app");
    let a = v.assign(AppId(0), NodeId(0), Variant::Gpu).expect("fits");
    assert_eq!(a.devices, [0]);
    // Its node declared dead: the task goes back to the front of the queue.
    v.requeue(&a);
    v.set_alive(NodeId(0), false).expect("dead");
    assert!(!v.resume(&a), "not on a dead node");
    assert_eq!(v.app(AppId(0)).pending, [TaskId(0), TaskId(1)]);
    v.set_alive(NodeId(0), true).expect("back");
    assert!(v.resume(&a));
    assert_eq!(v.app(AppId(0)).pending, [TaskId(1)], "out of the queue");
    assert_eq!(v.app(AppId(0)).running, 1);
    assert_eq!(v.app(AppId(0)).dispatched(), 1, "dispatched once");
    assert_eq!(
        v.node(NodeId(0)).free_devices(None),
        0,
        "its device held again"
    );
    assert!(
        v.assign(AppId(0), NodeId(0), Variant::Gpu).is_none(),
        "nothing else gets the device"
    );
    // Finished, it gives back what it holds; resumed where its device is taken, it is refused.
    v.task_finished(&a);
    assert_eq!(v.node(NodeId(0)).free_devices(None), 1);
    let b = v.assign(AppId(0), NodeId(0), Variant::Gpu).expect("fits");
    let before = v.node(NodeId(0)).free;
    assert!(!v.resume(&a), "its device is another task's now");
    assert_eq!(v.node(NodeId(0)).free, before, "nothing changed");
    v.task_finished(&b);
}
