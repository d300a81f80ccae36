//! Applications of independent tasks and the heterogeneous task model of spec 02.
//!
//! Every task of an application processes one input split of `split_bytes` (V) and can run as a
//! CPU task, a GPU task, or either. Each variant carries its *base profile*: the phase times of the
//! task run alone (CPU_base: one core; GPU_base: one GPU), from which policies predict how a task
//! will fare under contention (spec 02 eqs. (1)–(3)).

use super::ids::AppId;
use super::resources::Resources;
use crate::time::Time;
use serde::{Deserialize, Serialize};

/// Which implementation a task runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Variant {
    /// One core; reads interleaved with compute.
    Cpu,
    /// One GPU plus a core; reads the whole split, copies it to the device, then computes.
    Gpu,
}

impl std::fmt::Display for Variant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Variant::Cpu => "cpu",
            Variant::Gpu => "gpu",
        })
    }
}

/// Base profile and request of an application's CPU implementation.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CpuVariant {
    /// `tpc0`: compute time of the CPU_base task on a core of speed 1.0.
    pub compute: Time,
    /// `tdc0`: read time of the CPU_base task run alone.
    pub read: Time,
    /// Resources one task holds while it runs.
    pub request: Resources,
    /// Wall-clock limit of one task (the runtime kills it then); it runs only on nodes with at
    /// least this much time left ([`crate::model::SchedulerView::time_left`]). `None`: no limit.
    #[serde(default)]
    pub time_limit: Option<Time>,
}

/// Base profile and request of an application's GPU implementation.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GpuVariant {
    /// `tpg0`: kernel time of the GPU_base task on an accelerator of speed 1.0.
    pub compute: Time,
    /// `tdcg`: host↔device copy time.
    pub copy: Time,
    /// `tdg0`: read time of the GPU_base task run alone.
    pub read: Time,
    /// Resources one task holds while it runs (at least one GPU; a core drives it).
    pub request: Resources,
    /// Accelerator kind the task needs; `None` runs on any.
    pub kind: Option<String>,
    /// Wall-clock limit of one task, as [`CpuVariant::time_limit`].
    #[serde(default)]
    pub time_limit: Option<Time>,
}

/// An application: many identical independent tasks, each runnable on the variants it has.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Application {
    /// Dense identifier in submission order.
    pub id: AppId,
    /// Name as the user wrote it.
    pub name: String,
    /// Scheduling priority: higher levels are served first (spec 02, Algorithm 1 "for each priority").
    pub priority: i32,
    /// When the application (its AM) started; ties and relative progress use it.
    pub submit_time: Time,
    /// Input split size V in bytes, the same for every task.
    pub split_bytes: u64,
    /// Number of tasks.
    pub tasks: u32,
    /// The CPU implementation, if any.
    pub cpu: Option<CpuVariant>,
    /// The GPU implementation, if any.
    pub gpu: Option<GpuVariant>,
    /// Node attributes every task needs (`requires`, sorted); empty: any node.
    #[serde(default)]
    pub requires: Vec<String>,
    /// The most of its tasks that may hold resources at once (`max_running`, Slurm's array
    /// throttle `%N`); 0: no limit.
    #[serde(default)]
    pub max_running: u32,
    /// Whole nodes each task holds (`nodes`, HyperQueue's `--nodes`): 1 for an ordinary task;
    /// a multi-node task (2 or more) holds every resource of each of its nodes and runs its
    /// command on the first (an MPI launcher reaching the others). No policy places one: the
    /// runtime gathers its nodes ([`crate::SchedulerView::start_multi_node`]).
    #[serde(default = "one_node")]
    pub nodes: u32,
    /// Who submitted it (simulator workloads: `user = "alice"`), for fair share and per-user
    /// reports; `None`: nobody in particular. The runtime's owners come from tokens: its job
    /// files may not set it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
}

fn one_node() -> u32 {
    1
}

/// The queue an application sits in by the variants it has (spec 02, Algorithm 1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Need {
    /// Only a GPU implementation.
    GpuOnly,
    /// Only a CPU implementation.
    CpuOnly,
    /// Both.
    Mixed,
}

