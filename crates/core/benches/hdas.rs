//! Cost of one `hdas-hetero` heartbeat on a full cluster (100 nodes of 6 cores and 4 GPUs, every
//! core and GPU busy), against how many mixed applications wait and how many finished ones the
//! view still holds. A full node gets nothing, so the figure is what the policy pays before it
//! places anything: chiefly each application's GPU backlog (`hdas::gpu_backlogs`), which
//! `hdas-hetero` computes at every beat to keep CPU tasks that would straggle off the cores.
//!
//! `pending/N`: N mixed applications of 4 waiting tasks each. `finished/N`: N applications whose
//! tasks all ended (cancelled) beside 10 that wait — the pattern of a server that ran many
//! one-task jobs.

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use hetsched_core::model::{AppId, NodeId, SchedulerView, TaskId};
use hetsched_core::policy::batch::BatchPolicyKind;
use hetsched_core::testkit::{app, node};
use std::hint::black_box;

const NODES: u32 = 100;

/// A full cluster with `pending` waiting mixed applications and `finished` ended ones, and the
/// policy that filled it.
fn full(
    pending: u32,
    finished: u32,
) -> (
    SchedulerView,
    Box<dyn hetsched_core::policy::batch::BatchPolicy>,
) {
    let mut view = SchedulerView::new();
    for i in 0..NODES {
        view.add_node(
            node(&format!("n{i}"))
                .cores(6)
                .gpus(4, "c2050")
                .disk_mib_s(128.0)
                .build(NodeId(i)),
        )
        .expect("dense node ids");
    }
    let mut next_task = 0u64;
    let mut add = |view: &mut SchedulerView, tasks: u32, gpu: f64| {
        let id = AppId(view.app_count() as u32);
        // BP-like (spec 02): far faster on a GPU; each a little different, so that the GPU
        // advantages differ.
        let a = app(&format!("a{}", id.0))
            .tasks(tasks)
            .split_mib(4)
            .gpu(gpu, 0.0, 0.03125)
            .cpu(900.0, 0.03125)
            .build(id);
        let first = next_task;
        next_task += u64::from(tasks);
        view.add_application(a, (0..u64::from(tasks)).map(move |i| TaskId(first + i)))
            .expect("dense app ids")
    };
    for _ in 0..finished {
        let id = add(&mut view, 1, 23.6);
        view.cancel_pending(id);
    }
    // Enough work to fill every core and GPU, then the applications that wait.
    add(&mut view, NODES * 10, 23.6);
    for i in 0..pending {
        add(&mut view, 4, 20.0 + f64::from(i % 100) / 10.0);
    }
    let mut policy = BatchPolicyKind::HdasHetero.build();
    for n in 0..NODES {
        while !policy.on_node_update(&mut view, NodeId(n), 0).is_empty() {}
    }
    assert!(
        policy.on_node_update(&mut view, NodeId(0), 0).is_empty(),
        "the cluster is full"
    );
    (view, policy)
}

fn heartbeat(c: &mut Criterion) {
    let mut g = c.benchmark_group("hdas_hetero_heartbeat_on_a_full_cluster");
    for (case, pending, finished) in [
        ("pending/10", 10, 0),
        ("pending/1000", 1_000, 0),
        ("pending/4000", 4_000, 0),
        ("finished/20000", 10, 20_000),
    ] {
        let (mut view, mut policy) = full(pending, finished);
        g.bench_function(BenchmarkId::from_parameter(case), |b| {
            b.iter(|| black_box(policy.on_node_update(&mut view, NodeId(0), 0)))
        });
    }
    g.finish();
}

#[allow(missing_docs)]
mod group {
    use super::*;
    criterion_group!(benches, heartbeat);
}
criterion_main!(group::benches);
