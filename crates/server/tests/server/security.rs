//! Who may do what: agents and users hold different tokens, each service refuses the other's
//! (`PermissionDenied`), a node's heartbeats count only from the agent identity that registered
//! it, a live node's name cannot be taken by another agent, and the data directory and store are
//! private to the server's user.

use crate::common;
use crate::common::Scratch;

use common::{agent_token, client_token, heartbeat_request};
use hetsched_proto as pb;
use hetsched_proto::agent_client::AgentClient;
use hetsched_proto::client_client::ClientClient;
use hetsched_server::ServerConfig;
use hetsched_server::convert::Wire;
use hetsched_server::state::{State, StateError};
use hetsched_server::store::Store;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;

/// A fresh scratch directory for test `name` (held by the test), and the path of the server's
/// data directory in it, which the server makes (its mode is the server's).
fn scratch(name: &str) -> (Scratch, PathBuf) {
    let scratch = Scratch::new("security", name);
    let data = scratch.join("data");
    (scratch, data)
}

fn registration(name: &str, identity: &str) -> pb::RegisterRequest {
    pb::RegisterRequest {
        name: name.into(),
        cores: 2,
        memory_bytes: 1 << 30,
        identity: identity.into(),
        ..Default::default()
    }
}

/// An interceptor that sends `value` as the whole `authorization` metadata.
#[derive(Clone)]
struct RawAuth(tonic::metadata::MetadataValue<tonic::metadata::Ascii>);

impl tonic::service::Interceptor for RawAuth {
    fn call(&mut self, mut req: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        req.metadata_mut().insert(pb::AUTH_HEADER, self.0.clone());
        Ok(req)
    }
}

/// gRPC reads `authorization` as the HTTP listener does (one parser, `hetsched_proto::
/// bearer_token`): the scheme in any case (RFC 7235) and spaces around the token. Before, only
/// `Bearer` with a capital B and one space passed on gRPC, and `bearer TOKEN`, which the
/// dashboard takes, was a wrong token. Another scheme, or no token, is still refused.
#[tokio::test]
async fn grpc_reads_the_bearer_scheme_in_any_case_and_spaces_around_as_http_does() {
    let (_scratch, dir) = scratch("bearer");
    let (server, channel) = common::serve(ServerConfig {
        data_dir: dir.clone(),
        ..Default::default()
    })
    .await;
    let with = |value: String| {
        ClientClient::with_interceptor(
            channel.clone(),
            RawAuth(value.parse().expect("ascii metadata")),
        )
    };
    let t = &server.token;
    for value in [
        format!("bearer {t}"),
        format!("BEARER {t}"),
        format!("bEaReR {t}"),
        format!("  Bearer   {t}  "),
    ] {
        with(value.clone())
            .list_jobs(pb::ListJobsRequest::default())
            .await
            .unwrap_or_else(|e| panic!("`{value}`: {e:?}"));
    }
    // Each refusal says what the header lacks and that the Bearer scheme is expected (before,
    // `Basic <token>` read "wrong token: not the admin's ...", as if the token were wrong).
    for (value, said) in [
        (format!("Basic {t}"), "the scheme `Basic`"),
        ("Bearer".to_string(), "the Bearer scheme but no token"),
        (t.clone(), "no scheme"),
    ] {
        let e = with(value.clone())
            .list_jobs(pb::ListJobsRequest::default())
            .await
            .expect_err("refused");
        assert_eq!(e.code(), tonic::Code::Unauthenticated, "`{value}`: {e:?}");
        assert_eq!(
            e.message(),
            format!(
                "the authorization header has {said}: send `authorization: Bearer <token>` (the \
                 tokens are in the server's data directory)"
            ),
            "`{value}`"
        );
    }
    // The agent token, in another case, still cannot call the client service.
    let e = with(format!("bearer {}", server.agent_token))
        .list_jobs(pb::ListJobsRequest::default())
        .await
        .expect_err("the agent token");
    assert_eq!(e.code(), tonic::Code::PermissionDenied, "{e:?}");
    server.stop().await.expect("stops");
}

#[tokio::test]
async fn the_client_token_cannot_register_or_heartbeat_and_the_agent_token_cannot_read_jobs() {
    let (_scratch, dir) = scratch("roles");
    let (server, channel) = common::serve(ServerConfig {
        data_dir: dir.clone(),
        http_listen: Some("127.0.0.1:0".parse().expect("addr")),
        ..Default::default()
    })
    .await;
    assert_ne!(server.token, server.agent_token);
    let as_client = client_token(&server);
    let as_agent = agent_token(&server);

    let mut agent_api_with_client_token =
        AgentClient::with_interceptor(channel.clone(), as_client.clone());
    let e = agent_api_with_client_token
        .register(registration("intruder", "i"))
        .await
        .expect_err("a user cannot register a node");
    assert_eq!(e.code(), tonic::Code::PermissionDenied, "{e:?}");
    let e = agent_api_with_client_token
        .heartbeat(heartbeat_request(0, &[], &[(0, 1, true)]))
        .await
        .expect_err("a user cannot heartbeat");
    assert_eq!(e.code(), tonic::Code::PermissionDenied, "{e:?}");

    let e = ClientClient::with_interceptor(channel.clone(), as_agent.clone())
        .list_tasks(pb::ListTasksRequest::default())
        .await
        .expect_err("an agent cannot read jobs' commands");
    assert_eq!(e.code(), tonic::Code::PermissionDenied, "{e:?}");

    let reply = AgentClient::with_interceptor(channel.clone(), as_agent)
        .register(registration("n", "id-1"))
        .await
        .expect("an agent registers with the agent token")
        .into_inner();
    assert_eq!(reply.node_id, 0);
    ClientClient::with_interceptor(channel, as_client)
        .list_jobs(pb::ListJobsRequest::default())
        .await
        .expect("a user reads jobs with the client token");

    // Private files: the directory 0700; tokens, the store, its WAL and SHM, and the address
    // files (0644 before) 0600.
    assert_eq!(std::fs::metadata(&dir).expect("dir").mode() & 0o777, 0o700);
    for f in [
        "token",
        "agent-token",
        "read-token",
        "state.db",
        "state.db-wal",
        "state.db-shm",
        "address",
        "http-address",
    ] {
        let m = std::fs::metadata(dir.join(f)).expect(f).mode() & 0o777;
        assert_eq!(m, 0o600, "{f} has mode {m:o}");
    }
    server.stop().await.expect("stops");
}

