//! Properties every batch policy keeps, on random clusters and workloads driven by a random
//! sequence of heartbeats and task completions (no simulator involved):
//! - no node is ever over-allocated (free + held = capacity in every dimension, devices unique);
//! - every task is dispatched and completes exactly once; nothing is lost or duplicated.

use hetsched_core::model::{AppId, Assignment, NodeId, Resources, SchedulerView, TaskId, Variant};
use hetsched_core::policy::batch::BatchPolicyKind;
use hetsched_core::testkit::{app, node};
use proptest::prelude::*;
use std::collections::HashSet;

#[derive(Debug, Clone)]
struct NodeShape {
    cores: u32,
    gpus: u32,
}

#[derive(Debug, Clone)]
struct AppShape {
    tasks: u32,
    cpu: bool,
    gpu: bool,
    split_mib: u64,
}

fn node_shape() -> impl Strategy<Value = NodeShape> {
    (1u32..=8, 0u32..=4).prop_map(|(cores, gpus)| NodeShape { cores, gpus })
}

fn app_shape() -> impl Strategy<Value = AppShape> {
    (1u32..=40, any::<bool>(), any::<bool>(), 0u64..=1024).prop_map(
        |(tasks, cpu, gpu, split_mib)| AppShape {
            tasks,
            cpu: cpu || !gpu,
            gpu,
            split_mib,
        },
    )
}

