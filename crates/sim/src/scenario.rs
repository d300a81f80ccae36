//! The papers' experiments, one module per paper, each runnable by name.
//!
//! - [`accel_paper`]: spec 01's MAGMA kernels and K-means job on Cluster4-0…4-4 under the three
//!   binding modes.
//! - [`hdas_paper`]: spec 02's mixed CPU/GPU workloads A–Y under cpu-only, FIFO, Hadoop+'s model
//!   and HDAS.
//! - [`stream_paper`]: spec 04's stream placers on five topologies and a 10-node heterogeneous
//!   cluster.
//! - [`pcddb_paper`]: spec 05's MM5-like workflow on the 36-node cluster under static,
//!   centralised and PCDDB balancing.

pub mod accel_paper;
pub mod hdas_paper;
pub mod pcddb_paper;
pub mod stream_paper;
