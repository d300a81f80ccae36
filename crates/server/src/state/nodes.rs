//! The node registry every job kind shares: what each node offers, whether it is alive, who its
//! agent is, and which tasks (of any kind) the server has dispatched there; and the events about
//! nodes themselves — registration, drain/resume, removal, and declaring silent nodes dead.

use super::stall::{Grace, Stalls};
use super::types::{Drained, GpuUtilisation, Leave, NodeInfo, Registered, Registration};
use super::{RESTART_GRACE, State, StateError};
use crate::store::{NodeRow, StoreError};
use hetsched_core::{AppId, Node, NodeId, SchedulerView, Variant};
use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};
use tracing::{info, warn};

/// The most bytes of a drain's reason (`hetsched node drain --reason`).
pub const MAX_DRAIN_REASON: usize = 256;

/// One node as the server knows it.
#[derive(Debug)]
pub struct NodeRec {
    /// What it offers.
    pub spec: Node,
    /// Heartbeating (or within its grace after a restart).
    pub alive: bool,
    /// Its last registration or heartbeat, or when its agent's last `AwaitWork` call ended.
    pub last_seen: Instant,
    /// The same moment by the wall clock, Unix ms (0: never heard, as far as the store says). Kept
    /// in the store when the node is declared dead or leaves and when the server stops
    /// ([`crate::store::Store::put_heard`]), so a restart still says when a dead node was heard.
    pub heard_ms: u64,
    /// `AwaitWork` calls its agent holds open now. While one is open and no task runs here, the
    /// node lives without heartbeats (an idle agent beats seldom: `idle_heartbeat_interval`).
    pub awaiting: u32,
    /// Whether the node has registered or heartbeated since this server started (nodes restored
    /// from the store get a longer grace period to come back after a restart).
    pub seen: bool,
    /// Tasks (of every kind) the server has dispatched here and not seen finish.
    pub running: HashSet<u64>,
    /// Its last reported disk read rate.
    pub read_bps: f64,
    /// Its last reported free memory.
    pub available_memory: u64,
    /// Free space on its work directory's disk, and its agent's floor, as last reported.
    pub disk: super::types::DiskReport,
    /// Its last reported device utilisation.
    pub gpus: Vec<GpuUtilisation>,
    /// The identity of the agent that registered the node (empty: restored from a store written
    /// before identities; the next registration sets it).
    pub identity: String,
    /// Removed by an operator (`hetsched node remove`): dead for good, unlisted, its name free.
    pub removed: bool,
    /// Drained by an operator (`hetsched node drain`): no new work until `node resume`. Stored
    /// (`store::operator`), so a restarted server keeps it.
    pub drained: bool,
    /// Why and since when it is drained (default while it is not).
    pub drain_note: crate::store::DrainNote,
    /// An operator asked its agent to stop (`hetsched node stop`): `Some(drain)`. Stored, and
    /// told at each heartbeat until the agent leaves or a new one registers.
    pub stop: Option<bool>,
    /// The agent's last heartbeat said it is shutting down: no new work.
    pub draining: bool,
    /// When its agent stops the tasks still running (an agent started with a `time_limit`, as
    /// its last heartbeat said); `None`: no end. Tasks with a longer time limit are not placed
    /// here: the view holds it as well ([`Nodes::set_end`], [`Nodes::set_now`]).
    pub ends_at: Option<Instant>,
    /// Its agent left on purpose, and why (then not alive): listed only with `--all`. Stored
    /// (`store::operator`), so a restarted server does not wait for it.
    pub left: Option<Leave>,
    /// The agent's host name (a multi-node task's node file lists it); empty: the node's name.
    /// Stored with its description.
    pub hostname: String,
    /// The agent's work directory, as it registered (empty: not said). Stored with its
    /// description, so a restarted server names its tasks' output files before it hears from
    /// it again, and for good once it is dead.
    pub work_dir: String,
    /// The agent's hetsched version, as it last registered (empty: unknown, an agent that
    /// predates saying it). Stored with its description: an agent registers again only when
    /// it restarts, so a restarted server would otherwise list every node as unknown.
    pub version: String,
    /// The rack its agent named as it last registered (empty: the default rack, or a row stored
    /// before racks were kept). Stored with its description: heartbeats say it too, but a node
    /// not heard since the server started (a dead one) was listed in a rack of no one's
    /// naming, `rack0`.
    pub rack: String,
    /// Why its stored description was past a registration bound when the server read it
    /// ([`crate::limits::stored_node_problem`], naming the field): it is then kept out of the
    /// scheduler (not alive, its figures past a bound replaced by none, [`out_of_bounds_stand_in`])
    /// until its agent registers again, which checks the figures anew; `None`: within bounds.
    pub out_of_bounds: Option<String>,
    /// Kept out at a restart ([`NodeRec::out_of_bounds`]) and not declared dead since: the work
    /// recorded on it is that of a node not heard from since the restart, given back as that
    /// node's is once the restart grace is over ([`NodeRec::dies_at`]) — although the node is
    /// not alive, which alone would keep the dead-node check from ever looking at it. Cleared
    /// when it is declared dead (its work given back once) or its agent registers again.
    pub kept_out_awaiting_return: bool,
    /// What the server's stalls during its silence gave it ([`State::server_stalled`]): its
    /// silence is counted from [`Grace::silent_from`], so a stall of the server itself never
    /// counts against its agent.
    pub grace: Grace,
    /// The tasks assigned here in heartbeat replies its agent has not yet said it read, with
    /// each reply's seq ([`Nodes::read_up_to`]). Empty for an agent that predates saying it.
    pub unread: Vec<(u64, u64)>,
}

impl NodeRec {
    /// What an MPI launcher on another node reaches this one by: its agent's host name, else
    /// the node's name.
    pub fn host(&self) -> &str {
        if self.hostname.is_empty() {
            &self.spec.name
        } else {
            &self.hostname
        }
    }
}

impl NodeRec {
    /// Why the server does not hold the node as a working one, if it does not: removed, its
    /// agent left, kept out since a restart (its stored description past a registration
    /// bound), or declared dead (not alive). Such a node takes no work of any kind: batch
    /// dispatch skips it (it is not alive in the view) and its agent's asks for divisible
    /// chunks are refused ([`State::on_next_chunk`](super::State::on_next_chunk)) until a
    /// heartbeat brings it back or, for one kept out, a registration. `None`: it works.
    pub fn not_working(&self) -> Option<String> {
        if self.removed {
            Some("it was removed by an operator (`hetsched node remove`)".into())
        } else if let Some(problem) = &self.out_of_bounds {
            Some(format!(
                "it is kept out since the server's restart, its stored description being past \
                 a registration bound ({problem}): its agent must register again"
            ))
        } else if let Some(why) = self.left {
            Some(format!("its agent left ({})", why.as_str()))
        } else if !self.alive {
            Some("it was declared dead (its heartbeats stopped): a heartbeat brings it back".into())
        } else {
            None
        }
    }

    /// Whether the node is open to new work while it works: not drained by an operator, its
    /// agent not shutting down (`draining`) and not asked to stop (`hetsched node stop`). Its
    /// work already there finishes.
    pub fn open_to_new_work(&self) -> bool {
        !self.drained && !self.draining && self.stop.is_none()
    }

    /// Whether the node takes new work: it works ([`NodeRec::not_working`]) and is open to new
    /// work ([`NodeRec::open_to_new_work`]). The one rule of every kind: batch preemption and
    /// multi-node gatherings, divisible chunks.
    pub fn takes_work(&self) -> bool {
        self.not_working().is_none() && self.open_to_new_work()
    }

    /// When the node is declared dead if nothing more is heard from it; None while it cannot
    /// be: dead (or removed) already, or living by an open `AwaitWork` with no task here.
    /// Nodes not heard from since this server started get [`RESTART_GRACE`] dead timeouts (at
    /// least 5 s) — a node kept out at the restart too, although not alive
    /// ([`NodeRec::kept_out_awaiting_return`]): the work recorded on it is given back then.
    pub fn dies_at(&self, timeout: Duration) -> Option<Instant> {
        // An agent holding `AwaitWork` open lives (its connection does; TCP keepalive checks
        // it) — but only while no task runs here: an agent with tasks beats every
        // `heartbeat_interval`, and one whose beats stop while its connection stays up must
        // still give its tasks back.
        let lives_by_its_call = self.awaiting > 0 && self.running.is_empty();
        if (!self.alive && !self.kept_out_awaiting_return) || lives_by_its_call {
            return None;
        }
        let limit = if self.seen {
            timeout
        } else {
            (timeout * RESTART_GRACE).max(Duration::from_secs(5))
        };
        Some(self.grace.silent_from(self.last_seen) + limit)
    }

    /// Heard from now (a registration, a heartbeat, an agent's call).
    pub fn heard(&mut self) {
        self.last_seen = Instant::now();
        self.heard_ms = super::now_ns() / 1_000_000;
    }

    fn new(spec: Node, identity: String, removed: bool, seen: bool) -> Self {
        NodeRec {
            spec,
            alive: !removed,
            last_seen: Instant::now(),
            heard_ms: 0,
            awaiting: 0,
            seen,
            running: HashSet::new(),
            read_bps: 0.0,
            available_memory: 0,
            disk: Default::default(),
            gpus: Vec::new(),
            identity,
            removed,
            drained: false,
            drain_note: Default::default(),
            stop: None,
            draining: false,
            ends_at: None,
            left: None,
            hostname: String::new(),
            work_dir: String::new(),
            version: String::new(),
            rack: String::new(),
            out_of_bounds: None,
            kept_out_awaiting_return: false,
            grace: Grace::default(),
            unread: Vec::new(),
        }
    }
}

/// What a node whose stored description is past a registration bound
/// ([`crate::limits::stored_node_problem`]) offers until its agent registers again: each figure
/// past a bound replaced (cores and memory by none, speeds and bandwidths by a registration's
/// defaults, devices by none when any is past a bound, attributes by none when they are not
/// a registration's), so that no sum over the nodes can overflow; the node is kept not alive
/// besides. Figures within bounds are kept, so that an agent registering again with the same
/// devices has its other figures taken ([`State::redescribe`]).
fn out_of_bounds_stand_in(mut spec: Node) -> Node {
    use crate::limits::{MAX_BANDWIDTH, MAX_CORES, MAX_MEMORY, MAX_SPEED};
    let within = |v: f64, max: f64| v.is_finite() && v > 0.0 && v <= max;
    if spec.cores > MAX_CORES {
        spec.cores = 0;
    }
    if spec.memory_bytes > MAX_MEMORY {
        spec.memory_bytes = 0;
    }
    if !within(spec.core_speed, MAX_SPEED) {
        spec.core_speed = 1.0;
    }
    if !within(spec.disk_read_bw, MAX_BANDWIDTH) {
        spec.disk_read_bw = 128e6;
    }
    if !within(spec.net_bw, MAX_BANDWIDTH) {
        spec.net_bw = 125e6;
    }
    if crate::limits::devices_problem(&spec).is_some() {
        spec.accelerators.clear();
    }
    if crate::limits::attributes(&spec.name, &spec.attributes).is_err() {
        spec.attributes.clear();
    }
    spec
}

