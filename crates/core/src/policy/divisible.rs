//! Multi-round divisible-load planners on a one-port star (spec 03): [`umr`], [`umrlm`] (the
//! seed's memory-limited UMR), [`rumr`] (robust UMR) and [`static_plan`] (one equal-time chunk per
//! worker, the naive baseline).
//!
//! A planner is a pure function of a [`StarPlatform`] (plain numbers: speeds, latencies,
//! bandwidths, memories — measured or declared, never simulator state), the total load `W` and
//! [`PlanOptions`]; it returns a [`Plan`]: the ordered list of sends ([`Chunk`]: round, worker,
//! size) the master makes, plus, for RUMR, the [`TailChunk`]s handed out at run time to whichever
//! worker has room first. The simulator and (later) the runtime drive the same plans through the
//! one [`StarMaster`] protocol below.
//!
//! # The platform model (spec 03, "Model")
//! The master sends serially: a send of `c` units to worker `i` occupies it for
//! `nLat_i + c/B_i`. Worker `i` computes a chunk in `cLat_i + c/S_i`, starting when the chunk has
//! arrived and its previous chunk is done; it receives while it computes.
//!
//! # The memory rule (spec 03's OPEN point, fixed here)
//! **A chunk occupies its worker's memory from the start of its send until the end of its
//! compute.** A plan is infeasible if, at the start of any send, the chunks its worker then holds
//! (the one being sent included) add up to more than the worker's `memory`. A chunk whose compute
//! ends at the very instant a send starts is already released.
//!
//! # The master's protocol
//! A worker has one receive buffer: besides the chunk it computes it holds at most one more. The
//! master therefore starts a send to worker `i` at `max(master free, room_i)`, where `room_i` is
//! the end of the compute of `i`'s second-to-last chunk. UMR's own schedule never waits on this
//! (a worker holds at most the chunk it computes and the next round's), so UMR runs exactly as
//! spec 03's reference recursion says; UMRLM's frozen rounds, whose sends are shorter than their
//! computes, would otherwise pile chunks up on the workers. RUMR's tail chunks go, one at a time,
//! to the worker whose `room` comes first (ties: the earlier worker in the plan's order) — the
//! "first idle worker" of spec 03 as a master that only sees completions can know it.

pub mod estimate;
pub mod online;
pub mod rumr;
pub mod static_plan;
pub mod umr;
pub mod umrlm;

use serde::{Deserialize, Serialize};
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::convert::Infallible;
use std::fmt;
use std::ops::Add;
use std::str::FromStr;
use thiserror::Error;

/// The smallest chunk a planner cuts: one load unit (a row, a record). Spec 03 lets a load be cut
/// into chunks of any size; hetsched's planners never cut one below a unit (nor below the whole
/// load, when that is less: [`min_chunk`]), so a plan never has more sends than units — without
/// this floor, a platform without latencies makes UMR want ever more, ever smaller rounds (a
/// plan of 1,000 units took 513,250 sends). See `docs/divisible.md`, "Choices where spec 03
/// leaves room".
pub const MIN_CHUNK: f64 = 1.0;

/// The smallest chunk of a plan of `load` units: [`MIN_CHUNK`], or the whole load when less.
pub fn min_chunk(load: f64) -> f64 {
    MIN_CHUNK.min(load)
}

/// One worker of a star platform, in spec 03's terms and units (load units and seconds).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StarWorker {
    /// Name, for reports.
    pub name: String,
    /// Compute speed `S_i`, load units per second.
    pub speed: f64,
    /// Compute start-up latency `cLat_i`, seconds.
    pub compute_latency: f64,
    /// Link rate `B_i` from the master, load units per second.
    pub bandwidth: f64,
    /// Link latency `nLat_i`, seconds.
    pub network_latency: f64,
    /// Memory `buf_i`, load units it can hold; `None` = unlimited.
    pub memory: Option<f64>,
}

/// A master and its workers (spec 03, "Model").
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct StarPlatform {
    /// The workers; a [`Chunk::worker`] indexes this list.
    pub workers: Vec<StarWorker>,
}

