//! Scenario `sweep`: the batch policies beyond the one configuration of the HDAS paper.
//!
//! Each case draws, from the sweep's seed, a cluster of 2–24 slaves (half of the cases the paper's
//! slave repeated, half a mix of node types: 4–12 cores, 0–4 accelerators of speed 0.5, 1 or 2 and
//! a 64–256 MiB/s disk), a heartbeat interval log-uniform in 0.25–10 s, a workload (half of the
//! cases one of the paper's 25 workloads A–Y, half a random mix of 2–10 applications drawn from the
//! paper's five profiles, submitted together or up to 10 min apart) with task counts scaled to the
//! cluster's size, and ±10 % noise on every profile time the scheduler is told (tasks run at their
//! true times; the policy predicts from the noisy ones). Every policy runs every case with the same
//! draw; the report gives each case's lower bound (`bound`) and, per policy, wins (lowest
//! makespan, ties shared), losses (more than [`LOSS_MARGIN`] worse than the better of `fifo` and
//! `hadoop-model`), the worst case against that baseline and against the bound, and the mean
//! `makespan / bound`.

use crate::batch::{SimConfig, simulate_believing};
use crate::error::SimError;
use crate::scenario::hdas_paper::{self, profiles::PROFILES, workloads};
use hetsched_core::policy::batch::BatchPolicyKind;
use hetsched_core::policy::batch::bound::lower_bound;
use hetsched_core::time::{Time, secs};
use hetsched_core::{Accelerator, AppId, Application, Cluster, Node, NodeId, Rack, RackId};
use rand::{Rng, SeedableRng};
use serde::Serialize;

/// A policy "loses" a case when its makespan is more than this fraction above the better of
/// `fifo` and `hadoop-model`.
pub const LOSS_MARGIN: f64 = 0.02;

/// The most cases a sweep runs: a million, days of runs at the documented sweep's pace (1,000
/// cases in minutes). Every case's result is kept for the report, and its slot is allocated
/// before the first case runs: 10^12 cases asked for 120 TB, and `usize::MAX` panicked.
pub const MAX_CASES: usize = 1_000_000;

/// The largest `scale`: ten times the documented sweep's task counts, as `hdas-paper`'s
/// ([`hdas_paper::MAX_SCALE`]). A case's tasks grow with it, and so does its time: at 100, one
/// case ran for hours.
pub const MAX_SCALE: f64 = hdas_paper::MAX_SCALE;

/// The policies the sweep compares (cpu-only is left out: it is the baseline of speedups, not a
/// contender, and its day-long runs would dominate the sweep's time).
pub const POLICIES: [BatchPolicyKind; 5] = [
    BatchPolicyKind::Fifo,
    BatchPolicyKind::Drf,
    BatchPolicyKind::HadoopModel,
    BatchPolicyKind::Hdas,
    BatchPolicyKind::HdasHetero,
];

/// Settings of a sweep.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SweepOptions {
    /// Number of cases: 1 to [`MAX_CASES`].
    pub cases: usize,
    /// Seed of every draw (clusters, workloads, noise, heartbeat phases).
    pub seed: u64,
    /// Multiplies every task count (1.0: the documented sweep); more than 0, at most
    /// [`MAX_SCALE`].
    pub scale: f64,
    /// Worker threads (0: as many as the machine has cores). Results do not depend on it.
    pub threads: usize,
}

impl Default for SweepOptions {
    fn default() -> Self {
        Self {
            cases: 1000,
            seed: 1,
            scale: 1.0,
            threads: 0,
        }
    }
}

/// One drawn case.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SweepCase {
    /// Position in the sweep.
    pub index: usize,
    /// Slaves in the cluster.
    pub slaves: usize,
    /// Whether the slaves are all the paper's slave.
    pub uniform: bool,
    /// Heartbeat interval, seconds.
    pub heartbeat_s: f64,
    /// `A`–`Y` for a paper workload, or `mix` for a random mix.
    pub workload: String,
    /// The applications, `KNN+NB+BP`.
    pub applications: String,
    /// Tasks in the workload.
    pub tasks: u64,
    /// The fluid lower bound, seconds.
    pub lower_bound_s: f64,
    /// Makespan per policy (in [`POLICIES`] order), seconds.
    pub makespan_s: Vec<f64>,
}