/// The accelerator devices node `rec` adds to [`Nodes::live_devices`]: its own if it is live
/// and not removed, else none.
fn live_devices_of(rec: &NodeRec) -> u64 {
    if rec.alive && !rec.removed {
        rec.spec.accelerators.len() as u64
    } else {
        0
    }
}

/// An agent's call that the server holds open and that counts as the agent's sign of life while
/// it is open ([`State::presence`]): an idle agent then costs one call per hold, not a beat or a
/// look every fraction of the dead timeout. All of an agent's calls share its connection, so a
/// stopped agent or a vanished host ends them together.
#[derive(Clone, Debug)]
pub enum Presence {
    /// `AwaitWork` of the node with this id: the node lives while no task runs there.
    Node(u32),
    /// `NextChunk` of the agent of this name holding no chunk: present in the divisible kind.
    Chunks(String),
    /// `SyncWorkers` of the node of this name running no worker: alive in the topology kind.
    Workers(String),
}

/// Every node ever registered, by id (ids are dense and never reused).
#[derive(Debug, Default)]
pub struct Nodes {
    recs: Vec<NodeRec>,
    by_name: HashMap<String, u32>,
    /// Batch tasks handed to nodes beyond their free cores (issue 10, [`super::prefetch`]).
    pub prefetch: super::prefetch::Prefetch,
    /// Agents waiting for work, and what this event woke ([`super::wakes`]).
    pub wakes: super::wakes::Wakes,
    /// The scheduler view's clock: nanoseconds since this instant ([`Nodes::set_now`]).
    clock: Clock,
    /// What the nodes not removed offer in all ([`Nodes::room_for`]).
    offered: Offered,
    /// Accelerator devices the live nodes not removed have ([`Nodes::live_devices`]): kept at
    /// every change of a node's liveness, removal or devices, which go through [`Nodes::admit`],
    /// [`Nodes::set_alive`], [`Nodes::set_spec`] and [`Nodes::set_removed`] for that, because
    /// every event's settle of the accounts reads it (counted over every node, it was most of
    /// an idle heartbeat's cost on 1,000 nodes). Checked against a fresh count in debug builds.
    live_devices: u64,
    /// Times a live node stopped being live (declared dead, its agent gone, removed), counted
    /// in the same places ([`Nodes::departures`]).
    departures: u64,
    /// Times a node was added or became or stopped being live (heartbeating and not removed)
    /// ([`Nodes::liveness_generation`]).
    liveness_generation: u64,
    /// The nodes whose liveness, removal, description, end or reported figures changed since
    /// the last [`Nodes::take_changed`]: noted in the same places, at [`Nodes::set_end`] and
    /// at each beat ([`Nodes::note_beat`]).
    changed: hetsched_core::model::NodeList,
    /// When each live node was last heard, staged for the next commit ([`Nodes::stage_heard`]).
    heard_staged: Vec<(u32, u64)>,
    /// The last heartbeat reply's seq ([`Nodes::next_reply_seq`]).
    reply_seq: u64,
    /// The server's stalls so far ([`State::server_stalled`]).
    stalls: Stalls,
}

/// What a node's agent can have seen of the tasks assigned to it ([`Nodes::read_up_to`]).
#[derive(Debug, Default)]
pub struct Unread {
    /// Assigned in replies it will never read (it gave up on their calls): if it does not run
    /// them, they go back to waiting without counting an attempt.
    pub never: HashSet<u64>,
    /// Assigned in replies newer than the one its beat names: not yet known to the agent when
    /// it sent the beat, so their absence says nothing.
    pub pending: HashSet<u64>,
}

/// Cores, memory and devices summed over nodes, wider than the scheduler view's totals so that
/// a sum past them is seen, not wrapped; and how many nodes have no device of their own (the
/// accelerator binding may show each with the devices of the ANodes it reaches).
#[derive(Clone, Copy, Debug, Default)]
struct Offered {
    cores: u64,
    memory: u128,
    devices: u64,
    bare: u64,
}

impl Offered {
    fn of(spec: &Node) -> Self {
        Offered {
            cores: u64::from(spec.cores),
            memory: u128::from(spec.memory_bytes),
            devices: spec.accelerators.len() as u64,
            bare: u64::from(spec.accelerators.is_empty()),
        }
    }

    fn plus(self, o: Offered) -> Self {
        Offered {
            cores: self.cores + o.cores,
            memory: self.memory + o.memory,
            devices: self.devices + o.devices,
            bare: self.bare + o.bare,
        }
    }

    fn minus(self, o: Offered) -> Self {
        Offered {
            cores: self.cores.saturating_sub(o.cores),
            memory: self.memory.saturating_sub(o.memory),
            devices: self.devices.saturating_sub(o.devices),
            bare: self.bare.saturating_sub(o.bare),
        }
    }

    /// The most devices the scheduler's view may count in all once the binding shows the nodes
    /// without devices with those they reach: their own devices, plus for each node without
    /// any at most `reach` of them ([`State::device_reach`](super::State::device_reach)) and
    /// never more than all there are.
    fn seen_devices(self, reach: u64) -> u128 {
        u128::from(self.devices) + u128::from(self.bare) * u128::from(self.devices.min(reach))
    }
}

/// The origin of the scheduler view's clock ([`SchedulerView::now`]), so the nodes' ends are
/// placed on it once and only the time now moves.
#[derive(Clone, Copy, Debug)]
struct Clock(Instant);

impl Default for Clock {
    fn default() -> Self {
        Clock(Instant::now())
    }
}

impl Clock {
    fn at(self, t: Instant) -> u64 {
        t.saturating_duration_since(self.0).as_nanos() as u64
    }
}

impl Nodes {
    /// Stages, for the next commit, when each live node was last heard: the heartbeats write
    /// nothing for it, so a server that crashes (no [`State::store_heard`] at stop) would
    /// otherwise restart knowing nothing newer than its last planned stop. Staged with the
    /// accounts ([`crate::accounting::STORED_EVERY`]), so a crash loses at most that much.
    pub(super) fn stage_heard(&mut self) {
        self.heard_staged = self
            .recs
            .iter()
            .enumerate()
            .filter(|(_, n)| n.alive && !n.removed && n.heard_ms > 0)
            .map(|(id, n)| (id as u32, n.heard_ms))
            .collect();
    }

    /// Whether the next commit has last-heard times to write.
    pub(super) fn has_heard_staged(&self) -> bool {
        !self.heard_staged.is_empty()
    }

    /// Writes the staged last-heard times inside the state's transaction.
    pub(super) fn persist_heard(&self, tx: &rusqlite::Transaction) -> Result<(), StoreError> {
        crate::store::Store::put_heard_in(tx, &self.heard_staged)
    }

    /// The staged last-heard times were written (or lost with a rolled-back commit: the next
    /// period stages them again).
    pub(super) fn heard_committed(&mut self) {
        self.heard_staged.clear();
    }

    /// The seq of a new heartbeat reply: above every earlier one, and at least the time in µs,
    /// so a restarted server's never meet those an agent read from the one before.
    pub fn next_reply_seq(&mut self) -> u64 {
        self.reply_seq = (self.reply_seq + 1).max(super::now_ns() / 1_000);
        self.reply_seq
    }

    /// Node `id`'s agent sent a beat after reading reply `read` (0: unknown, an agent that
    /// predates saying it: everything sent counts as read, as before). An agent reads at most
    /// the reply of each call it makes, in order, and gives up on a call (a timeout) for good:
    /// the tasks of replies before `read` that it still holds unread it never read; those of
    /// replies after it it had not read yet when it sent the beat.
    pub fn read_up_to(&mut self, id: u32, read: u64) -> Unread {
        let mut out = Unread::default();
        let Some(rec) = self.recs.get_mut(id as usize) else {
            return out;
        };
        if read == 0 {
            rec.unread.clear();
            return out;
        }
        rec.unread.retain(|&(seq, task)| {
            if seq < read {
                out.never.insert(task);
            } else if seq > read {
                out.pending.insert(task);
            }
            seq > read
        });
        out
    }

    /// Reply `seq` to node `id`'s agent assigns `tasks`: unread until a beat says otherwise.
    pub fn sent(&mut self, id: u32, seq: u64, tasks: impl IntoIterator<Item = u64>) {
        if let Some(rec) = self.recs.get_mut(id as usize) {
            rec.unread.extend(tasks.into_iter().map(|t| (seq, t)));
        }
    }

    /// Node `id`.
    pub fn get(&self, id: u32) -> Option<&NodeRec> {
        self.recs.get(id as usize)
    }

    /// Node `id`.
    pub fn get_mut(&mut self, id: u32) -> Option<&mut NodeRec> {
        self.recs.get_mut(id as usize)
    }

    /// How many nodes were ever registered.
    pub fn len(&self) -> usize {
        self.recs.len()
    }

    /// Whether none was.
    pub fn is_empty(&self) -> bool {
        self.recs.is_empty()
    }

    /// Every node, by id.
    pub fn iter(&self) -> impl Iterator<Item = &NodeRec> {
        self.recs.iter()
    }

    /// Refuses node `name` described as `spec` (in place of node `except`'s description, if
    /// given) if the cluster's cores, memory or devices in all would pass what the scheduler's
    /// totals hold (`u32` cores and devices, `u64` bytes): 65,537 agents of 65,536 cores
    /// overflowed the view's sum. Devices count as the view may come to see them, each node
    /// without its own with up to `reach` of the ANodes' ([`Offered::seen_devices`]): the
    /// binding adds those to the view's total after registration, where nothing can refuse
    /// them. Every node not removed counts, alive or not: a dead one may come back.
    pub fn room_for(
        &self,
        name: &str,
        except: Option<u32>,
        spec: &Node,
        reach: u64,
    ) -> Result<(), StateError> {
        let mut all = self.offered.plus(Offered::of(spec));
        if let Some(old) = except.and_then(|id| self.recs.get(id as usize)) {
            all = all.minus(Offered::of(&old.spec));
        }
        let over = if all.cores > u64::from(u32::MAX) {
            Some(format!("{} cores; at most {} in all", all.cores, u32::MAX))
        } else if all.memory > u128::from(u64::MAX) {
            Some(format!(
                "{} bytes of memory; at most {} (16 EiB) in all",
                all.memory,
                u64::MAX
            ))
        } else if all.devices > u64::from(u32::MAX) {
            Some(format!(
                "{} accelerators; at most {} in all",
                all.devices,
                u32::MAX
            ))
        } else if all.seen_devices(reach) > u128::from(u32::MAX) {
            Some(format!(
                "{} accelerators as the scheduler may see them ({} on nodes that have them, and \
                 {} nodes without any, which the accelerator binding may each show with up to \
                 {} of them); at most {} in all",
                all.seen_devices(reach),
                all.devices,
                all.bare,
                all.devices.min(reach),
                u32::MAX
            ))
        } else {
            None
        };
        match over {
            Some(over) => Err(StateError::Invalid(format!(
                "node `{name}` would bring the cluster to {over} (`hetsched node remove` \
                 removes dead nodes)"
            ))),
            None => Ok(()),
        }
    }

    /// Counts a new node (or one read back from the store) in what the nodes offer in all.
    fn offer(&mut self, spec: &Node) {
        self.offered = self.offered.plus(Offered::of(spec));
    }

    /// The id of the node named `name` (removed nodes give their names up).
    pub fn by_name(&self, name: &str) -> Option<u32> {
        self.by_name.get(name).copied()
    }

