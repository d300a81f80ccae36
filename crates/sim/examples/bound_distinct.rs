//! Times the makespan lower bound once on 1,000 *all-distinct* nodes × 100 applications (the
//! shape of `lower_bound/1000_distinct_nodes_100_apps` in `benches/bound.rs`, where criterion
//! would need minutes per sample before the LP was made small):
//! `cargo run --release -p hetsched-sim --example bound_distinct`. `BOUND_NODES` changes the
//! node count.

use hetsched_core::policy::batch::bound::lower_bound;
use hetsched_core::testkit::{app, node};
use hetsched_core::time::secs;
use hetsched_core::{AppId, Application, Cluster, NodeId};

/// `n` nodes, no two alike: cores, core speed, disk bandwidth, accelerator count and speed all
/// vary from node to node.
pub fn distinct_cluster(n: usize) -> Cluster {
    let template = node("n").build(NodeId(0));
    let mut c = Cluster::uniform(n, &template);
    for (i, nd) in c.nodes.iter_mut().enumerate() {
        let f = i as f64;
        *nd = node(&nd.name)
            .cores(4 + (i as u32 * 7) % 61)
            .gpus((i % 5) as u32, "gpu")
            .disk_mib_s(100.0 + (f * 37.0) % 400.0 + f * 1e-3)
            .memory(64 << 30)
            .build(nd.id);
        nd.core_speed = 0.8 + 0.4 * (f * 0.618_034).fract();
        for a in &mut nd.accelerators {
            a.speed = 0.5 + 3.5 * (f * 0.381_966).fract();
        }
    }
    c
}

/// 100 applications, from IO-heavy to compute-bound (as in `benches/bound.rs`).
pub fn workload() -> Vec<Application> {
    (0..100u32)
        .map(|i| {
            let f = f64::from(i);
            let mut b = app(&format!("app{i}"))
                .split_mib(u64::from(4 + (i * 37) % 1024))
                .tasks(100 + (i * 53) % 2000)
                .submitted_at(if i % 3 == 2 { secs(f * 6.0) } else { 0 });
            if i % 7 != 0 {
                b = b.cpu(10.0 + (f * 13.0) % 900.0, 1.0);
            }
            if i % 4 != 0 || i % 7 == 0 {
                b = b.gpu(1.0 + (f * 7.0) % 30.0, 0.1, 1.0);
            }
            b.build(AppId(i))
        })
        .collect()
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let n: usize = std::env::var("BOUND_NODES").map_or(Ok(1000), |s| s.parse())?;
    let (c, apps) = (distinct_cluster(n), workload());
    let started = std::time::Instant::now();
    let b = lower_bound(&c, &apps)?;
    println!(
        "{n} distinct nodes x {} apps: bound {:.3} s ({b:?}) in {:.3} s",
        apps.len(),
        b.lower_bound_s,
        started.elapsed().as_secs_f64()
    );
    Ok(())
}
