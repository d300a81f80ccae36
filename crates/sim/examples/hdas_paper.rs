//! Runs the `hdas-paper` scenario and prints its table; with an argument, also writes the CSV,
//! JSON and SVG outputs into that directory:
//! `cargo run --release -p hetsched-sim --example hdas_paper -- docs/results/hdas`.
//! Environment: `HDAS_SCALE` (task-count multiplier, default 1), `HDAS_WORKLOADS` (e.g. `ACIP`),
//! `HDAS_SEED` (default 1, as `hetsched sim hdas-paper`), `HDAS_POLICY` (`hdas` or `hdas-hetero`),
//! `HDAS_IO_TASK_CAP=0|1` (whether eq. (3) caps `TotalIO` by `#IOtask` splits; 1 by default), `HDAS_IO_REPORT`.

use hetsched_sim::scenario::hdas_paper::{self, HdasPaperOptions};
use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut options = HdasPaperOptions::default();
    options.sim.seed = match std::env::var("HDAS_SEED") {
        Ok(s) => s.parse()?,
        Err(_) => 1,
    };
    if std::env::var("HDAS_IO_REPORT").is_ok_and(|v| v == "remaining") {
        options.sim.io_report = hetsched_sim::IoReport::Remaining;
    }
    if let Ok(v) = std::env::var("HDAS_IO_TASK_CAP") {
        options.policy_config.hdas.cap_by_io_tasks = v == "1";
    }
    if let Ok(p) = std::env::var("HDAS_POLICY") {
        options.hdas_policy = p.parse()?;
    }
    if let Ok(s) = std::env::var("HDAS_SCALE") {
        options.scale = s.parse()?;
    }
    if let Ok(w) = std::env::var("HDAS_WORKLOADS") {
        options.workloads = w.chars().collect();
    }
    let started = std::time::Instant::now();
    let report = hdas_paper::run(&options, &mut |p| {
        eprint!(
            "\r{}/{} runs ({})        ",
            p.runs_done, p.runs_total, p.last
        );
    })?;
    eprintln!("\ndone in {:.1} s", started.elapsed().as_secs_f64());
    println!("{}", report.render_table());
    if let Some(dir) = std::env::args().nth(1) {
        for path in report.write_outputs(&PathBuf::from(dir))? {
            eprintln!("wrote {}", path.display());
        }
    }
    Ok(())
}
