//! Accounting: how much of the cluster each owner's running work held, by UTC day (Slurm's
//! `sreport cluster AccountUtilizationByUser`, kept by the server itself), read with
//! `hetsched usage`.
//!
//! What each owner holds in the scheduler's view — a user's group usage (its batch tasks,
//! workflow instances, divisible chunks and stream-topology workers), the admin's the rest of
//! what the live nodes hold — changes only in the state's events, so the state settles the
//! ledger at every commit ([`Ledger::settle`]): what was held since the previous event is
//! credited for the time between them, split at UTC midnights (core-, GPU- and memory-seconds),
//! and what is held now is noted for the next. The accounts are thus exact to the event, short
//! tasks included; a settle costs O(users). The live nodes' capacity is credited the same way
//! under the owner [`CAPACITY`], so the accounts say how much of the cluster was used. What accrued is added to the store's `usage_ledger` rows with the
//! state's commit every [`STORED_EVERY`] (and when the server stops), so a crash loses at most
//! that much; the ledger is never purged with the jobs, so the accounts outlive retention.
//!
//! Agents run their tasks on while the server is down (stopped, crashed, restarting). The time
//! up to which the store's rows count (`accounted_until_ns` in its `meta` table, written with
//! them) tells a restarted server where its accounts stopped; [`Downtime`] then credits, from
//! the agents' own start and end times, what the restored running tasks held between that time
//! and the restart, and what their nodes offered, as each node's first heartbeat confirms them.

use crate::store::StoreError;
use hetsched_core::Resources;
use rusqlite::{Connection, OptionalExtension, params};
use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

/// How often what accrued is written to the store, with each owner's fair-share usage
/// (`[fair_share]`): a crash loses at most this much of either.
pub const STORED_EVERY: Duration = Duration::from_secs(60);

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
    /// Adds `o` to it.
    pub fn add(&mut self, o: Held) {
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

/// What each owner holds since the last event, and what accrued since the last store.
#[derive(Debug, Default)]
pub struct Ledger {
    /// The last settle's time (ns since the Unix epoch); `None` before the first.
    last_ns: Option<u64>,
    /// What was held since `last_ns`: the capacity, the admin's, then each group's by id.
    held: Vec<Resources>,
    /// What one unit the owners held stands for since `last_ns` ([`Share`]).
    held_share: Share,
    /// Accrued by the same index, per day, not yet moved to `pending` (one day, or two across
    /// a midnight).
    accrued: Vec<(u32, Vec<Held>)>,
    /// Accrued and named, not yet written, by (owner, day).
    pending: BTreeMap<(String, u32), Held>,
    /// Moved from `pending` for the current transaction ([`Ledger::stage`]).
    staged: BTreeMap<(String, u32), Held>,
    /// Named since the server started, by owner (`/metrics`' counters).
    since_start: BTreeMap<String, Held>,
    /// The time up to which the staged rows count ([`Ledger::stage`]), written with them.
    staged_until: Option<u64>,
}

/// What one unit an owner holds counts as in the accounts, per dimension (each in (0, 1]): 1,
/// unless the owners together booked more than the live nodes offer, when their holdings are
/// scaled to what there is. Two ways that happens: with accelerator sharing the scheduler's
/// view counts a shared device once per node that reaches it (the ANodes' process queues share
/// the devices out); and a task asking more cores or memory than any node has runs alone on a
/// node (it holds that node, not its request). Either way no owner is credited more than the
/// cluster offered.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Share {
    /// Per core held.
    pub cores: f64,
    /// Per GPU held.
    pub gpus: f64,
    /// Per byte of memory held.
    pub memory: f64,
}

impl Share {
    /// Everything counts whole.
    pub const WHOLE: Share = Share {
        cores: 1.0,
        gpus: 1.0,
        memory: 1.0,
    };

    /// The share that fits `charged`, what the owners booked, into `capacity`, what the live
    /// nodes offer: per dimension, `capacity / charged` where they booked more, else 1.
    pub fn fitting(charged: Resources, capacity: Resources) -> Share {
        let fit = |booked: f64, offered: f64| {
            if booked > offered {
                offered / booked
            } else {
                1.0
            }
        };
        Share {
            cores: fit(charged.cores.into(), capacity.cores.into()),
            gpus: fit(charged.gpus.into(), capacity.gpus.into()),
            memory: fit(charged.memory_bytes as f64, capacity.memory_bytes as f64),
        }
    }

    fn clamped(self) -> Share {
        Share {
            cores: self.cores.clamp(0.0, 1.0),
            gpus: self.gpus.clamp(0.0, 1.0),
            memory: self.memory.clamp(0.0, 1.0),
        }
    }
}

