//! Prefetch (issue 10): a node may be handed batch tasks (and workflow instances, which the
//! workflow kind hands out the same way: a loan of cores around its dispatch, [`Observed`] run
//! times per workflow task) beyond its free cores, up to
//! `prefetch` cores' worth, which its agent holds in a queue and starts itself as soon as a
//! running task ends. One heartbeat then carries many results and many assignments, so the
//! server's per-heartbeat cost (an RPC, a transaction, a WAL sync) is spread over more tasks,
//! and the agent need not ask the server before refilling a slot.
//!
//! The batch policy is not changed: while it decides for a heartbeating node it sees that node
//! with `prefetch` more free cores ([`Prefetch::open`]); afterwards the extra cores are taken
//! back ([`Prefetch::close`]). A task placed beyond the node's real free cores is marked
//! `prefetched` and books its resources in the view like any running task, so the node shows no
//! free core until its queue has drained. Cores the policy booked beyond the node's capacity
//! are a debt, repaid out of the next cores released on that node
//! ([`Prefetch::repay_all`]), so the view never shows a free core the node does not have when a
//! policy looks at it.
//!
//! How much is lent is the `prefetch` [`Setting`]. `N` lends N cores' worth of any tasks.
//! `"auto"`, the default, queues only tasks known to be short, from what the server measured of
//! each application variant's finished tasks (their run times as the agent timed them):
//! - a variant is queueable once [`AUTO_MIN_SAMPLES`] of its tasks have succeeded, their mean
//!   run time is at most [`AUTO_BUDGET_NS`] (100 ms), and at most 1 in [`AUTO_LONG_RATIO`] of
//!   them ran longer than that (a `true` delayed by a loaded machine is tolerated; an
//!   application of long tasks, or often long ones, is not): until then, and for long tasks,
//!   nothing is queued, so a long task never waits behind another on a node while a node
//!   elsewhere idles;
//! - the tasks queued on a node in one decision are at most [`AUTO_CAP_PER_CORE`] per core,
//!   and their summed mean run time is at most [`AUTO_BUDGET_NS`] per core ([`AutoQueue`]):
//!   a node's queue drains in about 100 ms (a fifth of the default heartbeat interval), so
//!   queueing delays nothing a user can see, while one heartbeat carries up to 64 tasks per
//!   core (the budget binds first for tasks of 1.6 ms or more; below that, the cap bounds a
//!   reply's length);
//! - "per core" counts only the cores a queue drains through: those held by batch tasks of
//!   variants measured short (for a workflow's instances: by its own instances of tasks
//!   measured short), running or placed on free cores in the same decision
//!   ([`AutoQueue::draining`]). A node whose cores long or unmeasured work holds (or
//!   other kinds' work) queues nothing, so a short task never waits behind a long one — with
//!   `preemption = "requeue"`, an urgent short task is placed where it starts, or preempts.
//! - the batch kind lets the policy fill the node's free cores first, as with prefetch off,
//!   then the loan, asking during that decision (the core view's queue gate,
//!   [`hetsched_core::model::SchedulerView::open_queue`]): the first placement beyond the free
//!   cores that may not be queued, or that the allowance has no room for, ends the decision on
//!   the node. The queue keeps the policy's order, so a task the policy ranks first (under HDAS,
//!   a job that has run nothing yet) is not kept behind queued ones: it gets the next free core.
//!
//! Durability and exactly-once are those of any running task: a prefetched task is recorded as
//! running on its node before the reply leaves; the agent lists it among its running tasks; if
//! the node dies (or the agent restarts, forgetting its queue) the server re-queues it like a
//! running task that vanished, and the agent never starts a task the server took back.

use hetsched_core::{NodeId, Resources, SchedulerView};
use std::collections::{BTreeMap, HashMap};

/// Under `"auto"`: the most queued work per core, as the sum of the queued tasks' mean run
/// times (ns); a run longer than this is a long one.
pub const AUTO_BUDGET_NS: u64 = 100_000_000;
/// Under `"auto"`: a variant with more than one long run in this many is not queued.
pub const AUTO_LONG_RATIO: u64 = 100;
/// Under `"auto"`: the most tasks' cores queued per core of the node in one decision. 64: a
/// `true` (1–2 ms) fills the 100 ms budget, so each heartbeat carries a node's 100 ms of work;
/// at 16 the cap, not the budget, set how often nodes of very short tasks beat, and the
/// server's CPU per task was about 1.6 times as much (docs/performance.md, session 89).
pub const AUTO_CAP_PER_CORE: u32 = 64;
/// Under `"auto"`: successful tasks of a variant measured before any of its tasks is queued.
pub const AUTO_MIN_SAMPLES: u64 = 8;

