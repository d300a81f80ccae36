//! `hetsched server --set-aside JOB` and `--set-aside-topology NAME`: the operator's way past a
//! stored job or topology whose file this version no longer reads (a rule made stricter between
//! versions), when running the version that accepted it is not an option.
//!
//! A restart re-reads every unpurged file and refuses to start on one it cannot read
//! ([`StateError::StoredJobUnreadable`], [`StateError::StoredTopologyUnreadable`]) rather than
//! drop the job unseen. Named here, before the state is restored, such a job or topology is
//! taken out of the store without losing it: its file is written to `DATA_DIR/set-aside/`
//! (`job-N.toml`, `topology-NAME.toml`) beside a record of what it was (`.json`: id, kind,
//! owner, origin, submission time, state, tasks by state, why it no longer reads), a divisible
//! job's files are moved there too, and then its rows go in one transaction through the kinds'
//! own purge code ([`crate::jobs::batch::delete_job_rows`] and its kin), leaving the tombstone a
//! purge leaves: its id and submission key are never handed out again.
//!
//! The jobs that run after a set-aside job (`submit --after`, `--after-any`, `--after-notok`,
//! `--after-corr`) read it as it stood: the same transaction records its end in
//! `set_aside_ends` — `unfinished` for one pending or running, else `completed`, `failed` or
//! `cancelled` — and the purged check answers that end for it
//! ([`crate::jobs::Batch::purged_end`]) rather than "purged" (which counts as completed, as
//! only finished jobs are purged). One set aside unfinished counts as cancelled
//! ([`crate::jobs::JobEnd::SetAside`]): the jobs waiting `--after` it are cancelled saying it
//! was set aside, those waiting `--after-any` or `--after-notok` it are released — a warning
//! names each at the set-aside. One set aside finished keeps counting as it ended.
//!
//! Only what really fails to read is set aside: a named job or topology whose file still reads
//! refuses the start, saying so, so the flag cannot delete live work. A job named again at a
//! later start (the flag left in a service file) is already a tombstone: it is passed over with
//! a log line. Nothing is written before every name has been checked.

use crate::config::ServerConfig;
use crate::jobs;
use crate::jobs::JobEnd;
use crate::state::StateError;
use crate::store::{Store, StoreError, TaskState};
use rusqlite::{OptionalExtension, params};
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use tracing::{info, warn};

/// The directory under `DATA_DIR` that set-aside files go to.
pub const DIR: &str = "set-aside";

/// How many numbered names (`job-4.2.toml`, …) are tried before giving up: a directory with
/// that many copies of one job is not one an operator meant.
const MAX_SUFFIX: u32 = 1000;

/// What was set aside, and where it went.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SetAside {
    /// `job 4` or ``topology `pipe` ``, as messages name it.
    pub what: String,
    /// The stored file.
    pub file: PathBuf,
    /// The record of what it was.
    pub record: PathBuf,
    /// A divisible job's files (inputs, chunks' outputs), moved beside them.
    pub files: Option<PathBuf>,
}

/// How a chosen item's rows go, once its files are written.
enum Rows {
    Batch {
        id: u64,
        tasks: std::ops::Range<u64>,
        apps_end: u32,
    },
    Workflow(u64),
    Divisible(u64),
    Topology(String),
}

/// One job or topology checked and chosen: what to write, and how its rows go.
struct Chosen {
    what: String,
    stem: String,
    text: String,
    record: Value,
    rows: Rows,
    /// A divisible job's file directory, when it has one.
    files: Option<PathBuf>,
    /// A job's id and how it stood, as `set_aside_ends` keeps it ([`end_text`]); `None`: a
    /// topology (no job runs after one).
    end: Option<(u64, JobEnd)>,
}

/// How a job set aside stood, as `set_aside_ends` stores it: [`JobEnd::SetAside`] for one
/// pending or running (`unfinished`), else its end.
fn end_text(end: JobEnd) -> &'static str {
    match end {
        JobEnd::Completed => "completed",
        JobEnd::Failed => "failed",
        JobEnd::Cancelled => "cancelled",
        // (Purged is never recorded: a purged job is not set aside.)
        JobEnd::Unfinished | JobEnd::SetAside | JobEnd::Purged => "unfinished",
    }
}

