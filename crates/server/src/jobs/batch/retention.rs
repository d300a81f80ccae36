//! Retention of finished jobs: finished jobs' tasks leave memory, and finished jobs are purged
//! from memory and store, by the `[retention]` rule of the configuration or by `hetsched purge`.
//!
//! A job is *finished* when every one of its tasks is terminal (succeeded, failed or cancelled).
//! - **Eviction** (memory only): a finished job's task rows are dropped from memory and replaced by
//!   a summary (counts per state, per application, and the last end time), so `hetsched jobs` and
//!   `hetsched job N` still report it; `hetsched tasks --job N` reads its rows from the store, one
//!   page at a time. Nothing changes in the store.
//! - **Purge** (memory and store): a finished job's job row is marked purged in one transaction
//!   with the deletion of its summary and of at most `state::purging::PURGE_CHUNK_TASKS` of its
//!   task rows; the rest of its rows are deleted after it in steps of that many, one transaction
//!   each (`crate::state::purging`), and nothing reads them meanwhile. The job row stays as a small tombstone
//!   so job, application and task ids are never reused and a submission key keeps naming its job
//!   (a repeated submission with that key answers the purged job's id, `existing = true`, and runs
//!   nothing). A purged job is no longer listed; `job N` answers "no job N: it was purged". In memory
//!   it leaves its id in the purged set and an 8-byte retired slot per application id
//!   ([`Batch::retire`]); a submission key is looked up in the store's index, so keys take no
//!   memory; a restart reads neither its file nor its rows.
//!
//! Why a task with a recorded success is never dispatched again across purge and restart: only
//! finished jobs are evicted or purged (none of their tasks is pending or running, so no queue or
//! node refers to them), a result arriving later for one of their tasks finds no row and is
//! acknowledged and ignored, and after a restart a purged job's applications are rebuilt with no
//! pending task (a restart reads no purged job's task rows, deleted yet or not).

use super::{Batch, Ctx, JobRec, TaskRow, variant_of};
use crate::state::StateError;
use crate::state::prefetch::Observed;
use crate::state::purging::Left;
use crate::state::types::TaskCounts;
use crate::store::{Store, StoreError, TaskState};
use hetsched_core::{AppId, Variant};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::ops::Range;
use std::time::{Duration, Instant};
use tracing::{info, warn};

/// How often the retention rule is applied (and newly finished jobs evicted).
pub const RETENTION_INTERVAL: Duration = Duration::from_secs(5);

/// Task rows in memory, by task id: one dense run of rows per job still held (a job's rows leave
/// memory at once when it is evicted or purged).
#[derive(Debug, Default)]
pub(super) struct TaskTable {
    /// Rows by the id of each run's first task.
    chunks: BTreeMap<u64, Vec<TaskRow>>,
    /// One past the highest task id ever given (held or not): the next job's first task.
    end: u64,
}

/// One application's tasks as its submission numbered them: task `k` of the application (its
/// `k`-th id) has index `indices[k]` when the job file listed `indices` (`submit --array`), else
/// `k`. Submission writes the rows from it, and a restart rebuilds the rows it did not read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct AppTasks {
    /// The application's id.
    pub app: u32,
    /// How many tasks it has.
    pub tasks: u32,
    /// The listed indices, if any.
    pub indices: Option<Vec<u32>>,
}

impl AppTasks {
    /// The index of the application's `k`-th task.
    pub fn index(&self, k: u32) -> u32 {
        self.indices
            .as_ref()
            .and_then(|i| i.get(k as usize))
            .map_or(k, |&i| i)
    }
}

