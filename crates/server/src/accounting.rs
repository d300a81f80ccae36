//! Accounting: how much of the cluster each owner's running work held, by UTC day (Slurm's
//! `sreport cluster AccountUtilizationByUser`, kept by the server itself), read with
//! `hetsched usage`.
//!
//! The state samples what each owner holds in the scheduler's view — a user's group usage (its
//! batch tasks, workflow instances, divisible chunks and stream-topology workers), the admin's
//! the rest of what the live nodes hold — at most once per [`SAMPLE_EVERY`] as heartbeats
//! come, and credits it for the time since the previous sample, split at UTC midnights: core-,
//! GPU- and memory-seconds. The live nodes' capacity is credited the same way under the
//! owner [`CAPACITY`], so the accounts say how much of the cluster was used. What accrued is added to the store's `usage_ledger` rows with the
//! state's commit every [`STORED_EVERY`] (and when the server stops), so a crash loses at most
//! that much; the ledger is never purged with the jobs, so the accounts outlive retention.
//! Time the server was down is not counted (nothing samples it), though agents' tasks ran on.

use crate::store::StoreError;
use hetsched_core::Resources;
use rusqlite::{Connection, params};
use std::collections::BTreeMap;
use std::time::Duration;

/// Least time between two samples.
pub const SAMPLE_EVERY: Duration = Duration::from_secs(1);

/// How often what accrued is written to the store, with each owner's fair-share usage
/// (`[fair_share]`): a crash loses at most this much of either.
pub const STORED_EVERY: Duration = Duration::from_secs(60);

/// The longest interval one sample credits: a longer gap (the clock jumped, or no heartbeat
/// came) is not taken for work held all along.
const LONGEST_GAP: Duration = Duration::from_secs(600);

/// The owner under which the live nodes' capacity is credited: no user's name (those start
/// with a letter) nor the admin's.
pub const CAPACITY: &str = "";

/// The most days one read of the accounts covers (`hetsched usage`): ten years.
pub const MAX_DAYS: u32 = 3_660;

/// Nanoseconds in a day.
const DAY_NS: u64 = 86_400 * 1_000_000_000;

/// The store's table (created with the rest of the schema by [`crate::store::Store::open`]).
pub const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS usage_ledger(
    owner TEXT NOT NULL, day INTEGER NOT NULL, core_seconds REAL NOT NULL,
    gpu_seconds REAL NOT NULL, memory_byte_seconds REAL NOT NULL,
    PRIMARY KEY(owner, day));
";

/// What one owner's work held over some time.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Held {
    /// Cores × seconds.
    pub core_seconds: f64,
    /// Accelerator devices × seconds.
    pub gpu_seconds: f64,
    /// Bytes of memory × seconds.
    pub memory_byte_seconds: f64,
}

impl Held {
    fn add(&mut self, o: Held) {
        self.core_seconds += o.core_seconds;
        self.gpu_seconds += o.gpu_seconds;
        self.memory_byte_seconds += o.memory_byte_seconds;
    }
}

/// One row of the accounts: an owner's usage on a day (days since the Unix epoch, UTC).
#[derive(Clone, Debug, PartialEq)]
pub struct UsageRow {
    /// A user's name, [`crate::users::ADMIN`], or [`CAPACITY`] for what the live nodes offered.
    pub owner: String,
    /// Days since 1970-01-01 (UTC).
    pub day: u32,
    /// What its work held that day.
    pub held: Held,
}

/// What accrued since the last store, and when the last sample was taken.
#[derive(Debug, Default)]
pub struct Ledger {
    /// The last sample's time (ns since the Unix epoch); `None` before the first.
    last_ns: Option<u64>,
    /// Accrued and not yet written, by (owner, day).
    pending: BTreeMap<(String, u32), Held>,
    /// Moved from `pending` for the current transaction ([`Ledger::stage`]).
    staged: BTreeMap<(String, u32), Held>,
}

impl Ledger {
    /// Whether a sample is due at `now_ns`.
    pub fn due(&self, now_ns: u64) -> bool {
        self.last_ns
            .is_none_or(|t| now_ns.saturating_sub(t) >= SAMPLE_EVERY.as_nanos() as u64)
    }

