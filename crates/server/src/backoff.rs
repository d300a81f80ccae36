//! The failing-node back-off: a node whose agent cannot start an application's tasks (the program
//! is missing from its PATH, not executable, …) would otherwise take the whole queue and fail it
//! in milliseconds while healthy nodes sit idle. After `start_failures` consecutive start
//! failures of one application on one node, the server stops placing that application there for
//! `start_failure_backoff` (the scheduler view excludes the pair; see
//! `SchedulerView::set_excluded`), then tries again; one more start failure there backs it off
//! again at once, a success clears the count.
//!
//! A start failure is what the agent reports as `start_failed`: the process could not be spawned,
//! or it exited with 126 or 127 (the shell's "cannot execute" and "command not found").
//! Active back-offs are stored (`store::operator`, as the wall-clock time they end) and restored
//! at start ([`Backoff::restore`]), so a restart neither forgets nor extends them; the counts of
//! consecutive failures below the limit live in memory only.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

/// What a result did to the back-off of its (application, node) pair.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Change {
    /// Nothing to do.
    None,
    /// The pair reached the limit: exclude it until the back-off expires.
    BackedOff,
}

/// One backed-off (application, node) pair.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry {
    /// Consecutive start failures that triggered it.
    pub failures: u32,
    /// When the node is tried again for the application.
    pub until: Instant,
}

/// Consecutive start failures and active back-offs, by (application, node).
#[derive(Debug, Default)]
pub struct Backoff {
    limit: u32,
    period: Duration,
    consecutive: HashMap<(u32, u32), u32>,
    active: BTreeMap<(u32, u32), Entry>,
}

impl Backoff {
    /// Backs a pair off for `period` after `limit` consecutive start failures (0 = never).
    pub fn new(limit: u32, period: Duration) -> Self {
        Self {
            limit,
            period,
            ..Self::default()
        }
    }

    /// A result of `app` on `node`: `start_failed` or not, `success` or not.
    pub fn result(
        &mut self,
        app: u32,
        node: u32,
        start_failed: bool,
        success: bool,
        now: Instant,
    ) -> Change {
        if self.limit == 0 {
            return Change::None;
        }
        if !start_failed {
            if success {
                self.consecutive.remove(&(app, node));
            }
            return Change::None;
        }
        let n = self.consecutive.entry((app, node)).or_insert(0);
        *n += 1;
        if *n >= self.limit && !self.active.contains_key(&(app, node)) {
            self.active.insert(
                (app, node),
                Entry {
                    failures: *n,
                    until: now + self.period,
                },
            );
            return Change::BackedOff;
        }
        Change::None
    }

    /// How long a back-off lasts.
    pub fn period(&self) -> Duration {
        self.period
    }

    /// Puts back a stored back-off of `app` on `node` that ends `remaining` after `now` (as a
    /// pair that reached the limit).
    pub fn restore(&mut self, app: u32, node: u32, remaining: Duration, now: Instant) {
        self.consecutive.insert((app, node), self.limit.max(1));
        self.active.insert(
            (app, node),
            Entry {
                failures: self.limit.max(1),
                until: now + remaining,
            },
        );
    }

    /// Back-offs of `node` that have expired at `now`: they are lifted (their applications may be
    /// placed on the node again); the count stays at the limit less one, so one more start
    /// failure backs the pair off again.
    pub fn expire(&mut self, node: u32, now: Instant) -> Vec<u32> {
        let done: Vec<(u32, u32)> = self
            .active
            .iter()
            .filter(|((_, n), e)| *n == node && e.until <= now)
            .map(|(k, _)| *k)
            .collect();
        for k in &done {
            self.active.remove(k);
            if let Some(c) = self.consecutive.get_mut(k) {
                *c = self.limit.saturating_sub(1);
            }
        }
        done.into_iter().map(|(app, _)| app).collect()
    }

    /// Forgets application `app` (its job was purged): its counts and back-offs. Returns the
    /// nodes it was backed off on, whose stored back-offs the caller deletes.
    pub fn forget_app(&mut self, app: u32) -> Vec<u32> {
        self.consecutive.retain(|(a, _), _| *a != app);
        let nodes: Vec<u32> = self
            .active
            .keys()
            .filter(|(a, _)| *a == app)
            .map(|(_, n)| *n)
            .collect();
        for &n in &nodes {
            self.active.remove(&(app, n));
        }
        nodes
    }

    /// Active back-offs of `node`: (application, entry).
    pub fn of_node(&self, node: u32) -> impl Iterator<Item = (u32, Entry)> + '_ {
        self.active
            .iter()
            .filter(move |((_, n), _)| *n == node)
            .map(|((a, _), e)| (*a, *e))
    }

    /// Every active back-off: ((application, node), entry).
    pub fn all(&self) -> impl Iterator<Item = ((u32, u32), Entry)> + '_ {
        self.active.iter().map(|(k, e)| (*k, *e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn three_start_failures_back_a_pair_off_until_it_expires_and_a_success_resets() {
        let t0 = Instant::now();
        let mut b = Backoff::new(3, Duration::from_secs(60));
        assert_eq!(b.result(1, 0, true, false, t0), Change::None);
        assert_eq!(b.result(1, 0, true, false, t0), Change::None);
        // Another node and an ordinary failure do not count for (1, 0).
        assert_eq!(b.result(1, 1, true, false, t0), Change::None);
        assert_eq!(b.result(1, 0, false, false, t0), Change::None);
        assert_eq!(b.result(1, 0, true, false, t0), Change::BackedOff);
        assert_eq!(b.of_node(0).count(), 1);
        assert!(b.expire(0, t0 + Duration::from_secs(59)).is_empty());
        assert_eq!(b.expire(0, t0 + Duration::from_secs(60)), vec![1]);
        // Tried again: one more start failure backs it off at once …
        assert_eq!(b.result(1, 0, true, false, t0), Change::BackedOff);
        b.expire(0, t0 + Duration::from_secs(120));
        // … a success clears the count.
        b.result(1, 0, false, true, t0);
        assert_eq!(b.result(1, 0, true, false, t0), Change::None);
        // A purged job's application is forgotten, counts and back-offs alike.
        b.result(2, 3, true, false, t0);
        b.result(2, 3, true, false, t0);
        assert_eq!(b.result(2, 3, true, false, t0), Change::BackedOff);
        b.result(2, 4, true, false, t0);
        assert_eq!(b.forget_app(2), vec![3]);
        assert_eq!(b.of_node(3).count(), 0);
        assert_eq!(
            b.result(2, 4, true, false, t0),
            Change::None,
            "the count on node 4 went too"
        );
        // limit 0: never.
        let mut off = Backoff::new(0, Duration::from_secs(1));
        for _ in 0..10 {
            assert_eq!(off.result(1, 0, true, false, t0), Change::None);
        }
    }
}
