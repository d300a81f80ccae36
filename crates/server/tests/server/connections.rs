//! The server's listeners bound the connections they hold: one that has not sent its greeting
//! (gRPC: the TLS handshake with `[tls]`, HTTP/2's preface and first frame; HTTP: the first
//! request's headers) within the greeting timeout is closed, and past `max_connections` open
//! at once a new one is closed as soon as it is accepted. Before, a connection that sent
//! nothing stayed open for good on the HTTP listener and on gRPC, plain and TLS, so anyone who
//! could reach a port could exhaust the server's file descriptors.

use crate::common::{self, Scratch};
use hetsched_proto as pb;
use hetsched_proto::client_client::ClientClient;
use hetsched_server::ServerConfig;
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;

/// The greeting timeout of these tests' servers.
const GREETING: Duration = Duration::from_secs(1);
/// Their connection cap (the least `max_connections` takes).
const MOST: u32 = 16;

/// Whether the server closed `s` within `within`: a read ends (EOF or reset) rather than
/// waiting. Bytes the server sends first (TLS's) are read past.
async fn closed_within(s: &mut TcpStream, within: Duration) -> bool {
    let mut buf = [0u8; 256];
    let started = tokio::time::Instant::now();
    loop {
        let left = within.saturating_sub(started.elapsed());
        match tokio::time::timeout(left, s.read(&mut buf)).await {
            Err(_) => return false,
            Ok(Ok(0) | Err(_)) => return true,
            Ok(Ok(_)) => {}
        }
    }
}

/// `n` connections to `addr` that send nothing.
async fn silent(addr: SocketAddr, n: u32) -> Vec<TcpStream> {
    let mut v = Vec::new();
    for _ in 0..n {
        v.push(TcpStream::connect(addr).await.expect("connect"));
    }
    v
}

/// `n` silent connections to `addr`, `n - 1` of them within the cap: one is closed at once
/// (which one is the listener's to choose — the HTTP listener admits each connection in a task
/// of its own — so they are counted), the others at the greeting timeout, not before.
async fn flood(label: &str, addr: SocketAddr, n: u32) {
    let started = Instant::now();
    let reads: Vec<_> = silent(addr, n)
        .await
        .into_iter()
        .map(|mut s| {
            tokio::spawn(async move {
                let at_once = closed_within(&mut s, GREETING / 2).await;
                let in_time = at_once || closed_within(&mut s, GREETING * 4).await;
                (at_once, in_time)
            })
        })
        .collect();
    let mut at_once = 0;
    for (i, r) in reads.into_iter().enumerate() {
        let (now, in_time) = r.await.expect("read");
        at_once += usize::from(now);
        assert!(
            in_time,
            "{label}: silent connection {i} still open after {:?}",
            started.elapsed()
        );
    }
    assert_eq!(
        at_once, 1,
        "{label}: only the connection past the cap is closed at once"
    );
    let waited = started.elapsed();
    assert!(
        waited >= GREETING - Duration::from_millis(100),
        "{label}: closed after {waited:?}, before the greeting timeout"
    );
}

/// Fills each listener of a server (gRPC and HTTP; with `[tls]` when `tls`) with silent
/// connections past the cap ([`flood`]); a connection that greeted before stays past the
/// greeting timeout, and the server serves as before.
async fn bounded(name: &str, tls: bool) {
    let scratch = Scratch::new("connections", name);
    let files = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../cli/tests/tls");
    let server = hetsched_server::start(ServerConfig {
        listen: "127.0.0.1:0".parse().expect("addr"),
        http_listen: Some("127.0.0.1:0".parse().expect("addr")),
        data_dir: scratch.join("data"),
        tls: tls.then(|| hetsched_server::config::TlsConfig {
            cert: files.join("server.pem"),
            key: files.join("server.key"),
            agent_ca: None,
        }),
        greeting_timeout: GREETING,
        max_connections: MOST,
        ..Default::default()
    })
    .await
    .expect("server starts");
    let http = server.http_addr.expect("an HTTP listener");
    let url = if tls {
        format!("https://{}", server.addr)
    } else {
        format!("http://{}", server.addr)
    };
    let ca = std::fs::read(files.join("ca.pem")).expect("ca");
    // A client's connection, greeted at once: it holds one of the gRPC listener's places.
    let channel = pb::endpoint(&url, tls.then_some(&ca[..]))
        .expect("endpoint")
        .connect()
        .await
        .expect("connect");
    let (grpc_label, http_label) = (format!("{name}: gRPC"), format!("{name}: HTTP"));
    tokio::join!(
        flood(&grpc_label, server.addr, MOST),
        flood(&http_label, http, MOST + 1),
    );
    ClientClient::with_interceptor(channel, common::client_token(&server))
        .list_jobs(pb::ListJobsRequest::default())
        .await
        .expect("a call on a connection older than the greeting timeout");
    if !tls {
        let health = crate::http::exchange(
            http,
            "GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        )
        .await;
        assert!(health.ends_with(b"\r\n\r\nok"), "{health:?}");
    }
    server.stop().await.expect("stops");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_connections_are_closed_at_the_greeting_timeout_and_the_cap_holds_on_every_listener()
{
    tokio::join!(bounded("plain", false), bounded("tls", true));
}
