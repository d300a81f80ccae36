//! `hetsched update JOB`: a batch job's applications' priority or `max_running` change after
//! submission (Slurm's `scontrol update JobId=… Priority=…`). The scheduler's view takes the new
//! values at once, so every placement from then on — a policy's priority levels, a multi-node
//! gathering's order, the cap on running tasks — reads them; tasks already running go on (a
//! lowered `max_running` lets no new one start until fewer run). The values are stored in the
//! application's row (`apps.priority`, `apps.max_running`) in the event's transaction, and a
//! restart applies them over what the job file says.

use super::{Batch, Ctx};
use crate::state::StateError;
use hetsched_core::AppId;

/// What `hetsched update` changes; `None` leaves a value as it is.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Update {
    /// The application to change (`None`: every application of the job).
    pub app: Option<String>,
    /// The new priority.
    pub priority: Option<i32>,
    /// The new `max_running` (0: no limit).
    pub max_running: Option<u32>,
}

/// An application as an update left it: (name, priority, max_running).
pub type Updated = (String, i32, u32);

impl Batch {
    /// Applies `update` to job `job`'s applications (the one it names, or all). Refused for a
    /// job that does not exist or has ended, an application the job does not have, and an
    /// update that changes nothing.
    pub fn update(
        &mut self,
        cx: &mut Ctx,
        job: u64,
        update: &Update,
    ) -> Result<Vec<Updated>, StateError> {
        if update.priority.is_none() && update.max_running.is_none() {
            return Err(StateError::Invalid(
                "nothing to update: give a priority or a max_running".into(),
            ));
        }
        let Some(j) = self.job_rec(job).filter(|_| !self.retention.is_purged(job)) else {
            return Err(StateError::NoJob(job));
        };
        let state = self.job_state(j);
        if !matches!(state, "pending" | "running") {
            return Err(StateError::Invalid(format!(
                "job {job} has ended ({state}): nothing to update"
            )));
        }
        let apps: Vec<u32> = match &update.app {
            None => j.apps.clone().collect(),
            Some(name) => {
                let found = j
                    .apps
                    .clone()
                    .find(|&a| self.apps.get(a as usize).is_some_and(|r| &r.name == name));
                let Some(a) = found else {
                    let names: Vec<&str> = j
                        .apps
                        .clone()
                        .filter_map(|a| self.apps.get(a as usize).map(|r| r.name.as_str()))
                        .collect();
                    return Err(StateError::Invalid(format!(
                        "job {job} has no application `{name}` (it has: {})",
                        names.join(", ")
                    )));
                };
                vec![a]
            }
        };
        let mut out = Vec::with_capacity(apps.len());
        for a in apps {
            let Some(r) = self.apps.get_mut(a as usize) else {
                continue;
            };
            if let Some(p) = update.priority {
                r.priority = p;
                cx.view.set_priority(AppId(a), p)?;
            }
            if let Some(m) = update.max_running {
                r.max_running = m;
                cx.view.set_max_running(AppId(a), m)?;
            }
            out.push((r.name.clone(), r.priority, r.max_running));
            self.settings_changed.push(a);
            // Its pending tasks may start where they could not (a higher cap, a new order).
            let pending = cx.view.app(AppId(a)).pending.len();
            cx.nodes.wakes.free(a, pending);
        }
        Ok(out)
    }
}
