//! Benchmarks of the makespan lower bound (the fluid LP, `hetsched_core::policy::batch::bound`).
//!
//! - `lower_bound/paper_25_workloads`: the bound of all 25 workloads A–Y on the HDAS paper's
//!   cluster (6 identical slaves: one node class), one after the other;
//! - `lower_bound/1000_nodes_100_apps`: 1,000 nodes of 10 types (cores, GPUs and their speed, disk
//!   bandwidth differ) and 100 applications (CPU and GPU variants, IO-heavy to compute-bound),
//!   some submitted later (so the release sub-programmes are solved too);
//! - `lower_bound/1000_distinct_nodes_100_apps`: the same applications on 1,000 nodes no two of
//!   which are alike (cores, core speed, disk, accelerator count and speed all vary): the
//!   programme pools similar nodes into at most `MAX_CLASSES` groups;
//! - `simulate/paper_workload_P_hdas`: one simulation of workload P under `hdas`, for scale;
//! - `simulate/paper_workload_P_hdas_hetero`: the same under `hdas-hetero`, which solves the
//!   fluid LP for its plan whenever the pending set changes or the plan's makespan passes.
//!
//! Run: `cargo bench -p hetsched-sim --bench bound`.

use criterion::{Criterion, criterion_group, criterion_main};
use hetsched_core::policy::batch::BatchPolicyKind;
use hetsched_core::policy::batch::bound::lower_bound;
use hetsched_core::testkit::{app, node};
use hetsched_core::time::secs;
use hetsched_core::{AppId, Application, Cluster, NodeId};
use hetsched_sim::scenario::hdas_paper::{cluster, workloads};
use hetsched_sim::{SimConfig, simulate};
use std::hint::black_box;
use std::time::Duration;

/// 1,000 nodes of 10 types.
fn big_cluster() -> Cluster {
    let template = node("n").build(NodeId(0));
    let mut c = Cluster::uniform(1000, &template);
    for (i, n) in c.nodes.iter_mut().enumerate() {
        let t = i % 10;
        *n = node(&n.name)
            .cores([4, 8, 16, 32][t % 4])
            .gpus((t % 5) as u32, "gpu")
            .disk_mib_s([128.0, 256.0, 512.0][t % 3])
            .memory(64 << 30)
            .build(n.id);
        for a in &mut n.accelerators {
            a.speed = [0.5, 1.0, 2.0, 4.0][t % 4];
        }
    }
    c
}

/// 1,000 nodes, no two alike (the cluster of `examples/bound_distinct.rs`).
fn distinct_cluster() -> Cluster {
    let template = node("n").build(NodeId(0));
    let mut c = Cluster::uniform(1000, &template);
    for (i, nd) in c.nodes.iter_mut().enumerate() {
        let f = i as f64;
        *nd = node(&nd.name)
            .cores(4 + (i as u32 * 7) % 61)
            .gpus((i % 5) as u32, "gpu")
            .disk_mib_s(100.0 + (f * 37.0) % 400.0 + f * 1e-3)
            .memory(64 << 30)
            .build(nd.id);
        nd.core_speed = 0.8 + 0.4 * (f * 0.618_034).fract();
        for a in &mut nd.accelerators {
            a.speed = 0.5 + 3.5 * (f * 0.381_966).fract();
        }
    }
    c
}

/// 100 applications, from IO-heavy to compute-bound; every fourth is CPU-only, every seventh
/// GPU-only, and a third are submitted up to 10 minutes late.
fn big_workload() -> Vec<Application> {
    (0..100u32)
        .map(|i| {
            let f = f64::from(i);
            let mut b = app(&format!("app{i}"))
                .split_mib(u64::from(4 + (i * 37) % 1024))
                .tasks(100 + (i * 53) % 2000)
                .submitted_at(if i % 3 == 2 { secs(f * 6.0) } else { 0 });
            if i % 7 != 0 {
                b = b.cpu(10.0 + (f * 13.0) % 900.0, 1.0);
            }
            if i % 4 != 0 || i % 7 == 0 {
                b = b.gpu(1.0 + (f * 7.0) % 30.0, 0.1, 1.0);
            }
            b.build(AppId(i))
        })
        .collect()
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("lower_bound");
    g.sample_size(20).measurement_time(Duration::from_secs(10));
    let paper = cluster();
    let all: Vec<Vec<Application>> = workloads().iter().map(|w| w.applications(1.0)).collect();
    g.bench_function("paper_25_workloads", |b| {
        b.iter(|| {
            for apps in &all {
                black_box(lower_bound(&paper, apps).ok());
            }
        })
    });
    let (big, many) = (big_cluster(), big_workload());
    g.bench_function("1000_nodes_100_apps", |b| {
        b.iter(|| black_box(lower_bound(&big, &many).ok()))
    });
    let distinct = distinct_cluster();
    g.bench_function("1000_distinct_nodes_100_apps", |b| {
        b.iter(|| black_box(lower_bound(&distinct, &many).ok()))
    });
    g.finish();

    let mut g = c.benchmark_group("simulate");
    g.sample_size(10).measurement_time(Duration::from_secs(10));
    let p = workloads()
        .into_iter()
        .find(|w| w.letter == 'P')
        .map(|w| w.applications(1.0))
        .unwrap_or_default();
    let config = SimConfig {
        record_tasks: false,
        sample_interval: None,
        ..SimConfig::default()
    };
    g.bench_function("paper_workload_P_hdas", |b| {
        b.iter(|| {
            let mut policy = BatchPolicyKind::Hdas.build();
            black_box(simulate(&paper, &p, policy.as_mut(), &config, &mut |_| {}).ok())
        })
    });
    g.bench_function("paper_workload_P_hdas_hetero", |b| {
        b.iter(|| {
            let mut policy = BatchPolicyKind::HdasHetero.build();
            black_box(simulate(&paper, &p, policy.as_mut(), &config, &mut |_| {}).ok())
        })
    });
    g.finish();
}

#[allow(missing_docs)]
mod group {
    use super::*;
    criterion_group!(benches, bench);
}

use group::benches;
criterion_main!(benches);