#[tokio::test]
async fn a_second_server_on_the_same_data_directory_is_refused_naming_the_first() {
    let (_scratch, dir) = scratch("lock");
    let config = ServerConfig {
        listen: "127.0.0.1:0".parse().expect("addr"),
        data_dir: dir.clone(),
        ..Default::default()
    };
    let first = hetsched_server::start(config.clone())
        .await
        .expect("first starts");
    let address = std::fs::read_to_string(dir.join("address")).expect("address");
    let e = match hetsched_server::start(config.clone()).await {
        Ok(_) => panic!("a second server started on the same data directory"),
        Err(e) => e.to_string(),
    };
    assert!(
        e.contains(&format!("PID {}", std::process::id())),
        "names the holder: {e}"
    );
    assert_eq!(
        std::fs::read_to_string(dir.join("address")).expect("address"),
        address,
        "the first server's address file is untouched"
    );
    first.stop().await.expect("stops");
    hetsched_server::start(config)
        .await
        .expect("starts once the first stopped")
        .stop()
        .await
        .expect("stops");
}

fn open(dir: &std::path::Path) -> State {
    std::fs::create_dir_all(dir).expect("dir");
    let config = ServerConfig {
        data_dir: dir.to_path_buf(),
        ..Default::default()
    };
    State::open(&config, Store::open(&dir.join("state.db")).expect("store")).expect("state")
}

const JOB: &str =
    "[[application]]\nname = \"a\"\ntasks = 2\n[application.cpu]\ncommand = \"true\"\n";

#[test]
fn a_heartbeat_with_another_identity_changes_nothing() {
    let (_scratch, dir) = scratch("forge");
    let mut s = open(&dir);
    let n = s
        .register(registration("n", "the-real-agent"))
        .expect("register")
        .node_id;
    s.submit("job.toml", JOB, "/").expect("submit");
    let mut beat = heartbeat_request(n, &[], &[]);
    beat.identity = "the-real-agent".into();
    assert_eq!(s.heartbeat(beat).expect("beat").assignments.len(), 2);
    // A forger claims task 0 succeeded and task 1 failed.
    let mut forged = heartbeat_request(n, &[], &[(0, 1, true), (1, 1, false)]);
    forged.identity = "someone-else".into();
    let r = s.heartbeat(forged).expect("answered");
    assert!(r.reregister, "told to register, as any unknown caller");
    assert!(r.acked.is_empty() && r.assignments.is_empty());
    let states: Vec<String> = s
        .tasks(1)
        .expect("tasks")
        .tasks
        .into_iter()
        .map(|t| t.state)
        .collect();
    assert_eq!(
        states,
        ["running", "running"],
        "the forgery changed nothing"
    );
}

#[test]
fn a_live_nodes_name_is_refused_to_another_identity_and_given_over_once_it_is_dead() {
    let (_scratch, dir) = scratch("names");
    let mut s = open(&dir);
    s.register(registration("host", "first")).expect("first");
    let e = s
        .register(registration("host", "second"))
        .expect_err("name held by a live node");
    assert!(matches!(e, StateError::NameTaken(_)), "{e}");
    assert!(e.to_string().contains("--name"), "says what to do: {e}");
    // The same identity (the agent restarted with its work directory) gets its node back.
    assert_eq!(
        s.register(registration("host", "first"))
            .expect("same")
            .node_id,
        0
    );
    // Once the first is declared dead, a replacement takes the name over.
    std::thread::sleep(crate::common::SILENCE);
    s.check_dead(crate::common::DEAD_TIMEOUT).expect("check");
    assert_eq!(
        s.register(registration("host", "second"))
            .expect("replacement")
            .node_id,
        0
    );
    // ... and survives a restart: the old identity waits while the replacement is not back
    // (the restart grace), and is refused once it is.
    drop(s);
    let mut s = open(&dir);
    let e = s
        .register(registration("host", "first"))
        .expect_err("the name is the replacement's now");
    assert!(matches!(e, StateError::NameAwaited { .. }), "{e}");
    s.register(registration("host", "second"))
        .expect("the replacement is back");
    let e = s
        .register(registration("host", "first"))
        .expect_err("the name is the replacement's now");
    assert!(matches!(e, StateError::NameTaken(_)), "{e}");
}

#[test]
fn a_dead_node_counts_for_nothing_at_submission_and_can_be_removed() {
    let (_scratch, dir) = scratch("remove");
    let mut s = open(&dir);
    let mut gpu = registration("gpu-box", "g");
    gpu.accelerators = vec![pb::Accelerator {
        kind: "a100".into(),
        memory_bytes: 1 << 30,
        speed: 1.0,
    }];
    s.register(gpu).expect("gpu node");
    std::thread::sleep(crate::common::SILENCE);
    s.register(registration("cpu-box", "c")).expect("cpu node");
    s.check_dead(crate::common::DEAD_TIMEOUT).expect("check");
    let gpu_only =
        "[[application]]\nname = \"g\"\ntasks = 1\n[application.gpu]\ncommand = \"true\"\n";
    let e = s
        .submit("gpu.toml", gpu_only, "/")
        .expect_err("only a dead node has a GPU");
    assert!(e.to_string().contains("no node has 1 GPU"), "{e}");
    let e = s.remove_node("cpu-box").expect_err("alive");
    assert!(e.to_string().contains("is alive"), "{e}");
    assert_eq!(s.remove_node("gpu-box").expect("dead: removed"), 0);
    let names: Vec<String> = s.nodes(true).nodes.into_iter().map(|n| n.name).collect();
    assert_eq!(names, ["cpu-box"]);
    assert!(matches!(
        s.remove_node("gpu-box"),
        Err(StateError::NoNode(_))
    ));
    // Its name is free; removal survives a restart.
    drop(s);
    let mut s = open(&dir);
    assert_eq!(s.nodes(true).nodes.len(), 1);
    let id = s
        .register(registration("gpu-box", "another"))
        .expect("the name is free")
        .node_id;
    assert_eq!(id, 2, "a new node; id 0 stays the removed one's");
}