impl TaskTable {
    /// The rows of the jobs whose rows are held (`jobs`: each one's first task and its
    /// applications, by first task): the `touched` rows read from the store (by id; see
    /// [`crate::store::Snapshot::tasks`]), and for every other task the row its submission
    /// wrote — pending, never dispatched.
    pub(super) fn from_touched(
        touched: Vec<TaskRow>,
        jobs: &[(u64, Vec<AppTasks>)],
    ) -> Result<Self, StoreError> {
        let mut table = TaskTable::default();
        let mut touched = touched.into_iter().peekable();
        for (first, apps) in jobs {
            let total: u64 = apps.iter().map(|a| u64::from(a.tasks)).sum();
            let mut rows = Vec::with_capacity(total as usize);
            let mut id = *first;
            for a in apps {
                let app = a.app;
                for k in 0..a.tasks {
                    let index = a.index(k);
                    let row = match touched.next_if(|r| r.id <= id) {
                        Some(r) if r.id == id && r.app == app && r.index == index => r,
                        Some(r) => {
                            return Err(StoreError::Corrupt(format!(
                                "task row {} (application {}, index {}) is not task {id} \
                                 (application {app}, index {index})",
                                r.id, r.app, r.index
                            )));
                        }
                        None => TaskRow::submitted(id, app, index),
                    };
                    rows.push(row);
                    id += 1;
                }
            }
            table.insert(*first, rows);
        }
        if let Some(r) = touched.next() {
            return Err(StoreError::Corrupt(format!(
                "task row {} belongs to no job",
                r.id
            )));
        }
        Ok(table)
    }

    fn insert(&mut self, start: u64, rows: Vec<TaskRow>) {
        self.end = self.end.max(start + rows.len() as u64);
        if !rows.is_empty() {
            self.chunks.insert(start, rows);
        }
    }

    /// One past the highest task id ever given.
    pub(super) fn len(&self) -> usize {
        self.end as usize
    }

    /// Makes sure ids below `end` are never given again (a purged job at the end).
    pub(super) fn reserve_ids(&mut self, end: u64) {
        self.end = self.end.max(end);
    }

    /// Adds a job's rows: a new job's (ids from `self.len()` on), or an evicted job's read back.
    pub(super) fn extend(&mut self, rows: Vec<TaskRow>) {
        if let Some(first) = rows.first() {
            let start = first.id;
            self.insert(start, rows);
        }
    }

    fn run(&self, id: u64) -> Option<(u64, &Vec<TaskRow>)> {
        let (&s, v) = self.chunks.range(..=id).next_back()?;
        (id < s + v.len() as u64).then_some((s, v))
    }

    /// The row of task `id`, if held in memory.
    pub(super) fn get(&self, id: usize) -> Option<&TaskRow> {
        let id = id as u64;
        self.run(id).map(|(s, v)| &v[(id - s) as usize])
    }

    /// The row of task `id`, if held in memory.
    pub(super) fn get_mut(&mut self, id: usize) -> Option<&mut TaskRow> {
        let id = id as u64;
        let (&s, v) = self.chunks.range_mut(..=id).next_back()?;
        v.get_mut((id - s) as usize)
    }

    /// The rows of `range` if all are held in one run (an empty range: no rows).
    pub(super) fn slice(&self, range: Range<u64>) -> Option<&[TaskRow]> {
        if range.is_empty() {
            return Some(&[]);
        }
        let (s, v) = self.run(range.start)?;
        v.get((range.start - s) as usize..(range.end - s) as usize)
    }

    /// Drops the run starting at `start` from memory.
    pub(super) fn take(&mut self, start: u64) -> Option<Vec<TaskRow>> {
        self.chunks.remove(&start)
    }

    /// Ids of every row held.
    pub(super) fn ids(&self) -> Vec<u64> {
        self.chunks
            .iter()
            .flat_map(|(&s, v)| s..s + v.len() as u64)
            .collect()
    }

    /// How many rows are held in memory.
    pub(super) fn held(&self) -> usize {
        self.chunks.values().map(Vec::len).sum()
    }
}

impl std::ops::Index<usize> for TaskTable {
    type Output = TaskRow;
    fn index(&self, id: usize) -> &TaskRow {
        self.get(id)
            .unwrap_or_else(|| panic!("task {id} is not held in memory"))
    }
}

impl std::ops::IndexMut<usize> for TaskTable {
    fn index_mut(&mut self, id: usize) -> &mut TaskRow {
        self.get_mut(id)
            .unwrap_or_else(|| panic!("task {id} is not held in memory"))
    }
}

/// What memory keeps of a finished job whose rows were evicted.
#[derive(Clone, Debug, Default)]
pub(super) struct Finished {
    counts: TaskCounts,
    /// When its last task ended.
    finished_ns: u64,
}

