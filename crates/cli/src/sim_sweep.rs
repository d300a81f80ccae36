//! `hetsched sim sweep`: every batch policy on seeded random clusters (2–24 slaves), heartbeats
//! (0.25–10 s), ±10 % profile noise and workloads (the paper's 25 and random mixes of 2–10
//! applications), against the makespan lower bound (`hetsched_sim::scenario::sweep`).

use crate::sim::Output;
use clap::Args;
use hetsched_sim::scenario::sweep::{self, SweepOptions};
use indicatif::{ProgressBar, ProgressStyle};
use std::path::PathBuf;

/// Options of `sim sweep`.
#[derive(Debug, Args)]
pub struct SweepArgs {
    /// Number of random cases (each runs under fifo, drf, hadoop-model, hdas and hdas-hetero);
    /// 1 to 1,000,000.
    #[arg(long, default_value_t = 1000)]
    pub cases: usize,
    /// Seed of every draw; the same seed gives the same sweep.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Multiply every task count (1.0 = the documented sweep; smaller for a quick look); more
    /// than 0, at most 10.
    #[arg(long, default_value_t = 1.0, allow_negative_numbers = true)]
    pub scale: f64,
    /// Print a table or JSON (JSON includes every case).
    #[arg(long, value_enum, default_value_t)]
    pub output: Output,
    /// Also write the whole report (every case) as `report.json` into this directory (created
    /// if missing).
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
}

/// Runs `sim sweep`.
pub fn run(args: SweepArgs) -> anyhow::Result<()> {
    let out = crate::out_dir::Named::prepare(args.out.as_deref(), "report.json", &[])?;
    let options = SweepOptions {
        cases: args.cases,
        seed: args.seed,
        scale: args.scale,
        threads: 0,
    };
    let bar = ProgressBar::new(args.cases as u64);
    bar.set_style(
        ProgressStyle::with_template("sweep [{bar:40}] {pos}/{len} cases ({elapsed})")
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    let report = sweep::run(&options, &mut |done, _| bar.set_position(done as u64))
        .map_err(|e| crate::sim::under_flag(e, &["cases", "scale"]))?;
    bar.finish_and_clear();
    let json = serde_json::to_string_pretty(&report)?;
    crate::sim::emit_json(args.output, &json, &out, || {
        println!("{}", report.render_table())
    })
}
