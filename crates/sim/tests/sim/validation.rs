//! Bad input gets a clear error naming the problem; nothing panics or loops forever.

use crate::common::{aligned, cluster, run, run_with};
use hetsched_core::policy::batch::{BatchPolicy, BatchPolicyKind};
use hetsched_core::testkit::{app, node};
use hetsched_core::time::Time;
use hetsched_core::{AppId, Assignment, NodeId, SchedulerView};
use hetsched_sim::{SimConfig, SimError};

#[test]
fn a_gpu_only_application_on_a_cluster_without_gpus_is_refused() {
    let c = cluster(vec![node("n").cores(4).build(NodeId(0))]);
    let apps = [app("bp").gpu(1.0, 0.0, 0.1).build(AppId(0))];
    let e = run(&c, &apps, BatchPolicyKind::Hdas, &aligned()).unwrap_err();
    assert!(matches!(e, SimError::Unrunnable { .. }), "{e}");
    let msg = e.to_string();
    assert!(msg.contains("`bp`") && msg.contains("hdas"), "{msg}");
    assert!(msg.contains("no CPU variant"), "{msg}");
}

#[test]
fn cpu_only_refuses_an_application_without_a_cpu_variant() {
    let c = cluster(vec![node("n").cores(4).gpus(2, "c2050").build(NodeId(0))]);
    let apps = [
        app("knn").cpu(1.0, 0.5).gpu(0.1, 0.0, 0.5).build(AppId(0)),
        app("bp").gpu(1.0, 0.0, 0.1).build(AppId(1)),
    ];
    let e = run(&c, &apps, BatchPolicyKind::CpuOnly, &aligned()).unwrap_err();
    let msg = e.to_string();
    assert!(msg.contains("`bp`") && msg.contains("cpu-only"), "{msg}");
    assert!(msg.contains("never runs GPU tasks"), "{msg}");
    // FIFO runs it on the GPUs.
    assert!(run(&c, &apps, BatchPolicyKind::Fifo, &aligned()).is_ok());
}

#[test]
fn a_task_bigger_than_every_node_is_refused() {
    let c = cluster(vec![node("n").cores(2).build(NodeId(0))]);
    let mut a = app("fat").cpu(1.0, 0.0).build(AppId(0));
    if let Some(cpu) = a.cpu.as_mut() {
        cpu.request.cores = 3;
    }
    let msg = run(&c, &[a], BatchPolicyKind::Fifo, &aligned())
        .unwrap_err()
        .to_string();
    assert!(msg.contains("`fat`") && msg.contains("3 cores"), "{msg}");
}

#[test]
fn a_gpu_kind_no_node_has_is_refused() {
    let c = cluster(vec![node("n").cores(2).gpus(1, "c2050").build(NodeId(0))]);
    let mut a = app("k").gpu(1.0, 0.0, 0.0).build(AppId(0));
    if let Some(g) = a.gpu.as_mut() {
        g.kind = Some("a100".into());
    }
    let msg = run(&c, &[a], BatchPolicyKind::Fifo, &aligned())
        .unwrap_err()
        .to_string();
    assert!(msg.contains("of kind `a100`"), "{msg}");
}

#[test]
fn malformed_applications_and_settings_are_refused() {
    let c = cluster(vec![node("n").cores(2).build(NodeId(0))]);
    let none = app("empty").build(AppId(0));
    let msg = run(&c, &[none], BatchPolicyKind::Fifo, &aligned())
        .unwrap_err()
        .to_string();
    assert!(msg.contains("`empty`") && msg.contains("neither"), "{msg}");

    let wrong_id = app("x").cpu(1.0, 0.0).build(AppId(3));
    assert!(run(&c, &[wrong_id], BatchPolicyKind::Fifo, &aligned()).is_err());

    let late_first = [
        app("late").cpu(1.0, 0.0).submitted_at(5).build(AppId(0)),
        app("early").cpu(1.0, 0.0).submitted_at(1).build(AppId(1)),
    ];
    let msg = run(&c, &late_first, BatchPolicyKind::Fifo, &aligned())
        .unwrap_err()
        .to_string();
    assert!(
        msg.contains("`early`") && msg.contains("submission order"),
        "{msg}"
    );

    let ok = [app("x").cpu(1.0, 0.0).build(AppId(0))];
    for config in [
        SimConfig {
            heartbeat_interval: 0,
            ..aligned()
        },
        SimConfig {
            cpu_read_chunks: 0,
            ..aligned()
        },
        SimConfig {
            sample_interval: Some(0),
            ..aligned()
        },
    ] {
        let e = run(&c, &ok, BatchPolicyKind::Fifo, &config).unwrap_err();
        assert!(matches!(e, SimError::Config { .. }), "{e}");
    }

    let mut bad = c.clone();
    bad.nodes[0].disk_read_bw = 0.0;
    let e = run(&bad, &ok, BatchPolicyKind::Fifo, &aligned()).unwrap_err();
    assert!(matches!(e, SimError::Cluster(_)), "{e}");
}

