//! `hetsched signal` (Slurm's `scancel --signal`): a signal reaches the attempts running when it
//! was asked for, rides every heartbeat reply to their nodes until the agent says it handled it,
//! survives a server restart, and is dropped once its task left the node — a later attempt
//! never gets it. Bad requests are refused, naming what is wrong.

use crate::common;

use common::{Scratch, beat, heartbeat_request};
use hetsched_proto as pb;
use hetsched_server::ServerConfig;
use hetsched_server::convert::Wire;
use hetsched_server::state::State;
use hetsched_server::state::types::Submission;
use hetsched_server::store::Store;
use std::path::Path;

fn dir(name: &str) -> Scratch {
    common::scratch("signal", name)
}

fn open(d: &Path) -> State {
    let config = ServerConfig {
        data_dir: d.to_path_buf(),
        ..Default::default()
    };
    State::open(&config, Store::open(&d.join("state.db")).expect("store")).expect("state")
}

const JOB: &str = "[[application]]\nname = \"sim\"\ntasks = 3\n[application.cpu]\ncommand = \"true\"\n\n[[application]]\nname = \"post\"\ntasks = 1\n[application.cpu]\ncommand = \"true\"\n";

fn signal(s: &mut State, job: u64, sig: &str, tasks: &str, app: &str) -> Result<u64, String> {
    s.signal(&pb::SignalRequest {
        job_id: job,
        signal: sig.into(),
        indices: tasks.into(),
        app: app.into(),
    })
    .map(|r| r.tasks)
    .map_err(|e| e.to_string())
}

/// A beat of `node` reporting `running` and the seqs `handled`: the signals of its reply as
/// (task, attempt, signal, seq).
fn beat_signals(
    s: &mut State,
    node: u32,
    running: &[(u64, u32)],
    handled: &[u64],
) -> Vec<(u64, u32, String, u64)> {
    let mut req = heartbeat_request(node, running, &[]);
    req.signalled = handled.to_vec();
    s.heartbeat(req)
        .expect("heartbeat")
        .signals
        .into_iter()
        .map(|g| (g.task_id, g.attempt, g.signal, g.seq))
        .collect()
}

fn tasks_of(signals: &[(u64, u32, String, u64)]) -> Vec<u64> {
    signals.iter().map(|g| g.0).collect()
}

#[test]
fn a_signal_rides_every_beat_until_handled_survives_a_restart_and_never_reaches_a_later_attempt() {
    let d = dir("delivery");
    let (running, seqs) = {
        let mut s = open(&d);
        let n = common::register(&mut s, "n", 2);
        let job = s.submit("job.toml", JOB, "/").expect("submit").job_id;
        let sent = beat(&mut s, n, &[], &[]);
        let running: Vec<(u64, u32)> = sent
            .assignments
            .iter()
            .map(|a| (a.task_id, a.attempt))
            .collect();
        assert_eq!(running.len(), 2, "two cores, two tasks of `sim`");
        // Nothing pending yet: no signal in a reply.
        assert!(beat_signals(&mut s, n, &running, &[]).is_empty());
        assert_eq!(signal(&mut s, job, "sigusr1", "", ""), Ok(2));
        let first = beat_signals(&mut s, n, &running, &[]);
        assert_eq!(tasks_of(&first), vec![running[0].0, running[1].0]);
        assert!(
            first
                .iter()
                .all(|(_, attempt, sig, _)| *attempt == 1 && sig == "USR1")
        );
        assert_ne!(first[0].3, first[1].3, "a seq per attempt");
        // The agent said nothing (a lost reply): the same signals again.
        assert_eq!(beat_signals(&mut s, n, &running, &[]), first);
        (running, [first[0].3, first[1].3])
    };
    // A restart: still pending, with the same seqs.
    let mut s = open(&d);
    let n = common::register(&mut s, "n", 2);
    let again = beat_signals(&mut s, n, &running, &[]);
    assert_eq!(again.iter().map(|g| g.3).collect::<Vec<_>>(), seqs.to_vec());
    // The agent handled the first task's: only the second's goes on.
    let later = beat_signals(&mut s, n, &running, &[seqs[0]]);
    assert_eq!(tasks_of(&later), vec![running[1].0]);
    // The second task ends before its agent handled its signal: dropped, never sent to
    // whatever runs next.
    let ended = s
        .heartbeat(heartbeat_request(
            n,
            &running[..1],
            &[(running[1].0, running[1].1, true)],
        ))
        .expect("heartbeat");
    assert!(ended.signals.is_empty(), "its task left the node");
    let next: Vec<(u64, u32)> = ended
        .assignments
        .iter()
        .map(|a| (a.task_id, a.attempt))
        .collect();
    let mut now_running = running[..1].to_vec();
    now_running.extend(&next);
    assert!(beat_signals(&mut s, n, &now_running, &[]).is_empty());
    // A new signal reaches what runs now, and a later seq than any before.
    assert_eq!(signal(&mut s, 1, "HUP", "", ""), Ok(2));
    let hup = beat_signals(&mut s, n, &now_running, &[]);
    assert_eq!(hup.len(), 2);
    assert!(hup.iter().all(|g| g.2 == "HUP" && g.3 > seqs[1]));
}