/// The secret rows of [`only_the_agent_a_chunk_is_out_to_reads_its_input_and_records_its_result`]'s
/// job: 4 units of 8 bytes.
const SECRET_ROWS: &[u8] = b"secret0\nsecret1\nsecret2\nsecret3\n";

/// A server on `dir` with an agent registered for each (name, identity) of `agents`; they never
/// beat, and stay alive throughout (a dead timeout of ten minutes).
async fn serve_with_agents(
    dir: &std::path::Path,
    agents: &[(&str, &str)],
) -> (hetsched_server::ServerHandle, tonic::transport::Channel) {
    let (server, channel) = common::serve(ServerConfig {
        data_dir: dir.to_path_buf(),
        dead_timeout: hetsched_core::input::Duration(600_000_000_000),
        ..Default::default()
    })
    .await;
    let mut client = AgentClient::with_interceptor(channel.clone(), agent_token(&server));
    for &(name, identity) in agents {
        client
            .register(registration(name, identity))
            .await
            .expect("registered");
    }
    (server, channel)
}

/// The state of chunk `chunk` of divisible job `id`, as `hetsched job` shows it.
async fn chunk_state(
    channel: &tonic::transport::Channel,
    token: pb::TokenInterceptor,
    id: u64,
    chunk: u64,
) -> String {
    let j = ClientClient::with_interceptor(channel.clone(), token)
        .get_job(pb::GetJobRequest {
            job_id: id,
            wait_ms: 0,
        })
        .await
        .expect("job")
        .into_inner();
    let d = j.divisible.expect("a divisible job");
    d.chunks
        .iter()
        .find(|c| c.chunk == chunk)
        .map(|c| c.state.clone())
        .expect("the chunk is listed")
}

/// The agent token alone does not speak for a node's divisible chunks: a chunk out to node n1
/// gives its input, and takes its result, only from n1's agent (its name and the identity it
/// registered with). Another live node (n2, with its own identity), n1's name with a wrong or
/// empty identity, and a node no agent registered are refused with `PermissionDenied`, get no
/// byte of the input and record nothing (the chunk stays out) — and `NextChunk` is refused them
/// the same way. n1's own calls still work.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_agent_a_chunk_is_out_to_reads_its_input_and_records_its_result() {
    use pb::divisible_client::DivisibleClient;
    let (_scratch, dir) = scratch("chunk-owner");
    let (server, channel) =
        serve_with_agents(&dir, &[("n1", "n1-identity"), ("n2", "n2-identity")]).await;
    let mut div = DivisibleClient::with_interceptor(channel.clone(), agent_token(&server));
    let ask = |name: &str, identity: &str, room: bool| pb::NextChunkRequest {
        name: name.into(),
        identity: identity.into(),
        memory_bytes: 1 << 30,
        incarnation: format!("{name}-1"),
        room,
        ..Default::default()
    };
    // n1 joins (no room: answered at once), then the job comes: n1 is its one worker.
    div.next_chunk(ask("n1", "n1-identity", false))
        .await
        .expect("n1 joins");
    let id = ClientClient::with_interceptor(channel.clone(), client_token(&server))
        .submit(pb::SubmitRequest {
            origin: "secret.toml".into(),
            text: "[[divisible]]\nname = \"secret\"\nunits = 4\n\
                   command = \"cat {input} # {start} {end}\"\ninput = \"rows.txt\"\n\
                   unit_bytes = 8\n"
                .into(),
            workdir: "/".into(),
            divisible_input: SECRET_ROWS.to_vec(),
            ..Default::default()
        })
        .await
        .expect("submitted")
        .into_inner()
        .job_id;

    // NextChunk for n1 without its identity, or for a node nobody registered: refused.
    for (name, identity) in [
        ("n1", ""),
        ("n1", "n2-identity"),
        ("ghost", "ghost-identity"),
    ] {
        let e = div
            .next_chunk(ask(name, identity, false))
            .await
            .expect_err("NextChunk without the node's identity");
        assert_eq!(
            e.code(),
            tonic::Code::PermissionDenied,
            "{name}/{identity}: {e:?}"
        );
        assert!(
            e.message().contains(&format!("`{name}`")),
            "names the node: {e:?}"
        );
    }
    let order = div
        .next_chunk(ask("n1", "n1-identity", true))
        .await
        .expect("n1 asks")
        .into_inner()
        .orders
        .into_iter()
        .next()
        .expect("n1 gets the first chunk");
    assert_eq!(order.job_id, id);
    let chunk = order.chunk;
    let mine = SECRET_ROWS[order.start as usize * 8..order.end as usize * 8].to_vec();
    assert!(!mine.is_empty());

    // Its input: refused to everyone but n1.
    let input = |name: &str, identity: &str| pb::ChunkInputRequest {
        job_id: id,
        chunk,
        name: name.into(),
        identity: identity.into(),
    };
    let forgers = [
        // Another live node, proving its own identity.
        ("n2", "n2-identity"),
        // n1's name without its identity.
        ("n1", "n2-identity"),
        ("n1", ""),
        // A raw client with nothing but the token.
        ("", ""),
        // A node no agent registered.
        ("ghost", "ghost-identity"),
    ];
    for (name, identity) in forgers {
        let got = div.chunk_input(input(name, identity)).await;
        let e = match got {
            Ok(stream) => {
                let mut stream = stream.into_inner();
                let mut bytes = Vec::new();
                while let Ok(Some(piece)) = stream.message().await {
                    bytes.extend(piece.data);
                }
                panic!(
                    "{name}/{identity} read chunk {chunk}'s input: {:?}",
                    String::from_utf8_lossy(&bytes)
                );
            }
            Err(e) => e,
        };
        assert_eq!(
            e.code(),
            tonic::Code::PermissionDenied,
            "{name}/{identity}: {e:?}"
        );
    }

    // Its result: refused from everyone but n1, and nothing is recorded.
    let done = |name: &str, identity: &str, data: &[u8]| {
        tokio_stream::iter(vec![
            pb::ChunkDonePiece {
                piece: Some(pb::chunk_done_piece::Piece::Header(pb::ChunkResultHeader {
                    job_id: id,
                    chunk,
                    success: true,
                    name: name.into(),
                    identity: identity.into(),
                    output_bytes: data.len() as u64,
                    ..Default::default()
                })),
            },
            pb::ChunkDonePiece {
                piece: Some(pb::chunk_done_piece::Piece::Data(data.to_vec())),
            },
        ])
    };
    for (name, identity) in forgers {
        match div.chunk_done(done(name, identity, b"FORGED\n")).await {
            Ok(r) => panic!(
                "{name}/{identity} sent chunk {chunk}'s result: recorded {}",
                r.into_inner().recorded
            ),
            Err(e) => assert_eq!(
                e.code(),
                tonic::Code::PermissionDenied,
                "{name}/{identity}: {e:?}"
            ),
        }
        assert_eq!(
            chunk_state(&channel, client_token(&server), id, chunk).await,
            "out",
            "{name}/{identity}'s result changed nothing"
        );
    }

    // n1 itself reads the input and records the result.
    let mut stream = div
        .chunk_input(input("n1", "n1-identity"))
        .await
        .expect("n1 reads its chunk's input")
        .into_inner();
    let mut got = Vec::new();
    while let Some(piece) = stream.message().await.expect("a piece") {
        got.extend(piece.data);
    }
    assert_eq!(got, mine, "n1 gets its chunk's rows");
    let recorded = div
        .chunk_done(done("n1", "n1-identity", &got))
        .await
        .expect("n1's result")
        .into_inner()
        .recorded;
    assert!(recorded, "n1's result counts");
    assert_eq!(
        chunk_state(&channel, client_token(&server), id, chunk).await,
        "done"
    );
    server.stop().await.expect("stops");
}

