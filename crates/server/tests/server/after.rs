//! Jobs that run after other jobs (`hetsched submit --after`, docs/runtime.md "Jobs after
//! jobs"): a waiting job's tasks are not dispatched while a job it names is unfinished, are
//! queued once all have completed (also across a restart), and the job is cancelled — with the
//! jobs waiting on it — when one ends failed or cancelled. Submissions naming what cannot be
//! waited for are refused, naming the job.

use crate::common;

use common::Agent;
use hetsched_proto as pb;
use hetsched_server::ServerConfig;
use hetsched_server::convert::Wire;
use hetsched_server::state::State;
use hetsched_server::state::types::Submission;
use hetsched_server::store::Store;
use std::path::Path;

fn open(d: &Path) -> State {
    let config = ServerConfig {
        data_dir: d.to_path_buf(),
        ..Default::default()
    };
    State::open(&config, Store::open(&d.join("state.db")).expect("store")).expect("state")
}

fn job_text(tasks: u32, command: &str) -> String {
    format!(
        "[[application]]\nname = \"a\"\ntasks = {tasks}\n[application.cpu]\ncommand = \"{command}\"\n"
    )
}

fn submit(s: &mut State, tasks: u32, after: &[u64]) -> Result<u64, String> {
    submit_after(s, tasks, after, &[])
}

/// A job of `tasks` tasks run after `after` completed and `after_any` ended.
fn submit_after(
    s: &mut State,
    tasks: u32,
    after: &[u64],
    after_any: &[u64],
) -> Result<u64, String> {
    s.on_submit(Submission {
        origin: "job.toml".into(),
        text: job_text(tasks, "true"),
        workdir: "/".into(),
        after: after.to_vec(),
        after_any: after_any.to_vec(),
        ..Default::default()
    })
    .map(|d| d.job_id)
    .map_err(|e| e.to_string())
}

/// The job of each dispatched task (from the listing of every task).
fn jobs_of(s: &State, tasks: &[(u64, u32)]) -> Vec<u64> {
    let every: Vec<pb::TaskInfo> = s.tasks(0).expect("tasks").tasks;
    tasks
        .iter()
        .map(|(t, _)| every.iter().find(|i| i.id == *t).expect("listed").job_id)
        .collect()
}

#[test]
fn a_job_after_another_waits_until_it_completes_then_runs() {
    let d = common::scratch("after", "waits");
    let mut s = open(&d);
    let mut n = Agent::new(&mut s, 8);
    let first = submit(&mut s, 2, &[]).expect("submit");
    let second = submit(&mut s, 3, &[first]).expect("submit after");
    let info = s.job(second).expect("job");
    assert_eq!((info.state.as_str(), info.waiting), ("pending", true));
    assert_eq!(info.after, vec![first]);

    // Eight free cores, five pending tasks: only the first job's two go out.
    let sent = n.beat(&mut s, &[]);
    assert_eq!(jobs_of(&s, &sent), vec![first, first]);
    assert!(n.beat(&mut s, &[]).is_empty(), "the second job still waits");

    // One of the two succeeds: still waiting.
    let sent_more = n.beat(&mut s, &[(sent[0].0, sent[0].1, true)]);
    assert!(sent_more.is_empty());
    assert!(s.job(second).expect("job").waiting);

    // The other succeeds: the first job completed, the second's three tasks go out at once.
    let released = n.beat(&mut s, &[(sent[1].0, sent[1].1, true)]);
    assert_eq!(jobs_of(&s, &released), vec![second; 3]);
    let info = s.job(second).expect("job");
    assert_eq!((info.state.as_str(), info.waiting), ("running", false));
}

#[test]
fn when_a_job_fails_every_job_waiting_on_it_is_cancelled_naming_it() {
    let d = common::scratch("after", "fails");
    let mut s = open(&d);
    let mut n = Agent::new(&mut s, 4);
    let first = submit(&mut s, 1, &[]).expect("submit");
    let second = submit(&mut s, 2, &[first]).expect("after the first");
    let third = submit(&mut s, 1, &[second]).expect("after the second");
    let other = submit(&mut s, 1, &[]).expect("unrelated");

    let sent = n.beat(&mut s, &[]);
    assert_eq!(jobs_of(&s, &sent), vec![first, other]);
    // The first job's only task fails (no retries): the job fails, and the chain after it is
    // cancelled in the same event — the second because of the first, the third because of the
    // second.
    n.beat(&mut s, &[(sent[0].0, sent[0].1, false)]);
    assert_eq!(s.job(first).expect("job").state, "failed");
    for (job, reason) in [
        (
            second,
            format!("cancelled: job {first}, which this job runs after, ended failed"),
        ),
        (
            third,
            format!("cancelled: job {second}, which this job runs after, ended cancelled"),
        ),
    ] {
        let info = s.job(job).expect("job");
        assert_eq!((info.state.as_str(), info.waiting), ("cancelled", false));
        for t in s.tasks(job).expect("tasks").tasks {
            assert_eq!((t.state.as_str(), t.attempt), ("cancelled", 0));
            assert_eq!(t.message, reason);
            assert_eq!(t.reason, "dependency_failed");
        }
    }
    assert_eq!(
        s.job(other).expect("job").state,
        "running",
        "an unrelated job runs on"
    );

    // Nothing can wait for a job that already failed or was cancelled.
    let e = submit(&mut s, 1, &[other, first]).expect_err("after a failed job");
    assert!(e.contains(&format!("job {first} ended failed")), "{e}");
    let e = submit(&mut s, 1, &[second]).expect_err("after a cancelled job");
    assert!(e.contains(&format!("job {second} ended cancelled")), "{e}");
}

#[test]
fn a_job_after_any_runs_once_the_others_ended_however_and_is_not_cancelled_by_a_failure() {
    let d = common::scratch("after", "any");
    let mut s = open(&d);
    let mut n = Agent::new(&mut s, 4);
    let failing = submit(&mut s, 1, &[]).expect("submit");
    let fine = submit(&mut s, 1, &[]).expect("submit");
    // Gathers whatever the two leave; a second one also needs `fine` to have completed.
    let gather = submit_after(&mut s, 1, &[], &[failing, fine]).expect("after any");
    let strict = submit_after(&mut s, 1, &[fine], &[failing]).expect("after and after any");
    let info = s.job(gather).expect("job");
    assert_eq!(
        (info.after_any.clone(), info.waiting),
        (vec![failing, fine], true)
    );
    let sent = n.beat(&mut s, &[]);
    assert_eq!(jobs_of(&s, &sent), vec![failing, fine]);
    // `failing` fails: nothing waiting is cancelled; `fine` still runs, so both still wait.
    assert!(n.beat(&mut s, &[(sent[0].0, sent[0].1, false)]).is_empty());
    assert_eq!(s.job(failing).expect("job").state, "failed");
    assert!(s.job(gather).expect("job").waiting && s.job(strict).expect("job").waiting);
    // `fine` completes: both are released.
    let released = n.beat(&mut s, &[(sent[1].0, sent[1].1, true)]);
    assert_eq!(jobs_of(&s, &released), vec![gather, strict]);
    // A job that already ended, failed included, may be named: the job is queued at once.
    let late = submit_after(&mut s, 1, &[], &[failing]).expect("after a failed job");
    assert!(!s.job(late).expect("job").waiting);
    let e = submit_after(&mut s, 1, &[], &[77]).expect_err("no job 77");
    assert!(e.contains("--after-any: no job 77"), "{e}");
}

