//! `even`: Storm's default (even) scheduler, the baseline of spec 04.
//!
//! The user fixes the worker count `K` (`--workers`; one per node when not given, and at most the
//! cluster's slots). Workers take slots round-robin over nodes — slot 0 of every node in node
//! order, then slot 1, … — and executors, in id order (component by component, as declared), go
//! round-robin over the workers: executor `i` runs in worker `i mod K`. Neither load nor traffic
//! is looked at, which is the point of the baseline.

use super::{Placement, PlacementError, PlacementProblem, StreamPlacer, interleaved_slots};

/// Storm's even scheduler.
#[derive(Clone, Copy, Debug, Default)]
pub struct Even;

impl StreamPlacer for Even {
    fn name(&self) -> &'static str {
        "even"
    }

    fn place(&self, problem: &PlacementProblem<'_>) -> Result<Placement, PlacementError> {
        problem.check()?;
        let k = problem.workers.unwrap_or(problem.nodes.len() as u32) as usize;
        let workers = interleaved_slots(problem.nodes, k);
        if workers.is_empty() {
            return Err(PlacementError::NoSlots);
        }
        let n = problem.topology.executor_count();
        let (node, process) = (0..n).map(|e| workers[e % workers.len()]).unzip();
        Ok(Placement { node, process })
    }
}
