//! Graceful shutdown of an agent.
//!
//! On the first SIGTERM or SIGINT the agent stops taking work (its heartbeats say `draining`, and
//! the server assigns it nothing more), then either stops its running tasks (SIGTERM to their
//! process groups, SIGKILL after the kill grace: [`crate::launch`]) — their results go to the
//! server marked `interrupted`, so the server runs them again elsewhere rather than counting a
//! failure — or, with `--drain`, waits for them to end. A multi-node task this node is a member
//! of (its command runs on another node, so no process of it runs here; the server names it in
//! every heartbeat reply, `member_of`) counts as a running task: `--drain` waits for it to end,
//! and without `--drain` the agent leaves it (it is lost and runs again). It keeps
//! heartbeating until the server has acknowledged every result, logs what it did, and exits 0.
//!
//! A second signal exits at once: [`Processes::kill_all`] kills the process group of every task
//! still running (so none is left behind under init), and the process exits. Results not yet
//! acknowledged stay in the ledger and are sent by the next agent started in the work directory.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How long a shutting-down agent keeps trying to hand its results to an unreachable server
/// before it exits anyway (they stay in the ledger).
pub const RESULT_GRACE: Duration = Duration::from_secs(10);

/// The process groups of the tasks running on this agent (pgid = the task's pid), shared with the
/// signal handler so that a second signal can kill them without the agent's loop.
#[derive(Clone, Debug, Default)]
pub struct Processes(Arc<Mutex<HashSet<u32>>>);

impl Processes {
    /// A task's process started.
    pub fn add(&self, pid: u32) {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).insert(pid);
    }

    /// A task's process ended.
    pub fn remove(&self, pid: u32) {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&pid);
    }

    /// How many task processes run.
    pub fn len(&self) -> usize {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// Whether none runs.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// SIGKILLs every running task's process group; returns how many.
    pub fn kill_all(&self) -> usize {
        let pids: Vec<u32> = self
            .0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .copied()
            .collect();
        for &pid in &pids {
            crate::launch::signal_group(pid, nix::sys::signal::Signal::SIGKILL);
        }
        pids.len()
    }
}

/// Resolves at each SIGTERM or SIGINT (the streams are registered once, so a second signal is
/// never missed while the first is handled).
pub struct Signals {
    term: Option<tokio::signal::unix::Signal>,
    int: Option<tokio::signal::unix::Signal>,
}

impl Signals {
    /// Registers the handlers.
    pub fn new() -> Self {
        use tokio::signal::unix::{SignalKind, signal};
        Self {
            term: signal(SignalKind::terminate()).ok(),
            int: signal(SignalKind::interrupt()).ok(),
        }
    }

    /// The next signal; its name.
    pub async fn next(&mut self) -> &'static str {
        async fn recv(s: &mut Option<tokio::signal::unix::Signal>) {
            match s {
                Some(s) => {
                    s.recv().await;
                }
                None => std::future::pending().await,
            }
        }
        tokio::select! {
            () = recv(&mut self.term) => "SIGTERM",
            () = recv(&mut self.int) => "SIGINT",
        }
    }
}

impl Default for Signals {
    fn default() -> Self {
        Self::new()
    }
}
