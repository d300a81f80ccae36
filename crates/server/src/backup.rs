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
//! **Divisible jobs' files.** A divisible job keeps its users' data as plain files under
//! `DATA_DIR/divisible/job-N/` (`input`, `chunk-K.out`, `output`: see
//! [`crate::jobs::divisible`]). After the store's snapshot, the backup copies into its table
//! [`DIVISIBLE_TABLE`] (`path` relative to `divisible/`, `piece`, `mode`, `data`) the files of
//! the divisible jobs *that snapshot holds* (its `div_jobs` rows not purged): a job submitted
//! after the snapshot is not in the restored store, so its files would be orphans there, and a
//! job purged after it has no files left to copy (the backup warns, naming its directory).
//! Contents are streamed with SQLite's incremental blob I/O, in pieces of at most
//! [`PIECE_BYTES`]: SQLite holds at most `SQLITE_MAX_LENGTH` (1e9 by default) bytes in one value,
//! so a gathered output of any size is carried, and memory stays bounded whatever the size.
//!
//! The copy is not torn: the server writes every file of `divisible/` whole under a temporary
//! name (`*.tmp`, `*.part`) and renames it into place once synced, never rewriting a file under
//! its final name. The backup skips the temporary names (writes in flight) and copies each
//! final file through one open descriptor, which a later rename does not change; should the
//! file still change while it is copied (something other than the server writing it), the
//! backup fails, naming it, rather than keep a torn copy. A file taken after the snapshot may
//! be newer than the snapshot's rows (a chunk's output that arrived meanwhile, a gathered
//! output of a job the snapshot has running): the restored server goes on from its rows, so
//! a chunk not recorded done there is handed out and run again, and its new output replaces
//! the file; an output gathered again replaces `output` likewise. A symbolic link, a
//! directory or a special file (FIFO, socket, device) in a job's directory is not the
//! server's: it is skipped with a warning naming it ([`Backup::skipped`]), not followed.
//!
//! **Set-aside files.** `DATA_DIR/set-aside/` holds what `hetsched server --set-aside` took out
//! of the store ([`crate::set_aside`]: `job-N.toml`, `job-N.json`, a divisible job's
//! `job-N.files/`): their only copy, so the backup holds all of it the same way, in
//! [`SET_ASIDE_TABLE`]. It is written only at a server's start, so never while a backup of a
//! running server reads it. `DATA_DIR/allocations/` is not held: the batch system's output of
//! past allocations, and scripts the server writes again at start.
//!
//! [`restore`] takes the data directory's server lock (so a running server refuses it), checks
//! the file is a hetsched store, moves the store it replaces — `state.db` with its `-wal` and
//! `-shm`, together, so nothing committed is lost — and the files of [`SECRETS`] the backup
//! holds into `DATA_DIR/before-restore-SECS/` (0700), and copies the backup into place as
//! `state.db` (0600). Leaving an old `-wal` beside a new `state.db` would have SQLite replay the
//! old log into the new file. A backup taken before backups held the files restores the store
//! alone, and the data directory's files stay as they are.
//!
//! A backup with [`DIVISIBLE_TABLE`] has its every path checked — `job-N/NAME`, one plain name
//! in one job's directory, so nothing absolute, no `..`, nothing deeper — before anything
//! changes, then written into a fresh `DATA_DIR/divisible.restoring/` (directories 0700, files
//! owner-only, 0600 at least as private as the server writes them; created, never opened
//! through a link) and synced; only then is the `divisible/` it replaces moved into
//! `before-restore-SECS/` with the store, and the new one renamed into place. A disk that
//! fills while the files are written changes nothing but the scratch directory, which goes. A
//! backup without the table (taken before backups held these files) leaves `divisible/` as it
//! is. [`SET_ASIDE_TABLE`] goes the same way (`NAME` or `STEM.files/NAME`, through
//! `set-aside.restoring/`).

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

/// The table of a backup that holds the divisible jobs' files: `path` (relative to
/// `divisible/`: `job-N/NAME`), `piece` (0, 1, … in order), `mode` (the file's permission
/// bits), `data` (at most [`PIECE_BYTES`] of its contents). A file of 0 bytes has one empty
/// piece.
pub const DIVISIBLE_TABLE: &str = "hetsched_backup_divisible";

/// The data directory's directory of divisible jobs' files (`crate::jobs::divisible`'s).
pub const DIVISIBLE_DIR: &str = "divisible";

/// The table of a backup that holds the files of `DATA_DIR/set-aside/` (what `hetsched server
/// --set-aside` kept of jobs and topologies it took out of the store: their only copy), as
/// [`DIVISIBLE_TABLE`] does, `path` relative to `set-aside/` (`NAME`, `STEM.files/NAME`).
pub const SET_ASIDE_TABLE: &str = "hetsched_backup_set_aside";

/// The most bytes of a file in one row of [`DIVISIBLE_TABLE`]: far below SQLite's limit on one
/// value (`SQLITE_MAX_LENGTH`, 1e9 bytes by default), so a file of any size is carried.
pub const PIECE_BYTES: u64 = 64 << 20;

/// The buffer the divisible jobs' files are streamed through.
const STREAM_BUFFER: usize = 256 << 10;

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

