//! Job ids are one small sequence across job kinds: the second job is job 2 whatever its kind,
//! `job N` and `cancel N` reach the kind that owns N (also after a restart), and a store whose
//! workflows were numbered apart from batch jobs is refused with a message saying what to do.

use crate::common::{self, Scratch};
use hetsched_server::ServerConfig;
use hetsched_server::state::State;
use hetsched_server::state::types::Submission;
use hetsched_server::store::Store;
use std::path::Path;

fn scratch(name: &str) -> Scratch {
    common::scratch("jobids", name)
}

fn open(d: &Path) -> Result<State, String> {
    let config = ServerConfig {
        data_dir: d.to_path_buf(),
        ..Default::default()
    };
    State::open(&config, Store::open(&d.join("state.db")).expect("store"))
        .map_err(|e| e.to_string())
}

const BATCH: &str =
    "[[application]]\nname = \"hello\"\ntasks = 3\n[application.cpu]\ncommand = \"true\"\n";
const DIVISIBLE: &str =
    "[[divisible]]\nname = \"rows\"\nunits = 100\ncommand = \"echo {start} {end}\"\n";
const WORKFLOW: &str = "[[task]]\nname = \"a\"\ninstances = 2\ncost = \"1s\"\noutputs = [\"x\"]\ncommand = \"true\"\n\n[[task]]\nname = \"b\"\ninstances = 1\ncost = \"1s\"\ninputs = [\"x\"]\ncommand = \"true\"\n";

#[derive(Clone, Copy, Debug, PartialEq)]
enum Kind {
    Batch,
    Divisible,
    Workflow,
}

fn submit(s: &mut State, kind: Kind) -> u64 {
    let text = match kind {
        Kind::Batch => BATCH,
        Kind::Divisible => DIVISIBLE,
        Kind::Workflow => WORKFLOW,
    };
    let done = s
        .on_submit(Submission {
            origin: format!("{kind:?}.toml"),
            text: text.into(),
            workdir: "/".into(),
            key: String::new(),
            name: String::new(),
            divisible_input: Vec::new(),
            after: Vec::new(),
            after_any: Vec::new(),
            hold: false,
            begin_ms: None,
            after_notok: Vec::new(),
            after_corr: Vec::new(),
            singleton: false,
            after_start: Vec::new(),
            max_priority: None,
            task_room: None,
            cap: Default::default(),
            owner: String::new(),
        })
        .unwrap_or_else(|e| panic!("{kind:?} submitted: {e}"));
    assert!(!done.existing);
    done.job_id
}

/// The kind `job N` shows: a divisible view, a workflow's balancer, or a batch job's
/// applications.
fn shown_kind(s: &State, id: u64) -> Kind {
    let j = s.get_job(id).expect("job");
    assert_eq!(j.id, id);
    if j.divisible.is_some() {
        Kind::Divisible
    } else if !j.balancer.is_empty() {
        Kind::Workflow
    } else {
        assert_eq!(j.apps.first().map(|a| a.name.as_str()), Some("hello"));
        Kind::Batch
    }
}

#[test]
fn the_second_job_of_any_kind_is_job_2() {
    for first in [Kind::Batch, Kind::Divisible, Kind::Workflow] {
        for second in [Kind::Batch, Kind::Divisible, Kind::Workflow] {
            let d = scratch(&format!("second-{first:?}-{second:?}"));
            let mut s = open(&d).expect("state");
            assert_eq!(submit(&mut s, first), 1, "{first:?} first");
            assert_eq!(submit(&mut s, second), 2, "{second:?} after {first:?}");
            assert_eq!(shown_kind(&s, 1), first);
            assert_eq!(shown_kind(&s, 2), second);
        }
    }
}

