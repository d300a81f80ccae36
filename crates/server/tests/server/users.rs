//! Users (docs/runtime.md, "Users"): the admin adds users, each with a token of its own; a
//! user sees every job but changes, and reads the logs of, only its own; node, queue and user
//! management is the admin's; a removed or rotated token is refused at once; users, tokens and
//! owners survive a restart; `--singleton` and a user's purge look at the user's own jobs.

use crate::common;

use common::serve;
use hetsched_proto as pb;
use hetsched_proto::client_client::ClientClient;
use hetsched_server::ServerConfig;
use hetsched_server::convert::Wire;
use hetsched_server::state::types::{PurgeSelection, Submission};
use hetsched_server::state::{CapChange, State};
use hetsched_server::store::Store;
use hetsched_server::users::ADMIN;
use std::path::Path;
use tonic::Code;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;

type Api = ClientClient<InterceptedService<Channel, pb::TokenInterceptor>>;

const JOB: &str =
    "[[application]]\nname = \"sim\"\ntasks = 3\n[application.cpu]\ncommand = \"true\"\n";

fn api(channel: &Channel, token: &str) -> Api {
    ClientClient::with_interceptor(
        channel.clone(),
        pb::TokenInterceptor::new(token).expect("ascii token"),
    )
}

async fn add_user(admin: &mut Api, name: &str, rotate: bool) -> String {
    admin
        .add_user(pb::AddUserRequest {
            name: name.into(),
            rotate,
            max_cores: None,
            max_gpus: None,
            max_memory_bytes: None,
            shares: None,
            max_priority: None,
        })
        .await
        .expect("the admin adds a user")
        .into_inner()
        .token
}

/// Submits a held job (nothing runs) named `name`.
async fn submit(api: &mut Api, name: &str) -> u64 {
    api.submit(pb::SubmitRequest {
        origin: "job.toml".into(),
        text: JOB.into(),
        name: name.into(),
        hold: true,
        ..Default::default()
    })
    .await
    .expect("submitted")
    .into_inner()
    .job_id
}

/// A job of `tasks` one-core `true` tasks (application `sim`), not held.
fn sweep(tasks: u32) -> Submission {
    let mut sub = submission("sweep", false);
    sub.text = format!(
        "[[application]]\nname = \"sim\"\ntasks = {tasks}\n[application.cpu]\ncommand = \"true\"\n"
    );
    sub.hold = false;
    sub
}

/// How many of the assignments `sent` are tasks of job `job`.
fn sent_of(s: &State, job: u64, sent: &[pb::Assignment]) -> usize {
    let ids: Vec<u64> = s
        .tasks(job)
        .expect("tasks")
        .tasks
        .iter()
        .map(|t| t.id)
        .collect();
    sent.iter().filter(|t| ids.contains(&t.task_id)).count()
}

/// The code and message of a refused call.
fn refused<T: std::fmt::Debug>(r: Result<tonic::Response<T>, tonic::Status>) -> (Code, String) {
    let e = r.expect_err("refused");
    (e.code(), e.message().to_string())
}

async fn owners(api: &mut Api, selectable: bool) -> Vec<(u64, String)> {
    api.list_jobs(pb::ListJobsRequest {
        selectable,
        ..Default::default()
    })
    .await
    .expect("listed")
    .into_inner()
    .jobs
    .into_iter()
    .map(|j| (j.id, j.owner))
    .collect()
}

#[tokio::test]
async fn users_change_only_their_own_jobs_and_the_admin_changes_every_job() {
    let dir = common::scratch("users", "own");
    let config = ServerConfig {
        data_dir: dir.to_path_buf(),
        ..Default::default()
    };
    let (server, channel) = serve(config.clone()).await;
    let mut admin = api(&channel, &server.token);
    let alice_token = add_user(&mut admin, "alice", false).await;
    let bob_token = add_user(&mut admin, "bob", false).await;
    assert_ne!(alice_token, bob_token);
    let (mut alice, mut bob) = (api(&channel, &alice_token), api(&channel, &bob_token));

    // Who is who.
    let me = bob.who_am_i(pb::WhoAmIRequest {}).await.expect("whoami");
    assert_eq!(
        (me.get_ref().name.as_str(), me.get_ref().admin),
        ("bob", false)
    );
    let me = admin.who_am_i(pb::WhoAmIRequest {}).await.expect("whoami");
    assert_eq!(
        (me.get_ref().name.as_str(), me.get_ref().admin),
        (ADMIN, true)
    );

    // A name taken, a bad name, a user adding users.
    let (code, msg) = refused(
        admin
            .add_user(pb::AddUserRequest {
                name: "alice".into(),
                rotate: false,
                max_cores: None,
                max_gpus: None,
                max_memory_bytes: None,
                shares: None,
                max_priority: None,
            })
            .await,
    );
    assert_eq!(code, Code::AlreadyExists, "{msg}");
    assert!(msg.contains("--rotate"), "{msg}");
    for bad in ["Alice", "admin", "a b"] {
        let (code, msg) = refused(
            admin
                .add_user(pb::AddUserRequest {
                    name: bad.into(),
                    rotate: false,
                    max_cores: None,
                    max_gpus: None,
                    max_memory_bytes: None,
                    shares: None,
                    max_priority: None,
                })
                .await,
        );
        assert_eq!(code, Code::InvalidArgument, "{bad}: {msg}");
    }
    let (code, msg) = refused(
        alice
            .add_user(pb::AddUserRequest {
                name: "mallory".into(),
                rotate: false,
                max_cores: None,
                max_gpus: None,
                max_memory_bytes: None,
                shares: None,
                max_priority: None,
            })
            .await,
    );
    assert_eq!(code, Code::PermissionDenied, "{msg}");
    assert!(
        msg.contains("is for the admin") && msg.contains("alice"),
        "{msg}"
    );
    let (code, _) = refused(alice.list_users(pb::ListUsersRequest {}).await);
    assert_eq!(code, Code::PermissionDenied);

    let a = submit(&mut alice, "prep").await;
    let b = submit(&mut bob, "prep").await;
    let root = submit(&mut admin, "prep").await;

    // Everyone sees every job and whose it is; a selection picks among one's own.
    let all = vec![
        (a, "alice".to_string()),
        (b, "bob".to_string()),
        (root, ADMIN.to_string()),
    ];
    assert_eq!(owners(&mut bob, false).await, all);
    assert_eq!(owners(&mut bob, true).await, vec![(b, "bob".to_string())]);
    assert_eq!(owners(&mut admin, true).await, all);
    let only_alice = admin
        .list_jobs(pb::ListJobsRequest {
            owner: "alice".into(),
            ..Default::default()
        })
        .await
        .expect("listed")
        .into_inner();
    assert_eq!(only_alice.jobs.len(), 1);
    assert_eq!(only_alice.jobs[0].id, a);
    // A misspelt owner is refused by name, not answered with an empty list.
    let (code, msg) = refused(
        bob.list_jobs(pb::ListJobsRequest {
            owner: "alcie".into(),
            ..Default::default()
        })
        .await,
    );
    assert_eq!(code, Code::NotFound, "{msg}");
    assert!(msg.contains("no user `alcie`"), "{msg}");
    let job = bob
        .get_job(pb::GetJobRequest {
            job_id: a,
            wait_ms: 0,
        })
        .await
        .expect("anyone reads a job")
        .into_inner();
    assert_eq!(job.owner, "alice");

    // Bob changes nothing of Alice's, and each refusal says whose the job is.
    let denied = |(code, msg): (Code, String), what: &str| {
        assert_eq!(code, Code::PermissionDenied, "{what}: {msg}");
        assert!(
            msg.contains(&format!("job {a} belongs to alice")),
            "{what}: {msg}"
        );
    };
    denied(
        refused(
            bob.cancel(pb::CancelRequest {
                job_id: a,
                ..Default::default()
            })
            .await,
        ),
        "cancel",
    );
    denied(
        refused(
            bob.cancel(pb::CancelRequest {
                job_id: a,
                indices: "1".into(),
                ..Default::default()
            })
            .await,
        ),
        "cancel --tasks",
    );
    denied(
        refused(
            bob.hold(pb::HoldRequest {
                job_id: a,
                hold: false,
            })
            .await,
        ),
        "release",
    );
    denied(
        refused(
            bob.update(pb::UpdateRequest {
                job_id: a,
                priority: Some(9),
                ..Default::default()
            })
            .await,
        ),
        "update",
    );
    denied(
        refused(
            bob.signal(pb::SignalRequest {
                job_id: a,
                signal: "USR1".into(),
                ..Default::default()
            })
            .await,
        ),
        "signal",
    );
    denied(
        refused(
            bob.resubmit(pb::ResubmitRequest {
                job_id: a,
                failed: true,
                ..Default::default()
            })
            .await,
        ),
        "resubmit",
    );
    denied(
        refused(
            bob.read_log(pb::ReadLogRequest {
                job_id: a,
                task: "sim:0".into(),
                ..Default::default()
            })
            .await,
        ),
        "log",
    );
    // The job is untouched: still held, its three tasks pending.
    let job = admin
        .get_job(pb::GetJobRequest {
            job_id: a,
            wait_ms: 0,
        })
        .await
        .expect("job")
        .into_inner();
    assert!(job.held);
    assert_eq!(job.counts.expect("counts").pending, 3);

    // Nodes and queues are the admin's.
    let (code, msg) = refused(
        bob.drain_node(pb::DrainNodeRequest {
            name: "n1".into(),
            drain: true,
            ..Default::default()
        })
        .await,
    );
    assert_eq!(code, Code::PermissionDenied, "{msg}");
    assert!(msg.contains("draining or resuming a node"), "{msg}");

    // Alice changes her own job; the admin changes Bob's.
    alice
        .hold(pb::HoldRequest {
            job_id: a,
            hold: false,
        })
        .await
        .expect("alice releases her job");
    alice
        .cancel(pb::CancelRequest {
            job_id: a,
            ..Default::default()
        })
        .await
        .expect("alice cancels her job");
    admin
        .cancel(pb::CancelRequest {
            job_id: b,
            ..Default::default()
        })
        .await
        .expect("the admin cancels bob's job");
    // Each job's tasks say who cancelled it, when it was not its owner.
    let messages = |api: &mut Api, job: u64| {
        let api = api.clone();
        async move {
            let mut api = api;
            api.list_tasks(pb::ListTasksRequest {
                job_id: job,
                ..Default::default()
            })
            .await
            .expect("tasks")
            .into_inner()
            .tasks
            .into_iter()
            .map(|t| t.message)
            .collect::<Vec<_>>()
        }
    };
    assert_eq!(messages(&mut bob, a).await, vec!["cancelled"; 3]);
    assert_eq!(
        messages(&mut bob, b).await,
        vec!["cancelled by the admin"; 3]
    );
    // Bob purges nothing of Alice's even when it picks "every finished job".
    let (code, msg) = refused(
        bob.purge(pb::PurgeRequest {
            job_ids: vec![a],
            ..Default::default()
        })
        .await,
    );
    assert_eq!(code, Code::PermissionDenied, "{msg}");
    let purged = bob
        .purge(pb::PurgeRequest {
            has_keep: true,
            keep: 0,
            ..Default::default()
        })
        .await
        .expect("bob purges his finished jobs")
        .into_inner();
    assert_eq!(purged.purged, vec![b], "only bob's own finished job");

    // A removed user's token, and a rotated one's old token, are refused at once.
    let removed = admin
        .remove_user(pb::RemoveUserRequest { name: "bob".into() })
        .await
        .expect("removed")
        .into_inner();
    assert_eq!(removed.unfinished_jobs, 0);
    let dave = add_user(&mut admin, "dave", false).await;
    let d = submit(&mut api(&channel, &dave), "prep").await;
    admin
        .remove_user(pb::RemoveUserRequest {
            name: "dave".into(),
        })
        .await
        .expect("removed");
    // A removed user's jobs stay listable by owner; one without jobs is no owner any more.
    let of = |owner: &str| pb::ListJobsRequest {
        owner: owner.into(),
        ..Default::default()
    };
    let daves = admin
        .list_jobs(of("dave"))
        .await
        .expect("listed")
        .into_inner();
    assert_eq!(daves.jobs.iter().map(|j| j.id).collect::<Vec<_>>(), vec![d]);
    let (code, msg) = refused(admin.list_jobs(of("bob")).await);
    assert_eq!(code, Code::NotFound, "{msg}");
    let (code, _) = refused(bob.who_am_i(pb::WhoAmIRequest {}).await);
    assert_eq!(code, Code::Unauthenticated);
    let new_alice = add_user(&mut admin, "alice", true).await;
    let (code, _) = refused(alice.who_am_i(pb::WhoAmIRequest {}).await);
    assert_eq!(code, Code::Unauthenticated, "the old token is refused");
    let mut alice = api(&channel, &new_alice);
    let c = submit(&mut alice, "later").await;
    server.stop().await.expect("stops");

    // After a restart: the rotated token works, the removed one does not, owners stay.
    let (server, channel) = serve(config).await;
    let mut alice = api(&channel, &new_alice);
    let me = alice.who_am_i(pb::WhoAmIRequest {}).await.expect("whoami");
    assert_eq!(me.get_ref().name, "alice");
    let (code, _) = refused(
        api(&channel, &bob_token)
            .who_am_i(pb::WhoAmIRequest {})
            .await,
    );
    assert_eq!(code, Code::Unauthenticated);
    assert_eq!(
        owners(&mut alice, false).await,
        vec![
            (a, "alice".to_string()),
            (root, ADMIN.to_string()),
            (d, "dave".to_string()),
            (c, "alice".to_string())
        ]
    );
    let mut admin = api(&channel, &server.token);
    let users = admin
        .list_users(pb::ListUsersRequest {})
        .await
        .expect("listed")
        .into_inner()
        .users;
    assert_eq!(users.len(), 1);
    assert_eq!(
        (
            users[0].name.as_str(),
            users[0].jobs,
            users[0].unfinished_jobs
        ),
        ("alice", 2, 1)
    );
    // The store holds the token's hash, never the token.
    let db = std::fs::read(dir.join("state.db")).expect("store");
    let wal = std::fs::read(dir.join("state.db-wal")).unwrap_or_default();
    for bytes in [db, wal] {
        assert!(
            !bytes
                .windows(new_alice.len())
                .any(|w| w == new_alice.as_bytes()),
            "a token is in the store"
        );
    }
    server.stop().await.expect("stops");
}

