//! The optional HTTP listener of a server started in-process on loopback: configured from TOML,
//! bound address in `DATA_DIR/http-address`, `/healthz` without a token, `/metrics` only with
//! one (the read-only token or the client token), unknown paths 404, and the listener closes
//! when the server stops.

use crate::common::Scratch;
use hetsched_server::ServerConfig;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

async fn get(addr: SocketAddr, path: &str) -> String {
    get_with(addr, path, "").await
}

/// Sends `request` (whole: its request line, headers with `Connection: close`, and body) to
/// `addr` and reads the response to its end: the raw bytes. The one HTTP exchange of these
/// tests ([`get_with`], the dashboard's and the JSON API's).
pub(crate) async fn exchange(addr: SocketAddr, request: &str) -> Vec<u8> {
    let exchange = async {
        let mut s = tokio::net::TcpStream::connect(addr).await.expect("connect");
        s.write_all(request.as_bytes()).await.expect("send");
        let mut raw = Vec::new();
        s.read_to_end(&mut raw).await.expect("read");
        raw
    };
    tokio::time::timeout(Duration::from_secs(20), exchange)
        .await
        .expect("the HTTP listener answers within 20 s")
}

/// `GET path` with the extra header lines `headers` (each ending in CRLF).
pub(crate) async fn get_with(addr: SocketAddr, path: &str, headers: &str) -> String {
    let raw = exchange(
        addr,
        &format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\n{headers}Connection: close\r\n\r\n"),
    )
    .await;
    String::from_utf8(raw).expect("a UTF-8 response")
}

/// `GET path` with `token` (none: no `Authorization`): the status code and the body.
pub(crate) async fn get_status(addr: SocketAddr, path: &str, token: Option<&str>) -> (u16, String) {
    let auth = token.map_or(String::new(), |t| format!("Authorization: Bearer {t}\r\n"));
    let raw = get_with(addr, path, &auth).await;
    let code = raw
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = raw.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    (code, body.to_string())
}

/// `GET path` with `token`, which must answer 200 with JSON: the JSON.
pub(crate) async fn get_json(addr: SocketAddr, path: &str, token: &str) -> serde_json::Value {
    let (code, body) = get_status(addr, path, Some(token)).await;
    assert_eq!(code, 200, "{path}: {body}");
    serde_json::from_str(&body).unwrap_or_else(|e| panic!("{path}: {e}: {body}"))
}

/// A server on loopback with its HTTP listener, its data directory new in `scratch` (the test's
/// directory, which the test holds until the server is stopped): the server and that data
/// directory.
async fn with_http(scratch: &Path) -> (hetsched_server::ServerHandle, PathBuf) {
    let dir = scratch.join("data");
    let server = hetsched_server::start(ServerConfig {
        listen: "127.0.0.1:0".parse().expect("addr"),
        http_listen: Some("127.0.0.1:0".parse().expect("addr")),
        data_dir: dir.clone(),
        ..Default::default()
    })
    .await
    .expect("server starts");
    (server, dir)
}

