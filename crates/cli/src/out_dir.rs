//! Where commands write their results, checked before any work starts so a long run never ends
//! in an unwritable result or over a file it should not touch.
//!
//! `--out DIR`, the same in every command: a directory into which the command writes its named
//! files (`sim run` → `result.json`, `sim compare` → `compare.json`, `sim graph` →
//! `graph.json`, `sim divisible` → `divisible.json`, `sim accel` → `accel.json` — each the JSON
//! `--output json` prints —, `sim sweep`, `sim stream-paper` → `report.json`, `sim pcddb-paper` →
//! `pcddb-paper.json`, `sim hdas-paper`/`accel-paper`/`divisible-paper` → `report.json` with CSV
//! and SVG files, `output JOB` → `job-JOB.out`). The directory is created when missing (with its
//! parents); a path that exists and is not a directory is refused, and so is a directory the
//! command cannot create files in.
//!
//! An output file (`--export FILE`, `--export-schedule FILE`, or a named file in `--out DIR`) is
//! refused when it is one of the command's input files or another of its outputs (the same file
//! after following links: `--export examples/workflow-mm5.toml` would have destroyed the
//! workflow it simulates), and `--export`'s file when it is a directory or its directory is
//! missing or takes no file ([`check_file`], [`prepare_named`]).

use anyhow::{Context, bail};
use std::path::{Path, PathBuf};

/// Makes `dir` ready for `--out`: creates it if missing; refuses a file and a directory the
/// command cannot create files in ([`probe`]).
pub fn prepare(dir: &Path) -> anyhow::Result<()> {
    exists_as_dir(dir)?;
    probe(dir).with_context(|| format!("--out {}: cannot write into this directory", dir.display()))
}

/// Tries what the command will do at the end, create a file in `dir`, and removes it: a
/// directory that takes none (`/proc`, read-only, another user's) is refused before the run
/// (`sim sweep --out /proc` ran every case, then failed).
fn probe(dir: &Path) -> std::io::Result<()> {
    let path = dir.join(format!(".hetsched-out-probe-{}", std::process::id()));
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&path)
    {
        Ok(_) => {
            let _ = std::fs::remove_file(&path);
            Ok(())
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(e),
    }
}

fn exists_as_dir(dir: &Path) -> anyhow::Result<()> {
    match std::fs::metadata(dir) {
        Ok(m) if m.is_dir() => Ok(()),
        Ok(_) => bail!(
            "--out {}: this is a file, not a directory (--out names a directory the command \
             writes its files into)",
            dir.display()
        ),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => std::fs::create_dir_all(dir)
            .with_context(|| format!("--out {}: cannot create the directory", dir.display())),
        Err(e) => Err(e).with_context(|| format!("--out {}", dir.display())),
    }
}

/// Makes `dir` ready for `--out` ([`prepare`]) and checks that the file `name` the command will
/// write there is none of `others` (its inputs and other outputs, each with its flag); returns
/// that file's path.
pub fn prepare_named(dir: &Path, name: &str, others: &[(&str, &Path)]) -> anyhow::Result<PathBuf> {
    prepare(dir)?;
    let target = dir.join(name);
    if let Some((flag, other)) = same_as(&target, others) {
        bail!(
            "--out {} would write {}, which is the {flag} file {}: name another directory",
            dir.display(),
            target.display(),
            other.display()
        );
    }
    Ok(target)
}

/// The one named file a command writes into `--out DIR`, if `--out` was given
/// ([`Named::prepare`], [`Named::write_text`]).
#[derive(Debug)]
pub struct Named {
    target: Option<(PathBuf, &'static str)>,
}

impl Named {
    /// `--out`'s directory `dir` made ready for the file `name` ([`prepare_named`]); nothing
    /// without `--out`.
    pub fn prepare(
        dir: Option<&Path>,
        name: &'static str,
        others: &[(&str, &Path)],
    ) -> anyhow::Result<Named> {
        let target = match dir {
            Some(dir) => {
                prepare_named(dir, name, others)?;
                Some((dir.to_path_buf(), name))
            }
            None => None,
        };
        Ok(Named { target })
    }

    /// The file's path, if `--out` was given (to check another output against).
    pub fn path(&self) -> Option<PathBuf> {
        self.target.as_ref().map(|(dir, name)| dir.join(name))
    }

    /// Checks the output file flag `flag`'s `path`, if given ([`check_file`]), against the
    /// command's `inputs` and this file.
    pub fn check_file(
        &self,
        flag: &str,
        path: Option<&Path>,
        inputs: &[(&str, &Path)],
    ) -> anyhow::Result<()> {
        let Some(path) = path else {
            return Ok(());
        };
        let named = self.path();
        let mut others = inputs.to_vec();
        if let Some(named) = &named {
            others.push(("--out", named));
        }
        check_file(flag, path, &others)
    }

