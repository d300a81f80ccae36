//! The web dashboard in a real headless browser (Debian's `chromium`): a server and two agents,
//! a running job, the page loaded through a one-time login link; the job, its tasks and both
//! nodes appear, and the task counts change while the page is open (Server-Sent Events, no
//! reload). Skips, saying so, where no chromium binary is installed. Also the 401s.
//!
//! And users: each signs in with its own token, reads its own jobs' output, and sees its own
//! row of the Users panel (the admin every user's, with the accounts `hetsched usage` prints).
//!
//! And stream topologies: the Topologies panel lists each (owner, state, workers running, rates),
//! and a click shows a topology's workers — why one cannot start, highlighted — and its
//! executors' rates; a topology whose executor was given up on reads degraded, naming it.
//!
//! And signing in and out as a person does: the login form typed into and clicked, a job and
//! its task's output clicked, the sign-out button; another site's page (a second loopback
//! server) signs the browser in only on a click on this site's page, and never out. And the
//! jobs pager, a click on an older job, and its tasks' `« first` button; `GET /logout`'s button.
//!
//! And the other clicks: a node card opens that node's detail, a chart's legend entry hides and
//! shows its line, a divisible job's chunk links open the chunk's output, and a job row or a
//! topology row clicked while the list refreshes opens its detail on the first click. And the
//! jobs table, once shown, stays where it is as the page's first answers fill in the sections
//! above it, a refused answer or event stream not keeping the page from being shown.
//!
//! And a workflow's tasks: an instance fetching its inputs reads `fetching`, then its `fetch`
//! cell says how long the fetch took, as `hetsched tasks` does.
//!
//! And at scale: a 100,000-task job in a browser driven over the DevTools protocol (it clicks the
//! pager and the state filter), with the server's page-size cap checked over plain HTTP.

use crate::support;

