//! `hetsched update JOB`: a batch job's applications' priority, max_running, time limit, cores
//! and memory change after submission; pending tasks are placed and run by the new values, and
//! a restart keeps them.

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
        ..Default::default()
    })
    .map_err(|e| e.to_string())
}

/// `hetsched update JOB --time-limit` of `ms` (0: none).
fn update_time_limit(s: &mut State, job: u64, ms: u64) -> Result<pb::UpdateReply, String> {
    s.update(&pb::UpdateRequest {
        job_id: job,
        time_limit_ms: Some(ms),
        ..Default::default()
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
        "nothing to update: give a priority, a max_running, a time limit, cores, memory, gpus, a gpu \
         kind, requires or a begin time"
    );
    assert_eq!(
        update(&mut s, 9, "", Some(1), None).expect_err("refused"),
        "no job 9"
    );
    assert_eq!(
        update_time_limit(&mut s, job, 10 * 365 * 24 * 3_600_000 + 1).expect_err("refused"),
        "time limit 315360000001 ms is longer than the longest accepted, 315360000000 ms (10 years)"
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

/// A job of one application `a` of `tasks` tasks, each limited to an hour.
fn hour_limited(tasks: u32) -> String {
    format!(
        "[[application]]\nname = \"a\"\ntasks = {tasks}\n\
         [application.cpu]\ncommand = \"true\"\ntime_limit = \"1h\"\n"
    )
}

/// An application's CPU and GPU time limits, ms.
fn limits(a: &pb::AppInfo) -> [u64; 2] {
    [a.cpu_time_limit_ms, a.gpu_time_limit_ms]
}

/// The (spec key, time limit in ms) of each spec a reply carries.
fn specs(r: &pb::HeartbeatReply) -> Vec<(u64, u64)> {
    r.specs.iter().map(|t| (t.key, t.time_limit_ms)).collect()
}

/// The spec key each assignment of a reply names.
fn spec_keys(r: &pb::HeartbeatReply) -> Vec<u64> {
    r.assignments.iter().map(|a| a.spec).collect()
}

#[test]
fn a_new_time_limit_reaches_the_agents_under_a_new_spec_key_and_a_restart_keeps_it() {
    let d = common::scratch("update", "time-limit");
    let (old_key, new_key) = {
        let mut s = open(&d);
        let n = register(&mut s, "n", 1);
        let job = submit(&mut s, &hour_limited(4));
        let r = beat(&mut s, n, &[], &[]);
        assert_eq!(assigned(&r), vec![0]);
        let old_key = spec_keys(&r)[0];
        assert_eq!(specs(&r), [(old_key, 3_600_000)]);

        let r = update_time_limit(&mut s, job, 90_000).expect("updated");
        assert_eq!(
            r.apps
                .iter()
                .map(|a| (a.name.as_str(), a.cpu_time_limit_ms, a.gpu_time_limit_ms))
                .collect::<Vec<_>>(),
            [("a", 90_000, 0)]
        );
        assert_eq!(limits(&s.job(job).expect("job").apps[0]), [90_000, 0]);
        // The agent holds the first spec; the next task is sent with the new one, under a key
        // it does not hold (else it would run the task by the spec it has, with 1 h).
        let mut req = heartbeat_request(n, &[], &[(0, 1, true)]);
        req.known_specs = vec![old_key];
        let r = s.heartbeat(req).expect("heartbeat");
        assert_eq!(assigned(&r), vec![1]);
        let new_key = spec_keys(&r)[0];
        assert_ne!(new_key, old_key);
        assert_eq!(specs(&r), [(new_key, 90_000)]);
        // The same limit again changes nothing an agent holds.
        update_time_limit(&mut s, job, 90_000).expect("updated");
        let mut req = heartbeat_request(n, &[], &[(1, 1, true)]);
        req.known_specs = vec![old_key, new_key];
        let r = s.heartbeat(req).expect("heartbeat");
        assert_eq!((assigned(&r), spec_keys(&r)), (vec![2], vec![new_key]));
        assert!(r.specs.is_empty(), "no spec to send: {:?}", specs(&r));
        (old_key, new_key)
    };
    // Restarted: the update's limit and key hold, over the job file's, for an agent that kept
    // the old spec through the restart.
    let mut s = open(&d);
    assert_eq!(limits(&s.job(1).expect("job").apps[0]), [90_000, 0]);
    let n = register(&mut s, "m", 1);
    let mut req = heartbeat_request(n, &[], &[]);
    req.known_specs = vec![old_key];
    let r = s.heartbeat(req).expect("heartbeat");
    assert_eq!(assigned(&r), vec![3]);
    assert_eq!(specs(&r), [(new_key, 90_000)]);
}

#[test]
fn a_shorter_time_limit_lets_tasks_start_on_an_agent_with_less_time_left() {
    let d = common::scratch("update", "time-left");
    let mut s = open(&d);
    let n = register(&mut s, "n", 1);
    let job = submit(&mut s, &hour_limited(1));
    // Ten minutes left on the agent: a one-hour task would be stopped half-way.
    let ten_minutes = |s: &mut State| {
        let mut req = heartbeat_request(n, &[], &[]);
        req.time_left_ms = Some(600_000);
        s.heartbeat(req).expect("heartbeat")
    };
    assert!(assigned(&ten_minutes(&mut s)).is_empty());
    update_time_limit(&mut s, job, 300_000).expect("updated");
    let r = ten_minutes(&mut s);
    assert_eq!(assigned(&r), vec![0]);
    assert_eq!(specs(&r)[0].1, 300_000);
    // 0 (`--time-limit none`) lifts the limit.
    update_time_limit(&mut s, job, 0).expect("updated");
    assert_eq!(limits(&s.job(job).expect("job").apps[0]), [0, 0]);
}

#[test]
fn a_running_task_is_told_its_new_spec_until_its_agent_runs_by_it() {
    let d = common::scratch("update", "respec");
    let mut s = open(&d);
    let n = register(&mut s, "n", 2);
    let job = submit(&mut s, &hour_limited(2));
    let r = beat(&mut s, n, &[], &[]);
    assert_eq!(assigned(&r), vec![0, 1]);
    let old_key = spec_keys(&r)[0];
    // Each beat reports the tasks with the keys the agent runs them by.
    let beat_with = |s: &mut State, keys: [Option<u64>; 2], known: &[u64]| {
        let mut req = heartbeat_request(n, &[(0, 1), (1, 1)], &[]);
        for (t, key) in req.running.iter_mut().zip(keys) {
            t.spec = key;
        }
        req.known_specs = known.to_vec();
        s.heartbeat(req).expect("heartbeat")
    };
    let respecs = |r: &pb::HeartbeatReply| -> Vec<(u64, u32, u64)> {
        r.respecs
            .iter()
            .map(|x| (x.task_id, x.attempt, x.spec))
            .collect()
    };
    assert!(respecs(&beat_with(&mut s, [Some(old_key); 2], &[old_key])).is_empty());

    update_time_limit(&mut s, job, 7_200_000).expect("updated");
    let r = beat_with(&mut s, [Some(old_key); 2], &[old_key]);
    let new_key = r.respecs.first().map_or(0, |x| x.spec);
    assert_ne!(new_key, old_key);
    assert_eq!(respecs(&r), [(0, 1, new_key), (1, 1, new_key)]);
    // The new spec once, with the two hours the agent applies from the tasks' start.
    assert_eq!(specs(&r), [(new_key, 7_200_000)]);
    // A lost reply: told again, without the spec the agent now holds.
    let r = beat_with(&mut s, [Some(old_key), Some(new_key)], &[old_key, new_key]);
    assert_eq!(respecs(&r), [(0, 1, new_key)]);
    assert!(r.specs.is_empty());
    // Both run by it: nothing more to tell. An agent that does not say is told nothing.
    assert!(respecs(&beat_with(&mut s, [Some(new_key); 2], &[new_key])).is_empty());
    assert!(respecs(&beat_with(&mut s, [None; 2], &[new_key])).is_empty());
}

/// `hetsched update JOB --cores --memory [--variant]`.
fn update_request(
    s: &mut State,
    job: u64,
    cores: Option<u32>,
    memory_bytes: Option<u64>,
    variant: &str,
) -> Result<pb::UpdateReply, String> {
    s.update(&pb::UpdateRequest {
        job_id: job,
        cores,
        memory_bytes,
        variant: variant.into(),
        ..Default::default()
    })
    .map_err(|e| e.to_string())
}

/// (cores, memory) of each assignment of `r`, and the memory limit of each spec it sends.
fn booked(r: &pb::HeartbeatReply) -> (Vec<u32>, Vec<u64>) {
    (
        r.assignments.iter().map(|a| a.cores).collect(),
        r.specs.iter().map(|s| s.memory_limit_bytes).collect(),
    )
}

const MIB: u64 = 1 << 20;

#[test]
fn cores_and_memory_change_for_the_tasks_to_start_and_a_running_task_keeps_what_it_was_given() {
    let d = common::scratch("update", "resources");
    let job_file = "[[application]]\nname = \"big\"\ntasks = 8\n[application.cpu]\n\
                    command = \"true\"\ncores = 8\nmemory = \"2GiB\"\n";
    {
        let mut s = open(&d);
        // Submitted before any node registered; the node that comes has 4 cores and 1 GiB.
        let job = submit(&mut s, job_file);
        let n = register(&mut s, "n", 4);
        assert!(
            assigned(&beat(&mut s, n, &[], &[])).is_empty(),
            "8 cores, 2 GiB fit nowhere"
        );
        let r = update_request(&mut s, job, Some(2), Some(256 * MIB), "").expect("updated");
        let a = &r.apps[0];
        assert_eq!(
            (a.cpu_cores, a.cpu_memory_bytes, a.gpu_cores, a.running_kept),
            (2, 256 * MIB, 0, 0)
        );
        let info = &s.job(job).expect("job").apps[0];
        assert_eq!((info.cpu_cores, info.cpu_memory_bytes), (2, 256 * MIB));
        // Two tasks of 2 cores fill the node; the spec its agent enforces has the new memory.
        let r = beat(&mut s, n, &[], &[]);
        assert_eq!(assigned(&r), vec![0, 1]);
        assert_eq!(booked(&r), (vec![2, 2], vec![256 * MIB]));
        let first_key = spec_keys(&r)[0];
        // While they run, the tasks still to start take 1 core and 128 MiB; the two running
        // keep their 2 cores each, so the node stays full.
        let r = update_request(&mut s, job, Some(1), Some(128 * MIB), "").expect("updated");
        let a = &r.apps[0];
        assert_eq!(
            (a.cpu_cores, a.cpu_memory_bytes, a.running_kept),
            (1, 128 * MIB, 2)
        );
        assert!(assigned(&beat(&mut s, n, &[(0, 1), (1, 1)], &[])).is_empty());
        // Task 0 ends and gives back its 2 cores: two tasks of the new size start there, under a
        // new spec with the new memory.
        let r = beat(&mut s, n, &[(1, 1)], &[(0, 1, true)]);
        assert_eq!(assigned(&r), vec![2, 3]);
        assert_eq!(booked(&r), (vec![1, 1], vec![128 * MIB]));
        assert_ne!(spec_keys(&r)[0], first_key);
        // A later update that changes no request still says who keeps what.
        let r = s
            .update(&pb::UpdateRequest {
                job_id: job,
                priority: Some(1),
                ..Default::default()
            })
            .expect("updated");
        assert_eq!(r.apps[0].running_kept, 1);
    }
    // Restarted while task 1 holds 2 cores and tasks 2 and 3 one each: the node is full again,
    // not 1 core short of it; when task 1 ends, its 2 cores start two more.
    {
        let mut s = open(&d);
        let info = &s.job(1).expect("job").apps[0];
        assert_eq!((info.cpu_cores, info.cpu_memory_bytes), (1, 128 * MIB));
        let n = register(&mut s, "n", 4);
        let running = [(1, 1), (2, 1), (3, 1)];
        assert!(assigned(&beat(&mut s, n, &running, &[])).is_empty());
        let r = beat(&mut s, n, &[(2, 1), (3, 1)], &[(1, 1, true)]);
        assert_eq!(assigned(&r), vec![4, 5]);
        assert_eq!(booked(&r).0, vec![1, 1]);
        s.hold(1, true).expect("held");
        let ended = [(2, 1, true), (3, 1, true), (4, 1, true), (5, 1, true)];
        assert!(assigned(&beat(&mut s, n, &[], &ended)).is_empty());
    }
    // The update holds over the job file's 8 cores and 2 GiB, for the tasks left; with nothing
    // running, all 4 cores are free.
    let mut s = open(&d);
    let n = register(&mut s, "n", 4);
    s.hold(1, false).expect("released");
    let r = beat(&mut s, n, &[], &[]);
    assert_eq!(assigned(&r), vec![6, 7]);
    assert_eq!(booked(&r), (vec![1, 1], vec![128 * MIB]));
}

#[test]
fn a_task_that_keeps_its_devices_gives_them_back_when_it_ends() {
    let d = common::scratch("update", "gpus-running");
    let mut s = open(&d);
    let g = common::register_with_gpus(&mut s, "g", 8, 2);
    let job = submit(
        &mut s,
        "[[application]]\nname = \"t\"\ntasks = 4\n[application.gpu]\ncommand = \"true\"\n\
         cores = 1\ngpus = 2\n",
    );
    let r = beat(&mut s, g, &[], &[]);
    assert_eq!(
        assigned(&r),
        vec![0],
        "one task of 2 devices fills the node"
    );
    let r = s
        .update(&pb::UpdateRequest {
            job_id: job,
            gpus: Some(1),
            ..Default::default()
        })
        .expect("updated");
    assert_eq!((r.apps[0].gpus, r.apps[0].running_kept), (1, 1));
    assert!(
        assigned(&beat(&mut s, g, &[(0, 1)], &[])).is_empty(),
        "task 0 holds both"
    );
    let r = beat(&mut s, g, &[], &[(0, 1, true)]);
    assert_eq!(assigned(&r), vec![1, 2], "two tasks of 1 device each");
}

#[test]
fn a_cores_or_memory_update_names_what_it_cannot_do() {
    let d = common::scratch("update", "resources-refused");
    let mut s = open(&d);
    register(&mut s, "n", 4);
    register(&mut s, "o", 4);
    let cpu_only = submit(&mut s, &app("a", 2));
    let whole = submit(
        &mut s,
        "[[application]]\nname = \"mpi\"\ntasks = 1\nnodes = 2\n[application.cpu]\ncommand = \"true\"\n",
    );
    let refused = |s: &mut State, job, cores, memory, variant: &str| {
        update_request(s, job, cores, memory, variant).expect_err("refused")
    };
    assert_eq!(
        refused(&mut s, cpu_only, Some(0), None, ""),
        "cores: a task takes at least 1 core"
    );
    assert!(
        refused(&mut s, cpu_only, Some(2), None, "gpu").contains("has no gpu variant"),
        "a variant it lacks"
    );
    assert!(refused(&mut s, cpu_only, Some(2), None, "fpga").contains("expected cpu or gpu"));
    assert!(refused(&mut s, cpu_only, None, None, "cpu").starts_with("nothing to update"));
    let e = s
        .update(&pb::UpdateRequest {
            job_id: cpu_only,
            priority: Some(3),
            variant: "cpu".into(),
            ..Default::default()
        })
        .expect_err("a variant without cores or memory")
        .to_string();
    assert!(e.contains("give cores or memory"), "{e}");
    assert!(
        refused(&mut s, cpu_only, None, Some(1 << 60), "").contains("more than a task may take")
    );
    assert!(
        refused(&mut s, whole, Some(2), None, "").contains("holds 2 whole nodes per task"),
        "a multi-node task"
    );
    // Nothing was changed by the refusals.
    let info = &s.job(cpu_only).expect("job").apps[0];
    assert_eq!((info.cpu_cores, info.cpu_memory_bytes), (1, 0));
}

/// One bound on a task's memory, 1 PiB (what a node may have): a job file past it is refused at
/// submission, and `hetsched update --memory` past it, in the same words; at the bound both
/// are taken. (Submission took any size up to 16 EiB, and `update` had a bound of its own.)
#[test]
fn submission_and_update_refuse_task_memory_past_one_bound_in_the_same_words() {
    // 1 PiB, written out: the test reads the same on code that had two bounds.
    const MAX_TASK_MEMORY: u64 = 1 << 50;
    let d = common::scratch("update", "memory-bound");
    let mut s = open(&d);
    let past = MAX_TASK_MEMORY + 1;
    let job_with = |memory: u64| {
        format!(
            "[[application]]\nname = \"a\"\ntasks = 1\n[application.cpu]\n\
             command = \"true\"\nmemory = \"{memory}\"\n"
        )
    };
    let words = format!("{past} bytes is more than a task may take, {MAX_TASK_MEMORY} (1 PiB)");
    let e = s
        .submit("job.toml", &job_with(past), "/")
        .expect_err("a task past the bound")
        .to_string();
    assert!(
        e.ends_with(&format!("application[0].cpu.memory: {words}")),
        "{e}"
    );
    assert!(e.starts_with("job.toml:6:10: "), "{e}");
    let job = submit(&mut s, &job_with(MAX_TASK_MEMORY));
    assert_eq!(
        update_request(&mut s, job, None, Some(past), "").expect_err("past the bound"),
        format!("memory: {words}")
    );
    update_request(&mut s, job, None, Some(MAX_TASK_MEMORY), "").expect("at the bound");
}

/// `hetsched update JOB --requires ATTR,…` (`none`: nothing).
fn update_requires(s: &mut State, job: u64, requires: &str) -> Result<pb::UpdateReply, String> {
    s.update(&pb::UpdateRequest {
        job_id: job,
        requires: Some(requires.into()),
        ..Default::default()
    })
    .map_err(|e| e.to_string())
}

#[test]
fn requires_change_where_pending_tasks_may_run_and_a_restart_keeps_them() {
    let d = common::scratch("update", "requires");
    let job_file = "[[application]]\nname = \"a\"\ntasks = 6\nrequires = [\"bigmem\"]\n\
                    [application.cpu]\ncommand = \"true\"\n";
    {
        let mut s = open(&d);
        let plain = register(&mut s, "plain", 2);
        let big = common::register_with(&mut s, "big", 2, &["bigmem"]);
        let job = submit(&mut s, job_file);
        assert!(
            assigned(&beat(&mut s, plain, &[], &[])).is_empty(),
            "not bigmem"
        );
        // Nothing required: the plain node takes two.
        let r = update_requires(&mut s, job, "").expect("updated");
        assert!(r.apps[0].requires.is_empty());
        assert_eq!(assigned(&beat(&mut s, plain, &[], &[])), vec![0, 1]);
        // `ssd` and `bigmem` (in any order, repeated): only a node with both runs it now, and
        // the tasks running on the plain node stay there.
        let r = update_requires(&mut s, job, "ssd,bigmem,ssd").expect("updated");
        assert_eq!(r.apps[0].requires, ["bigmem", "ssd"]);
        assert_eq!(s.job(job).expect("job").apps[0].requires, ["bigmem", "ssd"]);
        assert!(assigned(&beat(&mut s, plain, &[(1, 1)], &[(0, 1, true)])).is_empty());
        assert!(assigned(&beat(&mut s, big, &[], &[])).is_empty(), "no ssd");
        update_requires(&mut s, job, "bigmem").expect("updated");
        assert_eq!(assigned(&beat(&mut s, big, &[], &[])), vec![2, 3]);
        s.hold(job, true).expect("held");
        beat(&mut s, big, &[], &[(2, 1, true), (3, 1, true)]);
        beat(&mut s, plain, &[], &[(1, 1, true)]);
        update_requires(&mut s, job, "ssd").expect("updated");
    }
    // Restarted: `ssd`, not the file's `bigmem`.
    let mut s = open(&d);
    assert_eq!(s.job(1).expect("job").apps[0].requires, ["ssd"]);
    let big = common::register_with(&mut s, "big2", 2, &["bigmem"]);
    let ssd = common::register_with(&mut s, "ssd", 2, &["ssd"]);
    s.hold(1, false).expect("released");
    assert!(assigned(&beat(&mut s, big, &[], &[])).is_empty());
    assert_eq!(assigned(&beat(&mut s, ssd, &[], &[])), vec![4, 5]);
    // A name with whitespace is refused, naming it.
    let e = update_requires(&mut s, 1, "big mem").expect_err("whitespace");
    assert!(
        e.contains("requires[0]: attribute `big mem` has whitespace"),
        "{e}"
    );
}

#[test]
fn a_gpu_variants_devices_change_while_no_task_runs_and_a_restart_keeps_them() {
    let d = common::scratch("update", "gpus");
    let job_file = "[[application]]\nname = \"train\"\ntasks = 4\n\
                    [application.gpu]\ncommand = \"true\"\ngpus = 8\n";
    {
        let mut s = open(&d);
        let job = submit(&mut s, job_file);
        let n = common::register_with_gpus(&mut s, "gpu", 8, 4);
        assert!(
            assigned(&beat(&mut s, n, &[], &[])).is_empty(),
            "8 GPUs on a 4-GPU node"
        );
        let e = s
            .update(&pb::UpdateRequest {
                job_id: job,
                gpus: Some(2),
                variant: "cpu".into(),
                ..Default::default()
            })
            .expect_err("the CPU variant takes no devices")
            .to_string();
        assert!(e.contains("the CPU variant takes no devices"), "{e}");
        let r = s
            .update(&pb::UpdateRequest {
                job_id: job,
                gpus: Some(2),
                ..Default::default()
            })
            .expect("updated");
        assert_eq!(
            (r.apps[0].gpus, r.apps[0].gpu_cores),
            (2, 1),
            "cores as they were"
        );
        let r = beat(&mut s, n, &[], &[]);
        assert_eq!(assigned(&r), vec![0, 1]);
        let devices: Vec<Vec<u32>> = r.assignments.iter().map(|a| a.devices.clone()).collect();
        assert_eq!(devices, [vec![0, 1], vec![2, 3]], "two devices each");
        s.hold(job, true).expect("held");
        beat(&mut s, n, &[], &[(0, 1, true), (1, 1, true)]);
    }
    let s = open(&d);
    assert_eq!(
        s.job(1).expect("job").apps[0].gpus,
        2,
        "kept over the file's 8"
    );
    // An application without a GPU variant has no devices to change.
    let mut s = s;
    let cpu_only = submit(&mut s, &app("a", 1));
    let e = s
        .update(&pb::UpdateRequest {
            job_id: cpu_only,
            gpus: Some(1),
            ..Default::default()
        })
        .expect_err("no GPU variant")
        .to_string();
    assert!(e.contains("has no gpu variant"), "{e}");
}

/// `hetsched update JOB --gpu-kind KIND` (empty: any).
fn update_gpu_kind(s: &mut State, job: u64, kind: &str) -> Result<pb::UpdateReply, String> {
    s.update(&pb::UpdateRequest {
        job_id: job,
        gpu_kind: Some(kind.into()),
        ..Default::default()
    })
    .map_err(|e| e.to_string())
}

#[test]
fn a_gpu_variants_kind_changes_for_the_tasks_to_start_and_a_restart_keeps_it() {
    let d = common::scratch("update", "gpu-kind");
    let job_file = "[[application]]\nname = \"train\"\ntasks = 4\n\
                    [application.gpu]\ncommand = \"true\"\nkind = \"h100\"\n";
    {
        let mut s = open(&d);
        // Submitted before any node registered; the node that comes has two a100s.
        let job = submit(&mut s, job_file);
        let g = common::register_with_gpus(&mut s, "g", 4, 2);
        assert!(assigned(&beat(&mut s, g, &[], &[])).is_empty(), "no h100");
        assert_eq!(s.job(job).expect("job").apps[0].gpu_kind, "h100");
        let r = update_gpu_kind(&mut s, job, "a100").expect("updated");
        assert_eq!(r.apps[0].gpu_kind, "a100");
        assert_eq!(s.job(job).expect("job").apps[0].gpu_kind, "a100");
        let r = beat(&mut s, g, &[], &[]);
        assert_eq!(assigned(&r), vec![0, 1], "one a100 each");
        // Refused: a kind with whitespace, an application without a GPU variant, the CPU
        // variant named.
        let e = update_gpu_kind(&mut s, job, "a 100").expect_err("whitespace");
        assert!(
            e.starts_with("gpu kind: attribute `a 100` has whitespace"),
            "{e}"
        );
        let cpu_only = submit(&mut s, &app("c", 1));
        let e = update_gpu_kind(&mut s, cpu_only, "a100").expect_err("no GPU variant");
        assert!(e.contains("has no gpu variant"), "{e}");
        s.cancel(cpu_only).expect("cancelled");
        let e = s
            .update(&pb::UpdateRequest {
                job_id: job,
                gpu_kind: Some("a100".into()),
                variant: "cpu".into(),
                ..Default::default()
            })
            .expect_err("the CPU variant")
            .to_string();
        assert!(e.contains("gpu kind"), "{e}");
        s.hold(job, true).expect("held");
        beat(&mut s, g, &[], &[(0, 1, true), (1, 1, true)]);
        // Back to the file's h100 for the tasks left.
        update_gpu_kind(&mut s, job, "h100").expect("updated");
    }
    // Restarted: h100 as updated (here the file's too), then any kind.
    let mut s = open(&d);
    assert_eq!(s.job(1).expect("job").apps[0].gpu_kind, "h100");
    let g = common::register_with_gpus(&mut s, "g", 4, 2);
    s.hold(1, false).expect("released");
    assert!(assigned(&beat(&mut s, g, &[], &[])).is_empty(), "no h100");
    let r = update_gpu_kind(&mut s, 1, "").expect("updated");
    assert_eq!(r.apps[0].gpu_kind, "", "any kind");
    assert_eq!(assigned(&beat(&mut s, g, &[], &[])), vec![2, 3]);
    drop(s);
    let s = open(&d);
    assert_eq!(
        s.job(1).expect("job").apps[0].gpu_kind,
        "",
        "any kind, kept"
    );
}
