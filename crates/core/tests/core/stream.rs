//! Spec 04's placers as a user relies on them: on the example topologies and the 10-node
//! heterogeneous cluster of the stream-paper scenario, and on random topologies (properties).
//! - one-phase keeps one process per node per topology;
//! - it never overloads a node when a packing without overload exists;
//! - it sends less traffic between nodes than Storm's even scheduler;
//! - self-tuning ends on no more nodes than even's worker count, without overload;
//! - a scripted rate change triggers exactly the reschedules the thresholds allow.
//!
//! Random cases use fixed seeds, so CI runs the same cases every time (`PROPTEST_CASES=5000`
//! explores more).

#![allow(clippy::unwrap_used)] // a failing test should panic with the error

use hetsched_core::input::cluster::parse_cluster_with_slots;
use hetsched_core::input::topology::parse_topology;
use hetsched_core::model::topology::{
    Component, ComponentKind, Grouping, Stream, Topology, Traffic,
};
use hetsched_core::policy::stream::one_phase::{OnePhase, Refine, first_fit_decreasing};
use hetsched_core::policy::stream::reschedule::{
    Cause, Decision, RescheduleController, RescheduleSettings,
};
use hetsched_core::policy::stream::{
    Placement, PlacementError, PlacementProblem, StreamNode, StreamPlacer, StreamPlacerKind,
    evaluate, stream_nodes,
};
use hetsched_core::time::NANOS_PER_SEC;
use proptest::prelude::*;
use proptest::test_runner::RngSeed;
use std::path::PathBuf;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

const TOPOLOGIES: [&str; 5] = [
    "topology-wordcount.toml",
    "topology-chain.toml",
    "topology-diamond.toml",
    "topology-star.toml",
    "topology-ad-analytics.toml",
];

fn example_topology(name: &str) -> Topology {
    let path = repo().join("examples").join(name);
    parse_topology(name, &std::fs::read_to_string(path).unwrap()).unwrap()
}

fn paper_cluster() -> Vec<StreamNode> {
    let path = repo().join("examples/cluster-streams-10.toml");
    let (cluster, slots) =
        parse_cluster_with_slots("cluster", &std::fs::read_to_string(path).unwrap()).unwrap();
    stream_nodes(&cluster, &slots, &[])
}

fn node(name: &str, cores: u32, slots: u32) -> StreamNode {
    StreamNode {
        name: name.into(),
        rack: 0,
        capacity: f64::from(cores) * 100.0,
        background: 0.0,
        memory_bytes: 16 << 30,
        slots,
    }
}

/// Every node's executors share one process.
fn one_process_per_node(p: &Placement) -> bool {
    let mut seen: std::collections::HashMap<usize, u32> = Default::default();
    p.node
        .iter()
        .zip(&p.process)
        .all(|(&n, &proc_)| *seen.entry(n).or_insert(proc_) == proc_)
}

#[test]
fn one_phase_beats_even_on_every_scenario_topology_with_one_process_per_node() {
    let nodes = paper_cluster();
    for name in TOPOLOGIES {
        let t = example_topology(name);
        let problem = PlacementProblem::declared(&t, &nodes);
        let one = StreamPlacerKind::OnePhase.build().place(&problem).unwrap();
        let even = StreamPlacerKind::Even.build().place(&problem).unwrap();
        let (m1, me) = (evaluate(&problem, &one), evaluate(&problem, &even));
        assert!(one_process_per_node(&one), "{name}: one process per node");
        assert_eq!(m1.inter_process_traffic, 0.0, "{name}");
        assert_eq!(m1.processes_used, m1.nodes_used, "{name}");
        assert_eq!(m1.overloaded_nodes, 0, "{name}: {m1:?}");
        assert!(
            m1.inter_node_traffic < me.inter_node_traffic,
            "{name}: one-phase {} vs even {}",
            m1.inter_node_traffic,
            me.inter_node_traffic
        );
        // Every placer places every executor on a real node.
        for kind in StreamPlacerKind::ALL {
            let p = kind.build().place(&problem).unwrap();
            assert_eq!(p.node.len(), t.executor_count(), "{name}/{kind}");
            assert!(p.node.iter().all(|&n| n < nodes.len()), "{name}/{kind}");
        }
    }
}

#[test]
fn even_is_round_robin_over_workers_and_workers_round_robin_over_nodes() {
    let t = example_topology("topology-wordcount.toml");
    let nodes = vec![node("a", 4, 2), node("b", 4, 2), node("c", 4, 1)];
    let mut problem = PlacementProblem::declared(&t, &nodes);
    problem.workers = Some(4);
    let p = StreamPlacerKind::Even.build().place(&problem).unwrap();
    // Workers: a/0, b/0, c/0, a/1. Executor i runs in worker i mod 4.
    assert_eq!(&p.node[..5], &[0, 1, 2, 0, 0]);
    assert_eq!(&p.process[..5], &[0, 0, 0, 1, 0]);
}

