//! The `hdas-paper` report: a plain-text table with the paper's figures beside ours, and the files
//! `--out DIR` writes: `workloads.csv`, `single_app.csv`, `series_P.csv`, `report.json`, and SVG plots
//! like the paper's Figure 6 (speedup per workload), Figure 8 (run time normalised to FIFO),
//! Figure 9 (average task delay) and Figures 3, 4, 10 (GPUs busy and IO load of workload P over time).

use super::{HdasPaperReport, SERIES_WORKLOAD, WorkloadResult};
use crate::error::SimError;
use crate::report::plot::{self, Bars, Lines};
use comfy_table::presets::ASCII_MARKDOWN;
use comfy_table::{CellAlignment, Table};
use std::fmt::Write as _;
use std::path::Path;

/// The paper's averages (spec 02, "Paper's results").
pub mod paper {
    /// Mean speedup over Hadoop: FIFO, model-based, HDAS.
    pub const SPEEDUP: [f64; 3] = [14.3, 17.9, 21.9];
    /// Best speedup of HDAS.
    pub const HDAS_MAX_SPEEDUP: f64 = 31.0;
    /// Mean run time change against FIFO: model-based, HDAS.
    pub const VS_FIFO: [f64; 2] = [-0.187, -0.336];
    /// Largest run time reduction against FIFO: model-based, HDAS.
    pub const VS_FIFO_MAX: [f64; 2] = [-0.357, -0.505];
    /// Mean average task delay: FIFO, model-based, HDAS.
    pub const DELAY: [f64; 3] = [1.6, 1.6, 1.2];
    /// Workloads (of 25) whose HDAS average task delay is ≤ 1.06.
    pub const HDAS_DELAY_AT_MOST_1_06: usize = 21;
}

fn pct(ratio: f64) -> String {
    format!("{:+.1}%", (ratio - 1.0) * 100.0)
}

fn x(v: f64) -> String {
    format!("{v:.1}x")
}

fn paper_note(letter: char) -> &'static str {
    match letter {
        'C' => "paper: <= 2.8x, delays ~3x",
        'I' => "paper: > 21x under all three",
        _ => "",
    }
}

