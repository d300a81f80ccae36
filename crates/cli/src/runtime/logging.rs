//! The own log of `hetsched server` and `hetsched agent`: `--log-format text|json` and
//! `--log-file PATH` (`log_format` and `log_file` in their configuration files; a flag overrides
//! the key). Without a file the log goes to standard error, for a supervisor (systemd, a batch
//! system) to keep. A file is appended to, created mode 0600 (the log names users, jobs and
//! nodes), and reopened on SIGHUP, so that logrotate's rename followed by `kill -HUP` works:
//! lines before the signal stay in the renamed file, lines after it go to a new file at PATH.

use anyhow::{Context, bail};
use hetsched_core::input::log_format::LogFormat;
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

/// The log flags the server and the agent share.
#[derive(Debug, Default, clap::Args)]
pub struct LogArgs {
    /// How the process's own log is written: text for people, or json (one JSON object a line,
    /// for a log collector) [default: the configuration's `log_format`, else text].
    #[arg(
        long,
        value_name = "FORMAT",
        value_parser = clap::builder::TypedValueParser::try_map(
            clap::builder::PossibleValuesParser::new(LogFormat::ALL.map(LogFormat::as_str)),
            |s| s.parse::<LogFormat>()
        )
    )]
    pub log_format: Option<LogFormat>,
    /// Append the process's own log to this file (created mode 0600 in a directory that must
    /// exist) instead of standard error; reopened on SIGHUP, so logrotate may rename it and send
    /// SIGHUP [default: the configuration's `log_file`, else standard error].
    #[arg(long, value_name = "PATH")]
    pub log_file: Option<PathBuf>,
}

/// Where the log goes and how, flags over the configuration file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settings {
    pub format: LogFormat,
    /// The file, and how the user named it (`--log-file`, or `FILE: log_file`) for errors.
    pub file: Option<(PathBuf, String)>,
}

impl Settings {
    /// The flags `args`, else the configuration's `log_format` and `log_file` (read from the
    /// file `config`, which errors name).
    pub fn resolve(
        args: &LogArgs,
        format: LogFormat,
        file: Option<&Path>,
        config: Option<&Path>,
    ) -> Settings {
        let file = match (&args.log_file, file) {
            (Some(f), _) => Some((f.clone(), "--log-file".to_string())),
            (None, Some(f)) => Some((
                f.to_path_buf(),
                match config {
                    Some(c) => format!("{}: log_file", c.display()),
                    None => "log_file".to_string(),
                },
            )),
            (None, None) => None,
        };
        Settings {
            format: args.log_format.unwrap_or(format),
            file,
        }
    }

    /// Checks that the log file could be opened, as [`Settings::open`] would, without creating
    /// or changing anything (`hetsched server --check`).
    pub fn check(&self) -> anyhow::Result<()> {
        let Some((path, named)) = &self.file else {
            return Ok(());
        };
        check_parent(path, named)?;
        match std::fs::metadata(path) {
            Ok(m) if !m.is_file() => bail!("{named} {}: not a regular file", path.display()),
            Ok(_) => {
                std::fs::OpenOptions::new()
                    .append(true)
                    .open(path)
                    .with_context(|| format!("{named} {}: cannot append to it", path.display()))?;
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e).with_context(|| format!("{named} {}", path.display())),
        }
        Ok(())
    }

    /// Opens the log file, if any.
    pub fn open(&self) -> anyhow::Result<Option<Arc<LogFile>>> {
        match &self.file {
            Some((path, named)) => Ok(Some(Arc::new(LogFile::open(path, named)?))),
            None => Ok(None),
        }
    }
}

/// Refuses a log file whose directory is missing (or no directory), naming how it was given.
fn check_parent(path: &Path, named: &str) -> anyhow::Result<()> {
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    if !parent.is_dir() {
        bail!(
            "{named} {}: the directory {} does not exist (it is not created: make it, or name \
             another file)",
            path.display(),
            parent.display()
        );
    }
    Ok(())
}

/// The open log file, which a SIGHUP reopens at its path.
#[derive(Debug)]
pub struct LogFile {
    path: PathBuf,
    file: Mutex<File>,
}

/// Opens `path` for appending, creating it mode 0600.
fn open_append(path: &Path) -> std::io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(path)
}

impl LogFile {
    /// Opens (creates, mode 0600) `path` for appending; `named` (the flag or key) names it in
    /// errors.
    pub fn open(path: &Path, named: &str) -> anyhow::Result<LogFile> {
        check_parent(path, named)?;
        let file = open_append(path).with_context(|| format!("{named} {}", path.display()))?;
        // One that was there keeps its mode: said, as the token files' is (the log names users,
        // jobs and nodes), but left to the operator (a log shipper may read it by its group).
        if let Ok(m) = file.metadata()
            && std::os::unix::fs::PermissionsExt::mode(&m.permissions()) & 0o027 != 0
        {
            eprintln!(
                "warning: {named} {}: open to every user, or writable by its group (mode {:o}); \
                 the log names users, jobs and nodes: `chmod 600` it, or 640 for a log \
                 reader's group",
                path.display(),
                std::os::unix::fs::PermissionsExt::mode(&m.permissions()) & 0o777
            );
        }
        Ok(LogFile {
            path: path.to_path_buf(),
            file: Mutex::new(file),
        })
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Opens the path again (a new file there if logrotate renamed the old one) and writes on
    /// to it; on an error the old file is kept.
    pub fn reopen(&self) -> std::io::Result<()> {
        let file = open_append(&self.path)?;
        *self.file.lock().unwrap_or_else(PoisonError::into_inner) = file;
        Ok(())
    }
}

/// One write a line: the formatter hands each event over whole, and the file is opened for
/// appending, so lines of threads writing at once do not mix.
impl Write for &LogFile {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.file
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .write(buf)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.file
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .flush()
    }
}

