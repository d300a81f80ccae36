//! UMRLM, UMR with limited memory (the seed: Li Xianning 2008; spec 03 "UMRLM").
//!
//! a) Every chunk starts at its UMR value (same worker set and `M*` as [`super::umr`]).
//! b) At the first round `j` in which some chunk exceeds its worker's cap, growth stops: rounds
//!    `j … M′−2` reuse round `j−1`'s chunk sizes (round 0's, scaled down to fit, when `j = 0`).
//! c) The last round `M′−1` takes what is left, sized so that all workers finish as close to
//!    together as possible (a bisection on the common finish time over the predicted state of the
//!    master), each chunk at most its cap, sent in order of decreasing processing time.
//! d) Workers go by decreasing `c1·S_i + c2·B_i + c3·buf_i` ([`super::Weights`]).
//!
//! The cap. Under hetsched's memory rule (module [`super`]) a worker holds the chunk it computes
//! and the next one, so the seed's "chunk ≤ `buf_i`" becomes **chunk ≤ `buf_i/2`**: any two chunks
//! then fit, the master's one-buffer protocol never lets a third arrive, and a UMRLM plan is never
//! infeasible. The number of frozen rounds is the least that leaves the last round no more than
//! the sum of the caps, or more while each one more lowers the predicted makespan (a last round
//! pressed against the caps cannot finish its workers together, and one beside a worker of
//! unlimited memory would hand it nearly all the load).
//!
//! The round count `M` of step a). UMR's `M*` minimises UMR's makespan for a load sent without
//! limit; once memory binds, the rounds before the freeze set the sizes every frozen round
//! repeats, and for a large `M*` those are tiny (thousands of rounds of a few units). When the
//! frozen sizes fill less than half of the tightest cap, hetsched therefore also applies b)–c) to
//! UMR's rounds for `M* − 1`, `M* − 2`, … while each gives a smaller predicted makespan, and keeps
//! the best (ties: fewer chunks) — beyond the seed, which takes `M*`.

use super::umr::{self, UmrSolution};
use super::{
    Algo, Chunk, Plan, PlanError, StarMaster, StarPlatform, StarWorker, Weights, min_chunk, predict,
};

/// The most rounds a UMRLM plan may take. A worker holds at most half its memory per round, so
/// a small memory needs many rounds: the documented 20,000 units beside a 4-unit worker take
/// 3,333 (more than UMR's [`umr::MAX_ROUNDS`]), and 10⁻⁹ units of memory would take 10¹³
/// (planning 2,000,000 rounds took gigabytes).
pub const MAX_ROUNDS: u32 = 100_000;

/// The most halvings of the last round's bisection ([`balance`]). It stops at a width of
/// `tolerance × hi` from a width of at most `hi`: 20 halvings for the planner's 10⁻⁶, 34 for its
/// 10⁻¹⁰; the bound never binds there, and keeps a finer tolerance from spinning where the
/// midpoint of two neighbouring doubles is one of them.
const MAX_HALVINGS: u32 = 200;

/// The most sends a UMRLM plan may take (each costs its plan and simulation about 150 bytes).
pub const MAX_SENDS: u64 = 1_000_000;

/// Workers of `workers` ordered by decreasing weighted score (spec 03, UMRLM d); each quantity is
/// divided by its largest value among `workers`; unlimited memory counts as the largest. Equal
/// scores go by [`umr::tie_break`] (faster compute first, then faster link, …, then name), not by
/// the file's order.
pub fn order(platform: &StarPlatform, workers: &[usize], weights: Weights) -> Vec<usize> {
    let ws = &platform.workers;
    let max = |f: &dyn Fn(usize) -> f64| workers.iter().map(|&i| f(i)).fold(0.0_f64, f64::max);
    let max_s = max(&|i| ws[i].speed);
    let max_b = max(&|i| ws[i].bandwidth);
    let max_m = max(&|i| ws[i].memory.unwrap_or(0.0));
    let mem = |i: usize| match ws[i].memory {
        Some(m) if max_m > 0.0 => m / max_m,
        _ => 1.0,
    };
    let score = |i: usize| {
        weights.c1 * ws[i].speed / max_s
            + weights.c2 * ws[i].bandwidth / max_b
            + weights.c3 * mem(i)
    };
    let mut out = workers.to_vec();
    out.sort_by(|&a, &b| {
        score(b)
            .total_cmp(&score(a))
            .then_with(|| umr::tie_break(platform, a, b))
    });
    out
}

