//! The one-port star simulator (spec 03, "Model"): the master sends a plan's chunks serially
//! (`nLat_i + size/B_i`), each worker computes a chunk (`cLat_i + size/S_i`) once it has arrived
//! and the previous one is done, receiving while it computes. Sends follow the core's
//! [`StarMaster`] protocol (one receive buffer per worker; RUMR's tail to the worker with room
//! first).
//!
//! Time is integer nanoseconds: every duration is rounded to the nearest nanosecond once, so a run
//! is exact and deterministic. With `error = E > 0`, each send's transfer and compute take
//! `size/B_i·f` and `size/S_i·g` instead of `size/B_i` and `size/S_i`, with `f`, `g` drawn
//! independently and uniformly from `[1 − E, 1 + E]` (a per-chunk multiplicative error on
//! bandwidth and speed; latencies are exact) from a PCG stream seeded by `seed`.
//!
//! Memory (the core's rule): at each send start the chunks the worker holds, the new one
//! included, must fit in its `memory`; the first send that breaks it makes the run infeasible
//! ([`DivisibleError::Infeasible`]). A relative slack of 1e-9 absorbs floating-point rounding of
//! chunk sizes that fill a memory exactly.
//!
//! Length: a run's times must fit the integer clock. A load whose lower bound `W/ΣS`, or a plan
//! whose predicted schedule, ends after [`MAX_SCHEDULE_SECS`] (100 years) is refused
//! ([`DivisibleError::TooLong`], [`check_load`]), and a send whose times (errors included) would
//! still pass the clock's end stops the run with the same error rather than wrap or saturate.

use hetsched_core::policy::divisible::{
    Algo, MAX_SCHEDULE_SECS, Plan, PlanError, StarMaster, StarPlatform, predict,
};
use hetsched_core::time::{NANOS_PER_SEC, Time, to_secs};
use rand::{Rng, SeedableRng};
use rand_pcg::Pcg64;
use thiserror::Error;

/// Settings of one run.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StarConfig {
    /// Relative prediction error `E` in `[0, 1)` (0 = the platform is exactly as declared).
    pub error: f64,
    /// Seed of the error stream.
    pub seed: u64,
}

impl Default for StarConfig {
    fn default() -> Self {
        StarConfig {
            error: 0.0,
            seed: 1,
        }
    }
}

/// One send as it happened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SendRecord {
    /// Round.
    pub round: u32,
    /// Worker index.
    pub worker: u32,
    /// Size, load units (as `f64` bits: records stay `Eq` and compact).
    pub size_bits: u64,
    /// The master starts sending.
    pub send_start: Time,
    /// The chunk has arrived.
    pub send_end: Time,
    /// The worker starts computing it.
    pub compute_start: Time,
    /// The worker is done with it.
    pub compute_end: Time,
}

impl SendRecord {
    /// Size in load units.
    pub fn size(&self) -> f64 {
        f64::from_bits(self.size_bits)
    }
}

/// A finished run.
#[derive(Clone, Debug, PartialEq)]
pub struct StarRun {
    /// The planner.
    pub algo: Algo,
    /// Total load.
    pub load: f64,
    /// The platform as declared.
    pub platform: StarPlatform,
    /// Every send, in send order.
    pub sends: Vec<SendRecord>,
    /// The last compute end.
    pub makespan: Time,
}

impl StarRun {
    /// Makespan, seconds.
    pub fn makespan_s(&self) -> f64 {
        to_secs(self.makespan)
    }

    /// Number of rounds.
    pub fn rounds(&self) -> u32 {
        self.sends.iter().map(|s| s.round + 1).max().unwrap_or(0)
    }

    /// Per worker: time spent computing divided by the makespan.
    pub fn busy_fractions(&self) -> Vec<f64> {
        let mut busy = vec![0u64; self.platform.workers.len()];
        for s in &self.sends {
            busy[s.worker as usize] += s.compute_end - s.compute_start;
        }
        busy.into_iter()
            .map(|b| {
                if self.makespan == 0 {
                    0.0
                } else {
                    b as f64 / self.makespan as f64
                }
            })
            .collect()
    }

    /// Spec 03's lower bound `W/ΣS`, seconds.
    pub fn lower_bound_s(&self) -> f64 {
        self.platform.lower_bound(self.load)
    }
}

/// Why a plan could not run.
#[derive(Clone, Debug, Error, PartialEq)]
pub enum DivisibleError {
    /// The planner refused.
    #[error(transparent)]
    Plan(#[from] PlanError),
    /// A send broke the memory rule.
    #[error(
        "infeasible: worker {worker} (`{name}`) in round {round} would hold {held:.3} load units \
         (the chunk being sent and those not yet computed) but has memory for {memory:.3}: \
         overflow {overflow:.3}"
    )]
    Infeasible {
        /// Worker index.
        worker: usize,
        /// Worker name.
        name: String,
        /// Round of the send.
        round: u32,
        /// What it would hold.
        held: f64,
        /// Its memory.
        memory: f64,
        /// `held − memory`.
        overflow: f64,
    },
    /// A setting is out of range.
    #[error("{0}")]
    Config(String),
    /// The schedule's times would not fit the simulator's clock.
    #[error(
        "the schedule is too long to simulate: {what} {} s (about {} years), beyond the \
         {MAX_YEARS} years the simulator's clock holds",
        short(*.secs),
        short(*.years)
    )]
    TooLong {
        /// The quantity that is too long, in words.
        what: String,
        /// Its length, seconds (may be infinite).
        secs: f64,
        /// The same in years.
        years: f64,
    },
}