/// A finished job's summary as the store keeps it (JSON in the `finished` table), enough to
/// rebuild [`Finished`] and the view's counters without reading the job's task rows.
#[derive(Debug, Default, Serialize, Deserialize)]
struct StoredSummary {
    finished_ns: u64,
    apps: Vec<StoredApp>,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct StoredApp {
    /// Tasks pending, running, succeeded, failed, cancelled.
    counts: [u64; 5],
    /// Dispatched attempts' variants (CPU, GPU) and successes, as the view counts them.
    cpu: u32,
    gpu: u32,
    ok: u32,
    /// Observed run times of successes per variant: (total ns, count).
    observed: [(u64, u64); 2],
    /// What its tasks used (absent from summaries stored before usage was measured).
    #[serde(default)]
    used: super::Used,
}

fn to_counts(c: [u64; 5]) -> TaskCounts {
    TaskCounts {
        pending: c[0],
        running: c[1],
        succeeded: c[2],
        failed: c[3],
        cancelled: c[4],
        queued: 0,
        fetching: 0,
    }
}

fn from_counts(c: &TaskCounts) -> [u64; 5] {
    [c.pending, c.running, c.succeeded, c.failed, c.cancelled]
}

/// Retention bookkeeping of the state.
#[derive(Debug, Default)]
pub(super) struct Retention {
    /// Evicted finished jobs by id.
    finished: HashMap<u64, Finished>,
    /// Purged jobs.
    purged: HashSet<u64>,
    /// When the rule was last applied.
    last_applied: Option<Instant>,
    /// Task ids of purged jobs whose rows are still in the store, to be deleted in steps
    /// (`crate::state::purging`), sorted: listings that read rows by id skip them.
    pub(super) undeleted: Vec<Range<u64>>,
}

impl Retention {
    /// With the jobs a store lists as purged.
    pub(super) fn with_purged(purged: Vec<u64>) -> Self {
        Retention {
            purged: purged.into_iter().collect(),
            ..Default::default()
        }
    }

    pub(super) fn is_purged(&self, job: u64) -> bool {
        self.purged.contains(&job)
    }

    /// How many jobs were purged.
    pub(super) fn purged_count(&self) -> usize {
        self.purged.len()
    }

    /// The purged jobs' ids, in no order.
    pub(super) fn purged_ids(&self) -> impl Iterator<Item = u64> + '_ {
        self.purged.iter().copied()
    }

    /// How many tasks of evicted job `job` ended as `ended` (failed or cancelled; `None`: the
    /// job is not evicted).
    pub(super) fn ended_of_evicted(&self, job: u64, ended: TaskState) -> Option<u64> {
        self.finished.get(&job).map(|f| match ended {
            TaskState::Cancelled => f.counts.cancelled,
            _ => f.counts.failed,
        })
    }

    /// Job `job` is no longer finished (its failed tasks were resubmitted): forget its summary.
    pub(super) fn revive(&mut self, job: u64) {
        self.finished.remove(&job);
    }
}

impl Batch {
    /// Restores finished jobs' summaries read from the store (their task rows were not read):
    /// memory's summary, the view's counters and the observed run times.
    pub(super) fn restore_summaries(
        &mut self,
        cx: &mut Ctx,
        stored: Vec<(u64, String)>,
    ) -> Result<(), StateError> {
        for (job, text) in stored {
            let s: StoredSummary = serde_json::from_str(&text)
                .map_err(|e| StoreError::Corrupt(format!("summary of job {job}: {e}")))?;
            let Some(j) = self.job_rec(job) else {
                return Err(StoreError::Corrupt(format!("summary of unknown job {job}")).into());
            };
            let apps: Vec<u32> = j.apps.clone().collect();
            if apps.len() != s.apps.len() {
                return Err(
                    StoreError::Corrupt(format!("summary of job {job}: applications")).into(),
                );
            }
            let mut counts = TaskCounts::default();
            for (&a, sa) in apps.iter().zip(&s.apps) {
                let c = to_counts(sa.counts);
                add(&mut counts, &c);
                if let Some(r) = self.apps.get_mut(a as usize) {
                    r.counts = sa.counts;
                    r.used = sa.used;
                }
                cx.view.restore_finished(AppId(a), sa.cpu, sa.gpu, sa.ok)?;
                if let Some(r) = self.apps.get_mut(a as usize) {
                    for (v, (total, count)) in sa.observed.iter().enumerate() {
                        r.observed[v] = Observed {
                            total_ns: u128::from(*total),
                            count: *count,
                            // Not in the summary: counted all long, so never queued by
                            // prefetch (a finished job has nothing pending anyway).
                            long: *count,
                        };
                    }
                }
            }
            self.retention.finished.insert(
                job,
                Finished {
                    counts,
                    finished_ns: s.finished_ns,
                },
            );
        }
        Ok(())
    }
}