#[test]
fn one_phase_packs_a_pair_on_the_least_loaded_node_and_follows_the_heaviest_traffic() {
    // Spec 04, Figure 4, on a hand-checked case: a spout with 2 executors feeding a bolt with 2
    // executors by `global` grouping — every tuple goes to bolt#0, so the only pairs are
    // (spout#0, bolt#0) and (spout#1, bolt#0), of equal traffic.
    let t = Topology {
        name: "t".into(),
        requires: Vec::new(),
        components: vec![
            Component {
                name: "s".into(),
                kind: ComponentKind::Spout,
                parallelism: 2,
                cpu: 40.0,
                memory_bytes: 0,
            },
            Component {
                name: "b".into(),
                kind: ComponentKind::Bolt,
                parallelism: 2,
                cpu: 40.0,
                memory_bytes: 0,
            },
        ],
        streams: vec![Stream {
            from: 0,
            to: 1,
            grouping: Grouping::Global,
            rate: 100.0,
        }],
    };
    // Both nodes are empty (relative load 0): the tie goes to the one with more room, node 1,
    // which takes the first pair and becomes lastUsedNode; spout#1 joins bolt#0 there (no
    // inter-node traffic); bolt#1 has no traffic and goes to the least-loaded node, node 0.
    let nodes = vec![node("a", 2, 1), node("b", 4, 1)];
    let p = OnePhase::exact(0.9)
        .place(&PlacementProblem::declared(&t, &nodes))
        .unwrap();
    assert_eq!(p.node, vec![1, 1, 1, 0]);
    assert_eq!(p.process, vec![0, 0, 0, 0]);
}

#[test]
fn self_tuning_ends_on_no_more_nodes_than_even_and_without_overload() {
    let nodes = paper_cluster();
    for name in TOPOLOGIES {
        let t = example_topology(name);
        for k in [4u32, 6, 10] {
            let mut problem = PlacementProblem::declared(&t, &nodes);
            problem.workers = Some(k);
            let even = StreamPlacerKind::Even.build().place(&problem).unwrap();
            let even_nodes = evaluate(&problem, &even).nodes_used;
            let placer = OnePhase::default();
            let mut current = placer.place(&problem).unwrap();
            for _ in 0..10 {
                let mut again = problem.clone();
                again.previous = Some(&current);
                let next = placer.place(&again).unwrap();
                if next == current {
                    break;
                }
                current = next;
            }
            let m = evaluate(&problem, &current);
            assert_eq!(m.overloaded_nodes, 0, "{name}, K={k}: {m:?}");
            assert!(
                m.nodes_used <= even_nodes,
                "{name}, K={k}: self-tuning uses {} nodes, even {even_nodes}",
                m.nodes_used
            );
        }
    }
}

/// A spout with 2 executors and a bolt with 2, 20 % CPU each at rate 100 (×factor), on three
/// 1-core nodes (limit 90 each).
fn small(factor: f64) -> (Topology, Vec<StreamNode>) {
    let comp = |name: &str, kind| Component {
        name: name.into(),
        kind,
        parallelism: 2,
        cpu: 20.0,
        memory_bytes: 0,
    };
    let t = Topology {
        name: "t".into(),
        requires: Vec::new(),
        components: vec![
            comp("s", ComponentKind::Spout),
            comp("b", ComponentKind::Bolt),
        ],
        streams: vec![Stream {
            from: 0,
            to: 1,
            grouping: Grouping::Shuffle,
            rate: 100.0 * factor,
        }],
    };
    (t, vec![node("a", 1, 1), node("b", 1, 1), node("c", 1, 1)])
}

/// Runs the controller once a second for 60 s with rates ×1, ×2 from 25 s, ×1 from 45 s, and
/// returns the applied reschedules (time in s, cause).
fn scripted(gain_threshold: f64) -> Vec<(u64, Cause)> {
    let (declared, nodes) = small(1.0);
    let placer = OnePhase::default();
    let mut current = placer
        .place(&PlacementProblem::declared(&declared, &nodes))
        .unwrap();
    let mut controller = RescheduleController::new(
        RescheduleSettings {
            interval: 10 * NANOS_PER_SEC,
            gain_threshold,
        },
        0,
    );
    let mut applied = Vec::new();
    for s in 1..=60u64 {
        let factor = if (25..45).contains(&s) { 2.0 } else { 1.0 };
        // As the monitor measures it: a pair list.
        let traffic = declared.traffic_scaled(|_| factor).pairs(&declared);
        let problem = PlacementProblem::measured(&declared, &nodes, traffic);
        match controller
            .tick(s * NANOS_PER_SEC, &placer, &problem, &current)
            .unwrap()
        {
            Decision::Wait => assert!(s % 10 != 0, "computes every 10 s"),
            Decision::Keep { .. } => assert_eq!(s % 10, 0),
            Decision::Apply {
                cause, placement, ..
            } => {
                assert_eq!(s % 10, 0);
                applied.push((s, cause));
                current = placement;
            }
        }
    }
    applied
}

#[test]
fn a_scripted_rate_change_triggers_exactly_the_reschedules_the_thresholds_allow() {
    // 0–25 s: the four executors (80 %) fit on one node: nothing to gain at 10 s and 20 s.
    // 25 s: rates ×2 → 160 % on one 100 % node: overloaded; applied at the next computation
    // (30 s) whatever the traffic threshold: two nodes of 80 %. 40 s: still ×2, halving to one
    // node fails, the spread placement is kept.
    // 45 s: back to ×1 → at 50 s halving the nodes removes all inter-node traffic (gain 100 %):
    // applied only when the threshold is below 100 %.
    assert_eq!(
        scripted(0.2),
        vec![(30, Cause::Overload), (50, Cause::Traffic)]
    );
    assert_eq!(scripted(1.0), vec![(30, Cause::Overload)]);
}