impl Default for Share {
    fn default() -> Self {
        Share::WHOLE
    }
}

/// Who a credit goes to ([`Ledger::credit`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Payer {
    /// The live nodes' capacity ([`CAPACITY`]).
    Capacity,
    /// An owner group (`None`: the admin's, the work in no group).
    Owner(Option<u32>),
}

impl Payer {
    /// Its index in [`Ledger::held`] and the accrued amounts.
    fn at(self) -> usize {
        match self {
            Payer::Capacity => CAPACITY_AT,
            Payer::Owner(None) => ADMIN_AT,
            Payer::Owner(Some(g)) => GROUPS + g as usize,
        }
    }
}

/// The `meta` key of the time up to which the store's `usage_ledger` rows count.
const ACCOUNTED_UNTIL: &str = "accounted_until_ns";

/// The time (ns since the Unix epoch) up to which the store's accounts count: where a
/// restarted server's accounts stopped. `None` before anything was stored.
pub fn accounted_until(conn: &Connection) -> Result<Option<u64>, StoreError> {
    let v: Option<i64> = conn
        .query_row(
            "SELECT value FROM meta WHERE key = ?1",
            params![ACCOUNTED_UNTIL],
            |r| r.get(0),
        )
        .optional()?;
    Ok(v.and_then(|v| u64::try_from(v).ok()))
}

/// Where the capacity and the admin's sit in [`Ledger::held`]; group `g` sits at `GROUPS + g`.
const CAPACITY_AT: usize = 0;
const ADMIN_AT: usize = 1;
const GROUPS: usize = 2;

impl Ledger {
    /// At an event's end (`now_ns`): credits what was held since the last settle for the time
    /// between, split at UTC midnights, and notes what is held now: the live nodes' `capacity`,
    /// the `admin`'s (the work in no group) and each group's usage by group id.
    ///
    /// `share`: what one core, GPU or byte held by an owner counts as ([`Share`]).
    pub fn settle(
        &mut self,
        now_ns: u64,
        capacity: Resources,
        admin: Resources,
        groups: impl Iterator<Item = Resources>,
        share: Share,
    ) {
        if let Some(last) = self.last_ns {
            let held = std::mem::take(&mut self.held);
            self.accrue(last, now_ns, 0, &held, self.held_share);
        }
        if self.last_ns.is_none_or(|last| now_ns >= last) {
            self.last_ns = Some(now_ns);
        }
        self.held.clear();
        self.held.extend([capacity, admin]);
        self.held.extend(groups);
        self.held_share = share.clamped();
    }

    /// Credits `payer` with `held` for the time from `from_ns` to `to_ns` (work the events did
    /// not see: what ran while the server was down, [`Downtime`]).
    pub fn credit(&mut self, from_ns: u64, to_ns: u64, payer: Payer, held: Resources) {
        self.accrue(from_ns, to_ns, payer.at(), &[held], Share::WHOLE);
    }

    /// The time of the last settle (ns since the Unix epoch), if any.
    pub fn last_settle_ns(&self) -> Option<u64> {
        self.last_ns
    }

    /// Adds `held[i]` times the time from `from_ns` to `to_ns` to the amounts accrued at index
    /// `first + i`, split at UTC midnights; an owner's cores, GPUs and bytes count `share`.
    fn accrue(&mut self, from_ns: u64, to_ns: u64, first: usize, held: &[Resources], share: Share) {
        let mut from = from_ns;
        while from < to_ns {
            let day = from / DAY_NS;
            let to = to_ns.min((day + 1) * DAY_NS);
            let seconds = (to - from) as f64 / 1e9;
            let day = day.min(u64::from(u32::MAX)) as u32;
            let at = match self.accrued.iter().position(|(d, _)| *d == day) {
                Some(at) => at,
                None => {
                    self.accrued.push((day, Vec::new()));
                    self.accrued.len() - 1
                }
            };
            let acc = &mut self.accrued[at].1;
            if acc.len() < first + held.len() {
                acc.resize(first + held.len(), Held::default());
            }
            for (i, (a, r)) in acc[first..].iter_mut().zip(held).enumerate() {
                let per = if first + i == CAPACITY_AT {
                    Share::WHOLE
                } else {
                    share
                };
                a.core_seconds += f64::from(r.cores) * per.cores * seconds;
                a.gpu_seconds += f64::from(r.gpus) * per.gpus * seconds;
                a.memory_byte_seconds += r.memory_bytes as f64 * per.memory * seconds;
            }
            from = to;
        }
    }