fn open(d: &Path) -> State {
    let config = ServerConfig {
        data_dir: d.to_path_buf(),
        ..Default::default()
    };
    State::open(&config, Store::open(&d.join("state.db")).expect("store")).expect("state")
}

fn submission(name: &str, singleton: bool) -> Submission {
    Submission {
        origin: "job.toml".into(),
        text: JOB.into(),
        workdir: String::new(),
        key: String::new(),
        name: name.into(),
        divisible_input: Vec::new(),
        after: Vec::new(),
        after_any: Vec::new(),
        after_notok: Vec::new(),
        after_corr: Vec::new(),
        after_start: Vec::new(),
        singleton,
        hold: true,
        begin_ms: None,
        max_priority: None,
        task_room: None,
        cap: Default::default(),
        owner: String::new(),
    }
}

#[test]
fn a_singleton_waits_for_its_own_users_jobs_of_the_name_only_and_a_restart_keeps_the_owners() {
    let d = common::scratch("users", "singleton");
    let mut s = open(&d);
    s.on_add_user("alice", false).expect("alice");
    s.on_add_user("bob", false).expect("bob");
    let a1 = s
        .on_submit_as(submission("nightly", false), "alice")
        .expect("a1")
        .job_id;
    let b1 = s
        .on_submit_as(submission("nightly", false), "bob")
        .expect("b1")
        .job_id;
    let root = s
        .on_submit(submission("nightly", false))
        .expect("root")
        .job_id;
    let a2 = s
        .on_submit_as(submission("nightly", true), "alice")
        .expect("a2")
        .job_id;
    let b2 = s
        .on_submit_as(submission("nightly", true), "bob")
        .expect("b2")
        .job_id;
    let r2 = s.on_submit(submission("nightly", true)).expect("r2").job_id;
    assert_eq!(s.get_job(a2).expect("a2").after_any, vec![a1]);
    assert_eq!(s.get_job(b2).expect("b2").after_any, vec![b1]);
    assert_eq!(s.get_job(r2).expect("r2").after_any, vec![root]);
    // A user's purge by age picks among its own finished jobs only.
    for j in [a1, b1, root] {
        s.on_cancel(j).expect("cancelled");
    }
    let purged = s
        .on_purge(&PurgeSelection {
            keep: Some(0),
            owner: Some("bob".into()),
            ..Default::default()
        })
        .expect("purged");
    assert_eq!(purged.purged, vec![b1]);
    drop(s);
    let s = open(&d);
    let owners: Vec<&str> = [a1, root, a2, b2, r2]
        .iter()
        .map(|&j| s.owner_of(j))
        .collect();
    assert_eq!(owners, ["alice", ADMIN, "alice", "bob", ADMIN]);
    assert_eq!(s.get_job(a2).expect("a2").owner, "alice");
}

#[test]
fn a_crash_between_the_owner_row_and_the_job_leaves_the_next_job_its_own_owner() {
    // The owner row is written first under the id the job will get: a submission refused after
    // it (here: a bad file) leaves that row, and the next job with that id is its own
    // submitter's.
    let d = common::scratch("users", "orphan");
    let mut s = open(&d);
    s.on_add_user("alice", false).expect("alice");
    let mut bad = submission("x", false);
    bad.text = "[[application]]\nname = 3\n".into();
    s.on_submit_as(bad, "alice")
        .expect_err("a bad file is refused");
    let j = s.on_submit(submission("x", false)).expect("admin's").job_id;
    assert_eq!(s.owner_of(j), ADMIN);
    // A user acting on the admin's job is told whose it is, in plain words.
    let e = s
        .check_owner("alice", j, "cancel it")
        .expect_err("alice may not cancel the admin's job");
    assert_eq!(
        e.to_string(),
        format!("job {j} belongs to the admin: only the admin may cancel it")
    );
    // The admin's jobs are stored as before: no owner rows.
    for _ in 0..3 {
        s.on_submit(submission("y", false)).expect("admin's");
    }
    drop(s);
    assert_eq!(open(&d).owner_of(j), ADMIN, "after a restart too");
    let store = Store::open(&d.join("state.db")).expect("store");
    let rows: i64 = store
        .conn()
        .query_row("SELECT COUNT(*) FROM job_owners", [], |r| r.get(0))
        .expect("count");
    assert_eq!(rows, 0);
}

#[test]
fn a_users_topology_is_killed_rebalanced_and_replaced_by_it_or_the_admin_only() {
    let d = common::scratch("users", "topology");
    let mut s = open(&d);
    s.on_add_user("alice", false).expect("alice");
    s.on_add_user("bob", false).expect("bob");
    let status = s
        .topology_submit_as(crate::topology_kind::submission(), "alice")
        .expect("submitted");
    assert_eq!(status["owner"], "alice");
    let e = s
        .check_topology_owner("bob", "pipe", "kill it")
        .expect_err("bob may not kill alice's topology");
    assert_eq!(
        e.to_string(),
        "topology `pipe` belongs to alice: only alice or the admin may kill it"
    );
    s.check_topology_owner("alice", "pipe", "kill it")
        .expect("alice may");
    s.check_topology_owner(ADMIN, "pipe", "kill it")
        .expect("the admin may");
    s.topology_kill("pipe").expect("killed");
    // A killed topology's name is still its owner's.
    let e = s
        .topology_submit_as(crate::topology_kind::submission(), "bob")
        .expect_err("bob may not submit over alice's topology");
    assert!(e.to_string().contains("belongs to alice"), "{e}");
    assert_eq!(s.topology_list()[0]["owner"], "alice");
    drop(s);
    let mut s = open(&d);
    assert_eq!(s.topology_show("pipe").expect("shown")["owner"], "alice");
    // The admin's submission makes it the admin's.
    let status = s
        .topology_submit(crate::topology_kind::submission())
        .expect("the admin replaces it");
    assert_eq!(status["owner"], ADMIN);
    s.check_topology_owner("alice", "pipe", "kill it")
        .expect_err("no longer alice's");
    drop(s);
    assert_eq!(
        open(&d).topology_show("pipe").expect("shown")["owner"],
        ADMIN
    );
}

/// A user's cap on cores (`hetsched user limit --max-cores`): its running batch tasks hold at
/// most that many cores, whatever the policy places; the cores it leaves go to others, its
/// pending jobs say why they wait, a raised cap lets more start at once, and a restart keeps it.
#[test]
fn a_users_cap_on_cores_holds_its_running_tasks_and_the_rest_go_to_others() {
    let d = common::scratch("users", "cap");
    let mut s = open(&d);
    s.on_add_user("alice", false).expect("alice");
    s.on_limit_user("alice", CapChange::cores(3))
        .expect("capped");
    let mut agent = common::Agent::new(&mut s, 8);
    let job = sweep;
    let a = s.on_submit_as(job(10), "alice").expect("alice's").job_id;
    let root = s.on_submit(job(10)).expect("admin's").job_id;
    let sent = agent.beat(&mut s, &[]);
    let alices = |sent: &[(u64, u32)], s: &State| {
        sent.iter()
            .filter(|(t, _)| s.tasks(a).expect("tasks").tasks.iter().any(|x| x.id == *t))
            .count()
    };
    assert_eq!(alices(&agent.running, &s), 3, "alice's cap");
    assert_eq!(sent.len(), 8, "the admin's job takes the other five cores");
    assert_eq!(s.user_cores("alice"), 3);
    let why = s.get_job(a).expect("job").pending_reason;
    assert!(
        why.contains("hold 3 of the 3 cores the user may hold"),
        "{why}"
    );
    // Two of alice's end: two more of hers start in their place (her cap, not the node, binds).
    let done: Vec<(u64, u32, bool)> = agent
        .running
        .iter()
        .filter(|(t, _)| s.tasks(a).expect("tasks").tasks.iter().any(|x| x.id == *t))
        .take(2)
        .map(|&(t, n)| (t, n, true))
        .collect();
    let sent = agent.beat(&mut s, &done);
    assert_eq!(alices(&sent, &s), 2);
    assert_eq!(s.user_cores("alice"), 3);
    // The admin's tasks end; a raised cap lets alice take the freed cores at once.
    let roots: Vec<(u64, u32, bool)> = agent
        .running
        .iter()
        .filter(|(t, _)| {
            s.tasks(root)
                .expect("tasks")
                .tasks
                .iter()
                .any(|x| x.id == *t)
        })
        .map(|&(t, n)| (t, n, true))
        .collect();
    s.on_limit_user("alice", CapChange::cores(6))
        .expect("raised");
    agent.beat(&mut s, &roots);
    assert_eq!(s.user_cores("alice"), 6);
    assert_eq!(s.list_users()[0].cap.cores, 6);
    drop(s);
    // A restart keeps the cap and what her running tasks hold.
    let s = open(&d);
    assert_eq!(s.user_cores("alice"), 6);
    assert_eq!(s.list_users()[0].cap.cores, 6);
    // `/metrics` shows both.
    common::assert_metrics(
        s,
        "hdas",
        &[
            "hetsched_user_cores{user=\"alice\"} 6",
            "hetsched_user_max_cores{user=\"alice\"} 6",
            // The admin's own tasks (the other job's two): a series too, so the holdings add
            // up to what the nodes hold.
            "hetsched_user_cores{user=\"admin\"} 2",
        ],
    );
}

/// Alice's cap on cores (1) holds back her task that only node `b` may run while her task on
/// `a` runs. Whatever ends her task on `a` — its result, a cancel, the loss of its node — frees
/// room under her cap, and `b`, idle and waiting for work in its agent's held call (an idle
/// agent beats once a minute), is woken at once; before, only a raised cap woke it. Room for one
/// task wakes one of the nodes her waiting work fits on, not all, and a result whose freed room
/// the reporting node's own reply fills wakes nobody.
#[test]
fn room_freed_under_a_users_cap_wakes_the_nodes_her_held_back_work_fits_on() {
    let job = |requires: &str, tasks: u32| Submission {
        origin: "job.toml".into(),
        text: format!(
            "[[application]]\nname = \"sim\"\ntasks = {tasks}\nrequires = [\"{requires}\"]\n\
             [application.cpu]\ncommand = \"true\"\n"
        ),
        workdir: "/".into(),
        ..Default::default()
    };
    let d = common::scratch("users", "cap-wake");
    let mut s = open(&d);
    s.on_add_user("alice", false).expect("alice");
    s.on_limit_user("alice", CapChange::cores(1))
        .expect("capped");
    let a = common::register(&mut s, "a", 2);
    let b = common::register(&mut s, "b", 2);
    let c = common::register(&mut s, "c", 2);
    let mut waits: Vec<_> = [a, b, c]
        .iter()
        .map(|&n| s.await_work(n, common::IDENTITY).expect("its wake-ups"))
        .collect();
    // Which of a, b, c were woken since the last look.
    let mut woken = move || -> Vec<bool> {
        waits
            .iter_mut()
            .map(|w| {
                let changed = w.has_changed().unwrap_or(false);
                w.borrow_and_update();
                changed
            })
            .collect()
    };
    let one = |reply: pb::HeartbeatReply| -> (u64, u32) {
        assert_eq!(reply.assignments.len(), 1, "{reply:?}");
        (reply.assignments[0].task_id, reply.assignments[0].attempt)
    };
    let none = |reply: pb::HeartbeatReply| assert!(reply.assignments.is_empty(), "{reply:?}");

    // Her task on `a` runs; the one only `b` may run waits for her cap, and `b` beats in vain.
    s.on_submit_as(job("node:a", 1), "alice").expect("a's");
    let on_a = one(common::beat(&mut s, a, &[], &[]));
    let on_b = s
        .on_submit_as(job("node:b", 1), "alice")
        .expect("b's")
        .job_id;
    none(common::beat(&mut s, b, &[], &[]));
    woken();
    // Its result frees her core: `b` is woken, and its beat starts her task there.
    none(common::beat(&mut s, a, &[], &[(on_a.0, on_a.1, true)]));
    assert_eq!(woken(), [false, true, false], "the result on a wakes b");
    let on_b_task = one(common::beat(&mut s, b, &[], &[]));

    // A cancel frees it too: her task on `b` is cancelled while her next one waits for `a`.
    s.on_submit_as(job("node:a", 1), "alice").expect("a's");
    none(common::beat(&mut s, a, &[], &[]));
    woken();
    s.on_cancel(on_b).expect("cancelled");
    assert!(woken()[0], "the cancel on b wakes a");
    let on_a = one(common::beat(&mut s, a, &[], &[]));
    none(common::beat(
        &mut s,
        b,
        &[],
        &[(on_b_task.0, on_b_task.1, false)],
    ));

    // Room for one task wakes one node of the two her two waiting tasks fit on (the most free
    // cores, then the lowest id: `b`).
    s.on_submit_as(job("!node:a", 2), "alice")
        .expect("two more");
    none(common::beat(&mut s, b, &[], &[]));
    none(common::beat(&mut s, c, &[], &[]));
    woken();
    none(common::beat(&mut s, a, &[], &[(on_a.0, on_a.1, true)]));
    assert_eq!(woken(), [false, true, false], "room for one wakes one");
    let on_b_task = one(common::beat(&mut s, b, &[], &[]));
    // Her task's end on `b` frees room that `b`'s own reply takes: nobody else is woken.
    let on_b_task = one(common::beat(
        &mut s,
        b,
        &[],
        &[(on_b_task.0, on_b_task.1, true)],
    ));
    assert_eq!(woken(), [false, false, false], "b's reply took the room");

    // The loss of a node frees it as well: `b` stops beating and is declared dead, and `c`,
    // where her task (run again) and her next one fit, is woken.
    s.on_submit_as(job("node:c", 1), "alice").expect("c's");
    none(common::beat(&mut s, b, &[on_b_task], &[]));
    std::thread::sleep(std::time::Duration::from_millis(300));
    none(common::beat(&mut s, c, &[], &[]));
    woken();
    s.check_dead(std::time::Duration::from_millis(200))
        .expect("checked");
    assert_eq!(woken(), [false, false, true], "the loss of b wakes c");
    one(common::beat(&mut s, c, &[], &[]));
}

