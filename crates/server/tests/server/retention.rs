//! Retention of finished jobs (docs/runtime.md, Retention): a finished job's tasks leave memory
//! but the job is still reported; `purge` and the `[retention]` rule delete finished jobs from
//! memory and store, and neither a purge nor a restart runs a succeeded task again.

use crate::common;

use common::{Scratch, beat, heartbeat_request};
use hetsched_proto as pb;
use hetsched_server::ServerConfig;
use hetsched_server::config::RetentionConfig;
use hetsched_server::convert::Wire;
use hetsched_server::state::{State, StateError};
use hetsched_server::store::Store;
use std::path::Path;

fn dir(name: &str) -> Scratch {
    common::scratch("retention", name)
}

fn open_with(d: &Path, retention: Option<RetentionConfig>) -> State {
    let config = ServerConfig {
        data_dir: d.to_path_buf(),
        retention,
        ..Default::default()
    };
    State::open(&config, Store::open(&d.join("state.db")).expect("store")).expect("state")
}

fn open(d: &Path) -> State {
    open_with(d, None)
}

const JOB: &str =
    "[[application]]\nname = \"a\"\ntasks = 3\n[application.cpu]\ncommand = \"true\"\n";

/// Submits a 3-task job and runs it to success on node `n` (3 cores, nothing else running).
fn run_job(s: &mut State, n: u32, key: &str) -> u64 {
    let job = s.submit_keyed("job.toml", JOB, "/", key).expect("submit");
    let ran = common::run_assigned(s, n);
    assert_eq!(ran, 3, "the three tasks are dispatched at once");
    assert_eq!(s.job(job.job_id).expect("job").state, "completed");
    job.job_id
}

fn stored_tasks(d: &Path) -> i64 {
    let conn = rusqlite::Connection::open(d.join("state.db")).expect("db");
    conn.query_row("SELECT COUNT(*) FROM tasks", [], |r| r.get(0))
        .expect("count")
}

fn listed(s: &State) -> Vec<(u64, String)> {
    s.jobs().jobs.into_iter().map(|j| (j.id, j.state)).collect()
}

#[test]
fn a_finished_jobs_tasks_leave_memory_and_are_still_reported_from_the_store() {
    let d = dir("evict");
    let mut s = open(&d);
    let n = common::register(&mut s, "n", 3);
    let job = run_job(&mut s, n, "k-1");
    assert_eq!(s.tasks_in_memory(), 3);
    assert_eq!(s.evict_finished(), 1);
    assert_eq!(s.tasks_in_memory(), 0, "a finished job holds no task row");
    // `jobs`, `job N` and the totals still report it, from its summary.
    let info = s.job(job).expect("job");
    assert_eq!(info.state, "completed");
    assert_eq!(info.counts.expect("counts").succeeded, 3);
    assert_eq!(info.apps[0].counts.expect("app").succeeded, 3);
    assert!(info.finished_ns > 0);
    assert_eq!(s.task_counts().succeeded, 3);
    // `tasks` reads its rows back from the store, a page at a time.
    let page = s.tasks_page(job, 0, 2).expect("page");
    assert_eq!(page.tasks.len(), 2);
    assert_eq!((page.next_cursor, page.total), (2, 3));
    let rest = s.tasks_page(job, page.next_cursor, 2).expect("page");
    assert_eq!(rest.tasks.len(), 1);
    assert_eq!(rest.next_cursor, 0);
    assert!(
        page.tasks
            .iter()
            .chain(&rest.tasks)
            .all(|t| t.state == "succeeded" && t.attempt == 1)
    );
    // A result sent again for an evicted task is acknowledged and runs nothing.
    let r = beat(&mut s, n, &[], &[(0, 1, true)]);
    assert_eq!(r.acked.len(), 1);
    assert!(r.assignments.is_empty());
    // Cancelling a finished job cancels nothing.
    assert_eq!(s.cancel(job).expect("cancel").cancelled, 0);
    // A new job still gets fresh task ids and runs.
    let second = s.submit("job.toml", JOB, "/").expect("submit");
    let r = beat(&mut s, n, &[], &[]);
    let ids: Vec<u64> = r.assignments.iter().map(|a| a.task_id).collect();
    assert_eq!((second.job_id, ids), (2, vec![3, 4, 5]));
    assert_eq!(s.tasks_in_memory(), 3);
}

#[test]
fn purge_deletes_a_finished_jobs_rows_and_nothing_runs_again_across_a_restart() {
    let d = dir("purge");
    {
        let mut s = open(&d);
        let n = common::register(&mut s, "n", 3);
        let first = run_job(&mut s, n, "k-1");
        // Job 2 is still running: it cannot be purged by name.
        s.submit("job.toml", JOB, "/").expect("submit");
        let r = beat(&mut s, n, &[], &[]);
        assert_eq!(r.assignments.len(), 3);
        let epoch = r.purge_epoch;
        assert_ne!(epoch, 0, "heartbeat replies carry the purge epoch");
        let running: Vec<(u64, u32)> = r
            .assignments
            .iter()
            .map(|a| (a.task_id, a.attempt))
            .collect();
        let e = s
            .purge(&pb::PurgeRequest {
                job_ids: vec![2],
                ..Default::default()
            })
            .expect_err("job 2 runs");
        assert!(e.to_string().contains("job 2 is not finished"), "{e}");
        assert_eq!(stored_tasks(&d), 6);
        // A full disk refuses the purge and changes nothing.
        s.simulate_full_disk(true);
        let req = pb::PurgeRequest {
            job_ids: vec![first],
            ..Default::default()
        };
        s.purge(&req).expect_err("disk full");
        s.simulate_full_disk(false);
        assert_eq!(listed(&s).len(), 2);
        let reply = s.purge(&req).expect("purge");
        assert_eq!((reply.purged, reply.tasks), (vec![1], 3));
        assert_eq!(listed(&s), vec![(2, "running".into())]);
        assert!(s.job(1).is_err() && s.tasks(1).is_err());
        assert_eq!(stored_tasks(&d), 3, "job 1's rows are gone from the store");
        // The agents hear of it (a new epoch) and ask which of their jobs' files may go: only
        // the purged job's, not a running one's nor an unknown one's, and only their own agent.
        let moved = beat(&mut s, n, &running, &[]).purge_epoch;
        assert!(moved != epoch && moved != 0, "{epoch} → {moved}");
        assert_eq!(
            s.purged_jobs(n, common::IDENTITY, &[1, 2, 99]),
            Some(vec![1])
        );
        assert_eq!(s.purged_jobs(n, "another agent", &[1]), None);
        assert_eq!(s.purged_jobs(n + 7, common::IDENTITY, &[1]), None);
        // Already purged: named again, nothing to do, and not a refusal (a retried purge).
        let again = s.purge(&req).expect("a retried purge succeeds");
        assert_eq!((again.purged, again.already_purged), (vec![], vec![1]));
        // A late result for a purged task is acknowledged and dispatches nothing.
        let r = beat(&mut s, n, &running, &[(0, 1, true)]);
        assert_eq!(r.acked.len(), 1);
        assert!(r.assignments.is_empty());
    } // the server dies with job 2 running
    let mut s = open(&d);
    assert_eq!(listed(&s), vec![(2, "running".into())]);
    assert!(s.job(1).is_err());
    let n = common::register(&mut s, "n", 3);
    // After the restart the tombstone still answers the agents.
    assert_eq!(s.purged_jobs(n, common::IDENTITY, &[1, 2]), Some(vec![1]));
    // The agent still runs job 2 and finishes it; job 1's tasks are never dispatched again.
    let r = beat(&mut s, n, &[(3, 1), (4, 1), (5, 1)], &[]);
    assert!(r.assignments.is_empty(), "{:?}", r.assignments);
    beat(&mut s, n, &[], &[(3, 1, true), (4, 1, true), (5, 1, true)]);
    assert_eq!(listed(&s), vec![(2, "completed".into())]);
    // The submission key of a purged job still names it: a retried submission runs nothing.
    let again = s
        .submit_keyed("job.toml", JOB, "/", "k-1")
        .expect("resubmit");
    assert_eq!((again.job_id, again.existing), (1, true));
    assert!(beat(&mut s, n, &[], &[]).assignments.is_empty());
    // Ids are never reused: a new job starts after every purged one.
    let third = s.submit("job.toml", JOB, "/").expect("submit");
    assert_eq!(third.job_id, 3);
    let ids: Vec<u64> = beat(&mut s, n, &[], &[])
        .assignments
        .iter()
        .map(|a| a.task_id)
        .collect();
    assert_eq!(ids, vec![6, 7, 8]);
}