impl StarPlatform {
    /// Checks what every planner relies on: at least one worker, positive finite speeds and
    /// bandwidths, non-negative latencies, positive memories.
    pub fn validate(&self) -> Result<(), PlanError> {
        if self.workers.is_empty() {
            return Err(PlanError::NoWorkers);
        }
        for (i, w) in self.workers.iter().enumerate() {
            let bad = |field: &'static str, problem: &str| PlanError::Worker {
                worker: i,
                name: w.name.clone(),
                field,
                problem: problem.to_string(),
            };
            if !(w.speed.is_finite() && w.speed > 0.0) {
                return Err(bad("speed", "must be a positive number"));
            }
            if !(w.bandwidth.is_finite() && w.bandwidth > 0.0) {
                return Err(bad("bandwidth", "must be a positive number"));
            }
            if !(w.compute_latency.is_finite() && w.compute_latency >= 0.0) {
                return Err(bad("compute_latency", "must be a non-negative number"));
            }
            if !(w.network_latency.is_finite() && w.network_latency >= 0.0) {
                return Err(bad("network_latency", "must be a non-negative number"));
            }
            if let Some(m) = w.memory
                && (m <= 0.0 || m.is_nan())
            {
                return Err(bad("memory", "must be a positive number"));
            }
        }
        Ok(())
    }

    /// `ΣS`.
    pub fn total_speed(&self) -> f64 {
        self.workers.iter().map(|w| w.speed).sum()
    }

    /// The lower bound `W/ΣS` of spec 03 ("Beyond the seed"): every worker busy from t = 0.
    pub fn lower_bound(&self, load: f64) -> f64 {
        load / self.total_speed()
    }

    /// Time to send `size` units to worker `i` (spec 03: `nLat_i + c/B_i`).
    pub fn send_time(&self, i: usize, size: f64) -> f64 {
        let w = &self.workers[i];
        w.network_latency + size / w.bandwidth
    }

    /// Time for worker `i` to compute `size` units (spec 03: `cLat_i + c/S_i`).
    pub fn compute_time(&self, i: usize, size: f64) -> f64 {
        let w = &self.workers[i];
        w.compute_latency + size / w.speed
    }
}

/// One send of a plan: `size` load units to `worker` in `round`.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Chunk {
    /// 0-based round.
    pub round: u32,
    /// Index into [`StarPlatform::workers`].
    pub worker: usize,
    /// Load units.
    pub size: f64,
}

/// A chunk whose worker is chosen at run time (RUMR's second phase): the next one goes to the
/// worker that has room first, sized to `time` seconds of its compute (`time·S_i` units, at
/// most what is left of [`Plan::tail_load`]), so slow and fast workers finish together.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct TailChunk {
    /// 0-based round (RUMR numbers its factoring batches after the UMR rounds).
    pub round: u32,
    /// Seconds of compute (without the latency) the chunk is worth.
    pub time: f64,
}

/// The planners hetsched ships.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Algo {
    /// Uniform multi-round (Yang & Casanova).
    Umr,
    /// UMR with limited memory (the seed).
    Umrlm,
    /// Robust UMR: growing UMR rounds, then shrinking factoring chunks.
    Rumr,
    /// One equal-time chunk per worker.
    Static,
}

impl Algo {
    /// Every planner.
    pub const ALL: [Algo; 4] = [Algo::Umr, Algo::Umrlm, Algo::Rumr, Algo::Static];

    /// The name users write.
    pub fn as_str(self) -> &'static str {
        match self {
            Algo::Umr => "umr",
            Algo::Umrlm => "umrlm",
            Algo::Rumr => "rumr",
            Algo::Static => "static",
        }
    }
}

impl fmt::Display for Algo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Algo {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Algo::ALL
            .into_iter()
            .find(|a| a.as_str() == s)
            .ok_or_else(|| {
                format!(
                    "unknown divisible-load algorithm `{s}`: expected umr, umrlm, rumr or static"
                )
            })
    }
}

/// UMRLM's worker-order weights (spec 03, UMRLM d): workers go by decreasing
/// `c1·S_i + c2·B_i + c3·buf_i`, each quantity divided by its largest value over the workers so
/// the weights compare like with like (the seed adds raw rows/s and rows).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Weights {
    /// Weight of compute speed.
    pub c1: f64,
    /// Weight of link rate.
    pub c2: f64,
    /// Weight of memory.
    pub c3: f64,
}

