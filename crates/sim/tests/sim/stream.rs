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

/// The stream-paper scenario at `limit` and `surge`, with the controller's traffic-driven
/// reschedules disabled (an unreachable gain threshold), 60 s, so only the placement and the
/// surge decide latency.
fn without_traffic_reschedules(limit: f64, surge: f64) -> stream_paper::StreamPaperReport {
    let mut options = StreamPaperOptions {
        sim: StreamSimConfig {
            duration: 60 * NANOS_PER_SEC,
            latency_samples: 5,
            ..StreamSimConfig::default()
        },
        timing_repeats: 1,
        surge,
        one_phase_max_utilisation: limit,
        ..StreamPaperOptions::default()
    };
    options.reschedule.gain_threshold = 1e9;
    stream_paper::run(&options, &mut |_, _, _| {}).unwrap()
}

#[test]
fn packing_to_ninety_per_cent_costs_no_latency_while_rates_hold() {
    // The placement alone: one-phase on 2–3 nodes at up to 90 % keeps the tail latency of even
    // on 10 nodes (executors are threads; a busy multi-core node does not queue them).
    let report = without_traffic_reschedules(0.9, 1.0);
    for chunk in report.rows.chunks(4) {
        let (even, one) = (&chunk[0].sim, &chunk[3].sim);
        assert!(one.reschedules.is_empty(), "{}", one.topology);
        assert_eq!(one.throughput, even.throughput, "{}", one.topology);
        assert!(
            one.p99_latency_ms <= 1.5 * even.p99_latency_ms,
            "{}: {} vs {}",
            one.topology,
            one.p99_latency_ms,
            even.p99_latency_ms
        );
    }
}

#[test]
fn a_limit_below_one_over_the_surge_absorbs_it_and_a_higher_one_queues() {
    // ×1.6 from 40 s: at 60 % (60 × 1.6 = 96 %) no node overloads and the tail stays at
    // even's; at 90 % the packed nodes overload until the controller's next computation and
    // the pending queue shows in the p99 (seconds).
    let low = without_traffic_reschedules(0.6, 1.6);
    let high = without_traffic_reschedules(0.9, 1.6);
    for (l, h) in low.rows.chunks(4).zip(high.rows.chunks(4)) {
        let (even, one) = (&l[0].sim, &l[3].sim);
        assert_eq!(one.overloaded_s, 0.0, "{}", one.topology);
        assert!(one.reschedules.is_empty(), "{}", one.topology);
        assert!(
            one.p99_latency_ms <= 1.5 * even.p99_latency_ms,
            "{}: {} vs {}",
            one.topology,
            one.p99_latency_ms,
            even.p99_latency_ms
        );
        let packed = &h[3].sim;
        assert!(packed.overloaded_s > 0.0, "{}", packed.topology);
        assert!(packed.p99_latency_ms > 1000.0, "{}", packed.topology);
        assert_eq!(packed.reschedules[0].cause, Cause::Overload);
    }
}

#[test]
fn a_reschedule_restarts_only_the_executors_it_moves() {
    // Declared rates, then ×0.6 from 30 s: the controller consolidates (traffic gain). Only the
    // moved executors restart: each reschedule reports the share it stalls, some keep part of
    // the topology running, and nothing times out.
    let mut options = StreamPaperOptions {
        sim: StreamSimConfig {
            duration: 60 * NANOS_PER_SEC,
            latency_samples: 5,
            ..StreamSimConfig::default()
        },
        timing_repeats: 1,
        surge_at: 0,
        surge: 1.0,
        calm_at: 30 * NANOS_PER_SEC,
        ..StreamPaperOptions::default()
    };
    options.calm = 0.6;
    let report = stream_paper::run(&options, &mut |_, _, _| {}).unwrap();
    let mut fractions = Vec::new();
    for chunk in report.rows.chunks(4) {
        let (even, one) = (&chunk[0].sim, &chunk[3].sim);
        for r in &one.reschedules {
            assert!(r.moved_fraction > 0.0 && r.moved_fraction <= 1.0, "{r:?}");
            fractions.push(r.moved_fraction);
        }
        assert_eq!(one.failed_tuples, 0.0, "{}", one.topology);
        assert!(one.throughput >= 0.95 * even.throughput, "{}", one.topology);
    }
    assert!(
        !fractions.is_empty(),
        "the calm should consolidate some topology"
    );
    assert!(fractions.iter().any(|&f| f < 1.0), "{fractions:?}");
}

#[test]
fn a_duration_not_a_whole_number_of_steps_ends_in_a_partial_step_and_never_beats_the_offer() {
    // Steps are 100 ms. A run of 1 ms, 50 ms, 150 ms or 250 ms used to simulate whole steps and
    // divide their tuples by the shorter duration: 1,200,000 tuples/s for 12,000 offered at 1 ms.
    let (cluster, slots) = stream_paper::cluster().unwrap();
    let t = &stream_paper::topologies().unwrap()[0];
    let even = StreamPlacerKind::Even.build();
    let ms = NANOS_PER_SEC / 1000;
    let mut whole = None;
    for duration in [ms, 50 * ms, 150 * ms, 250 * ms, 1000 * ms] {
        let config = StreamSimConfig {
            duration,
            ..StreamSimConfig::default()
        };
        let r = simulate_stream(t, &cluster, &slots, even.as_ref(), &config).unwrap();
        assert!(r.offered > 0.0, "{duration}: {r:?}");
        assert!(
            (r.throughput - r.offered).abs() < 1e-9 * r.offered,
            "{duration} ns: a topology keeping up processes what is offered: {r:?}"
        );
        let w = *whole.get_or_insert(r.inter_node_traffic);
        assert!(
            (r.inter_node_traffic - w).abs() < 1e-9 * w,
            "{duration} ns: a constant rate's time average does not depend on the duration"
        );
        assert_eq!(r.overloaded_s, 0.0);
    }
}