/// The jobs set aside at earlier starts, each with the end it is read as by the jobs that run
/// after it (see the module documentation): read at every start.
///
/// # Errors
/// [`StoreError`] when the table cannot be read, or holds an end this version does not know.
pub fn ends(conn: &rusqlite::Connection) -> Result<HashMap<u64, JobEnd>, StoreError> {
    let mut q = conn.prepare("SELECT job, end FROM set_aside_ends")?;
    let rows = q.query_map([], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?)))?;
    let mut out = HashMap::new();
    for row in rows {
        let (job, end) = row?;
        let end = match end.as_str() {
            "unfinished" => JobEnd::SetAside,
            "completed" => JobEnd::Completed,
            "failed" => JobEnd::Failed,
            "cancelled" => JobEnd::Cancelled,
            other => {
                return Err(StoreError::Corrupt(format!(
                    "set_aside_ends: job {job} has the end `{other}`"
                )));
            }
        };
        out.insert(job.max(0) as u64, end);
    }
    Ok(out)
}

/// The unfinished jobs stored that wait for job `id` (`--after`, `--after-any`,
/// `--after-notok`, `--after-corr`), each with how its tasks will read it, for the warning
/// when `id` is set aside unfinished. A job waits for one named only until that one ended,
/// and ids only grow: only later jobs, not cancelled, that have not started are looked at.
fn waiting_on(conn: &rusqlite::Connection, id: u64) -> Result<Vec<(u64, String)>, StoreError> {
    let key = id as i64;
    let named = |lists: [&str; 4]| -> Result<Vec<&'static str>, StoreError> {
        let mut how = Vec::new();
        for (list, flag) in
            lists
                .iter()
                .zip(["--after", "--after-any", "--after-notok", "--after-corr"])
        {
            if crate::store::parse_list::<u64>(list, "a job list")?.contains(&id) {
                how.push(flag);
            }
        }
        Ok(how)
    };
    let mut out = Vec::new();
    let mut found = |job: i64, how: Vec<&'static str>| {
        if how.is_empty() {
            return;
        }
        // What the gates will do, the strongest first (`--after` cancels the whole job).
        let then = if how.contains(&"--after") {
            "it is cancelled, as after a cancelled job"
        } else if how.contains(&"--after-corr") {
            "its tasks waiting for that job's are cancelled, as after a cancelled job"
        } else {
            "it no longer waits for that job"
        };
        out.push((job.max(0) as u64, format!("{}: {then}", how.join(", "))));
    };
    {
        let mut q = conn.prepare(
            "SELECT j.id, j.after, j.after_any, j.after_notok, j.after_corr FROM jobs j
             WHERE j.id > ?1 AND j.purged = 0 AND j.cancelled = 0 AND EXISTS (
                 SELECT 1 FROM tasks t JOIN apps a ON t.app = a.id
                 WHERE a.job = j.id AND t.state = ?2)",
        )?;
        let rows = q.query_map(params![key, TaskState::Pending as i64], |r| {
            Ok((
                r.get::<_, i64>(0)?,
                [
                    r.get::<_, String>(1)?,
                    r.get::<_, String>(2)?,
                    r.get::<_, String>(3)?,
                    r.get::<_, String>(4)?,
                ],
            ))
        })?;
        for row in rows {
            let (job, lists) = row?;
            found(job, named([&lists[0], &lists[1], &lists[2], &lists[3]])?);
        }
    }
    for sql in [
        "SELECT id, after, after_any, after_notok FROM wf_jobs
         WHERE id > ?1 AND purged = 0 AND cancelled = 0 AND started = 0",
        "SELECT id, after, after_any, after_notok FROM div_jobs
         WHERE id > ?1 AND started = 0 AND state NOT IN ('completed', 'failed', 'cancelled', 'purged')",
    ] {
        let mut q = conn.prepare(sql)?;
        let rows = q.query_map(params![key], |r| {
            Ok((
                r.get::<_, i64>(0)?,
                [
                    r.get::<_, String>(1)?,
                    r.get::<_, String>(2)?,
                    r.get::<_, String>(3)?,
                ],
            ))
        })?;
        for row in rows {
            let (job, lists) = row?;
            found(job, named([&lists[0], &lists[1], &lists[2], ""])?);
        }
    }
    out.sort_unstable();
    Ok(out)
}