/// How many divisible jobs' files a backup carried, and their bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Carried {
    /// Files.
    pub files: u64,
    /// Their bytes.
    pub bytes: u64,
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
    /// The divisible jobs' files it holds ([`DIVISIBLE_TABLE`]).
    pub divisible: Carried,
    /// The files of `set-aside/` it holds ([`SET_ASIDE_TABLE`]).
    pub set_aside: Carried,
    /// What under `divisible/` and `set-aside/` it did not take, each `PATH: why` (a symbolic
    /// link, a special file, the directory of a job purged since the snapshot), for warnings.
    pub skipped: Vec<String>,
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
    /// The divisible jobs' files written back into `divisible/`; `None` from a backup taken
    /// before backups held them (`divisible/` was left as it was).
    pub divisible: Option<Carried>,
    /// The files written back into `set-aside/`; `None` likewise.
    pub set_aside: Option<Carried>,
}

/// Copies the store of `data_dir` — while its server runs or not — into the new file `dest`,
/// consistently (see the module's documentation). `dest` must not exist, and must not be in the
/// data directory (a file there named like the store's WAL would be taken for it).
pub fn backup(data_dir: &Path, dest: &Path) -> Result<Backup, BackupError> {
    backup_in_pieces(data_dir, dest, PIECE_BYTES)
}

/// [`backup`], the divisible jobs' files cut in pieces of at most `piece` bytes.
fn backup_in_pieces(data_dir: &Path, dest: &Path, piece: u64) -> Result<Backup, BackupError> {
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
        let added = add_trees(data_dir, &tmp, piece)?;
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
        Ok((jobs, files, added))
    });
    let _ = std::fs::remove_file(&tmp);
    let (jobs, files, added) = result?;
    let bytes = std::fs::metadata(dest).map_err(io(dest))?.len();
    Ok(Backup {
        path: dest.to_path_buf(),
        bytes,
        jobs,
        files,
        divisible: added.divisible,
        set_aside: added.set_aside,
        skipped: added.skipped,
    })
}

