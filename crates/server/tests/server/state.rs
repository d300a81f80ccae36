//! The server's rules without a network: heartbeats in, assignments and kills out, state across a
//! restart. Each test reads like the situation it checks.

use crate::common;

use common::{Scratch, beat};
use hetsched_proto as pb;
use hetsched_server::ServerConfig;
use hetsched_server::convert::Wire;
use hetsched_server::state::State;
use hetsched_server::store::Store;
use std::path::Path;

fn dir(name: &str) -> Scratch {
    common::scratch("state", name)
}

fn open(d: &Path) -> State {
    let config = ServerConfig {
        data_dir: d.to_path_buf(),
        max_attempts: 2,
        ..Default::default()
    };
    State::open(&config, Store::open(&d.join("state.db")).expect("store")).expect("state")
}

const JOB: &str =
    "[[application]]\nname = \"a\"\ntasks = 3\n[application.cpu]\ncommand = \"true\"\n";

fn assigned(r: &pb::HeartbeatReply) -> Vec<(u64, u32)> {
    r.assignments
        .iter()
        .map(|a| (a.task_id, a.attempt))
        .collect()
}

fn states(s: &State) -> Vec<(String, u32)> {
    s.tasks(1)
        .expect("tasks")
        .tasks
        .into_iter()
        .map(|t| (t.state, t.attempt))
        .collect()
}

#[test]
fn a_heartbeat_fills_free_cores_and_a_result_frees_them() {
    let d = dir("fill");
    let mut s = open(&d);
    let n = common::register(&mut s, "n", 2);
    s.submit("job.toml", JOB, "/").expect("submit");
    let r = beat(&mut s, n, &[], &[]);
    assert_eq!(assigned(&r), vec![(0, 1), (1, 1)]);
    assert_eq!(
        r.specs.len(),
        1,
        "one spec for the two tasks of one application"
    );
    assert_eq!(r.specs[0].argv, vec!["sh", "-c", "true"]);
    assert_eq!(r.assignments[1].spec, r.specs[0].key);
    let r = beat(&mut s, n, &[(1, 1)], &[(0, 1, true)]);
    assert_eq!(r.acked.len(), 1);
    assert_eq!(
        assigned(&r),
        vec![(2, 1)],
        "the freed core takes the last task"
    );
    let r = beat(&mut s, n, &[], &[(1, 1, true), (2, 1, false)]);
    assert!(r.assignments.is_empty());
    assert_eq!(
        states(&s),
        vec![
            ("succeeded".into(), 1),
            ("succeeded".into(), 1),
            ("failed".into(), 1)
        ]
    );
    assert_eq!(s.job(1).expect("job").state, "failed");
}

#[test]
fn a_result_sent_twice_is_recorded_once_and_a_stale_attempt_is_ignored() {
    let d = dir("dedup");
    let mut s = open(&d);
    let n = common::register(&mut s, "n", 1);
    s.submit("job.toml", JOB, "/").expect("submit");
    beat(&mut s, n, &[], &[]);
    let r = beat(&mut s, n, &[], &[(0, 1, true)]);
    assert_eq!(assigned(&r), vec![(1, 1)]);
    // The acknowledgement was lost: the agent sends the result again.
    let r = beat(&mut s, n, &[(1, 1)], &[(0, 1, true)]);
    assert_eq!(r.acked.len(), 1);
    assert!(r.assignments.is_empty(), "no slot was freed twice");
    // A result for an attempt the server never dispatched changes nothing.
    beat(&mut s, n, &[(1, 1)], &[(1, 7, false)]);
    assert_eq!(states(&s)[0], ("succeeded".into(), 1));
    assert_eq!(states(&s)[1], ("running".into(), 1));
}

#[test]
fn a_task_the_agent_does_not_know_is_requeued_and_an_unexpected_one_is_killed() {
    let d = dir("reconcile");
    let mut s = open(&d);
    let n = common::register(&mut s, "n", 1);
    s.submit("job.toml", JOB, "/").expect("submit");
    let r = beat(&mut s, n, &[], &[]);
    assert_eq!(assigned(&r), vec![(0, 1)]);
    // The reply never arrived: the agent runs nothing, and runs something the server did not send.
    let r = beat(&mut s, n, &[(2, 5)], &[]);
    assert_eq!(r.kill.len(), 1);
    assert_eq!((r.kill[0].task_id, r.kill[0].attempt), (2, 5));
    assert_eq!(
        assigned(&r),
        vec![(0, 2)],
        "lost task 0 goes first again, as attempt 2"
    );
    assert_eq!(
        reasons(&s)[0],
        ("running".into(), String::new(), String::new()),
        "running: its loss is not its reason"
    );
    // Lost again: max_attempts = 2, so it fails.
    beat(&mut s, n, &[], &[]);
    assert_eq!(states(&s)[0].0, "failed");
    assert_eq!(reasons(&s)[0].1, "lost");
}

/// An agent that gave up on a heartbeat's call (the server was stopped, the call timed out)
/// never reads its reply: a task assigned there never reached it. Its next beats name the last
/// reply they read (`reply_seq`), so the server neither judges the task missing before the
/// agent could know it nor counts an attempt once it is sure the agent never will: the task
/// waits again and is sent anew. Before, each such pause cost an attempt ("vanished from its
/// node"), and with `max_attempts = 2` two pauses failed the task.
#[test]
fn a_task_sent_in_a_reply_the_agent_never_read_waits_again_without_losing_an_attempt() {
    let d = dir("unread");
    let mut s = open(&d);
    let n = common::register(&mut s, "n", 1);
    let beat_after = |s: &mut State, read: u64| {
        let mut req = common::heartbeat_request(n, &[], &[]);
        req.reply_seq = read;
        s.heartbeat(req).expect("heartbeat")
    };
    let r = beat_after(&mut s, 0);
    assert_ne!(r.seq, 0, "the reply is numbered");
    let mut read = r.seq;
    s.submit("job.toml", JOB, "/").expect("submit");
    for attempt in 1..=3 {
        // The agent's call times out (the server was stopped) and the server answers it
        // anyway, into the void.
        let lost = beat_after(&mut s, read);
        assert_eq!(assigned(&lost), vec![(0, attempt)]);
        assert!(lost.seq > read);
        // The agent's next beat, on a new connection, names the reply it read before: the
        // task of the unread reply is not judged on it.
        let r = beat_after(&mut s, read);
        assert!(r.assignments.is_empty(), "task 0 is still out to the node");
        assert_eq!(states(&s)[0], ("running".into(), attempt));
        // The next beat names a later reply: the lost one was never read. Task 0 waits
        // again, counting no attempt against `max_attempts = 2`, and is sent anew.
        read = r.seq;
    }
    let r = beat_after(&mut s, read);
    assert_eq!(assigned(&r), vec![(0, 4)]);
    assert_eq!(states(&s)[0], ("running".into(), 4));
    // A task the agent read and then lost counts as ever: twice, and it fails.
    let r = beat_after(&mut s, r.seq);
    assert_eq!(assigned(&r), vec![(0, 5)], "lost once");
    beat_after(&mut s, r.seq);
    assert_eq!(states(&s)[0].0, "failed", "lost twice");
}

