//! Job kinds and the one dispatch path between them and the [`State`](crate::state::State).
//!
//! The state owns what every kind shares: the node registry ([`Nodes`]: specs, liveness, the
//! tasks each node runs), the one resource ledger of the cluster (the core's [`SchedulerView`]:
//! a kind that places work on a node takes the resources there, so two kinds never book the
//! same core twice), the store and its transaction (commit, roll back, pause on a full disk),
//! and the metrics. A *job kind* (today: [`batch`], [`divisible`], [`workflow`] and [`topology`])
//! owns its jobs and tasks and every rule about them. The state routes each event to the kind that
//! owns it; a kind never sees another
//! kind's tasks.
//!
//! # How a new kind plugs in
//!
//! 1. **Identity.** Add a variant to [`Kind`] (next free number). The ids a kind hands out for
//!    its tasks and [`TaskSpec`] keys carry the kind in their high byte
//!    (`id = (kind as u64) << KIND_SHIFT | n`, see [`Kind::id`]); batch is kind 0. The state
//!    finds the owner of a task with [`Kind::of`]. Job ids are small and shared by every kind:
//!    the state hands the kind the next id with the submission, and finds a job's kind in its
//!    map (`state/job_ids.rs`), rebuilt after a restart from [`JobKind::job_ids`].
//! 2. **Module.** Write `jobs/<kind>.rs` with a struct that implements [`JobKind`], add it as a
//!    field of [`Jobs`], list it in [`Jobs::all`] / [`Jobs::all_mut`], and build it in
//!    `State::from_snapshot` (see *restart* below).
//! 3. **Submission.** A kind has its own submission (a field of `SubmitRequest` in the kind's
//!    field range that selects it, or its own RPC); [`crate::convert`] turns it into the kind's
//!    own request type and `State` hands it to a `submit` function of the kind (one line in
//!    `state/mod.rs`). A submission is stored first (the kind writes its rows in one
//!    transaction through [`Store::transaction`]) and only then changes memory.
//! 4. **Handing work to a node.** On every heartbeat of a live node the state calls
//!    [`JobKind::on_heartbeat`] of every kind in [`Jobs::all_mut`] order. The kind decides what
//!    the node runs, takes the resources in [`Ctx::view`], records the task as running there
//!    with [`Nodes::started`], and offers each task to the [`Outbox`] as a [`Dispatch`] (with
//!    its [`TaskSpec`] the first time the node needs it, see [`Outbox::needs_spec`]). The
//!    outbox keeps the reply under [`REPLY_BUDGET`]: an offer it refuses stays with the kind
//!    for the next beat ([`Outbox::more`] makes the agent beat again at once).
//! 5. **Results and losses.** Each result in a heartbeat is acknowledged by the state and
//!    handed to its owner's [`JobKind::on_result`] (the kind checks the attempt and ignores old
//!    ones). For each task the agent says it runs the state asks [`JobKind::expects`]: if not,
//!    the agent is told to kill it. A task the node's [`Nodes`] entry lists as running but the
//!    heartbeat neither reports running nor finished — and every task of a node declared dead —
//!    goes to [`JobKind::on_lost`]. A kind calls [`Nodes::ended`] when its task leaves a node.
//!    An attempt not expected that the kind gave up for lost while its node was out of touch
//!    may be taken back ([`JobKind::resume`]; batch does when nothing started the task
//!    since), before the kill is decided; the log line of a node that comes back names what it
//!    gave away in the kind's words ([`JobKind::whereabouts`]).
//!    Work a kind has for a node *between* its heartbeats (new tasks, a kill, a message) is
//!    marked in [`Nodes::wakes`] (or handed over in [`JobKind::take_wakes`]); the state wakes
//!    those agents at the end of the event, and they beat at once.
//! 6. **Persistence.** A kind keeps what an event changed (its "dirty" rows) and writes it in
//!    [`JobKind::persist`], which the state calls for every kind inside ONE store transaction
//!    after the event; [`JobKind::committed`] follows a successful commit. If the commit fails
//!    (a full disk) the state rebuilds every kind from the store — the rollback — and pauses
//!    dispatch until the store accepts writes; nothing was acknowledged meanwhile.
//! 7. **Restart.** `State::from_snapshot` builds each kind from the store (batch reads its
//!    part of [`crate::store::Snapshot`]; a new kind reads its own tables through
//!    [`Store::conn`]) and restores its running tasks into the view and [`Nodes::started`]. A
//!    kind's memory-only facts (batch: the back-off) are carried across a rollback in
//!    `State::reload`.
//! 8. **Listings and housekeeping.** `GetJob`/`ListTasks`/`Cancel` are routed by the job id's
//!    kind, looked up in the state's map of job ids ([`JobKind::job`], [`JobKind::tasks_page`],
//!    [`JobKind::cancel`]); `ListJobs` walks that map in id order and asks each job's kind for
//!    its entry ([`JobKind::jobs_page`] from the job's id, one long). `ListTasks` of job 0 (every
//!    job) walks the kinds in [`Kind`] order: its cursor is a task id, so its kind says where
//!    the listing is, and when one kind's listing ends the next cursor is the next kind's
//!    `Kind::id(0)`. [`JobKind::housekeeping`] runs every reaper tick (batch: jobs waiting
//!    on others; divisible: silent agents).
//! 9. **Purge.** `hetsched purge` and the `[retention]` rule drop finished jobs of every kind in
//!    one store transaction (all or none): the state picks them among every kind's
//!    [`JobKind::finished_jobs`] (named ones checked by [`JobKind::check_purge`]), each kind
//!    deletes its rows in [`JobKind::purge_rows`], leaving a tombstone that keeps its id and
//!    submission key taken, and forgets them in [`JobKind::purged`] once the transaction
//!    committed.
//!
//! Every type crossing this contract is the server's own ([`crate::state::types`]); protobuf
//! types stay in [`crate::convert`] and [`crate::service`].

