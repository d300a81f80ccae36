//! The makespan lower bound (`hetsched_core::policy::batch::bound`) against simulated runs: it is
//! never above the makespan any policy achieves, on random clusters and workloads, and on a
//! hand-computed case a policy reaches it exactly.

use crate::common::{aligned, cluster, run};
use crate::properties::arb_case;
use hetsched_core::policy::batch::BatchPolicyKind;
use hetsched_core::policy::batch::bound::lower_bound;
use hetsched_core::testkit::{app, node};
use hetsched_core::{AppId, NodeId};
use hetsched_sim::{SimConfig, SimError};
use proptest::prelude::*;

/// Simulated task times are rounded to the nanosecond, so a run that meets the bound may come in
/// a few nanoseconds under the real-valued optimum: allow 1 µs.
const ROUNDING_S: f64 = 1e-6;

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn the_bound_is_never_above_any_policys_makespan((nodes, apps, seed, chunks) in arb_case()) {
        let c = cluster(nodes);
        let config = SimConfig { seed, cpu_read_chunks: chunks, record_tasks: false, sample_interval: None, ..SimConfig::default() };
        let bound = lower_bound(&c, &apps);
        for kind in BatchPolicyKind::ALL {
            match run(&c, &apps, kind, &config) {
                Err(SimError::Unrunnable { .. }) => {}
                Err(e) => prop_assert!(false, "{kind}: {e}"),
                Ok(r) => {
                    let b = bound.as_ref().map_err(|e| TestCaseError::fail(format!("{kind} ran but no bound: {e}")))?;
                    prop_assert!(
                        b.lower_bound_s <= r.makespan_s + ROUNDING_S,
                        "{kind}: bound {b:?} above makespan {}", r.makespan_s
                    );
                }
            }
        }
    }
}

/// One node of 2 cores and 1 GPU, 4 tasks of 30 s on a core or 10 s on the GPU: the optimum is
/// 30 s (three tasks on the GPU back to back, one on the free core). The bound says 30 s, and FIFO
/// with heartbeats on whole seconds reaches it: the GPU frees at 10 s and 20 s, exactly on a beat.
#[test]
fn fifo_reaches_the_bound_on_the_hand_computed_case() {
    let c = cluster(vec![node("n").cores(2).gpus(1, "g").build(NodeId(0))]);
    let a = app("a")
        .split_mib(0)
        .tasks(4)
        .cpu(30.0, 0.0)
        .gpu(10.0, 0.0, 0.0)
        .build(AppId(0));
    let b = lower_bound(&c, std::slice::from_ref(&a)).unwrap();
    assert!((b.lower_bound_s - 30.0).abs() < 1e-9);
    let r = run(&c, &[a], BatchPolicyKind::Fifo, &aligned()).unwrap();
    assert_eq!(r.makespan_s, 30.0);
    assert_eq!((r.gpu_tasks, r.cpu_tasks), (3, 1));
}

/// `hdas-hetero` follows the fluid plan per group of nodes, so each disk gets work in proportion
/// to its bandwidth: on a cluster of one fast-disk node (256 MiB/s) and one slow-disk node
/// (32 MiB/s), the IO-heavy application (1 GiB splits) runs on the fast disk and the IO-light one
/// (16 MiB splits) on the slow disk, and the run ends no later than FIFO's, which hands out cores
/// in submission order wherever they are.
#[test]
fn hdas_hetero_loads_each_disk_by_its_bandwidth() {
    let c = cluster(vec![
        node("fast").cores(4).disk_mib_s(256.0).build(NodeId(0)),
        node("slow").cores(4).disk_mib_s(32.0).build(NodeId(1)),
    ]);
    let apps = vec![
        app("heavy")
            .split_mib(1024)
            .tasks(40)
            .cpu(20.0, 4.0)
            .build(AppId(0)),
        app("light")
            .split_mib(16)
            .tasks(40)
            .cpu(20.0, 0.0625)
            .build(AppId(1)),
    ];
    let hetero = run(&c, &apps, BatchPolicyKind::HdasHetero, &aligned()).unwrap();
    let on_slow = |app: u32| {
        hetero
            .tasks
            .iter()
            .filter(|t| t.node == NodeId(1) && t.app == AppId(app))
            .count()
    };
    assert!(
        on_slow(1) >= 4 * on_slow(0),
        "slow disk: {} heavy, {} light",
        on_slow(0),
        on_slow(1)
    );
    let fifo = run(&c, &apps, BatchPolicyKind::Fifo, &aligned()).unwrap();
    assert!(
        hetero.makespan_s <= fifo.makespan_s,
        "hdas-hetero {} s, fifo {} s",
        hetero.makespan_s,
        fifo.makespan_s
    );
}

