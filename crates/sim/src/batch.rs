//! Batch applications of independent CPU/GPU tasks on a cluster of nodes with cores, GPUs and a
//! shared disk each, scheduled by a [`BatchPolicy`] on node heartbeats (spec 02).
//!
//! # The model
//! - **Heartbeats.** Every node beats every [`SimConfig::heartbeat_interval`], at a phase drawn per
//!   node from the seed. On a beat the node reports its real disk figures to the view
//!   ([`NodeReport`]: bytes its tasks still have to read, and how many tasks still read), the policy
//!   answers with assignments, and those tasks start at once. Tasks start only on heartbeats, as in
//!   YARN. While no task is pending anywhere the beats pause, and resume when an application
//!   arrives.
//! - **Disk.** Each node's disk is a [`SharedDisk`]: its bandwidth is shared equally by the
//!   requests reading at each moment, so contention comes out of the model, not out of the policy's
//!   predictor (spec 02 eq. (3) is only what policies *predict*).
//! - **GPU task** (one GPU plus a core): reads its whole split (V bytes) from the shared disk, then
//!   copies it to the device (`tdcg`), then computes for `tpg0 / speed` (the slowest of its
//!   devices' speed weights).
//! - **CPU task** (one core): reading is interleaved with computing. The split is cut into
//!   [`SimConfig::cpu_read_chunks`] chunks `K`; the task reads `V/K` bytes on the shared disk, then
//!   computes for `tpc0 / (K · core_speed)`, `K` times.
//! - **Users.** Each `user` the applications name is one group of the scheduler's view, as each
//!   runtime user is: its caps ([`SimConfig::users`], a workload's `[[user]]`) hold always, its
//!   shares weigh its usage under fair share ([`SimConfig::fair_share`]).
//! - **Accelerator need.** An application's `accelerator = "required" | "preferred"`
//!   ([`SimConfig::accelerator`]) is given to the view with `SchedulerView::set_accelerator_need`
//!   when it arrives, as the runtime does: every policy then runs a required application's tasks
//!   only as GPU tasks, and a preferred one's as CPU tasks only on nodes that reach no device of its
//!   kind while no node could take them on a device.
//!
//! # How the profile's read time relates to the disk
//! A task alone on a node reads at the full bandwidth, so its read takes `V / BW`. The profile's
//! `read` (`tdc0`, `tdg0`) is what the *policy* believes; the simulator never uses it to time a read.
//! A consistent profile therefore has `read = V / BW` for the disk it was measured on; then a task
//! alone takes exactly its base time (plus nothing: heartbeats only delay starts). The scenarios
//! build their profiles that way.
//!
//! # What counts as "reading" in a heartbeat
//! Spec 02 defines `TotalIO` as the node's total IO request size and `#IOtask` as the number of
//! tasks issuing IO. By default ([`IoReport::InFlight`]) a heartbeat reports exactly that: the
//! tasks whose reads the disk is serving at that moment and the bytes those reads still need. A CPU
//! task interleaves reading and computing, so it counts only while one of its chunks is being read,
//! and only with that chunk. [`IoReport::Remaining`] is the alternative reading — every task with
//! input left, with all its unread bytes — kept for comparison (`--io-report remaining`); it makes a
//! node running slow-reading CPU tasks look busy to HDAS for their whole lifetime.
//! `docs/results/hdas.md` gives the experiment under both.
//!
//! # Safety nets
//! Inputs are validated before anything runs ([`SimError`] names the application). The engine audits
//! every start against its own record of the node (cores, memory, GPUs, device numbers) and every
//! task against double starts, and stops with an error if the policy placed nothing during a whole
//! round of heartbeats while tasks are pending and nothing runs.
use hetsched_core::model::application::AcceleratorNeed;

use crate::engine::{self, EventQueue, Flow, Model};
use crate::error::SimError;
use crate::metrics::{AppResult, LoadSnapshot, Progress, SimResult, TaskRecord, TimeSeries};
use crate::platform::disk::SharedDisk;
use hetsched_core::input::workload::MAX_WORKLOAD_TASKS;
use hetsched_core::policy::batch::BatchPolicy;
use hetsched_core::policy::batch::multi_node::Gatherer;
use hetsched_core::policy::batch::preempt::{Candidate, Rules, preempt_on};
use hetsched_core::time::{NANOS_PER_SEC, Time, to_secs};
use hetsched_core::{
    AppId, Application, Assignment, Cluster, GroupState, NodeId, NodeReport, Resources,
    SchedulerView, TaskId, UserLimits, Variant,
};
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};

/// Settings of a batch simulation.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SimConfig {
    /// Time between two heartbeats of one node (default 1 s).
    pub heartbeat_interval: Time,
    /// Seed of every random choice (heartbeat phases); the same seed gives the same run.
    pub seed: u64,
    /// Chunks `K` a CPU task's input is read in, each followed by `1/K` of its compute (default 8).
    pub cpu_read_chunks: u32,
    /// Draw each node's heartbeat phase uniformly in `[0, interval)` from the seed (default true);
    /// when false every node beats at `0, interval, 2·interval, …`.
    pub randomize_heartbeat_phase: bool,
    /// Grid on which the load time series is sampled (default 1 s); `None` records none.
    pub sample_interval: Option<Time>,
    /// Keep one [`TaskRecord`] per task in the result (default true).
    pub record_tasks: bool,
    /// Stop with an error if simulated time passes this (default: no limit).
    pub time_limit: Option<Time>,
    /// What a heartbeat reports as `TotalIO` and `#IOtask` (see [`IoReport`]).
    pub io_report: IoReport,
    /// Fair share between the workload's users, usage halving every this long (the runtime's
    /// `[fair_share] half_life`; `hetsched_core::model::fair_share`); `None` (the default): off.
    pub fair_share: Option<Time>,
    /// Users' shares and caps (a workload's `[[user]]`; the runtime's `hetsched user limit`),
    /// each name once. A user the applications name and this list does not has 1 share and no
    /// caps; a listed user no application names changes nothing. Caps hold with or without fair
    /// share; shares count only under it.
    pub users: Vec<UserLimits>,
    /// Priority preemption (the runtime's `preemption = "requeue"`): on a heartbeat, waiting work
    /// of a higher priority that fits nowhere stops lower-priority tasks on the node
    /// (`hetsched_core::policy::batch::preempt`); they lose their progress and go back to the
    /// front of their queues (default false).
    pub preemption: bool,
    /// Under preemption, a task that has run less than this is not stopped (the runtime's
    /// `preempt_exempt_time`; default 0).
    pub preempt_exempt_time: Time,
    /// Whether each application's tasks need an accelerator (a workload's `accelerator`, spec
    /// 01): `accelerator[i]` for `apps[i]`, applied through `SchedulerView::set_accelerator_need`
    /// as the runtime applies it; applications past the end of the list (by default, all) are
    /// `none`. A required or preferred application needs a GPU variant.
    pub accelerator: Vec<AcceleratorNeed>,
}

