//! `--out DIR`, the same in every command: a directory into which the command writes its named
//! files (`sim run` → `result.json`, `sim sweep`, `sim stream-paper` → `report.json`,
//! `sim pcddb-paper` → `pcddb-paper.json`, `sim hdas-paper`/`accel-paper`/`divisible-paper` →
//! `report.json` with CSV and SVG files, `output JOB` → `job-JOB.out`). The directory is created
//! when missing (with its parents); a path that exists and is not a directory is refused before
//! any work starts, so a long run never ends in an unwritable result.

use anyhow::{Context, bail};
use std::path::{Path, PathBuf};

/// Makes `dir` ready for `--out`: creates it if missing; refuses a file.
pub fn prepare(dir: &Path) -> anyhow::Result<()> {
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

/// Writes `text` as `dir/name` ([`write()`]), ending in a newline as a text file does (the
/// simulator's own JSON files do; `serde_json` writes none).
pub fn write_text(dir: &Path, name: &str, text: &str) -> anyhow::Result<PathBuf> {
    if text.ends_with('\n') {
        write(dir, name, text.as_bytes())
    } else {
        write(dir, name, format!("{text}\n").as_bytes())
    }
}

/// Writes `bytes` as `dir/name` (`dir` prepared with [`prepare`]) and says so on stderr.
pub fn write(dir: &Path, name: &str, bytes: &[u8]) -> anyhow::Result<PathBuf> {
    let path = dir.join(name);
    std::fs::write(&path, bytes).with_context(|| format!("cannot write {}", path.display()))?;
    eprintln!("wrote {}", path.display());
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_directory_is_created_and_a_file_is_refused() {
        let base = std::env::temp_dir().join(format!("hetsched-out-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        let dir = base.join("a/b");
        prepare(&dir).expect("created");
        assert!(dir.is_dir());
        prepare(&dir).expect("an existing directory is fine");
        let p = write(&dir, "x.json", b"{}").expect("written");
        assert_eq!(std::fs::read(&p).expect("read"), b"{}");
        let e = prepare(&p).expect_err("a file").to_string();
        assert!(e.contains("is a file, not a directory"), "{e}");
        let _ = std::fs::remove_dir_all(&base);
    }
}
