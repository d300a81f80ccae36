//! Groups of applications sharing a cap on cores, memory and GPUs (the runtime's per-user
//! `--max-cores`, `--max-memory`, `--max-gpus`): every policy places through
//! [`SchedulerView::fits`], so none starts a task that would take its group past the cap; what
//! they hold comes back as tasks end, and moving an application into a group moves what its
//! running tasks hold.

use hetsched_core::model::{AppId, NodeId, Resources, SchedulerView, TaskId};
use hetsched_core::policy::batch::BatchPolicyKind;
use hetsched_core::testkit::{app, node};

/// Two 8-core nodes; applications 0 and 1 (group 0: capped at `cap` cores) of 10 two-core tasks
/// each, application 2 (no group) of 10 one-core tasks.
fn view(cap: u32) -> SchedulerView {
    let mut v = SchedulerView::new();
    for n in 0..2 {
        v.add_node(node(&format!("n{n}")).cores(8).build(NodeId(n)))
            .expect("node");
    }
    for (i, cores) in [(0, 2), (1, 2), (2, 1)] {
        let a = app(&format!("a{i}"))
            .tasks(10)
            .cpu(1.0, 0.0)
            .cpu_cores(cores)
            .build(AppId(i));
        v.add_application(a, (0..10).map(TaskId).collect::<Vec<_>>())
            .expect("app");
    }
    v.set_group_cap(0, Resources::new(cap, 0, 0));
    v.set_app_group(AppId(0), Some(0)).expect("group");
    v.set_app_group(AppId(1), Some(0)).expect("group");
    v
}

#[test]
fn no_policy_starts_a_task_past_its_groups_cap_and_others_take_the_rest() {
    for kind in BatchPolicyKind::ALL {
        let mut v = view(6);
        let mut p = kind.build();
        let mut placed = Vec::new();
        for n in 0..2 {
            placed.extend(p.on_node_update(&mut v, NodeId(n), 1_000_000_000));
        }
        let grouped: u32 = placed
            .iter()
            .filter(|a| a.app.0 < 2)
            .map(|a| a.request.cores)
            .sum();
        assert!(grouped <= 6, "{kind:?}: the group holds {grouped} cores");
        assert_eq!(v.group(0).cores(), grouped, "{kind:?}");
        let free: u32 = v.nodes().iter().map(|n| n.free.cores).sum();
        assert_eq!(
            free,
            16 - placed.iter().map(|a| a.request.cores).sum::<u32>()
        );
        // The cores the cap leaves go to the application outside the group.
        assert!(placed.iter().any(|a| a.app == AppId(2)), "{kind:?}");
        // A task ending gives its cores back to the group: another starts in its place.
        if let Some(done) = placed.iter().find(|a| a.app.0 < 2).cloned() {
            v.task_finished(&done);
            assert_eq!(v.group(0).cores(), grouped - done.request.cores, "{kind:?}");
            assert!(v.group_room(AppId(0), &Resources::new(2, 0, 0)));
        }
    }
}

#[test]
fn without_a_cap_the_group_only_counts_and_a_moved_application_takes_its_cores_along() {
    let mut v = view(0);
    let mut started = Vec::new();
    while let Some(a) = v.assign(AppId(0), NodeId(0), hetsched_core::model::Variant::Cpu) {
        started.push(a);
    }
    assert_eq!(started.len(), 4, "an 8-core node holds four two-core tasks");
    assert_eq!(v.group(0).cores(), 8);
    // Application 0 leaves the group: its 8 cores leave with it; a cap of 2 then admits one
    // task of application 1 only.
    v.set_app_group(AppId(0), None).expect("ungrouped");
    assert_eq!(v.group(0).cores(), 0);
    v.set_group_cap(0, Resources::new(2, 0, 0));
    assert!(
        v.assign(AppId(1), NodeId(1), hetsched_core::model::Variant::Cpu)
            .is_some()
    );
    assert!(
        v.assign(AppId(1), NodeId(1), hetsched_core::model::Variant::Cpu)
            .is_none()
    );
    v.set_app_group(AppId(0), Some(0)).expect("back");
    assert_eq!(v.group(0).cores(), 10);
    // Over the cap (a cap lowered under running tasks): they run on, nothing new starts.
    assert!(!v.group_room(AppId(1), &Resources::new(1, 0, 0)));
    for a in &started {
        v.task_abandoned(a);
    }
    assert_eq!(v.group(0).cores(), 2);
}

/// Under `drf` a group's applications share one dominant share: two users, one with three
/// applications and one with one, split an 8-core node 4 / 4 (each application on its own
/// would give the first user 6). Without groups DRF is unchanged: 2 cores per application.
#[test]
fn drf_is_fair_between_groups_not_between_their_applications() {
    let build = |grouped: bool| {
        let mut v = SchedulerView::new();
        v.add_node(node("n").cores(8).build(NodeId(0)))
            .expect("node");
        for i in 0..4 {
            let a = app(&format!("a{i}"))
                .tasks(10)
                .cpu(1.0, 0.0)
                .build(AppId(i));
            v.add_application(a, (0..10).map(TaskId).collect::<Vec<_>>())
                .expect("app");
            if grouped {
                // Applications 0-2 are one user's, 3 another's.
                v.set_app_group(AppId(i), Some(u32::from(i == 3)))
                    .expect("group");
            }
        }
        let mut p = BatchPolicyKind::Drf.build();
        let placed = p.on_node_update(&mut v, NodeId(0), 1_000_000_000);
        let mut per_app = [0; 4];
        for a in &placed {
            per_app[a.app.index()] += 1;
        }
        per_app
    };
    let apart = build(false);
    assert_eq!(apart, [2, 2, 2, 2]);
    let users = build(true);
    assert_eq!(users[..3].iter().sum::<u32>(), 4, "{users:?}");
    assert_eq!(users[3], 4, "{users:?}");
}

