//! Jobs that run after other jobs (`hetsched submit --after JOB`, Slurm's `afterok`, and
//! `--after-any JOB`, Slurm's `afterany`).
//!
//! A batch job may name up to [`MAX_AFTER`](crate::jobs::gate::MAX_AFTER) earlier jobs: batch jobs, workflows and divisible
//! jobs (of another kind, see *Jobs of other kinds* below). Its tasks are stored as pending
//! like any job's, but they are kept out of the scheduler's queues ("waiting") until every job
//! it names `--after` has **completed** (each of its tasks succeeded) and every job it names
//! `--after-any` has **ended** (completed, failed or cancelled); then they join their
//! applications' queues at once. If a job it names `--after` ends **failed** or **cancelled**,
//! the waiting job can never start and is cancelled, its tasks saying which job it waited for and
//! how that ended — and jobs waiting on it with `--after` are cancelled in the same pass (ids
//! only grow, so a job always names lower ids and one pass in id order settles a chain).
//!
//! **Held jobs** (`hetsched hold JOB`, Slurm's `scontrol hold`) wait the same way: their pending
//! tasks leave the queues (running ones go on; one that fails and retries, or is lost, waits
//! too) until `hetsched release JOB`, and then until the jobs they run after allow them. The
//! job row's `held` flag is stored in the same transaction.
//!
//! **Deferred jobs** (`hetsched submit --begin TIME`, Slurm's `--begin`) wait the same way until
//! their begin time: the reaper's housekeeping looks at them when the earliest comes
//! ([`Batch::next_begin`] is part of the batch kind's `housekeeping_due`), and they then join
//! the queues unless a hold or a job they run after still keeps them. The begin time is the
//! job row's `begin_ms`; `hetsched update --begin` moves it (earlier, later, or `now`).
//!
//! **Jobs after a failure** (`--after-notok JOB`, Slurm's `afternotok`): the job waits until
//! each job it names so has ended **failed** or **cancelled**, and is cancelled if one of them
//! **completes** — for a job that handles a failure.
//!
//! Nothing here is stored beyond the job row's `after` lists, `held` flag and `begin_ms`: whether
//! a job still waits is derived from the states of the jobs it names, after a restart as at any
//! other time. So a job that runs again (`hetsched resubmit`) makes the unfinished jobs after it
//! wait for its new end ([`Batch::wait_again_on`]), as a restart would. A purged job counts as
//! completed for `--after` and `--after-any`, and as failed for `--after-notok`: only finished
//! jobs are purged, and a job's end cancelled, in the transaction that recorded it, each waiting
//! job it can no longer satisfy. A job set aside at a start (`crate::set_aside`) is a tombstone
//! too but may not have finished: it answers the end the set-aside recorded
//! ([`Batch::purged_end`]), cancelled for one set aside unfinished.
//!
//! **Jobs of other kinds.** A batch job may run after a workflow or a divisible job (a
//! post-processing step after a workflow, say). The batch kind never sees another kind's jobs:
//! the state tells it how each such job stands ([`crate::jobs::JobEnd`]) when a batch job names
//! it at submission, after a restart, and after every event that changed a workflow or a
//! divisible job while an unfinished batch job names one ([`Batch::foreign_end`]) — in that
//! event, before its transaction, so a job's end and what it releases or cancels are stored
//! together. Those answers are kept in memory only ([`Foreign`]), for as long as an unfinished
//! batch job names the job; they are asked again after a restart.

use super::{Batch, Ctx, TaskId};
use crate::jobs::JobEnd;
use crate::jobs::gate::{self, Verdict};
use crate::state::StateError;
use crate::store::{EndReason, TaskState};
use hetsched_core::AppId;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use tracing::info;

/// The jobs whose tasks wait, those tasks by application, and which of them to look at next.
#[derive(Debug, Default)]
pub(super) struct Waiting {
    /// Job id → (application, its pending tasks in queue order), kept out of the view.
    held: BTreeMap<u64, Vec<(u32, Vec<TaskId>)>>,
    /// Jobs held by `hetsched hold` (they wait whatever the jobs they run after did).
    held_by_user: BTreeSet<u64>,
    /// Job → the waiting jobs that name it (`after` or `after_any`), so that a task's end looks
    /// only at the jobs that wait on its job, not at every waiting job.
    waiters: HashMap<u64, Vec<u64>>,
    /// Waiting jobs to look at on the next [`Batch::settle_waiting`].
    due: BTreeSet<u64>,
    /// Jobs whose begin time (ms since the Unix epoch) has not come, by that time: their tasks
    /// wait for it whatever else allows them.
    deferred: BTreeSet<(u64, u64)>,
    /// The begin time of each job in `deferred`.
    begins: HashMap<u64, u64>,
    /// A job ended, or runs again, since the last commit: jobs of other kinds that wait for it
    /// are looked at in this event ([`crate::jobs::JobKind::ends_in_event`]).
    pub(super) ended_in_event: bool,
}

