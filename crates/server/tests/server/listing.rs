//! Pages of batch jobs' tasks (one job's, running or finished, or every job's) are read from the
//! store without the state's lock: the lock is held only to plan the page (which rows, the names
//! to show them with); the rows are read through a second, read-only connection while the
//! scheduler goes on.

use crate::common;

use common::{Scratch, client_token, heartbeat_request};
use hetsched_proto as pb;
use hetsched_proto::client_client::ClientClient;
use hetsched_server::ServerConfig;
use hetsched_server::convert::Wire;
use hetsched_server::state::{State, StateError, TasksListing};
use hetsched_server::store::Store;
use std::path::Path;
use std::sync::{Arc, Mutex, mpsc};
use std::time::Duration;

const JOB: &str =
    "[[application]]\nname = \"a\"\ntasks = 3\n[application.cpu]\ncommand = \"true\"\n";

fn scratch(name: &str) -> Scratch {
    common::scratch("listing", name)
}

fn open(d: &Path) -> State {
    let config = ServerConfig {
        data_dir: d.to_path_buf(),
        ..Default::default()
    };
    State::open(&config, Store::open(&d.join("state.db")).expect("store")).expect("state")
}

/// Runs one 3-task job to success on a 3-core node and lets its rows leave memory.
fn finished_job(s: &mut State) -> u64 {
    let n = common::register(s, "n", 3);
    let job = run_to_success(s, n);
    assert_eq!(s.tasks_in_memory(), 0);
    job
}