/// The per-chunk cap of worker `i`: half its memory (module doc).
pub fn cap(platform: &StarPlatform, i: usize) -> f64 {
    platform.workers[i]
        .memory
        .map_or(f64::INFINITY, |m| m / 2.0)
}

/// The UMRLM plan for `load`. No chunk is below one unit ([`min_chunk`]): a worker whose cap is
/// below it takes no chunk (and a platform where every worker's is, is refused).
pub fn plan(platform: &StarPlatform, load: f64, weights: Weights) -> Result<Plan, PlanError> {
    let unit = min_chunk(load);
    let fits = |i: usize| cap(platform, i) >= unit;
    if (0..platform.workers.len()).all(fits) {
        return plan_all(platform, load, weights);
    }
    let eligible: Vec<usize> = (0..platform.workers.len()).filter(|&i| fits(i)).collect();
    if eligible.is_empty() {
        // The worker that comes closest: the largest memory.
        let (i, w) = platform
            .workers
            .iter()
            .enumerate()
            .max_by(|a, b| {
                let m = |w: &StarWorker| w.memory.unwrap_or(f64::INFINITY);
                m(a.1).total_cmp(&m(b.1))
            })
            .ok_or(PlanError::NoWorkers)?;
        return Err(PlanError::Worker {
            worker: i,
            name: w.name.clone(),
            field: "memory",
            problem: format!(
                "{} is the largest memory, and it holds less than two chunks of {unit} load \
                 units (the smallest chunk: one computes while the next arrives)",
                w.memory.unwrap_or(f64::INFINITY)
            ),
        });
    }
    let sub = StarPlatform {
        workers: eligible
            .iter()
            .map(|&i| platform.workers[i].clone())
            .collect(),
    };
    match plan_all(&sub, load, weights) {
        Ok(mut p) => {
            for c in &mut p.chunks {
                c.worker = eligible[c.worker];
            }
            Ok(p)
        }
        Err(PlanError::Worker {
            worker,
            name,
            field,
            problem,
        }) => Err(PlanError::Worker {
            worker: eligible[worker],
            name,
            field,
            problem,
        }),
        Err(e) => Err(e),
    }
}

/// The UMRLM plan for `load` on a platform where every worker's cap holds a unit.
fn plan_all(platform: &StarPlatform, load: f64, weights: Weights) -> Result<Plan, PlanError> {
    let selected = umr::select(platform, load)?;
    let workers = order(platform, &selected.workers, weights);
    let sol = umr::solve(platform, load, &workers)?;
    let caps: Vec<f64> = workers.iter().map(|&i| cap(platform, i)).collect();
    let sizes = sol.round_sizes();
    let Some(j) = freeze_at(&sol, &caps) else {
        // Memory never binds: UMRLM is UMR in UMRLM's worker order.
        return Ok(as_umr(&sol, load, sol.makespan));
    };
    let mut best = limited(platform, load, &sol, &caps, &sizes[..j]);
    // With fewer rounds the frozen sizes grow, so a round count whose plan would need too many
    // rounds may give way to a smaller one that fits.
    // UMR's `M*` is the best round count for a load sent without limit. Once memory binds, the
    // rounds before the freeze set the sizes every later round repeats; with many rounds those
    // are UMR's first, small ones, and the plan becomes thousands of tiny rounds. When the frozen
    // sizes fill less than half of the tightest cap, fewer rounds are tried (`M*` − 1 down, while
    // each does better: the first rounds grow as `M` falls), by UMRLM's own predicted makespan
    // (ties: fewer chunks).
    let filled = match j.checked_sub(1) {
        Some(prev) => (0..workers.len())
            .map(|k| sol.chunk(sizes[prev], k) / caps[k])
            .fold(0.0, f64::max),
        None => 1.0,
    };
    if filled < 0.5 {
        for m in (1..sol.rounds).rev() {
            let Some(s) = sol.with_rounds(m, load) else {
                continue;
            };
            let candidate = match freeze_at(&s, &caps) {
                Some(j) => limited(platform, load, &s, &caps, &s.round_sizes()[..j]),
                None => {
                    let mut p = as_umr(&s, load, 0.0);
                    p.predicted_makespan = predict(platform, &p).makespan;
                    Ok(p)
                }
            };
            let better = match (&candidate, &best) {
                (Err(_), Err(_)) => continue,
                (Err(_), Ok(_)) => false,
                (Ok(_), Err(_)) => true,
                (Ok(c), Ok(b)) => {
                    c.predicted_makespan < b.predicted_makespan * (1.0 - 1e-9)
                        || (c.predicted_makespan <= b.predicted_makespan * (1.0 + 1e-9)
                            && c.chunks.len() < b.chunks.len())
                }
            };
            if !better {
                break;
            }
            best = candidate;
        }
    }
    best
}