    /// The attributes of the node named `name` (with `gpu` where it has accelerators), sorted;
    /// none for a name no agent registered.
    pub fn attributes_of(&self, name: &str) -> Vec<String> {
        self.by_name(name)
            .and_then(|id| self.get(id))
            .map(|n| n.spec.all_attributes())
            .unwrap_or_default()
    }

    /// Whether the node named `name` is closed to new work while it works: drained (`hetsched
    /// node drain`), its agent shutting down, or asked to stop ([`NodeRec::open_to_new_work`]).
    pub fn is_drained(&self, name: &str) -> bool {
        self.by_name(name)
            .and_then(|id| self.get(id))
            .is_some_and(|n| !n.open_to_new_work())
    }

    /// Why the node named `name` does not work ([`NodeRec::not_working`]); `None` when it does,
    /// or when no node has that name (the agent's identity check refuses that one).
    pub fn not_working(&self, name: &str) -> Option<String> {
        self.by_name(name)
            .and_then(|id| self.get(id))
            .and_then(NodeRec::not_working)
    }

    /// How long the agent of node `name` may still run work (its heartbeats' time left);
    /// `None`: no end, or no such node.
    pub fn time_left(&self, name: &str) -> Option<Duration> {
        let end = self.by_name(name).and_then(|id| self.get(id))?.ends_at?;
        Some(end.saturating_duration_since(Instant::now()))
    }

    /// The name of node `id` ("" if none).
    pub fn name(&self, id: u32) -> &str {
        self.get(id).map_or("", |n| n.spec.name.as_str())
    }

    /// Task `task` now runs on `node`.
    pub fn started(&mut self, node: NodeId, task: u64) {
        if let Some(n) = self.recs.get_mut(node.index()) {
            n.running.insert(task);
        }
    }

    /// Task `task` no longer runs on `node`.
    pub fn ended(&mut self, node: NodeId, task: u64) {
        if let Some(n) = self.recs.get_mut(node.index()) {
            n.running.remove(&task);
        }
        self.prefetch.queued.forget(task);
    }

    /// Accelerator devices the live nodes have (each once: not the ANodes' devices a bound
    /// NNode is seen with). O(1): kept as nodes change ([`Nodes::live_devices_afresh`] counts
    /// them).
    pub fn live_devices(&self) -> u32 {
        let kept = u32::try_from(self.live_devices).unwrap_or(u32::MAX);
        debug_assert_eq!(
            kept,
            self.live_devices_afresh(),
            "the live devices kept differ from those counted"
        );
        kept
    }

    /// [`Nodes::live_devices`] counted over every node.
    pub fn live_devices_afresh(&self) -> u32 {
        let all: u64 = self.recs.iter().map(live_devices_of).sum();
        u32::try_from(all).unwrap_or(u32::MAX)
    }

    /// Adds node `rec` (the next id), counting its devices if it is live.
    fn admit(&mut self, rec: NodeRec) {
        self.live_devices += live_devices_of(&rec);
        self.liveness_generation += 1;
        self.changed.note(NodeId(self.recs.len() as u32));
        self.recs.push(rec);
    }

    /// Changes node `id` by `change`, keeping [`Nodes::live_devices`] in step.
    fn change(&mut self, id: u32, change: impl FnOnce(&mut NodeRec)) {
        let Some(rec) = self.recs.get_mut(id as usize) else {
            return;
        };
        let before = live_devices_of(rec);
        let live = |rec: &NodeRec| rec.alive && !rec.removed;
        let was_live = live(rec);
        change(rec);
        let after = live_devices_of(rec);
        self.live_devices = self.live_devices.saturating_sub(before) + after;
        if was_live && !live(rec) {
            self.departures += 1;
        }
        if was_live != live(rec) {
            self.liveness_generation += 1;
        }
        self.changed.note(NodeId(id));
    }

    /// How many times a live node has stopped being live since this registry was built: a
    /// reader that keeps something of the live nodes (the PCDDB address book) checks it again
    /// only when this moved, rather than at every event.
    pub fn departures(&self) -> u64 {
        self.departures
    }

    /// Moves whenever a node is added or becomes or stops being live (heartbeating and not
    /// removed): a reader that keeps something computed over the live nodes (the PCDDB
    /// proximity clusters) need not compare it with them again while this stays the same.
    pub fn liveness_generation(&self) -> u64 {
        self.liveness_generation
    }

    /// Node `id`'s agent beat: its reported figures (its disk among them) are rewritten.
    pub fn note_beat(&mut self, id: u32) {
        self.changed.note(NodeId(id));
    }

    /// Moves into `into` (emptied first) the nodes whose liveness, removal, description, end
    /// or reported figures may have changed since the last call, each once: a reader that
    /// keeps what the nodes offer (the workflows' masks, `jobs/workflow/masks`) looks at these
    /// rather than at every node. One reader: taking empties the list.
    pub fn take_changed(&mut self, into: &mut Vec<NodeId>) {
        self.changed.take(into);
    }

    /// Node `id` is alive (heartbeating) or not.
    pub(super) fn set_alive(&mut self, id: u32, alive: bool) {
        self.change(id, |rec| rec.alive = alive);
    }

    /// Node `id` is described by `spec` from now on.
    fn set_spec(&mut self, id: u32, spec: Node) {
        self.change(id, |rec| rec.spec = spec);
    }

    /// Node `id` is removed (`hetsched node remove`).
    fn set_removed(&mut self, id: u32) {
        self.change(id, |rec| rec.removed = true);
    }

    /// Rebuilds a node from its stored row.
    pub(super) fn restore(&mut self, row: NodeRow) -> Result<&NodeRec, StoreError> {
        let StoredNode {
            spec,
            hostname,
            work_dir,
            agent_version,
            agent_rack,
        } = serde_json::from_str(&row.spec)
            .map_err(|e| StoreError::Corrupt(format!("node {}: {e}", row.id)))?;
        if spec.id != NodeId(row.id) || row.id as usize != self.recs.len() {
            return Err(StoreError::Corrupt(format!(
                "node {} has id {}",
                row.id, spec.id
            )));
        }
        // Figures past a registration's bounds do not enter the view or the sums: the node is
        // listed, not alive, naming the field, until its agent registers again.
        let out_of_bounds = (!row.removed)
            .then(|| crate::limits::stored_node_problem(&spec))
            .flatten();
        let spec = match &out_of_bounds {
            Some(why) => {
                warn!(node = %row.name, id = row.id, why, "the node's stored description is past a registration bound: it takes no work until its agent registers again");
                out_of_bounds_stand_in(spec)
            }
            None => spec,
        };
        if !row.removed {
            self.by_name.insert(row.name, row.id);
        }
        if !row.removed {
            self.offer(&spec);
        }
        let mut rec = NodeRec::new(spec, row.identity, row.removed, false);
        if out_of_bounds.is_some() {
            rec.alive = false;
            rec.kept_out_awaiting_return = true;
        }
        rec.out_of_bounds = out_of_bounds;
        rec.hostname = hostname;
        rec.work_dir = work_dir;
        rec.version = agent_version;
        rec.rack = agent_rack;
        self.admit(rec);
        Ok(&self.recs[self.recs.len() - 1])
    }

    /// Marks the nodes the store records as drained (`hetsched node drain` before a restart),
    /// and when each was last heard from.
    pub(super) fn restore_drains(&mut self, store: &crate::store::Store) -> Result<(), StoreError> {
        for (id, ms) in store.heard_nodes()? {
            if let Some(rec) = self.recs.get_mut(id as usize) {
                rec.heard_ms = ms;
            }
        }
        for (id, note) in store.drained_nodes()? {
            if let Some(rec) = self.recs.get_mut(id as usize) {
                rec.drained = true;
                rec.drain_note = note;
            }
        }
        for (id, drain) in store.stopping_nodes()? {
            if let Some(rec) = self.recs.get_mut(id as usize) {
                rec.stop = Some(drain);
            }
        }
        Ok(())
    }

    /// Marks the nodes whose agents left, as the store records them (not alive: nothing waits
    /// for them to come back).
    pub(super) fn restore_left(
        &mut self,
        store: &crate::store::Store,
        view: &mut SchedulerView,
    ) -> Result<(), StateError> {
        for (id, code) in store.left_nodes()? {
            if let Some(rec) = self.recs.get_mut(id as usize) {
                rec.left = Some(Leave::from_code(code).unwrap_or(Leave::Signal));
                // It left with nothing running: nothing to wait for.
                rec.kept_out_awaiting_return = false;
                self.set_alive(id, false);
                view.set_alive(NodeId(id), false)?;
            }
        }
        Ok(())
    }

    /// Keeps what the store does not hold (liveness, last figures) and drains from `old`, the
    /// registry before a rollback.
    pub(super) fn carry_over(&mut self, old: &Nodes) {
        for (new, old) in self.recs.iter_mut().zip(&old.recs) {
            new.alive = old.alive;
            new.kept_out_awaiting_return = old.kept_out_awaiting_return;
            new.seen = old.seen;
            new.last_seen = old.last_seen;
            new.grace = old.grace;
            new.unread.clone_from(&old.unread);
            new.heard_ms = old.heard_ms;
            new.awaiting = old.awaiting;
            new.read_bps = old.read_bps;
            new.available_memory = old.available_memory;
            new.disk = old.disk;
            new.gpus = old.gpus.clone();
            new.drained = old.drained;
            new.drain_note = old.drain_note.clone();
            new.stop = old.stop;
            new.draining = old.draining;
            new.ends_at = old.ends_at;
            new.left = old.left;
        }
        self.clock = old.clock;
        self.wakes.carry_over(&old.wakes);
        // Liveness, disk reports and ends came from `old`: every node changed.
        self.liveness_generation += 1;
        for id in 0..self.recs.len() {
            self.changed.note(NodeId(id as u32));
        }
        // Liveness came from `old`, node by node: counted once here.
        self.live_devices = u64::from(self.live_devices_afresh());
    }

    /// Puts the nodes' ends into `view` (a view rebuilt from the store knows none).
    pub(super) fn restore_ends(&self, view: &mut SchedulerView) {
        for (i, n) in self.recs.iter().enumerate() {
            if let Some(end) = n.ends_at {
                let _ = view.set_node_end(NodeId(i as u32), Some(self.clock.at(end)));
            }
        }
    }

    /// Records when node `id`'s agent ends (its heartbeat's time left; `None`: no end), here and
    /// in the scheduler's view.
    pub fn set_end(&mut self, view: &mut SchedulerView, id: u32, end: Option<Instant>) {
        let Some(rec) = self.recs.get_mut(id as usize) else {
            return;
        };
        if let (None, Some(at)) = (rec.ends_at, end) {
            info!(node = %rec.spec.name, time_left = ?at.saturating_duration_since(Instant::now()), "the agent has a time limit: tasks that may run longer than its time left go elsewhere");
        }
        if rec.ends_at != end {
            rec.ends_at = end;
            self.changed.note(NodeId(id));
            // Every node in the registry is in the view (same dense ids).
            let _ = view.set_node_end(NodeId(id), end.map(|e| self.clock.at(e)));
        }
    }

    /// Moves the scheduler view's clock to `now`, before anything is placed: a node with an
    /// end has less time for tasks at every decision. One store, whatever the nodes.
    pub fn set_now(&self, view: &mut SchedulerView, now: Instant) {
        view.set_now(self.clock.at(now));
    }

