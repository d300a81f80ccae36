//! Batch policies for applications of independent CPU/GPU tasks (spec 02), driven by node
//! heartbeats (NODE_UPDATE): on each heartbeat the driver calls [`BatchPolicy::on_node_update`] for
//! the node that beat, and the policy fills the node's free resources through
//! [`SchedulerView::assign`].
//!
//! | name | what it does |
//! |---|---|
//! | `cpu-only` | every task as a CPU task, applications in submission order (the Hadoop baseline) |
//! | `fifo` | submission order; a GPU when the application has a GPU variant and one is free, else a core |
//! | `drf` | dominant resource fairness (Ghodsi et al., NSDI 2011) over cores, memory and GPUs |
//! | `hadoop-model` | GPUs by decreasing GPU affinity (spec 02 eq. (4)), the rest by DRF |
//! | `hdas` | heterogeneous dynamic affinity scheduling (spec 02, Algorithm 1) |
//! | `hdas-hetero` | HDAS plus the paper's future work: a completion-aware CPU gate for accelerators of different speeds |

pub mod bound;
pub mod cpu_only;
pub mod drf;
pub mod fifo;
pub mod hadoop_model;
pub mod hdas;
pub mod multi_node;
pub mod predict;
pub mod preempt;

use crate::model::{AppId, AppState, Assignment, NodeId, SchedulerView, Variant};
use crate::time::Time;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;
use thiserror::Error;

/// A batch scheduling policy: decides, on one node's heartbeat, which tasks to start there.
pub trait BatchPolicy: Send {
    /// The policy's name as users write it (`"hdas"`).
    fn name(&self) -> &'static str;

    /// Handles NODE_UPDATE for `node` at time `now`: assigns tasks to the node's free resources
    /// through `view.assign` and returns the assignments in the order they were made.
    fn on_node_update(
        &mut self,
        view: &mut SchedulerView,
        node: NodeId,
        now: Time,
    ) -> Vec<Assignment>;

    /// The task variants this policy ever runs; drivers use it to reject, before running, an
    /// application the policy could never place (e.g. a GPU-only application under `cpu-only`).
    fn variants(&self) -> &'static [Variant] {
        &[Variant::Cpu, Variant::Gpu]
    }
}

/// The batch policies hetsched ships, by name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum BatchPolicyKind {
    /// CPU-only Hadoop baseline.
    CpuOnly,
    /// First in, first out.
    Fifo,
    /// Dominant resource fairness.
    Drf,
    /// Hadoop+ model-based allocation: GPU affinity + DRF.
    HadoopModel,
    /// Heterogeneous dynamic affinity scheduling.
    Hdas,
    /// HDAS with the completion-aware CPU gate (beyond the paper).
    HdasHetero,
}

/// An unknown policy name.
#[derive(Debug, Error, PartialEq)]
#[error(
    "unknown batch policy `{0}` (expected one of: cpu-only, fifo, drf, hadoop-model, hdas, hdas-hetero)"
)]
pub struct UnknownPolicy(pub String);

impl BatchPolicyKind {
    /// Every policy, baselines first.
    pub const ALL: [BatchPolicyKind; 6] = [
        BatchPolicyKind::CpuOnly,
        BatchPolicyKind::Fifo,
        BatchPolicyKind::Drf,
        BatchPolicyKind::HadoopModel,
        BatchPolicyKind::Hdas,
        BatchPolicyKind::HdasHetero,
    ];

    /// The name users write.
    pub fn as_str(self) -> &'static str {
        match self {
            BatchPolicyKind::CpuOnly => "cpu-only",
            BatchPolicyKind::Fifo => "fifo",
            BatchPolicyKind::Drf => "drf",
            BatchPolicyKind::HadoopModel => "hadoop-model",
            BatchPolicyKind::Hdas => "hdas",
            BatchPolicyKind::HdasHetero => "hdas-hetero",
        }
    }

    /// A fresh policy of this kind with default settings.
    pub fn build(self) -> Box<dyn BatchPolicy> {
        self.build_with(&PolicyConfig::default())
    }

    /// A fresh policy of this kind with `config`.
    pub fn build_with(self, config: &PolicyConfig) -> Box<dyn BatchPolicy> {
        match self {
            BatchPolicyKind::CpuOnly => Box::new(cpu_only::CpuOnly),
            BatchPolicyKind::Fifo => Box::new(fifo::Fifo),
            BatchPolicyKind::Drf => Box::new(drf::Drf),
            BatchPolicyKind::HadoopModel => Box::new(hadoop_model::HadoopModel),
            BatchPolicyKind::Hdas => Box::new(hdas::Hdas::new(config.hdas.clone())),
            BatchPolicyKind::HdasHetero => Box::new(hdas::Hdas::new(hdas::HdasConfig {
                completion_aware: true,
                ..config.hdas.clone()
            })),
        }
    }
}

impl fmt::Display for BatchPolicyKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for BatchPolicyKind {
    type Err = UnknownPolicy;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|k| k.as_str() == s)
            .ok_or_else(|| UnknownPolicy(s.to_string()))
    }
}

/// Settings of the policies that have any.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PolicyConfig {
    /// HDAS settings.
    pub hdas: hdas::HdasConfig,
}

/// Dispatches one `variant` task at a time to `node` while `pick` names an application, and stops
/// at the first refusal (nothing more fits). Every policy's fill loop is this.
pub(crate) fn assign_while(
    view: &mut SchedulerView,
    node: NodeId,
    variant: Variant,
    out: &mut Vec<Assignment>,
    mut pick: impl FnMut(&SchedulerView) -> Option<AppId>,
) {
    while let Some(app) = pick(view) {
        match view.assign(app, node, variant) {
            Some(a) => out.push(a),
            None => break,
        }
    }
}

/// Whether a larger or a smaller score ranks first in [`best_app`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Prefer {
    Smaller,
    Larger,
}

/// The application that ranks first among `candidates` scored by `score`: highest level
/// ([`SchedulerView::level`]: priority, then fair-share standing), then the preferred score, then
/// earliest start, then lowest id (so every choice is deterministic).
pub(crate) fn best_app<'a>(
    view: &SchedulerView,
    candidates: impl Iterator<Item = &'a AppState>,
    prefer: Prefer,
    mut score: impl FnMut(&AppState) -> Option<f64>,
) -> Option<AppId> {
    candidates
        .filter_map(|a| Some((view.level(a), score(a)?, a.app.submit_time, a.app.id)))
        .min_by(|x, y| {
            let by_score = match prefer {
                Prefer::Smaller => x.1.total_cmp(&y.1),
                Prefer::Larger => y.1.total_cmp(&x.1),
            };
            y.0.cmp(&x.0)
                .then(by_score)
                .then(x.2.cmp(&y.2))
                .then(x.3.cmp(&y.3))
        })
        .map(|(_, _, _, id)| id)
}
