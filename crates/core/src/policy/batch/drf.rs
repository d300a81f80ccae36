//! `drf`: dominant resource fairness (Ghodsi et al., NSDI 2011). Each free slot goes to the
//! application with the smallest dominant share — the largest fraction of any one cluster resource
//! (cores, memory, GPUs) its running tasks hold. A task runs on a GPU when its application has a GPU
//! variant and one is free, else on a core.
//!
//! The applications of one group ([`SchedulerView::set_app_group`]: the runtime's users) share
//! their group's dominant share, so DRF is fair between users, not between however many
//! applications each submits; within a group the earliest application goes first. An
//! application in no group (the simulator's, the runtime admin's) is its own.

use super::{BatchPolicy, Prefer, best_app};
use crate::model::{AppId, Assignment, NodeId, SchedulerView, Variant};
use crate::time::Time;

/// Dominant resource fairness.
#[derive(Debug, Default)]
pub struct Drf;

/// Picks, among applications with pending tasks that `can_run`, the one DRF serves next:
/// highest level (priority, then fair-share standing), then smallest dominant share (its group's, in a group), then earliest
/// start, then lowest id.
pub(crate) fn next_by_drf(
    view: &SchedulerView,
    mut can_run: impl FnMut(AppId) -> bool,
) -> Option<AppId> {
    let totals = view.totals();
    best_app(
        view,
        view.pending_apps().filter(|a| can_run(a.app.id)),
        Prefer::Smaller,
        |a| {
            let usage = a.group.map_or(a.usage, |g| view.group(g).usage);
            Some(usage.dominant_share(&totals))
        },
    )
}

impl BatchPolicy for Drf {
    fn name(&self) -> &'static str {
        "drf"
    }

    fn on_node_update(
        &mut self,
        view: &mut SchedulerView,
        node: NodeId,
        _now: Time,
    ) -> Vec<Assignment> {
        let mut out = Vec::new();
        loop {
            let pick = next_by_drf(view, |app| {
                view.fits(app, node, Variant::Gpu) || view.fits(app, node, Variant::Cpu)
            });
            let Some(app) = pick else { break };
            let done = view
                .assign(app, node, Variant::Gpu)
                .or_else(|| view.assign(app, node, Variant::Cpu));
            match done {
                Some(a) => out.push(a),
                None => break,
            }
        }
        out
    }
}
