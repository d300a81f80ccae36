//! Signals an operator sends to running tasks (`hetsched signal JOB --signal USR1`, Slurm's
//! `scancel --signal`): a checkpoint asked for now rather than before the time limit, a log
//! reopened (`HUP`), a task paused and resumed (`STOP`, `CONT`). Nothing is cancelled: the task
//! runs on, or ends by itself as its program decides. A divisible job's signal goes to its
//! chunks out to agents (`chunk_of`: the job; the agent sends it to the one it computes).
//!
//! The job's kind names the attempts running now and their nodes
//! ([`crate::jobs::JobKind::running_attempts`]); each gets a *pending signal* with a seq. Every
//! heartbeat reply to that node carries its pending signals until the agent lists their seqs
//! in `signalled`. The agent sends each seq to the task's process group once per attempt, so a
//! lost reply or report costs a resend, never a second signal. A pending signal whose task no
//! longer runs on the node (ended, lost, killed) is dropped unsent, and one for an attempt the
//! agent does not run is acknowledged without being sent: a later attempt never gets an earlier
//! attempt's signal.
//!
//! Pending signals are stored (`task_signals`) before the request is answered, so a restarted
//! server still sends them — to the same attempts only. Seqs start above the largest stored and
//! at least at the server's start time in µs, so they only grow across restarts and an agent
//! never mistakes a new signal for one it delivered.

use crate::state::types::{RunningAttempt, TaskSignal};
use crate::store::{Store, StoreError};
use std::collections::BTreeMap;

/// Most signals waiting for delivery at once: a request that would pass it is refused.
pub const MAX_PENDING: usize = 100_000;
/// Most signals one heartbeat reply carries (the rest go in the next, at once).
pub const MAX_PER_REPLY: usize = 4096;

/// A signal waiting for its agent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pending {
    /// The node whose agent runs the attempt.
    pub node: u32,
    /// The task.
    pub task: u64,
    /// The attempt.
    pub attempt: u32,
    /// The signal's name without `SIG`.
    pub signal: &'static str,
    /// Non-zero: `task` is a chunk of this divisible job.
    pub chunk_of: u64,
}

/// The pending signals, by node and seq (a heartbeat looks at its node's only).
#[derive(Debug, Default)]
pub struct Signals {
    pending: BTreeMap<(u32, u64), Pending>,
    next_seq: u64,
}

/// What one heartbeat does with a node's pending signals.
#[derive(Debug, Default)]
pub struct ForNode {
    /// To send in the reply.
    pub send: Vec<TaskSignal>,
    /// More are pending than one reply carries.
    pub more: bool,
    /// Seqs done with (handled by the agent, or whose task left the node): deleted from the
    /// store.
    pub done: Vec<u64>,
}

impl Signals {
    /// The pending signals of the store; seqs go on above them and above `start_us`.
    pub fn restore(store: &Store, start_us: u64) -> Result<Self, StoreError> {
        let mut pending = BTreeMap::new();
        for r in store.task_signals()? {
            let signal = hetsched_core::input::task_signal(&r.signal)
                .map_err(|e| StoreError::Corrupt(format!("task_signals row {}: {e}", r.seq)))?;
            pending.insert(
                (r.node, r.seq),
                Pending {
                    node: r.node,
                    task: r.task,
                    attempt: r.attempt,
                    signal,
                    chunk_of: r.chunk_of,
                },
            );
        }
        let last = pending.keys().map(|&(_, seq)| seq).max().unwrap_or(0);
        Ok(Signals {
            pending,
            next_seq: start_us.max(last + 1),
        })
    }

    /// How many signals wait for delivery.
    pub fn len(&self) -> usize {
        self.pending.len()
    }

