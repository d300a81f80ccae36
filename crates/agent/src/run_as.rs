//! Tasks run as their owner's Unix account (`run_as_owner`, `hetsched agent --run-as-owner`).
//!
//! The server names each task's and divisible chunk's owner (`TaskSpec.run_as`,
//! `ChunkOrder.run_as`): a hetsched user's name, which is its Unix account on the nodes (as in
//! Slurm), or empty for the admin's work. An agent started with `run_as_owner` (it must run as
//! root: [`check_agent`]) runs a user's work as that account and the admin's as itself; without
//! the setting every task runs as the agent's own user, whatever it names.
//!
//! Everything that depends on the account is here, for every spawner ([`crate::launch`],
//! [`crate::divisible`], [`crate::stream_workers`], the accelerator pipeline through `launch`):
//!
//! - [`resolve`] looks the account up on this node (`getpwnam`, `getgrouplist`) and refuses a
//!   name that is not a hetsched user's, an account that does not exist here and one with uid 0:
//!   a user's task never runs as root. Each refusal names the node and the account.
//! - [`hop`] runs the code that opens the task's own files and spawns its process on a fresh
//!   thread that has *become* the account, irreversibly: supplementary groups, then group,
//!   then user (real, effective and saved), through Linux's per-thread credentials
//!   (`rustix::thread`). The child inherits the thread's credentials, and files the thread opens
//!   are opened with exactly the account's rights — its `stdout = "…"` file cannot truncate a
//!   file the user could not, and it is created owned by the account. No `unsafe` `pre_exec` is
//!   needed (the workspace forbids `unsafe`; std's `Command::uid` would drop the supplementary
//!   groups, and `Command::groups` is not stable). The thread then ends: nothing else ever runs
//!   on it. (A credential change marks the agent's process not dumpable; it runs as root anyway.)
//! - [`area`]: `WORK_DIR/users/NAME`, the account's own directory (0700, its own) below
//!   `WORK_DIR/users` (root's, 0711): a multi-node task's node file, a divisible chunk's input
//!   and the directory a task runs in when its `workdir` is not on this node. So that the account
//!   can reach it, the work directory is 0711 ([`crate::workdir::prepare_for`]), and the agent
//!   creates everything else in it private ([`keep_files_private`]: umask 077; [`hop`] gives
//!   the tasks the agent's original umask back).
//! - [`Account::of_uid`]: the account a file the agent follows belongs to (the pointer to a
//!   user's `stdout` file, [`crate::logs`]; a workflow instance's directory, given to its account
//!   once its inputs are in, [`crate::dataflow`]): the agent opens such files as their owner,
//!   never as root, so a user cannot make it read what the user could not.
//!
//! Stream-topology workers run as their topology's owner too (`WorkerAssignment.run_as`,
//! [`crate::stream_workers`]), and so do accelerator tasks offloaded from an NNode to an ANode
//! ([`crate::accel`]): the NNode reads the task's inputs and writes its outputs as the account
//! ([`open_as`], [`create_as`]), and the ANode stages them in the account's directory and runs
//! the task there as the account.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// The directory below the work directory that holds one directory per account ([`area`]).
pub const AREA: &str = "users";

/// The `PATH` of an account's processes (Debian's default for users): not the agent's, root's.
pub const ACCOUNT_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// A Unix account tasks run as.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Account {
    /// Its name (a hetsched user's).
    pub name: String,
    /// User id (never 0).
    pub uid: u32,
    /// Primary group.
    pub gid: u32,
    /// Supplementary groups (`getgrouplist`, the primary group included).
    pub groups: Vec<u32>,
    /// Home directory (`HOME`).
    pub home: PathBuf,
}

