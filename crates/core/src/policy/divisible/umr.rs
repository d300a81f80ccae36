//! UMR, uniform multi-round (Yang & Casanova, IPDPS 2003; spec 03 "UMR"): rounds of geometrically
//! growing size, each split so that every worker computes for the same time, sized so that the
//! master finishes sending round `j+1` exactly when the last worker finishes round `j`.
//!
//! Formulas (spec 03, UMR): `α_i = S_i/ΣS`, `β_i = α_i·ΣS_k·cLat_k − S_i·cLat_i`,
//! `θ = 1/Σ(S_i/B_i)`, `η = θ·[ΣS_k·cLat_k − ΣS·(ΣnLat_i + Σβ_i/B_i)]`, `γ = η/(1−θ)`,
//! `round_j = θ^j(round_0 − γ) + γ`, `round_0(M) = (W − Mγ)(1−θ)/(1−θ^M) + γ`,
//! `chunk_{j,i} = α_i·round_j + β_i`, `Ex(M) = W/ΣS + M·c̄ + Σ(nLat_i + chunk_{0,i}/B_i)`.
//!
//! `M*` minimises `Ex` over integers `M ≥ 1`, rejecting any `M` with a chunk below one load unit
//! ([`super::min_chunk`]; spec 03 rejects chunks ≤ 0, hetsched cuts no chunk below a unit) or
//! whose rounds shrink (the closed form assumes no worker ever waits for its next chunk, which
//! holds exactly when rounds do not shrink). The chosen `M` is checked against the rounds the
//! recursion gives — what is sent: near the recursion's unstable fixed point (θ > 1, `round_0 ≈ γ`)
//! the closed form's rounding grows by θ each round, and such an `M` gives way to the best below.
//!
//! Resource selection: spec 03's robust alternative — workers ordered by decreasing `B_i` (ties:
//! file order), `Ex(M*)` evaluated for every prefix of that order, the best prefix kept. Every sum
//! above is a running sum over the prefix, so each prefix costs O(1) per `M` tried. The send order
//! is that same order in every round.

use super::{Chunk, Plan, PlanError, StarPlatform, min_chunk};

/// Rounds tried at most: beyond this `θ^M` overflows or latencies dominate on any sane platform.
pub const MAX_ROUNDS: u32 = 2_000;

/// A solved UMR instance on a fixed, ordered set of workers.
#[derive(Clone, Debug, PartialEq)]
pub struct UmrSolution {
    /// Workers used, in send order.
    pub workers: Vec<usize>,
    /// `M*`.
    pub rounds: u32,
    /// `round_0(M*)`.
    pub round0: f64,
    /// `θ`.
    pub theta: f64,
    /// `η`.
    pub eta: f64,
    /// `α_i`, by position in `workers`.
    pub alpha: Vec<f64>,
    /// `β_i`, by position in `workers`.
    pub beta: Vec<f64>,
    /// `Ex(M*)`, seconds: the makespan of the generated schedule.
    pub makespan: f64,
    /// The smallest chunk allowed, load units ([`super::min_chunk`] of the load solved for).
    pub unit: f64,
}

impl UmrSolution {
    /// The same workers' rounds for `load` in exactly `rounds` rounds (`round_0(M)` by the
    /// closed form), if no chunk of them is below [`UmrSolution::unit`] and they add up to `load`. UMRLM tries
    /// round counts below `M*` ([`super::umrlm`]). Its `makespan` is `M*`'s.
    pub fn with_rounds(&self, rounds: u32, load: f64) -> Option<UmrSolution> {
        let m = f64::from(rounds);
        let near_one = (self.theta - 1.0).abs() < 1e-9;
        let round0 = if near_one {
            (load - self.eta * m * (m - 1.0) / 2.0) / m
        } else {
            let gamma = self.eta / (1.0 - self.theta);
            (load - m * gamma) * (1.0 - self.theta) / (1.0 - self.theta.powi(rounds as i32)) + gamma
        };
        let s = UmrSolution {
            rounds,
            round0,
            ..self.clone()
        };
        let sizes = s.round_sizes();
        let floor = self.unit * (1.0 - 1e-9);
        let positive = sizes
            .iter()
            .all(|&r| (0..s.workers.len()).all(|k| s.chunk(r, k) >= floor));
        let sum: f64 = sizes.iter().sum();
        (round0.is_finite() && positive && (sum - load).abs() <= 1e-9 * load.abs().max(1.0))
            .then_some(s)
    }

