//! The gRPC surface of a server started in-process on loopback: the health service answers
//! without a token; every other call needs the right one.

use hetsched_proto as pb;
use hetsched_proto::client_client::ClientClient;
use hetsched_server::ServerConfig;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::{HealthCheckRequest, health_client::HealthClient};

use crate::common::{agent_token, client_token, scratch, serve};

/// Stops `server` while `held` (a task waiting on a call the server holds open) waits, and
/// asserts the stop answered the call at once rather than at the hold's end.
async fn stop_answers_at_once<T>(
    server: hetsched_server::ServerHandle,
    held: tokio::task::JoinHandle<T>,
    call: &str,
) {
    let stopped = std::time::Instant::now();
    server.stop().await.expect("stops");
    let _ = held.await.expect("the held call's task");
    assert!(
        stopped.elapsed() < std::time::Duration::from_secs(3),
        "a held {call} does not hold the shutdown ({:?})",
        stopped.elapsed()
    );
}

/// Submits a 100-unit divisible job ("rows") as a client.
async fn submit_rows(
    channel: tonic::transport::Channel,
    server: &hetsched_server::ServerHandle,
) -> pb::SubmitReply {
    ClientClient::with_interceptor(channel, client_token(server))
        .submit(pb::SubmitRequest {
            origin: "rows.toml".into(),
            text: "[[divisible]]\nname = \"rows\"\nunits = 100\ncommand = \"echo {start} {end}\"\n"
                .into(),
            workdir: "/".into(),
            ..Default::default()
        })
        .await
        .expect("submitted")
        .into_inner()
}

#[tokio::test]
async fn health_is_open_and_everything_else_needs_the_token() {
    let dir = scratch("service", "health");
    let (server, channel) = serve(ServerConfig {
        data_dir: dir.to_path_buf(),
        ..Default::default()
    })
    .await;

    let health = HealthClient::new(channel.clone())
        .check(HealthCheckRequest {
            service: "hetsched.v1.Client".into(),
        })
        .await
        .expect("health answers without a token")
        .into_inner();
    assert_eq!(health.status, ServingStatus::Serving as i32);

    let err = ClientClient::new(channel.clone())
        .list_jobs(pb::ListJobsRequest::default())
        .await
        .expect_err("no token");
    assert_eq!(err.code(), tonic::Code::Unauthenticated);

    let wrong = pb::TokenInterceptor::new("not-the-token").expect("ascii");
    let err = ClientClient::with_interceptor(channel.clone(), wrong)
        .list_jobs(pb::ListJobsRequest::default())
        .await
        .expect_err("wrong token");
    assert_eq!(err.code(), tonic::Code::Unauthenticated);

    let right = client_token(&server);
    let jobs = ClientClient::with_interceptor(channel, right)
        .list_jobs(pb::ListJobsRequest::default())
        .await
        .expect("the right token is accepted")
        .into_inner();
    assert!(jobs.jobs.is_empty());
    let on_disk = std::fs::read_to_string(hetsched_server::token_path(&dir)).expect("token file");
    assert_eq!(on_disk.trim(), server.token);
    server.stop().await.expect("stops");
}

/// A refusal quotes at most a short prefix of a string the client sent (64 characters and `…`,
/// `hetsched_core::text::clip`), naming the field: before, a 1 MiB task-state filter or placer
/// came back whole in the error (and into the server's logs), up to the gRPC limit.
#[tokio::test]
async fn a_refusal_quotes_only_a_short_prefix_of_what_the_client_sent() {
    use hetsched_proto::topology_client_client::TopologyClientClient;
    let dir = scratch("service", "clipped");
    let (server, channel) = serve(ServerConfig {
        data_dir: dir.to_path_buf(),
        ..Default::default()
    })
    .await;
    let big = "z".repeat(1 << 20);
    let short = |e: tonic::Status, field: &str| {
        let m = e.message().to_string();
        assert!(
            m.len() < 1024 && m.contains(field) && m.contains(&format!("{}…", "z".repeat(64))),
            "{} bytes: {}",
            m.len(),
            m.chars().take(300).collect::<String>()
        );
    };
    let e = ClientClient::with_interceptor(channel.clone(), client_token(&server))
        .list_tasks(pb::ListTasksRequest {
            states: vec![big.clone()],
            ..Default::default()
        })
        .await
        .expect_err("no such state");
    short(e, "unknown task state `");
    let mut topologies = TopologyClientClient::with_interceptor(channel, client_token(&server));
    let e = topologies
        .submit_topology(pb::SubmitTopologyRequest {
            origin: "pipe.toml".into(),
            text: "name = \"pipe\"\n[[component]]\nname = \"numbers\"\nkind = \"spout\"\n\
                   parallelism = 1\ncpu = 50.0\nbuiltin = \"sequence-spout\"\n"
                .into(),
            base_dir: "/".into(),
            placer: big.clone(),
            max_utilisation: 0.9,
            ..Default::default()
        })
        .await
        .expect_err("no such placer");
    short(e, "unknown placer `");
    let e = topologies
        .kill_topology(pb::TopologyName { name: big.clone() })
        .await
        .expect_err("no such topology");
    short(e, "no topology named `");
    server.stop().await.expect("stops");
}

