//! Hand-computed runs that pin the disk, phase and heartbeat model down to the nanosecond.

use crate::common::{aligned, cluster, run, run_with};
use hetsched_core::policy::batch::fifo::Fifo;
use hetsched_core::policy::batch::{BatchPolicy, BatchPolicyKind};
use hetsched_core::testkit::{app, node};
use hetsched_core::time::{Time, secs};
use hetsched_core::{AppId, Assignment, NodeId, SchedulerView, Variant};
use hetsched_sim::SimConfig;

const S: Time = 1_000_000_000;

fn ends(result: &hetsched_sim::SimResult) -> Vec<(u64, Variant, Time, Time)> {
    let mut v: Vec<_> = result
        .tasks
        .iter()
        .map(|t| (t.task.0, t.variant, t.start_ns, t.end_ns))
        .collect();
    v.sort();
    v
}

#[test]
fn two_gpu_tasks_share_one_disk_and_finish_reading_together() {
    // One node, 128 MiB/s disk, 2 GPUs. Two GPU tasks of 128 MiB each start at t = 0 and read
    // together at 64 MiB/s each: both finish reading at exactly 2 s, copy 0.5 s, compute 1 s.
    let c = cluster(vec![
        node("n")
            .cores(2)
            .gpus(2, "c2050")
            .disk_mib_s(128.0)
            .build(NodeId(0)),
    ]);
    let apps = [app("g")
        .split_mib(128)
        .tasks(2)
        .gpu(1.0, 0.5, 1.0)
        .build(AppId(0))];
    let r = run(&c, &apps, BatchPolicyKind::Fifo, &aligned()).unwrap();
    assert_eq!(
        ends(&r),
        vec![
            (0, Variant::Gpu, 0, 3 * S + S / 2),
            (1, Variant::Gpu, 0, 3 * S + S / 2)
        ]
    );
    assert_eq!(r.makespan_ns, 3 * S + S / 2);
    // Base time 1 + 0.5 + 1 = 2.5 s; each took 3.5 s.
    assert!((r.average_task_delay - 1.4).abs() < 1e-12);
    assert_eq!(r.apps[0].completion_ns, 3 * S + S / 2);
    assert_eq!(r.apps[0].gpu_tasks, 2);
    // Sampled each second: both GPUs busy until the end, two readers until 2 s.
    assert_eq!(r.series.time_ns, vec![0, S, 2 * S, 3 * S, 3 * S + S / 2]);
    assert_eq!(r.series.gpus_busy, vec![2, 2, 2, 2, 0]);
    assert_eq!(r.series.tasks_reading, vec![2, 2, 0, 0, 0]);
    assert_eq!(r.series.read_bytes_per_s[1], 128.0 * 1024.0 * 1024.0);
}

#[test]
fn a_cpu_task_alone_takes_exactly_its_base_time() {
    // tdc0 = V / BW = 1 s; tpc0 = 8 s, read in 8 chunks of 16 MiB (0.125 s each) between 1 s of
    // compute each: 9 s in all, the CPU_base time.
    let c = cluster(vec![node("n").cores(1).build(NodeId(0))]);
    let apps = [app("c")
        .split_mib(128)
        .tasks(1)
        .cpu(8.0, 1.0)
        .build(AppId(0))];
    let r = run(&c, &apps, BatchPolicyKind::CpuOnly, &aligned()).unwrap();
    assert_eq!(ends(&r), vec![(0, Variant::Cpu, 0, 9 * S)]);
    assert_eq!(r.tasks[0].slowdown, 1.0);
    // The series sees 1 reader for 0.125 s of every 1.125 s; at t = 1 s the task computes.
    assert_eq!(r.series.io_tasks[1], 1);
    assert_eq!(r.series.cores_busy[1], 1);
}

#[test]
fn a_gpu_task_and_a_chunked_cpu_task_contend_for_the_disk() {
    // G: 128 MiB, kernel 1 s. C: 128 MiB in K = 2 chunks of 64 MiB, 2 s of compute.
    // 0–1 s: both read at 64 MiB/s; C's first chunk is done at 1 s, G has 64 MiB left.
    // 1–1.5 s: G alone at 128 MiB/s; it computes until 2.5 s. C computes 1–2 s, then reads its
    // second chunk alone (0.5 s, until 2.5 s) and computes 1 s: it ends at 3.5 s.
    let c = cluster(vec![node("n").cores(3).gpus(1, "c2050").build(NodeId(0))]);
    let mut wait = app("w").split_mib(0).tasks(1).cpu(1.0, 0.0).build(AppId(2));
    if let Some(cpu) = wait.cpu.as_mut() {
        cpu.request.cores = 2;
    }
    let apps = [
        app("g")
            .split_mib(128)
            .tasks(1)
            .gpu(1.0, 0.0, 1.0)
            .build(AppId(0)),
        app("c")
            .split_mib(128)
            .tasks(1)
            .cpu(2.0, 1.0)
            .build(AppId(1)),
        // Needs two cores, so it waits for G to finish (and keeps heartbeats going); reads nothing.
        wait,
    ];
    let config = SimConfig {
        cpu_read_chunks: 2,
        ..aligned()
    };
    let mut spy = Spy::default();
    let r = run_with(&c, &apps, &mut spy, &config).unwrap();
    assert_eq!(
        ends(&r),
        vec![
            (0, Variant::Gpu, 0, 2 * S + S / 2),
            (1, Variant::Cpu, 0, 3 * S + S / 2),
            (2, Variant::Cpu, 3 * S, 4 * S)
        ]
    );
    let slowdowns: Vec<f64> = r.tasks.iter().map(|t| t.slowdown).collect();
    assert_eq!(slowdowns, vec![1.25, 3.5 / 3.0, 1.0]);
    // By default a heartbeat reports the reads in flight. At 1 s both tasks are reading: G has
    // 64 MiB left and C's first chunk has just been served (it completes at 1 s, after the beat,
    // which was scheduled first). At 2 s G is computing and C ends its first compute step — its
    // second chunk is requested just after the beat — so nothing is in flight.
    let mib = 1024.0 * 1024.0;
    assert_eq!(spy.reports[0], (0, 0.0, 0));
    assert_eq!(spy.reports[1], (S, 64.0 * mib, 2));
    assert_eq!(spy.reports[2], (2 * S, 0.0, 0));

    // Counting all unread input instead, both beats also see C's unrequested second chunk.
    let remaining = SimConfig {
        io_report: hetsched_sim::IoReport::Remaining,
        ..config
    };
    let mut spy = Spy::default();
    let r2 = run_with(&c, &apps, &mut spy, &remaining).unwrap();
    assert_eq!(
        ends(&r2),
        ends(&r),
        "what is reported does not change the FIFO run"
    );
    assert_eq!(spy.reports[1], (S, 128.0 * mib, 2));
    assert_eq!(spy.reports[2], (2 * S, 64.0 * mib, 1));
}