    /// `round_j` (spec 03: `round_{j+1} = θ·round_j + η`).
    pub fn round_size(&self, j: u32) -> f64 {
        let mut r = self.round0;
        for _ in 0..j {
            r = self.theta * r + self.eta;
        }
        r
    }

    /// Every round's size, in order.
    pub fn round_sizes(&self) -> Vec<f64> {
        let mut r = self.round0;
        (0..self.rounds)
            .map(|_| {
                let this = r;
                r = self.theta * r + self.eta;
                this
            })
            .collect()
    }

    /// `chunk_{j,k}` for the worker at position `k` of `workers`, given `round_j`.
    pub fn chunk(&self, round_size: f64, k: usize) -> f64 {
        self.alpha[k] * round_size + self.beta[k]
    }

    /// The schedule: every round, every worker, in order. The last round absorbs the
    /// floating-point remainder so the chunks add up to the load exactly as summed.
    pub fn chunks(&self, load: f64) -> Vec<Chunk> {
        let mut out = Vec::with_capacity(self.rounds as usize * self.workers.len());
        for (j, r) in self.round_sizes().into_iter().enumerate() {
            for (k, &w) in self.workers.iter().enumerate() {
                out.push(Chunk {
                    round: j as u32,
                    worker: w,
                    size: self.chunk(r, k),
                });
            }
        }
        let total: f64 = out.iter().map(|c| c.size).sum();
        if let Some(last) = out.last_mut() {
            last.size += load - total;
        }
        out
    }
}

/// Running sums over a prefix of workers (spec 03's UMR sums).
#[derive(Clone, Copy, Debug, Default)]
struct Sums {
    /// The smallest chunk allowed, load units.
    unit: f64,
    /// max (cLat + unit/S): a round gives every worker at least `unit` exactly when it is at
    /// least `ΣS·(this − c̄)`.
    max_clat_unit: f64,
    /// ΣS.
    s: f64,
    /// ΣS·cLat.
    s_clat: f64,
    /// ΣS/B.
    s_over_b: f64,
    /// ΣS·cLat/B.
    s_clat_over_b: f64,
    /// ΣnLat.
    nlat: f64,
}

/// The constants of UMR's round recursion over one prefix of workers (spec 03's formulas).
#[derive(Clone, Copy)]
struct Recursion {
    /// ΣS.
    ss: f64,
    /// c̄ = ΣS·cLat / ΣS.
    cbar: f64,
    theta: f64,
    eta: f64,
    /// Σβ_i/B_i = Σ S_i(c̄ − cLat_i)/B_i.
    beta_over_b: f64,
    /// chunk_{j,i} ≥ unit ⟺ round_j ≥ r_min = ΣS·(max (cLat + unit/S) − c̄) (> 0).
    r_min: f64,
}

impl Recursion {
    fn of(sums: &Sums) -> Self {
        let ss = sums.s;
        let cbar = sums.s_clat / ss;
        let theta = 1.0 / sums.s_over_b;
        let beta_over_b = cbar * sums.s_over_b - sums.s_clat_over_b;
        Recursion {
            ss,
            cbar,
            theta,
            eta: theta * (sums.s_clat - ss * (sums.nlat + beta_over_b)),
            beta_over_b,
            r_min: ss * (sums.max_clat_unit - cbar),
        }
    }

    /// Whether a round of `r` units gives every worker a chunk of at least the unit.
    fn big_enough(&self, r: f64) -> bool {
        r > 0.0 && r >= self.r_min * (1.0 - 1e-12)
    }