/// A purge of named jobs evicts nothing first: one transaction, its own, makes them gone, and
/// the other finished jobs stay as they were until the retention pass. Before, the purge first
/// evicted every newly finished job — read each one's rows under the state's lock (5 million
/// rows: up to a quarter of a second) and stored a summary that the purge deleted at once. A
/// purge that chooses by count or age still evicts them first: it must see them.
#[test]
fn a_purge_by_name_evicts_nothing_and_a_purge_by_count_still_sees_newly_finished_jobs() {
    let d = dir("by-name");
    let mut s = open(&d);
    let n = common::register(&mut s, "n", 3);
    let first = run_job(&mut s, n, "k-1");
    let second = run_job(&mut s, n, "k-2");
    assert_eq!(s.tasks_in_memory(), 6, "neither job is evicted yet");
    let written = s.written();
    let reply = s
        .purge(&pb::PurgeRequest {
            job_ids: vec![first],
            ..Default::default()
        })
        .expect("purge");
    assert_eq!((reply.purged, reply.tasks), (vec![first], 3));
    assert_eq!(
        s.written(),
        written + 1,
        "one transaction, the purge's: no summaries stored before it"
    );
    assert_eq!(stored_tasks(&d), 3, "the purged job's rows are gone");
    assert_eq!(
        s.tasks_in_memory(),
        3,
        "the other finished job is left to the retention pass"
    );
    assert_eq!(listed(&s), vec![(second, "completed".into())]);
    assert!(s.job(first).is_err());
    // `--keep 0`: the newly finished job is evicted first, so the purge finds it.
    let reply = s
        .purge(&pb::PurgeRequest {
            has_keep: true,
            keep: 0,
            ..Default::default()
        })
        .expect("purge");
    assert_eq!(reply.purged, vec![second]);
    assert_eq!((s.tasks_in_memory(), stored_tasks(&d)), (0, 0));
    assert!(listed(&s).is_empty());
}

/// A job the rule keeps only for being too young is purged when it is old enough: the pass
/// that found it too young plans the next one for then. Before, nothing planned another pass
/// until the calm re-check, and a cancelled pending job stayed up to a minute past its
/// `keep_finished`.
#[test]
fn a_job_too_young_for_the_rule_is_purged_once_it_is_old_enough() {
    let d = dir("too-young");
    let mut s = open_with(
        &d,
        Some(RetentionConfig {
            keep_finished: Some(hetsched_core::input::Duration(3_000_000_000)),
            keep_jobs: None,
        }),
    );
    let job = s.submit("job.toml", JOB, "/").expect("submit").job_id;
    s.on_cancel(job).expect("cancelled while pending");
    let ended = std::time::Instant::now();
    s.apply_retention().expect("retention");
    assert_eq!(listed(&s), vec![(job, "cancelled".into())], "too young");
    let next = s.plan_housekeeping();
    assert!(
        next <= ended + std::time::Duration::from_secs(6),
        "the next pass comes {:?} after the end",
        next.saturating_duration_since(ended)
    );
    std::thread::sleep(next.saturating_duration_since(std::time::Instant::now()));
    s.apply_retention().expect("retention");
    assert!(
        listed(&s).is_empty(),
        "purged once 3 s old: {:?}",
        listed(&s)
    );
}

/// `keep_jobs`: a batch job that finishes plans a pass within the retention interval (5 s),
/// whether it ran or was cancelled before it did (a held job cancelled waited for the minute's
/// calm re-check: its tasks were never in memory, so nothing else planned one).
#[test]
fn a_finished_batch_job_plans_the_next_retention_pass() {
    let d = dir("plans-pass");
    let mut s = open_with(
        &d,
        Some(RetentionConfig {
            keep_finished: None,
            keep_jobs: Some(1),
        }),
    );
    s.apply_retention().expect("the first pass");
    let cancel_held = |s: &mut hetsched_server::state::State| {
        let job = s.submit("job.toml", JOB, "/").expect("submit").job_id;
        s.on_hold(job, true).expect("held");
        // The reaper's passes meanwhile: the held job's rows leave memory.
        s.apply_retention().expect("retention");
        s.on_cancel(job).expect("cancelled while held");
        job
    };
    // The reaper's plan after its pass: the calm re-check, nothing being due.
    s.plan_housekeeping();
    cancel_held(&mut s);
    let second = cancel_held(&mut s);
    let ended = std::time::Instant::now();
    // What the reaper sleeps until: the end must have moved it (no pass is asked for here).
    let next = *s.alarm().borrow();
    assert!(
        next <= ended + std::time::Duration::from_secs(6),
        "the next pass comes {:?} after the end",
        next.saturating_duration_since(ended)
    );
    std::thread::sleep(next.saturating_duration_since(std::time::Instant::now()));
    s.apply_retention().expect("retention");
    assert_eq!(
        listed(&s),
        vec![(second, "cancelled".into())],
        "keep_jobs = 1"
    );
}

#[test]
fn the_retention_rule_keeps_the_newest_finished_jobs_and_purge_selects_by_age_or_count() {
    let d = dir("rule");
    let mut s = open_with(
        &d,
        Some(RetentionConfig {
            keep_finished: None,
            keep_jobs: Some(1),
        }),
    );
    let n = common::register(&mut s, "n", 3);
    run_job(&mut s, n, "a");
    run_job(&mut s, n, "b");
    run_job(&mut s, n, "c");
    s.apply_retention().expect("retention");
    assert_eq!(listed(&s), vec![(3, "completed".into())], "keep_jobs = 1");
    assert_eq!(stored_tasks(&d), 3);
    run_job(&mut s, n, "d");
    // `--keep 1` keeps the most recently finished; `--older-than 0s` takes every finished job.
    let r = s
        .purge(&pb::PurgeRequest {
            has_keep: true,
            keep: 1,
            ..Default::default()
        })
        .expect("purge");
    assert_eq!(r.purged, vec![3]);
    let r = s
        .purge(&pb::PurgeRequest {
            has_older_than: true,
            older_than_ms: 3_600_000,
            ..Default::default()
        })
        .expect("purge");
    // The test agent reports tasks as ending at the epoch: an hour is long ago.
    assert_eq!(r.purged, vec![4]);
    assert!(listed(&s).is_empty());
    assert_eq!(stored_tasks(&d), 0);
    // Nothing left to purge is not an error.
    let r = s
        .purge(&pb::PurgeRequest {
            has_keep: true,
            keep: 0,
            ..Default::default()
        })
        .expect("purge");
    assert!(r.purged.is_empty());
}

#[test]
fn after_a_restart_a_finished_job_is_reported_from_its_summary_without_reading_its_tasks() {
    let d = dir("summary");
    {
        let mut s = open(&d);
        let n = common::register(&mut s, "n", 3);
        run_job(&mut s, n, "k");
        s.submit("job.toml", JOB, "/").expect("submit");
        assert_eq!(s.evict_finished(), 1);
    }
    let mut s = open(&d);
    assert_eq!(
        s.tasks_in_memory(),
        3,
        "only the unfinished job's rows are read"
    );
    let info = s.job(1).expect("job");
    assert_eq!(
        (info.state.as_str(), info.counts.expect("counts").succeeded),
        ("completed", 3)
    );
    assert_eq!(info.apps[0].counts.expect("app").succeeded, 3);
    assert_eq!(s.tasks(1).expect("tasks").tasks.len(), 3);
    // The unfinished job runs; nothing of the finished one is dispatched again.
    let n = common::register(&mut s, "n", 3);
    let ids: Vec<u64> = beat(&mut s, n, &[], &[])
        .assignments
        .iter()
        .map(|a| a.task_id)
        .collect();
    assert_eq!(ids, vec![3, 4, 5]);
}

#[test]
fn listing_every_jobs_tasks_skips_purged_jobs_and_joins_up_across_jobs() {
    let d = dir("all");
    let mut s = open(&d);
    let n = common::register(&mut s, "n", 3);
    for key in ["a", "b", "c"] {
        run_job(&mut s, n, key);
    }
    s.submit("job.toml", JOB, "/").expect("submit");
    s.purge(&pb::PurgeRequest {
        job_ids: vec![1, 2],
        ..Default::default()
    })
    .expect("purge");
    // Job 0 = every job: pages of 2 from the store, across the finished job 3 and pending job 4.
    let mut ids = Vec::new();
    let mut cursor = 0;
    loop {
        let page = s.tasks_page(0, cursor, 2).expect("page");
        assert!(!page.tasks.is_empty(), "no empty page at cursor {cursor}");
        ids.extend(page.tasks.iter().map(|t| t.id));
        if page.next_cursor == 0 {
            break;
        }
        cursor = page.next_cursor;
    }
    assert_eq!(ids, vec![6, 7, 8, 9, 10, 11]);
}

#[test]
fn failed_tasks_of_a_finished_job_can_be_resubmitted_after_its_rows_left_memory() {
    let d = dir("resubmit-evicted");
    let mut s = open(&d);
    let n = common::register(&mut s, "n", 3);
    let job = s.submit("job.toml", JOB, "/").expect("submit").job_id;
    let r = beat(&mut s, n, &[], &[]);
    let results: Vec<(u64, u32, bool)> = r
        .assignments
        .iter()
        .map(|a| (a.task_id, a.attempt, a.task_id != 1))
        .collect();
    beat(&mut s, n, &[], &results);
    assert_eq!(s.job(job).expect("job").state, "failed");
    assert_eq!(s.evict_finished(), 1);
    assert_eq!(s.tasks_in_memory(), 0);

    // The failed task runs again, though the job's rows had left memory.
    assert_eq!(s.resubmit_failed(job).expect("resubmit").tasks, 1);
    assert_eq!(s.job(job).expect("job").state, "running");
    // A restart before it is dispatched: the job is not taken for finished (its stored summary
    // went with the resubmission), so the task is read back pending and dispatched.
    drop(s);
    let mut s = open(&d);
    let n = common::register(&mut s, "n", 3);
    let r = beat(&mut s, n, &[], &[]);
    let sent: Vec<(u64, u32)> = r
        .assignments
        .iter()
        .map(|a| (a.task_id, a.attempt))
        .collect();
    assert_eq!(sent, vec![(1, 2)], "only the failed task, as attempt 2");
    beat(&mut s, n, &[], &[(1, 2, true)]);
    assert_eq!(s.job(job).expect("job").state, "completed");
    // Finished again: its rows leave memory again with a fresh summary.
    assert_eq!(s.evict_finished(), 1);
    let c = s.job(job).expect("job").counts.expect("counts");
    assert_eq!((c.succeeded, c.failed), (3, 0));
}

