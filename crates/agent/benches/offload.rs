//! Costs of accelerator offload (spec 01, issue 11) on loopback: an ANode's accelerator service
//! (one device) and an NNode's client in one process, talking gRPC over 127.0.0.1.
//!
//! - `offload_overhead`: one task at a time. `local_true` runs `true` as the agent runs any task
//!   (the baseline: process start-up); `offload_empty_true` ships the same task with no files;
//!   `offload_1mb_in_1mb_out_true` ships 1 MB in and 1 MB back (the declared output is the input,
//!   which the ANode's staging directory holds). Offload overhead beyond the transfer =
//!   `offload_empty_true` − `local_true`; the transfer of 1 MB each way = `offload_1mb…` −
//!   `offload_empty_true`.
//! - `pipeline_overlap`: 10 tasks, each shipping `HETSCHED_OVERLAP_MB` MB of input (default 24) and
//!   running `sleep HETSCHED_OVERLAP_SLEEP` (default 0.05), chosen so that one task's transfer and its compute take about the same
//!   time: `transfer_only` (the 10 shipped one after another, command `true`), `compute_only` (the
//!   10 sleeps one after another, no input), and `pipelined` (the 10 shipped at once: the service
//!   receives while its device computes). Overlap shows as `pipelined` well below
//!   `transfer_only + compute_only`.
//!
//! Run: `cargo bench -p hetsched-agent --bench offload`.

use criterion::{Criterion, criterion_group, criterion_main};
use hetsched_agent::accel::offload::{self, Client, Target};
use hetsched_agent::accel::{Pipeline, service::AccelListener};
use hetsched_agent::launch::{self, Kill};
use hetsched_core::testkit::ScratchDir;
use hetsched_proto as pb;
use std::path::Path;
use std::time::Duration;
use tokio::sync::oneshot;

