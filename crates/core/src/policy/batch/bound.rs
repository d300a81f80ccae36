//! A lower bound on the makespan of any batch schedule (spec 02's task model), whatever the policy:
//! the yardstick every simulated run is measured against (`makespan / bound`).
//!
//! # The fluid relaxation
//! Forget that tasks are indivisible and that they start only on heartbeats. Each application `a`
//! has `N_a` tasks; let `x[a, c, v]` be how many of them run as variant `v` (CPU or GPU) on nodes of
//! class `c` (identical nodes form one class of `m_c` nodes). A task occupies its resources for at
//! least its *best duration* on that node:
//! - CPU task: `tpc0 / core_speed + V / BW` — it computes at the core's speed and reads its split no
//!   faster than the whole disk;
//! - GPU task: `tpg0 / s_max + tdcg + V / BW`, with `s_max` the fastest accelerator of the node that
//!   the task may use.
//!
//! Minimise `T` subject to
//! - every task runs somewhere: `Σ_{c,v} x[a,c,v] = N_a`;
//! - per class and resource (cores, memory, accelerators in total, accelerators of each requested
//!   kind): `Σ x · duration · request / capacity ≤ m_c · T` — no resource is held for more than
//!   `capacity × T` resource-seconds;
//! - per class, the disk: `Σ x · V / BW ≤ m_c · T` — a disk reads at most `BW` bytes per second.
//!
//! Every real schedule that ends at `M` gives a feasible point with `T = M` (count each node's tasks;
//! each task held its resources and read its bytes within `[0, M]`), so the optimum `T*` is `≤ M`.
//! Two more bounds hold for every schedule and are combined with `max`: no task ends before
//! `submit_a + shortest task of a`, and for each submission time `r`, the work submitted at or after
//! `r` cannot start before `r` (`r + T*(apps submitted at ≥ r)`). `docs/bound.md` gives the proof.
//!
//! Identical nodes are merged into one class with `m_c` times the capacity: by symmetry (averaging
//! a solution over the nodes of a class) this changes nothing in the optimum, and it keeps the
//! programme small for real clusters, which have a few node types.
//!
//! # Pooling similar nodes (clusters of many node types)
//! With more than [`MAX_CLASSES`] distinct node descriptions, similar nodes are *pooled* into a
//! group `G` (their cores, speeds, memory, disk bandwidth and accelerators on a common logarithmic
//! grid, coarsened until at most [`MAX_CLASSES`] groups remain). A group has one variable per
//! (application, variant) and the rows of one node whose capacities are the group's sums, with
//! each task's **shortest** duration over the group's nodes it fits on:
//! `Σ x[a,G,v] · min_{n∈G} d[a,n,v] · request ≤ (Σ_{n∈G} capacity_n) · T`, and for the disk
//! `Σ x[a,G,v] · V_a ≤ (Σ_{n∈G} BW_n) · T`. This is still a lower bound: from any schedule, let
//! `x[a,G,v]` count its tasks on the group's nodes; summing each node's row
//! (`Σ x[a,n,v] · d[a,n,v] · request ≤ capacity_n · M`) over the group and replacing every
//! `d[a,n,v]` by the smaller minimum keeps the inequality. Pooling can only lower `T*` (the bound
//! gets looser, never wrong); [`LowerBound::exact_classes`] says whether it happened. The LP is
//! solved by `microlp` (pure Rust simplex) through `good_lp`.

use crate::model::{Application, Cluster, Node, Resources, Variant};
use crate::time::NANOS_PER_SEC;
use good_lp::{
    Expression, ProblemVariables, ResolutionError, Solution, SolverModel, Variable, microlp,
    variable,
};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use thiserror::Error;

/// At most this many release-time sub-programmes are solved (the latest submission times), so
/// the bound's cost stays a few LP solves for any workload; fewer only makes the bound looser.
pub const MAX_RELEASE_LPS: usize = 4;

/// The lower bound and what it is made of, in seconds.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct LowerBound {
    /// The bound: the largest of the parts below.
    pub lower_bound_s: f64,
    /// The fluid LP over the whole workload.
    pub fluid_s: f64,
    /// The latest `submit + waves × shortest task` over the applications, `waves` =
    /// `⌈tasks / max_running⌉` (1 without a limit): tasks of which at most `m` run at once form
    /// at most `m` chains of tasks one after another, so one chain holds `⌈tasks / m⌉` of them.
    pub longest_task_s: f64,
    /// The largest `r + LP(applications submitted at ≥ r)` over the release times tried.
    pub release_s: f64,
    /// Node groups in the programme: distinct node descriptions, or fewer pooled groups when
    /// there are more than [`MAX_CLASSES`] of them.
    pub node_classes: usize,
    /// Whether every group is a class of identical nodes (false: similar nodes were pooled, and
    /// the bound may be looser).
    pub exact_classes: bool,
}

/// Why no bound could be computed.
#[derive(Debug, Error, PartialEq)]
pub enum BoundError {
    /// An application can run nowhere, so no schedule exists.
    #[error("application `{0}` has no variant that fits any node")]
    Unrunnable(String),
    /// The solver failed (should not happen on a feasible, bounded programme).
    #[error("the LP solver failed: {0}")]
    Solver(String),
}

/// A group of nodes the programme treats as one pool: identical nodes (a *class*: exact), or, on
/// clusters with more than [`MAX_CLASSES`] distinct node descriptions, similar nodes pooled with
/// each task's best duration over the group (a relaxation: still a lower bound, see the module
/// doc).
struct NodeGroup<'a> {
    nodes: Vec<&'a Node>,
}

impl NodeGroup<'_> {
    /// Summed capacity of the group's nodes.
    fn capacity(&self) -> (f64, f64, f64) {
        self.nodes.iter().fold((0.0, 0.0, 0.0), |(c, m, g), n| {
            (
                c + f64::from(n.cores),
                m + n.memory_bytes as f64,
                g + n.accelerators.len() as f64,
            )
        })
    }

    /// Summed disk bandwidth, bytes per second.
    fn disk_bw(&self) -> f64 {
        self.nodes.iter().map(|n| n.disk_read_bw).sum()
    }

    /// Accelerators of `kind` in the group.
    fn devices(&self, kind: &str) -> f64 {
        self.nodes
            .iter()
            .map(|n| n.accelerators.iter().filter(|a| a.kind == kind).count() as f64)
            .sum()
    }

    /// The shortest time any node of the group needs to read `app`'s split alone, seconds.
    fn read_time(&self, app: &Application) -> f64 {
        self.nodes
            .iter()
            .map(|n| read_s(app, n))
            .reduce(f64::min)
            .unwrap_or(0.0)
    }

    /// Cores of the group's largest node: at most this many of its tasks read its disk at once.
    fn max_cores(&self) -> u32 {
        self.nodes.iter().map(|n| n.cores).max().unwrap_or(1)
    }

    /// The shortest `variant` task of `app` on any node of the group, if it fits on one.
    fn best_task_time(&self, app: &Application, variant: Variant) -> Option<f64> {
        self.nodes
            .iter()
            .filter_map(|n| best_task_time(app, variant, n))
            .min_by(f64::total_cmp)
    }
}