/// A result of `task`'s `attempt` that used `cpu_ms` (user) and peaked at `rss` bytes.
fn measured(task: u64, attempt: u32, ok: bool, cpu_ms: u64, rss: u64) -> pb::TaskResult {
    pb::TaskResult {
        task_id: task,
        attempt,
        exit_code: if ok { 0 } else { 1 },
        success: ok,
        started_ns: 1,
        finished_ns: 2,
        usage: Some(pb::TaskUsage {
            cpu_user_ms: cpu_ms,
            cpu_system_ms: 0,
            max_rss_bytes: rss,
            max_gpu_memory_bytes: 0,
        }),
        ..Default::default()
    }
}

#[test]
fn an_applications_usage_follows_its_tasks_latest_attempts_and_survives_eviction_and_restart() {
    let d = dir("usage");
    let job_text = "[[application]]\nname = \"a\"\ntasks = 3\nretries = 1\n[application.cpu]\ncommand = \"true\"\n";
    let used = |s: &State| {
        let a = &s.job(1).expect("job").apps[0];
        (a.cpu_ms, a.max_rss_bytes)
    };
    {
        let mut s = open(&d);
        let n = common::register(&mut s, "n", 3);
        s.submit("job.toml", job_text, "/").expect("submit");
        let ids: Vec<u64> = beat(&mut s, n, &[], &[])
            .assignments
            .iter()
            .map(|a| a.task_id)
            .collect();
        assert_eq!(ids.len(), 3);
        // Task 0 fails at its largest peak and is retried; the others succeed.
        let mut req = heartbeat_request(n, &[], &[]);
        req.results = vec![
            measured(ids[0], 1, false, 500, 900 << 20),
            measured(ids[1], 1, true, 1_000, 100 << 20),
            measured(ids[2], 1, true, 2_000, 300 << 20),
        ];
        let r = s.heartbeat(req).expect("heartbeat");
        assert_eq!((used(&s)), (3_500, 900 << 20));
        // The retry replaces the failed attempt's figures: its CPU time leaves the sum and the
        // peak falls back to the largest that is still recorded.
        let retry = r
            .assignments
            .iter()
            .find(|a| a.task_id == ids[0])
            .map(|a| a.attempt)
            .or_else(|| {
                beat(&mut s, n, &[], &[])
                    .assignments
                    .iter()
                    .find(|a| a.task_id == ids[0])
                    .map(|a| a.attempt)
            })
            .expect("the failed task runs again");
        // Running again, it lists no usage: its failed attempt's figures are not this one's.
        let task = &s.tasks(1).expect("tasks").tasks[0];
        assert_eq!((task.state.as_str(), task.usage), ("running", None));
        let mut req = heartbeat_request(n, &[], &[]);
        req.results = vec![measured(ids[0], retry, true, 250, 200 << 20)];
        s.heartbeat(req).expect("heartbeat");
        assert_eq!(s.job(1).expect("job").state, "completed");
        assert_eq!(used(&s), (3_250, 300 << 20));
        let task = &s.tasks(1).expect("tasks").tasks[0];
        assert_eq!(
            task.usage.map(|u| (u.cpu_user_ms, u.max_rss_bytes)),
            Some((250, 200 << 20)),
            "a task lists its latest attempt's usage"
        );
        // The job's rows leave memory: its summary keeps the figures.
        assert_eq!(s.evict_finished(), 1);
        assert_eq!(used(&s), (3_250, 300 << 20));
    }
    // A restart reads the summary, not the rows.
    let s = open(&d);
    assert_eq!(s.tasks_in_memory(), 0);
    assert_eq!(used(&s), (3_250, 300 << 20));
    assert_eq!(
        s.tasks(1).expect("tasks").tasks[2]
            .usage
            .map(|u| u.cpu_user_ms),
        Some(2_000),
        "each task's usage is read back from the store"
    );
}

#[test]
fn a_tasks_peak_gpu_memory_is_stored_and_shown_per_task_application_and_job_across_restarts() {
    let d = dir("gpu-usage");
    let job_text =
        "[[application]]\nname = \"a\"\ntasks = 2\n[application.cpu]\ncommand = \"true\"\n";
    // As the server answers (the wire's messages): each task's, its application's largest and
    // its job's.
    let gpu = |s: &State| {
        let job = s.job(1).expect("job");
        let tasks = s.tasks(1).expect("tasks").tasks;
        (
            tasks
                .iter()
                .map(|t| t.usage.map_or(0, |u| u.max_gpu_memory_bytes))
                .collect::<Vec<_>>(),
            job.apps[0].max_gpu_memory_bytes,
            job.max_gpu_memory_bytes,
        )
    };
    let expected = (vec![6 << 30, 0], 6 << 30, 6 << 30);
    {
        let mut s = open(&d);
        let n = common::register(&mut s, "n", 2);
        s.submit("job.toml", job_text, "/").expect("submit");
        let ids: Vec<u64> = beat(&mut s, n, &[], &[])
            .assignments
            .iter()
            .map(|a| a.task_id)
            .collect();
        assert_eq!(ids.len(), 2);
        // The first used 6 GiB of GPU memory; the second was not measured (a CPU task).
        let mut gpu_task = measured(ids[0], 1, true, 100, 1 << 20);
        if let Some(u) = gpu_task.usage.as_mut() {
            u.max_gpu_memory_bytes = 6 << 30;
        }
        let mut req = heartbeat_request(n, &[], &[]);
        req.results = vec![gpu_task, measured(ids[1], 1, true, 100, 1 << 20)];
        s.heartbeat(req).expect("heartbeat");
        assert_eq!(s.job(1).expect("job").state, "completed");
        assert_eq!(gpu(&s), expected);
        // The job's rows leave memory: its summary keeps the figures.
        assert_eq!(s.evict_finished(), 1);
        assert_eq!(gpu(&s), expected);
    }
    // A restart reads the summary and the stored rows.
    let s = open(&d);
    assert_eq!(gpu(&s), expected, "the figures survive a restart");
}

/// A stored job whose file a later version refuses (here an application name the name rule
/// now refuses) stops the server's start with an error that names the job, says why and says
/// what to do; nothing in the store is changed, so the earlier version still reads it.
#[test]
fn a_stored_job_that_no_longer_reads_stops_the_start_naming_the_job_and_the_way_out() {
    let d = dir("unreadable");
    {
        let mut s = open(&d);
        s.submit("job.toml", JOB, "/").expect("submit");
    }
    let conn = rusqlite::Connection::open(d.join("state.db")).expect("db");
    let bad = JOB.replace("name = \"a\"", "name = \"a/b\"");
    conn.execute("UPDATE jobs SET text = ?1 WHERE id = 1", [&bad])
        .expect("rewrite");
    drop(conn);
    let config = ServerConfig {
        data_dir: d.to_path_buf(),
        ..Default::default()
    };
    let e = match State::open(&config, Store::open(&d.join("state.db")).expect("store")) {
        Ok(_) => panic!("a job that no longer reads was installed"),
        Err(e) => e.to_string(),
    };
    assert!(
        e.starts_with("the store holds job 1, whose file no longer reads under this version"),
        "{e}"
    );
    assert!(e.contains("job.toml:2"), "the file's line: {e}");
    assert!(e.contains("`hetsched purge 1`"), "{e}");
    let conn = rusqlite::Connection::open(d.join("state.db")).expect("db");
    let text: String = conn
        .query_row("SELECT text FROM jobs WHERE id = 1", [], |r| r.get(0))
        .expect("still stored");
    assert_eq!(text, bad, "the stored job is left as it was");
}