/// Puts backup `src` in place as the store of `data_dir` (created 0700 if missing), whose server
/// must not run: the store it replaces is kept in `DATA_DIR/before-restore-SECS/`.
pub fn restore(data_dir: &Path, src: &Path) -> Result<Restored, BackupError> {
    // What the backup is, first: a restore refused for it leaves no data directory behind.
    let meta = std::fs::metadata(src).map_err(io(src))?;
    if !meta.is_file() {
        return Err(refused(src, "is not a file"));
    }
    check_store(&open_read_only(src)?, src)?;
    datadir::prepare(data_dir)?;
    let _lock = datadir::lock(data_dir)?;
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
    // Everything the backup holds is checked before anything changes.
    let conn = open_read_only(src)?;
    check_store(&conn, src)?;
    let files = read_secrets(&conn, src)?;
    let trees: Vec<(Tree, Option<Held>)> = TREES
        .iter()
        .map(|&tree| Ok((tree, read_tree(&conn, src, tree)?)))
        .collect::<Result<_, BackupError>>()?;
    let held = || {
        trees
            .iter()
            .filter_map(|(tree, f)| f.as_ref().map(|f| (*tree, f)))
    };
    let tmp = data_dir.join("state.db.restoring");
    let _ = std::fs::remove_file(&tmp);
    let result = write_copy(src, &tmp, false).and_then(|jobs| {
        // The store keeps no copy of the files: they live in the data directory alone.
        Connection::open(&tmp)
            .and_then(|c| {
                c.execute_batch(&format!("DROP TABLE IF EXISTS {FILES_TABLE}"))?;
                for tree in TREES {
                    c.execute_batch(&format!("DROP TABLE IF EXISTS {}", tree.table))?;
                }
                // The files' pages would stay in the store as free pages.
                if held().any(|(_, (_, c))| c.bytes > 0) {
                    c.execute_batch("VACUUM")?;
                }
                Ok(())
            })
            .map_err(sql(&tmp))?;
        // Written and synced aside first: a disk that fills changes nothing.
        for (tree, (entries, _)) in held() {
            stage_tree(&conn, src, data_dir, tree, entries)?;
        }
        let names: Vec<&str> = files
            .iter()
            .map(|(n, _)| n.as_str())
            .chain(held().map(|(tree, _)| tree.dir))
            .collect();
        let replaced = set_aside_store(data_dir, &names)?;
        for (name, data) in &files {
            write_private(&data_dir.join(name), data)?;
        }
        for (tree, _) in held() {
            let dir = data_dir.join(tree.dir);
            std::fs::rename(data_dir.join(tree.staging), &dir).map_err(io(&dir))?;
        }
        std::fs::rename(&tmp, &store).map_err(io(&store))?;
        sync_dir(data_dir)?;
        Ok((jobs, replaced))
    });
    let _ = std::fs::remove_file(&tmp);
    for tree in TREES {
        let _ = remove_staging(&data_dir.join(tree.staging));
    }
    let (jobs, replaced) = result?;
    let carried = |tree: Tree| {
        trees
            .iter()
            .find(|(t, _)| t.table == tree.table)
            .and_then(|(_, f)| f.as_ref().map(|(_, c)| *c))
    };
    Ok(Restored {
        store,
        replaced,
        jobs,
        files: files.into_iter().map(|(n, _)| n).collect(),
        divisible: carried(DIVISIBLE),
        set_aside: carried(SET_ASIDE),
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
    // Every kind's jobs: batch jobs in `jobs`, divisible jobs and workflows in tables of their
    // own (absent from a store older than those kinds). A purged batch job or workflow keeps a
    // row marked `purged` (its ids stay taken), which is no job `hetsched jobs` lists: not
    // counted (a purged divisible job's rows are deleted).
    let mut jobs: i64 = 0;
    for table in ["jobs", "div_jobs", "wf_jobs"] {
        if has_table(conn, path, table)? {
            let live = if has_column(conn, path, table, "purged")? {
                " WHERE purged = 0"
            } else {
                ""
            };
            jobs += conn
                .query_row(&format!("SELECT COUNT(*) FROM {table}{live}"), [], |r| {
                    r.get::<_, i64>(0)
                })
                .map_err(sql(path))?;
        }
    }
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
    if !has_table(conn, src, FILES_TABLE)? {
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

/// Whether `conn` has table `name`.
fn has_table(conn: &Connection, path: &Path, name: &str) -> Result<bool, BackupError> {
    let n: i64 = conn
        .query_row(
            "SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = ?1",
            [name],
            |r| r.get(0),
        )
        .map_err(sql(path))?;
    Ok(n > 0)
}

/// Whether `table` (which exists) has `column` (added by a later version's migration).
fn has_column(
    conn: &Connection,
    path: &Path,
    table: &str,
    column: &str,
) -> Result<bool, BackupError> {
    let n: i64 = conn
        .query_row(
            "SELECT COUNT(*) FROM pragma_table_info(?1) WHERE name = ?2",
            [table, column],
            |r| r.get(0),
        )
        .map_err(sql(path))?;
    Ok(n > 0)
}

/// A directory of the data directory whose files a backup holds, in a table of its own.
#[derive(Clone, Copy, Debug)]
struct Tree {
    /// The directory, under `DATA_DIR`.
    dir: &'static str,
    /// The backup's table of its files.
    table: &'static str,
    /// Where [`restore`] writes them before it renames them into place.
    staging: &'static str,
    /// Whether a path of the table is one the backup writes, relative to `dir`.
    is_path: fn(&str) -> bool,
    /// Those paths, for a refusal.
    rule: &'static str,
}

/// The divisible jobs' files: `divisible/job-N/NAME`.
const DIVISIBLE: Tree = Tree {
    dir: DIVISIBLE_DIR,
    table: DIVISIBLE_TABLE,
    staging: "divisible.restoring",
    is_path: is_divisible_path,
    rule: "one file in one job's directory under `divisible/` (job-N/NAME)",
};

/// What `hetsched server --set-aside` kept ([`crate::set_aside`]): `set-aside/NAME`, and a
/// divisible job's files moved to `set-aside/STEM.files/NAME`.
const SET_ASIDE: Tree = Tree {
    dir: crate::set_aside::DIR,
    table: SET_ASIDE_TABLE,
    staging: "set-aside.restoring",
    is_path: is_set_aside_path,
    rule: "one file of `set-aside/` or of one `.files` directory there (NAME, STEM.files/NAME)",
};

/// The trees a backup holds, in order.
const TREES: [Tree; 2] = [DIVISIBLE, SET_ASIDE];

/// Whether the server writes `name` under a temporary name (being written: see
/// `crate::jobs::divisible`'s `write_durably`, `temp_output` and `gather`), then renames it.
fn is_temporary(name: &str) -> bool {
    name.ends_with(".tmp") || name.ends_with(".part")
}

/// What [`add_trees`] copied and skipped.
#[derive(Default)]
struct Added {
    divisible: Carried,
    set_aside: Carried,
    skipped: Vec<String>,
}

/// Copies into the backup copy `tmp` the files of [`TREES`], in pieces of at most `piece`
/// bytes, and syncs it: into [`DIVISIBLE_TABLE`] those under `DATA_DIR/divisible/` of the
/// divisible jobs the copy holds, into [`SET_ASIDE_TABLE`] those of `DATA_DIR/set-aside/`.
/// See the module's documentation.
fn add_trees(data_dir: &Path, tmp: &Path, piece: u64) -> Result<Added, BackupError> {
    let mut conn = Connection::open(tmp).map_err(sql(tmp))?;
    let ids: Vec<i64> = if has_table(&conn, tmp, "div_jobs")? {
        let mut stmt = conn
            .prepare("SELECT id FROM div_jobs WHERE state != ?1 ORDER BY id")
            .map_err(sql(tmp))?;
        stmt.query_map([crate::jobs::divisible::PURGED], |r| r.get(0))
            .and_then(|rows| rows.collect::<Result<_, _>>())
            .map_err(sql(tmp))?
    } else {
        Vec::new()
    };
    let tx = conn.transaction().map_err(sql(tmp))?;
    for tree in TREES {
        tx.execute_batch(&format!(
            "CREATE TABLE {}(path TEXT NOT NULL, piece INTEGER NOT NULL, \
             mode INTEGER NOT NULL, data BLOB NOT NULL, PRIMARY KEY(path, piece))",
            tree.table
        ))
        .map_err(sql(tmp))?;
    }
    let mut added = Added::default();
    let root = data_dir.join(DIVISIBLE_DIR);
    for id in ids {
        let rel_dir = format!("job-{id}");
        let dir = root.join(&rel_dir);
        match std::fs::symlink_metadata(&dir) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => {
                added.skipped.push(format!(
                    "{}: is not a directory (a symbolic link?): divisible job {id}'s files are \
                     not in the backup",
                    dir.display()
                ));
                continue;
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                added.skipped.push(format!(
                    "{}: is gone (the job was purged after the snapshot?): divisible job {id} is \
                     in the backup without its files",
                    dir.display()
                ));
                continue;
            }
            Err(e) => return Err(io(&dir)(e)),
        }
        let mut into = TreeCopy {
            tx: &tx,
            table: DIVISIBLE.table,
            piece,
            carried: &mut added.divisible,
            skipped: &mut added.skipped,
        };
        into.add_dir(&dir, &format!("{rel_dir}/"), false)?;
    }
    let dir = data_dir.join(SET_ASIDE.dir);
    match std::fs::symlink_metadata(&dir) {
        Ok(m) if m.is_dir() => {
            let mut into = TreeCopy {
                tx: &tx,
                table: SET_ASIDE.table,
                piece,
                carried: &mut added.set_aside,
                skipped: &mut added.skipped,
            };
            into.add_dir(&dir, "", true)?;
        }
        Ok(_) => added.skipped.push(format!(
            "{}: is not a directory (a symbolic link?): not in the backup",
            dir.display()
        )),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(io(&dir)(e)),
    }
    tx.commit().map_err(sql(tmp))?;
    conn.close().map_err(|(_, e)| sql(tmp)(e))?;
    std::fs::File::open(tmp)
        .and_then(|f| f.sync_all())
        .map_err(io(tmp))?;
    Ok(added)
}

/// Where [`add_trees`] copies one tree's files to, and what it counts.
struct TreeCopy<'a> {
    tx: &'a rusqlite::Transaction<'a>,
    table: &'static str,
    piece: u64,
    carried: &'a mut Carried,
    skipped: &'a mut Vec<String>,
}

impl TreeCopy<'_> {
    /// Copies the files of directory `dir` as `{prefix}NAME`, skipping temporary names (and,
    /// with a warning, what is no file); with `nested`, the files of its directories named
    /// `STEM.files` too, as `{prefix}STEM.files/NAME`.
    fn add_dir(&mut self, dir: &Path, prefix: &str, nested: bool) -> Result<(), BackupError> {
        let listed: std::io::Result<Vec<std::ffi::OsString>> = std::fs::read_dir(dir)
            .and_then(|entries| entries.map(|e| e.map(|e| e.file_name())).collect());
        let mut names = match listed {
            Ok(names) => names,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                self.skipped.push(format!(
                    "{}: went while the backup ran (its job was purged after the snapshot?): \
                     its files are not in the backup",
                    dir.display()
                ));
                return Ok(());
            }
            Err(e) => return Err(io(dir)(e)),
        };
        names.sort();
        for name in names {
            let path = dir.join(&name);
            let Some(name) = name.to_str() else {
                self.skipped.push(format!(
                    "{}: a name that is not UTF-8 is not one the server writes: not in the backup",
                    path.display()
                ));
                continue;
            };
            if is_temporary(name) {
                continue;
            }
            if nested
                && name.ends_with(".files")
                && std::fs::symlink_metadata(&path).is_ok_and(|m| m.is_dir())
            {
                self.add_dir(&path, &format!("{prefix}{name}/"), false)?;
                continue;
            }
            match copy_file(
                self.tx,
                self.table,
                &path,
                &format!("{prefix}{name}"),
                self.piece,
            )? {
                Ok(bytes) => {
                    self.carried.files += 1;
                    self.carried.bytes += bytes;
                }
                Err(why) => self
                    .skipped
                    .push(format!("{}: {why}: not in the backup", path.display())),
            }
        }
        Ok(())
    }
}

