//! The protobuf edge: conversions between `hetsched_proto`'s messages and the server's own types
//! ([`crate::state::types`]), and [`Wire`], the state's API in protobuf terms that the gRPC
//! service, the dashboard, the metrics and tests call. Nothing inside [`crate::state`] or
//! [`crate::jobs`] names a protobuf type; the wire format is defined here and in
//! `crates/proto` only.
//!
//! A registration is checked here ([`crate::limits`]): the state receives a node description
//! that is already within bounds.

use crate::state::types::{
    AppInfo, BackedOffApp, Dispatch, Drained, GpuUtilisation, HeartbeatReply, HeartbeatReport,
    JobInfo, JobsPage, NodeInfo, PurgeSelection, Purged, Registered, Registration, RunningTask,
    Submission, Submitted, TaskCounts, TaskInfo, TaskRef, TaskResult, TaskSpec, TasksPage,
};
use crate::state::{State, StateError};
use hetsched_proto as pb;
use prost::Message;

// ------------------------------------------------------------------- wire → server

/// Checks a registration's figures and identity and turns it into a [`Registration`].
pub fn registration(req: &pb::RegisterRequest) -> Result<Registration, StateError> {
    let spec = crate::limits::node_spec(req).map_err(StateError::Invalid)?;
    crate::limits::identity(&req.identity).map_err(StateError::Invalid)?;
    crate::limits::hostname(&req.hostname).map_err(StateError::Invalid)?;
    crate::limits::rack(&req.rack).map_err(StateError::Invalid)?;
    crate::limits::version(&req.version).map_err(StateError::Invalid)?;
    crate::limits::workdir("the agent's work directory", &req.work_dir)
        .map_err(StateError::Invalid)?;
    Ok(Registration {
        name: req.name.clone(),
        spec,
        identity: req.identity.clone(),
        hostname: req.hostname.clone(),
        work_dir: req.work_dir.clone(),
        version: req.version.clone(),
        rack: req.rack.clone(),
    })
}

/// Why the attempt `t` reports ended without success (`None`: it succeeded, or nothing can be
/// said). An agent says how it ended (`TaskResult.end`); one that predates saying it
/// (`TASK_END_UNSAID`) is read for what it does say: a failure to start, an interrupted
/// attempt (lost), or an exit code of its own (exited). A signal and a limit are then not known.
/// A kill the server asked for (`TASK_END_KILLED`) reads as a cancel: the server asks one only
/// of an attempt it no longer runs (cancelled, preempted, lost), and records its own reason for
/// those when it stops expecting them.
fn end_reason(t: &pb::TaskResult) -> Option<crate::store::EndReason> {
    use crate::store::EndReason as R;
    if t.success {
        return None;
    }
    match t.end() {
        pb::TaskEnd::Unsaid if t.start_failed => Some(R::StartFailed),
        pb::TaskEnd::Unsaid if t.interrupted => Some(R::Lost),
        pb::TaskEnd::Unsaid if t.exit_code >= 0 => Some(R::Exited),
        pb::TaskEnd::Unsaid => None,
        said => said_end(said),
    }
}

/// The reason an agent's own word on how a task or chunk ended names (`None` for `Unsaid`,
/// which each caller reads from what else its result holds). A kill the server asked for reads
/// as a cancel.
fn said_end(end: pb::TaskEnd) -> Option<crate::store::EndReason> {
    use crate::store::EndReason as R;
    match end {
        pb::TaskEnd::Exited => Some(R::Exited),
        pb::TaskEnd::Signalled => Some(R::Signal),
        pb::TaskEnd::TimeLimit => Some(R::TimeLimit),
        pb::TaskEnd::MemoryLimit => Some(R::MemoryLimit),
        pb::TaskEnd::StartFailed => Some(R::StartFailed),
        pb::TaskEnd::OutputsMissing => Some(R::OutputsMissing),
        pb::TaskEnd::Killed => Some(R::Cancelled),
        pb::TaskEnd::Interrupted => Some(R::Lost),
        pb::TaskEnd::Unsaid => None,
    }
}

/// Why the chunk `h` reports failed, in a task's words (`None`: it succeeded, or nothing can be
/// said). An agent says how its command ended (`ChunkResultHeader.end`); one that predates
/// saying it is read for its exit code, as a task's: 126 and 127 could not start, another code
/// of its own exited. A kill the server asked for reads as a cancel (it asks one only of a
/// chunk it no longer expects, whose result it ignores).
pub(crate) fn chunk_end_reason(h: &pb::ChunkResultHeader) -> Option<crate::store::EndReason> {
    use crate::store::EndReason as R;
    if h.success {
        return None;
    }
    match h.end() {
        pb::TaskEnd::Unsaid if matches!(h.exit_code, 126 | 127) => Some(R::StartFailed),
        pb::TaskEnd::Unsaid if h.exit_code > 0 => Some(R::Exited),
        pb::TaskEnd::Unsaid => None,
        said => said_end(said),
    }
}