/// An agent with room for a chunk and nothing to take is not answered at once (it would poll):
/// its `NextChunk` is held open, answered the moment a divisible job gives it a chunk, and
/// answered at once when the server stops.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_agents_chunk_ask_is_held_open_and_answered_when_a_job_arrives() {
    use hetsched_proto::divisible_client::DivisibleClient;
    use std::time::{Duration, Instant};
    let dir = scratch("service", "held-ask");
    let (server, channel) = serve(ServerConfig {
        data_dir: dir.to_path_buf(),
        // Held asks last a quarter of this, at most 5 s.
        dead_timeout: hetsched_core::input::Duration(40_000_000_000),
        ..Default::default()
    })
    .await;
    let agent = DivisibleClient::with_interceptor(channel.clone(), agent_token(&server));
    let ask = |name: &str| {
        let mut agent = agent.clone();
        let req = pb::NextChunkRequest {
            name: name.into(),
            identity: crate::common::IDENTITY.into(),
            memory_bytes: 1 << 30,
            incarnation: format!("{name}-1"),
            room: true,
            ..Default::default()
        };
        tokio::spawn(async move {
            let t = Instant::now();
            let reply = agent.next_chunk(req).await.map(|r| r.into_inner());
            (reply, t.elapsed())
        })
    };

    let _a = crate::common::agent_of(&server, &channel, "a", 2, 1 << 30).await;
    let held = ask("a");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(
        !held.is_finished(),
        "an ask with nothing to hand out is held open"
    );
    let submitted = Instant::now();
    let job = submit_rows(channel.clone(), &server).await;
    let (reply, waited) = held.await.expect("ask task");
    let reply = reply.expect("answered");
    assert_eq!(
        reply.orders.iter().map(|o| o.job_id).collect::<Vec<_>>(),
        vec![job.job_id],
        "the held ask takes the new job's first chunk"
    );
    assert!(
        submitted.elapsed() < Duration::from_millis(3000) && waited < Duration::from_millis(4500),
        "answered when the job arrived ({:?} after the submission, {waited:?} held), not at the \
         hold's end (5 s)",
        submitted.elapsed()
    );

    // A second agent, not in the job's calibration plan, is held; stopping answers it at once.
    let _b = crate::common::agent_of(&server, &channel, "b", 2, 1 << 30).await;
    let second = ask("b");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!second.is_finished(), "not b's turn: held open");
    stop_answers_at_once(server, second, "ask").await;
}

/// `GetJob` with `wait_ms` is held until the job ends — here, a cancellation — so a client waits
/// for a job without polling; a job that has not ended is answered when the wait runs out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_job_with_wait_ms_answers_when_the_job_ends_not_before() {
    use std::time::{Duration, Instant};
    let dir = scratch("service", "job-wait");
    let (server, channel) = serve(ServerConfig {
        data_dir: dir.to_path_buf(),
        ..Default::default()
    })
    .await;
    let mut api = ClientClient::with_interceptor(channel, client_token(&server));
    // No agent: the job cannot run, it only ends when cancelled.
    let job = api
        .submit(pb::SubmitRequest {
            origin: "one.toml".into(),
            text: "[[application]]\nname = \"one\"\ntasks = 1\n[application.cpu]\ncommand = [\"true\"]\n"
                .into(),
            workdir: "/".into(),
            ..Default::default()
        })
        .await
        .expect("submitted")
        .into_inner()
        .job_id;

    let t = Instant::now();
    let j = api
        .get_job(pb::GetJobRequest {
            job_id: job,
            wait_ms: 800,
        })
        .await
        .expect("answered")
        .into_inner();
    assert_eq!(j.state, "pending");
    assert!(
        t.elapsed() >= Duration::from_millis(700),
        "held for the wait ({:?})",
        t.elapsed()
    );

    let mut waiter = api.clone();
    let held = tokio::spawn(async move {
        let t = Instant::now();
        let j = waiter
            .get_job(pb::GetJobRequest {
                job_id: job,
                wait_ms: 30_000,
            })
            .await
            .map(|r| r.into_inner().state);
        (j, t.elapsed())
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!held.is_finished(), "held while the job runs");
    api.cancel(pb::CancelRequest {
        job_id: job,
        ..Default::default()
    })
    .await
    .expect("cancelled");
    let (state, waited) = held.await.expect("task");
    assert_eq!(state.expect("answered"), "cancelled");
    assert!(
        waited < Duration::from_secs(10),
        "answered when the job ended, not at the end of the wait ({waited:?})"
    );
    server.stop().await.expect("stops");
}

