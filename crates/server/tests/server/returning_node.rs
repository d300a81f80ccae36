//! A node declared dead that comes back (its agent was frozen, or cut off longer than the dead
//! timeout) gets back the batch attempts nobody else has started: a finished result is taken,
//! a running attempt runs on as the same attempt; what started elsewhere, or was cancelled, is
//! killed as before, and the server's `node is back` line names it.

use crate::common;

use common::{Scratch, beat};
use hetsched_proto as pb;
use hetsched_server::ServerConfig;
use hetsched_server::convert::Wire;
use hetsched_server::state::State;
use hetsched_server::store::Store;
use std::path::Path;

fn dir(name: &str) -> Scratch {
    common::scratch("returning_node", name)
}

fn open(d: &Path) -> State {
    let config = ServerConfig {
        data_dir: d.to_path_buf(),
        max_attempts: 2,
        ..Default::default()
    };
    State::open(&config, Store::open(&d.join("state.db")).expect("store")).expect("state")
}

fn job(tasks: u32) -> String {
    format!(
        "[[application]]\nname = \"a\"\ntasks = {tasks}\n[application.cpu]\ncommand = \"true\"\n"
    )
}

fn assigned(r: &pb::HeartbeatReply) -> Vec<(u64, u32)> {
    r.assignments
        .iter()
        .map(|a| (a.task_id, a.attempt))
        .collect()
}

fn killed(r: &pb::HeartbeatReply) -> Vec<(u64, u32)> {
    r.kill.iter().map(|k| (k.task_id, k.attempt)).collect()
}

/// Job 1's tasks: (state, attempt, node, message).
fn tasks(s: &State) -> Vec<(String, u32, String, String)> {
    s.tasks(1)
        .expect("tasks")
        .tasks
        .into_iter()
        .map(|t| (t.state, t.attempt, t.node, t.message))
        .collect()
}

/// Every node but `alive` stays silent past the dead timeout: declared dead.
fn silence_all_but(s: &mut State, alive: &[u32]) {
    std::thread::sleep(common::SILENCE);
    for &n in alive {
        beat(s, n, &[], &[]);
    }
    s.check_dead(common::DEAD_TIMEOUT).expect("check");
}