    /// Sends the wake-ups the event marked ([`super::wakes`]), except to `answered` (the node
    /// whose heartbeat reply carries the work). An application's new batch work goes to live
    /// nodes that take work and that one of its tasks fits on now (free resources, GPUs,
    /// `requires`: `SchedulerView::fits`), the most free cores first, at most one node per new
    /// task. Only nodes heard from since this server started are woken: a node restored at a
    /// restart whose agent has not come back has no agent waiting, and a wake-up spent on it
    /// left the job to the next idle beat of a node that could run it (its agent, if it comes
    /// back, beats at once and its reply carries the work).
    pub fn flush_wakes(&mut self, view: &SchedulerView, answered: Option<u32>) {
        let free = self.wakes.take_free();
        if !free.is_empty() {
            let open: Vec<(u32, u32)> = self
                .recs
                .iter()
                .enumerate()
                .filter(|(_, n)| n.alive && n.seen && !n.removed && !n.drained && !n.draining)
                .filter_map(|(i, _)| {
                    let cores = view.nodes().get(i)?.free.cores;
                    (cores > 0).then_some((i as u32, cores))
                })
                .collect();
            for (app, tasks) in free {
                let Some(a) = view.get_app(AppId(app)) else {
                    continue;
                };
                // A multi-node task wakes as many nodes as it holds (free or not: it gathers
                // them as they drain).
                let whole = a.app.nodes as usize;
                if whole > 1 {
                    let mut woken = 0;
                    for (i, n) in self.recs.iter().enumerate() {
                        let node = NodeId(i as u32);
                        if woken < whole.saturating_mul(tasks)
                            && n.alive
                            && n.seen
                            && !n.removed
                            && !n.drained
                            && !n.draining
                            && view.could_run(AppId(app), node)
                        {
                            self.wakes.node(i as u32);
                            woken += 1;
                        }
                    }
                    continue;
                }
                let fits = |n: u32| {
                    view.fits(AppId(app), NodeId(n), Variant::Cpu)
                        || view.fits(AppId(app), NodeId(n), Variant::Gpu)
                };
                let mut takers: Vec<(u32, u32)> =
                    open.iter().copied().filter(|&(n, _)| fits(n)).collect();
                takers.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
                for (n, _) in takers.into_iter().take(tasks) {
                    self.wakes.node(n);
                }
            }
        }
        self.wakes.send(answered);
    }
}

/// What the server logs when node `node`'s agent registers with version `agent` (empty: an
/// agent that predates saying it) under this server's `server`; `None` when they agree.
pub fn agent_version_warning(node: &str, agent: &str, server: &str) -> Option<String> {
    if agent == server {
        return None;
    }
    let agent = if agent.is_empty() {
        "an unknown version (older than version reporting)"
    } else {
        agent
    };
    Some(format!(
        "node `{node}`'s agent runs hetsched {agent}, this server {server}: across versions \
         some requests are refused (workflow fetches and log reads, PCDDB requests between \
         agents, offloads; docs/runtime.md, \"Upgrading\"). Run one version: upgrade the server \
         first, then the agents"
    ))
}

/// Compares two secrets without an early exit.
pub(super) fn same_secret(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
}

/// A node's stored description: the core's [`Node`], the agent's host name, work directory and
/// version (each absent in rows written before it was kept; an older server reading a newer row
/// ignores the fields it does not know).
#[derive(serde::Serialize, serde::Deserialize)]
struct StoredNode {
    #[serde(flatten)]
    spec: Node,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    hostname: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    work_dir: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    agent_version: String,
    /// Not `rack`: the flattened description has a `rack` of its own (a number).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    agent_rack: String,
}

/// Where a node's agent is, and what it runs, as stored beside its description: its host
/// name, work directory and version.
#[derive(Clone, Copy)]
struct Place<'a> {
    hostname: &'a str,
    work_dir: &'a str,
    version: &'a str,
    rack: &'a str,
}

impl NodeRec {
    fn place(&self) -> Place<'_> {
        Place {
            hostname: &self.hostname,
            work_dir: &self.work_dir,
            version: &self.version,
            rack: &self.rack,
        }
    }
}

fn node_json(spec: &Node, at: Place<'_>) -> Result<String, StateError> {
    serde_json::to_string(&StoredNode {
        spec: spec.clone(),
        hostname: at.hostname.to_string(),
        work_dir: at.work_dir.to_string(),
        agent_version: at.version.to_string(),
        agent_rack: at.rack.to_string(),
    })
    .map_err(|e| StateError::Invalid(format!("node description: {e}")))
}

impl State {
    /// Why the node named `name` does not work ([`NodeRec::not_working`]: its agent left, it
    /// was declared dead…); `None` when it works, or when no node has that name.
    pub fn node_not_working(&self, name: &str) -> Option<String> {
        self.nodes.not_working(name)
    }

    /// Whether an agent registering under `name` with `identity` would be refused because a
    /// live node of another identity holds the name ([`StateError::NameTaken`]) or a node not
    /// heard from since the restart does ([`StateError::NameAwaited`]): `hetsched agent
    /// --check` asks this without registering. The rule is [`State::on_register`]'s.
    pub fn check_name_free(&self, name: &str, identity: &str) -> Result<(), StateError> {
        let Some(id) = self.nodes.by_name(name) else {
            return Ok(());
        };
        let rec = &self.nodes.recs[id as usize];
        let same = !rec.identity.is_empty() && same_secret(&rec.identity, identity);
        if same || !rec.alive || rec.identity.is_empty() {
            return Ok(());
        }
        if !rec.seen {
            let left = rec
                .dies_at(self.dead_timeout())
                .map_or(Duration::ZERO, |at| {
                    at.saturating_duration_since(Instant::now())
                });
            return Err(StateError::NameAwaited {
                name: name.to_string(),
                left_s: left.as_secs().max(1),
            });
        }
        Err(StateError::NameTaken(name.to_string()))
    }

    /// An agent (re-)registers: a new name gets the next node id; a known name gets its old id,
    /// if the caller proves the identity that registered it, or if that node is dead (a
    /// replacement agent takes the name over). A name held by a live node with another identity
    /// is refused ([`StateError::NameTaken`]): two agents must not share a node.
    pub fn on_register(&mut self, req: Registration) -> Result<Registered, StateError> {
        let Registration {
            name,
            mut spec,
            identity,
            hostname,
            work_dir,
            version,
            rack,
        } = req;
        // Once per registration: a mixed-version cluster behaves differently (docs/runtime.md,
        // "Upgrading"), and the operator should hear which node lags.
        if let Some(w) = agent_version_warning(&name, &version, crate::VERSION) {
            warn!("{w}");
        }
        let at = Place {
            hostname: &hostname,
            work_dir: &work_dir,
            version: &version,
            rack: &rack,
        };
        // What the agent is told about its description, if the server kept another.
        let mut note = String::new();
        let id = if let Some(id) = self.nodes.by_name(&name) {
            spec.id = NodeId(id);
            let rec = &self.nodes.recs[id as usize];
            let same = !rec.identity.is_empty() && same_secret(&rec.identity, &identity);
            if !same && rec.alive && !rec.identity.is_empty() {
                // Not heard from since this server started: not known to be live, only given
                // the restart grace to come back. The new agent waits for it to run out.
                if !rec.seen {
                    let left = rec
                        .dies_at(self.dead_timeout())
                        .map_or(Duration::ZERO, |at| {
                            at.saturating_duration_since(Instant::now())
                        });
                    info!(node = %name, left = ?left, "registration deferred: the name is held by a node not heard from since the restart, with another identity");
                    return Err(StateError::NameAwaited {
                        name,
                        left_s: left.as_secs().max(1),
                    });
                }
                warn!(node = %name, "registration refused: the name is held by a live node with another identity");
                return Err(StateError::NameTaken(name));
            }
            if !same {
                // A replacement (or the first registration since identities were introduced):
                // the node is now this agent's.
                self.store.put_node(&NodeRow {
                    id,
                    name: name.clone(),
                    spec: node_json(&rec.spec, at)?,
                    identity: identity.clone(),
                    removed: false,
                })?;
                info!(node = %name, id, "node name taken over by a new agent identity");
            }
            let rec = &mut self.nodes.recs[id as usize];
            rec.identity = identity;
            // Attributes are labels, not resources: an agent restarted with new ones has them.
            // Stored first: a failed write changes nothing in memory.
            if rec.spec.attributes != spec.attributes
                || rec.hostname != hostname
                || rec.work_dir != work_dir
                || rec.version != version
                || rec.rack != rack
            {
                info!(node = %name, attributes = ?spec.attributes, %hostname, %work_dir, %version, %rack, "node attributes, host name, work directory, agent version or rack changed");
                let mut relabelled = rec.spec.clone();
                relabelled.attributes = std::mem::take(&mut spec.attributes);
                self.store.put_node(&NodeRow {
                    id,
                    name: name.clone(),
                    spec: node_json(&relabelled, at)?,
                    identity: rec.identity.clone(),
                    removed: false,
                })?;
                self.view
                    .set_node_attributes(NodeId(id), relabelled.attributes.clone())?;
                self.nodes.set_spec(id, relabelled);
                let rec = &mut self.nodes.recs[id as usize];
                rec.hostname = hostname;
                rec.work_dir = work_dir;
                rec.version = version;
                rec.rack = rack;
            }
            let rec = &self.nodes.recs[id as usize];
            spec.attributes.clone_from(&rec.spec.attributes);
            if rec.spec != spec {
                note = self.redescribe(id, &name, &spec)?;
            }
            let rec = &mut self.nodes.recs[id as usize];
            rec.heard();
            rec.seen = true;
            // A new agent (or one started again) has read no reply of this server's.
            rec.unread.clear();
            // Its figures were checked with this registration: a stored description past a
            // bound is replaced above (work held there booked on the new figures), or kept as
            // its stand-in (its devices differ, or the new figures would pass the cluster's
            // totals), which takes nothing past a bound.
            rec.kept_out_awaiting_return = false;
            if let Some(why) = rec.out_of_bounds.take() {
                info!(node = %name, was = %why, "a node whose stored description was past a registration bound registered again");
            }
            if !rec.alive {
                self.nodes.set_alive(id, true);
                self.view.set_alive(NodeId(id), true)?;
            }
            let rec = &mut self.nodes.recs[id as usize];
            if rec.left.take().is_some() {
                self.store.put_left(id, None)?;
            }
            // A new agent: a stop asked of the one before is over.
            if rec.stop.take().is_some() {
                self.store.put_stop(id, None)?;
            }
            info!(node = %name, id, "node registered again");
            id
        } else {
            let id = self.nodes.len() as u32;
            spec.id = NodeId(id);
            self.nodes
                .room_for(&name, None, &spec, self.device_reach())?;
            self.store.put_node(&NodeRow {
                id,
                name: name.clone(),
                spec: node_json(&spec, at)?,
                identity: identity.clone(),
                removed: false,
            })?;
            self.view.add_node(spec.clone())?;
            info!(node = %name, id, cores = spec.cores, gpus = spec.accelerators.len(), "node registered");
            self.nodes.by_name.insert(name, id);
            self.nodes.offer(&spec);
            let mut rec = NodeRec::new(spec, identity, false, true);
            rec.hostname = hostname;
            rec.work_dir = work_dir;
            rec.version = version;
            rec.rack = rack;
            self.nodes.admit(rec);
            id
        };
        self.node_may_die(id);
        // Its agent is a divisible worker from now on, before its first ask: a job submitted
        // in between plans for it too (its asks are refused until it has registered).
        if let Some(rec) = self.nodes.recs.get(id as usize) {
            self.jobs.divisible.agent_registered(
                &rec.spec.name,
                rec.spec.memory_bytes,
                rec.spec.all_attributes(),
            );
        }
        Ok(Registered {
            node_id: id,
            heartbeat_interval_ms: self.heartbeat_interval_ms,
            idle_heartbeat_interval_ms: self.idle_heartbeat_interval_ms,
            note,
            // Below every reply to come: the agent names it until it reads one, so the reply
            // to its first beat is judged as every later one. Before, it named 0 then, which
            // reads as an agent that predates the numbers: a task of that reply, never read,
            // was lost, an attempt counted.
            reply_seq: self.nodes.next_reply_seq(),
        })
    }