/// Starts logging (`RUST_LOG` overrides `default`) in `format`, to `file` or else to standard
/// error (in colour on a terminal, see [`super::human::colour`]).
pub fn init(default: &str, format: LogFormat, file: Option<Arc<LogFile>>) {
    use tracing_subscriber::fmt::writer::BoxMakeWriter;
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let (writer, ansi) = match file {
        Some(f) => (BoxMakeWriter::new(f), false),
        None => (
            BoxMakeWriter::new(std::io::stderr),
            super::human::colour() && format == LogFormat::Text,
        ),
    };
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi)
        .with_writer(writer);
    let _ = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
}

/// A SIGHUP (logrotate's `postrotate`, a `systemctl reload`, a closed terminal) would end the
/// process at once with nothing in its log (an agent's tasks killed by its guard). With a log
/// file, each one reopens it (`SIGHUP: reopened the log file PATH`, the first line in the new
/// file); without, it is logged, `SIGHUP: ignored, WHAT`. The process goes on either way.
pub fn on_hangups(what: &'static str, file: Option<Arc<LogFile>>) {
    let Ok(mut hup) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()) else {
        return;
    };
    tokio::spawn(async move {
        while hup.recv().await.is_some() {
            let Some(f) = &file else {
                tracing::warn!("SIGHUP: ignored, {what}");
                continue;
            };
            match f.reopen() {
                Ok(()) => tracing::info!("SIGHUP: reopened the log file {}", f.path().display()),
                Err(e) => tracing::error!(
                    "SIGHUP: cannot reopen the log file {}: {e}; logging on to the file open \
                     before",
                    f.path().display()
                ),
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::{LogArgs, LogFile, LogFormat, Settings};
    use hetsched_core::testkit::ScratchDir;
    use std::io::Write;
    use std::path::Path;

    fn dir(name: &str) -> ScratchDir {
        ScratchDir::new("logging", name)
    }

    /// A flag overrides the configuration's key, and errors then name the flag; a key names
    /// the configuration file.
    #[test]
    fn the_log_flags_override_the_configuration_and_errors_name_their_origin() {
        let config = Path::new("server.toml");
        let keys = Settings::resolve(
            &LogArgs::default(),
            LogFormat::Json,
            Some(Path::new("/nonexistent-dir/s.log")),
            Some(config),
        );
        assert_eq!(keys.format, LogFormat::Json);
        let e = format!("{:#}", keys.check().expect_err("no such directory"));
        assert!(
            e.starts_with("server.toml: log_file /nonexistent-dir/s.log: the directory /nonexistent-dir does not exist"),
            "{e}"
        );
        let flags = LogArgs {
            log_format: Some(LogFormat::Text),
            log_file: Some("/nonexistent-dir/f.log".into()),
        };
        let given = Settings::resolve(
            &flags,
            LogFormat::Json,
            Some(Path::new("s.log")),
            Some(config),
        );
        assert_eq!(given.format, LogFormat::Text);
        let e = format!("{:#}", given.open().expect_err("no such directory"));
        assert!(
            e.starts_with("--log-file /nonexistent-dir/f.log: the directory"),
            "{e}"
        );
    }

    /// The check creates nothing; the file is created private, and reopened at its path after
    /// a rename, the renamed file keeping what was written before.
    #[test]
    fn a_log_file_is_created_private_and_reopened_at_its_path() {
        use std::os::unix::fs::PermissionsExt;
        let d = dir("reopen");
        let path = d.join("agent.log");
        let s = Settings {
            format: LogFormat::Text,
            file: Some((path.clone(), "--log-file".into())),
        };
        s.check().expect("a file that may be created");
        assert!(!path.exists(), "the check created the file");
        let f = s.open().expect("open").expect("a file");
        let mode = std::fs::metadata(&path)
            .expect("created")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        (&*f).write_all(b"before\n").expect("write");
        std::fs::rename(&path, d.join("agent.log.1")).expect("rename");
        f.reopen().expect("reopen");
        (&*f).write_all(b"after\n").expect("write");
        assert_eq!(
            std::fs::read_to_string(d.join("agent.log.1")).expect("old"),
            "before\n"
        );
        assert_eq!(std::fs::read_to_string(&path).expect("new"), "after\n");
        // An existing file is appended to.
        let again = LogFile::open(&path, "--log-file").expect("open again");
        (&again).write_all(b"more\n").expect("write");
        assert_eq!(
            std::fs::read_to_string(&path).expect("new"),
            "after\nmore\n"
        );
    }
}
