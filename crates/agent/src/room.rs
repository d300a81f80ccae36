//! Room on the work directory's disk for what the agent downloads: workflow inputs fetched
//! from other agents ([`crate::dataflow`]) and divisible chunks' inputs fetched from the server
//! ([`crate::divisible`]). Both keep the filesystem at least `min_free_disk` free ([`Room`]),
//! and both say the same thing when there is none ([`NO_ROOM`]): the node's condition, not the
//! work's fault, so the server runs that work again, elsewhere while this node has no room.
//! An ANode receiving the input files NNodes ship with their offloads keeps the same floor
//! with the same [`Room`] (`accel::service`, which refuses such an offload in its own words:
//! the NNode reports the attempt interrupted, and the server runs it again).

use std::path::{Path, PathBuf};
use tokio::io::AsyncWriteExt;

/// How the result of work whose inputs found no room on this node's disk begins: a download
/// would have taken the work directory's filesystem below `min_free_disk`, or the disk refused a
/// write for want of space. The disk filled between two of the agent's reports, which is the
/// node's condition, not the work's fault, so the server runs it again — elsewhere while this
/// node has no room — counting a loss, not a failure (the server reads this prefix: a workflow
/// instance's result, reported `interrupted`, and a divisible chunk's).
pub const NO_ROOM: &str = "no room for inputs: ";

/// The free space an agent keeps on the filesystem of its work directory unless its
/// configuration says otherwise (`min_free_disk`): downloaded inputs never take it below this,
/// so that the ledger, task logs and other tasks' outputs on the node still have room.
pub const DEFAULT_MIN_FREE_DISK: u64 = 1 << 30;

/// How many bytes a download writes between two looks at its filesystem's free space. Between
/// looks it counts its own writes off the last look, so it never crosses the floor by itself;
/// what other writers on the disk (concurrent downloads, tasks) write meanwhile is seen at the
/// next look, so they overshoot the floor by at most this much each. One `statvfs` per 256 KiB
/// piece (through `spawn_blocking`, as the agent's other file calls) would cost a measurable
/// share of a fast local copy for nothing a 16 MiB step does not already give.
pub const FREE_RECHECK: u64 = 16 << 20;

/// Where a download reads how much its filesystem has free: `statvfs` ([`statvfs_free`]) unless
/// a test gives a stand-in (a disk it cannot fill for real).
#[derive(Clone)]
pub struct FreeSpace(std::sync::Arc<FreeSpaceFn>);

/// What [`FreeSpace`] calls: the free bytes of the filesystem holding a directory.
type FreeSpaceFn = dyn Fn(&Path) -> std::io::Result<u64> + Send + Sync;

impl FreeSpace {
    /// Free space read through `f` (given the directory a download writes in).
    pub fn with(f: impl Fn(&Path) -> std::io::Result<u64> + Send + Sync + 'static) -> Self {
        Self(std::sync::Arc::new(f))
    }

    /// The free bytes of the filesystem holding `dir`, read off the async runtime's threads
    /// (`statvfs` on a hung network filesystem blocks).
    pub async fn of(&self, dir: &Path) -> std::io::Result<u64> {
        let (f, dir) = (self.0.clone(), dir.to_path_buf());
        tokio::task::spawn_blocking(move || f(&dir))
            .await
            .map_err(std::io::Error::other)?
    }
}

impl Default for FreeSpace {
    fn default() -> Self {
        Self::with(statvfs_free)
    }
}

impl std::fmt::Debug for FreeSpace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("FreeSpace")
    }
}

/// The bytes an unprivileged process may still write on the filesystem holding `path`
/// (`f_bavail`, not `f_bfree`: the blocks reserved for root are not counted, as tasks that run
/// as their owner's account cannot use them).
pub fn statvfs_free(path: &Path) -> std::io::Result<u64> {
    let s = rustix::fs::statvfs(path)?;
    Ok(s.f_bavail.saturating_mul(s.f_frsize))
}