/// The server's `prefetch` setting: `"auto"` (the default), or a number of cores (`0`: off).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Setting {
    /// Short tasks only, sized from measured run times (see the module documentation).
    #[default]
    Auto,
    /// This many cores' worth of any batch tasks per node (0 = none).
    Cores(u32),
}

impl<'de> serde::Deserialize<'de> for Setting {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = Setting;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("\"auto\" or a number of cores (0 = off)")
            }
            fn visit_u64<E: serde::de::Error>(self, n: u64) -> Result<Setting, E> {
                u32::try_from(n)
                    .map(Setting::Cores)
                    .map_err(|_| E::custom(format!("{n} cores is too many")))
            }
            fn visit_i64<E: serde::de::Error>(self, n: i64) -> Result<Setting, E> {
                u64::try_from(n)
                    .map_err(|_| E::custom(format!("must not be negative, got {n}")))
                    .and_then(|n| self.visit_u64(n))
            }
            fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<Setting, E> {
                if s == "auto" {
                    Ok(Setting::Auto)
                } else {
                    Err(E::custom(format!(
                        "expected \"auto\" or a number of cores, got \"{s}\""
                    )))
                }
            }
        }
        d.deserialize_any(V)
    }
}

/// Run times of successful tasks of one application variant (or one workflow task), as their
/// agents timed them.
#[derive(Clone, Copy, Debug, Default)]
pub struct Observed {
    /// Their summed run time (ns).
    pub total_ns: u128,
    /// How many.
    pub count: u64,
    /// How many ran longer than `prefetch = "auto"`'s budget (a variant often long is not
    /// queued).
    pub long: u64,
}

impl Observed {
    /// Counts one success that ran `duration_ns`.
    pub fn record(&mut self, duration_ns: u64) {
        self.total_ns += u128::from(duration_ns);
        self.count += 1;
        self.long += u64::from(duration_ns > AUTO_BUDGET_NS);
    }

    /// Uncounts one success [`Observed::record`] counted with `duration_ns` (a workflow
    /// instance whose output was lost: its next success counts instead).
    pub fn forget(&mut self, duration_ns: u64) {
        self.total_ns = self.total_ns.saturating_sub(u128::from(duration_ns));
        self.count = self.count.saturating_sub(1);
        self.long = self
            .long
            .saturating_sub(u64::from(duration_ns > AUTO_BUDGET_NS));
    }

    /// The mean run time, once one was measured.
    pub fn mean_ns(&self) -> Option<u64> {
        (self.count > 0).then(|| (self.total_ns / u128::from(self.count)) as u64)
    }

    /// What `"auto"` judges by.
    pub fn run_times(&self) -> RunTimes {
        RunTimes {
            count: self.count,
            mean_ns: self.mean_ns().unwrap_or(0),
            long: self.long,
        }
    }
}

/// What the server measured of one application variant's successful tasks.
#[derive(Clone, Copy, Debug, Default)]
pub struct RunTimes {
    /// Tasks measured.
    pub count: u64,
    /// Their mean run time (ns).
    pub mean_ns: u64,
    /// How many of them ran longer than [`AUTO_BUDGET_NS`].
    pub long: u64,
}

impl RunTimes {
    /// Under `"auto"`: enough tasks measured, short on average, and hardly any long.
    pub fn short(&self) -> bool {
        self.count >= AUTO_MIN_SAMPLES
            && self.mean_ns <= AUTO_BUDGET_NS
            && self.long.saturating_mul(AUTO_LONG_RATIO) <= self.count
    }

    /// Under `"auto"`: tasks of this variant that may be queued per core of a node (0: none).
    pub fn depth(&self) -> u32 {
        if !self.short() {
            return 0;
        }
        let n = AUTO_BUDGET_NS / self.mean_ns.max(1);
        n.min(AUTO_CAP_PER_CORE as u64) as u32
    }
}

