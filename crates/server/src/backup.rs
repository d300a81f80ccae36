//! `hetsched server backup` and `hetsched server restore`: a consistent copy of the store while
//! the server runs, and putting one back while it does not.
//!
//! The store runs in WAL mode: what the server committed lies partly in `state.db-wal` until a
//! checkpoint moves it into `state.db`, so copying `state.db` alone (or the two files one after
//! the other while the server writes) gives a store that lacks recent commits or is torn.
//! [`backup`] instead reads the store through SQLite's online backup API on a read-only
//! connection of its own: one read transaction sees one commit's state, WAL included, and the
//! server's writers are never blocked (WAL readers do not block them). The copy is a single
//! self-contained file (rollback journal, no `-wal`), mode 0600 (it holds jobs' commands and
//! environments), written beside its final name and linked into place only once it is complete,
//! synced and checked (`PRAGMA quick_check`), and never over an existing file.
//!
//! The copy is taken in one step: one read transaction, so one commit's state. Steps with pauses
//! would let the WAL be checkpointed meanwhile, but SQLite restarts a backup whose source
//! another connection wrote between two steps, so under a busy server it might never end; the
//! WAL grows by what the server commits while the one step runs, and shrinks at the next
//! checkpoint once it ended.
//!
//! The backup also holds the data directory's own files that make the server the same server
//! ([`SECRETS`]: the client, agent and read tokens, the offload secret, the agents' CA, the
//! allocation tag), in a table of the copy ([`FILES_TABLE`]) that [`restore`] writes back
//! (0600) and drops from the restored store: the users' tokens' digests are in the store, so a
//! restored server answers every token it answered when the backup was taken.
//!
//! [`restore`] takes the data directory's server lock (so a running server refuses it), checks
//! the file is a hetsched store, moves the store it replaces — `state.db` with its `-wal` and
//! `-shm`, together, so nothing committed is lost — and the files of [`SECRETS`] the backup
//! holds into `DATA_DIR/before-restore-SECS/` (0700), and copies the backup into place as
//! `state.db` (0600). Leaving an old `-wal` beside a new `state.db` would have SQLite replay the
//! old log into the new file. A backup taken before backups held the files restores the store
//! alone, and the data directory's files stay as they are.

use crate::datadir::{self, DataDirError};
use rusqlite::{Connection, OpenFlags};
use std::fs::OpenOptions;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;
use thiserror::Error;

/// The store's companion files, moved with it by a restore.
const COMPANIONS: [&str; 3] = ["state.db-wal", "state.db-shm", "state.db-journal"];

/// The data directory's files a backup holds beside the store, by name: without them a restored
/// server (on a new machine, or after the directory was lost) would make new tokens and keys,
/// and every agent, user token, offload ticket and listener certificate would stop working.
pub const SECRETS: [&str; 7] = [
    datadir::CLIENT_TOKEN,
    datadir::AGENT_TOKEN,
    crate::dashboard::READ_TOKEN,
    datadir::OFFLOAD_SECRET,
    crate::agent_ca::KEY_FILE,
    crate::agent_ca::CERT_FILE,
    crate::allocation::TAG_FILE,
];

/// The table of a backup that holds [`SECRETS`]' files (name, contents).
pub const FILES_TABLE: &str = "hetsched_backup_files";

/// The largest such file a backup takes (they are a few hundred bytes; a larger one is not
/// one the server wrote).
const MAX_SECRET_BYTES: u64 = 64 << 10;

/// Why a backup or a restore did not happen.
#[derive(Debug, Error)]
pub enum BackupError {
    /// A file or directory that cannot be used as asked.
    #[error("{path}: {message}")]
    Refused {
        /// The file or directory.
        path: PathBuf,
        /// Why.
        message: String,
    },
    /// An I/O error on `path`.
    #[error("{path}: {error}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The error.
        error: std::io::Error,
    },
    /// SQLite refused to read or write `path` (e.g. `file is not a database`).
    #[error("{path}: {error}")]
    Sqlite {
        /// The database file.
        path: PathBuf,
        /// The error.
        error: rusqlite::Error,
    },
    /// The data directory or its lock.
    #[error(transparent)]
    DataDir(#[from] DataDirError),
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> BackupError + '_ {
    move |error| BackupError::Io {
        path: path.to_path_buf(),
        error,
    }
}

