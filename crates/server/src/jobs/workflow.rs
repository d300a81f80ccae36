//! Workflows (issue 13, spec 05): task graphs whose instances wait for the outputs of their
//! producers — the job kind of `hetsched submit workflow.toml`.
//!
//! The file is parsed by the core's one workflow parser ([`parse_runtime_workflow`]). Readiness
//! and placement are the core's sans-IO machines, driven here exactly as the simulator drives
//! them (`crates/sim/src/graph.rs`):
//! - `centralised`: the core's [`Dispatcher`] (its [`InstanceGraph`] readies instances; each
//!   ready instance goes to the member with the fewest instances per core, from the nodes'
//!   reports — here, each heartbeat is the node's report);
//! - `pcddb`: the core's [`LaunchNode`] runs here (the task manager: packs ready instances into
//!   allocation requests, receives replies and returns); the nodes' [`PcddbNode`]s run in the
//!   agents (`crates/agent/src/balance.rs`), which self-check, accept `MT × cores − x` instances
//!   and pass requests on to each other over gRPC. Messages between the launch node and an agent
//!   ride the heartbeat (its request carries the agent's, its reply the launch node's).
//!
//! [`PcddbNode`]: hetsched_core::policy::graph::pcddb::PcddbNode
//!
//! What the machines do not model, this module adds around them:
//! - **results** are the heartbeat's (durable, acknowledged); a success feeds `Result` to the
//!   machine, which readies the dependants;
//! - **failures**: a failed attempt runs again while the task's `retries` last (placed on the
//!   least-loaded live node, outside the machine); then the instance fails and so does every
//!   instance depending on it, transitively, with a message naming the cause; the rest goes on;
//! - **data flow**: an output stays on the node that produced it; a consumer's assignment names
//!   each input's node and path, and its agent fetches them first. Before a consumer is sent,
//!   every input's node must be alive; an output whose node died is produced again (its
//!   producer runs again, outside the machine), and the consumer waits for it;
//! - **losses**: an instance lost with its node (or its agent) runs again;
//! - **restart**: jobs and instances are rows of `wf_jobs` / `wf_instances`; the graph is rebuilt
//!   by replaying the successes, and ready instances not running are placed again.
//!
//! Ids: job `seq` (the state's job id, one sequence across kinds), instance `i` of it is task
//! `Kind::Workflow.id(seq << 32 | i)`, task `t`'s spec is `Kind::Workflow.id(seq << 32 | t)` (a
//! separate key space).

use super::{Ctx, JobKind, Kind, Outbox, Read};
use crate::config::ServerConfig;
use crate::state::StateError;
use crate::state::types::{
    AppInfo, BalanceEnvelope, Dispatch, HeartbeatReport, InstanceData, JobInfo, JobsPage, NodeInfo,
    PcddbJob, RunningTask, Submission, Submitted, TaskCounts, TaskInfo, TaskResult, TaskSpec,
    TasksPage, WorkflowInput,
};
use crate::store::StoreError;
use hetsched_core::NodeId;
use hetsched_core::input::workflow_runtime::{RuntimeWorkflow, parse_runtime_workflow};
use hetsched_core::model::latency::LatencyMatrix;
use hetsched_core::model::workflow::DependencyKind;
use hetsched_core::policy::graph::centralised::Dispatcher;
use hetsched_core::policy::graph::clustering::{min_cluster_size, proximity_clusters};
use hetsched_core::policy::graph::dag::InstanceGraph;
use hetsched_core::policy::graph::pcddb::LaunchNode;
use hetsched_core::policy::graph::{
    BalancerKind, Body, ClusterId, GraphNode, InstanceId, LaunchEvent, Message, Outgoing,
    Thresholds,
};
use rusqlite::params;
use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use tracing::{info, warn};

/// How an agent's result begins when an input could not be fetched (see the agent's
/// `dataflow::INPUT_UNAVAILABLE`).
const INPUT_UNAVAILABLE: &str = "input unavailable: node ";

/// A `wf_jobs` row: id, name, origin, text, workdir, balancer, submitted_ns, finished_ns.
type StoredJob = (u64, String, String, String, String, String, u64, u64);

/// The one-way latency assumed for a pair of agents that did not measure each other.
pub const UNMEASURED: u64 = 1_000_000_000;

/// The launch node's id in the core's messages (the server is no node).
pub const LAUNCH: NodeId = NodeId(u32::MAX - 1);

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS wf_jobs(id INTEGER PRIMARY KEY, name TEXT NOT NULL, origin TEXT NOT NULL,
  text TEXT NOT NULL, workdir TEXT NOT NULL, balancer TEXT NOT NULL, submitted_ns INTEGER NOT NULL,
  finished_ns INTEGER NOT NULL, key TEXT NOT NULL DEFAULT '');
CREATE TABLE IF NOT EXISTS wf_instances(job INTEGER NOT NULL, instance INTEGER NOT NULL,
  state TEXT NOT NULL, attempt INTEGER NOT NULL, node INTEGER, started_ns INTEGER NOT NULL,
  finished_ns INTEGER NOT NULL, exit_code INTEGER NOT NULL, message TEXT NOT NULL,
  failures INTEGER NOT NULL, produced INTEGER NOT NULL DEFAULT 0,
  PRIMARY KEY(job, instance));
";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum St {
    Waiting,
    Ready,
    Running,
    Done,
    Failed,
}

impl St {
    fn as_str(self) -> &'static str {
        match self {
            St::Waiting => "waiting",
            St::Ready => "ready",
            St::Running => "running",
            St::Done => "succeeded",
            St::Failed => "failed",
        }
    }
    fn parse(s: &str) -> St {
        match s {
            "ready" => St::Ready,
            "running" => St::Running,
            "succeeded" => St::Done,
            "failed" => St::Failed,
            _ => St::Waiting,
        }
    }
}