/// `x` in a few digits: plain below a billion, else in scientific notation.
fn short(x: f64) -> String {
    if x.abs() < 1e9 {
        format!("{}", (x * 10.0).round() / 10.0)
    } else {
        format!("{x:.3e}")
    }
}

/// [`MAX_SCHEDULE_SECS`] in years, for messages.
const MAX_YEARS: u32 = 100;
const SECS_PER_YEAR: f64 = 365.0 * 24.0 * 3600.0;

fn too_long(what: String, secs: f64) -> DivisibleError {
    DivisibleError::TooLong {
        what,
        secs,
        years: secs / SECS_PER_YEAR,
    }
}

/// Seconds to the nearest nanosecond, or `None` when they do not fit the clock.
fn ns(s: f64) -> Option<Time> {
    let x = (s * NANOS_PER_SEC as f64).round();
    // `Time::MAX as f64` rounds up to 2^64, itself out of range.
    (x.is_finite() && x >= 0.0 && x < Time::MAX as f64).then_some(x as Time)
}

/// Refuses a `load` that is not a positive number, or whose lower bound `W/ΣS` on `platform`
/// alone passes [`MAX_SCHEDULE_SECS`]: checked before planning, so planners never see it.
pub fn check_load(platform: &StarPlatform, load: f64) -> Result<(), DivisibleError> {
    platform.validate()?;
    if !(load.is_finite() && load > 0.0) {
        return Err(PlanError::Load(load).into());
    }
    let lb = platform.lower_bound(load);
    if lb.is_nan() || lb > MAX_SCHEDULE_SECS {
        return Err(too_long(
            format!("a load of {} units needs at least W/ΣS =", short(load)),
            lb,
        ));
    }
    Ok(())
}

/// Runs `plan` for `load` units on `platform`.
pub fn simulate(
    platform: &StarPlatform,
    plan: &Plan,
    load: f64,
    config: &StarConfig,
) -> Result<StarRun, DivisibleError> {
    check_load(platform, load)?;
    let e = config.error;
    if !(e.is_finite() && (0.0..1.0).contains(&e)) {
        return Err(DivisibleError::Config(format!(
            "the error must be in [0, 1), got {e}"
        )));
    }
    let n = platform.workers.len();
    if let Some(c) = plan.chunks.iter().find(|c| c.worker >= n) {
        return Err(DivisibleError::Config(format!(
            "the plan sends to worker {} but the platform has {n}",
            c.worker
        )));
    }
    if let Some(&i) = plan.tail_workers.iter().find(|&&i| i >= n) {
        return Err(DivisibleError::Config(format!(
            "the plan hands tail chunks to worker {i} but the platform has {n}"
        )));
    }
    let sizes = plan
        .chunks
        .iter()
        .map(|c| c.size)
        .chain(plan.tail.iter().map(|c| c.time));
    if let Some(bad) = sizes.into_iter().find(|x| !(x.is_finite() && *x >= 0.0)) {
        return Err(DivisibleError::Config(format!(
            "the plan has a chunk of size (or tail time) {bad}: expected a non-negative number"
        )));
    }
    let predicted = predict(platform, plan);
    if predicted.makespan.is_nan() || predicted.makespan > MAX_SCHEDULE_SECS {
        let last = predicted
            .sends
            .iter()
            .max_by(|a, b| a.3.compute_end.total_cmp(&b.3.compute_end))
            .map(|s| s.1)
            .unwrap_or_default();
        return Err(too_long(
            format!(
                "its {} plan ends (worker {last} `{}` last) at",
                plan.algo, platform.workers[last].name
            ),
            predicted.makespan,
        ));
    }
    let mut rng = Pcg64::seed_from_u64(config.seed);
    let mut factor = move || {
        if e > 0.0 {
            rng.random_range(1.0 - e..=1.0 + e)
        } else {
            1.0
        }
    };
    let mut master = StarMaster::<Time>::new(n);
    let mut sends = Vec::with_capacity(plan.chunks.len() + plan.tail.len());
    let mut makespan: Time = 0;
    let mut send = |master: &mut StarMaster<Time>, round: u32, i: usize, size: f64| {
        let w = &platform.workers[i];
        let transfer_s = w.network_latency + size / w.bandwidth * factor();
        let compute_s = w.compute_latency + size / w.speed * factor();
        let start_s = to_secs(master.send_ready(i));
        let past_end = || {
            too_long(
                format!(
                    "the send to worker {i} (`{}`) in round {round} would end after",
                    w.name
                ),
                start_s + transfer_s + compute_s,
            )
        };
        let (Some(transfer), Some(compute)) = (ns(transfer_s), ns(compute_s)) else {
            return Err(past_end());
        };
        let Ok(t) = master.try_send(i, size, transfer, compute) else {
            return Err(past_end());
        };
        if let Some(memory) = w.memory
            && t.held > memory * (1.0 + 1e-9)
        {
            return Err(DivisibleError::Infeasible {
                worker: i,
                name: w.name.clone(),
                round,
                held: t.held,
                memory,
                overflow: t.held - memory,
            });
        }
        makespan = makespan.max(t.compute_end);
        sends.push(SendRecord {
            round,
            worker: i as u32,
            size_bits: size.to_bits(),
            send_start: t.send_start,
            send_end: t.send_end,
            compute_start: t.compute_start,
            compute_end: t.compute_end,
        });
        Ok(())
    };
    plan.drive(platform, &mut master, &mut send)?;
    Ok(StarRun {
        algo: plan.algo,
        load,
        platform: platform.clone(),
        sends,
        makespan,
    })
}
