//! Runs the `sweep` scenario and prints its summary (the same as `hetsched sim sweep`):
//! `cargo run --release -p hetsched-sim --example sweep`. Environment: `SWEEP_CASES` (default
//! 1000), `SWEEP_SEED` (default 1), `SWEEP_SCALE` (default 1), `SWEEP_CASES_OUT` (print every case).

use hetsched_sim::scenario::sweep::{self, SweepOptions};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut options = SweepOptions::default();
    if let Ok(s) = std::env::var("SWEEP_CASES") {
        options.cases = s.parse()?;
    }
    if let Ok(s) = std::env::var("SWEEP_SEED") {
        options.seed = s.parse()?;
    }
    if let Ok(s) = std::env::var("SWEEP_SCALE") {
        options.scale = s.parse()?;
    }
    let started = std::time::Instant::now();
    let report = sweep::run(&options, &mut |done, total| {
        eprint!("\r{done}/{total} cases   ")
    })?;
    eprintln!("\ndone in {:.1} s", started.elapsed().as_secs_f64());
    if std::env::var("SWEEP_CASES_OUT").is_ok() {
        for c in &report.cases {
            let b = c.lower_bound_s;
            let base = c.makespan_s[0].min(c.makespan_s[2]);
            println!(
                "#{:<4} {:>2} slaves {} hb {:>5.2}s {:<4} {:<40} bound {:>7.0} | {}",
                c.index,
                c.slaves,
                if c.uniform { "U" } else { "H" },
                c.heartbeat_s,
                c.workload,
                c.applications,
                b,
                c.makespan_s
                    .iter()
                    .map(|m| format!("{:.3}/{:+.1}%", m / b, (m / base - 1.0) * 100.0))
                    .collect::<Vec<_>>()
                    .join(" ")
            );
        }
    }
    println!("{}", report.render_table());
    Ok(())
}