/// The most node groups the programme gets: beyond this many distinct node descriptions, similar
/// nodes are pooled ([`groups_of`]), so the LP keeps `≤ 2 · MAX_CLASSES · #applications`
/// variables whatever the cluster's size. 24 keeps a 100-application LP within tens of
/// milliseconds (`docs/performance.md`).
pub const MAX_CLASSES: usize = 24;

/// The key that makes two nodes interchangeable for the bound (everything but id, name, rack and
/// network).
fn class_key(n: &Node) -> (u32, u64, u64, u64, Vec<(String, u64)>) {
    let mut acc: Vec<(String, u64)> = n
        .accelerators
        .iter()
        .map(|a| (a.kind.clone(), a.speed.to_bits()))
        .collect();
    acc.sort();
    (
        n.cores,
        n.core_speed.to_bits(),
        n.memory_bytes,
        n.disk_read_bw.to_bits(),
        acc,
    )
}

/// A coarse key: every quantity on a logarithmic grid of ratio `ratio`, accelerators by kind and
/// (if `counts`) how many of each kind.
fn coarse_key(n: &Node, ratio: f64, counts: bool) -> Vec<i64> {
    let bucket = |v: f64| {
        if v > 0.0 {
            (v.ln() / ratio.ln()).floor() as i64
        } else {
            i64::MIN
        }
    };
    let mut key = vec![
        bucket(f64::from(n.cores)),
        bucket(n.core_speed),
        bucket(n.memory_bytes as f64),
        bucket(n.disk_read_bw),
    ];
    let mut kinds: Vec<(&str, usize, f64)> = Vec::new();
    for a in &n.accelerators {
        match kinds.iter_mut().find(|(k, _, _)| *k == a.kind) {
            Some(entry) => {
                entry.1 += 1;
                entry.2 = entry.2.max(a.speed);
            }
            None => kinds.push((&a.kind, 1, a.speed)),
        }
    }
    kinds.sort_by(|x, y| x.0.cmp(y.0));
    for (kind, count, speed) in kinds {
        // The kind's name enters through a stable hash of its bytes (FNV-1a).
        let hash = kind.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
        });
        key.push(hash as i64);
        key.push(if counts { count as i64 } else { 1 });
        key.push(bucket(speed));
    }
    key
}

/// One group per distinct node description.
fn exact_classes<'a>(nodes: &[&'a Node]) -> Vec<NodeGroup<'a>> {
    let mut exact: BTreeMap<_, NodeGroup<'_>> = BTreeMap::new();
    for &n in nodes {
        exact
            .entry(class_key(n))
            .or_insert(NodeGroup { nodes: Vec::new() })
            .nodes
            .push(n);
    }
    exact.into_values().collect()
}

/// Groups `nodes` for the programme: identical nodes form one class (exact, by symmetry); if that
/// gives more than [`MAX_CLASSES`] classes, nodes whose quantities agree on ever coarser
/// logarithmic grids are pooled, down to one group per set of accelerator kinds and in the end
/// one group for the whole cluster. Returns the groups and whether they are exact classes.
fn groups_of<'a>(nodes: impl Iterator<Item = &'a Node>) -> (Vec<NodeGroup<'a>>, bool) {
    let nodes: Vec<&Node> = nodes.collect();
    let exact = exact_classes(&nodes);
    if exact.len() <= MAX_CLASSES {
        return (exact, true);
    }
    let grids = [
        (1.1, true),
        (1.25, true),
        (1.5, true),
        (2.0, true),
        (4.0, true),
        (16.0, true),
        (16.0, false),
        (1e9, false),
    ];
    for (ratio, counts) in grids {
        let mut pooled: BTreeMap<Vec<i64>, NodeGroup<'_>> = BTreeMap::new();
        for &n in &nodes {
            pooled
                .entry(coarse_key(n, ratio, counts))
                .or_insert(NodeGroup { nodes: Vec::new() })
                .nodes
                .push(n);
        }
        if pooled.len() <= MAX_CLASSES {
            return (pooled.into_values().collect(), false);
        }
    }
    (vec![NodeGroup { nodes }], false)
}

fn secs(ns: u64) -> f64 {
    ns as f64 / NANOS_PER_SEC as f64
}

/// Seconds the disk of `node` needs to read `app`'s split alone.
fn read_s(app: &Application, node: &Node) -> f64 {
    app.split_bytes as f64 / node.disk_read_bw
}

/// Best duration of one `variant` task of `app` on `node` (seconds), if it can run there at all.
pub fn best_task_time(app: &Application, variant: Variant, node: &Node) -> Option<f64> {
    let request = app.request(variant)?;
    if !node.capacity().fits(&request) {
        return None;
    }
    match variant {
        Variant::Cpu => {
            let c = app.cpu.as_ref()?;
            Some(secs(c.compute) / node.core_speed + read_s(app, node))
        }
        Variant::Gpu => {
            let g = app.gpu.as_ref()?;
            let eligible: Vec<f64> = node
                .accelerators
                .iter()
                .filter(|a| g.kind.as_deref().is_none_or(|k| a.kind == k))
                .map(|a| a.speed)
                .collect();
            if (eligible.len() as u32) < request.gpus {
                return None;
            }
            let fastest = eligible.into_iter().fold(0.0, f64::max);
            Some(secs(g.compute) / fastest + secs(g.copy) + read_s(app, node))
        }
    }
}

/// The makespan lower bound of `apps` on `cluster` (see the module doc).
pub fn lower_bound(cluster: &Cluster, apps: &[Application]) -> Result<LowerBound, BoundError> {
    let (groups, exact_classes) = groups_of(cluster.nodes.iter());
    let mut longest_task_s: f64 = 0.0;
    for a in apps.iter().filter(|a| a.tasks > 0) {
        let shortest = groups
            .iter()
            .flat_map(|g| {
                [Variant::Cpu, Variant::Gpu]
                    .into_iter()
                    .filter_map(|v| g.best_task_time(a, v))
            })
            .fold(f64::INFINITY, f64::min);
        if !shortest.is_finite() {
            return Err(BoundError::Unrunnable(a.name.clone()));
        }
        let waves = if a.max_running > 0 {
            a.tasks.div_ceil(a.max_running)
        } else {
            1
        };
        longest_task_s = longest_task_s.max(secs(a.submit_time) + f64::from(waves) * shortest);
    }
    let all: Vec<&Application> = apps.iter().collect();
    let fluid_s = fluid(&groups, &all)?.makespan_s;

    // Release times: the work submitted at or after `r` needs at least its own fluid time after r.
    let mut releases: Vec<u64> = apps
        .iter()
        .filter(|a| a.tasks > 0)
        .map(|a| a.submit_time)
        .filter(|&r| r > 0)
        .collect();
    releases.sort_unstable();
    releases.dedup();
    let mut release_s: f64 = 0.0;
    for &r in releases.iter().rev().take(MAX_RELEASE_LPS) {
        let later: Vec<&Application> = apps.iter().filter(|a| a.submit_time >= r).collect();
        release_s = release_s.max(secs(r) + fluid(&groups, &later)?.makespan_s);
    }
    Ok(LowerBound {
        lower_bound_s: fluid_s.max(longest_task_s).max(release_s),
        fluid_s,
        longest_task_s,
        release_s,
        node_classes: groups.len(),
        exact_classes,
    })
}

