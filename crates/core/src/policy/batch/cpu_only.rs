//! `cpu-only`: the Hadoop baseline that every speedup in spec 02 is measured against — every task
//! runs as a CPU task, applications in submission order. Applications without a CPU variant never
//! run under it; drivers reject such workloads up front.

use super::BatchPolicy;
use super::fifo::fill_in_order;
use crate::model::{Assignment, NodeId, SchedulerView, Variant};
use crate::time::Time;

/// Every task on a core, first in first out.
#[derive(Debug, Default)]
pub struct CpuOnly;

impl BatchPolicy for CpuOnly {
    fn name(&self) -> &'static str {
        "cpu-only"
    }

    fn on_node_update(
        &mut self,
        view: &mut SchedulerView,
        node: NodeId,
        _now: Time,
    ) -> Vec<Assignment> {
        fill_in_order(view, node, &[Variant::Cpu])
    }

    fn variants(&self) -> &'static [Variant] {
        &[Variant::Cpu]
    }
}