#[test]
fn job_and_cancel_reach_the_right_kind_after_a_restart() {
    let d = scratch("restart");
    let kinds = [Kind::Divisible, Kind::Batch, Kind::Workflow, Kind::Batch];
    {
        let mut s = open(&d).expect("state");
        for (i, k) in kinds.iter().enumerate() {
            assert_eq!(submit(&mut s, *k), i as u64 + 1);
        }
    }
    let mut s = open(&d).expect("reopened");
    // Every kind's jobs in one listing, in id order.
    let listed: Vec<u64> = s.list_jobs(0, 0).jobs.iter().map(|j| j.id).collect();
    assert_eq!(listed, vec![1, 2, 3, 4]);
    let page = s.list_jobs(2, 2);
    assert_eq!(
        (
            page.jobs.iter().map(|j| j.id).collect::<Vec<_>>(),
            page.next_cursor
        ),
        (vec![2, 3], 4)
    );
    for (i, k) in kinds.iter().enumerate() {
        assert_eq!(shown_kind(&s, i as u64 + 1), *k, "job {}", i + 1);
    }
    // The next job continues the sequence.
    assert_eq!(submit(&mut s, Kind::Divisible), 5);
    // `cancel N` goes to job N's kind and no other.
    s.on_cancel(3).expect("cancel the workflow");
    // A cancelled workflow reads `cancelled`, as a cancelled batch or divisible job does.
    assert_eq!(s.get_job(3).expect("job 3").state, "cancelled");
    assert_eq!(
        s.get_job(2).expect("job 2").state,
        "pending",
        "batch job 2 untouched"
    );
    assert_eq!(
        s.get_job(1).expect("job 1").state,
        "running",
        "divisible job 1 untouched"
    );
    s.on_cancel(1).expect("cancel the divisible job");
    assert_eq!(s.get_job(1).expect("job 1").state, "cancelled");
    s.on_cancel(4).expect("cancel batch job 4");
    assert_eq!(s.get_job(4).expect("job 4").state, "cancelled");
    assert_eq!(s.get_job(2).expect("job 2").state, "pending");
    assert!(s.get_job(6).is_err(), "no job 6");
    assert!(s.on_cancel(6).is_err(), "no job 6 to cancel");
    drop(s);
    let s = open(&d).expect("reopened again");
    assert_eq!(s.get_job(3).expect("job 3").state, "cancelled");
    assert_eq!(s.get_job(1).expect("job 1").state, "cancelled");
    assert_eq!(shown_kind(&s, 5), Kind::Divisible);
}

#[test]
fn a_store_with_workflows_numbered_apart_is_refused_with_a_clear_message() {
    let d = scratch("legacy");
    {
        let mut s = open(&d).expect("state");
        submit(&mut s, Kind::Batch);
        submit(&mut s, Kind::Workflow);
    }
    // A store written before the shared sequence has no mark in `meta`.
    let conn = rusqlite::Connection::open(d.join("state.db")).expect("sqlite");
    conn.execute("DELETE FROM meta WHERE key = 'shared_job_ids'", [])
        .expect("unmark");
    drop(conn);
    let err = open(&d).err().expect("refused");
    assert!(err.contains("holds 1 workflow job numbered apart"), "{err}");
    assert!(err.contains("--data-dir"), "{err}");

    // A batch-only store from before is simply marked: its job ids stay.
    let d = scratch("legacy-batch");
    {
        let mut s = open(&d).expect("state");
        submit(&mut s, Kind::Batch);
        submit(&mut s, Kind::Batch);
    }
    let conn = rusqlite::Connection::open(d.join("state.db")).expect("sqlite");
    conn.execute("DELETE FROM meta WHERE key = 'shared_job_ids'", [])
        .expect("unmark");
    drop(conn);
    let mut s = open(&d).expect("a batch-only store opens");
    assert_eq!(shown_kind(&s, 2), Kind::Batch);
    assert_eq!(submit(&mut s, Kind::Workflow), 3);
}

fn submission(kind: Kind, text: &str, name: &str, key: &str) -> Submission {
    Submission {
        origin: format!("{kind:?}.toml"),
        text: text.into(),
        workdir: "/".into(),
        key: key.into(),
        name: name.into(),
        divisible_input: Vec::new(),
        after: Vec::new(),
        after_any: Vec::new(),
        hold: false,
        begin_ms: None,
        after_notok: Vec::new(),
        after_corr: Vec::new(),
        singleton: false,
        after_start: Vec::new(),
        max_priority: None,
        task_room: None,
        cap: Default::default(),
        owner: String::new(),
    }
}

