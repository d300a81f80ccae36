//! The durable record of the offload attempts an ANode ran ([`super::attempts`]), so that a
//! ticket replayed after the ANode's agent restarted does not run its attempt a second time.
//!
//! The attempts an ANode holds live in its agent's memory; a restarted agent would forget them,
//! and a ticket of an attempt that already ran here — replayed within its lifetime, by a
//! holder of the agent token who saw it on the way — would run it again. So the agent appends a
//! line to `WORK_DIR/offload.attempts` ([`FILE_NAME`], mode 0600, opened without following a
//! symbolic link) when an attempt's inputs arrived and its run is about to start, and another
//! when the attempt ended:
//!
//! ```text
//! run TASK ATTEMPT EXPIRES_MS              # its inputs arrived: it runs (or is queued) here
//! ended TASK ATTEMPT EXPIRES_MS OUTCOME    # its result was sent, or it was abandoned: OUTCOME says how
//! ```
//!
//! `EXPIRES_MS` is its ticket's expiry (ms since the Unix epoch): an attempt is kept only until
//! then, in memory and in the record, as a ticket that old starts nothing. At start-up the
//! agent reads the record ([`Record::open`]): an attempt recorded `ended` is refused with its
//! outcome, as before the restart; one recorded `run` and never `ended` was under way when the
//! agent stopped (its run ended with it), and is refused as such ([`RESTARTED`]) — the NNode
//! reports it interrupted, and the server runs the task again as a new attempt. Expired entries
//! are dropped, and the record is rewritten at once with what is left (a temporary file renamed
//! over it), so a line the previous agent's death cut short is never glued to.
//!
//! Bounded: the record holds at most one line per attempt held in memory (at most
//! `attempts::MAX_REMEMBERED`) plus [`COMPACT_AFTER`] lines, past which it is rewritten from
//! memory, dropping the attempts forgotten meanwhile. An outcome is one line of at most
//! [`MAX_OUTCOME`] bytes (control characters become spaces).
//!
//! Unlike the agent's record of running tasks (`crate::ledger`), the lines that matter are
//! synced to the disk: a `run` line is synced (`sync_data`) before the attempt's run starts,
//! and a rewrite syncs the new file before renaming it over the old one and the directory after
//! (`workdir::rewrite_for_append_synced`). A crash of the whole machine that lost a `run` line
//! would let a replayed ticket run its attempt a second time. An `ended` line is not synced:
//! lost, its attempt is read back as under way and refused all the same ([`RESTARTED`]). A
//! line is taken only whole (ending in its newline): a
//! `run` line cut inside its expiry must not pass for one that expires earlier. A write that
//! fails (a full disk) is logged, and every record after it rewrites the whole file from
//! memory until one succeeds, so the record is whole again once there is room.

use std::collections::HashMap;
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use tracing::{info, warn};

/// The record's file name in the agent's work directory.
pub const FILE_NAME: &str = "offload.attempts";

/// Rewrite the record once it holds this many more lines than attempts held.
pub const COMPACT_AFTER: usize = 4096;

/// Longest outcome kept in the record, in bytes.
pub const MAX_OUTCOME: usize = 1024;

/// The outcome of an attempt recorded as running and never as ended: the agent stopped while
/// it was under way here.
pub const RESTARTED: &str = "was under way here when this ANode's agent restarted, and its run \
     ended with that agent (the NNode reports it interrupted and the server runs the task again \
     as a new attempt)";

/// An attempt: its task and attempt number.
pub(crate) type Key = (u64, u32);

/// What the record says of one attempt.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Recorded {
    /// Its inputs arrived and its run started; no end recorded.
    Running { expires_ms: u64 },
    /// It ended as `outcome` says.
    Ended { expires_ms: u64, outcome: String },
}

impl Recorded {
    /// When its ticket expires (ms since the Unix epoch).
    pub fn expires_ms(&self) -> u64 {
        match self {
            Self::Running { expires_ms } | Self::Ended { expires_ms, .. } => *expires_ms,
        }
    }

