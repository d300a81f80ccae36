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
//! - **failures**: a failed attempt runs again while the task's `retries` last; then the
//!   instance fails and so does every instance depending on it, transitively, with a message
//!   naming the cause; the rest goes on. `resubmit --failed` puts them back into the graph
//!   (the machines' `reinstate`) with their retries counted afresh;
//! - **data flow**: an output stays on the node that produced it; a consumer's assignment names
//!   each input's node and path, and its agent fetches them first. Before a consumer is sent,
//!   every input's node must be alive; an output whose node died is produced again (its
//!   producer runs again), and the consumer waits for it on the node that took it;
//! - **losses**: an instance lost with its node (or its agent, or the ANode it was offloaded
//!   to) runs again, listed as `attempt N lost: REASON` until that attempt ends; so does one
//!   whose agent found no room for its inputs on the node's disk (`min_free_disk`, the agent's
//!   [`NO_ROOM`]: the disk filled since the node's last report), kept off that node until a
//!   later heartbeat reports room, and failed once it was lost so `max_attempts` times (stored,
//!   `wf_instances.disk_losses`): a cluster whose every disk is full ends the job, saying why.
//!   When a node runs short of room (such a result, or its report below its floor), the
//!   instances with inputs placed there whose program has not started — waiting for it here,
//!   in its agent's queue, or still fetching their inputs there (`Inst::fetching`), offloaded
//!   ones included — go elsewhere at once, no attempt lost (`Workflows::take_back`), and none
//!   is sent there while it stays short; one taken from the agent's queue or its fetch never
//!   started its program, so it runs again under the same attempt number
//!   (`Inst::unstarted`), on any node but that one (`Inst::taken_back_from`);
//! - every run again (a retry, a loss, a ready instance after a restart) is placed by the
//!   machine like a ready instance ([`LaunchNode::resubmit`], [`Dispatcher::resubmit`]): under
//!   `pcddb` it travels in the next allocation request. A re-production that a consumer already
//!   waits for on a live node meeting its requirements runs on that node instead, first
//!   (`Workflows::waiting_for`); a node's death places again at once what waited for it, and
//!   produces again the outputs it held that placed consumers need (`Workflows::node_gone`):
//!   waiting consumers count in the nodes' instance tables, and could otherwise leave no node
//!   underloaded to take the producer;
//! - **clusters** (spec 05 §2): the agents measure round trips to each other; the core's
//!   [`proximity_clusters`] groups the live nodes (minimum size `[workflow] cluster_size`, else
//!   ⌊0.3·N⌋); the launch node keeps one table per cluster and each agent's `PcddbNode` is a
//!   member of its clusters, so a request travels within one cluster first. A heartbeat reply
//!   carries a node's clusters only to an agent that does not hold their version
//!   (`Workflows::clusters_version`), as the address book is carried;
//! - **requirements and resources**: a task's `requires` and the capacity one instance needs
//!   (`cores`, `memory`, `gpus`) are bits of an attribute mask (the node catalogue's idea, spec
//!   05 §1), matched by the core machines (`PcddbNode` takes only what it meets, the
//!   `Dispatcher` picks only such nodes); so is a task's `time_limit`: a node whose agent ends
//!   (`--time-limit`) offers it only while it has that long left, its mask recomputed at every
//!   heartbeat; a running instance books its cores, memory and
//!   devices in the shared [`SchedulerView`](hetsched_core::SchedulerView) (batch tasks are not
//!   placed over it), and waits on its node until they are free (under `centralised`, or until
//!   the dispatcher moves it to a node with room, [`Dispatcher::relocate`]; the load a node
//!   reports counts the cores other work holds there). The vocabulary of those bits
//!   is each workflow's own (`WfJob::vocab`, from its file alone, at most 64 words: more is
//!   refused at submission, naming the task and field of the first word too many). Masks are
//!   only ever matched within one workflow — its machine, its agents' `PcddbNode`s (the node's
//!   mask in its `PcddbJob`), its allocation requests and grants — so no workflow's words take
//!   a bit from another (one global, append-only vocabulary let a user's workflows use up the
//!   64 bits and have every later workflow with a requirement refused until a restart, and a
//!   restart kept the words of every workflow not purged). A workflow's bits never change while
//!   messages carrying them are in flight, and a restart rebuilds the same ones; nothing of the
//!   vocabulary is stored. What the live nodes offer and each running vocabulary's masks over
//!   them are kept from one heartbeat to the next ([`masks`]): a heartbeat matches again only
//!   the nodes whose offer changed, and time-limit words when the clock turns one off;
//! - **accelerator sharing** (spec 01): a node's mask is the node as the view sees it, so a bound
//!   NNode offers its ANode's devices (and `gpu`) and takes GPU instances, which the accelerator
//!   part of the heartbeat offloads to the ANode (`Assignment.offload_anode`), while the ANode's
//!   queue has room; an unbound NNode offers no device. The ANode an attempt was offloaded to
//!   is stored in the instance's row with the dispatch (`wf_instances.executed_node`,
//!   [`JobKind::offloaded`]), as a batch task's is: listings name it after a restart, and the
//!   state reads back the offloads still running, which the ANode's loss re-runs. Its result's
//!   ANode devices and start there replace the dispatch's ([`super::offload_run`]);
//! - **restart**: jobs and instances are rows of `wf_jobs` / `wf_instances`; the graph is rebuilt
//!   by replaying the successes, and ready instances not running are placed again;
//! - **waiting** ([`waiting`]): a workflow submitted `--after` other jobs, `--hold` or `--begin`
//!   starts its graph only once they allow it.
//!
//! Ids: job `seq` (the state's job id, one sequence across kinds), instance `i` of it is task
//! `Kind::Workflow.id(seq << 32 | i)`, task `t`'s spec is `Kind::Workflow.id(seq << 32 | t)` (a
//! separate key space).

use super::{Ctx, JobKind, Kind, Outbox, Read};
use crate::config::ServerConfig;
use crate::state::StateError;
use crate::state::prefetch::{AutoQueue, Observed, Setting};
use crate::state::types::{
    AppInfo, BalanceEnvelope, Dispatch, HeartbeatReport, InstanceData, JobInfo, JobsPage, NodeInfo,
    PcddbJob, RunningAttempt, RunningTask, Submission, Submitted, TaskCounts, TaskInfo, TaskResult,
    TaskSpec, TasksPage, WorkflowInput,
};
use crate::state::wakes::Wakes;
use crate::store::{EndReason, StoreError, TaskUsage};
use hetsched_core::input::workflow_runtime::{RuntimeWorkflow, parse_runtime_workflow};
use hetsched_core::model::latency::LatencyMatrix;
use hetsched_core::model::workflow::DependencyKind;
use hetsched_core::policy::graph::centralised::Dispatcher;
use hetsched_core::policy::graph::clustering::{min_cluster_size, proximity_clusters};
use hetsched_core::policy::graph::dag::InstanceGraph;
use hetsched_core::policy::graph::pcddb::LaunchNode;
use hetsched_core::policy::graph::{
    AttrMask, BalancerKind, Body, ClusterId, GraphNode, InstanceId, LaunchEvent, Message, Outgoing,
    Thresholds,
};
use hetsched_core::{NodeId, Resources};
use rusqlite::params;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use tracing::{info, warn};

mod masks;
mod offers;
mod waiting;
use super::gate::Gate;
use masks::{Facts, Key, NodeMasks, Offer, members_over};

/// Instances a node's heartbeat passes over (they cannot start there now) before it stops
/// looking further down the node's queue.
const PASS_OVER: u32 = 64;

/// The message of an instance cancelled with its workflow.
const CANCELLED: &str = "cancelled";

/// How many heartbeat replies to a node list an instance its machine is to forget (the agent
/// forgets it at the first; the others cover lost replies).
const DROPPED_REPLIES: u8 = 3;

/// How an agent's result begins when an input could not be fetched (see the agent's
/// `dataflow::INPUT_UNAVAILABLE`).
const INPUT_UNAVAILABLE: &str = "input unavailable: node ";

/// How an agent's result begins when the instance's inputs found no room on its node's disk
/// (see the agent's `room::NO_ROOM`): reported interrupted, a lost attempt. A divisible chunk's
/// result begins so for its input ([`super::divisible`]): a lost chunk.
pub(crate) const NO_ROOM: &str = "no room for inputs: ";

/// What follows the input's name in such a result when the producer's agent could not be
/// reached at all (see the agent's `dataflow::PRODUCER_UNREACHABLE`): every output on that
/// node is out of reach, not only the one named.
const PRODUCER_UNREACHABLE: &str = ": the producer's agent: ";

/// How many times an instance's output may be produced again because a consumer could not
/// fetch it, and how many times in a row a consumer may find an input it cannot fetch, before
/// the consumer fails (and the job with it): an output no agent can serve — its producer's
/// agent runs with `--log-listen none`, say — would otherwise be produced again for ever.
pub const MAX_INPUT_LOSSES: u32 = 3;

/// A `wf_jobs` row: id, name, origin, text, workdir, balancer, submitted_ns, finished_ns,
/// cancelled.
type StoredJob = (u64, String, String, String, String, String, u64, u64, bool);

/// What a `wf_jobs` row says a workflow waits for, and why it was cancelled, as stored.
struct StoredGate {
    after: String,
    after_any: String,
    after_notok: String,
    held: bool,
    begin_ms: u64,
    started: bool,
    cancel_reason: String,
    cancel_end: Option<EndReason>,
}

/// The one-way latency assumed for a pair of agents that did not measure each other.
pub const UNMEASURED: u64 = 1_000_000_000;

/// The launch node's id in the core's messages (the server is no node).
pub const LAUNCH: NodeId = NodeId(u32::MAX - 1);

/// The longest round trip kept (ns): an agent's measurement above it reads as this (it
/// clusters as "far" all the same, and sums of two stay far from overflowing).
pub const MAX_RTT: u64 = 60_000_000_000;

/// Measured round trips are compared at this resolution (ns) when clustering, so the jitter of
/// a few microseconds between two probes does not reshuffle the clusters every second.
pub const RTT_RESOLUTION: u64 = 250_000;

/// While no PCDDB workflow runs, the clusters follow a change of the live nodes at most this
/// often (ns): what `hetsched nodes` shows may lag a burst of registrations by this much.
pub const RECLUSTER_IDLE_NS: u64 = 1_000_000_000;

/// One bit of a workflow's attribute vocabulary ([`WfJob::vocab`]): a node attribute, "can
/// hold this much" (the capacity one instance of some task needs), "has this long left" (some
/// task's time limit, in ns; a node whose agent has no end has any), or "has room for inputs"
/// (its agent's last heartbeat did not report its work directory's disk below its
/// `min_free_disk`, where every fetched input would fail; required by the tasks that have
/// inputs). Only attributes are names, so they cannot collide.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Word {
    Attr(String),
    Fits(Resources),
    Lasts(u64),
    Room,
}

/// The most words one workflow's vocabulary holds: its masks are 64-bit.
const MAX_WORDS: usize = AttrMask::BITS as usize;

/// A workflow's attribute vocabulary and each task's mask over it: the words of its
/// `requires`, of the capacity one instance needs when above one core, of its time limit, and
/// of its inputs (room for them), numbered in the order the file first names them. A function
/// of the file alone, so a restart rebuilds the same bits. Refused past [`MAX_WORDS`] words,
/// naming where the first word too many is written.
fn task_masks(rt: &RuntimeWorkflow) -> Result<(Vec<Word>, Vec<AttrMask>), StateError> {
    let src = hetsched_core::input::Source::new(&rt.parsed.origin, &rt.parsed.text);
    // Where a field is written, if it is (a default is not).
    fn at<T>(s: &toml::Spanned<T>) -> Option<usize> {
        let span = s.span();
        (span.end > span.start).then_some(span.start)
    }
    let mut vocab: Vec<Word> = Vec::new();
    let mut masks = Vec::with_capacity(rt.tasks.len());
    for (i, ((t, task), spec)) in rt
        .tasks
        .iter()
        .zip(&rt.parsed.workflow.tasks)
        .zip(&rt.parsed.specs)
        .enumerate()
    {
        // Each word with the field that brings it and where that is written.
        let mut words: Vec<(Word, String, Option<usize>)> = task
            .requires
            .iter()
            .enumerate()
            .map(|(j, a)| {
                (
                    Word::Attr(a.clone()),
                    format!("requires[{j}]"),
                    spec.requires.get(j).and_then(at),
                )
            })
            .collect();
        let r = t.request();
        if r != Resources::new(1, 0, 0) {
            // The first field that makes the size.
            let (field, span) = if r.cores != 1 {
                ("cores", spec.cores.as_ref().and_then(at))
            } else if r.memory_bytes != 0 {
                ("memory", spec.memory.as_ref().and_then(at))
            } else {
                ("gpus", spec.gpus.as_ref().and_then(at))
            };
            words.push((Word::Fits(r), field.to_string(), span));
        }
        if t.time_limit_ns > 0 {
            words.push((
                Word::Lasts(t.time_limit_ns),
                "time_limit".to_string(),
                spec.time_limit.as_ref().and_then(at),
            ));
        }
        if !task.inputs.is_empty() {
            words.push((
                Word::Room,
                "inputs".to_string(),
                spec.inputs.first().and_then(at),
            ));
        }
        let mut m: AttrMask = 0;
        for (w, field, span) in words {
            let k = match vocab.iter().position(|x| *x == w) {
                Some(k) => k,
                None if vocab.len() < MAX_WORDS => {
                    vocab.push(w);
                    vocab.len() - 1
                }
                None => {
                    return Err(src
                        .error(
                            span.or_else(|| at(&spec.name)),
                            Some(format!("task[{i}].{field}")),
                            format!(
                                "task `{}` takes the workflow past {MAX_WORDS} distinct \
                                 placement requirements (the node attributes its tasks require, \
                                 their instance sizes other than one core, their time limits \
                                 and having inputs, each counted once)",
                                task.name
                            ),
                        )
                        .into());
                }
            };
            m |= 1 << k;
        }
        masks.push(m);
    }
    Ok((vocab, masks))
}

/// Whether node `rec`'s disk has room for fetched inputs, as its agent last reported (an agent
/// that did not report has, as far as the server knows).
fn has_room(rec: &crate::state::nodes::NodeRec) -> bool {
    rec.disk
        .free_bytes
        .is_none_or(|free| free >= rec.disk.min_free)
}

/// Reads a stored workflow's file as a restart does: a restart and `crate::set_aside` (which
/// sets aside only a workflow this refuses) share it.
pub(crate) fn read_stored(
    origin: &str,
    text: &str,
) -> Result<RuntimeWorkflow, hetsched_core::input::InputError> {
    parse_runtime_workflow(origin, text)
}

/// Deletes workflow `seq`'s instance rows and marks its job row purged (a tombstone: its id
/// stays taken), inside `tx`: for a job set aside at a start (`crate::set_aside`). A purge
/// ([`JobKind::purge_rows`]) marks the job with [`mark_purged`] and deletes its instance rows
/// with [`delete_instance_rows`] in bounded steps (`crate::state::purging`).
pub(crate) fn delete_job_rows(tx: &rusqlite::Transaction, seq: u64) -> Result<(), StoreError> {
    tx.prepare_cached("DELETE FROM wf_instances WHERE job = ?1")?
        .execute(params![seq as i64])?;
    mark_purged(tx, seq)
}

/// Marks workflow `seq`'s job row purged, inside `tx`: from then on no reader (a restart, a
/// set-aside record) looks at its instance rows, deleted yet or not. Its job file gives way
/// to its digest (`store::drop_job_text`): a restart does not read a purged workflow's file,
/// and a submission repeating its key is checked against the digest.
fn mark_purged(tx: &rusqlite::Transaction, seq: u64) -> Result<(), StoreError> {
    tx.prepare_cached("UPDATE wf_jobs SET purged = 1 WHERE id = ?1")?
        .execute(params![seq as i64])?;
    crate::store::drop_job_text(tx, crate::store::JobTable::Workflow, seq)?;
    Ok(())
}

/// Deletes workflow job `id`'s instance rows numbered in `instances`, inside `tx`; returns how
/// many there were (an instance has a row once it was touched: one never started, then
/// cancelled with its workflow, has none).
pub(crate) fn delete_instance_rows(
    tx: &rusqlite::Transaction,
    id: u64,
    instances: std::ops::Range<u64>,
) -> Result<u64, StoreError> {
    if instances.is_empty() {
        return Ok(0);
    }
    let seq = id & ((1 << super::KIND_SHIFT) - 1);
    let n = tx
        .prepare_cached(
            "DELETE FROM wf_instances WHERE job = ?1 AND instance >= ?2 AND instance < ?3",
        )?
        .execute(params![
            seq as i64,
            instances.start as i64,
            instances.end as i64
        ])?;
    Ok(n as u64)
}

/// Where a deletion of at most `most` of workflow job `id`'s instance rows numbered in
/// `instances` ends (`crate::state::purging`): the number of the row after the `most`-th, or
/// `instances.end` when no more are stored. Instance numbers are not rows (a cancelled
/// workflow stores the instances that ran only), so a step bounded by numbers deleted as few
/// as none. An index walk of at most `most` entries, inside `tx`.
pub(crate) fn instance_rows_end(
    tx: &rusqlite::Transaction,
    id: u64,
    instances: std::ops::Range<u64>,
    most: u64,
) -> Result<u64, StoreError> {
    use rusqlite::OptionalExtension;
    let seq = id & ((1 << super::KIND_SHIFT) - 1);
    let end: Option<i64> = tx
        .prepare_cached(
            "SELECT instance FROM wf_instances WHERE job = ?1 AND instance >= ?2 \
             AND instance < ?3 ORDER BY instance LIMIT 1 OFFSET ?4",
        )?
        .query_row(
            params![
                seq as i64,
                instances.start as i64,
                instances.end as i64,
                most.min(i64::MAX as u64) as i64
            ],
            |r| r.get(0),
        )
        .optional()?;
    Ok(end.map_or(instances.end, |i| i as u64))
}

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

/// Columns added to `wf_instances` after its first schema: an instance's usage (NULL when not
/// measured).
const MIGRATIONS: &[(&str, &str, &str)] = &[
    ("wf_instances", "cpu_user_ms", "INTEGER"),
    ("wf_instances", "cpu_system_ms", "INTEGER"),
    ("wf_instances", "max_rss_bytes", "INTEGER"),
    // Its peak GPU memory (NULL: stored before the column, or not measured; read as 0).
    ("wf_instances", "max_gpu_memory_bytes", "INTEGER"),
    ("wf_jobs", "cancelled", "INTEGER NOT NULL DEFAULT 0"),
    ("wf_jobs", "purged", "INTEGER NOT NULL DEFAULT 0"),
    // What it waits for before it starts (`waiting`); a workflow stored before waited for
    // nothing and has started.
    ("wf_jobs", "after", "TEXT NOT NULL DEFAULT ''"),
    ("wf_jobs", "after_any", "TEXT NOT NULL DEFAULT ''"),
    ("wf_jobs", "after_notok", "TEXT NOT NULL DEFAULT ''"),
    ("wf_jobs", "held", "INTEGER NOT NULL DEFAULT 0"),
    ("wf_jobs", "begin_ms", "INTEGER NOT NULL DEFAULT 0"),
    ("wf_jobs", "started", "INTEGER NOT NULL DEFAULT 1"),
    // Why it was cancelled as a whole, when not by a user (empty: `cancelled`).
    ("wf_jobs", "cancel_reason", "TEXT NOT NULL DEFAULT ''"),
    // The devices of its latest attempt (empty: none, or stored before they were kept).
    ("wf_instances", "devices", "TEXT NOT NULL DEFAULT ''"),
    // The ANode its latest attempt was offloaded to (NULL: run where it was placed, or stored
    // before offloads were kept), as `tasks.executed_node` for a batch task.
    ("wf_instances", "executed_node", "INTEGER"),
    // Its attempts lost for want of room for its inputs on a node's disk, bounded by
    // `max_attempts` (0: none, or stored before they were counted).
    ("wf_instances", "disk_losses", "INTEGER NOT NULL DEFAULT 0"),
    // Whether its attempt number names no run (`Inst::unstarted`), and the nodes whose agents
    // were sent that number and told to drop it (`Inst::taken_back_from`): a restart reuses
    // the number elsewhere as the server did before it (0 and empty: stored before they were
    // kept, and its next dispatch takes the next number, as it then did).
    ("wf_instances", "unstarted", "INTEGER NOT NULL DEFAULT 0"),
    (
        "wf_instances",
        "taken_back_from",
        "TEXT NOT NULL DEFAULT ''",
    ),
    // How long its latest attempt's inputs took to fetch before its program started, ms (0:
    // none, not known yet, or stored before it was kept).
    ("wf_instances", "fetch_ms", "INTEGER NOT NULL DEFAULT 0"),
    // Why its latest attempt ended without success, or why it ended without running
    // (`EndReason::as_str`), and the signal that killed it (NULL: none, or stored before).
    ("wf_instances", "reason", "TEXT"),
    ("wf_instances", "signal", "TEXT"),
    // The reason of the instances a cancel of the whole workflow ended (their rows are not
    // written then): `cancelled`, or `dependency_failed` for one a job it runs after ended
    // (NULL: not cancelled, or cancelled before reasons were kept, whose instances have none).
    ("wf_jobs", "cancel_end", "TEXT"),
];