impl HdasPaperReport {
    /// The report as a plain-text table with a summary beside the paper's figures.
    pub fn render_table(&self) -> String {
        let mut t = Table::new();
        t.load_preset(ASCII_MARKDOWN);
        t.set_header(vec![
            "WL",
            "applications",
            "cpu-only s",
            "fifo s",
            "model s",
            "hdas s",
            "bound s",
            "speedup fifo",
            "model",
            "hdas",
            "vs FIFO model",
            "hdas",
            "delay fifo",
            "model",
            "hdas",
            "/bound fifo",
            "model",
            "hdas",
            "note",
        ]);
        let row = |r: &WorkloadResult| {
            vec![
                r.letter.to_string(),
                r.name.clone(),
                format!("{:.0}", r.makespan_s.cpu_only),
                format!("{:.0}", r.makespan_s.fifo),
                format!("{:.0}", r.makespan_s.hadoop_model),
                format!("{:.0}", r.makespan_s.hdas),
                format!("{:.0}", r.lower_bound_s),
                x(r.speedup.fifo),
                x(r.speedup.hadoop_model),
                x(r.speedup.hdas),
                pct(r.vs_fifo.hadoop_model),
                pct(r.vs_fifo.hdas),
                format!("{:.2}", r.delay.fifo),
                format!("{:.2}", r.delay.hadoop_model),
                format!("{:.2}", r.delay.hdas),
                format!("{:.3}", r.vs_bound.fifo),
                format!("{:.3}", r.vs_bound.hadoop_model),
                format!("{:.3}", r.vs_bound.hdas),
                paper_note(r.letter).to_string(),
            ]
        };
        for r in &self.workloads {
            t.add_row(row(r));
        }
        let a = &self.average;
        t.add_row(vec![
            "avg".to_string(),
            "ours".to_string(),
            format!("{:.0}", a.makespan_s.cpu_only),
            format!("{:.0}", a.makespan_s.fifo),
            format!("{:.0}", a.makespan_s.hadoop_model),
            format!("{:.0}", a.makespan_s.hdas),
            String::new(),
            x(a.speedup.fifo),
            x(a.speedup.hadoop_model),
            x(a.speedup.hdas),
            pct(a.vs_fifo.hadoop_model),
            pct(a.vs_fifo.hdas),
            format!("{:.2}", a.delay.fifo),
            format!("{:.2}", a.delay.hadoop_model),
            format!("{:.2}", a.delay.hdas),
            format!("{:.3}", a.vs_bound.fifo),
            format!("{:.3}", a.vs_bound.hadoop_model),
            format!("{:.3}", a.vs_bound.hdas),
            String::new(),
        ]);
        t.add_row(vec![
            "avg".to_string(),
            "paper".to_string(),
            String::new(),
            String::new(),
            String::new(),
            String::new(),
            String::new(),
            x(paper::SPEEDUP[0]),
            x(paper::SPEEDUP[1]),
            x(paper::SPEEDUP[2]),
            format!("{:+.1}%", paper::VS_FIFO[0] * 100.0),
            format!("{:+.1}%", paper::VS_FIFO[1] * 100.0),
            format!("{:.1}", paper::DELAY[0]),
            format!("{:.1}", paper::DELAY[1]),
            format!("{:.1}", paper::DELAY[2]),
            String::new(),
            String::new(),
            String::new(),
            String::new(),
        ]);
        for c in 2..18 {
            if let Some(col) = t.column_mut(c) {
                col.set_cell_alignment(CellAlignment::Right);
            }
        }

        let mut out = String::new();
        let _ = writeln!(
            out,
            "hdas-paper: {}, scale {}, seed {}, heartbeat {} ms, CPU read chunks {}, IO report {:?}, HDAS column: {}",
            hetsched_core::text::count(self.workloads.len() as u64, "workload"),
            self.options.scale,
            self.options.sim.seed,
            self.options.sim.heartbeat_interval / 1_000_000,
            self.options.sim.cpu_read_chunks,
            self.options.sim.io_report,
            self.options.hdas_policy
        );
        let _ = writeln!(out, "{t}");
        let _ = writeln!(
            out,
            "best speedup: fifo {} / model {} / hdas {} (paper: hdas {})",
            x(a.max_speedup.fifo),
            x(a.max_speedup.hadoop_model),
            x(a.max_speedup.hdas),
            x(paper::HDAS_MAX_SPEEDUP)
        );
        let _ = writeln!(
            out,
            "largest cut vs FIFO: model {} / hdas {} (paper: {:+.1}% / {:+.1}%)",
            pct(a.min_vs_fifo.hadoop_model),
            pct(a.min_vs_fifo.hdas),
            paper::VS_FIFO_MAX[0] * 100.0,
            paper::VS_FIFO_MAX[1] * 100.0
        );
        let _ = writeln!(
            out,
            "makespan / lower bound, mean (worst): fifo {:.3} ({:.3}) / model {:.3} ({:.3}) / hdas {:.3} ({:.3}) / cpu-only {:.1}",
            a.vs_bound.fifo,
            a.max_vs_bound.fifo,
            a.vs_bound.hadoop_model,
            a.max_vs_bound.hadoop_model,
            a.vs_bound.hdas,
            a.max_vs_bound.hdas,
            a.vs_bound.cpu_only
        );
        let _ = writeln!(
            out,
            "workloads with average task delay <= 1.06: fifo {} / model {} / hdas {} of {} (paper: hdas {} of 25)",
            a.delay_at_most_1_06[0],
            a.delay_at_most_1_06[1],
            a.delay_at_most_1_06[2],
            self.workloads.len(),
            paper::HDAS_DELAY_AT_MOST_1_06
        );
        if !self.single_app.is_empty() {
            let mut s = Table::new();
            s.load_preset(ASCII_MARKDOWN);
            s.set_header(vec![
                "application alone",
                "GPU read share",
                "CPU_base/GPU_base",
                "cpu-only s",
                "hadoop-model s",
                "speedup",
            ]);
            for a in &self.single_app {
                s.add_row(vec![
                    a.name.clone(),
                    format!("{:.1}%", a.gpu_read_fraction * 100.0),
                    x(a.task_speedup),
                    format!("{:.0}", a.cpu_only_s),
                    format!("{:.0}", a.hadoop_model_s),
                    x(a.speedup),
                ]);
            }
            let _ = writeln!(
                out,
                "\nsingle applications (paper, from Hadoop+: 1.4x-16.1x; see docs/results/hdas.md)\n{s}"
            );
        }
        out
    }

