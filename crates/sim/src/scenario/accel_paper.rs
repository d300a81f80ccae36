//! Scenario `accel-paper`: the experiment of the YARN accelerator paper (spec 01, "Experiment to
//! reproduce"), run on the offload model of [`crate::accel`].
//!
//! Four servers in one rack; Cluster4-g gives the first `g` of them one GPU (speed 1). An
//! application of 100 independent LU, QR or Cholesky tasks (spec 01 Table 2's single-node CPU and
//! GPU times, multiplied by the intensity ×1, ×2, ×4, ×8) ships 1, 5, 10, 20 or 50 MB per task to
//! its ANode and the same back. Each configuration runs under the three binding modes; the report
//! gives the speedup of Cluster4-{2,3,4} over Cluster4-0 (CPU only) — the paper's Figure 5 — and the
//! run time of the 50,000-image feature extraction + K-means job on Cluster4-0…4-4 (Figure 6).
//!
//! What the paper does not give, and what we chose (the results doc repeats it):
//! - per node 8 containers, a 1 Gbit/s link (125 MB/s) with 100 µs latency;
//! - an application start-up of 20 s (YARN's application master) and 1 s to launch each task;
//! - K-means: 200 map tasks of 250 images (12.5 s on a CPU, 1.25 s on a GPU — a 10× LBP/colour
//!   feature speedup —, 25 MB of images in, 0.25 MB of features back), then one K-means reduce of
//!   60 s on a CPU.

use crate::accel::{AccelApp, AccelConfig, AccelResult, simulate_accel};
use crate::error::SimError;
use crate::report::plot;
use hetsched_core::model::application::AcceleratorNeed;
use hetsched_core::policy::binding::BindingMode;
use hetsched_core::time::secs;
use hetsched_core::{Accelerator, Cluster, Node, NodeId, Rack, RackId};
use serde::Serialize;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// A MAGMA kernel and its single-node times (spec 01 Table 2).
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Kernel {
    /// Name as reported.
    pub name: &'static str,
    /// Seconds on one node's CPUs.
    pub cpu_s: f64,
    /// Seconds on one GPU.
    pub gpu_s: f64,
}

/// Spec 01 Table 2.
pub const KERNELS: [Kernel; 3] = [
    Kernel {
        name: "LU",
        cpu_s: 55.0,
        gpu_s: 6.2,
    },
    Kernel {
        name: "QR",
        cpu_s: 384.1,
        gpu_s: 23.2,
    },
    Kernel {
        name: "Cholesky",
        cpu_s: 60.5,
        gpu_s: 7.6,
    },
];

/// Task intensities (time multipliers).
pub const INTENSITIES: [u32; 4] = [1, 2, 4, 8];
/// Per-task data, MB.
pub const DATA_MB: [u32; 5] = [1, 5, 10, 20, 50];
/// GPU counts of the kernel experiment's clusters.
pub const KERNEL_CLUSTERS: [u32; 4] = [0, 2, 3, 4];
/// GPU counts of the K-means experiment's clusters.
pub const KMEANS_CLUSTERS: [u32; 5] = [0, 1, 2, 3, 4];

/// Settings of the scenario; the defaults are the documented experiment.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct AccelPaperOptions {
    /// Tasks per kernel application (100 in the paper).
    pub tasks: u32,
    /// Containers per node.
    pub slots: u32,
    /// Application start-up, seconds.
    pub app_startup_s: f64,
    /// Launch of each task, seconds.
    pub task_launch_s: f64,
    /// Kernels to run (names; empty: all).
    pub kernels: Vec<String>,
    /// Intensities (empty: all).
    pub intensities: Vec<u32>,
    /// Data sizes in MB (empty: all).
    pub data_mb: Vec<u32>,
    /// Images of the K-means job (50,000 in the paper; 0 skips it).
    pub kmeans_images: u32,
}

impl Default for AccelPaperOptions {
    fn default() -> Self {
        Self {
            tasks: 100,
            slots: 8,
            app_startup_s: 20.0,
            task_launch_s: 1.0,
            kernels: Vec::new(),
            intensities: Vec::new(),
            data_mb: Vec::new(),
            kmeans_images: 50_000,
        }
    }
}

