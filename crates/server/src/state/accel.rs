//! Accelerator sharing in the server (spec 01, issue 11): the node binding, kept by the core's one
//! implementation ([`hetsched_core::policy::binding::Binding`]), and what follows from it.
//!
//! - **Membership.** A live node joins the binding at its first heartbeat (after a registration
//!   or a server restart): a node with accelerators and an accelerator service is an **ANode**
//!   (its weight: the sum of its devices' speeds), any other node without accelerators an
//!   **NNode**, in the rack its agent names (`--rack`). A node declared dead (or removed) leaves.
//!   Nothing here is stored: a restarted server rebuilds the map from the heartbeats, in the order
//!   the nodes are heard from.
//! - **What the policy sees.** A bound NNode is seen by the scheduler with its ANode's devices
//!   ([`SchedulerView::set_attached_accelerators`](hetsched_core::model::view::SchedulerView::set_attached_accelerators)), so the one batch policy places accelerator
//!   work on it exactly as on an ANode; an unbound NNode has none and gets no GPU task. (As in the
//!   paper, the resource manager's view counts a shared device once per node that reaches it; the
//!   ANode's process queue serialises the real contention.)
//! - **The ANodes' queues.** Each ANode reports its service's queue lengths in its heartbeats.
//!   While the offloads it holds or waits to receive (`reading` + `process_queue`), plus those
//!   sent to its NNodes since that report, fill its process queue (`process_capacity`), its
//!   NNodes are held in the view (`SchedulerView::set_accelerator_held`): the policy gives them
//!   no more accelerator work until a report shows room.
//! - **Telling the agents.** Every heartbeat reply carries the node's binding: its ANode's name
//!   and the address of its accelerator service (the address that ANode's calls come from, at the
//!   port it announces), or unbound.
//! - **Failures.** An offload an NNode reports interrupted (the ANode's service unreachable, or
//!   the transfer broken) closes that ANode to its NNodes, as a full queue does, until the ANode
//!   beats again ([`State::accel_result`]). When an ANode leaves, its NNodes are re-added by the
//!   binding rules, and every
//!   GPU task they had offloaded (running on the NNode as the server sees it) is lost and
//!   re-queued with the next attempt; the NNode is told to kill the old attempt, whose late result
//!   is ignored, so no success is recorded twice; so is an offload read back after a restart
//!   whose ANode is declared dead before it was heard from (and so never rejoined the binding).
//!   When an NNode leaves, its tasks are re-queued
//!   as any dead node's; the ANode drops their results when the NNode's calls break.
//! - **Where a task ran.** The ANode an offloaded attempt was sent to is remembered here and
//!   handed to the task's kind ([`JobKind::offloaded`](crate::jobs::JobKind::offloaded)); the
//!   batch kind stores it in the task's row (`tasks.executed_node`), the workflow kind in the
//!   instance's (`wf_instances.executed_node`), with the dispatch, in the event's one
//!   transaction, so `hetsched tasks` shows it as the executed node after a restart or a
//!   rollback too, and the attempts still running are remembered here again
//!   ([`State::restore_offloads`]): the ANode's loss re-queues them as before. For a batch task
//!   and a workflow instance alike the ANode's devices and its start there come with the result
//!   (`offload_devices`, `offload_started_ns`) and replace the dispatch's in the row, once the
//!   one check, [`crate::jobs::offload_run`], believes them.

use super::State;
use super::StateError;
use super::types::{Dispatch, HeartbeatReply, HeartbeatReport, NodeInfo, TasksPage};
use crate::config::BindingKind;
use hetsched_core::NodeId;
use hetsched_core::model::cluster::Accelerator;
use hetsched_core::policy::binding::{Binding, BindingEvent, BindingMode};
use std::collections::{HashMap, HashSet};
use std::net::IpAddr;
use tracing::{info, warn};

/// The rack of a node whose agent names none.
pub const DEFAULT_RACK: &str = "default";

/// One accelerator device's state, as its ANode reports it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DeviceState {
    /// Device number.
    pub device: u32,
    /// A task of the accelerator service runs on it.
    pub busy: bool,
    /// Memory used (NVML; 0 when unknown).
    pub memory_used_bytes: u64,
    /// Utilisation in percent (NVML; 0 when unknown).
    pub utilisation_percent: u32,
    /// Whether NVML measured it.
    pub nvml: bool,
}

/// An accelerator service's devices and queue lengths.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AccelState {
    /// Its devices.
    pub devices: Vec<DeviceState>,
    /// Offloads being received or waiting to be (remote-read).
    pub reading: u32,
    /// Tasks waiting for a device.
    pub process_queue: u32,
    /// Results waiting to be sent back.
    pub write_queue: u32,
    /// Tasks the process queue holds (0: unknown, no limit).
    pub process_capacity: u32,
}

/// What a heartbeat says about the node's rack and accelerator service.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct AccelReport {
    /// The rack its agent names (empty: [`DEFAULT_RACK`]).
    pub rack: String,
    /// Port of its accelerator service (0: none).
    pub port: u32,
    /// Whether the service speaks TLS.
    pub tls: bool,
    /// The service's state.
    pub state: Option<AccelState>,
}

