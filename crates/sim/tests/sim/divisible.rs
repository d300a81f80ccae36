//! Spec 03 on the star simulator: UMR's closed form, the export replayed through the reference
//! recursion, the memory rule (UMR infeasible exactly where it breaks, UMRLM never), and the
//! robustness of RUMR.

use hetsched_core::policy::divisible::{
    Algo, Plan, PlanOptions, StarPlatform, StarWorker, plan, reference_makespan, umr,
};
use hetsched_sim::divisible::{DivisibleError, ScheduleExport, StarConfig, simulate};
use rand::{Rng, SeedableRng};
use rand_pcg::Pcg64;

/// 2–20 workers whose links are faster than their computes (Σ S/B < 1), loads of 1e5–1e7
/// units: makespans of minutes to days, so nanosecond rounding stays far below 1e-9.
fn random_platform(rng: &mut Pcg64) -> StarPlatform {
    let n = rng.random_range(2..=20);
    StarPlatform {
        workers: (0..n)
            .map(|i| {
                let speed = rng.random_range(5.0..100.0);
                StarWorker {
                    name: format!("w{i}"),
                    speed,
                    compute_latency: rng.random_range(0.0..0.5),
                    bandwidth: speed * n as f64 * rng.random_range(1.2..6.0),
                    network_latency: rng.random_range(0.0..0.05),
                    memory: None,
                }
            })
            .collect(),
    }
}

fn run(p: &StarPlatform, plan: &Plan, load: f64) -> Result<f64, DivisibleError> {
    simulate(p, plan, load, &StarConfig::default()).map(|r| r.makespan_s())
}

#[test]
fn the_simulated_umr_makespan_is_the_closed_form_on_100_random_platforms() {
    let mut rng = Pcg64::seed_from_u64(2003);
    for case in 0..100 {
        let p = random_platform(&mut rng);
        let load = 10f64.powf(rng.random_range(5.0..7.0));
        let sol = umr::select(&p, load).expect("UMR plans");
        let plan = umr::plan(&p, load).expect("UMR plans");
        let simulated = run(&p, &plan, load).expect("no memory limits");
        let rel = (simulated - sol.makespan).abs() / sol.makespan;
        assert!(
            rel <= 1e-9,
            "case {case}: {} workers, W = {load:.0}, M* = {}: simulated {simulated} s, Ex(M*) = {} s",
            p.workers.len(),
            sol.rounds,
            sol.makespan
        );
    }
}

#[test]
fn the_exported_schedule_replayed_through_the_reference_recursion_gives_the_makespan() {
    let mut rng = Pcg64::seed_from_u64(7);
    for _ in 0..20 {
        let p = random_platform(&mut rng);
        let load = 10f64.powf(rng.random_range(5.0..7.0));
        let plan = umr::plan(&p, load).expect("UMR plans");
        let run = simulate(&p, &plan, load, &StarConfig::default()).expect("runs");
        let json = serde_json::to_string(&ScheduleExport::from(&run)).expect("serialises");
        let back: ScheduleExport = serde_json::from_str(&json).expect("parses");
        let replay = StarPlatform {
            workers: back.workers.clone(),
        };
        let sends: Vec<(usize, f64)> = back.sends.iter().map(|s| (s.worker, s.size)).collect();
        let reference = reference_makespan(&replay, &sends);
        assert!(
            (reference - back.makespan).abs() <= 1e-9 * reference,
            "reference {reference} vs exported {}",
            back.makespan
        );
    }
}

#[test]
fn every_plan_replays_when_the_recursion_also_waits_for_the_exported_send_start() {
    // UMRLM and RUMR may wait for a worker's buffer (the master's protocol); the recursion
    // `t = max(t, send_start) + nLat + c/B` then reproduces them too.
    let mut rng = Pcg64::seed_from_u64(8);
    for _ in 0..10 {
        let mut p = random_platform(&mut rng);
        let load = 1e6;
        for w in &mut p.workers {
            w.memory = Some(load * rng.random_range(0.002..0.02));
        }
        for algo in Algo::ALL {
            let options = PlanOptions {
                error: 0.2,
                ..PlanOptions::default()
            };
            let plan = plan(algo, &p, load, &options).expect("plans");
            let Ok(run) = simulate(&p, &plan, load, &StarConfig::default()) else {
                continue;
            };
            let e = ScheduleExport::from(&run);
            let mut t = 0.0_f64;
            let mut free = vec![0.0_f64; p.workers.len()];
            for s in &e.sends {
                t = t.max(s.send_start) + p.send_time(s.worker, s.size);
                free[s.worker] = free[s.worker].max(t) + p.compute_time(s.worker, s.size);
            }
            let m = free.into_iter().fold(0.0, f64::max);
            assert!(
                (m - e.makespan).abs() <= 1e-6 * m,
                "{algo}: {m} vs {}",
                e.makespan
            );
        }
    }
}

