//! The papers' experiments, one module per paper, each runnable by name.
//!
//! - [`hdas_paper`]: spec 02's mixed CPU/GPU workloads A–Y under cpu-only, FIFO, Hadoop+'s model
//!   and HDAS.

pub mod accel_paper;
pub mod hdas_paper;