impl From<pb::HeartbeatRequest> for HeartbeatReport {
    fn from(r: pb::HeartbeatRequest) -> Self {
        HeartbeatReport {
            node_id: r.node_id,
            identity: r.identity,
            running: r
                .running
                .into_iter()
                .map(|t| RunningTask {
                    task_id: t.task_id,
                    attempt: t.attempt,
                    read_bytes: t.read_bytes,
                    spec: t.spec,
                    queued: t.queued,
                    started_ns: t.started_ns,
                    fetching: t.fetching,
                    program_started_ns: t.program_started_ns,
                })
                .collect(),
            results: r
                .results
                .into_iter()
                .map(|t| {
                    let reason = end_reason(&t);
                    TaskResult {
                        task_id: t.task_id,
                        attempt: t.attempt,
                        exit_code: t.exit_code,
                        message: t.message,
                        started_ns: t.started_ns,
                        finished_ns: t.finished_ns,
                        success: t.success,
                        interrupted: t.interrupted,
                        start_failed: t.start_failed,
                        usage: t.usage.map(|u| crate::store::TaskUsage {
                            cpu_user_ms: u.cpu_user_ms,
                            cpu_system_ms: u.cpu_system_ms,
                            max_rss_bytes: u.max_rss_bytes,
                            max_gpu_memory_bytes: u.max_gpu_memory_bytes,
                        }),
                        offload_started_ns: t.offload_started_ns,
                        reason,
                        // Only a signal's; only a name within bounds (an agent's is written as it
                        // sent it in listings and the store).
                        signal: match reason {
                            Some(crate::store::EndReason::Signal) => {
                                crate::store::signal_name(&t.signal)
                            }
                            _ => None,
                        },
                        offload_devices: t.offload_devices,
                        fetch_ms: t.fetch_ms,
                    }
                })
                .collect(),
            read_bytes_per_sec: r.read_bytes_per_sec,
            gpus: r
                .gpus
                .into_iter()
                .map(|g| GpuUtilisation {
                    device: g.device,
                    percent: g.percent,
                })
                .collect(),
            available_memory_bytes: r.available_memory_bytes,
            disk: crate::state::types::DiskReport {
                free_bytes: r.disk_free_bytes,
                min_free: r.min_free_disk,
            },
            known_specs: r.known_specs,
            draining: r.draining,
            accel: crate::state::accel::AccelReport {
                rack: r.rack,
                port: r.accel_port,
                tls: r.accel_tls,
                state: r.accel.map(accel_state),
            },
            advertise: r.advertise,
            balance: r.balance.into_iter().map(envelope_in).collect(),
            balance_sent: r.balance_sent,
            balance_received: r.balance_received,
            balance_held: r.balance_held,
            rtt_ns: r.rtt_ns.into_iter().collect(),
            time_left: r.time_left_ms.map(std::time::Duration::from_millis),
            // An unknown reason (a newer agent) still means it leaves.
            leaving: (!r.leaving.is_empty()).then(|| {
                crate::state::types::Leave::parse(&r.leaving)
                    .unwrap_or(crate::state::types::Leave::Signal)
            }),
            signalled: r.signalled,
            reply_seq: r.reply_seq,
            peers_version: r.peers_version,
            clusters_version: r.clusters_version,
            holds_outputs_of: {
                let mut jobs = r.holds_outputs_of;
                jobs.truncate(hetsched_proto::MAX_HELD_OUTPUT_JOBS);
                jobs
            },
        }
    }
}

fn accel_state(a: pb::AccelState) -> crate::state::accel::AccelState {
    crate::state::accel::AccelState {
        devices: a
            .devices
            .into_iter()
            .map(|d| crate::state::accel::DeviceState {
                device: d.device,
                busy: d.busy,
                memory_used_bytes: d.memory_used_bytes,
                utilisation_percent: d.utilisation_percent,
                nvml: d.nvml,
            })
            .collect(),
        reading: a.reading,
        process_queue: a.process_queue,
        write_queue: a.write_queue,
        process_capacity: a.process_capacity,
    }
}

fn accel_state_wire(a: crate::state::accel::AccelState) -> pb::AccelState {
    pb::AccelState {
        devices: a
            .devices
            .into_iter()
            .map(|d| pb::DeviceState {
                device: d.device,
                busy: d.busy,
                memory_used_bytes: d.memory_used_bytes,
                utilisation_percent: d.utilisation_percent,
                nvml: d.nvml,
            })
            .collect(),
        reading: a.reading,
        process_queue: a.process_queue,
        write_queue: a.write_queue,
        process_capacity: a.process_capacity,
    }
}

impl From<&pb::PurgeRequest> for PurgeSelection {
    fn from(r: &pb::PurgeRequest) -> Self {
        PurgeSelection {
            job_ids: r.job_ids.clone(),
            older_than_ms: r.has_older_than.then_some(r.older_than_ms),
            keep: r.has_keep.then_some(r.keep),
            owner: None,
        }
    }
}

// ------------------------------------------------------------------- server → wire

fn task_ref(r: &TaskRef) -> pb::TaskRef {
    pb::TaskRef {
        task_id: r.task_id,
        attempt: r.attempt,
    }
}

fn assignment(d: &Dispatch) -> pb::Assignment {
    pb::Assignment {
        task_id: d.task_id,
        attempt: d.attempt,
        index: d.index,
        devices: d.devices.clone(),
        spec: d.spec,
        instance_dir: d.workflow.as_ref().map_or(String::new(), |w| w.dir.clone()),
        inputs: d.workflow.as_ref().map_or(Vec::new(), |w| {
            w.inputs
                .iter()
                .map(|i| pb::WorkflowInput {
                    name: i.name.clone(),
                    node_id: i.node_id,
                    address: i.address.clone(),
                    path: i.path.clone(),
                    ticket: i.ticket.clone(),
                })
                .collect()
        }),
        outputs: d
            .workflow
            .as_ref()
            .map_or(Vec::new(), |w| w.outputs.clone()),
        process: d.workflow.as_ref().map_or(0, |w| w.process),
        cores: d.cores,
        prefetched: d.prefetched,
        entry: d.entry.clone(),
        hosts: d.nodes.iter().map(|n| n.host.clone()).collect(),
        node_names: d.nodes.iter().map(|n| n.name.clone()).collect(),
        node_cores: d.nodes.iter().map(|n| n.cores).collect(),
        job_nonce: d.job_nonce,
        ..Default::default()
    }
}

fn envelope_in(e: pb::BalanceMessage) -> crate::state::types::BalanceEnvelope {
    crate::state::types::BalanceEnvelope {
        job_id: e.job_id,
        message_json: e.message_json,
        peers: e.peers.into_iter().collect(),
        // What an agent sends the launch node is not acted on for a grant.
        grant: None,
    }
}