#[derive(Clone, Debug)]
struct Inst {
    st: St,
    attempt: u32,
    /// Where it runs, or where its output is once done.
    node: Option<u32>,
    started_ns: u64,
    finished_ns: u64,
    exit_code: i32,
    message: String,
    failures: u32,
    /// Produced again (its output was lost), outside the machine.
    reproducing: bool,
    /// Succeeded at least once (the graph counts it finished, even while it is produced again).
    produced: bool,
}

enum Machine {
    Centralised(Dispatcher),
    Pcddb(LaunchNode),
}

impl Machine {
    fn handle(&mut self, e: LaunchEvent, now: u64) -> Vec<Outgoing> {
        match self {
            Machine::Centralised(m) => m.handle(e, now),
            Machine::Pcddb(m) => m.handle(e, now),
        }
    }
}

struct WfJob {
    seq: u64,
    name: String,
    origin: String,
    text: String,
    workdir: String,
    balancer: BalancerKind,
    rt: RuntimeWorkflow,
    /// First instance of each task (and the total at the end).
    offset: Vec<u32>,
    insts: Vec<Inst>,
    machine: Machine,
    submitted_ns: u64,
    finished_ns: u64,
    /// Instances the machine sent to a node, to hand it at its next heartbeat.
    assigned: HashMap<u32, VecDeque<u32>>,
    /// Instances placed outside the machine (retries, losses, re-production, restart).
    free: VecDeque<u32>,
    /// Consumers waiting for a lost input to be produced again.
    blocked: Vec<u32>,
    /// Messages from the launch node to a node, for its next heartbeat.
    to_node: HashMap<u32, Vec<Message>>,
    /// Messages the launch node sent and received.
    sent: u64,
    received: u64,
}

impl WfJob {
    /// The job id: `seq` is the state's job id (one sequence across kinds).
    fn id(&self) -> u64 {
        self.seq
    }
    fn task_id(&self, i: u32) -> u64 {
        Kind::Workflow.id((self.seq << 32) | u64::from(i))
    }
    fn task_of(&self, i: u32) -> (usize, u32) {
        let t = self.offset.partition_point(|&o| o <= i).saturating_sub(1);
        (t, i - self.offset[t])
    }
    fn dir(&self, i: u32) -> String {
        let (t, k) = self.task_of(i);
        format!(
            "{}/{}-{k}",
            self.seq,
            crate::jobs::workflow::safe(&self.rt.parsed.workflow.tasks[t].name)
        )
    }
    /// The producer instances of instance `i`, with the data items each provides.
    fn producers(&self, i: u32) -> Vec<(u32, Vec<String>)> {
        let (c, k) = self.task_of(i);
        let tasks = &self.rt.parsed.workflow.tasks;
        let value_pos = k / tasks[c].processes;
        let mut out = Vec::new();
        for d in &tasks[c].depends_on {
            let p = d.producer;
            let range = match d.kind {
                DependencyKind::InstanceWise => {
                    let pp = tasks[p].processes;
                    let first = self.offset[p] + value_pos * pp;
                    first..first + pp
                }
                DependencyKind::All => self.offset[p]..self.offset[p + 1],
            };
            for j in range {
                out.push((j, d.data.clone()));
            }
        }
        out
    }
    /// The consumer instances of instance `i`.
    fn consumers(&self, i: u32) -> Vec<u32> {
        let (p, k) = self.task_of(i);
        let tasks = &self.rt.parsed.workflow.tasks;
        let value_pos = k / tasks[p].processes;
        let mut out = Vec::new();
        for (c, t) in tasks.iter().enumerate() {
            for d in t.depends_on.iter().filter(|d| d.producer == p) {
                match d.kind {
                    DependencyKind::InstanceWise => {
                        let pc = t.processes;
                        let first = self.offset[c] + value_pos * pc;
                        out.extend(first..first + pc);
                    }
                    DependencyKind::All => out.extend(self.offset[c]..self.offset[c + 1]),
                }
            }
        }
        out
    }
    fn finished(&self) -> bool {
        self.insts
            .iter()
            .all(|x| matches!(x.st, St::Done | St::Failed))
    }
    fn state(&self) -> &'static str {
        if !self.finished() {
            if self
                .insts
                .iter()
                .any(|x| x.st != St::Waiting && x.st != St::Ready)
            {
                "running"
            } else {
                "pending"
            }
        } else if self.insts.iter().any(|x| x.st == St::Failed) {
            "failed"
        } else {
            "completed"
        }
    }
}