/// One policy over the whole sweep.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PolicySummary {
    /// The policy.
    pub policy: String,
    /// Cases where it has the lowest makespan (ties count for each).
    pub wins: usize,
    /// Cases where it is more than [`LOSS_MARGIN`] worse than min(fifo, hadoop-model).
    pub losses: usize,
    /// Its largest makespan / min(fifo, hadoop-model).
    pub worst_vs_baseline: f64,
    /// The case of that worst ratio.
    pub worst_case: usize,
    /// Mean makespan / bound.
    pub mean_vs_bound: f64,
    /// Largest makespan / bound.
    pub max_vs_bound: f64,
}

/// Everything the sweep produced.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SweepReport {
    /// The settings.
    pub options: SweepOptions,
    /// The policies, in the order of each case's `makespan_s`.
    pub policies: Vec<String>,
    /// Every case.
    pub cases: Vec<SweepCase>,
    /// Per policy.
    pub summary: Vec<PolicySummary>,
}

/// A drawn case, ready to simulate.
struct Drawn {
    case: SweepCase,
    cluster: Cluster,
    apps: Vec<Application>,
    believed: Vec<Application>,
    config: SimConfig,
}

fn slave(id: usize, cores: u32, gpus: &[f64], disk_mib: f64) -> Node {
    Node {
        id: NodeId(id as u32),
        name: format!("slave{}", id + 1),
        rack: RackId(0),
        cores,
        core_speed: 1.0,
        memory_bytes: hdas_paper::profiles::NODE_MEMORY,
        disk_read_bw: disk_mib * 1024.0 * 1024.0,
        net_bw: 125_000_000.0,
        net_latency: 100_000,
        accelerators: gpus
            .iter()
            .map(|&speed| Accelerator {
                kind: "gpu".into(),
                memory_bytes: 3 << 30,
                speed,
            })
            .collect(),
        attributes: Vec::new(),
    }
}

/// `value · U(1 − 0.1, 1 + 0.1)`, rounded to the nanosecond.
fn noisy(rng: &mut impl Rng, value: Time) -> Time {
    (value as f64 * rng.random_range(0.9..=1.1)).round() as Time
}

fn draw(index: usize, options: &SweepOptions) -> Drawn {
    let mut rng = rand_pcg::Pcg64Mcg::seed_from_u64(
        options
            .seed
            .wrapping_mul(0x9E37_79B9_7F4A_7C15)
            .wrapping_add(index as u64),
    );
    let slaves = rng.random_range(2..=24usize);
    let uniform = rng.random_bool(0.5);
    let nodes: Vec<Node> = (0..slaves)
        .map(|i| {
            if uniform {
                slave(i, 6, &[1.0; 4], hdas_paper::profiles::DISK_MIB_S)
            } else {
                let cores = [4, 6, 8, 12][rng.random_range(0..4)];
                let gpus = rng.random_range(0..=4usize);
                let speed = [0.5, 1.0, 2.0][rng.random_range(0..3)];
                let disk = [64.0, 128.0, 256.0][rng.random_range(0..3)];
                slave(i, cores, &vec![speed; gpus], disk)
            }
        })
        .collect();
    let cluster = Cluster {
        racks: vec![Rack {
            id: RackId(0),
            name: "rack0".into(),
        }],
        nodes,
    };
    let heartbeat_s = (0.25f64.ln() + rng.random::<f64>() * (10.0f64 / 0.25).ln()).exp();
    // Work grows with the cluster so that every case keeps the slaves busy for a while.
    let size = slaves as f64 / hdas_paper::profiles::NODES as f64;
    let (workload, mut apps) = if rng.random_bool(0.5) {
        let all = workloads();
        let w = &all[rng.random_range(0..all.len())];
        let scale = 0.25 * size * options.scale;
        (w.letter.to_string(), w.applications(scale))
    } else {
        let n = rng.random_range(2..=10usize);
        let spread = rng.random_bool(0.5);
        let mut submit = 0.0;
        let apps = (0..n)
            .map(|i| {
                let p = &PROFILES[rng.random_range(0..PROFILES.len())];
                let scale = 0.75 * size / n as f64 * rng.random_range(0.5..1.5) * options.scale;
                let mut a = hdas_paper::application(p, AppId(i as u32), scale);
                if spread && i > 0 {
                    submit += rng.random_range(0.0..600.0);
                }
                a.submit_time = secs(submit);
                a
            })
            .collect();
        ("mix".to_string(), apps)
    };
    for a in &mut apps {
        a.name = format!("{}#{}", a.name, a.id.0);
    }
    let believed = apps
        .iter()
        .map(|a| {
            let mut b = a.clone();
            if let Some(c) = b.cpu.as_mut() {
                c.compute = noisy(&mut rng, c.compute);
                c.read = noisy(&mut rng, c.read);
            }
            if let Some(g) = b.gpu.as_mut() {
                g.compute = noisy(&mut rng, g.compute);
                g.copy = noisy(&mut rng, g.copy);
                g.read = noisy(&mut rng, g.read);
            }
            b
        })
        .collect();
    let config = SimConfig {
        heartbeat_interval: secs(heartbeat_s),
        seed: rng.random(),
        record_tasks: false,
        sample_interval: None,
        ..SimConfig::default()
    };
    let applications = apps
        .iter()
        .map(|a| a.name.split('#').next().unwrap_or_default().to_string())
        .collect::<Vec<_>>()
        .join("+");
    Drawn {
        case: SweepCase {
            index,
            slaves,
            uniform,
            heartbeat_s,
            workload,
            applications,
            tasks: apps.iter().map(|a| u64::from(a.tasks)).sum(),
            lower_bound_s: 0.0,
            makespan_s: Vec::new(),
        },
        cluster,
        apps,
        believed,
        config,
    }
}

