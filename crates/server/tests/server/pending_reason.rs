//! Why a batch job's pending tasks wait (`pending_reason`, docs/runtime.md "Why a job waits"):
//! each reason as the cluster changes under the job — busy nodes, a drain, a dead node, a hold,
//! a job it runs after, its own `max_running` — and none once nothing is pending.

use crate::common;

use common::{heartbeat_request, register_with};
use hetsched_server::ServerConfig;
use hetsched_server::convert::Wire;
use hetsched_server::state::State;
use hetsched_server::state::types::Submission;
use hetsched_server::store::Store;

fn submit(s: &mut State, app: &str, extra: &str, hold: bool, after: &[u64]) -> u64 {
    s.on_submit(Submission {
        origin: "job.toml".into(),
        text: format!(
            "[[application]]\nname = \"{app}\"\ntasks = 4\n{extra}\n[application.cpu]\ncommand = \"true\"\n"
        ),
        workdir: "/".into(),
        hold,
        after: after.to_vec(),
        ..Default::default()
    })
    .expect("submit")
    .job_id
}

fn open(dir: &std::path::Path) -> State {
    let config = ServerConfig {
        data_dir: dir.to_path_buf(),
        ..Default::default()
    };
    State::open(&config, Store::open(&dir.join("state.db")).expect("store")).expect("state")
}

fn reason(s: &State, job: u64) -> String {
    s.job(job).expect("job").pending_reason
}

/// Whether the job waits for an operator (no node can run it now).
fn blocked(s: &State, job: u64) -> bool {
    s.job(job).expect("job").blocked
}

fn beat(s: &mut State, node: u32, running: &[(u64, u32)]) -> Vec<(u64, u32)> {
    s.heartbeat(heartbeat_request(node, running, &[]))
        .expect("beat")
        .assignments
        .iter()
        .map(|a| (a.task_id, a.attempt))
        .collect()
}

#[test]
fn a_pending_job_says_why_as_the_cluster_changes_under_it() {
    let dir = common::scratch("pending-reason", "changes");
    let mut s = open(&dir);
    let big = register_with(&mut s, "big", 2, &["bigmem"]);
    let small = register_with(&mut s, "small", 2, &[]);
    // Four one-core tasks that need `bigmem`: two run on `big`, two wait for its cores.
    let job = submit(&mut s, "solve", "requires = [\"bigmem\"]", false, &[]);
    // `big` has not beaten since: its next beat starts two (not "busy": it is idle).
    assert_eq!(
        reason(&s, job),
        "resources: node `big` has room for it now: it starts at the node's next heartbeat"
    );
    let running = beat(&mut s, big, &[]);
    assert_eq!(running.len(), 2);
    assert_eq!(
        reason(&s, job),
        "resources: the nodes that can run it are busy"
    );
    assert!(!blocked(&s, job), "busy nodes free up by themselves");
    // The only node that can run it is drained: it waits for an operator.
    s.on_drain("big", true).expect("drain");
    assert_eq!(
        reason(&s, job),
        "every node that can run `solve` is drained: big (`hetsched node resume NAME`)"
    );
    assert!(blocked(&s, job), "a drain waits for an operator");
    s.on_drain("big", false).expect("resume");
    // The node dies (its heartbeats stop): no live node can run it, and the reason says what
    // it needs.
    std::thread::sleep(crate::common::SILENCE);
    beat(&mut s, small, &[]);
    s.check_dead(crate::common::DEAD_TIMEOUT)
        .expect("dead check");
    assert_eq!(
        reason(&s, job),
        "no live node can run `solve` (cpu: 1 core; requires bigmem)"
    );
    assert!(blocked(&s, job));
    // It comes back: its cores are free again (its tasks were lost and wait anew).
    beat(&mut s, big, &[]);
    assert!(reason(&s, job).is_empty() || reason(&s, job).starts_with("resources"));
    // Held, and waiting for a job it runs after.
    let held = submit(&mut s, "later", "", true, &[]);
    assert_eq!(
        reason(&s, held),
        format!("held: `hetsched release {held}` lets it run")
    );
    assert!(!blocked(&s, held), "a hold is the user's own");
    let after = submit(&mut s, "next", "", false, &[job]);
    assert_eq!(reason(&s, after), format!("waiting for job {job}"));
    // Its own cap: one task at a time, one running.
    let capped = submit(&mut s, "one-by-one", "max_running = 1", false, &[]);
    let sent = beat(&mut s, small, &[]);
    assert!(!sent.is_empty());
    assert_eq!(reason(&s, capped), "`one-by-one` runs its max_running of 1");
    // Nothing pending, nothing to say.
    let finished = submit(&mut s, "gone", "", false, &[]);
    s.on_cancel(finished).expect("cancel");
    assert_eq!(reason(&s, finished), "");
}

