//! A node's disk: read bandwidth shared equally by the requests reading at each moment
//! (processor sharing).
//!
//! With `n` readers each gets `BW / n`. Instead of updating every reader's remaining bytes on each
//! change (O(n) per event), the disk keeps one **virtual time** `S`: the bytes a reader that has been
//! reading all along would have received so far (`dS/dt = BW / n(t)`). A request of `b` bytes that
//! joins at `S₀` is finished when `S` reaches its *target* `S₀ + b`; targets sit in a min-heap, so
//! the next completion is always the smallest target, reached after `(target − S) · n / BW`.
//!
//! Every change (a join or a completion) bumps a **generation** number. The owner schedules one
//! completion event per change, tagged with the generation; an event whose generation is no longer
//! current is stale and ignored, so no event ever has to be removed from the queue.
//!
//! `S` is an `f64` number of bytes and is reset to 0 whenever the disk goes idle, so it stays small
//! and precise. Completion times are rounded up to whole nanoseconds; the reader whose event fires
//! is treated as finished even if rounding left `S` a hair short of its target.

use hetsched_core::time::{NANOS_PER_SEC, Time};
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// Slack, in bytes, under which a target counts as reached (absorbs `f64` rounding).
const TARGET_SLACK_BYTES: f64 = 1e-3;

/// A disk shared by processor sharing; `R` identifies a read request (e.g. a task index).
#[derive(Clone, Debug)]
pub struct SharedDisk<R: Ord + Copy> {
    bytes_per_ns: f64,
    bandwidth: f64,
    virtual_bytes: f64,
    last_update: Time,
    /// `(target bits, join order, request)`: non-negative `f64`s order like their bit patterns.
    readers: BinaryHeap<Reverse<(u64, u64, R)>>,
    joins: u64,
    generation: u64,
}

impl<R: Ord + Copy> SharedDisk<R> {
    /// An idle disk reading `bandwidth` bytes per second in total.
    pub fn new(bandwidth: f64) -> Self {
        Self {
            bytes_per_ns: bandwidth / NANOS_PER_SEC as f64,
            bandwidth,
            virtual_bytes: 0.0,
            last_update: 0,
            readers: BinaryHeap::new(),
            joins: 0,
            generation: 0,
        }
    }

    /// Total read bandwidth in bytes per second.
    pub fn bandwidth(&self) -> f64 {
        self.bandwidth
    }

    /// Requests reading now.
    pub fn readers(&self) -> usize {
        self.readers.len()
    }

    /// The generation a completion event must carry to be current.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Bytes per second the disk delivers now (its bandwidth when anyone reads, else 0).
    pub fn read_rate(&self) -> f64 {
        if self.readers.is_empty() {
            0.0
        } else {
            self.bandwidth
        }
    }

    fn advance(&mut self, now: Time) {
        let n = self.readers.len();
        if n > 0 && now > self.last_update {
            self.virtual_bytes += (now - self.last_update) as f64 * self.bytes_per_ns / n as f64;
        }
        self.last_update = now;
    }

    /// Bytes the current requests still have to read at `now`.
    pub fn outstanding_bytes(&self, now: Time) -> f64 {
        let n = self.readers.len();
        if n == 0 {
            return 0.0;
        }
        let v = self.virtual_bytes
            + now.saturating_sub(self.last_update) as f64 * self.bytes_per_ns / n as f64;
        self.readers
            .iter()
            .map(|Reverse((bits, _, _))| (f64::from_bits(*bits) - v).max(0.0))
            .sum()
    }

    /// Starts a read of `bytes` (> 0) for `request` at `now`. The caller schedules a completion
    /// event at [`SharedDisk::next_completion`] with the new [`SharedDisk::generation`].
    pub fn start_read(&mut self, now: Time, bytes: u64, request: R) {
        self.advance(now);
        let target = self.virtual_bytes + bytes as f64;
        self.readers
            .push(Reverse((target.to_bits(), self.joins, request)));
        self.joins += 1;
        self.generation += 1;
    }

    /// When the next request will finish if nothing changes, or `None` when idle.
    pub fn next_completion(&self) -> Option<Time> {
        let Reverse((bits, _, _)) = self.readers.peek()?;
        let n = self.readers.len() as f64;
        let left = (f64::from_bits(*bits) - self.virtual_bytes).max(0.0);
        // Round up, less a hair so an exact result is not pushed to the next nanosecond.
        let dt = (left * n / self.bytes_per_ns - 1e-6).ceil().max(0.0);
        Some(self.last_update.saturating_add(dt as Time))
    }