pub mod batch;
pub mod divisible;
pub mod gate;
pub(crate) mod stopping;
pub mod topology;
pub mod workflow;

use crate::metrics::Metrics;
use crate::state::StateError;
use crate::state::nodes::Nodes;
use crate::state::types::{
    BackedOffApp, Dispatch, HeartbeatReply, HeartbeatReport, JobInfo, JobsPage, RunningAttempt,
    RunningTask, TaskCounts, TaskResult, TaskSpec, TasksPage,
};
use crate::state::wakes::Wakes;
use crate::store::{Store, StoreError};
use hetsched_core::{NodeId, Resources, SchedulerView};
use std::collections::HashSet;

pub use batch::Batch;
pub use divisible::Divisible;
pub use topology::Topology;
pub use workflow::Workflows;

/// `cancel --tasks` and `signal --tasks` of job `job`: refuses the first of `indices` (`None`:
/// every task, none to check) that no task picked had (`seen`), naming the application or
/// workflow task they were picked in (`within`), if one was.
pub(crate) fn check_indices_seen(
    job: u64,
    indices: Option<&[u32]>,
    seen: &HashSet<u32>,
    within: Option<String>,
) -> Result<(), StateError> {
    match indices
        .unwrap_or_default()
        .iter()
        .find(|i| !seen.contains(i))
    {
        Some(missing) => Err(StateError::Invalid(format!(
            "job {job} has no task with index {missing}{}",
            within.map_or(String::new(), |w| format!(" in {w}"))
        ))),
        None => Ok(()),
    }
}

/// Where and when an attempt offloaded to an ANode really ran, as its result says (spec 01):
/// [`offload_run`]. `None`: not said (an agent that predates the fields), or not believed; the
/// kind then keeps what it had (the dispatch's devices, the NNode's start).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct OffloadRun<'r> {
    /// Its start on the ANode (the ANode's clock).
    pub started_ns: Option<u64>,
    /// The ANode's devices it ran on.
    pub devices: Option<&'r [u32]>,
}

/// What result `r` of an attempt offloaded to ANode `anode`, dispatched with `booked` devices,
/// says of where and when it ran there. The batch and workflow kinds both list it, so the one
/// check lives here: the devices are taken only when there are some, no more than it booked
/// (the ANode gives at least one, so one even when it booked none) and each is a device the
/// ANode has — the result comes from the NNode's agent, and a confused or forged report must
/// not put devices the ANode lacks into the listings and the store.
pub(crate) fn offload_run<'r>(
    nodes: &Nodes,
    anode: u32,
    booked: usize,
    r: &'r TaskResult,
) -> OffloadRun<'r> {
    let has = nodes.get(anode).map_or(0, |n| n.spec.accelerators.len());
    let d = &r.offload_devices;
    OffloadRun {
        started_ns: (r.offload_started_ns > 0).then_some(r.offload_started_ns),
        devices: (!d.is_empty()
            && d.len() <= booked.max(1)
            && d.iter().all(|&x| (x as usize) < has))
        .then_some(d.as_slice()),
    }
}

/// A kind's change counter, which calls held open on the kind wait on
/// ([`crate::service::held_event`]). Cloned into the kind rebuilt after a rollback, so nothing
/// waiting on it is stranded.
#[derive(Clone, Debug)]
pub struct Changes(std::sync::Arc<tokio::sync::watch::Sender<u64>>);

impl Default for Changes {
    fn default() -> Self {
        Changes(std::sync::Arc::new(tokio::sync::watch::Sender::new(0)))
    }
}

impl Changes {
    /// A receiver that sees every later change.
    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<u64> {
        self.0.subscribe()
    }

    /// Wakes every call waiting on the counter.
    pub fn bump(&self) {
        self.0.send_modify(|g| *g = g.wrapping_add(1));
    }
}

/// The longest a call held open on a kind goes without a look ([`look_period`]).
const MAX_LOOK_PERIOD: std::time::Duration = std::time::Duration::from_secs(5);

/// How often a call held open on a kind is looked at again: a quarter of the dead timeout, at
/// most 5 s, since each look is what notes a held agent alive in its kind.
pub fn look_period(dead_timeout: std::time::Duration) -> std::time::Duration {
    (dead_timeout / 4).min(MAX_LOOK_PERIOD)
}

/// Largest heartbeat reply the server builds (encoded bytes): a quarter of the agents' 4 MiB
/// decoding limit, so no job, however large its commands, makes a reply an agent cannot read.
pub const REPLY_BUDGET: usize = 1 << 20;

/// Most spec keys read from one heartbeat's `known_specs`.
pub const MAX_KNOWN_SPECS: usize = 1024;

/// Where the kind sits in an id: the high byte.
pub const KIND_SHIFT: u32 = 56;

/// The job kinds; the number is the high byte of every id the kind hands out.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(u8)]
pub enum Kind {
    /// Arrays of independent tasks with CPU/GPU variants ([`batch`]).
    #[default]
    Batch = 0,
    /// One load cut into chunks planned from measured speeds ([`divisible`]).
    Divisible = 1,
    /// Task graphs with data-flow dependencies ([`workflow`]).
    Workflow = 13,
    /// Stream topologies: long-running worker processes ([`topology`]). Its jobs are listed by
    /// `hetsched topology list`, not by `ListJobs`, so it is not in [`Kind::ALL`].
    Topology = 2,
}

impl Kind {
    /// Every kind, in listing order.
    pub const ALL: &'static [Kind] = &[Kind::Batch, Kind::Divisible, Kind::Workflow];

    /// The kind that owns id `id` (a task, job or spec key), if any.
    pub fn of(id: u64) -> Option<Kind> {
        match id >> KIND_SHIFT {
            0 => Some(Kind::Batch),
            1 => Some(Kind::Divisible),
            13 => Some(Kind::Workflow),
            2 => Some(Kind::Topology),
            _ => None,
        }
    }

