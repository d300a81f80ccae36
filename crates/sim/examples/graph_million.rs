//! Times the graph simulator on a 1,000,000-instance workflow on 1,000 nodes under PCDDB (the
//! issue's performance target: under 30 s):
//! `cargo run --release -p hetsched-sim --example graph_million`.
//! Environment: `GRAPH_INSTANCES` (default 1000000), `GRAPH_NODES` (default 1000), `GRAPH_BALANCER`
//! (default pcddb), `GRAPH_SEED` (default 1).
//!
//! The cluster: 60 % dual-core nodes (speed 1.0), 30 % quad-core (0.8), 10 % eight-core (0.6), in
//! racks of 40, 100 µs per node (same rack: 100 µs, across racks: 200 µs). The workflow: four tasks
//! chained instance by instance (`Pre → Inter → MM5 → Post`, each a quarter of the instances,
//! the same argument range), lognormal costs with mean 1 s and cv 0.5. LT = 2, MT = 10 per core.

use hetsched_core::input::cluster::parse_cluster;
use hetsched_core::input::workflow::parse_workflow;
use hetsched_core::model::latency::LatencyMatrix;
use hetsched_core::policy::graph::{BalancerKind, Thresholds};
use hetsched_sim::graph::{GraphSimConfig, simulate_graph};
use std::fmt::Write;

fn env<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let instances: u64 = env("GRAPH_INSTANCES", 1_000_000);
    let nodes: usize = env("GRAPH_NODES", 1000);
    let balancer: BalancerKind = std::env::var("GRAPH_BALANCER")
        .ok()
        .and_then(|b| b.parse().ok())
        .unwrap_or(BalancerKind::Pcddb);
    let seed: u64 = env("GRAPH_SEED", 1);

    let mut cluster = String::new();
    let racks = nodes.div_ceil(40);
    for r in 0..racks {
        writeln!(cluster, "[[rack]]\nname = \"r{r}\"")?;
    }
    for i in 0..nodes {
        let (cores, speed) = match i % 10 {
            0 => (8, 0.6),
            1..=3 => (4, 0.8),
            _ => (2, 1.0),
        };
        writeln!(
            cluster,
            "[[node]]\nname = \"n{i:04}\"\nrack = \"r{}\"\ncores = {cores}\ncore_speed = {speed}\nlatency = \"100us\"",
            i / 40
        )?;
    }
    let per_task = instances / 4;
    let mut workflow = String::new();
    for (name, input) in [
        ("Pre", None),
        ("Inter", Some("pre")),
        ("MM5", Some("inter")),
        ("Post", Some("mm5")),
    ] {
        writeln!(
            workflow,
            "[[task]]\nname = \"{name}\"\ninstances = \"1..={per_task}\"\ncost = {{ mean = \"1s\", cv = 0.5 }}\noutputs = [\"{}\"]",
            name.to_lowercase()
        )?;
        if let Some(i) = input {
            writeln!(workflow, "inputs = [\"{i}\"]")?;
        }
    }
    let started = std::time::Instant::now();
    let cluster = parse_cluster("million-cluster.toml", &cluster)?;
    let attributes = vec![Vec::new(); cluster.nodes.len()];
    let workflow = parse_workflow("million-workflow.toml", &workflow)?.workflow;
    let latency = LatencyMatrix::from_cluster(&cluster);
    let parsed = started.elapsed();
    let config = GraphSimConfig {
        balancer,
        thresholds: Thresholds { lt: 2, mt: 10 },
        launch: cluster.nodes[0].id,
        seed,
        ..GraphSimConfig::default()
    };
    let result = simulate_graph(&cluster, &attributes, &latency, &workflow, &config)?;
    let total = started.elapsed();
    println!(
        "{} instances on {} nodes ({} cores) under {balancer}: simulated makespan {:.1} s, {} messages; \
         wall time {:.2} s ({:.2} s building inputs)",
        result.instances.len(),
        cluster.nodes.len(),
        cluster.nodes.iter().map(|n| n.cores).sum::<u32>(),
        result.makespan_s(),
        result.messages.total,
        total.as_secs_f64(),
        parsed.as_secs_f64()
    );
    Ok(())
}
