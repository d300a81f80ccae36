//! hetsched's stream worker (issue 16, spec 04): the process an agent starts for one topology on
//! one node. It runs the executors the placement puts there as threads, passes tuples between
//! them in memory (bounded inboxes, batches) and to other workers over TCP (length-delimited,
//! batched frames with back-pressure), counts tuples per (sender executor, receiver executor)
//! pair and CPU time per executor (spec 04's monitoring API), and measures end-to-end latency.
//!
//! Components are built-in Rust code ([`components`]) or any program speaking Apache Storm's
//! multi-lang protocol ([`multilang`]). What runs where is decided outside, by the core's placers
//! (`hetsched_core::policy::stream`): a worker only executes an assignment.
//!
//! - [`worker`]: a worker, its executors, routing and the XOR acker (at-least-once);
//! - [`net`]: TCP between workers;
//! - [`auth`]: the worker key every connection between workers proves first;
//! - [`channel`]: plain TCP or TLS 1.3 under those connections;
//! - [`tuple`](mod@tuple): tuples and frames;
//! - [`metrics`]: counters, latency histogram, the report;
//! - [`process`]: the worker as a process driven over stdin/stdout;
//! - [`process_tree`]: what a multi-lang program started, found and ended with it.

pub mod auth;
pub mod channel;
pub mod components;
pub mod metrics;
pub mod multilang;
pub mod net;
pub mod process;
pub mod process_tree;
pub mod tuple;
pub mod worker;

pub use metrics::WorkerReport;
pub use worker::{Worker, WorkerConfig, WorkerError};
