//! Workflows that wait before they start: `submit --after JOB` (and `--after-any`,
//! `--after-notok`), `--hold` and `--begin`, as batch jobs do (docs/runtime.md, "Jobs after
//! jobs").
//!
//! A waiting workflow is stored at once, but its graph is not started: no instance is ready,
//! none is placed, and nothing is sent to any node. What its named jobs allow is decided by the
//! one reading every kind shares ([`crate::jobs::gate`]), by the state, which knows how a job of
//! any kind stands ([`crate::state::State`]'s `settle_gates`, after every event while a
//! workflow waits): it starts the graph ([`Workflows::start_waiting`]) once they allow it and its
//! begin time has come, or cancels the whole workflow, naming the job that did not end as it
//! needs ([`Workflows::cancel_waiting`]). A held workflow waits for `hetsched release` first.
//!
//! Only a workflow that has not started waits: once its graph runs, a job it ran after that runs
//! again (`resubmit`) does not stop it, and `hold` refuses it (cancel it, or some of its
//! instances, instead). The row's `started` flag says which; the lists, `held` and `begin_ms` are
//! the row's too, so a restart finds a waiting workflow waiting and decides again.

use super::{WfJob, Workflows};
use crate::jobs::Ctx;
use crate::jobs::gate;
use crate::state::StateError;
use hetsched_core::policy::graph::dag::InstanceGraph;
use hetsched_core::policy::graph::{BalancerKind, LaunchEvent};
use tracing::info;

/// What a workflow waits for before it starts (all empty, not held, no begin time: nothing).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Gate {
    /// The jobs it runs after once each completed (`--after`), ascending.
    pub after: Vec<u64>,
    /// … once each ended, however (`--after-any`).
    pub after_any: Vec<u64>,
    /// … once each ended failed or cancelled (`--after-notok`).
    pub after_notok: Vec<u64>,
    /// Held by `hetsched hold` (or `submit --hold`) until `hetsched release`.
    pub held: bool,
    /// Not before this time (ms since the Unix epoch; `submit --begin`).
    pub begin_ms: Option<u64>,
    /// Its graph runs (it waits no more; a workflow that never waited starts so).
    pub started: bool,
    /// The first job it names that had not ended when the state last looked (its pending
    /// reason). Memory only.
    pub waiting_for: Option<u64>,
}

impl Gate {
    /// Whether a submission with these lists, hold and begin time must wait before it starts.
    pub fn waits(&self) -> bool {
        !self.after.is_empty()
            || !self.after_any.is_empty()
            || !self.after_notok.is_empty()
            || self.held
            || self.begin_ms.is_some()
    }

    /// Every job it names: `after`, `after_any`, `after_notok`.
    pub fn named(&self) -> impl Iterator<Item = u64> + '_ {
        self.after
            .iter()
            .chain(&self.after_any)
            .chain(&self.after_notok)
            .copied()
    }

    /// Whether its begin time is still to come at `now_ms`.
    pub fn deferred(&self, now_ms: u64) -> bool {
        self.begin_ms.is_some_and(|b| b > now_ms)
    }
}

/// A workflow that has not started, as the state decides on it.
#[derive(Clone, Debug)]
pub struct WaitingWorkflow {
    /// Its job id.
    pub id: u64,
    /// What it waits for.
    pub gate: Gate,
}

impl Workflows {
    /// The workflows that have not started (and were not cancelled), in id order.
    pub fn waiting(&self) -> Vec<WaitingWorkflow> {
        self.jobs
            .values()
            .filter(|j| !j.gate.started && !j.cancelled)
            .map(|j| WaitingWorkflow {
                id: j.id(),
                gate: j.gate.clone(),
            })
            .collect()
    }

    /// Whether some workflow has not started.
    pub fn any_waiting(&self) -> bool {
        self.jobs.values().any(|j| !j.gate.started && !j.cancelled)
    }

    /// The earliest begin time still to come of a workflow that has not started.
    pub fn next_begin(&self) -> Option<std::time::Instant> {
        let now_ms = crate::state::now_ns() / 1_000_000;
        let b = self
            .jobs
            .values()
            .filter(|j| !j.gate.started && !j.cancelled)
            .filter_map(|j| j.gate.begin_ms.filter(|&b| b > now_ms))
            .min()?;
        Some(std::time::Instant::now() + std::time::Duration::from_millis(b - now_ms))
    }

    /// What the state last found workflow `id` waiting for (its pending reason).
    pub fn set_waiting_for(&mut self, id: u64, job: Option<u64>) {
        if let Some(j) = self.jobs.get_mut(&Self::seq(id)) {
            j.gate.waiting_for = job;
        }
    }