/// Why a task cannot run as its owner (a start failure), or the agent cannot switch.
#[derive(Debug, thiserror::Error)]
pub enum RunAsError {
    /// `run_as_owner` in an agent that is not root.
    #[error("`run_as_owner` needs the agent to run as root (it runs as uid {0})")]
    NotRoot(u32),
    /// A directory above the work directory that other users cannot pass through.
    #[error(
        "`run_as_owner`: other users cannot pass through {dir} (mode {mode:o}), so tasks running \
         as their owners could not reach their directories in the work directory; give the agent \
         a work directory they can reach (e.g. below /var/lib/hetsched)"
    )]
    Unreachable {
        /// The directory.
        dir: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
    /// The owner's name is not a hetsched user name (a server that should not have sent it).
    #[error("node {node}: `{name}` is not a user name (1 to 32 of a-z 0-9 . _ -, from a letter)")]
    BadName {
        /// This node.
        node: String,
        /// The name.
        name: String,
    },
    /// No such account on this node.
    #[error(
        "node {node}: no Unix account `{name}` to run the task of hetsched user `{name}` as \
         (run_as_owner: each user needs an account of its name on the nodes)"
    )]
    NoAccount {
        /// This node.
        node: String,
        /// The account.
        name: String,
    },
    /// The account is root.
    #[error("node {node}: account `{name}` is uid 0 (root): a user's task never runs as root")]
    Root {
        /// This node.
        node: String,
        /// The account.
        name: String,
    },
    /// The account database could not be read.
    #[error("node {node}: looking up account `{name}`: {message}")]
    Lookup {
        /// This node.
        node: String,
        /// The account.
        name: String,
        /// What failed.
        message: String,
    },
    /// No account has this uid (the owner of a file the agent follows).
    #[error("no Unix account has uid {0}")]
    UnknownUid(u32),
    /// The thread could not become the account.
    #[error("cannot switch to account `{name}`: {source}")]
    Switch {
        /// The account (empty: the agent's own, when only the umask changes).
        name: String,
        /// The kernel's answer.
        source: std::io::Error,
    },
}

/// Whether `name` is a hetsched user name: `[a-z][a-z0-9._-]{0,31}` (a valid POSIX account name).
pub fn is_user_name(name: &str) -> bool {
    let mut chars = name.chars();
    name.len() <= 32
        && chars.next().is_some_and(|c| c.is_ascii_lowercase())
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "._-".contains(c))
}

impl Account {
    /// Looks up account `name` on this node (`node` names it in errors); blocking (NSS).
    pub fn lookup(node: &str, name: &str) -> Result<Account, RunAsError> {
        use nix::unistd::User;
        if !is_user_name(name) {
            return Err(RunAsError::BadName {
                node: node.into(),
                name: name.into(),
            });
        }
        let lookup = |message: String| RunAsError::Lookup {
            node: node.into(),
            name: name.into(),
            message,
        };
        let user = User::from_name(name)
            .map_err(|e| lookup(e.to_string()))?
            .ok_or_else(|| RunAsError::NoAccount {
                node: node.into(),
                name: name.into(),
            })?;
        if user.uid.is_root() {
            return Err(RunAsError::Root {
                node: node.into(),
                name: name.into(),
            });
        }
        Self::of_user(user).map_err(lookup)
    }

    /// The account whose uid is `uid`; blocking (NSS).
    pub fn of_uid(uid: u32) -> Result<Account, RunAsError> {
        use nix::unistd::{Uid, User};
        match User::from_uid(Uid::from_raw(uid)) {
            Ok(Some(user)) if uid != 0 => {
                Self::of_user(user).map_err(|message| RunAsError::Lookup {
                    node: "this node".into(),
                    name: format!("uid {uid}"),
                    message,
                })
            }
            _ => Err(RunAsError::UnknownUid(uid)),
        }
    }

