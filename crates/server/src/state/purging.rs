//! Purges done in steps: the rows of purged jobs that are still to be deleted — a batch job's
//! task rows, a divisible job's chunk rows, a workflow's instance rows.
//!
//! A purge (`State::on_purge`, the `Purge` call and the `[retention]` pass alike) commits, in
//! one small transaction, everything that makes its jobs gone for every reader — each job row
//! marked purged, its summary, owner and nonce deleted, memory forgotten — and deletes at most
//! [`PURGE_CHUNK_TASKS`] of those rows with it. What is left of each job's rows is recorded in
//! the same transaction (table `purging`: job, its kind, next row number, end), and deleted
//! afterwards in steps of at most that many rows, one transaction each (`State::purge_step`),
//! by the server's purger task, which releases the state between steps so that heartbeats,
//! submissions and listings are served in between. Nothing reads a purged job's rows (a restart
//! reads only the task ranges of batch jobs not purged, and the chunks and instances of
//! divisible jobs and workflows not purged; listings skip purged ids), so rows still waiting
//! here are invisible; a restart reads this table back and the purger finishes the work.
//!
//! The bound counts rows as the store holds them, not row numbers: a batch job has a row per
//! task id, but a workflow has rows only for the instances that ran (its cancel writes none),
//! so a million instance numbers may hold a thousand rows. A step of a workflow's (or divisible
//! job's) rows therefore asks the store where its last row is ([`delete_step`]); counted in
//! numbers, a step deleted anything from the bound down to no row at all.

use crate::jobs::{KIND_SHIFT, Kind};
use crate::store::StoreError;
use std::collections::VecDeque;
use std::ops::Range;
use std::sync::Arc;

/// The most rows (batch tasks, divisible chunks, workflow instances) one purge transaction
/// deletes. On the 2-core VM of docs/performance.md
/// ("Purges in steps") a step of 20,000 rows, its pages given back, took 14 ms (median; 50,000:
/// 38 ms, 200,000: 178 ms) at the same rate of about a million rows a second as larger steps,
/// so a call waits for a purge about as long as for a heartbeat, and 5 million rows take 250
/// steps (one transaction of 5 million: 3.9 s).
pub const PURGE_CHUNK_TASKS: u64 = 20_000;

/// After each step the purger sleeps this long before taking the state again: the calls that
/// waited for the state during the step get it first (a lock released and taken again at once
/// would often be taken by the same thread).
pub const PURGE_PAUSE: std::time::Duration = std::time::Duration::from_millis(1);

/// How long the purger waits before trying again a step the store refused (a full disk).
pub const PURGE_RETRY: std::time::Duration = std::time::Duration::from_secs(1);

/// A purged job's rows still to be deleted, by number: a batch job's task ids, a divisible
/// job's chunk numbers, a workflow's instance numbers. A number may have no row (a workflow's
/// instance that never ran); `next` is one that had when it was recorded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Left {
    /// The purged job.
    pub job: u64,
    /// Its kind: which table its rows are in.
    pub kind: Kind,
    /// The first row number not yet deleted.
    pub next: u64,
    /// One past the job's last row number.
    pub end: u64,
}

impl Left {
    /// How many row numbers are left (rows, for a batch job; at most as many rows for the
    /// other kinds).
    pub fn rows(&self) -> u64 {
        self.end.saturating_sub(self.next)
    }
}

/// How far the purger got since the server started: purge calls wait on it until their own
/// rows are gone ([`Purging::target`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Progress {
    /// Row numbers that steps went past since the start (every row numbered below a job's
    /// [`Left::next`] is deleted): what [`Purging::target`] is counted in.
    pub deleted: u64,
    /// Steps the store refused since the start: a waiting call stops waiting (the purge is
    /// recorded; its rows go once the store takes writes again).
    pub failures: u64,
}

/// The purges' rows still to delete, in the order they were purged, and the purger's progress.
pub(crate) struct Purging {
    left: VecDeque<Left>,
    /// Row numbers ever queued here since the start (restored ones included).
    queued: u64,
    progress: Arc<tokio::sync::watch::Sender<Progress>>,
    /// Wakes the purger task when rows are queued.
    work: Arc<tokio::sync::Notify>,
    /// The most rows a transaction deletes ([`PURGE_CHUNK_TASKS`]; smaller in tests).
    pub chunk: u64,
}