/// Creates what is missing of this kind's tables, columns and index (a fresh store's, or one
/// from an earlier version). Keys are a namespace per owner, UNIQUE among an owner's keyed
/// workflows; a store from before the UNIQUE index may hold a key on two jobs, which keeps
/// naming the first ([`crate::store::KeyIndex::UniqueUnlessEmpty`]).
pub(crate) fn create_tables(conn: &rusqlite::Connection) -> Result<(), StoreError> {
    conn.execute_batch(SCHEMA)?;
    crate::store::add_missing_columns(conn, MIGRATIONS)?;
    crate::store::scope_keys_to_owners(
        conn,
        "wf_jobs",
        "key",
        None,
        crate::store::KeyIndex::UniqueUnlessEmpty,
    )
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum St {
    Waiting,
    Ready,
    Running,
    Done,
    Failed,
    /// Cancelled by a user (`cancel JOB`, `cancel JOB --tasks`), or not run because a producer
    /// was.
    Cancelled,
}

impl St {
    fn as_str(self) -> &'static str {
        match self {
            St::Waiting => "waiting",
            St::Ready => "ready",
            St::Running => "running",
            St::Done => "succeeded",
            St::Failed => "failed",
            St::Cancelled => "cancelled",
        }
    }
    /// Will not run again: succeeded, failed or cancelled.
    fn ended(self) -> bool {
        matches!(self, St::Done | St::Failed | St::Cancelled)
    }
    /// Ended without succeeding.
    fn not_run(self) -> bool {
        matches!(self, St::Failed | St::Cancelled)
    }
    fn parse(s: &str) -> St {
        match s {
            "ready" => St::Ready,
            "running" => St::Running,
            "succeeded" => St::Done,
            "failed" => St::Failed,
            "cancelled" => St::Cancelled,
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
    /// How many times in a row one of its inputs could not be fetched (memory only: a restart
    /// starts the count again); at [`MAX_INPUT_LOSSES`] it fails.
    inputs_lost: u32,
    /// How many times it was produced again because its output could not be fetched (memory
    /// only); at [`MAX_INPUT_LOSSES`] the next consumer that cannot fetch it fails instead.
    reproduced: u32,
    /// Attempts lost because its agent found no room for its inputs on the node's disk (the
    /// agent's [`NO_ROOM`]); at the server's `max_attempts` it fails. Stored: a restart must
    /// not give a cluster of full disks its bound afresh.
    disk_losses: u32,
    /// Produced again (its output was lost), outside the machine.
    reproducing: bool,
    /// Succeeded at least once (the graph counts it finished, even while it is produced again).
    produced: bool,
    /// What its latest finished attempt used, if measured.
    usage: Option<TaskUsage>,
    /// The devices (GPU indices) its latest attempt was given: a restart books them again.
    devices: Vec<u32>,
    /// The ANode its latest attempt was offloaded to (accelerator sharing, spec 01), stored
    /// with the dispatch: listings name it after a restart, and the state reads back the
    /// offloads still running ([`JobKind::offloaded_to`]) so that the ANode's loss re-runs them.
    executed: Option<u32>,
    /// Whether its attempt number names no run: that attempt was taken back from its agent's
    /// queue, or from the fetch of its inputs, before its program started
    /// ([`Workflows::take_back`]), so its next dispatch reuses the
    /// number (a hand-back is no attempt: a user reads `attempt 2` as a second run, and
    /// `HETSCHED_ATTEMPT` says so to the command) — except on a node in
    /// [`Inst::taken_back_from`]. Stored (`wf_instances.unstarted`), so a restart keeps it.
    unstarted: bool,
    /// The nodes whose agents were sent its current attempt number and told to drop it from
    /// their queues ([`Workflows::take_back`]); cleared when the number changes. A dispatch to
    /// one of them takes the next number: had the reply telling that agent to drop it been
    /// lost, the agent may have started it, and one (task, attempt) must never name two runs
    /// on one node (its kill, its result, its ledger entry and its log files are keyed so).
    /// Stored (`wf_instances.taken_back_from`): that agent may still hold the number after a
    /// restart too.
    taken_back_from: Vec<u32>,
    /// Running, and its agent's last heartbeat said it still fetches its inputs: its program
    /// has not started (listed `fetching`). Memory only: the next heartbeat says it again.
    fetching: bool,
    /// How long its latest attempt's inputs took to fetch before its program started at
    /// `started_ns`, ms (0: none, or not known yet), from its agent's heartbeat or result.
    fetch_ms: u64,
    /// Why its latest attempt ended without success, or why it ended without running (as a
    /// batch task's, [`EndReason`]): `None` while it never ran, runs (cleared at its
    /// dispatch) or succeeded. Stored (`wf_instances.reason`).
    reason: Option<EndReason>,
    /// With reason [`EndReason::Signal`]: the signal's name, when known.
    signal: Option<Box<str>>,
}

impl Inst {
    /// The run time its latest success counts in its task's mean (`mean_cpu_ms`, and what
    /// `prefetch = "auto"` judges by) while it stays succeeded: a restart rebuilds the figures
    /// from the succeeded rows with this, so the live path records and forgets with it too.
    /// None before a success, or for one without a start.
    fn success_ns(&self) -> Option<u64> {
        (self.st == St::Done && self.started_ns > 0)
            .then(|| self.finished_ns.saturating_sub(self.started_ns))
    }

    /// The attempt number its dispatch to `node` runs under: the next one, unless the current
    /// one never ran ([`Inst::unstarted`]) and `node`'s agent was never sent it
    /// ([`Inst::taken_back_from`]).
    fn next_attempt(&self, node: u32) -> u32 {
        if self.unstarted && !self.taken_back_from.contains(&node) {
            self.attempt
        } else {
            self.attempt + 1
        }
    }
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

    /// Instances that will not run (cancelled, or failed for good): the machine never places
    /// them, even when their producers' results would make them ready.
    fn withdraw(&mut self, ids: &[InstanceId]) {
        match self {
            Machine::Centralised(m) => m.withdraw(ids),
            Machine::Pcddb(m) => m.withdraw(ids),
        }
    }

    /// Instances that ended without succeeding come back (`resubmit`): those the graph has
    /// ready now.
    fn reinstate(&mut self, ids: &[InstanceId]) -> Vec<InstanceId> {
        match self {
            Machine::Centralised(m) => m.reinstate(ids),
            Machine::Pcddb(m) => m.reinstate(ids),
        }
    }

    fn resubmit(&mut self, ids: &[InstanceId], now: u64) -> Vec<Outgoing> {
        match self {
            Machine::Centralised(m) => m.resubmit(ids),
            Machine::Pcddb(m) => m.resubmit(ids, now),
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
    /// Cancelled as a whole (`hetsched cancel JOB`): `resubmit` refuses it.
    cancelled: bool,
    /// Why it was cancelled as a whole, when not by a user: each instance's message.
    cancel_reason: String,
    /// The reason of the instances its cancel as a whole ended ([`Workflows::cancel_with`]):
    /// stored, as their rows are not written then.
    cancel_end: Option<EndReason>,
    /// What it waits for before it starts ([`waiting`]).
    gate: Gate,
    /// Instances the machine sent to a node, to hand it at its next heartbeat.
    assigned: HashMap<u32, VecDeque<u32>>,
    /// Instances to run again, for the machine (retries, losses, re-productions, restart).
    rerun: Vec<u32>,
    /// Consumers whose input could not be fetched, waiting for it to be produced again (then
    /// they go to the machine again).
    blocked: Vec<u32>,
    /// Resources each running instance booked in the view: instance → (node, request, devices).
    booked: HashMap<u32, (u32, Resources, Vec<u32>)>,
    /// Its owner's group in the view (a user's cap on cores; [`Workflows::set_group`]): what
    /// its running instances book counts against it.
    group: Option<u32>,
    /// Its attribute vocabulary: bit k of its masks — its tasks', its nodes' as its machine and
    /// its agents' machines see them, its allocation requests' and grants' — is `vocab[k]`. Its
    /// own, from its file alone ([`task_masks`]): fixed for its life, the same after a restart,
    /// and never a bit of another workflow's.
    vocab: Vec<Word>,
    /// Required attribute mask of each task.
    masks: Vec<AttrMask>,
    /// The members its dispatcher knows (centralised).
    members: Vec<GraphNode>,
    /// The [`masks::View::stamp`] `members` were last compared with (0: none).
    members_stamp: u64,
    /// Where [`NodeMasks::view`] found its vocabulary last.
    vocab_view: usize,
    /// Messages from the launch node to a node, for its next heartbeat.
    to_node: HashMap<u32, Vec<Message>>,
    /// Per node: instances its pcddb machine took that will not run there (cancelled, not run
    /// because a producer was, or already run or running elsewhere), with how many more
    /// heartbeat replies list them ([`DROPPED_REPLIES`]: a lost reply costs nothing; the
    /// machine forgets each once). Without this the machine would count them in its instance
    /// table for the rest of the workflow.
    dropped: HashMap<u32, BTreeMap<u32, u8>>,
    /// Under `pcddb`: the instances its launch node's granted requests offer and no node has
    /// claimed or handed back yet; a node's `reply` and `return` are checked against them.
    offers: offers::Offers,
    /// Messages the launch node sent and received.
    sent: u64,
    received: u64,
    /// Per task: run times of its successful instances (`prefetch = "auto"` queues only short
    /// ones). Not stored: a restarted server measures again.
    observed: Vec<Observed>,
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
    /// The index listings show for instance `i` (and `cancel --tasks` picks by): its argument
    /// value, shared by its processes (`{index}`; never negative: the parser refuses that).
    fn listed_index(&self, i: u32) -> u32 {
        let (t, k) = self.task_of(i);
        let task = &self.rt.parsed.workflow.tasks[t];
        task.args.value(k / task.processes.max(1))
    }
    /// Instance `i`'s rank among the processes of its argument value, from 1, for a task of
    /// `processes` > 1 (0 otherwise: one process per value needs no rank).
    fn process_of(&self, i: u32) -> u32 {
        let (t, k) = self.task_of(i);
        match self.rt.parsed.workflow.tasks[t].processes {
            0 | 1 => 0,
            n => k % n + 1,
        }
    }
    /// `task[index]` of instance `i`, as messages name it (the index is its `{index}` value).
    fn label(&self, i: u32) -> String {
        let (t, k) = self.task_of(i);
        let task = &self.rt.parsed.workflow.tasks[t];
        let n = task.args.value(k / task.processes.max(1));
        format!("{}[{n}]", task.name)
    }
    fn dir(&self, i: u32) -> String {
        let (t, k) = self.task_of(i);
        format!(
            "{}/{}-{k}",
            self.seq,
            crate::jobs::workflow::safe(&self.rt.parsed.workflow.tasks[t].name)
        )
    }
    /// The producer instances of instance `i`, with the data items each provides (the
    /// workflow's one dependency map,
    /// [`hetsched_core::model::workflow::Workflow::producers_of`]).
    fn producers(&self, i: u32) -> Vec<(u32, Vec<String>)> {
        let (c, k) = self.task_of(i);
        let workflow = &self.rt.parsed.workflow;
        let mut out = Vec::new();
        for d in &workflow.tasks[c].depends_on {
            for j in workflow.producers_of(c, d, u64::from(k)) {
                out.push((self.offset[d.producer] + j as u32, d.data.clone()));
            }
        }
        out
    }
    /// The consumer instances of instance `i`
    /// ([`hetsched_core::model::workflow::Workflow::consumers_of`]).
    fn consumers(&self, i: u32) -> Vec<u32> {
        let (p, k) = self.task_of(i);
        let workflow = &self.rt.parsed.workflow;
        let mut out = Vec::new();
        for (c, t) in workflow.tasks.iter().enumerate() {
            for d in t.depends_on.iter().filter(|d| d.producer == p) {
                out.extend(
                    workflow
                        .consumers_of(c, d, u64::from(k))
                        .map(|j| self.offset[c] + j as u32),
                );
            }
        }
        out
    }
    fn finished(&self) -> bool {
        // From the back: instances are numbered in task order and readied roughly in that
        // order, so while a job runs an unended one is found at once (it is asked after every
        // result; from the front it cost a scan of every ended instance each time).
        self.insts.iter().rev().all(|x| x.st.ended())
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
        } else if self.insts.iter().any(|x| x.st == St::Cancelled) {
            // Some instances were cancelled (`cancel JOB --tasks`): it did not complete.
            "cancelled"
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

/// A first version, for a server that starts, of what agents hold between replies (the address
/// book, `Workflows::peers_version`; the clusters, `Workflows::clusters_version`): random, never
/// 0 (what an agent that holds none reports).
fn fresh_version() -> u64 {
    next_version(rand::random::<u64>())
}

/// The version after `v` (skipping 0).
fn next_version(v: u64) -> u64 {
    v.wrapping_add(1).max(1)
}

/// The workflow job kind.
pub struct Workflows {
    jobs: BTreeMap<u64, Box<WfJob>>,
    /// Instances cancelled while they ran whose processes their agents have not said ended
    /// ([`super::stopping`]): their workflows are not over for a wait until none is left.
    stopping: super::stopping::Stopping,
    /// A finished workflow's last stopping instance ended since the last commit: its waiters
    /// are woken ([`JobKind::ends_in_event`]).
    stopped_in_event: bool,
    default_balancer: BalancerKind,
    thresholds: Thresholds,
    /// Each node's `AgentData` address, from its heartbeats: the PCDDB address book.
    addresses: BTreeMap<u32, String>,
    /// The version of `addresses` (`PcddbJob.peers_version`): drawn at random when the kind
    /// is built, so a restarted server's never names the book an agent holds from an earlier
    /// run, and changed with every address added, changed or removed ([`Workflows::set_address`],
    /// [`Workflows::drop_dead_addresses`]). It holds live nodes only.
    /// A heartbeat reply carries the book only to an agent that reports another version: at
    /// 1,000 agents the whole book is ~25 KB, once per PCDDB workflow in every reply before.
    peers_version: u64,
    /// [`crate::state::nodes::Nodes::departures`] when the book was last cleared of nodes not
    /// live ([`Workflows::drop_dead_addresses`]); `None` before the first pass (and after a
    /// rollback, whose registry counts afresh).
    departures_seen: Option<u64>,
    /// Nodes heard (a heartbeat) since this server started: a restored node counts as alive
    /// before its first beat, but its address is unknown until then, so a consumer of its
    /// outputs waits for that beat rather than being sent no address (its fetch would fail, and
    /// the producers would run again).
    heard: BTreeSet<u32>,
    /// Nodes whose agent a consumer could not reach to fetch an output, since their last
    /// heartbeat (memory only). Their outputs count as lost until they beat again: a node whose
    /// agent died is declared dead only after the heartbeat timeout, and until then a consumer
    /// sent there for its next input would fail again, once per output the node holds — a
    /// consumer of four outputs of a killed agent failed for good at its third (issue 9's CLI
    /// kill test, 1 run in 4).
    unreachable: BTreeSet<u32>,
    /// Nodes whose agent reported an instance interrupted for want of room for its inputs on
    /// its disk (memory only), with the node's `last_seen` at that heartbeat: each counts as
    /// below its floor ([`Word::Room`] unset) until a later heartbeat, whose disk report then
    /// decides. The report that came with the result may predate the fetch that filled the
    /// disk; without this the instance could go straight back to the same node.
    no_room: BTreeMap<u32, std::time::Instant>,
    /// Nodes without room for inputs ([`Workflows::room_for_inputs`]) at their latest
    /// heartbeat, whose instances with inputs placed there and not started were taken back
    /// then ([`Workflows::take_back`]) — memory only: after a restart or a rollback every node
    /// is looked at again at its next beat. A node that enters this set is swept once; while it
    /// stays, nothing with inputs is placed or sent there.
    short_of_room: BTreeSet<u32>,
    /// The server's `max_attempts`: an instance lost this many times for want of disk room
    /// fails.
    max_attempts: u32,
    /// Each node's PCDDB figures, from its heartbeats: (sent, received, held).
    counters: BTreeMap<u32, (u64, u64, u32)>,
    /// When these launch nodes were built (this server's start, or the last rollback).
    epoch: u64,
    /// Allocation requests granted since then ([`Workflows::grant_of`]): each grant's serial.
    grants: u64,
    /// Round trips the agents measured: (from, to) → ns.
    rtt: BTreeMap<(u32, u32), u64>,
    /// Proximity clusters of the live nodes from those round trips (spec 05 §2): Sc1, Sc2, …
    clusters: Vec<Vec<u32>>,
    /// The version of `clusters` (`PcddbJob.clusters_version`): drawn at random when the kind
    /// is built, so a restarted (or rolled back) server's never names the clusters an agent
    /// holds from before, and changed whenever a recluster changes them. A heartbeat reply
    /// carries a node's clusters only to an agent that reports another version: at 1,000
    /// agents they were ~700 bytes, once per PCDDB workflow in every reply before.
    clusters_version: u64,
    /// The live nodes `clusters` was computed over.
    clustered: Vec<u32>,
    /// The registry's [`Nodes::liveness_generation`](crate::state::nodes::Nodes::liveness_generation)
    /// at which the live nodes were last found to be `clustered` (None: not since `clustered`
    /// changed): [`Workflows::clusters_lag`] compares them again only when it moved.
    clustered_live_at: Option<u64>,
    /// When `clusters` was last computed (None: never): while no PCDDB workflow runs, a change
    /// of the live nodes is followed at most every [`RECLUSTER_IDLE_NS`].
    reclustered_ns: Option<u64>,
    /// `[workflow] cluster_size`: the minimum cluster size m (None: ⌊0.3·N⌋).
    cluster_size: Option<u32>,
    /// `[workflow] check_interval`: the agents' self-check period, ms.
    check_interval_ms: u64,
    /// `[workflow] offer_ttl`: how long a PCDDB request's instances stay offered before they
    /// are placed again ([`offers::Offers::expire`]).
    offer_ttl: std::time::Duration,
    dirty: HashSet<(u64, u32)>,
    dirty_jobs: HashSet<u64>,
    /// Nodes the machines queued an instance or a message for in this event (woken at its end,
    /// see [`JobKind::take_wakes`]).
    woken: BTreeSet<u32>,
    /// Purged workflows: their `wf_jobs` rows stay as tombstones (`purged = 1`, no instance
    /// rows) so that their ids are never given again and their submission keys keep naming them.
    purged: BTreeSet<u64>,
    /// Workflows that may not have started ([`waiting`]): looked at instead of every job after
    /// each event (one that started or ended leaves it when next looked at).
    maybe_unstarted: BTreeSet<u64>,
    /// Workflows that may be running (started, not finished): a heartbeat looks at these, not
    /// at every workflow kept until purged (one found finished leaves the set then).
    maybe_running: BTreeSet<u64>,
    /// The live nodes' offers and each running vocabulary's masks over them, kept from one
    /// heartbeat to the next ([`masks`]).
    node_masks: NodeMasks,
    /// What the last refresh of `node_masks` took from the registry, kept for its capacity.
    nodes_changed: Vec<NodeId>,
}

fn thresholds(config: &ServerConfig) -> (BalancerKind, Thresholds, Option<u32>, u64) {
    let w = config.workflow.clone().unwrap_or_default();
    (
        w.balancer.unwrap_or_default().into(),
        // Checked when the configuration is (`ServerConfig::validate`).
        w.thresholds().unwrap_or_default(),
        w.cluster_size,
        // Checked when the state is built (`State::from_snapshot`).
        w.check_interval().map_or(100, |d| d.as_millis() as u64),
    )
}

impl Workflows {
    /// Sets (`Some`) or removes (`None`) `node`'s address in the address book, changing its
    /// version when the book changes. Whether the node had an address before.
    /// Each node's advertised address (`host:port`, possibly `https://`), as its heartbeats
    /// last said it.
    pub(crate) fn advertised(&self) -> impl Iterator<Item = (u32, &str)> {
        self.addresses.iter().map(|(&n, a)| (n, a.as_str()))
    }

    fn set_address(&mut self, node: u32, address: Option<&str>) -> bool {
        let before = match address {
            Some(a) if self.addresses.get(&node).map(String::as_str) == Some(a) => return true,
            Some(a) => self.addresses.insert(node, a.to_string()),
            None => self.addresses.remove(&node),
        };
        if address.is_some() || before.is_some() {
            self.peers_version = next_version(self.peers_version);
        }
        before.is_some()
    }

    /// Drops from the address book every node that is not alive — declared dead, its agent
    /// left, or removed (which it was declared dead or left before) — with a new version, so
    /// every agent is sent the book without them and stops dialling agents known to be gone:
    /// a hop whose next node has no address fails at once and the request returns to the
    /// launch node, as a failed dial to the gone agent would have, sooner or later (a request
    /// that brought the address with it still dials it, and fails as before). A node that
    /// comes back is in the book again from its first beat ([`Workflows::set_address`]), so
    /// the launch node's later tables may name it again.
    /// Called only while a PCDDB workflow runs: nothing reads the book otherwise. The pass
    /// over the book is made only when a node stopped being live since the last one
    /// ([`crate::state::nodes::Nodes::departures`]): at every beat it was 15 % of a beat's cost
    /// beside a running PCDDB workflow on 1,000 agents.
    fn drop_dead_addresses(&mut self, cx: &Ctx) {
        let departures = cx.nodes.departures();
        if self.departures_seen == Some(departures) {
            return;
        }
        self.departures_seen = Some(departures);
        if self.addresses.keys().any(|&n| !Self::alive(cx, n)) {
            self.addresses.retain(|&n, _| Self::alive(cx, n));
            self.peers_version = next_version(self.peers_version);
        }
    }

    /// The addresses a message from the launch node needs on its journey: a request hops
    /// along its underloaded table (each agent passes it to the next entry), so those nodes'
    /// addresses; any other message goes nowhere further.
    fn journey_peers(&self, body: &Body) -> BTreeMap<u32, String> {
        match body {
            Body::Request(r) => r
                .table
                .iter()
                .filter_map(|n| Some((n.0, self.addresses.get(&n.0)?.clone())))
                .collect(),
            _ => BTreeMap::new(),
        }
    }

    /// After a rollback (`self` rebuilt from the store, `old` the kind before it): keeps what
    /// the heartbeats told and the store does not hold — the nodes' addresses (and
    /// their version: agents holding it hold this book) and which nodes
    /// were heard since the start — so consumers do not wait for their producers' nodes to beat
    /// again.
    pub fn carry_over(&mut self, old: &Workflows) {
        self.addresses = old.addresses.clone();
        self.peers_version = old.peers_version;
        self.heard = old.heard.clone();
        self.unreachable = old.unreachable.clone();
        self.no_room = old.no_room.clone();
    }

    /// Builds the kind from its tables (creating them on a fresh store), putting running
    /// instances back on their nodes. The rows are read from `source` when given: a rollback
    /// rebuilds the state over a scratch store (`cx.store`) and passes the real one here.
    pub fn restore(
        config: &ServerConfig,
        cx: &mut Ctx,
        source: Option<&rusqlite::Connection>,
    ) -> Result<Self, StateError> {
        let (default_balancer, thresholds, cluster_size, check_interval_ms) = thresholds(config);
        create_tables(cx.store.conn())?;
        let mut me = Workflows {
            jobs: BTreeMap::new(),
            stopping: super::stopping::Stopping::default(),
            stopped_in_event: false,
            default_balancer,
            thresholds,
            addresses: BTreeMap::new(),
            peers_version: fresh_version(),
            departures_seen: None,
            heard: BTreeSet::new(),
            unreachable: BTreeSet::new(),
            no_room: BTreeMap::new(),
            short_of_room: BTreeSet::new(),
            max_attempts: config.max_attempts.max(1),
            counters: BTreeMap::new(),
            epoch: cx.now,
            grants: 0,
            rtt: BTreeMap::new(),
            clusters: Vec::new(),
            clusters_version: fresh_version(),
            clustered: Vec::new(),
            clustered_live_at: None,
            reclustered_ns: None,
            cluster_size,
            check_interval_ms,
            // Checked when the state is built (`State::from_snapshot`).
            offer_ttl: config
                .workflow
                .as_ref()
                .map_or(Ok(crate::config::DEFAULT_OFFER_TTL), |w| w.offer_ttl())
                .unwrap_or(crate::config::DEFAULT_OFFER_TTL),
            dirty: HashSet::new(),
            dirty_jobs: HashSet::new(),
            woken: BTreeSet::new(),
            purged: BTreeSet::new(),
            maybe_unstarted: BTreeSet::new(),
            maybe_running: BTreeSet::new(),
            node_masks: NodeMasks::default(),
            nodes_changed: Vec::new(),
        };
        {
            let mut q = source
                .unwrap_or_else(|| cx.store.conn())
                .prepare("SELECT id FROM wf_jobs WHERE purged != 0")
                .map_err(StoreError::from)?;
            let ids = q
                .query_map([], |r| r.get::<_, i64>(0))
                .map_err(StoreError::from)?
                .collect::<Result<Vec<_>, _>>()
                .map_err(StoreError::from)?;
            me.purged.extend(ids.into_iter().map(|id| id as u64));
        }
        let rows: Vec<(StoredJob, StoredGate)> = {
            let mut q = source
                .unwrap_or_else(|| cx.store.conn())
                .prepare("SELECT id,name,origin,text,workdir,balancer,submitted_ns,finished_ns,cancelled,after,after_any,after_notok,held,begin_ms,started,cancel_reason,cancel_end FROM wf_jobs WHERE purged = 0 ORDER BY id")
                .map_err(StoreError::from)?;
            q.query_map([], |r| {
                Ok((
                    (
                        r.get::<_, i64>(0)? as u64,
                        r.get(1)?,
                        r.get(2)?,
                        r.get(3)?,
                        r.get(4)?,
                        r.get(5)?,
                        r.get::<_, i64>(6)? as u64,
                        r.get::<_, i64>(7)? as u64,
                        r.get::<_, i64>(8)? != 0,
                    ),
                    StoredGate {
                        after: r.get(9)?,
                        after_any: r.get(10)?,
                        after_notok: r.get(11)?,
                        held: r.get::<_, i64>(12)? != 0,
                        begin_ms: r.get::<_, i64>(13)? as u64,
                        started: r.get::<_, i64>(14)? != 0,
                        cancel_reason: r.get(15)?,
                        cancel_end: r
                            .get::<_, Option<String>>(16)?
                            .as_deref()
                            .and_then(EndReason::from_name),
                    },
                ))
            })
            .map_err(StoreError::from)?
            .collect::<Result<_, _>>()
            .map_err(StoreError::from)?
        };
        for (
            (seq, name, origin, text, workdir, balancer, submitted_ns, finished_ns, cancelled),
            g,
        ) in rows
        {
            let rt = read_stored(&origin, &text)
                .map_err(|error| StateError::StoredJobUnreadable { job: seq, error })?;
            let balancer = balancer.parse().unwrap_or(BalancerKind::Centralised);
            let mut job = me.new_job(cx, seq, rt, balancer, name, origin, text, workdir)?;
            job.submitted_ns = submitted_ns;
            job.finished_ns = finished_ns;
            job.cancelled = cancelled;
            job.cancel_reason = g.cancel_reason;
            job.cancel_end = g.cancel_end;
            job.gate = Gate {
                after: crate::store::parse_list(&g.after, "job ids")?,
                after_any: crate::store::parse_list(&g.after_any, "job ids")?,
                after_notok: crate::store::parse_list(&g.after_notok, "job ids")?,
                held: g.held,
                begin_ms: (g.begin_ms > 0).then_some(g.begin_ms),
                started: g.started,
                waiting_for: None,
            };
            {
                let mut q = source
                    .unwrap_or_else(|| cx.store.conn())
                    .prepare("SELECT instance,state,attempt,node,started_ns,finished_ns,exit_code,message,failures,produced,cpu_user_ms,cpu_system_ms,max_rss_bytes,devices,executed_node,disk_losses,unstarted,taken_back_from,fetch_ms,max_gpu_memory_bytes,reason,signal FROM wf_instances WHERE job=?1")
                    .map_err(StoreError::from)?;
                let mut rows = q.query(params![seq as i64]).map_err(StoreError::from)?;
                while let Some(r) = rows.next().map_err(StoreError::from)? {
                    let i: i64 = r.get(0).map_err(StoreError::from)?;
                    let Ok(i) = u32::try_from(i) else {
                        continue;
                    };
                    let task = job.task_of(i).0;
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
                    // A row stored before `failures` stopped counting the last failure says one
                    // more for an instance that failed for good (`retries` + 1): it reads as
                    // the count is now, which never exceeds the task's `retries`.
                    x.failures = (r.get::<_, i64>(8).map_err(StoreError::from)? as u32)
                        .min(job.rt.tasks.get(task).map_or(0, |t| t.retries));
                    x.produced =
                        r.get::<_, i64>(9).map_err(StoreError::from)? != 0 || x.st == St::Done;
                    let measured = |c| r.get::<_, Option<i64>>(c).map_err(StoreError::from);
                    x.usage = match (measured(10)?, measured(11)?, measured(12)?) {
                        (Some(user), Some(system), Some(rss)) => Some(TaskUsage {
                            cpu_user_ms: user as u64,
                            cpu_system_ms: system as u64,
                            max_rss_bytes: rss as u64,
                            max_gpu_memory_bytes: measured(19)?.unwrap_or(0) as u64,
                        }),
                        _ => None,
                    };
                    x.devices = crate::store::parse_list(
                        &r.get::<_, String>(13).map_err(StoreError::from)?,
                        "devices",
                    )?;
                    x.executed = r
                        .get::<_, Option<i64>>(14)
                        .map_err(StoreError::from)?
                        .and_then(|n| u32::try_from(n).ok());
                    x.disk_losses =
                        u32::try_from(r.get::<_, i64>(15).map_err(StoreError::from)?).unwrap_or(0);
                    x.unstarted = r.get::<_, i64>(16).map_err(StoreError::from)? != 0;
                    x.taken_back_from = crate::store::parse_list(
                        &r.get::<_, String>(17).map_err(StoreError::from)?,
                        "taken_back_from",
                    )?;
                    x.fetch_ms =
                        u64::try_from(r.get::<_, i64>(18).map_err(StoreError::from)?).unwrap_or(0);
                    let text = |c| r.get::<_, Option<String>>(c).map_err(StoreError::from);
                    x.reason = text(20)?.as_deref().and_then(EndReason::from_name);
                    x.signal = text(21)?.as_deref().and_then(crate::store::signal_name);
                    // Its run time counts again for `prefetch = "auto"`, as it did before the
                    // restart: a task measured short is queued at once, not measured anew.
                    if let Some(took) = x.success_ns()
                        && let Some(o) = job.observed.get_mut(task)
                    {
                        o.record(took);
                    }
                }
            }
            // A workflow cancelled as a whole: what had not ended was cancelled with it, when
            // the job row says it finished (its rows were not written at the cancel).
            if cancelled {
                let why = if job.cancel_reason.is_empty() {
                    CANCELLED.to_string()
                } else {
                    job.cancel_reason.clone()
                };
                for x in job.insts.iter_mut().filter(|x| !x.st.ended()) {
                    x.st = St::Cancelled;
                    x.message = why.clone();
                    x.reason = job.cancel_end;
                    x.signal = None;
                    x.finished_ns = job.finished_ns;
                }
            }
            if !job.gate.started && !cancelled {
                // It has not started: nothing ran, nothing is ready (its rows are the instances
                // cancelled while it waited); the state decides on it once every kind is
                // restored.
                me.maybe_unstarted.insert(seq);
                me.jobs.insert(seq, Box::new(job));
                continue;
            }
            // Replay the successes into the graph, in readiness order.
            let mut graph = InstanceGraph::new(&job.rt.parsed.workflow, &job.masks);
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
            let (machine, members) = me.machine(cx, balancer, graph, &job.vocab);
            job.machine = machine;
            job.members = members;
            job.members_stamp = 0;
            // What ended without succeeding is never placed again, even when its producers
            // (running at the restart) succeed later.
            let ended: Vec<InstanceId> = (0..job.insts.len() as u32)
                .filter(|&i| job.insts[i as usize].st.not_run())
                .map(InstanceId)
                .collect();
            job.machine.withdraw(&ended);
            for i in 0..job.insts.len() as u32 {
                let tid = job.task_id(i);
                let request = job.rt.tasks[job.task_of(i).0].request();
                let x = &mut job.insts[i as usize];
                match x.st {
                    St::Running => {
                        if let Some(n) = x.node {
                            cx.nodes.started(NodeId(n), tid);
                            // It holds its resources again, its own devices, whatever else
                            // holds the node: what the node's free cores do not cover was
                            // prefetched, and is the node's debt, as for a batch task. (An
                            // instance stored before its devices were takes free ones.)
                            let node = NodeId(n);
                            if x.devices.len() < request.gpus as usize
                                && let Some(d) = cx.view.book(node, request)
                            {
                                x.devices = d;
                            } else {
                                cx.nodes.prefetch.restoring_cores(
                                    cx.view,
                                    node,
                                    tid,
                                    request.cores,
                                );
                                cx.view.restore_booked(node, request, &x.devices)?;
                            }
                            job.booked.insert(i, (n, request, x.devices.clone()));
                        }
                    }
                    St::Failed | St::Cancelled | St::Done => {}
                    St::Ready | St::Waiting if reached[i as usize] => {
                        x.st = St::Ready;
                        // Succeeded once and ready again: its output was lost and it is being
                        // produced again, so it runs where a consumer waits for it, as before
                        // the restart ([`Self::flush`]).
                        x.reproducing = x.produced;
                        job.rerun.push(i);
                    }
                    St::Ready | St::Waiting => x.st = St::Waiting,
                }
            }
            me.flush(cx, &mut job);
            if job.finished_ns == 0 {
                me.maybe_running.insert(seq);
            }
            me.jobs.insert(seq, Box::new(job));
        }
        // Stopped instances whose process end was not reported before the server stopped:
        // still stopping if their node may come back (its first heartbeat says whether the
        // process still runs; [`super::stopping`]).
        let stops = crate::store::task_stops(source.unwrap_or_else(|| cx.store.conn()))?;
        for (task, attempt, node) in stops {
            if Kind::of(task) != Some(Kind::Workflow) {
                continue; // another kind's (`Batch::restore`)
            }
            let (seq, i) = job_of(task);
            let job = me
                .jobs
                .get(&seq)
                .filter(|j| {
                    j.insts
                        .get(i as usize)
                        .is_some_and(|x| x.st == St::Cancelled && x.attempt == attempt)
                })
                .map(|j| j.id());
            let live = cx
                .nodes
                .get(node)
                .is_some_and(|r| (r.alive || r.kept_out_awaiting_return) && !r.removed);
            match job {
                Some(job) if live => me.stopping.restore(node, task, attempt, job),
                _ => me.stopping.drop_stored(task),
            }
        }
        Ok(me)
    }

    /// The last of workflow `job`'s stopping instances ended: if it had finished, it is over
    /// now, and the clients waiting on it are woken after the commit.
    fn stopped(&mut self, job: u64) {
        let seq = job & ((1 << super::KIND_SHIFT) - 1);
        if self.jobs.get(&seq).is_some_and(|j| j.finished()) {
            self.stopped_in_event = true;
        }
    }

    /// A machine for a new or restored job: a launch node with the current clusters (pcddb), or
    /// a dispatcher over the live nodes, their masks over the job's vocabulary `vocab`
    /// (centralised, with the members it was given).
    fn machine(
        &mut self,
        cx: &Ctx,
        balancer: BalancerKind,
        graph: InstanceGraph,
        vocab: &[Word],
    ) -> (Machine, Vec<GraphNode>) {
        match balancer {
            BalancerKind::Pcddb => {
                // Clusters that lag a change of the live nodes (see `RECLUSTER_IDLE_NS`) are
                // brought up to date before a launch node takes them.
                if self.clusters_lag(cx) {
                    self.recluster(cx);
                }
                let mut launch = LaunchNode::with_clusters(LAUNCH, Vec::new(), graph);
                launch.set_clusters(&self.cluster_table());
                (Machine::Pcddb(launch), Vec::new())
            }
            _ => {
                let members = self.graph_nodes(cx, vocab);
                let mut d = Dispatcher::new(LAUNCH, members.clone(), graph);
                // Each member's load before the graph starts, as its next report will say it:
                // the cores work holds there (batch tasks, stream workers, other workflows;
                // after a restart this one's running instances too). A new dispatcher counts 0
                // everywhere, and a workflow submitted behind a batch task holding a node
                // pushed its first instances there as onto an idle one.
                for m in &members {
                    let held = cx
                        .view
                        .nodes()
                        .get(m.id.index())
                        .map_or(0, |n| n.node.cores.saturating_sub(n.free.cores));
                    if held > 0 {
                        // A report only sets the member's load: nothing to send.
                        let _ = d.handle(
                            LaunchEvent::Deliver(Message {
                                from: m.id,
                                to: LAUNCH,
                                body: Body::Report { held },
                            }),
                            cx.now,
                        );
                    }
                }
                (Machine::Centralised(d), members)
            }
        }
    }

    /// The clusters as the launch node takes them: (Sc k, members).
    fn cluster_table(&self) -> Vec<(ClusterId, Vec<NodeId>)> {
        self.clusters
            .iter()
            .enumerate()
            .map(|(k, m)| (ClusterId(k as u32), m.iter().map(|&n| NodeId(n)).collect()))
            .collect()
    }

    /// Node `n` as the scheduler's view sees it: a bound NNode (accelerator sharing, spec 01)
    /// with the devices of the ANodes it reaches, as the batch policy sees it, so a GPU instance
    /// placed there is offloaded to its ANode; an unbound NNode with none.
    fn seen<'a>(cx: &'a Ctx, n: u32) -> Option<&'a hetsched_core::model::cluster::Node> {
        cx.view.nodes().get(n as usize).map(|s| &s.node)
    }

    /// A node's attributes: those its agent declares, and `gpu` with accelerators (a bound
    /// NNode's included, as for batch jobs' `requires`).
    fn attributes_of(&self, cx: &Ctx, n: u32) -> Vec<String> {
        Self::seen(cx, n)
            .map(hetsched_core::model::cluster::Node::all_attributes)
            .unwrap_or_default()
    }

    /// What every live node offers the workflows' words now: one pass over the registry, which
    /// a workflow's own vocabulary is then matched against ([`Offer::mask`], with one clock
    /// read for every node's time left). For a new machine; heartbeats keep theirs
    /// ([`NodeMasks`]).
    fn offers(&self, cx: &Ctx) -> Vec<Offer> {
        (0..cx.nodes.len() as u32)
            .filter(|&n| Self::alive(cx, n))
            .map(|n| self.offer_of(cx, n))
            .collect()
    }

    /// What node `n` offers the workflows' words ([`Offer`]).
    fn offer_of(&self, cx: &Ctx, n: u32) -> Offer {
        let rec = cx.nodes.get(n);
        Offer {
            id: n,
            cores: rec.map_or(1, |r| r.spec.cores.max(1)),
            facts: rec.zip(Self::seen(cx, n)).map(|(rec, seen)| Facts {
                attrs: self.attributes_of(cx, n),
                capacity: seen.capacity(),
                ends_at: rec.ends_at,
                room: self.room_for_inputs(rec, n),
            }),
        }
    }

    /// The scalars of what node `n` offers, read at every heartbeat while workflows run to
    /// find the offers that changed ([`masks`]); None: it is not live.
    fn offer_key(&self, cx: &Ctx, n: u32) -> Option<Key> {
        let rec = cx.nodes.get(n).filter(|r| r.alive && !r.removed)?;
        Some(Key {
            cores: rec.spec.cores.max(1),
            seen: Self::seen(cx, n).map(|s| (s.capacity(), !s.accelerators.is_empty())),
            ends_at: rec.ends_at,
            room: self.room_for_inputs(rec, n),
        })
    }

    /// Whether node `n` (registry record `rec`) takes instances that fetch inputs: its agent's
    /// last report has its disk at or above its floor, and no instance found no room there
    /// since ([`Workflows::no_room`]). The one rule of the masks' [`Word::Room`] bit, of the
    /// dispatch to a node and of taking work back from one.
    fn room_for_inputs(&self, rec: &crate::state::nodes::NodeRec, n: u32) -> bool {
        has_room(rec) && !self.no_room.contains_key(&n)
    }

    /// Whether instance `i` fetches inputs before it starts (its task has some): it needs a
    /// node with room for them ([`Word::Room`]).
    fn fetches_inputs(job: &WfJob, i: u32) -> bool {
        let t = job.task_of(i).0;
        job.rt
            .parsed
            .workflow
            .tasks
            .get(t)
            .is_some_and(|task| !task.inputs.is_empty())
    }

    /// The live nodes as a workflow's balancer sees them: cores, and attribute masks over its
    /// vocabulary `vocab`.
    fn graph_nodes(&self, cx: &Ctx, vocab: &[Word]) -> Vec<GraphNode> {
        members_over(&self.offers(cx), vocab, std::time::Instant::now())
    }

    /// Centralised: the dispatcher's members follow the live nodes and their masks now (also
    /// done at every heartbeat; instances nobody could run are tried again).
    fn refresh_members(&mut self, cx: &Ctx, job: &mut WfJob) {
        let Machine::Centralised(d) = &mut job.machine else {
            return;
        };
        let nodes = self.graph_nodes(cx, &job.vocab);
        if job.members != nodes {
            job.members = nodes.clone();
            job.members_stamp = 0;
            let o = d.set_members(nodes);
            self.apply(job, o);
        }
    }

    /// Hands the instances to run again to the job's machine — except a lost output's producer
    /// that a consumer already waits for on a live node: it runs there, first (see
    /// [`Self::waiting_for`]).
    fn flush(&mut self, cx: &mut Ctx, job: &mut WfJob) {
        if job.rerun.is_empty() {
            return;
        }
        let mut ids = Vec::new();
        for i in std::mem::take(&mut job.rerun) {
            let x = &job.insts[i as usize];
            if !matches!(x.st, St::Ready | St::Waiting) {
                continue;
            }
            if x.reproducing
                && let Some(n) = self.waiting_for(cx, job, i)
            {
                job.assigned.entry(n).or_default().push_front(i);
                cx.nodes.wakes.node(n);
                continue;
            }
            ids.push(InstanceId(i));
        }
        if ids.is_empty() {
            return;
        }
        let out = job.machine.resubmit(&ids, cx.now);
        self.apply(job, out);
    }

    /// A live node where a consumer of `p` waits for `p`'s lost output (the node took the
    /// consumer before the output was lost), the one with most such consumers (lowest id on
    /// ties).
    ///
    /// The producer runs there rather than through the balancer. Those consumers count in the
    /// node's instance table, and under pcddb they may fill every node's table to LT or more:
    /// then no node reports itself underloaded, an allocation request carrying the producer
    /// finds no taker, and nothing ever runs again. (This happened when the server restarted
    /// while an agent died: every live node held consumers of outputs the dead one had.) It
    /// is recovery, not balancing — spec 05 has no lost outputs — and it costs no fetch: the
    /// output is made where it is read. The node's instance table does not count it, so it
    /// may run above MT × cores.
    ///
    /// Only a node whose mask meets the producer's task ([`WfJob::masks`]: its `requires`, its
    /// size, its time limit, room for its inputs) takes it, as the balancer would place it:
    /// before, a producer that `requires = ["prod"]` ran again on whatever node its consumer
    /// waited on. With no such node it goes to the balancer, which places it on a node that
    /// qualifies or keeps it waiting, with the usual pending reason.
    fn waiting_for(&self, cx: &Ctx, job: &WfJob, p: u32) -> Option<u32> {
        let consumers: HashSet<u32> = job.consumers(p).into_iter().collect();
        let need = job.masks.get(job.task_of(p).0).copied().unwrap_or(0);
        let now = std::time::Instant::now();
        job.assigned
            .iter()
            .filter(|(n, _)| Self::alive(cx, **n))
            .map(|(&n, q)| (q.iter().filter(|i| consumers.contains(i)).count(), n))
            .filter(|&(k, n)| k > 0 && self.offer_of(cx, n).mask(&job.vocab, now) & need == need)
            .max_by_key(|&(k, n)| (k, std::cmp::Reverse(n)))
            .map(|(_, n)| n)
    }

    /// The instances `node`'s machine is to forget, for one heartbeat reply: each is listed in
    /// [`DROPPED_REPLIES`] replies, then no more.
    fn take_dropped(job: &mut WfJob, node: u32) -> Vec<u32> {
        let Some(d) = job.dropped.get_mut(&node) else {
            return Vec::new();
        };
        let listed: Vec<u32> = d.keys().copied().collect();
        d.retain(|_, left| {
            *left = left.saturating_sub(1);
            *left > 0
        });
        if d.is_empty() {
            job.dropped.remove(&node);
        }
        listed
    }

    /// Node `n` has no room for inputs on its disk ([`Self::room_for_inputs`]): every instance
    /// of `job` that fetches inputs, was placed there and whose program has not started goes
    /// back to the job's machine, which places it on a node with room (`n`'s mask lacks
    /// [`Word::Room`] now). Those are the instances waiting on the server for the node
    /// (`assigned`), those sent beyond its free cores that wait in its agent's queue
    /// (`prefetch`), and those its agent says still fetch their inputs (`fetching`, from its
    /// heartbeats: [`Self::note_fetching`], which this beat's report has just updated). `out`
    /// tells the agent to drop the queued ones and stop the fetching ones (the result it sends
    /// for a stopped one is `n`'s, which no longer speaks for the instance). None counts a lost attempt: none found the disk full — a fetch still running
    /// there would likely stop at the floor, count a disk loss against `max_attempts` and only
    /// then go elsewhere, meanwhile holding its cores and what it wrote — and each runs again
    /// under the same attempt number ([`Inst::unstarted`]), never on `n`. Instances bound for an
    /// ANode (offloaded) go back too: an NNode fetches their inputs on its own disk first. An
    /// instance whose program runs is left to end as it will (its inputs are all here). One
    /// whose program started in the moment between its agent's heartbeat and the stop is
    /// stopped with it, a moment of its run lost; it still runs elsewhere as the same attempt.
    /// Returns how many went back.
    fn take_back(&mut self, cx: &mut Ctx, job: &mut WfJob, n: u32, out: &mut Outbox) -> usize {
        let mut back = Vec::new();
        if let Some(q) = job.assigned.remove(&n) {
            let (leave, stay): (VecDeque<u32>, VecDeque<u32>) =
                q.into_iter().partition(|&i| Self::fetches_inputs(job, i));
            if !stay.is_empty() {
                job.assigned.insert(n, stay);
            }
            back.extend(leave);
        }
        let mut queued: Vec<u32> = job
            .booked
            .iter()
            .filter(|&(&i, &(at, _, _))| {
                at == n
                    && Self::fetches_inputs(job, i)
                    && (cx.nodes.prefetch.queued.contains(job.task_id(i))
                        || job.insts.get(i as usize).is_some_and(|x| x.fetching))
            })
            .map(|(&i, _)| i)
            .collect();
        // In instance order, whatever the map's: the kills and the machine's placements are
        // the same from run to run.
        queued.sort_unstable();
        for i in queued {
            let tid = job.task_id(i);
            let x = &mut job.insts[i as usize];
            if x.st != St::Running || x.node != Some(n) {
                continue;
            }
            out.kill(crate::state::types::TaskRef {
                task_id: tid,
                attempt: x.attempt,
            });
            x.st = St::Ready;
            x.node = None;
            x.fetching = false;
            // Its program never started: its number names no run, and goes to its next
            // dispatch (not back to this node's agent, which may hold it still if the kill is
            // lost).
            x.unstarted = true;
            if !x.taken_back_from.contains(&n) {
                x.taken_back_from.push(n);
            }
            // One bound for an ANode waits in the NNode's queue: its inputs are fetched onto
            // the NNode's disk before it is offloaded, so it would find no room as any other.
            // It never reached the ANode; the state forgets the offload with the kill
            // (`State::forget_killed_offloads`).
            x.executed = None;
            // Stored ready: a restart must not restore it as running on `n`, where its agent
            // no longer holds it.
            self.dirty.insert((job.seq, i));
            cx.nodes.ended(NodeId(n), tid);
            Self::unbook(cx, job, i);
            back.push(i);
        }
        let k = back.len();
        Self::hand_back(job, n, back);
        k
    }

    /// Running instance `task` was lost (`reason` says why): it is ready to run again. One
    /// whose assignment never reached its agent (`undelivered`) keeps its attempt number for
    /// its next dispatch ([`Inst::unstarted`]), on any node: no agent ever held that number.
    fn lost(&mut self, cx: &mut Ctx, task: u64, reason: &str, undelivered: bool) {
        let (seq, i) = job_of(task);
        let Some(mut job) = self.jobs.remove(&seq) else {
            return;
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
            cx.metrics.lost(crate::metrics::Lost::Node);
            x.st = St::Ready;
            x.node = None;
            // Listed until the attempt that runs it again ends, as a batch task's. One never
            // delivered runs again under its number, which names no run yet: not "lost".
            x.message = if undelivered {
                format!("attempt {} never ran: {reason}", x.attempt)
            } else {
                format!("attempt {} lost: {reason}", x.attempt)
            };
            (x.reason, x.signal) = (Some(EndReason::Lost), None);
            // Before the machine places it again (below, in `flush`): its next dispatch reads it.
            if undelivered {
                x.unstarted = true;
            }
            Self::unbook(cx, &mut job, i);
            job.rerun.push(i);
            self.dirty.insert((seq, i));
            self.flush(cx, &mut job);
        }
        self.jobs.insert(seq, job);
    }

    /// Instances placed on node `n` that will not run there (the node is gone or takes no more
    /// work, or has no room for their inputs) go back to the machine, which places them again.
    /// Under `pcddb` the node's machine took them and counts them in its instance table: it is
    /// told to forget them — should the node come back, too (declared dead while its agent was
    /// slow, say). Else it never reported itself underloaded again, and with every live node in
    /// that state nothing was placed any more (the CLI kill test stalled, 1 run in 12). (An
    /// instance placed there by the server, [`Self::waiting_for`], is unknown to it: listing it
    /// costs nothing.)
    fn hand_back(job: &mut WfJob, n: u32, ids: impl IntoIterator<Item = u32>) {
        let pcddb = job.balancer == BalancerKind::Pcddb;
        for i in ids {
            if pcddb {
                job.dropped.entry(n).or_default().insert(i, DROPPED_REPLIES);
            }
            job.rerun.push(i);
        }
    }

    /// The grant of an allocation request the launch node sends (`None` for any other
    /// message): what it covers — the request's fixed fields and its instances, ascending, with
    /// their requirements — under the next serial; the state signs it ([`crate::tickets`]).
    /// Agents pass the request on with it, and another agent takes from it only instances it
    /// lists.
    fn grant_of(&mut self, body: &Body) -> Option<crate::state::types::Granted> {
        let Body::Request(r) = body else {
            return None;
        };
        let mut granted: Vec<(u32, u64)> = r
            .instances
            .iter()
            .map(|w| (w.instance.0, w.requires))
            .collect();
        granted.sort_unstable();
        // An instance listed twice is granted once (its requirements are the graph's, the same
        // each time).
        granted.dedup_by_key(|&mut (i, _)| i);
        self.grants += 1;
        Some(crate::state::types::Granted {
            epoch: self.epoch,
            serial: self.grants,
            launch: r.launch.0,
            cluster: r.cluster.0,
            sent_at: r.sent_at,
            instances: granted.iter().map(|&(i, _)| i).collect(),
            requires: granted.iter().map(|&(_, q)| q).collect(),
            table: r.table.iter().map(|n| n.0).collect(),
            signature: Vec::new(),
        })
    }

    /// What node `node`'s agent says of the instances it runs: which still fetch their inputs
    /// (listed `fetching`), and for those whose program started since, that start (their
    /// `started_ns` from then on, stored) and how long the fetch took (`fetch_ms`). An agent
    /// that predates these fields says every instance runs, and nothing changes.
    fn note_fetching(&mut self, node: NodeId, report: &HeartbeatReport) {
        for rt in &report.running {
            if super::Kind::of(rt.task_id) != Some(super::Kind::Workflow) || rt.queued {
                continue;
            }
            let (seq, i) = job_of(rt.task_id);
            let Some(x) = self
                .jobs
                .get_mut(&seq)
                .and_then(|j| j.insts.get_mut(i as usize))
            else {
                continue;
            };
            if x.st != St::Running || x.node != Some(node.0) || x.attempt != rt.attempt {
                continue;
            }
            x.fetching = rt.fetching;
            if !rt.fetching && rt.program_started_ns > 0 && x.started_ns != rt.program_started_ns {
                x.started_ns = rt.program_started_ns;
                x.fetch_ms = hetsched_core::time::fetch_ms(rt.started_ns, rt.program_started_ns);
                self.dirty.insert((seq, i));
            }
        }
    }

    /// Gives back what instance `i` booked in the view.
    fn unbook(cx: &mut Ctx, job: &mut WfJob, i: u32) {
        if let Some((n, r, d)) = job.booked.remove(&i) {
            cx.view.unbook(NodeId(n), r, &d);
            cx.view.release_group(job.group, r);
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn new_job(
        &mut self,
        cx: &Ctx,
        seq: u64,
        rt: RuntimeWorkflow,
        balancer: BalancerKind,
        name: String,
        origin: String,
        text: String,
        workdir: String,
    ) -> Result<WfJob, StateError> {
        let mut offset = Vec::new();
        let mut total = 0u32;
        for t in &rt.parsed.workflow.tasks {
            offset.push(total);
            total += t.instances() as u32;
        }
        offset.push(total);
        let (vocab, masks) = task_masks(&rt)?;
        let graph = InstanceGraph::new(&rt.parsed.workflow, &masks);
        let (machine, members) = self.machine(cx, balancer, graph, &vocab);
        let observed = vec![Observed::default(); rt.parsed.workflow.tasks.len()];
        Ok(WfJob {
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
                    inputs_lost: 0,
                    reproduced: 0,
                    disk_losses: 0,
                    reproducing: false,
                    produced: false,
                    usage: None,
                    devices: Vec::new(),
                    executed: None,
                    unstarted: false,
                    taken_back_from: Vec::new(),
                    fetching: false,
                    fetch_ms: 0,
                    reason: None,
                    signal: None,
                };
                total as usize
            ],
            machine,
            submitted_ns: cx.now,
            finished_ns: 0,
            cancelled: false,
            cancel_reason: String::new(),
            cancel_end: None,
            gate: Gate::started(),
            assigned: HashMap::new(),
            rerun: Vec::new(),
            blocked: Vec::new(),
            booked: HashMap::new(),
            group: None,
            vocab,
            masks,
            members,
            members_stamp: 0,
            vocab_view: 0,
            to_node: HashMap::new(),
            dropped: HashMap::new(),
            offers: offers::Offers::default(),
            sent: 0,
            received: 0,
            observed,
        })
    }

    /// Accepts a workflow: parsed by the core's parser, stored in one transaction, then started.
    pub fn submit(
        &mut self,
        cx: &mut Ctx,
        sub: Submission,
        id: u64,
    ) -> Result<Submitted, StateError> {
        let rt = parse_runtime_workflow(&sub.origin, &sub.text)?;
        // A retry of a submission whose reply was lost: the job its owner stored under its key
        // (another owner's job under the same key is not this one's). `key != ''` lets SQLite
        // use the index, which holds only keyed rows.
        if !sub.key.is_empty() {
            let found: Option<(i64, String)> = cx
                .store
                .conn()
                .query_row(
                    "SELECT id, text FROM wf_jobs WHERE owner = ?1 AND key = ?2 AND key != '' ORDER BY id LIMIT 1",
                    params![sub.owner, sub.key],
                    |r| Ok((r.get(0)?, r.get(1)?)),
                )
                .ok();
            // The same key with another file is not a retry, as for a batch job: refused.
            if let Some((id, stored)) = &found
                && !crate::store::is_same_file(stored, &sub.text)
            {
                return Err(StateError::Invalid(format!(
                    "submission key `{}` already names job {id}, submitted with another file",
                    hetsched_core::text::clip(&sub.key)
                )));
            }
            let found = found.map(|(id, _)| id);
            if let Some(j) = found.and_then(|s| self.jobs.get(&(s as u64))) {
                return Ok(Submitted {
                    job_id: j.id(),
                    tasks: j.insts.len() as u64,
                    existing: true,
                    kind: Kind::Workflow,
                });
            }
            // A purged workflow's key keeps naming it: nothing runs again.
            if let Some(seq) = found.map(|s| s as u64).filter(|s| self.purged.contains(s)) {
                return Ok(Submitted {
                    job_id: seq,
                    tasks: rt.parsed.workflow.tasks.iter().map(|t| t.instances()).sum(),
                    existing: true,
                    kind: Kind::Workflow,
                });
            }
        }
        hetsched_core::input::limits::check_workflow(&rt.parsed)?;
        // An instance past its owner's cap on its own would wait forever: refused, as a batch
        // task's is.
        for (t, task) in rt.parsed.workflow.tasks.iter().enumerate() {
            let need = rt.tasks[t].request();
            if let Some(why) = super::beyond_cap(sub.cap, &[("", need)], &sub.owner) {
                return Err(StateError::Invalid(format!(
                    "{}: task `{}`: {why}: its instances would never start; ask for less, or \
                     ask the admin to raise the cap",
                    sub.origin, task.name
                )));
            }
        }
        if let Some(room) = &sub.task_room {
            let instances: u64 = rt.parsed.workflow.tasks.iter().map(|t| t.instances()).sum();
            room.check(&sub.origin, instances)
                .map_err(StateError::Invalid)?;
        }
        // What the live nodes offer: every `requires` must be offered by one of them, and one
        // instance of every task must fit on one of them (with no live node yet, the workflow
        // waits for nodes; placement matches requirements and sizes either way).
        let live: Vec<u32> = (0..cx.nodes.len() as u32)
            .filter(|&n| Self::alive(cx, n))
            .collect();
        if !live.is_empty() {
            let mut offered: BTreeMap<String, usize> = BTreeMap::new();
            for &n in &live {
                for a in self.attributes_of(cx, n) {
                    *offered.entry(a).or_default() += 1;
                }
            }
            rt.parsed.check_requirements(&offered)?;
            let capacities: Vec<Resources> = live
                .iter()
                .filter_map(|&n| Self::seen(cx, n).map(|s| s.capacity()))
                .collect();
            rt.check_fits(&capacities)?;
        }
        let balancer = rt.balancer.unwrap_or(self.default_balancer);
        let seq = id;
        // `--name`, else the file's `name =`, else the file's own name.
        let name = if !sub.name.is_empty() {
            sub.name.clone()
        } else if let Some(n) = &rt.parsed.name {
            n.clone()
        } else {
            sub.origin.clone()
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
        )?;
        let n = job.insts.len();
        // The state checked the jobs it runs after (it knows every kind's) and the begin time.
        job.gate = Gate::of(&sub);
        let g = &job.gate;
        cx.store.transaction(|tx| {
            tx.execute(
                "INSERT INTO wf_jobs(id,name,origin,text,workdir,balancer,submitted_ns,finished_ns,key,after,after_any,after_notok,held,begin_ms,started,owner) VALUES(?1,?2,?3,?4,?5,?6,?7,0,?8,?9,?10,?11,?12,?13,?14,?15)",
                params![seq as i64, job.name, job.origin, job.text, job.workdir, balancer.as_str(), job.submitted_ns as i64, sub.key,
                    crate::store::list_text(&g.after), crate::store::list_text(&g.after_any), crate::store::list_text(&g.after_notok),
                    i64::from(g.held), g.begin_ms.unwrap_or(0) as i64, i64::from(g.started), sub.owner],
            )?;
            // No instance rows: an instance without one is waiting (a restart replays the
            // graph to find the ready ones), so a row is written when an instance first runs.
            Ok(())
        })?;
        if !job.gate.started {
            // It waits ([`waiting`]): the state starts it once what it waits for allows.
            info!(
                job = job.id(),
                instances = n,
                "workflow submitted, waiting to start"
            );
            let id = job.id();
            self.maybe_unstarted.insert(seq);
            self.jobs.insert(seq, Box::new(job));
            return Ok(Submitted {
                job_id: id,
                tasks: n as u64,
                existing: false,
                kind: Kind::Workflow,
            });
        }
        let out = job.machine.handle(LaunchEvent::Start, cx.now);
        self.apply(&mut job, out);
        if balancer == BalancerKind::Pcddb {
            // Every agent learns of a pcddb job from a heartbeat reply (its thresholds, peers
            // and clusters) and only then checks itself against it: let them beat now.
            self.woken.extend(live.iter().copied());
        }
        info!(job = job.id(), instances = n, balancer = %balancer, "workflow submitted");
        let id = job.id();
        self.maybe_running.insert(seq);
        self.jobs.insert(seq, Box::new(job));
        Ok(Submitted {
            job_id: id,
            tasks: n as u64,
            existing: false,
            kind: Kind::Workflow,
        })
    }

    /// Requests waiting for a node that died return to the launch node without it (event e),
    /// so the launch node drops it from its table.
    fn return_dead_requests(&mut self, cx: &Ctx, job: &mut WfJob) {
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
                    self.apply(job, o);
                }
            }
        }
    }

    /// Node `n` is no longer alive (declared dead, or its agent left), its running instances
    /// already lost ([`JobKind::on_lost`]). What the workflows placed there goes back to their
    /// machines, and the outputs it held that consumers placed on live nodes (or waiting for a
    /// lost input) need are produced again — now, not at the next heartbeat of another node of
    /// the workflow: those may be idle agents that beat once a minute
    /// (`--idle-heartbeat-interval`), and a consumer waited that long for nothing (batch tasks
    /// lost with a node were placed again at once). The nodes given work are woken
    /// ([`JobKind::take_wakes`], sent when the event ends).
    pub fn node_gone(&mut self, cx: &mut Ctx, n: u32) {
        // What was stopped there will never be said to have ended: nothing waits for it.
        for job in self.stopping.node_gone(n) {
            self.stopped(job);
        }
        let seqs: Vec<u64> = self.maybe_running.iter().copied().collect();
        for seq in seqs {
            let Some(mut job) = self.jobs.remove(&seq) else {
                continue;
            };
            if job.finished_ns == 0 {
                if let Some(q) = job.assigned.remove(&n) {
                    Self::hand_back(&mut job, n, q);
                }
                // Centralised: the dispatcher places nothing more there.
                self.refresh_members(cx, &mut job);
                self.return_dead_requests(cx, &mut job);
                self.flush(cx, &mut job);
                // Consumers placed on live nodes (those just handed back included) or blocked,
                // with an input on `n`: its producer runs again now ([`Self::inputs_ready`]).
                let lost: Vec<u32> = (0..job.insts.len() as u32)
                    .filter(|&p| {
                        let x = &job.insts[p as usize];
                        x.st == St::Done && x.node == Some(n)
                    })
                    .collect();
                if !lost.is_empty() {
                    let placed: HashSet<u32> = job
                        .assigned
                        .values()
                        .flatten()
                        .chain(&job.blocked)
                        .copied()
                        .collect();
                    let mut waiting: Vec<u32> = lost
                        .iter()
                        .flat_map(|&p| job.consumers(p))
                        .filter(|c| placed.contains(c))
                        .collect();
                    waiting.sort_unstable();
                    waiting.dedup();
                    for c in waiting {
                        self.inputs_ready(cx, &mut job, c);
                    }
                    self.flush(cx, &mut job);
                }
            }
            self.jobs.insert(seq, job);
        }
    }

    /// Succeeded instance `p`'s output is lost: it is ready to be produced again, and its
    /// success no longer counts in its task's mean run time, as after a restart (which counts
    /// the succeeded rows only). Before, the mean counted the lost success and the one that
    /// replaced it, and read otherwise once the server restarted.
    fn unsucceed(job: &mut WfJob, p: u32) {
        let t = job.task_of(p).0;
        let Some(x) = job.insts.get_mut(p as usize) else {
            return;
        };
        if let Some(took) = x.success_ns()
            && let Some(o) = job.observed.get_mut(t)
        {
            o.forget(took);
        }
        x.st = St::Ready;
    }

    /// Carries out what a machine returned.
    fn apply(&mut self, job: &mut WfJob, out: Vec<Outgoing>) {
        for o in out {
            match o {
                Outgoing::Ready(id) => {
                    // Not stored: a restart finds the ready instances by replaying the graph
                    // (a wide workflow readies a million at its start).
                    if let Some(x) = job.insts.get_mut(id.0 as usize)
                        && x.st == St::Waiting
                    {
                        x.st = St::Ready;
                    }
                }
                Outgoing::Send(m) => {
                    job.sent += 1;
                    self.woken.insert(m.to.0);
                    match m.body {
                        Body::Dispatch { instance } => {
                            // Taken there again: its machine counts it again, so it is not
                            // to forget it (it was to, had the node been declared dead with it).
                            if let Some(d) = job.dropped.get_mut(&m.to.0) {
                                d.remove(&instance.0);
                            }
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

    /// Marks instance `i` failed for good, for `why` and with `end` as its reason and signal,
    /// and every instance depending on it.
    fn fail(
        &mut self,
        job: &mut WfJob,
        i: u32,
        why: &str,
        end: (Option<EndReason>, Option<Box<str>>),
        now: u64,
    ) {
        let _ = self.end_for_good(job, i, why, false, end, now);
    }

    /// Marks instance `i` failed for good — `cancelled` by a user, or failed for `why` — and
    /// every instance depending on it, each with a message naming its producer. `i`'s reason
    /// and signal are `end`'s; its dependants' [`EndReason::DependencyFailed`]. Returns the
    /// instances it ended.
    fn end_for_good(
        &mut self,
        job: &mut WfJob,
        i: u32,
        why: &str,
        cancelled: bool,
        end: (Option<EndReason>, Option<Box<str>>),
        now: u64,
    ) -> Vec<u32> {
        let mut ended = Vec::new();
        let mut stack = vec![(i, why.to_string())];
        let root = if cancelled {
            format!("{} was cancelled", job.label(i))
        } else {
            format!("{} failed: {why}", job.label(i))
        };
        while let Some((k, msg)) = stack.pop() {
            let x = &mut job.insts[k as usize];
            if x.st.ended() && k != i {
                continue;
            }
            x.st = if cancelled { St::Cancelled } else { St::Failed };
            ended.push(k);
            x.message = msg;
            (x.reason, x.signal) = if k == i {
                end.clone()
            } else {
                (Some(EndReason::DependencyFailed), None)
            };
            x.finished_ns = now;
            self.dirty.insert((job.seq, k));
            let upstream = (k != i).then_some(root.as_str());
            let cause = Self::not_run_because(job, k, cancelled, upstream, why);
            for c in job.consumers(k) {
                if !job.insts[c as usize].st.ended() {
                    stack.push((c, cause.clone()));
                }
            }
        }
        job.rerun.retain(|&f| !job.insts[f as usize].st.not_run());
        job.blocked.retain(|&f| !job.insts[f as usize].st.not_run());
        ended
    }

    /// `hetsched resubmit JOB --failed` (`ended` = failed) or `--cancelled` on workflow `job`
    /// ([`Workflows::requeue_ended`]): returns how many instances were queued again.
    fn resubmit_ended(&mut self, cx: &mut Ctx, job: u64, ended: St) -> Result<u64, StateError> {
        let seq = job & ((1 << super::KIND_SHIFT) - 1);
        let Some(mut j) = self.jobs.remove(&seq) else {
            return Err(StateError::NoJob(job));
        };
        let n = self.requeue_ended(cx, &mut j, ended);
        self.jobs.insert(seq, j);
        let n = n?;
        if n > 0 {
            info!(
                job,
                instances = n,
                ended = ended.as_str(),
                "workflow instances resubmitted"
            );
        }
        Ok(n)
    }

    /// [`JobKind::resubmit_failed`] (`ended` = failed) or [`JobKind::resubmit_cancelled`]
    /// (`ended` = cancelled) on one workflow: every instance that ended so — for good, or not
    /// run because of a producer that did — comes back. An instance that also depends on one
    /// that ended the other way still cannot run: it stays ended, now as that one did, naming it.
    fn requeue_ended(&mut self, cx: &mut Ctx, j: &mut WfJob, ended: St) -> Result<u64, StateError> {
        if j.cancelled {
            return Err(StateError::Invalid(format!(
                "job {} was cancelled: submit it again instead",
                j.id()
            )));
        }
        let chosen: Vec<u32> = (0..j.insts.len() as u32)
            .filter(|&i| j.insts[i as usize].st == ended)
            .collect();
        if chosen.is_empty() {
            return Ok(0);
        }
        let mut again: HashSet<u32> = chosen.iter().copied().collect();
        // Downstream of an instance that ended the other way nothing can run: those stay ended,
        // as it did (they read as they do because another producer of theirs ended first).
        let other = if ended == St::Failed {
            St::Cancelled
        } else {
            St::Failed
        };
        let mut stack: Vec<u32> = (0..j.insts.len() as u32)
            .filter(|&i| j.insts[i as usize].st == other)
            .collect();
        while let Some(k) = stack.pop() {
            // A failure's own message is its cause (`exit code 1`); a cancel's is `cancelled`.
            let why = j.insts[k as usize].message.clone();
            let upstream = why
                .starts_with("not run: ")
                .then(|| Self::upstream_of(&why).unwrap_or_else(|| "upstream".into()));
            for c in j.consumers(k) {
                if again.remove(&c) {
                    let because = Self::not_run_because(
                        j,
                        k,
                        other == St::Cancelled,
                        upstream.as_deref(),
                        &why,
                    );
                    let x = &mut j.insts[c as usize];
                    x.st = other;
                    x.message = because;
                    x.reason = Some(EndReason::DependencyFailed);
                    x.signal = None;
                    x.finished_ns = cx.now;
                    self.dirty.insert((j.seq, c));
                    stack.push(c);
                }
            }
        }
        let mut graph_side = Vec::new();
        for &i in chosen.iter().filter(|i| again.contains(i)) {
            let x = &mut j.insts[i as usize];
            // Cancelled by a user (not as a dependant): started (an attempt) or not.
            let cancelled_itself = ended == St::Cancelled && x.message == CANCELLED;
            // It failed itself (not as a dependant) when it ran and its message does not name a
            // producer: with `retries = 0` its `failures` is 0 (the last failure is not
            // counted), so that count cannot tell.
            let failed_itself = x.attempt > 0 && !x.message.starts_with("not run: ");
            x.message = if ended == St::Failed && failed_itself {
                format!("resubmitted after attempt {} failed", x.attempt)
            } else if cancelled_itself && x.attempt > 0 {
                format!("resubmitted after attempt {} was cancelled", x.attempt)
            } else if cancelled_itself {
                "resubmitted after it was cancelled".into()
            } else {
                "resubmitted: waits for its producers again".into()
            };
            x.failures = 0;
            x.disk_losses = 0;
            x.finished_ns = 0;
            self.dirty.insert((j.seq, i));
            if x.produced {
                // Its output was lost and producing it again failed: the graph counts it
                // finished, so it runs again as a re-production.
                x.st = St::Ready;
                x.reproducing = true;
                j.rerun.push(i);
            } else {
                x.st = St::Waiting;
                graph_side.push(InstanceId(i));
            }
        }
        for id in j.machine.reinstate(&graph_side) {
            let i = id.0;
            j.insts[i as usize].st = St::Ready;
            if self.inputs_ready(cx, j, i) {
                j.rerun.push(i);
            } else {
                j.blocked.push(i);
            }
        }
        if !again.is_empty() {
            if j.finished_ns != 0 && j.balancer == BalancerKind::Pcddb {
                // The agents forgot the finished workflow's machines: as at its submission,
                // they learn of it again from a heartbeat reply, and only then check
                // themselves against it.
                self.woken
                    .extend((0..cx.nodes.len() as u32).filter(|&n| Self::alive(cx, n)));
            }
            j.finished_ns = 0;
            self.maybe_running.insert(j.seq);
            self.dirty_jobs.insert(j.seq);
        }
        self.flush(cx, j);
        self.check_finished(j, cx.now);
        Ok(again.len() as u64)
    }

    /// Why a consumer of `k` is not run: `k` was cancelled, or failed for `why` (`upstream`:
    /// `None`), or was not run itself because of an instance further up, which `upstream`
    /// describes (`p[2] failed: exited with exit status: 3`) — named at every depth, so that the
    /// last consumer still says which instance to look at.
    fn not_run_because(
        job: &WfJob,
        k: u32,
        cancelled: bool,
        upstream: Option<&str>,
        why: &str,
    ) -> String {
        let producer = job.label(k);
        match (cancelled, upstream) {
            (true, None) => format!("not run: its producer {producer} was cancelled"),
            (false, None) => format!("not run: its producer {producer} failed ({why})"),
            (_, Some(root)) => format!("not run: its producer {producer} was not run ({root})"),
        }
    }

    /// What instance `k`, not run because of an instance further up (its `message`, as
    /// [`Workflows::not_run_because`] wrote it), says of that instance; `None` when the message
    /// is not one of those (an instance that ended of itself). Messages stored before the root
    /// was named say `upstream`.
    fn upstream_of(message: &str) -> Option<String> {
        let rest = message.strip_prefix("not run: its producer ")?;
        let (producer, what) = rest.split_once(' ')?;
        if let Some(root) = what
            .strip_prefix("was not run (")
            .and_then(|r| r.strip_suffix(')'))
        {
            return Some(root.to_string());
        }
        if what == "was cancelled" {
            return Some(format!("{producer} was cancelled"));
        }
        let why = what.strip_prefix("failed (")?.strip_suffix(')')?;
        Some(format!("{producer} failed: {why}"))
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

    /// The live nodes, by id.
    fn live(cx: &Ctx) -> Vec<u32> {
        Self::live_ids(cx).collect()
    }

    /// Whether the live nodes are not those the clusters were computed over (`clustered`).
    /// Compared only when the registry's liveness generation moved since they were last found
    /// the same: the pass over every node at every beat was a third of an idle beat on 1,000
    /// nodes (and a list of the live nodes built at every beat, before that, a sixth).
    fn clusters_lag(&mut self, cx: &Ctx) -> bool {
        let generation = cx.nodes.liveness_generation();
        if self.clustered_live_at == Some(generation) {
            // Every test run in a debug build checks that an unmoved generation means the same
            // live nodes.
            debug_assert!(
                Self::live_ids(cx).eq(self.clustered.iter().copied()),
                "the live nodes changed without the registry's liveness generation"
            );
            return false;
        }
        let lag = !Self::live_ids(cx).eq(self.clustered.iter().copied());
        if !lag {
            self.clustered_live_at = Some(generation);
        }
        lag
    }

    /// The live nodes' ids, in order.
    fn live_ids<'a>(cx: &'a Ctx) -> impl Iterator<Item = u32> + 'a {
        (0..cx.nodes.len() as u32).filter(|&n| Self::alive(cx, n))
    }

    /// Whether every input of `i` is on a live node heard since the server started; if not, its
    /// lost producers are produced again (those on a live node not heard yet are waited for).
    /// An output on a node a consumer could not reach since its last heartbeat counts as lost
    /// ([`Workflows::unreachable`]).
    fn inputs_ready(&mut self, cx: &Ctx, job: &mut WfJob, i: u32) -> bool {
        let mut ok = true;
        for (p, _) in job.producers(i) {
            let x = &job.insts[p as usize];
            if x.st == St::Done
                && x.node
                    .is_some_and(|n| Self::alive(cx, n) && !self.unreachable.contains(&n))
            {
                if x.node.is_some_and(|n| !self.heard.contains(&n)) {
                    ok = false;
                }
                continue;
            }
            ok = false;
            if x.st == St::Done {
                warn!(
                    job = job.id(),
                    instance = p,
                    "an output was lost with its node: producing it again"
                );
                Self::unsucceed(job, p);
                let x = &mut job.insts[p as usize];
                x.reproducing = true;
                self.dirty.insert((job.seq, p));
                job.rerun.push(p);
            }
        }
        ok
    }

    fn dispatch(&self, job: &WfJob, i: u32, node: u32, devices: Vec<u32>) -> (Dispatch, u64) {
        let (t, _) = job.task_of(i);
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
                    // Signed by the state, which holds the keys, before the reply goes out.
                    ticket: Vec::new(),
                });
            }
        }
        let key = Kind::Workflow.id((job.seq << 32) | t as u64);
        (
            Dispatch {
                task_id: job.task_id(i),
                attempt: job.insts[i as usize].next_attempt(node),
                // `{index}` is the instance's argument value.
                index: job.listed_index(i),
                devices,
                spec: key,
                // What it takes: the agent starts it when these cores are free (a prefetched
                // instance waits in its queue), and counts them while it runs.
                cores: job.rt.tasks[t].request().cores,
                workflow: Some(InstanceData {
                    dir: job.dir(i),
                    inputs,
                    outputs: task.outputs.clone(),
                    process: job.process_of(i),
                }),
                job_id: job.id(),
                ..Default::default()
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
            // Enforced by the agent as a batch task's declared memory is: the instance books
            // this much in the view, so one that held more would crowd what others booked.
            memory_limit_bytes: rt.memory_bytes,
            ..Default::default()
        }
    }

    /// Proximity clusters (spec 05 §2, the core's [`proximity_clusters`]) of the live nodes from
    /// the round trips their agents measured (at [`RTT_RESOLUTION`]); a pair not measured counts
    /// as [`UNMEASURED`] one way. The minimum size is `[workflow] cluster_size`, else the spec's
    /// ⌊0.3·N⌋. Every PCDDB launch node follows the new clusters.
    fn recluster(&mut self, cx: &Ctx) {
        let live = Self::live(cx);
        self.clustered = live.clone();
        self.clustered_live_at = Some(cx.nodes.liveness_generation());
        self.reclustered_ns = Some(cx.now);
        let names: Vec<String> = live.iter().map(|&n| cx.nodes.name(n).to_string()).collect();
        let n = live.len();
        let mut lat = LatencyMatrix::uniform(n, UNMEASURED);
        // The measured pairs only, not every pair of live nodes: N² lookups took a 1,000-node
        // recluster (and every beat that ran one) a tenth of a second.
        let mut at = vec![None; cx.nodes.len()];
        for (k, &node) in live.iter().enumerate() {
            at[node as usize] = Some(k);
        }
        for (&(from, to), &there) in &self.rtt {
            let (Some(Some(a)), Some(Some(b))) = (at.get(from as usize), at.get(to as usize))
            else {
                continue;
            };
            let back = self.rtt.get(&(to, from));
            // Each pair once: from its smaller id's side, or from the only side measured.
            if from > to && back.is_some() {
                continue;
            }
            let rtt = back.map_or(there, |&y| (there + y) / 2);
            lat.set((*a).min(*b), (*a).max(*b), rtt / 2);
        }
        let m = self
            .cluster_size
            .map_or(min_cluster_size(n), |m| (m as usize).clamp(1, n.max(1)));
        let clusters: Vec<Vec<u32>> = proximity_clusters(&lat, &names, m)
            .into_iter()
            .map(|c| c.members.iter().map(|m| live[m.index()]).collect())
            .collect();
        // Agents holding these clusters need not be sent them again.
        if clusters != self.clusters {
            self.clusters = clusters;
            self.clusters_version = next_version(self.clusters_version);
        }
        let table = self.cluster_table();
        for job in self.jobs.values_mut() {
            if let Machine::Pcddb(l) = &mut job.machine {
                l.set_clusters(&table);
            }
        }
    }

    /// How many measured round trips are kept ([`crate::state::State::workflow_round_trips`]).
    pub fn round_trips(&self) -> usize {
        self.rtt.len()
    }

    /// The clusters node `n` is in (ids of the launch node's tables).
    fn clusters_of(&self, n: u32) -> Vec<u32> {
        self.clusters
            .iter()
            .enumerate()
            .filter(|(_, c)| c.contains(&n))
            .map(|(k, _)| k as u32)
            .collect()
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
                St::Running => {
                    c.running += 1;
                    if x.fetching {
                        c.fetching += 1;
                    }
                }
                St::Done => c.succeeded += 1,
                St::Failed => c.failed += 1,
                St::Cancelled => c.cancelled += 1,
            }
        }
        (c, ready)
    }

    /// Why a workflow's ready instances wait, and whether for an operator (no node can run
    /// them now): for the first task with a ready instance that no live node could hold (its
    /// `requires`, cores, memory and GPUs, free or not), or only drained ones could; or, when
    /// some node could, that its owner is at its cap (not blocked: running work ends). Empty
    /// otherwise: ready instances then go out as the balancer places them.
    fn pending_reason(rd: &Read, j: &WfJob) -> (String, bool) {
        for (t, task) in j.rt.parsed.workflow.tasks.iter().enumerate() {
            let (from, to) = (j.offset[t] as usize, j.offset[t + 1] as usize);
            let insts = j.insts.get(from..to).unwrap_or_default();
            if !insts.iter().any(|x| matches!(x.st, St::Ready)) {
                continue;
            }
            let need = j.rt.tasks[t].request();
            let limit = std::time::Duration::from_nanos(j.rt.tasks[t].time_limit_ns);
            let now = std::time::Instant::now();
            let mut drained = Vec::new();
            // The most time left among the open nodes too short for the task's time limit.
            let mut short: Option<std::time::Duration> = None;
            // The open nodes whose disk is below their agent's floor (a task with inputs).
            let mut full = Vec::new();
            let mut open = false;
            for n in rd.nodes.iter() {
                let able = n.alive
                    && !n.removed
                    && n.spec.has_attributes(&task.requires)
                    && n.spec.capacity().fits(&need);
                if !able {
                    continue;
                }
                let left = n.ends_at.map(|e| e.saturating_duration_since(now));
                if n.drained || n.draining {
                    drained.push(n.spec.name.as_str());
                } else if let Some(l) = left.filter(|l| !limit.is_zero() && *l < limit) {
                    short = Some(short.map_or(l, |s| s.max(l)));
                } else if !task.inputs.is_empty() && !has_room(n) {
                    full.push(n.spec.name.as_str());
                } else {
                    open = true;
                    break;
                }
            }
            if open {
                // A node can run it: unless its owner is at its cap, it goes out as the
                // balancer places it.
                if let Some(g) = j.group {
                    let group = rd.view.group(g);
                    // A cap lowered since it was accepted holds back even one instance alone:
                    // no instance ending gives it room, only the admin can.
                    if let Some(why) =
                        super::beyond_cap(group.cap, &[("", need)], rd.users.owner(j.id()))
                    {
                        return (
                            format!(
                                "task `{}`: {why}: it waits until the admin raises the cap",
                                task.name
                            ),
                            true,
                        );
                    }
                    if let Some(by) = group.capped_by(&need) {
                        return (super::capped_words(&group, by, "work holds"), false);
                    }
                }
                continue;
            }
            let name = &task.name;
            if !full.is_empty() {
                full.sort_unstable();
                return (
                    format!(
                        "task `{name}` fetches inputs, and every open node that can run it has its \
                     work directory's disk below its agent's `min_free_disk`: {} (`hetsched \
                     nodes` shows their free space)",
                        full.join(", ")
                    ),
                    true,
                );
            }
            if let (Some(most), true) = (short, drained.is_empty()) {
                let words = |d: std::time::Duration| {
                    humantime::format_duration(std::time::Duration::from_secs(d.as_secs()))
                        .to_string()
                };
                return (
                    format!(
                        "task `{name}`'s time limit ({}) is longer than the time left on every node \
                     that can run it (at most {}: their agents' `time_limit`)",
                        words(limit),
                        words(most)
                    ),
                    true,
                );
            }
            if drained.is_empty() {
                let requires = if task.requires.is_empty() {
                    String::new()
                } else {
                    format!("; requires {}", task.requires.join(" + "))
                };
                return (
                    format!(
                        "no live node can run task `{name}` ({}{requires})",
                        super::request_in_words(&need, None)
                    ),
                    true,
                );
            }
            drained.sort_unstable();
            return (
                format!(
                    "every node that can run task `{name}` is drained: {} (`hetsched node resume NAME`)",
                    drained.join(", ")
                ),
                true,
            );
        }
        // Consumers that could not fetch an input, waiting for its producer to run again
        // (`blocked`): said, naming what is produced again. Before, they waited with no reason.
        let blocked = j
            .blocked
            .iter()
            .filter(|&&i| j.insts.get(i as usize).is_some_and(|x| x.st == St::Ready))
            .count() as u64;
        if blocked > 0 {
            let again: Vec<String> = (0..j.insts.len() as u32)
                .filter(|&p| j.insts[p as usize].reproducing && !j.insts[p as usize].st.ended())
                .map(|p| j.label(p))
                .collect();
            return (
                format!(
                    "inputs: {} {} for inputs lost with their nodes{}",
                    hetsched_core::text::count(blocked, "ready instance"),
                    hetsched_core::text::agree(blocked, "waits", "wait"),
                    if again.is_empty() {
                        String::new()
                    } else {
                        format!(" (produced again: {})", again.join(", "))
                    }
                ),
                false,
            );
        }
        // Ready instances the balancer placed on nodes that cannot start them yet (their cores,
        // memory or devices held, by this workflow or other work): said as a batch job's
        // `resources`, naming the nodes. Without it a workflow whose instances waited behind a
        // long batch task listed `pending` with no reason.
        let mut waiting: Vec<(&str, u64)> = j
            .assigned
            .iter()
            .map(|(&n, q)| {
                let ready = q
                    .iter()
                    .filter(|&&i| j.insts.get(i as usize).is_some_and(|x| x.st == St::Ready))
                    .count();
                (rd.nodes.name(n), ready as u64)
            })
            .filter(|&(_, k)| k > 0)
            .collect();
        if !waiting.is_empty() {
            waiting.sort_unstable();
            let total: u64 = waiting.iter().map(|&(_, k)| k).sum();
            let named: Vec<String> = waiting.iter().map(|(n, k)| format!("{n} ({k})")).collect();
            return (
                format!(
                    "resources: {} {} for the busy nodes they were placed on: {}",
                    hetsched_core::text::count(total, "ready instance"),
                    hetsched_core::text::agree(total, "waits", "wait"),
                    named.join(", ")
                ),
                false,
            );
        }
        // Ready instances still here, placed on no node, while every open node that can run
        // them has no free cores for one (other work holds them: the balancer counts that load,
        // so it places nothing there until some ends). Said as a batch job's `resources`;
        // before, such a workflow listed `pending` with no reason.
        let placed: HashSet<u32> = j.assigned.values().flatten().copied().collect();
        for (t, task) in j.rt.parsed.workflow.tasks.iter().enumerate() {
            let (from, to) = (j.offset[t], j.offset[t + 1]);
            let here = (from..to)
                .filter(|&i| {
                    j.insts.get(i as usize).is_some_and(|x| x.st == St::Ready)
                        && !placed.contains(&i)
                })
                .count() as u64;
            if here == 0 {
                continue;
            }
            let need = j.rt.tasks[t].request();
            let mut able = rd
                .nodes
                .iter()
                .enumerate()
                .filter(|(_, n)| {
                    n.alive
                        && !n.removed
                        && !n.drained
                        && !n.draining
                        && n.spec.has_attributes(&task.requires)
                        && n.spec.capacity().fits(&need)
                })
                .peekable();
            if able.peek().is_none() {
                continue;
            }
            let busy = able.all(|(i, _)| {
                rd.view
                    .nodes()
                    .get(i)
                    .is_some_and(|v| v.free.cores < need.cores.max(1))
            });
            if busy {
                return (
                    format!(
                        "resources: {} of task `{}` {} for a node with a free core: the nodes that \
                         can run it are busy",
                        hetsched_core::text::count(here, "ready instance"),
                        task.name,
                        hetsched_core::text::agree(here, "waits", "wait"),
                    ),
                    false,
                );
            }
        }
        (String::new(), false)
    }

    /// [`Workflows::job_info`] with how many of its instances stop.
    fn info(&self, rd: &Read, j: &WfJob, apps: bool) -> JobInfo {
        JobInfo {
            stopping: self.stopping.of_job(j.id()),
            ..Self::job_info(rd, j, apps)
        }
    }

    fn job_info(rd: &Read, j: &WfJob, apps: bool) -> JobInfo {
        // Instances' task ids are a range per job and per task ([`WfJob::task_id`]).
        let queued = |r: std::ops::Range<usize>| {
            rd.nodes
                .prefetch
                .queued
                .count_within(j.task_id(r.start as u32)..j.task_id(r.end as u32))
        };
        let (mut counts, _) = Self::counts_of(&j.insts);
        counts.queued = queued(0..j.insts.len());
        // One that has not started waits for what it names (not for an operator); one that
        // runs may find no node for a ready instance.
        let unstarted = !j.gate.started && !j.cancelled;
        let (pending_reason, blocked) = if unstarted {
            (j.gate.reason(j.id()), false)
        } else {
            Self::pending_reason(rd, j)
        };
        let used = j.insts.iter().filter_map(|x| x.usage);
        let mut info = JobInfo {
            kind: super::Kind::Workflow,
            cpu_ms: used
                .clone()
                .fold(0, |sum, u| sum.saturating_add(u.cpu_ms())),
            max_rss_bytes: used.clone().map(|u| u.max_rss_bytes).max().unwrap_or(0),
            max_gpu_memory_bytes: used.map(|u| u.max_gpu_memory_bytes).max().unwrap_or(0),
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
            // Each reason a running one gives is that no node can run a ready instance now
            // (instances waiting for their producers show per task in `job N`).
            blocked,
            pending_reason,
            apps: if apps {
                j.rt.parsed
                    .workflow
                    .tasks
                    .iter()
                    .enumerate()
                    .map(|(t, task)| {
                        let r = j.offset[t] as usize..j.offset[t + 1] as usize;
                        let insts = &j.insts[r.clone()];
                        let (mut counts, ready) = Self::counts_of(insts);
                        counts.queued = queued(r);
                        let used = insts.iter().filter_map(|x| x.usage);
                        // What one instance holds: a GPU request when it asks for devices.
                        let request = j.rt.tasks.get(t).map(|x| x.request());
                        let gpu = request.is_some_and(|r| r.gpus > 0);
                        // The mean run time of its instances that succeeded (as a batch
                        // application's: the figure `prefetch = "auto"` judges by), ms.
                        let mean = j
                            .observed
                            .get(t)
                            .and_then(Observed::mean_ns)
                            .map_or(0.0, |n| n as f64 / 1e6);
                        AppInfo {
                            id: t as u32,
                            mean_cpu_ms: if gpu { 0.0 } else { mean },
                            mean_gpu_ms: if gpu { mean } else { 0.0 },
                            name: task.name.clone(),
                            tasks: task.instances(),
                            counts,
                            has_cpu: !gpu,
                            has_gpu: gpu,
                            requests: if gpu {
                                [None, request]
                            } else {
                                [request, None]
                            },
                            ready,
                            cpu_ms: used
                                .clone()
                                .fold(0, |sum, u| sum.saturating_add(u.cpu_ms())),
                            max_rss_bytes: used.clone().map(|u| u.max_rss_bytes).max().unwrap_or(0),
                            max_gpu_memory_bytes: used
                                .map(|u| u.max_gpu_memory_bytes)
                                .max()
                                .unwrap_or(0),
                            requires: task.requires.clone(),
                            // One node each; its limit on the variant it runs as.
                            nodes: 1,
                            time_limit_ms: {
                                let ms =
                                    j.rt.tasks.get(t).map_or(0, |x| x.time_limit_ns / 1_000_000);
                                if gpu { [0, ms] } else { [ms, 0] }
                            },
                            ..Default::default()
                        }
                    })
                    .collect()
            } else {
                Vec::new()
            },
            ..Default::default()
        };
        j.gate.fill(&mut info, j.cancelled || j.finished());
        info
    }

    /// Of the workflow jobs `held` (those an agent holds outputs of), the ones that have not
    /// ended: an instance still to run may fetch those outputs (a consumer, or one run again
    /// whose input was lost), so the agent counts them as work for its idle timeout. Per job,
    /// not per output: which outputs each remaining instance reads would cost a walk of the
    /// graph at every beat, and a job ends once nothing of it runs or waits.
    pub fn unfinished(&self, held: &[u64]) -> Vec<u64> {
        held.iter()
            .copied()
            .filter(|seq| self.jobs.get(seq).is_some_and(|j| j.finished_ns == 0))
            .collect()
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
                // How each consumer instance reads the producer's: every instance, its own
                // process's (the same range and processes), every process of its argument value
                // (the same range, other processes), or the one of its value (unlabelled).
                let map = match d.kind {
                    DependencyKind::All => " (all)",
                    DependencyKind::OneToOne => " (per process)",
                    DependencyKind::InstanceWise if p.processes > 1 => " (every process)",
                    DependencyKind::InstanceWise => "",
                };
                s.push_str(&format!(
                    "  \"{}\" -> \"{}\" [label=\"{}{map}\"];\n",
                    p.name,
                    t.name,
                    d.data.join(","),
                ));
            }
        }
        s.push_str("}\n");
        Some(s)
    }
}

