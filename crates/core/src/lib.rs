//! hetsched's core: the model of a heterogeneous cluster and its work, and the scheduling policies.
//!
//! Everything here is pure and deterministic: no I/O, no clock, no async runtime, no randomness that
//! is not passed in. The simulator (`hetsched-sim`) and the runtime server drive the same code; a
//! policy sees a [`model::SchedulerView`] and answers with assignments.

pub mod input;
pub mod model;
pub mod policy;
pub mod testkit;
pub mod text;
pub mod time;

pub use model::*;
pub use time::Time;
