//! Integration tests of the core, gathered in one test binary (one link instead of one per file).

mod accelerator_field;
mod accelerator_visible;
mod binding;
mod divisible_selection;
mod hidden_names;
mod input;
mod input_fuzz;
mod input_hardening;
mod multi_node;
mod pcddb_clusters;
mod pcddb_figure3;
mod pcddb_protocol;
mod policies;
mod preempt;
mod properties;
mod stream;
mod task_files;
mod view_accelerator;
mod view_cores_freed;
mod view_exclusion;
mod view_fair_share;
mod view_groups;
mod view_pending;
mod view_queue;
mod view_requires;
mod view_time_left;
