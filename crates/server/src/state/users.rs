//! The state's door for users ([`crate::users`]): adding, rotating, removing and listing them,
//! and the check that a job is the caller's before the caller changes it.

use super::{State, StateError, now_ns};

use crate::users::{ADMIN, Caller, MAX_USERS, TokenIndex, Users};
use hetsched_core::{Resources, Variant};
use std::collections::HashSet;

/// A change to a user's caps (`hetsched user limit`): each resource given gets that cap (0: no
/// cap on it); the others keep theirs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CapChange {
    /// The most cores at once.
    pub max_cores: Option<u32>,
    /// The most memory at once, in bytes.
    pub max_memory_bytes: Option<u64>,
    /// The most GPUs at once.
    pub max_gpus: Option<u32>,
}

impl CapChange {
    /// A change of the cap on cores alone.
    pub fn cores(max_cores: u32) -> Self {
        Self {
            max_cores: Some(max_cores),
            ..Self::default()
        }
    }

    /// Whether it changes nothing.
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }

    /// `cap` with this change made.
    pub fn applied_to(&self, cap: Resources) -> Resources {
        Resources::new(
            self.max_cores.unwrap_or(cap.cores),
            self.max_memory_bytes.unwrap_or(cap.memory_bytes),
            self.max_gpus.unwrap_or(cap.gpus),
        )
    }
}

/// One user as `hetsched user list` shows it.
#[derive(Clone, Debug, PartialEq)]
pub struct UserEntry {
    /// Its name.
    pub name: String,
    /// When its token was made, ms since the Unix epoch.
    pub created_ms: u64,
    /// Its jobs the server holds.
    pub jobs: u64,
    /// Those of them not finished.
    pub unfinished_jobs: u64,
    /// The most its running batch tasks and workflow instances may hold at once: cores,
    /// memory, GPUs (0 in a dimension: no cap on it).
    pub cap: Resources,
    /// What they hold now.
    pub held: Resources,
    /// Its fair-share usage in share-seconds ([`State::fair_usage_of`]).
    pub fair_usage: f64,
    /// Its fair-share shares (1 unless `hetsched user limit --shares`).
    pub shares: u32,
    /// The highest priority its work may have (`hetsched user limit --max-priority`), if
    /// capped.
    pub max_priority: Option<i32>,
}

/// One row of the dashboard's Users panel ([`State::users_overview`]).
#[derive(Clone, Debug, PartialEq)]
pub struct UserOverview {
    /// The user as `hetsched user list` shows it (the admin's row: no caps, created 0).
    pub entry: UserEntry,
    /// Whether this row is the admin's own work.
    pub admin: bool,
    /// Its fair-share usage in share-seconds; `None` without `[fair_share]`.
    pub fair_usage: Option<f64>,
    /// Its jobs the job listing says are `pending`.
    pub pending_jobs: u64,
    /// Its jobs the job listing says are `running` (some tasks ran, some have yet to end).
    pub running_jobs: u64,
}

/// The most fair-share shares a user may have: the core's bound, which simulator workloads'
/// `[[user]] shares` obey too.
pub use hetsched_core::model::user::MAX_SHARES;

/// Refuses `caller` unless it is the admin: `what` names what it asked for.
pub fn require_admin(caller: &Caller, what: &'static str) -> Result<(), StateError> {
    if caller.admin {
        Ok(())
    } else {
        Err(StateError::AdminOnly {
            what,
            user: caller.name.to_string(),
        })
    }
}

impl State {
    /// The index of users' token hashes the token check reads (refilled, not replaced, by a
    /// rollback).
    pub fn users_index(&self) -> TokenIndex {
        self.users.index()
    }

    /// The owner of job `job` ([`ADMIN`] unless a user submitted it).
    pub fn owner_of(&self, job: u64) -> &str {
        self.users.owner(job)
    }

