//! The dashboard's JSON API says what the CLI's `--output json` says, as the CLI says it: a
//! server started in-process with its HTTP listener, its agents faked by this test (heartbeats
//! sent here, and an `AgentLogs` listener of the test's own serving a task's output), and the
//! same facts read over gRPC — what `hetsched jobs|job|tasks|user list --output json` reads,
//! turned into JSON by the same builder ([`hetsched_server::json`]) — and over HTTP:
//!
//! - `null`, never a placeholder (`0`, `""`, `-1`), where the CLI's table shows `-`;
//! - `/api/tasks`' `total` is the same figure with or without a `state` filter;
//! - `/api/log` answers an empty output with an empty body, says where a page lies in the
//!   whole (and pages with `offset` and `limit`), and answers each refusal in its own status;
//! - the `Authorization` scheme is read whatever its case.

use crate::common;
use crate::http::{get_json, get_status, get_with};
use hetsched_proto as pb;
use hetsched_proto::client_client::ClientClient;
use hetsched_server::ServerConfig;
use serde_json::Value;
use std::net::SocketAddr;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;

type Api = ClientClient<InterceptedService<Channel, pb::TokenInterceptor>>;

fn api(channel: &Channel, token: &str) -> Api {
    ClientClient::with_interceptor(
        channel.clone(),
        pb::TokenInterceptor::new(token).expect("ascii token"),
    )
}

/// A server with an HTTP listener whose heartbeats this test sends (none of its own timers
/// declares the fake agents dead meanwhile).
async fn server(
    name: &str,
) -> (
    common::Scratch,
    hetsched_server::ServerHandle,
    Channel,
    SocketAddr,
    String,
) {
    let d = common::scratch("http-api", name);
    let config = ServerConfig {
        data_dir: d.to_path_buf(),
        http_listen: Some("127.0.0.1:0".parse().expect("addr")),
        heartbeat_interval: hetsched_core::input::Duration(60_000_000_000),
        dead_timeout: hetsched_core::input::Duration(600_000_000_000),
        ..Default::default()
    };
    let (server, channel, http, read_token) = common::serve_http(config).await;
    (d, server, channel, http, read_token)
}

/// Submits `text` (a job file) as the admin: the job's id.
async fn submit(admin: &mut Api, text: &str) -> u64 {
    admin
        .submit(pb::SubmitRequest {
            origin: "job.toml".into(),
            text: text.into(),
            ..Default::default()
        })
        .await
        .expect("submitted")
        .into_inner()
        .job_id
}

