//! Tasks that run after other jobs' tasks index by index (`hetsched submit --after-corr JOB`,
//! Slurm's `--dependency=aftercorr`): a pipeline of arrays, where `simulate[i]` may start as
//! soon as `prepare[i]` has succeeded, without waiting for the whole of `prepare`.
//!
//! A batch job may name up to [`MAX_AFTER`](crate::jobs::gate::MAX_AFTER) earlier batch jobs
//! so. Its task with index *i* is kept out of the queues ("waiting for its correspondents")
//! until every task with index *i* of each of them has **succeeded**; then it joins its
//! application's queue (or the job's waiting list, while the job itself waits: `--after`,
//! `--hold`, `--begin` apply to the whole job as ever). If one of those tasks **fails** (for
//! good: its retries spent) or is **cancelled**, the task can never start and is cancelled,
//! saying which task of which job it ran after and how that ended — the job's other tasks go
//! on. A task cancelled so stays cancelled, as Slurm leaves such a dependency unsatisfied:
//! `hetsched resubmit JOB --cancelled` puts it back to wait once more.
//!
//! Every index of the job must be one the named jobs have (refused at submission, naming the
//! index). Nothing is stored beyond the job row's `after_corr` list: which tasks wait is derived
//! from the task states of the jobs named, after a restart as at any other time. A named job
//! that was purged counts as succeeded: only finished jobs are purged, and each of its task
//! ends was acted on in the event that recorded it. One set aside unfinished at a start
//! (`hetsched server --set-aside`) counts as cancelled: the tasks waiting on it are cancelled.

use super::{Batch, Ctx, TaskId};
use crate::state::StateError;
use crate::store::{EndReason, TaskState};
use hetsched_core::AppId;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use tracing::info;

/// A named job's tasks by index, each with its stored state when its row is not in memory.
type ByIndex = HashMap<u32, Vec<(u64, Option<TaskState>)>>;

/// The tasks that wait for their correspondents, and which to look at next.
#[derive(Debug, Default)]
pub(super) struct CorrWaits {
    /// Job → index → its pending tasks of that index (application, task), out of the queues.
    tasks: BTreeMap<u64, BTreeMap<u32, Vec<(u32, TaskId)>>>,
    /// Every task in `tasks`.
    held: HashSet<TaskId>,
    /// Named job → the jobs whose tasks run after its tasks.
    waiters: HashMap<u64, Vec<u64>>,
    /// (named job, index): a task of it with that index ended (or a task waiting on it arrived)
    /// since the last look.
    due: BTreeSet<(u64, u32)>,
    /// Named job → index → its tasks of that index, built once while it is named, each with
    /// its state as stored when its row was not held in memory (a finished job's, after a
    /// restart or an eviction: it does not change).
    by_index: HashMap<u64, ByIndex>,
}

impl CorrWaits {
    /// Whether task `t` waits for its correspondents.
    pub(super) fn holds(&self, t: TaskId) -> bool {
        self.held.contains(&t)
    }

    /// Whether nothing is to be looked at.
    pub(super) fn nothing_due(&self) -> bool {
        self.due.is_empty()
    }

    /// How many tasks of job `job` wait for their correspondents.
    pub(super) fn waiting(&self, job: u64) -> usize {
        self.tasks
            .get(&job)
            .map_or(0, |m| m.values().map(Vec::len).sum())
    }

    /// Job `job` no longer has waiting tasks (cancelled as a whole).
    pub(super) fn forget(&mut self, job: u64) {
        if let Some(by_index) = self.tasks.remove(&job) {
            for (_, t) in by_index.into_values().flatten() {
                self.held.remove(&t);
            }
        }
    }

    /// Some of job `job`'s tasks were cancelled: they no longer wait.
    pub(super) fn drop_tasks(&mut self, job: u64, tasks: &HashSet<TaskId>) {
        if let Some(by_index) = self.tasks.get_mut(&job) {
            for list in by_index.values_mut() {
                list.retain(|(_, t)| !tasks.contains(t));
            }
            by_index.retain(|_, l| !l.is_empty());
            if by_index.is_empty() {
                self.tasks.remove(&job);
            }
        }
        self.held.retain(|t| !tasks.contains(t));
    }
}

/// What a task that runs after its correspondents may do now.
enum Corr {
    Wait,
    Release,
    Cancel(String),
}