#[test]
fn a_resubmitted_job_makes_the_jobs_after_it_wait_for_its_new_end_as_a_restart_would() {
    let d = common::scratch("after", "resubmitted");
    let mut s = open(&d);
    let mut n = Agent::new(&mut s, 1);
    let failing = submit(&mut s, 1, &[]).expect("submit");
    let sent = n.beat(&mut s, &[]);
    assert!(n.beat(&mut s, &[(sent[0].0, sent[0].1, false)]).is_empty());
    assert_eq!(s.job(failing).expect("job").state, "failed");
    // A job after any end of it is queued at once, and one of its two tasks goes out (one core).
    let gather = submit_after(&mut s, 2, &[], &[failing]).expect("after any");
    assert!(!s.job(gather).expect("job").waiting);
    let first = n.beat(&mut s, &[]);
    assert_eq!(jobs_of(&s, &first), vec![gather]);
    // The failed task runs again: the job is unfinished, so the gather's pending task waits for
    // its new end (the running one goes on).
    assert_eq!(s.resubmit_failed(failing).expect("resubmit").tasks, 1);
    assert!(s.job(gather).expect("job").waiting, "waits again");
    // A restart derives the same from the jobs' states.
    drop(s);
    let mut s = open(&d);
    assert!(
        s.job(gather).expect("job").waiting,
        "waits after a restart too"
    );
    let mut n = Agent {
        node: n.node,
        running: n.running.clone(),
    };
    // The gather's first task ends; the freed core runs the resubmitted task, not the gather's.
    let again = n.beat(&mut s, &[(first[0].0, first[0].1, true)]);
    assert_eq!(jobs_of(&s, &again), vec![failing]);
    // It succeeds: the job completed, the gather's last task goes out.
    let last = n.beat(&mut s, &[(again[0].0, again[0].1, true)]);
    assert_eq!(s.job(failing).expect("job").state, "completed");
    assert_eq!(jobs_of(&s, &last), vec![gather]);
}

#[test]
fn a_job_failed_by_the_dead_node_check_cancels_its_waiters_in_the_same_event() {
    let d = common::scratch("after", "dead");
    let config = ServerConfig {
        data_dir: d.to_path_buf(),
        max_attempts: 1,
        ..Default::default()
    };
    let mut s =
        State::open(&config, Store::open(&d.join("state.db")).expect("store")).expect("state");
    let mut n = Agent::new(&mut s, 1);
    let first = submit(&mut s, 1, &[]).expect("submit");
    let second = submit(&mut s, 1, &[first]).expect("after");
    let sent = n.beat(&mut s, &[]);
    assert_eq!(jobs_of(&s, &sent), vec![first]);
    // The node goes silent; its task is lost once, which `max_attempts = 1` makes a failure.
    std::thread::sleep(std::time::Duration::from_millis(20));
    s.check_dead(std::time::Duration::from_millis(1))
        .expect("dead check");
    assert_eq!(s.job(first).expect("job").state, "failed");
    assert_eq!(s.tasks(first).expect("tasks").tasks[0].reason, "lost");
    // No heartbeat or reaper tick since: the job after it is already cancelled (so a purge of
    // the failed job now cannot make it look completed).
    assert_eq!(s.job(second).expect("job").state, "cancelled");
    assert_eq!(
        s.tasks(second).expect("tasks").tasks[0].reason,
        "dependency_failed"
    );
}

#[test]
fn a_user_cancelling_the_first_job_cancels_the_job_after_it() {
    let d = common::scratch("after", "cancel");
    let mut s = open(&d);
    let first = submit(&mut s, 1, &[]).expect("submit");
    let second = submit(&mut s, 1, &[first]).expect("after");
    s.on_cancel(first).expect("cancel");
    let info = s.job(second).expect("job");
    assert_eq!(info.state, "cancelled");
    let reason = |job: u64| s.tasks(job).expect("tasks").tasks[0].reason.clone();
    assert_eq!(
        (reason(first), reason(second)),
        ("cancelled".into(), "dependency_failed".into())
    );
    // And a user may cancel a waiting job itself: it never runs.
    let third = submit(&mut s, 1, &[]).expect("submit");
    let fourth = submit(&mut s, 1, &[third]).expect("after");
    s.on_cancel(fourth).expect("cancel the waiting job");
    let mut n = Agent::new(&mut s, 4);
    let sent = n.beat(&mut s, &[]);
    assert_eq!(jobs_of(&s, &sent), vec![third]);
    n.beat(&mut s, &[(sent[0].0, sent[0].1, true)]);
    assert!(n.beat(&mut s, &[]).is_empty());
    assert_eq!(s.job(fourth).expect("job").state, "cancelled");
}

#[test]
fn a_restarted_server_keeps_waiting_jobs_waiting_and_released_ones_queued() {
    let d = common::scratch("after", "restart");
    let mut running = {
        let mut s = open(&d);
        let first = submit(&mut s, 1, &[]).expect("submit");
        let second = submit(&mut s, 3, &[first]).expect("after the first");
        submit(&mut s, 1, &[second]).expect("after the second");
        // Two cores: the first job runs and completes; the second is released and two of its
        // three tasks go out; the third job waits for the second.
        let mut n = Agent::new(&mut s, 2);
        let sent = n.beat(&mut s, &[]);
        assert_eq!(jobs_of(&s, &sent), vec![first]);
        let next = n.beat(&mut s, &[(sent[0].0, sent[0].1, true)]);
        assert_eq!(jobs_of(&s, &next), vec![second, second]);
        assert!(!s.job(second).expect("job").waiting);
        assert!(s.job(3).expect("job").waiting);
        n.running
    }; // the server dies; its agent runs on
    let mut s = open(&d);
    assert!(
        !s.job(2).expect("job").waiting,
        "its first job completed before the restart"
    );
    assert!(
        s.job(3).expect("job").waiting,
        "the job it runs after is unfinished"
    );
    let mut n = Agent::new(&mut s, 2);
    n.running = std::mem::take(&mut running);
    assert!(n.beat(&mut s, &[]).is_empty(), "both cores busy");
    let done: Vec<(u64, u32, bool)> = n.running.iter().map(|&(t, a)| (t, a, true)).collect();
    // The released job's last task goes out (it was queued again at the restart), not the third
    // job's.
    let last = n.beat(&mut s, &done);
    assert_eq!(jobs_of(&s, &last), vec![2]);
    let third = n.beat(&mut s, &[(last[0].0, last[0].1, true)]);
    assert_eq!(jobs_of(&s, &third), vec![3]);
    assert_eq!(s.job(2).expect("job").state, "completed");
}

#[test]
fn after_names_earlier_jobs_and_at_most_sixty_four() {
    let d = common::scratch("after", "refused");
    let mut s = open(&d);
    let first = submit(&mut s, 1, &[]).expect("submit");
    let e = submit(&mut s, 1, &[first, 99]).expect_err("no job 99");
    assert!(e.contains("--after: no job 99"), "{e}");
    let many: Vec<u64> = (0..65)
        .map(|_| submit(&mut s, 1, &[]).expect("submit"))
        .collect();
    let e = submit(&mut s, 1, &many).expect_err("65 jobs");
    assert!(
        e.contains("--after, --after-any and --after-notok name 65 jobs; at most 64"),
        "{e}"
    );
    submit(&mut s, 1, &many[..64]).expect("64 jobs");
    // Repeats count once; nothing refused was stored.
    let ok = submit(&mut s, 1, &[first, first, first]).expect("repeats");
    assert_eq!(s.job(ok).expect("job").after, vec![first]);
    assert_eq!(ok, many[64] + 2, "refused submissions took no id");
}