/// A task name as one path component.
pub fn safe(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// The workflow job kind.
pub struct Workflows {
    jobs: BTreeMap<u64, WfJob>,
    default_balancer: BalancerKind,
    thresholds: Thresholds,
    /// Each node's `AgentData` address, from its heartbeats.
    addresses: BTreeMap<u32, String>,
    /// Each node's PCDDB figures, from its heartbeats: (sent, received, held).
    counters: BTreeMap<u32, (u64, u64, u32)>,
    /// When these launch nodes were built (this server's start, or the last rollback).
    epoch: u64,
    /// Round trips the agents measured: (from, to) → ns.
    rtt: BTreeMap<(u32, u32), u64>,
    /// Proximity clusters of the live nodes from those round trips (spec 05 §2): Sc1, Sc2, …
    clusters: Vec<Vec<u32>>,
    dirty: HashSet<(u64, u32)>,
    dirty_jobs: HashSet<u64>,
}

fn thresholds(config: &ServerConfig) -> (BalancerKind, Thresholds) {
    let w = config.workflow.clone().unwrap_or_default();
    let d = Thresholds::default();
    let b = match w.balancer.as_deref() {
        Some("pcddb") => BalancerKind::Pcddb,
        _ => BalancerKind::Centralised,
    };
    (
        b,
        Thresholds {
            lt: w.lt.unwrap_or(d.lt),
            mt: w.mt.unwrap_or(d.mt).max(1),
        },
    )
}

fn members(cx: &Ctx) -> Vec<GraphNode> {
    cx.nodes
        .iter()
        .enumerate()
        .filter(|(_, n)| !n.removed)
        .map(|(i, n)| GraphNode {
            id: NodeId(i as u32),
            cores: n.spec.cores.max(1),
            attributes: 0,
        })
        .collect()
}

impl Workflows {
    /// Builds the kind from its tables (creating them on a fresh store), putting running
    /// instances back on their nodes.
    pub fn restore(config: &ServerConfig, cx: &mut Ctx) -> Result<Self, StateError> {
        let (default_balancer, thresholds) = thresholds(config);
        cx.store
            .conn()
            .execute_batch(SCHEMA)
            .map_err(StoreError::from)?;
        let mut me = Workflows {
            jobs: BTreeMap::new(),
            default_balancer,
            thresholds,
            addresses: BTreeMap::new(),
            counters: BTreeMap::new(),
            epoch: cx.now,
            rtt: BTreeMap::new(),
            clusters: Vec::new(),
            dirty: HashSet::new(),
            dirty_jobs: HashSet::new(),
        };
        let rows: Vec<StoredJob> = {
            let mut q = cx
                .store
                .conn()
                .prepare("SELECT id,name,origin,text,workdir,balancer,submitted_ns,finished_ns FROM wf_jobs ORDER BY id")
                .map_err(StoreError::from)?;
            q.query_map([], |r| {
                Ok((
                    r.get::<_, i64>(0)? as u64,
                    r.get(1)?,
                    r.get(2)?,
                    r.get(3)?,
                    r.get(4)?,
                    r.get(5)?,
                    r.get::<_, i64>(6)? as u64,
                    r.get::<_, i64>(7)? as u64,
                ))
            })
            .map_err(StoreError::from)?
            .collect::<Result<_, _>>()
            .map_err(StoreError::from)?
        };
        for (seq, name, origin, text, workdir, balancer, submitted_ns, finished_ns) in rows {
            let rt = parse_runtime_workflow(&origin, &text)?;
            let balancer = balancer.parse().unwrap_or(BalancerKind::Centralised);
            let mut job = me.new_job(cx, seq, rt, balancer, name, origin, text, workdir);
            job.submitted_ns = submitted_ns;
            job.finished_ns = finished_ns;
            {
                let mut q = cx
                    .store
                    .conn()
                    .prepare("SELECT instance,state,attempt,node,started_ns,finished_ns,exit_code,message,failures,produced FROM wf_instances WHERE job=?1")
                    .map_err(StoreError::from)?;
                let mut rows = q.query(params![seq as i64]).map_err(StoreError::from)?;
                while let Some(r) = rows.next().map_err(StoreError::from)? {
                    let i: i64 = r.get(0).map_err(StoreError::from)?;
                    let Some(x) = job.insts.get_mut(i as usize) else {
                        continue;
                    };
                    x.st = St::parse(&r.get::<_, String>(1).map_err(StoreError::from)?);
                    x.attempt = r.get::<_, i64>(2).map_err(StoreError::from)? as u32;
                    x.node = r
                        .get::<_, Option<i64>>(3)
                        .map_err(StoreError::from)?
                        .map(|n| n as u32);
                    x.started_ns = r.get::<_, i64>(4).map_err(StoreError::from)? as u64;
                    x.finished_ns = r.get::<_, i64>(5).map_err(StoreError::from)? as u64;
                    x.exit_code = r.get::<_, i64>(6).map_err(StoreError::from)? as i32;
                    x.message = r.get(7).map_err(StoreError::from)?;
                    x.failures = r.get::<_, i64>(8).map_err(StoreError::from)? as u32;
                    x.produced =
                        r.get::<_, i64>(9).map_err(StoreError::from)? != 0 || x.st == St::Done;
                }
            }
            // Replay the successes into the graph, in readiness order.
            let mut graph = InstanceGraph::new(&job.rt.parsed.workflow, &[]);
            // An instance produced once counts finished (consumers were readied by it) even
            // while it is produced again.
            let mut ready: VecDeque<InstanceId> = graph.start().into();
            let mut reached = vec![false; job.insts.len()];
            while let Some(id) = ready.pop_front() {
                reached[id.0 as usize] = true;
                if job.insts[id.0 as usize].produced
                    && let Ok(more) = graph.finish(id)
                {
                    ready.extend(more);
                }
            }
            job.machine = match balancer {
                BalancerKind::Pcddb => Machine::Pcddb(LaunchNode::new(LAUNCH, ClusterId(0), graph)),
                _ => Machine::Centralised(Dispatcher::new(LAUNCH, members(cx), graph)),
            };
            for i in 0..job.insts.len() as u32 {
                let tid = job.task_id(i);
                let x = &mut job.insts[i as usize];
                match x.st {
                    St::Running => {
                        if let Some(n) = x.node {
                            cx.nodes.started(NodeId(n), tid);
                        }
                    }
                    St::Failed | St::Done => {}
                    St::Ready | St::Waiting if reached[i as usize] => {
                        x.st = St::Ready;
                        job.free.push_back(i);
                    }
                    St::Ready | St::Waiting => x.st = St::Waiting,
                }
            }
            me.jobs.insert(seq, job);
        }
        Ok(me)
    }

    #[allow(clippy::too_many_arguments)]
    fn new_job(
        &self,
        cx: &Ctx,
        seq: u64,
        rt: RuntimeWorkflow,
        balancer: BalancerKind,
        name: String,
        origin: String,
        text: String,
        workdir: String,
    ) -> WfJob {
        let mut offset = Vec::new();
        let mut total = 0u32;
        for t in &rt.parsed.workflow.tasks {
            offset.push(total);
            total += t.instances() as u32;
        }
        offset.push(total);
        let graph = InstanceGraph::new(&rt.parsed.workflow, &[]);
        let machine = match balancer {
            BalancerKind::Pcddb => Machine::Pcddb(LaunchNode::new(LAUNCH, ClusterId(0), graph)),
            _ => Machine::Centralised(Dispatcher::new(LAUNCH, members(cx), graph)),
        };
        WfJob {
            seq,
            name,
            origin,
            text,
            workdir,
            balancer,
            rt,
            offset,
            insts: vec![
                Inst {
                    st: St::Waiting,
                    attempt: 0,
                    node: None,
                    started_ns: 0,
                    finished_ns: 0,
                    exit_code: -1,
                    message: String::new(),
                    failures: 0,
                    reproducing: false,
                    produced: false,
                };
                total as usize
            ],
            machine,
            submitted_ns: cx.now,
            finished_ns: 0,
            assigned: HashMap::new(),
            free: VecDeque::new(),
            blocked: Vec::new(),
            to_node: HashMap::new(),
            sent: 0,
            received: 0,
        }
    }

    /// Accepts a workflow: parsed by the core's parser, stored in one transaction, then started.
    pub fn submit(
        &mut self,
        cx: &mut Ctx,
        sub: Submission,
        id: u64,
    ) -> Result<Submitted, StateError> {
        let rt = parse_runtime_workflow(&sub.origin, &sub.text)?;
        // A retry of a submission whose reply was lost: the job stored under its key.
        if !sub.key.is_empty() {
            let found: Option<i64> = cx
                .store
                .conn()
                .query_row(
                    "SELECT id FROM wf_jobs WHERE key = ?1",
                    params![sub.key],
                    |r| r.get(0),
                )
                .ok();
            if let Some(j) = found.and_then(|s| self.jobs.get(&(s as u64))) {
                return Ok(Submitted {
                    job_id: j.id(),
                    tasks: j.insts.len() as u64,
                    existing: true,
                });
            }
        }
        let total = rt.parsed.workflow.total_instances();
        if total > u64::from(u32::MAX >> 1) {
            return Err(StateError::Invalid(format!(
                "{}: {total} instances is too many for one workflow",
                sub.origin
            )));
        }
        let balancer = rt.balancer.unwrap_or(self.default_balancer);
        let seq = id;
        let name = if sub.name.is_empty() {
            sub.origin.clone()
        } else {
            sub.name.clone()
        };
        let mut job = self.new_job(
            cx,
            seq,
            rt,
            balancer,
            name,
            sub.origin.clone(),
            sub.text.clone(),
            sub.workdir.clone(),
        );
        let n = job.insts.len();
        cx.store.transaction(|tx| {
            tx.execute(
                "INSERT INTO wf_jobs(id,name,origin,text,workdir,balancer,submitted_ns,finished_ns,key) VALUES(?1,?2,?3,?4,?5,?6,?7,0,?8)",
                params![seq as i64, job.name, job.origin, job.text, job.workdir, balancer.as_str(), job.submitted_ns as i64, sub.key],
            )?;
            let mut q = tx.prepare(
                "INSERT INTO wf_instances(job,instance,state,attempt,node,started_ns,finished_ns,exit_code,message,failures) VALUES(?1,?2,'waiting',0,NULL,0,0,-1,'',0)",
            )?;
            for i in 0..n {
                q.execute(params![seq as i64, i as i64])?;
            }
            Ok(())
        })?;
        let out = job.machine.handle(LaunchEvent::Start, cx.now);
        self.apply(&mut job, out);
        info!(job = job.id(), instances = n, balancer = %balancer, "workflow submitted");
        let id = job.id();
        self.jobs.insert(seq, job);
        Ok(Submitted {
            job_id: id,
            tasks: n as u64,
            existing: false,
        })
    }

    /// Carries out what a machine returned.
    fn apply(&mut self, job: &mut WfJob, out: Vec<Outgoing>) {
        for o in out {
            match o {
                Outgoing::Ready(id) => {
                    if let Some(x) = job.insts.get_mut(id.0 as usize)
                        && x.st == St::Waiting
                    {
                        x.st = St::Ready;
                        self.dirty.insert((job.seq, id.0));
                    }
                }
                Outgoing::Send(m) => {
                    job.sent += 1;
                    match m.body {
                        Body::Dispatch { instance } => {
                            job.assigned
                                .entry(m.to.0)
                                .or_default()
                                .push_back(instance.0);
                        }
                        _ => job.to_node.entry(m.to.0).or_default().push(m),
                    }
                }
                Outgoing::Run { .. } => {}
            }
        }
    }

    /// Marks instance `i` failed for good, and every instance depending on it.
    fn fail(&mut self, job: &mut WfJob, i: u32, why: &str, now: u64) {
        let mut stack = vec![(i, why.to_string())];
        while let Some((k, msg)) = stack.pop() {
            let x = &mut job.insts[k as usize];
            if matches!(x.st, St::Done | St::Failed) && k != i {
                continue;
            }
            x.st = St::Failed;
            x.message = msg;
            x.finished_ns = now;
            self.dirty.insert((job.seq, k));
            let (t, n) = job.task_of(k);
            let task = &job.rt.parsed.workflow.tasks[t];
            // Named by `{index}`, the instance's argument value.
            let n = task.args.start + i64::from(n / task.processes.max(1));
            let cause = format!(
                "not run: its producer {}[{n}] failed ({})",
                task.name,
                if k == i { why } else { "upstream" }
            );
            for c in job.consumers(k) {
                if !matches!(job.insts[c as usize].st, St::Done | St::Failed) {
                    stack.push((c, cause.clone()));
                }
            }
        }
        job.free.retain(|&f| job.insts[f as usize].st != St::Failed);
        job.blocked
            .retain(|&f| job.insts[f as usize].st != St::Failed);
    }

    fn check_finished(&mut self, job: &mut WfJob, now: u64) {
        if job.finished_ns == 0 && job.finished() {
            job.finished_ns = now;
            self.dirty_jobs.insert(job.seq);
            info!(job = job.id(), state = job.state(), "workflow finished");
        }
    }

    fn alive(cx: &Ctx, n: u32) -> bool {
        cx.nodes.get(n).is_some_and(|r| r.alive && !r.removed)
    }

    /// Whether every input of `i` is on a live node; if not, its lost producers are produced
    /// again.
    fn inputs_ready(&mut self, cx: &Ctx, job: &mut WfJob, i: u32) -> bool {
        let mut ok = true;
        for (p, _) in job.producers(i) {
            let x = &job.insts[p as usize];
            if x.st == St::Done && x.node.is_some_and(|n| Self::alive(cx, n)) {
                continue;
            }
            ok = false;
            if x.st == St::Done {
                warn!(
                    job = job.id(),
                    instance = p,
                    "an output was lost with its node: producing it again"
                );
                let x = &mut job.insts[p as usize];
                x.st = St::Ready;
                x.reproducing = true;
                self.dirty.insert((job.seq, p));
                job.free.push_back(p);
            }
        }
        ok
    }

    fn dispatch(&self, cx: &Ctx, job: &WfJob, i: u32) -> (Dispatch, u64) {
        let (t, k) = job.task_of(i);
        let task = &job.rt.parsed.workflow.tasks[t];
        let mut inputs = Vec::new();
        for (p, data) in job.producers(i) {
            let node = job.insts[p as usize].node.unwrap_or(0);
            for name in data {
                inputs.push(WorkflowInput {
                    name: name.clone(),
                    node_id: node,
                    address: self.addresses.get(&node).cloned().unwrap_or_default(),
                    path: format!("wf/{}/out/{}", job.dir(p), name),
                });
            }
        }
        let _ = cx;
        let key = Kind::Workflow.id((job.seq << 32) | t as u64);
        // `{index}` is the instance's argument value.
        let value = task.args.start + i64::from(k / task.processes.max(1));
        (
            Dispatch {
                task_id: job.task_id(i),
                attempt: job.insts[i as usize].attempt + 1,
                index: u32::try_from(value).unwrap_or(k),
                devices: Vec::new(),
                spec: key,
                workflow: Some(InstanceData {
                    dir: job.dir(i),
                    inputs,
                    outputs: task.outputs.clone(),
                }),
            },
            key,
        )
    }

    fn spec(job: &WfJob, t: usize) -> TaskSpec {
        let rt = &job.rt.tasks[t];
        let task = &job.rt.parsed.workflow.tasks[t];
        TaskSpec {
            key: Kind::Workflow.id((job.seq << 32) | t as u64),
            job_id: job.id(),
            app: task.name.clone(),
            variant: "cpu".into(),
            argv: rt.argv.clone(),
            env: rt.env.clone(),
            workdir: job.workdir.clone(),
            time_limit_ms: rt.time_limit_ns / 1_000_000,
            ..Default::default()
        }
    }

    /// Proximity clusters (spec 05 §2, the core's [`proximity_clusters`]) of the live nodes from
    /// the round trips their agents measured; a pair not measured counts as [`UNMEASURED`] one
    /// way.
    fn recluster(&mut self, cx: &Ctx) {
        let live: Vec<u32> = (0..cx.nodes.len() as u32)
            .filter(|&n| Self::alive(cx, n))
            .collect();
        let names: Vec<String> = live.iter().map(|&n| cx.nodes.name(n).to_string()).collect();
        let n = live.len();
        let mut lat = LatencyMatrix::uniform(n, UNMEASURED);
        for a in 0..n {
            for b in a + 1..n {
                let there = self.rtt.get(&(live[a], live[b]));
                let back = self.rtt.get(&(live[b], live[a]));
                let rtt = match (there, back) {
                    (Some(x), Some(y)) => (x + y) / 2,
                    (Some(x), None) | (None, Some(x)) => *x,
                    (None, None) => continue,
                };
                lat.set(a, b, rtt / 2);
            }
        }
        self.clusters = proximity_clusters(&lat, &names, min_cluster_size(n))
            .into_iter()
            .map(|c| c.members.iter().map(|m| live[m.index()]).collect())
            .collect();
    }

    /// Workflow figures of a node for `hetsched nodes`.
    pub fn annotate(&self, info: &mut NodeInfo) {
        let mut n = 0u32;
        for j in self.jobs.values() {
            n += j
                .insts
                .iter()
                .filter(|x| x.st == St::Running && x.node == Some(info.id))
                .count() as u32;
        }
        info.instances = n;
        if let Some(&(s, r, _)) = self.counters.get(&info.id) {
            info.balance_sent = s;
            info.balance_received = r;
        }
        if self
            .jobs
            .values()
            .any(|j| j.balancer == BalancerKind::Pcddb && j.finished_ns == 0)
        {
            info.lt = self.thresholds.lt * info.cores;
            info.mt = self.thresholds.mt * info.cores;
        }
        info.clusters = self
            .clusters
            .iter()
            .enumerate()
            .filter(|(_, c)| c.contains(&info.id))
            .map(|(k, _)| format!("Sc{}", k + 1))
            .collect::<Vec<_>>()
            .join(",");
    }

    fn counts_of(insts: &[Inst]) -> (TaskCounts, u64) {
        let mut c = TaskCounts::default();
        let mut ready = 0;
        for x in insts {
            match x.st {
                St::Waiting => c.pending += 1,
                St::Ready => {
                    c.pending += 1;
                    ready += 1
                }
                St::Running => c.running += 1,
                St::Done => c.succeeded += 1,
                St::Failed => c.failed += 1,
            }
        }
        (c, ready)
    }

    fn job_info(j: &WfJob, apps: bool) -> JobInfo {
        let (counts, _) = Self::counts_of(&j.insts);
        JobInfo {
            id: j.id(),
            name: j.name.clone(),
            state: j.state().into(),
            tasks: j.insts.len() as u64,
            counts,
            submitted_ns: j.submitted_ns,
            finished_ns: j.finished_ns,
            balancer: j.balancer.as_str().into(),
            launch_sent: j.sent,
            launch_received: j.received,
            divisible: None,
            apps: if apps {
                j.rt.parsed
                    .workflow
                    .tasks
                    .iter()
                    .enumerate()
                    .map(|(t, task)| {
                        let r = j.offset[t] as usize..j.offset[t + 1] as usize;
                        let (counts, ready) = Self::counts_of(&j.insts[r]);
                        AppInfo {
                            id: t as u32,
                            name: task.name.clone(),
                            tasks: task.instances(),
                            counts,
                            has_cpu: true,
                            ready,
                            ..Default::default()
                        }
                    })
                    .collect()
            } else {
                Vec::new()
            },
        }
    }

    /// The workflow's task graph in DOT (`hetsched job N --graph --output dot`).
    pub fn dot(&self, job: u64) -> Option<String> {
        let j = self.jobs.get(&(job & ((1 << super::KIND_SHIFT) - 1)))?;
        let mut s = format!("digraph \"{}\" {{\n", j.name.replace('"', "'"));
        for t in &j.rt.parsed.workflow.tasks {
            s.push_str(&format!(
                "  \"{}\" [label=\"{} ×{}\"];\n",
                t.name,
                t.name,
                t.instances()
            ));
            for d in &t.depends_on {
                let p = &j.rt.parsed.workflow.tasks[d.producer];
                s.push_str(&format!(
                    "  \"{}\" -> \"{}\" [label=\"{}{}\"];\n",
                    p.name,
                    t.name,
                    d.data.join(","),
                    if d.kind == DependencyKind::All {
                        " (all)"
                    } else {
                        ""
                    }
                ));
            }
        }
        s.push_str("}\n");
        Some(s)
    }
}

fn job_of(task: u64) -> (u64, u32) {
    let n = task & ((1 << super::KIND_SHIFT) - 1);
    (n >> 32, (n & 0xffff_ffff) as u32)
}

impl JobKind for Workflows {
    fn kind(&self) -> Kind {
        Kind::Workflow
    }

    fn on_result(&mut self, cx: &mut Ctx, node: NodeId, r: &TaskResult) -> Result<(), StateError> {
        let (seq, i) = job_of(r.task_id);
        let Some(mut job) = self.jobs.remove(&seq) else {
            return Ok(());
        };
        'r: {
            let retries = job.rt.tasks.get(job.task_of(i).0).map_or(0, |t| t.retries);
            let Some(x) = job.insts.get_mut(i as usize) else {
                break 'r;
            };
            if x.st != St::Running || x.attempt != r.attempt {
                break 'r;
            }
            cx.nodes.ended(node, r.task_id);
            x.started_ns = r.started_ns;
            x.finished_ns = r.finished_ns;
            x.exit_code = r.exit_code;
            self.dirty.insert((seq, i));
            if r.success {
                x.st = St::Done;
                x.node = Some(node.0);
                x.message.clear();
                x.reproducing = false;
                x.produced = true;
                // The machine readies the dependants (a re-production was finished before:
                // the graph refuses a second finish, and the blocked consumers go on below).
                job.received += 1;
                let out = job.machine.handle(
                    LaunchEvent::Deliver(Message {
                        from: node,
                        to: LAUNCH,
                        body: Body::Result {
                            instance: InstanceId(i),
                        },
                    }),
                    cx.now,
                );
                self.apply(&mut job, out);
                let blocked = std::mem::take(&mut job.blocked);
                job.free.extend(blocked);
            } else if r.interrupted {
                x.st = St::Ready;
                x.message = r.message.clone();
                // An input could not be fetched (`input unavailable: node N PATH: …`, from the
                // agent): that output is lost; its producer runs again, and this instance waits.
                let lost = r
                    .message
                    .strip_prefix(INPUT_UNAVAILABLE)
                    .and_then(|rest| rest.split_once(' '))
                    .and_then(|(n, rest)| Some((n.parse::<u32>().ok()?, rest.split(':').next()?)));
                match lost {
                    Some((n, path)) => {
                        let p = job.producers(i).into_iter().map(|(p, _)| p).find(|&p| {
                            job.insts[p as usize].node == Some(n)
                                && path.starts_with(&format!("wf/{}/", job.dir(p)))
                        });
                        if let Some(p) = p
                            && job.insts[p as usize].st == St::Done
                        {
                            warn!(
                                job = job.id(),
                                instance = p,
                                node = n,
                                "an output could not be fetched: producing it again"
                            );
                            let px = &mut job.insts[p as usize];
                            px.st = St::Ready;
                            px.reproducing = true;
                            self.dirty.insert((seq, p));
                            job.free.push_back(p);
                        }
                        // Placed again once its inputs are where the server says they are
                        // (checked at dispatch; the producer may have moved meanwhile).
                        job.blocked.push(i);
                    }
                    None => job.free.push_back(i),
                }
            } else {
                x.failures += 1;
                x.message = r.message.clone();
                if x.failures <= retries {
                    let x = &mut job.insts[i as usize];
                    x.st = St::Ready;
                    job.free.push_back(i);
                } else {
                    let why = format!(
                        "exit code {} after {} attempt(s): {}",
                        r.exit_code, job.insts[i as usize].failures, r.message
                    );
                    self.fail(&mut job, i, &why, cx.now);
                }
            }
        }
        self.check_finished(&mut job, cx.now);
        self.jobs.insert(seq, job);
        Ok(())
    }

    fn expects(&self, node: NodeId, t: &RunningTask) -> bool {
        let (seq, i) = job_of(t.task_id);
        self.jobs
            .get(&seq)
            .and_then(|j| j.insts.get(i as usize))
            .is_some_and(|x| {
                x.st == St::Running && x.node == Some(node.0) && x.attempt == t.attempt
            })
    }

    fn on_lost(&mut self, cx: &mut Ctx, task: u64, reason: &str) -> Result<(), StateError> {
        let (seq, i) = job_of(task);
        let Some(job) = self.jobs.get_mut(&seq) else {
            return Ok(());
        };
        if let Some(x) = job.insts.get_mut(i as usize)
            && x.st == St::Running
        {
            if let Some(n) = x.node {
                cx.nodes.ended(NodeId(n), task);
            }
            warn!(
                job = seq,
                instance = i,
                reason,
                "workflow instance lost: it runs again"
            );
            x.st = St::Ready;
            x.node = None;
            job.free.push_back(i);
            self.dirty.insert((seq, i));
        }
        Ok(())
    }

    fn on_heartbeat(
        &mut self,
        cx: &mut Ctx,
        node: NodeId,
        report: &HeartbeatReport,
        open: bool,
        out: &mut Outbox,
    ) -> Result<(), StateError> {
        if !report.advertise.is_empty() {
            self.addresses.insert(node.0, report.advertise.clone());
        }
        self.counters.insert(
            node.0,
            (
                report.balance_sent,
                report.balance_received,
                report.balance_held,
            ),
        );
        if !report.rtt_ns.is_empty() {
            let mut changed = false;
            for (&peer, &ns) in &report.rtt_ns {
                changed |= self.rtt.insert((node.0, peer), ns) != Some(ns);
            }
            if changed {
                self.recluster(cx);
            }
        }
        let seqs: Vec<u64> = self.jobs.keys().copied().collect();
        for seq in seqs {
            let Some(mut job) = self.jobs.remove(&seq) else {
                continue;
            };
            if job.finished_ns != 0 {
                self.jobs.insert(seq, job);
                continue;
            }
            // The node's messages to this launch node.
            let jid = job.id();
            for env in report.balance.iter().filter(|e| e.job_id == jid) {
                let Ok(m) = serde_json::from_str::<Message>(&env.message_json) else {
                    continue;
                };
                job.received += 1;
                if let Body::Reply { taken, .. } = &m.body {
                    let q = job.assigned.entry(m.from.0).or_default();
                    q.extend(taken.iter().map(|t| t.0));
                }
                // Results come from the heartbeat's own (durable) results, not from here.
                if matches!(m.body, Body::Result { .. }) {
                    continue;
                }
                let o = job.machine.handle(LaunchEvent::Deliver(m), cx.now);
                self.apply(&mut job, o);
            }
            // A request waiting for a node that died returns to the launch node without it
            // (event e), so the launch node drops it from its table.
            let gone: Vec<u32> = job
                .to_node
                .keys()
                .copied()
                .filter(|&n| !Self::alive(cx, n))
                .collect();
            for n in gone {
                for m in job.to_node.remove(&n).unwrap_or_default() {
                    if let Body::Request(mut r) = m.body {
                        r.table.retain(|&x| x.0 != n);
                        let o = job.machine.handle(
                            LaunchEvent::Deliver(Message {
                                from: NodeId(n),
                                to: LAUNCH,
                                body: Body::Return(r),
                            }),
                            cx.now,
                        );
                        self.apply(&mut job, o);
                    }
                }
            }
            // Centralised: the heartbeat is the node's monitoring report.
            if let Machine::Centralised(_) = job.machine {
                let held = report
                    .running
                    .iter()
                    .filter(|r| {
                        job_of(r.task_id).0 == seq && Kind::of(r.task_id) == Some(Kind::Workflow)
                    })
                    .count() as u32;
                job.received += 1;
                let o = job.machine.handle(
                    LaunchEvent::Deliver(Message {
                        from: node,
                        to: LAUNCH,
                        body: Body::Report { held },
                    }),
                    cx.now,
                );
                self.apply(&mut job, o);
            }
            // Consumers waiting for inputs are looked at again on every heartbeat (dispatch
            // checks their inputs; a success may have come before they blocked).
            let blocked = std::mem::take(&mut job.blocked);
            job.free.extend(blocked);
            if open {
                // What the machine placed here, then what is placed outside it (when this node
                // is among the least loaded of the live ones).
                let mut mine: Vec<u32> = job
                    .assigned
                    .remove(&node.0)
                    .map(Vec::from)
                    .unwrap_or_default();
                // The machine placed instances on nodes that are gone: place them again.
                let dead: Vec<u32> = job
                    .assigned
                    .keys()
                    .copied()
                    .filter(|&n| !Self::alive(cx, n))
                    .collect();
                for n in dead {
                    if let Some(q) = job.assigned.remove(&n) {
                        job.free.extend(q);
                    }
                }
                let load = |n: u32| -> (u64, u64) {
                    let r = cx.nodes.get(n).map_or(0, |r| r.running.len() as u64);
                    let c = cx
                        .nodes
                        .get(n)
                        .map_or(1, |r| u64::from(r.spec.cores.max(1)));
                    (r, c)
                };
                let (my_run, my_cores) = load(node.0);
                let least = cx
                    .nodes
                    .iter()
                    .enumerate()
                    .filter(|(i, r)| {
                        r.alive && !r.removed && !r.drained && !r.draining && *i as u32 != node.0
                    })
                    .all(|(i, _)| {
                        let (r, c) = load(i as u32);
                        my_run * c <= r * my_cores
                    });
                let room = (2 * my_cores).saturating_sub(my_run + mine.len() as u64);
                if least || my_run < my_cores {
                    for _ in 0..room.max(u64::from(least)) {
                        match job.free.pop_front() {
                            Some(i) => mine.push(i),
                            None => break,
                        }
                    }
                }
                for i in mine {
                    let st = job.insts[i as usize].st;
                    if !matches!(st, St::Ready | St::Waiting) {
                        continue;
                    }
                    if !self.inputs_ready(cx, &mut job, i) {
                        job.blocked.push(i);
                        continue;
                    }
                    let (d, key) = self.dispatch(cx, &job, i);
                    let spec = out
                        .needs_spec(key)
                        .then(|| Self::spec(&job, job.task_of(i).0));
                    if let Err(_d) = out.offer(d, spec) {
                        job.free.push_front(i);
                        out.more();
                        continue;
                    }
                    let x = &mut job.insts[i as usize];
                    x.st = St::Running;
                    x.attempt += 1;
                    x.node = Some(node.0);
                    x.started_ns = cx.now;
                    cx.nodes.started(node, job.task_id(i));
                    self.dirty.insert((seq, i));
                }
            }
            // Launch node → this node.
            let peers: BTreeMap<u32, String> = self.addresses.clone();
            if let Some(ms) = job.to_node.remove(&node.0) {
                for m in ms {
                    if let Ok(json) = serde_json::to_string(&m) {
                        out.balance(BalanceEnvelope {
                            job_id: job.id(),
                            message_json: json,
                            peers: peers.clone(),
                        });
                    }
                }
            }
            if job.balancer == BalancerKind::Pcddb {
                out.pcddb(PcddbJob {
                    job_id: job.id(),
                    lt: self.thresholds.lt,
                    mt: self.thresholds.mt,
                    launch: LAUNCH.0,
                    task_base: job.task_id(0),
                    epoch: self.epoch,
                    peers,
                });
            }
            self.jobs.insert(seq, job);
        }
        Ok(())
    }

    fn has_changes(&self) -> bool {
        !self.dirty.is_empty() || !self.dirty_jobs.is_empty()
    }

    fn persist(&self, tx: &rusqlite::Transaction) -> Result<(), StoreError> {
        let mut q = tx.prepare_cached(
            "INSERT OR REPLACE INTO wf_instances(job,instance,state,attempt,node,started_ns,finished_ns,exit_code,message,failures,produced) VALUES(?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11)",
        )?;
        for &(seq, i) in &self.dirty {
            let Some(x) = self.jobs.get(&seq).and_then(|j| j.insts.get(i as usize)) else {
                continue;
            };
            q.execute(params![
                seq as i64,
                i64::from(i),
                x.st.as_str(),
                i64::from(x.attempt),
                x.node.map(i64::from),
                x.started_ns as i64,
                x.finished_ns as i64,
                i64::from(x.exit_code),
                x.message,
                i64::from(x.failures),
                i64::from(x.produced)
            ])?;
        }
        for &seq in &self.dirty_jobs {
            if let Some(j) = self.jobs.get(&seq) {
                tx.execute(
                    "UPDATE wf_jobs SET finished_ns=?2 WHERE id=?1",
                    params![seq as i64, j.finished_ns as i64],
                )?;
            }
        }
        Ok(())
    }

    fn committed(&mut self) {
        self.dirty.clear();
        self.dirty_jobs.clear();
    }

    fn counts(&self) -> TaskCounts {
        let mut c = TaskCounts::default();
        for j in self.jobs.values() {
            c.add(&Self::counts_of(&j.insts).0);
        }
        c
    }

    fn job_count(&self) -> u64 {
        self.jobs.len() as u64
    }

    fn job_ids(&self) -> Vec<u64> {
        self.jobs.keys().copied().collect()
    }

    fn jobs_page(&self, _rd: &Read, cursor: u64, limit: usize) -> JobsPage {
        let from = cursor & ((1 << super::KIND_SHIFT) - 1);
        let mut page = JobsPage::default();
        for (seq, j) in self.jobs.range(from..) {
            if page.jobs.len() == limit {
                page.next_cursor = *seq;
                break;
            }
            page.jobs.push(Self::job_info(j, false));
        }
        page
    }

    fn job(&self, _rd: &Read, id: u64) -> Result<JobInfo, StateError> {
        self.jobs
            .get(&(id & ((1 << super::KIND_SHIFT) - 1)))
            .map(|j| Self::job_info(j, true))
            .ok_or(StateError::NoJob(id))
    }

    fn tasks_page(
        &self,
        rd: &Read,
        job: u64,
        cursor: u64,
        limit: usize,
    ) -> Result<TasksPage, StateError> {
        let all = job == Kind::Workflow.id(0);
        let start = cursor & ((1 << super::KIND_SHIFT) - 1);
        let mut page = TasksPage::default();
        for (seq, j) in &self.jobs {
            if !all && j.id() != job {
                continue;
            }
            page.total += j.insts.len() as u64;
            for (i, x) in j.insts.iter().enumerate() {
                let tid = j.task_id(i as u32);
                if (tid & ((1 << super::KIND_SHIFT) - 1)) < start {
                    continue;
                }
                if page.tasks.len() == limit {
                    if page.next_cursor == 0 {
                        page.next_cursor = tid;
                    }
                    continue;
                }
                let (t, k) = j.task_of(i as u32);
                let task = &j.rt.parsed.workflow.tasks[t];
                let value = task.args.start + i64::from(k / task.processes.max(1));
                page.tasks.push(TaskInfo {
                    id: tid,
                    job_id: j.id(),
                    app: task.name.clone(),
                    index: u32::try_from(value).unwrap_or(k),
                    state: x.st.as_str().into(),
                    attempt: x.attempt,
                    node: x
                        .node
                        .map_or(String::new(), |n| rd.nodes.name(n).to_string()),
                    variant: "cpu".into(),
                    devices: Vec::new(),
                    started_ns: x.started_ns,
                    finished_ns: x.finished_ns,
                    exit_code: x.exit_code,
                    message: x.message.clone(),
                    failed_attempts: x.failures,
                    executed_node: String::new(),
                });
            }
            let _ = seq;
        }
        if !all && page.total == 0 {
            return Err(StateError::NoJob(job));
        }
        Ok(page)
    }

    fn cancel(&mut self, cx: &mut Ctx, job: u64) -> Result<u64, StateError> {
        let seq = job & ((1 << super::KIND_SHIFT) - 1);
        let Some(mut j) = self.jobs.remove(&seq) else {
            return Err(StateError::NoJob(job));
        };
        let mut n = 0;
        for i in 0..j.insts.len() {
            let tid = j.task_id(i as u32);
            let x = &mut j.insts[i];
            if matches!(x.st, St::Done | St::Failed) {
                continue;
            }
            if x.st == St::Running
                && let Some(node) = x.node
            {
                cx.nodes.ended(NodeId(node), tid);
            }
            x.st = St::Failed;
            x.message = "cancelled".into();
            self.dirty.insert((seq, i as u32));
            n += 1;
        }
        j.free.clear();
        j.blocked.clear();
        j.assigned.clear();
        self.check_finished(&mut j, cx.now);
        self.jobs.insert(seq, j);
        Ok(n)
    }
}
