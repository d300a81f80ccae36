//! hetsched's discrete-event simulator: it drives the core's policies on modelled clusters and
//! reproduces the papers' experiments as named scenarios.
//!
//! - [`accel`]: accelerator offload through node binding and the three-stage accelerator service
//!   (spec 01);
//! - [`engine`]: the generic clock and deterministic event queue every mechanism runs on;
//! - [`platform`]: hardware models (the shared disk, the network);
//! - [`batch`]: applications of independent CPU/GPU tasks scheduled on heartbeats (spec 02),
//!   with [`simulate`] as the entry point;
//! - [`divisible`]: divisible loads on a one-port star (spec 03), running the core's UMR, UMRLM,
//!   RUMR and static plans;
//! - [`metrics`]: what a run measures ([`SimResult`]);
//! - [`graph`]: workflows of component instances under the static, centralised and PCDDB
//!   balancers (spec 05), with [`graph::simulate_graph`] as the entry point;
//! - [`scenario`]: the papers' experiments (`hdas-paper`);
//! - [`report`]: tables, CSV/JSON and SVG plots shared by the scenarios;
//! - [`stream`]: stream topologies placed by the core's stream placers (spec 04).
//!
//! Runs are deterministic: time is integer nanoseconds, ties are broken by scheduling order, and the
//! only randomness comes from [`SimConfig::seed`]; the same inputs and seed give byte-identical
//! results.

pub mod accel;
pub mod batch;
pub mod divisible;
pub mod engine;
pub mod error;
pub mod graph;
pub mod metrics;
pub mod platform;
pub mod report;
pub mod scenario;
pub mod stream;

pub use batch::{IoReport, SimConfig, simulate, simulate_believing};
pub use error::SimError;
pub use metrics::{AppResult, Progress, SimResult, TaskRecord, TimeSeries};
