//! Workflows in the server's state (issue 13, spec 05), with the agents' side played by the
//! core's own `PcddbNode` machines exactly as `crates/agent/src/balance.rs` drives them: a
//! self-check sends `status` with the next heartbeat, a request from the launch node arrives in
//! a heartbeat reply, a request for another agent is handed to it at once (the gRPC hop).
//!
//! Shown here: proximity clusters come from the round trips the agents report and a request
//! travels within one cluster first; instances that run again go through the balancer; a
//! task's `requires` and size decide where its instances may run, and a running instance
//! books its cores in the view shared with batch jobs; cancelling some instances kills or drops
//! them and skips only their dependants; an instance whose inputs found no room on its node's
//! disk runs again elsewhere, a lost attempt bounded by `max_attempts` across a restart, not a
//! failure; a full-disk rollback keeps the stored workflows; GPU
//! instances run on a bound NNode offloaded to its ANode, which listings name after a rollback
//! and a restart, and whose death runs them again; each workflow's requirements are bits of its
//! own vocabulary, which no other user's workflows can use up; and, over random workflows,
//! failed attempts and server restarts never make an instance run twice at once, and every
//! workflow completes.

use crate::common;
use crate::common::Scratch;

use common::heartbeat_request;
use hetsched_core::NodeId;
use hetsched_core::policy::graph::pcddb::PcddbNode;
use hetsched_core::policy::graph::{
    AllocationRequest, Body, ClusterId, GraphNode, InstanceId, Message, NodeEvent, Outgoing,
    Thresholds,
};
use hetsched_proto as pb;
use hetsched_proto::ticket;
use hetsched_server::ServerConfig;
use hetsched_server::config::WorkflowConfig;
use hetsched_server::convert::Wire;
use hetsched_server::state::State;
use hetsched_server::store::Store;
use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::time::Duration;

fn scratch(name: &str) -> Scratch {
    Scratch::new("workflow-kind", name)
}

fn open(dir: &Path, workflow: WorkflowConfig) -> State {
    let config = ServerConfig {
        data_dir: dir.to_path_buf(),
        workflow: Some(workflow),
        ..Default::default()
    };
    State::open(&config, Store::open(&dir.join("state.db")).expect("store")).expect("state")
}

/// The agents: one PCDDB machine each (one workflow), their messages for the launch node, the
/// tasks they run, and every allocation request's hop (from, to, cluster, instances).
#[derive(Default)]
struct Agents {
    machines: BTreeMap<u32, PcddbNode>,
    task_base: u64,
    job: u64,
    outbox: HashMap<u32, Vec<pb::BalanceMessage>>,
    hops: Vec<(u32, u32, u32, Vec<u32>)>,
    running: HashMap<u32, Vec<(u64, u32)>>,
    results: HashMap<u32, Vec<(u64, u32, bool)>>,
    /// (node, instance) → the core its machine put it on.
    cores: HashMap<(u32, u32), u32>,
    /// The launch node's epoch each node's machine was built for.
    epochs: HashMap<u32, u64>,
    /// (node, instance, attempt) in the order the server assigned them.
    assigned: Vec<(u32, u32, u32)>,
    /// Each assigned task's inputs: (producer's node, path).
    inputs: HashMap<u64, Vec<(u32, String)>>,
    /// Results other than plain successes and failures, for the next heartbeat.
    special: HashMap<u32, Vec<pb::TaskResult>>,
    rtt: HashMap<u32, BTreeMap<u32, u64>>,
    /// (node, instance) killed at the server's request.
    killed: Vec<(u32, u32)>,
    /// (node, instance) a machine forgot because the server listed it as dropped.
    dropped: Vec<(u32, u32)>,
    /// How many of `assigned` a test has looked at.
    checked: usize,
    /// The rack each node's agent names in its heartbeats (none: the default rack).
    racks: HashMap<u32, String>,
    /// The free disk and `min_free_disk` each node's agent reports (none: not reported).
    disks: HashMap<u32, (u64, u64)>,
    /// The `AgentData` address each node's agent advertises (none: not advertised).
    advertised: HashMap<u32, String>,
}

/// Whether `env` carries a grant of request `r` that the balancing key of `j` (the workflow's
/// `PcddbJob` in the same reply) verifies, granting exactly the instances `r` offers and the
/// table it carries.
fn granted(env: &pb::BalanceMessage, r: &AllocationRequest, j: &pb::PcddbJob) -> bool {
    let g = grant_of(env, r, j.epoch);
    let mut offered: Vec<u32> = r.instances.iter().map(|w| w.instance.0).collect();
    offered.sort_unstable();
    offered.dedup();
    ticket::verify_grant(&j.balance_key, &g, &env.grant)
        && offered == env.granted_instances
        && r.table
            .iter()
            .map(|n| n.0)
            .eq(env.granted_table.iter().copied())
        && r.instances
            .iter()
            .all(|w| g.covers(w.instance.0, w.requires))
}

/// The grant `env` claims for request `r` under the launch node built at `epoch`.
fn grant_of<'a>(
    env: &'a pb::BalanceMessage,
    r: &AllocationRequest,
    epoch: u64,
) -> ticket::Grant<'a> {
    ticket::Grant {
        job_id: env.job_id,
        epoch,
        serial: env.grant_serial,
        launch: r.launch.0,
        cluster: r.cluster.0,
        sent_at: r.sent_at,
        instances: &env.granted_instances,
        requires: &env.granted_requires,
        table: &env.granted_table,
    }
}

/// Task id of instance 0 of workflow `job`.
fn agents_base(s: &State, job: u64) -> u64 {
    s.tasks(job)
        .expect("tasks")
        .tasks
        .first()
        .map_or(0, |t| t.id)
}

impl Agents {
    fn beat(&mut self, s: &mut State, n: u32) -> pb::HeartbeatReply {
        let running = self.running.get(&n).cloned().unwrap_or_default();
        let results = self.results.remove(&n).unwrap_or_default();
        let mut req = heartbeat_request(n, &running, &results);
        req.results
            .extend(self.special.remove(&n).unwrap_or_default());
        req.balance = self.outbox.remove(&n).unwrap_or_default();
        req.rack = self.racks.get(&n).cloned().unwrap_or_default();
        req.advertise = self.advertised.get(&n).cloned().unwrap_or_default();
        if let Some(&(free, floor)) = self.disks.get(&n) {
            req.disk_free_bytes = Some(free);
            req.min_free_disk = floor;
        }
        req.rtt_ns = self
            .rtt
            .get(&n)
            .cloned()
            .unwrap_or_default()
            .into_iter()
            .collect();
        let reply = s.heartbeat(req).expect("heartbeat");
        for j in &reply.pcddb {
            self.job = j.job_id;
            self.task_base = j.task_base;
            let launch = NodeId(j.launch);
            let clusters: Vec<(ClusterId, NodeId)> =
                j.clusters.iter().map(|&c| (ClusterId(c), launch)).collect();
            // As the agent does: a launch node built since (a restarted server) means a fresh
            // machine, which holds nothing.
            if self.epochs.insert(n, j.epoch).is_some_and(|e| e != j.epoch) {
                self.machines.remove(&n);
                self.cores.retain(|&(node, _), _| node != n);
            }
            let m = self.machines.entry(n).or_insert_with(|| {
                PcddbNode::new(
                    GraphNode {
                        id: NodeId(n),
                        cores: 2,
                        attributes: j.attributes,
                    },
                    Thresholds { lt: j.lt, mt: j.mt },
                    clusters.clone(),
                )
            });
            m.set_memberships(clusters);
            m.set_attributes(j.attributes);
            // As the agent does: the cores other work holds here count as the node's load.
            m.set_foreign_load(j.foreign_cores);
            // As the agent does: instances taken here that will not run are forgotten.
            for &i in &j.dropped {
                if let Some(core) = self.cores.remove(&(n, i)) {
                    let _ = m.handle(
                        NodeEvent::Finished {
                            instance: InstanceId(i),
                            core,
                        },
                        0,
                    );
                    self.dropped.push((n, i));
                }
            }
        }
        // Killed at the server's request: the task ends (interrupted) and says so.
        for k in &reply.kill {
            let before = self.running.get(&n).map_or(0, Vec::len);
            if let Some(r) = self.running.get_mut(&n) {
                r.retain(|&(t, a)| (t, a) != (k.task_id, k.attempt));
            }
            if self.running.get(&n).map_or(0, Vec::len) < before {
                self.killed.push((n, (k.task_id - self.task_base) as u32));
                self.special.entry(n).or_default().push(pb::TaskResult {
                    task_id: k.task_id,
                    attempt: k.attempt,
                    exit_code: -1,
                    interrupted: true,
                    message: "killed".into(),
                    started_ns: 1,
                    finished_ns: 2,
                    ..Default::default()
                });
                self.ended(n, k.task_id);
            }
        }
        for env in reply.balance.clone() {
            let msg: Message = serde_json::from_str(&env.message_json).expect("a core message");
            // As the agent passes it on: every request the launch node sends carries the grant
            // its workflow's balancing key verifies, for exactly the instances it offers.
            if let Body::Request(r) = &msg.body {
                let j = reply.pcddb.iter().find(|j| j.job_id == env.job_id);
                let j = j.expect("a request comes with its workflow's PcddbJob");
                assert!(granted(&env, r, j), "a request without its grant: {env:?}");
            }
            self.deliver(n, msg);
        }
        for a in &reply.assignments {
            self.running
                .entry(n)
                .or_default()
                .push((a.task_id, a.attempt));
            let i = (a.task_id - self.task_base) as u32;
            self.assigned.push((n, i, a.attempt));
            self.inputs.insert(
                a.task_id,
                a.inputs
                    .iter()
                    .map(|x| (x.node_id, x.path.clone()))
                    .collect(),
            );
        }
        reply
    }

    fn deliver(&mut self, n: u32, msg: Message) {
        if let Body::Request(r) = &msg.body {
            self.hops.push((
                msg.from.0,
                n,
                r.cluster.0,
                r.instances.iter().map(|w| w.instance.0).collect(),
            ));
        }
        let Some(m) = self.machines.get_mut(&n) else {
            return;
        };
        let out = m.handle(NodeEvent::Deliver(msg), 0);
        self.route(n, out);
    }

    fn route(&mut self, n: u32, out: Vec<Outgoing>) {
        for o in out {
            match o {
                Outgoing::Send(m) if self.machines.contains_key(&m.to.0) => {
                    let to = m.to.0;
                    self.deliver(to, m);
                }
                Outgoing::Send(m) => {
                    self.outbox.entry(n).or_default().push(pb::BalanceMessage {
                        job_id: self.job,
                        message_json: serde_json::to_string(&m).expect("json"),
                        ..Default::default()
                    });
                }
                Outgoing::Run { instance, core } => {
                    self.cores.insert((n, instance.0), core);
                }
                Outgoing::Ready(_) => {}
            }
        }
    }

    fn self_check(&mut self, n: u32) {
        if let Some(m) = self.machines.get_mut(&n) {
            let out = m.handle(NodeEvent::SelfCheck, 0);
            self.route(n, out);
        }
    }

    /// Task `task` ended on `n`: its core is free in the node's machine.
    fn ended(&mut self, n: u32, task: u64) {
        let i = (task - self.task_base) as u32;
        if let (Some(m), Some(core)) = (self.machines.get_mut(&n), self.cores.remove(&(n, i))) {
            let _ = m.handle(
                NodeEvent::Finished {
                    instance: InstanceId(i),
                    core,
                },
                0,
            );
        }
    }

    /// Every running instance on `n` ends (`ok`), as its agent reports it.
    fn finish_all(&mut self, n: u32, ok: bool) {
        for (task, attempt) in self.running.remove(&n).unwrap_or_default() {
            self.results.entry(n).or_default().push((task, attempt, ok));
            self.ended(n, task);
        }
    }

    /// Every running instance on `n` ends without running: its first input could not be
    /// fetched (the agent's `input unavailable: node N PATH: …`).
    fn fetch_fails(&mut self, n: u32) {
        for (task, attempt) in self.running.remove(&n).unwrap_or_default() {
            let (node, path) = self.inputs[&task][0].clone();
            self.special.entry(n).or_default().push(pb::TaskResult {
                task_id: task,
                attempt,
                exit_code: -1,
                interrupted: true,
                message: format!("input unavailable: node {node} {path}: input `a`: gone"),
                started_ns: 1,
                finished_ns: 2,
                ..Default::default()
            });
            self.ended(n, task);
        }
    }

    /// Every running instance on `n` ends: those with inputs without running (their first
    /// input could not be fetched), the others successfully.
    fn fetch_fails_or_succeeds(&mut self, n: u32) {
        let (fetching, producing): (Vec<_>, Vec<_>) = self
            .running
            .remove(&n)
            .unwrap_or_default()
            .into_iter()
            .partition(|(task, _)| self.inputs.get(task).is_some_and(|i| !i.is_empty()));
        self.running.insert(n, fetching);
        self.fetch_fails(n);
        self.running.insert(n, producing);
        self.finish_all(n, true);
    }

    /// One round: every agent checks itself and heartbeats.
    fn round(&mut self, s: &mut State, nodes: &[u32]) {
        for &n in nodes {
            self.self_check(n);
            self.beat(s, n);
        }
    }

    /// Rounds of `nodes`, each finishing what it runs, until workflow `job` completes or
    /// `rounds` went by (the caller asserts what it expects).
    fn run_until_completed(&mut self, s: &mut State, nodes: &[u32], job: u64, rounds: u32) {
        for _ in 0..rounds {
            self.round(s, nodes);
            for &n in nodes {
                self.finish_all(n, true);
            }
            if s.get_job(job).expect("job").state == "completed" {
                break;
            }
        }
    }

    /// The nodes each instance was assigned to, in order: instance → nodes.
    fn runs(&self) -> BTreeMap<u32, Vec<u32>> {
        let mut runs: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
        for &(node, i, _) in &self.assigned {
            runs.entry(i).or_default().push(node);
        }
        runs
    }
}

/// Round trips: 0.1 ms within {n0, n1} and within {n2, n3}, 5 ms between the pairs.
fn pairs(ids: &[u32]) -> HashMap<u32, BTreeMap<u32, u64>> {
    let mut rtt = HashMap::new();
    for (a, &x) in ids.iter().enumerate() {
        let mut m = BTreeMap::new();
        for (b, &y) in ids.iter().enumerate() {
            if a != b {
                let near = a / 2 == b / 2;
                m.insert(y, if near { 100_000 } else { 5_000_000 });
            }
        }
        rtt.insert(x, m);
    }
    rtt
}

const FAN_OUT: &str = r#"
balancer = "pcddb"

[[task]]
name = "seed"
instances = 1
cost = "1s"
outputs = ["a"]
command = "echo 1 > {output:a}"

[[task]]
name = "spread"
instances = "1..=20"
cost = "1s"
inputs = ["a"]
outputs = ["b"]
command = "cat {input:a} > {output:b}"
"#;

/// Each node's clusters as `hetsched nodes` shows them.
fn shown_clusters(s: &State) -> Vec<(String, String)> {
    s.nodes(true)
        .nodes
        .iter()
        .map(|n| (n.name.clone(), n.clusters.clone()))
        .collect()
}

/// Round trips in ns, the same both ways: `near` pairs (of indexes into `ids`) at their value,
/// every other pair at 5 ms.
fn measured(ids: &[u32], near: &[((usize, usize), u64)]) -> HashMap<u32, BTreeMap<u32, u64>> {
    let mut rtt: HashMap<u32, BTreeMap<u32, u64>> = HashMap::new();
    for (a, &x) in ids.iter().enumerate() {
        for (b, &y) in ids.iter().enumerate() {
            if a != b {
                let ns = near
                    .iter()
                    .find(|((p, q), _)| (*p, *q) == (a, b) || (*p, *q) == (b, a))
                    .map_or(5_000_000, |&(_, ns)| ns);
                rtt.entry(x).or_default().insert(y, ns);
            }
        }
    }
    rtt
}

#[test]
fn clusters_follow_a_round_trip_that_moved_and_not_one_that_wavers_across_one_step() {
    let dir = scratch("clusters-waver");
    let mut s = open(
        &dir,
        WorkflowConfig {
            cluster_size: Some(2),
            ..Default::default()
        },
    );
    let ids: Vec<u32> = (0..4)
        .map(|k| common::register(&mut s, &format!("n{k}"), 2))
        .collect();
    let as_shown =
        |pairs: [(&str, &str); 4]| pairs.map(|(a, b)| (a.to_string(), b.to_string())).to_vec();
    let mut agents = Agents {
        rtt: pairs(&ids),
        ..Default::default()
    };
    agents.round(&mut s, &ids);
    assert_eq!(
        shown_clusters(&s),
        as_shown([("n0", "Sc1"), ("n1", "Sc1"), ("n2", "Sc2"), ("n3", "Sc2")])
    );
    // The network changed: n0 is now 0.1 ms from n2 (and 0.4 ms from n1), n1 0.1 ms from n3.
    // The clusters follow at once.
    agents.rtt = measured(
        &ids,
        &[((0, 2), 100_000), ((0, 1), 400_000), ((1, 3), 100_000)],
    );
    agents.round(&mut s, &ids);
    assert_eq!(
        shown_clusters(&s),
        as_shown([("n0", "Sc1"), ("n1", "Sc2"), ("n2", "Sc1"), ("n3", "Sc2")])
    );
    // n0 ↔ n2 wavers to 0.26 ms: one step of `RTT_RESOLUTION` up, where it ties n0 ↔ n1 (the
    // tie would go to n1 by name). Jitter of a few microseconds across a step's edge does not
    // regroup the cluster (and costs no reclustering at every beat).
    agents.rtt = measured(
        &ids,
        &[((0, 2), 260_000), ((0, 1), 400_000), ((1, 3), 100_000)],
    );
    for _ in 0..3 {
        agents.round(&mut s, &ids);
    }
    assert_eq!(
        shown_clusters(&s),
        as_shown([("n0", "Sc1"), ("n1", "Sc2"), ("n2", "Sc1"), ("n3", "Sc2")])
    );
    // Moved by more than a step (0.8 ms), it regroups: n1 is now n0's nearest, so Sc1 grows
    // from n0 through n1 to n3, and Sc2 from n2 (nearest to n0) takes them all.
    agents.rtt = measured(
        &ids,
        &[((0, 2), 800_000), ((0, 1), 400_000), ((1, 3), 100_000)],
    );
    agents.round(&mut s, &ids);
    assert_eq!(
        shown_clusters(&s),
        as_shown([
            ("n0", "Sc1,Sc2"),
            ("n1", "Sc1,Sc2"),
            ("n2", "Sc2"),
            ("n3", "Sc1,Sc2")
        ])
    );
}

#[test]
fn clusters_come_from_measured_round_trips_and_a_request_travels_within_a_cluster_first() {
    let dir = scratch("clusters");
    let mut s = open(
        &dir,
        WorkflowConfig {
            lt: Some(2),
            mt: std::num::NonZeroU32::new(3),
            cluster_size: Some(2),
            check_interval: Some("20ms".parse().expect("duration")),
            ..Default::default()
        },
    );
    let ids: Vec<u32> = (0..4)
        .map(|k| common::register(&mut s, &format!("n{k}"), 2))
        .collect();
    let mut agents = Agents {
        rtt: pairs(&ids),
        ..Default::default()
    };
    agents.round(&mut s, &ids);
    // The core's clustering over the measured round trips: Sc1 = {n0, n1}, Sc2 = {n2, n3}.
    let shown: Vec<(String, String)> = s
        .nodes(true)
        .nodes
        .iter()
        .map(|n| (n.name.clone(), n.clusters.clone()))
        .collect();
    assert_eq!(
        shown,
        [("n0", "Sc1"), ("n1", "Sc1"), ("n2", "Sc2"), ("n3", "Sc2")]
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .to_vec()
    );
    let job = s.submit("fan.toml", FAN_OUT, "/").expect("submit").job_id;
    // Each agent's machine is a member of its own cluster only.
    for (k, &n) in ids.iter().enumerate() {
        let r = agents.beat(&mut s, n);
        assert_eq!(r.pcddb[0].clusters, vec![k as u32 / 2], "n{k}");
        assert_eq!(
            r.pcddb[0].check_interval_ms, 20,
            "the agents check themselves at the server's [workflow] check_interval"
        );
    }
    // Run until every instance ran (an agent reports what runs on it as done at each round).
    for _ in 0..30 {
        agents.round(&mut s, &ids);
        for &n in &ids {
            agents.finish_all(n, true);
        }
        if agents.assigned.len() == 21 {
            break;
        }
    }
    assert_eq!(agents.assigned.len(), 21, "every instance ran: {agents:?}");
    // Every hop stays within the request's cluster.
    let members = |c: u32| &ids[2 * c as usize..2 * c as usize + 2];
    for (from, to, c, _) in &agents.hops {
        assert!(
            members(*c).contains(to),
            "{from} → {to} outside Sc{}",
            c + 1
        );
        assert!(
            ids.contains(from) == members(*c).contains(from),
            "{from} → {to} crossed clusters"
        );
    }
    // The 20 `spread` instances: first into Sc1 (agent to agent inside it), the rest returned
    // and then into Sc2.
    let spread: Vec<&(u32, u32, u32, Vec<u32>)> = agents
        .hops
        .iter()
        .filter(|h| h.3.iter().any(|&i| i > 0))
        .collect();
    let first_sc2 = spread.iter().position(|h| h.2 == 1).expect("Sc2 was used");
    assert!(first_sc2 > 0 && spread[..first_sc2].iter().all(|h| h.2 == 0));
    assert!(
        spread[..first_sc2].iter().any(|h| ids.contains(&h.0)),
        "a request hopped from one Sc1 agent to the other: {spread:?}"
    );
    assert!(
        spread[first_sc2..].iter().any(|h| ids.contains(&h.0)),
        "and from one Sc2 agent to the other: {spread:?}"
    );
    // Exactly: L → n1 (Sc1, all 20) → n0 (14 left); back to L; L → n1 again (8): n1's status of
    // a self-check made before it accepted reached L after the first request left, and a node
    // reports at every check below LT (seed 004), so Sc1's table named n1 once more — n1, now
    // loaded, returns the 8 at once and the return clears it; then L → n2 (Sc2, 8) → n3 (2).
    let l = u32::MAX - 1;
    let path: Vec<(u32, u32, u32, usize)> =
        spread.iter().map(|h| (h.0, h.1, h.2, h.3.len())).collect();
    assert_eq!(
        path,
        vec![
            (l, ids[1], 0, 20),
            (ids[1], ids[0], 0, 14),
            (l, ids[1], 0, 8),
            (l, ids[2], 1, 8),
            (ids[2], ids[3], 1, 2)
        ]
    );
    let _ = job;
}

impl std::fmt::Debug for Agents {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "assigned {:?}, hops {:?}", self.assigned, self.hops)
    }
}

#[test]
fn a_failed_attempt_runs_again_through_the_next_allocation_request() {
    let dir = scratch("retry");
    let mut s = open(&dir, WorkflowConfig::default());
    let n = common::register(&mut s, "n0", 2);
    let mut agents = Agents::default();
    agents.beat(&mut s, n);
    let job = s
        .submit(
            "flaky.toml",
            "balancer = \"pcddb\"\n[[task]]\nname = \"flaky\"\ninstances = 1\ncost = \"1s\"\n\
         outputs = [\"o\"]\ncommand = \"echo > {output:o}\"\nretries = 1\n",
            "/",
        )
        .expect("submit")
        .job_id;
    for _ in 0..5 {
        agents.round(&mut s, &[n]);
    }
    assert_eq!(agents.assigned, vec![(n, 0, 1)]);
    let requests = |a: &Agents| a.hops.iter().filter(|h| h.3.contains(&0)).count();
    assert_eq!(requests(&agents), 1);
    // The attempt fails: the server does not hand the retry to the node itself; it travels in
    // a new allocation request, which the node accepts.
    agents.finish_all(n, false);
    agents.beat(&mut s, n);
    assert_eq!(agents.assigned.len(), 1, "not placed outside the balancer");
    // Waiting for its retry, it says why its attempt ended; running again, nothing yet.
    let shown = |s: &State| {
        let t = &s.tasks(job).expect("tasks").tasks[0];
        (t.state.clone(), t.reason.clone())
    };
    assert_eq!(shown(&s), ("ready".into(), "exited".into()));
    for _ in 0..5 {
        agents.round(&mut s, &[n]);
    }
    assert_eq!(requests(&agents), 2, "a second request carried it");
    assert_eq!(agents.assigned, vec![(n, 0, 1), (n, 0, 2)]);
    assert_eq!(shown(&s), ("running".into(), String::new()));
    // The second attempt succeeds. A workflow's attempts count in the event metrics as a batch
    // job's do (they agreed neither with `hetsched_tasks` nor with the dashboard's chart).
    agents.finish_all(n, true);
    agents.beat(&mut s, n);
    // Its mean run time, as a batch application's (`job N`, the dashboard: not `cpu -`).
    let app = &s.job(job).expect("job").apps[0];
    assert!(app.has_cpu && app.mean_cpu_ms > 0.0, "{app:?}");
    assert_eq!(app.mean_gpu_ms, 0.0);
    let metrics = s.metrics();
    let reg = hetsched_server::metrics::registry(
        &metrics,
        std::sync::Arc::new(std::sync::Mutex::new(s)),
        "hdas",
    );
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &reg).expect("encode");
    for line in [
        "hetsched_jobs_submitted_total 1",
        "hetsched_tasks_dispatched_total{variant=\"cpu\"} 2",
        "hetsched_task_results_total{outcome=\"retried\"} 1",
        "hetsched_task_results_total{outcome=\"succeeded\"} 1",
        "hetsched_task_results_total{outcome=\"failed\"} 0",
    ] {
        assert!(text.lines().any(|l| l == line), "{line} in\n{text}");
    }
}

/// An instance that used up its retries reads as a batch task does (docs/json.md): its last
/// attempt, the failed attempts that were retried (the last failure is not counted) and what
/// ended it (the exit code where the agent said nothing more). Before, `retries = 1` read
/// `attempt 2, failed_attempts 2, message 'attempt 2 failed (…)'`, and `retries = 0`
/// `1 (1 failed)` where a batch task reads `1`. A row stored before, which counted the last
/// failure too, reads the same after a restart.
#[test]
fn an_instance_that_used_up_its_retries_reads_as_a_batch_task_does() {
    let dir = scratch("retries-used-up");
    let mut s = open(&dir, WorkflowConfig::default());
    let n = common::register(&mut s, "n0", 2);
    let mut agents = Agents::default();
    agents.beat(&mut s, n);
    let mut jobs = Vec::new();
    for retries in [1, 0] {
        let job = s
            .submit(
                "flaky.toml",
                &format!(
                    "balancer = \"pcddb\"\n[[task]]\nname = \"flaky\"\ninstances = 1\n\
                     cost = \"1s\"\noutputs = [\"o\"]\ncommand = \"echo > {{output:o}}\"\n\
                     retries = {retries}\n"
                ),
                "/",
            )
            .expect("submit")
            .job_id;
        agents = Agents::default();
        for attempt in 1..=retries + 1 {
            for _ in 0..5 {
                agents.round(&mut s, &[n]);
            }
            assert_eq!(agents.assigned.last().map(|a| a.2), Some(attempt));
            agents.finish_all(n, false);
            agents.beat(&mut s, n);
        }
        let t = &s.list_tasks(job, 0, 10).expect("tasks").tasks[0];
        assert_eq!(
            (
                t.state.as_str(),
                t.attempt,
                t.failed_attempts,
                t.message.as_str()
            ),
            ("failed", retries + 1, retries, "exit code 1"),
            "retries = {retries}"
        );
        assert_eq!(t.reason, Some(hetsched_server::store::EndReason::Exited));
        jobs.push(job);
    }
    // Rows stored before counted the last failure: they read as the count is now.
    drop(s);
    let db = rusqlite::Connection::open(dir.join("state.db")).expect("db");
    db.execute("UPDATE wf_instances SET failures = failures + 1", [])
        .expect("edit");
    drop(db);
    let s = open(&dir, WorkflowConfig::default());
    for (job, retries) in jobs.into_iter().zip([1, 0]) {
        let t = &s.list_tasks(job, 0, 10).expect("tasks").tasks[0];
        assert_eq!((t.attempt, t.failed_attempts), (retries + 1, retries));
    }
}