fn envelope_out(e: &crate::state::types::BalanceEnvelope) -> pb::BalanceMessage {
    let g = e.grant.clone().unwrap_or_default();
    pb::BalanceMessage {
        job_id: e.job_id,
        message_json: e.message_json.clone(),
        peers: e.peers.iter().map(|(k, v)| (*k, v.clone())).collect(),
        grant_serial: g.serial,
        granted_instances: g.instances,
        granted_requires: g.requires,
        granted_table: g.table,
        grant: g.signature,
    }
}

fn pcddb_job(j: &crate::state::types::PcddbJob) -> pb::PcddbJob {
    pb::PcddbJob {
        job_id: j.job_id,
        lt: j.lt,
        mt: j.mt,
        launch: j.launch,
        task_base: j.task_base,
        epoch: j.epoch,
        peers: j.peers.iter().map(|(k, v)| (*k, v.clone())).collect(),
        clusters: j.clusters.clone(),
        attributes: j.attributes,
        check_interval_ms: j.check_interval_ms,
        dropped: j.dropped.clone(),
        balance_key: j.balance_key.clone(),
        peers_version: j.peers_version,
        clusters_version: j.clusters_version,
        foreign_cores: j.foreign_cores,
    }
}

/// The wire form of a spec (also what an offload's ticket covers: `state::accel`).
pub(crate) fn task_spec(s: &TaskSpec) -> pb::TaskSpec {
    pb::TaskSpec {
        key: s.key,
        job_id: s.job_id,
        app: s.app.clone(),
        variant: s.variant.clone(),
        argv: s.argv.clone(),
        env: s.env.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
        workdir: s.workdir.clone(),
        workdir_required: s.workdir_required,
        time_limit_ms: s.time_limit_ms,
        inputs: s.inputs.clone(),
        outputs: s.outputs.clone(),
        accelerator: s.accelerator.clone(),
        memory_limit_bytes: s.memory_limit_bytes,
        kill_grace_ms: s.kill_grace_ms,
        warn_signal: s.warn_signal.clone(),
        warn_before_ms: s.warn_before_ms,
        stdout: s.stdout.clone(),
        stderr: s.stderr.clone(),
        pin: s.pin,
        run_as: s.run_as.clone(),
        job_nonce: s.job_nonce,
    }
}

impl From<HeartbeatReply> for pb::HeartbeatReply {
    fn from(r: HeartbeatReply) -> Self {
        pb::HeartbeatReply {
            acked: r.acked.iter().map(task_ref).collect(),
            assignments: r
                .assignments
                .iter()
                .map(|d| {
                    let mut a = assignment(d);
                    if let Some((_, b, ticket)) =
                        r.offload_to.iter().find(|(t, _, _)| *t == d.task_id)
                    {
                        a.offload_anode = b.anode.clone();
                        a.offload_address = b.address.clone();
                        a.offload_ticket = ticket.clone();
                    }
                    a
                })
                .collect(),
            kill: r.kill.iter().map(task_ref).collect(),
            reregister: r.reregister,
            specs: r.specs.iter().map(task_spec).collect(),
            more: r.more,
            binding: r.binding.map(|b| pb::NodeBinding {
                bound: !b.anode.is_empty(),
                anode: b.anode,
                address: b.address,
            }),
            balance: r.balance.iter().map(envelope_out).collect(),
            pcddb: r.pcddb.iter().map(pcddb_job).collect(),
            purge_epoch: r.purge_epoch,
            respecs: r.respecs.iter().map(respec).collect(),
            stop: r.stop.is_some(),
            stop_drain: r.stop == Some(true),
            signals: r.signals.iter().map(task_signal).collect(),
            member_of: r.member_of.iter().map(task_ref).collect(),
            gathering: r.gathering,
            outputs_needed: r.outputs_needed,
            seq: r.seq,
            offload_key: r.offload_key,
            offload_keys: r
                .offload_keys
                .into_iter()
                .map(|(epoch, key)| pb::OffloadKey { epoch, key })
                .collect(),
            data_key: r.data_key,
        }
    }
}

fn task_signal(s: &crate::state::types::TaskSignal) -> pb::TaskSignal {
    pb::TaskSignal {
        task_id: s.task_id,
        attempt: s.attempt,
        signal: s.signal.to_string(),
        seq: s.seq,
        chunk_of: s.chunk_of,
    }
}

fn respec(r: &crate::state::types::Respec) -> pb::Respec {
    pb::Respec {
        task_id: r.task_id,
        attempt: r.attempt,
        spec: r.spec,
    }
}

/// Encoded size of `d` as an `Assignment` (without its field tag and length prefix): with
/// each input's fetch ticket, which the state signs after the kinds filled the reply (34 bytes
/// each: tag, length, 32 bytes — a wide consumer's many inputs are counted within the budget).
pub fn dispatch_wire_len(d: &Dispatch) -> usize {
    let unsigned = d.workflow.as_ref().map_or(0, |w| {
        w.inputs.iter().filter(|i| i.ticket.is_empty()).count()
    });
    assignment(d).encoded_len() + unsigned * (2 + hetsched_proto::ticket::LEN)
}

/// Encoded size of `s` as a `TaskSpec` (without its field tag and length prefix).
pub fn spec_wire_len(s: &TaskSpec) -> usize {
    task_spec(s).encoded_len()
}

