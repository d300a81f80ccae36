//! End-to-end tests through the real `hetsched` binary, gathered in one test binary (one link instead of one per file).

mod binding_cli;
mod chaos;
mod dashboard;
mod demo_cli;
mod divisible_cli;
mod divisible_runtime;
mod graph_cli;
mod log_tls;
mod operator;
mod operator_ux;
mod out_dir_cli;
mod preemption_runtime;
mod prefetch_runtime;
mod run_as;
mod runtime;
mod runtime_accel;
mod sim_accel_cli;
mod sim_bound_sweep;
mod sim_cli;
mod simgrid;
mod stream_cli;
mod support;
mod topology_runtime;
mod workflow_accel;
mod workflow_fetch;
mod workflow_runtime;