/// The optimum of the fluid programme: its time and how it splits each application's tasks
/// between cores and accelerators, in total and per node group. `hdas-hetero` follows it as a
/// plan.
#[derive(Clone, Debug, PartialEq)]
pub struct FluidPlan {
    /// `T*`, seconds.
    pub makespan_s: f64,
    /// Per application (in the order given): tasks the optimum runs as CPU tasks.
    pub cpu_tasks: Vec<f64>,
    /// Per application: tasks the optimum runs as GPU tasks.
    pub gpu_tasks: Vec<f64>,
    /// The same split per node group (identical nodes, or pooled similar nodes on clusters of
    /// more than [`MAX_CLASSES`] node descriptions).
    pub groups: Vec<GroupPlan>,
}

/// The fluid optimum's share of one group of nodes.
#[derive(Clone, Debug, PartialEq)]
pub struct GroupPlan {
    /// The group's nodes.
    pub nodes: Vec<crate::model::NodeId>,
    /// Per application: tasks the optimum runs as CPU tasks on these nodes.
    pub cpu_tasks: Vec<f64>,
    /// Per application: tasks the optimum runs as GPU tasks on these nodes.
    pub gpu_tasks: Vec<f64>,
    /// How many times its time alone a read on these nodes was taken to last (1 in the bound's
    /// programme; [`contended_plan`] sets it from the disk contention).
    pub read_stretch: f64,
}

/// The fluid optimum of `apps` on `nodes` (see the module doc), with its CPU/GPU split.
pub fn fluid_plan<'a>(
    nodes: impl Iterator<Item = &'a Node>,
    apps: &[&Application],
) -> Result<FluidPlan, BoundError> {
    fluid(&groups_of(nodes).0, apps)
}

/// Rounds of [`contended_plan`]'s fixed point (each one LP solve).
pub const CONTENTION_ROUNDS: usize = 4;

/// The fluid optimum of `apps` on `nodes` **with the disk contention of a real run**: a plan for
/// a scheduler, not a bound. The bound's programme lets every task read at its disk's full
/// bandwidth; in a real run the tasks reading a disk at once share it (processor sharing), so a
/// read lasts `s` times as long as alone, `s` the number of tasks reading beside it. A CPU task
/// holds its core for the whole stretched read, so on a busy disk the cores are scarcer than the
/// bound's programme says, and a compute-bound application's 900 s CPU tasks that fit in the
/// bound's spare core time may not fit at all.
///
/// Per group, the stretch is predicted from the plan itself, and is at least `observed(group's
/// nodes)` when the scheduler has measured it (the mean number of readers a reader shares the
/// disk with, from the heartbeats' `#IOtask`): a measured contention above the prediction is a
/// fact of this run (tasks started together read together), one below it may only be the mix of
/// the moment. The prediction: where the plan keeps a disk busy a fraction `ρ`
/// of the time, a read takes about `1 / (1 − ρ)` times as long as alone (the mean stretch of a
/// job under M/G/1 processor sharing), and never more than one share among the node's cores (each
/// task holds a core). That is a fixed point — solve with stretch 1, set each group's stretch from
/// the disk load `ρ = Σ x · V / (BW · T)` of the solution, solve again — run for
/// [`CONTENTION_ROUNDS`] rounds, each new stretch the geometric mean of the last one and the one
/// the solution implies (a busy disk stretches reads, which lengthens `T`, which lowers `ρ`: the
/// mean damps that swing).
///
/// With more than [`MAX_PLANNED_APPS`] applications, similar applications are pooled first
/// ([`pool_applications`]): the programme then has at most [`MAX_PLANNED_APPS`] demand rows
/// whatever the number of applications, and each application gets its class's split in
/// proportion to its tasks. Up to [`MAX_PLANNED_APPS`] applications the programme is the same
/// as without pooling.
pub fn contended_plan<'a>(
    nodes: impl Iterator<Item = &'a Node>,
    apps: &[&Application],
    observed: &dyn Fn(&[crate::model::NodeId]) -> Option<f64>,
) -> Result<FluidPlan, BoundError> {
    let groups = groups_of(nodes).0;
    match pool_applications(apps, MAX_PLANNED_APPS) {
        None => contended_plan_of(&groups, apps, observed),
        Some(pool) => {
            let classes: Vec<&Application> = pool.classes.iter().collect();
            let pooled = contended_plan_of(&groups, &classes, observed)?;
            Ok(pool.share(&pooled, apps))
        }
    }
}

