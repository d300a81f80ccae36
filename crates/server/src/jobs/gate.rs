//! When a job may start: the one reading of `submit --after`, `--after-any`, `--after-notok`
//! (Slurm's `afterok`, `afterany`, `afternotok`) and `--begin` for every kind that waits.
//!
//! A kind keeps its waiting jobs its own way (the batch kind keeps their pending tasks out of
//! the scheduler's queues, `batch/after`; a workflow does not start its graph, `workflow`),
//! but what a job's named jobs allow is decided here, from how each of them stands
//! ([`JobEnd`], whatever its kind): [`check_named`] at submission, [`verdict`] whenever one of
//! them may have ended, [`first_unfinished`] for a pending reason. Pure functions: the caller
//! says how a job stands, so the same lists give the same answer before and after a restart.

use super::JobEnd;
use crate::state::StateError;

/// The jobs a submission runs after, checked: `after`, `after_any`, `after_notok`.
pub type AfterLists = (Vec<u64>, Vec<u64>, Vec<u64>);

/// Most jobs one job may run after.
pub const MAX_AFTER: usize = 64;

/// The furthest ahead a begin time may be: 366 days, in ms.
pub const MAX_BEGIN_AHEAD_MS: u64 = 366 * 24 * 3600 * 1000;

/// Checks a begin time (`submit --begin`, `update --begin`; ms since the Unix epoch) against
/// `now_ns`: at most [`MAX_BEGIN_AHEAD_MS`] ahead. A time already past is accepted (at once).
pub fn check_begin(begin_ms: u64, now_ns: u64) -> Result<(), StateError> {
    let now_ms = now_ns / 1_000_000;
    if begin_ms.saturating_sub(now_ms) > MAX_BEGIN_AHEAD_MS {
        return Err(StateError::Invalid(format!(
            "--begin: {} is more than a year ahead",
            rfc3339(begin_ms)
        )));
    }
    Ok(())
}

/// Latest time RFC 3339 can write (9999-12-31T23:59:59Z), in ms since the Unix epoch.
const RFC3339_LAST_MS: u64 = 253_402_300_799_999;

/// A time in ms since the Unix epoch as RFC 3339 UTC, to the second; a time past year 9999 (a
/// client may send any `begin_ms`) as the number itself, since formatting it would panic.
pub fn rfc3339(ms: u64) -> String {
    match std::time::UNIX_EPOCH.checked_add(std::time::Duration::from_millis(ms)) {
        Some(t) if ms <= RFC3339_LAST_MS => humantime::format_rfc3339_seconds(t).to_string(),
        _ => format!("{ms} ms after the Unix epoch (past year 9999)"),
    }
}

/// How a job that a job after it no longer allows ended, as messages say it (`ended failed`,
/// `ended cancelled`; a job set aside unfinished says so, since no `hetsched job` shows it).
fn how_ended(end: JobEnd) -> &'static str {
    match end {
        JobEnd::Cancelled => "ended cancelled",
        JobEnd::SetAside => {
            "was set aside unfinished at a server start (its file no longer reads under this \
             version), which counts as cancelled"
        }
        _ => "ended failed",
    }
}

