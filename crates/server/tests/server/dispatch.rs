//! The one dispatch path, through the state's own types (no protobuf): every id carries its
//! job kind, results and running reports are routed to the kind that owns the task, and what
//! no kind owns is acknowledged (results) or killed (running reports) without touching anyone's
//! tasks.

use hetsched_proto as pb;
use hetsched_server::ServerConfig;
use hetsched_server::convert::{Wire, registration};
use hetsched_server::jobs::Kind;
use hetsched_server::state::State;
use hetsched_server::state::types::{
    HeartbeatReport, RunningTask, Submission, TaskRef, TaskResult,
};
use hetsched_server::store::Store;

const IDENTITY: &str = "dispatch-test-agent";

use crate::common::Scratch;

fn open(name: &str) -> (Scratch, State) {
    let d = Scratch::new("dispatch", name);
    let config = ServerConfig {
        data_dir: d.clone(),
        ..Default::default()
    };
    let s = State::open(&config, Store::open(&d.join("state.db")).expect("store")).expect("state");
    (d, s)
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
                    ..Default::default()
                },
                RunningTask {
                    task_id: foreign,
                    attempt: 1,
                    ..Default::default()
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

/// A new job wakes the idle nodes its tasks fit on, not merely those with the most free cores:
/// a one-task GPU job wakes the GPU node, and a job that `requires` an attribute wakes the node
/// that has it, although a bigger CPU node is idle. (Idle agents beat once a minute: a node that
/// is not woken takes its work only then.)
#[test]
fn new_work_wakes_the_nodes_it_fits_on() {
    let (_d, mut s) = open("wake-fits");
    let register = |s: &mut State, name: &str, cores: u32, gpus: u32, attributes: &[&str]| {
        s.register(pb::RegisterRequest {
            name: name.into(),
            cores,
            memory_bytes: 1 << 30,
            identity: IDENTITY.into(),
            accelerators: (0..gpus)
                .map(|_| pb::Accelerator {
                    kind: "k20".into(),
                    memory_bytes: 1 << 30,
                    speed: 1.0,
                })
                .collect(),
            attributes: attributes.iter().map(|a| (*a).to_string()).collect(),
            ..Default::default()
        })
        .expect("register")
        .node_id
    };
    let big = register(&mut s, "big", 16, 0, &[]);
    let gpu = register(&mut s, "gpu", 2, 1, &[]);
    let ssd = register(&mut s, "ssd", 2, 0, &["ssd"]);
    let mut waits: Vec<_> = [big, gpu, ssd]
        .iter()
        .map(|&n| s.await_work(n, IDENTITY).expect("its wake-ups"))
        .collect();
    let woken = |waits: &mut Vec<tokio::sync::watch::Receiver<u64>>| -> Vec<bool> {
        waits
            .iter_mut()
            .map(|w| {
                let changed = w.has_changed().unwrap_or(false);
                w.borrow_and_update();
                changed
            })
            .collect()
    };
    woken(&mut waits);
    let job = |gpus: bool, requires: &str| {
        format!(
            "[[application]]\nname = \"a\"\ntasks = 1\n{requires}\n[application.{}]\ncommand = \"true\"\n",
            if gpus { "gpu" } else { "cpu" }
        )
    };
    s.submit("gpu.toml", &job(true, ""), "/").expect("submit");
    assert_eq!(woken(&mut waits), [false, true, false], "the GPU job");
    s.submit("ssd.toml", &job(false, "requires = [\"ssd\"]"), "/")
        .expect("submit");
    assert_eq!(woken(&mut waits), [false, false, true], "the ssd job");
    s.submit("any.toml", &job(false, ""), "/").expect("submit");
    assert_eq!(
        woken(&mut waits),
        [true, false, false],
        "a plain job: the most free cores"
    );
}

/// Under `max_running`, a task's end lets another of its application's tasks run anywhere it
/// fits: when the node that reported the end cannot take it (here: drained meanwhile), the idle
/// node waiting in a held call is woken — not left to its once-a-minute beat.
#[test]
fn the_end_of_a_throttled_task_wakes_a_node_that_can_take_the_next() {
    let (_d, mut s) = open("wake-throttle");
    let register = |s: &mut State, name: &str| {
        s.register(pb::RegisterRequest {
            name: name.into(),
            cores: 2,
            memory_bytes: 1 << 30,
            identity: IDENTITY.into(),
            ..Default::default()
        })
        .expect("register")
        .node_id
    };
    let (a, b) = (register(&mut s, "a"), register(&mut s, "b"));
    s.submit(
        "throttled.toml",
        "[[application]]\nname = \"t\"\ntasks = 2\nmax_running = 1\n[application.cpu]\ncommand = \"true\"\n",
        "/",
    )
    .expect("submit");
    let first = s.on_heartbeat(report(a, vec![], vec![])).expect("beat");
    assert_eq!(first.assignments.len(), 1, "one at a time");
    let running = first.assignments[0].task_id;
    let second = s.on_heartbeat(report(b, vec![], vec![])).expect("beat");
    assert!(
        second.assignments.is_empty(),
        "b gets nothing while one runs"
    );
    let mut b_waits = s.await_work(b, IDENTITY).expect("b's wake-ups");
    b_waits.borrow_and_update();
    s.on_drain("a", true).expect("drain a");
    b_waits.borrow_and_update();
    let done = s
        .on_heartbeat(report(
            a,
            vec![],
            vec![TaskResult {
                task_id: running,
                attempt: 1,
                success: true,
                started_ns: 1,
                finished_ns: 2,
                ..Default::default()
            }],
        ))
        .expect("beat");
    assert!(done.assignments.is_empty(), "a is drained");
    assert!(
        b_waits.has_changed().unwrap_or(false),
        "b is woken for the task a's end let run"
    );
    let next = s.on_heartbeat(report(b, vec![], vec![])).expect("beat");
    assert_eq!(next.assignments.len(), 1);
}
