//! Integration tests of the server, in process, gathered in one test binary (one link instead of one per file).

mod accel_binding;
mod after;
mod after_corr;
mod bounds;
mod common;
mod dashboard_users;
mod dispatch;
mod divisible_kind;
mod full_disk;
mod fuzz;
mod http;
mod job_ids;
mod listing;
mod metrics;
mod multi_node;
mod pending_reason;
mod prefetch;
mod retention;
mod security;
mod service;
mod signal;
mod state;
mod topology_kind;
mod update;
mod users;
mod workflow_kind;
