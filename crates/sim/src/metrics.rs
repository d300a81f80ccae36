//! What a batch simulation measures (spec 02, "Metrics"): makespan, per-task records with their
//! slowdown against the base profile (eq. (5)), per-application completion, the average task delay,
//! and time series of GPU use and disk load for the plots (the paper's Figures 3, 4, 10).
//!
//! Times are integer nanoseconds (`*_ns` fields) so results are exact and byte-identical across
//! runs with the same seed; seconds appear only as convenience fields derived from them.

use hetsched_core::time::{Time, to_secs};
use hetsched_core::{AppId, NodeId, TaskId, UserLimits, Variant};
use serde::{Deserialize, Serialize};

/// How far a simulation has got, reported now and then to the caller's callback.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Progress {
    /// Tasks finished so far.
    pub completed_tasks: u64,
    /// Tasks in the whole workload.
    pub total_tasks: u64,
    /// Simulated time now.
    pub now: Time,
}

/// One finished task.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TaskRecord {
    /// The task.
    pub task: TaskId,
    /// Its application.
    pub app: AppId,
    /// The variant it ran as.
    pub variant: Variant,
    /// Where it ran.
    pub node: NodeId,
    /// When it started (a heartbeat of its node).
    pub start_ns: Time,
    /// When it finished.
    pub end_ns: Time,
    /// Base time of its variant from the application's profile (`T_CPU_base` or `T_GPU_base`).
    pub base_ns: Time,
    /// `T / T_base` (spec 02 eq. (5)): 1.0 means it ran as fast as its base task alone.
    pub slowdown: f64,
    /// A multi-node task's other nodes (it held each whole, and `node`); empty otherwise.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub other_nodes: Vec<NodeId>,
}

impl TaskRecord {
    /// The task's run time `T = end − start`.
    pub fn duration(&self) -> Time {
        self.end_ns - self.start_ns
    }
}

/// How one application fared.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AppResult {
    /// The application.
    pub app: AppId,
    /// Its name.
    pub name: String,
    /// When it was submitted.
    pub submit_ns: Time,
    /// When its first task started (`None` if it has no task).
    pub first_start_ns: Option<Time>,
    /// When its last task finished (its submission time if it has no task).
    pub completion_ns: Time,
    /// Completion time in seconds since the start of the simulation.
    pub completion_s: f64,
    /// Tasks in the application.
    pub tasks: u32,
    /// Tasks that ran as CPU tasks.
    pub cpu_tasks: u32,
    /// Tasks that ran as GPU tasks.
    pub gpu_tasks: u32,
    /// Mean slowdown of its tasks (1.0 when it has none).
    pub mean_slowdown: f64,
    /// Who submitted it (the workload's `user`), if anyone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// Attempts of its tasks stopped by priority preemption (`SimConfig::preemption`).
    #[serde(default)]
    pub preempted: u32,
}

/// How one user's applications fared (workloads whose applications name a `user`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct UserResult {
    /// The user.
    pub user: String,
    /// Its applications.
    pub apps: u32,
    /// Their tasks.
    pub tasks: u64,
    /// Mean over its applications of submission to first task start, in seconds.
    pub mean_wait_s: f64,
    /// Mean over its applications of submission to last task end, in seconds.
    pub mean_turnaround_s: f64,
    /// When its last task ended, in seconds since the start.
    pub last_end_s: f64,
    /// Its fair-share shares (1 unless its `[[user]]` gives more; they count only under fair
    /// share). The keys of this field and the caps are those of the runtime's `hetsched user
    /// list --output json`.
    #[serde(default = "one_share")]
    pub shares: u32,
    /// Its cap on cores held at once; `None` (null): no cap.
    #[serde(default)]
    pub max_cores: Option<u32>,
    /// Its cap on memory held at once, in bytes; `None` (null): no cap.
    #[serde(default)]
    pub max_memory_bytes: Option<u64>,
    /// Its cap on GPUs held at once; `None` (null): no cap.
    #[serde(default)]
    pub max_gpus: Option<u32>,
}

fn one_share() -> u32 {
    1
}

impl UserResult {
    /// One summary per user named by `apps`, by name, with its shares and caps from `limits`
    /// (a user it does not list: 1 share, no caps); empty when no application names a user.
    pub fn of(apps: &[AppResult], limits: &[UserLimits]) -> Vec<UserResult> {
        let mut by_user: std::collections::BTreeMap<&str, Vec<&AppResult>> = Default::default();
        for a in apps {
            if let Some(u) = &a.user {
                by_user.entry(u).or_default().push(a);
            }
        }
        let secs = |ns: Time| ns as f64 / 1e9;
        by_user
            .into_iter()
            .map(|(user, apps)| {
                let n = apps.len() as f64;
                let limits = limits
                    .iter()
                    .find(|l| l.name == user)
                    .cloned()
                    .unwrap_or_else(|| UserLimits::new(user));
                UserResult {
                    user: user.to_string(),
                    apps: apps.len() as u32,
                    tasks: apps.iter().map(|a| u64::from(a.tasks)).sum(),
                    mean_wait_s: apps
                        .iter()
                        .map(|a| secs(a.first_start_ns.unwrap_or(a.submit_ns) - a.submit_ns))
                        .sum::<f64>()
                        / n,
                    mean_turnaround_s: apps
                        .iter()
                        .map(|a| secs(a.completion_ns.saturating_sub(a.submit_ns)))
                        .sum::<f64>()
                        / n,
                    last_end_s: apps
                        .iter()
                        .map(|a| secs(a.completion_ns))
                        .fold(0.0, f64::max),
                    shares: limits.shares,
                    max_cores: limits.max_cores(),
                    max_memory_bytes: limits.max_memory_bytes(),
                    max_gpus: limits.max_gpus(),
                }
            })
            .collect()
    }
}