    /// Its line in the record.
    pub fn line(&self, (task, attempt): Key) -> String {
        match self {
            Self::Running { expires_ms } => format!("run {task} {attempt} {expires_ms}\n"),
            Self::Ended {
                expires_ms,
                outcome,
            } => format!(
                "ended {task} {attempt} {expires_ms} {}\n",
                one_line(outcome)
            ),
        }
    }
}

/// `outcome` as one line of the record: control characters as spaces, at most [`MAX_OUTCOME`]
/// bytes (cut at a character's boundary).
fn one_line(outcome: &str) -> String {
    let mut s: String = outcome
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if s.len() > MAX_OUTCOME {
        let mut cut = MAX_OUTCOME;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
    }
    s
}

/// The attempts the record's text names, the last line of each attempt winning; a line not
/// whole (no newline: cut short) or not of the format is skipped.
fn parse(text: &str) -> HashMap<Key, Recorded> {
    let mut found = HashMap::new();
    for line in text.split_inclusive('\n') {
        let Some(line) = line.strip_suffix('\n') else {
            continue;
        };
        let mut f = line.splitn(5, ' ');
        let kind = f.next();
        let (Some(task), Some(attempt), Some(expires_ms)) = (
            f.next().and_then(|t| t.parse::<u64>().ok()),
            f.next().and_then(|a| a.parse::<u32>().ok()),
            f.next().and_then(|e| e.parse::<u64>().ok()),
        ) else {
            continue;
        };
        let recorded = match (kind, f.next()) {
            (Some("run"), None) => Recorded::Running { expires_ms },
            (Some("ended"), Some(outcome)) if !outcome.is_empty() => Recorded::Ended {
                expires_ms,
                outcome: outcome.to_string(),
            },
            _ => continue,
        };
        found.insert((task, attempt), recorded);
    }
    found
}

/// The durable record of the attempts an ANode ran (the module's doc).
#[derive(Debug)]
pub(crate) struct Record {
    path: PathBuf,
    /// Where lines are appended: `None` while the file could not be (re)written.
    file: Option<File>,
    /// Lines in the file.
    lines: usize,
    /// A write failed (maybe part-way): the next record rewrites the whole file.
    damaged: bool,
}

