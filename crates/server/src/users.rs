//! Users: who a client call comes from, and which jobs are whose.
//!
//! The server knows two kinds of client:
//! - **the admin**, who holds `DATA_DIR/token` (created at the first start): every job, every
//!   node, the allocation queues, the users themselves;
//! - **users**, each added by the admin (`hetsched user add NAME`) with a token of its own. A
//!   user submits jobs, which are then its own; it sees every job and node (as Slurm's `squeue`
//!   and `sinfo` show them: no commands, environments or outputs are in those listings), but it
//!   cancels, signals, holds, releases, updates, resubmits, purges and reads the logs or output
//!   of its own jobs only, and manages no node, queue or user.
//!
//! A user's token is shown once, when it is made; the store keeps only its SHA-256, so a copy of
//! the store does not hold usable tokens. The token check ([`crate::service::CheckToken`]) looks
//! a presented token up by its hash in the [`TokenIndex`] it shares with the state, so a user
//! added or removed is admitted or refused from the next call on, without a restart.
//!
//! Topologies are the same: a user kills and rebalances its own, and cannot submit over another
//! user's topology of the same name. Their owners are kept by name in `topology_owners`, written
//! in the same transaction as the topology's record.
//!
//! A job's owner is stored in `job_owners` only when it is not the admin (a server with no users
//! writes nothing more than before, and jobs from before users existed are the admin's). The
//! row is written in its own transaction *before* the job's rows, under the id the job will get:
//! a crash or a refused submission between the two leaves a row for an id not handed out, which
//! memory keeps (restored with the others) and the next submission under that id overwrites, or
//! deletes for an admin's job. An admin's job under an id with no row writes nothing.

use crate::store::StoreError;
use hetsched_core::Resources;
use rusqlite::{Connection, params};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, RwLock};

/// The admin's name: the owner of jobs submitted with `DATA_DIR/token`.
pub const ADMIN: &str = "admin";

/// Most users a server holds.
pub const MAX_USERS: usize = 10_000;

/// Longest user name.
pub const MAX_NAME: usize = 32;

/// The name the read-only token's calls go by ([`Caller::read_only`]); no user's (those start
/// with a letter).
pub const READ_ONLY: &str = "(read-only)";

/// Who a client call comes from, as its token says (put in the call's extensions by the token
/// check).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Caller {
    /// The user's name ([`ADMIN`] for the admin).
    pub name: Arc<str>,
    /// The call carries the admin token.
    pub admin: bool,
}

impl Caller {
    /// The admin.
    pub fn admin() -> Self {
        Caller {
            name: ADMIN.into(),
            admin: true,
        }
    }

    /// The dashboard's read-only token (`DATA_DIR/read-token`, the one a Prometheus scrape
    /// holds): it sees what the admin sees, but reads no task's output ([`Caller::reads_output`]).
    pub fn read_only() -> Self {
        Caller {
            name: READ_ONLY.into(),
            admin: true,
        }
    }

    /// Whether the caller may read task output (logs): any but the read-only token, which
    /// monitoring holds; a user its own jobs' only (the log call checks the owner).
    pub fn reads_output(&self) -> bool {
        &*self.name != READ_ONLY
    }

    /// User `name` (not the admin).
    pub fn user(name: &str) -> Self {
        Caller {
            name: name.into(),
            admin: false,
        }
    }

    /// A span naming the caller, entered while its call's event runs: what the state logs then
    /// reads `client{user=alice}: … job cancelled job=3`, so the server's log says who changed
    /// what.
    pub fn span(&self) -> tracing::span::EnteredSpan {
        tracing::info_span!("client", user = %self.name).entered()
    }
}

/// The SHA-256 of each user's token → its name. Shared by the state, which changes it, and the
/// token check, which reads it on every client call.
pub type TokenIndex = Arc<RwLock<HashMap<[u8; 32], Arc<str>>>>;

/// The user whose token an `authorization` value (`Bearer …`) carries, looked up by the token's
/// hash in `index` (the time taken depends on the hash, which says nothing of the token).
pub fn user_of_bearer(index: &TokenIndex, bearer: &[u8]) -> Option<Caller> {
    let token = std::str::from_utf8(bearer).ok()?.strip_prefix("Bearer ")?;
    let users = index.read().ok()?;
    users.get(&token_hash(token)).map(|name| Caller::user(name))
}