/// An idle agent keeps one `AwaitWork` open; it is answered as soon as the server has work for
/// its node — a job while it has free cores, a kill of its task — so work does not wait for the
/// next periodic heartbeat. A one-task job wakes one node (the one with the most free cores),
/// not every node; a caller that is not the node's agent is refused; stopping answers at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_waiting_for_work_is_woken_by_a_job_and_by_a_kill_not_before() {
    use hetsched_proto::agent_client::AgentClient;
    use std::time::{Duration, Instant};
    let dir = scratch("service", "await-work");
    let (server, channel) = serve(ServerConfig {
        data_dir: dir.to_path_buf(),
        // Periodic heartbeats play no part here: the test sends them itself.
        heartbeat_interval: hetsched_core::input::Duration(60_000_000_000),
        dead_timeout: hetsched_core::input::Duration(600_000_000_000),
        ..Default::default()
    })
    .await;
    let agent = AgentClient::with_interceptor(channel.clone(), agent_token(&server));
    let mut api = ClientClient::with_interceptor(channel, client_token(&server));
    let register = |name: &str, cores: u32| {
        let mut agent = agent.clone();
        let req = pb::RegisterRequest {
            name: name.into(),
            cores,
            memory_bytes: 8 << 30,
            core_speed: 1.0,
            identity: format!("{name}-identity"),
            ..Default::default()
        };
        async move {
            agent
                .register(req)
                .await
                .expect("registered")
                .into_inner()
                .node_id
        }
    };
    let small = register("small", 2).await;
    let big = register("big", 8).await;
    let wait = |node_id: u32, identity: &str, seen: u64| {
        let mut agent = agent.clone();
        let req = pb::AwaitWorkRequest {
            node_id,
            identity: identity.into(),
            seen,
        };
        tokio::spawn(async move {
            let t = Instant::now();
            (agent.await_work(req).await, t.elapsed())
        })
    };

    let refused = wait(big, "not-its-identity", 0).await.expect("task").0;
    assert_eq!(
        refused.expect_err("another identity").code(),
        tonic::Code::FailedPrecondition
    );

    // A first wait, having seen nothing of this server, is answered at once with its counter
    // (a restarted server meets its agents so); the next, with that counter, is held.
    let counter = |w: tokio::task::JoinHandle<(
        Result<tonic::Response<pb::AwaitWorkReply>, tonic::Status>,
        Duration,
    )>| async move {
        let (r, took) = w.await.expect("task");
        assert!(took < Duration::from_secs(1), "answered at once");
        r.expect("answered").into_inner().wake
    };
    let small_seen = counter(wait(small, "small-identity", 0)).await;
    let big_seen = counter(wait(big, "big-identity", 0)).await;
    let small_wait = wait(small, "small-identity", small_seen);
    let big_wait = wait(big, "big-identity", big_seen);
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert!(
        !small_wait.is_finished() && !big_wait.is_finished(),
        "no work: both held open"
    );
    let submitted = Instant::now();
    let job = api
        .submit(pb::SubmitRequest {
            origin: "one.toml".into(),
            text: "[[application]]\nname = \"one\"\ntasks = 1\n[application.cpu]\ncommand = [\"sleep\", \"60\"]\n"
                .into(),
            workdir: "/".into(),
            ..Default::default()
        })
        .await
        .expect("submitted")
        .into_inner()
        .job_id;
    let (woken, _) = big_wait.await.expect("task");
    let first = woken.expect("answered").into_inner().wake;
    assert_ne!(first, big_seen, "the wake-up count moved");
    assert!(
        submitted.elapsed() < Duration::from_secs(5),
        "woken by the submission ({:?}), not at the hold's end (25 s)",
        submitted.elapsed()
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !small_wait.is_finished(),
        "a one-task job wakes one node, the one with the most free cores"
    );

    // The big node beats and takes the task; a later cancel wakes it to kill the task.
    let mut beat = agent.clone();
    let reply = beat
        .heartbeat(pb::HeartbeatRequest {
            node_id: big,
            identity: "big-identity".into(),
            ..Default::default()
        })
        .await
        .expect("heartbeat")
        .into_inner();
    assert_eq!(reply.assignments.len(), 1, "the woken node takes the task");
    let big_wait = wait(big, "big-identity", first);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!big_wait.is_finished(), "nothing new for it: held");
    api.cancel(pb::CancelRequest {
        job_id: job,
        ..Default::default()
    })
    .await
    .expect("cancelled");
    let (woken, waited) = big_wait.await.expect("task");
    assert_ne!(woken.expect("answered").into_inner().wake, first);
    assert!(
        waited < Duration::from_secs(5),
        "woken by the cancel ({waited:?})"
    );

    // A wake-up that came between two calls is not lost: `seen` behind the count answers at once.
    let (again, waited) = wait(big, "big-identity", first).await.expect("task");
    again.expect("answered");
    assert!(
        waited < Duration::from_secs(1),
        "answered at once ({waited:?})"
    );

    stop_answers_at_once(server, small_wait, "wait").await;
}