fn sql(path: &Path) -> impl FnOnce(rusqlite::Error) -> BackupError + '_ {
    move |error| BackupError::Sqlite {
        path: path.to_path_buf(),
        error,
    }
}

fn refused(path: &Path, message: impl Into<String>) -> BackupError {
    BackupError::Refused {
        path: path.to_path_buf(),
        message: message.into(),
    }
}

/// What [`backup`] wrote.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Backup {
    /// The backup file.
    pub path: PathBuf,
    /// Its size.
    pub bytes: u64,
    /// The jobs it holds (purged ones not counted).
    pub jobs: u64,
    /// The data directory's files of [`SECRETS`] it holds, by name.
    pub files: Vec<String>,
}

/// What [`restore`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Restored {
    /// The store now in place (`DATA_DIR/state.db`).
    pub store: PathBuf,
    /// Where the store it replaced went, if there was one.
    pub replaced: Option<PathBuf>,
    /// The jobs the restored store holds.
    pub jobs: u64,
    /// The data directory's files of [`SECRETS`] written back from the backup, by name (none
    /// from a backup taken before backups held them).
    pub files: Vec<String>,
}

/// Copies the store of `data_dir` — while its server runs or not — into the new file `dest`,
/// consistently (see the module's documentation). `dest` must not exist, and must not be in the
/// data directory (a file there named like the store's WAL would be taken for it).
pub fn backup(data_dir: &Path, dest: &Path) -> Result<Backup, BackupError> {
    let store = store_of(data_dir)?;
    let dir = parent_of(dest)?;
    let real_dir = dir.canonicalize().map_err(io(&dir))?;
    let real_data = data_dir.canonicalize().map_err(io(data_dir))?;
    if std::fs::symlink_metadata(dest).is_ok() {
        return Err(refused(
            dest,
            "already exists: a backup never replaces a file; give a new name",
        ));
    }
    if real_dir.starts_with(&real_data) {
        return Err(refused(
            dest,
            "is in the data directory: keep backups outside it (a file there may be taken for \
             the store's own)",
        ));
    }
    let file_name = dest
        .file_name()
        .ok_or_else(|| refused(dest, "names no file"))?;
    let tmp = dir.join(format!(
        ".{}.partial-{}",
        file_name.to_string_lossy(),
        std::process::id()
    ));
    let result = write_copy(&store, &tmp, true).and_then(|jobs| {
        let files = add_secrets(data_dir, &tmp)?;
        // Linked, not renamed: a file that appeared at `dest` meanwhile is not replaced.
        std::fs::hard_link(&tmp, dest).map_err(|e| {
            if e.kind() == std::io::ErrorKind::AlreadyExists {
                refused(
                    dest,
                    "already exists: a backup never replaces a file; give a new name",
                )
            } else {
                io(dest)(e)
            }
        })?;
        sync_dir(&dir)?;
        Ok((jobs, files))
    });
    let _ = std::fs::remove_file(&tmp);
    let (jobs, files) = result?;
    let bytes = std::fs::metadata(dest).map_err(io(dest))?.len();
    Ok(Backup {
        path: dest.to_path_buf(),
        bytes,
        jobs,
        files,
    })
}