/// The paper-like platform of 6 workers (rows of 1,500 doubles; see the divisible-paper scenario).
fn six_workers(memory: &[f64]) -> StarPlatform {
    let speeds = [75.0, 75.0, 60.0, 60.0, 75.0, 60.0];
    StarPlatform {
        workers: speeds
            .iter()
            .zip(memory)
            .enumerate()
            .map(|(i, (&s, &m))| StarWorker {
                name: format!("pc{i}"),
                speed: s,
                compute_latency: 0.01,
                bandwidth: 1e8 / (1500.0 * 64.0),
                network_latency: 0.0005,
                memory: Some(m),
            })
            .collect(),
    }
}

/// The memory rule checked on the plan alone: UMR's schedule is tight, so chunk `(j, i)` is sent
/// while `(j−1, i)` still computes; it breaks the rule iff `chunk_{j−1,i} + chunk_{j,i} > buf_i`.
fn first_breach(p: &StarPlatform, plan: &Plan) -> Option<(usize, u32)> {
    let mut previous = vec![0.0_f64; p.workers.len()];
    for c in &plan.chunks {
        let held = previous[c.worker] + c.size;
        if held > p.workers[c.worker].memory.unwrap_or(f64::INFINITY) * (1.0 + 1e-9) {
            return Some((c.worker, c.round));
        }
        previous[c.worker] = c.size;
    }
    None
}

#[test]
fn umr_is_infeasible_exactly_where_a_chunk_breaks_the_memory_rule_and_umrlm_never() {
    let memory = [1100.0, 1100.0, 1100.0, 1100.0, 825.0, 825.0];
    let p = six_workers(&memory);
    let mut both = 0;
    let mut infeasible = 0;
    for rows in (250..=20_000).step_by(250) {
        let load = f64::from(rows);
        let u = umr::plan(&p, load).expect("UMR plans");
        let l = plan(Algo::Umrlm, &p, load, &PlanOptions::default()).expect("UMRLM plans");
        let lm = run(&p, &l, load).unwrap_or_else(|e| panic!("UMRLM at {rows} rows: {e}"));
        assert!(lm >= p.lower_bound(load), "UMRLM below W/ΣS at {rows} rows");
        match (run(&p, &u, load), first_breach(&p, &u)) {
            (Ok(um), None) => {
                both += 1;
                let gap = (lm - um).abs() / um;
                assert!(gap < 0.05, "{rows} rows: UMR {um:.2} s, UMRLM {lm:.2} s");
            }
            (
                Err(DivisibleError::Infeasible {
                    worker,
                    round,
                    overflow,
                    ..
                }),
                Some(at),
            ) => {
                infeasible += 1;
                assert_eq!(
                    (worker, round),
                    at,
                    "{rows} rows: the first breach is reported"
                );
                assert!(overflow > 0.0);
            }
            (got, want) => panic!("{rows} rows: simulator says {got:?}, the rule says {want:?}"),
        }
    }
    assert!(
        both >= 5 && infeasible >= 5,
        "both regimes are exercised: {both} / {infeasible}"
    );
}

#[test]
fn umrlm_runs_random_memory_limited_platforms_within_the_bounds() {
    let mut rng = Pcg64::seed_from_u64(11);
    for _ in 0..60 {
        let mut p = random_platform(&mut rng);
        let load = 10f64.powf(rng.random_range(4.0..6.0));
        for w in &mut p.workers {
            w.memory = Some(load * rng.random_range(0.001..0.05));
        }
        let l = plan(Algo::Umrlm, &p, load, &PlanOptions::default()).expect("plans");
        let r = simulate(&p, &l, load, &StarConfig::default()).expect("UMRLM is never infeasible");
        assert!(r.makespan_s() >= p.lower_bound(load));
        let total: f64 = r.sends.iter().map(|s| s.size()).sum();
        assert!((total - load).abs() < 1e-6 * load);
    }
}

