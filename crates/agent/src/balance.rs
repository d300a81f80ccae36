//! The agent's side of PCDDB (spec 05 §4, issue 13): one core [`PcddbNode`] machine per PCDDB
//! workflow the server says this node balances — the same state machine the simulator drives,
//! never a second copy. This module only carries its events and messages:
//! - a self-check every period (the server's `[workflow] check_interval`, [`CHECK_INTERVAL`] by
//!   default; `NodeEvent::SelfCheck`) while the agent balances a workflow: a node below
//!   `LT × cores` sends `status` to the launch node;
//! - an allocation request arriving (from the launch node in a heartbeat reply, or from another
//!   agent over gRPC, `AgentData.Deliver`): the machine takes `MT × cores − x` instances, replies
//!   to the launch node, and passes the rest on to the first node of its underloaded table —
//!   over gRPC to that agent ([`Forward`]); if that agent cannot be reached, the request returns
//!   to the launch node for reallocation (event e);
//! - an instance ending here (`NodeEvent::Finished`) frees its core; its `result` reaches the
//!   launch node as the heartbeat's durable result, so the machine's copy is not sent twice.
//!
//! Messages to the launch node (the server) ride the next heartbeat ([`Balancer::take_outbox`]).
//! Counters of messages sent and received go with every heartbeat (`hetsched nodes`).
//!
//! **Grants.** Every agent holds the agent token, so `AgentData.Deliver` cannot tell from it
//! that the launch node sent a request: any holder could make this machine take instances it
//! invented or moved. The server signs each request it sends out (`BalanceMessage.grant`, see
//! [`hetsched_proto::ticket::Grant`]) and gives this node the workflow's public balancing key
//! (`PcddbJob.balance_key`); a request keeps its grant from hop to hop ([`Granted`]), and this
//! agent acts on a request from another agent only when the key verifies the grant and every
//! instance offered, with its requirements, was granted ([`Balancer::check_peer`]). A refused
//! request goes back to the launch node from the agent that sent it (event e), so nothing is
//! lost. A request that repeats an instance or a table entry is refused too.
//!
//! A grant says who made a request, not who may take from it: an agent that sees one pass can
//! replay it. The server settles that from its side: it places an instance on this node from
//! this node's `reply` only while a request sent to this node (its table) offers it, once, and
//! tells the machine to forget anything else it took (`dropped`; the server's
//! `jobs/workflow/offers`).

use thiserror::Error;

use crate::dataflow::PeerAuth;
use hetsched_core::NodeId;
use hetsched_core::policy::graph::pcddb::PcddbNode;
use hetsched_core::policy::graph::{
    Body, ClusterId, GraphNode, InstanceId, Message, NodeEvent, Outgoing, Thresholds,
};
use hetsched_proto as pb;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How often each machine checks itself against LT when the server does not say.
pub const CHECK_INTERVAL: Duration = Duration::from_millis(100);

/// The launch node's grant a request travels with, as its envelope carries it: kept from the
/// request a machine was handed to the request it passes on or returns.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Granted {
    serial: u64,
    instances: Vec<u32>,
    requires: Vec<u64>,
    table: Vec<u32>,
    grant: Vec<u8>,
}

impl Granted {
    fn of(env: &pb::BalanceMessage) -> Self {
        Self {
            serial: env.grant_serial,
            instances: env.granted_instances.clone(),
            requires: env.granted_requires.clone(),
            table: env.granted_table.clone(),
            grant: env.grant.clone(),
        }
    }

    /// The envelope of `message_json` for workflow `job_id` with this grant.
    fn envelope(
        &self,
        job_id: u64,
        message_json: String,
        peers: std::collections::HashMap<u32, String>,
    ) -> pb::BalanceMessage {
        pb::BalanceMessage {
            job_id,
            message_json,
            peers,
            grant_serial: self.serial,
            granted_instances: self.instances.clone(),
            granted_requires: self.requires.clone(),
            grant: self.grant.clone(),
            granted_table: self.table.clone(),
        }
    }
}

/// Why another agent's PCDDB message is not acted on ([`Balancer::check_peer`]).
#[derive(Debug, Error, PartialEq, Eq)]
pub enum PeerRefusal {
    /// Not a request this node could act on whoever sent it (undecodable, not a request, for
    /// another node, naming another launch node): `InvalidArgument`.
    #[error("{0}")]
    Malformed(String),
    /// A request the launch node did not grant as it stands (no key to check it with, no
    /// grant, a grant that does not verify, an instance outside it): `PermissionDenied`.
    #[error("{0}")]
    Ungranted(String),
}

impl From<PeerRefusal> for tonic::Status {
    fn from(r: PeerRefusal) -> Self {
        match r {
            PeerRefusal::Malformed(m) => tonic::Status::invalid_argument(m),
            PeerRefusal::Ungranted(m) => tonic::Status::permission_denied(m),
        }
    }
}

/// A message for another agent: its `AgentData` address and the envelope.
pub struct Forward {
    /// `host:port`.
    pub address: String,
    /// What to deliver.
    pub message: pb::BalanceMessage,
}

struct JobMachine {
    node: PcddbNode,
    launch: NodeId,
    epoch: u64,
    task_base: u64,
    /// Addresses the messages handed to this machine since the last heartbeat reply brought
    /// beside the server's address book: the launch node's (which stand over the book) and, for
    /// nodes the book lacks, another agent's ([`Balancer::deliver`]).
    carried: BTreeMap<u32, String>,
    /// The core each accepted instance was placed on.
    cores: HashMap<u32, u32>,
    /// The self-check period the server set for this workflow.
    check_interval: Duration,
    /// The public half of the workflow's balancing key (empty: a server before grants).
    key: Vec<u8>,
    /// Cores on this node other work held in the server's view at the last heartbeat reply
    /// (`PcddbJob.foreign_cores`; 0 from a server before it).
    foreign_cores: u32,
}

/// Every PCDDB machine of this agent.
#[derive(Default)]
pub struct Balancer {
    jobs: HashMap<u64, JobMachine>,
    to_launch: Vec<pb::BalanceMessage>,
    /// Messages sent (to the launch node and to other agents).
    pub sent: u64,
    /// Messages received from other agents (requests hopping on).
    pub received: u64,
    /// This node's id.
    me: Option<u32>,
    /// Measured round trips to other agents (ns), by node id.
    pub rtt_ns: BTreeMap<u32, u64>,
    /// The server's address book (node id → `AgentData` address), one for every workflow:
    /// the server sends it only when this agent does not hold its version.
    address_book: BTreeMap<u32, String>,
    /// The version of `address_book` as the server named it (`PcddbJob.peers_version`),
    /// reported in every heartbeat (`HeartbeatRequest.peers_version`); 0: none, or a book
    /// from a server that predates versions (which sends it whole in every reply).
    peers_version: u64,
    /// The proximity clusters the server computed for this node (`PcddbJob.clusters`, the
    /// launch nodes' table ids), one list for every workflow: the server sends them only when
    /// this agent does not hold their version.
    clusters: Vec<u32>,
    /// The version of `clusters` as the server named it (`PcddbJob.clusters_version`),
    /// reported in every heartbeat (`HeartbeatRequest.clusters_version`); 0: none, or clusters
    /// from a server that predates versions (which sends them in every reply).
    clusters_version: u64,
    /// Whether any machine runs: the self-check and probe loops sleep while it is false, so an
    /// agent without PCDDB workflows wakes for none of them.
    balancing: tokio::sync::watch::Sender<bool>,
}