fn check_node_accounting(view: &SchedulerView, running: &[Assignment]) {
    for n in view.nodes() {
        let held = running
            .iter()
            .filter(|a| a.node == n.node.id)
            .map(|a| view.app(a.app).app.request(a.variant).unwrap_or_default())
            .fold(Resources::default(), |acc, r| acc + r);
        assert_eq!(
            held + n.free,
            n.node.capacity(),
            "node {} accounting",
            n.node.id
        );
        let mut devices = HashSet::new();
        for a in running.iter().filter(|a| a.node == n.node.id) {
            for &d in &a.devices {
                assert!(
                    devices.insert(d),
                    "device {d} of node {} assigned twice",
                    n.node.id
                );
                assert!(
                    !n.device_free[d as usize],
                    "device {d} in use but marked free"
                );
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn policies_never_over_allocate_and_complete_every_task_once(
        nodes in prop::collection::vec(node_shape(), 1..5),
        apps in prop::collection::vec(app_shape(), 1..5),
        finish_picks in prop::collection::vec(any::<prop::sample::Index>(), 400),
    ) {
        let any_gpu = nodes.iter().any(|n| n.gpus > 0);
        for kind in BatchPolicyKind::ALL {
            let mut view = SchedulerView::new();
            for (i, s) in nodes.iter().enumerate() {
                view.add_node(node(&format!("n{i}")).cores(s.cores).gpus(s.gpus, "g").build(NodeId(i as u32))).expect("node");
            }
            let mut next = 0u64;
            let mut expected = 0u64;
            for (i, s) in apps.iter().enumerate() {
                // Only workloads the policy can run: cpu-only needs CPU variants; GPU-only apps need GPUs.
                let has_cpu = s.cpu || kind == BatchPolicyKind::CpuOnly || !any_gpu;
                let mut b = app(&format!("a{i}")).tasks(s.tasks).split_mib(s.split_mib);
                if has_cpu { b = b.cpu(10.0, 1.0); }
                if s.gpu { b = b.gpu(2.0, 0.1, 1.0); }
                let first = next;
                view.add_application(b.build(AppId(i as u32)), (0..s.tasks as u64).map(|t| TaskId(first + t))).expect("app");
                next += s.tasks as u64;
                expected += s.tasks as u64;
            }
            let mut policy = kind.build();
            let mut running: Vec<Assignment> = Vec::new();
            let mut started = HashSet::new();
            let mut finished = 0u64;
            let mut now = 0u64;
            let mut picks = finish_picks.iter().cycle();
            let mut rounds = 0;
            while finished < expected {
                rounds += 1;
                prop_assert!(rounds < 100_000, "{kind}: no progress");
                for n in 0..nodes.len() {
                    for a in policy.on_node_update(&mut view, NodeId(n as u32), now) {
                        prop_assert!(started.insert(a.task), "{kind}: {} dispatched twice", a.task);
                        if kind == BatchPolicyKind::CpuOnly { prop_assert_eq!(a.variant, Variant::Cpu); }
                        running.push(a);
                    }
                    check_node_accounting(&view, &running);
                }
                prop_assert!(!running.is_empty(), "{kind}: pending work but nothing placed");
                // Finish a random running task.
                let idx = picks.next().map_or(0, |p| p.index(running.len()));
                let done = running.swap_remove(idx);
                view.task_finished(&done);
                finished += 1;
                now += 1_000_000;
                check_node_accounting(&view, &running);
            }
            prop_assert_eq!(started.len() as u64, expected);
            prop_assert!(view.all_complete());
            prop_assert!(view.apps().all(|a| a.completed == a.app.tasks && a.running == 0));
        }
    }

    #[test]
    fn requeued_tasks_run_again_and_complete_once(tasks in 1u32..30, fail_every in 2usize..5) {
        let mut view = SchedulerView::new();
        view.add_node(node("n").cores(4).gpus(1, "g").build(NodeId(0))).expect("node");
        view.add_application(app("a").tasks(tasks).cpu(1.0, 0.0).gpu(1.0, 0.0, 0.0).build(AppId(0)), (0..tasks as u64).map(TaskId)).expect("app");
        let mut policy = BatchPolicyKind::Hdas.build();
        let mut completed = HashSet::new();
        let mut step = 0usize;
        while !view.all_complete() {
            step += 1;
            prop_assert!(step < 10_000);
            for a in policy.on_node_update(&mut view, NodeId(0), step as u64) {
                if step.is_multiple_of(fail_every) {
                    view.requeue(&a);
                } else {
                    prop_assert!(completed.insert(a.task), "{} completed twice", a.task);
                    view.task_finished(&a);
                }
            }
        }
        prop_assert_eq!(completed.len(), tasks as usize);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// `hdas::gpu_backlogs` (sorted by GPU advantage, prefix sums) equals its definition
    /// computed pair by pair: each waiting application's backlog is the GPU work of every
    /// waiting application at least as GPU-friendly (within the tolerance) over the cluster's
    /// GPUs, or the accelerator nodes' disks' time to read their splits if longer; infinity for
    /// the rest.
    #[test]
    fn gpu_backlogs_equal_their_pairwise_definition(
        nodes in 1..4u32,
        apps in prop::collection::vec(
            (0..6u32, 1..60u32, 10..1200u32, 1..64u64, any::<bool>(), any::<bool>()),
            1..40,
        ),
        tolerance in 0.0..0.9f64,
    ) {
        use hetsched_core::policy::batch::hdas::gpu_backlogs;
        let mut view = SchedulerView::new();
        for i in 0..nodes {
            view.add_node(node(&format!("n{i}")).cores(6).gpus(4, "c2050").disk_mib_s(128.0).build(NodeId(i)))
                .expect("node");
        }
        let mut next = 0u64;
        let mut feasible = Vec::new();
        for (i, &(pending, gpu_s, cpu_s, split, has_gpu, fits)) in apps.iter().enumerate() {
            let mut b = app(&format!("a{i}")).tasks(pending).split_mib(split).cpu(f64::from(cpu_s), 0.5);
            if has_gpu {
                b = b.gpu(f64::from(gpu_s), 0.25, 0.5);
            }
            let tasks: Vec<TaskId> = (0..u64::from(pending)).map(|t| TaskId(next + t)).collect();
            next += u64::from(pending);
            view.add_application(b.build(AppId(i as u32)), tasks).expect("app");
            feasible.push(fits);
        }
        let got = gpu_backlogs(&view, &feasible, tolerance);
        // The definition, pair by pair.
        let speed = view.mean_device_speed();
        let gpus = f64::from(view.totals().gpus);
        let disk: f64 = view.nodes().iter().map(|n| n.node.disk_read_bw).sum();
        let queue: Vec<(usize, f64, f64, f64)> = view
            .apps()
            .filter(|a| !a.pending.is_empty() && feasible[a.app.id.index()])
            .filter_map(|a| {
                let g = a.app.gpu.as_ref()?;
                let task = g.compute as f64 / speed + g.copy as f64 + g.read as f64;
                let advantage = a.app.cpu_base_time().map_or(f64::INFINITY, |c| c as f64 / task.max(1.0));
                let n = a.pending.len() as f64;
                Some((a.app.id.index(), advantage, n * task * f64::from(g.request.gpus.max(1)), n * a.app.split_bytes as f64))
            })
            .collect();
        for a in 0..apps.len() {
            let want = match queue.iter().find(|q| q.0 == a) {
                None => f64::INFINITY,
                Some(&(_, advantage, _, _)) => {
                    let counted = queue.iter().filter(|q| q.1 >= advantage * (1.0 - tolerance));
                    let work: f64 = counted.clone().map(|q| q.2).sum();
                    let bytes: f64 = counted.map(|q| q.3).sum();
                    (work / gpus).max(bytes / disk * 1e9)
                }
            };
            let have = got.of(AppId(a as u32));
            prop_assert!(
                have == want || (have - want).abs() <= 1e-9 * want,
                "application {}: {} against {}", a, have, want
            );
        }
    }
}