/// a→b carries 1,000 tuples/s, a→c and b→d 100 each; a and b need 30 %, c and d 70 %, on two
/// 1-core nodes packed to capacity.
fn tight_four() -> (Topology, Vec<StreamNode>) {
    let comp = |name: &str, kind, cpu| Component {
        name: name.into(),
        kind,
        parallelism: 1,
        cpu,
        memory_bytes: 0,
    };
    let stream = |from, to, rate| Stream {
        from,
        to,
        grouping: Grouping::Shuffle,
        rate,
    };
    let t = Topology {
        name: "t".into(),
        requires: Vec::new(),
        components: vec![
            comp("a", ComponentKind::Spout, 30.0),
            comp("b", ComponentKind::Bolt, 30.0),
            comp("c", ComponentKind::Bolt, 70.0),
            comp("d", ComponentKind::Bolt, 70.0),
        ],
        streams: vec![
            stream(0, 1, 1000.0),
            stream(0, 2, 100.0),
            stream(1, 3, 100.0),
        ],
    };
    (t, vec![node("a", 1, 1), node("b", 1, 1)])
}

#[test]
fn best_schedule_may_move_a_placed_executor_when_a_pair_needs_room() {
    // Spec 04, Figure 4 ("try to assign e1, e2 to any one or two nodes of nodeList"), patent
    // algorithm alone. (a, b) go together on node 0 (equal room: lower index). (a, c): nodeList
    // = [0, 1]; c does not fit beside a and b, the cheapest plan keeps a and puts c on node 1
    // (100 t/s). (b, d): d fits nowhere as things are; the only plan within the limits moves b
    // to node 1 and puts d on node 0 — no overload, 1,200 t/s between nodes.
    let (t, nodes) = tight_four();
    let problem = PlacementProblem::declared(&t, &nodes);
    let exact = OnePhase::exact(1.0).place(&problem).unwrap();
    assert_eq!(exact.node, vec![0, 1, 1, 0]);
    let m = evaluate(&problem, &exact);
    assert_eq!(m.overloaded_nodes, 0);
    assert_eq!(m.inter_node_traffic, 1200.0);
    // The refinement swaps a and b (saving 200): a, c on node 1, b, d on node 0 — 1,000 t/s,
    // the optimum (a and b cannot share a node with c and d both elsewhere).
    let refined = OnePhase {
        max_utilisation: 1.0,
        refine: Refine::LocalSearch,
    }
    .place(&problem)
    .unwrap();
    assert_eq!(refined.node, vec![1, 0, 1, 0]);
    let m = evaluate(&problem, &refined);
    assert_eq!(m.overloaded_nodes, 0, "{refined:?}");
    assert_eq!(m.inter_node_traffic, 1000.0);
}

#[test]
fn refinement_never_adds_traffic_and_keeps_every_node_within_its_limit() {
    let nodes = paper_cluster();
    for name in TOPOLOGIES {
        let t = example_topology(name);
        let problem = PlacementProblem::declared(&t, &nodes);
        for limit in [0.6, 0.7, 0.8, 0.9, 1.0] {
            let exact = evaluate(&problem, &OnePhase::exact(limit).place(&problem).unwrap());
            let refined_placer = OnePhase {
                max_utilisation: limit,
                refine: Refine::LocalSearch,
            };
            let p = refined_placer.place(&problem).unwrap();
            let refined = evaluate(&problem, &p);
            assert!(
                refined.inter_node_traffic <= exact.inter_node_traffic,
                "{name} at {limit}: {refined:?} vs {exact:?}"
            );
            assert!(
                refined.max_node_load <= limit * 100.0 + 1e-6,
                "{name} at {limit}: {refined:?}"
            );
            assert!(one_process_per_node(&p));
        }
    }
}

// ---- properties on random topologies -------------------------------------------------------

#[derive(Clone, Debug)]
struct Shape {
    comps: Vec<(u32, f64)>,
    edges: Vec<(usize, usize, u8, f64)>,
    nodes: Vec<(u32, u32)>,
}

fn shape() -> impl Strategy<Value = Shape> {
    (
        prop::collection::vec((1u32..=6, 1.0f64..60.0), 2..7),
        prop::collection::vec((0usize..100, 0usize..100, 0u8..4, 1.0f64..5000.0), 1..10),
        prop::collection::vec((1u32..=8, 1u32..=4), 2..8),
    )
        .prop_map(|(comps, edges, nodes)| Shape {
            comps,
            edges,
            nodes,
        })
}

