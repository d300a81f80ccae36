//! The server's own request and reply types: what [`State`](super::State) and the job kinds
//! ([`crate::jobs`]) take and return. They carry the same facts as the protobuf messages of
//! `hetsched_proto` but belong to the server, so the wire format can change without touching a
//! scheduling rule and a rule can change without touching the wire. The conversions both ways are
//! in [`crate::convert`], the only module (with [`crate::service`]) that names protobuf types.

use hetsched_core::{Accelerator, Node};
use std::collections::BTreeMap;

/// An agent's registration, already checked against [`crate::limits`].
#[derive(Clone, Debug, PartialEq)]
pub struct Registration {
    /// The node's name (unique among live nodes).
    pub name: String,
    /// What the node offers (its id is set by the state).
    pub spec: Node,
    /// The agent's stable identity (from its work directory).
    pub identity: String,
    /// The agent's host name (empty: the node's name).
    pub hostname: String,
    /// The agent's work directory (absolute; empty from agents that do not say): where its
    /// tasks' captured output is, which listings name.
    pub work_dir: String,
    /// The agent's hetsched version (empty: an agent that predates saying it).
    pub version: String,
    /// The rack its agent names (`--rack`; empty: the default rack).
    pub rack: String,
}

/// The free space of an agent's work directory's filesystem, as its heartbeat reported it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DiskReport {
    /// Bytes an unprivileged process may still write there (`None`: not reported).
    pub free_bytes: Option<u64>,
    /// The agent's `min_free_disk` (0: no floor).
    pub min_free: u64,
}

/// What a registration is answered with.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Registered {
    /// The node's id: every heartbeat names it.
    pub node_id: u32,
    /// How often the agent should heartbeat while it has work.
    pub heartbeat_interval_ms: u64,
    /// How often it should heartbeat while it has nothing to report.
    pub idle_heartbeat_interval_ms: u64,
    /// Said to the agent (it logs it): the server kept the node's earlier description. Empty:
    /// the node is as the agent described it.
    pub note: String,
    /// A number of the heartbeat replies' sequence, taken for this registration: the agent
    /// names it as the last reply it read until it reads one ([`super::nodes::Nodes::read_up_to`]).
    pub reply_seq: u64,
}

/// One attempt of one task (acknowledgements, kills).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct TaskRef {
    /// The task (its kind is in the high byte: see [`crate::jobs::Kind`]).
    pub task_id: u64,
    /// The attempt (1 = the first dispatch).
    pub attempt: u32,
}

/// A task an agent says it runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RunningTask {
    /// The task.
    pub task_id: u64,
    /// The attempt the agent runs.
    pub attempt: u32,
    /// Bytes the task has read so far (its input split's progress).
    pub read_bytes: u64,
    /// The key of the spec the agent runs it by (`None`: not said).
    pub spec: Option<u64>,
    /// Still in the agent's queue, not started ([`crate::state::prefetch::Queued`]).
    pub queued: bool,
    /// When the agent started it (its clock, ns since the epoch; 0: queued or not said): a
    /// workflow instance's start is that of the fetch of its inputs.
    pub started_ns: u64,
    /// A workflow instance whose inputs its agent still fetches: its program has not started
    /// (false from agents that predate it: running, as before).
    pub fetching: bool,
    /// When its program started (the agent's clock; 0: not yet, or not said).
    pub program_started_ns: u64,
}

/// An attempt running now, and the node whose agent runs its command (a multi-node task's
/// first node): what `hetsched signal` reaches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RunningAttempt {
    /// The task.
    pub task_id: u64,
    /// Its attempt.
    pub attempt: u32,
    /// The node.
    pub node: u32,
    /// Non-zero: `task_id` is a chunk of this divisible job (and `attempt` 0).
    pub chunk_of: u64,
}

/// How one attempt of a task ended.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TaskResult {
    /// The task.
    pub task_id: u64,
    /// The attempt that ended.
    pub attempt: u32,
    /// The process's exit code (-1 when it did not exit by itself).
    pub exit_code: i32,
    /// What went wrong, if anything.
    pub message: String,
    /// When it started (agent's clock, ns since the epoch; 0 = unknown).
    pub started_ns: u64,
    /// When it ended.
    pub finished_ns: u64,
    /// Whether it succeeded.
    pub success: bool,
    /// Killed because its agent shut down (not the task's failure).
    pub interrupted: bool,
    /// The process could not be started (counts toward the node's back-off).
    pub start_failed: bool,
    /// What the attempt used, if its agent measured it.
    pub usage: Option<crate::store::TaskUsage>,
    /// A task an NNode offloaded (spec 01): when it started on its ANode (the ANode's clock;
    /// 0 = not said, by agents that predate it, or not offloaded).
    pub offload_started_ns: u64,
    /// And the ANode's devices it ran on (empty: not said).
    pub offload_devices: Vec<u32>,
    /// A workflow instance: how long its inputs took to fetch before its program started at
    /// `started_ns`, ms (0: none, or not said).
    pub fetch_ms: u64,
    /// Why it ended without success, as its agent said or as the edge inferred from an older
    /// agent's result (`None`: it succeeded, or not known). An interrupted attempt is lost
    /// whatever it says: the kinds record [`EndReason::Lost`] for it.
    ///
    /// [`EndReason::Lost`]: crate::store::EndReason::Lost
    pub reason: Option<crate::store::EndReason>,
    /// With reason `Signal`: the signal's name, if its agent sent one within bounds
    /// ([`crate::store::signal_name`]).
    pub signal: Option<Box<str>>,
}

/// One device's utilisation as an agent reports it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GpuUtilisation {
    /// Device index on the node.
    pub device: u32,
    /// Busy percentage.
    pub percent: u32,
}