use std::io::{Read, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use support::cdp::{Browser, chromium};
use support::{Cluster, wait_until};

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

/// A one-time login ticket, asked for with the `Authorization` header `bearer`.
fn login_ticket(addr: &str, bearer: &str) -> String {
    let (code, body) = http(
        addr,
        "POST",
        "/api/ticket",
        &[("Authorization", bearer)],
        "",
    );
    assert_eq!(code, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).expect("json");
    v["ticket"].as_str().expect("ticket").to_string()
}

fn attr(dom: &str, name: &str) -> Option<u64> {
    let key = format!("{name}=\"");
    let at = dom.find(&key)? + key.len();
    dom[at..].split('"').next()?.parse().ok()
}

/// Runs chromium with `args`, bounded; its stdout.
fn run_browser(bin: &str, args: &[&str]) -> String {
    // Removed after the browser has ended (or was killed), with what it left there.
    let tmp = support::cdp::chromium_tmp();
    let mut child = Command::new(bin)
        .env("TMPDIR", &tmp)
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
    // An API call is told in words, not given the sign-in page's HTML; the page gets the form.
    let (_, said) = http(
        addr,
        "GET",
        "/api/jobs",
        &[("Authorization", "Bearer nope")],
        "",
    );
    assert!(
        said.starts_with("no valid token or session: send Authorization: Bearer TOKEN"),
        "{said}"
    );
    assert!(http(addr, "GET", "/", &[], "").1.contains("<form"));
    assert_eq!(http(addr, "POST", "/login", &[], "token=wrong").0, 401);
    let read = format!("Bearer {}", read_token.trim());
    let (code, body) = http(addr, "GET", "/api/jobs", &[("Authorization", &read)], "");
    assert_eq!(code, 200, "the read-only token reads: {body}");
    // A login link is used once.
    let bearer = format!("Bearer {}", token.trim());
    let ticket = |h: &str| login_ticket(addr, h);
    let once = ticket(&bearer);
    assert_eq!(
        http(addr, "GET", &format!("/login?ticket={once}"), &[], "").0,
        303
    );
    assert_eq!(
        http(addr, "GET", &format!("/login?ticket={once}"), &[], "").0,
        401
    );

    let Some(browser) = chromium_or_skip() else {
        return;
    };
    c.start_agent("a", 2, &[]);
    c.start_agent_with_config("b", "cores = 2\nattributes = [\"bigmem\", \"ssd\"]\n");
    c.wait_for_nodes(2);
    // About 12 s of steady progress on 4 slots.
    let job = c.write(
        "job.toml",
        "name = \"dash-demo\"\n[[application]]\nname = \"steady\"\ntasks = 120\nmax_running = 4\n\
         [application.cpu]\ncommand = 'sleep 0.4'\ntime_limit = \"5m\"\n\
         [[application]]\nname = \"on-ssd\"\ntasks = 2\nrequires = [\"ssd\"]\npriority = 3\n\
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
        dom.contains("<div class=\"attrs\" title=\"what jobs may require\">bigmem · ssd</div>"),
        "b's attributes"
    );
    // The job's applications, with what they ask of the cluster.
    assert!(
        dom.contains("<tr data-app=\"steady\">")
            && dom.contains("<td class=\"max-running\">4</td><td class=\"time-limit\">5m 0s</td>"),
        "steady's max_running and time limit: {dom}"
    );
    assert!(
        dom.contains("<tr data-app=\"on-ssd\">")
            && dom.contains("<td class=\"requires\">ssd</td><td class=\"priority\">3</td>")
            && dom.contains(
                "<td class=\"max-running\">no limit</td><td class=\"time-limit\">none</td>"
            ),
        "on-ssd's requires"
    );
    assert!(
        dom.contains("/api/log?job=1&amp;task="),
        "links to the tasks' output"
    );
    assert!(
        dom.contains("<th>max rss</th>") && dom.contains(" MiB</td>"),
        "finished tasks show the memory their agents measured"
    );
    // CPU tasks: no GPU memory measured, shown as `-` as `hetsched tasks` shows it.
    assert!(
        dom.contains("gpu mem</th>") && dom.contains("<td class=\"gpu-mem\">-</td>"),
        "the peak GPU memory column"
    );
    assert!(
        dom.contains("<section id=\"topologies-section\" hidden=\"\">")
            && dom.contains("<table id=\"topologies\" data-loaded=\"1\">"),
        "no topology: the panel was looked at and stays hidden: {dom}"
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

/// With `[[allocation]]` queues the page shows each queue, its allocations, their states and
/// how many agents each started (their names on hover).
#[test]
fn the_dashboard_shows_the_allocation_queues_and_each_allocations_agents() {
    let dir = support::temp_dir("dash-alloc-bin");
    crate::operator::fake_slurm(&dir);
    let config = crate::operator::slurm_queue(&dir, "local", 1, "idle_timeout = \"15s\"\n");
    let c = Cluster::start_configured("dash-alloc", true, &config);
    let Some(browser) = chromium_or_skip() else {
        return;
    };
    c.ok(&["submit", "--", "true"]);
    c.ok(&["wait", "1", "--timeout", "60s"]);
    wait_until("the allocation listed", Duration::from_secs(10), || {
        c.json(&["allocations"])[0]["allocations"][0]["state"] == "RUNNING"
    });
    let url = login_url(&c, "token", "#events=1");
    let dom = run_browser(browser, &["--dump-dom", "--virtual-time-budget=5000", &url]);
    let queue = dom
        .split("<div class=\"queue\" data-queue=\"local\">")
        .nth(1)
        .and_then(|rest| rest.split("</div>").next())
        .unwrap_or_else(|| panic!("the queue's line: {dom}"));
    assert!(
        queue.contains("101 <span class=\"badge\">running</span>")
            && queue.contains("1 agent</span>")
            && queue.contains("1 submitted"),
        "{queue}"
    );
    assert!(
        queue.contains("-101\">1 agent<"),
        "the agent's name on hover: {queue}"
    );
}

/// A divisible job runs chunks, not tasks: the log API serves a chunk's stdout and stderr, and the
/// page lists the job's chunks in the tasks table with links to them.
#[test]
fn a_divisible_jobs_chunks_are_listed_with_links_to_their_output() {
    let mut c = Cluster::start("dashboard-div", true);
    let http_addr = std::fs::read_to_string(c.data().join("http-address")).expect("http-address");
    let addr = http_addr.trim();
    let token = std::fs::read_to_string(c.data().join("token")).expect("token");
    let read_token = std::fs::read_to_string(c.data().join("read-token")).expect("read-token");
    c.start_agent("a", 2, &[]);
    c.wait_for_nodes(1);
    let job = c.write(
        "div.toml",
        "[[divisible]]\nname = \"count\"\nunits = 60\n\
         command = \"echo units {start}..{end} >&2; echo {end}\"\n",
    );
    c.ok(&["submit", job.to_str().expect("path"), "--wait"]);
    let first = &c.json(&["job", "1"])["divisible"]["chunks"][0];
    let end = first["end"].as_u64().expect("end");
    // The read-only token reads no output; the client token reads a chunk's.
    let read = format!("Bearer {}", read_token.trim());
    let (code, _) = http(
        addr,
        "GET",
        "/api/log?job=1&task=0&stream=stderr",
        &[("Authorization", &read)],
        "",
    );
    assert_eq!(code, 403);
    let client = format!("Bearer {}", token.trim());
    let log = |path: &str| http(addr, "GET", path, &[("Authorization", &client)], "");
    assert_eq!(
        log("/api/log?job=1&task=0&stream=stderr"),
        (200, format!("units 0..{end}\n"))
    );
    assert_eq!(
        log("/api/log?job=1&task=chunk:0&stream=stdout"),
        (200, format!("{end}\n"))
    );

    let Some(browser) = chromium_or_skip() else {
        return;
    };
    let bearer = format!("Bearer {}", token.trim());
    let url = format!(
        "http://{addr}/login?ticket={}#events=2",
        login_ticket(addr, &bearer)
    );
    let dom = run_browser(browser, &["--dump-dom", "--virtual-time-budget=5000", &url]);
    assert!(
        dom.contains("<tr data-chunk=\"0\"><td>chunk 0</td>")
            && dom.contains(&format!("<td>units 0..{end}</td>"))
            && dom.contains("/api/log?job=1&amp;task=0&amp;stream=stderr")
            && dom.contains("chunks shown of "),
        "the job's chunks: {dom}"
    );

    // Clicked as a person does: chunk 0's links open its output and its stderr in new tabs.
    let mut b = Browser::start(browser, &c.dir.join("browser"));
    b.navigate(&format!(
        "http://{addr}/login?ticket={}",
        login_ticket(addr, &bearer)
    ));
    let t = Duration::from_secs(20);
    let link = |stream: &str| {
        format!("#tasks tr[data-chunk=\"0\"] a[href=\"/api/log?job=1&task=0&stream={stream}\"]")
    };
    b.click(&link("stdout"), t);
    assert_eq!(
        b.text_of_new_tab("/api/log?job=1&task=0&stream=stdout", t),
        format!("{end}\n"),
        "chunk 0's stdout"
    );
    b.click(&link("stderr"), t);
    assert_eq!(
        b.text_of_new_tab("/api/log?job=1&task=0&stream=stderr", t),
        format!("units 0..{end}\n"),
        "chunk 0's stderr"
    );
}

/// A running multi-node task's row names its first node, how many more it holds, and all of them
/// on hover; a job whose begin time has not come is listed `deferred`, saying when on hover.
#[test]
fn a_running_multi_node_task_shows_its_first_node_and_the_others_on_hover() {
    let mut c = Cluster::start("dashboard-multi-node", true);
    c.start_agent("a", 1, &[]);
    c.start_agent("b", 1, &[]);
    c.wait_for_nodes(2);
    // Job 1 begins in an hour; job 2 (the newest, shown) runs on both nodes.
    c.ok(&["submit", "--begin", "now+1h", "--", "true"]);
    c.ok(&["submit", "--nodes", "2", "--", "sleep", "60"]);
    wait_until(
        "the multi-node task to run",
        Duration::from_secs(20),
        || c.json(&["tasks", "--job", "2"])[0]["state"] == "running",
    );
    // A drain's reason is on the node's badge, as text.
    c.ok(&["node", "drain", "a", "--reason", "fan <b>"]);
    let Some(browser) = chromium_or_skip() else {
        return;
    };
    let url = login_url(&c, "token", "#events=1");
    let dom = run_browser(browser, &["--dump-dom", "--virtual-time-budget=5000", &url]);
    assert!(
        dom.contains("<span class=\"nodes\" title=\"a, b\"> (+1)</span>")
            || dom.contains("<span class=\"nodes\" title=\"b, a\"> (+1)</span>"),
        "the task's row: {dom}"
    );
    assert_eq!(
        dom.matches(
            "<div class=\"held\" title=\"held whole for a multi-node task\">held for task 1 of job 2 (`sleep`)</div>"
        )
        .count(),
        2,
        "both nodes' cards say what holds them: {dom}"
    );
    assert!(
        dom.contains("<span class=\"badge\" title=\"fan &lt;b&gt;\">drained: fan &lt;b&gt;</span>"),
        "a's card says why it is drained: {dom}"
    );
    assert!(
        dom.contains("<td class=\"state-deferred\" title=\"begins at ")
            && dom.contains("\">deferred</td>"),
        "job 1 is deferred: {dom}"
    );
    c.ok(&["cancel", "1,2"]);
}

/// A task stopped for higher-priority work says so in its attempt cell and its state
/// (`pending (preempted)`), as `hetsched tasks` does; a running task shows how long it has run
/// so far; one killed at its time limit reads `failed (time_limit)`.
#[test]
fn a_preempted_task_says_so_and_a_running_one_shows_its_run_time_so_far() {
    let mut c = Cluster::start_configured(
        "dashboard-preempted",
        true,
        "preemption = \"requeue\"\nprefetch = 0\n",
    );
    c.start_agent("a", 1, &[]);
    c.wait_for_nodes(1);
    c.ok(&["submit", "--", "sleep", "60"]);
    wait_until("the low task to run", Duration::from_secs(20), || {
        c.json(&["tasks", "--job", "1"])[0]["state"] == "running"
    });
    c.ok(&["submit", "--priority", "5", "--", "sleep", "60"]);
    wait_until("the high task to run", Duration::from_secs(20), || {
        c.json(&["tasks", "--job", "2"])[0]["state"] == "running"
    });
    let Some(bin) = chromium_or_skip() else {
        return;
    };
    let mut b = signed_in_as(&c, bin, "token");
    let t = Duration::from_secs(20);
    let cell = |column: usize| {
        format!(
            "(document.querySelector('#tasks tbody tr') || {{children: []}}).children[{column}]?.textContent"
        )
    };
    // The newest job, shown first: its task runs.
    b.wait_for("job 2's task", &format!("{} === 'running'", cell(3)), t);
    b.wait_for(
        "its run time so far",
        &format!("/^[0-9.]+(ms|s)$/.test({})", cell(9)),
        t,
    );
    b.eval("selectJob(1)");
    b.wait_for(
        "job 1's stopped task",
        &format!("{} === '1 (1 preempted)'", cell(4)),
        t,
    );
    // Its state says why its attempt ended, as `hetsched tasks` does.
    assert_eq!(b.eval(&cell(3)), "pending (preempted)");
    assert_eq!(b.eval(&cell(9)), "-");
    c.ok(&["cancel", "1,2"]);
    // A task killed at its time limit reads `failed (time_limit)`.
    c.ok(&["submit", "--time-limit", "1s", "--", "sleep", "60"]);
    let waited = c.cli(&["wait", "3"]);
    assert!(
        !waited.status.success(),
        "a job whose task failed: wait fails"
    );
    b.eval("selectJob(3)");
    b.wait_for(
        "job 3's task ended at its time limit",
        &format!("{} === 'failed (time_limit)'", cell(3)),
        t,
    );
}

/// With `prefetch`, a task sent to a node beyond its free cores waits in the agent's queue: the
/// dashboard says `queued` where a running task shows its run time so far, and the job's
/// running counts say how many wait so.
#[test]
fn a_task_waiting_in_its_agents_queue_says_queued() {
    let mut c = Cluster::start_configured("dashboard-queued", true, "prefetch = 1\n");
    c.start_agent("a", 1, &[]);
    c.wait_for_nodes(1);
    c.ok(&["submit", "--tasks", "2", "--", "sleep", "60"]);
    wait_until("both tasks on a", Duration::from_secs(20), || {
        let t = c.json(&["tasks", "--job", "1"]);
        t[0]["state"] == "running" && t[1]["queued"] == true
    });
    let Some(bin) = chromium_or_skip() else {
        c.ok(&["cancel", "1"]);
        return;
    };
    let mut b = signed_in_as(&c, bin, "token");
    let t = Duration::from_secs(20);
    let run_time = |task: u32| {
        format!(
            "(document.querySelector('#tasks tbody tr[data-task=\"{task}\"]') || {{children: []}}).children[9]?.textContent"
        )
    };
    b.wait_for("task 1 queued", &format!("{} === 'queued'", run_time(1)), t);
    b.wait_for(
        "task 0's run time so far",
        &format!("/^[0-9.]+(ms|s)$/.test({})", run_time(0)),
        t,
    );
    // The job's counts say how many of its running tasks wait queued: in the jobs table, the
    // job's title and its applications.
    b.wait_for(
        "the jobs table's running cell",
        "document.querySelector('#jobs tbody tr')?.children[5]?.textContent === '2 (1 queued)'",
        t,
    );
    b.wait_for(
        "the job's title",
        "document.getElementById('job-title').textContent.includes('2 running (1 queued)')",
        t,
    );
    b.wait_for(
        "the application's running cell",
        "document.querySelector('#apps tbody tr')?.children[3]?.textContent === '2 (1 queued)'",
        t,
    );
    c.ok(&["cancel", "1"]);
}

/// A workflow instance fetching its inputs (its agent's `fetch_bandwidth`, 1 MiB/s, holds 6 MiB
/// for about 6 s) reads `fetching` in the tasks table, its `fetch` cell `-`, as `hetsched tasks`
/// shows it; once the workflow completes its `fetch` cell says how long the fetch took
/// (`fetch_ms`, as the CLI writes it: `6.1s`).
#[test]
fn a_workflow_instance_shows_fetching_then_how_long_its_fetch_took() {
    const BLOB_BYTES: u64 = 6 << 20;
    let mut c =
        Cluster::start_configured("dashboard-fetch", true, "[workflow]\ncluster_size = 2\n");
    c.start_producer_and_capped_consumer();
    let Some(bin) = chromium_or_skip() else {
        return;
    };
    // The browser first: the fetch lasts seconds, a browser's start about as long.
    let mut b = signed_in_as(&c, bin, "token");
    let job = c.submit_blob_workflow(BLOB_BYTES, "");
    b.wait_for(
        "the page to load",
        "typeof selectJob === 'function'",
        Duration::from_secs(20),
    );
    b.eval(&format!("selectJob({job})"));
    // Cells of the row of task `app` (state: 3, fetch: 8).
    let cell = |app: &str, column: usize| {
        format!(
            "([...document.querySelectorAll('#tasks tbody tr')].find((r) => r.children[1].textContent === '{app}') || {{children: []}}).children[{column}]?.textContent"
        )
    };
    b.wait_for(
        "`use` fetching, its fetch time not known yet",
        &format!(
            "{} === 'fetching' && {} === '-'",
            cell("use", 3),
            cell("use", 8)
        ),
        Duration::from_secs(30),
    );
    let done = crate::workflow_runtime::wait_done(&c, job, Duration::from_secs(40));
    assert_eq!(done["state"], "completed", "{done}");
    let t = c
        .tasks(job)
        .into_iter()
        .find(|t| t["app"] == "use")
        .unwrap_or_default();
    let fetch_ms = t["fetch_ms"]
        .as_u64()
        .or_else(|| t["fetch_ms"].as_str().and_then(|s| s.parse().ok()))
        .unwrap_or_else(|| panic!("no fetch_ms: {t}"));
    assert!(fetch_ms >= 5_000, "6 MiB at 1 MiB/s in {fetch_ms} ms: {t}");
    b.eval(&format!("selectJob({job})"));
    b.wait_for(
        "`use` succeeded",
        &format!("{} === 'succeeded'", cell("use", 3)),
        Duration::from_secs(20),
    );
    // Seconds with one decimal, as the CLI's `fetch` column (which rounds the same value).
    let shown = b.eval(&cell("use", 8));
    let text = shown.as_str().unwrap_or_default();
    let seconds: f64 = text
        .strip_suffix('s')
        .filter(|n| n.len() >= 3 && n.as_bytes()[n.len() - 2] == b'.')
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("`use`'s fetch cell {shown} is not seconds like 6.1s"));
    assert!(
        (seconds - fetch_ms as f64 / 1000.0).abs() <= 0.051,
        "`use`'s fetch cell {text} for fetch_ms {fetch_ms}"
    );
}

/// The task rows the page shows: (task id, state) of each.
const ROWS: &str = "[...document.querySelectorAll('#tasks tbody tr')].map((r) => [Number(r.dataset.task), r.children[3].textContent])";

#[test]
fn a_100000_task_job_is_paged_filtered_and_counted_live_without_reloading() {
    const TASKS: u64 = 100_000;
    let mut c = Cluster::start("dashboard-scale", true);
    let http_addr = std::fs::read_to_string(c.data().join("http-address")).expect("http-address");
    let addr = http_addr.trim().to_string();
    let token = std::fs::read_to_string(c.data().join("token")).expect("token");
    let bearer = format!("Bearer {}", token.trim());
    // No agent yet: the job waits, pending, while the page is opened and paged.
    let job = c.write(
        "big.toml",
        &format!(
            "name = \"big\"\n[[application]]\nname = \"many\"\ntasks = {TASKS}\n\
             [application.cpu]\ncommand = 'true'\n"
        ),
    );
    let out = c.cli(&["submit", job.to_str().expect("path")]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // Server side, a task page is bounded whatever the browser asks for: at most 1000 rows, with
    // a cursor to go on, and the job's total beside them.
    let get = |path: &str| -> serde_json::Value {
        let (code, body) = http(&addr, "GET", path, &[("Authorization", &bearer)], "");
        assert_eq!(code, 200, "{path}: {body}");
        serde_json::from_str(&body).expect("json")
    };
    let huge = get(&format!("/api/tasks?job=1&cursor=0&limit={}", 10 * TASKS));
    let rows = huge["tasks"].as_array().expect("tasks").len();
    assert_eq!(rows, 1000, "the page size is capped at 1000 rows");
    assert_eq!(huge["total"], TASKS);
    assert!(
        huge["next_cursor"].as_u64() >= Some(1000),
        "{}",
        huge["next_cursor"]
    );
    let filtered = get("/api/tasks?job=1&cursor=0&limit=100000&state=pending");
    assert_eq!(filtered["tasks"].as_array().map(Vec::len), Some(1000));
    // Following the cursors, unfiltered and filtered, skips no task and shows none twice.
    for state in ["all", "pending"] {
        let one = get(&format!(
            "/api/tasks?job=1&cursor=0&limit=100&state={state}"
        ));
        let two = get(&format!(
            "/api/tasks?job=1&cursor={}&limit=100&state={state}",
            one["next_cursor"]
        ));
        let ids = |p: &serde_json::Value| -> Vec<u64> {
            p["tasks"]
                .as_array()
                .expect("tasks")
                .iter()
                .filter_map(|t| t["id"].as_u64())
                .collect()
        };
        let (one, two) = (ids(&one), ids(&two));
        let f = one[0];
        assert_eq!(one, (f..f + 100).collect::<Vec<_>>(), "{state}");
        assert_eq!(two, (f + 100..f + 200).collect::<Vec<_>>(), "{state}");
    }
    // No agent has registered: the job says why it waits.
    let listed = get("/api/jobs?cursor=1&limit=1");
    assert_eq!(
        listed["jobs"][0]["pending_reason"], "no live node can run `many` (cpu: 1 core)",
        "{listed}"
    );
    let none = get("/api/tasks?job=1&cursor=0&limit=100&state=failed");
    assert_eq!(none["tasks"].as_array().map(Vec::len), Some(0));
    // A state no task has is a bad parameter (400, named), as a bad limit is; not a 404.
    let (code, body) = http(
        &addr,
        "GET",
        "/api/tasks?job=1&state=bogus",
        &[("Authorization", &bearer)],
        "",
    );
    assert_eq!(
        (code, body.starts_with("state: unknown task state `bogus`")),
        (400, true),
        "{body}"
    );
    assert_eq!(
        none["next_cursor"], 0,
        "the scan ended at the job's last task"
    );

    let Some(bin) = chromium_or_skip() else {
        return;
    };
    let ticket = login_ticket(&addr, &bearer);
    let mut b = Browser::start(bin, &c.dir.join("browser"));
    b.navigate(&format!("http://{addr}/login?ticket={ticket}"));
    let t = Duration::from_secs(20);

    // The job, and the first page of its tasks.
    b.wait_for(
        "the job row",
        "document.querySelector('tr[data-job=\"1\"]').textContent.includes('big')",
        t,
    );
    b.wait_for(
        "a task page",
        "document.querySelectorAll('#tasks tbody tr').length === 100",
        t,
    );
    let first = b.eval(ROWS);
    let f = first[0][0].as_u64().expect("a task id");
    assert_eq!(first[99][0], f + 99, "{first}");
    assert!(
        first
            .as_array()
            .expect("rows")
            .iter()
            .all(|r| r[1] == "pending"),
        "{first}"
    );
    let r#where = b.eval("document.getElementById('tasks-where').textContent");
    assert!(
        r#where
            .as_str()
            .is_some_and(|w| w.contains(&format!("of {TASKS}"))),
        "{where}"
    );
    b.wait_for(
        "the job's title to say why it waits",
        "document.getElementById('job-title').textContent.includes('pending because: no live node can run `many`')",
        t,
    );
    // Marks the page: a reload would lose this.
    b.eval("window.__stillHere = 'yes'");

    // Forward a page, then a third, then back.
    b.eval("document.getElementById('tasks-next').click()");
    let starts =
        |id: u64| format!("document.querySelector('#tasks tbody tr').dataset.task === '{id}'");
    b.wait_for("page 2", &starts(f + 100), t);
    b.eval("document.getElementById('tasks-next').click()");
    b.wait_for("page 3", &starts(f + 200), t);
    let third = b.eval(ROWS);
    assert_eq!(third.as_array().map(Vec::len), Some(100));
    assert_eq!(third[99][0], f + 299, "{third}");
    b.eval("document.getElementById('tasks-prev').click()");
    b.wait_for("back to page 2", &starts(f + 100), t);
    assert!(
        b.eval("document.getElementById('tasks-where').textContent")
            .as_str()
            .is_some_and(|w| w.starts_with("page 2")),
    );

    // Live: an agent that completes tasks without starting processes; the counts rise on the
    // open page, carried by Server-Sent Events.
    let before = b.wait_for(
        "a live update",
        "Number(document.getElementById('live').dataset.events)",
        t,
    );
    c.start_agent("a", 4, &["--no-exec"]);
    let seen = b.wait_for(
        "succeeded tasks counted on the open page",
        "Number(document.getElementById('count-succeeded').textContent)",
        Duration::from_secs(30),
    );
    let seen = seen.as_u64().expect("count");
    let later = b.wait_for(
        "the count to rise again",
        &format!("Number(document.getElementById('count-succeeded').textContent) > {seen} && document.getElementById('count-succeeded').textContent"),
        Duration::from_secs(30),
    );
    assert!(later.as_str().and_then(|s| s.parse::<u64>().ok()) > Some(seen));
    let after = b.eval("Number(document.getElementById('live').dataset.events)");
    assert!(
        after.as_u64() > before.as_u64(),
        "updates over SSE: {before} → {after}"
    );
    // The job row's progress moves with them.
    b.wait_for(
        "the job row's succeeded count",
        "Number(document.querySelector('tr[data-job=\"1\"]').children[6].textContent) > 0",
        t,
    );
    // …and nothing reloaded: the page is the same document, it still shows page 2 of 100 rows,
    // and no request fetched more than a page of tasks.
    assert_eq!(b.eval("window.__stillHere"), "yes", "the page reloaded");
    assert!(
        b.eval("document.getElementById('tasks-where').textContent")
            .as_str()
            .is_some_and(|w| w.starts_with("page 2")),
    );
    let requests = b.eval(
        "performance.getEntriesByType('resource').map((e) => e.name).filter((n) => n.includes('/api/tasks'))",
    );
    let requests = requests.as_array().expect("requests");
    assert!(!requests.is_empty());
    for r in requests {
        let r = r.as_str().expect("url");
        assert!(r.contains("limit=100&"), "a task request for one page: {r}");
    }
    assert!(
        b.eval("document.querySelectorAll('#tasks tr').length")
            .as_u64()
            <= Some(101),
        "the DOM holds one page"
    );

    // Filter by state: only succeeded tasks, a page from the first.
    b.eval(
        "(() => { const s = document.getElementById('task-state'); s.value = 'succeeded'; \
         s.dispatchEvent(new Event('change')); })()",
    );
    b.wait_for(
        "succeeded tasks only",
        "document.getElementById('tasks-where').textContent.startsWith('page 1') && \
         document.querySelectorAll('#tasks tbody tr').length > 0 && \
         [...document.querySelectorAll('#tasks tbody tr')].every((r) => r.children[3].textContent === 'succeeded')",
        t,
    );
    let ok = b.eval(ROWS);
    assert!(ok.as_array().map(Vec::len) <= Some(100), "{ok}");
    b.eval(
        "(() => { const s = document.getElementById('task-state'); s.value = 'failed'; \
         s.dispatchEvent(new Event('change')); })()",
    );
    b.wait_for(
        "no failed task",
        "document.querySelector('#tasks tbody tr') === null && document.getElementById('task-state').value === 'failed'",
        t,
    );
    assert_eq!(b.eval("window.__stillHere"), "yes", "the page reloaded");
}

/// A user signs in to the dashboard with its own token: it sees every job, with whose each
/// is, but reads the output of its own jobs only (403 naming the owner otherwise; the read-only
/// token reads none), and its session ends when the admin removes it.
#[test]
fn a_user_signs_in_with_its_token_and_reads_the_output_of_its_own_jobs_only() {
    let mut c = Cluster::start("dashboard-users", true);
    c.start_agent("a", 2, &[]);
    c.wait_for_nodes(1);
    let (alice, bob) = (c.add_user("alice"), c.add_user("bob"));
    c.ok_as(
        &alice,
        None,
        &["submit", "--wait", "--", "echo", "hello from alice"],
    );
    let token = |p: &std::path::Path| {
        std::fs::read_to_string(p)
            .expect("token")
            .trim()
            .to_string()
    };
    let get =
        |path: &str, auth: &str| c.http_request(&format!("GET {path} HTTP/1.1\r\n{auth}"), "");
    let bearer = |p: &std::path::Path| format!("Authorization: Bearer {}\r\n", token(p));

    let (status, _, body) = get("/api/jobs?cursor=1&limit=10", &bearer(&bob));
    assert!(status.contains("200"), "{status}: {body}");
    let jobs: serde_json::Value = serde_json::from_str(&body).expect("json");
    assert_eq!(jobs["jobs"][0]["owner"], "alice", "{body}");
    let (status, _, body) = get("/api/log?job=1&task=0", &bearer(&bob));
    assert!(status.contains("403"), "{status}: {body}");
    assert!(body.contains("job 1 belongs to alice"), "{body}");
    let (status, _, body) = get("/api/log?job=1&task=0", &bearer(&alice));
    assert!(status.contains("200"), "{status}: {body}");
    assert_eq!(body, "hello from alice\n");
    // The read-only token (the one a Prometheus scrape holds) lists the jobs but reads no one's
    // output; the client token reads any.
    let read = c.data().join("read-token");
    let (status, _, body) = get("/api/jobs?cursor=1&limit=10", &bearer(&read));
    assert!(status.contains("200"), "{status}: {body}");
    let (status, _, body) = get("/api/log?job=1&task=0", &bearer(&read));
    assert!(status.contains("403"), "{status}: {body}");
    assert!(
        body.contains("the read-only token reads no task output"),
        "{body}"
    );
    let (status, _, body) = get("/api/log?job=1&task=0", &bearer(&c.data().join("token")));
    assert!(
        status.contains("200") && body == "hello from alice\n",
        "{status}: {body}"
    );

    // The Users panel: the JSON `hetsched usage` prints (the same span, alice's job ended so
    // her account no longer grows), and in a browser a row per user for the admin, the user's
    // own for a user.
    let admin = c.data().join("token");
    let (status, _, body) = get("/api/usage?since=6d", &bearer(&admin));
    assert!(status.contains("200"), "{status}: {body}");
    let usage: serde_json::Value = serde_json::from_str(&body).expect("json");
    let cli = c.json(&["usage", "--since", "6d"]);
    assert_eq!(
        usage["users"], cli["users"],
        "the dashboard and the CLI agree"
    );
    assert_eq!(
        (&usage["since"], &usage["until"]),
        (&cli["since"], &cli["until"])
    );
    assert_eq!(usage["users"][0]["user"], "alice", "{body}");
    if let Some(browser) = chromium() {
        let addr = std::fs::read_to_string(c.data().join("http-address")).expect("http-address");
        let panel = |token_file: &std::path::Path| {
            let ticket = login_ticket(addr.trim(), &format!("Bearer {}", token(token_file)));
            let url = format!("http://{}/login?ticket={ticket}#events=1", addr.trim());
            run_browser(browser, &["--dump-dom", "--virtual-time-budget=5000", &url])
        };
        let dom = panel(&admin);
        assert!(
            dom.contains("<tr data-user=\"alice\" class=\"\"><td title=\"\">alice</td>")
                && dom.contains("<tr data-user=\"bob\" class=\"\">")
                && dom.contains("<tr data-user=\"admin\" class=\"admin\">"),
            "a row per user and the admin's: {dom}"
        );
        let alice_row = dom
            .split("<tr data-user=\"alice\"")
            .nth(1)
            .and_then(|rest| rest.split("</tr>").next())
            .unwrap_or_default();
        assert!(
            alice_row.contains("<td class=\"num shares\">1</td>")
                && alice_row.contains("<td class=\"num max-cores\">-</td>")
                && alice_row.contains("<td class=\"num running-jobs\">0</td>")
                && alice_row.contains("<td class=\"num core-share\">100.0 %</td>"),
            "alice's shares, caps, jobs and accounts: {alice_row}"
        );
        // Her short job's core-hours, as `hetsched usage` writes them: under a hundredth of an
        // hour, three significant digits or `<0.0001`.
        let core_hours = alice_row
            .split("<td class=\"num core-hours\">")
            .nth(1)
            .and_then(|rest| rest.split("</td>").next())
            .unwrap_or_default();
        assert!(
            core_hours == "0.00"
                || core_hours == "&lt;0.0001"
                || (core_hours.starts_with("0.00") && core_hours.len() <= 8),
            "alice's core-hours: {alice_row}"
        );
        // Her own panel lists her alone: a share of herself would say nothing.
        let dom = panel(&alice);
        assert!(
            dom.contains("<td class=\"num core-share\">-</td>")
                && !dom.contains("<tr data-user=\"bob\""),
            "alice's own row, without a share: {dom}"
        );
        assert!(
            dom.contains(
                "<div id=\"usage-summary\" data-loaded=\"1\">Last 7 days: the live nodes offered "
            ),
            "the capacity and its use: {dom}"
        );
        let dom = panel(&bob);
        assert!(
            dom.contains("<tr data-user=\"bob\"") && !dom.contains("<tr data-user=\"alice\""),
            "bob sees his own row only: {dom}"
        );
    } else {
        eprintln!(
            "SKIPPED the browser part: no chromium binary (install Debian's `chromium`, as .ci/run does)"
        );
    }

    // The login form takes a user's token; the session is the user's, and ends with it.
    let (status, headers, _) = c.http_request(
        "POST /login HTTP/1.1\r\nContent-Type: application/x-www-form-urlencoded\r\n",
        &format!("token={}", token(&bob)),
    );
    assert!(status.contains("303"), "{status}");
    let cookie = headers
        .lines()
        .find_map(|l| l.strip_prefix("set-cookie: "))
        .and_then(|c| c.split(';').next())
        .expect("a session cookie")
        .to_string();
    let session = format!("Cookie: {cookie}\r\n");
    let (status, _, body) = get("/api/log?job=1&task=0", &session);
    assert!(
        status.contains("403"),
        "bob's session is bob's: {status}: {body}"
    );
    assert!(get("/api/jobs", &session).0.contains("200"));
    c.ok(&["user", "remove", "bob"]);
    assert!(
        get("/api/jobs", &session).0.contains("401"),
        "a removed user's session ends"
    );
}

/// A topology that runs for ever: a sequence spout at 20 tuples/s into a filter that keeps
/// everything (a terminal bolt: its tuples' latency is measured), 20 % of a core each.
const LIVE_TOPOLOGY: &str = r#"name = "live"
[[component]]
name = "numbers"
kind = "spout"
parallelism = 1
cpu = 20.0
builtin = "sequence-spout"
params = { rate = 20.0 }
[[component]]
name = "keep"
kind = "bolt"
parallelism = 1
cpu = 20.0
builtin = "filter"
[[stream]]
from = "numbers"
to = "keep"
rate = 20.0
"#;

/// A topology whose worker cannot start: its spout's file is not there.
const BROKEN_TOPOLOGY: &str = r#"name = "broken"
[[component]]
name = "lines"
kind = "spout"
parallelism = 1
cpu = 20.0
builtin = "corpus-spout"
params = { file = "no-such-corpus.txt" }
[[component]]
name = "keep"
kind = "bolt"
parallelism = 1
cpu = 20.0
builtin = "filter"
[[stream]]
from = "lines"
to = "keep"
rate = 20.0
"#;

/// A topology whose multi-lang bolt's program passes its handshake and exits at once: its
/// worker starts it again 5 times (after 0.1, 0.2, 0.4, 0.8 and 1.6 s: its
/// `topology.subprocess.restart.wait.ms`, 1 s by default, which would make that 31 s) and
/// gives up on it, so the topology is degraded about 3 s after it starts (`program`: the
/// program's path).
fn flaky_topology(program: &str) -> String {
    support::numbers_into(
        "flaky",
        &[support::CommandBolt {
            name: "sink",
            command: &["sh", program],
            params: "\"topology.subprocess.restart.wait.ms\" = 100",
        }],
    )
}

/// The Topologies panel: alice's running topology, the admin's whose worker cannot start and
/// the admin's whose executor was given up on are listed (owner, state, workers running of the
/// placement's), `/api/topologies` holds what `hetsched topology list --output json` prints,
/// and in a browser a click on a topology shows its workers — the one that cannot start
/// highlighted with its agent's reason — and its executors' rates, which the page looks at
/// again while it stays open. The one given up on reads degraded in its row and its detail,
/// naming the executor, as `hetsched topology list` and `show` do; it is submitted first, so
/// that its give-up (about 3 s of restarts) runs while the rest is checked.
#[test]
fn the_topologies_panel_lists_each_topology_and_shows_its_workers_and_rates_on_a_click() {
    let mut c = Cluster::start("dashboard-topologies", true);
    c.start_agent("a", 2, &[]);
    c.wait_for_nodes(1);
    let program = c.write(
        "flaky.sh",
        "while read -r l; do [ \"$l\" = end ] && break; done\n\
         printf '{\"pid\": %d}\\nend\\n' $$\n\
         exit 3\n",
    );
    let flaky = c.write(
        "flaky.toml",
        &flaky_topology(program.to_str().expect("path")),
    );
    c.ok(&["topology", "submit", flaky.to_str().expect("path")]);
    let alice = c.add_user("alice");
    let live = c.write("live.toml", LIVE_TOPOLOGY);
    c.ok_as(
        &alice,
        None,
        &["topology", "submit", live.to_str().expect("path")],
    );
    let broken = c.write("broken.toml", BROKEN_TOPOLOGY);
    c.ok(&["topology", "submit", broken.to_str().expect("path")]);
    let mut pid = 0;
    wait_until(
        "live's worker to run and broken's to say why it cannot",
        Duration::from_secs(60),
        || {
            let shown = c.json(&["topology", "show", "live"]);
            pid = shown["workers"][0]["pid"].as_u64().unwrap_or(0);
            pid != 0
                && c.json(&["topology", "show", "broken"])["workers"][0]["start_error"]
                    .as_str()
                    .is_some_and(|e| e.contains("no-such-corpus.txt"))
        },
    );
    // The API serves what the CLI prints (rates aside: they move between two reads).
    let (status, _, body) = c.http_get("/api/topologies");
    assert!(status.contains("200"), "{status}: {body}");
    let api: serde_json::Value = serde_json::from_str(&body).expect("json");
    let cli = c.json(&["topology", "list"]);
    let fields = |list: &serde_json::Value| -> Vec<Vec<serde_json::Value>> {
        list.as_array()
            .expect("a list")
            .iter()
            .map(|t| {
                ["name", "owner", "state", "placer", "generation"]
                    .iter()
                    .map(|k| t[*k].clone())
                    .collect()
            })
            .collect()
    };
    assert_eq!(fields(&api), fields(&cli), "{api}");
    assert_eq!(
        fields(&api)
            .iter()
            .map(|f| format!("{} of {}", f[0], f[1]))
            .collect::<Vec<_>>(),
        [
            "\"broken\" of \"admin\"",
            "\"flaky\" of \"admin\"",
            "\"live\" of \"alice\""
        ],
        "{api}"
    );
    let (status, _, body) = c.http_get("/api/topology?name=live");
    assert!(status.contains("200"), "{status}: {body}");
    let shown: serde_json::Value = serde_json::from_str(&body).expect("json");
    assert_eq!(shown["workers"][0]["pid"], pid, "{shown}");
    let (status, _, body) = c.http_get("/api/topology?name=gone");
    assert!(
        status.contains("404") && body.contains("no topology named `gone`"),
        "{status}: {body}"
    );

    let Some(bin) = chromium_or_skip() else {
        return;
    };
    let mut b = signed_in(&c, bin);
    let t = Duration::from_secs(30);
    let row =
        |name: &str| format!("document.querySelector('#topologies tr[data-topology=\"{name}\"]')");
    let cell =
        |name: &str, class: &str| format!("{}.querySelector('td.{class}').textContent", row(name));
    b.wait_for(
        "the panel with both topologies",
        &format!(
            "!document.getElementById('topologies-section').hidden && {} && {}",
            row("live"),
            row("broken")
        ),
        t,
    );
    assert_eq!(b.eval(&cell("live", "owner")), "alice");
    assert_eq!(b.eval(&cell("live", "state")), "running");
    assert_eq!(b.eval(&cell("live", "placer")), "one-phase");
    assert_eq!(b.eval(&cell("live", "workers")), "1/1");
    assert_eq!(b.eval(&cell("broken", "owner")), "admin");
    // The list says a worker cannot start (looked at again every 5 s: an agent says it at
    // every sync while it lasts).
    b.wait_for(
        "broken's row to say its worker cannot start",
        &format!("{} === '0/1 1 cannot start'", cell("broken", "workers")),
        // A poll: the margin costs nothing when it passes (it timed out at 30 s once with two
        // cores under a load of 15).
        Duration::from_secs(90),
    );
    // The spout's rate reaches the panel (looked at again every 5 s), with the latency at the
    // terminal bolt.
    b.wait_for(
        "live's throughput",
        &format!("Number({}) > 0", cell("live", "throughput")),
        Duration::from_secs(40),
    );
    b.wait_for(
        "live's latency",
        &format!("{}.includes(' / ')", cell("live", "latency")),
        t,
    );

    // A click on broken: its worker, highlighted, with its agent's reason.
    b.eval(&format!("{}.click()", row("broken")));
    let why = b.wait_for(
        "broken's worker and why it cannot start",
        "document.getElementById('topology-detail').dataset.topology === 'broken' && \
         !document.getElementById('topology-detail').hidden && \
         document.querySelector('#topology-workers tr.cannot-start td.start-error').textContent",
        t,
    );
    let why = why.as_str().unwrap_or_default();
    assert!(
        why.starts_with("cannot start: its worker process exited")
            && why.contains("no-such-corpus.txt"),
        "{why}"
    );
    assert_eq!(
        b.eval(
            "document.querySelector('#topology-workers tr[data-worker=\"0\"] td.worker-node').textContent"
        ),
        "a"
    );
    assert!(
        b.eval("document.getElementById('topology-title').textContent")
            .as_str()
            .is_some_and(
                |t| t.starts_with("Topology broken (admin) — running, one-phase, generation 1")
            ),
    );
    // A click on live: its running worker (pid, plain TCP links, no refused connection) and
    // its executors' rates.
    b.eval(&format!("{}.click()", row("live")));
    b.wait_for(
        "live's worker",
        &format!(
            "document.getElementById('topology-detail').dataset.topology === 'live' && \
             document.querySelector('#topology-workers tr[data-worker=\"0\"] td.pid').textContent === '{pid}'"
        ),
        t,
    );
    let worker = b.eval(
        "[...document.querySelectorAll('#topology-workers tr[data-worker=\"0\"] td')].map((td) => td.textContent)",
    );
    assert_eq!(worker[5], "tcp", "links: {worker}");
    assert_eq!(worker[6], "0", "refused connections: {worker}");
    assert_eq!(worker[7], "numbers#0, keep#0", "executors: {worker}");
    assert_eq!(worker[8], "running", "{worker}");
    assert_eq!(
        b.eval("document.querySelectorAll('#topology-workers td.start-error').length"),
        0,
        "no start error on a running worker"
    );
    b.wait_for(
        "the spout's and the bolt's rates",
        "Number(document.querySelector('#topology-executors tr[data-executor=\"numbers#0\"] td.emitted').textContent) > 0 && \
         Number(document.querySelector('#topology-executors tr[data-executor=\"keep#0\"] td.received').textContent) > 0",
        Duration::from_secs(40),
    );

    // flaky's worker gave up on sink#0: its row and its detail say degraded and name it, as
    // `hetsched topology list` and `show` do (the same document, /api/topologies).
    let given_up = b.wait_for(
        "flaky's row to say degraded",
        &format!(
            "{0}.querySelector('td.state .badge.degraded') && {0}.querySelector('td.state').textContent",
            row("flaky")
        ),
        // About 3 s of restarts from its submission, and the list looked at again (5 s).
        Duration::from_secs(120),
    );
    assert_eq!(given_up, "running, degraded: sink#0 given up");
    let cli = c.json(&["topology", "show", "flaky"]);
    assert_eq!(cli["degraded"], true, "{cli}");
    assert_eq!(
        cli["executors_given_up"],
        serde_json::json!(["sink#0"]),
        "{cli}"
    );
    assert_eq!(
        b.eval(&cell("live", "state")),
        "running",
        "live is not degraded"
    );
    b.eval(&format!("{}.click()", row("flaky")));
    b.wait_for(
        "flaky's detail",
        "document.getElementById('topology-detail').dataset.topology === 'flaky' && \
         document.querySelector('#topology-executors tr[data-executor=\"sink#0\"]') !== null",
        t,
    );
    let title = b.eval("document.getElementById('topology-title').textContent");
    assert!(
        title.as_str().is_some_and(|t| t.starts_with(
            "Topology flaky (admin) — running, degraded: sink#0 given up, one-phase, generation 1"
        )),
        "{title}"
    );
    let sink = b.eval(
        "(() => { const tr = document.querySelector('#topology-executors tr[data-executor=\"sink#0\"]'); \
         return [tr.className, tr.querySelector('td.restarts').textContent, \
         tr.querySelector('td.executor-state').textContent, tr.querySelector('td.executor-state').title]; })()",
    );
    assert_eq!(
        (&sink[0], &sink[1], &sink[2]),
        (&"given-up".into(), &"5".into(), &"failed".into()),
        "{sink}"
    );
    assert!(
        sink[3]
            .as_str()
            .is_some_and(|why| why.starts_with("sink#0: the program ended 6 times within 300 s")),
        "why it was given up on, on hover: {sink}"
    );
    let spout = b.eval(
        "document.querySelector('#topology-executors tr[data-executor=\"numbers#0\"] td.executor-state').textContent",
    );
    assert_eq!(spout, "-", "the spout runs");
    c.ok(&["topology", "kill", "live"]);
    c.ok(&["topology", "kill", "broken"]);
    c.ok(&["topology", "kill", "flaky"]);
}

/// The `hetsched_session` cookie's value among `cookies` (a browser's, `Browser::cookies`).
fn session_cookie(cookies: &[serde_json::Value]) -> Option<String> {
    cookies
        .iter()
        .find(|c| c["name"] == "hetsched_session")
        .and_then(|c| c["value"].as_str())
        .map(str::to_string)
}

/// The status `GET path` answers with the session cookie `session`.
fn with_session(addr: &str, path: &str, session: &str) -> u16 {
    let cookie = format!("hetsched_session={session}");
    http(addr, "GET", path, &[("Cookie", &cookie)], "").0
}

/// A person signs in as a person does: the dashboard's address shows the login form, a wrong
/// token says so, its own token typed and the button clicked land on the dashboard — every job
/// listed with its owner, the Users panel its own row only. A click on its job and on a task's
/// `stdout` reads the output in a new tab; another user's job's output is refused. The page's
/// sign-out button signs out: the browser is back on the login form, holds no session, a reload
/// shows the login form again, and the old cookie no longer opens the API.
#[test]
fn a_person_signs_in_with_the_form_reads_its_output_and_signs_out_with_the_button() {
    let mut c = Cluster::start("dashboard-login", true);
    let addr = std::fs::read_to_string(c.data().join("http-address")).expect("http-address");
    let addr = addr.trim();
    c.start_agent("a", 1, &[]);
    c.wait_for_nodes(1);
    let alice = c.add_user("alice");
    c.add_user("bob");
    c.ok_as(
        &alice,
        None,
        &[
            "submit",
            "--name",
            "alices-echo",
            "--wait",
            "--",
            "echo",
            "hello from alice",
        ],
    );
    c.ok(&[
        "submit",
        "--name",
        "admins-echo",
        "--wait",
        "--",
        "echo",
        "the admin's",
    ]);
    let Some(bin) = chromium_or_skip() else {
        return;
    };
    let t = Duration::from_secs(20);
    let mut b = Browser::start(bin, &c.dir.join("browser"));
    let home = format!("http://{addr}/");
    b.navigate(&home);
    b.wait_for(
        "the login form",
        "document.title === 'hetsched — sign in' && document.querySelector('form[action=\"/login\"] input[name=token]')",
        t,
    );
    // It says which tokens it takes: a user's own too.
    assert!(
        b.eval("document.body.innerText")
            .as_str()
            .is_some_and(|p| p.contains("Sign in with your own token")),
        "the login page names the user's own token"
    );
    // A wrong token: the form again, saying so, and no session.
    b.type_into("input[name=token]", "not-a-token", t);
    b.click("form[action=\"/login\"] button[type=submit]", t);
    b.wait_for(
        "the form to say the token is wrong",
        "document.querySelector('p.err').textContent === 'Wrong token.' && document.querySelector('input[name=token]')",
        t,
    );
    assert_eq!(session_cookie(&b.cookies(&home)), None);

    let alices = std::fs::read_to_string(&alice).expect("alice's token");
    b.type_into("input[name=token]", alices.trim(), t);
    b.click("form[action=\"/login\"] button[type=submit]", t);
    b.wait_for(
        "the dashboard with alice's job",
        "location.pathname === '/' && document.querySelector('#jobs tr[data-job=\"1\"]')",
        t,
    );
    let name = |job: u32| {
        format!("document.querySelector('#jobs tr[data-job=\"{job}\"]').children[1].textContent")
    };
    assert_eq!(b.eval(&name(1)), "alices-echo (alice)");
    assert_eq!(
        b.eval(&name(2)),
        "admins-echo",
        "every job, the admin's too"
    );
    b.wait_for(
        "alice's own row of the Users panel",
        "document.querySelector('#users tr[data-user=\"alice\"]')",
        t,
    );
    assert_eq!(
        b.eval("document.querySelectorAll('#users tr[data-user]').length"),
        1,
        "the session is alice's: her row only"
    );
    let cookies = b.cookies(&home);
    let session = session_cookie(&cookies).expect("a session cookie");
    let set = cookies
        .iter()
        .find(|c| c["name"] == "hetsched_session")
        .expect("the cookie");
    assert_eq!(
        (&set["httpOnly"], &set["sameSite"]),
        (&serde_json::json!(true), &serde_json::json!("Strict")),
        "{set}"
    );
    assert_eq!(with_session(addr, "/api/jobs", &session), 200);

    // Her job, clicked once: its title and its task; `stdout` opens the task's output in a new
    // tab.
    b.click("#jobs tr[data-job=\"1\"]", t);
    b.wait_for(
        "job 1's detail",
        "document.getElementById('job-title').textContent.startsWith('Job 1 — alices-echo — completed') && \
         document.querySelector('#tasks tbody tr[data-task=\"0\"] td.state-succeeded') && \
         document.querySelector('#tasks a[href=\"/api/log?job=1&task=0&stream=stdout\"]')",
        t,
    );
    assert!(
        b.eval("document.querySelector('#jobs tr[data-job=\"1\"]').classList.contains('selected')")
            == true,
        "the clicked row is marked"
    );
    b.click("#tasks a[href=\"/api/log?job=1&task=0&stream=stdout\"]", t);
    assert_eq!(
        b.text_of_new_tab("/api/log?job=1&", t),
        "hello from alice\n",
        "her task's output, read with her session"
    );
    // The admin's job: listed, but its output is not hers to read.
    b.click("#jobs tr[data-job=\"2\"]", t);
    b.wait_for(
        "job 2's detail",
        "document.getElementById('job-title').textContent.startsWith('Job 2 — admins-echo') && \
         document.querySelector('#tasks a[href^=\"/api/log?job=2&\"][href$=\"stream=stdout\"]')",
        t,
    );
    b.click(
        "#tasks a[href^=\"/api/log?job=2&\"][href$=\"stream=stdout\"]",
        t,
    );
    let refused = b.text_of_new_tab("/api/log?job=2&", t);
    assert!(
        refused.contains("job 2 belongs to the admin: only the admin may read its logs"),
        "{refused}"
    );

    // Sign out with the page's button.
    b.click("header form.logout button", t);
    b.wait_for(
        "the login form after signing out",
        "location.pathname === '/login' && document.querySelector('input[name=token]')",
        t,
    );
    assert_eq!(
        session_cookie(&b.cookies(&home)),
        None,
        "the browser holds no session"
    );
    assert_eq!(
        with_session(addr, "/api/jobs", &session),
        401,
        "the server ended the session: its cookie opens nothing"
    );
    b.navigate(&home);
    b.wait_for(
        "the login form on a reload",
        "document.title === 'hetsched — sign in' && document.querySelector('input[name=token]') && !document.getElementById('jobs')",
        t,
    );
}

/// Serves `page` (HTML) to every request on a loopback port of its own: another site, for the
/// browser (`localhost` and `127.0.0.1` are different sites). Its address; it serves until the
/// test binary exits.
fn other_site(page: String) -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("address").to_string();
    let page = std::sync::Arc::new(page);
    std::thread::spawn(move || {
        for s in listener.incoming() {
            let Ok(mut s) = s else { continue };
            let page = page.clone();
            // A thread per connection: a browser's idle, speculative connection must not hold
            // up the one that asks.
            std::thread::spawn(move || {
                let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
                // The request's head; what it asks for does not matter.
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") && s.read(&mut byte).is_ok_and(|n| n == 1) {
                    head.push(byte[0]);
                }
                if head.is_empty() {
                    return;
                }
                let _ = write!(
                    s,
                    "HTTP/1.1 200 OK\r\nContent-Type: text/html; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{page}",
                    page.len()
                );
            });
        }
    });
    addr
}

/// Login CSRF in a real browser: another site's page can neither sign the browser in nor out.
/// Its form posting a token to `/login` is refused; a login link on it opens this site's page
/// that asks for one click, and signs in only on that click; its sign-out form is refused and
/// the session goes on. The same over plain HTTP to a host name other than loopback, where
/// browsers send no `Sec-Fetch-Site` (the host names map to loopback in this browser).
#[test]
fn another_sites_page_signs_the_browser_in_only_on_a_click_here_and_never_out() {
    let c = Cluster::start("dashboard-csrf", true);
    let addr = std::fs::read_to_string(c.data().join("http-address")).expect("http-address");
    let addr = addr.trim();
    let port = addr.rsplit(':').next().expect("a port");
    let mallory = c.add_user("mallory");
    let mallorys = std::fs::read_to_string(&mallory).expect("mallory's token");
    c.ok_as(
        &mallory,
        None,
        &["submit", "--name", "mallorys", "--", "true"],
    );
    let Some(bin) = chromium_or_skip() else {
        return;
    };
    let bearer = format!("Bearer {}", mallorys.trim());
    // By IP (the browser says where a request comes from) and by a name that is no loopback
    // name to the browser (it does not).
    let sites = [
        (format!("127.0.0.1:{port}"), "localhost".to_string()),
        (format!("dash.test:{port}"), "evil.test".to_string()),
    ];
    let pages: Vec<String> = sites
        .iter()
        .map(|(dashboard, _)| {
            let ticket = login_ticket(addr, &bearer);
            format!(
                "<!doctype html><html><head><title>another site</title></head><body>\
                 <p><a id=\"link\" href=\"http://{dashboard}/login?ticket={ticket}\">open the dashboard</a></p>\
                 <form id=\"in\" method=\"post\" action=\"http://{dashboard}/login\">\
                 <input type=\"hidden\" name=\"token\" value=\"{}\"><button>sign in</button></form>\
                 <form id=\"out\" method=\"post\" action=\"http://{dashboard}/logout\"><button>sign out</button></form>\
                 </body></html>",
                mallorys.trim()
            )
        })
        .collect();
    let t = Duration::from_secs(20);
    let mut b = Browser::start_with(
        bin,
        &c.dir.join("browser"),
        &["--host-resolver-rules=MAP dash.test 127.0.0.1, MAP evil.test 127.0.0.1"],
    );
    for ((dashboard, other), page) in sites.iter().zip(pages) {
        let other_port = other_site(page);
        let other_port = other_port.rsplit(':').next().expect("a port");
        let evil = format!("http://{other}:{other_port}/");
        let home = format!("http://{dashboard}/");
        let jobs_status = "fetch('/api/jobs').then((r) => r.status)";

        // Its form posting mallory's token: refused, and no session.
        b.navigate(&evil);
        b.click("#in button", t);
        b.wait_for(
            &format!("the refusal of the other site's sign-in ({dashboard})"),
            &format!(
                "location.host === '{dashboard}' && document.querySelector('p.err').textContent.startsWith(\"Refused: that sign-in came from another site's page.\")"
            ),
            t,
        );
        assert_eq!(session_cookie(&b.cookies(&home)), None, "{dashboard}");
        assert_eq!(b.eval(jobs_status), 401, "{dashboard}");

        // Its login link: this site's page asks; nothing is signed in until the click.
        b.navigate(&evil);
        b.click("#link", t);
        b.wait_for(
            &format!("the page asking to sign in with the link ({dashboard})"),
            &format!(
                "location.host === '{dashboard}' && document.body.innerText.includes('Sign in to this dashboard with it only if you asked for it yourself') && document.querySelector('form[action=\"/login\"] button')"
            ),
            t,
        );
        assert_eq!(
            session_cookie(&b.cookies(&home)),
            None,
            "not signed in before the click ({dashboard})"
        );
        assert_eq!(b.eval(jobs_status), 401, "{dashboard}");
        b.click("form[action=\"/login\"] button", t);
        b.wait_for(
            &format!("the dashboard after the click ({dashboard})"),
            "location.pathname === '/' && document.querySelector('#jobs tr[data-job=\"1\"]').children[1].textContent === 'mallorys (mallory)'",
            t,
        );
        let session = session_cookie(&b.cookies(&home)).expect("a session after the click");

        // Its sign-out form: refused; the session goes on.
        b.navigate(&evil);
        b.click("#out button", t);
        b.wait_for(
            &format!("the refusal of the other site's sign-out ({dashboard})"),
            &format!(
                "location.host === '{dashboard}' && document.querySelector('p.err').textContent.startsWith(\"Refused: that sign-out came from another site's page.\")"
            ),
            t,
        );
        assert_eq!(
            session_cookie(&b.cookies(&home)).as_deref(),
            Some(session.as_str()),
            "{dashboard}"
        );
        assert_eq!(
            with_session(addr, "/api/jobs", &session),
            200,
            "{dashboard}"
        );
        assert_eq!(b.eval(jobs_status), 200, "{dashboard}");
    }
}

/// More jobs than a page holds (20): `older ›` shows the older ones and `‹ newer` comes back; a
/// click on an older job shows its tasks, whose pager goes forward with `next ›` and back to the
/// first page with `« first` (both clicked as a person does; a disabled button is not).
#[test]
fn the_jobs_pager_and_a_click_on_an_older_job_and_its_tasks_first_page() {
    let c = Cluster::start("dashboard-pager", true);
    // No agent: the jobs wait. Job 1 has three pages of tasks.
    c.ok(&["submit", "--name", "oldest", "--tasks", "250", "--", "true"]);
    for i in 2..=22 {
        c.ok(&["submit", "--name", &format!("job-{i}"), "--", "true"]);
    }
    let Some(bin) = chromium_or_skip() else {
        return;
    };
    let mut b = signed_in(&c, bin);
    let t = Duration::from_secs(20);
    let listed =
        "[...document.querySelectorAll('#jobs tbody tr')].map((r) => Number(r.dataset.job))";
    let page = |from: u64, to: u64| {
        format!(
            "document.getElementById('jobs-where').textContent === 'jobs {from}–{to} of 22' && \
             document.querySelectorAll('#jobs tbody tr').length === 20"
        )
    };
    let buttons = "[document.getElementById('jobs-prev').disabled, document.getElementById('jobs-next').disabled]";
    b.wait_for("the newest 20 jobs", &page(3, 22), t);
    assert_eq!(
        b.eval(buttons),
        serde_json::json!([true, false]),
        "nothing newer than the newest page"
    );
    assert_eq!(
        b.eval(listed),
        serde_json::json!((3..=22).rev().collect::<Vec<u64>>()),
        "newest first"
    );
    b.click("#jobs-next", t);
    b.wait_for("the older jobs", &page(1, 20), t);
    assert_eq!(b.eval(listed)[19], 1, "job 1 is listed last");
    assert_eq!(
        b.eval(buttons),
        serde_json::json!([false, true]),
        "nothing older than job 1"
    );
    b.click("#jobs-prev", t);
    b.wait_for("the newest jobs again", &page(3, 22), t);
    b.click("#jobs-next", t);
    b.wait_for("the older jobs again", &page(1, 20), t);

    // Job 1, clicked: its title and the first page of its tasks.
    b.click("#jobs tr[data-job=\"1\"]", t);
    let first_row =
        |id: u32| format!("document.querySelector('#tasks tbody tr').dataset.task === '{id}'");
    b.wait_for(
        "job 1's first page of tasks",
        &format!(
            "document.getElementById('job-title').textContent.startsWith('Job 1 — oldest — pending: 250 tasks') && \
             {} && document.getElementById('tasks-where').textContent.startsWith('page 1 ·')",
            first_row(0)
        ),
        t,
    );
    assert_eq!(
        b.eval("[document.getElementById('tasks-prev').disabled, document.getElementById('tasks-first').disabled]"),
        serde_json::json!([true, true]),
        "no page before the first"
    );
    b.click("#tasks-next", t);
    b.wait_for("page 2", &first_row(100), t);
    b.click("#tasks-next", t);
    b.wait_for(
        "page 3, the last",
        &format!(
            "{} && document.querySelectorAll('#tasks tbody tr').length === 50 && document.getElementById('tasks-next').disabled",
            first_row(200)
        ),
        t,
    );
    b.click("#tasks-first", t);
    b.wait_for(
        "back on the first page",
        &format!(
            "{} && document.getElementById('tasks-where').textContent.startsWith('page 1 ·') && document.getElementById('tasks-first').disabled",
            first_row(0)
        ),
        t,
    );
    assert!(
        b.eval("document.querySelector('#jobs tr[data-job=\"1\"]').classList.contains('selected')")
            == true
    );
}

/// A browser on the dashboard of `c`, signed in with a login link of the read-only token.
/// The Chromium binary to drive, or `None` having said that the browser part is skipped.
fn chromium_or_skip() -> Option<&'static str> {
    let bin = chromium();
    if bin.is_none() {
        eprintln!(
            "SKIPPED the browser part: no chromium binary (install Debian's `chromium`, as .ci/run does)"
        );
    }
    bin
}