#[test]
fn an_application_backed_off_on_every_node_that_can_run_it_says_so() {
    let dir = common::scratch("pending-reason", "backoff");
    let mut s = open(&dir);
    let n = register_with(&mut s, "n", 1, &[]);
    let job = submit(&mut s, "missing", "retries = 10", false, &[]);
    // Its program is missing on the one node: three start failures in a row back it off there.
    let mut sent = beat(&mut s, n, &[]);
    for _ in 0..3 {
        let (task, attempt) = sent[0];
        let mut req = heartbeat_request(n, &[], &[]);
        req.results.push(hetsched_proto::TaskResult {
            task_id: task,
            attempt,
            exit_code: 127,
            start_failed: true,
            message: "sh: 1: frobnicate: not found".into(),
            ..Default::default()
        });
        sent = s
            .heartbeat(req)
            .expect("beat")
            .assignments
            .iter()
            .map(|a| (a.task_id, a.attempt))
            .collect();
    }
    assert!(sent.is_empty(), "backed off: nothing more is sent there");
    assert_eq!(
        reason(&s, job),
        "`missing` is backed off on every node that can run it (its tasks failed to start there)"
    );
    // Once the job is purged, the node no longer lists a back-off of its (nameless) application,
    // and a restart does not bring one back.
    let backed_off = |s: &State| s.nodes(false).nodes[0].backed_off.len();
    assert_eq!(backed_off(&s), 1);
    s.on_cancel(job).expect("cancel");
    s.on_purge(&hetsched_server::state::types::PurgeSelection {
        job_ids: vec![job],
        ..Default::default()
    })
    .expect("purge");
    assert_eq!(backed_off(&s), 0);
    // The dashboard's job count: one submitted, one purged (`/api/jobs`' total and purged).
    assert_eq!((s.job_count(), s.purged_job_count()), (1, 1));
    drop(s);
    let s = open(&dir);
    assert_eq!(backed_off(&s), 0, "nothing restored");
}

/// With an `[[allocation]]` queue whose agents offer `bigmem`, a job requiring it is accepted
/// although no live node has it, and waits for an allocation (not blocked); one requiring what
/// no queue offers, or longer than the queue's allocations, is still refused.
#[test]
fn work_an_allocation_queue_could_run_waits_for_it_instead_of_being_refused_or_blocked() {
    let dir = common::scratch("pending-reason", "allocation");
    let queue: hetsched_server::allocation::QueueConfig = toml::from_str(
        "name = \"fat\"\nmanager = \"slurm\"\ntime_limit = \"1h\"\nattributes = [\"bigmem\"]\n",
    )
    .expect("queue");
    let config = ServerConfig {
        data_dir: dir.to_path_buf(),
        allocation: vec![queue],
        ..Default::default()
    };
    let mut s =
        State::open(&config, Store::open(&dir.join("state.db")).expect("store")).expect("state");
    register_with(&mut s, "small", 2, &[]);
    let job = submit(&mut s, "solve", "requires = [\"bigmem\"]", false, &[]);
    assert_eq!(
        reason(&s, job),
        "no live node can run `solve` yet: waiting for an allocation of queue `fat` \
         (`hetsched allocations`)"
    );
    assert!(
        !blocked(&s, job),
        "the server allocates: nobody needs to act"
    );
    // Paused, the queue allocates nothing: an operator must act.
    s.pause_allocations("fat", true).expect("pause");
    assert_eq!(
        reason(&s, job),
        "no live node can run `solve`, and queue `fat`, whose agents could, is paused \
         (`hetsched allocations --resume fat`)"
    );
    assert!(blocked(&s, job));
    assert!(s.pause_allocations("thin", true).is_err(), "no such queue");
    s.pause_allocations("fat", false).expect("resume");
    assert!(!blocked(&s, job));
    assert_eq!(s.allocation_demand(&config.allocation[0], None), (4, 0));
    // The demand counts cores: two more tasks of three cores each ask for six.
    s.on_submit(Submission {
        origin: "wide.toml".into(),
        text: "[[application]]\nname = \"wide\"\ntasks = 2\nrequires = [\"bigmem\"]\n\
               [application.cpu]\ncommand = \"true\"\ncores = 3\n"
            .into(),
        workdir: "/".into(),
        ..Default::default()
    })
    .expect("a queue serves it");
    assert_eq!(s.allocation_demand(&config.allocation[0], None), (10, 0));
    // Two tasks of one core and 3 GiB.
    s.on_submit(Submission {
        origin: "fat.toml".into(),
        text: "[[application]]\nname = \"fat\"\ntasks = 2\nrequires = [\"bigmem\"]\n\
               [application.cpu]\ncommand = \"true\"\nmemory = \"3GiB\"\n"
            .into(),
        workdir: "/".into(),
        ..Default::default()
    })
    .expect("a queue serves it");
    assert_eq!(s.allocation_demand(&config.allocation[0], None), (12, 0));
    // Once the queue's agents are known to have 2 cores and 4 GiB, the 3-core tasks are not
    // work for it (none of its agents could run one), and a 3 GiB task holds 3/4 of a node's
    // memory: 2 of its cores.
    use hetsched_core::model::Resources;
    const GIB: u64 = 1 << 30;
    let demand = |m| s.allocation_demand(&config.allocation[0], Some(Resources::new(2, m, 0)));
    assert_eq!(demand(4 * GIB), (4 + 2 * 2, 0));
    // 2 GiB agents: the 3 GiB tasks do not fit either.
    assert_eq!(demand(2 * GIB), (4, 0));
    // 64 GiB agents: each counts its one core.
    assert_eq!(demand(64 * GIB), (4 + 2, 0));
    let refused = s.on_submit(Submission {
        origin: "job.toml".into(),
        text: "[[application]]\nname = \"x\"\ntasks = 1\nrequires = [\"ssd\"]\n\
               [application.cpu]\ncommand = \"true\"\n"
            .into(),
        workdir: "/".into(),
        ..Default::default()
    });
    assert!(refused.is_err(), "no node nor queue offers ssd");
    let long = s
        .on_submit(Submission {
            origin: "long.toml".into(),
            text: "[[application]]\nname = \"long\"\ntasks = 1\nrequires = [\"bigmem\"]\n\
                   [application.cpu]\ncommand = \"true\"\ntime_limit = \"2h\"\n"
                .into(),
            workdir: "/".into(),
            ..Default::default()
        })
        .map(|j| j.job_id);
    // Longer than the queue's allocations: no queue serves it, and no live node has `bigmem`.
    assert!(long.is_err(), "{long:?}");
    // A node of the queue's attributes: its free cores count against the demand, but after a
    // restart only once it beats again (its agent may have left while the server was down;
    // counted before, it held allocation back for RESTART_GRACE × the dead timeout).
    register_with(&mut s, "fat-1", 4, &["bigmem"]);
    assert_eq!(s.allocation_demand(&config.allocation[0], None).1, 4);
    drop(s);
    let s =
        State::open(&config, Store::open(&dir.join("state.db")).expect("store")).expect("state");
    assert_eq!(s.allocation_demand(&config.allocation[0], None).1, 0);
}

