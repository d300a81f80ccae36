//! Automatic allocation queues (`[[allocation]]`, docs/runtime.md "Automatic allocation") as
//! the state sees them: which work a queue's agents could run, so which jobs wait for an
//! allocation, which are refused, and what a queue allocates for.

use crate::common;

use common::register;
use hetsched_server::ServerConfig;
use hetsched_server::allocation::QueueConfig;
use hetsched_server::convert::Wire;
use hetsched_server::state::State;
use hetsched_server::store::Store;

/// A job of one task of `cores` cores named `app`, with `time_limit`.
fn job(app: &str, cores: u32, time_limit: &str) -> String {
    format!(
        "[[application]]\nname = \"{app}\"\ntasks = 1\n[application.cpu]\ncommand = \"true\"\n\
         cores = {cores}\ntime_limit = \"{time_limit}\"\n"
    )
}

/// A 10-minute queue's agents have 8m 20s for tasks (`time_limit` less the minute `--time-limit
/// auto` keeps for the agent's last report, the 10 s kill grace and 30 s for the agent to
/// start): a task of 10 minutes fits the queue's `time_limit` but no agent of it would take it.
/// It brings no allocation (each brought one whose agent idled out, then the next, forever,
/// the job saying it waited for an allocation), and waits blocked, or is refused when the live
/// nodes cannot run it either; a task within the 8m 20s waits for an allocation.
#[test]
fn a_task_longer_than_an_allocation_leaves_its_agents_brings_no_allocation() {
    let dir = common::scratch("allocation-queues", "time-for-tasks");
    let queue: QueueConfig =
        toml::from_str("name = \"q1\"\nmanager = \"slurm\"\ntime_limit = \"10m\"\n").expect("q");
    assert_eq!(queue.time_for_tasks().as_secs(), 8 * 60 + 20);
    let config = ServerConfig {
        data_dir: dir.to_path_buf(),
        allocation: vec![queue.clone()],
        ..Default::default()
    };
    let mut s =
        State::open(&config, Store::open(&dir.join("state.db")).expect("store")).expect("state");
    // No live node: accepted, but no queue serves it.
    let long = s
        .submit("long.toml", &job("long", 1, "10m"), "/")
        .expect("accepted while no node is live")
        .job_id;
    assert_eq!(s.allocation_demand(&queue, None), (0, 0), "no allocation");
    let info = s.job(long).expect("job");
    assert!(info.blocked, "{}", info.pending_reason);
    assert!(
        !info.pending_reason.contains("waiting for an allocation"),
        "{}",
        info.pending_reason
    );
    // It says how long the queue's agents have.
    assert!(
        info.pending_reason.contains(
            "`long`'s time limit (10m) is longer than queue `q1`'s allocations leave their \
             agents for tasks (at most 8m 20s:"
        ),
        "{}",
        info.pending_reason
    );
    // Within the time: work for the queue.
    let short = s
        .submit("short.toml", &job("short", 1, "8m 20s"), "/")
        .expect("accepted")
        .job_id;
    assert_eq!(s.allocation_demand(&queue, None), (1, 0));
    let info = s.job(short).expect("job");
    assert!(!info.blocked, "{}", info.pending_reason);
    assert_eq!(
        info.pending_reason,
        "no live node can run `short` yet: waiting for an allocation of queue `q1` \
         (`hetsched allocations`)"
    );
    // A live node too small for either: the long one is refused, the short one waits.
    register(&mut s, "small", 1);
    let e = s
        .submit("long.toml", &job("long2", 2, "10m"), "/")
        .expect_err("no live node nor queue could run it");
    assert!(
        e.to_string()
            .contains("queue `q1`'s allocations leave their agents for tasks"),
        "{e}"
    );
    assert!(s.submit("short.toml", &job("short2", 2, "8m"), "/").is_ok());
    assert_eq!(s.allocation_demand(&queue, None), (1 + 2, 1));
}