/// Why a download may not write (more): the node's disk, never the work's fault.
#[derive(Debug, thiserror::Error)]
pub enum NoRoom {
    /// Writing (more of) it would take this node's disk below `min_free_disk`.
    #[error(
        "this node's disk is too full for it: the filesystem of {} has {} free, and this \
         agent keeps `min_free_disk` ({}) free",
        .dir.display(),
        bytesize::ByteSize(*.free),
        bytesize::ByteSize(*.floor)
    )]
    LowDisk {
        /// The directory the input was written in.
        dir: PathBuf,
        /// Its filesystem's free bytes, as last read, less what the download wrote since.
        free: u64,
        /// `min_free_disk`.
        floor: u64,
    },
    /// The disk refused a write for want of space (`ENOSPC`, `EDQUOT`), or its free space
    /// could not be read: the node's condition, as [`Self::LowDisk`].
    #[error("this node's disk: {0}")]
    Disk(String),
}

/// Why [`Room::take`] refused: no room, or the flush before its reading failed otherwise (the
/// caller's write error, as its own writes' are).
#[derive(Debug, thiserror::Error)]
pub enum TakeError {
    /// No room.
    #[error(transparent)]
    NoRoom(#[from] NoRoom),
    /// Flushing the file failed, not for want of space.
    #[error("{0}")]
    Write(std::io::Error),
}

/// Whether a failed write is for want of space (`ENOSPC`, `EDQUOT`): the node's disk
/// ([`NoRoom::Disk`]), not the download's source.
pub fn is_full(e: &std::io::Error) -> bool {
    use std::io::ErrorKind::{QuotaExceeded, StorageFull};
    matches!(e.kind(), StorageFull | QuotaExceeded)
}

/// What a download may still write before its filesystem's free space goes below the floor:
/// the free space last read, less what the download wrote since ([`FREE_RECHECK`]).
pub struct Room<'a> {
    floor: u64,
    free_space: &'a FreeSpace,
    dir: &'a Path,
    free: u64,
    since: u64,
}

impl<'a> Room<'a> {
    /// Reads the free space of `dir`'s filesystem (through `free_space`); fails if it is
    /// already below `floor` (`min_free_disk`; 0: nothing is checked, nothing read).
    pub async fn new(floor: u64, free_space: &'a FreeSpace, dir: &'a Path) -> Result<Self, NoRoom> {
        let mut room = Self {
            floor,
            free_space,
            dir,
            free: u64::MAX,
            since: 0,
        };
        if floor > 0 {
            room.measure().await?;
            if room.free < floor {
                return Err(room.low());
            }
        }
        Ok(room)
    }

    async fn measure(&mut self) -> Result<(), NoRoom> {
        self.free = self.free_space.of(self.dir).await.map_err(|e| {
            NoRoom::Disk(format!(
                "its free space could not be read at {}: {e}",
                self.dir.display()
            ))
        })?;
        self.since = 0;
        Ok(())
    }

    /// Whether `len` more bytes may be written into `file` (the file being written, if any):
    /// read again every [`FREE_RECHECK`] bytes, and before a refusal, so that a download fails
    /// on a fresh reading only (another writer may have freed space since the last). `file` is
    /// flushed first: a write still in flight (tokio writes in the background) would be in
    /// neither the reading nor the count. A flush the disk refuses for want of space is
    /// [`NoRoom::Disk`].
    pub async fn take(
        &mut self,
        len: u64,
        file: Option<&mut tokio::fs::File>,
    ) -> Result<(), TakeError> {
        if self.floor == 0 {
            return Ok(());
        }
        let left = |r: &Self| r.free.saturating_sub(r.since.saturating_add(len));
        if self.since.saturating_add(len) > FREE_RECHECK || left(self) < self.floor {
            // Nothing open (an ANode's call whose file is yet to be created): nothing in flight.
            if let Some(file) = file
                && let Err(e) = file.flush().await
            {
                return Err(if is_full(&e) {
                    NoRoom::Disk(format!("{}: {e}", self.dir.display())).into()
                } else {
                    TakeError::Write(e)
                });
            }
            self.measure().await?;
        }
        if left(self) < self.floor {
            return Err(self.low().into());
        }
        self.since = self.since.saturating_add(len);
        Ok(())
    }

