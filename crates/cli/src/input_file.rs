//! Reading the files a user gives the simulator and the stream and binding commands (cluster,
//! workload, workflow, latency, platform, topology, traffic, binding events): one bounded read,
//! so `--cluster /dev/zero` or a mistyped multi-gigabyte path is refused instead of read until
//! memory runs out (2.1 GB before "out of memory").

use anyhow::{Context, bail};
use std::io::Read;
use std::path::Path;

/// The largest input file: 256 MiB. The largest legitimate inputs are far smaller (a cluster
/// file of the 100,000 nodes a cluster may hold is a few MB).
pub const MAX_INPUT_BYTES: u64 = 256 << 20;

/// Reads `path` as text: a regular file of at most [`MAX_INPUT_BYTES`].
pub fn read_input(path: &Path) -> anyhow::Result<String> {
    let shown = path.display();
    // Checked before opening: opening a FIFO for reading waits for a writer.
    let meta = std::fs::metadata(path).with_context(|| format!("cannot read {shown}"))?;
    check(&shown, &meta)?;
    let file = std::fs::File::open(path).with_context(|| format!("cannot read {shown}"))?;
    // Again on what was opened: the path may have changed in between.
    let meta = file
        .metadata()
        .with_context(|| format!("cannot read {shown}"))?;
    check(&shown, &meta)?;
    let mut text = String::new();
    // One byte more than the bound tells a file that grew since from one that fits.
    file.take(MAX_INPUT_BYTES + 1)
        .read_to_string(&mut text)
        .with_context(|| format!("cannot read {shown}"))?;
    if text.len() as u64 > MAX_INPUT_BYTES {
        bail!("{shown}: the file is larger than 256 MiB, the most an input file may be");
    }
    Ok(text)
}

fn check(shown: &std::path::Display<'_>, meta: &std::fs::Metadata) -> anyhow::Result<()> {
    if meta.is_dir() {
        bail!("cannot read {shown}: it is a directory, not a file");
    }
    if !meta.is_file() {
        bail!("cannot read {shown}: it is not a regular file (a device, a pipe or a socket)");
    }
    if meta.len() > MAX_INPUT_BYTES {
        bail!(
            "{shown}: the file is {} bytes; an input file may be at most 256 MiB",
            meta.len()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use hetsched_core::testkit::ScratchDir;

    #[test]
    fn devices_directories_and_huge_files_are_refused_and_a_small_file_is_read() {
        let e = read_input(Path::new("/dev/zero"))
            .err()
            .map(|e| e.to_string());
        assert_eq!(
            e.as_deref(),
            Some("cannot read /dev/zero: it is not a regular file (a device, a pipe or a socket)")
        );
        let dir = ScratchDir::new("input-file", "read");
        let e = read_input(&dir)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(e.ends_with("it is a directory, not a file"), "{e}");
        let big = dir.join("big.toml");
        let f = std::fs::File::create(&big).expect("create");
        // Sparse: no disk is written.
        f.set_len(MAX_INPUT_BYTES + 1).expect("set_len");
        let e = read_input(&big)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            e.ends_with("the file is 268435457 bytes; an input file may be at most 256 MiB"),
            "{e}"
        );
        let small = dir.join("small.toml");
        std::fs::write(&small, "a = 1\n").expect("write");
        assert_eq!(read_input(&small).ok().as_deref(), Some("a = 1\n"));
    }
}