/// What a node's heartbeat counts as its disk load (spec 02: "total IO request size" and "number of
/// tasks issuing IO").
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum IoReport {
    /// Only requests the disk is serving now: tasks in a read phase, and the bytes left of those
    /// reads (a CPU task counts with its current chunk only). The default: spec 02's "tasks issuing
    /// IO".
    #[default]
    InFlight,
    /// Every running task with input left counts, with all its unread bytes — also a CPU task
    /// computing between two chunks and the chunks it has not requested yet.
    Remaining,
}

impl Default for SimConfig {
    fn default() -> Self {
        Self {
            heartbeat_interval: NANOS_PER_SEC,
            seed: 0,
            cpu_read_chunks: 8,
            randomize_heartbeat_phase: true,
            sample_interval: Some(NANOS_PER_SEC),
            record_tasks: true,
            time_limit: None,
            io_report: IoReport::default(),
            fair_share: None,
            users: Vec::new(),
            preemption: false,
            preempt_exempt_time: 0,
            accelerator: Vec::new(),
        }
    }
}

/// Simulates `apps` on `cluster` under `policy` until every task has finished.
///
/// `progress` is called at the start, each time another 1 % of the tasks has finished, and at the
/// end. Applications must have dense ids in order (`apps[i].id == AppId(i)`) and be listed in
/// submission order; each arrives at its `submit_time`.
pub fn simulate(
    cluster: &Cluster,
    apps: &[Application],
    policy: &mut dyn BatchPolicy,
    config: &SimConfig,
    progress: &mut dyn FnMut(Progress),
) -> Result<SimResult, SimError> {
    simulate_believing(cluster, apps, apps, policy, config, progress)
}

/// Like [`simulate`], but the scheduler's view holds `believed`, a copy of `apps` whose profiles
/// may be wrong (e.g. ±10 % noise in `hetsched sim sweep`): tasks run as `apps` say, policies
/// predict from `believed`. `believed[i]` must describe the same application as `apps[i]` (id,
/// task count, variants and requests); only its profile times may differ.
pub fn simulate_believing(
    cluster: &Cluster,
    apps: &[Application],
    believed: &[Application],
    policy: &mut dyn BatchPolicy,
    config: &SimConfig,
    progress: &mut dyn FnMut(Progress),
) -> Result<SimResult, SimError> {
    validate(cluster, apps, policy, config)?;
    let same_shape = believed.len() == apps.len()
        && apps.iter().zip(believed).all(|(a, b)| {
            a.id == b.id
                && a.tasks == b.tasks
                && a.submit_time == b.submit_time
                && a.request(Variant::Cpu) == b.request(Variant::Cpu)
                && a.request(Variant::Gpu) == b.request(Variant::Gpu)
        });
    if !same_shape {
        return Err(SimError::Config {
            field: "believed",
            problem: "the believed applications must match the real ones except in profile times"
                .into(),
        });
    }
    let total: u64 = apps.iter().map(|a| u64::from(a.tasks)).sum();
    if total > MAX_WORKLOAD_TASKS {
        return Err(SimError::Application {
            app: "(workload)".into(),
            problem: format!(
                "{total} tasks in all: at most {MAX_WORKLOAD_TASKS} (the simulator holds every \
                 task in memory)"
            ),
        });
    }
    let total_usize = usize::try_from(total).map_err(|_| SimError::Application {
        app: "(workload)".into(),
        problem: format!("{total} tasks do not fit in memory on this machine"),
    })?;
    let mut view = SchedulerView::with_cluster(cluster)?;
    // In-heartbeat updates count a dispatch the way the next heartbeat will report it.
    view.set_cpu_read_chunks(match config.io_report {
        IoReport::InFlight => config.cpu_read_chunks,
        IoReport::Remaining => 1,
    });
    view.set_fair_share(config.fair_share);
    // Each user's applications are one group of the view (as the runtime's users are), by the
    // order users first appear.
    let mut users: Vec<&str> = Vec::new();
    let groups: Vec<Option<u32>> = apps
        .iter()
        .map(|a| {
            a.user
                .as_deref()
                .map(|u| match users.iter().position(|&k| k == u) {
                    Some(g) => g as u32,
                    None => {
                        users.push(u);
                        (users.len() - 1) as u32
                    }
                })
        })
        .collect();
    let limits = limits_by_user(config);
    for (g, user) in users.iter().enumerate() {
        if let Some(l) = limits.get(user) {
            view.set_fair_shares(g as u32, l.shares);
            view.set_group_cap(g as u32, l.cap);
        }
    }

    let mut rng = rand_pcg::Pcg64Mcg::seed_from_u64(config.seed);
    let interval = config.heartbeat_interval;
    let nodes: Vec<NodeSim> = cluster
        .nodes
        .iter()
        .map(|n| NodeSim {
            capacity: n.capacity(),
            used: Resources::default(),
            device_busy: vec![false; n.accelerators.len()],
            device_speed: n.accelerators.iter().map(|a| a.speed).collect(),
            core_speed: n.core_speed,
            disk: SharedDisk::new(n.disk_read_bw),
            disk_dirty: false,
            unissued_bytes: 0,
            io_tasks: 0,
            phase: if config.randomize_heartbeat_phase {
                rng.random_range(0..interval)
            } else {
                0
            },
            beating: false,
        })
        .collect();

    let mut first_task = Vec::with_capacity(apps.len());
    let mut next = 0u64;
    for a in apps {
        first_task.push(next);
        next += u64::from(a.tasks);
    }
    let mut sim = BatchSim {
        policy_name: policy.name(),
        policy,
        progress,
        config,
        view,
        groups,
        apps,
        believed,
        first_task,
        nodes,
        running: vec![None; total_usize],
        finished: vec![false; total_usize],
        app_stats: apps
            .iter()
            .map(|a| AppStats {
                first_start: None,
                last_end: a.submit_time,
                cpu_tasks: 0,
                gpu_tasks: 0,
                slowdown_sum: 0.0,
                preempted: 0,
            })
            .collect(),
        arrived: 0,
        pending: 0,
        running_count: 0,
        completed: 0,
        total,
        progress_step: (total / 100).max(1),
        empty_beats: 0,
        heartbeats: 0,
        makespan: 0,
        slowdown_sum: 0.0,
        gpu_tasks: 0,
        records: Vec::with_capacity(if config.record_tasks { total_usize } else { 0 }),
        series: TimeSeries::default(),
        next_sample: 0,
        dirty: Vec::new(),
        done_reads: Vec::new(),
        requests: distinct_requests(apps),
        sample_step: config.sample_interval.unwrap_or(NANOS_PER_SEC),
        gatherer: Gatherer::default(),
        multi_node: std::collections::HashMap::new(),
        any_multi_node: apps.iter().any(Application::is_multi_node),
        on_node: vec![Vec::new(); cluster.nodes.len()],
        attempts: std::collections::HashMap::new(),
        preemptions: 0,
    };

    let mut queue = EventQueue::with_capacity(cluster.nodes.len() * 8 + apps.len());
    for (i, a) in apps.iter().enumerate() {
        queue.schedule(a.submit_time, Event::Arrival(i as u32));
    }
    (sim.progress)(Progress {
        completed_tasks: 0,
        total_tasks: total,
        now: 0,
    });
    let end = engine::run(&mut sim, &mut queue)?;
    if sim.completed != total {
        return Err(SimError::Internal(format!(
            "the event queue ran dry with {} of {total} tasks finished",
            sim.completed
        )));
    }
    sim.finish_series(end);
    (sim.progress)(Progress {
        completed_tasks: total,
        total_tasks: total,
        now: sim.makespan,
    });
    Ok(sim.into_result(queue.handled()))
}