fn invalid(msg: String) -> StateError {
    StateError::Invalid(msg)
}

fn io(path: &Path, e: std::io::Error) -> StateError {
    invalid(format!(
        "setting aside: {}: {e}. The store was not changed",
        path.display()
    ))
}

/// Sets aside the jobs and topologies `config` names ([`ServerConfig::set_aside`],
/// [`ServerConfig::set_aside_topologies`]) from `store`, before the state is restored from it.
/// Returns what was set aside (nothing when nothing is named).
///
/// # Errors
/// [`StateError::Invalid`] when a name is unknown or its file still reads (nothing is changed
/// then), or a file cannot be written (the store is not changed); [`StateError::Store`] when
/// the transaction fails (the files written stay, the store as it was).
pub fn apply(config: &ServerConfig, store: &mut Store) -> Result<Vec<SetAside>, StateError> {
    if config.set_aside.is_empty() && config.set_aside_topologies.is_empty() {
        return Ok(Vec::new());
    }
    let dir = config.data_dir.join(DIR);
    let mut chosen = Vec::new();
    let mut jobs_named: Vec<u64> = config.set_aside.clone();
    jobs_named.sort_unstable();
    jobs_named.dedup();
    for id in jobs_named {
        if let Some(c) = check_job(config, store.conn(), id)? {
            chosen.push(c);
        }
    }
    let mut topologies: Vec<&String> = config.set_aside_topologies.iter().collect();
    topologies.sort_unstable();
    topologies.dedup();
    for name in topologies {
        if let Some(c) = check_topology(store.conn(), &dir, name)? {
            chosen.push(c);
        }
    }
    if chosen.is_empty() {
        return Ok(Vec::new());
    }
    // Files first, the rows after: a crash between them leaves a copy and the job still
    // stored (the next start refuses it again, and setting it aside again writes a new copy),
    // never rows gone without their file.
    if !dir.is_dir() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dir)
            .map_err(|e| io(&dir, e))?;
    }
    // The jobs that wait for one set aside unfinished, read while its rows are there: each is
    // named in a warning once the set-aside is stored.
    let mut waiters = Vec::new();
    for c in &chosen {
        if let Some((id, JobEnd::SetAside)) = c.end {
            // Only for a log line: a row it cannot read does not stop the start.
            match waiting_on(store.conn(), id) {
                Ok(found) => waiters.extend(found.into_iter().map(|(job, how)| (id, job, how))),
                Err(e) => warn!(
                    job = id,
                    "setting aside job {id}: the jobs waiting for it could not be listed: {e}"
                ),
            }
        }
    }
    let mut done = Vec::with_capacity(chosen.len());
    for c in &mut chosen {
        let (file, record) = write_pair(&dir, c)?;
        // A divisible job's directory would be deleted at the next start once its row is a
        // tombstone ([`crate::jobs::Divisible::restore`]): it moves here first.
        let files = match c.files.take() {
            Some(from) => {
                let to = file.with_extension("files");
                std::fs::rename(&from, &to).map_err(|e| io(&from, e))?;
                Some(to)
            }
            None => None,
        };
        done.push(SetAside {
            what: c.what.clone(),
            file,
            record,
            files,
        });
    }
    if let Ok(d) = std::fs::File::open(&dir) {
        // The directory's entries reach the disk before the rows that name them go.
        let _ = d.sync_all();
    }
    store.transaction(|tx| {
        for c in &chosen {
            delete_rows(tx, &c.rows)?;
            // With its rows gone, this is what the jobs after it read ([`ends`]).
            if let Some((id, end)) = c.end {
                tx.execute(
                    "INSERT OR REPLACE INTO set_aside_ends(job, end) VALUES (?1, ?2)",
                    params![id as i64, end_text(end)],
                )?;
            }
        }
        Ok(())
    })?;
    for s in &done {
        warn!(
            file = %s.file.display(),
            record = %s.record.display(),
            files = %s.files.as_ref().map_or(String::new(), |f| f.display().to_string()),
            "{} set aside: its file no longer reads under this version; its rows left the store \
             (as a purge's), its file and a record of it are kept",
            s.what
        );
    }
    for (id, job, how) in waiters {
        warn!(
            job,
            set_aside = id,
            "job {job} runs after job {id}, set aside unfinished, which counts as cancelled for \
             the jobs after it: {how}"
        );
    }
    Ok(done)
}