impl Default for Weights {
    /// The seed's best: compute first, `c1 = 0.8, c2 = c3 = 0.1`.
    fn default() -> Self {
        Weights {
            c1: 0.8,
            c2: 0.1,
            c3: 0.1,
        }
    }
}

/// Settings of the planners.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PlanOptions {
    /// UMRLM's worker order.
    pub weights: Weights,
    /// The expected relative prediction error (RUMR sizes its second phase from it).
    pub error: f64,
}

/// A planner's answer: what the master sends, in order.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Plan {
    /// The planner.
    pub algo: Algo,
    /// Sends with a fixed worker, in send order.
    pub chunks: Vec<Chunk>,
    /// Sends after `chunks` whose worker is chosen at run time (RUMR only); past the end of the
    /// list the last one repeats until [`Plan::tail_load`] is sent.
    pub tail: Vec<TailChunk>,
    /// Load units handed out by `tail`.
    pub tail_load: f64,
    /// Workers that may receive tail chunks, in priority order for ties.
    pub tail_workers: Vec<usize>,
    /// The planner's own makespan prediction, seconds (UMR: spec 03's `Ex(M)`).
    pub predicted_makespan: f64,
}

impl Plan {
    /// Number of rounds.
    pub fn rounds(&self) -> u32 {
        self.chunks
            .iter()
            .map(|c| c.round)
            .chain(self.tail.iter().map(|c| c.round))
            .max()
            .map_or(0, |r| r + 1)
    }

    /// Total load planned.
    pub fn load(&self) -> f64 {
        self.chunks.iter().map(|c| c.size).sum::<f64>() + self.tail_load
    }

    /// Makes every send of the plan through `master`, in order: `send(master, round, worker,
    /// size)` performs one (with whatever durations its caller's clock uses). The fixed chunks
    /// first, then the tail, each tail chunk to [`StarMaster::first_with_room`]. This is the one
    /// copy of the dispatch rule that planners, the simulator and the runtime share.
    pub fn drive<T: Clock, E>(
        &self,
        platform: &StarPlatform,
        master: &mut StarMaster<T>,
        mut send: impl FnMut(&mut StarMaster<T>, u32, usize, f64) -> Result<(), E>,
    ) -> Result<(), E> {
        for c in &self.chunks {
            send(master, c.round, c.worker, c.size)?;
        }
        let Some(last) = self.tail.last() else {
            return Ok(());
        };
        let mut left = self.tail_load;
        let mut index = 0;
        // A remainder below a unit (or floating-point dust) joins the chunk before it.
        let unit = min_chunk(self.tail_load);
        let dust = self.tail_load * 1e-12;
        // Workers by (room, priority): the same choice as `first_with_room`, in O(log N).
        let mut by_room: BinaryHeap<Reverse<(u64, usize)>> = self
            .tail_workers
            .iter()
            .enumerate()
            .map(|(k, &i)| Reverse((master.workers[i].room.order_key(), k)))
            .collect();
        while left > dust {
            let Some(Reverse((_, k))) = by_room.pop() else {
                break;
            };
            let i = self.tail_workers[k];
            let q = self.tail.get(index).unwrap_or(last);
            let mut size = (q.time * platform.workers[i].speed).min(left);
            if left - size < unit {
                size = left;
            }
            send(master, q.round, i, size)?;
            by_room.push(Reverse((master.workers[i].room.order_key(), k)));
            left -= size;
            index += 1;
        }
        Ok(())
    }
}

/// Why no plan could be made.
#[derive(Clone, Debug, Error, PartialEq)]
pub enum PlanError {
    /// The platform has no worker.
    #[error("the platform has no workers: add at least one [[worker]] table")]
    NoWorkers,
    /// The load is not a positive number.
    #[error("the load must be a positive number of load units, got {0}")]
    Load(f64),
    /// A worker's figure is unusable.
    #[error("worker {worker} (`{name}`): {field} {problem}")]
    Worker {
        /// Index.
        worker: usize,
        /// Name.
        name: String,
        /// The field.
        field: &'static str,
        /// What is wrong.
        problem: String,
    },
    /// A weight or the error is out of range.
    #[error("{field} {problem}")]
    Option {
        /// The option.
        field: &'static str,
        /// What is wrong.
        problem: String,
    },
    /// UMR found no round count with positive, non-shrinking chunks.
    #[error("UMR finds no round count with positive, non-shrinking chunks on this platform: {0}")]
    NoRoundCount(String),
}

