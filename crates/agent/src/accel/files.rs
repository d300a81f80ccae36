//! Declared input and output files of an offloaded task: names (relative to the task's directory,
//! `{index}` replaced), and their transfer in chunks.
//!
//! A name must be a relative path of normal components (no `..`, no root, not empty), so a file
//! named by a job can never land outside the task's directory on the NNode or outside the
//! staging directory on the ANode, whatever the job file or the peer sends.

use hetsched_proto as pb;
use std::path::{Component, Path, PathBuf};
use tokio::io::AsyncReadExt;

/// Bytes per chunk on the wire.
pub const CHUNK: usize = 256 << 10;

/// `name` with `{index}` replaced, checked to be a relative path inside its directory.
pub fn resolve(name: &str, index: u32) -> Result<PathBuf, String> {
    let name = name.replace("{index}", &index.to_string());
    let path = PathBuf::from(&name);
    let ok = !name.is_empty()
        && path
            .components()
            .all(|c| matches!(c, Component::Normal(_) | Component::CurDir))
        && path.components().any(|c| matches!(c, Component::Normal(_)));
    if ok {
        Ok(path)
    } else {
        Err(format!(
            "`{name}` is not a relative path inside the task's directory"
        ))
    }
}

/// Sends `path` (read from `dir`, as `account` when given, a regular file only:
/// [`crate::run_as::open_as`]) as chunks of stream `stream` through `send`; an empty file is
/// one empty chunk. Returns false if `send` refused (the peer went away).
pub async fn send_file<F, Fut>(
    dir: &Path,
    name: &str,
    stream: u32,
    account: Option<&crate::run_as::Account>,
    mut send: F,
) -> std::io::Result<bool>
where
    F: FnMut(pb::FileChunk) -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let mut f = tokio::fs::File::from_std(crate::run_as::open_as(account, &dir.join(name))?);
    let mut first = true;
    loop {
        let mut buf = vec![0u8; CHUNK];
        let mut n = 0;
        while n < CHUNK {
            let k = f.read(&mut buf[n..]).await?;
            if k == 0 {
                break;
            }
            n += k;
        }
        buf.truncate(n);
        if n == 0 && !first {
            return Ok(true);
        }
        let last = n < CHUNK;
        if !send(pb::FileChunk {
            path: name.to_string(),
            data: buf,
            stream,
        })
        .await
        {
            return Ok(false);
        }
        first = false;
        if last {
            return Ok(true);
        }
    }
}

/// Writes received chunks to files below a directory: each file is created (with its parent
/// directories) at its first chunk and appended to by the following ones.
///
/// A sink's files are private ([`crate::workdir::create_private`]: mode 0600, directories 0700,
/// never written through a symbolic link in their place) — what the ANode stages, what the
/// NNode captures — except those of [`Sink::users_files`].
pub struct Sink {
    dir: PathBuf,
    /// Who creates the files (`run_as_owner`: a user's task's account), else the agent.
    account: Option<crate::run_as::Account>,
    /// Whether the files are created as a local run's own files are ([`Sink::users_files`]).
    users: bool,
    /// The file being written: where, for which stream, and the handle.
    open: Option<(PathBuf, u32, tokio::fs::File)>,
}

impl Sink {
    /// A sink writing below `dir`.
    pub fn new(dir: &Path) -> Self {
        Self::as_account(dir, None)
    }

    /// A sink writing below `dir` whose files (and missing directories) `account` creates
    /// ([`crate::run_as::create_as`]), when given.
    pub fn as_account(dir: &Path, account: Option<crate::run_as::Account>) -> Self {
        Self {
            dir: dir.to_path_buf(),
            account,
            users: false,
            open: None,
        }
    }

    /// A sink for an offloaded task's own files on its NNode (its `stdout =` file, its declared
    /// outputs): created as `account` (when given) with the tasks' umask, as the task's own
    /// process would create them in a local run ([`crate::run_as::create_as`]).
    pub fn users_files(dir: &Path, account: Option<crate::run_as::Account>) -> Self {
        Self {
            users: true,
            ..Self::as_account(dir, account)
        }
    }

