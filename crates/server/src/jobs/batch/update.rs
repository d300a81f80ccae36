//! `hetsched update JOB`: a batch job's applications' priority, `max_running`, time limit, the
//! cores, memory, GPU devices and GPU kind of one task, or the node attributes it requires change
//! after submission (Slurm's `scontrol update JobId=… Priority=… TimeLimit=… NumCPUs=…
//! MinMemoryNode=… Gres=… Features=…`). The
//! scheduler's view takes the new values at once, so every placement from then on — a policy's
//! priority levels, a multi-node gathering's order, the cap on running tasks, whether a task
//! fits in the time an agent has left — reads them; tasks already running go on (a lowered
//! `max_running` lets no new one start until fewer run).
//!
//! A new time limit changes what the application's tasks run, and agents keep the task specs
//! they were sent by key: so the application's spec generation, part of its spec keys, goes up,
//! and the next task it dispatches carries the new spec under a key no agent holds. Running
//! tasks (and those an agent holds queued) take the new limit too, counted from their start:
//! each heartbeat reports the key every task runs by, and one that is not its application's
//! current key gets a `Respec` in the reply (with the spec, if the agent lacks it) until the
//! agent reports the new key — so a lost reply or a server restart only delays it. An
//! accelerator task offloaded to another node (spec 01) keeps the limit it was shipped with.
//!
//! Cores, memory and devices change for the tasks still to start, as Slurm changes them for
//! an array's pending tasks while others run: a task already running (or queued on an agent)
//! keeps what it was given, and its node gets that back when it ends. Such a task's hold is
//! kept in `Batch::holds` and the store's `task_holds` (its attempt, cores, memory and
//! devices), so the view books it again after a restart, until the task ends. New cores and
//! devices are booked by every placement from then on (each assignment carries its cores and
//! devices to the agent); new memory is in the spec, so it goes up a generation as a new time
//! limit does, and agents enforce it on the tasks they start from then on (a `Respec` changes
//! only the time limit of a task an agent holds, queued or running).
//!
//! The values are stored in the application's row (`apps.priority`, `apps.max_running`,
//! `apps.time_limit_ms`, `apps.spec_generation`, `apps.cpu_cores` … `apps.gpu_memory_bytes`)
//! in the event's transaction, and a restart applies them over what the job file says.
//!
//! Requires change at any time: tasks running stay where they are, and a multi-node
//! application's gathering gives back, at its next beat, the members that lack them (the core's
//! `Gatherer` keeps only eligible nodes) and gathers nodes that have them. They are stored in
//! `apps.requires`. So does the accelerator kind of the GPU variant (`--gpu-kind`): placements
//! pick devices of the new kind, running tasks keep theirs; stored in `apps.gpu_kind`.

use super::{AppRec, Batch, Ctx, MAX_SPEC_GENERATION};
use crate::state::StateError;
use crate::store::AppSettings;
use hetsched_core::input::MAX_DURATION;
use hetsched_core::{AppId, Resources, Variant};

/// What `hetsched update` changes; `None` leaves a value as it is.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Update {
    /// The application to change (`None`: every application of the job).
    pub app: Option<String>,
    /// The new priority.
    pub priority: Option<i32>,
    /// The new `max_running` (0: no limit).
    pub max_running: Option<u32>,
    /// The new time limit of each task, every variant, in ms (0: no limit).
    pub time_limit_ms: Option<u64>,
    /// The new cores of one task (at least 1).
    pub cores: Option<u32>,
    /// The new memory of one task, bytes (0: none declared, not enforced).
    pub memory_bytes: Option<u64>,
    /// The new devices of one task of the GPU variant (at least 1).
    pub gpus: Option<u32>,
    /// The variant whose cores and memory change (`None`: every variant the application has).
    pub variant: Option<Variant>,
    /// The node attributes its tasks require from now on (empty: none).
    pub requires: Option<Vec<String>>,
    /// The accelerator kind its GPU variant's tasks take from now on (`Some(None)`: any).
    pub gpu_kind: Option<Option<String>>,
    /// The job's new begin time, ms since the Unix epoch (a time past: at once).
    pub begin_ms: Option<u64>,
}

