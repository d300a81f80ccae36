//! Scenario `hdas-paper`: the experiment of the HDAS paper (spec 02, "Experiment to reproduce").
//!
//! Six slaves (6 cores, a 128 MiB/s disk and 4 Tesla C2050 each) run 25 mixed workloads A–Y — the
//! 10 pairs, 10 triples and 5 quadruples of KNN, Kmeans, RS, NB, BP in lexicographic order — under
//! CPU-only Hadoop, FIFO, Hadoop+'s model-based allocation and HDAS. The report gives, per workload
//! and on average, the makespan under each policy, the speedup over CPU-only, the run time
//! normalised to FIFO and the average task delay, beside the paper's figures; and the GPU-busy and
//! IO-load time series of workload P for the paper's Figures 3, 4 and 10.
//!
//! The applications' profiles live in [`profiles`]; the report's outputs in [`report`].

pub mod profiles;
pub mod report;

use crate::batch::{SimConfig, simulate};
use crate::error::SimError;
use crate::metrics::{SimResult, TimeSeries};
use hetsched_core::policy::batch::bound::lower_bound;
use hetsched_core::policy::batch::{BatchPolicyKind, PolicyConfig};
use hetsched_core::time::secs;
use hetsched_core::{
    Accelerator, AppId, Application, Cluster, CpuVariant, GpuVariant, Node, NodeId, Rack, RackId,
    Resources,
};
use profiles::{AppProfile, CORES, DISK_MIB_S, GPUS, NODE_MEMORY, NODES, PROFILES, TASK_MEMORY};
use serde::Serialize;

/// The policies the paper compares, baseline first.
pub const POLICIES: [BatchPolicyKind; 4] = [
    BatchPolicyKind::CpuOnly,
    BatchPolicyKind::Fifo,
    BatchPolicyKind::HadoopModel,
    BatchPolicyKind::Hdas,
];

/// The workload whose time series the report plots (the paper's Figures 3, 4, 10 show P).
pub const SERIES_WORKLOAD: char = 'P';

/// At most this many samples of each time series are kept in the report: a longer series keeps
/// every k-th sample (the state at those instants), so CPU-only's day-long run stays small.
pub const MAX_SERIES_POINTS: usize = 2000;

/// Settings of the scenario.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct HdasPaperOptions {
    /// Multiplies every application's task count (at least one task each); 1.0 is the documented
    /// experiment, smaller values make quick runs (tests).
    pub scale: f64,
    /// Simulator settings (seed, heartbeat interval, CPU read chunks).
    pub sim: SimConfig,
    /// Workload letters to run, in either case (empty: all 25).
    pub workloads: Vec<char>,
    /// Worker threads (0: as many as the machine has cores). Results do not depend on it.
    pub threads: usize,
    /// The policy in the HDAS column: `hdas` (Algorithm 1 as published) or `hdas-hetero` (with
    /// the completion-aware CPU gate, beyond the paper).
    pub hdas_policy: BatchPolicyKind,
    /// Settings of the policies (HDAS's tolerance, eq. (3)'s `#IOtask` cap).
    pub policy_config: PolicyConfig,
}

impl Default for HdasPaperOptions {
    fn default() -> Self {
        Self {
            scale: 1.0,
            sim: SimConfig {
                record_tasks: false,
                ..SimConfig::default()
            },
            workloads: Vec::new(),
            threads: 0,
            hdas_policy: BatchPolicyKind::Hdas,
            policy_config: PolicyConfig::default(),
        }
    }
}

/// How far the scenario has got.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ScenarioProgress {
    /// Simulations finished.
    pub runs_done: usize,
    /// Simulations in the scenario.
    pub runs_total: usize,
    /// The run that just finished, e.g. `"P/hdas"`.
    pub last: String,
}