/// Cores that workflow `job`'s running instances of tasks measured short hold on `node`
/// (instances queued there included): the cores a queue there drains through.
fn short_cores_on(job: &WfJob, nodes: &crate::state::nodes::Nodes, node: NodeId) -> u32 {
    nodes.get(node.0).map_or(0, |rec| {
        rec.running
            .iter()
            .filter(|&&id| Kind::of(id) == Some(Kind::Workflow))
            .map(|&id| job_of(id))
            .filter(|&(seq, _)| seq == job.seq)
            .filter_map(|(_, i)| {
                let (t, _) = job.task_of(i);
                let short = job.observed.get(t)?.run_times().short();
                let (_, request, _) = job.booked.get(&i)?;
                short.then_some(request.cores)
            })
            .sum()
    })
}

/// The instances of `job` among `tasks` (task ids of every kind).
fn instances_of(job: &WfJob, tasks: impl IntoIterator<Item = u64>) -> impl Iterator<Item = u32> {
    tasks
        .into_iter()
        .filter(|&id| Kind::of(id) == Some(Kind::Workflow))
        .map(job_of)
        .filter(move |&(seq, _)| seq == job.seq)
        .map(|(_, i)| i)
}

/// The load other work puts on `node` in the server's view, in cores: batch tasks, stream
/// workers, other workflows — the node's cores less its free cores, less the cores `own`, the
/// instances of `job` its balancer counts as its own load there, booked on it. Both balancers
/// count it as the node's load beside their own instances (seed 004's instance table counts
/// every program's instances on the node): `centralised` in the node's report to its
/// dispatcher, `pcddb` in the node's machine (`PcddbJob.foreign_cores`). Counting their own
/// instances only made a node full of other work read idle: instances were pushed to it and
/// waited for its cores while other nodes idled.
fn foreign_cores(
    view: &hetsched_core::SchedulerView,
    job: &WfJob,
    node: NodeId,
    own: impl IntoIterator<Item = u32>,
) -> u32 {
    let own_cores = own
        .into_iter()
        .filter_map(|i| match job.booked.get(&i) {
            Some((at, request, _)) if *at == node.0 => Some(request.cores),
            _ => None,
        })
        .fold(0u32, u32::saturating_add);
    view.nodes()
        .get(node.index())
        .map_or(0, |n| n.node.cores.saturating_sub(n.free.cores))
        .saturating_sub(own_cores)
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
        // A stopped attempt's process ended, whatever became of its instance since.
        if !self.stopping.is_empty()
            && let Some(job) = self.stopping.ended(node.0, r.task_id, r.attempt)
        {
            self.stopped(job);
        }
        let (seq, i) = job_of(r.task_id);
        let Some(mut job) = self.jobs.remove(&seq) else {
            return Ok(());
        };
        'r: {
            let retries = job.rt.tasks.get(job.task_of(i).0).map_or(0, |t| t.retries);
            let Some(x) = job.insts.get_mut(i as usize) else {
                break 'r;
            };
            // Only the agent of the node the attempt runs on speaks for it: another node's
            // agent (confused, or forging) must not end it there, nor claim its output.
            if x.st != St::Running || x.attempt != r.attempt || x.node != Some(node.0) {
                break 'r;
            }
            cx.nodes.ended(node, r.task_id);
            Self::unbook(cx, &mut job, i);
            let x = &mut job.insts[i as usize];
            x.started_ns = r.started_ns;
            x.fetching = false;
            // Its program's start is the result's; the fetch before it, when the agent says
            // (else what its last heartbeat said stays).
            if r.fetch_ms > 0 {
                x.fetch_ms = r.fetch_ms;
            }
            // Offloaded: it ran on its ANode's devices from its start there, as a batch task
            // (the booking, released above, was the NNode's; what the result does not say, or
            // says wrong, stays the dispatch's). Stored with the row, so a restart lists them.
            if let Some(anode) = x.executed {
                let ran = super::offload_run(cx.nodes, anode, x.devices.len(), r);
                if let Some(started) = ran.started_ns {
                    x.started_ns = started;
                }
                if let Some(devices) = ran.devices {
                    x.devices = devices.to_vec();
                }
            }
            // Two clocks (the ANode's start, the NNode's end): a run never ends before it began.
            x.finished_ns = r.finished_ns.max(x.started_ns);
            x.exit_code = r.exit_code;
            x.usage = r.usage;
            cx.metrics.used(r.usage.as_ref());
            self.dirty.insert((seq, i));
            if r.success {
                cx.metrics.result(crate::metrics::Outcome::Succeeded);
                let t = job.task_of(i).0;
                let x = &mut job.insts[i as usize];
                x.st = St::Done;
                // The run time as listed and stored (from the start on the ANode when
                // offloaded), so a restart, which records it from the row, counts the same.
                // An earlier success of the instance was forgotten when its output was lost
                // ([`Workflows::unsucceed`]): each instance counts once, by its latest success.
                if let Some(took) = x.success_ns()
                    && let Some(o) = job.observed.get_mut(t)
                {
                    o.record(took);
                }
                let x = &mut job.insts[i as usize];
                x.node = Some(node.0);
                x.message.clear();
                (x.reason, x.signal) = (None, None);
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
                // Instances placed on other nodes that wait there for an input (one produced
                // again after a loss) may start now: those nodes beat to look. Without it an
                // idle node would look at its next idle beat, a minute away.
                self.woken.extend(
                    job.assigned
                        .iter()
                        .filter(|(n, q)| **n != node.0 && !q.is_empty())
                        .map(|(n, _)| *n),
                );
            } else if r.interrupted
                && let Some(cause) = r.message.strip_prefix(NO_ROOM)
            {
                // Its inputs found no room on this node's disk: it filled since the node's
                // last report. Neither the instance's failure (its `retries` are for that) nor a
                // lost output: it runs again, kept off this node until a later heartbeat says
                // it has room, and counts a lost attempt against `max_attempts`, so that a
                // cluster whose every disk is full ends the job rather than looping.
                x.disk_losses += 1;
                cx.metrics.lost(crate::metrics::Lost::Disk);
                let (attempt, losses) = (x.attempt, x.disk_losses);
                let lost = format!(
                    "attempt {attempt} lost: no room for inputs on node `{}`: {cause}",
                    cx.nodes.name(node.0)
                );
                if let Some(rec) = cx.nodes.get(node.0) {
                    self.no_room.insert(node.0, rec.last_seen);
                    self.node_masks.note(node.0);
                }
                // This heartbeat takes back what else waits for the node with inputs to fetch
                // ([`Self::take_back`]), even if the node was already short: an instance placed
                // there before (a PCDDB node's machine that took it on an older mask) would
                // find no room in its turn.
                self.short_of_room.remove(&node.0);
                warn!(
                    job = seq,
                    instance = i,
                    node = %cx.nodes.name(node.0),
                    "no room for a workflow instance's inputs on the node's disk: it runs again \
                     elsewhere"
                );
                if losses >= self.max_attempts {
                    cx.metrics.result(crate::metrics::Outcome::Failed);
                    let why = format!(
                        "{lost}; gave up after {} lost for want of disk room (the server's \
                         `max_attempts`)",
                        hetsched_core::text::count(losses, "attempt")
                    );
                    self.fail(&mut job, i, &why, (Some(EndReason::Lost), None), cx.now);
                    break 'r;
                }
                let x = &mut job.insts[i as usize];
                x.st = St::Ready;
                x.node = None;
                x.message = lost;
                (x.reason, x.signal) = (Some(EndReason::Lost), None);
                // The centralised dispatcher places it at once: it must see the node's mask
                // without room now, not at the next heartbeat (a PCDDB node's machine is told
                // its mask in this heartbeat's reply, before any request reaches it).
                self.refresh_members(cx, &mut job);
                job.rerun.push(i);
            } else if r.interrupted {
                // Not the instance's failure (an input lost, its agent shut down): lost, as
                // one whose node died.
                x.st = St::Ready;
                x.message = r.message.clone();
                (x.reason, x.signal) = (Some(EndReason::Lost), None);
                // An input could not be fetched (`input unavailable: node N PATH: …`, from the
                // agent): that output is lost; its producer runs again, and this instance waits.
                let lost = r
                    .message
                    .strip_prefix(INPUT_UNAVAILABLE)
                    .and_then(|rest| rest.split_once(' '))
                    .and_then(|(n, rest)| Some((n.parse::<u32>().ok()?, rest.split(':').next()?)));
                if let Some((n, _)) = lost {
                    x.inputs_lost += 1;
                    if r.message.contains(PRODUCER_UNREACHABLE) {
                        // The node's agent, not one file, is out of reach: its other outputs
                        // are produced again too, before this consumer is sent anywhere again
                        // ([`Self::inputs_ready`]).
                        self.unreachable.insert(n);
                    }
                }
                let p = lost.and_then(|(n, path)| {
                    job.producers(i).into_iter().map(|(p, _)| p).find(|&p| {
                        job.insts[p as usize].node == Some(n)
                            && path.starts_with(&format!("wf/{}/", job.dir(p)))
                    })
                });
                let reproduced = p.map_or(0, |p| job.insts[p as usize].reproduced);
                if job.insts[i as usize].inputs_lost >= MAX_INPUT_LOSSES
                    || reproduced >= MAX_INPUT_LOSSES
                {
                    let why = format!(
                        "an input could not be fetched again ({} of its producer, {} in a row \
                         here): {}",
                        hetsched_core::text::count(reproduced, "re-run"),
                        hetsched_core::text::count(
                            job.insts[i as usize].inputs_lost,
                            "fetch failure"
                        ),
                        r.message
                    );
                    cx.metrics.result(crate::metrics::Outcome::Failed);
                    self.fail(&mut job, i, &why, (Some(EndReason::Lost), None), cx.now);
                    break 'r;
                }
                match lost {
                    Some((n, _)) => {
                        if let Some(p) = p
                            && job.insts[p as usize].st == St::Done
                        {
                            warn!(
                                job = job.id(),
                                instance = p,
                                node = n,
                                "an output could not be fetched: producing it again"
                            );
                            Self::unsucceed(&mut job, p);
                            let px = &mut job.insts[p as usize];
                            px.reproducing = true;
                            px.reproduced += 1;
                            self.dirty.insert((seq, p));
                            job.rerun.push(p);
                        }
                        // Placed again once its inputs are where the server says they are
                        // (the producer may have moved meanwhile).
                        job.blocked.push(i);
                    }
                    None => job.rerun.push(i),
                }
            } else {
                x.message = r.message.clone();
                // A retry keeps it until its next dispatch.
                (x.reason, x.signal) = (r.reason, r.signal.clone());
                // `failures` counts the failed attempts that were retried, as a batch task's
                // `failed_attempts` (docs/json.md): the last failure is not counted. Before, it
                // counted every failure, so an instance listed one more than a batch task
                // with the same `retries` (`2 (2 failed)` for `2 (1 failed)`).
                if x.failures < retries {
                    x.failures += 1;
                    cx.metrics.result(crate::metrics::Outcome::Retried);
                    x.st = St::Ready;
                    job.rerun.push(i);
                } else {
                    cx.metrics.result(crate::metrics::Outcome::Failed);
                    // What ended it, as a batch task's message says: the agent's (which names
                    // the exit status), or the exit code where it said nothing. The attempt
                    // is the listing's own column.
                    let why = if r.message.is_empty() {
                        format!("exit code {}", r.exit_code)
                    } else {
                        r.message.clone()
                    };
                    self.fail(&mut job, i, &why, (r.reason, r.signal.clone()), cx.now);
                }
            }
        }
        self.flush(cx, &mut job);
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

    fn held(
        &self,
        _view: &hetsched_core::SchedulerView,
        task: u64,
    ) -> Option<(Option<u32>, Resources)> {
        let (seq, i) = job_of(task);
        let j = self.jobs.get(&seq)?;
        j.booked.get(&i).map(|&(_, r, _)| (j.group, r))
    }

    fn offloaded(&mut self, task: u64, attempt: u32, anode: u32) {
        let (seq, i) = job_of(task);
        if let Some(x) = self
            .jobs
            .get_mut(&seq)
            .and_then(|j| j.insts.get_mut(i as usize))
            && x.st == St::Running
            && x.attempt == attempt
            && x.executed != Some(anode)
        {
            x.executed = Some(anode);
            self.dirty.insert((seq, i));
        }
    }

    fn job_of_task(&self, task: u64) -> Option<u64> {
        let (seq, _) = job_of(task);
        self.jobs.get(&seq).map(|j| j.id())
    }

    fn dispatched_spec(&self, task: u64, key: u64) -> Option<TaskSpec> {
        let (seq, i) = job_of(task);
        let job = self.jobs.get(&seq)?;
        let spec = Self::spec(job, job.task_of(i).0);
        (spec.key == key).then_some(spec)
    }

    fn offloaded_to(&self, task: u64) -> Option<(u32, u32)> {
        let (seq, i) = job_of(task);
        let x = self.jobs.get(&seq)?.insts.get(i as usize)?;
        Some((x.attempt, x.executed?))
    }

    fn on_lost(&mut self, cx: &mut Ctx, task: u64, reason: &str) -> Result<(), StateError> {
        self.lost(cx, task, reason, false);
        Ok(())
    }

    /// Its agent never read the heartbeat reply that sent it (it gave up on the call): as a
    /// loss, but its attempt number names no run, so its next dispatch reuses it, on this
    /// node too — whose agent never held it. Before, it ran again as attempt N + 1, as if
    /// its node had lost a run.
    fn on_undelivered(&mut self, cx: &mut Ctx, task: u64) -> Result<(), StateError> {
        self.lost(cx, task, crate::state::UNDELIVERED, true);
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
        // What was stopped on this node and is neither listed running nor reported (its
        // result came first) has no process left.
        if self.stopping.on_node(node.0) {
            let running: HashSet<(u64, u32)> = report
                .running
                .iter()
                .map(|rt| (rt.task_id, rt.attempt))
                .collect();
            for job in self.stopping.beat(node.0, &running) {
                self.stopped(job);
            }
        }
        if crate::limits::peer_address(&report.advertise) {
            self.set_address(node.0, Some(&report.advertise));
        } else if !report.advertise.is_empty() {
            // Relayed to every agent balancing a workflow and named in every fetch of this
            // node's outputs: only an address agents can dial is. The node serves none then,
            // as one without a listener.
            // Said once: at its first beat, or when a good address turns bad.
            if self.set_address(node.0, None) || !self.heard.contains(&node.0) {
                warn!(
                    node = %cx.nodes.name(node.0),
                    "the agent advertises an address that is not host:port: its workflow outputs \
                     are not fetched from it"
                );
            }
        }
        // It answers again: its outputs may be fetched (those produced again meanwhile stay
        // where they were produced again).
        self.unreachable.remove(&node.0);
        self.note_fetching(node, report);
        // A heartbeat after the one that said its disk had no room for an instance's inputs:
        // its disk report decides again (read after that fetch: the agent reads its disk
        // afresh for a beat that carries such a result).
        if let Some(&at) = self.no_room.get(&node.0)
            && cx.nodes.get(node.0).is_some_and(|rec| rec.last_seen > at)
        {
            self.no_room.remove(&node.0);
            self.node_masks.note(node.0);
        }
        if self.heard.insert(node.0) {
            // Its outputs can be fetched from now on: the nodes holding instances that waited
            // for them look again at once, not at their next beat (an idle agent's may be a
            // minute away).
            for job in self.jobs.values().filter(|j| j.finished_ns == 0) {
                self.woken.extend(
                    job.assigned
                        .iter()
                        .filter(|&(&n, q)| n != node.0 && !q.is_empty())
                        .map(|(&n, _)| n),
                );
            }
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
            // Round trips to registered nodes only (any u32 an agent names would otherwise be
            // kept, for ever), at most `MAX_RTT`: the agent's u64 near its top overflowed the
            // rounding below under the state's lock.
            let known = cx.nodes.len() as u32;
            for (&peer, &ns) in report
                .rtt_ns
                .iter()
                .filter(|&(&peer, _)| peer < known && peer != node.0)
            {
                let q = ns.min(MAX_RTT).div_ceil(RTT_RESOLUTION).max(1) * RTT_RESOLUTION;
                // A first measurement, or one that moved by more than a step of
                // `RTT_RESOLUTION`, clusters again (below, once per heartbeat at most). A round
                // trip that wavers across one step's edge is kept without: each recluster
                // costs a pass over the measured pairs, and jitter on a quiet network made one
                // at most beats of a large cluster.
                if self
                    .rtt
                    .insert((node.0, peer), q)
                    .is_none_or(|old| old.abs_diff(q) > RTT_RESOLUTION)
                {
                    self.clustered.clear();
                    self.clustered_live_at = None;
                }
            }
        }
        // A node that joined or left changes the clusters. While no PCDDB workflow runs
        // (nothing reads them but `hetsched nodes`) at most once per `RECLUSTER_IDLE_NS`:
        // 1,000 agents registering one after another cost 1,000 reclusters of a growing
        // cluster, each a sort of every node per broadcast. Round trips are measured only
        // while PCDDB balances, and a new one clusters at once (`clustered` cleared above).
        if self.clusters_lag(cx) {
            let pcddb_runs = self.maybe_running.iter().any(|seq| {
                self.jobs
                    .get(seq)
                    .is_some_and(|j| j.balancer == BalancerKind::Pcddb && j.finished_ns == 0)
            });
            let due = self.clustered.is_empty()
                || self
                    .reclustered_ns
                    .is_none_or(|t| cx.now.saturating_sub(t) >= RECLUSTER_IDLE_NS);
            if pcddb_runs || due {
                self.recluster(cx);
            }
        }
        // The workflows that run: those that finished (or were purged) leave the set.
        let jobs = &self.jobs;
        self.maybe_running
            .retain(|seq| jobs.get(seq).is_some_and(|j| j.finished_ns == 0));
        // What every live node offers and each running vocabulary's masks over them, brought
        // up to date: only while a workflow runs (the scalars of the nodes the registry lists
        // as changed since; those whose offer changed are matched again, [`masks`]). The list
        // waits in the registry while none runs.
        let now = std::time::Instant::now();
        if !self.maybe_running.is_empty() {
            let mut masks = std::mem::take(&mut self.node_masks);
            let mut changed = std::mem::take(&mut self.nodes_changed);
            cx.nodes.take_changed(&mut changed);
            masks.refresh(
                cx.nodes.len() as u32,
                cx.view.placement_generation(),
                changed.iter().map(|n| n.0),
                now,
                |n| self.offer_key(cx, n),
                |n| self.offer_of(cx, n),
            );
            self.node_masks = masks;
            self.nodes_changed = changed;
        }
        // Whether this node has no room for inputs now, and whether it just ran short (its
        // report, or a result that found no room): then what waits for it with inputs to
        // fetch goes elsewhere ([`Self::take_back`]), once, not at every beat while it stays
        // short (a node may hold most of a wide workflow's instances).
        let short = cx
            .nodes
            .get(node.0)
            .is_some_and(|rec| !self.room_for_inputs(rec, node.0));
        let sweep = if short {
            self.short_of_room.insert(node.0)
        } else {
            self.short_of_room.remove(&node.0);
            false
        };
        let pcddb_runs = self.maybe_running.iter().any(|seq| {
            self.jobs
                .get(seq)
                .is_some_and(|j| j.balancer == BalancerKind::Pcddb)
        });
        if pcddb_runs {
            self.drop_dead_addresses(cx);
        }
        let seqs: Vec<u64> = self.maybe_running.iter().copied().collect();
        for seq in seqs {
            let Some(mut job) = self.jobs.remove(&seq) else {
                continue;
            };
            // The live nodes as its vocabulary sees them, and this node's mask.
            let view = self.node_masks.view(&job.vocab, &mut job.vocab_view, now);
            let (stamp, here) = (view.stamp, view.mask_of(node.0));
            // Centralised: the dispatcher's members follow the live nodes and their masks
            // (instances nobody could run are tried again).
            if let Machine::Centralised(d) = &mut job.machine
                && job.members_stamp != stamp
            {
                job.members_stamp = stamp;
                let members = self
                    .node_masks
                    .view(&job.vocab, &mut job.vocab_view, now)
                    .members();
                if job.members != members {
                    job.members = members.to_vec();
                    let o = d.set_members(job.members.clone());
                    self.apply(&mut job, o);
                }
            }
            // The node's messages to this launch node.
            let jid = job.id();
            for env in report.balance.iter().filter(|e| e.job_id == jid) {
                let Ok(mut m) = serde_json::from_str::<Message>(&env.message_json) else {
                    continue;
                };
                job.received += 1;
                // What the node says is checked before the launch node acts on it: a node
                // speaks for itself only (a `return` may name the node a request could not
                // reach), and names instances of this workflow only (an index past the
                // instance table panicked, holding the state's lock).
                let n_insts = job.insts.len();
                let known = |i: &InstanceId| (i.0 as usize) < n_insts;
                if m.from != node && !matches!(m.body, Body::Return(_)) {
                    warn!(
                        job = jid,
                        node = node.0,
                        from = m.from.0,
                        "a PCDDB message in a node's heartbeat speaks for another node: ignored"
                    );
                    continue;
                }
                match &mut m.body {
                    Body::Reply { cluster, taken, .. } => {
                        // Only what a granted request sent to this node offers, once
                        // (`offers`): not instances the workflow lacks, none it was never
                        // offered, none another node claimed first (a replayed grant), none
                        // whose requirements it lacks, and no more than the acceptance rule
                        // lets it take (MT × cores − x, x: what it took before and still
                        // holds). What is refused does not run here, and the node's machine
                        // is told to forget it (it counts it in its instance table); an offer
                        // it could not meet, or took past the rule, is placed again.
                        let n = node.0;
                        let cores = cx.nodes.get(n).map_or(1, |rec| rec.spec.cores.max(1));
                        let thresholds = self.thresholds;
                        let queued: HashSet<u32> = job
                            .assigned
                            .get(&n)
                            .map(|q| q.iter().copied().collect())
                            .unwrap_or_default();
                        let insts = &job.insts;
                        // What its machine still holds of what it took: queued for it here, or
                        // running there (not produced again there outside the machine).
                        let still_holds = |i: u32| {
                            insts.get(i as usize).is_some_and(|x| {
                                !x.reproducing
                                    && (queued.contains(&i)
                                        || (x.st == St::Running && x.node == Some(n)))
                            })
                        };
                        let claimed = job.offers.claim_reply(
                            n,
                            cluster.0,
                            here,
                            |held| thresholds.room(cores, held),
                            still_holds,
                            taken.iter().filter(|i| known(i)).map(|i| i.0),
                        );
                        // Refused: what `offers` refused, and what the workflow lacks.
                        let refused: Vec<u32> = claimed
                            .refused
                            .iter()
                            .copied()
                            .chain(taken.iter().filter(|i| !known(i)).map(|i| i.0))
                            .collect();
                        if !refused.is_empty() {
                            warn!(
                                job = jid,
                                node = n,
                                instances = refused.len(),
                                "a PCDDB reply claims instances no request sent to the node \
                                 offers (unknown, already claimed, or a replayed grant): dropped"
                            );
                        }
                        if !claimed.over.is_empty() {
                            warn!(
                                job = jid,
                                node = n,
                                instances = claimed.over.len(),
                                "a PCDDB reply claims more instances than the node may take \
                                 (MT × cores less what it holds): the excess is dropped and \
                                 placed again"
                            );
                        }
                        if !refused.is_empty() {
                            let dropped = job.dropped.entry(n).or_default();
                            for i in refused {
                                dropped.insert(i, DROPPED_REPLIES);
                            }
                        }
                        Self::hand_back(&mut job, n, claimed.unmet);
                        Self::hand_back(&mut job, n, claimed.over);
                        if claimed.placed.is_empty() {
                            continue;
                        }
                        let q = job.assigned.entry(n).or_default();
                        q.extend(claimed.placed.iter().copied());
                        *taken = claimed.placed.into_iter().map(InstanceId).collect();
                    }
                    Body::Return(r) => {
                        // Only what a request sent to this node still offers comes back, with
                        // the requirements it was offered with: a return cannot pull back
                        // instances placed elsewhere or strip their requirements, nor — with
                        // nothing of a request sent to the node, or a table that is not the
                        // granted one less the nodes visited — prune the launch node's table.
                        let back = job.offers.hand_back(
                            node.0,
                            r.cluster.0,
                            r.sent_at,
                            &r.table,
                            r.instances.iter().map(|w| w.instance.0),
                        );
                        if back.is_empty() {
                            if !r.instances.is_empty() {
                                warn!(
                                    job = jid,
                                    node = node.0,
                                    "a PCDDB return hands back nothing a request sent to the \
                                     node still offers with that table (the granted one less \
                                     the nodes visited): ignored"
                                );
                            }
                            continue;
                        }
                        let mut back: HashMap<u32, u64> = back.into_iter().collect();
                        r.instances
                            .retain_mut(|w| match back.remove(&w.instance.0) {
                                Some(requires) => {
                                    w.requires = requires;
                                    true
                                }
                                None => false,
                            });
                    }
                    // Results come from the heartbeat's own (durable) results, not from here.
                    Body::Result { .. } => continue,
                    // A status for a cluster the node is no longer in (sent before the
                    // clusters changed) would list it where requests cannot reach it.
                    Body::Status { cluster }
                        if !self
                            .clusters
                            .get(cluster.0 as usize)
                            .is_some_and(|c| c.contains(&m.from.0)) =>
                    {
                        continue;
                    }
                    _ => {}
                }
                let o = job.machine.handle(LaunchEvent::Deliver(m), cx.now);
                self.apply(&mut job, o);
            }
            // Requests nobody answered in time (kept, sent off their table, or lost with an
            // agent or a reply): what they still offer is placed again.
            let expired = job.offers.expire(cx.now, self.offer_ttl);
            if !expired.is_empty() {
                warn!(
                    job = jid,
                    instances = expired.len(),
                    "PCDDB allocation requests went unanswered for {} (`[workflow] offer_ttl`): \
                     their instances are placed again",
                    humantime::format_duration(self.offer_ttl)
                );
                job.rerun.extend(expired);
            }
            self.return_dead_requests(cx, &mut job);
            // Centralised: the heartbeat is the node's monitoring report. Its load is what the
            // node holds, as a simulated node's report says: this workflow's instances running
            // there and those waiting here for it, and each core other work holds there (batch
            // tasks, stream workers, other workflows: the view's). Counting only the instances
            // running there made a node full of other work, or of instances waiting for it,
            // read idle: every ready instance could be pushed there, and waited.
            if let Machine::Centralised(_) = job.machine {
                let running: Vec<u32> =
                    instances_of(&job, report.running.iter().map(|r| r.task_id)).collect();
                let mine = running.len() as u32;
                let waiting = job.assigned.get(&node.0).map_or(0, VecDeque::len) as u32;
                let others = foreign_cores(cx.view, &job, node, running);
                let held = mine.saturating_add(waiting).saturating_add(others);
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
            // Instances the machine placed on nodes that are gone (or that take no more work)
            // run again: back to the machine.
            let dead: Vec<u32> = job
                .assigned
                .keys()
                .copied()
                .filter(|&n| !Self::alive(cx, n) || (n == node.0 && !open))
                .collect();
            for n in dead {
                if let Some(q) = job.assigned.remove(&n) {
                    Self::hand_back(&mut job, n, q);
                }
            }
            if sweep {
                let k = self.take_back(cx, &mut job, node.0, out);
                if k > 0 {
                    info!(
                        job = seq,
                        instances = k,
                        node = %cx.nodes.name(node.0),
                        "the node's disk has no room for inputs: the instances with inputs \
                         waiting for it go elsewhere"
                    );
                }
            }
            // Consumers whose input could not be fetched go back to the machine once every
            // input is on a live node again (a lost one is produced again meanwhile).
            let blocked = std::mem::take(&mut job.blocked);
            for i in blocked {
                if job.insts[i as usize].st != St::Ready {
                    continue;
                }
                if self.inputs_ready(cx, &mut job, i) {
                    job.rerun.push(i);
                } else {
                    job.blocked.push(i);
                }
            }
            if open {
                // What the machine placed here, in order: each starts once its inputs are on
                // live nodes and its resources are free here; until then it waits here (the
                // node's machine counts it as held). With prefetch, as for batch tasks, the
                // node is lent cores beyond its free ones; an instance placed on them is queued
                // by the agent, which starts it as soon as a running one's cores are free
                // (under "auto": only instances of tasks measured short, within the time
                // budget of the cores this workflow's short instances hold there, running or
                // placed now: never behind long work).
                let mut mine = job.assigned.remove(&node.0).unwrap_or_default();
                let mut keep = VecDeque::new();
                let (lend, mut auto) = match cx.nodes.prefetch.setting() {
                    Setting::Cores(n) => (n, None),
                    Setting::Auto => {
                        let depth = job.observed.iter().map(|o| o.run_times().depth()).max();
                        let cores = cx.view.node(node).node.cores;
                        let mut queue = AutoQueue::draining(cores);
                        queue.drain_through(short_cores_on(&job, cx.nodes, node));
                        (depth.unwrap_or(0) * cores, Some(queue))
                    }
                };
                let credit = cx.nodes.prefetch.open(cx.view, node, lend);
                let mut used = 0u32;
                let mut passed_over = 0;
                while let Some(i) = mine.pop_front() {
                    let x = &job.insts[i as usize];
                    if !matches!(x.st, St::Ready | St::Waiting) {
                        // Cancelled after this node's machine took it, or handed out twice
                        // (a reply of a launch node from before a restart): it does not run
                        // here, so the machine must stop counting it.
                        if !(x.st == St::Running && x.node == Some(node.0)) {
                            job.dropped
                                .entry(node.0)
                                .or_default()
                                .insert(i, DROPPED_REPLIES);
                        }
                        continue;
                    }
                    // Never sent to a node without room for its inputs, however it came to be
                    // placed here (a PCDDB node's machine that took it before its mask said
                    // so): back to the machine, which places it where there is room. It did not
                    // start, so no attempt is lost.
                    if short && Self::fetches_inputs(&job, i) {
                        Self::hand_back(&mut job, node.0, [i]);
                        continue;
                    }
                    // What cannot start here now (an input not on a live node, too large for
                    // what is free, or not to be queued) is passed over, but only so many
                    // times: under `centralised` a node may hold most of a wide workflow, and
                    // looking at every queued instance on each of its heartbeats made a
                    // workflow's run quadratic in its width. Inputs are looked at first: a lost
                    // one is produced again at once, even while this node is full.
                    if !self.inputs_ready(cx, &mut job, i) {
                        keep.push_back(i);
                        passed_over += 1;
                        if passed_over >= PASS_OVER {
                            break;
                        }
                        continue;
                    }
                    let t = job.task_of(i).0;
                    let request = job.rt.tasks[t].request();
                    let prefetched = used + request.cores > credit.free;
                    let run_times = job.observed[t].run_times();
                    let queueable = !prefetched
                        || auto
                            .as_mut()
                            .is_none_or(|q| q.admit(run_times, request.cores));
                    // A bound NNode whose ANode's queue is full takes no GPU instance for
                    // now, as no batch GPU task (`SchedulerView::set_accelerator_held`).
                    let held = request.gpus > 0 && cx.view.node(node).accel_held;
                    if !queueable
                        || held
                        || !cx.view.can_book(node, request)
                        || !cx.view.group_room_for(job.group, &request)
                    {
                        passed_over += 1;
                        // It cannot start here now. Under `centralised` the dispatcher moves it
                        // to a member with room, if one has: else it waited for this node,
                        // which other work (a batch task, a stream topology) may hold for hours
                        // while other nodes idle. Not when its owner's cap stops it (the same
                        // anywhere), nor a lost output's producer put where its consumers wait
                        // (`waiting_for`, which would put it back here).
                        let moved = match &mut job.machine {
                            Machine::Centralised(d)
                                if !job.insts[i as usize].reproducing
                                    && cx.view.group_room_for(job.group, &request) =>
                            {
                                d.relocate(InstanceId(i), node)
                            }
                            _ => Vec::new(),
                        };
                        if moved.is_empty() {
                            keep.push_back(i);
                            if cx.view.is_full(node) {
                                break;
                            }
                        } else {
                            self.apply(&mut job, moved);
                        }
                        if passed_over >= PASS_OVER {
                            break;
                        }
                        continue;
                    }
                    let Some(devices) = cx.view.book(node, request) else {
                        keep.push_back(i);
                        continue;
                    };
                    let (mut d, key) = self.dispatch(&job, i, node.0, devices.clone());
                    d.prefetched = prefetched;
                    let spec = out
                        .needs_spec(key)
                        .then(|| Self::spec(&job, job.task_of(i).0));
                    if let Err(_d) = out.offer(d, spec) {
                        cx.view.unbook(node, request, &devices);
                        keep.push_back(i);
                        out.more();
                        break;
                    }
                    used += request.cores;
                    if !prefetched
                        && run_times.short()
                        && let Some(q) = auto.as_mut()
                    {
                        // Placed on free cores and short: a queue may drain through them.
                        q.drain_through(request.cores);
                    }
                    cx.view.charge_group(job.group, request);
                    job.booked.insert(i, (node.0, request, devices.clone()));
                    let x = &mut job.insts[i as usize];
                    x.devices = devices;
                    x.st = St::Running;
                    let attempt = x.next_attempt(node.0);
                    if attempt != x.attempt {
                        x.taken_back_from.clear();
                    }
                    x.attempt = attempt;
                    x.unstarted = false;
                    // A new attempt: where it is offloaded to, if it is, is noted once the
                    // state knows ([`JobKind::offloaded`]).
                    x.executed = None;
                    x.node = Some(node.0);
                    x.started_ns = cx.now;
                    // Running as far as the server knows, until its agent says it fetches.
                    x.fetching = false;
                    x.fetch_ms = 0;
                    // Running: no reason until this attempt ends.
                    (x.reason, x.signal) = (None, None);
                    cx.metrics.dispatched(if x.devices.is_empty() {
                        hetsched_core::Variant::Cpu
                    } else {
                        hetsched_core::Variant::Gpu
                    });
                    cx.nodes.started(node, job.task_id(i));
                    self.dirty.insert((seq, i));
                }
                cx.nodes.prefetch.close(cx.view, node, credit);
                // The ones kept, in order, before the ones not looked at.
                while let Some(i) = keep.pop_back() {
                    mine.push_front(i);
                }
                if !mine.is_empty() {
                    job.assigned.insert(node.0, mine);
                }
            }
            let held_here = job.assigned.get(&node.0).map_or(0, VecDeque::len);
            self.flush(cx, &mut job);
            if open && job.assigned.get(&node.0).map_or(0, VecDeque::len) > held_here {
                // Placed here after this reply's dispatch (a lost output produced again where
                // its consumer waits): the agent beats again at once for it. No wake-up would
                // reach it — the node being answered is not woken — and an idle agent's next
                // beat may be a minute away.
                out.more();
            }
            // Launch node → this node. The agents' address book goes with PCDDB jobs only, and
            // only to an agent that does not hold this version of it (a new agent, one whose
            // last reply was lost, one that heard another server): a copy for every workflow at
            // every beat was ~25 KB per workflow per reply at 1,000 agents. Each message
            // carries only the addresses its journey needs (`journey_peers`).
            let peers: BTreeMap<u32, String> = if job.balancer == BalancerKind::Pcddb
                && report.peers_version != self.peers_version
            {
                self.addresses.clone()
            } else {
                BTreeMap::new()
            };
            if let Some(ms) = job.to_node.remove(&node.0) {
                for m in ms {
                    if let Ok(json) = serde_json::to_string(&m) {
                        let grant = self.grant_of(&m.body);
                        if let (Some(g), Body::Request(r)) = (&grant, &m.body) {
                            job.offers.grant(
                                cx.now,
                                g.serial,
                                r.cluster.0,
                                r.sent_at,
                                r.table.clone(),
                                r.instances.iter().map(|w| (w.instance.0, w.requires)),
                            );
                        }
                        out.balance(BalanceEnvelope {
                            job_id: job.id(),
                            message_json: json,
                            peers: self.journey_peers(&m.body),
                            grant,
                        });
                    }
                }
            }
            // The node's clusters likewise, only to an agent that does not hold their version
            // (~700 bytes per workflow per reply at 1,000 agents).
            let clusters = if job.balancer == BalancerKind::Pcddb
                && report.clusters_version != self.clusters_version
            {
                self.clusters_of(node.0)
            } else {
                Vec::new()
            };
            if job.balancer == BalancerKind::Pcddb {
                out.pcddb(PcddbJob {
                    job_id: job.id(),
                    lt: self.thresholds.lt,
                    mt: self.thresholds.mt,
                    launch: LAUNCH.0,
                    task_base: job.task_id(0),
                    epoch: self.epoch,
                    peers,
                    peers_version: self.peers_version,
                    clusters,
                    clusters_version: self.clusters_version,
                    attributes: here,
                    check_interval_ms: self.check_interval_ms,
                    dropped: Self::take_dropped(&mut job, node.0),
                    // The state adds the key: the kinds hold none.
                    balance_key: Vec::new(),
                    // The load other work puts on the node, as the centralised dispatcher's
                    // report counts it: the node's machine counts every instance it took
                    // (running here, queued here or waiting here for the node), so every
                    // instance of this workflow the server has sent here — this reply's too —
                    // is its own, not other work.
                    foreign_cores: foreign_cores(
                        cx.view,
                        &job,
                        node,
                        instances_of(
                            &job,
                            cx.nodes
                                .get(node.0)
                                .map(|rec| rec.running.iter().copied())
                                .into_iter()
                                .flatten(),
                        ),
                    ),
                });
            }
            self.jobs.insert(seq, job);
        }
        // The vocabularies of workflows that ended are matched no more.
        self.node_masks.forget_unasked();
        Ok(())
    }

    fn has_changes(&self) -> bool {
        !self.dirty.is_empty() || !self.dirty_jobs.is_empty() || !self.stopping.changes().is_empty()
    }

    /// A waiting workflow's begin time ([`waiting`]): the reaper's pass then lets the state
    /// start it.
    fn housekeeping_due(&self) -> Option<std::time::Instant> {
        self.next_begin()
    }

    fn waiting(&self) -> Vec<(u64, Gate)> {
        self.waiting_jobs()
    }

    fn any_waiting(&self) -> bool {
        self.any_waiting_job()
    }

    fn set_waiting_for(&mut self, id: u64, job: Option<u64>) {
        self.note_waiting_for(id, job);
    }

    fn start_waiting(&mut self, cx: &mut Ctx, id: u64) {
        self.start(cx, id);
    }

    fn cancel_waiting(&mut self, cx: &mut Ctx, id: u64, why: &str) -> Result<u64, StateError> {
        self.cancel_unstarted(cx, id, why)
    }

    fn hold_waiting(&mut self, id: u64, hold: bool) -> Result<u64, StateError> {
        self.hold_unstarted(id, hold)
    }

    fn set_begin(&mut self, id: u64, begin_ms: u64) -> Result<(), StateError> {
        self.begin_unstarted(id, begin_ms)
    }

    fn next_begin(&self) -> Option<std::time::Instant> {
        Workflows::next_begin(self)
    }

    fn take_wakes(&mut self, wakes: &mut Wakes) {
        for n in std::mem::take(&mut self.woken) {
            wakes.node(n);
        }
    }

    fn persist(&self, tx: &rusqlite::Transaction) -> Result<(), StoreError> {
        let mut q = tx.prepare_cached(
            "INSERT OR REPLACE INTO wf_instances(job,instance,state,attempt,node,started_ns,finished_ns,exit_code,message,failures,produced,cpu_user_ms,cpu_system_ms,max_rss_bytes,devices,executed_node,disk_losses,unstarted,taken_back_from,fetch_ms,max_gpu_memory_bytes,reason,signal) VALUES(?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,?12,?13,?14,?15,?16,?17,?18,?19,?20,?21,?22,?23)",
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
                i64::from(x.produced),
                x.usage.map(|u| u.cpu_user_ms as i64),
                x.usage.map(|u| u.cpu_system_ms as i64),
                x.usage.map(|u| u.max_rss_bytes as i64),
                crate::store::list_text(&x.devices),
                x.executed.map(i64::from),
                i64::from(x.disk_losses),
                i64::from(x.unstarted),
                crate::store::list_text(&x.taken_back_from),
                i64::try_from(x.fetch_ms).unwrap_or(i64::MAX),
                x.usage.map(|u| u.max_gpu_memory_bytes as i64),
                x.reason.map(EndReason::as_str),
                x.signal.as_deref()
            ])?;
        }
        for &seq in &self.dirty_jobs {
            if let Some(j) = self.jobs.get(&seq) {
                tx.execute(
                    "UPDATE wf_jobs SET finished_ns=?2, cancelled=?3, held=?4, started=?5, cancel_reason=?6, begin_ms=?7, cancel_end=?8 WHERE id=?1",
                    params![
                        seq as i64,
                        j.finished_ns as i64,
                        i64::from(j.cancelled),
                        i64::from(j.gate.held),
                        i64::from(j.gate.started),
                        j.cancel_reason,
                        j.gate.begin_ms.unwrap_or(0) as i64,
                        j.cancel_end.map(EndReason::as_str)
                    ],
                )?;
            }
        }
        for &(task, stop) in self.stopping.changes() {
            crate::store::write_task_stop(tx, task, stop)?;
        }
        Ok(())
    }

    fn committed(&mut self) {
        self.dirty.clear();
        self.dirty_jobs.clear();
        self.stopping.committed();
        self.stopped_in_event = false;
    }

    fn counts(&self) -> TaskCounts {
        let mut c = TaskCounts::default();
        for j in self.jobs.values() {
            c.add(&Self::counts_of(&j.insts).0);
        }
        c
    }

    fn job_count(&self) -> u64 {
        (self.jobs.len() + self.purged.len()) as u64
    }

    fn purged_count(&self) -> u64 {
        self.purged.len() as u64
    }

    fn job_ids(&self) -> Vec<u64> {
        // Purged workflows' ids too: the state's sequence never gives them again.
        self.jobs.keys().chain(&self.purged).copied().collect()
    }

    fn finished_in_event(&self) -> bool {
        self.dirty_jobs
            .iter()
            .any(|seq| self.jobs.get(seq).is_some_and(|j| j.finished_ns > 0))
    }

    /// A workflow ended in this event, or a finished one's last stopping instance did: its
    /// waiters are woken.
    fn ends_in_event(&self) -> bool {
        self.stopped_in_event || self.finished_in_event()
    }

    fn stopping(&self, id: u64) -> u32 {
        self.stopping.of_job(id)
    }

    fn finished_jobs(&self) -> Vec<(u64, u64)> {
        self.jobs
            .iter()
            // (One whose stopped instances may still run is not purged under them.)
            .filter(|(_, j)| j.finished_ns > 0 && j.finished() && self.stopping.of_job(j.id()) == 0)
            .map(|(&seq, j)| (seq, j.finished_ns))
            .collect()
    }

    fn check_purge(&self, id: u64) -> Result<(), StateError> {
        let seq = id & ((1 << super::KIND_SHIFT) - 1);
        let j = self.jobs.get(&seq).ok_or(StateError::NoJob(id))?;
        if !j.finished() {
            let (c, _) = Self::counts_of(&j.insts);
            return Err(StateError::Invalid(format!(
                "job {id} is not finished ({} pending, {} running): cancel it first \
                 (`hetsched cancel {id}`) or wait for it",
                hetsched_core::text::count(c.pending, "instance"),
                c.running
            )));
        }
        let stopping = self.stopping.of_job(id);
        if stopping > 0 {
            return Err(StateError::Invalid(format!(
                "job {id} is still stopping: the processes of {} may still run (their SIGTERM \
                 handlers, for at most the kill grace); `hetsched wait {id}` returns once they \
                 ended",
                hetsched_core::text::count(u64::from(stopping), "instance")
            )));
        }
        Ok(())
    }

    fn purge_rows(
        &self,
        tx: &rusqlite::Transaction,
        ids: &[u64],
        budget: &mut u64,
    ) -> Result<(u64, Vec<crate::state::purging::Left>), StoreError> {
        let mut instances = 0;
        let mut left = Vec::new();
        for &id in ids {
            let seq = id & ((1 << super::KIND_SHIFT) - 1);
            let Some(j) = self.jobs.get(&seq) else {
                continue;
            };
            mark_purged(tx, seq)?;
            let n = j.insts.len() as u64;
            instances += n;
            left.extend(crate::state::purging::delete_bounded(
                tx,
                Kind::Workflow,
                id,
                0..n,
                budget,
            )?);
        }
        Ok((instances, left))
    }

    fn is_purged(&self, id: u64) -> bool {
        self.purged.contains(&(id & ((1 << super::KIND_SHIFT) - 1)))
    }

    /// A running workflow answers from its last instances (cheap); a finished one from all.
    fn job_end(&self, id: u64) -> Option<super::JobEnd> {
        use super::JobEnd;
        if self.is_purged(id) {
            return Some(JobEnd::Purged);
        }
        let j = self.jobs.get(&(id & ((1 << super::KIND_SHIFT) - 1)))?;
        // Finished, but processes of its stopped instances may still run: the jobs after it
        // wait for them too, as `wait` does.
        if !j.finished() || self.stopping.of_job(id) > 0 {
            return Some(JobEnd::Unfinished);
        }
        Some(match j.state() {
            "completed" => JobEnd::Completed,
            "cancelled" => JobEnd::Cancelled,
            _ => JobEnd::Failed,
        })
    }

    fn purged(&mut self, _cx: &mut Ctx, ids: &[u64]) {
        if !self.stopping.is_empty() {
            self.stopping.forget_jobs(&ids.iter().copied().collect());
        }
        for &id in ids {
            let seq = id & ((1 << super::KIND_SHIFT) - 1);
            if self.jobs.remove(&seq).is_some() {
                self.purged.insert(seq);
            }
        }
    }

    fn jobs_page(&self, rd: &Read, cursor: u64, limit: usize) -> JobsPage {
        let from = cursor & ((1 << super::KIND_SHIFT) - 1);
        let mut page = JobsPage::default();
        for (seq, j) in self.jobs.range(from..) {
            if page.jobs.len() == limit {
                page.next_cursor = *seq;
                break;
            }
            page.jobs.push(self.info(rd, j, false));
        }
        page
    }

    fn listed_state(&self, id: u64) -> Option<&str> {
        self.jobs
            .get(&(id & ((1 << super::KIND_SHIFT) - 1)))
            .map(|j| j.state())
    }

    fn stored_bytes(&self, id: u64) -> u64 {
        self.jobs
            .get(&(id & ((1 << super::KIND_SHIFT) - 1)))
            .map_or(0, |j| j.text.len() as u64)
    }

    fn stored_tasks(&self, id: u64) -> u64 {
        self.jobs
            .get(&(id & ((1 << super::KIND_SHIFT) - 1)))
            .map_or(0, |j| j.insts.len() as u64)
    }

    fn unfinished_tasks(&self, id: u64) -> u64 {
        self.jobs
            .get(&(id & ((1 << super::KIND_SHIFT) - 1)))
            .map_or(0, |j| {
                let c = Self::counts_of(&j.insts).0;
                c.pending + c.running
            })
    }

    fn job(&self, rd: &Read, id: u64) -> Result<JobInfo, StateError> {
        self.jobs
            .get(&(id & ((1 << super::KIND_SHIFT) - 1)))
            .map(|j| self.info(rd, j, true))
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
        let listed = |seq: u64| all || seq == job;
        // A task id is the kind's id of (job << 32 | instance), so the cursor names the job and
        // the instance the page starts at: a page costs O(jobs + limit) under the lock, however
        // many instances come before the cursor or after the page.
        let start = cursor & ((1 << super::KIND_SHIFT) - 1);
        let (start_job, start_instance) = (start >> 32, start & u64::from(u32::MAX));
        let mut page = TasksPage {
            total: self
                .jobs
                .iter()
                .filter(|&(&seq, _)| listed(seq))
                .map(|(_, j)| j.insts.len() as u64)
                .sum(),
            ..TasksPage::default()
        };
        'page: for (&seq, j) in self.jobs.range(start_job..) {
            if !listed(seq) {
                continue;
            }
            let from = if seq == start_job { start_instance } else { 0 };
            let from = usize::try_from(from).unwrap_or(usize::MAX);
            // Ready instances a node's machine took (PCDDB) wait on that node for its cores,
            // memory or devices: listed there, as the job's pending reason names it, so that
            // `tasks --node` finds them. Built once per job, and only for a page that lists one.
            let mut placed_on: Option<HashMap<u32, u32>> = None;
            for (i, x) in j.insts.iter().enumerate().skip(from) {
                let tid = j.task_id(i as u32);
                if page.tasks.len() == limit {
                    page.next_cursor = tid;
                    break 'page;
                }
                let (t, _) = j.task_of(i as u32);
                let task = &j.rt.parsed.workflow.tasks[t];
                let waits_on = (x.st == St::Ready && x.node.is_none() && !j.assigned.is_empty())
                    .then(|| {
                        placed_on
                            .get_or_insert_with(|| {
                                j.assigned
                                    .iter()
                                    .flat_map(|(&n, q)| q.iter().map(move |&k| (k, n)))
                                    .collect()
                            })
                            .get(&(i as u32))
                            .copied()
                    })
                    .flatten();
                let (node, message) = match waits_on {
                    Some(n) => {
                        let name = rd.nodes.name(n);
                        let waits = format!("placed on {name}: waits there to start");
                        let message = if x.message.is_empty() {
                            waits
                        } else {
                            format!("{}; {waits}", x.message)
                        };
                        (name.to_string(), message)
                    }
                    None => (
                        x.node
                            .map_or(String::new(), |n| rd.nodes.name(n).to_string()),
                        x.message.clone(),
                    ),
                };
                page.tasks.push(TaskInfo {
                    id: tid,
                    job_id: j.id(),
                    app: task.name.clone(),
                    index: j.listed_index(i as u32),
                    state: x.st.as_str().into(),
                    attempt: x.attempt,
                    node,
                    variant: "cpu".into(),
                    devices: x.devices.clone(),
                    started_ns: x.started_ns,
                    finished_ns: x.finished_ns,
                    exit_code: x.exit_code,
                    message,
                    failed_attempts: x.failures,
                    preemptions: 0,
                    queued: false,
                    // The ANode it was offloaded to, as stored (the state fills in the others).
                    executed_node: x
                        .executed
                        .and_then(|n| rd.nodes.get(n))
                        .map_or(String::new(), |n| n.spec.name.clone()),
                    process: j.process_of(i as u32),
                    fetching: x.st == St::Running && x.fetching,
                    fetch_ms: x.fetch_ms,
                    // A finished attempt's; one running (again) or waiting shows none yet.
                    usage: x
                        .usage
                        .filter(|_| matches!(x.st, St::Done | St::Failed | St::Cancelled)),
                    nodes: Vec::new(),
                    reason: x.reason,
                    signal: x.signal.clone(),
                });
            }
        }
        if !all && page.total == 0 {
            return Err(StateError::NoJob(job));
        }
        Ok(page)
    }

    fn unfinished_named(&self, name: &str) -> Vec<u64> {
        self.jobs
            .values()
            .filter(|j| j.name == name && !j.cancelled && !j.finished())
            .map(|j| j.id())
            .collect()
    }

    fn running_attempts(
        &self,
        job: u64,
        app: Option<&str>,
        indices: Option<&[u32]>,
        _nodes: &crate::state::nodes::Nodes,
    ) -> Result<Vec<RunningAttempt>, StateError> {
        let (seq, chosen) = self.select(job, app, indices)?;
        let Some(j) = self.jobs.get(&seq) else {
            return Err(StateError::NoJob(job));
        };
        Ok(chosen
            .into_iter()
            .filter_map(|i| {
                let x = &j.insts[i as usize];
                let node = x.node.filter(|_| x.st == St::Running)?;
                Some(RunningAttempt {
                    task_id: j.task_id(i),
                    attempt: x.attempt,
                    node,
                    chunk_of: 0,
                })
            })
            .collect())
    }

    /// Cancels the instances of `job` whose listed index (`{index}`, the argument value) is one
    /// of `indices` — every process of that value — in task `app` only, if given. Running ones
    /// are killed at their nodes' next heartbeat; those a node's pcddb machine took and not yet
    /// started are dropped there; every instance depending on one is not run (failed, with a
    /// message naming the cancelled producer). The rest of the workflow goes on.
    fn cancel_tasks(
        &mut self,
        cx: &mut Ctx,
        job: u64,
        app: Option<&str>,
        indices: &[u32],
        why: &str,
    ) -> Result<u64, StateError> {
        let (seq, chosen) = self.select(job, app, Some(indices))?;
        let Some(mut j) = self.jobs.remove(&seq) else {
            return Err(StateError::NoJob(job));
        };
        let running: HashSet<u32> = (0..j.insts.len() as u32)
            .filter(|&i| j.insts[i as usize].st == St::Running)
            .collect();
        let mut n = 0;
        let mut ended = Vec::new();
        for i in chosen {
            if j.insts[i as usize].st.ended() {
                continue;
            }
            ended.extend(self.end_for_good(
                &mut j,
                i,
                why,
                true,
                (Some(EndReason::Cancelled), None),
                cx.now,
            ));
            n += 1;
        }
        // Running ones (the cancelled, and dependants already running on a re-produced
        // input) end at their nodes: the node's next heartbeat reports them, and as nothing
        // expects them any more the agent is told to kill them.
        for &i in ended.iter().filter(|i| running.contains(i)) {
            if let Some(node) = j.insts[i as usize].node {
                // Its process runs on until its agent has stopped it: a wait waits for that.
                let attempt = j.insts[i as usize].attempt;
                self.stopping.add(node, j.task_id(i), attempt, j.id());
                cx.nodes.ended(NodeId(node), j.task_id(i));
                self.woken.insert(node);
            }
            Self::unbook(cx, &mut j, i);
        }
        // Taken by a node's machine and not started: dropped there.
        for (&node, q) in &mut j.assigned {
            q.retain(|&i| {
                let gone = j.insts[i as usize].st.not_run();
                if gone {
                    j.dropped
                        .entry(node)
                        .or_default()
                        .insert(i, DROPPED_REPLIES);
                    self.woken.insert(node);
                }
                !gone
            });
        }
        j.assigned.retain(|_, q| !q.is_empty());
        // The machine never places them (a cancelled instance whose producers still run
        // would otherwise be readied by their results).
        let withdrawn: Vec<InstanceId> = ended.iter().copied().map(InstanceId).collect();
        j.machine.withdraw(&withdrawn);
        if n > 0 {
            info!(job, instances = n, "workflow instances cancelled");
        }
        self.check_finished(&mut j, cx.now);
        self.jobs.insert(seq, j);
        Ok(n)
    }

    /// `hetsched resubmit JOB --failed`: every instance that failed — out of retries, or not
    /// run because a producer failed — runs again, a new attempt each with its retries counted
    /// afresh. Succeeded instances keep their outputs and cancelled ones stay cancelled; an
    /// instance downstream of a cancelled one still cannot run, and now says so. What the
    /// graph has ready goes to the machine like a retry once its inputs are on live nodes (a
    /// failed re-production of a lost output runs again as one); the rest waits for its
    /// producers. A workflow cancelled as a whole is refused, as a batch job is.
    fn resubmit_failed(&mut self, cx: &mut Ctx, job: u64) -> Result<u64, StateError> {
        self.resubmit_ended(cx, job, St::Failed)
    }

    /// `hetsched resubmit JOB --cancelled`: every instance `cancel JOB --tasks` cancelled, and
    /// every one not run because of them, runs again as `--failed` runs the failed ones (see
    /// [`Workflows::requeue_ended`]); an instance that also depends on a failed one stays
    /// ended, now as failed, naming it. A workflow cancelled as a whole is refused.
    fn resubmit_cancelled(&mut self, cx: &mut Ctx, job: u64) -> Result<u64, StateError> {
        self.resubmit_ended(cx, job, St::Cancelled)
    }

    fn cancel(&mut self, cx: &mut Ctx, job: u64, why: &str) -> Result<u64, StateError> {
        self.cancel_with(cx, job, why, EndReason::Cancelled)
    }
}