/// Checks the `after`, `after_any` and `after_notok` lists of a submission, `end_of` saying how
/// each named job stands (`None`: no such job, or one no job may run after): each job must
/// exist, one named `after` must not have ended failed or cancelled, one named `after_notok`
/// must not have completed (nor been purged: how it ended is not kept). Returns them sorted,
/// without repeats (a job named `after` and `after_any` counts as `after`); one job named both
/// `after` and `after_notok` is refused, and so are more than [`MAX_AFTER`] jobs in all.
pub fn check_named(
    after: &[u64],
    after_any: &[u64],
    after_notok: &[u64],
    end_of: impl Fn(u64) -> Option<JobEnd>,
) -> Result<AfterLists, StateError> {
    let mut ids = after.to_vec();
    ids.sort_unstable();
    ids.dedup();
    let mut notok = after_notok.to_vec();
    notok.sort_unstable();
    notok.dedup();
    if let Some(both) = notok.iter().find(|j| ids.binary_search(j).is_ok()) {
        return Err(StateError::Invalid(format!(
            "job {both} is named by both --after and --after-notok: the job could never start"
        )));
    }
    let mut any: Vec<u64> = after_any
        .iter()
        .copied()
        .filter(|j| ids.binary_search(j).is_err() && notok.binary_search(j).is_err())
        .collect();
    any.sort_unstable();
    any.dedup();
    let named = ids.len() + any.len() + notok.len();
    if named > MAX_AFTER {
        return Err(StateError::Invalid(format!(
            "--after, --after-any and --after-notok name {named} jobs; at most {MAX_AFTER}"
        )));
    }
    for &id in &notok {
        match end_of(id) {
            None => return Err(StateError::Invalid(format!("--after-notok: no job {id}"))),
            Some(JobEnd::Purged) => {
                return Err(StateError::Invalid(format!(
                    "--after-notok: job {id} was purged, and how it ended is not kept"
                )));
            }
            Some(JobEnd::Completed) => {
                return Err(StateError::Invalid(format!(
                    "--after-notok: job {id} completed, so a job after its failure could never \
                     start"
                )));
            }
            Some(JobEnd::Failed | JobEnd::Cancelled | JobEnd::SetAside | JobEnd::Unfinished) => {}
        }
    }
    if let Some(&id) = any.iter().find(|&&id| end_of(id).is_none()) {
        return Err(StateError::Invalid(format!("--after-any: no job {id}")));
    }
    for &id in &ids {
        match end_of(id) {
            None => return Err(StateError::Invalid(format!("--after: no job {id}"))),
            Some(end @ (JobEnd::Failed | JobEnd::Cancelled)) => {
                return Err(StateError::Invalid(format!(
                    "--after: job {id} {}, so a job after it could never start \
                     (`hetsched resubmit {id}` runs its failed tasks again)",
                    how_ended(end)
                )));
            }
            // Nothing of it is left to run again.
            Some(JobEnd::SetAside) => {
                return Err(StateError::Invalid(format!(
                    "--after: job {id} {}, so a job after it could never start (`--after-any \
                     {id}` runs after it all the same)",
                    how_ended(JobEnd::SetAside)
                )));
            }
            // A job waiting before its dependency was purged runs (it completed, or the purge
            // cancelled the waiting one); a new one cannot tell whether it would.
            Some(JobEnd::Purged) => {
                return Err(StateError::Invalid(format!(
                    "--after: job {id} was purged, and how it ended is not kept (`--after-any \
                     {id}` runs after it whatever its end)"
                )));
            }
            Some(JobEnd::Completed | JobEnd::Unfinished) => {}
        }
    }
    Ok((ids, any, notok))
}

/// What a waiting job's named jobs allow now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Some named job has not ended (or the job waits for something else).
    Wait,
    /// Every job named `after` completed, every one named `after_any` ended, every one named
    /// `after_notok` ended failed or cancelled: the job may start.
    Release,
    /// It can never start.
    Cancel {
        /// The named job that ended as it does not allow.
        job: u64,
        /// The message its tasks are cancelled with.
        why: String,
    },
}

/// What `after`, `after_any` and `after_notok` allow, `end_of` saying how each named job stands;
/// `waits_otherwise` (a begin time still to come) keeps a job that would be released waiting,
/// but not one that can never start. A purged job counts as completed for `after` and
/// `after_any` and as failed for `after_notok`: only finished jobs are purged, and a job's end
/// settled, in the event that recorded it, each waiting job it no longer allows. A job set
/// aside unfinished ([`JobEnd::SetAside`]) never ended so: it counts as cancelled. A job
/// `end_of` does not know counts as unfinished.
pub fn verdict(
    after: &[u64],
    after_any: &[u64],
    after_notok: &[u64],
    waits_otherwise: bool,
    end_of: impl Fn(u64) -> Option<JobEnd>,
) -> Verdict {
    let mut unfinished = waits_otherwise;
    for &d in after {
        match end_of(d) {
            Some(JobEnd::Completed | JobEnd::Purged) => {}
            Some(end @ (JobEnd::Failed | JobEnd::Cancelled | JobEnd::SetAside)) => {
                return Verdict::Cancel {
                    job: d,
                    why: format!(
                        "cancelled: job {d}, which this job runs after, {}",
                        how_ended(end)
                    ),
                };
            }
            Some(JobEnd::Unfinished) | None => unfinished = true,
        }
    }
    for &d in after_notok {
        match end_of(d) {
            Some(JobEnd::Failed | JobEnd::Cancelled | JobEnd::SetAside | JobEnd::Purged) => {}
            Some(JobEnd::Completed) => {
                return Verdict::Cancel {
                    job: d,
                    why: format!(
                        "cancelled: job {d}, which this job runs after the failure of, completed"
                    ),
                };
            }
            Some(JobEnd::Unfinished) | None => unfinished = true,
        }
    }
    unfinished |= after_any
        .iter()
        .any(|&d| matches!(end_of(d), Some(JobEnd::Unfinished) | None));
    if unfinished {
        Verdict::Wait
    } else {
        Verdict::Release
    }
}

