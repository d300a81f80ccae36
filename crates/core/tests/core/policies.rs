//! The batch policies on hand-built states, one test per rule of spec 02. Profiles follow the
//! paper's applications: NB-like (IO-heavy GPU task, 1 GiB split), BP-like (compute-bound GPU task,
//! 4 MiB split), KNN-like (read-dominated GPU task), RS-like (compute-bound, huge GPU speedup).

use hetsched_core::model::{
    AppId, Application, Assignment, NodeId, NodeReport, SchedulerView, TaskId, Variant,
};
use hetsched_core::policy::batch::BatchPolicyKind;
use hetsched_core::policy::batch::hdas::{Hdas, HdasConfig};
use hetsched_core::testkit::{app, node};
use hetsched_core::time::secs;

const GIB: f64 = 1024.0 * 1024.0 * 1024.0;

/// A paper slave node: 6 cores, 4 GPUs, 128 MiB/s disk.
fn slave(id: u32) -> hetsched_core::Node {
    node(&format!("slave{id}"))
        .cores(6)
        .gpus(4, "c2050")
        .disk_mib_s(128.0)
        .build(NodeId(id))
}

/// 1 GiB split read alone at 128 MiB/s takes 8 s.
fn nb(tasks: u32) -> hetsched_core::testkit::AppBuilder {
    app("nb")
        .tasks(tasks)
        .split_mib(1024)
        .gpu(6.84, 0.0, 8.0)
        .cpu(120.0, 8.0)
}
fn bp(tasks: u32) -> hetsched_core::testkit::AppBuilder {
    app("bp")
        .tasks(tasks)
        .split_mib(4)
        .gpu(23.6, 0.0, 0.03125)
        .cpu(900.0, 0.03125)
}
fn knn(tasks: u32) -> hetsched_core::testkit::AppBuilder {
    app("knn")
        .tasks(tasks)
        .split_mib(1024)
        .gpu(1.66, 0.0, 8.0)
        .cpu(40.0, 8.0)
}
fn rs(tasks: u32) -> hetsched_core::testkit::AppBuilder {
    app("rs")
        .tasks(tasks)
        .split_mib(16)
        .gpu(10.0, 0.0, 0.125)
        .cpu(300.0, 0.125)
}

struct Env {
    view: SchedulerView,
    next_task: u64,
}

impl Env {
    fn new(nodes: u32) -> Self {
        let mut view = SchedulerView::new();
        for i in 0..nodes {
            view.add_node(slave(i)).expect("dense node ids");
        }
        Env { view, next_task: 0 }
    }

    fn add(&mut self, builder: hetsched_core::testkit::AppBuilder) -> AppId {
        let id = AppId(self.view.app_count() as u32);
        let a: Application = builder.build(id);
        let first = self.next_task;
        self.next_task += a.tasks as u64;
        let tasks = (0..a.tasks as u64).map(move |i| TaskId(first + i));
        self.view.add_application(a, tasks).expect("dense app ids")
    }

    fn heartbeat(&mut self, kind: BatchPolicyKind, node: u32, now_s: f64) -> Vec<Assignment> {
        kind.build()
            .on_node_update(&mut self.view, NodeId(node), secs(now_s))
    }
}

fn summary(assignments: &[Assignment], names: &[&str]) -> Vec<String> {
    assignments
        .iter()
        .map(|a| format!("{}:{}", names[a.app.index()], a.variant))
        .collect()
}

#[test]
fn fifo_fills_gpus_then_cores_in_submission_order() {
    let mut env = Env::new(1);
    env.add(nb(3));
    env.add(rs(10));
    let got = env.heartbeat(BatchPolicyKind::Fifo, 0, 0.0);
    // NB's 3 tasks take 3 GPUs (each with a core); RS takes the last GPU, then the 2 cores left.
    assert_eq!(
        summary(&got, &["nb", "rs"]),
        ["nb:gpu", "nb:gpu", "nb:gpu", "rs:gpu", "rs:cpu", "rs:cpu"]
    );
    assert_eq!(env.view.node(NodeId(0)).free.cores, 0);
    let devices: Vec<u32> = got.iter().flat_map(|a| a.devices.clone()).collect();
    assert_eq!(devices, [0, 1, 2, 3], "each GPU task gets its own device");
}

