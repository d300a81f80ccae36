//! The dashboard's sessions and login links of a server started in-process with its HTTP
//! listener: each is bound to the token that obtained it, so a user's token rotated
//! (`AddUser` with `rotate`) or the user removed ends its sessions — those from the login form
//! and those from a login link — and its unused login links (401, and dropped); the admin's
//! and the read-only token's sessions go on. A caller holds at most
//! `MAX_SESSIONS_PER_CALLER` sessions and `MAX_TICKETS_PER_CALLER` login links: a new one
//! evicts its oldest, and no one else's. Event streams (`/api/events`) are bounded per caller
//! and in all, and a stream's slot comes back once its client goes. Signing in and out from
//! another site's page (login CSRF, a forced sign-out) changes nothing.

use crate::common;
use crate::http::get_with;
use hetsched_proto as pb;
use hetsched_proto::client_client::ClientClient;
use hetsched_server::ServerConfig;
use hetsched_server::dashboard::{
    MAX_EVENT_STREAMS, MAX_EVENT_STREAMS_PER_CALLER, MAX_SESSIONS_PER_CALLER,
    MAX_TICKETS_PER_CALLER,
};
use std::net::SocketAddr;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// One request `head` (its request line and header lines, each ending in CRLF) with `body`:
/// the status code and the raw response.
async fn request(addr: SocketAddr, head: &str, body: &str) -> (u16, String) {
    let raw = crate::http::exchange(
        addr,
        &format!(
            "{head}Host: {addr}\r\nConnection: close\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        ),
    )
    .await;
    let raw = String::from_utf8(raw).expect("a UTF-8 response");
    (status(&raw), raw)
}

fn status(raw: &str) -> u16 {
    raw.split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0)
}

/// The session cookie (`hetsched_session=…`) a response sets, if any.
fn cookie(raw: &str) -> Option<String> {
    raw.lines()
        .find_map(|l| {
            l.strip_prefix("set-cookie: ")
                .or_else(|| l.strip_prefix("Set-Cookie: "))
        })
        .and_then(|c| c.split(';').next())
        .filter(|c| c.starts_with("hetsched_session=") && c.len() > "hetsched_session=".len())
        .map(str::to_string)
}

/// Signs in with `token` through the login form: the session cookie.
async fn login(addr: SocketAddr, token: &str) -> String {
    let (code, raw) = request(
        addr,
        "POST /login HTTP/1.1\r\nContent-Type: application/x-www-form-urlencoded\r\n",
        &format!("token={token}"),
    )
    .await;
    assert_eq!(code, 303, "{raw}");
    cookie(&raw).unwrap_or_else(|| panic!("a session cookie: {raw}"))
}

/// A login link's ticket, asked for with `token`.
async fn ticket(addr: SocketAddr, token: &str) -> String {
    let (code, raw) = request(
        addr,
        &format!("POST /api/ticket HTTP/1.1\r\nAuthorization: Bearer {token}\r\n"),
        "",
    )
    .await;
    assert_eq!(code, 200, "{raw}");
    let body = raw.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    let v: serde_json::Value = serde_json::from_str(body).expect("json");
    v["ticket"].as_str().expect("ticket").to_string()
}

/// Follows the login link of `ticket`: the status code and the session cookie it sets.
async fn redeem(addr: SocketAddr, ticket: &str) -> (u16, Option<String>) {
    let (code, raw) = request(
        addr,
        &format!("GET /login?ticket={ticket} HTTP/1.1\r\n"),
        "",
    )
    .await;
    (code, cookie(&raw))
}

/// The status of `GET path` with session `cookie`.
async fn with_cookie(addr: SocketAddr, path: &str, cookie: &str) -> u16 {
    status(&get_with(addr, path, &format!("Cookie: {cookie}\r\n")).await)
}