fn add(c: &mut TaskCounts, o: &TaskCounts) {
    c.pending += o.pending;
    c.running += o.running;
    c.succeeded += o.succeeded;
    c.failed += o.failed;
    c.cancelled += o.cancelled;
}

/// Counts of rows by state.
pub(super) fn count_rows(rows: &[TaskRow]) -> TaskCounts {
    let mut c = TaskCounts::default();
    for t in rows {
        count_row(&mut c, t.state);
    }
    c
}

/// Counts one row of state `state` in `c`.
fn count_row(c: &mut TaskCounts, state: TaskState) {
    use crate::store::TaskState::*;
    match state {
        Pending => c.pending += 1,
        Running => c.running += 1,
        Succeeded => c.succeeded += 1,
        Failed => c.failed += 1,
        Cancelled => c.cancelled += 1,
    }
}

/// Below this many rows, rows leaving memory are freed at once.
const FREE_ASIDE_ROWS: usize = 100_000;

/// Frees rows that left memory (evicted or purged jobs') on a thread of their own when they
/// are many: freeing 5 million rows, each with its own allocations, takes a good part of a
/// second that the state's lock (held by the caller) need not wait for (docs/performance.md,
/// "Purges in steps"). If no thread can be started they are freed here.
fn free_aside(runs: Vec<Vec<TaskRow>>) {
    if runs.iter().map(Vec::len).sum::<usize>() < FREE_ASIDE_ROWS {
        return;
    }
    let started = std::thread::Builder::new()
        .name("hetsched-free".into())
        .spawn(move || drop(runs));
    if let Err(e) = started {
        warn!("rows that left memory were freed under the state's lock: no thread for it: {e}");
    }
}

impl Batch {
    /// When a finished job's last task ended (0 while it is not finished).
    pub(super) fn job_finished_ns(&self, j: &JobRec) -> u64 {
        match self.tasks.slice(j.tasks.clone()) {
            Some(rows) => rows.iter().map(|t| t.finished_ns).max().unwrap_or(0),
            None => self
                .retention
                .finished
                .get(&j.row.id)
                .map_or(0, |f| f.finished_ns),
        }
    }

    /// One page of a listing, `page` (as many ids as the page's limit), within a listing that
    /// ends at `last`: the rows, from memory when held, else read from the store, and where the
    /// page ends. From the store a page holds up to as many rows as ids asked, so the ids of
    /// purged jobs are skipped rather than returned as empty pages.
    pub(super) fn rows_for_listing(
        &self,
        store: &Store,
        page: Range<u64>,
        last: u64,
    ) -> Result<(std::borrow::Cow<'_, [TaskRow]>, u64), StateError> {
        if let Some(rows) = self.tasks.slice(page.clone()) {
            return Ok((std::borrow::Cow::Borrowed(rows), page.end));
        }
        let want = (page.end - page.start) as usize;
        let rows = rows_past(
            |r, n| store.task_rows_from(r, n),
            page.start..last,
            want,
            &self.retention.undeleted,
        )?;
        let end = if rows.len() < want {
            last
        } else {
            rows.last().map_or(last, |t| t.id + 1)
        };
        Ok((std::borrow::Cow::Owned(rows), end))
    }

