//! Cost of one `hdas-hetero` heartbeat on a full cluster (100 nodes of 6 cores and 4 GPUs, every
//! core and GPU busy), against how many mixed applications wait and how many finished ones the
//! view still holds. A full node gets nothing, so the figure is what the policy pays before it
//! places anything: chiefly each application's GPU backlog (`hdas::gpu_backlogs`), which
//! `hdas-hetero` computes at every beat to keep CPU tasks that would straggle off the cores.
//!
//! `pending/N`: N mixed applications of 4 waiting tasks each. `finished/N`: N applications whose
//! tasks all ended (cancelled) beside 10 that wait — the pattern of a server that ran many
//! one-task jobs.
//!
//! `hdas_hetero_decision_under_churn/N`: one decision of `hdas-hetero` while N one-task
//! applications wait and the pending set keeps changing, as on a server draining a queue of
//! one-task jobs while more are submitted: before each heartbeat of node 0 (untimed) the oldest
//! task running there ends and one application arrives; the heartbeat starts a task in the freed
//! slot, which drains an application. So every decision sees the pending set changed by one
//! drain and one arrival, N stays constant, and the figure is a decision's cost amortised over
//! the plans those changes make (each plan is the fluid LP of `bound::contended_plan`). Half the
//! applications are CPU-only, half mixed (GPU-friendly), all with different profiles.

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

/// One application of the churn bench: `i` picks its kind and profile, all distinct.
fn churn_app(id: AppId, i: u32) -> hetsched_core::model::Application {
    if i.is_multiple_of(2) {
        app(&format!("cpu{i}"))
            .tasks(1)
            .split_mib(8 + u64::from(i % 61))
            .cpu(20.0 + f64::from(i % 53), 0.1)
            .build(id)
    } else {
        app(&format!("mixed{i}"))
            .tasks(1)
            .split_mib(4 + u64::from(i % 29))
            .gpu(10.0 + f64::from(i % 89) / 10.0, 0.1, 0.05)
            .cpu(300.0 + f64::from(i % 97), 0.05)
            .build(id)
    }
}

/// 8 GPU nodes (6 cores, 4 GPUs) and 8 CPU nodes (16 cores), every slot busy, `pending`
/// one-task applications waiting; the policy that filled it, the tasks running on node 0 (oldest
/// first), the next application's number and the next task id.
struct Churn {
    view: SchedulerView,
    policy: Box<dyn hetsched_core::policy::batch::BatchPolicy>,
    running: std::collections::VecDeque<hetsched_core::model::Assignment>,
    next_app: u32,
    next_task: u64,
    now: u64,
}

impl Churn {
    fn new(pending: usize) -> Self {
        let mut view = SchedulerView::new();
        for i in 0..16u32 {
            let n = if i < 8 {
                node(&format!("g{i}"))
                    .cores(6)
                    .gpus(4, "c2050")
                    .disk_mib_s(128.0)
            } else {
                node(&format!("c{i}")).cores(16).disk_mib_s(256.0)
            };
            view.add_node(n.build(NodeId(i))).expect("dense node ids");
        }
        let mut c = Churn {
            view,
            policy: BatchPolicyKind::HdasHetero.build(),
            running: Default::default(),
            next_app: 0,
            next_task: 0,
            now: 0,
        };
        loop {
            while c.view.pending_apps().count() < pending {
                c.arrive();
            }
            let mut placed = false;
            for n in 0..16 {
                let got = c.policy.on_node_update(&mut c.view, NodeId(n), c.now);
                placed |= !got.is_empty();
                if n == 0 {
                    c.running.extend(got);
                }
            }
            if !placed {
                break;
            }
        }
        assert!(!c.running.is_empty(), "node 0 runs tasks");
        c
    }

    fn arrive(&mut self) {
        let id = AppId(self.view.app_count() as u32);
        let a = churn_app(id, self.next_app);
        self.next_app += 1;
        self.view
            .add_application(a, [TaskId(self.next_task)])
            .expect("dense app ids");
        self.next_task += 1;
    }

    /// Untimed: the oldest task on node 0 ends, one application arrives, a second passes.
    fn prepare(&mut self) {
        if let Some(done) = self.running.pop_front() {
            self.view.task_finished(&done);
        }
        self.arrive();
        self.now += 1_000_000_000;
    }

    /// Timed: node 0's heartbeat.
    fn decide(&mut self) -> usize {
        let got = self
            .policy
            .on_node_update(&mut self.view, NodeId(0), self.now);
        let n = got.len();
        self.running.extend(got);
        n
    }
}

fn decision_under_churn(c: &mut Criterion) {
    let mut g = c.benchmark_group("hdas_hetero_decision_under_churn");
    g.sample_size(10);
    for pending in [100usize, 1_000, 4_000] {
        let mut churn = Churn::new(pending);
        g.bench_function(BenchmarkId::from_parameter(pending), |b| {
            b.iter_custom(|iters| {
                let mut spent = std::time::Duration::ZERO;
                for _ in 0..iters {
                    churn.prepare();
                    let start = std::time::Instant::now();
                    black_box(churn.decide());
                    spent += start.elapsed();
                }
                spent
            })
        });
        // Each decision placed a task in the slot freed before it, so what waits stayed put.
        let waiting = churn.view.pending_apps().count();
        assert!(
            waiting.abs_diff(pending) <= pending / 10 + 2,
            "{waiting} wait, {pending} at the start"
        );
    }
    g.finish();
}

#[allow(missing_docs)]
mod group {
    use super::*;
    criterion_group!(benches, heartbeat, decision_under_churn);
}
criterion_main!(group::benches);