    /// Node `id` registered again with other resources than it had (its agent restarted with
    /// other `--cores`, memory or speeds): the new ones hold from now on if nothing runs there
    /// (stored first, then the scheduler's view). Its devices are not changed while the server
    /// runs: the accelerator binding and the tasks placed on them follow the first; nor is
    /// anything changed while work holds part of the node, unless its description is a
    /// stand-in ([`NodeRec::out_of_bounds`]): that is replaced at once, the work booked on the
    /// new figures. Returns what the agent is told (empty: taken as given).
    fn redescribe(&mut self, id: u32, name: &str, spec: &Node) -> Result<String, StateError> {
        let rec = &self.nodes.recs[id as usize];
        let kept = |why: &str| {
            warn!(node = %name, why, "node registered again with different resources; the server keeps its description");
            format!(
                "the server keeps this node's earlier description ({} cores, {} of memory, {} \
                 devices): {why}",
                rec.spec.cores,
                bytesize::ByteSize(rec.spec.memory_bytes),
                rec.spec.accelerators.len()
            )
        };
        if rec.spec.accelerators != spec.accelerators {
            return Ok(kept(
                "its accelerator devices differ, and they change only when the server restarts \
                 with a fresh data directory (or after `hetsched node remove` of the dead node)",
            ));
        }
        let mut new = rec.spec.clone();
        new.cores = spec.cores;
        new.memory_bytes = spec.memory_bytes;
        new.core_speed = spec.core_speed;
        new.disk_read_bw = spec.disk_read_bw;
        new.net_bw = spec.net_bw;
        new.net_latency = spec.net_latency;
        // A stand-in ([`out_of_bounds_stand_in`]) is no description the node had: the agent's
        // replaces it even while work holds part of the node, which is booked on the new
        // figures ([`State::held_on_stand_in`]). Kept, the node worked on with the stand-in's
        // figures (no memory, say) and was read back past the bound at every restart.
        let stand_in = rec.out_of_bounds.is_some();
        let busy = self.view.nodes()[id as usize].running > 0
            || self.view.nodes()[id as usize].free
                != self.view.nodes()[id as usize].node.capacity();
        if busy && !stand_in {
            return Ok(kept(
                "work still holds part of it; register again once it is idle (restart the agent)",
            ));
        }
        if let Err(StateError::Invalid(why)) =
            self.nodes
                .room_for(name, Some(id), &new, self.device_reach())
        {
            return Ok(kept(&why));
        }
        let held = busy.then(|| self.held_on_stand_in(id));
        let rec = &self.nodes.recs[id as usize];
        self.store.put_node(&NodeRow {
            id,
            name: name.to_string(),
            spec: node_json(&new, rec.place())?,
            identity: rec.identity.clone(),
            removed: false,
        })?;
        match held {
            Some(held) => self
                .view
                .set_node_resources_holding(NodeId(id), &new, held)?,
            None => self.view.set_node_resources(NodeId(id), &new)?,
        }
        info!(node = %name, cores = new.cores, memory = new.memory_bytes, "node registered again with new resources: they hold from now on");
        let old = Offered::of(&self.nodes.recs[id as usize].spec);
        self.nodes.offered = self.nodes.offered.minus(old).plus(Offered::of(&new));
        self.nodes.set_spec(id, new);
        Ok(String::new())
    }

    /// What the work recorded on node `id`, described by a stand-in, holds of it: in each
    /// dimension the stand-in kept (a figure within bounds, which the work was booked against
    /// before the restart), what the view books there; in one it replaced by none, where the
    /// view's bookings were cut at nothing, what the running tasks and workflow instances
    /// recorded there hold (their kinds' [`crate::jobs::JobKind::held`]).
    fn held_on_stand_in(&self, id: u32) -> hetsched_core::Resources {
        let st = &self.view.nodes()[id as usize];
        let booked = st.node.capacity() - st.free;
        let Some(rec) = self.nodes.recs.get(id as usize) else {
            return booked;
        };
        let by_tasks = rec
            .running
            .iter()
            .filter_map(|&t| self.jobs.owner(t)?.held(&self.view, t))
            .fold(hetsched_core::Resources::default(), |sum, (_, r)| sum + r);
        let capacity = st.node.capacity();
        hetsched_core::Resources::new(
            if capacity.cores == 0 {
                by_tasks.cores
            } else {
                booked.cores
            },
            if capacity.memory_bytes == 0 {
                by_tasks.memory_bytes
            } else {
                booked.memory_bytes
            },
            if capacity.gpus == 0 {
                by_tasks.gpus
            } else {
                booked.gpus
            },
        )
    }

    /// Removes a dead node (`hetsched node remove`): it is no longer listed, counted or offered
    /// to policies, and its name is free for another agent. A live node is refused: stop its
    /// agent first and wait until it is declared dead. (Its id stays taken: ids are dense.)
    pub fn remove_node(&mut self, name: &str) -> Result<u32, StateError> {
        let Some(id) = self.nodes.by_name(name) else {
            return Err(StateError::NoNode(name.to_string()));
        };
        let rec = &self.nodes.recs[id as usize];
        if rec.alive && !rec.seen {
            // Restored at the restart and not heard since: its agent may yet come back.
            let left = rec
                .dies_at(self.dead_timeout())
                .map(|at| at.saturating_duration_since(std::time::Instant::now()));
            return Err(StateError::Invalid(format!(
                "node `{name}` is not back since the server's restart, and its agent may still \
                 come back (it is declared dead {}): remove it then",
                left.map_or("soon".to_string(), |d| format!(
                    "in {}",
                    humantime::format_duration(std::time::Duration::from_secs(d.as_secs().max(1)))
                ))
            )));
        }
        if rec.alive {
            return Err(StateError::Invalid(format!(
                "node `{name}` is alive (last heartbeat {} ms ago): stop its agent, wait until the \
                 node is declared dead, then remove it",
                rec.last_seen.elapsed().as_millis()
            )));
        }
        self.store.put_node(&NodeRow {
            id,
            // The name is UNIQUE in the store: a removed node's row gives it up (`#` is not
            // allowed in node names).
            name: format!("#removed-{id}"),
            spec: node_json(&rec.spec, rec.place())?,
            identity: String::new(),
            removed: true,
        })?;
        self.nodes.by_name.remove(name);
        let rec = &mut self.nodes.recs[id as usize];
        if rec.left.take().is_some() {
            self.store.put_left(id, None)?;
        }
        let gone = Offered::of(&self.nodes.recs[id as usize].spec);
        self.nodes.offered = self.nodes.offered.minus(gone);
        self.nodes.set_removed(id);
        self.nodes.recs[id as usize].identity.clear();
        info!(node = %name, id, "node removed");
        Ok(id)
    }

    /// `hetsched node drain` (`drain`) / `node resume` (`!drain`) without a reason: see
    /// [`State::on_drain_because`].
    pub fn on_drain(&mut self, name: &str, drain: bool) -> Result<Drained, StateError> {
        self.on_drain_because(name, drain, "")
    }

    /// `hetsched node drain --reason REASON` (`drain`) / `node resume` (`!drain`): stops or
    /// restarts placing new work on a node; its running tasks go on, and stream topologies'
    /// workers there are moved off at the topology controller's next pass
    /// ([`crate::jobs::topology`]). A drained node drained again keeps its time and takes the
    /// new reason. The reason is at most [`MAX_DRAIN_REASON`] bytes, without control characters
    /// or invisible formatting characters ([`hetsched_core::text::hidden`]).
    pub fn on_drain_because(
        &mut self,
        name: &str,
        drain: bool,
        reason: &str,
    ) -> Result<Drained, StateError> {
        let Some(id) = self.nodes.by_name(name) else {
            return Err(StateError::NoNode(name.to_string()));
        };
        let reason = reason.trim();
        if reason.len() > MAX_DRAIN_REASON {
            return Err(StateError::Invalid(format!(
                "reason: {} bytes, more than the {MAX_DRAIN_REASON} accepted",
                reason.len()
            )));
        }
        if reason.chars().any(char::is_control) {
            return Err(StateError::Invalid(
                "reason: a control character (a newline, a tab…) is not accepted".into(),
            ));
        }
        if let Some(problem) = hetsched_core::text::hidden_problem(reason) {
            return Err(StateError::Invalid(format!("reason: {problem}")));
        }
        if !drain && !reason.is_empty() {
            return Err(StateError::Invalid(
                "reason: a resumed node keeps no reason; give one with `node drain`".into(),
            ));
        }
        let was = &self.nodes.recs[id as usize];
        let was_drained = was.drained;
        let note = drain.then(|| crate::store::DrainNote {
            // Draining a drained node again without a reason keeps the operator's note.
            reason: if was.drained && reason.is_empty() {
                was.drain_note.reason.clone()
            } else {
                reason.to_string()
            },
            since_ms: if was.drained {
                was.drain_note.since_ms
            } else {
                u64::try_from(
                    std::time::SystemTime::now()
                        .duration_since(std::time::UNIX_EPOCH)
                        .unwrap_or_default()
                        .as_millis(),
                )
                .unwrap_or(u64::MAX)
            },
        });
        if was.drained != drain
            || note
                .as_ref()
                .is_some_and(|n| n.reason != was.drain_note.reason)
        {
            // Stored first: a drain survives a restart (see `store::operator`).
            self.store.put_drain(id, note.as_ref())?;
        }
        let rec = &mut self.nodes.recs[id as usize];
        rec.drain_note = note.unwrap_or_default();
        if rec.drained != drain {
            rec.drained = drain;
            info!(node = %name, drained = drain, running = rec.running.len(), "node {}", if drain { "drained" } else { "resumed" });
            if !drain {
                // Work may wait for it: its agent beats at once, and its chunk asks held open
                // while it was drained are looked at again.
                self.nodes.wakes.node(id);
                self.wake(None);
                self.jobs.divisible.wake_asks();
            }
        }
        Ok(Drained {
            was_drained,
            ..self.what_runs_on(id, name)
        })
    }