/// [`contended_plan`] of `apps` as they are (no pooling).
fn contended_plan_of(
    groups: &[NodeGroup<'_>],
    apps: &[&Application],
    observed: &dyn Fn(&[crate::model::NodeId]) -> Option<f64>,
) -> Result<FluidPlan, BoundError> {
    let fixed: Vec<Option<f64>> = groups
        .iter()
        .map(|g| {
            let ids: Vec<crate::model::NodeId> = g.nodes.iter().map(|n| n.id).collect();
            observed(&ids).map(|s| s.max(1.0))
        })
        .collect();
    let mut stretch: Vec<f64> = fixed.iter().map(|f| f.unwrap_or(1.0)).collect();
    let mut plan = fluid_stretched(groups, apps, &stretch)?;
    for _ in 0..CONTENTION_ROUNDS {
        if plan.makespan_s <= 0.0 {
            break;
        }
        let mut changed = false;
        for (gi, g) in groups.iter().enumerate() {
            let bw = g.disk_bw();
            if bw <= 0.0 {
                continue;
            }
            let bytes: f64 = apps
                .iter()
                .enumerate()
                .map(|(ai, a)| {
                    (plan.groups[gi].cpu_tasks[ai] + plan.groups[gi].gpu_tasks[ai])
                        * a.split_bytes as f64
                })
                .sum();
            let cap = f64::from(g.max_cores().max(1));
            let rho = (bytes / bw / plan.makespan_s).clamp(0.0, 1.0);
            let implied = if rho >= 1.0 - 1.0 / cap {
                cap
            } else {
                1.0 / (1.0 - rho)
            };
            let next = (stretch[gi] * implied).sqrt().max(fixed[gi].unwrap_or(1.0));
            if (next - stretch[gi]).abs() > 1e-3 * stretch[gi] {
                changed = true;
            }
            stretch[gi] = next;
        }
        if !changed {
            break;
        }
        plan = fluid_stretched(groups, apps, &stretch)?;
    }
    Ok(plan)
}

/// The most applications [`contended_plan`] gives a demand row of their own: beyond, similar
/// applications are pooled into at most this many classes ([`pool_applications`]), so a plan
/// costs a few solves of a programme of at most `MAX_PLANNED_APPS × groups × 2` task variables
/// however many applications wait (`docs/performance.md`, `hdas_hetero_decision_under_churn`).
/// Workloads of up to this many applications (the paper's, the sweep's) are planned exactly as
/// before pooling existed.
pub const MAX_PLANNED_APPS: usize = 32;

/// Applications pooled into classes for the plan ([`pool_applications`]).
#[derive(Clone, Debug)]
pub struct AppPool {
    /// One application per class: the members' summed tasks, their task-weighted mean times and
    /// split, and the smallest request of any member.
    pub classes: Vec<Application>,
    /// Per application (in the order given): its class, `None` for one with no task.
    pub class_of: Vec<Option<usize>>,
}

impl AppPool {
    /// Shares each class's split in `pooled` (a plan of [`AppPool::classes`]) among its members
    /// in proportion to their tasks: a plan of `apps`.
    pub fn share(&self, pooled: &FluidPlan, apps: &[&Application]) -> FluidPlan {
        let fraction = |i: usize| -> Option<(usize, f64)> {
            let c = self.class_of.get(i).copied().flatten()?;
            let total = f64::from(self.classes[c].tasks);
            (total > 0.0).then(|| (c, f64::from(apps[i].tasks) / total))
        };
        let spread = |per_class: &[f64]| -> Vec<f64> {
            (0..apps.len())
                .map(|i| fraction(i).map_or(0.0, |(c, f)| per_class[c] * f))
                .collect()
        };
        FluidPlan {
            makespan_s: pooled.makespan_s,
            cpu_tasks: spread(&pooled.cpu_tasks),
            gpu_tasks: spread(&pooled.gpu_tasks),
            groups: pooled
                .groups
                .iter()
                .map(|g| GroupPlan {
                    nodes: g.nodes.clone(),
                    cpu_tasks: spread(&g.cpu_tasks),
                    gpu_tasks: spread(&g.gpu_tasks),
                    read_stretch: g.read_stretch,
                })
                .collect(),
        }
    }
}

/// How finely [`pool_applications`] tells applications apart.
#[derive(Clone, Copy)]
enum PoolLevel {
    /// Everything the programme reads, on a logarithmic grid of this ratio (1: exactly).
    Grid(f64),
    /// Only the variants, their requests and the accelerator kind.
    Requests,
    /// Only which variants the application has.
    Variants,
}

/// An application's key at `level`: two applications of one key are pooled.
fn pool_key(a: &Application, level: PoolLevel) -> Vec<u64> {
    let mut key = vec![u64::from(a.cpu.is_some()), u64::from(a.gpu.is_some())];
    if matches!(level, PoolLevel::Variants) {
        return key;
    }
    let request = |r: Resources| [u64::from(r.cores), r.memory_bytes, u64::from(r.gpus)];
    if let Some(c) = &a.cpu {
        key.extend(request(c.request));
    }
    if let Some(g) = &a.gpu {
        key.extend(request(g.request));
        // The kind's name enters through a stable hash of its bytes (FNV-1a), as in
        // [`coarse_key`]; 0 for "any kind".
        key.push(g.kind.as_deref().map_or(0, |k| {
            k.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
                (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
            })
        }));
    }
    let PoolLevel::Grid(ratio) = level else {
        return key;
    };
    let bucket = |v: u64| {
        if ratio <= 1.0 || v == 0 {
            v
        } else {
            // Offset so that no bucket is 0 (the exact key's zero).
            ((v as f64).ln() / ratio.ln()).floor().max(0.0) as u64 + 1
        }
    };
    key.push(bucket(a.split_bytes));
    if let Some(c) = &a.cpu {
        key.push(bucket(c.compute));
    }
    if let Some(g) = &a.gpu {
        key.push(bucket(g.compute));
        key.push(bucket(g.copy));
    }
    key
}

/// Pools `apps` for the plan when there are more than `max` of them with tasks (`None`: no need,
/// plan them one by one). Applications the programme cannot tell apart (the same variants,
/// requests, accelerator kind, split and compute and copy times) form one class first: that
/// changes nothing in the optimum (averaging a solution over the members of a class, by
/// symmetry). If that leaves more than `max` classes, applications whose times and split agree
/// on ever coarser logarithmic grids (ratio 1.1 up to 16) are pooled, then those with the same
/// requests and kind, and in the end those with the same variants (at most 3 classes).
///
/// A class is one application of the members' summed tasks, with their task-weighted mean
/// compute, copy and read times and split: every row of the programme is linear in those, so
/// the class's optimum is the programme's optimum with every member of a class split between
/// variants and groups alike — a plan the members can follow, at most somewhat longer than the
/// unpooled one (on a group of pooled nodes a class's best time is the minimum of a mean, at
/// least the mean of the members' minima, so the members' rows still hold). Down to the grids
/// the members' requests and kind are equal; at the two last levels the class takes the
/// smallest request of its members and the common kind (any kind if they differ), so it runs
/// wherever one of them could: a rough plan, never an unrunnable one.
pub fn pool_applications(apps: &[&Application], max: usize) -> Option<AppPool> {
    let live: Vec<usize> = (0..apps.len()).filter(|&i| apps[i].tasks > 0).collect();
    if live.len() <= max {
        return None;
    }
    let levels = [
        PoolLevel::Grid(1.0),
        PoolLevel::Grid(1.1),
        PoolLevel::Grid(1.25),
        PoolLevel::Grid(1.5),
        PoolLevel::Grid(2.0),
        PoolLevel::Grid(4.0),
        PoolLevel::Grid(16.0),
        PoolLevel::Requests,
        PoolLevel::Variants,
    ];
    let mut members: Vec<Vec<usize>> = Vec::new();
    for (li, &level) in levels.iter().enumerate() {
        let mut index: BTreeMap<Vec<u64>, usize> = BTreeMap::new();
        members.clear();
        for &i in &live {
            let next = index.len();
            let c = *index.entry(pool_key(apps[i], level)).or_insert(next);
            if c == members.len() {
                members.push(Vec::new());
            }
            members[c].push(i);
        }
        if members.len() <= max || li + 1 == levels.len() {
            break;
        }
    }
    let mut class_of = vec![None; apps.len()];
    let mut classes = Vec::with_capacity(members.len());
    for (c, m) in members.iter().enumerate() {
        for &i in m {
            class_of[i] = Some(c);
        }
        let group: Vec<&Application> = m.iter().map(|&i| apps[i]).collect();
        classes.push(pooled_class(&group));
    }
    Some(AppPool { classes, class_of })
}