impl Workflows {
    /// Marks for wake-up the nodes holding instances of group `group`'s workflows that their
    /// dispatch has not sent (its owner's cap stopped them there): the cap rose or went, and
    /// those nodes' next beats send them ([`crate::state::State`]'s cap changes).
    pub fn wake_group(&mut self, group: u32) {
        for j in self.jobs.values() {
            if j.group == Some(group) {
                self.woken.extend(
                    j.assigned
                        .iter()
                        .filter(|(_, q)| !q.is_empty())
                        .map(|(&n, _)| n),
                );
            }
        }
    }

    /// Puts workflow `job` in group `group` of the view (its owner's: a user's cap on cores
    /// counts its running instances, and its instances start only under the cap); what its
    /// running instances hold moves to the group.
    pub fn set_group(&mut self, view: &mut hetsched_core::SchedulerView, job: u64, group: u32) {
        let seq = job & ((1 << super::KIND_SHIFT) - 1);
        let Some(j) = self.jobs.get_mut(&seq) else {
            return;
        };
        let held = j
            .booked
            .values()
            .fold(Resources::default(), |sum, (_, r, _)| sum + *r);
        view.release_group(j.group, held);
        j.group = Some(group);
        view.charge_group(j.group, held);
    }

    /// The instances of workflow `job` whose listed index (`{index}`, the argument value) is one
    /// of `indices` (all: `None`) — every process of that value — of task `app` only, if given,
    /// with the job's sequence number. A task or an index the workflow does not have is refused,
    /// naming it.
    fn select(
        &self,
        job: u64,
        app: Option<&str>,
        indices: Option<&[u32]>,
    ) -> Result<(u64, Vec<u32>), StateError> {
        let seq = job & ((1 << super::KIND_SHIFT) - 1);
        let Some(j) = self.jobs.get(&seq) else {
            return Err(StateError::NoJob(job));
        };
        let tasks = &j.rt.parsed.workflow.tasks;
        let picked: Vec<usize> = match app {
            Some(name) => match tasks.iter().position(|t| t.name == name) {
                Some(t) => vec![t],
                None => {
                    return Err(StateError::Invalid(format!(
                        "job {job} has no task `{}`",
                        hetsched_core::text::clip(name)
                    )));
                }
            },
            None => (0..tasks.len()).collect(),
        };
        let wanted: Option<HashSet<u32>> = indices.map(|i| i.iter().copied().collect());
        let mut seen = HashSet::new();
        let mut chosen = Vec::new();
        for t in picked {
            for i in j.offset[t]..j.offset[t + 1] {
                let index = j.listed_index(i);
                if wanted.as_ref().is_none_or(|w| w.contains(&index)) {
                    seen.insert(index);
                    chosen.push(i);
                }
            }
        }
        super::check_indices_seen(job, indices, &seen, app.map(|n| format!("task `{n}`")))?;
        Ok((seq, chosen))
    }