impl Waiting {
    /// Keeps `tasks` of application `app` of job `job` out of the queues.
    pub(super) fn hold(&mut self, job: u64, app: u32, tasks: Vec<TaskId>) {
        self.held.entry(job).or_default().push((app, tasks));
        self.due.insert(job);
    }

    /// Waiting job `job` names `jobs` (`after` and `after_any`).
    pub(super) fn name(&mut self, job: u64, jobs: impl Iterator<Item = u64>) {
        for d in jobs {
            let list = self.waiters.entry(d).or_default();
            if !list.contains(&job) {
                list.push(job);
            }
        }
    }

    /// Job `job` ended (its last task ended, or it was cancelled): the jobs waiting on it are
    /// looked at again.
    pub(super) fn job_ended(&mut self, job: u64) {
        self.ended_in_event = true;
        if let Some(list) = self.waiters.get(&job) {
            self.due.extend(list.iter().copied());
        }
    }

    /// Whether job `job` still waits (for the jobs it runs after, its release or its begin time).
    pub(super) fn waits(&self, job: u64) -> bool {
        // (A deferred job waits even when none of its tasks was pending as it was deferred: a
        // running one that fails and retries waits for the begin time too. Found by the day
        // fuzz.)
        self.held.contains_key(&job)
            || self.held_by_user.contains(&job)
            || self.begins.contains_key(&job)
    }

    /// Some of job `job`'s held tasks were cancelled: they are dropped from its lists.
    pub(super) fn drop_tasks(&mut self, job: u64, tasks: &std::collections::HashSet<TaskId>) {
        if let Some(lists) = self.held.get_mut(&job) {
            for (_, held) in lists.iter_mut() {
                held.retain(|t| !tasks.contains(t));
            }
        }
    }

    /// Whether a waiting job names job `job`.
    pub(super) fn is_named(&self, job: u64) -> bool {
        !self.waiters.is_empty() && self.waiters.contains_key(&job)
    }

    /// Job `job` started (its first task was dispatched): the jobs waiting on it are looked at
    /// again (`--after-start`).
    pub(super) fn job_started(&mut self, job: u64) {
        if let Some(list) = self.waiters.get(&job) {
            self.due.extend(list.iter().copied());
        }
    }

    /// Job `job` no longer waits (cancelled by a user): its held tasks are dropped.
    pub(super) fn forget(&mut self, job: u64) {
        self.held.remove(&job);
        self.held_by_user.remove(&job);
        if let Some(b) = self.begins.remove(&job) {
            self.deferred.remove(&(b, job));
        }
    }

    /// Job `job`'s tasks wait until `begin` (ms since the Unix epoch; `None`: they need not);
    /// it is looked at on the next [`Batch::settle_waiting`].
    pub(super) fn defer(&mut self, job: u64, begin: Option<u64>) {
        if let Some(old) = self.begins.remove(&job) {
            self.deferred.remove(&(old, job));
        }
        if let Some(b) = begin {
            self.begins.insert(job, b);
            self.deferred.insert((b, job));
        }
        self.due.insert(job);
    }

    /// Whether job `job`'s begin time has not come.
    pub(super) fn deferred(&self, job: u64) -> bool {
        self.begins.contains_key(&job)
    }

    /// The earliest begin time still to come (ms since the Unix epoch).
    pub(super) fn next_begin(&self) -> Option<u64> {
        self.deferred.first().map(|&(b, _)| b)
    }

    /// The begin times up to `now_ms` have come: those jobs are no longer deferred, and are
    /// looked at on the next [`Batch::settle_waiting`].
    pub(super) fn begin_until(&mut self, now_ms: u64) {
        while let Some(&(b, job)) = self.deferred.first() {
            if b > now_ms {
                break;
            }
            self.deferred.pop_first();
            self.begins.remove(&job);
            self.due.insert(job);
        }
    }