#[test]
fn the_same_seed_gives_the_same_run_and_errors_change_it() {
    let mut rng = Pcg64::seed_from_u64(5);
    let p = random_platform(&mut rng);
    let options = PlanOptions {
        error: 0.3,
        ..PlanOptions::default()
    };
    let r = plan(Algo::Rumr, &p, 1e6, &options).expect("plans");
    let config = StarConfig {
        error: 0.3,
        seed: 4,
    };
    let a = simulate(&p, &r, 1e6, &config).expect("runs");
    let b = simulate(&p, &r, 1e6, &config).expect("runs");
    assert_eq!(a, b);
    let c = simulate(&p, &r, 1e6, &StarConfig { seed: 5, ..config }).expect("runs");
    assert_ne!(a.makespan, c.makespan);
}

#[test]
fn rumr_beats_umr_on_average_under_large_errors() {
    for platform_seed in [31, 32, 33] {
        let mut rng = Pcg64::seed_from_u64(platform_seed);
        let p = random_platform(&mut rng);
        let load = 1e6;
        for error in [0.2, 0.3, 0.4] {
            let options = PlanOptions {
                error,
                ..PlanOptions::default()
            };
            let u = plan(Algo::Umr, &p, load, &options).expect("plans");
            let r = plan(Algo::Rumr, &p, load, &options).expect("plans");
            let mean = |plan: &Plan| {
                (1..=100)
                    .map(|seed| {
                        simulate(&p, plan, load, &StarConfig { error, seed })
                            .expect("runs")
                            .makespan_s()
                    })
                    .sum::<f64>()
                    / 100.0
            };
            let (mu, mr) = (mean(&u), mean(&r));
            assert!(
                mr < mu,
                "platform {platform_seed} ({} workers), error {error}: RUMR {mr:.2} s vs UMR {mu:.2} s",
                p.workers.len()
            );
        }
    }
}

#[test]
fn the_example_platform_file_is_the_scenarios_platform() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../examples/platform-divisible-paper.toml"
    );
    let text = std::fs::read_to_string(path).expect("example file");
    let parsed =
        hetsched_core::input::star_platform::parse_star_platform(path, &text).expect("parses");
    assert_eq!(
        parsed,
        hetsched_sim::scenario::divisible_paper::paper_platform(15)
    );
}

#[test]
fn a_plan_that_does_not_fit_the_platform_is_refused_not_run() {
    let mut rng = Pcg64::seed_from_u64(1);
    let p = random_platform(&mut rng);
    let mut bad = umr::plan(&p, 1e5).expect("plans");
    bad.chunks[0].worker = p.workers.len();
    let e = simulate(&p, &bad, 1e5, &StarConfig::default()).expect_err("refused");
    assert!(e.to_string().contains("but the platform has"), "{e}");
    let mut bad = umr::plan(&p, 1e5).expect("plans");
    bad.chunks[1].size = f64::NAN;
    let e = simulate(&p, &bad, 1e5, &StarConfig::default()).expect_err("refused");
    assert!(
        e.to_string().contains("expected a non-negative number"),
        "{e}"
    );
}

/// One worker: 10 units/s, 100 units/s link (the review's platform), `bandwidth` overridable.
fn lone_worker(bandwidth: f64) -> StarPlatform {
    StarPlatform {
        workers: vec![StarWorker {
            name: "a".into(),
            speed: 10.0,
            compute_latency: 0.01,
            bandwidth,
            network_latency: 0.001,
            memory: None,
        }],
    }
}

