//! Mangled submissions through the whole server state: a job file, divisible load or workflow
//! with hostile values, dropped or doubled lines and stray bytes is submitted; either it is
//! refused with an error that names the file, or it is stored — and then dispatched to two
//! agents, run to its end or to the beats' budget, and found again, unchanged, by a server
//! restarted from the same store. Nothing panics on the way, and nothing accepted is lost.
//!
//! And a random operator's day: submissions (arrays, throttles, two applications), heartbeats
//! that report successes and failures, cancels of jobs and of some tasks, holds, releases,
//! resubmissions, purges and drains, with server restarts between them — after each restart
//! every job and every task reads exactly as it did before. The agents' tasks end or run on
//! from beat to beat (so restarts find work running), and they kill what they are told to. On
//! days with priority preemption and a one-core queue on each node, what a reply preempts is
//! always of a lower priority than what it starts. (These days found a restart that dropped a
//! queued workflow instance from its owner's usage.)

use crate::common::{self, heartbeat_request, register_with};
use hetsched_core::testkit::mangle::mangle;
use hetsched_proto as pb;
use hetsched_server::ServerConfig;
use hetsched_server::convert::Wire;
use hetsched_server::state::{CapChange, State};
use hetsched_server::store::Store;
use proptest::prelude::*;
use std::collections::BTreeMap;
use std::path::Path;

const SEEDS: &[&str] = &[
    r#"
[[application]]
name = "hello"
tasks = 4
indices = "1-7:2"
max_running = 2
retries = 1
priority = 5
requires = ["ssd"]
[application.cpu]
command = ["echo", "{index}"]
cores = 1
memory = "64MiB"
time_limit = "10s"
kill_grace = "1s"
env = { A = "1" }
"#,
    r#"
[[application]]
name = "mixed"
tasks = 3
[application.cpu]
command = "true"
cores = 2
[application.gpu]
command = "true"
gpus = 1
kind = "k80"
"#,
    r#"
[[divisible]]
name = "product"
units = 480
command = ["hetsched", "matrows", "--start", "{start}", "--end", "{end}"]
algo = "umrlm"
memory_per_unit = "1MiB"
retries = 2
time_limit = "60s"
"#,
    r#"balancer = "centralised"
[[task]]
name = "A"
instances = "1..=3"
processes = 2
cost = "1s"
outputs = ["m"]
command = "echo {index} > {output:m}"
[[task]]
name = "B"
instances = "1..=3"
cost = "1s"
inputs = ["m"]
command = ["cat", "{input:m}"]
"#,
];

fn open(dir: &Path) -> State {
    let config = ServerConfig {
        data_dir: dir.to_path_buf(),
        ..Default::default()
    };
    State::open(&config, Store::open(&dir.join("state.db")).expect("store")).expect("state")
}

/// A server whose retention rule keeps the two newest finished jobs, with fair share between
/// users on (its usage is stored with the first beat's commit, which a full disk refuses).
/// With `preemption`, priority preemption is on and each node is lent a core for a queue
/// (`prefetch = 1`), so queued tasks and the tasks that displace others meet.
fn open_retaining(dir: &Path, preemption: bool) -> State {
    let config = ServerConfig {
        data_dir: dir.to_path_buf(),
        preemption: if preemption {
            hetsched_server::config::PreemptionMode::Requeue
        } else {
            hetsched_server::config::PreemptionMode::Off
        },
        prefetch: if preemption {
            hetsched_server::state::prefetch::Setting::Cores(1)
        } else {
            hetsched_server::state::prefetch::Setting::default()
        },
        retention: Some(hetsched_server::config::RetentionConfig {
            keep_finished: None,
            keep_jobs: Some(2),
        }),
        fair_share: Some(hetsched_server::config::FairShareConfig {
            half_life: hetsched_core::input::Duration(3600 * 1_000_000_000),
        }),
        ..Default::default()
    };
    State::open(&config, Store::open(&dir.join("state.db")).expect("store")).expect("state")
}

/// Each job's id, state and task count, as a listing shows them.
fn listing(s: &State) -> Vec<(u64, String, u64)> {
    s.jobs()
        .jobs
        .into_iter()
        .map(|j| (j.id, j.state, j.tasks))
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn a_mangled_submission_is_refused_by_name_or_runs_and_survives_a_restart(
        seed in 0..SEEDS.len(),
        draws in prop::collection::vec(any::<(u8, usize, usize)>(), 1..5),
    ) {
        let dir = common::scratch("fuzz", "submission");
        let text = mangle(SEEDS[seed], &draws);
        let mut s = open(&dir);
        let nodes = [
            register_with(&mut s, "a", 4, &["ssd"]),
            register_with(&mut s, "b", 2, &[]),
        ];
        match s.submit("job.toml", &text, "/") {
            Err(e) => {
                let shown = e.to_string();
                prop_assert!(shown.contains("job.toml"), "the refusal names no file: {shown}\n{text}");
                prop_assert_eq!(s.job_count(), 0);
            }
            Ok(reply) => {
                prop_assert_eq!(s.job_count(), 1, "{}", text);
                // Every node runs what it is given and reports it done on its next beat.
                let mut running: Vec<Vec<(u64, u32)>> = vec![Vec::new(); nodes.len()];
                for _ in 0..12 {
                    for (i, &n) in nodes.iter().enumerate() {
                        let done: Vec<(u64, u32, bool)> =
                            running[i].iter().map(|&(t, a)| (t, a, true)).collect();
                        let r = s.heartbeat(heartbeat_request(n, &[], &done));
                        let r = r.map_err(|e| TestCaseError::fail(format!("heartbeat: {e}\n{text}")))?;
                        running[i] = r.assignments.iter().map(|a| (a.task_id, a.attempt)).collect();
                    }
                }
                let before = listing(&s);
                prop_assert_eq!(before.len(), 1);
                prop_assert_eq!(before[0].0, reply.job_id);
                drop(s);
                let s = open(&dir);
                prop_assert_eq!(listing(&s), before, "after a restart\n{}", text);
            }
        }
    }
}

const DAY_JOBS: &[&str] = &[
    "[[application]]\nname = \"plain\"\ntasks = 5\nretries = 1\n[application.cpu]\ncommand = \"true\"\n",
    "[[application]]\nname = \"array\"\nindices = \"2-11:3\"\nmax_running = 1\n[application.cpu]\ncommand = \"true\"\n",
    "[[application]]\nname = \"x\"\ntasks = 2\n[application.cpu]\ncommand = \"true\"\ncores = 2\n\
     [[application]]\nname = \"y\"\nindices = \"7,9\"\npriority = 3\n[application.cpu]\ncommand = \"true\"\n",
    "balancer = \"centralised\"\n[[task]]\nname = \"A\"\ninstances = \"1..=3\"\ncost = \"1s\"\noutputs = [\"m\"]\n\
     command = \"true\"\n[[task]]\nname = \"B\"\ninstances = 2\ncost = \"1s\"\ninputs = [\"m\"]\ncommand = \"true\"\n",
    "balancer = \"pcddb\"\n[[task]]\nname = \"A\"\ninstances = \"1..=4\"\nprocesses = 2\ncost = \"1s\"\noutputs = [\"m\"]\n\
     command = \"true\"\n[[task]]\nname = \"B\"\ninstances = \"1..=4\"\ncost = \"1s\"\ninputs = [\"m\"]\ncommand = \"true\"\n",
];

