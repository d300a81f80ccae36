//! The dashboard's users and accounts (`/api/users`, `/api/usage`) of a server started
//! in-process with its HTTP listener and `[fair_share]`: alice's two-core task runs for ~1.2 s
//! on an agent this test beats for, and the JSON says what each user holds, may hold and waits
//! for, and what each owner's work held, as the `Usage` RPC does; the admin and the read-only
//! token read every owner, a user its own row and the capacity; no token is 401, a bad day or
//! span 400 naming its parameter.

use crate::common;
use crate::http::{get_json, get_status as get};
use hetsched_proto as pb;
use hetsched_proto::client_client::ClientClient;
use hetsched_server::ServerConfig;
use hetsched_server::accounting::{date, today};
use hetsched_server::config::FairShareConfig;
use serde_json::Value;
use std::time::{Duration, Instant};
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;

type Api = ClientClient<InterceptedService<Channel, pb::TokenInterceptor>>;

fn api(channel: &Channel, token: &str) -> Api {
    ClientClient::with_interceptor(
        channel.clone(),
        pb::TokenInterceptor::new(token).expect("ascii token"),
    )
}

/// The row of `name` in `/api/users`' `users`.
fn row<'a>(users: &'a Value, name: &str) -> &'a Value {
    users["users"]
        .as_array()
        .and_then(|a| a.iter().find(|u| u["name"] == name))
        .unwrap_or_else(|| panic!("no row of {name}: {users}"))
}