/// Plans `load` units on `platform` with `algo`.
pub fn plan(
    algo: Algo,
    platform: &StarPlatform,
    load: f64,
    options: &PlanOptions,
) -> Result<Plan, PlanError> {
    platform.validate()?;
    if !(load.is_finite() && load > 0.0) {
        return Err(PlanError::Load(load));
    }
    if !(options.error.is_finite() && (0.0..1.0).contains(&options.error)) {
        return Err(PlanError::Option {
            field: "error",
            problem: format!("must be in [0, 1), got {}", options.error),
        });
    }
    let Weights { c1, c2, c3 } = options.weights;
    for (field, weight) in [("c1", c1), ("c2", c2), ("c3", c3)] {
        if !(weight.is_finite() && weight >= 0.0) {
            return Err(PlanError::Option {
                field,
                problem: format!("must be a finite number, 0 or more, got {weight}"),
            });
        }
    }
    match algo {
        Algo::Umr => umr::plan(platform, load),
        Algo::Umrlm => umrlm::plan(platform, load, options.weights),
        Algo::Rumr => rumr::plan(platform, load, options.error),
        Algo::Static => static_plan::plan(platform, load),
    }
}

/// Spec 03's reference recursion for a chunk list in send order, without waits:
/// `t += nLat_i + c/B_i; free_i = max(free_i, t) + cLat_i + c/S_i`; makespan = `max_i free_i`.
pub fn reference_makespan(platform: &StarPlatform, sends: &[(usize, f64)]) -> f64 {
    let mut t = 0.0;
    let mut free = vec![0.0_f64; platform.workers.len()];
    for &(i, c) in sends {
        t += platform.send_time(i, c);
        free[i] = free[i].max(t) + platform.compute_time(i, c);
    }
    free.into_iter().fold(0.0, f64::max)
}

/// The longest schedule a simulation may describe: 100 years, in seconds. The simulator's clock
/// counts `u64` nanoseconds, which end after 584 years; a run's prediction errors may stretch a
/// schedule up to twice its prediction, so 100 years leaves room. Star-platform files bound
/// their latencies by it, and the simulator refuses a load or a plan whose schedule would end
/// later.
pub const MAX_SCHEDULE_SECS: f64 = 100.0 * 365.0 * 24.0 * 3600.0;

/// A clock the [`StarMaster`] runs on: `f64` seconds for planners, integer nanoseconds in the
/// simulator.
pub trait Clock: Copy + PartialOrd + Add<Output = Self> + Default {
    /// A key with the same order as the time (times are never negative).
    fn order_key(self) -> u64;
    /// `self + d`, or `None` past the clock's end (never for `f64`, which grows to infinity).
    fn checked_add(self, d: Self) -> Option<Self>;
}
impl Clock for f64 {
    fn order_key(self) -> u64 {
        // Non-negative floats order like their bit patterns.
        self.max(0.0).to_bits()
    }
    fn checked_add(self, d: Self) -> Option<Self> {
        Some(self + d)
    }
}
impl Clock for u64 {
    fn order_key(self) -> u64 {
        self
    }
    fn checked_add(self, d: Self) -> Option<Self> {
        u64::checked_add(self, d)
    }
}

/// A send whose times would pass the end of the [`StarMaster`]'s clock.
#[derive(Clone, Copy, Debug, Error, PartialEq, Eq)]
#[error("the send's times would pass the end of the clock")]
pub struct ClockOverflow;

fn later<T: Clock>(a: T, b: T) -> T {
    if b > a { b } else { a }
}

/// When one send and its compute happened.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Timing<T> {
    /// The master starts sending.
    pub send_start: T,
    /// The chunk has arrived.
    pub send_end: T,
    /// The worker starts computing it.
    pub compute_start: T,
    /// The worker is done with it (and releases its memory).
    pub compute_end: T,
    /// Load units the worker holds at `send_start`, this chunk included (the memory rule).
    pub held: f64,
}

