//! Cost of spec 01's binding: 100,000 membership changes on a cluster of 10,000 nodes in 100 racks
//! (one node in five an ANode), in each mode; and the same 100,000 changes with 100, 1,000 and
//! 10,000 nodes per rack, to show the per-event cost grows like `log n` in the rack.
//!
//! The sequence: every node joins (in a shuffled order), then the rest of the 100,000 events are
//! churn — a random present node leaves or a random absent one (re)joins, half and half.

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use hetsched_core::policy::binding::{Binding, BindingMode};
use std::hint::black_box;

#[derive(Clone)]
enum Ev {
    Add { node: usize },
    Remove { node: usize },
}

/// xorshift64*: a fixed, dependency-free sequence.
struct Rng(u64);
impl Rng {
    fn next(&mut self, n: usize) -> usize {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 33) as usize % n
    }
}

struct Workload {
    names: Vec<String>,
    racks: Vec<String>,
    /// Every fifth node of each rack is an ANode.
    anode: Vec<bool>,
    events: Vec<Ev>,
}

fn workload(nodes: usize, racks: usize, events: usize) -> Workload {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let mut order: Vec<usize> = (0..nodes).collect();
    for i in (1..nodes).rev() {
        order.swap(i, rng.next(i + 1));
    }
    let mut out: Vec<Ev> = order.iter().map(|&node| Ev::Add { node }).collect();
    let mut present = order.clone();
    let mut absent: Vec<usize> = Vec::new();
    while out.len() < events {
        if absent.is_empty() || (!present.is_empty() && rng.next(2) == 0) {
            let i = rng.next(present.len());
            let node = present.swap_remove(i);
            absent.push(node);
            out.push(Ev::Remove { node });
        } else {
            let i = rng.next(absent.len());
            let node = absent.swap_remove(i);
            present.push(node);
            out.push(Ev::Add { node });
        }
    }
    Workload {
        names: (0..nodes).map(|i| format!("node{i}")).collect(),
        racks: (0..nodes).map(|i| format!("rack{}", i % racks)).collect(),
        anode: (0..nodes).map(|i| (i / racks).is_multiple_of(5)).collect(),
        events: out,
    }
}

fn replay(w: &Workload, mode: BindingMode) -> usize {
    let mut b = Binding::new(mode);
    let mut moved = 0;
    for e in &w.events {
        let events = match e {
            Ev::Add { node } if w.anode[*node] => {
                b.add_anode(&w.names[*node], &w.racks[*node], 1.0 + (node % 3) as f64)
            }
            Ev::Add { node } => b.add_nnode(&w.names[*node], &w.racks[*node]),
            Ev::Remove { node } => b.remove(&w.names[*node]),
        };
        moved += events.map_or(0, |e| e.len());
    }
    moved
}

fn bench(c: &mut Criterion) {
    let w = workload(10_000, 100, 100_000);
    // The work the rules ask for: how many units the 100,000 events move (printed once).
    for mode in [
        BindingMode::Plain,
        BindingMode::Weighted,
        BindingMode::Container { slots: 4 },
    ] {
        eprintln!("{mode}: {} binding events", replay(&w, mode));
    }
    for per_rack in [100, 1_000, 10_000] {
        let w = workload(10_000, 10_000 / per_rack, 100_000);
        eprintln!(
            "plain, {per_rack} nodes per rack: {} binding events",
            replay(&w, BindingMode::Plain)
        );
    }
    let mut g = c.benchmark_group("binding/100k_events_10k_nodes_100_racks");
    g.sample_size(10);
    for mode in [
        BindingMode::Plain,
        BindingMode::Weighted,
        BindingMode::Container { slots: 4 },
    ] {
        g.bench_function(mode.as_str(), |b| b.iter(|| black_box(replay(&w, mode))));
    }
    g.finish();

    let mut g = c.benchmark_group("binding/100k_events_plain_by_rack_size");
    g.sample_size(10);
    for per_rack in [100, 1_000, 10_000] {
        let w = workload(10_000, 10_000 / per_rack, 100_000);
        g.bench_with_input(BenchmarkId::from_parameter(per_rack), &w, |b, w| {
            b.iter(|| black_box(replay(w, BindingMode::Plain)))
        });
    }
    g.finish();
}

#[allow(missing_docs)]
mod group {
    use super::*;
    criterion_group!(benches, bench);
}
criterion_main!(group::benches);