/// The inputs of case `index` of `options`: the cluster, the applications as they run, the
/// applications as the scheduler is told them (noisy profiles) and the simulation settings.
pub fn case_inputs(
    options: &SweepOptions,
    index: usize,
) -> (Cluster, Vec<Application>, Vec<Application>, SimConfig) {
    let d = draw(index, options);
    (d.cluster, d.apps, d.believed, d.config)
}

/// Runs case `index` of `options` under `kind` and returns the whole result, every task recorded
/// (for looking into one case: `hetsched sim sweep` prints the index of each policy's worst case).
pub fn run_one(
    options: &SweepOptions,
    index: usize,
    kind: BatchPolicyKind,
) -> Result<crate::metrics::SimResult, SimError> {
    let mut d = draw(index, options);
    d.config.record_tasks = true;
    let mut policy = kind.build();
    simulate_believing(
        &d.cluster,
        &d.apps,
        &d.believed,
        policy.as_mut(),
        &d.config,
        &mut |_| {},
    )
}

/// Simulates one case under every policy and computes its bound.
fn run_case(d: Drawn) -> Result<SweepCase, SimError> {
    let mut case = d.case;
    case.lower_bound_s = lower_bound(&d.cluster, &d.apps)
        .map_err(|e| SimError::Internal(format!("sweep case {}: {e}", case.index)))?
        .lower_bound_s;
    for kind in POLICIES {
        let mut policy = kind.build();
        let r = simulate_believing(
            &d.cluster,
            &d.apps,
            &d.believed,
            policy.as_mut(),
            &d.config,
            &mut |_| {},
        )?;
        case.makespan_s.push(r.makespan_s);
    }
    Ok(case)
}

