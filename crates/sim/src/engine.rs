//! The generic discrete-event machinery: an integer clock and a deterministic event queue.
//!
//! Nothing here knows about tasks, disks or heartbeats. A mechanism (batch tasks, and later
//! networks, binding, divisible loads, stream topologies) defines its own event type and a
//! [`Model`] that handles it; [`run`] pops events in `(time, sequence)` order and hands them to the
//! model. Two events at the same instant are handled in the order they were scheduled, so a run is
//! a pure function of its inputs (and seed): the same inputs give the same events in the same order.
//!
//! The queue is `BinaryHeap<Reverse<(Time, u64, E)>>`: the sequence number is unique, so `E`'s own
//! ordering never decides anything; it is only required by the tuple's `Ord`.

use hetsched_core::time::Time;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// A min-queue of timed events with a deterministic tie-break (scheduling order) and the clock.
#[derive(Debug)]
pub struct EventQueue<E: Ord> {
    heap: BinaryHeap<Reverse<(Time, u64, E)>>,
    seq: u64,
    now: Time,
    handled: u64,
}

impl<E: Ord> Default for EventQueue<E> {
    fn default() -> Self {
        Self::new()
    }
}

impl<E: Ord> EventQueue<E> {
    /// An empty queue at time 0.
    pub fn new() -> Self {
        Self {
            heap: BinaryHeap::new(),
            seq: 0,
            now: 0,
            handled: 0,
        }
    }

    /// An empty queue with room for `capacity` events.
    pub fn with_capacity(capacity: usize) -> Self {
        Self {
            heap: BinaryHeap::with_capacity(capacity),
            ..Self::new()
        }
    }

    /// The current simulated time: the time of the event being handled.
    pub fn now(&self) -> Time {
        self.now
    }

    /// Schedules `event` at `at`. An instant in the past is moved to now, so time never runs
    /// backwards.
    pub fn schedule(&mut self, at: Time, event: E) {
        let at = at.max(self.now);
        self.heap.push(Reverse((at, self.seq, event)));
        self.seq += 1;
    }

    /// Schedules `event` `delay` after now (saturating at the end of time).
    pub fn schedule_in(&mut self, delay: Time, event: E) {
        self.schedule(self.now.saturating_add(delay), event);
    }

    /// The time of the next event, if any.
    pub fn peek_time(&self) -> Option<Time> {
        self.heap.peek().map(|Reverse((t, _, _))| *t)
    }

    /// Removes the next event and advances the clock to it.
    pub fn pop(&mut self) -> Option<(Time, E)> {
        let Reverse((t, _, e)) = self.heap.pop()?;
        self.now = t;
        self.handled += 1;
        Some((t, e))
    }

    /// Events waiting.
    pub fn len(&self) -> usize {
        self.heap.len()
    }

    /// Whether no event is waiting.
    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }

    /// Events popped so far.
    pub fn handled(&self) -> u64 {
        self.handled
    }
}

/// What a model tells the loop after handling an event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flow {
    /// Keep going.
    Continue,
    /// The model is done; stop even if events remain (e.g. periodic ones).
    Stop,
}

/// A simulated mechanism: its own event type and how it reacts to each event.
pub trait Model {
    /// The events this model schedules.
    type Event: Ord;
    /// The error a model may stop the run with.
    type Error;

    /// Called before the clock moves from `from` to `to` (`to > from`), with the state as it is
    /// after every event at or before `from`: the place for time-driven samplers.
    fn advance(&mut self, from: Time, to: Time) {
        let _ = (from, to);
    }

    /// Handles one event at `queue.now()`; may schedule more.
    fn handle(
        &mut self,
        event: Self::Event,
        queue: &mut EventQueue<Self::Event>,
    ) -> Result<Flow, Self::Error>;
}

/// Runs `model` until it says [`Flow::Stop`] or no event is left; returns the final time.
pub fn run<M: Model>(model: &mut M, queue: &mut EventQueue<M::Event>) -> Result<Time, M::Error> {
    let mut now = queue.now();
    while let Some((t, event)) = queue.pop() {
        if t > now {
            model.advance(now, t);
            now = t;
        }
        if model.handle(event, queue)? == Flow::Stop {
            break;
        }
    }
    Ok(now)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ties_are_broken_by_scheduling_order() {
        let mut q = EventQueue::new();
        q.schedule(5, 'b');
        q.schedule(3, 'z');
        q.schedule(5, 'a');
        let order: Vec<_> = std::iter::from_fn(|| q.pop()).collect();
        assert_eq!(order, vec![(3, 'z'), (5, 'b'), (5, 'a')]);
        assert_eq!(q.handled(), 3);
    }

    #[test]
    fn the_past_is_now() {
        let mut q = EventQueue::new();
        q.schedule(10, 1u8);
        assert_eq!(q.pop(), Some((10, 1)));
        q.schedule(4, 2);
        assert_eq!(q.pop(), Some((10, 2)));
    }
}