    /// Refuses user `who` doing `action` to job `job` unless the job is its own; the admin may
    /// do anything. A job the state does not know passes (the request itself then says so).
    pub fn check_owner(&self, who: &str, job: u64, action: &'static str) -> Result<(), StateError> {
        if who == ADMIN || self.ids.kind(job).is_none() {
            return Ok(());
        }
        let owner = self.users.owner(job);
        if owner == who {
            Ok(())
        } else {
            Err(StateError::NotOwner {
                what: format!("job {job}"),
                owner: owner.to_string(),
                action,
            })
        }
    }

    /// [`State::check_owner`] for a call's caller.
    pub fn authorize(
        &self,
        caller: &Caller,
        job: u64,
        action: &'static str,
    ) -> Result<(), StateError> {
        if caller.admin {
            return Ok(());
        }
        self.check_owner(&caller.name, job, action)
    }

    /// Puts the applications of every batch job a user owns in the user's group of the
    /// scheduler's view, and sets each user's cap (after a restart or a rollback).
    pub(super) fn apply_user_groups(&mut self) {
        let owned: Vec<(u64, String)> = self
            .users
            .owned()
            .map(|(j, o)| (j, o.to_string()))
            .collect();
        for (job, owner) in owned {
            self.group_job(job, &owner);
        }
        let caps: Vec<(String, Resources)> =
            self.users.caps().map(|(n, c)| (n.to_string(), c)).collect();
        for (name, cap) in caps {
            let g = self.users.group_of(&name);
            self.view.set_group_cap(g, cap);
        }
        let shares: Vec<(String, u32)> = self
            .users
            .all_shares()
            .map(|(n, s)| (n.to_string(), s))
            .collect();
        for (name, shares) in shares {
            let g = self.users.group_of(&name);
            self.view.set_fair_shares(g, shares);
        }
    }

    /// Turns the view's fair share on or off as `[fair_share]` says, and reads each owner's
    /// stored usage back, decayed by the time since it was stored (a restart).
    pub(super) fn restore_fair_usage(&mut self) -> Result<(), StateError> {
        let Some(half_life) = self.fair_half_life() else {
            return Ok(());
        };
        let now_ms = now_ns() / 1_000_000;
        for (owner, usage, at_ms) in Users::stored_fair_usage(self.store.conn())? {
            let idle_ms = now_ms.saturating_sub(at_ms) as f64;
            let decayed = usage * 0.5f64.powf(idle_ms * 1e6 / half_life as f64);
            let group = (owner != ADMIN).then(|| self.users.group_of(&owner));
            self.view.set_fair_usage(group, decayed);
        }
        Ok(())
    }

    /// After a rollback: the usage `old` had accrued (memory only since its last store).
    pub(super) fn carry_fair_usage(&mut self, old: &State) {
        if self.fair_half_life().is_none() {
            return;
        }
        let groups: Vec<(String, u32)> = old
            .users
            .groups()
            .map(|(n, g)| (n.to_string(), g))
            .collect();
        for (name, g) in groups {
            let usage = old.view.fair_usage(Some(g));
            let mine = self.users.group_of(&name);
            self.view.set_fair_usage(Some(mine), usage);
        }
        self.view.set_fair_usage(None, old.view.fair_usage(None));
    }

    /// The half-life of `[fair_share]`, in ns, if it is on; sets the view's accordingly.
    fn fair_half_life(&mut self) -> Option<u64> {
        let half_life = self.config.fair_share.map(|f| f.half_life.0);
        self.view.set_fair_share(half_life);
        half_life
    }

    /// Stages the accounts and each owner's fair-share usage for this event's commit once
    /// [`crate::accounting::STORED_EVERY`] has passed since they were last staged.
    pub(super) fn stage_usage_when_due(&mut self) {
        if self
            .usage_stored
            .is_some_and(|t| t.elapsed() < crate::accounting::STORED_EVERY)
        {
            return;
        }
        self.usage_stored = Some(std::time::Instant::now());
        self.stage_usage();
        // The live nodes' last beats go with them (a crash then keeps those too).
        self.nodes.stage_heard();
    }