    /// Writes `text` as the file ([`write_text`]), if `--out` was given.
    pub fn write_text(&self, text: &str) -> anyhow::Result<()> {
        match self.path() {
            Some(path) => write_text(&path, text),
            None => Ok(()),
        }
    }
}

/// Checks an output file flag's `path` (`flag` names it, `--export`) before any work: not a
/// directory, in a directory that exists, and none of `others` (the command's inputs and other
/// outputs, each with its flag).
pub fn check_file(flag: &str, path: &Path, others: &[(&str, &Path)]) -> anyhow::Result<()> {
    let shown = path.display();
    if path.is_dir() {
        bail!("{flag} {shown}: this is a directory; {flag} names the file to write");
    }
    if let Some(parent) = path.parent()
        && !parent.as_os_str().is_empty()
        && !parent.is_dir()
    {
        bail!(
            "{flag} {shown}: the directory {} does not exist",
            parent.display()
        );
    }
    if let Some((other_flag, other)) = same_as(path, others) {
        bail!(
            "{flag} {shown} is the {other_flag} file {}: the command would write over it; name \
             another file",
            other.display()
        );
    }
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    probe(parent).with_context(|| {
        format!(
            "{flag} {shown}: cannot write into the directory {}",
            parent.display()
        )
    })
}

/// The first of `others` that is the same file as `target`: the same canonical path (`target`
/// need not exist yet: its directory's canonical path and its name), or the same inode (a hard
/// link).
fn same_as<'a>(target: &Path, others: &[(&'a str, &'a Path)]) -> Option<(&'a str, &'a Path)> {
    use std::os::unix::fs::MetadataExt;
    let resolved = resolve(target)?;
    let inode = std::fs::metadata(target).ok().map(|m| (m.dev(), m.ino()));
    others.iter().copied().find(|(_, other)| {
        resolve(other).is_some_and(|o| o == resolved)
            || (inode.is_some()
                && std::fs::metadata(other).ok().map(|m| (m.dev(), m.ino())) == inode)
    })
}

/// `path` made canonical: the file's own canonical path if it exists, else its directory's with
/// its name; `None` if neither resolves.
fn resolve(path: &Path) -> Option<PathBuf> {
    if let Ok(p) = std::fs::canonicalize(path) {
        return Some(p);
    }
    let name = path.file_name()?;
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    Some(std::fs::canonicalize(parent).ok()?.join(name))
}

/// Writes `text` to `path` ([`write()`]), ending in a newline as a text file does (the
/// simulator's own JSON files do; `serde_json` writes none): `--out`'s named files, `--export`'s
/// and `--export-schedule`'s.
pub fn write_text(path: &Path, text: &str) -> anyhow::Result<()> {
    if text.ends_with('\n') {
        write(path, text.as_bytes())
    } else {
        write(path, format!("{text}\n").as_bytes())
    }
}

/// Writes `bytes` to `path` (checked with [`check_file`], or in a directory prepared with
/// [`prepare`]) and says so on stderr.
pub fn write(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    std::fs::write(path, bytes).with_context(|| format!("cannot write {}", path.display()))?;
    eprintln!("wrote {}", path.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use hetsched_core::testkit::ScratchDir;

    #[test]
    fn a_missing_directory_is_created_and_a_file_is_refused() {
        let base = ScratchDir::new("out-dir", "missing");
        let dir = base.join("a/b");
        prepare(&dir).expect("created");
        assert!(dir.is_dir());
        prepare(&dir).expect("an existing directory is fine");
        let p = dir.join("x.json");
        write(&p, b"{}").expect("written");
        assert_eq!(std::fs::read(&p).expect("read"), b"{}");
        let e = prepare(&p).expect_err("a file").to_string();
        assert!(e.contains("is a file, not a directory"), "{e}");
    }

    #[test]
    fn an_output_that_is_an_input_is_refused_through_links_and_other_spellings() {
        let base = ScratchDir::new("out-dir", "same");
        std::fs::create_dir_all(base.join("sub")).expect("dir");
        let input = base.join("in.toml");
        std::fs::write(&input, "a = 1\n").expect("input");
        let inputs = [("--workflow", input.as_path())];
        let spelled = base.join("sub/../in.toml");
        let e = check_file("--export", &spelled, &inputs)
            .expect_err("the same file")
            .to_string();
        assert!(
            e.contains("is the --workflow file") && e.contains("--export"),
            "{e}"
        );
        let link = base.join("link.toml");
        std::fs::hard_link(&input, &link).expect("hard link");
        assert!(
            check_file("--export", &link, &inputs).is_err(),
            "a hard link"
        );
        check_file("--export", &base.join("new.json"), &inputs).expect("a new file is fine");
        let e = check_file("--export", &base, &inputs)
            .expect_err("a directory")
            .to_string();
        assert!(e.contains("this is a directory"), "{e}");
        let e = check_file("--export", &base.join("missing/x.json"), &inputs)
            .expect_err("no directory")
            .to_string();
        assert!(e.contains("does not exist"), "{e}");
        let e = prepare_named(&base, "in.toml", &inputs)
            .expect_err("--out would write the input")
            .to_string();
        assert!(e.contains("which is the --workflow file"), "{e}");
        assert_eq!(
            std::fs::read_to_string(&input).expect("input"),
            "a = 1\n",
            "untouched"
        );
    }
}