    /// Drops the rows of every newly finished job from memory, keeping its summary. Returns how
    /// many jobs were evicted. The summaries are stored first: when the store refuses them, the
    /// rows stay in memory (the next pass tries again) and the refusal is returned.
    pub fn evict_finished(&mut self, store: &mut Store) -> Result<usize, StoreError> {
        let mut done: Vec<(u64, u64, Finished, String)> = Vec::new();
        for i in 0..self.jobs.len() {
            let (id, range, apps) = {
                let j = &self.jobs[i];
                (j.row.id, j.tasks.clone(), j.apps.clone())
            };
            if range.is_empty() || self.retention.finished.contains_key(&id) {
                continue;
            }
            // Rows changed since the last commit stay until it writes them (an evicted row is
            // never written): a restart's own settling changes some before any commit — the
            // jobs after a job set aside unfinished, cancelled (`crate::set_aside`).
            if self.dirty.iter().any(|t| range.contains(t)) {
                continue;
            }
            // Unfinished (by its counts): its rows need not be looked at.
            let c = self.job_counts(&self.jobs[i]);
            if c.pending + c.running > 0 {
                continue;
            }
            // A stopped task's process ends later, and its result must find its row.
            if self.stopping.of_job(id) > 0 {
                continue;
            }
            let Some(rows) = self.tasks.slice(range.clone()) else {
                continue;
            };
            // One pass over the rows, application by application: a job of millions of tasks
            // is read once, not once per figure (five passes over 5 million rows held the
            // state half a second; docs/performance.md, "Purges in steps").
            let mut stored = StoredSummary::default();
            let mut counts = TaskCounts::default();
            let mut terminal = true;
            let mut seen = 0;
            for a in apps {
                let Some(r) = self.apps.get(a as usize) else {
                    continue;
                };
                let s = (r.first_task - range.start) as usize;
                let app_rows = rows.get(s..s + r.tasks as usize).unwrap_or(&[]);
                seen += app_rows.len();
                let mut c = TaskCounts::default();
                let mut sa = StoredApp {
                    observed: [0, 1].map(|v| {
                        let o = r.observed[v];
                        (o.total_ns.min(u64::MAX as u128) as u64, o.count)
                    }),
                    used: r.used,
                    ..Default::default()
                };
                for t in app_rows {
                    terminal &= t.state.is_terminal();
                    stored.finished_ns = stored.finished_ns.max(t.finished_ns);
                    count_row(&mut c, t.state);
                    // As the restart counts them (`State::from_snapshot`).
                    if t.attempt > 0 {
                        match variant_of(t.variant) {
                            Variant::Cpu => sa.cpu += 1,
                            Variant::Gpu => sa.gpu += 1,
                        }
                        if t.state == crate::store::TaskState::Succeeded {
                            sa.ok += 1;
                        }
                    }
                }
                sa.counts = from_counts(&c);
                counts.add(&c);
                stored.apps.push(sa);
            }
            if seen != rows.len() {
                // Rows outside its applications' (none are): the job's figures from all.
                terminal = rows.iter().all(|t| t.state.is_terminal());
                stored.finished_ns = rows.iter().map(|t| t.finished_ns).max().unwrap_or(0);
                counts = count_rows(rows);
            }
            if !terminal {
                continue;
            }
            let summary = Finished {
                counts,
                finished_ns: stored.finished_ns,
            };
            let text = serde_json::to_string(&stored).unwrap_or_default();
            done.push((id, range.start, summary, text));
        }
        if done.is_empty() {
            return Ok(0);
        }
        let rows: Vec<(u64, String)> = done.iter().map(|d| (d.0, d.3.clone())).collect();
        store.put_finished(&rows)?;
        let evicted = done.len();
        let mut gone = Vec::with_capacity(done.len());
        for (id, start, summary, _) in done {
            gone.extend(self.tasks.take(start));
            self.retention.finished.insert(id, summary);
        }
        free_aside(gone);
        if evicted > 0 {
            info!(
                jobs = evicted,
                held = self.tasks.held(),
                "finished jobs' tasks left memory"
            );
        }
        Ok(evicted)
    }

    /// Finished, not yet purged jobs: (id, when the last task ended).
    pub(super) fn purgeable_jobs(&self) -> Vec<(u64, u64)> {
        self.retention
            .finished
            .iter()
            .filter(|(id, _)| !self.retention.is_purged(**id))
            .map(|(&id, f)| (id, f.finished_ns))
            .collect()
    }

