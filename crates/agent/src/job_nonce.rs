//! Which incarnation of a job id a job directory belongs to.
//!
//! Job ids repeat: a server restored from a backup hands out again the ids that followed it,
//! and one on a fresh data directory starts at 1 — while this agent keeps the directories of
//! jobs its server does not know ([`crate::sweep`] deletes only what its server purged). So
//! every assignment, divisible chunk order, log read and workflow fetch carries its job's
//! nonce: 64 random bits the server drew when it accepted the job (0: a job stored before
//! nonces, or a server that predates them).
//!
//! Before a task or chunk writes anything, the agent claims its job's directory for the nonce
//! ([`claim`]: `WORK_DIR/job-J` for every task's captured output, `WORK_DIR/wf/J` for a
//! workflow instance's data, `WORK_DIR/divisible/job-J` for a chunk's): a directory marked
//! with another nonce — no mark reads as 0 — is moved aside, whole, into `WORK_DIR/stale/`
//! (not deleted at once: only the server that ran a job decides that its files may go, and
//! which server that was is unknown here — it may be the one a restore replaced, and come
//! back), and the directory made again is marked with this nonce ([`MARK`]; none for 0). So a
//! new job never writes beside, or reads, an older job's files. What was set aside is deleted
//! once it has been there `stale_keep` ([`DEFAULT_STALE_KEEP`], `--stale-keep`; `never`
//! keeps it): [`remove_stale`], at the agent's start and every hour after, so a node whose
//! server is restored now and then does not fill its disk with files no server can reach.
//!
//! The log listener ([`crate::logs`]) and the workflow data service ([`crate::dataflow`])
//! serve a file only from a directory marked with exactly the nonce the request names — and the
//! server's ticket covers — ([`serves`]): a read with a nonce never opens an unmarked or
//! otherwise marked directory, and a legacy read (0) only an unmarked one, which is all an
//! agent that predates nonces wrote.

use std::io::Read;
use std::path::{Path, PathBuf};

/// The mark's file name in a job directory: the nonce in 16 hexadecimal digits. Never a task's
/// file's name (an application's name that starts with `.` is written `_.`:
/// [`crate::launch::component`]), nor an instance's (`TASK-I`).
pub const MARK: &str = ".job-nonce";

/// Where directories of other incarnations go, below the work directory.
pub const STALE: &str = "stale";

/// How long what was set aside into `stale/` is kept unless the agent is told otherwise
/// (`stale_keep`, `--stale-keep`): a week — time to notice a mistaken restore and restore back,
/// short enough that repeated restores do not fill the node's disk.
pub const DEFAULT_STALE_KEEP: std::time::Duration = std::time::Duration::from_secs(7 * 24 * 3600);

/// When the entry of `stale/` named `name` was set aside (ns since the epoch), if
/// [`set_aside`] named it (`wf-7.1718000000000000000`, `job-1.1718000000000000000-2`); None for
/// anything else, which [`remove_stale`] leaves alone.
fn set_aside_at(name: &str) -> Option<u64> {
    let (head, tail) = name.rsplit_once('.')?;
    let nanos = match tail.split_once('-') {
        Some((t, n)) if !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) => t,
        Some(_) => return None,
        None => tail,
    };
    if head.is_empty() || nanos.is_empty() || !nanos.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    nanos.parse().ok()
}