/// The reply to an agent's first beat after it registers is judged as every later one: the
/// registration gives the agent a reply number to name until it reads a reply, so a task sent
/// in that first reply, never read, waits again without counting an attempt. Before, the agent
/// named 0 until it read a reply, which reads as an agent that predates the numbers: the task
/// was lost ("vanished from its node"), an attempt counted, and with `max_attempts = 2` the
/// next loss failed it.
#[test]
fn a_task_sent_in_the_reply_to_the_first_beat_after_registering_and_never_read_costs_no_attempt() {
    let d = dir("unread-first");
    let mut s = open(&d);
    let registered = s.register(common::registration("n", 1)).expect("register");
    let n = registered.node_id;
    assert_ne!(registered.reply_seq, 0, "the registration names a reply");
    let beat_after = |s: &mut State, read: u64| {
        let mut req = common::heartbeat_request(n, &[], &[]);
        req.reply_seq = read;
        s.heartbeat(req).expect("heartbeat")
    };
    s.submit("job.toml", JOB, "/").expect("submit");
    // The first beat's reply, which the agent gives up on; it names the registration's number
    // again in its next beat, and in the one after that a reply it read.
    let lost = beat_after(&mut s, registered.reply_seq);
    assert_eq!(assigned(&lost), vec![(0, 1)]);
    assert!(lost.seq > registered.reply_seq);
    let r = beat_after(&mut s, registered.reply_seq);
    assert!(r.assignments.is_empty(), "task 0 is still out to the node");
    let r = beat_after(&mut s, r.seq);
    assert_eq!(assigned(&r), vec![(0, 2)], "never delivered: sent again");
    // Read, then lost: the first loss counted, so the task runs again rather than failing.
    let r = beat_after(&mut s, r.seq);
    assert_eq!(assigned(&r), vec![(0, 3)], "lost once");
    assert_eq!(states(&s)[0], ("running".into(), 3));
}

/// Each task's state, `reason` and `signal` in job 1.
fn reasons(s: &State) -> Vec<(String, String, String)> {
    s.tasks(1)
        .expect("tasks")
        .tasks
        .into_iter()
        .map(|t| (t.state, t.reason, t.signal))
        .collect()
}

/// A failed result of `task`'s `attempt` that says how it ended, as an agent sends it.
fn ended(task_id: u64, attempt: u32, end: pb::TaskEnd, signal: &str) -> pb::TaskResult {
    pb::TaskResult {
        task_id,
        attempt,
        exit_code: -1,
        message: "it ended".into(),
        started_ns: 1,
        finished_ns: 2,
        end: end.into(),
        signal: signal.into(),
        ..Default::default()
    }
}

/// A task's `reason` says why its latest attempt ended without success: kept while its retry
/// waits, cleared while the retry runs, and the failure for good's, with its signal — all read
/// back after a restart. A script tells a time limit from a crash without parsing `message`.
#[test]
fn a_tasks_reason_says_why_its_latest_attempt_ended_and_a_restart_keeps_it() {
    let d = dir("reason");
    let pending_after_time_limit = (
        "pending".to_string(),
        "time_limit".to_string(),
        String::new(),
    );
    {
        let mut s = open(&d);
        let n = common::register(&mut s, "n", 2);
        s.submit("job.toml", FLAKY, "/").expect("submit");
        assert_eq!(assigned(&beat(&mut s, n, &[], &[])), vec![(0, 1), (1, 1)]);
        // Drained: task 0's retry waits.
        s.on_drain("n", true).expect("drain");
        let mut req = common::heartbeat_request(n, &[(1, 1)], &[]);
        req.results
            .push(ended(0, 1, pb::TaskEnd::TimeLimit, "TERM"));
        s.heartbeat(req).expect("beat");
        let r = reasons(&s);
        assert_eq!(
            r[0], pending_after_time_limit,
            "a signal only with `signal`"
        );
        assert_eq!(r[1], ("running".into(), String::new(), String::new()));
    }
    let mut s = open(&d);
    assert_eq!(reasons(&s)[0], pending_after_time_limit, "after a restart");
    s.on_drain("n", false).expect("resume");
    let r = beat(&mut s, 0, &[], &[(1, 1, true)]);
    assert_eq!(assigned(&r), vec![(0, 2)]);
    assert_eq!(
        reasons(&s),
        vec![
            ("running".into(), String::new(), String::new()),
            ("succeeded".into(), String::new(), String::new())
        ],
        "running again, or succeeded: no reason"
    );
    // Attempt 2 crashes: its retries spent, it fails for good, by SIGSEGV.
    let mut req = common::heartbeat_request(0, &[], &[]);
    req.results
        .push(ended(0, 2, pb::TaskEnd::Signalled, "SEGV"));
    s.heartbeat(req).expect("beat");
    let failed = (
        "failed".to_string(),
        "signal".to_string(),
        "SEGV".to_string(),
    );
    assert_eq!(reasons(&s)[0], failed);
    drop(s);
    let s = open(&d);
    assert_eq!(reasons(&s)[0], failed, "after a restart");
    let tasks = s.tasks(1).expect("tasks").tasks;
    let json = hetsched_server::json::task(&tasks[0]);
    assert_eq!(
        (&json["exit_code"], &json["reason"], &json["signal"]),
        (
            &serde_json::Value::Null,
            &serde_json::json!("signal"),
            &serde_json::json!("SEGV")
        )
    );
    let json = hetsched_server::json::task(&tasks[1]);
    assert_eq!(
        (&json["reason"], &json["signal"]),
        (&serde_json::Value::Null, &serde_json::Value::Null)
    );
}