    /// Its name in messages (`batch`, `divisible`, `workflow`, `topology`).
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Batch => "batch",
            Kind::Divisible => "divisible",
            Kind::Workflow => "workflow",
            Kind::Topology => "topology",
        }
    }

    /// The id `n` of this kind.
    pub fn id(self, n: u64) -> u64 {
        ((self as u64) << KIND_SHIFT) | (n & ((1 << KIND_SHIFT) - 1))
    }
}

/// The shared parts of the state a kind may use while it handles an event.
pub struct Ctx<'a> {
    /// The cluster's one resource ledger (and the batch applications' queues).
    pub view: &'a mut SchedulerView,
    /// The node registry.
    pub nodes: &'a mut Nodes,
    /// The store: reads at any time; writes only for store-first events (submission, purge)
    /// — everything else goes through [`JobKind::persist`].
    pub store: &'a mut Store,
    /// Event counters.
    pub metrics: &'a Metrics,
    /// Now, ns since the epoch.
    pub now: u64,
}

/// The shared parts of the state a listing reads.
pub struct Read<'a> {
    /// The resource ledger.
    pub view: &'a SchedulerView,
    /// The node registry.
    pub nodes: &'a Nodes,
    /// The users: each job's owner, and the owner's group in `view` (its caps, what it holds).
    pub users: &'a crate::users::Users,
    /// The store (rows not held in memory).
    pub store: &'a Store,
    /// The nodes that could run each application shape, found once per read (a listing of
    /// many jobs explains why each waits from it: [`batch::Capable`]).
    pub capable: batch::Capable,
    /// The automatic allocation queues: work no live node can run may wait for their agents.
    pub allocation: &'a [crate::allocation::QueueConfig],
    /// Those of them an operator paused.
    pub paused_queues: &'a std::collections::BTreeSet<String>,
    /// Since when the store refuses writes (a full disk): nothing is dispatched meanwhile.
    pub store_paused_since: Option<std::time::Instant>,
    /// Those whose last look at the batch system failed (a submission refused, say).
    pub failing_queues: std::collections::BTreeSet<String>,
    /// What the agents of each queue have, once one has registered: work that does not fit is
    /// not work for the queue.
    pub queue_capacity: std::collections::BTreeMap<String, hetsched_core::model::Resources>,
}

/// The work a heartbeat reply carries, kept under [`REPLY_BUDGET`].
pub struct Outbox<'r> {
    reply: &'r mut HeartbeatReply,
    known: HashSet<u64>,
    sent: HashSet<u64>,
    size: usize,
}

impl<'r> Outbox<'r> {
    /// The outbox of `reply` (already holding its acknowledgements and kills) for an agent that
    /// holds the specs `known_specs`.
    pub fn new(reply: &'r mut HeartbeatReply, known_specs: &[u64]) -> Self {
        let size = crate::convert::reply_wire_len(reply);
        Outbox {
            known: known_specs.iter().take(MAX_KNOWN_SPECS).copied().collect(),
            sent: HashSet::new(),
            size,
            reply,
        }
    }

    /// Whether spec `key` must go with a task (the agent does not hold it and this reply does
    /// not carry it yet).
    pub fn needs_spec(&self, key: u64) -> bool {
        !self.known.contains(&key) && !self.sent.contains(&key)
    }

    /// Adds `d` (and `spec`, if given) to the reply, or hands `d` back if the reply would exceed
    /// [`REPLY_BUDGET`] (a reply always takes its first assignment).
    // The refused dispatch is handed back whole (rare: once per reply at its size cap).
    #[allow(clippy::result_large_err)]
    pub fn offer(&mut self, d: Dispatch, spec: Option<TaskSpec>) -> Result<(), Dispatch> {
        // Field tag and length prefix: at most 6 bytes each.
        let bytes = crate::convert::dispatch_wire_len(&d)
            + 6
            + spec
                .as_ref()
                .map_or(0, |s| crate::convert::spec_wire_len(s) + 6);
        if self.size + bytes > REPLY_BUDGET && !self.reply.assignments.is_empty() {
            return Err(d);
        }
        self.size += bytes;
        if let Some(spec) = spec {
            self.sent.insert(spec.key);
            self.reply.specs.push(spec);
        }
        self.reply.assignments.push(d);
        Ok(())
    }

    /// Tells the agent that a task it runs (or holds queued) now runs by spec `r.spec`, with
    /// that spec if the agent does not hold it. Counted in the reply's size but never refused:
    /// a few dozen bytes per task the node runs, and a spec per application at most, well
    /// within the agents' decoding limit beyond [`REPLY_BUDGET`].
    pub fn respec(&mut self, r: crate::state::types::Respec, spec: Option<TaskSpec>) {
        if let Some(spec) = spec {
            self.size += crate::convert::spec_wire_len(&spec) + 6;
            self.sent.insert(spec.key);
            self.reply.specs.push(spec);
        }
        self.size += 32;
        self.reply.respecs.push(r);
    }

    /// Tells the agent to stop attempt `t` (a preempted task), before it starts this reply's
    /// assignments: those placed on the cores `t` holds wait in its queue until they are free.
    /// Never refused: a few bytes, one per task stopped. An attempt this very reply sends (the
    /// policy placed it, then preemption stopped it for a waiting task) is taken out of the
    /// reply instead: it never reaches the agent, which would otherwise start it after the kill
    /// found nothing to stop.
    pub fn kill(&mut self, t: crate::state::types::TaskRef) {
        let sent = self.reply.assignments.len();
        self.reply
            .assignments
            .retain(|d| (d.task_id, d.attempt) != (t.task_id, t.attempt));
        if self.reply.assignments.len() < sent {
            return;
        }
        self.size += 16;
        self.reply.kill.push(t);
    }