#[test]
fn cpu_only_never_uses_a_gpu() {
    let mut env = Env::new(1);
    env.add(bp(10));
    let got = env.heartbeat(BatchPolicyKind::CpuOnly, 0, 0.0);
    assert_eq!(got.len(), 6);
    assert!(
        got.iter()
            .all(|a| a.variant == Variant::Cpu && a.devices.is_empty())
    );
    assert_eq!(env.view.node(NodeId(0)).free.gpus, 4);
}

#[test]
fn drf_alternates_between_equal_applications() {
    let mut env = Env::new(1);
    env.add(app("a").tasks(10).cpu(10.0, 0.0));
    env.add(app("b").tasks(10).cpu(10.0, 0.0));
    let got = env.heartbeat(BatchPolicyKind::Drf, 0, 0.0);
    assert_eq!(
        summary(&got, &["a", "b"]),
        ["a:cpu", "b:cpu", "a:cpu", "b:cpu", "a:cpu", "b:cpu"]
    );
}

#[test]
fn drf_counts_gpus_in_the_dominant_share() {
    let mut env = Env::new(1);
    env.add(rs(10)); // takes GPUs: 1 GPU of 4 is a 25 % share, more than 1 core of 6
    env.add(app("cpu").tasks(10).cpu(10.0, 0.0));
    let got = env.heartbeat(BatchPolicyKind::Drf, 0, 0.0);
    let names = summary(&got, &["rs", "cpu"]);
    // rs (tie at 0, lower id) → 1/4; cpu (0) → 1/6; cpu (1/6 < 1/4) → 2/6; rs (1/4 < 1/3) → 2/4;
    // cpu (1/3 < 1/2) → 3/6; tie at 1/2 → rs by id.
    assert_eq!(
        names,
        [
            "rs:gpu", "cpu:cpu", "cpu:cpu", "rs:gpu", "cpu:cpu", "rs:gpu"
        ]
    );
}

#[test]
fn hadoop_model_gives_gpus_to_the_highest_affinity_and_cores_by_drf() {
    let mut env = Env::new(1);
    env.add(nb(20));
    env.add(bp(20));
    let got = env.heartbeat(BatchPolicyKind::HadoopModel, 0, 0.0);
    // BP's affinity (900 s / 23.6 s) beats NB's under 4 concurrent 1 GiB reads (128 s / 38.8 s):
    // all four GPUs go to BP, and DRF gives the two cores left to NB, whose share is lowest.
    assert_eq!(
        summary(&got, &["nb", "bp"]),
        ["bp:gpu", "bp:gpu", "bp:gpu", "bp:gpu", "nb:cpu", "nb:cpu"]
    );
}

#[test]
fn hadoop_model_ignores_live_disk_load() {
    let mut env = Env::new(1);
    env.add(nb(20));
    env.view
        .node_report(
            NodeId(0),
            NodeReport {
                total_io_bytes: 8.0 * GIB,
                io_tasks: 8,
            },
        )
        .expect("node");
    let got = env.heartbeat(BatchPolicyKind::HadoopModel, 0, 0.0);
    assert_eq!(
        got.iter().filter(|a| a.variant == Variant::Gpu).count(),
        4,
        "static affinity: GPUs go out regardless"
    );
}

#[test]
fn hdas_gives_a_gpu_to_the_least_delayed_task_under_live_disk_load() {
    let mut env = Env::new(1);
    let nb_id = env.add(nb(20));
    env.add(bp(20));
    // The disk already has 2 GiB outstanding: an NB GPU task would read 3 GiB worth (24 s instead of
    // 8 s, delay 2.08×) while a BP task barely notices (delay 1.0×). BP gets every GPU.
    env.view
        .node_report(
            NodeId(0),
            NodeReport {
                total_io_bytes: 2.0 * GIB,
                io_tasks: 2,
            },
        )
        .expect("node");
    let hdas = Hdas::new(HdasConfig::default());
    assert_eq!(hdas.pick_gpu(&env.view, NodeId(0), 0), Some(AppId(1)));
    let got = env.heartbeat(BatchPolicyKind::Hdas, 0, 1.0);
    let gpu: Vec<_> = got
        .iter()
        .filter(|a| a.variant == Variant::Gpu)
        .map(|a| a.app)
        .collect();
    assert_eq!(gpu, [AppId(1); 4]);
    // The remaining cores go to NB, whose CPU progress is slowest (it has dispatched nothing).
    assert!(
        got.iter()
            .filter(|a| a.variant == Variant::Cpu)
            .all(|a| a.app == nb_id)
    );
}