/// The balancer shared by the heartbeat loop, the self-check timer and the gRPC service.
pub type Handle = Arc<Mutex<Balancer>>;

impl Balancer {
    /// Keeps one machine per workflow in `jobs` (new ones start empty; others are dropped), each
    /// a member of the proximity clusters the server computed for this node (spec 05 §2) and
    /// with the attribute mask requests are matched against.
    pub fn sync(&mut self, me: u32, cores: u32, jobs: &[pb::PcddbJob]) {
        self.me = Some(me);
        self.jobs
            .retain(|id, _| jobs.iter().any(|j| j.job_id == *id));
        for j in jobs {
            let launch = NodeId(j.launch);
            // A launch node built since this machine: start over (its table is empty).
            if self.jobs.get(&j.job_id).is_some_and(|m| m.epoch != j.epoch) {
                self.jobs.remove(&j.job_id);
            }
            // As the book: the server sends this node's clusters only when this agent's
            // version is not its own; empty with the version held here, the clusters held
            // stand (for a workflow that starts later too). From a server before versions (0),
            // every job carries them, used as they come.
            if j.clusters_version == 0
                || j.clusters_version != self.clusters_version
                || !j.clusters.is_empty()
            {
                self.clusters.clone_from(&j.clusters);
                self.clusters_version = j.clusters_version;
            }
            let memberships: Vec<(ClusterId, NodeId)> = self
                .clusters
                .iter()
                .map(|&c| (ClusterId(c), launch))
                .collect();
            let m = self.jobs.entry(j.job_id).or_insert_with(|| JobMachine {
                node: PcddbNode::new(
                    GraphNode {
                        id: NodeId(me),
                        cores: cores.max(1),
                        attributes: j.attributes,
                    },
                    Thresholds { lt: j.lt, mt: j.mt },
                    memberships.clone(),
                ),
                launch,
                epoch: j.epoch,
                task_base: j.task_base,
                carried: BTreeMap::new(),
                cores: HashMap::new(),
                check_interval: CHECK_INTERVAL,
                key: Vec::new(),
                foreign_cores: 0,
            });
            m.foreign_cores = j.foreign_cores;
            m.key.clone_from(&j.balance_key);
            m.check_interval = match j.check_interval_ms {
                0 => CHECK_INTERVAL,
                ms => Duration::from_millis(ms),
            };
            // The book is the server's alone again at each reply, as each job's copy was.
            m.carried.clear();
            // The server sends its book only when this agent's version is not its own; empty
            // with the version held here, the book held stands. From a server before versions
            // (0), every job carries the whole book, used as it comes.
            if j.peers_version == 0 || j.peers_version != self.peers_version || !j.peers.is_empty()
            {
                self.address_book = j.peers.iter().map(|(&k, v)| (k, v.clone())).collect();
                self.peers_version = j.peers_version;
            }
            if m.node.clusters() != memberships.iter().map(|&(c, _)| c).collect::<Vec<_>>() {
                m.node.set_memberships(memberships);
            }
            m.node.set_attributes(j.attributes);
            // Taken here but not to run here (cancelled, or run elsewhere): no longer held.
            // The server lists each in a few replies; each is forgotten once.
            for &i in &j.dropped {
                if let Some(core) = m.cores.remove(&i) {
                    let _ = m.node.handle(
                        NodeEvent::Finished {
                            instance: InstanceId(i),
                            core,
                        },
                        crate::launch::now_ns(),
                    );
                }
            }
        }
        for id in self.jobs.keys().copied().collect::<Vec<_>>() {
            self.count_foreign(id);
        }
        self.note_balancing();
    }

    /// Gives workflow `job`'s machine the load other work puts on this node, which its
    /// instance table counts beside its own instances (seed 004's table counts every
    /// program's instances on the node; [`PcddbNode::set_foreign_load`]): the cores other work
    /// held in the server's view at the last heartbeat reply (`PcddbJob.foreign_cores`), or,
    /// if more, the instances this agent's other machines hold now. Those change between
    /// heartbeats — another workflow's machine takes instances from a request here — and
    /// this agent sees them at once; the server counts them only once it has booked them (so
    /// the larger of the two, not their sum, which would count another workflow's running
    /// instances twice). Batch tasks and stream workers starting or ending here between
    /// heartbeats are not followed: the server's value at the next reply is (a task's end
    /// makes the agent beat at once, and new work for this node comes in a reply, with the
    /// value that counts it).
    fn count_foreign(&mut self, job: u64) {
        let others: u32 = self
            .jobs
            .iter()
            .filter(|(id, _)| **id != job)
            .map(|(_, m)| m.node.held())
            .fold(0, u32::saturating_add);
        if let Some(m) = self.jobs.get_mut(&job) {
            m.node.set_foreign_load(m.foreign_cores.max(others));
        }
    }

    /// The self-check period: the shortest any of the workflows asks for.
    pub fn check_interval(&self) -> Duration {
        self.jobs
            .values()
            .map(|m| m.check_interval)
            .min()
            .unwrap_or(CHECK_INTERVAL)
    }

    /// Whether this agent balances any workflow.
    pub fn is_balancing(&self) -> bool {
        !self.jobs.is_empty()
    }

    fn note_balancing(&self) {
        let now = self.is_balancing();
        self.balancing
            .send_if_modified(|b| std::mem::replace(b, now) != now);
    }

    /// The clusters this node's machines are in (for tests and logs).
    pub fn clusters(&self, job: u64) -> Option<Vec<ClusterId>> {
        self.jobs.get(&job).map(|m| m.node.clusters())
    }

    /// The version of the address book held here, for the heartbeat (0: none).
    pub fn peers_version(&self) -> u64 {
        self.peers_version
    }

    /// The version of the proximity clusters held here, for the heartbeat (0: none).
    pub fn clusters_version(&self) -> u64 {
        self.clusters_version
    }