    fn of_user(user: nix::unistd::User) -> Result<Account, String> {
        let (uid, gid) = (user.uid.as_raw(), user.gid.as_raw());
        // -1 is no id (the kernel's "leave unchanged").
        if uid == u32::MAX || gid == u32::MAX {
            return Err(format!("invalid uid {uid} or gid {gid}"));
        }
        let c_name = std::ffi::CString::new(user.name.clone()).map_err(|e| e.to_string())?;
        let groups = nix::unistd::getgrouplist(&c_name, user.gid)
            .map_err(|e| format!("its groups: {e}"))?
            .into_iter()
            .map(|g| g.as_raw())
            .filter(|&g| g != u32::MAX)
            .collect();
        Ok(Account {
            name: user.name,
            uid,
            gid,
            groups,
            home: user.dir,
        })
    }

    /// The whole environment a process of the account starts from (the job's own `env` and the
    /// `HETSCHED_*` variables are set after it, and win): `HOME`, `USER` and `LOGNAME` of the
    /// account, `PATH` = [`ACCOUNT_PATH`], and the agent's locale and time zone (`LANG`,
    /// `LANGUAGE`, `LC_*`, `TZ`). Nothing else of the agent's environment: the agent runs as root,
    /// and its environment (a service's secrets, root's `PATH`) is not the user's to read. The
    /// caller clears the command's environment first ([`Account::environment`]).
    pub fn env(&self) -> Vec<(OsString, OsString)> {
        let mut env: Vec<(OsString, OsString)> = std::env::vars_os()
            .filter(|(k, _)| {
                let k = k.to_string_lossy();
                matches!(k.as_ref(), "LANG" | "LANGUAGE" | "TZ") || k.starts_with("LC_")
            })
            .collect();
        env.extend([
            ("HOME".into(), self.home.clone().into_os_string()),
            ("USER".into(), OsString::from(&self.name)),
            ("LOGNAME".into(), OsString::from(&self.name)),
            ("PATH".into(), OsString::from(ACCOUNT_PATH)),
        ]);
        env
    }

    /// Replaces `cmd`'s environment by the account's ([`Account::env`]).
    pub fn environment(&self, cmd: &mut tokio::process::Command) {
        cmd.env_clear().envs(self.env());
    }

    /// Makes the calling thread this account, with no way back: groups, group, user.
    fn become_it(&self) -> std::io::Result<()> {
        use rustix::process::{Gid, Uid};
        use rustix::thread::{set_thread_groups, set_thread_res_gid, set_thread_res_uid};
        let groups: Vec<Gid> = self.groups.iter().map(|&g| Gid::from_raw(g)).collect();
        set_thread_groups(&groups)?;
        let gid = Gid::from_raw(self.gid);
        set_thread_res_gid(gid, gid, gid)?;
        let uid = Uid::from_raw(self.uid);
        set_thread_res_uid(uid, uid, uid)?;
        // A thread that could become root again must run nothing of the user's.
        let regained = rustix::thread::set_thread_uid(Uid::ROOT).is_ok();
        if regained
            || rustix::process::getuid() != uid
            || rustix::process::geteuid() != uid
            || rustix::process::getegid() != gid
        {
            return Err(std::io::Error::other(
                "the thread's credentials did not change as asked",
            ));
        }
        Ok(())
    }

    /// Gives `file` (opened by the agent) to the account: owner and primary group.
    pub fn give(&self, file: &std::fs::File) -> std::io::Result<()> {
        std::os::unix::fs::fchown(file, Some(self.uid), Some(self.gid))
    }
}

/// Refuses `run_as_owner` in an agent that is not root, or whose work directory (absolute)
/// other users cannot reach.
pub fn check_agent(work_dir: &Path) -> Result<(), RunAsError> {
    use std::os::unix::fs::PermissionsExt;
    let euid = crate::workdir::euid();
    if euid != 0 {
        return Err(RunAsError::NotRoot(euid));
    }
    for dir in work_dir.ancestors().skip(1) {
        if let Ok(m) = std::fs::metadata(dir) {
            let mode = m.permissions().mode() & 0o7777;
            if mode & 0o001 == 0 {
                return Err(RunAsError::Unreachable {
                    dir: dir.to_path_buf(),
                    mode,
                });
            }
        }
    }
    Ok(())
}

