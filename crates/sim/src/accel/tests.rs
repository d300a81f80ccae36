//! The offload model's promises: the pipeline overlaps transfers and compute, required work never
//! lands where no accelerator is reachable, and the binding modes share accelerators as documented.

#![allow(clippy::unwrap_used)] // a failing test should panic with the error

use super::*;
use hetsched_core::time::secs;
use hetsched_core::{Accelerator, Node, NodeId, Rack, RackId};

const MB: u64 = 1_000_000;

/// Nodes `(name, rack, device speeds)`; links of 100 MB/s without latency.
fn cluster(nodes: &[(&str, u32, &[f64])]) -> Cluster {
    let racks = (0..=nodes.iter().map(|n| n.1).max().unwrap_or(0))
        .map(|i| Rack {
            id: RackId(i),
            name: format!("r{i}"),
        })
        .collect();
    let nodes = nodes
        .iter()
        .enumerate()
        .map(|(i, (name, rack, speeds))| Node {
            id: NodeId(i as u32),
            name: (*name).into(),
            rack: RackId(*rack),
            cores: 8,
            core_speed: 1.0,
            memory_bytes: 1 << 34,
            disk_read_bw: 1e9,
            net_bw: 100.0 * MB as f64,
            net_latency: 0,
            accelerators: speeds
                .iter()
                .map(|&speed| Accelerator {
                    kind: "gpu".into(),
                    memory_bytes: 1 << 32,
                    speed,
                })
                .collect(),
            attributes: Vec::new(),
        })
        .collect();
    Cluster { racks, nodes }
}

fn app(tasks: u32, need: AcceleratorNeed, gpu_s: f64, data: u64) -> AccelApp {
    AccelApp {
        name: "kernel".into(),
        tasks,
        need,
        cpu_time: secs(10.0),
        gpu_time: secs(gpu_s),
        input_bytes: data,
        output_bytes: data,
    }
}

#[test]
fn the_pipeline_overlaps_transfer_and_compute() {
    // One ANode, four NNodes, 10 tasks each, all in their containers at once. The 40 offloaded
    // tasks each ship 10 MB in and 10 MB back (0.1 s + 0.1 s at 100 MB/s): 8 s of transfer. The
    // 50 tasks compute 0.16 s each: 8 s of compute. Serially that is 16 s; pipelined, about 8 s.
    let c = cluster(&[
        ("a", 0, &[1.0]),
        ("n1", 0, &[]),
        ("n2", 0, &[]),
        ("n3", 0, &[]),
        ("n4", 0, &[]),
    ]);
    let config = AccelConfig {
        slots: 10,
        ..AccelConfig::default()
    };
    let r = simulate_accel(
        &c,
        &[app(50, AcceleratorNeed::Required, 0.16, 10 * MB)],
        &config,
    )
    .unwrap();
    assert_eq!(r.offloaded_tasks, 40);
    assert_eq!(r.accelerator_tasks, 50);
    let transfer = to_secs(r.transfer_ns);
    let compute = to_secs(r.compute_ns);
    assert!((transfer - 8.0).abs() < 0.01, "transfer {transfer}");
    assert!((compute - 8.0).abs() < 0.01, "compute {compute}");
    let larger = transfer.max(compute);
    assert!(
        r.makespan_s >= larger && r.makespan_s <= larger * 1.03,
        "makespan {} s: not close to max({transfer}, {compute}) = {larger} (sum {})",
        r.makespan_s,
        transfer + compute
    );
}

#[test]
fn a_task_runs_in_input_then_compute_then_result_order() {
    // One offloaded task alone: 0.1 s in, 0.5 s on the device, 0.1 s back, plus the path latency
    // both ways, plus the application start-up and the task launch.
    let mut c = cluster(&[("a", 0, &[1.0]), ("n", 0, &[])]);
    for n in &mut c.nodes {
        n.net_latency = 1_000_000;
    }
    let config = AccelConfig {
        slots: 1,
        app_startup: secs(2.0),
        task_launch: secs(1.0),
        ..AccelConfig::default()
    };
    let mut a = app(2, AcceleratorNeed::Required, 0.5, 10 * MB);
    a.input_bytes = 10 * MB;
    let r = simulate_accel(&c, &[a], &config).unwrap();
    // The ANode's own task: 2 + 1 + 0.5 = 3.5 s. The NNode's: 2 + 1 + (0.002 + 0.1) in; the device
    // is busy until 3.5, so it computes 3.5 → 4.0; back 0.102 → 4.102 s.
    assert_eq!(r.makespan_ns, 4_102_000_000);
}