impl Record {
    /// Reads the record in `work_dir` and rewrites it with the attempts whose tickets had not
    /// expired at `now_ms`, which it returns: an attempt recorded as running and never as
    /// ended comes back ended with [`RESTARTED`]. At most `max` are kept (the latest to
    /// expire): more is a damaged record, said in the log. A symbolic link planted as the
    /// record is an error, never followed.
    pub fn open(
        work_dir: &Path,
        now_ms: u64,
        max: usize,
    ) -> std::io::Result<(Self, Vec<(Key, Recorded)>)> {
        let path = work_dir.join(FILE_NAME);
        let text = match crate::workdir::open_no_follow(&path, false) {
            Ok(mut f) => {
                let mut t = Vec::new();
                std::io::Read::read_to_end(&mut f, &mut t)?;
                String::from_utf8_lossy(&t).into_owned()
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(e) => {
                return Err(std::io::Error::new(
                    e.kind(),
                    format!("{}: {e}", path.display()),
                ));
            }
        };
        let mut kept: Vec<(Key, Recorded)> = parse(&text)
            .into_iter()
            .filter(|(_, r)| r.expires_ms() >= now_ms)
            .map(|(key, r)| match r {
                Recorded::Running { expires_ms } => (
                    key,
                    Recorded::Ended {
                        expires_ms,
                        outcome: RESTARTED.to_string(),
                    },
                ),
                ended => (key, ended),
            })
            .collect();
        kept.sort_unstable_by_key(|(key, r)| (std::cmp::Reverse(r.expires_ms()), *key));
        if kept.len() > max {
            warn!(
                "{}: {} attempts whose tickets have not expired, more than the {max} an ANode \
                 holds: the record is damaged; the {max} that expire last are kept",
                path.display(),
                kept.len()
            );
            kept.truncate(max);
        }
        if !kept.is_empty() {
            info!(
                attempts = kept.len(),
                "offload attempts recorded by the previous agent: their tickets run nothing here"
            );
        }
        let mut record = Self {
            path,
            file: None,
            lines: 0,
            damaged: false,
        };
        record.rewrite(kept.iter().map(|(k, r)| (*k, r.clone())))?;
        Ok((record, kept))
    }

    /// Appends `recorded`'s line for `key`; when the file holds [`COMPACT_AFTER`] lines more
    /// than `held` attempts, or a write failed before, rewrites it from `all` instead (what is
    /// held in memory, `recorded` included). A failure is logged: the runs matter more than
    /// their record.
    pub fn write<I>(&mut self, key: Key, recorded: &Recorded, held: usize, all: I)
    where
        I: IntoIterator<Item = (Key, Recorded)>,
    {
        if self.damaged || self.lines + 1 > held + COMPACT_AFTER {
            if let Err(e) = self.rewrite(all) {
                warn!("{}: {e}", self.path.display());
            }
            return;
        }
        let Some(f) = &mut self.file else {
            self.damaged = true;
            return;
        };
        // An attempt recorded as running reaches the disk before its run starts (the caller
        // starts it once this returns): a machine crash must not forget that it ran.
        let written = f
            .write_all(recorded.line(key).as_bytes())
            .and_then(|()| match recorded {
                Recorded::Running { .. } => f.sync_data(),
                Recorded::Ended { .. } => Ok(()),
            });
        match written {
            Ok(()) => self.lines += 1,
            Err(e) => {
                warn!("{}: {e}", self.path.display());
                self.damaged = true;
            }
        }
    }

    /// Rewrites the file with `all` (a temporary file, synced, renamed over it; the directory
    /// synced) and appends to it from then on.
    fn rewrite<I>(&mut self, all: I) -> std::io::Result<()>
    where
        I: IntoIterator<Item = (Key, Recorded)>,
    {
        let mut lines = 0;
        let text: String = all
            .into_iter()
            .map(|(key, r)| {
                lines += 1;
                r.line(key)
            })
            .collect();
        let written = crate::workdir::rewrite_for_append_synced(&self.path, &text);
        match written {
            Ok(f) => {
                self.file = Some(f);
                self.lines = lines;
                self.damaged = false;
                Ok(())
            }
            Err(e) => {
                self.damaged = true;
                Err(e)
            }
        }
    }

    /// Lines in the file.
    #[cfg(test)]
    pub fn lines(&self) -> usize {
        self.lines
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_cut_short_or_garbled_are_skipped_and_the_last_line_of_an_attempt_wins() {
        let text = "run 1 1 500\nended 1 1 500 ran here\nrun 2 1 700\nrun 3 1 90\
                    \nended 4 1 x oops\nended 5 1 600\nrun 6 2 12";
        let found = parse(text);
        assert_eq!(
            found.get(&(1, 1)),
            Some(&Recorded::Ended {
                expires_ms: 500,
                outcome: "ran here".into()
            })
        );
        assert_eq!(
            found.get(&(2, 1)),
            Some(&Recorded::Running { expires_ms: 700 })
        );
        assert_eq!(
            found.get(&(3, 1)),
            Some(&Recorded::Running { expires_ms: 90 })
        );
        assert!(!found.contains_key(&(4, 1)), "garbled expiry");
        assert!(!found.contains_key(&(5, 1)), "no outcome");
        assert!(!found.contains_key(&(6, 2)), "cut short: no newline");
    }

    #[test]
    fn an_outcome_is_one_bounded_line() {
        let r = Recorded::Ended {
            expires_ms: 9,
            outcome: format!("a\nb\u{1b}{}", "é".repeat(MAX_OUTCOME)),
        };
        let line = r.line((1, 2));
        assert_eq!(line.matches('\n').count(), 1);
        assert!(line.len() <= "ended 1 2 9 \n".len() + MAX_OUTCOME);
        assert!(line.starts_with("ended 1 2 9 a b "));
        let back = parse(&line);
        assert!(matches!(back.get(&(1, 2)), Some(Recorded::Ended { .. })));
    }
}