    /// What node `id` (called `name`) runs, as a drain or a stop answers it: its running tasks
    /// count the multi-node tasks it is a member of (their command runs on another node, but
    /// they end with its agent, or it waits for them with `--drain`).
    fn what_runs_on(&self, id: u32, name: &str) -> Drained {
        let members = self.jobs.batch.multi_node_member_of(id).len();
        Drained {
            node_id: id,
            running: (self.nodes.recs[id as usize].running.len() + members) as u32,
            stream_workers: self.jobs.topology.workers_on(name),
            chunks: self.jobs.divisible.chunks_on(name),
            was_drained: self.nodes.recs[id as usize].drained,
            reason: self.nodes.recs[id as usize].drain_note.reason.clone(),
        }
    }

    /// `hetsched node stop NAME [--drain]` (HyperQueue's `hq worker stop`): asks the node's
    /// agent to shut down as on a SIGTERM — it takes no new work, stops its running tasks (or,
    /// with `drain`, lets them end), reports their results and exits; the server runs what was
    /// stopped again elsewhere and lists the node as left (`operator`). The request is stored
    /// and told at every heartbeat until the agent leaves; its node is woken to beat now.
    /// Refused for a node without a live agent.
    pub fn on_stop_node(&mut self, name: &str, drain: bool) -> Result<Drained, StateError> {
        let Some(id) = self.nodes.by_name(name) else {
            return Err(StateError::NoNode(name.to_string()));
        };
        let rec = &self.nodes.recs[id as usize];
        if !rec.alive || rec.left.is_some() {
            return Err(StateError::Invalid(format!(
                "node `{name}` has no agent running to stop ({})",
                match rec.left {
                    Some(why) => format!("its agent left: {}", why.as_str()),
                    None => "it is dead".into(),
                }
            )));
        }
        // A drain asked after a plain stop does not undo it (the agent may have stopped its
        // tasks already); a plain stop after a drain escalates it (the agent stops them now).
        let drain = drain && rec.stop != Some(false);
        if rec.stop != Some(drain) {
            // Stored first: a restarted server still tells the agent.
            self.store.put_stop(id, Some(drain))?;
        }
        let rec = &mut self.nodes.recs[id as usize];
        rec.stop = Some(drain);
        // Its agent hears it at once, not at its next beat (an idle one beats seldom).
        self.nodes.wakes.node(id);
        self.wake(None);
        let what = self.what_runs_on(id, name);
        info!(node = %name, drain, running = what.running, "the node's agent is asked to stop");
        Ok(what)
    }

    /// The wake-up counter of node `id` that its agent's `AwaitWork` waits on ([`super::wakes`]),
    /// if `identity` is the one that registered the node; `None` tells the agent to register.
    /// The call is the node's sign of life while it is open ([`Presence::Node`]).
    pub fn await_work(
        &mut self,
        id: u32,
        identity: &str,
    ) -> Option<tokio::sync::watch::Receiver<u64>> {
        let rec = self.nodes.get(id)?;
        if rec.removed || rec.identity.is_empty() || !same_secret(&rec.identity, identity) {
            return None;
        }
        Some(self.nodes.wakes.subscribe(id))
    }

    /// A call that says its agent lives began (`open`) or ended: answered, or dropped because
    /// its connection closed (the agent stopped, or its host vanished and the kernel's TCP
    /// keepalive gave up on it). While one is open the agent needs no other sign of life; when the last ends,
    /// its silence is counted from then.
    pub fn presence(&mut self, who: &Presence, open: bool) {
        match who {
            Presence::Node(id) => self.node_presence(*id, open),
            Presence::Chunks(name) => {
                self.jobs.divisible.held(name, open);
                // A held chunk ask is the node's sign of life as an open `AwaitWork` is: its
                // agent asks long instead of often, and a node declared dead meanwhile would
                // have its ask refused when a job came (`on_next_chunk`).
                if let Some(id) = self.nodes.by_name(name) {
                    self.node_presence(id, open);
                }
                if !open {
                    self.agent_may_be_lost();
                }
            }
            Presence::Workers(name) => self.jobs.topology.held(name, open),
        }
    }

    /// A call that says node `id`'s agent lives began (`open`) or ended ([`Self::presence`]).
    fn node_presence(&mut self, id: u32, open: bool) {
        if let Some(rec) = self.nodes.recs.get_mut(id as usize) {
            rec.awaiting = if open {
                rec.awaiting + 1
            } else {
                rec.awaiting.saturating_sub(1)
            };
            // A call that ends after its node died or left (its connection closed) is not
            // hearing from it: the time stored then stands.
            if rec.alive {
                rec.heard();
            } else {
                rec.last_seen = Instant::now();
            }
        }
        if !open {
            self.node_may_die(id);
        }
    }

    /// Node `id` may now be declared dead at some instant: the reaper is told, in case that is
    /// before its plan ([`super::alarm`]).
    pub(super) fn node_may_die(&self, id: u32) {
        if let Some(at) = self
            .nodes
            .get(id)
            .and_then(|n| n.dies_at(self.dead_timeout()))
        {
            self.alarm.due(at);
        }
    }

    /// A divisible agent was just heard from (its last held ask ended, or it asked without a
    /// hold): it may be lost a dead timeout from now, which the reaper is told in case that is
    /// before its plan (no scan of the agents: that is the only deadline this event can move).
    pub(super) fn agent_may_be_lost(&self) {
        self.alarm.due(Instant::now() + self.dead_timeout());
    }

    /// The name of node `id`, if it has one.
    pub fn node_name(&self, id: u32) -> Option<String> {
        self.nodes
            .get(id)
            .filter(|n| !n.removed)
            .map(|n| n.spec.name.clone())
    }

    /// Every node not removed, as stored: (id, name, its agent's work directory). A starting
    /// server gives them to its log relay, so listings name tasks' output files before the
    /// agents are heard from again (a dead node's, for good).
    pub fn node_work_dirs(&self) -> Vec<(u32, String, String)> {
        self.nodes
            .recs
            .iter()
            .enumerate()
            .filter(|(_, n)| !n.removed)
            .map(|(id, n)| (id as u32, n.spec.name.clone(), n.work_dir.clone()))
            .collect()
    }

    /// Declares dead every live node silent for longer than `timeout` and hands its tasks to
    /// their kinds as lost. Nodes not heard from since this server started get
    /// [`RESTART_GRACE`] timeouts, so agents that were retrying during a restart reconnect before
    /// their tasks are given away.
    pub fn check_dead(&mut self, timeout: Duration) -> Result<(), StateError> {
        self.check_dead_after(timeout, Duration::ZERO)
    }

    /// The server did not listen for `stalled` up to now, as a timer's pass measured it: how
    /// late the pass ran (the whole process stopped — SIGSTOP, a paused or migrated VM, a
    /// swap storm), how long it waited for the state's lock and how long it held it (a purge
    /// of millions of tasks, a backup). The agents' calls waited all that time, in the sockets
    /// or behind the lock. The one place that judges it ([`super::stall`]): a stall of at
    /// least [`super::stall::threshold`] is recorded, and every judge of silence gets it — each
    /// node's [`NodeRec::grace`], and each job kind that judges its agents itself
    /// ([`crate::jobs::JobKind::server_stalled`]: divisible agents, topology nodes). Returns
    /// whether it was one.
    pub fn server_stalled(&mut self, timeout: Duration, stalled: Duration) -> bool {
        self.server_stalled_at(timeout, stalled, Instant::now())
    }

    /// [`State::server_stalled`], the stall ending at `now`.
    fn server_stalled_at(&mut self, timeout: Duration, stalled: Duration, now: Instant) -> bool {
        let Some(stall) = self.nodes.stalls.note(timeout, stalled, now) else {
            return false;
        };
        // Once per stall, not once per timer that saw it.
        if stall.new >= super::stall::threshold(timeout) {
            warn!(
                stalled = ?stall.new,
                "the server did not listen for this long (stopped, paused or starved): its agents' silence is counted without it"
            );
        }
        for n in &mut self.nodes.recs {
            n.grace.stalled(n.last_seen, stall);
        }
        for kind in self.jobs.all_mut() {
            kind.server_stalled(stall);
        }
        true
    }

    /// [`State::check_dead`] by a reaper after the server did not listen for `stalled`
    /// ([`State::server_stalled`]), which never counts against a node: a stall gives every
    /// node a fresh dead timeout from its end if it is the first of the node's silence, and
    /// its own length more if not; a shorter lateness gives every node that long more in this
    /// pass. Before, the first check after a pause longer than the dead timeout declared every
    /// busy node dead, before its queued beats were read, and ran its tasks again, each loss
    /// counted against `max_attempts`; and then a server whose checks kept running that late
    /// gave every node a fresh dead timeout at each, so a dead node never died.
    pub fn check_dead_after(
        &mut self,
        timeout: Duration,
        stalled: Duration,
    ) -> Result<(), StateError> {
        self.check_dead_at(timeout, stalled, Instant::now())
    }

    /// [`State::check_dead_after`] at `now`.
    fn check_dead_at(
        &mut self,
        timeout: Duration,
        stalled: Duration,
        now: Instant,
    ) -> Result<(), StateError> {
        if self.paused() {
            // Nothing can be recorded: declaring nodes dead now would fail their tasks in memory
            // only. Heartbeats keep `last_seen` fresh meanwhile.
            return Ok(());
        }
        // A stall is in every node's grace from now on; a shorter lateness counts for this
        // pass only (counted in both, a stall would excuse twice its length).
        let more = if self.server_stalled_at(timeout, stalled, now) {
            Duration::ZERO
        } else {
            stalled
        };
        for i in 0..self.nodes.len() {
            let n = &mut self.nodes.recs[i];
            if n.dies_at(timeout).is_none_or(|at| now <= at + more) {
                continue;
            }
            warn!(node = %n.spec.name, tasks = n.running.len(), "node stopped heartbeating: declared dead");
            let reason = format!("node `{}` stopped heartbeating", n.spec.name);
            self.gone(i as u32, &reason)?;
        }
        self.accel_left()?;
        self.commit()?;
        self.wake(None);
        Ok(())
    }

    /// Node `id` is no longer alive (dead, or its agent left): its tasks go back to their
    /// queues (`reason` says why), and its agent's divisible chunks are planned again.
    fn gone(&mut self, id: u32, reason: &str) -> Result<(), StateError> {
        self.nodes.set_alive(id, false);
        let Some(n) = self.nodes.recs.get_mut(id as usize) else {
            return Ok(());
        };
        // A node kept out at the restart is declared dead once, as any node not back is.
        n.kept_out_awaiting_return = false;
        // What it ran while the server was down is never confirmed: not credited.
        if let Some(d) = &mut self.downtime {
            d.forget_node(id);
        }
        let mut lost: Vec<u64> = n.running.iter().copied().collect();
        // When it was last heard, for `hetsched nodes` after a restart too (one write per death).
        if n.heard_ms > 0
            && let Err(e) = self.store.put_heard(id, n.heard_ms)
        {
            warn!(
                node = id,
                "storing when the node was last heard failed: {e}"
            );
        }
        // Each re-queued task goes to the front: re-queue the last first, so they keep order.
        lost.sort_unstable_by(|a, b| b.cmp(a));
        let name = n.spec.name.clone();
        self.view.set_alive(NodeId(id), false)?;
        for t in lost {
            self.lose(t, reason)?;
        }
        // Multi-node tasks it was one of the other nodes of are lost too.
        self.lose_broken_multi_node()?;
        // What was stopped there will never be said to have ended: nothing waits for it.
        self.stopping_node_gone(id)?;
        // Its agent's divisible chunks (not tasks of the node) are re-planned too.
        self.jobs.divisible.lose_agent(&name);
        // What workflows placed there, and the outputs it held that placed consumers need, are
        // placed and produced again now, not at another node's next heartbeat.
        self.workflow_node_gone(id);
        Ok(())
    }