/// The agent's umask before [`keep_files_private`]: what tasks get back ([`hop`]).
static TASK_UMASK: OnceLock<nix::sys::stat::Mode> = OnceLock::new();

/// Makes every file and directory the agent creates private to it from now on (umask 077):
/// with `run_as_owner` its work directory is open for other users to pass through to their
/// [`area`]s, so nothing else in it may be open. Tasks get the original umask back ([`hop`]).
pub fn keep_files_private() {
    use nix::sys::stat::{Mode, umask};
    let old = umask(Mode::from_bits_truncate(0o077));
    // Set before (another agent in this process): the first original stays.
    let _ = TASK_UMASK.set(old);
}

/// Looks up the account a task or chunk runs as on this agent: none when `run_as_owner` is off
/// or `run_as` is empty (the admin's work runs as the agent's own user), else `run_as`'s
/// account, or a refusal naming `node` and it.
pub async fn resolve(
    run_as_owner: bool,
    run_as: &str,
    node: &str,
) -> Result<Option<Account>, RunAsError> {
    if !run_as_owner || run_as.is_empty() {
        return Ok(None);
    }
    let (node, name) = (node.to_string(), run_as.to_string());
    let (n, m) = (node.clone(), name.clone());
    tokio::task::spawn_blocking(move || Account::lookup(&n, &m))
        .await
        .unwrap_or_else(|e| {
            Err(RunAsError::Lookup {
                node,
                name,
                message: e.to_string(),
            })
        })
        .map(Some)
}

/// Runs `f` on a thread of its own that has become `account` (when given) and has the tasks'
/// umask (after [`keep_files_private`]), and returns its result. The thread ends with `f`;
/// it has the caller's Tokio runtime, if any (to spawn a `tokio::process::Command`). Blocks
/// the caller for as long as `f` runs (as spawning a process does).
pub fn hop<T: Send>(
    account: Option<&Account>,
    f: impl FnOnce() -> T + Send,
) -> Result<T, RunAsError> {
    let runtime = tokio::runtime::Handle::try_current().ok();
    let switch = |source| RunAsError::Switch {
        name: account.map(|a| a.name.clone()).unwrap_or_default(),
        source,
    };
    std::thread::scope(|s| {
        let thread = s.spawn(|| {
            let _entered = runtime.as_ref().map(tokio::runtime::Handle::enter);
            if let Some(&mask) = TASK_UMASK.get() {
                // This thread's own umask (and working directory), not the agent's.
                nix::sched::unshare(nix::sched::CloneFlags::CLONE_FS)
                    .map_err(|e| switch(std::io::Error::from(e)))?;
                nix::sys::stat::umask(mask);
            }
            if let Some(a) = account {
                a.become_it().map_err(switch)?;
            }
            Ok(f())
        });
        match thread.join() {
            Ok(r) => r,
            Err(panic) => std::panic::resume_unwind(panic),
        }
    })
}

/// Opens `path` for reading as `account` (when given), so with the account's rights: a file a
/// user names (an offloaded task's input) is never read with root's. A regular file only,
/// through a link the account may follow ([`crate::workdir::open_regular`]): a FIFO the user
/// put there would block the read for good.
pub fn open_as(account: Option<&Account>, path: &Path) -> std::io::Result<std::fs::File> {
    let open = || crate::workdir::open_regular(path, true);
    match account {
        None => open(),
        Some(a) => hop(Some(a), open).map_err(std::io::Error::other)?,
    }
}

/// Whether `path` is a directory, looked up as `account` (when given): a path a user names (a
/// task's `workdir`) is never looked at with root's rights, so that whether the agent finds a
/// directory there, itself or through a link the user planted, tells the user nothing about
/// where the user could not look. Links are followed, as the account: a `workdir` that is a
/// link to a directory the user may reach is the user's to run in (`chdir` follows it too).
pub fn is_dir_as(account: Option<&Account>, path: &Path) -> bool {
    match account {
        None => path.is_dir(),
        Some(a) => hop(Some(a), || path.is_dir()).unwrap_or(false),
    }
}