/// The same for a divisible job and a topology: before, a divisible job or topology whose file
/// no longer read was skipped at the start with a log line, and vanished from every listing
/// while its rows stayed in the store.
#[test]
fn a_stored_divisible_job_or_topology_that_no_longer_reads_stops_the_start_too() {
    const DIV: &str =
        "[[divisible]]\nname = \"rows\"\nunits = 100\ncommand = \"echo {start} {end}\"\n";
    const TOPO: &str = "name = \"pipe\"\n\n[[component]]\nname = \"numbers\"\nkind = \"spout\"\n\
        parallelism = 1\ncpu = 10.0\nbuiltin = \"sequence-spout\"\n";
    let config = |d: &Path| ServerConfig {
        data_dir: d.to_path_buf(),
        ..Default::default()
    };
    let refused = |d: &Path| match State::open(
        &config(d),
        Store::open(&d.join("state.db")).expect("store"),
    ) {
        Ok(_) => panic!("a file that no longer reads was installed"),
        Err(e) => e.to_string(),
    };
    // A divisible job: its units are no longer a number.
    let d = dir("unreadable-divisible");
    {
        let mut s = open(&d);
        let sub = hetsched_server::state::types::Submission {
            origin: "rows.toml".into(),
            text: DIV.into(),
            workdir: "/".into(),
            ..Default::default()
        };
        let id = s.on_submit(sub).expect("submit").job_id;
        assert!(s.job(id).is_ok());
    }
    let conn = rusqlite::Connection::open(d.join("state.db")).expect("db");
    let bad = DIV.replace("units = 100", "units = \"many\"");
    let id: u64 = conn
        .query_row("SELECT id FROM div_jobs", [], |r| r.get(0))
        .expect("stored");
    conn.execute("UPDATE div_jobs SET text = ?1", [&bad])
        .expect("rewrite");
    drop(conn);
    let e = refused(&d);
    assert!(
        e.starts_with(&format!(
            "the store holds job {id}, whose file no longer reads under this version"
        )) && e.contains("rows.toml:3")
            && e.contains(&format!("`hetsched purge {id}`")),
        "{e}"
    );
    // A topology (killed: still kept, and purged by hand): its component's kind is unknown.
    let d = dir("unreadable-topology");
    {
        let mut s = open(&d);
        let sub = hetsched_server::jobs::topology::TopologySubmission {
            origin: "pipe.toml".into(),
            text: TOPO.into(),
            base_dir: "/".into(),
            placer: "even".into(),
            max_utilisation: 0.9,
            ..Default::default()
        };
        s.topology_submit(sub).expect("submit");
        s.topology_kill("pipe").expect("kill");
    }
    let conn = rusqlite::Connection::open(d.join("state.db")).expect("db");
    let bad = TOPO.replace("kind = \"spout\"", "kind = \"fountain\"");
    conn.execute(
        "UPDATE topologies SET record = json_set(record, '$.text', ?1)",
        [&bad],
    )
    .expect("rewrite");
    drop(conn);
    let e = refused(&d);
    assert!(
        e.starts_with("the store holds topology `pipe`, whose file no longer reads")
            && e.contains("pipe.toml:5")
            && e.contains("`hetsched topology purge pipe`"),
        "{e}"
    );
}

/// Opens `d` with `--set-aside` of `jobs` and `--set-aside-topology` of `topologies`.
fn open_setting_aside(d: &Path, jobs: &[u64], topologies: &[&str]) -> Result<State, StateError> {
    let config = ServerConfig {
        data_dir: d.to_path_buf(),
        set_aside: jobs.to_vec(),
        set_aside_topologies: topologies.iter().map(|t| t.to_string()).collect(),
        ..Default::default()
    };
    State::open(&config, Store::open(&d.join("state.db")).expect("store"))
}

/// A file's permission bits.
fn mode(p: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).expect("metadata").permissions().mode() & 0o777
}

/// What `set-aside/NAME.json` says.
fn record(d: &Path, name: &str) -> serde_json::Value {
    let text = std::fs::read_to_string(d.join("set-aside").join(name)).expect("record");
    serde_json::from_str(&text).expect("json")
}

/// The way out for an operator who will not run the older version: `--set-aside JOB` takes the
/// unreadable job out of the store at the start — its file and a record of it kept in
/// DATA_DIR/set-aside, mode 0600, its rows dropped as a purge drops them — and the server
/// starts with every other job as it was. The newest job set aside still holds its ids.
#[test]
fn an_unreadable_job_set_aside_at_the_start_is_kept_in_the_data_directory_and_the_rest_starts() {
    let d = dir("set-aside");
    {
        let mut s = open(&d);
        let n = common::register(&mut s, "n", 3);
        run_job(&mut s, n, "k-1");
        // Job 2, the newest, never ran: its three tasks are pending.
        s.submit_keyed("job.toml", JOB, "/", "k-2").expect("submit");
    }
    let conn = rusqlite::Connection::open(d.join("state.db")).expect("db");
    let bad = JOB.replace("name = \"a\"", "name = \"a/b\"");
    conn.execute("UPDATE jobs SET text = ?1 WHERE id = 2", [&bad])
        .expect("rewrite");
    drop(conn);
    // Refused as before, the message naming the new way out beside the old one.
    let e = match open_setting_aside(&d, &[], &[]) {
        Ok(_) => panic!("a job that no longer reads was installed"),
        Err(e) => e.to_string(),
    };
    assert!(
        e.starts_with("the store holds job 2, whose file no longer reads under this version")
            && e.contains("`hetsched purge 2`")
            && e.contains("`hetsched server --set-aside 2`"),
        "{e}"
    );
    let mut s = open_setting_aside(&d, &[2], &[]).expect("starts without job 2");
    assert_eq!(listed(&s), vec![(1, "completed".into())]);
    assert!(matches!(
        s.explain(s.job(2).expect_err("set aside")),
        StateError::Purged(2)
    ));
    let aside = d.join("set-aside");
    assert_eq!(mode(&aside), 0o700);
    let file = aside.join("job-2.toml");
    assert_eq!(std::fs::read_to_string(&file).expect("file"), bad);
    assert_eq!(mode(&file), 0o600);
    assert_eq!(mode(&aside.join("job-2.json")), 0o600);
    let r = record(&d, "job-2.json");
    assert_eq!(r["id"], 2);
    assert_eq!(r["kind"], "batch");
    assert_eq!(r["owner"], "admin");
    assert_eq!(r["origin"], "job.toml");
    assert_eq!(r["submission_key"], "k-2");
    assert_eq!(r["state"], "pending");
    assert_eq!(r["tasks"]["pending"], 3);
    assert!(r["submitted_ns"].as_u64().is_some_and(|t| t > 0), "{r}");
    assert!(
        r["why"].as_str().is_some_and(|w| w.contains("job.toml:2")),
        "{r}"
    );
    assert_eq!(r["file"], file.display().to_string());
    // Job 1's rows are intact; job 2's tasks are gone.
    assert_eq!(stored_tasks(&d), 3);
    assert_eq!(s.job(1).expect("job 1").state, "completed");
    // Its key still names it, as a purged job's does, and its ids stay taken.
    let again = s
        .submit_keyed("job.toml", JOB, "/", "k-2")
        .expect_err("a key names its job")
        .to_string();
    assert!(again.contains("`k-2` already names job 2"), "{again}");
    drop(s);
    // Restarts: with the flag left in (nothing to do), and without it.
    for jobs in [&[2][..], &[]] {
        let s = open_setting_aside(&d, jobs, &[]).expect("restarts");
        assert_eq!(listed(&s), vec![(1, "completed".into())]);
        assert!(s.job(2).is_err());
        drop(s.jobs());
    }
    let mut s = open(&d);
    let next = s.submit("job.toml", JOB, "/").expect("submit").job_id;
    assert_eq!(next, 3, "job 2's id is never handed out again");
    drop(s);
    let conn = rusqlite::Connection::open(d.join("state.db")).expect("db");
    let first: i64 = conn
        .query_row("SELECT first_task FROM jobs WHERE id = 3", [], |r| r.get(0))
        .expect("job 3");
    assert_eq!(first, 6, "job 2's task ids (3..6) are not handed out again");
    // A second copy never overwrites the first.
    assert!(!aside.join("job-2.2.toml").exists());
}

/// `--set-aside` takes only what this version refuses: a job whose file reads, or one that does
/// not exist, refuses the start, and nothing is changed or written.
#[test]
fn setting_aside_a_job_that_still_reads_or_does_not_exist_is_refused() {
    let d = dir("set-aside-readable");
    {
        let mut s = open(&d);
        s.submit("job.toml", JOB, "/").expect("submit");
    }
    let refused = |jobs: &[u64], topologies: &[&str]| match open_setting_aside(&d, jobs, topologies)
    {
        Ok(_) => panic!("started"),
        Err(e) => e.to_string(),
    };
    let e = refused(&[1], &[]);
    assert!(
        e.starts_with("--set-aside 1: job 1 still reads under this version of hetsched")
            && e.contains("nothing was set aside")
            && e.contains("`hetsched cancel 1`"),
        "{e}"
    );
    let e = refused(&[9], &[]);
    assert!(e.starts_with("--set-aside 9: no job 9 in the store"), "{e}");
    let e = refused(&[], &["pipe"]);
    assert!(
        e.starts_with("--set-aside-topology pipe: no topology `pipe` in the store"),
        "{e}"
    );
    assert!(!d.join("set-aside").exists(), "nothing was written");
    let s = open(&d);
    assert_eq!(listed(&s), vec![(1, "pending".into())]);
}