/// Unix ms now.
fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// "When did we last hear from node X": a dead node says when it was last heard (Unix ms, and
/// how long ago), after a server restart too — not the restart's time, nor nothing; a live node
/// whose server stops keeps its last beat's time the same way (`store_heard`, at stop).
#[test]
fn a_dead_node_says_when_it_was_last_heard_from_across_a_restart() {
    let d = dir("last-heard");
    let before = unix_ms();
    let heard = {
        let mut s = open(&d);
        let a = common::register(&mut s, "a", 1);
        let b = common::register(&mut s, "b", 1);
        beat(&mut s, a, &[], &[]);
        std::thread::sleep(crate::common::SILENCE);
        beat(&mut s, b, &[], &[]);
        s.check_dead(crate::common::DEAD_TIMEOUT).expect("check");
        let nodes = s.nodes(true).nodes;
        assert!(!nodes[a as usize].alive && nodes[b as usize].alive);
        let heard = [a, b].map(|n| nodes[n as usize].last_heard_ms);
        assert!(
            heard[0] >= before && heard[0] < heard[1],
            "a was heard before b: {heard:?}"
        );
        s.store_heard().expect("at stop");
        heard
    };
    std::thread::sleep(std::time::Duration::from_millis(200));
    let s = open(&d);
    let nodes = s.nodes(true).nodes;
    for (i, n) in nodes.iter().enumerate() {
        assert!(!n.alive, "not heard since the restart");
        assert_eq!(
            n.last_heard_ms, heard[i],
            "{} kept its last heartbeat's time",
            n.name
        );
        assert!(
            n.last_seen_ms >= 200 && n.last_seen_ms >= unix_ms().saturating_sub(heard[i]) - 50,
            "{}: {} ms ago, counted from its last beat, not the restart",
            n.name,
            n.last_seen_ms
        );
    }
}

/// A server that crashes (no `store_heard` at stop) still says, after its restart, when a node
/// that never came back was last heard: the live nodes' last beats are written with the
/// accounts' periodic write (at the first beat, then every `STORED_EVERY`), not only at a
/// planned stop — before, such a node read "never heard".
#[test]
fn a_node_heard_before_a_server_crash_says_so_after_the_restart() {
    let d = dir("last-heard-crash");
    let before = unix_ms();
    {
        let mut s = open(&d);
        let a = common::register(&mut s, "a", 1);
        beat(&mut s, a, &[], &[]);
        // The state is dropped without `store_heard`: the crash.
    }
    let s = open(&d);
    let a = &s.nodes(true).nodes[0];
    assert!(!a.alive, "not heard since the restart");
    assert!(
        a.last_heard_ms >= before && a.last_heard_ms <= unix_ms(),
        "the node's last beat before the crash, not never: {}",
        a.last_heard_ms
    );
}

#[test]
fn a_silent_node_is_declared_dead_and_its_tasks_run_elsewhere() {
    let d = dir("dead");
    let mut s = open(&d);
    let a = common::register(&mut s, "a", 3);
    s.submit("job.toml", JOB, "/").expect("submit");
    assert_eq!(beat(&mut s, a, &[], &[]).assignments.len(), 3);
    let b = common::register(&mut s, "b", 3);
    std::thread::sleep(crate::common::SILENCE);
    beat(&mut s, b, &[], &[]);
    s.check_dead(crate::common::DEAD_TIMEOUT).expect("check");
    let nodes = s.nodes(true).nodes;
    assert!(!nodes[a as usize].alive && nodes[b as usize].alive);
    let r = beat(&mut s, b, &[], &[]);
    assert_eq!(assigned(&r), vec![(0, 2), (1, 2), (2, 2)]);
    // The dead node comes back still running task 0's first attempt: it is told to kill it.
    let r = beat(&mut s, a, &[(0, 1)], &[]);
    assert_eq!(r.kill.len(), 1);
}

#[test]
fn after_a_restart_finished_tasks_stay_finished_and_running_ones_stay_assigned() {
    let d = dir("restart");
    {
        let mut s = open(&d);
        let n = common::register(&mut s, "n", 2);
        s.submit("job.toml", JOB, "/").expect("submit");
        beat(&mut s, n, &[], &[]);
        beat(&mut s, n, &[(1, 1)], &[(0, 1, true)]);
    } // the server dies here; only the store remains
    let mut s = open(&d);
    assert_eq!(
        states(&s),
        vec![
            ("succeeded".into(), 1),
            ("running".into(), 1),
            ("running".into(), 1)
        ]
    );
    // The agent comes back: task 1 still runs, task 2's assignment never reached it.
    let r = beat(&mut s, 0, &[(1, 1)], &[]);
    assert!(r.kill.is_empty());
    assert_eq!(assigned(&r), vec![(2, 2)]);
    beat(&mut s, 0, &[], &[(1, 1, true), (2, 2, true)]);
    assert_eq!(s.job(1).expect("job").state, "completed");
    let tasks = s.tasks(1).expect("tasks").tasks;
    assert!(tasks.iter().all(|t| t.node == "n"));
}

#[test]
fn an_array_job_keeps_its_listed_indices_across_a_restart() {
    // `indices = "1-7:2"`: four tasks, indices 1, 3, 5, 7. Until this test, a restart after any
    // of them ran refused the store as corrupt (it rebuilt indices 0..4), and the tasks still
    // pending would have run as indices 0..4.
    let d = dir("array-restart");
    let job = "[[application]]\nname = \"a\"\nindices = \"1-7:2\"\n[application.cpu]\ncommand = \"true\"\n";
    {
        let mut s = open(&d);
        let n = common::register(&mut s, "n", 1);
        s.submit("job.toml", job, "/").expect("submit");
        let r = beat(&mut s, n, &[], &[]);
        assert_eq!(r.assignments[0].index, 1);
        beat(&mut s, n, &[], &[(0, 1, true)]);
    }
    let mut s = open(&d);
    let indices: Vec<u32> = s
        .tasks(1)
        .expect("tasks")
        .tasks
        .iter()
        .map(|t| t.index)
        .collect();
    assert_eq!(indices, [1, 3, 5, 7]);
    let mut ran = Vec::new();
    let mut running: Vec<(u64, u32)> = Vec::new();
    for _ in 0..6 {
        let done: Vec<(u64, u32, bool)> = running.iter().map(|&(t, a)| (t, a, true)).collect();
        let r = beat(&mut s, 0, &[], &done);
        ran.extend(r.assignments.iter().map(|a| a.index));
        running = assigned(&r);
    }
    assert_eq!(
        ran,
        [3, 5, 7],
        "the pending tasks run with their listed indices"
    );
    assert_eq!(s.job(1).expect("job").state, "completed");
}