/// A browser signed in to `c`'s dashboard with the read-only token.
fn signed_in(c: &Cluster, bin: &str) -> Browser {
    signed_in_as(c, bin, "read-token")
}

/// A browser signed in to `c`'s dashboard with the token in the data directory's `token_file`
/// (`token`: the admin's; `read-token`).
fn signed_in_as(c: &Cluster, bin: &str, token_file: &str) -> Browser {
    sign_in_as(c, Browser::start(bin, &c.dir.join("browser")), token_file)
}

/// `b` signed in to `c`'s dashboard with the read-only token (a login link).
fn sign_in(c: &Cluster, b: Browser) -> Browser {
    sign_in_as(c, b, "read-token")
}

fn sign_in_as(c: &Cluster, mut b: Browser, token_file: &str) -> Browser {
    b.navigate(&login_url(c, token_file, ""));
    b
}

/// A one-use login link to `c`'s dashboard for the token in the data directory's `token_file`,
/// ending in `fragment` (`#events=1`, or empty).
fn login_url(c: &Cluster, token_file: &str, fragment: &str) -> String {
    let addr = std::fs::read_to_string(c.data().join("http-address")).expect("http-address");
    let token = std::fs::read_to_string(c.data().join(token_file)).expect(token_file);
    let ticket = login_ticket(addr.trim(), &format!("Bearer {}", token.trim()));
    format!("http://{}/login?ticket={ticket}{fragment}", addr.trim())
}

