//! Properties over random small clusters and workloads, under every policy: no node is ever
//! over-allocated, and every task of every workload runs exactly once.

use crate::common::{cluster, run};
use hetsched_core::policy::batch::BatchPolicyKind;
use hetsched_core::time::secs;
use hetsched_core::{
    Accelerator, AppId, Application, CpuVariant, GpuVariant, Node, NodeId, RackId, Resources,
};
use hetsched_sim::{SimConfig, SimError, SimResult};
use proptest::prelude::*;

/// Attribute sets a node may have, or an application require (mostly none).
fn arb_attributes() -> impl Strategy<Value = Vec<String>> {
    prop::sample::select(vec![
        vec![],
        vec![],
        vec![],
        vec!["ssd".to_string()],
        vec!["bigmem".to_string()],
        vec!["bigmem".to_string(), "ssd".to_string()],
        vec!["gpu".to_string()],
    ])
}

fn arb_node() -> impl Strategy<Value = Node> {
    (
        1u32..=8,
        0usize..=4,
        prop::sample::select(vec![0.5, 1.0, 2.0]),
        prop::sample::select(vec![0.5, 1.0, 3.0]),
        prop::sample::select(vec![32.0, 128.0, 500.0]),
        arb_attributes(),
    )
        .prop_map(
            |(cores, gpus, core_speed, gpu_speed, disk_mib, attributes)| Node {
                id: NodeId(0),
                name: "n".into(),
                rack: RackId(0),
                cores,
                core_speed,
                memory_bytes: 16 << 30,
                disk_read_bw: disk_mib * 1024.0 * 1024.0,
                net_bw: 1e9,
                net_latency: 0,
                accelerators: (0..gpus)
                    .map(|_| Accelerator {
                        kind: "gpu".into(),
                        memory_bytes: 3 << 30,
                        speed: gpu_speed,
                    })
                    .collect(),
                // `gpu` is implied by accelerators, never listed.
                attributes: attributes.into_iter().filter(|a| a != "gpu").collect(),
            },
        )
}

fn arb_app() -> impl Strategy<Value = Application> {
    (
        (0u32..3, 0u32..30, 0u64..300, 0u64..4),
        (0.0f64..20.0, 0.0f64..3.0, 0.0f64..2.0),
        (1u32..=2, 1u32..=2, 0u64..(4 << 30), -1i32..=1),
        arb_attributes(),
        prop_oneof![Just(0u32), 1u32..=3],
    )
        .prop_map(
            |(
                (which, tasks, split_mib, submit_s),
                (cpu_s, gpu_s, copy_s),
                (cores, gpus, mem, prio),
                requires,
                max_running,
            )| {
                let split = split_mib << 20;
                let read = secs(split as f64 / (128.0 * 1024.0 * 1024.0));
                Application {
                    id: AppId(0),
                    name: "a".into(),
                    priority: prio,
                    submit_time: secs(submit_s as f64),
                    split_bytes: split,
                    tasks,
                    cpu: (which != 1).then(|| CpuVariant {
                        compute: secs(cpu_s),
                        read,
                        request: Resources::new(cores, mem, 0),
                        time_limit: None,
                    }),
                    gpu: (which != 0).then(|| GpuVariant {
                        compute: secs(gpu_s),
                        copy: secs(copy_s),
                        read,
                        request: Resources::new(1, mem / 2, gpus),
                        kind: None,
                        time_limit: None,
                    }),
                    requires,
                    max_running,
                    nodes: 1,
                    user: None,
                }
            },
        )
}

