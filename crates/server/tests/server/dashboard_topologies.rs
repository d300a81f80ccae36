//! The dashboard's stream topologies (`/api/topologies`, `/api/topology?name=`) of a server
//! started in-process with its HTTP listener: alice's topology, placed on a node whose worker
//! sync this test sends, is listed with its owner and state in the very documents `hetsched
//! topology list|show --output json` print; a start error its agent reports shows on its worker
//! until the worker runs; every token that reads the dashboard reads every topology; no token
//! is 401, an unknown name 404 naming it, a missing, empty or too long name 400 naming the
//! parameter — too long being longer than a submission may give, which is refused too.

use crate::common;
use crate::http::{get_json, get_status as get};
use hetsched_proto as pb;
use hetsched_proto::client_client::ClientClient;
use hetsched_proto::topology_agent_client::TopologyAgentClient;
use hetsched_proto::topology_client_client::TopologyClientClient;
use hetsched_server::ServerConfig;
use hetsched_server::jobs::topology::MAX_NAME;
use serde_json::Value;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;

type Topologies = TopologyClientClient<InterceptedService<Channel, pb::TokenInterceptor>>;

fn topologies(channel: &Channel, token: &str) -> Topologies {
    TopologyClientClient::with_interceptor(
        channel.clone(),
        pb::TokenInterceptor::new(token).expect("ascii token"),
    )
}

/// One spout and one bolt executor at 50 % each: one worker on one node.
fn topology(name: &str) -> String {
    format!(
        "name = \"{name}\"\n\
         [[component]]\nname = \"numbers\"\nkind = \"spout\"\nparallelism = 1\ncpu = 50.0\n\
         builtin = \"sequence-spout\"\n\
         [[component]]\nname = \"keep\"\nkind = \"bolt\"\nparallelism = 1\ncpu = 50.0\n\
         builtin = \"filter\"\n\
         [[stream]]\nfrom = \"numbers\"\nto = \"keep\"\nrate = 10.0\n"
    )
}

fn submission(name: &str) -> pb::SubmitTopologyRequest {
    pb::SubmitTopologyRequest {
        origin: format!("{name}.toml"),
        text: topology(name),
        base_dir: "/".into(),
        placer: "one-phase".into(),
        // Never rescheduled: nothing changes between two reads but what the test does.
        interval_ms: 0,
        max_utilisation: 0.9,
        ..Default::default()
    }
}