impl Batch {
    /// Checks a submission's `--after-corr` list against the batch jobs held and the indices of
    /// its own tasks (`indices`): each named job must exist, not be purged and have a task for
    /// every index of the new job (a finished job's read from `store` when its rows left
    /// memory). Returns it sorted, without repeats.
    pub(super) fn check_after_corr(
        &self,
        store: &crate::store::Store,
        after_corr: &[u64],
        indices: impl Iterator<Item = u32> + Clone,
    ) -> Result<Vec<u64>, StateError> {
        let mut ids = after_corr.to_vec();
        ids.sort_unstable();
        ids.dedup();
        if ids.len() > crate::jobs::gate::MAX_AFTER {
            return Err(StateError::Invalid(format!(
                "--after-corr names {} jobs; at most {}",
                ids.len(),
                crate::jobs::gate::MAX_AFTER
            )));
        }
        for &id in &ids {
            if self.retention.is_purged(id) {
                return Err(StateError::Invalid(format!(
                    "--after-corr: job {id} was purged, and its tasks' ends are not kept"
                )));
            }
            let Some(j) = self.job_rec(id) else {
                return Err(StateError::Invalid(format!(
                    "--after-corr: no batch job {id}"
                )));
            };
            let held = j
                .tasks
                .clone()
                .all(|t| self.tasks.get(t as usize).is_some());
            // A finished job's rows may have left memory (after a restart, or evicted): its
            // indices are read from the store, as `name_corr` reads its task states.
            let known: HashSet<u32> = if held {
                j.tasks
                    .clone()
                    .filter_map(|t| self.tasks.get(t as usize).map(|r| r.index))
                    .collect()
            } else {
                store
                    .task_rows(j.tasks.clone())?
                    .into_iter()
                    .map(|r| r.index)
                    .collect()
            };
            let mut missing: Vec<u32> = indices.clone().filter(|i| !known.contains(i)).collect();
            missing.sort_unstable();
            missing.dedup();
            if let Some(&first) = missing.first() {
                return Err(StateError::Invalid(format!(
                    "--after-corr: job {id} has no task with index {first}{}: each task runs \
                     after the tasks of the same index",
                    match missing.len() {
                        1 => String::new(),
                        n => format!(" (nor {} other indices of this job)", n - 1),
                    }
                )));
            }
        }
        Ok(ids)
    }

    /// Job `job` names `named` (`--after-corr`): a task end of theirs looks at its tasks. A
    /// named job whose rows left memory (finished) is read from `store`.
    pub(super) fn name_corr(
        &mut self,
        store: &crate::store::Store,
        job: u64,
        named: &[u64],
    ) -> Result<(), StateError> {
        for &d in named {
            let list = self.corr.waiters.entry(d).or_default();
            if !list.contains(&job) {
                list.push(job);
            }
            if !self.corr.by_index.contains_key(&d)
                && let Some(j) = self.job_rec(d)
            {
                let mut by_index = ByIndex::new();
                let held = j
                    .tasks
                    .clone()
                    .all(|t| self.tasks.get(t as usize).is_some());
                if held {
                    for t in j.tasks.clone() {
                        if let Some(r) = self.tasks.get(t as usize) {
                            by_index.entry(r.index).or_default().push((t, None));
                        }
                    }
                } else {
                    for r in store.task_rows(j.tasks.clone())? {
                        by_index
                            .entry(r.index)
                            .or_default()
                            .push((r.id, Some(r.state)));
                    }
                }
                self.corr.by_index.insert(d, by_index);
            }
        }
        Ok(())
    }

    /// Pending tasks `tasks` of application `app` of job `job`, which runs after the jobs it
    /// names `--after-corr`, wait for their correspondents (out of the queues); they are looked
    /// at on the next settle.
    pub(super) fn corr_hold(
        &mut self,
        store: &crate::store::Store,
        job: u64,
        app: u32,
        tasks: Vec<TaskId>,
    ) -> Result<(), StateError> {
        let Some(named) = self.job_rec(job).map(|j| j.row.after_corr.clone()) else {
            return Ok(());
        };
        // (Named again: a job whose tasks all left the wait was forgotten.)
        self.name_corr(store, job, &named)?;
        for t in tasks {
            let Some(index) = self.tasks.get(t.0 as usize).map(|r| r.index) else {
                continue;
            };
            if !self.corr.held.insert(t) {
                continue;
            }
            self.corr
                .tasks
                .entry(job)
                .or_default()
                .entry(index)
                .or_default()
                .push((app, t));
            for &d in &named {
                self.corr.due.insert((d, index));
            }
        }
        Ok(())
    }

    /// Whether job `job` runs after other jobs' tasks index by index.
    pub(super) fn runs_after_corr(&self, job: u64) -> bool {
        self.job_rec(job)
            .is_some_and(|j| !j.row.after_corr.is_empty())
    }

    /// A task with index `index` of application `app` ended (succeeded, failed for good or was
    /// cancelled): the tasks that run after it are looked at on the next settle.
    pub(super) fn corr_ended(&mut self, app: u32, index: u32) {
        if self.corr.waiters.is_empty() {
            return;
        }
        if let Some(job) = self.apps.get(app as usize).map(|a| a.job)
            && self.corr.waiters.contains_key(&job)
        {
            self.corr.due.insert((job, index));
        }
    }