pub fn arb_case() -> impl Strategy<Value = (Vec<Node>, Vec<Application>, u64, u32)> {
    (
        prop::collection::vec(arb_node(), 1..=4),
        prop::collection::vec(arb_app(), 1..=4),
        any::<u64>(),
        1u32..=8,
        prop::collection::vec(0u32..8, 4),
    )
        .prop_map(|(nodes, mut apps, seed, chunks, wide)| {
            apps.sort_by_key(|a| a.submit_time);
            for (i, a) in apps.iter_mut().enumerate() {
                a.id = AppId(i as u32);
                a.name = format!("app{i}");
                // About one application in four holds 2 or more whole nodes per task, when the
                // cluster has them: one CPU variant of one core, any node.
                if wide[i] < 2 && nodes.len() >= 2 {
                    a.nodes = 2 + wide[i] % (nodes.len() as u32 - 1);
                    a.gpu = None;
                    a.requires.clear();
                    let cpu = a.cpu.get_or_insert(CpuVariant {
                        compute: 1_000_000_000,
                        read: 0,
                        request: Resources::default(),
                        time_limit: None,
                    });
                    cpu.request = Resources::new(1, 0, 0);
                }
            }
            (nodes, apps, seed, chunks)
        })
}

/// Sweeps each node's task intervals (a task's resources return at its end, before any start at
/// the same instant) and checks the held cores, memory and GPUs never exceed the node's capacity.
fn check_capacity(nodes: &[Node], apps: &[Application], r: &SimResult) -> Result<(), String> {
    for (i, node) in nodes.iter().enumerate() {
        let mut edges: Vec<(u64, bool, Resources)> = Vec::new();
        let on_it = |t: &&hetsched_sim::TaskRecord| {
            t.node.index() == i || t.other_nodes.iter().any(|n| n.index() == i)
        };
        // A task that took no time holds nothing over time (its end would sort before its
        // own start).
        for t in r
            .tasks
            .iter()
            .filter(on_it)
            .filter(|t| t.end_ns > t.start_ns)
        {
            let app = &apps[t.app.index()];
            // A multi-node task holds each of its nodes whole.
            let req = if app.is_multi_node() {
                if t.other_nodes.len() + 1 != app.nodes as usize {
                    return Err(format!(
                        "{} ran on {} nodes",
                        app.name,
                        t.other_nodes.len() + 1
                    ));
                }
                node.capacity()
            } else {
                app.request(t.variant)
                    .ok_or("a task ran as a variant its application lacks")?
            };
            edges.push((t.start_ns, true, req));
            edges.push((t.end_ns, false, req));
        }
        edges.sort_by_key(|&(t, is_start, _)| (t, is_start));
        let mut held = Resources::default();
        for (t, is_start, req) in edges {
            held = if is_start { held + req } else { held - req };
            if !node.capacity().fits(&held) {
                return Err(format!("node {i} holds {held:?} at t = {t}"));
            }
        }
    }
    Ok(())
}

/// Sweeps each application's task intervals and checks that no more of its tasks run at once
/// than its `max_running` allows.
fn check_max_running(apps: &[Application], r: &SimResult) -> Result<(), String> {
    for a in apps.iter().filter(|a| a.max_running > 0) {
        let mut edges: Vec<(u64, bool)> = r
            .tasks
            .iter()
            .filter(|t| t.app == a.id && t.end_ns > t.start_ns)
            .flat_map(|t| [(t.start_ns, true), (t.end_ns, false)])
            .collect();
        edges.sort_unstable();
        let mut running = 0u32;
        for (t, is_start) in edges {
            running = if is_start { running + 1 } else { running - 1 };
            if running > a.max_running {
                return Err(format!(
                    "{}: {running} tasks at t = {t}, max_running {}",
                    a.name, a.max_running
                ));
            }
        }
    }
    Ok(())
}

/// Whether some application can never run: no node with the attributes it requires holds its
/// CPU task, nor (under a policy that runs GPU tasks) its GPU task.
fn legitimately_unrunnable(nodes: &[Node], apps: &[Application], kind: BatchPolicyKind) -> bool {
    apps.iter().any(|a| {
        let fits_somewhere = |req: &Resources| {
            nodes
                .iter()
                .any(|n| n.has_attributes(&a.requires) && n.capacity().fits(req))
        };
        let cpu_ok = a.cpu.as_ref().is_some_and(|c| fits_somewhere(&c.request));
        let gpu_ok = kind != BatchPolicyKind::CpuOnly
            && a.gpu.as_ref().is_some_and(|g| fits_somewhere(&g.request));
        !cpu_ok && !gpu_ok
    })
}