    /// Job `job`, which named `jobs`, waits no more: it leaves their lists of waiters.
    fn unname(&mut self, job: u64, jobs: &[u64]) {
        for d in jobs {
            if let Some(list) = self.waiters.get_mut(d) {
                list.retain(|&w| w != job);
                if list.is_empty() {
                    self.waiters.remove(d);
                }
            }
        }
    }

    /// Job `job` is held by a user (restored from its row; its tasks are held by [`Waiting::hold`]).
    pub(super) fn hold_by_user(&mut self, job: u64) {
        self.held_by_user.insert(job);
    }

    /// Whether a user holds job `job`.
    pub(super) fn held_by_user(&self, job: u64) -> bool {
        self.held_by_user.contains(&job)
    }
}

/// A job of another kind that unfinished batch jobs run after.
#[derive(Debug)]
pub(super) struct Foreign {
    /// How it stands, as the state last told.
    end: JobEnd,
    /// The batch jobs that name it and had not ended when last looked at.
    by: Vec<u64>,
}

impl Batch {
    /// Checks the `after`, `after_any` and `after_notok` lists of a submission against the batch
    /// jobs held: each job must exist, one named `after` must not have ended failed or
    /// cancelled, one named `after_notok` must not have completed (nor been purged: how it
    /// ended is not kept). Returns them sorted, without repeats (a job named `after` and
    /// `after_any` counts as `after`); one job named both `after` and `after_notok` is refused.
    pub(super) fn check_after(
        &self,
        after: &[u64],
        after_any: &[u64],
        after_notok: &[u64],
    ) -> Result<gate::AfterLists, StateError> {
        gate::check_named(after, after_any, after_notok, |id| self.end_of(id))
    }

    /// Checks a submission's `--after-start` list: each job must be a batch job (or a purged
    /// one: it started before it ended). Returns it sorted, without repeats.
    pub(super) fn check_after_start(&self, after_start: &[u64]) -> Result<Vec<u64>, StateError> {
        let mut ids = after_start.to_vec();
        ids.sort_unstable();
        ids.dedup();
        if ids.len() > gate::MAX_AFTER {
            return Err(StateError::Invalid(format!(
                "--after-start names {} jobs; at most {}",
                ids.len(),
                gate::MAX_AFTER
            )));
        }
        if let Some(d) = ids
            .iter()
            .find(|&&d| self.job_rec(d).is_none() && !self.retention.is_purged(d))
        {
            return Err(StateError::Invalid(format!(
                "--after-start: no batch job {d}"
            )));
        }
        Ok(ids)
    }

    /// The first job that job `j` runs `--after-start` and that has not started (nor ended).
    pub(super) fn first_unstarted(&self, j: &super::JobRec) -> Option<u64> {
        j.row.after_start.iter().copied().find(|&d| {
            !self.retention.is_purged(d)
                && self
                    .job_rec(d)
                    .is_some_and(|r| self.job_state(r) == "pending")
        })
    }

    /// A task of application `app` was dispatched: if it is its job's first and a waiting job
    /// names that job, the waiting jobs naming it are looked at (`--after-start`). One lookup
    /// when none is named.
    pub(super) fn maybe_first_start(&mut self, app: u32) {
        let Some(job) = self.apps.get(app as usize).map(|a| a.job) else {
            return;
        };
        if !self.waiting.is_named(job) {
            return;
        }
        if let Some(j) = self.job_rec(job) {
            let c = self.job_counts(j);
            if c.running == 1 && c.succeeded + c.failed + c.cancelled == 0 {
                self.waiting.job_started(job);
            }
        }
    }

    /// The first job that job `j` runs after (`after` or `after_any`) and that has not ended.
    pub(super) fn first_unfinished_after(&self, j: &super::JobRec) -> Option<u64> {
        gate::first_unfinished(j.row.named_jobs(), |d| self.end_of(d))
    }

    /// When the earliest begin time still to come is (`submit --begin`): the reaper's
    /// housekeeping then queues that job's tasks.
    pub fn next_begin(&self) -> Option<std::time::Instant> {
        let b = self.waiting.next_begin()?;
        let now_ms = crate::state::now_ns() / 1_000_000;
        Some(std::time::Instant::now() + std::time::Duration::from_millis(b.saturating_sub(now_ms)))
    }

