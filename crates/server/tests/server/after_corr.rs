//! `submit --after-corr JOB` (Slurm's `--dependency=aftercorr`): a job's task with index i runs
//! once every task with index i of the jobs it names has succeeded, and is cancelled when one of
//! those fails or is cancelled; its other tasks go on. What waits is derived from the named
//! jobs' task states, so a restart finds the same tasks waiting.

use crate::common;

use common::{Agent, register};
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

/// A job of one application `name` whose tasks have `indices` (an `indices =` list).
fn submit(s: &mut State, name: &str, indices: &str, sub: Submission) -> Result<u64, String> {
    s.on_submit(Submission {
        origin: format!("{name}.toml"),
        text: format!(
            "[[application]]\nname = \"{name}\"\nindices = \"{indices}\"\n[application.cpu]\ncommand = \"true\"\n"
        ),
        workdir: "/".into(),
        ..sub
    })
    .map(|d| d.job_id)
    .map_err(|e| e.to_string())
}

fn after_corr(jobs: &[u64]) -> Submission {
    Submission {
        after_corr: jobs.to_vec(),
        ..Default::default()
    }
}

/// (job's application name, index) of each task of `tasks`, from the listing of every job.
fn named(s: &State, jobs: &[u64], tasks: &[(u64, u32)]) -> Vec<(String, u32)> {
    let mut out: Vec<(String, u32)> = tasks
        .iter()
        .map(|&(t, _)| {
            jobs.iter()
                .flat_map(|&j| s.tasks(j).expect("tasks").tasks)
                .find(|i| i.id == t)
                .map(|i| (i.app, i.index))
                .expect("a task of one of the jobs")
        })
        .collect();
    out.sort();
    out
}

/// The task of `app` with `index` that `n` runs (from `s`'s listing of `jobs`).
fn task(n: &Agent, s: &State, jobs: &[u64], app: &str, index: u32) -> (u64, u32) {
    *n.running
        .iter()
        .find(|&&t| named(s, jobs, &[t]) == [(app.to_string(), index)])
        .expect("running")
}

#[test]
fn each_task_runs_once_its_correspondent_succeeded_and_is_cancelled_when_it_failed() {
    let d = common::scratch("after-corr", "pipeline");
    let (prep, sim, mut n) = {
        let mut s = open(&d);
        let prep = submit(&mut s, "prep", "1-3", Submission::default()).expect("prep");
        let sim = submit(&mut s, "sim", "1-3", after_corr(&[prep])).expect("sim");
        let info = s.job(sim).expect("job");
        assert_eq!(info.after_corr, vec![prep]);
        assert_eq!(
            info.pending_reason,
            format!("waiting for the tasks of job {prep} with the same indices")
        );
        let mut n = Agent::new(&mut s, 8);
        let jobs = [prep, sim];
        let first = n.beat(&mut s, &[]);
        assert_eq!(
            named(&s, &jobs, &first),
            vec![("prep".into(), 1), ("prep".into(), 2), ("prep".into(), 3)],
            "nothing of sim before its correspondents"
        );
        // prep[2] succeeds: the reply that records it carries sim[2], and only it.
        let (t, a) = task(&n, &s, &jobs, "prep", 2);
        let next = n.beat(&mut s, &[(t, a, true)]);
        assert_eq!(named(&s, &jobs, &next), vec![("sim".into(), 2)]);
        // prep[1] fails for good: sim[1] is cancelled, saying why; sim goes on.
        let (t, a) = task(&n, &s, &jobs, "prep", 1);
        assert!(n.beat(&mut s, &[(t, a, false)]).is_empty());
        let sim1 = s
            .tasks(sim)
            .expect("tasks")
            .tasks
            .into_iter()
            .find(|x| x.index == 1)
            .expect("sim[1]");
        assert_eq!(sim1.state, "cancelled");
        assert_eq!(
            sim1.message,
            format!("cancelled: task 1 of job {prep}, which this task runs after, failed")
        );
        assert_eq!(sim1.reason, "dependency_failed");
        (prep, sim, n)
    };
    // A restart: sim[3] still waits for prep[3], which still runs.
    let mut s = open(&d);
    n.node = register(&mut s, "n", 8);
    let jobs = [prep, sim];
    assert!(
        n.beat(&mut s, &[]).is_empty(),
        "sim[3] waits after a restart"
    );
    let (t, a) = task(&n, &s, &jobs, "prep", 3);
    let last = n.beat(&mut s, &[(t, a, true)]);
    assert_eq!(named(&s, &jobs, &last), vec![("sim".into(), 3)]);
    let done: Vec<(u64, u32, bool)> = n.running.iter().map(|&(t, a)| (t, a, true)).collect();
    n.beat(&mut s, &done);
    let counts = s.job(sim).expect("job").counts.expect("counts");
    assert_eq!((counts.succeeded, counts.cancelled), (2, 1));
    // (An agent that does not say how prep[1] ended: exit code 1, so it `exited`.)
    let reasons = |s: &State, job: u64| -> Vec<String> {
        let tasks = s.tasks(job).expect("tasks").tasks;
        tasks.into_iter().map(|t| t.reason).collect()
    };
    assert_eq!(reasons(&s, prep), ["exited", "", ""], "after a restart");
    assert_eq!(reasons(&s, sim), ["dependency_failed", "", ""]);
    // `resubmit --cancelled` puts sim[1] back to wait: prep[1] still failed, so it is
    // cancelled again; once prep[1] has run again and succeeded, it runs.
    s.on_resubmit_ended(sim, false, true).expect("resubmit");
    assert_eq!(s.job(sim).expect("job").counts.expect("c").cancelled, 1);
    s.on_resubmit_ended(prep, true, false).expect("prep again");
    s.on_resubmit_ended(sim, false, true).expect("resubmit");
    assert_eq!(
        reasons(&s, prep)[0],
        "exited",
        "resubmitted, it keeps its reason until it runs"
    );
    let again = n.beat(&mut s, &[]);
    assert_eq!(named(&s, &jobs, &again), vec![("prep".into(), 1)]);
    assert_eq!(reasons(&s, prep)[0], "", "running");
    let after = n.beat(&mut s, &[(again[0].0, again[0].1, true)]);
    assert_eq!(named(&s, &jobs, &after), vec![("sim".into(), 1)]);
}

