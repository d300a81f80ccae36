//! The server's own stalls, and the grace they give everything it judges by silence.
//!
//! A server that does not listen — stopped (SIGSTOP, a paused or migrated VM), starved (a swap
//! storm) or holding its own state for long (a purge of millions of tasks, a backup) — hears
//! no agent meanwhile, however often the agents call: their calls wait in its sockets or
//! behind its lock. What it did not hear then is no agent's silence. The timers that run
//! passes of the server (the reaper, the topology controller's tick) measure how late their
//! pass ran and how long it waited for the state, and hand that to one place,
//! [`Stalls::note`] (through `State::server_stalled`), which decides what counts as a stall
//! and how much of it is new. Every judge of silence — the dead-node check, the divisible
//! kind's reaper, the topology kind's live nodes — keeps a [`Grace`] per agent and counts the
//! agent's silence from [`Grace::silent_from`].
//!
//! The rule, and its bound: the first stall in an agent's silence gives it a fresh dead
//! timeout from the stall's end (its agent may have given up on its calls meanwhile, and
//! reaches the server again as after a restart); every later stall in the same silence adds
//! only its own length. So a server that keeps running late — each pass a stall's length
//! late, persistently overloaded — still declares a dead agent dead: once it has been silent
//! for two dead timeouts plus the stalls themselves. Before, every late pass gave every agent
//! a fresh dead timeout again, and a dead one never died.

use std::time::{Duration, Instant};

/// A stall of the server this long (or a quarter of the dead timeout, if shorter:
/// [`threshold`]) is one ([`Stalls::note`]): far above a pass's usual lateness (milliseconds),
/// so that a merely busy server measures none.
pub const STALL: Duration = Duration::from_secs(1);

/// How long the server must not have listened for it to count as a stall, under dead
/// timeout `dead_timeout`: [`STALL`], or a quarter of the dead timeout if that is shorter.
pub fn threshold(dead_timeout: Duration) -> Duration {
    STALL.min(dead_timeout / 4)
}

/// A stall of the server, as [`Stalls::note`] recorded it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stall {
    /// When it ended (the server listens again).
    pub end: Instant,
    /// How much of it no earlier stall covered: a stall reported twice (by two timers, or by
    /// one pass before and after its own long hold of the state) counts once.
    pub new: Duration,
}

/// The stalls recorded so far: the end of the last one.
#[derive(Debug, Default)]
pub struct Stalls {
    last_end: Option<Instant>,
}

impl Stalls {
    /// A timer's pass found that the server did not listen for `stalled` up to `now` (how late
    /// the pass ran, how long it waited for the state, how long it held it). Returns the stall
    /// to grant, or None for one shorter than [`threshold`] (a zero one, from a check run by
    /// hand, included).
    pub fn note(
        &mut self,
        dead_timeout: Duration,
        stalled: Duration,
        now: Instant,
    ) -> Option<Stall> {
        if stalled.is_zero() || stalled < threshold(dead_timeout) {
            return None;
        }
        // Only what lies after the last recorded stall's end is new.
        let new = self.last_end.map_or(stalled, |end| {
            stalled.min(now.saturating_duration_since(end))
        });
        self.last_end = Some(self.last_end.map_or(now, |end| end.max(now)));
        Some(Stall { end: now, new })
    }
}

/// What the server's stalls gave one agent (a node, a divisible agent, a topology node) during
/// its current silence. Empty until a stall comes; stale, and so ignored, once the agent is
/// heard after it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Grace {
    /// The end of the first stall of its silence, and the new lengths of the stalls since.
    given: Option<(Instant, Duration)>,
}

impl Grace {
    /// `stall` ended; the agent was last heard at `last_seen`. The first stall since then
    /// restarts its silence at the stall's end; a later one adds its new length.
    pub fn stalled(&mut self, last_seen: Instant, stall: Stall) {
        self.given = Some(match self.given {
            Some((at, more)) if at >= last_seen => (at, more + stall.new),
            _ => (stall.end, Duration::ZERO),
        });
    }

    /// From when the silence of an agent last heard at `last_seen` counts: then, or later by
    /// what the server's stalls since then excuse.
    pub fn silent_from(&self, last_seen: Instant) -> Instant {
        match self.given {
            Some((at, more)) if at >= last_seen => at + more,
            _ => last_seen,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: Duration = Duration::from_secs(4);

    fn secs(s: f64) -> Duration {
        Duration::from_secs_f64(s)
    }

    /// The first stall of a silence gives a fresh start at its end; a later one only its own
    /// length, so a second stop soon after the first leaves the agent as long after it as it
    /// had left; an agent heard after a stall gets a fresh start at the next.
    #[test]
    fn a_later_stall_in_one_silence_adds_its_length_and_a_heard_agent_starts_afresh() {
        let t0 = Instant::now();
        let mut stalls = Stalls::default();
        let mut g = Grace::default();
        assert_eq!(g.silent_from(t0), t0, "no stall yet");
        // Stopped from 1 s to 9 s.
        let s1 = stalls.note(T, secs(8.0), t0 + secs(9.0)).expect("a stall");
        g.stalled(t0, s1);
        assert_eq!(g.silent_from(t0), t0 + secs(9.0), "fresh from its end");
        // Stopped again from 9.5 s to 19.5 s, still unheard: 10 s more, not a fresh start.
        let s2 = stalls
            .note(T, secs(10.0), t0 + secs(19.5))
            .expect("a stall");
        g.stalled(t0, s2);
        assert_eq!(g.silent_from(t0), t0 + secs(19.0));
        // Heard at 20 s, then a third stop: fresh from its end.
        let heard = t0 + secs(20.0);
        assert_eq!(
            g.silent_from(heard),
            heard,
            "heard since: the stalls are past"
        );
        let s3 = stalls.note(T, secs(5.0), t0 + secs(26.0)).expect("a stall");
        g.stalled(heard, s3);
        assert_eq!(g.silent_from(heard), t0 + secs(26.0));
    }

    /// A stall reported twice — by two timers, or by one pass before and after it held the
    /// state — counts once; a lateness under the threshold is no stall.
    #[test]
    fn a_stall_reported_twice_counts_once_and_a_short_one_is_none() {
        let t0 = Instant::now();
        let mut stalls = Stalls::default();
        assert_eq!(stalls.note(T, secs(0.9), t0), None, "under 1 s");
        assert_eq!(stalls.note(T, Duration::ZERO, t0), None);
        assert_eq!(
            stalls.note(Duration::from_millis(400), secs(0.1), t0),
            Some(Stall {
                end: t0,
                new: secs(0.1)
            }),
            "a quarter of a short dead timeout"
        );
        let end = t0 + secs(10.0);
        let a = stalls.note(T, secs(8.0), end).expect("a stall");
        assert_eq!(a.new, secs(8.0));
        // The same stall from another timer, a moment later: only that moment is new.
        let b = stalls
            .note(T, secs(7.95), end + secs(0.05))
            .expect("a stall");
        assert_eq!(b.new, secs(0.05));
    }
}
