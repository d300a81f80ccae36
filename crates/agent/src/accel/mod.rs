//! The accelerator service of an ANode (spec 01's **AcCt**, mechanism 3) and the NNode side of
//! accelerator offload (mechanism 2).
//!
//! An ANode's agent owns its accelerator devices through one [`Pipeline`] of three stages, each an
//! independent worker, joined by two bounded queues (spec 01, "Pipelined accelerator task
//! execution"):
//!
//! ```text
//!  remote-read ──▶ process queue ──▶ process ──▶ write queue ──▶ remote-write
//!  (receive an NNode's   (bounded)     (a free device,   (bounded)   (stdout, stderr, declared
//!   task and inputs)                    CUDA_VISIBLE_DEVICES)         outputs, then the result)
//! ```
//!
//! - **remote-read** ([`service::read_stage`]): each `Accel.Offload` call brings one task's spec
//!   and joins the stage's line; the stage takes the calls one at a time, in arrival order, as the
//!   paper's single remote-read thread: it tells the requester to send its declared input files
//!   (`OffloadReady`), receives them in chunks into a private staging directory, and enqueues the
//!   task on the process queue (waiting while the queue is full: the calls behind it wait, holding
//!   no input). One call at a time is what lets the stages overlap (see `read_stage`).
//! - **process** ([`Pipeline`]): one worker takes the queue in FIFO order, waits until the task's
//!   devices are free, and starts it there with `CUDA_VISIBLE_DEVICES` naming them; one task per
//!   device at a time, so devices are never oversubscribed. The ANode's **own** GPU tasks enter the
//!   same queue ([`Pipeline::run_local`]) and get their devices from the same pool.
//! - **remote-write** ([`service`]): one worker takes finished remote tasks in order and streams
//!   back stdout, stderr and the declared output files, then the result, and removes the staging
//!   directory. A requester that went away (its NNode died, or its call broke) and does not send
//!   the attempt again within [`attempts::REATTACH_GRACE`] gets nothing: its task is killed if it
//!   still runs, and its result is dropped.
//!
//! Each attempt runs at most once here, whatever calls bring its ticket ([`attempts`]): a
//! re-send after a broken transfer takes over the run (or gets its result), and a replay gets
//! no second run — after the agent restarted too ([`attempt_record`]).
//!
//! [`offload`] is the NNode side: it checks and ships the inputs, waits asynchronously, and writes
//! the outputs into the task's directory and stdout/stderr where a local run puts them, so the task
//! looks as if it had run on the NNode. A transfer that breaks is retried with the same attempt.

pub mod attempt_record;
pub mod attempts;
pub mod files;
pub mod offload;
pub mod service;

use crate::launch;
use hetsched_proto as pb;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::{Notify, mpsc, oneshot};
use tracing::{debug, warn};

/// Capacity of the process queue (tasks received and waiting for a device).
pub const PROCESS_QUEUE: usize = 16;
/// Capacity of the write queue (results waiting to be sent back).
pub const WRITE_QUEUE: usize = 16;
/// Offload calls that may wait for the remote-read stage (they hold only their task's spec);
/// a call beyond it waits to be accepted.
const READ_LINE: usize = 1024;

/// Where a task of the process stage came from, and where its result goes.
pub(crate) enum Origin {
    /// Offloaded by an NNode: the result goes through the write queue to its call.
    Remote {
        /// Its attempt, and where its result goes (the latest call that brought it).
        key: attempts::Key,
        live: Arc<attempts::Live>,
        /// Its time limit as the NNode last said (`OffloadControl`).
        limit: tokio::sync::watch::Receiver<u64>,
        /// Signals the NNode sends it.
        signals: mpsc::UnboundedReceiver<nix::sys::signal::Signal>,
        /// The account it runs as (`run_as_owner`), if any.
        account: Option<crate::run_as::Account>,
    },
    /// The ANode's own task: the result goes straight back to the agent's task loop.
    Local {
        done: oneshot::Sender<pb::TaskResult>,
        /// Its stop request and time-limit changes.
        control: launch::Control,
        on_spawn: Box<dyn FnOnce(u32) + Send>,
    },
}