/// The SHA-256 of `token`.
pub fn token_hash(token: &str) -> [u8; 32] {
    let digest = ring::digest::digest(&ring::digest::SHA256, token.as_bytes());
    let mut out = [0u8; 32];
    out.copy_from_slice(digest.as_ref());
    out
}

/// A new token: 256 random bits in hex, as the data directory's tokens.
pub fn new_token() -> String {
    let bytes: [u8; 32] = rand::random();
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Refuses a user name that is not 1 to [`MAX_NAME`] characters of lower-case letters, digits,
/// `.`, `_` and `-` starting with a letter, or that is [`ADMIN`].
pub fn check_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > MAX_NAME {
        return Err(format!(
            "user name `{}`: 1 to {MAX_NAME} characters",
            hetsched_core::text::clip(name)
        ));
    }
    let mut chars = name.chars();
    let first_ok = chars.next().is_some_and(|c| c.is_ascii_lowercase());
    let rest_ok =
        chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '.' | '_' | '-'));
    if !first_ok || !rest_ok {
        return Err(format!(
            "user name `{}`: lower-case letters, digits, `.`, `_` and `-`, starting with a letter",
            hetsched_core::text::clip(name)
        ));
    }
    if name == ADMIN {
        return Err(format!(
            "user name `{ADMIN}` is the admin's (the token in the server's DATA_DIR/token)"
        ));
    }
    Ok(())
}

/// The users and the owners of jobs that are not the admin's.
#[derive(Debug, Default)]
pub struct Users {
    index: TokenIndex,
    /// Each user's name and when its token was made (ms since the Unix epoch).
    users: BTreeMap<Arc<str>, u64>,
    /// The most each user's running batch tasks may hold at once: cores, memory, GPUs, 0 in a
    /// dimension for no cap on it (absent: no cap at all).
    caps: HashMap<Arc<str>, Resources>,
    /// Each user's fair-share shares (absent: 1).
    shares: HashMap<Arc<str>, u32>,
    /// Each user's cap on the priority of its work (absent: none).
    max_priority: HashMap<Arc<str>, i32>,
    /// Each owner's group in the scheduler's view ([`hetsched_core::SchedulerView`]'s groups
    /// share a cap): dense numbers handed out as owners are met (memory only).
    groups: HashMap<Arc<str>, u32>,
    /// The owner of each job that is not the admin's.
    owners: HashMap<u64, Arc<str>>,
    /// The owner of each topology that is not the admin's, by name.
    topology_owners: HashMap<String, Arc<str>>,
    /// A topology submitted in this event and its owner: stored with the event's commit.
    staged: Option<(String, Arc<str>)>,
    /// Each owner's fair-share usage at a wall-clock time (ms since the Unix epoch), staged by
    /// [`Users::stage_fair_usage`]: stored with the event's commit.
    staged_usage: Option<StagedUsage>,
}

/// Owners' fair-share usage as of a time (ms since the Unix epoch), waiting for a commit.
#[derive(Debug)]
struct StagedUsage {
    at_ms: u64,
    rows: Vec<(Arc<str>, f64)>,
}