/// Checks the configuration, the cluster and that every application can run under `policy`.
fn validate(
    cluster: &Cluster,
    apps: &[Application],
    policy: &dyn BatchPolicy,
    config: &SimConfig,
) -> Result<(), SimError> {
    if config.heartbeat_interval == 0 {
        return Err(SimError::Config {
            field: "heartbeat_interval",
            problem: "must be positive".into(),
        });
    }
    if config.cpu_read_chunks == 0 {
        return Err(SimError::Config {
            field: "cpu_read_chunks",
            problem: "must be at least 1".into(),
        });
    }
    if config.sample_interval == Some(0) {
        return Err(SimError::Config {
            field: "sample_interval",
            problem: "must be positive (or absent to record no series)".into(),
        });
    }
    cluster.validate()?;
    for u in &config.users {
        use hetsched_core::model::user::MAX_SHARES;
        if !(1..=MAX_SHARES).contains(&u.shares) {
            return Err(SimError::Config {
                field: "users",
                problem: format!(
                    "user `{}` has {} shares; shares are 1 to {MAX_SHARES}",
                    u.name, u.shares
                ),
            });
        }
    }
    let by_user = limits_by_user(config);
    if by_user.len() < config.users.len() {
        let twice = config
            .users
            .iter()
            .enumerate()
            .find(|(i, u)| config.users[..*i].iter().any(|v| v.name == u.name))
            .map_or("", |(_, u)| u.name.as_str());
        return Err(SimError::Config {
            field: "users",
            problem: format!("user `{twice}` is listed twice"),
        });
    }
    if config.accelerator.len() > apps.len() {
        return Err(SimError::Config {
            field: "accelerator",
            problem: format!(
                "gives {} accelerator needs for {} applications",
                config.accelerator.len(),
                apps.len()
            ),
        });
    }
    let mut last_submit = 0;
    for (i, a) in apps.iter().enumerate() {
        let bad = |problem: String| SimError::Application {
            app: a.name.clone(),
            problem,
        };
        if a.id != AppId(i as u32) {
            return Err(bad(format!(
                "has id {} at position {i}; ids must be dense and in order",
                a.id
            )));
        }
        if a.submit_time < last_submit {
            return Err(bad(
                "is submitted before the application listed ahead of it; list applications in \
                 submission order"
                    .into(),
            ));
        }
        last_submit = a.submit_time;
        let need = config
            .accelerator
            .get(i)
            .copied()
            .unwrap_or(AcceleratorNeed::None);
        if need != AcceleratorNeed::None && a.gpu.is_none() {
            return Err(bad(format!(
                "is `accelerator = \"{}\"` but has no GPU variant",
                need.as_str()
            )));
        }
        let limits = a.user.as_deref().and_then(|u| by_user.get(u).copied());
        if a.cpu.is_none() && a.gpu.is_none() {
            return Err(bad("has neither a CPU nor a GPU variant".into()));
        }
        if a.is_multi_node() {
            if a.gpu.is_some() || a.cpu.as_ref().is_none_or(|c| c.request.cores != 1) {
                return Err(bad(
                    "holds whole nodes (`nodes`): give it one CPU variant of one core".into(),
                ));
            }
            let able = cluster
                .nodes
                .iter()
                .filter(|n| n.has_attributes(&a.requires))
                .count();
            if able < a.nodes as usize {
                return Err(SimError::Unrunnable {
                    app: a.name.clone(),
                    policy: policy.name().to_string(),
                    reason: format!(
                        "it holds {} whole nodes per task, and {} of the cluster {} its attributes",
                        a.nodes,
                        hetsched_core::text::count(able as u64, "node"),
                        if able == 1 { "has" } else { "have" }
                    ),
                });
            }
            // A gathering starts only while its user's cap has room for a core per node.
            if let Some(l) = limits
                && let Some(over) = beyond_cap(l, &Resources::new(a.nodes, 0, 0))
            {
                return Err(SimError::Unrunnable {
                    app: a.name.clone(),
                    policy: policy.name().to_string(),
                    reason: format!(
                        "each task holds {} whole nodes, a core of each at the least: {over}",
                        a.nodes
                    ),
                });
            }
            continue;
        }
        if a.cpu.as_ref().is_some_and(|c| c.request.cores == 0) {
            return Err(bad("its CPU variant must request at least one core".into()));
        }
        if a.gpu.as_ref().is_some_and(|g| g.request.gpus == 0) {
            return Err(bad("its GPU variant must request at least one GPU".into()));
        }
        check_runnable(cluster, a, need, policy, limits)?;
    }
    Ok(())
}

/// The users' shares and caps by name.
fn limits_by_user(config: &SimConfig) -> std::collections::HashMap<&str, &UserLimits> {
    config.users.iter().map(|l| (l.name.as_str(), l)).collect()
}

