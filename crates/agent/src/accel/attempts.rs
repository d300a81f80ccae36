//! The offload attempts an ANode holds, by (task, attempt): what makes one ticket run its
//! attempt at most once, however many calls bring it.
//!
//! An NNode sends an attempt again, with the same ticket, when its call breaks (a network blip,
//! the ANode's listener restarting): that re-send must get the run already here, not start a
//! second one — and a ticket seen on the way, replayed, must not start one either. So an
//! attempt is remembered from the call that brought it until its ticket expires:
//!
//! - **receiving** — its call waits for the remote-read stage or sends its inputs. A re-send
//!   takes its place (the earlier call, broken, is dropped when the stage reaches it); nothing
//!   has run yet, and an attempt whose inputs never all arrive is forgotten.
//! - **live** — queued, running, or sending its result. A re-send takes the run over: its call
//!   is told to send no input (`OffloadReady.resumed`), gets the new time limit and the
//!   signals it brings, and the result of the one run. A run whose call went away waits
//!   [`REATTACH_GRACE`] for a re-send before it is killed (and a result whose sending broke,
//!   as long, with its files kept).
//! - **ended** — its result was sent, or it was abandoned: a call that brings its ticket again is
//!   refused, naming what happened, until the ticket expires. Then it is forgotten, and its
//!   ticket, expired, starts nothing.
//!
//! Memory is bounded: an attempt is forgotten once it ended and its ticket expired (the
//! server's `[offload] ticket_lifetime` after it signed it, an hour by default), and at most
//! [`MAX_REMEMBERED`] are held; past that a new offload is refused as `Unavailable` (the NNode
//! tries again, then reports the attempt interrupted) rather than forgetting one whose ticket
//! still verifies.
//!
//! What ran outlives the agent: an attempt is written to the work directory's record
//! ([`super::attempt_record`]) when it goes live and when it ends, and a restarted agent reads
//! it back ([`Attempts::recover`]): an attempt that ended is refused as before the restart, and
//! one that was live when the agent stopped is refused saying so — its ticket never starts a
//! second run, whichever agent it reaches.

use super::attempt_record::{self, Record, Recorded};
use super::service::Reply;
use hetsched_proto::ticket::Validity;
use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{mpsc, watch};

/// An attempt: its task and attempt number (unique per server: the server numbers attempts and
/// signs one ticket's worth per dispatch).
pub(crate) type Key = (u64, u32);

/// Most attempts held at once (receiving, live and ended): about 100 bytes each.
pub const MAX_REMEMBERED: usize = 100_000;

/// How long a run whose call went away, or whose result's sending broke, waits for the NNode to
/// send the attempt again before it is killed or its result dropped. The NNode tries a broken
/// transfer again after 0.1 s, then 0.2, 0.4, 0.8 and 1.6 s (`offload::TRANSFER_TRIES`): its
/// re-sends fall within this.
pub const REATTACH_GRACE: Duration = Duration::from_secs(5);

/// What the NNode says to a live attempt while it runs (`OffloadControl`).
pub(crate) struct Controls {
    /// Its time limit as the NNode last said.
    pub limit: watch::Sender<u64>,
    /// Signals for its process group.
    pub signals: mpsc::UnboundedSender<nix::sys::signal::Signal>,
}

/// A live attempt: where its result goes and what it is told.
pub(crate) struct Live {
    /// The call its result goes to: the latest that brought its ticket.
    pub reply: watch::Sender<Reply>,
    pub controls: Arc<Controls>,
}

impl Live {
    /// The call its result goes to now.
    pub fn current(&self) -> Reply {
        self.reply.borrow().clone()
    }
}

enum State {
    /// Its inputs are awaited or arriving on the call numbered `call`.
    Receiving {
        call: u64,
    },
    Live(Arc<Live>),
    /// Its result was sent, or it was abandoned: `outcome` says which.
    Ended {
        outcome: String,
    },
}

struct Entry {
    state: State,
    /// When its ticket expires (ms since the Unix epoch): it is forgotten after that.
    expires_ms: u64,
}

impl Entry {
    /// What the durable record says of it: nothing while it receives (nothing ran).
    fn recorded(&self) -> Option<Recorded> {
        let expires_ms = self.expires_ms;
        match &self.state {
            State::Receiving { .. } => None,
            State::Live(_) => Some(Recorded::Running { expires_ms }),
            State::Ended { outcome } => Some(Recorded::Ended {
                expires_ms,
                outcome: outcome.clone(),
            }),
        }
    }
}

/// The attempts an ANode holds (the module's doc).
#[derive(Default)]
pub(crate) struct Attempts {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    held: HashMap<Key, Entry>,
    /// The ended attempts by expiry, to forget them in order.
    ended: BTreeSet<(u64, Key)>,
    /// Calls numbered so far.
    calls: u64,
    /// The durable record of the live and ended attempts (none: memory only, in tests).
    record: Option<Record>,
}