/// The paper's cluster: six identical slaves in one rack.
pub fn cluster() -> Cluster {
    let nodes = (0..NODES)
        .map(|i| Node {
            id: NodeId(i as u32),
            name: format!("slave{}", i + 1),
            rack: RackId(0),
            cores: CORES,
            core_speed: 1.0,
            memory_bytes: NODE_MEMORY,
            disk_read_bw: DISK_MIB_S * 1024.0 * 1024.0,
            net_bw: 125_000_000.0,
            net_latency: 100_000,
            accelerators: (0..GPUS)
                .map(|_| Accelerator {
                    kind: "tesla-c2050".into(),
                    memory_bytes: 3 << 30,
                    speed: 1.0,
                })
                .collect(),
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

/// The application of `profile` with id `id`, its task count scaled by `scale`.
pub fn application(profile: &AppProfile, id: AppId, scale: f64) -> Application {
    let read = secs(profile.read_s());
    let tasks = (f64::from(profile.tasks) * scale).round().max(1.0) as u32;
    Application {
        id,
        name: profile.name.to_string(),
        priority: 0,
        submit_time: 0,
        split_bytes: profile.split_mib << 20,
        tasks,
        cpu: Some(CpuVariant {
            compute: secs(profile.cpu_compute_s),
            read,
            request: Resources::new(1, TASK_MEMORY, 0),
            time_limit: None,
        }),
        gpu: Some(GpuVariant {
            compute: secs(profile.gpu_compute_s),
            copy: secs(profile.gpu_copy_s),
            read,
            request: Resources::new(1, TASK_MEMORY, 1),
            kind: None,
            time_limit: None,
        }),
        requires: Vec::new(),
        max_running: 0,
        nodes: 1,
        user: None,
    }
}

/// One mixed workload: a letter and the indices (into [`PROFILES`]) of its applications.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Workload {
    /// `A`–`Y`.
    pub letter: char,
    /// Indices into [`PROFILES`], increasing.
    pub apps: Vec<usize>,
}

impl Workload {
    /// `"KNN+Kmeans"`.
    pub fn name(&self) -> String {
        self.apps
            .iter()
            .map(|&i| PROFILES[i].name)
            .collect::<Vec<_>>()
            .join("+")
    }

    /// The workload's applications, submitted together at t = 0 in the paper's order.
    pub fn applications(&self, scale: f64) -> Vec<Application> {
        self.apps
            .iter()
            .enumerate()
            .map(|(id, &p)| application(&PROFILES[p], AppId(id as u32), scale))
            .collect()
    }
}

/// Workloads A–Y: the pairs, then the triples, then the quadruples of the five applications, each
/// group in lexicographic order of the paper's application order.
pub fn workloads() -> Vec<Workload> {
    let n = PROFILES.len();
    let mut combos: Vec<Vec<usize>> = Vec::new();
    for size in 2..=4 {
        let mut group = Vec::new();
        subsets(n, size, 0, &mut Vec::new(), &mut group);
        combos.extend(group);
    }
    combos
        .into_iter()
        .zip('A'..='Z')
        .map(|(apps, letter)| Workload { letter, apps })
        .collect()
}

/// All `size`-subsets of `start..n`, in lexicographic order.
fn subsets(n: usize, size: usize, start: usize, cur: &mut Vec<usize>, out: &mut Vec<Vec<usize>>) {
    if cur.len() == size {
        out.push(cur.clone());
        return;
    }
    for i in start..n {
        cur.push(i);
        subsets(n, size, i + 1, cur, out);
        cur.pop();
    }
}

/// Makespans (seconds) under the four policies.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct PerPolicy {
    /// CPU-only Hadoop.
    pub cpu_only: f64,
    /// FIFO.
    pub fifo: f64,
    /// Hadoop+'s model-based allocation.
    pub hadoop_model: f64,
    /// HDAS.
    pub hdas: f64,
}

impl PerPolicy {
    fn set(&mut self, kind: BatchPolicyKind, v: f64) {
        match kind {
            BatchPolicyKind::CpuOnly => self.cpu_only = v,
            BatchPolicyKind::Fifo => self.fifo = v,
            BatchPolicyKind::HadoopModel => self.hadoop_model = v,
            BatchPolicyKind::Hdas | BatchPolicyKind::HdasHetero => self.hdas = v,
            BatchPolicyKind::Drf => {}
        }
    }
}

/// A figure for FIFO, the model and HDAS (the three accelerated policies).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Accelerated {
    /// FIFO.
    pub fifo: f64,
    /// Hadoop+'s model-based allocation.
    pub hadoop_model: f64,
    /// HDAS.
    pub hdas: f64,
}

