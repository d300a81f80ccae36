//! `hadoop-model`: Hadoop+'s model-based allocation (spec 02, "Baselines"). GPUs go to
//! applications in decreasing GPU affinity (eq. (4), the speedup of a GPU task under full GPU
//! occupancy of the node), so IO-sensitive applications rank lower; the remaining cores are shared
//! by DRF so that no application starves. The affinity is static: it ignores the node's live load,
//! which is the gap HDAS closes.

use super::BatchPolicy;
use super::drf::next_by_drf;
use super::predict::gpu_affinity;
use crate::model::{AppId, Assignment, NodeId, SchedulerView, Variant};
use crate::time::Time;

/// GPU affinity for GPUs, DRF for the rest.
#[derive(Debug, Default)]
pub struct HadoopModel;

fn next_by_affinity(view: &SchedulerView, node: NodeId) -> Option<AppId> {
    let n = &view.node(node).node;
    view.pending_apps()
        .filter(|a| view.fits(a.app.id, node, Variant::Gpu))
        .filter_map(|a| {
            Some((
                a.app.priority,
                gpu_affinity(a, n)?,
                a.app.submit_time,
                a.app.id,
            ))
        })
        .min_by(|x, y| {
            y.0.cmp(&x.0)
                .then(y.1.total_cmp(&x.1))
                .then(x.2.cmp(&y.2))
                .then(x.3.cmp(&y.3))
        })
        .map(|(_, _, _, id)| id)
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
        while let Some(app) = next_by_affinity(view, node) {
            match view.assign(app, node, Variant::Gpu) {
                Some(a) => out.push(a),
                None => break,
            }
        }
        while let Some(app) = next_by_drf(view, |app| view.fits(app, node, Variant::Cpu)) {
            match view.assign(app, node, Variant::Cpu) {
                Some(a) => out.push(a),
                None => break,
            }
        }
        out
    }
}
