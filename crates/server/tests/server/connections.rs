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

/// A plain server with an HTTP listener, these tests' greeting timeout and `idle` as its idle
/// timeout.
async fn plain_server(scratch: &Scratch, idle: Duration) -> hetsched_server::ServerHandle {
    hetsched_server::start(ServerConfig {
        listen: "127.0.0.1:0".parse().expect("addr"),
        http_listen: Some("127.0.0.1:0".parse().expect("addr")),
        data_dir: scratch.join("data"),
        greeting_timeout: GREETING,
        idle_timeout: idle,
        max_connections: MOST,
        write_stall_timeout: STALL,
        ..Default::default()
    })
    .await
    .expect("server starts")
}

/// The write-stall timeout of [`plain_server`]s.
const STALL: Duration = Duration::from_secs(1);

/// After its greeting, a gRPC connection with no call open is closed at the idle timeout:
/// before, a peer that sent HTTP/2's preface and SETTINGS and then nothing held its
/// connection, and a place under the cap, for good. A client's channel whose connection was
/// closed so calls again as before (it connects anew), and a call held open keeps its
/// connection past the timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grpc_connection_with_no_call_open_is_closed_at_the_idle_timeout_and_clients_call_again()
{
    use tokio::io::AsyncWriteExt;
    const IDLE: Duration = Duration::from_millis(1500);
    let scratch = Scratch::new("connections", "idle");
    let server = plain_server(&scratch, IDLE).await;
    let mut greeted = TcpStream::connect(server.addr).await.expect("connect");
    greeted
        .write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\0\x04\0\0\0\0\0")
        .await
        .expect("greet");
    let started = Instant::now();
    assert!(closed_within(&mut greeted, IDLE * 4).await, "closed");
    let waited = started.elapsed();
    assert!(
        waited >= IDLE - Duration::from_millis(100),
        "closed after {waited:?}"
    );

    let channel = pb::endpoint(&format!("http://{}", server.addr), None)
        .expect("endpoint")
        .connect()
        .await
        .expect("connect");
    let mut client = ClientClient::with_interceptor(channel, common::client_token(&server));
    client
        .list_jobs(pb::ListJobsRequest::default())
        .await
        .expect("a call");
    tokio::time::sleep(IDLE * 2).await;
    for _ in 0..3 {
        client
            .list_jobs(pb::ListJobsRequest::default())
            .await
            .expect("a call after the idle timeout closed the connection");
    }
    server.stop().await.expect("stops");
}

/// The HTTP listener reads a request's body within the greeting timeout of its headers, or
/// answers 408 and closes the connection: before, `POST /login` with `Content-Length: 100000`
/// and a byte a second held the connection for a day. It speaks HTTP/1.1 only: an HTTP/2
/// connection by prior knowledge (h2c), which could idle between requests under none of the
/// listener's bounds, is closed at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trickled_request_body_or_an_h2c_connection_is_not_held_on_the_http_listener() {
    use tokio::io::AsyncWriteExt;
    let scratch = Scratch::new("connections", "body");
    let server = plain_server(&scratch, Duration::from_secs(60)).await;
    let http = server.http_addr.expect("an HTTP listener");
    let mut slow = TcpStream::connect(http).await.expect("connect");
    slow.write_all(
        b"POST /login HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-www-form-urlencoded\r\n\
          Content-Length: 100000\r\n\r\n",
    )
    .await
    .expect("headers");
    let started = Instant::now();
    let trickle = tokio::spawn(async move {
        let mut raw = Vec::new();
        let mut buf = [0u8; 512];
        loop {
            tokio::select! {
                r = slow.read(&mut buf) => match r {
                    Ok(0) | Err(_) => return raw,
                    Ok(n) => raw.extend_from_slice(&buf[..n]),
                },
                () = tokio::time::sleep(Duration::from_millis(200)) => {
                    let _ = slow.write_all(b"a").await;
                }
            }
        }
    });
    let raw = tokio::time::timeout(GREETING * 5, trickle)
        .await
        .expect("closed in time")
        .expect("read");
    let waited = started.elapsed();
    let text = String::from_utf8_lossy(&raw);
    assert!(text.starts_with("HTTP/1.1 408"), "{text}");
    assert!(
        text.contains("the request's body did not arrive within 1 s of its headers"),
        "{text}"
    );
    assert!(
        waited >= GREETING - Duration::from_millis(100),
        "after {waited:?}"
    );

    let mut h2c = TcpStream::connect(http).await.expect("connect");
    h2c.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\0\x04\0\0\0\0\0")
        .await
        .expect("preface");
    assert!(
        closed_within(&mut h2c, GREETING / 2).await,
        "h2c closed at once"
    );
    // A body sent at once is read as before (a wrong login, answered).
    let answer = crate::http::exchange(
        http,
        "POST /login HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-www-form-urlencoded\r\n\
         Content-Length: 7\r\nConnection: close\r\n\r\ntoken=x",
    )
    .await;
    let answer = String::from_utf8_lossy(&answer);
    assert!(!answer.starts_with("HTTP/1.1 408"), "{answer}");
    server.stop().await.expect("stops");
}