    /// Where workflow `job`'s machine reaches `node`: the address a message brought when the
    /// server's book lacks it or the launch node sent it, else the book's.
    pub fn address_of(&self, job: u64, node: u32) -> Option<&str> {
        self.jobs
            .get(&job)
            .and_then(|m| m.carried.get(&node))
            .or_else(|| self.address_book.get(&node))
            .map(String::as_str)
    }

    /// Forgets every machine, the address book and the clusters (the server was unreachable:
    /// it may have restarted with fresh launch nodes, whose tables only new status messages
    /// fill, and another book and clusters, which it sends to an agent reporting none).
    pub fn reset(&mut self) {
        self.jobs.clear();
        self.address_book.clear();
        self.peers_version = 0;
        self.clusters.clear();
        self.clusters_version = 0;
        self.note_balancing();
    }

    /// Instances the machines hold.
    pub fn held(&self) -> u32 {
        self.jobs.values().map(|m| m.node.held()).sum()
    }

    /// Messages for the launch node, for the next heartbeat.
    pub fn take_outbox(&mut self) -> Vec<pb::BalanceMessage> {
        std::mem::take(&mut self.to_launch)
    }

    /// Whether messages wait for the launch node.
    pub fn has_outbox(&self) -> bool {
        !self.to_launch.is_empty()
    }

    /// Every machine checks itself.
    pub fn self_check(&mut self, now: u64) -> Vec<Forward> {
        let ids: Vec<u64> = self.jobs.keys().copied().collect();
        let mut out = Vec::new();
        for id in ids {
            self.count_foreign(id);
            if let Some(m) = self.jobs.get_mut(&id) {
                let o = m.node.handle(NodeEvent::SelfCheck, now);
                out.extend(self.route(id, o, None));
            }
        }
        out
    }

    /// Whether `env`, from another agent (`AgentData.Deliver`), may be acted on: only an
    /// allocation request passes between agents; it must be of a workflow balanced here,
    /// addressed to this node, and from the workflow's launch node (a request naming another
    /// made the machine hold its instances for ever: their reply went nowhere, so the server
    /// never told it to forget them) — else [`PeerRefusal::Malformed`] — and carry the launch
    /// node's grant, which the workflow's balancing key verifies and which lists every
    /// instance it offers with its requirements — else [`PeerRefusal::Ungranted`]. A request
    /// of a workflow not balanced here (this agent has not heard of it yet, or no longer runs
    /// it) is refused too: with no key its grant cannot be checked, and the sender returns it
    /// to the launch node as it would have been from here.
    pub fn check_peer(&self, env: &pb::BalanceMessage) -> Result<(), PeerRefusal> {
        use hetsched_proto::ticket;
        let msg = serde_json::from_str::<Message>(&env.message_json)
            .map_err(|e| PeerRefusal::Malformed(format!("an undecodable PCDDB message: {e}")))?;
        let Body::Request(r) = &msg.body else {
            return Err(PeerRefusal::Malformed(format!(
                "a PCDDB `{}` message: only allocation requests pass between agents",
                msg.body.kind()
            )));
        };
        let what = format!(
            "a PCDDB request of workflow {} from node {}",
            env.job_id, msg.from.0
        );
        // The launch node lists each instance once, and each node of its table once (its table
        // indexes them; hops only drop entries): a repeat is no request it made. An instance
        // listed twice was taken and replied twice here, and a table listing a node over and
        // over is held, entry by entry, by every machine the request reaches.
        let mut seen = std::collections::HashSet::new();
        if let Some(w) = r.instances.iter().find(|w| !seen.insert(w.instance.0)) {
            return Err(PeerRefusal::Malformed(format!(
                "{what}: instance {} is listed twice",
                w.instance.0
            )));
        }
        let mut seen = std::collections::HashSet::new();
        if let Some(n) = r.table.iter().find(|n| !seen.insert(n.0)) {
            return Err(PeerRefusal::Malformed(format!(
                "{what}: its underloaded table lists node {} twice",
                n.0
            )));
        }
        let Some(m) = self.jobs.get(&env.job_id) else {
            return Err(PeerRefusal::Ungranted(format!(
                "{what}: this node does not balance the workflow (not yet, or no longer), so \
                 it holds no balancing key to check the request's grant with; the sender \
                 returns it to the launch node"
            )));
        };
        if self.me.is_some_and(|me| msg.to.0 != me) {
            return Err(PeerRefusal::Malformed(format!(
                "a PCDDB request for node {}, not this one ({})",
                msg.to.0,
                self.me.unwrap_or_default()
            )));
        }
        if r.launch != m.launch {
            return Err(PeerRefusal::Malformed(format!(
                "a PCDDB request of workflow {} from launch node {}, not the workflow's ({})",
                env.job_id, r.launch.0, m.launch.0
            )));
        }
        if m.key.is_empty() {
            return Err(PeerRefusal::Ungranted(format!(
                "{what}: this node holds no balancing key for the workflow (its server \
                 predates PCDDB grants), so it takes requests from the launch node only"
            )));
        }
        if env.grant.is_empty() {
            return Err(PeerRefusal::Ungranted(format!(
                "{what}: no grant from the launch node (the sending agent predates PCDDB \
                 grants, or the request was not the launch node's)"
            )));
        }
        let grant = ticket::Grant {
            job_id: env.job_id,
            epoch: m.epoch,
            serial: env.grant_serial,
            launch: r.launch.0,
            cluster: r.cluster.0,
            sent_at: r.sent_at,
            instances: &env.granted_instances,
            requires: &env.granted_requires,
            table: &env.granted_table,
        };
        if !ticket::verify_grant(&m.key, &grant, &env.grant) {
            return Err(PeerRefusal::Ungranted(format!(
                "{what}: the grant does not match (forged, or for another workflow, launch \
                 node epoch or request)"
            )));
        }
        // The table: the granted one less the nodes the request visited before this one,
        // beginning with this node (each hop drops itself and passes the request to the
        // table's first entry). A node on the path that reordered or dropped entries chose
        // where the request goes next, or which underloaded nodes a return prunes.
        let table: Vec<u32> = r.table.iter().map(|n| n.0).collect();
        if !grant.carries(&table) || table.first() != Some(&msg.to.0) {
            return Err(PeerRefusal::Ungranted(format!(
                "{what}: its underloaded table {table:?} is not the granted {:?} less the nodes \
                 it visited, beginning with node {} (altered on the way)",
                grant.table, msg.to.0
            )));
        }
        if let Some(w) = r
            .instances
            .iter()
            .find(|w| !grant.covers(w.instance.0, w.requires))
        {
            return Err(PeerRefusal::Ungranted(format!(
                "{what}: instance {} (requirements {:#x}) is not among the {} the launch node \
                 granted",
                w.instance.0,
                w.requires,
                grant.instances.len()
            )));
        }
        Ok(())
    }