#[derive(Clone, Debug)]
enum Op {
    Submit(usize),
    /// Job file `0`, to run after job `1` completed (`2` = 0), ended however (1) or ended failed
    /// or cancelled (2).
    SubmitAfter(usize, u64, u8),
    /// Job file 0 (`plain`, indices 0-4), its tasks to run after job `0`'s tasks of the same
    /// index (`--after-corr`; refused unless that job has those indices).
    SubmitAfterCorr(u64),
    /// Node `0` reports every task it runs ended (`1`: bit k = the k-th failed) and takes more.
    Beat(usize, u8),
    Cancel(u64),
    /// Cancels indices `1` of job `0`.
    CancelTasks(u64, &'static str),
    Hold(u64, bool),
    /// `hetsched update` of job `0`: priority `1`, time limit `2` (ms; 0: none).
    Update(u64, i32, u64),
    /// `hetsched update` of job `0`: one task's cores `1`, memory `2` (MiB) and GPU-variant
    /// devices `3` (refused for a job without a GPU variant); tasks running keep theirs.
    UpdateRequest(u64, u32, u64, Option<u32>),
    /// `hetsched update` of job `0`: the attributes its tasks require, `1`.
    UpdateRequires(u64, &'static str),
    /// `hetsched update --begin` of job `0`: `1` ms from now (0: now, its tasks queue at once;
    /// saturating at `u64::MAX`: the far edges too).
    UpdateBegin(u64, u64),
    Resubmit(u64),
    Purge(u64),
    Drain(usize, bool),
    /// Job file `0` submitted by user `alice`.
    SubmitAs(usize),
    /// `hetsched user limit alice --max-cores N --max-memory S --max-gpus M` (0: no cap on one;
    /// absent: unchanged).
    Limit(CapChange),
    /// Finished jobs' task rows leave memory.
    Evict,
    /// The retention rule (keep the two newest finished jobs) purges the others.
    Retain,
    /// The store's disk fills up (`true`) or has room again.
    DiskFull(bool),
    /// Long enough for the paused server's next probe write.
    WaitForProbe,
    Restart,
}

/// The day's operations; with `disk`, the disk also fills up and empties.
fn op(disk: bool) -> BoxedStrategy<Op> {
    let day = prop_oneof![
        2 => (0..DAY_JOBS.len()).prop_map(Op::Submit),
        // Batch jobs and workflows after any job (a workflow waits before it starts).
        2 => (0..DAY_JOBS.len(), 1..5u64, 0..3u8).prop_map(|(k, j, how)| Op::SubmitAfter(k, j, how)),
        1 => (1..5u64).prop_map(Op::SubmitAfterCorr),
        6 => (0..2usize, any::<u8>()).prop_map(|(n, f)| Op::Beat(n, f)),
        1 => (1..5u64).prop_map(Op::Cancel),
        1 => (1..5u64, prop::sample::select(vec!["0", "1-3", "5,8", "7", "2-11:3"]))
            .prop_map(|(j, i)| Op::CancelTasks(j, i)),
        1 => (1..5u64, any::<bool>()).prop_map(|(j, h)| Op::Hold(j, h)),
        1 => (
            1..5u64,
            prop_oneof![4 => -2..3i32, 1 => prop::sample::select(vec![i32::MIN, i32::MAX])],
            // The edges too: refused or taken, never an overflow.
            prop::sample::select(vec![0u64, 1_000, 3_600_000, 1, u64::MAX / 2, u64::MAX]),
        )
            .prop_map(|(j, p, t)| Op::Update(j, p, t)),
        2 => (1..5u64, 1..4u32, prop::sample::select(vec![0u64, 64, 512]), prop::option::weighted(0.2, 1..3u32))
            .prop_map(|(j, c, m, g)| Op::UpdateRequest(j, c, m, g)),
        1 => (1..5u64, prop::sample::select(vec!["", "bigmem", "ssd,bigmem"]))
            .prop_map(|(j, r)| Op::UpdateRequires(j, r)),
        1 => (1..5u64, prop::sample::select(vec![0u64, 3_600_000, u64::MAX / 2, u64::MAX]))
            .prop_map(|(j, ahead)| Op::UpdateBegin(j, ahead)),
        1 => (1..5u64).prop_map(Op::Resubmit),
        1 => (1..5u64).prop_map(Op::Purge),
        1 => (0..2usize, any::<bool>()).prop_map(|(n, d)| Op::Drain(n, d)),
        2 => (0..DAY_JOBS.len()).prop_map(Op::SubmitAs),
        1 => (
            proptest::option::of(0..4u32),
            proptest::option::of(prop_oneof![Just(0u64), Just(64 << 20), Just(128 << 20)]),
            proptest::option::of(0..3u32),
        )
            .prop_map(|(max_cores, max_memory_bytes, max_gpus)| Op::Limit(CapChange {
                max_cores,
                max_memory_bytes,
                max_gpus,
            })),
        1 => Just(Op::Evict),
        1 => Just(Op::Retain),
        2 => Just(Op::Restart),
    ];
    if !disk {
        return day.boxed();
    }
    prop_oneof![
        20 => day,
        2 => any::<bool>().prop_map(Op::DiskFull),
        1 => Just(Op::WaitForProbe),
    ]
    .boxed()
}

/// Every job and every task as listings show them.
fn everything(s: &State) -> Vec<String> {
    let mut out = Vec::new();
    // What is free on each node: every running task's request is booked as it was given,
    // across updates of its application's request.
    for n in s.list_nodes() {
        out.push(format!(
            "node {} free cores {} free gpus {} running {} drained {} {:?} {}",
            n.name,
            n.free_cores,
            n.free_gpus,
            n.running,
            n.drained,
            n.drain_note.reason,
            n.drain_note.since_ms
        ));
    }
    // What a user's running tasks hold against its cap, rebuilt after a restart.
    out.push(format!(
        "alice holds {:?}, cap {:?}",
        s.user_held("alice"),
        s.list_users().first().map(|u| u.cap)
    ));
    for j in s.jobs().jobs {
        out.push(format!(
            "job {} {} {} {:?} held={} begin={} deferred={} after {:?} {:?} {:?} {:?} waiting={}",
            j.id,
            j.owner,
            j.state,
            // Which running tasks wait in their agent's queue is what the agents said; a
            // restarted server guesses it (the work beyond each node's free cores) until they
            // beat again, so it is left out.
            j.counts.map(|c| pb::TaskCounts { queued: 0, ..c }),
            j.held,
            j.begin_ms,
            j.deferred,
            j.after,
            j.after_any,
            j.after_notok,
            j.after_corr,
            j.waiting
        ));
        // Its applications' settings, as submitted or updated.
        if let Ok(job) = s.job(j.id) {
            for a in job.apps {
                out.push(format!(
                    "  app {} priority {} max_running {} time limits {} {} cpu {} {} gpu {} {} {} \
                     requires {:?}",
                    a.name,
                    a.priority,
                    a.max_running,
                    a.cpu_time_limit_ms,
                    a.gpu_time_limit_ms,
                    a.cpu_cores,
                    a.cpu_memory_bytes,
                    a.gpu_cores,
                    a.gpu_memory_bytes,
                    a.gpus,
                    a.requires
                ));
            }
        }
        if let Ok(t) = s.tasks(j.id) {
            for mut t in t.tasks {
                // Where a ready workflow instance waits is the balancer's decision of the moment,
                // kept in memory and made again at a restart (listed with a note after its
                // message): not part of what must read the same.
                if t.state == "ready" {
                    t.node.clear();
                    let kept = match t.message.split_once("placed on ") {
                        Some((before, _)) => before.trim_end_matches("; ").to_string(),
                        None => t.message.clone(),
                    };
                    t.message = kept;
                }
                out.push(format!(
                    "  task {} {}:{} {} attempt {} node {:?} failed {} preempted {} {:?}",
                    t.id,
                    t.app,
                    t.index,
                    t.state,
                    t.attempt,
                    t.node,
                    t.failed_attempts,
                    t.preemptions,
                    t.message
                ));
            }
        }
    }
    out
}

/// Runs one day of `ops` (see [`op`]) against a server in `dir` (with `preemption`: see
/// [`open_retaining`]).
/// A task the day's agent holds: started, or waiting in its queue.
#[derive(Clone, Copy, Debug)]
struct Held {
    task: u64,
    attempt: u32,
    /// Cores it takes (0: not said, it starts at once).
    cores: u32,
    prefetched: bool,
    started: bool,
}

/// Starts the queued tasks of `held` in order while they fit in the node's `cores` (a task
/// larger than the node once nothing else runs), as a real agent does.
fn start_what_fits(held: &mut [Held], cores: u32) {
    let mut busy: u32 = held.iter().filter(|h| h.started).map(|h| h.cores).sum();
    for h in held.iter_mut().filter(|h| !h.started) {
        if h.cores > 0 && busy > 0 && busy + h.cores > cores {
            break;
        }
        h.started = true;
        busy += h.cores;
    }
}

fn day(dir: &Path, ops: Vec<Op>, preemption: bool) -> Result<(), TestCaseError> {
    let mut s = open_retaining(dir, preemption);
    // Whether the disk was full since the last restart: a refused event is then expected.
    let mut disk_was_full = false;
    s.on_add_user("alice", false)
        .map_err(|e| TestCaseError::fail(format!("user: {e}")))?;
    // Alice's cap on cores (0: none), as last set.
    let mut cap = hetsched_core::Resources::default();
    let nodes = [
        register_with(&mut s, "a", 3, &[]),
        register_with(&mut s, "b", 2, &[]),
    ];
    // What each agent holds: its tasks, started or queued, as a real agent's.
    let mut running: Vec<Vec<Held>> = vec![Vec::new(); nodes.len()];
    let node_cores = [3, 2];
    for op in ops {
        match op {
            Op::Submit(k) => {
                if let Err(e) = s.submit("day.toml", DAY_JOBS[k], "/") {
                    prop_assert!(disk_was_full, "a valid job refused: {e}");
                }
            }
            Op::DiskFull(full) => {
                s.simulate_full_disk(full);
                disk_was_full |= full;
            }
            Op::SubmitAs(k) => {
                let sub = hetsched_server::state::types::Submission {
                    origin: "alice.toml".into(),
                    text: DAY_JOBS[k].into(),
                    workdir: "/".into(),
                    ..Default::default()
                };
                if let Err(e) = s.on_submit_as(sub, "alice") {
                    // A job with a task larger than alice's cap alone is refused at
                    // submission (it could never start), as it should be.
                    let past_cap = e.to_string().contains("may hold at once");
                    prop_assert!(disk_was_full || past_cap, "alice's valid job refused: {e}");
                }
            }
            Op::Limit(change) => match s.on_limit_user("alice", change) {
                Ok(()) => cap = change.applied_to(cap),
                Err(e) => prop_assert!(disk_was_full || change.is_empty(), "limit refused: {e}"),
            },
            Op::WaitForProbe => std::thread::sleep(hetsched_server::state::PROBE_INTERVAL),
            Op::SubmitAfter(k, j, how) => {
                // Refused when job `j` does not exist (or was purged); else stored.
                let named = |want: u8| if how == want { vec![j] } else { Vec::new() };
                let _ = s.on_submit(hetsched_server::state::types::Submission {
                    origin: "after.toml".into(),
                    text: DAY_JOBS[k].into(),
                    workdir: "/".into(),
                    after: named(0),
                    after_any: named(1),
                    after_notok: named(2),
                    ..Default::default()
                });
            }
            Op::SubmitAfterCorr(j) => {
                let _ = s.on_submit(hetsched_server::state::types::Submission {
                    origin: "corr.toml".into(),
                    text: DAY_JOBS[0].into(),
                    workdir: "/".into(),
                    after_corr: vec![j],
                    ..Default::default()
                });
            }
            Op::Beat(n, outcomes) => {
                // Two bits per started task (of the first four, then again): it succeeded,
                // failed, or runs on into the next beat. As a core frees, the agent starts what
                // its queue holds, and says which tasks still wait there.
                let outcome = |k: usize| outcomes >> (k % 4 * 2) & 3;
                let mut done: Vec<(u64, u32, bool)> = Vec::new();
                let mut still: Vec<Held> = Vec::new();
                for h in &running[n] {
                    match outcome(still.len() + done.len()) {
                        0 if h.started => done.push((h.task, h.attempt, true)),
                        1 if h.started => done.push((h.task, h.attempt, false)),
                        _ => still.push(*h),
                    }
                }
                start_what_fits(&mut still, node_cores[n]);
                let pairs: Vec<(u64, u32)> = still.iter().map(|h| (h.task, h.attempt)).collect();
                let mut req = heartbeat_request(nodes[n], &pairs, &done);
                for (rt, h) in req.running.iter_mut().zip(&still) {
                    rt.queued = !h.started;
                }
                let r = match s.heartbeat(req) {
                    Ok(r) => r,
                    // The store refused the beat: the agent keeps its results and retries.
                    Err(e) if disk_was_full => {
                        let _ = e;
                        continue;
                    }
                    Err(e) => return Err(TestCaseError::fail(format!("heartbeat: {e}"))),
                };
                // The agent kills what it is told to, and takes what it is sent (a new attempt
                // of a task replaces the old one): what is not `prefetched` goes ahead of the
                // prefetched tasks in its queue; then it starts what fits.
                still.retain(|h| {
                    !r.kill
                        .iter()
                        .any(|k| k.task_id == h.task && k.attempt == h.attempt)
                        && !r.assignments.iter().any(|x| x.task_id == h.task)
                });
                for a in &r.assignments {
                    let h = Held {
                        task: a.task_id,
                        attempt: a.attempt,
                        cores: a.cores,
                        prefetched: a.prefetched,
                        started: false,
                    };
                    let at = if a.prefetched {
                        still.len()
                    } else {
                        still
                            .iter()
                            .position(|q| !q.started && q.prefetched)
                            .unwrap_or(still.len())
                    };
                    still.insert(at, h);
                }
                // Listings say which of the node's running tasks wait in its agent's queue:
                // those it reported queued, and those this reply sent `prefetched`.
                let listed: BTreeMap<u64, (String, bool)> = s
                    .jobs()
                    .jobs
                    .iter()
                    .flat_map(|j| s.tasks(j.id).map(|t| t.tasks).unwrap_or_default())
                    .map(|t| (t.id, (t.state, t.queued)))
                    .collect();
                for h in &still {
                    let sent = r.assignments.iter().find(|a| a.task_id == h.task);
                    let want = sent.map_or(!h.started, |a| a.prefetched);
                    prop_assert_eq!(
                        listed.get(&h.task).cloned(),
                        Some(("running".to_string(), want)),
                        "task {} on node {}",
                        h.task,
                        n
                    );
                }
                start_what_fits(&mut still, node_cores[n]);
                running[n] = still;
                // Preemption stops only work of a strictly lower priority than some task the
                // same reply starts (a kill for a task cancelled, or lost, is no preemption).
                if preemption {
                    let priority_of = |task: u64| -> Option<i32> {
                        s.jobs().jobs.iter().find_map(|j| {
                            let t = s.tasks(j.id).ok()?;
                            let t = t.tasks.into_iter().find(|t| t.id == task)?;
                            let job = s.job(j.id).ok()?;
                            job.apps
                                .iter()
                                .find(|a| a.name == t.app)
                                .map(|a| a.priority)
                        })
                    };
                    let started = r
                        .assignments
                        .iter()
                        .filter_map(|a| priority_of(a.task_id))
                        .max();
                    for k in &r.kill {
                        let task = s.jobs().jobs.iter().find_map(|j| {
                            s.tasks(j.id)
                                .ok()?
                                .tasks
                                .into_iter()
                                .find(|t| t.id == k.task_id)
                        });
                        let Some(t) = task else { continue };
                        if t.state != "pending"
                            || !t
                                .message
                                .contains(&format!("attempt {} preempted", k.attempt))
                        {
                            continue;
                        }
                        let mine = priority_of(k.task_id);
                        prop_assert!(
                            started.is_some() && mine < started,
                            "task {} (priority {:?}) was preempted for work of priority {:?}",
                            k.task_id,
                            mine,
                            started
                        );
                    }
                }
                // Alice's cap: a beat that starts a batch task of hers leaves her under it in
                // every resource the task asks for (a resource it does not ask for never
                // blocks: a cap lowered below what her running tasks hold on memory still lets
                // a task without memory start); and with nothing of hers running, her tasks
                // hold no core (no drift through requeues, cancels, losses, updates and
                // restarts).
                let hers: Vec<u64> = s
                    .jobs()
                    .jobs
                    .iter()
                    .filter(|j| j.owner == "alice")
                    .map(|j| j.id)
                    .collect();
                let mut alice_running = 0;
                let mut alice_started: Vec<&pb::Assignment> = Vec::new();
                for &j in &hers {
                    let Ok(t) = s.tasks(j) else { continue };
                    // Batch tasks and workflow instances alike count against the cap.
                    alice_running += t.tasks.iter().filter(|t| t.state == "running").count();
                    alice_started.extend(
                        r.assignments
                            .iter()
                            .filter(|a| t.tasks.iter().any(|t| t.id == a.task_id)),
                    );
                }
                let asks_memory = alice_started.iter().any(|a| {
                    r.specs
                        .iter()
                        .any(|x| x.key == a.spec && x.memory_limit_bytes > 0)
                });
                let asks_gpus = alice_started.iter().any(|a| !a.devices.is_empty());
                let held = s.user_held("alice");
                prop_assert!(
                    alice_running > 0 || held == hetsched_core::Resources::default(),
                    "nothing of alice's runs, yet her tasks hold {held:?}"
                );
                if !alice_started.is_empty() {
                    let within = |used: u64, most: u64| most == 0 || used <= most;
                    prop_assert!(
                        within(held.cores.into(), cap.cores.into())
                            && (!asks_memory || within(held.memory_bytes, cap.memory_bytes))
                            && (!asks_gpus || within(held.gpus.into(), cap.gpus.into())),
                        "a beat took alice to {held:?}, over her cap of {cap:?}"
                    );
                }
                // The accounts: the owners together never held more than the live nodes
                // offered, through restarts, full disks and rollbacks (what each holds is
                // credited per event; the capacity's rows have the empty owner).
                let today = hetsched_server::accounting::day_of(hetsched_server::state::now_ns());
                let rows = s.usage_report(0, today, None).expect("accounts");
                let (mut used, mut offered) = ([0.0f64; 3], [0.0f64; 3]);
                for r in &rows {
                    let sum = if r.owner.is_empty() {
                        &mut offered
                    } else {
                        &mut used
                    };
                    sum[0] += r.held.core_seconds;
                    sum[1] += r.held.gpu_seconds;
                    sum[2] += r.held.memory_byte_seconds;
                }
                // (With a queue on each node, the tasks queued beyond a node's cores are
                // charged from when the agent starts them, not from their dispatch.)
                for k in 0..3 {
                    prop_assert!(
                        used[k] <= offered[k] * (1.0 + 1e-9) + 1e-6,
                        "the owners held {used:?}, more than the nodes offered ({offered:?})"
                    );
                }
                // `max_running = 1`: never two of the throttled application's tasks at once.
                for j in s.jobs().jobs {
                    let running = s.tasks(j.id).map_or(0, |t| {
                        t.tasks
                            .iter()
                            .filter(|t| t.app == "array" && t.state == "running")
                            .count()
                    });
                    prop_assert!(
                        running <= 1,
                        "job {}: {} throttled tasks run at once",
                        j.id,
                        running
                    );
                }
                // A task is dispatched only once the jobs its job runs after completed (or
                // ended, however). (A dependency resubmitted later does not stop what runs.)
                let jobs = s.jobs().jobs;
                // (A purged job is not listed: it had ended, and what waited on it was
                // decided then.)
                let state = |id: u64| {
                    jobs.iter()
                        .find(|j| j.id == id)
                        .map_or("purged".to_string(), |j| j.state.clone())
                };
                for a in &r.assignments {
                    let Some(j) = jobs.iter().find(|j| {
                        s.tasks(j.id)
                            .is_ok_and(|t| t.tasks.iter().any(|t| t.id == a.task_id))
                    }) else {
                        continue;
                    };
                    // Nor before its begin time (every one given here is an hour away).
                    prop_assert!(!j.deferred, "job {} ran before its begin time", j.id);
                    for d in &j.after {
                        let st = state(*d);
                        prop_assert!(
                            ["completed", "purged"].contains(&st.as_str()),
                            "job {} ran before {} completed",
                            j.id,
                            d
                        );
                    }
                    for d in &j.after_any {
                        let ended = ["completed", "failed", "cancelled", "purged"]
                            .contains(&state(*d).as_str());
                        prop_assert!(ended, "job {} ran before {} ended", j.id, d);
                    }
                    // Each task after the tasks of the same index of its `--after-corr` jobs:
                    // those succeeded (a purged job's had all ended, and were acted on then).
                    if !j.after_corr.is_empty() {
                        let index = s
                            .tasks(j.id)
                            .ok()
                            .and_then(|t| t.tasks.into_iter().find(|t| t.id == a.task_id))
                            .map(|t| t.index);
                        for d in &j.after_corr {
                            let Ok(theirs) = s.tasks(*d) else { continue };
                            for t in theirs.tasks.iter().filter(|t| Some(t.index) == index) {
                                prop_assert!(
                                    t.state == "succeeded",
                                    "job {} task {:?} ran while job {}'s task of that index is {}",
                                    j.id,
                                    index,
                                    d,
                                    t.state
                                );
                            }
                        }
                    }
                    // (A job resubmitted later does not stop what runs; a purged one failed.)
                    for d in &j.after_notok {
                        let st = state(*d);
                        prop_assert!(
                            ["failed", "cancelled", "purged", "pending", "running"]
                                .contains(&st.as_str()),
                            "job {} ran after {} {}",
                            j.id,
                            d,
                            st
                        );
                    }
                }
            }
            Op::Cancel(j) => {
                let _ = s.cancel(j);
            }
            Op::CancelTasks(j, indices) => {
                let _ = s.cancel_tasks(j, "", indices);
            }
            Op::Hold(j, h) => {
                let _ = s.hold(j, h);
            }
            Op::Update(j, priority, time_limit_ms) => {
                // Refused for a job that does not exist or ended, another kind, a full disk.
                let _ = s.update(&pb::UpdateRequest {
                    job_id: j,
                    priority: Some(priority),
                    time_limit_ms: Some(time_limit_ms),
                    ..Default::default()
                });
            }
            Op::UpdateRequest(j, cores, memory_mib, gpus) => {
                let _ = s.update(&pb::UpdateRequest {
                    job_id: j,
                    cores: Some(cores),
                    memory_bytes: Some(memory_mib << 20),
                    gpus,
                    ..Default::default()
                });
            }
            Op::UpdateRequires(j, requires) => {
                let _ = s.update(&pb::UpdateRequest {
                    job_id: j,
                    requires: Some(requires.into()),
                    ..Default::default()
                });
            }
            Op::UpdateBegin(j, ahead) => {
                let _ = s.update(&pb::UpdateRequest {
                    job_id: j,
                    begin_ms: Some(
                        (hetsched_server::state::now_ns() / 1_000_000).saturating_add(ahead),
                    ),
                    ..Default::default()
                });
            }
            Op::Resubmit(j) => {
                let _ = s.resubmit_failed(j);
            }
            Op::Purge(j) => {
                let _ = s.purge(&pb::PurgeRequest {
                    job_ids: vec![j],
                    ..Default::default()
                });
            }
            Op::Drain(n, d) => {
                let _ = s.drain_node(["a", "b"][n], d, if d { "fuzz" } else { "" });
            }
            Op::Evict => {
                s.evict_finished();
            }
            Op::Retain => {
                if let Err(e) = s.apply_retention() {
                    prop_assert!(disk_was_full, "retention: {e}");
                }
            }
            Op::Restart => {
                let before = everything(&s);
                drop(s);
                s = open_retaining(dir, preemption);
                disk_was_full = false;
                let after = everything(&s);
                prop_assert_eq!(after, before);
            }
        }
    }
    // Whatever happened, the agents' work ends and the server can be restarted once more.
    if disk_was_full {
        s.simulate_full_disk(false);
        std::thread::sleep(hetsched_server::state::PROBE_INTERVAL);
    }
    for _ in 0..30 {
        for n in 0..nodes.len() {
            let done: Vec<(u64, u32, bool)> = running[n]
                .iter()
                .map(|h| (h.task, h.attempt, true))
                .collect();
            let r = s
                .heartbeat(heartbeat_request(nodes[n], &[], &done))
                .map_err(|e| TestCaseError::fail(format!("heartbeat: {e}")))?;
            running[n] = r
                .assignments
                .iter()
                .map(|a| Held {
                    task: a.task_id,
                    attempt: a.attempt,
                    cores: a.cores,
                    prefetched: a.prefetched,
                    started: true,
                })
                .collect();
        }
    }
    let before = everything(&s);
    drop(s);
    prop_assert_eq!(everything(&open_retaining(dir, preemption)), before);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn after_any_day_of_operations_a_restarted_server_reads_as_it_did(
        ops in prop::collection::vec(op(false), 1..40),
    ) {
        day(&common::scratch("fuzz", "day"), ops, false)?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

    /// The same with priority preemption on and a queue on each node: what is preempted is
    /// always of a lower priority than what the same reply starts, and a restart reads as
    /// before, preemption counts included.
    #[test]
    fn after_a_day_with_preemption_a_restarted_server_reads_as_it_did(
        ops in prop::collection::vec(op(false), 1..40),
    ) {
        day(&common::scratch("fuzz", "preempt-day"), ops, true)?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 16, ..ProptestConfig::default() })]

    /// The same with a disk that fills up: every refused commit rolls memory back to the store
    /// and pauses dispatch until a probe write succeeds, so a restart still reads as before.
    #[test]
    fn after_a_day_with_a_full_disk_a_restarted_server_reads_as_it_did(
        ops in prop::collection::vec(op(true), 1..30),
    ) {
        day(&common::scratch("fuzz", "disk-day"), ops, false)?;
    }
}

#[derive(Clone, Debug)]
enum DivOp {
    /// units, algorithm, whether chunk outputs are gathered.
    Submit(u64, &'static str, bool),
    /// A load of `0` units to run after job `1` completed (`2` = 0), ended however (1) or ended
    /// failed or cancelled (2); with `3`, held at submission.
    SubmitAfter(u64, u64, u8, bool),
    /// `hetsched hold` (`true`) or `release` of job `0`.
    Hold(u64, bool),
    /// Agent `0` asks for a chunk.
    Ask(usize),
    /// Agent `0` reports the `1`-th chunk it holds, succeeded or not (`2`).
    Done(usize, usize, bool),
    Cancel(u64),
    /// Agent `0`'s process restarts: it holds nothing, under a new incarnation.
    AgentRestart(usize),
    /// The store's disk fills up (`true`) or has room again.
    DiskFull(bool),
    /// Long enough for the paused server's next probe write.
    WaitForProbe,
    Restart,
}

/// The divisible day's operations; with `disk`, the disk also fills up and empties.
fn div_op(disk: bool) -> BoxedStrategy<DivOp> {
    let day = prop_oneof![
        1 => (
            prop::sample::select(vec![10u64, 37, 100]),
            prop::sample::select(vec!["umr", "umrlm", "rumr", "static"]),
            any::<bool>(),
        )
            .prop_map(|(u, a, o)| DivOp::Submit(u, a, o)),
        1 => (prop::sample::select(vec![10u64, 37]), 1..5u64, 0..3u8, prop::bool::weighted(0.2))
            .prop_map(|(u, j, how, held)| DivOp::SubmitAfter(u, j, how, held)),
        1 => (1..5u64, any::<bool>()).prop_map(|(j, h)| DivOp::Hold(j, h)),
        5 => (0..2usize).prop_map(DivOp::Ask),
        5 => (0..2usize, any::<usize>(), prop::bool::weighted(0.85))
            .prop_map(|(n, k, ok)| DivOp::Done(n, k, ok)),
        1 => (1..4u64).prop_map(DivOp::Cancel),
        1 => (0..2usize).prop_map(DivOp::AgentRestart),
        2 => Just(DivOp::Restart),
    ];
    if !disk {
        return day.boxed();
    }
    prop_oneof![
        16 => day,
        2 => any::<bool>().prop_map(DivOp::DiskFull),
        1 => Just(DivOp::WaitForProbe),
    ]
    .boxed()
}

/// Every job, and every divisible job's chunks, as listings show them.
fn divisible_view(s: &State) -> Vec<String> {
    let mut out = Vec::new();
    for j in s.jobs().jobs {
        out.push(format!(
            "job {} {} {:?} after {:?} {:?} {:?} held={} waiting={}",
            j.id, j.state, j.counts, j.after, j.after_any, j.after_notok, j.held, j.waiting
        ));
        if let Some(d) = s.job(j.id).ok().and_then(|j| j.divisible) {
            out.push(format!(
                "  {} of {} units, {} rounds",
                d.units_done, d.units, d.rounds
            ));
            for c in d.chunks {
                out.push(format!(
                    "  chunk {} round {} [{}, {}) {} on {}",
                    c.chunk, c.round, c.start, c.end, c.state, c.worker
                ));
            }
        }
    }
    out
}

/// An agent of the divisible day: what it holds and its process's incarnation.
struct DivAgent {
    name: &'static str,
    incarnation: u32,
    holding: Vec<hetsched_server::jobs::divisible::ChunkOrder>,
}

impl DivAgent {
    /// Asks for a chunk. With `refusals` (the disk was full) a refused ask is retried later.
    fn ask(&mut self, s: &mut State, refusals: bool) -> Result<(), TestCaseError> {
        use hetsched_server::jobs::divisible::{ChunkKey, ChunkRequest};
        let reply = s.on_next_chunk(ChunkRequest {
            name: self.name.into(),
            memory_bytes: 1 << 30,
            incarnation: format!("{}-{}", self.name, self.incarnation),
            holding: self
                .holding
                .iter()
                .map(|o| ChunkKey {
                    job_id: o.job_id,
                    chunk: o.chunk,
                })
                .collect(),
            room: self.holding.len() < 2,
            attributes: Vec::new(),
            drained: false,
            time_left: None,
            capped: Vec::new(),
            disk_short: false,
        });
        let reply = match reply {
            Ok(r) => r,
            Err(_) if refusals => return Ok(()),
            Err(e) => {
                return Err(TestCaseError::fail(format!(
                    "{}: next chunk: {e}",
                    self.name
                )));
            }
        };
        self.holding.retain(|o| {
            !reply
                .drop
                .iter()
                .any(|k| k.job_id == o.job_id && k.chunk == o.chunk)
        });
        // A chunk of a load that waits to start goes out only once the jobs it runs after
        // ended as it needs (and never while it is held).
        for o in &reply.orders {
            let j = s
                .job(o.job_id)
                .map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert!(!j.held && !j.waiting, "a chunk of waiting job {}", j.id);
            let state = |d: u64| s.job(d).map_or(String::new(), |d| d.state);
            for &d in &j.after {
                prop_assert_eq!(
                    state(d),
                    "completed",
                    "job {} ran before {} completed",
                    j.id,
                    d
                );
            }
            for &d in &j.after_any {
                let st = state(d);
                prop_assert!(
                    ["completed", "failed", "cancelled"].contains(&st.as_str()),
                    "job {} ran before {} ended",
                    j.id,
                    d
                );
            }
            for &d in &j.after_notok {
                let st = state(d);
                prop_assert!(
                    ["failed", "cancelled"].contains(&st.as_str()),
                    "job {} ran after {} {}",
                    j.id,
                    d,
                    st
                );
            }
        }
        self.holding.extend(reply.orders);
        Ok(())
    }