/// Deletes one chosen item's rows through its kind's purge code.
fn delete_rows(tx: &rusqlite::Transaction, rows: &Rows) -> Result<(), StoreError> {
    match rows {
        Rows::Batch {
            id,
            tasks,
            apps_end,
        } => {
            // The tombstone says where its ids end: the next start does not read its file.
            tx.execute(
                "UPDATE jobs SET apps_end = ?2, tasks_end = ?3 WHERE id = ?1",
                params![*id as i64, apps_end, tasks.end as i64],
            )?;
            jobs::batch::delete_job_rows(tx, *id, tasks.clone())?;
            crate::users::Users::delete_owners(tx, &[*id])?;
            crate::job_nonces::JobNonces::delete(tx, &[*id])
        }
        Rows::Workflow(id) => {
            jobs::workflow::delete_job_rows(tx, *id)?;
            crate::users::Users::delete_owners(tx, &[*id])?;
            crate::job_nonces::JobNonces::delete(tx, &[*id])
        }
        Rows::Divisible(id) => {
            jobs::divisible::delete_job_rows(tx, *id)?;
            crate::users::Users::delete_owners(tx, &[*id])?;
            crate::job_nonces::JobNonces::delete(tx, &[*id])
        }
        Rows::Topology(name) => {
            jobs::topology::delete_rows(tx, name)?;
            crate::users::Users::delete_topology_owner(tx, name)
        }
    }
}

/// Writes a chosen item's file and record under the first free name `STEM[.N].{toml,json}`,
/// mode 0600, never over an existing file. Returns their paths.
fn write_pair(dir: &Path, c: &Chosen) -> Result<(PathBuf, PathBuf), StateError> {
    for n in 1..=MAX_SUFFIX {
        let stem = if n == 1 {
            c.stem.clone()
        } else {
            format!("{}.{n}", c.stem)
        };
        let file = dir.join(format!("{stem}.toml"));
        let record = dir.join(format!("{stem}.json"));
        let files = dir.join(format!("{stem}.files"));
        if file.exists() || record.exists() || files.exists() {
            continue;
        }
        let mut meta = c.record.clone();
        meta["file"] = json!(file.display().to_string());
        if c.files.is_some() {
            meta["files"] = json!(files.display().to_string());
        }
        let meta = serde_json::to_string_pretty(&meta)
            .map_err(|e| invalid(format!("setting aside {}: its record: {e}", c.what)))?;
        match create_new(&file, c.text.as_bytes()) {
            Ok(()) => {}
            // Taken since the look above: the next name.
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(io(&file, e)),
        }
        if let Err(e) = create_new(&record, meta.as_bytes()) {
            // The pair goes together or not at all: a lone file would read as set aside.
            let _ = std::fs::remove_file(&file);
            if e.kind() == std::io::ErrorKind::AlreadyExists {
                continue;
            }
            return Err(io(&record, e));
        }
        return Ok((file, record));
    }
    Err(invalid(format!(
        "setting aside {}: {} already holds {MAX_SUFFIX} files named {}*: move them away. The \
         store was not changed",
        c.what,
        dir.display(),
        c.stem
    )))
}

/// Creates `path` (never over an existing file), mode 0600, with `data`, on the disk.
fn create_new(path: &Path, data: &[u8]) -> std::io::Result<()> {
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)?;
    f.write_all(data)?;
    f.sync_all()
}