/// Copies the file `path` into `table` as `rel`, in pieces of at most `piece` bytes,
/// streaming: its size, or why it is not a file to copy (a link, a directory, a special file,
/// gone). A file that changes while it is copied is an error naming it.
fn copy_file(
    tx: &rusqlite::Transaction,
    table: &str,
    path: &Path,
    rel: &str,
    piece: u64,
) -> Result<Result<u64, &'static str>, BackupError> {
    use std::io::{BufReader, Read};
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    let kind = |t: std::fs::FileType| {
        if t.is_symlink() {
            Err("is a symbolic link, which the server never writes there")
        } else if t.is_dir() {
            Err("is a directory, which the server never makes there")
        } else if t.is_fifo() || t.is_socket() || t.is_block_device() || t.is_char_device() {
            Err("is a special file (FIFO, socket or device), which the server never makes there")
        } else {
            Ok(())
        }
    };
    // Its job purged while the backup ran (after the snapshot) takes its files away.
    const GONE: &str = "is gone (its job was purged after the snapshot?)";
    let meta = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Err(GONE)),
        Err(e) => return Err(io(path)(e)),
    };
    if let Err(why) = kind(meta.file_type()) {
        return Ok(Err(why));
    }
    // Not through a link, and not blocking should a FIFO have taken the name meanwhile.
    let f = match OpenOptions::new()
        .read(true)
        .custom_flags((nix::fcntl::OFlag::O_NOFOLLOW | nix::fcntl::OFlag::O_NONBLOCK).bits())
        .open(path)
    {
        Ok(f) => f,
        Err(e) if e.raw_os_error() == Some(nix::libc::ELOOP) => {
            return Ok(Err(
                "is a symbolic link, which the server never writes there",
            ));
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Err(GONE)),
        Err(e) => return Err(io(path)(e)),
    };
    let before = f.metadata().map_err(io(path))?;
    if let Err(why) = kind(before.file_type()) {
        return Ok(Err(why));
    }
    let changed = || {
        refused(
            path,
            "changed while the backup copied it (the server writes the files of `divisible/` \
             whole, under a temporary name it then renames: something else is writing this \
             one); no backup was written, try again",
        )
    };
    let mode = before.mode() & 0o7777;
    let len = before.len();
    let mut left = len;
    let mut k: i64 = 0;
    loop {
        let n = left.min(piece);
        let size = i32::try_from(n).map_err(|_| refused(path, "a piece too large for SQLite"))?;
        tx.prepare_cached(&format!(
            "INSERT INTO {table}(path, piece, mode, data) VALUES (?1, ?2, ?3, ?4)"
        ))
        .and_then(|mut s| {
            s.execute(rusqlite::params![
                rel,
                k,
                mode,
                rusqlite::blob::ZeroBlob(size)
            ])
        })
        .map_err(sql(path))?;
        if n > 0 {
            let mut blob = tx
                .blob_open(
                    rusqlite::MAIN_DB,
                    table,
                    "data",
                    tx.last_insert_rowid(),
                    false,
                )
                .map_err(sql(path))?;
            let mut reader = BufReader::with_capacity(STREAM_BUFFER, (&f).take(n));
            let copied = std::io::copy(&mut reader, &mut blob).map_err(io(path))?;
            if copied != n {
                return Err(changed());
            }
        }
        left -= n;
        k += 1;
        if left == 0 {
            break;
        }
    }
    let mut more = [0u8; 1];
    let grew = (&f).read(&mut more).map_err(io(path))? != 0;
    let after = f.metadata().map_err(io(path))?;
    if grew
        || after.len() != len
        || after.mtime_nsec() != before.mtime_nsec()
        || after.mtime() != before.mtime()
    {
        return Err(changed());
    }
    Ok(Ok(len))
}