/// Deletes what [`set_aside`] moved into `WORK_DIR/stale/` at least `keep` before `now_ns`
/// (by the time in its name, not its files' times: a job's old files may be years old when
/// they are set aside). Entries not named by [`set_aside`] are left alone: they are an
/// operator's. Returns the paths deleted; a failure to delete one is logged and the rest go on.
pub fn remove_stale(work_dir: &Path, keep: std::time::Duration, now_ns: u64) -> Vec<PathBuf> {
    let stale = work_dir.join(STALE);
    let Ok(entries) = std::fs::read_dir(&stale) else {
        return Vec::new();
    };
    let cutoff = now_ns.saturating_sub(u64::try_from(keep.as_nanos()).unwrap_or(u64::MAX));
    let mut removed = Vec::new();
    for entry in entries.flatten() {
        let Some(at) = entry.file_name().to_str().and_then(set_aside_at) else {
            continue;
        };
        if at > cutoff {
            continue;
        }
        let path = entry.path();
        // A link set aside is removed, never followed; a directory's links inside are not
        // followed by `remove_dir_all` either.
        let gone = match entry.file_type() {
            Ok(t) if t.is_dir() => std::fs::remove_dir_all(&path),
            Ok(_) => std::fs::remove_file(&path),
            Err(e) => Err(e),
        };
        match gone {
            Ok(()) => removed.push(path),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => tracing::warn!(
                path = %path.display(),
                "cannot delete a job directory set aside in stale/: {e}"
            ),
        }
    }
    removed
}

/// The nonce `dir` is marked with: 0 when it has no mark (an agent that predates nonces, or a
/// job without one), or does not exist. An error: a mark that cannot be read or is malformed
/// (it is nobody's).
pub fn read(dir: &Path) -> std::io::Result<u64> {
    let f = match crate::workdir::open_no_follow(&dir.join(MARK), false) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(e),
    };
    let mut text = String::new();
    f.take(64).read_to_string(&mut text)?;
    let digits = text.trim_end_matches('\n');
    match u64::from_str_radix(digits, 16) {
        Ok(n) if digits.len() == 16 && n != 0 => Ok(n),
        _ => Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("{}: not a job nonce", dir.join(MARK).display()),
        )),
    }
}

/// Whether the files in job directory `dir` may be served to a read naming `nonce`: its mark
/// is exactly `nonce` (no mark is 0's; a mark that cannot be read serves nobody).
pub fn serves(dir: &Path, nonce: u64) -> bool {
    read(dir).is_ok_and(|mark| mark == nonce)
}