/// A user's stream topology: the cores its running workers hold on their nodes are the user's,
/// as a batch task's are (they count against its cap on cores, show in what it holds, and
/// accrue as its fair-share usage), after a restart too; killed, they go back. (Until this
/// test, a user's workers held cores that no user was charged with: they counted as the
/// admin's usage and against no cap.)
#[test]
fn a_users_topology_workers_hold_cores_as_its_tasks_do_against_its_cap() {
    let d = common::scratch("users", "topology-cap");
    let mut s = open(&d);
    s.on_add_user("alice", false).expect("alice");
    s.on_limit_user("alice", CapChange::cores(3))
        .expect("capped");
    let n = common::register(&mut s, "n", 8);
    crate::topology_kind::sync(&mut s, vec![]);
    s.topology_submit_as(crate::topology_kind::submission(), "alice")
        .expect("alice's topology");
    crate::topology_kind::sync(&mut s, vec![crate::topology_kind::running_worker(1)]);
    assert_eq!(s.topology_held_cores(n), 2);
    assert_eq!(
        s.user_cores("alice"),
        2,
        "the worker's two declared cores are alice's"
    );
    let job = sweep;
    let a = s.on_submit_as(job(4), "alice").expect("alice's").job_id;
    let root = s.on_submit(job(4)).expect("admin's").job_id;
    let sent = common::beat(&mut s, n, &[], &[]).assignments;
    let of = |job: u64, s: &State| sent_of(s, job, &sent);
    assert_eq!(
        of(a, &s),
        1,
        "her worker's two cores and one task make her cap"
    );
    assert_eq!(
        of(root, &s),
        4,
        "the admin's tasks take four of the five cores left"
    );
    assert_eq!(s.user_cores("alice"), 3);
    let why = s.get_job(a).expect("job").pending_reason;
    assert!(
        why.contains("hold 3 of the 3 cores the user may hold"),
        "{why}"
    );
    drop(s);
    // A restart: the worker's cores are alice's again before its agent syncs.
    let mut s = open(&d);
    assert_eq!(s.topology_held_cores(n), 2);
    assert_eq!(s.user_cores("alice"), 3);
    // Killed: its cores are no longer alice's.
    s.topology_kill("pipe").expect("killed");
    assert_eq!(s.topology_held_cores(n), 0);
    assert_eq!(s.user_cores("alice"), 1, "her one running task");
    // Under a cap of one core a topology declaring two is refused, saying why.
    s.on_limit_user("alice", CapChange::cores(1))
        .expect("capped");
    let e = s
        .topology_submit_as(crate::topology_kind::submission(), "alice")
        .expect_err("over her cap");
    assert_eq!(
        e.to_string(),
        "topology `pipe` declares 200% of a core over its executors: its workers would hold at \
         least 2 cores, more than the 1 core alice may hold at once (`hetsched user limit`)"
    );
    // Workers hold their executors' declared memory too, as hers: a topology declaring more
    // than her cap on memory is refused, and one within it holds its memory as hers.
    s.on_limit_user(
        "alice",
        CapChange {
            max_cores: Some(8),
            max_memory_bytes: Some(300 << 20),
            ..CapChange::default()
        },
    )
    .expect("capped");
    let with_memory = |each: &str| hetsched_server::jobs::topology::TopologySubmission {
        text: crate::topology_kind::TOPOLOGY
            .replace("cpu = 50.0", &format!("cpu = 50.0\nmemory = \"{each}\"")),
        ..crate::topology_kind::submission()
    };
    let e = s
        .topology_submit_as(with_memory("100MiB"), "alice")
        .expect_err("over her cap on memory");
    assert_eq!(
        e.to_string(),
        "topology `pipe` declares 400.0 MiB of memory over its executors, more than the \
         300.0 MiB alice may hold at once (`hetsched user limit`)"
    );
    crate::topology_kind::sync(&mut s, vec![]);
    let shown = s
        .topology_submit_as(with_memory("50MiB"), "alice")
        .expect("within her cap");
    let generation = shown["generation"].as_u64().expect("generation");
    crate::topology_kind::sync(
        &mut s,
        vec![crate::topology_kind::running_worker(generation)],
    );
    assert_eq!(s.topology_held_memory(n), 200 << 20);
    assert_eq!(
        s.user_held("alice").memory_bytes,
        200 << 20,
        "the worker's declared memory is hers (her task declares none)"
    );
    s.topology_kill("pipe").expect("killed");
    assert_eq!(s.user_held("alice").memory_bytes, 0);
    common::assert_metrics(s, "hdas", &["hetsched_user_cores{user=\"alice\"} 1"]);
}

/// A user's cap on cores and memory bounds its topologies together, not each alone: a worker
/// is never stopped for the cap, so a second topology that would take the declared cores (or
/// memory) of the user's running topologies past the cap is refused at submission, saying
/// so — before, each was checked alone, and a user capped at 3 cores ran two topologies of 2
/// cores each (4 held), or any number of them. One killed gives its share back; the admin has
/// no cap; another user's topologies do not count.
#[test]
fn a_users_topologies_together_stay_within_its_caps() {
    let d = common::scratch("users", "topologies-cap");
    let mut s = open(&d);
    s.on_add_user("alice", false).expect("alice");
    s.on_add_user("bob", false).expect("bob");
    s.on_limit_user("alice", CapChange::cores(3))
        .expect("capped");
    common::register(&mut s, "n", 16);
    crate::topology_kind::sync(&mut s, vec![]);
    let named = |name: &str, memory: Option<&str>| {
        let mut text = crate::topology_kind::TOPOLOGY
            .replace("name = \"pipe\"", &format!("name = \"{name}\""));
        if let Some(m) = memory {
            text = text.replace("cpu = 50.0", &format!("cpu = 50.0\nmemory = \"{m}\""));
        }
        hetsched_server::jobs::topology::TopologySubmission {
            origin: format!("{name}.toml"),
            text,
            ..crate::topology_kind::submission()
        }
    };
    s.topology_submit_as(named("one", None), "alice")
        .expect("her first topology, 2 cores of her 3");
    let e = s
        .topology_submit_as(named("two", None), "alice")
        .expect_err("two topologies of 2 cores pass her cap of 3");
    assert_eq!(
        e.to_string(),
        "topology `two` declares 200% of a core over its executors: its workers would hold at \
         least 2 cores, and alice's running topologies hold 2 already: together more than the 3 \
         cores alice may hold at once (`hetsched user limit`)"
    );
    // Another user's, and the admin's, are theirs.
    s.topology_submit_as(named("bobs", None), "bob")
        .expect("bob has no cap");
    s.topology_submit_as(named("admins", None), hetsched_server::users::ADMIN)
        .expect("the admin's");
    // Killed, hers gives its share back.
    s.topology_kill("one").expect("killed");
    s.topology_submit_as(named("two", None), "alice")
        .expect("within her cap again");
    // Memory the same way.
    s.topology_kill("two").expect("killed");
    s.on_limit_user(
        "alice",
        CapChange {
            max_cores: Some(16),
            max_memory_bytes: Some(300 << 20),
            ..CapChange::default()
        },
    )
    .expect("capped");
    s.topology_submit_as(named("three", Some("50MiB")), "alice")
        .expect("200 MiB of her 300");
    let e = s
        .topology_submit_as(named("four", Some("50MiB")), "alice")
        .expect_err("400 MiB together");
    assert_eq!(
        e.to_string(),
        "topology `four` declares 200.0 MiB of memory over its executors, and alice's running \
         topologies hold 200.0 MiB already: together more than the 300.0 MiB alice may hold at \
         once (`hetsched user limit`)"
    );
}

/// A user's caps on GPUs and memory (`hetsched user limit --max-gpus N --max-memory S`): its
/// running tasks hold at most that many devices and bytes, the devices it leaves go to others,
/// its pending jobs say which cap binds, a cap not named keeps its value, and a restart and
/// `/metrics` keep and show them.
#[test]
fn a_users_caps_on_gpus_and_memory_hold_its_running_tasks() {
    let d = common::scratch("users", "gpu-cap");
    let mut s = open(&d);
    s.on_add_user("alice", false).expect("alice");
    s.on_limit_user(
        "alice",
        CapChange {
            max_gpus: Some(1),
            ..CapChange::default()
        },
    )
    .expect("capped");
    let node = common::register_with_gpus(&mut s, "g", 8, 4);
    let gpu_job = |tasks: u32| {
        let mut sub = submission("solve", false);
        sub.text = format!(
            "[[application]]\nname = \"solve\"\ntasks = {tasks}\n[application.gpu]\n\
             command = \"true\"\ngpus = 1\n"
        );
        sub.hold = false;
        sub
    };
    let a = s.on_submit_as(gpu_job(4), "alice").expect("alice's").job_id;
    let root = s.on_submit(gpu_job(4)).expect("admin's").job_id;
    let sent = common::beat(&mut s, node, &[], &[]).assignments;
    let of = |job: u64, s: &State| sent_of(s, job, &sent);
    assert_eq!(of(a, &s), 1, "alice's cap on GPUs");
    assert_eq!(of(root, &s), 3, "the admin takes the other three devices");
    assert_eq!(s.user_held("alice").gpus, 1);
    let why = s.get_job(a).expect("job").pending_reason;
    assert!(
        why.contains("hold 1 of the 1 GPU the user may hold"),
        "{why}"
    );
    // A cap on memory beside it; the cap on GPUs stays. Alice's 256 MiB tasks: two fit under
    // 512 MiB (the node has 1 GiB and seven free cores).
    s.on_limit_user(
        "alice",
        CapChange {
            max_memory_bytes: Some(512 << 20),
            ..CapChange::default()
        },
    )
    .expect("capped");
    let mut sub = submission("big", false);
    sub.text = "[[application]]\nname = \"big\"\ntasks = 4\n[application.cpu]\n\
                command = \"true\"\nmemory = \"256MiB\"\n"
        .into();
    sub.hold = false;
    let big = s.on_submit_as(sub, "alice").expect("alice's").job_id;
    let running: Vec<(u64, u32)> = sent.iter().map(|x| (x.task_id, x.attempt)).collect();
    let more = common::beat(&mut s, node, &running, &[]).assignments;
    assert_eq!(more.len(), 2, "two 256 MiB tasks under 512 MiB: {more:?}");
    assert_eq!(
        s.user_held("alice"),
        hetsched_core::Resources::new(3, 512 << 20, 1)
    );
    let why = s.get_job(big).expect("job").pending_reason;
    assert!(
        why.contains("hold 512 MiB of the 512 MiB of memory the user may hold"),
        "{why}"
    );
    let u = &s.list_users()[0];
    assert_eq!(u.cap, hetsched_core::Resources::new(0, 512 << 20, 1));
    drop(s);
    let s = open(&d);
    assert_eq!(
        s.list_users()[0].cap,
        hetsched_core::Resources::new(0, 512 << 20, 1)
    );
    let text = common::assert_metrics(
        s,
        "hdas",
        &[
            "hetsched_user_gpus{user=\"alice\"} 1",
            "hetsched_user_max_gpus{user=\"alice\"} 1",
            "hetsched_user_memory_bytes{user=\"alice\"} 536870912",
            "hetsched_user_max_memory_bytes{user=\"alice\"} 536870912",
        ],
    );
    assert!(
        !text.contains("hetsched_user_max_cores{"),
        "no cap on cores"
    );
}