/// What a task holding `request` would take past `user`'s caps even with nothing else of the
/// user's running (`"more cores than user `alice` may hold at once (max_cores = 4)"`); `None`:
/// it fits under them.
fn beyond_cap(user: &UserLimits, request: &Resources) -> Option<String> {
    let alone = GroupState {
        cap: user.cap,
        usage: Resources::default(),
    };
    let over = alone.capped_by(request)?;
    let limit = match over {
        hetsched_core::CappedResource::Cores => format!("max_cores = {}", user.cap.cores),
        hetsched_core::CappedResource::Memory => {
            format!("max_memory = {} bytes", user.cap.memory_bytes)
        }
        hetsched_core::CappedResource::Gpus => format!("max_gpus = {}", user.cap.gpus),
    };
    Some(format!(
        "more {over} than user `{}` may hold at once ({limit})",
        user.name
    ))
}

/// Whether some node can ever hold one task of `app` in a variant `policy` runs, under its
/// user's caps (`limits`), which no task may pass even alone.
fn check_runnable(
    cluster: &Cluster,
    app: &Application,
    need: AcceleratorNeed,
    policy: &dyn BatchPolicy,
    limits: Option<&UserLimits>,
) -> Result<(), SimError> {
    let allowed = policy.variants();
    let mut reasons = Vec::new();
    for variant in [Variant::Cpu, Variant::Gpu] {
        let Some(request) = app.request(variant) else {
            reasons.push(format!(
                "it has no {} variant",
                variant.to_string().to_uppercase()
            ));
            continue;
        };
        if variant == Variant::Cpu && need == AcceleratorNeed::Required {
            reasons.push("it requires an accelerator (`accelerator = \"required\"`)".into());
            continue;
        }
        if !allowed.contains(&variant) {
            reasons.push(format!(
                "the policy never runs {} tasks",
                variant.to_string().to_uppercase()
            ));
            continue;
        }
        let kind = app.gpu.as_ref().and_then(|g| g.kind.as_deref());
        let fits = cluster.nodes.iter().any(|n| {
            n.has_attributes(&app.requires)
                && n.capacity().fits(&request)
                && (variant == Variant::Cpu
                    || n.accelerators
                        .iter()
                        .filter(|acc| kind.is_none_or(|k| acc.kind == k))
                        .count() as u32
                        >= request.gpus)
        });
        let over_cap = limits.and_then(|l| beyond_cap(l, &request));
        if fits && over_cap.is_none() {
            return Ok(());
        }
        if let Some(over) = over_cap {
            reasons.push(format!(
                "its {} task asks for {over}",
                variant.to_string().to_uppercase()
            ));
            continue;
        }
        reasons.push(match variant {
            Variant::Cpu => format!(
                "no node has room for its CPU task ({} cores, {} bytes of memory)",
                request.cores, request.memory_bytes
            ),
            Variant::Gpu => format!(
                "no node has room for its GPU task ({} GPUs{}, {} cores, {} bytes of memory)",
                request.gpus,
                kind.map(|k| format!(" of kind `{k}`")).unwrap_or_default(),
                request.cores,
                request.memory_bytes
            ),
        });
    }
    let mut reason = reasons.join("; ");
    if !app.requires.is_empty() {
        reason = format!(
            "{reason} (among the nodes with {})",
            app.requires.join(" + ")
        );
    }
    Err(SimError::Unrunnable {
        app: app.name.clone(),
        policy: policy.name().to_string(),
        reason,
    })
}

/// The batch model's events.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Event {
    /// Application `i` is submitted.
    Arrival(u32),
    /// Node `i` beats.
    Heartbeat(u32),
    /// The disk of `node` may have finished a read (stale unless `generation` is current).
    Disk { node: u32, generation: u64 },
    /// A timed phase (copy, compute) of a task's `attempt` ended (stale if the attempt was
    /// preempted).
    TaskStep { task: u64, attempt: u32 },
}

/// The simulator's own record of a node (independent of the view, so it can audit the policy).
#[derive(Debug)]
struct NodeSim {
    capacity: Resources,
    used: Resources,
    device_busy: Vec<bool>,
    device_speed: Vec<f64>,
    core_speed: f64,
    /// Reads by (task, attempt).
    disk: SharedDisk<(u64, u32)>,
    /// The disk changed during the current event; its completion event must be rescheduled.
    disk_dirty: bool,
    /// Input bytes that running tasks have not yet asked the disk for (CPU tasks' later chunks).
    unissued_bytes: u64,
    /// Running tasks with input left to read.
    io_tasks: u32,
    phase: Time,
    beating: bool,
}

/// A running task.
#[derive(Clone, Debug)]
struct Running {
    assignment: Assignment,
    /// 0, then one more each time the task was preempted.
    attempt: u32,
    start: Time,
    /// The next step to take.
    step: u32,
    /// Reads still to finish.
    reads_left: u32,
    split: u64,
    copy: Time,
    compute: Time,
}

/// One step of a task's life.
enum Work {
    Read(u64),
    Wait(Time),
}

impl Running {
    fn steps(&self, chunks: u32) -> u32 {
        match self.assignment.variant {
            Variant::Gpu => 3,
            Variant::Cpu => 2 * chunks,
        }
    }

    /// Step `i`: GPU = read, copy, compute; CPU = (read chunk, compute chunk) × K.
    fn work(&self, i: u32, chunks: u32) -> Work {
        match self.assignment.variant {
            Variant::Gpu => match i {
                0 => Work::Read(self.split),
                1 => Work::Wait(self.copy),
                _ => Work::Wait(self.compute),
            },
            Variant::Cpu if i.is_multiple_of(2) => Work::Read(share(self.split, i / 2, chunks)),
            Variant::Cpu => Work::Wait(share(self.compute, i / 2, chunks)),
        }
    }
}

/// Part `i` of `total` cut into `parts` integer pieces that add up to `total` exactly.
fn share(total: u64, i: u32, parts: u32) -> u64 {
    let cut = |k: u32| (u128::from(total) * u128::from(k) / u128::from(parts)) as u64;
    cut(i + 1) - cut(i)
}

#[derive(Debug)]
struct AppStats {
    first_start: Option<Time>,
    last_end: Time,
    cpu_tasks: u32,
    gpu_tasks: u32,
    slowdown_sum: f64,
    /// Its tasks' attempts stopped by preemption.
    preempted: u32,
}