/// Encoded size of `r` as a `HeartbeatReply`.
pub fn reply_wire_len(r: &HeartbeatReply) -> usize {
    pb::HeartbeatReply {
        acked: r.acked.iter().map(task_ref).collect(),
        assignments: r.assignments.iter().map(assignment).collect(),
        kill: r.kill.iter().map(task_ref).collect(),
        reregister: r.reregister,
        specs: r.specs.iter().map(task_spec).collect(),
        more: r.more,
        // Added after the kinds filled the reply: an ANode name and an address, a few hundred
        // bytes at most beyond the budget (agents decode up to 16 MiB).
        binding: None,
        balance: r.balance.iter().map(envelope_out).collect(),
        pcddb: r.pcddb.iter().map(pcddb_job).collect(),
        // Set after the kinds filled the reply: at most 11 bytes.
        purge_epoch: u64::MAX,
        respecs: r.respecs.iter().map(respec).collect(),
        stop: r.stop.is_some(),
        stop_drain: r.stop == Some(true),
        signals: r.signals.iter().map(task_signal).collect(),
        member_of: r.member_of.iter().map(task_ref).collect(),
        gathering: r.gathering,
        // Set after the kinds filled the reply: at most the jobs the agent listed, bounded
        // (`MAX_HELD_OUTPUT_JOBS`), a few bytes each.
        outputs_needed: Vec::new(),
        // Set after the kinds filled the reply: at most 11 bytes.
        seq: u64::MAX,
        // Set after the kinds filled the reply, to an ANode only: 34 bytes. (Each offloaded
        // assignment's ANode, address and 51-byte ticket — tag, length, the MAC and its
        // validity — come then too: an NNode is sent as many offloads at once as it reaches
        // devices.)
        offload_key: Vec::new(),
        // Likewise: three keys of 38 bytes each (tag, length, epoch, key), 114 bytes.
        offload_keys: Vec::new(),
        // Set after the kinds filled the reply, to every node: 34 bytes.
        data_key: Vec::new(),
    }
    .encoded_len()
}

impl From<Registered> for pb::RegisterReply {
    fn from(r: Registered) -> Self {
        pb::RegisterReply {
            node_id: r.node_id,
            heartbeat_interval_ms: r.heartbeat_interval_ms,
            idle_heartbeat_interval_ms: r.idle_heartbeat_interval_ms,
            note: r.note,
            reply_seq: r.reply_seq,
            // Every reply: the agent compares it with its own version.
            version: crate::VERSION.to_string(),
        }
    }
}

impl From<Submitted> for pb::SubmitReply {
    fn from(r: Submitted) -> Self {
        pb::SubmitReply {
            job_id: r.job_id,
            tasks: r.tasks,
            existing: r.existing,
            kind: r.kind.as_str().into(),
            blocked_reason: String::new(),
        }
    }
}

impl From<TaskCounts> for pb::TaskCounts {
    fn from(c: TaskCounts) -> Self {
        pb::TaskCounts {
            pending: c.pending,
            running: c.running,
            succeeded: c.succeeded,
            failed: c.failed,
            cancelled: c.cancelled,
            queued: c.queued,
            fetching: c.fetching,
        }
    }
}

impl From<AppInfo> for pb::AppInfo {
    fn from(a: AppInfo) -> Self {
        pb::AppInfo {
            id: a.id,
            name: a.name,
            tasks: a.tasks,
            counts: Some(a.counts.into()),
            mean_cpu_ms: a.mean_cpu_ms,
            mean_gpu_ms: a.mean_gpu_ms,
            has_cpu: a.has_cpu,
            has_gpu: a.has_gpu,
            ready: a.ready,
            cpu_ms: a.cpu_ms,
            max_rss_bytes: a.max_rss_bytes,
            max_gpu_memory_bytes: a.max_gpu_memory_bytes,
            requires: a.requires,
            max_running: a.max_running,
            stdout: a.streams[0].clone(),
            stderr: a.streams[1].clone(),
            pin: a.pin,
            nodes: a.nodes,
            priority: a.priority,
            cpu_time_limit_ms: a.time_limit_ms[0],
            gpu_time_limit_ms: a.time_limit_ms[1],
            cpu_cores: a.requests[0].map_or(0, |r| r.cores),
            cpu_memory_bytes: a.requests[0].map_or(0, |r| r.memory_bytes),
            gpu_cores: a.requests[1].map_or(0, |r| r.cores),
            gpu_memory_bytes: a.requests[1].map_or(0, |r| r.memory_bytes),
            gpus: a.requests[1].map_or(0, |r| r.gpus),
            gpu_kind: a.gpu_kind.unwrap_or_default(),
        }
    }
}

impl From<JobInfo> for pb::JobInfo {
    fn from(j: JobInfo) -> Self {
        pb::JobInfo {
            id: j.id,
            kind: j.kind.as_str().into(),
            name: j.name,
            state: j.state,
            tasks: j.tasks,
            counts: Some(j.counts.into()),
            submitted_ns: j.submitted_ns,
            finished_ns: j.finished_ns,
            apps: j.apps.into_iter().map(Into::into).collect(),
            divisible: j
                .divisible
                .map(|d| crate::divisible_service::info_to_pb(*d)),
            balancer: j.balancer,
            launch_sent: j.launch_sent,
            launch_received: j.launch_received,
            after: j.after,
            waiting: j.waiting,
            after_any: j.after_any,
            after_notok: j.after_notok,
            after_corr: j.after_corr,
            after_start: j.after_start,
            held: j.held,
            cpu_ms: j.cpu_ms,
            max_rss_bytes: j.max_rss_bytes,
            max_gpu_memory_bytes: j.max_gpu_memory_bytes,
            pending_reason: j.pending_reason,
            blocked: j.blocked,
            begin_ms: j.begin_ms.unwrap_or(0),
            deferred: j.deferred,
            owner: j.owner,
            stopping: j.stopping,
        }
    }
}

impl From<JobsPage> for pb::ListJobsReply {
    fn from(p: JobsPage) -> Self {
        pb::ListJobsReply {
            jobs: p.jobs.into_iter().map(Into::into).collect(),
            next_cursor: p.next_cursor,
        }
    }
}

