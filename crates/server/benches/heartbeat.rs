//! Cost of one heartbeat on a cluster of 1,000 nodes, with and without agents' time limits: every
//! heartbeat (and every wake-up) moves the scheduler view's clock before it places anything
//! (`Nodes::set_now`), against which the nodes' ends (`--time-limit`) are read. Each heartbeat
//! reports nothing new (no task runs, none waits), so the figure is the heartbeat path itself:
//! the node's record, the clock, an empty placement, the reply.
//!
//! The `multi_node_task_that_cannot_gather` case adds the worst a waiting multi-node task
//! (`nodes = N`, `jobs/batch/multi_node`) costs every beat: it wants all 1,000 nodes and one is
//! drained, so each beat counts the eligible nodes again. `sixteen_multi_node_tasks_that_cannot_gather`
//! has sixteen such applications: a beat tries at most four of them (the gatherer's
//! `TRIES_PER_BEAT`), so the cost is bounded, whatever waits. `after_20000_cancelled_jobs` beats
//! after 20,000 one-task jobs were submitted and cancelled: their applications stay in the view,
//! and a beat should not pay for them. `thousand_cancelled_workflows` beats beside 1,000 ended
//! workflows; `hundred_workflows_waiting_for_a_held_job` has 100 workflows `--after` a held
//! batch job and 100 batch jobs `--after-any` the first of them: what a beat pays to decide on
//! waiting jobs (`State::settle_waits`). `hundred_jobs_of_a_user_its_cap_keeps_waiting` beats
//! beside 100 jobs its user's cap on cores holds back; `hundred_jobs_of_ten_capped_users_under_fair_share`
//! spreads them over ten capped users with `[fair_share]` on: what fair share's order adds.
//! `hundred_running_workflows_with_their_own_requirements` has 100 running workflows, each
//! requiring eight attributes of its own that ten nodes have: each beat matches what the 1,000
//! nodes offer against 100 distinct vocabularies (a workflow's masks are over its own words,
//! `jobs/workflow`). `a_running_pcddb_workflow_with_every_agents_address` has one PCDDB
//! workflow running while every agent advertises its `AgentData` address: what the
//! decentralised balancer's bookkeeping adds to a beat (the address book kept clear of dead
//! nodes, the versions of the book and of the proximity clusters each reply checks).
//! `a_beat_while_every_node_owes_prefetched_cores` runs with `prefetch = 4`: every agent runs
//! four one-core tasks and holds four more queued, which it reports at each beat, so every node
//! owes four cores (`state/prefetch`): what a beat pays for the debts of nodes other than its own.

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use hetsched_core::testkit::ScratchDir;
use hetsched_proto as pb;
use hetsched_server::ServerConfig;
use hetsched_server::convert::Wire;
use hetsched_server::state::State;
use hetsched_server::state::prefetch::Setting;
use hetsched_server::state::types::{HeartbeatReport, RunningTask, Submission};
use hetsched_server::store::Store;
use std::hint::black_box;
use std::time::Duration;

const NODES: u32 = 1_000;

/// A state with `NODES` registered nodes; with `ending`, every agent has reported a time left;
/// with `fair`, `[fair_share]` is on (a one-hour half-life);
/// with `labelled`, node i has the eight attributes `w{i % 100}x0` … `w{i % 100}x7`; `prefetch`:
/// the server's `prefetch` setting.
fn state(
    dir: &std::path::Path,
    ending: bool,
    fair: bool,
    labelled: bool,
    prefetch: Setting,
) -> State {
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).expect("dir");
    let config = ServerConfig {
        data_dir: dir.to_path_buf(),
        fair_share: fair.then_some(hetsched_server::config::FairShareConfig {
            half_life: hetsched_core::input::Duration(3_600_000_000_000),
        }),
        prefetch,
        ..Default::default()
    };
    let mut s =
        State::open(&config, Store::open(&dir.join("state.db")).expect("store")).expect("state");
    for i in 0..NODES {
        let id = s
            .register(pb::RegisterRequest {
                identity: "bench".into(),
                name: format!("n{i}"),
                cores: 4,
                memory_bytes: 1 << 30,
                attributes: if labelled {
                    (0..8).map(|k| format!("w{}x{k}", i % 100)).collect()
                } else {
                    Vec::new()
                },
                ..Default::default()
            })
            .expect("register")
            .node_id;
        s.on_heartbeat(beat(id, ending)).expect("beat");
    }
    s
}