/// One heartbeat from an agent.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct HeartbeatReport {
    /// The node the agent registered.
    pub node_id: u32,
    /// The agent's identity (only the agent that registered the node speaks for it).
    pub identity: String,
    /// What the agent runs now.
    pub running: Vec<RunningTask>,
    /// Attempts that ended since the last acknowledged heartbeat.
    pub results: Vec<TaskResult>,
    /// The node's disk read rate, bytes/s.
    pub read_bytes_per_sec: f64,
    /// Device utilisation.
    pub gpus: Vec<GpuUtilisation>,
    /// Memory the node has free.
    pub available_memory_bytes: u64,
    /// Free space on the agent's work directory's filesystem, and its floor for fetched
    /// workflow inputs (`min_free_disk`).
    pub disk: DiskReport,
    /// Keys of the task specs the agent holds (it need not be sent them again).
    pub known_specs: Vec<u64>,
    /// The agent is shutting down: no new work for it.
    pub draining: bool,
    /// Its rack and accelerator service (spec 01, [`crate::state::accel`]).
    pub accel: crate::state::accel::AccelReport,
    /// Where other agents reach this agent's `AgentData` service (`host:port`, "" = unknown).
    pub advertise: String,
    /// PCDDB messages from this node to a workflow's launch node.
    pub balance: Vec<BalanceEnvelope>,
    /// PCDDB messages the agent sent and received since it started.
    pub balance_sent: u64,
    /// See `balance_sent`.
    pub balance_received: u64,
    /// Instances its PCDDB machines hold.
    pub balance_held: u32,
    /// Measured round trips (ns) to other agents, by node id.
    pub rtt_ns: BTreeMap<u32, u64>,
    /// How long tasks may still run on the node (an agent with a `time_limit`); `None`: no end.
    pub time_left: Option<std::time::Duration>,
    /// The agent's last heartbeat before it exits on purpose, and why.
    pub leaving: Option<Leave>,
    /// The seqs of the [`TaskSignal`]s the agent handled since its last beat.
    pub signalled: Vec<u64>,
    /// The [`HeartbeatReply::seq`] of the last reply the agent read (0: unknown, an agent that
    /// predates it): what it reports running is judged only against the assignments it read.
    pub reply_seq: u64,
    /// The version of the PCDDB address book the agent holds (0: none): the reply carries the
    /// book (`PcddbJob::peers`) only when it is not the server's.
    pub peers_version: u64,
    /// The version of the PCDDB proximity clusters the agent holds (0: none): the reply
    /// carries the node's clusters (`PcddbJob::clusters`) only when it is not the server's.
    pub clusters_version: u64,
    /// The workflow jobs the agent holds outputs of (`holds_outputs_of`, at most
    /// `MAX_HELD_OUTPUT_JOBS`): the reply says which have not ended (`outputs_needed`).
    pub holds_outputs_of: Vec<u64>,
}

/// What every task of one spec key runs (sent to a node once, before its first task of it).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TaskSpec {
    /// The key assignments name (kind in the high byte, as task ids).
    pub key: u64,
    /// The job.
    pub job_id: u64,
    /// The application's name (the agent's output directory).
    pub app: String,
    /// `cpu` or `gpu`.
    pub variant: String,
    /// The command, with `{index}` for the task's index.
    pub argv: Vec<String>,
    /// The environment added to the agent's.
    pub env: BTreeMap<String, String>,
    /// The working directory.
    pub workdir: String,
    /// `workdir` is the application's own, which must exist on the node (else it is where
    /// the job was submitted, and a node without it runs the task in the agent's directory).
    pub workdir_required: bool,
    /// Time limit (0 = none).
    pub time_limit_ms: u64,
    /// Declared input and output files (relative to the task's directory, `{index}` allowed):
    /// an offloaded task ships them (spec 01).
    pub inputs: Vec<String>,
    /// See `inputs`.
    pub outputs: Vec<String>,
    /// `required`, `preferred` or `none`.
    pub accelerator: String,
    /// The variant's declared memory, bytes (0 = none): the agent stops a task whose processes
    /// hold more.
    pub memory_limit_bytes: u64,
    /// The variant's kill grace, ms (0 = the agent's).
    pub kill_grace_ms: u64,
    /// The variant's `signal` (empty: none) and how long before the time limit it is sent, ms.
    pub warn_signal: String,
    /// See `warn_signal`.
    pub warn_before_ms: u64,
    /// The application's `stdout` and `stderr` (empty = captured by the agent, `none` =
    /// discarded, else a path template: `hetsched_core::input::output_path`).
    pub stdout: String,
    /// See `stdout`.
    pub stderr: String,
    /// The application's `pin`: its tasks are bound to CPUs of their own.
    pub pin: bool,
    /// The job's owner, whose Unix account the tasks run as on agents started with
    /// `run_as_owner` (empty: the admin's job, run as the agent's account). Filled by the state
    /// ([`crate::users::Users::owner`]), not by the kinds.
    pub run_as: String,
    /// Its job's nonce ([`crate::job_nonces`]; filled by the state, 0 until then).
    pub job_nonce: u64,
}

/// One of a multi-node task's nodes, as its agent is told of it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DispatchNode {
    /// The node's name.
    pub name: String,
    /// Its host name (what an MPI launcher reaches).
    pub host: String,
    /// Its cores (its agent's `cores`).
    pub cores: u32,
}

/// One task handed to a node (the agent runs the spec `spec` with the task's index).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Dispatch {
    /// The task.
    pub task_id: u64,
    /// Its attempt number.
    pub attempt: u32,
    /// Its index within its application.
    pub index: u32,
    /// Devices it may use.
    pub devices: Vec<u32>,
    /// The key of its [`TaskSpec`].
    pub spec: u64,
    /// A workflow instance's directory, inputs and outputs (issue 13; None = a batch task).
    pub workflow: Option<InstanceData>,
    /// Cores it takes on the node (0 = not said: the agent starts it at once).
    pub cores: u32,
    /// Assigned beyond the node's free cores (`prefetch`): the agent queues it until cores free.
    pub prefetched: bool,
    /// Its entry (an application with `entries`).
    pub entry: Option<String>,
    /// A multi-node task's nodes, this one first (empty: one node).
    pub nodes: Vec<DispatchNode>,
    /// Its job.
    pub job_id: u64,
    /// Its job's nonce ([`crate::job_nonces`]; filled by the state, 0 until then).
    pub job_nonce: u64,
}