/// Cluster `name` with no agent, so that its jobs `first`, `second` and `third` (1 to 3) wait,
/// and a browser signed in to its dashboard once it shows job 3's detail (the newest job is
/// shown at first); `None` without chromium.
fn three_waiting_jobs_shown(name: &str) -> Option<(Cluster, Browser)> {
    three_waiting_jobs_shown_on(Cluster::start(name, true), "")
}

/// [`three_waiting_jobs_shown`] on the cluster `c` (with no agent), the JavaScript `before`
/// run in every page the browser loads before the page's own scripts
/// ([`Browser::on_every_page`]).
fn three_waiting_jobs_shown_on(c: Cluster, before: &str) -> Option<(Cluster, Browser)> {
    for name in ["first", "second", "third"] {
        c.ok(&["submit", "--name", name, "--", "true"]);
    }
    let mut b = Browser::start(chromium_or_skip()?, &c.dir.join("browser"));
    b.on_every_page(before);
    let mut b = sign_in(&c, b);
    b.wait_for(
        "job 3's detail",
        "document.getElementById('job-title').textContent.startsWith('Job 3 — third')",
        Duration::from_secs(20),
    );
    Some((c, b))
}

/// A selector of the legend entry labelled `label` of the chart in `#chart`, found by its text
/// (uPlot marks its legend rows by class only).
fn legend_entry(b: &mut Browser, chart: &str, label: &str, t: Duration) -> String {
    let label_js = serde_json::to_string(label).expect("json");
    let at = b.wait_for(
        &format!("the legend entry {label} of #{chart}"),
        &format!(
            "[...document.querySelectorAll('#{chart} .u-legend tr')].findIndex((tr) => \
             tr.querySelector('.u-label')?.textContent === {label_js}) + 1"
        ),
        t,
    );
    format!("#{chart} .u-legend tr:nth-child({at}) .u-label")
}

