//! Spec 03's experiment (the seed's §4): matrix rows (1,500 doubles each) sent from a master to
//! the 15 worker PCs of a 16-PC cluster over 100 Mbit/s Ethernet, under UMR and UMRLM; plus RUMR
//! vs UMR under prediction errors (beyond the seed).
//!
//! The platform ([`paper_platform`]): link rate `10^8 / (1500·64)` ≈ 1,041.7 rows/s for every
//! worker; memory caps as the seed gives them (1,100 / 825 / 550 rows). The seed gives no speeds
//! or latencies; hetsched assumes **25 rows/s per GHz of P4 clock** (a row times a 1,500×1,500
//! matrix is 4.5 Mflop: ~110 Mflop/s per GHz, a naive C loop on a P4), so 75 / 60 / 50 rows/s
//! for the 3.0 / 2.4 / 2.0 GHz machines — slow enough that all 15 workers fit on the link
//! (Σ S/B = 0.89 < 1) as the seed's runs used them all — and `cLat = 10 ms`, `nLat = 0.5 ms`.
//! The first `k` workers of the list make the `k`-worker platform.
//!
//! Parts: makespan vs rows at 6/9/12/15 workers (UMR marked infeasible where it overflows),
//! makespan vs worker count at 10,000 rows, the `(c1, c2, c3)` orderings at 15 workers, the
//! smallest memory raised at 15 workers and 10,000 rows, and RUMR vs UMR (and static) under
//! errors 0…0.4 over `seeds` seeds on memory-unlimited copies of the platform.

use crate::divisible::{DivisibleError, StarConfig, simulate};
use crate::error::SimError;
use crate::report::plot;
use comfy_table::{Table, presets::UTF8_FULL_CONDENSED};
use hetsched_core::policy::divisible::{
    Algo, PlanOptions, StarPlatform, StarWorker, Weights, plan,
};
use serde::Serialize;
use std::path::{Path, PathBuf};

/// Rows a 100 Mbit/s link carries per second (1,500 doubles of 64 bits per row).
pub const LINK_ROWS_PER_S: f64 = 1e8 / (1500.0 * 64.0);
/// Assumed rows per second per GHz of P4 clock (module doc).
pub const ROWS_PER_S_PER_GHZ: f64 = 25.0;

/// The 15 workers in the order the `k`-worker platforms take them: `(name, GHz, memory rows)`.
pub const WORKERS: [(&str, f64, f64); 15] = [
    ("hp-dx-3.0-a", 3.0, 1100.0),
    ("hp-dx-3.0-b", 3.0, 1100.0),
    ("ibm-m-2.4-1g-a", 2.4, 1100.0),
    ("ibm-m-2.4-1g-b", 2.4, 1100.0),
    ("hp-dx-3.0-c", 3.0, 825.0),
    ("ibm-m-2.4-1", 2.4, 825.0),
    ("ibm-m-2.4-2", 2.4, 825.0),
    ("ibm-m-2.4-3", 2.4, 825.0),
    ("ibm-m-2.4-4", 2.4, 825.0),
    ("ibm-m-2.4-5", 2.4, 825.0),
    ("ibm-m-2.4-6", 2.4, 825.0),
    ("ibm-m-2.4-7", 2.4, 825.0),
    ("ibm-m-2.4-8", 2.4, 825.0),
    ("ibm-a-2.0-a", 2.0, 550.0),
    ("ibm-a-2.0-b", 2.0, 550.0),
];

/// The first `k` workers of the seed's cluster (module doc).
pub fn paper_platform(k: usize) -> StarPlatform {
    StarPlatform {
        workers: WORKERS
            .iter()
            .take(k)
            .map(|&(name, ghz, memory)| StarWorker {
                name: name.to_string(),
                speed: ROWS_PER_S_PER_GHZ * ghz,
                compute_latency: 0.01,
                bandwidth: LINK_ROWS_PER_S,
                network_latency: 0.0005,
                memory: Some(memory),
            })
            .collect(),
    }
}

/// The settings of the scenario.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct DivisiblePaperOptions {
    /// Seeds per error level in the robustness part.
    pub seeds: u64,
    /// Matrix sizes (rows) of the makespan-vs-rows part.
    pub rows: Vec<u32>,
    /// Worker counts of the makespan-vs-rows part.
    pub worker_counts: Vec<usize>,
    /// Error levels of the robustness part.
    pub errors: Vec<f64>,
}

