//! The web dashboard in a real headless browser (Debian's `chromium`): a server and two agents,
//! a running job, the page loaded through a one-time login link; the job, its tasks and both
//! nodes appear, and the task counts change while the page is open (Server-Sent Events, no
//! reload). Skips, saying so, where no chromium binary is installed. Also the 401s.

use crate::support;

use std::io::{Read, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use support::{Cluster, wait_until};

fn chromium() -> Option<&'static str> {
    ["chromium", "chromium-browser", "google-chrome"]
        .into_iter()
        .find(|b| {
            Command::new(b)
                .arg("--version")
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        })
}

/// One HTTP/1.1 request; (status code, body).
fn http(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (u16, String) {
    let mut s = std::net::TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str(&format!("Content-Length: {}\r\n\r\n{body}", body.len()));
    s.write_all(req.as_bytes()).expect("send");
    let mut raw = String::new();
    s.read_to_string(&mut raw).expect("read");
    let code = raw
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = raw
        .split_once("\r\n\r\n")
        .map_or("", |(_, b)| b)
        .to_string();
    (code, body)
}

fn attr(dom: &str, name: &str) -> Option<u64> {
    let key = format!("{name}=\"");
    let at = dom.find(&key)? + key.len();
    dom[at..].split('"').next()?.parse().ok()
}

/// Runs chromium with `args`, bounded; its stdout.
fn run_browser(bin: &str, args: &[&str]) -> String {
    let mut child = Command::new(bin)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
        ])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("chromium");
    let mut out = child.stdout.take().expect("stdout");
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    let start = Instant::now();
    while child.try_wait().expect("try_wait").is_none() {
        if start.elapsed() > Duration::from_secs(90) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("chromium did not finish within 90 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    reader.join().unwrap_or_default()
}

#[test]
fn the_dashboard_shows_jobs_tasks_and_nodes_and_updates_live_in_a_browser() {
    let mut c = Cluster::start("dashboard", true);
    let http_addr = std::fs::read_to_string(c.data().join("http-address")).expect("http-address");
    let addr = http_addr.trim();
    let token = std::fs::read_to_string(c.data().join("token")).expect("token");
    let read_token = std::fs::read_to_string(c.data().join("read-token")).expect("read-token");

    // Never open: 401 without a valid token, for the page and the API alike.
    assert_eq!(http(addr, "GET", "/", &[], "").0, 401);
    assert_eq!(
        http(
            addr,
            "GET",
            "/api/jobs",
            &[("Authorization", "Bearer nope")],
            ""
        )
        .0,
        401
    );
    assert_eq!(http(addr, "GET", "/api/events", &[], "").0, 401);
    assert_eq!(http(addr, "POST", "/login", &[], "token=wrong").0, 401);
    let read = format!("Bearer {}", read_token.trim());
    let (code, body) = http(addr, "GET", "/api/jobs", &[("Authorization", &read)], "");
    assert_eq!(code, 200, "the read-only token reads: {body}");
    // A login link is used once.
    let bearer = format!("Bearer {}", token.trim());
    let ticket = |h: &str| -> String {
        let (code, body) = http(addr, "POST", "/api/ticket", &[("Authorization", h)], "");
        assert_eq!(code, 200, "{body}");
        let v: serde_json::Value = serde_json::from_str(&body).expect("json");
        v["ticket"].as_str().expect("ticket").to_string()
    };
    let once = ticket(&bearer);
    assert_eq!(
        http(addr, "GET", &format!("/login?ticket={once}"), &[], "").0,
        303
    );
    assert_eq!(
        http(addr, "GET", &format!("/login?ticket={once}"), &[], "").0,
        401
    );

    let Some(browser) = chromium() else {
        eprintln!(
            "SKIPPED the browser part: no chromium binary (install Debian's `chromium`, as .ci/run does)"
        );
        return;
    };
    c.start_agent("a", 2, &[]);
    c.start_agent("b", 2, &[]);
    c.wait_for_nodes(2);
    // About 12 s of steady progress on 4 slots.
    let job = c.write(
        "job.toml",
        "name = \"dash-demo\"\n[[application]]\nname = \"steady\"\ntasks = 120\n\
         [application.cpu]\ncommand = 'sleep 0.4'\n",
    );
    assert!(
        c.cli(&["submit", job.to_str().expect("path")])
            .status
            .success()
    );
    wait_until("the first task to finish", Duration::from_secs(30), || {
        c.json(&["job", "1"])["counts"]["succeeded"].as_u64() > Some(0)
    });
    let url = format!("http://{addr}/login?ticket={}#events=8", ticket(&bearer));
    let dom = run_browser(
        browser,
        &["--dump-dom", "--virtual-time-budget=15000", &url],
    );
    assert!(
        dom.contains("data-job=\"1\"") && dom.contains("dash-demo"),
        "the job: {dom}"
    );
    assert!(
        dom.matches("data-task=").count() >= 100,
        "a page of its tasks"
    );
    assert!(
        dom.contains("data-node=\"a\"") && dom.contains("data-node=\"b\""),
        "both nodes"
    );
    assert!(
        dom.contains("/api/log?job=1&amp;task="),
        "links to the tasks' output"
    );
    let events = attr(&dom, "data-events").expect("live marker");
    let (first, last) = (
        attr(&dom, "data-first-done").expect("first"),
        attr(&dom, "data-last-done").expect("last"),
    );
    assert!(events >= 8, "{events} updates over SSE");
    assert!(
        last > first,
        "the task counts changed on the open page: {first} → {last}"
    );
    // A screenshot to look at (docs/dashboard.png was taken the same way).
    let shot = c.dir.join("dashboard.png");
    let url = format!("http://{addr}/login?ticket={}#events=4", ticket(&bearer));
    run_browser(
        browser,
        &[
            "--window-size=1400,1300",
            &format!("--screenshot={}", shot.display()),
            "--virtual-time-budget=10000",
            &url,
        ],
    );
    assert!(
        std::fs::metadata(&shot).is_ok_and(|m| m.len() > 10_000),
        "a screenshot"
    );
}