/// How many rows of `table` (`wf_instances` or `div_chunks`, whose `state` is text) job `key`
/// has in each state, for a set-aside record.
fn count_by_state(
    conn: &rusqlite::Connection,
    table: &str,
    key: i64,
) -> Result<Vec<(String, u64)>, StoreError> {
    let mut q = conn.prepare(&format!(
        "SELECT state, COUNT(*) FROM {table} WHERE job = ?1 GROUP BY state"
    ))?;
    let rows = q.query_map(params![key], |r| {
        Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?.max(0) as u64))
    })?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// The owner of job `id` as its row names it (no row: the admin's).
fn job_owner(conn: &rusqlite::Connection, id: u64) -> Result<String, StoreError> {
    Ok(conn
        .query_row(
            "SELECT owner FROM job_owners WHERE job = ?1",
            params![id as i64],
            |r| r.get::<_, String>(0),
        )
        .optional()?
        .unwrap_or_else(|| crate::users::ADMIN.to_string()))
}

/// Counts of `(state, count)` rows by state name.
fn counts(rows: Vec<(String, u64)>) -> BTreeMap<String, u64> {
    let mut m = BTreeMap::new();
    for (s, n) in rows {
        *m.entry(s).or_insert(0) += n;
    }
    m
}

/// Why a stored file no longer reads (`read`: what its kind's reader said of it), for the
/// set-aside record. A file that still reads is refused instead, naming `what` and the way
/// past it (`way`), so that the flag cannot delete live work.
fn why_unreadable<T, E: std::fmt::Display>(
    read: Result<T, E>,
    what: &str,
    flag: &str,
    way: &str,
) -> Result<String, StateError> {
    match read {
        Ok(_) => Err(invalid(format!(
            "{flag}: {what} still reads under this version of hetsched, so the server starts \
             with it: nothing was set aside (only a job or topology whose file this version \
             refuses may be; {way})"
        ))),
        Err(e) => Ok(e.to_string()),
    }
}

/// What to do instead with job `id`, which still reads.
fn job_way(id: u64) -> String {
    format!("`hetsched cancel {id}` stops it, `hetsched purge {id}` drops it once finished")
}

