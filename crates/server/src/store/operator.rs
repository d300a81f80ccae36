//! Operator decisions kept across a server restart: drained nodes (`hetsched node drain`), the
//! failing-node back-off's active exclusions ([`crate::backoff`]) and the nodes whose agents left
//! on purpose, and the paused automatic allocation queues. They live in the store's `meta` table,
//! one row each — `drain/NODE` = 1, `backoff/APP/NODE` = the time the node is tried again for the
//! application (Unix nanoseconds, so a restart keeps the remaining time), `stop/NODE` = 1 (2:
//! `--drain`) while an operator's `hetsched node stop` waits for the agent to leave, `left/NODE` = why
//! ([`Store::put_left`]), `heard/NODE` = when the node was last heard from (Unix ms; written when it
//! is declared dead or leaves, and for every live node when the server stops: [`Store::put_heard`]) and `allocation-paused/QUEUE` = 1 — so the
//! store's schema does not change. A resumed node's row, an expired back-off's row and the row of
//! a node registered again are deleted. Why and since when a node is drained is in the table
//! `node_drains` (a store of an earlier version has a drain without one: no reason, time
//! unknown). Signals for running tasks (`hetsched signal`) wait for their agents in the table
//! `task_signals` ([`crate::state::signals`]).

use super::{Store, StoreError};
use rusqlite::params;

const DRAIN: &str = "drain/";
const LEFT: &str = "left/";
const PAUSED_QUEUE: &str = "allocation-paused/";
const BACKOFF: &str = "backoff/";
const STOP: &str = "stop/";
const HEARD: &str = "heard/";

/// Why and since when an operator drained a node (`hetsched node drain --reason`; Slurm's
/// `Reason=`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DrainNote {
    /// The operator's words (empty: none given).
    pub reason: String,
    /// When it was drained, Unix ms (0: unknown, a drain stored by an earlier version).
    pub since_ms: u64,
}

/// A signal for a running attempt waiting for its agent (`hetsched signal`), as stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredSignal {
    /// Its seq (unique across restarts).
    pub seq: u64,
    /// The node whose agent runs the attempt.
    pub node: u32,
    /// The task.
    pub task: u64,
    /// The attempt.
    pub attempt: u32,
    /// The signal's name without `SIG`.
    pub signal: String,
    /// Non-zero: `task` is a chunk of this divisible job.
    pub chunk_of: u64,
}

impl Store {
    /// Records that node `node` is drained, why and since when (`Some`), or no longer is, in
    /// one transaction.
    pub fn put_drain(&mut self, node: u32, drain: Option<&DrainNote>) -> Result<(), StoreError> {
        self.check_full()?;
        let tx = self.conn.unchecked_transaction()?;
        let key = format!("{DRAIN}{node}");
        match drain {
            Some(note) => {
                tx.execute(
                    "INSERT INTO meta(key, value) VALUES (?1, 1)
                     ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                    params![key],
                )?;
                tx.execute(
                    "INSERT OR REPLACE INTO node_drains(node, since_ms, reason) VALUES (?1, ?2, ?3)",
                    params![
                        node,
                        i64::try_from(note.since_ms).unwrap_or(i64::MAX),
                        note.reason
                    ],
                )?;
            }
            None => {
                tx.execute("DELETE FROM meta WHERE key = ?1", params![key])?;
                tx.execute("DELETE FROM node_drains WHERE node = ?1", params![node])?;
            }
        }
        tx.commit()?;
        self.durable.wrote();
        Ok(())
    }

    /// Sets the `meta` row `key` to `value`, or deletes it (`None`).
    fn put_meta(&mut self, key: &str, value: Option<i64>) -> Result<(), StoreError> {
        self.check_full()?;
        match value {
            Some(v) => self.conn.execute(
                "INSERT INTO meta(key, value) VALUES (?1, ?2)
                 ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                params![key, v],
            )?,
            None => self
                .conn
                .execute("DELETE FROM meta WHERE key = ?1", params![key])?,
        };
        self.durable.wrote();
        Ok(())
    }

    /// Records that node `node`'s agent left on purpose, and why (`Some(code)`: 1 a signal, 2 its
    /// time limit, 3 its idle timeout), or that it is back (`None`).
    pub fn put_left(&mut self, node: u32, code: Option<i64>) -> Result<(), StoreError> {
        self.put_meta(&format!("{LEFT}{node}"), code)
    }

    /// Records when node `node` was last heard from (its last registration, heartbeat or call),
    /// Unix ms: written when it is declared dead or leaves and when the server stops, not at each
    /// heartbeat (the live nodes' are also written every [`crate::accounting::STORED_EVERY`]:
    /// [`Store::put_heard_in`]), so that `hetsched nodes` says when a dead node was last heard across a restart.
    pub fn put_heard(&mut self, node: u32, ms: u64) -> Result<(), StoreError> {
        self.put_meta(
            &format!("{HEARD}{node}"),
            Some(i64::try_from(ms).unwrap_or(i64::MAX)),
        )
    }