/// A task waiting in the process queue.
pub(crate) struct Job {
    pub assignment: pb::Assignment,
    pub spec: pb::TaskSpec,
    /// Where the task's stdout/stderr go (`WORK_DIR/job-J/…` below it).
    pub work_dir: PathBuf,
    /// Devices it needs (at least 1, at most the ANode's).
    pub gpus: u32,
    pub origin: Origin,
}

/// Counters and device states shared by the stages (read for heartbeats).
#[derive(Default)]
pub(crate) struct Counters {
    pub reading: AtomicU32,
    pub process_queue: AtomicU32,
    pub write_queue: AtomicU32,
    /// Per device: whether a task runs on it.
    pub busy: Mutex<Vec<bool>>,
    /// A device was freed.
    pub freed: Notify,
}

/// An offload key the server gave an ANode, with its epoch.
pub(crate) type EpochKey = (u64, Arc<[u8]>);

/// The accelerator pipeline of one ANode.
#[derive(Clone)]
pub struct Pipeline {
    pub(crate) process_tx: mpsc::Sender<Job>,
    /// The remote-read stage's line of offload calls.
    pub(crate) read_tx: mpsc::Sender<service::Incoming>,
    pub(crate) counters: Arc<Counters>,
    pub(crate) staging: PathBuf,
    /// The agent's work directory (accounts' directories are below it).
    pub(crate) work_dir: PathBuf,
    pub(crate) seq: Arc<std::sync::atomic::AtomicU64>,
    /// This ANode's name.
    pub(crate) node: Arc<str>,
    /// `run_as_owner`: its own GPU tasks and users' offloaded tasks run as their owners'
    /// accounts (an offloaded task staged in the account's directory, [`service`]).
    pub(crate) run_as_owner: bool,
    /// The offload keys the server gave this ANode, by epoch (its heartbeat replies'
    /// `offload_keys`: the previous, current and next epochs'), which verify each offload's
    /// ticket ([`hetsched_proto::ticket`]) by the epoch it names; empty until the first reply
    /// that carries them — every offload is refused until then.
    pub(crate) offload_keys: Arc<std::sync::RwLock<Vec<EpochKey>>>,
    /// What an offload's inputs may take here (the agent's `max_input_bytes` per file and
    /// `min_free_disk` floor, as for workflow fetches): an NNode holds the agent token, so it
    /// must not be able to fill this node's disk.
    pub(crate) input_limits: crate::dataflow::InputLimits,
    /// The offload attempts held here: each runs once ([`attempts`]).
    pub(crate) attempts: Arc<attempts::Attempts>,
}