    /// Whether job `id` may be purged: it exists, is not purged, and has no task pending or
    /// running.
    pub(super) fn check_purgeable(&self, id: u64) -> Result<(), StateError> {
        let Some(j) = self.job_rec(id) else {
            return Err(StateError::NoJob(id));
        };
        if self.retention.is_purged(id) {
            return Err(StateError::NoJob(id));
        }
        let c = self.job_counts(j);
        if c.pending + c.running > 0 {
            return Err(StateError::Invalid(format!(
                "job {id} is not finished ({} pending, {} running): cancel it first \
                 (`hetsched cancel {id}`) or wait for it",
                hetsched_core::text::count(c.pending, "task"),
                c.running
            )));
        }
        let stopping = self.stopping.of_job(id);
        if stopping > 0 {
            return Err(StateError::Invalid(format!(
                "job {id} is still stopping: the processes of {} may still run (their SIGTERM \
                 handlers, for at most the kill grace); `hetsched wait {id}` returns once they \
                 ended",
                hetsched_core::text::count(u64::from(stopping), "task")
            )));
        }
        Ok(())
    }

    /// Marks the finished jobs `ids` purged and deletes their summaries inside the purge's
    /// transaction, with at most `budget` of their task rows (`budget` is lessened by those):
    /// the rest of each job's task ids is returned, for the purge to record and delete in steps
    /// (`crate::state::purging`). Returns how many tasks the jobs had.
    pub(super) fn delete_purged_rows(
        &self,
        tx: &rusqlite::Transaction,
        ids: &[u64],
        budget: &mut u64,
    ) -> Result<(u64, Vec<Left>), StoreError> {
        let mut tasks = 0;
        let mut left = Vec::new();
        for &id in ids {
            let Some((apps_end, range)) = self.job_rec(id).map(|j| (j.apps.end, j.tasks.clone()))
            else {
                continue;
            };
            // Where its ids end, for a restart when it is the newest job: its file, which said
            // that, is dropped (`mark_purged`).
            tx.prepare_cached("UPDATE jobs SET apps_end = ?2, tasks_end = ?3 WHERE id = ?1")?
                .execute(rusqlite::params![id as i64, apps_end, range.end as i64])?;
            mark_purged(tx, id)?;
            tasks += range.end.saturating_sub(range.start);
            left.extend(crate::state::purging::delete_bounded(
                tx,
                crate::jobs::Kind::Batch,
                id,
                range,
                budget,
            )?);
        }
        Ok((tasks, left))
    }

    /// The purge of `ids` committed: their rows leave memory.
    pub(super) fn forget_purged(&mut self, cx: &mut Ctx, ids: &[u64]) {
        // (A purge takes no stopping job, but one set aside at a start may have been.)
        if !self.stopping.is_empty() {
            self.stopping.forget_jobs(&ids.iter().copied().collect());
        }
        let mut gone = Vec::new();
        for &id in ids {
            let Some(start) = self.job_rec(id).map(|j| j.tasks.start) else {
                continue;
            };
            gone.extend(self.tasks.take(start));
            self.retention.finished.remove(&id);
            self.retention.purged.insert(id);
        }
        free_aside(gone);
        self.retire(cx, ids);
        // A purge of many jobs gives back the room they took, not only their entries.
        let finished = self.retention.finished.len();
        if self.retention.finished.capacity() > 4 * finished.max(16) {
            self.retention.finished.shrink_to(2 * finished);
        }
    }

    /// Purged jobs `ids` keep only what their ids need — each id (in the purged set, and the
    /// store's row, which also keeps its submission key), their application ids and task ids
    /// (never given again) — and drop the rest: their job records, their
    /// applications' records and their applications' state in the scheduler's view, each
    /// application id left as an 8-byte retired slot ([`hetsched_core::model::Slots`]). A
    /// purged job then costs a few dozen bytes, whatever its file said.
    pub(super) fn retire(&mut self, cx: &mut Ctx, ids: &[u64]) {
        let mut gone = HashSet::with_capacity(ids.len());
        for &id in ids {
            let Some(j) = self.job_rec(id) else {
                continue;
            };
            let apps = j.apps.clone();
            let mut whole = false;
            for a in apps {
                match cx.view.retire_application(AppId(a)) {
                    Ok(()) => {
                        self.apps.retire(a as usize);
                        // Its back-offs would list a nameless application on their nodes.
                        for node in self.backoff.forget_app(a) {
                            if let Err(e) = cx.store.put_backoff(a, node, None) {
                                warn!(
                                    app = a,
                                    node, "a purged job's back-off was not deleted: {e}"
                                );
                            }
                        }
                    }
                    Err(e) => {
                        whole = true;
                        warn!(
                            job = id,
                            app = a,
                            "a purged job's application stays whole: {e}"
                        );
                    }
                }
            }
            if !whole {
                gone.insert(id);
            }
        }
        // One pass, however many jobs a purge takes; and the room they took goes back.
        if !gone.is_empty() {
            self.jobs.retain(|j| !gone.contains(&j.row.id));
            let kept = self.jobs.len();
            if self.jobs.capacity() > 4 * kept.max(16) {
                self.jobs.shrink_to(2 * kept);
            }
        }
    }