    /// Writes `report.json`, `workloads.csv`, `single_app.csv`, `series_P.csv` and the SVG plots
    /// into `dir` (created if missing); returns the paths written.
    pub fn write_outputs(&self, dir: &Path) -> Result<Vec<std::path::PathBuf>, SimError> {
        let mut written = vec![crate::report::json_file(dir, "report.json", self)?];
        let io = |path: &Path| {
            let path = path.display().to_string();
            move |source| SimError::Io { path, source }
        };

        let csv_err = |what: &str| {
            let what = what.to_string();
            move |e: csv::Error| SimError::Output {
                what,
                problem: e.to_string(),
            }
        };
        let path = dir.join("workloads.csv");
        let mut w = csv::Writer::from_path(&path).map_err(csv_err("workloads.csv"))?;
        w.write_record([
            "workload",
            "applications",
            "tasks",
            "makespan_cpu_only_s",
            "makespan_fifo_s",
            "makespan_hadoop_model_s",
            "makespan_hdas_s",
            "speedup_fifo",
            "speedup_hadoop_model",
            "speedup_hdas",
            "vs_fifo_hadoop_model",
            "vs_fifo_hdas",
            "delay_cpu_only",
            "delay_fifo",
            "delay_hadoop_model",
            "delay_hdas",
            "gpu_share_fifo",
            "gpu_share_hadoop_model",
            "gpu_share_hdas",
            "lower_bound_s",
            "vs_bound_fifo",
            "vs_bound_hadoop_model",
            "vs_bound_hdas",
        ])
        .map_err(csv_err("workloads.csv"))?;
        for r in &self.workloads {
            let f = |v: f64| format!("{v:.6}");
            w.write_record([
                r.letter.to_string(),
                r.name.clone(),
                r.tasks.to_string(),
                f(r.makespan_s.cpu_only),
                f(r.makespan_s.fifo),
                f(r.makespan_s.hadoop_model),
                f(r.makespan_s.hdas),
                f(r.speedup.fifo),
                f(r.speedup.hadoop_model),
                f(r.speedup.hdas),
                f(r.vs_fifo.hadoop_model),
                f(r.vs_fifo.hdas),
                f(r.cpu_only_delay),
                f(r.delay.fifo),
                f(r.delay.hadoop_model),
                f(r.delay.hdas),
                f(r.gpu_share.fifo),
                f(r.gpu_share.hadoop_model),
                f(r.gpu_share.hdas),
                f(r.lower_bound_s),
                f(r.vs_bound.fifo),
                f(r.vs_bound.hadoop_model),
                f(r.vs_bound.hdas),
            ])
            .map_err(csv_err("workloads.csv"))?;
        }
        w.flush().map_err(io(&path))?;
        written.push(path);

        if !self.single_app.is_empty() {
            let path = dir.join("single_app.csv");
            let mut w = csv::Writer::from_path(&path).map_err(csv_err("single_app.csv"))?;
            for a in &self.single_app {
                w.serialize(a).map_err(csv_err("single_app.csv"))?;
            }
            w.flush().map_err(io(&path))?;
            written.push(path);
        }

        if !self.series.is_empty() {
            let name = format!("series_{SERIES_WORKLOAD}.csv");
            let path = dir.join(&name);
            let mut w = csv::Writer::from_path(&path).map_err(csv_err(&name))?;
            w.write_record([
                "policy",
                "time_s",
                "gpus_busy",
                "cores_busy",
                "tasks_reading",
                "io_tasks",
                "read_mib_per_s",
            ])
            .map_err(csv_err(&name))?;
            for p in &self.series {
                let s = &p.series;
                for i in 0..s.len() {
                    w.write_record([
                        p.policy.clone(),
                        format!("{:.3}", s.time_ns[i] as f64 / 1e9),
                        s.gpus_busy[i].to_string(),
                        s.cores_busy[i].to_string(),
                        s.tasks_reading[i].to_string(),
                        s.io_tasks[i].to_string(),
                        format!("{:.3}", s.read_bytes_per_s[i] / (1024.0 * 1024.0)),
                    ])
                    .map_err(csv_err(&name))?;
                }
            }
            w.flush().map_err(io(&path))?;
            written.push(path);
        }

        written.extend(self.write_plots(dir)?);
        Ok(written)
    }