    /// How job `id` stands: a batch job, or one of another kind as the state last told
    /// (`None`: neither).
    pub(super) fn end_of(&self, id: u64) -> Option<JobEnd> {
        if self.retention.is_purged(id) {
            return Some(self.purged_end(id));
        }
        let Some(j) = self.job_rec(id) else {
            return self.foreign.get(&id).map(|f| f.end);
        };
        Some(match self.job_state(j) {
            // Ended, but processes of its stopped tasks may still run (a SIGTERM handler's
            // clean-up): the jobs after it wait for them too, as `wait` does.
            _ if self.stopping.of_job(id) > 0 => JobEnd::Unfinished,
            "completed" => JobEnd::Completed,
            "failed" => JobEnd::Failed,
            "cancelled" => JobEnd::Cancelled,
            _ => JobEnd::Unfinished,
        })
    }

    /// How purged job `id` (of any kind) stands for the jobs after it: [`JobEnd::Purged`],
    /// unless it was set aside at a start (`hetsched server --set-aside`), whose rows went as
    /// a purge's: then the end the set-aside recorded — [`JobEnd::SetAside`] (as cancelled)
    /// for one set aside unfinished, which a purge never takes. The one place a set-aside job's
    /// end is answered ([`crate::jobs::Jobs::job_end`] asks it for the other kinds).
    pub fn purged_end(&self, id: u64) -> JobEnd {
        self.set_aside.get(&id).copied().unwrap_or(JobEnd::Purged)
    }

    /// A submission names job `id` of another kind, which stands at `end`: its checks read it
    /// ([`Batch::check_after`]), and the job submitted is listed as naming it.
    /// (One listed already keeps its end: the state told it after the event that changed it.)
    pub fn note_foreign(&mut self, id: u64, end: JobEnd) {
        self.foreign.entry(id).or_insert(Foreign {
            end,
            by: Vec::new(),
        });
    }

    /// Batch job `job` (just submitted) names the jobs of other kinds among `named`.
    pub(super) fn name_foreign(&mut self, job: u64, named: impl Iterator<Item = u64>) {
        for id in named {
            if let Some(f) = self.foreign.get_mut(&id)
                && !f.by.contains(&job)
            {
                f.by.push(job);
            }
        }
    }

    /// After a restart: lists every job that an unfinished batch job names and that is not a
    /// batch job, as unfinished (as the restore took it), with the jobs naming it. The state
    /// then tells how each stands ([`Batch::foreign_end`]).
    pub fn index_foreign(&mut self) {
        let mut found: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
        for j in &self.jobs {
            if !matches!(self.job_state(j), "pending" | "running") {
                continue;
            }
            for d in j.row.named_jobs() {
                if self.job_rec(d).is_none() && !self.retention.is_purged(d) {
                    let by = found.entry(d).or_default();
                    if !by.contains(&j.row.id) {
                        by.push(j.row.id);
                    }
                }
            }
        }
        self.foreign = found
            .into_iter()
            .map(|(id, by)| {
                let end = JobEnd::Unfinished;
                (id, Foreign { end, by })
            })
            .collect();
    }

    /// Whether an unfinished batch job may run after a job of another kind.
    pub fn has_foreign(&self) -> bool {
        !self.foreign.is_empty()
    }

    /// The jobs of other kinds that unfinished batch jobs name (usually none).
    pub fn foreign_jobs(&self) -> Vec<u64> {
        self.foreign.keys().copied().collect()
    }

    /// Job `id` of another kind stands at `end` now (`None`: gone, as purged). When it ended,
    /// the batch jobs waiting on it are settled (released or cancelled) in this event; when it
    /// runs again (`hetsched resubmit`), the unfinished ones after it wait for its new end
    /// ([`Batch::wait_again_on`]). Once no unfinished batch job names it, it is forgotten.
    /// Returns whether how it stands changed.
    pub fn foreign_end(
        &mut self,
        cx: &mut Ctx,
        id: u64,
        end: Option<JobEnd>,
    ) -> Result<bool, StateError> {
        let end = end.unwrap_or(JobEnd::Purged);
        let Some(mut by) = self.foreign.get_mut(&id).map(|f| std::mem::take(&mut f.by)) else {
            return Ok(false);
        };
        by.retain(|&b| {
            self.job_rec(b)
                .is_some_and(|j| matches!(self.job_state(j), "pending" | "running"))
        });
        if by.is_empty() {
            self.foreign.remove(&id);
            return Ok(false);
        }
        let Some(f) = self.foreign.get_mut(&id) else {
            return Ok(false);
        };
        f.by = by;
        let was = std::mem::replace(&mut f.end, end);
        if was == end {
            return Ok(false);
        }
        if end == JobEnd::Unfinished {
            self.wait_again_on(cx, id);
        } else if was == JobEnd::Unfinished {
            self.waiting.job_ended(id);
            self.settle_waiting(cx)?;
        }
        Ok(true)
    }