/// What one chunk's agent may store on the server is bounded: a chunk's output lands in the
/// server's data directory (beside `state.db`), so a user's chunk command printing without end
/// would otherwise fill the server's disk. A result declaring more than 4 GiB of output is
/// refused before a byte is written, and one sending more than it declared is cut off: either
/// way the chunk fails, saying why, and nothing of it is kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chunks_output_past_its_bound_or_its_declared_size_fails_the_chunk_and_is_not_stored() {
    use pb::divisible_client::DivisibleClient;
    let (_scratch, dir) = scratch("chunk-output-bound");
    let (server, channel) = serve_with_agents(&dir, &[("n1", "n1-identity")]).await;
    let mut div = DivisibleClient::with_interceptor(channel.clone(), agent_token(&server));
    let ask = |room: bool| pb::NextChunkRequest {
        name: "n1".into(),
        identity: "n1-identity".into(),
        memory_bytes: 1 << 30,
        incarnation: "n1-1".into(),
        room,
        ..Default::default()
    };
    div.next_chunk(ask(false)).await.expect("n1 joins");
    let done = |id: u64, chunk: u64, declared: u64, data: Vec<u8>| {
        tokio_stream::iter(vec![
            pb::ChunkDonePiece {
                piece: Some(pb::chunk_done_piece::Piece::Header(pb::ChunkResultHeader {
                    job_id: id,
                    chunk,
                    success: true,
                    name: "n1".into(),
                    identity: "n1-identity".into(),
                    output_bytes: declared,
                    ..Default::default()
                })),
            },
            pb::ChunkDonePiece {
                piece: Some(pb::chunk_done_piece::Piece::Data(data)),
            },
        ])
    };
    let cases: [(&str, u64, Vec<u8>, &str); 2] = [
        (
            "huge",
            (4 << 30) + 1,
            b"some\n".to_vec(),
            "more than the 4 GiB of output one chunk may send the server",
        ),
        (
            "liar",
            4,
            vec![b'x'; 64 << 10],
            "sent more than the 4 bytes of output it declared",
        ),
    ];
    for (name, declared, data, why) in cases {
        let id = ClientClient::with_interceptor(channel.clone(), client_token(&server))
            .submit(pb::SubmitRequest {
                origin: format!("{name}.toml"),
                text: format!(
                    "[[divisible]]\nname = \"{name}\"\nunits = 1\n\
                     command = \"echo {{start}} {{end}}\"\n"
                ),
                workdir: "/".into(),
                ..Default::default()
            })
            .await
            .expect("submitted")
            .into_inner()
            .job_id;
        let order = div
            .next_chunk(ask(true))
            .await
            .expect("n1 asks")
            .into_inner()
            .orders
            .into_iter()
            .find(|o| o.job_id == id)
            .expect("n1 gets the chunk");
        div.chunk_done(done(id, order.chunk, declared, data))
            .await
            .expect("answered");
        assert_eq!(
            chunk_state(&channel, client_token(&server), id, order.chunk).await,
            "failed",
            "{name}: the chunk's output was taken"
        );
        let job = ClientClient::with_interceptor(channel.clone(), client_token(&server))
            .get_job(pb::GetJobRequest {
                job_id: id,
                wait_ms: 0,
            })
            .await
            .expect("job")
            .into_inner();
        let message = job.divisible.expect("divisible").message;
        assert!(message.contains(why), "{name}: {message}");
        let kept: Vec<_> = std::fs::read_dir(dir.join("divisible").join(format!("job-{id}")))
            .map(|d| d.filter_map(Result::ok).map(|e| e.file_name()).collect())
            .unwrap_or_default();
        assert!(
            kept.iter()
                .all(|f| !f.to_string_lossy().starts_with("chunk-")),
            "{name}: a chunk's output was kept: {kept:?}"
        );
    }
    server.stop().await.expect("stops");
}

/// The agent token alone does not speak for a node's stream workers: `SyncWorkers` for node n
/// is refused (`PermissionDenied`, naming it) with another node's identity, a wrong or empty
/// one, and for a node no agent registered; n's own agent syncs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_a_nodes_own_agent_syncs_its_stream_workers() {
    use pb::topology_agent_client::TopologyAgentClient;
    let (_scratch, dir) = scratch("sync-owner");
    let (server, channel) =
        serve_with_agents(&dir, &[("n", "n-identity"), ("m", "m-identity")]).await;
    let mut topo = TopologyAgentClient::with_interceptor(channel.clone(), agent_token(&server));
    let sync = |node: &str, identity: &str| pb::SyncWorkersRequest {
        node: node.into(),
        identity: identity.into(),
        cores: 2,
        // A forger would say n runs no worker (so its workers are restarted elsewhere).
        workers: Vec::new(),
        hold_ms: 0,
        ..Default::default()
    };
    for (node, identity) in [
        ("n", "m-identity"),
        ("n", ""),
        ("n", "n-identity-not"),
        ("ghost", "ghost-identity"),
    ] {
        let e = topo
            .sync_workers(sync(node, identity))
            .await
            .expect_err("a sync without the node's identity");
        assert_eq!(
            e.code(),
            tonic::Code::PermissionDenied,
            "{node}/{identity}: {e:?}"
        );
        assert!(
            e.message().contains(&format!("`{node}`")),
            "names the node: {e:?}"
        );
    }
    topo.sync_workers(sync("n", "n-identity"))
        .await
        .expect("n's own agent syncs");
    topo.sync_workers(sync("m", "m-identity"))
        .await
        .expect("m's own agent syncs");
    server.stop().await.expect("stops");
}

