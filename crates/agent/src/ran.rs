//! Which task attempts ran on this agent, and on which captured streams they printed nothing:
//! what tells a task that printed nothing from one whose output is gone.
//!
//! A captured stream's file is created at its first byte ([`crate::launch`]: creating two files
//! per task dominated the cost of running short ones), so a missing capture file alone cannot
//! say whether the task printed nothing or its file (or its whole job directory) was removed
//! since. `hetsched log JOB --all > results.txt` must not pass a lost result off as an empty one.
//!
//! So each job directory this agent makes holds [`DIR`] (made with it, by
//! [`crate::job_nonce::claim_task_dir`]), and in it one record per application, process and
//! attempt (`APP[-pP].ATTEMPT`, named as the capture files are) in which byte `index` is task
//! `index`'s: [`STARTED`] once its process started, then [`ENDED`] and the streams it printed
//! nothing on once it ended. The records are sparse files written one byte at a time at the
//! task's own offset: a job of a million tasks gets one record per application and attempt (a
//! megabyte at most where its indices are dense), never a file per task, and each task costs
//! two one-byte writes and no file creation. Tasks write different bytes, so none waits for
//! another. A job directory without [`DIR`] was made by an agent that predates the records:
//! there a missing capture file still reads as a task that printed nothing.

use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// The records' directory in a job directory. Never a task's file's name: those start with
/// their application's name, and one that starts with `.` is written `_.`
/// ([`crate::launch::component`]).
pub const DIR: &str = ".ran";

/// The attempt's process started (its output is being captured).
pub const STARTED: u8 = 1;
/// The attempt ended: its streams' files are final.
pub const ENDED: u8 = 2;
/// It printed nothing on stdout (captured: no file was created).
pub const SILENT_OUT: u8 = 4;
/// It printed nothing on stderr.
pub const SILENT_ERR: u8 = 8;

/// An attempt that ended before its process started (a missing directory, an input that
/// could not be fetched): it printed nothing on either stream.
pub const NEVER_STARTED: u8 = STARTED | ENDED | SILENT_OUT | SILENT_ERR;

/// What a job directory records of one task attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Record {
    /// The directory predates the records: nothing can be told.
    Unrecorded,
    /// The attempt did not run here (or its record was removed with the file).
    None,
    /// It started and has not ended (or the agent stopped before it saw the end).
    Running,
    /// It ended; whether it printed nothing on stdout, on stderr.
    Ended {
        /// Nothing on stdout.
        silent_out: bool,
        /// Nothing on stderr.
        silent_err: bool,
    },
}

/// The record file of `app`'s process `process` (0: none), attempt `attempt`, in job directory
/// `job_dir`.
pub fn path(job_dir: &Path, app: &str, process: u32, attempt: u32) -> PathBuf {
    let process = match process {
        0 => String::new(),
        p => format!("-p{p}"),
    };
    job_dir.join(DIR).join(format!(
        "{}{process}.{attempt}",
        crate::launch::component(app)
    ))
}

/// Writes `flags` as task `index`'s byte in record `file`. Nothing is written where the job
/// directory has no records (made by an older agent: [`Record::Unrecorded`] is read there
/// anyway). The file is opened without following a link and must be a regular file.
pub fn mark(file: &Path, index: u32, flags: u8) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let f = match std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .mode(0o600)
        .custom_flags(crate::workdir::no_follow() | nix::fcntl::OFlag::O_NONBLOCK.bits())
        .open(file)
    {
        Ok(f) => f,
        // No records directory (`create` makes the file, never its directory): an older
        // agent's job directory, or none.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    if !f.metadata()?.is_file() {
        return Err(std::io::Error::other(format!(
            "{}: not a regular file",
            file.display()
        )));
    }
    f.write_all_at(&[flags], u64::from(index))
}

/// One task attempt's byte in its record, as the agent that runs it writes it: a local run
/// ([`crate::launch::run`]), an offloaded one on the NNode that placed it
/// ([`crate::accel::offload::run`], where its output comes back), and an attempt that ended
/// before its process started (the agent's task loop, `lib.rs`). One place, so that every way a task
/// runs here is recorded alike and `hetsched log` reads them alike.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Attempt {
    /// Its record file ([`path`]).
    pub file: PathBuf,
    /// Its byte there: the task's index.
    pub index: u32,
}

impl Attempt {
    /// Attempt `a` of a task of `spec`, whose output goes to `work_dir`'s job directory.
    pub fn of(
        work_dir: &Path,
        spec: &hetsched_proto::TaskSpec,
        a: &hetsched_proto::Assignment,
    ) -> Self {
        Self {
            file: path(
                &work_dir.join(format!("job-{}", spec.job_id)),
                &spec.app,
                a.process,
                a.attempt,
            ),
            index: a.index,
        }
    }