/// One kernel run (JSON keys as `hetsched sim accel-paper --output json` documents them).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Row {
    /// `LU`, `QR` or `Cholesky`.
    pub kernel: String,
    /// `"4-0"` … `"4-4"`.
    pub cluster: String,
    /// `plain`, `weighted` or `container`.
    pub binding: String,
    /// Time multiplier.
    pub intensity: u32,
    /// MB shipped each way per task.
    pub data_mb: u32,
    /// Run time.
    pub makespan_s: f64,
    /// Cluster4-0's run time of the same kernel, intensity and data over this one's.
    pub speedup: f64,
}

/// One K-means run.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct KmeansRow {
    /// `"4-0"` … `"4-4"`.
    pub cluster: String,
    /// `plain`, `weighted` or `container`.
    pub binding: String,
    /// Run time of map + reduce.
    pub makespan_s: f64,
}

/// The scenario's results: exactly the JSON the CLI prints.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct AccelPaperReport {
    /// Kernel runs.
    pub rows: Vec<Row>,
    /// K-means runs.
    pub kmeans: Vec<KmeansRow>,
}

/// The three binding modes, by name, for `slots` containers per node.
pub fn modes(slots: u32) -> [BindingMode; 3] {
    [
        BindingMode::Plain,
        BindingMode::Weighted,
        BindingMode::Container { slots },
    ]
}

/// Cluster4-`gpus`: four 8-core servers in one rack, the first `gpus` with one GPU of speed 1.
pub fn cluster4(gpus: u32) -> Cluster {
    let nodes = (0..4u32)
        .map(|i| Node {
            id: NodeId(i),
            name: format!("node{}", i + 1),
            rack: RackId(0),
            cores: 8,
            core_speed: 1.0,
            memory_bytes: 32 << 30,
            disk_read_bw: 128e6,
            net_bw: 125e6,
            net_latency: 100_000,
            accelerators: if i < gpus {
                vec![Accelerator {
                    kind: "gpu".into(),
                    memory_bytes: 6 << 30,
                    speed: 1.0,
                }]
            } else {
                Vec::new()
            },
            attributes: Vec::new(),
        })
        .collect();
    Cluster {
        racks: vec![Rack {
            id: RackId(0),
            name: "rack0".into(),
        }],
        nodes,
    }
}

/// The kernel application: `tasks` tasks of `kernel` at `intensity`, shipping `data_mb` each way.
pub fn kernel_app(kernel: &Kernel, tasks: u32, intensity: u32, data_mb: u32) -> AccelApp {
    AccelApp {
        name: kernel.name.to_string(),
        tasks,
        need: AcceleratorNeed::Preferred,
        cpu_time: secs(kernel.cpu_s * f64::from(intensity)),
        gpu_time: secs(kernel.gpu_s * f64::from(intensity)),
        input_bytes: u64::from(data_mb) * 1_000_000,
        output_bytes: u64::from(data_mb) * 1_000_000,
    }
}

/// The K-means job for `images` images: GPU-preferring feature-extraction maps of 250 images,
/// then one CPU K-means reduce.
pub fn kmeans_apps(images: u32) -> Vec<AccelApp> {
    let per_task = 250u32;
    let maps = images.div_ceil(per_task).max(1);
    vec![
        AccelApp {
            name: "features".into(),
            tasks: maps,
            need: AcceleratorNeed::Preferred,
            cpu_time: secs(0.05 * f64::from(per_task)),
            gpu_time: secs(0.005 * f64::from(per_task)),
            input_bytes: u64::from(per_task) * 100_000,
            output_bytes: u64::from(per_task) * 1_000,
        },
        AccelApp {
            name: "kmeans".into(),
            tasks: 1,
            need: AcceleratorNeed::None,
            cpu_time: secs(60.0),
            gpu_time: 0,
            input_bytes: 0,
            output_bytes: 0,
        },
    ]
}

fn config(options: &AccelPaperOptions, binding: BindingMode) -> AccelConfig {
    AccelConfig {
        binding,
        slots: options.slots,
        app_startup: secs(options.app_startup_s),
        task_launch: secs(options.task_launch_s),
    }
}

fn pick<T: Copy + PartialEq>(all: &[T], chosen: &[T]) -> Vec<T> {
    all.iter()
        .copied()
        .filter(|x| chosen.is_empty() || chosen.contains(x))
        .collect()
}

/// Runs one configuration.
pub fn run_one(
    options: &AccelPaperOptions,
    gpus: u32,
    binding: BindingMode,
    apps: &[AccelApp],
) -> Result<AccelResult, SimError> {
    simulate_accel(&cluster4(gpus), apps, &config(options, binding))
}