#[test]
fn an_unbound_nnode_takes_no_required_task() {
    // Rack r1 has no ANode: its NNode stays unbound and gets none of the required work, but does
    // get `preferred` work, on its CPU.
    let c = cluster(&[("a", 0, &[1.0]), ("n", 0, &[]), ("lonely", 1, &[])]);
    let config = AccelConfig::default();
    let r = simulate_accel(&c, &[app(30, AcceleratorNeed::Required, 0.1, MB)], &config).unwrap();
    assert_eq!((r.accelerator_tasks, r.cpu_tasks), (30, 0));
    assert!(r.map.contains(&"lonely -> unbound".to_string()));
    let r = simulate_accel(&c, &[app(30, AcceleratorNeed::Preferred, 0.1, MB)], &config).unwrap();
    assert_eq!((r.accelerator_tasks, r.cpu_tasks), (20, 10));
}

#[test]
fn required_work_without_any_accelerator_is_refused() {
    let c = cluster(&[("n1", 0, &[]), ("n2", 0, &[])]);
    let err = simulate_accel(
        &c,
        &[app(3, AcceleratorNeed::Required, 0.1, MB)],
        &AccelConfig::default(),
    )
    .unwrap_err();
    assert!(err.to_string().contains("requires an accelerator"), "{err}");
}

#[test]
fn weighted_binding_gives_a_twice_faster_gpu_twice_the_work() {
    // fast (2×) and slow (1×) ANodes and four NNodes: weighted binding gives fast 3 NNodes and
    // slow 1 (users 4 : 2), and the dispatch follows the shares, so both finish together.
    let c = cluster(&[
        ("fast", 0, &[2.0]),
        ("slow", 0, &[1.0]),
        ("n1", 0, &[]),
        ("n2", 0, &[]),
        ("n3", 0, &[]),
        ("n4", 0, &[]),
    ]);
    let run = |binding| {
        let config = AccelConfig {
            binding,
            ..AccelConfig::default()
        };
        simulate_accel(&c, &[app(120, AcceleratorNeed::Required, 1.0, MB)], &config).unwrap()
    };
    let w = run(BindingMode::Weighted);
    let (fast, slow) = (&w.anodes[0], &w.anodes[1]);
    assert_eq!((fast.tasks, slow.tasks), (80, 40));
    let p = run(BindingMode::Plain);
    // Plain gives each ANode 2 NNodes, 60 tasks each: the slow one finishes last.
    assert_eq!((p.anodes[0].tasks, p.anodes[1].tasks), (60, 60));
    assert!(
        w.makespan_s < 0.75 * p.makespan_s,
        "{} vs {}",
        w.makespan_s,
        p.makespan_s
    );
}

#[test]
fn same_inputs_same_result() {
    let c = cluster(&[("a", 0, &[1.0, 1.0]), ("n1", 0, &[]), ("n2", 0, &[])]);
    let config = AccelConfig {
        binding: BindingMode::Container { slots: 3 },
        slots: 3,
        ..AccelConfig::default()
    };
    let apps = [app(17, AcceleratorNeed::Preferred, 0.3, 5 * MB)];
    assert_eq!(
        simulate_accel(&c, &apps, &config).unwrap(),
        simulate_accel(&c, &apps, &config).unwrap()
    );
}

#[test]
fn a_link_without_bandwidth_is_refused() {
    let mut c = cluster(&[("a", 0, &[1.0]), ("n", 0, &[])]);
    c.nodes[1].net_bw = 0.0;
    let err = simulate_accel(
        &c,
        &[app(2, AcceleratorNeed::Required, 0.1, MB)],
        &AccelConfig::default(),
    )
    .unwrap_err();
    assert!(
        err.to_string().contains("node `n` has a link of 0 bytes/s"),
        "{err}"
    );
}