/// Whether the legend entry `entry` (a selector) says its line is hidden, and whether the chart
/// `key` of the page's `charts` hides the series labelled `label`: the two must agree.
fn legend_off(b: &mut Browser, entry: &str, key: &str, label: &str) -> (bool, bool) {
    let entry = serde_json::to_string(entry).expect("json");
    let label = serde_json::to_string(label).expect("json");
    let v = b.eval(&format!(
        "[document.querySelector({entry}).closest('tr').classList.contains('u-off'), \
         !charts.{key}.series.find((s) => s.label === {label}).show]"
    ));
    (v[0] == true, v[1] == true)
}

/// A click on a chart's legend entry hides that line (the entry greyed out) and a second click
/// shows it again; on the per-node charts a node hidden so stays hidden when another node joins
/// and the chart is built again for the new list of nodes.
#[test]
fn a_legend_click_hides_its_line_and_a_hidden_node_stays_hidden_when_another_joins() {
    let mut c = Cluster::start("dashboard-legend", true);
    c.start_agent("a", 1, &[]);
    c.wait_for_nodes(1);
    let Some(bin) = chromium_or_skip() else {
        return;
    };
    let t = Duration::from_secs(20);
    let mut b = signed_in(&c, bin);
    let failed = legend_entry(&mut b, "chart-states", "failed", t);
    assert_eq!(
        legend_off(&mut b, &failed, "states", "failed"),
        (false, false)
    );
    b.click(&failed, t);
    assert_eq!(
        legend_off(&mut b, &failed, "states", "failed"),
        (true, true),
        "a click on `failed` hides the failed line"
    );
    let running = legend_entry(&mut b, "chart-states", "running", t);
    assert_eq!(
        legend_off(&mut b, &running, "states", "running"),
        (false, false),
        "the other lines stay"
    );
    b.click(&failed, t);
    assert_eq!(
        legend_off(&mut b, &failed, "states", "failed"),
        (false, false),
        "a second click shows it again"
    );

    // Node a hidden on the running-tasks chart; node b joins.
    let node_a = legend_entry(&mut b, "chart-load", "a", t);
    b.click(&node_a, t);
    assert_eq!(legend_off(&mut b, &node_a, "load", "a"), (true, true));
    c.start_agent("b", 1, &[]);
    c.wait_for_nodes(2);
    let node_b = legend_entry(&mut b, "chart-load", "b", t);
    let node_a = legend_entry(&mut b, "chart-load", "a", t);
    assert_eq!(
        legend_off(&mut b, &node_a, "load", "a"),
        (true, true),
        "node a stays hidden when the chart is built again for nodes a and b"
    );
    assert_eq!(legend_off(&mut b, &node_b, "load", "b"), (false, false));
}