    /// Workflow `id`'s named jobs allow it and its begin time came: its graph starts now, its
    /// ready instances placed by a machine built over the nodes of now (they may have changed
    /// while it waited).
    pub fn start_waiting(&mut self, cx: &mut Ctx, id: u64) {
        let seq = Self::seq(id);
        let Some(mut job) = self.jobs.remove(&seq) else {
            return;
        };
        let graph = InstanceGraph::new(&job.rt.parsed.workflow, &job.masks);
        let (machine, members) = self.machine(cx, job.balancer, graph);
        job.machine = machine;
        job.members = members;
        job.gate.started = true;
        job.gate.waiting_for = None;
        self.dirty_jobs.insert(seq);
        let out = job.machine.handle(LaunchEvent::Start, cx.now);
        self.apply(&mut job, out);
        if job.balancer == BalancerKind::Pcddb {
            // As at a submission: every agent learns of it from a heartbeat reply.
            self.woken
                .extend((0..cx.nodes.len() as u32).filter(|&n| Self::alive(cx, n)));
        }
        info!(
            job = id,
            "the jobs it runs after allow it: the workflow starts"
        );
        self.jobs.insert(seq, job);
    }

    /// Workflow `id` can never start (`why`: a job it runs after ended as it does not allow):
    /// cancelled as a whole, each instance saying why, after a restart too.
    pub fn cancel_waiting(&mut self, cx: &mut Ctx, id: u64, why: &str) -> Result<u64, StateError> {
        let n = self.cancel_with(cx, id, why)?;
        info!(
            job = id,
            instances = n,
            "workflow cancelled: a job it runs after did not end as it needs"
        );
        Ok(n)
    }

    /// `hetsched hold JOB` (`hold`) / `release JOB` of a workflow that has not started: a held
    /// one does not start until released. Returns how many instances it holds or lets go.
    pub fn hold(&mut self, id: u64, hold: bool) -> Result<u64, StateError> {
        let seq = Self::seq(id);
        let j = self.jobs.get_mut(&seq).ok_or(StateError::NoJob(id))?;
        if j.gate.started || j.cancelled {
            return Err(StateError::Invalid(format!(
                "job {id} is a workflow that has {}: hold and release apply to a workflow \
                 before it starts (`hetsched cancel {id}`, or `cancel {id} --tasks`, stops one \
                 that runs)",
                if j.cancelled { "ended" } else { "started" }
            )));
        }
        if j.gate.held == hold {
            return Ok(0);
        }
        j.gate.held = hold;
        self.dirty_jobs.insert(seq);
        Ok(j.insts.len() as u64)
    }

    /// `hetsched update JOB --begin TIME` of a workflow that has not started: it starts no
    /// sooner than `begin_ms` (a time past: as soon as nothing else keeps it).
    pub fn set_begin(&mut self, id: u64, begin_ms: u64) -> Result<(), StateError> {
        let seq = Self::seq(id);
        let j = self.jobs.get_mut(&seq).ok_or(StateError::NoJob(id))?;
        if j.gate.started || j.cancelled {
            return Err(StateError::Invalid(format!(
                "job {id} is a workflow that has {}: its begin time no longer applies",
                if j.cancelled { "ended" } else { "started" }
            )));
        }
        j.gate.begin_ms = Some(begin_ms);
        self.dirty_jobs.insert(seq);
        Ok(())
    }

    /// The workflow's key in `jobs` from its job id.
    fn seq(id: u64) -> u64 {
        id & ((1 << crate::jobs::KIND_SHIFT) - 1)
    }
}

impl WfJob {
    /// Why it has not started, for its pending reason (empty once started).
    pub(super) fn waiting_reason(&self) -> String {
        if self.gate.started || self.cancelled {
            return String::new();
        }
        let id = self.id();
        if self.gate.held {
            return format!("held: `hetsched release {id}` lets it run");
        }
        let now_ms = crate::state::now_ns() / 1_000_000;
        match (self.gate.waiting_for, self.gate.begin_ms) {
            (Some(d), _) => format!("waiting for job {d}"),
            (None, Some(b)) if b > now_ms => {
                let left = std::time::Duration::from_secs((b - now_ms).div_ceil(1000));
                format!(
                    "begins at {} (in {})",
                    gate::rfc3339(b),
                    humantime::format_duration(left)
                )
            }
            _ => "waiting for the jobs it runs after".into(),
        }
    }
}