/// Under `"auto"`: what one decision may still queue on a node — tasks' cores at most
/// [`AUTO_CAP_PER_CORE`] per core, their mean run times at most [`AUTO_BUDGET_NS`] per core.
#[derive(Debug)]
pub struct AutoQueue {
    cores_left: u64,
    work_left_ns: u128,
    /// Cores of the node not yet counted by [`AutoQueue::drain_through`].
    uncounted: u32,
}

impl AutoQueue {
    /// The allowance of a node of `cores` cores.
    pub fn new(cores: u32) -> Self {
        AutoQueue {
            cores_left: u64::from(cores) * u64::from(AUTO_CAP_PER_CORE),
            work_left_ns: u128::from(cores) * u128::from(AUTO_BUDGET_NS),
            uncounted: 0,
        }
    }

    /// The allowance of a node of `cores` cores before any is known to drain soon: nothing
    /// until [`AutoQueue::drain_through`] counts some.
    pub fn draining(cores: u32) -> Self {
        AutoQueue {
            uncounted: cores,
            ..AutoQueue::new(0)
        }
    }

    /// `cores` more of the node's cores the queue drains through (held by tasks measured
    /// short): the allowance grows by theirs, up to the node's cores.
    pub fn drain_through(&mut self, cores: u32) {
        let cores = cores.min(self.uncounted);
        self.uncounted -= cores;
        self.cores_left += u64::from(cores) * u64::from(AUTO_CAP_PER_CORE);
        self.work_left_ns += u128::from(cores) * u128::from(AUTO_BUDGET_NS);
    }

    /// Whether a task of `cores` cores whose variant measured `rt` may be queued; if so, it
    /// is counted against the allowance.
    pub fn admit(&mut self, rt: RunTimes, cores: u32) -> bool {
        let cores = u64::from(cores.max(1));
        let work = u128::from(rt.mean_ns) * u128::from(cores);
        if !rt.short() || cores > self.cores_left || work > self.work_left_ns {
            return false;
        }
        self.cores_left -= cores;
        self.work_left_ns -= work;
        true
    }
}

/// The work agents hold in their queues, not started yet: tasks sent `prefetched`, and tasks
/// sent onto cores or devices that a stopped task still holds. It is booked in the view like
/// running work — a node's queue is committed to its owners, so their caps count it — but the
/// accounts do not charge it ([`crate::state::State`]'s `settle_accounts`) until its agent
/// starts it: with `prefetch = N` and long tasks, the owners would otherwise be charged for
/// more cores than the nodes have.
///
/// Which tasks are queued is what each agent's heartbeat says (`queued` in its running
/// tasks), and what the server sends `prefetched` in the reply. An agent that predates the
/// flag reports every task started: its queue is then charged from its next beat on. After a
/// restart, until each agent's first heartbeat, the work restored beyond its node's free cores
/// is taken as queued ([`Prefetch::restoring_cores`]).
#[derive(Debug, Default)]
pub struct Queued {
    /// Each queued task's node, owner group (`None`: the admin's) and what it holds; ordered,
    /// so that a job's (or an application's) queued tasks, whose ids are a range, are counted
    /// without a scan of every queue ([`Queued::count_within`]).
    tasks: BTreeMap<u64, (u32, Option<u32>, Resources)>,
    /// What the queued tasks hold, by owner group.
    by_group: HashMap<Option<u32>, Resources>,
    /// How many tasks each node's agent holds queued, by node id.
    by_node: HashMap<u32, u32>,
    /// Tasks that waited in a queue and then started: when, by their agent's clock (listings
    /// show their run time from it, not from their dispatch), until they end.
    began: HashMap<u64, u64>,
}

impl Queued {
    /// Task `task`, of group `group`, holding `held`, waits in the queue of `node`'s agent (a
    /// task already counted is counted once).
    pub fn hold(&mut self, task: u64, node: NodeId, group: Option<u32>, held: Resources) {
        self.unqueue(task);
        self.tasks.insert(task, (node.0, group, held));
        let sum = self.by_group.entry(group).or_default();
        *sum = *sum + held;
        *self.by_node.entry(node.0).or_default() += 1;
    }