/// The sweep's case that `hdas-hetero` used to lose worst on seed 1 (#815: 12 mixed slaves,
/// Kmeans+NB+BP, 0.62 s heartbeats): the bound's programme, taken as the plan, sees spare core
/// time and puts 900 s BP tasks on cores, but NB's and Kmeans's CPU tasks read far slower than
/// alone while other tasks share their disk, so the cores are the real bottleneck. Planning with
/// the contention it measures from the heartbeats' `#IOtask`, `hdas-hetero` now ends within 2 %
/// of the better of FIFO and the model-based policy (it was +4.8 %).
#[test]
fn hdas_hetero_plans_with_the_disk_contention_it_measures() {
    use hetsched_sim::scenario::sweep::{SweepOptions, run_one};
    let options = SweepOptions::default();
    let run = |kind| run_one(&options, 815, kind).unwrap().makespan_s;
    let hetero = run(BatchPolicyKind::HdasHetero);
    let fifo = run(BatchPolicyKind::Fifo);
    let model = run(BatchPolicyKind::HadoopModel);
    assert!(
        hetero <= fifo.min(model) * 1.02,
        "hdas-hetero {hetero} s, fifo {fifo} s, model {model} s"
    );
}

/// The sweep's cases that `hdas-hetero` lost on seed 4 (#843: 4 mixed slaves, Kmeans+BP, 3.3 s
/// heartbeats; #811: 8 mixed slaves, KNN+Kmeans+NB+BP, 6.9 s heartbeats). The plan runs BP on
/// GPUs only, but a core went to the application furthest behind its plan, and right after the
/// cores fill every application the plan gives them is a task ahead of its even pace while BP,
/// given none, is at zero: BP took a core for 900 s on every node at every new plan, and Kmeans
/// took GPUs in its stead (#843: +3.0 %, #811: +2.1 % against the better of FIFO and the
/// model-based policy). Ranking cores by how far behind the plan each application would be once
/// the task is started, both end within 2 %.
#[test]
fn hdas_hetero_gives_cores_by_the_plan_after_the_start() {
    use hetsched_sim::scenario::sweep::{SweepOptions, run_one};
    let options = SweepOptions {
        seed: 4,
        ..SweepOptions::default()
    };
    for case in [843, 811] {
        let run = |kind| run_one(&options, case, kind).unwrap();
        let hetero = run(BatchPolicyKind::HdasHetero);
        let fifo = run(BatchPolicyKind::Fifo).makespan_s;
        let model = run(BatchPolicyKind::HadoopModel).makespan_s;
        assert!(
            hetero.makespan_s <= fifo.min(model) * 1.02,
            "#{case}: hdas-hetero {} s, fifo {fifo} s, model {model} s",
            hetero.makespan_s
        );
    }
}