    /// The last heartbeat of node `id`'s agent, which exits on purpose (`why`) with nothing
    /// running: the node left. It is recorded (a restarted server does not wait for it), listed
    /// only with `--all`, and its stream workers and accelerator role go as a dead node's do.
    pub(super) fn node_left(&mut self, id: u32, why: Leave) -> Result<(), StateError> {
        let Some(n) = self.nodes.recs.get_mut(id as usize) else {
            return Ok(());
        };
        if n.left == Some(why) && !n.alive {
            return Ok(());
        }
        info!(node = %n.spec.name, why = why.as_str(), "the node's agent left");
        n.left = Some(why);
        if n.stop.take().is_some() {
            self.store.put_stop(id, None)?;
        }
        let reason = format!(
            "the agent of node `{}` left ({})",
            n.spec.name,
            why.as_str()
        );
        self.store.put_left(id, Some(why.code()))?;
        self.gone(id, &reason)?;
        self.accel_left()
    }

    /// Stores when each node heard from since this server started was last heard, now (when the
    /// server stops: a node that does not come back reads its last heartbeat's time after the
    /// restart as before; the heartbeats themselves write nothing for it).
    pub fn store_heard(&mut self) -> Result<(), StateError> {
        for (id, n) in self.nodes.recs.iter().enumerate() {
            if n.seen && !n.removed && n.heard_ms > 0 {
                self.store.put_heard(id as u32, n.heard_ms)?;
            }
        }
        Ok(())
    }