    /// Task `task` started, at `at_ns` by its agent's clock (0: not said): it is no longer
    /// queued, and if it was, listings show it as started then.
    pub fn started(&mut self, task: u64, at_ns: u64) {
        if self.unqueue(task) && at_ns > 0 {
            self.began.insert(task, at_ns);
        }
    }

    /// Task `task` ended or left its node.
    pub fn forget(&mut self, task: u64) {
        self.unqueue(task);
        self.began.remove(&task);
    }

    /// When task `task`, which waited in its agent's queue, started (agent's clock).
    pub fn began(&self, task: u64) -> Option<u64> {
        self.began.get(&task).copied()
    }

    /// Whether no task is queued nor started from a queue.
    pub fn is_idle(&self) -> bool {
        self.tasks.is_empty() && self.began.is_empty()
    }

    /// Takes task `task` out of the queues; whether it was in one.
    fn unqueue(&mut self, task: u64) -> bool {
        let Some((node, group, held)) = self.tasks.remove(&task) else {
            return false;
        };
        if let Some(sum) = self.by_group.get_mut(&group) {
            *sum = *sum - held;
            if *sum == Resources::default() {
                self.by_group.remove(&group);
            }
        }
        if let Some(n) = self.by_node.get_mut(&node) {
            *n -= 1;
            if *n == 0 {
                self.by_node.remove(&node);
            }
        }
        true
    }

    /// After a rollback, whose state is rebuilt from the store as after a restart (what is
    /// queued is guessed again, consistently with the rebuilt view, until the agents' next
    /// heartbeats say): when the tasks that still run and are not taken as queued started from
    /// a queue, as `old` knew (`running`: whether a task runs now).
    pub fn carry_began(&mut self, old: &Queued, running: impl Fn(u64) -> bool) {
        for (&task, &at) in &old.began {
            if running(task) && !self.contains(task) {
                self.began.insert(task, at);
            }
        }
    }

    /// How many tasks the agent of node `node` holds queued.
    pub fn on(&self, node: NodeId) -> u32 {
        self.by_node.get(&node.0).copied().unwrap_or(0)
    }

    /// Whether task `task` is queued.
    pub fn contains(&self, task: u64) -> bool {
        self.tasks.contains_key(&task)
    }

    /// What group `group`'s queued tasks hold (`None`: the admin's).
    pub fn of(&self, group: Option<u32>) -> Resources {
        self.by_group.get(&group).copied().unwrap_or_default()
    }

    /// The queued tasks among `ids` (a page of a listing read from the store).
    pub fn within(&self, ids: std::ops::Range<u64>) -> std::collections::HashSet<u64> {
        if ids.start >= ids.end {
            return Default::default();
        }
        self.tasks.range(ids).map(|(&t, _)| t).collect()
    }

    /// How many of the tasks `ids` (a job's or an application's) are queued: O(log queued + that
    /// many).
    pub fn count_within(&self, ids: std::ops::Range<u64>) -> u64 {
        if ids.start >= ids.end {
            return 0;
        }
        self.tasks.range(ids).count() as u64
    }

    /// The tasks among `ids` that started from a queue, and when ([`Queued::began`]).
    pub fn began_within(&self, ids: std::ops::Range<u64>) -> HashMap<u64, u64> {
        self.began
            .iter()
            .filter(|(t, _)| ids.contains(t))
            .map(|(&t, &at)| (t, at))
            .collect()
    }

    /// How many tasks are queued.
    pub fn len(&self) -> usize {
        self.tasks.len()
    }

    /// Whether no task is queued.
    pub fn is_empty(&self) -> bool {
        self.tasks.is_empty()
    }
}

/// The prefetch setting, each node's debt, and the work the agents hold queued (see the module
/// documentation).
#[derive(Debug, Default)]
pub struct Prefetch {
    /// How much a node may be handed beyond its free cores.
    setting: Setting,
    /// Per node: cores booked in the view beyond the node's capacity, not yet repaid.
    debt: Vec<u32>,
    /// What the live nodes owe, kept as debts change, and the view's
    /// [`SchedulerView::liveness_generation`] it holds for: a node lost or back since, it is
    /// summed again over every node ([`Prefetch::live_debt`]).
    live: u32,
    /// See `live`.
    live_at: Option<u64>,
    /// The nodes whose free cores rose since the last repayment, as the view lists them: a
    /// buffer kept between events.
    freed: Vec<NodeId>,
    /// The tasks the agents hold queued.
    pub queued: Queued,
    /// Tasks restored beyond their node's free cores since the last
    /// [`Prefetch::take_restored`] (node, task): queued, as far as the server can tell.
    restored: Vec<(NodeId, u64)>,
}