/// A user's calls held open or relayed to agents are bounded
/// (`throttle::MAX_CALLS_IN_FLIGHT_PER_USER`): `GetJob` waits and `ReadLog` calls together
/// past the bound are refused `RESOURCE_EXHAUSTED`, naming it; another user is not; a
/// look that is not held still answers; a call that ends gives its place back. Before, a
/// client could hold any number open, each a task and a subscription on the server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_users_held_and_relayed_calls_are_bounded() {
    use hetsched_server::throttle::MAX_CALLS_IN_FLIGHT_PER_USER as MOST;
    let (_scratch, dir) = scratch("in-flight");
    let (server, channel) = common::serve(ServerConfig {
        data_dir: dir.clone(),
        ..Default::default()
    })
    .await;
    let mut admin = ClientClient::with_interceptor(channel.clone(), client_token(&server));
    let alice_token = admin
        .add_user(pb::AddUserRequest {
            name: "alice".into(),
            ..Default::default()
        })
        .await
        .expect("alice")
        .into_inner()
        .token;
    let alice = ClientClient::with_interceptor(
        channel.clone(),
        pb::TokenInterceptor::new(&alice_token).expect("ascii"),
    );
    let job = admin
        .submit(pb::SubmitRequest {
            origin: "job.toml".into(),
            text:
                "[[application]]\nname = \"a\"\ntasks = 1\n[application.cpu]\ncommand = \"true\"\n"
                    .into(),
            hold: true,
            ..Default::default()
        })
        .await
        .expect("submitted")
        .into_inner()
        .job_id;
    let wait = pb::GetJobRequest {
        job_id: job,
        wait_ms: 60_000,
    };
    // One more than the bound: exactly one of them, the last to arrive, is refused.
    let mut held = Vec::new();
    for _ in 0..=MOST {
        let mut c = alice.clone();
        let w = wait;
        held.push(tokio::spawn(async move { c.get_job(w).await }));
    }
    let mut refused = None;
    for _ in 0..500 {
        if let Some(i) = held.iter().position(|h| h.is_finished()) {
            refused = Some(held.swap_remove(i).await.expect("joined"));
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let e = refused
        .expect("one past the bound ends")
        .expect_err("one past the bound is refused");
    assert!(held.iter().all(|h| !h.is_finished()), "the others are held");
    assert_eq!(e.code(), tonic::Code::ResourceExhausted, "{e:?}");
    assert!(
        e.message().contains(&format!(
            "user `alice` has {MOST} held open or relayed to agents already, the most one user \
             may have at once"
        )),
        "{}",
        e.message()
    );
    // A log read counts with them.
    let e = alice
        .clone()
        .read_log(pb::ReadLogRequest {
            job_id: job,
            task: "0".into(),
            ..Default::default()
        })
        .await
        .expect_err("past the bound");
    assert_eq!(e.code(), tonic::Code::ResourceExhausted, "{e:?}");
    // So does a divisible job's output stream.
    let e = pb::divisible_client_client::DivisibleClientClient::with_interceptor(
        channel.clone(),
        pb::TokenInterceptor::new(&alice_token).expect("ascii"),
    )
    .read_output(pb::ReadOutputRequest { job_id: job })
    .await
    .expect_err("past the bound");
    assert_eq!(e.code(), tonic::Code::ResourceExhausted, "{e:?}");
    // A look that is not held, and another user's wait, still answer.
    alice
        .clone()
        .get_job(pb::GetJobRequest {
            job_id: job,
            wait_ms: 0,
        })
        .await
        .expect("not held");
    admin
        .get_job(pb::GetJobRequest {
            job_id: job,
            wait_ms: 10,
        })
        .await
        .expect("the admin's own");
    // The held calls end (cancelled with their tasks): their places are given back.
    for h in &held {
        h.abort();
    }
    let mut back = false;
    for _ in 0..200 {
        let w = pb::GetJobRequest {
            wait_ms: 10,
            ..wait
        };
        if alice.clone().get_job(w).await.is_ok() {
            back = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert!(back, "the places were given back");
    server.stop().await.expect("stops");
}

/// A server with `[tls]` and no `agent_ca` (so it certifies its agents' listeners), over
/// `dir`, and an agent client of it over TLS from 127.0.0.1.
pub(crate) async fn tls_server(
    dir: &std::path::Path,
) -> (
    hetsched_server::ServerHandle,
    AgentClient<
        tonic::service::interceptor::InterceptedService<
            tonic::transport::Channel,
            pb::TokenInterceptor,
        >,
    >,
) {
    let tls = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../cli/tests/tls");
    let server = hetsched_server::start(ServerConfig {
        data_dir: dir.to_path_buf(),
        listen: "127.0.0.1:0".parse().expect("addr"),
        tls: Some(hetsched_server::config::TlsConfig {
            cert: tls.join("server.pem"),
            key: tls.join("server.key"),
            agent_ca: None,
        }),
        ..Default::default()
    })
    .await
    .expect("server starts");
    let ca = std::fs::read(tls.join("ca.pem")).expect("ca");
    let channel = pb::endpoint(&format!("https://{}", server.addr), Some(&ca))
        .expect("endpoint")
        .connect()
        .await
        .expect("connect");
    let agent = AgentClient::with_interceptor(channel, agent_token(&server));
    (server, agent)
}

/// A P-256 public key as an agent sends it.
pub(crate) fn listener_key() -> Vec<u8> {
    rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)
        .expect("key")
        .public_key_raw()
        .to_vec()
}

/// `ListenerCertificate` signs (CPU) for whoever holds the agent token: at most
/// `throttle::CERTIFICATES_PER_ADDRESS` a minute per caller address, one more refused
/// `RESOURCE_EXHAUSTED` naming the bound. Before, an agent could ask in a loop.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listener_certificates_are_bounded_per_caller_address() {
    use hetsched_server::throttle::CERTIFICATES_PER_ADDRESS as MOST;
    let (_scratch, dir) = scratch("certify-rate");
    let (server, mut agent) = tls_server(&dir).await;
    let ask = || pb::ListenerCertificateRequest {
        public_key: listener_key(),
        ..Default::default()
    };
    for _ in 0..MOST {
        agent
            .listener_certificate(ask())
            .await
            .expect("within the bound");
    }
    let e = agent
        .listener_certificate(ask())
        .await
        .expect_err("one more");
    assert_eq!(e.code(), tonic::Code::ResourceExhausted, "{e:?}");
    assert!(
        e.message().contains(&format!(
            "certified {MOST} listener keys for 127.0.0.1 in the last 60 s"
        )),
        "{}",
        e.message()
    );
    server.stop().await.expect("stops");
}

/// A DNS name an agent advertises is certified only if it resolves, on the server's host, to
/// the address the call came from: before, any name was certified blindly, so an agent-token
/// holder could get a certificate for another agent's name (or any host's) and pass for it
/// to every peer that trusts the agents' CA. A name that does not resolve is refused, naming
/// it. (One that resolves to the caller is certified: `agent_ca::tests`; here every name that
/// resolves to 127.0.0.1 is the server's own, below.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_advertised_dns_name_is_certified_only_where_it_resolves_to_the_caller() {
    let (_scratch, dir) = scratch("certify-dns");
    let (server, mut agent) = tls_server(&dir).await;
    let ask = |host: &str| pb::ListenerCertificateRequest {
        public_key: listener_key(),
        advertise_host: host.into(),
        ..Default::default()
    };
    agent
        .listener_certificate(ask(""))
        .await
        .expect("no advertised host: the caller's address alone");
    let e = agent
        .listener_certificate(ask("hetsched-test.invalid"))
        .await
        .expect_err("a name that resolves nowhere");
    assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");
    assert!(
        e.message().contains(
            "advertised host `hetsched-test.invalid` does not resolve on the server's host"
        ),
        "{}",
        e.message()
    );
    server.stop().await.expect("stops");
}