/// Runs the sweep; `progress(done, total)` is called after each case.
pub fn run(
    options: &SweepOptions,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<SweepReport, SimError> {
    if options.cases == 0 {
        return Err(SimError::Config {
            field: "cases",
            problem: "must be at least 1".into(),
        });
    }
    if options.cases > MAX_CASES {
        return Err(SimError::Config {
            field: "cases",
            problem: format!(
                "must be at most {MAX_CASES} (every case's result is kept for the report), not {}",
                options.cases
            ),
        });
    }
    hdas_paper::check_scale(options.scale, "the documented sweep")?;
    let threads = if options.threads == 0 {
        std::thread::available_parallelism().map_or(1, |n| n.get())
    } else {
        options.threads
    }
    .clamp(1, options.cases);
    let next = std::sync::atomic::AtomicUsize::new(0);
    let (tx, rx) = std::sync::mpsc::channel::<(usize, Result<SweepCase, SimError>)>();
    let mut cases: Vec<Option<SweepCase>> = vec![None; options.cases];
    std::thread::scope(|scope| {
        for _ in 0..threads {
            let tx = tx.clone();
            let next = &next;
            scope.spawn(move || {
                loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    if i >= options.cases {
                        break;
                    }
                    if tx.send((i, run_case(draw(i, options)))).is_err() {
                        break;
                    }
                }
            });
        }
        drop(tx);
        let mut first_error = None;
        for (k, (i, r)) in rx.into_iter().enumerate() {
            match r {
                Ok(c) => cases[i] = Some(c),
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
            progress(k + 1, options.cases);
        }
        match first_error {
            Some(e) => Err(e),
            None => Ok(()),
        }
    })?;
    let cases: Vec<SweepCase> = cases
        .into_iter()
        .map(|c| c.ok_or_else(|| SimError::Internal("a sweep case produced no result".into())))
        .collect::<Result<_, _>>()?;
    Ok(SweepReport {
        options: options.clone(),
        policies: POLICIES.iter().map(|p| p.to_string()).collect(),
        summary: summarise(&cases),
        cases,
    })
}

fn summarise(cases: &[SweepCase]) -> Vec<PolicySummary> {
    let at = |kind: BatchPolicyKind| POLICIES.iter().position(|&p| p == kind).unwrap_or(0);
    let (fifo, model) = (at(BatchPolicyKind::Fifo), at(BatchPolicyKind::HadoopModel));
    POLICIES
        .iter()
        .enumerate()
        .map(|(p, kind)| {
            let mut s = PolicySummary {
                policy: kind.to_string(),
                wins: 0,
                losses: 0,
                worst_vs_baseline: 0.0,
                worst_case: 0,
                mean_vs_bound: 0.0,
                max_vs_bound: 0.0,
            };
            for c in cases {
                let m = c.makespan_s[p];
                let best = c.makespan_s.iter().copied().fold(f64::INFINITY, f64::min);
                if m <= best * (1.0 + 1e-9) {
                    s.wins += 1;
                }
                let baseline = c.makespan_s[fifo].min(c.makespan_s[model]);
                let vs = m / baseline;
                if vs > 1.0 + LOSS_MARGIN {
                    s.losses += 1;
                }
                if vs > s.worst_vs_baseline {
                    s.worst_vs_baseline = vs;
                    s.worst_case = c.index;
                }
                let vb = m / c.lower_bound_s;
                s.mean_vs_bound += vb / cases.len() as f64;
                s.max_vs_bound = s.max_vs_bound.max(vb);
            }
            s
        })
        .collect()
}

impl SweepReport {
    /// The per-policy summary as a Markdown table, with the sweep's size above it.
    pub fn render_table(&self) -> String {
        use comfy_table::{Table, presets::ASCII_MARKDOWN};
        let mut t = Table::new();
        t.load_preset(ASCII_MARKDOWN);
        t.set_header(vec![
            "policy",
            "wins",
            "losses (> 2 % worse than min(fifo, hadoop-model))",
            "worst vs min(fifo, hadoop-model)",
            "worst case",
            "mean makespan / bound",
            "max makespan / bound",
        ]);
        for s in &self.summary {
            t.add_row(vec![
                s.policy.clone(),
                s.wins.to_string(),
                s.losses.to_string(),
                format!("{:+.1} %", (s.worst_vs_baseline - 1.0) * 100.0),
                format!("#{}", s.worst_case),
                format!("{:.3}", s.mean_vs_bound),
                format!("{:.3}", s.max_vs_bound),
            ]);
        }
        let paper = self.cases.iter().filter(|c| c.workload != "mix").count();
        format!(
            "sweep: {} (seed {}, scale {}): {} of the paper's workloads, {} random {}; \
             2-24 slaves, heartbeats 0.25-10 s, ±10 % profile noise\n{t}",
            hetsched_core::text::count(self.cases.len() as u64, "case"),
            self.options.seed,
            self.options.scale,
            paper,
            self.cases.len() - paper,
            hetsched_core::text::agree((self.cases.len() - paper) as u64, "mix", "mixes")
        )
    }
}