/// An HTTP/2 frame of `kind` with `flags` on `stream`.
fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = u32::try_from(payload.len()).expect("small");
    let mut f = len.to_be_bytes()[1..].to_vec();
    f.extend_from_slice(&[kind, flags]);
    f.extend_from_slice(&stream.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// HPACK's literal header field without indexing, its name new, no Huffman coding
/// (RFC 7541 §6.2.2): an HTTP/2 client in a few lines, which never has to read.
fn header(block: &mut Vec<u8>, name: &str, value: &str) {
    fn string(block: &mut Vec<u8>, s: &str) {
        // A length under 127 takes one byte; longer ones continue 7 bits at a time.
        let mut n = s.len();
        if n < 127 {
            block.push(n as u8);
        } else {
            block.push(127);
            n -= 127;
            while n >= 128 {
                block.push((n % 128) as u8 | 0x80);
                n /= 128;
            }
            block.push(n as u8);
        }
        block.extend_from_slice(s.as_bytes());
    }
    block.push(0);
    string(block, name);
    string(block, value);
}

/// The greeting of a client with the largest flow-control windows: the server may send it all
/// it has.
fn greeting() -> Vec<u8> {
    const MAX_WINDOW: u32 = (1 << 31) - 1;
    let mut out = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    // SETTINGS_INITIAL_WINDOW_SIZE; then the connection's window raised as far.
    let mut settings = vec![0, 4];
    settings.extend_from_slice(&MAX_WINDOW.to_be_bytes());
    out.extend(frame(4, 0, 0, &settings));
    out.extend(frame(8, 0, 0, &(MAX_WINDOW - 65_535).to_be_bytes()));
    out
}

/// A call on `stream` for a page of 1,000 of `job`'s tasks (some 35 KB).
fn list_tasks(token: &str, job: u64, stream: u32) -> Vec<u8> {
    use prost::Message;
    let request = pb::ListTasksRequest {
        job_id: job,
        limit: 1000,
        ..Default::default()
    }
    .encode_to_vec();
    let mut message = vec![0];
    message.extend_from_slice(&u32::try_from(request.len()).expect("small").to_be_bytes());
    message.extend_from_slice(&request);
    let mut block = Vec::new();
    for (name, value) in [
        (":method", "POST"),
        (":scheme", "http"),
        (":path", "/hetsched.v1.Client/ListTasks"),
        (":authority", "localhost"),
        ("content-type", "application/grpc"),
        ("te", "trailers"),
        ("authorization", &pb::bearer(token)),
    ] {
        header(&mut block, name, value);
    }
    let mut out = frame(1, 0x4, stream, &block); // HEADERS, END_HEADERS
    out.extend(frame(0, 0x1, stream, &message)); // DATA, END_STREAM
    out
}

/// Reads `s` for `within` or until the server closes it (EOF or reset): whether it did, and
/// how many bytes came.
async fn drained_within(s: &mut TcpStream, within: Duration) -> (bool, usize) {
    let mut buf = vec![0u8; 64 << 10];
    let mut got = 0;
    let started = tokio::time::Instant::now();
    loop {
        let left = within.saturating_sub(started.elapsed());
        match tokio::time::timeout(left, s.read(&mut buf)).await {
            Err(_) => return (false, got),
            Ok(Ok(0) | Err(_)) => return (true, got),
            Ok(Ok(n)) => got += n,
        }
    }
}

/// A client of `server` with the admin's token, and the id of a job of 1,000 tasks it submitted
/// (pages of them are large replies).
async fn with_a_job_of_1000_tasks(
    server: &hetsched_server::ServerHandle,
) -> (
    ClientClient<
        tonic::service::interceptor::InterceptedService<
            tonic::transport::Channel,
            pb::TokenInterceptor,
        >,
    >,
    u64,
) {
    let channel = pb::endpoint(&format!("http://{}", server.addr), None)
        .expect("endpoint")
        .connect()
        .await
        .expect("connect");
    let mut client = ClientClient::with_interceptor(channel, common::client_token(server));
    let job = client
        .submit(pb::SubmitRequest {
            origin: "many.toml".into(),
            text: "[[application]]\nname = \"many\"\ntasks = 1000\n[application.cpu]\n\
                   command = \"true\"\n"
                .into(),
            ..Default::default()
        })
        .await
        .expect("submit")
        .into_inner()
        .job_id;
    (client, job)
}

/// A gRPC client that asks for replies larger than its TCP receive window and then reads
/// nothing, though it goes on calling — its calls open, the server's writes refused — is
/// closed once they have been refused for the write-stall timeout, while other clients are
/// served; one that asks the same and reads stays. Before, the connection and every reply
/// hyper held for it stayed for good: HTTP/2's PINGs only go to a peer that has sent no call
/// for 30 s (one that stops calling too was closed under a minute, the PING unanswered).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grpc_client_that_reads_nothing_is_closed_at_the_write_stall_timeout() {
    use tokio::io::AsyncWriteExt;
    let scratch = Scratch::new("connections", "stall");
    let server = plain_server(&scratch, Duration::from_secs(60)).await;
    let (mut client, job) = with_a_job_of_1000_tasks(&server).await;
    // Forty pages at once (1.4 MB): far more than the socket buffers hold.
    let calls: Vec<u8> = std::iter::once(greeting())
        .chain((0..40).map(|i| list_tasks(&server.token, job, 2 * i + 1)))
        .collect::<Vec<_>>()
        .concat();

    let mut stalled = TcpStream::connect(server.addr).await.expect("connect");
    stalled.write_all(&calls).await.expect("calls");
    let started = Instant::now();
    let mut next = 81;
    while started.elapsed() < STALL * 2 {
        // Others are served meanwhile.
        client
            .list_jobs(pb::ListJobsRequest::default())
            .await
            .expect("another client's call");
        // And it keeps calling, as the peers that HTTP/2's PINGs never closed did: each new
        // call tells hyper the peer is there, so it never pings. Refused once closed.
        if started.elapsed() >= STALL / 2 {
            let _ = stalled
                .write_all(&list_tasks(&server.token, job, next))
                .await;
            next += 2;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    // Closed: what had reached the peer ends in EOF or a reset, not in a wait.
    let (closed, _) = drained_within(&mut stalled, STALL * 3).await;
    assert!(closed, "the connection that read nothing is closed");

    // The same calls, read: answered (megabytes), and the connection stays past the timeout.
    let mut reading = TcpStream::connect(server.addr).await.expect("connect");
    reading.write_all(&calls).await.expect("calls");
    let (closed, got) = drained_within(&mut reading, STALL * 3).await;
    assert!(!closed, "the connection that reads stays open");
    assert!(got > 1 << 20, "the replies came: {got} bytes");
    // A stop waits for open connections.
    drop(reading);
    server.stop().await.expect("stops");
}

/// An HTTP client that asks for large responses — pages of a thousand tasks, sixteen of them
/// pipelined, more than the sockets' buffers hold — and reads none of them is closed once the server's writes have been refused for the write-stall timeout,
/// while the listener serves others; one that asks the same and reads gets it whole. Before,
/// the connection, what the server had made of the page, and a place under the listener's cap
/// stayed for good (hyper's header timeout bounds only a request's headers, not a response no
/// one reads; the dashboard's event stream never ends by itself either).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http_client_that_reads_nothing_is_closed_at_the_write_stall_timeout() {
    const PAGES: usize = 16;
    use tokio::io::AsyncWriteExt;
    let scratch = Scratch::new("connections", "http-stall");
    let server = plain_server(&scratch, Duration::from_secs(60)).await;
    let http = server.http_addr.expect("an HTTP listener");
    let (_, job) = with_a_job_of_1000_tasks(&server).await;
    let page = |last: bool| {
        format!(
            "GET /api/tasks?job={job}&limit=1000 HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {}\r\n{}\r\n",
            server.token,
            if last { "Connection: close\r\n" } else { "" }
        )
    };
    let request: String = (0..PAGES).map(|i| page(i + 1 == PAGES)).collect();
    let connect = || async {
        let socket = tokio::net::TcpSocket::new_v4().expect("socket");
        // A small receive window.
        socket.set_recv_buffer_size(4096).expect("rcvbuf");
        let mut s = socket.connect(http).await.expect("connect");
        s.write_all(request.as_bytes()).await.expect("request");
        s
    };
    let mut stalled = connect().await;
    let started = Instant::now();
    while started.elapsed() < STALL * 2 {
        // Others are served meanwhile.
        let mut other = TcpStream::connect(http).await.expect("connect");
        other
            .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .await
            .expect("request");
        let mut answer = String::new();
        tokio::time::timeout(Duration::from_secs(5), other.read_to_string(&mut answer))
            .await
            .expect("answered in time")
            .expect("read");
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    // Closed before it was sent every page: it gets what the sockets had taken, then the end.
    let mut seen = Vec::new();
    let end = tokio::time::timeout(STALL * 3, stalled.read_to_end(&mut seen)).await;
    let pages_seen = String::from_utf8_lossy(&seen)
        .matches("HTTP/1.1 200")
        .count();
    assert!(
        end.is_ok() && pages_seen < PAGES,
        "the connection that read nothing is closed: {pages_seen} pages of {PAGES} reached it, \
         {} bytes ({end:?})",
        seen.len()
    );
    // The same requests, read: every page whole, past the timeout.
    let mut reading = connect().await;
    let mut pages = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(60), async {
        let mut buf = [0u8; 4096];
        loop {
            // Slowly at first: the read lasts past the write-stall timeout.
            if pages.len() < 1 << 20 {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            match reading.read(&mut buf).await {
                Ok(0) => break Ok(()),
                Ok(n) => pages.extend_from_slice(&buf[..n]),
                Err(e) => break Err(e),
            }
        }
    })
    .await;
    assert!(matches!(read, Ok(Ok(()))), "{read:?}");
    let text = String::from_utf8_lossy(&pages);
    assert_eq!(
        text.matches("HTTP/1.1 200").count(),
        PAGES,
        "{}",
        &text[..text.len().min(300)]
    );
    assert!(pages.len() > 4 << 20, "{} bytes", pages.len());
    assert!(text.trim_end().ends_with('}'), "the last page whole");
    server.stop().await.expect("stops");
}