/// The answer to a heartbeat.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct HeartbeatReply {
    /// Results recorded (the agent may forget them).
    pub acked: Vec<TaskRef>,
    /// New work.
    pub assignments: Vec<Dispatch>,
    /// Attempts the node runs that it should not.
    pub kill: Vec<TaskRef>,
    /// The node is unknown or the caller is not its agent: register (again).
    pub reregister: bool,
    /// Specs the agent does not hold yet, for this reply's assignments.
    pub specs: Vec<TaskSpec>,
    /// The reply was capped: heartbeat again at once for the rest.
    pub more: bool,
    /// The node's accelerator binding (spec 01); `None` leaves the agent's as it is.
    pub binding: Option<crate::state::accel::NodeBinding>,
    /// The ANode each accelerator task of this reply is shipped to, by task id (spec 01), with
    /// the offload's ticket under that ANode's key ([`crate::tickets`]).
    pub offload_to: Vec<(u64, crate::state::accel::NodeBinding, Vec<u8>)>,
    /// To an ANode: its offload key of the current epoch ([`crate::tickets`]); empty for any
    /// other node.
    pub offload_key: Vec<u8>,
    /// To an ANode: its offload keys of the previous, current and next epochs, by epoch
    /// ([`crate::tickets::OffloadKeys::keys`]); empty for any other node.
    pub offload_keys: Vec<(u64, Vec<u8>)>,
    /// To every node: its data key ([`crate::tickets`]), which verifies the tickets of the
    /// fetches of its workflow outputs.
    pub data_key: Vec<u8>,
    /// PCDDB messages from a workflow's launch node to this node.
    pub balance: Vec<BalanceEnvelope>,
    /// The PCDDB workflows this node balances.
    pub pcddb: Vec<PcddbJob>,
    /// The server's purge epoch ([`crate::state::State::purged_jobs`]); 0: not told.
    pub purge_epoch: u64,
    /// Running or queued tasks whose spec changed after they were sent.
    pub respecs: Vec<Respec>,
    /// An operator asked the agent to stop (`hetsched node stop`): `Some(drain)`, where
    /// `drain` lets its running tasks end first; told at every beat until it leaves.
    pub stop: Option<bool>,
    /// Signals for tasks the node runs (`hetsched signal`), sent until the agent reports them
    /// handled.
    pub signals: Vec<TaskSignal>,
    /// Running multi-node tasks the node is a member of without running their command (their
    /// first node runs it): its agent counts them as its work (idle timeout, `--drain`), since
    /// leaving would lose them.
    pub member_of: Vec<TaskRef>,
    /// The node is held whole for a multi-node task still being gathered: its agent counts it
    /// as work for its idle timeout (`HeartbeatReply.gathering`).
    pub gathering: bool,
    /// Of the workflow jobs the agent holds outputs of, those that have not ended: its agent
    /// counts them as work for its idle timeout (`HeartbeatReply.outputs_needed`).
    pub outputs_needed: Vec<u64>,
    /// This reply's number ([`super::nodes::Nodes::next_reply_seq`]), which the agent's next
    /// beat sends back once read ([`HeartbeatReport::reply_seq`]).
    pub seq: u64,
}

/// What `hetsched signal` reached: running task attempts, and a divisible job's chunks out to
/// agents.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Signalled {
    /// Running attempts the signal goes to.
    pub tasks: u64,
    /// Chunks out to agents the signal goes to.
    pub chunks: u64,
}

/// A signal for one running attempt (`hetsched signal`, [`crate::state::signals`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TaskSignal {
    /// The task.
    pub task_id: u64,
    /// The attempt the signal is for: a later attempt does not get it.
    pub attempt: u32,
    /// The signal's name without `SIG` (one of `hetsched_core::input::TASK_SIGNALS`).
    pub signal: &'static str,
    /// Unique across server restarts: an agent delivers a seq once.
    pub seq: u64,
    /// Non-zero: `task_id` is a chunk of this divisible job.
    pub chunk_of: u64,
}

/// A running or queued task's new spec (`hetsched update --time-limit`): its agent applies the
/// spec's time limit, counted from the task's start.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Respec {
    /// The task.
    pub task_id: u64,
    /// The attempt the agent runs.
    pub attempt: u32,
    /// The key of the spec it now runs by.
    pub spec: u64,
}