/// The first of `named` that has not ended (what a waiting job's pending reason names).
pub fn first_unfinished(
    mut named: impl Iterator<Item = u64>,
    end_of: impl Fn(u64) -> Option<JobEnd>,
) -> Option<u64> {
    named.find(|&d| matches!(end_of(d), Some(JobEnd::Unfinished) | None))
}

/// What a job of a kind that waits before it starts (a workflow, a divisible job) waits for:
/// the submission's lists, hold and begin time, and whether it has started. Batch jobs keep
/// theirs in their job rows (`batch/after`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Gate {
    /// The jobs it runs after once each completed (`--after`), ascending.
    pub after: Vec<u64>,
    /// … once each ended, however (`--after-any`).
    pub after_any: Vec<u64>,
    /// … once each ended failed or cancelled (`--after-notok`).
    pub after_notok: Vec<u64>,
    /// Held by `hetsched hold` (or `submit --hold`) until `hetsched release`.
    pub held: bool,
    /// Not before this time (ms since the Unix epoch; `submit --begin`).
    pub begin_ms: Option<u64>,
    /// It has started (it waits no more; a job that never waited starts so).
    pub started: bool,
    /// The first job it names that had not ended when the state last looked (its pending
    /// reason). Memory only.
    pub waiting_for: Option<u64>,
}

impl Gate {
    /// A job that waits for nothing: started at its submission.
    pub fn started() -> Self {
        Gate {
            started: true,
            ..Gate::default()
        }
    }

    /// What a submission's checked lists, hold and begin time make it wait for (started if
    /// nothing).
    pub fn of(sub: &crate::state::types::Submission) -> Self {
        let mut g = Gate {
            after: sub.after.clone(),
            after_any: sub.after_any.clone(),
            after_notok: sub.after_notok.clone(),
            held: sub.hold,
            begin_ms: sub.begin_ms,
            started: false,
            waiting_for: None,
        };
        g.started = !g.waits();
        g
    }

    /// Whether these lists, hold and begin time make a job wait before it starts.
    pub fn waits(&self) -> bool {
        !self.after.is_empty()
            || !self.after_any.is_empty()
            || !self.after_notok.is_empty()
            || self.held
            || self.begin_ms.is_some()
    }

    /// Every job it names: `after`, `after_any`, `after_notok`.
    pub fn named(&self) -> impl Iterator<Item = u64> + '_ {
        self.after
            .iter()
            .chain(&self.after_any)
            .chain(&self.after_notok)
            .copied()
    }

    /// Whether its begin time is still to come at `now_ms`.
    pub fn deferred(&self, now_ms: u64) -> bool {
        self.begin_ms.is_some_and(|b| b > now_ms)
    }

    /// Why job `id`, which has not started nor ended, waits: its pending reason.
    pub fn reason(&self, id: u64) -> String {
        if self.held {
            return format!("held: `hetsched release {id}` lets it run");
        }
        let now_ms = crate::state::now_ns() / 1_000_000;
        match (self.waiting_for, self.begin_ms) {
            (Some(d), _) => format!("waiting for job {d}"),
            (None, Some(b)) if b > now_ms => {
                let left = std::time::Duration::from_secs((b - now_ms).div_ceil(1000));
                format!(
                    "begins at {} (in {})",
                    rfc3339(b),
                    humantime::format_duration(left)
                )
            }
            _ => "waiting for the jobs it runs after".into(),
        }
    }

    /// Its part of a job's listing, for a job that has `ended` or not: the lists, and whether it
    /// waits, is held or is deferred (as a batch job's: one that waits only for its begin time
    /// is deferred, not waiting; an ended job is neither).
    pub fn fill(&self, info: &mut crate::state::types::JobInfo, ended: bool) {
        let waits = !self.started && !ended;
        let deferred = waits && self.deferred(crate::state::now_ns() / 1_000_000);
        info.after = self.after.clone();
        info.after_any = self.after_any.clone();
        info.after_notok = self.after_notok.clone();
        info.begin_ms = self.begin_ms;
        info.held = waits && self.held;
        info.deferred = deferred;
        info.waiting = waits && (self.held || !deferred || self.waiting_for.is_some());
    }
}