/// A random DAG: component 0 is a spout; every stream goes from a lower to a higher index; every
/// other component gets an input from a lower one so nothing floats.
fn build(s: &Shape) -> (Topology, Vec<StreamNode>) {
    let c = s.comps.len();
    let components = s
        .comps
        .iter()
        .enumerate()
        .map(|(i, &(p, cpu))| Component {
            name: format!("c{i}"),
            kind: if i == 0 {
                ComponentKind::Spout
            } else {
                ComponentKind::Bolt
            },
            parallelism: p,
            cpu,
            memory_bytes: 0,
        })
        .collect();
    let grouping = |g: u8| match g {
        0 => Grouping::Shuffle,
        1 => Grouping::Fields,
        2 => Grouping::All,
        _ => Grouping::Global,
    };
    let mut streams: Vec<Stream> = (1..c)
        .map(|to| Stream {
            from: s.edges[to % s.edges.len()].0 % to,
            to,
            grouping: grouping(s.edges[to % s.edges.len()].2),
            rate: s.edges[to % s.edges.len()].3,
        })
        .collect();
    for &(a, b, g, rate) in &s.edges {
        let (a, b) = (a % c, b % c);
        if a < b {
            streams.push(Stream {
                from: a,
                to: b,
                grouping: grouping(g),
                rate,
            });
        }
    }
    let nodes = s
        .nodes
        .iter()
        .enumerate()
        .map(|(i, &(cores, slots))| node(&format!("n{i}"), cores, slots))
        .collect();
    (
        Topology {
            name: "random".into(),
            requires: Vec::new(),
            components,
            streams,
        },
        nodes,
    )
}

const MIB: u64 = 1 << 20;

#[test]
fn one_phase_keeps_two_talking_executors_apart_when_one_node_lacks_the_memory_for_both() {
    // Two chatty executors of little CPU, 600 MiB each, on two 4-core nodes of 1 GiB: together
    // they would send nothing between nodes, but no node holds 1.2 GiB.
    let t = parse_topology(
        "t.toml",
        r#"name = "pair"
[[component]]
name = "s"
kind = "spout"
parallelism = 1
cpu = 10
memory = "600MiB"
[[component]]
name = "b"
kind = "bolt"
parallelism = 1
cpu = 10
memory = "600MiB"
[[stream]]
from = "s"
to = "b"
rate = 5000
"#,
    )
    .expect("parses");
    let mut nodes = vec![node("n0", 4, 4), node("n1", 4, 4)];
    for n in &mut nodes {
        n.memory_bytes = 1024 * MIB;
    }
    let problem = PlacementProblem::declared(&t, &nodes);
    for placer in [OnePhase::default(), OnePhase::exact(1.0)] {
        let p = placer.place(&problem).expect("places");
        let m = evaluate(&problem, &p);
        assert_ne!(p.node[0], p.node[1], "{placer:?}: {p:?}");
        assert_eq!(m.memory_overcommitted_nodes, 0);
        assert_eq!(m.inter_node_traffic, 5000.0);
    }
    // With the memory for both, they share a node.
    for n in &mut nodes {
        n.memory_bytes = 2048 * MIB;
    }
    let problem = PlacementProblem::declared(&t, &nodes);
    let p = OnePhase::default().place(&problem).expect("places");
    assert_eq!(p.node[0], p.node[1]);
    // Storm's even scheduler ignores memory, as Storm does; the metrics say where it overcommits.
    let mut small = nodes.clone();
    small.truncate(1);
    small[0].memory_bytes = 1024 * MIB;
    let problem = PlacementProblem::declared(&t, &small);
    let even = StreamPlacerKind::Even
        .build()
        .place(&problem)
        .expect("places");
    assert_eq!(evaluate(&problem, &even).memory_overcommitted_nodes, 1);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, rng_seed: RngSeed::Fixed(4), max_global_rejects: 1_000_000, ..ProptestConfig::default() })]

    #[test]
    /// Declared memory is a hard limit: whenever first-fit-decreasing packs the executors
    /// within every node's CPU and memory, one-phase's placement (and each self-tuned one after
    /// it) neither overloads a node nor gives it more memory than it has.
    fn one_phase_never_overcommits_memory_when_a_packing_fits(
        s in shape(),
        per_cpu in 1u64..40,
        node_mib in prop::collection::vec(64u64..4096, 1..9),
        refined in any::<bool>(),
    ) {
        let (mut t, mut nodes) = build(&s);
        for c in &mut t.components {
            // Memory loosely tied to CPU so both dimensions bind in turn.
            c.memory_bytes = (c.cpu as u64 + 1) * per_cpu * MIB;
        }
        for (i, n) in nodes.iter_mut().enumerate() {
            n.memory_bytes = node_mib[i % node_mib.len()] * MIB;
        }
        let problem = PlacementProblem::declared(&t, &nodes);
        let placer = OnePhase {
            refine: if refined { Refine::LocalSearch } else { Refine::None },
            ..OnePhase::default()
        };
        let feasible = first_fit_decreasing(&nodes, &problem.loads, &t.memory()).is_some();
        prop_assume!(feasible);
        let mut p = placer.place(&problem).unwrap();
        for round in 0..3 {
            let m = evaluate(&problem, &p);
            prop_assert_eq!(m.memory_overcommitted_nodes, 0, "round {}: {:?}", round, m);
            prop_assert_eq!(m.overloaded_nodes, 0, "round {}: {:?}", round, m);
            let mut again = problem.clone();
            again.previous = Some(&p);
            p = placer.place(&again).unwrap();
        }
    }

    #[test]
    fn one_phase_keeps_one_process_per_node_and_avoids_avoidable_overload(
        s in shape(),
        packed in any::<bool>(),
        refined in any::<bool>(),
    ) {
        let (t, nodes) = build(&s);
        let problem = PlacementProblem::declared(&t, &nodes);
        // With the default headroom (0.9) and packed to capacity (1.0), where the greedy pass
        // overloads most often.
        let placer = OnePhase {
            max_utilisation: if packed { 1.0 } else { 0.9 },
            refine: if refined { Refine::LocalSearch } else { Refine::None },
        };
        let feasible = first_fit_decreasing(&nodes, &problem.loads, &problem.topology.memory()).is_some();
        let mut p = placer.place(&problem).unwrap();
        // Self-tuning from the previous placement, a few rounds, keeps the same guarantees.
        for round in 0..4 {
            prop_assert!(one_process_per_node(&p), "round {}", round);
            let m = evaluate(&problem, &p);
            prop_assert_eq!(m.inter_process_traffic, 0.0);
            if feasible {
                prop_assert_eq!(m.overloaded_nodes, 0, "round {}: {:?}", round, m);
            }
            let mut again = problem.clone();
            again.previous = Some(&p);
            let next = placer.place(&again).unwrap();
            // Later allocations stay on the previous nodes unless those are above the tuner's
            // limit (then tuning restarts from the first-allocation rule).
            let loads = p.node_loads(nodes.len(), &problem.loads);
            let above_limit = nodes
                .iter()
                .enumerate()
                .any(|(n, x)| loads[n] > placer.max_utilisation * x.available() + 1e-9);
            if !above_limit {
                prop_assert!(evaluate(&problem, &next).nodes_used <= m.nodes_used);
            }
            p = next;
        }
    }

    #[test]
    /// The issue's property, on random topologies and clusters: one-phase (with its
    /// refinement) never sends more tuples/s between nodes than even with one worker per node,
    /// whenever even's placement keeps every node within one-phase's limit (90 %) — otherwise
    /// even "wins" by loading nodes one-phase may not (shrunk: five 21 % spouts and two 56 %
    /// bolts on three 1-core nodes, even at 97 %). 40,000 cases for each of seeds 4, 11, 23 passed
    /// (`PROPTEST_CASES=40000`); the patent's greedy alone fails it (`Refine::None`, see
    /// `one_phase::Refine`).
    fn one_phase_sends_no_more_traffic_between_nodes_than_even_on_any_random_topology(
        s in shape(),
    ) {
        let (t, nodes) = build(&s);
        let problem = PlacementProblem::declared(&t, &nodes);
        let even = evaluate(&problem, &StreamPlacerKind::Even.build().place(&problem).unwrap());
        // The class: even's own placement keeps every node within one-phase's limit (90 %),
        // so one-phase could have chosen it.
        prop_assume!(even.max_node_load <= 90.0);
        let one = evaluate(&problem, &OnePhase::default().place(&problem).unwrap());
        prop_assert!(one.inter_node_traffic <= even.inter_node_traffic, "{:?} vs {:?}", one, even);
    }

    #[test]
    fn one_phase_sends_less_traffic_between_nodes_than_even(s in shape()) {
        let (t, nodes) = build(&s);
        let problem = PlacementProblem::declared(&t, &nodes);
        // The comparison is meaningful where one-phase need not spread to avoid overload: the
        // topology fits within the one-phase headroom (90 %) of the largest node.
        let largest = nodes.iter().map(|n| n.capacity).fold(0.0, f64::max);
        prop_assume!(t.total_load() <= 0.9 * largest);
        let one = evaluate(&problem, &OnePhase::default().place(&problem).unwrap());
        let even = evaluate(&problem, &StreamPlacerKind::Even.build().place(&problem).unwrap());
        prop_assert!(one.inter_node_traffic <= even.inter_node_traffic, "{:?} vs {:?}", one, even);
        if even.inter_node_traffic > 0.0 {
            prop_assert!(one.inter_node_traffic < even.inter_node_traffic, "{:?} vs {:?}", one, even);
        }
    }
}

