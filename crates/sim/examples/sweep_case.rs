//! Looks into one case of the `sweep` scenario: its cluster, its applications, and per policy the
//! makespan, each application's CPU/GPU split and completion, what runs over time and the last
//! tasks to end. `SWEEP_CASE=169 cargo run --release -p hetsched-sim --example sweep_case`.
//! Environment: `SWEEP_CASE` (required), `SWEEP_SEED` (default 1), `SWEEP_SCALE` (default 1),
//! `SWEEP_POLICIES` (default `fifo,hadoop-model,hdas,hdas-hetero`).

use hetsched_core::policy::batch::BatchPolicyKind;
use hetsched_core::policy::batch::bound::lower_bound;
use hetsched_core::time::to_secs;
use hetsched_core::{Application, Variant};
use hetsched_sim::scenario::sweep::{self, SweepOptions};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut options = SweepOptions::default();
    let index: usize = std::env::var("SWEEP_CASE")?.parse()?;
    if let Ok(s) = std::env::var("SWEEP_SEED") {
        options.seed = s.parse()?;
    }
    if let Ok(s) = std::env::var("SWEEP_SCALE") {
        options.scale = s.parse()?;
    }
    let policies = std::env::var("SWEEP_POLICIES")
        .unwrap_or_else(|_| "fifo,hadoop-model,hdas,hdas-hetero".into());
    let (cluster, apps, _believed, config) = sweep::case_inputs(&options, index);
    println!(
        "case #{index} (seed {}): heartbeat {:.2} s",
        options.seed,
        to_secs(config.heartbeat_interval)
    );
    for n in &cluster.nodes {
        println!(
            "  {:<8} {:>2} cores, {} GPUs of speed {:?}, disk {:.0} MiB/s",
            n.name,
            n.cores,
            n.accelerators.len(),
            n.accelerators.first().map(|a| a.speed),
            n.disk_read_bw / 1024.0 / 1024.0
        );
    }
    let describe = |a: &Application| {
        format!(
            "{:<10} {:>5} tasks, {:>5} MiB, cpu {:>6.1} s, gpu {:>6.2} s, submit {:>6.1} s",
            a.name,
            a.tasks,
            a.split_bytes >> 20,
            a.cpu.as_ref().map_or(0.0, |c| to_secs(c.compute)),
            a.gpu
                .as_ref()
                .map_or(0.0, |g| to_secs(g.compute) + to_secs(g.copy)),
            to_secs(a.submit_time)
        )
    };
    for a in &apps {
        println!("  {}", describe(a));
    }
    let bound = lower_bound(&cluster, &apps)?;
    println!("bound {:.1} s ({bound:?})", bound.lower_bound_s);
    for name in policies.split(',') {
        let kind: BatchPolicyKind = name.parse()?;
        let r = sweep::run_one(&options, index, kind)?;
        println!(
            "\n{name}: makespan {:.1} s ({:.3} × bound)",
            r.makespan_s,
            r.makespan_s / bound.lower_bound_s
        );
        for a in &r.apps {
            println!(
                "  {:<10} done {:>7.1} s, {:>5} cpu + {:>5} gpu tasks",
                a.name, a.completion_s, a.cpu_tasks, a.gpu_tasks
            );
        }
        // What runs at each tenth of the makespan, per application: GPU tasks / CPU tasks.
        let steps: u64 = std::env::var("SWEEP_STEPS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(10);
        for s in 0..steps {
            let t = r.makespan_ns / steps * s + r.makespan_ns / (2 * steps);
            let cells: Vec<String> = r
                .apps
                .iter()
                .map(|a| {
                    let running = |v: Variant| {
                        r.tasks
                            .iter()
                            .filter(|k| {
                                k.app == a.app && k.variant == v && k.start_ns <= t && k.end_ns > t
                            })
                            .count()
                    };
                    format!(
                        "{}:{}g/{}c",
                        a.name,
                        running(Variant::Gpu),
                        running(Variant::Cpu)
                    )
                })
                .collect();
            println!("  t={:>7.1}  {}", to_secs(t), cells.join("  "));
        }
        // Per node: tasks per application (GPU/CPU), and the seconds its disk needs for the bytes
        // those tasks read (the makespan is at least the largest).
        for n in &cluster.nodes {
            let mut bytes = 0.0;
            let cells: Vec<String> = apps
                .iter()
                .map(|a| {
                    let count = |v: Variant| {
                        r.tasks
                            .iter()
                            .filter(|k| k.node == n.id && k.app == a.id && k.variant == v)
                            .count()
                    };
                    let (g, c) = (count(Variant::Gpu), count(Variant::Cpu));
                    bytes += (g + c) as f64 * a.split_bytes as f64;
                    format!("{}g/{}c", g, c)
                })
                .collect();
            let end = r
                .tasks
                .iter()
                .filter(|k| k.node == n.id)
                .map(|k| k.end_ns)
                .max()
                .unwrap_or(0);
            println!(
                "  node {}: {}  disk {:>6.1} s, last end {:>7.1} s",
                n.id.0,
                cells.join(" "),
                bytes / n.disk_read_bw,
                to_secs(end)
            );
        }
        let mut last: Vec<_> = r.tasks.iter().collect();
        last.sort_by_key(|k| std::cmp::Reverse(k.end_ns));
        for k in last.iter().take(6) {
            let app = &r.apps[k.app.index()].name;
            println!(
                "  last: {app:<10} {:?} on node {} {:>7.1}–{:>7.1} s ({:.2}× base)",
                k.variant,
                k.node.0,
                to_secs(k.start_ns),
                to_secs(k.end_ns),
                k.slowdown
            );
        }
    }
    Ok(())
}