/// Claims are made one at a time: two tasks of a new job starting together must not both
/// find the old directory and move aside what the other has just marked.
static CLAIMS: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Makes `dir` (a job's directory below `work_dir`) the directory of the job incarnation
/// `nonce`: kept when it is marked so already (no mark for 0), else moved aside into
/// `WORK_DIR/stale/` (the module's doc) and made again (mode 0700), marked with `nonce`.
/// Returns where an older incarnation's directory went, if one did.
pub fn claim(work_dir: &Path, dir: &Path, nonce: u64) -> std::io::Result<Option<PathBuf>> {
    claim_making(work_dir, dir, nonce, &[])
}

/// [`claim`] for a job's directory of captured task output (`WORK_DIR/job-J`): when it is made,
/// it is made with the records of which attempts ran here ([`crate::ran::DIR`]), so that a
/// missing capture file there is told apart from a task that printed nothing. A directory kept
/// as it was (already this nonce's) keeps what it had: one made by an older agent, without
/// records, is read by the older rule.
pub fn claim_task_dir(work_dir: &Path, dir: &Path, nonce: u64) -> std::io::Result<Option<PathBuf>> {
    claim_making(work_dir, dir, nonce, &[crate::ran::DIR])
}

/// [`claim`], making the directories `inside` in `dir` when `dir` is made.
fn claim_making(
    work_dir: &Path,
    dir: &Path,
    nonce: u64,
    inside: &[&str],
) -> std::io::Result<Option<PathBuf>> {
    let _one_at_a_time = CLAIMS.lock().unwrap_or_else(|p| p.into_inner());
    let mut moved = None;
    match std::fs::symlink_metadata(dir) {
        Ok(m) if m.is_dir() && read(dir).is_ok_and(|mark| mark == nonce) => return Ok(None),
        // Another incarnation's (or what is no directory: a link is moved, not followed).
        Ok(_) => moved = Some(set_aside(work_dir, dir)?),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    crate::workdir::create_private_dir(dir)?;
    for d in inside {
        crate::workdir::create_private_dir(&dir.join(d))?;
    }
    if nonce != 0 {
        use std::io::Write;
        let mut f = crate::workdir::create_private(&dir.join(MARK))?;
        writeln!(f, "{nonce:016x}")?;
    }
    Ok(moved)
}

/// Moves `dir` into `WORK_DIR/stale/`, under its path below `work_dir` (`/` as `-`) and the
/// time: `stale/wf-7.1718000000000000000`.
fn set_aside(work_dir: &Path, dir: &Path) -> std::io::Result<PathBuf> {
    let stale = work_dir.join(STALE);
    crate::workdir::create_private_dir(&stale)?;
    let name = dir
        .strip_prefix(work_dir)
        .unwrap_or(dir)
        .to_string_lossy()
        .trim_matches('/')
        .replace('/', "-");
    let mut to = stale.join(format!("{name}.{}", crate::launch::now_ns()));
    // Two set aside within one clock tick.
    let mut n = 0;
    while std::fs::symlink_metadata(&to).is_ok() {
        n += 1;
        to = stale.join(format!("{name}.{}-{n}", crate::launch::now_ns()));
    }
    std::fs::rename(dir, &to)?;
    tracing::info!(
        from = %dir.display(),
        to = %to.display(),
        "a job directory of another incarnation of its job id (a server restored from a \
         backup, or on another data directory) was set aside"
    );
    Ok(to)
}

#[cfg(test)]
mod tests {
    use super::*;
    use hetsched_core::testkit::ScratchDir;

    /// The check the log listener and the data service make: a directory serves a read only
    /// when its mark is exactly the read's nonce. A legacy read (0) reads an unmarked directory
    /// (all an agent before nonces wrote) and no marked one; a read with a nonce never reads an
    /// unmarked, otherwise marked or malformed one.
    #[test]
    fn a_directory_serves_only_the_nonce_it_is_marked_with() {
        let work = ScratchDir::new("nonce", "serves");
        let dir = work.join("job-1");
        std::fs::create_dir_all(&dir).expect("dir");
        // Unmarked (legacy): 0 only.
        assert_eq!(read(&dir).expect("read"), 0);
        assert!(serves(&dir, 0));
        assert!(!serves(&dir, 0xfeed));
        // Marked: that nonce only.
        std::fs::write(dir.join(MARK), "000000000000feed\n").expect("mark");
        assert!(serves(&dir, 0xfeed));
        assert!(!serves(&dir, 0xbeef), "another incarnation");
        assert!(!serves(&dir, 0), "a legacy read");
        // A mark that is no nonce serves nobody.
        for bad in ["", "feed\n", "0000000000000000\n", "zzzzzzzzzzzzzzzz\n"] {
            std::fs::write(dir.join(MARK), bad).expect("mark");
            assert!(!serves(&dir, 0) && !serves(&dir, 0xfeed), "{bad:?}");
        }
        // A link in the mark's place is not followed.
        std::fs::remove_file(dir.join(MARK)).expect("rm");
        let elsewhere = work.join("elsewhere");
        std::fs::write(&elsewhere, "000000000000feed\n").expect("write");
        std::os::unix::fs::symlink(&elsewhere, dir.join(MARK)).expect("link");
        assert!(!serves(&dir, 0xfeed) && !serves(&dir, 0));
        // A directory that is not there holds nothing to serve: the read finds no file.
        assert!(serves(&work.join("job-2"), 0));
    }

    /// A claim keeps a directory of its own incarnation, and moves one of another (marked
    /// otherwise, or unmarked for a job with a nonce) aside whole, into `stale/`, before
    /// marking a new one: the new job finds none of the old one's files.
    #[test]
    fn a_claim_moves_another_incarnations_directory_aside() {
        let work = ScratchDir::new("nonce", "claim");
        let dir = work.join("job-1");
        // An old agent's (or a legacy job's) directory, unmarked, with its output.
        std::fs::create_dir_all(&dir).expect("dir");
        std::fs::write(dir.join("sh-0.1.out"), "DAVE-SECRET\n").expect("out");
        assert_eq!(
            claim(&work, &dir, 0).expect("claim"),
            None,
            "legacy keeps legacy"
        );
        assert!(dir.join("sh-0.1.out").exists());
        // A job with a nonce: the unmarked directory goes aside.
        let moved = claim(&work, &dir, 0xa).expect("claim").expect("moved");
        assert!(moved.starts_with(work.join(STALE)), "{}", moved.display());
        assert_eq!(
            std::fs::read_to_string(moved.join("sh-0.1.out")).expect("kept"),
            "DAVE-SECRET\n"
        );
        assert!(!dir.join("sh-0.1.out").exists());
        assert!(serves(&dir, 0xa));
        std::fs::write(dir.join("sh-0.1.out"), "a\n").expect("out");
        // Its own again (another task of the job): kept as it is.
        assert_eq!(claim(&work, &dir, 0xa).expect("claim"), None);
        assert!(dir.join("sh-0.1.out").exists());
        // Another incarnation, and a legacy job after it: each gets a directory of its own.
        let second = claim(&work, &dir, 0xb).expect("claim").expect("moved");
        assert!(serves(&dir, 0xb) && !dir.join("sh-0.1.out").exists());
        let third = claim(&work, &dir, 0).expect("claim").expect("moved");
        assert!(serves(&dir, 0) && !dir.join(MARK).exists());
        assert!(moved != second && second != third);
        // Nested places are named by their path: `wf/7` as `wf-7`.
        let wf = work.join("wf").join("7");
        std::fs::create_dir_all(&wf).expect("wf");
        let aside = claim(&work, &wf, 0xc).expect("claim").expect("moved");
        let name = aside
            .file_name()
            .expect("name")
            .to_string_lossy()
            .into_owned();
        assert!(name.starts_with("wf-7."), "{name}");
    }

    /// What was set aside goes once it has been in `stale/` for `keep`, by the time in its
    /// name; an operator's own files there, and newer entries, stay.
    #[test]
    fn set_aside_directories_are_deleted_after_the_keep_and_others_stay() {
        let work = ScratchDir::new("nonce", "stale-keep");
        let dir = work.join("job-4");
        std::fs::create_dir_all(dir.join("sub")).expect("dir");
        std::fs::write(dir.join("sub").join("old.out"), "old\n").expect("out");
        let aside = claim(&work, &dir, 0xd).expect("claim").expect("moved");
        let at = set_aside_at(&aside.file_name().expect("name").to_string_lossy()).expect("named");
        let stale = work.join(STALE);
        std::fs::write(stale.join("notes.txt"), "the operator's\n").expect("notes");
        std::fs::create_dir_all(stale.join("job-9.1x")).expect("not ours");
        let day = std::time::Duration::from_secs(86_400);
        // Not yet a day old: kept.
        assert!(remove_stale(&work, day, at + day.as_nanos() as u64 - 1).is_empty());
        assert!(aside.join("sub").join("old.out").exists());
        // A day after it was set aside: gone, and only it.
        assert_eq!(
            remove_stale(&work, day, at + day.as_nanos() as u64),
            vec![aside.clone()]
        );
        assert!(!aside.exists());
        assert!(stale.join("notes.txt").exists() && stale.join("job-9.1x").exists());
        assert!(serves(&dir, 0xd), "the job's own directory is untouched");
        // The names set_aside gives, and others.
        assert_eq!(
            set_aside_at("wf-7.1718000000000000000"),
            Some(1_718_000_000_000_000_000)
        );
        assert_eq!(set_aside_at("job-1.55-2"), Some(55));
        for other in [
            "notes.txt",
            ".5",
            "job-1.",
            "job-1.5-",
            "job-1.5-x",
            "job-1",
        ] {
            assert_eq!(set_aside_at(other), None, "{other}");
        }
    }
}
