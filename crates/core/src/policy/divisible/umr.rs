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
//! Resource selection: spec 03 orders workers by decreasing `B_i` and keeps a prefix (its robust
//! alternative: the prefix with the best `Ex(M*)`). hetsched keeps that rule's aim — the worker
//! set with the best `Ex(M*)` — and widens the sets it weighs, because bandwidth prefixes alone
//! gave a worker too slow for a unit of the load the whole load when the file listed it first
//! among equal links (a prefix with a worker under a unit was rejected, so the first worker could
//! never be skipped): 50 units on speeds 1 and 100 took 50.05 s, 101 × `W/ΣS`, and adding a
//! worker could make a plan worse. Now:
//! - on up to [`EVERY_SET_UP_TO`] workers every set is weighed: the best set of the model,
//!   so adding a worker never makes the plan worse (the set without it is weighed too);
//! - on more, the candidates are the prefixes of three orders — decreasing `B_i` (spec 03's: the
//!   most compute per second of the one port), decreasing `S_i`, and increasing `Ex(M*)` of each
//!   worker alone with the whole load (its effective rate, latencies included) — where a worker
//!   that could not get a unit even with the whole load in one round is left out of the prefix
//!   rather than the prefix rejected ([`walk`]), plus the static split's workers; then a local
//!   search adds, leaves out or swaps single workers while `Ex(M*)` falls ([`improve`]). On
//!   random platforms of up to eight workers this found the best set every time (2,000 cases);
//!   it is a heuristic all the same, and adding a worker to more than ten can, rarely, make the
//!   plan slightly worse (2 of 1,000 random additions to 10–20 workers, by at most 0.25 %).
//!
//! Ties — between workers in an order, and between sets — go by the workers' figures, then
//! names ([`tie_break`]), never by their place in the file, so the plan does not depend on the
//! file's order. The static split's workers being a candidate, UMR never plans worse than that
//! split where it is UMR's own one-round schedule (equal compute times). The send order is
//! decreasing `B_i` (spec 03's) in every round, whichever way the set was found.

use super::{Chunk, Plan, PlanError, StarPlatform, min_chunk};
use std::cmp::Ordering;
use std::collections::BinaryHeap;

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

fn sums_of(platform: &StarPlatform, workers: impl IntoIterator<Item = usize>, unit: f64) -> Sums {
    let mut s = Sums {
        unit,
        ..Sums::default()
    };
    for i in workers {
        add(&mut s, platform, i);
    }
    s
}

