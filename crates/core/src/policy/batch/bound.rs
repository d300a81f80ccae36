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
//! programme small for real clusters, which have a few node types. The LP is solved by `microlp`
//! (pure Rust simplex) through `good_lp`.

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
    /// The latest `submit + shortest task` over the applications.
    pub longest_task_s: f64,
    /// The largest `r + LP(applications submitted at ≥ r)` over the release times tried.
    pub release_s: f64,
    /// Node classes (distinct node descriptions) in the programme.
    pub node_classes: usize,
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

/// Nodes with the same description, merged.
struct NodeClass<'a> {
    node: &'a Node,
    count: f64,
}

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

fn classes(cluster: &Cluster) -> Vec<NodeClass<'_>> {
    classes_of(cluster.nodes.iter())
}

fn classes_of<'a>(nodes: impl Iterator<Item = &'a Node>) -> Vec<NodeClass<'a>> {
    let mut map: BTreeMap<_, NodeClass<'_>> = BTreeMap::new();
    for n in nodes {
        map.entry(class_key(n))
            .or_insert(NodeClass {
                node: n,
                count: 0.0,
            })
            .count += 1.0;
    }
    map.into_values().collect()
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
    let classes = classes(cluster);
    let mut longest_task_s: f64 = 0.0;
    for a in apps.iter().filter(|a| a.tasks > 0) {
        let shortest = classes
            .iter()
            .flat_map(|c| {
                [Variant::Cpu, Variant::Gpu]
                    .into_iter()
                    .filter_map(|v| best_task_time(a, v, c.node))
            })
            .fold(f64::INFINITY, f64::min);
        if !shortest.is_finite() {
            return Err(BoundError::Unrunnable(a.name.clone()));
        }
        longest_task_s = longest_task_s.max(secs(a.submit_time) + shortest);
    }
    let all: Vec<&Application> = apps.iter().collect();
    let fluid_s = fluid(&classes, &all)?.makespan_s;

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
        release_s = release_s.max(secs(r) + fluid(&classes, &later)?.makespan_s);
    }
    Ok(LowerBound {
        lower_bound_s: fluid_s.max(longest_task_s).max(release_s),
        fluid_s,
        longest_task_s,
        release_s,
        node_classes: classes.len(),
    })
}

/// The optimum of the fluid programme: its time and how it splits each application's tasks
/// between cores and accelerators (summed over the node classes). `hdas-hetero` follows it as a
/// plan.
#[derive(Clone, Debug, PartialEq)]
pub struct FluidPlan {
    /// `T*`, seconds.
    pub makespan_s: f64,
    /// Per application (in the order given): tasks the optimum runs as CPU tasks.
    pub cpu_tasks: Vec<f64>,
    /// Per application: tasks the optimum runs as GPU tasks.
    pub gpu_tasks: Vec<f64>,
}

/// The fluid optimum of `apps` on `nodes` (see the module doc), with its CPU/GPU split.
pub fn fluid_plan<'a>(
    nodes: impl Iterator<Item = &'a Node>,
    apps: &[&Application],
) -> Result<FluidPlan, BoundError> {
    fluid(&classes_of(nodes), apps)
}

/// One task variable: `x` tasks of an application as `variant` on nodes of a class.
struct Placement {
    app: usize,
    variant: Variant,
    x: Variable,
    class: usize,
    /// Best task duration there, seconds.
    duration: f64,
    request: Resources,
    /// Accelerator kind the task needs (GPU tasks), if any.
    kind: Option<String>,
    /// Seconds of exclusive disk the task's split needs there.
    disk_s: f64,
}

/// The fluid programme for `apps` on `classes`, solved.
fn fluid(classes: &[NodeClass<'_>], apps: &[&Application]) -> Result<FluidPlan, BoundError> {
    let mut vars = ProblemVariables::new();
    let t = vars.add(variable().min(0.0));
    let mut placements: Vec<Placement> = Vec::new();
    let mut demand: Vec<(Expression, f64)> = Vec::new();
    for (ai, a) in apps.iter().enumerate().filter(|(_, a)| a.tasks > 0) {
        let mut sum = Expression::default();
        let mut any = false;
        for (ci, c) in classes.iter().enumerate() {
            for v in [Variant::Cpu, Variant::Gpu] {
                let Some(duration) = best_task_time(a, v, c.node) else {
                    continue;
                };
                let x = vars.add(variable().min(0.0));
                sum += x;
                any = true;
                placements.push(Placement {
                    app: ai,
                    variant: v,
                    x,
                    class: ci,
                    duration,
                    request: a.request(v).unwrap_or_default(),
                    kind: match v {
                        Variant::Gpu => a.gpu.as_ref().and_then(|g| g.kind.clone()),
                        Variant::Cpu => None,
                    },
                    disk_s: read_s(a, c.node),
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
    };
    if demand.is_empty() {
        return Ok(plan);
    }
    let mut problem = vars.minimise(t).using(microlp);
    for (sum, tasks) in demand {
        problem = problem.with(sum.eq(tasks));
    }
    for (ci, c) in classes.iter().enumerate() {
        let cap = c.node.capacity();
        let here: Vec<&Placement> = placements.iter().filter(|p| p.class == ci).collect();
        if here.is_empty() {
            continue;
        }
        // Resource-seconds held, as a share of the class's capacity, per resource.
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
        row(&|p| p.duration * share(f64::from(p.request.cores), f64::from(cap.cores)));
        row(&|p| p.duration * share(p.request.memory_bytes as f64, cap.memory_bytes as f64));
        row(&|p| p.duration * share(f64::from(p.request.gpus), f64::from(cap.gpus)));
        row(&|p| p.disk_s);
        let mut kinds: Vec<&str> = here.iter().filter_map(|p| p.kind.as_deref()).collect();
        kinds.sort_unstable();
        kinds.dedup();
        for kind in kinds {
            let devices = c
                .node
                .accelerators
                .iter()
                .filter(|a| a.kind == kind)
                .count() as f64;
            row(&|p| {
                if p.kind.as_deref() == Some(kind) {
                    p.duration * share(f64::from(p.request.gpus), devices)
                } else {
                    0.0
                }
            });
        }
        for e in rows {
            problem = problem.with(e.leq(c.count * t));
        }
    }
    let solution = problem
        .solve()
        .map_err(|e: ResolutionError| BoundError::Solver(e.to_string()))?;
    plan.makespan_s = solution.value(t).max(0.0);
    for p in &placements {
        let x = solution.value(p.x).max(0.0);
        match p.variant {
            Variant::Cpu => plan.cpu_tasks[p.app] += x,
            Variant::Gpu => plan.gpu_tasks[p.app] += x,
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
}