#[test]
fn a_finished_jobs_page_is_read_while_another_thread_holds_the_state() {
    let d = scratch("lock");
    std::fs::create_dir_all(&d).expect("dir");
    let mut s = open(&d);
    let job = finished_job(&mut s);
    let under_lock = s.list_tasks(job, 0, 2).expect("page under the lock");
    let reader = s.store_reader().expect("reader").expect("a file store");
    let shared = Arc::new(Mutex::new(s));

    let plan = shared
        .lock()
        .expect("lock")
        .plan_tasks(job, 0, 2, &Default::default())
        .expect("plan");
    let TasksListing::FromStore(stored) = plan else {
        panic!("a finished job's rows left memory: the page is read from the store");
    };
    // The state's lock is held (and used: a new job is submitted) while the page is read.
    let mut guard = shared.lock().expect("lock");
    let (tx, rx) = mpsc::channel();
    let t = std::thread::spawn(move || {
        let _ = tx.send(stored.read(&reader));
    });
    let page = rx
        .recv_timeout(Duration::from_secs(30))
        .expect("the read does not wait for the state's lock")
        .expect("page");
    guard
        .submit("job.toml", JOB, "/")
        .expect("the state goes on");
    drop(guard);
    t.join().expect("reader thread");
    assert_eq!(
        page, under_lock,
        "the same page as the listing under the lock"
    );
    assert_eq!(
        page.tasks.iter().map(|t| t.id).collect::<Vec<_>>(),
        vec![0, 1]
    );
    assert_eq!((page.next_cursor, page.total), (2, 3));
    assert!(
        page.tasks
            .iter()
            .all(|t| t.state == "succeeded" && t.node == "n")
    );

    // A job still running is read from the store too (see the test below).
    let s = shared.lock().expect("lock");
    assert!(matches!(
        s.plan_tasks(2, 0, 2, &Default::default()).expect("plan"),
        TasksListing::FromStore(_)
    ));
    // A plan made before a purge finds no rows: the job is gone.
    let stale = match s.plan_tasks(job, 2, 2, &Default::default()).expect("plan") {
        TasksListing::FromStore(p) => p,
        TasksListing::Ready(_) => panic!("finished job"),
    };
    drop(s);
    shared
        .lock()
        .expect("lock")
        .purge(&pb::PurgeRequest {
            job_ids: vec![job],
            ..Default::default()
        })
        .expect("purge");
    let reader = shared
        .lock()
        .expect("lock")
        .store_reader()
        .expect("reader")
        .expect("file store");
    assert!(matches!(stale.read(&reader), Err(StateError::NoJob(j)) if j == job));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_tasks_pages_a_finished_job_from_the_store_over_grpc() {
    let d = scratch("grpc");
    let config = ServerConfig {
        listen: "127.0.0.1:0".parse().expect("addr"),
        data_dir: d.to_path_buf(),
        ..Default::default()
    };
    // A first start prepares the private data directory; the job is then run in process.
    hetsched_server::start(config.clone())
        .await
        .expect("server starts")
        .stop()
        .await
        .expect("stops");
    let job = finished_job(&mut open(&d));
    // After a restart the finished job's rows are not read into memory at all.
    let (server, channel) = crate::common::serve(config).await;
    let token = client_token(&server);
    let mut client = ClientClient::with_interceptor(channel, token);
    let mut ids = Vec::new();
    let mut cursor = 0;
    loop {
        let page = client
            .list_tasks(pb::ListTasksRequest {
                job_id: job,
                cursor,
                limit: 2,
                ..Default::default()
            })
            .await
            .expect("page")
            .into_inner();
        assert_eq!(page.total, 3);
        ids.extend(
            page.tasks
                .iter()
                .map(|t| (t.id, t.state.clone(), t.app.clone())),
        );
        if page.next_cursor == 0 {
            break;
        }
        cursor = page.next_cursor;
    }
    let ok = |id: u64| (id, "succeeded".to_string(), "a".to_string());
    assert_eq!(ids, vec![ok(0), ok(1), ok(2)]);
    server.stop().await.expect("stops");
}

#[test]
fn a_running_jobs_page_is_read_from_the_store_while_another_thread_holds_the_state() {
    let d = scratch("running");
    std::fs::create_dir_all(&d).expect("dir");
    let mut s = open(&d);
    let n = common::register(&mut s, "n", 2);
    let job = s.submit("job.toml", JOB, "/").expect("submit").job_id;
    s.heartbeat(heartbeat_request(n, &[], &[])).expect("beat");
    // Task 0 succeeds, 1 runs, 2 is dispatched in its place.
    s.heartbeat(heartbeat_request(n, &[(1, 1)], &[(0, 1, true)]))
        .expect("beat");
    let under_lock = s.list_tasks(job, 0, 3).expect("page under the lock");
    let states: Vec<&str> = under_lock.tasks.iter().map(|t| t.state.as_str()).collect();
    assert_eq!(states, ["succeeded", "running", "running"]);
    let reader = s.store_reader().expect("reader").expect("a file store");
    let shared = Arc::new(Mutex::new(s));
    let plan = shared
        .lock()
        .expect("lock")
        .plan_tasks(job, 0, 3, &Default::default())
        .expect("plan");
    let TasksListing::FromStore(stored) = plan else {
        panic!("a running job's page is read from the store, not built under the lock");
    };
    // The state's lock is held while the page is read on another thread.
    let guard = shared.lock().expect("lock");
    let (tx, rx) = mpsc::channel();
    let t = std::thread::spawn(move || {
        let _ = tx.send(stored.read(&reader));
    });
    let page = rx
        .recv_timeout(Duration::from_secs(30))
        .expect("the read does not wait for the state's lock")
        .expect("page");
    drop(guard);
    t.join().expect("reader thread");
    assert_eq!(page, under_lock, "the same page as built under the lock");
    assert!(
        page.tasks[1..]
            .iter()
            .all(|t| t.node == "n" && t.attempt == 1)
    );

    // A plan made before the job moves on reads the newer state: the store's latest commit.
    let mut s = shared.lock().expect("lock");
    let TasksListing::FromStore(stored) =
        s.plan_tasks(job, 0, 3, &Default::default()).expect("plan")
    else {
        panic!("from the store");
    };
    s.heartbeat(heartbeat_request(n, &[], &[(1, 1, true), (2, 1, true)]))
        .expect("beat");
    let reader = s.store_reader().expect("reader").expect("a file store");
    drop(s);
    let page = stored.read(&reader).expect("page");
    assert!(
        page.tasks.iter().all(|t| t.state == "succeeded"),
        "{page:?}"
    );
}

/// Counts of `job` as listings show them, and as its task rows say.
fn counts_both_ways(s: &State, job: u64) -> ([u64; 5], [u64; 5]) {
    let listed = s
        .list_jobs(0, 0)
        .jobs
        .into_iter()
        .find(|j| j.id == job)
        .expect("listed");
    let c = listed.counts;
    let shown = [c.pending, c.running, c.succeeded, c.failed, c.cancelled];
    let one = s.get_job(job).expect("job").counts;
    assert_eq!(
        shown,
        [
            one.pending,
            one.running,
            one.succeeded,
            one.failed,
            one.cancelled
        ],
        "ListJobs and GetJob agree"
    );
    let mut rows = [0u64; 5];
    for t in s.list_tasks(job, 0, u32::MAX).expect("tasks").tasks {
        let i = ["pending", "running", "succeeded", "failed", "cancelled"]
            .iter()
            .position(|x| *x == t.state)
            .expect("a known state");
        rows[i] += 1;
    }
    (shown, rows)
}

/// Job listings no longer count a job's rows under the state's lock: each application keeps its
/// counts as its tasks move (dispatch, success, failed attempt and retry, failure for good, loss,
/// cancel, resubmission, restart, eviction). They must always equal what the rows say.
#[test]
fn job_listings_keep_counts_as_tasks_move_and_they_match_the_rows() {
    let d = scratch("counts");
    std::fs::create_dir_all(&d).expect("dir");
    let mut s = open(&d);
    let n = common::register(&mut s, "n", 4);
    let two_apps = "[[application]]\nname = \"a\"\ntasks = 5\nretries = 1\n[application.cpu]\ncommand = \"true\"\n\n[[application]]\nname = \"b\"\ntasks = 3\n[application.cpu]\ncommand = \"true\"\n";
    let job = s.submit("two.toml", two_apps, "/").expect("submit").job_id;
    let other = s.submit("job.toml", JOB, "/").expect("submit").job_id;
    let check = |s: &State, want: [u64; 5]| {
        let (shown, rows) = counts_both_ways(s, job);
        assert_eq!(shown, rows, "counts kept as tasks move equal the rows");
        assert_eq!(shown, want);
    };
    check(&s, [8, 0, 0, 0, 0]);
    // Four tasks start.
    let r = s.heartbeat(heartbeat_request(n, &[], &[])).expect("beat");
    let started: Vec<(u64, u32)> = r
        .assignments
        .iter()
        .map(|a| (a.task_id, a.attempt))
        .collect();
    assert_eq!(started.len(), 4);
    // (The policy shares the node between the two jobs' applications.)
    let (shown, rows) = counts_both_ways(&s, job);
    assert_eq!(shown, rows);
    assert!(shown[1] > 0 && shown[0] + shown[1] == 8, "{shown:?}");
    // One succeeds, one fails (app `a` retries it: pending again), one is lost (neither
    // running nor finished in the heartbeat), one keeps running. Three more start.
    let (ok, bad, lost, keep) = (started[0], started[1], started[2], started[3]);
    let r = s
        .heartbeat(heartbeat_request(
            n,
            &[keep],
            &[(ok.0, ok.1, true), (bad.0, bad.1, false)],
        ))
        .expect("beat");
    let _ = lost; // lost: pending again, with its next attempt
    let mut running: Vec<(u64, u32)> = vec![keep];
    running.extend(r.assignments.iter().map(|a| (a.task_id, a.attempt)));
    let (shown, rows) = counts_both_ways(&s, job);
    assert_eq!(shown, rows);
    let (o, orows) = counts_both_ways(&s, other);
    assert_eq!(o, orows);
    assert_eq!(shown[1] + o[1], running.len() as u64);
    assert_eq!(shown[2] + o[2], 1);
    // Every running task fails for good (retries spent on a second failure; `b` has none).
    let mut failures: Vec<(u64, u32, bool)> = running.iter().map(|&(t, a)| (t, a, false)).collect();
    let mut rounds = 0;
    while !failures.is_empty() && rounds < 20 {
        let r = s
            .heartbeat(heartbeat_request(n, &[], &failures))
            .expect("beat");
        failures = r
            .assignments
            .iter()
            .map(|a| (a.task_id, a.attempt, false))
            .collect();
        let (shown, rows) = counts_both_ways(&s, job);
        assert_eq!(shown, rows, "after failure round {rounds}");
        rounds += 1;
    }
    let (shown, rows) = counts_both_ways(&s, job);
    assert_eq!(shown, rows);
    assert_eq!(
        shown[0] + shown[1],
        0,
        "nothing pending or running: {shown:?}"
    );
    assert!(shown[3] > 0, "some failed for good: {shown:?}");
    // Resubmitting the failed tasks makes them pending again; cancelling cancels them.
    let failed = shown[3];
    s.on_resubmit(job).expect("resubmit");
    check(&s, [failed, 0, shown[2], 0, 0]);
    s.on_cancel(job).expect("cancel");
    check(&s, [0, 0, shown[2], 0, failed]);
    // The same after a restart, and after the rows left memory.
    drop(s);
    let mut s = open(&d);
    check(&s, [0, 0, shown[2], 0, failed]);
    // (A restart already evicts finished jobs; this evicts any left.)
    s.evict_finished();
    assert_eq!(s.tasks_in_memory(), 0, "both jobs finished: no row held");
    check(&s, [0, 0, shown[2], 0, failed]);
    drop(s);
    let s = open(&d);
    check(&s, [0, 0, shown[2], 0, failed]);
    let (o, _) = counts_both_ways(&s, other);
    assert_eq!(
        o.iter().sum::<u64>(),
        3,
        "the other job keeps its three tasks"
    );
}

/// Runs `job`'s 3 tasks to success on node `n` (3 cores) and lets the rows leave memory.
fn run_to_success(s: &mut State, n: u32) -> u64 {
    let job = s.submit("job.toml", JOB, "/").expect("submit").job_id;
    let r = s.heartbeat(heartbeat_request(n, &[], &[])).expect("beat");
    let done: Vec<(u64, u32, bool)> = r
        .assignments
        .iter()
        .map(|a| (a.task_id, a.attempt, true))
        .collect();
    s.heartbeat(heartbeat_request(n, &[], &done)).expect("beat");
    assert_eq!(s.evict_finished(), 1);
    job
}

#[test]
fn every_jobs_pages_are_read_from_the_store_past_a_purged_job_and_match_the_listing_under_the_lock()
{
    let d = scratch("every-job");
    std::fs::create_dir_all(&d).expect("dir");
    let mut s = open(&d);
    let n = common::register(&mut s, "n", 3);
    // Job 1 finished (rows in the store only), job 2 finished and purged (a hole in the ids),
    // job 3 running.
    let first = run_to_success(&mut s, n);
    let purged = run_to_success(&mut s, n);
    s.purge(&pb::PurgeRequest {
        job_ids: vec![purged],
        ..Default::default()
    })
    .expect("purge");
    let running = s.submit("job.toml", JOB, "/").expect("submit").job_id;
    s.heartbeat(heartbeat_request(n, &[], &[])).expect("beat");

    let reader = s.store_reader().expect("reader").expect("a file store");
    let shared = Arc::new(Mutex::new(s));
    let (mut cursor, mut seen) = (0u64, Vec::new());
    loop {
        let s = shared.lock().expect("lock");
        let under_lock = s.list_tasks(0, cursor, 2).expect("page under the lock");
        let TasksListing::FromStore(stored) = s
            .plan_tasks(0, cursor, 2, &Default::default())
            .expect("plan")
        else {
            panic!("every job's page is read from the store, not built under the lock");
        };
        // The state's lock stays held while the page is read on another thread.
        let reader = &reader;
        let page = std::thread::scope(|scope| {
            scope
                .spawn(move || stored.read(reader))
                .join()
                .expect("reader thread")
        })
        .expect("page");
        drop(s);
        assert_eq!(page, under_lock, "page at cursor {cursor}");
        seen.extend(page.tasks.iter().map(|t| (t.id, t.job_id)));
        if page.next_cursor == 0 {
            break;
        }
        assert!(page.next_cursor > cursor, "the listing moves on");
        cursor = page.next_cursor;
    }
    assert_eq!(
        seen,
        [0, 1, 2]
            .map(|i| (i, first))
            .into_iter()
            .chain([6, 7, 8].map(|i| (i, running)))
            .collect::<Vec<_>>(),
        "every task of every unpurged job once, in id order, with its own job"
    );
}

/// A state filter on one batch job's page is the store's query: the page holds the first
/// `limit` matching rows from the cursor wherever they are, `total` counts the matching tasks,
/// and the cursor goes on after the last row shown.
#[test]
fn a_filtered_page_of_one_job_is_its_first_matching_rows_from_the_cursor() {
    use hetsched_server::state::types::StateFilter;
    let d = scratch("filtered");
    std::fs::create_dir_all(&d).expect("dir");
    let mut s = open(&d);
    let n = common::register(&mut s, "n", 6);
    let text = "[[application]]\nname = \"a\"\ntasks = 6\n[application.cpu]\ncommand = \"true\"\n";
    let job = s.submit("job.toml", text, "/").expect("submit").job_id;
    s.heartbeat(heartbeat_request(n, &[], &[])).expect("beat");
    // Tasks 1, 3 and 4 fail, the others succeed.
    let results: Vec<(u64, u32, bool)> = (0..6).map(|t| (t, 1, ![1, 3, 4].contains(&t))).collect();
    s.heartbeat(heartbeat_request(n, &[], &results))
        .expect("beat");
    let reader = s.store_reader().expect("reader").expect("a file store");
    let failed = StateFilter::parse(&["failed".to_string()]).expect("a state");
    let page = |s: &State, cursor: u64, limit: u32| {
        let TasksListing::FromStore(stored) =
            s.plan_tasks(job, cursor, limit, &failed).expect("plan")
        else {
            panic!("one batch job's page is read from the store");
        };
        stored.read(&reader).expect("page")
    };
    let first = page(&s, 0, 2);
    let ids: Vec<u64> = first.tasks.iter().map(|t| t.id).collect();
    assert_eq!((ids, first.total, first.next_cursor), (vec![1, 3], 3, 4));
    let rest = page(&s, first.next_cursor, 2);
    let ids: Vec<u64> = rest.tasks.iter().map(|t| t.id).collect();
    assert_eq!((ids, rest.next_cursor), (vec![4], 0));
    // A workflow's state names no batch task: an empty page, the listing ends.
    let ready = StateFilter::parse(&["ready".to_string()]).expect("a state");
    let TasksListing::Ready(none) = s.plan_tasks(job, 0, 10, &ready).expect("plan") else {
        panic!("nothing to read");
    };
    assert!(none.tasks.is_empty() && none.next_cursor == 0);
    assert!(StateFilter::parse(&["bogus".to_string()]).is_err());
}

/// `hetsched node drain NAME --reason TEXT` (Slurm's `Reason=`): the listing shows why and since
/// when; a drain again takes the new reason (or, given none, keeps the old) and keeps its time;
/// a restart keeps both; a resume
/// clears them. A reason too long, with a control character, or given to a resume is refused.
#[test]
fn a_drains_reason_and_time_are_listed_kept_across_a_restart_and_cleared_by_a_resume() {
    let d = scratch("drain-reason");
    let note = |s: &State| {
        let n = &s.nodes(false).nodes[0];
        (n.drained, n.drain_reason.clone(), n.drained_since_ms)
    };
    let since;
    {
        let mut s = open(&d);
        common::register(&mut s, "n", 2);
        assert_eq!(note(&s), (false, String::new(), 0));
        s.drain_node("n", true, "bad fan").expect("drained");
        let (drained, reason, at) = note(&s);
        assert!(
            drained && reason == "bad fan" && at > 1_700_000_000_000,
            "{reason} {at}"
        );
        since = at;
        std::thread::sleep(Duration::from_millis(5));
        s.drain_node("n", true, "  fan replaced, testing ")
            .expect("drained again");
        assert_eq!(note(&s), (true, "fan replaced, testing".into(), since));
        // A drain again without a reason keeps the note.
        s.drain_node("n", true, "").expect("drained again");
        assert_eq!(note(&s), (true, "fan replaced, testing".into(), since));
        for (reason, says) in [
            (
                "x".repeat(257),
                "reason: 257 bytes, more than the 256 accepted",
            ),
            ("two\nlines".into(), "reason: a control character"),
        ] {
            let e = s.drain_node("n", true, &reason).expect_err("refused");
            assert!(e.to_string().starts_with(says), "{e}");
        }
        let e = s
            .drain_node("n", false, "done")
            .expect_err("a resume's reason");
        assert!(
            e.to_string().contains("a resumed node keeps no reason"),
            "{e}"
        );
        assert_eq!(note(&s), (true, "fan replaced, testing".into(), since));
    }
    let mut s = open(&d);
    assert_eq!(note(&s), (true, "fan replaced, testing".into(), since));
    s.drain_node("n", false, "").expect("resumed");
    assert_eq!(note(&s), (false, String::new(), 0));
    drop(s);
    let s = open(&d);
    assert_eq!(note(&s), (false, String::new(), 0));
}

/// `hetsched job N --graph` on a job of another kind says what the job is, not that it does
/// not exist; an unknown id is still "no job".
#[test]
fn only_a_workflow_has_a_graph_and_another_jobs_refusal_says_its_kind() {
    let d = scratch("graph-kind");
    let mut s = open(&d);
    let job = s.submit("job.toml", JOB, "/").expect("submit").job_id;
    let e = s.workflow_dot(job).expect_err("a batch job");
    assert!(
        e.to_string().contains(&format!(
            "job {job} is a batch job: only a workflow has a task graph"
        )),
        "{e}"
    );
    let e = s.workflow_dot(job + 100).expect_err("no such job");
    assert_eq!(e.to_string(), format!("no job {}", job + 100));
}

/// After a restart, a node whose agent has not come back is not listed as dead while its grace
/// lasts: `returning_ms` says how long it has left (3 dead-timeouts, 30 s by default) until its
/// agent is heard again; a node heard since, and one declared dead, have none.
#[test]
fn nodes_not_back_since_a_restart_are_listed_as_returning_until_declared_dead() {
    let d = scratch("returning");
    {
        let mut s = open(&d);
        common::register(&mut s, "a", 2);
        common::register(&mut s, "b", 2);
        let listed = s.nodes(false).nodes;
        assert!(
            listed.iter().all(|n| n.alive && n.returning_ms.is_none()),
            "{listed:?}"
        );
    }
    let mut s = open(&d);
    let returning = |s: &State| -> Vec<(bool, Option<u64>)> {
        s.nodes(false)
            .nodes
            .iter()
            .map(|n| (n.alive, n.returning_ms))
            .collect()
    };
    for (alive, ms) in returning(&s) {
        assert!(!alive, "not heard since the restart");
        let ms = ms.expect("waited for");
        assert!(ms > 25_000 && ms <= 30_000, "{ms} ms of 3 × 10 s");
    }
    // Not removed while it may come back, saying so (it said "alive, last heartbeat …").
    let e = s.remove_node("a").expect_err("may come back");
    assert!(
        e.to_string().contains(
            "node `a` is not back since the server's restart, and its agent may still come \
             back (it is declared dead in"
        ),
        "{e}"
    );
    s.heartbeat(heartbeat_request(0, &[], &[]))
        .expect("a is back");
    let now = returning(&s);
    assert_eq!(now[0], (true, None), "a is back");
    assert!(!now[1].0 && now[1].1.is_some(), "b still may be: {now:?}");
    // A grace of no time: b is declared dead, and no longer waited for.
    s.check_dead(Duration::ZERO).expect("check");
    std::thread::sleep(Duration::from_millis(5_100));
    s.check_dead(Duration::ZERO).expect("check");
    assert_eq!(returning(&s)[1], (false, None), "b is dead");
}

/// `hetsched node stop NAME [--drain]`: every heartbeat tells the agent to stop, also after a
/// restart, until its last beat says it left (`operator`); a new agent of the node is not told.
/// A node without a live agent is refused.
#[test]
fn a_stop_is_told_at_every_beat_until_the_agent_leaves_and_survives_a_restart() {
    let d = scratch("node-stop");
    let told = |s: &mut State, n: u32| {
        let r = s
            .heartbeat(heartbeat_request(n, &[], &[]))
            .expect("heartbeat");
        (r.stop, r.stop_drain)
    };
    {
        let mut s = open(&d);
        let n = common::register(&mut s, "n", 2);
        assert_eq!(told(&mut s, n), (false, false));
        let e = s.on_stop_node("nosuch", false).expect_err("unknown");
        assert!(e.to_string().contains("nosuch"), "{e}");
        assert!(!s.nodes(false).nodes[0].stopping);
        // An idle agent waits on its wake-ups between seldom beats: the stop wakes it.
        let mut waits = s.await_work(n, common::IDENTITY).expect("its wake-ups");
        waits.borrow_and_update();
        s.on_stop_node("n", true).expect("asked");
        assert!(
            waits.has_changed().unwrap_or(false),
            "the stop wakes the node's agent at once"
        );
        assert!(s.nodes(false).nodes[0].stopping, "listed as stopping");
        assert_eq!(told(&mut s, n), (true, true));
        assert_eq!(told(&mut s, n), (true, true), "at every beat");
        // A plain stop after it escalates: the agent is told to stop its tasks now.
        s.on_stop_node("n", false).expect("asked");
        assert_eq!(told(&mut s, n), (true, false), "escalated");
        // A drain after a plain stop does not undo it.
        s.on_stop_node("n", true).expect("asked");
        assert_eq!(told(&mut s, n), (true, false), "not undone");
    }
    let mut s = open(&d);
    let n = common::register(&mut s, "n", 2);
    assert_eq!(told(&mut s, n), (false, false), "a new agent is not told");
    s.on_stop_node("n", false).expect("asked");
    drop(s);
    let mut s = open(&d);
    let n = 0;
    assert_eq!(told(&mut s, n), (true, false), "kept across a restart");
    // Its last beat: it leaves, and the request is over.
    let mut last = heartbeat_request(n, &[], &[]);
    last.draining = true;
    last.leaving = "operator".into();
    s.heartbeat(last).expect("last beat");
    let node = &s.nodes(true).nodes[0];
    assert_eq!(
        (node.alive, node.left.as_str(), node.stopping),
        (false, "operator", false)
    );
    let e = s.on_stop_node("n", false).expect_err("left");
    assert!(e.to_string().contains("its agent left: operator"), "{e}");
    drop(s);
    let s = open(&d);
    assert_eq!(s.nodes(true).nodes[0].left, "operator");
}