/// A cap on GPUs keeps a group to that many devices under every policy, leaves the others to
/// other users, and does not stop the group's CPU tasks: one 16-core node with 4 GPUs, a grouped
/// mixed application of 4 tasks (capped at one GPU) and an ungrouped GPU-only one.
#[test]
fn a_cap_on_gpus_leaves_the_other_devices_to_others_and_cores_to_the_group() {
    for kind in BatchPolicyKind::ALL {
        let mut v = SchedulerView::new();
        v.add_node(node("n").cores(16).gpus(4, "k").build(NodeId(0)))
            .expect("node");
        let mixed = app("mixed")
            .tasks(4)
            .cpu(10.0, 0.0)
            .gpu(1.0, 0.0, 0.0)
            .build(AppId(0));
        let gpu_only = app("gpu").tasks(10).gpu(1.0, 0.0, 0.0).build(AppId(1));
        for a in [mixed, gpu_only] {
            v.add_application(
                a.clone(),
                (0..u64::from(a.tasks)).map(TaskId).collect::<Vec<_>>(),
            )
            .expect("app");
        }
        v.set_group_cap(0, Resources::new(0, 0, 1));
        v.set_app_group(AppId(0), Some(0)).expect("group");
        let mut p = kind.build();
        let placed = p.on_node_update(&mut v, NodeId(0), 1_000_000_000);
        let group_gpus: u32 = placed
            .iter()
            .filter(|a| a.app == AppId(0))
            .map(|a| a.request.gpus)
            .sum();
        assert!(
            group_gpus <= 1,
            "{kind:?}: the group holds {group_gpus} GPUs"
        );
        assert_eq!(v.group(0).usage.gpus, group_gpus, "{kind:?}");
        assert_eq!(
            v.group(0).capped_by(&Resources::new(1, 0, 1)).is_some(),
            group_gpus == 1,
            "{kind:?}"
        );
        if kind != BatchPolicyKind::CpuOnly {
            // The devices the cap leaves go to the other user.
            let others: u32 = placed
                .iter()
                .filter(|a| a.app == AppId(1))
                .map(|a| a.request.gpus)
                .sum();
            assert_eq!(group_gpus + others, 4, "{kind:?}: every GPU is used");
        }
        // The cap is on GPUs only: the group's CPU tasks still start on the free cores
        // (`hdas-hetero` keeps them off cores by design: its completion-aware gate sees the
        // 10 s CPU task end after the accelerators could have run it).
        assert!(
            kind == BatchPolicyKind::HdasHetero
                || placed
                    .iter()
                    .any(|a| a.app == AppId(0) && a.request.gpus == 0),
            "{kind:?}: {placed:?}"
        );
    }
}

/// A cap on memory admits the group's tasks while the memory they hold stays under it, under
/// every policy: 10 GiB tasks under a 25 GiB cap run two at a time, on a node with room for six.
#[test]
fn a_cap_on_memory_admits_tasks_while_their_memory_stays_under_it() {
    const GIB: u64 = 1 << 30;
    for kind in BatchPolicyKind::ALL {
        let mut v = SchedulerView::new();
        v.add_node(node("n").cores(8).memory(64 * GIB).build(NodeId(0)))
            .expect("node");
        let a = app("big")
            .tasks(10)
            .cpu(1.0, 0.0)
            .cpu_memory(10 * GIB)
            .build(AppId(0));
        v.add_application(a, (0..10).map(TaskId).collect::<Vec<_>>())
            .expect("app");
        v.set_group_cap(0, Resources::new(0, 25 * GIB, 0));
        v.set_app_group(AppId(0), Some(0)).expect("group");
        let mut p = kind.build();
        let placed = p.on_node_update(&mut v, NodeId(0), 1_000_000_000);
        assert_eq!(placed.len(), 2, "{kind:?}");
        assert_eq!(v.group(0).usage.memory_bytes, 20 * GIB, "{kind:?}");
        assert_eq!(
            v.group(0).capped_by(&Resources::new(1, 10 * GIB, 0)),
            Some(hetsched_core::model::CappedResource::Memory)
        );
        // A task ending makes room for one more, and no more.
        v.task_finished(&placed[0]);
        let again = p.on_node_update(&mut v, NodeId(0), 2_000_000_000);
        assert_eq!(again.len(), 1, "{kind:?}");
        // Lifting the cap on memory lets the rest fill the node's memory.
        v.set_group_cap(0, Resources::default());
        let rest = p.on_node_update(&mut v, NodeId(0), 3_000_000_000);
        assert_eq!(rest.len(), 4, "{kind:?}: 64 GiB holds six 10 GiB tasks");
    }
}