    /// Looks at the waiting jobs that are due (a job they name had a task end, or they were just
    /// submitted, restored, re-queued into or released): releases those whose `after` jobs all
    /// completed, whose `after_any` jobs all ended and whose `after_notok` jobs all ended failed
    /// or cancelled, and cancels those one of whose `after` jobs ended failed or cancelled, or
    /// one of whose `after_notok` jobs completed. Costs nothing when none is due.
    pub(super) fn settle_waiting(&mut self, cx: &mut Ctx) -> Result<(), StateError> {
        // A job cancelled here may leave tasks that run after its tasks with nothing to wait
        // for, and a task cancelled for its correspondents may end its job: until neither has
        // anything due.
        loop {
            self.settle_jobs(cx)?;
            if self.corr.nothing_due() {
                return Ok(());
            }
            self.settle_corr(cx)?;
        }
    }

    /// The job-level part of [`Batch::settle_waiting`].
    fn settle_jobs(&mut self, cx: &mut Ctx) -> Result<(), StateError> {
        // In id order: a job cancelled here makes the jobs waiting on it (higher ids) due in the
        // same pass.
        while let Some(job) = self.waiting.due.pop_first() {
            if !self.waiting.held.contains_key(&job) || self.waiting.held_by_user.contains(&job) {
                continue;
            }
            let Some((after, after_any, after_notok, after_start, unstarted)) =
                self.job_rec(job).map(|j| {
                    (
                        j.row.after.clone(),
                        j.row.after_any.clone(),
                        j.row.after_notok.clone(),
                        j.row.after_start.clone(),
                        self.first_unstarted(j),
                    )
                })
            else {
                self.waiting.forget(job);
                continue;
            };
            // A job whose begin time has not come waits as for an unfinished job it runs after
            // (one it runs `--after` that failed still cancels it at once).
            let verdict = gate::verdict(
                &after,
                &after_any,
                &after_notok,
                self.waiting.deferred(job),
                |d| self.end_of(d),
            );
            // `--after-start`: released only once each named job started (or ended).
            let verdict = match verdict {
                Verdict::Release if unstarted.is_some() => Verdict::Wait,
                v => v,
            };
            if let Verdict::Cancel { job: d, why } = verdict {
                self.waiting.forget(job);
                self.waiting.unname(job, &after);
                self.waiting.unname(job, &after_any);
                self.waiting.unname(job, &after_notok);
                self.waiting.unname(job, &after_start);
                let n = self.cancel_job(cx, job, &why, EndReason::DependencyFailed)?;
                info!(
                    job,
                    after = d,
                    tasks = n,
                    "job cancelled: a job it runs after did not end as it needs"
                );
            } else if verdict == Verdict::Release {
                self.waiting.unname(job, &after);
                self.waiting.unname(job, &after_any);
                self.waiting.unname(job, &after_notok);
                self.waiting.unname(job, &after_start);
                let held = self.waiting.held.remove(&job).unwrap_or_default();
                let mut n = 0;
                let corr = self.runs_after_corr(job);
                for (app, tasks) in held {
                    n += tasks.len();
                    if corr {
                        // Each waits for its correspondents now.
                        self.corr_hold(cx.store, job, app, tasks)?;
                        continue;
                    }
                    cx.nodes.wakes.free(app, tasks.len());
                    cx.view.resubmit(AppId(app), tasks);
                }
                info!(
                    job,
                    tasks = n,
                    "the jobs it runs after ended as it needs: its tasks are queued"
                );
            }
        }
        Ok(())
    }
}

impl Batch {
    /// Moves the pending tasks of job `job`'s applications `apps` out of the queues, into the
    /// job's waiting list, application by application (its running tasks go on).
    fn take_out_of_queues(&mut self, cx: &mut Ctx, job: u64, apps: std::ops::Range<u32>) {
        for app in apps {
            cx.view.cancel_pending(AppId(app));
            // (Those waiting for their correspondents stay there: not in the queues.)
            let tasks: Vec<TaskId> = self
                .tasks_of_app(app)
                .filter(|r| r.state == TaskState::Pending && !self.corr.holds(TaskId(r.id)))
                .map(|r| TaskId(r.id))
                .collect();
            if !tasks.is_empty() {
                self.waiting.hold(job, app, tasks);
            }
        }
    }