fn beat(node_id: u32, ending: bool) -> HeartbeatReport {
    HeartbeatReport {
        node_id,
        identity: "bench".into(),
        available_memory_bytes: 1 << 30,
        time_left: ending.then_some(Duration::from_secs(3600)),
        ..Default::default()
    }
}

/// Whether `case` matches the filter on the command line (`cargo bench … -- FILTER`); any case
/// when none is given.
fn selected(case: &str) -> bool {
    // Criterion's options that take a value as the next argument: that value is no filter.
    const VALUED: [&str; 14] = [
        "--save-baseline",
        "--baseline",
        "--baseline-lenient",
        "--load-baseline",
        "--sample-size",
        "--warm-up-time",
        "--measurement-time",
        "--nresamples",
        "--noise-threshold",
        "--confidence-level",
        "--significance-level",
        "--plotting-backend",
        "--output-format",
        "--profile-time",
    ];
    let mut filters = Vec::new();
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        if VALUED.contains(&a.as_str()) || a == "--color" || a == "-c" {
            args.next();
        } else if !a.starts_with('-') {
            filters.push(a);
        }
    }
    // Criterion reads a filter as a regular expression: its `|` alternatives are read here,
    // each as a substring (the cases' names hold no other pattern characters).
    filters.is_empty()
        || filters
            .iter()
            .flat_map(|f| f.split('|'))
            .any(|f| case.contains(f))
}

