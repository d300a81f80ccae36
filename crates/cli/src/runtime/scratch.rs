//! The scratch directory of `hetsched demo` and `hetsched bench-dispatch`: their server's data
//! directory, their agents' work directories and their logs, in the system's temporary
//! directory.

use std::path::PathBuf;

/// A new directory for `prefix`'s run in the system's temporary directory,
/// `PREFIX-PID-RANDOM`: created here (never one found there, which another local user may have
/// made, with links in it to the runner's files), mode 0700. Its name says whose run it is and
/// cannot be guessed in advance.
pub fn dir(prefix: &str) -> std::io::Result<PathBuf> {
    use std::os::unix::fs::DirBuilderExt;
    let base = std::env::temp_dir();
    let mut last = None;
    for _ in 0..16 {
        let dir = base.join(format!(
            "{prefix}-{}-{:016x}",
            std::process::id(),
            rand::random::<u64>()
        ));
        match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
            Ok(()) => return Ok(dir),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => last = Some(e),
            Err(e) => return Err(e),
        }
    }
    Err(last.unwrap_or_else(|| std::io::Error::other("no free name")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{MetadataExt, PermissionsExt};

    /// The directory holds a server's tokens and every log of the run, and lies in a directory
    /// every local user writes to: it is made new, private (0700) and this user's, under a name
    /// nobody can guess — never one found there, which another user could have made (with a
    /// `server.log` linked to a file of the runner's, truncated when the run opens its log) or
    /// could make again between a removal and its creation.
    #[test]
    fn a_scratch_directory_is_new_private_and_unguessable() {
        let guessable =
            std::env::temp_dir().join(format!("hetsched-scratch-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&guessable);
        std::fs::create_dir_all(&guessable).expect("planted");
        std::fs::set_permissions(&guessable, std::fs::Permissions::from_mode(0o777))
            .expect("open to all");
        let target = guessable.with_extension("victim");
        std::fs::write(&target, "kept").expect("victim");
        std::os::unix::fs::symlink(&target, guessable.join("server.log")).expect("link");
        let a = dir("hetsched-scratch-test").expect("a");
        let b = dir("hetsched-scratch-test").expect("b");
        assert_ne!(a, guessable, "a name anyone could make in advance");
        assert_ne!(a, b, "each run its own");
        for d in [&a, &b] {
            let m = std::fs::symlink_metadata(d).expect("meta");
            assert!(m.is_dir());
            assert_eq!(
                m.mode() & 0o777,
                0o700,
                "{} is {:o}",
                d.display(),
                m.mode() & 0o777
            );
            assert_eq!(m.uid(), std::fs::metadata(&target).expect("ours").uid());
            assert_eq!(std::fs::read_dir(d).expect("list").count(), 0, "new, empty");
            assert!(
                d.file_name()
                    .expect("name")
                    .to_string_lossy()
                    .starts_with("hetsched-scratch-test-")
            );
        }
        assert_eq!(std::fs::read_to_string(&target).expect("victim"), "kept");
        for d in [&a, &b, &guessable] {
            let _ = std::fs::remove_dir_all(d);
        }
        let _ = std::fs::remove_file(&target);
    }
}