/// The first round of `sol` with a chunk above its worker's cap (`caps` by position in
/// `sol.workers`): where the freeze starts; `None`: memory never binds.
fn freeze_at(sol: &UmrSolution, caps: &[f64]) -> Option<usize> {
    sol.round_sizes()
        .iter()
        .position(|&r| (0..sol.workers.len()).any(|k| sol.chunk(r, k) > caps[k]))
}

/// UMR's rounds of `sol` as a UMRLM plan (memory never binds), predicted to end at `predicted`.
fn as_umr(sol: &UmrSolution, load: f64, predicted: f64) -> Plan {
    Plan {
        algo: Algo::Umrlm,
        chunks: sol.chunks(load),
        tail: Vec::new(),
        tail_load: 0.0,
        tail_workers: Vec::new(),
        predicted_makespan: predicted,
    }
}

/// Rounds `0..j` as UMR, then frozen rounds, then the balanced last round; refused when that
/// takes more than [`MAX_ROUNDS`] rounds or [`MAX_SENDS`] sends.
fn limited(
    platform: &StarPlatform,
    load: f64,
    sol: &UmrSolution,
    caps: &[f64],
    umr_rounds: &[f64],
) -> Result<Plan, PlanError> {
    let n = sol.workers.len();
    let mut chunks: Vec<Chunk> = Vec::new();
    for (j, &r) in umr_rounds.iter().enumerate() {
        for (k, &w) in sol.workers.iter().enumerate() {
            chunks.push(Chunk {
                round: j as u32,
                worker: w,
                size: sol.chunk(r, k),
            });
        }
    }
    // Frozen sizes: round j−1's, or round 0's scaled so every chunk fits its cap.
    let frozen: Vec<f64> = match umr_rounds.last() {
        Some(&r) => (0..n).map(|k| sol.chunk(r, k)).collect(),
        None => {
            let first: Vec<f64> = (0..n).map(|k| sol.chunk(sol.round0, k).max(0.0)).collect();
            let scale = (0..n)
                .filter(|&k| first[k] > 0.0)
                .map(|k| caps[k] / first[k])
                .fold(1.0_f64, f64::min);
            // Never below a unit (every cap holds one: [`plan`]).
            first
                .iter()
                .zip(caps)
                .map(|(c, &cap)| (c * scale).max(sol.unit).min(cap))
                .collect()
        }
    };
    let frozen_total: f64 = frozen.iter().sum();
    let cap_total: f64 = caps.iter().sum();
    let done: f64 = chunks.iter().map(|c| c.size).sum();
    let left = load - done;
    // The fewest frozen rounds that leave the last round within the caps; a few more are tried
    // too, since a last round pressed against the caps cannot finish its workers together.
    let fewest = if left > cap_total && frozen_total > 0.0 {
        ((left - cap_total) / frozen_total).ceil()
    } else {
        0.0
    };
    // Rounds: the UMR ones, the frozen ones and the last one; a send per worker in each.
    let needed = umr_rounds.len() as f64 + fewest + 1.0;
    let active = frozen.iter().filter(|&&f| f > 0.0).count() as f64;
    let sends = chunks.len() as f64 + fewest * active + n as f64;
    if needed > f64::from(MAX_ROUNDS) || sends > MAX_SENDS as f64 {
        // The worker whose memory binds: the one its frozen chunk fills most.
        let k = (0..n)
            .filter(|&k| caps[k].is_finite() && caps[k] > 0.0)
            .max_by(|&a, &b| (frozen[a] / caps[a]).total_cmp(&(frozen[b] / caps[b])))
            .unwrap_or(0);
        let worker = sol.workers[k];
        let w = &platform.workers[worker];
        let too_many = if needed > f64::from(MAX_ROUNDS) {
            format!("at most {MAX_ROUNDS}")
        } else {
            format!("{sends:.0} sends to {active} workers, at most {MAX_SENDS}")
        };
        return Err(PlanError::Worker {
            worker,
            name: w.name.clone(),
            field: "memory",
            problem: format!(
                "{} holds at most {} units per round (half of it: the next chunk arrives while \
                 one computes): {needed:.0} rounds would be needed for {load} units, {too_many}",
                w.memory.unwrap_or(f64::INFINITY),
                caps[k],
            ),
        });
    }
    let fewest = fewest as u32;
    let mut master = StarMaster::<f64>::new(platform.workers.len());
    let send = |master: &mut StarMaster<f64>, c: &Chunk| {
        master.send(
            c.worker,
            c.size,
            platform.send_time(c.worker, c.size),
            platform.compute_time(c.worker, c.size),
        );
    };
    for c in &chunks {
        send(&mut master, c);
    }
    let mut round = umr_rounds.len() as u32;
    let push_frozen = |chunks: &mut Vec<Chunk>, master: &mut StarMaster<f64>, round: u32| {
        for (k, &w) in sol.workers.iter().enumerate() {
            if frozen[k] > 0.0 {
                let c = Chunk {
                    round,
                    worker: w,
                    size: frozen[k],
                };
                send(master, &c);
                chunks.push(c);
            }
        }
    };
    for _ in 0..fewest {
        push_frozen(&mut chunks, &mut master, round);
        round += 1;
    }
    // Candidates: `fewest + extra` frozen rounds; each adds one round to the running state.
    let mut best: Option<(usize, u32, Vec<Chunk>, f64)> = None;
    // (More while each one more improves the prediction: with a worker of unlimited memory the
    // caps never bound the last round, and only enough frozen rounds keep it from taking
    // nearly all the load.)
    for extra in 0.. {
        if extra > 0 {
            if f64::from(fewest + extra) * frozen_total >= left
                || umr_rounds.len() as f64 + f64::from(fewest + extra) + 1.0 > f64::from(MAX_ROUNDS)
                || chunks.len() + sol.workers.len() > MAX_SENDS as usize
            {
                break;
            }
            push_frozen(&mut chunks, &mut master, round);
            round += 1;
        }
        let last = load - sent_total(done, &frozen, fewest + extra);
        let (last_chunks, makespan) =
            last_round(platform, &master, &sol.workers, caps, round, last, sol.unit);
        if best.as_ref().is_none_or(|b| makespan < b.3) {
            best = Some((chunks.len(), round, last_chunks, makespan));
        } else {
            // One more frozen round made it worse: more will not help.
            break;
        }
    }
    let (keep, _, last_chunks, makespan) = best.unwrap_or((chunks.len(), round, Vec::new(), 0.0));
    chunks.truncate(keep);
    if last_chunks.is_empty() {
        // Nothing worth a round is left: floating-point dust goes to the last chunk.
        let dust = load - chunks.iter().map(|c| c.size).sum::<f64>();
        if let Some(c) = chunks.last_mut() {
            c.size += dust;
        }
    }
    chunks.extend(last_chunks);
    let moved = settle_small(&mut chunks, |i| cap(platform, i), sol.unit);
    let mut plan = Plan {
        algo: Algo::Umrlm,
        chunks,
        tail: Vec::new(),
        tail_load: 0.0,
        tail_workers: Vec::new(),
        predicted_makespan: makespan,
    };
    if moved || plan.predicted_makespan == 0.0 {
        plan.predicted_makespan = predict(platform, &plan).makespan;
    }
    Ok(plan)
}