#[test]
fn every_kind_is_named_alike_and_its_submission_bounded_alike() {
    let d = scratch("names");
    let named_file = |text: &str| format!("name = \"from-file\"\n{text}");
    {
        let mut s = open(&d).expect("state");
        for (kind, text) in [
            (Kind::Batch, BATCH),
            (Kind::Divisible, DIVISIBLE),
            (Kind::Workflow, WORKFLOW),
        ] {
            let given = s
                .on_submit(submission(kind, text, "given", ""))
                .expect("named");
            assert_eq!(
                s.get_job(given.job_id).expect("job").name,
                "given",
                "{kind:?}"
            );
            let path = s
                .on_submit(submission(kind, text, "", ""))
                .expect("unnamed");
            assert_eq!(
                s.get_job(path.job_id).expect("job").name,
                format!("{kind:?}.toml"),
                "{kind:?}: the file's path"
            );
            // Workflow files have no `name =` (their top level is `balancer` and tasks).
            if kind != Kind::Workflow {
                let file = s
                    .on_submit(submission(kind, &named_file(text), "", ""))
                    .expect("named in the file");
                assert_eq!(
                    s.get_job(file.job_id).expect("job").name,
                    "from-file",
                    "{kind:?}"
                );
            }
            // The reply says the kind, and a divisible job's size in units.
            let expected = match kind {
                Kind::Batch => (3, hetsched_server::jobs::Kind::Batch),
                Kind::Divisible => (100, hetsched_server::jobs::Kind::Divisible),
                Kind::Workflow => (3, hetsched_server::jobs::Kind::Workflow),
            };
            assert_eq!((given.tasks, given.kind), expected, "{kind:?}");

            // The envelope is checked the same way whatever the kind, and nothing is stored.
            let before = s.list_jobs(0, 0).jobs.len();
            let long_key = "k".repeat(200);
            let refused = [
                submission(kind, text, "a\tb", ""),
                submission(kind, text, &"n".repeat(300), ""),
                submission(kind, text, "", &long_key),
                submission(kind, &format!("{text}\n#{}", "x".repeat(3 << 20)), "", ""),
            ];
            for (i, sub) in refused.into_iter().enumerate() {
                let e = s.on_submit(sub).err().map(|e| e.to_string());
                assert!(e.is_some(), "{kind:?}: submission {i} refused");
            }
            assert_eq!(
                s.list_jobs(0, 0).jobs.len(),
                before,
                "{kind:?}: nothing stored"
            );
        }
    }
    // Names survive a restart.
    let s = open(&d).expect("reopened");
    let names: Vec<String> = s
        .list_jobs(0, 0)
        .jobs
        .iter()
        .map(|j| j.name.clone())
        .collect();
    assert_eq!(
        names,
        [
            "given",
            "Batch.toml",
            "from-file",
            "given",
            "Divisible.toml",
            "from-file",
            "given",
            "Workflow.toml"
        ]
    );
}

/// Ids repeat (a restored backup, a fresh data directory) while agents keep old jobs' files, so
/// every job gets a random nonce of its own at submission, whatever its kind: its batch tasks,
/// workflow instances and divisible chunks carry it to the agent (which marks the job's
/// directories with it), a restart keeps it, and a job stored before nonces (no row) reads 0,
/// the legacy nonce, which only unmarked directories serve.
#[test]
fn every_job_has_a_nonce_of_its_own_its_work_carries_and_a_restart_keeps() {
    let d = scratch("nonces");
    let mut s = open(&d).expect("open");
    let node = common::register(&mut s, "n", 8);
    let (batch, divisible, workflow) = (
        submit(&mut s, Kind::Batch),
        submit(&mut s, Kind::Divisible),
        submit(&mut s, Kind::Workflow),
    );
    let nonces = [batch, divisible, workflow].map(|j| s.job_nonce(j));
    assert!(nonces.iter().all(|&n| n != 0), "{nonces:?}");
    assert!(nonces[0] != nonces[1] && nonces[1] != nonces[2] && nonces[0] != nonces[2]);
    let reply = common::beat(&mut s, node, &[], &[]);
    let carried: std::collections::BTreeSet<u64> =
        reply.assignments.iter().map(|a| a.job_nonce).collect();
    assert_eq!(
        carried,
        [nonces[0], nonces[2]].into_iter().collect(),
        "batch tasks and workflow instances: {:?}",
        reply.assignments
    );
    let chunks = common::ask_chunk(&mut s, "n");
    assert!(!chunks.orders.is_empty());
    assert!(chunks.orders.iter().all(|o| o.job_nonce == nonces[1]));
    drop(s);
    let s = open(&d).expect("reopen");
    assert_eq!([batch, divisible, workflow].map(|j| s.job_nonce(j)), nonces);
    drop(s);
    // A store from before nonces: its jobs have no row.
    rusqlite::Connection::open(d.join("state.db"))
        .and_then(|c| c.execute("DELETE FROM job_nonces WHERE job = ?1", [batch as i64]))
        .expect("forget one");
    let mut s = open(&d).expect("reopen");
    assert_eq!(s.job_nonce(batch), 0);
    assert_eq!(s.job_nonce(divisible), nonces[1]);
    // A new job gets a nonce of its own.
    let next = submit(&mut s, Kind::Batch);
    assert!(s.job_nonce(next) != 0 && !nonces.contains(&s.job_nonce(next)));
}