/// A server in `d` with `[fair_share]`, usage halving every hour.
fn fair_config(d: &Path) -> ServerConfig {
    ServerConfig {
        data_dir: d.to_path_buf(),
        fair_share: Some(hetsched_server::config::FairShareConfig {
            half_life: hetsched_core::input::Duration(3600 * 1_000_000_000),
        }),
        ..Default::default()
    }
}

/// Fair-share usage is what a user's work held integrated over time, up to the moment it ends:
/// alice's one-core task on a two-core node (half the cluster) runs about 0.3 s and her usage
/// grows by about half a share-second per second of it. (Settled after the result released the
/// task, the time since the last settle was charged at what was left: short tasks were charged
/// about half their use, a hands-on review found.)
#[test]
fn under_fair_share_a_task_is_charged_up_to_its_result() {
    let d = common::scratch("users", "fair-end");
    let config = fair_config(&d);
    let mut s =
        State::open(&config, Store::open(&d.join("state.db")).expect("store")).expect("state");
    s.on_add_user("alice", false).expect("alice");
    let agent = common::Agent::new(&mut s, 2);
    let mut sub = submission("one", false);
    sub.text = "[[application]]\nname = \"one\"\ntasks = 1\n[application.cpu]\n\
                command = \"true\"\n"
        .into();
    sub.hold = false;
    s.on_submit_as(sub, "alice").expect("alice's");
    // Before the dispatch: her usage grows from the dispatching beat's settle on, which comes
    // before that beat's commit; timed from after it, `ran` could fall short of what was
    // charged by more than the 5 % below whenever a commit took tens of milliseconds.
    let start = std::time::Instant::now();
    let sent = common::beat(&mut s, agent.node, &[], &[]).assignments;
    assert_eq!(sent.len(), 1);
    let before = s.fair_usage_of("alice");
    std::thread::sleep(std::time::Duration::from_millis(300));
    common::beat(
        &mut s,
        agent.node,
        &[],
        &[(sent[0].task_id, sent[0].attempt, true)],
    );
    let ran = start.elapsed().as_secs_f64();
    // Usage is settled once a second: a beat after that settles it.
    std::thread::sleep(std::time::Duration::from_millis(1_100));
    common::beat(&mut s, agent.node, &[], &[]);
    let charged = s.fair_usage_of("alice") - before;
    assert!(
        charged >= 0.5 * 0.3 * 0.95 && charged <= 0.5 * ran * 1.05,
        "charged {charged} share-seconds for {ran} s of half the cluster"
    );
}

/// With `[fair_share]`, what a user's work held while the server was down counts in its
/// fair-share usage as it does in the accounts: alice's two-core task on an eight-core node (a
/// quarter of the cluster) ran through a 2 s crash, and once the node beats again her usage is
/// a quarter of a share-second per second of that — not the next to nothing accrued before the
/// crash, which would let her jump ahead of users who waited.
#[test]
fn under_fair_share_what_ran_while_the_server_was_down_counts_in_the_usage() {
    use hetsched_server::state::now_ns;
    let d = common::scratch("users", "fair-down");
    let config = fair_config(&d);
    let open_fair =
        || State::open(&config, Store::open(&d.join("state.db")).expect("store")).expect("state");
    let dispatched = now_ns();
    let (task, node, crashed, before) = {
        let mut s = open_fair();
        s.on_add_user("alice", false).expect("alice");
        let agent = common::Agent::new(&mut s, 8);
        let mut sub = submission("two", false);
        sub.text = "[[application]]\nname = \"two\"\ntasks = 1\n[application.cpu]\n\
                    command = \"true\"\ncores = 2\n"
            .into();
        sub.hold = false;
        s.on_submit_as(sub, "alice").expect("alice's");
        let sent = common::beat(&mut s, agent.node, &[], &[]).assignments;
        assert_eq!(sent.len(), 1);
        s.store_usage().expect("stored");
        let before = s.fair_usage_of("alice");
        (
            (sent[0].task_id, sent[0].attempt),
            agent.node,
            now_ns(),
            before,
        )
    };
    std::thread::sleep(std::time::Duration::from_millis(2_000));
    let mut s = open_fair();
    let restored = s.fair_usage_of("alice");
    assert!(
        restored < 0.1,
        "before the node beats: {restored} (stored {before})"
    );
    s.heartbeat(pb::HeartbeatRequest {
        node_id: node,
        running: vec![pb::RunningTask {
            task_id: task.0,
            attempt: task.1,
            started_ns: dispatched,
            ..Default::default()
        }],
        identity: common::IDENTITY.into(),
        ..Default::default()
    })
    .expect("beat");
    let down = (now_ns() - crashed) as f64 / 1e9;
    let usage = s.fair_usage_of("alice");
    assert!(
        usage >= 0.25 * (down - 0.3) && usage <= 0.25 * (down + 0.3) + restored,
        "a quarter of the cluster through {down:.2} s down: {usage:.3} share-seconds"
    );
    // The admin's ran nothing: nothing is credited to it.
    assert!(s.fair_usage_of(ADMIN) < 1e-9);
}

/// With `[fair_share]`, a user whose work held the cluster waits, within a priority, for one
/// whose work did not: Alice's task holds the only core for over a second; then Alice and Bob
/// each submit a task, Alice first, and Bob's starts first. Her usage is stored, read back by a
/// restart, and shown by `user list` and `/metrics`.
#[test]
fn under_fair_share_the_user_who_used_the_cluster_waits_for_one_who_did_not() {
    let d = common::scratch("users", "fair");
    let config = fair_config(&d);
    let open_fair =
        || State::open(&config, Store::open(&d.join("state.db")).expect("store")).expect("state");
    let mut s = open_fair();
    s.on_add_user("alice", false).expect("alice");
    s.on_add_user("bob", false).expect("bob");
    let mut agent = common::Agent::new(&mut s, 1);
    let one = || {
        let mut sub = submission("one", false);
        sub.text =
            "[[application]]\nname = \"one\"\ntasks = 1\n[application.cpu]\ncommand = \"true\"\n"
                .into();
        sub.hold = false;
        sub
    };
    s.on_submit_as(one(), "alice").expect("alice's");
    let first = agent.beat(&mut s, &[]);
    assert_eq!(first.len(), 1);
    std::thread::sleep(std::time::Duration::from_millis(1_300));
    // A beat while her task runs samples what she holds: the whole cluster.
    agent.beat(&mut s, &[]);
    let used = s.fair_usage_of("alice");
    assert!(used > 1.0 && used < 10.0, "alice used {used} share-seconds");
    assert_eq!(s.fair_usage_of("bob"), 0.0);
    agent.beat(&mut s, &[(first[0].0, first[0].1, true)]);
    let hers = s.on_submit_as(one(), "alice").expect("alice's").job_id;
    let his = s.on_submit_as(one(), "bob").expect("bob's").job_id;
    let next = agent.beat(&mut s, &[]);
    assert_eq!(next.len(), 1);
    let task_of = |job: u64, s: &State| s.tasks(job).expect("tasks").tasks[0].id;
    assert_eq!(next[0].0, task_of(his, &s), "bob's task first");
    assert_ne!(next[0].0, task_of(hers, &s));
    // While the node is busy, alice's waiting job says that bob's waiting work goes first;
    // bob's says only that the node is busy.
    let his_next = s.on_submit_as(one(), "bob").expect("bob's").job_id;
    assert_eq!(
        s.get_job(hers).expect("job").pending_reason,
        "resources: the nodes that can run it are busy, and fair share serves first the waiting \
         work of users who used less of the cluster per share: bob (`hetsched user list`)"
    );
    assert_eq!(
        s.get_job(his_next).expect("job").pending_reason,
        "resources: the nodes that can run it are busy"
    );
    // A user whose waiting work its own cap holds back does not go first, and is not named.
    s.on_limit_user("bob", CapChange::cores(1)).expect("capped");
    assert_eq!(
        s.get_job(hers).expect("job").pending_reason,
        "resources: the nodes that can run it are busy"
    );
    assert!(
        s.get_job(his_next)
            .expect("job")
            .pending_reason
            .contains("hold 1 of the 1 core the user may hold"),
        "bob's own job says his cap holds it"
    );
    let listed = s.list_users();
    assert_eq!(listed[0].name, "alice");
    assert!((listed[0].fair_usage - used).abs() < 1e-9);
    // Shares (`user limit --shares`): 1 to 1,000,000, stored.
    assert_eq!(listed[0].shares, 1);
    let e = s.on_share_user("alice", 0).expect_err("no shares");
    assert!(
        e.to_string().contains("shares: 0 is not 1 to 1000000"),
        "{e}"
    );
    s.on_share_user("alice", 4).expect("four shares");
    assert_eq!(s.list_users()[0].shares, 4);
    // Stored, and read back by a restart (decayed by the second it was down: a one-hour
    // half-life takes off well under 1 %).
    s.store_usage().expect("stored");
    drop(s);
    let s = open_fair();
    assert_eq!(s.list_users()[0].shares, 4, "kept by the restart");
    let back = s.fair_usage_of("alice");
    assert!(back <= used && back > used * 0.99, "{back} against {used}");
    common::assert_metrics(
        s,
        "hdas",
        &[
            "hetsched_user_fair_usage{user=\"alice\"} ",
            "hetsched_user_fair_usage{user=\"bob\"} 0",
            "hetsched_user_fair_usage{user=\"admin\"} 0",
        ],
    );
}

/// Every task spec and divisible chunk carries its job's owner as the Unix account it runs as
/// on agents started with `run_as_owner` (a user's name is its account); the admin's carry
/// none (the agent's own account).
#[test]
fn tasks_and_chunks_carry_their_owners_account_and_the_admins_none() {
    let d = common::scratch("users", "run-as");
    let mut s = open(&d);
    s.on_add_user("alice", false).expect("alice");
    let node = common::register(&mut s, "n", 8);
    let job = || {
        let mut sub = submission("sweep", false);
        sub.text =
            "[[application]]\nname = \"sim\"\ntasks = 1\n[application.cpu]\ncommand = \"true\"\n"
                .into();
        sub.hold = false;
        sub
    };
    let hers = s.on_submit_as(job(), "alice").expect("alice's").job_id;
    let root = s.on_submit(job()).expect("admin's").job_id;
    let reply = common::beat(&mut s, node, &[], &[]);
    let run_as = |job: u64| -> Vec<String> {
        reply
            .specs
            .iter()
            .filter(|sp| sp.job_id == job)
            .map(|sp| sp.run_as.clone())
            .collect()
    };
    assert_eq!(run_as(hers), vec!["alice".to_string()]);
    assert_eq!(run_as(root), vec![String::new()]);
    let mut div = submission("rows", false);
    div.text =
        "[[divisible]]\nname = \"rows\"\nunits = 10\ncommand = \"echo {start} {end}\"\n".into();
    div.hold = false;
    let rows = s.on_submit_as(div, "alice").expect("alice's rows").job_id;
    let got = common::ask_chunk(&mut s, "n");
    assert_eq!(got.orders.len(), 1);
    assert_eq!(got.orders[0].job_id, rows);
    assert_eq!(got.orders[0].run_as, "alice");
    // A topology's workers run as its owner too; the admin's as the agent.
    let workers = |s: &mut State| -> Vec<(String, String)> {
        s.topology_sync(
            hetsched_server::jobs::topology::WorkersSeen {
                restated: false,
                start_errors: Vec::new(),
                node: "n".into(),
                cores: 8,
                attributes: Vec::new(),
                workers: Vec::new(),
            },
            None,
        )
        .expect("sync")
        .workers
        .into_iter()
        .map(|w| (w.topology, w.run_as))
        .collect()
    };
    workers(&mut s);
    s.topology_submit_as(crate::topology_kind::submission(), "alice")
        .expect("alice's topology");
    assert_eq!(workers(&mut s), vec![("pipe".into(), "alice".into())]);
    s.topology_kill("pipe").expect("killed");
    s.topology_submit(crate::topology_kind::submission())
        .expect("the admin's topology");
    assert_eq!(workers(&mut s), vec![("pipe".into(), String::new())]);
}

/// A limit that names no cap is refused, and changes nothing.
#[test]
fn a_limit_naming_no_cap_is_refused() {
    let d = common::scratch("users", "empty-cap");
    let mut s = open(&d);
    s.on_add_user("alice", false).expect("alice");
    s.on_limit_user("alice", CapChange::cores(2))
        .expect("capped");
    let e = s
        .on_limit_user("alice", CapChange::default())
        .expect_err("names nothing");
    assert!(e.to_string().contains("at least one of max_cores"), "{e}");
    assert_eq!(s.list_users()[0].cap.cores, 2);
}

