//! The graph simulator's promises over random workflows, clusters and seeds, under every balancer:
//! every instance runs exactly once, none starts before all its producers ended, and under PCDDB
//! no node ever holds more than MT × cores instances. Plus determinism, and the balancers on a
//! small hand-made case.

use hetsched_core::input::cluster::{parse_cluster, parse_node_attributes};
use hetsched_core::input::workflow::parse_workflow;
use hetsched_core::model::latency::LatencyMatrix;
use hetsched_core::model::workflow::{DependencyKind, Workflow};
use hetsched_core::policy::graph::{BalancerKind, Thresholds};
use hetsched_core::time::NANOS_PER_SEC;
use hetsched_core::{Cluster, NodeId};
use hetsched_sim::graph::{Execution, GraphResult, GraphSimConfig, GraphSimError, simulate_graph};
use proptest::prelude::*;

#[derive(Clone, Debug)]
struct TaskGen {
    values: u32,
    processes: u32,
    cost_ms: u32,
    cv: u32,
    inputs: Vec<usize>,
    gpu: bool,
}

fn workflow_text(tasks: &[TaskGen]) -> String {
    let mut s = String::new();
    for (i, t) in tasks.iter().enumerate() {
        s += &format!(
            "[[task]]\nname = \"T{i}\"\ninstances = \"1..={}\"\nprocesses = {}\noutputs = [\"d{i}\"]\n",
            t.values, t.processes
        );
        if t.cv == 0 {
            s += &format!("cost = \"{}ms\"\n", t.cost_ms);
        } else {
            s += &format!(
                "cost = {{ mean = \"{}ms\", cv = {} }}\n",
                t.cost_ms,
                t.cv as f64 / 4.0
            );
        }
        let mut inputs: Vec<usize> = t.inputs.iter().map(|&k| k % i.max(1)).collect();
        inputs.sort_unstable();
        inputs.dedup();
        if i > 0 && !inputs.is_empty() {
            let list: Vec<String> = inputs.iter().map(|k| format!("\"d{k}\"")).collect();
            s += &format!("inputs = [{}]\n", list.join(", "));
        }
        if t.gpu {
            s += "requires = [\"gpu\"]\n";
        }
    }
    s
}

fn task_gen() -> impl Strategy<Value = TaskGen> {
    (
        prop_oneof![Just(3u32), Just(5), 1u32..8],
        1u32..3,
        1u32..2000,
        0u32..4,
        prop::collection::vec(0usize..8, 0..3),
        prop::bool::weighted(0.15),
    )
        .prop_map(|(values, processes, cost_ms, cv, inputs, gpu)| TaskGen {
            values,
            processes,
            cost_ms,
            cv,
            inputs,
            gpu,
        })
}

fn cluster_text(nodes: &[(u32, u32)]) -> String {
    let mut s = String::new();
    for (i, &(cores, speed)) in nodes.iter().enumerate() {
        s += &format!(
            "[[node]]\nname = \"n{i}\"\ncores = {cores}\ncore_speed = {}\nlatency = \"{}us\"\n",
            speed as f64 / 4.0,
            50 + 37 * i
        );
        // The first node always has a GPU, so `requires = ["gpu"]` can be met.
        if i == 0 {
            s += "[[node.accelerator]]\nkind = \"k20\"\n";
        }
    }
    s
}

struct Case {
    cluster: Cluster,
    attributes: Vec<Vec<String>>,
    workflow: Workflow,
}

fn case(tasks: &[TaskGen], nodes: &[(u32, u32)]) -> Case {
    let ct = cluster_text(nodes);
    Case {
        cluster: parse_cluster("c.toml", &ct).unwrap_or_else(|e| panic!("{e}")),
        attributes: parse_node_attributes("c.toml", &ct).unwrap_or_else(|e| panic!("{e}")),
        workflow: parse_workflow("w.toml", &workflow_text(tasks))
            .unwrap_or_else(|e| panic!("{e}\n{}", workflow_text(tasks)))
            .workflow,
    }
}

fn run(case: &Case, config: &GraphSimConfig) -> Result<GraphResult, GraphSimError> {
    let latency = LatencyMatrix::from_cluster(&case.cluster);
    simulate_graph(
        &case.cluster,
        &case.attributes,
        &latency,
        &case.workflow,
        config,
    )
}