#[test]
fn on_tight_uniform_traffic_the_refinement_is_never_worse_than_round_robin() {
    // Shrunk by proptest: c0 (3 × 37 %) → c1 (5 × 48 %) → c2 (1 × 15 %) and c1 → c3 (5 × 28 %),
    // `all` groupings of 1 tuple/s (c1 → c2 twice): near-uniform all-to-all traffic, packed on
    // two 3-core nodes to 87–88 % of capacity (the limit is 90 %). The patent's greedy and a
    // local search from it end at 31 tuples/s: single moves are blocked by the limit and
    // one-for-one swaps cannot rebalance. Even's round-robin happens to co-locate more pairs
    // (26). The refinement's second start (round-robin over the configuration's nodes) reaches
    // at most that.
    let s = Shape {
        comps: vec![
            (3, 37.198408196138615),
            (5, 48.18282667414404),
            (1, 15.242162072544062),
            (5, 27.730922269519716),
        ],
        edges: vec![(13, 6, 2, 1.0)],
        nodes: vec![(3, 1), (3, 1)],
    };
    let (t, nodes) = build(&s);
    let problem = PlacementProblem::declared(&t, &nodes);
    let even = evaluate(
        &problem,
        &StreamPlacerKind::Even.build().place(&problem).unwrap(),
    );
    let exact = evaluate(&problem, &OnePhase::exact(0.9).place(&problem).unwrap());
    let refined = evaluate(&problem, &OnePhase::default().place(&problem).unwrap());
    eprintln!("even {even:?}\nexact {exact:?}\nrefined {refined:?}");
    assert_eq!(even.inter_node_traffic, 26.0);
    assert!(even.max_node_load <= 90.0);
    assert!(exact.inter_node_traffic > even.inter_node_traffic);
    assert!(refined.inter_node_traffic <= even.inter_node_traffic);
    assert_eq!(refined.overloaded_nodes, 0);
    assert!(refined.max_node_load <= 90.0 + 1e-9);
}