impl Pipeline {
    /// Starts the process and remote-write stages for an ANode called `node` with `devices`
    /// devices; offloaded tasks are staged under `work_dir/accel`; a task asked to stop has
    /// `kill_grace` between SIGTERM and SIGKILL; `run_as_owner` as the agent's
    /// ([`crate::run_as`]); offloads' inputs are received within `input_limits` (the agent's
    /// `max_input_bytes` and `min_free_disk`). The attempts it runs are recorded in
    /// `work_dir/offload.attempts`, read back here ([`attempts::Attempts::recover`]): an error
    /// when that record cannot be read or written. Must run inside a Tokio runtime.
    pub fn start(
        node: &str,
        devices: launch::DeviceNames,
        work_dir: &std::path::Path,
        processes: crate::shutdown::Processes,
        kill_grace: std::time::Duration,
        run_as_owner: bool,
        input_limits: crate::dataflow::InputLimits,
    ) -> std::io::Result<Self> {
        let staging = work_dir.join("accel");
        // Leftovers of a previous agent (its calls are gone with it), in the accounts'
        // directories too (`remove_dir_all` follows no link an account put there).
        let _ = std::fs::remove_dir_all(&staging);
        if let Ok(areas) = std::fs::read_dir(work_dir.join(crate::run_as::AREA)) {
            for area in areas.flatten() {
                let _ = std::fs::remove_dir_all(area.path().join("accel"));
            }
        }
        crate::workdir::create_private_dir(&staging)?;
        let counters = Arc::new(Counters {
            busy: Mutex::new(vec![false; devices.len().max(1)]),
            ..Counters::default()
        });
        let (process_tx, process_rx) = mpsc::channel(PROCESS_QUEUE);
        let (write_tx, write_rx) = mpsc::channel(WRITE_QUEUE);
        let node: Arc<str> = Arc::from(node);
        // The attempts an earlier agent ran here: their tickets start nothing again.
        let held = Arc::new(attempts::Attempts::recover(work_dir, service::now_ms())?);
        tokio::spawn(process_stage(
            process_rx,
            write_tx,
            counters.clone(),
            (node.clone(), devices, Arc::from(work_dir)),
            processes,
            (kill_grace, run_as_owner),
            held.clone(),
        ));
        tokio::spawn(service::write_stage(
            write_rx,
            counters.clone(),
            held.clone(),
        ));
        let (read_tx, read_rx) = mpsc::channel(READ_LINE);
        let pipeline = Self {
            process_tx,
            read_tx,
            counters,
            staging,
            work_dir: work_dir.to_path_buf(),
            seq: Arc::default(),
            node,
            run_as_owner,
            offload_keys: Arc::default(),
            input_limits,
            attempts: held,
        };
        tokio::spawn(service::read_stage(read_rx, pipeline.clone()));
        Ok(pipeline)
    }

    /// Takes `keys` as this ANode's offload keys (what the server's heartbeat reply said, by
    /// epoch), in place of those it held: offloads are run only with a ticket the key of its
    /// epoch verifies. Whether they are new (the first, or others after the server rotated or
    /// changed them).
    pub fn set_offload_keys(&self, keys: &[pb::OffloadKey]) -> bool {
        let mut held = self.offload_keys.write().unwrap_or_else(|p| p.into_inner());
        let same = held.len() == keys.len()
            && held
                .iter()
                .zip(keys)
                .all(|((e, k), n)| *e == n.epoch && **k == *n.key);
        if same {
            return false;
        }
        *held = keys
            .iter()
            .map(|k| (k.epoch, k.key.as_slice().into()))
            .collect();
        true
    }