#[derive(Clone, Copy, Debug, Default)]
struct WorkerClock<T> {
    /// End of the last chunk's compute.
    free: T,
    /// End of the second-to-last chunk's compute: the worker has a free buffer from then on.
    room: T,
    last_size: f64,
}

/// The one-port master's protocol (module doc): serial sends, one receive buffer per worker,
/// memory held from send start to compute end. Durations are given by the caller, so planners
/// (exact `f64`) and the simulator (integer ns, with errors) share this one copy.
#[derive(Clone, Debug)]
pub struct StarMaster<T> {
    master_free: T,
    workers: Vec<WorkerClock<T>>,
}

impl<T: Clock> StarMaster<T> {
    /// A master with `workers` idle workers at time zero.
    pub fn new(workers: usize) -> Self {
        Self {
            master_free: T::default(),
            workers: vec![WorkerClock::default(); workers],
        }
    }

    /// When the master is next free.
    pub fn master_free(&self) -> T {
        self.master_free
    }

    /// When worker `i` has finished everything sent so far.
    pub fn worker_free(&self, i: usize) -> T {
        self.workers[i].free
    }

    /// When worker `i` has a free receive buffer (the end of its second-to-last chunk).
    pub fn worker_room(&self, i: usize) -> T {
        self.workers[i].room
    }

    /// The earliest time the master may start a send to worker `i`.
    pub fn send_ready(&self, i: usize) -> T {
        later(self.master_free, self.workers[i].room)
    }

    /// Of `candidates` (priority order), the worker with room first: RUMR's tail dispatch.
    pub fn first_with_room(&self, candidates: &[usize]) -> Option<usize> {
        let mut best: Option<usize> = None;
        for &i in candidates {
            if best.is_none_or(|b| self.workers[i].room < self.workers[b].room) {
                best = Some(i);
            }
        }
        best
    }

    /// Sends `size` units to worker `i`, taking `send` to transfer and `compute` to compute;
    /// [`ClockOverflow`] (and nothing changed) if a time would pass the end of the clock.
    pub fn try_send(
        &mut self,
        i: usize,
        size: f64,
        send: T,
        compute: T,
    ) -> Result<Timing<T>, ClockOverflow> {
        let t = self.timing(i, size, send, compute, |a, d| {
            a.checked_add(d).ok_or(ClockOverflow)
        })?;
        self.commit(i, size, &t);
        Ok(t)
    }

    /// When a send of `size` units to worker `i` would happen, adding times with `add`.
    fn timing<E>(
        &self,
        i: usize,
        size: f64,
        send: T,
        compute: T,
        add: impl Fn(T, T) -> Result<T, E>,
    ) -> Result<Timing<T>, E> {
        let w = &self.workers[i];
        let send_start = later(self.master_free, w.room);
        // Under the protocol only the last chunk can still be held (the one before it ended by
        // `room`); the memory rule counts it while its compute has not ended.
        let held = size
            + if w.free > send_start {
                w.last_size
            } else {
                0.0
            };
        let send_end = add(send_start, send)?;
        let compute_start = later(send_end, w.free);
        let compute_end = add(compute_start, compute)?;
        Ok(Timing {
            send_start,
            send_end,
            compute_start,
            compute_end,
            held,
        })
    }

    /// Records the send `t` of `size` units to worker `i`.
    fn commit(&mut self, i: usize, size: f64, t: &Timing<T>) {
        let w = &mut self.workers[i];
        w.room = w.free;
        w.free = t.compute_end;
        w.last_size = size;
        self.master_free = t.send_end;
    }
}

impl StarMaster<f64> {
    /// Sends `size` units to worker `i`, taking `send` seconds to transfer and `compute` to
    /// compute (`f64` times never overflow; integer clocks use [`StarMaster::try_send`]).
    pub fn send(&mut self, i: usize, size: f64, send: f64, compute: f64) -> Timing<f64> {
        let Ok(t) = self.timing(i, size, send, compute, |a, d| Ok::<f64, Infallible>(a + d));
        self.commit(i, size, &t);
        t
    }
}