/// A running job held (`hetsched hold`) runs on while tasks of it run (`running (held)` in
/// listings); once they end, only held tasks are left and nothing runs: it reads as a job held
/// at submission does (`pending`, held: `held`), in its listing and in the users' counts, and
/// goes back to `running` on release.
#[test]
fn a_started_job_whose_running_tasks_ended_while_held_reads_as_held_until_released() {
    let dir = common::scratch("pending-reason", "held-after-start");
    let mut s = open(&dir);
    let n = register_with(&mut s, "n", 2, &[]);
    let job = submit(&mut s, "a", "", false, &[]);
    let at_submission = submit(&mut s, "b", "", true, &[]);
    let first = beat(&mut s, n, &[]);
    assert_eq!(first.len(), 2, "two of its four tasks start");
    s.hold(job, true).expect("hold");
    let info = s.job(job).expect("job");
    assert_eq!(
        (info.state.as_str(), info.held),
        ("running", true),
        "tasks of it run"
    );
    // Its two running tasks end: two tasks are left, both held.
    let done: Vec<(u64, u32, bool)> = first.iter().map(|&(t, a)| (t, a, true)).collect();
    let next = s
        .heartbeat(heartbeat_request(n, &[], &done))
        .expect("beat")
        .assignments;
    assert!(next.is_empty(), "held tasks do not start: {next:?}");
    let held = s.job(at_submission).expect("job");
    let info = s.job(job).expect("job");
    assert_eq!(info.counts.as_ref().map(|c| c.running), Some(0));
    assert_eq!(
        (info.state.as_str(), info.held),
        (held.state.as_str(), held.held),
        "as a job held at submission: {info:?}"
    );
    assert_eq!((info.state.as_str(), info.held), ("pending", true));
    let listed = s.list_jobs(0, 10);
    let row = listed.jobs.iter().find(|j| j.id == job).expect("listed");
    assert_eq!(row.state, "pending", "the listing says so too");
    // Released: it runs again.
    s.hold(job, false).expect("release");
    let info = s.job(job).expect("job");
    assert_eq!((info.state.as_str(), info.held), ("running", false));
    assert_eq!(beat(&mut s, n, &[]).len(), 2, "its last two tasks start");
}
