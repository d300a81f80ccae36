//! Fair share over time (Slurm's fair-share factor with `PriorityDecayHalfLife` and shares).
//!
//! Each group of applications (the runtime's users; the applications in no group count as one
//! more) accrues *usage*: the dominant share of the cluster its running work holds (DRF's
//! measure, so a GPU weighs what the cluster's GPUs make it weigh), integrated over time and
//! decayed with a half-life. Within each priority level, the groups whose usage per share is
//! least are served first (every group has 1 share unless [`FairShare::set_shares`] gives it
//! more: a group of 2 shares may use twice what a group of 1 does before it falls behind it): [`crate::model::SchedulerView::level`] puts a group's *standing* (its rank, least used
//! highest) under the priority, and every policy serves higher levels first. Off (the
//! default), every group has the same standing and the policies' own orders are unchanged.
//!
//! Usage is integrated exactly and settled periodically: every time the clock moves
//! ([`FairShare::settle`], called by [`crate::model::SchedulerView::set_now`]), what each group
//! holds until then is accrued for the time since the clock last moved; at most once per
//! [`SETTLE_PERIOD`] of view time the accrued holdings are added to the decayed usage and the
//! standings recomputed (Slurm recomputes every `PriorityCalcPeriod`, 5 minutes by default). A
//! driver that moves the clock before each event changes holdings integrates them to the event:
//! a task is charged up to its end, however short. (Sampling the holdings only when settling,
//! after the event's results had released them, charged short tasks about half their use.)

use crate::time::{NANOS_PER_SEC, Time};

/// How often usage is settled and standings recomputed, in view time.
pub const SETTLE_PERIOD: Time = NANOS_PER_SEC;

/// The shortest half-life fair share takes, the server's (`[fair_share] half_life`) and the
/// simulator's (`--fair-share`) alike: a minute. Holdings are integrated up to every event, but
/// usage is decayed and standings recomputed only every [`SETTLE_PERIOD`] (a second), so a shorter
/// half-life would let usage decay by a large part between two settles.
pub const MIN_HALF_LIFE: Time = 60 * NANOS_PER_SEC;

/// A half-life below [`MIN_HALF_LIFE`], under the name of the flag or field that gave it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "{name} ({}) must be at least {}: usage decays, and users are ranked, once a second",
    shown(*half_life),
    shown(MIN_HALF_LIFE)
)]
pub struct HalfLifeTooShort {
    /// The flag or field (`--fair-share`, `fair_share.half_life`).
    pub name: String,
    /// The half-life given, ns.
    pub half_life: Time,
}

/// Checks a fair-share half-life given as `name` (a flag or a config field): at least
/// [`MIN_HALF_LIFE`]. The one check the server's config and the simulator's command line share.
pub fn check_half_life(name: &str, half_life: Time) -> Result<(), HalfLifeTooShort> {
    if half_life < MIN_HALF_LIFE {
        return Err(HalfLifeTooShort {
            name: name.to_string(),
            half_life,
        });
    }
    Ok(())
}

fn shown(ns: Time) -> humantime::FormattedDuration {
    humantime::format_duration(std::time::Duration::from_nanos(ns))
}

/// Bits of a level under the priority: a group's standing (0: the group that used most).
pub const STANDING_BITS: u32 = 20;

/// The most distinct standings (groups beyond it share the lowest).
const MAX_STANDING: u32 = (1 << STANDING_BITS) - 1;

/// Every group's decayed usage and standing ([`crate::model::SchedulerView::set_fair_share`]).
#[derive(Clone, Debug, Default)]
pub struct FairShare {
    /// The half-life usage decays with; `None`: fair share is off.
    half_life: Option<Time>,
    /// Decayed usage by group id, in share-seconds (1.0: the whole cluster for a second).
    usage: Vec<f64>,
    /// The same for the applications in no group.
    ungrouped: f64,
    /// Shares by group id (absent: 1).
    shares: Vec<f64>,
    /// Standing by group id (higher: used less, served first).
    standing: Vec<u32>,
    /// The same for the applications in no group.
    ungrouped_standing: u32,
    /// The standing of a group that used nothing (a group not met yet).
    unused_standing: u32,
    /// When usage was last settled; `None`: never (the first settle only starts the clock).
    settled_at: Option<Time>,
    /// Share-nanoseconds each group held since the last settle, by group id.
    accrued: Vec<f64>,
    /// The same for the applications in no group.
    accrued_ungrouped: f64,
    /// Up to when `accrued` counts.
    accrued_to: Time,
}