/// Takes worker `i` out of the sums (all but `max_clat_unit`, which the caller sets).
fn sub(s: &mut Sums, platform: &StarPlatform, i: usize) {
    let w = &platform.workers[i];
    s.s -= w.speed;
    s.s_clat -= w.speed * w.compute_latency;
    s.s_over_b -= w.speed / w.bandwidth;
    s.s_clat_over_b -= w.speed * w.compute_latency / w.bandwidth;
    s.nlat -= w.network_latency;
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
    let sums = sums_of(platform, workers.iter().copied(), unit);
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

/// The order every worker order falls back on when its own key ties: faster compute first, then
/// faster link, smaller compute and link latencies, larger memory (unlimited largest), then name.
/// Two workers equal in all of that differ at most in their place in the file, which then decides
/// — and swapping them changes which index gets which chunks, not the plan's makespan. Without
/// it, ties went by file order, and a plan depended on which worker the file listed first.
pub fn tie_break(platform: &StarPlatform, a: usize, b: usize) -> Ordering {
    let (x, y) = (&platform.workers[a], &platform.workers[b]);
    let memory = |w: &super::StarWorker| w.memory.unwrap_or(f64::INFINITY);
    y.speed
        .total_cmp(&x.speed)
        .then(y.bandwidth.total_cmp(&x.bandwidth))
        .then(x.compute_latency.total_cmp(&y.compute_latency))
        .then(x.network_latency.total_cmp(&y.network_latency))
        .then(memory(y).total_cmp(&memory(x)))
        .then_with(|| x.name.cmp(&y.name))
        .then(a.cmp(&b))
}

/// Workers by decreasing link rate (ties: [`tie_break`]): spec 03's selection order, and the send
/// order of every round.
pub fn bandwidth_order(platform: &StarPlatform) -> Vec<usize> {
    let mut order: Vec<usize> = (0..platform.workers.len()).collect();
    order.sort_by(|&a, &b| {
        platform.workers[b]
            .bandwidth
            .total_cmp(&platform.workers[a].bandwidth)
            .then_with(|| tie_break(platform, a, b))
    });
    order
}

/// Workers by decreasing compute speed (ties: [`tie_break`], so faster link next): the second
/// selection order (module doc).
pub fn speed_order(platform: &StarPlatform) -> Vec<usize> {
    let mut order: Vec<usize> = (0..platform.workers.len()).collect();
    order.sort_by(|&a, &b| tie_break(platform, a, b));
    order
}

/// `cLat + unit/S` of worker `i`: the time it needs for its smallest chunk. A round of `r` units
/// gives every worker of a set at least a unit exactly when the largest of these in the set is
/// at most `r/ΣS + c̄` ([`Recursion::r_min`]), so it is the worker with the largest that a
/// too-small load leaves without a unit first. Non-negative, so its bits order as it does.
fn unit_time(platform: &StarPlatform, i: usize, unit: f64) -> f64 {
    let w = &platform.workers[i];
    w.compute_latency + unit / w.speed
}

/// Walks the prefixes of `order` (the first `upto` of them): after adding each worker, every
/// worker of the prefix that could not get a unit even if the whole load went out in one round is
/// left out — the one with the largest [`unit_time`] first, until the rest can (spec 03 rejects
/// such a set; leaving the worker out keeps the set's other workers as a candidate: a worker
/// too slow for a unit, listed before a fast one, no longer hides it). A worker left out of a
/// prefix stays out of the longer ones: each worker kept lowers everyone's share. `visit(len,
/// sums, kept)` sees each prefix's sums and the number of workers kept. Returns, by worker
/// index, which workers of the first `upto` were left out.
fn walk(
    platform: &StarPlatform,
    order: &[usize],
    load: f64,
    upto: usize,
    mut visit: impl FnMut(usize, &Sums, usize),
) -> Vec<bool> {
    let unit = min_chunk(load);
    let mut sums = Sums {
        unit,
        ..Sums::default()
    };
    let mut left_out = vec![false; platform.workers.len()];
    // The kept workers by (unit time, place in the order): the top is the one to leave out
    // first (on a tie, the later in the order).
    let mut by_unit_time: BinaryHeap<(u64, usize)> = BinaryHeap::new();
    let mut kept = 0;
    for (pos, &i) in order.iter().enumerate().take(upto) {
        add(&mut sums, platform, i);
        by_unit_time.push((unit_time(platform, i, unit).to_bits(), pos));
        kept += 1;
        while kept > 1 && !Recursion::of(&sums).big_enough(load) {
            let Some((_, top)) = by_unit_time.pop() else {
                break;
            };
            left_out[order[top]] = true;
            kept -= 1;
            // The sums again from the kept workers rather than by subtraction: a worker left
            // out may be most of ΣS (a fast one with a long compute latency), and subtracting
            // it would leave the rest with its rounding error.
            sums = sums_of(
                platform,
                order[..=pos].iter().copied().filter(|&j| !left_out[j]),
                unit,
            );
        }
        visit(pos + 1, &sums, kept);
    }
    left_out
}

/// Platforms of at most this many workers have every worker set weighed (at most 1,023 sets, a
/// millisecond or so); larger ones, the candidates of [`select`].
pub const EVERY_SET_UP_TO: usize = 10;

/// A worker set UMR's selection weighs (module doc).
#[derive(Clone, Copy, Debug)]
enum Candidate {
    /// The first `len` workers of selection order `order`, less those [`walk`] leaves out.
    Prefix { order: usize, len: usize },
    /// The static split's workers ([`super::static_plan::workers`]).
    Static,
    /// The workers at the set bits' places in [`bandwidth_order`].
    Mask(u32),
}

/// Whether a set of `k` workers with makespan `ex` beats one of `bk` with `b`: lower by more
/// than rounding, or as low with fewer workers.
fn better(ex: f64, k: usize, b: f64, bk: usize) -> bool {
    ex < b * (1.0 - 1e-12) || (ex <= b * (1.0 + 1e-12) && k < bk)
}

/// Workers by increasing `Ex(M*)` of each alone with the whole load (ties: [`tie_break`]): the
/// order of their effective rates for this load, latencies and the link included.
fn alone_order(platform: &StarPlatform, load: f64) -> Vec<usize> {
    let unit = min_chunk(load);
    let alone: Vec<f64> = (0..platform.workers.len())
        .map(|i| {
            best_rounds(&sums_of(platform, [i], unit), load)
                .map_or(f64::INFINITY, |(_, _, ex, _, _)| ex)
        })
        .collect();
    let mut order: Vec<usize> = (0..platform.workers.len()).collect();
    order.sort_by(|&a, &b| {
        alone[a]
            .total_cmp(&alone[b])
            .then_with(|| tie_break(platform, a, b))
    });
    order
}

/// UMR with resource selection: the worker set with the smallest `Ex(M*)` (ties: fewer workers,
/// then the first found) — of every set on a platform of at most [`EVERY_SET_UP_TO`] workers,
/// else of the candidates of the module doc, improved by single moves ([`improve`]). Every set
/// weighed, and the order it is weighed in, follows from the workers' figures and names, never
/// from their place in the file.
pub fn select(platform: &StarPlatform, load: f64) -> Result<UmrSolution, PlanError> {
    select_with(platform, load, EVERY_SET_UP_TO)
}

/// [`select`], weighing every set up to `every_set_up_to` workers (at most 31). Public for the
/// tests that compare the candidates with every set.
#[doc(hidden)]
pub fn select_with(
    platform: &StarPlatform,
    load: f64,
    every_set_up_to: usize,
) -> Result<UmrSolution, PlanError> {
    let unit = min_chunk(load);
    let n = platform.workers.len();
    let canonical = bandwidth_order(platform);
    // The best candidate of each family (every set; each order's prefixes; the static split's
    // workers): (Ex, workers, candidate).
    let mut best: [Option<(f64, usize, Candidate)>; 5] = [None; 5];
    let mut last_err = String::new();
    let mut weigh =
        |family: usize, sums: &Sums, kept: usize, which: Candidate| match best_rounds(sums, load) {
            Ok((_, _, ex, _, _)) => {
                let slot = &mut best[family];
                if slot.is_none_or(|(b, k, _)| better(ex, kept, b, k)) {
                    *slot = Some((ex, kept, which));
                }
            }
            Err(e) => last_err = e,
        };
    let in_mask = |mask: u32| {
        canonical
            .iter()
            .enumerate()
            .filter(move |&(k, _)| mask >> k & 1 == 1)
            .map(|(_, &i)| i)
    };
    let every_set = n <= every_set_up_to.min(31);
    let orders = if every_set {
        for mask in 1..(1_u32 << n) {
            weigh(
                0,
                &sums_of(platform, in_mask(mask), unit),
                mask.count_ones() as usize,
                Candidate::Mask(mask),
            );
        }
        Vec::new()
    } else {
        let orders = vec![
            canonical.clone(),
            speed_order(platform),
            alone_order(platform, load),
        ];
        for (o, order) in orders.iter().enumerate() {
            walk(platform, order, load, order.len(), |len, sums, kept| {
                weigh(1 + o, sums, kept, Candidate::Prefix { order: o, len });
            });
        }
        let static_set = super::static_plan::workers(platform, load);
        weigh(
            4,
            &sums_of(platform, static_set.iter().copied(), unit),
            static_set.len(),
            Candidate::Static,
        );
        orders
    };
    let set_of = |which: Candidate| {
        let mut set = vec![false; n];
        match which {
            Candidate::Prefix { order, len } => {
                let left_out = walk(platform, &orders[order], load, len, |_, _, _| {});
                for &i in &orders[order][..len] {
                    set[i] = !left_out[i];
                }
            }
            Candidate::Static => {
                for i in super::static_plan::workers(platform, load) {
                    set[i] = true;
                }
            }
            Candidate::Mask(mask) => {
                for i in in_mask(mask) {
                    set[i] = true;
                }
            }
        }
        set
    };
    // Every set weighed: the best is the best. Else each family's best (on a large platform,
    // the best of all) is improved by moves, and the best result kept.
    let full = n <= FULL_SEARCH_UP_TO;
    let mut starts: Vec<(f64, usize, Candidate)> = best.into_iter().flatten().collect();
    if !full {
        let first = starts
            .iter()
            .copied()
            .reduce(|a, b| if better(b.0, b.1, a.0, a.1) { b } else { a });
        starts = first.into_iter().collect();
    }
    let mut chosen: Option<(f64, usize, Vec<bool>)> = None;
    for (ex, _, which) in starts {
        let mut set = set_of(which);
        let ex = if every_set {
            Some(ex)
        } else if full {
            improve(platform, load, &canonical, &mut set, true, MAX_MOVES)
        } else {
            improve(platform, load, &canonical, &mut set, false, MAX_MOVES_LARGE)
        };
        let Some(ex) = ex else {
            continue;
        };
        let k = set.iter().filter(|&&b| b).count();
        if chosen
            .as_ref()
            .is_none_or(|(b, bk, _)| better(ex, k, *b, *bk))
        {
            chosen = Some((ex, k, set));
        }
    }
    let Some((_, _, chosen)) = chosen else {
        return Err(PlanError::NoRoundCount(last_err));
    };
    // Whichever way the set was found, it is sent in spec 03's order.
    let workers: Vec<usize> = canonical.iter().copied().filter(|&i| chosen[i]).collect();
    solve(platform, load, &workers)
}

/// Platforms of at most this many workers get the full local search of [`improve`]: from each
/// family's best candidate, swaps included, up to [`MAX_MOVES`] moves (a pass weighs at most
/// 32 × 32 swaps). On larger ones a pass over every worker costs as much as the prefixes of one
/// order, and one worker more or less matters less: only the best candidate is improved, by
/// adding or leaving out, at most [`MAX_MOVES_LARGE`] times (10,000 workers: 0.1 s of local search
/// on top of 0.1 s of prefixes before, in a debug build).
pub const FULL_SEARCH_UP_TO: usize = 64;

/// The most moves [`improve`] makes on up to [`FULL_SEARCH_UP_TO`] workers. Each move lowers
/// `Ex`; a candidate is most often a move or two from where moves stop.
pub const MAX_MOVES: usize = 64;

/// The most moves [`improve`] makes on more than [`FULL_SEARCH_UP_TO`] workers.
pub const MAX_MOVES_LARGE: usize = 4;

/// Local search from a candidate set (`set`, by worker index): while adding one worker, leaving
/// one out or (with `swaps`) swapping one in for one out lowers `Ex(M*)` by more than rounding,
/// makes the move that lowers it most (ties: the first in `order`), at most `max_moves` times.
/// Returns the final set's `Ex`, if it has one. Prefixes miss sets such as "the fast workers
/// with fast links and a slow one with a fast link, without the fast one with a slow link"; a
/// move or two reach them from a prefix that differs by a worker or two. In particular, a
/// worker added to a platform that spoils the best prefix can be taken out again.
fn improve(
    platform: &StarPlatform,
    load: f64,
    order: &[usize],
    set: &mut [bool],
    swaps: bool,
    max_moves: usize,
) -> Option<f64> {
    let unit = min_chunk(load);
    let mut ex = f64::INFINITY;
    for _ in 0..max_moves {
        let members = || order.iter().copied().filter(|&i| set[i]);
        let sums = sums_of(platform, members(), unit);
        ex = best_rounds(&sums, load).ok()?.2;
        let count = members().count();
        // The two largest unit times of the set: leaving out the worker with the largest
        // leaves the second as the set's largest.
        let (mut top, mut top_worker, mut second) = (0.0_f64, usize::MAX, 0.0_f64);
        for i in members() {
            let t = unit_time(platform, i, unit);
            if t > top {
                (second, top, top_worker) = (top, t, i);
            } else if t > second {
                second = t;
            }
        }
        let without = |s: &mut Sums, i: usize| {
            sub(s, platform, i);
            s.max_clat_unit = if i == top_worker { second } else { top };
        };
        // (Ex, out, in)
        let mut best_move: Option<(f64, Option<usize>, Option<usize>)> = None;
        let mut consider = |s: &Sums, out: Option<usize>, into: Option<usize>| {
            if let Ok((_, _, e, _, _)) = best_rounds(s, load)
                && e < best_move.map_or(ex, |b| b.0) * (1.0 - 1e-12)
            {
                best_move = Some((e, out, into));
            }
        };
        for &i in order {
            let mut s = sums;
            if set[i] {
                if count > 1 {
                    without(&mut s, i);
                    consider(&s, Some(i), None);
                }
                if swaps {
                    for &j in order.iter().filter(|&&j| !set[j]) {
                        let mut s = sums;
                        without(&mut s, i);
                        add(&mut s, platform, j);
                        consider(&s, Some(i), Some(j));
                    }
                }
            } else {
                add(&mut s, platform, i);
                consider(&s, None, Some(i));
            }
        }
        let Some((_, out, into)) = best_move else {
            break;
        };
        for i in out.into_iter().chain(into) {
            set[i] = !set[i];
        }
    }
    let sums = sums_of(platform, order.iter().copied().filter(|&i| set[i]), unit);
    best_rounds(&sums, load)
        .ok()
        .map(|r| r.2)
        .or(Some(ex).filter(|e| e.is_finite()))
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