    /// Tells the node it is a member of running multi-node task `t` (whose command runs on
    /// another node): its agent counts it as work, so that neither its idle timeout nor a
    /// draining shutdown ends it under the task. Never refused: a few bytes, and a node is a
    /// member of one such task at a time (it is held whole).
    pub fn member_of(&mut self, t: crate::state::types::TaskRef) {
        self.size += 16;
        self.reply.member_of.push(t);
    }

    /// Tells the node that a multi-node task being gathered holds it whole: its agent counts
    /// that as work for its idle timeout. Never refused: 3 bytes.
    pub fn held_for_gathering(&mut self) {
        self.size += 3;
        self.reply.gathering = true;
    }

    /// Adds a PCDDB message from a workflow's launch node to the reply.
    pub fn balance(&mut self, m: crate::state::types::BalanceEnvelope) {
        self.reply.balance.push(m);
    }

    /// Tells the node it balances PCDDB workflow `j`.
    pub fn pcddb(&mut self, j: crate::state::types::PcddbJob) {
        self.reply.pcddb.push(j);
    }

    /// Some work did not fit: the agent should heartbeat again at once.
    pub fn more(&mut self) {
        self.reply.more = true;
    }
}

/// How a job stands for the batch jobs that run after it (`submit --after`, `--after-any`,
/// `--after-notok`), whatever its kind ([`JobKind::job_end`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JobEnd {
    /// Pending or running.
    Unfinished,
    /// Every task (unit, instance) succeeded.
    Completed,
    /// Ended with a failed task.
    Failed,
    /// Cancelled (as a whole, or some of its tasks one by one).
    Cancelled,
    /// Purged: it had finished, and how is not kept.
    Purged,
    /// Set aside unfinished at a start (`hetsched server --set-aside`, [`crate::set_aside`]):
    /// it will never end, so it counts as cancelled, and messages say it was set aside. (One
    /// set aside finished answers the end it had.)
    SetAside,
}

/// The units of the running divisible loads ([`JobKind::running_units`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RunningUnits {
    /// Running jobs with units.
    pub jobs: u64,
    /// Their units done.
    pub done: u64,
    /// Their units in all.
    pub units: u64,
}

/// What the state asks of every job kind (see the module documentation for the whole contract).
pub trait JobKind: Send {
    /// Which kind this is.
    fn kind(&self) -> Kind;

    /// A result from `node` for one of this kind's tasks. The default, like those of
    /// [`JobKind::expects`], [`JobKind::on_lost`] and [`JobKind::on_heartbeat`], is for a kind
    /// whose tasks never travel in heartbeats (divisible chunks, topology executors): nothing
    /// of it is ever reported, expected, lost or handed out there.
    fn on_result(
        &mut self,
        _cx: &mut Ctx,
        _node: NodeId,
        _r: &TaskResult,
    ) -> Result<(), StateError> {
        Ok(())
    }

    /// Whether `node` should be running this attempt (if not, the agent is told to kill it).
    fn expects(&self, _node: NodeId, _t: &RunningTask) -> bool {
        false
    }

    /// Whether attempt `attempt` of task `task`, which `node` reports running although the
    /// kind does not expect it there, is one [`JobKind::resume`] would take back: an attempt
    /// the kind gave up for lost (its node was declared dead) whose task has not started
    /// anywhere since. While the store refuses writes such an attempt is not killed, so that
    /// the first beat after the pause can take it back.
    fn resumable(&self, _node: NodeId, _task: u64, _attempt: u32) -> bool {
        false
    }

    /// `node` reports running attempt `attempt` of task `task`, which the kind gave up for
    /// lost: whether it takes the attempt back, running there again as the same attempt
    /// (its resources booked in [`Ctx::view`] and the task noted on the node with
    /// [`Nodes::started`]). `false`: the agent is told to kill it, as any attempt not expected.
    /// The state asks before any kind fills the node in the same beat, so the room the attempt
    /// holds on a node that was dead is still free. Kinds that never take an attempt back
    /// answer `false`.
    fn resume(&mut self, _cx: &mut Ctx, _node: NodeId, _task: u64, _attempt: u32) -> bool {
        false
    }

    /// Where task `task` stands now, in words for the log of a node that came back (the
    /// attempts it gave away: `runs on `b` as attempt 2`, `cancelled`), when attempt
    /// `attempt`, which `node` ran or finished, is not one the kind keeps. `None`: the kind
    /// keeps that attempt (it runs there, or its result was taken), or cannot say.
    fn whereabouts(
        &self,
        _nodes: &Nodes,
        _node: NodeId,
        _task: u64,
        _attempt: u32,
    ) -> Option<String> {
        None
    }

    /// What running task `task` holds on its node, and the owner group it counts against
    /// (`None`: the admin's): what the accounts leave out while its agent holds it queued
    /// ([`crate::state::prefetch::Queued`]). `None` when it is not a running task of this kind
    /// that holds part of a node (kinds whose tasks are never queued).
    fn held(&self, _view: &SchedulerView, _task: u64) -> Option<(Option<u32>, Resources)> {
        None
    }

    /// A task that was running on a node is gone (the node lost it or was declared dead).
    fn on_lost(&mut self, _cx: &mut Ctx, _task: u64, _reason: &str) -> Result<(), StateError> {
        Ok(())
    }

    /// A task assigned in a heartbeat reply its agent never read (it gave up on the call): it
    /// never ran, so a kind that counts lost attempts against a limit should not count this
    /// one. By default it is lost as any other ([`JobKind::on_lost`]).
    fn on_undelivered(&mut self, cx: &mut Ctx, task: u64) -> Result<(), StateError> {
        self.on_lost(cx, task, crate::state::UNDELIVERED)
    }