    /// Writes `flags` as its byte. A failure is logged, not the task's: its output is captured
    /// all the same, and only a read of a stream it printed nothing on would then report the
    /// output as gone.
    pub fn mark(&self, flags: u8) {
        if let Err(e) = mark(&self.file, self.index, flags) {
            tracing::warn!(
                file = %self.file.display(),
                "cannot record that task index {} ran here: {e}",
                self.index
            );
        }
    }

    /// Its process started: a missing capture file is now a stream it has not printed on yet,
    /// not output that is gone.
    pub fn started(&self) {
        self.mark(STARTED);
    }

    /// It ended before its process started: it printed nothing on either stream.
    pub fn never_started(&self) {
        self.mark(NEVER_STARTED);
    }

    /// It ended, its streams going to `targets` (`captured`: their capture files' paths,
    /// stdout's then stderr's), recorded so that a file removed later reads as gone, not as
    /// silence. A stream printed nothing here when nothing of it was written here: a captured
    /// one whose file does not exist (the file is made at the first byte), and one sent to its
    /// application's own file whose pointer is not in its capture file's place — the file was
    /// never opened here (the pointer is written once it is: an offloaded attempt interrupted
    /// before its output came back, [`crate::accel::offload`]).
    pub fn ended(&self, targets: &[crate::launch::StreamTo; 2], captured: [&Path; 2]) {
        use crate::launch::StreamTo;
        let missing = |p: &Path| {
            std::fs::symlink_metadata(p).is_err_and(|e| e.kind() == std::io::ErrorKind::NotFound)
        };
        let mut flags = STARTED | ENDED;
        for ((target, captured), silent) in
            targets.iter().zip(captured).zip([SILENT_OUT, SILENT_ERR])
        {
            let nothing_written = match target {
                StreamTo::Captured(p) => missing(p),
                StreamTo::File(_) => missing(&crate::launch::pointer_path(captured)),
                StreamTo::Discarded => false,
            };
            if nothing_written {
                flags |= silent;
            }
        }
        self.mark(flags);
    }
}

/// What record `file` says of task `index` (the job directory being `file`'s directory's
/// parent).
pub fn read(file: &Path, index: u32) -> std::io::Result<Record> {
    let dir_missing = file.parent().map(std::fs::symlink_metadata);
    if let Some(Err(e)) = dir_missing {
        return if e.kind() == std::io::ErrorKind::NotFound {
            Ok(Record::Unrecorded)
        } else {
            Err(e)
        };
    }
    let f = match crate::workdir::open_regular(file, false) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Record::None),
        Err(e) => return Err(e),
    };
    let mut byte = [0u8];
    // Past the end, or in a hole: no byte was written there.
    let n = f.read_at(&mut byte, u64::from(index))?;
    let b = if n == 1 { byte[0] } else { 0 };
    Ok(if b & ENDED != 0 {
        Record::Ended {
            silent_out: b & SILENT_OUT != 0,
            silent_err: b & SILENT_ERR != 0,
        }
    } else if b & STARTED != 0 {
        Record::Running
    } else {
        Record::None
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use hetsched_core::testkit::ScratchDir;

    /// A record reads as the bytes written at the task's offset; other tasks' bytes, holes and
    /// what lies past the end are nobody's; a job directory without records reads as one that
    /// predates them, and nothing is written there.
    #[test]
    fn each_task_reads_its_own_byte_and_an_old_directory_reads_as_unrecorded() {
        let dir = ScratchDir::new("ran", "record");
        let job = dir.join("job-1");
        std::fs::create_dir_all(&job).expect("job dir");
        let file = path(&job, "sim", 0, 1);
        mark(&file, 3, STARTED).expect("mark unrecorded");
        assert!(!file.exists(), "nothing written without {DIR}");
        assert_eq!(read(&file, 3).expect("read"), Record::Unrecorded);

        std::fs::create_dir(job.join(DIR)).expect("records");
        assert_eq!(read(&file, 3).expect("read"), Record::None);
        mark(&file, 3, STARTED).expect("mark");
        mark(&file, 1_000_000, STARTED).expect("mark far");
        assert_eq!(read(&file, 3).expect("read"), Record::Running);
        assert_eq!(read(&file, 2).expect("read"), Record::None);
        assert_eq!(read(&file, 4_000_000).expect("read"), Record::None);
        mark(&file, 3, STARTED | ENDED | SILENT_ERR).expect("end");
        assert_eq!(
            read(&file, 3).expect("read"),
            Record::Ended {
                silent_out: false,
                silent_err: true
            }
        );
        // Another attempt, another process: records of their own.
        assert_eq!(
            read(&path(&job, "sim", 0, 2), 3).expect("read"),
            Record::None
        );
        assert_ne!(path(&job, "sim", 2, 1), file);
    }
}