#[test]
fn a_held_job_dispatches_nothing_new_until_released_and_a_restart_keeps_it_held() {
    let d = common::scratch("after", "hold");
    let (job, running) = {
        let mut s = open(&d);
        let mut n = Agent::new(&mut s, 2);
        let job = submit(&mut s, 6, &[]).expect("submit");
        let sent = n.beat(&mut s, &[]);
        assert_eq!(sent.len(), 2);
        // Held with two tasks running and four pending.
        assert_eq!(s.hold(job, true).expect("hold").tasks, 4);
        assert_eq!(s.hold(job, true).expect("again").tasks, 0, "already held");
        let info = s.job(job).expect("job");
        // Held, not waiting: it runs after no job (`jobs --state waiting` lists jobs waiting
        // for those they run `--after`).
        assert!(info.held && !info.waiting, "{info:?}");
        // The running tasks go on: one succeeds, the other fails and would retry — it waits.
        let more = n.beat(&mut s, &[(sent[0].0, sent[0].1, true)]);
        assert!(more.is_empty(), "a freed core takes nothing of a held job");
        (job, n.running.clone())
    }; // the server dies with the job held
    let mut s = open(&d);
    assert!(s.job(job).expect("job").held, "the hold is stored");
    let mut n = Agent::new(&mut s, 2);
    n.running = running;
    assert!(n.beat(&mut s, &[]).is_empty());
    assert_eq!(s.job(job).expect("job").counts.expect("counts").pending, 4);
    // Released: the four pending tasks go out as cores allow.
    assert_eq!(s.hold(job, false).expect("release").tasks, 4);
    let info = s.job(job).expect("job");
    assert!(!info.held && !info.waiting);
    let sent = n.beat(&mut s, &[]);
    assert_eq!(jobs_of(&s, &sent), vec![job], "one core is free");
    // Ended jobs and other kinds cannot be held; an unknown job is named.
    let done = submit(&mut s, 1, &[]).expect("submit");
    s.on_cancel(done).expect("cancel");
    let e = s.hold(done, true).expect_err("ended").to_string();
    assert!(e.contains("has ended (cancelled): nothing to hold"), "{e}");
    assert!(s.hold(999, true).is_err());
    // Held while its last task runs, then it ends: listed by its state, not as held, and a
    // release is refused as a hold is (it used to "release 0 pending tasks" while `hold` was
    // refused).
    let last = submit(&mut s, 1, &[]).expect("submit");
    let mut n2 = Agent::new(&mut s, 8);
    let sent = n2.beat(&mut s, &[]);
    let jobs = jobs_of(&s, &sent);
    let mine = sent[jobs.iter().position(|&j| j == last).expect("its task runs")];
    s.hold(last, true).expect("held while it runs");
    assert!(s.job(last).expect("job").held);
    n2.beat(&mut s, &[(mine.0, mine.1, true)]);
    let info = s.job(last).expect("job");
    assert_eq!(info.state, "completed");
    assert!(!info.held && !info.waiting, "{info:?}");
    let e = s.hold(last, false).expect_err("ended").to_string();
    assert!(
        e.contains("has ended (completed): nothing to release"),
        "{e}"
    );
}

#[test]
fn a_task_that_fails_and_retries_while_its_job_is_held_waits_for_the_release() {
    let d = common::scratch("after", "hold-retry");
    let mut s = open(&d);
    let mut n = Agent::new(&mut s, 1);
    let job = s
        .on_submit(Submission {
            origin: "job.toml".into(),
            text: "[[application]]\nname = \"a\"\ntasks = 1\nretries = 1\n[application.cpu]\ncommand = \"true\"\n".into(),
            workdir: "/".into(),
            ..Default::default()
        })
        .expect("submit")
        .job_id;
    let sent = n.beat(&mut s, &[]);
    s.hold(job, true).expect("hold");
    // Its only task fails while held: the retry waits.
    assert!(n.beat(&mut s, &[(sent[0].0, sent[0].1, false)]).is_empty());
    assert_eq!(s.job(job).expect("job").counts.expect("counts").pending, 1);
    assert_eq!(s.hold(job, false).expect("release").tasks, 1);
    let again = n.beat(&mut s, &[]);
    assert_eq!(
        again,
        vec![(sent[0].0, 2)],
        "the second attempt, after the release"
    );
}

/// Now, in ms since the Unix epoch.
fn now_ms() -> u64 {
    hetsched_server::state::now_ns() / 1_000_000
}

/// A job of `tasks` tasks whose tasks may start at `begin_ms` (`submit --begin`).
fn submit_begin(s: &mut State, tasks: u32, after: &[u64], begin_ms: u64) -> Result<u64, String> {
    s.on_submit(Submission {
        origin: "job.toml".into(),
        text: job_text(tasks, "true"),
        workdir: "/".into(),
        after: after.to_vec(),
        begin_ms: Some(begin_ms),
        ..Default::default()
    })
    .map(|d| d.job_id)
    .map_err(|e| e.to_string())
}

/// `hetsched update JOB --begin`.
fn update_begin(s: &mut State, job: u64, begin_ms: u64) -> Result<(), String> {
    s.update(&pb::UpdateRequest {
        job_id: job,
        begin_ms: Some(begin_ms),
        ..Default::default()
    })
    .map(|_| ())
    .map_err(|e| e.to_string())
}

#[test]
fn a_deferred_job_dispatches_nothing_before_its_begin_time_and_runs_once_it_came_across_a_restart()
{
    let d = common::scratch("after", "begin");
    let begin = now_ms() + 3_000;
    let job = {
        let mut s = open(&d);
        let mut n = Agent::new(&mut s, 4);
        let job = submit_begin(&mut s, 2, &[], begin).expect("submit");
        let info = s.job(job).expect("job");
        assert_eq!(
            (info.state.as_str(), info.deferred, info.waiting, info.held),
            ("pending", true, false, false)
        );
        assert_eq!(info.begin_ms, begin);
        assert!(
            info.pending_reason.starts_with("begins at ") && info.pending_reason.contains("(in "),
            "{}",
            info.pending_reason
        );
        assert!(
            n.beat(&mut s, &[]).is_empty(),
            "four free cores take nothing"
        );
        // Housekeeping before the time changes nothing.
        s.apply_retention().expect("housekeeping");
        assert!(n.beat(&mut s, &[]).is_empty());
        job
    }; // the server dies before the begin time
    let mut s = open(&d);
    let mut n = Agent::new(&mut s, 4);
    let info = s.job(job).expect("job");
    assert!(info.deferred, "the begin time is stored");
    assert_eq!(info.begin_ms, begin);
    assert!(n.beat(&mut s, &[]).is_empty());
    std::thread::sleep(std::time::Duration::from_millis(
        begin.saturating_sub(now_ms()) + 20,
    ));
    // The reaper's housekeeping after the begin time queues the tasks.
    s.apply_retention().expect("housekeeping");
    let sent = n.beat(&mut s, &[]);
    assert_eq!(jobs_of(&s, &sent), vec![job, job]);
    let info = s.job(job).expect("job");
    assert_eq!(
        (info.deferred, info.begin_ms),
        (false, begin),
        "the time is kept"
    );
}