#[test]
fn a_refused_submission_stores_nothing_and_cancel_kills_running_tasks() {
    let d = dir("cancel");
    let mut s = open(&d);
    let n = common::register(&mut s, "n", 1);
    let bad = "[[application]]\nname = \"g\"\ntasks = 2\n[application.gpu]\ncommand = \"x\"\n";
    let e = s.submit("gpu.toml", bad, "/").expect_err("no GPUs here");
    assert!(
        e.to_string()
            .starts_with("gpu.toml:4:1: application[0].gpu:"),
        "{e}"
    );
    assert!(s.jobs().jobs.is_empty());
    s.submit("job.toml", JOB, "/").expect("submit");
    beat(&mut s, n, &[], &[]);
    assert_eq!(s.cancel(1).expect("cancel").cancelled, 3);
    let r = beat(&mut s, n, &[(0, 1)], &[]);
    assert_eq!(r.kill.len(), 1);
    assert!(r.assignments.is_empty());
    assert_eq!(s.job(1).expect("job").state, "cancelled");
    // Running or pending, each says it was cancelled; the killed attempt's result, when it
    // comes, changes nothing but its end: its process ended after the cancel (its SIGTERM
    // handler ran), and its run time is its process's.
    let cancelled_at = s.tasks(1).expect("tasks").tasks[0].finished_ns;
    assert!(cancelled_at > 0);
    let mut req = common::heartbeat_request(n, &[], &[]);
    let mut killed = ended(0, 1, pb::TaskEnd::Killed, "");
    killed.finished_ns = cancelled_at + 3_000_000_000;
    req.results.push(killed);
    s.heartbeat(req).expect("beat");
    assert_eq!(
        s.tasks(1).expect("tasks").tasks[0].finished_ns,
        cancelled_at + 3_000_000_000
    );
    assert!(
        reasons(&s)
            .iter()
            .all(|r| (r.0.as_str(), r.1.as_str()) == ("cancelled", "cancelled")),
        "{:?}",
        reasons(&s)
    );
}

/// A cancel is recorded at once, but the job is not over for a wait (`GetJob` held with
/// `wait_ms`: `job_over`) until its agent says the stopped task's process ended — its SIGTERM
/// handler may still be cleaning up. Until then the job says how many of its tasks stop, its
/// waiters are not woken by the beats that change nothing, and a job after it whatever its end
/// (`--after-any`) waits too; the process's end wakes the waiters and releases the job after it
/// in the same reply.
#[test]
fn a_cancelled_job_is_over_for_its_waiters_once_its_stopped_tasks_processes_ended() {
    let d = dir("stopping");
    let mut s = open(&d);
    let n = common::register(&mut s, "n", 1);
    s.submit("job.toml", JOB, "/").expect("submit");
    let after = s
        .on_submit(hetsched_server::state::types::Submission {
            origin: "after.toml".into(),
            text: JOB.into(),
            workdir: "/".into(),
            after_any: vec![1],
            ..Default::default()
        })
        .expect("submit after")
        .job_id;
    assert_eq!(assigned(&beat(&mut s, n, &[], &[])), vec![(0, 1)]);
    let mut ends = s.job_ends();
    s.cancel(1).expect("cancel");
    let j = s.job(1).expect("job");
    assert_eq!((j.state.as_str(), j.stopping), ("cancelled", 1));
    assert!(s.job_ended(1).expect("job 1"), "cancelled at once");
    assert!(
        !s.job_over(1).expect("job 1"),
        "its task's process still runs"
    );
    ends.mark_unchanged();
    // Its agent still runs it (its SIGTERM handler): told to kill it, and nothing else changes.
    let r = beat(&mut s, n, &[(0, 1)], &[]);
    assert_eq!(r.kill.len(), 1);
    assert!(r.assignments.is_empty(), "the job after it waits too");
    assert_eq!(s.job(1).expect("job").stopping, 1);
    assert!(
        !ends.has_changed().expect("open"),
        "a beat that ends no process wakes no waiter"
    );
    assert_eq!(s.job(after).expect("job").state, "pending");
    // Its process ended: the job is over, its waiters are woken, and the job after it starts.
    let mut req = common::heartbeat_request(n, &[], &[]);
    req.results.push(ended(0, 1, pb::TaskEnd::Killed, ""));
    let r = s.heartbeat(req).expect("beat");
    assert_eq!(s.job(1).expect("job").stopping, 0);
    assert!(s.job_over(1).expect("job 1"));
    assert!(ends.has_changed().expect("open"), "the process's end wakes");
    assert_eq!(assigned(&r), vec![(3, 1)], "the job after it starts");
}

/// A stopped task whose node no longer lists it (the assignment never arrived, its agent
/// restarted) or whose node is declared dead is waited for no more: nothing will ever say its
/// process ended.
#[test]
fn a_stopping_task_gone_from_its_node_or_lost_with_it_is_waited_for_no_more() {
    let d = dir("stopping-gone");
    let mut s = open(&d);
    let a = common::register(&mut s, "a", 1);
    let b = common::register(&mut s, "b", 1);
    s.submit("job.toml", JOB, "/").expect("submit");
    assert_eq!(assigned(&beat(&mut s, a, &[], &[])), vec![(0, 1)]);
    assert_eq!(assigned(&beat(&mut s, b, &[], &[])), vec![(1, 1)]);
    s.cancel(1).expect("cancel");
    assert_eq!(s.job(1).expect("job").stopping, 2);
    let mut ends = s.job_ends();
    ends.mark_unchanged();
    // Node a's agent runs it no more, and no result came: gone.
    beat(&mut s, a, &[], &[]);
    assert_eq!(s.job(1).expect("job").stopping, 1);
    assert!(!ends.has_changed().expect("open"), "one still stops");
    // Node b falls silent and is declared dead with it.
    std::thread::sleep(crate::common::SILENCE);
    beat(&mut s, a, &[], &[]);
    s.check_dead(crate::common::DEAD_TIMEOUT).expect("check");
    assert!(!s.nodes(true).nodes[b as usize].alive);
    let j = s.job(1).expect("job");
    assert_eq!((j.state.as_str(), j.stopping), ("cancelled", 0));
    assert!(s.job_over(1).expect("job 1"));
    assert!(ends.has_changed().expect("open"), "the node's death wakes");
}