    /// [`Store::put_heard`] for many nodes inside the state's transaction `tx`: the live nodes'
    /// last beats, written periodically so that a crash keeps them too.
    pub fn put_heard_in(
        tx: &rusqlite::Transaction,
        heard: &[(u32, u64)],
    ) -> Result<(), StoreError> {
        if heard.is_empty() {
            return Ok(());
        }
        let mut put = tx.prepare_cached(
            "INSERT INTO meta(key, value) VALUES (?1, ?2)
             ON CONFLICT(key) DO UPDATE SET value = excluded.value",
        )?;
        for (node, ms) in heard {
            put.execute(params![
                format!("{HEARD}{node}"),
                i64::try_from(*ms).unwrap_or(i64::MAX)
            ])?;
        }
        Ok(())
    }

    /// When each node was last heard from, as [`Store::put_heard`] stored it: (node, Unix ms).
    pub fn heard_nodes(&self) -> Result<Vec<(u32, u64)>, StoreError> {
        let mut out = Vec::new();
        for (rest, value) in self.meta_with(HEARD)? {
            out.push((
                rest.parse()
                    .map_err(|_| StoreError::Corrupt(format!("meta key {HEARD}{rest}")))?,
                u64::try_from(value).unwrap_or(0),
            ));
        }
        Ok(out)
    }

    /// The nodes whose agents left: (node, code as [`Store::put_left`] takes it).
    pub fn left_nodes(&self) -> Result<Vec<(u32, i64)>, StoreError> {
        let mut out = Vec::new();
        for (rest, value) in self.meta_with(LEFT)? {
            out.push((
                rest.parse()
                    .map_err(|_| StoreError::Corrupt(format!("meta key {LEFT}{rest}")))?,
                value,
            ));
        }
        Ok(out)
    }

    /// Records that automatic allocation queue `queue` is paused (`hetsched allocations
    /// --pause`), or no longer is.
    pub fn put_allocation_pause(&mut self, queue: &str, paused: bool) -> Result<(), StoreError> {
        self.put_meta(&format!("{PAUSED_QUEUE}{queue}"), paused.then_some(1))
    }

    /// The paused automatic allocation queues' names.
    pub fn paused_allocation_queues(&self) -> Result<Vec<String>, StoreError> {
        Ok(self
            .meta_with(PAUSED_QUEUE)?
            .into_iter()
            .map(|(rest, _)| rest)
            .collect())
    }

    /// Records that an operator asked node `node`'s agent to stop (`Some(drain)`: `drain` lets
    /// its running tasks end first), or that the request is over (the agent left, or a new one
    /// registered).
    pub fn put_stop(&mut self, node: u32, stop: Option<bool>) -> Result<(), StoreError> {
        self.put_meta(
            &format!("{STOP}{node}"),
            stop.map(|drain| 1 + i64::from(drain)),
        )
    }

    /// The nodes whose agents were asked to stop: (node, drain).
    pub fn stopping_nodes(&self) -> Result<Vec<(u32, bool)>, StoreError> {
        let mut out = Vec::new();
        for (rest, value) in self.meta_with(STOP)? {
            let node = rest
                .parse()
                .map_err(|_| StoreError::Corrupt(format!("meta key {STOP}{rest}")))?;
            out.push((node, value == 2));
        }
        Ok(out)
    }