/// Every promise a user relies on, checked on one result.
fn check(case: &Case, config: &GraphSimConfig, r: &GraphResult) -> Result<(), TestCaseError> {
    let w = &case.workflow;
    let offsets: Vec<usize> = w
        .tasks
        .iter()
        .scan(0usize, |acc, t| {
            let first = *acc;
            *acc += t.instances() as usize;
            Some(first)
        })
        .collect();
    for (id, rec) in r.instances.iter().enumerate() {
        prop_assert_eq!(rec.runs, 1, "instance {} ran {} times", id, rec.runs);
        prop_assert!(rec.end != u64::MAX && rec.start <= rec.end && rec.ready <= rec.start);
        let task = &w.tasks[rec.task as usize];
        // Requirements are met.
        if task.requires.iter().any(|r| r == "gpu") {
            prop_assert_eq!(
                rec.node,
                NodeId(0),
                "a GPU instance ran on a node without one"
            );
        }
        for dep in &task.depends_on {
            let p = &w.tasks[dep.producer];
            // An independent statement of each kind's map (instances are value-major).
            let producers: Vec<usize> = match dep.kind {
                DependencyKind::OneToOne => vec![offsets[dep.producer] + rec.index as usize],
                DependencyKind::InstanceWise => {
                    let value = rec.index / task.processes;
                    (0..p.processes)
                        .map(|k| offsets[dep.producer] + (value * p.processes + k) as usize)
                        .collect()
                }
                DependencyKind::All => (0..p.instances() as usize)
                    .map(|k| offsets[dep.producer] + k)
                    .collect(),
            };
            for pid in producers {
                prop_assert!(
                    r.instances[pid].end <= rec.start,
                    "instance {} started at {} before producer {} ended at {}",
                    id,
                    rec.start,
                    pid,
                    r.instances[pid].end
                );
            }
        }
    }
    if config.balancer == BalancerKind::Pcddb {
        for n in &r.nodes {
            prop_assert!(
                n.peak_instances <= config.thresholds.mt * n.cores,
                "{} held {} > MT × cores = {}",
                n.name,
                n.peak_instances,
                config.thresholds.mt * n.cores
            );
        }
    }
    let done: u32 = r
        .nodes
        .iter()
        .flat_map(|n| n.instances_per_core.iter())
        .sum();
    prop_assert_eq!(done as u64, w.total_instances());
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn every_instance_runs_once_after_its_producers_and_pcddb_respects_mt(
        tasks in prop::collection::vec(task_gen(), 1..6),
        nodes in prop::collection::vec((1u32..5, 2u32..9), 1..7),
        balancer in prop::sample::select(BalancerKind::ALL.to_vec()),
        lt in 1u32..4,
        extra in 0u32..8,
        launch in 0usize..7,
        seed in 0u64..1000,
        time_share in any::<bool>(),
    ) {
        let case = case(&tasks, &nodes);
        let config = GraphSimConfig {
            balancer,
            thresholds: Thresholds { lt, mt: lt + extra },
            launch: NodeId((launch % nodes.len()) as u32),
            seed,
            check_interval: 250_000_000,
            execution: if time_share { Execution::TimeShare } else { Execution::Queue },
            ..GraphSimConfig::default()
        };
        let r = run(&case, &config).map_err(|e| TestCaseError::fail(e.to_string()))?;
        check(&case, &config, &r)?;
    }
}

fn small() -> Case {
    case(
        &[
            TaskGen {
                values: 6,
                processes: 2,
                cost_ms: 900,
                cv: 2,
                inputs: vec![],
                gpu: false,
            },
            TaskGen {
                values: 6,
                processes: 1,
                cost_ms: 400,
                cv: 0,
                inputs: vec![0],
                gpu: false,
            },
            TaskGen {
                values: 2,
                processes: 1,
                cost_ms: 300,
                cv: 0,
                inputs: vec![0, 1],
                gpu: true,
            },
        ],
        &[(2, 4), (8, 2), (1, 8), (4, 4)],
    )
}

#[test]
fn the_same_seed_gives_the_same_run_and_another_seed_another() {
    let case = small();
    for balancer in BalancerKind::ALL {
        let config = GraphSimConfig {
            balancer,
            seed: 7,
            ..GraphSimConfig::default()
        };
        let a = run(&case, &config).unwrap_or_else(|e| panic!("{e}"));
        let b = run(&case, &config).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(a, b, "{balancer}");
        assert_eq!(
            a.export_json().ok(),
            b.export_json().ok(),
            "{balancer}: byte-identical export"
        );
        let c = run(&case, &GraphSimConfig { seed: 8, ..config }).unwrap_or_else(|e| panic!("{e}"));
        assert_ne!(a.makespan, c.makespan, "{balancer}: costs follow the seed");
    }
}