#[test]
fn hdas_lets_an_io_heavy_gpu_task_in_while_the_disk_is_idle() {
    let mut env = Env::new(1);
    env.add(nb(20));
    env.add(bp(20));
    // Idle disk: both would run at their base time (delay 1.0). Tie → fewest GPU tasks run → both
    // 0 → both mixed → earliest start → NB. Its 1 GiB read now loads the disk, so BP is less
    // delayed for the remaining three GPUs: the paper's alternation of NB and BP GPU tasks.
    let got = env.heartbeat(BatchPolicyKind::Hdas, 0, 0.0);
    let gpu: Vec<_> = got
        .iter()
        .filter(|a| a.variant == Variant::Gpu)
        .map(|a| a.app.0)
        .collect();
    assert_eq!(gpu, [0, 1, 1, 1]);
}

#[test]
fn hdas_tie_breaks_prefer_fewer_gpu_tasks_then_gpu_only_then_earliest_start() {
    let hdas = Hdas::new(HdasConfig::default());
    // Two compute-bound apps with equal delay; the second is GPU-only.
    let mut env = Env::new(1);
    env.add(rs(20));
    env.add(
        app("gpu-only")
            .tasks(20)
            .split_mib(16)
            .gpu(10.0, 0.0, 0.125),
    );
    assert_eq!(
        hdas.pick_gpu(&env.view, NodeId(0), 0),
        Some(AppId(1)),
        "GPU-only first when nothing ran yet"
    );
    // Once the GPU-only app has run a GPU task, the other (fewer GPU tasks) goes first.
    env.view
        .assign(AppId(1), NodeId(0), Variant::Gpu)
        .expect("fits");
    env.view
        .node_report(NodeId(0), NodeReport::default())
        .expect("node");
    assert_eq!(hdas.pick_gpu(&env.view, NodeId(0), 0), Some(AppId(0)));

    // Same need and history: the earlier start wins.
    let mut env = Env::new(1);
    env.add(rs(20).submitted_at(secs(5.0)));
    env.add(rs(20).submitted_at(secs(1.0)));
    assert_eq!(hdas.pick_gpu(&env.view, NodeId(0), 0), Some(AppId(1)));
}

#[test]
fn hdas_gives_cores_to_the_slowest_relative_progress() {
    let hdas = Hdas::new(HdasConfig::default());
    let mut env = Env::new(2);
    env.add(app("a").tasks(50).cpu(10.0, 0.0));
    env.add(app("b").tasks(50).cpu(10.0, 0.0));
    // a has dispatched 6 tasks, b none: b's progress is slower.
    for _ in 0..6 {
        env.view
            .assign(AppId(0), NodeId(0), Variant::Cpu)
            .expect("fits");
    }
    assert_eq!(
        hdas.pick_cpu(&env.view, NodeId(1), 0, secs(10.0)),
        Some(AppId(1))
    );
}

#[test]
fn hdas_within_tolerance_prefers_the_app_that_loses_least_on_a_cpu() {
    let hdas = Hdas::new(HdasConfig::default());
    let mut env = Env::new(1);
    // Neither has dispatched anything (progress 0 = equal). RS loses 30× on a CPU, KNN only ~4×:
    // KNN's CPU speed is the larger fraction of its best, so the core goes to KNN — as in the
    // paper's workload P, where HDAS runs KNN's tasks on CPUs.
    env.add(rs(20));
    env.add(knn(20));
    assert_eq!(
        hdas.pick_cpu(&env.view, NodeId(0), 0, secs(1.0)),
        Some(AppId(1))
    );
}