/// Runs the case under every policy with `config`: a workload runs (each task exactly once, on
/// nodes with its attributes, never beyond a node's capacity or its `max_running`) unless some
/// application can never run.
fn check_every_policy(
    nodes: Vec<Node>,
    apps: &[Application],
    config: &SimConfig,
) -> Result<(), TestCaseError> {
    let c = cluster(nodes);
    let nodes = c.nodes.clone();
    for kind in BatchPolicyKind::ALL {
        match run(&c, apps, kind, config) {
            Err(SimError::Unrunnable { .. }) => {
                prop_assert!(
                    legitimately_unrunnable(&nodes, apps, kind),
                    "{kind}: refused a runnable workload"
                );
            }
            Err(e) => prop_assert!(false, "{kind}: {e}"),
            Ok(r) => {
                if std::env::var_os("SIM_PROP_VERBOSE").is_some() {
                    eprintln!(
                        "{kind}: {} tasks, makespan {:.1} s, {} preempted",
                        r.total_tasks, r.makespan_s, r.preemptions
                    );
                }
                prop_assert!(!legitimately_unrunnable(&nodes, apps, kind));
                if !config.preemption {
                    prop_assert_eq!(r.preemptions, 0);
                }
                let total: u64 = apps.iter().map(|a| u64::from(a.tasks)).sum();
                let mut ids: Vec<u64> = r.tasks.iter().map(|t| t.task.0).collect();
                ids.sort_unstable();
                prop_assert_eq!(ids, (0..total).collect::<Vec<_>>(), "{}", kind);
                for t in &r.tasks {
                    let a = &apps[t.app.index()];
                    prop_assert!(
                        nodes[t.node.index()].has_attributes(&a.requires),
                        "{kind}: a task of an application requiring {:?} ran on node {} ({:?})",
                        a.requires,
                        t.node.index(),
                        nodes[t.node.index()].attributes
                    );
                    prop_assert!(t.start_ns >= a.submit_time);
                    prop_assert!(t.end_ns >= t.start_ns);
                    if kind == BatchPolicyKind::CpuOnly {
                        prop_assert_eq!(t.variant, hetsched_core::Variant::Cpu);
                    }
                }
                for (a, res) in apps.iter().zip(&r.apps) {
                    prop_assert_eq!(res.cpu_tasks + res.gpu_tasks, a.tasks);
                }
                prop_assert_eq!(
                    r.apps.iter().map(|a| u64::from(a.preempted)).sum::<u64>(),
                    r.preemptions
                );
                if let Err(e) = check_capacity(&nodes, apps, &r) {
                    prop_assert!(false, "{kind}: {e}");
                }
                if let Err(e) = check_max_running(apps, &r) {
                    prop_assert!(false, "{kind}: {e}");
                }
            }
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    #[test]
    fn no_over_allocation_and_every_task_exactly_once((nodes, apps, seed, chunks) in arb_case()) {
        let config = SimConfig { seed, cpu_read_chunks: chunks, ..SimConfig::default() };
        check_every_policy(nodes, &apps, &config)?;
    }

    /// The same under priority preemption (priorities -1 to 1, some tasks exempt for a while):
    /// a preempted task runs again, exactly once to its end, and the engine's audit of every
    /// start against its own record of the node (cores, memory, devices) holds.
    #[test]
    fn under_preemption_every_task_still_runs_exactly_once(
        (nodes, apps, seed, chunks) in arb_case(),
        exempt_s in prop_oneof![Just(0u64), 1u64..5],
    ) {
        let config = SimConfig {
            seed,
            cpu_read_chunks: chunks,
            preemption: true,
            preempt_exempt_time: secs(exempt_s as f64),
            ..SimConfig::default()
        };
        check_every_policy(nodes, &apps, &config)?;
    }
}
