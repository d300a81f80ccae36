//! Cost of the preemption rule on one heartbeat (`policy::batch::preempt::preempt_on`) on a full
//! cluster: 100 nodes of 6 cores, each running 6 one-core tasks of priority 0 (600 candidates).
//!
//! `nothing_above/N`: N applications of priority 0 wait — the common case of a server with
//! preemption on whose waiting work has no higher priority than what runs: the rule's cost on
//! every heartbeat that leaves work waiting. `one_urgent/N`: the same plus one waiting
//! application of priority 5 — a full decision, every node's victim set compared.

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use hetsched_core::model::{AppId, NodeId, SchedulerView, TaskId, Variant};
use hetsched_core::policy::batch::preempt::{Candidate, Rules, preempt_on};
use hetsched_core::testkit::{app, node};
use std::hint::black_box;

const NODES: u32 = 100;
const CORES: u32 = 6;
const RULES: Rules = Rules {
    exempt: 0,
    variants: &[Variant::Cpu],
};

/// A full cluster, its running tasks by node, with `waiting` priority-0 applications and,
/// if `urgent`, one of priority 5.
fn full(waiting: u32, urgent: bool) -> (SchedulerView, Vec<Vec<Candidate>>) {
    let mut view = SchedulerView::new();
    for i in 0..NODES {
        view.add_node(node(&format!("n{i}")).cores(CORES).build(NodeId(i)))
            .expect("dense node ids");
    }
    let mut next = 0u64;
    let mut add = |view: &mut SchedulerView, tasks: u32, priority: i32| {
        let id = AppId(view.app_count() as u32);
        let a = app(&format!("a{}", id.0))
            .tasks(tasks)
            .priority(priority)
            .cpu(60.0, 0.0)
            .build(id);
        let first = next;
        next += u64::from(tasks);
        view.add_application(a, (0..u64::from(tasks)).map(move |i| TaskId(first + i)))
            .expect("dense app ids")
    };
    let filler = add(&mut view, NODES * CORES, 0);
    let mut running = vec![Vec::new(); NODES as usize];
    for n in 0..NODES {
        for c in 0..CORES {
            let started = u64::from(n * CORES + c);
            view.set_now(started);
            let a = view
                .assign(filler, NodeId(n), Variant::Cpu)
                .expect("a free core");
            running[n as usize].push(Candidate {
                running: a,
                started,
            });
        }
    }
    for _ in 0..waiting {
        add(&mut view, 4, 0);
    }
    if urgent {
        add(&mut view, 1, 5);
    }
    view.set_now(1_000_000);
    (view, running)
}

fn heartbeat(c: &mut Criterion) {
    let mut g = c.benchmark_group("preempt_on_a_full_cluster");
    for waiting in [10u32, 1_000, 10_000] {
        for urgent in [false, true] {
            let (view, running) = full(waiting, urgent);
            let name = if urgent {
                "one_urgent"
            } else {
                "nothing_above"
            };
            let on = |n: NodeId| running[n.index()].clone();
            let found = preempt_on(&view, NodeId(0), 1_000_000, &RULES, |_| true, on);
            // Node 0's tasks started first: the others lose less, so it never preempts; the
            // last node does.
            assert!(found.is_none());
            if urgent {
                let last = NodeId(NODES - 1);
                assert!(preempt_on(&view, last, 1_000_000, &RULES, |_| true, on).is_some());
            }
            g.bench_function(BenchmarkId::new(name, waiting), |b| {
                b.iter(|| {
                    black_box(preempt_on(
                        black_box(&view),
                        NodeId(NODES - 1),
                        1_000_000,
                        &RULES,
                        |_| true,
                        |n: NodeId| running[n.index()].clone(),
                    ))
                });
            });
        }
    }
    g.finish();
}

#[allow(missing_docs)]
mod group {
    use super::*;
    criterion_group!(benches, heartbeat);
}
criterion_main!(group::benches);
