//! Planning time of the divisible-load planners (spec 03) for 1,000 workers: the target is under
//! 10 ms per plan. Run: `cargo bench -p hetsched-core --bench divisible`.

use criterion::{Criterion, criterion_group, criterion_main};
use hetsched_core::policy::divisible::{Algo, PlanOptions, StarPlatform, StarWorker, plan};
use std::hint::black_box;

/// 1,000 heterogeneous workers whose links together outpace their computes (Σ S/B ≈ 0.55), each
/// holding 500–800 units of the 10⁷, so UMRLM's memory caps bind.
fn platform(memory: bool) -> StarPlatform {
    let n = 1000;
    StarPlatform {
        workers: (0..n)
            .map(|i| {
                let speed = 10.0 + (i * 37 % 91) as f64;
                StarWorker {
                    name: format!("w{i}"),
                    speed,
                    compute_latency: 0.001 * (i % 7) as f64,
                    bandwidth: speed * n as f64 * (1.2 + (i % 5) as f64 * 0.4),
                    network_latency: 1e-5 * (i % 3) as f64,
                    memory: memory.then_some(500.0 + (i % 4) as f64 * 100.0),
                }
            })
            .collect(),
    }
}

fn bench(c: &mut Criterion) {
    let load = 1e7;
    let free = platform(false);
    let capped = platform(true);
    let options = PlanOptions {
        error: 0.2,
        ..PlanOptions::default()
    };
    let mut g = c.benchmark_group("plan_1000_workers");
    for (algo, p) in [
        (Algo::Umr, &free),
        (Algo::Umrlm, &capped),
        (Algo::Rumr, &free),
        (Algo::Static, &free),
    ] {
        let sends = plan(algo, p, load, &options).expect("plans").chunks.len();
        g.bench_function(format!("{algo} ({sends} sends)"), |b| {
            b.iter(|| plan(algo, black_box(p), black_box(load), &options).expect("plans"))
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