/// A divisible job and a topology are set aside the same way; a divisible job's files move to
/// the set-aside directory beside its file (a tombstone's would be deleted at the next start),
/// and a topology that still reads is refused.
#[test]
fn an_unreadable_divisible_job_or_topology_is_set_aside_too() {
    const DIV: &str =
        "[[divisible]]\nname = \"rows\"\nunits = 100\ncommand = \"echo {start} {end}\"\n";
    const TOPO: &str = "name = \"pipe\"\n\n[[component]]\nname = \"numbers\"\nkind = \"spout\"\n\
        parallelism = 1\ncpu = 10.0\nbuiltin = \"sequence-spout\"\n";
    let d = dir("set-aside-divisible-topology");
    let div = {
        let mut s = open(&d);
        let sub = hetsched_server::state::types::Submission {
            origin: "rows.toml".into(),
            text: DIV.into(),
            workdir: "/".into(),
            ..Default::default()
        };
        let div = s.on_submit(sub).expect("submit").job_id;
        for name in ["pipe", "other"] {
            let sub = hetsched_server::jobs::topology::TopologySubmission {
                origin: format!("{name}.toml"),
                text: TOPO.replace("\"pipe\"", &format!("\"{name}\"")),
                base_dir: "/".into(),
                placer: "even".into(),
                max_utilisation: 0.9,
                ..Default::default()
            };
            s.topology_submit(sub).expect("submit");
            s.topology_kill(name).expect("kill");
        }
        div
    };
    // What a divisible job keeps on disk (its inputs, its chunks' outputs).
    let files = d.join("divisible").join(format!("job-{div}"));
    std::fs::create_dir_all(&files).expect("job dir");
    std::fs::write(files.join("out-0"), "kept").expect("output");
    let conn = rusqlite::Connection::open(d.join("state.db")).expect("db");
    conn.execute(
        "UPDATE div_jobs SET text = ?1",
        [DIV.replace("units = 100", "units = \"many\"")],
    )
    .expect("rewrite");
    conn.execute(
        "UPDATE topologies SET record = json_set(record, '$.text', ?1) WHERE name = 'pipe'",
        [TOPO.replace("kind = \"spout\"", "kind = \"fountain\"")],
    )
    .expect("rewrite");
    drop(conn);
    let e = match open_setting_aside(&d, &[], &[]) {
        Ok(_) => panic!("an unreadable topology was installed"),
        Err(e) => e.to_string(),
    };
    assert!(
        e.starts_with("the store holds topology `pipe`, whose file no longer reads")
            && e.contains("`hetsched topology purge pipe`")
            && e.contains("`hetsched server --set-aside-topology pipe`"),
        "{e}"
    );
    assert!(files.is_dir(), "a refused start changes nothing");
    // `other` still reads: refused, and nothing set aside.
    let e = match open_setting_aside(&d, &[div], &["pipe", "other"]) {
        Ok(_) => panic!("a readable topology was set aside"),
        Err(e) => e.to_string(),
    };
    assert!(
        e.starts_with("--set-aside-topology other: topology `other` still reads"),
        "{e}"
    );
    assert!(!d.join("set-aside").exists());
    let s = open_setting_aside(&d, &[div], &["pipe"]).expect("starts");
    assert!(s.job(div).is_err(), "the divisible job is gone");
    let names: Vec<String> = s
        .topology_list()
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|t| t["name"].as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default();
    assert_eq!(names, vec!["other".to_string()], "{}", s.topology_list());
    let aside = d.join("set-aside");
    let r = record(&d, &format!("job-{div}.json"));
    assert_eq!(
        (r["kind"].as_str(), r["id"].as_u64()),
        (Some("divisible"), Some(div))
    );
    assert_eq!(r["state"], "running");
    let moved = aside.join(format!("job-{div}.files"));
    assert_eq!(r["files"], moved.display().to_string());
    assert_eq!(
        std::fs::read_to_string(moved.join("out-0")).expect("moved"),
        "kept"
    );
    assert!(!files.exists());
    let t = record(&d, "topology-pipe.json");
    assert_eq!(
        (t["name"].as_str(), t["state"].as_str()),
        (Some("pipe"), Some("killed"))
    );
    assert!(
        t["why"].as_str().is_some_and(|w| w.contains("pipe.toml:5")),
        "{t}"
    );
    for f in ["topology-pipe.toml", "topology-pipe.json"] {
        assert_eq!(mode(&aside.join(f)), 0o600, "{f}");
    }
    assert!(
        std::fs::read_to_string(aside.join("topology-pipe.toml"))
            .expect("file")
            .contains("fountain")
    );
    drop(s);
    // The next start has nothing to refuse, the flags left in or not; the files stay.
    drop(open_setting_aside(&d, &[div], &["pipe"]).expect("restarts"));
    let s = open(&d);
    assert!(s.job(div).is_err());
    assert!(moved.join("out-0").exists());
}

/// A workflow whose data name a later rule refuses (the last such change: data names must be
/// fit for placeholders and agents' paths) is set aside as a batch job is; the batch job beside
/// it is kept.
#[test]
fn an_unreadable_workflow_is_set_aside_too() {
    const WF: &str = "[[task]]\nname = \"gen\"\ninstances = \"1..=2\"\ncost = \"1s\"\n\
        outputs = [\"m\"]\ncommand = \"echo {index} > {output:m}\"\n";
    let d = dir("set-aside-workflow");
    let wf = {
        let mut s = open(&d);
        let wf = s.submit("wf.toml", WF, "/").expect("workflow").job_id;
        s.submit("job.toml", JOB, "/").expect("batch");
        wf
    };
    let conn = rusqlite::Connection::open(d.join("state.db")).expect("db");
    conn.execute(
        "UPDATE wf_jobs SET text = ?1",
        [WF.replace("\"m\"", "\"m/x\"").replace(":m}", ":m/x}")],
    )
    .expect("rewrite");
    drop(conn);
    let e = match open_setting_aside(&d, &[], &[]) {
        Ok(_) => panic!("an unreadable workflow was installed"),
        Err(e) => e.to_string(),
    };
    assert!(
        e.contains(&format!("`hetsched server --set-aside {wf}`")),
        "{e}"
    );
    let s = open_setting_aside(&d, &[wf], &[]).expect("starts");
    assert!(s.job(wf).is_err(), "the workflow is gone");
    assert_eq!(listed(&s), vec![(wf + 1, "pending".into())]);
    let r = record(&d, &format!("job-{wf}.json"));
    assert_eq!(
        (r["kind"].as_str(), r["origin"].as_str()),
        (Some("workflow"), Some("wf.toml"))
    );
    assert_eq!(r["state"], "unfinished");
    assert!(
        r["why"].as_str().is_some_and(|w| w.contains("wf.toml:")),
        "{r}"
    );
}

/// A job set aside while pending never ends, so the jobs waiting for it read it as cancelled,
/// not as purged (which reads as completed): the one `--after` it is cancelled naming it, the
/// ones `--after-any` and `--after-notok` it are released and run — at the start that sets it
/// aside and at every later one.
#[test]
fn the_jobs_waiting_for_a_job_set_aside_unfinished_read_it_as_cancelled() {
    use hetsched_server::state::types::Submission;
    let d = dir("set-aside-waiters");
    let sub = |after: &[u64], after_any: &[u64], after_notok: &[u64]| Submission {
        origin: "job.toml".into(),
        text: JOB.into(),
        workdir: "/".into(),
        after: after.to_vec(),
        after_any: after_any.to_vec(),
        after_notok: after_notok.to_vec(),
        ..Default::default()
    };
    let (a, after, any, notok, wf, corr) = {
        let mut s = open(&d);
        // No node: job `a` stays pending.
        let a = s.submit("job.toml", JOB, "/").expect("submit").job_id;
        let after = s.on_submit(sub(&[a], &[], &[])).expect("after").job_id;
        let any = s.on_submit(sub(&[], &[a], &[])).expect("after-any").job_id;
        let notok = s
            .on_submit(sub(&[], &[], &[a]))
            .expect("after-notok")
            .job_id;
        // A workflow reads it through the state, as every kind does.
        let wf = s
            .on_submit(Submission {
                origin: "wf.toml".into(),
                text: "[[task]]\nname = \"t\"\ninstances = \"1..=1\"\ncost = \"1s\"\ncommand = \"true\"\n"
                    .into(),
                ..sub(&[a], &[], &[])
            })
            .expect("workflow after")
            .job_id;
        for j in [after, any, notok, wf] {
            assert!(s.job(j).expect("job").waiting, "job {j} waits for job {a}");
        }
        // Its tasks wait for job `a`'s of the same index.
        let corr = s
            .on_submit(Submission {
                after_corr: vec![a],
                ..sub(&[], &[], &[])
            })
            .expect("after-corr")
            .job_id;
        (a, after, any, notok, wf, corr)
    };
    let conn = rusqlite::Connection::open(d.join("state.db")).expect("db");
    conn.execute(
        "UPDATE jobs SET text = ?1 WHERE id = ?2",
        rusqlite::params![JOB.replace("name = \"a\"", "name = \"a/b\""), a as i64],
    )
    .expect("rewrite");
    drop(conn);
    let why = format!(
        "cancelled: job {a}, which this job runs after, was set aside unfinished at a server \
         start (its file no longer reads under this version), which counts as cancelled"
    );
    let check = |s: &State| {
        let info = s.job(after).expect("job");
        assert_eq!((info.state.as_str(), info.waiting), ("cancelled", false));
        for t in s.tasks(after).expect("tasks").tasks {
            assert_eq!(
                (t.state.as_str(), t.message.as_str()),
                ("cancelled", why.as_str())
            );
        }
        for j in [any, notok] {
            let info = s.job(j).expect("job");
            assert_eq!(
                (info.state.as_str(), info.waiting),
                ("pending", false),
                "job {j} is released"
            );
        }
        let info = s.job(wf).expect("workflow");
        assert_eq!((info.state.as_str(), info.waiting), ("cancelled", false));
        assert_eq!(s.job(corr).expect("job").state, "cancelled");
        for t in s.tasks(corr).expect("tasks").tasks {
            assert!(
                t.message.contains(&format!(
                    "job {a}, which this task runs after index by index, was set aside unfinished"
                )),
                "{}",
                t.message
            );
        }
    };
    let s = open_setting_aside(&d, &[a], &[]).expect("starts without job a");
    assert_eq!(record(&d, &format!("job-{a}.json"))["state"], "pending");
    check(&s);
    drop(s);
    // A restart reads it the same way (the flag left in, and without it).
    for jobs in [&[a][..], &[]] {
        let s = open_setting_aside(&d, jobs, &[]).expect("restarts");
        check(&s);
    }
    let mut s = open(&d);
    check(&s);
    // The released jobs run (one node, six cores: both at once); the cancelled one does not.
    let n = common::register(&mut s, "n", 6);
    assert_eq!(common::run_assigned(&mut s, n), 6);
    for j in [any, notok] {
        assert_eq!(s.job(j).expect("job").state, "completed");
    }
    assert_eq!(s.job(after).expect("job").state, "cancelled");
    // The cancellation reached the store with the first commit.
    let conn = rusqlite::Connection::open(d.join("state.db")).expect("db");
    let cancelled: i64 = conn
        .query_row(
            "SELECT COUNT(*) FROM tasks t JOIN apps p ON t.app = p.id
             WHERE p.job = ?1 AND t.message = ?2",
            rusqlite::params![after as i64, why],
            |r| r.get(0),
        )
        .expect("count");
    assert_eq!(cancelled, 3);
    drop(conn);
    // A new job can wait for it only as for a cancelled one.
    let e = s
        .on_submit(sub(&[a], &[], &[]))
        .expect_err("never starts")
        .to_string();
    assert!(
        e.contains(&format!("--after: job {a} was set aside unfinished")),
        "{e}"
    );
    let late = s.on_submit(sub(&[], &[a], &[])).expect("after-any").job_id;
    assert!(!s.job(late).expect("job").waiting);
}