/// A click on a node card opens that node's detail: its name and state in the words of
/// `hetsched nodes`, its figures, the card marked; the state follows the node live (drained
/// with its reason), and a click on another card shows that one.
#[test]
fn a_click_on_a_node_card_opens_its_detail_with_its_name_and_state() {
    let mut c = Cluster::start("dashboard-node-card", true);
    c.start_agent("a", 1, &[]);
    c.start_agent("b", 2, &[]);
    c.wait_for_nodes(2);
    let Some(bin) = chromium_or_skip() else {
        return;
    };
    let t = Duration::from_secs(20);
    let mut b = signed_in(&c, bin);
    let title = "document.getElementById('node-detail').hidden ? '' : document.getElementById('node-title').textContent";
    // Wait for the live stream to have rendered the cards, so the click lands on one it patches.
    b.wait_for(
        "live updates",
        "Number(document.getElementById('live').dataset.events) >= 2",
        t,
    );
    b.click("#nodes .node[data-node=\"b\"]", t);
    b.wait_for(
        "node b's detail",
        &format!("{title} === 'Node b — alive'"),
        t,
    );
    let figure = |name: &str| {
        format!("document.querySelector('#node-figures tr[data-figure=\"{name}\"] td').textContent")
    };
    assert_eq!(b.eval(&figure("cores")), "0/2 in use");
    assert_eq!(b.eval(&figure("running")), "0");
    let heard = b.eval(&figure("last heartbeat"));
    assert!(
        heard
            .as_str()
            .is_some_and(|h| h.ends_with(" ago") && h.starts_with(|c: char| c.is_ascii_digit())),
        "its last heartbeat: {heard}"
    );
    assert_eq!(
        b.eval(
            "[...document.querySelectorAll('#nodes .node.selected')].map((e) => e.dataset.node)"
        ),
        serde_json::json!(["b"]),
        "the clicked card is marked"
    );
    c.ok(&["node", "drain", "b", "--reason", "maintenance"]);
    b.wait_for(
        "node b's detail to say it is drained",
        &format!("{title} === 'Node b — drained: maintenance'"),
        t,
    );
    b.click("#nodes .node[data-node=\"a\"] .name", t);
    b.wait_for(
        "node a's detail",
        &format!(
            "{title} === 'Node a — alive' && {} === '0/1 in use'",
            figure("cores")
        ),
        t,
    );
    assert_eq!(
        b.eval(
            "[...document.querySelectorAll('#nodes .node.selected')].map((e) => e.dataset.node)"
        ),
        serde_json::json!(["a"])
    );
}

/// The page moves between the test's look at a job row and its press (as it does when a panel
/// or a table above fills in after the page is shown): the press that landed on another row
/// is not taken for a click on the one asked for (`cdp::Browser::press` looks again and presses
/// again), so the click opens the job asked for and no other. Before, the press landed on the
/// row pushed under the pointer, and the test waiting for the job's detail timed out.
#[test]
fn a_click_the_page_moved_under_lands_on_the_element_asked_for() {
    let Some((_c, mut b)) = three_waiting_jobs_shown("dashboard-moved-press") else {
        return;
    };
    let t = Duration::from_secs(20);
    // The first time the pointer moves, the jobs table drops by one row: the row that was under
    // the pointer is one row further down, and job 2's row (listed above job 1) takes its place.
    b.eval(
        "(() => { const table = document.getElementById('jobs'); \
         const step = table.querySelector('tr[data-job=\"1\"]').getBoundingClientRect().height; \
         document.addEventListener('mousemove', () => { \
           const pad = document.createElement('div'); pad.style.height = `${step}px`; \
           table.before(pad); }, { once: true }); \
         window.clickedJobs = []; \
         for (const tr of table.querySelectorAll('tbody tr')) \
           tr.addEventListener('click', () => window.clickedJobs.push(tr.dataset.job)); \
         return true; })()",
    );
    b.click("#jobs tr[data-job=\"1\"]", t);
    b.wait_for(
        "job 1's detail",
        "document.getElementById('job-title').textContent.startsWith('Job 1 — first')",
        Duration::from_secs(5),
    );
    assert_eq!(
        b.eval("window.clickedJobs"),
        serde_json::json!(["1"]),
        "one click, on job 1's row"
    );
}

/// Once the jobs table shows, the page's first data filling in above it — the Nodes section,
/// the Users panel's rows and its summary line, the Automatic allocation and Topologies panels
/// shown once they have something — does not move it: a person who clicks a job as the page
/// loads clicks that job. Every frame the browser draws is looked at from the page's first, by
/// a recorder run before the page's own script. Before, the table dropped down the page as each
/// of those answers came.
#[test]
fn the_jobs_table_does_not_move_once_shown_as_the_page_loads() {
    let dir = support::temp_dir("dash-steady-bin");
    crate::operator::fake_slurm(&dir);
    let config = crate::operator::slurm_queue(&dir, "local", 1, "");
    let c = Cluster::start_configured("dashboard-steady-jobs", true, &config);
    // Listed on the page, but starting no agent for the jobs that wait.
    c.ok(&["allocations", "--pause", "local"]);
    c.add_user("alice");
    c.add_user("bob");
    let topology = c.write("live.toml", LIVE_TOPOLOGY);
    c.ok(&["topology", "submit", topology.to_str().expect("path")]);
    // Run before the page's script: the table's distinct places (its top in the document) in
    // the frames it was visible in; and the answers of the panels above it held back (a busy
    // server's: accounts take a while to add up), the users' last, so that the jobs' come first.
    let recorder = "(() => { window.jobsTops = []; \
        const look = () => { const t = document.getElementById('jobs'); \
          if (t && t.getClientRects().length && getComputedStyle(t).visibility === 'visible') { \
            const top = t.getBoundingClientRect().top + window.scrollY; \
            if (window.jobsTops[window.jobsTops.length - 1] !== top) window.jobsTops.push(top); } \
          requestAnimationFrame(look); }; \
        requestAnimationFrame(look); \
        const held = [['/api/nodes', 400], ['/api/allocations', 600], ['/api/topologies', 800], \
          ['/api/users', 1000], ['/api/usage', 1000]]; \
        const fetchNow = window.fetch; \
        window.fetch = (url, opts) => fetchNow(url, opts).then((r) => { \
          const ms = (held.find(([p]) => String(url).startsWith(p)) || [])[1]; \
          return ms ? new Promise((done) => setTimeout(() => done(r), ms)) : r; }); })();";
    let Some((_c, mut b)) = three_waiting_jobs_shown_on(c, recorder) else {
        return;
    };
    b.wait_for(
        "every panel's first data",
        "document.getElementById('usage-summary').dataset.loaded === '1' \
         && document.querySelectorAll('#users tbody tr').length === 4 \
         && !document.getElementById('allocations-section').hidden \
         && !document.getElementById('topologies-section').hidden \
         && document.querySelectorAll('#topologies tbody tr').length === 1 \
         && document.getElementById('nodes').textContent !== '' \
         && Number(document.getElementById('live').dataset.events) >= 2",
        Duration::from_secs(20),
    );
    // Two frames more: what was drawn last is recorded.
    b.eval("new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(() => r(true))))");
    let tops = b.eval("window.jobsTops");
    assert_eq!(
        tops.as_array().map(Vec::len),
        Some(1),
        "the jobs table's top in the frames it showed in: {tops}"
    );
}