/// Counts, over `cases` random topologies that must spread over nodes (too big for 90 % of the
/// largest node, at most half the cluster), how often `placer` sends no more inter-node traffic
/// than even; returns (not worse, strictly better where even > 0, cases, one-phase total, even
/// total, the first counterexample).
fn spread_comparison(
    seed: u64,
    cases: usize,
    placer: &OnePhase,
) -> (usize, usize, usize, f64, f64, Option<Shape>) {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::{Config, TestRunner};
    let mut runner = TestRunner::new(Config {
        rng_seed: RngSeed::Fixed(seed),
        ..Config::default()
    });
    let (mut n, mut not_worse, mut better, mut one_total, mut even_total) = (0, 0, 0, 0.0, 0.0);
    let mut counterexample = None;
    while n < cases {
        let s = shape().new_tree(&mut runner).unwrap().current();
        let (t, nodes) = build(&s);
        let total: f64 = nodes.iter().map(|n| n.capacity).sum();
        let largest = nodes.iter().map(|n| n.capacity).fold(0.0, f64::max);
        if t.total_load() > 0.5 * total || t.total_load() <= 0.9 * largest {
            continue;
        }
        n += 1;
        let problem = PlacementProblem::declared(&t, &nodes);
        let one = evaluate(&problem, &placer.place(&problem).unwrap());
        let even = evaluate(
            &problem,
            &StreamPlacerKind::Even.build().place(&problem).unwrap(),
        );
        if one.inter_node_traffic <= even.inter_node_traffic {
            not_worse += 1;
            if one.inter_node_traffic < even.inter_node_traffic || even.inter_node_traffic == 0.0 {
                better += 1;
            }
        } else if counterexample.is_none() {
            counterexample = Some(s);
        }
        one_total += one.inter_node_traffic;
        even_total += even.inter_node_traffic;
    }
    (not_worse, better, n, one_total, even_total, counterexample)
}