/// A tree's files as [`read_tree`] checked them, and what they add up to.
type Held = (Vec<StoredFile>, Carried);

/// One file of a tree's table as [`read_tree`] checked it.
struct StoredFile {
    /// Its path in the tree (`job-N/NAME`, `NAME`, `STEM.files/NAME`).
    rel: String,
    /// Its permission bits as backed up.
    mode: u32,
    /// Its pieces in order: the row and its bytes.
    pieces: Vec<(i64, u64)>,
}

/// Whether `name` is one plain name: not empty, `.` or `..`, no `/`, no NUL, at most 255 bytes.
fn is_plain(name: &str) -> bool {
    !name.is_empty()
        && name != "."
        && name != ".."
        && name.len() <= 255
        && !name.contains(['/', '\0'])
}

/// Whether `rel` is a path of [`DIVISIBLE`]: `job-N/NAME`, one plain name in one job's
/// directory (nothing absolute, no `.` or `..`, nothing deeper).
fn is_divisible_path(rel: &str) -> bool {
    let Some((dir, name)) = rel.split_once('/') else {
        return false;
    };
    let job = dir
        .strip_prefix("job-")
        .is_some_and(|n| !n.is_empty() && n.len() <= 20 && n.bytes().all(|b| b.is_ascii_digit()));
    job && is_plain(name)
}

/// Whether `rel` is a path of [`SET_ASIDE`]: `NAME`, or `STEM.files/NAME` (plain names).
fn is_set_aside_path(rel: &str) -> bool {
    match rel.split_once('/') {
        None => is_plain(rel),
        Some((dir, name)) => {
            is_plain(dir) && dir.len() > ".files".len() && dir.ends_with(".files") && is_plain(name)
        }
    }
}

