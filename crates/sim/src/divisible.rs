//! Divisible loads on a one-port star (spec 03): the simulator that runs a core
//! [`Plan`](hetsched_core::policy::divisible::Plan) on a [`StarPlatform`](hetsched_core::policy::divisible::StarPlatform) in integer
//! nanoseconds, with memory accounting and optional seeded prediction errors.
//!
//! - [`star`]: the simulation ([`simulate`]) and its result ([`StarRun`]);
//! - [`export`]: the schedule as JSON in seconds (`--export-schedule`).
//!
//! The master's protocol and the memory rule are the core's
//! ([`StarMaster`](hetsched_core::policy::divisible::StarMaster)); this module adds what only a
//! simulation has: rounded integer time, errors, and the verdict "infeasible" naming the worker,
//! the round and the overflow.

pub mod export;
pub mod star;

pub use export::ScheduleExport;
pub use star::{DivisibleError, SendRecord, StarConfig, StarRun, check_load, simulate};
