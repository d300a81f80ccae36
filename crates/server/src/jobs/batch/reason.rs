//! Why a batch job's pending tasks are not running (`pending_reason` in `hetsched jobs` and
//! `hetsched job N`; Slurm's REASON column of `squeue`).
//!
//! The first that applies, in this order:
//!
//! - `held: …` — `hetsched hold` (or `submit --hold`) keeps it until `hetsched release`;
//! - `waiting for job M` — a job it runs `--after` (or `--after-any`) has not ended as needed;
//! - `every node that can run \`APP\` is drained: …` — an application's tasks fit on some live
//!   nodes, and an operator drained each of them (or their agents are shutting down);
//! - `no live node can run \`APP\` (…)` — no live node has the attributes and the capacity (cores,
//!   memory, devices of the kind) one of its variants needs: it waits until such a node joins
//!   (the submission check passed while one was live, or none had registered yet);
//! - `\`APP\` is backed off on every node that can run it` — its tasks failed to start there
//!   (`start_failures`), and the back-off has not ended;
//! - `\`APP\` runs its max_running of N` — the application's own cap;
//! - `resources` — the nodes that can run it are busy: it starts as they free up.
//!
//! Computed when a job is listed, from the scheduler's view and the node registry; nothing is
//! stored.

use super::{Batch, JobRec};
use crate::jobs::{Read, request_in_words};
use hetsched_core::{AppId, NodeId, Variant};

/// Index of the pending count in an application's `counts`.
const PENDING: usize = 0;

impl Batch {
    /// Why job `j`'s pending tasks are not running (empty when it has none pending), and
    /// whether that blocks it until an operator acts (no node can run it now).
    pub(super) fn pending_reason(&self, rd: &Read, j: &JobRec) -> (String, bool) {
        let pending = |a: u32| self.apps.get(a as usize).map_or(0, |r| r.counts[PENDING]);
        if j.apps.clone().all(|a| pending(a) == 0) {
            return (String::new(), false);
        }
        let id = j.row.id;
        if j.row.held {
            return (format!("held: `hetsched release {id}` lets it run"), false);
        }
        if self.waiting.waits(id) {
            let unfinished = j.row.after.iter().chain(&j.row.after_any).find(|d| {
                matches!(
                    self.outcome_of(**d),
                    Some(super::after::Outcome::Unfinished)
                )
            });
            let why = match unfinished {
                Some(d) => format!("waiting for job {d}"),
                None => "waiting for the jobs it runs after".to_string(),
            };
            return (why, false);
        }
        for a in j.apps.clone().filter(|&a| pending(a) > 0) {
            let app = AppId(a);
            let Some(rec) = self.apps.get(a as usize) else {
                continue;
            };
            let name = &rec.name;
            // The nodes able to run it at all: drained ones are named, and the scan stops at
            // the first one that takes work and has not backed it off (the common case, a job
            // waiting for busy nodes, costs a node or two per application).
            let (mut drained, mut open, mut usable) = (Vec::new(), false, false);
            for (i, n) in rd.nodes.iter().enumerate() {
                let node = NodeId(i as u32);
                if !n.alive || n.removed || !rd.view.could_run(app, node) {
                    continue;
                }
                if n.drained || n.draining {
                    drained.push(n.spec.name.as_str());
                    continue;
                }
                open = true;
                if !rd.view.is_excluded(app, node) {
                    usable = true;
                    break;
                }
            }
            if !open {
                if !drained.is_empty() {
                    drained.sort_unstable();
                    let why = format!(
                        "every node that can run `{name}` is drained: {} (`hetsched node resume NAME`)",
                        drained.join(", ")
                    );
                    return (why, true);
                }
                let why = format!("no live node can run `{name}` ({})", self.needs(rd, app));
                return (why, true);
            }
            if !usable {
                let why = format!(
                    "`{name}` is backed off on every node that can run it (its tasks failed to start there)"
                );
                return (why, false);
            }
            let running = rec.counts[1];
            if rec.max_running > 0 && running >= u64::from(rec.max_running) {
                let why = format!("`{name}` runs its max_running of {}", rec.max_running);
                return (why, false);
            }
        }
        (
            "resources: the nodes that can run it are busy".to_string(),
            false,
        )
    }

    /// What one task of `app` needs, in words: each variant's request and the attributes.
    fn needs(&self, rd: &Read, app: AppId) -> String {
        let Some(state) = rd.view.apps().get(app.index()) else {
            return String::new();
        };
        let a = &state.app;
        let mut parts = Vec::new();
        for (v, what) in [(Variant::Cpu, "cpu"), (Variant::Gpu, "gpu")] {
            if let Some(r) = a.request(v) {
                let kind = a.gpu.as_ref().and_then(|g| g.kind.as_deref());
                parts.push(format!("{what}: {}", request_in_words(&r, kind)));
            }
        }
        if !a.requires.is_empty() {
            parts.push(format!("requires {}", a.requires.join(" + ")));
        }
        parts.join("; ")
    }
}