#[test]
fn a_lost_output_is_produced_again_where_its_consumers_wait_even_when_they_fill_the_node() {
    // One dual-core node, LT = 2 and MT = 10 per core (4 and 20): it takes the seed, then all
    // 20 `spread` instances. The seed's output is then lost (its first two consumers cannot
    // fetch it): the 18 consumers still waiting on the node keep its instance count above LT,
    // so it never reports itself underloaded and no allocation request could place the seed
    // again. The seed runs again on that node, first, outside the balancer.
    let dir = scratch("lost-output");
    let (mut s, mut agents, [n], job) = fan_out_on(&dir, WorkflowConfig::default(), ["n0"]);
    let run_until = |agents: &mut Agents, s: &mut State, k: usize| {
        for _ in 0..10 {
            if agents.assigned.len() >= k {
                break;
            }
            agents.round(s, &[n]);
        }
    };
    run_until(&mut agents, &mut s, 1);
    assert_eq!(agents.assigned, vec![(n, 0, 1)], "the seed");
    agents.finish_all(n, true);
    run_until(&mut agents, &mut s, 3);
    assert_eq!(
        agents.assigned.len(),
        3,
        "two spread instances run: {agents:?}"
    );
    assert_eq!(agents.machines[&n].held(), 20, "the node took all 20");
    agents.fetch_fails(n);
    for _ in 0..5 {
        agents.round(&mut s, &[n]);
    }
    assert_eq!(
        agents.assigned.get(3),
        Some(&(n, 0, 2)),
        "the seed ran again, on the node its consumers wait on: {agents:?}"
    );
    assert!(agents.machines[&n].held() >= 4, "not underloaded meanwhile");
    // Everything completes.
    for _ in 0..40 {
        agents.finish_all(n, true);
        agents.round(&mut s, &[n]);
    }
    let info = s.get_job(job).expect("job");
    assert_eq!(info.state, "completed", "{agents:?}");
}

/// An output that can never be fetched (its producer's agent serves none: `--log-listen none`)
/// is not produced again for ever: after `MAX_INPUT_LOSSES` fetches in a row fail, the
/// consumer fails with the agent's reason, and so does the job.
#[test]
fn an_input_that_can_never_be_fetched_fails_its_consumer_instead_of_looping() {
    let dir = scratch("unfetchable");
    let (mut s, mut agents, [n], job) = fan_out_on(&dir, WorkflowConfig::default(), ["n0"]);
    for _ in 0..200 {
        if !matches!(
            s.get_job(job).expect("job").state.as_str(),
            "pending" | "running"
        ) {
            break;
        }
        agents.fetch_fails_or_succeeds(n);
        agents.round(&mut s, &[n]);
    }
    let info = s.get_job(job).expect("job");
    assert_eq!(info.state, "failed", "{agents:?}");
    let seeds = agents.assigned.iter().filter(|a| a.1 == 0).count() as u32;
    assert!(
        seeds <= 1 + hetsched_server::jobs::workflow::MAX_INPUT_LOSSES,
        "the seed ran {seeds} times"
    );
    let tasks = s.tasks(job).expect("tasks").tasks;
    let why = tasks
        .iter()
        .find(|t| t.state == "failed")
        .map(|t| t.message.clone())
        .unwrap_or_default();
    assert!(
        why.starts_with("an input could not be fetched again (3 re-runs of its producer")
            && why.contains("gone"),
        "{why}"
    );
}

/// A consumer that cannot reach the agent holding its inputs (killed, not yet declared dead)
/// fails once, not once per output there: every output on that node is produced again before
/// the consumer is sent anywhere again. Before, the server sent it back as soon as the named
/// output was produced again, with the next one still on the dead node; a consumer of four
/// outputs of a killed agent failed for good at its third failure (the CLI kill test, 1 run in
/// 4).
#[test]
fn a_consumer_that_cannot_reach_a_producers_agent_fails_once_not_once_per_output_there() {
    let dir = scratch("unreachable-agent");
    let wf = r#"
balancer = "pcddb"
[[task]]
name = "gen"
instances = "1..=3"
cost = "1s"
outputs = ["x"]
command = "echo {index} > {output:x}"
[[task]]
name = "use"
instances = 1
cost = "1s"
inputs = ["x"]
requires = ["pb"]
command = "cat {input:x}"
"#;
    let mut s = open(&dir, WorkflowConfig::default());
    let a = common::register(&mut s, "a", 4);
    let b = common::register_with(&mut s, "b", 4, &["pb"]);
    let mut agents = Agents::default();
    agents.beat(&mut s, a);
    let job = s.submit("wf.toml", wf, "/").expect("submit").job_id;
    // Only a's machine reports itself underloaded at first: it takes the three gen instances.
    for _ in 0..10 {
        if agents.assigned.len() >= 3 {
            break;
        }
        agents.round(&mut s, &[a]);
    }
    assert_eq!(agents.assigned.len(), 3, "the three gen instances run on a");
    assert!(agents.assigned.iter().all(|&(n, _, _)| n == a));
    agents.finish_all(a, true);
    for _ in 0..10 {
        if agents.assigned.len() >= 4 {
            break;
        }
        agents.round(&mut s, &[a, b]);
    }
    let use_task = agents.task_base + 3;
    assert_eq!(agents.assigned.get(3), Some(&(b, 3, 1)), "use runs on b");
    assert_eq!(
        agents.inputs[&use_task].len(),
        3,
        "use reads the three outputs"
    );
    // a's agent is killed: b cannot connect to it for the first input.
    let (node, path) = agents.inputs[&use_task][0].clone();
    assert_eq!(node, a);
    agents.running.remove(&b);
    agents.special.entry(b).or_default().push(pb::TaskResult {
        task_id: use_task,
        attempt: 1,
        exit_code: -1,
        interrupted: true,
        message: format!(
            "input unavailable: node {node} {path}: input `x`: the producer's agent: transport \
             error"
        ),
        started_ns: 1,
        finished_ns: 2,
        ..Default::default()
    });
    agents.beat(&mut s, b);
    let gens_again = |s: &State| {
        s.tasks(job)
            .expect("tasks")
            .tasks
            .iter()
            .filter(|t| t.app == "gen" && t.state != "succeeded")
            .count()
    };
    assert_eq!(
        gens_again(&s),
        3,
        "every output on a is produced again, not only the one named: {:?}",
        s.tasks(job).expect("tasks").tasks
    );
    // a is declared dead once silent past the timeout; b runs everything that is left.
    std::thread::sleep(crate::common::SILENCE);
    for _ in 0..40 {
        agents.round(&mut s, &[b]);
        s.check_dead(crate::common::DEAD_TIMEOUT)
            .expect("check dead");
        agents.finish_all(b, true);
        if s.get_job(job).expect("job").state == "completed" {
            break;
        }
    }
    assert_eq!(s.get_job(job).expect("job").state, "completed");
    let tasks = s.tasks(job).expect("tasks").tasks;
    let used = tasks.iter().find(|t| t.app == "use").expect("use");
    assert_eq!(used.attempt, 2, "one failed fetch, then it ran: {used:?}");
    assert!(
        agents.inputs[&use_task].iter().all(|&(n, _)| n == b),
        "its second attempt read every input from b: {:?}",
        agents.inputs[&use_task]
    );
}

/// Every node is told a data key of its own (its heartbeat replies' `data_key`), and each
/// input an assignment names carries the server's fetch ticket, which the producer's key
/// verifies for that path, producer, consumer, task and attempt only — the consumer's own key
/// does not, nor another path or consumer. Without it any holder of the agent token could read
/// any agent's workflow outputs.
#[test]
fn inputs_carry_fetch_tickets_only_the_producers_data_key_verifies() {
    use hetsched_proto::ticket::{self, Fetch};
    let dir = scratch("fetch-tickets");
    let wf = r#"
balancer = "centralised"
[[task]]
name = "gen"
instances = 1
cost = "1s"
outputs = ["x"]
requires = ["pa"]
command = "echo > {output:x}"
[[task]]
name = "use"
instances = 1
cost = "1s"
inputs = ["x"]
requires = ["pb"]
command = "cat {input:x}"
"#;
    let mut s = open(&dir, WorkflowConfig::default());
    let a = common::register_with(&mut s, "a", 4, &["pa"]);
    let b = common::register_with(&mut s, "b", 4, &["pb"]);
    let mut agents = Agents::default();
    let key_a = agents.beat(&mut s, a).data_key;
    let key_b = agents.beat(&mut s, b).data_key;
    assert_eq!(key_a.len(), ticket::LEN, "every node gets a key");
    assert_eq!(key_b.len(), ticket::LEN);
    assert_ne!(key_a, key_b, "each its own");
    assert_eq!(
        agents.beat(&mut s, a).data_key,
        key_a,
        "the same at every beat"
    );
    let job = s.submit("wf.toml", wf, "/").expect("submit").job_id;
    let mut consumer = None;
    for _ in 0..20 {
        let r = agents.beat(&mut s, a);
        assert_eq!(r.data_key, key_a, "a is never told b's key");
        agents.finish_all(a, true);
        let r = agents.beat(&mut s, b);
        assert_eq!(r.data_key, key_b);
        if let Some(x) = r.assignments.into_iter().find(|x| !x.inputs.is_empty()) {
            consumer = Some(x);
            break;
        }
    }
    let c = consumer.expect("use is sent to b");
    let input = &c.inputs[0];
    assert_eq!(input.node_id, a);
    let fetch = Fetch {
        path: &input.path,
        producer: "a",
        consumer: "b",
        task_id: c.task_id,
        attempt: c.attempt,
        job_nonce: c.job_nonce,
    };
    // Every job has a nonce of its own (0 is a job from before nonces).
    assert_ne!(c.job_nonce, 0);
    assert!(
        ticket::verify(&key_a, &fetch, &input.ticket),
        "the producer's key verifies the ticket: {input:?}"
    );
    assert!(
        !ticket::verify(&key_b, &fetch, &input.ticket),
        "not b's own key"
    );
    let other_path = format!("{}y", input.path);
    for other in [
        Fetch {
            path: &other_path,
            ..fetch
        },
        Fetch {
            consumer: "a",
            ..fetch
        },
        Fetch {
            attempt: c.attempt + 1,
            ..fetch
        },
        // Another incarnation of the job's id (a restored backup, a fresh data directory).
        Fetch {
            job_nonce: c.job_nonce ^ 1,
            ..fetch
        },
    ] {
        assert!(!ticket::verify(&key_a, &other, &input.ticket), "{other:?}");
    }
    assert_eq!(s.get_job(job).expect("job").state, "running");
}

/// Under pcddb a node declared dead while its machine held instances waiting there, whose
/// agent then comes back (it was only slow), is told to forget those instances once another
/// node's machine took them: else its machine counted them for ever, never reported itself
/// underloaded, and with every live node in that state nothing was placed any more.
#[test]
fn a_node_declared_dead_and_back_forgets_the_instances_its_machine_held_that_went_elsewhere() {
    let dir = scratch("dead-and-back");
    let mut s = open(&dir, WorkflowConfig::default());
    let n0 = common::register(&mut s, "n0", 2);
    let n1 = common::register(&mut s, "n1", 2);
    let mut agents = Agents::default();
    agents.beat(&mut s, n0);
    let job = s.submit("fan.toml", FAN_OUT, "/").expect("submit").job_id;
    // Only n0 reports itself underloaded: it takes the seed, then all 20 spread instances,
    // two of which run.
    for _ in 0..10 {
        if !agents.assigned.is_empty() {
            break;
        }
        agents.round(&mut s, &[n0]);
    }
    agents.finish_all(n0, true);
    for _ in 0..10 {
        if agents.assigned.len() >= 3 {
            break;
        }
        agents.round(&mut s, &[n0]);
    }
    assert_eq!(
        agents.machines[&n0].held(),
        20,
        "n0 took all 20: {agents:?}"
    );
    // n0 falls silent past the timeout; n1 beats on and takes what n0 held.
    std::thread::sleep(crate::common::SILENCE);
    agents.beat(&mut s, n1);
    s.check_dead(crate::common::DEAD_TIMEOUT)
        .expect("check dead");
    for _ in 0..10 {
        agents.round(&mut s, &[n1]);
    }
    assert!(
        agents.machines[&n1].held() > 0,
        "n1 took the work: {agents:?}"
    );
    // n0's agent is back: its two running instances are killed (they run elsewhere now) and
    // its machine forgets the 18 it held waiting.
    for _ in 0..5 {
        agents.round(&mut s, &[n0]);
    }
    assert_eq!(
        agents.machines[&n0].held(),
        0,
        "n0's machine holds nothing that will run there: {agents:?}"
    );
    for _ in 0..60 {
        agents.finish_all(n0, true);
        agents.finish_all(n1, true);
        agents.round(&mut s, &[n0, n1]);
        if s.get_job(job).expect("job").state == "completed" {
            break;
        }
    }
    assert_eq!(s.get_job(job).expect("job").state, "completed");
}

#[test]
fn requirements_and_sizes_decide_the_nodes_and_running_instances_book_their_cores() {
    let dir = scratch("fit");
    let mut s = open(&dir, WorkflowConfig::default());
    let plain = common::register(&mut s, "plain", 2);
    let fpga = common::register_with(&mut s, "fpga", 4, &["fpga"]);
    let beat = |s: &mut State, n: u32, running: &[(u64, u32)], done: &[(u64, u32, bool)]| {
        s.heartbeat(heartbeat_request(n, running, done))
            .expect("heartbeat")
    };
    beat(&mut s, plain, &[], &[]);
    beat(&mut s, fpga, &[], &[]);
    // Refused at submission, naming the field: a requirement no node offers, a size no node has.
    let bad = s
        .submit(
            "tpu.toml",
            "[[task]]\nname = \"t\"\ninstances = 1\ncost = \"1s\"\nrequires = [\"tpu\"]\n\
             outputs = [\"o\"]\ncommand = \"true\"\n",
            "/",
        )
        .expect_err("no node offers tpu")
        .to_string();
    assert!(
        bad.contains("tpu.toml:5:13: task[0].requires[0]") && bad.contains("fpga"),
        "{bad}"
    );
    let bad = s
        .submit(
            "huge.toml",
            "[[task]]\nname = \"t\"\ninstances = 1\ncost = \"1s\"\ncores = 8\n\
             outputs = [\"o\"]\ncommand = \"true\"\n",
            "/",
        )
        .expect_err("no node has 8 cores")
        .to_string();
    assert!(bad.contains("huge.toml:5:9: task[0].cores"), "{bad}");
    assert_eq!(s.jobs().jobs.len(), 0, "nothing stored");
    // `big` needs 3 cores (only `fpga` has them); `accel` requires the attribute `fpga`.
    let job = s
        .submit(
            "fit.toml",
            "[[task]]\nname = \"big\"\ninstances = 2\ncost = \"1s\"\ncores = 3\noutputs = [\"b\"]\n\
         command = \"true\"\ntime_limit = \"1m\"\n\
         [[task]]\nname = \"accel\"\ninstances = 2\ncost = \"1s\"\nrequires = [\"fpga\"]\n\
         outputs = [\"a\"]\ncommand = \"true\"\n",
            "/",
        )
        .expect("submit")
        .job_id;
    // The job's applications say what one instance holds (`job N --output json`'s
    // `cpu_cores`, which read 0).
    let info = s.job(job).expect("job");
    let cores: Vec<u32> = info.apps.iter().map(|a| a.cpu_cores).collect();
    assert_eq!(cores, [3, 1], "{:?}", info.apps);
    // And its limit and node count, as a batch application's (they read 0).
    let limits: Vec<(u32, i64, i64)> = info
        .apps
        .iter()
        .map(|a| {
            (
                a.nodes,
                a.cpu_time_limit_ms as i64,
                a.gpu_time_limit_ms as i64,
            )
        })
        .collect();
    assert_eq!(limits, [(1, 60_000, 0), (1, 0, 0)], "{:?}", info.apps);
    let mut running: Vec<(u64, u32)> = Vec::new();
    let mut placed = Vec::new();
    for _ in 0..3 {
        let r = beat(&mut s, plain, &[], &[]);
        assert!(r.assignments.is_empty(), "nothing fits on `plain`");
        let r = beat(&mut s, fpga, &running, &[]);
        for a in &r.assignments {
            running.push((a.task_id, a.attempt));
            placed.push(a.task_id);
        }
    }
    // 3 + 1 cores: one `big` and one `accel` at a time on the 4 cores of `fpga`.
    assert_eq!(running.len(), 2, "{running:?}");
    // The ready instances wait for `fpga`'s cores: the job says so, as a batch job's
    // `resources` (not blocked: running work ends). Drained, `fpga` can take none, and the job
    // says so.
    let why = |s: &State| {
        let j = s.job(job).expect("job");
        (j.pending_reason, j.blocked)
    };
    assert_eq!(
        why(&s),
        (
            "resources: 2 ready instances wait for the busy nodes they were placed on: fpga (2)"
                .to_string(),
            false
        )
    );
    s.on_drain("fpga", true).expect("drain");
    assert_eq!(
        why(&s),
        (
            "every node that can run task `big` is drained: fpga (`hetsched node resume NAME`)"
                .to_string(),
            true
        )
    );
    s.on_drain("fpga", false).expect("resume");
    let free = |s: &State, name: &str| {
        s.nodes(true)
            .nodes
            .iter()
            .find(|n| n.name == name)
            .map(|n| n.free_cores)
    };
    assert_eq!(
        free(&s, "fpga"),
        Some(0),
        "the instances hold the node's cores"
    );
    // A batch job is not placed over them.
    s.submit(
        "job.toml",
        "[[application]]\nname = \"a\"\ntasks = 2\n[application.cpu]\ncommand = \"true\"\n",
        "/",
    )
    .expect("submit batch");
    let r = beat(&mut s, fpga, &running, &[]);
    assert!(r.assignments.is_empty(), "{:?}", r.assignments);
    // They end: their cores are free again, and the rest of the workflow runs there.
    let done: Vec<(u64, u32, bool)> = running.iter().map(|&(t, a)| (t, a, true)).collect();
    let r = beat(&mut s, fpga, &[], &done);
    assert!(!r.assignments.is_empty());
}

/// A task with inputs is not placed on a node whose agent reports its work directory's disk
/// below its `min_free_disk` (every fetched input would fail there); one without inputs is.
/// When every node that could run it is so, the job says why its instances wait.
#[test]
fn instances_with_inputs_keep_off_a_node_whose_disk_is_below_its_floor() {
    const GIB: u64 = 1 << 30;
    for balancer in ["centralised", "pcddb"] {
        let dir = scratch(&format!("disk-floor-{balancer}"));
        let mut s = open(&dir, WorkflowConfig::default());
        let mut agents = Agents::default();
        let roomy = common::register(&mut s, "roomy", 2);
        let full = common::register(&mut s, "full", 2);
        agents.disks.insert(roomy, (10 * GIB, GIB));
        agents.disks.insert(full, (GIB - 1, GIB));
        for n in [roomy, full] {
            agents.beat(&mut s, n);
        }
        let job = s
            .submit(
                "wf.toml",
                &format!(
                    "balancer = \"{balancer}\"\n\
                     [[task]]\nname = \"P\"\ninstances = 4\ncost = \"1s\"\noutputs = [\"m\"]\n\
                     command = \"true\"\n\
                     [[task]]\nname = \"C\"\ninstances = 8\ncost = \"1s\"\ninputs = [\"m\"]\n\
                     command = \"true\"\n"
                ),
                "/",
            )
            .expect("submit")
            .job_id;
        for _ in 0..60 {
            for n in [roomy, full] {
                agents.self_check(n);
                agents.beat(&mut s, n);
                agents.finish_all(n, true);
            }
            if s.job(job).expect("job").state == "completed" {
                break;
            }
        }
        assert_eq!(s.job(job).expect("job").state, "completed", "{balancer}");
        // Instances 0–3 are the producers, 4–11 the consumers.
        let consumers: Vec<u32> = agents
            .assigned
            .iter()
            .filter(|&&(_, i, _)| i >= 4)
            .map(|&(n, _, _)| n)
            .collect();
        assert_eq!(consumers.len(), 8, "{balancer}: {:?}", agents.assigned);
        assert!(
            consumers.iter().all(|&n| n == roomy),
            "{balancer}: no consumer on `full`: {:?}",
            agents.assigned
        );
    }
}

/// When every node that could run a task with inputs has its disk below its agent's floor, its
/// ready instances wait, and the job says why; once a node reports room, they run there.
#[test]
fn a_task_with_inputs_waits_saying_so_while_every_nodes_disk_is_below_its_floor() {
    let dir = scratch("disk-floor-reason");
    let mut s = open(&dir, WorkflowConfig::default());
    let a = common::register(&mut s, "a", 2);
    const GIB: u64 = 1 << 30;
    let beat = |s: &mut State, free: u64, running: &[(u64, u32)], done: &[(u64, u32, bool)]| {
        s.heartbeat(pb::HeartbeatRequest {
            disk_free_bytes: Some(free),
            min_free_disk: GIB,
            ..heartbeat_request(a, running, done)
        })
        .expect("heartbeat")
    };
    beat(&mut s, 10 * GIB, &[], &[]);
    let job = s
        .submit(
            "wf.toml",
            "[[task]]\nname = \"P\"\ninstances = 1\ncost = \"1s\"\noutputs = [\"m\"]\n\
             command = \"true\"\n\
             [[task]]\nname = \"C\"\ninstances = 1\ncost = \"1s\"\ninputs = [\"m\"]\n\
             command = \"true\"\n",
            "/",
        )
        .expect("submit")
        .job_id;
    let r = beat(&mut s, 10 * GIB, &[], &[]);
    let p: Vec<(u64, u32)> = r
        .assignments
        .iter()
        .map(|x| (x.task_id, x.attempt))
        .collect();
    assert_eq!(p.len(), 1, "the producer runs");
    // The disk fills below the floor while the producer runs (the agent reads it once a
    // second), then the producer ends: the consumer waits, and says why.
    let r = beat(&mut s, GIB / 2, &p, &[]);
    assert!(r.assignments.is_empty(), "{:?}", r.assignments);
    let done: Vec<(u64, u32, bool)> = p.iter().map(|&(t, at)| (t, at, true)).collect();
    let r = beat(&mut s, GIB / 2, &[], &done);
    assert!(r.assignments.is_empty(), "{:?}", r.assignments);
    let r = beat(&mut s, GIB / 2, &[], &[]);
    assert!(r.assignments.is_empty(), "{:?}", r.assignments);
    let j = s.job(job).expect("job");
    assert_eq!(
        (j.pending_reason.as_str(), j.blocked),
        (
            "task `C` fetches inputs, and every open node that can run it has its work \
             directory's disk below its agent's `min_free_disk`: a (`hetsched nodes` shows \
             their free space)",
            true
        )
    );
    // Room again: the consumer runs.
    let mut got: Vec<(u64, u32)> = Vec::new();
    for _ in 0..5 {
        let r = beat(&mut s, 2 * GIB, &got, &[]);
        got.extend(r.assignments.iter().map(|x| (x.task_id, x.attempt)));
    }
    assert_eq!(got.len(), 1, "{got:?}");
    assert!(s.job(job).expect("job").pending_reason.is_empty());
}

/// What an agent reports for an attempt whose inputs found no room on its node's disk: the
/// agent's `dataflow::NO_ROOM`, interrupted (not the instance's failure).
fn no_room(task_id: u64, attempt: u32) -> pb::TaskResult {
    pb::TaskResult {
        task_id,
        attempt,
        exit_code: -1,
        interrupted: true,
        message: "no room for inputs: input `m` from node 0 (wf/1/P-0/out/m at 127.0.0.1:1): \
                  this node's disk is too full for it: the filesystem of /w/wf/1/C-0/in/m has \
                  812.4 MiB free, and this agent keeps `min_free_disk` (1.0 GiB) free; this \
                  instance's input copies were removed, and it runs again where there is room \
                  (…)"
        .into(),
        started_ns: 1,
        finished_ns: 2,
        ..Default::default()
    }
}

/// A producer `P` and its consumer `C` (instances 0 and 1), `retries = 0`.
fn producer_and_consumer(balancer: &str) -> String {
    producer_and_consumers(balancer, 1)
}

/// A producer `P` (instance 0) and `n` consumers `C` of its output (instances 1 to n).
fn producer_and_consumers(balancer: &str, n: u32) -> String {
    format!(
        "balancer = \"{balancer}\"\n\
         [[task]]\nname = \"P\"\ninstances = 1\ncost = \"1s\"\noutputs = [\"m\"]\n\
         command = \"true\"\n\
         [[task]]\nname = \"C\"\ninstances = {n}\ncost = \"1s\"\ninputs = [\"m\"]\n\
         command = \"true\"\n"
    )
}

/// A server in `dir` with two 2-core nodes `a` and `b`, each reporting 10 GiB free over a
/// 1 GiB floor, running `workflow` (submitted after their first beats) as job `job`.
fn two_nodes_with_room(dir: &Path, workflow: &str) -> (State, Agents, [u32; 2], u64) {
    const GIB: u64 = 1 << 30;
    let mut s = open(dir, WorkflowConfig::default());
    let mut agents = Agents::default();
    let nodes = [
        common::register(&mut s, "a", 2),
        common::register(&mut s, "b", 2),
    ];
    for n in nodes {
        agents.disks.insert(n, (10 * GIB, GIB));
        agents.beat(&mut s, n);
    }
    let job = s.submit("wf.toml", workflow, "/").expect("submit").job_id;
    agents.task_base = agents_base(&s, job);
    (s, agents, nodes, job)
}

/// An instance whose agent found no room for its inputs on its node's disk (the disk filled
/// between two of its reports: the beat that says so still reports room) is not failed: its
/// attempt is lost, listed naming the node, its free space and floor; it runs again at once
/// on another node with room — not back on the full one, whose report the server no longer
/// trusts — and the workflow completes with `retries = 0`, no failed attempt counted. Before,
/// the attempt failed, and the job with it.
#[test]
fn an_instance_whose_inputs_find_no_room_runs_again_on_another_node_and_the_job_completes() {
    const GIB: u64 = 1 << 30;
    for balancer in ["centralised", "pcddb"] {
        let dir = scratch(&format!("no-room-{balancer}"));
        let (mut s, mut agents, [a, b], job) =
            two_nodes_with_room(&dir, &producer_and_consumer(balancer));
        let consumer = |agents: &Agents| agents.assigned.iter().find(|x| x.1 == 1).copied();
        for _ in 0..60 {
            for n in [a, b] {
                agents.self_check(n);
                agents.beat(&mut s, n);
            }
            if consumer(&agents).is_some() {
                break;
            }
            for n in [a, b] {
                agents.finish_all(n, true);
            }
        }
        let (full, _, attempt) = consumer(&agents).expect("C is placed");
        assert_eq!(attempt, 1, "{balancer}");
        let other = if full == a { b } else { a };
        let (full_name, task) = (if full == a { "a" } else { "b" }, agents.task_base + 1);
        // Its fetch finds the disk full; the beat that says so carries a reading from before.
        agents.running.remove(&full);
        agents.ended(full, task);
        agents
            .special
            .entry(full)
            .or_default()
            .push(no_room(task, 1));
        agents.beat(&mut s, full);
        let c = s.tasks(job).expect("tasks").tasks[1].clone();
        assert_eq!(c.failed_attempts, 0, "{balancer}: not a failure: {c:?}");
        assert!(
            c.message.starts_with(&format!(
                "attempt 1 lost: no room for inputs on node `{full_name}`: input `m` from node 0"
            )) && c.message.contains(
                "has 812.4 MiB free, and this agent keeps `min_free_disk` (1.0 GiB) free"
            ),
            "{balancer}: {c:?}"
        );
        // From now on its agent reads the disk below the floor, as it is.
        agents.disks.insert(full, (GIB / 2, GIB));
        for _ in 0..60 {
            for n in [full, other] {
                agents.self_check(n);
                agents.beat(&mut s, n);
                agents.finish_all(n, true);
            }
            if s.job(job).expect("job").state == "completed" {
                break;
            }
        }
        assert_eq!(s.job(job).expect("job").state, "completed", "{balancer}");
        let runs: Vec<(u32, u32)> = agents
            .assigned
            .iter()
            .filter(|x| x.1 == 1)
            .map(|&(n, _, at)| (n, at))
            .collect();
        assert_eq!(
            runs,
            [(full, 1), (other, 2)],
            "{balancer}: run again once, on the node with room"
        );
        let c = s.tasks(job).expect("tasks").tasks[1].clone();
        assert_eq!(
            (c.state.as_str(), c.attempt, c.failed_attempts),
            ("succeeded", 2, 0),
            "{balancer}: {c:?}"
        );
    }
}

