//! The rescheduling controller of spec 04 ("Rescheduling control", Figure 2), sans-IO: the driver
//! calls [`RescheduleController::tick`] periodically with the current time, the measured problem
//! and the placement running now; the controller answers whether to apply a new placement.
//!
//! Rules, in order:
//! 1. A new schedule is *computed* only when at least `interval` has passed since the last
//!    computation (the initial placement counts as one, at the controller's start time);
//!    otherwise [`Decision::Wait`] — the running placement stays.
//! 2. When computed: if the running placement overloads a node (under the measured loads), the
//!    cause is **overload** and the new placement is applied at once.
//! 3. Otherwise the cause is **traffic**: the new placement is applied only when its relative gain
//!    in inter-node traffic, `(current − new) / current`, exceeds `gain_threshold` (strictly).
//! 4. A computed placement identical to the running one is never applied.
//!
//! Applying means the driver releases every worker's port and restarts the executors where the
//! new placement says (spec 04, "What the platform does" 4); that cost is the driver's to model.

use super::{Placement, PlacementError, PlacementProblem, StreamPlacer, evaluate};
use crate::time::Time;
use serde::{Deserialize, Serialize};

/// The controller's thresholds.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct RescheduleSettings {
    /// Least time between two computations of a new schedule.
    pub interval: Time,
    /// Least relative inter-node traffic gain for a traffic-driven reschedule (0.1 = 10 %).
    pub gain_threshold: f64,
}

/// A `gain_threshold` that is not a finite number, 0 or more (NaN would never reschedule, a
/// negative one would apply placements that add traffic), under the name of the flag or field
/// that gave it.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("{name} must be a finite number, 0 or more, got {value}")]
pub struct InvalidGainThreshold {
    /// The flag or field (`--gain-threshold`, `gain_threshold`).
    pub name: String,
    /// The value given.
    pub value: f64,
}

/// Checks a gain threshold given as `name`: finite and 0 or more. The one check the runtime's
/// topologies and the simulator's `sim stream-paper` share.
pub fn check_gain_threshold(name: &str, value: f64) -> Result<(), InvalidGainThreshold> {
    if value.is_finite() && value >= 0.0 {
        return Ok(());
    }
    Err(InvalidGainThreshold {
        name: name.to_string(),
        value,
    })
}

/// Why a new placement is applied.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Cause {
    /// The running placement overloads a node.
    Overload,
    /// The new placement cuts inter-node traffic by more than the threshold.
    Traffic,
}

/// What the controller says on one tick.
#[derive(Clone, Debug, PartialEq)]
pub enum Decision {
    /// Too early to compute: keep the running placement.
    Wait,
    /// Computed, not worth applying; `gain` is the relative traffic gain it would have brought.
    Keep {
        /// Relative inter-node traffic gain of the computed placement.
        gain: f64,
    },
    /// Apply `placement`.
    Apply {
        /// Why.
        cause: Cause,
        /// Relative inter-node traffic gain.
        gain: f64,
        /// The new placement.
        placement: Placement,
    },
}

/// The controller's state: when the last computation happened.
#[derive(Clone, Debug)]
pub struct RescheduleController {
    /// Thresholds.
    pub settings: RescheduleSettings,
    last_computed: Time,
}

impl RescheduleController {
    /// A controller whose initial placement was made at `start`.
    pub fn new(settings: RescheduleSettings, start: Time) -> Self {
        Self {
            settings,
            last_computed: start,
        }
    }

    /// One tick at `now`. `problem` carries the measured loads and traffic; `current` is the
    /// placement running now (passed to the placer as `previous`, for self-tuning).
    pub fn tick(
        &mut self,
        now: Time,
        placer: &dyn StreamPlacer,
        problem: &PlacementProblem<'_>,
        current: &Placement,
    ) -> Result<Decision, PlacementError> {
        if now.saturating_sub(self.last_computed) < self.settings.interval {
            return Ok(Decision::Wait);
        }
        self.last_computed = now;
        let mut p = problem.clone();
        p.previous = Some(current);
        let candidate = placer.place(&p)?;
        let before = evaluate(&p, current);
        let after = evaluate(&p, &candidate);
        let gain = if before.inter_node_traffic > 0.0 {
            (before.inter_node_traffic - after.inter_node_traffic) / before.inter_node_traffic
        } else {
            0.0
        };
        if candidate == *current {
            return Ok(Decision::Keep { gain });
        }
        if before.overloaded_nodes > 0 {
            return Ok(Decision::Apply {
                cause: Cause::Overload,
                gain,
                placement: candidate,
            });
        }
        if gain > self.settings.gain_threshold {
            return Ok(Decision::Apply {
                cause: Cause::Traffic,
                gain,
                placement: candidate,
            });
        }
        Ok(Decision::Keep { gain })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_gain_threshold_is_finite_and_not_negative_under_the_name_given() {
        assert_eq!(check_gain_threshold("gain_threshold", 0.0), Ok(()));
        assert_eq!(check_gain_threshold("gain_threshold", 0.1), Ok(()));
        for bad in [-0.1, f64::NAN, f64::INFINITY] {
            let e = check_gain_threshold("--gain-threshold", bad).expect_err("refused");
            assert_eq!(
                e.to_string(),
                format!("--gain-threshold must be a finite number, 0 or more, got {bad}")
            );
        }
    }
}