/// Across a restart: the stopped task that no result said ended is still stopping (its agent
/// reconnects and lists it running while its handler runs), and its node's first heartbeat
/// that lists it no more ends the wait — a restarted server never waits on a process end that
/// will not be reported. A purge waits for it too.
#[test]
fn a_stopping_task_stays_so_across_a_restart_until_its_node_says_otherwise() {
    let d = dir("stopping-restart");
    {
        let mut s = open(&d);
        let n = common::register(&mut s, "n", 1);
        s.submit("job.toml", JOB, "/").expect("submit");
        assert_eq!(assigned(&beat(&mut s, n, &[], &[])), vec![(0, 1)]);
        s.cancel(1).expect("cancel");
        assert_eq!(s.job(1).expect("job").stopping, 1);
    } // the server dies here
    let mut s = open(&d);
    assert_eq!(s.job(1).expect("job").stopping, 1);
    assert!(!s.job_over(1).expect("job 1"));
    let e = s
        .on_purge(&hetsched_server::state::types::PurgeSelection {
            job_ids: vec![1],
            ..Default::default()
        })
        .expect_err("still stopping");
    assert!(e.to_string().contains("still stopping"), "{e}");
    let r = beat(&mut s, 0, &[(0, 1)], &[]);
    assert_eq!(r.kill.len(), 1);
    assert_eq!(s.job(1).expect("job").stopping, 1);
    beat(&mut s, 0, &[], &[]);
    assert_eq!(s.job(1).expect("job").stopping, 0);
    assert!(s.job_over(1).expect("job 1"));
}

#[test]
fn a_submission_key_makes_a_job_once_even_across_a_restart() {
    let d = dir("keys");
    {
        let mut s = open(&d);
        let first = s.submit_keyed("job.toml", JOB, "/", "k-1").expect("submit");
        assert!(!first.existing);
        let again = s
            .submit_keyed("job.toml", JOB, "/", "k-1")
            .expect("resubmit");
        assert_eq!(
            (again.job_id, again.tasks, again.existing),
            (first.job_id, 3, true)
        );
        let other = s
            .submit_keyed("job.toml", JOB, "/", "k-2")
            .expect("other key");
        assert_eq!((other.job_id, other.existing), (2, false));
        // No key: every submission is a new job.
        assert_eq!(s.submit("job.toml", JOB, "/").expect("no key").job_id, 3);
        assert_eq!(s.submit("job.toml", JOB, "/").expect("no key").job_id, 4);
        let e = s
            .submit_keyed(
                "other.toml",
                "[[application]]\nname = \"b\"\ntasks = 1\n[application.cpu]\ncommand = \"true\"\n",
                "/",
                "k-1",
            )
            .expect_err("the key names another file's job");
        assert!(e.to_string().contains("already names job 1"), "{e}");
        let e = s
            .submit_keyed("job.toml", JOB, "/", &"x".repeat(129))
            .expect_err("too long");
        assert!(e.to_string().contains("at most 128"), "{e}");
    } // the server dies; the reply to a retried submission must still be the stored job
    let mut s = open(&d);
    let again = s
        .submit_keyed("job.toml", JOB, "/", "k-2")
        .expect("after restart");
    assert_eq!((again.job_id, again.existing), (2, true));
    // The file is compared with the one stored, after a restart too.
    let e = s
        .submit_keyed("job.toml", &format!("{JOB}# changed\n"), "/", "k-2")
        .expect_err("the key names another file's job");
    assert!(e.to_string().contains("already names job 2"), "{e}");
    assert_eq!(s.jobs().jobs.len(), 4);
    // And the store itself refuses a second row with the same key.
    let db = rusqlite_count(&d);
    assert_eq!(db, 2, "two keyed jobs stored");
}

fn rusqlite_count(d: &Path) -> i64 {
    let conn = rusqlite::Connection::open(d.join("state.db")).expect("db");
    assert!(
        conn.execute(
            "INSERT INTO jobs(id, origin, text, workdir, submitted_ns, first_app, first_task, submission_key)
             VALUES (99, 'x', 'x', '/', 0, 0, 0, 'k-1')",
            [],
        )
        .is_err(),
        "UNIQUE(submission_key)"
    );
    conn.query_row(
        "SELECT COUNT(*) FROM jobs WHERE submission_key IS NOT NULL",
        [],
        |r| r.get(0),
    )
    .expect("count")
}

const FLAKY: &str =
    "[[application]]\nname = \"f\"\ntasks = 2\nretries = 1\n[application.cpu]\ncommand = \"x\"\n";

#[test]
fn a_failed_attempt_runs_again_while_retries_last_and_lost_ones_count_apart() {
    let d = dir("retries");
    {
        let mut s = open(&d);
        let n = common::register(&mut s, "n", 2);
        s.submit("job.toml", FLAKY, "/").expect("submit");
        assert_eq!(assigned(&beat(&mut s, n, &[], &[])), vec![(0, 1), (1, 1)]);
        // Task 0 fails once: it runs again as attempt 2; task 1 succeeds.
        let r = beat(&mut s, n, &[], &[(0, 1, false), (1, 1, true)]);
        assert_eq!(assigned(&r), vec![(0, 2)]);
        let t = &s.tasks(1).expect("tasks").tasks[0];
        assert_eq!(t.failed_attempts, 1);
        assert!(t.message.contains("attempt 1 failed"), "{}", t.message);
        // Attempt 2 is lost (max_attempts = 2 counts lost attempts only): attempt 3 runs.
        let r = beat(&mut s, n, &[], &[]);
        assert_eq!(assigned(&r), vec![(0, 3)]);
    } // restart: the failure count survives
    let mut s = open(&d);
    // Attempt 3 fails too: retries (1) are spent, so the task fails for good.
    let r = beat(&mut s, 0, &[], &[(0, 3, false)]);
    assert!(r.assignments.is_empty());
    assert_eq!(
        states(&s),
        vec![("failed".into(), 3), ("succeeded".into(), 1)]
    );
    assert_eq!(s.tasks(1).expect("tasks").tasks[0].failed_attempts, 1);
    assert_eq!(s.job(1).expect("job").state, "failed");
}