#[test]
fn messages_are_counted_by_kind_and_the_balancers_use_their_own() {
    let case = small();
    let by = |b: BalancerKind| {
        run(
            &case,
            &GraphSimConfig {
                balancer: b,
                ..GraphSimConfig::default()
            },
        )
        .unwrap_or_else(|e| panic!("{e}"))
        .messages
    };
    let (s, c, p) = (
        by(BalancerKind::Static),
        by(BalancerKind::Centralised),
        by(BalancerKind::Pcddb),
    );
    let total = case.workflow.total_instances();
    // Every balancer returns one result per instance.
    for m in [&s, &c, &p] {
        assert_eq!(m.by_kind["result"], total);
        assert_eq!(m.total, m.by_kind.values().sum::<u64>());
    }
    // Static and centralised send each instance its own dispatch; pcddb never does.
    assert_eq!(s.by_kind["dispatch"], total);
    assert_eq!(c.by_kind["dispatch"], total);
    assert!(c.by_kind["report"] > 0);
    assert_eq!(p.by_kind["dispatch"], 0);
    assert!(p.by_kind["request"] > 0 && p.by_kind["status"] > 0 && p.by_kind["reply"] > 0);
    assert_eq!(s.by_kind["status"] + s.by_kind["report"], 0);
}

#[test]
fn a_requirement_no_deployed_node_meets_is_refused_before_the_run() {
    let case = small();
    let config = GraphSimConfig {
        members: Some(vec![NodeId(1), NodeId(2)]),
        launch: NodeId(1),
        ..GraphSimConfig::default()
    };
    let e = run(&case, &config).err();
    assert!(
        matches!(&e, Some(GraphSimError::Unplaceable { task, .. }) if task == "T2"),
        "{e:?}"
    );
}

