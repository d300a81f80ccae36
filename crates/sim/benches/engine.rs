//! Benchmarks of the simulator and of one HDAS decision.
//!
//! - `engine/fifo_1m_tasks_1000_nodes`: a synthetic workload of 1,000,000 tasks (four applications,
//!   CPU and GPU variants, IO-heavy and compute-bound) on 1,000 nodes with 8 cores, 2 GPUs and a
//!   shared disk each. Throughput is in events handled (heartbeats, disk completions, phase ends,
//!   stale disk events included).
//! - `hdas_decision/{pick_gpu,pick_cpu,on_node_update}/N`: one HDAS decision over N = 100, 1,000 and
//!   10,000 applications with pending tasks (cost per decision should grow linearly in N).
//!
//! Run: `cargo bench -p hetsched-sim --bench engine`. Sample sizes are small so the whole run takes
//! a few minutes on two cores.

use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use hetsched_core::policy::batch::BatchPolicy;
use hetsched_core::policy::batch::fifo::Fifo;
use hetsched_core::policy::batch::hdas::{Hdas, HdasConfig};
use hetsched_core::testkit::{app, node};
use hetsched_core::{AppId, Application, Cluster, NodeId, NodeReport, SchedulerView, TaskId};
use hetsched_sim::{SimConfig, simulate};
use std::hint::black_box;
use std::time::Duration;

/// 1,000 nodes: 8 cores, 2 GPUs, a 256 MiB/s disk.
fn big_cluster() -> Cluster {
    let template = node("n")
        .cores(8)
        .gpus(2, "gpu")
        .disk_mib_s(256.0)
        .memory(64 << 30)
        .build(NodeId(0));
    Cluster::uniform(1000, &template)
}

/// 1,000,000 tasks in four applications.
fn big_workload() -> Vec<Application> {
    vec![
        app("io-heavy")
            .split_mib(256)
            .tasks(250_000)
            .cpu(20.0, 1.0)
            .gpu(1.0, 0.1, 1.0)
            .build(AppId(0)),
        app("compute")
            .split_mib(8)
            .tasks(250_000)
            .cpu(60.0, 0.03125)
            .gpu(3.0, 0.0, 0.03125)
            .build(AppId(1)),
        app("cpu-only")
            .split_mib(64)
            .tasks(250_000)
            .cpu(10.0, 0.25)
            .build(AppId(2)),
        app("gpu-only")
            .split_mib(32)
            .tasks(250_000)
            .gpu(2.0, 0.05, 0.125)
            .build(AppId(3)),
    ]
}

fn engine(c: &mut Criterion) {
    let cluster = big_cluster();
    let apps = big_workload();
    let config = SimConfig {
        record_tasks: false,
        ..SimConfig::default()
    };
    // One run up front to learn the event count for the throughput figure.
    let probe = simulate(&cluster, &apps, &mut Fifo, &config, &mut |_| {});
    let Ok(probe) = probe else {
        eprintln!("benchmark workload failed: {probe:?}");
        return;
    };
    eprintln!(
        "workload: {} tasks, {} events, {} heartbeats consulted, makespan {:.0} s",
        probe.total_tasks, probe.events, probe.heartbeats, probe.makespan_s
    );
    let mut g = c.benchmark_group("engine");
    g.sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(20))
        .throughput(Throughput::Elements(probe.events));
    g.bench_function("fifo_1m_tasks_1000_nodes", |b| {
        b.iter(|| {
            let r = simulate(&cluster, &apps, &mut Fifo, &config, &mut |_| {});
            black_box(r.map(|r| r.events).unwrap_or(0))
        })
    });
    g.finish();
}

/// A view of one node (6 cores, 4 GPUs, some disk load) and `n` mixed applications, each with
/// pending tasks and some already dispatched.
fn decision_view(n: usize) -> SchedulerView {
    let mut view = SchedulerView::new();
    let _ = view.add_node(node("n").cores(6).gpus(4, "gpu").build(NodeId(0)));
    let mut next = 0u64;
    for i in 0..n {
        let a = app(&format!("a{i}"))
            .split_mib(64 + (i as u64 % 7) * 128)
            .tasks(4)
            .cpu(30.0 + (i % 11) as f64, 0.5 + (i % 5) as f64)
            .gpu(2.0 + (i % 13) as f64 * 0.5, 0.1, 0.5 + (i % 5) as f64)
            .submitted_at((i as u64 % 17) * 1_000_000_000)
            .build(AppId(i as u32));
        let ids = (next..next + 4).map(TaskId);
        next += 4;
        let _ = view.add_application(a, ids);
    }
    let _ = view.node_report(
        NodeId(0),
        NodeReport {
            total_io_bytes: 3.0 * (1u64 << 30) as f64,
            io_tasks: 3,
        },
    );
    view
}

fn hdas_decision(c: &mut Criterion) {
    let hdas = Hdas::new(HdasConfig::default());
    let now = 60_000_000_000;
    let mut g = c.benchmark_group("hdas_decision");
    g.sample_size(20)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3));
    for n in [100usize, 1_000, 10_000] {
        let view = decision_view(n);
        g.bench_function(format!("pick_gpu/{n}"), |b| {
            b.iter(|| black_box(hdas.pick_gpu(black_box(&view), NodeId(0), 0)))
        });
        g.bench_function(format!("pick_cpu/{n}"), |b| {
            b.iter(|| black_box(hdas.pick_cpu(black_box(&view), NodeId(0), 0, now)))
        });
        // A whole heartbeat: 4 GPU + 2 CPU decisions (6 assignments), each O(n).
        g.bench_function(format!("on_node_update_6_assignments/{n}"), |b| {
            b.iter_batched(
                || view.clone(),
                |mut v| {
                    let mut h = Hdas::new(HdasConfig::default());
                    black_box(h.on_node_update(&mut v, NodeId(0), now))
                },
                BatchSize::LargeInput,
            )
        });
    }
    g.finish();
}

#[allow(missing_docs)]
mod group {
    use super::*;
    criterion_group!(benches, engine, hdas_decision);
}

use group::benches;
criterion_main!(benches);