/// An application as an update left it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Updated {
    /// Its name.
    pub name: String,
    /// Its priority.
    pub priority: i32,
    /// Its `max_running` (0: no limit).
    pub max_running: u32,
    /// Its CPU and GPU variants' time limits, ms (0: none, or no such variant).
    pub time_limit_ms: [u64; 2],
    /// What one task of its CPU and GPU variants holds; `None`: no such variant.
    pub requests: [Option<Resources>; 2],
    /// The node attributes its tasks require.
    pub requires: Vec<String>,
    /// Its running tasks (and those queued on agents) that keep cores, memory or devices other
    /// than `requests`: they were placed before an update changed them.
    pub running_kept: u32,
    /// The accelerator kind its GPU variant's tasks take (`None`: any, or no GPU variant).
    pub gpu_kind: Option<String>,
}

impl Update {
    /// Whether it changes what one task holds (cores, memory or devices).
    fn changes_resources(&self) -> bool {
        self.cores.is_some() || self.memory_bytes.is_some() || self.gpus.is_some()
    }

    /// Checks each value on its own (not against the job); returns its `requires` as a set
    /// (sorted, without repeats), if it has one.
    fn check(&self) -> Result<Option<Vec<String>>, StateError> {
        let resources = self.changes_resources();
        if self.priority.is_none()
            && self.max_running.is_none()
            && self.time_limit_ms.is_none()
            && !resources
            && self.requires.is_none()
            && self.gpu_kind.is_none()
            && self.begin_ms.is_none()
        {
            return Err(StateError::Invalid(
                "nothing to update: give a priority, a max_running, a time limit, cores, memory, \
                 gpus, a gpu kind, requires or a begin time"
                    .into(),
            ));
        }
        if let Some(Some(kind)) = &self.gpu_kind {
            hetsched_core::model::cluster::attribute_set([kind.as_str()].into_iter())
                .map_err(|(_, e)| StateError::Invalid(format!("gpu kind: {e}")))?;
        }
        if self.gpu_kind.is_some() && self.variant == Some(Variant::Cpu) {
            return Err(StateError::Invalid(
                "gpu kind: the CPU variant takes no devices".into(),
            ));
        }
        if self.variant.is_some() && !resources {
            return Err(StateError::Invalid(
                "a variant names whose cores or memory change: give cores or memory with it".into(),
            ));
        }
        if self.gpus == Some(0) {
            return Err(StateError::Invalid(
                "gpus: a task of a GPU variant takes at least 1 device".into(),
            ));
        }
        if let Some(g) = self.gpus
            && g > MAX_TASK_GPUS
        {
            return Err(StateError::Invalid(format!(
                "gpus: {g} is more than a node has, {MAX_TASK_GPUS}"
            )));
        }
        if self.gpus.is_some() && self.variant == Some(Variant::Cpu) {
            return Err(StateError::Invalid(
                "gpus: the CPU variant takes no devices".into(),
            ));
        }
        if self.cores == Some(0) {
            return Err(StateError::Invalid(
                "cores: a task takes at least 1 core".into(),
            ));
        }
        if let Some(c) = self.cores
            && c > MAX_TASK_CORES
        {
            return Err(StateError::Invalid(format!(
                "cores: {c} is more than a task may take, {MAX_TASK_CORES}"
            )));
        }
        if let Some(problem) = self.memory_bytes.and_then(|m| {
            hetsched_core::input::limits::task_memory_problem(m)
                .or_else(|| hetsched_core::input::limits::task_memory_floor_problem(m))
        }) {
            return Err(StateError::Invalid(format!("memory: {problem}")));
        }
        let max_ms = MAX_DURATION / 1_000_000;
        if let Some(ms) = self.time_limit_ms
            && ms > max_ms
        {
            return Err(StateError::Invalid(format!(
                "time limit {ms} ms is longer than the longest accepted, {max_ms} ms (10 years)"
            )));
        }
        let Some(r) = &self.requires else {
            return Ok(None);
        };
        hetsched_core::model::cluster::requirement_set(r.iter().map(String::as_str))
            .map(Some)
            .map_err(|(j, e)| {
                StateError::Invalid(match j {
                    Some(j) => format!("requires[{j}]: {e}"),
                    None => format!("requires: {e}"),
                })
            })
    }
}