/// The files [`add_trees`] put in `tree`'s table of backup `src`, each checked (a path the
/// tree allows, pieces 0, 1, … of at most [`PIECE_BYTES`], blobs), with what they add up to;
/// `None` for a backup without the table. Nothing is read of their contents.
fn read_tree(conn: &Connection, src: &Path, tree: Tree) -> Result<Option<Held>, BackupError> {
    if !has_table(conn, src, tree.table)? {
        return Ok(None);
    }
    let mut stmt = conn
        .prepare(&format!(
            "SELECT rowid, path, piece, mode, length(data), typeof(data) = 'blob' \
             FROM {} ORDER BY path, piece",
            tree.table
        ))
        .map_err(sql(src))?;
    let mut rows = stmt.query([]).map_err(sql(src))?;
    let mut files: Vec<StoredFile> = Vec::new();
    let mut carried = Carried::default();
    while let Some(row) = rows.next().map_err(sql(src))? {
        let read = || -> rusqlite::Result<(i64, String, i64, i64, i64, bool)> {
            Ok((
                row.get(0)?,
                row.get(1)?,
                row.get(2)?,
                row.get(3)?,
                row.get(4)?,
                row.get(5)?,
            ))
        };
        let (rowid, rel, piece, mode, len, is_blob) = read().map_err(sql(src))?;
        let bad = |why: &str| {
            refused(
                src,
                format!(
                    "holds a `{}/` file `{}` {why}; it is not a backup hetsched writes",
                    tree.dir,
                    hetsched_core::text::clip(&rel)
                ),
            )
        };
        if !(tree.is_path)(&rel) {
            return Err(bad(&format!("whose path would not be {}", tree.rule)));
        }
        let len = u64::try_from(len)
            .ok()
            .filter(|&l| is_blob && l <= PIECE_BYTES)
            .ok_or_else(|| {
                bad(&format!(
                    "with a piece that is no blob of at most {PIECE_BYTES} bytes"
                ))
            })?;
        let mode = u32::try_from(mode)
            .ok()
            .filter(|m| m & !0o7777 == 0)
            .ok_or_else(|| bad("with a mode that is no file's"))?;
        match files.last_mut() {
            Some(f) if f.rel == rel => {
                if usize::try_from(piece).ok() != Some(f.pieces.len()) {
                    return Err(bad("with a piece missing or repeated"));
                }
                f.pieces.push((rowid, len));
            }
            _ => {
                if piece != 0 {
                    return Err(bad("with a piece missing or repeated"));
                }
                carried.files += 1;
                files.push(StoredFile {
                    rel,
                    mode,
                    pieces: vec![(rowid, len)],
                });
            }
        }
        carried.bytes += len;
    }
    Ok(Some((files, carried)))
}

/// Writes the files of `tree`'s table of `src` (open as `conn`) that [`read_tree`] checked
/// into the new directory `DATA_DIR/{tree.staging}` (0700; its directories 0700; each file
/// owner-only, 0600 plus the owner's execute bit it had), streaming, and syncs them. A leftover
/// staging directory (a restore that died) is removed first.
fn stage_tree(
    conn: &Connection,
    src: &Path,
    data_dir: &Path,
    tree: Tree,
    files: &[StoredFile],
) -> Result<(), BackupError> {
    use std::io::{BufReader, Write};
    let staging = data_dir.join(tree.staging);
    remove_staging(&staging).map_err(io(&staging))?;
    let private_dir = |dir: &Path| {
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(dir)
            .map_err(io(dir))
    };
    private_dir(&staging)?;
    let mut dirs = std::collections::BTreeSet::new();
    for file in files {
        // Checked by `read_tree`: `NAME` or `DIR/NAME`, plain names.
        let path = match file.rel.split_once('/') {
            Some((sub, name)) => {
                let dir = staging.join(sub);
                if !dirs.contains(&dir) {
                    private_dir(&dir)?;
                    dirs.insert(dir.clone());
                }
                dir.join(name)
            }
            None => staging.join(&file.rel),
        };
        let mut out = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode((file.mode & 0o700) | 0o600)
            .custom_flags(nix::fcntl::OFlag::O_NOFOLLOW.bits())
            .open(&path)
            .map_err(io(&path))?;
        for &(rowid, len) in &file.pieces {
            if len == 0 {
                continue;
            }
            let blob = conn
                .blob_open(rusqlite::MAIN_DB, tree.table, "data", rowid, true)
                .map_err(sql(src))?;
            let mut reader = BufReader::with_capacity(STREAM_BUFFER, blob);
            std::io::copy(&mut reader, &mut out).map_err(io(&path))?;
        }
        out.flush()
            .and_then(|()| out.sync_all())
            .map_err(io(&path))?;
    }
    for dir in &dirs {
        sync_dir(dir)?;
    }
    sync_dir(&staging)
}