/// Puts backup `src` in place as the store of `data_dir` (created 0700 if missing), whose server
/// must not run: the store it replaces is kept in `DATA_DIR/before-restore-SECS/`.
pub fn restore(data_dir: &Path, src: &Path) -> Result<Restored, BackupError> {
    datadir::prepare(data_dir)?;
    let _lock = datadir::lock(data_dir)?;
    let meta = std::fs::metadata(src).map_err(io(src))?;
    if !meta.is_file() {
        return Err(refused(src, "is not a file"));
    }
    let store = data_dir.join(datadir::STORE);
    let real_src = src.canonicalize().map_err(io(src))?;
    if store
        .canonicalize()
        .is_ok_and(|real_store| real_store == real_src)
    {
        return Err(refused(src, "is the data directory's store itself"));
    }
    if real_src.starts_with(data_dir.canonicalize().map_err(io(data_dir))?) {
        return Err(refused(
            src,
            "is in the data directory: move it out first (a restore moves the store's files)",
        ));
    }
    let files = {
        let conn = open_read_only(src)?;
        check_store(&conn, src)?;
        read_secrets(&conn, src)?
    };
    let tmp = data_dir.join("state.db.restoring");
    let _ = std::fs::remove_file(&tmp);
    let result = write_copy(src, &tmp, false).and_then(|jobs| {
        // The store keeps no copy of the files: they live in the data directory alone.
        Connection::open(&tmp)
            .and_then(|c| c.execute_batch(&format!("DROP TABLE IF EXISTS {FILES_TABLE}")))
            .map_err(sql(&tmp))?;
        let names: Vec<&str> = files.iter().map(|(n, _)| n.as_str()).collect();
        let replaced = set_aside_store(data_dir, &names)?;
        for (name, data) in &files {
            write_private(&data_dir.join(name), data)?;
        }
        std::fs::rename(&tmp, &store).map_err(io(&store))?;
        sync_dir(data_dir)?;
        Ok((jobs, replaced))
    });
    let _ = std::fs::remove_file(&tmp);
    let (jobs, replaced) = result?;
    Ok(Restored {
        store,
        replaced,
        jobs,
        files: files.into_iter().map(|(n, _)| n).collect(),
    })
}

/// `DATA_DIR/state.db`, which must be a file.
fn store_of(data_dir: &Path) -> Result<PathBuf, BackupError> {
    let store = data_dir.join(datadir::STORE);
    match std::fs::symlink_metadata(&store) {
        Ok(m) if m.is_file() => Ok(store),
        Ok(_) => Err(refused(&store, "is not a file")),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(refused(
            data_dir,
            "no store (state.db) here: give the server's data directory (--data-dir, or the \
             --config that names it)",
        )),
        Err(e) => Err(io(&store)(e)),
    }
}

/// The directory `path` goes into, which must exist.
fn parent_of(path: &Path) -> Result<PathBuf, BackupError> {
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    match std::fs::metadata(&dir) {
        Ok(m) if m.is_dir() => Ok(dir),
        Ok(_) => Err(refused(&dir, "is not a directory")),
        Err(e) => Err(io(&dir)(e)),
    }
}

fn open_read_only(path: &Path) -> Result<Connection, BackupError> {
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(sql(path))?;
    conn.busy_timeout(Duration::from_secs(10))
        .map_err(sql(path))?;
    Ok(conn)
}

/// Checks that `conn` (of `path`) is a sound hetsched store; the number of its jobs.
fn check_store(conn: &Connection, path: &Path) -> Result<u64, BackupError> {
    let check: String = conn
        .query_row("PRAGMA quick_check", [], |r| r.get(0))
        .map_err(sql(path))?;
    if check != "ok" {
        return Err(refused(path, format!("the database is damaged: {check}")));
    }
    let tables: i64 = conn
        .query_row(
            "SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name IN ('jobs', 'tasks', 'meta')",
            [],
            |r| r.get(0),
        )
        .map_err(sql(path))?;
    if tables != 3 {
        return Err(refused(
            path,
            "is an SQLite database but not a hetsched store (no jobs, tasks and meta tables)",
        ));
    }
    let jobs: i64 = conn
        .query_row("SELECT COUNT(*) FROM jobs", [], |r| r.get(0))
        .map_err(sql(path))?;
    Ok(u64::try_from(jobs).unwrap_or(0))
}