#[test]
fn a_held_job_after_corr_waits_for_its_release_and_its_correspondents_both() {
    let d = common::scratch("after-corr", "held");
    let mut s = open(&d);
    let prep = submit(&mut s, "prep", "0-1", Submission::default()).expect("prep");
    let sim = submit(
        &mut s,
        "sim",
        "0-1",
        Submission {
            after_corr: vec![prep],
            hold: true,
            ..Default::default()
        },
    )
    .expect("sim");
    let mut n = Agent::new(&mut s, 8);
    let jobs = [prep, sim];
    n.beat(&mut s, &[]);
    let (t, a) = task(&n, &s, &jobs, "prep", 0);
    assert!(n.beat(&mut s, &[(t, a, true)]).is_empty(), "held");
    s.hold(sim, false).expect("release");
    let released = n.beat(&mut s, &[]);
    assert_eq!(
        named(&s, &jobs, &released),
        vec![("sim".into(), 0)],
        "only the one whose correspondent succeeded"
    );
    // Held again while sim[1] waits for prep[1]: released, it still waits for it.
    s.hold(sim, true).expect("hold");
    s.hold(sim, false).expect("release");
    assert!(n.beat(&mut s, &[]).is_empty());
    let (t, a) = task(&n, &s, &jobs, "prep", 1);
    let last = n.beat(&mut s, &[(t, a, true)]);
    assert_eq!(named(&s, &jobs, &last), vec![("sim".into(), 1)]);
}

#[test]
fn after_corr_names_batch_jobs_with_every_index_of_the_new_job() {
    let d = common::scratch("after-corr", "refused");
    let mut s = open(&d);
    let prep = submit(&mut s, "prep", "0-2", Submission::default()).expect("prep");
    let e = submit(&mut s, "sim", "0-4", after_corr(&[prep])).expect_err("missing indices");
    assert!(
        e.contains(&format!(
            "--after-corr: job {prep} has no task with index 3 (nor 1 other indices of this job)"
        )),
        "{e}"
    );
    let e = submit(&mut s, "sim", "0-2", after_corr(&[42])).expect_err("no job");
    assert!(e.contains("--after-corr: no batch job 42"), "{e}");
    let wf = s
        .on_submit(Submission {
            origin: "wf.toml".into(),
            text: "balancer = \"centralised\"\n[[task]]\nname = \"A\"\ninstances = 3\ncommand = \"true\"\n".into(),
            workdir: "/".into(),
            ..Default::default()
        })
        .expect("workflow")
        .job_id;
    let e = submit(&mut s, "sim", "0-2", after_corr(&[wf])).expect_err("a workflow");
    assert!(
        e.contains("is a workflow job; --after-corr names batch jobs"),
        "{e}"
    );
    let e = s
        .on_submit(Submission {
            origin: "wf.toml".into(),
            text: "balancer = \"centralised\"\n[[task]]\nname = \"A\"\ninstances = 3\ncommand = \"true\"\n".into(),
            workdir: "/".into(),
            after_corr: vec![prep],
            ..Default::default()
        })
        .expect_err("a workflow after-corr")
        .to_string();
    assert!(e.contains("--after-corr applies to batch jobs"), "{e}");
    // A subset of the indices is fine.
    submit(&mut s, "sim", "1", after_corr(&[prep])).expect("index 1 only");
}

