//! The scheduler's view of the cluster: what a resource manager knows between heartbeats.
//!
//! Per node: free resources and devices, and the IO figures of the last heartbeat — total
//! outstanding read bytes (`TotalIO`, `sumio`) and the number of tasks reading (`#IOtask`, `n`).
//! Per application: pending tasks and counters. Policies read the view and call
//! [`SchedulerView::assign`], which updates it at once, so the next decision in the same heartbeat
//! sees the load the previous one added (spec 02, Algorithm 1: "update the node's free resources,
//! TotalIO, #IOtask").

use super::application::{AcceleratorNeed, Application, Need, Variant};
use super::cluster::Node;
use super::fair_share::FairShare;
use super::ids::{AppId, NodeId, TaskId};
use super::resources::Resources;
use super::slots::Slots;
use crate::time::Time;
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;
use std::fmt;
use thiserror::Error;

/// A decision: run `task` of `app` as `variant` on `node`, on accelerator `devices`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Assignment {
    /// The task.
    pub task: TaskId,
    /// Its application.
    pub app: AppId,
    /// Where it runs.
    pub node: NodeId,
    /// Which implementation runs.
    pub variant: Variant,
    /// Accelerator device numbers on the node (empty for CPU tasks).
    pub devices: Vec<u32>,
    /// What the task holds on its node: its variant's request when it was placed, which the
    /// node gets back when it ends, whatever the application asks for by then
    /// ([`SchedulerView::set_request`]). Nothing for a multi-node task: it holds whole nodes
    /// ([`SchedulerView::multi_node_held`]).
    #[serde(default)]
    pub request: Resources,
}

/// What a multi-node task (or the gathering of its nodes) holds on one node: everything that
/// was free there ([`SchedulerView::hold_free`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Held {
    /// The node.
    pub node: NodeId,
    /// Cores, memory and device count taken.
    pub resources: Resources,
    /// The devices taken.
    pub devices: Vec<u32>,
}

/// What a node reports in a heartbeat about its disk load.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct NodeReport {
    /// Bytes its running tasks still have to read (`TotalIO`).
    pub total_io_bytes: f64,
    /// Number of tasks reading now (`#IOtask`).
    pub io_tasks: u32,
}

/// The view of one node.
#[derive(Clone, Debug)]
pub struct NodeState {
    /// The node's description.
    pub node: Node,
    /// Resources not held by running tasks.
    pub free: Resources,
    /// Per accelerator device: whether it is free.
    pub device_free: Vec<bool>,
    /// Outstanding read bytes: last heartbeat's figure plus what was dispatched since.
    pub total_io_bytes: f64,
    /// Tasks reading: last heartbeat's figure plus what was dispatched since.
    pub io_tasks: u32,
    /// Tasks running on the node.
    pub running: u32,
    /// False once the node is lost; policies never place work on it.
    pub alive: bool,
    /// Accelerator work is held off the node for now: the accelerator service it reaches through
    /// its binding has a full queue (spec 01; the runtime sets it from the ANode's heartbeats).
    pub accel_held: bool,
    /// When the node goes away, on the view's clock ([`SchedulerView::now`]): an agent started
    /// with a `time_limit`, e.g. inside a batch allocation; `None`: no end known. A task whose
    /// own time limit is longer than the time left until then does not fit
    /// ([`SchedulerView::fits`]). Set with [`SchedulerView::set_node_end`].
    pub ends_at: Option<Time>,
}

impl NodeState {
    /// Number of free devices of `kind` (any kind when `None`).
    pub fn free_devices(&self, kind: Option<&str>) -> u32 {
        self.device_free
            .iter()
            .zip(&self.node.accelerators)
            .filter(|(free, acc)| **free && kind.is_none_or(|k| acc.kind == k))
            .count() as u32
    }
}

/// The view of one application.
#[derive(Clone, Debug)]
pub struct AppState {
    /// The application's description and base profiles.
    pub app: Application,
    /// Tasks not yet dispatched, in order.
    pub pending: VecDeque<TaskId>,
    /// Tasks dispatched so far as CPU tasks (re-dispatches included).
    pub dispatched_cpu: u32,
    /// Tasks dispatched so far as GPU tasks (re-dispatches included).
    pub dispatched_gpu: u32,
    /// Tasks running now.
    pub running: u32,
    /// Tasks finished successfully.
    pub completed: u32,
    /// Resources the application's running tasks hold.
    pub usage: Resources,
    /// The application's queue by need.
    pub need: Need,
    /// Whether its tasks need an accelerator (spec 01; `none` unless the driver sets it).
    pub accelerator: AcceleratorNeed,
    /// The group whose cap on cores its running tasks count against
    /// ([`SchedulerView::set_app_group`]; the runtime's users); `None`: no group.
    pub group: Option<u32>,
    /// The order policies serve it in ([`SchedulerView::level`]), kept by the view as its
    /// priority, its group and the fair-share standings change.
    pub level: i64,
}

/// A group of applications (the runtime's users) whose running tasks share a cap on what they
/// hold at once — cores, memory and GPUs, each capped or not (the per-user `--max-cores`,
/// `--max-gpus`, `--max-memory`: Slurm's `MaxTRESPerUser=cpu=N,gres/gpu=M,mem=S`) — and, under
/// `drf`, one dominant share.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GroupState {
    /// The most its running tasks may hold at once, per resource; 0 in a dimension: no cap on
    /// that resource.
    pub cap: Resources,
    /// What its running tasks hold now (a multi-node task: everything of the nodes it holds).
    pub usage: Resources,
}

/// The resource of a group's cap that a task would pass ([`GroupState::capped_by`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CappedResource {
    /// Cores.
    Cores,
    /// Main memory.
    Memory,
    /// Accelerator devices.
    Gpus,
}

impl fmt::Display for CappedResource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Cores => "cores",
            Self::Memory => "memory",
            Self::Gpus => "GPUs",
        })
    }
}

impl GroupState {
    /// Cores its running tasks hold now.
    pub fn cores(&self) -> u32 {
        self.usage.cores
    }

    /// Whether a task holding `more` fits under the cap in every capped resource.
    pub fn has_room(&self, more: &Resources) -> bool {
        self.capped_by(more).is_none()
    }

    /// How many more tasks each holding `each` fit under the cap together (`u64::MAX` when
    /// no capped resource limits them): the least, over the capped resources `each` asks
    /// for, of the room left divided by what one task holds.
    pub fn room_for(&self, each: &Resources) -> u64 {
        let room = |cap: u64, used: u64, one: u64| {
            if cap == 0 || one == 0 {
                u64::MAX
            } else {
                cap.saturating_sub(used) / one
            }
        };
        let (cap, used) = (&self.cap, &self.usage);
        room(cap.cores.into(), used.cores.into(), each.cores.into())
            .min(room(cap.memory_bytes, used.memory_bytes, each.memory_bytes))
            .min(room(cap.gpus.into(), used.gpus.into(), each.gpus.into()))
    }

    /// The first capped resource (cores, then memory, then GPUs) that a task holding `more`
    /// would take past the cap; `None`: it fits. A dimension `more` does not ask for never
    /// blocks, so a group over its cap on GPUs still starts CPU tasks.
    pub fn capped_by(&self, more: &Resources) -> Option<CappedResource> {
        let (cap, used) = (&self.cap, &self.usage);
        if cap.cores > 0 && more.cores > 0 && used.cores.saturating_add(more.cores) > cap.cores {
            Some(CappedResource::Cores)
        } else if cap.memory_bytes > 0
            && more.memory_bytes > 0
            && used.memory_bytes.saturating_add(more.memory_bytes) > cap.memory_bytes
        {
            Some(CappedResource::Memory)
        } else if cap.gpus > 0 && more.gpus > 0 && used.gpus.saturating_add(more.gpus) > cap.gpus {
            Some(CappedResource::Gpus)
        } else {
            None
        }
    }
}

/// Everything a multi-node task's [`Held`] handles hold.
fn held_total(held: &[Held]) -> Resources {
    held.iter()
        .fold(Resources::default(), |sum, h| sum + h.resources)
}

/// How [`SchedulerView::app`] reads a retired application (its job was purged): no tasks,
/// nothing pending or running. Its `app.id` is `u32::MAX`, not the id asked for.
pub static RETIRED: AppState = AppState {
    app: Application::retired(AppId(u32::MAX)),
    pending: VecDeque::new(),
    dispatched_cpu: 0,
    dispatched_gpu: 0,
    running: 0,
    completed: 0,
    usage: Resources::new(0, 0, 0),
    need: Need::CpuOnly,
    accelerator: AcceleratorNeed::None,
    group: None,
    level: 0,
};

impl AppState {
    /// Tasks dispatched as either variant (`#alloc_tasks` of spec 02 eq. (6)).
    pub fn dispatched(&self) -> u32 {
        self.dispatched_cpu + self.dispatched_gpu
    }

    /// Whether the application still has tasks to dispatch.
    pub fn has_pending(&self) -> bool {
        !self.pending.is_empty()
    }

    /// Whether every task finished.
    pub fn is_complete(&self) -> bool {
        self.completed >= self.app.tasks
    }
}

