//! Group commit: the store's transactions are made durable by one `fdatasync` of SQLite's
//! write-ahead log shared by every reply waiting at that moment, outside the state's lock.
//!
//! The store runs SQLite in WAL mode with `synchronous=NORMAL`: a commit appends its frames to
//! the WAL (in the kernel's page cache) and returns without an fsync. Each successful write
//! bumps [`Durable::written`]. Before the service answers a call that wrote (a heartbeat, a
//! submission, a registration, a cancel, a purge …) it waits until the WAL has been synced past
//! the writes made up to the end of that call ([`Durable::wait`]). A call that finds no sync
//! under way performs one itself, on its own thread (no hand-off); calls arriving while a sync
//! runs go to a flusher thread, which syncs once for every batch of them. So:
//! - **nothing acknowledged is lost**: a reply (an acknowledged result, an assignment, a job id)
//!   leaves the server only after its rows are on disk — the guarantee `synchronous=FULL` gave;
//! - what a crash of the *machine* (power loss, kernel panic) can lose is only writes whose
//!   replies had not been sent: a task the server had dispatched but not yet announced (it is
//!   pending again after the restart), a result not yet acknowledged (the agent still holds it
//!   and sends it again), a dead-node re-queue (the node's tasks are re-queued again). The WAL
//!   is append-only and each sync covers every frame written before it, so what survives is
//!   always a prefix of the commits;
//! - a crash of the *server process* (SIGKILL, panic) loses nothing committed: the WAL's pages
//!   are in the kernel's page cache, which the process does not own.
//!
//! SQLite's own checkpoints (every 1000 WAL pages) sync the WAL and the database file as
//! before. A failed `fdatasync` fails the waiting replies (`Unavailable`: agents and clients
//! retry; nothing was acknowledged) and is tried again at the next request.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, Weak};
use tokio::sync::watch;

/// Why a write could not be made durable.
#[derive(Debug, thiserror::Error)]
#[error("syncing the store's write-ahead log {path} failed: {source}")]
pub struct SyncError {
    /// The WAL.
    pub path: PathBuf,
    /// The error.
    pub source: std::io::Error,
}

/// How far the WAL is synced.
#[derive(Clone, Copy, Debug, Default)]
struct Progress {
    /// Every write up to this count is durable.
    synced: u64,
    /// Syncs that failed so far.
    failures: u64,
    /// The last failed sync was meant to cover writes up to this count.
    failed: u64,
}

/// The flusher's inbox.
#[derive(Default)]
struct Requests {
    asked: Mutex<Asked>,
    wake: Condvar,
}

#[derive(Default)]
struct Asked {
    /// The highest write count a caller waits for.
    seq: u64,
    /// The [`Durable`] is gone: the flusher stops.
    closed: bool,
}

/// The durability of one store's writes (see the module documentation).
pub struct Durable {
    /// The store's WAL (`None`: an in-memory store, durable as soon as written).
    wal: Option<PathBuf>,
    /// Successful writes so far.
    written: AtomicU64,
    /// What callers ask of the flusher thread (shared with it: it holds no handle to `self`
    /// while it waits, so it sleeps until asked, not on a timer).
    requests: Arc<Requests>,
    progress: watch::Sender<Progress>,
    /// Whether the flusher thread runs (else a waiter syncs itself).
    started: AtomicBool,
    /// A waiter is syncing on its own thread right now (see [`Durable::wait`]).
    syncing: AtomicBool,
    /// The data directory was synced once the WAL existed (its entry must survive a crash).
    dir_synced: AtomicBool,
    /// `fdatasync` calls made.
    syncs: AtomicU64,
    /// Make every sync fail (tests).
    fail: AtomicBool,
}

impl Durable {
    /// The durability of the store at `db` (its WAL is `db` + `-wal`).
    pub fn for_file(db: &Path) -> Arc<Self> {
        let mut wal = db.as_os_str().to_owned();
        wal.push("-wal");
        Self::new(Some(PathBuf::from(wal)))
    }

    /// An in-memory store's: every write counts as durable.
    pub fn in_memory() -> Arc<Self> {
        Self::new(None)
    }

    fn new(wal: Option<PathBuf>) -> Arc<Self> {
        Arc::new(Durable {
            wal,
            written: AtomicU64::new(0),
            requests: Arc::default(),
            progress: watch::Sender::new(Progress::default()),
            started: AtomicBool::new(false),
            syncing: AtomicBool::new(false),
            dir_synced: AtomicBool::new(false),
            syncs: AtomicU64::new(0),
            fail: AtomicBool::new(false),
        })
    }

