//! The agent's work directory and its identity.
//!
//! The work directory holds the record of running tasks (`running.tasks`, from which a restarted
//! agent kills process groups: often as root), task outputs and the agent's identity, so nobody
//! else may write into it. [`prepare`] creates it with mode 0700 and refuses one reached through a
//! symbolic link or owned by another user; it closes group and other permissions on one of ours.
//! With `run_as_owner` ([`prepare_for`]) it is 0711 instead, so that the accounts tasks run as
//! reach their own directories in it ([`crate::run_as::area`]); everything else in it is private.
//!
//! The identity (`WORK_DIR/identity`, 256 random bits in hex, mode 0600) is created once and
//! kept: it proves to the server that heartbeats for a node come from the agent that registered
//! it, and it tells two agents started under one name apart (the second is refused while the
//! first lives). An agent restarted with the same work directory is the same agent.
//!
//! Its absolute path is made only of characters no shell splits or interprets
//! ([`placeholder_problem`]): a workflow instance's `{input:NAME}` and `{output:NAME}` are
//! paths under it, pasted into the instance's command as they are.

use std::io::{Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use tracing::warn;

/// The identity's file name in the work directory.
pub const IDENTITY: &str = "identity";

/// `O_NOFOLLOW`: open no file through a symbolic link planted in its place.
pub fn no_follow() -> i32 {
    nix::fcntl::OFlag::O_NOFOLLOW.bits()
}

/// Opens `path` without following a symbolic link: for reading, or (`write`) created or
/// truncated with mode 0600 — a regular file only ([`open_regular`], [`create_regular`]). The
/// agent's private records (the ledger, the offload attempts) and the files it captures a
/// task's output in are opened through it.
pub fn open_no_follow(path: &Path, write: bool) -> std::io::Result<std::fs::File> {
    if write {
        create_regular(path, 0o600)
    } else {
        open_regular(path, false)
    }
}

/// What the agent found in the place of a file it opens that is not a regular file: a FIFO, a
/// socket, a device or a directory. A task can put any of them where its output goes (`rm -f
/// out.txt; mkfifo out.txt`), and opening or reading one could block the agent's thread for
/// good (a FIFO nobody writes), so none is read or written: the error names the path and what
/// is there, for the caller to pass on to the user ([`not_regular`]).
#[derive(Debug, thiserror::Error)]
#[error("`{}` is {what}, not a regular file", path.display())]
pub struct NotRegular {
    /// The path opened.
    pub path: PathBuf,
    /// What is there, in words: "a FIFO", "a socket", "a directory", …
    pub what: &'static str,
}

/// The [`NotRegular`] an open's error carries, if it is one.
pub fn not_regular(e: &std::io::Error) -> Option<&NotRegular> {
    e.get_ref().and_then(|e| e.downcast_ref::<NotRegular>())
}

/// A file type in words, for [`NotRegular`]: "a FIFO", "a directory", …
pub fn type_in_words(t: std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if t.is_fifo() {
        "a FIFO"
    } else if t.is_socket() {
        "a socket"
    } else if t.is_char_device() {
        "a character device"
    } else if t.is_block_device() {
        "a block device"
    } else if t.is_dir() {
        "a directory"
    } else if t.is_symlink() {
        "a symbolic link"
    } else if t.is_file() {
        "a regular file"
    } else {
        "of an unknown type"
    }
}

/// How [`open_checked`] opens a path.
#[derive(Clone, Copy)]
struct Checked {
    /// For writing, created (with this mode) if missing, and emptied once known to be a
    /// regular file; else for reading.
    create: Option<u32>,
    /// Whether a symbolic link at the path is followed (a path the user named, opened as the
    /// user's account: where the link leads is the user's business) or refused (`ELOOP`).
    follow: bool,
    /// Whether a character device is taken too (`stdout = "/dev/null"`, which the parser
    /// admits): a device node only root can make, so it is not something a task planted.
    device: bool,
}

/// Opens `path` as `how` says, a regular file only. It is opened with `O_NONBLOCK`, so that a
/// FIFO in its place cannot block the open (an open for writing of a FIFO nobody reads fails
/// with `ENXIO`, one for reading returns at once), then looked at through the descriptor
/// (`fstat`, so what is checked is what was opened, whatever replaced the path since):
/// anything but a regular file (or an admitted device) is refused with [`NotRegular`] before a
/// byte is read, written or truncated. `O_NONBLOCK` is then cleared: the file is read and
/// written as any other (a child given it as its stdout shares the flag).
fn open_checked(path: &Path, how: Checked) -> std::io::Result<std::fs::File> {
    use nix::fcntl::{FcntlArg, OFlag, fcntl};
    let mut flags = OFlag::O_NONBLOCK;
    if !how.follow {
        flags |= OFlag::O_NOFOLLOW;
    }
    let mut o = std::fs::OpenOptions::new();
    match how.create {
        // Not truncated here: what is in the path's place is not known yet.
        Some(mode) => o.write(true).create(true).truncate(false).mode(mode),
        None => o.read(true),
    };
    let refused = |t: std::fs::FileType| -> std::io::Error {
        std::io::Error::other(NotRegular {
            path: path.to_path_buf(),
            what: type_in_words(t),
        })
    };
    let f = match o.custom_flags(flags.bits()).open(path) {
        Ok(f) => f,
        // A FIFO nobody reads, or a socket (`ENXIO`); a directory opened to write (`EISDIR`):
        // said as what is there.
        Err(e) if matches!(e.raw_os_error(), Some(nix::libc::ENXIO | nix::libc::EISDIR)) => {
            let there = if how.follow {
                std::fs::metadata(path)
            } else {
                std::fs::symlink_metadata(path)
            };
            return Err(match there {
                Ok(m) if !m.is_file() => refused(m.file_type()),
                _ => e,
            });
        }
        Err(e) => return Err(e),
    };
    let t = f.metadata()?.file_type();
    let device = how.device && std::os::unix::fs::FileTypeExt::is_char_device(&t);
    if !t.is_file() && !device {
        return Err(refused(t));
    }
    let status = OFlag::from_bits_retain(fcntl(&f, FcntlArg::F_GETFL)?);
    fcntl(&f, FcntlArg::F_SETFL(status - OFlag::O_NONBLOCK))?;
    if how.create.is_some() && t.is_file() {
        f.set_len(0)?;
    }
    Ok(f)
}

/// Opens `path` for reading, a regular file only (anything else is refused with
/// [`NotRegular`], never read: [`open_checked`]), following a symbolic link at it only when
/// `follow` (a path a user named, opened as the user's account). Every file a task could have
/// made or replaced that the agent reads — its captured output, a pointer to its own output
/// file, a workflow output, a chunk's output, an offloaded task's files — is opened so.
pub fn open_regular(path: &Path, follow: bool) -> std::io::Result<std::fs::File> {
    open_checked(
        path,
        Checked {
            create: None,
            follow,
            device: false,
        },
    )
}

/// Creates (or empties) `path` for writing with `mode` (before the umask), never through a
/// symbolic link, a regular file only: a FIFO, a socket, a device or a directory in its place
/// is refused with [`NotRegular`] and left as it is ([`open_checked`]).
pub fn create_regular(path: &Path, mode: u32) -> std::io::Result<std::fs::File> {
    open_checked(
        path,
        Checked {
            create: Some(mode),
            follow: false,
            device: false,
        },
    )
}

/// Creates (or empties) a file a user named for the agent to write a task's stream or files to
/// (`stdout =`, an offloaded task's outputs on its NNode), as [`create_regular`] but following
/// a link at it (opened as the user's account, it leads where the account could write anyway)
/// and taking a character device (`/dev/null`) as it is. A FIFO there is refused: the open
/// would wait for a reader for good.
pub fn create_users(path: &Path) -> std::io::Result<std::fs::File> {
    open_checked(
        path,
        Checked {
            create: Some(0o666),
            follow: true,
            device: true,
        },
    )
}

/// Why [`create_private`] wrote nothing: a symbolic link is where the file goes.
pub const LINK_IN_PLACE: &str =
    "a symbolic link is in its place, and the agent writes through none";

/// Creates `dir` and its missing parents private to their creator: mode 0700 whatever the
/// umask (directories that exist keep theirs).
pub fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
}