/// What a call that brings a verified ticket gets.
pub(crate) enum Admit {
    /// A run of the attempt (the first call, or one that takes the place of a call whose inputs
    /// had not all arrived): its inputs come on call `call`.
    Run { call: u64 },
    /// The attempt is queued, running or sending its result here: the call takes it over.
    TakeOver(Arc<Live>),
    /// The attempt ended here: not run again.
    Ended(String),
    /// The ticket expired before it started a run.
    Expired,
    /// [`MAX_REMEMBERED`] attempts are held.
    Full,
}

impl Inner {
    /// Writes what `key` is now to the record, if there is one (the live and ended attempts:
    /// an attempt still receiving has not run, and is not recorded).
    fn record(&mut self, key: Key) {
        let Some(record) = &mut self.record else {
            return;
        };
        let Some(recorded) = self.held.get(&key).and_then(Entry::recorded) else {
            return;
        };
        let all = self
            .held
            .iter()
            .filter_map(|(k, e)| e.recorded().map(|r| (*k, r)));
        record.write(key, &recorded, self.held.len(), all);
    }

    /// Forgets the ended attempts whose tickets expired before `now_ms`.
    fn forget_expired(&mut self, now_ms: u64) {
        while let Some(&(expires, key)) = self.ended.first() {
            if expires >= now_ms {
                break;
            }
            self.ended.pop_first();
            self.held.remove(&key);
        }
    }
}

