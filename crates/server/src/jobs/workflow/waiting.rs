//! Workflows that wait before they start: `submit --after JOB` (and `--after-any`,
//! `--after-notok`), `--hold` and `--begin`, as batch jobs do (docs/runtime.md, "Jobs after
//! jobs").
//!
//! A waiting workflow is stored at once, but its graph is not started: no instance is ready,
//! none is placed, and nothing is sent to any node. What its named jobs allow is decided by the
//! one reading every kind shares ([`crate::jobs::gate`]), by the state, which knows how a job of
//! any kind stands (`State::settle_gates`, after every event while a job waits): it starts the
//! graph ([`crate::jobs::JobKind::start_waiting`]) once they allow it and its begin time has come, or cancels
//! the whole workflow, naming the job that did not end as it needs
//! ([`crate::jobs::JobKind::cancel_waiting`]). A held workflow waits for `hetsched release` first.
//!
//! Only a workflow that has not started waits: once its graph runs, a job it ran after that runs
//! again (`resubmit`) does not stop it, and `hold` refuses it (cancel it, or some of its
//! instances, instead). The row's `started` flag says which; the lists, `held` and `begin_ms` are
//! the row's too, so a restart finds a waiting workflow waiting and decides again.

use super::Workflows;
use crate::jobs::Ctx;
use crate::jobs::gate::Gate;
use crate::state::StateError;
use hetsched_core::policy::graph::dag::InstanceGraph;
use hetsched_core::policy::graph::{BalancerKind, InstanceId, LaunchEvent};
use tracing::info;

impl Workflows {
    /// The workflows that have not started (and were not cancelled), in id order.
    pub(super) fn waiting_jobs(&self) -> Vec<(u64, Gate)> {
        self.unstarted_jobs()
            .map(|j| (j.id(), j.gate.clone()))
            .collect()
    }

    /// Those workflows, found among the few listed as maybe unstarted (not every job: this is
    /// asked after every event). One whose every instance was cancelled before it started
    /// (`cancel JOB --tasks`) has ended: it waits no more.
    fn unstarted_jobs(&self) -> impl Iterator<Item = &super::WfJob> {
        self.maybe_unstarted
            .iter()
            .filter_map(|seq| self.jobs.get(seq).map(|j| &**j))
            .filter(|j| !j.gate.started && !j.cancelled && !j.finished())
    }

    /// Whether some workflow has not started.
    pub(super) fn any_waiting_job(&self) -> bool {
        self.unstarted_jobs().next().is_some()
    }

    /// The earliest begin time still to come of a workflow that has not started.
    pub fn next_begin(&self) -> Option<std::time::Instant> {
        crate::jobs::gate::next_begin(self.unstarted_jobs().map(|j| &j.gate))
    }

    /// The gate of workflow `id` that has not started, to change (`None`: none such).
    fn unstarted(&mut self, id: u64, what: &str) -> Result<&mut super::WfJob, StateError> {
        let seq = Self::seq(id);
        let j = self.jobs.get_mut(&seq).ok_or(StateError::NoJob(id))?;
        if j.gate.started || j.cancelled {
            return Err(StateError::Invalid(format!(
                "job {id} is a workflow that has {}: {what} a workflow before it starts \
                 (`hetsched cancel {id}`, or `cancel {id} --tasks`, stops one that runs)",
                if j.cancelled { "ended" } else { "started" }
            )));
        }
        Ok(j)
    }

    /// The workflow's key in `jobs` from its job id.
    fn seq(id: u64) -> u64 {
        id & ((1 << crate::jobs::KIND_SHIFT) - 1)
    }

    /// [`crate::jobs::JobKind::set_waiting_for`].
    pub(super) fn note_waiting_for(&mut self, id: u64, job: Option<u64>) {
        if let Some(j) = self.jobs.get_mut(&Self::seq(id)) {
            j.gate.waiting_for = job;
        }
    }

    /// [`crate::jobs::JobKind::start_waiting`]: its graph starts now, its ready instances placed by a machine
    /// built over the nodes of now (they may have changed while it waited).
    pub(super) fn start(&mut self, cx: &mut Ctx, id: u64) {
        let seq = Self::seq(id);
        let Some(mut job) = self.jobs.remove(&seq) else {
            return;
        };
        let graph = InstanceGraph::new(&job.rt.parsed.workflow, &job.masks);
        let (machine, members) = self.machine(cx, job.balancer, graph, &job.vocab);
        job.machine = machine;
        job.members = members;
        // Instances cancelled while it waited (`cancel JOB --tasks`), and those not run because
        // of them: the new machine never places them.
        let ended: Vec<InstanceId> = (0..job.insts.len() as u32)
            .filter(|&i| job.insts[i as usize].st.ended())
            .map(InstanceId)
            .collect();
        if !ended.is_empty() {
            job.machine.withdraw(&ended);
        }
        job.gate.started = true;
        job.gate.waiting_for = None;
        self.maybe_unstarted.remove(&seq);
        self.maybe_running.insert(seq);
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
            "what it waited for allows it: the workflow starts"
        );
        self.jobs.insert(seq, job);
    }

    /// [`crate::jobs::JobKind::cancel_waiting`]: cancelled as a whole, each instance saying why, after a
    /// restart too.
    pub(super) fn cancel_unstarted(
        &mut self,
        cx: &mut Ctx,
        id: u64,
        why: &str,
    ) -> Result<u64, StateError> {
        let n = self.cancel_with(cx, id, why, crate::store::EndReason::DependencyFailed)?;
        info!(
            job = id,
            instances = n,
            "workflow cancelled: a job it runs after did not end as it needs"
        );
        Ok(n)
    }

    /// [`crate::jobs::JobKind::hold_waiting`].
    pub(super) fn hold_unstarted(&mut self, id: u64, hold: bool) -> Result<u64, StateError> {
        let j = self.unstarted(id, "hold and release apply to")?;
        if j.gate.held == hold {
            return Ok(0);
        }
        j.gate.held = hold;
        let n = j.insts.len() as u64;
        self.dirty_jobs.insert(Self::seq(id));
        Ok(n)
    }

    /// [`crate::jobs::JobKind::set_begin`].
    pub(super) fn begin_unstarted(&mut self, id: u64, begin_ms: u64) -> Result<(), StateError> {
        let j = self.unstarted(id, "a begin time applies to")?;
        j.gate.begin_ms = Some(begin_ms);
        self.dirty_jobs.insert(Self::seq(id));
        Ok(())
    }
}