/// Removes chunks below `unit` (the last round's share of a worker finishing late, or the last
/// round's whole share when less than a unit is left): each goes into the chunk of its round
/// with the most room under its cap, else into the latest chunk of the plan with room; failing
/// both, it takes what it lacks from the latest chunk that stays at least a unit; failing that
/// too (every chunk at a cap below two units), it stays. True when a chunk changed.
fn settle_small(chunks: &mut Vec<Chunk>, cap: impl Fn(usize) -> f64, unit: f64) -> bool {
    let small = |c: &Chunk| c.size < unit * (1.0 - 1e-9);
    let mut moved = false;
    let mut k = 0;
    while k < chunks.len() {
        let c = chunks[k];
        if !small(&c) || chunks.len() == 1 {
            k += 1;
            continue;
        }
        let room = |d: &Chunk| cap(d.worker) - d.size;
        let round = c.round;
        let same_round = chunks
            .iter()
            .enumerate()
            .filter(|&(j, d)| j != k && d.round == round && !small(d) && room(d) >= c.size)
            .max_by(|a, b| room(a.1).total_cmp(&room(b.1)))
            .map(|(j, _)| j);
        let target = same_round.or_else(|| {
            (0..chunks.len())
                .rev()
                .find(|&j| j != k && !small(&chunks[j]) && room(&chunks[j]) >= c.size)
        });
        moved = true;
        if let Some(j) = target {
            chunks[j].size += c.size;
            chunks.remove(k);
            continue;
        }
        let lack = unit - c.size;
        if let Some(j) = (0..chunks.len())
            .rev()
            .find(|&j| j != k && chunks[j].size - lack >= unit)
        {
            chunks[j].size -= lack;
            chunks[k].size = unit;
        }
        k += 1;
    }
    moved
}