impl Default for DivisiblePaperOptions {
    fn default() -> Self {
        DivisiblePaperOptions {
            seeds: 100,
            rows: (1..=20).map(|k| k * 1000).collect(),
            worker_counts: vec![6, 9, 12, 15],
            errors: vec![0.0, 0.1, 0.2, 0.3, 0.4],
        }
    }
}

/// UMR and UMRLM on one platform and load.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RowsPoint {
    /// Workers.
    pub workers: usize,
    /// Matrix rows (the load).
    pub rows: u32,
    /// UMR's makespan, seconds, if it fits in memory.
    pub umr_s: Option<f64>,
    /// Why UMR cannot run (worker, round, overflow), if it cannot.
    pub umr_infeasible: Option<String>,
    /// UMRLM's makespan, seconds.
    pub umrlm_s: f64,
    /// UMRLM's rounds.
    pub umrlm_rounds: u32,
    /// `W/ΣS`, seconds.
    pub lower_bound_s: f64,
}

/// UMRLM under the three orderings.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct OrderingPoint {
    /// Workers (15 as in the seed; 6 too, where memory binds).
    pub workers: usize,
    /// Matrix rows.
    pub rows: u32,
    /// `c1 = 0.8, c2 = c3 = 0.1`.
    pub compute_first_s: f64,
    /// `c2 = 0.8, c1 = c3 = 0.1`.
    pub network_first_s: f64,
    /// `c3 = 0.8, c1 = c2 = 0.1`.
    pub memory_first_s: f64,
}

/// The smallest memory raised at 10,000 rows.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct MemoryPoint {
    /// Workers (15 as in the seed; 6 too, where memory binds).
    pub workers: usize,
    /// The smallest memory on the platform, rows (every memory below it is raised to it).
    pub smallest_memory: f64,
    /// UMRLM's makespan, seconds.
    pub umrlm_s: f64,
    /// UMRLM's rounds.
    pub umrlm_rounds: u32,
}

/// One robustness configuration at one error level.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RobustnessRow {
    /// The configuration (`15 workers, 10000 rows`).
    pub config: String,
    /// Relative error `E`.
    pub error: f64,
    /// Mean and standard deviation of UMR's makespan over the seeds, seconds.
    pub umr_mean_s: f64,
    /// Standard deviation.
    pub umr_sd_s: f64,
    /// RUMR's mean makespan, seconds.
    pub rumr_mean_s: f64,
    /// Standard deviation.
    pub rumr_sd_s: f64,
    /// The static plan's mean makespan, seconds.
    pub static_mean_s: f64,
    /// Share of seeds where RUMR finished first.
    pub rumr_wins: f64,
}

/// Everything the scenario produced.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct DivisiblePaperReport {
    /// The settings.
    pub options: DivisiblePaperOptions,
    /// The platform (15 workers).
    pub platform: StarPlatform,
    /// Makespan vs rows per worker count.
    pub vs_rows: Vec<RowsPoint>,
    /// Makespan vs worker count at 10,000 rows.
    pub vs_workers: Vec<RowsPoint>,
    /// Orderings at 15 and 6 workers.
    pub ordering: Vec<OrderingPoint>,
    /// Smallest memory raised.
    pub memory: Vec<MemoryPoint>,
    /// RUMR vs UMR under errors.
    pub robustness: Vec<RobustnessRow>,
}

fn makespan(
    algo: Algo,
    p: &StarPlatform,
    rows: f64,
    options: &PlanOptions,
    config: &StarConfig,
) -> Result<Result<(f64, u32), String>, SimError> {
    let plan = plan(algo, p, rows, options).map_err(|e| SimError::Internal(e.to_string()))?;
    match simulate(p, &plan, rows, config) {
        Ok(r) => Ok(Ok((r.makespan_s(), r.rounds()))),
        Err(e @ DivisibleError::Infeasible { .. }) => Ok(Err(e.to_string())),
        Err(e) => Err(SimError::Internal(e.to_string())),
    }
}