/// A node's binding as its agent is told it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeBinding {
    /// The ANode's name; empty = unbound.
    pub anode: String,
    /// Its accelerator service, `http(s)://host:port`.
    pub address: String,
}

/// What an agent last said about its accelerator service.
#[derive(Clone, Debug, Default)]
struct Service {
    ip: Option<IpAddr>,
    port: u32,
    tls: bool,
    rack: String,
    state: Option<AccelState>,
}

/// A node's role in the binding.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Role {
    ANode,
    NNode,
    /// A node with accelerators but no accelerator service: it runs its own GPU tasks and takes
    /// no NNode.
    Alone,
}

/// The server's accelerator sharing state (memory only).
#[derive(Debug)]
pub(crate) struct Sharing {
    binding: Binding,
    /// Nodes in the binding (alive), by id.
    members: HashMap<u32, Role>,
    services: HashMap<u32, Service>,
    /// Offloaded attempts: task → (attempt, ANode id). The batch and workflow kinds' are also
    /// in their rows; those still running are read back from there at a restart or a rollback.
    executed: HashMap<u64, (u32, u32)>,
    /// Per ANode: accelerator tasks sent to its NNodes since its last heartbeat (not yet in its
    /// reported queues).
    sent_since_report: HashMap<u32, u32>,
    /// ANodes whose accelerator service an NNode could not reach (an offload interrupted) since
    /// their last heartbeat: their NNodes are held as for a full queue until the ANode is heard
    /// from again — else a crashed ANode, alive for the server until its dead timeout, had every
    /// GPU task of its NNodes lost attempt after attempt until the tasks failed.
    unreachable: HashSet<u32>,
    /// Moves whenever something a node's binding as its agent is told it depends on changes:
    /// the map (a node joins or leaves, a unit is bound or unbound) or an ANode's service
    /// address (its peer address, port or TLS). What was told is kept per node with the
    /// generation it was made at ([`Sharing::told`]), and ANodes' passes over their NNodes are
    /// skipped while it and their closed state stay ([`Sharing::passed`]).
    generation: u64,
    /// Per node: the binding its agent was last told and the [`Sharing::generation`] it was
    /// made at. A heartbeat's reply carries it again unless the generation moved.
    told: HashMap<u32, (u64, NodeBinding)>,
    /// Per ANode: whether it was closed ([`State::anode_closed`]) at its last pass over its
    /// NNodes ([`State::hold_if_full`]), and the [`Sharing::generation`] then. Each change of
    /// an ANode's closed state is followed by its pass, so one at the same closed state and
    /// generation would change nothing.
    passed: HashMap<u32, (bool, u64)>,
}

impl Sharing {
    /// Something a binding depends on changed: every kept binding and pass is stale.
    fn changed(&mut self) {
        self.generation += 1;
    }

    /// An empty map under the configured mode.
    pub(crate) fn new(kind: BindingKind, slots: u32) -> Self {
        let mode = match kind {
            BindingKind::Plain => BindingMode::Plain,
            BindingKind::Weighted => BindingMode::Weighted,
            BindingKind::Container => BindingMode::Container {
                slots: slots.max(1),
            },
        };
        Self {
            binding: Binding::new(mode),
            members: HashMap::new(),
            services: HashMap::new(),
            executed: HashMap::new(),
            sent_since_report: HashMap::new(),
            unreachable: HashSet::new(),
            generation: 0,
            told: HashMap::new(),
            passed: HashMap::new(),
        }
    }
}

/// The node's own ANode: in mode `container` the ANode of its first container (the binding its
/// agent is told; each task names the ANode of its own container).
fn unit_of(name: &str, mode: BindingMode) -> hetsched_core::policy::binding::Unit {
    container_unit(name, mode, 0)
}

/// The binding unit of container `k` of node `name` (the whole node outside mode `container`).
fn container_unit(name: &str, mode: BindingMode, k: u32) -> hetsched_core::policy::binding::Unit {
    hetsched_core::policy::binding::Unit {
        nnode: name.into(),
        container: matches!(mode, BindingMode::Container { .. }).then_some(k),
    }
}

/// Units one NNode has: its containers in mode `container`, else one.
fn containers(mode: BindingMode) -> u32 {
    match mode {
        BindingMode::Container { slots } => slots.max(1),
        _ => 1,
    }
}

impl State {
    /// The most devices the binding may show one node without devices of its own with: one
    /// ANode's (at most [`MAX_ACCELERATORS`](crate::limits::MAX_ACCELERATORS)) per container it
    /// binds ([`Self::reached_anodes`]). Registration bounds the view's total by it
    /// ([`super::nodes::Nodes::room_for`]), as nothing refuses [`Self::refresh_reach`].
    pub(super) fn device_reach(&self) -> u64 {
        u64::from(containers(self.sharing.binding.mode())) * crate::limits::MAX_ACCELERATORS as u64
    }