/// A plan's predicted timing, send by send (exact durations, no errors).
#[derive(Clone, Debug, PartialEq)]
pub struct Prediction {
    /// `(round, worker, size, timing)` in send order, tail chunks included.
    pub sends: Vec<(u32, usize, f64, Timing<f64>)>,
    /// `max` compute end.
    pub makespan: f64,
}

/// Runs `plan` on `platform` through the [`StarMaster`] with exact durations.
pub fn predict(platform: &StarPlatform, plan: &Plan) -> Prediction {
    let mut master = StarMaster::<f64>::new(platform.workers.len());
    let mut sends = Vec::with_capacity(plan.chunks.len() + plan.tail.len());
    let mut makespan = 0.0_f64;
    let _ = plan.drive(
        platform,
        &mut master,
        |master: &mut StarMaster<f64>, round: u32, i: usize, size: f64| {
            let t = master.send(
                i,
                size,
                platform.send_time(i, size),
                platform.compute_time(i, size),
            );
            makespan = makespan.max(t.compute_end);
            sends.push((round, i, size, t));
            Ok::<(), ()>(())
        },
    );
    Prediction { sends, makespan }
}

#[cfg(test)]
pub(crate) mod testing {
    //! Random platforms for the planners' tests.
    use super::*;

    /// A small deterministic generator (SplitMix64), so core needs no rand dependency.
    pub struct Rng(pub u64);
    impl Rng {
        pub fn next_u64(&mut self) -> u64 {
            self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        }
        pub fn uniform(&mut self, lo: f64, hi: f64) -> f64 {
            lo + (hi - lo) * (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
        }
    }