impl From<TaskInfo> for pb::TaskInfo {
    fn from(t: TaskInfo) -> Self {
        pb::TaskInfo {
            id: t.id,
            job_id: t.job_id,
            app: t.app,
            index: t.index,
            state: t.state,
            attempt: t.attempt,
            node: t.node,
            variant: t.variant,
            devices: t.devices,
            started_ns: t.started_ns,
            finished_ns: t.finished_ns,
            exit_code: t.exit_code,
            message: t.message,
            failed_attempts: t.failed_attempts,
            preemptions: t.preemptions,
            queued: t.queued,
            process: t.process,
            fetching: t.fetching,
            fetch_ms: t.fetch_ms,
            // Filled by the service from the agent that ran the task (`hetsched log`).
            output: String::new(),
            executed_node: t.executed_node,
            reason: t.reason.map_or(String::new(), |r| r.as_str().to_string()),
            signal: t.signal.map_or(String::new(), String::from),
            usage: t.usage.map(|u| pb::TaskUsage {
                cpu_user_ms: u.cpu_user_ms,
                cpu_system_ms: u.cpu_system_ms,
                max_rss_bytes: u.max_rss_bytes,
                max_gpu_memory_bytes: u.max_gpu_memory_bytes,
            }),
            nodes: t.nodes,
        }
    }
}

impl From<TasksPage> for pb::ListTasksReply {
    fn from(p: TasksPage) -> Self {
        pb::ListTasksReply {
            tasks: p.tasks.into_iter().map(Into::into).collect(),
            next_cursor: p.next_cursor,
            total: p.total,
        }
    }
}

impl From<BackedOffApp> for pb::BackedOffApp {
    fn from(b: BackedOffApp) -> Self {
        pb::BackedOffApp {
            app: b.app,
            job_id: b.job_id,
            failures: b.failures,
            remaining_ms: b.remaining_ms,
        }
    }
}

impl From<NodeInfo> for pb::NodeInfo {
    fn from(n: NodeInfo) -> Self {
        pb::NodeInfo {
            id: n.id,
            name: n.name,
            alive: n.alive,
            cores: n.cores,
            free_cores: n.free_cores,
            memory_bytes: n.memory_bytes,
            accelerators: n
                .accelerators
                .into_iter()
                .map(|a| pb::Accelerator {
                    kind: a.kind,
                    memory_bytes: a.memory_bytes,
                    speed: a.speed,
                })
                .collect(),
            free_gpus: n.free_gpus,
            running: n.running,
            queued: n.queued,
            last_seen_ms: n.last_seen_ms,
            last_heard_ms: n.last_heard_ms,
            read_bytes_per_sec: n.read_bytes_per_sec,
            gpus: n
                .gpus
                .into_iter()
                .map(|g| pb::GpuUtilisation {
                    device: g.device,
                    percent: g.percent,
                })
                .collect(),
            available_memory_bytes: n.available_memory_bytes,
            disk_free_bytes: n.disk.free_bytes,
            min_free_disk: n.disk.min_free,
            drained: n.drained,
            drain_reason: n.drain_note.reason,
            drained_since_ms: n.drain_note.since_ms,
            out_of_bounds: n.out_of_bounds,
            stopping: n.stopping,
            draining: n.draining,
            instances: n.instances,
            lt: n.lt,
            mt: n.mt,
            clusters: n.clusters,
            balance_sent: n.balance_sent,
            balance_received: n.balance_received,
            backed_off: n.backed_off.into_iter().map(Into::into).collect(),
            rack: n.rack,
            role: n.role,
            bound_to: n.bound_to,
            accel: n.accel.map(accel_state_wire),
            containers: n.containers,
            attributes: n.attributes,
            time_left_ms: n.time_left_ms,
            returning_ms: n.returning_ms,
            left: n.left.map(|l| l.as_str().to_string()).unwrap_or_default(),
            held_for: n.held_for,
            version: n.version,
        }
    }
}

/// A user's row as `ListUsers`, `LimitUser` and the dashboard's `/api/users` send it (the JSON
/// of all three is [`crate::json::user`]): `fair_usage` absent without `[fair_share]`.
impl From<crate::state::UserOverview> for pb::UserInfo {
    fn from(o: crate::state::UserOverview) -> Self {
        let u = o.entry;
        pb::UserInfo {
            name: u.name,
            created_ms: u.created_ms,
            jobs: u.jobs,
            unfinished_jobs: u.unfinished_jobs,
            max_cores: u.cap.cores,
            cores: u.held.cores,
            max_gpus: u.cap.gpus,
            gpus: u.held.gpus,
            max_memory_bytes: u.cap.memory_bytes,
            memory_bytes: u.held.memory_bytes,
            fair_usage: o.fair_usage,
            shares: u.shares,
            max_priority: u.max_priority,
            admin: o.admin,
            pending_jobs: o.pending_jobs,
            running_jobs: o.running_jobs,
        }
    }
}

impl From<Purged> for pb::PurgeReply {
    fn from(p: Purged) -> Self {
        pb::PurgeReply {
            purged: p.purged,
            tasks: p.tasks,
            already_purged: p.already_purged,
        }
    }
}

impl From<Drained> for pb::DrainNodeReply {
    fn from(d: Drained) -> Self {
        pb::DrainNodeReply {
            node_id: d.node_id,
            running: d.running,
            stream_workers: d.stream_workers,
            chunks: d.chunks,
            was_drained: d.was_drained,
            reason: d.reason,
        }
    }
}

// ------------------------------------------------------------------- the state in wire terms