impl Default for Purging {
    fn default() -> Self {
        Purging {
            left: VecDeque::new(),
            queued: 0,
            progress: Arc::new(tokio::sync::watch::Sender::new(Progress::default())),
            work: Arc::new(tokio::sync::Notify::new()),
            chunk: PURGE_CHUNK_TASKS,
        }
    }
}

impl Purging {
    /// What the store's `purging` table says is left (a purge the last run did not finish).
    pub fn restore(conn: &rusqlite::Connection) -> Result<Self, StoreError> {
        let mut p = Purging::default();
        p.left = read(conn)?.into();
        p.queued = p.rows_left();
        Ok(p)
    }

    /// After the state was rebuilt from the store ([`Purging::restore`]): the waiters, the
    /// purger and the chunk bound stay those of `old`.
    pub fn carry_over(&mut self, old: &Purging) {
        self.progress = old.progress.clone();
        self.work = old.work.clone();
        self.chunk = old.chunk;
        self.queued = old.progress.borrow().deleted + self.rows_left();
    }

    /// Rows whose deletion a purge committed to (recorded in the store in its transaction).
    pub fn queue(&mut self, left: Vec<Left>) {
        if left.is_empty() {
            return;
        }
        self.queued += left.iter().map(Left::rows).sum::<u64>();
        self.left.extend(left);
        self.work.notify_one();
    }

    /// The value of [`Progress::deleted`] at which every row queued so far is deleted.
    pub fn target(&self) -> u64 {
        self.queued
    }

    /// The batch task ids whose rows are still to delete (listings skip them).
    pub fn ranges(&self) -> Vec<Range<u64>> {
        self.left
            .iter()
            .filter(|l| l.kind == Kind::Batch)
            .map(|l| l.next..l.end)
            .collect()
    }

    /// Row numbers still to delete past (0: nothing is left).
    pub fn rows_left(&self) -> u64 {
        self.left.iter().map(Left::rows).sum()
    }

    /// The purger's progress, as the purge calls wait on it.
    pub fn progress(&self) -> tokio::sync::watch::Receiver<Progress> {
        self.progress.subscribe()
    }

    /// What wakes the purger task.
    pub fn work(&self) -> Arc<tokio::sync::Notify> {
        self.work.clone()
    }

    /// The rows still to delete, job by job in the order they were purged: a step
    /// ([`delete_step`]) takes them from the front.
    pub fn left(&self) -> impl Iterator<Item = &Left> {
        self.left.iter()
    }

    /// Step `done` (from [`delete_step`]) committed.
    pub fn stepped(&mut self, done: &[(Left, u64)]) {
        let mut rows = 0;
        for (l, upto) in done {
            rows += upto - l.next;
            match self.left.front_mut() {
                Some(f) if f.job == l.job && *upto >= f.end => {
                    self.left.pop_front();
                }
                Some(f) if f.job == l.job => f.next = *upto,
                _ => {}
            }
        }
        self.progress.send_modify(|p| p.deleted += rows);
    }

    /// A step the store refused: waiting calls are answered.
    pub fn failed(&self) {
        self.progress.send_modify(|p| p.failures += 1);
    }
}

/// The rows left of every purge, by job (the order of the purges does not matter after a
/// restart: no call waits for them).
fn read(conn: &rusqlite::Connection) -> Result<Vec<Left>, StoreError> {
    let mut stmt = conn.prepare("SELECT job, kind, next, end FROM purging ORDER BY job")?;
    let rows = stmt.query_map([], |r| {
        Ok((
            r.get::<_, i64>(0)? as u64,
            r.get::<_, i64>(1)?,
            r.get::<_, i64>(2)? as u64,
            r.get::<_, i64>(3)? as u64,
        ))
    })?;
    rows.map(|r| {
        let (job, kind, next, end) = r?;
        let kind = u64::try_from(kind)
            .ok()
            .filter(|&k| k < 256)
            .and_then(|k| Kind::of(k << KIND_SHIFT))
            .filter(|k| Kind::ALL.contains(k))
            .ok_or_else(|| {
                StoreError::Corrupt(format!(
                    "purging row of job {job}: kind {kind} is not batch (0), divisible (1) or \
                     workflow (13)"
                ))
            })?;
        Ok(Left {
            job,
            kind,
            next,
            end,
        })
    })
    .collect()
}