    /// Records signals for running attempts (`hetsched signal`) until their agents handle them
    /// ([`crate::state::signals`]), in one transaction.
    pub fn put_task_signals(&mut self, rows: &[StoredSignal]) -> Result<(), StoreError> {
        self.check_full()?;
        let tx = self.conn.unchecked_transaction()?;
        for r in rows {
            tx.execute(
                "INSERT INTO task_signals(seq, node, task, attempt, signal, chunk_of) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                params![
                    r.seq as i64,
                    r.node,
                    r.task as i64,
                    r.attempt,
                    r.signal,
                    r.chunk_of as i64
                ],
            )?;
        }
        tx.commit()?;
        Ok(())
    }

    /// Forgets the signals with these seqs (handled, or their tasks left their nodes).
    pub fn drop_task_signals(&mut self, seqs: &[u64]) -> Result<(), StoreError> {
        self.check_full()?;
        let tx = self.conn.unchecked_transaction()?;
        for &seq in seqs {
            tx.execute(
                "DELETE FROM task_signals WHERE seq = ?1",
                params![seq as i64],
            )?;
        }
        tx.commit()?;
        Ok(())
    }

    /// The signals waiting for their agents, in seq order.
    pub fn task_signals(&self) -> Result<Vec<StoredSignal>, StoreError> {
        let mut stmt = self.conn.prepare(
            "SELECT seq, node, task, attempt, signal, chunk_of FROM task_signals ORDER BY seq",
        )?;
        let rows = stmt.query_map([], |r| {
            Ok(StoredSignal {
                seq: r.get::<_, i64>(0)? as u64,
                node: r.get(1)?,
                task: r.get::<_, i64>(2)? as u64,
                attempt: r.get(3)?,
                signal: r.get(4)?,
                chunk_of: r.get::<_, i64>(5)? as u64,
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// The drained nodes' ids, each with why and since when.
    pub fn drained_nodes(&self) -> Result<Vec<(u32, DrainNote)>, StoreError> {
        let mut notes: std::collections::HashMap<u32, DrainNote> = Default::default();
        let mut stmt = self
            .conn
            .prepare("SELECT node, since_ms, reason FROM node_drains")?;
        let rows = stmt.query_map([], |r| {
            Ok((
                r.get::<_, u32>(0)?,
                DrainNote {
                    since_ms: u64::try_from(r.get::<_, i64>(1)?).unwrap_or(0),
                    reason: r.get(2)?,
                },
            ))
        })?;
        for r in rows {
            let (node, note) = r?;
            notes.insert(node, note);
        }
        let mut out = Vec::new();
        for (rest, _) in self.meta_with(DRAIN)? {
            let node: u32 = rest
                .parse()
                .map_err(|_| StoreError::Corrupt(format!("meta key {DRAIN}{rest}")))?;
            out.push((node, notes.remove(&node).unwrap_or_default()));
        }
        Ok(out)
    }

    /// Records the back-off of application `app` on node `node` until `until_ns` (Unix ns), or
    /// its end (None).
    pub fn put_backoff(
        &mut self,
        app: u32,
        node: u32,
        until_ns: Option<u64>,
    ) -> Result<(), StoreError> {
        self.put_meta(
            &format!("{BACKOFF}{app}/{node}"),
            until_ns.map(|t| i64::try_from(t).unwrap_or(i64::MAX)),
        )
    }

    /// The recorded back-offs: (application, node, until in Unix ns).
    pub fn backoffs(&self) -> Result<Vec<(u32, u32, u64)>, StoreError> {
        let mut out = Vec::new();
        for (rest, value) in self.meta_with(BACKOFF)? {
            let bad = || StoreError::Corrupt(format!("meta key {BACKOFF}{rest}"));
            let (app, node) = rest.split_once('/').ok_or_else(bad)?;
            out.push((
                app.parse().map_err(|_| bad())?,
                node.parse().map_err(|_| bad())?,
                u64::try_from(value).unwrap_or(0),
            ));
        }
        Ok(out)
    }

    /// The nodes of each running multi-node task, by task id, its first node first (see
    /// [`crate::store::write_other_nodes`]).
    pub fn multi_node_tasks(&self) -> Result<std::collections::HashMap<u64, Vec<u32>>, StoreError> {
        super::multi_node_rows(&self.conn, 0..u64::MAX, true)
    }

    /// The multi-node tasks with ids in `range` and their nodes in their latest attempt, the
    /// first (`node`) first.
    pub fn multi_node_tasks_in(
        &self,
        range: std::ops::Range<u64>,
    ) -> Result<std::collections::HashMap<u64, Vec<u32>>, StoreError> {
        super::multi_node_rows(&self.conn, range, false)
    }

    /// `meta` rows whose key starts with `prefix`: (the rest of the key, value).
    fn meta_with(&self, prefix: &str) -> Result<Vec<(String, i64)>, StoreError> {
        let mut stmt = self
            .conn
            .prepare("SELECT key, value FROM meta WHERE substr(key, 1, ?1) = ?2 ORDER BY key")?;
        let rows = stmt.query_map(params![prefix.len() as i64, prefix], |r| {
            Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?))
        })?;
        let mut out = Vec::new();
        for r in rows {
            let (key, value) = r?;
            out.push((key[prefix.len()..].to_string(), value));
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drains_and_back_offs_are_kept_and_removed() {
        let mut s = Store::in_memory().expect("store");
        let note = |reason: &str| DrainNote {
            reason: reason.into(),
            since_ms: 1_700_000_000_000,
        };
        s.put_drain(3, Some(&note("disk"))).expect("drain");
        s.put_drain(1, Some(&note("bad fan"))).expect("drain");
        s.put_drain(3, None).expect("resume");
        assert_eq!(s.drained_nodes().expect("read"), vec![(1, note("bad fan"))]);
        // A drain an earlier version stored: no reason, time unknown.
        s.put_meta("drain/5", Some(1)).expect("an old drain");
        assert_eq!(
            s.drained_nodes().expect("read"),
            vec![(1, note("bad fan")), (5, DrainNote::default())]
        );
        s.put_backoff(7, 2, Some(5_000)).expect("back off");
        s.put_backoff(8, 2, Some(6_000)).expect("back off");
        s.put_backoff(7, 2, None).expect("over");
        assert_eq!(s.backoffs().expect("read"), vec![(8, 2, 6_000)]);
    }
}