    /// Credits each of `holding` (an owner and what its work holds now) for the time since the
    /// last sample, split at UTC midnights. The first sample only starts the clock.
    pub fn sample<'a>(&mut self, now_ns: u64, holding: impl Iterator<Item = (&'a str, Resources)>) {
        let Some(last) = self.last_ns.replace(now_ns) else {
            return;
        };
        if now_ns <= last || now_ns - last > LONGEST_GAP.as_nanos() as u64 {
            return;
        }
        let holding: Vec<(&str, Resources)> = holding
            .filter(|(_, r)| *r != Resources::default())
            .collect();
        if holding.is_empty() {
            return;
        }
        let mut from = last;
        while from < now_ns {
            let day = from / DAY_NS;
            let to = now_ns.min((day + 1) * DAY_NS);
            let seconds = (to - from) as f64 / 1e9;
            for (owner, r) in &holding {
                self.pending
                    .entry(((*owner).to_string(), day as u32))
                    .or_default()
                    .add(Held {
                        core_seconds: f64::from(r.cores) * seconds,
                        gpu_seconds: f64::from(r.gpus) * seconds,
                        memory_byte_seconds: r.memory_bytes as f64 * seconds,
                    });
            }
            from = to;
        }
    }

    /// Moves what accrued into the next commit's writes ([`Ledger::persist`]).
    pub fn stage(&mut self) {
        for (k, h) in std::mem::take(&mut self.pending) {
            self.staged.entry(k).or_default().add(h);
        }
    }

    /// Whether the next commit has rows to write.
    pub fn has_changes(&self) -> bool {
        !self.staged.is_empty()
    }

    /// Adds the staged amounts to the store's rows, inside the state's transaction.
    pub fn persist(&self, tx: &rusqlite::Transaction) -> Result<(), StoreError> {
        if self.staged.is_empty() {
            return Ok(());
        }
        let mut put = tx.prepare_cached(
            "INSERT INTO usage_ledger(owner, day, core_seconds, gpu_seconds, memory_byte_seconds)
             VALUES (?1, ?2, ?3, ?4, ?5)
             ON CONFLICT(owner, day) DO UPDATE SET core_seconds = core_seconds + ?3,
                 gpu_seconds = gpu_seconds + ?4, memory_byte_seconds = memory_byte_seconds + ?5",
        )?;
        for ((owner, day), h) in &self.staged {
            put.execute(params![
                owner,
                day,
                h.core_seconds,
                h.gpu_seconds,
                h.memory_byte_seconds
            ])?;
        }
        Ok(())
    }

    /// The staged rows were written.
    pub fn committed(&mut self) {
        self.staged.clear();
    }

    /// After a rollback (`self` new, `old` the memory before it): what `old` accrued and had
    /// staged was not written, so it accrues here, and the clock goes on from its last sample.
    pub fn carry_over(&mut self, old: &Ledger) {
        self.last_ns = old.last_ns;
        for (k, h) in old.staged.iter().chain(&old.pending) {
            self.pending.entry(k.clone()).or_default().add(*h);
        }
    }

    /// The accounts from day `since` to day `until` (both included), by day and owner: the
    /// store's rows and what accrued since they were written. `owner`: only that owner's (and
    /// the capacity's).
    pub fn report(
        &self,
        conn: &Connection,
        since: u32,
        until: u32,
        owner: Option<&str>,
    ) -> Result<Vec<UsageRow>, StoreError> {
        let mut rows: BTreeMap<(String, u32), Held> = BTreeMap::new();
        let mut stmt = conn.prepare_cached(
            "SELECT owner, day, core_seconds, gpu_seconds, memory_byte_seconds FROM usage_ledger
             WHERE day >= ?1 AND day <= ?2 AND (?3 IS NULL OR owner = ?3 OR owner = '')",
        )?;
        let stored = stmt.query_map(params![since, until, owner], |r| {
            Ok((
                (r.get::<_, String>(0)?, r.get::<_, u32>(1)?),
                Held {
                    core_seconds: r.get(2)?,
                    gpu_seconds: r.get(3)?,
                    memory_byte_seconds: r.get(4)?,
                },
            ))
        })?;
        for row in stored {
            let (k, h) = row?;
            rows.entry(k).or_default().add(h);
        }
        for ((o, day), h) in self.staged.iter().chain(&self.pending) {
            if (since..=until).contains(day) && owner.is_none_or(|w| w == o || o == CAPACITY) {
                rows.entry((o.clone(), *day)).or_default().add(*h);
            }
        }
        let mut rows: Vec<UsageRow> = rows
            .into_iter()
            .map(|((owner, day), held)| UsageRow { owner, day, held })
            .collect();
        rows.sort_by(|a, b| (a.day, &a.owner).cmp(&(b.day, &b.owner)));
        Ok(rows)
    }
}

/// The day (since the Unix epoch, UTC) of `ns` nanoseconds since it.
pub fn day_of(ns: u64) -> u32 {
    (ns / DAY_NS).min(u64::from(u32::MAX)) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cores(n: u32) -> Resources {
        Resources::new(n, 0, 0)
    }

    #[test]
    fn a_sample_credits_the_time_since_the_last_one_split_at_midnight() {
        let mut l = Ledger::default();
        let before_midnight = 3 * DAY_NS - 2_000_000_000;
        l.sample(before_midnight, [("alice", cores(4))].into_iter());
        assert!(l.pending.is_empty(), "the first sample starts the clock");
        l.sample(
            before_midnight + 5_000_000_000,
            [("alice", cores(4))].into_iter(),
        );
        assert_eq!(l.pending[&("alice".to_string(), 2)].core_seconds, 8.0);
        assert_eq!(l.pending[&("alice".to_string(), 3)].core_seconds, 12.0);
    }

    #[test]
    fn a_gap_longer_than_ten_minutes_credits_nothing() {
        let mut l = Ledger::default();
        l.sample(DAY_NS, [("bob", cores(1))].into_iter());
        l.sample(DAY_NS + 601_000_000_000, [("bob", cores(1))].into_iter());
        assert!(l.pending.is_empty());
        l.sample(DAY_NS + 602_000_000_000, [("bob", cores(1))].into_iter());
        assert_eq!(l.pending[&("bob".to_string(), 1)].core_seconds, 1.0);
    }

    #[test]
    fn staged_rows_a_rollback_did_not_write_accrue_again() {
        let mut old = Ledger::default();
        old.sample(DAY_NS, [("bob", cores(2))].into_iter());
        old.sample(DAY_NS + 1_000_000_000, [("bob", cores(2))].into_iter());
        old.stage();
        old.sample(DAY_NS + 2_000_000_000, [("bob", cores(2))].into_iter());
        let mut fresh = Ledger::default();
        fresh.carry_over(&old);
        assert_eq!(fresh.pending[&("bob".to_string(), 1)].core_seconds, 4.0);
        assert_eq!(fresh.last_ns, Some(DAY_NS + 2_000_000_000));
    }
}