/// Topologies too big for one node, on clusters with room: one-phase must spread them. The
/// patent's greedy alone (`Refine::None`) is not always better than even (uniform all-to-all
/// traffic, where the descending order carries no information); with the refinement it is, on
/// every one of these random topologies and clusters (`STREAM_SPREAD_SEEDS=a,b,… explores more
/// seeds).
#[test]
fn one_phase_sends_less_traffic_than_even_on_random_topologies_spread_over_nodes() {
    let seeds: Vec<u64> = std::env::var("STREAM_SPREAD_SEEDS")
        .ok()
        .map(|v| v.split(',').filter_map(|x| x.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![8, 4]);
    let cases = 500;
    for seed in seeds {
        let (ok, better, n, one, even, example) =
            spread_comparison(seed, cases, &OnePhase::default());
        let (ok_x, _, _, one_x, _, _) = spread_comparison(seed, cases, &OnePhase::exact(0.9));
        eprintln!(
            "seed {seed}: refined <= even in {ok}/{n} (strictly less {better}), total {:.1} % of even's; \
             patent alone <= even in {ok_x}/{n}, total {:.1} %",
            one / even * 100.0,
            one_x / even * 100.0
        );
        assert_eq!(ok, n, "seed {seed}: counterexample {example:?}");
        assert!(
            one <= one_x,
            "seed {seed}: refinement added traffic in total"
        );
    }
}

#[test]
fn cluster_files_give_slots_with_storms_default_of_four() {
    let text =
        "[[node]]\nname = \"a\"\ncores = 4\nslots = 2\n\n[[node]]\nname = \"b\"\ncores = 8\n";
    let (cluster, slots) = parse_cluster_with_slots("c.toml", text).unwrap();
    assert_eq!(slots, vec![2, 4]);
    let nodes = stream_nodes(&cluster, &slots, &[]);
    assert_eq!(
        nodes[1].capacity, 800.0,
        "a node's CPU capacity is cores × 100"
    );
    let e = parse_cluster_with_slots("c.toml", &text.replace("slots = 2", "slots = 0"))
        .unwrap_err()
        .to_string();
    assert_eq!(e, "c.toml:4:9: node[0].slots: must be at least 1");
}

/// A topology that `requires` a node attribute is placed by every placer on the nodes that have
/// it: the others have no worker slot for it.
#[test]
fn a_topology_that_requires_an_attribute_runs_only_on_the_nodes_that_have_it() {
    let cluster = "[[node]]\nname = \"a\"\ncores = 8\n\n[[node]]\nname = \"b\"\ncores = 4\nattributes = [\"ssd\"]\n\n[[node]]\nname = \"c\"\ncores = 4\nattributes = [\"ssd\"]\n";
    let (cluster, slots) = parse_cluster_with_slots("c.toml", cluster).unwrap();
    let text = std::fs::read_to_string(repo().join("examples/topology-wordcount.toml")).unwrap();
    let topology = parse_topology("t.toml", &format!("requires = [\"ssd\"]\n{text}")).unwrap();
    assert_eq!(topology.requires, ["ssd"]);
    let nodes = stream_nodes(&cluster, &slots, &topology.requires);
    assert_eq!(nodes.iter().map(|n| n.slots).collect::<Vec<_>>(), [0, 4, 4]);
    for kind in StreamPlacerKind::ALL {
        let problem = PlacementProblem::declared(&topology, &nodes);
        let p = kind.build().place(&problem).unwrap();
        assert!(
            p.nodes_used().iter().all(|&n| n != 0),
            "{kind:?} put a worker on `a`, which lacks `ssd`"
        );
    }
    let e = parse_topology("t.toml", &format!("requires = [\"no space\"]\n{text}"))
        .unwrap_err()
        .to_string();
    assert_eq!(
        e,
        "t.toml:1:13: requires[0]: attribute `no space` has whitespace or a control character"
    );
}

/// A random topology for comparing the two forms of traffic: one or two spouts, then bolts;
/// streams from any component into any bolt — self-loops, streams back between bolts, several
/// streams between the same two components (their pairs merged), every grouping, rates that
/// are not round.
#[derive(Clone, Debug)]
struct Mixed {
    comps: Vec<(u32, f64)>,
    spouts: usize,
    streams: Vec<(usize, usize, u8, f64)>,
    nodes: Vec<(u32, u32)>,
    factors: Vec<f64>,
}

fn mixed() -> impl Strategy<Value = Mixed> {
    (
        prop::collection::vec((1u32..=7, 1.0f64..45.0), 2..7),
        1usize..=2,
        prop::collection::vec((0usize..100, 0usize..100, 0u8..4, 0.1f64..3000.0), 1..12),
        prop::collection::vec((1u32..=8, 1u32..=4), 2..7),
        prop::collection::vec(0.25f64..2.5, 12),
    )
        .prop_map(|(comps, spouts, streams, nodes, factors)| Mixed {
            comps,
            spouts,
            streams,
            nodes,
            factors,
        })
}

fn build_mixed(m: &Mixed) -> (Topology, Vec<StreamNode>) {
    let c = m.comps.len();
    let spouts = m.spouts.min(c - 1);
    let grouping = |g: u8| match g {
        0 => Grouping::Shuffle,
        1 => Grouping::Fields,
        2 => Grouping::All,
        _ => Grouping::Global,
    };
    let topology = Topology {
        name: "mixed".into(),
        requires: Vec::new(),
        components: m
            .comps
            .iter()
            .enumerate()
            .map(|(i, &(p, cpu))| Component {
                name: format!("c{i}"),
                kind: if i < spouts {
                    ComponentKind::Spout
                } else {
                    ComponentKind::Bolt
                },
                parallelism: p,
                cpu,
                memory_bytes: 0,
            })
            .collect(),
        streams: m
            .streams
            .iter()
            .map(|&(a, b, g, rate)| Stream {
                from: a % c,
                // Into a bolt: a spout takes no input.
                to: spouts + b % (c - spouts),
                grouping: grouping(g),
                rate,
            })
            .collect(),
    };
    let nodes = m
        .nodes
        .iter()
        .enumerate()
        .map(|(i, &(cores, slots))| node(&format!("n{i}"), cores, slots))
        .collect();
    (topology, nodes)
}

/// Every placer on `with_streams` and `with_pairs` (the same problem, traffic per stream and as
/// the pair list), first and self-tuned allocation: the same placements; the same metrics, the
/// traffic sums up to rounding.
fn same_decisions(
    with_streams: &PlacementProblem<'_>,
    with_pairs: &PlacementProblem<'_>,
) -> Result<(), TestCaseError> {
    prop_assert_eq!(&with_streams.loads, &with_pairs.loads);
    prop_assert_eq!(with_streams.adjacency(), with_pairs.adjacency());
    let placers: Vec<Box<dyn StreamPlacer>> = vec![
        StreamPlacerKind::Even.build(),
        StreamPlacerKind::ResourceAware.build(),
        StreamPlacerKind::TwoPhaseTraffic.build(),
        Box::new(OnePhase::default()),
        Box::new(OnePhase::exact(1.0)),
    ];
    for placer in &placers {
        let a = placer.place(with_streams).unwrap();
        let b = placer.place(with_pairs).unwrap();
        prop_assert_eq!(&a, &b, "{}", placer.name());
        let (ma, mb) = (evaluate(with_streams, &a), evaluate(with_pairs, &b));
        let close = |x: f64, y: f64| (x - y).abs() <= 1e-9 * x.abs().max(y.abs()).max(1.0);
        prop_assert!(
            close(ma.inter_node_traffic, mb.inter_node_traffic),
            "{:?} vs {:?}",
            ma,
            mb
        );
        prop_assert!(
            close(ma.inter_process_traffic, mb.inter_process_traffic),
            "{:?} vs {:?}",
            ma,
            mb
        );
        prop_assert_eq!(
            (
                ma.nodes_used,
                ma.processes_used,
                ma.overloaded_nodes,
                ma.memory_overcommitted_nodes
            ),
            (
                mb.nodes_used,
                mb.processes_used,
                mb.overloaded_nodes,
                mb.memory_overcommitted_nodes
            )
        );
        prop_assert_eq!(ma.max_node_load, mb.max_node_load);
        // Self-tuning from the placement (one-phase's later allocations).
        let (mut again_s, mut again_p) = (with_streams.clone(), with_pairs.clone());
        again_s.previous = Some(&a);
        again_p.previous = Some(&b);
        prop_assert_eq!(
            placer.place(&again_s).unwrap(),
            placer.place(&again_p).unwrap()
        );
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, rng_seed: RngSeed::Fixed(8), ..ProptestConfig::default() })]

    #[test]
    /// The per-stream traffic (what `declared` now carries) and the pair list it stands for (what
    /// it carried before: one entry per executor pair) give every placer the same decisions:
    /// the same adjacency and executor rates bit for bit, so the same placements; evaluate's
    /// traffic equal up to rounding. At the declared rates and under scaled ones (the monitor's
    /// shape: loads follow the rates).
    fn per_stream_and_per_pair_traffic_give_the_same_placements(m in mixed()) {
        let (t, nodes) = build_mixed(&m);
        let declared = PlacementProblem::declared(&t, &nodes);
        prop_assert_eq!(
            declared.traffic.pair_count(&t),
            declared.traffic.pairs(&t).len() as u64
        );
        prop_assert_eq!(
            declared.traffic.executor_rates(&t),
            t.executor_rates(&declared.traffic.pairs(&t))
        );
        let mut listed = declared.clone();
        listed.traffic = Traffic::Pairs(declared.traffic.pairs(&t));
        same_decisions(&declared, &listed)?;
        let scaled = t.traffic_scaled(|s| m.factors[s % m.factors.len()]);
        let per_stream = PlacementProblem::with_traffic(&t, &nodes, scaled.clone());
        let measured = PlacementProblem::measured(&t, &nodes, scaled.pairs(&t));
        same_decisions(&per_stream, &measured)?;
    }
}

