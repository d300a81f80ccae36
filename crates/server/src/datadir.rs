//! The server's data directory and what guards it: the directory is private (0700), the store's
//! files are 0600 (they hold jobs' commands and environments, secrets included), the two
//! credentials live in files of their own, and a lock keeps a second server off the same
//! directory.
//!
//! - `token` — the **client** token: `submit`, `jobs`, `tasks`, `cancel` … (users);
//! - `agent-token` — the **agent** token: `Register` and `Heartbeat` (agents only);
//! - `offload-secret` — the secret the ANodes' offload keys are derived from
//!   ([`crate::tickets`]); never sent anywhere.
//!
//! Each is 256 random bits in hex, created once with `O_EXCL` and mode 0600. A file that exists
//! but is empty is refused (it was truncated by something; silently replacing it would lock every
//! agent or user out with a new secret), so is a token shorter than [`MIN_TOKEN_CHARS`] (written
//! by hand, and guessable), and one readable by others (kept from an older version, or copied in
//! with a wider mode) is made 0600 again, with a warning.
//!
//! The lock is `DATA_DIR/server.lock`, held with `flock` for the server's lifetime and holding its
//! PID, so a second server on the same directory exits with a message naming the first.

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use thiserror::Error;
use tracing::warn;

/// File name of the client token.
pub const CLIENT_TOKEN: &str = "token";
/// File name of the agent token.
pub const AGENT_TOKEN: &str = "agent-token";
/// File name of the offload secret.
pub const OFFLOAD_SECRET: &str = "offload-secret";
/// The fewest characters a token file may hold (128 bits in hex); the server writes 64 (256
/// random bits), so a shorter one was written by hand, and could be guessed.
pub const MIN_TOKEN_CHARS: usize = 32;
/// File name of the lock.
pub const LOCK: &str = "server.lock";
/// File name of the store.
pub const STORE: &str = "state.db";

/// A problem with the data directory or a file in it.
#[derive(Debug, Error)]
pub enum DataDirError {
    /// An I/O error on `path` (the message includes the error, so it is not chained again).
    #[error("{path}: {error}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The error.
        error: std::io::Error,
    },
    /// A file or directory that must not be used as it is.
    #[error("{path}: {message}")]
    Refused {
        /// The file or directory.
        path: PathBuf,
        /// Why.
        message: String,
    },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> DataDirError + '_ {
    move |error| DataDirError::Io {
        path: path.to_path_buf(),
        error,
    }
}

/// The two credentials.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Credentials {
    /// Token of users (the `Client` service).
    pub client: String,
    /// Token of agents (the `Agent` service).
    pub agent: String,
}

/// Creates `dir` with mode 0700 (and its missing parents), or checks an existing one: it must be
/// a directory, not a symlink, owned by this user; group/other permissions are removed.
pub fn prepare(dir: &Path) -> Result<(), DataDirError> {
    match std::fs::symlink_metadata(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)
                .map_err(io(dir))?;
        }
        Err(e) => return Err(io(dir)(e)),
        Ok(_) => {}
    }
    let meta = std::fs::symlink_metadata(dir).map_err(io(dir))?;
    if meta.file_type().is_symlink() {
        return Err(DataDirError::Refused {
            path: dir.to_path_buf(),
            message: "is a symbolic link; give the real directory".into(),
        });
    }
    if !meta.is_dir() {
        return Err(DataDirError::Refused {
            path: dir.to_path_buf(),
            message: "is not a directory".into(),
        });
    }
    let me = nix::unistd::geteuid().as_raw();
    if meta.uid() != me {
        return Err(DataDirError::Refused {
            path: dir.to_path_buf(),
            message: format!(
                "is owned by user {}, not by this user ({me}); refusing to keep jobs' secrets there",
                meta.uid()
            ),
        });
    }
    check_shared(dir, &meta)?;
    if meta.mode() & 0o077 != 0 {
        warn!(dir = %dir.display(), mode = format!("{:o}", meta.mode() & 0o777), "data directory was open to other users: setting it to 0700");
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).map_err(io(dir))?;
    }
    Ok(())
}