struct BatchSim<'a> {
    policy: &'a mut dyn BatchPolicy,
    policy_name: &'static str,
    progress: &'a mut dyn FnMut(Progress),
    config: &'a SimConfig,
    view: SchedulerView,
    /// Each application's group in the view (its user's), by id.
    groups: Vec<Option<u32>>,
    apps: &'a [Application],
    /// What the view is told about each application (see [`simulate_believing`]).
    believed: &'a [Application],
    first_task: Vec<u64>,
    nodes: Vec<NodeSim>,
    running: Vec<Option<Running>>,
    finished: Vec<bool>,
    app_stats: Vec<AppStats>,
    arrived: usize,
    pending: u64,
    running_count: u64,
    completed: u64,
    total: u64,
    progress_step: u64,
    empty_beats: usize,
    heartbeats: u64,
    makespan: Time,
    slowdown_sum: f64,
    gpu_tasks: u64,
    records: Vec<TaskRecord>,
    series: TimeSeries,
    next_sample: Time,
    dirty: Vec<u32>,
    done_reads: Vec<(u64, u32)>,
    /// Every distinct request of every application's variants.
    requests: Vec<Resources>,
    /// The sampling grid's step now (doubles when the series grows past [`MAX_SAMPLES`]).
    sample_step: Time,
    /// Gathers whole nodes for multi-node tasks (the core's, as the runtime drives it).
    gatherer: Gatherer,
    /// Running multi-node tasks' nodes, by task.
    multi_node: std::collections::HashMap<u64, Vec<NodeId>>,
    /// Whether any application has multi-node tasks (else beats skip the gatherer).
    any_multi_node: bool,
    /// Running one-node tasks by node (what preemption may stop there).
    on_node: Vec<Vec<u64>>,
    /// The next attempt of each task that was preempted (others start at 0).
    attempts: std::collections::HashMap<u64, u32>,
    /// Attempts stopped by preemption.
    preemptions: u64,
}

/// Most samples a load series holds before its grid coarsens.
const MAX_SAMPLES: usize = 1 << 20;

fn distinct_requests(apps: &[Application]) -> Vec<Resources> {
    let mut out: Vec<Resources> = Vec::new();
    for a in apps {
        for r in [Variant::Cpu, Variant::Gpu]
            .into_iter()
            .filter_map(|v| a.request(v))
        {
            if !out.contains(&r) {
                out.push(r);
            }
        }
    }
    out
}

