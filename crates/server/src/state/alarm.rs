//! When the server's housekeeping — the dead-node check and each kind's upkeep
//! ([`State::check_dead`](super::State::check_dead), [`State::plan_housekeeping`](super::State::plan_housekeeping)) — must run next. The reaper task (`lib.rs`)
//! sleeps until the planned instant. An event that may make something fall due before that
//! instant — an agent's open call ending, a node registering, a beat from a node running tasks,
//! a divisible agent asking without a hold — moves the plan earlier and wakes the reaper to
//! sleep until then; later events change nothing. So the reaper runs when something can be
//! due: a busy cluster's at the next possible death, an idle cluster's (whose agents live by
//! their open calls) once every [`CALM_RECHECK`], not four times per dead timeout.

use std::time::{Duration, Instant};
use tokio::sync::watch;

/// The longest the reaper sleeps when nothing is due: what no event announces (a retention
/// rule's time running out, eviction after a job cancelled on an idle cluster) waits at most
/// this long.
pub const CALM_RECHECK: Duration = Duration::from_secs(60);

/// The reaper's plan: the instant it sleeps until.
#[derive(Debug)]
pub struct Alarm {
    planned: watch::Sender<Instant>,
}

impl Default for Alarm {
    fn default() -> Self {
        Alarm {
            planned: watch::Sender::new(Instant::now()),
        }
    }
}

impl Alarm {
    /// What the reaper watches: the planned instant, and every move earlier.
    pub fn subscribe(&self) -> watch::Receiver<Instant> {
        self.planned.subscribe()
    }

    /// Something may fall due at `at`: if that is before the plan, the plan moves to it (and
    /// the reaper wakes to sleep until then).
    pub fn due(&self, at: Instant) {
        self.planned.send_if_modified(|p| {
            let earlier = at < *p;
            if earlier {
                *p = at;
            }
            earlier
        });
    }

    /// The reaper's plan after a pass: the earliest instant anything can fall due (not a
    /// wake-up: the reaper sleeps until it).
    pub fn plan(&self, at: Instant) {
        self.planned.send_if_modified(|p| {
            *p = at;
            false
        });
    }
}
