//! Invisible formatting characters (`hetsched_core::text::hidden`: bidi overrides and isolates,
//! marks, zero-width joiners) over gRPC: a job name holding one is refused naming the code
//! point, and what an agent says of a task (which may quote what its owner wrote) comes back
//! with them escaped, as control characters are, so that `job\u{202e}txt.exe` cannot read
//! `jobexe.txt` in another user's `hetsched tasks`.

use crate::common;

use common::{client_token, heartbeat_request};
use hetsched_proto as pb;
use hetsched_server::ServerConfig;
use hetsched_server::convert::Wire;
use pb::client_client::ClientClient;

const JOB: &str =
    "[[application]]\nname = \"a\"\ntasks = 1\n[application.cpu]\ncommand = \"true\"\n";

#[tokio::test]
async fn a_bidi_override_in_a_job_name_is_refused_and_in_a_task_message_comes_back_escaped() {
    let d = common::scratch("hidden", "grpc");
    let (server, channel) = common::serve(ServerConfig {
        data_dir: d.to_path_buf(),
        ..Default::default()
    })
    .await;
    let mut client = ClientClient::with_interceptor(channel.clone(), client_token(&server));
    let submit = |name: &str, text: &str| pb::SubmitRequest {
        origin: "job.toml".into(),
        text: text.into(),
        workdir: "/".into(),
        name: name.into(),
        ..Default::default()
    };
    let e = client
        .submit(submit("job\u{202e}txt.exe", JOB))
        .await
        .expect_err("a --name with a bidi override");
    assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");
    assert!(
        e.message()
            .contains("the job name (--name): U+202E RIGHT-TO-LEFT OVERRIDE is not allowed"),
        "{}",
        e.message()
    );
    let e = client
        .submit(submit("", &format!("name = \"a\\u2067b\"\n{JOB}")))
        .await
        .expect_err("a file's name with a bidi isolate");
    assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");
    assert!(
        e.message()
            .contains("job.toml:1:8: name: U+2067 RIGHT-TO-LEFT ISOLATE is not allowed"),
        "{}",
        e.message()
    );

    // The file's name (`origin`) is the job's name when none is given, and is shown in every
    // listing: refused too, naming it escaped and the character, with or without `--name`.
    for name in ["", "report"] {
        let e = client
            .submit(pb::SubmitRequest {
                origin: "report\u{202e}txt.exe".into(),
                ..submit(name, JOB)
            })
            .await
            .expect_err("a file's name with a bidi override");
        assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");
        assert!(
            e.message().contains(
                "the job file's name \"report\\u{202e}txt.exe\": U+202E RIGHT-TO-LEFT \
                 OVERRIDE is not allowed"
            ),
            "{}",
            e.message()
        );
        assert!(!e.message().contains('\u{202e}'), "{}", e.message());
    }
    let listed = client
        .list_jobs(pb::ListJobsRequest::default())
        .await
        .expect("jobs")
        .into_inner()
        .jobs;
    assert!(listed.is_empty(), "nothing was stored: {listed:?}");

    let job = client
        .submit(submit("", JOB))
        .await
        .expect("a plain job")
        .into_inner()
        .job_id;
    let (mut agent, node) = common::agent_of(&server, &channel, "n", 2, 1 << 30).await;
    let assigned = agent
        .heartbeat(heartbeat_request(node, &[], &[]))
        .await
        .expect("heartbeat")
        .into_inner()
        .assignments;
    assert_eq!(assigned.len(), 1);
    let task = &assigned[0];
    let mut beat = heartbeat_request(node, &[], &[(task.task_id, task.attempt, false)]);
    beat.results[0].message =
        "cannot start `job\u{202e}txt.exe`\u{2066}: ad\u{200d}min\u{1b}[2J".into();
    agent.heartbeat(beat).await.expect("heartbeat");
    let tasks = client
        .list_tasks(pb::ListTasksRequest {
            job_id: job,
            ..Default::default()
        })
        .await
        .expect("tasks")
        .into_inner()
        .tasks;
    assert_eq!(tasks.len(), 1);
    assert_eq!(
        tasks[0].message,
        "cannot start `job\\u{202e}txt.exe`\\u{2066}: ad\\u{200d}min\\u{1b}[2J"
    );
    // A heartbeat names the node's rack (what `hetsched nodes` and `bindings` show): one with
    // a bidi override is refused as a registration's is, naming the field and the character.
    let mut beat = heartbeat_request(node, &[], &[]);
    beat.rack = "r\u{202e}1".into();
    let e = agent
        .heartbeat(beat)
        .await
        .expect_err("a rack with a bidi override");
    assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");
    assert_eq!(
        e.message(),
        "rack: character 2 is U+202E RIGHT-TO-LEFT OVERRIDE, which is not allowed"
    );
    server.stop().await.expect("stops");
}

/// A drain reason is shown to every user (`hetsched nodes`): one with a bidi control is refused
/// as one with a control character is.
#[test]
fn a_drain_reason_with_a_bidi_control_is_refused() {
    let d = common::scratch("hidden", "drain");
    let config = ServerConfig {
        data_dir: d.to_path_buf(),
        ..Default::default()
    };
    let store = hetsched_server::store::Store::open(&d.join("state.db")).expect("store");
    let mut s = hetsched_server::state::State::open(&config, store).expect("state");
    common::register(&mut s, "n", 2);
    let e = s
        .drain_node("n", true, "fan \u{202e}ok")
        .expect_err("refused");
    assert!(
        e.to_string()
            .contains("reason: U+202E RIGHT-TO-LEFT OVERRIDE is not allowed"),
        "{e}"
    );
    s.drain_node("n", true, "bad fan").expect("a plain reason");
}