/// Records, inside a purge's transaction, that `left`'s rows are still to be deleted.
pub fn record(tx: &rusqlite::Transaction, left: &Left) -> Result<(), StoreError> {
    tx.prepare_cached(
        "INSERT OR REPLACE INTO purging(job, kind, next, end) VALUES (?1, ?2, ?3, ?4)",
    )?
    .execute(rusqlite::params![
        left.job as i64,
        left.kind as u8,
        left.next as i64,
        left.end as i64
    ])?;
    Ok(())
}

/// Inside a purge's transaction: deletes at most `budget` of job `job`'s rows numbered in
/// `rows` (its kind's: task ids, chunk or instance numbers; `budget` is lessened by those) and
/// returns what is left of them, to record ([`record`]) and delete in steps. What is left starts
/// at a row the store holds (with no budget left: the first one in `rows`), and none is left
/// when the store holds no more of them.
pub fn delete_bounded(
    tx: &rusqlite::Transaction,
    kind: Kind,
    job: u64,
    rows: Range<u64>,
    budget: &mut u64,
) -> Result<Option<Left>, StoreError> {
    let upto = step_end(tx, kind, job, rows.clone(), *budget)?;
    let deleted = delete_rows(tx, kind, job, rows.start..upto)?;
    *budget = budget.saturating_sub(deleted);
    Ok((upto < rows.end).then_some(Left {
        job,
        kind,
        next: upto,
        end: rows.end,
    }))
}

/// Where a deletion of at most `most` of job `job`'s rows numbered in `rows` ends: the number
/// of the first row past them (`rows.end` when no more than `most` are left). A batch job's
/// task ids are its rows, one each; a divisible job's chunk numbers and a workflow's instance
/// numbers are not — a cancelled workflow has rows for the instances that ran only, so a
/// million instance numbers may hold a thousand rows — and the store says where the
/// `most`-th row is.
fn step_end(
    tx: &rusqlite::Transaction,
    kind: Kind,
    job: u64,
    rows: Range<u64>,
    most: u64,
) -> Result<u64, StoreError> {
    match kind {
        Kind::Batch => Ok(rows.end.min(rows.start.saturating_add(most))),
        Kind::Divisible => crate::jobs::divisible::chunk_rows_end(tx, job, rows, most),
        Kind::Workflow => crate::jobs::workflow::instance_rows_end(tx, job, rows, most),
        Kind::Topology => Ok(rows.end),
    }
}

/// Deletes job `job`'s rows numbered in `rows`, from its kind's table; returns how many there
/// were.
fn delete_rows(
    tx: &rusqlite::Transaction,
    kind: Kind,
    job: u64,
    rows: Range<u64>,
) -> Result<u64, StoreError> {
    match kind {
        Kind::Batch => crate::jobs::batch::delete_task_rows(tx, rows),
        Kind::Divisible => crate::jobs::divisible::delete_chunk_rows(tx, job, rows),
        Kind::Workflow => crate::jobs::workflow::delete_instance_rows(tx, job, rows),
        // Its rows are deleted whole by its own purge (never recorded here).
        Kind::Topology => Ok(0),
    }
}