/// Whether `name`, an entry of a data directory, is one the server (or `hetsched server
/// restore`) writes there: the store and its WAL, the tokens and secrets, the lock, the bound
/// addresses, the agents' CA, the allocation tag and queues' output, divisible jobs' and
/// set-aside files, and what a restore moves aside or writes first.
fn is_data_dir_entry(name: &str) -> bool {
    const NAMES: [&str; 14] = [
        STORE,
        CLIENT_TOKEN,
        AGENT_TOKEN,
        OFFLOAD_SECRET,
        crate::dashboard::READ_TOKEN,
        LOCK,
        "address",
        "http-address",
        crate::agent_ca::KEY_FILE,
        crate::agent_ca::CERT_FILE,
        crate::allocation::TAG_FILE,
        "allocations",
        crate::set_aside::DIR,
        crate::backup::DIVISIBLE_DIR,
    ];
    NAMES.contains(&name)
        || name.starts_with(STORE)
        || name.starts_with("before-restore-")
        || name.ends_with(".restoring")
}

/// Refuses an existing `dir` (of metadata `meta`) that a start must not take over: one with the
/// sticky bit (a directory every user shares, as `/tmp`), or one that holds files of its own
/// and is not a data directory already (no `state.db` nor `server.lock`, and some entry no
/// server writes). A start made such a directory 0700 — locking its other users out of their
/// files — and wrote the store and its secrets among them. An empty directory, or a data
/// directory (an older one with other files left in it too), is taken as it is.
fn check_shared(dir: &Path, meta: &std::fs::Metadata) -> Result<(), DataDirError> {
    let refused = |message: String| DataDirError::Refused {
        path: dir.to_path_buf(),
        message,
    };
    let own = dir.join("hetsched-data");
    if meta.mode() & 0o1000 != 0 {
        return Err(refused(format!(
            "has the sticky bit, as a directory every user shares (/tmp) has: a data directory \
             must be the server's own; give a new one, e.g. --data-dir {} (created 0700)",
            own.display()
        )));
    }
    let mut foreign = Vec::new();
    let mut marked = false;
    for entry in std::fs::read_dir(dir).map_err(io(dir))? {
        let name = entry.map_err(io(dir))?.file_name();
        let name = name.to_string_lossy();
        if name == STORE || name == LOCK {
            marked = true;
        } else if !is_data_dir_entry(&name) {
            foreign.push(name.into_owned());
        }
    }
    if marked || foreign.is_empty() {
        return Ok(());
    }
    foreign.sort_unstable();
    let shown = 3;
    let mut named: Vec<String> = foreign
        .iter()
        .take(shown)
        .map(|n| format!("`{}`", hetsched_core::text::clip(n)))
        .collect();
    if foreign.len() > shown {
        named.push(format!("{} more", foreign.len() - shown));
    }
    Err(refused(format!(
        "is not empty and is no hetsched data directory (no {STORE}; it holds {}): a start \
         would make it private (0700) and keep jobs' secrets among those files; give an empty \
         or new directory, e.g. --data-dir {}",
        named.join(", "),
        own.display()
    )))
}

/// Creates (or truncates) `path` for writing, private to the server's user (mode 0600,
/// whatever the umask) and not through a symbolic link: what the server keeps of jobs in the
/// data directory (a divisible job's input, its chunks' outputs, its gathered output) may be
/// users' data.
pub fn create_private(path: &Path) -> std::io::Result<File> {
    OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .custom_flags(nix::fcntl::OFlag::O_NOFOLLOW.bits())
        .open(path)
}

/// Writes `bytes` to `path` (created or truncated) as [`create_private`] does: mode 0600
/// whatever the umask — and whatever mode a file kept from an earlier version had — and not
/// through a symbolic link. What the server writes for its own user (`address`,
/// `http-address`, the allocation queues' scripts) is 0600 like every file of the data
/// directory.
pub fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut f = create_private(path)?;
    f.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    f.write_all(bytes)
}

/// Creates directory `path`, and its missing parents, mode 0700 whatever the umask; an
/// existing `path` open to others (made by an earlier version) is made 0700.
pub fn create_private_dir(path: &Path) -> std::io::Result<()> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(path)?;
    if std::fs::symlink_metadata(path)?.mode() & 0o077 != 0 {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o700))?;
    }
    Ok(())
}