    /// Every node (removed ones are not listed).
    pub fn list_nodes(&self) -> Vec<NodeInfo> {
        let timeout = self.dead_timeout();
        let mut list: Vec<NodeInfo> = self
            .nodes
            .iter()
            .enumerate()
            .filter(|(_, n)| !n.removed)
            .map(|(i, n)| {
                let v = &self.view.nodes()[i];
                let mut info = NodeInfo {
                    id: i as u32,
                    name: n.spec.name.clone(),
                    // A node restored from the store is shown dead until it heartbeats
                    // (the scheduler still gives it RESTART_GRACE to come back).
                    alive: n.alive && n.seen,
                    cores: n.spec.cores,
                    free_cores: v.free.cores,
                    memory_bytes: n.spec.memory_bytes,
                    accelerators: n.spec.accelerators.clone(),
                    free_gpus: v.free_devices(None),
                    running: n.running.len() as u32,
                    queued: self.nodes.prefetch.queued.on(NodeId(i as u32)),
                    // 0 while its live agent holds a call open: heard from now (a dead
                    // node's call, held by a frozen agent, is no sign of life). A node not
                    // heard since this server started, or dead: since it was last heard.
                    last_seen_ms: if n.awaiting > 0 && n.alive {
                        0
                    } else if (!n.seen || !n.alive) && n.heard_ms > 0 {
                        (super::now_ns() / 1_000_000).saturating_sub(n.heard_ms)
                    } else {
                        n.last_seen.elapsed().as_millis() as u64
                    },
                    // As `last_seen_ms`: an agent holding a call open is heard from now (its
                    // call began up to an idle heartbeat ago).
                    last_heard_ms: if n.awaiting > 0 && n.alive {
                        super::now_ns() / 1_000_000
                    } else {
                        n.heard_ms
                    },
                    read_bytes_per_sec: n.read_bps,
                    available_memory_bytes: n.available_memory,
                    disk: n.disk,
                    gpus: n.gpus.clone(),
                    drained: n.drained,
                    drain_note: n.drain_note.clone(),
                    stopping: n.stop.is_some(),
                    draining: n.draining,
                    returning_ms: (n.alive && !n.seen && !n.removed)
                        .then(|| n.dies_at(timeout))
                        .flatten()
                        .map(|at| at.saturating_duration_since(Instant::now()).as_millis() as u64),
                    time_left_ms: n
                        .ends_at
                        .filter(|_| n.alive)
                        .map(|e| e.saturating_duration_since(Instant::now()).as_millis() as u64),
                    left: n.left,
                    // As its agent registered it; a heartbeat's, once heard, in
                    // `accel_nodes`.
                    rack: if n.rack.is_empty() {
                        super::accel::DEFAULT_RACK.to_string()
                    } else {
                        n.rack.clone()
                    },
                    attributes: n.spec.all_attributes(),
                    backed_off: self
                        .jobs
                        .all()
                        .iter()
                        .flat_map(|k| k.backed_off(i as u32))
                        .collect(),
                    held_for: self
                        .jobs
                        .all()
                        .iter()
                        .map(|k| k.held_for(i as u32))
                        .find(|h| !h.is_empty())
                        .unwrap_or_default(),
                    version: n.version.clone(),
                    out_of_bounds: n.out_of_bounds.clone().unwrap_or_default(),
                    ..Default::default()
                };
                self.jobs.workflow.annotate(&mut info);
                info
            })
            .collect();
        self.accel_nodes(&mut list);
        list
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ServerConfig;
    use crate::state::types::HeartbeatReport;
    use crate::store::Store;
    use hetsched_core::model::cluster::Accelerator;
    use hetsched_core::testkit::ScratchDir;

    const IDENTITY: &str = "hb-identity";

    fn described(name: &str, devices: usize) -> Node {
        Node {
            id: NodeId(0),
            name: name.into(),
            rack: hetsched_core::RackId(0),
            cores: 4,
            core_speed: 1.0,
            memory_bytes: 1 << 30,
            disk_read_bw: 1e8,
            net_bw: 1e8,
            net_latency: 0,
            accelerators: (0..devices)
                .map(|_| Accelerator {
                    kind: "a100".into(),
                    memory_bytes: 1 << 30,
                    speed: 1.0,
                })
                .collect(),
            attributes: Vec::new(),
        }
    }

    fn register(s: &mut State, name: &str, devices: usize) -> u32 {
        s.on_register(Registration {
            name: name.into(),
            spec: described(name, devices),
            identity: IDENTITY.into(),
            hostname: String::new(),
            work_dir: String::new(),
            version: crate::VERSION.into(),
            rack: String::new(),
        })
        .expect("register")
        .node_id
    }

    fn beat(s: &mut State, id: u32, leaving: Option<Leave>) {
        s.on_heartbeat(HeartbeatReport {
            node_id: id,
            identity: IDENTITY.into(),
            available_memory_bytes: 1 << 30,
            leaving,
            ..Default::default()
        })
        .expect("beat");
    }

    /// After a restart, an agent of a node's name with another identity (the node's work
    /// directory was lost) is told to wait, not refused as if a live agent held the name: the
    /// node has not been heard from, and only the restart grace keeps it; once the node is
    /// declared dead the new agent takes the name over. A node heard from since keeps the name
    /// as before (`NameTaken`).
    #[test]
    fn after_a_restart_a_new_identity_waits_for_a_node_not_back_and_then_takes_its_name() {
        let dir = ScratchDir::new("nodes", "awaited");
        let config = ServerConfig {
            data_dir: dir.clone(),
            dead_timeout: hetsched_core::input::Duration(10_000_000_000),
            ..Default::default()
        };
        let open = || {
            State::open(&config, Store::open(&dir.join("state.db")).expect("store")).expect("state")
        };
        let mut s = open();
        let a = register(&mut s, "a", 0);
        beat(&mut s, a, None);
        drop(s);
        let mut s = open();
        let replacement = |s: &mut State| {
            s.on_register(Registration {
                name: "a".into(),
                spec: described("a", 0),
                identity: "another-identity-0123456789abcdef".into(),
                hostname: String::new(),
                work_dir: String::new(),
                version: crate::VERSION.into(),
                rack: String::new(),
            })
        };
        let e = replacement(&mut s).expect_err("deferred").to_string();
        assert!(
            e.starts_with(
                "node name `a` is held by a node not heard from since the server started"
            ) && e.contains("s left to come back (the restart grace"),
            "{e}"
        );
        // The node is declared dead at the end of its grace: the name is the new agent's.
        s.nodes.get_mut(a).expect("node").last_seen = Instant::now()
            .checked_sub(Duration::from_secs(31))
            .expect("31 s after boot");
        s.check_dead(Duration::from_secs(10)).expect("check");
        let taken = replacement(&mut s).expect("taken over").node_id;
        assert_eq!(taken, a);
        // Heard from since: another identity is refused as before.
        beat_as(&mut s, a, "another-identity-0123456789abcdef");
        let e = s
            .on_register(Registration {
                name: "a".into(),
                spec: described("a", 0),
                identity: IDENTITY.into(),
                hostname: String::new(),
                work_dir: String::new(),
                version: crate::VERSION.into(),
                rack: String::new(),
            })
            .expect_err("held")
            .to_string();
        assert!(
            e.contains("is held by a live agent with another identity"),
            "{e}"
        );
    }

    fn beat_as(s: &mut State, id: u32, identity: &str) {
        s.on_heartbeat(HeartbeatReport {
            node_id: id,
            identity: identity.into(),
            available_memory_bytes: 1 << 30,
            ..Default::default()
        })
        .expect("beat");
    }

    /// A dead-node check after a short stall of the server (under [`super::super::stall::STALL`]: a wait for the
    /// state's lock) gives every node that long more: a node silent for less than the timeout
    /// plus the stall lives, one silent for longer dies as ever.
    #[test]
    fn a_dead_node_check_after_a_short_stall_gives_the_nodes_that_long_more() {
        let dir = ScratchDir::new("nodes", "waited");
        let config = ServerConfig {
            data_dir: dir.clone(),
            ..Default::default()
        };
        let mut s = State::open(&config, Store::open(&dir.join("state.db")).expect("store"))
            .expect("state");
        let a = register(&mut s, "a", 0);
        beat(&mut s, a, None);
        let timeout = Duration::from_secs(10);
        // Silent for 10.5 s: past the timeout, within the timeout and a 0.8 s stall.
        s.nodes.get_mut(a).expect("node").last_seen = Instant::now()
            .checked_sub(Duration::from_millis(10_500))
            .expect("10.5 s after boot");
        s.check_dead_after(timeout, Duration::from_millis(800))
            .expect("check");
        assert!(s.nodes.get(a).expect("node").alive, "held back, not silent");
        s.check_dead_after(timeout, Duration::from_millis(200))
            .expect("check");
        assert!(
            !s.nodes.get(a).expect("node").alive,
            "silent past the stall too"
        );
    }

    /// A state of the default configuration over a new data directory (named `name`; dropped
    /// after the state).
    fn fresh_state(name: &str) -> (ScratchDir, State) {
        let dir = ScratchDir::new("nodes", name);
        let config = ServerConfig {
            data_dir: dir.clone(),
            ..Default::default()
        };
        let s = State::open(&config, Store::open(&dir.join("state.db")).expect("store"))
            .expect("state");
        (dir, s)
    }

    /// A server stopped longer than the dead timeout (SIGSTOP, a paused VM: its reaper runs
    /// that late) judges no node on the silence it could not hear: every node gets a fresh dead
    /// timeout from the end of the stall, so the next passes, before the beats queued in the
    /// sockets are read, declare none dead; a node still silent a dead timeout after the stall
    /// dies as ever.
    #[test]
    fn a_stall_of_the_server_longer_than_the_dead_timeout_declares_no_node_dead() {
        let (_dir, mut s) = fresh_state("stalled");
        let a = register(&mut s, "a", 0);
        let b = register(&mut s, "b", 0);
        for id in [a, b] {
            beat(&mut s, id, None);
        }
        let timeout = Duration::from_secs(5);
        let at = |secs: f64| t0_plus(secs);
        // Both last beat at 0 s, just before an 8 s stop; the reaper was due at 5 s and ran at
        // 8.5 s, 3.5 s late.
        for id in [a, b] {
            s.nodes.get_mut(id).expect("node").last_seen = at(0.0);
        }
        s.check_dead_at(timeout, Duration::from_millis(3_500), at(8.5))
            .expect("check");
        // The next pass, on time, before any beat was read.
        s.check_dead_at(timeout, Duration::ZERO, at(8.6))
            .expect("check");
        for id in [a, b] {
            assert!(s.nodes.get(id).expect("node").alive, "judged on a stall");
        }
        // `b` beats again at 9 s; `a` stays silent for a dead timeout after the stall: dead.
        s.nodes.get_mut(b).expect("node").last_seen = at(9.0);
        s.check_dead_at(timeout, Duration::ZERO, at(13.6))
            .expect("check");
        assert!(
            !s.nodes.get(a).expect("node").alive,
            "silent after the stall"
        );
        assert!(s.nodes.get(b).expect("node").alive);
    }

    /// A server whose dead-node checks keep running late by more than a stall (persistently
    /// overloaded) still declares a dead node dead: the first stall of the node's silence
    /// gives it a fresh dead timeout, every later one its own length only, so it dies once
    /// silent for at most two dead timeouts plus the stalls; a node that beats between the
    /// checks lives. Before, every late check gave every node a fresh dead timeout again, and a
    /// dead node never died.
    #[test]
    fn a_server_whose_checks_keep_running_late_still_declares_a_dead_node_dead() {
        let dir = ScratchDir::new("nodes", "late");
        let config = ServerConfig {
            data_dir: dir.clone(),
            ..Default::default()
        };
        let mut s = State::open(&config, Store::open(&dir.join("state.db")).expect("store"))
            .expect("state");
        let a = register(&mut s, "a", 0);
        let b = register(&mut s, "b", 0);
        for id in [a, b] {
            beat(&mut s, id, None);
            s.nodes.get_mut(id).expect("node").last_seen = t0_plus(0.0);
        }
        let timeout = Duration::from_secs(4);
        // A check every 1.5 s, each 1.2 s late (a stall: over 1 s).
        let (every, late) = (1.5, Duration::from_millis(1_200));
        let mut stalls = Duration::ZERO;
        let mut died = None;
        for k in 1..=60 {
            let now = k as f64 * every;
            // `b` beats between two checks.
            s.nodes.get_mut(b).expect("node").last_seen = t0_plus(now - late.as_secs_f64() - 0.1);
            s.check_dead_at(timeout, late, t0_plus(now)).expect("check");
            stalls += late;
            if !s.nodes.get(a).expect("node").alive {
                died = Some(Duration::from_secs_f64(now));
                break;
            }
        }
        let died = died.expect("the silent node was never declared dead");
        assert!(
            died <= timeout * 2 + stalls,
            "dead after {died:?}, past two dead timeouts and {stalls:?} of stalls"
        );
        assert!(
            died > timeout + late,
            "dead after {died:?}: the first stall gives a fresh dead timeout"
        );
        assert!(s.nodes.get(b).expect("node").alive, "it beats");
    }

    /// `secs` seconds after the first call, in this test's timeline (real time runs on too
    /// little to matter, and the checks are told the instant they run at).
    fn t0_plus(secs: f64) -> Instant {
        thread_local! {
            static T0: Instant = Instant::now();
        }
        T0.with(|t0| *t0 + Duration::from_secs_f64(secs))
    }

    /// A dead node's `last seen` counts from when it was last heard, even while a call of its
    /// agent is still open (a frozen agent's connection lives on): before, it read `0ms ago`.
    #[test]
    fn a_dead_node_is_listed_as_last_seen_when_it_was_last_heard_despite_an_open_call() {
        let dir = ScratchDir::new("nodes", "dead-seen");
        let config = ServerConfig {
            data_dir: dir.clone(),
            ..Default::default()
        };
        let mut s = State::open(&config, Store::open(&dir.join("state.db")).expect("store"))
            .expect("state");
        let a = register(&mut s, "a", 0);
        beat(&mut s, a, None);
        s.presence(&Presence::Node(a), true);
        let listed = |s: &State| {
            let n = s
                .list_nodes()
                .into_iter()
                .find(|n| n.name == "a")
                .expect("listed");
            (n.alive, n.last_seen_ms, n.last_heard_ms)
        };
        assert_eq!(listed(&s).1, 0, "alive, its call open: heard from now");
        let heard = super::super::now_ns() / 1_000_000 - 5_000;
        s.nodes.get_mut(a).expect("node").heard_ms = heard;
        s.nodes.set_alive(a, false);
        let (alive, seen, last) = listed(&s);
        assert!(!alive);
        assert!((5_000..60_000).contains(&seen), "{seen}");
        assert_eq!(last, heard);
    }

    /// A node is listed in the rack its agent registered with, before its first heartbeat and
    /// after a restart that has not heard from it again (a dead node). Before, both listed it in
    /// `rack0`, a rack of no one's naming, which the dashboard drew as a rack of its own.
    #[test]
    fn a_node_is_listed_in_its_agents_rack_before_a_heartbeat_and_after_a_restart() {
        let dir = ScratchDir::new("nodes", "rack");
        let config = ServerConfig {
            data_dir: dir.clone(),
            ..Default::default()
        };
        let open = || {
            State::open(&config, Store::open(&dir.join("state.db")).expect("store")).expect("state")
        };
        let rack_of = |s: &State| {
            s.list_nodes()
                .into_iter()
                .find(|n| n.name == "n")
                .map(|n| n.rack)
        };
        let mut s = open();
        s.on_register(Registration {
            name: "n".into(),
            spec: described("n", 0),
            identity: IDENTITY.into(),
            hostname: String::new(),
            work_dir: String::new(),
            version: crate::VERSION.into(),
            rack: "r2".into(),
        })
        .expect("register");
        assert_eq!(
            rack_of(&s).as_deref(),
            Some("r2"),
            "before its first heartbeat"
        );
        drop(s);
        let s = open();
        assert_eq!(rack_of(&s).as_deref(), Some("r2"), "after a restart");
        drop(s);
    }

    /// The live devices kept equal those counted afresh over the nodes.
    fn same(nodes: &Nodes, when: &str) -> u32 {
        let afresh = nodes.live_devices_afresh();
        assert_eq!(nodes.live_devices, u64::from(afresh), "after {when}");
        afresh
    }

    /// The live-device count every event's settle reads is kept as nodes change, not counted
    /// over the nodes: through joins, deaths, returns, leaves, registrations again, device
    /// changes, removals, a name taken over after a removal, a rollback's carry-over and a
    /// restart's read-back (a stand-in's devices cleared), it equals the count made afresh.
    #[test]
    fn hb_the_live_devices_kept_equal_those_counted_afresh() {
        let (_dir, mut s) = fresh_state("live-devices");
        let a = register(&mut s, "a", 2);
        let b = register(&mut s, "b", 0);
        let c = register(&mut s, "c", 3);
        for id in [a, b, c] {
            beat(&mut s, id, None);
        }
        assert_eq!(same(&s.nodes, "joins"), 5);
        // `a` and `c` stop beating: declared dead.
        let long_ago = Instant::now()
            .checked_sub(Duration::from_secs(1))
            .expect("a second after boot");
        for id in [a, c] {
            s.nodes.get_mut(id).expect("node").last_seen = long_ago;
        }
        s.nodes.get_mut(b).expect("node").last_seen = Instant::now() + Duration::from_secs(60);
        s.check_dead(Duration::ZERO).expect("check");
        assert_eq!(same(&s.nodes, "deaths"), 0);
        // `a` beats again: back.
        beat(&mut s, a, None);
        assert_eq!(same(&s.nodes, "a return"), 2);
        // `a`'s agent leaves, then registers again.
        beat(&mut s, a, Some(Leave::Signal));
        assert_eq!(same(&s.nodes, "a leave"), 0);
        register(&mut s, "a", 2);
        assert_eq!(same(&s.nodes, "a registration again"), 2);
        // Dead `c` registers again: back with its three devices.
        register(&mut s, "c", 3);
        assert_eq!(same(&s.nodes, "a dead node's registration"), 5);
        // A device change (as a stand-in replaced would make).
        s.nodes.set_spec(c, described("c", 1));
        assert_eq!(same(&s.nodes, "a device change"), 3);
        s.nodes.set_spec(b, described("b", 4));
        assert_eq!(same(&s.nodes, "devices on a node that had none"), 7);
        // `c` dies and is removed; a new node takes its name.
        s.nodes.get_mut(c).expect("node").last_seen = long_ago;
        for id in [a, b] {
            s.nodes.get_mut(id).expect("node").last_seen = Instant::now() + Duration::from_secs(60);
        }
        s.check_dead(Duration::ZERO).expect("check");
        assert_eq!(same(&s.nodes, "c's death"), 6);
        s.remove_node("c").expect("remove");
        assert_eq!(same(&s.nodes, "a removal"), 6);
        let c2 = register(&mut s, "c", 2);
        assert_ne!(c2, c);
        beat(&mut s, c2, None);
        assert_eq!(same(&s.nodes, "a name taken over"), 8);
        // A rollback's carry-over: liveness from the registry before.
        let mut fresh = Nodes::default();
        for (i, rec) in s.nodes.iter().enumerate() {
            let mut back = NodeRec::new(rec.spec.clone(), String::new(), rec.removed, true);
            back.alive = i % 2 == 0 && !rec.removed;
            fresh.admit(back);
        }
        same(&fresh, "admissions");
        fresh.carry_over(&s.nodes);
        assert_eq!(same(&fresh, "a carry-over"), 8);
        // A restart's read-back: a row whose devices are past a bound is kept out, devices
        // cleared; one within bounds counts once alive.
        let mut restored = Nodes::default();
        for (id, devices, speed) in [(0, 2, 1.0), (1, 3, 1e300)] {
            let mut spec = described(&format!("r{id}"), devices);
            spec.id = NodeId(id);
            for d in &mut spec.accelerators {
                d.speed = speed;
            }
            restored
                .restore(NodeRow {
                    id,
                    name: spec.name.clone(),
                    spec: node_json(
                        &spec,
                        Place {
                            hostname: "",
                            work_dir: "",
                            version: "",
                            rack: "",
                        },
                    )
                    .expect("json"),
                    identity: String::new(),
                    removed: false,
                })
                .expect("restore");
        }
        assert_eq!(same(&restored, "a read-back"), 2);
        assert!(
            restored
                .get(1)
                .is_some_and(|n| n.spec.accelerators.is_empty())
        );
        restored.set_alive(0, false);
        assert_eq!(same(&restored, "a death after a read-back"), 0);
        drop(s);
    }
}