/// `/api/tasks`' tasks without the key only it adds (`id_text`, for JavaScript's numbers).
fn api_tasks(page: &Value) -> Vec<Value> {
    page["tasks"].as_array().expect("tasks").clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_writes_null_where_the_cli_does_for_the_same_jobs_tasks_and_users() {
    let (_d, server, channel, http, _) = server("null").await;
    let token = server.token.clone();
    let mut admin = api(&channel, &token);
    let job = submit(
        &mut admin,
        "[[application]]\nname = \"a\"\ntasks = 3\n[application.cpu]\ncommand = \"true\"\n",
    )
    .await;
    admin
        .cancel(pb::CancelRequest {
            job_id: job,
            indices: "2".into(),
            app: String::new(),
        })
        .await
        .expect("task 2 cancelled");

    // The tasks: two pending, one cancelled before it ran. None started, ran anywhere, or
    // exited: the CLI's `null`s, which the HTTP API writes too.
    let page = get_json(http, &format!("/api/tasks?job={job}"), &token).await;
    let tasks = api_tasks(&page);
    assert_eq!(tasks.len(), 3, "{page}");
    for t in &tasks {
        // A cancelled one has ended (`finished_ns`), without running.
        if t["state"] == "pending" {
            assert_eq!(
                (&t["finished_ns"], &t["finished"]),
                (&Value::Null, &Value::Null)
            );
        }
        for k in [
            "exit_code",
            "started_ns",
            "started",
            "node",
            "variant",
            "output",
            "executed_node",
            "fetch_ms",
            "usage",
        ] {
            assert_eq!(t[k], Value::Null, "{k} of {t}");
        }
    }
    assert_eq!(tasks[0]["state"], "pending");
    assert_eq!(tasks[0]["message"], Value::Null, "{}", tasks[0]);
    assert_eq!(tasks[2]["state"], "cancelled");
    // Why it ended without running: a script's key; pending ones have none.
    assert_eq!(
        (&tasks[2]["reason"], &tasks[2]["signal"]),
        (&Value::from("cancelled"), &Value::Null),
        "{}",
        tasks[2]
    );
    assert_eq!(
        (&tasks[0]["reason"], &tasks[0]["signal"]),
        (&Value::Null, &Value::Null)
    );
    // What `hetsched tasks --output json` writes of the same page, key for key.
    let listed = admin
        .list_tasks(pb::ListTasksRequest {
            job_id: job,
            ..Default::default()
        })
        .await
        .expect("tasks")
        .into_inner();
    let cli: Vec<Value> = listed
        .tasks
        .iter()
        .map(hetsched_server::json::task)
        .collect();
    assert_eq!(tasks, cli);

    // The job: not finished, no begin time.
    let jobs = get_json(http, "/api/jobs", &token).await;
    let j = &jobs["jobs"][0];
    // `divisible` is a divisible job's only: a batch job's is `null`, not `{}` (which the
    // dashboard took for a divisible load, listing its tasks as chunks).
    for k in [
        "finished_ns",
        "finished",
        "begin_ms",
        "begin",
        "duration_s",
        "divisible",
    ] {
        assert_eq!(j[k], Value::Null, "{k} of {j}");
    }
    let listed = admin
        .list_jobs(pb::ListJobsRequest::default())
        .await
        .expect("jobs")
        .into_inner();
    assert_eq!(j, &hetsched_server::json::job(&listed.jobs[0]));
    let one = get_json(http, &format!("/api/job?id={job}"), &token).await;
    let got = admin
        .get_job(pb::GetJobRequest {
            job_id: job,
            wait_ms: 0,
        })
        .await
        .expect("job")
        .into_inner();
    assert_eq!(one, hetsched_server::json::job(&got));
    assert_eq!(one["apps"][0]["mean_cpu_ms"], Value::Null, "{one}");

    // The users: without `[fair_share]` no fair-share usage (`null` both ways, never 0), and
    // `user list`'s rows carry the dashboard's words (`admin`, jobs pending and running).
    admin
        .add_user(pb::AddUserRequest {
            name: "alice".into(),
            ..Default::default()
        })
        .await
        .expect("alice");
    let users = get_json(http, "/api/users", &token).await;
    let listed = admin
        .list_users(pb::ListUsersRequest {})
        .await
        .expect("users")
        .into_inner();
    assert_eq!(listed.users.len(), 1, "user list lists users only");
    let alice = hetsched_server::json::user(&listed.users[0]);
    assert_eq!(users["users"][0], alice, "{users}");
    for k in ["fair_usage", "fair_usage_per_share"] {
        assert_eq!(alice[k], Value::Null, "{k}: {alice}");
    }
    assert_eq!(alice["admin"], false);
    let admins = &users["users"][1];
    assert_eq!(admins["admin"], true, "{users}");
    assert_eq!(
        (
            admins["pending_jobs"].as_u64(),
            admins["running_jobs"].as_u64()
        ),
        (Some(1), Some(0)),
        "{admins}"
    );
    server.stop().await.expect("stops");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tasks_total_is_the_listings_size_with_or_without_a_state_filter() {
    let (_d, server, channel, http, _) = server("total").await;
    let token = server.token.clone();
    let mut admin = api(&channel, &token);
    let one = "[[application]]\nname = \"a\"\ntasks = 10\n[application.cpu]\ncommand = \"true\"\n";
    let job = submit(&mut admin, one).await;
    submit(&mut admin, one).await;
    admin
        .cancel(pb::CancelRequest {
            job_id: job,
            indices: "3,7".into(),
            app: String::new(),
        })
        .await
        .expect("two cancelled");
    let total = |page: &Value| page["total"].as_u64();
    for (all, filtered, matching) in [
        (
            format!("/api/tasks?job={job}"),
            format!("/api/tasks?job={job}&state=cancelled"),
            2,
        ),
        (
            "/api/tasks?limit=1".to_string(),
            "/api/tasks?state=cancelled&limit=1".to_string(),
            1,
        ),
        (
            format!("/api/tasks?job={job}&limit=1"),
            format!("/api/tasks?job={job}&state=pending&limit=1"),
            1,
        ),
    ] {
        let all = get_json(http, &all, &token).await;
        let page = get_json(http, &filtered, &token).await;
        assert_eq!(
            page["tasks"].as_array().map(Vec::len),
            Some(matching),
            "{page}"
        );
        assert_eq!(total(&page), total(&all), "{filtered}: {page}");
    }
    assert_eq!(
        total(
            &get_json(
                http,
                &format!("/api/tasks?job={job}&state=cancelled"),
                &token
            )
            .await
        ),
        Some(10)
    );
    // A workflow's `pending` filter keeps its ready and waiting instances, as `hetsched tasks
    // --state pending` does (it listed none of them).
    let wf = submit(
        &mut admin,
        "[[task]]\nname = \"a\"\ninstances = 2\ncommand = \"true\"\noutputs = [\"m\"]\n\
         [[task]]\nname = \"b\"\ninstances = 2\ncommand = \"true\"\ninputs = [\"m\"]\n",
    )
    .await;
    let page = get_json(http, &format!("/api/tasks?job={wf}&state=pending"), &token).await;
    let mut states: Vec<String> = api_tasks(&page)
        .iter()
        .map(|t| t["state"].as_str().unwrap_or_default().to_string())
        .collect();
    states.sort();
    assert_eq!(states, ["ready", "ready", "waiting", "waiting"], "{page}");
    let page = get_json(http, &format!("/api/tasks?job={wf}&state=waiting"), &token).await;
    assert_eq!(api_tasks(&page).len(), 2, "{page}");
    server.stop().await.expect("stops");
}

/// The output this test's `AgentLogs` listener serves: a stdout of `OUT` bytes (a MiB and a
/// bit: longer than a page), and no stderr (the task printed nothing there).
const OUT: usize = (1 << 20) + 100;

fn out_byte(i: usize) -> u8 {
    b'a' + (i % 26) as u8
}

struct FakeLogs;

#[tonic::async_trait]
impl pb::agent_logs_server::AgentLogs for FakeLogs {
    async fn read_log(
        &self,
        req: tonic::Request<pb::AgentLogRequest>,
    ) -> Result<tonic::Response<pb::ReadLogReply>, tonic::Status> {
        let r = req.into_inner();
        if r.stderr {
            return Ok(tonic::Response::new(pb::ReadLogReply::default()));
        }
        // The agent's rule (`pb::log_page`) over an output held in memory.
        let size = OUT as u64;
        let start = if r.offset < 0 {
            size.saturating_sub(r.offset.unsigned_abs())
        } else {
            (r.offset as u64).min(size)
        };
        let limit = u64::from(match r.limit {
            0 => pb::LOG_DEFAULT_PAGE,
            n => n.min(pb::LOG_MAX_PAGE),
        });
        let end = start.saturating_add(limit).min(size);
        Ok(tonic::Response::new(pb::ReadLogReply {
            data: (start as usize..end as usize).map(out_byte).collect(),
            offset: start,
            size,
            exists: true,
            ..Default::default()
        }))
    }
}

/// A node `name` of `server` whose agent's log listener is at `log_port`, and which ran one
/// task of a new job (that requires it) to its end: the job's id.
async fn ran_on(
    server: &hetsched_server::ServerHandle,
    channel: &Channel,
    admin: &mut Api,
    name: &str,
    log_port: u16,
) -> u64 {
    let mut agent = pb::agent_client::AgentClient::with_interceptor(
        channel.clone(),
        common::agent_token(server),
    );
    let node = agent
        .register(pb::RegisterRequest {
            name: name.into(),
            cores: 2,
            memory_bytes: 1 << 30,
            core_speed: 1.0,
            identity: common::IDENTITY.into(),
            log_port: log_port.into(),
            work_dir: "/work".into(),
            ..Default::default()
        })
        .await
        .expect("registered")
        .into_inner()
        .node_id;
    let job = submit(
        admin,
        &format!(
            "[[application]]\nname = \"a\"\ntasks = 1\nrequires = [\"node:{name}\"]\n\
             [application.cpu]\ncommand = \"true\"\n"
        ),
    )
    .await;
    let beat = |results: &[(u64, u32, bool)]| {
        let mut b = common::heartbeat_request(node, &[], results);
        b.log_port = log_port.into();
        b.work_dir = "/work".into();
        b
    };
    let sent = agent
        .heartbeat(beat(&[]))
        .await
        .expect("beat")
        .into_inner()
        .assignments;
    assert_eq!(sent.len(), 1, "the task starts on {name}");
    agent
        .heartbeat(beat(&[(sent[0].task_id, sent[0].attempt, true)]))
        .await
        .expect("its result");
    job
}

/// `GET path` with the client token: the status, the headers (lower-case names) and the body.
async fn get_log(
    addr: SocketAddr,
    path: &str,
    token: &str,
) -> (u16, Vec<(String, String)>, Vec<u8>) {
    let raw = crate::http::exchange(
        addr,
        &format!(
            "GET {path} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\n\
             Connection: close\r\n\r\n"
        ),
    )
    .await;
    let at = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a head");
    let head = String::from_utf8_lossy(&raw[..at]).into_owned();
    let mut lines = head.lines();
    let code = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let headers = lines
        .filter_map(|l| l.split_once(": "))
        .map(|(k, v)| (k.to_ascii_lowercase(), v.to_string()))
        .collect();
    (code, headers, raw[at + 4..].to_vec())
}

fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_log_is_the_output_as_it_is_paged_with_its_place_and_each_refusal_in_its_status() {
    let (_d, server, channel, http, _) = server("log").await;
    let token = server.token.clone();
    let mut admin = api(&channel, &token);
    let logs = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let log_port = logs.local_addr().expect("addr").port();
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(pb::agent_logs_server::AgentLogsServer::new(FakeLogs))
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(logs)),
    );
    let job = ran_on(&server, &channel, &mut admin, "n", log_port).await;

    // Nothing printed on stderr: nothing in the body, as `hetsched log` prints nothing.
    let (code, headers, body) = get_log(
        http,
        &format!("/api/log?job={job}&task=a:0&stream=stderr"),
        &token,
    )
    .await;
    assert_eq!(code, 200, "{}", String::from_utf8_lossy(&body));
    assert!(body.is_empty(), "{}", String::from_utf8_lossy(&body));
    assert_eq!(header(&headers, "x-hetsched-truncated"), Some("false"));
    assert_eq!(header(&headers, "x-hetsched-log-size"), Some("0"));

    // A stdout longer than a page: its last MiB, said to be cut, with where and of what.
    let (code, headers, body) =
        get_log(http, &format!("/api/log?job={job}&task=a:0"), &token).await;
    assert_eq!(code, 200);
    assert_eq!(body.len(), 1 << 20);
    assert_eq!(body[0], out_byte(100));
    assert_eq!(header(&headers, "x-hetsched-truncated"), Some("true"));
    assert_eq!(
        header(&headers, "x-hetsched-log-size"),
        Some(OUT.to_string().as_str())
    );
    assert_eq!(header(&headers, "x-hetsched-log-offset"), Some("100"));
    // The rest, paged with `offset` and `limit`.
    let (code, headers, body) = get_log(
        http,
        &format!("/api/log?job={job}&task=a:0&offset=0&limit=100"),
        &token,
    )
    .await;
    assert_eq!(code, 200);
    assert_eq!(body, (0..100).map(out_byte).collect::<Vec<_>>());
    assert_eq!(header(&headers, "x-hetsched-log-offset"), Some("0"));
    assert_eq!(header(&headers, "x-hetsched-truncated"), Some("true"));
    let (code, headers, body) = get_log(
        http,
        &format!("/api/log?job={job}&task=a:0&offset=-10"),
        &token,
    )
    .await;
    assert_eq!((code, body.len()), (200, 10));
    assert_eq!(header(&headers, "x-hetsched-truncated"), Some("true"));

    // Each refusal in its status, naming the parameter where the request is malformed.
    let auth = format!("Authorization: Bearer {token}\r\n");
    for (path, code, said) in [
        (format!("/api/log?job={job}&task=yes:abc"), 400, "task"),
        (
            format!("/api/log?job={job}&task=a:0&offset=x"),
            400,
            "offset: ",
        ),
        (
            format!("/api/log?job={job}&task=a:0&limit=0"),
            400,
            "limit: ",
        ),
        (
            format!("/api/log?job={job}&task=a:5"),
            404,
            "none with index 5",
        ),
        (
            format!("/api/log?job={job}&task=a:0&attempt=3"),
            404,
            "no attempt 3",
        ),
        ("/api/log?job=99&task=0".to_string(), 404, "99"),
    ] {
        let raw = get_with(http, &path, &auth).await;
        assert!(
            raw.starts_with(&format!("HTTP/1.1 {code} ")),
            "{path}: {raw}"
        );
        let body = raw.split_once("\r\n\r\n").map_or("", |(_, b)| b);
        assert!(
            body.starts_with(said) || body.contains(said),
            "{path}: {body}"
        );
    }
    // Another user's job: 403.
    let alice = admin
        .add_user(pb::AddUserRequest {
            name: "alice".into(),
            ..Default::default()
        })
        .await
        .expect("alice")
        .into_inner()
        .token;
    let (code, body) =
        get_status(http, &format!("/api/log?job={job}&task=a:0"), Some(&alice)).await;
    assert_eq!(code, 403, "{body}");

    // A node whose agent cannot be reached now (nothing listens at its log port): 503.
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        l.local_addr().expect("addr").port()
    };
    let gone = ran_on(&server, &channel, &mut admin, "gone", closed).await;
    let (code, body) =
        get_status(http, &format!("/api/log?job={gone}&task=a:0"), Some(&token)).await;
    assert_eq!(code, 503, "{body}");
    assert!(body.contains("gone"), "{body}");
    server.stop().await.expect("stops");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bearer_scheme_is_read_whatever_its_case() {
    let (_d, server, _channel, http, read_token) = server("bearer").await;
    let token = server.token.clone();
    for scheme in ["Bearer", "bearer", "BEARER", "bEaReR"] {
        for (path, t) in [
            ("/api/me", &token),
            ("/metrics", &read_token),
            ("/", &token),
        ] {
            let raw = get_with(http, path, &format!("Authorization: {scheme} {t}\r\n")).await;
            assert!(raw.starts_with("HTTP/1.1 200"), "{scheme} {path}: {raw}");
        }
        let raw = get_with(
            http,
            "/api/me",
            &format!("Authorization: {scheme} nope\r\n"),
        )
        .await;
        assert!(raw.starts_with("HTTP/1.1 401"), "{scheme}: {raw}");
        // Minting a login link reads the header too.
        let exchange = async {
            let mut s = tokio::net::TcpStream::connect(http).await.expect("connect");
            s.write_all(
                format!(
                    "POST /api/ticket HTTP/1.1\r\nHost: {http}\r\nAuthorization: {scheme} \
                     {token}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                )
                .as_bytes(),
            )
            .await
            .expect("send");
            let mut raw = String::new();
            s.read_to_string(&mut raw).await.expect("read");
            raw
        };
        let raw = tokio::time::timeout(Duration::from_secs(10), exchange)
            .await
            .expect("answered");
        assert!(raw.starts_with("HTTP/1.1 200"), "{scheme} ticket: {raw}");
    }
    // Another scheme is no token.
    let raw = get_with(
        http,
        "/api/me",
        &format!("Authorization: Basic {token}\r\n"),
    )
    .await;
    assert!(raw.starts_with("HTTP/1.1 401"), "{raw}");
    server.stop().await.expect("stops");
}