/// A purged job's file is neither read nor parsed at a restart (a server that purged a million
/// jobs restarts as fast as one that ran none); its ids stay taken and its key still names it.
#[test]
fn a_restart_does_not_parse_purged_jobs_and_keeps_their_ids_and_keys() {
    let d = dir("unparsed");
    {
        let mut s = open(&d);
        let n = common::register(&mut s, "n", 3);
        for key in ["k-1", "k-2", "k-3"] {
            run_job(&mut s, n, key);
        }
        s.purge(&pb::PurgeRequest {
            job_ids: vec![1, 2],
            ..Default::default()
        })
        .expect("purged");
    }
    // Were a purged job's file parsed, this would fail the restart.
    let conn = rusqlite::Connection::open(d.join("state.db")).expect("db");
    conn.execute("UPDATE jobs SET text = 'not = [toml' WHERE id = 1", [])
        .expect("corrupt");
    drop(conn);
    let mut s = open(&d);
    assert_eq!(listed(&s), vec![(3, "completed".into())]);
    assert!(s.job(2).is_err());
    // The key of a purged job still names it.
    let again = s.submit_keyed("job.toml", JOB, "/", "k-2").expect("key");
    assert_eq!((again.job_id, again.existing, again.tasks), (2, true, 3));
    // So does it before a restart, and the purged job reads as purged, not as unknown.
    s.purge(&pb::PurgeRequest {
        job_ids: vec![3],
        ..Default::default()
    })
    .expect("purged");
    let again = s.submit_keyed("job.toml", JOB, "/", "k-3").expect("key");
    assert_eq!((again.job_id, again.existing, again.tasks), (3, true, 3));
    assert!(matches!(
        s.explain(s.job(3).expect_err("purged")),
        StateError::Purged(3)
    ));
    assert!(listed(&s).is_empty());
    // The last job purged too: its ids stay taken after another restart.
    drop(s);
    let mut s = open(&d);
    assert!(listed(&s).is_empty());
    let n = common::register(&mut s, "m", 3);
    let next = s.submit("job.toml", JOB, "/").expect("submit");
    assert_eq!(next.job_id, 4);
    let ids: Vec<u64> = beat(&mut s, n, &[], &[])
        .assignments
        .iter()
        .map(|a| a.task_id)
        .collect();
    assert_eq!(ids, vec![9, 10, 11], "after the purged jobs' nine tasks");
}

/// `hetsched resubmit JOB --cancelled` (HyperQueue's `hq job resubmit --filter canceled`): the
/// tasks cancelled one by one run again, a pending one and a running one alike, also after the
/// finished job's rows left memory; `--failed --cancelled` takes both; a job cancelled as a
/// whole, and a call that names neither, are refused.
#[test]
fn tasks_cancelled_one_by_one_can_be_resubmitted_with_the_failed_ones() {
    let d = dir("resubmit-cancelled");
    let mut s = open(&d);
    let n = common::register(&mut s, "n", 1);
    let job = s
        .submit(
            "job.toml",
            "[[application]]\nname = \"a\"\ntasks = 4\n[application.cpu]\ncommand = \"true\"\n",
            "/",
        )
        .expect("submit")
        .job_id;
    // Task 0 runs; 0 (running) and 1 (pending) are cancelled; 2 and 3 succeed.
    assert_eq!(
        beat(&mut s, n, &[], &[])
            .assignments
            .iter()
            .map(|a| a.task_id)
            .collect::<Vec<_>>(),
        [0]
    );
    assert_eq!(
        s.cancel_tasks(job, "", "0,1").expect("cancelled").cancelled,
        2
    );
    let r = beat(&mut s, n, &[], &[]);
    assert_eq!(r.assignments[0].task_id, 2);
    let r = beat(&mut s, n, &[], &[(2, 1, true)]);
    assert_eq!(r.assignments[0].task_id, 3);
    beat(&mut s, n, &[], &[(3, 1, true)]);
    let counts = |s: &State| {
        let c = s.job(job).expect("job").counts.expect("counts");
        (c.pending, c.succeeded, c.failed, c.cancelled)
    };
    assert_eq!(counts(&s), (0, 2, 0, 2));
    // Finished (no task failed): its rows leave memory, and come back for the resubmission.
    assert_eq!(s.evict_finished(), 1);
    let e = s
        .on_resubmit_ended(job, false, false)
        .expect_err("neither")
        .to_string();
    assert!(e.contains("pass --failed, --cancelled or both"), "{e}");
    assert_eq!(
        s.on_resubmit_ended(job, false, true).expect("resubmitted"),
        2
    );
    assert_eq!(counts(&s), (2, 2, 0, 0));
    let listed = s.tasks(job).expect("tasks").tasks;
    assert_eq!(
        listed[0].message,
        "resubmitted after attempt 1 was cancelled"
    );
    assert_eq!(listed[1].message, "resubmitted after it was cancelled");
    // A restart keeps them pending; they run, task 0 as attempt 2.
    drop(s);
    let mut s = open(&d);
    let n = common::register(&mut s, "n", 1);
    let r = beat(&mut s, n, &[], &[]);
    assert_eq!((r.assignments[0].task_id, r.assignments[0].attempt), (0, 2));
    let r = beat(&mut s, n, &[], &[(0, 2, true)]);
    assert_eq!((r.assignments[0].task_id, r.assignments[0].attempt), (1, 1));
    beat(&mut s, n, &[], &[(1, 1, false)]);
    assert_eq!(s.job(job).expect("job").state, "failed");
    // Both modes at once: the failed one (nothing is cancelled now).
    assert_eq!(
        s.on_resubmit_ended(job, true, true).expect("resubmitted"),
        1
    );
    let r = beat(&mut s, n, &[], &[]);
    assert_eq!((r.assignments[0].task_id, r.assignments[0].attempt), (1, 2));
    beat(&mut s, n, &[], &[(1, 2, true)]);
    assert_eq!(s.job(job).expect("job").state, "completed");
    // A job cancelled as a whole is not brought back.
    let other = s
        .submit(
            "job.toml",
            "[[application]]\nname = \"b\"\ntasks = 1\n[application.cpu]\ncommand = \"true\"\n",
            "/",
        )
        .expect("submit")
        .job_id;
    s.cancel(other).expect("cancelled");
    let e = s
        .on_resubmit_ended(other, false, true)
        .expect_err("cancelled as a whole")
        .to_string();
    assert!(e.contains("was cancelled: submit it again"), "{e}");
}

/// A state whose purges delete at most 1,000 task rows a transaction, with user `alice`, who
/// may keep 6,000 tasks stored.
fn open_chunked(d: &Path) -> State {
    open_bounded(d, 1_000)
}

/// [`open_chunked`], whose purges delete at most `chunk` rows a transaction.
fn open_bounded(d: &Path, chunk: u64) -> State {
    let config = ServerConfig {
        data_dir: d.to_path_buf(),
        purge_chunk_tasks: chunk,
        max_stored_tasks_per_user: 6_000,
        ..Default::default()
    };
    let mut s =
        State::open(&config, Store::open(&d.join("state.db")).expect("store")).expect("state");
    if s.on_add_user("alice", false).is_ok() {
        // (A restart finds her stored.)
    }
    s
}

fn alices(s: &mut State, tasks: u32) -> Result<u64, StateError> {
    let sub = hetsched_server::state::types::Submission {
        origin: "big.toml".into(),
        text: format!(
            "[[application]]\nname = \"a\"\ntasks = {tasks}\n[application.cpu]\ncommand = \"true\"\n"
        ),
        workdir: "/".into(),
        ..Default::default()
    };
    s.on_submit_as(sub, "alice").map(|j| j.job_id)
}

/// Alice's 5,000-task job, cancelled before it ran, purged by name.
fn purge_a_big_job(s: &mut State) -> u64 {
    let job = alices(s, 5_000).expect("5000 tasks");
    s.on_cancel(job).expect("cancelled");
    let reply = s
        .purge(&pb::PurgeRequest {
            job_ids: vec![job],
            ..Default::default()
        })
        .expect("purge");
    assert_eq!((reply.purged, reply.tasks), (vec![job], 5_000));
    job
}