/// The state's API in protobuf terms: each method converts its request, calls the state's
/// event function, and converts the answer. The gRPC handlers ([`crate::service`]), the
/// dashboard, the metrics and tests use it; bring it into scope with `use
/// hetsched_server::convert::Wire`.
pub trait Wire {
    /// [`State::on_register`].
    fn register(&mut self, req: pb::RegisterRequest) -> Result<pb::RegisterReply, StateError>;
    /// [`State::on_heartbeat`].
    fn heartbeat(&mut self, req: pb::HeartbeatRequest) -> Result<pb::HeartbeatReply, StateError>;
    /// [`State::on_submit`] without a key or a name.
    fn submit(
        &mut self,
        origin: &str,
        text: &str,
        workdir: &str,
    ) -> Result<pb::SubmitReply, StateError> {
        self.submit_named(origin, text, workdir, "", "")
    }
    /// [`State::on_submit`] with a client's submission key (empty = none).
    fn submit_keyed(
        &mut self,
        origin: &str,
        text: &str,
        workdir: &str,
        key: &str,
    ) -> Result<pb::SubmitReply, StateError> {
        self.submit_named(origin, text, workdir, key, "")
    }
    /// [`State::on_submit`] with a key and a job name (empty = none).
    fn submit_named(
        &mut self,
        origin: &str,
        text: &str,
        workdir: &str,
        key: &str,
        name: &str,
    ) -> Result<pb::SubmitReply, StateError>;
    /// [`State::on_resubmit`].
    fn resubmit_failed(&mut self, job: u64) -> Result<pb::ResubmitReply, StateError>;
    /// [`State::on_cancel`].
    fn cancel(&mut self, job: u64) -> Result<pb::CancelReply, StateError>;
    /// [`State::on_cancel_tasks`] (`indices` in the syntax of a job file's `indices`).
    fn cancel_tasks(
        &mut self,
        job: u64,
        app: &str,
        indices: &str,
    ) -> Result<pb::CancelReply, StateError>;
    /// [`Wire::cancel_tasks`] asked by `who` ([`State::on_cancel_tasks_by`]).
    fn cancel_tasks_by(
        &mut self,
        job: u64,
        app: &str,
        indices: &str,
        who: &str,
    ) -> Result<pb::CancelReply, StateError>;
    /// [`State::on_signal`] (`signal` as `kill -l` names it; `indices` in the syntax of a job
    /// file's `indices`, empty: every task).
    fn signal(&mut self, req: &pb::SignalRequest) -> Result<pb::SignalReply, StateError>;
    /// [`State::on_hold`].
    fn hold(&mut self, job: u64, hold: bool) -> Result<pb::HoldReply, StateError>;
    /// [`State::on_update`].
    fn update(&mut self, req: &pb::UpdateRequest) -> Result<pb::UpdateReply, StateError>;
    /// [`State::on_purge`].
    fn purge(&mut self, req: &pb::PurgeRequest) -> Result<pb::PurgeReply, StateError>;
    /// [`State::on_drain`].
    fn drain_node(
        &mut self,
        name: &str,
        drain: bool,
        reason: &str,
    ) -> Result<pb::DrainNodeReply, StateError>;
    /// [`State::count_tasks`].
    fn task_counts(&self) -> pb::TaskCounts;
    /// Every job ([`State::list_jobs`] without a page limit).
    fn jobs(&self) -> pb::ListJobsReply {
        self.jobs_page(0, u32::MAX)
    }
    /// [`State::list_jobs`].
    fn jobs_page(&self, cursor: u64, limit: u32) -> pb::ListJobsReply;
    /// [`State::get_job`].
    fn job(&self, id: u64) -> Result<pb::JobInfo, StateError>;
    /// Every task of a job ([`State::list_tasks`] without a page limit).
    fn tasks(&self, job: u64) -> Result<pb::ListTasksReply, StateError> {
        self.tasks_page(job, 0, u32::MAX)
    }
    /// [`State::list_tasks`].
    fn tasks_page(
        &self,
        job: u64,
        cursor: u64,
        limit: u32,
    ) -> Result<pb::ListTasksReply, StateError>;
    /// [`State::list_nodes`].
    /// `ListNodes`: with `all`, also the nodes whose agents left on purpose.
    fn nodes(&self, all: bool) -> pb::ListNodesReply;
    /// `ListAllocations`.
    fn allocation_queues(&self) -> pb::ListAllocationsReply;
}

impl Wire for State {
    fn register(&mut self, req: pb::RegisterRequest) -> Result<pb::RegisterReply, StateError> {
        let r = registration(&req)?;
        self.on_register(r).map(Into::into)
    }

    fn heartbeat(&mut self, req: pb::HeartbeatRequest) -> Result<pb::HeartbeatReply, StateError> {
        // Heartbeats carry the rack the accelerator binding and `hetsched nodes` use: the
        // registration's rule holds for it too.
        crate::limits::rack(&req.rack).map_err(StateError::Invalid)?;
        self.on_heartbeat(req.into()).map(Into::into)
    }

    fn submit_named(
        &mut self,
        origin: &str,
        text: &str,
        workdir: &str,
        key: &str,
        name: &str,
    ) -> Result<pb::SubmitReply, StateError> {
        self.on_submit(Submission {
            origin: origin.to_string(),
            text: text.to_string(),
            workdir: workdir.to_string(),
            key: key.to_string(),
            name: name.to_string(),
            divisible_input: Vec::new(),
            after: Vec::new(),
            after_any: Vec::new(),
            after_notok: Vec::new(),
            after_corr: Vec::new(),
            singleton: false,
            after_start: Vec::new(),
            hold: false,
            begin_ms: None,
            max_priority: None,
            task_room: None,
            cap: Default::default(),
            // The admin's: `on_submit` fills it.
            owner: String::new(),
        })
        .map(Into::into)
    }

    fn resubmit_failed(&mut self, job: u64) -> Result<pb::ResubmitReply, StateError> {
        self.on_resubmit(job).map(|tasks| pb::ResubmitReply {
            tasks,
            ..Default::default()
        })
    }

    fn hold(&mut self, job: u64, hold: bool) -> Result<pb::HoldReply, StateError> {
        self.on_hold(job, hold).map(|tasks| pb::HoldReply { tasks })
    }