    /// Whether the rounds the recursion gives from `r0` (what [`UmrSolution::chunks`] sends) all
    /// have positive chunks and add up to `load`.
    fn rounds_hold(&self, r0: f64, m: u32, load: f64) -> bool {
        let (mut r, mut sum) = (r0, 0.0);
        for _ in 0..m {
            if !self.big_enough(r) {
                return false;
            }
            sum += r;
            r = self.theta * r + self.eta;
        }
        (sum - load).abs() <= 1e-9 * load.abs().max(1.0)
    }
}

/// The best `M` for one prefix: `(M, round_0, Ex, θ, η)`.
///
/// The closed form can be off where the recursion is unstable (θ > 1 and round_0 near γ, its
/// fixed point: a difference of 1e-12 in round_0 grows by θ every round), so the best `M` is
/// checked against the rounds [`UmrSolution::chunks`] will send; when they fail, the best `M`
/// below it is sought.
fn best_rounds(sums: &Sums, load: f64) -> Result<(u32, f64, f64, f64, f64), String> {
    let rec = Recursion::of(sums);
    let mut why = format!(
        "every round count gives a chunk below {} load units",
        crate::text::number(sums.unit)
    );
    let mut max_rounds = MAX_ROUNDS;
    loop {
        let Some((m, r0, ex)) = scan_rounds(sums, &rec, load, max_rounds, &mut why) else {
            return Err(why);
        };
        if rec.rounds_hold(r0, m, load) {
            return Ok((m, r0, ex, rec.theta, rec.eta));
        }
        why = format!(
            "from {m} rounds on, the rounds the recursion gives have a chunk below {} load units or \
             do not add up to the load (round_0 is too close to the recursion's unstable fixed point)",
            crate::text::number(sums.unit)
        );
        if m == 1 {
            return Err(why);
        }
        max_rounds = m - 1;
    }
}

/// The `M ≤ max_rounds` with the smallest `Ex` by the closed form: `(M, round_0, Ex)`.
fn scan_rounds(
    sums: &Sums,
    rec: &Recursion,
    load: f64,
    max_rounds: u32,
    why: &mut String,
) -> Option<(u32, f64, f64)> {
    let Recursion {
        ss,
        cbar,
        theta,
        eta,
        beta_over_b,
        ..
    } = *rec;
    let a = sums.s_over_b / ss; // Σα_i/B_i
    let near_one = (theta - 1.0).abs() < 1e-9;
    let gamma = if near_one { 0.0 } else { eta / (1.0 - theta) };
    let mut best: Option<(u32, f64, f64)> = None;
    let mut theta_m = 1.0_f64;
    for m in 1..=max_rounds {
        theta_m *= theta;
        let mf = f64::from(m);
        // Lower bound of Ex(M) for every larger M: stop once it passes the best.
        if let Some((_, _, ex)) = best
            && load / ss + mf * cbar + sums.nlat >= ex
        {
            break;
        }
        let r0 = if near_one {
            (load - eta * mf * (mf - 1.0) / 2.0) / mf
        } else {
            if !theta_m.is_finite() {
                break;
            }
            (load - mf * gamma) * (1.0 - theta) / (1.0 - theta_m) + gamma
        };
        if !(r0.is_finite() && rec.big_enough(r0)) {
            // round_0 only falls as M grows: no larger M gives every chunk a unit.
            break;
        }
        // Rounds must not shrink: round_1 − round_0 = (θ−1)·round_0 + η ≥ 0.
        if m > 1 && (theta - 1.0) * r0 + eta < -1e-12 * r0.abs() {
            *why = "rounds would shrink for every round count above 1".into();
            continue;
        }
        let ex = load / ss + mf * cbar + sums.nlat + r0 * a + beta_over_b;
        if best.is_none_or(|(_, _, b)| ex < b) {
            best = Some((m, r0, ex));
        }
    }
    best
}

fn sums_of(platform: &StarPlatform, workers: &[usize], unit: f64) -> Sums {
    let mut s = Sums {
        unit,
        ..Sums::default()
    };
    for &i in workers {
        add(&mut s, platform, i);
    }
    s
}