/// Checks `dir` as [`prepare`] and [`lock`] would, changing nothing: a missing directory is
/// fine if it can be created ([`creatable`]); one that is a symlink, not a directory, or another
/// user's is refused; so are the token files a start would refuse, the read-only token's only
/// with `read_token` (the server reads it only when it has an HTTP listener, `http_listen`).
/// The PID of the server that holds its lock, if one does (`hetsched server --check` on a
/// running server's configuration).
pub fn check(dir: &Path, read_token: bool) -> Result<Option<String>, DataDirError> {
    let meta = match std::fs::symlink_metadata(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return creatable(dir).map(|()| None),
        Err(e) => return Err(io(dir)(e)),
        Ok(m) => m,
    };
    let refused = |message: String| DataDirError::Refused {
        path: dir.to_path_buf(),
        message,
    };
    if meta.file_type().is_symlink() {
        return Err(refused(
            "is a symbolic link; give the real directory".into(),
        ));
    }
    if !meta.is_dir() {
        return Err(refused("is not a directory".into()));
    }
    let me = nix::unistd::geteuid().as_raw();
    if meta.uid() != me {
        return Err(refused(format!(
            "is owned by user {}, not by this user ({me}); refusing to keep jobs' secrets there",
            meta.uid()
        )));
    }
    check_shared(dir, &meta)?;
    // What a start would set right with a warning, said as a start would say it: a check that
    // said nothing let an operator believe the directory was as it should be.
    if meta.mode() & 0o077 != 0 {
        warn!(dir = %dir.display(), mode = format!("{:o}", meta.mode() & 0o777), "data directory is open to other users: a start sets it to 0700");
    }
    for name in [
        CLIENT_TOKEN,
        AGENT_TOKEN,
        crate::dashboard::READ_TOKEN,
        OFFLOAD_SECRET,
    ] {
        let path = dir.join(name);
        if let Ok(m) = std::fs::symlink_metadata(&path)
            && m.is_file()
            && m.mode() & 0o077 != 0
        {
            warn!(file = %path.display(), mode = format!("{:o}", m.mode() & 0o777), "{name} is readable by other users: a start sets it to 0600");
        }
    }
    // The tokens a start would refuse (the read-only token is made anew when empty, and read
    // only by a server with an HTTP listener).
    let tokens = [
        (CLIENT_TOKEN, true),
        (AGENT_TOKEN, true),
        (crate::dashboard::READ_TOKEN, false),
    ];
    let tokens = if read_token {
        &tokens[..]
    } else {
        &tokens[..2]
    };
    for &(name, empty_refused) in tokens {
        let path = dir.join(name);
        let text = match std::fs::read_to_string(&path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(io(&path)(e)),
            Ok(t) => t,
        };
        let token = text.trim();
        if token.is_empty() && !empty_refused {
            continue;
        }
        if token.is_empty() {
            return Err(DataDirError::Refused {
                path,
                message: EMPTY_TOKEN.into(),
            });
        }
        check_strength(&path, token)?;
    }
    let path = dir.join(LOCK);
    let file = match OpenOptions::new()
        .read(true)
        .custom_flags(nix::fcntl::OFlag::O_NOFOLLOW.bits())
        .open(&path)
    {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io(&path)(e)),
        Ok(f) => f,
    };
    // A shared lock, released at once, writes nothing; a running server's exclusive one
    // refuses it.
    match nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockSharedNonblock) {
        Ok(_) => Ok(None),
        Err((_, errno)) if errno == nix::errno::Errno::EWOULDBLOCK => Ok(Some(
            std::fs::read_to_string(&path)
                .ok()
                .map(|s| s.trim().to_string())
                .filter(|s| !s.is_empty())
                .unwrap_or_else(|| "unknown".into()),
        )),
        Err((_, errno)) => Err(io(&path)(std::io::Error::from(errno))),
    }
}