/// Node `n`'s worker sync: the workers it runs and those it cannot start.
fn sync(
    workers: Vec<pb::RunningWorker>,
    start_errors: Vec<pb::WorkerStartError>,
) -> pb::SyncWorkersRequest {
    pb::SyncWorkersRequest {
        node: "n".into(),
        identity: common::IDENTITY.into(),
        cores: 4,
        workers,
        start_errors,
        hold_ms: 0,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_lists_every_topology_with_its_owner_state_and_workers_start_errors() {
    let d = common::scratch("dashboard-topologies", "panel");
    let config = ServerConfig {
        data_dir: d.to_path_buf(),
        http_listen: Some("127.0.0.1:0".parse().expect("addr")),
        // The test sends the heartbeats and the syncs itself.
        heartbeat_interval: hetsched_core::input::Duration(60_000_000_000),
        dead_timeout: hetsched_core::input::Duration(600_000_000_000),
        ..Default::default()
    };
    let (server, channel, http, read_token) = common::serve_http(config).await;
    let admin_token = server.token.clone();
    let mut admin = ClientClient::with_interceptor(
        channel.clone(),
        pb::TokenInterceptor::new(&admin_token).expect("ascii token"),
    );
    let mut tokens = Vec::new();
    for name in ["alice", "bob"] {
        let added = admin
            .add_user(pb::AddUserRequest {
                name: name.into(),
                ..Default::default()
            })
            .await
            .expect("user added");
        tokens.push(added.into_inner().token);
    }
    let (alice_token, bob_token) = (tokens[0].clone(), tokens[1].clone());
    let _registered = common::agent_of(&server, &channel, "n", 4, 8 << 30).await;
    let mut agent =
        TopologyAgentClient::with_interceptor(channel.clone(), common::agent_token(&server));

    // None yet: an empty list.
    assert_eq!(
        get_json(http, "/api/topologies", &read_token).await,
        Value::Array(Vec::new())
    );
    // The node's sync makes it a candidate; alice's topology is placed on it.
    agent
        .sync_workers(sync(vec![], vec![]))
        .await
        .expect("sync");
    let submitted = topologies(&channel, &alice_token)
        .submit_topology(submission("pipe"))
        .await
        .expect("alice's topology")
        .into_inner();
    assert!(
        submitted.status_json.contains("\"generation\":1"),
        "placed: {}",
        submitted.status_json
    );
    let list = get_json(http, "/api/topologies", &read_token).await;
    let jobs = get_json(http, "/api/jobs", &read_token).await;
    assert_eq!(
        (&jobs["total"], &jobs["jobs"]),
        (&Value::from(0), &Value::Array(Vec::new())),
        "a topology is no job: the jobs panel does not count it: {jobs}"
    );
    let rows = list.as_array().expect("a list");
    assert_eq!(rows.len(), 1, "{list}");
    let pipe = &rows[0];
    assert_eq!(
        (
            &pipe["name"],
            &pipe["owner"],
            &pipe["state"],
            &pipe["placer"],
            &pipe["generation"],
        ),
        (
            &Value::from("pipe"),
            &Value::from("alice"),
            &Value::from("running"),
            &Value::from("one-phase"),
            &Value::from(1),
        ),
        "{pipe}"
    );
    assert_eq!(pipe["workers"][0]["node"], "n", "{pipe}");
    assert_eq!(pipe["workers_running"], 0, "not running yet: {pipe}");
    assert!(pipe["workers"][0]["start_error"].is_null(), "{pipe}");
    // The very documents `hetsched topology list|show --output json` print.
    let mut admin_topologies = topologies(&channel, &admin_token);
    let rpc_list = admin_topologies
        .list_topologies(pb::ListTopologiesRequest::default())
        .await
        .expect("list")
        .into_inner();
    let rpc_list: Value = serde_json::from_str(&rpc_list.statuses_json).expect("json");
    assert_eq!(list, rpc_list, "the dashboard and the RPC agree");
    let shown = get_json(http, "/api/topology?name=pipe", &admin_token).await;
    let rpc_shown = admin_topologies
        .show_topology(pb::TopologyName {
            name: "pipe".into(),
        })
        .await
        .expect("show")
        .into_inner();
    let rpc_shown: Value = serde_json::from_str(&rpc_shown.status_json).expect("json");
    assert_eq!(shown, rpc_shown, "the dashboard and the RPC agree");
    assert_eq!(
        shown["executors"]
            .as_array()
            .map(|e| e.iter().map(|x| x["executor"].clone()).collect::<Vec<_>>()),
        Some(vec![Value::from("numbers#0"), Value::from("keep#0")]),
        "{shown}"
    );

    // Its agent cannot start the worker: the worker says why, in both documents.
    let why = "no Unix account `alice` to run the task of hetsched user `alice` as";
    agent
        .sync_workers(sync(
            vec![],
            vec![pb::WorkerStartError {
                topology: "pipe".into(),
                generation: 1,
                worker: 0,
                message: why.into(),
            }],
        ))
        .await
        .expect("sync");
    let shown = get_json(http, "/api/topology?name=pipe", &read_token).await;
    assert_eq!(shown["workers"][0]["start_error"], why, "{shown}");
    assert_eq!(shown["workers"][0]["pid"], Value::Null, "{shown}");
    let list = get_json(http, "/api/topologies", &admin_token).await;
    assert_eq!(list[0]["workers"][0]["start_error"], why, "{list}");
    // Every token that reads the dashboard reads every topology: bob reads alice's.
    let bobs = get_json(http, "/api/topology?name=pipe", &bob_token).await;
    assert_eq!(
        (&bobs["owner"], &bobs["workers"][0]["start_error"]),
        (&Value::from("alice"), &Value::from(why)),
        "{bobs}"
    );
    assert_eq!(
        get_json(http, "/api/topologies", &bob_token).await[0]["name"],
        "pipe"
    );

    // It runs: the error is gone, its pid and address are there.
    agent
        .sync_workers(sync(
            vec![pb::RunningWorker {
                topology: "pipe".into(),
                generation: 1,
                worker: 0,
                addr: "127.0.0.1:4000".into(),
                pid: 4242,
                ..Default::default()
            }],
            vec![],
        ))
        .await
        .expect("sync");
    let shown = get_json(http, "/api/topology?name=pipe", &alice_token).await;
    let worker = &shown["workers"][0];
    assert!(worker["start_error"].is_null(), "{worker}");
    assert_eq!(
        (&worker["pid"], &worker["addr"]),
        (&Value::from(4242), &Value::from("127.0.0.1:4000"))
    );
    assert_eq!(shown["workers_running"], 1, "{shown}");

    // Never open.
    for path in ["/api/topologies", "/api/topology?name=pipe"] {
        assert_eq!(get(http, path, None).await.0, 401, "{path}");
        assert_eq!(get(http, path, Some("nope")).await.0, 401, "{path}");
    }
    // An unknown name is 404 naming it; a missing, empty or too long one 400 naming the
    // parameter. A name as long as a submission may give is read; a longer one is refused at
    // submission already.
    let (code, body) = get(http, "/api/topology?name=no%20such", Some(&read_token)).await;
    assert_eq!(
        (code, body.as_str()),
        (404, "no topology named `no such` (hetsched topology list)")
    );
    let longest = "l".repeat(MAX_NAME);
    let too_long = "l".repeat(MAX_NAME + 1);
    let refused = topologies(&channel, &alice_token)
        .submit_topology(submission(&too_long))
        .await
        .expect_err("a name longer than MAX_NAME");
    assert_eq!(refused.code(), tonic::Code::InvalidArgument);
    assert!(
        refused.message().contains(&format!(
            "name: is {} bytes long; at most {MAX_NAME}",
            MAX_NAME + 1
        )),
        "{}",
        refused.message()
    );
    topologies(&channel, &alice_token)
        .submit_topology(submission(&longest))
        .await
        .expect("a name of MAX_NAME bytes");
    let shown = get_json(http, &format!("/api/topology?name={longest}"), &read_token).await;
    assert_eq!(shown["name"], longest.as_str());
    for (path, says) in [
        ("/api/topology".to_string(), "name: missing".to_string()),
        (
            "/api/topology?id=pipe".to_string(),
            "name: missing".to_string(),
        ),
        ("/api/topology?name=".to_string(), "name: empty".to_string()),
        (
            format!("/api/topology?name={too_long}"),
            format!(
                "name: {} bytes long; a topology's name is at most {MAX_NAME} bytes",
                MAX_NAME + 1
            ),
        ),
    ] {
        let (code, body) = get(http, &path, Some(&admin_token)).await;
        assert_eq!(code, 400, "{path}: {body}");
        assert!(body.starts_with(&says), "{path}: {body}");
    }

    // Killed: still listed, as killed.
    admin_topologies
        .kill_topology(pb::TopologyName {
            name: "pipe".into(),
        })
        .await
        .expect("killed");
    let list = get_json(http, "/api/topologies", &read_token).await;
    let pipe = list
        .as_array()
        .and_then(|l| l.iter().find(|t| t["name"] == "pipe"))
        .unwrap_or_else(|| panic!("pipe listed: {list}"));
    assert_eq!(pipe["state"], "killed", "{pipe}");
    assert_eq!(list.as_array().map(Vec::len), Some(2), "{list}");
    server.stop().await.expect("stopped");
}