    /// Records the address an agent's call came from (its accelerator service listens there).
    pub fn note_peer(&mut self, node: u32, ip: Option<IpAddr>) {
        if let Some(ip) = ip {
            let s = self.sharing.services.entry(node).or_default();
            if s.ip != Some(ip) {
                s.ip = Some(ip);
                self.sharing.changed();
            }
        }
    }

    /// Refuses certifying `host` (a DNS name an agent advertises) for a call from `ip` when a
    /// live node whose calls come from another address advertises it: that name is the other
    /// agent's, and a certificate for it would let the caller pass for it
    /// (`Agent.ListenerCertificate`, [`crate::agent_ca`]). The rule for an agent that does not
    /// say which node it is (one that predates `ListenerCertificateRequest.node`): agents
    /// sharing an address are not told apart, and one that restarts from a new address is
    /// refused its own name until its old node is declared dead.
    /// [`Self::check_listener_name_for_node`] is the rule for one that says.
    pub fn check_listener_name(&self, host: &str, ip: IpAddr) -> Result<(), String> {
        self.check_listener_name_by(host, |node| {
            let from = self.sharing.services.get(&node).and_then(|s| s.ip);
            if from.map(|f| f.to_canonical()) == Some(ip.to_canonical()) {
                None
            } else {
                Some(from.map_or(String::new(), |f| format!(", whose calls come from {f}")))
            }
        })
    }

    /// Refuses certifying `host` (a DNS name an agent advertises) for the agent of node `name`
    /// proving `identity` when any other live node advertises it, wherever the calls of either
    /// come from: agents sharing an address (one host, NAT) cannot get each other's names, and
    /// an agent that restarts from a new address is certified its own. `name` registered to a
    /// live node with another identity is refused (as its registration would be); a dead
    /// node's name, or one not registered yet, is this caller's to take.
    pub fn check_listener_name_for_node(
        &self,
        host: &str,
        name: &str,
        identity: &str,
    ) -> Result<(), String> {
        let own = self.check_listener_claim(name, identity)?;
        self.check_listener_name_by(host, |node| (Some(node) != own).then(String::new))
    }

    /// Refuses a listener certificate asked for node `name` with `identity` when `name` is
    /// registered to a live node with another identity (as its registration would be), or
    /// when `identity` is empty; the node, if the identity is its own. Asked whatever the
    /// request advertises, a host or none: naming a node, it speaks for that node.
    pub fn check_listener_claim(&self, name: &str, identity: &str) -> Result<Option<u32>, String> {
        if identity.is_empty() {
            return Err(format!(
                "the request names node `{name}` without its identity: send both or neither"
            ));
        }
        let own = self.nodes.by_name(name).and_then(|id| {
            let rec = self.nodes.get(id)?;
            (!rec.identity.is_empty() && super::nodes::same_secret(&rec.identity, identity))
                .then_some(id)
        });
        if own.is_none()
            && let Some(rec) = self
                .nodes
                .by_name(name)
                .and_then(|id| self.nodes.get(id))
                .filter(|r| r.alive && !r.removed && !r.identity.is_empty())
        {
            warn!(node = %rec.spec.name, "a listener certificate asked for the node with another identity: refused");
            return Err(format!(
                "this call speaks for node `{name}` without the identity that node \
                     registered with: only the node's own agent may ask for its certificate \
                     (give this agent its own --name, or stop the other one and retry once it \
                     is declared dead)"
            ));
        }
        Ok(own)
    }

    /// The refusal of `host` if a live node advertises it that `other` says is not the caller
    /// (`Some(what to add about it)`).
    fn check_listener_name_by(
        &self,
        host: &str,
        other: impl Fn(u32) -> Option<String>,
    ) -> Result<(), String> {
        for (node, address) in self.jobs.workflow.advertised() {
            let Some(rec) = self.nodes.get(node).filter(|r| r.alive && !r.removed) else {
                continue;
            };
            let bare = address.strip_prefix("https://").unwrap_or(address);
            let advertised = bare
                .rsplit_once(':')
                .map_or(bare, |(h, _port)| h)
                .trim_matches(['[', ']']);
            if !advertised.eq_ignore_ascii_case(host) {
                continue;
            }
            let Some(about) = other(node) else {
                continue;
            };
            return Err(format!(
                "advertised host `{host}` is advertised by node `{}`{about}: the server \
                 certifies a name for one agent only; advertise a name of this agent's own, or \
                 give the agent --log-cert and --log-key from the operator's CA (the server's \
                 `[tls] agent_ca`)",
                rec.spec.name,
            ));
        }
        Ok(())
    }