    fn update(&mut self, req: &pb::UpdateRequest) -> Result<pb::UpdateReply, StateError> {
        let update = crate::jobs::batch::Update {
            app: (!req.app.is_empty()).then(|| req.app.clone()),
            priority: req.priority,
            max_running: req.max_running,
            time_limit_ms: req.time_limit_ms,
            cores: req.cores,
            memory_bytes: req.memory_bytes,
            gpus: req.gpus,
            gpu_kind: req
                .gpu_kind
                .as_ref()
                .map(|k| (!k.is_empty()).then(|| k.clone())),
            begin_ms: req.begin_ms,
            requires: req.requires.as_ref().map(|r| {
                r.split(',')
                    .map(str::trim)
                    .filter(|a| !a.is_empty())
                    .map(str::to_string)
                    .collect()
            }),
            variant: match req.variant.as_str() {
                "" => None,
                "cpu" => Some(hetsched_core::Variant::Cpu),
                "gpu" => Some(hetsched_core::Variant::Gpu),
                v => {
                    return Err(StateError::Invalid(format!(
                        "variant `{}`: expected cpu or gpu",
                        hetsched_core::text::clip(v)
                    )));
                }
            },
        };
        let apps = self.on_update(req.job_id, &update)?;
        // Kept, but told: an update no live node can meet (`--requires nosuch`, more cores
        // than any node has) would leave the job waiting for ever without a word.
        let warning = self.unrunnable(req.job_id).unwrap_or_default();
        Ok(pb::UpdateReply {
            warning,
            apps: apps
                .into_iter()
                .map(|u| pb::UpdatedApp {
                    name: u.name,
                    priority: u.priority,
                    max_running: u.max_running,
                    cpu_time_limit_ms: u.time_limit_ms[0],
                    gpu_time_limit_ms: u.time_limit_ms[1],
                    cpu_cores: u.requests[0].map_or(0, |r| r.cores),
                    cpu_memory_bytes: u.requests[0].map_or(0, |r| r.memory_bytes),
                    gpu_cores: u.requests[1].map_or(0, |r| r.cores),
                    gpu_memory_bytes: u.requests[1].map_or(0, |r| r.memory_bytes),
                    gpus: u.requests[1].map_or(0, |r| r.gpus),
                    requires: u.requires,
                    running_kept: u.running_kept,
                    gpu_kind: u.gpu_kind.unwrap_or_default(),
                })
                .collect(),
        })
    }

    fn cancel(&mut self, job: u64) -> Result<pb::CancelReply, StateError> {
        let kind = self.job_kind(job).map(|k| k.as_str().to_string());
        self.on_cancel(job).map(|cancelled| pb::CancelReply {
            cancelled,
            kind: kind.unwrap_or_default(),
        })
    }

    fn cancel_tasks(
        &mut self,
        job: u64,
        app: &str,
        indices: &str,
    ) -> Result<pb::CancelReply, StateError> {
        let owner = self.owner_of(job).to_string();
        self.cancel_tasks_by(job, app, indices, &owner)
    }

    fn cancel_tasks_by(
        &mut self,
        job: u64,
        app: &str,
        indices: &str,
        who: &str,
    ) -> Result<pb::CancelReply, StateError> {
        let indices = hetsched_core::input::workload::parse_indices(indices)
            .map_err(|e| StateError::Invalid(format!("--tasks: {e}")))?;
        let app = (!app.is_empty()).then_some(app);
        let kind = self.job_kind(job).map(|k| k.as_str().to_string());
        self.on_cancel_tasks_by(job, app, &indices, who)
            .map(|cancelled| pb::CancelReply {
                cancelled,
                kind: kind.unwrap_or_default(),
            })
    }

    fn signal(&mut self, req: &pb::SignalRequest) -> Result<pb::SignalReply, StateError> {
        let signal = hetsched_core::input::task_signal(&req.signal).map_err(StateError::Invalid)?;
        let indices = match req.indices.as_str() {
            "" => None,
            text => Some(
                hetsched_core::input::workload::parse_indices(text)
                    .map_err(|e| StateError::Invalid(format!("--tasks: {e}")))?,
            ),
        };
        let app = (!req.app.is_empty()).then_some(req.app.as_str());
        self.on_signal(req.job_id, signal, app, indices.as_deref())
            .map(|s| pb::SignalReply {
                tasks: s.tasks,
                chunks: s.chunks,
            })
    }

    fn purge(&mut self, req: &pb::PurgeRequest) -> Result<pb::PurgeReply, StateError> {
        self.on_purge(&req.into()).map(Into::into)
    }

    fn drain_node(
        &mut self,
        name: &str,
        drain: bool,
        reason: &str,
    ) -> Result<pb::DrainNodeReply, StateError> {
        self.on_drain_because(name, drain, reason).map(Into::into)
    }

    fn task_counts(&self) -> pb::TaskCounts {
        self.count_tasks().into()
    }

    fn jobs_page(&self, cursor: u64, limit: u32) -> pb::ListJobsReply {
        self.list_jobs(cursor, limit).into()
    }

    fn job(&self, id: u64) -> Result<pb::JobInfo, StateError> {
        self.get_job(id).map(Into::into)
    }

    fn tasks_page(
        &self,
        job: u64,
        cursor: u64,
        limit: u32,
    ) -> Result<pb::ListTasksReply, StateError> {
        self.list_tasks(job, cursor, limit).map(Into::into)
    }

    fn nodes(&self, all: bool) -> pb::ListNodesReply {
        pb::ListNodesReply {
            nodes: self
                .list_nodes()
                .into_iter()
                .filter(|n| all || n.left.is_none())
                .map(Into::into)
                .collect(),
        }
    }