    /// A message for one of this agent's machines (`from_peer`: from another agent, counted in
    /// `received`, checked by [`Balancer::check_peer`] first, and the addresses it carries only
    /// add nodes the server's list lacks; the launch node counts its own messages).
    pub fn deliver(&mut self, env: pb::BalanceMessage, now: u64, from_peer: bool) -> Vec<Forward> {
        if from_peer {
            self.received += 1;
        }
        let Ok(msg) = serde_json::from_str::<Message>(&env.message_json) else {
            tracing::warn!("undecodable PCDDB message dropped");
            return Vec::new();
        };
        // The request's grant goes on with whatever the machine passes on or returns.
        let granted = Granted::of(&env);
        let Some(m) = self.jobs.get_mut(&env.job_id) else {
            // Not (or no longer) balancing this workflow: hand a request back to its launch
            // node so its instances are not lost.
            if let Body::Request(r) = msg.body {
                self.sent += 1;
                self.to_launch.push(
                    granted.envelope(
                        env.job_id,
                        serde_json::to_string(&Message {
                            from: msg.to,
                            to: r.launch,
                            body: Body::Return(r),
                        })
                        .unwrap_or_default(),
                        Default::default(),
                    ),
                );
            }
            return Vec::new();
        };
        for (k, v) in env.peers {
            if from_peer {
                // The server's address of a node stands: another agent's cannot redirect
                // this node's requests (and the agent token they carry).
                if !self.address_book.contains_key(&k) {
                    m.carried.entry(k).or_insert(v);
                }
            } else {
                m.carried.insert(k, v);
            }
        }
        self.count_foreign(env.job_id);
        let Some(m) = self.jobs.get_mut(&env.job_id) else {
            return Vec::new();
        };
        let o = m.node.handle(NodeEvent::Deliver(msg), now);
        self.route(env.job_id, o, Some(&granted))
    }

    /// Task `task_id` ended here: if a machine accepted it, its core is free again.
    pub fn finished(&mut self, task_id: u64, now: u64) {
        let ids: Vec<u64> = self.jobs.keys().copied().collect();
        for id in ids {
            let Some(m) = self.jobs.get_mut(&id) else {
                continue;
            };
            let Some(i) = task_id.checked_sub(m.task_base).filter(|i| *i < 1 << 32) else {
                continue;
            };
            if let Some(core) = m.cores.remove(&(i as u32)) {
                // The `result` it returns reaches the launch node as the heartbeat's result.
                let _ = m.node.handle(
                    NodeEvent::Finished {
                        instance: InstanceId(i as u32),
                        core,
                    },
                    now,
                );
            }
        }
    }

    /// A request that could not reach `to`: it goes back to its launch node (event e).
    pub fn undeliverable(&mut self, job: u64, env: &pb::BalanceMessage) {
        if let Ok(Message {
            body: Body::Request(r),
            to,
            ..
        }) = serde_json::from_str::<Message>(&env.message_json)
        {
            self.sent += 1;
            self.to_launch.push(
                Granted::of(env).envelope(
                    job,
                    serde_json::to_string(&Message {
                        from: to,
                        to: r.launch,
                        body: Body::Return(r),
                    })
                    .unwrap_or_default(),
                    Default::default(),
                ),
            );
        }
    }

    /// Carries out what workflow `job`'s machine answered; a request it passes on or returns
    /// keeps `granted`, the grant of the request it was handed (none for a self-check, which
    /// sends only `status`).
    fn route(&mut self, job: u64, out: Vec<Outgoing>, granted: Option<&Granted>) -> Vec<Forward> {
        let Some(m) = self.jobs.get_mut(&job) else {
            return Vec::new();
        };
        let mut fwd = Vec::new();
        for o in out {
            match o {
                Outgoing::Run { instance, core } => {
                    m.cores.insert(instance.0, core);
                }
                Outgoing::Send(msg) => {
                    let json = serde_json::to_string(&msg).unwrap_or_default();
                    self.sent += 1;
                    let grant = match (&msg.body, granted) {
                        (Body::Request(_) | Body::Return(_), Some(g)) => g.clone(),
                        _ => Granted::default(),
                    };
                    if msg.to == m.launch {
                        self.to_launch
                            .push(grant.envelope(job, json, Default::default()));
                    } else {
                        let book = &self.address_book;
                        let address_of = |n: u32| m.carried.get(&n).or_else(|| book.get(&n));
                        let address = address_of(msg.to.0).cloned().unwrap_or_default();
                        // Only the addresses the journey needs: the request hops along its
                        // table (the next node and those after it), not every agent's.
                        let journey: HashMap<u32, String> = match &msg.body {
                            Body::Request(r) => r.table.iter().map(|n| n.0).collect(),
                            _ => Vec::new(),
                        }
                        .into_iter()
                        .chain([msg.to.0])
                        .filter_map(|n| Some((n, address_of(n)?.clone())))
                        .collect();
                        fwd.push(Forward {
                            address,
                            message: grant.envelope(job, json, journey),
                        });
                    }
                }
                Outgoing::Ready(_) => {}
            }
        }
        fwd
    }
}

/// Sends `forwards` to their agents (each on its own task); one that fails returns to the
/// launch node. `wake` is called when something waits for the next heartbeat.
pub fn send(
    handle: &Handle,
    auth: &PeerAuth,
    forwards: Vec<Forward>,
    wake: Arc<tokio::sync::Notify>,
) {
    for f in forwards {
        let (handle, auth, wake) = (handle.clone(), auth.clone(), wake.clone());
        tokio::spawn(async move {
            let ok = deliver_to(&f.address, &auth, f.message.clone()).await;
            if let Err(e) = ok {
                tracing::warn!(to = %f.address, "PCDDB request not delivered ({e}): back to the launch node");
                let job = f.message.job_id;
                handle
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .undeliverable(job, &f.message);
                wake.notify_one();
            }
        });
    }
}

async fn deliver_to(address: &str, auth: &PeerAuth, m: pb::BalanceMessage) -> Result<(), String> {
    let mut c = auth
        .connect(address)
        .await
        .map_err(|e| format!("the next node: {e}"))?;
    tokio::time::timeout(Duration::from_secs(5), c.deliver(m))
        .await
        .map_err(|_| "timed out".to_string())?
        .map_err(|s| s.message().to_string())?;
    Ok(())
}

/// Runs the self-checks until the task is aborted.
pub fn spawn_checks(
    handle: Handle,
    auth: PeerAuth,
    wake: Arc<tokio::sync::Notify>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            until_balancing(&handle).await;
            let period = handle
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .check_interval();
            tokio::time::sleep(period).await;
            let (fwd, pending) = {
                let mut b = handle.lock().unwrap_or_else(|p| p.into_inner());
                let f = b.self_check(crate::launch::now_ns());
                (f, b.has_outbox())
            };
            send(&handle, &auth, fwd, wake.clone());
            if pending {
                wake.notify_one();
            }
        }
    })
}