/// Runs the scenario; `progress(done, total)` after each simulation.
pub fn run(
    options: &AccelPaperOptions,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<AccelPaperReport, SimError> {
    if options.tasks == 0 || options.slots == 0 {
        return Err(SimError::Config {
            field: if options.tasks == 0 { "tasks" } else { "slots" },
            problem: "must be at least 1".into(),
        });
    }
    // As many tasks as a workload file may hold: `--tasks 4294967295` asked for gigabytes
    // before its first simulation.
    let most = hetsched_core::input::workload::MAX_WORKLOAD_TASKS;
    let maps = u64::from(options.kmeans_images).div_ceil(250);
    if u64::from(options.tasks) > most || maps > most {
        let (field, given) = if u64::from(options.tasks) > most {
            ("tasks", format!("{} tasks", options.tasks))
        } else {
            (
                "kmeans_images",
                format!("{} images ({maps} tasks)", options.kmeans_images),
            )
        };
        return Err(SimError::Config {
            field,
            problem: format!(
                "{given}: at most {most} tasks per application (the simulator holds every task \
                 in memory)"
            ),
        });
    }
    let kernels: Vec<Kernel> = KERNELS
        .iter()
        .copied()
        .filter(|k| {
            options.kernels.is_empty()
                || options
                    .kernels
                    .iter()
                    .any(|n| n.eq_ignore_ascii_case(k.name))
        })
        .collect();
    if kernels.is_empty() {
        return Err(SimError::Config {
            field: "kernels",
            problem: "none of LU, QR, Cholesky chosen".into(),
        });
    }
    let intensities = pick(&INTENSITIES, &options.intensities);
    let data = pick(&DATA_MB, &options.data_mb);
    if intensities.is_empty() || data.is_empty() {
        return Err(SimError::Config {
            field: if intensities.is_empty() {
                "intensities"
            } else {
                "data_mb"
            },
            problem: format!(
                "none of the paper's values chosen (intensities {INTENSITIES:?}, data {DATA_MB:?} MB)"
            ),
        });
    }
    let modes = modes(options.slots);
    let total = kernels.len() * intensities.len() * data.len() * KERNEL_CLUSTERS.len() * 3
        + if options.kmeans_images > 0 {
            KMEANS_CLUSTERS.len() * 3
        } else {
            0
        };
    let mut done = 0;
    let mut rows = Vec::new();
    for k in &kernels {
        for &i in &intensities {
            for &d in &data {
                let apps = [kernel_app(k, options.tasks, i, d)];
                // The baseline has no GPU, so binding does not matter: one run serves all modes.
                let base = run_one(options, 0, BindingMode::Plain, &apps)?.makespan_s;
                for mode in modes {
                    for &g in &KERNEL_CLUSTERS {
                        let makespan = if g == 0 {
                            base
                        } else {
                            run_one(options, g, mode, &apps)?.makespan_s
                        };
                        rows.push(Row {
                            kernel: k.name.to_string(),
                            cluster: format!("4-{g}"),
                            binding: mode.as_str().to_string(),
                            intensity: i,
                            data_mb: d,
                            makespan_s: makespan,
                            speedup: base / makespan,
                        });
                        done += 1;
                        progress(done, total);
                    }
                }
            }
        }
    }
    let mut kmeans = Vec::new();
    if options.kmeans_images > 0 {
        let apps = kmeans_apps(options.kmeans_images);
        for mode in modes {
            for &g in &KMEANS_CLUSTERS {
                kmeans.push(KmeansRow {
                    cluster: format!("4-{g}"),
                    binding: mode.as_str().to_string(),
                    makespan_s: run_one(options, g, mode, &apps)?.makespan_s,
                });
                done += 1;
                progress(done, total);
            }
        }
    }
    Ok(AccelPaperReport { rows, kmeans })
}

/// `min..max` of a list of ratios, `None` when empty.
fn range(values: impl Iterator<Item = f64>) -> Option<(f64, f64)> {
    values.fold(None, |acc, v| match acc {
        None => Some((v, v)),
        Some((lo, hi)) => Some((lo.min(v), hi.max(v))),
    })
}

impl AccelPaperReport {
    fn makespan(&self, r: &Row, cluster: &str) -> Option<f64> {
        self.rows
            .iter()
            .find(|x| {
                x.kernel == r.kernel
                    && x.binding == r.binding
                    && x.intensity == r.intensity
                    && x.data_mb == r.data_mb
                    && x.cluster == cluster
            })
            .map(|x| x.makespan_s)
    }

    /// Over every kernel, intensity and data size under `binding`: the range of
    /// `makespan(4-2) / makespan(4-3)` (above 1: Cluster4-3 is faster).
    pub fn gain_4_3_over_4_2(&self, binding: &str) -> Option<(f64, f64)> {
        range(
            self.rows
                .iter()
                .filter(|r| r.binding == binding && r.cluster == "4-3")
                .filter_map(|r| Some(self.makespan(r, "4-2")? / r.makespan_s)),
        )
    }

    /// Whether, for every kernel, intensity, data size and mode, speedup does not fall as GPUs are
    /// added (4-2 ≤ 4-3 ≤ 4-4, with 0.5 % of slack for the plain tie) and 4-4 beats 4-2.
    pub fn speedup_grows_with_gpus(&self) -> bool {
        self.rows.iter().filter(|r| r.cluster == "4-3").all(|r| {
            match (self.makespan(r, "4-2"), self.makespan(r, "4-4")) {
                (Some(m2), Some(m4)) => m2 >= r.makespan_s * 0.995 && r.makespan_s >= m4 && m2 > m4,
                _ => true,
            }
        })
    }

    /// Whether, for every kernel, cluster, data size and mode, speedup rises with intensity.
    pub fn speedup_grows_with_intensity(&self) -> bool {
        self.rows.iter().filter(|r| r.cluster != "4-0").all(|r| {
            self.rows
                .iter()
                .filter(|x| {
                    x.kernel == r.kernel
                        && x.cluster == r.cluster
                        && x.binding == r.binding
                        && x.data_mb == r.data_mb
                        && x.intensity > r.intensity
                })
                .all(|x| x.speedup >= r.speedup)
        })
    }

    /// The distinct values of `key` over the kernel rows, sorted.
    fn distinct(&self, key: impl Fn(&Row) -> u32) -> Vec<u32> {
        let mut v: Vec<u32> = self.rows.iter().map(key).collect();
        v.sort_unstable();
        v.dedup();
        v
    }

    /// The largest relative spread of speedup across data sizes, over every other parameter.
    pub fn data_size_spread(&self) -> f64 {
        self.rows
            .iter()
            .filter(|r| r.cluster != "4-0")
            .filter_map(|r| {
                let (lo, hi) = range(
                    self.rows
                        .iter()
                        .filter(|x| {
                            x.kernel == r.kernel
                                && x.cluster == r.cluster
                                && x.binding == r.binding
                                && x.intensity == r.intensity
                        })
                        .map(|x| x.speedup),
                )?;
                Some(hi / lo - 1.0)
            })
            .fold(0.0, f64::max)
    }

    /// The terminal report: one table per kernel (rows: intensity × data, columns: cluster ×
    /// binding), K-means, and our findings beside the paper's.
    pub fn render_table(&self) -> String {
        use comfy_table::{Table, presets::UTF8_FULL_CONDENSED};
        let mut out = String::new();
        let columns: Vec<(String, String)> = ["plain", "weighted", "container"]
            .iter()
            .flat_map(|b| ["4-2", "4-3", "4-4"].map(|c| (b.to_string(), c.to_string())))
            .collect();
        for k in KERNELS {
            let rows: Vec<&Row> = self
                .rows
                .iter()
                .filter(|r| r.kernel == k.name && r.cluster == "4-0" && r.binding == "plain")
                .collect();
            if rows.is_empty() {
                continue;
            }
            let _ = writeln!(
                out,
                "{} (CPU {} s, GPU {} s per task): speedup over Cluster4-0",
                k.name, k.cpu_s, k.gpu_s
            );
            let mut t = Table::new();
            t.load_preset(UTF8_FULL_CONDENSED);
            let mut header = vec!["×".to_string(), "MB".into(), "4-0 (s)".into()];
            header.extend(columns.iter().map(|(b, c)| format!("{c} {b}")));
            t.set_header(header);
            for base in rows {
                let mut line = vec![
                    base.intensity.to_string(),
                    base.data_mb.to_string(),
                    format!("{:.0}", base.makespan_s),
                ];
                for (b, c) in &columns {
                    let v = self.rows.iter().find(|x| {
                        x.kernel == base.kernel
                            && x.intensity == base.intensity
                            && x.data_mb == base.data_mb
                            && &x.binding == b
                            && &x.cluster == c
                    });
                    line.push(v.map_or("–".into(), |v| format!("{:.2}", v.speedup)));
                }
                t.add_row(line);
            }
            let _ = writeln!(out, "{t}\n");
        }
        if !self.kmeans.is_empty() {
            let _ = writeln!(out, "Feature extraction + K-means: run time (s)");
            let mut t = Table::new();
            t.load_preset(UTF8_FULL_CONDENSED);
            let mut header = vec!["binding".to_string()];
            header.extend(KMEANS_CLUSTERS.iter().map(|g| format!("4-{g}")));
            t.set_header(header);
            for b in ["plain", "weighted", "container"] {
                let mut line = vec![b.to_string()];
                for g in KMEANS_CLUSTERS {
                    let c = format!("4-{g}");
                    let v = self
                        .kmeans
                        .iter()
                        .find(|x| x.binding == b && x.cluster == c);
                    line.push(v.map_or("–".into(), |v| format!("{:.0}", v.makespan_s)));
                }
                t.add_row(line);
            }
            let _ = writeln!(out, "{t}\n");
        }
        let _ = writeln!(out, "Findings (paper → ours):");
        let fmt = |r: Option<(f64, f64)>| {
            r.map_or("–".into(), |(lo, hi)| {
                format!(
                    "{:+.1} % … {:+.1} %",
                    (lo - 1.0) * 100.0,
                    (hi - 1.0) * 100.0
                )
            })
        };
        let _ = writeln!(
            out,
            "- 4-3 ≈ 4-2 with the paper's binding → 4-3 faster than 4-2 by {} (plain)",
            fmt(self.gain_4_3_over_4_2("plain"))
        );
        for b in ["weighted", "container"] {
            let _ = writeln!(
                out,
                "- (future work) 4-3 should beat 4-2 with {b} binding → by {}",
                fmt(self.gain_4_3_over_4_2(b))
            );
        }
        let _ = writeln!(
            out,
            "- speedup tracks the number of GPUs → {}",
            if self.speedup_grows_with_gpus() {
                "yes, in every configuration"
            } else {
                "NOT in every configuration"
            }
        );
        // A finding about how speedup changes with intensity or data size needs two of them: a
        // narrowed run (`--intensities 1`) would otherwise report "yes" or "0.0 %" for what it
        // never compared.
        let intensities = self.distinct(|r| r.intensity);
        let _ = writeln!(
            out,
            "- speedup grows with intensity (except ×1) → {}",
            if intensities.len() < 2 {
                "not tested (needs ≥ 2 intensities)"
            } else if self.speedup_grows_with_intensity() {
                "yes, ×1 included (start-up is a fixed cost in the model)"
            } else {
                "NOT in every configuration"
            }
        );
        let sizes = self.distinct(|r| r.data_mb);
        match (sizes.first(), sizes.last()) {
            (Some(lo), Some(hi)) if sizes.len() >= 2 => {
                let _ = writeln!(
                    out,
                    "- no clear correlation with data size → speedup varies by at most {:.1} % across {lo}–{hi} MB",
                    self.data_size_spread() * 100.0
                );
            }
            _ => {
                let _ = writeln!(
                    out,
                    "- no clear correlation with data size → not tested (needs ≥ 2 data sizes)"
                );
            }
        }
        if !self.kmeans.is_empty() {
            let _ = writeln!(
                out,
                "- K-means run time falls as GPUs are added; 4-3 = 4-2 → see the table above"
            );
        }
        out
    }

    /// Writes `rows.csv`, `kmeans.csv`, `report.json` and the SVG plots (Figure 5: speedup against
    /// intensity and against data size per kernel; Figure 6: K-means run time) into `dir`.
    pub fn write_outputs(&self, dir: &Path) -> Result<Vec<PathBuf>, SimError> {
        let io = |path: &Path| {
            let path = path.display().to_string();
            move |source| SimError::Io { path, source }
        };
        std::fs::create_dir_all(dir).map_err(io(dir))?;
        let mut written = Vec::new();
        let out_err = |what: &str| {
            let what = what.to_string();
            move |e: String| SimError::Output { what, problem: e }
        };
        let json = dir.join("report.json");
        let text = serde_json::to_string_pretty(self)
            .map_err(|e| out_err("report.json")(e.to_string()))?;
        std::fs::write(&json, text + "\n").map_err(io(&json))?;
        written.push(json);

        let path = dir.join("rows.csv");
        let mut w =
            csv::Writer::from_path(&path).map_err(|e| out_err("rows.csv")(e.to_string()))?;
        for r in &self.rows {
            w.serialize(r)
                .map_err(|e| out_err("rows.csv")(e.to_string()))?;
        }
        w.flush().map_err(io(&path))?;
        written.push(path);
        let path = dir.join("kmeans.csv");
        let mut w =
            csv::Writer::from_path(&path).map_err(|e| out_err("kmeans.csv")(e.to_string()))?;
        for r in &self.kmeans {
            w.serialize(r)
                .map_err(|e| out_err("kmeans.csv")(e.to_string()))?;
        }
        w.flush().map_err(io(&path))?;
        written.push(path);

        // Figure 5: per kernel and binding, speedup against intensity (at the median data size
        // chosen) and against data size (at the highest intensity chosen), one line per cluster.
        for k in KERNELS {
            for b in ["plain", "weighted", "container"] {
                let rows: Vec<&Row> = self
                    .rows
                    .iter()
                    .filter(|r| r.kernel == k.name && r.binding == b)
                    .collect();
                if rows.is_empty() {
                    continue;
                }
                let mut datas: Vec<u32> = rows.iter().map(|r| r.data_mb).collect();
                datas.sort_unstable();
                datas.dedup();
                let mut ints: Vec<u32> = rows.iter().map(|r| r.intensity).collect();
                ints.sort_unstable();
                ints.dedup();
                let mid = datas[datas.len() / 2];
                let top = ints[ints.len() - 1];
                let series = |cluster: &str, by_intensity: bool| -> Vec<f64> {
                    let xs: &[u32] = if by_intensity { &ints } else { &datas };
                    xs.iter()
                        .map(|&x| {
                            rows.iter()
                                .find(|r| {
                                    r.cluster == cluster
                                        && if by_intensity {
                                            r.intensity == x && r.data_mb == mid
                                        } else {
                                            r.data_mb == x && r.intensity == top
                                        }
                                })
                                .map_or(f64::NAN, |r| r.speedup)
                        })
                        .collect()
                };
                for by_intensity in [true, false] {
                    let title = if by_intensity {
                        format!("{} speedup over Cluster4-0 ({b} binding, {mid} MB)", k.name)
                    } else {
                        format!("{} speedup over Cluster4-0 ({b} binding, ×{top})", k.name)
                    };
                    let path = dir.join(format!(
                        "fig5-{}-{b}-by-{}.svg",
                        k.name.to_lowercase(),
                        if by_intensity { "intensity" } else { "data" }
                    ));
                    let xs: &[u32] = if by_intensity { &ints } else { &datas };
                    plot::lines(
                        &path,
                        &plot::Lines {
                            title: &title,
                            x_label: if by_intensity {
                                "task intensity (×)"
                            } else {
                                "data per task (MB)"
                            },
                            y_label: "speedup",
                            x: xs.iter().map(|&x| f64::from(x)).collect(),
                            series: vec![
                                ("Cluster4-2", series("4-2", by_intensity)),
                                ("Cluster4-3", series("4-3", by_intensity)),
                                ("Cluster4-4", series("4-4", by_intensity)),
                            ],
                        },
                    )?;
                    written.push(path);
                }
            }
        }
        if !self.kmeans.is_empty() {
            let path = dir.join("fig6-kmeans.svg");
            let value = |b: &str, c: &str| {
                self.kmeans
                    .iter()
                    .find(|x| x.binding == b && x.cluster == c)
                    .map_or(0.0, |x| x.makespan_s)
            };
            let categories: Vec<String> =
                KMEANS_CLUSTERS.iter().map(|g| format!("4-{g}")).collect();
            plot::bars(
                &path,
                &plot::Bars {
                    title: "Feature extraction + K-means of 50,000 images: run time (s)",
                    y_label: "run time (s)",
                    series: ["plain", "weighted", "container"]
                        .map(|b| (b, categories.iter().map(|c| value(b, c)).collect()))
                        .to_vec(),
                    categories,
                    reference: None,
                },
            )?;
            written.push(path);
        }
        Ok(written)
    }
}