/// A policy that never places anything.
struct Lazy;

impl BatchPolicy for Lazy {
    fn name(&self) -> &'static str {
        "lazy"
    }
    fn on_node_update(&mut self, _: &mut SchedulerView, _: NodeId, _: Time) -> Vec<Assignment> {
        Vec::new()
    }
}

#[test]
fn a_policy_that_never_places_pending_tasks_is_an_error_not_a_hang() {
    let c = cluster(vec![
        node("a").cores(2).build(NodeId(0)),
        node("b").cores(2).build(NodeId(0)),
    ]);
    let apps = [app("stuck").cpu(1.0, 0.0).build(AppId(0))];
    let e = run_with(&c, &apps, &mut Lazy, &SimConfig::default()).unwrap_err();
    let msg = e.to_string();
    assert!(matches!(e, SimError::Stuck { .. }), "{msg}");
    assert!(msg.contains("`stuck`") && msg.contains("lazy"), "{msg}");
}

/// A policy that places a task on a node that is already full, by going around the view.
struct Greedy;

impl BatchPolicy for Greedy {
    fn name(&self) -> &'static str {
        "greedy"
    }
    fn on_node_update(
        &mut self,
        view: &mut SchedulerView,
        node: NodeId,
        _: Time,
    ) -> Vec<Assignment> {
        let Some(task) = view.app(AppId(0)).pending.front().copied() else {
            return Vec::new();
        };
        // Pretend to have assigned it without asking the view (and so without checking room).
        view.assign(AppId(0), node, hetsched_core::Variant::Cpu)
            .into_iter()
            .chain(std::iter::once(Assignment {
                task: hetsched_core::TaskId(task.0 + 1),
                app: AppId(0),
                node,
                variant: hetsched_core::Variant::Cpu,
                devices: vec![],
                request: hetsched_core::Resources::new(1, 0, 0),
            }))
            .collect()
    }
}

#[test]
fn over_allocation_by_a_policy_is_caught() {
    let c = cluster(vec![node("a").cores(1).build(NodeId(0))]);
    let apps = [app("x").tasks(4).cpu(1.0, 0.0).build(AppId(0))];
    let e = run_with(&c, &apps, &mut Greedy, &aligned()).unwrap_err();
    assert!(matches!(e, SimError::OverAllocation { .. }), "{e}");
}

#[test]
fn empty_workloads_finish_at_once() {
    let c = cluster(vec![node("a").cores(1).build(NodeId(0))]);
    let r = run(&c, &[], BatchPolicyKind::Hdas, &aligned()).unwrap();
    assert_eq!((r.makespan_ns, r.total_tasks), (0, 0));
    let apps = [app("none").tasks(0).cpu(1.0, 0.0).build(AppId(0))];
    let r = run(&c, &apps, BatchPolicyKind::Hdas, &aligned()).unwrap();
    assert_eq!(r.average_task_delay, 1.0);
}

#[test]
fn billions_of_tasks_are_refused_before_anything_is_allocated() {
    // 4e9 tasks made the simulator allocate 448 GB for its task records and abort.
    let c = cluster(vec![node("n").cores(1).build(NodeId(0))]);
    let apps = [app("a").cpu(10.0, 0.0).tasks(4_000_000_000).build(AppId(0))];
    let e = run(&c, &apps, BatchPolicyKind::Fifo, &aligned()).unwrap_err();
    assert!(
        e.to_string()
            .contains("4000000000 tasks in all: at most 10000000"),
        "{e}"
    );
}

#[test]
fn tasks_of_huge_splits_on_one_node_do_not_overflow_its_outstanding_reads() {
    // A model built by hand is not bounded by the workload parser's 1 TiB: two tasks of a
    // 15 EiB split on one node overflowed the node's unissued bytes (a panic in debug builds).
    let c = cluster(vec![
        node("n")
            .cores(4)
            .gpus(2, "c2050")
            .disk_mib_s(1e12)
            .build(NodeId(0)),
    ]);
    let apps = [app("big")
        .cpu(1.0, 1.0)
        .gpu(0.5, 0.0, 1.0)
        .tasks(2)
        .split_mib(15 << 40)
        .build(AppId(0))];
    for kind in BatchPolicyKind::ALL {
        let r = run(&c, &apps, kind, &aligned());
        assert!(r.is_ok(), "{kind:?}: {:?}", r.err());
    }
}
