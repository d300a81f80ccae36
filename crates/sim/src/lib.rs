//! hetsched's discrete-event simulator: it drives the core's policies on modelled clusters and
//! reproduces the papers' experiments as named scenarios.
//!
//! - [`engine`]: the generic clock and deterministic event queue every mechanism runs on;
//! - [`platform`]: hardware models (the shared disk);
//! - [`batch`]: applications of independent CPU/GPU tasks scheduled on heartbeats (spec 02),
//!   with [`simulate`] as the entry point;
//! - [`metrics`]: what a run measures ([`SimResult`]);
//! - [`scenario`]: the papers' experiments (`hdas-paper`);
//! - [`report`]: tables, CSV/JSON and SVG plots shared by the scenarios.
//!
//! Runs are deterministic: time is integer nanoseconds, ties are broken by scheduling order, and the
//! only randomness comes from [`SimConfig::seed`]; the same inputs and seed give byte-identical
//! results.

pub mod batch;
pub mod engine;
pub mod error;
pub mod metrics;
pub mod platform;
pub mod report;
pub mod scenario;

pub use batch::{IoReport, SimConfig, simulate, simulate_believing};
pub use error::SimError;
pub use metrics::{AppResult, Progress, SimResult, TaskRecord, TimeSeries};