    /// Names what accrued (`names`: each group's owner by group id) and moves it to `pending`.
    fn name(&mut self, names: &[Option<&str>]) {
        for (day, acc) in std::mem::take(&mut self.accrued) {
            for (i, h) in acc.into_iter().enumerate() {
                if h == Held::default() {
                    continue;
                }
                let owner = match i {
                    CAPACITY_AT => CAPACITY,
                    ADMIN_AT => crate::users::ADMIN,
                    g => match names.get(g - GROUPS).copied().flatten() {
                        Some(n) => n,
                        // A group no owner has (none is made without one): not counted.
                        None => continue,
                    },
                };
                self.pending
                    .entry((owner.to_string(), day))
                    .or_default()
                    .add(h);
                self.since_start
                    .entry(owner.to_string())
                    .or_default()
                    .add(h);
            }
        }
    }

    /// What each owner (and the capacity, [`CAPACITY`]) held since the server started, up to
    /// the last event (`names`: each group's owner by group id): `/metrics`' counters.
    pub fn since_start(&self, names: &[Option<&str>]) -> BTreeMap<String, Held> {
        let mut unnamed = Ledger {
            accrued: self.accrued.clone(),
            since_start: self.since_start.clone(),
            ..Ledger::default()
        };
        unnamed.name(names);
        unnamed.since_start
    }

    /// Moves what accrued into the next commit's writes ([`Ledger::persist`]); `names`: each
    /// group's owner by group id.
    pub fn stage(&mut self, names: &[Option<&str>]) {
        self.name(names);
        for (k, h) in std::mem::take(&mut self.pending) {
            self.staged.entry(k).or_default().add(h);
        }
        self.staged_until = self.last_ns;
    }

    /// Whether the next commit has rows to write.
    pub fn has_changes(&self) -> bool {
        !self.staged.is_empty() || self.staged_until.is_some()
    }

    /// Adds the staged amounts to the store's rows, and notes up to when they count, inside the
    /// state's transaction.
    pub fn persist(&self, tx: &rusqlite::Transaction) -> Result<(), StoreError> {
        if let Some(until) = self.staged_until {
            tx.prepare_cached(
                "INSERT INTO meta(key, value) VALUES (?1, ?2)
                 ON CONFLICT(key) DO UPDATE SET value = ?2",
            )?
            .execute(params![
                ACCOUNTED_UNTIL,
                i64::try_from(until).unwrap_or(i64::MAX)
            ])?;
        }
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
        self.staged_until = None;
    }

