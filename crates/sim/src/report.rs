//! Output helpers shared by the scenarios: CSV tables and SVG charts.

pub mod plot;

use crate::error::SimError;
use std::path::{Path, PathBuf};

/// Writes `rows` under `header` as the CSV file `dir/name` and returns its path.
pub fn csv_file(
    dir: &Path,
    name: &str,
    header: &[&str],
    rows: impl IntoIterator<Item = Vec<String>>,
) -> Result<PathBuf, SimError> {
    let path = dir.join(name);
    let err = |e: csv::Error| SimError::Output {
        what: name.to_string(),
        problem: e.to_string(),
    };
    let mut w = csv::Writer::from_path(&path).map_err(err)?;
    w.write_record(header).map_err(err)?;
    for r in rows {
        w.write_record(r).map_err(err)?;
    }
    w.flush().map_err(|source| SimError::Io {
        path: path.display().to_string(),
        source,
    })?;
    Ok(path)
}

/// Creates `dir` if missing and writes `value` as pretty JSON (with a final newline) to
/// `dir/name`; returns its path.
pub fn json_file(
    dir: &Path,
    name: &str,
    value: &impl serde::Serialize,
) -> Result<PathBuf, SimError> {
    let io = |path: &Path| {
        let path = path.display().to_string();
        move |source| SimError::Io { path, source }
    };
    std::fs::create_dir_all(dir).map_err(io(dir))?;
    let path = dir.join(name);
    let text = serde_json::to_string_pretty(value).map_err(|e| SimError::Output {
        what: name.to_string(),
        problem: e.to_string(),
    })?;
    std::fs::write(&path, text + "\n").map_err(io(&path))?;
    Ok(path)
}
