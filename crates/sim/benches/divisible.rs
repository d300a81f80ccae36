//! Simulating a 1,000,000-send divisible-load schedule on the one-port star (spec 03): the target
//! is under 1 s. Run: `cargo bench -p hetsched-sim --bench divisible`.

use criterion::{Criterion, criterion_group, criterion_main};
use hetsched_core::policy::divisible::{Algo, Chunk, Plan, StarPlatform, StarWorker};
use hetsched_sim::divisible::{StarConfig, simulate};
use std::hint::black_box;

fn bench(c: &mut Criterion) {
    let n = 1000;
    let rounds = 1000;
    let platform = StarPlatform {
        workers: (0..n)
            .map(|i| StarWorker {
                name: format!("w{i}"),
                speed: 10.0 + (i % 13) as f64,
                compute_latency: 0.001,
                bandwidth: 20_000.0,
                network_latency: 1e-5,
                memory: Some(1e6),
            })
            .collect(),
    };
    // 1,000 rounds of one chunk per worker, growing like UMR's.
    let chunks: Vec<Chunk> = (0..rounds)
        .flat_map(|j| {
            (0..n).map(move |i| Chunk {
                round: j,
                worker: i,
                size: 1.0 + f64::from(j) * 0.01,
            })
        })
        .collect();
    let load = chunks.iter().map(|c| c.size).sum();
    let plan = Plan {
        algo: Algo::Umr,
        chunks,
        tail: Vec::new(),
        tail_load: 0.0,
        tail_workers: Vec::new(),
        predicted_makespan: 0.0,
    };
    let mut g = c.benchmark_group("simulate_1m_sends");
    g.sample_size(10);
    for error in [0.0, 0.2] {
        g.bench_function(format!("error {error}"), |b| {
            b.iter(|| {
                let run = simulate(
                    black_box(&platform),
                    black_box(&plan),
                    load,
                    &StarConfig { error, seed: 1 },
                )
                .expect("runs");
                assert_eq!(run.sends.len(), 1_000_000);
                run.makespan
            })
        });
    }
    g.finish();
}

#[allow(missing_docs)]
mod group {
    use super::*;
    criterion_group!(benches, bench);
}

use group::benches;
criterion_main!(benches);