    /// After a rollback (`self` new, `old` the memory before it): what `old` accrued and had
    /// staged was not written, so it accrues here, and the clock goes on from its last settle
    /// (the next settle notes what the rebuilt state holds).
    pub fn carry_over(&mut self, old: &Ledger) {
        self.last_ns = old.last_ns;
        self.held = old.held.clone();
        self.accrued = old.accrued.clone();
        self.since_start = old.since_start.clone();
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
        names: &[Option<&str>],
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
        let mut unnamed = Ledger {
            accrued: self.accrued.clone(),
            ..Ledger::default()
        };
        unnamed.name(names);
        let memory = self
            .staged
            .iter()
            .chain(&self.pending)
            .chain(&unnamed.pending);
        for ((o, day), h) in memory {
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

/// The time a restarted server was down — from where its stored accounts stopped to its first
/// settle — and what its restored state says ran through it: each live node's capacity and each
/// running task's hold. A node's first heartbeat confirms them: its capacity is credited for the
/// whole time; each task for the part of it that it ran by its agent's clock (from its start to
/// its end, or to the restart if it still runs; nothing if it still waits in the agent's queue);
/// a task the agent no longer has is credited nothing (when it ended is unknown).
#[derive(Debug, Default)]
pub struct Downtime {
    from_ns: u64,
    to_ns: u64,
    /// Live nodes not yet heard from: their capacity.
    nodes: HashMap<u32, Resources>,
    /// Running tasks not yet confirmed: their node, owner group and hold.
    tasks: HashMap<u64, (u32, Option<u32>, Resources)>,
    /// Stream workers not yet confirmed, by (topology, worker index): their node, owner group
    /// and the cores they hold.
    workers: HashMap<(String, u32), (u32, Option<u32>, Resources)>,
}

/// A task as a node's heartbeat reports it, for [`Downtime::confirm`].
#[derive(Clone, Copy, Debug)]
pub enum Seen {
    /// Still running.
    Running {
        /// When its agent started it (the agent's clock).
        started_ns: u64,
        /// It still waits in the agent's queue (it has not started).
        queued: bool,
    },
    /// Ended.
    Ended {
        /// When its agent started it.
        started_ns: u64,
        /// When it ended.
        finished_ns: u64,
    },
}

/// What an owner's work held while the server was down, as [`Downtime`] credited it to the
/// ledger: the state credits its fair-share usage too.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct OwnerCredit {
    /// The owner group (`None`: the admin's).
    pub group: Option<u32>,
    /// From when (ns since the Unix epoch).
    pub from_ns: u64,
    /// Until when.
    pub to_ns: u64,
    /// What it held.
    pub held: Resources,
}

impl Downtime {
    /// The server was down from `from_ns` to `to_ns`.
    pub fn new(from_ns: u64, to_ns: u64) -> Self {
        Downtime {
            from_ns,
            to_ns,
            ..Downtime::default()
        }
    }

    /// Node `node` was live, offering `capacity`.
    pub fn expect_node(&mut self, node: u32, capacity: Resources) {
        self.nodes.insert(node, capacity);
    }

    /// Task `task` was running on `node`, holding `held` for `group`.
    pub fn expect_task(&mut self, task: u64, node: u32, group: Option<u32>, held: Resources) {
        self.tasks.insert(task, (node, group, held));
    }

    /// Stream worker `worker` of `topology` was running on `node`, holding `held` for `group`.
    pub fn expect_worker(
        &mut self,
        topology: &str,
        worker: u32,
        node: u32,
        group: Option<u32>,
        held: Resources,
    ) {
        self.workers
            .insert((topology.to_string(), worker), (node, group, held));
    }

    /// Node `node`'s first worker sync since the restart, listing the workers running there
    /// (`live`: topology, worker index): each expected one it lists ran through the whole time
    /// the server was down and is credited so; the node's others are forgotten. Returns what
    /// was credited.
    pub fn confirm_workers<'a>(
        &mut self,
        ledger: &mut Ledger,
        node: u32,
        live: impl IntoIterator<Item = (&'a str, u32)>,
    ) -> Vec<OwnerCredit> {
        let mut credited = Vec::new();
        for (topology, worker) in live {
            let key = (topology.to_string(), worker);
            if let Some(&(on, group, held)) = self.workers.get(&key)
                && on == node
            {
                self.workers.remove(&key);
                credited.push(self.credit(ledger, group, self.from_ns, self.to_ns, held));
            }
        }
        self.workers.retain(|_, (on, _, _)| *on != node);
        credited
    }

    /// Credits `ledger` with what owner `group` held from `from_ns` to `to_ns`.
    fn credit(
        &self,
        ledger: &mut Ledger,
        group: Option<u32>,
        from_ns: u64,
        to_ns: u64,
        held: Resources,
    ) -> OwnerCredit {
        ledger.credit(from_ns, to_ns, Payer::Owner(group), held);
        OwnerCredit {
            group,
            from_ns,
            to_ns,
            held,
        }
    }

    /// Node `node`'s first heartbeat since the restart, reporting `seen` (its running tasks and
    /// its results): credits `ledger` with what the node offered and its tasks held while the
    /// server was down, and forgets the node. Returns what was credited to owners.
    pub fn confirm(
        &mut self,
        ledger: &mut Ledger,
        node: u32,
        seen: impl IntoIterator<Item = (u64, Seen)>,
    ) -> Vec<OwnerCredit> {
        let mut credited = Vec::new();
        let capacity = self.nodes.remove(&node);
        if let Some(capacity) = capacity {
            ledger.credit(self.from_ns, self.to_ns, Payer::Capacity, capacity);
        }
        for (task, how) in seen {
            let Some(&(on, group, held)) = self.tasks.get(&task) else {
                continue;
            };
            if on != node {
                continue;
            }
            self.tasks.remove(&task);
            let (start, end) = match how {
                Seen::Running { queued: true, .. } => continue,
                Seen::Running { started_ns, .. } => (started_ns, self.to_ns),
                Seen::Ended {
                    started_ns,
                    finished_ns,
                } => (started_ns, finished_ns),
            };
            let (from, to) = (start.max(self.from_ns), end.min(self.to_ns));
            // A task asking more than its node has runs alone there: it held the node.
            let held = capacity.map_or(held, |c| Resources {
                cores: held.cores.min(c.cores),
                memory_bytes: held.memory_bytes.min(c.memory_bytes),
                gpus: held.gpus.min(c.gpus),
            });
            if from < to {
                credited.push(self.credit(ledger, group, from, to, held));
            }
        }
        self.tasks.retain(|_, (on, _, _)| *on != node);
        credited
    }

    /// Whether every node was heard from (or the state dropped them).
    pub fn is_done(&self) -> bool {
        self.nodes.is_empty() && self.tasks.is_empty() && self.workers.is_empty()
    }

    /// Node `node` will not be heard from (declared dead, removed): nothing of it is credited.
    pub fn forget_node(&mut self, node: u32) {
        self.nodes.remove(&node);
        self.tasks.retain(|_, (on, _, _)| *on != node);
        self.workers.retain(|_, (on, _, _)| *on != node);
    }
}

/// The day (since the Unix epoch, UTC) of `ns` nanoseconds since it.
pub fn day_of(ns: u64) -> u32 {
    (ns / DAY_NS).min(u64::from(u32::MAX)) as u32
}

/// Today (UTC), in days since 1970-01-01.
pub fn today() -> u32 {
    day_of(crate::state::now_ns())
}

/// Day `day` (since 1970-01-01, UTC) as `YYYY-MM-DD`.
pub fn date(day: u32) -> String {
    let t = std::time::UNIX_EPOCH + std::time::Duration::from_secs(u64::from(day) * 86_400);
    humantime::format_rfc3339_seconds(t)
        .to_string()
        .chars()
        .take(10)
        .collect()
}

/// A day as `hetsched usage --since/--until` and the dashboard's `/api/usage?since=&until=` take
/// it: `YYYY-MM-DD` (UTC), `today`, or `Nd` (N days before `today`), as days since 1970-01-01.
/// The error says what was wrong with `s`, quoting it (the caller names its field).
pub fn parse_day(s: &str, today: u32) -> Result<u32, String> {
    // A client's field: quoted cut short.
    let shown = hetsched_core::text::clip(s);
    if s == "today" {
        return Ok(today);
    }
    if let Some(n) = s.strip_suffix('d')
        && let Ok(n) = n.parse::<u32>()
    {
        return today
            .checked_sub(n)
            .ok_or_else(|| format!("`{shown}`: before 1970"));
    }
    let t = humantime::parse_rfc3339(&format!("{s}T00:00:00Z")).map_err(|_| {
        format!("`{shown}`: a day is YYYY-MM-DD (UTC), `today`, or Nd for N days ago (`30d`)")
    })?;
    let secs = t
        .duration_since(std::time::UNIX_EPOCH)
        .map_err(|_| format!("`{shown}`: before 1970"))?
        .as_secs();
    u32::try_from(secs / 86_400).map_err(|_| format!("`{shown}`: too far ahead"))
}

/// Refuses a span of days (`since` to `until`, both included) that ends before it starts or
/// covers [`MAX_DAYS`] or more; `names`: what the caller calls the two ends (the `Usage` RPC's
/// `since_day` and `until_day`, the dashboard's `since` and `until`), the first of which the
/// message starts with.
pub fn check_span(since: u32, until: u32, names: [&str; 2]) -> Result<(), String> {
    let [since_name, until_name] = names;
    if since > until {
        return Err(format!(
            "{since_name}: {} is after {until_name} {}",
            date(since),
            date(until)
        ));
    }
    if until - since >= MAX_DAYS {
        return Err(format!(
            "{since_name}: the accounts are read at most {MAX_DAYS} days at a time"
        ));
    }
    Ok(())
}

/// Bytes in a GiB.
pub const GIB: f64 = (1u64 << 30) as f64;

/// The accounts of a span as `hetsched usage` and the dashboard's `/api/usage` give them: each
/// owner's sum, each (day, owner)'s, the total of the owners and the live nodes' capacity.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Summary {
    /// The span's first day (since 1970-01-01, UTC).
    pub since: u32,
    /// Its last day, included.
    pub until: u32,
    /// Each owner's (never the capacity), by name.
    pub owners: BTreeMap<String, Held>,
    /// Each owner's by day.
    pub days: BTreeMap<(u32, String), Held>,
    /// The owners' added up.
    pub total: Held,
    /// What the live nodes offered ([`CAPACITY`]'s rows).
    pub capacity: Held,
}

impl Held {
    /// As the accounts' JSON gives it: hours (and GiB-hours) beside the seconds they come from.
    pub fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "core_hours": self.core_seconds / 3600.0,
            "gpu_hours": self.gpu_seconds / 3600.0,
            "memory_gib_hours": self.memory_byte_seconds / 3600.0 / GIB,
            "core_seconds": self.core_seconds,
            "gpu_seconds": self.gpu_seconds,
            "memory_byte_seconds": self.memory_byte_seconds,
        })
    }
}