#[test]
fn hdas_serves_higher_priority_levels_first() {
    let mut env = Env::new(1);
    env.add(rs(20));
    env.add(app("urgent").tasks(20).priority(5).cpu(10.0, 0.0));
    let got = env.heartbeat(BatchPolicyKind::Hdas, 0, 0.0);
    // The urgent CPU-only app takes all 6 cores before the lower level's GPU tasks could.
    assert_eq!(got.len(), 6);
    assert!(got.iter().all(|a| a.app == AppId(1)));
}

#[test]
fn gpu_kind_requests_only_match_that_kind() {
    let mut view = SchedulerView::new();
    let mut n = node("mixed")
        .cores(8)
        .gpus(2, "k80")
        .gpus(2, "a100")
        .build(NodeId(0));
    n.accelerators[2].speed = 4.0;
    view.add_node(n).expect("node");
    let mut a = rs(10).build(AppId(0));
    if let Some(g) = a.gpu.as_mut() {
        g.kind = Some("a100".into());
    }
    view.add_application(a, (0..10).map(TaskId)).expect("app");
    let got = BatchPolicyKind::Fifo
        .build()
        .on_node_update(&mut view, NodeId(0), 0);
    let gpu_devices: Vec<u32> = got
        .iter()
        .filter(|a| a.variant == Variant::Gpu)
        .flat_map(|a| a.devices.clone())
        .collect();
    assert_eq!(gpu_devices, [2, 3]);
}

#[test]
fn policy_names_round_trip() {
    for kind in BatchPolicyKind::ALL {
        assert_eq!(kind.as_str().parse::<BatchPolicyKind>(), Ok(kind));
        assert_eq!(kind.build().name(), kind.as_str());
    }
    assert!("round-robin".parse::<BatchPolicyKind>().is_err());
}

#[test]
fn hdas_hetero_keeps_gpu_friendly_work_off_cores_once_the_gpu_backlog_is_short() {
    use hetsched_core::policy::batch::hdas::gpu_backlogs;
    // One node, 4 GPUs, 6 cores. BP: 23.6 s on a GPU, 900 s on a core.
    let mut env = Env::new(1);
    env.add(bp(8));
    // 8 pending tasks × 23.6 s over 4 GPUs: the GPUs clear the backlog in 47.2 s, long before a
    // 900 s CPU task would end — so hdas-hetero leaves the cores idle, plain hdas does not.
    let backlog = gpu_backlogs(&env.view, &[true], 0.05).of(AppId(0)) / 1e9;
    assert!((backlog - 8.0 * 23.63125 / 4.0).abs() < 1e-6, "{backlog}");
    let got = env.heartbeat(BatchPolicyKind::HdasHetero, 0, 0.0);
    assert_eq!(got.len(), 4);
    assert!(got.iter().all(|a| a.variant == Variant::Gpu));

    let mut env = Env::new(1);
    env.add(bp(8));
    let got = env.heartbeat(BatchPolicyKind::Hdas, 0, 0.0);
    assert_eq!(
        got.iter().filter(|a| a.variant == Variant::Cpu).count(),
        2,
        "as published, HDAS fills the cores"
    );

    // With a long backlog (400 tasks: 2360 s of GPU work) a 900 s CPU task is pure gain.
    let mut env = Env::new(1);
    env.add(bp(400));
    let got = env.heartbeat(BatchPolicyKind::HdasHetero, 0, 0.0);
    assert_eq!(got.iter().filter(|a| a.variant == Variant::Cpu).count(), 2);
}