fn umrlm(p: &StarPlatform, rows: f64, weights: Weights) -> Result<(f64, u32), SimError> {
    let options = PlanOptions {
        weights,
        ..PlanOptions::default()
    };
    makespan(Algo::Umrlm, p, rows, &options, &StarConfig::default())?
        .map_err(|e| SimError::Internal(format!("UMRLM must always fit: {e}")))
}

fn rows_point(k: usize, rows: u32) -> Result<RowsPoint, SimError> {
    let p = paper_platform(k);
    let w = f64::from(rows);
    let umr = makespan(
        Algo::Umr,
        &p,
        w,
        &PlanOptions::default(),
        &StarConfig::default(),
    )?;
    let (umrlm_s, umrlm_rounds) = umrlm(&p, w, Weights::default())?;
    Ok(RowsPoint {
        workers: k,
        rows,
        umr_s: umr.as_ref().ok().map(|r| r.0),
        umr_infeasible: umr.err(),
        umrlm_s,
        umrlm_rounds,
        lower_bound_s: p.lower_bound(w),
    })
}

fn mean_sd(v: &[f64]) -> (f64, f64) {
    let n = v.len().max(1) as f64;
    let mean = v.iter().sum::<f64>() / n;
    let var = v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n;
    (mean, var.sqrt())
}

/// The most seeds per error level: each is 45 simulations (three configurations × five
/// error levels × three algorithms), so 10,000 take minutes and a billion ran for weeks.
pub const MAX_SEEDS: u64 = 10_000;

/// Runs the whole scenario; `options.seeds` is 1 to [`MAX_SEEDS`].
pub fn run(options: &DivisiblePaperOptions) -> Result<DivisiblePaperReport, SimError> {
    if options.seeds == 0 || options.seeds > MAX_SEEDS {
        return Err(SimError::Config {
            field: "seeds",
            problem: format!(
                "must be 1 to {MAX_SEEDS} (45 simulations each), got {}",
                options.seeds
            ),
        });
    }
    let mut vs_rows = Vec::new();
    for &k in &options.worker_counts {
        if k == 0 || k > WORKERS.len() {
            return Err(SimError::Config {
                field: "worker_counts",
                problem: format!("{k} is not between 1 and {}", WORKERS.len()),
            });
        }
        for &rows in &options.rows {
            vs_rows.push(rows_point(k, rows)?);
        }
    }
    let vs_workers = (3..=WORKERS.len())
        .map(|k| rows_point(k, 10_000))
        .collect::<Result<Vec<_>, _>>()?;

    let full = paper_platform(WORKERS.len());
    let mut ordering = Vec::new();
    for k in [15, 6] {
        let platform = paper_platform(k);
        for &rows in &options.rows {
            let w = f64::from(rows);
            let at = |c1, c2, c3| umrlm(&platform, w, Weights { c1, c2, c3 }).map(|r| r.0);
            ordering.push(OrderingPoint {
                workers: k,
                rows,
                compute_first_s: at(0.8, 0.1, 0.1)?,
                network_first_s: at(0.1, 0.8, 0.1)?,
                memory_first_s: at(0.1, 0.1, 0.8)?,
            });
        }
    }

    let mut memory = Vec::new();
    for (k, step) in [15, 6]
        .into_iter()
        .flat_map(|k| (0..=10).map(move |s| (k, s)))
    {
        let smallest = 550.0 + 55.0 * f64::from(step);
        let mut p = paper_platform(k);
        for w in &mut p.workers {
            if let Some(m) = &mut w.memory {
                *m = m.max(smallest);
            }
        }
        let (umrlm_s, umrlm_rounds) = umrlm(&p, 10_000.0, Weights::default())?;
        memory.push(MemoryPoint {
            workers: k,
            smallest_memory: smallest,
            umrlm_s,
            umrlm_rounds,
        });
    }

    let mut robustness = Vec::new();
    for (k, rows) in [(15, 10_000.0), (6, 20_000.0), (15, 2_000.0)] {
        let mut p = paper_platform(k);
        for w in &mut p.workers {
            w.memory = None;
        }
        for &error in &options.errors {
            let plan_options = PlanOptions {
                error,
                ..PlanOptions::default()
            };
            let mut all = [Vec::new(), Vec::new(), Vec::new()];
            for seed in 1..=options.seeds {
                let config = StarConfig { error, seed };
                for (slot, algo) in [Algo::Umr, Algo::Rumr, Algo::Static]
                    .into_iter()
                    .enumerate()
                {
                    let m = makespan(algo, &p, rows, &plan_options, &config)?
                        .map_err(SimError::Internal)?;
                    all[slot].push(m.0);
                }
            }
            let (umr_mean_s, umr_sd_s) = mean_sd(&all[0]);
            let (rumr_mean_s, rumr_sd_s) = mean_sd(&all[1]);
            let wins = all[0].iter().zip(&all[1]).filter(|(u, r)| r < u).count();
            robustness.push(RobustnessRow {
                config: format!("{k} workers, {rows} rows"),
                error,
                umr_mean_s,
                umr_sd_s,
                rumr_mean_s,
                rumr_sd_s,
                static_mean_s: mean_sd(&all[2]).0,
                rumr_wins: wins as f64 / options.seeds as f64,
            });
        }
    }
    Ok(DivisiblePaperReport {
        options: options.clone(),
        platform: full,
        vs_rows,
        vs_workers,
        ordering,
        memory,
        robustness,
    })
}