    /// The part of a heartbeat that concerns accelerator sharing, run after the kinds filled the
    /// node: the node's service and rack, its joining the binding, the ANode of each GPU task just
    /// sent to an NNode, and the node's binding in the reply.
    pub(super) fn accel_heartbeat(
        &mut self,
        nid: NodeId,
        req: &HeartbeatReport,
        reply: &mut HeartbeatReply,
    ) -> Result<(), StateError> {
        let id = nid.0;
        let s = self.sharing.services.entry(id).or_default();
        if s.port != req.accel.port || s.tls != req.accel.tls {
            s.port = req.accel.port;
            s.tls = req.accel.tls;
            // (`Sharing::changed`, on a field `s` does not borrow.)
            self.sharing.generation += 1;
        }
        // Written only when they differ: most beats repeat them, and a copy costs allocations.
        if s.state != req.accel.state {
            s.state.clone_from(&req.accel.state);
        }
        let rack = if req.accel.rack.is_empty() {
            DEFAULT_RACK
        } else {
            req.accel.rack.as_str()
        };
        if s.rack != rack {
            s.rack = rack.to_string();
        }
        if !self.sharing.members.contains_key(&id) {
            self.accel_join(id)?;
        }
        self.forget_killed_offloads(reply);
        match self.sharing.members.get(&id) {
            Some(Role::ANode) => {
                // A fresh report of its queues, from a node that is up.
                self.sharing.sent_since_report.remove(&id);
                if self.sharing.unreachable.remove(&id) {
                    info!(anode = %self.nodes.name(id), "the ANode is heard from again: its NNodes may offload to it");
                }
                self.hold_if_full(id)?;
                // Its keys, in every reply: an agent that restarted, or missed a reply, has
                // them again at its next beat, and each epoch's key comes before its first
                // ticket.
                let now_ms = super::now_ns() / 1_000_000;
                reply.offload_keys = self.offload_keys_of(id, now_ms);
                let current = self.offload_keys.epoch(now_ms);
                reply.offload_key = reply
                    .offload_keys
                    .iter()
                    .find(|(e, _)| *e == current)
                    .map(|(_, k)| k.clone())
                    .unwrap_or_default();
            }
            Some(Role::NNode) if !reply.assignments.is_empty() => {
                // The NNode runs no GPU task itself: each of its devices is one of its ANodes'
                // (its containers' in mode `container`), and the task goes there.
                let reached = self.reached_devices(id);
                let mut touched = Vec::new();
                for a in &reply.assignments {
                    let Some(&anode) = a.devices.first().and_then(|&d| reached.get(d as usize))
                    else {
                        continue;
                    };
                    self.sharing.executed.insert(a.task_id, (a.attempt, anode));
                    if let Some(kind) = self.jobs.owner_mut(a.task_id) {
                        kind.offloaded(a.task_id, a.attempt, anode);
                    }
                    let ticket = self.offload_ticket(a, id, anode);
                    reply
                        .offload_to
                        .push((a.task_id, self.service_of(anode), ticket));
                    *self.sharing.sent_since_report.entry(anode).or_default() += 1;
                    if !touched.contains(&anode) {
                        touched.push(anode);
                    }
                }
                for anode in touched {
                    self.hold_if_full(anode)?;
                }
            }
            _ => {}
        }
        reply.binding = Some(self.told_binding(id));
        Ok(())
    }

    /// Node `id`'s binding as its agent is told it ([`Self::binding_of`]), made again only when
    /// the [`Sharing::generation`] moved since it was last made: an unchanged binding costs a
    /// look-up and a copy at each heartbeat, not the map's and the services' look-ups.
    fn told_binding(&mut self, id: u32) -> NodeBinding {
        let generation = self.sharing.generation;
        if let Some((at, told)) = self.sharing.told.get(&id)
            && *at == generation
        {
            debug_assert_eq!(*told, self.binding_of(id), "a kept binding went stale");
            return told.clone();
        }
        let binding = self.binding_of(id);
        self.sharing.told.insert(id, (generation, binding.clone()));
        binding
    }

    /// Offloads this reply kills whose kinds no longer hold them offloaded at that attempt
    /// (`JobKind::offloaded_to`) leave memory: a workflow instance taken back from an NNode's
    /// queue before it started (it never reached its ANode, and runs again under the same
    /// attempt number elsewhere). Kept, the record outlived the attempt: the loss of that ANode
    /// could lose the instance's next run, and it stayed in memory for the server's life.
    fn forget_killed_offloads(&mut self, reply: &HeartbeatReply) {
        for k in &reply.kill {
            let Some(&(attempt, anode)) = self.sharing.executed.get(&k.task_id) else {
                continue;
            };
            let held = self
                .jobs
                .owner(k.task_id)
                .and_then(|kind| kind.offloaded_to(k.task_id));
            if attempt == k.attempt && held != Some((attempt, anode)) {
                self.sharing.executed.remove(&k.task_id);
            }
        }
    }

    /// Replaces the keys offloads are signed with: the data directory's secret
    /// ([`crate::datadir::offload_secret`]), given once at start, before any heartbeat. The
    /// tickets' lifetime and the keys' rotation stay the configuration's (`[offload]`).
    pub fn set_offload_keys(&mut self, keys: crate::tickets::OffloadKeys) {
        self.offload_keys = keys.with_timing(self.offload_keys.timing());
    }

    /// The offload keys ANode `anode` holds at `now_ms`, by epoch ([`crate::tickets`]): from
    /// its name and the identity its agent registered with.
    fn offload_keys_of(&self, anode: u32, now_ms: u64) -> Vec<(u64, Vec<u8>)> {
        let identity = self.nodes.get(anode).map_or("", |n| n.identity.as_str());
        self.offload_keys
            .keys(self.nodes.name(anode), identity, now_ms)
    }

