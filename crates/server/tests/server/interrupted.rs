//! A task killed by its agent's clean shutdown (SIGTERM as `systemctl restart` sends, `hetsched
//! node stop`, the agent's `--time-limit`; its result says `interrupted`) runs again and does
//! not count against `max_attempts`, as a preempted one does not; a task lost with a node that
//! died without a word still counts, and a restart of the server keeps both counts.

use crate::common;

use common::{beat, heartbeat_request, register};
use hetsched_proto as pb;
use hetsched_server::ServerConfig;
use hetsched_server::convert::Wire;
use hetsched_server::state::State;
use hetsched_server::store::Store;
use std::path::Path;

fn open(d: &Path) -> State {
    let config = ServerConfig {
        data_dir: d.to_path_buf(),
        // A second loss fails a task: an interruption counted as a loss would show.
        max_attempts: 2,
        ..Default::default()
    };
    State::open(&config, Store::open(&d.join("state.db")).expect("store")).expect("state")
}

fn sent(r: &pb::HeartbeatReply) -> Vec<(u64, u32)> {
    r.assignments
        .iter()
        .map(|a| (a.task_id, a.attempt))
        .collect()
}

/// Node `n` reports attempt `a` of task `t` interrupted with `message`: the server's reply.
fn interrupted_by(s: &mut State, n: u32, (t, a): (u64, u32), message: &str) -> pb::HeartbeatReply {
    let mut req = heartbeat_request(n, &[], &[]);
    req.results.push(pb::TaskResult {
        task_id: t,
        attempt: a,
        exit_code: -1,
        interrupted: true,
        message: message.into(),
        started_ns: 1,
        finished_ns: 2,
        ..Default::default()
    });
    s.heartbeat(req).expect("heartbeat")
}

/// Node `n` reports attempt `a` of task `t` killed by its agent's shutdown, in the agent's
/// words (`killed: its agent shut down`, and how, after the kill grace).
fn interrupted(s: &mut State, n: u32, task: (u64, u32)) -> pb::HeartbeatReply {
    let words = format!(
        "{}; SIGKILLed after ignoring SIGTERM for 10.000s",
        pb::SHUTDOWN_KILLED
    );
    interrupted_by(s, n, task, &words)
}

fn submit(s: &mut State) -> u64 {
    s.submit(
        "job.toml",
        "[[application]]\nname = \"a\"\ntasks = 1\n[application.cpu]\ncommand = \"sleep 1000\"\n",
        "/",
    )
    .expect("submit")
    .job_id
}

fn task(s: &State, job: u64) -> pb::TaskInfo {
    s.tasks(job).expect("tasks").tasks.remove(0)
}

#[test]
fn restarting_an_agent_cleanly_never_fails_its_task_but_losing_its_node_still_counts() {
    let d = common::scratch("interrupted", "restarts");
    let (n, job, mut running);
    {
        let mut s = open(&d);
        n = register(&mut s, "n", 1);
        job = submit(&mut s);
        running = sent(&beat(&mut s, n, &[], &[]));
        assert_eq!(running.len(), 1);
        // Three clean restarts of its agent, more than `max_attempts`: it runs again each time.
        for attempt in 2..=4 {
            let r = interrupted(&mut s, n, running[0]);
            running = sent(&r);
            assert_eq!(running, vec![(running[0].0, attempt)], "runs again");
            let t = task(&s, job);
            assert_eq!((t.state.as_str(), t.failed_attempts), ("running", 0));
        }
    }
    // A restart of the server keeps the count: one loss with the node is still not the limit.
    let mut s = open(&d);
    let r = beat(&mut s, n, &[], &[]);
    assert_eq!(
        sent(&r),
        vec![(running[0].0, 5)],
        "lost once (not reported running), and placed again"
    );
    let t = task(&s, job);
    assert_eq!(t.state, "running");
    assert!(
        t.message.is_empty() || !t.message.contains("gave up"),
        "{}",
        t.message
    );
    // A second loss with the node reaches `max_attempts = 2`: it fails, as before.
    let r = beat(&mut s, n, &[], &[]);
    assert!(sent(&r).is_empty(), "{:?}", sent(&r));
    let t = task(&s, job);
    assert_eq!(t.state, "failed");
    assert_eq!(t.reason, "lost");
    assert!(
        t.message.contains("gave up after 5 attempts"),
        "{}",
        t.message
    );
}

/// Other interruptions (an offload its ANode refused or broke, an agent that says nothing) are
/// not its agent's shutdown: they count against `max_attempts` as a lost attempt, as before.
#[test]
fn other_interruptions_still_count_against_max_attempts() {
    let d = common::scratch("interrupted", "others");
    let mut s = open(&d);
    let n = register(&mut s, "n", 1);
    let job = submit(&mut s);
    let first = sent(&beat(&mut s, n, &[], &[]));
    let again = sent(&interrupted_by(
        &mut s,
        n,
        first[0],
        "the ANode refused the offload: no room",
    ));
    assert_eq!(again, vec![(first[0].0, 2)], "runs again");
    let r = interrupted_by(&mut s, n, again[0], "");
    assert!(sent(&r).is_empty(), "{:?}", sent(&r));
    let t = task(&s, job);
    assert_eq!(t.state, "failed");
    assert!(
        t.message.contains("gave up after 2 attempts"),
        "{}",
        t.message
    );
}