#[test]
fn tasks_and_app_pick_which_running_tasks_get_it() {
    let d = dir("pick");
    let mut s = open(&d);
    let n = common::register(&mut s, "n", 8);
    let job = s.submit("job.toml", JOB, "/").expect("submit").job_id;
    let running: Vec<(u64, u32)> = beat(&mut s, n, &[], &[])
        .assignments
        .iter()
        .map(|a| (a.task_id, a.attempt))
        .collect();
    assert_eq!(running.len(), 4, "sim 0-2 and post 0");
    let listed = s.tasks(job).expect("tasks").tasks;
    let id_of = |app: &str, index: u32| {
        listed
            .iter()
            .find(|t| t.app == app && t.index == index)
            .map(|t| t.id)
            .expect("task")
    };
    assert_eq!(signal(&mut s, job, "USR2", "0,2", "sim"), Ok(2));
    let mut got = tasks_of(&beat_signals(&mut s, n, &running, &[]));
    got.sort_unstable();
    assert_eq!(got, vec![id_of("sim", 0), id_of("sim", 2)]);
    let handled: Vec<u64> = beat_signals(&mut s, n, &running, &[])
        .iter()
        .map(|g| g.3)
        .collect();
    assert!(beat_signals(&mut s, n, &running, &handled).is_empty());
    // Index 0 of every application: sim's and post's.
    assert_eq!(signal(&mut s, job, "STOP", "0", ""), Ok(2));
    let mut got = tasks_of(&beat_signals(&mut s, n, &running, &[]));
    got.sort_unstable();
    assert_eq!(got, vec![id_of("sim", 0), id_of("post", 0)]);
    // An application alone.
    assert_eq!(signal(&mut s, job, "CONT", "", "post"), Ok(1));
}

#[test]
fn a_signal_to_a_job_with_nothing_running_reaches_nothing_and_bad_requests_are_named() {
    let d = dir("refused");
    let mut s = open(&d);
    let job = s.submit("job.toml", JOB, "/").expect("submit").job_id;
    assert_eq!(
        signal(&mut s, job, "USR1", "", ""),
        Ok(0),
        "nothing runs: no node"
    );
    let e = signal(&mut s, job, "SEGV", "", "").expect_err("not one to send");
    assert!(
        e.contains("invalid signal `SEGV`: expected one of HUP, INT"),
        "{e}"
    );
    let e = signal(&mut s, job, "USR1", "7", "").expect_err("no such index");
    assert!(e.contains("job 1 has no task with index 7"), "{e}");
    let e = signal(&mut s, job, "USR1", "", "other").expect_err("no such app");
    assert!(e.contains("job 1 has no application `other`"), "{e}");
    let e = signal(&mut s, job, "USR1", "1-", "").expect_err("bad indices");
    assert!(e.starts_with("--tasks: "), "{e}");
    let e = signal(&mut s, 99, "USR1", "", "").expect_err("no job");
    assert!(e.contains("99"), "{e}");
}

/// With `prefetch`, tasks sent beyond a node's free cores wait in its agent's queue: they have
/// no process, so a signal neither goes to them nor counts them (a hands-on review: `SIGUSR1
/// sent to 4 running tasks` while two of the four had not started).
#[test]
fn a_task_waiting_in_its_agents_queue_is_neither_signalled_nor_counted() {
    let d = dir("queued");
    let config = ServerConfig {
        data_dir: d.to_path_buf(),
        prefetch: hetsched_server::state::prefetch::Setting::Cores(2),
        ..Default::default()
    };
    let mut s =
        State::open(&config, Store::open(&d.join("state.db")).expect("store")).expect("state");
    let n = common::register(&mut s, "n", 2);
    let four =
        "[[application]]\nname = \"sim\"\ntasks = 4\n[application.cpu]\ncommand = \"true\"\n";
    let job = s.submit("job.toml", four, "/").expect("submit").job_id;
    let sent = beat(&mut s, n, &[], &[]).assignments;
    assert_eq!(sent.len(), 4);
    assert_eq!(sent.iter().filter(|a| a.prefetched).count(), 2);
    assert_eq!(
        signal(&mut s, job, "USR1", "", ""),
        Ok(2),
        "the two started"
    );
    let queued: Vec<u64> = sent
        .iter()
        .filter(|a| a.prefetched)
        .map(|a| a.task_id)
        .collect();
    let signals = beat_signals(
        &mut s,
        n,
        &sent
            .iter()
            .map(|a| (a.task_id, a.attempt))
            .collect::<Vec<_>>(),
        &[],
    );
    assert!(
        tasks_of(&signals).iter().all(|t| !queued.contains(t)),
        "no signal for a queued task: {signals:?}"
    );
    assert_eq!(tasks_of(&signals).len(), 2, "{signals:?}");
}