    /// A heartbeat from `node` (its results and losses already handed over): hand it work
    /// through `out` — unless `open` is false (the node is drained or its agent shuts down).
    fn on_heartbeat(
        &mut self,
        _cx: &mut Ctx,
        _node: NodeId,
        _report: &HeartbeatReport,
        _open: bool,
        _out: &mut Outbox,
    ) -> Result<(), StateError> {
        Ok(())
    }

    /// Whether an event changed something [`JobKind::persist`] must write.
    fn has_changes(&self) -> bool;

    /// Writes what changed since the last commit, inside the state's transaction.
    fn persist(&self, tx: &rusqlite::Transaction) -> Result<(), StoreError>;

    /// Whether a job of this kind finished in the event being committed (asked before
    /// [`JobKind::committed`]): with a `[retention]` rule, the next retention pass is then
    /// planned.
    fn finished_in_event(&self) -> bool {
        false
    }

    /// The transaction committed: forget what was written.
    fn committed(&mut self);

    /// At the end of each event: the nodes this kind has something for before their next
    /// heartbeat, marked in `wakes` ([`crate::state::wakes`]). A kind may also mark them as it
    /// goes, through `Ctx::nodes.wakes` (batch does); this is for marks made where no `Ctx` is at
    /// hand (workflow: what its machines send).
    fn take_wakes(&mut self, _wakes: &mut Wakes) {}

    /// At every pass of the reaper (batch: retention; divisible: losing silent agents).
    fn housekeeping(&mut self, _cx: &mut Ctx) -> Result<(), StateError> {
        Ok(())
    }

    /// The first instant this kind's [`JobKind::housekeeping`] may have something to do, if it
    /// knows one; the reaper sleeps until the earliest of every kind's and the nodes'
    /// ([`crate::state::alarm`]). None: nothing until an event says so.
    fn housekeeping_due(&self) -> Option<std::time::Instant> {
        None
    }

    /// The server did not listen for a while (`State::server_stalled`): a kind that judges
    /// its agents' silence itself (divisible agents, topology nodes) counts none of `stall`
    /// against them ([`crate::state::stall::Grace`]). Others have nothing to do.
    fn server_stalled(&mut self, _stall: crate::state::stall::Stall) {}

    /// This kind's tasks by state.
    fn counts(&self) -> TaskCounts;

    /// The units of this kind's running jobs, done and in all, and how many such jobs: a
    /// divisible load's, whose units [`JobKind::counts`] does not count. Other kinds have none.
    fn running_units(&self) -> RunningUnits {
        RunningUnits::default()
    }

    /// How many jobs of this kind were ever submitted.
    fn job_count(&self) -> u64;

    /// How many of them were purged (counted in [`JobKind::job_count`], listed no more).
    fn purged_count(&self) -> u64 {
        0
    }

    /// Job `id`'s tasks not finished yet (pending or running), for its owner's
    /// `max_unfinished_tasks_per_user`; 0 for a job of another kind or none.
    fn unfinished_tasks(&self, _id: u64) -> u64 {
        0
    }

    /// The bytes job `id`'s submission stored (its file, and a divisible job's input), for its
    /// owner's `max_stored_bytes_per_user`; 0 for a purged job, one of another kind or none.
    fn stored_bytes(&self, _id: u64) -> u64 {
        0
    }

    /// Job `id`'s tasks kept in the store, finished ones too, for its owner's
    /// `max_stored_tasks_per_user`; 0 for a purged job, one of another kind or none.
    fn stored_tasks(&self, _id: u64) -> u64 {
        0
    }

    /// The state job `id`'s listing gives it (`pending`, `running`, `completed`, `failed` or
    /// `cancelled`, as [`JobInfo::state`]), without the rest of its entry (no pending reason):
    /// cheap, for counts over every job (the dashboard's users). `None`: not a listed job of
    /// this kind (purged, or a kind that lists none).
    fn listed_state(&self, _id: u64) -> Option<&str> {
        None
    }

    /// The ids of every job of this kind (the state's map of job ids to kinds is rebuilt from
    /// them after a restart).
    fn job_ids(&self) -> Vec<u64> {
        Vec::new()
    }

    /// One page of this kind's jobs from id `cursor` on (0 = the first), at most `limit`, in id
    /// order; `next_cursor` 0 when this kind has no more.
    fn jobs_page(&self, rd: &Read, cursor: u64, limit: usize) -> JobsPage;

    /// One job.
    fn job(&self, rd: &Read, id: u64) -> Result<JobInfo, StateError>;

    /// One page of a job's tasks from task id `cursor` (`Kind::id(0)` = the first), at most
    /// `limit` (job = `Kind::id(0)`: every job of the kind); `next_cursor` 0 at the end.
    fn tasks_page(
        &self,
        rd: &Read,
        job: u64,
        cursor: u64,
        limit: usize,
    ) -> Result<TasksPage, StateError>;

    /// Cancels a job: no more of its tasks run (running ones are killed at their nodes' next
    /// heartbeat); `why` is what its tasks say (`cancelled`, or `cancelled by the admin` when
    /// the admin cancelled a user's job). Returns how many tasks it cancelled.
    fn cancel(&mut self, cx: &mut Ctx, job: u64, why: &str) -> Result<u64, StateError>;

    /// `hetsched cancel JOB --tasks INDICES [--app NAME]`: cancels the tasks of `job` whose
    /// listed index is one of `indices` (in application or task `app` only, if given), each
    /// saying `why` (as [`JobKind::cancel`]); the rest of the job goes on. Returns how many it
    /// cancelled. Kinds without such tasks refuse.
    fn cancel_tasks(
        &mut self,
        _cx: &mut Ctx,
        job: u64,
        _app: Option<&str>,
        _indices: &[u32],
        _why: &str,
    ) -> Result<u64, StateError> {
        Err(StateError::Invalid(format!(
            "job {job} is a {} job; --tasks picks tasks of batch and workflow jobs (cancel the whole job)",
            self.kind().as_str()
        )))
    }

