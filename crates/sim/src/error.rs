//! Everything that can stop a simulation or a scenario, each with a message that names the culprit.

use hetsched_core::time::Time;
use hetsched_core::{ClusterError, NodeId, ViewError};
use thiserror::Error;

/// Why a simulation could not run or could not finish.
#[derive(Debug, Error)]
pub enum SimError {
    /// The cluster description is unusable.
    #[error("invalid cluster: {0}")]
    Cluster(#[from] ClusterError),
    /// The scheduler view refused the cluster or an application.
    #[error("scheduler view: {0}")]
    View(#[from] ViewError),
    /// A simulator setting is out of range.
    #[error("invalid simulator setting `{field}`: {problem}")]
    Config {
        /// The setting.
        field: &'static str,
        /// What is wrong with it.
        problem: String,
    },
    /// An application is malformed.
    #[error("application `{app}`: {problem}")]
    Application {
        /// The application's name.
        app: String,
        /// What is wrong with it.
        problem: String,
    },
    /// An application can never run on this cluster under this policy.
    #[error("application `{app}` cannot run on this cluster under policy `{policy}`: {reason}")]
    Unrunnable {
        /// The application's name.
        app: String,
        /// The policy's name.
        policy: String,
        /// Why not.
        reason: String,
    },
    /// Tasks are pending, nothing runs, and a whole round of heartbeats placed nothing: the policy
    /// will never place them.
    #[error(
        "policy `{policy}` placed nothing for a whole heartbeat round at t = {time_s:.3} s \
         while nothing runs; pending tasks of: {apps}"
    )]
    Stuck {
        /// The policy's name.
        policy: String,
        /// Simulated time, seconds.
        time_s: f64,
        /// Names of the applications with pending tasks.
        apps: String,
    },
    /// The policy placed more on a node than it holds (a policy or view bug).
    #[error("policy `{policy}` over-allocated {node} at t = {time} ns: {detail}")]
    OverAllocation {
        /// The policy's name.
        policy: String,
        /// The node.
        node: NodeId,
        /// Simulated time.
        time: Time,
        /// What was exceeded.
        detail: String,
    },
    /// The run went past the configured time limit.
    #[error("simulated time passed the limit of {limit_s} s with {left} tasks unfinished")]
    TimeLimit {
        /// The limit, seconds.
        limit_s: f64,
        /// Tasks not finished.
        left: u64,
    },
    /// The engine's bookkeeping disagrees with itself (a simulator bug; never expected).
    #[error("internal simulator error: {0}")]
    Internal(String),
    /// Writing outputs failed.
    #[error("cannot write {path}: {source}")]
    Io {
        /// The file or directory.
        path: String,
        /// The cause.
        source: std::io::Error,
    },
    /// Producing an output (CSV, JSON, plot) failed.
    #[error("cannot produce {what}: {problem}")]
    Output {
        /// The output.
        what: String,
        /// The cause.
        problem: String,
    },
}