fn add(s: &mut Sums, platform: &StarPlatform, i: usize) {
    let w = &platform.workers[i];
    s.s += w.speed;
    s.s_clat += w.speed * w.compute_latency;
    s.s_over_b += w.speed / w.bandwidth;
    s.s_clat_over_b += w.speed * w.compute_latency / w.bandwidth;
    s.nlat += w.network_latency;
    s.max_clat_unit = s.max_clat_unit.max(w.compute_latency + s.unit / w.speed);
}

/// Solves UMR for `load` on exactly `workers` (in that send order), with `M*`.
pub fn solve(
    platform: &StarPlatform,
    load: f64,
    workers: &[usize],
) -> Result<UmrSolution, PlanError> {
    let unit = min_chunk(load);
    let sums = sums_of(platform, workers, unit);
    let (rounds, round0, makespan, theta, eta) =
        best_rounds(&sums, load).map_err(PlanError::NoRoundCount)?;
    let alpha: Vec<f64> = workers
        .iter()
        .map(|&i| platform.workers[i].speed / sums.s)
        .collect();
    let beta = workers
        .iter()
        .zip(&alpha)
        .map(|(&i, a)| {
            let w = &platform.workers[i];
            a * sums.s_clat - w.speed * w.compute_latency
        })
        .collect();
    Ok(UmrSolution {
        workers: workers.to_vec(),
        rounds,
        round0,
        theta,
        eta,
        alpha,
        beta,
        makespan,
        unit,
    })
}

/// Workers by decreasing link rate (ties: file order): UMR's selection order.
pub fn bandwidth_order(platform: &StarPlatform) -> Vec<usize> {
    let mut order: Vec<usize> = (0..platform.workers.len()).collect();
    order.sort_by(|&a, &b| {
        platform.workers[b]
            .bandwidth
            .total_cmp(&platform.workers[a].bandwidth)
            .then(a.cmp(&b))
    });
    order
}

/// UMR with resource selection: the prefix of [`bandwidth_order`] with the smallest `Ex(M*)`.
pub fn select(platform: &StarPlatform, load: f64) -> Result<UmrSolution, PlanError> {
    let order = bandwidth_order(platform);
    let mut sums = Sums {
        unit: min_chunk(load),
        ..Sums::default()
    };
    let mut best: Option<(usize, f64)> = None;
    let mut last_err = String::new();
    for (n, &i) in order.iter().enumerate() {
        add(&mut sums, platform, i);
        match best_rounds(&sums, load) {
            Ok((_, _, ex, _, _)) => {
                if best.is_none_or(|(_, b)| ex < b) {
                    best = Some((n + 1, ex));
                }
            }
            Err(e) => last_err = e,
        }
    }
    let Some((n, _)) = best else {
        return Err(PlanError::NoRoundCount(last_err));
    };
    solve(platform, load, &order[..n])
}

/// The UMR plan for `load` (selection, `M*`, fixed send order).
pub fn plan(platform: &StarPlatform, load: f64) -> Result<Plan, PlanError> {
    let sol = select(platform, load)?;
    Ok(Plan {
        algo: super::Algo::Umr,
        chunks: sol.chunks(load),
        tail: Vec::new(),
        tail_load: 0.0,
        tail_workers: Vec::new(),
        predicted_makespan: sol.makespan,
    })
}

#[cfg(test)]
mod tests {
    use super::super::testing::{Rng, random_platform};
    use super::super::{predict, reference_makespan};
    use super::*;

