//! `hetsched sim stream-paper`: spec 04's stream placers compared on five topologies and a
//! 10-node heterogeneous cluster, with a stream simulation under a rate script.

use clap::Args;
use hetsched_core::input::Duration;
use hetsched_core::policy::stream::one_phase::Refine;
use hetsched_sim::scenario::stream_paper::{MAX_SURGE, StreamPaperOptions, run};
use std::path::PathBuf;

/// Options of `sim stream-paper`.
#[derive(Debug, Args)]
pub struct StreamPaperArgs {
    /// Seed of the latency sampler.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Simulated time of each run, e.g. "120s"; more than 0, at most 1h. The model steps every
    /// 100 ms; a duration that is not a whole number of steps ends with a shorter step, so
    /// throughput and every average are over exactly the time asked for.
    #[arg(long, default_value = "120s")]
    pub duration: Duration,
    /// Rate factor of the surge (from 40 s to 80 s): 0 to 100 (at 100 every placement's busiest
    /// node is loaded over 40 times its capacity).
    #[arg(long, default_value_t = 1.6, allow_negative_numbers = true)]
    pub surge: f64,
    /// One-phase's relative traffic gain threshold for rescheduling (0.1 = 10 %); 0 or more.
    #[arg(long, default_value_t = 0.1, allow_negative_numbers = true)]
    pub gain_threshold: f64,
    /// One-phase's maximum utilisation of a node's CPU (0 < x ≤ 1), the headroom its
    /// self-tuning leaves.
    #[arg(long, default_value_t = 0.9, allow_negative_numbers = true)]
    pub max_utilisation: f64,
    /// One-phase's refinement after best-schedule: local-search (default) or none (the
    /// patent's algorithm alone).
    #[arg(long, value_name = "NAME", default_value = "local-search")]
    pub refine: Refine,
    /// Print a table or JSON.
    #[arg(long, value_enum, default_value_t)]
    pub output: crate::sim::Output,
    /// Also write the report as `report.json` into this directory (created if missing).
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
}

/// Runs `sim stream-paper`.
pub fn run_cmd(args: StreamPaperArgs) -> anyhow::Result<()> {
    let out = crate::out_dir::Named::prepare(args.out.as_deref(), "report.json", &[])?;
    if !(0.0..=MAX_SURGE).contains(&args.surge) {
        anyhow::bail!(
            "--surge must be from 0 to {MAX_SURGE} (a factor on the declared rates; at \
             {MAX_SURGE} every placement's busiest node is loaded over 40 times its capacity), \
             got {}",
            hetsched_core::text::number(args.surge)
        );
    }
    if !(args.max_utilisation > 0.0 && args.max_utilisation <= 1.0) {
        anyhow::bail!(
            "--max-utilisation must be in (0, 1], got {}",
            hetsched_core::text::number(args.max_utilisation)
        );
    }
    hetsched_core::policy::stream::reschedule::check_gain_threshold(
        "--gain-threshold",
        args.gain_threshold,
    )?;
    if args.duration.0 == 0 {
        anyhow::bail!(
            "--duration must be more than 0 (e.g. \"120s\"): a run of no time measures nothing"
        );
    }
    if args.duration.0 > hetsched_sim::scenario::stream_paper::MAX_DURATION {
        anyhow::bail!(
            "--duration must be at most 1h (each of the twenty runs steps through it every \
             100 ms; the paper's runs are 120s), got {} s",
            args.duration.0 as f64 / 1e9
        );
    }
    let mut options = StreamPaperOptions {
        one_phase_max_utilisation: args.max_utilisation,
        one_phase_refine: args.refine,
        surge: args.surge,
        ..StreamPaperOptions::default()
    };
    options.sim.seed = args.seed;
    options.sim.duration = args.duration.0;
    options.reschedule.gain_threshold = args.gain_threshold;
    let report = run(&options, &mut |done, total, last| {
        eprint!("\rstream-paper {done}/{total} {last:<40}");
    })?;
    eprintln!();
    let json = serde_json::to_string_pretty(&report)?;
    crate::sim::emit_json(args.output, &json, &out, || {
        println!("{}", report.render_table())
    })
}