/// A request the view refuses.
#[derive(Debug, Error, PartialEq)]
pub enum ViewError {
    /// Applications must be added with dense ids in order.
    #[error("application id {found} added out of order (expected {expected})")]
    AppOutOfOrder {
        /// Id given.
        found: AppId,
        /// Id expected next.
        expected: AppId,
    },
    /// Nodes must be added with dense ids in order.
    #[error("node id {found} added out of order (expected {expected})")]
    NodeOutOfOrder {
        /// Id given.
        found: NodeId,
        /// Id expected next.
        expected: NodeId,
    },
    /// The application has no implementation at all.
    #[error("application `{0}` has neither a CPU nor a GPU variant")]
    NoVariant(String),
    /// An unknown node.
    #[error("unknown node {0}")]
    UnknownNode(NodeId),
    /// The node holds running work: its resources cannot change now.
    #[error("node {0} holds running work")]
    NodeBusy(NodeId),
    /// An unknown application.
    #[error("unknown application {0}")]
    UnknownApp(AppId),
    /// An application with tasks waiting or running cannot be retired, nor (running) change
    /// its request.
    #[error("application {0} still has tasks waiting or running")]
    StillActive(AppId),
    /// The application has no such variant.
    #[error("application {0} has no {1} variant")]
    NoSuchVariant(AppId, Variant),
}

/// Which tasks a node's queue takes during one decision ([`SchedulerView::open_queue`]): the
/// runtime's prefetch, where a task placed beyond a node's free cores waits in its agent's
/// queue and starts there as soon as a core frees.
pub trait QueueAdmission: Send {
    /// A task of `app` as `variant`, holding `cores`, is about to be placed on the node;
    /// `queued`: it lies beyond the node's free cores, so it would wait in the queue. `false`
    /// refuses it, and then the node takes nothing more in this decision.
    fn admit(&mut self, app: AppId, variant: Variant, cores: u32, queued: bool) -> bool;
}

/// A node's queue while one decision fills it.
struct QueueGate {
    node: NodeId,
    /// The node's free cores before its loan: a task placed beyond them is queued.
    free_cores: u32,
    /// Cores placed on the node in this decision so far.
    placed_cores: u32,
    /// A placement was refused: nothing more fits on the node in this decision.
    closed: bool,
    admission: Box<dyn QueueAdmission>,
}

/// The open queue, if any. A gate lives only during one decision, so a copy of the view (a
/// benchmark's, a what-if) has none.
#[derive(Default)]
struct QueueSlot(Option<QueueGate>);

impl Clone for QueueSlot {
    fn clone(&self) -> Self {
        QueueSlot(None)
    }
}

impl fmt::Debug for QueueSlot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            Some(g) => write!(
                f,
                "queue on node {} ({} of {} free cores placed{})",
                g.node.0,
                g.placed_cores,
                g.free_cores,
                if g.closed { ", closed" } else { "" }
            ),
            None => f.write_str("no queue"),
        }
    }
}

/// The scheduler's whole view: nodes, applications and cluster totals.
#[derive(Clone, Debug, Default)]
pub struct SchedulerView {
    nodes: Vec<NodeState>,
    /// By id; a purged job's applications are retired ([`SchedulerView::retire_application`]).
    apps: Slots<AppState>,
    totals: Resources,
    /// What the live nodes have free, together (kept at every change of a node's free
    /// resources: [`SchedulerView::free_changed`]), so what runs is known without a pass over
    /// the nodes ([`SchedulerView::ungrouped_usage`]).
    free_alive: Resources,
    /// Sum of the speed weights of every live node's accelerators.
    device_speed_total: f64,
    /// Requests a CPU task's input is read in (0 counts as 1); see [`SchedulerView::io_request`].
    cpu_read_chunks: u32,
    /// (application, node) pairs on which the application must not be placed for now (the
    /// runtime's failing-node back-off); nothing fits there.
    excluded: std::collections::BTreeSet<(AppId, NodeId)>,
    /// How many times a node's attributes or capacity or an application's request changed
    /// ([`SchedulerView::placement_generation`]).
    placement_generation: u64,
    /// The time now, on the clock of the nodes' ends ([`NodeState::ends_at`]).
    now: Time,
    /// Running multi-node tasks and what each holds, by (application, task)
    /// ([`SchedulerView::start_multi_node`]).
    multi_node: std::collections::HashMap<(AppId, TaskId), Vec<Held>>,
    /// The queue a decision under way may fill on its node ([`SchedulerView::open_queue`]).
    queue: QueueSlot,
    /// How many [`Held`] handles each node is in ([`SchedulerView::is_held`]).
    held: std::collections::HashMap<NodeId, u32>,
    /// The applications with pending tasks, in id order ([`SchedulerView::pending_apps`]): a
    /// placement visits these, not every application ever added (a server that ran 100,000
    /// one-task jobs keeps their applications, each with nothing pending).
    with_pending: std::collections::BTreeSet<AppId>,
    /// The same applications by group, for those in one ([`SchedulerView::pending_apps_in`]):
    /// a driver waking the waiting work of one user whose room under a cap grew visits that
    /// user's, not every user's (docs/performance.md, "The cap's wake path").
    pending_by_group: std::collections::HashMap<u32, std::collections::BTreeSet<AppId>>,
    /// Groups of applications sharing a cap on what they hold, by group id ([`GroupState`]).
    groups: Vec<GroupState>,
    /// Each group's decayed usage and standing ([`SchedulerView::set_fair_share`]).
    fair: FairShare,
    /// The nodes whose free cores rose since the last [`SchedulerView::take_cores_freed`], each
    /// once, so that what was booked beyond a node's capacity (the runtime's prefetch debt) is
    /// repaid from the nodes that released cores, not sought on every node at every event.
    /// Nobody draining it costs at most a list of every node.
    cores_freed: super::NodeList,
    /// How many times a node was added or its liveness changed
    /// ([`SchedulerView::liveness_generation`]).
    liveness_generation: u64,
    /// The capped groups whose room under their cap grew since the last
    /// [`SchedulerView::take_capped_groups_freed`] (work they held ended, their cap rose or
    /// went), so that a driver wakes the nodes their waiting work now fits on.
    capped_freed: std::collections::BTreeSet<u32>,
}

impl SchedulerView {
    /// An empty view.
    pub fn new() -> Self {
        Self::default()
    }

    /// A view of every node of `cluster`, all idle.
    pub fn with_cluster(cluster: &crate::model::Cluster) -> Result<Self, ViewError> {
        let mut view = Self::new();
        for node in &cluster.nodes {
            view.add_node(node.clone())?;
        }
        Ok(view)
    }

    /// Adds an idle node; ids must be dense and in order.
    pub fn add_node(&mut self, node: Node) -> Result<NodeId, ViewError> {
        let expected = NodeId(self.nodes.len() as u32);
        if node.id != expected {
            return Err(ViewError::NodeOutOfOrder {
                found: node.id,
                expected,
            });
        }
        let capacity = node.capacity();
        self.totals = self.totals + capacity;
        self.free_alive = self.free_alive + capacity;
        self.device_speed_total += device_speed(&node);
        self.liveness_generation += 1;
        self.nodes.push(NodeState {
            device_free: vec![true; node.accelerators.len()],
            node,
            free: capacity,
            total_io_bytes: 0.0,
            io_tasks: 0,
            running: 0,
            alive: true,
            ends_at: None,
            accel_held: false,
        });
        Ok(expected)
    }

    /// Marks a node lost (or back); a lost node's capacity leaves the cluster totals. The caller
    /// re-queues the tasks that were running there with [`SchedulerView::requeue`].
    pub fn set_alive(&mut self, node: NodeId, alive: bool) -> Result<(), ViewError> {
        let state = self
            .nodes
            .get_mut(node.index())
            .ok_or(ViewError::UnknownNode(node))?;
        if state.alive != alive {
            state.alive = alive;
            self.liveness_generation += 1;
            let capacity = state.node.capacity();
            let speed = device_speed(&state.node);
            let free = state.free;
            if alive {
                self.totals = self.totals + capacity;
                self.free_alive = self.free_alive + free;
                self.device_speed_total += speed;
            } else {
                self.totals = self.totals - capacity;
                self.free_alive = self.free_alive - free;
                self.device_speed_total = (self.device_speed_total - speed).max(0.0);
            }
        }
        Ok(())
    }

    /// Replaces `node`'s attributes (sorted, without repeats): applications that `require`
    /// attributes fit only where the node has them all.
    pub fn set_node_attributes(
        &mut self,
        node: NodeId,
        attributes: Vec<String>,
    ) -> Result<(), ViewError> {
        let state = self
            .nodes
            .get_mut(node.index())
            .ok_or(ViewError::UnknownNode(node))?;
        if state.node.attributes != attributes {
            state.node.attributes = attributes;
            self.placement_generation += 1;
        }
        Ok(())
    }

    /// Gives `node` new cores, memory and speeds (its agent was restarted with others): only
    /// while nothing holds any of it ([`ViewError::NodeBusy`] otherwise), so no running task
    /// loses what it was given. Its devices and attributes are set apart.
    pub fn set_node_resources(&mut self, node: NodeId, new: &Node) -> Result<(), ViewError> {
        let state = self
            .nodes
            .get_mut(node.index())
            .ok_or(ViewError::UnknownNode(node))?;
        let old = state.node.capacity();
        if state.running > 0 || state.free != old {
            return Err(ViewError::NodeBusy(node));
        }
        take_figures(&mut state.node, new);
        let capacity = state.node.capacity();
        state.free = capacity;
        if state.alive {
            self.totals = self.totals - old + capacity;
        }
        self.free_changed(node.index(), old);
        self.placement_generation += 1;
        Ok(())
    }