/// An idle cluster costs the server a call per agent every few seconds, not a poll every
/// interval: a node is told to beat seldom while it has nothing to report (a quarter of the
/// dead timeout), and the stream-worker sync of an agent running no worker is held open until
/// the server places a worker on it — then answered at once, with the worker — or the server
/// stops.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_agent_beats_seldom_and_its_worker_sync_is_held_until_a_topology_needs_it() {
    use hetsched_proto::agent_client::AgentClient;
    use hetsched_proto::topology_agent_client::TopologyAgentClient;
    use hetsched_proto::topology_client_client::TopologyClientClient;
    use std::time::{Duration, Instant};
    let dir = scratch("service", "held-sync");
    let (server, channel) = serve(ServerConfig {
        data_dir: dir.to_path_buf(),
        // Held syncs are looked at again every quarter of this (at most 5 s).
        dead_timeout: hetsched_core::input::Duration(40_000_000_000),
        ..Default::default()
    })
    .await;
    let registered = AgentClient::with_interceptor(channel.clone(), agent_token(&server))
        .register(pb::RegisterRequest {
            name: "n".into(),
            cores: 4,
            memory_bytes: 8 << 30,
            core_speed: 1.0,
            identity: "n-identity".into(),
            ..Default::default()
        })
        .await
        .expect("registered")
        .into_inner();
    assert_eq!(registered.heartbeat_interval_ms, 500);
    assert_eq!(
        registered.idle_heartbeat_interval_ms, 60_000,
        "idle nodes beat every 60 s: their open AwaitWork says they live"
    );
    let agent = TopologyAgentClient::with_interceptor(channel.clone(), agent_token(&server));
    let sync = |hold_ms: u64| {
        let mut agent = agent.clone();
        let req = pb::SyncWorkersRequest {
            node: "n".into(),
            identity: "n-identity".into(),
            cores: 4,
            workers: vec![],
            hold_ms,
            ..Default::default()
        };
        tokio::spawn(async move {
            let t = Instant::now();
            let reply = agent.sync_workers(req).await.map(|r| r.into_inner());
            (reply, t.elapsed())
        })
    };
    // Without a hold the answer comes at once, as before.
    let (reply, _) = sync(0).await.expect("sync task");
    assert!(reply.expect("answered").workers.is_empty());

    let held = sync(60_000);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(
        !held.is_finished(),
        "a sync with nothing to answer is held open"
    );
    let submitted = Instant::now();
    TopologyClientClient::with_interceptor(channel.clone(), client_token(&server))
        .submit_topology(pb::SubmitTopologyRequest {
            origin: "pipe.toml".into(),
            text: "name = \"pipe\"\n[[component]]\nname = \"numbers\"\nkind = \"spout\"\n\
                   parallelism = 1\ncpu = 50.0\nbuiltin = \"sequence-spout\"\n"
                .into(),
            base_dir: "/".into(),
            placer: "one-phase".into(),
            max_utilisation: 0.9,
            ..Default::default()
        })
        .await
        .expect("topology submitted");
    let (reply, waited) = held.await.expect("sync task");
    let reply = reply.expect("answered");
    assert_eq!(
        reply
            .workers
            .iter()
            .map(|w| w.topology.as_str())
            .collect::<Vec<_>>(),
        vec!["pipe"],
        "the held sync names the new topology's worker"
    );
    assert!(
        submitted.elapsed() < Duration::from_millis(3000) && waited < Duration::from_millis(4500),
        "answered when the worker was placed ({:?} after the submission, {waited:?} held), not \
         at the next look (5 s) or the hold's end (25 s)",
        submitted.elapsed()
    );

    // Killed: the next held sync waits again; stopping the server answers it at once.
    TopologyClientClient::with_interceptor(channel, client_token(&server))
        .kill_topology(pb::TopologyName {
            name: "pipe".into(),
        })
        .await
        .expect("killed");
    let second = sync(60_000);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!second.is_finished(), "no worker for the node: held open");
    stop_answers_at_once(server, second, "sync").await;
}