/// The status of `GET path` with `token`.
async fn with_token(addr: SocketAddr, path: &str, token: &str) -> u16 {
    status(&get_with(addr, path, &format!("Authorization: Bearer {token}\r\n")).await)
}

fn add(name: &str, rotate: bool) -> pb::AddUserRequest {
    pb::AddUserRequest {
        name: name.into(),
        rotate,
        ..Default::default()
    }
}

async fn server(
    name: &str,
) -> (
    hetsched_server::ServerHandle,
    tonic::transport::Channel,
    SocketAddr,
    String,
    common::Scratch,
) {
    let d = common::scratch("dashboard-sessions", name);
    let config = ServerConfig {
        data_dir: d.to_path_buf(),
        http_listen: Some("127.0.0.1:0".parse().expect("addr")),
        ..Default::default()
    };
    let (server, channel, http, read_token) = common::serve_http(config).await;
    (server, channel, http, read_token, d)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_users_sessions_and_login_links_end_when_its_token_is_rotated_or_it_is_removed() {
    let (server, channel, http, read_token, _dir) = server("rotate").await;
    let mut admin = ClientClient::with_interceptor(
        channel.clone(),
        pb::TokenInterceptor::new(&server.token).expect("ascii token"),
    );
    let old = admin
        .add_user(add("bob", false))
        .await
        .expect("bob")
        .into_inner()
        .token;
    let admin_session = login(http, &server.token).await;
    let read_session = login(http, &read_token).await;

    // Bob's session from the login form, his session from a login link, and a link unused.
    let form = login(http, &old).await;
    let (code, linked) = redeem(http, &ticket(http, &old).await).await;
    assert_eq!(code, 303);
    let linked = linked.expect("a session cookie");
    let unused = ticket(http, &old).await;
    for path in ["/api/jobs", "/api/users"] {
        assert_eq!(with_cookie(http, path, &form).await, 200, "{path}");
        assert_eq!(with_cookie(http, path, &linked).await, 200, "{path}");
    }

    let new = admin
        .add_user(add("bob", true))
        .await
        .expect("bob's new token")
        .into_inner()
        .token;
    assert_eq!(with_token(http, "/api/jobs", &old).await, 401);
    for path in ["/api/jobs", "/api/users", "/"] {
        assert_eq!(
            with_cookie(http, path, &form).await,
            401,
            "{path}: the old token's session ends"
        );
        assert_eq!(
            with_cookie(http, path, &linked).await,
            401,
            "{path}: a session from the old token's login link ends"
        );
    }
    assert_eq!(
        redeem(http, &unused).await,
        (401, None),
        "the old token's login link opens no session"
    );

    // The new token signs in, both ways; removing bob ends those too.
    let form = login(http, &new).await;
    let (code, linked) = redeem(http, &ticket(http, &new).await).await;
    assert_eq!(code, 303);
    let linked = linked.expect("a session cookie");
    let unused = ticket(http, &new).await;
    assert_eq!(with_cookie(http, "/api/users", &form).await, 200);
    assert_eq!(with_cookie(http, "/api/users", &linked).await, 200);
    admin
        .remove_user(pb::RemoveUserRequest { name: "bob".into() })
        .await
        .expect("bob removed");
    assert_eq!(with_cookie(http, "/api/jobs", &form).await, 401);
    assert_eq!(redeem(http, &unused).await, (401, None));
    // Added again under the same name, with a new token: the session of his earlier token,
    // not presented since the removal, is still refused.
    let again = admin
        .add_user(add("bob", false))
        .await
        .expect("bob again")
        .into_inner()
        .token;
    assert_eq!(with_token(http, "/api/jobs", &again).await, 200);
    assert_eq!(with_cookie(http, "/api/jobs", &linked).await, 401);

    // The admin's and the read-only token's sessions went on throughout.
    assert_eq!(with_cookie(http, "/api/users", &admin_session).await, 200);
    assert_eq!(with_cookie(http, "/api/users", &read_session).await, 200);
    server.stop().await.expect("stops");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_session_or_login_link_past_a_callers_bound_evicts_its_oldest_only() {
    let (server, channel, http, _read_token, _dir) = server("bound").await;
    let mut admin = ClientClient::with_interceptor(
        channel.clone(),
        pb::TokenInterceptor::new(&server.token).expect("ascii token"),
    );
    let alice = admin
        .add_user(add("alice", false))
        .await
        .expect("alice")
        .into_inner()
        .token;
    let bob = admin
        .add_user(add("bob", false))
        .await
        .expect("bob")
        .into_inner()
        .token;
    let bobs = login(http, &bob).await;
    let mut sessions = Vec::new();
    for _ in 0..MAX_SESSIONS_PER_CALLER {
        sessions.push(login(http, &alice).await);
    }
    for s in &sessions {
        assert_eq!(with_cookie(http, "/api/jobs", s).await, 200);
    }
    // One more: alice's oldest ends, and only it.
    sessions.push(login(http, &alice).await);
    assert_eq!(
        with_cookie(http, "/api/jobs", &sessions[0]).await,
        401,
        "alice's oldest session was evicted"
    );
    for s in &sessions[1..] {
        assert_eq!(with_cookie(http, "/api/jobs", s).await, 200);
    }
    assert_eq!(
        with_cookie(http, "/api/jobs", &bobs).await,
        200,
        "bob's stays"
    );

    // A signed-out session makes room: the next login evicts nothing.
    let (code, _) = request(
        http,
        &format!("POST /logout HTTP/1.1\r\nCookie: {}\r\n", sessions[5]),
        "",
    )
    .await;
    assert_eq!(code, 303);
    assert_eq!(with_cookie(http, "/api/jobs", &sessions[5]).await, 401);
    sessions.push(login(http, &alice).await);
    assert_eq!(with_cookie(http, "/api/jobs", &sessions[1]).await, 200);

    // Login links: the same per caller.
    let bobs = ticket(http, &bob).await;
    let mut tickets = Vec::new();
    for _ in 0..=MAX_TICKETS_PER_CALLER {
        tickets.push(ticket(http, &alice).await);
    }
    assert_eq!(redeem(http, &tickets[0]).await, (401, None), "evicted");
    assert_eq!(redeem(http, &tickets[1]).await.0, 303);
    assert_eq!(redeem(http, &tickets[MAX_TICKETS_PER_CALLER]).await.0, 303);
    assert_eq!(redeem(http, &bobs).await.0, 303, "bob's stays");
    server.stop().await.expect("stops");
}

/// Opens `/api/events` with `token`: the status code, and the connection while it streams
/// (200) or the whole refusal (else).
async fn open_events(addr: SocketAddr, token: &str) -> (u16, tokio::net::TcpStream, String) {
    let mut s = tokio::net::TcpStream::connect(addr).await.expect("connect");
    s.write_all(
        format!(
            "GET /api/events HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\n\r\n"
        )
        .as_bytes(),
    )
    .await
    .expect("send");
    let mut raw = Vec::new();
    let mut buf = [0u8; 4096];
    let read = async {
        while !raw.windows(4).any(|w| w == b"\r\n\r\n") {
            let n = s.read(&mut buf).await.expect("read");
            assert!(n > 0, "closed before its headers");
            raw.extend_from_slice(&buf[..n]);
        }
    };
    tokio::time::timeout(Duration::from_secs(10), read)
        .await
        .expect("headers within 10 s");
    let code = status(&String::from_utf8_lossy(&raw));
    if code != 200 {
        // A refusal: its body (the connection stays open for more requests).
        tokio::time::sleep(Duration::from_millis(100)).await;
        if let Ok(Ok(n)) = tokio::time::timeout(Duration::from_millis(500), s.read(&mut buf)).await
        {
            raw.extend_from_slice(&buf[..n]);
        }
    }
    (code, s, String::from_utf8_lossy(&raw).into_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn event_streams_are_bounded_per_caller_and_in_all_and_a_closed_ones_slot_comes_back() {
    let (server, channel, http, read_token, _dir) = server("events").await;
    let mut admin = ClientClient::with_interceptor(
        channel.clone(),
        pb::TokenInterceptor::new(&server.token).expect("ascii token"),
    );
    let mut tokens = vec![server.token.clone(), read_token];
    // With the admin and the read-only token: callers enough to fill the server's bound.
    for i in 0..MAX_EVENT_STREAMS / MAX_EVENT_STREAMS_PER_CALLER - 2 {
        tokens.push(
            admin
                .add_user(add(&format!("u{i}"), false))
                .await
                .expect("user")
                .into_inner()
                .token,
        );
    }
    let alice = tokens[2].clone();
    let mut open = Vec::new();
    for _ in 0..MAX_EVENT_STREAMS_PER_CALLER {
        let (code, s, raw) = open_events(http, &alice).await;
        assert_eq!(code, 200, "{raw}");
        open.push(s);
    }
    // One more of alice's: 429, saying why; another caller's still opens.
    let (code, _, raw) = open_events(http, &alice).await;
    assert_eq!(code, 429, "{raw}");
    assert!(raw.contains("8 event streams already open"), "{raw}");
    // Alice closes a tab: its slot comes back once the server notices (its next tick).
    drop(open.remove(0));
    let back = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            let (code, s, _) = open_events(http, &alice).await;
            if code == 200 {
                return s;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .await
    .expect("a closed stream's slot comes back");
    open.push(back);

    // Everyone else up to the server's bound: then 503, whoever asks.
    for t in &tokens {
        if *t == alice {
            continue;
        }
        for _ in 0..MAX_EVENT_STREAMS_PER_CALLER {
            let (code, s, raw) = open_events(http, t).await;
            assert_eq!(code, 200, "{raw}");
            open.push(s);
        }
    }
    assert_eq!(open.len(), MAX_EVENT_STREAMS);
    let late = admin
        .add_user(add("late", false))
        .await
        .expect("late")
        .into_inner()
        .token;
    let (code, _, raw) = open_events(http, &late).await;
    assert_eq!(code, 503, "{raw}");
    assert!(raw.contains("the most it keeps"), "{raw}");
    assert!(
        raw.to_ascii_lowercase().contains("retry-after: 10"),
        "{raw}"
    );
    // The rest of the API still answers.
    assert_eq!(with_token(http, "/api/jobs", &late).await, 200);
    open.clear();
    let freed = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            if open_events(http, &late).await.0 == 200 {
                return;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .await;
    assert!(freed.is_ok(), "closed streams give their slots back");
    server.stop().await.expect("stops");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_sites_page_can_neither_sign_a_browser_in_nor_out() {
    let (server, _channel, http, _read_token, _dir) = server("csrf").await;
    let form = "POST /login HTTP/1.1\r\nContent-Type: application/x-www-form-urlencoded\r\n";
    let body = format!("token={}", server.token);
    // A form on another site posting the attacker's token: refused, no cookie.
    for from in [
        "Origin: https://evil.example\r\n",
        "Origin: null\r\n",
        "Sec-Fetch-Site: cross-site\r\n",
        "Sec-Fetch-Site: same-site\r\nOrigin: http://{addr}\r\n",
    ] {
        let from = from.replace("{addr}", &http.to_string());
        let (code, raw) = request(http, &format!("{form}{from}"), &body).await;
        assert_eq!(code, 403, "{from}: {raw}");
        assert_eq!(cookie(&raw), None, "{from}: {raw}");
        assert!(raw.contains("came from another site"), "{raw}");
    }
    // The dashboard's own form (a browser says same-origin, or sends its own origin), and a
    // program sending neither: signed in.
    let mut sessions = Vec::new();
    for from in [
        "Sec-Fetch-Site: same-origin\r\nOrigin: http://{addr}\r\n".to_string(),
        format!("Origin: http://{http}\r\n"),
        String::new(),
    ] {
        let from = from.replace("{addr}", &http.to_string());
        let (code, raw) = request(http, &format!("{form}{from}"), &body).await;
        assert_eq!(code, 303, "{from}: {raw}");
        sessions.push(cookie(&raw).expect("a session cookie"));
    }

    // Signing out: a GET only shows the button; another site's POST changes nothing.
    let (code, raw) = request(
        http,
        &format!("GET /logout HTTP/1.1\r\nCookie: {}\r\n", sessions[0]),
        "",
    )
    .await;
    assert_eq!(code, 200, "{raw}");
    assert!(raw.contains("action=\"/logout\""), "{raw}");
    assert!(!raw.to_ascii_lowercase().contains("set-cookie"), "{raw}");
    assert_eq!(with_cookie(http, "/api/jobs", &sessions[0]).await, 200);
    let (code, raw) = request(
        http,
        &format!(
            "POST /logout HTTP/1.1\r\nSec-Fetch-Site: cross-site\r\nCookie: {}\r\n",
            sessions[0]
        ),
        "",
    )
    .await;
    assert_eq!(code, 403, "{raw}");
    assert!(!raw.to_ascii_lowercase().contains("set-cookie"), "{raw}");
    assert_eq!(with_cookie(http, "/api/jobs", &sessions[0]).await, 200);
    let (code, _) = request(
        http,
        &format!(
            "POST /logout HTTP/1.1\r\nSec-Fetch-Site: same-origin\r\nCookie: {}\r\n",
            sessions[0]
        ),
        "",
    )
    .await;
    assert_eq!(code, 303);
    assert_eq!(with_cookie(http, "/api/jobs", &sessions[0]).await, 401);
    assert_eq!(with_cookie(http, "/api/jobs", &sessions[1]).await, 200);

    // A login link followed from another site's page is not used until the person confirms
    // on this site's page.
    let t = ticket(http, &server.token).await;
    let (code, raw) = request(
        http,
        &format!("GET /login?ticket={t} HTTP/1.1\r\nSec-Fetch-Site: cross-site\r\n"),
        "",
    )
    .await;
    assert_eq!(code, 200, "{raw}");
    assert_eq!(cookie(&raw), None, "{raw}");
    assert!(raw.contains(&format!("value=\"{t}\"")), "{raw}");
    let (code, raw) = request(
        http,
        &format!("{form}Sec-Fetch-Site: cross-site\r\n"),
        &format!("ticket={t}"),
    )
    .await;
    assert_eq!(code, 403, "{raw}");
    let (code, raw) = request(
        http,
        &format!("{form}Sec-Fetch-Site: same-origin\r\n"),
        &format!("ticket={t}"),
    )
    .await;
    assert_eq!(code, 303, "{raw}");
    let linked = cookie(&raw).expect("a session cookie");
    assert_eq!(with_cookie(http, "/api/jobs", &linked).await, 200);
    // Whatever else the query says is never put in the page.
    let (code, raw) = request(
        http,
        "GET /login?ticket=%22%3E%3Cscript%3E HTTP/1.1\r\nSec-Fetch-Site: cross-site\r\n",
        "",
    )
    .await;
    assert_eq!(code, 401, "{raw}");
    assert!(!raw.contains("<script>"), "{raw}");
    // A link opened by a program or typed (no site): signs in at once, as before.
    let t = ticket(http, &server.token).await;
    let (code, raw) = request(
        http,
        &format!("GET /login?ticket={t} HTTP/1.1\r\nSec-Fetch-Site: none\r\n"),
        "",
    )
    .await;
    assert_eq!(code, 303, "{raw}");
    server.stop().await.expect("stops");
}