#[test]
fn update_begin_defers_the_pending_tasks_and_now_releases_them_but_not_a_hold() {
    let d = common::scratch("after", "update-begin");
    let mut s = open(&d);
    let mut n = Agent::new(&mut s, 1);
    let job = submit(&mut s, 4, &[]).expect("submit");
    let sent = n.beat(&mut s, &[]);
    assert_eq!(sent.len(), 1);
    // An hour on: the three pending tasks wait; the running one goes on and ends.
    update_begin(&mut s, job, now_ms() + 3_600_000).expect("later");
    let info = s.job(job).expect("job");
    assert_eq!((info.state.as_str(), info.deferred), ("running", true));
    assert!(
        info.pending_reason.contains("(in 1h") || info.pending_reason.contains("(in 59m"),
        "{}",
        info.pending_reason
    );
    assert!(n.beat(&mut s, &[(sent[0].0, sent[0].1, true)]).is_empty());
    // Held as well: `--begin now` leaves it held.
    s.hold(job, true).expect("hold");
    update_begin(&mut s, job, now_ms()).expect("now");
    assert!(n.beat(&mut s, &[]).is_empty(), "still held");
    assert!(!s.job(job).expect("job").deferred);
    s.hold(job, false).expect("release");
    let sent = n.beat(&mut s, &[]);
    assert_eq!(jobs_of(&s, &sent), vec![job]);
    // More than a year ahead is refused; so is a job that has ended.
    let e = update_begin(&mut s, job, now_ms() + 400 * 86_400_000).expect_err("too far");
    assert!(
        e.contains("--begin") && e.contains("more than a year ahead"),
        "{e}"
    );
    let e = submit_begin(&mut s, 1, &[], now_ms() + 400 * 86_400_000).expect_err("too far");
    assert!(e.contains("more than a year ahead"), "{e}");
    // A client may send any u64: past year 9999 it is refused as well, and the state (whose
    // lock a panic would poison) goes on serving.
    for far in [1u64 << 62, u64::MAX] {
        let e = submit_begin(&mut s, 1, &[], far).expect_err("too far");
        assert!(
            e.contains("past year 9999") && e.contains("more than a year ahead"),
            "{e}"
        );
        let e = update_begin(&mut s, job, far).expect_err("too far");
        assert!(e.contains("more than a year ahead"), "{e}");
    }
    assert!(s.job(job).is_ok(), "the state still answers");
    let done = submit(&mut s, 1, &[]).expect("submit");
    s.on_cancel(done).expect("cancel");
    let e = update_begin(&mut s, done, now_ms()).expect_err("ended");
    assert!(e.contains("has ended (cancelled)"), "{e}");
}

#[test]
fn a_deferred_job_after_a_job_that_fails_is_cancelled_at_once_not_at_its_begin_time() {
    let d = common::scratch("after", "begin-after");
    let mut s = open(&d);
    let mut n = Agent::new(&mut s, 2);
    let first = submit(&mut s, 1, &[]).expect("submit");
    let second = submit_begin(&mut s, 1, &[first], now_ms() + 3_600_000).expect("deferred");
    let info = s.job(second).expect("job");
    // It waits for the first job before its time: that is the reason given.
    assert!(info.waiting && info.deferred);
    assert_eq!(info.pending_reason, format!("waiting for job {first}"));
    let sent = n.beat(&mut s, &[]);
    assert_eq!(jobs_of(&s, &sent), vec![first]);
    n.beat(&mut s, &[(sent[0].0, sent[0].1, false)]);
    let info = s.job(second).expect("job");
    assert_eq!((info.state.as_str(), info.deferred), ("cancelled", false));
}

/// A job of `tasks` tasks run after `after_notok` failed or were cancelled (`--after-notok`).
fn submit_after_notok(s: &mut State, tasks: u32, after_notok: &[u64]) -> Result<u64, String> {
    s.on_submit(Submission {
        origin: "job.toml".into(),
        text: job_text(tasks, "true"),
        workdir: "/".into(),
        after_notok: after_notok.to_vec(),
        ..Default::default()
    })
    .map(|d| d.job_id)
    .map_err(|e| e.to_string())
}

/// `--after-notok` (Slurm's `afternotok`): the job waits for a failure — it runs once the job it
/// names ended failed (also across a restart, and after that job was purged), and is cancelled,
/// naming it, when that job completes instead. What could never start is refused.
#[test]
fn a_job_after_a_failure_runs_when_it_fails_and_is_cancelled_when_it_completes() {
    let d = common::scratch("after", "notok");
    let (failing, handler, spare) = {
        let mut s = open(&d);
        let mut n = Agent::new(&mut s, 4);
        let failing = submit(&mut s, 1, &[]).expect("submit");
        let succeeding = submit(&mut s, 1, &[]).expect("submit");
        let handler = submit_after_notok(&mut s, 2, &[failing]).expect("after its failure");
        let spare = submit_after_notok(&mut s, 1, &[succeeding]).expect("after its failure");
        let info = s.job(handler).expect("job");
        assert_eq!(info.after_notok, vec![failing]);
        assert!(info.waiting);
        assert_eq!(info.pending_reason, format!("waiting for job {failing}"));
        let sent = n.beat(&mut s, &[]);
        assert_eq!(jobs_of(&s, &sent), vec![failing, succeeding]);
        // One fails, the other succeeds: the handler is released, the spare cancelled.
        let released = n.beat(
            &mut s,
            &[(sent[0].0, sent[0].1, false), (sent[1].0, sent[1].1, true)],
        );
        assert_eq!(jobs_of(&s, &released), vec![handler, handler]);
        let spare_info = s.job(spare).expect("job");
        assert_eq!(spare_info.state, "cancelled");
        let message = &s.tasks(spare).expect("tasks").tasks[0].message;
        assert_eq!(
            message,
            &format!(
                "cancelled: job {succeeding}, which this job runs after the failure of, completed"
            )
        );
        // Refused at submission: a job that completed, one named both ways.
        let e = submit_after_notok(&mut s, 1, &[succeeding]).expect_err("completed");
        assert!(
            e.contains(&format!("--after-notok: job {succeeding} completed")),
            "{e}"
        );
        let e = s
            .on_submit(Submission {
                origin: "job.toml".into(),
                text: job_text(1, "true"),
                workdir: "/".into(),
                after: vec![failing],
                after_notok: vec![failing],
                ..Default::default()
            })
            .expect_err("both ways")
            .to_string();
        assert!(e.contains("named by both --after and --after-notok"), "{e}");
        (failing, handler, spare)
    };
    // A restart reads the handler as released (its job failed), and the spare cancelled.
    let mut s = open(&d);
    assert!(!s.job(handler).expect("job").waiting);
    assert_eq!(s.job(spare).expect("job").state, "cancelled");
    // The failed job purged: a restart still reads the handler as released.
    s.purge(&pb::PurgeRequest {
        job_ids: vec![failing],
        ..Default::default()
    })
    .expect("purge");
    drop(s);
    let mut s = open(&d);
    assert!(!s.job(handler).expect("job").waiting);
    let mut n = Agent::new(&mut s, 4);
    let sent = n.beat(&mut s, &[]);
    assert_eq!(
        jobs_of(&s, &sent),
        vec![handler, handler],
        "queued again at the restart"
    );
    let e = submit_after_notok(&mut s, 1, &[failing]).expect_err("purged");
    assert!(
        e.contains("was purged, and how it ended is not kept"),
        "{e}"
    );
}