/// `idle_heartbeat_interval` is read from the configuration, is not bounded by the dead timeout
/// (an idle node lives by its open `AwaitWork`), and is never below `heartbeat_interval`; 0 is
/// refused at start with the field's name.
#[tokio::test]
async fn an_idle_heartbeat_may_exceed_the_dead_timeout_and_zero_is_refused() {
    let c = ServerConfig::parse("s.toml", "idle_heartbeat_interval = \"3s\"\n").expect("parses");
    assert_eq!(c.idle_heartbeat(), Ok(std::time::Duration::from_secs(3)));
    let c = ServerConfig::parse("s.toml", "idle_heartbeat_interval = \"1m\"\n").expect("parses");
    assert_eq!(
        c.idle_heartbeat(),
        Ok(std::time::Duration::from_secs(60)),
        "beyond the 10 s dead timeout"
    );
    let c = ServerConfig::parse(
        "s.toml",
        "heartbeat_interval = \"2s\"\nidle_heartbeat_interval = \"1s\"\n",
    )
    .expect("parses");
    assert_eq!(
        c.idle_heartbeat(),
        Ok(std::time::Duration::from_secs(2)),
        "never below heartbeat_interval"
    );
    assert_eq!(
        ServerConfig::default().idle_heartbeat(),
        Ok(std::time::Duration::from_secs(60))
    );
    let dir = scratch("service", "idle-beat");
    let err = match hetsched_server::start(ServerConfig {
        data_dir: dir.to_path_buf(),
        listen: "127.0.0.1:0".parse().expect("addr"),
        idle_heartbeat_interval: Some(hetsched_core::input::Duration(0)),
        ..Default::default()
    })
    .await
    {
        Ok(_) => panic!("a zero idle heartbeat must be refused"),
        Err(e) => e.to_string(),
    };
    assert!(err.contains("idle_heartbeat_interval"), "{err}");
}

/// What a start refuses, `--check` refuses too (the check passed them): a queue without
/// `server` beside a wildcard `listen`, an HTTP listener on the gRPC port, a queue's `server`
/// that is no http(s) URL and an `idle_timeout` below 1 s (written into its agents' command
/// line, which they refuse or turn into 1 s).
#[test]
fn what_a_start_refuses_the_configuration_check_refuses() {
    let queue = "[[allocation]]\nname = \"cpu\"\nmanager = \"slurm\"\ntime_limit = \"10m\"\n";
    for (text, says) in [
        (
            format!("listen = \"0.0.0.0:43620\"\n{queue}"),
            "allocation[0].server: the server listens on a wildcard address (0.0.0.0:43620)",
        ),
        (
            "listen = \"127.0.0.1:43300\"\nhttp_listen = \"127.0.0.1:43300\"\n".to_string(),
            "http_listen (127.0.0.1:43300) takes the port of listen (127.0.0.1:43300)",
        ),
        (
            "listen = \"0.0.0.0:43300\"\nhttp_listen = \"127.0.0.1:43300\"\n".to_string(),
            "http_listen (127.0.0.1:43300) takes the port of listen",
        ),
        (
            format!("{queue}server = \"ftp://x\"\n"),
            "allocation[0].server: `ftp://x`: write the URL",
        ),
        (
            format!("{queue}idle_timeout = \"0s\"\n"),
            "allocation[0].idle_timeout: at least 1s",
        ),
    ] {
        let c = ServerConfig::parse("s.toml", &text).expect("parses");
        let e = c.validate().expect_err(&text);
        assert!(e.starts_with(says), "{text}\n{e}");
    }
    let fine = format!("listen = \"0.0.0.0:43620\"\n{queue}server = \"http://head:43620\"\n");
    assert_eq!(
        ServerConfig::parse("s.toml", &fine)
            .expect("parses")
            .validate(),
        Ok(())
    );
}

