//! One job-id sequence across job kinds: the second job submitted is job 2 whatever its kind,
//! and `hetsched job N` / `hetsched cancel N` find job N's kind in a map.
//!
//! Task ids and task-spec keys still carry their kind in their high byte ([`Kind::id`]): they
//! route results and heartbeats, and users rarely type them. A *job* id is what users type, so it
//! is small: the state hands out `next` (one more than the highest id of any kind) and hands the
//! kind the id with the submission; the kind stores its job under that id. The map is not a
//! table of its own: every kind already stores its jobs under their ids, so after a restart the
//! map is rebuilt from the kinds ([`crate::jobs::JobKind::job_ids`]). Batch job rows are never
//! deleted (a purge leaves a tombstone), so an id is never handed out twice.
//!
//! Stores from before the shared sequence: batch job ids were already 1, 2, 3 … and stay as they
//! are; a divisible job kept an id with its kind in the high byte (`72057594037927937`), which
//! goes on naming it (new jobs continue from the highest small id). Workflows were numbered
//! 1, 2, 3 … apart from batch jobs (with the kind in the high byte), so their numbers collide
//! with batch ids: such a store is refused with a message saying what to do. A store that has
//! been opened once under the shared sequence says so in its `meta` table.

use crate::jobs::{Jobs, KIND_SHIFT, Kind};
use crate::state::StateError;
use crate::store::Store;
use std::collections::BTreeMap;

/// The `meta` key that marks a store whose job ids come from the one sequence.
const SHARED_IDS: &str = "shared_job_ids";

/// Highest id a job may get: workflows put their job id into the task ids of their instances
/// (`id << 32 | instance`) below the kind byte.
pub const MAX_JOB_ID: u64 = (1 << (KIND_SHIFT - 32)) - 1;

/// Which kind owns each job id, and the next id.
#[derive(Debug, Default)]
pub struct JobIds {
    kinds: BTreeMap<u64, Kind>,
    next: u64,
}

impl JobIds {
    /// The map of every job the kinds hold.
    pub fn of(jobs: &Jobs) -> Self {
        let mut ids = JobIds {
            kinds: BTreeMap::new(),
            next: 1,
        };
        for kind in jobs.all() {
            for id in kind.job_ids() {
                ids.add(id, kind.kind());
            }
        }
        ids
    }

    /// Job `id` belongs to `kind`.
    pub fn add(&mut self, id: u64, kind: Kind) {
        self.kinds.insert(id, kind);
        // Ids of old divisible jobs (kind in the high byte) do not move the sequence.
        if id <= MAX_JOB_ID {
            self.next = self.next.max(id + 1);
        }
    }

    /// The id the next job gets.
    pub fn next(&self) -> Result<u64, StateError> {
        if self.next > MAX_JOB_ID {
            return Err(StateError::Invalid(format!(
                "this server has handed out {MAX_JOB_ID} job ids, the most it can: start a new \
                 data directory"
            )));
        }
        Ok(self.next)
    }

    /// The kind of job `id`.
    pub fn kind(&self, id: u64) -> Option<Kind> {
        self.kinds.get(&id).copied()
    }

    /// Job ids from `from` on, in order, with their kinds.
    pub fn from(&self, from: u64) -> impl Iterator<Item = (u64, Kind)> + '_ {
        self.kinds.range(from..).map(|(&id, &k)| (id, k))
    }
}

/// Checks that `store` can be used under the shared sequence, and marks it so: refuses a store
/// whose workflows were numbered apart from batch jobs (see the module documentation).
pub fn check_store(store: &Store) -> Result<(), StateError> {
    let conn = store.conn();
    let marked: Option<i64> = conn
        .query_row(
            "SELECT value FROM meta WHERE key = ?1",
            rusqlite::params![SHARED_IDS],
            |r| r.get(0),
        )
        .ok();
    if marked.is_some() {
        return Ok(());
    }
    let has_workflows: bool = conn
        .query_row(
            "SELECT COUNT(*) > 0 FROM sqlite_master WHERE type = 'table' AND name = 'wf_jobs'",
            [],
            |r| r.get(0),
        )
        .map_err(crate::store::StoreError::from)?;
    let workflows: i64 = if has_workflows {
        conn.query_row("SELECT COUNT(*) FROM wf_jobs", [], |r| r.get(0))
            .map_err(crate::store::StoreError::from)?
    } else {
        0
    };
    if workflows > 0 {
        return Err(StateError::Invalid(format!(
            "this data directory's store holds {} numbered apart from \
             batch jobs (before job ids were shared across kinds), which this server cannot \
             tell apart from batch jobs: finish them with the previous hetsched version, or \
             start this one with a new --data-dir",
            hetsched_core::text::count(workflows as u64, "workflow job")
        )));
    }
    conn.execute(
        "INSERT INTO meta(key, value) VALUES (?1, 1) ON CONFLICT(key) DO NOTHING",
        rusqlite::params![SHARED_IDS],
    )
    .map_err(crate::store::StoreError::from)?;
    Ok(())
}
