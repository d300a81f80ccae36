//! Purges done in steps: the task rows of purged batch jobs that are still to be deleted.
//!
//! A purge (`State::on_purge`, the `Purge` call and the `[retention]` pass alike) commits, in
//! one small transaction, everything that makes its jobs gone for every reader — each job row
//! marked purged, its summary, owner and nonce deleted, memory forgotten — and deletes at most
//! [`PURGE_CHUNK_TASKS`] task rows with it. What is left of each job's task ids is recorded in
//! the same transaction (table `purging`: job, next task id, end), and deleted afterwards in
//! steps of at most that many rows, one transaction each (`State::purge_step`), by the server's
//! purger task, which releases the state between steps so that heartbeats, submissions and
//! listings are served in between. Nothing reads a purged job's task rows (a restart reads
//! only the ranges of jobs not purged, listings skip purged ids), so rows still waiting here are
//! invisible; a restart reads this table back and the purger finishes the work.

use crate::store::StoreError;
use std::collections::VecDeque;
use std::sync::Arc;

/// The most task rows one purge transaction deletes. On the 2-core VM of docs/performance.md
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

/// A purged batch job's task ids whose rows are still to be deleted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Left {
    /// The purged job.
    pub job: u64,
    /// The first task id not yet deleted.
    pub next: u64,
    /// One past the job's last task id.
    pub end: u64,
}

impl Left {
    /// How many task rows are left.
    pub fn rows(&self) -> u64 {
        self.end.saturating_sub(self.next)
    }
}

/// How far the purger got since the server started: purge calls wait on it until their own
/// rows are gone ([`Purging::target`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Progress {
    /// Task rows deleted by steps since the start.
    pub deleted: u64,
    /// Steps the store refused since the start: a waiting call stops waiting (the purge is
    /// recorded; its rows go once the store takes writes again).
    pub failures: u64,
}

/// The purges' rows still to delete, in the order they were purged, and the purger's progress.
pub(crate) struct Purging {
    left: VecDeque<Left>,
    /// Task rows ever queued here since the start (restored ones included).
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

    /// The task ids whose rows are still to delete (listings skip them).
    pub fn ranges(&self) -> Vec<std::ops::Range<u64>> {
        self.left.iter().map(|l| l.next..l.end).collect()
    }

    /// Task rows still to delete.
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

    /// The next step: at most `chunk` rows, from the front of the queue.
    pub fn plan(&self) -> Vec<(Left, u64)> {
        let mut budget = self.chunk.max(1);
        let mut out = Vec::new();
        for l in &self.left {
            if budget == 0 {
                break;
            }
            let upto = l.end.min(l.next.saturating_add(budget));
            budget -= upto - l.next;
            out.push((*l, upto));
        }
        out
    }

    /// Step `done` (from [`Purging::plan`]) committed.
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
    let mut stmt = conn.prepare("SELECT job, next, end FROM purging ORDER BY job")?;
    let rows = stmt.query_map([], |r| {
        Ok(Left {
            job: r.get::<_, i64>(0)? as u64,
            next: r.get::<_, i64>(1)? as u64,
            end: r.get::<_, i64>(2)? as u64,
        })
    })?;
    rows.map(|r| Ok(r?)).collect()
}

/// Records, inside a purge's transaction, that `left`'s rows are still to be deleted.
pub fn record(tx: &rusqlite::Transaction, left: &Left) -> Result<(), StoreError> {
    tx.prepare_cached("INSERT OR REPLACE INTO purging(job, next, end) VALUES (?1, ?2, ?3)")?
        .execute(rusqlite::params![
            left.job as i64,
            left.next as i64,
            left.end as i64
        ])?;
    Ok(())
}

/// Deletes one step's rows (from [`Purging::plan`]) inside `tx`, and moves each job's record on
/// (or deletes it with its last rows).
pub fn delete_step(tx: &rusqlite::Transaction, step: &[(Left, u64)]) -> Result<(), StoreError> {
    for (l, upto) in step {
        tx.prepare_cached("DELETE FROM tasks WHERE id >= ?1 AND id < ?2")?
            .execute(rusqlite::params![l.next as i64, *upto as i64])?;
        if *upto >= l.end {
            tx.prepare_cached("DELETE FROM purging WHERE job = ?1")?
                .execute(rusqlite::params![l.job as i64])?;
        } else {
            tx.prepare_cached("UPDATE purging SET next = ?1 WHERE job = ?2")?
                .execute(rusqlite::params![*upto as i64, l.job as i64])?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_step_takes_at_most_the_chunk_from_the_front_across_jobs() {
        let mut p = Purging {
            chunk: 10,
            ..Default::default()
        };
        p.queue(vec![
            Left {
                job: 1,
                next: 0,
                end: 4,
            },
            Left {
                job: 2,
                next: 4,
                end: 30,
            },
        ]);
        assert_eq!((p.target(), p.rows_left()), (30, 30));
        let step = p.plan();
        assert_eq!(
            step.iter().map(|(l, u)| (l.job, *u)).collect::<Vec<_>>(),
            [(1, 4), (2, 10)]
        );
        p.stepped(&step);
        assert_eq!(p.rows_left(), 20);
        assert_eq!(p.progress().borrow().deleted, 10);
        let step = p.plan();
        assert_eq!(
            step.iter().map(|(l, u)| (l.job, *u)).collect::<Vec<_>>(),
            [(2, 20)]
        );
        p.stepped(&step);
        p.stepped(&p.plan());
        assert_eq!(p.rows_left(), 0);
        assert_eq!(p.progress().borrow().deleted, p.target());
    }
}
