//! `hetsched sim accel-paper`: spec 01's experiment — MAGMA kernels and the K-means job on
//! Cluster4-0…4-4 under the three binding modes, with the paper's findings beside ours.

use clap::Args;
use hetsched_sim::scenario::accel_paper::{self, AccelPaperOptions};
use indicatif::ProgressBar;
use std::path::PathBuf;

use crate::sim::Output;

/// Options of `sim accel-paper`.
#[derive(Debug, Args)]
pub struct AccelPaperArgs {
    /// Also write CSV, JSON and SVG plots (the paper's figures 5 and 6) into this directory
    /// (created if missing).
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Tasks per kernel application (the paper: 100); at most 10,000,000.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..))]
    pub tasks: u32,
    /// Containers per node: 1 to 1024.
    #[arg(long, default_value_t = 8, value_parser = crate::binding::slots_arg)]
    pub slots: u32,
    /// Run only these kernels (LU, QR, Cholesky; comma-separated).
    #[arg(long, value_delimiter = ',')]
    pub kernels: Vec<String>,
    /// Run only these intensities (1, 2, 4, 8).
    #[arg(long, value_delimiter = ',')]
    pub intensities: Vec<u32>,
    /// Run only these data sizes in MB (1, 5, 10, 20, 50).
    #[arg(long, value_delimiter = ',')]
    pub data_mb: Vec<u32>,
    /// Images of the K-means job (0 skips it); one task per 250, at most 10,000,000 tasks.
    #[arg(long, default_value_t = 50_000)]
    pub kmeans_images: u32,
    /// Print a table or JSON.
    #[arg(long, value_enum, default_value_t)]
    pub output: Output,
}

/// Runs the scenario and prints it.
pub fn run(args: AccelPaperArgs) -> anyhow::Result<()> {
    if let Some(dir) = &args.out {
        crate::out_dir::prepare(dir)?;
    }
    for k in &args.kernels {
        if !accel_paper::KERNELS
            .iter()
            .any(|x| x.name.eq_ignore_ascii_case(k))
        {
            anyhow::bail!("--kernels: unknown kernel `{k}`: expected LU, QR or Cholesky");
        }
    }
    for i in &args.intensities {
        if !accel_paper::INTENSITIES.contains(i) {
            anyhow::bail!("--intensities: intensity {i} is not one of the paper's (1, 2, 4, 8)");
        }
    }
    for d in &args.data_mb {
        if !accel_paper::DATA_MB.contains(d) {
            anyhow::bail!(
                "--data-mb: data size {d} MB is not one of the paper's (1, 5, 10, 20, 50)"
            );
        }
    }
    let options = AccelPaperOptions {
        tasks: args.tasks,
        slots: args.slots,
        kernels: args.kernels.clone(),
        intensities: args.intensities.clone(),
        data_mb: args.data_mb.clone(),
        kmeans_images: args.kmeans_images,
        ..AccelPaperOptions::default()
    };
    let bar = ProgressBar::new(0);
    bar.set_style(crate::sim::bar_style(
        "accel-paper [{bar:40}] {pos}/{len} simulations ({elapsed})",
    ));
    let report = accel_paper::run(&options, &mut |done, total| {
        bar.set_length(total as u64);
        bar.set_position(done as u64);
    })
    .map_err(|e| {
        crate::sim::under_flag(
            e,
            &[
                "tasks",
                "slots",
                "kernels",
                "intensities",
                "data_mb",
                "kmeans_images",
            ],
        )
    })?;
    bar.finish_and_clear();
    crate::sim::emit_report(
        args.output,
        || report.render_table(),
        &report,
        args.out.as_deref(),
        |dir| report.write_outputs(dir),
    )
}