/// Copies database `src` into the new file `tmp` (0600) with the online backup API, checks
/// the copy and syncs it; the number of jobs it holds. `self_contained`: the copy uses a
/// rollback journal, so it is one file that opens without a `-wal` (a restored store is set to
/// WAL again when the server opens it).
fn write_copy(src: &Path, tmp: &Path, self_contained: bool) -> Result<u64, BackupError> {
    // Created here, empty, with the mode: SQLite keeps the mode of a file that exists.
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(nix::fcntl::OFlag::O_NOFOLLOW.bits())
        .open(tmp)
        .map_err(io(tmp))?;
    let source = open_read_only(src)?;
    let mut copy = Connection::open(tmp).map_err(sql(tmp))?;
    {
        let b = rusqlite::backup::Backup::new(&source, &mut copy).map_err(sql(tmp))?;
        // Every page in one step: one read transaction, so one commit's state. A step that
        // finds the source locked (a writer of a store in rollback mode) is tried again.
        let mut tries = 0;
        loop {
            match b.step(-1).map_err(sql(src))? {
                rusqlite::backup::StepResult::Done => break,
                rusqlite::backup::StepResult::More => {}
                _ if tries < 200 => {
                    tries += 1;
                    std::thread::sleep(Duration::from_millis(50));
                }
                _ => return Err(refused(src, "stayed locked for 10 s: try again")),
            }
        }
    }
    drop(source);
    if self_contained {
        let _: String = copy
            .query_row("PRAGMA journal_mode = DELETE", [], |r| r.get(0))
            .map_err(sql(tmp))?;
    }
    let jobs = check_store(&copy, tmp)?;
    copy.close().map_err(|(_, e)| sql(tmp)(e))?;
    std::fs::File::open(tmp)
        .and_then(|f| f.sync_all())
        .map_err(io(tmp))?;
    Ok(jobs)
}

/// Copies the files of [`SECRETS`] that `data_dir` holds into [`FILES_TABLE`] of the backup
/// copy `tmp`, and syncs it; their names. A symbolic link, or a file too large to be one the
/// server wrote, is refused, naming it.
fn add_secrets(data_dir: &Path, tmp: &Path) -> Result<Vec<String>, BackupError> {
    let mut files = Vec::new();
    for name in SECRETS {
        let path = data_dir.join(name);
        let f = match OpenOptions::new()
            .read(true)
            .custom_flags(nix::fcntl::OFlag::O_NOFOLLOW.bits())
            .open(&path)
        {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(io(&path)(e)),
        };
        let meta = f.metadata().map_err(io(&path))?;
        if !meta.is_file() || meta.len() > MAX_SECRET_BYTES {
            return Err(refused(
                &path,
                format!(
                    "is not a file of at most {MAX_SECRET_BYTES} bytes, as the server writes it"
                ),
            ));
        }
        let mut data = Vec::new();
        std::io::Read::read_to_end(&mut std::io::Read::take(f, MAX_SECRET_BYTES), &mut data)
            .map_err(io(&path))?;
        files.push((name, data));
    }
    let conn = Connection::open(tmp).map_err(sql(tmp))?;
    conn.execute_batch(&format!(
        "CREATE TABLE {FILES_TABLE}(name TEXT PRIMARY KEY, data BLOB NOT NULL)"
    ))
    .map_err(sql(tmp))?;
    for (name, data) in &files {
        conn.execute(
            &format!("INSERT INTO {FILES_TABLE}(name, data) VALUES (?1, ?2)"),
            rusqlite::params![name, data],
        )
        .map_err(sql(tmp))?;
    }
    conn.close().map_err(|(_, e)| sql(tmp)(e))?;
    std::fs::File::open(tmp)
        .and_then(|f| f.sync_all())
        .map_err(io(tmp))?;
    Ok(files.into_iter().map(|(n, _)| n.to_string()).collect())
}

/// The files [`add_secrets`] put in backup `src` (none in a backup taken before), each
/// checked to be one of [`SECRETS`] — a name from the file never becomes a path otherwise —
/// and of a size the server writes.
fn read_secrets(conn: &Connection, src: &Path) -> Result<Vec<(String, Vec<u8>)>, BackupError> {
    let has: i64 = conn
        .query_row(
            "SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = ?1",
            [FILES_TABLE],
            |r| r.get(0),
        )
        .map_err(sql(src))?;
    if has == 0 {
        return Ok(Vec::new());
    }
    let mut stmt = conn
        .prepare(&format!(
            "SELECT name, data FROM {FILES_TABLE} ORDER BY rowid"
        ))
        .map_err(sql(src))?;
    let rows = stmt
        .query_map([], |r| {
            Ok((r.get::<_, String>(0)?, r.get::<_, Vec<u8>>(1)?))
        })
        .map_err(sql(src))?;
    let mut files = Vec::new();
    for row in rows {
        let (name, data) = row.map_err(sql(src))?;
        if !SECRETS.contains(&name.as_str()) || data.len() as u64 > MAX_SECRET_BYTES {
            return Err(refused(
                src,
                format!(
                    "holds a data directory file `{}` that no backup writes (of at most {} \
                     bytes: {}); it is not a backup of this version",
                    hetsched_core::text::clip(&name),
                    MAX_SECRET_BYTES,
                    SECRETS.join(", ")
                ),
            ));
        }
        files.push((name, data));
    }
    Ok(files)
}