/// Checks job `id`: `None` when it was purged (or set aside) already, the chosen item when its
/// file no longer reads; an error when there is no such job or its file reads.
fn check_job(
    config: &ServerConfig,
    conn: &rusqlite::Connection,
    id: u64,
) -> Result<Option<Chosen>, StateError> {
    let flag = format!("--set-aside {id}");
    let db = |e: rusqlite::Error| StateError::Store(StoreError::from(e));
    let Ok(key) = i64::try_from(id) else {
        return Err(invalid(format!("{flag}: no job {id} in the store")));
    };
    let passed = |kind: &str| {
        info!(
            job = id,
            "{flag}: the {kind} job is purged or set aside already: nothing to do (the flag may go)"
        );
        Ok(None)
    };
    let now_ns = crate::state::now_ns();
    // A batch job.
    let batch = conn
        .query_row(
            "SELECT origin, text, workdir, submitted_ns, first_app, first_task, cancelled, purged,
                    name, submission_key FROM jobs WHERE id = ?1",
            params![key],
            |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, String>(2)?,
                    r.get::<_, i64>(3)?,
                    r.get::<_, u32>(4)?,
                    r.get::<_, i64>(5)?,
                    r.get::<_, bool>(6)?,
                    r.get::<_, i64>(7)?,
                    r.get::<_, Option<String>>(8)?,
                    r.get::<_, Option<String>>(9)?,
                ))
            },
        )
        .optional()
        .map_err(db)?;
    if let Some((
        origin,
        text,
        workdir,
        submitted,
        first_app,
        first_task,
        cancelled,
        purged,
        name,
        key_s,
    )) = batch
    {
        if purged != 0 {
            return passed("batch");
        }
        let why = why_unreadable(
            jobs::batch::read_stored(&origin, &text, first_app, config.profile_estimate.0.max(1)),
            &format!("job {id}"),
            &flag,
            &job_way(id),
        )?;
        let first_task = first_task.max(0) as u64;
        // Its ids: every task row of its applications (rows stay until a purge), and its
        // applications' rows (which stay after it, keeping their ids taken).
        let (apps_end, tasks_end): (Option<u32>, Option<i64>) = conn
            .query_row(
                "SELECT (SELECT MAX(id) FROM apps WHERE job = ?1),
                        (SELECT MAX(t.id) FROM tasks t JOIN apps a ON t.app = a.id WHERE a.job = ?1)",
                params![key],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .map_err(db)?;
        let apps_end = apps_end.map_or(first_app, |a| a.saturating_add(1));
        let tasks_end = tasks_end.map_or(first_task, |t| (t.max(0) as u64).saturating_add(1));
        let mut by_state: Vec<(String, u64)> = Vec::new();
        {
            let mut q = conn
                .prepare(
                    "SELECT state, COUNT(*) FROM tasks WHERE id >= ?1 AND id < ?2 GROUP BY state",
                )
                .map_err(db)?;
            let rows = q
                .query_map(params![first_task as i64, tasks_end as i64], |r| {
                    Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?))
                })
                .map_err(db)?;
            for row in rows {
                let (state, n) = row.map_err(db)?;
                let state = TaskState::from_code(state)?;
                by_state.push((state.as_str().to_string(), n.max(0) as u64));
            }
        }
        let tasks = counts(by_state);
        let n = |s: &str| tasks.get(s).copied().unwrap_or(0);
        let (state, end) = if n("running") > 0 {
            ("running", JobEnd::SetAside)
        } else if n("pending") > 0 {
            ("pending", JobEnd::SetAside)
        } else if cancelled || n("cancelled") > 0 {
            ("cancelled", JobEnd::Cancelled)
        } else if n("failed") > 0 {
            ("failed", JobEnd::Failed)
        } else {
            ("completed", JobEnd::Completed)
        };
        return Ok(Some(Chosen {
            what: format!("job {id}"),
            stem: format!("job-{id}"),
            record: json!({
                "set_aside": "job",
                "id": id,
                "kind": "batch",
                "name": name,
                "owner": job_owner(conn, id)?,
                "origin": origin,
                "workdir": workdir,
                "submission_key": key_s,
                "submitted_ns": submitted.max(0),
                "state": state,
                "tasks": tasks,
                "why": why,
                "set_aside_ns": now_ns,
                "version": env!("CARGO_PKG_VERSION"),
            }),
            text,
            rows: Rows::Batch {
                id,
                tasks: first_task..tasks_end,
                apps_end,
            },
            files: None,
            end: Some((id, end)),
        }));
    }
    // A workflow.
    let wf = conn
        .query_row(
            "SELECT name, origin, text, workdir, submitted_ns, finished_ns, cancelled, purged, key
             FROM wf_jobs WHERE id = ?1",
            params![key],
            |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, String>(2)?,
                    r.get::<_, String>(3)?,
                    r.get::<_, i64>(4)?,
                    r.get::<_, i64>(5)?,
                    r.get::<_, i64>(6)?,
                    r.get::<_, i64>(7)?,
                    r.get::<_, String>(8)?,
                ))
            },
        )
        .optional()
        .map_err(db)?;
    if let Some((name, origin, text, workdir, submitted, finished, cancelled, purged, key_s)) = wf {
        if purged != 0 {
            return passed("workflow");
        }
        let why = why_unreadable(
            jobs::workflow::read_stored(&origin, &text),
            &format!("workflow job {id}"),
            &flag,
            &job_way(id),
        )?;
        let by_state = count_by_state(conn, "wf_instances", key)?;
        let state = if cancelled != 0 {
            "cancelled"
        } else if finished > 0 {
            "finished"
        } else {
            "unfinished"
        };
        // As the workflow kind reads its end: finished (its finish time set once every
        // instance ended; a resubmission clears it), then cancelled if an instance was, failed
        // if one failed, else completed. (Instances that never ran may have no row: the counts
        // say nothing of an unfinished one.)
        let count = |s: &str| {
            by_state
                .iter()
                .filter(|(st, _)| st == s)
                .map(|(_, n)| *n)
                .sum::<u64>()
        };
        let end = if finished <= 0 {
            JobEnd::SetAside
        } else if cancelled != 0 || count("cancelled") > 0 {
            JobEnd::Cancelled
        } else if count("failed") > 0 {
            JobEnd::Failed
        } else {
            JobEnd::Completed
        };
        return Ok(Some(Chosen {
            what: format!("job {id}"),
            stem: format!("job-{id}"),
            record: json!({
                "set_aside": "job",
                "id": id,
                "kind": "workflow",
                "name": name,
                "owner": job_owner(conn, id)?,
                "origin": origin,
                "workdir": workdir,
                "submission_key": (!key_s.is_empty()).then_some(key_s),
                "submitted_ns": submitted.max(0),
                "finished_ns": finished.max(0),
                "state": state,
                "instances": counts(by_state),
                "why": why,
                "set_aside_ns": now_ns,
                "version": env!("CARGO_PKG_VERSION"),
            }),
            text,
            rows: Rows::Workflow(id),
            files: None,
            end: Some((id, end)),
        }));
    }
    // A divisible job.
    let div = conn
        .query_row(
            "SELECT origin, text, name, state, message, submitted_ns, finished_ns,
                    submission_key FROM div_jobs WHERE id = ?1",
            params![key],
            |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, String>(2)?,
                    r.get::<_, String>(3)?,
                    r.get::<_, String>(4)?,
                    r.get::<_, i64>(5)?,
                    r.get::<_, i64>(6)?,
                    r.get::<_, Option<String>>(7)?,
                ))
            },
        )
        .optional()
        .map_err(db)?;
    if let Some((origin, text, name, state, message, submitted, finished, key_s)) = div {
        if state == jobs::divisible::PURGED {
            return passed("divisible");
        }
        let why = why_unreadable(
            jobs::divisible::read_stored(&origin, &text),
            &format!("divisible job {id}"),
            &flag,
            &job_way(id),
        )?;
        let by_state = count_by_state(conn, "div_chunks", key)?;
        let files = jobs::divisible::job_dir(&config.data_dir.join("divisible"), id);
        // As the divisible kind reads its end.
        let end = match state.as_str() {
            "completed" => JobEnd::Completed,
            "failed" => JobEnd::Failed,
            "cancelled" => JobEnd::Cancelled,
            _ => JobEnd::SetAside,
        };
        return Ok(Some(Chosen {
            what: format!("job {id}"),
            stem: format!("job-{id}"),
            record: json!({
                "set_aside": "job",
                "id": id,
                "kind": "divisible",
                "name": name,
                "owner": job_owner(conn, id)?,
                "origin": origin,
                "submission_key": key_s,
                "submitted_ns": submitted.max(0),
                "finished_ns": finished.max(0),
                "state": state,
                "message": message,
                "chunks": counts(by_state),
                "why": why,
                "set_aside_ns": now_ns,
                "version": env!("CARGO_PKG_VERSION"),
            }),
            text,
            rows: Rows::Divisible(id),
            files: files.is_dir().then_some(files),
            end: Some((id, end)),
        }));
    }
    Err(invalid(format!(
        "{flag}: no job {id} in the store (`hetsched jobs` under the version that wrote it lists \
         them)"
    )))
}