/// One workload's results.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct WorkloadResult {
    /// `A`–`Y`.
    pub letter: char,
    /// `"KNN+NB+BP"`.
    pub name: String,
    /// Tasks in the workload.
    pub tasks: u64,
    /// Makespan under each policy, seconds.
    pub makespan_s: PerPolicy,
    /// Speedup over CPU-only.
    pub speedup: Accelerated,
    /// Run time normalised to FIFO's (FIFO = 1.0).
    pub vs_fifo: Accelerated,
    /// Average task delay (spec 02 eq. (5)); CPU-only's is in `cpu_only_delay`.
    pub delay: Accelerated,
    /// Average task delay under CPU-only.
    pub cpu_only_delay: f64,
    /// Share of tasks that ran on GPUs.
    pub gpu_share: Accelerated,
    /// The fluid lower bound on any schedule's makespan (`hetsched_core::policy::batch::bound`),
    /// seconds.
    pub lower_bound_s: f64,
    /// Each policy's makespan over the lower bound (1.0 would be optimal).
    pub vs_bound: PerPolicy,
}

/// One application alone on the cluster: Hadoop+'s speedup over CPU-only Hadoop.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SingleApp {
    /// The application.
    pub name: String,
    /// CPU_base / GPU_base task time.
    pub task_speedup: f64,
    /// GPU_base read share.
    pub gpu_read_fraction: f64,
    /// Makespan under CPU-only, seconds.
    pub cpu_only_s: f64,
    /// Makespan under Hadoop+'s model-based allocation, seconds.
    pub hadoop_model_s: f64,
    /// Their ratio.
    pub speedup: f64,
}

/// Averages over the workloads run.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Averages {
    /// Mean makespan, seconds.
    pub makespan_s: PerPolicy,
    /// Mean speedup over CPU-only.
    pub speedup: Accelerated,
    /// Best speedup over CPU-only.
    pub max_speedup: Accelerated,
    /// Mean run time normalised to FIFO.
    pub vs_fifo: Accelerated,
    /// Lowest run time normalised to FIFO.
    pub min_vs_fifo: Accelerated,
    /// Mean average task delay.
    pub delay: Accelerated,
    /// Workloads whose average task delay is ≤ 1.06.
    pub delay_at_most_1_06: [usize; 3],
    /// Mean makespan over lower bound.
    pub vs_bound: PerPolicy,
    /// Largest makespan over lower bound.
    pub max_vs_bound: PerPolicy,
}

/// The time series of one policy on workload [`SERIES_WORKLOAD`].
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PolicySeries {
    /// The policy.
    pub policy: String,
    /// Its cluster load over time.
    pub series: TimeSeries,
}

/// Everything the scenario produced.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct HdasPaperReport {
    /// The settings it ran with.
    pub options: HdasPaperOptions,
    /// The applications' profiles.
    pub profiles: Vec<AppProfile>,
    /// Per workload, in letter order.
    pub workloads: Vec<WorkloadResult>,
    /// Averages over them.
    pub average: Averages,
    /// Each application alone (only when every workload was run).
    pub single_app: Vec<SingleApp>,
    /// Load over time of workload P under each policy (if P was run).
    pub series: Vec<PolicySeries>,
}