#[test]
fn a_gpu_backlog_counts_the_work_of_every_application_at_least_as_gpu_friendly() {
    use hetsched_core::policy::batch::hdas::gpu_backlogs;
    let mixed = |name: &str, tasks: u32, gpu_s: f64| {
        app(name)
            .tasks(tasks)
            .split_mib(4)
            .gpu(gpu_s, 0.0, 0.03125)
            .cpu(900.0, 0.03125)
    };
    // One node of 4 GPUs. GPU advantages (CPU time / GPU time): x 89.7, y and y2 44.9, z 22.5;
    // an ended application between them.
    let mut env = Env::new(1);
    env.add(mixed("x", 4, 10.0));
    env.add(mixed("y", 8, 20.0));
    let ended = env.add(mixed("ended", 3, 5.0));
    env.view.cancel_pending(ended);
    env.add(mixed("y2", 4, 20.0));
    env.add(mixed("z", 2, 40.0));
    let b = gpu_backlogs(&env.view, &[true; 5], 0.05);
    let s = |app: u32| b.of(AppId(app)) / 1e9;
    // Seconds of GPU work per task (compute + read): x 10.03125, y 20.03125, z 40.03125; over
    // 4 GPUs. The disk (56 MiB at 128 MiB/s, 0.44 s) is never the longer.
    let (x, y, y2, z) = (
        4.0 * 10.03125,
        8.0 * 20.03125,
        4.0 * 20.03125,
        2.0 * 40.03125,
    );
    let close = |got: f64, want: f64| (got - want).abs() < 1e-9 * want;
    assert!(close(s(0), x / 4.0), "x: {}", s(0));
    // Equal advantages count each other.
    assert!(close(s(1), (x + y + y2) / 4.0), "y: {}", s(1));
    assert!(close(s(3), (x + y + y2) / 4.0), "y2: {}", s(3));
    assert!(close(s(4), (x + y + y2 + z) / 4.0), "z: {}", s(4));
    assert_eq!(
        s(2),
        f64::INFINITY,
        "nothing of the ended application waits"
    );
    // Within the tolerance of y's advantage, z counts with y: a tolerance of 60 %.
    let b = gpu_backlogs(&env.view, &[true; 5], 0.6);
    assert!(close(b.of(AppId(1)) / 1e9, (x + y + y2 + z) / 4.0));
    // An application whose GPU variant fits nowhere waits for nothing, and is not counted.
    let b = gpu_backlogs(&env.view, &[true, true, true, true, false], 0.05);
    assert_eq!(b.of(AppId(4)), f64::INFINITY);
    assert!(close(b.of(AppId(1)) / 1e9, (x + y + y2) / 4.0));
}

#[test]
fn hdas_hetero_never_holds_back_cpu_only_applications() {
    let mut env = Env::new(1);
    env.add(bp(8));
    env.add(app("cpu").tasks(10).cpu(900.0, 0.0));
    let got = env.heartbeat(BatchPolicyKind::HdasHetero, 0, 0.0);
    let cpu: Vec<_> = got
        .iter()
        .filter(|a| a.variant == Variant::Cpu)
        .map(|a| a.app)
        .collect();
    assert_eq!(cpu, [AppId(1), AppId(1)]);
}

/// Kmeans-like: 40 s on a core, 6.33 s on a GPU, a 256 MiB split.
fn kmeans(tasks: u32) -> hetsched_core::testkit::AppBuilder {
    app("kmeans")
        .tasks(tasks)
        .split_mib(256)
        .gpu(6.33, 0.0, 2.0)
        .cpu(40.0, 2.0)
}

#[test]
fn hdas_hetero_gives_no_core_to_a_long_task_its_plan_keeps_on_gpus() {
    // One node: 4 GPUs (each GPU task holds a core too) and 2 spare cores. BP's 400 tasks are
    // 2360 s of GPU work, far longer than one 900 s CPU task, so the completion gate lets BP onto a
    // core; but the plan (the fluid optimum) gives both spare cores to Kmeans, whose CPU task costs
    // 6.3 GPU tasks' time against BP's 38, and none to BP. Once Kmeans has its first core it is a
    // task ahead of its even pace while BP, planned nothing, is at zero: ranking by "behind the
    // plan" alone handed BP the second core for 900 s. Ranked by how far behind each would be
    // once the task is started, BP would be 900 s ahead and Kmeans 80 s: Kmeans gets both cores.
    let mut env = Env::new(1);
    env.add(bp(400));
    env.add(kmeans(200));
    let got = env.heartbeat(BatchPolicyKind::HdasHetero, 0, 0.0);
    let names = ["bp", "kmeans"];
    let cpu: Vec<_> = summary(&got, &names)
        .into_iter()
        .filter(|s| s.ends_with(":cpu"))
        .collect();
    assert_eq!(
        cpu,
        ["kmeans:cpu", "kmeans:cpu"],
        "all: {:?}",
        summary(&got, &names)
    );
}