/// Load sent by the UMR rounds (`done`) and `rounds` frozen rounds.
fn sent_total(done: f64, frozen: &[f64], rounds: u32) -> f64 {
    done + f64::from(rounds) * frozen.iter().filter(|&&f| f > 0.0).sum::<f64>()
}

/// The last round of `total` units after the state `base`: balanced once in `workers`' order,
/// then sent in order of decreasing processing time and balanced again in that order. Returns its
/// chunks and the predicted makespan (empty when `total` is floating-point dust).
fn last_round(
    platform: &StarPlatform,
    base: &StarMaster<f64>,
    workers: &[usize],
    caps: &[f64],
    round: u32,
    total: f64,
    unit: f64,
) -> (Vec<Chunk>, f64) {
    let all = || {
        (0..platform.workers.len())
            .map(|i| base.worker_free(i))
            .fold(0.0, f64::max)
    };
    if total <= 1e-9 * total.abs().max(1.0) || total <= 0.0 {
        return (Vec::new(), all());
    }
    // The first pass only orders the workers: a coarse finish time is enough.
    let mut by_time = balance(platform, base, workers, caps, total, unit, 1e-6);
    by_time.sort_by(|a, b| {
        let ta = platform.compute_time(workers[a.0], a.1);
        let tb = platform.compute_time(workers[b.0], b.1);
        tb.total_cmp(&ta).then(a.0.cmp(&b.0))
    });
    let order: Vec<usize> = by_time.iter().map(|&(k, _)| workers[k]).collect();
    let order_caps: Vec<f64> = by_time.iter().map(|&(k, _)| caps[k]).collect();
    let mut m = base.clone();
    let chunks: Vec<Chunk> = balance(platform, base, &order, &order_caps, total, unit, 1e-10)
        .into_iter()
        .map(|(k, size)| {
            let worker = order[k];
            m.send(
                worker,
                size,
                platform.send_time(worker, size),
                platform.compute_time(worker, size),
            );
            Chunk {
                round,
                worker,
                size,
            }
        })
        .collect();
    let makespan = (0..platform.workers.len())
        .map(|i| m.worker_free(i))
        .fold(0.0, f64::max);
    (chunks, makespan)
}