    /// `hetsched usage`: the accounts from day `since` to day `until` (both included; days
    /// since the Unix epoch, UTC) by day and owner, what accrued since the last store included;
    /// `owner`: that owner's only.
    pub fn usage_report(
        &self,
        since: u32,
        until: u32,
        owner: Option<&str>,
    ) -> Result<Vec<crate::accounting::UsageRow>, StateError> {
        let names = self.group_names();
        Ok(self
            .ledger
            .report(self.store.conn(), since, until, owner, &names)?)
    }

    /// The accounts `caller` may read from day `since` to day `until` (both included), by day
    /// and owner: every owner's for the admin (and the dashboard's read-only token), a user's
    /// own and the capacity's ([`crate::accounting::CAPACITY`]) for a user. The one rule the
    /// `Usage` RPC and the dashboard's `/api/usage` both read through.
    pub fn usage_for(
        &self,
        caller: &Caller,
        since: u32,
        until: u32,
    ) -> Result<Vec<crate::accounting::UsageRow>, StateError> {
        let owner = (!caller.admin).then_some(&*caller.name);
        self.usage_report(since, until, owner)
    }

    /// What each owner held since the server started ([`crate::accounting::Ledger::since_start`];
    /// the capacity under [`crate::accounting::CAPACITY`]).
    pub fn usage_since_start(&self) -> std::collections::BTreeMap<String, crate::accounting::Held> {
        self.ledger.since_start(&self.group_names())
    }

    /// Each group's owner, by group id (what the accounts name).
    fn group_names(&self) -> Vec<Option<&str>> {
        let mut names = Vec::new();
        for (name, g) in self.users.groups() {
            let g = g as usize;
            if names.len() <= g {
                names.resize(g + 1, None);
            }
            names[g] = Some(name);
        }
        names
    }

    /// At start-up: the accounts' clock starts now, and what ran while the server was down —
    /// from where the stored accounts stop to now — is credited as each node restored live
    /// confirms it at its first heartbeat ([`crate::accounting::Downtime`]: the nodes'
    /// capacity, and the running batch tasks and workflow instances for the part of that time
    /// their agents ran them).
    pub(super) fn start_accounts(&mut self) -> Result<(), StateError> {
        self.settle_accounts();
        let from = crate::accounting::accounted_until(self.store.conn())?;
        let (Some(from), Some(to)) = (from, self.ledger.last_settle_ns()) else {
            return Ok(());
        };
        if from >= to {
            return Ok(());
        }
        let mut down = crate::accounting::Downtime::new(from, to);
        for (i, n) in self.nodes.iter().enumerate() {
            let id = hetsched_core::NodeId(i as u32);
            if !n.alive || n.removed || !self.view.node(id).alive {
                continue;
            }
            down.expect_node(id.0, self.view.node(id).node.capacity());
            for &task in &n.running {
                let held = self.jobs.owner(task).and_then(|k| k.held(&self.view, task));
                if let Some((group, held)) = held {
                    down.expect_task(task, id.0, group, held);
                }
            }
        }
        for (topology, worker, node, group, held) in self.jobs.topology.booked_workers() {
            let id = hetsched_core::NodeId(node);
            if self.nodes.get(node).is_some_and(|n| n.alive) && self.view.node(id).alive {
                down.expect_worker(topology, worker, node, group, held);
            }
        }
        if !down.is_done() {
            self.downtime = Some(down);
        }
        Ok(())
    }

    /// Node `node`'s first worker sync since a restart, listing the stream workers running
    /// there (`live`: topology, worker index): credits what they held while the server was
    /// down ([`State::start_accounts`]).
    pub(super) fn confirm_downtime_workers<'a>(
        &mut self,
        node: &str,
        live: impl IntoIterator<Item = (&'a str, u32)>,
    ) {
        let (Some(down), Some(id)) = (&mut self.downtime, self.nodes.by_name(node)) else {
            return;
        };
        let credited = down.confirm_workers(&mut self.ledger, id, live);
        if down.is_done() {
            self.downtime = None;
        }
        self.credit_fair_usage(&credited);
    }