/// The page is shown as soon as its first answers are in even when some are refusals: the
/// Users panel's answered 403 and the event stream refused (as a 9th tab's is, 429), a job row
/// is clickable well before the page would give up waiting (10 s), and the click opens it.
#[test]
fn the_page_is_shown_at_once_when_a_first_answer_is_a_refusal() {
    let refusals = "(() => { const fetchNow = window.fetch; \
        window.fetch = (url, opts) => String(url).startsWith('/api/users') \
          ? Promise.resolve(new Response('not yours', { status: 403 })) : fetchNow(url, opts); \
        const Stream = window.EventSource; \
        window.EventSource = class extends Stream { constructor() { super('/api/no-such-stream'); } }; })();";
    let Some((_c, mut b)) =
        three_waiting_jobs_shown_on(Cluster::start("dashboard-refused-panel", true), refusals)
    else {
        return;
    };
    b.click("#jobs tr[data-job=\"1\"]", Duration::from_secs(5));
    b.wait_for(
        "job 1's detail",
        "document.getElementById('job-title').textContent.startsWith('Job 1 — first')",
        Duration::from_secs(5),
    );
}

/// A job row pressed just before the list refreshes (`loadJobs`, as a new job or the pager
/// makes it, and an update of the event stream), and released after: the row under the pointer
/// is the same element, so the first click opens the job's detail and the row stays marked.
#[test]
fn a_job_row_clicked_as_the_list_refreshes_opens_its_detail_on_the_first_click() {
    let Some((_c, mut b)) = three_waiting_jobs_shown("dashboard-row-refresh") else {
        return;
    };
    let t = Duration::from_secs(20);
    b.eval("window.pressedRow = document.querySelector('#jobs tr[data-job=\"1\"]'); true");
    let at = b.press("#jobs tr[data-job=\"1\"]", t);
    // The refresh, between the press and the release.
    b.eval(
        "(async () => { const refresh = loadJobs(); \
         updateJobs((await api('/api/jobs?cursor=1&limit=20')).jobs); await refresh; return true; })()",
    );
    b.release(at);
    b.wait_for(
        "job 1's detail after one click",
        "document.getElementById('job-title').textContent.startsWith('Job 1 — first')",
        Duration::from_secs(5),
    );
    assert!(
        b.eval("document.querySelector('#jobs tr[data-job=\"1\"]') === window.pressedRow") == true,
        "the refresh kept the row under the pointer"
    );
    b.eval("loadJobs().then(() => true)");
    assert_eq!(
        b.eval("[...document.querySelectorAll('#jobs tr.selected')].map((r) => r.dataset.job)"),
        serde_json::json!(["1"]),
        "the selection survives a refresh"
    );
}

/// `GET /logout` shows a sign-out button; a person who clicks it is signed out: back on the
/// login form, no session in the browser, and the old cookie answers 401.
#[test]
fn the_sign_out_page_signs_out_with_its_button() {
    let c = Cluster::start("dashboard-logout-page", true);
    let addr = std::fs::read_to_string(c.data().join("http-address")).expect("http-address");
    let addr = addr.trim();
    let Some(bin) = chromium_or_skip() else {
        return;
    };
    let t = Duration::from_secs(20);
    let mut b = signed_in(&c, bin);
    let home = format!("http://{addr}/");
    b.wait_for(
        "the dashboard",
        "location.pathname === '/' && document.getElementById('jobs')",
        t,
    );
    let session = session_cookie(&b.cookies(&home)).expect("a session cookie");
    assert_eq!(with_session(addr, "/api/jobs", &session), 200);
    b.navigate(&format!("http://{addr}/logout"));
    b.wait_for(
        "the sign-out page",
        "document.title === 'hetsched — sign out'",
        t,
    );
    assert_eq!(
        session_cookie(&b.cookies(&home)).as_deref(),
        Some(session.as_str()),
        "showing the page signs nobody out"
    );
    b.click("form[action=\"/logout\"] button[type=submit]", t);
    b.wait_for(
        "the login form after signing out",
        "location.pathname === '/login' && document.querySelector('input[name=token]')",
        t,
    );
    assert_eq!(session_cookie(&b.cookies(&home)), None);
    assert_eq!(
        with_session(addr, "/api/jobs", &session),
        401,
        "the server ended the session"
    );
}

/// A topology row pressed just before the list refreshes (`loadTopologies`, every 5 s) and
/// released after: the row under the pointer is the same element, so the first click opens
/// the topology's detail, and the row stays marked across the next refresh.
#[test]
fn a_topology_row_clicked_as_the_list_refreshes_opens_its_detail_on_the_first_click() {
    let c = Cluster::start("dashboard-topology-row-refresh", true);
    // No agent: the topologies are listed, placed nowhere; no worker needs to start.
    for (file, text) in [
        ("live.toml", LIVE_TOPOLOGY),
        ("broken.toml", BROKEN_TOPOLOGY),
    ] {
        let path = c.write(file, text);
        c.ok(&["topology", "submit", path.to_str().expect("path")]);
    }
    let Some(bin) = chromium_or_skip() else {
        return;
    };
    let t = Duration::from_secs(20);
    let mut b = signed_in(&c, bin);
    let row = "#topologies tr[data-topology=\"broken\"]";
    b.wait_for(
        "both topologies' rows",
        "document.querySelectorAll('#topologies tbody tr').length === 2",
        t,
    );
    b.eval(&format!(
        "window.pressedRow = document.querySelector('{row}'); true"
    ));
    let at = b.press(row, t);
    // The refresh, between the press and the release.
    b.eval("(async () => { renderTopologies(await api('/api/topologies')); return true; })()");
    b.release(at);
    b.wait_for(
        "broken's detail after one click",
        "document.getElementById('topology-detail').dataset.topology === 'broken' && \
         !document.getElementById('topology-detail').hidden",
        Duration::from_secs(5),
    );
    assert!(
        b.eval(&format!(
            "document.querySelector('{row}') === window.pressedRow"
        )) == true,
        "the refresh kept the row under the pointer"
    );
    b.eval("(async () => { renderTopologies(await api('/api/topologies')); return true; })()");
    assert_eq!(
        b.eval(
            "[...document.querySelectorAll('#topologies tr.selected')].map((r) => r.dataset.topology)"
        ),
        serde_json::json!(["broken"]),
        "the selection survives a refresh"
    );
}

/// A job's title counts its cancelled tasks beside the others, so that its counts add up to its
/// tasks. Before, it listed succeeded, failed, running and pending only: a cancelled one-task
/// job read `1 tasks, 0 succeeded, 0 failed, 0 running, 0 pending`.
#[test]
fn a_jobs_title_counts_its_cancelled_tasks() {
    let Some((c, mut b)) = three_waiting_jobs_shown("dashboard-cancelled-title") else {
        return;
    };
    c.ok(&["cancel", "3"]);
    b.wait_for(
        "job 3's title with its cancelled task",
        "document.getElementById('job-title').textContent.includes('0 failed, 1 cancelled, 0 running')",
        Duration::from_secs(20),
    );
}

/// A job's title counts its tasks in the words of `hetsched job N`: `1 task`, not `1 tasks`.
#[test]
fn a_one_task_jobs_title_says_1_task() {
    let Some((_c, mut b)) = three_waiting_jobs_shown("dashboard-one-task-title") else {
        return;
    };
    b.wait_for(
        "job 3's title counting its one task",
        "document.getElementById('job-title').textContent.startsWith('Job 3 — third — pending: 1 task, 0 succeeded')",
        Duration::from_secs(20),
    );
}

/// A job that waits for another (`submit --after`) says which in its title, as `hetsched jobs`'
/// `pending because` does (`waiting for job 3`). Before, the title said `waiting` and nothing
/// of what for, and neither did the row.
#[test]
fn a_job_waiting_for_another_says_which_in_its_title() {
    let Some((c, mut b)) = three_waiting_jobs_shown("dashboard-waiting-title") else {
        return;
    };
    c.ok(&["submit", "--name", "fourth", "--after", "3", "--", "true"]);
    let t = Duration::from_secs(20);
    b.click("#jobs tr[data-job=\"4\"]", t);
    b.wait_for(
        "job 4's title saying what it waits for",
        "document.getElementById('job-title').textContent.startsWith('Job 4 — fourth — waiting: 1 task') && \
         document.getElementById('job-title').textContent.includes('waiting for job 3')",
        t,
    );
    assert_eq!(
        b.eval("document.querySelector('#jobs tr[data-job=\"4\"] td:nth-child(3)').title"),
        serde_json::json!("waiting for job 3"),
        "the row's state says it on hover"
    );
}

/// A workflow's title counts instances, as `hetsched job N` does, and the task-state filter
/// offers its instances' own states, `waiting` and `ready` (`hetsched tasks --state`): its
/// pending instances are in those, so `pending` lists none of them. Before, the filter offered
/// only the batch states and a workflow's 4 pending instances could not be picked out.
#[test]
fn a_workflows_instances_are_counted_and_filtered_in_their_own_words() {
    let Some((c, mut b)) = three_waiting_jobs_shown("dashboard-workflow-filter") else {
        return;
    };
    let wf = c.write(
        "wf.toml",
        "name = \"wf\"\n\
         [[task]]\nname = \"A\"\ninstances = 2\noutputs = [\"m\"]\ncommand = \"echo {index} > {output:m}\"\n\
         [[task]]\nname = \"B\"\ninstances = 2\ninputs = [\"m\"]\ncommand = \"cat {input:m}\"\n",
    );
    c.ok(&["submit", wf.to_str().expect("path")]);
    let t = Duration::from_secs(20);
    b.click("#jobs tr[data-job=\"4\"]", t);
    b.wait_for(
        "the workflow's title in instances",
        "document.getElementById('job-title').textContent.startsWith('Job 4 — wf — pending: 4 instances, 0 succeeded')",
        t,
    );
    let rows_in = |b: &mut Browser, state: &str| {
        b.eval(&format!(
            "(() => {{ const s = document.getElementById('task-state'); s.value = '{state}'; \
             s.dispatchEvent(new Event('change')); return [...s.options].some((o) => o.value === '{state}'); }})()"
        ));
        b.wait_for(
            &format!("the workflow's {state} instances"),
            &format!(
                "[...document.querySelectorAll('#tasks tbody tr')].length > 0 && \
                 [...document.querySelectorAll('#tasks tbody tr td:nth-child(4)')].every((td) => td.textContent === '{state}') && \
                 [...document.querySelectorAll('#tasks tbody tr td:nth-child(2)')].map((td) => td.textContent).join()"
            ),
            t,
        )
    };
    assert_eq!(rows_in(&mut b, "ready"), serde_json::json!("A,A"));
    // Coloured as the other states are (before, a `ready` cell had the plain text colour).
    assert_eq!(
        b.eval(
            "(() => { const td = document.querySelector('#tasks tbody tr td:nth-child(4)'); \
             return getComputedStyle(td).color !== getComputedStyle(td.parentElement).color; })()"
        ),
        serde_json::json!(true),
        "a ready instance's state has a colour"
    );
    assert_eq!(rows_in(&mut b, "waiting"), serde_json::json!("B,B"));
    // `lost` is a divisible job's chunks' state only: not offered for a workflow.
    assert_eq!(
        b.eval(
            "[...document.getElementById('task-state').options].some((o) => o.value === 'lost' && !o.hidden)"
        ),
        serde_json::json!(false),
        "no lost for a workflow"
    );
}

/// The chart of tasks by state draws the cancelled ones too, as the header's counts do: its
/// lines add up to every task. Before, it drew pending, running, succeeded and failed only, and
/// a cancelled job's tasks left the pending line for no other.
#[test]
fn the_tasks_by_state_chart_draws_the_cancelled_tasks() {
    let Some((c, mut b)) = three_waiting_jobs_shown("dashboard-cancelled-chart") else {
        return;
    };
    c.ok(&["cancel", "3"]);
    b.wait_for(
        "the cancelled task on the chart beside the two pending",
        "(() => { const s = charts.states, i = s.series.findIndex((x) => x.label === 'cancelled'); \
         return i > 0 && s.data[i].at(-1) === 1 && s.data[s.series.findIndex((x) => x.label === 'pending')].at(-1) === 2; })()",
        Duration::from_secs(20),
    );
}