#[test]
fn a_workflows_running_instances_get_the_signal() {
    let d = dir("workflow");
    let mut s = open(&d);
    let n = common::register(&mut s, "n", 4);
    let job = s
        .on_submit(Submission {
            origin: "wf.toml".into(),
            text: "balancer = \"centralised\"\n[[task]]\nname = \"A\"\ninstances = \"1..=2\"\ncommand = \"true\"\n[[task]]\nname = \"B\"\ninstances = 1\ncommand = \"true\"\ninputs = [\"m\"]\n[[task]]\nname = \"C\"\ninstances = 1\ncommand = \"true\"\noutputs = [\"m\"]\n"
                .into(),
            workdir: "/".into(),
            ..Default::default()
        })
        .expect("workflow")
        .job_id;
    let mut running: Vec<(u64, u32)> = Vec::new();
    for _ in 0..3 {
        let r = beat(&mut s, n, &running, &[]);
        running.extend(r.assignments.iter().map(|a| (a.task_id, a.attempt)));
    }
    assert_eq!(running.len(), 3, "A's two instances and C; B waits for C");
    assert_eq!(signal(&mut s, job, "USR1", "2", "A"), Ok(1));
    assert_eq!(beat_signals(&mut s, n, &running, &[]).len(), 1);
    let e = signal(&mut s, job, "USR1", "", "Z").expect_err("no such task");
    assert!(e.contains("has no task `Z`"), "{e}");
    // B does not run: a signal for it reaches nothing.
    assert_eq!(signal(&mut s, job, "USR1", "", "B"), Ok(0));
}

/// A divisible job's signal goes to its chunks out to agents: it rides the beats of each
/// chunk's node (marked with the job, `chunk_of`) until the agent handled it, survives a
/// restart, and is dropped once the chunk is done. `--tasks` and `--app` are refused.
#[test]
fn a_divisible_jobs_chunks_out_to_agents_get_the_signal_until_done() {
    use hetsched_server::jobs::divisible::ChunkResult;
    let d = dir("divisible");
    let chunk = {
        let mut s = open(&d);
        let n = common::register(&mut s, "n", 2);
        let job = s
            .on_submit(Submission {
                origin: "rows.toml".into(),
                text: "[[divisible]]\nname = \"rows\"\nunits = 100\ncommand = \"echo {start} {end}\"\n"
                    .into(),
                workdir: "/".into(),
                ..Default::default()
            })
            .expect("divisible")
            .job_id;
        assert_eq!(job, 1);
        let got = common::ask_chunk(&mut s, "n");
        assert_eq!(got.orders.len(), 1, "one chunk out to n");
        let chunk = got.orders[0].chunk;
        let r = s
            .signal(&pb::SignalRequest {
                job_id: job,
                signal: "STOP".into(),
                ..Default::default()
            })
            .expect("signalled");
        assert_eq!((r.tasks, r.chunks), (0, 1));
        let reply = s.heartbeat(heartbeat_request(n, &[], &[])).expect("beat");
        assert_eq!(reply.signals.len(), 1);
        let g = &reply.signals[0];
        assert_eq!(
            (g.task_id, g.attempt, g.chunk_of, g.signal.as_str()),
            (chunk, 0, job, "STOP")
        );
        let e = signal(&mut s, job, "CONT", "1", "").expect_err("no task indices");
        assert!(
            e.contains("divisible job: its signal goes to every chunk"),
            "{e}"
        );
        let e = signal(&mut s, job, "CONT", "", "rows").expect_err("no applications");
        assert!(e.contains("--app and --tasks pick"), "{e}");
        chunk
    };
    // A restart: still pending, still the chunk's.
    let mut s = open(&d);
    let n = common::register(&mut s, "n", 2);
    let again = s.heartbeat(heartbeat_request(n, &[], &[])).expect("beat");
    assert_eq!(
        again
            .signals
            .iter()
            .map(|g| (g.task_id, g.chunk_of))
            .collect::<Vec<_>>(),
        [(chunk, 1)]
    );
    // A second one, then the chunk is done: it is dropped unsent.
    let r = s
        .signal(&pb::SignalRequest {
            job_id: 1,
            signal: "CONT".into(),
            ..Default::default()
        })
        .expect("signalled");
    assert_eq!(r.chunks, 1);
    let tmp = d
        .join("divisible/job-1")
        .join(format!("chunk-{chunk}.part"));
    std::fs::create_dir_all(tmp.parent().expect("dir")).expect("dir");
    std::fs::write(&tmp, b"0 100\n").expect("output");
    s.on_chunk_done(
        &ChunkResult {
            job_id: 1,
            chunk,
            success: true,
            message: String::new(),
            transfer_ns: 1_000,
            compute_ns: 1_000_000,
            reason: None,
        },
        Some(&tmp),
    )
    .expect("recorded");
    let after = s.heartbeat(heartbeat_request(n, &[], &[])).expect("beat");
    assert!(after.signals.is_empty(), "{:?}", after.signals);
}