    /// The ticket of dispatch `d`, sent to NNode `nnode` to be offloaded to ANode `anode`: it
    /// names the account the task runs as, its job's owner's (as its spec says,
    /// [`crate::users::Users::run_as`]), covers what it runs ([`Self::offload_runs`]), and
    /// expires the configured `[offload] ticket_lifetime` from now
    /// ([`crate::tickets::OffloadTiming`]).
    fn offload_ticket(&self, d: &Dispatch, nnode: u32, anode: u32) -> Vec<u8> {
        let run_as = self
            .jobs
            .owner(d.task_id)
            .and_then(|k| k.job_of_task(d.task_id))
            .map(|job| self.users.run_as(job))
            .unwrap_or_default();
        let identity = self.nodes.get(anode).map_or("", |n| n.identity.as_str());
        self.offload_keys.ticket(
            identity,
            &crate::tickets::Offload {
                task_id: d.task_id,
                attempt: d.attempt,
                run_as: &run_as,
                nnode: self.nodes.name(nnode),
                anode: self.nodes.name(anode),
                runs: self.offload_runs(d, &run_as),
            },
            super::now_ns() / 1_000_000,
        )
    }

    /// What dispatch `d` runs on its ANode, as its ticket covers it
    /// ([`crate::tickets::offload_runs`]): its kind's spec, run as `run_as`.
    fn offload_runs(&self, d: &Dispatch, run_as: &str) -> crate::tickets::Runs {
        let spec = self
            .jobs
            .owner(d.task_id)
            .and_then(|k| k.dispatched_spec(d.task_id, d.spec))
            .unwrap_or_default();
        crate::tickets::offload_runs(spec, run_as, d)
    }

    /// Attempt `attempt` of `task` ended (its result was handed to its kind): a kind that stores
    /// where it was offloaded (batch and workflows, in the task's or instance's row) lists it
    /// from there, so its entry leaves memory — else every offloaded task of a server's life
    /// stayed in [`Sharing::executed`]. A kind that does not keeps it for its listings.
    pub(super) fn offload_ended(&mut self, task: u64, attempt: u32) {
        let stored = self
            .jobs
            .owner(task)
            .and_then(|k| k.offloaded_to(task))
            .is_some_and(|(at, _)| at == attempt);
        if stored
            && self
                .sharing
                .executed
                .get(&task)
                .is_some_and(|&(at, _)| at == attempt)
        {
            self.sharing.executed.remove(&task);
        }
    }

    /// How many offloaded attempts memory remembers ([`Sharing::executed`]): those running, and
    /// those of kinds that store none.
    pub fn offloads_in_memory(&self) -> usize {
        self.sharing.executed.len()
    }

    /// After a restart or a rollback: the offloaded attempts still running, as their kinds
    /// stored them, are remembered again — an interrupted offload closes its ANode, and the
    /// ANode's loss re-queues them, as before.
    pub(super) fn restore_offloads(&mut self) {
        for n in self.nodes.iter() {
            for &t in &n.running {
                if let Some(e) = self.jobs.owner(t).and_then(|k| k.offloaded_to(t)) {
                    self.sharing.executed.insert(t, e);
                }
            }
        }
    }

    /// An offload result from NNode `nid`: one interrupted (its ANode's service could not be
    /// reached, or broke off) closes that ANode to its NNodes until its next heartbeat, and wakes
    /// it so that, if it is up, that heartbeat comes at once. Called before the beat's results
    /// are handed to their kinds, so the same beat dispatches no more accelerator work there.
    pub(super) fn accel_result(
        &mut self,
        nid: NodeId,
        task: u64,
        attempt: u32,
        interrupted: bool,
    ) -> Result<(), StateError> {
        if !interrupted || self.sharing.members.get(&nid.0) != Some(&Role::NNode) {
            return Ok(());
        }
        let Some(&(at, anode)) = self.sharing.executed.get(&task) else {
            return Ok(());
        };
        if at != attempt || !self.sharing.unreachable.insert(anode) {
            return Ok(());
        }
        warn!(nnode = %self.nodes.name(nid.0), anode = %self.nodes.name(anode),
            "an offload to the ANode was interrupted: no more offloads to it until it is heard from");
        self.nodes.wakes.node(anode);
        self.hold_if_full(anode)
    }

    /// Whether ANode `anode` takes no more offloads now: an NNode could not reach it since its
    /// last heartbeat ([`Sharing::unreachable`]), or its queue is full.
    fn anode_closed(&self, anode: u32) -> bool {
        self.sharing.unreachable.contains(&anode) || self.anode_full(anode)
    }