/// What [`Prefetch::open`] lent a node for one policy decision.
#[derive(Clone, Copy, Debug, Default)]
pub struct Credit {
    /// The node's real free cores before the loan: tasks placed beyond them are prefetched.
    pub free: u32,
    /// Cores lent.
    pub lent: u32,
}

impl Prefetch {
    /// Prefetch as `setting` says.
    pub fn new(setting: Setting) -> Self {
        Prefetch {
            setting,
            ..Default::default()
        }
    }

    /// The setting.
    pub fn setting(&self) -> Setting {
        self.setting
    }

    /// Cores node `node` still owes.
    pub fn debt(&self, node: NodeId) -> u32 {
        self.debt.get(node.index()).copied().unwrap_or(0)
    }

    /// The cores the live nodes owe: what the view books beyond their capacity. O(1), but for
    /// the first call after a node was added, lost or back (O(nodes)).
    pub fn live_debt(&mut self, view: &SchedulerView) -> u32 {
        if self.live_at != Some(view.liveness_generation()) {
            self.live = self.live_debt_afresh(view);
            self.live_at = Some(view.liveness_generation());
        }
        // Every test run in a debug build checks the kept sum against the nodes.
        debug_assert_eq!(
            self.live,
            self.live_debt_afresh(view),
            "the live debt kept differs from that summed"
        );
        self.live
    }

    /// [`Prefetch::live_debt`] summed over every node.
    fn live_debt_afresh(&self, view: &SchedulerView) -> u32 {
        view.nodes()
            .iter()
            .zip(&self.debt)
            .filter(|(n, _)| n.alive)
            .map(|(_, &d)| d)
            .sum()
    }

    /// Whether the kept live debt holds for the view's live nodes (none lost or back since it
    /// was summed: if one was, it is summed again when next read) and counts node `node`'s.
    fn counts_live(&self, view: &SchedulerView, node: NodeId) -> bool {
        self.live_at == Some(view.liveness_generation())
            && view.nodes().get(node.index()).is_some_and(|n| n.alive)
    }

    /// Node `node` owes `cores` more.
    fn add_debt(&mut self, view: &SchedulerView, node: NodeId, cores: u32) {
        if cores == 0 {
            return;
        }
        if self.debt.len() <= node.index() {
            self.debt.resize(node.index() + 1, 0);
        }
        self.debt[node.index()] += cores;
        if self.counts_live(view, node) {
            self.live += cores;
        }
    }

    /// Takes every node's debt out of the cores released on it since (free cores the node does
    /// not really have): O(nodes that released cores since the last call). A node that owes
    /// was left with no free core when it last repaid or borrowed, so only a node whose free
    /// cores rose since ([`SchedulerView::take_cores_freed`]) can repay.
    pub fn repay_all(&mut self, view: &mut SchedulerView) {
        view.take_cores_freed(&mut self.freed);
        for &n in &self.freed {
            let Some(debt) = self.debt.get_mut(n.index()) else {
                continue;
            };
            if *debt > 0 {
                let repaid = view.hold_cores(n, *debt);
                *debt -= repaid;
                if self.counts_live(view, n) {
                    self.live -= repaid;
                }
            }
        }
        // Every test run in a debug build checks that no node that owes has a free core left,
        // which a pass over every node would have taken.
        debug_assert!(
            self.debt
                .iter()
                .zip(view.nodes())
                .all(|(&d, n)| d == 0 || n.free.cores == 0),
            "a node that owes cores has some free"
        );
    }

    /// Lends node `node` `cores` for one policy decision.
    pub fn open(&mut self, view: &mut SchedulerView, node: NodeId, cores: u32) -> Credit {
        self.repay_all(view);
        let free = view.node(node).free.cores;
        // A node that still owes cores gets no loan: its queue is full. Nor does one a
        // multi-node task holds: its agent would start what it queues at once.
        let lent = if self.debt(node) > 0 || view.is_held(node) {
            0
        } else {
            cores
        };
        view.release_cores(node, lent);
        Credit { free, lent }
    }