/// Whether the missing directory `dir` could be created: its first missing component is made
/// and removed again (what a permission bit does not tell: a read-only or virtual filesystem
/// such as `/proc`, where even root cannot make one), so nothing is left behind.
fn creatable(dir: &Path) -> Result<(), DataDirError> {
    let mut first_missing = dir;
    while let Some(parent) = first_missing.parent().filter(|p| !p.as_os_str().is_empty()) {
        match std::fs::symlink_metadata(parent) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => first_missing = parent,
            Err(e) => return Err(io(parent)(e)),
            Ok(_) if !std::fs::metadata(parent).is_ok_and(|m| m.is_dir()) => {
                return Err(DataDirError::Refused {
                    path: dir.to_path_buf(),
                    message: format!("cannot be created: {} is not a directory", parent.display()),
                });
            }
            Ok(_) => break,
        }
    }
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(first_missing)
        .map_err(|e| DataDirError::Refused {
            path: dir.to_path_buf(),
            message: format!("cannot be created ({}: {e})", first_missing.display()),
        })?;
    std::fs::remove_dir(first_missing).map_err(io(first_missing))
}

/// Makes `state.db` (creating it empty if needed) and its `-wal`/`-shm` files mode 0600 before
/// SQLite opens them: SQLite gives the WAL and SHM files the database file's mode.
pub fn protect_store(dir: &Path) -> Result<PathBuf, DataDirError> {
    let db = dir.join(STORE);
    OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .custom_flags(nix::fcntl::OFlag::O_NOFOLLOW.bits())
        .open(&db)
        .map_err(io(&db))?;
    for name in [STORE, "state.db-wal", "state.db-shm"] {
        let p = dir.join(name);
        match std::fs::symlink_metadata(&p) {
            Ok(m) if m.mode() & 0o077 != 0 => {
                std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600))
                    .map_err(io(&p))?;
            }
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(io(&p)(e)),
        }
    }
    Ok(db)
}

/// Checks that secret file `f` (at `path`; `what` names it in the log) is not open to other
/// users. One that is is made 0600, with a warning, when `own` (a secret the server keeps) and
/// it belongs to this user (only an owner can change it); otherwise it is used with a warning
/// saying to `chmod 600` it.
pub(crate) fn keep_private(
    f: &std::fs::File,
    path: &Path,
    what: &str,
    own: bool,
) -> std::io::Result<()> {
    let meta = f.metadata()?;
    if meta.mode() & 0o077 == 0 {
        return Ok(());
    }
    let mode = format!("{:o}", meta.mode() & 0o777);
    if own && meta.uid() == nix::unistd::geteuid().as_raw() {
        warn!(file = %path.display(), mode, "{what} was readable by other users: setting it to 0600");
        f.set_permissions(std::fs::Permissions::from_mode(0o600))
    } else {
        warn!(file = %path.display(), mode, "{what} is readable by other users: `chmod 600` it");
        Ok(())
    }
}

/// Why an empty token file is refused.
const EMPTY_TOKEN: &str = "the token file is empty; delete it to have the server create a new \
                           token (and hand the new one out), or restore it";

/// Reads a token file: refuses an empty one, warns when others may read it, follows no symlink.
pub fn read_token(path: &Path) -> Result<String, DataDirError> {
    read_token_file(path, "the token file", false)
}

/// [`read_token`]; with `own` (a secret of the data directory, which the server keeps), one
/// others may read is made 0600 (with a warning) rather than only warned about, as the store's
/// files are ([`protect_store`]).
fn read_token_file(path: &Path, what: &str, own: bool) -> Result<String, DataDirError> {
    let mut f = OpenOptions::new()
        .read(true)
        .custom_flags(nix::fcntl::OFlag::O_NOFOLLOW.bits())
        .open(path)
        .map_err(io(path))?;
    keep_private(&f, path, what, own).map_err(io(path))?;
    let mut text = String::new();
    f.read_to_string(&mut text).map_err(io(path))?;
    let token = text.trim();
    if token.is_empty() {
        return Err(DataDirError::Refused {
            path: path.to_path_buf(),
            message: EMPTY_TOKEN.into(),
        });
    }
    Ok(token.to_string())
}

fn load_or_create(path: &Path, what: &str) -> Result<String, DataDirError> {
    load_or_create_with(path, what, rand::random())
}