    /// Whether ANode `anode`'s process queue is full: the offloads it holds or waits to receive
    /// by its last report, plus those sent to its NNodes since, reach the queue's capacity.
    fn anode_full(&self, anode: u32) -> bool {
        let Some(st) = self
            .sharing
            .services
            .get(&anode)
            .and_then(|s| s.state.as_ref())
        else {
            return false;
        };
        let sent = self
            .sharing
            .sent_since_report
            .get(&anode)
            .copied()
            .unwrap_or(0);
        st.process_capacity > 0
            && st
                .reading
                .saturating_add(st.process_queue)
                .saturating_add(sent)
                >= st.process_capacity
    }

    /// Holds ANode `anode`'s NNodes in the view while it is closed (its queue full, or its
    /// service unreachable), and lets them go when it is not (spec 01: the policy sees the
    /// ANodes' queue lengths).
    fn hold_if_full(&mut self, anode: u32) -> Result<(), StateError> {
        // Each change of an ANode's closed state, and of the map, is followed by a pass: one
        // at the same closed state and generation as the last would set nothing (an ANode's
        // every heartbeat asks, and a pass looks at every member).
        let closed = self.anode_closed(anode);
        let now = (closed, self.sharing.generation);
        if self.sharing.passed.get(&anode) == Some(&now) {
            debug_assert!(
                self.held_as_passed(anode),
                "an ANode's pass was skipped while its NNodes' holds were not as it would set them"
            );
            return Ok(());
        }
        self.sharing.passed.insert(anode, now);
        let mut nnodes: Vec<u32> = self
            .sharing
            .members
            .iter()
            .filter(|&(&n, &r)| r == Role::NNode && self.container_anodes(n).contains(&Some(anode)))
            .map(|(&n, _)| n)
            .collect();
        nnodes.sort_unstable();
        for n in nnodes {
            // An NNode whose containers reach several ANodes is held while any of them is closed
            // (the view holds a node, not a device).
            let full = self
                .container_anodes(n)
                .into_iter()
                .flatten()
                .any(|a| self.anode_closed(a));
            if self.view.node(NodeId(n)).accel_held != full {
                info!(nnode = %self.nodes.name(n), anode = %self.nodes.name(anode), held = full,
                    "the ANode is {}", if full { "closed (its queue full, or unreachable): no more offloads for now" } else { "open again" });
                self.view.set_accelerator_held(NodeId(n), full)?;
            }
        }
        Ok(())
    }

    /// Whether every NNode bound to ANode `anode` is held as a pass would hold it now (debug
    /// builds check a skipped pass with it).
    fn held_as_passed(&self, anode: u32) -> bool {
        self.sharing.members.iter().all(|(&n, &r)| {
            let anodes = self.container_anodes(n);
            r != Role::NNode
                || !anodes.contains(&Some(anode))
                || self.view.node(NodeId(n)).accel_held
                    == anodes.into_iter().flatten().any(|a| self.anode_closed(a))
        })
    }

    /// The ANode node `id` is bound to.
    fn bound_anode(&self, id: u32) -> Option<u32> {
        let name = &self.nodes.get(id)?.spec.name;
        let anode = self
            .sharing
            .binding
            .anode_of(&unit_of(name, self.sharing.binding.mode()))?;
        self.nodes.by_name(anode)
    }

    /// The ANode of each of node `id`'s containers (one outside mode `container`).
    fn container_anodes(&self, id: u32) -> Vec<Option<u32>> {
        let Some(n) = self.nodes.get(id) else {
            return Vec::new();
        };
        let mode = self.sharing.binding.mode();
        (0..containers(mode))
            .map(|k| {
                let unit = container_unit(&n.spec.name, mode, k);
                let anode = self.sharing.binding.anode_of(&unit)?;
                self.nodes.by_name(anode)
            })
            .collect()
    }

    /// The ANodes NNode `id` reaches, each once, in container order.
    fn reached_anodes(&self, id: u32) -> Vec<u32> {
        let mut out = Vec::new();
        for a in self.container_anodes(id).into_iter().flatten() {
            if !out.contains(&a) {
                out.push(a);
            }
        }
        out
    }

    /// For each device NNode `id` is seen with, the ANode that owns it: the devices of its
    /// [`Self::reached_anodes`], one after another.
    fn reached_devices(&self, id: u32) -> Vec<u32> {
        self.reached_anodes(id)
            .into_iter()
            .flat_map(|a| {
                let n = self.nodes.get(a).map_or(0, |n| n.spec.accelerators.len());
                std::iter::repeat_n(a, n)
            })
            .collect()
    }

    /// NNode `nid` is seen with the devices of the ANodes it reaches, and held while one of
    /// them has a full queue.
    fn refresh_reach(&mut self, nid: u32) -> Result<(), StateError> {
        let anodes = self.reached_anodes(nid);
        let devices: Vec<Accelerator> = anodes
            .iter()
            .filter_map(|&a| self.nodes.get(a))
            .flat_map(|n| n.spec.accelerators.iter().cloned())
            .collect();
        self.view.set_attached_accelerators(NodeId(nid), devices)?;
        let held = anodes.iter().any(|&a| self.anode_closed(a));
        self.view.set_accelerator_held(NodeId(nid), held)?;
        Ok(())
    }