    /// Takes the loan back after the decision; what the policy used of it becomes debt.
    pub fn close(&mut self, view: &mut SchedulerView, node: NodeId, credit: Credit) {
        let taken = view.hold_cores(node, credit.lent);
        self.add_debt(view, node, credit.lent - taken);
    }

    /// Task `task`, of `cores` cores, is being put back on `node` after a restart (a running
    /// batch task, a running workflow instance): what does not fit in the node's free cores was
    /// prefetched, and is debt; such a task is taken as queued until its agent's first
    /// heartbeat says ([`Prefetch::take_restored`]).
    pub fn restoring_cores(&mut self, view: &SchedulerView, node: NodeId, task: u64, cores: u32) {
        let Some(n) = view.nodes().get(node.index()) else {
            return;
        };
        let beyond = cores.saturating_sub(n.free.cores);
        if beyond > 0 {
            self.restored.push((node, task));
        }
        self.add_debt(view, node, beyond);
    }

    /// The tasks restored beyond their node's free cores since the last call: the state
    /// counts them queued once their owners' groups are known again.
    pub fn take_restored(&mut self) -> Vec<(NodeId, u64)> {
        std::mem::take(&mut self.restored)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hetsched_core::{Node, Resources};

    fn view(cores: u32) -> SchedulerView {
        nodes(1, cores)
    }

    /// A view of `count` nodes of `cores` cores each.
    fn nodes(count: u32, cores: u32) -> SchedulerView {
        let mut v = SchedulerView::new();
        for n in 0..count {
            add_node(&mut v, NodeId(n), cores);
        }
        v
    }

    fn add_node(v: &mut SchedulerView, id: NodeId, cores: u32) {
        v.add_node(Node {
            id,
            name: format!("n{}", id.0),
            rack: hetsched_core::RackId(0),
            cores,
            core_speed: 1.0,
            memory_bytes: 1 << 30,
            disk_read_bw: 1e8,
            net_bw: 1e8,
            net_latency: 0,
            accelerators: Vec::new(),
            attributes: Vec::new(),
        })
        .expect("node");
    }

    fn cores(cores: u32) -> Resources {
        Resources {
            cores,
            ..Default::default()
        }
    }

    #[test]
    fn only_the_nodes_that_released_cores_repay_and_the_live_debt_is_kept() {
        let mut v = nodes(4, 2);
        let mut p = Prefetch::new(Setting::Cores(2));
        // Kept as nodes borrow, repay, are lost and come back: the live debt is what a pass
        // over every node sums.
        let kept = |p: &mut Prefetch, v: &SchedulerView| {
            assert_eq!(p.live_debt(v), p.live_debt_afresh(v));
            (0..4).map(|n| p.debt(NodeId(n))).collect::<Vec<_>>()
        };
        // Nodes 0, 2 and 3 fill their two cores and use their two-core loan: each owes two.
        for n in [0, 2, 3].map(NodeId) {
            let c = p.open(&mut v, n, 2);
            v.book(n, cores(4)).expect("fits in the loan");
            p.close(&mut v, n, c);
        }
        assert_eq!(kept(&mut p, &v), [2, 0, 2, 2]);
        assert_eq!(p.live_debt(&v), 6);
        // Node 1's core comes and goes; node 0 gets one back: it repays one, owes one.
        v.book(NodeId(1), cores(1)).expect("a free core");
        v.unbook(NodeId(1), cores(1), &[]);
        v.unbook(NodeId(0), cores(1), &[]);
        p.repay_all(&mut v);
        assert_eq!(kept(&mut p, &v), [1, 0, 2, 2]);
        assert_eq!(v.node(NodeId(1)).free.cores, 2, "node 1 owes nothing");
        // Node 3 is lost: what it owes is no longer live, though still owed.
        v.set_alive(NodeId(3), false).expect("node 3");
        assert_eq!(kept(&mut p, &v), [1, 0, 2, 2]);
        assert_eq!(p.live_debt(&v), 3);
        // Its tasks leave it, and node 0's second core comes back: both repay in full, and
        // are no longer kept as owing; node 0 has one core really free.
        v.unbook(NodeId(3), cores(4), &[]);
        v.unbook(NodeId(0), cores(2), &[]);
        p.repay_all(&mut v);
        assert_eq!(kept(&mut p, &v), [0, 0, 2, 0]);
        assert_eq!(v.node(NodeId(0)).free.cores, 1);
        // Node 2 is given its loan in debt: none, so it owes no more.
        let c = p.open(&mut v, NodeId(2), 2);
        assert_eq!(c.lent, 0);
        p.close(&mut v, NodeId(2), c);
        assert_eq!(kept(&mut p, &v), [0, 0, 2, 0]);
        // Node 3 comes back owing nothing; node 2 is lost owing two, and comes back before its
        // tasks leave it: what it repays then was not in the sum last read.
        v.set_alive(NodeId(3), true).expect("node 3");
        v.set_alive(NodeId(2), false).expect("node 2");
        assert_eq!(p.live_debt(&v), 0);
        v.set_alive(NodeId(2), true).expect("node 2");
        v.unbook(NodeId(2), cores(4), &[]);
        p.repay_all(&mut v);
        assert_eq!(kept(&mut p, &v), [0, 0, 0, 0]);
        assert_eq!(v.node(NodeId(2)).free.cores, 2);
    }

    #[test]
    fn a_used_loan_is_repaid_out_of_the_next_released_cores() {
        let mut v = view(4);
        let mut p = Prefetch::new(Setting::Cores(4));
        let c = p.open(&mut v, NodeId(0), 4);
        assert_eq!((c.free, c.lent), (4, 4));
        assert_eq!(v.node(NodeId(0)).free.cores, 8);
        // The policy places six one-core tasks: two beyond the node's cores.
        let one = Resources {
            cores: 6,
            ..Default::default()
        };
        v.book(NodeId(0), one).expect("fits in the loan");
        p.close(&mut v, NodeId(0), c);
        assert_eq!(v.node(NodeId(0)).free.cores, 0);
        assert_eq!(p.debt(NodeId(0)), 2);
        // No loan while in debt.
        let c = p.open(&mut v, NodeId(0), 4);
        assert_eq!(c.lent, 0);
        p.close(&mut v, NodeId(0), c);
        // Three cores come back: two repay the debt, one is really free.
        v.unbook(
            NodeId(0),
            Resources {
                cores: 3,
                ..Default::default()
            },
            &[],
        );
        p.repay_all(&mut v);
        assert_eq!(p.debt(NodeId(0)), 0);
        assert_eq!(v.node(NodeId(0)).free.cores, 1);
    }

    #[test]
    fn queued_work_is_summed_by_owner_once_per_task_until_it_starts() {
        let mut q = Queued::default();
        let r = |cores, memory_bytes| Resources {
            cores,
            memory_bytes,
            gpus: 0,
        };
        let (a, b) = (NodeId(0), NodeId(1));
        q.hold(1, a, Some(0), r(2, 10));
        q.hold(2, a, Some(0), r(1, 5));
        q.hold(3, b, None, r(4, 0));
        // Told again (the next heartbeat's `queued`): still counted once.
        q.hold(1, a, Some(0), r(2, 10));
        assert_eq!((q.of(Some(0)), q.of(None), q.len()), (r(3, 15), r(4, 0), 3));
        assert_eq!((q.on(a), q.on(b)), (2, 1));
        assert_eq!(q.within(2..4).len(), 2);
        assert_eq!(
            [0..1, 1..3, 0..9, 3..4, 4..9].map(|r| q.count_within(r)),
            [0, 2, 3, 1, 0]
        );
        // A reversed range (a corrupt one) counts nothing rather than panicking.
        let (from, to) = (5, 2);
        assert_eq!((q.count_within(from..to), q.within(from..to).len()), (0, 0));
        q.started(1, 77);
        q.started(1, 88);
        assert_eq!(q.of(Some(0)), r(1, 5));
        // Started from the queue: when, as its agent said the first time.
        assert_eq!(q.began(1), Some(77));
        q.started(4, 99);
        assert_eq!(q.began(4), None, "never queued");
        q.started(2, 0);
        q.forget(3);
        assert!(q.is_empty() && !q.is_idle());
        assert_eq!((q.on(a), q.on(b)), (0, 0));
        q.forget(1);
        assert!(q.is_idle());
        assert_eq!(
            (q.of(Some(0)), q.of(None), q.of(Some(7))),
            (r(0, 0), r(0, 0), r(0, 0))
        );
    }

    #[test]
    fn a_task_restored_beyond_its_nodes_free_cores_is_taken_as_queued() {
        let mut v = view(2);
        let mut p = Prefetch::new(Setting::Cores(2));
        for (task, cores) in [(10, 1), (11, 1), (12, 2)] {
            p.restoring_cores(&v, NodeId(0), task, cores);
            v.restore_booked(
                NodeId(0),
                Resources {
                    cores,
                    ..Default::default()
                },
                &[],
            )
            .expect("restored");
        }
        assert_eq!(p.take_restored(), [(NodeId(0), 12)]);
        assert_eq!(p.debt(NodeId(0)), 2);
        assert_eq!(p.live_debt(&v), 2);
        assert!(p.take_restored().is_empty());
    }

    #[test]
    fn without_an_allowance_nothing_changes() {
        let mut v = view(4);
        let mut p = Prefetch::new(Setting::Cores(0));
        let c = p.open(&mut v, NodeId(0), 0);
        assert_eq!(v.node(NodeId(0)).free.cores, 4);
        p.close(&mut v, NodeId(0), c);
        assert_eq!(v.node(NodeId(0)).free.cores, 4);
        assert_eq!(p.debt(NodeId(0)), 0);
    }

    fn measured(count: u64, mean_ms: u64, long: u64) -> RunTimes {
        RunTimes {
            count,
            mean_ns: mean_ms * 1_000_000,
            long,
        }
    }

    #[test]
    fn auto_queues_only_variants_measured_short() {
        // Not measured enough yet: nothing queued.
        assert_eq!(measured(AUTO_MIN_SAMPLES - 1, 1, 0).depth(), 0);
        // 1 ms tasks: 100 per core fit in 100 ms, capped at 64.
        assert_eq!(measured(100, 1, 0).depth(), AUTO_CAP_PER_CORE);
        // 2 ms tasks: 50 per core, the budget.
        assert_eq!(measured(100, 2, 0).depth(), 50);
        // 25 ms tasks: 4 per core.
        assert_eq!(measured(100, 25, 0).depth(), 4);
        // One long run in 100 is tolerated; two are not, however short the mean.
        assert_eq!(measured(100, 2, 1).depth(), 50);
        assert_eq!(measured(100, 2, 2).depth(), 0);
        // One long run among the first 8: not until 100 are measured.
        assert_eq!(measured(8, 2, 1).depth(), 0);
        // Long tasks: never.
        assert_eq!(measured(100, 1000, 100).depth(), 0);
        assert_eq!(measured(100, 101, 0).depth(), 0);
    }

    #[test]
    fn an_auto_queue_holds_at_most_the_budget_of_work_per_core() {
        let mut q = AutoQueue::new(2);
        // 40 ms tasks on 2 cores: 200 ms of budget hold five.
        let rt = measured(10, 40, 0);
        let admitted = (0..10).filter(|_| q.admit(rt, 1)).count();
        assert_eq!(admitted, 5);
        // Short tasks on 1 core: capped at 64 per core.
        let mut q = AutoQueue::new(1);
        let admitted = (0..100).filter(|_| q.admit(measured(10, 0, 0), 1)).count();
        assert_eq!(admitted, AUTO_CAP_PER_CORE as usize);
        // A long variant is never admitted.
        assert!(!AutoQueue::new(4).admit(measured(10, 500, 10), 1));
    }

    #[test]
    fn the_setting_reads_auto_or_a_number() {
        #[derive(serde::Deserialize)]
        struct C {
            prefetch: Setting,
        }
        let read = |t: &str| toml::from_str::<C>(t).map(|c| c.prefetch);
        assert_eq!(read("prefetch = \"auto\"").ok(), Some(Setting::Auto));
        assert_eq!(read("prefetch = 0").ok(), Some(Setting::Cores(0)));
        assert_eq!(read("prefetch = 32").ok(), Some(Setting::Cores(32)));
        assert!(read("prefetch = -1").is_err());
        assert!(read("prefetch = \"lots\"").is_err());
    }
}