/// Sweep case #815 of seed 1 cut down to four identical nodes of 4 cores and 1 GPU on a 100 MiB/s
/// disk: `io` (CPU-only, 32 s of compute and an 800 MiB split) beside `bp` (900 s on a core, 20 s
/// on the GPU). With three `io` tasks reading each disk at once the cores have no room for a
/// 900 s `bp` task, and the plan gives `bp` none; but ranked by "behind the plan" before the
/// start, `bp` (planned nothing, behind 0) won a core whenever `io` was a task ahead of its pace,
/// and `hdas-hetero` ended at 1200.8 s against the model's 1130.0 s (+6 %). Ranked after the
/// start, it runs no `bp` task on a core and ends with the model.
#[test]
fn hdas_hetero_runs_no_long_task_on_a_core_its_plan_keeps_for_short_ones() {
    let nodes = (0..4)
        .map(|i| {
            node(&format!("n{i}"))
                .cores(4)
                .gpus(1, "g")
                .disk_mib_s(100.0)
                .build(NodeId(i))
        })
        .collect();
    let c = cluster(nodes);
    let apps = vec![
        app("io")
            .split_mib(800)
            .tasks(240)
            .cpu(32.0, 8.0)
            .build(AppId(0)),
        app("bp")
            .split_mib(0)
            .tasks(200)
            .cpu(900.0, 0.0)
            .gpu(20.0, 0.0, 0.0)
            .build(AppId(1)),
    ];
    let config = SimConfig::default();
    let hetero = run(&c, &apps, BatchPolicyKind::HdasHetero, &config).unwrap();
    let fifo = run(&c, &apps, BatchPolicyKind::Fifo, &config).unwrap();
    let model = run(&c, &apps, BatchPolicyKind::HadoopModel, &config).unwrap();
    let bp_on_cores = hetero
        .tasks
        .iter()
        .filter(|t| t.app == AppId(1) && t.variant == hetsched_core::Variant::Cpu)
        .count();
    assert_eq!(bp_on_cores, 0);
    assert!(
        hetero.makespan_s <= fifo.makespan_s.min(model.makespan_s) * 1.02,
        "hdas-hetero {} s, fifo {} s, model {} s",
        hetero.makespan_s,
        fifo.makespan_s,
        model.makespan_s
    );
}

/// Sweep case #772 of seed 6: a GPU node on a 64 MiB/s disk and a CPU-only node on a 128 MiB/s
/// disk, nine applications submitted one after another. The last, NB (22 tasks of 1 GiB), is alone
/// at the end. The completion gate measured the accelerators' backlog against both disks, so NB's
/// CPU tasks looked like stragglers and 20 of its 22 tasks queued on the GPU node's slow disk
/// (+4.2 % against the better of FIFO and the model-based policy). Counting only the disks the
/// accelerators read from, it ends with them.
#[test]
fn hdas_hetero_gates_cores_by_the_disks_its_accelerators_read_from() {
    use hetsched_sim::scenario::sweep::{SweepOptions, run_one};
    let options = SweepOptions {
        seed: 6,
        ..SweepOptions::default()
    };
    let run = |kind| run_one(&options, 772, kind).unwrap().makespan_s;
    let hetero = run(BatchPolicyKind::HdasHetero);
    let fifo = run(BatchPolicyKind::Fifo);
    let model = run(BatchPolicyKind::HadoopModel);
    assert!(
        hetero <= fifo.min(model) * 1.02,
        "hdas-hetero {hetero} s, fifo {fifo} s, model {model} s"
    );
}

/// The sweep's summary counts in words: `1 case`, `1 random mix` / `0 random mixes`.
#[test]
fn a_sweep_of_one_case_reads_in_the_singular() {
    use hetsched_sim::scenario::sweep::{SweepOptions, run};
    let options = SweepOptions {
        cases: 1,
        scale: 0.05,
        threads: 1,
        ..SweepOptions::default()
    };
    let table = run(&options, &mut |_, _| {}).unwrap().render_table();
    let first = table.lines().next().unwrap_or_default();
    assert!(
        first.starts_with("sweep: 1 case (seed 1, scale 0.05): "),
        "{first}"
    );
    assert!(
        first.contains(" 1 random mix; ") || first.contains(" 0 random mixes; "),
        "{first}"
    );
}