/// [`load_or_create`], writing `bytes` in hex when the file does not exist; `what` names the
/// file in a warning (the offload secret is no token: a warning calling it one sent the
/// reader looking for the wrong file).
fn load_or_create_with(path: &Path, what: &str, bytes: [u8; 32]) -> Result<String, DataDirError> {
    match std::fs::symlink_metadata(path) {
        Ok(_) => return read_token_file(path, what, true),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(io(path)(e)),
    }
    let token: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    // O_EXCL: never write through a file (or symlink) someone else put there meanwhile.
    let mut f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(io(path))?;
    f.write_all(token.as_bytes()).map_err(io(path))?;
    f.sync_all().map_err(io(path))?;
    Ok(token)
}

/// Why `token`, read from a token file, is refused, if it is shorter than [`MIN_TOKEN_CHARS`]:
/// it grants what the file's role grants (the admin's, every agent's), and a short one was
/// written by hand. Refused rather than warned about, as an empty one is, and never replaced:
/// its holders would be locked out without a word.
pub(crate) fn weak_token(token: &str) -> Option<String> {
    let n = token.chars().count();
    (n < MIN_TOKEN_CHARS).then(|| {
        format!(
            "the token is {} long: a token file must hold at least \
             {MIN_TOKEN_CHARS} (128 bits in hex; the server writes 256-bit ones), or the token \
             could be guessed. Delete the file to have the server create a new token (and hand \
             the new one out), or restore the one it held",
            hetsched_core::text::count(n as u64, "character")
        )
    })
}

/// [`weak_token`] of the token read from `path`, as an error naming the file.
fn check_strength(path: &Path, token: &str) -> Result<(), DataDirError> {
    match weak_token(token) {
        Some(message) => Err(DataDirError::Refused {
            path: path.to_path_buf(),
            message,
        }),
        None => Ok(()),
    }
}

/// Reads both tokens, creating each that does not exist; a kept one shorter than
/// [`MIN_TOKEN_CHARS`] is refused ([`weak_token`]).
pub fn credentials(dir: &Path) -> Result<Credentials, DataDirError> {
    let (client_file, agent_file) = (dir.join(CLIENT_TOKEN), dir.join(AGENT_TOKEN));
    let client = load_or_create(&client_file, "the client token file")?;
    check_strength(&client_file, &client)?;
    let agent = load_or_create(&agent_file, "the agent token file")?;
    check_strength(&agent_file, &agent)?;
    if client == agent {
        return Err(DataDirError::Refused {
            path: dir.join(AGENT_TOKEN),
            message: "holds the same token as `token`; agents and clients need different ones \
                      (delete `agent-token` to have a new one created)"
                .into(),
        });
    }
    Ok(Credentials { client, agent })
}

/// Makes `DATA_DIR/read-token` private (0600) if others may read it, as a start with an HTTP
/// listener does when it reads it ([`crate::dashboard::read_token`]): a start without one reads
/// it not, and left it open although `hetsched server --check` says a start sets it to 0600.
pub fn protect_read_token(dir: &Path) -> Result<(), DataDirError> {
    let path = dir.join(crate::dashboard::READ_TOKEN);
    let f = match OpenOptions::new()
        .read(true)
        .custom_flags(nix::fcntl::OFlag::O_NOFOLLOW.bits())
        .open(&path)
    {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(io(&path)(e)),
        Ok(f) => f,
    };
    keep_private(&f, &path, "the read-only token file", true).map_err(io(&path))
}

/// Reads `DATA_DIR/offload-secret`, creating it (32 bytes from the system's generator) if it
/// does not exist: kept across restarts, so tickets the server signed before a restart still
/// verify with the keys it gives the ANodes after. A file that is not 64 hex digits is refused
/// (replacing it would silently change every ANode's key).
pub fn offload_secret(dir: &Path) -> Result<[u8; 32], DataDirError> {
    let path = dir.join(OFFLOAD_SECRET);
    let mut fresh = [0u8; 32];
    ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut fresh).map_err(|_| {
        DataDirError::Refused {
            path: path.clone(),
            message: "the system's random generator failed".into(),
        }
    })?;
    let text = load_or_create_with(&path, "the offload secret file", fresh)?;
    let refused = || DataDirError::Refused {
        path: path.clone(),
        message: "is not 64 hexadecimal digits; restore it, or delete it to have the server \
                  create a new secret (offloads assigned before then are refused by their ANodes \
                  and run again)"
            .into(),
    };
    if text.len() != 64 || !text.is_ascii() {
        return Err(refused());
    }
    let mut secret = [0u8; 32];
    for (i, b) in secret.iter_mut().enumerate() {
        *b = u8::from_str_radix(&text[2 * i..2 * i + 2], 16).map_err(|_| refused())?;
    }
    Ok(secret)
}