/// An ask whose advertised DNS name the server looks up counts against the per-address bound
/// even when the lookup refuses it: before, the bound was counted after the (blocking) lookup,
/// so refused asks were never counted and an agent-token holder could start lookups without
/// bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn asks_refused_by_the_dns_lookup_count_against_the_bound() {
    use hetsched_server::throttle::CERTIFICATES_PER_ADDRESS as MOST;
    let (_scratch, dir) = scratch("certify-dns-rate");
    let (server, mut agent) = tls_server(&dir).await;
    let ask = |host: &str| pb::ListenerCertificateRequest {
        public_key: listener_key(),
        advertise_host: host.into(),
        ..Default::default()
    };
    for _ in 0..MOST {
        let e = agent
            .listener_certificate(ask("hetsched-test.invalid"))
            .await
            .expect_err("a name that resolves nowhere");
        assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");
    }
    for host in ["hetsched-test.invalid", ""] {
        let e = agent
            .listener_certificate(ask(host))
            .await
            .expect_err("past the bound");
        assert_eq!(e.code(), tonic::Code::ResourceExhausted, "{host}: {e:?}");
    }
    server.stop().await.expect("stops");
}

/// The server certifies no agent for its own names: before, an agent on the server's host
/// (or any agent-token holder there) got a certificate from the agents' CA for `localhost` or
/// `127.0.0.1`, names the server's own TLS certificate is for, and could pass for the server
/// to whoever trusts that CA. Both are refused, naming the reason; no advertised host is still
/// certified.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_servers_own_names_are_not_certified_for_an_agent() {
    let (_scratch, dir) = scratch("certify-own");
    let (server, mut agent) = tls_server(&dir).await;
    let ask = |host: &str| pb::ListenerCertificateRequest {
        public_key: listener_key(),
        advertise_host: host.into(),
        ..Default::default()
    };
    for own in ["localhost", "LocalHost", "127.0.0.1"] {
        let e = agent
            .listener_certificate(ask(own))
            .await
            .expect_err("a name of the server's certificate");
        assert_eq!(e.code(), tonic::Code::InvalidArgument, "{own}: {e:?}");
        assert!(
            e.message().contains(&format!(
                "advertised host `{own}` is a name the server's own TLS certificate is valid for"
            )),
            "{}",
            e.message()
        );
    }
    agent
        .listener_certificate(ask(""))
        .await
        .expect("the caller's address alone");
    server.stop().await.expect("stops");
}

/// An agent that says which node it is (`node`, `identity`) is told apart by node, not by the
/// address its call comes from: over the RPC, a name a registered node advertises is refused
/// to another node's agent calling from the same address (before, agents sharing an address
/// could get each other's names), and to a caller naming that node without its identity.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_name_another_node_advertises_is_refused_by_node_over_the_rpc() {
    let (_scratch, dir) = scratch("certify-by-node");
    let (server, mut agent) = tls_server(&dir).await;
    let n7 = agent
        .register(registration("n7", common::IDENTITY))
        .await
        .expect("n7")
        .into_inner()
        .node_id;
    agent
        .heartbeat(pb::HeartbeatRequest {
            advertise: "https://n7.example:7430".into(),
            ..heartbeat_request(n7, &[], &[])
        })
        .await
        .expect("n7 advertises its name");
    let ask = |node: &str, identity: &str| pb::ListenerCertificateRequest {
        public_key: listener_key(),
        advertise_host: "n7.example".into(),
        node: node.into(),
        identity: identity.into(),
    };
    let e = agent
        .listener_certificate(ask("n8", "identity-of-n8"))
        .await
        .expect_err("n7's name for n8, from n7's address");
    assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");
    assert!(
        e.message()
            .contains("advertised host `n7.example` is advertised by node `n7`"),
        "{}",
        e.message()
    );
    let e = agent
        .listener_certificate(ask("n7", "identity-of-n8"))
        .await
        .expect_err("n7 without its identity");
    assert!(
        e.message().contains(
            "this call speaks for node `n7` without the identity that node registered with"
        ),
        "{}",
        e.message()
    );
    server.stop().await.expect("stops");
}