/// A node whose agent found no room for an instance's inputs counts as below its floor until
/// a later heartbeat (the one that said so may carry a reading from before the fetch filled
/// the disk); then its report decides again, and with room the instance runs there again.
/// Each such loss counts against the server's `max_attempts`, across a restart too (the count
/// is stored): on a cluster whose every disk keeps filling the instance fails at the bound,
/// saying why, and the job with it, instead of running again for ever. Failed attempts
/// (`retries`) are not touched.
#[test]
fn disk_losses_keep_the_instance_off_the_node_until_its_next_beat_and_fail_it_at_max_attempts() {
    const GIB: u64 = 1 << 30;
    let dir = scratch("no-room-bound");
    let beat = |s: &mut State,
                a: u32,
                running: &[(u64, u32)],
                done: &[(u64, u32, bool)],
                lost: Option<(u64, u32)>| {
        let mut req = pb::HeartbeatRequest {
            disk_free_bytes: Some(10 * GIB),
            min_free_disk: GIB,
            ..heartbeat_request(a, running, done)
        };
        req.results.extend(lost.map(|(t, at)| no_room(t, at)));
        s.heartbeat(req).expect("heartbeat")
    };
    let assigned = |r: &pb::HeartbeatReply| -> Vec<(u64, u32)> {
        r.assignments
            .iter()
            .map(|x| (x.task_id, x.attempt))
            .collect()
    };
    let (a, job, c) = {
        let mut s = open(&dir, WorkflowConfig::default());
        let a = common::register(&mut s, "a", 2);
        beat(&mut s, a, &[], &[], None);
        let job = s
            .submit("wf.toml", &producer_and_consumer("centralised"), "/")
            .expect("submit")
            .job_id;
        let p = assigned(&beat(&mut s, a, &[], &[], None));
        assert_eq!(p.len(), 1, "the producer runs");
        let done: Vec<(u64, u32, bool)> = p.iter().map(|&(t, at)| (t, at, true)).collect();
        let mut c = assigned(&beat(&mut s, a, &[], &done, None));
        if c.is_empty() {
            c = assigned(&beat(&mut s, a, &[], &[], None));
        }
        assert_eq!(c.len(), 1, "the consumer runs");
        let c = c[0].0;
        assert_eq!(c, p[0].0 + 1);
        for attempt in 1..=2 {
            // The beat that reports no room says the disk has room (an older reading): nothing
            // with inputs goes to the node in its reply.
            let r = beat(&mut s, a, &[], &[], Some((c, attempt)));
            assert!(
                assigned(&r).is_empty(),
                "attempt {attempt}: {:?}",
                r.assignments
            );
            let t = s.tasks(job).expect("tasks").tasks[1].clone();
            assert!(
                t.state == "ready"
                    && t.message.starts_with(&format!(
                        "attempt {attempt} lost: no room for inputs on node `a`: "
                    ))
                    && t.reason == "lost",
                "{t:?}"
            );
            assert_eq!(
                s.job(job).expect("job").state,
                "running",
                "a disk loss is not the job's failure"
            );
            if attempt == 1 {
                // The next beat's report decides again: room, so it runs there again.
                let r = beat(&mut s, a, &[], &[], None);
                assert_eq!(assigned(&r), [(c, 2)]);
            }
        }
        (a, job, c)
    };
    // The server restarts with two disk losses counted: the third is the last.
    let mut s = open(&dir, WorkflowConfig::default());
    let r = beat(&mut s, a, &[], &[], None);
    assert_eq!(assigned(&r), [(c, 3)], "it runs again after the restart");
    beat(&mut s, a, &[], &[], Some((c, 3)));
    let t = s.tasks(job).expect("tasks").tasks[1].clone();
    assert_eq!(
        (t.state.as_str(), t.failed_attempts, t.reason.as_str()),
        ("failed", 0, "lost"),
        "{t:?}"
    );
    assert!(
        t.message
            .starts_with("attempt 3 lost: no room for inputs on node `a`: input `m`")
            && t.message.ends_with(
                "; gave up after 3 attempts lost for want of disk room (the server's \
                 `max_attempts`)"
            ),
        "{t:?}"
    );
    assert_eq!(s.job(job).expect("job").state, "failed");
    let r = beat(&mut s, a, &[], &[], None);
    assert!(
        assigned(&r).is_empty(),
        "nothing runs again: {:?}",
        r.assignments
    );
}

/// When the instances that started on a node report that their inputs found no room on its
/// disk, the other instances with inputs the server had placed there — waiting for its cores,
/// not started — go to a node with room at once, under either balancer, and none of them
/// counts a lost attempt: only those that really found no room do. Before, each started there
/// in turn (the first in the very reply to the beat that said the disk was full), found no
/// room and counted a disk loss against `max_attempts`.
#[test]
fn instances_placed_on_a_node_whose_disk_filled_move_elsewhere_without_a_lost_attempt() {
    const GIB: u64 = 1 << 30;
    for balancer in ["centralised", "pcddb"] {
        let dir = scratch(&format!("no-room-placed-{balancer}"));
        let (mut s, mut agents, [a, b], job) =
            two_nodes_with_room(&dir, &producer_and_consumers(balancer, 8));
        let base = agents.task_base;
        let consumers_on = |agents: &Agents, n: u32| -> Vec<(u64, u32)> {
            agents
                .running
                .get(&n)
                .map(|r| r.iter().copied().filter(|&(t, _)| t > base).collect())
                .unwrap_or_default()
        };
        // The producer runs and succeeds; then consumers start on a node (a round more lets
        // the other node take its share).
        for _ in 0..60 {
            agents.round(&mut s, &[a, b]);
            if [a, b].iter().any(|&n| !consumers_on(&agents, n).is_empty()) {
                break;
            }
            for n in [a, b] {
                agents.finish_all(n, true);
            }
        }
        agents.round(&mut s, &[a, b]);
        let full = *[a, b]
            .iter()
            .max_by_key(|&&n| consumers_on(&agents, n).len())
            .expect("two nodes");
        let other = if full == a { b } else { a };
        let started = consumers_on(&agents, full);
        let waiting = s
            .tasks(job)
            .expect("tasks")
            .tasks
            .iter()
            .filter(|t| t.state != "running" && t.state != "succeeded")
            .count();
        assert!(
            !started.is_empty() && waiting > 0,
            "{balancer}: consumers started on a node, others wait: {:?}",
            agents.assigned
        );
        // Every consumer that started there finds no room; the beat that says so still carries
        // an older reading with room.
        for &(task, attempt) in &started {
            agents
                .special
                .entry(full)
                .or_default()
                .push(no_room(task, attempt));
            agents.ended(full, task);
        }
        agents.running.remove(&full);
        let sent = agents.assigned.len();
        let r = agents.beat(&mut s, full);
        assert!(
            r.assignments.is_empty(),
            "{balancer}: nothing with inputs goes to the full node: {:?}",
            r.assignments
        );
        agents.disks.insert(full, (GIB / 2, GIB));
        // The rest runs; on the full node anything with inputs would find no room too.
        for _ in 0..60 {
            for n in [full, other] {
                agents.self_check(n);
                agents.beat(&mut s, n);
            }
            for (task, attempt) in agents.running.remove(&full).unwrap_or_default() {
                agents
                    .special
                    .entry(full)
                    .or_default()
                    .push(no_room(task, attempt));
                agents.ended(full, task);
            }
            agents.finish_all(other, true);
            if s.job(job).expect("job").state == "completed" {
                break;
            }
        }
        assert_eq!(s.job(job).expect("job").state, "completed", "{balancer}");
        let later: Vec<(u32, u32, u32)> = agents.assigned[sent..].to_vec();
        assert!(
            later.iter().all(|&(n, _, _)| n == other),
            "{balancer}: after the full disk, every consumer runs on the node with room: {later:?}"
        );
        let lost: Vec<u64> = started.iter().map(|&(t, _)| t).collect();
        for t in &s.tasks(job).expect("tasks").tasks[1..] {
            let expected = if lost.contains(&t.id) { 2 } else { 1 };
            assert_eq!(
                (t.state.as_str(), t.attempt, t.failed_attempts),
                ("succeeded", expected, 0),
                "{balancer}: only the consumers that found no room lost an attempt: {t:?}"
            );
        }
    }
}

/// A server in `dir` whose heartbeats lend each node `cores` beyond its free ones (`prefetch`):
/// instances placed on them wait in the agent's queue.
fn open_prefetching(dir: &Path, cores: u32) -> State {
    let config = ServerConfig {
        data_dir: dir.to_path_buf(),
        workflow: Some(WorkflowConfig::default()),
        prefetch: hetsched_server::state::prefetch::Setting::Cores(cores),
        ..Default::default()
    };
    State::open(&config, Store::open(&dir.join("state.db")).expect("store")).expect("state")
}

/// Node `n` beats with its (task, attempt, queued) running or queued, `results`, and its disk
/// `free` bytes free over a 1 GiB floor.
fn beat_with_disk(
    s: &mut State,
    n: u32,
    running: &[(u64, u32, bool)],
    results: Vec<pb::TaskResult>,
    free: u64,
) -> pb::HeartbeatReply {
    beat_in_rack(s, n, "", running, results, free)
}

/// [`beat_with_disk`] from a node of rack `rack` (accelerator sharing).
fn beat_in_rack(
    s: &mut State,
    n: u32,
    rack: &str,
    running: &[(u64, u32, bool)],
    results: Vec<pb::TaskResult>,
    free: u64,
) -> pb::HeartbeatReply {
    let mut req = pb::HeartbeatRequest {
        disk_free_bytes: Some(free),
        min_free_disk: 1 << 30,
        rack: rack.into(),
        ..heartbeat_request(n, &[], &[])
    };
    req.running = running
        .iter()
        .map(|&(task_id, attempt, queued)| pb::RunningTask {
            task_id,
            attempt,
            queued,
            ..Default::default()
        })
        .collect();
    req.results = results;
    s.heartbeat(req).expect("heartbeat")
}

/// The success of attempt `attempt` of task `task_id`.
fn succeeded(task_id: u64, attempt: u32) -> pb::TaskResult {
    pb::TaskResult {
        task_id,
        attempt,
        success: true,
        started_ns: 1,
        finished_ns: 2,
        ..Default::default()
    }
}

/// The same for instances already sent to the node beyond its free cores (`prefetch`), which
/// wait in its agent's queue: the reply to the beat that says the disk is full tells the agent
/// to drop them, and they run elsewhere, none counting a lost attempt. It holds across a server
/// restart: the instances taken back are stored ready, not running there, and instances the
/// restarted server placed on the node before its first beat (its disk unknown until then)
/// go elsewhere when that beat reports the disk below its floor, before any is sent there.
/// Those taken back run elsewhere as attempt 1 after the restart, as without one
/// (`an_instance_taken_back_from_a_short_nodes_queue_runs_elsewhere_as_the_same_attempt`): their
/// first number never ran, and the row says so (`wf_instances.unstarted`, `taken_back_from`).
/// Before, a restart forgot it and they ran as attempt 2, as if a first run had vanished.
#[test]
fn instances_queued_on_a_node_whose_disk_filled_are_taken_back_and_stay_off_it_across_a_restart() {
    const GIB: u64 = 1 << 30;
    let dir = scratch("no-room-queued");
    let open = || open_prefetching(&dir, 2);
    let beat = beat_with_disk;
    let ok = succeeded;
    let (a, job, lost, queued) = {
        let mut s = open();
        let a = common::register(&mut s, "a", 2);
        beat(&mut s, a, &[], Vec::new(), 10 * GIB);
        let job = s
            .submit("wf.toml", &producer_and_consumers("centralised", 8), "/")
            .expect("submit")
            .job_id;
        let r = beat(&mut s, a, &[], Vec::new(), 10 * GIB);
        assert_eq!(r.assignments.len(), 1, "the producer runs");
        let p = (r.assignments[0].task_id, r.assignments[0].attempt);
        // Its success readies the eight consumers, all placed on `a`: two start on its cores,
        // two more wait in its agent's queue, the rest wait on the server.
        let r = beat(&mut s, a, &[], vec![ok(p.0, p.1)], 10 * GIB);
        let sent: Vec<(u64, u32, bool)> = r
            .assignments
            .iter()
            .map(|x| (x.task_id, x.attempt, x.prefetched))
            .collect();
        assert_eq!(sent.iter().filter(|x| !x.2).count(), 2, "{sent:?}");
        assert_eq!(sent.iter().filter(|x| x.2).count(), 2, "{sent:?}");
        let lost: Vec<(u64, u32)> = sent.iter().filter(|x| !x.2).map(|x| (x.0, x.1)).collect();
        let queued: Vec<(u64, u32)> = sent.iter().filter(|x| x.2).map(|x| (x.0, x.1)).collect();
        // Both started ones find no room; the disk is below its floor from now on.
        let r = beat(
            &mut s,
            a,
            &queued
                .iter()
                .map(|&(t, at)| (t, at, true))
                .collect::<Vec<_>>(),
            lost.iter().map(|&(t, at)| no_room(t, at)).collect(),
            GIB / 2,
        );
        assert!(r.assignments.is_empty(), "{:?}", r.assignments);
        let mut killed: Vec<(u64, u32)> = r.kill.iter().map(|k| (k.task_id, k.attempt)).collect();
        killed.sort_unstable();
        assert_eq!(killed, queued, "the queued consumers are taken back");
        for t in &s.tasks(job).expect("tasks").tasks[1..] {
            assert_eq!(t.state, "ready", "{t:?}");
            assert_eq!(
                t.message.contains("lost"),
                lost.iter().any(|&(id, _)| id == t.id),
                "only those that found no room lost an attempt: {t:?}"
            );
        }
        (a, job, lost, queued)
    };
    // The server restarts; its disk is still full. A node with room joins.
    let mut s = open();
    let r = beat(&mut s, a, &[], Vec::new(), GIB / 2);
    assert!(
        r.assignments.is_empty() && r.kill.is_empty(),
        "nothing runs on the full node, nothing it held is lost: {r:?}"
    );
    for t in &s.tasks(job).expect("tasks").tasks[1..] {
        assert_eq!(
            (t.state.as_str(), t.message.contains("lost")),
            ("ready", lost.iter().any(|&(id, _)| id == t.id)),
            "stored ready, not running on the full node: {t:?}"
        );
    }
    let b = common::register(&mut s, "b", 2);
    let mut running: Vec<(u64, u32, bool)> = Vec::new();
    for _ in 0..20 {
        let r = beat(&mut s, a, &[], Vec::new(), GIB / 2);
        assert!(r.assignments.is_empty(), "{:?}", r.assignments);
        let done: Vec<pb::TaskResult> = running.drain(..).map(|(t, at, _)| ok(t, at)).collect();
        let r = beat(&mut s, b, &[], done, 10 * GIB);
        running.extend(r.assignments.iter().map(|x| (x.task_id, x.attempt, false)));
        if s.job(job).expect("job").state == "completed" {
            break;
        }
    }
    assert_eq!(s.job(job).expect("job").state, "completed");
    for t in &s.tasks(job).expect("tasks").tasks[1..] {
        let (was_lost, was_queued) = (
            lost.iter().any(|&(id, _)| id == t.id),
            queued.iter().any(|&(id, _)| id == t.id),
        );
        // Those that found no room lost an attempt; those taken back from the queue did not.
        let attempt = if was_lost { 2 } else { 1 };
        assert_eq!(
            (t.state.as_str(), t.attempt, t.failed_attempts),
            ("succeeded", attempt, 0),
            "taken back from the queue: {was_queued}: {t:?}"
        );
    }
    // What is stored: a disk loss for each consumer that found no room, none for the others.
    let db = rusqlite::Connection::open(dir.join("state.db")).expect("db");
    let mut q = db
        .prepare("SELECT instance, disk_losses FROM wf_instances WHERE job = ?1 ORDER BY instance")
        .expect("query");
    let losses: Vec<(i64, i64)> = q
        .query_map([job as i64], |r| Ok((r.get(0)?, r.get(1)?)))
        .expect("rows")
        .collect::<Result<_, _>>()
        .expect("rows");
    let base = agents_base(&s, job);
    let expected: Vec<(i64, i64)> = (0..9)
        .map(|i| {
            let lost = lost.iter().any(|&(t, _)| t == base + i as u64);
            (i, i64::from(lost))
        })
        .collect();
    assert_eq!(losses, expected);
}

/// [`two_queued_on_a_node_that_runs_short`]'s server, node, job, and the (task, attempt) of
/// the consumers started on the node and of those taken back from its agent's queue.
struct ShortNode {
    s: State,
    a: u32,
    job: u64,
    started: Vec<(u64, u32)>,
    queued: Vec<(u64, u32)>,
}

/// Node `a` (2 cores, prefetch 2) runs the producer of eight consumers (`retries = 0`), then
/// two consumers on its cores and two queued in its agent's queue; its next beat reports its
/// disk below its floor, and the reply takes the queued ones back (it tells `a` to kill them).
fn two_queued_on_a_node_that_runs_short(dir: &Path) -> ShortNode {
    const GIB: u64 = 1 << 30;
    let mut s = open_prefetching(dir, 2);
    let a = common::register(&mut s, "a", 2);
    beat_with_disk(&mut s, a, &[], Vec::new(), 10 * GIB);
    let job = s
        .submit("wf.toml", &producer_and_consumers("centralised", 8), "/")
        .expect("submit")
        .job_id;
    let r = beat_with_disk(&mut s, a, &[], Vec::new(), 10 * GIB);
    let p = (r.assignments[0].task_id, r.assignments[0].attempt);
    let r = beat_with_disk(&mut s, a, &[], vec![succeeded(p.0, p.1)], 10 * GIB);
    let sent = |prefetched: bool| -> Vec<(u64, u32)> {
        r.assignments
            .iter()
            .filter(|x| x.prefetched == prefetched)
            .map(|x| (x.task_id, x.attempt))
            .collect()
    };
    let (started, queued) = (sent(false), sent(true));
    assert_eq!((started.len(), queued.len()), (2, 2), "{:?}", r.assignments);
    let running: Vec<(u64, u32, bool)> = started
        .iter()
        .map(|&(t, at)| (t, at, false))
        .chain(queued.iter().map(|&(t, at)| (t, at, true)))
        .collect();
    let r = beat_with_disk(&mut s, a, &running, Vec::new(), GIB / 2);
    let mut killed: Vec<(u64, u32)> = r.kill.iter().map(|k| (k.task_id, k.attempt)).collect();
    killed.sort_unstable();
    assert_eq!(killed, queued, "the queued consumers are taken back");
    ShortNode {
        s,
        a,
        job,
        started,
        queued,
    }
}

/// An instance taken back from a short node's queue never started: it is no attempt. It runs
/// on another node as attempt 1 — `hetsched tasks`, its `HETSCHED_ATTEMPT` and its log files'
/// names say 1 — and, its task having no retries, it still runs and the workflow completes
/// with no failed or lost attempt. Before, it ran as attempt 2 with nothing lost, as if a first
/// run had vanished.
#[test]
fn an_instance_taken_back_from_a_short_nodes_queue_runs_elsewhere_as_the_same_attempt() {
    const GIB: u64 = 1 << 30;
    let dir = scratch("no-room-same-attempt");
    let ShortNode {
        mut s,
        a,
        job,
        started,
        queued,
    } = two_queued_on_a_node_that_runs_short(&dir);
    for t in s.tasks(job).expect("tasks").tasks.iter() {
        if queued.iter().any(|&(id, _)| id == t.id) {
            assert_eq!(
                (t.state.as_str(), t.attempt, t.message.as_str()),
                ("ready", 1, ""),
                "taken back: {t:?}"
            );
        }
    }
    let b = common::register(&mut s, "b", 2);
    let mut on_b: Vec<(u64, u32)> = Vec::new();
    let mut running: Vec<(u64, u32)> = Vec::new();
    // `a` stays short; its two started consumers end.
    let mut on_a = started;
    for _ in 0..20 {
        let done = on_a.drain(..).map(|(t, at)| succeeded(t, at)).collect();
        let r = beat_with_disk(&mut s, a, &[], done, GIB / 2);
        assert!(r.assignments.is_empty(), "{:?}", r.assignments);
        let done = running.drain(..).map(|(t, at)| succeeded(t, at)).collect();
        let r = beat_with_disk(&mut s, b, &[], done, 10 * GIB);
        running.extend(r.assignments.iter().map(|x| (x.task_id, x.attempt)));
        on_b.extend(r.assignments.iter().map(|x| (x.task_id, x.attempt)));
        if s.job(job).expect("job").state == "completed" {
            break;
        }
    }
    assert_eq!(s.job(job).expect("job").state, "completed");
    for &(t, _) in &queued {
        assert_eq!(
            on_b.iter().filter(|&&(id, _)| id == t).collect::<Vec<_>>(),
            [&(t, 1)],
            "sent to b once, as attempt 1: {on_b:?}"
        );
    }
    for t in &s.tasks(job).expect("tasks").tasks[1..] {
        assert_eq!(
            (
                t.state.as_str(),
                t.attempt,
                t.failed_attempts,
                t.message.as_str()
            ),
            ("succeeded", 1, 0, ""),
            "{t:?}"
        );
    }
}

/// Node `n` beats with its (task, attempt, fetching) started instances — `fetching`: its agent
/// says its inputs are still being fetched, its program not started — `results`, and its disk
/// `free` bytes free over a 1 GiB floor.
fn beat_fetching(
    s: &mut State,
    n: u32,
    running: &[(u64, u32, bool)],
    results: Vec<pb::TaskResult>,
    free: u64,
) -> pb::HeartbeatReply {
    let mut req = pb::HeartbeatRequest {
        disk_free_bytes: Some(free),
        min_free_disk: 1 << 30,
        ..heartbeat_request(n, &[], &[])
    };
    req.running = running
        .iter()
        .map(|&(task_id, attempt, fetching)| pb::RunningTask {
            task_id,
            attempt,
            started_ns: 1_000,
            fetching,
            program_started_ns: if fetching { 0 } else { 2_000 },
            ..Default::default()
        })
        .collect();
    req.results = results;
    s.heartbeat(req).expect("heartbeat")
}

/// An instance still fetching its inputs on a node whose disk runs short has not started its
/// program, and its fetch would likely stop at the disk's floor: it is taken back as a queued
/// one is — its agent told to stop it, listed ready — and runs on a node with room as the same
/// attempt, no attempt lost, while the instance whose program already runs there is left to
/// end. The stopped fetch's result, from the node it left, changes nothing. Before, it was
/// left there (the agent reported nothing that told fetching from running) until its fetch
/// failed for want of room.
#[test]
fn an_instance_fetching_on_a_node_whose_disk_ran_short_runs_elsewhere_as_the_same_attempt() {
    const GIB: u64 = 1 << 30;
    let dir = scratch("no-room-fetching");
    let mut s = open(&dir, WorkflowConfig::default());
    let a = common::register(&mut s, "a", 2);
    beat_fetching(&mut s, a, &[], Vec::new(), 10 * GIB);
    let job = s
        .submit("wf.toml", &producer_and_consumers("centralised", 2), "/")
        .expect("submit")
        .job_id;
    let r = beat_fetching(&mut s, a, &[], Vec::new(), 10 * GIB);
    let p = (r.assignments[0].task_id, r.assignments[0].attempt);
    let r = beat_fetching(&mut s, a, &[], vec![succeeded(p.0, p.1)], 10 * GIB);
    let sent: Vec<(u64, u32)> = r
        .assignments
        .iter()
        .map(|x| (x.task_id, x.attempt))
        .collect();
    assert_eq!(sent.len(), 2, "both consumers start on a: {sent:?}");
    let (fetching, running) = (sent[0], sent[1]);
    let on_a = [
        (fetching.0, fetching.1, true),
        (running.0, running.1, false),
    ];
    let r = beat_fetching(&mut s, a, &on_a, Vec::new(), 10 * GIB);
    assert!(r.kill.is_empty(), "room enough: nothing stopped");
    // The disk runs short: the fetching one is stopped, the running one left alone.
    let r = beat_fetching(&mut s, a, &on_a, Vec::new(), GIB / 2);
    let killed: Vec<(u64, u32)> = r.kill.iter().map(|k| (k.task_id, k.attempt)).collect();
    assert_eq!(killed, [fetching], "the fetching consumer is taken back");
    let listed = |s: &State, id: u64| {
        s.tasks(job)
            .expect("tasks")
            .tasks
            .into_iter()
            .find(|t| t.id == id)
            .expect("listed")
    };
    let t = listed(&s, fetching.0);
    assert_eq!(
        (t.state.as_str(), t.attempt, t.fetching, t.message.as_str()),
        ("ready", 1, false, ""),
        "{t:?}"
    );
    assert_eq!(listed(&s, running.0).state, "running");
    // Its agent's result for the stopped fetch comes from the node it left: nothing changes.
    let stopped = pb::TaskResult {
        task_id: fetching.0,
        attempt: fetching.1,
        exit_code: -1,
        message: "killed at the server's request while its inputs were fetched".into(),
        started_ns: 3_000,
        finished_ns: 3_000,
        ..Default::default()
    };
    let r = beat_fetching(
        &mut s,
        a,
        &[(running.0, running.1, false)],
        vec![stopped],
        GIB / 2,
    );
    assert!(r.assignments.is_empty(), "none sent to the short node");
    assert_eq!(listed(&s, fetching.0).state, "ready");
    let b = common::register(&mut s, "b", 2);
    let r = beat_fetching(&mut s, b, &[], Vec::new(), 10 * GIB);
    let on_b: Vec<(u64, u32)> = r
        .assignments
        .iter()
        .map(|x| (x.task_id, x.attempt))
        .collect();
    assert_eq!(on_b, [fetching], "runs on b as the same attempt");
    beat_fetching(&mut s, b, &[], vec![succeeded(fetching.0, 1)], 10 * GIB);
    beat_fetching(&mut s, a, &[], vec![succeeded(running.0, 1)], GIB / 2);
    assert_eq!(s.job(job).expect("job").state, "completed");
    for t in &s.tasks(job).expect("tasks").tasks[1..] {
        assert_eq!(
            (t.state.as_str(), t.attempt, t.failed_attempts),
            ("succeeded", 1, 0),
            "{t:?}"
        );
    }
}

/// The node an instance was taken back from is never sent that attempt number again: had the
/// reply that told its agent to drop it been lost, the agent may have started it, and its kill,
/// its result and its log files would name two runs. So when the node has room again and the
/// instance comes back to it, it runs as attempt 2; the consumers never sent anywhere run as
/// attempt 1.
#[test]
fn an_instance_taken_back_from_a_nodes_queue_comes_back_to_it_as_its_next_attempt() {
    const GIB: u64 = 1 << 30;
    let dir = scratch("no-room-back-again");
    let ShortNode {
        mut s,
        a,
        job,
        started,
        queued,
    } = two_queued_on_a_node_that_runs_short(&dir);
    let mut again: Vec<(u64, u32)> = Vec::new();
    let mut running: Vec<(u64, u32)> = started.clone();
    for _ in 0..20 {
        let done = running.drain(..).map(|(t, at)| succeeded(t, at)).collect();
        let r = beat_with_disk(&mut s, a, &[], done, 10 * GIB);
        running.extend(r.assignments.iter().map(|x| (x.task_id, x.attempt)));
        again.extend(r.assignments.iter().map(|x| (x.task_id, x.attempt)));
        if s.job(job).expect("job").state == "completed" {
            break;
        }
    }
    assert_eq!(s.job(job).expect("job").state, "completed");
    for &(t, _) in &queued {
        assert!(again.contains(&(t, 2)), "{t}: {again:?}");
    }
    for t in &s.tasks(job).expect("tasks").tasks[1..] {
        let attempt = if queued.iter().any(|&(id, _)| id == t.id) {
            2
        } else {
            1
        };
        assert_eq!(
            (t.state.as_str(), t.attempt, t.failed_attempts),
            ("succeeded", attempt, 0),
            "{t:?}"
        );
    }
}

/// An instance sent in a heartbeat reply its agent never read (its call timed out while the
/// server was stopped, and the server answered into the void) is not judged while the agent's
/// beats name an earlier reply, and once one names a later reply it runs again under the same
/// attempt number — on that node too, whose agent never held it — listed as never run. Before,
/// it ran again as attempt 2, listed `attempt 1 lost: the task vanished from its node`, as if
/// a run had been lost.
#[test]
fn an_instance_sent_in_a_reply_its_agent_never_read_runs_again_as_the_same_attempt() {
    let dir = scratch("unread");
    let mut s = open(&dir, WorkflowConfig::default());
    let n = common::register(&mut s, "n", 1);
    let beat_after = |s: &mut State, read: u64, results: Vec<pb::TaskResult>| {
        let mut req = heartbeat_request(n, &[], &[]);
        req.reply_seq = read;
        req.results = results;
        s.heartbeat(req).expect("heartbeat")
    };
    let read = beat_after(&mut s, 0, Vec::new()).seq;
    let wf = "balancer = \"centralised\"\n\
              [[task]]\nname = \"P\"\ninstances = 1\ncost = \"1s\"\ncommand = \"true\"\n";
    let job = s.submit("wf.toml", wf, "/").expect("submit").job_id;
    let sent = |r: &pb::HeartbeatReply| -> Vec<(u64, u32)> {
        r.assignments
            .iter()
            .map(|a| (a.task_id, a.attempt))
            .collect()
    };
    // The reply the agent gives up on.
    let lost = beat_after(&mut s, read, Vec::new());
    let [(task, 1)] = sent(&lost)[..] else {
        panic!("one instance, attempt 1: {:?}", sent(&lost));
    };
    // Its next beat names the reply it read before: the instance is not judged on it.
    let r = beat_after(&mut s, read, Vec::new());
    assert!(r.assignments.is_empty(), "still out to the node");
    // The next one names a later reply: the lost one was never read.
    let mut read = r.seq;
    let mut again = Vec::new();
    for _ in 0..3 {
        let r = beat_after(&mut s, read, Vec::new());
        read = r.seq;
        again.extend(sent(&r));
        if !again.is_empty() {
            break;
        }
    }
    assert_eq!(again, vec![(task, 1)], "sent again as the same attempt");
    let t = &s.tasks(job).expect("tasks").tasks[0];
    assert_eq!((t.state.as_str(), t.attempt), ("running", 1), "{t:?}");
    beat_after(&mut s, read, vec![succeeded(task, 1)]);
    let t = &s.tasks(job).expect("tasks").tasks[0];
    assert_eq!(
        (t.state.as_str(), t.attempt, t.failed_attempts),
        ("succeeded", 1, 0),
        "{t:?}"
    );
    assert_eq!(s.job(job).expect("job").state, "completed");
}