/// Removes `staging` if it is there (a directory is removed whole, a link or file alone).
fn remove_staging(staging: &Path) -> std::io::Result<()> {
    match std::fs::symlink_metadata(staging) {
        Ok(m) if m.is_dir() => std::fs::remove_dir_all(staging),
        Ok(_) => std::fs::remove_file(staging),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
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
    use hetsched_core::testkit::ScratchDir;
    use std::os::unix::fs::PermissionsExt;

    fn scratch(name: &str) -> ScratchDir {
        ScratchDir::new("backup", name)
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

    /// The count a backup reports is of the jobs `hetsched jobs --all` lists: a purged job's
    /// kept row (its ids stay taken) is not one.
    #[test]
    fn a_backup_counts_no_purged_job() {
        let d = scratch("purged");
        let (data, store) = store_in(&d);
        let c = Connection::open(data.join("state.db")).expect("open");
        for (id, purged) in [(1, 1), (2, 0), (3, 0)] {
            c.execute(
                "INSERT INTO jobs(id, origin, text, workdir, submitted_ns, first_app, \
                 first_task, purged) VALUES (?1, 'j.toml', '', '/', 0, 0, 0, ?2)",
                [id, purged],
            )
            .expect("a job row");
        }
        drop(c);
        let b = backup(&data, &d.join("b.db")).expect("backup");
        assert_eq!(b.jobs, 2, "job 1 was purged");
        drop(store);
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
        // Refused for what it restores from, it makes no data directory.
        let fresh = d.join("fresh");
        for bad in [&text, &d.join("nosuch.db")] {
            restore(&fresh, bad).expect_err("no backup");
            assert!(!fresh.exists(), "{}", bad.display());
        }
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

    /// Divisible job `id` in state `state` in `store`, as its kind stores it.
    fn divisible_job(store: &crate::store::Store, id: i64, state: &str) {
        store
            .conn()
            .execute(
                "INSERT INTO div_jobs(id, origin, text, state, submitted_ns) \
                 VALUES (?1, 'rows.toml', '', ?2, 0)",
                rusqlite::params![id, state],
            )
            .expect("a divisible job row");
    }

    fn carried(files: u64, bytes: u64) -> Carried {
        Carried { files, bytes }
    }

    fn mode_of(path: &Path) -> u32 {
        std::fs::symlink_metadata(path)
            .expect("meta")
            .permissions()
            .mode()
            & 0o777
    }

    /// The files of the divisible jobs the snapshot holds, and those of `set-aside/`, travel in
    /// the backup — cut in pieces, skipping what the server never writes there and what it is
    /// still writing — and a restore into a new data directory writes them back, private; into
    /// a data directory with a `divisible/` and a `set-aside/`, it keeps those it replaces with
    /// the store.
    #[test]
    fn a_backup_carries_the_divisible_and_set_aside_files_and_a_restore_writes_them_back_private() {
        let d = scratch("divisible");
        let (data, store) = store_in(&d);
        divisible_job(&store, 1, "completed");
        divisible_job(&store, 2, crate::jobs::divisible::PURGED);
        let div = data.join(DIVISIBLE_DIR);
        let job1 = div.join("job-1");
        std::fs::create_dir_all(&job1).expect("job dir");
        let input: Vec<u8> = (0..23u8).collect();
        std::fs::write(job1.join("input"), &input).expect("input");
        std::fs::write(job1.join("chunk-0.out"), "").expect("an empty chunk output");
        std::fs::write(job1.join("output"), "the product\n").expect("output");
        // Being written: the server renames it into place once whole.
        std::fs::write(job1.join("output.tmp"), "half").expect("temporary");
        std::os::unix::fs::symlink(d.join("outside"), job1.join("link")).expect("link");
        nix::unistd::mkfifo(&job1.join("fifo"), nix::sys::stat::Mode::S_IRWXU).expect("fifo");
        for job in ["job-2", "job-3"] {
            std::fs::create_dir_all(div.join(job)).expect("dir");
            std::fs::write(div.join(job).join("input"), job).expect("input");
        }
        // What `--set-aside` kept: a job's file, its record, its divisible files.
        let aside = data.join(SET_ASIDE.dir);
        std::fs::create_dir_all(aside.join("job-4.files")).expect("set-aside");
        std::fs::write(aside.join("job-4.toml"), "[[divisible]]\n").expect("file");
        std::fs::write(aside.join("job-4.json"), "{}").expect("record");
        std::fs::write(aside.join("job-4.files").join("output"), "kept").expect("files");
        std::fs::create_dir_all(aside.join("deep")).expect("not the server's");
        let out = d.join("b.db");
        let b = backup_in_pieces(&data, &out, 5).expect("backup");
        assert_eq!(b.divisible, carried(3, 35));
        assert_eq!(b.set_aside, carried(3, 20));
        assert_eq!(b.skipped.len(), 3, "{:?}", b.skipped);
        assert!(b.skipped[0].contains("job-1/fifo") && b.skipped[0].contains("special"));
        assert!(b.skipped[1].contains("job-1/link") && b.skipped[1].contains("symbolic link"));
        assert!(b.skipped[2].contains("set-aside/deep") && b.skipped[2].contains("directory"));
        let pieces: i64 = Connection::open(&out)
            .and_then(|c| {
                c.query_row(
                    &format!("SELECT COUNT(*) FROM {DIVISIBLE_TABLE} WHERE path = 'job-1/input'"),
                    [],
                    |r| r.get(0),
                )
            })
            .expect("pieces");
        assert_eq!(pieces, 5, "23 bytes in pieces of at most 5");
        drop(store);

        // A new machine: a data directory that does not exist yet.
        let fresh = d.join("fresh");
        let r = restore(&fresh, &out).expect("restore");
        assert_eq!(r.divisible, Some(carried(3, 35)));
        assert_eq!(r.set_aside, Some(carried(3, 20)));
        let kept_aside = fresh.join(SET_ASIDE.dir);
        let kept_files = kept_aside.join("job-4.files");
        assert_eq!(
            std::fs::read_to_string(kept_files.join("output")).expect("kept"),
            "kept"
        );
        assert_eq!(mode_of(&kept_aside), 0o700);
        assert_eq!(mode_of(&kept_files), 0o700);
        assert_eq!(mode_of(&kept_aside.join("job-4.toml")), 0o600);
        assert!(!kept_aside.join("deep").exists());
        let restored = fresh.join(DIVISIBLE_DIR).join("job-1");
        assert_eq!(std::fs::read(restored.join("input")).expect("input"), input);
        assert_eq!(
            std::fs::read(restored.join("chunk-0.out")).expect("chunk"),
            b""
        );
        assert_eq!(
            std::fs::read_to_string(restored.join("output")).expect("output"),
            "the product\n"
        );
        let mut names: Vec<_> = std::fs::read_dir(&restored)
            .expect("dir")
            .map(|e| e.expect("entry").file_name())
            .collect();
        names.sort();
        assert_eq!(names, ["chunk-0.out", "input", "output"]);
        assert!(!fresh.join(DIVISIBLE_DIR).join("job-2").exists());
        assert!(!fresh.join(DIVISIBLE_DIR).join("job-3").exists());
        assert!(!fresh.join(DIVISIBLE.staging).exists());
        assert!(!fresh.join(SET_ASIDE.staging).exists());
        assert_eq!(mode_of(&fresh.join(DIVISIBLE_DIR)), 0o700);
        assert_eq!(mode_of(&restored), 0o700);
        for name in ["input", "chunk-0.out", "output"] {
            assert_eq!(mode_of(&restored.join(name)), 0o600, "{name}");
        }
        // The store keeps no copy of them.
        let c = Connection::open(&r.store).expect("restored store");
        for tree in TREES {
            assert!(!has_table(&c, &r.store, tree.table).expect("tables"));
        }

        // Over a data directory with its own `divisible/`: that one is kept aside.
        let r = restore(&data, &out).expect("restore over");
        let kept = r.replaced.expect("what it replaced");
        assert!(
            kept.join(DIVISIBLE_DIR)
                .join("job-3")
                .join("input")
                .exists()
        );
        assert!(!div.join("job-3").exists());
        assert!(kept.join(SET_ASIDE.dir).join("deep").is_dir());
        assert!(!aside.join("deep").exists());
        assert_eq!(
            std::fs::read(div.join("job-1").join("input")).expect("input"),
            input
        );
    }

    /// A backup whose table of divisible-job or set-aside files names a path that would leave
    /// `divisible/` or `set-aside/` (or go deeper than the server writes) is refused before
    /// anything changes; one without the divisible table (an older backup) leaves `divisible/`
    /// as it is.
    #[test]
    fn a_restore_refuses_a_path_escaping_divisible_or_set_aside_before_anything_changes() {
        let d = scratch("escape");
        let (data, store) = store_in(&d);
        divisible_job(&store, 1, "running");
        let job1 = data.join(DIVISIBLE_DIR).join("job-1");
        std::fs::create_dir_all(&job1).expect("job dir");
        std::fs::write(job1.join("input"), "mine").expect("input");
        let out = d.join("b.db");
        backup(&data, &out).expect("backup");
        drop(store);
        let divisible_paths = [
            "../escaped",
            "/tmp/escaped",
            "job-1/../../escaped",
            "job-1/a/b",
            "job-1/..",
            "job-1/",
            "escaped",
            "job-x/escaped",
            "",
        ];
        let set_aside_paths = [
            "../escaped",
            "/tmp/escaped",
            "job-4.files/../../escaped",
            "job-4.files/a/b",
            "deep/escaped",
            ".files/escaped",
            "..",
            "",
        ];
        let forged = [
            (DIVISIBLE, &divisible_paths[..]),
            (SET_ASIDE, &set_aside_paths[..]),
        ];
        let mut i = 0;
        for (tree, paths) in forged {
            for path in paths {
                i += 1;
                let forged = d.join(format!("forged-{i}.db"));
                std::fs::copy(&out, &forged).expect("copy");
                Connection::open(&forged)
                    .and_then(|c| {
                        c.execute(
                            &format!(
                                "INSERT INTO {}(path, piece, mode, data) \
                                 VALUES (?1, 0, 384, x'00')",
                                tree.table
                            ),
                            [path],
                        )
                    })
                    .expect("forged row");
                let e = restore(&data, &forged).expect_err("a path out of its directory");
                let says = format!("holds a `{}/` file `{path}` whose path", tree.dir);
                assert!(e.to_string().contains(&says), "{e}");
            }
        }
        // Nothing changed: no file outside, the store and `divisible/` as they were, nothing
        // set aside or left half-written.
        assert!(!d.join("escaped").exists() && !data.join("escaped").exists());
        assert!(!std::path::Path::new("/tmp/escaped").exists());
        assert_eq!(
            std::fs::read_to_string(job1.join("input")).expect("input"),
            "mine"
        );
        let names: Vec<String> = std::fs::read_dir(&data)
            .expect("data dir")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        assert!(
            !names
                .iter()
                .any(|n| n.starts_with("before-restore") || n.contains("restoring")),
            "{names:?}"
        );
        let s = crate::store::Store::open(&data.join(datadir::STORE)).expect("the store");
        let jobs: i64 = s
            .conn()
            .query_row("SELECT COUNT(*) FROM div_jobs", [], |r| r.get(0))
            .expect("read");
        assert_eq!(jobs, 1);
        drop(s);

        // A backup from before backups held these files restores the store alone.
        let old = d.join("old.db");
        std::fs::copy(&out, &old).expect("copy");
        Connection::open(&old)
            .and_then(|c| c.execute_batch(&format!("DROP TABLE {DIVISIBLE_TABLE}")))
            .expect("an older backup");
        std::fs::write(job1.join("output"), "gathered since").expect("output");
        let r = restore(&data, &old).expect("restore");
        assert_eq!(r.divisible, None);
        assert_eq!(r.set_aside, Some(carried(0, 0)));
        assert_eq!(
            std::fs::read_to_string(job1.join("output")).expect("output"),
            "gathered since"
        );
    }
}