/// Creates (or truncates) `path` for writing, private to its creator — mode 0600 whatever the
/// umask, its missing directories 0700 ([`create_private_dir`]) — and never through a symbolic
/// link in its place: a task that planted one in its directory cannot redirect the write
/// (the error says so, [`LINK_IN_PLACE`], for the caller to name the path; the link's target
/// is untouched), nor into a FIFO, socket, device or directory ([`create_regular`]). For the
/// files the agent writes into a task's directory: fetched workflow inputs
/// ([`crate::dataflow`]) and an offloaded task's inputs staged on its ANode
/// ([`crate::accel::files::Sink`]).
pub fn create_private(path: &Path) -> std::io::Result<std::fs::File> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        create_private_dir(dir)?;
    }
    create_regular(path, 0o600).map_err(|e| {
        if e.raw_os_error() == Some(nix::errno::Errno::ELOOP as i32) {
            std::io::Error::new(e.kind(), LINK_IN_PLACE)
        } else {
            e
        }
    })
}

/// Replaces the record at `path` with `text` whole — written to `path` with the extension
/// `tmp`, then renamed over it, so a crash of the agent leaves the old record or the new one,
/// never half — and opens it for appending the next lines. Neither file is opened through a
/// symbolic link; a rewrite that failed leaves no `tmp` file behind. Not synced: a crash of the
/// whole machine may lose it ([`rewrite_for_append_synced`] is the durable one).
pub fn rewrite_for_append(path: &Path, text: &str) -> std::io::Result<std::fs::File> {
    rewrite(path, text, false)
}

