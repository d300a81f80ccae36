//! Helpers shared by the server's in-process tests.

use hetsched_proto as pb;
use hetsched_server::convert::Wire;
use hetsched_server::state::State;
use std::path::Path;

/// The identity every test agent registers and heartbeats with (unless a test forges another).
pub const IDENTITY: &str = "test-agent-identity";

/// The dead timeout a test declares silent nodes dead with (`State::check_dead`): long enough
/// that a node which beat just before is never declared dead by it, even on a loaded machine,
/// where a heartbeat's commit alone can take tens of milliseconds (20 ms made the tests that
/// beat two nodes before the check flaky).
pub const DEAD_TIMEOUT: std::time::Duration = std::time::Duration::from_millis(300);

/// How long a node stays silent for [`DEAD_TIMEOUT`] to declare it dead.
pub const SILENCE: std::time::Duration = std::time::Duration::from_millis(400);

/// The agent of node `name` (1 GiB) asks for divisible chunks, with room: the server's answer.
pub fn ask_chunk(s: &mut State, name: &str) -> hetsched_server::jobs::divisible::ChunkReply {
    s.on_next_chunk(hetsched_server::jobs::divisible::ChunkRequest {
        name: name.into(),
        memory_bytes: 1 << 30,
        incarnation: "i1".into(),
        room: true,
        ..Default::default()
    })
    .expect("an answer")
}

/// Registers an agent `name` with `cores` cores and 1 GiB of memory; its node id.
pub fn register(s: &mut State, name: &str, cores: u32) -> u32 {
    register_with(s, name, cores, &[])
}

/// The registration of an agent `name` with `cores` cores and 1 GiB of memory, everything else
/// default: a test changes what it needs with `..registration(name, cores)`.
pub fn registration(name: &str, cores: u32) -> pb::RegisterRequest {
    pb::RegisterRequest {
        identity: IDENTITY.into(),
        name: name.into(),
        cores,
        memory_bytes: 1 << 30,
        ..Default::default()
    }
}

/// Registers node `name` with `cores` cores, 1 GiB and `attributes`; returns its id.
pub fn register_with(s: &mut State, name: &str, cores: u32, attributes: &[&str]) -> u32 {
    s.register(pb::RegisterRequest {
        attributes: attributes.iter().map(|a| (*a).to_string()).collect(),
        ..registration(name, cores)
    })
    .expect("register")
    .node_id
}

/// Registers node `name` with `cores` cores, 1 GiB of memory and `gpus` accelerators of kind
/// `a100`; returns its id.
pub fn register_with_gpus(s: &mut State, name: &str, cores: u32, gpus: u32) -> u32 {
    s.register(pb::RegisterRequest {
        accelerators: (0..gpus)
            .map(|_| pb::Accelerator {
                kind: "a100".into(),
                memory_bytes: 1 << 30,
                speed: 1.0,
            })
            .collect(),
        ..registration(name, cores)
    })
    .expect("register")
    .node_id
}

/// Edits the stored rows of nodes `names` in the store of the stopped server whose data
/// directory is `data_dir`: their 1 GiB of memory becomes 16 EiB, past a registration's bound,
/// as a store edited by hand or written by a version with looser bounds holds.
pub fn store_memory_past_the_bound(data_dir: &Path, names: &[&str]) {
    let db = rusqlite::Connection::open(data_dir.join("state.db")).expect("db");
    let quoted: Vec<String> = names.iter().map(|n| format!("'{n}'")).collect();
    let edited = db
        .execute(
            &format!(
                "UPDATE nodes SET spec = replace(spec, '\"memory_bytes\":1073741824', \
                 '\"memory_bytes\":18446744073709551615') WHERE name IN ({})",
                quoted.join(", ")
            ),
            [],
        )
        .expect("edit");
    assert_eq!(edited, names.len(), "{names:?} stored");
}

/// `node` beats, reporting `running` (task, attempt) and `results` (task, attempt, success):
/// the server's reply.
pub fn beat(
    s: &mut State,
    node: u32,
    running: &[(u64, u32)],
    results: &[(u64, u32, bool)],
) -> pb::HeartbeatReply {
    s.heartbeat(heartbeat_request(node, running, results))
        .expect("heartbeat")
}

/// `node` beats, and beats again reporting every task it was assigned succeeded: how many.
pub fn run_assigned(s: &mut State, node: u32) -> usize {
    let r = beat(s, node, &[], &[]);
    let done: Vec<(u64, u32, bool)> = r
        .assignments
        .iter()
        .map(|a| (a.task_id, a.attempt, true))
        .collect();
    beat(s, node, &[], &done);
    done.len()
}

/// One agent (node `n`): what it runs, reported on every beat as an agent does.
pub struct Agent {
    pub node: u32,
    pub running: Vec<(u64, u32)>,
}

impl Agent {
    /// Registers node `n` with `cores` cores.
    pub fn new(s: &mut State, cores: u32) -> Self {
        Agent {
            node: register(s, "n", cores),
            running: Vec::new(),
        }
    }