    /// Under `[fair_share]`: adds what owners' work held while the server was down (as the
    /// accounts were credited) to their fair-share usage, decayed by its age — else a user whose
    /// work ran through a restart would be served as if it had used nothing then.
    fn credit_fair_usage(&mut self, credited: &[crate::accounting::OwnerCredit]) {
        if self.config.fair_share.is_none() {
            return;
        }
        let now = now_ns();
        for c in credited {
            self.view.credit_fair_usage(
                c.group,
                c.held,
                now.saturating_sub(c.to_ns),
                c.to_ns.saturating_sub(c.from_ns),
            );
        }
    }

    /// Node `node`'s first heartbeat since a restart (`reported`: the running tasks of `req` the
    /// server knows there): credits what it ran while the server was down
    /// ([`State::start_accounts`]).
    pub(super) fn confirm_downtime(
        &mut self,
        node: hetsched_core::NodeId,
        req: &crate::state::types::HeartbeatReport,
        reported: &HashSet<u64>,
    ) {
        use crate::accounting::Seen;
        let Some(down) = &mut self.downtime else {
            return;
        };
        let running = req
            .running
            .iter()
            .filter(|r| reported.contains(&r.task_id))
            .map(|r| {
                let seen = Seen::Running {
                    started_ns: r.started_ns,
                    queued: r.queued,
                };
                (r.task_id, seen)
            });
        let ended = req.results.iter().map(|r| {
            let seen = Seen::Ended {
                started_ns: r.started_ns,
                finished_ns: r.finished_ns,
            };
            (r.task_id, seen)
        });
        let credited = down.confirm(&mut self.ledger, node.0, running.chain(ended));
        if down.is_done() {
            self.downtime = None;
        }
        self.credit_fair_usage(&credited);
    }

    /// At an event's end: credits each owner's account with what its work held since the last
    /// event, and notes what it holds now ([`crate::accounting::Ledger::settle`]; O(users)).
    ///
    /// An owner's work is what its tasks hold in the view, less what waits in agents' queues
    /// ([`super::prefetch::Queued`]). The admin's is the rest of what the view books: what the
    /// live nodes hold, with the cores booked beyond their capacity (queues,
    /// [`super::prefetch::Prefetch::live_debt`]), less the groups' and the admin's queued work.
    pub(super) fn settle_accounts(&mut self) {
        let debt = self.nodes.prefetch.live_debt(&self.view);
        let view = &self.view;
        let queued = &self.nodes.prefetch.queued;
        let booked = view.in_use()
            + Resources {
                cores: debt,
                ..Default::default()
            };
        let grouped = view
            .group_usages()
            .fold(Resources::default(), |sum, u| sum + u);
        let admin = booked - grouped - queued.of(None);
        let groups: Vec<Resources> = view
            .group_usages()
            .enumerate()
            .map(|(g, u)| u - queued.of(Some(g as u32)))
            .collect();
        // The devices there are: the view counts a shared device once per node that reaches it
        // (accelerator sharing), the accounts once. What the owners hold is scaled down to what
        // the live nodes offer while they book more (shared devices; a task asking more than
        // its node has, alone there).
        let mut capacity = view.totals();
        capacity.gpus = capacity.gpus.min(self.nodes.live_devices());
        let charged = groups.iter().fold(admin, |sum, g| sum + *g);
        let share = crate::accounting::Share::fitting(charged, capacity);
        self.ledger
            .settle(now_ns(), capacity, admin, groups.into_iter(), share);
    }

    /// Stages the accounts and, under `[fair_share]`, each owner's fair-share usage for the
    /// next commit.
    fn stage_usage(&mut self) {
        let names: Vec<Option<String>> = self
            .group_names()
            .into_iter()
            .map(|n| n.map(str::to_string))
            .collect();
        let names: Vec<Option<&str>> = names.iter().map(|n| n.as_deref()).collect();
        self.ledger.stage(&names);
        if self.config.fair_share.is_some() {
            self.stage_fair_usage();
        }
    }