impl AppRec {
    /// Its variants' time limits, ms: (CPU, GPU), 0 for none.
    pub(super) fn time_limits_ms(&self) -> [u64; 2] {
        [&self.cpu, &self.gpu].map(|v| v.as_ref().map_or(0, |r| r.time_limit_ms))
    }

    /// What `hetsched update` set, as the store keeps it for application `app`.
    pub(super) fn settings(&self, app: u32) -> AppSettings {
        AppSettings {
            app,
            priority: self.priority,
            max_running: self.max_running,
            time_limit_ms: self.time_limit_update,
            spec_generation: self.spec_generation,
            requests: self.request_update,
            requires: self.requires_updated.then(|| self.requires.clone()),
            gpu_kind: self.gpu_kind_update.clone(),
        }
    }
}

impl Batch {
    /// Applies `update` to job `job`'s applications (the one it names, or all). Refused for a
    /// job that does not exist or has ended, an application the job does not have, and an
    /// update that changes nothing.
    pub fn update(
        &mut self,
        cx: &mut Ctx,
        job: u64,
        update: &Update,
    ) -> Result<Vec<Updated>, StateError> {
        let resources = update.changes_resources();
        let requires = update.check()?;
        let Some(j) = self.job_rec(job).filter(|_| !self.retention.is_purged(job)) else {
            return Err(StateError::NoJob(job));
        };
        let state = self.job_state(j);
        if !matches!(state, "pending" | "running") {
            return Err(StateError::Invalid(format!(
                "job {job} has ended ({state}): nothing to update"
            )));
        }
        if let Some(b) = update.begin_ms {
            crate::jobs::gate::check_begin(b, cx.now)?;
        }
        let apps: Vec<u32> = match &update.app {
            None => j.apps.clone().collect(),
            Some(name) => {
                let found = j
                    .apps
                    .clone()
                    .find(|&a| self.apps.get(a as usize).is_some_and(|r| &r.name == name));
                let Some(a) = found else {
                    let names: Vec<&str> = j
                        .apps
                        .clone()
                        .filter_map(|a| self.apps.get(a as usize).map(|r| r.name.as_str()))
                        .collect();
                    return Err(StateError::Invalid(format!(
                        "job {job} has no application `{}` (it has: {})",
                        hetsched_core::text::clip(name),
                        names.join(", ")
                    )));
                };
                vec![a]
            }
        };
        if resources || update.gpu_kind.is_some() {
            // Devices are the GPU variant's only.
            let variant = if update.gpus.is_some() || update.gpu_kind.is_some() {
                Some(Variant::Gpu)
            } else {
                update.variant
            };
            for &a in &apps {
                self.check_resources_change(job, a, variant)?;
            }
        }
        if (update.time_limit_ms.is_some() || resources)
            && let Some(r) = apps
                .iter()
                .filter_map(|&a| self.apps.get(a as usize))
                .find(|r| r.spec_generation >= MAX_SPEC_GENERATION)
        {
            return Err(StateError::Invalid(format!(
                "application `{}` of job {job} had what its tasks run changed \
                 {MAX_SPEC_GENERATION} times, the most accepted",
                r.name
            )));
        }
        let mut out = Vec::with_capacity(apps.len());
        for a in apps {
            let Some(r) = self.apps.get(a as usize) else {
                continue;
            };
            let mut set = r.settings(a);
            set.priority = update.priority.unwrap_or(set.priority);
            set.max_running = update.max_running.unwrap_or(set.max_running);
            if let Some(ms) = update.time_limit_ms
                && r.time_limits_ms()
                    .iter()
                    .zip([&r.cpu, &r.gpu])
                    .any(|(&had, v)| v.is_some() && had != ms)
            {
                set.time_limit_ms = Some(ms);
                set.spec_generation += 1;
            }
            if resources {
                let now = super::requests_of(cx.view, a);
                let mut changed = false;
                for (i, v) in [Variant::Cpu, Variant::Gpu].into_iter().enumerate() {
                    let Some(had) = now[i] else {
                        continue;
                    };
                    // `--gpus` alone changes the GPU variant; with cores or memory, those
                    // change in every variant (or the one named) as without it.
                    let named = match update.variant {
                        Some(only) => only == v,
                        None => update.cores.is_some() || update.memory_bytes.is_some(),
                    };
                    let gpus = match v {
                        Variant::Gpu => update.gpus.unwrap_or(had.gpus),
                        Variant::Cpu => had.gpus,
                    };
                    let new = if named {
                        Resources::new(
                            update.cores.unwrap_or(had.cores),
                            update.memory_bytes.unwrap_or(had.memory_bytes),
                            gpus,
                        )
                    } else {
                        Resources { gpus, ..had }
                    };
                    if new != had {
                        set.requests[i] = Some(new);
                        changed = true;
                    }
                }
                // The memory is in the spec agents enforce: a new key. (Cores travel with
                // each assignment.)
                if changed {
                    set.spec_generation += 1;
                }
            }
            if let Some(req) = &requires {
                set.requires = Some(req.clone());
            }
            if let Some(kind) = &update.gpu_kind {
                set.gpu_kind = Some(kind.clone().unwrap_or_default());
            }
            let before = super::requests_of(cx.view, a);
            self.apply_settings(cx, &set)?;
            let running_kept = if resources {
                self.keep_running_holds(cx, a, before)
            } else {
                self.running_kept(a)
            };
            let Some(r) = self.apps.get(a as usize) else {
                continue;
            };
            let requests = super::requests_of(cx.view, a);
            out.push(Updated {
                name: r.name.clone(),
                priority: r.priority,
                max_running: r.max_running,
                time_limit_ms: r.time_limits_ms(),
                requests,
                requires: r.requires.clone(),
                running_kept,
                gpu_kind: super::gpu_kind_of(cx.view, a),
            });
            self.settings_changed.push(a);
            // Its pending tasks may start where they could not (a higher cap, a new order).
            let pending = cx.view.app(AppId(a)).pending.len();
            cx.nodes.wakes.free(a, pending);
        }
        if let Some(b) = update.begin_ms {
            self.set_begin(cx, job, b)?;
        }
        Ok(out)
    }
}