    /// The jobs named `name` that have not ended (`submit --singleton` runs after them).
    fn unfinished_named(&self, _name: &str) -> Vec<u64> {
        Vec::new()
    }

    /// `hetsched signal JOB [--tasks INDICES] [--app NAME]`: the attempts of `job` running now
    /// — of its tasks whose listed index is in `indices` (all: `None`), of application or task
    /// `app` only, if given — each with the node whose agent runs its command. An application
    /// or an index the job does not have is refused, naming it. A divisible job's are its
    /// chunks out to agents (`chunk_of`; on `nodes`' node of each agent). Kinds whose work does
    /// not run as tasks or chunks of agents refuse.
    fn running_attempts(
        &self,
        job: u64,
        _app: Option<&str>,
        _indices: Option<&[u32]>,
        _nodes: &Nodes,
    ) -> Result<Vec<RunningAttempt>, StateError> {
        Err(StateError::Invalid(format!(
            "job {job} is a {} job; `signal` reaches the running tasks of batch jobs and \
             workflows and the chunks of divisible jobs",
            self.kind().as_str()
        )))
    }

    /// Accelerator sharing (spec 01): attempt `attempt` of task `task`, just sent to an NNode,
    /// runs on ANode `anode`. A kind that stores it writes it with the dispatch, in the event's
    /// one transaction, so listings name the ANode after a restart too; the others leave it to
    /// the state's memory.
    fn offloaded(&mut self, _task: u64, _attempt: u32, _anode: u32) {}

    /// The job task `task` belongs to, if this kind knows it: its owner's account is what an
    /// offload of the task runs as, and what the offload's ticket names ([`crate::tickets`]).
    /// A kind that offloads none answers `None` (a ticket then names the admin's account, which
    /// a user's task would not run as: the ANode refuses it).
    fn job_of_task(&self, _task: u64) -> Option<u64> {
        None
    }

    /// The spec of key `key` that task `task` was just dispatched with, as this kind made it
    /// (its `run_as` not filled in yet): what an offload's ticket covers ([`crate::tickets`]).
    /// A kind that offloads none answers `None` (the ticket then covers an empty spec, which
    /// no shipped task matches: the ANode refuses it).
    fn dispatched_spec(&self, _task: u64, _key: u64) -> Option<TaskSpec> {
        None
    }

    /// The offload this kind stored for task `task`'s latest attempt: (attempt, ANode), read
    /// back by the state after a restart or a rollback.
    fn offloaded_to(&self, _task: u64) -> Option<(u32, u32)> {
        None
    }

    /// Whether chunk `chunk` of `job` is out to the agent called `agent`: a pending signal for
    /// it still has somewhere to go. Only kinds whose work runs as chunks (divisible jobs) hold
    /// any.
    fn chunk_out_to(&self, _job: u64, _chunk: u64, _agent: &str) -> bool {
        false
    }

    /// `hetsched resubmit JOB --failed`: the job's failed tasks run again, each as a new
    /// attempt with its retries counted afresh. Returns how many were queued. Kinds whose
    /// failures are handled while they run refuse.
    fn resubmit_failed(&mut self, _cx: &mut Ctx, job: u64) -> Result<u64, StateError> {
        Err(StateError::Invalid(format!(
            "job {job} is a {} job: resubmit runs failed tasks of batch and workflow jobs; submit it again",
            self.kind().as_str()
        )))
    }

    /// `hetsched resubmit JOB --cancelled`: the tasks cancelled one by one (`cancel JOB
    /// --tasks`) run again, each as a new attempt (HyperQueue's `hq job resubmit --filter
    /// canceled`). Returns how many were queued. Kinds without such tasks refuse.
    fn resubmit_cancelled(&mut self, _cx: &mut Ctx, job: u64) -> Result<u64, StateError> {
        Err(StateError::Invalid(format!(
            "job {job} is a {} job: resubmit --cancelled runs cancelled tasks of batch jobs and \
             workflows; submit it again",
            self.kind().as_str()
        )))
    }

    /// This kind's finished jobs that a purge may drop, with when each finished (ns since the
    /// epoch): what `purge --older-than` / `--keep` and the `[retention]` rule choose among,
    /// across kinds. Purged jobs are not listed; kinds without history to drop list none.
    fn finished_jobs(&self) -> Vec<(u64, u64)> {
        Vec::new()
    }

    /// Whether job `id` of this kind may be purged now: [`StateError::NoJob`] when it is
    /// unknown or purged already, [`StateError::Invalid`] (saying what still runs) when it has
    /// not finished.
    fn check_purge(&self, id: u64) -> Result<(), StateError> {
        Err(StateError::Invalid(format!(
            "job {id} is a {} job: purge drops finished batch, divisible and workflow jobs",
            self.kind().as_str()
        )))
    }

    /// Purges `ids` (finished jobs of this kind, checked) in the store, inside the purge's
    /// transaction: marks each job row purged, leaving a tombstone so that no job id or
    /// submission key is ever given twice, and deletes at most `budget` of their many rows
    /// (task, chunk, instance rows; `budget` is lessened by those). Returns how many tasks
    /// (units, instances) the jobs had and, per job, the rows the purge deletes afterwards in
    /// bounded steps (`crate::state::purging`). Kinds without such history purge nothing.
    fn purge_rows(
        &self,
        _tx: &rusqlite::Transaction,
        _ids: &[u64],
        _budget: &mut u64,
    ) -> Result<(u64, Vec<crate::state::purging::Left>), StoreError> {
        Ok((0, Vec::new()))
    }

    /// The purge of `ids` committed: forget them (memory, and files the kind keeps).
    fn purged(&mut self, _cx: &mut Ctx, _ids: &[u64]) {}