/// A request naming a live node is refused without that node's identity whatever it
/// advertises — before, with no `advertise` host the identity was not looked at and the
/// caller was certified — and a refused request is neither signed nor counted against the
/// bound of listener certificates per address: after as many refusals as the bound, the
/// node's own agent, asking without a host too, is still certified.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_naming_a_live_node_without_its_identity_is_refused_with_no_host_and_not_counted()
{
    use hetsched_server::throttle::CERTIFICATES_PER_ADDRESS as MOST;
    let (_scratch, dir) = scratch("certify-no-host");
    let (server, mut agent) = tls_server(&dir).await;
    agent
        .register(registration("t1", common::IDENTITY))
        .await
        .expect("t1");
    let ask = |identity: &str| pb::ListenerCertificateRequest {
        public_key: listener_key(),
        advertise_host: String::new(),
        node: "t1".into(),
        identity: identity.into(),
    };
    for _ in 0..MOST {
        let e = agent
            .listener_certificate(ask("identity-of-another"))
            .await
            .expect_err("t1 without its identity, no host");
        assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");
        assert!(
            e.message().contains(
                "this call speaks for node `t1` without the identity that node registered with"
            ),
            "{}",
            e.message()
        );
    }
    let e = agent
        .listener_certificate(ask(""))
        .await
        .expect_err("t1 with no identity");
    assert!(
        e.message()
            .contains("the request names node `t1` without its identity: send both or neither"),
        "{}",
        e.message()
    );
    let own = agent
        .listener_certificate(ask(common::IDENTITY))
        .await
        .expect("t1's own agent: the refusals counted nothing")
        .into_inner();
    assert!(
        own.cert_pem.contains("BEGIN CERTIFICATE"),
        "{}",
        own.cert_pem
    );
    server.stop().await.expect("stops");
}

/// A state of its own over a new store in scratch directory `name`, and that directory (held by
/// the caller: removed when its test passes).
fn fresh_state(name: &str) -> (Scratch, State) {
    let (scratch, dir) = scratch(name);
    std::fs::create_dir_all(&dir).expect("dir");
    let s = State::open(
        &ServerConfig {
            data_dir: dir.clone(),
            ..Default::default()
        },
        Store::open(&dir.join("state.db")).expect("store"),
    )
    .expect("state");
    (scratch, s)
}

/// By node: a name a live node advertises is refused to every other node's agent, wherever
/// its calls come from — before, the rule went by address, so agents sharing one (one host,
/// NAT) got certificates for each other's names — and is certified to that node's own agent
/// from any address, so an agent that restarts from a new address keeps its name while its
/// old node still counts as live (before, it was refused until the node was declared dead).
/// Naming a live node without its identity, or a node with no identity, is refused; a node
/// not registered yet (an agent asks before its first registration) may take a free name.
#[test]
fn a_dns_name_is_certified_by_node_when_the_agent_says_which_it_is() {
    let (_dir, mut s) = fresh_state("certify-node");
    let n7 = s
        .register(registration("n7", common::IDENTITY))
        .expect("n7")
        .node_id;
    let n8 = s
        .register(registration("n8", "identity-of-n8"))
        .expect("n8")
        .node_id;
    let shared: std::net::IpAddr = "10.0.0.7".parse().expect("ip");
    s.note_peer(n7, Some(shared));
    s.note_peer(n8, Some(shared));
    s.heartbeat(pb::HeartbeatRequest {
        advertise: "https://n7.example:7430".into(),
        ..heartbeat_request(n7, &[], &[])
    })
    .expect("beat");
    // By address, n8's agent (same address) would pass; by node it does not.
    s.check_listener_name("n7.example", shared)
        .expect("the address rule cannot tell them apart");
    let e = s
        .check_listener_name_for_node("n7.example", "n8", "identity-of-n8")
        .expect_err("n7's name for n8");
    assert!(
        e.contains("advertised host `n7.example` is advertised by node `n7`: the server"),
        "{e}"
    );
    let e = s
        .check_listener_name_for_node("n7.example", "n9", "identity-of-n9")
        .expect_err("n7's name for a node not registered yet");
    assert!(e.contains("is advertised by node `n7`"), "{e}");
    // n7's own agent, restarted (from whatever address) while n7 is still live.
    s.check_listener_name_for_node("n7.example", "n7", common::IDENTITY)
        .expect("its own name");
    let e = s
        .check_listener_name_for_node("n7.example", "n7", "identity-of-n8")
        .expect_err("n7 without its identity");
    assert!(
        e.contains("this call speaks for node `n7` without the identity that node registered with"),
        "{e}"
    );
    let e = s
        .check_listener_name_for_node("n9.example", "n9", "")
        .expect_err("a node without identity");
    assert!(
        e.contains("the request names node `n9` without its identity"),
        "{e}"
    );
    s.check_listener_name_for_node("n9.example", "n9", "identity-of-n9")
        .expect("a free name for a node not registered yet");
}

/// A DNS name a live node advertises is not certified for a call from another address: it
/// is that node's (its heartbeats advertise it, its calls come from its address). The same
/// node asking again from its own address is certified; once the node is dead, or removed,
/// the name is free (an agent that restarts from a new address is certified once its old node
/// is declared dead).
#[test]
fn a_dns_name_another_live_node_advertises_is_not_certified_for_another_address() {
    let (_dir, mut s) = fresh_state("certify-taken");
    let n7 = s
        .register(registration("n7", common::IDENTITY))
        .expect("n7")
        .node_id;
    let own: std::net::IpAddr = "10.0.0.7".parse().expect("ip");
    let other: std::net::IpAddr = "10.0.0.9".parse().expect("ip");
    s.note_peer(n7, Some(own));
    s.heartbeat(pb::HeartbeatRequest {
        advertise: "https://N7.example:7430".into(),
        ..heartbeat_request(n7, &[], &[])
    })
    .expect("beat");
    let e = s
        .check_listener_name("n7.example", other)
        .expect_err("n7's name, from another address");
    assert!(
        e.contains("advertised host `n7.example` is advertised by node `n7`, whose calls come from 10.0.0.7"),
        "{e}"
    );
    s.check_listener_name("n7.example", own)
        .expect("n7 itself, again");
    s.check_listener_name("n8.example", other)
        .expect("a name no node advertises");
    std::thread::sleep(std::time::Duration::from_millis(20));
    s.check_dead(std::time::Duration::from_millis(10))
        .expect("checked");
    s.check_listener_name("n7.example", other)
        .expect("a dead node's name is free");
    s.remove_node("n7").expect("removed");
    s.check_listener_name("n7.example", other)
        .expect("a removed node's name is free");
}