/// A job submitted `--after-corr` a job one of whose tasks already failed: the task of that
/// index is cancelled as the job is accepted, and a restart finds it cancelled (found by the day
/// fuzz: the cancel was not stored).
#[test]
fn a_task_whose_correspondent_failed_before_the_submission_is_cancelled_for_good() {
    let d = common::scratch("after-corr", "failed-before");
    {
        let mut s = open(&d);
        let prep = submit(&mut s, "prep", "0-1", Submission::default()).expect("prep");
        let mut n = Agent::new(&mut s, 8);
        let sent = n.beat(&mut s, &[]);
        let (t, a) = task(&n, &s, &[prep], "prep", 1);
        let ok = sent
            .iter()
            .find(|&&x| x != (t, a))
            .copied()
            .expect("prep[0]");
        n.beat(&mut s, &[(t, a, false), (ok.0, ok.1, true)]);
        let sim = submit(&mut s, "sim", "0-1", after_corr(&[prep])).expect("sim");
        assert_eq!(s.job(sim).expect("job").counts.expect("c").cancelled, 1);
    }
    let s = open(&d);
    let counts = s.job(2).expect("job").counts.expect("counts");
    assert_eq!(
        (counts.cancelled, counts.pending),
        (1, 1),
        "after a restart"
    );
}

/// `resubmit --cancelled` of a task cancelled because its correspondent failed: while that one
/// has not run again, the task is cancelled again at once, and the reply says so (with why)
/// instead of counting it as queued; once the correspondent is resubmitted, it waits for it
/// and is counted (a hands-on review: "1 cancelled task queued again", yet it stayed cancelled).
#[test]
fn resubmitting_a_task_whose_correspondent_still_failed_says_it_was_cancelled_again() {
    let d = common::scratch("after-corr", "resubmit-again");
    let mut s = open(&d);
    let prep = submit(&mut s, "prep", "0-1", Submission::default()).expect("prep");
    let sim = submit(&mut s, "sim", "0-1", after_corr(&[prep])).expect("sim");
    let mut n = Agent::new(&mut s, 8);
    let sent = n.beat(&mut s, &[]);
    let (t, a) = task(&n, &s, &[prep], "prep", 1);
    let ok = sent
        .iter()
        .find(|&&x| x != (t, a))
        .copied()
        .expect("prep[0]");
    n.beat(&mut s, &[(t, a, false), (ok.0, ok.1, true)]);
    assert_eq!(s.job(sim).expect("job").counts.expect("c").cancelled, 1);
    let told = s.on_resubmit_told(sim, false, true).expect("resubmit");
    assert_eq!((told.tasks, told.cancelled_again), (0, 1), "{told:?}");
    assert!(
        told.why.contains(&format!("task 1 of job {prep}")) && told.why.contains("failed"),
        "{told:?}"
    );
    assert_eq!(s.job(sim).expect("job").counts.expect("c").cancelled, 1);
    // The correspondent runs again first: the task then waits for it, and is counted.
    assert_eq!(s.on_resubmit(prep).expect("prep again"), 1);
    let told = s.on_resubmit_told(sim, false, true).expect("resubmit");
    assert_eq!((told.tasks, told.cancelled_again), (1, 0), "{told:?}");
    assert_eq!(s.job(sim).expect("job").counts.expect("c").cancelled, 0);
}

/// A job that finished before a restart (its task rows are then read from the store, not held)
/// can still be named `--after-corr`: its indices are checked against the store, and its tasks
/// having succeeded, the new job's run at once (found by a hands-on review: "finished long ago").
#[test]
fn a_job_that_finished_before_a_restart_can_be_named() {
    let d = common::scratch("after-corr", "restart");
    let prep = {
        let mut s = open(&d);
        let prep = submit(&mut s, "prep", "0-2", Submission::default()).expect("prep");
        let mut n = Agent::new(&mut s, 8);
        let sent = n.beat(&mut s, &[]);
        let done: Vec<_> = sent.iter().map(|&(t, a)| (t, a, true)).collect();
        n.beat(&mut s, &done);
        assert_eq!(s.job(prep).expect("job").state, "completed");
        prep
    };
    let mut s = open(&d);
    let e = submit(&mut s, "sim", "0-3", after_corr(&[prep])).expect_err("index 3");
    assert!(
        e.contains(&format!(
            "--after-corr: job {prep} has no task with index 3"
        )),
        "{e}"
    );
    let sim = submit(&mut s, "sim", "0-2", after_corr(&[prep])).expect("accepted");
    let mut n = Agent::new(&mut s, 8);
    let sent = n.beat(&mut s, &[]);
    assert_eq!(
        named(&s, &[sim], &sent),
        vec![("sim".into(), 0), ("sim".into(), 1), ("sim".into(), 2)],
        "each correspondent succeeded before the restart"
    );
}