#[test]
fn without_retries_a_failure_is_final() {
    let d = dir("no-retries");
    let mut s = open(&d);
    let n = common::register(&mut s, "n", 1);
    s.submit("job.toml", JOB, "/").expect("submit");
    beat(&mut s, n, &[], &[]);
    let r = beat(&mut s, n, &[], &[(0, 1, false)]);
    assert_eq!(assigned(&r), vec![(1, 1)], "the next task, not a retry");
    assert_eq!(states(&s)[0], ("failed".into(), 1));
}

#[test]
fn list_calls_come_in_pages_that_join_up_to_the_whole_listing() {
    let d = dir("pages");
    let mut s = open(&d);
    let big =
        "[[application]]\nname = \"p\"\ntasks = 2500\n[application.cpu]\ncommand = \"true\"\n";
    s.submit("big.toml", big, "/").expect("submit");
    s.submit("job.toml", JOB, "/").expect("submit");
    let first = s.tasks_page(1, 0, 0).expect("page");
    assert_eq!(first.tasks.len(), 1000, "the default page");
    assert_eq!((first.next_cursor, first.total), (1000, 2500));
    let mut ids: Vec<u64> = first.tasks.iter().map(|t| t.id).collect();
    let mut cursor = first.next_cursor;
    while cursor != 0 {
        let page = s.tasks_page(1, cursor, 700).expect("page");
        assert!(page.tasks.len() <= 700);
        ids.extend(page.tasks.iter().map(|t| t.id));
        cursor = page.next_cursor;
    }
    assert_eq!(ids, (0..2500).collect::<Vec<u64>>());
    // A page never exceeds the largest allowed, and job 2's pages hold only its tasks.
    assert_eq!(s.tasks_page(0, 0, 10_000).expect("page").tasks.len(), 2503);
    let two = s.tasks_page(2, 0, 0).expect("page");
    assert_eq!(
        two.tasks.iter().map(|t| t.id).collect::<Vec<_>>(),
        vec![2500, 2501, 2502]
    );
    assert_eq!(two.next_cursor, 0);
    let jobs = s.jobs_page(0, 1);
    assert_eq!(
        (jobs.jobs.len(), jobs.jobs[0].id, jobs.next_cursor),
        (1, 1, 2)
    );
    let jobs = s.jobs_page(2, 1);
    assert_eq!((jobs.jobs[0].id, jobs.next_cursor), (2, 0));
}

#[test]
fn the_reaper_sleeps_while_every_node_lives_by_its_open_call_and_is_woken_when_one_ends() {
    use hetsched_server::state::alarm::CALM_RECHECK;
    use hetsched_server::state::nodes::Presence;
    use std::time::Instant;
    let d = dir("alarm");
    let mut s = open(&d);
    let timeout = s.dead_timeout();
    let mut alarm = s.alarm();
    let start = Instant::now();
    // The reaper's first pass: no node, nothing due.
    assert!(s.plan_housekeeping() >= start + CALM_RECHECK);
    alarm.borrow_and_update();
    let a = common::register(&mut s, "a", 2);
    assert!(
        alarm.has_changed().expect("open"),
        "a node registered: the reaper is told when it may die"
    );
    let plan = s.plan_housekeeping();
    assert!(
        plan >= start + timeout && plan <= Instant::now() + timeout,
        "heard from just now: due a dead timeout from now"
    );

    // Its agent holds `AwaitWork` open: nothing can fall due until the calm recheck.
    s.presence(&Presence::Node(a), true);
    let plan = s.plan_housekeeping();
    assert!(plan >= start + CALM_RECHECK, "idle: the reaper sleeps");
    alarm.borrow_and_update();

    // The call ends (the agent stopped, or its connection closed): the reaper is woken to look
    // a dead timeout from now, not at its calm recheck.
    s.presence(&Presence::Node(a), false);
    assert!(alarm.has_changed().expect("open"), "woken");
    let at = *alarm.borrow_and_update();
    assert!(at <= Instant::now() + timeout && at < plan);
    // A call that opens and ends again later moves nothing: the reaper already looks earlier.
    s.presence(&Presence::Node(a), true);
    s.presence(&Presence::Node(a), false);
    assert!(!alarm.has_changed().expect("open"));

    // With a task running, the node lives by its beats, whatever its open call.
    s.presence(&Presence::Node(a), true);
    s.submit("job.toml", JOB, "/").expect("submit");
    let beat_at = Instant::now();
    assert_eq!(beat(&mut s, a, &[], &[]).assignments.len(), 2);
    let plan = s.plan_housekeeping();
    assert!(
        plan >= beat_at && plan <= Instant::now() + timeout,
        "running tasks: due a dead timeout after its last beat"
    );
}

/// An agent restarted with other cores: an idle node takes them (listed, placed on, kept over a
/// restart); a node whose work still runs keeps its first description, and its agent is told
/// why (found by a hands-on review: the server kept the first description silently).
#[test]
fn a_node_registered_again_with_other_cores_has_them_once_it_is_idle() {
    let d = dir("redescribe");
    let listed_cores = |s: &State| s.nodes(true).nodes[0].cores;
    {
        let mut s = open(&d);
        let n = common::register(&mut s, "n", 2);
        s.submit("job.toml", JOB, "/").expect("submit");
        let r = beat(&mut s, n, &[], &[]);
        assert_eq!(assigned(&r).len(), 2);
        // Busy: kept, and said.
        let again = s.register(common::registration("n", 1)).expect("register");
        assert!(
            again
                .note
                .contains("keeps this node's earlier description (2 cores")
                && again.note.contains("work still holds part of it"),
            "{}",
            again.note
        );
        assert_eq!(listed_cores(&s), 2);
        let done: Vec<_> = assigned(&r).iter().map(|&(t, a)| (t, a, true)).collect();
        beat(&mut s, n, &[], &done);
        let r = beat(&mut s, n, &[], &[]);
        let last: Vec<_> = assigned(&r).iter().map(|&(t, a)| (t, a, true)).collect();
        beat(&mut s, n, &[], &last);
        // Idle: taken.
        assert_eq!(common::register(&mut s, "n", 1), n);
        assert_eq!(listed_cores(&s), 1);
        assert_eq!(s.nodes(true).nodes[0].free_cores, 1);
        s.submit("job.toml", JOB, "/").expect("submit");
        let r = beat(&mut s, n, &[], &[]);
        assert_eq!(assigned(&r).len(), 1, "placed on one core now");
    }
    let s = open(&d);
    assert_eq!(listed_cores(&s), 1, "stored");
}

