//! Benchmarks of stream placement (spec 04).
//!
//! - `stream_place/one_phase_1000_executors_100_nodes`: the goal — a 1,000-executor
//!   topology (a chain of 10 components × 100 executors joined by fields groupings, so each
//!   pair of neighbouring components exchanges traffic between all 100 × 100 executor pairs:
//!   90,000 pairs) on 100 heterogeneous nodes (4, 8 and 16 cores), with one-phase. Goal: < 100 ms.
//! - `stream_place/one_phase_exact_1000_executors_100_nodes`: the same with `Refine::None` (spec
//!   04's best-schedule alone), so the refinement's cost is the difference.
//! - `stream_place_growth/{one-phase,even,two-phase-traffic,resource-aware}/E`: the same shape with
//!   E = 250 … 4,000 executors (10 components of E/10), on 100 nodes: how cost grows.
//! - `stream_place_sparse/one-phase/E`: E executors in 10 components joined by `global`
//!   groupings (each sender talks to one receiver), so the traffic list grows linearly in E.
//!
//! Executor demands shrink as E grows (the same total work, about 40 % of the cluster, split
//! finer), so no size forces an overload and the repair path.
//!
//! Run: `cargo bench -p hetsched-core --bench stream_place`.

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use hetsched_core::model::topology::{Component, ComponentKind, Grouping, Stream, Topology};
use hetsched_core::policy::stream::one_phase::OnePhase;
use hetsched_core::policy::stream::{PlacementProblem, StreamNode, StreamPlacer, StreamPlacerKind};
use std::hint::black_box;
use std::time::Duration;

fn cluster(count: usize) -> Vec<StreamNode> {
    (0..count)
        .map(|i| StreamNode {
            name: format!("n{i}"),
            rack: (i / 20) as u32,
            capacity: [400.0, 800.0, 1600.0][i % 3],
            background: 0.0,
            memory_bytes: 32 << 30,
            slots: 4,
        })
        .collect()
}

fn chain(executors: u32, grouping: Grouping) -> Topology {
    let per = executors / 10;
    Topology {
        name: "bench".into(),
        requires: Vec::new(),
        components: (0..10)
            .map(|i| Component {
                name: format!("c{i}"),
                kind: if i == 0 {
                    ComponentKind::Spout
                } else {
                    ComponentKind::Bolt
                },
                parallelism: per,
                // The same total work (about 40 % of the cluster) however finely it is split.
                cpu: (25.0 + f64::from(i % 4) * 10.0) * 1000.0 / f64::from(executors),
                memory_bytes: 256 << 20,
            })
            .collect(),
        streams: (0..9)
            .map(|i| Stream {
                from: i,
                to: i + 1,
                grouping,
                rate: 1000.0 + i as f64 * 100.0,
            })
            .collect(),
    }
}

fn goal(c: &mut Criterion) {
    let nodes = cluster(100);
    let t = chain(1000, Grouping::Fields);
    let problem = PlacementProblem::declared(&t, &nodes);
    let placer = StreamPlacerKind::OnePhase.build();
    let mut g = c.benchmark_group("stream_place");
    g.sample_size(20).measurement_time(Duration::from_secs(10));
    g.bench_function("one_phase_1000_executors_100_nodes", |b| {
        b.iter(|| black_box(placer.place(black_box(&problem))))
    });
    // The patent's algorithm alone (`--refine none`): the refinement's cost is the difference.
    let exact = OnePhase::exact(OnePhase::default().max_utilisation);
    g.bench_function("one_phase_exact_1000_executors_100_nodes", |b| {
        b.iter(|| black_box(exact.place(black_box(&problem))))
    });
    g.finish();
}

fn growth(c: &mut Criterion) {
    let nodes = cluster(100);
    let mut g = c.benchmark_group("stream_place_growth");
    g.sample_size(10).measurement_time(Duration::from_secs(5));
    for kind in StreamPlacerKind::ALL {
        let placer = kind.build();
        for e in [250u32, 500, 1000, 2000, 4000] {
            if e > 2000 && kind != StreamPlacerKind::OnePhase {
                continue;
            }
            let t = chain(e, Grouping::Fields);
            let problem = PlacementProblem::declared(&t, &nodes);
            g.bench_with_input(BenchmarkId::new(kind.as_str(), e), &problem, |b, p| {
                b.iter(|| black_box(placer.place(black_box(p))))
            });
        }
    }
    g.finish();
    let mut g = c.benchmark_group("stream_place_sparse");
    g.sample_size(10).measurement_time(Duration::from_secs(5));
    let placer = StreamPlacerKind::OnePhase.build();
    for e in [1000u32, 4000, 16000] {
        let t = chain(e, Grouping::Global);
        let problem = PlacementProblem::declared(&t, &nodes);
        g.bench_with_input(BenchmarkId::new("one-phase", e), &problem, |b, p| {
            b.iter(|| black_box(placer.place(black_box(p))))
        });
    }
    g.finish();
}

#[allow(missing_docs)]
mod group {
    use super::*;
    criterion_group!(benches, goal, growth);
}

use group::benches;
criterion_main!(benches);
