//! The model of a heterogeneous cluster and the work it runs.
//!
//! - [`cluster`]: racks, nodes, accelerators — what a cluster *is*;
//! - [`application`]: applications of independent tasks with CPU and/or GPU variants and their base
//!   profiles (spec 02, "Heterogeneous task model");
//! - [`view`]: the scheduler's live view of the cluster that policies read and update;
//! - [`slots`]: records by dense id whose retired ids cost a pointer;
//! - [`node_list`]: nodes noted since a reader last took them, each once;
//! - [`user`]: a user's fair-share shares and caps (simulator workloads' `[[user]]`).

pub mod application;
pub mod cluster;
pub mod fair_share;
pub mod ids;
pub mod latency;
pub mod node_list;
pub mod resources;
pub mod slots;
pub mod stream_code;
pub mod topology;
pub mod user;
pub mod view;
pub mod workflow;

pub use application::{Application, CpuVariant, GpuVariant, Need, Variant};
pub use cluster::{Accelerator, Cluster, ClusterError, Node, Rack};
pub use ids::{AppId, NodeId, RackId, TaskId};
pub use node_list::NodeList;
pub use resources::Resources;
pub use slots::Slots;
pub use user::UserLimits;
pub use view::{
    AppState, Assignment, CappedResource, GroupState, Held, NodeReport, NodeState, QueueAdmission,
    SchedulerView, ViewError,
};