    /// What job `job`'s tasks with index `index` may do, from the tasks of that index of the
    /// jobs it names `--after-corr`.
    fn corr_verdict(&self, job: u64, index: u32) -> Corr {
        let Some(j) = self.job_rec(job) else {
            return Corr::Wait;
        };
        let mut wait = false;
        for &d in &j.row.after_corr {
            if self.retention.is_purged(d) {
                // A job set aside unfinished kept no task ends and will have none: as though
                // cancelled, its correspondents can never succeed.
                if self.purged_end(d) == crate::jobs::JobEnd::SetAside {
                    return Corr::Cancel(format!(
                        "cancelled: job {d}, which this task runs after index by index, was set \
                         aside unfinished at a server start (its file no longer reads under this \
                         version), which counts as cancelled"
                    ));
                }
                continue;
            }
            let ids = self
                .corr
                .by_index
                .get(&d)
                .and_then(|m| m.get(&index))
                .map_or(&[][..], Vec::as_slice);
            for &(t, stored) in ids {
                match self.tasks.get(t as usize).map(|r| r.state).or(stored) {
                    Some(TaskState::Succeeded) => {}
                    Some(TaskState::Pending | TaskState::Running) => wait = true,
                    Some(TaskState::Failed) => {
                        return Corr::Cancel(format!(
                            "cancelled: task {index} of job {d}, which this task runs after, \
                             failed"
                        ));
                    }
                    Some(TaskState::Cancelled) => {
                        return Corr::Cancel(format!(
                            "cancelled: task {index} of job {d}, which this task runs after, \
                             was cancelled"
                        ));
                    }
                    // Its row left memory: its job finished; only a completed one leaves
                    // nothing to wait for.
                    None => {
                        let state = self.job_rec(d).map_or("completed", |r| self.job_state(r));
                        if state != "completed" {
                            return Corr::Cancel(format!(
                                "cancelled: job {d}, which this task runs after index by \
                                 index, ended {state} and its task {index}'s end is no longer \
                                 held"
                            ));
                        }
                    }
                }
            }
        }
        if wait { Corr::Wait } else { Corr::Release }
    }

    /// Looks at the tasks whose correspondents had a task end (or that just arrived): queues
    /// those whose correspondents all succeeded (into the job's waiting list while the job
    /// itself waits), cancels those one of whose correspondents failed or was cancelled.
    /// Returns whether it cancelled a task (whose job may have ended with it).
    pub(super) fn settle_corr(&mut self, cx: &mut Ctx) -> Result<bool, StateError> {
        let mut cancelled_any = false;
        while let Some((named, index)) = self.corr.due.pop_first() {
            let waiters = self.corr.waiters.get(&named).cloned().unwrap_or_default();
            for job in waiters {
                let Some(list) = self.corr.tasks.get_mut(&job).and_then(|m| m.remove(&index))
                else {
                    continue;
                };
                match self.corr_verdict(job, index) {
                    Corr::Wait => {
                        if let Some(m) = self.corr.tasks.get_mut(&job) {
                            m.insert(index, list);
                        }
                        continue;
                    }
                    Corr::Release => {
                        for &(app, t) in &list {
                            self.corr.held.remove(&t);
                            if self.waiting.waits(job) {
                                self.waiting.hold(job, app, vec![t]);
                            } else {
                                cx.nodes.wakes.free(app, 1);
                                cx.view.resubmit(AppId(app), vec![t]);
                            }
                        }
                        info!(
                            job,
                            index,
                            tasks = list.len(),
                            "the tasks it runs after succeeded: queued"
                        );
                    }
                    Corr::Cancel(why) => {
                        for &(app, t) in &list {
                            self.corr.held.remove(&t);
                            if self.cancel_task(cx, t.0, &why, EndReason::DependencyFailed) {
                                cancelled_any = true;
                                self.task_ended(app);
                            }
                        }
                        info!(job, index, "{why}");
                    }
                }
                if self.corr.tasks.get(&job).is_some_and(BTreeMap::is_empty) {
                    self.corr.tasks.remove(&job);
                }
            }
        }
        // Named jobs no waiting task needs any more are forgotten (their index too).
        let waiting: HashSet<u64> = self.corr.tasks.keys().copied().collect();
        if waiting.len() < self.corr.waiters.values().map(Vec::len).sum() {
            self.corr.waiters.retain(|_, by| {
                by.retain(|b| waiting.contains(b));
                !by.is_empty()
            });
            let named: HashSet<u64> = self.corr.waiters.keys().copied().collect();
            self.corr.by_index.retain(|d, _| named.contains(d));
        }
        Ok(cancelled_any)
    }
}