    /// The offload keys the server gave, by epoch (none before it gave any).
    pub(crate) fn offload_keys(&self) -> Vec<EpochKey> {
        self.offload_keys
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Number of devices the pipeline owns.
    pub fn devices(&self) -> u32 {
        self.counters
            .busy
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .len() as u32
    }

    /// Enqueues a job on the process queue (waits while it is full).
    pub(crate) async fn submit(&self, job: Job) -> Result<(), Job> {
        self.counters.process_queue.fetch_add(1, Ordering::SeqCst);
        match self.process_tx.send(job).await {
            Ok(()) => Ok(()),
            Err(e) => {
                self.counters.process_queue.fetch_sub(1, Ordering::SeqCst);
                Err(e.0)
            }
        }
    }

    /// Runs one of the ANode's own GPU tasks through the process stage: it waits for free devices
    /// like an offloaded task: on the devices the server assigned when they are free, else on
    /// free ones the pipeline picks (the server does not see offloaded work on its devices).
    pub async fn run_local(
        &self,
        assignment: &pb::Assignment,
        spec: &pb::TaskSpec,
        work_dir: &std::path::Path,
        control: impl Into<launch::Control>,
        on_spawn: impl FnOnce(u32) + Send + 'static,
    ) -> pb::TaskResult {
        let control = control.into();
        let (done, rx) = oneshot::channel();
        let job = Job {
            assignment: assignment.clone(),
            spec: spec.clone(),
            work_dir: work_dir.to_path_buf(),
            gpus: (assignment.devices.len() as u32).max(1),
            origin: Origin::Local {
                done,
                control,
                on_spawn: Box::new(on_spawn),
            },
        };
        if self.submit(job).await.is_err() {
            return failed(assignment, "the accelerator service has stopped");
        }
        rx.await
            .unwrap_or_else(|_| failed(assignment, "the accelerator service has stopped"))
    }

    /// Whether no offload call is being read, processed or written and no device is busy: the
    /// heartbeat's accelerator state then does not change until a call arrives.
    pub fn is_idle(&self) -> bool {
        let c = &self.counters;
        c.reading.load(Ordering::SeqCst) == 0
            && c.process_queue.load(Ordering::SeqCst) == 0
            && c.write_queue.load(Ordering::SeqCst) == 0
            && !c
                .busy
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .iter()
                .any(|&b| b)
    }

    /// The devices' state and the queue lengths, for a heartbeat; `nvml` adds memory used and
    /// utilisation where NVML is present and knows the device (`names`: the agent's,
    /// [`crate::detect::Resources::device_names`]).
    pub fn state(&self, nvml: &crate::detect::Gpus, names: &[Option<String>]) -> pb::AccelState {
        let busy = self
            .counters
            .busy
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let measured = nvml.device_states(names);
        pb::AccelState {
            devices: busy
                .iter()
                .enumerate()
                .map(|(i, &b)| {
                    let m = measured.get(i).copied().flatten();
                    pb::DeviceState {
                        device: i as u32,
                        busy: b,
                        memory_used_bytes: m.map_or(0, |m| m.0),
                        utilisation_percent: m.map_or(0, |m| m.1),
                        nvml: m.is_some(),
                    }
                })
                .collect(),
            reading: self.counters.reading.load(Ordering::SeqCst),
            process_queue: self.counters.process_queue.load(Ordering::SeqCst),
            write_queue: self.counters.write_queue.load(Ordering::SeqCst),
            process_capacity: PROCESS_QUEUE as u32,
        }
    }
}

/// A failed result of `a` with `message`: nothing ran (START_FAILED; a caller whose task did
/// run, or whose attempt was interrupted, says so instead).
pub(crate) fn failed(a: &pb::Assignment, message: &str) -> pb::TaskResult {
    let now = launch::now_ns();
    pb::TaskResult {
        task_id: a.task_id,
        attempt: a.attempt,
        exit_code: -1,
        message: message.to_string(),
        started_ns: now,
        finished_ns: now,
        success: false,
        interrupted: false,
        start_failed: false,
        usage: None,
        offload_started_ns: 0,
        offload_devices: Vec::new(),
        fetch_ms: 0,
        end: pb::TaskEnd::StartFailed.into(),
        signal: String::new(),
    }
}

/// [`failed`], for an attempt interrupted by what is not the task's fault (the server runs
/// it again).
pub(crate) fn interrupted(a: &pb::Assignment, message: &str) -> pb::TaskResult {
    let mut r = failed(a, message);
    r.interrupted = true;
    r.set_end(pb::TaskEnd::Interrupted);
    r
}

/// Takes devices for `need` from the pool — `preferred` (the server's choice) when they are all
/// free, else the lowest free ones — or `None` if not enough are free.
fn take_devices(counters: &Counters, need: u32, preferred: &[u32]) -> Option<Vec<u32>> {
    let mut busy = counters.busy.lock().unwrap_or_else(|p| p.into_inner());
    if preferred.len() == need as usize
        && preferred
            .iter()
            .all(|&d| busy.get(d as usize).is_some_and(|b| !*b))
    {
        for &d in preferred {
            busy[d as usize] = true;
        }
        return Some(preferred.to_vec());
    }
    let free: Vec<u32> = busy
        .iter()
        .enumerate()
        .filter(|(_, b)| !**b)
        .map(|(i, _)| i as u32)
        .take(need as usize)
        .collect();
    if free.len() < need as usize {
        return None;
    }
    for &d in &free {
        busy[d as usize] = true;
    }
    Some(free)
}

fn release_devices(counters: &Counters, devices: &[u32]) {
    let mut busy = counters.busy.lock().unwrap_or_else(|p| p.into_inner());
    for &d in devices {
        if let Some(b) = busy.get_mut(d as usize) {
            *b = false;
        }
    }
    drop(busy);
    // One waiter at most (the process stage); a permit is stored if it is not waiting yet, so no
    // wake-up is lost between its check and its wait.
    counters.freed.notify_one();
}

/// The process stage: FIFO over the process queue; each task waits for its devices, then runs on
/// them while the stage goes on to the next.
async fn process_stage(
    mut rx: mpsc::Receiver<Job>,
    write_tx: mpsc::Sender<service::Finished>,
    counters: Arc<Counters>,
    (node, names, agent_dir): (Arc<str>, launch::DeviceNames, Arc<Path>),
    processes: crate::shutdown::Processes,
    (kill_grace, run_as_owner): (std::time::Duration, bool),
    attempts: Arc<attempts::Attempts>,
) {
    let total = counters
        .busy
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .len() as u32;
    while let Some(job) = rx.recv().await {
        let need = job.gpus.clamp(1, total);
        let devices = loop {
            if let Some(d) = take_devices(&counters, need, &job.assignment.devices) {
                break d;
            }
            counters.freed.notified().await;
        };
        counters.process_queue.fetch_sub(1, Ordering::SeqCst);
        let (counters, write_tx, node, names, agent_dir, processes, attempts) = (
            counters.clone(),
            write_tx.clone(),
            node.clone(),
            names.clone(),
            agent_dir.clone(),
            processes.clone(),
            attempts.clone(),
        );
        tokio::spawn(async move {
            let Job {
                mut assignment,
                spec,
                work_dir,
                origin,
                ..
            } = job;
            assignment.devices = devices.clone();
            debug!(
                task = assignment.task_id,
                ?devices,
                "accelerator task starts"
            );
            match origin {
                Origin::Local {
                    done,
                    control,
                    on_spawn,
                } => {
                    let result = launch::run(
                        &assignment,
                        &spec,
                        &names,
                        &node,
                        &work_dir,
                        &agent_dir,
                        control,
                        kill_grace,
                        run_as_owner,
                        on_spawn,
                    )
                    .await;
                    release_devices(&counters, &devices);
                    let _ = done.send(result);
                }
                Origin::Remote {
                    key,
                    live,
                    limit,
                    signals,
                    account,
                } => {
                    // The requester went away (NNode dead, call broken) and sent the attempt
                    // again within the grace: kill the task.
                    let (kill_tx, kill_rx) = oneshot::channel();
                    let abandoned = Arc::new(std::sync::atomic::AtomicBool::new(false));
                    let watch = tokio::spawn(abandon_when_gone(
                        live.reply.subscribe(),
                        kill_tx,
                        abandoned.clone(),
                    ));
                    let procs = processes.clone();
                    let spawned = Arc::new(AtomicU32::new(0));
                    let spawned_in = spawned.clone();
                    let on_spawn = move |pid| {
                        procs.add(pid);
                        spawned_in.store(pid, Ordering::Relaxed);
                    };
                    let control = launch::Control {
                        kill: kill_rx,
                        limit: Some(limit),
                        signals: Some(signals),
                    };
                    let result = launch::run(
                        &assignment,
                        &spec,
                        &names,
                        &node,
                        &work_dir,
                        &agent_dir,
                        control,
                        kill_grace,
                        run_as_owner,
                        on_spawn,
                    )
                    .await;
                    watch.abort();
                    processes.remove(spawned.load(Ordering::Relaxed));
                    release_devices(&counters, &devices);
                    if abandoned.load(Ordering::SeqCst) {
                        warn!(
                            task = assignment.task_id,
                            attempt = assignment.attempt,
                            "the requesting node is gone: its result is dropped"
                        );
                        service::cleanup_task(&work_dir, Path::new(&spec.workdir));
                        attempts.ended(
                            key,
                            format!(
                                "was killed here when its call broke and was not sent again \
                                 within {} s",
                                attempts::REATTACH_GRACE.as_secs()
                            ),
                            service::now_ms(),
                        );
                        return;
                    }
                    counters.write_queue.fetch_add(1, Ordering::SeqCst);
                    let finished = service::Finished {
                        anode: node.to_string(),
                        assignment,
                        spec,
                        staging: work_dir,
                        account,
                        result,
                        key,
                        live,
                    };
                    if let Err(e) = write_tx.send(finished).await {
                        counters.write_queue.fetch_sub(1, Ordering::SeqCst);
                        service::cleanup_task(&e.0.staging, Path::new(&e.0.spec.workdir));
                        attempts.ended(
                            e.0.key,
                            "ran here, but the accelerator service stopped before its result \
                             was sent"
                                .into(),
                            service::now_ms(),
                        );
                    }
                }
            }
        });
    }
}

/// Kills a remote task (`kill`) once the call its result goes to (`reply`'s latest) went away
/// and no re-send took the run over within [`attempts::REATTACH_GRACE`], noting it in
/// `abandoned`. Ends when the kill is sent, or never (aborted when the task ends).
async fn abandon_when_gone(
    mut reply: tokio::sync::watch::Receiver<service::Reply>,
    kill: oneshot::Sender<launch::Kill>,
    abandoned: Arc<std::sync::atomic::AtomicBool>,
) {
    loop {
        let current = reply.borrow_and_update().clone();
        tokio::select! {
            () = current.closed() => {}
            // A re-send took over before this call was seen to go.
            changed = reply.changed() => {
                if changed.is_err() {
                    return;
                }
                continue;
            }
        }
        drop(current);
        match tokio::time::timeout(attempts::REATTACH_GRACE, reply.changed()).await {
            Ok(Ok(())) => continue,
            Ok(Err(_)) => return,
            Err(_) => {
                abandoned.store(true, Ordering::SeqCst);
                let _ = kill.send(launch::Kill::Server);
                return;
            }
        }
    }
}

/// The agent's rack and accelerator service settings.
#[derive(Clone, Debug, Default)]
pub struct AccelOptions {
    /// The rack the node sits in (binding never crosses racks); empty = the default rack.
    pub rack: String,
    /// Where an ANode's accelerator service binds; `None` = no service (the node's GPU tasks then
    /// run directly, and no NNode can be bound to it).
    pub listen: Option<std::net::SocketAddr>,
    /// Certificate and key (PEM) for a TLS service.
    pub tls: Option<(Vec<u8>, Vec<u8>)>,
}

/// The pipeline's devices, `count` of them: each by its name where `names` gives one.
fn device_names(names: &[Option<String>], count: usize) -> launch::DeviceNames {
    (0..count)
        .map(|i| names.get(i).cloned().flatten())
        .collect()
}

/// Starts the pipeline and its listener when the node has accelerators and a service address.
pub(crate) async fn start(
    opts: &crate::AgentOptions,
    accelerators: &[pb::Accelerator],
) -> Result<(Option<Pipeline>, Option<service::AccelListener>), crate::AgentError> {
    let Some(at) = opts.accel.listen else {
        return Ok((None, None));
    };
    if accelerators.is_empty() {
        return Ok((None, None));
    }
    let pipeline = Pipeline::start(
        &opts.name,
        device_names(&opts.resources.device_names, accelerators.len()),
        &opts.work_dir,
        opts.processes.clone(),
        opts.kill_grace,
        opts.run_as_owner,
        opts.data.input_limits(),
    )
    .map_err(|e| crate::AgentError::Config(format!("accelerator service staging: {e}")))?;
    let listener =
        service::AccelListener::bind(at, pipeline.clone(), &opts.token, opts.accel.tls.clone())
            .await
            .map_err(|e| crate::AgentError::Config(format!("accelerator service on {at}: {e}")))?;
    Ok((Some(pipeline), Some(listener)))
}

/// Applies the binding of a heartbeat reply: a new ANode gets a new client; an unbound node
/// keeps none.
pub(crate) fn apply_binding(
    current: &mut Option<offload::Client>,
    b: &pb::NodeBinding,
    opts: &crate::AgentOptions,
) {
    if !b.bound {
        if let Some(c) = current.take() {
            tracing::info!(anode = %c.target.anode, "unbound: no ANode for accelerator work");
        }
        return;
    }
    let target = offload::Target {
        anode: b.anode.clone(),
        address: b.address.clone(),
    };
    if current.as_ref().is_some_and(|c| c.target == target) {
        return;
    }
    match offload::Client::new(target, &opts.token, opts.ca_pem.as_deref()) {
        Ok(c) => {
            tracing::info!(anode = %c.target.anode, address = %c.target.address, "bound to an ANode");
            *current = Some(c);
        }
        Err(e) => {
            warn!("binding to {}: {e}", b.anode);
            *current = None;
        }
    }
}

/// How one assigned task runs.
pub(crate) enum Route {
    /// A CPU task, or a GPU task on a node without the service: directly.
    Direct,
    /// A GPU task of an ANode: through its process stage.
    Local(Box<Pipeline>),
    /// A GPU task on an NNode: offloaded to its ANode (`None`: unbound).
    Offload(Option<Box<offload::Client>>),
}

/// Where a task of `spec` runs on this node.
pub(crate) fn route(
    spec: &pb::TaskSpec,
    opts: &crate::AgentOptions,
    pipeline: Option<&Pipeline>,
    binding: Option<&offload::Client>,
) -> Route {
    if spec.variant != "gpu" {
        return Route::Direct;
    }
    if let Some(p) = pipeline {
        return Route::Local(Box::new(p.clone()));
    }
    if opts.resources.accelerators.is_empty() {
        return Route::Offload(binding.cloned().map(Box::new));
    }
    Route::Direct
}

/// Runs an assigned task by its route.
pub(crate) async fn run(
    route: Route,
    a: &pb::Assignment,
    spec: &pb::TaskSpec,
    opts: &crate::AgentOptions,
    control: launch::Control,
    on_spawn: impl FnOnce(u32) + Send + 'static,
) -> pb::TaskResult {
    match route {
        Route::Direct => {
            launch::run(
                a,
                spec,
                &opts.resources.device_names,
                &opts.name,
                &opts.work_dir,
                &opts.work_dir,
                control,
                opts.kill_grace,
                opts.run_as_owner,
                on_spawn,
            )
            .await
        }
        Route::Local(p) => {
            p.run_local(a, spec, &opts.work_dir, control, on_spawn)
                .await
        }
        // An offloaded task runs on its ANode by the spec it was shipped with.
        Route::Offload(Some(client)) => match client.for_assignment(a) {
            Ok(client) => {
                offload::run(
                    &client,
                    a,
                    spec,
                    &opts.name,
                    &opts.work_dir,
                    opts.run_as_owner,
                    control,
                )
                .await
            }
            Err(e) => interrupted(a, &format!("offload to {}: {e}", a.offload_anode)),
        },
        Route::Offload(None) => {
            // The server placed accelerator work here while this node had no ANode (the reply
            // that unbound it crossed the assignment): not a failure of the task.
            interrupted(a, "no ANode is bound to this node: the task runs elsewhere")
        }
    }
}