/// A purge of many tasks deletes their rows in bounded steps, one transaction each, and the
/// state is free between them: heartbeats and submissions are served while rows are left. The
/// purged job is gone for every reader from the purge's first transaction on — listings, `job`,
/// the agents' purged check, the user's stored tasks. Before, one transaction deleted all
/// 5,000 rows while the state was held (5 million rows: 3 s during which every call waited).
#[test]
fn a_large_purge_deletes_its_rows_in_bounded_steps_and_other_calls_are_served_between_them() {
    let d = dir("steps");
    let mut s = open_chunked(&d);
    let n = common::register(&mut s, "n", 3);
    let job = purge_a_big_job(&mut s);
    // The first transaction marked the job and deleted the first chunk only.
    assert_eq!(s.purge_left(), 4_000);
    assert_eq!(stored_tasks(&d), 4_000);
    assert!(listed(&s).is_empty());
    let e = s.job(job).expect_err("purged").to_string();
    assert!(e.contains(&format!("no job {job}")), "{e}");
    assert_eq!(s.purged_jobs(n, common::IDENTITY, &[job]), Some(vec![job]));
    assert_eq!(
        s.tasks_page(0, 0, 100)
            .expect("every job's tasks")
            .tasks
            .len(),
        0
    );
    // Alice's 5,000 stored tasks were given back at once: 6,000 fit her cap again.
    let next = alices(&mut s, 6_000).expect("her room is back");
    s.on_cancel(next).expect("cancelled");
    // Every job's tasks, read through the store's read-only connection as the service reads
    // them: the later job's first rows, past the purged job's rows not deleted yet.
    let reader = s.store_reader().expect("reader").expect("a file store");
    let hetsched_server::state::TasksListing::FromStore(plan) =
        s.plan_tasks(0, 0, 3, &Default::default()).expect("plan")
    else {
        panic!("batch rows are read from the store");
    };
    let ids: Vec<u64> = plan
        .read(&reader)
        .expect("page")
        .tasks
        .iter()
        .map(|t| t.id)
        .collect();
    assert_eq!(ids, vec![5_000, 5_001, 5_002]);
    let mut steps = 0;
    loop {
        let written = s.written();
        let deleted = s.purge_step().expect("step");
        if deleted == 0 {
            break;
        }
        steps += 1;
        assert_eq!(deleted, 1_000, "a step deletes at most the chunk bound");
        assert_eq!(s.written(), written + 1, "one transaction a step");
        // Between steps other calls are served: a heartbeat, a listing.
        let r = beat(&mut s, n, &[], &[]);
        assert!(r.assignments.is_empty());
        assert_eq!(listed(&s), vec![(next, "cancelled".into())]);
        assert_eq!(stored_tasks(&d), 6_000 + 4_000 - 1_000 * steps);
    }
    assert_eq!(steps, 4);
    assert_eq!(s.purge_left(), 0);
    assert_eq!(
        stored_tasks(&d),
        6_000,
        "only the later job's rows are left"
    );
    // The later job is untouched: its tasks are all listed.
    assert_eq!(
        s.tasks_page(next, 0, 10_000)
            .expect("its tasks")
            .tasks
            .len(),
        6_000
    );
}

/// A server that stops in the middle of a purge's steps finishes it after its restart: the rows
/// left are deleted, and the job stays purged (not listed, its ids and key taken, its user's
/// stored tasks given back); nothing else is lost.
#[test]
fn a_restart_in_the_middle_of_a_purge_finishes_it_and_the_job_stays_purged() {
    let d = dir("steps-restart");
    let (job, kept) = {
        let mut s = open_chunked(&d);
        let kept = alices(&mut s, 10).expect("a job not purged");
        let job = purge_a_big_job(&mut s);
        assert_eq!(s.purge_step().expect("one step"), 1_000);
        assert_eq!(s.purge_left(), 3_000);
        (job, kept)
    }; // the server dies with 3,000 rows to delete
    let mut s = open_chunked(&d);
    assert_eq!(
        s.purge_left(),
        3_000,
        "the purge's record survives the restart"
    );
    assert_eq!(stored_tasks(&d), 10 + 3_000);
    assert_eq!(listed(&s), vec![(kept, "pending".into())]);
    assert!(s.job(job).is_err());
    let n = common::register(&mut s, "n", 3);
    assert_eq!(
        s.purged_jobs(n, common::IDENTITY, &[job, kept]),
        Some(vec![job])
    );
    // Alice's room: her 10 pending tasks and a new job of 5,990 (the purged job's 5,000 are
    // not counted).
    let more = alices(&mut s, 5_990).expect("her room is back after the restart");
    alices(&mut s, 1).expect_err("her cap is reached");
    let mut steps = 0;
    while s.purge_step().expect("step") > 0 {
        steps += 1;
    }
    assert_eq!(steps, 3);
    assert_eq!(stored_tasks(&d), 10 + 5_990);
    // Another restart: nothing is left to purge, the job is still gone, the others are whole.
    drop(s);
    let mut s = open_chunked(&d);
    assert_eq!(s.purge_left(), 0);
    assert_eq!(
        listed(&s),
        vec![(kept, "pending".into()), (more, "pending".into())]
    );
    assert!(s.job(job).is_err());
    let r = beat(&mut s, n, &[], &[]);
    assert_eq!(r.assignments.len(), 3, "the jobs not purged run");
    assert!(
        r.assignments
            .iter()
            .all(|a| !(10..5_010).contains(&a.task_id)),
        "no task of the purged job runs: {:?}",
        r.assignments
    );
}

/// Workflow `job`'s instance rows in the store.
fn stored_instances(d: &Path, job: u64) -> i64 {
    let conn = rusqlite::Connection::open(d.join("state.db")).expect("db");
    conn.query_row(
        "SELECT COUNT(*) FROM wf_instances WHERE job = ?1",
        [job as i64],
        |r| r.get(0),
    )
    .expect("count")
}

/// A workflow's instance rows go as a batch job's task rows do: the purge's transaction marks
/// the workflow purged and deletes at most the chunk bound of them (here 5); the rest go in
/// steps of that many, one transaction each, with other calls served between them; a restart
/// in the middle reads none of them and finishes the work. Before, one transaction deleted
/// them all while the state was held (a million instances: every call waited).
#[test]
fn a_large_workflow_purge_deletes_its_instance_rows_in_bounded_steps() {
    let d = dir("steps-workflow");
    let mut s = open_bounded(&d, 5);
    let n = common::register(&mut s, "n", 4);
    let wide = "balancer = \"centralised\"\n[[task]]\nname = \"w\"\ninstances = 12\n\
                command = \"true\"\n";
    let wf = s.submit("wide.toml", wide, "/").expect("submit").job_id;
    // Every instance runs and succeeds: each has its row.
    let mut done = Vec::new();
    for _ in 0..20 {
        let r = beat(&mut s, n, &[], &done);
        done = r
            .assignments
            .iter()
            .map(|a| (a.task_id, a.attempt, true))
            .collect();
        if done.is_empty() {
            break;
        }
    }
    assert_eq!(s.job(wf).expect("the workflow").state, "completed");
    assert_eq!(stored_instances(&d, wf), 12);
    let reply = s
        .purge(&pb::PurgeRequest {
            job_ids: vec![wf],
            ..Default::default()
        })
        .expect("purge");
    assert_eq!((reply.purged, reply.tasks), (vec![wf], 12));
    assert_eq!(s.purge_left(), 7, "the purge deleted the chunk bound");
    assert_eq!(stored_instances(&d, wf), 7);
    assert!(listed(&s).is_empty());
    assert!(s.job(wf).is_err());
    let written = s.written();
    assert_eq!(s.purge_step().expect("a step"), 5);
    assert_eq!(s.written(), written + 1, "one transaction a step");
    let r = beat(&mut s, n, &[], &[]);
    assert!(r.assignments.is_empty(), "nothing of it runs");
    assert_eq!(stored_instances(&d, wf), 2);
    // The server stops with 2 rows to delete; the restart does not read them.
    drop(s);
    let mut s = open_bounded(&d, 5);
    assert_eq!(s.purge_left(), 2);
    assert!(listed(&s).is_empty());
    assert!(s.job(wf).is_err());
    assert_eq!(s.purge_step().expect("the last step"), 2);
    assert_eq!(s.purge_step().expect("nothing left"), 0);
    assert_eq!(stored_instances(&d, wf), 0);
}