/// Creates (or truncates) `path`, with its missing parent directories, as `account` (when
/// given): they are the account's, and a link the account planted leads nowhere the account
/// could not write itself. A regular file or a device only
/// ([`crate::workdir::create_users`]): a FIFO there would block the open for good.
pub fn create_as(account: Option<&Account>, path: &Path) -> std::io::Result<std::fs::File> {
    let create = || {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        crate::workdir::create_users(path)
    };
    match account {
        None => create(),
        Some(a) => hop(Some(a), create).map_err(std::io::Error::other)?,
    }
}

/// The account's own directory, `WORK_DIR/users/NAME` (0700, the account's), created if
/// missing, below `WORK_DIR/users` (0711, the agent's).
pub fn area(work_dir: &Path, account: &Account) -> std::io::Result<PathBuf> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
    let mkdir = |dir: &Path, mode: u32| match std::fs::DirBuilder::new().mode(mode).create(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        r => r,
    };
    let real_dir = |dir: &Path| {
        let m = std::fs::symlink_metadata(dir)?;
        if m.is_dir() {
            Ok(m)
        } else {
            Err(std::io::Error::other(format!(
                "{} is not a directory",
                dir.display()
            )))
        }
    };
    let users = work_dir.join(AREA);
    mkdir(&users, 0o711)?;
    let m = real_dir(&users)?;
    if m.uid() != crate::workdir::euid() {
        return Err(std::io::Error::other(format!(
            "{} belongs to uid {}, not to the agent",
            users.display(),
            m.uid()
        )));
    }
    if m.mode() & 0o7777 != 0o711 {
        std::fs::set_permissions(&users, std::fs::Permissions::from_mode(0o711))?;
    }
    // The name is a user name (no `/`, no `.` first): one component. Only the agent writes in
    // `users`, so what is there is what it made.
    let dir = users.join(&account.name);
    mkdir(&dir, 0o700)?;
    let m = real_dir(&dir)?;
    if (m.uid(), m.gid()) != (account.uid, account.gid) {
        std::os::unix::fs::lchown(&dir, Some(account.uid), Some(account.gid))?;
    }
    Ok(dir)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use hetsched_core::testkit::ScratchDir;

    /// Whether this process is root (the tests that switch accounts need it; CI runs as root).
    pub(crate) fn root() -> bool {
        let root = crate::workdir::euid() == 0;
        if !root {
            eprintln!("skipped: needs root");
        }
        root
    }

    #[test]
    fn user_names_are_hetsched_names() {
        for good in ["alice", "nobody", "a", "b0b.x_y-z", &"a".repeat(32)] {
            assert!(is_user_name(good), "{good}");
        }
        for bad in [
            "",
            "Alice",
            "0day",
            "-x",
            ".x",
            "a/b",
            "a b",
            &"a".repeat(33),
            "é",
        ] {
            assert!(!is_user_name(bad), "{bad}");
        }
    }

    #[test]
    fn unknown_root_and_bad_accounts_are_refused_naming_the_node() {
        let e = Account::lookup("n1", "no-such-user-x").expect_err("no such account");
        assert!(matches!(e, RunAsError::NoAccount { .. }), "{e}");
        assert!(
            e.to_string()
                .starts_with("node n1: no Unix account `no-such-user-x`"),
            "{e}"
        );
        let e = Account::lookup("n1", "root").expect_err("root");
        assert_eq!(
            e.to_string(),
            "node n1: account `root` is uid 0 (root): a user's task never runs as root"
        );
        let e = Account::lookup("n1", "../etc").expect_err("bad");
        assert!(matches!(e, RunAsError::BadName { .. }), "{e}");
        let nobody = Account::lookup("n1", "nobody").expect("Debian's nobody");
        assert_eq!(nobody.uid, 65534);
        assert!(nobody.groups.contains(&nobody.gid), "{nobody:?}");
        assert_eq!(Account::of_uid(65534).expect("by uid").name, "nobody");
        assert!(matches!(Account::of_uid(0), Err(RunAsError::UnknownUid(0))));
    }

    #[tokio::test]
    async fn resolving_is_off_without_the_setting_or_an_owner() {
        assert_eq!(resolve(false, "nobody", "n").await.expect("off"), None);
        assert_eq!(resolve(true, "", "n").await.expect("admin"), None);
        let a = resolve(true, "nobody", "n").await.expect("nobody");
        assert_eq!(a.map(|a| a.uid), Some(65534));
    }

    #[test]
    fn a_hop_becomes_the_account_for_good_and_leaves_the_caller_as_it_was() {
        if !root() {
            return;
        }
        let nobody = Account::lookup("n", "nobody").expect("nobody");
        let (uid, euid, gid, groups, back) = hop(Some(&nobody), || {
            (
                rustix::process::getuid().as_raw(),
                rustix::process::geteuid().as_raw(),
                rustix::process::getegid().as_raw(),
                rustix::process::getgroups()
                    .expect("groups")
                    .iter()
                    .map(|g| g.as_raw())
                    .collect::<Vec<_>>(),
                rustix::thread::set_thread_uid(rustix::process::Uid::ROOT).is_ok(),
            )
        })
        .expect("hop");
        assert_eq!((uid, euid, gid), (65534, 65534, nobody.gid));
        assert_eq!(groups, nobody.groups);
        assert!(!back, "the thread could become root again");
        assert_eq!(crate::workdir::euid(), 0, "the caller is still root");
        // A file root only may read is out of the account's reach.
        let dir = ScratchDir::new("run-as", "secret");
        let secret = dir.join("secret");
        std::fs::write(&secret, "x").expect("write");
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).expect("chmod");
        let read = hop(Some(&nobody), || std::fs::read(&secret)).expect("hop");
        assert_eq!(
            read.expect_err("root's 0600 file").kind(),
            std::io::ErrorKind::PermissionDenied
        );
    }

    #[test]
    fn the_area_is_the_accounts_below_a_directory_of_the_agents() {
        use std::os::unix::fs::MetadataExt;
        if !root() {
            return;
        }
        let dir = ScratchDir::new("run-as", "area");
        let nobody = Account::lookup("n", "nobody").expect("nobody");
        let area = area(&dir, &nobody).expect("area");
        assert_eq!(area, dir.join("users/nobody"));
        let users = std::fs::metadata(dir.join("users")).expect("users");
        assert_eq!((users.uid(), users.mode() & 0o7777), (0, 0o711));
        let m = std::fs::metadata(&area).expect("area");
        assert_eq!(
            (m.uid(), m.gid(), m.mode() & 0o777),
            (65534, nobody.gid, 0o700)
        );
        // Again: as it was.
        assert_eq!(super::area(&dir, &nobody).expect("again"), area);
    }

    #[test]
    fn the_agent_must_be_root_and_reachable() {
        if crate::workdir::euid() != 0 {
            let e = check_agent(Path::new("/var/lib/x")).expect_err("not root");
            assert!(
                e.to_string()
                    .starts_with("`run_as_owner` needs the agent to run as root (it runs as uid"),
                "{e}"
            );
            return;
        }
        let dir = ScratchDir::new("run-as", "reach");
        std::fs::create_dir_all(dir.join("closed/work")).expect("dirs");
        check_agent(&dir.join("closed/work")).expect("reachable");
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(dir.join("closed"), std::fs::Permissions::from_mode(0o700))
            .expect("chmod");
        let e = check_agent(&dir.join("closed/work")).expect_err("closed");
        assert!(e.to_string().contains("(mode 700)"), "{e}");
    }
}