#[test]
fn schedules_past_the_clock_are_refused_naming_the_quantity_never_wrapped() {
    let opts = PlanOptions::default();
    // W/ΣS = 1e11 s, 3171 years: the integer clock used to wrap (or panic in debug builds).
    let p = lone_worker(100.0);
    for load in [1e12, 1e300] {
        let plan = plan(Algo::Umr, &p, load, &opts).expect("the planner answers");
        let e = simulate(&p, &plan, load, &StarConfig::default()).expect_err("too long");
        assert!(matches!(e, DivisibleError::TooLong { .. }), "{e}");
        let e = e.to_string();
        assert!(
            e.contains("needs at least W/ΣS =") && e.contains("beyond the 100 years"),
            "{e}"
        );
        assert_eq!(
            hetsched_sim::divisible::check_load(&p, load).map_err(|e| e.to_string()),
            Err(e)
        );
    }
    // A link of 1e-9 units/s: 100 units take 1e11 s to send, although W/ΣS is 10 s.
    let slow = lone_worker(1e-9);
    for algo in Algo::ALL {
        let plan = plan(algo, &slow, 100.0, &opts).expect("the planner answers");
        let e = simulate(&slow, &plan, 100.0, &StarConfig::default())
            .expect_err("too long")
            .to_string();
        assert!(
            e.contains(&format!(
                "its {algo} plan ends (worker 0 `a` last) at 1.000e11 s"
            )),
            "{algo}: {e}"
        );
    }
    // Just inside the bound, with errors that stretch it by up to 1.9: runs, times in order.
    let load = 3e10;
    let plan = plan(Algo::Rumr, &p, load, &PlanOptions { error: 0.9, ..opts }).expect("plans");
    let config = StarConfig {
        error: 0.9,
        seed: 3,
    };
    let run = simulate(&p, &plan, load, &config).expect("fits the clock");
    assert!(run.makespan_s() >= p.lower_bound(load) * 0.1);
    for s in &run.sends {
        assert!(s.send_start <= s.send_end && s.send_end <= s.compute_start);
        assert!(s.compute_start <= s.compute_end && s.compute_end <= run.makespan);
    }
}

/// The review's platform (`hetsched sim divisible --algo umrlm`; docs/divisible.md, "Units"):
/// ten workers of 10⁶ × U(0.5, 1.5) units/s (these speeds), no latencies, links of 10¹² units/s,
/// memories of 120 units. 1,000 units ran as 51,324 rounds of 513,240 sends (1.3 s, 80 MB),
/// 10,000 as 884,110 sends. A planner cuts no chunk below one unit now, so no run has more sends
/// than units, and with every chunk capped at 60 units it has about the fewest the caps allow.
#[test]
fn a_platform_without_latencies_runs_no_more_sends_than_units() {
    let speeds = [
        1456034.2718892493,
        1447827.4870593494,
        556551.3677268086,
        584871.9951589216,
        1335498.8781294494,
        1235969.9890685235,
        1169730.4014402211,
        808136.4575891442,
        1105944.1656784625,
        1106801.7336408377,
    ];
    let p = StarPlatform {
        workers: speeds
            .iter()
            .enumerate()
            .map(|(i, &speed)| StarWorker {
                name: format!("w{i}"),
                speed,
                compute_latency: 0.0,
                bandwidth: 1e12,
                network_latency: 0.0,
                memory: Some(120.0),
            })
            .collect(),
    };
    for (load, sends) in [(1_000.0, 30), (10_000.0, 230), (100_000.0, 2_250)] {
        let plan = plan(Algo::Umrlm, &p, load, &PlanOptions::default()).expect("umrlm plans");
        let r = simulate(&p, &plan, load, &StarConfig::default()).expect("umrlm runs");
        // What docs/divisible.md quotes.
        assert_eq!(r.sends.len(), sends, "{load} units");
        assert!(
            r.sends.len() as f64 <= (load / 60.0).ceil() * 2.0,
            "{load} units: {} sends in {} rounds",
            r.sends.len(),
            r.rounds()
        );
        assert!(r.sends.iter().all(|s| s.size() >= 1.0 - 1e-9));
        let sum: f64 = r.sends.iter().map(|s| s.size()).sum();
        assert!((sum - load).abs() <= 1e-9 * load);
    }
    // Without memory limits every planner is bounded by the units alone.
    let mut unlimited = p.clone();
    for w in &mut unlimited.workers {
        w.memory = None;
    }
    for algo in Algo::ALL {
        for load in [3.0, 25.0, 1_000.0] {
            let options = PlanOptions {
                error: 0.2,
                ..PlanOptions::default()
            };
            let plan = plan(algo, &unlimited, load, &options).expect("plans");
            let r = simulate(&unlimited, &plan, load, &StarConfig::default()).expect("runs");
            assert!(
                r.sends.len() as f64 <= load,
                "{algo}, {load} units: {} sends",
                r.sends.len()
            );
        }
    }
}