#[test]
fn hdas_hetero_waits_for_the_disks_its_accelerators_read_from() {
    use hetsched_core::policy::batch::hdas::gpu_backlogs;
    // A GPU node on a 64 MiB/s disk beside a CPU-only node on a 128 MiB/s disk. NB's 22 GPU
    // tasks read 22 GiB, all from the GPU node's disk: 352 s before the accelerators can have
    // read them, whatever the CPU-only node's disk could do. Counting both disks (117 s) would
    // make a 105 s CPU task look like a straggler behind the accelerators and keep NB off the
    // CPU-only node's idle cores.
    let mut view = SchedulerView::new();
    view.add_node(
        node("gpu")
            .cores(6)
            .gpus(3, "c2050")
            .disk_mib_s(64.0)
            .build(NodeId(0)),
    )
    .expect("dense node ids");
    view.add_node(node("cpu").cores(4).disk_mib_s(128.0).build(NodeId(1)))
        .expect("dense node ids");
    let a: Application = nb(22).build(AppId(0));
    view.add_application(a, (0..22).map(TaskId))
        .expect("dense app ids");
    let backlog = gpu_backlogs(&view, &[true], 0.05).of(AppId(0)) / 1e9;
    assert!((backlog - 22.0 * 1024.0 / 64.0).abs() < 1e-6, "{backlog}");
}

/// A long-lived server's view holds the retired applications of every job it purged: each
/// policy places the waiting ones as it would in a view that never held the retired ones, beat
/// after beat (the plan of `hdas-hetero` included).
#[test]
fn retired_applications_change_no_placement() {
    const RETIRED: u32 = 500;
    for kind in BatchPolicyKind::ALL {
        let mut runs = Vec::new();
        for retired in [0, RETIRED] {
            let mut env = Env::new(2);
            for i in 0..retired {
                if i % 2 == 0 {
                    // Purged live: added, its tasks ended, then retired.
                    let id = env.add(rs(1).tasks(0));
                    env.view.retire_application(id).expect("nothing waits");
                } else {
                    // Purged before a restart: added retired.
                    let id = AppId(env.view.app_count() as u32);
                    env.view.add_retired_application(id).expect("in order");
                }
            }
            for b in [nb(6), bp(8), knn(5), rs(4)] {
                env.add(b);
            }
            let mut policy = kind.build();
            let mut placed = Vec::new();
            for beat in 0..6u32 {
                let now = secs(f64::from(beat));
                let node = NodeId(beat % 2);
                let got = policy.on_node_update(&mut env.view, node, now);
                // Half of what runs ends before the next beat, so later beats place more.
                for a in got.iter().step_by(2) {
                    env.view.task_finished(a);
                }
                placed.extend(
                    got.into_iter()
                        .map(|a| (a.app.0 - retired, a.task, a.node, a.variant, a.devices)),
                );
            }
            runs.push(placed);
        }
        assert!(!runs[0].is_empty(), "{kind:?} placed nothing");
        assert_eq!(runs[0], runs[1], "{kind:?}");
    }
}

#[test]
fn the_gpu_read_of_k_tasks_of_a_huge_split_saturates_instead_of_overflowing() {
    use hetsched_core::policy::batch::predict::gpu_time_with_k;
    // A hand-made model is not bounded by the parser's 1 TiB split: k·V overflowed u64.
    let n = node("g").cores(4).gpus(2, "c2050").build(NodeId(0));
    let a = app("big")
        .gpu(1.0, 0.0, 1.0)
        .split_mib(15 << 40)
        .build(AppId(0));
    let t = gpu_time_with_k(&a, 2, &n).expect("a GPU variant");
    assert!(t.is_finite() && t > 0.0, "{t}");
}