    /// The retention pass (at most every [`RETENTION_INTERVAL`]): evicts newly finished jobs'
    /// tasks from memory. True when it ran: the state then applies the configured retention
    /// rule to the finished jobs of every kind ([`crate::state::State::apply_retention`]).
    pub fn apply_retention(&mut self, store: &mut Store) -> Result<bool, StoreError> {
        if self
            .retention
            .last_applied
            .is_some_and(|t| t.elapsed() < RETENTION_INTERVAL)
        {
            return Ok(false);
        }
        self.retention.last_applied = Some(Instant::now());
        self.evict_finished(store)?;
        Ok(true)
    }

    /// When [`Batch::apply_retention`] next does something (at once if it never ran).
    pub fn retention_due(&self) -> Instant {
        self.retention
            .last_applied
            .map_or_else(Instant::now, |t| t + RETENTION_INTERVAL)
    }

    /// The task ids of purged jobs whose rows the store still holds, until steps delete them
    /// (`crate::state::purging`): listings skip them.
    pub fn set_undeleted(&mut self, mut ranges: Vec<Range<u64>>) {
        ranges.sort_unstable_by_key(|r| r.start);
        self.retention.undeleted = ranges;
    }

    /// How many task rows memory holds (finished jobs' rows are not held).
    pub fn tasks_in_memory(&self) -> usize {
        self.tasks.held()
    }
}

/// The first `want` task rows with ids in `range`, by id, as `read` gives them (a range and a
/// count), past the ids in `skip` (sorted, disjoint): purged jobs' rows not deleted yet.
pub(super) fn rows_past(
    read: impl Fn(Range<u64>, usize) -> Result<Vec<TaskRow>, StoreError>,
    range: Range<u64>,
    want: usize,
    skip: &[Range<u64>],
) -> Result<Vec<TaskRow>, StoreError> {
    let mut rows = Vec::new();
    let mut from = range.start;
    while from < range.end && rows.len() < want {
        let gap = skip.iter().find(|g| g.end > from);
        if let Some(g) = gap.filter(|g| g.start <= from) {
            from = g.end;
            continue;
        }
        let upto = gap.map_or(range.end, |g| g.start.min(range.end));
        rows.extend(read(from..upto, want - rows.len())?);
        from = gap.map_or(range.end, |g| g.end);
    }
    Ok(rows)
}

/// Deletes batch job `id`'s task rows (`tasks`, its task ids) and summary and marks its job row
/// purged (a tombstone: its id and submission key stay taken), inside `tx`. Returns how many
/// task ids it had. Used for a job set aside at a start (`crate::set_aside`, from the store's
/// rows); a purge ([`Batch::delete_purged_rows`], from memory) marks the job with
/// [`mark_purged`] and deletes its rows with [`delete_task_rows`] in bounded steps.
pub(crate) fn delete_job_rows(
    tx: &rusqlite::Transaction,
    id: u64,
    tasks: std::ops::Range<u64>,
) -> Result<u64, StoreError> {
    delete_task_rows(tx, tasks.clone())?;
    mark_purged(tx, id)?;
    Ok(tasks.end.saturating_sub(tasks.start))
}