    /// The live nodes' descriptions as a submission must fit them: a bound NNode with the
    /// devices of the ANodes it reaches, as the policy sees it (else a GPU job aimed at a bound
    /// NNode, `--requires node:n1`, was refused as if no node had a GPU).
    pub(super) fn reachable_specs(&self) -> Vec<hetsched_core::model::cluster::Node> {
        let mut live = Vec::new();
        for (i, n) in self.nodes.iter().enumerate() {
            if !n.alive || n.removed {
                continue;
            }
            let mut spec = n.spec.clone();
            if self.sharing.members.get(&(i as u32)) == Some(&Role::NNode) {
                spec.accelerators = self
                    .reached_anodes(i as u32)
                    .into_iter()
                    .filter_map(|a| self.nodes.get(a))
                    .flat_map(|a| a.spec.accelerators.iter().cloned())
                    .collect();
            }
            live.push(spec);
        }
        live
    }

    /// Node `id`'s binding as its agent is told it.
    fn binding_of(&self, id: u32) -> NodeBinding {
        match self.bound_anode(id) {
            Some(anode) => self.service_of(anode),
            None => NodeBinding::default(),
        }
    }

    /// ANode `anode`'s name and accelerator service address (default if it announced none).
    fn service_of(&self, anode: u32) -> NodeBinding {
        let s = self
            .sharing
            .services
            .get(&anode)
            .cloned()
            .unwrap_or_default();
        let Some(ip) = s.ip.filter(|_| s.port != 0) else {
            return NodeBinding::default();
        };
        let host = match ip {
            IpAddr::V4(v4) => v4.to_string(),
            IpAddr::V6(v6) => format!("[{v6}]"),
        };
        NodeBinding {
            anode: self.nodes.name(anode).to_string(),
            address: format!(
                "{}://{host}:{}",
                if s.tls { "https" } else { "http" },
                s.port
            ),
        }
    }

    fn accel_join(&mut self, id: u32) -> Result<(), StateError> {
        let Some(n) = self.nodes.get(id) else {
            return Ok(());
        };
        if !n.alive || n.removed {
            return Ok(());
        }
        let name = n.spec.name.clone();
        let s = self.sharing.services.get(&id).cloned().unwrap_or_default();
        let rack = if s.rack.is_empty() {
            DEFAULT_RACK.to_string()
        } else {
            s.rack
        };
        let role = match (n.spec.accelerators.is_empty(), s.port != 0) {
            (true, _) => Role::NNode,
            (false, true) => Role::ANode,
            (false, false) => Role::Alone,
        };
        let events = match role {
            Role::NNode => self.sharing.binding.add_nnode(&name, &rack),
            Role::ANode => {
                let weight: f64 = n.spec.accelerators.iter().map(|a| a.speed).sum();
                self.sharing.binding.add_anode(&name, &rack, weight)
            }
            Role::Alone => Ok(Vec::new()),
        };
        let events = match events {
            Ok(e) => e,
            Err(e) => {
                warn!(node = %name, "binding: {e}");
                return Ok(());
            }
        };
        self.sharing.members.insert(id, role);
        self.sharing.changed();
        info!(node = %name, rack = %rack, role = ?role, "joined the accelerator binding");
        self.apply_binding_events(&events, None)
    }

    /// Takes the nodes that died or were removed out of the binding (called by
    /// [`State::check_dead`] before it commits).
    pub(super) fn accel_left(&mut self) -> Result<(), StateError> {
        let mut gone: Vec<u32> = self
            .sharing
            .members
            .keys()
            .copied()
            .filter(|&id| self.nodes.get(id).is_none_or(|n| !n.alive || n.removed))
            .collect();
        gone.sort_unstable();
        for id in gone {
            let role = self.sharing.members.remove(&id);
            self.sharing.changed();
            self.sharing.sent_since_report.remove(&id);
            self.sharing.unreachable.remove(&id);
            self.sharing.told.remove(&id);
            self.sharing.passed.remove(&id);
            let name = self.nodes.name(id).to_string();
            if role == Some(Role::Alone) {
                continue;
            }
            let events = match self.sharing.binding.remove(&name) {
                Ok(e) => e,
                Err(e) => {
                    warn!(node = %name, "binding: {e}");
                    continue;
                }
            };
            info!(node = %name, moved = events.len(), "left the accelerator binding");
            if role == Some(Role::NNode) {
                // Its tasks were re-queued with the node; it reaches no device any more.
                self.view
                    .set_attached_accelerators(NodeId(id), Vec::new())?;
            }
            let lost_anode = (role == Some(Role::ANode)).then_some(name);
            self.apply_binding_events(&events, lost_anode.as_deref())?;
        }
        self.lose_orphaned_offloads()
    }