impl FairShare {
    /// Turns fair share on with usage decaying by half every `half_life`, or off (`None`:
    /// every standing becomes equal; usage is kept).
    pub fn set_half_life(&mut self, half_life: Option<Time>) {
        self.half_life = half_life.filter(|&h| h > 0);
        if self.half_life.is_none() {
            self.standing.iter_mut().for_each(|s| *s = 0);
            self.ungrouped_standing = 0;
            self.unused_standing = 0;
        } else {
            self.rank();
        }
    }

    /// The half-life, if fair share is on.
    #[inline]
    pub fn half_life(&self) -> Option<Time> {
        self.half_life
    }

    /// Group `group`'s decayed usage as last settled, in share-seconds (`None`: the
    /// applications in no group).
    pub fn usage(&self, group: Option<u32>) -> f64 {
        match group {
            Some(g) => self.usage.get(g as usize).copied().unwrap_or(0.0),
            None => self.ungrouped,
        }
    }

    /// Sets group `group`'s usage (a restart restoring what was stored) and ranks again.
    pub fn set_usage(&mut self, group: Option<u32>, usage: f64) {
        let usage = if usage.is_finite() {
            usage.max(0.0)
        } else {
            0.0
        };
        match group {
            Some(g) => {
                let i = g as usize;
                if self.usage.len() <= i {
                    self.usage.resize(i + 1, 0.0);
                }
                self.usage[i] = usage;
            }
            None => self.ungrouped = usage,
        }
        if self.half_life.is_some() {
            self.rank();
        }
    }

    /// Adds to group `group`'s usage what holding dominant share `share` for `lasted`, ending
    /// `ended_ago` before the last settle, accrued: ∫ share · 2^(-age/half-life) over that
    /// time (work that ran while no one was settling: the runtime's server was down), and ranks
    /// again. A no-op while off.
    pub fn credit(&mut self, group: Option<u32>, share: f64, ended_ago: Time, lasted: Time) {
        let Some(half_life) = self.half_life else {
            return;
        };
        if !(share.is_finite() && share > 0.0) || lasted == 0 {
            return;
        }
        let h = half_life as f64;
        let weight = |age: Time| 0.5f64.powf(age as f64 / h);
        let gain = (weight(ended_ago) - weight(ended_ago.saturating_add(lasted)))
            * (h / NANOS_PER_SEC as f64)
            / std::f64::consts::LN_2;
        let usage = self.usage(group) + share * gain;
        self.set_usage(group, usage);
    }

    /// Gives group `group` `shares` shares (at least 1; the applications in no group keep 1)
    /// and ranks again.
    pub fn set_shares(&mut self, group: u32, shares: u32) {
        let i = group as usize;
        if self.shares.len() <= i {
            self.shares.resize(i + 1, 1.0);
        }
        self.shares[i] = f64::from(shares.max(1));
        if self.half_life.is_some() {
            self.rank();
        }
    }

    /// Group `group`'s shares (1 unless set).
    pub fn shares(&self, group: u32) -> u32 {
        self.shares.get(group as usize).map_or(1, |&s| s as u32)
    }

    /// Group `group`'s standing: higher is served first; all 0 while fair share is off.
    pub fn standing(&self, group: Option<u32>) -> u32 {
        match group {
            Some(g) => self
                .standing
                .get(g as usize)
                .copied()
                .unwrap_or(self.unused_standing),
            None => self.ungrouped_standing,
        }
    }