    /// Writes `chunk` to `target` (a path below the sink's directory, checked by the caller).
    pub async fn write(&mut self, target: &Path, chunk: &pb::FileChunk) -> std::io::Result<()> {
        use tokio::io::AsyncWriteExt;
        let full = self.dir.join(target);
        let same = self
            .open
            .as_ref()
            .is_some_and(|(p, s, _)| *p == full && *s == chunk.stream);
        if !same {
            self.finish().await?;
            let f = match (&self.account, self.users) {
                (a, true) => crate::run_as::create_as(a.as_ref(), &full)?,
                (None, false) => crate::workdir::create_private(&full)?,
                (Some(a), false) => {
                    crate::run_as::hop(Some(a), || crate::workdir::create_private(&full))
                        .map_err(std::io::Error::other)??
                }
            };
            let f = tokio::fs::File::from_std(f);
            self.open = Some((full, chunk.stream, f));
        }
        if let Some((_, _, f)) = &mut self.open {
            f.write_all(&chunk.data).await?;
        }
        Ok(())
    }

    /// The file being written, if any (to flush it before the free space is read:
    /// [`crate::room::Room::take`]).
    pub(crate) fn file_mut(&mut self) -> Option<&mut tokio::fs::File> {
        self.open.as_mut().map(|(_, _, f)| f)
    }

    /// Flushes and closes the file being written.
    pub async fn finish(&mut self) -> std::io::Result<()> {
        use tokio::io::AsyncWriteExt;
        if let Some((_, _, mut f)) = self.open.take() {
            f.flush().await?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hetsched_core::testkit::ScratchDir;

    #[test]
    fn names_are_relative_paths_inside_the_task_directory() {
        assert_eq!(resolve("in/{index}.dat", 7), Ok(PathBuf::from("in/7.dat")));
        assert_eq!(resolve("./out.txt", 0), Ok(PathBuf::from("./out.txt")));
        for bad in ["", "/etc/passwd", "../x", "a/../../x", ".", "a/.."] {
            assert!(resolve(bad, 0).is_err(), "{bad} was accepted");
        }
    }

    fn chunk(path: &str, data: &[u8]) -> pb::FileChunk {
        pb::FileChunk {
            path: path.into(),
            data: data.to_vec(),
            stream: 0,
        }
    }

    fn scratch(name: &str) -> ScratchDir {
        ScratchDir::new("sink", name)
    }

    /// What an ANode stages of an offloaded task (its inputs, their directories) is private to
    /// the agent's user — files 0600, directories 0700 — even under umask 000. Before, they were
    /// created with the agent's umask (0666 and 0777 here).
    #[test]
    fn staged_files_are_private_whatever_the_umask() {
        let dir = scratch("private");
        crate::workdir::under_umask(0, async {
            let mut sink = Sink::new(&dir);
            sink.write(Path::new("in/x/0"), &chunk("in/x/0", b"data"))
                .await
                .expect("written");
            sink.finish().await.expect("finished");
        });
        assert_eq!(std::fs::read(dir.join("in/x/0")).expect("staged"), b"data");
        assert_eq!(crate::workdir::mode_of(&dir.join("in/x/0")), 0o600);
        for d in ["in", "in/x"] {
            assert_eq!(crate::workdir::mode_of(&dir.join(d)), 0o700, "{d}");
        }
    }

    /// A symbolic link in a staged file's place (planted by a task that ran in the directory)
    /// does not redirect the write: it fails saying why (the caller names the path), and the link's target
    /// keeps what it held. Before, the chunk truncated and overwrote the target.
    #[tokio::test]
    async fn a_link_in_a_staged_files_place_is_not_written_through() {
        let dir = scratch("link");
        let target = dir.join("elsewhere");
        std::fs::write(&target, "keep").expect("target");
        let stage = dir.join("stage");
        std::fs::create_dir_all(&stage).expect("stage");
        std::os::unix::fs::symlink(&target, stage.join("x")).expect("link");
        let mut sink = Sink::new(&stage);
        let e = sink
            .write(Path::new("x"), &chunk("x", b"overwritten"))
            .await
            .expect_err("not through the link");
        assert_eq!(e.to_string(), crate::workdir::LINK_IN_PLACE);
        assert_eq!(std::fs::read_to_string(&target).expect("target"), "keep");
    }
}