/// [`rewrite_for_append`] that also outlives a crash of the machine: the new file's data is
/// synced before the rename (else the rename could reach the disk before the data, leaving an
/// empty record in the old one's place), and the directory after it (the rename itself).
pub fn rewrite_for_append_synced(path: &Path, text: &str) -> std::io::Result<std::fs::File> {
    rewrite(path, text, true)
}

fn rewrite(path: &Path, text: &str, sync: bool) -> std::io::Result<std::fs::File> {
    let tmp = path.with_extension("tmp");
    let written = open_no_follow(&tmp, true)
        .and_then(|mut f| {
            f.write_all(text.as_bytes())?;
            if sync { f.sync_data() } else { Ok(()) }
        })
        .and_then(|()| std::fs::rename(&tmp, path));
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written?;
    if sync {
        sync_dir_of(path)?;
    }
    std::fs::OpenOptions::new()
        .append(true)
        .custom_flags(no_follow())
        .open(path)
}

/// Syncs the directory holding `path`, so that an entry renamed there outlives a crash.
fn sync_dir_of(path: &Path) -> std::io::Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    std::fs::File::open(dir)?.sync_all()
}

fn refuse(path: &Path, message: impl std::fmt::Display) -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::PermissionDenied,
        format!("{}: {message}", path.display()),
    )
}

/// Creates `dir` (mode 0700, with missing parents) or checks an existing one: a real directory
/// (not a symlink), owned by this user; group and other permissions are removed.
pub fn prepare(dir: &Path) -> std::io::Result<()> {
    prepare_for(dir, false)
}