#[test]
fn the_server_configuration_refuses_an_unknown_balancer_and_an_mt_of_zero_naming_the_line() {
    let ok = ServerConfig::parse("s.toml", "[workflow]\nbalancer = \"pcddb\"\nmt = 4\n")
        .expect("parses");
    let w = ok.workflow.expect("[workflow] read");
    assert_eq!(
        (w.balancer, w.mt.map(|m| m.get())),
        (
            Some(hetsched_server::config::WorkflowBalancer::Pcddb),
            Some(4)
        )
    );
    // A misspelt balancer once ran every workflow under `centralised` without a word.
    for (text, line, words) in [
        (
            "[workflow]\nbalancer = \"pcdb\"\n",
            "s.toml:2",
            ["pcdb", "pcddb"],
        ),
        (
            "[workflow]\nlt = 2\nmt = 0\n",
            "s.toml:3",
            ["mt", "nonzero"],
        ),
    ] {
        let e = ServerConfig::parse("s.toml", text)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            e.contains(line) && words.iter().all(|w| e.contains(w)),
            "{text:?}: {e}"
        );
    }
}

#[test]
fn workflow_task_pages_follow_the_cursor_and_list_every_instance_once() {
    let dir = scratch("pages");
    let mut s = open(&dir, WorkflowConfig::default());
    let first = s
        .submit(
            "a.toml",
            "[[task]]\nname = \"a\"\ninstances = \"1..=4\"\noutputs = [\"m\"]\ncost = \"1s\"\ncommand = \"true\"\n\
             [[task]]\nname = \"b\"\ninstances = \"1..=3\"\ninputs = [\"m\"]\ncost = \"1s\"\ncommand = \"true\"\n",
            "/",
        )
        .expect("submit")
        .job_id;
    let second = s
        .submit(
            "c.toml",
            "[[task]]\nname = \"c\"\ninstances = 5\ncost = \"1s\"\ncommand = \"true\"\n",
            "/",
        )
        .expect("submit")
        .job_id;
    // Pages of 3 from `cursor` until the listing says it ended: (job, task, index) in order.
    let walk = |s: &State, job: u64| {
        let (mut seen, mut cursor, mut pages) = (Vec::new(), 0, 0);
        loop {
            let page = s.list_tasks(job, cursor, 3).expect("page");
            assert!(page.tasks.len() <= 3);
            pages += 1;
            seen.extend(
                page.tasks
                    .iter()
                    .map(|t| (t.job_id, t.app.clone(), t.index)),
            );
            if page.next_cursor == 0 {
                return (seen, pages, page.total);
            }
            cursor = page.next_cursor;
        }
    };
    let of = |job: u64, app: &'static str, values: std::ops::RangeInclusive<u32>| {
        values.map(move |v| (job, app.to_string(), v))
    };
    let a: Vec<_> = of(first, "a", 1..=4).chain(of(first, "b", 1..=3)).collect();
    let c: Vec<_> = of(second, "c", 1..=5).collect();
    assert_eq!(walk(&s, first), (a.clone(), 3, 7), "one job");
    assert_eq!(walk(&s, second), (c.clone(), 2, 5), "the other");
    let every: Vec<_> = a.into_iter().chain(c).collect();
    let (listed, pages, total) = walk(&s, 0);
    assert_eq!((listed, pages, total), (every, 4, 12), "every job");
}

/// `[workflow] check_interval` outside 10 ms – 10 s is refused when the server starts, naming
/// the field.
#[test]
fn a_self_check_period_out_of_bounds_is_refused() {
    for bad in ["0s", "5ms", "1min"] {
        let dir = scratch("check-interval");
        let config = ServerConfig {
            data_dir: dir.to_path_buf(),
            workflow: Some(WorkflowConfig {
                check_interval: Some(bad.parse().expect("duration")),
                ..Default::default()
            }),
            ..Default::default()
        };
        let err = match State::open(&config, Store::open(&dir.join("state.db")).expect("store")) {
            Ok(_) => panic!("check_interval = {bad} must be refused"),
            Err(e) => e.to_string(),
        };
        assert!(err.contains("workflow.check_interval"), "{bad}: {err}");
    }
}

#[test]
fn a_produced_input_wakes_the_idle_node_whose_placed_consumer_waits_for_it() {
    // Centralised, three one-core nodes. The seed runs on one; its node dies with the output
    // while consumers are placed on the others (running, or queued behind a running one). The
    // seed runs again where a consumer waits; when it succeeds there, every other node holding
    // a placed consumer is woken — an idle agent would otherwise look at its next idle beat, a
    // minute away (seen under load in the CLI's killed-agent test).
    let dir = scratch("wake-placed");
    let mut s = open(&dir, WorkflowConfig::default());
    let nodes: Vec<u32> = ["n0", "n1", "n2"]
        .iter()
        .map(|n| common::register(&mut s, n, 1))
        .collect();
    let mut agents = Agents::default();
    let text = FAN_OUT
        .replace("balancer = \"pcddb\"", "balancer = \"centralised\"")
        .replace("1..=20", "1..=6");
    s.submit("fan.toml", &text, "/").expect("submit");
    for _ in 0..3 {
        agents.round(&mut s, &nodes);
    }
    let (seed_node, _, _) = agents.assigned[0];
    agents.finish_all(seed_node, true);
    for _ in 0..3 {
        agents.round(&mut s, &nodes);
    }
    // The seed's node goes silent and is declared dead: its output is lost.
    std::thread::sleep(crate::common::SILENCE);
    let live: Vec<u32> = nodes.iter().copied().filter(|&n| n != seed_node).collect();
    for &n in &live {
        agents.beat(&mut s, n);
    }
    s.check_dead(crate::common::DEAD_TIMEOUT)
        .expect("dead check");
    agents.running.remove(&seed_node);
    for &n in &live {
        agents.beat(&mut s, n);
    }
    // The running consumers end; the seed runs again on a node where consumers wait.
    let before = agents.assigned.len();
    for &n in &live {
        agents.finish_all(n, true);
        agents.beat(&mut s, n);
    }
    let rerun: Vec<(u32, u32, u32)> = agents.assigned[before..].to_vec();
    assert_eq!(rerun.len(), 1, "only the seed runs: {agents:?}");
    let (seed_again, instance, attempt) = rerun[0];
    assert_eq!((instance, attempt), (0, 2), "the seed, again");
    let idle = live
        .iter()
        .copied()
        .find(|&n| n != seed_again)
        .expect("another live node");
    assert!(
        !agents.running.contains_key(&idle) || agents.running[&idle].is_empty(),
        "the other node is idle, its placed consumers waiting for the seed"
    );
    // Its agent waits for work (`AwaitWork`): the seed's success must wake it.
    let mut woken = s.await_work(idle, common::IDENTITY).expect("its wake-ups");
    woken.borrow_and_update();
    agents.finish_all(seed_again, true);
    agents.beat(&mut s, seed_again);
    assert!(
        woken.has_changed().unwrap_or(false),
        "the idle node holding placed consumers is woken when their input is produced"
    );
    let before = agents.assigned.len();
    agents.beat(&mut s, idle);
    assert!(
        agents.assigned[before..].iter().any(|&(n, _, _)| n == idle),
        "and, beating, it starts them: {agents:?}"
    );
}

/// A restarted server knows a node's address only from its next heartbeat (its nodes are
/// restored alive before that). A consumer whose producer's node has not beaten yet waits for
/// that beat, and the beat wakes the consumer's node: it is not sent without an address, which
/// made its fetch fail and the finished producers run again (a reviewer's `kill -9` of the
/// server, the producers' agent slow to come back).
#[test]
fn after_a_restart_a_consumer_waits_for_its_producers_node_to_beat_and_nothing_runs_twice() {
    let dir = scratch("restart-address");
    let wf = r#"
balancer = "centralised"
[[task]]
name = "gen"
instances = "1..=2"
outputs = ["x"]
requires = ["pa"]
command = "echo {index} > {output:x}"
[[task]]
name = "use"
instances = "1..=2"
inputs = ["x"]
requires = ["pb"]
command = "cat {input:x}"
"#;
    let (a, b, job) = {
        let mut s = open(&dir, WorkflowConfig::default());
        let a = common::register_with(&mut s, "a", 2, &["pa"]);
        let b = common::register_with(&mut s, "b", 2, &["pb"]);
        let job = s.submit("wf.toml", wf, "/").expect("submit").job_id;
        let mut agents = Agents {
            task_base: agents_base(&s, job),
            ..Agents::default()
        };
        agents.beat(&mut s, a);
        assert_eq!(agents.assigned.len(), 2, "both gen instances run on a");
        agents.finish_all(a, true);
        agents.beat(&mut s, a);
        (a, b, job)
    };
    // The server restarts; b beats first.
    let mut s = open(&dir, WorkflowConfig::default());
    let mut agents = Agents {
        task_base: agents_base(&s, job),
        ..Agents::default()
    };
    let mut woken = s.await_work(b, common::IDENTITY).expect("b's wake-ups");
    woken.borrow_and_update();
    agents.beat(&mut s, b);
    assert!(
        agents.assigned.is_empty(),
        "no consumer before its producers' node is heard: {:?}",
        agents.assigned
    );
    agents.beat(&mut s, a);
    assert!(
        woken.has_changed().unwrap_or(false),
        "a's first beat wakes b, whose consumers wait for it"
    );
    agents.beat(&mut s, b);
    let ran: Vec<(u32, u32, u32)> = agents.assigned.clone();
    assert_eq!(ran.len(), 2, "both use instances, and only they: {ran:?}");
    assert!(
        ran.iter().all(|&(n, _, attempt)| n == b && attempt == 1),
        "{ran:?}"
    );
    for (_, inputs) in agents.inputs.iter() {
        assert!(inputs.iter().all(|(node, _)| *node == a), "{inputs:?}");
    }
    agents.finish_all(b, true);
    agents.beat(&mut s, b);
    let tasks = s.tasks(job).expect("tasks").tasks;
    assert_eq!(tasks.len(), 4);
    assert!(
        tasks
            .iter()
            .all(|t| t.state == "succeeded" && t.attempt == 1),
        "every instance ran once: {tasks:?}"
    );
}

/// Six `gen` instances, each read by its `use` instance, all of whose outputs one `sum` reads.
const CHAIN: &str = r#"
balancer = "pcddb"

[[task]]
name = "gen"
instances = "1..=6"
cost = "1s"
outputs = ["m"]
command = "echo {index} > {output:m}"

[[task]]
name = "use"
instances = "1..=6"
cost = "1s"
inputs = ["m"]
outputs = ["o"]
command = "cat {input:m} > {output:o}"

[[task]]
name = "sum"
instances = 1
cost = "1s"
inputs = ["o"]
command = "cat {input:o}"
"#;

/// A server with one dual-core node `n0` running [`CHAIN`] under pcddb, once the node runs
/// its first two instances (gen[1] and gen[2]; it holds all six `gen`).
fn chain_started(dir: &Path) -> (State, u32, Agents, u64) {
    let mut s = open(dir, WorkflowConfig::default());
    let n = common::register(&mut s, "n0", 2);
    let mut agents = Agents::default();
    agents.beat(&mut s, n);
    let job = s.submit("chain.toml", CHAIN, "/").expect("submit").job_id;
    for _ in 0..10 {
        if agents.assigned.len() >= 2 {
            break;
        }
        agents.round(&mut s, &[n]);
    }
    (s, n, agents, job)
}

/// Every instance of `job` as listed: (task, index, state, message, reason).
type Listing = Vec<(String, u32, String, String, String)>;

fn listing(s: &State, job: u64) -> Listing {
    s.tasks(job)
        .expect("tasks")
        .tasks
        .into_iter()
        .map(|t| (t.app, t.index, t.state, t.message, t.reason))
        .collect()
}

/// The reason of `app[i]` in a listing.
fn reason_of<'a>(l: &'a Listing, app: &str, i: u32) -> &'a str {
    l.iter()
        .find(|t| t.0 == app && t.1 == i)
        .map(|t| t.4.as_str())
        .expect("listed")
}

/// The state and message of `app[i]` in a listing.
fn of(l: &Listing, app: &str, i: u32) -> (String, String) {
    l.iter()
        .find(|t| t.0 == app && t.1 == i)
        .map(|t| (t.2.clone(), t.3.clone()))
        .expect("listed")
}

#[test]
fn cancelling_workflow_instances_kills_or_drops_them_and_skips_their_dependants_only() {
    // One dual-core node takes all six `gen` instances (LT 4, MT 20): two run, four wait on
    // the node. `cancel --app gen --tasks 2,5` kills the running gen[2] and drops the waiting
    // gen[5] from the node's machine; use[2], use[5] and sum are not run; the rest runs. The
    // listing survives a restart.
    let dir = scratch("cancel-tasks");
    let (mut s, n, mut agents, job) = chain_started(&dir);
    assert_eq!(
        agents.assigned,
        vec![(n, 0, 1), (n, 1, 1)],
        "gen[1] and gen[2] run"
    );
    assert_eq!(agents.machines[&n].held(), 6, "the node took all six");

    // Refusals name what is wrong and change nothing.
    let err = |r: Result<pb::CancelReply, _>| format!("{}", r.expect_err("refused"));
    assert!(err(s.cancel_tasks(job, "nope", "1")).contains("has no task `nope`"));
    assert!(err(s.cancel_tasks(job, "gen", "2,9")).contains("no task with index 9 in task `gen`"));

    let reply = s.cancel_tasks(job, "gen", "2,5").expect("cancel");
    assert_eq!(reply.cancelled, 2);
    let listed = |s: &State| listing(s, job);
    let before = listed(&s);
    assert_eq!(
        of(&before, "gen", 2),
        ("cancelled".into(), "cancelled".into())
    );
    assert_eq!(
        of(&before, "gen", 5),
        ("cancelled".into(), "cancelled".into())
    );
    assert_eq!(
        of(&before, "use", 2),
        (
            "cancelled".into(),
            "not run: its producer gen[2] was cancelled".into()
        )
    );
    assert_eq!(of(&before, "use", 5).0, "cancelled");
    assert_eq!(of(&before, "sum", 1).0, "cancelled");
    // A user cancelled the producers; the rest was not run because of them.
    assert_eq!(
        [
            reason_of(&before, "gen", 2),
            reason_of(&before, "use", 2),
            reason_of(&before, "sum", 1),
            reason_of(&before, "gen", 1),
        ],
        ["cancelled", "dependency_failed", "dependency_failed", ""]
    );
    // Two levels down, the message still names where it began.
    let why = of(&before, "sum", 1).1;
    assert!(
        why.starts_with("not run: its producer use[")
            && why.contains("] was not run (gen[")
            && why.ends_with("] was cancelled)"),
        "{why}"
    );
    assert_eq!(of(&before, "gen", 1).0, "running");
    assert_eq!(of(&before, "use", 1).0, "waiting");

    // The node's next heartbeat kills gen[2] and drops gen[5] from its machine.
    agents.beat(&mut s, n);
    assert_eq!(agents.killed, vec![(n, 1)]);
    assert_eq!(agents.dropped, vec![(n, 4)]);
    assert_eq!(
        agents.machines[&n].held(),
        4,
        "gen[1], gen[3], gen[4], gen[6]"
    );

    // The rest runs to the end; nothing cancelled ever starts.
    for _ in 0..40 {
        agents.finish_all(n, true);
        agents.round(&mut s, &[n]);
    }
    let ran: Vec<u32> = agents.assigned.iter().map(|a| a.1).collect();
    for never in [4, 7, 10, 12] {
        assert!(!ran.contains(&never), "instance {never} ran: {ran:?}");
    }
    let after = listed(&s);
    assert_eq!(
        after.iter().filter(|t| t.2 == "succeeded").count(),
        8,
        "gen and use 1, 3, 4, 6: {after:?}"
    );
    let info = s.get_job(job).expect("job");
    assert_eq!(info.state, "cancelled");
    assert_eq!((info.counts.succeeded, info.counts.cancelled), (8, 5));
    assert_eq!(s.cancel_tasks(job, "gen", "1").expect("ended").cancelled, 0);
    assert_eq!(
        s.resubmit_failed(job).expect("nothing failed").tasks,
        0,
        "cancelled instances are not resubmitted"
    );

    // A restarted server lists the same.
    drop(s);
    let s = open(&dir, WorkflowConfig::default());
    assert_eq!(listed(&s), after);
    assert_eq!(s.get_job(job).expect("job").state, "cancelled");
}

#[test]
fn a_workflow_cancelled_as_a_whole_reads_cancelled_after_a_restart() {
    // gen[1] and gen[2] run and succeed, the next ones start; the whole workflow is cancelled:
    // every instance that had not ended reads `cancelled`, before and after a restart (the
    // cancel writes the job's flag, not a row per instance), and the succeeded ones keep theirs.
    let dir = scratch("cancel-whole");
    let (mut s, n, mut agents, job) = chain_started(&dir);
    agents.finish_all(n, true);
    agents.beat(&mut s, n);
    let ok = |l: &Listing| l.iter().filter(|t| t.2 == "succeeded").count();
    assert_eq!(ok(&listing(&s, job)), 2, "gen[1] and gen[2] succeeded");
    assert!(
        listing(&s, job).iter().any(|t| t.2 == "running"),
        "others run"
    );
    let cancelled = s.cancel(job).expect("cancel");
    let before = listing(&s, job);
    assert_eq!(cancelled.cancelled as usize, before.len() - 2);
    for t in &before {
        let want = if t.2 == "succeeded" {
            ("succeeded", "", "")
        } else {
            ("cancelled", "cancelled", "cancelled")
        };
        assert_eq!((t.2.as_str(), t.3.as_str(), t.4.as_str()), want, "{t:?}");
    }
    // Every instance the cancel ended has its end, the cancel's time, as a batch task and
    // `cancel --tasks` give theirs: one that ran shows how long. (Before, the running ones kept
    // `started_ns` with no `finished_ns`, listed as still running for ever.)
    let ends = |s: &State| -> Vec<(u64, u64, u64, String)> {
        s.tasks(job)
            .expect("tasks")
            .tasks
            .into_iter()
            .map(|t| (t.id, t.started_ns, t.finished_ns, t.state))
            .collect()
    };
    let cancel_time = s.get_job(job).expect("job").finished_ns;
    assert!(cancel_time > 0);
    let ended = ends(&s);
    let ran = ended
        .iter()
        .filter(|t| t.3 == "cancelled" && t.1 > 0)
        .count();
    assert!(ran > 0, "some cancelled instances had started: {ended:?}");
    for t in &ended {
        assert!(t.2 > 0, "every instance has its end: {t:?}");
        if t.3 == "cancelled" {
            assert_eq!(t.2, cancel_time, "{t:?}");
        }
    }
    drop(s);
    let s = open(&dir, WorkflowConfig::default());
    assert_eq!(listing(&s, job), before);
    assert_eq!(ends(&s), ended, "the same ends after a restart");
    let info = s.get_job(job).expect("job");
    assert_eq!(
        (info.state.as_str(), info.counts.succeeded),
        ("cancelled", 2)
    );
}

/// `hetsched resubmit JOB --failed` on a workflow: the failed instances and those not run
/// because of them run again (after a restart too, when the graph has them withdrawn); the
/// succeeded ones keep their outputs and do not run again. A workflow cancelled as a whole is
/// refused.
#[test]
fn resubmitting_a_failed_workflow_runs_its_failed_and_skipped_instances_only() {
    let dir = scratch("resubmit");
    let (mut s, n, mut agents, job) = chain_started(&dir);
    assert_eq!(agents.assigned, vec![(n, 0, 1), (n, 1, 1)]);
    // gen[1] and gen[2] fail (no retries): use[1], use[2] and sum are not run; the rest runs.
    agents.finish_all(n, false);
    for _ in 0..40 {
        agents.round(&mut s, &[n]);
        agents.finish_all(n, true);
    }
    let listed = |s: &State| listing(s, job);
    assert_eq!(s.get_job(job).expect("job").state, "failed");
    let failed = listed(&s);
    assert_eq!(of(&failed, "use", 2).0, "failed");
    // (Its agent did not say how gen[1] ended: exit code 1, so it `exited`.)
    assert_eq!(
        [
            reason_of(&failed, "gen", 1),
            reason_of(&failed, "use", 1),
            reason_of(&failed, "sum", 1),
            reason_of(&failed, "use", 3),
        ],
        ["exited", "dependency_failed", "dependency_failed", ""]
    );
    assert_eq!(failed.iter().filter(|t| t.2 == "succeeded").count(), 8);
    let ran_before = agents.assigned.len();
    assert_eq!(ran_before, 10, "gen 1–6 and use 3–6");
    // A cancel of the ended workflow cancels nothing: it can still be resubmitted.
    assert_eq!(s.cancel(job).expect("cancel").cancelled, 0);
    assert_eq!(s.get_job(job).expect("job").state, "failed");

    // A restarted server has them withdrawn from its graph; resubmit brings them back.
    drop(s);
    let mut s = open(&dir, WorkflowConfig::default());
    assert_eq!(s.resubmit_failed(job).expect("resubmit").tasks, 5);
    let again = listed(&s);
    assert_eq!(
        of(&again, "gen", 1),
        ("ready".into(), "resubmitted after attempt 1 failed".into())
    );
    assert_eq!(
        of(&again, "use", 1),
        (
            "waiting".into(),
            "resubmitted: waits for its producers again".into()
        )
    );
    assert_eq!(of(&again, "sum", 1).0, "waiting");
    assert_eq!(
        of(&again, "use", 3),
        of(&failed, "use", 3),
        "succeeded stays"
    );
    // Resubmitted, each keeps its reason (read back after the restart) until it runs.
    assert_eq!(
        [reason_of(&again, "gen", 1), reason_of(&again, "use", 1)],
        ["exited", "dependency_failed"]
    );
    assert_eq!(s.get_job(job).expect("job").state, "running");

    for _ in 0..40 {
        agents.round(&mut s, &[n]);
        agents.finish_all(n, true);
    }
    let info = s.get_job(job).expect("job");
    assert_eq!(info.state, "completed", "{:?}", listed(&s));
    assert_eq!(info.counts.succeeded, 13);
    assert!(
        listed(&s).iter().all(|t| t.4.is_empty()),
        "succeeded: no reason"
    );
    // Only the five ran: gen[1] and gen[2] as their second attempt.
    let rerun: Vec<(u32, u32)> = agents.assigned[ran_before..]
        .iter()
        .map(|a| (a.1, a.2))
        .collect();
    assert_eq!(rerun.len(), 5, "{rerun:?}");
    for (i, attempt) in [(0, 2), (1, 2), (6, 1), (7, 1), (12, 1)] {
        assert!(
            rerun.contains(&(i, attempt)),
            "instance {i} attempt {attempt}: {rerun:?}"
        );
    }
    assert_eq!(s.resubmit_failed(job).expect("nothing failed").tasks, 0);
    // The sum read all six: every producer's output was where the server said it was.
    assert_eq!(
        agents.inputs[&agents_base_of(&agents, 12)].len(),
        6,
        "sum's inputs"
    );

    // Cancelled as a whole: refused, as a batch job is.
    let other = s.submit("chain.toml", CHAIN, "/").expect("submit").job_id;
    agents.round(&mut s, &[n]);
    agents.round(&mut s, &[n]);
    agents.finish_all(n, false);
    agents.round(&mut s, &[n]);
    s.cancel(other).expect("cancel");
    let refused = format!("{}", s.resubmit_failed(other).expect_err("cancelled"));
    assert!(refused.contains("was cancelled"), "{refused}");
    drop(s);
    let mut s = open(&dir, WorkflowConfig::default());
    let refused = format!("{}", s.resubmit_failed(other).expect_err("still cancelled"));
    assert!(refused.contains("was cancelled"), "{refused}");
}

/// `hetsched resubmit JOB --cancelled` on a workflow: the instances `cancel --tasks` cancelled and
/// those not run because of them run again (after a restart too, when the graph has them
/// withdrawn); one that also depends on a failed instance stays ended, now as failed, naming
/// it, until `--failed` brings that one back. Succeeded instances do not run again.
#[test]
fn resubmitting_cancelled_workflow_instances_runs_them_and_their_dependants_but_not_past_a_failure()
{
    let dir = scratch("resubmit-cancelled");
    let (mut s, n, mut agents, job) = chain_started(&dir);
    assert_eq!(
        agents.assigned,
        vec![(n, 0, 1), (n, 1, 1)],
        "gen[1] and gen[2] run"
    );
    // gen[2] is cancelled while it runs (use[2] and sum are not run); gen[1] and gen[3], which
    // takes the freed core, fail (no retries: use[1] and use[3] are not run); the rest succeeds.
    assert_eq!(
        s.cancel_tasks(job, "gen", "2").expect("cancel").cancelled,
        1
    );
    agents.beat(&mut s, n);
    agents.finish_all(n, false);
    for _ in 0..40 {
        agents.round(&mut s, &[n]);
        agents.finish_all(n, true);
    }
    let listed = |s: &State| listing(s, job);
    let ended = listed(&s);
    assert_eq!(of(&ended, "gen", 1).0, "failed");
    assert_eq!(of(&ended, "gen", 3).0, "failed");
    assert_eq!(of(&ended, "use", 1).0, "failed");
    assert_eq!(
        of(&ended, "gen", 2),
        ("cancelled".into(), "cancelled".into())
    );
    assert_eq!(of(&ended, "use", 2).0, "cancelled");
    assert_eq!(
        of(&ended, "sum", 1).0,
        "cancelled",
        "gen[2]'s cancel came first"
    );
    assert_eq!(
        ended.iter().filter(|t| t.2 == "succeeded").count(),
        6,
        "{ended:?}"
    );
    let ran_before = agents.assigned.len();

    // A restarted server has them withdrawn from its graph; `--cancelled` brings back gen[2]
    // and use[2]. The sum also needs use[1] and use[3], not run: it stays ended, now as failed.
    drop(s);
    let mut s = open(&dir, WorkflowConfig::default());
    let n2 = s
        .on_resubmit_ended(job, false, true)
        .expect("resubmit --cancelled");
    assert_eq!(n2, 2);
    let again = listed(&s);
    assert_eq!(
        of(&again, "gen", 2),
        (
            "ready".into(),
            "resubmitted after attempt 1 was cancelled".into()
        )
    );
    assert_eq!(
        of(&again, "use", 2),
        (
            "waiting".into(),
            "resubmitted: waits for its producers again".into()
        )
    );
    let (state, why) = of(&again, "sum", 1);
    assert_eq!(state, "failed");
    assert!(
        why.starts_with("not run: its producer use[")
            && why.contains("] was not run (gen[")
            && why.ends_with("] failed: exit code 1)"),
        "{why}"
    );
    assert_eq!(
        of(&again, "gen", 1).0,
        "failed",
        "--cancelled leaves the failed"
    );
    for _ in 0..40 {
        agents.round(&mut s, &[n]);
        agents.finish_all(n, true);
    }
    let rerun: Vec<(u32, u32)> = agents.assigned[ran_before..]
        .iter()
        .map(|a| (a.1, a.2))
        .collect();
    assert_eq!(
        rerun,
        vec![(1, 2), (7, 1)],
        "gen[2] as attempt 2, then use[2]"
    );
    assert_eq!(s.get_job(job).expect("job").state, "failed");
    assert_eq!(s.on_resubmit_ended(job, false, true).expect("none left"), 0);

    // `--failed` now runs gen[1], gen[3], use[1], use[3] and the sum: the workflow completes.
    assert_eq!(s.resubmit_failed(job).expect("resubmit --failed").tasks, 5);
    for _ in 0..40 {
        agents.round(&mut s, &[n]);
        agents.finish_all(n, true);
    }
    let info = s.get_job(job).expect("job");
    assert_eq!(info.state, "completed", "{:?}", listed(&s));
    assert_eq!(info.counts.succeeded, 13);
    assert_eq!(
        agents.inputs[&agents_base_of(&agents, 12)].len(),
        6,
        "the sum read all six"
    );
}

/// Task id of instance `i` of the workflow the agents run.
fn agents_base_of(a: &Agents, i: u32) -> u64 {
    a.task_base + u64::from(i)
}