impl BatchSim<'_> {
    fn over_allocation(&self, node: NodeId, time: Time, detail: String) -> SimError {
        SimError::OverAllocation {
            policy: self.policy_name.to_string(),
            node,
            time,
            detail,
        }
    }

    fn arrival(&mut self, i: u32, queue: &mut EventQueue<Event>) -> Result<(), SimError> {
        let now = queue.now();
        let app = self
            .apps
            .get(i as usize)
            .ok_or_else(|| SimError::Internal(format!("arrival of unknown application {i}")))?;
        let first = self.first_task[i as usize];
        let ids = (first..first + u64::from(app.tasks)).map(TaskId);
        let told = self.believed.get(i as usize).unwrap_or(app);
        self.view.add_application(told.clone(), ids)?;
        let need = self.config.accelerator.get(i as usize).copied();
        if let Some(need) = need.filter(|&n| n != AcceleratorNeed::None) {
            self.view.set_accelerator_need(told.id, need)?;
        }
        if let Some(&Some(g)) = self.groups.get(i as usize) {
            self.view.set_app_group(told.id, Some(g))?;
        }
        self.arrived += 1;
        self.pending += u64::from(app.tasks);
        if self.pending > 0 {
            let interval = self.config.heartbeat_interval;
            for (idx, n) in self.nodes.iter_mut().enumerate() {
                if !n.beating {
                    n.beating = true;
                    // The node's next beat on its own grid `phase + k · interval`.
                    let at = if now <= n.phase {
                        n.phase
                    } else {
                        n.phase.saturating_add(
                            (now - n.phase).div_ceil(interval).saturating_mul(interval),
                        )
                    };
                    queue.schedule(at, Event::Heartbeat(idx as u32));
                }
            }
        }
        Ok(())
    }

    fn heartbeat(&mut self, node: u32, queue: &mut EventQueue<Event>) -> Result<(), SimError> {
        let now = queue.now();
        // The view's clock: fair share samples what each user holds as it moves.
        self.view.set_now(now);
        let idx = node as usize;
        if self.pending == 0 {
            // Nothing to place anywhere: the node pauses until the next arrival.
            self.nodes[idx].beating = false;
            return Ok(());
        }
        let id = NodeId(node);
        if self.any_multi_node {
            // Multi-node tasks gather whole nodes at every beat, full nodes included (they are
            // held as they drain). Every simulated node takes work; nodes beat on their own
            // grid, so the nodes the gatherer would wake need nothing more.
            let mut wake = Vec::new();
            let started =
                self.gatherer
                    .on_node_update(&mut self.view, id, &|_: NodeId| true, &mut wake);
            if let Some((app, held)) = started {
                match self.view.start_multi_node(app, held) {
                    Ok(a) => self.start_multi_node(a, now, queue)?,
                    Err(held) => {
                        for h in &held {
                            self.view.give_back(h);
                        }
                    }
                }
            }
        }
        let n = &self.nodes[idx];
        let free = n.capacity - n.used;
        if !self.requests.iter().any(|r| free.fits(r)) {
            // Nothing any application asks for fits: the policy could place nothing, so it is
            // not consulted (this keeps beats of full nodes cheap).
            let preempted = self.preempt(node, now, queue)?;
            queue.schedule(
                now.saturating_add(self.config.heartbeat_interval),
                Event::Heartbeat(node),
            );
            if preempted {
                self.empty_beats = 0;
            } else {
                self.empty_beat(now)?;
            }
            return Ok(());
        }
        let report = match self.config.io_report {
            IoReport::Remaining => NodeReport {
                total_io_bytes: n.disk.outstanding_bytes(now) + n.unissued_bytes as f64,
                io_tasks: n.io_tasks,
            },
            IoReport::InFlight => NodeReport {
                total_io_bytes: n.disk.outstanding_bytes(now),
                io_tasks: n.disk.readers() as u32,
            },
        };
        self.view.node_report(id, report)?;
        self.heartbeats += 1;
        let assignments = self.policy.on_node_update(&mut self.view, id, now);
        let mut placed = assignments.len();
        for a in assignments {
            self.start(a, now, queue)?;
        }
        if self.preempt(node, now, queue)? {
            placed += 1;
        }
        queue.schedule(
            now.saturating_add(self.config.heartbeat_interval),
            Event::Heartbeat(node),
        );
        if placed == 0 {
            self.empty_beat(now)
        } else {
            self.empty_beats = 0;
            Ok(())
        }
    }

    /// Counts a heartbeat that placed nothing; a whole round of them while nothing runs and tasks
    /// are pending means the policy will never place them.
    fn empty_beat(&mut self, now: Time) -> Result<(), SimError> {
        if self.running_count == 0 && self.pending > 0 && self.arrived == self.apps.len() {
            self.empty_beats += 1;
            if self.empty_beats > self.nodes.len() {
                let apps = self
                    .view
                    .pending_apps()
                    .map(|a| format!("`{}`", a.app.name))
                    .collect::<Vec<_>>()
                    .join(", ");
                return Err(SimError::Stuck {
                    policy: self.policy_name.to_string(),
                    time_s: to_secs(now),
                    apps,
                });
            }
        } else {
            self.empty_beats = 0;
        }
        Ok(())
    }

    fn start(
        &mut self,
        a: Assignment,
        now: Time,
        queue: &mut EventQueue<Event>,
    ) -> Result<(), SimError> {
        let app = self.apps.get(a.app.index()).ok_or_else(|| {
            SimError::Internal(format!("policy assigned unknown application {}", a.app))
        })?;
        let request = app.request(a.variant).ok_or_else(|| {
            SimError::Internal(format!(
                "policy ran `{}` as a {} task, which it does not have",
                app.name, a.variant
            ))
        })?;
        let first = self.first_task[a.app.index()];
        let task = a.task.0;
        if task < first || task >= first + u64::from(app.tasks) {
            return Err(SimError::Internal(format!(
                "{} is not a task of `{}`",
                a.task, app.name
            )));
        }
        let t = task as usize;
        if self.finished[t] || self.running[t].is_some() {
            return Err(SimError::Internal(format!("{} started twice", a.task)));
        }
        let node = a.node;
        let Some(n) = self.nodes.get(node.index()) else {
            return Err(SimError::Internal(format!(
                "policy assigned unknown {node}"
            )));
        };
        let used = n.used + request;
        if !n.capacity.fits(&used) {
            return Err(self.over_allocation(
                node,
                now,
                format!("{used:?} in use exceeds its capacity {:?}", n.capacity),
            ));
        }
        if a.variant == Variant::Gpu && (a.devices.len() as u32) < request.gpus {
            return Err(self.over_allocation(
                node,
                now,
                format!(
                    "{} got {} devices for a request of {} GPUs",
                    a.task,
                    a.devices.len(),
                    request.gpus
                ),
            ));
        }
        for &d in &a.devices {
            if n.device_busy.get(d as usize).is_none_or(|busy| *busy) {
                return Err(self.over_allocation(
                    node,
                    now,
                    format!("device {d} is busy or does not exist"),
                ));
            }
        }

        let n = &mut self.nodes[node.index()];
        n.used = used;
        let mut speed = f64::INFINITY;
        for &d in &a.devices {
            n.device_busy[d as usize] = true;
            speed = speed.min(n.device_speed[d as usize]);
        }
        if !speed.is_finite() {
            speed = 1.0;
        }
        let (copy, compute) = match (a.variant, &app.gpu, &app.cpu) {
            (Variant::Gpu, Some(g), _) => (g.copy, scale(g.compute, speed)),
            (Variant::Cpu, _, Some(c)) => (0, scale(c.compute, n.core_speed)),
            _ => (0, 0),
        };
        let running = Running {
            assignment: a,
            attempt: self.attempts.get(&task).copied().unwrap_or(0),
            start: now,
            step: 0,
            reads_left: 0,
            split: app.split_bytes,
            copy,
            compute,
        };
        self.launch(running, now, queue);
        Ok(())
    }

    /// Counts a task's reads (its node's I/O figures take them), records it as running and takes
    /// its first steps.
    fn launch(&mut self, mut running: Running, now: Time, queue: &mut EventQueue<Event>) {
        let chunks = self.config.cpu_read_chunks;
        running.reads_left = (0..running.steps(chunks))
            .filter(|&i| matches!(running.work(i, chunks), Work::Read(b) if b > 0))
            .count() as u32;
        if running.reads_left > 0 {
            let n = &mut self.nodes[running.assignment.node.index()];
            n.io_tasks += 1;
            // Saturating: a split is at most 1 TiB from a workload file
            // (`input::workload::MAX_SPLIT`), but a model built by hand is not bounded.
            n.unissued_bytes = n.unissued_bytes.saturating_add(running.split);
        }
        let stats = &mut self.app_stats[running.assignment.app.index()];
        stats.first_start.get_or_insert(now);
        let task = running.assignment.task.0;
        let attempt = running.attempt;
        if !self.multi_node.contains_key(&task) {
            self.on_node[running.assignment.node.index()].push(task);
        }
        self.running[task as usize] = Some(running);
        self.pending -= 1;
        self.running_count += 1;
        self.advance_task(task, attempt, now, queue);
    }

    /// Starts multi-node task `a` on the whole nodes the view holds for it: each must be
    /// entirely unused here (the audit). The task reads its input split on its first node, as a
    /// CPU task does, and computes for its CPU base time at the slowest of its nodes' core speeds
    /// (ranks in lockstep wait for the slowest): never faster than a one-node task of the same
    /// profile on any of them, so the makespan lower bound stays below it.
    fn start_multi_node(
        &mut self,
        a: Assignment,
        now: Time,
        queue: &mut EventQueue<Event>,
    ) -> Result<(), SimError> {
        let nodes: Vec<NodeId> = self
            .view
            .multi_node_held(a.app, a.task)
            .map(|h| h.iter().map(|h| h.node).collect())
            .unwrap_or_default();
        let task = a.task.0;
        let t = task as usize;
        if self.finished.get(t).is_none_or(|&f| f) || self.running[t].is_some() {
            return Err(SimError::Internal(format!("{} started twice", a.task)));
        }
        let mut speed = f64::INFINITY;
        for &n in &nodes {
            let s = &self.nodes[n.index()];
            if s.used != Resources::default() {
                return Err(self.over_allocation(
                    n,
                    now,
                    format!("a multi-node task took it while {:?} was in use", s.used),
                ));
            }
            speed = speed.min(s.core_speed);
        }
        for &n in &nodes {
            let s = &mut self.nodes[n.index()];
            s.used = s.capacity;
        }
        let app = &self.apps[a.app.index()];
        let compute = app.cpu.as_ref().map_or(0, |c| {
            scale(c.compute, if speed.is_finite() { speed } else { 1.0 })
        });
        let running = Running {
            assignment: a,
            attempt: 0,
            start: now,
            step: 0,
            reads_left: 0,
            split: app.split_bytes,
            copy: 0,
            compute,
        };
        self.multi_node.insert(task, nodes);
        self.empty_beats = 0;
        self.launch(running, now, queue);
        Ok(())
    }

    /// Takes `task`'s next steps until one has to wait (a read or a timer), or the task ends;
    /// nothing if `attempt` is not the one running (it was preempted).
    fn advance_task(&mut self, task: u64, attempt: u32, now: Time, queue: &mut EventQueue<Event>) {
        let chunks = self.config.cpu_read_chunks;
        loop {
            let Some(r) = self.running[task as usize].as_mut() else {
                return;
            };
            if r.attempt != attempt {
                return;
            }
            if r.step >= r.steps(chunks) {
                self.finish(task, now);
                return;
            }
            let work = r.work(r.step, chunks);
            r.step += 1;
            let node = r.assignment.node.0;
            match work {
                Work::Read(0) | Work::Wait(0) => continue,
                Work::Read(bytes) => {
                    let n = &mut self.nodes[node as usize];
                    n.unissued_bytes = n.unissued_bytes.saturating_sub(bytes);
                    n.disk.start_read(now, bytes, (task, attempt));
                    if !n.disk_dirty {
                        n.disk_dirty = true;
                        self.dirty.push(node);
                    }
                    return;
                }
                Work::Wait(d) => {
                    queue.schedule(now.saturating_add(d), Event::TaskStep { task, attempt });
                    return;
                }
            }
        }
    }

    fn disk_done(&mut self, node: u32, generation: u64, queue: &mut EventQueue<Event>) {
        let now = queue.now();
        let mut done = std::mem::take(&mut self.done_reads);
        let n = &mut self.nodes[node as usize];
        if !n.disk.complete(now, generation, &mut done) {
            self.done_reads = done;
            return;
        }
        if !n.disk_dirty {
            n.disk_dirty = true;
            self.dirty.push(node);
        }
        for &(task, attempt) in &done {
            if let Some(r) = self.running[task as usize].as_mut()
                && r.attempt == attempt
            {
                r.reads_left = r.reads_left.saturating_sub(1);
                if r.reads_left == 0 {
                    let n = &mut self.nodes[node as usize];
                    n.io_tasks = n.io_tasks.saturating_sub(1);
                }
            }
            self.advance_task(task, attempt, now, queue);
        }
        done.clear();
        self.done_reads = done;
    }

    fn finish(&mut self, task: u64, now: Time) {
        let Some(r) = self.running[task as usize].take() else {
            return;
        };
        let t = task as usize;
        self.finished[t] = true;
        // Fair share samples what the task held up to its end.
        self.view.set_now(now);
        let a = &r.assignment;
        self.view.task_finished(a);
        let app = &self.apps[a.app.index()];
        let mut other_nodes = Vec::new();
        if let Some(nodes) = self.multi_node.remove(&task) {
            for &n in &nodes {
                self.nodes[n.index()].used = Resources::default();
            }
            other_nodes = nodes.into_iter().filter(|&n| n != a.node).collect();
        } else {
            self.release(&r);
        }
        let base = app.base_time(a.variant).unwrap_or(0);
        let duration = now - r.start;
        let slowdown = duration as f64 / base.max(1) as f64;
        let stats = &mut self.app_stats[a.app.index()];
        stats.last_end = stats.last_end.max(now);
        stats.slowdown_sum += slowdown;
        match a.variant {
            Variant::Cpu => stats.cpu_tasks += 1,
            Variant::Gpu => {
                stats.gpu_tasks += 1;
                self.gpu_tasks += 1;
            }
        }
        self.slowdown_sum += slowdown;
        self.makespan = self.makespan.max(now);
        self.running_count -= 1;
        self.completed += 1;
        if self.config.record_tasks {
            self.records.push(TaskRecord {
                task: a.task,
                app: a.app,
                variant: a.variant,
                node: a.node,
                start_ns: r.start,
                end_ns: now,
                base_ns: base,
                slowdown,
                other_nodes,
            });
        }
        if self.completed.is_multiple_of(self.progress_step) && self.completed < self.total {
            (self.progress)(Progress {
                completed_tasks: self.completed,
                total_tasks: self.total,
                now,
            });
        }
    }

    /// One-node task `r` leaves its node: what it held comes back there.
    fn release(&mut self, r: &Running) {
        let a = &r.assignment;
        let request = self.apps[a.app.index()]
            .request(a.variant)
            .unwrap_or_default();
        let n = &mut self.nodes[a.node.index()];
        n.used = n.used - request;
        for &d in &a.devices {
            if let Some(busy) = n.device_busy.get_mut(d as usize) {
                *busy = false;
            }
        }
        let on = &mut self.on_node[a.node.index()];
        if let Some(i) = on.iter().position(|&t| t == a.task.0) {
            on.swap_remove(i);
        }
    }

    /// Priority preemption on `node` (with [`SimConfig::preemption`]): the core's rule names the
    /// tasks to stop; they are stopped, the waiting task starts in their place, and the policy
    /// fills what room is left. Returns whether it preempted.
    fn preempt(
        &mut self,
        node: u32,
        now: Time,
        queue: &mut EventQueue<Event>,
    ) -> Result<bool, SimError> {
        if !self.config.preemption || self.pending == 0 {
            return Ok(false);
        }
        let id = NodeId(node);
        let choice = {
            let (running, on_node) = (&self.running, &self.on_node);
            preempt_on(
                &self.view,
                id,
                now,
                &Rules {
                    exempt: self.config.preempt_exempt_time,
                    variants: self.policy.variants(),
                },
                // Every simulated node takes work.
                |_: NodeId| true,
                |n: NodeId| {
                    on_node.get(n.index()).map_or_else(Vec::new, |tasks| {
                        tasks
                            .iter()
                            .filter_map(|&t| running.get(t as usize)?.as_ref())
                            .map(|r| Candidate {
                                running: r.assignment.clone(),
                                started: r.start,
                            })
                            .collect()
                    })
                },
            )
        };
        let Some(p) = choice else {
            return Ok(false);
        };
        for v in &p.victims {
            self.stop(v.running.task.0, now);
        }
        let Some(a) = self.view.assign(p.app, id, p.variant) else {
            return Err(SimError::Internal(format!(
                "preemption on {id} left no room for the task it was for"
            )));
        };
        self.start(a, now, queue)?;
        for a in self.policy.on_node_update(&mut self.view, id, now) {
            self.start(a, now, queue)?;
        }
        Ok(true)
    }

    /// Stops running one-node task `task` (preempted): its read in progress is withdrawn from
    /// the disk, what it held comes back, its progress is lost, and it goes back to the front
    /// of its queue as its next attempt.
    fn stop(&mut self, task: u64, now: Time) {
        let Some(r) = self.running[task as usize].take() else {
            return;
        };
        self.release(&r);
        let chunks = self.config.cpu_read_chunks;
        // The input it had not asked the disk for yet.
        let unissued: u64 = (r.step..r.steps(chunks))
            .map(|i| match r.work(i, chunks) {
                Work::Read(b) => b,
                Work::Wait(_) => 0,
            })
            .sum();
        let node = r.assignment.node.0;
        let n = &mut self.nodes[node as usize];
        n.unissued_bytes = n.unissued_bytes.saturating_sub(unissued);
        if r.reads_left > 0 {
            n.io_tasks = n.io_tasks.saturating_sub(1);
        }
        if n.disk.cancel(now, (task, r.attempt)) && !n.disk_dirty {
            n.disk_dirty = true;
            self.dirty.push(node);
        }
        self.attempts.insert(task, r.attempt + 1);
        self.view.requeue(&r.assignment);
        self.pending += 1;
        self.running_count -= 1;
        self.preemptions += 1;
        self.app_stats[r.assignment.app.index()].preempted += 1;
    }

    /// Schedules one completion event for every disk that changed during this event.
    fn flush_disks(&mut self, queue: &mut EventQueue<Event>) {
        for node in self.dirty.drain(..) {
            let n = &mut self.nodes[node as usize];
            n.disk_dirty = false;
            if let Some(at) = n.disk.next_completion() {
                queue.schedule(
                    at,
                    Event::Disk {
                        node,
                        generation: n.disk.generation(),
                    },
                );
            }
        }
    }

    fn snapshot(&self) -> LoadSnapshot {
        let mut s = LoadSnapshot::default();
        for n in &self.nodes {
            s.gpus_busy += n.used.gpus;
            s.cores_busy += n.used.cores;
            s.tasks_reading += n.disk.readers() as u32;
            s.io_tasks += n.io_tasks;
            s.read_bytes_per_s += n.disk.read_rate();
        }
        s
    }

    /// Records `s` at every grid instant before `bound` (and at `bound` too if `inclusive`).
    /// Past [`MAX_SAMPLES`] the grid coarsens: every other sample is dropped and the step doubles,
    /// so a very long run keeps a bounded, evenly spaced series.
    fn record_until(&mut self, bound: Time, inclusive: bool, s: &LoadSnapshot) {
        while self.next_sample < bound || (inclusive && self.next_sample == bound) {
            self.series.push(self.next_sample, s);
            if self.series.len() >= MAX_SAMPLES {
                self.series = self.series.even_samples();
                self.sample_step = self.sample_step.saturating_mul(2);
                let last = self.series.time_ns.last().copied().unwrap_or(0);
                self.next_sample = last.saturating_add(self.sample_step);
                continue;
            }
            let next = self.next_sample.saturating_add(self.sample_step);
            if next == self.next_sample {
                break;
            }
            self.next_sample = next;
        }
    }

    fn finish_series(&mut self, end: Time) {
        if self.config.sample_interval.is_none() {
            return;
        }
        let s = self.snapshot();
        self.record_until(end, true, &s);
        if self.series.time_ns.last().is_some_and(|&t| t < end) {
            self.series.push(end, &s);
        }
    }

    fn into_result(self, events: u64) -> SimResult {
        let apps: Vec<AppResult> = self
            .apps
            .iter()
            .zip(&self.app_stats)
            .map(|(a, s)| {
                let done = s.cpu_tasks + s.gpu_tasks;
                AppResult {
                    app: a.id,
                    name: a.name.clone(),
                    submit_ns: a.submit_time,
                    first_start_ns: s.first_start,
                    completion_ns: s.last_end,
                    completion_s: to_secs(s.last_end),
                    tasks: a.tasks,
                    cpu_tasks: s.cpu_tasks,
                    gpu_tasks: s.gpu_tasks,
                    mean_slowdown: if done == 0 {
                        1.0
                    } else {
                        s.slowdown_sum / f64::from(done)
                    },
                    user: a.user.clone(),
                    preempted: s.preempted,
                }
            })
            .collect();
        SimResult {
            policy: self.policy_name.to_string(),
            seed: self.config.seed,
            makespan_ns: self.makespan,
            makespan_s: to_secs(self.makespan),
            total_tasks: self.total,
            gpu_tasks: self.gpu_tasks,
            cpu_tasks: self.total - self.gpu_tasks,
            average_task_delay: if self.total == 0 {
                1.0
            } else {
                self.slowdown_sum / self.total as f64
            },
            events,
            heartbeats: self.heartbeats,
            preemptions: self.preemptions,
            users: crate::metrics::UserResult::of(&apps, &self.config.users),
            apps,
            tasks: self.records,
            series: self.series,
        }
    }
}

