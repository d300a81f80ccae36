//! The traffic monitor of spec 04 ("Monitoring API"), as a pure data structure the simulator and
//! the runtime both feed.
//!
//! A task-level monitor offers a *tuple-sent* notification (called in spouts) and a
//! *tuple-received* record (called in bolts, naming the sender); the per-node monitor aggregates
//! tuples per (sender executor, receiver executor) pair, and every period the counts become the
//! **executor traffic list** (tuples/s over the period) that the placers read. Here the
//! aggregation is one map; [`TrafficMonitor::flush`] turns it into the list and starts a new
//! period.

use crate::model::topology::{ExecutorId, ExecutorPair};
use crate::time::{Time, to_secs};
use std::collections::BTreeMap;

/// Counts of tuples per executor pair since the period began.
#[derive(Clone, Debug, Default)]
pub struct TrafficMonitor {
    received: BTreeMap<(ExecutorId, ExecutorId), f64>,
    sent: BTreeMap<ExecutorId, f64>,
    period_start: Time,
}

impl TrafficMonitor {
    /// A monitor whose first period starts at `now`.
    pub fn new(now: Time) -> Self {
        Self {
            period_start: now,
            ..Self::default()
        }
    }

    /// Tuple-sent notification: `count` tuples emitted by spout executor `from`.
    pub fn tuples_sent(&mut self, from: ExecutorId, count: f64) {
        *self.sent.entry(from).or_default() += count;
    }

    /// Tuple-received record: `count` tuples from `from` received by bolt executor `to`.
    pub fn tuples_received(&mut self, from: ExecutorId, to: ExecutorId, count: f64) {
        *self.received.entry((from, to)).or_default() += count;
    }

    /// Tuples emitted by each spout executor this period.
    pub fn sent(&self) -> &BTreeMap<ExecutorId, f64> {
        &self.sent
    }

    /// The executor traffic list of the period that ends at `now` (tuples/s, pairs in id
    /// order), and a new period from `now`. An empty period gives an empty list.
    pub fn flush(&mut self, now: Time) -> Vec<ExecutorPair> {
        let secs = to_secs(now.saturating_sub(self.period_start));
        self.period_start = now;
        self.sent.clear();
        let received = std::mem::take(&mut self.received);
        if secs <= 0.0 {
            return Vec::new();
        }
        received
            .into_iter()
            .filter(|(_, c)| *c > 0.0)
            .map(|((from, to), c)| ExecutorPair {
                from,
                to,
                tuples_per_s: c / secs,
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::time::NANOS_PER_SEC;

    #[test]
    fn a_period_becomes_rates_per_pair() {
        let mut m = TrafficMonitor::new(0);
        m.tuples_received(ExecutorId(0), ExecutorId(2), 300.0);
        m.tuples_received(ExecutorId(0), ExecutorId(2), 100.0);
        m.tuples_received(ExecutorId(1), ExecutorId(2), 50.0);
        let list = m.flush(2 * NANOS_PER_SEC);
        assert_eq!(list.len(), 2);
        assert_eq!(list[0].tuples_per_s, 200.0);
        assert_eq!(list[1].tuples_per_s, 25.0);
        assert!(m.flush(3 * NANOS_PER_SEC).is_empty());
    }
}
