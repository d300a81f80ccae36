//! `fifo`: applications in submission order (higher priority first); each task goes to a free GPU
//! if its application has a GPU variant and one is free on the heartbeating node, else to a core.

use super::BatchPolicy;
use crate::model::{AppId, Assignment, NodeId, SchedulerView, Variant};
use crate::time::Time;

/// First in, first out, GPU first.
#[derive(Debug, Default)]
pub struct Fifo;

/// Applications with pending tasks by level (highest first: priority, then fair-share
/// standing), then submission order.
pub(crate) fn submission_order(view: &SchedulerView) -> Vec<AppId> {
    let mut order: Vec<(std::cmp::Reverse<i64>, AppId)> = view
        .pending_apps()
        .map(|a| (std::cmp::Reverse(view.level(a)), a.app.id))
        .collect();
    order.sort_unstable();
    order.into_iter().map(|(_, id)| id).collect()
}

/// Gives each application in turn every task that fits, trying `variants` in order for each task.
/// Resources only shrink during a heartbeat, so an application passed over never fits later.
pub(crate) fn fill_in_order(
    view: &mut SchedulerView,
    node: NodeId,
    variants: &[Variant],
) -> Vec<Assignment> {
    let mut out = Vec::new();
    for app in submission_order(view) {
        'tasks: loop {
            for &variant in variants {
                if let Some(a) = view.assign(app, node, variant) {
                    out.push(a);
                    continue 'tasks;
                }
            }
            break;
        }
    }
    out
}

impl BatchPolicy for Fifo {
    fn name(&self) -> &'static str {
        "fifo"
    }

    fn on_node_update(
        &mut self,
        view: &mut SchedulerView,
        node: NodeId,
        _now: Time,
    ) -> Vec<Assignment> {
        fill_in_order(view, node, &[Variant::Gpu, Variant::Cpu])
    }
}