    fn write_plots(&self, dir: &Path) -> Result<Vec<std::path::PathBuf>, SimError> {
        let mut written = Vec::new();
        let labels: Vec<String> = self
            .workloads
            .iter()
            .map(|r| r.letter.to_string())
            .collect();
        let with_avg = |mut v: Vec<String>| {
            v.push("avg".into());
            v
        };
        let series3 = |f: &dyn Fn(&WorkloadResult) -> [f64; 3], avg: [f64; 3]| {
            let mut cols: [Vec<f64>; 3] = Default::default();
            for r in &self.workloads {
                for (c, v) in cols.iter_mut().zip(f(r)) {
                    c.push(v);
                }
            }
            for (c, v) in cols.iter_mut().zip(avg) {
                c.push(v);
            }
            cols
        };
        let a = &self.average;
        let names = ["FIFO", "model-based (Hadoop+)", "HDAS"];

        let [f, m, h] = series3(
            &|r| [r.speedup.fifo, r.speedup.hadoop_model, r.speedup.hdas],
            [a.speedup.fifo, a.speedup.hadoop_model, a.speedup.hdas],
        );
        let path = dir.join("fig6_speedup.svg");
        plot::bars(
            &path,
            &Bars {
                title: "Speedup over CPU-only Hadoop (cf. paper Fig. 6)",
                y_label: "speedup (x)",
                categories: with_avg(labels.clone()),
                series: vec![(names[0], f), (names[1], m), (names[2], h)],
                reference: None,
            },
        )?;
        written.push(path);

        let [_, m, h] = series3(
            &|r| [1.0, r.vs_fifo.hadoop_model, r.vs_fifo.hdas],
            [1.0, a.vs_fifo.hadoop_model, a.vs_fifo.hdas],
        );
        let path = dir.join("fig8_vs_fifo.svg");
        plot::bars(
            &path,
            &Bars {
                title: "Run time normalised to FIFO (cf. paper Fig. 8)",
                y_label: "run time / FIFO's",
                categories: with_avg(labels.clone()),
                series: vec![(names[1], m), (names[2], h)],
                reference: Some(1.0),
            },
        )?;
        written.push(path);

        let [f, m, h] = series3(
            &|r| [r.delay.fifo, r.delay.hadoop_model, r.delay.hdas],
            [a.delay.fifo, a.delay.hadoop_model, a.delay.hdas],
        );
        let path = dir.join("fig9_task_delay.svg");
        plot::bars(
            &path,
            &Bars {
                title: "Average task delay T / T_base (cf. paper Fig. 9)",
                y_label: "average task delay",
                categories: with_avg(labels),
                series: vec![(names[0], f), (names[1], m), (names[2], h)],
                reference: Some(1.0),
            },
        )?;
        written.push(path);

        for p in &self.series {
            let s = &p.series;
            let t: Vec<f64> = s.time_ns.iter().map(|&t| t as f64 / 1e9).collect();
            // Samples flicker as tasks start and stop; plot 30-sample moving means (the CSV keeps
            // every sample).
            let step_s = match (t.first(), t.get(1)) {
                (Some(a), Some(b)) => b - a,
                _ => 1.0,
            };
            let smooth = |v: Vec<f64>| plot::moving_mean(&v, 30);
            let y_label = format!("count ({:.0} s moving mean)", 30.0 * step_s);
            let path = dir.join(format!("load_{SERIES_WORKLOAD}_{}.svg", p.policy));
            plot::lines(
                &path,
                &Lines {
                    title: &format!(
                        "Workload {SERIES_WORKLOAD} under {}: GPUs busy and IO load (cf. paper Figs. 3, 4, 10)",
                        p.policy
                    ),
                    x_label: "time (s)",
                    y_label: &y_label,
                    x: t,
                    series: vec![
                        (
                            "GPUs busy (of 24)",
                            smooth(s.gpus_busy.iter().map(|&v| f64::from(v)).collect()),
                        ),
                        (
                            "tasks reading from disk",
                            smooth(s.tasks_reading.iter().map(|&v| f64::from(v)).collect()),
                        ),
                        (
                            "tasks with input left",
                            smooth(s.io_tasks.iter().map(|&v| f64::from(v)).collect()),
                        ),
                    ],
                },
            )?;
            written.push(path);
        }
        Ok(written)
    }
}