    /// Stages each owner's fair-share usage (the admin's too) for the next commit.
    fn stage_fair_usage(&mut self) {
        let mut rows: Vec<(Option<String>, f64)> = self
            .users
            .groups()
            .map(|(n, g)| (Some(n.to_string()), self.view.fair_usage(Some(g))))
            .collect();
        rows.push((None, self.view.fair_usage(None)));
        let rows = rows.iter().map(|(n, u)| (n.as_deref(), *u)).collect();
        self.users.stage_fair_usage(now_ns() / 1_000_000, rows);
    }

    /// Stores the accounts and each owner's fair-share usage now (as the heartbeats do every
    /// [`crate::accounting::STORED_EVERY`]): when the server stops.
    pub fn store_usage(&mut self) -> Result<(), StateError> {
        self.settle_accounts();
        self.usage_stored = Some(std::time::Instant::now());
        self.stage_usage();
        self.commit()
    }

    /// User `name`'s fair-share usage: the share of the cluster its running work held,
    /// integrated over time in share-seconds and decayed with `[fair_share] half_life` (0
    /// without fair share); [`ADMIN`]: the admin's.
    pub fn fair_usage_of(&self, name: &str) -> f64 {
        if name == ADMIN {
            return self.view.fair_usage(None);
        }
        self.users
            .group(name)
            .map_or(0.0, |g| self.view.fair_usage(Some(g)))
    }

    /// Puts job `job` in `owner`'s group (the admin's jobs are in none): a batch job's
    /// applications, or a workflow (its running instances).
    pub(super) fn group_job(&mut self, job: u64, owner: &str) {
        if owner == ADMIN {
            return;
        }
        if self.ids.kind(job) == Some(crate::jobs::Kind::Workflow) {
            let g = self.users.group_of(owner);
            self.jobs.workflow.set_group(&mut self.view, job, g);
            return;
        }
        let Some(apps) = self.jobs.batch.apps_of(job) else {
            return;
        };
        let g = self.users.group_of(owner);
        for app in apps {
            // A retired application (its job purged) has nothing to count.
            let _ = self.view.set_app_group(hetsched_core::AppId(app), Some(g));
        }
    }

    /// `hetsched user limit NAME --max-cores N --max-memory S --max-gpus M`: user `name`'s
    /// running batch tasks and workflow instances hold at most the capped resources at once (0:
    /// no cap on one; a resource `change` leaves out keeps its cap). Tasks running keep what
    /// they hold; new ones start while the user is under the cap.
    pub fn on_limit_user(&mut self, name: &str, change: CapChange) -> Result<(), StateError> {
        if !self.users.exists(name) {
            return Err(StateError::NoUser(name.to_string()));
        }
        if change.is_empty() {
            return Err(StateError::Invalid(
                "a limit names at least one of max_cores, max_memory_bytes, max_gpus, shares, \
                 max_priority"
                    .to_string(),
            ));
        }
        let cap = change.applied_to(self.users.cap(name));
        self.store
            .transaction(|tx| Users::write_cap(tx, name, &cap))?;
        self.users.set_cap(name, cap);
        let g = self.users.group_of(name);
        self.view.set_group_cap(g, cap);
        // A raised cap may let waiting tasks start now, and chunks.
        self.wake(None);
        tracing::info!(
            user = name,
            max_cores = cap.cores,
            max_memory_bytes = cap.memory_bytes,
            max_gpus = cap.gpus,
            "user cap changed"
        );
        Ok(())
    }

    /// The wake-ups at the end of an event that freed room under user `name`'s cap, as a task
    /// of theirs ending does ([`State::mark_capped_work`], then every node's marks sent); with
    /// `freed` false, of an event that freed none. For the benchmark of what the cap's wake
    /// path costs each such event (`benches/cap_wake.rs`): a real event's store write and
    /// placement would hide it.
    #[doc(hidden)]
    pub fn wake_after_cap_room(&mut self, name: &str, freed: bool) {
        if freed {
            let g = self.users.group_of(name);
            let cap = self.view.group(g).cap;
            // The cap lifted and set again: the view notes the group's room grown, as it does
            // when work the group held ends (a lowered cap notes nothing).
            self.view.set_group_cap(g, Resources::default());
            self.view.set_group_cap(g, cap);
        }
        self.wake(None);
    }