/// A job submission.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Submission {
    /// Where the file came from (error messages name it).
    pub origin: String,
    /// The job file's text.
    pub text: String,
    /// The client's working directory.
    pub workdir: String,
    /// The client's submission key (empty = none): a retry with it returns the stored job.
    /// Keys are a namespace per owner: the same key from another owner is another job's.
    pub key: String,
    /// Who submits it (a user's name, or [`crate::users::ADMIN`]): the namespace of `key`.
    /// Set by the state from the caller ([`crate::state::State::on_submit_as`]), never by a
    /// client.
    pub owner: String,
    /// A name given at submission (empty = none).
    pub name: String,
    /// The input of a divisible job (`[[divisible]]` with `input`; empty otherwise).
    pub divisible_input: Vec<u8>,
    /// Batch jobs this one runs after once each completed (`submit --after`; empty = none).
    pub after: Vec<u64>,
    /// Batch jobs this one runs after once each ended, however (`submit --after-any`).
    pub after_any: Vec<u64>,
    /// Batch jobs this one runs after once each ended failed or cancelled (`--after-notok`).
    pub after_notok: Vec<u64>,
    /// Batch jobs whose tasks this job's tasks run after, index by index (`--after-corr`).
    pub after_corr: Vec<u64>,
    /// Batch jobs this one runs after once each started or ended (`--after-start`).
    pub after_start: Vec<u64>,
    /// Runs after every unfinished job of its name has ended (`--singleton`, Slurm's
    /// `--dependency=singleton`): the state adds those jobs to `after_any`.
    pub singleton: bool,
    /// Submitted held (`submit --hold`): no task is dispatched until `release`.
    pub hold: bool,
    /// When its tasks may start (`submit --begin`), ms since the Unix epoch (`None`: at once).
    pub begin_ms: Option<u64>,
    /// The highest priority its owner may give its work (`hetsched user limit --max-priority`;
    /// set by the state from the owner, never by a client).
    pub max_priority: Option<i32>,
    /// Its owner's caps on what its running work holds (`hetsched user limit --max-cores
    /// --max-memory --max-gpus`; 0 in a dimension, and the admin's: none): a task that needs
    /// more than a cap alone would never start, so the kinds refuse it. Set by the state from
    /// the owner, never by a client.
    pub cap: hetsched_core::Resources,
    /// How many more unfinished tasks its owner may have (`max_unfinished_tasks_per_user` less
    /// those it has; `None`: the admin's, no bound). Set by the state, never by a client.
    pub task_room: Option<TaskRoom>,
}

/// What a user's submission may still add to its unfinished tasks (`Submission::task_room`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TaskRoom {
    /// The owner.
    pub user: String,
    /// Its unfinished tasks now.
    pub unfinished: u64,
    /// The server's `max_unfinished_tasks_per_user`.
    pub cap: u64,
    /// The bytes its stored jobs' and topologies' submissions hold now (their files, divisible
    /// jobs' inputs; purged ones not counted).
    pub stored_bytes: u64,
    /// The bytes this submission stores (set by the state from it; 0: none new, as a
    /// `resubmit`'s).
    pub adding_bytes: u64,
    /// The server's `max_stored_bytes_per_user`.
    pub bytes_cap: u64,
    /// The tasks its stored jobs keep, finished ones too (purged ones not counted).
    pub stored_tasks: u64,
    /// The server's `max_stored_tasks_per_user`.
    pub stored_tasks_cap: u64,
}

impl TaskRoom {
    /// Refuses `tasks` more (of a job from `origin`) when they would pass the cap.
    pub fn check(&self, origin: &str, tasks: u64) -> Result<(), String> {
        self.check_as(tasks, tasks, || {
            format!("{origin}: the job has {tasks} tasks")
        })
    }

    /// Refuses a divisible job from `origin`: an unfinished one counts as one task (one stored
    /// job with its input, whatever its units).
    pub fn check_divisible(&self, origin: &str) -> Result<(), String> {
        self.check_as(1, 1, || {
            format!("{origin}: the divisible job counts as 1 task")
        })
    }

    /// Refuses a topology from `origin` of `executors` executors: a running one counts its
    /// executors as tasks.
    pub fn check_topology(&self, origin: &str, executors: u64) -> Result<(), String> {
        // Executors are no stored task rows.
        self.check_as(executors, 0, || {
            format!(
                "{origin}: the topology has {}",
                hetsched_core::text::count(executors, "executor")
            )
        })
    }

    /// Refuses `resubmit JOB` bringing `tasks` ended tasks of job `job` back to pending when
    /// they would pass the cap: they are unfinished again, as a submission's are.
    pub fn check_resubmit(&self, job: u64, tasks: u64) -> Result<(), String> {
        // Stored already: no new rows.
        self.check_as(tasks, 0, || {
            format!("resubmit job {job}: {tasks} tasks would run again")
        })
    }

    /// Refuses `tasks` more unfinished ones, the message starting with what `said` says they
    /// are; a submission storing `rows` more tasks that would take the owner's stored tasks
    /// above their cap; and one whose bytes would take its stored bytes above theirs.
    fn check_as(&self, tasks: u64, rows: u64, said: impl FnOnce() -> String) -> Result<(), String> {
        if self.unfinished.saturating_add(tasks) <= self.cap {
            if rows > 0 && self.stored_tasks.saturating_add(rows) > self.stored_tasks_cap {
                return Err(format!(
                    "{}, and user `{}`'s jobs keep {} stored (finished ones too, until \
                     purged): together above the {} tasks a user's jobs may keep stored (the \
                     server's `max_stored_tasks_per_user`); purge finished jobs (`hetsched \
                     purge --older-than 1d`, `--keep N` or job ids)",
                    said(),
                    self.user,
                    hetsched_core::text::count(self.stored_tasks, "task"),
                    self.stored_tasks_cap
                ));
            }
            return self.check_bytes(said);
        }
        Err(format!(
            "{}, and user `{}` has {} unfinished: together above the {} unfinished tasks a \
             user may have at once (the server's `max_unfinished_tasks_per_user`); wait for \
             some to end, or cancel some",
            said(),
            self.user,
            self.unfinished,
            self.cap
        ))
    }
}

impl TaskRoom {
    /// Refuses a submission of [`TaskRoom::adding_bytes`] that would take the owner's stored
    /// bytes above [`TaskRoom::bytes_cap`]. Each request is bounded by the gRPC message size (4
    /// MiB) and its file by 2 MiB, but not how many a user keeps stored.
    fn check_bytes(&self, said: impl FnOnce() -> String) -> Result<(), String> {
        if self.adding_bytes == 0
            || self.stored_bytes.saturating_add(self.adding_bytes) <= self.bytes_cap
        {
            return Ok(());
        }
        Err(format!(
            "{} and stores {} bytes (its file and input), and user `{}`'s jobs and topologies \
             store {} bytes already: together above the {} bytes a user's may store (the \
             server's `max_stored_bytes_per_user`); purge some (`hetsched purge`, `hetsched \
             topology purge`)",
            said(),
            self.adding_bytes,
            self.user,
            self.stored_bytes,
            self.bytes_cap
        ))
    }
}