/// `max_attempts = 0` would read as "never re-run a lost task" and act as 1: refused, naming
/// the field; 1 is the least.
#[test]
fn max_attempts_of_zero_is_refused() {
    let zero = ServerConfig::parse("s.toml", "max_attempts = 0\n").expect("parses");
    let e = zero.validate().expect_err("0");
    assert!(e.contains("max_attempts must be at least 1"), "{e}");
    let one = ServerConfig::parse("s.toml", "max_attempts = 1\n").expect("parses");
    assert_eq!(one.validate(), Ok(()));
    // So is a container binding of no slots, which acted as one.
    let none = ServerConfig::parse("s.toml", "binding = \"container\"\nbinding_slots = 0\n")
        .expect("parses");
    let e = none.validate().expect_err("0 slots");
    assert!(e.contains("binding_slots must be at least 1"), "{e}");
}

/// A heartbeat of 0 would have agents with work beat without pause, and one at or above the
/// dead timeout would have busy nodes declared dead between two beats: both are refused, naming
/// the fields; so is a dead timeout too short to mean anything.
/// `[fair_share]`: the half-life defaults to Slurm's 7 days, is at least a minute (usage decays
/// once a second), and an unknown field is refused with its line.
#[test]
fn fair_share_takes_a_half_life_of_at_least_a_minute() {
    let c = ServerConfig::parse("s.toml", "[fair_share]\n").expect("parses");
    assert_eq!(
        c.fair_share.map(|f| f.half_life.0),
        Some(7 * 24 * 3600 * 1_000_000_000)
    );
    assert_eq!(c.validate(), Ok(()));
    let c = ServerConfig::parse("s.toml", "[fair_share]\nhalf_life = \"10s\"\n").expect("parses");
    let e = c.validate().expect_err("too short");
    assert!(
        e.contains("fair_share.half_life (10s) must be at least 1m"),
        "{e}"
    );
    let e = ServerConfig::parse("s.toml", "[fair_share]\nhalflife = \"1d\"\n")
        .expect_err("unknown field");
    assert!(e.to_string().contains("s.toml:2"), "{e}");
    assert!(
        ServerConfig::default().fair_share.is_none(),
        "off by default"
    );
}

#[test]
fn a_heartbeat_must_be_at_least_10ms_and_below_the_dead_timeout() {
    let refused = |text: &str, says: &str| {
        let c = ServerConfig::parse("s.toml", text).expect("parses");
        let e = c.validate().expect_err(text);
        assert!(e.contains(says), "{text}: {e}");
    };
    refused(
        "heartbeat_interval = \"0s\"\n",
        "heartbeat_interval (0s) must be at least 10ms",
    );
    refused(
        "heartbeat_interval = \"10s\"\ndead_timeout = \"10s\"\n",
        "heartbeat_interval (10s) must be below dead_timeout (10s)",
    );
    refused(
        "dead_timeout = \"50ms\"\nheartbeat_interval = \"10ms\"\n",
        "dead_timeout (50ms) must be at least 100ms",
    );
    for good in [
        "",
        "heartbeat_interval = \"10ms\"\ndead_timeout = \"100ms\"\n",
        "heartbeat_interval = \"9s\"\n",
    ] {
        let c = ServerConfig::parse("s.toml", good).expect("parses");
        assert_eq!(c.validate(), Ok(()), "{good}");
    }
}

