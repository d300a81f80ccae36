//! The papers' experiments, one module per paper, each runnable by name.
//!
//! - [`hdas_paper`]: spec 02's mixed CPU/GPU workloads A–Y under cpu-only, FIFO, Hadoop+'s model
//!   and HDAS.
//! - [`pcddb_paper`]: spec 05's MM5-like workflow on the 36-node cluster under static,
//!   centralised and PCDDB balancing.

pub mod hdas_paper;
pub mod pcddb_paper;