    #[test]
    fn a_round_count_whose_rounds_drift_below_zero_is_never_chosen() {
        // 10,000 workers whose links together are about four times faster than their computes
        // (θ ≈ 3.8) and whose latencies make η strongly negative: for a load of 1e7 the closed
        // form puts round_0 within 1e-9 of the recursion's unstable fixed point γ, the rounds
        // then shrink by θ each round, and M = 25 looked best while its last rounds had chunks
        // below zero (a plan `hetsched sim divisible` refused as "a chunk of size -100.7").
        let mut rng = Rng(7);
        let workers = (0..10_000)
            .map(|i| super::super::StarWorker {
                name: format!("w{i}"),
                speed: rng.uniform(50.0, 100.0),
                compute_latency: rng.uniform(0.001, 0.01),
                bandwidth: rng.uniform(2e6, 4e6),
                network_latency: rng.uniform(1e-4, 1e-3),
                memory: None,
            })
            .collect();
        let p = StarPlatform { workers };
        let w = 1e7;
        let plan = plan(&p, w).expect("a plan");
        assert!(
            plan.chunks.iter().all(|c| c.size > 0.0),
            "every chunk positive"
        );
        let sum: f64 = plan.chunks.iter().map(|c| c.size).sum();
        assert!((sum - w).abs() <= 1e-9 * w, "the chunks add up to the load");
        let sends: Vec<(usize, f64)> = plan.chunks.iter().map(|c| (c.worker, c.size)).collect();
        let simulated = reference_makespan(&p, &sends);
        assert!(
            (simulated - plan.predicted_makespan).abs() <= 1e-6 * simulated,
            "Ex(M*) {} is the schedule's makespan {simulated}",
            plan.predicted_makespan
        );
    }

    #[test]
    fn rounds_follow_the_recursion_and_add_up_to_the_load() {
        let mut rng = Rng(7);
        for _ in 0..50 {
            let p = random_platform(&mut rng);
            let w = rng.uniform(1e3, 1e6);
            let sol = select(&p, w).expect("a plan");
            let sizes = sol.round_sizes();
            let sum: f64 = sizes.iter().sum();
            assert!((sum - w).abs() <= 1e-9 * w, "Σ round_j = W");
            for pair in sizes.windows(2) {
                assert!(pair[1] >= pair[0] * (1.0 - 1e-12), "rounds never shrink");
            }
            let beta_sum: f64 = sol.beta.iter().sum();
            assert!(beta_sum.abs() <= 1e-9 * w, "Σβ = 0");
            assert!(sol.chunks(w).iter().all(|c| c.size > 0.0));
        }
    }

    #[test]
    fn the_closed_form_is_the_makespan_of_the_generated_schedule() {
        let mut rng = Rng(11);
        for _ in 0..100 {
            let p = random_platform(&mut rng);
            let w = rng.uniform(1e3, 1e6);
            let plan = plan(&p, w).expect("a plan");
            let sends: Vec<_> = plan.chunks.iter().map(|c| (c.worker, c.size)).collect();
            let reference = reference_makespan(&p, &sends);
            assert!(
                (reference - plan.predicted_makespan).abs() <= 1e-9 * reference,
                "Ex(M*) = {} but the recursion gives {reference}",
                plan.predicted_makespan
            );
            let predicted = predict(&p, &plan).makespan;
            assert!(
                (predicted - reference).abs() <= 1e-9 * reference,
                "no waits in UMR"
            );
        }
    }

    #[test]
    fn m_star_is_the_best_round_count() {
        let mut rng = Rng(3);
        for _ in 0..20 {
            let p = random_platform(&mut rng);
            let w = rng.uniform(1e4, 1e5);
            let sol = select(&p, w).expect("a plan");
            // Brute force over M with the recursion itself.
            let ex_m = |m: u32| -> Option<f64> {
                let mut s = sol.clone();
                s.rounds = m;
                let theta = s.theta;
                let gamma = s.eta / (1.0 - theta);
                s.round0 = (w - f64::from(m) * gamma) * (1.0 - theta)
                    / (1.0 - theta.powi(m as i32))
                    + gamma;
                let chunks = s.chunks(w);
                let sizes = s.round_sizes();
                // Chunks below a unit are refused as spec 03 refuses chunks ≤ 0.
                let unit = super::super::min_chunk(w) * (1.0 - 1e-9);
                if chunks.iter().any(|c| c.size < unit) || sizes.windows(2).any(|p| p[1] < p[0]) {
                    return None;
                }
                let sends: Vec<_> = chunks.iter().map(|c| (c.worker, c.size)).collect();
                Some(reference_makespan(&p, &sends))
            };
            let best = (1..200).filter_map(ex_m).fold(f64::INFINITY, f64::min);
            assert!(
                sol.makespan <= best * (1.0 + 1e-9),
                "{} vs {best}",
                sol.makespan
            );
        }
    }
}
