//! What the wake path of a user's cap costs each event that frees room under it (a task of
//! theirs ends, is cancelled or lost, their cap rises): `State::mark_capped_work` finds the
//! capped user's waiting work — batch applications with tasks queued, workflows with
//! instances placed and not sent, divisible jobs' held asks — and marks the nodes it fits on,
//! and the event's wake-ups are sent (`state/wakes`).
//!
//! On a cluster of 1,000 nodes, alice (capped at 4 cores) has one job of 1,000 one-core tasks
//! waiting. Beside her, `others` is either nothing, or 100 other capped users with 10,000
//! applications waiting in all (100 jobs each, held back by a cap lowered under their tasks'
//! two cores) and 1,000 workflows (10 each, cancelled: they stay listed). Each iteration is one
//! event's wake-ups: `room_freed` as an event that freed room under alice's cap sends them,
//! `no_room_freed` as one that freed none (the rest of `State::wake`, for comparison). A real
//! event's store write and placement would hide the path, so the cases call
//! `State::wake_after_cap_room` (hidden from the docs) instead.

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use hetsched_core::testkit::ScratchDir;
use hetsched_proto as pb;
use hetsched_server::ServerConfig;
use hetsched_server::convert::Wire;
use hetsched_server::state::types::{HeartbeatReport, Submission};
use hetsched_server::state::{CapChange, State};
use hetsched_server::store::Store;
use std::hint::black_box;

const NODES: u32 = 1_000;
/// Other users, each with `JOBS_EACH` waiting one-application jobs and `WORKFLOWS_EACH`
/// workflows.
const USERS: u32 = 100;
const JOBS_EACH: u32 = 100;
const WORKFLOWS_EACH: u32 = 10;

fn submission(origin: &str, text: String) -> Submission {
    Submission {
        origin: origin.into(),
        text,
        workdir: "/".into(),
        ..Default::default()
    }
}

/// A state with `NODES` nodes of 4 cores, alice's waiting job, and with `others` the other
/// users' waiting applications and workflows.
fn state(dir: &std::path::Path, others: bool) -> State {
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).expect("dir");
    let config = ServerConfig {
        data_dir: dir.to_path_buf(),
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
                ..Default::default()
            })
            .expect("register")
            .node_id;
        s.on_heartbeat(HeartbeatReport {
            node_id: id,
            identity: "bench".into(),
            available_memory_bytes: 1 << 30,
            ..Default::default()
        })
        .expect("beat");
    }
    if others {
        let t = std::time::Instant::now();
        let job = "[[application]]\nname = \"a\"\ntasks = 10\n\
                   [application.cpu]\ncommand = \"true\"\ncores = 2\n";
        let workflow = "balancer = \"centralised\"\n[[task]]\nname = \"A\"\ninstances = 4\n\
                        command = \"true\"\n";
        for u in 0..USERS {
            let user = format!("user{u}");
            s.on_add_user(&user, false).expect("user");
            for _ in 0..JOBS_EACH {
                s.on_submit_as(submission("job.toml", job.into()), &user)
                    .expect("a job");
            }
            for _ in 0..WORKFLOWS_EACH {
                let id = s
                    .on_submit_as(submission("wf.toml", workflow.into()), &user)
                    .expect("a workflow")
                    .job_id;
                s.cancel(id).expect("cancel");
            }
            // Lowered under its tasks' two cores: they wait for good (no beat placed them).
            s.on_limit_user(&user, CapChange::cores(1)).expect("cap");
        }
        eprintln!(
            "{} applications and {} workflows of {USERS} users in {:?}",
            USERS * JOBS_EACH,
            USERS * WORKFLOWS_EACH,
            t.elapsed()
        );
    }
    s.on_add_user("alice", false).expect("alice");
    s.on_limit_user("alice", CapChange::cores(4))
        .expect("her cap");
    let job = "[[application]]\nname = \"mine\"\ntasks = 1000\n\
               [application.cpu]\ncommand = \"true\"\n";
    s.on_submit_as(submission("job.toml", job.into()), "alice")
        .expect("her job");
    s
}

fn cap_wake(c: &mut Criterion) {
    let mut g = c.benchmark_group("cap_wake_on_1000_nodes");
    let base = ScratchDir::new("bench", "cap_wake");
    for (others, name) in [
        (false, "alice_alone"),
        (true, "beside_10000_waiting_apps_and_1000_workflows"),
    ] {
        let dir = base.join(name);
        let mut s = state(&dir, others);
        for (freed, event) in [(true, "room_freed"), (false, "no_room_freed")] {
            g.bench_function(BenchmarkId::new(event, name), |b| {
                b.iter(|| black_box(&mut s).wake_after_cap_room("alice", freed))
            });
        }
        drop(s);
        let _ = std::fs::remove_dir_all(&dir);
    }
    g.finish();
}

#[allow(missing_docs)]
mod group {
    use super::*;
    criterion_group!(benches, cap_wake);
}
criterion_main!(group::benches);