    /// Whether job `id` of this kind was purged (its tombstone stays): agents delete what such
    /// a job left in their work directories.
    fn is_purged(&self, _id: u64) -> bool {
        false
    }

    /// Jobs of this kind that wait before they start (`submit --after`, `--hold`, `--begin`;
    /// [`gate`]): each one's id and what it waits for, in id order. The state decides on them
    /// after every event ([`JobKind::start_waiting`], [`JobKind::cancel_waiting`]). Batch jobs
    /// wait their own way (`batch/after`) and list none here.
    fn waiting(&self) -> Vec<(u64, gate::Gate)> {
        Vec::new()
    }

    /// Whether [`JobKind::waiting`] lists any (cheap: asked after every event).
    fn any_waiting(&self) -> bool {
        false
    }

    /// The first job waiting job `id` names that had not ended, as the state just found (its
    /// pending reason).
    fn set_waiting_for(&mut self, _id: u64, _job: Option<u64>) {}

    /// What waiting job `id` waited for allows it: it starts now.
    fn start_waiting(&mut self, _cx: &mut Ctx, _id: u64) {}

    /// Waiting job `id` can never start (`why`: a job it runs after ended as it does not
    /// allow): cancelled, its tasks saying why. Returns how many tasks it cancelled.
    fn cancel_waiting(&mut self, cx: &mut Ctx, id: u64, why: &str) -> Result<u64, StateError> {
        self.cancel(cx, id, why)
    }

    /// `hetsched hold JOB` / `release JOB` of a job that waits before it starts. Returns how
    /// many tasks it holds or lets go (0: it already was so).
    fn hold_waiting(&mut self, id: u64, _hold: bool) -> Result<u64, StateError> {
        Err(StateError::Invalid(format!(
            "job {id} is a {} job; hold and release apply to batch jobs, workflows and divisible \
             jobs",
            self.kind().as_str()
        )))
    }

    /// `hetsched update JOB --begin TIME` of a job that waits before it starts.
    fn set_begin(&mut self, id: u64, _begin_ms: u64) -> Result<(), StateError> {
        Err(StateError::Invalid(format!(
            "job {id} is a {} job; --begin applies to batch jobs, workflows and divisible jobs",
            self.kind().as_str()
        )))
    }

    /// The earliest begin time still to come among its deferred jobs (the reaper wakes then).
    fn next_begin(&self) -> Option<std::time::Instant> {
        None
    }

    /// Whether a job of this kind ended, or runs again, in this event (since the last commit):
    /// only then may a job waiting for it be released or cancelled, so the state decides on
    /// waiting jobs again only then (or when asked: a submission, a hold, a begin time); and
    /// only then are the clients waiting for a job's end woken (`State::job_ends`). A kind must
    /// say so for every way its jobs end, or those wait for their calls' deadline.
    fn ends_in_event(&self) -> bool {
        self.finished_in_event()
    }

    /// How many of job `id`'s tasks were stopped (cancelled while they ran) and may still run
    /// their processes ([`stopping`]): a client waiting on the job waits for them too
    /// (`State::job_over`). Kinds whose work is not stopped that way have none.
    fn stopping(&self, _id: u64) -> u32 {
        0
    }

    /// How job `id` of this kind stands, for batch jobs that run after it (`None`: not a job of
    /// this kind, or one no job may run after). Asked after every event that changed this
    /// kind while a batch job names one of its jobs, so it should be cheap while the job runs.
    fn job_end(&self, _id: u64) -> Option<JobEnd> {
        None
    }

    /// This kind's applications kept off `node`, for the node listing.
    fn backed_off(&self, _node: u32) -> Vec<BackedOffApp> {
        Vec::new()
    }

    /// What of this kind holds `node` whole, for the node listing (a multi-node task); empty:
    /// nothing.
    fn held_for(&self, _node: u32) -> String {
        String::new()
    }
}

/// Every job kind the server runs.
pub struct Jobs {
    /// Batch jobs.
    pub batch: Batch,
    /// Divisible jobs.
    pub divisible: Divisible,
    /// Workflows.
    pub workflow: Workflows,
    /// Stream topologies.
    pub topology: Topology,
}

impl Jobs {
    /// Every kind, in [`Kind`] order (a new kind adds one line here and in `all_mut`).
    pub fn all(&self) -> Vec<&dyn JobKind> {
        vec![&self.batch, &self.divisible, &self.topology, &self.workflow]
    }

    /// Every kind, in [`Kind`] order.
    pub fn all_mut(&mut self) -> Vec<&mut dyn JobKind> {
        vec![
            &mut self.batch,
            &mut self.divisible,
            &mut self.topology,
            &mut self.workflow,
        ]
    }

    /// How job `id` of kind `kind` stands for the jobs that run after it
    /// ([`JobKind::job_end`]), except that a job set aside at a start answers the end the
    /// set-aside recorded ([`Batch::purged_end`]), not [`JobEnd::Purged`]: its rows went as a
    /// purge's, but an unfinished one never finished. `None`: no such job, or one no job may
    /// run after.
    pub fn job_end(&self, kind: Kind, id: u64) -> Option<JobEnd> {
        match self.of_kind(kind).job_end(id)? {
            JobEnd::Purged => Some(self.batch.purged_end(id)),
            end => Some(end),
        }
    }

    /// The kind `kind`.
    pub fn of_kind(&self, kind: Kind) -> &dyn JobKind {
        match kind {
            Kind::Batch => &self.batch,
            Kind::Divisible => &self.divisible,
            Kind::Workflow => &self.workflow,
            Kind::Topology => &self.topology,
        }
    }

    /// The kind `kind`.
    pub fn of_kind_mut(&mut self, kind: Kind) -> &mut dyn JobKind {
        match kind {
            Kind::Batch => &mut self.batch,
            Kind::Divisible => &mut self.divisible,
            Kind::Workflow => &mut self.workflow,
            Kind::Topology => &mut self.topology,
        }
    }