/// One application standing for `members` (see [`pool_applications`]).
fn pooled_class(members: &[&Application]) -> Application {
    let tasks: f64 = members.iter().map(|a| f64::from(a.tasks)).sum();
    let mean = |f: &dyn Fn(&Application) -> Option<u64>| -> u64 {
        let sum: f64 = members
            .iter()
            .filter_map(|a| f(a).map(|v| v as f64 * f64::from(a.tasks)))
            .sum();
        (sum / tasks.max(1.0)).round() as u64
    };
    let least = |f: &dyn Fn(&Application) -> Option<Resources>| -> Resources {
        members
            .iter()
            .filter_map(|a| f(a))
            .reduce(|x, y| Resources {
                cores: x.cores.min(y.cores),
                memory_bytes: x.memory_bytes.min(y.memory_bytes),
                gpus: x.gpus.min(y.gpus),
            })
            .unwrap_or_default()
    };
    let first = members[0];
    let kind = first.gpu.as_ref().and_then(|g| g.kind.clone()).filter(|k| {
        members
            .iter()
            .all(|a| a.gpu.as_ref().and_then(|g| g.kind.as_ref()) == Some(k))
    });
    Application {
        tasks: tasks.min(f64::from(u32::MAX)) as u32,
        split_bytes: mean(&|a| Some(a.split_bytes)),
        cpu: first.cpu.as_ref().map(|_| crate::model::CpuVariant {
            compute: mean(&|a| a.cpu.as_ref().map(|c| c.compute)),
            read: mean(&|a| a.cpu.as_ref().map(|c| c.read)),
            request: least(&|a| a.cpu.as_ref().map(|c| c.request)),
            time_limit: None,
        }),
        gpu: first.gpu.as_ref().map(|_| crate::model::GpuVariant {
            compute: mean(&|a| a.gpu.as_ref().map(|g| g.compute)),
            copy: mean(&|a| a.gpu.as_ref().map(|g| g.copy)),
            read: mean(&|a| a.gpu.as_ref().map(|g| g.read)),
            request: least(&|a| a.gpu.as_ref().map(|g| g.request)),
            kind,
            time_limit: None,
        }),
        ..first.clone()
    }
}

/// One task variable: `x` tasks of an application as `variant` on the nodes of a group.
struct Placement {
    app: usize,
    variant: Variant,
    x: Variable,
    group: usize,
    /// Best task duration there, seconds.
    duration: f64,
    request: Resources,
    /// Accelerator kind the task needs (GPU tasks), if any.
    kind: Option<String>,
    /// The task's bytes over the group's summed disk bandwidth, seconds.
    disk_s: f64,
}