/// The held lock on a data directory; released when dropped (or when the process dies).
#[derive(Debug)]
pub struct DirLock {
    _lock: nix::fcntl::Flock<File>,
}

/// Takes `DATA_DIR/server.lock` for this process and writes its PID there; if another process
/// holds it, fails with a message naming that PID.
pub fn lock(dir: &Path) -> Result<DirLock, DataDirError> {
    let path = dir.join(LOCK);
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .custom_flags(nix::fcntl::OFlag::O_NOFOLLOW.bits())
        .open(&path)
        .map_err(io(&path))?;
    match nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusiveNonblock) {
        Ok(mut lock) => {
            lock.set_len(0).map_err(io(&path))?;
            writeln!(lock, "{}", std::process::id()).map_err(io(&path))?;
            Ok(DirLock { _lock: lock })
        }
        Err((_, errno)) if errno == nix::errno::Errno::EWOULDBLOCK => {
            let holder = std::fs::read_to_string(&path)
                .ok()
                .map(|s| s.trim().to_string())
                .filter(|s| !s.is_empty())
                .unwrap_or_else(|| "unknown".into());
            Err(DataDirError::Refused {
                path: dir.to_path_buf(),
                message: format!(
                    "another hetsched server (PID {holder}) is using this data directory; \
                     stop it first or give this one another --data-dir"
                ),
            })
        }
        Err((_, errno)) => Err(io(&path)(std::io::Error::from(errno))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hetsched_core::testkit::ScratchDir;

    /// `hetsched server --check` passes a missing data directory only if the server could make
    /// it, and leaves nothing behind.
    #[test]
    fn a_missing_directory_passes_the_check_only_where_it_can_be_made() {
        let base = scratch("creatable");
        std::fs::create_dir_all(&base).expect("base");
        let nested = base.join("a/b/data");
        assert_eq!(check(&nested, true).expect("creatable"), None);
        assert!(!base.join("a").exists(), "the check made nothing");
        std::fs::write(base.join("file"), "x").expect("file");
        let e = check(&base.join("file/data"), true).expect_err("under a file");
        assert!(
            e.to_string().to_lowercase().contains("not a directory"),
            "{e}"
        );
        let e = check(&base.join("file/a/data"), true).expect_err("further under a file");
        assert!(
            e.to_string().to_lowercase().contains("not a directory"),
            "{e}"
        );
        if Path::new("/proc/self").exists() {
            // Not even root makes a directory in /proc.
            let e = check(Path::new("/proc/hetsched-check/data"), true).expect_err("in /proc");
            assert!(e.to_string().contains("cannot be created"), "{e}");
        }
        std::fs::remove_dir_all(&base).expect("clean");
    }

    fn scratch(name: &str) -> ScratchDir {
        ScratchDir::new("datadir", name)
    }

    #[test]
    fn a_new_data_directory_is_private_and_its_tokens_differ() {
        let dir = scratch("new");
        let d = dir.join("nested");
        prepare(&d).expect("prepare");
        let mode = std::fs::metadata(&d).expect("meta").mode() & 0o777;
        assert_eq!(mode, 0o700);
        let c = credentials(&d).expect("tokens");
        assert_ne!(c.client, c.agent);
        for f in [CLIENT_TOKEN, AGENT_TOKEN] {
            let m = std::fs::metadata(d.join(f)).expect("token").mode() & 0o777;
            assert_eq!(m, 0o600, "{f}");
        }
        assert_eq!(credentials(&d).expect("again"), c, "tokens are kept");
        let db = protect_store(&d).expect("store file");
        assert_eq!(std::fs::metadata(db).expect("db").mode() & 0o777, 0o600);
    }

    #[test]
    fn the_offload_secret_is_private_and_kept_and_a_mangled_one_is_refused() {
        let d = scratch("offload");
        prepare(&d).expect("prepare");
        let s = offload_secret(&d).expect("created");
        let path = d.join(OFFLOAD_SECRET);
        assert_eq!(
            std::fs::metadata(&path).expect("meta").mode() & 0o777,
            0o600
        );
        assert_eq!(offload_secret(&d).expect("again"), s, "kept across starts");
        std::fs::write(&path, "zz").expect("mangle");
        let e = offload_secret(&d).expect_err("refused");
        assert!(e.to_string().contains("64 hexadecimal digits"), "{e}");
        assert_eq!(std::fs::read_to_string(&path).expect("kept"), "zz");
    }

    /// A secret kept from an earlier start (an older version's, or one a `cp` or an editor
    /// left open to others) is made private again at the next start, not only warned about:
    /// the files holding secrets are 0600 whoever wrote them.
    #[test]
    fn secrets_kept_from_an_earlier_start_are_made_private_again() {
        let d = scratch("reopen");
        prepare(&d).expect("prepare");
        let c = credentials(&d).expect("tokens");
        let s = offload_secret(&d).expect("secret");
        for f in [CLIENT_TOKEN, AGENT_TOKEN, OFFLOAD_SECRET] {
            std::fs::set_permissions(d.join(f), std::fs::Permissions::from_mode(0o644))
                .expect("open it");
        }
        assert_eq!(credentials(&d).expect("kept"), c);
        assert_eq!(offload_secret(&d).expect("kept"), s);
        for f in [CLIENT_TOKEN, AGENT_TOKEN, OFFLOAD_SECRET] {
            let m = std::fs::metadata(d.join(f)).expect("meta").mode() & 0o777;
            assert_eq!(m, 0o600, "{f} is still {m:o}");
        }
    }

    #[test]
    fn an_empty_token_file_is_refused_not_replaced() {
        let d = scratch("empty");
        prepare(&d).expect("prepare");
        std::fs::write(d.join(CLIENT_TOKEN), "\n").expect("empty token");
        let e = credentials(&d).expect_err("refused");
        assert!(e.to_string().contains("the token file is empty"), "{e}");
        assert_eq!(
            std::fs::read_to_string(d.join(CLIENT_TOKEN)).expect("kept"),
            "\n"
        );
    }

    /// A token file shorter than [`MIN_TOKEN_CHARS`] (hand-edited: the server writes 64 hex
    /// digits) is refused at start and by `--check`, naming the file and the minimum, and kept
    /// as it is; before, `a` became the admin's credential without a word. The agent token and
    /// the read-only token are held to the same minimum, the read-only one only where the
    /// server reads it (with `http_listen`): before, `--check` refused a short one that the
    /// server, without an HTTP listener, started with.
    #[test]
    fn a_short_token_file_is_refused_at_start_and_by_the_check_naming_the_file_and_the_minimum() {
        let d = scratch("short");
        prepare(&d).expect("prepare");
        let c = credentials(&d).expect("tokens");
        assert_eq!(c.client.len(), 64);
        let short = "a".repeat(MIN_TOKEN_CHARS - 1);
        for f in [CLIENT_TOKEN, AGENT_TOKEN, crate::dashboard::READ_TOKEN] {
            let path = d.join(f);
            let kept = std::fs::read_to_string(&path).ok();
            for token in ["a\n", short.as_str()] {
                std::fs::write(&path, token).expect("hand-edited");
                let says = format!(
                    "{}: the token is {} long: a token file must hold at least \
                     {MIN_TOKEN_CHARS}",
                    path.display(),
                    hetsched_core::text::count(token.trim().len() as u64, "character")
                );
                let e = if f == crate::dashboard::READ_TOKEN {
                    // The start names the file (`ServerError::Io`).
                    let e = crate::dashboard::read_token(&d).expect_err("refused");
                    format!("{}: {e}", path.display())
                } else {
                    credentials(&d).expect_err("refused").to_string()
                };
                assert!(e.contains(&says), "{f}: {e}");
                let e = check(&d, true).expect_err("--check refuses it").to_string();
                assert!(e.contains(&says), "{f}: --check: {e}");
                if f == crate::dashboard::READ_TOKEN {
                    // Without `http_listen` the server never reads it, and starts.
                    assert_eq!(check(&d, false).expect("no HTTP listener: not read"), None);
                } else {
                    check(&d, false).expect_err("read with or without an HTTP listener");
                }
                assert_eq!(std::fs::read_to_string(&path).expect("kept"), token);
            }
            match kept {
                Some(k) => std::fs::write(&path, k).expect("restore"),
                None => std::fs::remove_file(&path).expect("remove"),
            }
        }
        let long_enough = "b".repeat(MIN_TOKEN_CHARS);
        std::fs::write(d.join(CLIENT_TOKEN), &long_enough).expect("32 characters");
        assert_eq!(credentials(&d).expect("taken").client, long_enough);
        assert_eq!(check(&d, true).expect("passes"), None);
    }

    #[test]
    fn a_symlinked_data_directory_is_refused_and_an_open_one_is_closed() {
        let d = scratch("symlink");
        let real = d.join("real");
        std::fs::create_dir_all(&real).expect("real");
        std::fs::set_permissions(&real, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        let link = d.join("link");
        std::os::unix::fs::symlink(&real, &link).expect("symlink");
        let e = prepare(&link).expect_err("symlink refused");
        assert!(e.to_string().contains("symbolic link"), "{e}");
        prepare(&real).expect("real dir");
        assert_eq!(
            std::fs::metadata(&real).expect("meta").mode() & 0o777,
            0o700
        );
    }

    #[test]
    fn a_second_lock_names_the_holder() {
        let d = scratch("lock");
        prepare(&d).expect("prepare");
        let held = lock(&d).expect("first");
        let e = lock(&d).expect_err("second");
        assert!(
            e.to_string()
                .contains(&format!("PID {}", std::process::id())),
            "{e}"
        );
        drop(held);
        lock(&d).expect("free again");
    }

    /// A directory shared with other files (another program's, a user's home) or with every
    /// user (the sticky bit of /tmp) is refused by a start and by the check alike, naming it
    /// and what to give instead, and left as it was; an empty directory and a data directory
    /// (its store or lock there, other files or not; or only the files a server writes) are
    /// taken.
    #[test]
    fn a_shared_or_sticky_directory_is_refused_and_an_empty_or_data_directory_taken() {
        let d = scratch("shared");
        let shared = d.join("shared");
        std::fs::create_dir_all(&shared).expect("shared");
        std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        std::fs::write(shared.join("notes.txt"), "mine").expect("a file of its own");
        for e in [
            prepare(&shared).expect_err("a start refuses it"),
            check(&shared, true).expect_err("the check refuses it"),
        ] {
            let e = e.to_string();
            assert!(
                e.starts_with(&format!("{}: is not empty", shared.display()))
                    && e.contains("`notes.txt`")
                    && e.contains(&format!("--data-dir {}/hetsched-data", shared.display())),
                "{e}"
            );
        }
        assert_eq!(
            std::fs::metadata(&shared).expect("meta").mode() & 0o777,
            0o755,
            "its mode is left alone"
        );
        assert!(!shared.join(CLIENT_TOKEN).exists());
        let sticky = d.join("sticky");
        std::fs::create_dir_all(&sticky).expect("sticky");
        std::fs::set_permissions(&sticky, std::fs::Permissions::from_mode(0o1777)).expect("chmod");
        for e in [
            prepare(&sticky).expect_err("a start refuses it"),
            check(&sticky, true).expect_err("the check refuses it"),
        ] {
            assert!(e.to_string().contains("has the sticky bit"), "{e}");
        }
        // Empty: taken (and made private).
        let empty = d.join("empty");
        std::fs::create_dir_all(&empty).expect("empty");
        check(&empty, true).expect("the check takes it");
        prepare(&empty).expect("a start takes it");
        // A data directory, with a stray file left in it: taken.
        let data = d.join("data");
        prepare(&data).expect("new");
        std::fs::write(data.join(STORE), "").expect("store");
        std::fs::write(data.join("notes.txt"), "").expect("stray");
        check(&data, true).expect("the check takes it");
        prepare(&data).expect("a start takes it");
        // Only a token written by hand before the first start: taken.
        let seeded = d.join("seeded");
        prepare(&seeded).expect("new");
        std::fs::write(seeded.join(CLIENT_TOKEN), "a".repeat(64)).expect("token");
        prepare(&seeded).expect("a start takes it");
    }
}