/// An agent that holds no chunk may ask to be held long (`hold_ms`, here beyond the dead
/// timeout, so it calls once where it used to call every quarter of the dead timeout): the call
/// stays open as asked — the server looks at it every quarter of the dead timeout meanwhile —
/// and a job submitted much later hands it a chunk at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_held_chunk_ask_keeps_its_agent_alive_past_the_dead_timeout() {
    use hetsched_proto::divisible_client::DivisibleClient;
    use std::time::{Duration, Instant};
    let dir = scratch("service", "long-ask");
    let (server, channel) = serve(ServerConfig {
        data_dir: dir.to_path_buf(),
        // Looks every 250 ms; an agent silent for 1 s is lost.
        dead_timeout: hetsched_core::input::Duration(1_000_000_000),
        heartbeat_interval: hetsched_core::input::Duration(100_000_000),
        ..Default::default()
    })
    .await;
    let _a = crate::common::agent_of(&server, &channel, "a", 2, 1 << 30).await;
    let mut agent = DivisibleClient::with_interceptor(channel.clone(), agent_token(&server));
    let held = tokio::spawn(async move {
        let t = Instant::now();
        let reply = agent
            .next_chunk(pb::NextChunkRequest {
                name: "a".into(),
                identity: crate::common::IDENTITY.into(),
                memory_bytes: 1 << 30,
                incarnation: "a-1".into(),
                room: true,
                hold_ms: 20_000,
                ..Default::default()
            })
            .await
            .map(|r| r.into_inner());
        (reply, t.elapsed())
    });
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert!(
        !held.is_finished(),
        "held past the dead timeout and the look period, as asked"
    );
    let job = submit_rows(channel, &server).await;
    let (reply, waited) = held.await.expect("ask task");
    assert_eq!(
        reply
            .expect("answered")
            .orders
            .iter()
            .map(|o| o.job_id)
            .collect::<Vec<_>>(),
        vec![job.job_id],
        "the long-held ask takes the new job's first chunk"
    );
    assert!(
        waited < Duration::from_secs(10),
        "answered on the job ({waited:?})"
    );
    server.stop().await.expect("stops");
}

/// Registers an idle 2-core agent `name` over `channel` (identity `NAME-identity`) and, if
/// `wait`, holds its `AwaitWork` open in a task (as an idle agent does); returns the node id
/// and that task.
async fn idle_agent(
    channel: tonic::transport::Channel,
    server: &hetsched_server::ServerHandle,
    name: &str,
    wait: bool,
) -> (
    u32,
    Option<tokio::task::JoinHandle<Result<tonic::Response<pb::AwaitWorkReply>, tonic::Status>>>,
) {
    let mut agent =
        hetsched_proto::agent_client::AgentClient::with_interceptor(channel, agent_token(server));
    let identity = format!("{name}-identity");
    let node_id = agent
        .register(pb::RegisterRequest {
            name: name.into(),
            cores: 2,
            memory_bytes: 1 << 30,
            core_speed: 1.0,
            identity: identity.clone(),
            ..Default::default()
        })
        .await
        .expect("registered")
        .into_inner()
        .node_id;
    if !wait {
        return (node_id, None);
    }
    // As an agent does: its first wait (having seen nothing of this server) is answered at
    // once with the counter, and the next, with that counter, is held.
    let seen = agent
        .await_work(pb::AwaitWorkRequest {
            node_id,
            identity: identity.clone(),
            seen: 0,
        })
        .await
        .expect("first wait")
        .into_inner()
        .wake;
    let held = tokio::spawn(async move {
        agent
            .await_work(pb::AwaitWorkRequest {
                node_id,
                identity,
                seen,
            })
            .await
    });
    (node_id, Some(held))
}

/// An idle agent lives by its open `AwaitWork` call, not by heartbeats: with a 1 s dead
/// timeout and no beat after its registration, a node whose agent holds the call stays alive
/// (`nodes` shows it heard from now), one whose agent holds nothing is declared dead, and once
/// the holder's connection closes (its agent killed) it is declared dead a dead timeout later.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_node_lives_by_its_open_wait_for_work_and_dies_when_its_connection_closes() {
    use std::time::{Duration, Instant};
    let dir = scratch("service", "await-alive");
    let (server, channel) = serve(ServerConfig {
        data_dir: dir.to_path_buf(),
        dead_timeout: hetsched_core::input::Duration(1_000_000_000),
        ..Default::default()
    })
    .await;
    // The holder speaks over its own connection, which the test closes as a killed agent's.
    let own = pb::endpoint(&format!("http://{}", server.addr), None)
        .expect("endpoint")
        .connect()
        .await
        .expect("connect");
    let (_, held) = idle_agent(own, &server, "holder", true).await;
    let held = held.expect("waiting");
    idle_agent(channel.clone(), &server, "silent", false).await;
    let mut api = ClientClient::with_interceptor(channel, client_token(&server));
    let mut nodes = async || {
        let list = api
            .list_nodes(pb::ListNodesRequest::default())
            .await
            .expect("nodes")
            .into_inner()
            .nodes;
        let get = |name: &str| {
            list.iter()
                .find(|n| n.name == name)
                .map(|n| (n.alive, n.last_seen_ms))
                .expect("listed")
        };
        (get("holder"), get("silent"))
    };
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let (holder_now, silent_now) = nodes().await;
    assert_eq!(
        holder_now,
        (true, 0),
        "2.5 s without a beat: the node whose agent waits for work lives, heard from now"
    );
    assert!(!silent_now.0, "the node whose agent holds nothing is dead");
    assert!(!held.is_finished(), "no work: the call is held open");

    // The agent is killed: its call and connection go away.
    held.abort();
    let closed = Instant::now();
    loop {
        let ((alive, _), _) = nodes().await;
        if !alive {
            break;
        }
        assert!(
            closed.elapsed() < Duration::from_secs(4),
            "declared dead within the dead timeout (and a reaper tick) of the connection closing"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        closed.elapsed() >= Duration::from_millis(900),
        "not before the dead timeout has run from the close ({:?})",
        closed.elapsed()
    );
}