    /// Loses the offloads still running whose ANode is dead or removed but not in the binding:
    /// one declared dead before it was heard from after a restart never rejoined it, so
    /// [`State::accel_left`] does not see it leave, while the offloads read back from the store
    /// ([`State::restore_offloads`]) still name it. Without this they stayed running until their
    /// NNode's agent reported them interrupted.
    fn lose_orphaned_offloads(&mut self) -> Result<(), StateError> {
        let mut orphaned: Vec<(u64, u32)> = self
            .nodes
            .iter()
            .flat_map(|n| n.running.iter().copied())
            .filter_map(|t| {
                let &(_, anode) = self.sharing.executed.get(&t)?;
                let gone = self.nodes.get(anode).is_none_or(|n| !n.alive || n.removed);
                (gone && !self.sharing.members.contains_key(&anode)).then_some((t, anode))
            })
            .collect();
        orphaned.sort_unstable_by(|a, b| b.cmp(a));
        orphaned.dedup();
        for (t, anode) in orphaned {
            let name = self.nodes.name(anode).to_string();
            warn!(anode = %name, task = t, "an offload's ANode was lost before it was heard from again: re-queued");
            self.lose(t, &format!("its ANode `{name}` was lost"))?;
        }
        Ok(())
    }

    /// Applies binding changes: each NNode concerned reaches its new ANode's devices (or none).
    /// With `lost_anode`, the NNodes were bound to that ANode, which is gone: the tasks they had
    /// sent it are lost (their kinds re-queue them) first.
    fn apply_binding_events(
        &mut self,
        events: &[BindingEvent],
        lost_anode: Option<&str>,
    ) -> Result<(), StateError> {
        if !events.is_empty() {
            self.sharing.changed();
        }
        for e in events {
            let (unit, anode) = match e {
                BindingEvent::Bound { nnode, anode } => (nnode, Some(anode)),
                BindingEvent::Unbound { nnode } => (nnode, None),
            };
            let Some(nid) = self.nodes.by_name(&unit.nnode) else {
                continue;
            };
            if let Some(lost) = lost_anode {
                let lost_id = self.nodes.by_name(lost);
                let reason = format!("its ANode `{lost}` was lost");
                let mut offloaded: Vec<u64> = self
                    .nodes
                    .get(nid)
                    .map(|n| n.running.iter().copied().collect())
                    .unwrap_or_default();
                offloaded.retain(|t| {
                    self.sharing
                        .executed
                        .get(t)
                        .is_some_and(|&(_, a)| Some(a) == lost_id)
                });
                offloaded.sort_unstable_by(|a, b| b.cmp(a));
                if !offloaded.is_empty() {
                    warn!(node = %unit.nnode, tasks = offloaded.len(), "{reason}: its offloaded tasks are re-queued");
                }
                for t in offloaded {
                    self.lose(t, &reason)?;
                }
            }
            match anode {
                Some(a) => info!(nnode = %unit, anode = %a, "bound"),
                None => info!(nnode = %unit, "unbound: no ANode in its rack"),
            }
            self.refresh_reach(nid)?;
        }
        Ok(())
    }

    /// Fills the accelerator sharing fields of a node listing: rack, role, binding, service state.
    pub(super) fn accel_nodes(&self, list: &mut [NodeInfo]) {
        for n in list {
            if let Some(s) = self.sharing.services.get(&n.id) {
                if !s.rack.is_empty() {
                    n.rack = s.rack.clone();
                }
                n.accel = s.state.clone();
            }
            n.role = if n.accelerators.is_empty() {
                "nnode"
            } else {
                "anode"
            }
            .to_string();
            // The view lists a bound NNode's attached devices as free GPUs; show its own (none).
            if n.accelerators.is_empty() {
                n.free_gpus = 0;
            }
            if let Some(a) = self.bound_anode(n.id) {
                n.bound_to = self.nodes.name(a).to_string();
            }
            if matches!(self.sharing.binding.mode(), BindingMode::Container { .. })
                && self.sharing.members.get(&n.id) == Some(&Role::NNode)
            {
                n.containers = self
                    .container_anodes(n.id)
                    .into_iter()
                    .map(|a| a.map_or(String::new(), |a| self.nodes.name(a).to_string()))
                    .collect();
            }
        }
    }

    /// The offloaded attempts among tasks `ids`: task id → (attempt, ANode name), for a page read
    /// from the store after the lock is released.
    pub(super) fn executed_in(
        &self,
        ids: std::ops::Range<u64>,
    ) -> std::collections::HashMap<u64, (u32, String)> {
        self.sharing
            .executed
            .iter()
            .filter(|(id, _)| ids.contains(id))
            .map(|(&id, &(at, anode))| (id, (at, self.nodes.name(anode).to_string())))
            .collect()
    }

    /// Fills each listed task's executed node: the ANode its latest attempt was offloaded to
    /// (as its kind stored it, or as remembered here), else the node it was placed on.
    pub(super) fn accel_tasks(&self, page: &mut TasksPage) {
        for t in &mut page.tasks {
            match self.sharing.executed.get(&t.id) {
                Some(&(at, anode)) if at == t.attempt => {
                    t.executed_node = self.nodes.name(anode).to_string();
                }
                // A ready workflow instance listed on the node it waits on has not run there.
                _ if t.executed_node.is_empty() && t.state != "ready" => {
                    t.executed_node = t.node.clone();
                }
                _ => {}
            }
        }
    }
}