/// Writes `data` into the new file `path`, 0600, not through a symbolic link, and syncs it.
fn write_private(path: &Path, data: &[u8]) -> Result<(), BackupError> {
    use std::io::Write;
    let mut f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(nix::fcntl::OFlag::O_NOFOLLOW.bits())
        .open(path)
        .map_err(io(path))?;
    f.write_all(data)
        .and_then(|()| f.sync_all())
        .map_err(io(path))
}

/// Moves the store of `data_dir` and its companion files, and the data directory's files
/// named in `files` (those the backup replaces), if any, into a new `before-restore-SECS`
/// directory (0700); that directory.
fn set_aside_store(data_dir: &Path, files: &[&str]) -> Result<Option<PathBuf>, BackupError> {
    let names: Vec<&str> = std::iter::once(datadir::STORE)
        .chain(COMPANIONS)
        .chain(files.iter().copied())
        .filter(|n| std::fs::symlink_metadata(data_dir.join(n)).is_ok())
        .collect();
    if names.is_empty() {
        return Ok(None);
    }
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let mut dir = data_dir.join(format!("before-restore-{secs}"));
    let mut n = 1;
    loop {
        match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
            Ok(()) => break,
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && n < 100 => {
                dir = data_dir.join(format!("before-restore-{secs}-{n}"));
                n += 1;
            }
            Err(e) => return Err(io(&dir)(e)),
        }
    }
    for name in names {
        let from = data_dir.join(name);
        std::fs::rename(&from, dir.join(name)).map_err(io(&from))?;
    }
    sync_dir(&dir)?;
    Ok(Some(dir))
}