/// The most cores one task may be given by an update (a job file's are bounded by the nodes
/// that register; an update's by this).
pub const MAX_TASK_CORES: u32 = 1 << 20;

/// The most devices one task may be given by an update: what a node may have.
pub const MAX_TASK_GPUS: u32 = hetsched_core::input::cluster::MAX_NODE_ACCELERATORS as u32;

impl Batch {
    /// Whether application `a` of job `job` may change the cores and memory of `variant` (every
    /// variant it has: `None`): not for a multi-node one (it holds whole nodes), not for a
    /// variant it lacks.
    fn check_resources_change(
        &self,
        job: u64,
        a: u32,
        variant: Option<Variant>,
    ) -> Result<(), StateError> {
        let Some(r) = self.apps.get(a as usize) else {
            return Ok(());
        };
        let name = &r.name;
        if r.nodes > 1 {
            return Err(StateError::Invalid(format!(
                "application `{name}` of job {job} holds {} whole nodes per task: it has no \
                 cores or memory to change",
                r.nodes
            )));
        }
        if let Some(v) = variant {
            let has = match v {
                Variant::Cpu => r.cpu.is_some(),
                Variant::Gpu => r.gpu.is_some(),
            };
            if !has {
                return Err(StateError::Invalid(format!(
                    "application `{name}` of job {job} has no {v} variant"
                )));
            }
        }
        Ok(())
    }