    /// Cancels workflow `job` as a whole, each instance that had not ended saying `why`, for
    /// `reason` (a user's cancel, or a job it runs after that did not end as it needs).
    fn cancel_with(
        &mut self,
        cx: &mut Ctx,
        job: u64,
        why: &str,
        reason: EndReason,
    ) -> Result<u64, StateError> {
        let seq = job & ((1 << super::KIND_SHIFT) - 1);
        // A workflow that has ended stays as it ended (a failed one can still be resubmitted).
        if self.jobs.get(&seq).is_some_and(|j| j.finished()) {
            return Ok(0);
        }
        let Some(mut j) = self.jobs.remove(&seq) else {
            return Err(StateError::NoJob(job));
        };
        j.cancelled = true;
        self.maybe_unstarted.remove(&seq);
        if why != CANCELLED {
            j.cancel_reason = why.to_string();
        }
        j.cancel_end = Some(reason);
        self.dirty_jobs.insert(seq);
        let mut n = 0;
        let id = j.id();
        for i in 0..j.insts.len() {
            let tid = j.task_id(i as u32);
            let x = &mut j.insts[i];
            if x.st.ended() {
                continue;
            }
            if x.st == St::Running
                && let Some(node) = x.node
            {
                // Its process runs on until its agent has stopped it: a wait waits for that.
                self.stopping.add(node, tid, x.attempt, id);
                cx.nodes.ended(NodeId(node), tid);
                self.woken.insert(node);
            }
            // No row is written: the job's `cancelled` flag says it for every instance that had
            // not ended, and the job row's `finished_ns` (this cancel's time, set below by
            // `check_finished`) is their end (both read back so at a restart), so cancelling a
            // million-instance workflow writes one row, not a million. Its end is set as `cancel
            // --tasks` and a batch job's cancel set theirs: one that ran shows how long it ran.
            x.st = St::Cancelled;
            x.message = why.into();
            (x.reason, x.signal) = (Some(reason), None);
            x.finished_ns = cx.now;
            n += 1;
        }
        j.rerun.clear();
        j.blocked.clear();
        j.assigned.clear();
        let booked: Vec<u32> = j.booked.keys().copied().collect();
        for i in booked {
            Self::unbook(cx, &mut j, i);
        }
        self.check_finished(&mut j, cx.now);
        self.jobs.insert(seq, j);
        Ok(n)
    }
}