#[test]
fn http_listen_is_read_from_the_config_and_off_by_default() {
    let c = ServerConfig::parse("s.toml", "http_listen = \"127.0.0.1:7421\"\n").expect("parses");
    assert_eq!(
        c.http_listen,
        Some(SocketAddr::from(([127, 0, 0, 1], 7421)))
    );
    assert_eq!(ServerConfig::default().http_listen, None);
    let bad = ServerConfig::parse("s.toml", "http_listen = \"nowhere\"\n");
    assert!(bad.is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn healthz_is_open_metrics_need_a_token_and_both_stop_with_the_server() {
    let scratch = Scratch::new("http", "metrics");
    let (server, dir) = with_http(&scratch).await;
    let addr = server.http_addr.expect("an HTTP listener");
    let written = std::fs::read_to_string(dir.join("http-address")).expect("http-address");
    assert_eq!(written, addr.to_string());

    let health = get(addr, "/healthz").await;
    assert!(health.starts_with("HTTP/1.1 200"), "{health}");
    assert!(health.ends_with("\r\n\r\nok"), "{health}");

    let refused = get(addr, "/metrics").await;
    assert!(refused.starts_with("HTTP/1.1 401"), "{refused}");
    assert!(!refused.contains("hetsched_tasks"), "{refused}");
    let wrong = get_with(addr, "/metrics", "Authorization: Bearer nope\r\n").await;
    assert!(wrong.starts_with("HTTP/1.1 401"), "{wrong}");
    let client = std::fs::read_to_string(dir.join("token")).expect("token");
    let with_client = get_with(
        addr,
        "/metrics",
        &format!("Authorization: Bearer {}\r\n", client.trim()),
    )
    .await;
    assert!(with_client.starts_with("HTTP/1.1 200"), "{with_client}");
    let read = std::fs::read_to_string(dir.join("read-token")).expect("read-token");
    let metrics = get_with(
        addr,
        "/metrics",
        &format!("Authorization: Bearer {}\r\n", read.trim()),
    )
    .await;
    assert!(metrics.starts_with("HTTP/1.1 200"), "{metrics}");
    for line in [
        "hetsched_tasks{state=\"pending\"} 0",
        "hetsched_nodes{state=\"alive\"} 0",
        "hetsched_jobs_submitted_total 0",
        "hetsched_policy_info{policy=\"hdas\"} 1",
        "# TYPE hetsched_heartbeat_duration_seconds histogram",
    ] {
        assert!(metrics.lines().any(|l| l == line), "{line} in\n{metrics}");
    }
    assert!(metrics.ends_with("# EOF\n"), "{metrics}");

    let missing = get(addr, "/nothing").await;
    assert!(missing.starts_with("HTTP/1.1 404"), "{missing}");

    server.stop().await.expect("stops");
    let refused = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            if tokio::net::TcpStream::connect(addr).await.is_err() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(refused.is_ok(), "the HTTP listener closed with the server");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_trickles_its_headers_is_closed_after_the_header_timeout() {
    let scratch = Scratch::new("http", "slow");
    // The greeting timeout (10 s by default), short for the test.
    let timeout = Duration::from_secs(1);
    let server = hetsched_server::start(ServerConfig {
        listen: "127.0.0.1:0".parse().expect("addr"),
        http_listen: Some("127.0.0.1:0".parse().expect("addr")),
        data_dir: scratch.join("data"),
        greeting_timeout: timeout,
        ..Default::default()
    })
    .await
    .expect("server starts");
    let addr = server.http_addr.expect("an HTTP listener");
    let mut s = tokio::net::TcpStream::connect(addr).await.expect("connect");
    s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        .await
        .expect("send");
    // Never the blank line that ends the headers: the server gives up on the connection.
    let started = std::time::Instant::now();
    let limit = timeout + Duration::from_secs(5);
    let mut buf = Vec::new();
    let read = tokio::time::timeout(limit, s.read_to_end(&mut buf)).await;
    assert!(read.is_ok(), "still open after {limit:?}");
    assert!(
        started.elapsed() >= timeout - Duration::from_millis(100),
        "closed after {:?}, before the timeout",
        started.elapsed()
    );
    assert!(
        !String::from_utf8_lossy(&buf).contains("\r\n\r\nok"),
        "no answer to a request that never ended its headers"
    );
    server.stop().await.expect("stops");
}

/// The JSON API refuses a malformed parameter with 400 naming it, instead of dropping it
/// (`/api/tasks?job=abc` once listed every job's tasks).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_api_parameter_is_refused_naming_it() {
    let scratch = Scratch::new("http", "params");
    let (server, dir) = with_http(&scratch).await;
    let addr = server.http_addr.expect("an HTTP listener");
    let token = std::fs::read_to_string(dir.join("token")).expect("token");
    let token = token.trim();
    for (path, said) in [
        ("/api/tasks?job=abc", "job: `abc` is not a number"),
        ("/api/tasks?cursor=zz", "cursor: `zz` is not a number"),
        ("/api/tasks?limit=-3", "limit: `-3` is not a number"),
        ("/api/jobs?limit=0", "limit: at least 1"),
        ("/api/job", "id: give the job's id"),
        ("/api/job?id=-1", "id: `-1` is not a number"),
        ("/api/log?job=1", "task: give a task id or APP:INDEX"),
        ("/api/log?task=0", "job: give the job's id"),
        (
            "/api/log?job=1&task=0&stream=bogus",
            "stream: `bogus` is neither stdout nor stderr",
        ),
    ] {
        let (code, body) = get_status(addr, path, Some(token)).await;
        assert_eq!(code, 400, "{path}: {body}");
        assert!(body.contains(said), "{path}: {body}");
    }
    // Well-formed ones still answer.
    let (code, body) = get_status(addr, "/api/tasks?job=&limit=5", Some(token)).await;
    assert_eq!(code, 200, "{body}");
    server.stop().await.expect("stops");
}

/// Every response of the listener — a page, JSON, a refusal that quotes the request, the 404 of
/// an unknown path, `/healthz` — says `X-Content-Type-Options: nosniff`, so a browser never
/// reads a `text/plain` refusal as a page (one layer over the router, not each handler's care).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_response_of_the_http_listener_says_nosniff() {
    let scratch = Scratch::new("http", "nosniff");
    let (server, dir) = with_http(&scratch).await;
    let addr = server.http_addr.expect("an HTTP listener");
    let token = std::fs::read_to_string(dir.join("token")).expect("token");
    let auth = format!("Authorization: Bearer {}\r\n", token.trim());
    for (path, headers, code) in [
        ("/healthz", "", "200"),
        ("/nothing", "", "404"),
        ("/", "", "401"),
        ("/metrics", "", "401"),
        ("/login", "", "200"),
        ("/api/jobs", auth.as_str(), "200"),
        ("/", auth.as_str(), "200"),
        ("/assets/app.js", auth.as_str(), "200"),
        ("/api/job?id=%3Cscript%3E", auth.as_str(), "400"),
        // The state's words, as plain text.
        ("/api/job?id=99", auth.as_str(), "404"),
        ("/api/log?job=99&task=0", auth.as_str(), "404"),
    ] {
        let raw = get_with(addr, path, headers).await;
        assert!(
            raw.starts_with(&format!("HTTP/1.1 {code}")),
            "{path}: {raw}"
        );
        let head = raw.split_once("\r\n\r\n").map_or(raw.as_str(), |(h, _)| h);
        assert!(
            head.lines()
                .any(|l| l.eq_ignore_ascii_case("x-content-type-options: nosniff")),
            "{path}: no nosniff in\n{head}"
        );
    }
    server.stop().await.expect("stops");
}
