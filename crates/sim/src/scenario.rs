//! The papers' experiments, one module per paper, each runnable by name.
//!
//! - [`divisible_paper`]: spec 03's UMR vs UMRLM on the seed's 16-PC cluster, and RUMR vs UMR
//!   under prediction errors.
//! - [`hdas_paper`]: spec 02's mixed CPU/GPU workloads A–Y under cpu-only, FIFO, Hadoop+'s model
//!   and HDAS.

pub mod divisible_paper;
pub mod hdas_paper;