    /// Handles a completion event of `generation` at `now`: if it is current, pushes every finished
    /// request onto `done` (in target order) and returns true; a stale event returns false.
    pub fn complete(&mut self, now: Time, generation: u64, done: &mut Vec<R>) -> bool {
        if generation != self.generation {
            return false;
        }
        self.advance(now);
        if let Some(Reverse((bits, _, _))) = self.readers.peek() {
            // The event was scheduled for this head; rounding must not leave it unfinished.
            self.virtual_bytes = self.virtual_bytes.max(f64::from_bits(*bits));
        }
        while let Some(Reverse((bits, _, r))) = self.readers.peek() {
            if f64::from_bits(*bits) > self.virtual_bytes + TARGET_SLACK_BYTES {
                break;
            }
            done.push(*r);
            self.readers.pop();
        }
        if self.readers.is_empty() {
            self.virtual_bytes = 0.0;
        }
        self.generation += 1;
        true
    }

    /// Withdraws `request`'s read at `now` (its task was stopped): the others share the
    /// bandwidth from now on. Returns whether it was reading; if so the generation changed and
    /// the caller schedules a completion event at [`SharedDisk::next_completion`].
    pub fn cancel(&mut self, now: Time, request: R) -> bool {
        self.advance(now);
        let before = self.readers.len();
        self.readers.retain(|Reverse((_, _, r))| *r != request);
        if self.readers.len() == before {
            return false;
        }
        if self.readers.is_empty() {
            self.virtual_bytes = 0.0;
        }
        self.generation += 1;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    fn drain(disk: &mut SharedDisk<u32>) -> Vec<(Time, u32)> {
        let mut out = Vec::new();
        let mut done = Vec::new();
        while let Some(t) = disk.next_completion() {
            assert!(disk.complete(t, disk.generation(), &mut done));
            out.extend(done.drain(..).map(|r| (t, r)));
        }
        out
    }

    #[test]
    fn one_reader_gets_the_whole_bandwidth() {
        let mut d = SharedDisk::new(128.0 * MIB as f64);
        d.start_read(0, 256 * MIB, 7);
        assert_eq!(d.next_completion(), Some(2_000_000_000));
        assert_eq!(drain(&mut d), vec![(2_000_000_000, 7)]);
    }

    #[test]
    fn two_equal_readers_share_and_finish_together() {
        let mut d = SharedDisk::new(128.0 * MIB as f64);
        d.start_read(0, 128 * MIB, 1);
        d.start_read(0, 128 * MIB, 2);
        assert_eq!(drain(&mut d), vec![(2_000_000_000, 1), (2_000_000_000, 2)]);
    }

    #[test]
    fn a_late_joiner_slows_the_first() {
        // 128 MiB/s. A reads 128 MiB from t=0; B joins at 0.5 s with 32 MiB.
        // 0–0.5 s: A alone reads 64 MiB. Then both at 64 MiB/s: B's 32 MiB take 0.5 s (t=1 s),
        // A has read 96 MiB; its last 32 MiB alone take 0.25 s → t = 1.25 s.
        let mut d = SharedDisk::new(128.0 * MIB as f64);
        d.start_read(0, 128 * MIB, 1);
        d.start_read(500_000_000, 32 * MIB, 2);
        assert!((d.outstanding_bytes(500_000_000) - 96.0 * MIB as f64).abs() < 1.0);
        assert_eq!(drain(&mut d), vec![(1_000_000_000, 2), (1_250_000_000, 1)]);
    }

    #[test]
    fn a_withdrawn_read_gives_its_share_back() {
        // 128 MiB/s; A and B each read 128 MiB from 0. B is withdrawn at 1 s (64 MiB read by
        // each): A reads its last 64 MiB alone in 0.5 s.
        let mut d = SharedDisk::new(128.0 * MIB as f64);
        d.start_read(0, 128 * MIB, 1);
        d.start_read(0, 128 * MIB, 2);
        let g = d.generation();
        assert!(d.cancel(1_000_000_000, 2));
        assert!(!d.cancel(1_000_000_000, 2), "withdrawn once");
        assert_ne!(d.generation(), g, "the old completion event is stale");
        assert_eq!(drain(&mut d), vec![(1_500_000_000, 1)]);
        assert_eq!(d.readers(), 0);
    }

    #[test]
    fn stale_events_are_ignored() {
        let mut d = SharedDisk::new(1e9);
        d.start_read(0, 1000, 1u32);
        let old = d.generation();
        d.start_read(0, 1000, 2);
        let mut done = Vec::new();
        assert!(!d.complete(1_000, old, &mut done));
        assert!(done.is_empty());
    }
}