/// Every [`PROBE_INTERVAL`] while a PCDDB workflow runs: the round trip to each other agent
/// (the least of three pings on one connection), for the server's proximity clusters.
pub const PROBE_INTERVAL: Duration = Duration::from_secs(1);

/// Runs the round-trip probes until the task is aborted.
pub fn spawn_probes(handle: Handle, auth: PeerAuth) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            until_balancing(&handle).await;
            tokio::time::sleep(PROBE_INTERVAL).await;
            let peers: BTreeMap<u32, String> = {
                let b = handle.lock().unwrap_or_else(|p| p.into_inner());
                let me = b.me;
                b.address_book
                    .iter()
                    .chain(b.jobs.values().flat_map(|m| m.carried.iter()))
                    .filter(|(id, _)| Some(**id) != me)
                    .map(|(k, v)| (*k, v.clone()))
                    .collect()
            };
            for (id, address) in peers {
                if let Some(rtt) = probe(&address, &auth).await {
                    handle
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .rtt_ns
                        .insert(id, rtt);
                }
            }
        }
    })
}

/// Returns once this agent balances a workflow (at once if it does).
async fn until_balancing(handle: &Handle) {
    let mut rx = handle
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .balancing
        .subscribe();
    // The sender lives as long as the balancer, which outlives these loops' handle.
    let _ = rx.wait_for(|b| *b).await;
}

async fn probe(address: &str, auth: &PeerAuth) -> Option<u64> {
    let mut c = tokio::time::timeout(Duration::from_secs(2), auth.connect(address))
        .await
        .ok()?
        .ok()?;
    let mut best = u64::MAX;
    for _ in 0..3 {
        let t = std::time::Instant::now();
        tokio::time::timeout(Duration::from_secs(2), c.ping(pb::BalanceAck {}))
            .await
            .ok()?
            .ok()?;
        best = best.min(t.elapsed().as_nanos() as u64);
    }
    Some(best)
}

/// What the tests of this crate sign and send as the server does: the workflows' balancing
/// keys and the grants of the requests they make.
#[cfg(test)]
pub(crate) mod testing {
    use super::*;
    use hetsched_core::policy::graph::{AllocationRequest, Wanted};
    use hetsched_proto::ticket::{Grant, GrantKey};

    /// The balancing key of a workflow as the server would derive it, here from a test seed.
    pub fn key(seed: u8) -> GrantKey {
        GrantKey::from_seed(&[seed; 32]).expect("a 32-byte seed")
    }

    /// The server's `PcddbJob` for workflow 7 of launch node 99 (epoch 1) with `key`'s public
    /// half.
    pub fn job(clusters: Vec<u32>, attributes: u64, key: &GrantKey) -> pb::PcddbJob {
        pb::PcddbJob {
            job_id: 7,
            lt: 2,
            mt: 3,
            launch: 99,
            task_base: 1000,
            epoch: 1,
            clusters,
            attributes,
            balance_key: key.public(),
            ..Default::default()
        }
    }

    /// A request of workflow 7 from `from` to `to` in cluster 0, offering `instances`
    /// (instance, requirements) with table `table`, and no grant.
    pub fn request(
        from: u32,
        to: u32,
        instances: &[(u32, u64)],
        table: &[u32],
    ) -> pb::BalanceMessage {
        let r = AllocationRequest {
            cluster: ClusterId(0),
            launch: NodeId(99),
            sent_at: 0,
            instances: instances
                .iter()
                .map(|&(i, requires)| Wanted {
                    instance: InstanceId(i),
                    requires,
                })
                .collect(),
            table: table.iter().map(|&n| NodeId(n)).collect(),
        };
        pb::BalanceMessage {
            job_id: 7,
            message_json: serde_json::to_string(&Message {
                from: NodeId(from),
                to: NodeId(to),
                body: Body::Request(r),
            })
            .unwrap_or_default(),
            ..Default::default()
        }
    }

    /// `env` with the grant of `granted` (instance, requirements; ascending) under `key` for
    /// workflow `job_id`, launch-node epoch `epoch`, serial 1, over the request's fixed fields.
    pub fn granted(
        mut env: pb::BalanceMessage,
        key: &GrantKey,
        job_id: u64,
        epoch: u64,
        granted: &[(u32, u64)],
    ) -> pb::BalanceMessage {
        let Ok(Message {
            body: Body::Request(r),
            ..
        }) = serde_json::from_str::<Message>(&env.message_json)
        else {
            panic!("not a request: {env:?}");
        };
        env.grant_serial = 1;
        env.granted_instances = granted.iter().map(|g| g.0).collect();
        env.granted_requires = granted.iter().map(|g| g.1).collect();
        // As the launch node sends it: the table it carries at its first hop is the one granted.
        env.granted_table = r.table.iter().map(|n| n.0).collect();
        env.grant = key.sign(&Grant {
            job_id,
            epoch,
            serial: 1,
            launch: r.launch.0,
            cluster: r.cluster.0,
            sent_at: r.sent_at,
            instances: &env.granted_instances,
            requires: &env.granted_requires,
            table: &env.granted_table,
        });
        env
    }
}

#[cfg(test)]
mod tests {
    use super::testing::{granted, key};
    use super::*;
    use hetsched_core::policy::graph::{AllocationRequest, Wanted};

    fn job(clusters: Vec<u32>, attributes: u64) -> pb::PcddbJob {
        testing::job(clusters, attributes, &key(1))
    }

    fn request(cluster: u32, requires: u64) -> pb::BalanceMessage {
        let r = AllocationRequest {
            cluster: ClusterId(cluster),
            launch: NodeId(99),
            sent_at: 0,
            instances: [Wanted {
                instance: InstanceId(0),
                requires,
            }]
            .into(),
            table: vec![NodeId(1)].into(),
        };
        pb::BalanceMessage {
            job_id: 7,
            message_json: serde_json::to_string(&Message {
                from: NodeId(99),
                to: NodeId(1),
                body: Body::Request(r),
            })
            .unwrap_or_default(),
            ..Default::default()
        }
    }

