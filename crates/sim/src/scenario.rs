//! The papers' experiments, one module per paper, each runnable by name.
//!
//! - [`hdas_paper`]: spec 02's mixed CPU/GPU workloads A–Y under cpu-only, FIFO, Hadoop+'s model
//!   and HDAS.
//! - [`sweep`]: the batch policies on random clusters, heartbeats, noisy profiles and workloads,
//!   against the makespan lower bound.

pub mod hdas_paper;
pub mod sweep;