#[test]
fn tasks_start_only_on_heartbeats() {
    // One core, two 1.5 s CPU tasks: the second starts on the beat at 2 s, not at 1.5 s.
    let c = cluster(vec![node("n").cores(1).build(NodeId(0))]);
    let apps = [app("c").split_mib(0).tasks(2).cpu(1.5, 0.0).build(AppId(0))];
    let r = run(&c, &apps, BatchPolicyKind::Fifo, &aligned()).unwrap();
    assert_eq!(
        ends(&r),
        vec![
            (0, Variant::Cpu, 0, 3 * S / 2),
            (1, Variant::Cpu, 2 * S, 7 * S / 2)
        ]
    );
}

#[test]
fn faster_gpus_and_cores_shorten_compute_only() {
    let mut n = node("n").cores(1).gpus(1, "fast").build(NodeId(0));
    n.accelerators[0].speed = 4.0;
    n.core_speed = 2.0;
    let c = cluster(vec![n]);
    let apps = [
        app("g")
            .split_mib(0)
            .tasks(1)
            .gpu(8.0, 0.0, 0.0)
            .build(AppId(0)),
        app("c").split_mib(0).tasks(1).cpu(8.0, 0.0).build(AppId(1)),
    ];
    let mut cfg = aligned();
    cfg.cpu_read_chunks = 3;
    // The GPU task holds the only core, so the CPU task waits for the beat at 2 s.
    let r = run(&c, &apps, BatchPolicyKind::Fifo, &cfg).unwrap();
    assert_eq!(
        ends(&r),
        vec![(0, Variant::Gpu, 0, 2 * S), (1, Variant::Cpu, 2 * S, 6 * S)]
    );
}

#[test]
fn heartbeat_phases_come_from_the_seed() {
    let c = cluster(vec![node("n").cores(1).build(NodeId(0))]);
    let apps = [app("c").split_mib(0).tasks(1).cpu(1.0, 0.0).build(AppId(0))];
    let start = |seed| {
        let cfg = SimConfig {
            seed,
            ..SimConfig::default()
        };
        run(&c, &apps, BatchPolicyKind::Fifo, &cfg).unwrap().tasks[0].start_ns
    };
    assert_eq!(start(7), start(7));
    assert!(start(7) < S);
    assert_ne!(start(7), start(8));
    assert_eq!(secs(1.0), S);
}

/// FIFO that records what each heartbeat reported: (time, TotalIO, #IOtask).
#[derive(Default)]
struct Spy {
    reports: Vec<(Time, f64, u32)>,
}

impl BatchPolicy for Spy {
    fn name(&self) -> &'static str {
        "spy"
    }
    fn on_node_update(
        &mut self,
        view: &mut SchedulerView,
        node: NodeId,
        now: Time,
    ) -> Vec<Assignment> {
        let n = view.node(node);
        self.reports.push((now, n.total_io_bytes, n.io_tasks));
        Fifo.on_node_update(view, node, now)
    }
}

#[test]
fn a_very_long_run_keeps_a_bounded_evenly_spaced_series() {
    // One task of 3,000,000 s (about 35 days) sampled every second: the grid coarsens to 4 s.
    let c = cluster(vec![node("n").cores(1).build(NodeId(0))]);
    let apps = [app("long")
        .split_mib(0)
        .tasks(1)
        .cpu(3_000_000.0, 0.0)
        .build(AppId(0))];
    let r = run(&c, &apps, BatchPolicyKind::Fifo, &aligned()).unwrap();
    let t = &r.series.time_ns;
    assert!(t.len() <= 1 << 20, "{}", t.len());
    assert_eq!(t[1] - t[0], 4 * S);
    assert!(t.windows(2).take(t.len() - 2).all(|w| w[1] - w[0] == 4 * S));
    assert_eq!(*t.last().unwrap(), r.makespan_ns);
    assert_eq!(r.makespan_ns, 3_000_000 * S);
    assert_eq!(r.series.cores_busy[t.len() / 2], 1);
}