/// [`prepare`], or with `shared` (`run_as_owner`: tasks run as their owners' accounts) mode
/// 0711, so that those accounts can pass through to their own directories
/// ([`crate::run_as::area`]) and workflow instances (`wf/JOB/TASK-I`, through `wf` and
/// `wf/JOB`, 0711 too) but not list them; every other entry of the agent's in them is made
/// private (what an agent without the setting left open to other users), and the agent creates
/// its files private from then on ([`crate::run_as::keep_files_private`]).
pub fn prepare_for(dir: &Path, shared: bool) -> std::io::Result<()> {
    match std::fs::symlink_metadata(dir) {
        // Shared: the missing directories above it too are made 0711, one by one (the umask
        // would close them).
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && shared => {
            let missing: Vec<&Path> = dir
                .ancestors()
                .take_while(|d| std::fs::symlink_metadata(d).is_err())
                .collect();
            for d in missing.into_iter().rev() {
                std::fs::DirBuilder::new().mode(0o711).create(d)?;
                std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o711))?;
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)?,
        Err(e) => return Err(e),
        Ok(_) => {}
    }
    let meta = std::fs::symlink_metadata(dir)?;
    if meta.file_type().is_symlink() {
        return Err(refuse(
            dir,
            "the work directory is a symbolic link; refusing to use it (give the real directory)",
        ));
    }
    if !meta.is_dir() {
        return Err(refuse(dir, "not a directory"));
    }
    let me = nix::unistd::geteuid().as_raw();
    if meta.uid() != me {
        return Err(refuse(
            dir,
            format!(
                "the work directory is owned by user {}, not by this agent's user ({me}); \
                 refusing to use it (someone may have planted files there)",
                meta.uid()
            ),
        ));
    }
    if shared {
        // Others pass through the work directory, `wf` and its jobs' directories, to the
        // accounts' own directories and workflow instances; all else is closed (what an agent
        // without the setting left open to other users).
        let pass = |d: &Path| -> std::io::Result<()> {
            if std::fs::symlink_metadata(d)?.mode() & 0o7777 != 0o711 {
                std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o711))?;
            }
            Ok(())
        };
        pass(dir)?;
        close_entries(dir, &[crate::run_as::AREA, "wf"])?;
        let wf = dir.join("wf");
        if std::fs::symlink_metadata(&wf).is_ok_and(|m| m.is_dir()) {
            pass(&wf)?;
            // Anything else in `wf` (there is nothing else) is closed.
            close_entries(&wf, &[])?;
            for job in std::fs::read_dir(&wf)? {
                let job = job?;
                if job.file_type()?.is_dir() {
                    pass(&job.path())?;
                    close_entries(&job.path(), &[])?;
                }
            }
        }
    } else if meta.mode() & 0o077 != 0 {
        warn!(dir = %dir.display(), "work directory was open to other users: setting it to 0700");
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
    }
    Ok(())
}

/// Removes group and other permissions from the entries of `dir` that this user owns, but for
/// those named in `keep` and symbolic links.
fn close_entries(dir: &Path, keep: &[&str]) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let m = entry.metadata()?;
        if keep.iter().any(|k| entry.file_name() == *k) || m.is_symlink() || m.uid() != euid() {
            continue;
        }
        if m.mode() & 0o077 != 0 {
            std::fs::set_permissions(
                entry.path(),
                std::fs::Permissions::from_mode(m.mode() & 0o7700),
            )?;
        }
    }
    Ok(())
}

/// The lock's file name in the work directory ([`try_lock`]).
pub const LOCK: &str = "agent.lock";

/// The work directory, held by this process: one agent (or the guard of one that died) at a
/// time. Released when dropped, and by the kernel when the process ends however it ends.
#[derive(Debug)]
pub struct DirLock {
    _lock: nix::fcntl::Flock<std::fs::File>,
}

/// What [`try_lock`] found.
#[derive(Debug)]
pub enum Locked {
    /// This process holds the work directory now.
    Held(DirLock),
    /// Another process holds it.
    Busy,
    /// Its file system has no locks (an NFS mount without a lock daemon, some FUSE file systems):
    /// the caller goes on without one.
    Unsupported(std::io::Error),
}

/// Takes the work directory's lock (`WORK_DIR/agent.lock`, an exclusive `flock`, mode 0600),
/// writing this process's pid into it. Two agents in one work directory would each kill what the
/// other's ledger lists, so an agent holds it for its whole life.
pub fn try_lock(dir: &Path) -> std::io::Result<Locked> {
    use nix::fcntl::{Flock, FlockArg};
    let path = dir.join(LOCK);
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .custom_flags(no_follow())
        .open(&path)?;
    use nix::errno::Errno;
    let mut lock = match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
        Ok(l) => l,
        Err((_, Errno::EWOULDBLOCK)) => return Ok(Locked::Busy),
        Err((_, e @ (Errno::ENOLCK | Errno::EOPNOTSUPP | Errno::ENOSYS | Errno::EINVAL))) => {
            return Ok(Locked::Unsupported(std::io::Error::from(e)));
        }
        Err((_, e)) => return Err(std::io::Error::from(e)),
    };
    lock.set_len(0)?;
    writeln!(*lock, "{}", std::process::id())?;
    Ok(Locked::Held(DirLock { _lock: lock }))
}

/// The pid written into the work directory's lock by the process that holds it (or held it
/// last), if it can be read.
pub fn lock_holder(dir: &Path) -> Option<u32> {
    let mut text = String::new();
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(no_follow())
        .open(dir.join(LOCK))
        .ok()?
        .read_to_string(&mut text)
        .ok()?;
    text.trim().parse().ok()
}