/// Marks batch job `id`'s row purged and deletes its summary, inside `tx`: from then on no
/// reader (listings, a restart) looks at its task rows, whether or not they are deleted yet.
/// Its job file gives way to its digest (`store::drop_job_text`): a restart reads a purged
/// job's ids from its row (`apps_end`, `tasks_end`, written by the caller) or the next job's,
/// never from its file.
pub(crate) fn mark_purged(tx: &rusqlite::Transaction, id: u64) -> Result<(), StoreError> {
    tx.prepare_cached("UPDATE jobs SET purged = 1 WHERE id = ?1")?
        .execute(rusqlite::params![id as i64])?;
    crate::store::drop_job_text(tx, crate::store::JobTable::Batch, id)?;
    tx.prepare_cached("DELETE FROM finished WHERE job = ?1")?
        .execute(rusqlite::params![id as i64])?;
    Ok(())
}

/// Deletes the task rows with ids in `tasks`, inside `tx`; returns how many there were.
pub(crate) fn delete_task_rows(
    tx: &rusqlite::Transaction,
    tasks: std::ops::Range<u64>,
) -> Result<u64, StoreError> {
    if tasks.is_empty() {
        return Ok(0);
    }
    let n = tx
        .prepare_cached("DELETE FROM tasks WHERE id >= ?1 AND id < ?2")?
        .execute(rusqlite::params![tasks.start as i64, tasks.end as i64])?;
    Ok(n as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::TaskState;

    fn ran(id: u64, app: u32, index: u32) -> TaskRow {
        TaskRow {
            state: TaskState::Succeeded,
            attempt: 1,
            node: Some(0),
            message: "done".into(),
            ..TaskRow::submitted(id, app, index)
        }
    }

    #[test]
    fn rows_not_read_back_are_the_submitted_pending_rows_of_their_jobs() {
        // Job A: tasks 0..5 (application 0: 3 tasks, application 1: 2); job B (a summarised
        // job's ids 5..7 are not held); job C: tasks 7..9 (application 3).
        let apps = |a: u32, tasks: u32| AppTasks {
            app: a,
            tasks,
            indices: None,
        };
        let jobs = vec![(0, vec![apps(0, 3), apps(1, 2)]), (7, vec![apps(3, 2)])];
        let table = TaskTable::from_touched(vec![ran(1, 0, 1), ran(3, 1, 0), ran(8, 3, 1)], &jobs)
            .expect("consistent");
        let held: Vec<(u64, u32, u32, TaskState)> = table
            .ids()
            .into_iter()
            .map(|i| {
                let r = &table[i as usize];
                (r.id, r.app, r.index, r.state)
            })
            .collect();
        use TaskState::{Pending as P, Succeeded as S};
        assert_eq!(
            held,
            vec![
                (0, 0, 0, P),
                (1, 0, 1, S),
                (2, 0, 2, P),
                (3, 1, 0, S),
                (4, 1, 1, P),
                (7, 3, 0, P),
                (8, 3, 1, S)
            ]
        );
        assert_eq!(table[0], TaskRow::submitted(0, 0, 0));
        assert_eq!(table.len(), 9);
        assert!(
            table.get(5).is_none(),
            "the summarised job's rows are not held"
        );

        // A row that is not the task its id names, or that belongs to no held job, is refused.
        for bad in [vec![ran(1, 1, 1)], vec![ran(6, 0, 0)], vec![ran(9, 3, 2)]] {
            assert!(matches!(
                TaskTable::from_touched(bad, &jobs),
                Err(StoreError::Corrupt(_))
            ));
        }
    }

    #[test]
    fn an_array_jobs_rows_keep_their_listed_indices() {
        // `indices = "1-7:2"`: tasks 0..4 have indices 1, 3, 5, 7; task 1 ran.
        let jobs = vec![(
            0,
            vec![AppTasks {
                app: 0,
                tasks: 4,
                indices: Some(vec![1, 3, 5, 7]),
            }],
        )];
        let table = TaskTable::from_touched(vec![ran(1, 0, 3)], &jobs).expect("consistent");
        let indices: Vec<u32> = (0..4).map(|i| table[i].index).collect();
        assert_eq!(indices, [1, 3, 5, 7]);
        assert_eq!(table[1].state, TaskState::Succeeded);
        assert!(matches!(
            TaskTable::from_touched(vec![ran(1, 0, 1)], &jobs),
            Err(StoreError::Corrupt(_))
        ));
    }
}