/// The repro of the scale review: a diamond of 100,000 executors joined by shuffles (2.3 × 10⁹
/// executor pairs) placed by `even`. The problem carries one traffic entry per stream and no
/// placer or metric lists a pair (the pair list took ~200 bytes a pair: 12,800 executors cost
/// 2.1 GB, 32,000 did not finish); the traffic-aware placers refuse it, naming the streams.
#[test]
fn even_places_100000_executors_without_listing_executor_pairs() {
    let text = std::fs::read_to_string(repo().join("examples/topology-diamond.toml")).unwrap();
    // ×3,125: 18,750 + 31,250 + 31,250 + 18,750 executors.
    let mut text = text;
    for (from, to) in [
        ("parallelism = 6\n", "parallelism = 18750\n"),
        ("parallelism = 10\n", "parallelism = 31250\n"),
    ] {
        text = text.replace(from, to);
    }
    let t = parse_topology("diamond.toml", &text).unwrap();
    assert_eq!(t.executor_count(), 100_000);
    let nodes: Vec<StreamNode> = (0..100).map(|i| node(&format!("n{i}"), 16, 4)).collect();
    let problem = PlacementProblem::declared(&t, &nodes);
    // The traffic is the four streams, whatever the parallelism.
    match &problem.traffic {
        Traffic::Streams(s) => assert_eq!(s.len(), 4),
        Traffic::Pairs(p) => panic!("declared traffic listed {} pairs", p.len()),
    }
    let pairs = problem.traffic.pair_count(&t);
    assert_eq!(pairs, 2 * 18_750 * 31_250 * 2);
    let started = std::time::Instant::now();
    for kind in [StreamPlacerKind::Even, StreamPlacerKind::ResourceAware] {
        let placement = kind.build().place(&problem).unwrap();
        let m = evaluate(&problem, &placement);
        assert_eq!(m.inter_process_traffic, 0.0);
        if kind == StreamPlacerKind::Even {
            // Round-robin over 100 workers on 100 nodes: a receiver is on its sender's node
            // for about 1 in 100 pairs.
            assert_eq!(m.nodes_used, 100);
            let total = 2.0 * 18_750.0 * 3000.0 + 2.0 * 31_250.0 * 2000.0;
            let share = m.inter_node_traffic / total;
            assert!((0.989..=0.991).contains(&share), "{share}");
        }
    }
    assert!(
        started.elapsed() < std::time::Duration::from_secs(60),
        "took {:?}",
        started.elapsed()
    );
    for kind in StreamPlacerKind::ALL {
        // What a submission checks before any node is there.
        assert_eq!(kind.check_pairs(&t).is_err(), kind.walks_pairs(), "{kind}");
    }
    for kind in [
        StreamPlacerKind::OnePhase,
        StreamPlacerKind::TwoPhaseTraffic,
    ] {
        let e = kind.build().place(&problem).unwrap_err();
        assert_eq!(kind.check_pairs(&t).unwrap_err(), e);
        assert!(
            matches!(e, PlacementError::TooManyPairs { pairs: p, .. } if p == pairs),
            "{e}"
        );
        let text = e.to_string();
        assert!(
            text.contains(&format!("{kind} looks at every executor pair"))
                && text.contains("2,343,750,000")
                && text.contains("at most 4,000,000")
                && text.contains(
                    "`left` -> `join` (fields, 31250 x 18750 executors: 585,937,500 pairs)"
                )
                && text.contains("`source` -> `left` (shuffle"),
            "{text}"
        );
    }
}