#[test]
fn a_core_that_falls_idle_takes_an_instance_waiting_on_its_sibling() {
    // One dual-core node holds a 10 s instance and three 1 s ones. Spread evenly by count, core 0
    // gets the big one and a small one, core 1 the other two; core 1 is free after 2 s and runs
    // core 0's waiting small instance then, as an operating system would, instead of idling
    // while it waits 10 s behind the big one.
    let task = |values, cost_ms| TaskGen {
        values,
        processes: 1,
        cost_ms,
        cv: 0,
        inputs: vec![],
        gpu: false,
    };
    let case = case(&[task(1, 10_000), task(3, 1_000)], &[(2, 4)]);
    for balancer in BalancerKind::ALL {
        let r = run(
            &case,
            &GraphSimConfig {
                balancer,
                ..GraphSimConfig::default()
            },
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let s = r.makespan_s();
        assert!(
            (10.0..10.9).contains(&s),
            "{balancer}: makespan {s} s — the big instance alone, not 11 s behind a pinned queue"
        );
        let busy: Vec<f64> = r.nodes[0]
            .busy_per_core
            .iter()
            .map(|&b| b as f64 / 1e9)
            .collect();
        assert_eq!(
            busy,
            vec![10.0, 3.0],
            "{balancer}: core 1 ran all three small ones"
        );
    }
}

#[test]
fn time_sharing_runs_everything_a_node_holds_at_once_on_its_cores_shared_equally() {
    // One dual-core node of speed 1.0 holds a 10 s instance and three 1 s ones. Shared by four,
    // each runs at half a core: the three small ones end together at 2 s; the big one, which
    // has done 1 s of its work by then, runs alone on a core and ends at 11 s. Every instance
    // starts when its node takes it, and each core is charged what its instances ran.
    let task = |values, cost_ms| TaskGen {
        values,
        processes: 1,
        cost_ms,
        cv: 0,
        inputs: vec![],
        gpu: false,
    };
    let case = case(&[task(1, 10_000), task(3, 1_000)], &[(2, 4)]);
    for balancer in BalancerKind::ALL {
        let r = run(
            &case,
            &GraphSimConfig {
                balancer,
                execution: Execution::TimeShare,
                ..GraphSimConfig::default()
            },
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let runs: Vec<(f64, f64)> = r
            .instances
            .iter()
            .map(|i| (i.start as f64 / 1e9, (i.end - i.start) as f64 / 1e9))
            .collect();
        let start = runs[0].0;
        assert!(
            runs.iter().all(|&(s, _)| s == start),
            "{balancer}: all start when placed together: {runs:?}"
        );
        let took: Vec<f64> = runs.iter().map(|&(_, d)| d).collect();
        assert_eq!(took, vec![11.0, 2.0, 2.0, 2.0], "{balancer}");
        let busy: Vec<f64> = r.nodes[0]
            .busy_per_core
            .iter()
            .map(|&b| b as f64 / 1e9)
            .collect();
        assert_eq!(
            busy.iter().sum::<f64>(),
            13.0,
            "{balancer}: CPU time is the work"
        );
        let done: u32 = r.nodes[0].instances_per_core.iter().sum();
        assert_eq!(done, 4, "{balancer}");
    }
}

#[test]
fn a_long_time_shared_pile_is_no_stall() {
    // The dispatcher pushes 300 instances of 20 s onto one dual-core node: time-shared, none
    // ends before all end together at 3,000 s — progress the run must wait for, not a stall.
    let task = TaskGen {
        values: 300,
        processes: 1,
        cost_ms: 20_000,
        cv: 0,
        inputs: vec![],
        gpu: false,
    };
    let case = case(&[task], &[(2, 4)]);
    let r = run(
        &case,
        &GraphSimConfig {
            balancer: BalancerKind::Centralised,
            execution: Execution::TimeShare,
            ..GraphSimConfig::default()
        },
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(r.makespan_s().round(), 3000.0);
}

#[test]
fn under_a_backlog_pcddb_lets_the_faster_node_pull_more_and_finishes_before_the_push() {
    // The paper's "能者多劳" (seed 004, line 97): a node is refilled only when it drains below LT,
    // so a node whose cores are twice as fast pulls about twice the work. The centralised
    // dispatcher pushes every ready instance at once by count, so the slow node gets as many as
    // the fast one and the run waits for it. 200 one-second instances on two dual-core nodes
    // of speed 1.0 and 0.5: the push ends near 100 s, the pull near 67 s.
    let task = TaskGen {
        values: 200,
        processes: 1,
        cost_ms: 1_000,
        cv: 0,
        inputs: vec![],
        gpu: false,
    };
    let case = case(&[task], &[(2, 4), (2, 2)]);
    let by = |balancer| {
        run(
            &case,
            &GraphSimConfig {
                balancer,
                thresholds: Thresholds { lt: 2, mt: 4 },
                ..GraphSimConfig::default()
            },
        )
        .unwrap_or_else(|e| panic!("{e}"))
    };
    let done = |r: &GraphResult, n: usize| r.nodes[n].instances_per_core.iter().sum::<u32>();
    let (push, pull) = (by(BalancerKind::Centralised), by(BalancerKind::Pcddb));
    assert_eq!(
        (done(&push, 0), done(&push, 1)),
        (100, 100),
        "push: by count"
    );
    assert!(
        (99.0..102.0).contains(&push.makespan_s()),
        "push: {} s",
        push.makespan_s()
    );
    let (fast, slow) = (done(&pull, 0), done(&pull, 1));
    assert!(
        fast >= 125 && fast + slow == 200,
        "pull: the fast node ran {fast}, the slow one {slow}"
    );
    assert!(
        pull.makespan_s() < 0.8 * push.makespan_s(),
        "pull {} s against push {} s",
        pull.makespan_s(),
        push.makespan_s()
    );
}

/// Three one-second instances on one dual-core node.
fn three_on_one_node() -> Case {
    let task = TaskGen {
        values: 3,
        processes: 1,
        cost_ms: 1000,
        cv: 0,
        inputs: vec![],
        gpu: false,
    };
    case(&[task], &[(2, 4)])
}

#[test]
fn a_message_cost_near_the_clocks_end_stops_the_run_instead_of_overflowing() {
    // Static dispatches three instances to one node: each dispatch waits for the one before it
    // to be handled, so the third is delivered past the clock's end (it overflowed at
    // `now + delay … + message_cost`).
    let r = run(
        &three_on_one_node(),
        &GraphSimConfig {
            balancer: BalancerKind::Static,
            message_cost: u64::MAX / 2,
            ..GraphSimConfig::default()
        },
    );
    assert_eq!(r.err(), Some(GraphSimError::ClockEnd { left: 3 }));
}

#[test]
fn a_node_handling_its_messages_slower_than_they_come_is_named_as_overloaded() {
    // Under pcddb and centralised every member sends the launch node a message every check: at
    // an hour per message and a check per second its queue only grows, and the run says so.
    for balancer in [BalancerKind::Pcddb, BalancerKind::Centralised] {
        let e = run(
            &three_on_one_node(),
            &GraphSimConfig {
                balancer,
                message_cost: 3600 * NANOS_PER_SEC,
                ..GraphSimConfig::default()
            },
        )
        .err();
        assert!(
            matches!(&e, Some(GraphSimError::Overloaded { node, left: 3, message_cost_s, .. })
                if node == "n0" && *message_cost_s == 3600.0),
            "{balancer}: {e:?}"
        );
    }
}

#[test]
fn a_workflow_that_needs_more_than_a_century_is_refused_before_it_runs() {
    // 10,000 instances of 40 days each on 2 cores of speed 1: at least 548 years. Under pcddb
    // its self-checks alone would have run for hours before the clock's end.
    let task = TaskGen {
        values: 10_000,
        processes: 1,
        cost_ms: 40 * 24 * 3600 * 1000,
        cv: 0,
        inputs: vec![],
        gpu: false,
    };
    let e = run(&case(&[task], &[(2, 4)]), &GraphSimConfig::default()).err();
    assert!(
        matches!(&e, Some(GraphSimError::Config(m)) if m.contains("at least 548 years")),
        "{e:?}"
    );
}

#[test]
fn a_cluster_of_20000_nodes_runs_every_instance_once_under_every_balancer() {
    // Twice the 10,000 nodes graph simulations once stopped at: the launch nodes looked every
    // status and report up among the members (nodes² steps per round of checks). Two node
    // kinds, a small workflow: 24 instances, 8 waiting each for its producer's 3, 2 for all.
    let nodes = 20_000;
    let ct = format!(
        "[[node]]\nname = \"dual\"\ncount = {}\ncores = 2\ncore_speed = 1.0\nlatency = \"50us\"\n\
         [[node]]\nname = \"eight\"\ncount = {}\ncores = 8\ncore_speed = 0.5\nlatency = \"80us\"\n",
        nodes / 2,
        nodes / 2
    );
    let wt = "[[task]]\nname = \"A\"\ninstances = \"1..=8\"\nprocesses = 3\n\
              cost = { mean = \"900ms\", cv = 0.5 }\noutputs = [\"m\"]\n\
              [[task]]\nname = \"B\"\ninstances = \"1..=8\"\ncost = \"400ms\"\n\
              inputs = [\"m\"]\noutputs = [\"f\"]\n\
              [[task]]\nname = \"C\"\ninstances = 2\ncost = \"300ms\"\ninputs = [\"f\"]\n";
    let case = Case {
        cluster: parse_cluster("c.toml", &ct).unwrap_or_else(|e| panic!("{e}")),
        attributes: parse_node_attributes("c.toml", &ct).unwrap_or_else(|e| panic!("{e}")),
        workflow: parse_workflow("w.toml", wt)
            .unwrap_or_else(|e| panic!("{e}"))
            .workflow,
    };
    assert_eq!(case.cluster.nodes.len(), nodes);
    for balancer in BalancerKind::ALL {
        // The launch node last, so pcddb's table and the dispatcher's members are searched to
        // their end.
        let config = GraphSimConfig {
            balancer,
            launch: NodeId(nodes as u32 - 1),
            ..GraphSimConfig::default()
        };
        let r = run(&case, &config).unwrap_or_else(|e| panic!("{balancer}: {e}"));
        check(&case, &config, &r).unwrap_or_else(|e| panic!("{balancer}: {e}"));
        assert_eq!(r.instances.len(), 34, "{balancer}");
        assert_eq!(r.nodes.len(), nodes, "{balancer}");
        assert!(
            r.instances.iter().all(|i| i.runs == 1),
            "{balancer}: an instance ran twice or never"
        );
    }
}

#[test]
fn a_cluster_past_the_limit_is_refused_naming_it() {
    // Cluster files stop at 100,000 nodes; a cluster built in code is refused by the simulator.
    let ct = format!(
        "[[node]]\nname = \"n\"\ncount = {}\ncores = 1\n",
        hetsched_sim::graph::MAX_GRAPH_NODES
    );
    let mut cluster = parse_cluster("c.toml", &ct).unwrap_or_else(|e| panic!("{e}"));
    let mut extra = cluster.nodes[0].clone();
    extra.id = NodeId(cluster.nodes.len() as u32);
    extra.name = "extra".into();
    cluster.nodes.push(extra);
    let case = Case {
        attributes: vec![Vec::new(); cluster.nodes.len()],
        cluster,
        workflow: parse_workflow(
            "w.toml",
            "[[task]]\nname = \"A\"\ninstances = 1\ncost = \"1s\"\n",
        )
        .unwrap_or_else(|e| panic!("{e}"))
        .workflow,
    };
    let err = run(&case, &GraphSimConfig::default()).expect_err("past the limit");
    assert_eq!(
        err.to_string(),
        format!(
            "the cluster has {} nodes; a graph simulation takes at most {} (as many as a cluster \
             file holds)",
            hetsched_sim::graph::MAX_GRAPH_NODES + 1,
            hetsched_sim::graph::MAX_GRAPH_NODES
        )
    );
}