fn table(header: &[&str]) -> Table {
    let mut t = Table::new();
    t.load_preset(UTF8_FULL_CONDENSED);
    t.set_header(header.to_vec());
    t
}

fn opt(v: Option<f64>) -> String {
    v.map_or_else(|| "infeasible".to_string(), |x| format!("{x:.2}"))
}

impl DivisiblePaperReport {
    /// The report as text tables.
    pub fn render_table(&self) -> String {
        let mut out = String::new();
        let mut t = table(&[
            "workers",
            "rows",
            "UMR (s)",
            "UMRLM (s)",
            "UMRLM rounds",
            "W/ΣS (s)",
            "UMRLM vs UMR",
        ]);
        for p in &self.vs_rows {
            t.add_row([
                p.workers.to_string(),
                p.rows.to_string(),
                opt(p.umr_s),
                format!("{:.2}", p.umrlm_s),
                p.umrlm_rounds.to_string(),
                format!("{:.2}", p.lower_bound_s),
                p.umr_s.map_or_else(String::new, |u| {
                    format!("{:+.2} %", (p.umrlm_s / u - 1.0) * 100.0)
                }),
            ]);
        }
        out += &format!("Makespan vs matrix rows (seed figs. 3–6)\n{t}\n");
        let mut t = table(&["workers", "UMR (s)", "UMRLM (s)", "W/ΣS (s)"]);
        for p in &self.vs_workers {
            t.add_row([
                p.workers.to_string(),
                opt(p.umr_s),
                format!("{:.2}", p.umrlm_s),
                format!("{:.2}", p.lower_bound_s),
            ]);
        }
        out += &format!("\nMakespan vs workers at 10,000 rows (seed fig. 7)\n{t}\n");
        let mut t = table(&[
            "workers",
            "rows",
            "compute first (s)",
            "network first (s)",
            "memory first (s)",
        ]);
        for p in &self.ordering {
            t.add_row([
                p.workers.to_string(),
                p.rows.to_string(),
                format!("{:.2}", p.compute_first_s),
                format!("{:.2}", p.network_first_s),
                format!("{:.2}", p.memory_first_s),
            ]);
        }
        out += &format!("\nUMRLM worker order (seed fig. 8: 15 workers)\n{t}\n");
        let mut t = table(&["workers", "smallest memory (rows)", "UMRLM (s)", "rounds"]);
        for p in &self.memory {
            t.add_row([
                p.workers.to_string(),
                format!("{:.0}", p.smallest_memory),
                format!("{:.3}", p.umrlm_s),
                p.umrlm_rounds.to_string(),
            ]);
        }
        out += &format!("\nSmallest memory raised, 10,000 rows (seed fig. 9: 15 workers)\n{t}\n");
        let mut t = table(&[
            "configuration",
            "error",
            "UMR mean ± sd (s)",
            "RUMR mean ± sd (s)",
            "RUMR vs UMR",
            "RUMR wins",
            "static mean (s)",
        ]);
        for r in &self.robustness {
            t.add_row([
                r.config.clone(),
                format!("{:.1}", r.error),
                format!("{:.2} ± {:.2}", r.umr_mean_s, r.umr_sd_s),
                format!("{:.2} ± {:.2}", r.rumr_mean_s, r.rumr_sd_s),
                format!("{:+.2} %", (r.rumr_mean_s / r.umr_mean_s - 1.0) * 100.0),
                format!("{:.0} %", r.rumr_wins * 100.0),
                format!("{:.2}", r.static_mean_s),
            ]);
        }
        out += &format!(
            "\nRUMR vs UMR under prediction errors, {} seeds each, no memory limits\n{t}",
            self.options.seeds
        );
        out
    }