    /// Moves the clock to `now`: each group held, since the clock last moved, the dominant share
    /// `rates` gives it (by group id, and the applications in no group): the holdings until now,
    /// before the event at `now` changes them. At most once per [`SETTLE_PERIOD`] the accrued
    /// holdings are added to the usage, which decays over the same time. A no-op while off.
    /// Returns whether it settled (and ranked the groups again).
    pub fn settle(&mut self, now: Time, rates: impl FnOnce() -> (Vec<f64>, f64)) -> bool {
        let Some(half_life) = self.half_life else {
            return false;
        };
        let Some(at) = self.settled_at else {
            self.settled_at = Some(now);
            self.accrued_to = now;
            return false;
        };
        let held_for = now.saturating_sub(self.accrued_to) as f64;
        if held_for > 0.0 {
            let (rates, ungrouped_rate) = rates();
            if self.accrued.len() < rates.len() {
                self.accrued.resize(rates.len(), 0.0);
            }
            for (a, r) in self.accrued.iter_mut().zip(&rates) {
                *a += r * held_for;
            }
            self.accrued_ungrouped += ungrouped_rate * held_for;
            self.accrued_to = now;
        }
        let dt = now.saturating_sub(at);
        if dt < SETTLE_PERIOD {
            return false;
        }
        self.settled_at = Some(now);
        let half_lives = dt as f64 / half_life as f64;
        let decay = 0.5f64.powf(half_lives);
        // ∫ rate · 2^(-(dt - s)/h) ds over [0, dt], in seconds, for the mean rate over the
        // period (the accrued share-nanoseconds over dt).
        let gain =
            (1.0 - decay) * (half_life as f64 / NANOS_PER_SEC as f64) / std::f64::consts::LN_2;
        let period = dt as f64;
        if self.usage.len() < self.accrued.len() {
            self.usage.resize(self.accrued.len(), 0.0);
        }
        for (i, u) in self.usage.iter_mut().enumerate() {
            let mean = self.accrued.get(i).copied().unwrap_or(0.0) / period;
            *u = *u * decay + mean * gain;
        }
        self.ungrouped = self.ungrouped * decay + self.accrued_ungrouped / period * gain;
        self.accrued.iter_mut().for_each(|a| *a = 0.0);
        self.accrued_ungrouped = 0.0;
        self.rank();
        true
    }