    /// Beats with `results` (task, attempt, success) of tasks it ran; returns what it was sent.
    pub fn beat(&mut self, s: &mut State, results: &[(u64, u32, bool)]) -> Vec<(u64, u32)> {
        self.running
            .retain(|r| !results.iter().any(|x| (x.0, x.1) == *r));
        let sent: Vec<(u64, u32)> = s
            .heartbeat(heartbeat_request(self.node, &self.running, results))
            .expect("heartbeat")
            .assignments
            .iter()
            .map(|a| (a.task_id, a.attempt))
            .collect();
        self.running.extend(&sent);
        sent
    }
}

/// A heartbeat from `node` reporting `running` (task, attempt) and `results` (task, attempt,
/// success); everything else default.
pub fn heartbeat_request(
    node: u32,
    running: &[(u64, u32)],
    results: &[(u64, u32, bool)],
) -> pb::HeartbeatRequest {
    pb::HeartbeatRequest {
        node_id: node,
        running: running
            .iter()
            .map(|&(task_id, attempt)| pb::RunningTask {
                task_id,
                attempt,
                ..Default::default()
            })
            .collect(),
        results: results
            .iter()
            .map(|&(task_id, attempt, success)| pb::TaskResult {
                task_id,
                attempt,
                exit_code: if success { 0 } else { 1 },
                success,
                started_ns: 1,
                finished_ns: 2,
                ..Default::default()
            })
            .collect(),
        identity: IDENTITY.into(),
        ..Default::default()
    }
}

/// A test's scratch directory: removed when the test passes, kept (its path on stderr) when it
/// fails. A server started in-process on it is stopped, or dropped, before it: declare the
/// directory first.
pub use hetsched_core::testkit::ScratchDir as Scratch;

/// A fresh scratch directory for test `name` of module `topic`.
pub fn scratch(topic: &str, name: &str) -> Scratch {
    Scratch::new(topic, name)
}

/// A server started in-process over `config` on a loopback port (`config.listen` is replaced),
/// and a channel to it.
pub async fn serve(
    mut config: hetsched_server::ServerConfig,
) -> (hetsched_server::ServerHandle, tonic::transport::Channel) {
    config.listen = "127.0.0.1:0".parse().expect("addr");
    let server = hetsched_server::start(config).await.expect("server starts");
    let channel = pb::endpoint(&format!("http://{}", server.addr), None)
        .expect("endpoint")
        .connect()
        .await
        .expect("connect");
    (server, channel)
}

/// The client token of `server`, as a call interceptor.
pub fn client_token(server: &hetsched_server::ServerHandle) -> pb::TokenInterceptor {
    pb::TokenInterceptor::new(&server.token).expect("ascii token")
}

/// The agent token of `server`, as a call interceptor.
pub fn agent_token(server: &hetsched_server::ServerHandle) -> pb::TokenInterceptor {
    pb::TokenInterceptor::new(&server.agent_token).expect("ascii token")
}

/// [`serve`] of a `config` with an HTTP listener: the server, its channel, the listener's
/// address and the read-only token (`DATA_DIR/read-token`).
pub async fn serve_http(
    config: hetsched_server::ServerConfig,
) -> (
    hetsched_server::ServerHandle,
    tonic::transport::Channel,
    std::net::SocketAddr,
    String,
) {
    let dir = config.data_dir.clone();
    let (server, channel) = serve(config).await;
    let http = server.http_addr.expect("an HTTP listener");
    let read_token = std::fs::read_to_string(dir.join("read-token")).expect("read-token");
    (server, channel, http, read_token.trim().to_string())
}

/// An agent client of `server` over `channel`, with node `name` (`cores` cores, `memory_bytes`)
/// registered through it: the client and the node's id.
pub async fn agent_of(
    server: &hetsched_server::ServerHandle,
    channel: &tonic::transport::Channel,
    name: &str,
    cores: u32,
    memory_bytes: u64,
) -> (
    pb::agent_client::AgentClient<
        tonic::service::interceptor::InterceptedService<
            tonic::transport::Channel,
            pb::TokenInterceptor,
        >,
    >,
    u32,
) {
    let mut agent =
        pb::agent_client::AgentClient::with_interceptor(channel.clone(), agent_token(server));
    let node = agent
        .register(pb::RegisterRequest {
            name: name.into(),
            cores,
            memory_bytes,
            core_speed: 1.0,
            identity: IDENTITY.into(),
            ..Default::default()
        })
        .await
        .expect("registered")
        .into_inner()
        .node_id;
    (agent, node)
}

/// The Prometheus text `/metrics` serves for `s` (its registry under `policy`, encoded once),
/// checked to hold each of `lines` (panics naming the first that it does not), and returned.
pub fn assert_metrics(s: State, policy: &str, lines: &[&str]) -> String {
    let metrics = s.metrics();
    let reg = hetsched_server::metrics::registry(
        &metrics,
        std::sync::Arc::new(std::sync::Mutex::new(s)),
        policy,
    );
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &reg).expect("encode");
    for line in lines {
        assert!(text.contains(line), "{line} not in:\n{text}");
    }
    text
}