/// Under `policy = "drf"`, users share the cluster evenly however many jobs each submits: Alice's
/// three jobs and Bob's one split an 8-core node 4 / 4 (job by job, Alice would get 6).
#[test]
fn under_drf_users_share_the_nodes_evenly_whatever_their_job_counts() {
    let d = common::scratch("users", "drf");
    let config = ServerConfig {
        data_dir: d.to_path_buf(),
        policy: hetsched_core::policy::batch::BatchPolicyKind::Drf,
        ..Default::default()
    };
    let mut s =
        State::open(&config, Store::open(&d.join("state.db")).expect("store")).expect("state");
    s.on_add_user("alice", false).expect("alice");
    s.on_add_user("bob", false).expect("bob");
    let job = || {
        let mut sub = submission("sweep", false);
        sub.text =
            "[[application]]\nname = \"sim\"\ntasks = 10\n[application.cpu]\ncommand = \"true\"\n"
                .into();
        sub.hold = false;
        sub
    };
    let alices: Vec<u64> = (0..3)
        .map(|_| s.on_submit_as(job(), "alice").expect("alice's").job_id)
        .collect();
    s.on_submit_as(job(), "bob").expect("bob's");
    let mut agent = common::Agent::new(&mut s, 8);
    agent.beat(&mut s, &[]);
    assert_eq!(agent.running.len(), 8);
    assert_eq!(s.user_cores("alice"), 4, "jobs {alices:?}");
    assert_eq!(s.user_cores("bob"), 4);
}

/// A user's cap counts its workflows' running instances too: a capped user cannot pass it by
/// submitting a workflow instead of a batch job.
#[test]
fn a_users_cap_holds_its_workflows_instances_too() {
    let d = common::scratch("users", "wf-cap");
    let mut s = open(&d);
    s.on_add_user("alice", false).expect("alice");
    s.on_limit_user("alice", CapChange::cores(2))
        .expect("capped");
    let mut agent = common::Agent::new(&mut s, 8);
    let mut sub = submission("wf", false);
    sub.text = "balancer = \"centralised\"\n[[task]]\nname = \"A\"\ninstances = \"1..=6\"\n\
                cost = \"1s\"\ncommand = \"true\"\n"
        .into();
    sub.hold = false;
    let wf = s.on_submit_as(sub, "alice").expect("workflow").job_id;
    let mut started = agent.beat(&mut s, &[]);
    for _ in 0..3 {
        started.extend(agent.beat(&mut s, &[]));
    }
    assert_eq!(started.len(), 2, "two one-core instances under a cap of 2");
    assert_eq!(s.user_cores("alice"), 2);
    // The ready instances say why they wait, as a capped batch job does (not blocked: running
    // work ends).
    let job = s.get_job(wf).expect("job");
    assert_eq!(
        (job.pending_reason.as_str(), job.blocked),
        (
            "its user's running work holds 2 of the 2 cores the user may hold at once \
             (`hetsched user limit`)",
            false
        )
    );
    // Two end: two more start, never more than the cap.
    let done: Vec<(u64, u32, bool)> = started.iter().map(|&(t, a)| (t, a, true)).collect();
    let mut next = agent.beat(&mut s, &done);
    for _ in 0..3 {
        next.extend(agent.beat(&mut s, &[]));
    }
    assert_eq!(next.len(), 2);
    assert_eq!(s.user_cores("alice"), 2);
    // A restart counts the running instances against the cap again.
    drop(s);
    let mut s = open(&d);
    assert_eq!(s.user_cores("alice"), 2);
    // Lifting the cap lets the rest start.
    s.on_limit_user("alice", CapChange::cores(0))
        .expect("no cap");
    let mut rest = agent.beat(&mut s, &[]);
    for _ in 0..3 {
        rest.extend(agent.beat(&mut s, &[]));
    }
    assert_eq!(rest.len(), 2, "the last two of six");
    assert_eq!(s.user_cores("alice"), 4);
    assert_eq!(s.get_job(wf).expect("job").owner, "alice");
}

/// A job the admin cancels for its user says so in every task (and a task the admin cancels by
/// index), across a restart, for batch jobs and workflows alike; a user cancelling its own job
/// reads `cancelled`.
#[test]
fn a_job_the_admin_cancels_says_so_and_keeps_saying_it_after_a_restart() {
    let d = common::scratch("users", "cancelled-by");
    let mut s = open(&d);
    s.on_add_user("alice", false).expect("alice");
    let batch = s
        .on_submit_as(submission("b", false), "alice")
        .expect("batch")
        .job_id;
    let mut wf = submission("wf", false);
    wf.text = "balancer = \"centralised\"\n[[task]]\nname = \"A\"\ninstances = 2\n\
               command = \"true\"\n"
        .into();
    let wf = s.on_submit_as(wf, "alice").expect("workflow").job_id;
    let own = s
        .on_submit_as(submission("c", false), "alice")
        .expect("own")
        .job_id;
    let some = s
        .on_submit_as(submission("d", false), "alice")
        .expect("some")
        .job_id;
    s.on_cancel_by(batch, ADMIN).expect("cancelled");
    s.on_cancel_by(wf, ADMIN).expect("cancelled");
    s.on_cancel_by(own, "alice").expect("cancelled");
    s.on_cancel_tasks_by(some, None, &[1], ADMIN)
        .expect("one task cancelled");
    let messages = |s: &State, job: u64| -> Vec<String> {
        s.tasks(job)
            .expect("tasks")
            .tasks
            .into_iter()
            .map(|t| t.message)
            .collect()
    };
    let check = |s: &State| {
        assert_eq!(messages(s, batch), vec!["cancelled by the admin"; 3]);
        assert_eq!(messages(s, wf), vec!["cancelled by the admin"; 2]);
        assert_eq!(messages(s, own), vec!["cancelled"; 3]);
        assert_eq!(messages(s, some), ["", "cancelled by the admin", ""]);
    };
    check(&s);
    drop(s);
    check(&open(&d));
}

/// The accounts (`hetsched usage`): what each owner's running work held is credited to it by
/// UTC day as heartbeats come (alice's two-core task for ~1.2 s: ~2.4 core-seconds, its memory
/// too) and the live nodes' capacity beside it, is read back with what accrued since the last
/// store, survives a restart once stored, and over the API the admin reads every owner's while a user reads its
/// own only; a span that ends before it starts is refused by field.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_accounts_credit_each_owner_what_its_running_work_held() {
    let d = common::scratch("users", "accounts");
    let config = ServerConfig {
        data_dir: d.to_path_buf(),
        ..Default::default()
    };
    let today = hetsched_server::accounting::day_of(hetsched_server::state::now_ns());
    let phase = std::time::Instant::now();
    let (alice_token, ran_s, phase_s) = {
        let mut s = open(&d);
        let alice_token = s.on_add_user("alice", false).expect("alice");
        s.on_add_user("bob", false).expect("bob");
        let mut agent = common::Agent::new(&mut s, 8);
        let mut sub = submission("two", false);
        sub.text = "[[application]]\nname = \"two\"\ntasks = 1\n[application.cpu]\n\
                    command = \"true\"\ncores = 2\nmemory = \"1GiB\"\n"
            .into();
        sub.hold = false;
        s.on_submit_as(sub, "alice").expect("alice's");
        let started = std::time::Instant::now();
        let sent = agent.beat(&mut s, &[]);
        assert_eq!(sent.len(), 1);
        std::thread::sleep(std::time::Duration::from_millis(1_200));
        agent.beat(&mut s, &[]);
        agent.beat(&mut s, &[(sent[0].0, sent[0].1, true)]);
        let ran_s = started.elapsed().as_secs_f64();
        let rows = s.usage_report(today, today, None).expect("report");
        let alice: Vec<_> = rows.iter().filter(|r| r.owner == "alice").collect();
        assert_eq!(alice.len(), 1, "{rows:?}");
        let held = alice[0].held;
        assert!(
            held.core_seconds > 2.0 * 1.0 && held.core_seconds <= 2.0 * ran_s,
            "alice's two cores for ~1.2 s: {held:?}"
        );
        assert!(
            (held.memory_byte_seconds / held.core_seconds - f64::from(1u32 << 29)).abs() < 1.0,
            "1 GiB beside every 2 cores: {held:?}"
        );
        assert_eq!(held.gpu_seconds, 0.0);
        assert!(rows.iter().all(|r| r.owner != "bob"), "bob ran nothing");
        // Stored every minute with a heartbeat's commit, and by a stopping server (this call).
        s.store_usage().expect("stored");
        let phase_s = phase.elapsed().as_secs_f64();
        // `/metrics` counts them since the server started.
        let text = common::assert_metrics(
            s,
            "hdas",
            &[
                "hetsched_user_core_seconds_total{user=\"alice\"} ",
                "hetsched_user_memory_byte_seconds_total{user=\"alice\"} ",
                "hetsched_capacity_core_seconds_total ",
            ],
        );
        let alice_line = text
            .lines()
            .find(|l| l.starts_with("hetsched_user_core_seconds_total{user=\"alice\"} "))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse::<f64>().ok());
        assert_eq!(alice_line, Some(held.core_seconds), "{text}");
        (alice_token, held.core_seconds, phase_s)
    };
    let (server, channel) = serve(config).await;
    let mut admin = api(&channel, &server.token);
    let mut alice = api(&channel, &alice_token);
    let read = |since_day, until_day| pb::UsageRequest {
        since_day,
        until_day,
    };
    let all = admin
        .usage(read(today, 0))
        .await
        .expect("the admin reads the accounts")
        .into_inner();
    assert_eq!(all.until_day, today, "0: today");
    let mine = alice
        .usage(read(today - 10, 0))
        .await
        .expect("alice reads hers")
        .into_inner();
    for reply in [&all, &mine] {
        let hers: Vec<_> = reply.rows.iter().filter(|r| r.owner == "alice").collect();
        assert_eq!(hers.len(), 1, "{:?}", reply.rows);
        assert!(
            (hers[0].core_seconds - ran_s).abs() < 1e-9,
            "kept through the restart: {} against {ran_s}",
            hers[0].core_seconds
        );
    }
    assert!(
        mine.rows
            .iter()
            .all(|r| r.owner == "alice" || r.owner.is_empty()),
        "a user reads its own account only (and the capacity): {:?}",
        mine.rows
    );
    // The capacity: the node's 8 cores from its registration on, while alice's 2 ran and
    // around (`ran_s` is her core-seconds).
    let offered: f64 = all
        .rows
        .iter()
        .filter(|r| r.owner.is_empty())
        .map(|r| r.core_seconds)
        .sum();
    assert!(
        offered >= 4.0 * ran_s && offered <= 8.0 * phase_s,
        "capacity {offered} core-seconds against alice's {ran_s} in {phase_s} s"
    );
    for (span, why) in [
        (read(today + 2, today + 1), "is after until_day"),
        (read(0, 0), "at most 3660 days at a time"),
    ] {
        let e = admin.usage(span).await.expect_err("refused");
        assert_eq!(e.code(), Code::InvalidArgument);
        assert!(e.message().starts_with("since_day:"), "{}", e.message());
        assert!(e.message().contains(why), "{}", e.message());
    }
    server.stop().await.expect("stopped");
}

/// A stopping server stores the accounts: what its agents' tasks held until the stop (the
/// admin's one-core task, still running, for ~1.1 s here) is read back after a restart, though
/// less than the minute between two stores passed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopping_server_stores_the_accounts() {
    let d = common::scratch("users", "accounts-stop");
    let config = ServerConfig {
        data_dir: d.to_path_buf(),
        // The test sends the heartbeats itself.
        heartbeat_interval: hetsched_core::input::Duration(60_000_000_000),
        dead_timeout: hetsched_core::input::Duration(600_000_000_000),
        ..Default::default()
    };
    let today = hetsched_server::accounting::day_of(hetsched_server::state::now_ns());
    let (server, channel) = serve(config.clone()).await;
    let (mut agent, node) = common::agent_of(&server, &channel, "n", 4, 8 << 30).await;
    let mut admin = api(&channel, &server.token);
    admin
        .submit(pb::SubmitRequest {
            origin: "job.toml".into(),
            text: "[[application]]\nname = \"one\"\ntasks = 1\n[application.cpu]\n\
                   command = \"true\"\n"
                .into(),
            ..Default::default()
        })
        .await
        .expect("submitted");
    let started = std::time::Instant::now();
    let sent = agent
        .heartbeat(common::heartbeat_request(node, &[], &[]))
        .await
        .expect("beat")
        .into_inner()
        .assignments;
    assert_eq!(sent.len(), 1);
    tokio::time::sleep(std::time::Duration::from_millis(1_100)).await;
    let running = [(sent[0].task_id, sent[0].attempt)];
    agent
        .heartbeat(common::heartbeat_request(node, &running, &[]))
        .await
        .expect("beat");
    server.stop().await.expect("stopped");
    let stopped_s = started.elapsed().as_secs_f64();
    // (The restarted server takes the task for running until its agent says otherwise, and
    // counts it from its start on; the time it was down is credited once the node beats.)
    let (server, channel) = serve(config).await;
    let reply = api(&channel, &server.token)
        .usage(pb::UsageRequest {
            since_day: today,
            until_day: 0,
        })
        .await
        .expect("read")
        .into_inner();
    let ran_s = started.elapsed().as_secs_f64();
    let admins: Vec<_> = reply.rows.iter().filter(|r| r.owner == ADMIN).collect();
    assert_eq!(admins.len(), 1, "{:?}", reply.rows);
    assert!(
        admins[0].core_seconds >= 1.1 && admins[0].core_seconds <= ran_s,
        "one core from its dispatch to the stop ({stopped_s} s) at least: {}",
        admins[0].core_seconds
    );
    server.stop().await.expect("stopped");
}