/// Cluster-wide load sampled on a fixed grid: sample `i` is the state at `time_ns[i]` after every
/// event at or before that instant (plus a last sample at the makespan). Stored column by column to
/// keep the JSON compact. A run so long that the series would pass 2^20 samples keeps every other
/// sample and doubles its step, as often as needed.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TimeSeries {
    /// Sample instants.
    pub time_ns: Vec<Time>,
    /// GPUs held by running tasks, over all nodes.
    pub gpus_busy: Vec<u32>,
    /// Cores held by running tasks, over all nodes.
    pub cores_busy: Vec<u32>,
    /// Read requests on the disks now (sum over nodes of tasks actively reading).
    pub tasks_reading: Vec<u32>,
    /// Tasks with input still to read, over all nodes (CPU tasks between chunks count).
    pub io_tasks: Vec<u32>,
    /// Bytes per second read from all disks together.
    pub read_bytes_per_s: Vec<f64>,
}

impl TimeSeries {
    /// Number of samples.
    pub fn len(&self) -> usize {
        self.time_ns.len()
    }

    /// Whether there is no sample.
    pub fn is_empty(&self) -> bool {
        self.time_ns.is_empty()
    }

    /// Every `n`-th sample (the first included, and the last, so the end stays visible): the same
    /// series on an `n` times coarser grid.
    pub fn every_nth(&self, n: usize) -> TimeSeries {
        let n = n.max(1);
        let len = self.len();
        let keep: Vec<usize> = (0..len).filter(|i| i % n == 0 || *i + 1 == len).collect();
        let pick = |v: &Vec<u32>| keep.iter().map(|&i| v[i]).collect();
        TimeSeries {
            time_ns: keep.iter().map(|&i| self.time_ns[i]).collect(),
            gpus_busy: pick(&self.gpus_busy),
            cores_busy: pick(&self.cores_busy),
            tasks_reading: pick(&self.tasks_reading),
            io_tasks: pick(&self.io_tasks),
            read_bytes_per_s: keep.iter().map(|&i| self.read_bytes_per_s[i]).collect(),
        }
    }

    /// The samples at even positions: the same series on a grid twice as coarse.
    pub fn even_samples(&self) -> TimeSeries {
        fn even<T: Copy>(v: &[T]) -> Vec<T> {
            v.iter().step_by(2).copied().collect()
        }
        TimeSeries {
            time_ns: even(&self.time_ns),
            gpus_busy: even(&self.gpus_busy),
            cores_busy: even(&self.cores_busy),
            tasks_reading: even(&self.tasks_reading),
            io_tasks: even(&self.io_tasks),
            read_bytes_per_s: even(&self.read_bytes_per_s),
        }
    }

    pub(crate) fn push(&mut self, t: Time, s: &LoadSnapshot) {
        self.time_ns.push(t);
        self.gpus_busy.push(s.gpus_busy);
        self.cores_busy.push(s.cores_busy);
        self.tasks_reading.push(s.tasks_reading);
        self.io_tasks.push(s.io_tasks);
        self.read_bytes_per_s.push(s.read_bytes_per_s);
    }
}

/// The cluster-wide load the engine keeps up to date incrementally.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct LoadSnapshot {
    pub gpus_busy: u32,
    pub cores_busy: u32,
    pub tasks_reading: u32,
    pub io_tasks: u32,
    pub read_bytes_per_s: f64,
}

/// Everything one batch simulation measured.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SimResult {
    /// The policy's name.
    pub policy: String,
    /// The seed of the run.
    pub seed: u64,
    /// When the last task finished, since the start of the simulation.
    pub makespan_ns: Time,
    /// The makespan in seconds.
    pub makespan_s: f64,
    /// Tasks in the workload.
    pub total_tasks: u64,
    /// Tasks that ran as GPU tasks.
    pub gpu_tasks: u64,
    /// Tasks that ran as CPU tasks.
    pub cpu_tasks: u64,
    /// Mean over all tasks of `T / T_base` (spec 02 eq. (5)); 1.0 for an empty workload.
    pub average_task_delay: f64,
    /// Events the engine handled (stale disk events included).
    pub events: u64,
    /// Heartbeats on which the policy was consulted.
    pub heartbeats: u64,
    /// Task attempts stopped by priority preemption (`SimConfig::preemption`); each ran again.
    #[serde(default)]
    pub preemptions: u64,
    /// Per application, by id.
    pub apps: Vec<AppResult>,
    /// Per user, by name (workloads whose applications name a `user`; absent otherwise).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub users: Vec<UserResult>,
    /// Per finished task, in order of completion (empty when task recording is off).
    pub tasks: Vec<TaskRecord>,
    /// Cluster load over time (empty when sampling is off).
    pub series: TimeSeries,
}

impl SimResult {
    /// The result as pretty JSON (deterministic: the same run gives the same bytes).
    pub fn to_json(&self) -> Result<String, serde_json::Error> {
        serde_json::to_string_pretty(self)
    }

    /// The makespan in seconds.
    pub fn makespan_secs(&self) -> f64 {
        to_secs(self.makespan_ns)
    }
}