/// A batch job of `tasks` tasks run after `after` completed, `after_any` ended and
/// `after_notok` failed or was cancelled.
fn submit_after_all(
    s: &mut State,
    tasks: u32,
    after: &[u64],
    after_any: &[u64],
    after_notok: &[u64],
) -> Result<u64, String> {
    s.on_submit(Submission {
        origin: "job.toml".into(),
        text: job_text(tasks, "true"),
        workdir: "/".into(),
        after: after.to_vec(),
        after_any: after_any.to_vec(),
        after_notok: after_notok.to_vec(),
        ..Default::default()
    })
    .map(|d| d.job_id)
    .map_err(|e| e.to_string())
}

/// The job of each dispatched task, among `jobs` (their listings).
fn jobs_among(s: &State, tasks: &[(u64, u32)], jobs: &[u64]) -> Vec<u64> {
    tasks
        .iter()
        .map(|(t, _)| {
            *jobs
                .iter()
                .find(|&&j| s.tasks(j).expect("tasks").tasks.iter().any(|i| i.id == *t))
                .expect("a task of one of them")
        })
        .collect()
}

/// The message of job `job`'s first task.
fn first_message(s: &State, job: u64) -> String {
    s.tasks(job).expect("tasks").tasks[0].message.clone()
}

/// Batch jobs run after a divisible job or a workflow (a post-processing step): they wait while
/// it runs, across a restart; its end releases or cancels them in the event that recorded it
/// (`--after` and `--after-any` queued and `--after-notok` cancelled when it completes; the
/// reverse when it is cancelled, once the processes of its stopped instances ended); a
/// workflow that runs again makes the unfinished ones wait for its new end.
#[test]
fn batch_jobs_after_a_divisible_job_or_a_workflow_wait_for_its_end_across_a_restart() {
    use hetsched_server::jobs::divisible::ChunkResult;
    let d = common::scratch("after", "other-kinds");
    let (divisible, [ok, any, notok]) = {
        let mut s = open(&d);
        let mut n = Agent::new(&mut s, 8);
        let divisible = submit_divisible(&mut s, Submission::default()).expect("divisible job");
        let ok = submit_after_all(&mut s, 2, &[divisible], &[], &[]).expect("after");
        let any = submit_after_all(&mut s, 1, &[], &[divisible], &[]).expect("after-any");
        let notok = submit_after_all(&mut s, 1, &[], &[], &[divisible]).expect("after-notok");
        for j in [ok, any, notok] {
            let info = s.job(j).expect("job");
            assert!(info.waiting, "job {j} waits for the divisible job");
            assert_eq!(info.pending_reason, format!("waiting for job {divisible}"));
        }
        assert!(
            n.beat(&mut s, &[]).is_empty(),
            "nothing runs before it ends"
        );
        (divisible, [ok, any, notok])
    };
    // A restart: they still wait.
    let mut s = open(&d);
    let mut n = Agent::new(&mut s, 8);
    for j in [ok, any, notok] {
        assert!(s.job(j).expect("job").waiting, "job {j} still waits");
    }
    assert!(n.beat(&mut s, &[]).is_empty());
    // The divisible job runs to its end, chunk by chunk, as its worker — the node's agent,
    // which the job planned for before the restart — would run it.
    for _ in 0..200 {
        if s.job(divisible).expect("job").state != "running" {
            break;
        }
        for (_, chunk) in ask_chunks(&mut s, "n") {
            assert!(s.job(ok).expect("job").waiting, "waits while chunks run");
            let out = d.join(format!("chunk-{chunk}.out"));
            std::fs::write(&out, b"x\n").expect("output");
            let done = ChunkResult {
                job_id: divisible,
                chunk,
                success: true,
                message: String::new(),
                transfer_ns: 1_000,
                compute_ns: 1_000_000,
                reason: None,
            };
            s.on_chunk_done(&done, Some(&out)).expect("recorded");
        }
    }
    assert_eq!(s.job(divisible).expect("job").state, "completed");
    // Settled in the event that recorded the last chunk.
    assert!(!s.job(ok).expect("job").waiting);
    assert!(!s.job(any).expect("job").waiting);
    assert_eq!(s.job(notok).expect("job").state, "cancelled");
    assert_eq!(
        first_message(&s, notok),
        format!("cancelled: job {divisible}, which this job runs after the failure of, completed")
    );
    let sent = n.beat(&mut s, &[]);
    let mut ran = jobs_of(&s, &sent);
    ran.sort_unstable();
    assert_eq!(ran, vec![ok, ok, any]);
    let done: Vec<(u64, u32, bool)> = sent.iter().map(|&(t, a)| (t, a, true)).collect();
    assert!(n.beat(&mut s, &done).is_empty());
    // Refused: an `--after-notok` of the completed divisible job.
    let e = submit_after_all(&mut s, 1, &[], &[], &[divisible]).expect_err("completed");
    assert!(
        e.contains(&format!("--after-notok: job {divisible} completed")),
        "{e}"
    );

    // A workflow of two instances: `--after`, `--after-any` and `--after-notok` jobs after it.
    let workflow = s
        .on_submit(Submission {
            origin: "wf.toml".into(),
            text: "balancer = \"centralised\"\n[[task]]\nname = \"A\"\ninstances = 2\ncommand = \"true\"\n"
                .into(),
            workdir: "/".into(),
            ..Default::default()
        })
        .expect("workflow")
        .job_id;
    let ok = submit_after_all(&mut s, 1, &[workflow], &[], &[]).expect("after");
    let any = submit_after_all(&mut s, 1, &[], &[workflow], &[]).expect("after-any");
    let notok = submit_after_all(&mut s, 1, &[], &[], &[workflow]).expect("after-notok");
    let instances = n.beat(&mut s, &[]);
    let kinds = [workflow, ok, any, notok];
    assert_eq!(jobs_among(&s, &instances, &kinds), vec![workflow, workflow]);
    // One instance succeeds, the other is cancelled: the workflow ended cancelled.
    assert!(
        n.beat(&mut s, &[(instances[0].0, instances[0].1, true)])
            .is_empty()
    );
    let killed = s.tasks(workflow).expect("tasks").tasks[1].clone();
    s.cancel_tasks(workflow, "A", &killed.index.to_string())
        .expect("cancel one");
    // Its process still runs (its SIGTERM handler): the jobs after it wait for that too.
    let j = s.job(workflow).expect("job");
    assert_eq!((j.state.as_str(), j.stopping), ("cancelled", 1));
    for j in [ok, any, notok] {
        assert!(s.job(j).expect("job").waiting, "job {j} waits for it");
    }
    // Its agent reports the killed attempt's end, in a beat that takes no work (so that what
    // this releases is not dispatched yet).
    n.running.retain(|r| r.0 != killed.id);
    let mut req =
        common::heartbeat_request(n.node, &n.running, &[(killed.id, killed.attempt, false)]);
    req.draining = true;
    s.heartbeat(req).expect("beat");
    assert_eq!(s.job(workflow).expect("job").stopping, 0);
    assert_eq!(s.job(ok).expect("job").state, "cancelled");
    assert_eq!(
        first_message(&s, ok),
        format!("cancelled: job {workflow}, which this job runs after, ended cancelled")
    );
    assert!(!s.job(any).expect("job").waiting);
    assert!(!s.job(notok).expect("job").waiting);
    // Run again (`resubmit --cancelled`): the unfinished jobs after it wait for its new end,
    // also across a restart.
    s.on_resubmit_ended(workflow, false, true)
        .expect("resubmit");
    for j in [any, notok] {
        assert!(s.job(j).expect("job").waiting, "job {j} waits again");
    }
    drop(s);
    let mut s = open(&d);
    let mut n = Agent::new(&mut s, 8);
    for j in [any, notok] {
        assert!(
            s.job(j).expect("job").waiting,
            "job {j} waits after a restart"
        );
    }
    let again = n.beat(&mut s, &[]);
    assert_eq!(
        jobs_among(&s, &again, &kinds),
        vec![workflow],
        "only the workflow runs"
    );
    // It completes: the `--after-any` job runs in the reply that recorded it, the
    // `--after-notok` one is cancelled.
    let released = n.beat(&mut s, &[(again[0].0, again[0].1, true)]);
    assert_eq!(s.job(workflow).expect("job").state, "completed");
    assert_eq!(jobs_among(&s, &released, &kinds), vec![any]);
    assert_eq!(s.job(notok).expect("job").state, "cancelled");

    // A job that does not exist is refused, naming it.
    let e = submit_after_all(&mut s, 1, &[999], &[], &[]).expect_err("no job");
    assert!(e.contains("--after: no job 999"), "{e}");
}