    /// Whether none waits.
    pub fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }

    /// New pending signals `signal` for `attempts`, with their seqs (to store, then to
    /// [`Signals::insert`]).
    pub fn plan(
        &mut self,
        attempts: &[RunningAttempt],
        signal: &'static str,
    ) -> Vec<(u64, Pending)> {
        attempts
            .iter()
            .map(|a| {
                let seq = self.next_seq;
                self.next_seq += 1;
                (
                    seq,
                    Pending {
                        node: a.node,
                        task: a.task_id,
                        attempt: a.attempt,
                        signal,
                        chunk_of: a.chunk_of,
                    },
                )
            })
            .collect()
    }

    /// Adds planned signals once they are stored.
    pub fn insert(&mut self, planned: Vec<(u64, Pending)>) {
        self.pending
            .extend(planned.into_iter().map(|(seq, p)| ((p.node, seq), p)));
    }

    /// At a heartbeat of `node`, whose agent handled the seqs `handled` and which still runs
    /// the attempts and holds the chunks `runs` says: what goes in the reply, and which pending
    /// signals are done.
    pub fn for_node(
        &mut self,
        node: u32,
        handled: &[u64],
        runs: impl Fn(&Pending) -> bool,
    ) -> ForNode {
        let handled: std::collections::HashSet<u64> = handled.iter().copied().collect();
        let mut out = ForNode::default();
        for (&(_, seq), p) in self.pending.range((node, 0)..=(node, u64::MAX)) {
            if handled.contains(&seq) || !runs(p) {
                out.done.push(seq);
            } else if out.send.len() < MAX_PER_REPLY {
                out.send.push(TaskSignal {
                    task_id: p.task,
                    attempt: p.attempt,
                    signal: p.signal,
                    seq,
                    chunk_of: p.chunk_of,
                });
            } else {
                out.more = true;
            }
        }
        for &seq in &out.done {
            self.pending.remove(&(node, seq));
        }
        out
    }

    /// The pending signals whose task no longer runs (or chunk is no longer held) on its node
    /// (`runs` false): dropped from memory, their seqs returned (a node that died never beats
    /// to drop them).
    pub fn sweep(&mut self, runs: impl Fn(&Pending) -> bool) -> Vec<u64> {
        let gone: Vec<(u32, u64)> = self
            .pending
            .iter()
            .filter(|(_, p)| !runs(p))
            .map(|(&key, _)| key)
            .collect();
        for key in &gone {
            self.pending.remove(key);
        }
        gone.into_iter().map(|(_, seq)| seq).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attempt(task: u64, node: u32) -> RunningAttempt {
        RunningAttempt {
            task_id: task,
            attempt: 1,
            node,
            chunk_of: 0,
        }
    }

    #[test]
    fn a_signal_is_sent_at_every_beat_until_its_agent_handled_it() {
        let mut s = Signals {
            next_seq: 10,
            ..Default::default()
        };
        let planned = s.plan(&[attempt(1, 0), attempt(2, 0), attempt(3, 1)], "USR1");
        assert_eq!(
            planned.iter().map(|p| p.0).collect::<Vec<_>>(),
            [10, 11, 12]
        );
        s.insert(planned);
        let runs = |_: &Pending| true;
        let first = s.for_node(0, &[], runs);
        assert_eq!(
            first.send.iter().map(|t| t.task_id).collect::<Vec<_>>(),
            [1, 2]
        );
        assert!(first.done.is_empty());
        // The reply was lost: sent again.
        assert_eq!(s.for_node(0, &[], runs).send.len(), 2);
        // The agent handled task 1's.
        let later = s.for_node(0, &[10], runs);
        assert_eq!(later.done, [10]);
        assert_eq!(later.send.iter().map(|t| t.seq).collect::<Vec<_>>(), [11]);
        // Task 2 ended on the node: dropped unsent.
        let ended = s.for_node(0, &[], |p| p.task != 2);
        assert_eq!((ended.done.as_slice(), ended.send.len()), (&[11][..], 0));
        // Node 1 died: its signal is swept.
        assert_eq!(s.sweep(|p| p.node != 1), [12]);
        assert!(s.is_empty());
    }

    #[test]
    fn a_reply_carries_at_most_its_share_and_says_there_is_more() {
        let mut s = Signals::default();
        let many: Vec<RunningAttempt> = (0..MAX_PER_REPLY as u64 + 5)
            .map(|t| attempt(t, 3))
            .collect();
        let planned = s.plan(&many, "HUP");
        s.insert(planned);
        let out = s.for_node(3, &[], |_| true);
        assert_eq!(out.send.len(), MAX_PER_REPLY);
        assert!(out.more);
    }
}
