//! `hetsched sim divisible …` (one divisible load on your own star platform under one planner)
//! and `hetsched sim divisible-paper` (spec 03's experiment); see `docs/divisible.md`.

use crate::sim::Output;
use anyhow::{Context, bail};
use clap::Args;
use comfy_table::{Table, presets::UTF8_FULL_CONDENSED};
use hetsched_core::input::star_platform::parse_star_platform;
use hetsched_core::policy::divisible::{Algo, PlanOptions, Weights, plan};
use hetsched_core::text::{count, number};
use hetsched_sim::divisible::{ScheduleExport, StarConfig, StarRun, check_load, simulate};
use hetsched_sim::scenario::divisible_paper;
use std::path::PathBuf;

/// Options of `sim divisible`.
#[derive(Debug, Args)]
pub struct DivisibleArgs {
    /// Star platform (TOML, one `[[worker]]` table per worker), e.g.
    /// examples/platform-divisible-paper.toml.
    #[arg(long, value_name = "FILE")]
    pub platform: PathBuf,
    /// Total load W, in the platform's load units (e.g. matrix rows).
    #[arg(long, value_name = "W", allow_negative_numbers = true)]
    pub load: f64,
    /// Planner: umr, umrlm, rumr or static.
    #[arg(long)]
    pub algo: Algo,
    /// Relative prediction error E in [0, 1): every transfer and compute is off by a factor
    /// drawn uniformly from [1-E, 1+E]; RUMR also sizes its second phase from it.
    #[arg(long, default_value_t = 0.0, allow_negative_numbers = true)]
    pub error: f64,
    /// Seed of the error stream.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// UMRLM worker order: weight of speed (default 0.8; other planners ignore it, with a note).
    #[arg(long, allow_negative_numbers = true)]
    pub c1: Option<f64>,
    /// UMRLM worker order: weight of link rate (default 0.1; other planners ignore it).
    #[arg(long, allow_negative_numbers = true)]
    pub c2: Option<f64>,
    /// UMRLM worker order: weight of memory (default 0.1; other planners ignore it).
    #[arg(long, allow_negative_numbers = true)]
    pub c3: Option<f64>,
    /// Also write the schedule (every send, times in seconds) as JSON to this file.
    #[arg(long, value_name = "OUT.json")]
    pub export_schedule: Option<PathBuf>,
    /// Print a table or JSON.
    #[arg(long, value_enum, default_value_t)]
    pub output: Output,
    /// Also write the summary (the JSON `--output json` prints) as `divisible.json` into this
    /// directory (created if missing).
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
}

/// Options of `sim divisible-paper`.
#[derive(Debug, Args)]
pub struct DivisiblePaperArgs {
    /// Also write CSV, JSON and SVG plots into this directory (created if missing).
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Seeds per error level in the RUMR-vs-UMR robustness runs: 1 to 10,000.
    #[arg(long, default_value_t = 100)]
    pub seeds: u64,
    /// Print a table or JSON.
    #[arg(long, value_enum, default_value_t)]
    pub output: Output,
}

/// `sim divisible`.
pub fn divisible_cmd(args: DivisibleArgs) -> anyhow::Result<()> {
    let inputs = [("--platform", args.platform.as_path())];
    let out = crate::out_dir::Named::prepare(args.out.as_deref(), "divisible.json", &inputs)?;
    out.check_file(
        "--export-schedule",
        args.export_schedule.as_deref(),
        &inputs,
    )?;
    let origin = args.platform.display().to_string();
    let text = crate::input_file::read_input(&args.platform)?;
    let platform = parse_star_platform(&origin, &text)?;
    if !(args.load.is_finite() && args.load > 0.0) {
        bail!(
            "--load must be a positive number of load units, got {}",
            number(args.load)
        );
    }
    if !(args.error.is_finite() && (0.0..1.0).contains(&args.error)) {
        bail!("--error must be in [0, 1), got {}", number(args.error));
    }
    for (flag, weight) in [("--c1", args.c1), ("--c2", args.c2), ("--c3", args.c3)] {
        let Some(weight) = weight else { continue };
        if !(weight.is_finite() && weight >= 0.0) {
            bail!(
                "{flag} must be a finite number, 0 or more, got {}",
                number(weight)
            );
        }
        // Only UMRLM orders its workers by these weights: a weight given to another planner
        // changes nothing, which a note says rather than silence.
        if args.algo != Algo::Umrlm {
            eprintln!(
                "note: {flag} is ignored by {} (only umrlm orders workers by weights)",
                args.algo
            );
        }
    }
    check_load(&platform, args.load)
        .with_context(|| format!("--load is too large for {origin}"))?;
    let options = PlanOptions {
        weights: Weights {
            c1: args.c1.unwrap_or(Weights::default().c1),
            c2: args.c2.unwrap_or(Weights::default().c2),
            c3: args.c3.unwrap_or(Weights::default().c3),
        },
        error: args.error,
    };
    let plan = plan(args.algo, &platform, args.load, &options)?;
    let config = StarConfig {
        error: args.error,
        seed: args.seed,
    };
    let run = simulate(&platform, &plan, args.load, &config).with_context(|| {
        format!(
            "{} cannot run {} load units on {origin}",
            args.algo,
            number(args.load)
        )
    })?;
    if let Some(path) = &args.export_schedule {
        let json = serde_json::to_string_pretty(&ScheduleExport::from(&run))?;
        crate::out_dir::write_text(path, &json)?;
    }
    // With the prediction error and its seed, which (with the platform, load and algorithm)
    // make the run again.
    let mut v = summary(&run);
    v["error"] = args.error.into();
    v["seed"] = args.seed.into();
    let json = serde_json::to_string_pretty(&v)?;
    crate::sim::emit_json(args.output, &json, &out, || print_run(&run))
}