/// `base / speed`, rounded to the nanosecond.
fn scale(base: Time, speed: f64) -> Time {
    if speed == 1.0 {
        base
    } else {
        (base as f64 / speed).round() as Time
    }
}

impl Model for BatchSim<'_> {
    type Event = Event;
    type Error = SimError;

    fn advance(&mut self, _from: Time, to: Time) {
        if self.config.sample_interval.is_none() || self.next_sample >= to {
            return;
        }
        let s = self.snapshot();
        self.record_until(to, false, &s);
    }

    fn handle(&mut self, event: Event, queue: &mut EventQueue<Event>) -> Result<Flow, SimError> {
        let now = queue.now();
        if let Some(limit) = self.config.time_limit
            && now > limit
        {
            return Err(SimError::TimeLimit {
                limit_s: to_secs(limit),
                left: self.total - self.completed,
            });
        }
        match event {
            Event::Arrival(i) => self.arrival(i, queue)?,
            Event::Heartbeat(node) => self.heartbeat(node, queue)?,
            Event::Disk { node, generation } => self.disk_done(node, generation, queue),
            Event::TaskStep { task, attempt } => self.advance_task(task, attempt, now, queue),
        }
        self.flush_disks(queue);
        if self.completed == self.total && self.arrived == self.apps.len() {
            return Ok(Flow::Stop);
        }
        Ok(Flow::Continue)
    }
}