fn sync_dir(dir: &Path) -> Result<(), BackupError> {
    std::fs::File::open(dir)
        .and_then(|f| f.sync_all())
        .map_err(io(dir))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn scratch(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("hetsched-backup-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).expect("scratch");
        d
    }

    /// A store in `dir/data` with one row in `meta`, its writer kept open (a running server's).
    fn store_in(dir: &Path) -> (PathBuf, crate::store::Store) {
        let data = dir.join("data");
        datadir::prepare(&data).expect("data dir");
        let db = datadir::protect_store(&data).expect("protect");
        let mut s = crate::store::Store::open(&db).expect("store");
        s.probe().expect("a write");
        (data, s)
    }

    #[test]
    fn a_backup_while_the_store_is_open_holds_its_commits_in_one_file_of_mode_600() {
        let d = scratch("open");
        let (data, store) = store_in(&d);
        // The commit is in the WAL: the store file alone lacks it.
        assert!(data.join("state.db-wal").exists());
        let out = d.join("b.db");
        let b = backup(&data, &out).expect("backup");
        assert_eq!(b.jobs, 0);
        let mode = std::fs::metadata(&out).expect("meta").permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let c = Connection::open_with_flags(&out, OpenFlags::SQLITE_OPEN_READ_ONLY).expect("open");
        let probes: i64 = c
            .query_row("SELECT COUNT(*) FROM meta WHERE key = 'probe'", [], |r| {
                r.get(0)
            })
            .expect("read");
        assert_eq!(probes, 1);
        assert!(!d.join("b.db-wal").exists());
        // No partial file left beside it.
        let left: Vec<_> = std::fs::read_dir(&d)
            .expect("dir")
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().contains("partial"))
            .collect();
        assert!(left.is_empty());
        drop(store);
        // And with the server stopped.
        let again = d.join("c.db");
        backup(&data, &again).expect("backup of a closed store");
    }

    #[test]
    fn a_backup_refuses_an_existing_file_and_the_data_directory() {
        let d = scratch("refuse");
        let (data, _store) = store_in(&d);
        let taken = d.join("taken.db");
        std::fs::write(&taken, "keep me").expect("write");
        let e = backup(&data, &taken).expect_err("an existing file");
        assert!(e.to_string().contains("already exists"), "{e}");
        assert_eq!(std::fs::read_to_string(&taken).expect("read"), "keep me");
        for name in ["state.db", "state.db-wal"] {
            let e = backup(&data, &data.join(name)).expect_err("the store's files");
            assert!(e.to_string().contains("already exists"), "{e}");
        }
        let e = backup(&data, &data.join("state.db-journal")).expect_err("the data dir");
        assert!(e.to_string().contains("in the data directory"), "{e}");
        let e = backup(&d.join("nosuch"), &d.join("x.db")).expect_err("no store");
        assert!(e.to_string().contains("no store"), "{e}");
        let e = backup(&data, &d.join("nodir").join("x.db")).expect_err("no directory");
        assert!(e.to_string().contains("nodir"), "{e}");
    }

    #[test]
    fn a_restore_needs_the_lock_keeps_the_store_it_replaces_and_refuses_what_is_no_store() {
        let d = scratch("restore");
        let (data, store) = store_in(&d);
        let out = d.join("b.db");
        backup(&data, &out).expect("backup");
        {
            let _held = datadir::lock(&data).expect("the server's lock");
            let e = restore(&data, &out).expect_err("a running server");
            assert!(e.to_string().contains("another hetsched server"), "{e}");
        }
        drop(store);
        let text = d.join("notes.txt");
        std::fs::write(&text, "not a database\n".repeat(100)).expect("write");
        let e = restore(&data, &text).expect_err("not a database");
        assert!(e.to_string().contains("notes.txt"), "{e}");
        let other = d.join("other.db");
        Connection::open(&other)
            .and_then(|c| c.execute_batch("CREATE TABLE t(x)"))
            .expect("other db");
        let e = restore(&data, &other).expect_err("not a hetsched store");
        assert!(e.to_string().contains("not a hetsched store"), "{e}");
        let e = restore(&data, &data.join("state.db")).expect_err("the store itself");
        assert!(e.to_string().contains("store itself"), "{e}");

        let r = restore(&data, &out).expect("restore");
        let kept = r.replaced.expect("the store it replaced");
        assert!(kept.join("state.db").exists());
        let mode = std::fs::metadata(&kept).expect("meta").permissions().mode() & 0o777;
        assert_eq!(mode, 0o700);
        let mode = std::fs::metadata(&r.store)
            .expect("meta")
            .permissions()
            .mode()
            & 0o777;
        assert_eq!(mode, 0o600);
        assert!(!data.join("state.db-wal").exists());
        crate::store::Store::open(&r.store).expect("the server opens it");
    }

    /// A backup's data directory files are written back only under the names a backup gives
    /// them: a row naming another file (`../x`, `state.db`) is refused before anything changes.
    #[test]
    fn a_restore_writes_back_only_the_files_a_backup_holds_by_name() {
        let d = scratch("names");
        let (data, store) = store_in(&d);
        std::fs::write(data.join(datadir::CLIENT_TOKEN), "the-admin-token").expect("token");
        let out = d.join("b.db");
        let b = backup(&data, &out).expect("backup");
        assert_eq!(b.files, [datadir::CLIENT_TOKEN]);
        drop(store);
        for name in ["../escaped", "state.db", "token/../../x"] {
            let forged = d.join(format!("forged-{}.db", name.len()));
            std::fs::copy(&out, &forged).expect("copy");
            Connection::open(&forged)
                .and_then(|c| {
                    c.execute(
                        &format!("INSERT INTO {FILES_TABLE}(name, data) VALUES (?1, x'00')"),
                        [name],
                    )
                })
                .expect("forged row");
            let e = restore(&data, &forged).expect_err("an unknown name");
            assert!(
                e.to_string()
                    .contains(&format!("holds a data directory file `{name}`")),
                "{e}"
            );
        }
        assert!(!d.join("escaped").exists() && !d.join("x").exists());
        assert_eq!(
            std::fs::read_to_string(data.join(datadir::CLIENT_TOKEN)).expect("token"),
            "the-admin-token"
        );
        let r = restore(&data, &out).expect("restore");
        assert_eq!(r.files, [datadir::CLIENT_TOKEN]);
        assert_eq!(
            std::fs::read_to_string(data.join(datadir::CLIENT_TOKEN)).expect("token"),
            "the-admin-token"
        );
    }
}