/// Why work directory `dir` (made absolute against this process's directory) cannot hold
/// workflow instances, if it cannot: its path holds a character a shell splits at or
/// interprets. A workflow command gets its `{input:NAME}` and `{output:NAME}` paths
/// (`WORK_DIR/wf/JOB/TASK-I/out/NAME`) pasted in as they are, a shell line too: under
/// `/tmp/x/work dir`, `echo hi > {output:o}` failed with ``cannot create /tmp/x/work: Is a
/// directory`` (and would have written `/tmp/x/work` had it been a file). Quoting the paths as
/// they are pasted is no way out: a command that quotes its placeholders itself
/// (`"{output:o}"`, as many do) would then read the quotes as part of the path. So the path is
/// held to what the parser allows a data name — letters, digits and
/// [`DATA_NAME_PUNCTUATION`](hetsched_core::input::workflow::DATA_NAME_PUNCTUATION) — and `/`;
/// every other part of such a path (`wf`, the job id, the task's name made safe, the instance
/// number, `in`/`out`, the data name, the copy's number) already is.
pub fn placeholder_problem(dir: &Path) -> Option<String> {
    use hetsched_core::input::workflow::{DATA_NAME_PUNCTUATION, char_named, shell_safe};
    let absolute = std::path::absolute(dir).unwrap_or_else(|_| dir.to_path_buf());
    let why = "workflow placeholders ({input:NAME}, {output:NAME}) paste paths under it into \
               shell commands as they are, where a shell would split or interpret it";
    let Some(text) = absolute.to_str() else {
        return Some(format!(
            "`{}`: the path is not UTF-8; {why}",
            absolute.display()
        ));
    };
    let c = text.chars().find(|&c| c != '/' && !shell_safe(c))?;
    Some(format!(
        "`{}` holds {}; {why}: use a directory whose path is letters, digits, `/` and `{}` only",
        text.escape_debug(),
        char_named(c),
        DATA_NAME_PUNCTUATION
            .chars()
            .map(String::from)
            .collect::<Vec<_>>()
            .join(" ")
    ))
}

/// This process's effective user id.
pub fn euid() -> u32 {
    nix::unistd::geteuid().as_raw()
}

/// The default work directory of agent `name` for a user with effective uid `euid`:
/// `$XDG_STATE_HOME/hetsched/agent-NAME` when that is set, else `/var/lib/hetsched/agent-NAME`
/// for root, else `$HOME/.local/state/hetsched/agent-NAME`. Never a shared directory such as
/// `/tmp`.
pub fn default_dir(
    name: &str,
    euid: u32,
    xdg_state_home: Option<&str>,
    home: Option<&str>,
) -> Option<PathBuf> {
    let leaf = format!("agent-{name}");
    if let Some(x) = xdg_state_home.filter(|x| Path::new(x).is_absolute()) {
        return Some(PathBuf::from(x).join("hetsched").join(leaf));
    }
    if euid == 0 {
        return Some(PathBuf::from("/var/lib/hetsched").join(leaf));
    }
    home.filter(|h| Path::new(h).is_absolute())
        .map(|h| PathBuf::from(h).join(".local/state/hetsched").join(leaf))
}

/// Reads the agent's identity from `dir`, creating it the first time (0600); a kept one others
/// may read is made 0600 again.
pub fn identity(dir: &Path) -> std::io::Result<String> {
    let path = dir.join(IDENTITY);
    match std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(no_follow())
        .open(&path)
    {
        Ok(mut f) => {
            let meta = f.metadata()?;
            if meta.mode() & 0o077 != 0 && meta.uid() == euid() {
                warn!(
                    file = %path.display(),
                    mode = format!("{:o}", meta.mode() & 0o777),
                    "the agent's identity was readable by other users: setting it to 0600"
                );
                f.set_permissions(std::fs::Permissions::from_mode(0o600))?;
            }
            let mut s = String::new();
            f.read_to_string(&mut s)?;
            let id = s.trim();
            if id.len() < 32 || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(refuse(
                    &path,
                    "not an agent identity (expected 64 hex digits); delete it to create a new one",
                ));
            }
            Ok(id.to_string())
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let bytes: [u8; 32] = rand::random();
            let id: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&path)?;
            f.write_all(id.as_bytes())?;
            f.sync_all()?;
            Ok(id)
        }
        Err(e) => Err(refuse(&path, e)),
    }
}