    /// The store committed a write.
    pub fn wrote(&self) {
        self.written.fetch_add(1, Ordering::SeqCst);
    }

    /// How many writes the store committed so far.
    pub fn written(&self) -> u64 {
        self.written.load(Ordering::SeqCst)
    }

    /// How many times the WAL was synced.
    pub fn syncs(&self) -> u64 {
        self.syncs.load(Ordering::SeqCst)
    }

    /// Makes every sync fail (or succeed again): for tests of the failure path.
    #[doc(hidden)]
    pub fn simulate_sync_failure(&self, fail: bool) {
        self.fail.store(fail, Ordering::SeqCst);
    }

    /// Starts the flusher thread (once). It stops when the last handle to `self` is dropped.
    pub fn start(self: &Arc<Self>) {
        if self.wal.is_none() || self.started.swap(true, Ordering::SeqCst) {
            return;
        }
        let me: Weak<Durable> = Arc::downgrade(self);
        let requests = self.requests.clone();
        let spawned = std::thread::Builder::new()
            .name("hetsched-wal-sync".into())
            .spawn(move || flusher(me, &requests));
        if let Err(e) = spawned {
            tracing::warn!("cannot start the WAL sync thread ({e}); replies sync themselves");
            self.started.store(false, Ordering::SeqCst);
        }
    }

    /// Waits until every write up to count `seq` is durable.
    pub async fn wait(&self, seq: u64) -> Result<(), SyncError> {
        if self.wal.is_none() || self.progress.borrow().synced >= seq {
            return Ok(());
        }
        if !self.started.load(Ordering::SeqCst) {
            return self.sync_through(seq);
        }
        // No sync under way: this call syncs on its own thread (one `fdatasync`, no hand-off to
        // the flusher and back — two thread switches fewer per heartbeat). Calls arriving while
        // it syncs go to the flusher, which syncs once for all of them.
        if !self.syncing.swap(true, Ordering::SeqCst) {
            let r = self.sync_through(seq);
            self.syncing.store(false, Ordering::SeqCst);
            return r;
        }
        let mut rx = self.progress.subscribe();
        // Only a failure after this call's request fails it (an older one was retried since).
        let failures = rx.borrow().failures;
        {
            let mut r = self
                .requests
                .asked
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            r.seq = r.seq.max(seq);
        }
        self.requests.wake.notify_one();
        let p = *rx
            .wait_for(|p| p.synced >= seq || (p.failures > failures && p.failed >= seq))
            .await
            .map_err(|_| self.error(std::io::Error::other("the WAL sync thread stopped")))?;
        if p.synced >= seq {
            Ok(())
        } else {
            Err(self.error(std::io::Error::other(
                "fdatasync failed (see the server's log)",
            )))
        }
    }

    /// Waits (blocking the thread) until every write up to `seq` is durable.
    pub fn wait_blocking(&self, seq: u64) -> Result<(), SyncError> {
        if self.wal.is_none() || self.progress.borrow().synced >= seq {
            return Ok(());
        }
        self.sync_through(seq)
    }

    fn error(&self, source: std::io::Error) -> SyncError {
        SyncError {
            path: self.wal.clone().unwrap_or_default(),
            source,
        }
    }

    /// Syncs now, covering every write committed before the call, and publishes it.
    fn sync_through(&self, seq: u64) -> Result<(), SyncError> {
        let target = self.written().max(seq);
        match self.sync() {
            Ok(()) => {
                self.progress
                    .send_modify(|p| p.synced = p.synced.max(target));
                Ok(())
            }
            Err(e) => {
                self.progress.send_modify(|p| {
                    p.failures += 1;
                    p.failed = target;
                });
                Err(self.error(e))
            }
        }
    }

    /// One `fdatasync` of the WAL (and, the first time, of the directory holding it).
    fn sync(&self) -> std::io::Result<()> {
        let Some(wal) = &self.wal else {
            return Ok(());
        };
        if self.fail.load(Ordering::SeqCst) {
            return Err(std::io::Error::other("simulated sync failure"));
        }
        self.syncs.fetch_add(1, Ordering::SeqCst);
        match File::open(wal) {
            Ok(f) => f.sync_data()?,
            // No WAL yet: nothing was written through it.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(e),
        }
        if !self.dir_synced.load(Ordering::SeqCst)
            && let Some(dir) = wal.parent()
        {
            let dir = if dir.as_os_str().is_empty() {
                Path::new(".")
            } else {
                dir
            };
            File::open(dir)?.sync_all()?;
            self.dir_synced.store(true, Ordering::SeqCst);
        }
        Ok(())
    }
}

