//! Criterion: a finite word count (2,000 sentences of 10 words, 1 spout → 1 split → 1 count) run
//! to completion in one worker (in-memory path) and across two workers on loopback (TCP path:
//! every word crosses). Throughput in words. `cargo bench -p hetsched-stream --bench wordcount`.

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use hetsched_core::testkit::ScratchDir;
use hetsched_stream::{Worker, WorkerConfig};
use std::collections::HashMap;
use std::time::Duration;

const SENTENCES: u64 = 2_000;

fn text() -> String {
    let lines: Vec<String> = (0..100)
        .map(|i| {
            let words: Vec<String> = (0..10)
                .map(|j| format!("\"w{}\"", (i * 7 + j * 13) % 500))
                .collect();
            format!("\"{}\"", words.join(" ").replace('"', ""))
        })
        .collect();
    format!(
        r#"name = "wc"
[[component]]
name = "s"
kind = "spout"
parallelism = 1
cpu = 1.0
builtin = "corpus-spout"
params = {{ lines = [{}], repeat = {} , reliable = true, max_pending = 5000 }}
[[component]]
name = "split"
kind = "bolt"
parallelism = 1
cpu = 1.0
builtin = "split"
[[component]]
name = "count"
kind = "bolt"
parallelism = 1
cpu = 1.0
builtin = "count"
[[stream]]
from = "s"
to = "split"
rate = 1.0
[[stream]]
from = "split"
to = "count"
grouping = "fields"
rate = 10.0
"#,
        lines.join(", "),
        SENTENCES / 100
    )
}

fn run(two: bool) {
    let assignment = if two { vec![0, 0, 1] } else { vec![0, 0, 0] };
    // The workers' directories, removed at the end of the run, once the workers have stopped.
    let dir = ScratchDir::new("wc-bench", "run");
    let cfg = |w: u32| WorkerConfig {
        topology_origin: "wc.toml".into(),
        topology_text: text(),
        worker: w,
        assignment: assignment.clone(),
        base_dir: dir.to_path_buf(),
        work_dir: dir.join("work"),
        listen: "127.0.0.1:0".into(),
        started_ns: 0,
        await_state: Vec::new(),
        key: hetsched_stream::auth::topology_key("bench", "wc", 0),
        encrypt: false,
    };
    let a = Worker::start(cfg(0)).expect("starts");
    let b = two.then(|| Worker::start(cfg(1)).expect("starts"));
    if let Some(b) = &b {
        a.set_peers(HashMap::from([(1, b.local_addr())]));
        b.set_peers(HashMap::from([(0, a.local_addr())]));
    }
    while !a.spouts_done() {
        std::thread::sleep(Duration::from_micros(200));
    }
    a.stop();
    if let Some(b) = b {
        b.stop();
    }
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("wordcount");
    g.sample_size(10);
    g.throughput(Throughput::Elements(SENTENCES * 10));
    g.bench_function("one-worker", |b| b.iter(|| run(false)));
    g.bench_function("two-workers-tcp", |b| b.iter(|| run(true)));
    g.finish();
}

#[allow(missing_docs)]
mod group {
    use super::*;
    criterion_group!(benches, bench);
}
criterion_main!(group::benches);