/// The names of the rows of `list` (`/api/users`' `users` or `/api/usage`'s) under `key`.
fn names(list: &Value, key: &str) -> Vec<String> {
    list.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|u| u[key].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_shows_each_users_caps_holdings_jobs_and_accounts_to_whom_may_read_them() {
    let d = common::scratch("dashboard-users", "panel");
    let config = ServerConfig {
        data_dir: d.to_path_buf(),
        http_listen: Some("127.0.0.1:0".parse().expect("addr")),
        fair_share: Some(FairShareConfig {
            half_life: hetsched_core::input::Duration(3_600_000_000_000),
        }),
        // The test sends the heartbeats itself.
        heartbeat_interval: hetsched_core::input::Duration(60_000_000_000),
        dead_timeout: hetsched_core::input::Duration(600_000_000_000),
        ..Default::default()
    };
    let (server, channel, http, read_token) = common::serve_http(config).await;
    let admin_token = server.token.clone();
    let mut admin = api(&channel, &admin_token);
    let add = |name: &str, max_cores, shares| pb::AddUserRequest {
        name: name.into(),
        rotate: false,
        max_cores,
        max_gpus: None,
        max_memory_bytes: None,
        shares,
        max_priority: None,
    };
    let alice_token = admin
        .add_user(add("alice", Some(4), Some(2)))
        .await
        .expect("alice")
        .into_inner()
        .token;
    let bob_token = admin
        .add_user(add("bob", None, None))
        .await
        .expect("bob")
        .into_inner()
        .token;
    let (mut agent, node) = common::agent_of(&server, &channel, "n", 8, 16 << 30).await;
    // The admin's job waits, held; alice's runs on two cores and 1 GiB.
    admin
        .submit(pb::SubmitRequest {
            origin: "held.toml".into(),
            text: "[[application]]\nname = \"later\"\ntasks = 1\n[application.cpu]\n\
                   command = \"true\"\n"
                .into(),
            hold: true,
            ..Default::default()
        })
        .await
        .expect("the admin's");
    api(&channel, &alice_token)
        .submit(pb::SubmitRequest {
            origin: "two.toml".into(),
            text: "[[application]]\nname = \"two\"\ntasks = 1\n[application.cpu]\n\
                   command = \"true\"\ncores = 2\nmemory = \"1GiB\"\n"
                .into(),
            ..Default::default()
        })
        .await
        .expect("alice's");
    let started = Instant::now();
    let sent = agent
        .heartbeat(common::heartbeat_request(node, &[], &[]))
        .await
        .expect("beat")
        .into_inner()
        .assignments;
    assert_eq!(sent.len(), 1, "alice's task starts");
    let task = (sent[0].task_id, sent[0].attempt);

    // While it runs: what each user holds, may hold and waits for.
    let users = get_json(http, "/api/users", &admin_token).await;
    assert_eq!(
        names(&users["users"], "name"),
        ["alice", "bob", "admin"],
        "{users}"
    );
    assert_eq!(users["fair_share"]["half_life_s"], 3600, "{users}");
    let alice = row(&users, "alice");
    assert_eq!(alice["admin"], false);
    assert_eq!(alice["shares"], 2);
    assert_eq!(alice["max_cores"], 4);
    assert!(
        alice["max_memory_bytes"].is_null() && alice["max_gpus"].is_null(),
        "no cap: {alice}"
    );
    assert_eq!(alice["cores"], 2, "{alice}");
    assert_eq!(alice["memory_bytes"], 1u64 << 30, "{alice}");
    assert_eq!(alice["gpus"], 0);
    assert_eq!(
        (
            alice["pending_jobs"].as_u64(),
            alice["running_jobs"].as_u64()
        ),
        (Some(0), Some(1)),
        "{alice}"
    );
    assert!(
        alice["fair_usage"].as_f64().is_some(),
        "fair share is on: {alice}"
    );
    assert_eq!(
        alice["fair_usage_per_share"].as_f64(),
        alice["fair_usage"].as_f64().map(|f| f / 2.0),
        "{alice}"
    );
    let bob = row(&users, "bob");
    assert_eq!(
        (&bob["cores"], &bob["max_cores"], &bob["shares"]),
        (&Value::from(0), &Value::Null, &Value::from(1)),
        "{bob}"
    );
    let the_admin = row(&users, "admin");
    assert_eq!(the_admin["admin"], true);
    assert_eq!(
        (
            the_admin["pending_jobs"].as_u64(),
            the_admin["cores"].as_u64()
        ),
        (Some(1), Some(0)),
        "the admin's held job waits: {the_admin}"
    );
    // The read-only token sees what the admin sees; a user its own row only.
    let read_users = get_json(http, "/api/users", &read_token).await;
    assert_eq!(
        names(&read_users["users"], "name"),
        ["alice", "bob", "admin"]
    );
    let hers = get_json(http, "/api/users", &alice_token).await;
    assert_eq!(names(&hers["users"], "name"), ["alice"], "{hers}");
    assert_eq!(row(&hers, "alice")["cores"], 2);

    tokio::time::sleep(Duration::from_millis(1_200)).await;
    agent
        .heartbeat(common::heartbeat_request(node, &[task], &[]))
        .await
        .expect("beat");
    agent
        .heartbeat(common::heartbeat_request(
            node,
            &[],
            &[(task.0, task.1, true)],
        ))
        .await
        .expect("beat");
    let users = get_json(http, "/api/users", &admin_token).await;
    let alice = row(&users, "alice");
    assert_eq!(
        (alice["cores"].as_u64(), alice["running_jobs"].as_u64()),
        (Some(0), Some(0)),
        "her job ended: {alice}"
    );

    // The accounts: the last 7 days by default, as `hetsched usage --output json` words them.
    let usage = get_json(http, "/api/usage", &admin_token).await;
    // An upper bound on what her task held, read after the accounts were: the server's
    // instants (its start at dispatch, its end at the result, on the wall clock) lie between
    // `started` and now, however loaded the machine.
    let ran_s = started.elapsed().as_secs_f64();
    assert_eq!(usage["since"], date(today() - 6), "{usage}");
    assert_eq!(usage["until"], date(today()), "{usage}");
    assert_eq!(names(&usage["users"], "user"), ["alice"], "{usage}");
    let hers = &usage["users"][0];
    let core_seconds = hers["core_seconds"].as_f64().expect("core_seconds");
    assert!(
        core_seconds > 2.0 * 1.0 && core_seconds <= 2.0 * ran_s,
        "alice's two cores for ~1.2 s: {hers}"
    );
    let close = |a: &Value, b: f64| a.as_f64().is_some_and(|a| (a - b).abs() < 1e-9);
    assert!(close(&hers["core_hours"], core_seconds / 3600.0), "{hers}");
    assert!(
        close(&hers["memory_gib_hours"], core_seconds / 2.0 / 3600.0),
        "1 GiB beside every 2 cores: {hers}"
    );
    assert_eq!(hers["gpu_hours"], 0.0);
    assert!(
        close(&usage["total"]["core_seconds"], core_seconds),
        "{usage}"
    );
    let offered = usage["capacity"]["core_seconds"]
        .as_f64()
        .expect("capacity");
    assert!(
        offered >= 4.0 * core_seconds,
        "the node's 8 cores while her 2 ran: {usage}"
    );
    assert!(
        close(&usage["utilisation"]["cores"], core_seconds / offered),
        "{usage}"
    );
    assert!(
        usage["utilisation"]["gpus"].is_null(),
        "no GPU offered: {usage}"
    );
    assert!(usage.get("days").is_none(), "{usage}");
    // The same figures as the `Usage` RPC (her task ended: her account no longer grows).
    let rpc = admin
        .usage(pb::UsageRequest {
            since_day: today() - 6,
            until_day: 0,
        })
        .await
        .expect("usage")
        .into_inner();
    let rpc_hers: f64 = rpc
        .rows
        .iter()
        .filter(|r| r.owner == "alice")
        .map(|r| r.core_seconds)
        .sum();
    // Equal up to the order the rows were added in (a row staged to the store, and what was
    // credited since, are added separately).
    assert!(
        (rpc_hers - core_seconds).abs() < 1e-9,
        "the RPC and the dashboard agree: {rpc_hers} and {core_seconds}"
    );
    let by_day = get_json(
        http,
        &format!("/api/usage?since={}&by_day=1", date(today())),
        &read_token,
    )
    .await;
    assert_eq!(by_day["since"], date(today()));
    assert_eq!(by_day["days"][0]["day"], date(today()), "{by_day}");
    assert_eq!(by_day["days"][0]["user"], "alice", "{by_day}");

    // A user reads its own account and the capacity only.
    let mine = get_json(http, "/api/usage?since=6d&until=today", &alice_token).await;
    assert_eq!(names(&mine["users"], "user"), ["alice"], "{mine}");
    assert!(close(&mine["users"][0]["core_seconds"], core_seconds));
    let bobs = get_json(http, "/api/usage", &bob_token).await;
    assert_eq!(
        names(&bobs["users"], "user"),
        Vec::<String>::new(),
        "{bobs}"
    );
    assert_eq!(bobs["total"]["core_seconds"], 0.0, "{bobs}");
    assert!(
        bobs["capacity"]["core_seconds"].as_f64() >= Some(offered),
        "a user reads the capacity: {bobs}"
    );
    let bob_users = get_json(http, "/api/users", &bob_token).await;
    assert_eq!(names(&bob_users["users"], "name"), ["bob"], "{bob_users}");
    // `/metrics` carries every user's accounts: a user's token is refused there, the admin's
    // reads it.
    let (status, body) = get(http, "/metrics", Some(&alice_token)).await;
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("DATA_DIR/read-token"), "{body}");
    let (status, body) = get(http, "/metrics", Some(&admin_token)).await;
    assert_eq!(status, 200);
    assert!(body.contains("user=\"alice\""), "{body}");

    // Never open; a bad day or span is refused naming the parameter.
    for path in ["/api/users", "/api/usage"] {
        assert_eq!(get(http, path, None).await.0, 401, "{path}");
        assert_eq!(get(http, path, Some("nope")).await.0, 401, "{path}");
    }
    let far = format!("/api/usage?since=1970-01-01&until={}", date(today()));
    let after = format!(
        "/api/usage?since={}&until={}",
        date(today()),
        date(today() - 1)
    );
    for (path, starts) in [
        (
            "/api/usage?since=30-11-2025",
            "since: `30-11-2025`: a day is YYYY-MM-DD",
        ),
        (
            "/api/usage?until=2025-13-45",
            "until: `2025-13-45`: a day is YYYY-MM-DD",
        ),
        ("/api/usage?since=", "since: ``: a day is YYYY-MM-DD"),
        (after.as_str(), "since: "),
        (
            far.as_str(),
            "since: the accounts are read at most 3660 days at a time",
        ),
        (
            "/api/usage?by_day=maybe",
            "by_day: `maybe` is not true, false, 1 or 0",
        ),
    ] {
        let (code, body) = get(http, path, Some(&admin_token)).await;
        assert_eq!(code, 400, "{path}: {body}");
        assert!(body.starts_with(starts), "{path}: {body}");
    }
    let (_, body) = get(http, &after, Some(&admin_token)).await;
    assert!(
        body.contains(&format!("is after until {}", date(today() - 1))),
        "{body}"
    );

    // A workflow's task ids are past the 2⁵³ a JavaScript number holds exactly: the page reads
    // each as the string `id_text` (and the next page's cursor as `next_cursor_text`).
    let wf = admin
        .submit(pb::SubmitRequest {
            origin: "wf.toml".into(),
            text: "[[task]]\nname = \"a\"\ninstances = 3\ncommand = \"true\"\n".into(),
            ..Default::default()
        })
        .await
        .expect("a workflow")
        .into_inner()
        .job_id;
    let page = get_json(
        http,
        &format!("/api/tasks?job={wf}&cursor=0&limit=2"),
        &admin_token,
    )
    .await;
    let tasks = page["tasks"].as_array().expect("tasks");
    assert_eq!(tasks.len(), 2, "{page}");
    for t in tasks {
        let id = t["id"].as_u64().expect("an id");
        assert!(id > 1 << 53, "{t}");
        assert_eq!(t["id_text"], id.to_string(), "{t}");
    }
    assert_eq!(
        page["next_cursor_text"],
        page["next_cursor"].as_u64().expect("more").to_string()
    );

    // A purged job's page says it was purged, as `hetsched job` does.
    admin
        .cancel(pb::CancelRequest {
            job_id: wf,
            ..Default::default()
        })
        .await
        .expect("cancel");
    admin
        .purge(pb::PurgeRequest {
            job_ids: vec![wf],
            ..Default::default()
        })
        .await
        .expect("purge");
    let (code, body) = get(http, &format!("/api/job?id={wf}"), Some(&admin_token)).await;
    assert_eq!(code, 404, "{body}");
    assert!(body.contains("it was purged"), "{body}");
    server.stop().await.expect("stopped");
}