/// A topology's name as a file name: what is not a letter, digit, `.`, `_` or `-` becomes `_`
/// (a name an older version accepted is not trusted to be a path's part).
fn file_stem(name: &str) -> String {
    let clean: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!("topology-{}", clean.trim_start_matches('.'))
}

/// Checks topology `name`: `None` when it was set aside already (no row, a record in `dir`),
/// the chosen item when its file no longer reads; an error when there is no such topology or
/// its file reads.
fn check_topology(
    conn: &rusqlite::Connection,
    dir: &Path,
    name: &str,
) -> Result<Option<Chosen>, StateError> {
    let flag = format!("--set-aside-topology {name}");
    let db = |e: rusqlite::Error| StateError::Store(StoreError::from(e));
    let record: Option<String> = conn
        .query_row(
            "SELECT record FROM topologies WHERE name = ?1",
            params![name],
            |r| r.get(0),
        )
        .optional()
        .map_err(db)?;
    let stem = file_stem(name);
    let Some(record) = record else {
        if dir.join(format!("{stem}.json")).exists() {
            info!(
                topology = name,
                "{flag}: the topology is set aside already: nothing to do (the flag may go)"
            );
            return Ok(None);
        }
        return Err(invalid(format!(
            "{flag}: no topology `{name}` in the store"
        )));
    };
    // Read as plain JSON: the record is kept whole, whatever this version's fields.
    let rec: Value = serde_json::from_str(&record)
        .map_err(|e| StateError::Store(StoreError::Corrupt(format!("topology {name}: {e}"))))?;
    let field = |k: &str| rec.get(k).and_then(Value::as_str).unwrap_or("").to_string();
    let (origin, text) = (field("origin"), field("text"));
    let why = why_unreadable(
        jobs::topology::read_stored(&origin, &text),
        &format!("topology `{name}`"),
        &flag,
        &format!(
            "`hetsched topology kill {name}` stops it, `hetsched topology purge {name}` drops it \
             once killed"
        ),
    )?;
    let owner: Option<String> = conn
        .query_row(
            "SELECT owner FROM topology_owners WHERE name = ?1",
            params![name],
            |r| r.get(0),
        )
        .optional()
        .map_err(db)?;
    Ok(Some(Chosen {
        what: format!("topology `{name}`"),
        stem,
        record: json!({
            "set_aside": "topology",
            "name": name,
            "owner": owner.unwrap_or_else(|| crate::users::ADMIN.to_string()),
            "origin": origin,
            "submitted_ns": rec.get("submitted_ns").cloned().unwrap_or(Value::Null),
            "state": field("state"),
            "why": why,
            "set_aside_ns": crate::state::now_ns(),
            "version": env!("CARGO_PKG_VERSION"),
            "stored_record": rec,
        }),
        text,
        rows: Rows::Topology(name.to_string()),
        files: None,
        end: None,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::State;
    use crate::state::types::Submission;
    use hetsched_core::testkit::ScratchDir;

    /// The warning at a set-aside names each job still waiting for the job, with what the
    /// gates will do to it; a job that no longer waits (cancelled) is not named.
    #[test]
    fn the_jobs_waiting_for_a_job_are_listed_with_what_befalls_them() {
        let dir = ScratchDir::new("set-aside", "waiting");
        const JOB: &str =
            "[[application]]\nname = \"a\"\ntasks = 2\n[application.cpu]\ncommand = \"true\"\n";
        let sub = |after: &[u64], after_any: &[u64], after_notok: &[u64]| Submission {
            origin: "job.toml".into(),
            text: JOB.into(),
            workdir: "/".into(),
            after: after.to_vec(),
            after_any: after_any.to_vec(),
            after_notok: after_notok.to_vec(),
            ..Default::default()
        };
        let config = ServerConfig {
            data_dir: dir.clone(),
            ..Default::default()
        };
        let (a, after, any, notok, gone) = {
            let mut s = State::open(&config, Store::open(&dir.join("state.db")).expect("store"))
                .expect("state");
            let a = s.on_submit(sub(&[], &[], &[])).expect("a").job_id;
            let after = s.on_submit(sub(&[a], &[], &[])).expect("after").job_id;
            let any = s.on_submit(sub(&[], &[a], &[])).expect("any").job_id;
            let notok = s.on_submit(sub(&[], &[], &[a])).expect("notok").job_id;
            let gone = s.on_submit(sub(&[a], &[], &[])).expect("gone").job_id;
            s.on_cancel(gone).expect("cancel");
            (a, after, any, notok, gone)
        };
        let store = Store::open(&dir.join("state.db")).expect("store");
        let found = waiting_on(store.conn(), a).expect("listed");
        let ids: Vec<u64> = found.iter().map(|(j, _)| *j).collect();
        assert_eq!(ids, vec![after, any, notok], "not {gone}: {found:?}");
        assert!(
            found[0].1.starts_with("--after: it is cancelled"),
            "{found:?}"
        );
        assert!(
            found[1].1.starts_with("--after-any: it no longer waits"),
            "{found:?}"
        );
        assert!(
            found[2].1.starts_with("--after-notok: it no longer waits"),
            "{found:?}"
        );
        assert!(waiting_on(store.conn(), after).expect("none").is_empty());
        drop(store);
    }
}