/// A running job whose pending tasks are held reads `running (held)` in the jobs table, as in
/// its title and in `hetsched jobs`. Before, the row cut the state to its first word and read
/// `running`, as if its pending tasks would start.
#[test]
fn a_running_jobs_row_says_its_pending_tasks_are_held() {
    let mut c = Cluster::start("dashboard-running-held", true);
    c.start_agent("a", 1, &[]);
    c.wait_for_nodes(1);
    c.ok(&[
        "submit", "--name", "pair", "--tasks", "2", "--", "sleep", "60",
    ]);
    let start = std::time::Instant::now();
    while c.json(&["job", "1"])["counts"]["running"].as_u64() != Some(1) {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "job 1's first task never ran"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    c.ok(&["hold", "1"]);
    let Some(bin) = chromium_or_skip() else {
        return;
    };
    let mut b = signed_in(&c, bin);
    b.wait_for(
        "job 1's row reading running (held)",
        "(() => { const td = document.querySelector('#jobs tr[data-job=\"1\"] td:nth-child(3)'); \
         return td.textContent === 'running (held)' && td.classList.contains('state-running'); })()",
        Duration::from_secs(20),
    );
    c.ok(&["cancel", "1"]);
}

/// A divisible job's detail lists its workers as `hetsched job N` does: each agent's measured
/// speed, its memory cap, the units and chunks it did and whether it is alive. Before, the page
/// showed the job's units done in all and its chunks, not who computed them or how fast.
#[test]
fn a_divisible_jobs_workers_are_listed_with_their_speed_and_units() {
    let mut c = Cluster::start("dashboard-div-workers", true);
    c.start_agent("a", 2, &[]);
    c.wait_for_nodes(1);
    let job = c.write(
        "div.toml",
        "[[divisible]]\nname = \"count\"\nunits = 60\ncommand = \"echo {start} {end}\"\n",
    );
    c.ok(&["submit", job.to_str().expect("path"), "--wait"]);
    let worker = &c.json(&["job", "1"])["divisible"]["workers"][0];
    let chunks = worker["chunks_done"].as_u64().expect("chunks_done");
    let speed = format!("{:.1}", worker["speed"].as_f64().expect("speed"));
    let Some(bin) = chromium_or_skip() else {
        return;
    };
    let mut b = signed_in(&c, bin);
    let row = b.wait_for(
        "agent a's row among the job's workers",
        "(() => { const tr = document.querySelector('#divisible-workers tbody tr[data-worker=\"a\"]'); \
         return tr && [...tr.children].map((td) => td.textContent); })()",
        Duration::from_secs(20),
    );
    assert_eq!(
        row,
        serde_json::json!(["a", speed, "unlimited", "60", chunks.to_string(), "yes"]),
        "a's speed, memory, units, chunks and liveness"
    );
    // Its chunks can be lost with their agent: the state filter offers `lost` for it.
    assert_eq!(
        b.eval(
            "[...document.getElementById('task-state').options].some((o) => o.value === 'lost' && !o.hidden)"
        ),
        serde_json::json!(true),
        "the chunk filter offers lost"
    );
}

/// A workflow's applications say how many of their pending instances are ready (their inputs
/// made, waiting for a node) beside those that wait for their producers, as `hetsched job N`'s
/// waiting and ready columns do. Before, the row said `2` pending for either.
#[test]
fn a_workflows_applications_say_how_many_pending_instances_are_ready() {
    let Some((c, mut b)) = three_waiting_jobs_shown("dashboard-workflow-ready") else {
        return;
    };
    let wf = c.write(
        "wf.toml",
        "name = \"wf\"\n\
         [[task]]\nname = \"A\"\ninstances = 2\noutputs = [\"m\"]\ncommand = \"echo {index} > {output:m}\"\n\
         [[task]]\nname = \"B\"\ninstances = 2\ninputs = [\"m\"]\ncommand = \"cat {input:m}\"\n",
    );
    c.ok(&["submit", wf.to_str().expect("path")]);
    let t = Duration::from_secs(20);
    b.click("#jobs tr[data-job=\"4\"]", t);
    let pending = b.wait_for(
        "the workflow's applications",
        "document.getElementById('job-title').textContent.startsWith('Job 4 — wf') && \
         ['A', 'B'].map((a) => document.querySelector(`#apps tr[data-app=\"${a}\"] td:nth-child(3)`).textContent)",
        t,
    );
    assert_eq!(pending, serde_json::json!(["2 (2 ready)", "2"]));
}

/// The header's counts say what they count on hover: batch tasks and workflow instances, not a
/// divisible job's units (its row counts those), so that a reader adding up the jobs table
/// knows why they differ. Before, nothing said so.
#[test]
fn the_headers_counts_say_what_they_count() {
    let Some((_c, mut b)) = three_waiting_jobs_shown("dashboard-summary-title") else {
        return;
    };
    let title = b.eval("document.getElementById('summary').title");
    assert!(
        title
            .as_str()
            .is_some_and(|t| t.contains("workflow instances") && t.contains("divisible")),
        "{title}"
    );
}

/// Signed in with the read-only token, which reads no task output, a task's output cell says so
/// on hover instead of offering links that answer 403; the client token's page has the links.
/// Before, the read-only page offered `stdout` and `stderr` links that only said it was refused.
#[test]
fn the_read_only_token_is_offered_no_output_links_it_cannot_follow() {
    let mut c = Cluster::start("dashboard-read-only-links", true);
    c.start_agent("a", 1, &[]);
    c.wait_for_nodes(1);
    c.ok(&["submit", "--name", "hello", "--wait", "--", "echo", "hi"]);
    let Some(bin) = chromium_or_skip() else {
        return;
    };
    let t = Duration::from_secs(20);
    let output_cell = "(() => { const tr = document.querySelector('#tasks tbody tr[data-task=\"0\"]'); \
         const td = tr && tr.querySelector('td.output'); \
         return td && [td.querySelectorAll('a').length, td.textContent, td.querySelector('[title]')?.title || '']; })()";
    let mut b = signed_in(&c, bin);
    let read_only = b.wait_for("task 0's output cell, read-only", output_cell, t);
    assert_eq!(read_only[0], 0, "no links: {read_only}");
    assert_eq!(read_only[1], "-");
    assert!(
        read_only[2]
            .as_str()
            .is_some_and(|t| t.contains("read-only token reads no task output")),
        "{read_only}"
    );
    let mut b = sign_in_as(
        &c,
        Browser::start(bin, &c.dir.join("browser-client")),
        "token",
    );
    let client = b.wait_for("task 0's output cell, client token", output_cell, t);
    assert_eq!(client[0], 2, "stdout and stderr: {client}");
}

/// A node whose agent left (`hetsched node stop`) is kept out of the cards, as `hetsched nodes`
/// keeps it out of its table, and the Nodes panel says how many left with a box that shows
/// them, greyed and marked `left`, as `hetsched nodes --all` lists them; a click opens its
/// detail in the words of `nodes --all`. Before, a node that left was shown nowhere.
#[test]
fn nodes_that_left_are_counted_and_shown_greyed_on_asking() {
    let mut c = Cluster::start("dashboard-nodes-left", true);
    c.start_agent("a", 1, &[]);
    c.start_agent("b", 1, &[]);
    c.wait_for_nodes(2);
    c.ok(&["node", "stop", "b"]);
    assert_eq!(c.agent_exit("b", Duration::from_secs(20)), Some(0));
    wait_until("b to be listed as left", Duration::from_secs(20), || {
        c.ok(&["nodes", "--all"]).contains("left (operator)")
    });
    let Some(bin) = chromium_or_skip() else {
        return;
    };
    let t = Duration::from_secs(20);
    let mut b = signed_in(&c, bin);
    let cards = "[...document.querySelectorAll('#nodes .node')].map((e) => e.dataset.node + (e.classList.contains('left') ? ' left' : ''))";
    b.wait_for(
        "the live cards without b, and the box saying one left",
        "Number(document.getElementById('live').dataset.events) >= 2 \
         && !document.getElementById('nodes-left-filter').hidden \
         && document.getElementById('nodes-left-filter').textContent.includes('1 node that left')",
        t,
    );
    assert_eq!(b.eval(cards), serde_json::json!(["a"]));
    b.click("#nodes-left", t);
    b.wait_for(
        "b's card, marked left",
        &format!("JSON.stringify({cards}) === JSON.stringify(['a', 'b left'])"),
        t,
    );
    let badge = b.eval("document.querySelector('#nodes .node[data-node=\"b\"] .name').textContent");
    assert_eq!(badge, "bleft (operator)", "{badge}");
    b.click("#nodes .node[data-node=\"b\"]", t);
    b.wait_for(
        "b's detail in the words of nodes --all",
        "!document.getElementById('node-detail').hidden && document.getElementById('node-title').textContent === 'Node b — left (operator)'",
        t,
    );
    // Unticked, the cards are the live ones again, over the next updates too.
    b.click("#nodes-left", t);
    b.wait_for(
        "b's card gone again",
        &format!("JSON.stringify({cards}) === JSON.stringify(['a'])"),
        t,
    );
}

/// A divisible chunk `lost` with its agent has a colour of its own in the tasks table, as the
/// other states have (`out`, `done` and `stopped` read `running`, `succeeded` and `cancelled`,
/// and take theirs): before, `lost` was drawn in the text's colour.
#[test]
fn a_lost_chunks_state_has_a_colour_of_its_own() {
    let Some((_c, mut b)) = three_waiting_jobs_shown("dashboard-lost-colour") else {
        return;
    };
    let colours = b.eval(
        "(() => { const td = (s) => { const e = document.createElement('td'); e.className = `state-${s}`; \
         document.querySelector('#tasks tbody').append(e); const c = getComputedStyle(e).color; e.remove(); return c; }; \
         return ['lost', 'running', 'succeeded', 'failed', 'cancelled', 'pending', 'nothing'].map(td); })()",
    );
    let c: Vec<&str> = colours
        .as_array()
        .expect("colours")
        .iter()
        .filter_map(|v| v.as_str())
        .collect();
    assert_eq!(c.len(), 7, "{colours}");
    let lost = c[0];
    assert!(
        c[1..].iter().all(|o| *o != lost),
        "lost's colour {lost} is another state's or the text's: {colours}"
    );
}

/// The header counts a running divisible load's units apart from the tasks (which leave them
/// out): `units 0/10` for a job of 10 units that no agent has started, hidden while no
/// divisible load runs. Before, the header counted no unit anywhere, only a hover said so.
#[test]
fn the_header_counts_the_running_divisible_loads_units_apart() {
    let Some((c, mut b)) = three_waiting_jobs_shown("dashboard-units-pill") else {
        return;
    };
    let t = Duration::from_secs(20);
    let pill = "(() => { const p = document.getElementById('units-pill'); \
         return p.hidden ? 'hidden' : p.textContent + ' | ' + p.title; })()";
    b.wait_for(
        "live updates",
        "Number(document.getElementById('live').dataset.events) >= 1",
        t,
    );
    assert_eq!(b.eval(pill), "hidden");
    let divisible = c.write(
        "d.toml",
        "[[divisible]]\nname = \"d\"\nunits = 10\ncommand = \"echo {start} {end}\"\n",
    );
    c.ok(&["submit", divisible.to_str().expect("utf-8")]);
    let shown = b.wait_for(
        "the units pill",
        &format!("(() => {{ const s = {pill}; return s.startsWith('units 0/10') ? s : null; }})()"),
        t,
    );
    assert!(
        shown
            .as_str()
            .is_some_and(|s| s.contains("units of the 1 running divisible load")),
        "{shown}"
    );
    c.ok(&["cancel", "4"]);
    b.wait_for(
        "the units pill hidden once the load ended",
        &format!("{pill} === 'hidden'"),
        t,
    );
}

/// The Users panel writes hours as `hetsched usage` does: two decimals, three significant
/// digits below 0.01, `<0.0001` below a ten-thousandth of an hour. Before, the panel wrote
/// `0.00` for the `0.00169` core-hours the CLI printed for the same account.
#[test]
fn the_users_panel_writes_hours_as_hetsched_usage_does() {
    let Some((_c, mut b)) = three_waiting_jobs_shown("dashboard-usage-hours") else {
        return;
    };
    let shown = b.eval("[0, 12.345, 0.0339, 0.0016853, 0.0001, 1.2345678e-5, 1e-13].map(hours)");
    assert_eq!(
        shown,
        serde_json::json!([
            "0.00", "12.35", "0.03", "0.00169", "0.000100", "<0.0001", "<0.0001"
        ])
    );
}