/// A workflow of `instances` instances (centralised), submitted with `sub`'s waiting fields.
fn submit_workflow(s: &mut State, instances: u32, sub: Submission) -> Result<u64, String> {
    s.on_submit(Submission {
        origin: "wf.toml".into(),
        text: format!(
            "balancer = \"centralised\"\n[[task]]\nname = \"A\"\ninstances = {instances}\ncommand = \"true\"\n"
        ),
        workdir: "/".into(),
        ..sub
    })
    .map(|d| d.job_id)
    .map_err(|e| e.to_string())
}

/// Workflows wait as batch jobs do (`--after`, `--after-notok`, `--hold`, `--begin`): a waiting
/// workflow's graph does not start — nothing of it is dispatched — across a restart; the
/// heartbeat that records the end of the job it runs after starts it and carries its first
/// instances, or cancels it, each instance saying why (after a restart too); a held one starts
/// at its release, a deferred one when the reaper's pass finds its begin time come; a batch job
/// after a waiting workflow waits for the workflow's end. A workflow that has started cannot be
/// held.
#[test]
fn a_workflow_waits_for_the_jobs_it_runs_after_its_release_and_its_begin_time() {
    let d = common::scratch("after", "workflows-wait");
    let (batch, after, notok, held, post) = {
        let mut s = open(&d);
        let batch = submit(&mut s, 1, &[]).expect("batch job");
        let after = submit_workflow(
            &mut s,
            2,
            Submission {
                after: vec![batch],
                ..Default::default()
            },
        )
        .expect("a workflow after it");
        let notok = submit_workflow(
            &mut s,
            1,
            Submission {
                after_notok: vec![batch],
                ..Default::default()
            },
        )
        .expect("a workflow after its failure");
        let held = submit_workflow(
            &mut s,
            1,
            Submission {
                hold: true,
                ..Default::default()
            },
        )
        .expect("a held workflow");
        let post = submit(&mut s, 1, &[after]).expect("a batch job after the workflow");
        let info = s.job(after).expect("job");
        assert!(info.waiting, "{info:?}");
        assert_eq!(info.state, "pending");
        assert_eq!(info.after, vec![batch]);
        assert_eq!(info.pending_reason, format!("waiting for job {batch}"));
        let info = s.job(held).expect("job");
        assert!(info.held && info.waiting, "{info:?}");
        assert_eq!(
            info.pending_reason,
            format!("held: `hetsched release {held}` lets it run")
        );
        assert_eq!(
            s.job(post).expect("job").pending_reason,
            format!("waiting for job {after}")
        );
        (batch, after, notok, held, post)
    };
    // After a restart they still wait; only the batch job runs.
    let mut s = open(&d);
    let mut n = Agent::new(&mut s, 8);
    assert!(s.job(after).expect("job").waiting);
    let all = [batch, after, notok, held, post];
    let first = n.beat(&mut s, &[]);
    assert_eq!(jobs_among(&s, &first, &all), vec![batch]);
    // It completes: the same reply carries the workflow's two instances; the one after its
    // failure is cancelled, saying why.
    let started = n.beat(&mut s, &[(first[0].0, first[0].1, true)]);
    assert_eq!(jobs_among(&s, &started, &all), vec![after, after]);
    assert!(!s.job(after).expect("job").waiting);
    assert_eq!(s.job(notok).expect("job").state, "cancelled");
    let why =
        format!("cancelled: job {batch}, which this job runs after the failure of, completed");
    assert_eq!(first_message(&s, notok), why);
    let e = s.hold(after, true).expect_err("started").to_string();
    assert!(
        e.contains("hold and release apply to a workflow before it starts"),
        "{e}"
    );
    // The workflow completes: the batch job after it runs.
    let done: Vec<(u64, u32, bool)> = started.iter().map(|&(t, a)| (t, a, true)).collect();
    let next = n.beat(&mut s, &done);
    assert_eq!(s.job(after).expect("job").state, "completed");
    assert_eq!(jobs_among(&s, &next, &all), vec![post]);
    // Released, the held one starts.
    s.hold(held, false).expect("release");
    let released = n.beat(&mut s, &[]);
    assert_eq!(jobs_among(&s, &released, &all), vec![held]);
    // A deferred one starts when the reaper's pass finds its begin time come.
    let begin = now_ms() + 1_500;
    let deferred = submit_workflow(
        &mut s,
        1,
        Submission {
            begin_ms: Some(begin),
            ..Default::default()
        },
    )
    .expect("a deferred workflow");
    let info = s.job(deferred).expect("job");
    assert!(info.deferred && !info.waiting, "{info:?}");
    assert!(info.pending_reason.starts_with("begins at "), "{info:?}");
    assert!(
        n.beat(&mut s, &[]).is_empty(),
        "nothing before its begin time"
    );
    while now_ms() <= begin {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    s.apply_retention().expect("the reaper's pass");
    assert!(!s.job(deferred).expect("job").deferred);
    let later = n.beat(&mut s, &[]);
    assert_eq!(jobs_among(&s, &later, &[deferred]), vec![deferred]);
    // The cancelled one says why after a restart too.
    drop(s);
    let s = open(&d);
    assert_eq!(first_message(&s, notok), why);
    assert_eq!(s.job(notok).expect("job").state, "cancelled");
}

/// Asks for chunks as agent `w` does; returns the (job, chunk) orders it was given.
fn ask_chunks(s: &mut State, w: &str) -> Vec<(u64, u64)> {
    s.on_next_chunk(hetsched_server::jobs::divisible::ChunkRequest {
        name: w.into(),
        memory_bytes: 1 << 30,
        incarnation: "i1".into(),
        holding: Vec::new(),
        room: true,
        attributes: Vec::new(),
        drained: false,
        time_left: None,
        capped: Vec::new(),
        disk_short: false,
    })
    .expect("next chunk")
    .orders
    .iter()
    .map(|o| (o.job_id, o.chunk))
    .collect()
}

/// A divisible job of 40 units, submitted with `sub`'s waiting fields.
fn submit_divisible(s: &mut State, sub: Submission) -> Result<u64, String> {
    s.on_submit(Submission {
        origin: "rows.toml".into(),
        text: "[[divisible]]\nname = \"rows\"\nunits = 40\ncommand = \"echo {start} {end}\"\n"
            .into(),
        workdir: "/".into(),
        ..sub
    })
    .map(|d| d.job_id)
    .map_err(|e| e.to_string())
}

/// Divisible jobs wait as batch jobs and workflows do: no chunk is handed out before the job
/// they run after completed (across a restart), and the chunk ask after its end gets one; one
/// after its failure is cancelled, saying why; a held one starts at its release; `update
/// --begin` moves a waiting one's begin time, and a started one cannot be held.
#[test]
fn a_divisible_job_hands_out_no_chunk_before_what_it_waits_for_allows() {
    let d = common::scratch("after", "divisible-waits");
    let (batch, after, notok, held) = {
        let mut s = open(&d);
        let batch = submit(&mut s, 1, &[]).expect("batch job");
        let after = submit_divisible(
            &mut s,
            Submission {
                after: vec![batch],
                ..Default::default()
            },
        )
        .expect("after it");
        let notok = submit_divisible(
            &mut s,
            Submission {
                after_notok: vec![batch],
                ..Default::default()
            },
        )
        .expect("after its failure");
        let held = submit_divisible(
            &mut s,
            Submission {
                hold: true,
                ..Default::default()
            },
        )
        .expect("held");
        let info = s.job(after).expect("job");
        assert_eq!(
            (
                info.state.as_str(),
                info.waiting,
                info.pending_reason.as_str()
            ),
            ("pending", true, format!("waiting for job {batch}").as_str())
        );
        assert!(s.job(held).expect("job").held);
        assert!(ask_chunks(&mut s, "w").is_empty(), "nothing before its end");
        (batch, after, notok, held)
    };
    let mut s = open(&d);
    assert!(ask_chunks(&mut s, "w").is_empty(), "nor after a restart");
    assert!(s.job(after).expect("job").waiting);
    let mut n = Agent::new(&mut s, 2);
    let sent = n.beat(&mut s, &[]);
    assert_eq!(jobs_of(&s, &sent), vec![batch]);
    n.beat(&mut s, &[(sent[0].0, sent[0].1, true)]);
    // Completed: the next ask gets a chunk of the job after it; the one after its failure is
    // cancelled, saying why.
    assert_eq!(ask_chunks(&mut s, "w").first().map(|o| o.0), Some(after));
    let info = s.job(notok).expect("job");
    assert_eq!(info.state, "cancelled");
    assert_eq!(
        info.divisible.expect("divisible").message,
        format!("cancelled: job {batch}, which this job runs after the failure of, completed")
    );
    let e = s.hold(after, true).expect_err("started").to_string();
    assert!(
        e.contains("hold and release apply to a divisible job before it starts"),
        "{e}"
    );
    // A begin time moved far ahead, then released: still deferred; moved to now, it starts.
    let far = now_ms() + 3_600_000;
    s.update(&pb::UpdateRequest {
        job_id: held,
        begin_ms: Some(far),
        ..Default::default()
    })
    .expect("update --begin");
    s.hold(held, false).expect("release");
    let info = s.job(held).expect("job");
    assert!(info.deferred && !info.held, "{info:?}");
    assert_eq!(info.begin_ms, far);
    s.update(&pb::UpdateRequest {
        job_id: held,
        begin_ms: Some(now_ms()),
        ..Default::default()
    })
    .expect("update --begin now");
    assert_eq!(s.job(held).expect("job").state, "running");
    drop(s);
    let s = open(&d);
    assert_eq!(
        s.job(held).expect("job").state,
        "running",
        "started, after a restart too"
    );
    assert_eq!(s.job(notok).expect("job").state, "cancelled");
}

/// Instances of a workflow that waits to start can be cancelled one by one (`cancel JOB
/// --tasks`): they stay cancelled across a restart, the workflow runs only the others once it
/// starts, and one whose every instance was cancelled has ended — it no longer waits, and the
/// end of the job it ran after does not cancel it again with another reason.
#[test]
fn instances_cancelled_before_their_workflow_starts_stay_cancelled_and_never_run() {
    let d = common::scratch("after", "workflow-cancelled-before-start");
    let (batch, some, all) = {
        let mut s = open(&d);
        let batch = submit(&mut s, 1, &[]).expect("batch job");
        let some = submit_workflow(
            &mut s,
            3,
            Submission {
                after: vec![batch],
                ..Default::default()
            },
        )
        .expect("a workflow after it");
        let all = submit_workflow(
            &mut s,
            2,
            Submission {
                after_notok: vec![batch],
                ..Default::default()
            },
        )
        .expect("a workflow after its failure");
        let index = |s: &State, job: u64, k: usize| s.tasks(job).expect("tasks").tasks[k].index;
        let first = index(&s, some, 0).to_string();
        s.cancel_tasks(some, "A", &first).expect("cancel one");
        let both = format!("{},{}", index(&s, all, 0), index(&s, all, 1));
        s.cancel_tasks(all, "A", &both).expect("cancel both");
        assert!(s.job(some).expect("job").waiting, "the rest still waits");
        let ended = s.job(all).expect("job");
        assert_eq!(ended.state, "cancelled");
        assert!(!ended.waiting, "every instance ended: {ended:?}");
        (batch, some, all)
    };
    let mut s = open(&d);
    let states = |s: &State, job: u64| -> Vec<(String, String)> {
        s.tasks(job)
            .expect("tasks")
            .tasks
            .into_iter()
            .map(|t| (t.state, t.message))
            .collect()
    };
    let cancelled = ("cancelled".to_string(), "cancelled".to_string());
    assert_eq!(states(&s, some)[0], cancelled, "after a restart");
    assert_eq!(states(&s, all), vec![cancelled.clone(), cancelled.clone()]);
    assert!(!s.job(all).expect("job").waiting);
    let mut n = Agent::new(&mut s, 8);
    let first = n.beat(&mut s, &[]);
    let jobs = [batch, some, all];
    assert_eq!(jobs_among(&s, &first, &jobs), vec![batch]);
    // The batch job completes: the workflow starts with its two instances left.
    let started = n.beat(&mut s, &[(first[0].0, first[0].1, true)]);
    assert_eq!(jobs_among(&s, &started, &jobs), vec![some, some]);
    let cancelled_id = s.tasks(some).expect("tasks").tasks[0].id;
    assert!(started.iter().all(|&(t, _)| t != cancelled_id));
    // The other one had ended already: as it was.
    assert_eq!(states(&s, all), vec![cancelled.clone(), cancelled]);
    let done: Vec<(u64, u32, bool)> = started.iter().map(|&(t, a)| (t, a, true)).collect();
    n.beat(&mut s, &done);
    assert_eq!(
        s.job(some).expect("job").state,
        "cancelled",
        "one never ran"
    );
}

/// `update --begin` of a job whose every task already runs: one that then fails and retries
/// waits for the begin time too, as it would with pending tasks beside it (found by the day
/// fuzz: it was dispatched again at once).
#[test]
fn a_retry_of_a_job_deferred_while_all_its_tasks_ran_waits_for_the_begin_time() {
    let d = common::scratch("after", "deferred-while-running");
    let mut s = open(&d);
    let job = s
        .on_submit(Submission {
            origin: "job.toml".into(),
            text: "[[application]]\nname = \"a\"\ntasks = 2\nretries = 1\n[application.cpu]\ncommand = \"true\"\n".into(),
            workdir: "/".into(),
            ..Default::default()
        })
        .expect("job")
        .job_id;
    let mut n = Agent::new(&mut s, 4);
    let running = n.beat(&mut s, &[]);
    assert_eq!(running.len(), 2);
    update_begin(&mut s, job, now_ms() + 3_600_000).expect("defer");
    assert!(s.job(job).expect("job").deferred);
    let (t, a) = running[0];
    let sent = n.beat(&mut s, &[(t, a, false)]);
    assert!(
        sent.is_empty(),
        "the retry waits for the begin time: {sent:?}"
    );
    update_begin(&mut s, job, 0).expect("now");
    let sent = n.beat(&mut s, &[]);
    assert_eq!(sent.iter().map(|x| x.0).collect::<Vec<_>>(), vec![t]);
}

/// `submit --singleton` (Slurm's `--dependency=singleton`): a job runs once every unfinished
/// job of its name — of any kind — has ended, so jobs of one name run one at a time; its name
/// is the given one, else the file's `name =`. Stored as `after_any`, it waits across a
/// restart as any job does.
#[test]
fn singleton_jobs_of_one_name_run_one_at_a_time_whatever_their_kind() {
    let d = common::scratch("after", "singleton");
    let mut s = open(&d);
    let named = |name: &str, singleton: bool| Submission {
        name: name.into(),
        singleton,
        ..Default::default()
    };
    let first = s
        .on_submit(Submission {
            origin: "job.toml".into(),
            text: job_text(1, "true"),
            workdir: "/".into(),
            ..named("nightly", false)
        })
        .expect("first")
        .job_id;
    let second = s
        .on_submit(Submission {
            origin: "job.toml".into(),
            text: job_text(1, "true"),
            workdir: "/".into(),
            ..named("nightly", true)
        })
        .expect("second")
        .job_id;
    let third = submit_workflow(&mut s, 1, named("nightly", true)).expect("a workflow");
    let other = s
        .on_submit(Submission {
            origin: "job.toml".into(),
            text: job_text(1, "true"),
            workdir: "/".into(),
            ..named("weekly", true)
        })
        .expect("another name")
        .job_id;
    assert_eq!(s.job(second).expect("job").after_any, vec![first]);
    assert_eq!(s.job(third).expect("job").after_any, vec![first, second]);
    assert!(s.job(other).expect("job").after_any.is_empty());
    // A name from the file: `name = "from-file"` matches the job given that name.
    let given = s
        .on_submit(Submission {
            origin: "job.toml".into(),
            text: job_text(1, "true"),
            workdir: "/".into(),
            ..named("from-file", false)
        })
        .expect("given")
        .job_id;
    let from_file = s
        .on_submit(Submission {
            origin: "x.toml".into(),
            text: format!("name = \"from-file\"\n{}", job_text(1, "true")),
            workdir: "/".into(),
            singleton: true,
            ..Default::default()
        })
        .expect("from the file")
        .job_id;
    assert_eq!(s.job(from_file).expect("job").after_any, vec![given]);
    drop(s);
    let mut s = open(&d);
    let mut n = Agent::new(&mut s, 8);
    let jobs = [first, second, third, other, given, from_file];
    let sent = n.beat(&mut s, &[]);
    let mut ran = jobs_among(&s, &sent, &jobs);
    ran.sort_unstable();
    assert_eq!(ran, vec![first, other, given], "one of each name");
    let done: Vec<(u64, u32, bool)> = n.running.iter().map(|&(t, a)| (t, a, true)).collect();
    let sent = n.beat(&mut s, &done);
    let mut ran = jobs_among(&s, &sent, &jobs);
    ran.sort_unstable();
    assert_eq!(ran, vec![second, from_file]);
    let done: Vec<(u64, u32, bool)> = n.running.iter().map(|&(t, a)| (t, a, true)).collect();
    let sent = n.beat(&mut s, &done);
    assert_eq!(jobs_among(&s, &sent, &jobs), vec![third]);
}

/// `submit --after-start JOB` (Slurm's `--dependency=after`): the job runs once the job it names
/// has started — a task dispatched — not once it ended; a job cancelled before it started
/// releases it too; a restart finds it as it was.
#[test]
fn a_job_after_the_start_of_another_runs_beside_it() {
    let d = common::scratch("after", "after-start");
    let (server, client) = {
        let mut s = open(&d);
        let server = s
            .on_submit(Submission {
                origin: "server.toml".into(),
                text: job_text(1, "true"),
                workdir: "/".into(),
                hold: true,
                ..Default::default()
            })
            .expect("server job")
            .job_id;
        let client = s
            .on_submit(Submission {
                origin: "client.toml".into(),
                text: job_text(2, "true"),
                workdir: "/".into(),
                after_start: vec![server],
                ..Default::default()
            })
            .expect("client job")
            .job_id;
        let info = s.job(client).expect("job");
        assert_eq!(info.after_start, vec![server]);
        assert!(info.waiting, "{info:?}");
        assert_eq!(
            info.pending_reason,
            format!("waiting for job {server} to start")
        );
        (server, client)
    };
    let mut s = open(&d);
    let mut n = Agent::new(&mut s, 8);
    let jobs = [server, client];
    assert!(n.beat(&mut s, &[]).is_empty(), "the server job is held");
    s.hold(server, false).expect("release");
    let first = n.beat(&mut s, &[]);
    assert_eq!(jobs_among(&s, &first, &jobs), vec![server]);
    // It runs: the client's tasks go at the next beat, beside it.
    let next = n.beat(&mut s, &[]);
    assert_eq!(jobs_among(&s, &next, &jobs), vec![client, client]);
    assert_eq!(s.job(server).expect("job").state, "running");
    // A job cancelled before it started releases those after its start.
    let never = submit(&mut s, 1, &[]).expect("job");
    s.hold(never, true).expect("hold");
    let after_never = s
        .on_submit(Submission {
            origin: "job.toml".into(),
            text: job_text(1, "true"),
            workdir: "/".into(),
            after_start: vec![never],
            ..Default::default()
        })
        .expect("after it")
        .job_id;
    s.cancel(never).expect("cancel");
    let sent = n.beat(&mut s, &[]);
    assert_eq!(jobs_among(&s, &sent, &[after_never]), vec![after_never]);
    // Refused: a job of another kind, and one that does not exist.
    let e = s
        .on_submit(Submission {
            origin: "job.toml".into(),
            text: job_text(1, "true"),
            workdir: "/".into(),
            after_start: vec![999],
            ..Default::default()
        })
        .expect_err("no job")
        .to_string();
    assert!(e.contains("--after-start: no batch job 999"), "{e}");
}
