//! The work an agent runs outside its heartbeat loop's tasks — divisible chunks and stream
//! workers — as the loops that run it publish it. Two readers need it: the idle timeout waits
//! until it rests, and the queue of prefetched tasks starts a task only in the cores it leaves,
//! so that a node never runs more cores' worth at once than it has.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering::Relaxed};
use tokio::sync::Notify;

/// Shared between the heartbeat loop, the divisible loop and the stream workers' sync loop.
#[derive(Clone, Debug, Default)]
pub struct Outside {
    /// How many divisible chunks the agent holds (receiving, waiting, computing, uploading).
    chunks: Arc<AtomicUsize>,
    /// How many stream workers run here.
    workers: Arc<AtomicUsize>,
    /// The cores the server books for them (`WorkerAssignment.cores`).
    worker_cores: Arc<AtomicU32>,
    /// Rung when some of it ends, so that a task waiting in the queue for its cores starts at
    /// once rather than at the next heartbeat. Its own bell, not the one a task's end rings:
    /// the heartbeat loop waits on it only while its queue holds tasks, so chunks ending one
    /// after another do not make an agent beat after each.
    freed: Arc<Notify>,
}

impl Outside {
    /// Returns once some of this work has ended since the last call (at once if it has).
    pub async fn freed(&self) {
        self.freed.notified().await;
    }

    /// The divisible loop holds `n` chunks now.
    pub fn set_chunks(&self, n: usize) {
        if n < self.chunks.swap(n, Relaxed) {
            self.freed.notify_one();
        }
    }

    /// `n` stream workers run here now, holding `cores` of the node's cores.
    pub fn set_workers(&self, n: usize, cores: u32) {
        self.workers.store(n, Relaxed);
        if cores < self.worker_cores.swap(cores, Relaxed) {
            self.freed.notify_one();
        }
    }

    /// How many divisible chunks the agent holds.
    pub fn chunks(&self) -> usize {
        self.chunks.load(Relaxed)
    }

    /// How many stream workers run here.
    pub fn workers(&self) -> usize {
        self.workers.load(Relaxed)
    }

    /// The cores this work holds, as the server books them: one while the agent holds a chunk
    /// (the server books one core per agent with chunks out, whatever their number), and each
    /// stream worker's.
    pub fn cores(&self) -> u32 {
        u32::from(self.chunks() > 0).saturating_add(self.worker_cores.load(Relaxed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chunk_holds_one_core_whatever_their_number_and_workers_their_booked_cores() {
        let o = Outside::default();
        assert_eq!(o.cores(), 0);
        o.set_chunks(2);
        assert_eq!(o.cores(), 1);
        o.set_workers(2, 3);
        assert_eq!((o.cores(), o.workers(), o.chunks()), (4, 2, 2));
        o.set_chunks(0);
        assert_eq!(o.cores(), 3);
    }

    #[tokio::test]
    async fn what_ends_rings_the_agent_and_what_starts_does_not() {
        let o = Outside::default();
        let rang = || async {
            tokio::time::timeout(std::time::Duration::from_millis(50), o.freed())
                .await
                .is_ok()
        };
        o.set_chunks(1);
        o.set_workers(1, 2);
        assert!(!rang().await, "nothing was freed");
        o.set_chunks(0);
        assert!(rang().await, "a chunk ended");
        o.set_workers(1, 1);
        assert!(rang().await, "a worker holds fewer cores");
        o.set_workers(1, 1);
        assert!(!rang().await, "nothing changed");
    }
}
