//! Does the paper's ordering (pcddb ≤ centralised ≤ static) appear for another shape of the
//! MM5-like workflow? docs/results/graphs.md, "(ii) against the workflow's shape".
//!
//! The committed workflow (`mm5_workflow_text`) is a step pipeline: every module runs once per
//! time step and consecutive modules depend step by step. This example runs the paper's
//! deployments (pcddb on Sc2, the baselines on their random 14 + 3 subset; LT = 2, MT = 10 per
//! core, plus MT = 4 and MT = 2; free messages) on four shapes, seeds 1–5:
//! - `pipeline`: the committed workflow;
//! - `barriers`: the same modules and instance counts, but each module waits for *all* of its
//!   producer (one big ready batch per module);
//! - `pipeline ×k` and `barriers ×k` (k = 4, 8, 16): k times the component calls per step (heavy
//!   load: ready instances exceed the 520 that MT × cores admits).
//!
//! ```sh
//! cargo run --release -p hetsched-sim --example pcddb_shapes
//! cargo run --release -p hetsched-sim --example pcddb_shapes -- --write DIR   # + DIR/barriers-x4-48h.toml, …
//! ```

use hetsched_core::input::workflow::parse_workflow;
use hetsched_core::policy::graph::{BalancerKind, Thresholds};
use hetsched_sim::scenario::pcddb_paper::{Setup, mm5_workflow_text};

/// `mm5_workflow_text(steps)` reshaped: calls per step × `scale`; with `barriers`, every
/// per-step module becomes one plain count of instances, so a consumer waits for all of its
/// producer (the data-flow rule: different argument ranges → all).
fn shaped(steps: u32, scale: u32, barriers: bool) -> String {
    let mut out = String::new();
    let mut range: Option<u32> = None;
    for line in mm5_workflow_text(steps).lines() {
        if let Some(n) = line
            .strip_prefix("instances = \"1..=")
            .and_then(|r| r.strip_suffix('"'))
            .and_then(|n| n.parse::<u32>().ok())
        {
            range = Some(n);
            if barriers {
                continue;
            }
        } else if let Some(p) = line
            .strip_prefix("processes = ")
            .and_then(|p| p.parse::<u32>().ok())
        {
            // Only the per-step modules scale; Topographic's terrain tiles stay 8 × 4.
            match (barriers, range.take()) {
                (true, Some(n)) => out += &format!("instances = {}\n", n * p * scale),
                (false, Some(_)) => out += &format!("processes = {}\n", p * scale),
                (_, None) => out += &format!("processes = {p}\n"),
            }
            continue;
        }
        out += line;
        out.push('\n');
    }
    out
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let setup = Setup::load()?;
    // `-- --write DIR`: also write each shape's workflow files (e.g. for `hetsched sim graph`).
    let args: Vec<String> = std::env::args().collect();
    let write_dir = match args.get(1).map(String::as_str) {
        Some("--write") => Some(args.get(2).ok_or("--write needs a directory")?.clone()),
        Some(other) => return Err(format!("unknown argument `{other}` (only --write DIR)").into()),
        None => None,
    };
    let shapes = [
        ("pipeline", 1, false),
        ("barriers", 1, true),
        ("pipeline ×4", 4, false),
        ("barriers ×4", 4, true),
        ("pipeline ×8", 8, false),
        ("barriers ×8", 8, true),
        ("pipeline ×16", 16, false),
        ("barriers ×16", 16, true),
    ];
    println!(
        "| shape | input | instances | static | centralised | pcddb MT = 10 | MT = 4 | MT = 2 | ordering holds (mean; seeds of 5), MT 10 / 4 / 2 |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    for (shape, scale, barriers) in shapes {
        for hours in [12u32, 48] {
            let text = shaped(hours / 2, scale, barriers);
            if let Some(dir) = &write_dir {
                let name = format!("{}-{hours}h.toml", shape.replace(" ×", "-x"));
                std::fs::write(std::path::Path::new(dir).join(name), &text)?;
            }
            let wf = parse_workflow("mm5.toml", &text)?.workflow;
            let mut runs: Vec<Vec<f64>> = vec![Vec::new(); 5];
            for seed in 1..=5u64 {
                let cases = [
                    (BalancerKind::Static, 10),
                    (BalancerKind::Centralised, 10),
                    (BalancerKind::Pcddb, 10),
                    (BalancerKind::Pcddb, 4),
                    (BalancerKind::Pcddb, 2),
                ];
                for (k, (balancer, mt)) in cases.into_iter().enumerate() {
                    let members = setup.deployment(balancer, seed);
                    let thresholds = Thresholds { lt: 2.min(mt), mt };
                    let r = setup.run(&wf, balancer, thresholds, &members, setup.launch, seed)?;
                    runs[k].push(r.makespan_s());
                }
            }
            let mean = |k: usize| runs[k].iter().sum::<f64>() / runs[k].len() as f64;
            let holds = |p: usize| {
                let on_mean = mean(p) <= mean(1) && mean(1) <= mean(0);
                let seeds = (0..5)
                    .filter(|&s| runs[p][s] <= runs[1][s] && runs[1][s] <= runs[0][s])
                    .count();
                format!("{} ({seeds})", if on_mean { "yes" } else { "no" })
            };
            println!(
                "| {shape} | {hours} h | {} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {} / {} / {} |",
                wf.total_instances(),
                mean(0),
                mean(1),
                mean(2),
                mean(3),
                mean(4),
                holds(2),
                holds(3),
                holds(4)
            );
        }
    }
    Ok(())
}