/// A refused commit (a full disk) rolls memory back to the store: the workflows stored before it
/// are still there, with their instances, and run on once the disk has room. (Until this test,
/// the rollback rebuilt the workflow kind from a scratch store and every workflow vanished from
/// memory until the server restarted.)
#[test]
fn a_full_disk_rollback_keeps_the_stored_workflows() {
    let dir = scratch("rollback");
    let mut s = open(&dir, WorkflowConfig::default());
    let n = common::register(&mut s, "n", 2);
    let id = s
        .submit(
            "w.toml",
            "balancer = \"centralised\"\n[[task]]\nname = \"a\"\ninstances = 3\ncost = \"1s\"\ncommand = \"true\"\n",
            "/",
        )
        .expect("submit")
        .job_id;
    let before = s.tasks(id).expect("tasks").tasks.len();
    assert_eq!(before, 3);
    s.simulate_full_disk(true);
    // The node's beat dispatches an instance: its commit is refused.
    s.heartbeat(heartbeat_request(n, &[], &[]))
        .expect_err("the store refuses the dispatch's commit");
    assert!(s.is_paused(), "rolled back and paused");
    assert_eq!(
        s.tasks(id).map(|t| t.tasks.len()).ok(),
        Some(3),
        "the stored workflow is still in memory"
    );
    s.simulate_full_disk(false);
    std::thread::sleep(hetsched_server::state::PROBE_INTERVAL);
    // The disk has room: its instances run.
    let mut ran = 0;
    let mut running: Vec<(u64, u32)> = Vec::new();
    for _ in 0..10 {
        let done: Vec<(u64, u32, bool)> = running.iter().map(|&(t, a)| (t, a, true)).collect();
        let r = s.heartbeat(heartbeat_request(n, &[], &done)).expect("beat");
        ran += r.assignments.len();
        running = r
            .assignments
            .iter()
            .map(|a| (a.task_id, a.attempt))
            .collect();
    }
    assert_eq!(ran, 3);
    assert_eq!(s.job(id).expect("job").state, "completed");
}

/// A cancelled workflow is over for its waiters (`job_over`: `wait`) only once its agent says
/// the stopped instance's process ended — its SIGTERM handler may still clean up — as a batch
/// job is. A restart keeps it stopping, and the result the agent sends again then ends it.
#[test]
fn a_cancelled_workflow_is_over_once_its_stopped_instances_process_ended_across_a_restart() {
    let dir = scratch("stopping");
    let mut s = open(&dir, WorkflowConfig::default());
    let n = common::register(&mut s, "n", 1);
    let id = s
        .submit(
            "w.toml",
            "balancer = \"centralised\"\n[[task]]\nname = \"a\"\ninstances = 3\ncost = \"1s\"\ncommand = \"true\"\n",
            "/",
        )
        .expect("submit")
        .job_id;
    let r = s.heartbeat(heartbeat_request(n, &[], &[])).expect("beat");
    let run: Vec<(u64, u32)> = r
        .assignments
        .iter()
        .map(|a| (a.task_id, a.attempt))
        .collect();
    assert_eq!(run.len(), 1);
    s.cancel(id).expect("cancel");
    let j = s.job(id).expect("job");
    assert_eq!((j.state.as_str(), j.stopping), ("cancelled", 1));
    assert!(
        !s.job_over(id).expect("job"),
        "its instance's process still runs"
    );
    // Its agent still runs it: told to kill it; still stopping.
    let r = s.heartbeat(heartbeat_request(n, &run, &[])).expect("beat");
    assert_eq!(r.kill.len(), 1);
    assert_eq!(s.job(id).expect("job").stopping, 1);
    drop(s); // the server dies here
    let mut s = open(&dir, WorkflowConfig::default());
    assert_eq!(s.job(id).expect("job").stopping, 1);
    assert!(!s.job_over(id).expect("job"));
    // Its agent reconnects with the killed attempt's result.
    s.heartbeat(heartbeat_request(n, &[], &[(run[0].0, run[0].1, false)]))
        .expect("beat");
    let j = s.job(id).expect("job");
    assert_eq!((j.state.as_str(), j.stopping), ("cancelled", 0));
    assert!(s.job_over(id).expect("job"));
}

/// One step of the pcddb day below.
#[derive(Clone, Debug)]
enum PcddbStep {
    /// Every agent checks itself and heartbeats.
    Round,
    /// Everything agent `0` runs ends, succeeded or failed (`1`).
    Finish(usize, bool),
    /// The server restarts (the agents and their balancing machines run on).
    Restart,
    /// `cancel JOB --app tT --tasks V`: one instance (a refusal if it does not exist).
    Cancel(usize, u32),
    /// `resubmit JOB --failed`.
    Resubmit,
    /// `resubmit JOB --cancelled`.
    ResubmitCancelled,
    /// Every agent is declared dead (silent past a zero timeout: the server stalled, or the
    /// agents did) and comes back at its next heartbeat, its balancing machine as it was.
    AllDeclaredDead,
}

fn pcddb_step() -> impl proptest::strategy::Strategy<Value = PcddbStep> {
    use proptest::prelude::*;
    prop_oneof![
        6 => Just(PcddbStep::Round),
        3 => (0..3usize, any::<bool>()).prop_map(|(n, ok)| PcddbStep::Finish(n, ok)),
        1 => Just(PcddbStep::Restart),
        1 => (0..4usize, 1..=5u32).prop_map(|(t, v)| PcddbStep::Cancel(t, v)),
        1 => Just(PcddbStep::Resubmit),
        1 => Just(PcddbStep::ResubmitCancelled),
        1 => Just(PcddbStep::AllDeclaredDead),
    ]
}

/// A random workflow of two to four tasks of one to five instances; each task after the first
/// reads the output of an earlier one (instance by instance when their ranges match). A task
/// has 0, 1 or 50 retries: with few, instances fail for good (and `resubmit` runs them again).
fn random_workflow() -> impl proptest::strategy::Strategy<Value = String> {
    use proptest::prelude::*;
    let retries = prop_oneof![Just(0u32), Just(1), Just(50)];
    prop::collection::vec((1u32..=5, any::<prop::sample::Index>(), retries), 2..=4).prop_map(|tasks| {
        let mut text = String::from("balancer = \"pcddb\"\n");
        for (i, (n, producer, retries)) in tasks.iter().enumerate() {
            text += &format!(
                "[[task]]\nname = \"t{i}\"\ninstances = \"1..={n}\"\ncost = \"1s\"\nretries = {retries}\n\
                 outputs = [\"o{i}\"]\ncommand = \"true\"\n"
            );
            if i > 0 {
                text += &format!("inputs = [\"o{}\"]\n", producer.index(i));
            }
        }
        text
    })
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig { cases: 32, ..Default::default() })]

    /// Under pcddb between real balancing machines, with failed attempts, server restarts,
    /// agents declared dead that come back, cancels of single instances and resubmits of
    /// failed or cancelled ones at any point: no
    /// instance runs
    /// twice at once, none starts once cancelled, and — resubmitting whatever failed for good
    /// — the workflow ends with every instance succeeded or cancelled, all succeeded unless
    /// some were cancelled.
    #[test]
    fn a_pcddb_workflow_completes_once_whatever_fails_or_restarts(
        workflow in random_workflow(),
        steps in proptest::collection::vec(pcddb_step(), 1..40),
    ) {
        use proptest::prelude::*;
        let dir = scratch(&format!("pcddb-day-{}", workflow.len()));
        let mut s = open(&dir, WorkflowConfig::default());
        let ids: Vec<u32> = (0..3).map(|i| common::register(&mut s, &format!("n{i}"), 2)).collect();
        let mut agents = Agents { rtt: pairs(&ids), ..Agents::default() };
        for &n in &ids {
            agents.beat(&mut s, n);
        }
        let id = s.submit("wf.toml", &workflow, "/").expect("a valid workflow").job_id;
        let graph = |s: &State| -> Vec<(u32, String)> {
            s.tasks(id).expect("tasks").tasks.iter().map(|t| (t.index, t.state.clone())).collect()
        };
        let cancelled_now = |s: &State| -> std::collections::HashSet<u32> {
            let base = agents_base(s, id);
            s.tasks(id)
                .expect("tasks")
                .tasks
                .iter()
                .filter(|t| t.state == "cancelled")
                .map(|t| (t.id - base) as u32)
                .collect()
        };
        let mut cancelled = std::collections::HashSet::new();
        for step in steps {
            // No instance ever runs twice at once (two attempts, or one on two nodes).
            let mut running: Vec<u64> =
                agents.running.values().flatten().map(|&(t, _)| t).collect();
            running.sort_unstable();
            let n = running.len();
            running.dedup();
            prop_assert_eq!(running.len(), n, "an instance runs twice at once");
            match step {
                PcddbStep::Round => agents.round(&mut s, &ids),
                PcddbStep::Finish(n, ok) => agents.finish_all(ids[n], ok),
                PcddbStep::Restart => {
                    let before = graph(&s);
                    drop(s);
                    s = open(&dir, WorkflowConfig::default());
                    prop_assert_eq!(graph(&s), before);
                }
                PcddbStep::Cancel(t, v) => {
                    let _ = s.cancel_tasks(id, &format!("t{t}"), &v.to_string());
                    cancelled = cancelled_now(&s);
                }
                PcddbStep::Resubmit => {
                    let failed = s
                        .tasks(id)
                        .expect("tasks")
                        .tasks
                        .iter()
                        .filter(|t| t.state == "failed")
                        .count() as u64;
                    let n = s.resubmit_failed(id).expect("a workflow is resubmitted").tasks;
                    cancelled = cancelled_now(&s);
                    // Each failed instance runs again, or reads cancelled (downstream of one).
                    prop_assert!(n <= failed);
                    prop_assert!(!s.tasks(id).expect("tasks").tasks.iter().any(|t| t.state == "failed"));
                }
                PcddbStep::AllDeclaredDead => {
                    s.check_dead(Duration::ZERO).expect("nodes declared dead");
                }
                PcddbStep::ResubmitCancelled => {
                    let before = cancelled_now(&s).len() as u64;
                    let n = s.on_resubmit_ended(id, false, true).expect("a workflow is resubmitted");
                    cancelled = cancelled_now(&s);
                    // Each cancelled instance runs again, or reads failed (downstream of one).
                    prop_assert!(n <= before);
                    prop_assert!(cancelled.is_empty(), "still cancelled: {:?}", cancelled);
                }
            }
            // A machine counts exactly the instances it was told to run and has not seen end or
            // dropped (an instance re-sent to the node that took it is counted once).
            for (&n, m) in &agents.machines {
                let tracked = agents.cores.keys().filter(|&&(node, _)| node == n).count();
                prop_assert_eq!(m.held() as usize, tracked, "node {} miscounts what it holds", n);
            }
            // Nothing cancelled is handed out afterwards.
            let from = agents.assigned.len().min(agents.checked);
            for &(_, i, _) in &agents.assigned[from..] {
                prop_assert!(!cancelled.contains(&i), "cancelled instance {} started", i);
            }
            agents.checked = agents.assigned.len();
        }
        for _ in 0..200 {
            let state = s.job(id).expect("job").state;
            // Some failed for good (no retries left): run them again.
            if ["failed", "cancelled"].contains(&state.as_str())
                && s.resubmit_failed(id).expect("resubmit").tasks > 0
            {
                cancelled = cancelled_now(&s);
                continue;
            }
            if !["pending", "running"].contains(&state.as_str()) {
                break;
            }
            agents.round(&mut s, &ids);
            for &n in &ids {
                agents.finish_all(n, true);
            }
        }
        let want = if cancelled.is_empty() { "completed" } else { "cancelled" };
        prop_assert_eq!(s.job(id).expect("job").state, want, "{}", workflow);
        for t in s.tasks(id).expect("tasks").tasks {
            prop_assert!(
                t.state == "succeeded"
                    || (t.state == "cancelled"
                        && (t.message == "cancelled" || t.message.starts_with("not run: "))),
                "{:?}", t
            );
        }

    }
}

/// A restart puts every running instance back on its node as it was, whatever else holds the
/// node: one sent beyond the node's free cores (prefetched, queued by its agent) too, so its
/// owner's usage still counts it, and each on the GPU it was given, so no other work is given
/// that GPU.
#[test]
fn a_restart_books_each_running_instance_as_it_was_queued_ones_and_devices_included() {
    let d = scratch("restore-booked");
    let open = |d: &Path| {
        let config = ServerConfig {
            data_dir: d.to_path_buf(),
            prefetch: hetsched_server::state::prefetch::Setting::Cores(1),
            ..Default::default()
        };
        State::open(&config, Store::open(&d.join("state.db")).expect("store")).expect("state")
    };
    let mut s = open(&d);
    let n = common::register_with_gpus(&mut s, "n", 1, 2);
    s.on_add_user("alice", false).expect("alice");
    let job = s
        .on_submit_as(
            hetsched_server::state::types::Submission {
                origin: "wf.toml".into(),
                text: "balancer = \"centralised\"\n[[task]]\nname = \"g\"\ninstances = 2\n\
                       gpus = 1\ncommand = \"true\"\n"
                    .into(),
                workdir: "/".into(),
                ..Default::default()
            },
            "alice",
        )
        .expect("submit")
        .job_id;
    let r = common::beat(&mut s, n, &[], &[]);
    let sent: Vec<(bool, Vec<u32>)> = r
        .assignments
        .iter()
        .map(|a| (a.prefetched, a.devices.clone()))
        .collect();
    assert_eq!(
        sent,
        [(false, vec![0]), (true, vec![1])],
        "one starts, one is queued beyond the node's one core"
    );
    let held = s.user_held("alice");
    assert_eq!((held.cores, held.gpus), (2, 2));
    let shown = |s: &State| -> Vec<(String, Vec<u32>)> {
        s.tasks(job)
            .expect("instances")
            .tasks
            .into_iter()
            .map(|t| (t.state, t.devices))
            .collect()
    };
    let before = shown(&s);
    assert_eq!(
        before,
        [("running".into(), vec![0]), ("running".into(), vec![1])]
    );
    drop(s);
    let mut s = open(&d);
    assert_eq!(shown(&s), before, "each keeps its devices");
    let held = s.user_held("alice");
    assert_eq!((held.cores, held.gpus), (2, 2), "both still count");
    assert_eq!(s.list_nodes()[0].free_gpus, 0);
    // A batch GPU task waits: nothing is free on the node.
    s.submit(
        "gpu.toml",
        "[[application]]\nname = \"b\"\ntasks = 1\n[application.gpu]\ncommand = \"true\"\n",
        "/",
    )
    .expect("batch");
    let running: Vec<(u64, u32)> = r
        .assignments
        .iter()
        .map(|a| (a.task_id, a.attempt))
        .collect();
    let r = common::beat(&mut s, n, &running, &[]);
    assert!(r.assignments.is_empty(), "{:?}", r.assignments);
    // The instances end: the node is whole again.
    let done: Vec<(u64, u32, bool)> = running.iter().map(|&(t, a)| (t, a, true)).collect();
    common::beat(&mut s, n, &[], &done);
    let node = &s.list_nodes()[0];
    assert_eq!(
        (node.free_gpus, s.user_held("alice").cores),
        (1, 0),
        "the batch task took one"
    );
}

/// Accelerator sharing (spec 01): an ANode `anode` (one device, announcing its service) and the
/// NNodes `n1` (rack A, bound to it) and `nb` (rack B, no ANode: unbound), both with attribute
/// `side`, which the ANode lacks; the NNodes' agents are `Agents`.
fn anode_and_nnodes(s: &mut State, agents: &mut Agents) -> (u32, u32, u32) {
    let anode = common::register_with_gpus(s, "anode", 4, 1);
    let n1 = common::register_with(s, "n1", 4, &["side"]);
    let nb = common::register_with(s, "nb", 4, &["side"]);
    anode_beats(s, anode, "A");
    agents.racks.insert(n1, "A".into());
    agents.racks.insert(nb, "B".into());
    agents.beat(s, n1);
    agents.beat(s, nb);
    (anode, n1, nb)
}

/// ANode `anode` of rack `rack` beats: its accelerator service (port 7000, on the loopback
/// address its calls come from) has room. Returns the offload key its reply carries.
fn anode_beats(s: &mut State, anode: u32, rack: &str) -> Vec<u8> {
    s.note_peer(anode, Some(std::net::Ipv4Addr::LOCALHOST.into()));
    let mut req = heartbeat_request(anode, &[], &[]);
    req.rack = rack.into();
    req.accel_port = 7000;
    req.accel = Some(pb::AccelState {
        process_capacity: 16,
        ..Default::default()
    });
    s.heartbeat(req).expect("heartbeat").offload_key
}

/// The digest an offload ticket of instance `a` (of `spec`) covers: what the NNode's agent ships,
/// its command and files rewritten for the ANode by the core's rule (`dataflow::prepare`).
fn shipped_runs(spec: &pb::TaskSpec, a: &pb::Assignment) -> [u8; 32] {
    use hetsched_core::input::workflow_runtime::offloaded_instance;
    let names: Vec<&str> = a.inputs.iter().map(|i| i.name.as_str()).collect();
    let x = offloaded_instance(&spec.argv, a.index, a.process, &names, &a.outputs);
    let mut s = spec.clone();
    (s.argv, s.inputs, s.outputs) = (x.argv, x.inputs, x.outputs);
    if let Some(p) = x.process {
        s.env.insert("HETSCHED_PROCESS".into(), p);
    }
    hetsched_proto::ticket::offload_digest(&s, a.index, a.entry.as_deref(), a.devices.len() as u32)
}

/// A workflow's GPU task (`gpus = 1`) that only the NNodes may run (`requires = ["side"]`,
/// and `requires`).
fn gpu_on_nnodes(balancer: &str, requires: &str) -> String {
    format!(
        "balancer = \"{balancer}\"\n[[task]]\nname = \"g\"\ninstances = 3\ngpus = 1\n\
         requires = [\"side\"{requires}]\noutputs = [\"o\"]\ncommand = \"echo > {{output:o}}\"\n"
    )
}

/// Runs `gpu_on_nnodes` under `balancer`: every instance goes to the bound NNode `n1`, as an
/// offload to its ANode (the assignment names it, the listing says it ran there), and none to
/// the unbound `nb`, whose mask lacks the device the task asks for (found by a hands-on review:
/// a workflow's GPU task never matched an NNode, as the mask held the node's own devices).
/// `requires` adds requirements: `gpu`, which a bound NNode has, as for a batch job.
fn gpu_instances_go_to_the_bound_nnode(balancer: &str, requires: &str) {
    let dir = scratch(&format!("accel-{balancer}"));
    let mut s = open(&dir, WorkflowConfig::default());
    let mut agents = Agents::default();
    let (anode, n1, nb) = anode_and_nnodes(&mut s, &mut agents);
    let key = anode_beats(&mut s, anode, "A");
    let job = s
        .submit("gpu.toml", &gpu_on_nnodes(balancer, requires), "/")
        .expect("a bound NNode reaches a device")
        .job_id;
    let mut offloads = Vec::new();
    let mut specs = HashMap::new();
    for _ in 0..30 {
        for n in [n1, nb] {
            agents.self_check(n);
            let r = agents.beat(&mut s, n);
            for sp in &r.specs {
                specs.insert(sp.key, sp.clone());
            }
            for a in &r.assignments {
                assert_eq!(n, n1, "only the bound NNode takes a GPU instance: {a:?}");
                assert_eq!(a.devices, [0], "{a:?}");
                offloads.push((a.offload_anode.clone(), a.offload_address.clone()));
                // The admin's workflow: its instances run as the agent's own account, and the
                // ticket covers the command as the NNode ships it (paths relative to the
                // instance's directory), not the task's command with its placeholders.
                let spec = specs.get(&a.spec).expect("its spec");
                let offload = hetsched_proto::ticket::Offload {
                    task_id: a.task_id,
                    attempt: a.attempt,
                    run_as: "",
                    nnode: "n1",
                    anode: "anode",
                    runs: shipped_runs(spec, a),
                };
                assert!(
                    hetsched_proto::ticket::open_offload(&key, &offload, &a.offload_ticket)
                        .is_some(),
                    "each instance carries the ANode's ticket: {a:?}"
                );
                let unshipped = hetsched_proto::ticket::Offload {
                    runs: hetsched_proto::ticket::offload_digest(spec, a.index, None, 1),
                    ..offload
                };
                assert!(
                    hetsched_proto::ticket::open_offload(&key, &unshipped, &a.offload_ticket)
                        .is_none()
                );
            }
            agents.finish_all(n, true);
        }
        if s.job(job).expect("job").state == "completed" {
            break;
        }
    }
    assert_eq!(s.job(job).expect("job").state, "completed");
    assert_eq!(
        offloads,
        vec![("anode".to_string(), "http://127.0.0.1:7000".to_string()); 3],
        "each instance is offloaded to the ANode"
    );
    let listed: Vec<(String, String, String)> = s
        .tasks(job)
        .expect("instances")
        .tasks
        .into_iter()
        .map(|t| (t.node, t.executed_node, t.state))
        .collect();
    assert_eq!(
        listed,
        vec![
            (
                "n1".to_string(),
                "anode".to_string(),
                "succeeded".to_string()
            );
            3
        ]
    );
}

#[test]
fn a_centralised_workflows_gpu_instances_run_on_a_bound_nnode_offloaded_to_its_anode() {
    gpu_instances_go_to_the_bound_nnode("centralised", ", \"gpu\"");
}

#[test]
fn a_pcddb_workflows_gpu_instances_run_on_a_bound_nnode_offloaded_to_its_anode() {
    gpu_instances_go_to_the_bound_nnode("pcddb", "");
}

/// With no ANode bound to them, the NNodes reach no device: a GPU task only they may run is
/// refused at submission, as no live node could hold one instance (its `gpus`).
#[test]
fn a_workflows_gpu_task_that_only_unbound_nnodes_may_run_is_refused() {
    let dir = scratch("accel-unbound");
    let mut s = open(&dir, WorkflowConfig::default());
    let mut agents = Agents::default();
    let (anode, n1, nb) = anode_and_nnodes(&mut s, &mut agents);
    // The ANode is gone: `n1` is unbound too.
    std::thread::sleep(crate::common::SILENCE);
    agents.beat(&mut s, n1);
    agents.beat(&mut s, nb);
    s.check_dead(crate::common::DEAD_TIMEOUT).expect("check");
    assert!(
        !s.nodes(false)
            .nodes
            .iter()
            .any(|n| n.id == anode && n.alive)
    );
    let e = s
        .submit("gpu.toml", &gpu_on_nnodes("centralised", ""), "/")
        .expect_err("no live node reaches a device")
        .to_string();
    assert!(e.contains("task[0].gpus"), "{e}");
}

/// A user's workflow instance offloaded to an ANode carries a ticket naming the user's account
/// (what its spec runs as), which the ANode's key verifies; the admin's account does not pass.
#[test]
fn a_users_offloaded_instance_carries_a_ticket_for_the_users_account() {
    let dir = scratch("accel-ticket");
    let mut s = open(&dir, WorkflowConfig::default());
    let mut agents = Agents::default();
    let (anode, n1, _nb) = anode_and_nnodes(&mut s, &mut agents);
    let key = anode_beats(&mut s, anode, "A");
    s.on_add_user("alice", false).expect("alice");
    s.on_submit_as(
        hetsched_server::state::types::Submission {
            origin: "gpu.toml".into(),
            text: gpu_on_nnodes("centralised", ""),
            workdir: "/".into(),
            ..Default::default()
        },
        "alice",
    )
    .expect("submit");
    let r = agents.beat(&mut s, n1);
    let a = r.assignments.first().expect("an instance offloaded");
    let spec = r.specs.iter().find(|x| x.key == a.spec).expect("its spec");
    assert_eq!(spec.run_as, "alice");
    let offload = hetsched_proto::ticket::Offload {
        task_id: a.task_id,
        attempt: a.attempt,
        run_as: "alice",
        nnode: "n1",
        anode: "anode",
        runs: shipped_runs(spec, a),
    };
    assert!(hetsched_proto::ticket::open_offload(&key, &offload, &a.offload_ticket).is_some());
    let as_admin = hetsched_proto::ticket::Offload {
        run_as: "",
        ..offload
    };
    assert!(hetsched_proto::ticket::open_offload(&key, &as_admin, &a.offload_ticket).is_none());
}

/// An ANode whose process queue is full takes no more offloads: its NNodes get no GPU instance
/// until it reports room, as for batch GPU tasks (`SchedulerView::set_accelerator_held`).
#[test]
fn a_bound_nnode_gets_no_gpu_instance_while_its_anodes_queue_is_full() {
    let dir = scratch("accel-held");
    let mut s = open(&dir, WorkflowConfig::default());
    let mut agents = Agents::default();
    let (anode, n1, _nb) = anode_and_nnodes(&mut s, &mut agents);
    let reports = |s: &mut State, queued: u32| {
        let mut req = heartbeat_request(anode, &[], &[]);
        req.rack = "A".into();
        req.accel_port = 7000;
        req.accel = Some(pb::AccelState {
            devices: vec![pb::DeviceState::default()],
            process_queue: queued,
            process_capacity: 16,
            ..Default::default()
        });
        s.heartbeat(req).expect("heartbeat");
    };
    s.submit("gpu.toml", &gpu_on_nnodes("centralised", ""), "/")
        .expect("submit");
    reports(&mut s, 16);
    for _ in 0..3 {
        assert!(agents.beat(&mut s, n1).assignments.is_empty(), "held");
    }
    reports(&mut s, 3);
    let given = agents.beat(&mut s, n1).assignments;
    assert_eq!(given.len(), 1, "room again: one instance on its one device");
    assert_eq!(given[0].offload_anode, "anode");
}

/// An instance bound for an ANode (offloaded) waits in its NNode's queue like any other, and
/// its NNode fetches its inputs onto its own disk before it ships them: when that disk runs
/// short, it is taken back too, unstarted, and the server forgets its offload (it never
/// reached the ANode: kept, the record would outlive the attempt, and that ANode's loss would
/// lose the instance's next run). It runs on another bound NNode as attempt 1, offloaded
/// again. Before, it was left in the queue, to find no room and count a disk loss.
#[test]
fn an_offloaded_instance_queued_on_a_short_nnode_is_taken_back_and_its_offload_forgotten() {
    const GIB: u64 = 1 << 30;
    let dir = scratch("no-room-offloaded");
    let mut s = open_prefetching(&dir, 1);
    let anode = common::register_with_gpus(&mut s, "anode", 4, 2);
    let n1 = common::register_with(&mut s, "n1", 1, &["side"]);
    anode_beats(&mut s, anode, "A");
    beat_in_rack(&mut s, n1, "A", &[], Vec::new(), 10 * GIB);
    let job = s
        .submit(
            "gpu.toml",
            "balancer = \"centralised\"\n\
             [[task]]\nname = \"P\"\ninstances = 1\nrequires = [\"side\"]\noutputs = [\"m\"]\ncommand = \"true\"\n\
             [[task]]\nname = \"G\"\ninstances = 2\ngpus = 1\nrequires = [\"side\"]\n\
             inputs = [\"m\"]\ncommand = \"true\"\n",
            "/",
        )
        .expect("submit")
        .job_id;
    let r = beat_in_rack(&mut s, n1, "A", &[], Vec::new(), 10 * GIB);
    assert_eq!(r.assignments.len(), 1, "the producer: {:?}", r.assignments);
    let p = (r.assignments[0].task_id, r.assignments[0].attempt);
    let r = beat_in_rack(&mut s, n1, "A", &[], vec![succeeded(p.0, p.1)], 10 * GIB);
    let sent: Vec<(u64, u32, bool, &str)> = r
        .assignments
        .iter()
        .map(|x| (x.task_id, x.attempt, x.prefetched, x.offload_anode.as_str()))
        .collect();
    assert_eq!(
        sent.iter().map(|x| (x.1, x.2, x.3)).collect::<Vec<_>>(),
        [(1, false, "anode"), (1, true, "anode")],
        "both offloaded, the second queued beyond the NNode's one core"
    );
    let (started, queued) = ((sent[0].0, 1), (sent[1].0, 1));
    assert_eq!(s.offloads_in_memory(), 2);
    // The NNode's disk runs short: the queued one is taken back, the started one left alone.
    let r = beat_in_rack(
        &mut s,
        n1,
        "A",
        &[(started.0, 1, false), (queued.0, 1, true)],
        Vec::new(),
        GIB / 2,
    );
    assert_eq!(
        r.kill
            .iter()
            .map(|k| (k.task_id, k.attempt))
            .collect::<Vec<_>>(),
        [queued],
        "the queued offload is taken back"
    );
    assert_eq!(
        s.offloads_in_memory(),
        1,
        "only the started offload is remembered"
    );
    let t = s
        .tasks(job)
        .expect("tasks")
        .tasks
        .into_iter()
        .find(|t| t.id == queued.0)
        .expect("listed");
    assert_eq!(
        (t.state.as_str(), t.attempt, t.executed_node.as_str()),
        ("ready", 1, ""),
        "{t:?}"
    );
    // Another NNode of the rack, with room, takes it.
    let n2 = common::register_with(&mut s, "n2", 1, &["side"]);
    let mut on_n2 = Vec::new();
    for _ in 0..5 {
        anode_beats(&mut s, anode, "A");
        let r = beat_in_rack(&mut s, n2, "A", &[], Vec::new(), 10 * GIB);
        on_n2.extend(
            r.assignments
                .iter()
                .map(|x| (x.task_id, x.attempt, x.offload_anode.clone())),
        );
        if !on_n2.is_empty() {
            break;
        }
    }
    assert_eq!(on_n2, [(queued.0, 1, "anode".to_string())], "as attempt 1");
    beat_in_rack(&mut s, n1, "A", &[], vec![succeeded(started.0, 1)], GIB / 2);
    beat_in_rack(&mut s, n2, "A", &[], vec![succeeded(queued.0, 1)], 10 * GIB);
    assert_eq!(s.job(job).expect("job").state, "completed");
    for t in &s.tasks(job).expect("tasks").tasks[1..] {
        assert_eq!(
            (
                t.state.as_str(),
                t.attempt,
                t.failed_attempts,
                t.executed_node.as_str()
            ),
            ("succeeded", 1, 0, "anode"),
            "{t:?}"
        );
    }
    assert_eq!(s.offloads_in_memory(), 0);
}

