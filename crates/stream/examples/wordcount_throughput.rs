//! Sustained word-count throughput of the stream worker, in one worker (in-memory path) and
//! across two workers on loopback (TCP path), with end-to-end latency and memory over time.
//!
//! ```sh
//! cargo run --release -p hetsched-stream --example wordcount_throughput -- [SECONDS] [SPLITS] [COUNTS] [RATE]
//! ```
//!
//! Topology: 1 corpus spout (unreliable, as fast as it can; 1,000 sentences of 10 words from a
//! 2,000-word vocabulary, repeated for ever) → SPLITS split executors (shuffle) → COUNTS count
//! executors (fields). Throughput is measured over the last SECONDS − 1 seconds (the first second
//! is warm-up) as (a) words counted per second (tuples into the count executors) and (b) all
//! tuples passed between executors per second (sentences into split + words into count).
//! Then the same two runs with the spout limited to RATE sentences/s (default 20,000), where the
//! latency is the path's own rather than queueing in full buffers.
//! In the two-worker runs the spout and splits run in worker 0 and the counts in worker 1, so
//! every word crosses TCP — plain, then TLS 1.3 (as on a cluster that runs TLS).

use hetsched_core::testkit::ScratchDir;
use hetsched_stream::{Worker, WorkerConfig, WorkerReport};
use std::collections::HashMap;
use std::time::{Duration, Instant};

fn corpus() -> Vec<String> {
    // A deterministic pseudo-random corpus (xorshift), so every run counts the same words.
    let mut x: u64 = 0x2545_f491_4f6c_dd1d;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    (0..1000)
        .map(|_| {
            (0..10)
                .map(|_| format!("w{}", next() % 2000))
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect()
}

fn topology(splits: u32, counts: u32, rate: Option<u64>) -> String {
    let rate = rate.map_or(String::new(), |r| format!(", rate = {r}"));
    let lines: Vec<String> = corpus().iter().map(|l| format!("\"{l}\"")).collect();
    format!(
        r#"name = "wordcount-bench"
[[component]]
name = "sentences"
kind = "spout"
parallelism = 1
cpu = 100.0
builtin = "corpus-spout"
params = {{ lines = [{}], repeat = 0{rate} }}
[[component]]
name = "split"
kind = "bolt"
parallelism = {splits}
cpu = 100.0
builtin = "split"
[[component]]
name = "count"
kind = "bolt"
parallelism = {counts}
cpu = 100.0
builtin = "count"
[[stream]]
from = "sentences"
to = "split"
rate = 1.0
[[stream]]
from = "split"
to = "count"
grouping = "fields"
rate = 10.0
"#,
        lines.join(", ")
    )
}

fn totals(reports: &[WorkerReport], count_from: u32) -> (u64, u64) {
    let mut words = 0;
    let mut all = 0;
    for r in reports {
        for p in &r.pairs {
            all += p.tuples;
            if p.to >= count_from {
                words += p.tuples;
            }
        }
    }
    (words, all)
}

/// Where the words go from the splits to the counts.
#[derive(Clone, Copy, PartialEq)]
enum Path {
    /// In one worker, in memory.
    Memory,
    /// To a second worker over plain TCP.
    Tcp,
    /// To a second worker over TLS.
    Tls,
}

fn run(label: &str, secs: u64, splits: u32, counts: u32, path: Path, rate: Option<u64>) {
    let two = path != Path::Memory;
    let text = topology(splits, counts, rate);
    let n = (1 + splits + counts) as usize;
    let count_from = 1 + splits;
    let assignment: Vec<u32> = (0..n as u32)
        .map(|e| u32::from(two && e >= count_from))
        .collect();
    // The workers' directories, removed at the end of the run, once the workers have stopped.
    let dir = ScratchDir::new("wc-example", "run");
    let cfg = |w: u32| WorkerConfig {
        topology_origin: "bench.toml".into(),
        topology_text: text.clone(),
        worker: w,
        assignment: assignment.clone(),
        base_dir: dir.to_path_buf(),
        work_dir: dir.join(format!("w{w}")),
        listen: "127.0.0.1:0".into(),
        started_ns: 0,
        await_state: Vec::new(),
        key: hetsched_stream::auth::topology_key("example", "wc", 0),
        encrypt: path == Path::Tls,
    };
    let mut workers = vec![Worker::start(cfg(0)).expect("worker 0 starts")];
    if two {
        workers.push(Worker::start(cfg(1)).expect("worker 1 starts"));
        workers[0].set_peers(HashMap::from([(1, workers[1].local_addr())]));
        workers[1].set_peers(HashMap::from([(0, workers[0].local_addr())]));
    }
    std::thread::sleep(Duration::from_secs(1));
    let reports: Vec<WorkerReport> = workers.iter().map(Worker::report).collect();
    let (w0, a0) = totals(&reports, count_from);
    let t0 = Instant::now();
    let mut rss = Vec::new();
    for _ in 1..secs {
        std::thread::sleep(Duration::from_secs(1));
        rss.push(workers[0].report().rss_bytes >> 20);
    }
    let reports: Vec<WorkerReport> = workers.iter().map(Worker::report).collect();
    let dt = t0.elapsed().as_secs_f64();
    let (w1, a1) = totals(&reports, count_from);
    let latency = &reports[reports.len() - 1].latency;
    let remote: u64 = reports.iter().map(|r| r.remote_out).sum();
    println!(
        "{label}: {:.0} words counted/s, {:.0} tuples/s between executors, {} tuples over TCP in all; latency p50 {} µs, p99 {} µs, max {} µs ({} tuples measured); RSS each second (MiB, whole process): {:?}",
        (w1 - w0) as f64 / dt,
        (a1 - a0) as f64 / dt,
        remote,
        latency.p50_us,
        latency.p99_us,
        latency.max_us,
        latency.count,
        rss
    );
    for w in workers {
        w.stop();
    }
}

fn main() {
    let args: Vec<u64> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let secs = args.first().copied().unwrap_or(6).max(2);
    let splits = args.get(1).copied().unwrap_or(1) as u32;
    let counts = args.get(2).copied().unwrap_or(1) as u32;
    let runs = [
        ("one worker (in memory)", Path::Memory),
        ("two workers (TCP, loopback)", Path::Tcp),
        ("two workers (TLS, loopback)", Path::Tls),
    ];
    for (label, path) in runs {
        run(
            &format!("{label}, saturated"),
            secs,
            splits,
            counts,
            path,
            None,
        );
    }
    // Below saturation, latency is the path's own, not queueing in full buffers.
    let rate = args.get(3).copied().unwrap_or(20_000);
    for (label, path) in runs {
        run(
            &format!("{label}, spout limited to {rate} sentences/s"),
            secs,
            splits,
            counts,
            path,
            Some(rate),
        );
    }
}