/// Writes `bytes` to `path`, readable and writable by the agent's user only (mode 0600, also
/// when the file existed with a wider mode).
pub fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)?;
    f.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    f.write_all(bytes)
}

/// Runs `f` on a thread of its own whose umask is `mask` (its own, unshared: the other tests'
/// threads keep theirs), with a Tokio runtime of its own for what `f` awaits: to show that a file
/// is private whatever the umask.
#[cfg(test)]
pub(crate) fn under_umask<T: Send>(mask: u32, f: impl std::future::Future<Output = T> + Send) -> T {
    std::thread::scope(|s| {
        s.spawn(move || {
            nix::sched::unshare(nix::sched::CloneFlags::CLONE_FS).expect("own umask");
            nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(mask));
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime")
                .block_on(f)
        })
        .join()
        .expect("the test's thread")
    })
}

/// The permission bits of `path` (not following a link).
#[cfg(test)]
pub(crate) fn mode_of(path: &Path) -> u32 {
    std::fs::symlink_metadata(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .mode()
        & 0o777
}

#[cfg(test)]
mod tests {
    use super::*;
    use hetsched_core::testkit::ScratchDir;

    fn scratch(name: &str) -> ScratchDir {
        ScratchDir::new("workdir", name)
    }

    /// A work directory whose path a shell would split or interpret cannot hold workflow
    /// instances, whose placeholders paste paths under it into commands: it is refused,
    /// naming the character and why; an ordinary one, relative ones too, is not.
    #[test]
    fn a_work_directory_a_shell_would_split_or_interpret_is_refused_saying_why() {
        for (dir, holds) in [
            ("/tmp/x/work dir/a4", "a space"),
            ("/tmp/x/a;b", "`;`"),
            ("/tmp/x/$HOME", "`$`"),
            ("/tmp/x/a'b", "`'`"),
            ("/tmp/x/a\"b", "`\"`"),
            ("/tmp/x/a`b", "a backtick (`` ` ``)"),
            ("/tmp/x/a*", "`*`"),
            ("/tmp/x/a[1]", "`[`"),
            ("/tmp/x/{a}", "`{`"),
            ("/tmp/~x", "`~`"),
            ("/tmp/x/a\nb", "a newline"),
            ("/tmp/x/a\\b", "`\\`"),
            ("/tmp/x/a&b", "`&`"),
            ("/tmp/x/a(b)", "`(`"),
        ] {
            let problem = placeholder_problem(Path::new(dir)).unwrap_or_default();
            assert!(
                problem.contains(&format!(" holds {holds}; workflow placeholders")),
                "{dir:?}: {problem}"
            );
            assert!(
                problem.contains("paste paths under it into shell commands")
                    && problem.ends_with("letters, digits, `/` and `_ . - + @ % , = :` only"),
                "{problem}"
            );
        }
        for ok in [
            "/var/lib/hetsched/agent-n1",
            "/tmp/x/a_b.c-d+e@f%g,h=i:j",
            "work/a1",
        ] {
            assert_eq!(placeholder_problem(Path::new(ok)), None, "{ok}");
        }
    }

    /// Runs `f` on a thread of its own and gives its answer, or fails the test if none came
    /// within 5 s (the open hung: the thread is left behind).
    pub(crate) fn promptly<T: Send + 'static>(
        what: &str,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> T {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(f());
        });
        rx.recv_timeout(std::time::Duration::from_secs(5))
            .unwrap_or_else(|_| panic!("{what}: no answer within 5 s (it blocked)"))
    }

    /// A FIFO, a socket or a directory where the agent opens a file (a task put it there: `rm -f
    /// out; mkfifo out`) is refused at once, naming the path and what it is, for reading and
    /// for writing — a FIFO with a reader on its other end too — and left as it was; a device
    /// only where a user's own file may be one (`/dev/null`). Before, opening a FIFO nobody
    /// wrote blocked the agent's thread for good.
    #[test]
    fn what_is_not_a_regular_file_is_refused_at_once_naming_it() {
        use std::os::unix::fs::FileTypeExt;
        let d = scratch("not-regular");
        std::fs::create_dir_all(d.join("dir")).expect("dir");
        let fifo = d.join("out.fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).expect("fifo");
        let _socket = std::os::unix::net::UnixListener::bind(d.join("sock")).expect("socket");
        for (name, what) in [
            ("out.fifo", "a FIFO"),
            ("sock", "a socket"),
            ("dir", "a directory"),
        ] {
            let path = d.join(name);
            type Open = fn(PathBuf) -> std::io::Result<std::fs::File>;
            for (op, f) in [
                ("read", (|p| open_regular(&p, false)) as Open),
                ("read as a user's", |p| open_regular(&p, true)),
                ("created", |p| create_regular(&p, 0o600)),
                ("created as a user's", |p| create_users(&p)),
                ("opened by open_no_follow", |p| open_no_follow(&p, false)),
                ("created privately", |p| create_private(&p)),
            ] {
                let p = path.clone();
                let e = promptly(op, move || f(p)).expect_err(op);
                let refused = not_regular(&e).unwrap_or_else(|| panic!("{name} {op}: {e}"));
                assert_eq!(refused.what, what, "{name} {op}");
                assert_eq!(
                    e.to_string(),
                    format!("`{}` is {what}, not a regular file", path.display()),
                    "{name} {op}"
                );
            }
        }
        // A FIFO with a reader: opened for writing (the FIFO, not the reader, answers), refused.
        let reader = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(nix::fcntl::OFlag::O_NONBLOCK.bits())
            .open(&fifo)
            .expect("reader");
        let e = create_users(&fifo).expect_err("a FIFO with a reader");
        assert_eq!(not_regular(&e).map(|n| n.what), Some("a FIFO"), "{e}");
        drop(reader);
        assert!(
            std::fs::symlink_metadata(&fifo)
                .expect("kept")
                .file_type()
                .is_fifo()
        );
        // A link to a FIFO: refused as a link where links are not followed, as a FIFO where they are.
        std::os::unix::fs::symlink(&fifo, d.join("link")).expect("link");
        let e = open_regular(&d.join("link"), false).expect_err("a link");
        assert_eq!(e.raw_os_error(), Some(nix::libc::ELOOP), "{e}");
        let e = promptly("a link to a FIFO", {
            let l = d.join("link");
            move || create_users(&l)
        })
        .expect_err("a link to a FIFO");
        assert_eq!(not_regular(&e).map(|n| n.what), Some("a FIFO"), "{e}");
        // A device: only as a user's own file, and then not emptied nor left non-blocking.
        let e = open_regular(Path::new("/dev/null"), true).expect_err("a device");
        assert_eq!(
            not_regular(&e).map(|n| n.what),
            Some("a character device"),
            "{e}"
        );
        let null = create_users(Path::new("/dev/null")).expect("/dev/null as a user's stdout");
        let status = nix::fcntl::fcntl(&null, nix::fcntl::FcntlArg::F_GETFL).expect("flags");
        assert_eq!(status & nix::libc::O_NONBLOCK, 0, "left blocking");
        // A regular file: read, and emptied when created again.
        let file = d.join("file");
        std::fs::write(&file, "old contents").expect("file");
        let mut text = String::new();
        open_regular(&file, false)
            .expect("a file")
            .read_to_string(&mut text)
            .expect("read");
        assert_eq!(text, "old contents");
        let mut f = create_regular(&file, 0o600).expect("a file");
        f.write_all(b"new").expect("write");
        assert_eq!(std::fs::read_to_string(&file).expect("read"), "new");
    }

    /// The synced rewrite replaces the record whole, leaves no `tmp`, and appends after it, as
    /// the unsynced one does (that it reaches the disk no test here can show).
    #[test]
    fn agent_a_synced_rewrite_replaces_the_record_and_appends_after_it() {
        let d = scratch("synced");
        std::fs::create_dir_all(&d).expect("dir");
        let path = d.join("offload.attempts");
        std::fs::write(&path, "old\n").expect("old");
        let mut f = rewrite_for_append_synced(&path, "run 1 1 9\n").expect("rewrite");
        f.write_all(b"ended 1 1 9 done\n").expect("append");
        assert_eq!(
            std::fs::read_to_string(&path).expect("read"),
            "run 1 1 9\nended 1 1 9 done\n"
        );
        assert!(!path.with_extension("tmp").exists(), "no tmp left");
    }

    #[test]
    fn a_new_work_directory_is_private_and_keeps_its_identity() {
        let dir = scratch("new");
        let d = dir.join("agent-a");
        prepare(&d).expect("prepare");
        assert_eq!(std::fs::metadata(&d).expect("meta").mode() & 0o777, 0o700);
        let id = identity(&d).expect("identity");
        assert_eq!(id.len(), 64);
        assert_eq!(identity(&d).expect("again"), id, "stable across restarts");
        assert_eq!(
            std::fs::metadata(d.join(IDENTITY)).expect("meta").mode() & 0o777,
            0o600
        );
    }

    /// An identity kept from an earlier start that others may read (an older version's, or a
    /// work directory restored with wider modes) is made 0600 again at the next start: with it,
    /// another local user could speak for the node.
    #[test]
    fn a_kept_identity_open_to_others_is_made_private_again() {
        let dir = scratch("reopen");
        let d = dir.join("agent-a");
        prepare(&d).expect("prepare");
        let id = identity(&d).expect("identity");
        let path = d.join(IDENTITY);
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).expect("chmod");
        assert_eq!(identity(&d).expect("kept"), id);
        let mode = std::fs::metadata(&path).expect("meta").mode() & 0o777;
        assert_eq!(mode, 0o600, "the identity is still {mode:o}");
    }

    #[test]
    fn a_shared_work_directory_lets_others_pass_and_closes_what_it_holds() {
        let dir = scratch("shared");
        let parent = dir.join("new");
        let work = parent.join("work");
        prepare_for(&work, true).expect("prepare");
        let mode = |p: &Path| std::fs::metadata(p).expect("meta").mode() & 0o7777;
        assert_eq!((mode(&parent), mode(&work)), (0o711, 0o711));
        // What an agent without the setting left open is closed, but for the accounts' area.
        for d in ["job-1", "wf/3", "users"] {
            std::fs::create_dir_all(work.join(d)).expect("dir");
            std::fs::set_permissions(work.join(d), std::fs::Permissions::from_mode(0o755))
                .expect("chmod");
        }
        std::fs::set_permissions(work.join("wf"), std::fs::Permissions::from_mode(0o755))
            .expect("chmod");
        std::fs::write(work.join("file"), "x").expect("file");
        std::fs::set_permissions(work.join("file"), std::fs::Permissions::from_mode(0o644))
            .expect("chmod");
        std::fs::create_dir_all(work.join("wf/3/t-0")).expect("instance");
        std::fs::set_permissions(
            work.join("wf/3/t-0"),
            std::fs::Permissions::from_mode(0o755),
        )
        .expect("chmod");
        prepare_for(&work, true).expect("again");
        assert_eq!(mode(&work.join("job-1")), 0o700);
        // Passed through to the accounts' instances; the agent's own are closed.
        assert_eq!(mode(&work.join("wf")), 0o711);
        assert_eq!(mode(&work.join("wf/3")), 0o711);
        assert_eq!(mode(&work.join("wf/3/t-0")), 0o700);
        assert_eq!(mode(&work.join("file")), 0o600);
        assert_eq!(
            mode(&work.join("users")),
            0o755,
            "the area is run_as's to keep"
        );
        // Without the setting, private again.
        prepare(&work).expect("private");
        assert_eq!(mode(&work), 0o700);
    }

    #[test]
    fn a_symlinked_work_directory_is_refused() {
        let d = scratch("link");
        let real = d.join("real");
        std::fs::create_dir_all(&real).expect("real");
        let link = d.join("agent-x");
        std::os::unix::fs::symlink(&real, &link).expect("symlink");
        let e = prepare(&link).expect_err("refused");
        assert!(e.to_string().contains("symbolic link"), "{e}");
    }

    #[test]
    fn the_default_is_private_to_the_user_never_tmp() {
        assert_eq!(
            default_dir("n", 0, None, Some("/root")),
            Some(PathBuf::from("/var/lib/hetsched/agent-n"))
        );
        assert_eq!(
            default_dir("n", 1000, Some("/s"), Some("/home/u")),
            Some(PathBuf::from("/s/hetsched/agent-n"))
        );
        assert_eq!(
            default_dir("n", 1000, None, Some("/home/u")),
            Some(PathBuf::from("/home/u/.local/state/hetsched/agent-n"))
        );
        assert_eq!(default_dir("n", 1000, Some("rel"), None), None);
    }
}