    /// Recomputes the standings from the usage per share: the least used highest, equal usage
    /// per share equal standing.
    fn rank(&mut self) {
        let n = self.usage.len();
        // (usage per share, index; n for the applications in no group), most used first.
        let mut order: Vec<(f64, usize)> = self
            .usage
            .iter()
            .enumerate()
            .map(|(i, &u)| (u / self.shares.get(i).copied().unwrap_or(1.0), i))
            .collect();
        order.push((self.ungrouped, n));
        order.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
        self.standing.resize(n, 0);
        let mut standing = 0u32;
        let mut last: Option<f64> = None;
        for (usage, i) in order {
            if last.is_some_and(|l| l != usage) {
                standing = (standing + 1).min(MAX_STANDING);
            }
            last = Some(usage);
            if i == n {
                self.ungrouped_standing = standing;
            } else {
                self.standing[i] = standing;
            }
        }
        self.unused_standing = if last == Some(0.0) {
            standing
        } else {
            (standing + 1).min(MAX_STANDING)
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOUR: Time = 3600 * NANOS_PER_SEC;

    #[test]
    fn a_half_life_under_a_minute_is_refused_under_the_name_given() {
        assert_eq!(check_half_life("--fair-share", MIN_HALF_LIFE), Ok(()));
        assert_eq!(check_half_life("fair_share.half_life", HOUR), Ok(()));
        let e = check_half_life("--fair-share", 59 * NANOS_PER_SEC).expect_err("too short");
        assert_eq!(
            e.to_string(),
            "--fair-share (59s) must be at least 1m: usage decays, and users are ranked, once a \
             second"
        );
        assert!(check_half_life("--fair-share", 0).is_err());
    }

    #[test]
    fn usage_accrues_at_the_rate_held_and_halves_every_half_life() {
        let mut f = FairShare::default();
        f.set_half_life(Some(HOUR));
        f.settle(0, || (vec![1.0], 0.0));
        // The whole cluster for 10 s: about 10 share-seconds (a little less: decay).
        f.settle(10 * NANOS_PER_SEC, || (vec![1.0], 0.0));
        let u = f.usage(Some(0));
        assert!((u - 10.0).abs() < 0.01, "{u}");
        // Nothing held for one half-life: half of it is left.
        f.settle(10 * NANOS_PER_SEC + HOUR, || (vec![0.0], 0.0));
        assert!((f.usage(Some(0)) - u / 2.0).abs() < 1e-9);
        // Held for ever at rate r, usage tends to r·h/ln 2.
        f.settle(10 * NANOS_PER_SEC + 100 * HOUR, || (vec![0.5], 0.0));
        let limit = 0.5 * 3600.0 / std::f64::consts::LN_2;
        assert!((f.usage(Some(0)) - limit).abs() < 1e-6 * limit);
    }

    /// A group's holdings are integrated between settles, each moment of the clock charging what
    /// was held until then: a task that held half the cluster for 0.3 s between two settles is
    /// charged 0.15 share-seconds, although nothing runs when the period ends (sampled at the
    /// settle, it was charged nothing).
    #[test]
    fn holdings_between_settles_are_charged_for_the_time_they_lasted() {
        let ms = NANOS_PER_SEC / 1000;
        let mut f = FairShare::default();
        f.set_half_life(Some(HOUR));
        f.settle(0, || (vec![0.0], 0.0));
        // Dispatched at 100 ms (nothing held before), ended at 400 ms (held half until then).
        f.settle(100 * ms, || (vec![0.0], 0.0));
        f.settle(400 * ms, || (vec![0.5], 0.0));
        assert_eq!(f.usage(Some(0)), 0.0, "not settled within the period");
        f.settle(1200 * ms, || (vec![0.0], 0.0));
        let u = f.usage(Some(0));
        assert!((u - 0.15).abs() < 1e-4, "{u}");
    }

    /// A credit for time no one settled adds what settling through it would have: the same
    /// integral of the share decayed by its age, so a credit of 10 s just past equals 10 s
    /// settled, and one a half-life old counts half.
    #[test]
    fn a_credit_adds_what_settling_through_it_would_have() {
        let mut settled = FairShare::default();
        settled.set_half_life(Some(HOUR));
        settled.settle(0, || (vec![0.25], 0.0));
        settled.settle(10 * NANOS_PER_SEC, || (vec![0.25], 0.0));
        let mut credited = FairShare::default();
        credited.set_half_life(Some(HOUR));
        credited.credit(Some(0), 0.25, 0, 10 * NANOS_PER_SEC);
        let (a, b) = (settled.usage(Some(0)), credited.usage(Some(0)));
        assert!((a - b).abs() < 1e-9, "{a} {b}");
        let mut old = FairShare::default();
        old.set_half_life(Some(HOUR));
        old.credit(None, 0.25, HOUR, 10 * NANOS_PER_SEC);
        assert!((old.usage(None) - b / 2.0).abs() < 1e-9);
        // It ranks: the credited group now stands below one that used nothing.
        assert!(credited.standing(Some(0)) < credited.standing(Some(1)));
        // Off, or nothing held: nothing is added.
        let mut off = FairShare::default();
        off.credit(Some(0), 1.0, 0, HOUR);
        credited.credit(Some(0), 0.0, 0, HOUR);
        credited.credit(Some(0), f64::NAN, 0, HOUR);
        assert_eq!((off.usage(Some(0)), credited.usage(Some(0))), (0.0, b));
    }

    #[test]
    fn the_least_used_stands_highest_and_equal_usage_ties() {
        let mut f = FairShare::default();
        f.set_half_life(Some(HOUR));
        f.set_usage(Some(0), 5.0);
        f.set_usage(Some(1), 0.0);
        f.set_usage(Some(2), 5.0);
        f.set_usage(None, 1.0);
        assert!(f.standing(Some(1)) > f.standing(None));
        assert!(f.standing(None) > f.standing(Some(0)));
        assert_eq!(f.standing(Some(0)), f.standing(Some(2)));
        // A group not met yet used nothing: it stands with group 1.
        assert_eq!(f.standing(Some(7)), f.standing(Some(1)));
        // Shares divide usage: group 0 with 10 shares has used 0.5 per share, less than the
        // admin's 1.0, and group 2 stays behind both.
        f.set_shares(0, 10);
        assert!(f.standing(Some(0)) > f.standing(None));
        assert!(f.standing(None) > f.standing(Some(2)));
        assert_eq!(f.shares(0), 10);
        assert_eq!(f.shares(5), 1);
        // Off: every standing is equal; the usage stays.
        f.set_half_life(None);
        assert_eq!(f.standing(Some(1)), f.standing(Some(0)));
        assert_eq!(f.usage(Some(0)), 5.0);
        // Settling within the period changes nothing.
        f.set_half_life(Some(HOUR));
        f.settle(0, || (vec![1.0; 3], 1.0));
        f.settle(SETTLE_PERIOD - 1, || (vec![1.0; 3], 1.0));
        assert_eq!(f.usage(Some(1)), 0.0);
    }
}