impl Users {
    /// The users and owners `conn` holds; `index` (the token check's) is refilled with their
    /// tokens' hashes.
    pub fn restore(conn: &Connection, index: TokenIndex) -> Result<Self, StoreError> {
        let mut users = BTreeMap::new();
        let mut hashes = HashMap::new();
        let mut caps = HashMap::new();
        let mut shares = HashMap::new();
        let mut max_priority = HashMap::new();
        let mut stmt = conn.prepare(
            "SELECT name, token_sha256, created_ms, max_cores, max_gpus, max_memory_bytes, shares,
             max_priority FROM users",
        )?;
        let rows = stmt.query_map([], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, Vec<u8>>(1)?,
                r.get::<_, i64>(2)?,
                [
                    r.get::<_, i64>(3)?,
                    r.get::<_, i64>(4)?,
                    r.get::<_, i64>(5)?,
                ],
                r.get::<_, i64>(6)?,
                r.get::<_, Option<i64>>(7)?,
            ))
        })?;
        let count = |v: i64| v.clamp(0, i64::from(u32::MAX)) as u32;
        for row in rows {
            let (name, hash, created, [cores, gpus, memory], share, priority) = row?;
            let name: Arc<str> = name.into();
            if let Some(p) = priority {
                let p = p.clamp(i64::from(i32::MIN), i64::from(i32::MAX)) as i32;
                max_priority.insert(name.clone(), p);
            }
            if share > 1 {
                shares.insert(name.clone(), count(share));
            }
            if let Ok(hash) = <[u8; 32]>::try_from(hash.as_slice()) {
                hashes.insert(hash, name.clone());
            }
            let cap = Resources::new(count(cores), memory.max(0) as u64, count(gpus));
            if cap != Resources::default() {
                caps.insert(name.clone(), cap);
            }
            users.insert(name, created.max(0) as u64);
        }
        let mut owners = HashMap::new();
        let mut stmt = conn.prepare("SELECT job, owner FROM job_owners")?;
        let rows = stmt.query_map([], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?)))?;
        for row in rows {
            let (job, owner) = row?;
            // One allocation per user, not per job.
            let owner = users
                .get_key_value(owner.as_str())
                .map(|(k, _)| k.clone())
                .unwrap_or_else(|| owner.into());
            owners.insert(job as u64, owner);
        }
        let mut topology_owners = HashMap::new();
        let mut stmt = conn.prepare("SELECT name, owner FROM topology_owners")?;
        let rows = stmt.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?)))?;
        for row in rows {
            let (name, owner) = row?;
            topology_owners.insert(name, Arc::from(owner));
        }
        if let Ok(mut i) = index.write() {
            *i = hashes;
        }
        Ok(Users {
            index,
            users,
            caps,
            shares,
            max_priority,
            groups: HashMap::new(),
            owners,
            topology_owners,
            staged: None,
            staged_usage: None,
        })
    }

    /// The index the token check reads.
    pub fn index(&self) -> TokenIndex {
        self.index.clone()
    }

    /// The owner of job `job` ([`ADMIN`] unless a user submitted it).
    pub fn owner(&self, job: u64) -> &str {
        self.owners.get(&job).map_or(ADMIN, |o| o)
    }

    /// The Unix account job `job`'s tasks run as on agents started with `run_as_owner`: its
    /// owner's name (a user's name is its account, as in Slurm); empty for the admin's job,
    /// which runs as the agent's own account.
    pub fn run_as(&self, job: u64) -> String {
        match self.owner(job) {
            ADMIN => String::new(),
            name => name.to_string(),
        }
    }

    /// The owner of topology `name` ([`ADMIN`] unless a user submitted it).
    pub fn topology_owner(&self, name: &str) -> &str {
        self.topology_owners.get(name).map_or(ADMIN, |o| o)
    }

    /// The account topology `name`'s workers run as on an agent with `run_as_owner`: its
    /// owner's name, empty for the admin's (as [`Users::run_as`] for jobs).
    pub fn topology_run_as(&self, name: &str) -> String {
        match self.topology_owner(name) {
            ADMIN => String::new(),
            owner => owner.to_string(),
        }
    }

    /// Topology `name` was submitted by `owner` in this event: stored by [`Users::persist`].
    pub fn stage_topology_owner(&mut self, name: &str, owner: &str) {
        self.staged = Some((name.to_string(), self.intern(owner)));
    }

    /// Whether the event staged a write.
    pub fn has_changes(&self) -> bool {
        self.staged.is_some() || self.staged_usage.is_some()
    }

    /// Stages each owner's fair-share usage (`None`: the admin) as of `at_ms` (ms since the Unix
    /// epoch), stored by [`Users::persist`].
    pub fn stage_fair_usage(&mut self, at_ms: u64, usage: Vec<(Option<&str>, f64)>) {
        let rows = usage
            .into_iter()
            .map(|(owner, u)| (self.intern(owner.unwrap_or(ADMIN)), u))
            .collect();
        self.staged_usage = Some(StagedUsage { at_ms, rows });
    }

    /// The fair-share usage `conn` holds: each owner's usage in share-seconds and when it was
    /// stored (ms since the Unix epoch).
    pub fn stored_fair_usage(conn: &Connection) -> Result<Vec<(String, f64, u64)>, StoreError> {
        let mut stmt = conn.prepare("SELECT owner, usage, at_ms FROM fair_usage")?;
        let rows = stmt.query_map([], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, f64>(1)?,
                r.get::<_, i64>(2)?.max(0) as u64,
            ))
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Every owner that has a group (a user that submitted, or whose cap was set) and its group.
    pub fn groups(&self) -> impl Iterator<Item = (&str, u32)> {
        self.groups.iter().map(|(n, &g)| (&**n, g))
    }

    /// Writes what the event staged inside the event's transaction.
    pub fn persist(&self, tx: &rusqlite::Transaction) -> Result<(), StoreError> {
        if let Some(StagedUsage { at_ms, rows }) = &self.staged_usage {
            let mut put = tx.prepare_cached(
                "INSERT INTO fair_usage(owner, usage, at_ms) VALUES (?1, ?2, ?3)
                 ON CONFLICT(owner) DO UPDATE SET usage = ?2, at_ms = ?3",
            )?;
            let at = i64::try_from(*at_ms).unwrap_or(i64::MAX);
            for (owner, usage) in rows {
                put.execute(params![&**owner, usage, at])?;
            }
        }
        if let Some((name, owner)) = &self.staged {
            if &**owner == ADMIN {
                Self::delete_topology_owner(tx, name)?;
            } else {
                tx.execute(
                    "INSERT INTO topology_owners(name, owner) VALUES (?1, ?2)
                     ON CONFLICT(name) DO UPDATE SET owner = ?2",
                    params![name, &**owner],
                )?;
            }
        }
        Ok(())
    }

    /// Memory after [`Users::persist`] committed.
    pub fn committed(&mut self) {
        self.staged_usage = None;
        if let Some((name, owner)) = self.staged.take() {
            if &*owner == ADMIN {
                self.topology_owners.remove(&name);
            } else {
                self.topology_owners.insert(name, owner);
            }
        }
    }

    /// The most user `name`'s running batch tasks may hold at once: cores, memory, GPUs (0 in
    /// a dimension: no cap on it).
    pub fn cap(&self, name: &str) -> Resources {
        self.caps.get(name).copied().unwrap_or_default()
    }

    /// Every user with a cap, and its cap.
    pub fn caps(&self) -> impl Iterator<Item = (&str, Resources)> {
        self.caps.iter().map(|(n, &c)| (&**n, c))
    }

    /// Stores user `name`'s cap (0 in a dimension: none on it) inside `tx`.
    pub fn write_cap(
        tx: &rusqlite::Transaction,
        name: &str,
        cap: &Resources,
    ) -> Result<(), StoreError> {
        tx.execute(
            "UPDATE users SET max_cores = ?2, max_gpus = ?3, max_memory_bytes = ?4
             WHERE name = ?1",
            params![
                name,
                i64::from(cap.cores),
                i64::from(cap.gpus),
                i64::try_from(cap.memory_bytes).unwrap_or(i64::MAX)
            ],
        )?;
        Ok(())
    }

    /// Memory after [`Users::write_cap`] committed.
    pub fn set_cap(&mut self, name: &str, cap: Resources) {
        let name = self.intern(name);
        if cap == Resources::default() {
            self.caps.remove(&name);
        } else {
            self.caps.insert(name, cap);
        }
    }

    /// User `name`'s fair-share shares (1 unless set).
    pub fn shares(&self, name: &str) -> u32 {
        self.shares.get(name).copied().unwrap_or(1)
    }

    /// Every user with more than one share, and its shares.
    pub fn all_shares(&self) -> impl Iterator<Item = (&str, u32)> {
        self.shares.iter().map(|(n, &s)| (&**n, s))
    }

    /// Stores user `name`'s shares inside `tx`.
    pub fn write_shares(
        tx: &rusqlite::Transaction,
        name: &str,
        shares: u32,
    ) -> Result<(), StoreError> {
        tx.execute(
            "UPDATE users SET shares = ?2 WHERE name = ?1",
            params![name, i64::from(shares)],
        )?;
        Ok(())
    }

    /// The highest priority user `name` may give its work (`hetsched user limit
    /// --max-priority`), if capped.
    pub fn max_priority(&self, name: &str) -> Option<i32> {
        self.max_priority.get(name).copied()
    }

    /// Stores user `name`'s priority cap inside `tx` (`None`: none).
    pub fn write_max_priority(
        tx: &rusqlite::Transaction,
        name: &str,
        max: Option<i32>,
    ) -> Result<(), StoreError> {
        tx.execute(
            "UPDATE users SET max_priority = ?2 WHERE name = ?1",
            params![name, max],
        )?;
        Ok(())
    }

    /// Memory after [`Users::write_max_priority`] committed.
    pub fn set_max_priority(&mut self, name: &str, max: Option<i32>) {
        let name = self.intern(name);
        match max {
            Some(p) => self.max_priority.insert(name, p),
            None => self.max_priority.remove(&name),
        };
    }

    /// Memory after [`Users::write_shares`] committed.
    pub fn set_shares(&mut self, name: &str, shares: u32) {
        let name = self.intern(name);
        if shares <= 1 {
            self.shares.remove(&name);
        } else {
            self.shares.insert(name, shares);
        }
    }

    /// Owner `name`'s group in the scheduler's view (handed out on first use).
    pub fn group_of(&mut self, name: &str) -> u32 {
        if let Some(&g) = self.groups.get(name) {
            return g;
        }
        let g = self.groups.len() as u32;
        let name = self.intern(name);
        self.groups.insert(name, g);
        g
    }

    /// The group work of job `job` is charged to in the scheduler's view (what counts against
    /// its owner's caps and as its fair-share usage): its owner's, or `None` for the admin's
    /// (the view's ungrouped rest).
    pub fn job_group(&mut self, job: u64) -> Option<u32> {
        let owner = self.owner(job).to_string();
        (owner != ADMIN).then(|| self.group_of(&owner))
    }

    /// The group topology `name`'s workers are charged to, as [`Users::job_group`].
    pub fn topology_group(&mut self, name: &str) -> Option<u32> {
        let owner = self.topology_owner(name).to_string();
        (owner != ADMIN).then(|| self.group_of(&owner))
    }

    /// Owner `name`'s group, if it has one yet.
    pub fn group(&self, name: &str) -> Option<u32> {
        self.groups.get(name).copied()
    }

    /// Whether user `name` exists.
    pub fn exists(&self, name: &str) -> bool {
        self.users.contains_key(name)
    }

    /// Whether `name` can own jobs: the admin, a user, or a removed user whose jobs the
    /// server still holds (a removal leaves them). A scan of the owners when `name` is no
    /// user: only a listing by owner asks, once.
    pub fn owns_or_may_own(&self, name: &str) -> bool {
        name == ADMIN || self.exists(name) || self.owners.values().any(|o| &**o == name)
    }

    /// How many users there are.
    pub fn len(&self) -> usize {
        self.users.len()
    }

    /// Whether there is no user (only the admin).
    pub fn is_empty(&self) -> bool {
        self.users.is_empty()
    }

    /// Every user with when its token was made.
    pub fn list(&self) -> impl Iterator<Item = (&str, u64)> {
        self.users.iter().map(|(n, &c)| (&**n, c))
    }

    /// The jobs each user owns.
    pub fn owned(&self) -> impl Iterator<Item = (u64, &str)> {
        self.owners.iter().map(|(&j, o)| (j, &**o))
    }

    /// Stores user `name` with a new token made at `now_ms` (replacing its old one), and admits
    /// the token from now on. Returns the token.
    pub fn put(
        &mut self,
        tx: &rusqlite::Transaction,
        name: &str,
        now_ms: u64,
    ) -> Result<String, StoreError> {
        let token = new_token();
        let hash = token_hash(&token);
        tx.execute(
            "INSERT INTO users(name, token_sha256, created_ms) VALUES (?1, ?2, ?3)
             ON CONFLICT(name) DO UPDATE SET token_sha256 = ?2, created_ms = ?3",
            params![name, hash.as_slice(), now_ms as i64],
        )?;
        Ok(token)
    }

    /// Memory after [`Users::put`] committed: `name`'s token is `token`.
    pub fn put_committed(&mut self, name: &str, token: &str, now_ms: u64) {
        let name = self.intern(name);
        self.users.insert(name.clone(), now_ms);
        if let Ok(mut i) = self.index.write() {
            i.retain(|_, n| **n != *name);
            i.insert(token_hash(token), name);
        }
    }

    /// Deletes user `name` inside `tx` (its jobs stay its own, under no cap).
    pub fn delete(tx: &rusqlite::Transaction, name: &str) -> Result<(), StoreError> {
        tx.execute("DELETE FROM users WHERE name = ?1", params![name])?;
        Ok(())
    }

    /// Memory after [`Users::delete`] committed: `name`'s token is refused from now on.
    pub fn delete_committed(&mut self, name: &str) {
        self.users.remove(name);
        self.caps.remove(name);
        self.shares.remove(name);
        self.max_priority.remove(name);
        if let Ok(mut i) = self.index.write() {
            i.retain(|_, n| &**n != name);
        }
    }

    /// Writes job `job`'s owner (a row for a user, none for the admin) inside `tx`: done before
    /// the job's own rows (see the module documentation).
    pub fn write_owner(
        tx: &rusqlite::Transaction,
        job: u64,
        owner: &str,
    ) -> Result<(), StoreError> {
        if owner == ADMIN {
            tx.execute("DELETE FROM job_owners WHERE job = ?1", params![job as i64])?;
        } else {
            tx.execute(
                "INSERT INTO job_owners(job, owner) VALUES (?1, ?2)
                 ON CONFLICT(job) DO UPDATE SET owner = ?2",
                params![job as i64, owner],
            )?;
        }
        Ok(())
    }

    /// Job `job` is `owner`'s ([`Users::write_owner`] committed).
    pub fn set_owner(&mut self, job: u64, owner: &str) {
        if owner == ADMIN {
            self.owners.remove(&job);
        } else {
            let owner = self.intern(owner);
            self.owners.insert(job, owner);
        }
    }

    /// Deletes the owner rows of purged jobs inside `tx`.
    pub fn delete_owners(tx: &rusqlite::Transaction, jobs: &[u64]) -> Result<(), StoreError> {
        let mut stmt = tx.prepare_cached("DELETE FROM job_owners WHERE job = ?1")?;
        for &job in jobs {
            stmt.execute(params![job as i64])?;
        }
        Ok(())
    }

    /// Deletes topology `name`'s owner row inside `tx` (the admin's is no row): its purge, and
    /// its set-aside at a start (`crate::set_aside`).
    pub fn delete_topology_owner(tx: &rusqlite::Transaction, name: &str) -> Result<(), StoreError> {
        tx.execute("DELETE FROM topology_owners WHERE name = ?1", params![name])?;
        Ok(())
    }

    /// Memory after [`Users::delete_owners`] committed.
    pub fn purged(&mut self, jobs: &[u64]) {
        for job in jobs {
            self.owners.remove(job);
        }
    }

    /// `name` as the shared string of a known user (one allocation per user, not per job).
    fn intern(&self, name: &str) -> Arc<str> {
        self.users
            .get_key_value(name)
            .map_or_else(|| name.into(), |(k, _)| k.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_short_lower_case_words_and_admin_is_taken() {
        assert!(check_name("alice").is_ok());
        assert!(check_name("a.b_c-9").is_ok());
        for bad in [
            "",
            "Alice",
            "9lives",
            "a b",
            "a/b",
            "admin",
            &"x".repeat(33),
        ] {
            assert!(check_name(bad).is_err(), "{bad:?} was accepted");
        }
        assert!(
            check_name("admin")
                .expect_err("taken")
                .contains("the admin's")
        );
    }

    #[test]
    fn a_token_is_found_by_its_hash_only() {
        let t = new_token();
        assert_eq!(t.len(), 64);
        assert_eq!(token_hash(&t), token_hash(&t));
        assert_ne!(token_hash(&t), token_hash(&new_token()));
    }
}