fn heartbeat(c: &mut Criterion) {
    let mut g = c.benchmark_group("heartbeat_on_1000_nodes");
    // Each case's data directory is in it; removed, with what is left, when the bench ends.
    let base = ScratchDir::new("bench", "heartbeat");
    for (case, ending) in [
        ("no_time_limits", false),
        ("every_agent_time_limited", true),
        ("multi_node_task_that_cannot_gather", false),
        ("sixteen_multi_node_tasks_that_cannot_gather", false),
        ("after_20000_cancelled_jobs", false),
        ("thousand_cancelled_workflows", false),
        ("hundred_workflows_waiting_for_a_held_job", false),
        ("ten_thousand_tasks_after_corr_of_a_held_job", false),
        ("hundred_jobs_of_a_user_its_cap_keeps_waiting", false),
        ("hundred_jobs_of_ten_capped_users_under_fair_share", false),
        (
            "hundred_running_workflows_with_their_own_requirements",
            false,
        ),
        ("a_running_pcddb_workflow_with_every_agents_address", false),
        ("a_beat_while_every_node_owes_prefetched_cores", false),
    ] {
        // A case's set-up (20,000 jobs for one) is paid only when criterion's filter, if
        // given, selects it.
        if !selected(case) {
            continue;
        }
        let dir = base.join(case);
        let fair = case.ends_with("under_fair_share");
        let labelled = case == "hundred_running_workflows_with_their_own_requirements";
        let owing = case == "a_beat_while_every_node_owes_prefetched_cores";
        let prefetch = if owing {
            Setting::Cores(4)
        } else {
            Setting::default()
        };
        let mut s = state(&dir, ending, fair, labelled, prefetch);
        let waiting = match case {
            "multi_node_task_that_cannot_gather" => 1,
            "sixteen_multi_node_tasks_that_cannot_gather" => 16,
            _ => 0,
        };
        for k in 0..waiting {
            let job = format!(
                "[[application]]\nname = \"mpi{k}\"\ntasks = 1\nnodes = {NODES}\n\
                 [application.cpu]\ncommand = \"true\"\n"
            );
            s.submit("job.toml", &job, "/").expect("submit");
        }
        if waiting > 0 {
            s.drain_node("n0", true, "").expect("drain");
        }
        if case == "after_20000_cancelled_jobs" {
            let job = "[[application]]\nname = \"one\"\ntasks = 1\n[application.cpu]\ncommand = \"true\"\n";
            let t = std::time::Instant::now();
            for _ in 0..20_000 {
                let id = s.submit("job.toml", job, "/").expect("submit").job_id;
                s.cancel(id).expect("cancel");
            }
            eprintln!("20,000 jobs submitted and cancelled in {:?}", t.elapsed());
        }
        if case.ends_with("workflows") || case.contains("workflows_waiting") {
            let workflow = |sub: Submission| Submission {
                origin: "wf.toml".into(),
                text: "balancer = \"centralised\"\n[[task]]\nname = \"A\"\ninstances = 4\n\
                       command = \"true\"\n"
                    .into(),
                workdir: "/".into(),
                ..sub
            };
            let batch = |sub: Submission| Submission {
                origin: "job.toml".into(),
                text: "[[application]]\nname = \"one\"\ntasks = 1\n[application.cpu]\n\
                       command = \"true\"\n"
                    .into(),
                workdir: "/".into(),
                ..sub
            };
            if case == "thousand_cancelled_workflows" {
                for _ in 0..1_000 {
                    let id = s
                        .on_submit(workflow(Submission::default()))
                        .expect("workflow");
                    s.cancel(id.job_id).expect("cancel");
                }
            } else {
                let held = s
                    .on_submit(batch(Submission {
                        hold: true,
                        ..Default::default()
                    }))
                    .expect("held job")
                    .job_id;
                let mut first = 0;
                for k in 0..100 {
                    let id = s
                        .on_submit(workflow(Submission {
                            after: vec![held],
                            ..Default::default()
                        }))
                        .expect("waiting workflow")
                        .job_id;
                    if k == 0 {
                        first = id;
                    }
                }
                for _ in 0..100 {
                    s.on_submit(batch(Submission {
                        after_any: vec![first],
                        ..Default::default()
                    }))
                    .expect("batch job after a workflow");
                }
            }
        }
        if case == "hundred_running_workflows_with_their_own_requirements" {
            // Eight words of its own per workflow, which ten nodes have: it stays running (no
            // instance reports an end) and every beat matches the nodes against it.
            let t = std::time::Instant::now();
            for w in 0..100 {
                let words: Vec<String> = (0..8).map(|k| format!("\"w{w}x{k}\"")).collect();
                let text = format!(
                    "balancer = \"centralised\"\n[[task]]\nname = \"A\"\ninstances = 4\n\
                     command = \"true\"\nrequires = [{}]\n",
                    words.join(", ")
                );
                s.on_submit(Submission {
                    origin: format!("wf{w}.toml"),
                    text,
                    workdir: "/".into(),
                    ..Default::default()
                })
                .expect("a workflow with its own requirements");
            }
            eprintln!("100 workflows submitted in {:?}", t.elapsed());
        }
        if case == "ten_thousand_tasks_after_corr_of_a_held_job" {
            // Every task of the second array waits for its correspondent in a held one.
            let array = "[[application]]\nname = \"a\"\nindices = \"0-9999\"\n\
                         [application.cpu]\ncommand = \"true\"\n";
            let held = s
                .on_submit(Submission {
                    origin: "prep.toml".into(),
                    text: array.into(),
                    workdir: "/".into(),
                    hold: true,
                    ..Default::default()
                })
                .expect("held array")
                .job_id;
            s.on_submit(Submission {
                origin: "sim.toml".into(),
                text: array.into(),
                workdir: "/".into(),
                after_corr: vec![held],
                ..Default::default()
            })
            .expect("array after it");
        }
        if case == "hundred_jobs_of_a_user_its_cap_keeps_waiting" || fair {
            // Users capped at 1 core with 100 jobs of 100 two-core tasks in all: every node has
            // room, and the caps refuse every task (`SchedulerView::fits`). One user; or, under
            // fair share, ten users of ten jobs each, so that every candidate's level reads its
            // user's standing (`SchedulerView::level`).
            let users: Vec<String> = if fair {
                (0..10).map(|u| format!("user{u}")).collect()
            } else {
                vec!["alice".to_string()]
            };
            for u in &users {
                s.on_add_user(u, false).expect("user");
                s.on_limit_user(u, hetsched_server::state::CapChange::cores(1))
                    .expect("cap");
            }
            let job = "[[application]]\nname = \"a\"\ntasks = 100\n\
                       [application.cpu]\ncommand = \"true\"\ncores = 2\n";
            for k in 0..100 {
                s.on_submit_as(
                    Submission {
                        origin: "job.toml".into(),
                        text: job.into(),
                        workdir: "/".into(),
                        ..Default::default()
                    },
                    &users[k % users.len()],
                )
                .expect("the user's job");
            }
        }
        let pcddb = case == "a_running_pcddb_workflow_with_every_agents_address";
        // Every agent advertises its address, as a real one does (the book is full), and
        // holds the address book and clusters of the last reply, as an agent that heard it
        // does: a beat carries them only when they changed.
        let mut held = (0, 0);
        let report =
            |node_id: u32, (peers_version, clusters_version): (u64, u64)| HeartbeatReport {
                advertise: if pcddb {
                    format!("10.0.{}.{}:7422", node_id / 250, node_id % 250)
                } else {
                    String::new()
                },
                peers_version,
                clusters_version,
                ..beat(node_id, ending)
            };
        let versions = |reply: &hetsched_server::state::types::HeartbeatReply, held: (u64, u64)| {
            reply
                .pcddb
                .first()
                .map_or(held, |j| (j.peers_version, j.clusters_version))
        };
        if pcddb {
            for n in 0..NODES {
                s.on_heartbeat(report(n, held)).expect("beat");
            }
            // Forty instances, which the launch node's requests offer to the agents; none
            // ends, so the workflow runs throughout.
            s.on_submit(Submission {
                origin: "wf.toml".into(),
                text: "balancer = \"pcddb\"\n[[task]]\nname = \"A\"\ninstances = 40\n\
                       command = \"true\"\n"
                    .into(),
                workdir: "/".into(),
                ..Default::default()
            })
            .expect("a PCDDB workflow");
        }
        // What each agent runs and holds queued, as its beats report it.
        let mut running: Vec<Vec<RunningTask>> = vec![Vec::new(); NODES as usize];
        if owing {
            // Eight one-core tasks per node: each beat places four on the node's free cores and
            // queues four more (prefetched), which the node then owes.
            s.on_submit(Submission {
                origin: "job.toml".into(),
                text: format!(
                    "[[application]]\nname = \"short\"\ntasks = {}\n\
                     [application.cpu]\ncommand = \"true\"\n",
                    8 * NODES
                ),
                workdir: "/".into(),
                ..Default::default()
            })
            .expect("a job of eight tasks per node");
            for n in 0..NODES {
                let reply = s.on_heartbeat(report(n, held)).expect("beat");
                running[n as usize] = reply
                    .assignments
                    .iter()
                    .map(|d| RunningTask {
                        task_id: d.task_id,
                        attempt: d.attempt,
                        queued: d.prefetched,
                        ..Default::default()
                    })
                    .collect();
                let queued = running[n as usize].iter().filter(|t| t.queued).count();
                assert_eq!(
                    (running[n as usize].len(), queued),
                    (8, 4),
                    "node {n}: four tasks run, four are queued"
                );
            }
        }
        let mut next = 0u32;
        g.bench_function(BenchmarkId::from_parameter(case), |b| {
            b.iter(|| {
                next = (next + 1) % NODES;
                let reply = s
                    .on_heartbeat(HeartbeatReport {
                        running: running[next as usize].clone(),
                        ..report(next, held)
                    })
                    .expect("beat");
                held = versions(&reply, held);
                black_box(reply)
            })
        });
        drop(s);
        let _ = std::fs::remove_dir_all(&dir);
    }
    g.finish();
}

#[allow(missing_docs)]
mod group {
    use super::*;
    criterion_group!(benches, heartbeat);
}
criterion_main!(group::benches);