impl Attempts {
    /// The attempts the record in `work_dir` holds at `now_ms` (those whose tickets have not
    /// expired: each ended, a live one as cut off by the restart,
    /// [`attempt_record::RESTARTED`]), recording from then on there. An error: the record could
    /// not be read or rewritten (a symbolic link planted in its place, a read-only directory).
    pub fn recover(work_dir: &std::path::Path, now_ms: u64) -> std::io::Result<Self> {
        let (record, kept) = Record::open(work_dir, now_ms, MAX_REMEMBERED)?;
        let mut inner = Inner {
            record: Some(record),
            ..Inner::default()
        };
        for (key, recorded) in kept {
            let expires_ms = recorded.expires_ms();
            let outcome = match recorded {
                Recorded::Ended { outcome, .. } => outcome,
                // `Record::open` gives back no running attempt: the agent that ran it stopped.
                Recorded::Running { .. } => attempt_record::RESTARTED.to_string(),
            };
            inner.held.insert(
                key,
                Entry {
                    state: State::Ended { outcome },
                    expires_ms,
                },
            );
            inner.ended.insert((expires_ms, key));
        }
        Ok(Self {
            inner: Mutex::new(inner),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// What a call bringing a ticket for `key`, valid as `valid` says, gets at `now_ms`.
    pub fn admit(&self, key: Key, valid: Validity, now_ms: u64) -> Admit {
        let mut g = self.lock();
        g.forget_expired(now_ms);
        g.calls += 1;
        let call = g.calls;
        let len = g.held.len();
        match g.held.get_mut(&key) {
            Some(Entry {
                state: State::Live(live),
                ..
            }) => Admit::TakeOver(live.clone()),
            Some(Entry {
                state: State::Ended { outcome },
                ..
            }) => Admit::Ended(outcome.clone()),
            // Nothing ran: the later call receives the inputs (the earlier one broke).
            Some(Entry { state, .. }) => {
                *state = State::Receiving { call };
                Admit::Run { call }
            }
            None if valid.expired(now_ms) => Admit::Expired,
            None if len >= MAX_REMEMBERED => Admit::Full,
            None => {
                g.held.insert(
                    key,
                    Entry {
                        state: State::Receiving { call },
                        expires_ms: valid.expires_ms,
                    },
                );
                Admit::Run { call }
            }
        }
    }

    /// Whether call `call` still receives attempt `key` (no later call took its place).
    pub fn is_current(&self, key: Key, call: u64) -> bool {
        matches!(
            self.lock().held.get(&key),
            Some(Entry { state: State::Receiving { call: c }, .. }) if *c == call
        )
    }

    /// Call `call` received the inputs of `key`: it is live (false: a later call took its
    /// place, and this one's inputs are dropped).
    pub fn received(&self, key: Key, call: u64, live: Arc<Live>) -> bool {
        let mut g = self.lock();
        let Some(e) = g.held.get_mut(&key) else {
            return false;
        };
        if !matches!(e.state, State::Receiving { call: c } if c == call) {
            return false;
        }
        e.state = State::Live(live);
        // Recorded before its run starts: a restart from now on refuses its ticket.
        g.record(key);
        true
    }

    /// Call `call`'s inputs of `key` did not all arrive: nothing ran, and the attempt is
    /// forgotten (unless a later call took its place).
    pub fn not_received(&self, key: Key, call: u64) {
        let mut g = self.lock();
        if matches!(
            g.held.get(&key),
            Some(Entry { state: State::Receiving { call: c }, .. }) if *c == call
        ) {
            g.held.remove(&key);
        }
    }

    /// Attempt `key` ended as `outcome` says: a call bringing its ticket again is refused with
    /// it until the ticket expires (at once if it already has).
    pub fn ended(&self, key: Key, outcome: String, now_ms: u64) {
        let mut g = self.lock();
        let Some(e) = g.held.get_mut(&key) else {
            return;
        };
        let expires = e.expires_ms;
        if expires < now_ms {
            g.held.remove(&key);
            return;
        }
        e.state = State::Ended { outcome };
        g.ended.insert((expires, key));
        g.record(key);
    }

    /// How many attempts are held.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.lock().held.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const VALID: Validity = Validity {
        issued_ms: 1_000,
        expires_ms: 10_000,
        key_epoch: 0,
    };

    fn live() -> Arc<Live> {
        let (reply, _) = mpsc::channel(1);
        let (signals, _) = mpsc::unbounded_channel();
        Arc::new(Live {
            reply: watch::Sender::new(reply),
            controls: Arc::new(Controls {
                limit: watch::Sender::new(0),
                signals,
            }),
        })
    }

    /// One attempt's life: run once, taken over while live, refused once ended, forgotten once
    /// its ticket expired — and its ticket, expired then, starts nothing.
    #[test]
    fn an_attempt_runs_once_and_is_forgotten_only_once_its_ticket_expired() {
        let a = Attempts::default();
        let key = (7, 1);
        let Admit::Run { call: first } = a.admit(key, VALID, 2_000) else {
            panic!("a first call runs it");
        };
        // A re-send while the inputs had not all arrived takes the earlier call's place.
        let Admit::Run { call: second } = a.admit(key, VALID, 2_100) else {
            panic!("a re-send receives in its place");
        };
        assert!(!a.is_current(key, first) && a.is_current(key, second));
        assert!(
            !a.received(key, first, live()),
            "the earlier call's inputs are dropped"
        );
        assert!(a.received(key, second, live()));
        assert!(matches!(a.admit(key, VALID, 2_200), Admit::TakeOver(_)));
        // Past its expiry too: the run is here, no new one starts.
        assert!(matches!(a.admit(key, VALID, 20_000), Admit::TakeOver(_)));
        a.ended(key, "ran".into(), 3_000);
        assert!(matches!(a.admit(key, VALID, 9_000), Admit::Ended(o) if o == "ran"));
        assert!(matches!(a.admit(key, VALID, 10_000), Admit::Ended(_)));
        assert!(matches!(a.admit(key, VALID, 10_001), Admit::Expired));
        assert_eq!(a.len(), 0, "forgotten");
    }

    #[test]
    fn an_attempt_whose_inputs_never_arrived_is_forgotten_and_one_ended_after_expiry_at_once() {
        let a = Attempts::default();
        let Admit::Run { call } = a.admit((1, 1), VALID, 2_000) else {
            panic!("runs");
        };
        a.not_received((1, 1), call);
        assert_eq!(a.len(), 0);
        assert!(matches!(a.admit((1, 1), VALID, 2_000), Admit::Run { .. }));
        assert!(matches!(a.admit((2, 1), VALID, 10_001), Admit::Expired));
        let Admit::Run { call } = a.admit((3, 1), VALID, 2_000) else {
            panic!("runs");
        };
        assert!(a.received((3, 1), call, live()));
        a.ended((3, 1), "ran".into(), 10_001);
        assert!(matches!(a.admit((3, 1), VALID, 10_001), Admit::Expired));
    }

    /// A restarted agent reads back what its predecessor recorded: an ended attempt is refused
    /// with its outcome, one that was live when the agent stopped is refused saying the agent
    /// restarted during it, one still receiving (nothing ran) runs, and one whose ticket
    /// expired meanwhile is forgotten — in memory and in the record.
    #[test]
    fn ended_and_live_attempts_are_refused_after_a_restart_until_their_tickets_expire() {
        let dir = hetsched_core::testkit::ScratchDir::new("attempts", "restart");
        let a = Attempts::recover(&dir, 2_000).expect("the record");
        let run = |key| {
            let Admit::Run { call } = a.admit(key, VALID, 2_000) else {
                panic!("{key:?} runs");
            };
            call
        };
        let (ended, running, receiving) = ((1, 1), (2, 1), (3, 1));
        let call = run(ended);
        assert!(a.received(ended, call, live()));
        a.ended(ended, "ran here (success)".into(), 2_500);
        let call = run(running);
        assert!(a.received(running, call, live()));
        run(receiving);
        drop(a);

        let again = Attempts::recover(&dir, 3_000).expect("the record");
        assert!(
            matches!(again.admit(ended, VALID, 3_000), Admit::Ended(o) if o == "ran here (success)")
        );
        let Admit::Ended(why) = again.admit(running, VALID, 3_000) else {
            panic!("a live attempt is not run again after a restart");
        };
        assert!(why.contains("when this ANode's agent restarted"), "{why}");
        assert!(matches!(
            again.admit(receiving, VALID, 3_000),
            Admit::Run { .. }
        ));
        // And after a second restart, the same.
        drop(again);
        let third = Attempts::recover(&dir, 3_000).expect("the record");
        assert!(matches!(third.admit(running, VALID, 3_000), Admit::Ended(o) if o == why));
        drop(third);
        // Past their tickets' expiry they are forgotten, and the record is emptied.
        let later = Attempts::recover(&dir, 10_001).expect("the record");
        assert_eq!(later.len(), 0);
        assert!(matches!(later.admit(ended, VALID, 10_001), Admit::Expired));
        let text = std::fs::read_to_string(dir.join(attempt_record::FILE_NAME)).expect("test file");
        assert_eq!(text, "", "expired attempts are dropped from the record");
    }

    /// The record is private (0600) and bounded: it is rewritten once it holds
    /// [`attempt_record::COMPACT_AFTER`] lines more than the attempts held, the forgotten ones
    /// left out.
    #[test]
    fn the_record_is_private_and_compacted_as_attempts_are_forgotten() {
        use std::os::unix::fs::PermissionsExt;
        let dir = hetsched_core::testkit::ScratchDir::new("attempts", "compact");
        let a = Attempts::recover(&dir, 0).expect("the record");
        let path = dir.join(attempt_record::FILE_NAME);
        let mode = std::fs::metadata(&path)
            .expect("test file")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        let mut t = 0;
        let lines = || {
            std::fs::read_to_string(&path)
                .expect("test file")
                .lines()
                .count()
        };
        // Attempts that each end after their ticket's expiry of the one before: at most one
        // is held at a time, and the record never grows past the bound.
        let mut most = 0;
        while t < 3 * attempt_record::COMPACT_AFTER as u64 {
            let valid = Validity {
                issued_ms: t,
                expires_ms: t + 1,
                key_epoch: 0,
            };
            let Admit::Run { call } = a.admit((t, 1), valid, t) else {
                panic!("runs");
            };
            assert!(a.received((t, 1), call, live()));
            a.ended((t, 1), "ran".into(), t);
            let written = a.lock().record.as_ref().map_or(0, Record::lines);
            most = most.max(written);
            t += 2;
        }
        assert!(most <= attempt_record::COMPACT_AFTER + 2, "{most} lines");
        assert!(
            most > attempt_record::COMPACT_AFTER / 2,
            "it grew: {most} lines"
        );
        let written = a.lock().record.as_ref().map_or(0, Record::lines);
        assert_eq!(lines(), written, "the file holds what was written");
        assert!(a.len() <= 2);
    }

    /// A symbolic link planted as the record is refused, and its target left as it was.
    #[test]
    fn a_record_planted_as_a_symlink_is_refused() {
        let dir = hetsched_core::testkit::ScratchDir::new("attempts", "symlink");
        let target = dir.join("elsewhere");
        std::fs::write(&target, "keep").expect("test file");
        std::os::unix::fs::symlink(&target, dir.join(attempt_record::FILE_NAME))
            .expect("test file");
        assert!(Attempts::recover(&dir, 0).is_err());
        assert_eq!(std::fs::read_to_string(&target).expect("test file"), "keep");
    }

    #[test]
    fn no_more_than_the_bound_is_held_and_expired_attempts_make_room() {
        let a = Attempts::default();
        for t in 0..MAX_REMEMBERED as u64 {
            let Admit::Run { call } = a.admit((t, 1), VALID, 2_000) else {
                panic!("room for {t}");
            };
            assert!(a.received((t, 1), call, live()));
            a.ended((t, 1), "ran".into(), 2_000);
        }
        assert!(matches!(a.admit((u64::MAX, 1), VALID, 2_000), Admit::Full));
        let later = Validity {
            issued_ms: 10_000,
            expires_ms: 20_000,
            key_epoch: 0,
        };
        assert!(matches!(
            a.admit((u64::MAX, 1), later, 10_001),
            Admit::Run { .. }
        ));
        assert_eq!(a.len(), 1);
    }
}