/// A divisible job of one unit, run through the state in `dir` until it completes, its gathered
/// output then replaced by `len` bytes (a sparse file): its id.
fn completed_divisible_job(dir: &std::path::Path, len: u64) -> u64 {
    let mut s = open(dir);
    s.register(registration("n", common::IDENTITY))
        .expect("register");
    let id = s
        .submit(
            "one.toml",
            "[[divisible]]\nname = \"one\"\nunits = 1\ncommand = \"echo {start} {end}\"\n",
            "/",
        )
        .expect("submitted")
        .job_id;
    for _ in 0..10 {
        if s.get_job(id).expect("job").state == "completed" {
            break;
        }
        for o in common::ask_chunk(&mut s, "n").orders {
            let tmp = dir
                .join("divisible")
                .join(format!("job-{id}"))
                .join(format!("chunk-{}.part", o.chunk));
            std::fs::write(&tmp, b"0 1\n").expect("chunk output");
            s.on_chunk_done(
                &hetsched_server::jobs::divisible::ChunkResult {
                    job_id: id,
                    chunk: o.chunk,
                    success: true,
                    message: String::new(),
                    transfer_ns: 1_000,
                    compute_ns: 1_000_000,
                    reason: None,
                },
                Some(&tmp),
            )
            .expect("recorded");
        }
    }
    let out = s.divisible_output(id).expect("completed");
    std::fs::File::create(&out)
        .and_then(|f| f.set_len(len))
        .expect("a large output");
    id
}

/// The server's `ReadOutput` streams are bounded for all users together
/// (`max_output_streams`), not only each user's: with the bound at 2, two streams held open
/// leave no room for a third, which is refused `RESOURCE_EXHAUSTED` naming the key; once one
/// closes, a new one is streamed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_servers_output_streams_are_bounded_for_all_users_together() {
    use pb::divisible_client_client::DivisibleClientClient;
    let (_scratch, dir) = scratch("output-streams");
    // Far more than the connection's flow-control windows: a stream nobody reads stays open.
    let id = completed_divisible_job(&dir, 256 << 20);
    let (server, channel) = common::serve(ServerConfig {
        data_dir: dir.clone(),
        max_output_streams: 2,
        ..Default::default()
    })
    .await;
    // The admin's streams (the job is the admin's), far within the 64 one user may hold: the
    // bound met is the server's.
    let c = DivisibleClientClient::with_interceptor(channel.clone(), client_token(&server));
    let read = || {
        let mut c = c.clone();
        async move { c.read_output(pb::ReadOutputRequest { job_id: id }).await }
    };
    let first = read().await.expect("1 of 2");
    let second = read().await.expect("2 of 2");
    let e = read().await.expect_err("3 of 2");
    assert_eq!(e.code(), tonic::Code::ResourceExhausted, "{e:?}");
    assert!(
        e.message().contains("the server streams 2 outputs already")
            && e.message().contains("`max_output_streams`"),
        "{}",
        e.message()
    );
    // The first reader goes: its place is given back once the server sees the stream closed.
    drop(first);
    let mut again = None;
    for _ in 0..250 {
        match read().await {
            Ok(s) => {
                again = Some(s);
                break;
            }
            Err(e) => assert_eq!(e.code(), tonic::Code::ResourceExhausted, "{e:?}"),
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let mut again = again.expect("a new stream once one closed").into_inner();
    let piece = again.message().await.expect("streamed").expect("a piece");
    assert!(!piece.data.is_empty());
    // A graceful stop waits for open streams: these end first.
    drop((second, again));
    server.stop().await.expect("stops");
}

/// A CA certificate as the server's own (what `openssl req -x509` makes by default) is refused
/// by `--check` and at a start, naming why: every client and agent (rustls) would refuse each
/// connection with `CaUsedAsEndEntity`. A self-signed certificate that is no CA's passes.
#[test]
fn a_ca_certificate_as_the_servers_own_is_refused_before_the_start() {
    let (_scratch, dir) = scratch("ca-as-server");
    std::fs::create_dir_all(&dir).expect("dir");
    let write = |name: &str, ca: bool| {
        let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).expect("key");
        let mut params =
            rcgen::CertificateParams::new(vec!["localhost".to_string()]).expect("params");
        if ca {
            params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        }
        let cert = params.self_signed(&key).expect("cert");
        let (c, k) = (
            dir.join(format!("{name}.pem")),
            dir.join(format!("{name}.key")),
        );
        std::fs::write(&c, cert.pem()).expect("cert file");
        std::fs::write(&k, key.serialize_pem()).expect("key file");
        hetsched_server::config::TlsConfig {
            cert: c,
            key: k,
            agent_ca: None,
        }
    };
    let config = |tls| ServerConfig {
        data_dir: dir.join("data"),
        tls: Some(tls),
        ..ServerConfig::default()
    };
    let e = hetsched_server::check(&config(write("ca", true)))
        .expect_err("a CA's certificate is refused")
        .to_string();
    assert!(
        e.contains("ca.pem")
            && e.contains("is a CA certificate")
            && e.contains("CaUsedAsEndEntity"),
        "{e}"
    );
    hetsched_server::check(&config(write("leaf", false))).expect("a server certificate passes");
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let started = rt.block_on(hetsched_server::start(config(write("ca2", true))));
    match started {
        Ok(_) => panic!("a start with a CA's certificate"),
        Err(e) => assert!(e.to_string().contains("is a CA certificate"), "{e}"),
    }
    assert!(
        !dir.join("data").exists(),
        "nothing made before the refusal"
    );
}