/// What ran while the server was down is in the accounts: the server crashed (no stop) while
/// alice's two-core task and the admin's one-core task ran, and was down for ~1.5 s. At the
/// node's first heartbeat after the restart, alice's task still runs — credited for the whole
/// time the server was down — and the admin's ended 0.5 s into it, by its agent's clock —
/// credited that far; the node's capacity is credited for the whole time. Before, the accounts
/// skipped the time the server was down.
#[test]
fn the_accounts_credit_what_ran_while_the_server_was_down() {
    use hetsched_server::state::now_ns;
    // How much later than `dispatched` the server may have dispatched (and the node have
    // registered) on a busy machine: the accounts start there, the test's spans here.
    const SLACK_S: f64 = 0.5;
    let d = common::scratch("users", "accounts-down");
    let today = hetsched_server::accounting::day_of(now_ns());
    let dispatched = now_ns();
    let (sent, node, crashed) = {
        let mut s = open(&d);
        s.on_add_user("alice", false).expect("alice");
        let agent = common::Agent::new(&mut s, 8);
        let mut sub = submission("two", false);
        sub.text = "[[application]]\nname = \"two\"\ntasks = 1\n[application.cpu]\n\
                    command = \"true\"\ncores = 2\n"
            .into();
        sub.hold = false;
        s.on_submit_as(sub, "alice").expect("alice's");
        let mut sub = submission("one", false);
        sub.text = JOB.replace("tasks = 3", "tasks = 1");
        sub.hold = false;
        s.on_submit(sub).expect("the admin's");
        let sent: Vec<(u64, u32)> = common::beat(&mut s, agent.node, &[], &[])
            .assignments
            .iter()
            .map(|a| (a.task_id, a.attempt))
            .collect();
        assert_eq!(sent.len(), 2);
        // Stored as every minute, then the crash: nothing more is written.
        s.store_usage().expect("stored");
        (sent, agent.node, now_ns())
    };
    std::thread::sleep(std::time::Duration::from_millis(1_500));
    let mut s = open(&d);
    let (alice_task, admin_task) = (sent[0], sent[1]);
    let req = pb::HeartbeatRequest {
        node_id: node,
        running: vec![pb::RunningTask {
            task_id: alice_task.0,
            attempt: alice_task.1,
            started_ns: dispatched,
            ..Default::default()
        }],
        results: vec![pb::TaskResult {
            task_id: admin_task.0,
            attempt: admin_task.1,
            success: true,
            started_ns: dispatched,
            finished_ns: crashed + 500_000_000,
            ..Default::default()
        }],
        identity: common::IDENTITY.into(),
        ..Default::default()
    };
    s.heartbeat(req).expect("beat");
    common::beat(&mut s, node, &[], &[(alice_task.0, alice_task.1, true)]);
    let span = (now_ns() - dispatched) as f64 / 1e9;
    let rows = s.usage_report(today, today + 1, None).expect("report");
    let sum = |owner: &str| -> f64 {
        rows.iter()
            .filter(|r| r.owner == owner)
            .map(|r| r.held.core_seconds)
            .sum()
    };
    let alice = sum("alice");
    assert!(
        alice >= 2.0 * (span - SLACK_S) && alice <= 2.0 * span,
        "alice's two cores all along ({span:.2} s): {alice:.3} core-seconds: {rows:?}"
    );
    let admin = sum(ADMIN);
    let ran = (crashed + 500_000_000 - dispatched) as f64 / 1e9;
    assert!(
        admin >= ran - SLACK_S && admin <= ran + 1e-6,
        "the admin's core until 0.5 s into the downtime ({ran:.2} s): {admin:.3}: {rows:?}"
    );
    let offered = sum(hetsched_server::accounting::CAPACITY);
    assert!(
        offered >= 8.0 * (span - SLACK_S) && offered <= 8.0 * span,
        "the node's 8 cores all along ({span:.2} s): {offered:.3}"
    );
}

/// `max_unfinished_tasks_per_user`: a user's submission that would take its unfinished tasks
/// (batch tasks and workflow instances, pending or running) past the cap is refused, naming it,
/// and nothing is stored; other users and the admin are not bound by it; tasks that end (here,
/// cancelled) give the room back. (Before, one user's loop of 1,000,000-task jobs grew the
/// server by about 118 MB a job.)
#[test]
fn a_user_past_its_unfinished_tasks_is_refused_and_others_are_not() {
    let d = common::scratch("users", "unfinished");
    let config = ServerConfig {
        data_dir: d.to_path_buf(),
        max_unfinished_tasks_per_user: 15,
        ..Default::default()
    };
    let mut s =
        State::open(&config, Store::open(&d.join("state.db")).expect("store")).expect("state");
    for u in ["alice", "bob"] {
        s.on_add_user(u, false).expect("user");
    }
    let first = s.on_submit_as(sweep(10), "alice").expect("10 of 15").job_id;
    let jobs = s.jobs().jobs.len();
    let e = s
        .on_submit_as(sweep(6), "alice")
        .expect_err("16 of 15")
        .to_string();
    assert!(
        e.contains("the job has 6 tasks, and user `alice` has 10 unfinished")
            && e.contains("15 unfinished tasks a user may have at once")
            && e.contains("max_unfinished_tasks_per_user"),
        "{e}"
    );
    // A workflow's instances count as tasks.
    let wf = Submission {
        origin: "wf.toml".into(),
        text: "[[task]]\nname = \"a\"\ninstances = 6\ncost = \"1s\"\ncommand = \"true\"\n".into(),
        ..sweep(1)
    };
    let e = s
        .on_submit_as(wf.clone(), "alice")
        .expect_err("a workflow of 6")
        .to_string();
    assert!(e.contains("wf.toml: the job has 6 tasks"), "{e}");
    assert_eq!(s.jobs().jobs.len(), jobs, "nothing stored");
    s.on_submit_as(sweep(5), "alice").expect("15 of 15");
    s.on_submit_as(sweep(15), "bob").expect("bob's own 15");
    s.on_submit(sweep(100)).expect("the admin's");
    s.on_cancel(first).expect("cancelled");
    s.on_submit_as(wf, "alice").expect("10 given back");
    // Zero is refused at the configuration.
    let zero = ServerConfig {
        max_unfinished_tasks_per_user: 0,
        ..config
    };
    assert!(
        zero.validate()
            .expect_err("0")
            .contains("max_unfinished_tasks_per_user must be at least 1")
    );
}

/// `resubmit` brings a job's ended tasks back to pending, so it is bounded by
/// `max_unfinished_tasks_per_user` as a submission is: before, a user at its cap could
/// resubmit tasks it had cancelled (or that failed) and hold any number unfinished at once.
/// Nothing changes when refused; the admin is not bound.
#[test]
fn a_resubmission_past_the_users_unfinished_tasks_is_refused() {
    let d = common::scratch("users", "resubmit-cap");
    let config = ServerConfig {
        data_dir: d.to_path_buf(),
        max_unfinished_tasks_per_user: 15,
        ..Default::default()
    };
    let mut s =
        State::open(&config, Store::open(&d.join("state.db")).expect("store")).expect("state");
    s.on_add_user("alice", false).expect("user");
    let all: Vec<u32> = (0..10).collect();
    let first = s.on_submit_as(sweep(10), "alice").expect("10 of 15").job_id;
    s.on_cancel_tasks(first, None, &all)
        .expect("its 10 cancelled");
    s.on_submit_as(sweep(10), "alice").expect("10 of 15 again");
    let e = s
        .on_resubmit_ended(first, true, true)
        .expect_err("20 of 15")
        .to_string();
    assert!(
        e.contains(&format!("resubmit job {first}: 10 tasks would run again"))
            && e.contains("user `alice` has 10 unfinished")
            && e.contains("max_unfinished_tasks_per_user"),
        "{e}"
    );
    let counts = s.job(first).expect("job").counts.expect("counts");
    assert_eq!(
        (counts.pending, counts.cancelled),
        (0, 10),
        "nothing changed"
    );
    // The admin's own jobs are not bound.
    let admins = s.on_submit(sweep(20)).expect("the admin's").job_id;
    s.on_cancel_tasks(admins, None, &(0..20).collect::<Vec<_>>())
        .expect("cancelled");
    s.on_submit(sweep(20)).expect("the admin's");
    assert_eq!(
        s.on_resubmit_ended(admins, false, true)
            .expect("resubmitted"),
        20
    );
}

/// Divisible jobs and topologies count against `max_unfinished_tasks_per_user` as batch
/// tasks and workflow instances do: an unfinished divisible job as one task (one stored job,
/// its input and its chunk rows), a running topology as its executors. Before, neither
/// counted, so a user at its cap could still submit them without end and fill the server's
/// store and disk. A refusal names the limit and stores nothing; ended work gives the room
/// back; the admin is not bound.
#[test]
fn divisible_jobs_and_topologies_count_against_the_users_unfinished_tasks() {
    let d = common::scratch("users", "unfinished-other-kinds");
    let config = ServerConfig {
        data_dir: d.to_path_buf(),
        max_unfinished_tasks_per_user: 10,
        ..Default::default()
    };
    let mut s =
        State::open(&config, Store::open(&d.join("state.db")).expect("store")).expect("state");
    s.on_add_user("alice", false).expect("user");
    let divisible = |name: &str| Submission {
        origin: format!("{name}.toml"),
        text: format!(
            "[[divisible]]\nname = \"{name}\"\nunits = 1000\ncommand = \"echo {{start}} {{end}}\"\n"
        ),
        workdir: "/".into(),
        ..Default::default()
    };
    let topology = |name: &str| hetsched_server::jobs::topology::TopologySubmission {
        origin: format!("{name}.toml"),
        text: crate::topology_kind::TOPOLOGY
            .replace("name = \"pipe\"", &format!("name = \"{name}\"")),
        ..crate::topology_kind::submission()
    };
    s.on_submit_as(sweep(5), "alice").expect("5 of 10");
    let rows = s
        .on_submit_as(divisible("rows"), "alice")
        .expect("6 of 10")
        .job_id;
    // The topology's four executors: 10 of 10.
    s.topology_submit_as(topology("pipe"), "alice")
        .expect("10 of 10");
    let jobs = s.jobs().jobs.len();
    let e = s
        .on_submit_as(divisible("more"), "alice")
        .expect_err("11 of 10")
        .to_string();
    assert!(
        e.contains(
            "more.toml: the divisible job counts as 1 task, and user `alice` has 10 unfinished"
        ) && e.contains("max_unfinished_tasks_per_user"),
        "{e}"
    );
    assert_eq!(s.jobs().jobs.len(), jobs, "nothing stored");
    let e = s
        .topology_submit_as(topology("other"), "alice")
        .expect_err("14 of 10")
        .to_string();
    assert!(
        e.contains("other.toml: the topology has 4 executors, and user `alice` has 10 unfinished")
            && e.contains("max_unfinished_tasks_per_user"),
        "{e}"
    );
    assert!(s.topology_show("other").is_err(), "nothing stored");
    // A batch job counts the others' too.
    let e = s
        .on_submit_as(sweep(1), "alice")
        .expect_err("11 of 10")
        .to_string();
    assert!(e.contains("user `alice` has 10 unfinished"), "{e}");
    // The admin is not bound.
    s.on_submit(divisible("admins")).expect("the admin's");
    s.topology_submit(topology("admins")).expect("the admin's");
    // Ended work gives the room back: the topology killed, then the divisible job cancelled.
    s.topology_kill("pipe").expect("killed");
    s.topology_submit_as(topology("other"), "alice")
        .expect("4 given back");
    s.on_cancel(rows).expect("cancelled");
    s.on_submit_as(divisible("more"), "alice")
        .expect("1 given back");
}

/// `text` with a comment line added that makes it `len` bytes long.
fn padded(text: &str, len: usize) -> String {
    let pad = len - text.len() - 2;
    format!("{text}#{}\n", "x".repeat(pad))
}