    /// Gives `node` new cores, memory and speeds while its work holds `held` of them (the driver
    /// says what, where the view's own figures cannot: a node read back with a stand-in's
    /// figures, against which its running work was booked): its free resources become the new
    /// capacity less `held`. Its running count and devices stay as they are.
    pub fn set_node_resources_holding(
        &mut self,
        node: NodeId,
        new: &Node,
        held: Resources,
    ) -> Result<(), ViewError> {
        let state = self
            .nodes
            .get_mut(node.index())
            .ok_or(ViewError::UnknownNode(node))?;
        let old = state.node.capacity();
        let before = state.free;
        take_figures(&mut state.node, new);
        let capacity = state.node.capacity();
        state.free = capacity - held;
        if state.alive {
            self.totals = self.totals - old + capacity;
        }
        self.free_changed(node.index(), before);
        self.placement_generation += 1;
        Ok(())
    }

    /// Sets when `node` goes away ([`NodeState::ends_at`], on the clock of
    /// [`SchedulerView::now`]; `None`: no end).
    pub fn set_node_end(&mut self, node: NodeId, ends_at: Option<Time>) -> Result<(), ViewError> {
        self.nodes
            .get_mut(node.index())
            .ok_or(ViewError::UnknownNode(node))?
            .ends_at = ends_at;
        Ok(())
    }

    /// Moves the view's clock to `now` (the driver does before it places work): every node's
    /// time left ([`SchedulerView::time_left`]) counts from it. It never goes back.
    pub fn set_now(&mut self, now: Time) {
        self.now = self.now.max(now);
        if self.fair.half_life().is_some() {
            let now = self.now;
            let mut fair = std::mem::take(&mut self.fair);
            let ranked = fair.settle(now, || self.held_shares());
            self.fair = fair;
            if ranked {
                self.refresh_levels();
            }
        }
    }

    /// Turns fair share on, usage decaying by half every `half_life` (the runtime's
    /// `[fair_share] half_life`), or off (`None`, the default): see [`super::fair_share`].
    /// Usage is settled as the clock moves ([`SchedulerView::set_now`]).
    pub fn set_fair_share(&mut self, half_life: Option<Time>) {
        self.fair.set_half_life(half_life);
        self.refresh_levels();
    }

    /// Fair share's half-life, `None` while it is off ([`SchedulerView::set_fair_share`]).
    pub fn fair_share(&self) -> Option<Time> {
        self.fair.half_life()
    }

    /// Group `group`'s decayed usage in share-seconds (1.0: the whole cluster's dominant
    /// resource for a second); `None`: the applications in no group.
    pub fn fair_usage(&self, group: Option<u32>) -> f64 {
        self.fair.usage(group)
    }

    /// Gives group `group` `shares` fair-share shares (default 1; Slurm's `Shares`): its usage is
    /// divided by them before the groups are ranked.
    pub fn set_fair_shares(&mut self, group: u32, shares: u32) {
        self.fair.set_shares(group, shares);
        if self.fair.half_life().is_some() {
            self.refresh_levels();
        }
    }

    /// Sets group `group`'s decayed usage (a restart restoring what it stored).
    pub fn set_fair_usage(&mut self, group: Option<u32>, usage: f64) {
        self.fair.set_usage(group, usage);
        if self.fair.half_life().is_some() {
            self.refresh_levels();
        }
    }

    /// Credits group `group` (`None`: the applications in no group) with fair-share usage for
    /// holding `held` for `lasted`, ending `ended_ago` before now, while nothing settled (the
    /// runtime's server was down; its agents ran on): `held`'s dominant share of the cluster as
    /// it is now, decayed by its age ([`super::fair_share::FairShare::credit`]).
    pub fn credit_fair_usage(
        &mut self,
        group: Option<u32>,
        held: Resources,
        ended_ago: Time,
        lasted: Time,
    ) {
        if self.fair.half_life().is_none() {
            return;
        }
        let share = held.dominant_share(&self.totals);
        self.fair.credit(group, share, ended_ago, lasted);
        self.refresh_levels();
    }

    /// The order policies serve applications in: a higher level first. It is the
    /// application's priority and, under fair share, its group's standing below it (the
    /// group that used least first); without fair share, the priority alone decides.
    #[inline]
    pub fn level(&self, app: &AppState) -> i64 {
        // Policies read this for every candidate of every decision: kept in the application's
        // state ([`SchedulerView::refresh_levels`]), not computed here.
        app.level
    }

    /// The level of an application of `priority` in `group`.
    fn level_of(&self, priority: i32, group: Option<u32>) -> i64 {
        (i64::from(priority) << super::fair_share::STANDING_BITS)
            | i64::from(self.fair.standing(group))
    }

    /// Recomputes every application's level after the standings changed: O(applications),
    /// at most once per [`super::fair_share::SETTLE_PERIOD`] of view time under fair share,
    /// never without it.
    fn refresh_levels(&mut self) {
        for i in 0..self.apps.len() {
            let Some((priority, group)) = self.apps.get(i).map(|a| (a.app.priority, a.group))
            else {
                continue;
            };
            let level = self.level_of(priority, group);
            if let Some(a) = self.apps.get_mut(i) {
                a.level = level;
            }
        }
    }

    /// What the running work in no group holds now: what the live nodes hold beyond the
    /// groups' usage (the runtime's admin's work). O(groups).
    pub fn ungrouped_usage(&self) -> Resources {
        let grouped = self
            .groups
            .iter()
            .fold(Resources::default(), |sum, g| sum + g.usage);
        self.in_use() - grouped
    }

    /// What the live nodes hold now (their capacity less what they have free), kept as nodes
    /// change ([`SchedulerView::free_changed`]): O(1).
    pub fn in_use(&self) -> Resources {
        // Every test run in a debug build checks the running sum against the nodes.
        debug_assert_eq!(
            self.free_alive,
            self.nodes
                .iter()
                .filter(|n| n.alive)
                .fold(Resources::default(), |sum, n| sum + n.free),
            "the live nodes' free resources"
        );
        self.totals - self.free_alive
    }