/// A node row past a registration bound (a store edited by hand, or written by a version with
/// looser bounds: here 16 EiB of memory on each of two nodes, whose sum overflows the
/// scheduler's totals) is read at a restart without entering the scheduler: the server starts,
/// lists the node not alive naming the field, its agent's heartbeats are told to register again
/// and get no work, and the registration, which checks the figures, brings it back with them.
#[test]
fn a_stored_node_past_a_registration_bound_takes_no_work_until_its_agent_registers_again() {
    let d = dir("out-of-bounds");
    {
        let mut s = open(&d);
        common::register(&mut s, "big", 2);
        common::register(&mut s, "huge", 2);
        common::register(&mut s, "ok", 1);
    }
    common::store_memory_past_the_bound(&d, &["big", "huge"]);
    let mut s = open(&d);
    let listed = |s: &State, name: &str| {
        s.nodes(true)
            .nodes
            .into_iter()
            .find(|n| n.name == name)
            .expect("listed")
    };
    let big = listed(&s, "big");
    assert!(!big.alive);
    assert_eq!(
        big.out_of_bounds,
        "memory_bytes is 18446744073709551615; a registration gives at most 1125899906842624 \
         (1 PiB)"
    );
    assert_eq!(
        (big.cores, big.memory_bytes),
        (2, 0),
        "memory past the bound: none"
    );
    assert_eq!(listed(&s, "ok").out_of_bounds, "");
    s.submit("job.toml", JOB, "/").expect("submit");
    for node in [0, 1] {
        let r = beat(&mut s, node, &[], &[]);
        assert!(r.reregister, "node {node} is told to register");
        assert_eq!(assigned(&r), vec![], "node {node} takes no work");
    }
    assert!(
        !listed(&s, "big").alive,
        "a heartbeat does not bring it back"
    );
    assert_eq!(assigned(&beat(&mut s, 2, &[], &[])), vec![(0, 1)]);
    // Its agent registers again, within bounds: the node is back with what it said.
    assert_eq!(common::register(&mut s, "big", 2), 0);
    let big = listed(&s, "big");
    assert_eq!(
        (big.alive, big.out_of_bounds.as_str(), big.memory_bytes),
        (true, "", 1 << 30)
    );
    assert_eq!(assigned(&beat(&mut s, 0, &[], &[])), vec![(1, 1), (2, 1)]);
}

/// A node kept out at a restart (its stored row past a registration bound) is not alive, but
/// the work recorded on it when the server stopped is still its: if its agent never registers
/// again, that work is given back as a node's that did not come back after a restart is — once
/// the restart grace (at least 5 s) is over, and once. Before, the dead-node check skipped it
/// (it starts not alive) and its task stayed running for ever.
#[test]
fn a_stored_node_kept_out_past_a_bound_gives_back_its_tasks_after_the_restart_grace() {
    let d = dir("out-of-bounds-lost");
    {
        let mut s = open(&d);
        let big = common::register(&mut s, "big", 1);
        s.submit("job.toml", JOB, "/").expect("submit");
        assert_eq!(assigned(&beat(&mut s, big, &[], &[])), vec![(0, 1)]);
    }
    common::store_memory_past_the_bound(&d, &["big"]);
    let mut s = open(&d);
    let ok = common::register(&mut s, "ok", 3);
    assert_eq!(assigned(&beat(&mut s, ok, &[], &[])), vec![(1, 1), (2, 1)]);
    s.check_dead(crate::common::DEAD_TIMEOUT).expect("check");
    assert_eq!(
        states(&s)[0],
        ("running".into(), 1),
        "within the kept-out node's restart grace"
    );
    std::thread::sleep(std::time::Duration::from_millis(5_100));
    beat(&mut s, ok, &[(1, 1), (2, 1)], &[]);
    s.check_dead(crate::common::DEAD_TIMEOUT).expect("check");
    let task = &s.tasks(1).expect("tasks").tasks[0];
    assert_eq!(task.state, "pending", "{task:?}");
    assert!(task.message.contains("big"), "{task:?}");
    assert_eq!(
        assigned(&beat(&mut s, ok, &[(1, 1), (2, 1)], &[])),
        vec![(0, 2)],
        "it runs elsewhere, as its next attempt"
    );
    // Given back once: a later check loses nothing more (max_attempts = 2 would fail it).
    s.check_dead(crate::common::DEAD_TIMEOUT).expect("check");
    beat(&mut s, ok, &[(0, 2), (1, 1), (2, 1)], &[]);
    assert_eq!(states(&s)[0], ("running".into(), 2));
    let big = s
        .nodes(true)
        .nodes
        .into_iter()
        .find(|n| n.name == "big")
        .expect("listed");
    assert!(!big.alive && !big.out_of_bounds.is_empty(), "{big:?}");
}