const TOKEN: &str = "bench-token";
/// The ANode's offload key, as its server would give it: every offload carries its ticket.
const KEY: [u8; 32] = [5; 32];
/// Input per task in the overlap group, MB (`HETSCHED_OVERLAP_MB`, default 24).
fn overlap_mb() -> usize {
    std::env::var("HETSCHED_OVERLAP_MB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(24)
}

/// Compute per task in the overlap group, a `sleep` argument (`HETSCHED_OVERLAP_SLEEP`, default
/// 0.05 s).
fn overlap_sleep() -> String {
    std::env::var("HETSCHED_OVERLAP_SLEEP").unwrap_or_else(|_| "0.05".into())
}

fn never() -> oneshot::Receiver<Kill> {
    let (tx, rx) = oneshot::channel();
    std::mem::forget(tx);
    rx
}

fn spec(dir: &Path, shell: &str, inputs: &[&str], outputs: &[&str]) -> pb::TaskSpec {
    pb::TaskSpec {
        key: 1,
        job_id: 1,
        app: "bench".into(),
        variant: "gpu".into(),
        argv: vec!["sh".into(), "-c".into(), shell.into()],
        workdir: dir.display().to_string(),
        inputs: inputs.iter().map(|s| s.to_string()).collect(),
        outputs: outputs.iter().map(|s| s.to_string()).collect(),
        ..Default::default()
    }
}

/// Attempt 1 of a task of spec `sp` never shipped before (an ANode runs each attempt once),
/// from `nnode` to `anode`, with the ticket its server would sign.
fn assignment(sp: &pb::TaskSpec) -> pb::Assignment {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    let task = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let now_ms = hetsched_agent::launch::now_ns() / 1_000_000;
    let ticket = pb::ticket::seal_offload(
        &KEY,
        &pb::ticket::Offload {
            task_id: task,
            attempt: 1,
            run_as: "",
            nnode: "nnode",
            anode: "anode",
            runs: pb::ticket::offload_digest(sp, 0, None, 1),
        },
        pb::ticket::Validity {
            issued_ms: now_ms,
            expires_ms: now_ms + 3_600_000,
            key_epoch: 0,
        },
    );
    pb::Assignment {
        task_id: task,
        attempt: 1,
        index: 0,
        devices: vec![0],
        spec: 1,
        offload_ticket: ticket,
        ..Default::default()
    }
}

struct Setup {
    rt: tokio::runtime::Runtime,
    client: Client,
    _listener: AccelListener,
    /// The ANode's and NNode's directories: removed last, after the runtime and the listener
    /// that write into it (fields drop in this order).
    dir: ScratchDir,
}

fn setup() -> Setup {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let dir = ScratchDir::new("offload-bench", "setup");
    let (listener, client) = rt.block_on(async {
        let p = Pipeline::start(
            "anode",
            hetsched_agent::launch::unnamed_devices(1),
            &dir.join("anode"),
            Default::default(),
            launch::DEFAULT_KILL_GRACE,
            false,
            Default::default(),
        )
        .expect("pipeline");
        p.set_offload_keys(&[pb::OffloadKey {
            epoch: 0,
            key: KEY.to_vec(),
        }]);
        let l = AccelListener::bind("127.0.0.1:0".parse().expect("addr"), p, TOKEN, None)
            .await
            .expect("listener");
        let c = Client::new(
            Target {
                anode: "anode".into(),
                address: format!("http://{}", l.addr),
            },
            TOKEN,
            None,
        )
        .expect("client");
        (l, c)
    });
    std::fs::write(dir.join("in.dat"), vec![7u8; 1 << 20]).expect("1 MB input");
    std::fs::write(dir.join("big.dat"), vec![7u8; overlap_mb() << 20]).expect("overlap input");
    Setup {
        rt,
        client,
        _listener: listener,
        dir,
    }
}

fn run_one(s: &Setup, sp: &pb::TaskSpec) {
    let r = s.rt.block_on(offload::run(
        &s.client,
        &assignment(sp),
        sp,
        "nnode",
        &s.dir.join("nnode"),
        false,
        never(),
    ));
    assert!(r.success, "{r:?}");
}

fn run_many(s: &Setup, sp: &pb::TaskSpec, n: u64, concurrent: bool) {
    s.rt.block_on(async {
        if concurrent {
            let mut h = Vec::new();
            for _ in 0..n {
                let (c, sp, dir) = (s.client.clone(), sp.clone(), s.dir.join("nnode"));
                h.push(tokio::spawn(async move {
                    offload::run(&c, &assignment(&sp), &sp, "nnode", &dir, false, never()).await
                }));
            }
            for x in h {
                assert!(x.await.expect("join").success);
            }
        } else {
            for _ in 0..n {
                let r = offload::run(
                    &s.client,
                    &assignment(sp),
                    sp,
                    "nnode",
                    &s.dir.join("nnode"),
                    false,
                    never(),
                )
                .await;
                assert!(r.success, "{r:?}");
            }
        }
    });
}

fn overhead(c: &mut Criterion) {
    let s = setup();
    let mut g = c.benchmark_group("offload_overhead");
    g.sample_size(30).measurement_time(Duration::from_secs(5));
    let local = spec(&s.dir, "true", &[], &[]);
    let work = s.dir.join("local");
    g.bench_function("local_true", |b| {
        b.iter(|| {
            let r = s.rt.block_on(launch::run(
                &assignment(&local),
                &local,
                &[],
                "anode",
                &work,
                &work,
                never(),
                launch::DEFAULT_KILL_GRACE,
                false,
                |_| {},
            ));
            assert!(r.success);
        })
    });
    let empty = spec(&s.dir, "true", &[], &[]);
    g.bench_function("offload_empty_true", |b| b.iter(|| run_one(&s, &empty)));
    let mb = spec(&s.dir, "true", &["in.dat"], &["in.dat"]);
    g.bench_function("offload_1mb_in_1mb_out_true", |b| {
        b.iter(|| run_one(&s, &mb))
    });
    g.finish();
}

fn overlap(c: &mut Criterion) {
    let s = setup();
    let mut g = c.benchmark_group("pipeline_overlap");
    g.sample_size(10).measurement_time(Duration::from_secs(10));
    let transfer = spec(&s.dir, "true", &["big.dat"], &[]);
    g.bench_function("transfer_only", |b| {
        b.iter(|| run_many(&s, &transfer, 10, false))
    });
    let compute = spec(&s.dir, &format!("sleep {}", overlap_sleep()), &[], &[]);
    g.bench_function("compute_only", |b| {
        b.iter(|| run_many(&s, &compute, 10, false))
    });
    let both = spec(
        &s.dir,
        &format!("sleep {}", overlap_sleep()),
        &["big.dat"],
        &[],
    );
    g.bench_function("pipelined", |b| b.iter(|| run_many(&s, &both, 10, true)));
    g.finish();
}

#[allow(missing_docs)]
mod group {
    use super::*;
    criterion_group!(benches, overhead, overlap);
}
criterion_main!(group::benches);
