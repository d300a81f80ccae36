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

/// Sends `path` (read from `dir`, as `account` when given: [`crate::run_as::open_as`]) as chunks
/// of stream `stream` through `send`; an empty file is one empty chunk. Returns false if `send`
/// refused (the peer went away).
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
    let mut f = match account {
        None => tokio::fs::File::open(dir.join(name)).await?,
        Some(_) => tokio::fs::File::from_std(crate::run_as::open_as(account, &dir.join(name))?),
    };
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
pub struct Sink {
    dir: PathBuf,
    /// Who creates the files (`run_as_owner`: a user's task's account), else the agent.
    account: Option<crate::run_as::Account>,
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
            open: None,
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
            let f = match &self.account {
                None => {
                    if let Some(parent) = full.parent() {
                        tokio::fs::create_dir_all(parent).await?;
                    }
                    tokio::fs::File::create(&full).await?
                }
                Some(a) => tokio::fs::File::from_std(crate::run_as::create_as(Some(a), &full)?),
            };
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

    #[test]
    fn names_are_relative_paths_inside_the_task_directory() {
        assert_eq!(resolve("in/{index}.dat", 7), Ok(PathBuf::from("in/7.dat")));
        assert_eq!(resolve("./out.txt", 0), Ok(PathBuf::from("./out.txt")));
        for bad in ["", "/etc/passwd", "../x", "a/../../x", ".", "a/.."] {
            assert!(resolve(bad, 0).is_err(), "{bad} was accepted");
        }
    }
}
