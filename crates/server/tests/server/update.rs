//! `hetsched update JOB`: a batch job's applications' priority and max_running change after
//! submission; pending tasks are placed by the new values, and a restart keeps them.

use crate::common;

use common::{beat, register};
use hetsched_proto as pb;
use hetsched_server::ServerConfig;
use hetsched_server::convert::Wire;
use hetsched_server::state::State;
use hetsched_server::store::Store;
use std::path::Path;

fn open(d: &Path) -> State {
    let config = ServerConfig {
        data_dir: d.to_path_buf(),
        ..Default::default()
    };
    State::open(&config, Store::open(&d.join("state.db")).expect("store")).expect("state")
}

fn submit(s: &mut State, text: &str) -> u64 {
    s.submit("job.toml", text, "/").expect("submit").job_id
}

fn app(name: &str, tasks: u32) -> String {
    format!(
        "[[application]]\nname = \"{name}\"\ntasks = {tasks}\n[application.cpu]\ncommand = \"true\"\n"
    )
}

fn update(
    s: &mut State,
    job: u64,
    app: &str,
    priority: Option<i32>,
    max_running: Option<u32>,
) -> Result<pb::UpdateReply, String> {
    s.update(&pb::UpdateRequest {
        job_id: job,
        app: app.into(),
        priority,
        max_running,
    })
    .map_err(|e| e.to_string())
}

fn assigned(r: &pb::HeartbeatReply) -> Vec<u64> {
    r.assignments.iter().map(|a| a.task_id).collect()
}

/// (name, priority, max_running) of each of the job's applications.
fn settings(s: &State, job: u64) -> Vec<(String, i32, u32)> {
    s.job(job)
        .expect("job")
        .apps
        .into_iter()
        .map(|a| (a.name, a.priority, a.max_running))
        .collect()
}

#[test]
fn an_update_reorders_and_caps_pending_work_and_a_restart_keeps_it() {
    let d = common::scratch("update", "order");
    {
        let mut s = open(&d);
        let n = register(&mut s, "n", 1);
        let first = submit(&mut s, &app("first", 2));
        let second = submit(&mut s, &format!("{}{}", app("a", 2), app("b", 2)));
        // The second job's `b` goes first once its priority is raised.
        let r = update(&mut s, second, "b", Some(7), None).expect("updated");
        assert_eq!(
            r.apps
                .iter()
                .map(|a| (a.name.as_str(), a.priority, a.max_running))
                .collect::<Vec<_>>(),
            [("b", 7, 0)]
        );
        assert_eq!(assigned(&beat(&mut s, n, &[], &[])), vec![4]);
        assert_eq!(
            settings(&s, second),
            [("a".to_string(), 0, 0), ("b".to_string(), 7, 0)]
        );
        // Every application of the first job: capped at one running task, priority 9.
        update(&mut s, first, "", Some(9), Some(1)).expect("updated");
        assert_eq!(settings(&s, first), [("first".to_string(), 9, 1)]);
    }
    // Restarted, the server keeps what the updates set, over the job files.
    let mut s = open(&d);
    assert_eq!(settings(&s, 1), [("first".to_string(), 9, 1)]);
    assert_eq!(
        settings(&s, 2),
        [("a".to_string(), 0, 0), ("b".to_string(), 7, 0)]
    );
    let n = register(&mut s, "m", 4);
    let r = beat(&mut s, n, &[], &[]);
    // Four free cores: one task of `first` (its cap), then `b`'s other task, then `a`'s two.
    assert_eq!(assigned(&r), vec![0, 5, 2, 3]);
    // The cap lifted: the other task of `first` starts at the next beat that has room.
    update(&mut s, 1, "", None, Some(0)).expect("updated");
    let r = beat(&mut s, n, &[(0, 1), (5, 1), (2, 1)], &[(3, 1, true)]);
    assert_eq!(assigned(&r), vec![1]);
}

#[test]
fn an_update_names_what_it_cannot_do() {
    let d = common::scratch("update", "refused");
    let mut s = open(&d);
    let n = register(&mut s, "n", 1);
    let job = submit(&mut s, &format!("{}{}", app("a", 1), app("b", 1)));
    assert_eq!(
        update(&mut s, job, "c", Some(1), None).expect_err("refused"),
        "job 1 has no application `c` (it has: a, b)"
    );
    assert_eq!(
        update(&mut s, job, "", None, None).expect_err("refused"),
        "nothing to update: give a priority or a max_running"
    );
    assert_eq!(
        update(&mut s, 9, "", Some(1), None).expect_err("refused"),
        "no job 9"
    );
    beat(&mut s, n, &[], &[]);
    beat(&mut s, n, &[], &[(0, 1, true)]);
    beat(&mut s, n, &[], &[(1, 1, true)]);
    assert_eq!(
        update(&mut s, job, "", Some(1), None).expect_err("refused"),
        "job 1 has ended (completed): nothing to update"
    );
    // Nothing was changed by the refusals.
    assert_eq!(
        settings(&s, job),
        [("a".to_string(), 0, 0), ("b".to_string(), 0, 0)]
    );
}
