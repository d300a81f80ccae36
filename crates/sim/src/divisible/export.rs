//! The schedule of a run as JSON (`hetsched sim divisible --export-schedule OUT.json`), in send
//! order, every time in seconds (documented in `docs/divisible.md`):
//! `{"algo", "load", "workers": [{"name", "speed", "compute_latency", "bandwidth",
//! "network_latency", "memory"}], "sends": [{"round", "worker", "size", "send_start",
//! "send_end", "compute_start", "compute_end"}], "makespan"}`; `worker` indexes `workers`,
//! `memory` is `null` when unlimited.

use super::star::StarRun;
use hetsched_core::policy::divisible::{Algo, StarWorker};
use hetsched_core::time::to_secs;
use serde::{Deserialize, Serialize};

/// The exported schedule.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ScheduleExport {
    /// The planner.
    pub algo: Algo,
    /// Total load.
    pub load: f64,
    /// The platform.
    pub workers: Vec<StarWorker>,
    /// Every send, in send order.
    pub sends: Vec<ExportedSend>,
    /// Seconds.
    pub makespan: f64,
}

/// One exported send; times in seconds.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct ExportedSend {
    /// Round.
    pub round: u32,
    /// Index into `workers`.
    pub worker: usize,
    /// Load units.
    pub size: f64,
    /// The master starts sending.
    pub send_start: f64,
    /// The chunk has arrived.
    pub send_end: f64,
    /// The worker starts computing it.
    pub compute_start: f64,
    /// The worker is done with it.
    pub compute_end: f64,
}

impl From<&StarRun> for ScheduleExport {
    fn from(run: &StarRun) -> Self {
        ScheduleExport {
            algo: run.algo,
            load: run.load,
            workers: run.platform.workers.clone(),
            sends: run
                .sends
                .iter()
                .map(|s| ExportedSend {
                    round: s.round,
                    worker: s.worker as usize,
                    size: s.size(),
                    send_start: to_secs(s.send_start),
                    send_end: to_secs(s.send_end),
                    compute_start: to_secs(s.compute_start),
                    compute_end: to_secs(s.compute_end),
                })
                .collect(),
            makespan: run.makespan_s(),
        }
    }
}