/// A node kept out at a restart (its stored row past a registration bound) whose agent
/// registers again while the work recorded on it still runs takes the description its agent
/// gives, not the stand-in the server put in its place (no memory, here): the held work is
/// booked on the new figures, the rest is free for new work, and the description is stored,
/// so the next restart reads it within bounds. Before, the stand-in stayed (as a changed
/// description is kept while work holds part of a node): the node was listed and scheduled
/// with no memory, and read back past the bound again at the next restart.
#[test]
fn hb_a_kept_out_node_registered_again_while_its_work_runs_takes_its_agents_description() {
    const HALF: &str = "[[application]]\nname = \"a\"\ntasks = 3\n[application.cpu]\n\
                        command = \"true\"\nmemory = \"512MiB\"\n";
    let d = dir("out-of-bounds-busy");
    {
        let mut s = open(&d);
        let big = common::register(&mut s, "big", 2);
        s.submit("job.toml", HALF, "/").expect("submit");
        assert_eq!(assigned(&beat(&mut s, big, &[], &[])), vec![(0, 1), (1, 1)]);
    }
    common::store_memory_past_the_bound(&d, &["big"]);
    let listed = |s: &State| {
        s.nodes(true)
            .nodes
            .into_iter()
            .find(|n| n.name == "big")
            .expect("listed")
    };
    {
        let mut s = open(&d);
        assert_eq!(listed(&s).memory_bytes, 0, "the stand-in has no memory");
        // Its agent registers again with its two tasks still running.
        let again = s
            .register(common::registration("big", 4))
            .expect("register");
        assert_eq!(again.note, "", "taken as given");
        let big = listed(&s);
        assert_eq!(
            (
                big.alive,
                big.out_of_bounds.as_str(),
                big.cores,
                big.memory_bytes
            ),
            (true, "", 4, 1 << 30)
        );
        assert_eq!(
            big.free_cores, 2,
            "the two running tasks hold two of its four cores"
        );
        // The running tasks hold its 1 GiB: the third task waits for one of them.
        let r = beat(&mut s, 0, &[(0, 1), (1, 1)], &[]);
        assert_eq!(assigned(&r), vec![]);
        let r = beat(&mut s, 0, &[(1, 1)], &[(0, 1, true)]);
        assert_eq!(assigned(&r), vec![(2, 1)], "the memory freed takes it");
        assert_eq!(listed(&s).free_cores, 2);
    }
    let s = open(&d);
    let big = listed(&s);
    assert_eq!(
        (big.out_of_bounds.as_str(), big.cores, big.memory_bytes),
        ("", 4, 1 << 30),
        "stored within bounds"
    );
}

#[test]
fn a_job_has_ended_exactly_when_its_entry_says_a_final_state() {
    // A call held until a job ends (`GetJob` with `wait_ms`) asks `job_ended` at each wake-up
    // instead of building the job's entry: the two must agree at every step.
    let d = dir("ended");
    let mut s = open(&d);
    let n = common::register(&mut s, "n", 2);
    s.submit("job.toml", JOB, "/").expect("submit");
    let agree = |s: &State, ended: bool| {
        assert_eq!(s.job_ended(1).expect("job 1"), ended);
        let state = s.job(1).expect("job").state;
        assert_eq!(
            hetsched_server::state::is_final_job_state(&state),
            ended,
            "{state}"
        );
    };
    agree(&s, false);
    let r = beat(&mut s, n, &[], &[]);
    assert_eq!(assigned(&r), vec![(0, 1), (1, 1)]);
    agree(&s, false);
    let r = beat(&mut s, n, &[], &[(0, 1, true), (1, 1, false)]);
    assert_eq!(assigned(&r), vec![(2, 1)]);
    agree(&s, false);
    // Task 2 still runs: the job has not ended though one of its tasks failed.
    beat(&mut s, n, &[(2, 1)], &[]);
    agree(&s, false);
    beat(&mut s, n, &[], &[(2, 1, true)]);
    agree(&s, true);
    assert_eq!(s.job(1).expect("job").state, "failed");
    // A second job, cancelled while pending, has ended too; no job 99 is an error, as for `job`.
    s.submit("job.toml", JOB, "/").expect("submit");
    assert!(!s.job_ended(2).expect("job 2"));
    s.cancel(2).expect("cancel");
    assert!(s.job_ended(2).expect("job 2"));
    assert!(s.job_ended(99).is_err());
}

#[test]
fn clients_waiting_for_a_job_end_are_woken_by_ends_only() {
    // `GetJob` with `wait_ms` is held on `job_ends`: a commit that ends a job (any way it ends)
    // must wake it, and one that ends none must not, or every heartbeat wakes every waiter.
    let d = dir("job-ends");
    let mut s = open(&d);
    let n = common::register(&mut s, "n", 2);
    let mut ends = s.job_ends();
    s.submit("job.toml", JOB, "/").expect("submit");
    // Job 2 runs after job 1 has completed.
    let after = s
        .on_submit(hetsched_server::state::types::Submission {
            origin: "after.toml".into(),
            text: JOB.into(),
            workdir: "/".into(),
            after: vec![1],
            ..Default::default()
        })
        .expect("submit after")
        .job_id;
    let r = beat(&mut s, n, &[], &[]);
    assert_eq!(assigned(&r), vec![(0, 1), (1, 1)]);
    let r = beat(&mut s, n, &[(1, 1)], &[(0, 1, true)]);
    assert_eq!(assigned(&r), vec![(2, 1)]);
    beat(&mut s, n, &[(1, 1), (2, 1)], &[]);
    assert!(
        !ends.has_changed().expect("open"),
        "submissions, dispatches and a result that ends no job wake no waiter"
    );
    // Job 1's last tasks end, one failed for good: job 1 ended failed, and job 2 after it is
    // cancelled in the same event.
    beat(&mut s, n, &[], &[(1, 1, false), (2, 1, true)]);
    assert!(ends.has_changed().expect("open"), "the jobs' end wakes");
    assert!(s.job_ended(1).expect("job 1"));
    assert!(s.job_ended(after).expect("job 2"));
    assert_eq!(s.job(after).expect("job").state, "cancelled");
    ends.mark_unchanged();
    // A pending job cancelled wakes; so does a running one.
    let pending = s.submit("job.toml", JOB, "/").expect("submit").job_id;
    assert!(!ends.has_changed().expect("open"));
    s.cancel(pending).expect("cancel");
    assert!(ends.has_changed().expect("open"), "a cancel wakes");
    ends.mark_unchanged();
    let running = s.submit("job.toml", JOB, "/").expect("submit").job_id;
    let r = beat(&mut s, n, &[], &[]);
    assert_eq!(r.assignments.len(), 2);
    assert!(!ends.has_changed().expect("open"));
    s.cancel(running).expect("cancel");
    assert!(
        ends.has_changed().expect("open"),
        "cancelling a running job wakes"
    );
}