    fn allocation_queues(&self) -> pb::ListAllocationsReply {
        pb::ListAllocationsReply {
            queues: self
                .allocations()
                .into_iter()
                .map(|q| pb::AllocationQueueInfo {
                    manager: q.queue.config.manager.as_str().to_string(),
                    time_limit_ms: q.queue.config.time_limit.0 / 1_000_000,
                    nodes: q.queue.config.nodes,
                    max_allocations: q.queue.config.max_allocations,
                    backlog: q.queue.config.backlog,
                    attributes: q.queue.config.attributes.clone(),
                    paused: q.paused,
                    agent_cores: q.agent_capacity.map_or(0, |r| r.cores),
                    agent_memory_bytes: q.agent_capacity.map_or(0, |r| r.memory_bytes),
                    name: q.name,
                    submitted: q.submitted,
                    error: q.error.unwrap_or_default(),
                    allocations: q
                        .allocations
                        .into_iter()
                        .map(|a| pb::AllocationInfo {
                            agents: self
                                .live_nodes_ending(&format!("-{}", a.id))
                                .into_iter()
                                .map(|(name, _)| name.to_string())
                                .collect(),
                            id: a.id,
                            state: a.state,
                        })
                        .collect(),
                })
                .collect(),
        }
    }
}

impl From<crate::state::types::Resubmitted> for pb::ResubmitReply {
    fn from(r: crate::state::types::Resubmitted) -> Self {
        pb::ResubmitReply {
            tasks: r.tasks,
            cancelled_again: r.cancelled_again,
            cancelled_again_why: r.why,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::EndReason;

    /// A chunk's reason is its agent's word; an older agent's failure is read for its exit
    /// code as a task's is (126/127 could not start, another code exited), else none; a
    /// success has none whatever it says.
    #[test]
    fn a_chunks_reason_is_its_agents_word_else_what_its_exit_code_implies() {
        let read = |success: bool, end: pb::TaskEnd, exit_code: i32| {
            chunk_end_reason(&pb::ChunkResultHeader {
                success,
                end: end.into(),
                exit_code,
                ..Default::default()
            })
        };
        assert_eq!(
            read(false, pb::TaskEnd::TimeLimit, -1),
            Some(EndReason::TimeLimit)
        );
        assert_eq!(
            read(false, pb::TaskEnd::Signalled, -1),
            Some(EndReason::Signal)
        );
        assert_eq!(
            read(false, pb::TaskEnd::Interrupted, -1),
            Some(EndReason::Lost)
        );
        assert_eq!(read(false, pb::TaskEnd::Unsaid, 3), Some(EndReason::Exited));
        assert_eq!(
            read(false, pb::TaskEnd::Unsaid, 127),
            Some(EndReason::StartFailed)
        );
        assert_eq!(read(false, pb::TaskEnd::Unsaid, -1), None);
        assert_eq!(read(false, pb::TaskEnd::Unsaid, 0), None);
        assert_eq!(read(true, pb::TaskEnd::Exited, 0), None);
    }

    /// The reason and signal the server reads from each result: as its agent said, else as
    /// an older agent's result lets the edge infer; a signal only with reason `signal` and only
    /// a name within bounds.
    #[test]
    fn a_results_reason_is_its_agents_word_else_what_an_older_agents_result_implies() {
        let read = |t: pb::TaskResult| {
            let r = HeartbeatReport::from(pb::HeartbeatRequest {
                results: vec![t],
                ..Default::default()
            });
            let r = &r.results[0];
            (r.reason, r.signal.as_deref().map(str::to_string))
        };
        let said = |end: pb::TaskEnd, signal: &str| pb::TaskResult {
            exit_code: -1,
            end: end.into(),
            signal: signal.into(),
            ..Default::default()
        };
        let segv = Some("SEGV".to_string());
        assert_eq!(
            read(said(pb::TaskEnd::Signalled, "SEGV")),
            (Some(EndReason::Signal), segv)
        );
        for bad in ["segv", "SEGV\u{1b}[2J", "ABCDEFGHIJKLMNOPQ"] {
            assert_eq!(
                read(said(pb::TaskEnd::Signalled, bad)),
                (Some(EndReason::Signal), None),
                "{bad:?} is dropped, the reason stays"
            );
        }
        assert_eq!(
            read(said(pb::TaskEnd::TimeLimit, "TERM")),
            (Some(EndReason::TimeLimit), None),
            "a signal only with reason `signal`"
        );
        assert_eq!(
            read(said(pb::TaskEnd::Interrupted, "")).0,
            Some(EndReason::Lost)
        );
        assert_eq!(
            read(said(pb::TaskEnd::Killed, "")).0,
            Some(EndReason::Cancelled)
        );
        assert_eq!(
            read(said(pb::TaskEnd::OutputsMissing, "")).0,
            Some(EndReason::OutputsMissing)
        );
        // A success has none, whatever it says.
        let mut ok = said(pb::TaskEnd::Exited, "");
        ok.success = true;
        ok.exit_code = 0;
        assert_eq!(read(ok), (None, None));
        // An older agent says nothing of how it ended.
        let old = |exit_code: i32, start_failed: bool, interrupted: bool| pb::TaskResult {
            exit_code,
            start_failed,
            interrupted,
            ..Default::default()
        };
        assert_eq!(read(old(127, true, false)).0, Some(EndReason::StartFailed));
        assert_eq!(read(old(-1, true, false)).0, Some(EndReason::StartFailed));
        assert_eq!(read(old(-1, false, true)).0, Some(EndReason::Lost));
        assert_eq!(read(old(3, false, false)).0, Some(EndReason::Exited));
        assert_eq!(
            read(old(-1, false, false)),
            (None, None),
            "a signal or a limit: not known"
        );
        // A later agent's end this server does not know: read as not said.
        let mut later = old(-1, false, false);
        later.end = 99;
        assert_eq!(read(later).0, None);
    }
}