/// One step, inside `tx`: deletes at most `most` rows (at least one) of what is `left`, from
/// the front, and moves each job's record on (or deletes it with its last rows). Returns what
/// it did, for [`Purging::stepped`] (each job it reached and where its deletion ended), and how
/// many rows it deleted.
pub fn delete_step<'a>(
    tx: &rusqlite::Transaction,
    left: impl IntoIterator<Item = &'a Left>,
    most: u64,
) -> Result<(Vec<(Left, u64)>, u64), StoreError> {
    let mut budget = most.max(1);
    let mut done = Vec::new();
    let mut deleted = 0;
    for l in left {
        if budget == 0 {
            break;
        }
        let upto = step_end(tx, l.kind, l.job, l.next..l.end, budget)?;
        let n = delete_rows(tx, l.kind, l.job, l.next..upto)?;
        budget = budget.saturating_sub(n);
        deleted += n;
        if upto >= l.end {
            tx.prepare_cached("DELETE FROM purging WHERE job = ?1")?
                .execute(rusqlite::params![l.job as i64])?;
        } else {
            tx.prepare_cached("UPDATE purging SET next = ?1 WHERE job = ?2")?
                .execute(rusqlite::params![upto as i64, l.job as i64])?;
        }
        done.push((*l, upto));
        if upto < l.end {
            break;
        }
    }
    Ok((done, deleted))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// How many rows `sql` counts.
    fn count(conn: &rusqlite::Connection, sql: &str) -> i64 {
        conn.query_row(sql, [], |r| r.get(0)).expect("count")
    }

    /// A step deletes at most the bound of rows as the store holds them, from the front of the
    /// queue and across jobs: a batch job's 4 task rows, then a workflow whose instance numbers
    /// 4..30 hold 13 rows (4, 5, 6 and 20..30: the rest never ran). Bounded by numbers, the
    /// steps deleted 7, 0 and 10 rows; by rows, 10 and 7.
    #[test]
    fn a_step_deletes_at_most_the_bound_of_stored_rows_from_the_front_across_jobs() {
        let mut conn = rusqlite::Connection::open_in_memory().expect("db");
        conn.execute_batch(
            "CREATE TABLE tasks(id INTEGER PRIMARY KEY);
             CREATE TABLE wf_instances(job INTEGER NOT NULL, instance INTEGER NOT NULL,
                 PRIMARY KEY(job, instance));
             CREATE TABLE purging(job INTEGER PRIMARY KEY, kind INTEGER NOT NULL,
                 next INTEGER NOT NULL, end INTEGER NOT NULL);
             INSERT INTO tasks(id) VALUES (0), (1), (2), (3);",
        )
        .expect("tables");
        let wf = ((Kind::Workflow as u64) << KIND_SHIFT) | 2;
        for i in [4, 5, 6].into_iter().chain(20..30) {
            conn.execute(
                "INSERT INTO wf_instances(job, instance) VALUES (2, ?1)",
                [i],
            )
            .expect("instance row");
        }
        let left = vec![
            Left {
                job: 1,
                kind: Kind::Batch,
                next: 0,
                end: 4,
            },
            Left {
                job: wf,
                kind: Kind::Workflow,
                next: 4,
                end: 30,
            },
        ];
        let tx = conn.transaction().expect("tx");
        for l in &left {
            record(&tx, l).expect("record");
        }
        tx.commit().expect("commit");
        let mut p = Purging {
            chunk: 10,
            ..Default::default()
        };
        p.queue(left);
        assert_eq!(p.target(), 30);
        let mut steps = Vec::new();
        while p.rows_left() > 0 {
            let tx = conn.transaction().expect("tx");
            let (done, deleted) = delete_step(&tx, p.left(), p.chunk).expect("step");
            tx.commit().expect("commit");
            p.stepped(&done);
            steps.push(deleted);
            assert!(steps.len() <= 30, "the steps end");
        }
        assert_eq!(steps, [10, 7]);
        assert_eq!(count(&conn, "SELECT COUNT(*) FROM tasks"), 0);
        assert_eq!(count(&conn, "SELECT COUNT(*) FROM wf_instances"), 0);
        assert_eq!(count(&conn, "SELECT COUNT(*) FROM purging"), 0);
        assert_eq!(p.progress().borrow().deleted, p.target());
    }

    /// A purge's own transaction leaves a workflow's rest starting at a row it holds, and none
    /// when no row is left past what the budget took.
    #[test]
    fn what_a_purge_leaves_of_a_workflow_starts_at_a_stored_row() {
        let mut conn = rusqlite::Connection::open_in_memory().expect("db");
        conn.execute_batch(
            "CREATE TABLE wf_instances(job INTEGER NOT NULL, instance INTEGER NOT NULL,
                 PRIMARY KEY(job, instance));
             INSERT INTO wf_instances(job, instance) VALUES (2, 0), (2, 1), (2, 500), (2, 900);",
        )
        .expect("tables");
        let wf = ((Kind::Workflow as u64) << KIND_SHIFT) | 2;
        let tx = conn.transaction().expect("tx");
        let mut budget = 3;
        let left = delete_bounded(&tx, Kind::Workflow, wf, 0..1_000, &mut budget).expect("rows");
        assert_eq!(budget, 0);
        assert_eq!(left.map(|l| (l.next, l.end)), Some((900, 1_000)));
        let mut none = 0;
        let left = delete_bounded(&tx, Kind::Workflow, wf, 900..1_000, &mut none).expect("rows");
        assert_eq!(
            left.map(|l| l.next),
            Some(900),
            "no budget: it starts at its row"
        );
        let mut budget = 5;
        let left = delete_bounded(&tx, Kind::Workflow, wf, 900..1_000, &mut budget).expect("rows");
        assert_eq!((left, budget), (None, 4), "nothing left: nothing to record");
    }
}