/// `/api/me` says who the page is signed in as: the admin is an admin who reads output; the
/// read-only token (what Prometheus holds) is neither — it sees what the admin sees but may
/// change nothing and read no output; a user is itself. Before, the read-only token was
/// said to be `"admin": true`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_me_says_who_the_caller_is_and_the_read_only_token_is_no_admin() {
    let d = common::scratch("dashboard-users", "me");
    let config = ServerConfig {
        data_dir: d.to_path_buf(),
        http_listen: Some("127.0.0.1:0".parse().expect("addr")),
        ..Default::default()
    };
    let (server, channel, http, read_token) = common::serve_http(config).await;
    let alice_token = api(&channel, &server.token)
        .add_user(pb::AddUserRequest {
            name: "alice".into(),
            ..Default::default()
        })
        .await
        .expect("alice")
        .into_inner()
        .token;
    let me = |token: String| async move {
        let v = get_json(http, "/api/me", &token).await;
        (
            v["name"].as_str().unwrap_or_default().to_string(),
            v["admin"].as_bool(),
            v["read_only"].as_bool(),
            v["reads_output"].as_bool(),
        )
    };
    assert_eq!(
        me(server.token.clone()).await,
        ("admin".into(), Some(true), Some(false), Some(true))
    );
    assert_eq!(
        me(read_token).await,
        ("(read-only)".into(), Some(false), Some(true), Some(false)),
        "the read-only token is no admin"
    );
    assert_eq!(
        me(alice_token).await,
        ("alice".into(), Some(false), Some(false), Some(true))
    );
}