/// A host that vanishes (no FIN) leaves its agent's `AwaitWork` open on the server's side until
/// the kernel's TCP keepalive closes the connection. A vanished host cannot be staged inside one
/// network stack (the peer's kernel answers the probes), so this checks what the server asks of
/// its kernel: on the server's side of an idle agent's connection the keepalive timer runs
/// (`/proc/net/tcp`: timer 2 on an established socket), due within half a dead timeout of the
/// last traffic — and the sizing of probes makes the kernel give up about one dead timeout after.
/// The agent's side probes too ([`pb::endpoint`]).
#[cfg(target_os = "linux")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_kernel_probes_an_idle_agents_connection_from_half_a_dead_timeout() {
    use std::time::Duration;
    let dead = Duration::from_secs(4);
    let (idle, interval, probes) = hetsched_server::service::tcp_keepalive(dead);
    assert_eq!(
        (idle, interval, probes),
        (Duration::from_secs(2), Duration::from_secs(1), 2)
    );
    assert!(
        idle + interval * probes <= dead,
        "closed within a dead timeout of silence"
    );
    assert_eq!(
        hetsched_server::service::tcp_keepalive(Duration::from_millis(500)),
        (Duration::from_secs(1), Duration::from_secs(1), 2),
        "the kernel counts whole seconds: at least one"
    );
    let dir = scratch("service", "await-keepalive");
    let (server, channel) = serve(ServerConfig {
        data_dir: dir.to_path_buf(),
        dead_timeout: hetsched_core::input::Duration(dead.as_nanos() as u64),
        ..Default::default()
    })
    .await;
    let (_, held) = idle_agent(channel, &server, "idle", true).await;
    let held = held.expect("waiting");
    // The server's side of every connection to it: local port = the server's, established.
    // Each line: sl local rem st tx:rx tr:when … ; the times are in USER_HZ (100) ticks.
    let port = format!(":{:04X}", server.addr.port());
    // `side`: 1 = sockets whose local address is the server's (its side), 2 = whose remote one is.
    let timers = |side: usize| {
        let table = std::fs::read_to_string("/proc/net/tcp").expect("/proc/net/tcp");
        table
            .lines()
            .skip(1)
            .filter_map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                (f.len() > 5 && f[side].ends_with(&port) && f[3] == "01").then(|| {
                    let (tr, when) = f[5].split_once(':').expect("tr:when");
                    (
                        tr.to_string(),
                        u64::from_str_radix(when, 16).expect("hex ticks"),
                    )
                })
            })
            .collect::<Vec<_>>()
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    let seen = timers(1);
    assert!(!seen.is_empty(), "the agent's connection is listed");
    for (tr, when) in &seen {
        assert_eq!(
            tr, "02",
            "the keepalive timer runs on an idle connection: {seen:?}"
        );
        assert!(
            *when <= 200,
            "first probe within half the dead timeout (2 s): {seen:?}"
        );
    }
    // The agent's side (remote port = the server's) probes too, from its own idle time, so an
    // agent whose server host vanished reconnects instead of holding a dead call.
    let agent_side = timers(2);
    assert!(!agent_side.is_empty(), "the agent's end is listed");
    for (tr, when) in &agent_side {
        assert_eq!(tr, "02", "the agent's kernel probes too: {agent_side:?}");
        assert!(
            *when <= pb::CLIENT_KEEPALIVE_IDLE.as_secs() * 100,
            "first probe within {:?}: {agent_side:?}",
            pb::CLIENT_KEEPALIVE_IDLE
        );
    }
    assert!(!held.is_finished(), "no work: the call is held open");
}