    /// Job `job` runs again (`hetsched resubmit JOB`): the unfinished jobs that run after it wait
    /// for it once more. Their pending tasks leave the queues (their running tasks go on) until
    /// it has ended again, as they would after a restart, where whether a job waits is derived
    /// from the states of the jobs it names. (Only `--after-any` and `--after-notok` jobs can be
    /// affected: a job `--after` a failed job was cancelled when it failed. One `--after-notok`
    /// it, released when it failed, is cancelled if it now completes.)
    pub(super) fn wait_again_on(&mut self, cx: &mut Ctx, job: u64) {
        // (It runs again: what waits for it, of any kind, is looked at again.)
        self.waiting.ended_in_event = true;
        let dependants: Vec<(u64, std::ops::Range<u32>, Vec<u64>)> = self
            .jobs
            .iter()
            .filter(|j| j.row.named_jobs().any(|d| d == job))
            .filter(|j| matches!(self.job_state(j), "pending" | "running"))
            .map(|j| (j.row.id, j.apps.clone(), j.row.named_jobs().collect()))
            .collect();
        for (id, apps, named) in dependants {
            // Named again, so that `job`'s end makes it due (a released job left the lists).
            self.waiting.name(id, named.into_iter());
            if self.waiting.waits(id) {
                continue;
            }
            self.take_out_of_queues(cx, id, apps);
            if self.waiting.waits(id) {
                info!(
                    job = id,
                    after = job,
                    "a job it runs after runs again: its pending tasks wait"
                );
            }
        }
    }

    /// `hetsched update JOB --begin TIME`: job `job`'s tasks wait until `begin_ms` (ms since the
    /// Unix epoch; a time past: they need not). Its pending tasks leave the queues, or join them,
    /// as a hold or a release would (running ones go on); stored with the event.
    pub(super) fn set_begin(
        &mut self,
        cx: &mut Ctx,
        job: u64,
        begin_ms: u64,
    ) -> Result<(), StateError> {
        let Some(i) = self.job_index(job) else {
            return Err(StateError::NoJob(job));
        };
        self.jobs[i].row.begin_ms = Some(begin_ms);
        self.begin_changed.push((job, Some(begin_ms)));
        let apps = self.jobs[i].apps.clone();
        if begin_ms.saturating_mul(1_000_000) > cx.now {
            if !self.waiting.waits(job) {
                self.take_out_of_queues(cx, job, apps);
            }
            self.waiting.defer(job, Some(begin_ms));
            info!(
                job,
                begin_ms, "begin time moved: its pending tasks wait for it"
            );
        } else {
            self.waiting.defer(job, None);
            self.settle_waiting(cx)?;
        }
        Ok(())
    }

    /// `hetsched hold JOB` (`hold`) or `release JOB`: whether job `job`'s pending tasks may be
    /// dispatched. Returns how many pending tasks the call held or queued again (0 when it was
    /// already so).
    pub fn hold(&mut self, cx: &mut Ctx, job: u64, hold: bool) -> Result<u64, StateError> {
        let Some(j) = self.job_rec(job).filter(|_| !self.retention.is_purged(job)) else {
            return Err(StateError::NoJob(job));
        };
        let (apps, range, state) = (j.apps.clone(), j.tasks.clone(), self.job_state(j));
        // Before the no-op below: an ended job is refused either way, held or not (a job held
        // while its last task ran used to be "released", one not held refused a hold).
        if !matches!(state, "pending" | "running") {
            return Err(StateError::Invalid(format!(
                "job {job} has ended ({state}): nothing to {}",
                if hold { "hold" } else { "release" }
            )));
        }
        if hold == self.waiting.held_by_user(job) {
            return Ok(0);
        }
        if let Some(i) = self.job_index(job) {
            self.jobs[i].row.held = hold;
        }
        self.held_changed.push((job, hold));
        let pending = |b: &Batch| {
            range
                .clone()
                .filter(|&t| {
                    b.tasks
                        .get(t as usize)
                        .is_some_and(|r| r.state == TaskState::Pending)
                })
                .count() as u64
        };
        if hold {
            let already_waiting = self.waiting.waits(job);
            self.waiting.held_by_user.insert(job);
            if !already_waiting {
                self.take_out_of_queues(cx, job, apps);
            }
            Ok(pending(self))
        } else {
            self.waiting.held_by_user.remove(&job);
            self.waiting.due.insert(job);
            let n = pending(self);
            self.settle_waiting(cx)?;
            Ok(if self.waiting.waits(job) { 0 } else { n })
        }
    }
}