/// What a submission is answered with.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Submitted {
    /// The job's id.
    pub job_id: u64,
    /// How many tasks it has (a divisible job: its units).
    pub tasks: u64,
    /// The key named a job already stored: nothing new was stored.
    pub existing: bool,
    /// What kind of job it is.
    pub kind: crate::jobs::Kind,
}

/// Tasks by state.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TaskCounts {
    /// Waiting to run.
    pub pending: u64,
    /// Dispatched, not finished.
    pub running: u64,
    /// Succeeded.
    pub succeeded: u64,
    /// Failed for good.
    pub failed: u64,
    /// Cancelled.
    pub cancelled: u64,
    /// Of the running: how many wait in their agent's queue (prefetch), not started yet.
    pub queued: u64,
    /// Of the running: how many workflow instances still fetch their inputs, their program
    /// not started yet.
    pub fetching: u64,
}

impl TaskCounts {
    /// Adds `o` to these counts.
    pub fn add(&mut self, o: &TaskCounts) {
        self.pending += o.pending;
        self.running += o.running;
        self.succeeded += o.succeeded;
        self.failed += o.failed;
        self.cancelled += o.cancelled;
        self.queued += o.queued;
        self.fetching += o.fetching;
    }
}

/// One application of a job, as listings show it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct AppInfo {
    /// Its id.
    pub id: u32,
    /// Its name.
    pub name: String,
    /// How many tasks it has.
    pub tasks: u64,
    /// Its tasks by state.
    pub counts: TaskCounts,
    /// Mean observed run time of the CPU variant's successes (0 = none yet).
    pub mean_cpu_ms: f64,
    /// Same for the GPU variant.
    pub mean_gpu_ms: f64,
    /// Whether it has a CPU variant.
    pub has_cpu: bool,
    /// Whether it has a GPU variant.
    pub has_gpu: bool,
    /// Workflow tasks: instances ready and waiting for a node.
    pub ready: u64,
    /// Its tasks' latest finished attempts' CPU time, summed (ms; 0 = none measured).
    pub cpu_ms: u64,
    /// The largest peak resident memory among them (bytes).
    pub max_rss_bytes: u64,
    /// The largest peak GPU memory among them (bytes; 0 = none measured).
    pub max_gpu_memory_bytes: u64,
    /// The node attributes its tasks require.
    pub requires: Vec<String>,
    /// The most of its tasks that may run at once (0: no limit).
    pub max_running: u32,
    /// Its `stdout =` and `stderr =` (empty: captured by the agents).
    pub streams: [String; 2],
    /// Its `pin`.
    pub pin: bool,
    /// Whole nodes each task holds (`nodes`; 1: an ordinary task; 0: not a batch application).
    pub nodes: u32,
    /// Its scheduling priority (0 for applications of other kinds).
    pub priority: i32,
    /// Its CPU and GPU variants' time limit of one task, ms (0: none, no such variant, or not
    /// a batch application).
    pub time_limit_ms: [u64; 2],
    /// What one task of its CPU and GPU variants holds, (cores, memory bytes) (`None`: no such
    /// variant, or not a batch application).
    pub requests: [Option<hetsched_core::Resources>; 2],
    /// The accelerator kind its GPU variant's tasks take (`None`: any, no GPU variant, or not a
    /// batch application).
    pub gpu_kind: Option<String>,
}

/// One job, as listings show it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct JobInfo {
    /// Its id.
    pub id: u64,
    /// Its kind (batch, divisible, workflow).
    pub kind: crate::jobs::Kind,
    /// Its name.
    pub name: String,
    /// `pending`, `running`, `completed`, `failed` or `cancelled`.
    pub state: String,
    /// How many tasks it has.
    pub tasks: u64,
    /// Its tasks by state.
    pub counts: TaskCounts,
    /// When it was submitted (ns since the epoch).
    pub submitted_ns: u64,
    /// When its last task ended (0 while it runs).
    pub finished_ns: u64,
    /// Its applications (only for a single job's view).
    pub apps: Vec<AppInfo>,
    /// A divisible job's load, rounds, chunks and measured workers (other kinds: `None`).
    pub divisible: Option<Box<crate::jobs::divisible::DivisibleInfo>>,
    /// A workflow: the balancer, and the messages its launch node (or dispatcher) sent and
    /// received.
    pub balancer: String,
    /// See `balancer`.
    pub launch_sent: u64,
    /// See `balancer`.
    pub launch_received: u64,
    /// The jobs it runs after once they completed (`submit --after`).
    pub after: Vec<u64>,
    /// The jobs it runs after once they ended, however (`submit --after-any`).
    pub after_any: Vec<u64>,
    /// The jobs it runs after once they failed or were cancelled (`submit --after-notok`).
    pub after_notok: Vec<u64>,
    /// The jobs whose tasks its tasks run after, index by index (`submit --after-corr`).
    pub after_corr: Vec<u64>,
    /// The jobs it runs after once they started (`submit --after-start`).
    pub after_start: Vec<u64>,
    /// Held by `hetsched hold` (until `release`).
    pub held: bool,
    /// The user who submitted it ([`crate::users::ADMIN`] for the admin); set by the state.
    pub owner: String,
    /// Whether it still waits for one of them.
    pub waiting: bool,
    /// Its tasks' CPU time, summed over their latest finished attempts (ms; 0 = none measured).
    pub cpu_ms: u64,
    /// The largest peak resident memory among them (bytes).
    pub max_rss_bytes: u64,
    /// The largest peak GPU memory among them (bytes; 0 = none measured).
    pub max_gpu_memory_bytes: u64,
    /// Why its pending tasks are not running (batch jobs; empty when none is pending):
    /// `held: …`, `waiting for job M`, `no live node can run …`, `resources`, …
    pub pending_reason: String,
    /// The reason is that no node can run it now (none has what it needs, or each that has is
    /// drained): it waits for an operator, not for time.
    pub blocked: bool,
    /// When its tasks may start (`submit --begin`, `update --begin`), ms since the Unix epoch
    /// (`None`: none given); kept after that time has come.
    pub begin_ms: Option<u64>,
    /// Its begin time has not come yet: its pending tasks wait for it.
    pub deferred: bool,
    /// How many of its tasks were stopped (cancelled while they ran) and whose processes may
    /// still run — a SIGTERM handler, for at most the kill grace — as far as their agents
    /// said (batch jobs, workflows and divisible jobs — a divisible job's chunks out when it was
    /// cancelled; 0 for other kinds): a wait on it returns only once this is 0.
    pub stopping: u32,
}