/// The earliest begin time still to come among `gates` of jobs that have not started.
pub fn next_begin<'a>(gates: impl Iterator<Item = &'a Gate>) -> Option<std::time::Instant> {
    let now_ms = crate::state::now_ns() / 1_000_000;
    let b = gates
        .filter(|g| !g.started)
        .filter_map(|g| g.begin_ms.filter(|&b| b > now_ms))
        .min()?;
    Some(std::time::Instant::now() + std::time::Duration::from_millis(b - now_ms))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ends(id: u64) -> Option<JobEnd> {
        Some(match id {
            1 => JobEnd::Completed,
            2 => JobEnd::Failed,
            3 => JobEnd::Cancelled,
            4 => JobEnd::Unfinished,
            5 => JobEnd::Purged,
            6 => JobEnd::SetAside,
            _ => return None,
        })
    }

    #[test]
    fn a_verdict_releases_waits_or_cancels_as_slurms_dependencies_do() {
        assert_eq!(
            verdict(&[1, 5], &[2, 3], &[2], false, ends),
            Verdict::Release
        );
        assert_eq!(
            verdict(&[1], &[], &[], true, ends),
            Verdict::Wait,
            "begin time"
        );
        assert_eq!(verdict(&[1, 4], &[], &[], false, ends), Verdict::Wait);
        assert_eq!(verdict(&[], &[4], &[], false, ends), Verdict::Wait);
        assert_eq!(verdict(&[], &[], &[4], false, ends), Verdict::Wait);
        assert_eq!(
            verdict(&[9], &[], &[], false, ends),
            Verdict::Wait,
            "unknown"
        );
        assert_eq!(
            verdict(&[], &[], &[5], false, ends),
            Verdict::Release,
            "purged"
        );
        assert_eq!(
            verdict(&[4, 3], &[], &[], true, ends),
            Verdict::Cancel {
                job: 3,
                why: "cancelled: job 3, which this job runs after, ended cancelled".into()
            },
            "a begin time to come does not keep a job that can never start"
        );
        assert_eq!(
            verdict(&[], &[], &[1], false, ends),
            Verdict::Cancel {
                job: 1,
                why: "cancelled: job 1, which this job runs after the failure of, completed".into()
            }
        );
        assert_eq!(first_unfinished([1, 2, 4, 9].into_iter(), ends), Some(4));
        // Set aside unfinished: as cancelled, saying so.
        assert_eq!(verdict(&[], &[6], &[6], false, ends), Verdict::Release);
        assert_eq!(
            verdict(&[6], &[], &[], false, ends),
            Verdict::Cancel {
                job: 6,
                why: "cancelled: job 6, which this job runs after, was set aside unfinished at a \
                      server start (its file no longer reads under this version), which counts \
                      as cancelled"
                    .into()
            }
        );
        assert_eq!(first_unfinished([6, 4].into_iter(), ends), Some(4));
    }

    #[test]
    fn named_jobs_are_checked_sorted_and_counted_once() {
        let err = |a: &[u64], any: &[u64], n: &[u64]| {
            check_named(a, any, n, ends)
                .expect_err("refused")
                .to_string()
        };
        assert!(err(&[9], &[], &[]).contains("--after: no job 9"));
        assert!(err(&[2], &[], &[]).contains("--after: job 2 ended failed"));
        assert!(err(&[], &[], &[1]).contains("--after-notok: job 1 completed"));
        assert!(err(&[], &[], &[5]).contains("--after-notok: job 5 was purged"));
        assert!(err(&[5], &[], &[]).contains("--after: job 5 was purged"));
        assert!(err(&[], &[9], &[]).contains("--after-any: no job 9"));
        assert!(err(&[6], &[], &[]).contains("--after: job 6 was set aside unfinished"));
        assert!(check_named(&[], &[6], &[6], ends).is_ok());
        assert!(err(&[4], &[], &[4]).contains("named by both --after and --after-notok"));
        let many: Vec<u64> = (100..165).collect();
        assert!(err(&[], &many, &[]).contains("name 65 jobs; at most 64"));
        assert_eq!(
            check_named(&[4, 1, 4], &[1, 2, 3], &[2], ends).expect("accepted"),
            (vec![1, 4], vec![3], vec![2])
        );
    }
}