impl Drop for Durable {
    fn drop(&mut self) {
        self.requests
            .asked
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .closed = true;
        self.requests.wake.notify_all();
    }
}

/// The flusher: sleeps until a request beyond the last it handled (or the store is gone), then
/// syncs once for every write committed so far (all the requests that arrived meanwhile share
/// it). It holds the [`Durable`] only while it syncs, so dropping the last handle stops it.
fn flusher(me: Weak<Durable>, requests: &Requests) {
    // The highest request handled (or, after a failure, what was synced).
    let mut handled = 0;
    loop {
        let wanted = {
            let mut r = requests.asked.lock().unwrap_or_else(|p| p.into_inner());
            while !r.closed && r.seq <= handled {
                r = requests.wake.wait(r).unwrap_or_else(|p| p.into_inner());
            }
            if r.closed {
                return;
            }
            r.seq
        };
        handled = wanted;
        let Some(d) = me.upgrade() else {
            return;
        };
        if d.progress.borrow().synced >= wanted {
            // A waiter synced it on its own thread.
            continue;
        }
        if let Err(e) = d.sync_through(wanted) {
            tracing::error!("{e}");
            // Not in a tight loop: the next request (even for the same writes) tries again.
            let synced = d.progress.borrow().synced;
            let mut r = requests.asked.lock().unwrap_or_else(|p| p.into_inner());
            if r.seq <= wanted {
                r.seq = synced;
            }
            handled = synced;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Store;
    use hetsched_core::testkit::ScratchDir;

    fn scratch(name: &str) -> ScratchDir {
        ScratchDir::new("durable", name)
    }

    fn write(store: &mut Store) {
        store.probe().expect("write");
    }

    #[test]
    fn a_reply_waits_until_its_writes_are_synced_and_a_synced_write_costs_no_more_syncs() {
        let d = scratch("wait");
        let mut store = Store::open(&d.join("state.db")).expect("store");
        let durable = store.durable();
        durable.start();
        let before = durable.written();
        write(&mut store);
        write(&mut store);
        let seq = durable.written();
        assert_eq!(seq, before + 2, "every committed write is counted");
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(durable.wait(seq)).expect("synced");
        let syncs = durable.syncs();
        assert!(syncs >= 1, "the wait was answered by a sync");
        // Already durable: no further sync.
        rt.block_on(durable.wait(seq)).expect("synced");
        assert_eq!(durable.syncs(), syncs);
        drop(store);
    }

    #[test]
    fn a_reply_arriving_while_another_syncs_is_made_durable_by_the_flusher() {
        let d = scratch("flusher");
        let mut store = Store::open(&d.join("state.db")).expect("store");
        let durable = store.durable();
        durable.start();
        write(&mut store);
        // Another reply is syncing on its own thread: this one must not return before its own
        // writes are synced, and does not sync itself.
        durable.syncing.store(true, Ordering::SeqCst);
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(durable.wait(durable.written()))
            .expect("synced by the flusher");
        assert!(durable.progress.borrow().synced >= durable.written());
        assert_eq!(durable.syncs(), 1, "one sync, by the flusher thread");
        durable.syncing.store(false, Ordering::SeqCst);
        drop(store);
    }

    #[test]
    fn a_failed_sync_fails_the_waiting_reply_and_the_next_one_succeeds() {
        let d = scratch("fail");
        let mut store = Store::open(&d.join("state.db")).expect("store");
        let durable = store.durable();
        durable.start();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        durable.simulate_sync_failure(true);
        write(&mut store);
        let e = rt
            .block_on(durable.wait(durable.written()))
            .expect_err("not durable");
        assert!(e.to_string().contains("state.db-wal"), "{e}");
        durable.simulate_sync_failure(false);
        write(&mut store);
        rt.block_on(durable.wait(durable.written()))
            .expect("durable once the sync works");
        drop(store);
    }

    #[test]
    fn without_the_flusher_a_waiter_syncs_itself() {
        let d = scratch("self");
        let mut store = Store::open(&d.join("state.db")).expect("store");
        let durable = store.durable();
        write(&mut store);
        durable
            .wait_blocking(durable.written())
            .expect("synced inline");
        assert_eq!(durable.syncs(), 1);
        drop(store);
    }
}
