//! The one dispatch path, through the state's own types (no protobuf): every id carries its
//! job kind, results and running reports are routed to the kind that owns the task, and what
//! no kind owns is acknowledged (results) or killed (running reports) without touching anyone's
//! tasks.

use hetsched_proto as pb;
use hetsched_server::ServerConfig;
use hetsched_server::convert::registration;
use hetsched_server::jobs::Kind;
use hetsched_server::state::State;
use hetsched_server::state::types::{
    HeartbeatReport, RunningTask, Submission, TaskRef, TaskResult,
};
use hetsched_server::store::Store;

const IDENTITY: &str = "dispatch-test-agent";

use crate::common::Scratch;

fn open(name: &str) -> (Scratch, State) {
    let d = std::env::temp_dir().join(format!("hetsched-dispatch-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("dir");
    let config = ServerConfig {
        data_dir: d.clone(),
        ..Default::default()
    };
    let s = State::open(&config, Store::open(&d.join("state.db")).expect("store")).expect("state");
    (Scratch(d), s)
}

fn report(node: u32, running: Vec<RunningTask>, results: Vec<TaskResult>) -> HeartbeatReport {
    HeartbeatReport {
        node_id: node,
        identity: IDENTITY.into(),
        running,
        results,
        ..Default::default()
    }
}

#[test]
fn batch_ids_are_kind_zero_and_other_kinds_ids_are_told_apart() {
    assert_eq!(Kind::of(0), Some(Kind::Batch));
    assert_eq!(Kind::of(41), Some(Kind::Batch));
    assert_eq!(Kind::Batch.id(41), 41);
    assert_eq!(Kind::of(1 << 56 | 41), Some(Kind::Divisible));
    assert_eq!(Kind::Divisible.id(41), 1 << 56 | 41);
    assert_eq!(Kind::of(2 << 56 | 41), Some(Kind::Topology));
    assert_eq!(Kind::of(13 << 56 | 41), Some(Kind::Workflow));
    assert_eq!(Kind::of(3 << 56 | 41), None, "no kind 3");
}

#[test]
fn results_and_running_reports_reach_the_kind_that_owns_the_task() {
    let (_d, mut s) = open("route");
    let node = s
        .on_register(
            registration(&pb::RegisterRequest {
                identity: IDENTITY.into(),
                name: "n".into(),
                cores: 2,
                memory_bytes: 1 << 30,
                ..Default::default()
            })
            .expect("valid registration"),
        )
        .expect("register")
        .node_id;
    let job = s
        .on_submit(Submission {
            origin: "job.toml".into(),
            text:
                "[[application]]\nname = \"a\"\ntasks = 3\n[application.cpu]\ncommand = \"true\"\n"
                    .into(),
            workdir: "/".into(),
            ..Default::default()
        })
        .expect("submit");
    assert_eq!((job.job_id, job.tasks, job.existing), (1, 3, false));

    // Two cores: two batch tasks go out, each with its spec key and attempt 1.
    let first = s.on_heartbeat(report(node, vec![], vec![])).expect("beat");
    let sent: Vec<u64> = first.assignments.iter().map(|a| a.task_id).collect();
    assert_eq!(sent, vec![0, 1]);
    assert!(first.assignments.iter().all(|a| a.attempt == 1));
    assert_eq!(
        first.specs.len(),
        1,
        "one spec for the application's CPU variant"
    );

    // Task 0 succeeded; task 1 runs; the agent also names a task of a kind the server has no
    // module for (a forged or stale id) as running and as finished.
    let foreign = (1u64 << 56) | 7;
    let second = s
        .on_heartbeat(report(
            node,
            vec![
                RunningTask {
                    task_id: 1,
                    attempt: 1,
                    read_bytes: 0,
                },
                RunningTask {
                    task_id: foreign,
                    attempt: 1,
                    read_bytes: 0,
                },
            ],
            vec![
                TaskResult {
                    task_id: 0,
                    attempt: 1,
                    success: true,
                    started_ns: 1,
                    finished_ns: 2,
                    ..Default::default()
                },
                TaskResult {
                    task_id: foreign,
                    attempt: 1,
                    success: true,
                    ..Default::default()
                },
            ],
        ))
        .expect("beat");
    assert_eq!(
        second.acked,
        vec![
            TaskRef {
                task_id: 0,
                attempt: 1
            },
            TaskRef {
                task_id: foreign,
                attempt: 1
            }
        ],
        "every result is acknowledged, owned or not"
    );
    assert_eq!(
        second.kill,
        vec![TaskRef {
            task_id: foreign,
            attempt: 1
        }],
        "a task no kind expects on the node is killed"
    );
    // The core freed by task 0 takes task 2. The agent did not list the spec as known, so the
    // spec goes with it again.
    assert_eq!(
        second
            .assignments
            .iter()
            .map(|a| a.task_id)
            .collect::<Vec<_>>(),
        vec![2]
    );
    assert_eq!(second.specs.len(), 1);
    let tasks = s.list_tasks(1, 0, 0).expect("tasks");
    let states: Vec<&str> = tasks.tasks.iter().map(|t| t.state.as_str()).collect();
    assert_eq!(states, vec!["succeeded", "running", "running"]);
    assert_eq!(s.count_tasks().succeeded, 1);
}