fn summary(run: &StarRun) -> serde_json::Value {
    let busy = run.busy_fractions();
    let mut chunks = vec![0u64; run.platform.workers.len()];
    let mut load = vec![0.0_f64; run.platform.workers.len()];
    for s in &run.sends {
        chunks[s.worker as usize] += 1;
        load[s.worker as usize] += s.size();
    }
    serde_json::json!({
        "algo": run.algo,
        "load": run.load,
        "makespan": run.makespan_s(),
        // As `sim run`, `compare` and `accel` name it.
        "makespan_s": run.makespan_s(),
        "rounds": run.rounds(),
        "sends": run.sends.len(),
        "lower_bound": run.lower_bound_s(),
        // The same, named in seconds as `makespan_s` is.
        "lower_bound_s": run.lower_bound_s(),
        "workers": run.platform.workers.iter().enumerate().map(|(i, w)| serde_json::json!({
            "name": w.name,
            "chunks": chunks[i],
            "load": load[i],
            "busy": busy[i],
            // The same fraction under a name that says so, and the seconds it stands for, as
            // `sim graph` and `sim run` report busy time.
            "busy_fraction": busy[i],
            "busy_s": busy[i] * run.makespan_s(),
        })).collect::<Vec<_>>(),
    })
}

fn print_run(run: &StarRun) {
    let lb = run.lower_bound_s();
    println!(
        "{}: makespan {:.3} s over {} ({}); lower bound W/ΣS = {:.3} s (makespan {:.3}× it)",
        run.algo,
        run.makespan_s(),
        count(run.rounds(), "round"),
        count(run.sends.len() as u64, "send"),
        lb,
        run.makespan_s() / lb
    );
    let v = summary(run);
    let mut table = Table::new();
    table.load_preset(UTF8_FULL_CONDENSED);
    table.set_header(["worker", "chunks", "load", "busy"]);
    for w in v["workers"].as_array().into_iter().flatten() {
        table.add_row([
            w["name"].as_str().unwrap_or_default().to_string(),
            w["chunks"].to_string(),
            format!("{:.1}", w["load"].as_f64().unwrap_or_default()),
            format!("{:.1} %", w["busy"].as_f64().unwrap_or_default() * 100.0),
        ]);
    }
    println!("{table}");
}

/// `sim divisible-paper`.
pub fn divisible_paper_cmd(args: DivisiblePaperArgs) -> anyhow::Result<()> {
    if let Some(dir) = &args.out {
        crate::out_dir::prepare(dir)?;
    }
    if args.seeds == 0 {
        bail!("--seeds must be at least 1");
    }
    if args.seeds > divisible_paper::MAX_SEEDS {
        bail!(
            "--seeds must be at most {}, got {} (each seed is 45 simulations)",
            divisible_paper::MAX_SEEDS,
            args.seeds
        );
    }
    let options = divisible_paper::DivisiblePaperOptions {
        seeds: args.seeds,
        ..Default::default()
    };
    let report = divisible_paper::run(&options)?;
    crate::sim::emit_report(
        args.output,
        || report.render_table(),
        &report,
        args.out.as_deref(),
        |dir| report.write_outputs(dir),
    )
}