/// One page of jobs.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct JobsPage {
    /// The jobs.
    pub jobs: Vec<JobInfo>,
    /// Where the next page starts (0 = this was the last).
    pub next_cursor: u64,
}

/// One task, as listings show it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TaskInfo {
    /// Its id.
    pub id: u64,
    /// Its job.
    pub job_id: u64,
    /// Its application's name.
    pub app: String,
    /// Its index in the application.
    pub index: u32,
    /// Its state's name.
    pub state: String,
    /// Its last attempt.
    pub attempt: u32,
    /// The node of its last attempt ("" = none).
    pub node: String,
    /// The variant of its last attempt ("" = none).
    pub variant: String,
    /// Devices of its last attempt.
    pub devices: Vec<u32>,
    /// When its last attempt started.
    pub started_ns: u64,
    /// When it ended.
    pub finished_ns: u64,
    /// Exit code (-1 = none).
    pub exit_code: i32,
    /// Why it is in its state.
    pub message: String,
    /// Failed attempts retried.
    pub failed_attempts: u32,
    /// Attempts preempted and re-queued.
    pub preemptions: u32,
    /// Running on its node but still in its agent's queue, not started (`prefetch`): its
    /// `started_ns` is its dispatch ([`crate::state::prefetch::Queued`]).
    pub queued: bool,
    /// The node that ran the latest attempt: the ANode of an offloaded task, else `node`.
    pub executed_node: String,
    /// What the latest finished attempt used, if measured.
    pub usage: Option<crate::store::TaskUsage>,
    /// A multi-node task's nodes in its latest attempt, `node` first (empty otherwise).
    pub nodes: Vec<String>,
    /// A multi-process workflow instance's rank among its value's processes, from 1 (0: none).
    pub process: u32,
    /// A running workflow instance whose agent still fetches its inputs: its program has not
    /// started, and `started_ns` is its dispatch.
    pub fetching: bool,
    /// A workflow instance's latest attempt: how long its inputs took to fetch before its
    /// program started at `started_ns`, ms (0: none, or not known yet).
    pub fetch_ms: u64,
    /// Why its latest attempt ended without success, or why it ended without running
    /// ([`crate::store::EndReason`]; `None`: it never ran, runs, succeeded, or not known).
    pub reason: Option<crate::store::EndReason>,
    /// With reason `Signal`: the signal's name, when known.
    pub signal: Option<Box<str>>,
}

/// One page of tasks.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TasksPage {
    /// The tasks.
    pub tasks: Vec<TaskInfo>,
    /// Where the next page starts (0 = this was the last).
    pub next_cursor: u64,
    /// How many ids the whole listing covers.
    pub total: u64,
}

/// An application kept off a node by the start-failure back-off.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BackedOffApp {
    /// The application's name.
    pub app: String,
    /// Its job.
    pub job_id: u64,
    /// Consecutive start failures.
    pub failures: u32,
    /// How long it stays off the node.
    pub remaining_ms: u64,
}

/// One node, as listings show it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NodeInfo {
    /// Its id.
    pub id: u32,
    /// Its name.
    pub name: String,
    /// Heartbeating (a node restored from the store is shown dead until it heartbeats).
    pub alive: bool,
    /// Cores.
    pub cores: u32,
    /// Cores no task holds.
    pub free_cores: u32,
    /// Memory.
    pub memory_bytes: u64,
    /// Accelerators.
    pub accelerators: Vec<Accelerator>,
    /// Accelerators no task holds.
    pub free_gpus: u32,
    /// Tasks dispatched there and not finished.
    pub running: u32,
    /// Of those, the ones its agent still holds in its queue, not started (`prefetch`).
    pub queued: u32,
    /// Since its last heartbeat.
    pub last_seen_ms: u64,
    /// When it was last heard from (registration, heartbeat, an agent's call), Unix ms; 0:
    /// unknown (never heard, or dead before a server that kept it).
    pub last_heard_ms: u64,
    /// Disk read rate it reported.
    pub read_bytes_per_sec: f64,
    /// Device utilisation it reported.
    pub gpus: Vec<GpuUtilisation>,
    /// Memory it reported free.
    pub available_memory_bytes: u64,
    /// Free space on its work directory's disk, and its agent's floor, as it reported them.
    pub disk: DiskReport,
    /// Drained by an operator.
    pub drained: bool,
    /// Why and since when, if drained.
    pub drain_note: crate::store::DrainNote,
    /// An operator asked its agent to stop, and it has not left yet.
    pub stopping: bool,
    /// Its agent is shutting down.
    pub draining: bool,
    /// Applications kept off it.
    pub backed_off: Vec<BackedOffApp>,
    /// Why its stored description was past a registration bound at the server's start (the
    /// field, its value and the bound): it takes no work until its agent registers again;
    /// empty: none.
    pub out_of_bounds: String,
    /// Its rack.
    pub rack: String,
    /// `anode` or `nnode` (spec 01).
    pub role: String,
    /// The ANode an NNode is bound to (empty: unbound, or an ANode).
    pub bound_to: String,
    /// Its accelerator service's devices and queues, from its last heartbeat.
    pub accel: Option<crate::state::accel::AccelState>,
    /// `binding = "container"`: the ANode of each of its containers ("" = unbound).
    pub containers: Vec<String>,
    /// Its attributes, `gpu` included with accelerators.
    pub attributes: Vec<String>,
    /// Workflow instances running there.
    pub instances: u32,
    /// PCDDB thresholds of the node (LT × cores, MT × cores; 0 = none).
    pub lt: u32,
    /// See `lt`.
    pub mt: u32,
    /// The proximity clusters it belongs to.
    pub clusters: String,
    /// PCDDB messages its agent sent.
    pub balance_sent: u64,
    /// PCDDB messages its agent received.
    pub balance_received: u64,
    /// How long tasks may still run there (its agent's `time_limit`), in ms; `None`: no end.
    pub time_left_ms: Option<u64>,
    /// A node restored from the store whose agent has not come back since the restart but may
    /// still: ms before it is declared dead; `None`: not waited for.
    pub returning_ms: Option<u64>,
    /// Why its agent left on purpose (then not alive); `None`: it did not.
    pub left: Option<Leave>,
    /// The multi-node task it is held for, running or gathering its nodes (empty: none).
    pub held_for: String,
    /// Its agent's hetsched version, as it last registered (empty: unknown).
    pub version: String,
}

