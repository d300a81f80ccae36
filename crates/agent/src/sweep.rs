//! Deleting what purged jobs left in the work directory.
//!
//! Jobs leave files with the agents that ran them: a batch task's stdout and stderr
//! (`WORK_DIR/job-J/`), a divisible job's chunk files (`WORK_DIR/divisible/job-J/`) and a
//! workflow's instance directories with their outputs (`WORK_DIR/wf/J/`). While the job is on
//! the server they are what `hetsched log` reads; once it is purged (`hetsched purge`, or the
//! server's `[retention]` rule) nothing can reach them any more, so an agent that kept them would
//! fill its disk with history no one can read.
//!
//! The server's heartbeat replies carry a purge epoch that changes with every purge and across
//! server starts. When the agent sees a new one (and once at its start) it lists the jobs whose
//! files its work directory holds, asks the server which of them were purged (`PurgedJobs`, in
//! calls of at most [`pb::MAX_PURGED_JOBS_ASKED`] ids) and deletes exactly those. A job the server
//! does not know (a work directory that served another server) is kept: only the server that ran
//! a job decides that its files may go.

use hetsched_proto as pb;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use tracing::{info, warn};

/// The directories of each job in `work_dir` (`job-J`, `divisible/job-J`, `wf/J`), by job id.
/// Entries that are not directories, or not named so, are left alone.
pub fn job_dirs(work_dir: &Path) -> BTreeMap<u64, Vec<PathBuf>> {
    let mut found: BTreeMap<u64, Vec<PathBuf>> = BTreeMap::new();
    let places: [(PathBuf, &str); 3] = [
        (work_dir.to_path_buf(), "job-"),
        (work_dir.join("divisible"), "job-"),
        (work_dir.join("wf"), ""),
    ];
    for (dir, prefix) in places {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            // A real directory only: a symbolic link planted here is not followed or removed.
            if !entry.file_type().is_ok_and(|t| t.is_dir()) {
                continue;
            }
            let name = entry.file_name();
            let Some(id) = name
                .to_str()
                .and_then(|n| n.strip_prefix(prefix))
                .filter(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
                .and_then(|n| n.parse::<u64>().ok())
            else {
                continue;
            };
            found.entry(id).or_default().push(entry.path());
        }
    }
    found
}

/// Removes `dirs` (what purged jobs left); returns how many were removed. A failure is logged
/// and the rest go on.
fn remove(dirs: &[PathBuf]) -> usize {
    let mut removed = 0;
    for d in dirs {
        match std::fs::remove_dir_all(d) {
            Ok(()) => removed += 1,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => warn!(dir = %d.display(), "cannot delete a purged job's files: {e}"),
        }
    }
    removed
}

/// The agent's client of the server, as its heartbeats use it.
pub type Client = pb::agent_client::AgentClient<
    tonic::service::interceptor::InterceptedService<
        tonic::transport::Channel,
        pb::TokenInterceptor,
    >,
>;

/// Who asks: the node's id and the identity it registered with.
#[derive(Clone, Debug)]
pub struct Asker {
    /// The node's id.
    pub node_id: u32,
    /// The identity the node registered with.
    pub identity: String,
}

/// One sweep: lists the jobs whose files `work_dir` holds, asks the server which were purged,
/// deletes their files. Returns the purged jobs whose files were deleted.
pub async fn sweep(
    client: &mut Client,
    asker: &Asker,
    work_dir: &Path,
) -> Result<Vec<u64>, tonic::Status> {
    let dir = work_dir.to_path_buf();
    let mut held = tokio::task::spawn_blocking(move || job_dirs(&dir))
        .await
        .map_err(|e| tonic::Status::internal(format!("listing the work directory: {e}")))?;
    if held.is_empty() {
        return Ok(Vec::new());
    }
    let ids: Vec<u64> = held.keys().copied().collect();
    let mut purged = Vec::new();
    for batch in ids.chunks(pb::MAX_PURGED_JOBS_ASKED) {
        let reply = client
            .purged_jobs(pb::PurgedJobsRequest {
                node_id: asker.node_id,
                identity: asker.identity.clone(),
                job_ids: batch.to_vec(),
                // A registered node asks by its id; the name is `agent --check`'s.
                name: String::new(),
            })
            .await?
            .into_inner();
        // Only ids this agent asked about: a reply naming others deletes nothing more.
        purged.extend(reply.purged.into_iter().filter(|id| held.contains_key(id)));
    }
    purged.sort_unstable();
    purged.dedup();
    if purged.is_empty() {
        return Ok(purged);
    }
    let dirs: Vec<PathBuf> = purged
        .iter()
        .filter_map(|id| held.remove(id))
        .flatten()
        .collect();
    let removed = tokio::task::spawn_blocking(move || remove(&dirs))
        .await
        .map_err(|e| tonic::Status::internal(format!("deleting purged jobs' files: {e}")))?;
    info!(jobs = ?purged, directories = removed, "deleted the files of purged jobs");
    Ok(purged)
}

/// The sweeps of one agent: the last purge epoch swept, and whether a sweep runs now.
#[derive(Debug, Default)]
pub struct Sweeper {
    swept: AtomicU64,
    busy: AtomicBool,
}

impl Sweeper {
    /// The server's heartbeat reply said `epoch` (0: an older server, or a paused one): starts a
    /// sweep in the background if this epoch was not swept and none runs. A failed sweep is
    /// logged and not retried before the epoch changes again (the next purge, or a server
    /// restart), so a server without `PurgedJobs` costs one call per epoch.
    pub fn seen(self: &Arc<Self>, epoch: u64, client: &Client, asker: Asker, work_dir: &Path) {
        if epoch == 0 || self.swept.load(Ordering::Relaxed) == epoch {
            return;
        }
        if self.busy.swap(true, Ordering::AcqRel) {
            return;
        }
        let (me, mut client, work_dir) = (self.clone(), client.clone(), work_dir.to_path_buf());
        tokio::spawn(async move {
            if let Err(e) = sweep(&mut client, &asker, &work_dir).await {
                warn!("purged jobs' files are kept for now: {e}");
            }
            me.swept.store(epoch, Ordering::Relaxed);
            me.busy.store(false, Ordering::Release);
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hetsched_core::testkit::ScratchDir;

    #[test]
    fn only_the_directories_named_for_jobs_are_listed() {
        let dir = ScratchDir::new("sweep", "job-dirs");
        for d in [
            "job-3",
            "job-12",
            "divisible/job-3",
            "wf/12/a-0/out",
            "wf/7",
            "job-",
            "job-x1",
            "stream/job-4",
            "jobs-5",
        ] {
            std::fs::create_dir_all(dir.join(d)).expect("mkdir");
        }
        std::fs::write(dir.join("job-9"), "a file, not a job's directory").expect("write");
        std::os::unix::fs::symlink(dir.join("job-3"), dir.join("job-8")).expect("symlink");
        std::fs::write(dir.join("running.tasks"), "").expect("write");
        let found = job_dirs(&dir);
        let ids: Vec<u64> = found.keys().copied().collect();
        assert_eq!(ids, vec![3, 7, 12]);
        assert_eq!(
            found[&3],
            vec![dir.join("job-3"), dir.join("divisible/job-3")]
        );
        assert_eq!(found[&12], vec![dir.join("job-12"), dir.join("wf/12")]);
        assert_eq!(remove(&found[&12]), 2);
        assert!(!dir.join("wf/12").exists() && !dir.join("job-12").exists());
        assert!(dir.join("job-3").exists() && dir.join("wf/7").exists());
    }
}
