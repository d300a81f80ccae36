//! Job nonces: 64 random bits drawn for each job when the server accepts it, which tie the
//! files an agent keeps for the job to this job and no other of the same id.
//!
//! Job ids repeat: a restored backup hands out again the ids that followed it, and a fresh data
//! directory starts at 1 — while agents keep the work directories of jobs their server does not
//! know (`hetsched_agent::sweep` deletes only what their server purged). Without more than the
//! id, job 1's task output on an agent would be served to whoever owns job 1 now. So every
//! assignment, divisible chunk order, log read and workflow fetch carries its job's nonce: the
//! agent marks the job's directories with it before anything is written there (moving aside a
//! directory marked otherwise), and serves a file only from a directory marked with the nonce
//! that the server's ticket names (`hetsched_proto::ticket::Log`, `Fetch`).
//!
//! Stored in `job_nonces` (one row per job, whatever its kind — batch jobs, workflows and
//! divisible jobs each have their own tables — written in the submission's first transaction
//! with its owner's row), kept in memory for the heartbeats, deleted with the job (a purge, a
//! set-aside). A job stored before nonces has no row: its nonce is 0, "legacy", and it reads
//! only the files of unmarked directories (an agent that predates nonces marks none).

use crate::store::StoreError;
use rusqlite::params;
use std::collections::HashMap;

/// The nonce of every job that has one (a job without is 0's).
#[derive(Debug, Default)]
pub struct JobNonces(HashMap<u64, u64>);

impl JobNonces {
    /// The nonces the store holds.
    pub fn restore(conn: &rusqlite::Connection) -> Result<Self, StoreError> {
        let mut stmt = conn.prepare("SELECT job, nonce FROM job_nonces")?;
        let rows = stmt.query_map([], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?)))?;
        let mut map = HashMap::new();
        for row in rows {
            let (job, nonce) = row?;
            // Stored as SQLite's signed 64-bit integer, the same 64 bits.
            map.insert(job as u64, nonce as u64);
        }
        Ok(Self(map))
    }

    /// Job `job`'s nonce; 0 for a job stored before nonces (or none at all).
    pub fn get(&self, job: u64) -> u64 {
        self.0.get(&job).copied().unwrap_or(0)
    }

    /// A new nonce: random, never 0 (which says "none").
    pub fn draw() -> u64 {
        rand::random::<u64>().max(1)
    }

    /// Writes `nonce` as job `job`'s inside `tx` (over a row a refused submission left under
    /// the id).
    pub fn write(tx: &rusqlite::Transaction, job: u64, nonce: u64) -> Result<(), StoreError> {
        tx.execute(
            "INSERT INTO job_nonces(job, nonce) VALUES (?1, ?2)
             ON CONFLICT(job) DO UPDATE SET nonce = ?2",
            params![job as i64, nonce as i64],
        )?;
        Ok(())
    }

    /// Memory after [`JobNonces::write`] committed.
    pub fn set(&mut self, job: u64, nonce: u64) {
        self.0.insert(job, nonce);
    }

    /// Deletes the nonces of `jobs` inside `tx` (purged, or set aside).
    pub fn delete(tx: &rusqlite::Transaction, jobs: &[u64]) -> Result<(), StoreError> {
        let mut stmt = tx.prepare_cached("DELETE FROM job_nonces WHERE job = ?1")?;
        for &job in jobs {
            stmt.execute(params![job as i64])?;
        }
        Ok(())
    }

    /// Memory after [`JobNonces::delete`] committed.
    pub fn purged(&mut self, jobs: &[u64]) {
        for job in jobs {
            self.0.remove(job);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A nonce is never 0 and survives the store whole (all 64 bits, the high one too); a job
    /// without a row, as every job stored before nonces, reads 0; a deleted one is gone.
    #[test]
    fn nonces_are_stored_whole_and_a_job_without_one_reads_0() {
        let mut conn = rusqlite::Connection::open_in_memory().expect("db");
        conn.execute_batch(
            "CREATE TABLE job_nonces(job INTEGER PRIMARY KEY, nonce INTEGER NOT NULL)",
        )
        .expect("table");
        assert!((0..1000).all(|_| JobNonces::draw() != 0));
        let high = u64::MAX - 5;
        let tx = conn.transaction().expect("tx");
        JobNonces::write(&tx, 1, high).expect("write");
        JobNonces::write(&tx, 2, 7).expect("write");
        JobNonces::write(&tx, 2, 8).expect("rewrite");
        tx.commit().expect("commit");
        let n = JobNonces::restore(&conn).expect("restore");
        assert_eq!((n.get(1), n.get(2), n.get(3)), (high, 8, 0));
        let tx = conn.transaction().expect("tx");
        JobNonces::delete(&tx, &[1]).expect("delete");
        tx.commit().expect("commit");
        let mut n = JobNonces::restore(&conn).expect("restore");
        assert_eq!(n.get(1), 0);
        n.purged(&[2]);
        assert_eq!(n.get(2), 0);
    }
}