    /// Application `a`'s request changed from `before` (CPU, GPU variant): each of its running
    /// tasks keeps what it holds (in `holds`, unless that is the request again). Returns how
    /// many hold something other than the request now.
    fn keep_running_holds(&mut self, cx: &Ctx, a: u32, before: [Option<Resources>; 2]) -> u32 {
        let now = super::requests_of(cx.view, a);
        let running: Vec<(u64, usize)> = self
            .tasks_of_app(a)
            .filter(|t| t.state == crate::store::TaskState::Running)
            .map(|t| {
                (
                    t.id,
                    usize::from(super::variant_of(t.variant) == Variant::Gpu),
                )
            })
            .collect();
        let mut kept = 0;
        for (id, v) in running {
            match self.holds.get(&id).copied().or(before[v]) {
                Some(held) if Some(held) != now[v] => {
                    if self.holds.insert(id, held) != Some(held) {
                        self.holds_changed.push(id);
                    }
                    kept += 1;
                }
                _ => self.drop_hold(id),
            }
        }
        kept
    }

    /// How many of application `a`'s running tasks hold something other than its request.
    fn running_kept(&self, a: u32) -> u32 {
        if self.holds.is_empty() {
            return 0;
        }
        self.tasks_of_app(a)
            .filter(|t| {
                t.state == crate::store::TaskState::Running && self.holds.contains_key(&t.id)
            })
            .count() as u32
    }

    /// Gives application `set.app` the settings `set` (an update, or a restart applying the
    /// stored ones over its job file), in its record and in the scheduler's view.
    pub(super) fn apply_settings(
        &mut self,
        cx: &mut Ctx,
        set: &AppSettings,
    ) -> Result<(), StateError> {
        let Some(r) = self.apps.get_mut(set.app as usize) else {
            return Ok(());
        };
        let app = AppId(set.app);
        r.priority = set.priority;
        cx.view.set_priority(app, set.priority)?;
        r.max_running = set.max_running;
        cx.view.set_max_running(app, set.max_running)?;
        r.spec_generation = set.spec_generation;
        if let Some(ms) = set.time_limit_ms {
            r.time_limit_update = Some(ms);
            for run in [&mut r.cpu, &mut r.gpu].into_iter().flatten() {
                run.time_limit_ms = ms;
            }
            let limit = (ms > 0).then(|| ms.saturating_mul(1_000_000));
            cx.view.set_time_limit(app, limit)?;
        }
        if let Some(req) = &set.requires {
            r.requires_updated = true;
            r.requires = req.clone();
            cx.view.set_requires(app, req.clone())?;
        }
        if let Some(kind) = &set.gpu_kind {
            r.gpu_kind_update = Some(kind.clone());
            cx.view
                .set_gpu_kind(app, (!kind.is_empty()).then(|| kind.clone()))?;
        }
        for (i, v) in [Variant::Cpu, Variant::Gpu].into_iter().enumerate() {
            let Some(request) = set.requests[i] else {
                continue;
            };
            r.request_update[i] = Some(request);
            let run = match v {
                Variant::Cpu => r.cpu.as_mut(),
                Variant::Gpu => r.gpu.as_mut(),
            };
            if let Some(run) = run {
                run.memory_bytes = request.memory_bytes;
            }
            cx.view.set_request(app, v, request)?;
        }
        Ok(())
    }
}