/// `used` as a fraction of `offered`; `None` when nothing was offered.
pub fn fraction(used: f64, offered: f64) -> Option<f64> {
    (offered > 0.0).then(|| used / offered)
}

impl Summary {
    /// Adds up `rows` (a report from `since` to `until`, [`crate::state::State::usage_report`]).
    pub fn of<'a>(since: u32, until: u32, rows: impl IntoIterator<Item = &'a UsageRow>) -> Self {
        let mut s = Summary {
            since,
            until,
            ..Summary::default()
        };
        for r in rows {
            if r.owner == CAPACITY {
                s.capacity.add(r.held);
                continue;
            }
            s.owners.entry(r.owner.clone()).or_default().add(r.held);
            s.days
                .entry((r.day, r.owner.clone()))
                .or_default()
                .add(r.held);
            s.total.add(r.held);
        }
        s
    }

    /// The share of the capacity the owners held: cores, GPUs, memory (`None`: none offered).
    pub fn utilisation(&self) -> [Option<f64>; 3] {
        let (t, c) = (&self.total, &self.capacity);
        [
            fraction(t.core_seconds, c.core_seconds),
            fraction(t.gpu_seconds, c.gpu_seconds),
            fraction(t.memory_byte_seconds, c.memory_byte_seconds),
        ]
    }

    /// The JSON of `hetsched usage --output json` (and `/api/usage`): `since`, `until`,
    /// `users` (each owner's [`Held::json`] with its `user`), `total`, `capacity`,
    /// `utilisation` (`cores`, `gpus`, `memory`), and with `by_day` `days` (each with its `day`
    /// and `user`).
    pub fn json(&self, by_day: bool) -> serde_json::Value {
        let users: Vec<_> = self
            .owners
            .iter()
            .map(|(o, h)| {
                let mut v = h.json();
                v["user"] = serde_json::json!(o);
                v
            })
            .collect();
        let [cores, gpus, memory] = self.utilisation();
        let mut doc = serde_json::json!({
            "since": date(self.since),
            "until": date(self.until),
            "users": users,
            "total": self.total.json(),
            "capacity": self.capacity.json(),
            "utilisation": { "cores": cores, "gpus": gpus, "memory": memory },
        });
        if by_day {
            doc["days"] = self
                .days
                .iter()
                .map(|((d, o), h)| {
                    let mut v = h.json();
                    v["day"] = serde_json::json!(date(*d));
                    v["user"] = serde_json::json!(o);
                    v
                })
                .collect();
        }
        doc
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cores(n: u32) -> Resources {
        Resources::new(n, 0, 0)
    }

    /// Settles with a 16-core capacity, the admin holding `admin` cores and group 0 `alice`.
    fn settle(l: &mut Ledger, at: u64, admin: u32, alice: u32) {
        l.settle(
            at,
            cores(16),
            cores(admin),
            [cores(alice)].into_iter(),
            Share::WHOLE,
        );
    }

    fn named(l: &mut Ledger) -> &BTreeMap<(String, u32), Held> {
        l.name(&[Some("alice")]);
        &l.pending
    }

    #[test]
    fn what_was_held_between_two_events_is_credited_split_at_midnight() {
        let mut l = Ledger::default();
        let before_midnight = 3 * DAY_NS - 2_000_000_000;
        settle(&mut l, before_midnight, 0, 4);
        assert!(
            named(&mut l).is_empty(),
            "the first settle only notes what is held"
        );
        // Alice held 4 cores for 5 s (2 before midnight), then holds none.
        settle(&mut l, before_midnight + 5_000_000_000, 1, 0);
        let p = named(&mut l);
        assert_eq!(p[&("alice".to_string(), 2)].core_seconds, 8.0);
        assert_eq!(p[&("alice".to_string(), 3)].core_seconds, 12.0);
        assert_eq!(p[&(CAPACITY.to_string(), 3)].core_seconds, 48.0);
        assert!(!p.contains_key(&(crate::users::ADMIN.to_string(), 3)));
        // A task shorter than any sampling period is credited exactly: the admin's core for 0.1 s.
        settle(&mut l, before_midnight + 5_100_000_000, 0, 0);
        let p = named(&mut l);
        let admin = p[&(crate::users::ADMIN.to_string(), 3)].core_seconds;
        assert!((admin - 0.1).abs() < 1e-9, "{admin}");
    }

    /// Owners that booked more than the live nodes offer (a 3-core task alone on a 2-core node)
    /// are credited what there is: their holdings scaled to the capacity, dimension by
    /// dimension (the preemption-day fuzz found alice credited 3 cores of a 2-core cluster).
    #[test]
    fn owners_booking_more_than_the_capacity_are_credited_the_capacity() {
        let share = Share::fitting(Resources::new(3, 4 << 30, 1), Resources::new(2, 8 << 30, 1));
        assert_eq!(
            share,
            Share {
                cores: 2.0 / 3.0,
                gpus: 1.0,
                memory: 1.0
            }
        );
        let mut l = Ledger::default();
        let at = 3 * DAY_NS;
        l.settle(at, cores(2), cores(0), [cores(3)].into_iter(), share);
        l.settle(
            at + 10_000_000_000,
            cores(2),
            cores(0),
            [cores(0)].into_iter(),
            Share::WHOLE,
        );
        let p = named(&mut l);
        let alice = p[&("alice".to_string(), 3)].core_seconds;
        assert!((alice - 20.0).abs() < 1e-9, "{alice}");
        assert_eq!(p[&(CAPACITY.to_string(), 3)].core_seconds, 20.0);
    }

    /// The downtime rule: a node's first beat confirms its capacity for the whole time and
    /// each task for the part of it that its agent ran it, split at midnight; a queued task, a
    /// task of another node and a node never heard from are credited nothing.
    #[test]
    fn what_ran_while_the_server_was_down_is_credited_as_its_node_confirms_it() {
        let s = 1_000_000_000;
        let (from, to) = (3 * DAY_NS - 2 * s, 3 * DAY_NS + 8 * s);
        let mut l = Ledger::default();
        let mut down = Downtime::new(from, to);
        down.expect_node(0, cores(16));
        down.expect_node(1, cores(4));
        down.expect_task(10, 0, Some(0), cores(2));
        down.expect_task(11, 0, None, cores(1));
        down.expect_task(12, 0, None, cores(4));
        down.expect_task(13, 1, Some(0), cores(4));
        down.expect_task(14, 0, Some(0), cores(8));
        down.expect_task(15, 1, Some(0), cores(6));
        down.expect_node(2, cores(1));
        down.expect_task(16, 2, None, cores(1));
        let seen = [
            // Ran before the server went down and runs on: the whole 10 s.
            (
                10,
                Seen::Running {
                    started_ns: from - 60 * s,
                    queued: false,
                },
            ),
            // Ended 1 s after midnight.
            (
                11,
                Seen::Ended {
                    started_ns: 0,
                    finished_ns: 3 * DAY_NS + s,
                },
            ),
            // Still in the agent's queue.
            (
                12,
                Seen::Running {
                    started_ns: 0,
                    queued: true,
                },
            ),
            // Node 1's, reported by node 0.
            (
                13,
                Seen::Running {
                    started_ns: 0,
                    queued: false,
                },
            ),
        ];
        let credited = down.confirm(&mut l, 0, seen);
        // What the owners are credited (the state adds it to their fair-share usage too).
        let credit = |group, from_ns, to_ns, c| OwnerCredit {
            group,
            from_ns,
            to_ns,
            held: cores(c),
        };
        assert_eq!(
            credited,
            [
                credit(Some(0), from, to, 2),
                credit(None, from, 3 * DAY_NS + s, 1)
            ]
        );
        // Task 14 (not reported: gone) is forgotten with node 0's others.
        assert!(!down.is_done(), "node 1 still to hear from");
        // Node 1's task asks 6 cores of its 4: it ran alone there, holding the 4, for 1 s.
        let alone = Seen::Ended {
            started_ns: to - s,
            finished_ns: to + s,
        };
        assert_eq!(
            down.confirm(&mut l, 1, [(15, alone)]),
            [credit(Some(0), to - s, to, 4)]
        );
        // Node 2 was declared dead before it beat: nothing of it is credited.
        assert!(!down.is_done());
        down.forget_node(2);
        assert!(down.is_done());
        let p = named(&mut l);
        let at = |o: &str, day: u32| p.get(&(o.to_string(), day)).map_or(0.0, |h| h.core_seconds);
        assert_eq!((at("alice", 2), at("alice", 3)), (4.0, 16.0 + 4.0));
        assert_eq!((at(ADMIN_NAME, 2), at(ADMIN_NAME, 3)), (2.0, 1.0));
        assert_eq!(
            (at(CAPACITY, 2), at(CAPACITY, 3)),
            (32.0 + 8.0, 128.0 + 32.0)
        );
    }

    const ADMIN_NAME: &str = crate::users::ADMIN;

    #[test]
    fn staged_rows_a_rollback_did_not_write_accrue_again() {
        let mut old = Ledger::default();
        settle(&mut old, DAY_NS, 0, 2);
        settle(&mut old, DAY_NS + 1_000_000_000, 0, 2);
        old.stage(&[Some("alice")]);
        settle(&mut old, DAY_NS + 2_000_000_000, 0, 2);
        let mut fresh = Ledger::default();
        fresh.carry_over(&old);
        assert_eq!(
            named(&mut fresh)[&("alice".to_string(), 1)].core_seconds,
            4.0
        );
        assert_eq!(fresh.last_ns, Some(DAY_NS + 2_000_000_000));
        // The clock goes on with what was held.
        settle(&mut fresh, DAY_NS + 3_000_000_000, 0, 0);
        assert_eq!(
            named(&mut fresh)[&("alice".to_string(), 1)].core_seconds,
            6.0
        );
    }

    #[test]
    fn days_are_dates_today_or_days_ago() {
        let today = 20_422;
        assert_eq!(parse_day("1970-01-02", today), Ok(1));
        assert_eq!(date(20_422), "2025-11-30");
        assert_eq!(parse_day("2025-11-30", today), Ok(20_422));
        assert_eq!(parse_day("today", today), Ok(today));
        assert_eq!(parse_day("7d", today), Ok(today - 7));
        for bad in ["30-11-2025", "", "2025-11-30T01:00:00Z", "yesterday"] {
            let e = parse_day(bad, today).expect_err(bad);
            assert!(
                e.contains("YYYY-MM-DD") && e.contains(&format!("`{bad}`")),
                "{e}"
            );
        }
        assert_eq!(
            parse_day("20423d", today),
            Err("`20423d`: before 1970".to_string())
        );
    }

    #[test]
    fn a_span_ends_after_it_starts_and_is_at_most_max_days_long() {
        assert_eq!(check_span(5, 5, ["since", "until"]), Ok(()));
        assert_eq!(
            check_span(20_422, 20_421, ["since", "until"]),
            Err("since: 2025-11-30 is after until 2025-11-29".to_string())
        );
        assert_eq!(check_span(0, MAX_DAYS - 1, ["a", "b"]), Ok(()));
        let e = check_span(0, MAX_DAYS, ["since_day", "until_day"]).expect_err("too long");
        assert!(
            e.starts_with("since_day: ") && e.contains("3660 days"),
            "{e}"
        );
    }

    #[test]
    fn a_summary_adds_each_owners_days_and_keeps_the_capacity_apart() {
        let row = |owner: &str, day, core_seconds| UsageRow {
            owner: owner.to_string(),
            day,
            held: Held {
                core_seconds,
                gpu_seconds: 0.0,
                memory_byte_seconds: core_seconds * GIB,
            },
        };
        let rows = [
            row(CAPACITY, 1, 7200.0),
            row(CAPACITY, 2, 7200.0),
            row("alice", 1, 3600.0),
            row("alice", 2, 1800.0),
            row("bob", 2, 1800.0),
        ];
        let s = Summary::of(1, 2, &rows);
        let doc = s.json(true);
        assert_eq!(doc["since"], "1970-01-02");
        assert_eq!(doc["until"], "1970-01-03");
        assert_eq!(doc["users"][0]["user"], "alice");
        assert_eq!(doc["users"][0]["core_hours"], 1.5);
        assert_eq!(doc["users"][0]["memory_gib_hours"], 1.5);
        assert_eq!(doc["users"][1]["user"], "bob");
        assert_eq!(doc["total"]["core_hours"], 2.0);
        assert_eq!(doc["capacity"]["core_hours"], 4.0);
        assert_eq!(doc["utilisation"]["cores"], 0.5);
        assert!(doc["utilisation"]["gpus"].is_null(), "no GPU offered");
        assert_eq!(doc["days"].as_array().map(Vec::len), Some(3));
        assert_eq!(doc["days"][2]["day"], "1970-01-03");
        assert!(s.json(false).get("days").is_none());
    }

    #[test]
    fn a_clock_that_goes_back_credits_nothing() {
        let mut l = Ledger::default();
        settle(&mut l, DAY_NS + 5_000_000_000, 0, 2);
        settle(&mut l, DAY_NS + 4_000_000_000, 0, 2);
        assert!(named(&mut l).is_empty());
        settle(&mut l, DAY_NS + 6_000_000_000, 0, 2);
        assert_eq!(named(&mut l)[&("alice".to_string(), 1)].core_seconds, 2.0);
    }
}
