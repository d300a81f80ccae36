//! A workload's `accelerator = "required" | "preferred"` in the batch simulator
//! (`SimConfig::accelerator`): given to the scheduler's view as the runtime gives it
//! (`SchedulerView::set_accelerator_need`), so every policy keeps a required application's tasks
//! on GPUs.

use crate::common::{aligned, cluster, run};
use hetsched_core::model::application::AcceleratorNeed;
use hetsched_core::policy::batch::BatchPolicyKind;
use hetsched_core::testkit::{app, node};
use hetsched_core::{AppId, Application, NodeId};
use hetsched_sim::{SimConfig, SimError};

/// 40 tasks whose CPU variant is three times faster than their GPU one: left to themselves the
/// policies run many of them on CPUs.
fn both_variants() -> Application {
    app("a")
        .tasks(40)
        .cpu(10.0, 0.0)
        .gpu(30.0, 0.3, 0.0)
        .build(AppId(0))
}

fn with(need: AcceleratorNeed) -> SimConfig {
    SimConfig {
        accelerator: vec![need],
        ..aligned()
    }
}

#[test]
fn a_required_application_runs_only_on_gpus_under_every_policy_that_uses_them() {
    let c = cluster(vec![
        node("g1").cores(6).gpus(2, "k").build(NodeId(0)),
        node("g2").cores(6).gpus(2, "k").build(NodeId(1)),
    ]);
    let apps = [both_variants()];
    for kind in BatchPolicyKind::ALL {
        if kind == BatchPolicyKind::CpuOnly {
            continue;
        }
        let free = run(&c, &apps, kind, &aligned()).unwrap();
        assert!(
            free.cpu_tasks > 0,
            "{kind}: without the need, CPUs are used"
        );
        let r = run(&c, &apps, kind, &with(AcceleratorNeed::Required)).unwrap();
        assert_eq!((r.gpu_tasks, r.cpu_tasks), (40, 0), "{kind}");
        let r = run(&c, &apps, kind, &with(AcceleratorNeed::None)).unwrap();
        assert_eq!(
            r.cpu_tasks, free.cpu_tasks,
            "{kind}: `none` changes nothing"
        );
    }
    let e = run(
        &c,
        &apps,
        BatchPolicyKind::CpuOnly,
        &with(AcceleratorNeed::Required),
    )
    .unwrap_err();
    assert!(matches!(e, SimError::Unrunnable { .. }), "{e}");
    assert!(
        e.to_string()
            .contains("it requires an accelerator (`accelerator = \"required\"`)"),
        "{e}"
    );
}

#[test]
fn a_preferred_application_uses_cpus_only_on_nodes_without_a_device() {
    let c = cluster(vec![
        node("g").cores(6).gpus(2, "k").build(NodeId(0)),
        node("plain").cores(6).build(NodeId(1)),
    ]);
    let apps = [both_variants()];
    let r = run(
        &c,
        &apps,
        BatchPolicyKind::Hdas,
        &with(AcceleratorNeed::Preferred),
    )
    .unwrap();
    assert_eq!(r.gpu_tasks + r.cpu_tasks, 40);
    assert!(r.gpu_tasks > 0, "{} on GPUs", r.gpu_tasks);
    let tasks = r
        .tasks
        .iter()
        .filter(|t| t.variant == hetsched_core::Variant::Cpu);
    for t in tasks {
        assert_eq!(t.node, NodeId(1), "a CPU task only where no device is");
    }
}

#[test]
fn a_bad_accelerator_list_is_refused() {
    let c = cluster(vec![node("g").cores(2).gpus(1, "k").build(NodeId(0))]);
    let cpu_only = [app("c").tasks(2).cpu(1.0, 0.0).build(AppId(0))];
    let e = run(
        &c,
        &cpu_only,
        BatchPolicyKind::Fifo,
        &with(AcceleratorNeed::Required),
    )
    .unwrap_err();
    assert!(
        e.to_string()
            .contains("is `accelerator = \"required\"` but has no GPU variant"),
        "{e}"
    );
    let config = SimConfig {
        accelerator: vec![AcceleratorNeed::None; 2],
        ..aligned()
    };
    let e = run(&c, &cpu_only, BatchPolicyKind::Fifo, &config).unwrap_err();
    assert!(
        e.to_string()
            .contains("gives 2 accelerator needs for 1 applications"),
        "{e}"
    );
}