    /// Marks for wake-up what may start now that the room under some users' caps grew in this
    /// event: the one place every such event goes through ([`State::wake`] calls it first).
    /// The view lists the capped groups whose room grew
    /// ([`hetsched_core::SchedulerView::take_capped_groups_freed`]: their work ended —
    /// finished, failed, cancelled, lost with its node, purged — or their cap rose or went).
    /// Nothing else marks their waiting work: it was held back by the cap, not by a node, and
    /// an idle agent beats once a minute, so without this it waited for the next idle beat (up
    /// to `idle_heartbeat_interval`) with nodes free. Each group's batch applications with
    /// tasks queued wake the nodes they fit on now, as many as the room admits tasks; its
    /// workflows the nodes holding their instances placed and not sent; its divisible jobs
    /// their agents' asks held open.
    pub(super) fn mark_capped_work(&mut self) {
        let mut freed = Vec::new();
        self.view.take_capped_groups_freed(&mut freed);
        if freed.is_empty() {
            return;
        }
        let view = &self.view;
        // Each group's own waiting applications (the view's index by group): an event pays for
        // the work of the users whose room grew, not for every user's waiting work.
        let pending: Vec<(u32, usize)> = freed
            .iter()
            .flat_map(|&g| view.pending_apps_in(g).map(move |a| (g, a)))
            .map(|(g, a)| {
                // A multi-node task's room is its nodes', not one request's: not bounded.
                if a.app.nodes > 1 {
                    return (a.app.id.0, a.pending.len());
                }
                let group = view.group(g);
                let room = [Variant::Cpu, Variant::Gpu]
                    .into_iter()
                    .filter_map(|v| a.app.request(v))
                    .map(|r| group.room_for(&r))
                    .max()
                    .unwrap_or(0);
                let tasks =
                    usize::try_from(room).map_or(a.pending.len(), |r| r.min(a.pending.len()));
                (a.app.id.0, tasks)
            })
            .collect();
        for (app, tasks) in pending {
            self.nodes.wakes.free(app, tasks);
        }
        for g in freed {
            self.jobs.workflow.wake_group(g);
        }
        self.wake_capped_chunk_asks();
    }

    /// `hetsched user limit NAME --shares N`: user `name`'s fair-share shares (1 to
    /// [`MAX_SHARES`]; Slurm's `Shares`): its usage is divided by them before users are ranked,
    /// so a user of 2 shares may use twice what a user of 1 does before it falls behind.
    pub fn on_share_user(&mut self, name: &str, shares: u32) -> Result<(), StateError> {
        if !self.users.exists(name) {
            return Err(StateError::NoUser(name.to_string()));
        }
        if !(1..=MAX_SHARES).contains(&shares) {
            return Err(StateError::Invalid(format!(
                "shares: {shares} is not 1 to {MAX_SHARES}"
            )));
        }
        self.store
            .transaction(|tx| Users::write_shares(tx, name, shares))?;
        self.users.set_shares(name, shares);
        let g = self.users.group_of(name);
        self.view.set_fair_shares(g, shares);
        tracing::info!(user = name, shares, "user shares changed");
        Ok(())
    }

    /// Every user with what its running tasks hold, its cap (0 in a dimension: none) and its
    /// fair-share usage (`None` without `[fair_share]`), and last the admin's row (what the live
    /// nodes hold outside every user's, no cap): O(users), for `/metrics`.
    pub fn user_usage_all(&self) -> Vec<(String, Resources, Resources, Option<f64>)> {
        let fair = self.config.fair_share.is_some();
        let mut all: Vec<_> = self
            .users
            .list()
            .map(|(name, _)| {
                (
                    name.to_string(),
                    self.user_held(name),
                    self.users.cap(name),
                    fair.then(|| self.fair_usage_of(name)),
                )
            })
            .collect();
        // The admin's own work: what the live nodes hold outside every user's group (as the
        // dashboard's Users panel shows it), so the holdings add up to what the nodes hold.
        all.push((
            ADMIN.to_string(),
            self.view.ungrouped_usage(),
            Resources::default(),
            fair.then(|| self.fair_usage_of(ADMIN)),
        ));
        all
    }