/// Every instance of `job` that was placed somewhere, as listed: (state, node, executed node).
fn ran_on(s: &State, job: u64) -> Vec<(String, String, String)> {
    s.tasks(job)
        .expect("instances")
        .tasks
        .into_iter()
        // Dispatched ones: a ready instance listed on the node it waits on has not run.
        .filter(|t| !t.node.is_empty() && t.state != "ready")
        .map(|t| (t.state, t.node, t.executed_node))
        .collect()
}

/// The ANode a workflow instance was offloaded to is stored with the dispatch
/// (`wf_instances.executed_node`), as a batch task's is: `hetsched tasks` names it after a
/// rollback (a full disk) and after a restart. It was memory only: both listed the instances
/// as run on their NNode.
#[test]
fn the_anode_a_workflow_instance_ran_on_is_listed_after_a_rollback_and_a_restart() {
    let dir = scratch("accel-stored");
    let mut s = open(&dir, WorkflowConfig::default());
    let mut agents = Agents::default();
    let (anode, n1, _nb) = anode_and_nnodes(&mut s, &mut agents);
    let job = s
        .submit("gpu.toml", &gpu_on_nnodes("centralised", ""), "/")
        .expect("submit")
        .job_id;
    agents.task_base = agents_base(&s, job);
    assert_eq!(agents.beat(&mut s, n1).assignments.len(), 1, "one device");
    agents.finish_all(n1, true);
    // The first's result; the same reply offloads the second.
    assert_eq!(agents.beat(&mut s, n1).assignments.len(), 1);
    let row = |state: &str| ("n1".to_string(), "anode".to_string(), state.to_string());
    let shown = |s: &State| -> Vec<(String, String, String)> {
        let mut v: Vec<_> = ran_on(s, job)
            .into_iter()
            .map(|(state, node, executed)| (node, executed, state))
            .collect();
        v.sort();
        v
    };
    assert_eq!(shown(&s), [row("running"), row("succeeded")]);

    // The disk fills: the commit of the second's result is refused and memory is rolled back
    // to the store, which names the ANode of both.
    let (task, attempt) = agents.running[&n1][0];
    s.simulate_full_disk(true);
    s.heartbeat(heartbeat_request(n1, &[], &[(task, attempt, true)]))
        .expect_err("the store refuses the commit");
    assert!(s.is_paused());
    assert_eq!(
        shown(&s),
        [row("running"), row("succeeded")],
        "after the rollback"
    );
    // The store takes writes again; once the rebuilt binding has both nodes again (from their
    // heartbeats), the second's result is recorded and the third is offloaded.
    s.simulate_full_disk(false);
    std::thread::sleep(hetsched_server::state::PROBE_INTERVAL);
    anode_beats(&mut s, anode, "A");
    agents.finish_all(n1, true);
    agents.beat(&mut s, n1);
    assert!(!s.is_paused());
    let given = agents.beat(&mut s, n1).assignments;
    assert_eq!(given.len(), 1, "the third");
    assert_eq!(given[0].offload_anode, "anode");

    // A restart: the stored ANode of every attempt is read back.
    drop(s);
    let mut s = open(&dir, WorkflowConfig::default());
    assert_eq!(
        shown(&s),
        [row("running"), row("succeeded"), row("succeeded")],
        "after the restart"
    );
    anode_beats(&mut s, anode, "A");
    agents.finish_all(n1, true);
    agents.beat(&mut s, n1);
    assert_eq!(s.job(job).expect("job").state, "completed");
    assert_eq!(
        shown(&s),
        [row("succeeded"), row("succeeded"), row("succeeded")]
    );
    assert_eq!(
        s.offloads_in_memory(),
        0,
        "an ended offload is listed from its row, not kept in memory"
    );
}

/// Rack A: ANodes `anode` and `anode2` (one device each) and the NNode `n1`, bound to
/// `anode`; a GPU instance only `n1` may run (`requires = ["side"]`) is offloaded to `anode`.
/// Then `anode` dies (after a server restart, when `restart`): the instance is lost, `n1` is
/// told to kill it, and it runs again, offloaded to `anode2`, to which `n1` is bound now; the
/// workflow completes. Before the workflow kind stored its offloads, a restart forgot where
/// the instance ran: the ANode's death left it running for ever.
fn anode_dies_under_an_offloaded_instance(restart: bool) {
    let dir = scratch(&format!("accel-lost-{restart}"));
    let mut s = open(&dir, WorkflowConfig::default());
    let mut agents = Agents::default();
    let anode = common::register_with_gpus(&mut s, "anode", 4, 1);
    let anode2 = common::register_with_gpus(&mut s, "anode2", 4, 1);
    let n1 = common::register_with(&mut s, "n1", 4, &["side"]);
    agents.racks.insert(n1, "A".into());
    anode_beats(&mut s, anode, "A");
    anode_beats(&mut s, anode2, "A");
    agents.beat(&mut s, n1);
    let job = s
        .submit(
            "gpu.toml",
            "balancer = \"centralised\"\n[[task]]\nname = \"g\"\ninstances = 1\ngpus = 1\n\
             requires = [\"side\"]\noutputs = [\"o\"]\ncommand = \"echo > {output:o}\"\n",
            "/",
        )
        .expect("submit")
        .job_id;
    agents.task_base = agents_base(&s, job);
    let given = agents.beat(&mut s, n1).assignments;
    assert_eq!(given.len(), 1);
    assert_eq!(
        (given[0].offload_anode.as_str(), given[0].attempt),
        ("anode", 1)
    );
    if restart {
        drop(s);
        s = open(&dir, WorkflowConfig::default());
        anode_beats(&mut s, anode, "A");
        anode_beats(&mut s, anode2, "A");
        agents.beat(&mut s, n1);
    }
    // `anode` falls silent and is declared dead.
    std::thread::sleep(crate::common::SILENCE);
    anode_beats(&mut s, anode2, "A");
    agents.beat(&mut s, n1);
    s.check_dead(crate::common::DEAD_TIMEOUT).expect("check");
    let t = &s.tasks(job).expect("instances").tasks[0];
    assert_eq!(
        (t.state.as_str(), t.attempt, t.message.as_str()),
        (
            "ready",
            1,
            "attempt 1 lost: its ANode `anode` was lost; placed on n1: waits there to start"
        ),
        "lost with its ANode, and listed so, as a batch task is, on the node it waits on: {t:?}"
    );
    let reply = agents.beat(&mut s, n1);
    assert_eq!(
        reply.kill.iter().map(|k| k.attempt).collect::<Vec<_>>(),
        [1],
        "n1 is told to kill the lost attempt"
    );
    assert_eq!(
        reply
            .assignments
            .iter()
            .map(|a| (a.offload_anode.as_str(), a.attempt))
            .collect::<Vec<_>>(),
        [("anode2", 2)],
        "it runs again through the other ANode"
    );
    agents.finish_all(n1, true);
    agents.beat(&mut s, n1);
    assert_eq!(s.job(job).expect("job").state, "completed");
    assert_eq!(
        ran_on(&s, job),
        [(
            "succeeded".to_string(),
            "n1".to_string(),
            "anode2".to_string()
        )]
    );
}

#[test]
fn an_anodes_death_reruns_the_workflow_instance_offloaded_to_it() {
    anode_dies_under_an_offloaded_instance(false);
}

#[test]
fn an_anodes_death_after_a_restart_reruns_the_workflow_instance_offloaded_to_it() {
    anode_dies_under_an_offloaded_instance(true);
}

/// Rack A: the ANode `anode` with two devices and the NNode `n1` bound to it; a workflow of
/// `instances` GPU instances only `n1` may run, submitted. Returns (anode, n1, job).
fn two_device_anode(s: &mut State, agents: &mut Agents, instances: u32) -> (u32, u32, u64) {
    let anode = common::register_with_gpus(s, "anode", 4, 2);
    let n1 = common::register_with(s, "n1", 4, &["side"]);
    agents.racks.insert(n1, "A".into());
    anode_beats(s, anode, "A");
    agents.beat(s, n1);
    let job = s
        .submit(
            "gpu.toml",
            &format!(
                "balancer = \"centralised\"\n[[task]]\nname = \"g\"\ninstances = {instances}\n\
                 gpus = 1\nrequires = [\"side\"]\noutputs = [\"o\"]\n\
                 command = \"echo > {{output:o}}\"\n"
            ),
            "/",
        )
        .expect("submit")
        .job_id;
    agents.task_base = agents_base(s, job);
    (anode, n1, job)
}

/// `n1`'s running instance `task` succeeded, as its agent reports it: `result` filled in.
fn offload_succeeded(agents: &mut Agents, n1: u32, task: u64, result: pb::TaskResult) {
    let attempt = agents.running[&n1]
        .iter()
        .find(|&&(t, _)| t == task)
        .map(|&(_, a)| a)
        .expect("running");
    if let Some(r) = agents.running.get_mut(&n1) {
        r.retain(|&(t, _)| t != task);
    }
    agents.special.entry(n1).or_default().push(pb::TaskResult {
        task_id: task,
        attempt,
        success: true,
        ..result
    });
    agents.ended(n1, task);
}

/// A workflow instance offloaded to an ANode is listed with the ANode's device it ran on and
/// its start there (the result's `offload_devices`, `offload_started_ns`), as a batch task is,
/// and so after a restart (the instance's row); the device the NNode was seen with at dispatch
/// and the NNode's start were listed before. A device the ANode lacks, or more devices than
/// the instance booked, are not believed: it keeps the dispatch's (its start there is taken).
#[test]
fn an_offloaded_workflow_instance_is_listed_with_the_anodes_device_and_its_start_there() {
    let dir = scratch("accel-device");
    let mut s = open(&dir, WorkflowConfig::default());
    let mut agents = Agents::default();
    let (_anode, n1, job) = two_device_anode(&mut s, &mut agents, 3);
    let given = agents.beat(&mut s, n1).assignments;
    let mut on: Vec<(u32, u64)> = given.iter().map(|a| (a.devices[0], a.task_id)).collect();
    on.sort();
    assert_eq!(
        on.iter().map(|&(d, _)| d).collect::<Vec<_>>(),
        [0, 1],
        "n1 reaches the ANode's two devices: {given:?}"
    );
    let (told, forged) = (on[0].1, on[1].1);
    // The one dispatched with device 0 ran on the ANode's device 1 (the ANode picks its free
    // devices); the other's report names a device the ANode does not have.
    offload_succeeded(
        &mut agents,
        n1,
        told,
        pb::TaskResult {
            started_ns: 1_000,
            finished_ns: 9_000,
            offload_started_ns: 5_000,
            offload_devices: vec![1],
            ..Default::default()
        },
    );
    offload_succeeded(
        &mut agents,
        n1,
        forged,
        pb::TaskResult {
            started_ns: 2_000,
            finished_ns: 8_000,
            offload_started_ns: 6_000,
            offload_devices: vec![7],
            ..Default::default()
        },
    );
    // Their results; the same reply offloads the third, whose report names more devices than
    // it booked.
    let third = agents.beat(&mut s, n1).assignments;
    assert_eq!(third.len(), 1, "{third:?}");
    let (greedy, greedy_device) = (third[0].task_id, third[0].devices.clone());
    offload_succeeded(
        &mut agents,
        n1,
        greedy,
        pb::TaskResult {
            started_ns: 3_000,
            finished_ns: 7_000,
            offload_started_ns: 4_000,
            offload_devices: vec![0, 1],
            ..Default::default()
        },
    );
    agents.beat(&mut s, n1);
    assert_eq!(s.job(job).expect("job").state, "completed");
    let shown = |s: &State| {
        let mut v: Vec<(u64, Vec<u32>, u64, u64, String)> = s
            .tasks(job)
            .expect("instances")
            .tasks
            .into_iter()
            .map(|t| {
                (
                    t.id,
                    t.devices,
                    t.started_ns,
                    t.finished_ns,
                    t.executed_node,
                )
            })
            .collect();
        v.sort();
        v
    };
    let mut want = vec![
        (told, vec![1], 5_000, 9_000, "anode".to_string()),
        (forged, vec![1], 6_000, 8_000, "anode".to_string()),
        (greedy, greedy_device, 4_000, 7_000, "anode".to_string()),
    ];
    want.sort();
    assert_eq!(shown(&s), want);
    drop(s);
    let s = open(&dir, WorkflowConfig::default());
    assert_eq!(shown(&s), want, "after a restart");
}

/// A workflow instance lost with its ANode is listed as the lost attempt (`attempt 1 lost:
/// its ANode … was lost`), as a batch task is, also after a restart (its row); before, its
/// message said nothing of the loss.
#[test]
fn a_workflow_instance_lost_with_its_anode_is_listed_so_after_a_restart() {
    let dir = scratch("accel-lost-message");
    let mut s = open(&dir, WorkflowConfig::default());
    let mut agents = Agents::default();
    let (_anode, n1, job) = two_device_anode(&mut s, &mut agents, 1);
    assert_eq!(agents.beat(&mut s, n1).assignments.len(), 1);
    // `anode` falls silent and is declared dead.
    std::thread::sleep(crate::common::SILENCE);
    agents.beat(&mut s, n1);
    s.check_dead(crate::common::DEAD_TIMEOUT).expect("check");
    // The loss's words; where the balancer placed it since is said after them (memory only,
    // so not after the restart).
    let listed = |s: &State| {
        let t = &s.tasks(job).expect("instances").tasks[0];
        (
            t.state.clone(),
            t.attempt,
            t.message
                .split("; placed on ")
                .next()
                .unwrap_or_default()
                .to_string(),
            t.reason.clone(),
        )
    };
    // Pending again after a loss: lost, until it runs again.
    let want = (
        "ready".to_string(),
        1,
        "attempt 1 lost: its ANode `anode` was lost".to_string(),
        "lost".to_string(),
    );
    assert_eq!(listed(&s), want);
    drop(s);
    let s = open(&dir, WorkflowConfig::default());
    assert_eq!(listed(&s), want, "after a restart");
}

/// A server in `dir` under `config` with 2-core nodes named `names`, which beat once before
/// [`FAN_OUT`] is submitted as job `job`: the set-up of the PCDDB protocol's scenarios.
fn fan_out_on<const N: usize>(
    dir: &Path,
    config: WorkflowConfig,
    names: [&str; N],
) -> (State, Agents, [u32; N], u64) {
    let mut s = open(dir, config);
    let nodes = names.map(|name| common::register(&mut s, name, 2));
    let mut agents = Agents::default();
    for n in nodes {
        agents.beat(&mut s, n);
    }
    let job = s.submit("fan.toml", FAN_OUT, "/").expect("submit").job_id;
    (s, agents, nodes, job)
}

/// One PCDDB cluster of two nodes (`cluster_size = 2`), with `lt` and `mt` if given.
fn one_cluster_of_two(lt: Option<u32>, mt: Option<u32>) -> WorkflowConfig {
    WorkflowConfig {
        cluster_size: Some(2),
        lt,
        mt: mt.and_then(std::num::NonZeroU32::new),
        ..Default::default()
    }
}

/// Drives `nodes` in turn — each reports itself underloaded, beats, and finishes what it runs
/// — until a heartbeat reply carries an allocation request of `instances` instances, at most
/// 20 rounds: that request as the node was sent it (its envelope and its message).
fn drive_until_request(
    s: &mut State,
    agents: &mut Agents,
    nodes: &[u32],
    instances: usize,
) -> (pb::BalanceMessage, Message) {
    for _ in 0..20 {
        for &n in nodes {
            agents.self_check(n);
            let reply = agents.beat(s, n);
            agents.finish_all(n, true);
            for env in reply.balance {
                let msg: Message = serde_json::from_str(&env.message_json).expect("json");
                if matches!(&msg.body, Body::Request(r) if r.instances.len() == instances) {
                    return (env, msg);
                }
            }
        }
    }
    panic!("no request of {instances} instances: {agents:?}");
}

/// The allocation request of a message [`drive_until_request`] captured.
fn request(msg: &Message) -> &AllocationRequest {
    match &msg.body {
        Body::Request(r) => r,
        other => panic!("not a request: {other:?}"),
    }
}

/// The PCDDB workflow `job` as a heartbeat reply tells the node of it.
fn pcddb_job(reply: &pb::HeartbeatReply, job: u64) -> &pb::PcddbJob {
    reply
        .pcddb
        .iter()
        .find(|j| j.job_id == job)
        .expect("the node balances the workflow")
}

/// A PCDDB message for workflow `job` from `from` to `to`, as an agent's heartbeat carries it
/// (no grant).
fn balance_message(job: u64, from: NodeId, to: NodeId, body: Body) -> pb::BalanceMessage {
    pb::BalanceMessage {
        job_id: job,
        message_json: serde_json::to_string(&Message { from, to, body }).expect("json"),
        ..Default::default()
    }
}

/// What an agent's heartbeat says for PCDDB is checked before the launch node acts on it: a
/// `reply` or `return` naming instances the workflow does not have is ignored (it indexed the
/// instance table with them and panicked holding the state's lock, which every later call then
/// found poisoned: one agent's bad message stopped the server), and the workflow goes on.
#[test]
fn pcddb_messages_naming_instances_the_workflow_lacks_are_ignored() {
    use hetsched_core::policy::graph::Wanted;
    let dir = scratch("forged-pcddb");
    let (mut s, mut agents, [n], job) = fan_out_on(&dir, WorkflowConfig::default(), ["n0"]);
    agents.round(&mut s, &[n]);
    let launch = NodeId(u32::MAX - 1);
    let forged = |body: Body| balance_message(job, NodeId(n), launch, body);
    let bad = InstanceId(1_000_000);
    let returned = AllocationRequest {
        cluster: ClusterId(0),
        launch,
        sent_at: 0,
        instances: [Wanted {
            instance: bad,
            requires: 0,
        }]
        .into(),
        table: vec![NodeId(n)].into(),
    };
    for body in [
        Body::Reply {
            cluster: ClusterId(0),
            taken: vec![bad, InstanceId(u32::MAX)],
            remaining: 0,
        },
        Body::Return(returned),
    ] {
        agents.outbox.entry(n).or_default().push(forged(body));
        agents.beat(&mut s, n);
        agents.round(&mut s, &[n]);
    }
    // Everything completes.
    for _ in 0..40 {
        agents.finish_all(n, true);
        agents.round(&mut s, &[n]);
    }
    let info = s.get_job(job).expect("job");
    assert_eq!(info.state, "completed", "{agents:?}");
    assert!(
        agents.assigned.iter().all(|a| a.1 <= 20),
        "only the workflow's instances ran: {agents:?}"
    );
}

/// A node's heartbeat speaks for that node only: a `reply` (or `status`) in it naming another
/// node as its sender is ignored, so no agent makes the server run instances on a node whose
/// machine never took them (the node identity rule of runtime.md's Security section).
#[test]
fn a_pcddb_reply_in_one_nodes_heartbeat_cannot_speak_for_another_node() {
    let dir = scratch("pcddb-from");
    let (mut s, mut agents, [n0, n1], job) =
        fan_out_on(&dir, WorkflowConfig::default(), ["n0", "n1"]);
    // n0's heartbeat says n1 took the seed; n1's machine never did.
    let forged = balance_message(
        job,
        NodeId(n1),
        NodeId(u32::MAX - 1),
        Body::Reply {
            cluster: ClusterId(0),
            taken: vec![InstanceId(0)],
            remaining: 0,
        },
    );
    agents.outbox.entry(n0).or_default().push(forged);
    agents.beat(&mut s, n0);
    agents.beat(&mut s, n1);
    assert!(
        !agents.assigned.iter().any(|a| a.0 == n1),
        "n1 ran what n0 said it took: {agents:?}"
    );
}

/// The launch node grants every allocation request it sends (an agent takes a request from
/// another agent only with it, `AgentData.Deliver`): each carries a grant, for exactly its
/// instances with their requirements, that its workflow's balancing key verifies and no other
/// workflow's does; that key goes to the nodes balancing the workflow, with its `PcddbJob`,
/// and to no node for a workflow it does not balance by PCDDB; and what a grant covers cannot
/// be changed (another instance, stripped requirements, another cluster) without it failing.
#[test]
fn allocation_requests_carry_a_grant_only_their_workflows_balancing_key_verifies() {
    let dir = scratch("grants");
    let mut s = open(&dir, WorkflowConfig::default());
    let nodes = [
        common::register(&mut s, "n0", 2),
        common::register(&mut s, "n1", 2),
    ];
    for &n in &nodes {
        s.heartbeat(heartbeat_request(n, &[], &[])).expect("beat");
    }
    let submit =
        |s: &mut State, text: &str| s.submit("fan.toml", text, "/").expect("submit").job_id;
    let a = submit(&mut s, FAN_OUT);
    let b = submit(&mut s, FAN_OUT);
    let c = submit(
        &mut s,
        &FAN_OUT.replace("balancer = \"pcddb\"", "balancer = \"centralised\""),
    );
    // Each node learns the PCDDB workflows it balances, each with its own key.
    let mut keys: BTreeMap<u64, Vec<u8>> = BTreeMap::new();
    let mut jobs: BTreeMap<(u32, u64), pb::PcddbJob> = BTreeMap::new();
    for &n in &nodes {
        let reply = s.heartbeat(heartbeat_request(n, &[], &[])).expect("beat");
        let balanced: Vec<u64> = reply.pcddb.iter().map(|j| j.job_id).collect();
        assert_eq!(
            balanced,
            [a, b],
            "a centralised workflow has no balancing key"
        );
        for j in reply.pcddb {
            assert_eq!(j.balance_key.len(), 32, "{j:?}");
            let key = keys
                .entry(j.job_id)
                .or_insert_with(|| j.balance_key.clone());
            assert_eq!(
                *key, j.balance_key,
                "one key per workflow, the same to every node"
            );
            jobs.insert((n, j.job_id), j);
        }
    }
    assert_ne!(keys[&a], keys[&b], "each workflow its own key");
    assert!(!keys.contains_key(&c));
    // The nodes report themselves underloaded: the launch nodes send their ready instances.
    let mut requests = Vec::new();
    for round in 0..2 {
        for &n in &nodes {
            let mut req = heartbeat_request(n, &[], &[]);
            for job in [a, b] {
                for &cluster in &jobs[&(n, job)].clusters {
                    req.balance.push(pb::BalanceMessage {
                        job_id: job,
                        message_json: serde_json::to_string(&Message {
                            from: NodeId(n),
                            to: NodeId(jobs[&(n, job)].launch),
                            body: Body::Status {
                                cluster: ClusterId(cluster),
                            },
                        })
                        .expect("json"),
                        ..Default::default()
                    });
                }
            }
            let reply = s.heartbeat(req).expect("beat");
            for env in reply.balance {
                let msg: Message = serde_json::from_str(&env.message_json).expect("json");
                let Body::Request(r) = msg.body else {
                    panic!("only requests come from the launch node: {msg:?}");
                };
                requests.push((round, n, env, r));
            }
        }
    }
    let sent: Vec<u64> = requests.iter().map(|(_, _, e, _)| e.job_id).collect();
    assert!(sent.contains(&a) && sent.contains(&b), "{sent:?}");
    let mut serials = Vec::new();
    for (_, n, env, r) in &requests {
        let job = env.job_id;
        let other = if job == a { b } else { a };
        let j = &jobs[&(*n, job)];
        assert!(granted(env, r, j), "{env:?}");
        assert_eq!(env.grant.len(), ticket::GRANT_LEN);
        let g = grant_of(env, r, j.epoch);
        assert!(
            !ticket::verify_grant(&keys[&other], &g, &env.grant),
            "another workflow's key"
        );
        assert!(
            !ticket::verify_grant(&j.balance_key, &grant_of(env, r, j.epoch + 1), &env.grant),
            "another epoch"
        );
        let mut more = env.granted_instances.clone();
        more.push(1_000);
        let mut more_req = env.granted_requires.clone();
        more_req.push(0);
        let widened = ticket::Grant {
            instances: &more,
            requires: &more_req,
            ..g
        };
        assert!(!ticket::verify_grant(&j.balance_key, &widened, &env.grant));
        let stripped = vec![u64::MAX; env.granted_requires.len()];
        let stripped = ticket::Grant {
            requires: &stripped,
            ..g
        };
        assert!(!ticket::verify_grant(&j.balance_key, &stripped, &env.grant));
        let moved = ticket::Grant {
            cluster: g.cluster + 1,
            ..g
        };
        assert!(!ticket::verify_grant(&j.balance_key, &moved, &env.grant));
        serials.push(env.grant_serial);
    }
    let n = serials.len();
    serials.sort_unstable();
    serials.dedup();
    assert_eq!(serials.len(), n, "each grant its own serial");
}

/// A replayed grant claims nothing: an insider (a node balancing the workflow, which sees the
/// grants that pass through it) replays a genuine request to another node of the workflow,
/// whose agent verifies the grant and takes its instances. The server places an instance only
/// from a `reply` of a node the request was sent to (its table), and only once: the replay's
/// taker runs none of them — even when its reply reaches the server first — and its machine
/// is told to forget them (`dropped`), no instance runs twice, no machine holds one for ever,
/// and the workflow completes. Before, the replay shifted instances to the other node.
#[test]
fn a_replayed_grant_claims_nothing_and_leaves_no_machine_holding_one() {
    let dir = scratch("replayed-grant");
    // One cluster of both nodes, so a request may hop from one to the other.
    let (mut s, mut agents, [n0, n1], job) =
        fan_out_on(&dir, one_cluster_of_two(None, None), ["n0", "n1"]);
    // Only n0 reports itself underloaded: it takes the seed, then the 20 spread instances in
    // one request, which the insider keeps.
    let (env, mut msg) = drive_until_request(&mut s, &mut agents, &[n0], 20);
    assert_eq!(agents.machines[&n0].held(), 20, "{agents:?}");
    // n1 balances the workflow too, and n1's agent would take the replay: its key verifies
    // the grant, and it offers only instances granted.
    let reply = agents.beat(&mut s, n1);
    assert!(
        granted(&env, request(&msg), pcddb_job(&reply, job)),
        "a genuine grant"
    );
    msg.from = NodeId(n0);
    msg.to = NodeId(n1);
    agents.deliver(n1, msg);
    assert!(
        agents.machines[&n1].held() > 0,
        "n1's machine took the replayed instances: {agents:?}"
    );
    // n1's reply reaches the server before n0's.
    agents.beat(&mut s, n1);
    agents.run_until_completed(&mut s, &[n0, n1], job, 60);
    for _ in 0..5 {
        agents.round(&mut s, &[n0, n1]);
    }
    assert_eq!(
        s.get_job(job).expect("job").state,
        "completed",
        "{agents:?}"
    );
    let runs = agents.runs();
    assert_eq!(runs.len(), 21, "every instance ran: {runs:?}");
    assert!(
        runs.values().all(|nodes| nodes == &[n0]),
        "every instance ran once, on n0, which the request was sent to: {runs:?}"
    );
    assert!(
        agents.dropped.iter().any(|&(node, _)| node == n1),
        "n1's machine was told to forget what it took from the replay: {agents:?}"
    );
    assert_eq!(
        (agents.machines[&n0].held(), agents.machines[&n1].held()),
        (0, 0),
        "no machine holds an instance: {agents:?}"
    );
}

