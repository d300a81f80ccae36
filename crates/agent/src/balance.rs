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
    peers: BTreeMap<u32, String>,
    /// The core each accepted instance was placed on.
    cores: HashMap<u32, u32>,
    /// The self-check period the server set for this workflow.
    check_interval: Duration,
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
            let memberships: Vec<(ClusterId, NodeId)> =
                j.clusters.iter().map(|&c| (ClusterId(c), launch)).collect();
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
                peers: BTreeMap::new(),
                cores: HashMap::new(),
                check_interval: CHECK_INTERVAL,
            });
            m.check_interval = match j.check_interval_ms {
                0 => CHECK_INTERVAL,
                ms => Duration::from_millis(ms),
            };
            m.peers = j.peers.clone().into_iter().collect();
            if m.node.clusters() != j.clusters.iter().map(|&c| ClusterId(c)).collect::<Vec<_>>() {
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
        self.note_balancing();
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

    /// Forgets every machine (the server was unreachable: it may have restarted with fresh
    /// launch nodes, whose tables only new status messages fill).
    pub fn reset(&mut self) {
        self.jobs.clear();
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
            if let Some(m) = self.jobs.get_mut(&id) {
                let o = m.node.handle(NodeEvent::SelfCheck, now);
                out.extend(self.route(id, o));
            }
        }
        out
    }

    /// Whether `env`, from another agent (`AgentData.Deliver`), may be acted on: only an
    /// allocation request passes between agents, and one of a workflow balanced here must be
    /// addressed to this node and come from the workflow's launch node (a request naming
    /// another made the machine hold its instances for ever: their reply went nowhere, so the
    /// server never told it to forget them). One of a workflow not balanced here goes home, as
    /// before ([`Balancer::deliver`]).
    pub fn check_peer(&self, env: &pb::BalanceMessage) -> Result<(), String> {
        let msg = serde_json::from_str::<Message>(&env.message_json)
            .map_err(|e| format!("an undecodable PCDDB message: {e}"))?;
        let Body::Request(r) = &msg.body else {
            return Err(format!(
                "a PCDDB `{}` message: only allocation requests pass between agents",
                msg.body.kind()
            ));
        };
        let Some(m) = self.jobs.get(&env.job_id) else {
            return Ok(());
        };
        if self.me.is_some_and(|me| msg.to.0 != me) {
            return Err(format!(
                "a PCDDB request for node {}, not this one ({})",
                msg.to.0,
                self.me.unwrap_or_default()
            ));
        }
        if r.launch != m.launch {
            return Err(format!(
                "a PCDDB request of workflow {} from launch node {}, not the workflow's ({})",
                env.job_id, r.launch.0, m.launch.0
            ));
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
        let Some(m) = self.jobs.get_mut(&env.job_id) else {
            // Not (or no longer) balancing this workflow: hand a request back to its launch
            // node so its instances are not lost.
            if let Body::Request(r) = msg.body {
                self.sent += 1;
                self.to_launch.push(pb::BalanceMessage {
                    job_id: env.job_id,
                    message_json: serde_json::to_string(&Message {
                        from: msg.to,
                        to: r.launch,
                        body: Body::Return(r),
                    })
                    .unwrap_or_default(),
                    peers: Default::default(),
                });
            }
            return Vec::new();
        };
        for (k, v) in env.peers {
            if from_peer {
                // The server's address of a node stands: another agent's cannot redirect
                // this node's requests (and the agent token they carry).
                m.peers.entry(k).or_insert(v);
            } else {
                m.peers.insert(k, v);
            }
        }
        let o = m.node.handle(NodeEvent::Deliver(msg), now);
        self.route(env.job_id, o)
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
            self.to_launch.push(pb::BalanceMessage {
                job_id: job,
                message_json: serde_json::to_string(&Message {
                    from: to,
                    to: r.launch,
                    body: Body::Return(r),
                })
                .unwrap_or_default(),
                peers: Default::default(),
            });
        }
    }

    fn route(&mut self, job: u64, out: Vec<Outgoing>) -> Vec<Forward> {
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
                    if msg.to == m.launch {
                        self.to_launch.push(pb::BalanceMessage {
                            job_id: job,
                            message_json: json,
                            peers: Default::default(),
                        });
                    } else {
                        let address = m.peers.get(&msg.to.0).cloned().unwrap_or_default();
                        fwd.push(Forward {
                            address,
                            message: pb::BalanceMessage {
                                job_id: job,
                                message_json: json,
                                peers: m.peers.clone().into_iter().collect(),
                            },
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
                b.jobs
                    .values()
                    .flat_map(|m| m.peers.iter())
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

#[cfg(test)]
mod tests {
    use super::*;
    use hetsched_core::policy::graph::{AllocationRequest, Wanted};

    fn job(clusters: Vec<u32>, attributes: u64) -> pb::PcddbJob {
        pb::PcddbJob {
            job_id: 7,
            lt: 2,
            mt: 3,
            launch: 99,
            task_base: 1000,
            epoch: 1,
            clusters,
            attributes,
            ..Default::default()
        }
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
            peers: Default::default(),
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
            .expect_err("another launch node");
        assert!(
            e.contains("from launch node 5, not the workflow's (99)"),
            "{e}"
        );
        let e = b.check_peer(&forged(99, 3)).expect_err("another node");
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
        let e = b.check_peer(&status).expect_err("not a request");
        assert!(e.contains("`status` message"), "{e}");
        let e = b
            .check_peer(&pb::BalanceMessage {
                message_json: "{".into(),
                ..request(0, 0)
            })
            .expect_err("not JSON");
        assert!(e.starts_with("an undecodable PCDDB message"), "{e}");
        assert_eq!(b.held(), 0);
        // A genuine one is taken; its addresses add nodes but do not replace the server's.
        let mut genuine = request(0, 0);
        genuine.peers.insert(2, "evil:1".into());
        genuine.peers.insert(3, "10.0.0.3:7000".into());
        assert_eq!(b.check_peer(&genuine), Ok(()));
        b.deliver(genuine, 0, true);
        assert_eq!(b.held(), 1);
        let peers = &b.jobs[&7].peers;
        assert_eq!(peers.get(&2).map(String::as_str), Some("10.0.0.2:7000"));
        assert_eq!(peers.get(&3).map(String::as_str), Some("10.0.0.3:7000"));
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
}