    /// What user `name`'s running batch tasks and workflow instances hold now.
    pub fn user_held(&self, name: &str) -> Resources {
        self.users
            .group(name)
            .map_or(Resources::default(), |g| self.view.group(g).usage)
    }

    /// The cores user `name`'s running batch tasks and workflow instances hold now.
    pub fn user_cores(&self, name: &str) -> u32 {
        self.user_held(name).cores
    }

    /// `hetsched user add NAME` (`rotate`: the user exists and gets a new token, its old one is
    /// refused from now on). Returns the token, which the store keeps only as its hash.
    pub fn on_add_user(&mut self, name: &str, rotate: bool) -> Result<String, StateError> {
        crate::users::check_name(name).map_err(StateError::Invalid)?;
        match (self.users.exists(name), rotate) {
            (true, false) => return Err(StateError::UserExists(name.to_string())),
            (false, true) => return Err(StateError::NoUser(name.to_string())),
            (false, false) if self.users.len() >= MAX_USERS => {
                return Err(StateError::Invalid(format!(
                    "this server holds {MAX_USERS} users, the most it takes: remove one first"
                )));
            }
            _ => {}
        }
        let now_ms = now_ns() / 1_000_000;
        let users = &mut self.users;
        let mut token = String::new();
        self.store.transaction(|tx| {
            token = users.put(tx, name, now_ms)?;
            Ok(())
        })?;
        self.users.put_committed(name, &token, now_ms);
        tracing::info!(user = name, rotated = rotate, "user token made");
        Ok(token)
    }

    /// `hetsched user remove NAME`: its token is refused from now on; its jobs stay its own and
    /// go on. Returns how many of them had not finished.
    pub fn on_remove_user(&mut self, name: &str) -> Result<u64, StateError> {
        if !self.users.exists(name) {
            return Err(StateError::NoUser(name.to_string()));
        }
        self.store.transaction(|tx| Users::delete(tx, name))?;
        self.users.delete_committed(name);
        if let Some(g) = self.users.group(name) {
            self.view.set_group_cap(g, Resources::default());
            self.view.set_fair_shares(g, 1);
            // Its caps are gone: what they held back may start now.
            self.wake(None);
        }
        let unfinished = self
            .list_users_counts()
            .remove(name)
            .map_or(0, |(_, unfinished)| unfinished);
        tracing::info!(user = name, unfinished, "user removed");
        Ok(unfinished)
    }

    /// Every user, by name.
    pub fn list_users(&self) -> Vec<UserEntry> {
        let mut counts = self.list_users_counts();
        self.users
            .list()
            .map(|(name, created_ms)| {
                let (jobs, unfinished_jobs) = counts.remove(name).unwrap_or_default();
                UserEntry {
                    name: name.to_string(),
                    created_ms,
                    jobs,
                    unfinished_jobs,
                    cap: self.users.cap(name),
                    held: self.user_held(name),
                    fair_usage: self.fair_usage_of(name),
                    shares: self.users.shares(name),
                    max_priority: self.users.max_priority(name),
                }
            })
            .collect()
    }

    /// `hetsched user limit NAME --max-priority N|none`: the highest priority user `name` may
    /// give its batch work, at submission (a job file's `priority`, `submit --priority`) and
    /// with `hetsched update --priority` — Slurm's per-QOS priority bound. With `preemption =
    /// "requeue"` it decides whose work a user's may stop. Work already submitted keeps its
    /// priority. `None`: no cap.
    pub fn on_priority_limit_user(
        &mut self,
        name: &str,
        max: Option<i32>,
    ) -> Result<(), StateError> {
        if !self.users.exists(name) {
            return Err(StateError::NoUser(name.to_string()));
        }
        self.store
            .transaction(|tx| Users::write_max_priority(tx, name, max))?;
        self.users.set_max_priority(name, max);
        tracing::info!(user = name, ?max, "user priority cap changed");
        Ok(())
    }