/// The fluid programme for `apps` on `groups`, solved. Every row is written as a share of the
/// group's pooled capacity, `Σ x · duration · request / capacity ≤ T`; for a class of `m` identical
/// nodes that is the per-node row `Σ x · duration · request / node capacity ≤ m · T` divided by
/// `m`.
fn fluid(groups: &[NodeGroup<'_>], apps: &[&Application]) -> Result<FluidPlan, BoundError> {
    fluid_stretched(groups, apps, &[])
}

/// The fluid programme with every task's read on group `g` taking `stretch[g]` times its time
/// alone (1 where `stretch` has no entry: the bound's programme). `stretch` models the disk
/// contention of a real run for [`contended_plan`]; it is never used for the bound.
fn fluid_stretched(
    groups: &[NodeGroup<'_>],
    apps: &[&Application],
    stretch: &[f64],
) -> Result<FluidPlan, BoundError> {
    let mut vars = ProblemVariables::new();
    let t = vars.add(variable().min(0.0));
    let mut placements: Vec<Placement> = Vec::new();
    let mut demand: Vec<(Expression, f64)> = Vec::new();
    for (ai, a) in apps.iter().enumerate().filter(|(_, a)| a.tasks > 0) {
        let mut sum = Expression::default();
        let mut any = false;
        for (gi, g) in groups.iter().enumerate() {
            let disk_bw = g.disk_bw();
            let extra_read =
                (stretch.get(gi).copied().unwrap_or(1.0) - 1.0).max(0.0) * g.read_time(a);
            for v in [Variant::Cpu, Variant::Gpu] {
                let Some(duration) = g.best_task_time(a, v) else {
                    continue;
                };
                let duration = duration + extra_read;
                let x = vars.add(variable().min(0.0));
                sum += x;
                any = true;
                placements.push(Placement {
                    app: ai,
                    variant: v,
                    x,
                    group: gi,
                    duration,
                    request: a.request(v).unwrap_or_default(),
                    kind: match v {
                        Variant::Gpu => a.gpu.as_ref().and_then(|g| g.kind.clone()),
                        Variant::Cpu => None,
                    },
                    disk_s: if disk_bw > 0.0 {
                        a.split_bytes as f64 / disk_bw
                    } else {
                        0.0
                    },
                });
            }
        }
        if !any {
            return Err(BoundError::Unrunnable(a.name.clone()));
        }
        demand.push((sum, f64::from(a.tasks)));
    }
    let mut plan = FluidPlan {
        makespan_s: 0.0,
        cpu_tasks: vec![0.0; apps.len()],
        gpu_tasks: vec![0.0; apps.len()],
        groups: groups
            .iter()
            .map(|g| GroupPlan {
                nodes: g.nodes.iter().map(|n| n.id).collect(),
                cpu_tasks: vec![0.0; apps.len()],
                gpu_tasks: vec![0.0; apps.len()],
                read_stretch: 1.0,
            })
            .collect(),
    };
    for (gi, g) in plan.groups.iter_mut().enumerate() {
        g.read_stretch = stretch.get(gi).copied().unwrap_or(1.0).max(1.0);
    }
    if demand.is_empty() {
        return Ok(plan);
    }
    let mut problem = vars.minimise(t).using(microlp);
    for (sum, tasks) in demand {
        problem = problem.with(sum.eq(tasks));
    }
    for (gi, g) in groups.iter().enumerate() {
        let (cores, memory, gpus) = g.capacity();
        let here: Vec<&Placement> = placements.iter().filter(|p| p.group == gi).collect();
        if here.is_empty() {
            continue;
        }
        // Resource-seconds held, as a share of the group's capacity, per resource.
        let mut rows: Vec<Expression> = Vec::new();
        let share = |used: f64, total: f64| if total > 0.0 { used / total } else { 0.0 };
        let mut row = |f: &dyn Fn(&Placement) -> f64| {
            let mut e = Expression::default();
            let mut nonzero = false;
            for p in &here {
                let coef = f(p);
                if coef > 0.0 {
                    e.add_mul(coef, p.x);
                    nonzero = true;
                }
            }
            if nonzero {
                rows.push(e);
            }
        };
        row(&|p| p.duration * share(f64::from(p.request.cores), cores));
        row(&|p| p.duration * share(p.request.memory_bytes as f64, memory));
        row(&|p| p.duration * share(f64::from(p.request.gpus), gpus));
        row(&|p| p.disk_s);
        let mut kinds: Vec<&str> = here.iter().filter_map(|p| p.kind.as_deref()).collect();
        kinds.sort_unstable();
        kinds.dedup();
        for kind in kinds {
            let devices = g.devices(kind);
            row(&|p| {
                if p.kind.as_deref() == Some(kind) {
                    p.duration * share(f64::from(p.request.gpus), devices)
                } else {
                    0.0
                }
            });
        }
        for e in rows {
            problem = problem.with(e.leq(t));
        }
    }
    let solution = problem
        .solve()
        .map_err(|e: ResolutionError| BoundError::Solver(e.to_string()))?;
    plan.makespan_s = solution.value(t).max(0.0);
    for p in &placements {
        let x = solution.value(p.x).max(0.0);
        let group = &mut plan.groups[p.group];
        match p.variant {
            Variant::Cpu => {
                plan.cpu_tasks[p.app] += x;
                group.cpu_tasks[p.app] += x;
            }
            Variant::Gpu => {
                plan.gpu_tasks[p.app] += x;
                group.gpu_tasks[p.app] += x;
            }
        }
    }
    Ok(plan)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::model::{AppId, NodeId};
    use crate::testkit::{app, node};
    use crate::time::secs as to_ns;

    fn cluster(nodes: Vec<Node>) -> Cluster {
        let mut c = Cluster::uniform(0, &nodes[0]);
        c.nodes = nodes
            .into_iter()
            .enumerate()
            .map(|(i, mut n)| {
                n.id = NodeId(i as u32);
                n
            })
            .collect();
        c
    }

    /// One node of 2 cores and 1 GPU; 4 tasks of 30 s on a core or 10 s on the GPU (a GPU task also
    /// holds a core). Optimum by hand: the GPU runs 3 tasks back to back while the free core runs
    /// the fourth, all done at 30 s; and no schedule is shorter, since 3 GPU tasks + 1 CPU task is
    /// the best split of 4 tasks over 1 GPU-second per second and 2 core-seconds per second.
    #[test]
    fn the_bound_equals_the_known_optimum_of_a_hand_computed_case() {
        let c = cluster(vec![node("n").cores(2).gpus(1, "g").build(NodeId(0))]);
        let a = app("a")
            .split_mib(0)
            .tasks(4)
            .cpu(30.0, 0.0)
            .gpu(10.0, 0.0, 0.0)
            .build(AppId(0));
        let b = lower_bound(&c, &[a]).unwrap();
        assert!((b.lower_bound_s - 30.0).abs() < 1e-9, "{b:?}");
        assert_eq!(b.node_classes, 1);
    }

    /// Ten 1000 MiB reads on a 100 MiB/s disk take 100 s however many cores there are.
    #[test]
    fn a_disk_bound_workload_is_bounded_by_its_bytes_over_bandwidth() {
        let c = cluster(vec![node("n").cores(8).disk_mib_s(100.0).build(NodeId(0))]);
        let a = app("io")
            .split_mib(1000)
            .tasks(10)
            .cpu(1.0, 10.0)
            .build(AppId(0));
        let b = lower_bound(&c, &[a]).unwrap();
        assert!((b.lower_bound_s - 100.0).abs() < 1e-6, "{b:?}");
    }

    /// Identical nodes form one class, and two nodes do the work of one in half the time.
    #[test]
    fn identical_nodes_share_the_work() {
        let n = node("n").cores(1).build(NodeId(0));
        let a = app("a")
            .split_mib(0)
            .tasks(10)
            .cpu(10.0, 0.0)
            .build(AppId(0));
        let one = lower_bound(&cluster(vec![n.clone()]), std::slice::from_ref(&a)).unwrap();
        let two = lower_bound(&cluster(vec![n.clone(), n]), &[a]).unwrap();
        assert!((one.lower_bound_s - 100.0).abs() < 1e-9);
        assert!((two.lower_bound_s - 50.0).abs() < 1e-9);
        assert_eq!(two.node_classes, 1);
    }

    /// Ten 10 s tasks on 8 cores: the fluid programme says 12.5 s; at most 2 at once
    /// (`max_running`) they need 5 waves, 50 s — the simulator's schedule.
    #[test]
    fn max_running_bounds_an_application_by_its_waves() {
        let c = cluster(vec![node("n").cores(8).build(NodeId(0))]);
        let a = app("throttled")
            .split_mib(0)
            .tasks(10)
            .cpu(10.0, 0.0)
            .max_running(2)
            .build(AppId(0));
        let b = lower_bound(&c, std::slice::from_ref(&a)).unwrap();
        assert!((b.fluid_s - 12.5).abs() < 1e-9, "{b:?}");
        assert!((b.lower_bound_s - 50.0).abs() < 1e-9, "{b:?}");
        let three = Application {
            max_running: 3,
            ..a
        };
        let three = lower_bound(&c, &[three]).unwrap();
        assert!(
            (three.lower_bound_s - 40.0).abs() < 1e-9,
            "⌈10 / 3⌉ = 4 waves: {three:?}"
        );
    }

    /// Work submitted at 50 s cannot start before 50 s: 4 tasks of 10 s on one core end at 90 s at
    /// the earliest, although the fluid programme alone says 40 s.
    #[test]
    fn late_submissions_raise_the_bound() {
        let c = cluster(vec![node("n").cores(1).build(NodeId(0))]);
        let a = app("late")
            .split_mib(0)
            .tasks(4)
            .cpu(10.0, 0.0)
            .submitted_at(to_ns(50.0))
            .build(AppId(0));
        let b = lower_bound(&c, &[a]).unwrap();
        assert!((b.fluid_s - 40.0).abs() < 1e-9);
        assert!((b.lower_bound_s - 90.0).abs() < 1e-9, "{b:?}");
    }

    /// A task that takes 500 s is not finished before 500 s, even on a huge cluster.
    #[test]
    fn one_long_task_bounds_the_makespan() {
        let c = cluster(vec![node("n").cores(64).build(NodeId(0))]);
        let a = app("long")
            .split_mib(0)
            .tasks(1)
            .cpu(500.0, 0.0)
            .build(AppId(0));
        let b = lower_bound(&c, &[a]).unwrap();
        assert!((b.lower_bound_s - 500.0).abs() < 1e-9);
    }

    /// A GPU-only application on a cluster without GPUs cannot be scheduled at all.
    #[test]
    fn an_application_that_fits_nowhere_is_an_error() {
        let c = cluster(vec![node("n").cores(2).build(NodeId(0))]);
        let a = app("g").gpu(1.0, 0.0, 0.0).build(AppId(0));
        assert_eq!(
            lower_bound(&c, &[a]),
            Err(BoundError::Unrunnable("g".into()))
        );
    }
}

#[cfg(test)]
mod pooling_tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::model::{AppId, NodeId};
    use crate::testkit::{app, node};

    /// 60 nodes, no two alike (cores, core speed, disk, accelerator count and speed all vary).
    fn distinct(n: usize) -> Cluster {
        let mut c = Cluster::uniform(n, &node("n").build(NodeId(0)));
        for (i, nd) in c.nodes.iter_mut().enumerate() {
            let f = i as f64;
            *nd = node(&nd.name)
                .cores(4 + (i as u32 * 7) % 29)
                .gpus((i % 4) as u32, "gpu")
                .disk_mib_s(100.0 + (f * 37.0) % 300.0)
                .build(nd.id);
            nd.core_speed = 0.8 + 0.4 * (f * 0.618_034).fract();
            for a in &mut nd.accelerators {
                a.speed = 0.5 + 3.5 * (f * 0.381_966).fract();
            }
        }
        c
    }

    fn mix() -> Vec<Application> {
        vec![
            app("io")
                .split_mib(1024)
                .tasks(400)
                .cpu(85.0, 8.0)
                .gpu(1.3, 0.3, 8.0)
                .build(AppId(0)),
            app("mid")
                .split_mib(256)
                .tasks(900)
                .cpu(40.0, 2.0)
                .gpu(6.0, 0.1, 2.0)
                .build(AppId(1)),
            app("cpu")
                .split_mib(32)
                .tasks(300)
                .cpu(500.0, 0.3)
                .build(AppId(2)),
            app("gpu")
                .split_mib(4)
                .tasks(500)
                .gpu(23.6, 0.0, 0.1)
                .build(AppId(3)),
        ]
    }

    /// Beyond `MAX_CLASSES` distinct nodes, the pooled programme stays small, and its optimum is
    /// at most the exact one (pooling only relaxes) and not far below it on this cluster.
    #[test]
    fn pooling_many_node_types_keeps_a_smaller_programme_below_the_exact_optimum() {
        let c = distinct(60);
        let apps = mix();
        let refs: Vec<&Application> = apps.iter().collect();
        let nodes: Vec<&Node> = c.nodes.iter().collect();
        let exact = fluid(&exact_classes(&nodes), &refs).unwrap().makespan_s;
        let b = lower_bound(&c, &apps).unwrap();
        assert_eq!(exact_classes(&nodes).len(), 60);
        assert!(!b.exact_classes);
        assert!(b.node_classes <= MAX_CLASSES, "{b:?}");
        assert!(b.fluid_s <= exact * (1.0 + 1e-9), "{} > {exact}", b.fluid_s);
        assert!(b.fluid_s >= 0.7 * exact, "{} ≪ {exact}", b.fluid_s);
    }

    /// A few node types are never pooled: the bound is the exact programme's.
    #[test]
    fn a_few_node_types_stay_exact_classes() {
        let mut c = distinct(6);
        let copies: Vec<Node> = c.nodes.clone();
        for (i, mut n) in copies.into_iter().enumerate() {
            n.id = NodeId(6 + i as u32);
            c.nodes.push(n);
        }
        let b = lower_bound(&c, &mix()).unwrap();
        assert!(b.exact_classes);
        assert_eq!(b.node_classes, 6);
    }

    /// The per-group plan adds up to the totals and places every task.
    #[test]
    fn the_group_plan_adds_up_to_every_task() {
        let c = distinct(40);
        let apps = mix();
        let refs: Vec<&Application> = apps.iter().collect();
        let p = fluid_plan(c.nodes.iter(), &refs).unwrap();
        let nodes: usize = p.groups.iter().map(|g| g.nodes.len()).sum();
        assert_eq!(nodes, 40);
        for (i, a) in apps.iter().enumerate() {
            let cpu: f64 = p.groups.iter().map(|g| g.cpu_tasks[i]).sum();
            let gpu: f64 = p.groups.iter().map(|g| g.gpu_tasks[i]).sum();
            assert!((cpu - p.cpu_tasks[i]).abs() < 1e-6);
            assert!((gpu - p.gpu_tasks[i]).abs() < 1e-6);
            assert!((cpu + gpu - f64::from(a.tasks)).abs() < 1e-6, "{}", a.name);
        }
    }
}

#[cfg(test)]
mod plan_tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::model::{AppId, NodeId};
    use crate::testkit::{app, node};

    /// The hand-computed case's optimum runs 3 tasks on the GPU and 1 on a core.
    #[test]
    fn the_plan_splits_tasks_like_the_optimum() {
        let n = node("n").cores(2).gpus(1, "g").build(NodeId(0));
        let a = app("a")
            .split_mib(0)
            .tasks(4)
            .cpu(30.0, 0.0)
            .gpu(10.0, 0.0, 0.0)
            .build(AppId(0));
        let p = fluid_plan(std::iter::once(&n), &[&a]).unwrap();
        assert!((p.makespan_s - 30.0).abs() < 1e-9);
        assert!((p.gpu_tasks[0] - 3.0).abs() < 1e-9, "{p:?}");
        assert!((p.cpu_tasks[0] - 1.0).abs() < 1e-9, "{p:?}");
    }

    /// The cluster and workload of the sweep's case that `hdas-hetero` used to lose (#815 of
    /// seed 1), cut down to one node: 4 cores and 1 GPU on a 100 MiB/s disk; `io`, CPU-only,
    /// 60 tasks of 32 s of compute and an 800 MiB split (8 s alone); `bp`, 50 tasks of 900 s on a
    /// core or 20 s on the GPU. With reads at full bandwidth the cores have spare time, and the
    /// optimum puts `bp` on them for 0.625 tasks (by hand: `1000 − 20y = (3400 + 880y) / 4`).
    /// With the three `io` readers sharing the disk (each read 3× as long), the `io` tasks alone
    /// fill the cores (`(60 · 56 + 50 · 20) / 4 = 1090 s` of core time per core against 1000 s of
    /// GPU work), so a plan that knows the contention runs every `bp` task on the GPU.
    fn core_bound_under_contention() -> (Node, Vec<Application>) {
        let n = node("n")
            .cores(4)
            .gpus(1, "g")
            .disk_mib_s(100.0)
            .build(NodeId(0));
        let io = app("io")
            .split_mib(800)
            .tasks(60)
            .cpu(32.0, 8.0)
            .build(AppId(0));
        let bp = app("bp")
            .split_mib(0)
            .tasks(50)
            .cpu(900.0, 0.0)
            .gpu(20.0, 0.0, 0.0)
            .build(AppId(1));
        (n, vec![io, bp])
    }

    #[test]
    fn a_plan_that_knows_the_disk_contention_keeps_long_cpu_tasks_off_scarce_cores() {
        let (n, apps) = core_bound_under_contention();
        let refs: Vec<&Application> = apps.iter().collect();
        let fluid = fluid_plan(std::iter::once(&n), &refs).unwrap();
        assert!((fluid.cpu_tasks[1] - 0.625).abs() < 1e-6, "{fluid:?}");
        assert!((fluid.makespan_s - 987.5).abs() < 1e-6, "{fluid:?}");
        let measured = contended_plan(std::iter::once(&n), &refs, &|_| Some(3.0)).unwrap();
        assert!(measured.cpu_tasks[1] < 1e-6, "{measured:?}");
        assert!((measured.makespan_s - 1090.0).abs() < 1e-6, "{measured:?}");
        assert_eq!(measured.groups[0].read_stretch, 3.0);
    }

    /// With nothing measured yet, the stretch is predicted from the plan's own disk load: about
    /// half of the time busy here, so reads last about twice as long, and `bp` gets fewer cores
    /// than in the bound's programme; a disk nobody reads is not stretched.
    #[test]
    fn an_unmeasured_disk_is_stretched_by_the_plans_own_load() {
        let (n, apps) = core_bound_under_contention();
        let refs: Vec<&Application> = apps.iter().collect();
        let predicted = contended_plan(std::iter::once(&n), &refs, &|_| None).unwrap();
        let stretch = predicted.groups[0].read_stretch;
        assert!((1.5..=2.5).contains(&stretch), "{predicted:?}");
        assert!(predicted.cpu_tasks[1] < 0.625 - 0.1, "{predicted:?}");
        let idle = contended_plan(std::iter::once(&n), &refs[1..], &|_| None).unwrap();
        assert_eq!(idle.groups[0].read_stretch, 1.0);
    }
}