/// `max_stored_bytes_per_user`: each request is bounded by the gRPC message size and each file
/// by 2 MiB, but before, nothing bounded how many bytes a user kept stored. A user's
/// submission that would take the bytes of its stored jobs' and topologies' files (and
/// divisible inputs) above the cap is refused, naming the sizes and the limit, and stores
/// nothing; another user and the admin are not bound; a purge gives the bytes back; a restart
/// counts the same bytes.
#[test]
fn a_users_stored_submissions_are_bounded_in_bytes() {
    let d = common::scratch("users", "stored-bytes");
    let topology = |name: &str| hetsched_server::jobs::topology::TopologySubmission {
        origin: format!("{name}.toml"),
        text: crate::topology_kind::TOPOLOGY
            .replace("name = \"pipe\"", &format!("name = \"{name}\"")),
        ..crate::topology_kind::submission()
    };
    let t = topology("pipe").text.len() as u64;
    let config = ServerConfig {
        data_dir: d.to_path_buf(),
        max_stored_bytes_per_user: 2_000 + t + 500,
        ..Default::default()
    };
    let open =
        || State::open(&config, Store::open(&d.join("state.db")).expect("store")).expect("state");
    let mut s = open();
    s.on_add_user("alice", false).expect("alice");
    s.on_add_user("bob", false).expect("bob");
    let batch = |len: usize| Submission {
        text: padded(&sweep(1).text, len),
        ..sweep(1)
    };
    let divisible = Submission {
        origin: "rows.toml".into(),
        text: padded(
            "[[divisible]]\nname = \"rows\"\nunits = 10\ncommand = \"echo {start} {end}\"\n",
            1_000,
        ),
        workdir: "/".into(),
        ..Default::default()
    };
    let first = s.on_submit_as(batch(1_000), "alice").expect("1000").job_id;
    s.on_submit_as(divisible, "alice").expect("2000");
    s.topology_submit_as(topology("pipe"), "alice")
        .expect("with the topology's file");
    // Bytes, not counts: a small job still fits.
    s.on_submit_as(batch(400), "alice").expect("400 more");
    let jobs = s.jobs().jobs.len();
    let e = s
        .on_submit_as(batch(1_000), "alice")
        .expect_err("past the bytes")
        .to_string();
    let stored = 2_400 + t;
    assert!(
        e.contains(&format!(
            "job.toml: the job has 1 tasks and stores 1000 bytes (its file and input), and \
             user `alice`'s jobs and topologies store {stored} bytes already"
        )) && e.contains("max_stored_bytes_per_user"),
        "{e}"
    );
    assert_eq!(s.jobs().jobs.len(), jobs, "nothing stored");
    let e = s
        .topology_submit_as(topology("other"), "alice")
        .expect_err("a topology past the bytes")
        .to_string();
    assert!(e.contains("max_stored_bytes_per_user"), "{e}");
    assert!(s.topology_show("other").is_err(), "nothing stored");
    // Another user and the admin are not bound by alice's bytes.
    s.on_submit_as(batch(1_000), "bob").expect("bob's own");
    s.on_submit(batch(100_000)).expect("the admin's");
    // A purge gives the bytes back.
    s.on_cancel(first).expect("cancelled");
    s.on_purge(&PurgeSelection {
        job_ids: vec![first],
        ..Default::default()
    })
    .expect("purged");
    s.on_submit_as(batch(1_000), "alice")
        .expect("1000 given back");
    // A restart counts the same bytes.
    drop(s);
    let mut s = open();
    let e = s
        .on_submit_as(batch(1_000), "alice")
        .expect_err("still past the bytes")
        .to_string();
    assert!(e.contains(&format!("store {stored} bytes already")), "{e}");
    s.on_submit_as(batch(100), "alice").expect("what is left");
    // Zero is refused at the configuration.
    let zero = ServerConfig {
        max_stored_bytes_per_user: 0,
        ..Default::default()
    };
    assert_eq!(
        zero.validate(),
        Err("max_stored_bytes_per_user must be at least 1".to_string())
    );
}

/// `max_stored_tasks_per_user`: `max_unfinished_tasks_per_user` stops counting a task once it
/// ends, so a user who submitted large jobs and cancelled them at once grew the store without
/// bound (about 67 MB a million-task job). A user's submission that would take the tasks its
/// stored jobs keep, finished ones too, above the cap is refused, naming the count, the key and
/// `hetsched purge`; another user and the admin are not bound; a purge gives the room back; a restart counts the same tasks.
#[test]
fn a_users_stored_tasks_finished_ones_too_are_bounded() {
    let d = common::scratch("users", "stored-tasks");
    let config = ServerConfig {
        data_dir: d.to_path_buf(),
        max_stored_tasks_per_user: 25,
        ..Default::default()
    };
    let open =
        || State::open(&config, Store::open(&d.join("state.db")).expect("store")).expect("state");
    let mut s = open();
    s.on_add_user("alice", false).expect("alice");
    s.on_add_user("bob", false).expect("bob");
    let first = s.on_submit_as(sweep(10), "alice").expect("10").job_id;
    s.on_cancel(first).expect("cancelled");
    let workflow = Submission {
        origin: "wf.toml".into(),
        text: WORKFLOW.into(),
        workdir: "/".into(),
        ..Default::default()
    };
    s.on_submit_as(workflow, "alice").expect("3 instances");
    let divisible = Submission {
        origin: "rows.toml".into(),
        text: DIVISIBLE.into(),
        workdir: "/".into(),
        ..Default::default()
    };
    s.on_submit_as(divisible, "alice")
        .expect("a divisible job counts 1");
    let second = s
        .on_submit_as(sweep(10), "alice")
        .expect("24 stored")
        .job_id;
    s.on_cancel(second).expect("cancelled");
    // All cancelled but the workflow's and the divisible job's: nothing unfinished holds the
    // room, the stored rows do.
    let e = s
        .on_submit_as(sweep(2), "alice")
        .expect_err("past the stored tasks")
        .to_string();
    assert!(
        e.contains(
            "job.toml: the job has 2 tasks, and user `alice`'s jobs keep 24 tasks stored \
             (finished ones too, until purged): together above the 25 tasks a user's jobs may \
             keep stored (the server's `max_stored_tasks_per_user`); purge finished jobs"
        ),
        "{e}"
    );
    s.on_submit_as(sweep(1), "alice").expect("one fits");
    // Another user and the admin are not bound by alice's rows.
    s.on_submit_as(sweep(20), "bob").expect("bob's own");
    s.on_submit(sweep(100)).expect("the admin's");
    // A restart counts the same rows.
    drop(s);
    let mut s = open();
    let e = s
        .on_submit_as(sweep(1), "alice")
        .expect_err("still full")
        .to_string();
    assert!(e.contains("keep 25 tasks stored"), "{e}");
    // A purge gives the room back.
    s.on_purge(&PurgeSelection {
        job_ids: vec![first],
        ..Default::default()
    })
    .expect("purged");
    s.on_submit_as(sweep(10), "alice").expect("10 given back");
    let zero = ServerConfig {
        max_stored_tasks_per_user: 0,
        ..Default::default()
    };
    assert_eq!(
        zero.validate(),
        Err("max_stored_tasks_per_user must be at least 1".to_string())
    );
}

const DIVISIBLE: &str =
    "[[divisible]]\nname = \"rows\"\nunits = 100\ncommand = \"echo {start} {end}\"\n";
const WORKFLOW: &str = "[[task]]\nname = \"a\"\ninstances = 2\ncost = \"1s\"\noutputs = [\"x\"]\ncommand = \"true\"\n\n[[task]]\nname = \"b\"\ninstances = 1\ncost = \"1s\"\ninputs = [\"x\"]\ncommand = \"true\"\n";

/// A held submission of `text` with submission key `key`.
fn keyed(text: &str, key: &str) -> Submission {
    let mut sub = submission("keyed", false);
    sub.text = text.into();
    sub.key = key.into();
    sub
}

/// Submits `text` with key `key` as `who` (the admin or a user): (job id, existing).
fn submit_keyed(s: &mut State, who: &str, text: &str, key: &str) -> (u64, bool) {
    let done = s
        .on_submit_as(keyed(text, key), who)
        .unwrap_or_else(|e| panic!("{who}'s submission with key {key}: {e}"));
    (done.job_id, done.existing)
}

/// Submission keys are a namespace per user, as an idempotency key is per account: the same
/// key from alice, bob and the admin makes three jobs, of every kind; each one's retry returns
/// its own job and never names another's; another user's key with another file is no refusal,
/// the user's own key with another file is, for every kind; and all of it holds after a restart
/// and after a purge.
#[test]
fn a_submission_key_names_its_own_users_job_only_for_every_kind_and_across_a_restart() {
    let d = common::scratch("users", "keys");
    let mut s = open(&d);
    s.on_add_user("alice", false).expect("alice");
    s.on_add_user("bob", false).expect("bob");
    let kinds = [
        ("batch", JOB),
        ("divisible", DIVISIBLE),
        ("workflow", WORKFLOW),
    ];
    let who = ["alice", "bob", ADMIN];
    // ids[kind][user]
    let mut ids: Vec<Vec<u64>> = Vec::new();
    for (kind, text) in kinds {
        let key = &format!("run-7/{kind}");
        let mine: Vec<u64> = who
            .iter()
            .map(|w| {
                let (id, existing) = submit_keyed(&mut s, w, text, key);
                assert!(!existing, "{kind}: {w}'s first submission makes a job");
                id
            })
            .collect();
        assert!(
            mine[0] != mine[1] && mine[1] != mine[2] && mine[0] != mine[2],
            "{kind}: {mine:?}"
        );
        for (w, &id) in who.iter().zip(&mine) {
            assert_eq!(s.owner_of(id), *w, "{kind}");
            // A retry returns the user's own job, whoever else used the key.
            assert_eq!(
                submit_keyed(&mut s, w, text, key),
                (id, true),
                "{kind}: {w}"
            );
        }
        ids.push(mine);
    }
    // The same key with another file: refused for its own user's job only, naming that job.
    let other = format!("{JOB}# changed\n");
    let e = s
        .on_submit_as(keyed(&other, "run-7/batch"), "bob")
        .expect_err("bob's key names his job, submitted with another file");
    let msg = e.to_string();
    assert!(
        msg.contains(&format!("already names job {}", ids[0][1])),
        "{msg}"
    );
    assert!(!msg.contains(&format!("job {}", ids[0][0])), "{msg}");
    // So for a divisible job and a workflow (they returned the stored job, whatever the file).
    for (k, (kind, text)) in kinds.iter().enumerate().skip(1) {
        let e = s
            .on_submit_as(
                keyed(&format!("{text}# changed\n"), &format!("run-7/{kind}")),
                "bob",
            )
            .expect_err(kind);
        let msg = e.to_string();
        assert!(
            msg.contains(&format!(
                "submission key `run-7/{kind}` already names job {}, submitted with another file",
                ids[k][1]
            )),
            "{kind}: {msg}"
        );
    }
    // A key is one namespace across the kinds: the user's batch key with a workflow file (and
    // the other ways round) is refused, naming the job and its kind.
    for (k, (kind, _)) in kinds.iter().enumerate() {
        let (_, other_text) = kinds[(k + 1) % kinds.len()];
        let e = s
            .on_submit_as(keyed(other_text, &format!("run-7/{kind}")), "alice")
            .expect_err(kind);
        let msg = e.to_string();
        assert!(
            msg.contains(&format!(
                "submission key `run-7/{kind}` already names job {} (a {kind} job)",
                ids[k][0]
            )),
            "{msg}"
        );
        assert!(msg.contains("submitted with another file"), "{msg}");
        assert!(
            !msg.contains(&format!("job {}", ids[k][1]))
                && !msg.contains(&format!("job {}", ids[k][2])),
            "only alice's own jobs: {msg}"
        );
    }
    let (batch_only, existing) = submit_keyed(&mut s, "alice", JOB, "batch-only");
    assert!(!existing);
    for text in [DIVISIBLE, WORKFLOW] {
        let msg = s
            .on_submit_as(keyed(text, "batch-only"), "alice")
            .expect_err("a batch job's key with another kind's file")
            .to_string();
        assert!(
            msg.contains(&format!("already names job {batch_only} (a batch job)")),
            "{msg}"
        );
    }
    // Alice's key, unknown to bob, with bob's own file: bob's new job, nothing said of hers.
    let (alone, existing) = submit_keyed(&mut s, "alice", JOB, "alice-only");
    assert!(!existing);
    let (bobs, existing) = submit_keyed(&mut s, "bob", &other, "alice-only");
    assert!(!existing && bobs != alone, "{bobs} {alone}");
    assert_eq!(s.owner_of(bobs), "bob");

    // After a restart each key still names its own user's job.
    drop(s);
    let mut s = open(&d);
    for ((kind, text), mine) in kinds.iter().zip(&ids) {
        for (w, &id) in who.iter().zip(mine) {
            assert_eq!(
                submit_keyed(&mut s, w, text, &format!("run-7/{kind}")),
                (id, true),
                "{kind}: {w} after a restart"
            );
        }
    }
    assert_eq!(
        submit_keyed(&mut s, "alice", JOB, "alice-only"),
        (alone, true)
    );
    assert_eq!(
        submit_keyed(&mut s, "bob", &other, "alice-only"),
        (bobs, true)
    );

    // A purged job's key still names it, for its own user (its owner row went with the purge;
    // the key's owner stays with the job's tombstone).
    let (alices_batch, bobs_batch) = (ids[0][0], ids[0][1]);
    s.on_cancel(alices_batch).expect("cancelled");
    let purged = s
        .on_purge(&PurgeSelection {
            job_ids: vec![alices_batch],
            owner: Some("alice".into()),
            ..Default::default()
        })
        .expect("purged");
    assert_eq!(purged.purged, vec![alices_batch]);
    for _ in 0..2 {
        assert_eq!(
            submit_keyed(&mut s, "alice", JOB, "run-7/batch"),
            (alices_batch, true)
        );
        assert_eq!(
            submit_keyed(&mut s, "bob", JOB, "run-7/batch"),
            (bobs_batch, true)
        );
        drop(s);
        s = open(&d);
    }
}