    /// Reports the `k`-th chunk it holds; a success writes `START END` as its output. With
    /// `refusals` (the disk was full) a refused report is kept and made again later.
    fn done(
        &mut self,
        s: &mut State,
        dir: &Path,
        k: usize,
        ok: bool,
        refusals: bool,
    ) -> Result<(), TestCaseError> {
        use hetsched_server::jobs::divisible::ChunkResult;
        if self.holding.is_empty() {
            return Ok(());
        }
        let o = self.holding.remove(k % self.holding.len());
        let jd = dir.join("divisible").join(format!("job-{}", o.job_id));
        let tmp = jd.join(format!("chunk-{}.part", o.chunk));
        let output = ok && jd.is_dir();
        if output {
            std::fs::write(&tmp, format!("{} {}\n", o.start, o.end)).expect("output");
        }
        let result = ChunkResult {
            job_id: o.job_id,
            chunk: o.chunk,
            success: ok,
            message: if ok { String::new() } else { "exit 1".into() },
            transfer_ns: 1_000,
            compute_ns: 1_000_000 * (o.end - o.start).max(1),
            reason: None,
        };
        match s.on_chunk_done(&result, output.then_some(tmp.as_path())) {
            Ok(_) => Ok(()),
            Err(_) if refusals => {
                self.holding.push(o);
                Ok(())
            }
            Err(e) => Err(TestCaseError::fail(format!(
                "{}: chunk done: {e}",
                self.name
            ))),
        }
    }
}

/// Runs one divisible day of `ops` (see [`div_op`]) against a server in `dir`.
fn divisible_day(dir: &Path, ops: Vec<DivOp>) -> Result<(), TestCaseError> {
    let mut s = open(dir);
    let mut disk_was_full = false;
    register_with(&mut s, "a", 2, &[]);
    register_with(&mut s, "b", 2, &[]);
    let mut agents = [
        DivAgent {
            name: "a",
            incarnation: 0,
            holding: Vec::new(),
        },
        DivAgent {
            name: "b",
            incarnation: 0,
            holding: Vec::new(),
        },
    ];
    let mut gathered: Vec<(u64, u64)> = Vec::new();
    for op in ops {
        match op {
            DivOp::Submit(units, algo, concat) => {
                let text = format!(
                    "[[divisible]]\nname = \"load\"\nunits = {units}\ncommand = \"echo {{start}} {{end}}\"\n\
                         algo = \"{algo}\"\nretries = 1\n{}",
                    if concat { "output = \"concat\"\n" } else { "" }
                );
                match s.submit("load.toml", &text, "/") {
                    Ok(r) if concat => gathered.push((r.job_id, units)),
                    Ok(_) => {}
                    Err(e) => prop_assert!(disk_was_full, "a valid load refused: {e}"),
                }
            }
            DivOp::SubmitAfter(units, j, how, hold) => {
                // Refused when job `j` does not exist, or can no longer allow it.
                let named = |want: u8| if how == want { vec![j] } else { Vec::new() };
                let _ = s.on_submit(hetsched_server::state::types::Submission {
                    origin: "after.toml".into(),
                    text: format!(
                        "[[divisible]]\nname = \"after\"\nunits = {units}\n\
                         command = \"echo {{start}} {{end}}\"\n"
                    ),
                    workdir: "/".into(),
                    after: named(0),
                    after_any: named(1),
                    after_notok: named(2),
                    hold,
                    ..Default::default()
                });
            }
            DivOp::Hold(j, h) => {
                let _ = s.hold(j, h);
            }
            DivOp::Ask(n) => agents[n].ask(&mut s, disk_was_full)?,
            DivOp::Done(n, k, ok) => agents[n].done(&mut s, dir, k, ok, disk_was_full)?,
            DivOp::DiskFull(full) => {
                s.simulate_full_disk(full);
                disk_was_full |= full;
            }
            DivOp::WaitForProbe => std::thread::sleep(hetsched_server::state::PROBE_INTERVAL),
            DivOp::Cancel(j) => {
                let _ = s.cancel(j);
            }
            DivOp::AgentRestart(n) => {
                agents[n].incarnation += 1;
                agents[n].holding.clear();
            }
            DivOp::Restart => {
                let before = divisible_view(&s);
                drop(s);
                s = open(dir);
                disk_was_full = false;
                prop_assert_eq!(divisible_view(&s), before);
            }
        }
    }
    // The agents go on asking and succeeding: every load ends. A chunk out on an agent
    // that no longer holds it (its process restarted while the server was down, so no
    // incarnation tells) is lost once the reply could no longer be on its way, 2 s on.
    let all_ended = |s: &State| {
        s.jobs()
            .jobs
            .iter()
            .all(|j| ["completed", "failed", "cancelled"].contains(&j.state.as_str()))
    };
    if disk_was_full {
        s.simulate_full_disk(false);
        std::thread::sleep(hetsched_server::state::PROBE_INTERVAL);
    }
    // Held loads are released (a held one would wait for ever).
    for j in s.jobs().jobs {
        let _ = s.hold(j.id, false);
    }
    for round in 0..2 {
        if round == 1 && !all_ended(&s) {
            std::thread::sleep(std::time::Duration::from_millis(2_100));
        }
        for _ in 0..200 {
            for a in &mut agents {
                a.ask(&mut s, false)?;
                while !a.holding.is_empty() {
                    a.done(&mut s, dir, 0, true, false)?;
                }
            }
        }
    }
    for j in s.jobs().jobs {
        prop_assert!(
            ["completed", "failed", "cancelled"].contains(&j.state.as_str()),
            "job {} is still {}: {:#?}",
            j.id,
            j.state,
            divisible_view(&s)
        );
    }
    // A completed load's gathered output covers its units once, in order.
    for (id, units) in gathered {
        if s.job(id).map(|j| j.state).ok().as_deref() != Some("completed") {
            continue;
        }
        let out = std::fs::read_to_string(s.divisible_output(id).expect("output")).expect("read");
        let mut next = 0;
        for line in out.lines() {
            let (a, b) = line.split_once(' ').expect("START END");
            prop_assert_eq!(a.parse::<u64>().ok(), Some(next), "{}", out);
            next = b.parse().expect("END");
        }
        prop_assert_eq!(next, units, "{}", out);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn after_any_day_of_divisible_loads_a_restarted_server_reads_as_it_did_and_every_load_ends(
        ops in prop::collection::vec(div_op(false), 1..40),
    ) {
        divisible_day(&common::scratch("fuzz", "divisible-day"), ops)?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 16, ..ProptestConfig::default() })]