    fn kinds(b: &mut Balancer) -> Vec<&'static str> {
        b.take_outbox()
            .iter()
            .filter_map(|m| serde_json::from_str::<Message>(&m.message_json).ok())
            .map(|m| m.body.kind())
            .collect()
    }

    /// The self-check runs at the period the server sets (`[workflow] check_interval`), 100 ms
    /// when it sets none, and only while a workflow is balanced here.
    #[test]
    fn the_self_check_period_is_the_servers_and_runs_only_while_balancing() {
        let mut b = Balancer::default();
        let balancing = b.balancing.subscribe();
        assert!(!b.is_balancing() && !*balancing.borrow());
        b.sync(1, 2, &[job(vec![0], 0)]);
        assert!(
            *balancing.borrow(),
            "a workflow wakes the check and probe loops"
        );
        assert_eq!(
            b.check_interval(),
            CHECK_INTERVAL,
            "no period from the server"
        );
        let fast = pb::PcddbJob {
            check_interval_ms: 20,
            ..job(vec![0], 0)
        };
        b.sync(1, 2, &[fast]);
        assert_eq!(b.check_interval(), Duration::from_millis(20));
        b.sync(1, 2, &[]);
        assert!(!*balancing.borrow(), "no workflow: the loops sleep");
    }

    #[test]
    fn the_machine_follows_the_servers_clusters_and_attribute_mask() {
        let mut b = Balancer::default();
        b.sync(1, 2, &[job(vec![0, 1], 0)]);
        assert_eq!(b.clusters(7), Some(vec![ClusterId(0), ClusterId(1)]));
        // Idle: the self-check reports to the launch node once per cluster.
        assert!(b.self_check(0).is_empty());
        assert_eq!(kinds(&mut b), ["status", "status"]);
        // The clusters change: the node is in Sc2 only; a request of Sc1 goes home.
        b.sync(1, 2, &[job(vec![1], 0)]);
        assert_eq!(b.clusters(7), Some(vec![ClusterId(1)]));
        b.deliver(request(0, 0), 0, false);
        assert_eq!(kinds(&mut b), ["return"]);
        // A request of its cluster for an instance requiring bit 1: refused without the bit,
        // taken with it.
        b.deliver(request(1, 2), 0, false);
        assert_eq!(kinds(&mut b), ["return"]);
        b.sync(1, 2, &[job(vec![1], 2)]);
        b.deliver(request(1, 2), 0, false);
        assert_eq!(kinds(&mut b), ["reply"]);
        assert_eq!(b.held(), 1);
    }

    /// Another agent's message is checked before the machine acts on it: a request naming a
    /// launch node other than the workflow's, or addressed to another node, or anything but a
    /// request, is refused naming the problem, and the machine takes nothing (a request from
    /// another launch node made it hold instances whose reply went nowhere, for ever); the
    /// addresses another agent sends do not replace the server's.
    #[test]
    fn a_peers_forged_pcddb_message_is_refused_and_takes_nothing_here() {
        let mut b = Balancer::default();
        let mut server = job(vec![0], 0);
        server.peers.insert(2, "10.0.0.2:7000".into());
        b.sync(1, 2, &[server]);
        let forged = |launch: u32, to: u32| {
            let mut m = request(0, 0);
            let mut msg: Message = serde_json::from_str(&m.message_json).expect("json");
            msg.to = NodeId(to);
            if let Body::Request(r) = &mut msg.body {
                r.launch = NodeId(launch);
            }
            m.message_json = serde_json::to_string(&msg).expect("json");
            m
        };
        let e = b
            .check_peer(&forged(5, 1))
            .expect_err("another launch node")
            .to_string();
        assert!(
            e.contains("from launch node 5, not the workflow's (99)"),
            "{e}"
        );
        let e = b
            .check_peer(&forged(99, 3))
            .expect_err("another node")
            .to_string();
        assert!(e.contains("for node 3, not this one (1)"), "{e}");
        let status = pb::BalanceMessage {
            message_json: serde_json::to_string(&Message {
                from: NodeId(2),
                to: NodeId(1),
                body: Body::Status {
                    cluster: ClusterId(0),
                },
            })
            .expect("json"),
            ..request(0, 0)
        };
        let e = b
            .check_peer(&status)
            .expect_err("not a request")
            .to_string();
        assert!(e.contains("`status` message"), "{e}");
        let e = b
            .check_peer(&pb::BalanceMessage {
                message_json: "{".into(),
                ..request(0, 0)
            })
            .expect_err("not JSON")
            .to_string();
        assert!(e.starts_with("an undecodable PCDDB message"), "{e}");
        assert_eq!(b.held(), 0);
        // A genuine one (granted by the launch node) is taken; its addresses add nodes but do
        // not replace the server's.
        let mut genuine = granted(request(0, 0), &key(1), 7, 1, &[(0, 0)]);
        genuine.peers.insert(2, "evil:1".into());
        genuine.peers.insert(3, "10.0.0.3:7000".into());
        assert_eq!(b.check_peer(&genuine), Ok(()));
        b.deliver(genuine, 0, true);
        assert_eq!(b.held(), 1);
        assert_eq!(b.address_of(7, 2), Some("10.0.0.2:7000"));
        assert_eq!(b.address_of(7, 3), Some("10.0.0.3:7000"));
    }

    /// A granted request that repeats an instance or a node of its table is no request the
    /// launch node made: refused naming the repeat, and the machine takes nothing (an
    /// instance listed twice was taken and replied twice).
    #[test]
    fn a_peers_request_repeating_an_instance_or_a_table_entry_is_refused() {
        let mut b = Balancer::default();
        b.sync(1, 2, &[job(vec![0], 0)]);
        let twice = testing::request(2, 1, &[(0, 0), (1, 0), (0, 0)], &[1, 3]);
        let twice = granted(twice, &key(1), 7, 1, &[(0, 0), (1, 0)]);
        let e = b
            .check_peer(&twice)
            .expect_err("instance 0 twice")
            .to_string();
        assert!(e.ends_with("instance 0 is listed twice"), "{e}");
        let table = testing::request(2, 1, &[(0, 0)], &[1, 3, 4, 3]);
        let table = granted(table, &key(1), 7, 1, &[(0, 0)]);
        let e = b.check_peer(&table).expect_err("node 3 twice").to_string();
        assert!(
            e.ends_with("its underloaded table lists node 3 twice"),
            "{e}"
        );
        assert_eq!(b.held(), 0);
        let once = granted(
            testing::request(2, 1, &[(0, 0), (1, 0)], &[1, 3]),
            &key(1),
            7,
            1,
            &[(0, 0), (1, 0)],
        );
        assert_eq!(b.check_peer(&once), Ok(()));
    }

    /// `env`, a request, with its underloaded table replaced by `table` (its grant kept).
    fn with_table(mut env: pb::BalanceMessage, table: &[u32]) -> pb::BalanceMessage {
        let Ok(mut msg) = serde_json::from_str::<Message>(&env.message_json) else {
            panic!("not a message: {env:?}");
        };
        let Body::Request(r) = &mut msg.body else {
            panic!("not a request: {msg:?}");
        };
        r.table = table.iter().map(|&n| NodeId(n)).collect();
        env.message_json = serde_json::to_string(&msg).unwrap_or_default();
        env
    }

    /// The underloaded table a request carries is signed into its grant: a node on its path
    /// that reorders the table, drops a node ahead of it or adds one has it refused by the
    /// next node, which takes nothing from it; the table an honest path leaves — the granted
    /// one less the nodes visited, beginning with the receiving node — passes. Before, any
    /// table passed with any grant.
    #[test]
    fn a_peers_request_whose_underloaded_table_was_altered_on_the_way_is_refused() {
        let mut b = Balancer::default();
        b.sync(1, 2, &[job(vec![0], 0)]);
        // Granted with the table [2, 1, 3, 4]: node 2 took its share and passes it to node 1.
        let sent = granted(
            testing::request(2, 1, &[(0, 0), (1, 0)], &[2, 1, 3, 4]),
            &key(1),
            7,
            1,
            &[(0, 0), (1, 0)],
        );
        assert_eq!(sent.granted_table, [2, 1, 3, 4]);
        let hop = with_table(sent, &[1, 3, 4]);
        assert_eq!(
            b.check_peer(&hop),
            Ok(()),
            "the table an honest path leaves"
        );
        for altered in [
            &[1, 4, 3][..],
            &[1, 4],
            &[1, 3],
            &[1, 3, 4, 5],
            &[1, 5, 3, 4],
            &[3, 4],
            &[1, 2, 3, 4],
        ] {
            let e = b
                .check_peer(&with_table(hop.clone(), altered))
                .expect_err("an altered table");
            assert!(matches!(e, PeerRefusal::Ungranted(_)), "{e:?}");
            assert!(
                e.to_string()
                    .contains("is not the granted [2, 1, 3, 4] less the nodes"),
                "{e}"
            );
        }
        // A grant re-signed by no one but claiming the altered table does not verify either.
        let mut claimed = with_table(hop.clone(), &[1, 4]);
        claimed.granted_table = vec![2, 1, 4];
        assert!(matches!(
            b.check_peer(&claimed),
            Err(PeerRefusal::Ungranted(m)) if m.contains("the grant does not match")
        ));
        assert_eq!(b.held(), 0, "nothing taken");
    }

    /// An instance the machine took and the server then cancelled is listed in `dropped`: the
    /// machine no longer holds it (else it would count in the instance table for ever), once
    /// however often the list is repeated.
    #[test]
    fn a_dropped_instance_is_no_longer_held_here() {
        let mut b = Balancer::default();
        b.sync(1, 2, &[job(vec![0], 0)]);
        b.deliver(request(0, 0), 0, false);
        assert_eq!(kinds(&mut b), ["reply"]);
        assert_eq!(b.held(), 1);
        let dropping = pb::PcddbJob {
            dropped: vec![0, 5],
            ..job(vec![0], 0)
        };
        b.sync(1, 2, std::slice::from_ref(&dropping));
        assert_eq!(b.held(), 0);
        b.sync(1, 2, &[dropping]);
        assert_eq!(b.held(), 0);
        // The machine goes on taking work as before.
        b.deliver(request(0, 0), 0, false);
        assert_eq!(kinds(&mut b), ["reply"]);
        assert_eq!(b.held(), 1);
    }

    /// The cores other work holds on this node in the server's view (`PcddbJob.foreign_cores`)
    /// count in the machine's instance table: at LT × cores (2 × 2 here) the node reports no
    /// `status` and takes nothing from a request, which goes on (here home: its table is
    /// empty); once the other work ends (the next reply says 0), it reports and takes again.
    /// Before, the machine counted its workflow's instances only: a node full of a batch task
    /// reported itself underloaded and took MT × cores instances, which waited there.
    #[test]
    fn the_cores_other_work_holds_here_count_in_the_machines_instance_table() {
        let mut b = Balancer::default();
        let busy = pb::PcddbJob {
            foreign_cores: 4,
            ..job(vec![0], 0)
        };
        b.sync(1, 2, &[busy]);
        assert!(b.self_check(0).is_empty());
        assert!(kinds(&mut b).is_empty(), "no status from a full node");
        b.deliver(request(0, 0), 0, false);
        assert_eq!(kinds(&mut b), ["return"]);
        assert_eq!(b.held(), 0);
        // Three cores held: x = 3 < 4, and MT × cores − x = 6 − 3 = 3 instances are taken.
        let some = pb::PcddbJob {
            foreign_cores: 3,
            ..job(vec![0], 0)
        };
        b.sync(1, 2, &[some]);
        b.self_check(0);
        assert_eq!(kinds(&mut b), ["status"]);
        let five = testing::request(99, 1, &[(0, 0), (1, 0), (2, 0), (3, 0), (4, 0)], &[1]);
        b.deliver(five, 0, false);
        assert_eq!(kinds(&mut b), ["reply", "return"]);
        assert_eq!(b.held(), 3);
        // The other work ended: the next reply says so, and the machine counts its own again.
        b.sync(1, 2, &[job(vec![0], 0)]);
        b.self_check(0);
        assert_eq!(kinds(&mut b), ["status"]);
    }

    /// Between heartbeats the agent sees what its other machines take: once workflow 7's
    /// machine holds LT × cores instances here, workflow 8's counts them (the server's value,
    /// 0, lags) and neither reports nor takes.
    #[test]
    fn another_workflows_instances_taken_here_count_before_the_server_sees_them() {
        let mut b = Balancer::default();
        let other = pb::PcddbJob {
            job_id: 8,
            task_base: 2000,
            ..job(vec![0], 0)
        };
        b.sync(1, 2, &[job(vec![0], 0), other]);
        b.self_check(0);
        assert_eq!(kinds(&mut b), ["status", "status"]);
        let four = testing::request(99, 1, &[(0, 0), (1, 0), (2, 0), (3, 0)], &[1]);
        b.deliver(four, 0, false);
        assert_eq!(kinds(&mut b), ["reply"]);
        assert_eq!(b.held(), 4);
        // Workflow 7's machine, at LT × cores itself, reports nothing either.
        b.self_check(0);
        assert!(kinds(&mut b).is_empty());
        let mut for_8 = request(0, 0);
        for_8.job_id = 8;
        b.deliver(for_8, 0, false);
        assert_eq!(kinds(&mut b), ["return"]);
        assert_eq!(b.held(), 4);
    }

    /// The server's address book: nodes 1 to 4.
    fn book() -> std::collections::HashMap<u32, String> {
        (1..=4).map(|n| (n, format!("10.0.0.{n}:7000"))).collect()
    }

    /// What node 1 passes on of a launch-node request of 8 instances with table [1, 2] (it
    /// takes MT × cores = 6): where it sends the rest, and the addresses that go with it.
    fn passed_on(b: &mut Balancer, job_id: u64) -> (String, BTreeMap<u32, String>) {
        let instances: Vec<(u32, u64)> = (0..8).map(|i| (i, 0)).collect();
        let env = pb::BalanceMessage {
            job_id,
            ..testing::request(99, 1, &instances, &[1, 2])
        };
        let mut fwd = b.deliver(env, 0, false);
        assert_eq!(fwd.len(), 1, "the 2 left pass on to node 2");
        let f = fwd.remove(0);
        (f.address, f.message.peers.into_iter().collect())
    }

    /// A heartbeat reply sends the address book only to an agent that does not hold its
    /// version: a job whose `peers` came empty with the version held here (the next reply, or
    /// a workflow that starts later) reaches node 2 at the book's address. And a request passes
    /// on with only its table's addresses, not the book. Before, a job's empty `peers` left the
    /// machine without addresses (the request went to "" and back home), and every hop carried
    /// every agent's address.
    #[test]
    fn a_job_whose_peers_came_empty_at_the_version_held_forwards_to_the_books_address() {
        let mut b = Balancer::default();
        let first = pb::PcddbJob {
            peers: book(),
            peers_version: 5,
            ..job(vec![0], 0)
        };
        b.sync(1, 2, &[first]);
        let current = pb::PcddbJob {
            peers_version: 5,
            ..job(vec![0], 0)
        };
        let later = pb::PcddbJob {
            job_id: 8,
            ..current.clone()
        };
        b.sync(1, 2, &[current, later]);
        let only_node_2: BTreeMap<u32, String> = [(2, "10.0.0.2:7000".to_string())].into();
        for job_id in [7, 8] {
            let (address, peers) = passed_on(&mut b, job_id);
            assert_eq!(address, "10.0.0.2:7000", "workflow {job_id}");
            assert_eq!(peers, only_node_2, "workflow {job_id}");
        }
        // A new version replaces the book; empty at another version, it is the server's book
        // (empty), not the one held.
        let moved = pb::PcddbJob {
            peers: [(2, "10.0.0.22:7000".to_string())].into(),
            peers_version: 6,
            ..job(vec![0], 0)
        };
        b.sync(1, 2, &[moved]);
        assert_eq!(passed_on(&mut b, 7).0, "10.0.0.22:7000");
        let emptied = pb::PcddbJob {
            peers_version: 7,
            ..job(vec![0], 0)
        };
        b.sync(1, 2, &[emptied]);
        assert_eq!(passed_on(&mut b, 7).0, "");
    }

    /// A server that predates book versions sends the whole book with every job (version 0):
    /// it is used as it comes, each reply's replacing the last, as before.
    #[test]
    fn an_old_servers_job_without_a_version_carries_its_book_as_before() {
        let mut b = Balancer::default();
        let old = pb::PcddbJob {
            peers: book(),
            ..job(vec![0], 0)
        };
        b.sync(1, 2, &[old]);
        assert_eq!(passed_on(&mut b, 7).0, "10.0.0.2:7000");
        let moved = pb::PcddbJob {
            peers: [(2, "10.0.0.22:7000".to_string())].into(),
            ..job(vec![0], 0)
        };
        b.sync(1, 2, &[moved]);
        assert_eq!(passed_on(&mut b, 7).0, "10.0.0.22:7000");
        // And it sends the book again with the next job, empty or not: an empty one is none.
        b.sync(1, 2, &[job(vec![0], 0)]);
        assert_eq!(passed_on(&mut b, 7).0, "");
    }

    /// The version held goes up in the heartbeat; a reset (the server unreachable) forgets the
    /// book, so the next reply carries it whole.
    #[test]
    fn the_book_version_held_is_reported_and_forgotten_with_the_server() {
        let mut b = Balancer::default();
        assert_eq!(b.peers_version(), 0);
        b.sync(
            1,
            2,
            &[pb::PcddbJob {
                peers: book(),
                peers_version: 5,
                ..job(vec![0], 0)
            }],
        );
        assert_eq!(b.peers_version(), 5);
        b.reset();
        assert_eq!(b.peers_version(), 0);
        assert_eq!(b.address_of(7, 2), None);
    }

    /// A heartbeat reply sends the node's proximity clusters only to an agent that does not
    /// hold their version: a job whose `clusters` came empty with the version held here (the
    /// next reply, or a workflow that starts later) keeps, or starts with, the clusters held;
    /// empty at another version, the node is in no cluster. The version held goes up in the
    /// heartbeat and is forgotten with the server. Before, an empty `clusters` took every
    /// machine out of its clusters.
    #[test]
    fn a_job_whose_clusters_came_empty_at_the_version_held_keeps_the_clusters_held() {
        let mut b = Balancer::default();
        assert_eq!(b.clusters_version(), 0);
        let first = pb::PcddbJob {
            clusters_version: 5,
            ..job(vec![0, 2], 0)
        };
        b.sync(1, 2, &[first]);
        assert_eq!(b.clusters_version(), 5);
        let current = pb::PcddbJob {
            clusters_version: 5,
            ..job(Vec::new(), 0)
        };
        let later = pb::PcddbJob {
            job_id: 8,
            ..current.clone()
        };
        b.sync(1, 2, &[current, later]);
        for job_id in [7, 8] {
            assert_eq!(
                b.clusters(job_id),
                Some(vec![ClusterId(0), ClusterId(2)]),
                "workflow {job_id}"
            );
        }
        // A new version replaces them; empty at another version, the node is in none.
        let moved = pb::PcddbJob {
            clusters_version: 6,
            ..job(vec![1], 0)
        };
        b.sync(1, 2, &[moved]);
        assert_eq!(b.clusters(7), Some(vec![ClusterId(1)]));
        let emptied = pb::PcddbJob {
            clusters_version: 7,
            ..job(Vec::new(), 0)
        };
        b.sync(1, 2, &[emptied]);
        assert_eq!(b.clusters(7), Some(Vec::new()));
        assert_eq!(b.clusters_version(), 7);
        b.reset();
        assert_eq!(b.clusters_version(), 0);
    }

    /// A server that predates cluster versions sends the node's clusters with every job
    /// (version 0): they are used as they come, empty or not, as before.
    #[test]
    fn an_old_servers_job_without_a_clusters_version_carries_its_clusters_as_before() {
        let mut b = Balancer::default();
        b.sync(1, 2, &[job(vec![0, 2], 0)]);
        assert_eq!(b.clusters(7), Some(vec![ClusterId(0), ClusterId(2)]));
        assert_eq!(b.clusters_version(), 0);
        b.sync(1, 2, &[job(Vec::new(), 0)]);
        assert_eq!(b.clusters(7), Some(Vec::new()));
    }
}