/// Why an agent left on purpose: its last heartbeat says so, and the server records that its
/// node left instead of waiting to declare it dead.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Leave {
    /// A SIGTERM or SIGINT (an operator, a batch system ending its job).
    Signal,
    /// Its `time_limit` ran out.
    TimeLimit,
    /// Nothing ran there for its `idle_timeout`.
    IdleTimeout,
    /// An operator asked it to stop (`hetsched node stop`).
    Operator,
}

impl Leave {
    /// Every reason.
    pub const ALL: [Leave; 4] = [
        Leave::Signal,
        Leave::TimeLimit,
        Leave::IdleTimeout,
        Leave::Operator,
    ];

    /// As heartbeats and listings write it.
    pub fn as_str(self) -> &'static str {
        match self {
            Leave::Signal => "signal",
            Leave::TimeLimit => "time-limit",
            Leave::IdleTimeout => "idle-timeout",
            Leave::Operator => "operator",
        }
    }

    /// As the store keeps it ([`crate::store::Store::put_left`]).
    pub fn code(self) -> i64 {
        match self {
            Leave::Signal => 1,
            Leave::TimeLimit => 2,
            Leave::IdleTimeout => 3,
            Leave::Operator => 4,
        }
    }

    /// From [`Leave::code`].
    pub fn from_code(code: i64) -> Option<Leave> {
        Leave::ALL.into_iter().find(|l| l.code() == code)
    }

    /// From [`Leave::as_str`]; `None` for anything else.
    pub fn parse(s: &str) -> Option<Leave> {
        Leave::ALL.into_iter().find(|l| l.as_str() == s)
    }
}

/// Which finished jobs a purge deletes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PurgeSelection {
    /// These jobs (each must be finished).
    pub job_ids: Vec<u64>,
    /// Every job finished at least this long ago.
    pub older_than_ms: Option<u64>,
    /// Every finished job but the `keep` most recently finished.
    pub keep: Option<u64>,
    /// Only this user's jobs count for `older_than` and `keep` (a user's purge; `None`: every
    /// job, the admin's and the `[retention]` rule's).
    pub owner: Option<String>,
}

/// What a purge deleted.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Purged {
    /// The jobs.
    pub purged: Vec<u64>,
    /// Their tasks.
    pub tasks: u64,
    /// The jobs named by id that were purged before: nothing to do.
    pub already_purged: Vec<u64>,
}

/// What draining or resuming a node answers.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Drained {
    /// The node's id.
    pub node_id: u32,
    /// Tasks still running there.
    pub running: u32,
    /// Stream topology workers placed there, which the controller's next pass moves off (a
    /// drain) — those of a topology no other node may run stay.
    pub stream_workers: u32,
    /// Divisible-load chunks out there, which finish and count.
    pub chunks: u32,
    /// Whether an operator had drained the node before the call (`hetsched node drain`).
    pub was_drained: bool,
    /// The drain's reason as kept after the call (a drain of a drained node without a reason
    /// keeps the operator's); empty: none, or not drained.
    pub reason: String,
}

/// One consumed output a workflow instance fetches before it starts (issue 13).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WorkflowInput {
    /// The data item (`{input:NAME}`).
    pub name: String,
    /// The producer's node.
    pub node_id: u32,
    /// Its agent's `AgentData` address.
    pub address: String,
    /// The file there, relative to its work directory.
    pub path: String,
    /// The server's ticket for this fetch under the producer's data key ([`crate::tickets`]):
    /// empty as a kind makes the dispatch, signed by the state before the reply goes out.
    pub ticket: Vec<u8>,
}

/// What a workflow instance needs beyond a batch task.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct InstanceData {
    /// Its directory under the agent's `wf/`.
    pub dir: String,
    /// Inputs to fetch first.
    pub inputs: Vec<WorkflowInput>,
    /// Outputs it writes (`{output:NAME}`).
    pub outputs: Vec<String>,
    /// Its rank among the processes of its argument value, from 1 (0: a single-process task).
    pub process: u32,
}

/// A PCDDB message of workflow `job_id`: the core's `Message` as JSON.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BalanceEnvelope {
    /// The workflow.
    pub job_id: u64,
    /// `hetsched_core::policy::graph::Message` as JSON.
    pub message_json: String,
    /// Node id → `AgentData` address of the nodes its journey needs (a request's underloaded
    /// table).
    pub peers: BTreeMap<u32, String>,
    /// The launch node's grant of the allocation request it carries (`None`: not a request
    /// of the launch node's, or a message from an agent).
    pub grant: Option<Granted>,
}