    /// The refusal: the free space as last read (less what was written since).
    fn low(&self) -> NoRoom {
        NoRoom::LowDisk {
            dir: self.dir.to_path_buf(),
            free: self.free.saturating_sub(self.since),
            floor: self.floor,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hetsched_core::testkit::ScratchDir;

    /// Between two readings of the disk a download counts its own writes, and it reads again
    /// every `FREE_RECHECK` bytes: what another writer takes meanwhile (a concurrent download,
    /// a task) stops it within that much.
    #[tokio::test]
    async fn free_space_is_read_again_every_free_recheck_bytes() {
        use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
        let dir = ScratchDir::new("room", "disk");
        let mut file = tokio::fs::File::create(dir.join("x")).await.expect("file");
        let (free, reads) = (
            std::sync::Arc::new(AtomicU64::new(1 << 30)),
            std::sync::Arc::new(AtomicU64::new(0)),
        );
        let (f, r) = (free.clone(), reads.clone());
        let space = FreeSpace::with(move |_| {
            r.fetch_add(1, Relaxed);
            Ok(f.load(Relaxed))
        });
        let floor = 100 << 20;
        let mut room = Room::new(floor, &space, &dir).await.expect("room");
        let piece = 256 << 10;
        // 64 MiB in pieces: one reading to start, then one as each 16 MiB step is passed (at
        // 16, 32 and 48 MiB; the last step ends exactly at 64), not one per piece.
        for _ in 0..(64 << 20) / piece {
            room.take(piece, Some(&mut file))
                .await
                .expect("room enough");
        }
        assert_eq!(reads.load(Relaxed), 4);
        // Another writer leaves the disk at the floor: noticed at the next reading, within
        // `FREE_RECHECK`.
        free.store(floor, Relaxed);
        let mut taken = 0;
        let e = loop {
            match room.take(piece, Some(&mut file)).await {
                Ok(()) => taken += piece,
                Err(e) => break e,
            }
        };
        assert!(taken <= FREE_RECHECK, "{taken}");
        assert!(
            matches!(e, TakeError::NoRoom(NoRoom::LowDisk { free, floor: f, .. }) if free == floor && f == floor),
            "{e:?}"
        );
        // Nothing open yet (an ANode's call before its first file is created): nothing to
        // flush, read all the same.
        free.store(1 << 30, Relaxed);
        let mut room = Room::new(floor, &space, &dir).await.expect("room");
        let before = reads.load(Relaxed);
        room.take(FREE_RECHECK + 1, None)
            .await
            .expect("room enough");
        assert_eq!(reads.load(Relaxed), before + 1);
        // No floor: never read.
        let before = reads.load(Relaxed);
        let mut room = Room::new(0, &space, &dir).await.expect("room");
        room.take(1 << 40, Some(&mut file))
            .await
            .expect("not checked");
        assert_eq!(reads.load(Relaxed), before);
        // A disk whose free space cannot be read is not written on (the floor is the
        // operator's: 0 turns it off), and says so.
        let missing = dir.join("none");
        let statvfs = FreeSpace::default();
        let e = Room::new(DEFAULT_MIN_FREE_DISK, &statvfs, &missing)
            .await
            .err()
            .expect("unreadable");
        assert!(
            matches!(&e, NoRoom::Disk(m) if m.starts_with(&format!(
                "its free space could not be read at {}: ",
                missing.display()
            ))),
            "{e:?}"
        );
        for (errno, full) in [(28, true), (122, true), (5, false)] {
            assert_eq!(
                is_full(&std::io::Error::from_raw_os_error(errno)),
                full,
                "{errno}"
            );
        }
    }
}