    /// Writes `report.json`, one CSV per part and SVG plots into `dir`.
    pub fn write_outputs(&self, dir: &Path) -> Result<Vec<PathBuf>, SimError> {
        let mut written = vec![crate::report::json_file(dir, "report.json", self)?];

        let csv_out = |name: &str, header: &[&str], rows: Vec<Vec<String>>| {
            crate::report::csv_file(dir, name, header, rows)
        };
        let f = |x: f64| format!("{x:.6}");
        let rows_csv = |v: &[RowsPoint]| {
            v.iter()
                .map(|p| {
                    vec![
                        p.workers.to_string(),
                        p.rows.to_string(),
                        p.umr_s.map(f).unwrap_or_default(),
                        f(p.umrlm_s),
                        p.umrlm_rounds.to_string(),
                        f(p.lower_bound_s),
                        p.umr_infeasible.clone().unwrap_or_default(),
                    ]
                })
                .collect()
        };
        let header = [
            "workers",
            "rows",
            "umr_s",
            "umrlm_s",
            "umrlm_rounds",
            "lower_bound_s",
            "umr_infeasible",
        ];
        written.push(csv_out("vs_rows.csv", &header, rows_csv(&self.vs_rows))?);
        written.push(csv_out(
            "vs_workers.csv",
            &header,
            rows_csv(&self.vs_workers),
        )?);
        written.push(csv_out(
            "ordering.csv",
            &[
                "workers",
                "rows",
                "compute_first_s",
                "network_first_s",
                "memory_first_s",
            ],
            self.ordering
                .iter()
                .map(|p| {
                    vec![
                        p.workers.to_string(),
                        p.rows.to_string(),
                        f(p.compute_first_s),
                        f(p.network_first_s),
                        f(p.memory_first_s),
                    ]
                })
                .collect(),
        )?);
        written.push(csv_out(
            "memory.csv",
            &["workers", "smallest_memory", "umrlm_s", "umrlm_rounds"],
            self.memory
                .iter()
                .map(|p| {
                    vec![
                        p.workers.to_string(),
                        f(p.smallest_memory),
                        f(p.umrlm_s),
                        p.umrlm_rounds.to_string(),
                    ]
                })
                .collect(),
        )?);
        written.push(csv_out(
            "robustness.csv",
            &[
                "config",
                "error",
                "umr_mean_s",
                "umr_sd_s",
                "rumr_mean_s",
                "rumr_sd_s",
                "static_mean_s",
                "rumr_wins",
            ],
            self.robustness
                .iter()
                .map(|r| {
                    vec![
                        r.config.clone(),
                        f(r.error),
                        f(r.umr_mean_s),
                        f(r.umr_sd_s),
                        f(r.rumr_mean_s),
                        f(r.rumr_sd_s),
                        f(r.static_mean_s),
                        f(r.rumr_wins),
                    ]
                })
                .collect(),
        )?);

        for &k in &self.options.worker_counts {
            let pts: Vec<&RowsPoint> = self.vs_rows.iter().filter(|p| p.workers == k).collect();
            let path = dir.join(format!("makespan-vs-rows-{k}.svg"));
            plot::xy(
                &path,
                &format!("{k} workers: makespan vs matrix rows"),
                "matrix rows",
                "makespan (s)",
                &[
                    (
                        "UMR (stops where infeasible)".into(),
                        pts.iter()
                            .filter_map(|p| p.umr_s.map(|u| (f64::from(p.rows), u)))
                            .collect(),
                    ),
                    (
                        "UMRLM".into(),
                        pts.iter().map(|p| (f64::from(p.rows), p.umrlm_s)).collect(),
                    ),
                    (
                        "W/ΣS".into(),
                        pts.iter()
                            .map(|p| (f64::from(p.rows), p.lower_bound_s))
                            .collect(),
                    ),
                ],
            )?;
            written.push(path);
        }
        let path = dir.join("makespan-vs-workers.svg");
        plot::xy(
            &path,
            "10,000 rows: makespan vs workers",
            "workers",
            "makespan (s)",
            &[
                (
                    "UMR (where feasible)".into(),
                    self.vs_workers
                        .iter()
                        .filter_map(|p| p.umr_s.map(|u| (p.workers as f64, u)))
                        .collect(),
                ),
                (
                    "UMRLM".into(),
                    self.vs_workers
                        .iter()
                        .map(|p| (p.workers as f64, p.umrlm_s))
                        .collect(),
                ),
                (
                    "W/ΣS".into(),
                    self.vs_workers
                        .iter()
                        .map(|p| (p.workers as f64, p.lower_bound_s))
                        .collect(),
                ),
            ],
        )?;
        written.push(path);
        for k in [15, 6] {
            let path = dir.join(format!("ordering-{k}.svg"));
            let pts: Vec<&OrderingPoint> =
                self.ordering.iter().filter(|p| p.workers == k).collect();
            let x = |p: &OrderingPoint| f64::from(p.rows);
            plot::xy(
                &path,
                &format!("{k} workers: UMRLM under three worker orders"),
                "matrix rows",
                "makespan (s)",
                &[
                    (
                        "compute first (0.8, 0.1, 0.1)".into(),
                        pts.iter().map(|p| (x(p), p.compute_first_s)).collect(),
                    ),
                    (
                        "network first (0.1, 0.8, 0.1)".into(),
                        pts.iter().map(|p| (x(p), p.network_first_s)).collect(),
                    ),
                    (
                        "memory first (0.1, 0.1, 0.8)".into(),
                        pts.iter().map(|p| (x(p), p.memory_first_s)).collect(),
                    ),
                ],
            )?;
            written.push(path);
        }
        let path = dir.join("memory.svg");
        plot::xy(
            &path,
            "10,000 rows: smallest memory raised",
            "smallest worker memory (rows)",
            "UMRLM makespan (s)",
            &[15, 6]
                .iter()
                .map(|&k| {
                    (
                        format!("UMRLM, {k} workers"),
                        self.memory
                            .iter()
                            .filter(|p| p.workers == k)
                            .map(|p| (p.smallest_memory, p.umrlm_s))
                            .collect(),
                    )
                })
                .collect::<Vec<_>>(),
        )?;
        written.push(path);
        let configs: Vec<String> = {
            let mut c: Vec<String> = self.robustness.iter().map(|r| r.config.clone()).collect();
            c.dedup();
            c
        };
        let path = dir.join("robustness.svg");
        let series: Vec<(String, Vec<(f64, f64)>)> = configs
            .iter()
            .map(|c| {
                (
                    format!("RUMR / UMR, {c}"),
                    self.robustness
                        .iter()
                        .filter(|r| &r.config == c)
                        .map(|r| (r.error, r.rumr_mean_s / r.umr_mean_s))
                        .collect(),
                )
            })
            .collect();
        plot::xy(
            &path,
            "Mean makespan of RUMR relative to UMR under prediction error",
            "error E",
            "RUMR / UMR",
            &series,
        )?;
        written.push(path);
        Ok(written)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_platform_is_the_seeds_cluster() {
        let p = paper_platform(15);
        let mem = |m: f64| p.workers.iter().filter(|w| w.memory == Some(m)).count();
        assert_eq!((mem(1100.0), mem(825.0), mem(550.0)), (4, 9, 2));
        let s_over_b: f64 = p.workers.iter().map(|w| w.speed / w.bandwidth).sum();
        assert!(s_over_b < 1.0, "all 15 workers fit on the link: {s_over_b}");
    }

    #[test]
    fn with_six_workers_umr_overflows_past_some_thousands_of_rows_and_umrlm_goes_on() {
        let small = rows_point(6, 2000).expect("runs");
        assert!(small.umr_s.is_some(), "{small:?}");
        let big = rows_point(6, 20_000).expect("runs");
        assert!(
            big.umr_s.is_none() && big.umr_infeasible.is_some(),
            "{big:?}"
        );
        assert!(big.umrlm_s >= big.lower_bound_s);
    }
}