/// A workflow's purge steps count the rows the store holds, not instance numbers: a workflow of
/// 200 instances cancelled after its 12 first ran has 12 rows (its cancel writes none for the
/// 188 that never started), and with a bound of 5 its purge deletes 5 of them, then 5 and 2 in
/// two steps. Counted in instance numbers, the steps went 5 numbers at a time: 39 transactions,
/// 37 of them deleting nothing (a million-instance workflow: 50 steps of a few rows each for
/// what one step deletes now).
#[test]
fn a_workflows_purge_steps_count_its_stored_rows_not_its_instance_numbers() {
    let d = dir("steps-sparse-workflow");
    let mut s = open_bounded(&d, 5);
    let n = common::register(&mut s, "n", 12);
    // `spread` waits for `seed`'s output: the first beat starts the 12 seeds only.
    let wide = "balancer = \"centralised\"\n\
                [[task]]\nname = \"seed\"\ninstances = 12\noutputs = [\"a\"]\n\
                command = \"echo 1 > {output:a}\"\n\
                [[task]]\nname = \"spread\"\ninstances = 188\ninputs = [\"a\"]\n\
                command = \"cat {input:a}\"\n";
    let wf = s.submit("wide.toml", wide, "/").expect("submit").job_id;
    let r = beat(&mut s, n, &[], &[]);
    let seeds: Vec<(u64, u32)> = r
        .assignments
        .iter()
        .map(|a| (a.task_id, a.attempt))
        .collect();
    assert_eq!(seeds.len(), 12, "the seeds run");
    // The node is drained before they end: nothing else starts, and the workflow is cancelled.
    s.drain_node("n", true, "").expect("drain");
    let ended: Vec<(u64, u32, bool)> = seeds.iter().map(|&(t, a)| (t, a, true)).collect();
    let r = beat(&mut s, n, &seeds, &ended);
    assert!(r.assignments.is_empty(), "drained: nothing starts");
    s.on_cancel(wf).expect("cancel");
    assert_eq!(s.job(wf).expect("the workflow").state, "cancelled");
    assert_eq!(
        stored_instances(&d, wf),
        12,
        "rows of the instances that ran only"
    );
    let reply = s
        .purge(&pb::PurgeRequest {
            job_ids: vec![wf],
            ..Default::default()
        })
        .expect("purge");
    assert_eq!((reply.purged, reply.tasks), (vec![wf], 200));
    assert_eq!(stored_instances(&d, wf), 7, "the purge deleted the bound");
    let mut steps = Vec::new();
    loop {
        let before = stored_instances(&d, wf);
        let deleted = s.purge_step().expect("a step");
        if deleted == 0 {
            break;
        }
        steps.push(before - stored_instances(&d, wf));
        assert!(steps.len() <= 200, "the steps end");
    }
    assert_eq!(
        steps,
        [5, 2],
        "at most the bound of rows a step, and no empty step"
    );
    assert_eq!((s.purge_left(), stored_instances(&d, wf)), (0, 0));
}

/// Through the service: a purge of a job larger than the chunk bound answers as before (the
/// jobs and tasks purged), and only once the server's purger task deleted the rows the purge's
/// transaction left, in steps; a job listing meanwhile and after is answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_purge_call_answers_once_the_purger_deleted_its_rows_in_steps() {
    let d = dir("steps-service");
    let config = ServerConfig {
        data_dir: d.to_path_buf(),
        purge_chunk_tasks: 1_000,
        ..Default::default()
    };
    let (server, channel) = common::serve(config).await;
    let mut api =
        pb::client_client::ClientClient::with_interceptor(channel, common::client_token(&server));
    let job = api
        .submit(pb::SubmitRequest {
            origin: "big.toml".into(),
            text: "[[application]]\nname = \"a\"\ntasks = 5000\n[application.cpu]\n\
                   command = \"true\"\n"
                .into(),
            ..Default::default()
        })
        .await
        .expect("submitted")
        .into_inner()
        .job_id;
    api.cancel(pb::CancelRequest {
        job_id: job,
        ..Default::default()
    })
    .await
    .expect("cancelled");
    let reply = api
        .purge(pb::PurgeRequest {
            job_ids: vec![job, job],
            ..Default::default()
        })
        .await
        .expect("purged")
        .into_inner();
    assert_eq!((reply.purged, reply.tasks), (vec![job], 5_000));
    assert_eq!(stored_tasks(&d), 0, "the reply waited for the steps");
    let again = api
        .purge(pb::PurgeRequest {
            job_ids: vec![job],
            ..Default::default()
        })
        .await
        .expect("a retried purge")
        .into_inner();
    assert_eq!((again.purged, again.already_purged), (vec![], vec![job]));
    let jobs = api
        .list_jobs(pb::ListJobsRequest::default())
        .await
        .expect("listed")
        .into_inner();
    assert!(jobs.jobs.is_empty(), "{jobs:?}");
    server.stop().await.expect("stopped");
}

/// The stored `text` of job `id` in `table` (its job file, or what a purge left of it).
fn stored_text(d: &Path, table: &str, id: u64) -> String {
    let conn = rusqlite::Connection::open(d.join("state.db")).expect("db");
    conn.query_row(
        &format!("SELECT text FROM {table} WHERE id = ?1"),
        [id as i64],
        |r| r.get(0),
    )
    .expect("row")
}

/// A purge drops the job file from the store: a user who submits, cancels and purges big
/// files again and again (`max_stored_bytes_per_user` stops counting a purged job) no longer
/// grows the store without bound. What the file told a restart and a resubmission is kept:
/// the ids it took, and whether a submission under its key sends the same file.
#[test]
fn a_purge_drops_the_job_file_but_keeps_its_ids_and_key_across_a_restart() {
    let d = dir("purge-text");
    // About 1.4 MB, most of it a comment: near the 2 MiB a job file may be.
    let big = format!("{JOB}# {}\n", "x".repeat(1_400_000));
    {
        let mut s = open(&d);
        let job = s
            .submit_keyed("job.toml", &big, "/", "big")
            .expect("submit");
        assert_eq!(job.job_id, 1);
        assert_eq!(
            stored_text(&d, "jobs", 1),
            big,
            "an unpurged job keeps its file"
        );
        s.cancel(1).expect("cancel");
        s.purge(&pb::PurgeRequest {
            job_ids: vec![1],
            ..Default::default()
        })
        .expect("purge");
        let left = stored_text(&d, "jobs", 1);
        assert!(
            left.len() < 100,
            "the purged job's row keeps {} bytes of text",
            left.len()
        );
        // Before a restart, the key still names the job, for the same file only.
        let again = s.submit_keyed("job.toml", &big, "/", "big").expect("key");
        assert_eq!((again.job_id, again.existing), (1, true));
    }
    // A restart, the purged job the newest: its ids still come from its row, not its file.
    let mut s = open(&d);
    assert!(listed(&s).is_empty());
    let again = s.submit_keyed("job.toml", &big, "/", "big").expect("key");
    assert_eq!(
        (again.job_id, again.existing, again.tasks),
        (1, true, 3),
        "the same file under the key is the purged job"
    );
    let other = s
        .submit_keyed("job.toml", JOB, "/", "big")
        .expect_err("another file under the key");
    assert!(
        other
            .to_string()
            .contains("already names job 1, submitted with another file"),
        "{other}"
    );
    let n = common::register(&mut s, "n", 3);
    let next = s.submit("job.toml", JOB, "/").expect("submit");
    assert_eq!(next.job_id, 2);
    let ids: Vec<u64> = beat(&mut s, n, &[], &[])
        .assignments
        .iter()
        .map(|a| a.task_id)
        .collect();
    assert_eq!(ids, vec![3, 4, 5], "after the purged job's three tasks");
}

/// A workflow's purge drops its file too; its key still names it, for the same file only.
#[test]
fn a_purged_workflow_keeps_no_file_but_its_key_still_names_it() {
    let d = dir("purge-text-workflow");
    let wide = "balancer = \"centralised\"\n[[task]]\nname = \"w\"\ninstances = 12\n\
                command = \"true\"\n";
    let big = format!("{wide}# {}\n", "x".repeat(100_000));
    let mut s = open(&d);
    let wf = s
        .submit_keyed("wide.toml", &big, "/", "k")
        .expect("submit")
        .job_id;
    s.cancel(wf).expect("cancel");
    s.purge(&pb::PurgeRequest {
        job_ids: vec![wf],
        ..Default::default()
    })
    .expect("purge");
    let conn = rusqlite::Connection::open(d.join("state.db")).expect("db");
    let kept: i64 = conn
        .query_row("SELECT MAX(length(text)) FROM wf_jobs", [], |r| r.get(0))
        .expect("row");
    drop(conn);
    assert!(kept < 100, "{kept} bytes kept");
    for restarted in [false, true] {
        if restarted {
            drop(s);
            s = open(&d);
        }
        let again = s.submit_keyed("wide.toml", &big, "/", "k").expect("same");
        assert_eq!((again.job_id, again.existing), (wf, true), "{restarted}");
        let e = s
            .submit_keyed("wide.toml", wide, "/", "k")
            .expect_err("another file");
        assert!(e.to_string().contains("submitted with another file"), "{e}");
    }
}

/// A job purged by a binary from before purges dropped job files keeps its file in the store
/// until this binary opens it: the open replaces it with its digest, and the job's key still
/// names it for the same file.
#[test]
fn opening_the_store_drops_the_files_of_jobs_an_older_binary_purged() {
    let d = dir("purge-text-older");
    {
        let mut s = open(&d);
        let n = common::register(&mut s, "n", 3);
        run_job(&mut s, n, "k-1");
        run_job(&mut s, n, "k-2");
        s.purge(&pb::PurgeRequest {
            job_ids: vec![1],
            ..Default::default()
        })
        .expect("purge");
    }
    // As an older binary's purge left it: the file whole.
    let conn = rusqlite::Connection::open(d.join("state.db")).expect("db");
    conn.execute("UPDATE jobs SET text = ?1 WHERE id = 1", [JOB])
        .expect("as before");
    drop(conn);
    let mut s = open(&d);
    assert!(
        stored_text(&d, "jobs", 1).starts_with("sha256:"),
        "the open dropped the file"
    );
    assert_eq!(
        stored_text(&d, "jobs", 2),
        JOB,
        "an unpurged job keeps its file"
    );
    let again = s.submit_keyed("job.toml", JOB, "/", "k-1").expect("key");
    assert_eq!((again.job_id, again.existing), (1, true));
    let e = s
        .submit_keyed("job.toml", "x = 1\n", "/", "k-1")
        .expect_err("another file");
    assert!(e.to_string().contains("submitted with another file"), "{e}");
}