/// A data directory from before keys were per user (one UNIQUE index on the key for the whole
/// server, no owner beside it) opens: each user's keyed job is still found by its own key, and
/// the same key from another user now makes that user's own job.
#[test]
fn a_store_with_one_namespace_of_keys_opens_and_then_scopes_them_per_user() {
    let d = common::scratch("users", "keys-migrate");
    let (mut a, mut r) = (Vec::new(), Vec::new());
    {
        let mut s = open(&d);
        s.on_add_user("alice", false).expect("alice");
        s.on_add_user("bob", false).expect("bob");
        for (i, text) in [JOB, DIVISIBLE, WORKFLOW].into_iter().enumerate() {
            a.push(submit_keyed(&mut s, "alice", text, &format!("k-{i}")).0);
            r.push(submit_keyed(&mut s, ADMIN, text, &format!("root-{i}")).0);
        }
    }
    // Back to the old schema: no owner columns, one UNIQUE index per table on the key alone
    // (workflows had none).
    let conn = rusqlite::Connection::open(d.join("state.db")).expect("sqlite");
    conn.execute_batch(
        "DROP INDEX jobs_owner_key; ALTER TABLE jobs DROP COLUMN owner;
         CREATE UNIQUE INDEX jobs_submission_key ON jobs(submission_key);
         DROP INDEX div_jobs_owner_key; ALTER TABLE div_jobs DROP COLUMN owner;
         CREATE UNIQUE INDEX div_jobs_submission_key ON div_jobs(submission_key);
         DROP INDEX wf_jobs_owner_key; ALTER TABLE wf_jobs DROP COLUMN owner;",
    )
    .expect("the old schema");
    drop(conn);
    for round in 0..2 {
        let mut s = open(&d);
        for (i, text) in [JOB, DIVISIBLE, WORKFLOW].into_iter().enumerate() {
            let key = format!("k-{i}");
            assert_eq!(
                submit_keyed(&mut s, "alice", text, &key),
                (a[i], true),
                "{round}: alice's key {key}"
            );
            let root = format!("root-{i}");
            assert_eq!(
                submit_keyed(&mut s, ADMIN, text, &root),
                (r[i], true),
                "{round}: the admin's key {root}"
            );
            if round == 0 {
                // Bob's first use of alice's key makes his own job; the old index is gone.
                let (b, existing) = submit_keyed(&mut s, "bob", text, &key);
                assert!(!existing && b != a[i], "{round}: {b}");
                assert_eq!(s.owner_of(b), "bob");
            }
        }
    }
    let conn = rusqlite::Connection::open(d.join("state.db")).expect("sqlite");
    let indexes: Vec<String> = conn
        .prepare("SELECT name FROM sqlite_master WHERE type = 'index' AND name LIKE '%key%' ORDER BY name")
        .expect("prepare")
        .query_map([], |r| r.get(0))
        .expect("query")
        .collect::<Result<_, _>>()
        .expect("names");
    assert_eq!(
        indexes,
        ["div_jobs_owner_key", "jobs_owner_key", "wf_jobs_owner_key"]
    );
}

/// Over the API too: alice's and bob's submissions with one key are two jobs, each retry
/// answers its own user's job, and no reply says anything of the other's.
#[tokio::test]
async fn users_submitting_one_key_over_the_api_each_get_their_own_job() {
    let dir = common::scratch("users", "keys-api");
    let config = ServerConfig {
        data_dir: dir.to_path_buf(),
        ..Default::default()
    };
    let (server, channel) = serve(config).await;
    let mut admin = api(&channel, &server.token);
    let alice_token = add_user(&mut admin, "alice", false).await;
    let bob_token = add_user(&mut admin, "bob", false).await;
    let (mut alice, mut bob) = (api(&channel, &alice_token), api(&channel, &bob_token));
    let send = |key: &str| pb::SubmitRequest {
        origin: "job.toml".into(),
        text: JOB.into(),
        hold: true,
        submission_key: key.into(),
        ..Default::default()
    };
    let a = alice.submit(send("K")).await.expect("alice's").into_inner();
    let b = bob.submit(send("K")).await.expect("bob's").into_inner();
    assert!(!a.existing && !b.existing);
    assert_ne!(a.job_id, b.job_id);
    for _ in 0..2 {
        let again = alice
            .submit(send("K"))
            .await
            .expect("alice's retry")
            .into_inner();
        assert_eq!((again.job_id, again.existing), (a.job_id, true));
        let again = bob
            .submit(send("K"))
            .await
            .expect("bob's retry")
            .into_inner();
        assert_eq!((again.job_id, again.existing), (b.job_id, true));
    }
    // Bob's key with another file is refused naming his own job only.
    let mut changed = send("K");
    changed.text = format!("{JOB}# changed\n");
    let (code, msg) = refused(bob.submit(changed).await);
    assert_eq!(code, Code::InvalidArgument, "{msg}");
    assert!(
        msg.contains(&format!("already names job {}", b.job_id)),
        "{msg}"
    );
    assert!(
        !msg.contains(&format!("job {}", a.job_id)) && !msg.contains("alice"),
        "{msg}"
    );
    let owners = owners(&mut admin, false).await;
    assert_eq!(
        owners,
        vec![
            (a.job_id, "alice".to_string()),
            (b.job_id, "bob".to_string())
        ]
    );
    server.stop().await.expect("stops");
}

/// Whether node `waits`'s wake-up counter moved since last looked at (it then looks again).
fn woken(waits: &mut tokio::sync::watch::Receiver<u64>) -> bool {
    let changed = waits.has_changed().unwrap_or(false);
    waits.borrow_and_update();
    changed
}

/// A raised or removed cap wakes the idle nodes the user's waiting work fits on — batch tasks
/// and workflow instances alike — instead of leaving the work to their next idle beat (up to a
/// minute), and until they beat the job says a node has room for it, not that the nodes are
/// busy. A user removed (its caps gone) wakes them too.
#[test]
fn raising_or_removing_a_users_cap_wakes_the_nodes_its_waiting_work_fits_on() {
    let d = common::scratch("users", "cap-wakes");
    let mut s = open(&d);
    s.on_add_user("alice", false).expect("alice");
    s.on_limit_user("alice", CapChange::cores(1))
        .expect("capped");
    let mut agent = common::Agent::new(&mut s, 4);
    let mut waits = s
        .await_work(agent.node, common::IDENTITY)
        .expect("its wake-ups");
    let job = s.on_submit_as(sweep(3), "alice").expect("alice's").job_id;
    assert_eq!(agent.beat(&mut s, &[]).len(), 1, "her cap of one core");
    assert!(
        agent.beat(&mut s, &[]).is_empty(),
        "nothing more under the cap"
    );
    woken(&mut waits);
    s.on_limit_user("alice", CapChange::cores(2))
        .expect("raised");
    assert!(woken(&mut waits), "the raised cap wakes the node");
    assert_eq!(
        s.get_job(job).expect("job").pending_reason,
        "resources: node `n` has room for it now: it starts at the node's next heartbeat"
    );
    assert_eq!(agent.beat(&mut s, &[]).len(), 1);
    // A lowered cap brings no work: nobody is woken.
    s.on_limit_user("alice", CapChange::cores(1))
        .expect("lowered");
    assert!(!woken(&mut waits), "a lowered cap wakes nobody");
    s.on_remove_user("alice").expect("removed");
    assert!(
        woken(&mut waits),
        "a removed user's caps go: the node is woken"
    );
    assert_eq!(agent.beat(&mut s, &[]).len(), 1, "the last of three");

    // A workflow's instances held back by the cap on the node they were placed on (alice's
    // tasks ended: the node is free).
    let done: Vec<(u64, u32, bool)> = agent.running.iter().map(|&(t, a)| (t, a, true)).collect();
    agent.beat(&mut s, &done);
    s.on_add_user("bob", false).expect("bob");
    s.on_limit_user("bob", CapChange::cores(1)).expect("capped");
    let mut sub = submission("wf", false);
    sub.text = "balancer = \"centralised\"\n[[task]]\nname = \"A\"\ninstances = \"1..=2\"\n\
                cost = \"1s\"\ncommand = \"true\"\n"
        .into();
    sub.hold = false;
    s.on_submit_as(sub, "bob").expect("workflow");
    let mut started = agent.beat(&mut s, &[]);
    started.extend(agent.beat(&mut s, &[]));
    assert_eq!(started.len(), 1, "one instance under bob's cap");
    woken(&mut waits);
    s.on_limit_user("bob", CapChange::cores(0)).expect("no cap");
    assert!(
        woken(&mut waits),
        "the lifted cap wakes the node holding the other"
    );
    let mut rest = agent.beat(&mut s, &[]);
    for _ in 0..3 {
        rest.extend(agent.beat(&mut s, &[]));
    }
    assert_eq!(rest.len(), 1, "the other instance");
}

/// A task that needs more than its user's cap alone is refused at submission, naming its need,
/// the cap and `hetsched user limit` (batch variants, multi-node tasks and workflow tasks); one
/// the admin's lowered cap strands later is listed blocked, saying so.
#[test]
fn work_past_its_users_cap_alone_is_refused_and_a_lowered_cap_blocks_what_waits() {
    let d = common::scratch("users", "beyond-cap");
    let mut s = open(&d);
    s.on_add_user("alice", false).expect("alice");
    s.on_limit_user("alice", CapChange::cores(1))
        .expect("capped");
    common::Agent::new(&mut s, 4);
    common::register(&mut s, "m", 4);
    let job = |body: &str| {
        let mut sub = submission("big", false);
        sub.text = format!("[[application]]\nname = \"big\"\ntasks = 2\n{body}");
        sub.hold = false;
        sub
    };
    let two_cores = "[application.cpu]\ncommand = \"true\"\ncores = 2\n";
    let err = s
        .on_submit_as(job(two_cores), "alice")
        .expect_err("past the cap")
        .to_string();
    assert!(
        err.contains(
            "job.toml: application `big`: a task needs 2 cores, more than the 1 core user \
             `alice` may hold at once (`hetsched user limit alice --max-cores`): its tasks \
             would never start"
        ),
        "{err}"
    );
    // The admin has no cap; another user neither.
    s.on_submit(job(two_cores)).expect("the admin's");
    // A multi-node task needs at least a core on each of its nodes.
    let err = s
        .on_submit_as(
            job("nodes = 2\n[application.cpu]\ncommand = \"true\"\ncores = 1\n"),
            "alice",
        )
        .expect_err("two nodes' cores")
        .to_string();
    assert!(
        err.contains("a task needs 2 cores, more than the 1 core"),
        "{err}"
    );
    // Memory alike (and GPUs: the same check).
    s.on_limit_user(
        "alice",
        CapChange {
            max_memory_bytes: Some(256 << 20),
            ..CapChange::default()
        },
    )
    .expect("memory cap");
    let err = s
        .on_submit_as(
            job("[application.cpu]\ncommand = \"true\"\nmemory = \"512MiB\"\n"),
            "alice",
        )
        .expect_err("past the memory cap")
        .to_string();
    assert!(
        err.contains(
            "a task needs 512 MiB of memory, more than the 256 MiB of memory user `alice` \
             may hold at once (`hetsched user limit alice --max-memory`)"
        ),
        "{err}"
    );
    // A workflow task likewise.
    let mut wf = submission("wf", false);
    wf.text = "balancer = \"centralised\"\n[[task]]\nname = \"A\"\ninstances = \"1..=2\"\n\
               cost = \"1s\"\ncores = 2\ncommand = \"true\"\n"
        .into();
    wf.hold = false;
    let err = s
        .on_submit_as(wf.clone(), "alice")
        .expect_err("past the cap")
        .to_string();
    assert!(
        err.contains("job.toml: task `A`: a task needs 2 cores, more than the 1 core user `alice`"),
        "{err}"
    );
    // Accepted under a higher cap and held; the admin lowers the cap; released, it is blocked.
    s.on_limit_user("alice", CapChange::cores(4))
        .expect("raised");
    let mut held = job(two_cores);
    held.hold = true;
    let id = s.on_submit_as(held, "alice").expect("fits").job_id;
    let mut wf_held = wf;
    wf_held.hold = false;
    let wf_id = s.on_submit_as(wf_held, "alice").expect("fits").job_id;
    s.on_limit_user("alice", CapChange::cores(1))
        .expect("lowered");
    s.on_hold(id, false).expect("released");
    let j = s.get_job(id).expect("job");
    assert_eq!(
        (j.pending_reason.as_str(), j.blocked),
        (
            "`big`: a task needs 2 cores, more than the 1 core user `alice` may hold at once \
             (`hetsched user limit alice --max-cores`): it waits until the admin raises the cap",
            true
        )
    );
    let w = s.get_job(wf_id).expect("workflow");
    assert!(
        w.blocked
            && w.pending_reason
                .starts_with("task `A`: a task needs 2 cores"),
        "{w:?}"
    );
}