/// A node's own heartbeat speaks for its machine, but not beyond what the launch node offered
/// it: a node that never reported itself underloaded, so that no request was sent to it,
/// claims every instance of a running workflow in `reply`s (ready ones, and those placed on
/// another node) and hands them all back in `return`s, at every beat. None runs on it, its
/// machine is told to forget them, none is offered again while it runs elsewhere, and the
/// workflow completes on the node the requests went to. Before, such a reply ran the ready
/// seed on the claiming node, and such a return put running instances in the next request.
#[test]
fn a_node_claims_or_hands_back_only_what_a_request_sent_to_it_offers() {
    use hetsched_core::policy::graph::Wanted;
    let dir = scratch("pcddb-claims");
    let (mut s, mut agents, [n0, n1], job) =
        fan_out_on(&dir, one_cluster_of_two(None, None), ["n0", "n1"]);
    let reply = agents.beat(&mut s, n1);
    let j = pcddb_job(&reply, job);
    let cluster = ClusterId(j.clusters[0]);
    let launch = NodeId(j.launch);
    let all: Vec<InstanceId> = (0..21).map(InstanceId).collect();
    let forged = |body: Body| balance_message(job, NodeId(n1), launch, body);
    let claim = forged(Body::Reply {
        cluster,
        taken: all.clone(),
        remaining: 0,
    });
    let hand_back = |sent_at: u64| {
        forged(Body::Return(AllocationRequest {
            cluster,
            launch,
            sent_at,
            instances: all
                .iter()
                .map(|&instance| Wanted {
                    instance,
                    requires: 0,
                })
                .collect(),
            table: vec![NodeId(n1)].into(),
        }))
    };
    for round in 0..40 {
        let outbox = agents.outbox.entry(n1).or_default();
        outbox.push(claim.clone());
        outbox.push(hand_back(0));
        outbox.push(hand_back(round));
        agents.beat(&mut s, n1);
        agents.self_check(n0);
        agents.beat(&mut s, n0);
        agents.finish_all(n0, true);
        if s.get_job(job).expect("job").state == "completed" {
            break;
        }
    }
    assert_eq!(
        s.get_job(job).expect("job").state,
        "completed",
        "{agents:?}"
    );
    assert!(
        agents.assigned.iter().all(|a| a.0 == n0),
        "an instance ran on the node that claimed it unoffered: {agents:?}"
    );
    assert_eq!(agents.assigned.len(), 21, "each ran once: {agents:?}");
    let mut offered: Vec<u32> = agents
        .hops
        .iter()
        .flat_map(|h| h.3.iter().copied())
        .collect();
    offered.sort_unstable();
    assert_eq!(
        offered,
        (0..21).collect::<Vec<u32>>(),
        "each instance offered once: a return from a node no request was sent to put none \
         back: {agents:?}"
    );
}

/// A node may take from a request it was sent no more than the acceptance rule allows: `MT ×
/// cores − x` while it holds fewer than `LT × cores` (spec 05 §4 c b). An insider (or a faulty
/// agent) sent a request of 20 instances, where its 2 cores under MT = 2 let it take 4, claims
/// all 20 in its `reply`. The server places the first 4 claimed on it, tells its machine to
/// forget the other 16 (`dropped`) and places them again — on the other node, which reports
/// itself underloaded — and every instance runs once. Before, the node got all 20.
#[test]
fn a_node_claiming_more_than_mt_times_cores_less_what_it_holds_gets_no_more() {
    let dir = scratch("pcddb-over-claim");
    let (mut s, mut agents, [n0, n1], job) =
        fan_out_on(&dir, one_cluster_of_two(Some(1), Some(2)), ["n0", "n1"]);
    // Only n0 reports itself underloaded: it takes the seed, then is sent the 20 spread
    // instances in one request, of which its machine takes 4 and returns 16.
    let (_, msg) = drive_until_request(&mut s, &mut agents, &[n0], 20);
    let r = request(&msg);
    assert_eq!(agents.machines[&n0].held(), 4, "MT × cores − 0: {agents:?}");
    let order: Vec<InstanceId> = r.instances.iter().map(|w| w.instance).collect();
    // The insider claims every instance of the request instead of returning 16.
    let claim = Body::Reply {
        cluster: r.cluster,
        taken: order.clone(),
        remaining: 0,
    };
    agents
        .outbox
        .insert(n0, vec![balance_message(job, NodeId(n0), r.launch, claim)]);
    let reply = agents.beat(&mut s, n0);
    let mut dropped = pcddb_job(&reply, job).dropped.clone();
    dropped.sort_unstable();
    let mut excess: Vec<u32> = order[4..].iter().map(|i| i.0).collect();
    excess.sort_unstable();
    assert_eq!(
        dropped, excess,
        "the machine forgets what it took past the rule"
    );
    // n0 runs what it holds and reports itself no more; n1 is underloaded at every check.
    for _ in 0..60 {
        agents.beat(&mut s, n0);
        agents.finish_all(n0, true);
        agents.self_check(n1);
        agents.beat(&mut s, n1);
        agents.finish_all(n1, true);
        if s.get_job(job).expect("job").state == "completed" {
            break;
        }
    }
    assert_eq!(
        s.get_job(job).expect("job").state,
        "completed",
        "{agents:?}"
    );
    let runs = agents.runs();
    assert_eq!(runs.len(), 21, "every instance ran: {runs:?}");
    for (i, nodes) in &runs {
        let first_four = order[..4].contains(&InstanceId(*i)) || *i == 0;
        let expected = if first_four { n0 } else { n1 };
        assert_eq!(
            nodes,
            &[expected],
            "instance {i} ran once, on n0 only if within what n0 may take: {runs:?}"
        );
    }
    assert_eq!(
        (agents.machines[&n0].held(), agents.machines[&n1].held()),
        (0, 0),
        "no machine holds an instance: {agents:?}"
    );
}

/// The underloaded table a request carries is signed into its grant, and a `return` counts
/// only with a table the request's path can leave: the granted one less the nodes it visited.
/// A node on the path that returns a request with its table altered (reordered, or stripped
/// of nodes ahead, which the launch node would drop from its own table) hands back nothing:
/// its instances stay offered, none goes out in another request. The same return with the
/// table its path left hands them back, and the workflow completes. Before, the altered
/// return put them in the next request at once.
#[test]
fn a_return_with_an_altered_underloaded_table_hands_back_nothing() {
    let dir = scratch("pcddb-altered-table");
    let (mut s, mut agents, [n0, n1], job) =
        fan_out_on(&dir, one_cluster_of_two(Some(1), Some(1)), ["n0", "n1"]);
    // Both report themselves underloaded; the request of the 20 spread instances goes to the
    // first, which takes 2 and passes it on to the other, which takes 2 and returns 16 with
    // the table its path left (empty).
    let (env, msg) = drive_until_request(&mut s, &mut agents, &[n0, n1], 20);
    assert_eq!(env.granted_table.len(), 2, "{env:?}");
    let r = request(&msg);
    let last = r.table[1].0;
    let outbox = agents.outbox.remove(&last).unwrap_or_default();
    let (returns, others): (Vec<_>, Vec<_>) = outbox.into_iter().partition(|e| {
        serde_json::from_str::<Message>(&e.message_json)
            .is_ok_and(|m| matches!(m.body, Body::Return(_)))
    });
    let honest = returns
        .into_iter()
        .next()
        .expect("the last node returns the rest");
    let Body::Return(back) = serde_json::from_str::<Message>(&honest.message_json)
        .expect("json")
        .body
    else {
        unreachable!("a return");
    };
    assert_eq!(back.instances.len(), 16);
    assert!(back.table.is_empty(), "{back:?}");
    let rest: Vec<u32> = back.instances.iter().map(|w| w.instance.0).collect();
    let altered = |table: Vec<NodeId>| pb::BalanceMessage {
        message_json: serde_json::to_string(&Message {
            from: NodeId(last),
            to: r.launch,
            body: Body::Return(AllocationRequest {
                table: table.into(),
                ..back.clone()
            }),
        })
        .expect("json"),
        ..honest.clone()
    };
    let mut outbox = others;
    outbox.push(altered(vec![r.table[1], r.table[0]]));
    outbox.push(altered(vec![r.table[0]]));
    agents.outbox.insert(last, outbox);
    let offered_again = |agents: &Agents| {
        agents
            .hops
            .iter()
            .flat_map(|h| h.3.iter())
            .filter(|i| rest.contains(i))
            .count()
    };
    let before = offered_again(&agents);
    for _ in 0..5 {
        for n in [n0, n1] {
            agents.beat(&mut s, n);
            agents.finish_all(n, true);
            agents.self_check(n);
        }
    }
    assert_eq!(
        offered_again(&agents),
        before,
        "a return with an altered table handed its instances back: {agents:?}"
    );
    // The return with the table its path left hands them back.
    agents.outbox.entry(last).or_default().push(honest);
    agents.run_until_completed(&mut s, &[n0, n1], job, 60);
    assert_eq!(
        s.get_job(job).expect("job").state,
        "completed",
        "{agents:?}"
    );
    assert_eq!(agents.assigned.len(), 21, "each ran once: {agents:?}");
}

/// Only the agent of the node an attempt runs on speaks for it: a success another node's
/// agent reports for it (right task, right attempt) ends nothing — the instance runs on, its
/// node is not told to kill it, and no consumer is sent to fetch an output from the node that
/// claimed it. Before, the claim was taken: the producer read succeeded with its output on the
/// claiming node, its consumer went there for it, and the node really running it was told to
/// kill it.
#[test]
fn a_result_from_another_nodes_agent_does_not_end_an_instance() {
    let dir = scratch("result-other-node");
    let mut s = open(&dir, WorkflowConfig::default());
    let (a, b) = (
        common::register(&mut s, "a", 2),
        common::register(&mut s, "b", 2),
    );
    let mut agents = Agents::default();
    agents.beat(&mut s, a);
    agents.beat(&mut s, b);
    let job = s
        .submit("wf.toml", &producer_and_consumer("centralised"), "/")
        .expect("submit")
        .job_id;
    agents.task_base = agents_base(&s, job);
    for _ in 0..5 {
        agents.round(&mut s, &[a, b]);
        if !agents.assigned.is_empty() {
            break;
        }
    }
    let (on, instance, attempt) = agents.assigned[0];
    assert_eq!(instance, 0, "the producer runs first");
    let other = if on == a { b } else { a };
    agents
        .results
        .entry(other)
        .or_default()
        .push((agents.task_base, attempt, true));
    agents.beat(&mut s, other);
    let p = s.tasks(job).expect("tasks").tasks[0].clone();
    assert_eq!(p.state, "running", "{p:?}");
    let reply = agents.beat(&mut s, on);
    assert!(reply.kill.is_empty(), "{:?}", reply.kill);
    agents.round(&mut s, &[a, b]);
    assert!(
        !agents.assigned.iter().any(|x| x.1 == 1),
        "no consumer before its producer's own node reports it: {agents:?}"
    );
    // Its own node's report ends it, and the consumer follows.
    agents.finish_all(on, true);
    for _ in 0..5 {
        agents.round(&mut s, &[a, b]);
    }
    assert_eq!(
        s.tasks(job).expect("tasks").tasks[0].state,
        "succeeded",
        "{agents:?}"
    );
    assert!(agents.assigned.iter().any(|x| x.1 == 1), "{agents:?}");
}

/// The round trips an agent reports are kept only to other registered nodes, and a figure
/// near the top of u64 is taken as the longest kept (`MAX_RTT`). Before, any u32 an agent
/// named as a peer was kept for good (a report of a million made-up peers, a million entries,
/// again at every beat), and `u64::MAX` overflowed the rounding under the state's lock (a
/// panic in a debug build).
#[test]
fn round_trips_are_kept_only_to_registered_nodes_and_near_the_top_of_u64_do_not_overflow() {
    let dir = scratch("rtt-bounds");
    let mut s = open(&dir, WorkflowConfig::default());
    let (a, b) = (
        common::register(&mut s, "a", 2),
        common::register(&mut s, "b", 2),
    );
    let mut agents = Agents::default();
    let mut far: BTreeMap<u32, u64> = (1_000..11_000).map(|peer| (peer, 1)).collect();
    far.insert(a, 1);
    far.insert(b, u64::MAX);
    agents.rtt.insert(a, far);
    agents.rtt.insert(b, [(a, u64::MAX - 1)].into());
    agents.beat(&mut s, a);
    agents.beat(&mut s, b);
    assert_eq!(s.workflow_round_trips(), 2, "a → b and b → a only");
    // The workflow still runs over them.
    let job = s.submit("fan.toml", FAN_OUT, "/").expect("submit").job_id;
    for _ in 0..40 {
        agents.round(&mut s, &[a, b]);
        agents.finish_all(a, true);
        agents.finish_all(b, true);
    }
    assert_eq!(s.job(job).expect("job").state, "completed", "{agents:?}");
}

/// What an agent advertises as its address is relayed to every agent balancing a workflow
/// (`PcddbJob.peers`) and named in every fetch of its outputs: only `host:port` or
/// `https://host:port` is. Before, a megabyte of text was kept and sent to every node in every
/// heartbeat reply.
#[test]
fn an_advertised_address_that_is_not_host_port_is_not_relayed() {
    let dir = scratch("advertise");
    let mut s = open(&dir, WorkflowConfig::default());
    let names = ["a", "b", "c", "d"];
    let nodes: Vec<u32> = names
        .iter()
        .map(|n| common::register(&mut s, n, 2))
        .collect();
    let advertised = [
        "x".repeat(1 << 20),
        "10.0.0.2:7431".to_string(),
        "https://d.example.org:7431".to_string(),
        "http://evil.example.org/path".to_string(),
    ];
    s.submit("fan.toml", FAN_OUT, "/").expect("submit");
    let mut peers = BTreeMap::new();
    for _ in 0..2 {
        for (&n, address) in nodes.iter().zip(&advertised) {
            let mut req = heartbeat_request(n, &[], &[]);
            req.advertise = address.clone();
            let reply = s.heartbeat(req).expect("heartbeat");
            if let Some(j) = reply.pcddb.first() {
                peers = j.peers.clone().into_iter().collect();
            }
        }
    }
    // (Compared by length first: a failure must not print the megabyte.)
    let lengths: Vec<(u32, usize)> = peers.iter().map(|(&n, a)| (n, a.len())).collect();
    assert_eq!(
        lengths,
        [
            (nodes[1], advertised[1].len()),
            (nodes[2], advertised[2].len())
        ]
    );
    assert_eq!(peers[&nodes[1]], advertised[1]);
    assert_eq!(peers[&nodes[2]], advertised[2]);
}

/// A heartbeat reply carries the PCDDB address book (`PcddbJob.peers`) only to an agent
/// that does not report holding its version (`HeartbeatRequest.peers_version`): a second beat
/// reporting the current version gets the workflow with no peers; one reporting an old version,
/// or none (0, as agents before versions), gets the whole book; a changed address makes a new
/// version. Before, every reply carried every agent's address for every PCDDB workflow
/// (~25 KB per workflow per reply at 1,000 agents).
#[test]
fn the_address_book_goes_only_to_an_agent_that_does_not_hold_its_version() {
    let dir = scratch("peers-version");
    let mut s = open(&dir, WorkflowConfig::default());
    let nodes: Vec<u32> = ["a", "b", "c", "d"]
        .iter()
        .map(|n| common::register(&mut s, n, 2))
        .collect();
    let address = |n: u32| format!("10.0.0.{n}:7431");
    s.submit("fan.toml", FAN_OUT, "/").expect("submit");
    let beat = |s: &mut State, n: u32, version: u64, advertise: String| {
        let mut req = heartbeat_request(n, &[], &[]);
        req.advertise = advertise;
        req.peers_version = version;
        let reply = s.heartbeat(req).expect("heartbeat");
        let j = reply.pcddb.first().expect("the node balances the workflow");
        let peers: BTreeMap<u32, String> = j.peers.clone().into_iter().collect();
        (j.peers_version, peers)
    };
    for &n in &nodes {
        beat(&mut s, n, 0, address(n));
    }
    let book: BTreeMap<u32, String> = nodes.iter().map(|&n| (n, address(n))).collect();
    let a = nodes[0];
    let (version, peers) = beat(&mut s, a, 0, address(a));
    assert_ne!(version, 0, "a server's book has a version");
    assert_eq!(peers, book, "no version held: the whole book");
    assert_eq!(
        beat(&mut s, a, version, address(a)),
        (version, BTreeMap::new()),
        "the version held: no peers"
    );
    assert_eq!(
        beat(&mut s, a, version.wrapping_sub(1), address(a)),
        (version, book.clone()),
        "another version: the whole book"
    );
    // Node b moves: a new version, which an agent holding the old one is sent whole.
    let moved = "10.0.0.99:7431".to_string();
    beat(&mut s, nodes[1], version, moved.clone());
    let (newer, peers) = beat(&mut s, a, version, address(a));
    assert_ne!(newer, version);
    assert_eq!(peers.get(&nodes[1]), Some(&moved));
    assert_eq!(beat(&mut s, a, newer, address(a)), (newer, BTreeMap::new()));
}

/// The address book holds the live nodes only: a node declared dead and one whose agent left
/// are dropped from it, with a new version, so every agent is sent the book without them and
/// stops forwarding requests there (a removed node was declared dead or left first); a node
/// back from the dead is in the book again from its first beat. Before, every address stayed
/// in the book for ever.
#[test]
fn the_address_book_drops_nodes_declared_dead_or_left_and_takes_back_one_that_returns() {
    let dir = scratch("peers-dead");
    let mut s = open(&dir, WorkflowConfig::default());
    let nodes: Vec<u32> = ["a", "b", "c", "d"]
        .iter()
        .map(|n| common::register(&mut s, n, 2))
        .collect();
    let (a, b, c, d) = (nodes[0], nodes[1], nodes[2], nodes[3]);
    let address = |n: u32| format!("10.0.0.{n}:7431");
    s.submit("fan.toml", FAN_OUT, "/").expect("submit");
    let beat = |s: &mut State, n: u32, version: u64, leaving: &str| {
        let mut req = heartbeat_request(n, &[], &[]);
        req.advertise = address(n);
        req.peers_version = version;
        req.leaving = leaving.into();
        let reply = s.heartbeat(req).expect("heartbeat");
        let j = reply.pcddb.first().expect("the node balances the workflow");
        let mut peers: Vec<u32> = j.peers.keys().copied().collect();
        peers.sort_unstable();
        (j.peers_version, peers)
    };
    for &n in &nodes {
        beat(&mut s, n, 0, "");
    }
    let (version, peers) = beat(&mut s, a, 0, "");
    assert_eq!(peers, [a, b, c, d]);
    // c and d fall silent past the timeout and are declared dead.
    std::thread::sleep(common::SILENCE);
    beat(&mut s, a, version, "");
    beat(&mut s, b, version, "");
    s.check_dead(common::DEAD_TIMEOUT).expect("check dead");
    let (dead, peers) = beat(&mut s, a, version, "");
    assert_ne!(
        dead, version,
        "the book changed: agents holding it are sent the new one"
    );
    assert_eq!(peers, [a, b], "the dead nodes' addresses are dropped");
    // d's agent is back: its address is in the book again, with a new version.
    beat(&mut s, d, dead, "");
    let (back, peers) = beat(&mut s, a, dead, "");
    assert_ne!(back, dead);
    assert_eq!(
        peers,
        [a, b, d],
        "a node back from the dead is reachable again"
    );
    // b's agent leaves: its address goes at the next beat.
    beat(&mut s, b, back, "operator");
    let (left, peers) = beat(&mut s, a, back, "");
    assert_ne!(left, back);
    assert_eq!(peers, [a, d], "a node whose agent left is dropped");
    assert_eq!(
        beat(&mut s, a, left, ""),
        (left, Vec::new()),
        "then nothing changes"
    );
    // Removing the dead node c changes nothing more.
    s.remove_node("c").expect("remove c");
    assert_eq!(beat(&mut s, a, left, ""), (left, Vec::new()));
}

/// A heartbeat reply carries the node's proximity clusters (`PcddbJob.clusters`) only to an
/// agent that does not report holding their version (`HeartbeatRequest.clusters_version`): a
/// beat reporting the current version gets the workflow with no clusters; one reporting an old
/// version, or none (0, as agents before versions, at every beat), gets them. A node that joins
/// or leaves reclusters, with a new version, so the agent holding the old one is sent them
/// again. Before, every reply carried them for every PCDDB workflow (~700 bytes per workflow
/// per reply at 1,000 agents).
#[test]
fn the_clusters_go_only_to_an_agent_that_does_not_hold_their_version() {
    let dir = scratch("clusters-version");
    let mut s = open(&dir, WorkflowConfig::default());
    let nodes: Vec<u32> = ["a", "b", "c", "d"]
        .iter()
        .map(|n| common::register(&mut s, n, 2))
        .collect();
    s.submit("fan.toml", FAN_OUT, "/").expect("submit");
    let beat = |s: &mut State, n: u32, version: u64, leaving: &str| {
        let mut req = heartbeat_request(n, &[], &[]);
        req.advertise = format!("10.0.0.{n}:7431");
        req.clusters_version = version;
        req.leaving = leaving.into();
        let reply = s.heartbeat(req).expect("heartbeat");
        let j = reply.pcddb.first().expect("the node balances the workflow");
        (j.clusters_version, j.clusters.clone())
    };
    for &n in &nodes {
        beat(&mut s, n, 0, "");
    }
    let a = nodes[0];
    let (version, clusters) = beat(&mut s, a, 0, "");
    assert_ne!(version, 0, "a server's clusters have a version");
    assert!(!clusters.is_empty(), "no version held: the node's clusters");
    assert_eq!(
        beat(&mut s, a, 0, ""),
        (version, clusters.clone()),
        "an agent before versions gets them at every beat"
    );
    assert_eq!(
        beat(&mut s, a, version, ""),
        (version, Vec::new()),
        "the version held: no clusters"
    );
    assert_eq!(
        beat(&mut s, a, version.wrapping_sub(1), ""),
        (version, clusters),
        "another version: the clusters"
    );
    // Node e joins: the clusters change, with a new version that an agent holding the old one
    // is sent.
    let e = common::register(&mut s, "e", 2);
    beat(&mut s, e, 0, "");
    let (joined, clusters) = beat(&mut s, a, version, "");
    assert_ne!(joined, version, "a node joined: new clusters");
    assert!(!clusters.is_empty(), "{clusters:?}");
    assert_eq!(beat(&mut s, a, joined, ""), (joined, Vec::new()));
    // Node b's agent leaves: again.
    beat(&mut s, nodes[1], joined, "operator");
    let (left, clusters) = beat(&mut s, a, joined, "");
    assert_ne!(left, joined, "a node left: new clusters");
    assert!(!clusters.is_empty(), "{clusters:?}");
    assert_eq!(
        beat(&mut s, a, left, ""),
        (left, Vec::new()),
        "then nothing changes"
    );
}

/// A heartbeat reply's encoded sizes ([`pcddb_reply_sizes`]), in bytes.
#[derive(Debug)]
struct ReplySizes {
    /// To an agent holding the address book's and the clusters' versions.
    held: usize,
    /// To an agent holding the book's version only (as one before clusters versions): the
    /// node's proximity clusters (`PcddbJob.clusters`) come with it.
    book_held: usize,
    /// How many clusters the node is in.
    clusters: usize,
    /// To an agent holding neither: the whole book and the clusters.
    whole: usize,
}

/// The heartbeat replies to one of `agents` agents, each advertising an address, while one
/// PCDDB workflow runs (no round trips measured).
fn pcddb_reply_sizes(name: &str, agents: u32) -> ReplySizes {
    use prost::Message as _;
    let dir = scratch(name);
    let mut s = open(&dir, WorkflowConfig::default());
    let nodes: Vec<u32> = (0..agents)
        .map(|k| common::register(&mut s, &format!("n{k}"), 2))
        .collect();
    s.submit("fan.toml", FAN_OUT, "/").expect("submit");
    let beat = |s: &mut State, n: u32, peers_version: u64, clusters_version: u64| {
        let mut req = heartbeat_request(n, &[], &[]);
        req.advertise = format!("10.0.{}.{}:7431", n / 256, n % 256);
        req.peers_version = peers_version;
        req.clusters_version = clusters_version;
        s.heartbeat(req).expect("heartbeat")
    };
    for &n in &nodes {
        beat(&mut s, n, 0, 0);
    }
    let whole = beat(&mut s, nodes[0], 0, 0);
    let j = whole.pcddb.first().expect("the node balances the workflow");
    assert_eq!(
        j.peers.len(),
        nodes.len(),
        "no version held: the whole book"
    );
    let clusters = j.clusters.len();
    let (peers_version, clusters_version) = (j.peers_version, j.clusters_version);
    let book_held = beat(&mut s, nodes[0], peers_version, 0);
    let j = book_held
        .pcddb
        .first()
        .expect("the node balances the workflow");
    assert!(j.peers.is_empty(), "the book's version held: no peers");
    assert_eq!(j.clusters.len(), clusters, "no clusters version held");
    let held = beat(&mut s, nodes[0], peers_version, clusters_version);
    let j = held.pcddb.first().expect("the node balances the workflow");
    assert!(j.peers.is_empty(), "the book's version held: no peers");
    assert!(j.clusters.is_empty(), "the clusters' version held: none");
    ReplySizes {
        held: held.encoded_len(),
        book_held: book_held.encoded_len(),
        clusters,
        whole: whole.encoded_len(),
    }
}

/// A heartbeat reply with one PCDDB workflow stays small, and does not grow with the cluster,
/// for an agent that holds the address book's and the clusters' versions; only an agent without
/// the book's version is sent the book (about 20 bytes an agent), and only one without the
/// clusters' version the node's clusters. Before versions, every reply carried the whole book;
/// before clusters versions, every reply carried the clusters (701 bytes at 1,000 agents).
/// Prints the figures that docs/performance.md quotes (`--nocapture`).
#[test]
fn a_pcddb_reply_to_an_agent_holding_the_books_version_does_not_grow_with_the_book() {
    let small = pcddb_reply_sizes("reply-size-100", 100);
    let large = pcddb_reply_sizes("reply-size-1000", 1000);
    for (agents, r) in [(100, &small), (1000, &large)] {
        println!(
            "heartbeat reply, one PCDDB workflow, {agents} agents: {} B with the book's and the \
             clusters' versions held, {} B with the book's only (the {} clusters the node is \
             in), {} B with none held",
            r.held, r.book_held, r.clusters, r.whole
        );
    }
    // Slack for the varints of the random versions and the epoch.
    assert!(
        large.held <= small.held + 24,
        "the reply grew with the cluster: {small:?} {large:?}"
    );
    assert!(
        large.book_held > large.held + large.clusters,
        "the clusters go to an agent without their version: {large:?}"
    );
    assert!(
        large.whole >= large.book_held + 1000 * 15,
        "the book goes to an agent without it: {large:?}"
    );
}

/// A request the launch node sends carries the addresses of its underloaded table's nodes —
/// where it hops — and no other agent's. Before, every request carried every agent's address.
#[test]
fn a_launch_node_request_carries_only_its_tables_addresses() {
    let dir = scratch("journey-peers");
    let mut s = open(
        &dir,
        WorkflowConfig {
            cluster_size: Some(4),
            lt: Some(1),
            mt: std::num::NonZeroU32::new(2),
            ..Default::default()
        },
    );
    let nodes: Vec<u32> = ["n0", "n1", "n2", "n3"]
        .iter()
        .map(|n| common::register(&mut s, n, 2))
        .collect();
    let mut agents = Agents::default();
    for &n in &nodes {
        agents.advertised.insert(n, format!("10.0.0.{n}:7431"));
        agents.beat(&mut s, n);
    }
    s.submit("fan.toml", FAN_OUT, "/").expect("submit");
    // Only n0 and n1 report themselves underloaded: the tables name no other node.
    let mut seen = 0;
    for _ in 0..20 {
        for &n in &nodes[..2] {
            agents.self_check(n);
            let reply = agents.beat(&mut s, n);
            agents.finish_all(n, true);
            for env in reply.balance {
                let msg: Message = serde_json::from_str(&env.message_json).expect("json");
                if let Body::Request(r) = msg.body {
                    let table: BTreeMap<u32, String> = r
                        .table
                        .iter()
                        .map(|t| (t.0, format!("10.0.0.{}:7431", t.0)))
                        .collect();
                    let peers: BTreeMap<u32, String> = env.peers.into_iter().collect();
                    assert_eq!(peers, table, "request {seen}");
                    assert!(!table.is_empty());
                    seen += 1;
                }
            }
        }
        for &n in &nodes[2..] {
            agents.beat(&mut s, n);
        }
    }
    assert!(seen > 0, "the launch node sent requests");
}

