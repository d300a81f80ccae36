//! Integration tests of the simulator, gathered in one test binary.

#![allow(clippy::unwrap_used)] // a failing test should panic with the error

mod accel_paper;
mod accel_workload;
mod accelerator_need;
mod bound;
mod common;
mod determinism;
mod divisible;
mod exact;
mod fair_share;
mod graph;
mod hdas_paper;
mod multi_node;
mod preemption;
mod properties;
mod stream;
mod users;
mod validation;