/// The grant of an allocation request the launch node sends ([`crate::tickets`]): what it
/// covers, as the kind that makes the request knows it, and the signature, which the state adds
/// before the reply goes out (the kinds hold no keys).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Granted {
    /// When the launch node was built.
    pub epoch: u64,
    /// The grant's number among the workflow's.
    pub serial: u64,
    /// The request's launch node, cluster and send time.
    pub launch: u32,
    /// See `launch`.
    pub cluster: u32,
    /// See `launch`.
    pub sent_at: u64,
    /// The instances granted, ascending.
    pub instances: Vec<u32>,
    /// Their requirements, in the same order.
    pub requires: Vec<u64>,
    /// The underloaded table the request was sent with, in order (node ids).
    pub table: Vec<u32>,
    /// The Ed25519 signature under the workflow's balancing key (empty until signed).
    pub signature: Vec<u8>,
}

/// A PCDDB workflow a node balances.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PcddbJob {
    /// The workflow.
    pub job_id: u64,
    /// Lower threshold per core.
    pub lt: u32,
    /// Upper threshold per core.
    pub mt: u32,
    /// The launch node's id in the messages.
    pub launch: u32,
    /// Task id of instance 0.
    pub task_base: u64,
    /// When the launch node was (re)built.
    pub epoch: u64,
    /// Node id → `AgentData` address: the server's whole address book, or empty when the
    /// agent reported holding `peers_version` already.
    pub peers: BTreeMap<u32, String>,
    /// The version of the server's address book (never 0).
    pub peers_version: u64,
    /// The proximity clusters the node is in, or empty when the agent reported holding
    /// `clusters_version` already.
    pub clusters: Vec<u32>,
    /// The version of the server's proximity clusters (never 0).
    pub clusters_version: u64,
    /// The node's attribute mask.
    pub attributes: u64,
    /// How often the node checks itself against LT, ms.
    pub check_interval_ms: u64,
    /// Instances the node's machine took that will not run: it forgets them.
    pub dropped: Vec<u32>,
    /// The public half of the workflow's balancing key (the state adds it before the reply
    /// goes out).
    pub balance_key: Vec<u8>,
    /// Cores on the node other work holds in the server's view at this reply (batch tasks,
    /// stream workers, other workflows): the machine counts them as its node's load.
    pub foreign_cores: u32,
}

/// The task states a listing keeps (`hetsched tasks --state`; empty: every state).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StateFilter {
    names: Vec<String>,
    /// The batch task states among them (what the store's query keeps).
    batch: Vec<crate::store::TaskState>,
}

impl StateFilter {
    /// Every state a task, workflow instance or divisible chunk is listed in.
    pub const NAMES: &'static [&'static str] = &[
        "pending",
        "waiting",
        "ready",
        "running",
        "out",
        "succeeded",
        "done",
        "failed",
        "lost",
        "cancelled",
    ];

    /// The filter of a request's `states`: each must be one of [`StateFilter::NAMES`]; at most
    /// 16 (repeats count once).
    pub fn parse(states: &[String]) -> Result<Self, super::StateError> {
        if states.len() > 16 {
            return Err(super::StateError::Invalid(format!(
                "{} task states asked for; at most 16",
                states.len()
            )));
        }
        let mut f = StateFilter::default();
        for s in states {
            if !Self::NAMES.contains(&s.as_str()) {
                return Err(super::StateError::Invalid(format!(
                    "unknown task state `{}`: one of {}",
                    hetsched_core::text::clip(s),
                    Self::NAMES.join(", ")
                )));
            }
            if !f.names.contains(s) {
                f.names.push(s.clone());
                f.batch.extend(crate::store::TaskState::from_name(s));
            }
        }
        Ok(f)
    }

    /// Whether it keeps every state.
    pub fn is_all(&self) -> bool {
        self.names.is_empty()
    }

    /// Whether a task in state `state` is listed. `pending` also keeps a workflow's `waiting`
    /// and `ready` instances: `hetsched jobs` counts them as its pending ones, and `tasks
    /// --state pending` listed none of them.
    pub fn admits(&self, state: &str) -> bool {
        self.is_all()
            || self
                .names
                .iter()
                .any(|n| n == state || (n == "pending" && matches!(state, "waiting" | "ready")))
    }

    /// The batch states it keeps (empty with [`StateFilter::is_all`]).
    pub fn batch(&self) -> &[crate::store::TaskState] {
        &self.batch
    }
}

/// What `hetsched resubmit` did ([`super::State::on_resubmit_told`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Resubmitted {
    /// Tasks queued again.
    pub tasks: u64,
    /// Tasks put back and cancelled again at once (they run `--after-corr` a task still failed
    /// or cancelled): not in `tasks`.
    pub cancelled_again: u64,
    /// Why the first of them was (its task message).
    pub why: String,
}

#[cfg(test)]
mod tests {
    use super::StateFilter;

    /// `hetsched jobs` counts a workflow's waiting and ready instances as its pending ones, so
    /// `tasks --state pending` lists them; `--state ready` still keeps the ready ones only.
    #[test]
    fn pending_keeps_a_workflows_waiting_and_ready_instances() {
        let pending = StateFilter::parse(&["pending".into()]).expect("filter");
        for state in ["pending", "waiting", "ready"] {
            assert!(pending.admits(state), "{state}");
        }
        for state in [
            "running",
            "succeeded",
            "failed",
            "cancelled",
            "out",
            "done",
            "lost",
        ] {
            assert!(!pending.admits(state), "{state}");
        }
        let ready = StateFilter::parse(&["ready".into()]).expect("filter");
        assert!(ready.admits("ready") && !ready.admits("waiting") && !ready.admits("pending"));
    }
}