/// The server's log at `info` and above while `f` runs on this thread.
fn logged<T>(f: impl FnOnce() -> T) -> (T, String) {
    #[derive(Clone, Default)]
    struct Buffer(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);
    impl std::io::Write for Buffer {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().expect("log").extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let buffer = Buffer::default();
    let writer = buffer.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_ansi(false)
        .with_max_level(tracing::Level::INFO)
        .with_writer(move || writer.clone())
        .finish();
    let out = tracing::subscriber::with_default(subscriber, f);
    let text = String::from_utf8_lossy(&buffer.0.lock().expect("log")).into_owned();
    (out, text)
}

/// A frozen agent's task finished while its node was declared dead, and no other node could
/// run the task meanwhile: the result the agent brings back is taken. The task succeeds as
/// attempt 1 (the loss spent no attempt), its message says where the result came from, it is
/// not dispatched again — a server restarted in between, or after, reads it so too. Before,
/// the result was ignored as an old attempt's, and the task ran again from scratch as attempt
/// 2.
#[test]
fn a_returning_nodes_result_for_a_task_still_waiting_is_taken_as_its_attempt() {
    let d = dir("result");
    let a = {
        let mut s = open(&d);
        let a = common::register(&mut s, "a", 1);
        s.submit("job.toml", &job(1), "/").expect("submit");
        assert_eq!(assigned(&beat(&mut s, a, &[], &[])), [(0, 1)]);
        silence_all_but(&mut s, &[]);
        assert!(!s.nodes(true).nodes[a as usize].alive);
        assert_eq!(tasks(&s)[0].0, "pending", "given up for lost");
        a
    };
    {
        let mut s = open(&d);
        let r = beat(&mut s, a, &[], &[(0, 1, true)]);
        assert_eq!(r.acked.len(), 1);
        assert!(assigned(&r).is_empty(), "not run again: {r:?}");
        assert!(r.kill.is_empty());
        let (state, attempt, node, message) = tasks(&s).remove(0);
        assert_eq!(
            (state.as_str(), attempt, node.as_str()),
            ("succeeded", 1, "a")
        );
        assert!(
            message.contains("node `a` came back with this attempt's result"),
            "{message}"
        );
        assert_eq!(s.job(1).expect("job").state, "completed");
    }
    let s = open(&d);
    let (state, attempt, _, message) = tasks(&s).remove(0);
    assert_eq!((state.as_str(), attempt), ("succeeded", 1), "stored");
    assert!(message.contains("came back"), "{message}");
}

/// A frozen agent still runs its tasks when it comes back after its node was declared dead,
/// and they wait still (no other node): each runs on as the same attempt, not killed, and
/// holds its cores again before the policy fills the node — the reply sends no third task onto
/// the two cores the taken-back attempts hold. The loss spent no attempt: lost once more, a
/// task still runs again under `max_attempts = 2`. Before, both were killed and ran again
/// from scratch as attempt 2.
#[test]
fn a_returning_nodes_running_attempt_of_a_task_still_waiting_runs_on_as_that_attempt() {
    let d = dir("running");
    {
        let mut s = open(&d);
        let a = common::register(&mut s, "a", 2);
        s.submit("job.toml", &job(3), "/").expect("submit");
        assert_eq!(assigned(&beat(&mut s, a, &[], &[])), [(0, 1), (1, 1)]);
        silence_all_but(&mut s, &[]);
        assert_eq!(tasks(&s)[0].0, "pending", "given up for lost");
        let r = beat(&mut s, a, &[(0, 1), (1, 1)], &[]);
        assert!(
            r.kill.is_empty(),
            "taken back, not killed: {:?}",
            killed(&r)
        );
        assert!(
            assigned(&r).is_empty(),
            "its two cores are held again: {r:?}"
        );
        let now = tasks(&s);
        for t in &now[..2] {
            assert_eq!((t.0.as_str(), t.1, t.2.as_str()), ("running", 1, "a"));
            assert!(t.3.contains("attempt 1 taken back"), "{}", t.3);
        }
        assert_eq!(now[2].0, "pending");
        // Task 0 ends: its core goes to task 2; a later beat still reports task 1.
        let r = beat(&mut s, a, &[(1, 1)], &[(0, 1, true)]);
        assert_eq!(assigned(&r), [(2, 1)]);
    }
    // A restarted server reads them running there.
    let mut s = open(&d);
    let a = 0;
    let now = tasks(&s);
    assert_eq!(
        (now[1].0.as_str(), now[1].1, now[2].0.as_str()),
        ("running", 1, "running")
    );
    // Task 1 vanishes (lost a second time): still below `max_attempts`, it runs again, as its
    // second attempt, on the core it left.
    let r = beat(&mut s, a, &[(2, 1)], &[]);
    assert!(r.kill.is_empty());
    assert_eq!(assigned(&r), [(1, 2)], "its second attempt");
}

/// What the server gave away stays given away: an attempt whose task started on another node
/// meanwhile, or was cancelled, is killed when its node comes back, and its result is ignored;
/// the server's `node is back` line names each with where its task stands now.
#[test]
fn a_returning_nodes_attempts_started_elsewhere_or_cancelled_are_still_killed_and_logged() {
    let d = dir("given-away");
    let mut s = open(&d);
    let a = common::register(&mut s, "a", 3);
    s.submit("job.toml", &job(3), "/").expect("submit");
    assert_eq!(
        assigned(&beat(&mut s, a, &[], &[])),
        [(0, 1), (1, 1), (2, 1)]
    );
    let b = common::register(&mut s, "b", 2);
    silence_all_but(&mut s, &[b]);
    // `b` takes tasks 0 and 1 as their second attempts; task 2 is cancelled while it waits.
    assert_eq!(assigned(&beat(&mut s, b, &[], &[])), [(0, 2), (1, 2)]);
    s.cancel_tasks(1, "a", "2").expect("cancel");
    // `a` comes back running task 0, with task 1's result, and running task 2.
    let (r, log) = logged(|| beat(&mut s, a, &[(0, 1), (2, 1)], &[(1, 1, true)]));
    assert_eq!(killed(&r), [(0, 1), (2, 1)]);
    assert_eq!(r.acked.len(), 1, "the result is acknowledged");
    let now = tasks(&s);
    assert_eq!(
        (now[0].0.as_str(), now[0].1, now[0].2.as_str()),
        ("running", 2, "b")
    );
    assert_eq!(
        (now[1].0.as_str(), now[1].1, now[1].2.as_str()),
        ("running", 2, "b"),
        "the old attempt's result is ignored"
    );
    assert_eq!(now[2].0, "cancelled");
    let back = log
        .lines()
        .find(|l| l.contains("node is back"))
        .unwrap_or_else(|| panic!("no `node is back` line:\n{log}"));
    for words in [
        "given_away=3",
        "task 0 attempt 1: runs on `b` as attempt 2",
        "task 2 attempt 1: cancelled",
        "task 1 attempt 1 (finished): runs on `b` as attempt 2",
    ] {
        assert!(back.contains(words), "{words:?} in {back}");
    }
}