impl Application {
    /// What stays of application `id` once its job was purged: its id (ids are dense and never
    /// reused) and nothing else — no name, no tasks, an empty CPU profile.
    pub const fn retired(id: AppId) -> Self {
        Application {
            id,
            name: String::new(),
            priority: 0,
            submit_time: 0,
            split_bytes: 0,
            tasks: 0,
            cpu: Some(CpuVariant {
                compute: 0,
                read: 0,
                request: Resources::new(0, 0, 0),
                time_limit: None,
            }),
            gpu: None,
            requires: Vec::new(),
            max_running: 0,
            nodes: 1,
            user: None,
        }
    }

    /// Whether each task holds several whole nodes ([`Application::nodes`]).
    pub fn is_multi_node(&self) -> bool {
        self.nodes > 1
    }

    /// CPU_base task time `tpc0 + tdc0`, if the application has a CPU variant.
    pub fn cpu_base_time(&self) -> Option<Time> {
        self.cpu.as_ref().map(|c| c.compute + c.read)
    }

    /// GPU_base task time `tpg0 + tdcg + tdg0`, if the application has a GPU variant.
    pub fn gpu_base_time(&self) -> Option<Time> {
        self.gpu.as_ref().map(|g| g.compute + g.copy + g.read)
    }

    /// Base time of the given variant.
    pub fn base_time(&self, variant: Variant) -> Option<Time> {
        match variant {
            Variant::Cpu => self.cpu_base_time(),
            Variant::Gpu => self.gpu_base_time(),
        }
    }

    /// The shorter of the two base times: the application's best task time running alone.
    pub fn best_base_time(&self) -> Option<Time> {
        match (self.cpu_base_time(), self.gpu_base_time()) {
            (Some(c), Some(g)) => Some(c.min(g)),
            (c, g) => c.or(g),
        }
    }

    /// Wall-clock limit of one task of `variant` (`None`: none, or no such variant).
    pub fn time_limit(&self, variant: Variant) -> Option<Time> {
        match variant {
            Variant::Cpu => self.cpu.as_ref().and_then(|c| c.time_limit),
            Variant::Gpu => self.gpu.as_ref().and_then(|g| g.time_limit),
        }
    }

    /// Resources one task of `variant` holds.
    pub fn request(&self, variant: Variant) -> Option<Resources> {
        match variant {
            Variant::Cpu => self.cpu.as_ref().map(|c| c.request),
            Variant::Gpu => self.gpu.as_ref().map(|g| g.request),
        }
    }

    /// The queue the application belongs to; `None` if it has no variant at all.
    pub fn need(&self) -> Option<Need> {
        match (self.cpu.is_some(), self.gpu.is_some()) {
            (true, true) => Some(Need::Mixed),
            (true, false) => Some(Need::CpuOnly),
            (false, true) => Some(Need::GpuOnly),
            (false, false) => None,
        }
    }
}

/// Whether a task needs an accelerator (spec 01, "What a user of hetsched sees"): a workload
/// file's `accelerator = "required" | "preferred" | "none"`.
///
/// A `required` or `preferred` task placed on an NNode is offloaded through the node binding to
/// its ANode's accelerator service; a `required` task never runs where no accelerator is reachable
/// (an unbound NNode cannot take it), a `preferred` one runs on the CPU there; `none` always runs
/// on the CPU in the offload model (`hetsched_sim::accel`). The runtime's placement applies the
/// field through [`crate::model::SchedulerView::set_accelerator_need`], where `none` leaves the
/// choice of variant to the policy, as before the field existed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AcceleratorNeed {
    /// Only on an accelerator, local or through the binding.
    Required,
    /// On an accelerator where one is reachable, else on the CPU.
    Preferred,
    /// On the CPU (the default: what a task without the field did before).
    #[default]
    None,
}

impl AcceleratorNeed {
    /// The word used in workload files.
    pub fn as_str(&self) -> &'static str {
        match self {
            AcceleratorNeed::Required => "required",
            AcceleratorNeed::Preferred => "preferred",
            AcceleratorNeed::None => "none",
        }
    }
}