/// Sizes of a last round of `total` units over `workers` (send order), after the state `base`:
/// the common finish time `T` is bisected so the chunks `x_k(T) ∈ [0, cap_k]` add up to `total`.
/// `T` is found to `tolerance` relative; the sizes are rescaled to add up to `total` exactly.
/// A worker whose chunk would be below `unit` gets none (it finishes about `T` as it is).
/// Returns `(position in workers, size)` for the non-empty chunks.
fn balance(
    platform: &StarPlatform,
    base: &StarMaster<f64>,
    workers: &[usize],
    caps: &[f64],
    total: f64,
    unit: f64,
    tolerance: f64,
) -> Vec<(usize, f64)> {
    let sizes_at = |t_finish: f64| -> Vec<f64> {
        let mut m = base.clone();
        workers
            .iter()
            .zip(caps)
            .map(|(&i, &cap)| {
                let w = &platform.workers[i];
                let start = m.send_ready(i);
                // Finish at T whether the chunk waits for the worker or the worker for the chunk.
                let after_free = w.speed * (t_finish - m.worker_free(i) - w.compute_latency);
                let after_arrival = w.speed
                    * (t_finish - start - w.network_latency - w.compute_latency)
                    / (1.0 + w.speed / w.bandwidth);
                let x = after_free.min(after_arrival).clamp(0.0, cap);
                let x = if x < unit { 0.0 } else { x };
                if x > 0.0 {
                    m.send(i, x, platform.send_time(i, x), platform.compute_time(i, x));
                }
                x
            })
            .collect()
    };
    let sum = |v: &[f64]| v.iter().sum::<f64>();
    let lo0 = base.master_free();
    let mut lo = lo0;
    // The bracket on `T` widens from the master's free time by a span that doubles until the
    // sizes reach `total` or `lo0 + span` overflows (then every chunk is at its cap). The span
    // is kept apart from `hi`: it used to be read back as `hi − lo0`, which past 2^53 s (a worker
    // of 10⁻¹⁶ units/s takes the clock there) rounds a one-second span to 0, and doubling 0 spun
    // for ever (`sim divisible --algo umrlm` hung). Starting at 4 ulps of `lo0` or more, each
    // doubling moves `hi`; from at least 1 s, the span overflows after at most 1,024 of them.
    let mut span = 1.0_f64.max(4.0 * f64::EPSILON * lo0.abs());
    let mut hi = lo0 + span;
    while hi.is_finite() && sum(&sizes_at(hi)) < total {
        span *= 2.0;
        hi = lo0 + span;
    }
    // Each halving halves `hi − lo`, which starts at most `hi` (`lo0 ≥ 0`): about
    // log2(1/tolerance) halvings ([`MAX_HALVINGS`]).
    for _ in 0..MAX_HALVINGS {
        if hi - lo <= tolerance * hi.abs().max(1e-9) {
            break;
        }
        let mid = 0.5 * (lo + hi);
        if sum(&sizes_at(mid)) < total {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    let x = sizes_at(hi);
    let scale = total / sum(&x);
    x.into_iter()
        .map(|v| v * scale)
        .enumerate()
        .filter(|&(_, v)| v > 0.0)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::super::testing::{Rng, random_platform};
    use super::super::{PlanOptions, plan as plan_any};
    use super::*;

    #[test]
    fn without_memory_limits_umrlm_is_umr_in_its_own_order() {
        let mut rng = Rng(5);
        let p = random_platform(&mut rng);
        let a = plan_any(Algo::Umr, &p, 5e4, &PlanOptions::default()).expect("umr");
        let b = plan_any(Algo::Umrlm, &p, 5e4, &PlanOptions::default()).expect("umrlm");
        assert!((a.predicted_makespan - b.predicted_makespan).abs() < 1e-9 * a.predicted_makespan);
        assert_eq!(a.chunks.len(), b.chunks.len());
    }

    #[test]
    fn with_memory_every_chunk_fits_half_the_memory_and_the_load_is_planned() {
        let mut rng = Rng(9);
        for _ in 0..40 {
            let mut p = random_platform(&mut rng);
            let w = rng.uniform(1e4, 1e5);
            for wk in &mut p.workers {
                wk.memory = Some(rng.uniform(0.002, 0.05) * w);
            }
            let plan = plan(&p, w, Weights::default()).expect("umrlm plans");
            for c in &plan.chunks {
                assert!(c.size > 0.0);
                assert!(c.size <= cap(&p, c.worker) * (1.0 + 1e-9), "{c:?}");
            }
            assert!((plan.load() - w).abs() < 1e-6 * w);
            let pred = predict(&p, &plan);
            for (_, i, _, t) in &pred.sends {
                assert!(t.held <= p.workers[*i].memory.unwrap_or(f64::INFINITY) * (1.0 + 1e-9));
            }
            assert!(pred.makespan >= p.lower_bound(w));
        }
    }

    fn star(workers: &[(f64, f64, Option<f64>)]) -> StarPlatform {
        StarPlatform {
            workers: workers
                .iter()
                .enumerate()
                .map(
                    |(i, &(speed, bandwidth, memory))| super::super::StarWorker {
                        name: format!("w{i}"),
                        speed,
                        compute_latency: 0.01,
                        bandwidth,
                        network_latency: 0.0005,
                        memory,
                    },
                )
                .collect(),
        }
    }

    /// A small memory beside two large ones: with UMR's `M*` the freeze repeated its first,
    /// tiny rounds (72,812 rounds, 2.1 × W/ΣS); with the round count chosen for UMRLM's own
    /// makespan the plan is within 5 % of the bound in a few thousand rounds.
    #[test]
    fn a_small_memory_does_not_freeze_the_plan_at_umrs_tiny_first_rounds() {
        let p = star(&[
            (10.0, 1000.0, Some(4.0)),
            (10.0, 1000.0, Some(1000.0)),
            (10.0, 1000.0, Some(1000.0)),
        ]);
        let w = 20_000.0;
        let plan = plan(&p, w, Weights::default()).expect("plans");
        let pred = predict(&p, &plan);
        assert!(
            pred.makespan <= 1.06 * p.lower_bound(w),
            "{} against {}",
            pred.makespan,
            p.lower_bound(w)
        );
        assert!(plan.chunks.len() < 12_000, "{} chunks", plan.chunks.len());
        assert!((plan.load() - w).abs() < 1e-6 * w);
    }

    /// A worker of unlimited memory beside two capped ones: the last round is not bounded by
    /// the caps, and used to hand the slow unlimited worker 1,815 of 2,000 units (8 × W/ΣS).
    #[test]
    fn an_unlimited_worker_does_not_take_the_whole_last_round() {
        let p = star(&[
            (100.0, 1000.0, Some(50.0)),
            (20.0, 500.0, None),
            (50.0, 800.0, Some(200.0)),
        ]);
        let w = 2_000.0;
        let plan = plan(&p, w, Weights::default()).expect("plans");
        let pred = predict(&p, &plan);
        assert!(
            pred.makespan <= 1.1 * p.lower_bound(w),
            "{} against {}",
            pred.makespan,
            p.lower_bound(w)
        );
        for c in &plan.chunks {
            assert!(c.size <= cap(&p, c.worker) * (1.0 + 1e-9), "{c:?}");
        }
    }

    /// A worker of tiny memory needs a round per half of it: 10⁻⁹ units planned 10¹² rounds
    /// (allocating until the process aborted), 0.001 units 2,000,000 rounds (gigabytes). A
    /// memory below two units cannot hold two chunks of a unit: such a worker takes none, and a
    /// platform of only such workers is refused; a memory of two units for a load of 10⁶ would
    /// still take 10⁶ rounds.
    #[test]
    fn a_memory_that_needs_too_many_rounds_is_refused_naming_the_worker() {
        for memory in [1e-9, 0.001, 1.9] {
            let p = star(&[(100.0, 1000.0, Some(memory))]);
            let e = plan(&p, 1000.0, Weights::default())
                .err()
                .map(|e| e.to_string());
            let want = format!(
                "worker 0 (`w0`): memory {memory} is the largest memory, and it holds less than \
                 two chunks of 1 load units (the smallest chunk: one computes while the next \
                 arrives)"
            );
            assert_eq!(e.as_deref(), Some(want.as_str()));
        }
        let p = star(&[(100.0, 1000.0, Some(2.0))]);
        let e = plan(&p, 1e6, Weights::default())
            .err()
            .map(|e| e.to_string());
        let want = "worker 0 (`w0`): memory 2 holds at most 1 units per round (half of it: the \
                    next chunk arrives while one computes): 1000000 rounds would be needed for \
                    1000000 units, at most 100000";
        assert_eq!(e.as_deref(), Some(want));
        // Fewer rounds, but of many workers: the sends are bounded too.
        let p = star(&vec![(100.0, 1e5, Some(2.0)); 20]);
        let e = plan(&p, 1.5e6, Weights::default())
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(e.contains("sends to 20 workers, at most 1000000"), "{e}");
        // A worker that cannot hold a unit beside one that can: it takes no chunk.
        let p = star(&[(100.0, 1000.0, Some(1.0)), (50.0, 1000.0, Some(100.0))]);
        let plan = plan(&p, 500.0, Weights::default()).expect("plans on worker 1");
        assert!(plan.chunks.iter().all(|c| c.worker == 1));
        assert!((plan.load() - 500.0).abs() < 1e-9);
    }

    /// The review's platform: ten workers of about 10⁶ units/s, no latencies, links of 10¹²
    /// units/s, memories of 120 units. UMR wanted ever more rounds, UMRLM froze its tiny first
    /// ones: 1,000 units went out as 513,240 sends (1.4 s, 93 MB), 10,000 as 884,110.
    #[test]
    fn a_platform_without_latencies_gets_no_more_sends_than_units() {
        let speeds = [
            0.9572, 0.5948, 1.3477, 1.2305, 0.6407, 0.9416, 1.2013, 0.8121, 0.5343, 1.3104,
        ];
        let p = StarPlatform {
            workers: speeds
                .iter()
                .enumerate()
                .map(|(i, s)| super::super::StarWorker {
                    name: format!("w{i}"),
                    speed: s * 1e6,
                    compute_latency: 0.0,
                    bandwidth: 1e12,
                    network_latency: 0.0,
                    memory: Some(120.0),
                })
                .collect(),
        };
        for w in [1_000.0, 10_000.0, 100_000.0, 7.5, 0.4] {
            let plan = plan(&p, w, Weights::default()).expect("plans");
            assert!(
                plan.chunks.len() as f64 <= w.ceil(),
                "{w} units: {} sends",
                plan.chunks.len()
            );
            let unit = super::super::min_chunk(w) * (1.0 - 1e-9);
            assert!(
                plan.chunks.iter().all(|c| c.size >= unit),
                "{w} units: a chunk below a unit"
            );
            assert!((plan.load() - w).abs() <= 1e-9 * w, "{w} units");
            for c in &plan.chunks {
                assert!(c.size <= cap(&p, c.worker) * (1.0 + 1e-9), "{c:?}");
            }
            // The fewest sends the caps allow, give or take a round.
            let fewest = (w / 60.0).ceil();
            assert!(
                (plan.chunks.len() as f64) < 3.0 * fewest + 10.0,
                "{w} units: {} sends",
                plan.chunks.len()
            );
        }
    }

    /// A worker of 10⁻¹⁶ units/s with a memory puts the master's clock past 2^53 s, where
    /// adding a second changes nothing: the last round's bisection started its bracket a second
    /// wide, could never widen it, and `sim divisible --algo umrlm` spun for ever. The plan now
    /// comes back (the simulator then refuses it as longer than its clock holds).
    #[test]
    fn a_worker_so_slow_the_clock_passes_2_to_the_53_seconds_does_not_hang_the_plan() {
        let mut p = star(&[(1e-16, 100.0, Some(50.0))]);
        p.workers[0].compute_latency = 0.01;
        p.workers[0].network_latency = 0.001;
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            tx.send(plan(&p, 100.0, Weights::default())).ok();
        });
        let plan = rx
            .recv_timeout(std::time::Duration::from_secs(60))
            .expect("the plan comes back within a minute")
            .expect("a plan");
        assert!((plan.load() - 100.0).abs() < 1e-9);
        assert!(
            plan.predicted_makespan >= 0.99e18,
            "{}",
            plan.predicted_makespan
        );
        for c in &plan.chunks {
            assert!(c.size <= 25.0 * (1.0 + 1e-9), "{c:?}");
        }
    }

    #[test]
    fn chunks_below_a_unit_join_a_chunk_with_room_or_borrow_from_a_large_one() {
        let c = |round, worker, size| Chunk {
            round,
            worker,
            size,
        };
        // Into the chunk of its round with the most room.
        let mut v = vec![c(0, 0, 5.0), c(1, 0, 5.0), c(1, 1, 9.0), c(1, 2, 0.3)];
        assert!(settle_small(&mut v, |_| 10.0, 1.0));
        assert_eq!(v, vec![c(0, 0, 5.0), c(1, 0, 5.3), c(1, 1, 9.0)]);
        // No room in its round: the latest chunk with room.
        let mut v = vec![c(0, 0, 5.0), c(1, 0, 10.0), c(1, 1, 0.5)];
        assert!(settle_small(&mut v, |_| 10.0, 1.0));
        assert_eq!(v, vec![c(0, 0, 5.5), c(1, 0, 10.0)]);
        // No room anywhere: it borrows what it lacks.
        let mut v = vec![c(0, 0, 4.0), c(0, 1, 4.0), c(1, 1, 0.25)];
        assert!(settle_small(&mut v, |_| 4.0, 1.0));
        assert_eq!(v, vec![c(0, 0, 4.0), c(0, 1, 3.25), c(1, 1, 1.0)]);
        // Nothing small: nothing moves.
        let mut v = vec![c(0, 0, 1.0), c(0, 1, 2.0)];
        assert!(!settle_small(&mut v, |_| 4.0, 1.0));
    }

    #[test]
    fn compute_first_weights_put_the_fastest_worker_first() {
        let mut rng = Rng(1);
        let p = random_platform(&mut rng);
        let all: Vec<usize> = (0..p.workers.len()).collect();
        let o = order(
            &p,
            &all,
            Weights {
                c1: 1.0,
                c2: 0.0,
                c3: 0.0,
            },
        );
        for pair in o.windows(2) {
            assert!(p.workers[pair[0]].speed >= p.workers[pair[1]].speed);
        }
    }
}