    /// The kind that owns id `id`.
    pub fn owner(&self, id: u64) -> Option<&dyn JobKind> {
        match Kind::of(id)? {
            Kind::Batch => Some(&self.batch),
            Kind::Divisible => Some(&self.divisible),
            Kind::Workflow => Some(&self.workflow),
            Kind::Topology => Some(&self.topology),
        }
    }

    /// The kind that owns id `id`.
    pub fn owner_mut(&mut self, id: u64) -> Option<&mut dyn JobKind> {
        match Kind::of(id)? {
            Kind::Batch => Some(&mut self.batch),
            Kind::Divisible => Some(&mut self.divisible),
            Kind::Workflow => Some(&mut self.workflow),
            Kind::Topology => Some(&mut self.topology),
        }
    }
}

/// `4 cores, 16 GiB, 1 GPU (k20)`: a request in words (no memory or devices when none).
pub(crate) fn request_in_words(r: &hetsched_core::Resources, kind: Option<&str>) -> String {
    let mut s = format!("{} core{}", r.cores, if r.cores == 1 { "" } else { "s" });
    if r.memory_bytes > 0 {
        s += &format!(", {}", bytes(r.memory_bytes));
    }
    if r.gpus > 0 {
        s += &format!(", {} GPU{}", r.gpus, if r.gpus == 1 { "" } else { "s" });
        if let Some(k) = kind {
            s += &format!(" ({k})");
        }
    }
    s
}

/// Why no task of some work could ever start under its user's caps `cap` (0 in a dimension: no
/// cap), however little the user's other work held: `needs` is what one task holds each way
/// it may run (a batch application's variants, labelled `cpu`/`gpu`; a workflow task's one
/// request, unlabelled), and none fits the cap even alone. `None` when one fits. The words
/// name the need, the cap and the command that changes it: `a task needs 2 cores, more than
/// the 1 core user `alice` may hold at once (`hetsched user limit alice --max-cores`)`.
pub(crate) fn beyond_cap(
    cap: Resources,
    needs: &[(&str, Resources)],
    user: &str,
) -> Option<String> {
    use hetsched_core::CappedResource;
    use hetsched_core::text::count;
    let alone = hetsched_core::model::view::GroupState {
        cap,
        usage: Resources::default(),
    };
    let mut parts = Vec::new();
    let mut flags: Vec<&str> = Vec::new();
    for (label, need) in needs {
        let by = alone.capped_by(need)?;
        let (need, most, flag) = match by {
            CappedResource::Cores => (
                count(need.cores, "core"),
                count(cap.cores, "core"),
                "--max-cores",
            ),
            CappedResource::Memory => (
                format!("{} of memory", bytes(need.memory_bytes)),
                format!("{} of memory", bytes(cap.memory_bytes)),
                "--max-memory",
            ),
            CappedResource::Gpus => (
                count(need.gpus, "GPU"),
                count(cap.gpus, "GPU"),
                "--max-gpus",
            ),
        };
        let who = if label.is_empty() {
            "a task".to_string()
        } else {
            format!("its {label} variant")
        };
        parts.push(format!("{who} needs {need}, more than the {most}"));
        if !flags.contains(&flag) {
            flags.push(flag);
        }
    }
    if parts.is_empty() {
        return None;
    }
    Some(format!(
        "{} user `{user}` may hold at once (`hetsched user limit {user} {}`)",
        parts.join(" and "),
        flags.join(" ")
    ))
}

/// Why work of a user at its cap waits, in the words every kind uses: `its user's running
/// {holders} hold C of the M cores the user may hold at once` (memory and GPUs likewise), for
/// `group`, the user's group in the view, capped `by`.
pub(crate) fn capped_words(
    group: &hetsched_core::model::view::GroupState,
    by: hetsched_core::CappedResource,
    holders: &str,
) -> String {
    use hetsched_core::CappedResource;
    use hetsched_core::text::count;
    // The cap with its noun agreeing (`1 GPU`, `2 GPUs`): before, `of the 1 GPUs`.
    let (held, cap) = match by {
        CappedResource::Cores => (
            group.usage.cores.to_string(),
            count(group.cap.cores, "core"),
        ),
        CappedResource::Memory => (
            bytes(group.usage.memory_bytes),
            format!("{} of memory", bytes(group.cap.memory_bytes)),
        ),
        CappedResource::Gpus => (group.usage.gpus.to_string(), count(group.cap.gpus, "GPU")),
    };
    format!(
        "its user's running {holders} {held} of the {cap} the user may hold at once \
         (`hetsched user limit`)"
    )
}

/// Bytes in binary units, as job files write them (`512 MiB`, `1.5 GiB`).
pub(crate) fn bytes(b: u64) -> String {
    const UNITS: [&str; 7] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    let mut v = b as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if v.fract() == 0.0 {
        format!("{v:.0} {}", UNITS[u])
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

#[cfg(test)]
mod words_tests {
    use super::*;
    use hetsched_core::Resources;

    #[test]
    fn requests_read_as_job_files_write_them() {
        assert_eq!(request_in_words(&Resources::new(1, 0, 0), None), "1 core");
        assert_eq!(
            request_in_words(&Resources::new(8, 64 << 30, 2), Some("a100")),
            "8 cores, 64 GiB, 2 GPUs (a100)"
        );
        assert_eq!(bytes(1536 << 20), "1.5 GiB");
        assert_eq!(bytes(512), "512 B");
        // As `hetsched job` and `update` say it (`1.0 PiB`), not `1024 TiB`.
        assert_eq!(bytes(1 << 50), "1 PiB");
        assert_eq!(bytes(u64::MAX), "16 EiB");
    }
}