    /// The same with a disk that fills up (refused hand-outs and reports are retried).
    #[test]
    fn after_a_divisible_day_with_a_full_disk_every_load_ends_and_reads_as_before(
        ops in prop::collection::vec(div_op(true), 1..30),
    ) {
        divisible_day(&common::scratch("fuzz", "divisible-disk-day"), ops)?;
    }
}

const DAY_TOPOLOGY: &str = r#"
[[component]]
name = "numbers"
kind = "spout"
parallelism = 2
cpu = 50.0
builtin = "sequence-spout"

[[component]]
name = "keep"
kind = "bolt"
parallelism = 3
cpu = 40.0
builtin = "filter"

[[stream]]
from = "numbers"
to = "keep"
grouping = "shuffle"
rate = 10.0
"#;

/// A topology submission's numbers: usually what `topology submit` sends by default, sometimes
/// the edges of each field's type (0, 1, large, the maximum; for the ratios also negative, NaN
/// and infinite). The server refuses or takes each, never panics, and reads the same after a
/// restart; a `u64::MAX` interval once overflowed where every submission sent 0.
#[derive(Clone, Debug)]
struct Knobs {
    workers: u32,
    interval_ms: u64,
    gain_threshold: f64,
    max_utilisation: f64,
}

fn knobs() -> BoxedStrategy<Knobs> {
    let usual = Knobs {
        workers: 0,
        interval_ms: 0,
        gain_threshold: 0.0,
        max_utilisation: 0.9,
    };
    let edges = (
        prop::sample::select(vec![0u32, 1, 2, 1 << 20, u32::MAX]),
        prop::sample::select(vec![
            0u64,
            1,
            1_000,
            u64::MAX / 1_000_000,
            u64::MAX / 2,
            u64::MAX - 1,
            u64::MAX,
        ]),
        prop::sample::select(vec![
            0.0f64,
            0.05,
            1.0,
            -1.0,
            f64::MAX,
            f64::INFINITY,
            f64::NAN,
        ]),
        prop::sample::select(vec![
            0.9f64,
            1.0,
            0.0,
            1e-300,
            -0.5,
            2.0,
            f64::INFINITY,
            f64::NAN,
        ]),
    )
        .prop_map(
            |(workers, interval_ms, gain_threshold, max_utilisation)| Knobs {
                workers,
                interval_ms,
                gain_threshold,
                max_utilisation,
            },
        );
    prop_oneof![2 => Just(usual), 1 => edges].boxed()
}

#[derive(Clone, Debug)]
enum TopoOp {
    /// Topology `t0` or `t1` under a placer, with these numbers.
    Submit(usize, &'static str, Knobs),
    /// Node `0`'s agent syncs, running what it was last told to.
    Sync(usize),
    /// Node `0`'s agent restarts: it runs no worker.
    AgentRestart(usize),
    Kill(usize),
    Rebalance(usize),
    Tick,
    /// The store's disk fills up (`true`) or has room again.
    DiskFull(bool),
    /// Long enough for the paused server's next probe write.
    WaitForProbe,
    Restart,
}

/// The stream day's operations; with `disk`, the disk also fills up and empties.
fn topo_op(disk: bool) -> BoxedStrategy<TopoOp> {
    let day = prop_oneof![
        1 => (0..2usize, prop::sample::select(vec!["one-phase", "even", "resource-aware", "two-phase"]), knobs())
            .prop_map(|(t, p, k)| TopoOp::Submit(t, p, k)),
        5 => (0..2usize).prop_map(TopoOp::Sync),
        1 => (0..2usize).prop_map(TopoOp::AgentRestart),
        1 => (0..2usize).prop_map(TopoOp::Kill),
        1 => (0..2usize).prop_map(TopoOp::Rebalance),
        1 => Just(TopoOp::Tick),
        2 => Just(TopoOp::Restart),
    ];
    if !disk {
        return day.boxed();
    }
    prop_oneof![
        12 => day,
        2 => any::<bool>().prop_map(TopoOp::DiskFull),
        1 => Just(TopoOp::WaitForProbe),
    ]
    .boxed()
}

/// Every topology as `topology list` and `show` print it, less what only the agents' next syncs
/// say (which nodes are alive, which workers run — or still drain after a move — with which
/// process and address): a restarted server learns that again from the first syncs. Nor the
/// length of the last 2-second measurement window (`window_s`): windows are measured in memory
/// and start afresh with the server, so a window that rolled just before the restart (a `Tick`
/// more than 2 s after the submission) reads 0 after it.
fn topology_view(s: &State) -> Vec<String> {
    const LIVE: &[&str] = &[
        "window_s",
        "nodes_alive",
        "workers_running",
        "workers_draining",
        "addr",
        "pid",
        "rss_bytes",
        "remote_out",
        "running_in_worker",
        "started_ns",
        "unacked",
        "expired",
        "restarts",
        "ended",
        "gave_up",
    ];
    fn strip(v: &mut serde_json::Value) {
        match v {
            serde_json::Value::Object(o) => {
                o.retain(|k, _| !LIVE.contains(&k.as_str()));
                o.values_mut().for_each(strip);
            }
            serde_json::Value::Array(a) => a.iter_mut().for_each(strip),
            _ => {}
        }
    }
    let stored = |mut v: serde_json::Value| {
        strip(&mut v);
        v.to_string()
    };
    let mut out = vec![stored(s.topology_list())];
    for t in ["t0", "t1"] {
        out.push(s.topology_show(t).map_or_else(|e| e.to_string(), stored));
    }
    out
}

/// Runs one stream day of `ops` (see [`topo_op`]) against a server in `dir`.
fn stream_day(dir: &Path, ops: Vec<TopoOp>) -> Result<(), TestCaseError> {
    use hetsched_server::jobs::topology::{TopologySubmission, WorkerSeen, WorkersSeen};
    let mut s = open(dir);
    let mut disk_was_full = false;
    let names = ["a", "b"];
    let nodes = names.map(|name| register_with(&mut s, name, 4, &[]));
    // What each agent runs: (topology, generation, worker).
    let mut runs: Vec<Vec<(String, u64, u32)>> = vec![Vec::new(); 2];
    for op in ops {
        match op {
            TopoOp::Submit(t, placer, k) => {
                // Refused or taken; either way the server goes on (the next ops sync, tick and
                // restart it).
                let _ = s.topology_submit(TopologySubmission {
                    origin: "t.toml".into(),
                    text: format!("name = \"t{t}\"\n{DAY_TOPOLOGY}"),
                    base_dir: "/".into(),
                    placer: placer.into(),
                    workers: k.workers,
                    interval_ms: k.interval_ms,
                    gain_threshold: k.gain_threshold,
                    max_utilisation: k.max_utilisation,
                });
                // Usable at once: it lists and shows what it holds.
                let _ = topology_view(&s);
            }
            TopoOp::Sync(n) => {
                let workers = runs[n]
                    .iter()
                    .map(|(t, g, w)| WorkerSeen {
                        topology: t.clone(),
                        generation: *g,
                        worker: *w,
                        addr: format!("127.0.0.1:{}", 1000 + w),
                        pid: 4000 + w,
                        report: None,
                    })
                    .collect();
                let told = match s.topology_sync(
                    WorkersSeen {
                        restated: false,
                        start_errors: Vec::new(),
                        node: names[n].into(),
                        cores: 4,
                        attributes: Vec::new(),
                        workers,
                    },
                    None,
                ) {
                    Ok(told) => told,
                    // Refused (the disk was full): the agent keeps its workers and syncs again.
                    Err(_) if disk_was_full => continue,
                    Err(e) => return Err(TestCaseError::fail(format!("sync: {e}"))),
                };
                runs[n] = told
                    .workers
                    .iter()
                    .map(|o| (o.topology.clone(), o.generation, o.worker))
                    .collect();
            }
            TopoOp::AgentRestart(n) => runs[n].clear(),
            TopoOp::Kill(t) => {
                let _ = s.topology_kill(&format!("t{t}"));
            }
            TopoOp::Rebalance(t) => {
                let _ = s.topology_rebalance(&format!("t{t}"));
            }
            TopoOp::Tick => {
                if let Err(e) = s.topology_tick() {
                    prop_assert!(disk_was_full, "tick: {e}");
                }
            }
            TopoOp::DiskFull(full) => {
                s.simulate_full_disk(full);
                disk_was_full |= full;
            }
            TopoOp::WaitForProbe => std::thread::sleep(hetsched_server::state::PROBE_INTERVAL),
            TopoOp::Restart => {
                let before = topology_view(&s);
                let held = |s: &State| nodes.map(|n| s.topology_held_cores(n));
                let held_before = held(&s);
                drop(s);
                s = open(dir);
                disk_was_full = false;
                prop_assert_eq!(topology_view(&s), before);
                // Workers outlive a server restart: until its agent syncs, a node's running
                // workers keep their cores (batch tasks do not take them meanwhile).
                let held_after = held(&s);
                for k in 0..2 {
                    prop_assert!(
                        held_after[k] >= held_before[k],
                        "node {k}: {} cores held before the restart, {} after",
                        held_before[k],
                        held_after[k]
                    );
                }
            }
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn after_any_day_of_stream_topologies_a_restarted_server_reads_as_it_did(
        ops in prop::collection::vec(topo_op(false), 1..30),
    ) {
        stream_day(&common::scratch("fuzz", "topology-day"), ops)?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 16, ..ProptestConfig::default() })]

    /// The same with a disk that fills up.
    #[test]
    fn after_a_stream_day_with_a_full_disk_a_restarted_server_reads_as_it_did(
        ops in prop::collection::vec(topo_op(true), 1..30),
    ) {
        stream_day(&common::scratch("fuzz", "topology-disk-day"), ops)?;
    }
}

/// What an agent does on a beat of the chaotic day.
#[derive(Clone, Copy, Debug)]
enum Conduct {
    /// Reports everything it runs as ended (bit k of the byte: the k-th failed).
    Honest(u8),
    /// Forgets (loses) what it runs: reports nothing of it.
    Forgets,
    /// Reports its results twice in the same beat.
    Repeats,
    /// Also reports a result for an attempt it never ran (the previous one).
    Stale,
    /// Also reports a result for a task it was never given.
    Stranger(u64),
    /// Reports what it runs as running, ending nothing.
    Busy,
}

#[derive(Clone, Debug)]
enum ChaosOp {
    Submit(usize),
    Beat(usize, Conduct),
    /// Node `0` registers again (its agent restarted), holding nothing.
    Reregister(usize),
    /// Node `0` falls silent long enough to be declared dead.
    Silence(usize),
    Restart,
}

fn chaos_op() -> impl Strategy<Value = ChaosOp> {
    let conduct = prop_oneof![
        6 => any::<u8>().prop_map(Conduct::Honest),
        1 => Just(Conduct::Forgets),
        1 => Just(Conduct::Repeats),
        1 => Just(Conduct::Stale),
        1 => (0..40u64).prop_map(Conduct::Stranger),
        2 => Just(Conduct::Busy),
    ];
    prop_oneof![
        // Not the pcddb workflow: its instances move only through the agents' balancing
        // protocol, which these agents do not play.
        2 => (0..4usize).prop_map(ChaosOp::Submit),
        10 => (0..2usize, conduct).prop_map(|(n, c)| ChaosOp::Beat(n, c)),
        1 => (0..2usize).prop_map(ChaosOp::Reregister),
        1 => (0..2usize).prop_map(ChaosOp::Silence),
        1 => Just(ChaosOp::Restart),
    ]
}

/// Each task's (id, state) over every job.
fn task_states(s: &State) -> BTreeMap<u64, String> {
    s.jobs()
        .jobs
        .iter()
        .flat_map(|j| s.tasks(j.id).map(|t| t.tasks).unwrap_or_default())
        .map(|t| (t.id, t.state))
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// Agents that lose tasks, repeat results, report attempts they never ran or tasks they
    /// were never given, restart, or fall silent: a succeeded task is never handed out again,
    /// every job's counts add up to its tasks, a restart reads as before, and once the agents
    /// behave every job ends.
    #[test]
    fn misbehaving_agents_never_make_a_task_run_after_its_success(
        ops in prop::collection::vec(chaos_op(), 1..40),
    ) {
        let dir = common::scratch("fuzz", "chaos");
        let mut s = open(&dir);
        let names = ["a", "b"];
        let mut nodes = names.map(|n| register_with(&mut s, n, 3, &[]));
        let mut running: Vec<Vec<(u64, u32)>> = vec![Vec::new(); 2];
        let beat = |s: &mut State,
                        node: u32,
                        running: &[(u64, u32)],
                        results: &[(u64, u32, bool)]|
         -> Result<pb::HeartbeatReply, TestCaseError> {
            let before = task_states(s);
            let r = s
                .heartbeat(heartbeat_request(node, running, results))
                .map_err(|e| TestCaseError::fail(format!("heartbeat: {e}")))?;
            for a in &r.assignments {
                prop_assert_ne!(
                    before.get(&a.task_id).map(String::as_str),
                    Some("succeeded"),
                    "task {} handed out again after its success",
                    a.task_id
                );
            }
            for j in s.jobs().jobs {
                let c = j.counts.unwrap_or_default();
                prop_assert_eq!(c.pending + c.running + c.succeeded + c.failed + c.cancelled, j.tasks);
            }
            Ok(r)
        };
        for op in ops {
            match op {
                ChaosOp::Submit(k) => {
                    s.submit("day.toml", DAY_JOBS[k], "/").expect("a valid job");
                }
                ChaosOp::Beat(n, conduct) => {
                    let mine = running[n].clone();
                    let ended = |fail: u8| -> Vec<(u64, u32, bool)> {
                        mine.iter().enumerate().map(|(k, &(t, a))| (t, a, fail >> (k % 8) & 1 == 0)).collect()
                    };
                    let (still, results) = match conduct {
                        Conduct::Honest(fail) => (Vec::new(), ended(fail)),
                        Conduct::Forgets => (Vec::new(), Vec::new()),
                        Conduct::Repeats => (Vec::new(), [ended(0), ended(0)].concat()),
                        Conduct::Stale => (
                            Vec::new(),
                            [ended(0), mine.iter().map(|&(t, a)| (t, a.saturating_sub(1), true)).collect()].concat(),
                        ),
                        Conduct::Stranger(t) => (Vec::new(), [ended(0), vec![(t, 1, true)]].concat()),
                        Conduct::Busy => (mine.clone(), Vec::new()),
                    };
                    let r = beat(&mut s, nodes[n], &still, &results)?;
                    let killed: Vec<u64> = r.kill.iter().map(|k| k.task_id).collect();
                    running[n] = still.into_iter().filter(|(t, _)| !killed.contains(t)).collect();
                    running[n].extend(r.assignments.iter().map(|a| (a.task_id, a.attempt)));
                }
                ChaosOp::Reregister(n) => {
                    nodes[n] = register_with(&mut s, names[n], 3, &[]);
                    running[n].clear();
                }
                ChaosOp::Silence(n) => {
                    // The other node beats on; this one is declared dead and forgets its work.
                    std::thread::sleep(std::time::Duration::from_millis(30));
                    let other = 1 - n;
                    let mine = running[other].clone();
                    let r = beat(&mut s, nodes[other], &mine, &[])?;
                    running[other].extend(r.assignments.iter().map(|a| (a.task_id, a.attempt)));
                    s.check_dead(std::time::Duration::from_millis(20))
                        .map_err(|e| TestCaseError::fail(format!("check dead: {e}")))?;
                    running[n].clear();
                    // On a loaded machine the other's beat (its commit) can itself take longer
                    // than the 20 ms, and the check declares it dead too: it then forgets its
                    // work as well, so that what the agents report next does not hang on the
                    // machine's speed (a longer timeout would slow every case down).
                    let alive = s.list_nodes().iter().any(|i| i.id == nodes[other] && i.alive);
                    if !alive {
                        running[other].clear();
                    }
                }
                ChaosOp::Restart => {
                    let before = everything(&s);
                    drop(s);
                    s = open(&dir);
                    prop_assert_eq!(everything(&s), before);
                }
            }
        }
        // The agents behave from now on: every job ends.
        for n in 0..2 {
            nodes[n] = register_with(&mut s, names[n], 3, &[]);
            running[n].clear();
        }
        for _ in 0..60 {
            for n in 0..2 {
                let done: Vec<(u64, u32, bool)> = running[n].iter().map(|&(t, a)| (t, a, true)).collect();
                let r = beat(&mut s, nodes[n], &[], &done)?;
                running[n] = r.assignments.iter().map(|a| (a.task_id, a.attempt)).collect();
            }
        }
        for j in s.jobs().jobs {
            prop_assert!(
                ["completed", "failed", "cancelled"].contains(&j.state.as_str()),
                "job {} is still {}", j.id, j.state
            );
        }
    }
}

/// A case the day above found: job 2 runs after job 1, which completed; a cancel of job 1 then
/// marked it cancelled, and the restarted server cancelled job 2 — running — for it. A job that
/// has ended now stays as it ended.
#[test]
fn cancelling_a_completed_job_leaves_it_and_the_job_that_ran_after_it_as_they_were() {
    let ops = vec![
        Op::Submit(0),
        Op::SubmitAfter(0, 1, 0),
        Op::Beat(0, 0),
        Op::Beat(1, 0),
        Op::Beat(0, 88),
        Op::Submit(0),
        Op::Beat(1, 32),
        Op::Cancel(1),
        Op::Restart,
    ];
    day(&common::scratch("fuzz", "repro"), ops, false).expect("day");
}

/// A case the full-disk day found: alice's task 0, running on node b, is cancelled; the disk
/// fills, and node a's beat is refused (memory rolled back to the store). Node b's next beat
/// must still tell its agent to kill the cancelled task.
#[test]
fn a_cancelled_running_task_is_still_killed_after_a_refused_beat_rolled_memory_back() {
    let ops = vec![
        Op::Submit(3),
        Op::SubmitAs(0),
        Op::Beat(1, 0),
        Op::CancelTasks(2, "0"),
        Op::DiskFull(true),
        Op::Beat(0, 0),
        Op::Beat(1, 79),
    ];
    day(&common::scratch("fuzz", "rollback-kill"), ops, false).expect("day");
}
