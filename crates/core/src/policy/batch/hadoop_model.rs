//! `hadoop-model`: Hadoop+'s model-based allocation (spec 02, "Baselines"). GPUs go to
//! applications in decreasing GPU affinity (eq. (4), the speedup of a GPU task under full GPU
//! occupancy of the node), so IO-sensitive applications rank lower; the remaining cores are shared
//! by DRF so that no application starves. The affinity is static: it ignores the node's live load,
//! which is the gap HDAS closes.

use super::drf::next_by_drf;
use super::predict::gpu_affinity;
use super::{BatchPolicy, Prefer, assign_while, best_app};
use crate::model::{AppId, Assignment, NodeId, SchedulerView, Variant};
use crate::time::Time;

/// GPU affinity for GPUs, DRF for the rest.
#[derive(Debug, Default)]
pub struct HadoopModel;

fn next_by_affinity(view: &SchedulerView, node: NodeId) -> Option<AppId> {
    let n = &view.node(node).node;
    let fits = view
        .pending_apps()
        .filter(|a| view.fits(a.app.id, node, Variant::Gpu));
    best_app(view, fits, Prefer::Larger, |a| gpu_affinity(a, n))
}

impl BatchPolicy for HadoopModel {
    fn name(&self) -> &'static str {
        "hadoop-model"
    }

    fn on_node_update(
        &mut self,
        view: &mut SchedulerView,
        node: NodeId,
        _now: Time,
    ) -> Vec<Assignment> {
        let mut out = Vec::new();
        assign_while(view, node, Variant::Gpu, &mut out, |v| {
            next_by_affinity(v, node)
        });
        assign_while(view, node, Variant::Cpu, &mut out, |v| {
            next_by_drf(v, |app| v.fits(app, node, Variant::Cpu))
        });
        out
    }
}