    /// A platform of 2–20 workers where links are faster than computes (θ > 1 is likely).
    pub fn random_platform(rng: &mut Rng) -> StarPlatform {
        let n = 2 + (rng.next_u64() % 19) as usize;
        let workers = (0..n)
            .map(|i| {
                let speed = rng.uniform(5.0, 100.0);
                StarWorker {
                    name: format!("w{i}"),
                    speed,
                    compute_latency: rng.uniform(0.0, 0.5),
                    bandwidth: speed * n as f64 * rng.uniform(1.2, 6.0),
                    network_latency: rng.uniform(0.0, 0.05),
                    memory: None,
                }
            })
            .collect();
        StarPlatform { workers }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn two() -> StarPlatform {
        StarPlatform {
            workers: vec![
                StarWorker {
                    name: "a".into(),
                    speed: 10.0,
                    compute_latency: 1.0,
                    bandwidth: 100.0,
                    network_latency: 0.5,
                    memory: Some(30.0),
                },
                StarWorker {
                    name: "b".into(),
                    speed: 5.0,
                    compute_latency: 0.0,
                    bandwidth: 50.0,
                    network_latency: 0.0,
                    memory: None,
                },
            ],
        }
    }

    #[test]
    fn the_master_follows_the_reference_recursion_when_nothing_waits() {
        let p = two();
        let sends = [(0, 20.0), (1, 10.0), (0, 5.0)];
        let mut m = StarMaster::<f64>::new(2);
        let mut end = 0.0_f64;
        for &(i, c) in &sends {
            end = end.max(
                m.send(i, c, p.send_time(i, c), p.compute_time(i, c))
                    .compute_end,
            );
        }
        // a: sent 0..0.7, computes 0.7..3.7; b: sent 0.7..0.9, computes 0.9..2.9;
        // a again: sent 0.9..1.45, computes 3.7..5.2.
        assert!((end - 5.2).abs() < 1e-12);
        assert!((reference_makespan(&p, &sends) - 5.2).abs() < 1e-12);
    }

    #[test]
    fn a_third_chunk_waits_for_the_first_to_finish_and_memory_counts_the_buffered_one() {
        let p = two();
        let mut m = StarMaster::<f64>::new(2);
        let a = m.send(0, 20.0, p.send_time(0, 20.0), p.compute_time(0, 20.0));
        let b = m.send(0, 5.0, p.send_time(0, 5.0), p.compute_time(0, 5.0));
        assert_eq!(b.held, 25.0, "the computing chunk and the buffered one");
        let c = m.send(0, 5.0, p.send_time(0, 5.0), p.compute_time(0, 5.0));
        assert_eq!(
            c.send_start, a.compute_end,
            "one receive buffer: wait for room"
        );
        assert_eq!(c.held, 10.0);
    }

    #[test]
    fn an_integer_clock_refuses_a_send_past_its_end_and_keeps_its_state() {
        let mut m = StarMaster::<u64>::new(1);
        let first = m.try_send(0, 1.0, u64::MAX - 10, 5).expect("fits");
        assert_eq!(first.compute_end, u64::MAX - 5);
        // The next send starts at u64::MAX - 10 and would end its transfer past the clock.
        assert_eq!(m.try_send(0, 1.0, 20, 1), Err(ClockOverflow));
        assert_eq!(
            m.master_free(),
            u64::MAX - 10,
            "a refused send changes nothing"
        );
        assert_eq!(m.worker_free(0), u64::MAX - 5);
        // Its compute would pass the end too, after a transfer that fits.
        assert_eq!(m.try_send(0, 1.0, 1, 10), Err(ClockOverflow));
        assert!(m.try_send(0, 1.0, 1, 1).is_ok());
    }

    /// Every planner on platforms whose latencies are small or zero, for loads from a fraction
    /// of a unit to a few thousand: no chunk below one unit (or the whole load, when less), so
    /// never more sends than units. (UMRLM sent 513,240 chunks for 1,000 units on ten workers
    /// without latencies.)
    #[test]
    fn no_plan_has_more_sends_than_units_nor_a_chunk_below_one() {
        let mut rng = testing::Rng(21);
        for case in 0..120 {
            let mut p = testing::random_platform(&mut rng);
            let zero = case % 3 == 0;
            for w in &mut p.workers {
                if zero {
                    w.compute_latency = 0.0;
                    w.network_latency = 0.0;
                    w.bandwidth = 1e12;
                } else {
                    w.compute_latency *= 1e-3;
                    w.network_latency *= 1e-3;
                }
                if case % 2 == 0 {
                    w.memory = Some(rng.uniform(2.0, 50.0));
                }
            }
            let load = match case % 4 {
                0 => rng.uniform(0.1, 1.0),
                1 => rng.uniform(1.0, 30.0).round(),
                2 => rng.uniform(30.0, 300.0),
                _ => rng.uniform(300.0, 5000.0).round(),
            };
            let unit = min_chunk(load) * (1.0 - 1e-9);
            for algo in Algo::ALL {
                let options = PlanOptions {
                    error: 0.3,
                    ..PlanOptions::default()
                };
                let Ok(plan) = plan(algo, &p, load, &options) else {
                    assert!(algo != Algo::Umrlm, "umrlm always plans here: case {case}");
                    continue;
                };
                let sends = predict(&p, &plan).sends;
                let sizes: Vec<f64> = sends.iter().map(|s| s.2).collect();
                assert!(
                    sizes.len() as f64 <= load.ceil(),
                    "case {case}, {algo}: {} sends for {load} units",
                    sizes.len()
                );
                assert!(
                    sizes.iter().all(|&c| c >= unit),
                    "case {case}, {algo}, {load} units: {:?}",
                    sizes.iter().copied().fold(f64::INFINITY, f64::min)
                );
                let total: f64 = sizes.iter().sum();
                assert!(
                    (total - load).abs() <= 1e-9 * load.max(1.0),
                    "case {case}, {algo}"
                );
            }
        }
    }

    #[test]
    fn bad_platforms_and_loads_are_refused_clearly() {
        let opts = PlanOptions::default();
        let empty = StarPlatform::default();
        assert_eq!(
            plan(Algo::Umr, &empty, 10.0, &opts),
            Err(PlanError::NoWorkers)
        );
        assert_eq!(
            plan(Algo::Umr, &two(), 0.0, &opts),
            Err(PlanError::Load(0.0))
        );
        let mut p = two();
        p.workers[1].bandwidth = 0.0;
        let e = plan(Algo::Umrlm, &p, 10.0, &opts)
            .expect_err("refused")
            .to_string();
        assert_eq!(e, "worker 1 (`b`): bandwidth must be a positive number");
    }
}