#[cfg(test)]
mod app_pool_tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::model::{AppId, NodeId};
    use crate::testkit::{app, node};

    fn nodes() -> Vec<Node> {
        vec![
            node("gpu")
                .cores(6)
                .gpus(4, "c2050")
                .disk_mib_s(128.0)
                .build(NodeId(0)),
            node("cpu").cores(16).disk_mib_s(256.0).build(NodeId(1)),
        ]
    }

    /// `copies` copies each of an IO-heavy mixed, a compute-bound mixed and a CPU-only
    /// application, the tasks of each kind `tasks` in all.
    fn copies(copies: u32, tasks: u32) -> Vec<Application> {
        let mut apps = Vec::new();
        for c in 0..copies {
            let id = |k: u32| AppId(3 * c + k);
            apps.push(
                app("io")
                    .tasks(tasks / copies)
                    .split_mib(512)
                    .cpu(40.0, 4.0)
                    .gpu(1.5, 0.2, 4.0)
                    .build(id(0)),
            );
            apps.push(
                app("bp")
                    .tasks(tasks / copies)
                    .split_mib(4)
                    .cpu(600.0, 0.03)
                    .gpu(30.0, 0.0, 0.03)
                    .build(id(1)),
            );
            apps.push(
                app("post")
                    .tasks(tasks / copies)
                    .split_mib(64)
                    .cpu(20.0, 0.5)
                    .build(id(2)),
            );
        }
        apps
    }

    /// `plan` places each of `apps` (in its order) whole: its CPU and GPU tasks add up to its
    /// tasks.
    fn assert_places_every_task(plan: &FluidPlan, apps: &[Application]) {
        for (i, a) in apps.iter().enumerate() {
            let placed = plan.cpu_tasks[i] + plan.gpu_tasks[i];
            assert!((placed - f64::from(a.tasks)).abs() < 1e-6, "{}", a.name);
        }
    }

    /// Up to `MAX_PLANNED_APPS` applications nothing is pooled: the plan is the programme's own.
    #[test]
    fn a_few_applications_are_planned_one_by_one() {
        let apps = copies(10, 300);
        let refs: Vec<&Application> = apps.iter().collect();
        assert_eq!(apps.len(), 30);
        assert!(pool_applications(&refs, MAX_PLANNED_APPS).is_none());
        let ns = nodes();
        let groups = groups_of(ns.iter()).0;
        let plan = contended_plan(ns.iter(), &refs, &|_| None).unwrap();
        let own = contended_plan_of(&groups, &refs, &|_| None).unwrap();
        assert_eq!(plan, own);
    }

    /// 100 copies of three applications: three classes, the same optimum as the three with all
    /// the tasks, and each copy a hundredth of its class's split on every group.
    #[test]
    fn copies_of_an_application_pool_into_one_class_with_the_same_optimum() {
        let apps = copies(100, 3000);
        let refs: Vec<&Application> = apps.iter().collect();
        let pool = pool_applications(&refs, MAX_PLANNED_APPS).unwrap();
        assert_eq!(pool.classes.len(), 3);
        let whole = copies(1, 3000);
        let whole: Vec<&Application> = whole.iter().collect();
        let ns = nodes();
        let alone = contended_plan(ns.iter(), &whole, &|_| None).unwrap();
        let plan = contended_plan(ns.iter(), &refs, &|_| None).unwrap();
        assert!(
            (plan.makespan_s - alone.makespan_s).abs() < 1e-6 * alone.makespan_s,
            "{} against {}",
            plan.makespan_s,
            alone.makespan_s
        );
        for i in 0..apps.len() {
            let k = i % 3;
            for (g, whole_g) in plan.groups.iter().zip(&alone.groups) {
                assert!((g.cpu_tasks[i] - whole_g.cpu_tasks[k] / 100.0).abs() < 1e-6);
                assert!((g.gpu_tasks[i] - whole_g.gpu_tasks[k] / 100.0).abs() < 1e-6);
            }
        }
        assert_places_every_task(&plan, &apps);
    }

    /// 60 applications, no two alike: pooled into at most `MAX_PLANNED_APPS` classes whose
    /// optimum is never below the programme's own (a class splits its members alike: a
    /// restriction) and not far above it.
    #[test]
    fn distinct_applications_pool_into_a_bounded_programme_close_to_the_optimum() {
        let apps: Vec<Application> = (0..60u32)
            .map(|i| {
                let f = f64::from(i);
                let a = app(&format!("a{i}"))
                    .tasks(5 + i % 7)
                    .split_mib(4 + u64::from(i * 37 % 500));
                if i.is_multiple_of(3) {
                    a.cpu(20.0 + f, 0.1).build(AppId(i))
                } else {
                    a.cpu(100.0 + 9.0 * f, 0.1)
                        .gpu(2.0 + f / 4.0, 0.1, 0.1)
                        .build(AppId(i))
                }
            })
            .collect();
        let refs: Vec<&Application> = apps.iter().collect();
        let pool = pool_applications(&refs, MAX_PLANNED_APPS).unwrap();
        assert!(
            pool.classes.len() <= MAX_PLANNED_APPS,
            "{}",
            pool.classes.len()
        );
        assert!(pool.classes.len() > 3, "pooled no coarser than needed");
        let ns = nodes();
        let groups = groups_of(ns.iter()).0;
        let classes: Vec<&Application> = pool.classes.iter().collect();
        let pooled = fluid(&groups, &classes).unwrap();
        let exact = fluid(&groups, &refs).unwrap().makespan_s;
        assert!(
            pooled.makespan_s >= exact * (1.0 - 1e-9),
            "{pooled:?} < {exact}"
        );
        assert!(
            pooled.makespan_s <= exact * 1.1,
            "{} ≫ {exact}",
            pooled.makespan_s
        );
        assert_places_every_task(&pool.share(&pooled, &refs), &apps);
    }

    /// More distinct requests than classes: the last levels pool by variants, with the smallest
    /// request, so every class still runs somewhere and the plan places every task.
    #[test]
    fn distinct_requests_pool_by_variants_with_the_smallest_request() {
        let apps: Vec<Application> = (0..40u32)
            .map(|i| {
                app(&format!("m{i}"))
                    .tasks(2)
                    .split_mib(8)
                    .cpu(30.0, 0.1)
                    .cpu_memory((1 + u64::from(i)) << 20)
                    .build(AppId(i))
            })
            .collect();
        let refs: Vec<&Application> = apps.iter().collect();
        let pool = pool_applications(&refs, MAX_PLANNED_APPS).unwrap();
        assert_eq!(pool.classes.len(), 1);
        let c = &pool.classes[0];
        assert_eq!(c.tasks, 80);
        assert_eq!(c.cpu.as_ref().unwrap().request.memory_bytes, 1 << 20);
        let plan = contended_plan(nodes().iter(), &refs, &|_| None).unwrap();
        let placed: f64 = plan.cpu_tasks.iter().sum();
        assert!((placed - 80.0).abs() < 1e-6);
    }
}
