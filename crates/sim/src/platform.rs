//! Models of the hardware a simulated cluster is made of. Each resource model is independent of
//! the work that uses it, so later mechanisms (networks, one-port masters, accelerator links) add
//! their own modules here and reuse the existing ones.
//!
//! - [`disk`]: a node's disk, its read bandwidth shared equally by the requests reading at once.
//! - [`network`]: per-node full-duplex links (bandwidth, latency); transfers share them.

pub mod disk;
pub mod network;