    /// What each group's running work holds now, by group id.
    pub fn group_usages(&self) -> impl Iterator<Item = Resources> + '_ {
        self.groups.iter().map(|g| g.usage)
    }

    /// Keeps `free_alive` in step with node `index`'s free resources, which were `before`, and
    /// lists the node if its free cores rose ([`SchedulerView::take_cores_freed`]).
    fn free_changed(&mut self, index: usize, before: Resources) {
        let Some(n) = self.nodes.get(index) else {
            return;
        };
        if n.alive {
            self.free_alive = self.free_alive - before + n.free;
        }
        if n.free.cores > before.cores {
            self.cores_freed.note(NodeId(index as u32));
        }
    }

    /// Moves into `into` (emptied first) the nodes whose free cores rose since the last call,
    /// each once, and starts a new list: O(those nodes). A node not listed has no more free
    /// cores than it had at the last call.
    pub fn take_cores_freed(&mut self, into: &mut Vec<NodeId>) {
        self.cores_freed.take(into);
    }

    /// The dominant share of the cluster each group's running work holds now, by group id,
    /// and that of the work in no group (what the nodes hold beyond the groups').
    fn held_shares(&self) -> (Vec<f64>, f64) {
        let totals = self.totals;
        (
            self.groups
                .iter()
                .map(|g| g.usage.dominant_share(&totals))
                .collect(),
            self.ungrouped_usage().dominant_share(&totals),
        )
    }

    /// Changes whenever a node is added or marked lost or back ([`SchedulerView::set_alive`]):
    /// a figure kept over the live nodes holds while this stays the same.
    pub fn liveness_generation(&self) -> u64 {
        self.liveness_generation
    }

    /// The view's clock ([`SchedulerView::set_now`]).
    pub fn now(&self) -> Time {
        self.now
    }

    /// How long tasks may still run on `node` before it goes away; `None`: no end known (or no
    /// such node).
    pub fn time_left(&self, node: NodeId) -> Option<Time> {
        let end = self.nodes.get(node.index())?.ends_at?;
        Some(end.saturating_sub(self.now))
    }

    /// Moves each time a node's attributes or capacity (its own figures, or how many devices
    /// the binding shows it with: [`SchedulerView::set_attached_accelerators`]) or an
    /// application's request change: a policy that caches where an application can run
    /// ([`Node::has_attributes`] against its `requires`, its request against a node's capacity)
    /// computes it again.
    pub fn placement_generation(&self) -> u64 {
        self.placement_generation
    }

    /// Gives `node` the accelerators it reaches through node binding (spec 01): an NNode bound to
    /// an ANode is seen with that ANode's devices, so the policy places accelerator work on it
    /// (the runtime then offloads it); an unbound NNode gets none and takes no such work. Devices
    /// that stay keep their state; the caller re-queues the tasks that held devices it takes away
    /// first (so their resources have returned).
    pub fn set_attached_accelerators(
        &mut self,
        node: NodeId,
        accelerators: Vec<super::cluster::Accelerator>,
    ) -> Result<(), ViewError> {
        let state = self
            .nodes
            .get_mut(node.index())
            .ok_or(ViewError::UnknownNode(node))?;
        let (old_capacity, old_speed) = (state.node.capacity(), device_speed(&state.node));
        let (old_n, new_n) = (
            state.node.accelerators.len() as u32,
            accelerators.len() as u32,
        );
        state.node.accelerators = accelerators;
        state.device_free.resize(new_n as usize, true);
        let before = state.free;
        state.free.gpus = (state.free.gpus + new_n).saturating_sub(old_n);
        if state.alive {
            self.totals = self.totals - old_capacity + state.node.capacity();
            self.device_speed_total =
                (self.device_speed_total - old_speed + device_speed(&state.node)).max(0.0);
        }
        self.free_changed(node.index(), before);
        // Its capacity and its `gpu` attribute follow how many devices it is seen with.
        if old_n != new_n {
            self.placement_generation += 1;
        }
        Ok(())
    }

    /// Holds accelerator work off `node` (or lets it go there again): while held, no GPU task
    /// fits there whatever its free devices. The runtime holds the NNodes of an ANode whose
    /// accelerator service has a full queue (spec 01: the policy sees the ANodes' queue lengths).
    pub fn set_accelerator_held(&mut self, node: NodeId, held: bool) -> Result<(), ViewError> {
        self.nodes
            .get_mut(node.index())
            .ok_or(ViewError::UnknownNode(node))?
            .accel_held = held;
        Ok(())
    }

    /// Sets whether `app`'s tasks need an accelerator (spec 01, a task's `accelerator`), which
    /// [`SchedulerView::fits`] applies for every policy:
    /// - `required`: only the GPU variant, so only on nodes that reach a device (ANodes, NNodes
    ///   bound to one); the application joins the GPU-only queue;
    /// - `preferred`: the GPU variant where a device is reachable; the CPU variant only on a node
    ///   that reaches no device of its kind, and only while no node could take the task on a
    ///   device now;
    /// - `none`: either variant, as the policy chooses.
    pub fn set_accelerator_need(
        &mut self,
        app: AppId,
        need: AcceleratorNeed,
    ) -> Result<(), ViewError> {
        let a = self.app_mut(app)?;
        a.accelerator = need;
        if need == AcceleratorNeed::Required && a.app.gpu.is_some() {
            a.need = Need::GpuOnly;
        }
        Ok(())
    }

    /// Adds an application with the ids of its tasks; ids must be dense and in order.
    pub fn add_application(
        &mut self,
        app: Application,
        tasks: impl IntoIterator<Item = TaskId>,
    ) -> Result<AppId, ViewError> {
        let expected = AppId(self.apps.len() as u32);
        if app.id != expected {
            return Err(ViewError::AppOutOfOrder {
                found: app.id,
                expected,
            });
        }
        let need = app
            .need()
            .ok_or_else(|| ViewError::NoVariant(app.name.clone()))?;
        let level = self.level_of(app.priority, None);
        self.apps.push(AppState {
            pending: tasks.into_iter().collect(),
            app,
            dispatched_cpu: 0,
            dispatched_gpu: 0,
            running: 0,
            completed: 0,
            usage: Resources::default(),
            need,
            accelerator: AcceleratorNeed::None,
            group: None,
            level,
        });
        self.note_pending(expected);
        Ok(expected)
    }

    /// Application `app`'s job was purged: its state is dropped and its id stays taken, so
    /// that a purged job costs one pointer ([`Slots`]). From then on [`SchedulerView::app`]
    /// reads it as [`RETIRED`] and [`SchedulerView::get_app`] as `None`. Refused while a task
    /// of it waits or runs; retiring it again does nothing.
    pub fn retire_application(&mut self, app: AppId) -> Result<(), ViewError> {
        if self.apps.is_retired(app.index()) {
            return Ok(());
        }
        let a = self.app_mut(app)?;
        if a.has_pending() || a.running > 0 {
            return Err(ViewError::StillActive(app));
        }
        self.apps.retire(app.index());
        Ok(())
    }

    /// Makes room for `more` applications at once (a restart adds every stored one; growing one
    /// by one would hold the old and the doubled vector together).
    pub fn reserve_applications(&mut self, more: usize) {
        self.apps.reserve_exact(more);
    }

    /// Adds application `app` already retired (a restart, its job purged before), in id
    /// order as [`SchedulerView::add_application`].
    pub fn add_retired_application(&mut self, app: AppId) -> Result<AppId, ViewError> {
        let expected = AppId(self.apps.len() as u32);
        if app != expected {
            return Err(ViewError::AppOutOfOrder {
                found: app,
                expected,
            });
        }
        self.apps.push_retired();
        Ok(app)
    }

    /// Keeps [`SchedulerView::pending_apps`]'s index true after `app`'s queue changed.
    fn note_pending(&mut self, app: AppId) {
        if self
            .apps
            .get(app.index())
            .is_some_and(AppState::has_pending)
        {
            self.list_pending(app);
        } else {
            self.unlist_pending(app);
        }
    }

    /// `app` has pending tasks: listed in the index, and in its group's.
    fn list_pending(&mut self, app: AppId) {
        self.with_pending.insert(app);
        if let Some(g) = self.apps.get(app.index()).and_then(|a| a.group) {
            self.pending_by_group.entry(g).or_default().insert(app);
        }
    }

    /// `app` has no pending task: out of the index, and of its group's.
    fn unlist_pending(&mut self, app: AppId) {
        if self.with_pending.remove(&app)
            && let Some(g) = self.apps.get(app.index()).and_then(|a| a.group)
        {
            self.unlist_in_group(g, app);
        }
    }

    /// `app` out of group `g`'s index (a group with none pending takes no room).
    fn unlist_in_group(&mut self, g: u32, app: AppId) {
        if let Some(apps) = self.pending_by_group.get_mut(&g) {
            apps.remove(&app);
            if apps.is_empty() {
                self.pending_by_group.remove(&g);
            }
        }
    }

    /// All nodes, by id.
    pub fn nodes(&self) -> &[NodeState] {
        &self.nodes
    }

    /// One node.
    pub fn node(&self, id: NodeId) -> &NodeState {
        &self.nodes[id.index()]
    }

    /// How many application ids were given, retired ones included: the next application's id.
    pub fn app_count(&self) -> usize {
        self.apps.len()
    }

    /// Every application not retired, in id order.
    pub fn apps(&self) -> impl DoubleEndedIterator<Item = &AppState> {
        self.apps.iter().map(|(_, a)| a)
    }

    /// The applications of ids `from..` not retired, in id order (those added since a caller
    /// last looked, when it saw `from` of them).
    pub fn apps_from(&self, from: usize) -> impl Iterator<Item = &AppState> {
        self.apps.iter_from(from).map(|(_, a)| a)
    }

    /// One application, `None` if it is unknown or retired.
    pub fn get_app(&self, id: AppId) -> Option<&AppState> {
        self.apps.get(id.index())
    }

    /// One application; a retired one reads as [`RETIRED`] (no tasks, nothing pending).
    ///
    /// # Panics
    /// On an id never given.
    pub fn app(&self, id: AppId) -> &AppState {
        match self.apps.get(id.index()) {
            Some(a) => a,
            None if id.index() < self.apps.len() => &RETIRED,
            None => panic!("unknown application {id}"),
        }
    }

    /// Capacity of every live node together.
    pub fn totals(&self) -> Resources {
        self.totals
    }

    /// Mean speed weight of the live nodes' accelerators (1.0 when there are none).
    pub fn mean_device_speed(&self) -> f64 {
        if self.totals.gpus == 0 {
            1.0
        } else {
            self.device_speed_total / self.totals.gpus as f64
        }
    }

    /// Sets how many requests a CPU task reads its input in, so that a dispatch adds to `TotalIO`
    /// what the node's next heartbeat would report for it (see [`SchedulerView::io_request`]).
    /// The simulator sets its `cpu_read_chunks` when heartbeats report the reads in flight, and 1
    /// when they report every unread byte; the runtime's agents report every unread byte (1, the
    /// default).
    pub fn set_cpu_read_chunks(&mut self, chunks: u32) {
        self.cpu_read_chunks = chunks.max(1);
    }

    /// The one definition of a task's contribution to its node's `TotalIO` (bytes) and `#IOtask`
    /// (0 or 1) at dispatch, matching what heartbeats report (spec 02: "total IO request size" and
    /// "number of tasks issuing IO"): a GPU task requests its whole split at once; a CPU task
    /// requests its first chunk, `V / cpu_read_chunks`. A task without input issues no IO and does
    /// not count as an IO task.
    pub fn io_request(&self, app: &Application, variant: Variant) -> (f64, u32) {
        let bytes = match variant {
            Variant::Gpu => app.split_bytes as f64,
            Variant::Cpu => app.split_bytes as f64 / f64::from(self.cpu_read_chunks.max(1)),
        };
        (bytes, u32::from(bytes > 0.0))
    }

    /// Applies a heartbeat's disk figures to the node (they replace the running estimate).
    pub fn node_report(&mut self, node: NodeId, report: NodeReport) -> Result<(), ViewError> {
        let state = self
            .nodes
            .get_mut(node.index())
            .ok_or(ViewError::UnknownNode(node))?;
        state.total_io_bytes = report.total_io_bytes;
        state.io_tasks = report.io_tasks;
        Ok(())
    }

    /// Whether one task of `app` as `variant` fits on `node` now.
    pub fn fits(&self, app: AppId, node: NodeId, variant: Variant) -> bool {
        let n = &self.nodes[node.index()];
        self.fits_in(app, node, variant, n.free, |kind| n.free_devices(kind))
    }

    /// Whether one task of `app` as `variant` would fit on `node` once the running tasks
    /// `freed` (placed there) ended: what they hold counts as free, their devices too. Every
    /// other rule of [`SchedulerView::fits`] holds as it is now — the application's
    /// `max_running`, its group's cap (the group's usage does not drop), the node's end — so
    /// stopping `freed` starts the task and nothing else is bypassed (priority preemption,
    /// [`crate::policy::batch::preempt`]).
    pub fn fits_freeing(
        &self,
        app: AppId,
        node: NodeId,
        variant: Variant,
        freed: &[&Assignment],
    ) -> bool {
        let Some(n) = self.nodes.get(node.index()) else {
            return false;
        };
        let free = freed
            .iter()
            .filter(|a| a.node == node)
            .fold(n.free, |sum, a| sum + a.request);
        let accelerators = &n.node.accelerators;
        let freed_devices = |kind: Option<&str>| {
            freed
                .iter()
                .filter(|a| a.node == node)
                .flat_map(|a| a.devices.iter())
                .filter(|&&d| {
                    accelerators
                        .get(d as usize)
                        .is_some_and(|acc| kind.is_none_or(|k| acc.kind == k))
                })
                .count() as u32
        };
        self.fits_in(app, node, variant, free, |kind| {
            n.free_devices(kind) + freed_devices(kind)
        })
    }

    /// [`SchedulerView::fits`] with `free` resources on `node` and `free_devices` of a kind.
    #[inline]
    fn fits_in(
        &self,
        app: AppId,
        node: NodeId,
        variant: Variant,
        free: Resources,
        free_devices: impl Fn(Option<&str>) -> u32,
    ) -> bool {
        let (Some(a), n) = (self.apps.get(app.index()), &self.nodes[node.index()]) else {
            return false;
        };
        if !n.alive || (!self.excluded.is_empty() && self.excluded.contains(&(app, node))) {
            return false;
        }
        if self
            .queue
            .0
            .as_ref()
            .is_some_and(|g| g.closed && g.node == node)
        {
            return false;
        }
        // A multi-node task is placed on whole nodes, not by a policy on one.
        if a.app.is_multi_node() {
            return false;
        }
        if !a.app.requires.is_empty() && !n.node.has_attributes(&a.app.requires) {
            return false;
        }
        if a.app.max_running > 0 && a.running >= a.app.max_running {
            return false;
        }
        let Some(request) = a.app.request(variant) else {
            return false;
        };
        if !free.fits(&request) {
            return false;
        }
        if !self.group_has_room(a.group, &request) {
            return false;
        }
        // A task that may run longer than the node has left would be stopped half-way.
        if let (Some(end), Some(limit)) = (n.ends_at, a.app.time_limit(variant))
            && limit > end.saturating_sub(self.now)
        {
            return false;
        }
        match (variant, &a.app.gpu) {
            (Variant::Gpu, Some(gpu)) => {
                !n.accel_held && free_devices(gpu.kind.as_deref()) >= request.gpus
            }
            (Variant::Cpu, Some(gpu)) => match a.accelerator {
                AcceleratorNeed::None => true,
                AcceleratorNeed::Required => false,
                AcceleratorNeed::Preferred => {
                    let kind = gpu.kind.as_deref();
                    let reaches = n
                        .node
                        .accelerators
                        .iter()
                        .any(|acc| kind.is_none_or(|k| acc.kind == k));
                    !reaches
                        && !(0..self.nodes.len() as u32)
                            .any(|m| self.fits(app, NodeId(m), Variant::Gpu))
                }
            },
            _ => true,
        }
    }

    /// Whether a task of `app` could run on `node` at all, once the work running there is done:
    /// the node is alive, has the application's attributes, and its capacity holds one of the
    /// application's variants (devices of the kind included; the CPU variant unless the
    /// application requires an accelerator). Free resources, back-offs and `max_running` aside:
    /// it tells work that waits for busy nodes from work that no node can run
    /// (`hetsched jobs`' pending reason).
    pub fn could_run(&self, app: AppId, node: NodeId) -> bool {
        let (Some(a), Some(n)) = (self.apps.get(app.index()), self.nodes.get(node.index())) else {
            return false;
        };
        if !n.alive || (!a.app.requires.is_empty() && !n.node.has_attributes(&a.app.requires)) {
            return false;
        }
        if a.app.is_multi_node() {
            return true;
        }
        let capacity = n.node.capacity();
        [Variant::Cpu, Variant::Gpu].into_iter().any(|v| {
            let Some(request) = a.app.request(v) else {
                return false;
            };
            if !capacity.fits(&request) {
                return false;
            }
            match (v, &a.app.gpu) {
                (Variant::Gpu, Some(gpu)) => {
                    let kind = gpu.kind.as_deref();
                    let devices = n
                        .node
                        .accelerators
                        .iter()
                        .filter(|acc| kind.is_none_or(|k| acc.kind == k))
                        .count() as u32;
                    devices >= request.gpus
                }
                (Variant::Cpu, Some(_)) => a.accelerator != AcceleratorNeed::Required,
                _ => true,
            }
        })
    }

    /// Application `app`'s state, to change it; refused for an id the view does not have.
    fn app_mut(&mut self, app: AppId) -> Result<&mut AppState, ViewError> {
        self.apps
            .get_mut(app.index())
            .ok_or(ViewError::UnknownApp(app))
    }

    /// Whether `app` is kept off `node` now ([`SchedulerView::set_excluded`]).
    pub fn is_excluded(&self, app: AppId, node: NodeId) -> bool {
        self.excluded.contains(&(app, node))
    }

    /// Sets group `group`'s cap on what its applications' running tasks hold at once, per
    /// resource (0 in a dimension: no cap on it); tasks already running keep what they hold, and
    /// new ones start while the group is under the cap.
    pub fn set_group_cap(&mut self, group: u32, cap: Resources) {
        let old = std::mem::replace(&mut self.group_mut(group).cap, cap);
        // A dimension whose cap went (0) or rose leaves room for work it held back.
        let looser = |old: u64, new: u64| old > 0 && (new == 0 || new > old);
        if looser(old.cores.into(), cap.cores.into())
            || looser(old.memory_bytes, cap.memory_bytes)
            || looser(old.gpus.into(), cap.gpus.into())
        {
            self.capped_freed.insert(group);
        }
    }

    /// Moves into `into` (emptied first) the groups with a cap whose room under it grew since
    /// the last call — what their running work held was given back, or their cap rose or went
    /// — each once, in id order: the groups whose waiting work may start now. O(those groups).
    pub fn take_capped_groups_freed(&mut self, into: &mut Vec<u32>) {
        into.clear();
        into.extend(std::mem::take(&mut self.capped_freed));
    }

    /// Group `group` as it stands (an unknown group: no cap, nothing held).
    pub fn group(&self, group: u32) -> GroupState {
        self.groups.get(group as usize).copied().unwrap_or_default()
    }

    /// Puts application `app` in group `group` (`None`: in none): the cores its running tasks
    /// hold move to the group, and its tasks start only while the group is under its cap.
    pub fn set_app_group(&mut self, app: AppId, group: Option<u32>) -> Result<(), ViewError> {
        let held = self.held_by(app);
        let a = self
            .apps
            .get_mut(app.index())
            .ok_or(ViewError::UnknownApp(app))?;
        let old = std::mem::replace(&mut a.group, group);
        let priority = a.app.priority;
        if old != group && self.with_pending.contains(&app) {
            if let Some(g) = old {
                self.unlist_in_group(g, app);
            }
            if let Some(g) = group {
                self.pending_by_group.entry(g).or_default().insert(app);
            }
        }
        if let Some(g) = group {
            self.group_mut(g);
        }
        let level = self.level_of(priority, group);
        if let Some(a) = self.apps.get_mut(app.index()) {
            a.level = level;
        }
        self.group_sub(old, held);
        self.group_add(group, held);
        Ok(())
    }

    /// What the running tasks of `app` hold (a multi-node task: everything of its nodes).
    fn held_by(&self, app: AppId) -> Resources {
        let single = self
            .apps
            .get(app.index())
            .map_or(Resources::default(), |a| a.usage);
        self.multi_node
            .iter()
            .filter(|((a, _), _)| *a == app)
            .fold(single, |sum, (_, held)| sum + held_total(held))
    }

    fn group_mut(&mut self, group: u32) -> &mut GroupState {
        let i = group as usize;
        if self.groups.len() <= i {
            self.groups.resize(i + 1, GroupState::default());
        }
        &mut self.groups[i]
    }

    fn group_has_room(&self, group: Option<u32>, more: &Resources) -> bool {
        group.is_none_or(|g| self.group(g).has_room(more))
    }

    fn group_add(&mut self, group: Option<u32>, held: Resources) {
        if let Some(gs) = group.and_then(|g| self.groups.get_mut(g as usize)) {
            gs.usage = gs.usage + held;
        }
    }

    fn group_sub(&mut self, group: Option<u32>, held: Resources) {
        let Some(g) = group else {
            return;
        };
        if let Some(gs) = self.groups.get_mut(g as usize) {
            gs.usage = gs.usage - held;
            if gs.cap != Resources::default() && held != Resources::default() {
                self.capped_freed.insert(g);
            }
        }
    }

    /// Whether work holding `more` fits under group `group`'s cap (`None`: no group, so yes):
    /// for drivers that book resources themselves ([`SchedulerView::book`]: the runtime's
    /// workflow instances), with [`SchedulerView::charge_group`].
    pub fn group_room_for(&self, group: Option<u32>, more: &Resources) -> bool {
        self.group_has_room(group, more)
    }

    /// Counts `held` against group `group` (work a driver booked itself); `release_group` gives
    /// it back.
    pub fn charge_group(&mut self, group: Option<u32>, held: Resources) {
        if let Some(g) = group {
            self.group_mut(g);
        }
        self.group_add(group, held);
    }

    /// Gives back what [`SchedulerView::charge_group`] counted.
    pub fn release_group(&mut self, group: Option<u32>, held: Resources) {
        self.group_sub(group, held);
    }

    /// Whether another task of `app` (holding `more`) fits under its group's cap.
    pub fn group_room(&self, app: AppId, more: &Resources) -> bool {
        self.group_has_room(self.apps.get(app.index()).and_then(|a| a.group), more)
    }

    /// Changes `app`'s scheduling priority (`hetsched update --priority`): every placement from
    /// now on reads it (a policy's priority levels, a multi-node gathering's order).
    pub fn set_priority(&mut self, app: AppId, priority: i32) -> Result<(), ViewError> {
        let group = self.app_mut(app)?.group;
        let level = self.level_of(priority, group);
        let a = self.app_mut(app)?;
        a.app.priority = priority;
        a.level = level;
        Ok(())
    }

    /// Changes how many of `app`'s tasks may run at once (`max_running`, 0: no limit; `hetsched
    /// update --max-running`). Tasks running above a lowered cap go on; no new one starts until
    /// fewer run.
    pub fn set_max_running(&mut self, app: AppId, max_running: u32) -> Result<(), ViewError> {
        let a = self.app_mut(app)?;
        a.app.max_running = max_running;
        Ok(())
    }

    /// Changes the wall-clock limit of each of `app`'s tasks, every variant (`None`: no limit;
    /// `hetsched update --time-limit`): placement on a node with an end (an agent's own time
    /// limit) reads the new one. (Running tasks' limits are their agents' to enforce.)
    pub fn set_time_limit(&mut self, app: AppId, limit: Option<Time>) -> Result<(), ViewError> {
        let a = self.app_mut(app)?;
        if let Some(cpu) = a.app.cpu.as_mut() {
            cpu.time_limit = limit;
        }
        if let Some(gpu) = a.app.gpu.as_mut() {
            gpu.time_limit = limit;
        }
        Ok(())
    }

    /// Gives one task of `app`'s `variant` a new `request` of cores, memory and devices
    /// (`hetsched update --cores --memory --gpus`): every placement from now on books it. Tasks
    /// already running keep what they were given: each [`Assignment`] carries its `request`,
    /// which its node gets back when it ends. Refused for a variant the application lacks.
    pub fn set_request(
        &mut self,
        app: AppId,
        variant: Variant,
        new: Resources,
    ) -> Result<(), ViewError> {
        let a = self.app_mut(app)?;
        let request = match variant {
            Variant::Cpu => a.app.cpu.as_mut().map(|c| &mut c.request),
            Variant::Gpu => a.app.gpu.as_mut().map(|g| &mut g.request),
        }
        .ok_or(ViewError::NoSuchVariant(app, variant))?;
        if *request != new {
            *request = new;
            self.placement_generation += 1;
        }
        Ok(())
    }

    /// Gives `app`'s GPU variant the accelerator `kind` its tasks take from now on (`None`: any;
    /// `hetsched update --gpu-kind`): placements pick devices of that kind. Tasks already
    /// running keep their devices. Refused for an application without a GPU variant.
    pub fn set_gpu_kind(&mut self, app: AppId, kind: Option<String>) -> Result<(), ViewError> {
        let a = self.app_mut(app)?;
        let gpu = a
            .app
            .gpu
            .as_mut()
            .ok_or(ViewError::NoSuchVariant(app, Variant::Gpu))?;
        if gpu.kind != kind {
            gpu.kind = kind;
            self.placement_generation += 1;
        }
        Ok(())
    }

    /// Gives `app` the node attributes its tasks require from now on (`hetsched update
    /// --requires`; sorted, without repeats, as [`crate::model::cluster::attribute_set`] makes
    /// them). Tasks already running stay where they are.
    pub fn set_requires(&mut self, app: AppId, requires: Vec<String>) -> Result<(), ViewError> {
        let a = self.app_mut(app)?;
        if a.app.requires != requires {
            a.app.requires = requires;
            self.placement_generation += 1;
        }
        Ok(())
    }

    /// Keeps `app` off `node` (`excluded`) or allows it there again: while excluded, no task of
    /// the application fits on the node, whatever its free resources.
    pub fn set_excluded(&mut self, app: AppId, node: NodeId, excluded: bool) {
        if excluded {
            self.excluded.insert((app, node));
        } else {
            self.excluded.remove(&(app, node));
        }
    }

    /// Takes up to `cores` free cores of `node` for work the view does not dispatch (a stream
    /// topology's worker process), so no task is placed on them; returns how many it took
    /// (tasks already running keep theirs).
    pub fn hold_cores(&mut self, node: NodeId, cores: u32) -> u32 {
        let Some(n) = self.nodes.get_mut(node.index()) else {
            return 0;
        };
        let before = n.free;
        let taken = cores.min(n.free.cores);
        n.free.cores -= taken;
        self.free_changed(node.index(), before);
        taken
    }

    /// Gives back `cores` cores taken with [`SchedulerView::hold_cores`].
    pub fn release_cores(&mut self, node: NodeId, cores: u32) {
        if let Some(n) = self.nodes.get_mut(node.index()) {
            let before = n.free;
            n.free.cores += cores;
            self.free_changed(node.index(), before);
        }
    }

    /// Takes up to `bytes` of `node`'s free memory for work the view does not dispatch (a
    /// stream worker's declared memory): returns what it took (what was free, at most `bytes`).
    pub fn hold_memory(&mut self, node: NodeId, bytes: u64) -> u64 {
        let Some(n) = self.nodes.get_mut(node.index()) else {
            return 0;
        };
        let before = n.free;
        let taken = bytes.min(n.free.memory_bytes);
        n.free.memory_bytes -= taken;
        self.free_changed(node.index(), before);
        taken
    }

    /// Gives back `bytes` taken with [`SchedulerView::hold_memory`].
    pub fn release_memory(&mut self, node: NodeId, bytes: u64) {
        if let Some(n) = self.nodes.get_mut(node.index()) {
            let before = n.free;
            n.free.memory_bytes = n.free.memory_bytes.saturating_add(bytes);
            self.free_changed(node.index(), before);
        }
    }

    /// Whether [`SchedulerView::book`] would book `request` on `node` now.
    pub fn can_book(&self, node: NodeId, request: Resources) -> bool {
        self.nodes.get(node.index()).is_some_and(|n| {
            n.alive && n.free.fits(&request) && n.free_devices(None) >= request.gpus
        })
    }

    /// Whether `node` has no free core: nothing more can be booked there (every request
    /// holds at least one core).
    pub fn is_full(&self, node: NodeId) -> bool {
        self.nodes
            .get(node.index())
            .is_none_or(|n| !n.alive || n.free.cores == 0)
    }

    /// Books `request` on `node` for work the view does not dispatch (a workflow instance,
    /// issue 13) if it fits in what is free now (the node alive, cores, memory, and that many
    /// free devices of any kind): returns the devices taken, or `None` and books nothing.
    pub fn book(&mut self, node: NodeId, request: Resources) -> Option<Vec<u32>> {
        if !self.can_book(node, request) {
            return None;
        }
        let n = self.nodes.get_mut(node.index())?;
        let mut devices = Vec::with_capacity(request.gpus as usize);
        for (d, free) in n.device_free.iter_mut().enumerate() {
            if devices.len() == request.gpus as usize {
                break;
            }
            if *free {
                *free = false;
                devices.push(d as u32);
            }
        }
        let before = n.free;
        n.free = n.free - request;
        n.running += 1;
        self.free_changed(node.index(), before);
        Some(devices)
    }

    /// Takes again what [`SchedulerView::book`] took for work a driver recorded as running
    /// before it restarted: `request` and `devices` on `node`. Unlike `book` it does not check
    /// that the node is alive or has room: it records what is (work sent beyond a node's free
    /// cores, prefetched, was running or queued there).
    pub fn restore_booked(
        &mut self,
        node: NodeId,
        request: Resources,
        devices: &[u32],
    ) -> Result<(), ViewError> {
        let n = self
            .nodes
            .get_mut(node.index())
            .ok_or(ViewError::UnknownNode(node))?;
        for &d in devices {
            if let Some(free) = n.device_free.get_mut(d as usize) {
                *free = false;
            }
        }
        let before = n.free;
        n.free = n.free - request;
        n.running += 1;
        self.free_changed(node.index(), before);
        Ok(())
    }

    /// Gives back what [`SchedulerView::book`] took.
    pub fn unbook(&mut self, node: NodeId, request: Resources, devices: &[u32]) {
        if let Some(n) = self.nodes.get_mut(node.index()) {
            let before = n.free;
            n.free = n.free + request;
            n.running = n.running.saturating_sub(1);
            for &d in devices {
                if let Some(free) = n.device_free.get_mut(d as usize) {
                    *free = true;
                }
            }
            self.free_changed(node.index(), before);
        }
    }

    /// Opens `node`'s queue for the next decision there: the node has `free_cores` free
    /// before a loan of cores that makes room for queued tasks (the runtime's prefetch), and
    /// `admission` says which tasks may be queued. Each placement on the node asks it first;
    /// the first it refuses ends the decision's placements there, so the queue holds only
    /// tasks that rank before the refused one in the policy's order, and a task that may not be
    /// queued (its run time unknown, or long) is not kept behind queued ones: it gets a core
    /// the next time the node has one free. [`SchedulerView::close_queue`] ends it.
    pub fn open_queue(
        &mut self,
        node: NodeId,
        free_cores: u32,
        admission: Box<dyn QueueAdmission>,
    ) {
        self.queue = QueueSlot(Some(QueueGate {
            node,
            free_cores,
            placed_cores: 0,
            closed: false,
            admission,
        }));
    }

    /// Ends the queue [`SchedulerView::open_queue`] opened: whether it refused a placement.
    pub fn close_queue(&mut self) -> bool {
        self.queue.0.take().is_some_and(|g| g.closed)
    }

    /// Dispatches the next pending task of `app` to `node` as `variant`, if it has one and it fits;
    /// updates free resources, devices, `TotalIO`, `#IOtask` and the application's counters.
    pub fn assign(&mut self, app: AppId, node: NodeId, variant: Variant) -> Option<Assignment> {
        let a = self.apps.get(app.index())?;
        if !a.has_pending() || !self.fits(app, node, variant) {
            return None;
        }
        if let Some(g) = self.queue.0.as_mut().filter(|g| g.node == node) {
            let cores = a.app.request(variant)?.cores;
            let queued = g.placed_cores.saturating_add(cores) > g.free_cores;
            if !g.admission.admit(app, variant, cores, queued) {
                g.closed = true;
                return None;
            }
            g.placed_cores = g.placed_cores.saturating_add(cores);
        }
        let (io_bytes, io_task) = self.io_request(&a.app, variant);
        let a = self.apps.get_mut(app.index())?;
        let request = a.app.request(variant)?;
        let task = a.pending.pop_front()?;
        let emptied = a.pending.is_empty();
        let n = &mut self.nodes[node.index()];
        let mut devices = Vec::with_capacity(request.gpus as usize);
        if variant == Variant::Gpu {
            let kind = a.app.gpu.as_ref().and_then(|g| g.kind.as_deref());
            for (d, (free, acc)) in n
                .device_free
                .iter_mut()
                .zip(&n.node.accelerators)
                .enumerate()
            {
                if devices.len() == request.gpus as usize {
                    break;
                }
                if *free && kind.is_none_or(|k| acc.kind == k) {
                    *free = false;
                    devices.push(d as u32);
                }
            }
        }
        let before = n.free;
        n.free = n.free - request;
        n.running += 1;
        n.total_io_bytes += io_bytes;
        n.io_tasks += io_task;
        a.usage = a.usage + request;
        a.running += 1;
        match variant {
            Variant::Cpu => a.dispatched_cpu += 1,
            Variant::Gpu => a.dispatched_gpu += 1,
        }
        let group = a.group;
        self.group_add(group, request);
        self.free_changed(node.index(), before);
        if emptied {
            self.unlist_pending(app);
        }
        Some(Assignment {
            task,
            app,
            node,
            variant,
            devices,
            request,
        })
    }

    /// Takes everything free on `node` (cores, memory, devices) for a multi-node task gathering
    /// its nodes, so that nothing else starts there; what runs there keeps its share, and a
    /// later call takes what it frees. Tasks already running are not counted.
    pub fn hold_free(&mut self, node: NodeId) -> Held {
        let Some(n) = self.nodes.get_mut(node.index()) else {
            return Held {
                node,
                resources: Resources::default(),
                devices: Vec::new(),
            };
        };
        let devices: Vec<u32> = n
            .device_free
            .iter_mut()
            .enumerate()
            .filter(|(_, free)| **free)
            .map(|(d, free)| {
                *free = false;
                d as u32
            })
            .collect();
        let resources = Resources::new(n.free.cores, n.free.memory_bytes, devices.len() as u32);
        let before = n.free;
        n.free = n.free - resources;
        *self.held.entry(node).or_default() += 1;
        self.free_changed(node.index(), before);
        Held {
            node,
            resources,
            devices,
        }
    }

    /// Adds what is free now on `held`'s node to it (what ended there since it was taken).
    pub fn hold_more(&mut self, held: &mut Held) {
        let more = self.hold_free(held.node);
        if let Some(count) = self.held.get_mut(&held.node) {
            *count = count.saturating_sub(1);
        }
        held.resources = held.resources + more.resources;
        held.devices.extend(more.devices);
    }

    /// Whether a multi-node task (or the gathering of one) holds `node`: nothing else may start
    /// there, not even beyond its free cores (the runtime's prefetch lends none).
    pub fn is_held(&self, node: NodeId) -> bool {
        self.held.get(&node).is_some_and(|&n| n > 0)
    }

    /// Gives back what [`SchedulerView::hold_free`] took.
    pub fn give_back(&mut self, held: &Held) {
        if let Some(count) = self.held.get_mut(&held.node) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                self.held.remove(&held.node);
            }
        }
        if let Some(n) = self.nodes.get_mut(held.node.index()) {
            let before = n.free;
            n.free = n.free + held.resources;
            for &d in &held.devices {
                if let Some(free) = n.device_free.get_mut(d as usize) {
                    *free = true;
                }
            }
            self.free_changed(held.node.index(), before);
        }
    }

    /// Whether `held` is all of its node: the node is whole for a multi-node task.
    pub fn holds_whole(&self, held: &Held) -> bool {
        self.nodes.get(held.node.index()).is_some_and(|n| {
            let whole = n.node.capacity();
            held.resources.cores == whole.cores
                && held.resources.memory_bytes == whole.memory_bytes
                && held.devices.len() == n.device_free.len()
        })
    }

    /// Starts the next pending task of multi-node application `app` on the nodes of `held`
    /// (each taken whole with [`SchedulerView::hold_free`]; the first is where its command runs):
    /// the task holds them until it finishes, is requeued or abandoned. `Err` gives `held` back to
    /// the caller when the application has no pending task.
    pub fn start_multi_node(
        &mut self,
        app: AppId,
        held: Vec<Held>,
    ) -> Result<Assignment, Vec<Held>> {
        let Some(root) = held.first().map(|h| h.node) else {
            return Err(held);
        };
        let Some(a) = self.apps.get_mut(app.index()) else {
            return Err(held);
        };
        let Some(task) = a.pending.pop_front() else {
            return Err(held);
        };
        a.running += 1;
        a.dispatched_cpu += 1;
        let group = a.group;
        self.group_add(group, held_total(&held));
        self.note_pending(app);
        if let Some(n) = self.nodes.get_mut(root.index()) {
            n.running += 1;
        }
        self.multi_node.insert((app, task), held);
        Ok(Assignment {
            task,
            app,
            node: root,
            variant: Variant::Cpu,
            devices: Vec::new(),
            request: Resources::default(),
        })
    }

    /// What running multi-node task `task` of `app` holds, its first node first.
    pub fn multi_node_held(&self, app: AppId, task: TaskId) -> Option<&[Held]> {
        self.multi_node.get(&(app, task)).map(Vec::as_slice)
    }

    /// Restores a multi-node task a driver recorded as running on `nodes` (its first node
    /// first) before it restarted: takes what is free on each, as
    /// [`SchedulerView::restore_running`] records what is.
    pub fn restore_multi_node(
        &mut self,
        running: &Assignment,
        nodes: &[NodeId],
    ) -> Result<(), ViewError> {
        for &n in nodes {
            if n.index() >= self.nodes.len() {
                return Err(ViewError::UnknownNode(n));
            }
        }
        let a = self
            .apps
            .get_mut(running.app.index())
            .ok_or(ViewError::UnknownApp(running.app))?;
        a.running += 1;
        a.dispatched_cpu += 1;
        let group = a.group;
        let held: Vec<Held> = nodes.iter().map(|&n| self.hold_free(n)).collect();
        self.group_add(group, held_total(&held));
        if let Some(n) = nodes.first().and_then(|r| self.nodes.get_mut(r.index())) {
            n.running += 1;
        }
        self.multi_node.insert((running.app, running.task), held);
        Ok(())
    }

    fn release(&mut self, done: &Assignment) {
        if let Some(held) = self.multi_node.remove(&(done.app, done.task)) {
            if let Some(a) = self.apps.get_mut(done.app.index()) {
                a.running = a.running.saturating_sub(1);
                let group = a.group;
                self.group_sub(group, held_total(&held));
            }
            if let Some(n) = held
                .first()
                .and_then(|h| self.nodes.get_mut(h.node.index()))
            {
                n.running = n.running.saturating_sub(1);
            }
            for h in &held {
                self.give_back(h);
            }
            return;
        }
        // A retired application has no task running (it is refused while it has).
        let Some(a) = self.apps.get_mut(done.app.index()) else {
            return;
        };
        let request = done.request;
        a.usage = a.usage - request;
        a.running = a.running.saturating_sub(1);
        let group = a.group;
        self.group_sub(group, request);
        let n = &mut self.nodes[done.node.index()];
        let before = n.free;
        n.free = n.free + request;
        n.running = n.running.saturating_sub(1);
        for &d in &done.devices {
            if let Some(free) = n.device_free.get_mut(d as usize) {
                *free = true;
            }
        }
        self.free_changed(done.node.index(), before);
    }

    /// A dispatched task finished successfully: its resources return to the node.
    pub fn task_finished(&mut self, done: &Assignment) {
        self.release(done);
        if let Some(a) = self.apps.get_mut(done.app.index()) {
            a.completed += 1;
        }
    }

    /// A dispatched task will run again (it failed, or its node was lost): its resources return
    /// and it goes to the front of its application's queue.
    pub fn requeue(&mut self, done: &Assignment) {
        self.release(done);
        if let Some(a) = self.apps.get_mut(done.app.index()) {
            a.pending.push_front(done.task);
            self.list_pending(done.app);
        }
    }

    /// Tasks that had failed for good (and were abandoned) are to run again (the runtime's
    /// `resubmit --failed`): they join the end of their application's queue.
    pub fn resubmit(&mut self, app: AppId, tasks: impl IntoIterator<Item = TaskId>) {
        if let Some(a) = self.apps.get_mut(app.index()) {
            a.pending.extend(tasks);
            self.note_pending(app);
        }
    }

    /// A dispatched task will not run again (it failed for good, or was cancelled): its resources
    /// return to the node, and it counts neither as completed nor as pending.
    pub fn task_abandoned(&mut self, done: &Assignment) {
        self.release(done);
    }

    /// Restores a task that a driver recorded as running before it restarted: takes the task's
    /// `request` and devices on its node and counts it as dispatched and running. The task must not
    /// also be pending. Unlike [`SchedulerView::assign`] it does not check the node is alive or has
    /// room: it records what is, not what a policy decides.
    pub fn restore_running(&mut self, running: &Assignment) -> Result<(), ViewError> {
        let a = self
            .apps
            .get_mut(running.app.index())
            .ok_or(ViewError::UnknownApp(running.app))?;
        let n = self
            .nodes
            .get_mut(running.node.index())
            .ok_or(ViewError::UnknownNode(running.node))?;
        let request = running.request;
        for &d in &running.devices {
            if let Some(free) = n.device_free.get_mut(d as usize) {
                *free = false;
            }
        }
        let before = n.free;
        n.free = n.free - request;
        n.running += 1;
        a.usage = a.usage + request;
        a.running += 1;
        match running.variant {
            Variant::Cpu => a.dispatched_cpu += 1,
            Variant::Gpu => a.dispatched_gpu += 1,
        }
        let group = a.group;
        self.group_add(group, request);
        self.free_changed(running.node.index(), before);
        Ok(())
    }

    /// A task the driver had given up for lost and put back in its application's queue runs
    /// after all where `running` placed it (the runtime: its node came back still running
    /// it). It leaves the queue and takes its request and devices on its node again, counted
    /// running but not dispatched once more (it was dispatched once). Refused — `false`,
    /// nothing changed — unless the node is alive and has that much free, each of its devices
    /// included: a node is never booked past what it has. Caps, `requires` and the rest of
    /// [`SchedulerView::fits`] are not asked: the task runs already, as in
    /// [`SchedulerView::restore_running`].
    pub fn resume(&mut self, running: &Assignment) -> bool {
        let Some(n) = self.nodes.get(running.node.index()) else {
            return false;
        };
        let devices_free = running
            .devices
            .iter()
            .all(|&d| n.device_free.get(d as usize).copied().unwrap_or(false));
        if !n.alive || !n.free.fits(&running.request) || !devices_free {
            return false;
        }
        let Some(a) = self.apps.get_mut(running.app.index()) else {
            return false;
        };
        a.pending.retain(|&t| t != running.task);
        a.usage = a.usage + running.request;
        a.running += 1;
        let group = a.group;
        self.note_pending(running.app);
        let n = &mut self.nodes[running.node.index()];
        for &d in &running.devices {
            if let Some(free) = n.device_free.get_mut(d as usize) {
                *free = false;
            }
        }
        let before = n.free;
        n.free = n.free - running.request;
        n.running += 1;
        self.group_add(group, running.request);
        self.free_changed(running.node.index(), before);
        true
    }

    /// Restores the counters of `app` after a driver restart: `cpu` and `gpu` tasks were dispatched
    /// as each variant and have finished, `completed` of them successfully.
    pub fn restore_finished(
        &mut self,
        app: AppId,
        cpu: u32,
        gpu: u32,
        completed: u32,
    ) -> Result<(), ViewError> {
        let a = self.app_mut(app)?;
        a.dispatched_cpu += cpu;
        a.dispatched_gpu += gpu;
        a.completed += completed;
        Ok(())
    }

    /// Replaces the base profile of `app`'s `variant` (e.g. with one learned from finished tasks:
    /// the runtime measures whole task times, so `compute` carries them and `read` may be 0).
    /// Does nothing if the application has no such variant.
    pub fn update_profile(
        &mut self,
        app: AppId,
        variant: Variant,
        compute: Time,
        read: Time,
    ) -> Result<(), ViewError> {
        let a = self.app_mut(app)?;
        match variant {
            Variant::Cpu => {
                if let Some(c) = a.app.cpu.as_mut() {
                    c.compute = compute;
                    c.read = read;
                }
            }
            Variant::Gpu => {
                if let Some(g) = a.app.gpu.as_mut() {
                    g.compute = compute;
                    g.read = read;
                    g.copy = 0;
                }
            }
        }
        Ok(())
    }

    /// Drops every pending task of `app` (cancellation); returns how many were dropped.
    pub fn cancel_pending(&mut self, app: AppId) -> usize {
        let Some(a) = self.apps.get_mut(app.index()) else {
            return 0;
        };
        let n = a.pending.len();
        a.pending.clear();
        self.unlist_pending(app);
        n
    }

    /// Drops the pending tasks of `app` that are in `tasks` (a cancel of some of its tasks);
    /// returns how many it dropped.
    pub fn cancel_pending_tasks(
        &mut self,
        app: AppId,
        tasks: &std::collections::HashSet<TaskId>,
    ) -> usize {
        let Some(a) = self.apps.get_mut(app.index()) else {
            return 0;
        };
        let before = a.pending.len();
        a.pending.retain(|t| !tasks.contains(t));
        let dropped = before - a.pending.len();
        self.note_pending(app);
        dropped
    }

    /// Whether every task of every application finished.
    pub fn all_complete(&self) -> bool {
        self.apps().all(AppState::is_complete)
    }

    /// Time-independent helper for policies: apps with pending tasks, in submission order (an
    /// index: its cost is theirs, not every application's).
    pub fn pending_apps(&self) -> impl Iterator<Item = &AppState> {
        // Every test run in a debug build checks the index against the applications.
        debug_assert!(
            self.with_pending
                .iter()
                .copied()
                .eq(self.apps().filter(|a| a.has_pending()).map(|a| a.app.id)),
            "the index of applications with pending tasks is out of date"
        );
        self.with_pending
            .iter()
            .filter_map(|&a| self.apps.get(a.index()))
    }

    /// The applications of group `group` with pending tasks, in id order: those of
    /// [`SchedulerView::pending_apps`] in that group, found without visiting the others'. What
    /// a driver visits when room under one group's cap grew, at every task end of that group:
    /// 10,000 applications of other users waiting made each visit cost a scan of them all.
    pub fn pending_apps_in(&self, group: u32) -> impl Iterator<Item = &AppState> {
        // Every test run in a debug build checks the group's index against the applications.
        debug_assert!(
            self.pending_by_group
                .get(&group)
                .into_iter()
                .flatten()
                .copied()
                .eq(self
                    .pending_apps()
                    .filter(|a| a.group == Some(group))
                    .map(|a| a.app.id)),
            "the index of group {group}'s applications with pending tasks is out of date"
        );
        self.pending_by_group
            .get(&group)
            .into_iter()
            .flatten()
            .filter_map(|&a| self.apps.get(a.index()))
    }

    /// Distinct levels ([`SchedulerView::level`]) of applications with pending tasks, highest
    /// first.
    pub fn pending_levels(&self) -> Vec<i64> {
        let mut levels: Vec<i64> = self.pending_apps().map(|a| self.level(a)).collect();
        levels.sort_unstable_by(|a, b| b.cmp(a));
        levels.dedup();
        levels
    }
}

fn device_speed(node: &Node) -> f64 {
    node.accelerators.iter().map(|a| a.speed).sum()
}

/// Elapsed time since an application started, at least 1 ns (relative progress divides by it).
pub fn elapsed_since(now: Time, start: Time) -> Time {
    now.saturating_sub(start).max(1)
}

/// Gives `node` `new`'s cores, memory and speeds, keeping its name, devices and attributes: what
/// an agent restarted with other figures changes ([`SchedulerView::set_node_resources`],
/// [`SchedulerView::set_node_resources_holding`]).
fn take_figures(node: &mut Node, new: &Node) {
    node.cores = new.cores;
    node.memory_bytes = new.memory_bytes;
    node.core_speed = new.core_speed;
    node.disk_read_bw = new.disk_read_bw;
    node.net_bw = new.net_bw;
    node.net_latency = new.net_latency;
}