/// A workflow's usage, its instances' CPU times as their agents report them (u64s), adds up
/// saturating in its listing. Before, two near the top overflowed the sum while the state's
/// lock was held (a panic in a debug build, at every `job N`). Its peak GPU memory is its
/// instances' largest, and is read back after a restart.
#[test]
fn a_workflows_usage_adds_up_saturating_and_its_gpu_memory_survives_a_restart() {
    let dir = scratch("usage-saturates");
    let mut s = open(&dir, WorkflowConfig::default());
    let n = common::register(&mut s, "n", 2);
    let text = FAN_OUT
        .replace("balancer = \"pcddb\"", "balancer = \"centralised\"")
        .replace("1..=20", "1..=1");
    let job = s.submit("fan.toml", &text, "/").expect("submit").job_id;
    let mut agents = Agents {
        task_base: agents_base(&s, job),
        ..Default::default()
    };
    for _ in 0..10 {
        agents.beat(&mut s, n);
        for (task, attempt) in agents.running.remove(&n).unwrap_or_default() {
            agents.special.entry(n).or_default().push(pb::TaskResult {
                task_id: task,
                attempt,
                success: true,
                started_ns: 1,
                finished_ns: 2,
                usage: Some(pb::TaskUsage {
                    cpu_user_ms: u64::MAX - 1,
                    cpu_system_ms: 7,
                    max_rss_bytes: 1,
                    max_gpu_memory_bytes: 3 << 30,
                }),
                ..Default::default()
            });
        }
    }
    let info = s.job(job).expect("job");
    assert_eq!(info.state, "completed", "{agents:?}");
    assert_eq!(info.cpu_ms, u64::MAX);
    assert!(
        info.apps.iter().all(|a| a.cpu_ms == u64::MAX),
        "{:?}",
        info.apps
    );
    let gpu = |info: &pb::JobInfo| {
        (
            info.max_gpu_memory_bytes,
            info.apps
                .iter()
                .map(|a| a.max_gpu_memory_bytes)
                .collect::<Vec<_>>(),
        )
    };
    let before = gpu(&info);
    assert_eq!(before.0, 3 << 30);
    assert!(before.1.iter().all(|&b| b == 3 << 30), "{before:?}");
    drop(s);
    let s = open(&dir, WorkflowConfig::default());
    assert_eq!(
        gpu(&s.job(job).expect("job")),
        before,
        "read back from the store"
    );
}

/// A workflow of `n` tasks of one instance each, task `k` holding `first + k` bytes of memory:
/// `n` distinct instance sizes, each a word of the workflow's attribute vocabulary.
fn sizes(balancer: &str, first: u64, n: u64) -> String {
    let mut text = format!("balancer = \"{balancer}\"\n");
    for k in 0..n {
        text.push_str(&format!(
            "[[task]]\nname = \"s{k}\"\ninstances = 1\nmemory = \"{}B\"\noutputs = [\"o{k}\"]\n\
             command = \"true\"\n",
            first + k
        ));
    }
    text
}

/// Alice's workflow: `accel` needs the attribute `fpga` and an instance size no other
/// workflow has, `timed` a time limit.
fn fpga_workflow(balancer: &str) -> String {
    format!(
        "balancer = \"{balancer}\"\n\
         [[task]]\nname = \"accel\"\ninstances = 3\nrequires = [\"fpga\"]\nmemory = \"1000B\"\n\
         outputs = [\"a\"]\ncommand = \"true\"\n\
         [[task]]\nname = \"timed\"\ninstances = 1\ntime_limit = \"1h\"\noutputs = [\"t\"]\n\
         command = \"true\"\n"
    )
}

/// Nodes beating as agents do: each reports what it runs; `done` ends all of it, successfully.
struct Beats {
    running: HashMap<u32, Vec<(u64, u32)>>,
}

impl Beats {
    fn beat(&mut self, s: &mut State, n: u32, done: bool) {
        let mine = self.running.remove(&n).unwrap_or_default();
        let results: Vec<(u64, u32, bool)> = if done {
            mine.iter().map(|&(t, a)| (t, a, true)).collect()
        } else {
            Vec::new()
        };
        let running = if done { Vec::new() } else { mine };
        let r = common::beat(s, n, &running, &results);
        let now = self.running.entry(n).or_default();
        now.extend(running);
        now.extend(r.assignments.iter().map(|a| (a.task_id, a.attempt)));
    }
}

/// The node each instance of task `app` of `job` last ran on.
fn nodes_of(s: &State, job: u64, app: &str) -> Vec<String> {
    s.tasks(job)
        .expect("tasks")
        .tasks
        .into_iter()
        .filter(|t| t.app == app)
        .map(|t| t.node)
        .collect()
}

/// The attribute vocabulary is each workflow's own: a user whose workflows — finished or
/// running — hold 64 distinct instance sizes between them takes no bit from another user's
/// workflow, which is accepted with new requirements and placed only on the nodes that meet
/// them, before and after a restart. One workflow with more than 64 distinct words is still
/// refused, naming the task and field of the 65th.
#[test]
fn one_users_workflows_leave_another_users_requirements_their_bits() {
    let dir = scratch("vocab");
    let mut s = open(&dir, WorkflowConfig::default());
    let plain = common::register(&mut s, "plain", 64);
    let fpga = common::register_with(&mut s, "fpga", 4, &["fpga"]);
    let nodes = [plain, fpga];
    let mut b = Beats {
        running: HashMap::new(),
    };
    for &n in &nodes {
        b.beat(&mut s, n, false);
    }
    s.on_add_user("mallory", false).expect("mallory");
    s.on_add_user("alice", false).expect("alice");
    let submit = |s: &mut State, who: &str, origin: &str, text: String| {
        s.on_submit_as(
            hetsched_server::state::types::Submission {
                origin: origin.into(),
                text,
                workdir: "/".into(),
                ..Default::default()
            },
            who,
        )
        .map(|x| x.job_id)
    };
    // 32 sizes in a workflow that runs to its end, 32 more in one left running.
    let done = submit(&mut s, "mallory", "a.toml", sizes("centralised", 1, 32)).expect("a");
    for _ in 0..40 {
        for &n in &nodes {
            b.beat(&mut s, n, true);
        }
        if s.get_job(done).expect("a").state == "completed" {
            break;
        }
    }
    assert_eq!(s.get_job(done).expect("a").state, "completed");
    let running = submit(&mut s, "mallory", "b.toml", sizes("centralised", 33, 32)).expect("b");
    for &n in &nodes {
        b.beat(&mut s, n, false);
    }
    assert_eq!(s.get_job(running).expect("b").state, "running");
    // Alice's requirement, size and time limit are words none of those has.
    let job = submit(&mut s, "alice", "fpga.toml", fpga_workflow("centralised"))
        .expect("another user's workflow is not refused for want of bits");
    for _ in 0..2 {
        for &n in &nodes {
            b.beat(&mut s, n, false);
        }
    }
    let placed = nodes_of(&s, job, "accel");
    assert!(
        placed.iter().all(|n| n.is_empty() || n == "fpga"),
        "{placed:?}"
    );
    assert!(placed.iter().any(|n| n == "fpga"), "{placed:?}");
    // A restart rebuilds each workflow's words from its own file: the same placement.
    drop(s);
    let mut s = open(&dir, WorkflowConfig::default());
    for _ in 0..40 {
        for &n in &nodes {
            b.beat(&mut s, n, true);
        }
        if s.get_job(job).expect("alice's").state == "completed" {
            break;
        }
    }
    assert_eq!(s.get_job(job).expect("alice's").state, "completed");
    assert_eq!(nodes_of(&s, job, "accel"), ["fpga", "fpga", "fpga"]);
    assert_eq!(s.get_job(running).expect("b").state, "completed");
    // The limit is per workflow: 64 words are accepted, a 65th is refused where it is written.
    submit(&mut s, "alice", "c64.toml", sizes("pcddb", 2000, 64)).expect("64 words");
    let bad = submit(&mut s, "alice", "c65.toml", sizes("pcddb", 3000, 65))
        .expect_err("65 words")
        .to_string();
    assert!(
        bad.contains("c65.toml:389:10: task[64].memory") && bad.contains("`s64`"),
        "{bad}"
    );
}

/// Under `pcddb` the masks go to the agents (`PcddbJob.attributes`, the requests' and grants'
/// `requires`): each workflow's are over its own vocabulary. A held workflow of one user with
/// 64 distinct instance sizes leaves another user's workflow its bits, and the agents' machines
/// place its instances only on the node that meets them.
#[test]
fn a_held_workflow_of_64_sizes_leaves_another_users_pcddb_workflow_its_bits() {
    let dir = scratch("vocab-pcddb");
    let mut s = open(&dir, WorkflowConfig::default());
    let mut agents = Agents::default();
    let plain = common::register(&mut s, "plain", 2);
    let fpga = common::register_with(&mut s, "fpga", 2, &["fpga"]);
    s.on_add_user("mallory", false).expect("mallory");
    s.on_add_user("alice", false).expect("alice");
    let sub = |origin: &str, text: String, hold: bool| hetsched_server::state::types::Submission {
        origin: origin.into(),
        text,
        workdir: "/".into(),
        hold,
        ..Default::default()
    };
    let held = s
        .on_submit_as(sub("a.toml", sizes("pcddb", 1, 64), true), "mallory")
        .expect("64 words in one workflow")
        .job_id;
    let job = s
        .on_submit_as(sub("fpga.toml", fpga_workflow("pcddb"), false), "alice")
        .expect("another user's workflow is not refused for want of bits")
        .job_id;
    for _ in 0..40 {
        for n in [plain, fpga] {
            agents.self_check(n);
            agents.beat(&mut s, n);
            agents.finish_all(n, true);
        }
        if s.get_job(job).expect("alice's").state == "completed" {
            break;
        }
    }
    assert_eq!(s.get_job(job).expect("alice's").state, "completed");
    assert_eq!(nodes_of(&s, job, "accel"), ["fpga", "fpga", "fpga"]);
    assert_eq!(s.get_job(held).expect("held").state, "pending");
}

/// A consumer whose agent still fetches its inputs is listed apart from one whose program
/// runs: `fetching` in `hetsched tasks`, counted apart among the running in `hetsched job`
/// and `/metrics` (`hetsched_tasks_fetching`). Once its agent says its program started, it is
/// running from that start (`started_ns`), with the fetch's time beside it (`fetch_ms`), also
/// after a restart. Before, both looked the same: running since the fetch began.
#[test]
fn an_instance_fetching_its_inputs_is_listed_apart_from_one_whose_program_runs() {
    let dir = scratch("fetching");
    let workflow = producer_and_consumers("centralised", 1);
    let (job, consumer) = {
        let mut s = open(&dir, WorkflowConfig::default());
        let a = common::register(&mut s, "a", 2);
        let job = s.submit("wf.toml", &workflow, "/").expect("submit").job_id;
        let r = s.heartbeat(heartbeat_request(a, &[], &[])).expect("beat");
        let p = (r.assignments[0].task_id, r.assignments[0].attempt);
        let r = s
            .heartbeat(heartbeat_request(a, &[], &[(p.0, p.1, true)]))
            .expect("beat");
        assert_eq!(r.assignments.len(), 1, "the consumer is sent");
        let c = (r.assignments[0].task_id, r.assignments[0].attempt);
        let listed = |s: &State| {
            s.tasks(job)
                .expect("tasks")
                .tasks
                .into_iter()
                .find(|t| t.id == c.0)
                .expect("the consumer is listed")
        };
        let fetch_began: u64 = 1_700_000_000_000_000_000;
        let beat = |s: &mut State, fetching: bool, program_started_ns: u64| {
            let mut req = heartbeat_request(a, &[], &[]);
            req.running = vec![pb::RunningTask {
                task_id: c.0,
                attempt: c.1,
                started_ns: fetch_began,
                fetching,
                program_started_ns,
                ..Default::default()
            }];
            s.heartbeat(req).expect("beat");
        };
        beat(&mut s, true, 0);
        let t = listed(&s);
        assert_eq!((t.state.as_str(), t.fetching), ("running", true), "{t:?}");
        let counts = s.job(job).expect("job").counts.expect("counts");
        assert_eq!((counts.running, counts.fetching), (1, 1), "{counts:?}");
        let started = fetch_began + 2_500_000_000;
        beat(&mut s, false, started);
        let t = listed(&s);
        assert_eq!(
            (t.state.as_str(), t.fetching, t.started_ns, t.fetch_ms),
            ("running", false, started, 2_500),
            "{t:?}"
        );
        let counts = s.job(job).expect("job").counts.expect("counts");
        assert_eq!((counts.running, counts.fetching), (1, 0), "{counts:?}");
        // It fetches again (a new attempt would); `/metrics` counts it apart.
        beat(&mut s, true, 0);
        let metrics = s.metrics();
        let s = std::sync::Arc::new(std::sync::Mutex::new(s));
        let reg = hetsched_server::metrics::registry(&metrics, s.clone(), "fifo");
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &reg).expect("encode");
        assert!(
            text.lines().any(|l| l == "hetsched_tasks_fetching 1"),
            "in\n{text}"
        );
        drop(reg);
        (job, c)
    };
    // A restart keeps the program's start and the fetch's time.
    let s = open(&dir, WorkflowConfig::default());
    let t = s
        .tasks(job)
        .expect("tasks")
        .tasks
        .into_iter()
        .find(|t| t.id == consumer.0)
        .expect("listed");
    assert_eq!(
        (t.fetching, t.started_ns, t.fetch_ms),
        (false, 1_700_000_002_500_000_000, 2_500),
        "{t:?}"
    );
}

/// `gen` requires `prod`, which only `p` offers; `slow` (on `q`, the only `slow` node) delays
/// the consumer `use`, which reads both. `p` dies after `gen` succeeded: once `use` is placed
/// (on `q` or `r`), `gen` must be produced again, and only on a `prod` node — none is live, so
/// it waits saying why, and runs on `p2`, a `prod` node that joins. Before, it ran again on
/// the node its consumer waited on (`Workflows::waiting_for` ignored its requirements), under
/// both balancers.
fn a_lost_output_is_produced_again_only_where_its_requirements_are_met(balancer: &str) {
    let dir = scratch(&format!("reproduce-requires-{balancer}"));
    let mut s = open(
        &dir,
        WorkflowConfig {
            cluster_size: Some(3),
            ..WorkflowConfig::default()
        },
    );
    let p = common::register_with(&mut s, "p", 1, &["prod"]);
    let q = common::register_with(&mut s, "q", 2, &["slow"]);
    let r = common::register(&mut s, "r", 1);
    let mut agents = Agents::default();
    for n in [p, q, r] {
        agents.beat(&mut s, n);
    }
    let text = format!(
        r#"
balancer = "{balancer}"
[[task]]
name = "gen"
instances = 1
outputs = ["g"]
requires = ["prod"]
command = "echo 1 > {{output:g}}"
[[task]]
name = "slow"
instances = 1
outputs = ["s"]
requires = ["slow"]
command = "echo 1 > {{output:s}}"
[[task]]
name = "use"
instances = 1
inputs = ["g", "s"]
command = "cat {{input:g}} {{input:s}}"
"#
    );
    let job = s.submit("wf.toml", &text, "/").expect("submit").job_id;
    for _ in 0..10 {
        agents.round(&mut s, &[p, q, r]);
        if agents.assigned.len() == 2 {
            break;
        }
    }
    assert_eq!(agents.assigned.len(), 2, "gen and slow run: {agents:?}");
    agents.finish_all(p, true);
    agents.beat(&mut s, p);
    // `p` goes silent and is declared dead with `gen`'s output.
    std::thread::sleep(crate::common::SILENCE);
    for n in [q, r] {
        agents.beat(&mut s, n);
    }
    s.check_dead(crate::common::DEAD_TIMEOUT)
        .expect("dead check");
    // `slow` ends: `use` is placed, and `gen` must run again.
    agents.finish_all(q, true);
    for _ in 0..10 {
        agents.round(&mut s, &[q, r]);
    }
    let gen_runs = |a: &Agents| -> Vec<u32> {
        a.assigned
            .iter()
            .filter(|&&(_, i, _)| i == 0)
            .map(|&(n, _, _)| n)
            .collect()
    };
    assert_eq!(
        gen_runs(&agents),
        vec![p],
        "gen ran again on a node without `prod`: {agents:?}"
    );
    let info = s.get_job(job).expect("job");
    assert!(
        info.pending_reason
            .contains("no live node can run task `gen`"),
        "{info:?}"
    );
    let p2 = common::register_with(&mut s, "p2", 1, &["prod"]);
    agents.run_until_completed(&mut s, &[q, r, p2], job, 40);
    assert_eq!(
        s.get_job(job).expect("job").state,
        "completed",
        "{agents:?}"
    );
    assert_eq!(gen_runs(&agents), vec![p, p2], "{agents:?}");
}

#[test]
fn a_lost_output_is_produced_again_only_where_its_requirements_are_met_centralised() {
    a_lost_output_is_produced_again_only_where_its_requirements_are_met("centralised");
}

#[test]
fn a_lost_output_is_produced_again_only_where_its_requirements_are_met_pcddb() {
    a_lost_output_is_produced_again_only_where_its_requirements_are_met("pcddb");
}

/// Centralised: `gen` ran on `p`; `slow`'s end on `q` readies the two `use` instances, placed
/// on `p` and on `q`. `p`'s agent is killed, so it never beats again. When `p` is declared
/// dead, what waited for it is placed again and `gen` produced again at once, and `q` — an
/// idle agent, whose next beat may be a minute away — is woken for them. Before, nothing
/// happened until some node of the workflow beat (58 s with the default idle heartbeat).
/// Meanwhile a consumer that could not fetch `gen`'s output says what it waits for.
#[test]
fn a_dead_nodes_placed_instances_and_lost_outputs_are_placed_again_at_once() {
    let dir = scratch("dead-node-wakes");
    let mut s = open(&dir, WorkflowConfig::default());
    let p = common::register(&mut s, "p", 1);
    let q = common::register_with(&mut s, "q", 2, &["slow"]);
    let mut agents = Agents::default();
    for n in [p, q] {
        agents.beat(&mut s, n);
    }
    let text = r#"
balancer = "centralised"
[[task]]
name = "gen"
instances = 1
outputs = ["g"]
command = "echo 1 > {output:g}"
[[task]]
name = "slow"
instances = 1
outputs = ["s"]
requires = ["slow"]
command = "echo 1 > {output:s}"
[[task]]
name = "use"
instances = 2
inputs = ["g", "s"]
command = "cat {input:g} {input:s}"
"#;
    let job = s.submit("wf.toml", text, "/").expect("submit").job_id;
    for _ in 0..5 {
        agents.round(&mut s, &[p, q]);
    }
    assert_eq!(
        agents.assigned,
        vec![(p, 0, 1), (q, 1, 1)],
        "gen on p, slow on q"
    );
    agents.finish_all(p, true);
    agents.beat(&mut s, p);
    // `p`'s agent is killed now; `slow` ends and the consumers are placed, one on `p`.
    agents.finish_all(q, true);
    agents.beat(&mut s, q);
    assert_eq!(agents.assigned.len(), 3, "one use runs on q: {agents:?}");
    std::thread::sleep(crate::common::SILENCE);
    agents.beat(&mut s, q);
    let mut woken = s.await_work(q, common::IDENTITY).expect("its wake-ups");
    woken.borrow_and_update();
    s.check_dead(crate::common::DEAD_TIMEOUT)
        .expect("dead check");
    assert!(
        woken.has_changed().unwrap_or(false),
        "p's death wakes q for the consumer placed on p and gen's output lost there"
    );
    // The consumer running on `q` could not fetch `gen`'s output: it waits, saying why.
    agents.fetch_fails(q);
    let before = agents.assigned.len();
    agents.beat(&mut s, q);
    assert_eq!(
        agents.assigned.get(before),
        Some(&(q, 0, 2)),
        "gen runs again on q first: {agents:?}"
    );
    let info = s.get_job(job).expect("job");
    assert!(
        info.pending_reason
            .starts_with("inputs: 1 ready instance waits for inputs lost")
            && info.pending_reason.contains("gen[1]"),
        "{info:?}"
    );
    agents.run_until_completed(&mut s, &[q], job, 20);
    assert_eq!(
        s.get_job(job).expect("job").state,
        "completed",
        "{agents:?}"
    );
}

/// A workflow task's `memory` reaches its agent in the task spec, which the agent enforces as
/// a batch task's (`memory limit of … exceeded`). Before, instances were not limited.
#[test]
fn a_workflow_tasks_memory_is_the_limit_in_its_instances_task_spec() {
    let dir = scratch("memory-limit");
    let mut s = open(&dir, WorkflowConfig::default());
    let n = common::register(&mut s, "n0", 2);
    let mut agents = Agents::default();
    agents.beat(&mut s, n);
    s.submit(
        "mem.toml",
        "balancer = \"centralised\"\n[[task]]\nname = \"big\"\ninstances = 1\n\
         outputs = [\"o\"]\ncommand = \"echo > {output:o}\"\nmemory = \"20MiB\"\n\
         [[task]]\nname = \"free\"\ninstances = 1\noutputs = [\"o2\"]\n\
         command = \"echo > {output:o2}\"\n",
        "/",
    )
    .expect("submit");
    let reply = agents.beat(&mut s, n);
    assert_eq!(reply.assignments.len(), 2, "{reply:?}");
    let limits: BTreeMap<String, u64> = reply
        .specs
        .iter()
        .map(|spec| (spec.app.clone(), spec.memory_limit_bytes))
        .collect();
    assert_eq!(
        limits,
        BTreeMap::from([("big".into(), 20 << 20), ("free".into(), 0)])
    );
}

/// The result of attempt `attempt` of task `task_id`, a success from `started_ns` to
/// `finished_ns`.
fn succeeded_between(
    task_id: u64,
    attempt: u32,
    started_ns: u64,
    finished_ns: u64,
) -> pb::TaskResult {
    pb::TaskResult {
        started_ns,
        finished_ns,
        ..succeeded(task_id, attempt)
    }
}

/// A task's mean run time counts each instance by its latest success: `seed` ran 10 ms, its
/// output was lost (its consumers could not fetch it), and it ran 30 ms again — its mean is
/// 30 ms, the same after a restart, which rebuilds it from the stored rows. Before, the live
/// mean counted both runs (20 ms) and read 30 ms only after a restart.
#[test]
fn a_tasks_mean_run_time_counts_each_instances_latest_success_across_a_restart() {
    let dir = scratch("mean-reproduced");
    let mut s = open(&dir, WorkflowConfig::default());
    let n = common::register(&mut s, "n0", 2);
    let mut agents = Agents::default();
    agents.beat(&mut s, n);
    let text = FAN_OUT
        .replace("balancer = \"pcddb\"", "balancer = \"centralised\"")
        .replace("1..=20", "1..=2");
    let job = s.submit("fan.toml", &text, "/").expect("submit").job_id;
    let run_seed = |agents: &mut Agents, s: &mut State, attempt: u32, ms: u64| {
        agents.beat(s, n);
        let (task, a) = agents.running.remove(&n).expect("running")[0];
        assert_eq!((task - agents.task_base, a), (0, attempt), "{agents:?}");
        agents.special.entry(n).or_default().push(succeeded_between(
            task,
            a,
            1_000_000,
            1_000_000 + ms * 1_000_000,
        ));
        agents.beat(s, n);
    };
    agents.task_base = agents_base(&s, job);
    run_seed(&mut agents, &mut s, 1, 10);
    let seed_mean = |s: &State| s.job(job).expect("job").apps[0].mean_cpu_ms;
    assert_eq!(seed_mean(&s), 10.0);
    // Both consumers run and cannot fetch the seed's output: it is produced again.
    agents.beat(&mut s, n);
    assert_eq!(agents.running[&n].len(), 2, "{agents:?}");
    agents.fetch_fails(n);
    run_seed(&mut agents, &mut s, 2, 30);
    assert_eq!(seed_mean(&s), 30.0, "its latest success only");
    drop(s);
    let s = open(&dir, WorkflowConfig::default());
    assert_eq!(seed_mean(&s), 30.0, "the same after a restart");
}

/// Under `pcddb` each heartbeat reply tells the node's machine the cores other work holds
/// there in the server's view (`PcddbJob.foreign_cores`, counted as the centralised
/// dispatcher's node report counts them): a batch task holding both of `b`'s cores makes every
/// reply to `b` say 2, so `b`'s machine (LT 1 per core) never finds itself underloaded and
/// takes nothing, and every instance runs on `a`, whose replies say 0 while the workflow's own
/// instances run there (they are the machine's own). Before, a machine counted its workflow's
/// instances only: `b` read idle, took MT × cores instances, and they waited there behind the
/// batch task while `a` idled.
#[test]
fn a_pcddb_nodes_machine_counts_the_cores_a_batch_task_holds_there_and_takes_nothing() {
    let dir = scratch("foreign-cores");
    let mut s = open(
        &dir,
        WorkflowConfig {
            lt: Some(1),
            mt: std::num::NonZeroU32::new(2),
            ..Default::default()
        },
    );
    let b = common::register(&mut s, "b", 2);
    let a = common::register(&mut s, "a", 2);
    let mut agents = Agents::default();
    agents.beat(&mut s, b);
    agents.beat(&mut s, a);
    let hold = s
        .on_submit(hetsched_server::state::types::Submission {
            origin: "hold.toml".into(),
            text: "[[application]]\nname = \"hold\"\ntasks = 1\nrequires = [\"node:b\"]\n\
                   [application.cpu]\ncommand = \"sleep 600\"\ncores = 2\n"
                .into(),
            workdir: "/".into(),
            ..Default::default()
        })
        .expect("submit")
        .job_id;
    let r = agents.beat(&mut s, b);
    assert_eq!(r.assignments.len(), 1, "the batch task runs on b");
    // It keeps running there (the agent reports it at every beat); it is no instance.
    agents.assigned.clear();
    let job = s
        .submit(
            "wf.toml",
            "balancer = \"pcddb\"\n[[task]]\nname = \"A\"\ninstances = 6\ncost = \"1s\"\n\
             command = \"true\"\n",
            "/",
        )
        .expect("submit")
        .job_id;
    let mut said: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
    for _ in 0..30 {
        for n in [a, b] {
            agents.self_check(n);
            let r = agents.beat(&mut s, n);
            for j in r.pcddb.iter().filter(|j| j.job_id == job) {
                said.entry(n).or_default().push(j.foreign_cores);
            }
        }
        agents.finish_all(a, true);
        if s.get_job(job).expect("job").state == "completed" {
            break;
        }
    }
    assert_eq!(s.get_job(job).expect("job").state, "completed");
    let to_b = &said[&b];
    assert!(!to_b.is_empty() && to_b.iter().all(|&c| c == 2), "{to_b:?}");
    let to_a = &said[&a];
    assert!(!to_a.is_empty() && to_a.iter().all(|&c| c == 0), "{to_a:?}");
    let runs = agents.runs();
    assert_eq!(runs.len(), 6, "{runs:?}");
    assert!(runs.values().all(|on| on == &[a]), "{runs:?}");
    assert_eq!(s.get_job(hold).expect("batch job").state, "running");
}

/// Under `pcddb`, with the only node that can run a workflow held whole by a batch task, its
/// machine counts itself loaded and takes nothing: the ready instances wait at the launch node,
/// and the job says why (as a batch job's `resources`), not `pending` with no reason. Once the
/// batch task ends they run there and the reason goes.
#[test]
fn a_pcddb_workflow_waiting_behind_other_work_on_every_node_says_why() {
    let dir = scratch("foreign-reason");
    let mut s = open(
        &dir,
        WorkflowConfig {
            lt: Some(1),
            mt: std::num::NonZeroU32::new(2),
            ..Default::default()
        },
    );
    let b = common::register(&mut s, "b", 2);
    let mut agents = Agents::default();
    agents.beat(&mut s, b);
    s.on_submit(hetsched_server::state::types::Submission {
        origin: "hold.toml".into(),
        text: "[[application]]\nname = \"hold\"\ntasks = 1\n\
               [application.cpu]\ncommand = \"sleep 600\"\ncores = 2\n"
            .into(),
        workdir: "/".into(),
        ..Default::default()
    })
    .expect("submit");
    let r = agents.beat(&mut s, b);
    assert_eq!(r.assignments.len(), 1, "the batch task runs on b");
    agents.assigned.clear();
    let job = s
        .submit(
            "wf.toml",
            "balancer = \"pcddb\"\n[[task]]\nname = \"A\"\ninstances = 2\ncost = \"1s\"\n\
             command = \"true\"\n",
            "/",
        )
        .expect("submit")
        .job_id;
    for _ in 0..5 {
        agents.self_check(b);
        agents.beat(&mut s, b);
    }
    let j = s.job(job).expect("job");
    assert_eq!(j.state, "pending");
    assert_eq!(
        (j.pending_reason.as_str(), j.blocked),
        (
            "resources: 2 ready instances of task `A` wait for a node with a free core: the \
             nodes that can run it are busy",
            false
        )
    );
    // The batch task ends (the only task running there): the node takes the instances, and
    // the workflow completes.
    for (task, attempt) in agents.running.remove(&b).unwrap_or_default() {
        agents
            .results
            .entry(b)
            .or_default()
            .push((task, attempt, true));
    }
    agents.run_until_completed(&mut s, &[b], job, 30);
    assert!(s.job(job).expect("job").pending_reason.is_empty());
}