/// One simulation to run: workload (or single application), policy.
#[derive(Clone, Debug)]
struct Job {
    key: JobKey,
    apps: Vec<Application>,
    policy: BatchPolicyKind,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum JobKey {
    Workload(usize),
    Single(usize),
}

/// The largest `scale`: ten times the paper's task counts. A run's time grows with it (the
/// paper's scale runs in seconds; at 1,000 it ran for hours, under the simulator's bound on
/// tasks); `sim sweep` takes the same bound.
pub const MAX_SCALE: f64 = 10.0;

/// Checks a `scale` of task counts: positive, finite and at most [`MAX_SCALE`] (ten times
/// `of`'s tasks; `sim sweep` checks its own with this too).
pub(crate) fn check_scale(scale: f64, of: &str) -> Result<(), SimError> {
    if !(scale.is_finite() && scale > 0.0) {
        return Err(SimError::Config {
            field: "scale",
            problem: format!("must be a positive number, not {scale}"),
        });
    }
    if scale > MAX_SCALE {
        return Err(SimError::Config {
            field: "scale",
            problem: format!("must be at most {MAX_SCALE} (ten times {of}'s tasks), not {scale}"),
        });
    }
    Ok(())
}

/// Runs the scenario; `progress` is called after each simulation.
pub fn run(
    options: &HdasPaperOptions,
    progress: &mut dyn FnMut(ScenarioProgress),
) -> Result<HdasPaperReport, SimError> {
    check_scale(options.scale, "the paper")?;
    if !matches!(
        options.hdas_policy,
        BatchPolicyKind::Hdas | BatchPolicyKind::HdasHetero
    ) {
        return Err(SimError::Config {
            field: "hdas_policy",
            problem: format!("must be hdas or hdas-hetero, not {}", options.hdas_policy),
        });
    }
    let all = workloads();
    // Letters in either case, as `sim accel-paper --kernels lu` takes kernel names.
    let asked: Vec<char> = options
        .workloads
        .iter()
        .map(char::to_ascii_uppercase)
        .collect();
    for &w in &asked {
        if !all.iter().any(|x| x.letter == w) {
            return Err(SimError::Config {
                field: "workloads",
                problem: format!("unknown workload `{w}` (expected A–Y)"),
            });
        }
    }
    let chosen: Vec<&Workload> = all
        .iter()
        .filter(|w| asked.is_empty() || asked.contains(&w.letter))
        .collect();
    let everything = chosen.len() == all.len();

    let mut jobs = Vec::new();
    for (i, w) in chosen.iter().enumerate() {
        for policy in POLICIES {
            let policy = if policy == BatchPolicyKind::Hdas {
                options.hdas_policy
            } else {
                policy
            };
            jobs.push(Job {
                key: JobKey::Workload(i),
                apps: w.applications(options.scale),
                policy,
            });
        }
    }
    if everything {
        for (i, p) in PROFILES.iter().enumerate() {
            for policy in [BatchPolicyKind::CpuOnly, BatchPolicyKind::HadoopModel] {
                jobs.push(Job {
                    key: JobKey::Single(i),
                    apps: vec![application(p, AppId(0), options.scale)],
                    policy,
                });
            }
        }
    }

    let results = run_jobs(&jobs, options, &chosen, progress)?;

    let mut per_workload: Vec<Vec<(BatchPolicyKind, SimResult)>> = vec![Vec::new(); chosen.len()];
    let mut singles: Vec<PerPolicy> = vec![PerPolicy::default(); PROFILES.len()];
    for (job, result) in jobs.iter().zip(results) {
        match job.key {
            JobKey::Workload(i) => per_workload[i].push((job.policy, result)),
            JobKey::Single(i) => singles[i].set(job.policy, result.makespan_s),
        }
    }

    let mut series = Vec::new();
    let mut rows = Vec::new();
    for (w, runs) in chosen.iter().zip(per_workload) {
        let mut makespan = PerPolicy::default();
        let mut delay = PerPolicy::default();
        let mut gpu_share = PerPolicy::default();
        let mut tasks = 0;
        for (kind, r) in &runs {
            makespan.set(*kind, r.makespan_s);
            delay.set(*kind, r.average_task_delay);
            gpu_share.set(*kind, r.gpu_tasks as f64 / (r.total_tasks.max(1)) as f64);
            tasks = r.total_tasks;
        }
        if w.letter == SERIES_WORKLOAD {
            for (kind, r) in runs {
                series.push(PolicySeries {
                    policy: kind.to_string(),
                    series: r
                        .series
                        .every_nth(r.series.len().div_ceil(MAX_SERIES_POINTS)),
                });
            }
        }
        let ratio = |a: f64, b: f64| if b > 0.0 { a / b } else { 0.0 };
        let bound = lower_bound(&cluster(), &w.applications(options.scale))
            .map_err(|e| SimError::Internal(format!("workload {}: {e}", w.letter)))?
            .lower_bound_s;
        rows.push(WorkloadResult {
            letter: w.letter,
            name: w.name(),
            tasks,
            makespan_s: makespan,
            speedup: Accelerated {
                fifo: ratio(makespan.cpu_only, makespan.fifo),
                hadoop_model: ratio(makespan.cpu_only, makespan.hadoop_model),
                hdas: ratio(makespan.cpu_only, makespan.hdas),
            },
            vs_fifo: Accelerated {
                fifo: 1.0,
                hadoop_model: ratio(makespan.hadoop_model, makespan.fifo),
                hdas: ratio(makespan.hdas, makespan.fifo),
            },
            delay: Accelerated {
                fifo: delay.fifo,
                hadoop_model: delay.hadoop_model,
                hdas: delay.hdas,
            },
            cpu_only_delay: delay.cpu_only,
            gpu_share: Accelerated {
                fifo: gpu_share.fifo,
                hadoop_model: gpu_share.hadoop_model,
                hdas: gpu_share.hdas,
            },
            lower_bound_s: bound,
            vs_bound: PerPolicy {
                cpu_only: ratio(makespan.cpu_only, bound),
                fifo: ratio(makespan.fifo, bound),
                hadoop_model: ratio(makespan.hadoop_model, bound),
                hdas: ratio(makespan.hdas, bound),
            },
        });
    }

    let single_app = if everything {
        PROFILES
            .iter()
            .zip(&singles)
            .map(|(p, m)| SingleApp {
                name: p.name.to_string(),
                task_speedup: p.cpu_base_s() / p.gpu_base_s(),
                gpu_read_fraction: p.gpu_read_fraction(),
                cpu_only_s: m.cpu_only,
                hadoop_model_s: m.hadoop_model,
                speedup: if m.hadoop_model > 0.0 {
                    m.cpu_only / m.hadoop_model
                } else {
                    0.0
                },
            })
            .collect()
    } else {
        Vec::new()
    };

    Ok(HdasPaperReport {
        options: options.clone(),
        profiles: PROFILES.to_vec(),
        average: averages(&rows),
        workloads: rows,
        single_app,
        series,
    })
}

fn averages(rows: &[WorkloadResult]) -> Averages {
    let n = rows.len().max(1) as f64;
    let mean = |f: &dyn Fn(&WorkloadResult) -> f64| rows.iter().map(f).sum::<f64>() / n;
    let max = |f: &dyn Fn(&WorkloadResult) -> f64| rows.iter().map(f).fold(0.0, f64::max);
    let min = |f: &dyn Fn(&WorkloadResult) -> f64| rows.iter().map(f).fold(f64::INFINITY, f64::min);
    let count = |f: &dyn Fn(&WorkloadResult) -> f64| rows.iter().filter(|r| f(r) <= 1.06).count();
    Averages {
        makespan_s: PerPolicy {
            cpu_only: mean(&|r| r.makespan_s.cpu_only),
            fifo: mean(&|r| r.makespan_s.fifo),
            hadoop_model: mean(&|r| r.makespan_s.hadoop_model),
            hdas: mean(&|r| r.makespan_s.hdas),
        },
        speedup: Accelerated {
            fifo: mean(&|r| r.speedup.fifo),
            hadoop_model: mean(&|r| r.speedup.hadoop_model),
            hdas: mean(&|r| r.speedup.hdas),
        },
        max_speedup: Accelerated {
            fifo: max(&|r| r.speedup.fifo),
            hadoop_model: max(&|r| r.speedup.hadoop_model),
            hdas: max(&|r| r.speedup.hdas),
        },
        vs_fifo: Accelerated {
            fifo: 1.0,
            hadoop_model: mean(&|r| r.vs_fifo.hadoop_model),
            hdas: mean(&|r| r.vs_fifo.hdas),
        },
        min_vs_fifo: Accelerated {
            fifo: 1.0,
            hadoop_model: min(&|r| r.vs_fifo.hadoop_model),
            hdas: min(&|r| r.vs_fifo.hdas),
        },
        delay: Accelerated {
            fifo: mean(&|r| r.delay.fifo),
            hadoop_model: mean(&|r| r.delay.hadoop_model),
            hdas: mean(&|r| r.delay.hdas),
        },
        delay_at_most_1_06: [
            count(&|r| r.delay.fifo),
            count(&|r| r.delay.hadoop_model),
            count(&|r| r.delay.hdas),
        ],
        vs_bound: PerPolicy {
            cpu_only: mean(&|r| r.vs_bound.cpu_only),
            fifo: mean(&|r| r.vs_bound.fifo),
            hadoop_model: mean(&|r| r.vs_bound.hadoop_model),
            hdas: mean(&|r| r.vs_bound.hdas),
        },
        max_vs_bound: PerPolicy {
            cpu_only: max(&|r| r.vs_bound.cpu_only),
            fifo: max(&|r| r.vs_bound.fifo),
            hadoop_model: max(&|r| r.vs_bound.hadoop_model),
            hdas: max(&|r| r.vs_bound.hdas),
        },
    }
}

/// Runs every job, on several threads; results come back in job order.
fn run_jobs(
    jobs: &[Job],
    options: &HdasPaperOptions,
    chosen: &[&Workload],
    progress: &mut dyn FnMut(ScenarioProgress),
) -> Result<Vec<SimResult>, SimError> {
    let threads = if options.threads == 0 {
        std::thread::available_parallelism().map_or(1, |n| n.get())
    } else {
        options.threads
    }
    .clamp(1, jobs.len().max(1));
    let label = |job: &Job| match job.key {
        JobKey::Workload(i) => format!("{}/{}", chosen[i].letter, job.policy),
        JobKey::Single(i) => format!("{} alone/{}", PROFILES[i].name, job.policy),
    };
    let next = std::sync::atomic::AtomicUsize::new(0);
    let (tx, rx) = std::sync::mpsc::channel::<(usize, Result<SimResult, SimError>)>();
    let mut results: Vec<Option<SimResult>> = vec![None; jobs.len()];
    std::thread::scope(|scope| {
        for _ in 0..threads {
            let tx = tx.clone();
            let next = &next;
            scope.spawn(move || {
                loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let Some(job) = jobs.get(i) else { break };
                    // Only series of the plotted workload are kept.
                    let mut config = options.sim.clone();
                    if let JobKey::Workload(w) = job.key
                        && chosen[w].letter != SERIES_WORKLOAD
                    {
                        config.sample_interval = None;
                    }
                    if let JobKey::Single(_) = job.key {
                        config.sample_interval = None;
                    }
                    let mut policy = job.policy.build_with(&options.policy_config);
                    let r = simulate(&cluster(), &job.apps, policy.as_mut(), &config, &mut |_| {});
                    if tx.send((i, r)).is_err() {
                        break;
                    }
                }
            });
        }
        drop(tx);
        let mut first_error = None;
        for (k, (i, r)) in rx.into_iter().enumerate() {
            let done = k + 1;
            match r {
                Ok(r) => results[i] = Some(r),
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
            progress(ScenarioProgress {
                runs_done: done,
                runs_total: jobs.len(),
                last: label(&jobs[i]),
            });
        }
        match first_error {
            Some(e) => Err(e),
            None => Ok(()),
        }
    })?;
    results
        .into_iter()
        .map(|r| r.ok_or_else(|| SimError::Internal("a scenario run produced no result".into())))
        .collect()
}
