//! The stream simulator (spec 04) as the stream-paper scenario uses it: determinism, queueing
//! under overload, rescheduling driven by the simulated traffic monitor, and the scenario's
//! headline comparison on a short run.

use hetsched_core::policy::stream::StreamPlacerKind;
use hetsched_core::policy::stream::reschedule::{Cause, RescheduleSettings};
use hetsched_core::time::NANOS_PER_SEC;
use hetsched_sim::scenario::stream_paper::{self, StreamPaperOptions};
use hetsched_sim::stream::{RateChange, StreamSimConfig, simulate_stream};

fn short() -> StreamSimConfig {
    StreamSimConfig {
        duration: 30 * NANOS_PER_SEC,
        ..StreamSimConfig::default()
    }
}

#[test]
fn the_same_seed_gives_the_same_run_byte_for_byte() {
    let (cluster, slots) = stream_paper::cluster().unwrap();
    let t = &stream_paper::topologies().unwrap()[0];
    let mut config = short();
    config.rate_changes = vec![RateChange {
        at: 10 * NANOS_PER_SEC,
        factor: 1.5,
    }];
    config.reschedule = Some(RescheduleSettings {
        interval: 5 * NANOS_PER_SEC,
        gain_threshold: 0.1,
    });
    let placer = StreamPlacerKind::OnePhase.build();
    let a = simulate_stream(t, &cluster, &slots, placer.as_ref(), &config).unwrap();
    let b = simulate_stream(t, &cluster, &slots, placer.as_ref(), &config).unwrap();
    assert_eq!(
        serde_json::to_string(&a).unwrap(),
        serde_json::to_string(&b).unwrap()
    );
    config.seed = 2;
    let c = simulate_stream(t, &cluster, &slots, placer.as_ref(), &config).unwrap();
    assert_eq!(
        a.throughput, c.throughput,
        "the seed only moves latency samples"
    );
}

#[test]
fn an_overloaded_node_queues_and_beyond_the_timeout_fails_and_replays() {
    // Every executor of word count in one worker on one 16-core node: 1,960 % of CPU on 1,600.
    let (cluster, slots) = stream_paper::cluster().unwrap();
    let t = &stream_paper::topologies().unwrap()[0];
    let mut config = short();
    config.workers = Some(1);
    config.timeout = 5 * NANOS_PER_SEC;
    let even = StreamPlacerKind::Even.build();
    let r = simulate_stream(t, &cluster, &slots, even.as_ref(), &config).unwrap();
    assert!(r.max_node_load > 100.0, "{r:?}");
    assert!(r.throughput < 0.9 * r.offered, "{r:?}");
    assert!(r.failed_tuples > 0.0, "{r:?}");
    assert!(r.p99_latency_ms > 4000.0, "waits reach the timeout: {r:?}");
    // Spread over ten workers the same topology keeps up.
    config.workers = None;
    let r = simulate_stream(t, &cluster, &slots, even.as_ref(), &config).unwrap();
    assert_eq!(r.failed_tuples, 0.0);
    assert!((r.throughput - r.offered).abs() < 1e-6 * r.offered, "{r:?}");
}

#[test]
fn a_rate_surge_is_seen_by_the_monitor_and_rescheduled_for_overload() {
    // One-phase packs word count on 90 % of three nodes; ×1.6 from 10 s overloads them. The
    // monitor's period [10 s, 15 s) sees only the surge; the controller (every 5 s) applies the
    // overload reschedule at once at 15 s. (A surge in the middle of a period is seen averaged
    // with the old rate, and can take two reschedules.)
    let (cluster, slots) = stream_paper::cluster().unwrap();
    let t = &stream_paper::topologies().unwrap()[0];
    let mut config = short();
    config.rate_changes = vec![RateChange {
        at: 10 * NANOS_PER_SEC,
        factor: 1.6,
    }];
    config.reschedule = Some(RescheduleSettings {
        interval: 5 * NANOS_PER_SEC,
        gain_threshold: 0.5,
    });
    let one = StreamPlacerKind::OnePhase.build();
    let r = simulate_stream(t, &cluster, &slots, one.as_ref(), &config).unwrap();
    assert!(!r.reschedules.is_empty(), "{r:?}");
    assert_eq!(r.reschedules[0].at_s, 15.0);
    assert_eq!(r.reschedules[0].cause, Cause::Overload);
    assert!(r.reschedules[0].nodes_used > 2, "{:?}", r.reschedules);
    assert_eq!(r.reschedules.len(), 1, "{:?}", r.reschedules);
    assert_eq!(r.inter_process_traffic, 0.0);
}

#[test]
fn stream_paper_one_phase_cuts_inter_node_traffic_on_every_topology() {
    let options = StreamPaperOptions {
        sim: StreamSimConfig {
            duration: 20 * NANOS_PER_SEC,
            latency_samples: 2,
            ..StreamSimConfig::default()
        },
        timing_repeats: 1,
        ..StreamPaperOptions::default()
    };
    let report = stream_paper::run(&options, &mut |_, _, _| {}).unwrap();
    assert_eq!(report.rows.len(), 20);
    for chunk in report.rows.chunks(4) {
        let even = &chunk[0];
        let one = &chunk[3];
        assert_eq!(
            (even.placer.as_str(), one.placer.as_str()),
            ("even", "one-phase")
        );
        assert!(
            one.inter_node_traffic < even.inter_node_traffic,
            "{}",
            one.topology
        );
        assert_eq!(one.processes_used, one.nodes_used, "{}", one.topology);
        assert!(one.nodes_used <= even.nodes_used, "{}", one.topology);
        assert_eq!(one.sim.inter_process_traffic, 0.0);
    }
}