    /// Refuses `priority` for work of `owner` above the owner's cap (`hetsched user limit
    /// --max-priority`), naming it; the admin's work has none.
    pub fn check_priority(&self, owner: &str, priority: i32, what: &str) -> Result<(), StateError> {
        match self.users.max_priority(owner) {
            Some(max) if owner != crate::users::ADMIN && priority > max => {
                Err(StateError::Invalid(format!(
                    "{what}: priority {priority} is above {max}, the most user {owner} may give \
                     its work (`hetsched user limit {owner} --max-priority`, set by the admin)"
                )))
            }
            _ => Ok(()),
        }
    }

    /// `[fair_share] half_life` in ns, if fair share is on.
    pub fn fair_share_half_life_ns(&self) -> Option<u64> {
        self.config.fair_share.map(|f| f.half_life.0)
    }

    /// The users `caller` may see with what they hold, may hold and wait for (the dashboard's
    /// Users panel): for the admin (and the read-only token) every user by name, then the
    /// admin's own work as the user [`ADMIN`] (no caps; what the live nodes hold outside every
    /// user's group; 1 share; its jobs: those of no user, listed and not purged, unfinished
    /// when pending or running); for a user, its own row only. O(users + jobs): each job's
    /// state is a look-up ([`crate::jobs::JobKind::listed_state`]), no pending reason.
    pub fn users_overview(&self, caller: &Caller) -> Vec<UserOverview> {
        // Each owner's jobs: listed, pending, running.
        let mut jobs: std::collections::HashMap<&str, [u64; 3]> = Default::default();
        for (id, kind) in self.ids.from(0) {
            let Some(state) = self.jobs.of_kind(kind).listed_state(id) else {
                continue;
            };
            let n = jobs.entry(self.users.owner(id)).or_default();
            n[0] += 1;
            match state {
                "pending" => n[1] += 1,
                "running" => n[2] += 1,
                _ => {}
            }
        }
        let mut users: Vec<UserEntry> = self
            .list_users()
            .into_iter()
            .filter(|u| caller.admin || *u.name == *caller.name)
            .collect();
        if caller.admin {
            let [listed, pending, running] = jobs.get(ADMIN).copied().unwrap_or_default();
            users.push(UserEntry {
                name: ADMIN.to_string(),
                created_ms: 0,
                jobs: listed,
                unfinished_jobs: pending + running,
                cap: Resources::default(),
                held: self.view.ungrouped_usage(),
                fair_usage: self.fair_usage_of(ADMIN),
                shares: 1,
                max_priority: None,
            });
        }
        let fair = self.config.fair_share.is_some();
        users
            .into_iter()
            .map(|entry| {
                let [_, pending_jobs, running_jobs] =
                    jobs.get(entry.name.as_str()).copied().unwrap_or_default();
                UserOverview {
                    admin: entry.name == ADMIN,
                    fair_usage: fair.then_some(entry.fair_usage),
                    entry,
                    pending_jobs,
                    running_jobs,
                }
            })
            .collect()
    }

    /// Each owner's jobs held and those not finished.
    fn list_users_counts(&self) -> std::collections::HashMap<String, (u64, u64)> {
        let mut counts: std::collections::HashMap<String, (u64, u64)> = Default::default();
        for (job, owner) in self.users.owned() {
            // Each job as its listing says it now (what `users_overview` counts): the purge
            // history's record of finished jobs is brought up to date only every retention pass.
            let Some(state) = self
                .ids
                .kind(job)
                .and_then(|k| self.jobs.of_kind(k).listed_state(job))
            else {
                continue;
            };
            if self.is_purged(job) {
                continue;
            }
            let c = counts.entry(owner.to_string()).or_default();
            c.0 += 1;
            if matches!(state, "pending" | "running") {
                c.1 += 1;
            }
        }
        counts
    }
}
