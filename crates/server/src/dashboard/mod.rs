//! The web dashboard, served at `/` by the server's HTTP listener (`http_listen`): jobs with their
//! progress, a job's tasks (paged, filtered by state, with links to their output), nodes by rack
//! with the cores and GPUs in use (a card, clicked, shows the node's detail), live charts (tasks by state over time, dispatch and
//! completion rates, per-node load, GPU utilisation) fed by Server-Sent Events, and the users
//! (`/api/users`: shares, caps, what their running work holds, fair-share usage, jobs pending
//! and running — [`State::users_overview`]) with their accounts (`/api/usage?since=&until=`:
//! core-, GPU- and memory-hours per owner, the capacity and its utilisation, the JSON of
//! `hetsched usage --output json`, [`crate::accounting::Summary`]), and the stream topologies
//! (`/api/topologies`, `/api/topology?name=`: the documents of `hetsched topology list|show
//! --output json`, [`State::topology_list`] and [`State::topology_show`] — every reader of the
//! dashboard sees every topology, as every user's `topology list` does; no worker's log).
//! Read-only.
//!
//! **Never open.** Every page and API call needs a token: `Authorization: Bearer TOKEN` (the client
//! token, the read-only token `DATA_DIR/read-token` written at first start, or a user's own token,
//! [`crate::users`]), or a session cookie. A user sees what the admin sees (the dashboard changes
//! nothing) but reads the task output of its own jobs only (the read-only token, which a
//! Prometheus scrape holds, reads none), and of the users and the accounts
//! its own row and the capacity only (the `Usage` RPC's rule, [`State::usage_for`]).
//! A browser gets the cookie from the login form (`POST /login` with the token), or from a one-time
//! login link: `POST /api/ticket` with a token returns a ticket valid once for 60 s, and
//! `GET /login?ticket=T` trades it for the cookie — so a link that leaks into a history or a proxy
//! log is worthless once used. Sessions live in memory (12 h; a restart logs everyone out); the
//! cookie is `HttpOnly; SameSite=Strict`. Anything else gets 401 (the login page).
//! Another site's page can neither sign a browser in nor out (login CSRF): `POST /login` and
//! `POST /logout` from it are refused ([`cross_site`]), and a login link opened from it — or
//! from a browser that does not say where it was opened ([`unsure_site`]) — asks for a click.
//!
//! **Sessions and tickets are bound to their token** ([`grants`]): each keeps the SHA-256 of
//! the token that made it (a session made from a ticket, the ticket's), and counts only while
//! that hash still names a caller: once a user's token is rotated (`hetsched user add NAME
//! --rotate`) or the user removed, its sessions and tickets answer 401 and are dropped. (The
//! client and read-only tokens change only with a restart, which ends every session anyway.)
//! They are kept by the SHA-256 of the cookie or ticket and looked up by it, the expired ones
//! dropped oldest first as calls come, and bounded: [`MAX_SESSIONS_PER_CALLER`] sessions and
//! [`MAX_TICKETS_PER_CALLER`] tickets per caller (a new one evicts the caller's oldest), and
//! [`MAX_TICKETS`] tickets in all (then `POST /api/ticket` answers 503 until some are used or
//! expire).
//!
//! **Scale.** Nothing is sent whole: jobs and tasks come in pages (the state's lock is held for one
//! page), the task filter scans a bounded number of tasks per call, and the event stream carries
//! only totals, per-node figures and the newest jobs' counts, so a 100,000-task job costs the
//! browser one page of rows and one small event per tick. The page never reloads itself.
//!
//! The page (`index.html`, `app.js`, `app.css`) and uPlot (`vendor/`, MIT, npm `uplot`) are
//! embedded in the binary; there is no build step.
//!
//! **Names and messages.** The script HTML-escapes every string of the server's it puts in the
//! page, and first escapes what the CLI's text output escapes (`\u{202e}`, `\u{1b}`): control
//! characters but newlines and the invisible formatting characters of
//! [`hetsched_core::text::hidden`]. HTML escaping leaves a bidi override as it is, and a `<bdi>`
//! would only keep it from reordering the text around it, not the name itself
//! (`job\u{202e}txt.exe` would still read `jobexe.txt`); escaping shows what the name holds, as
//! the CLI does. The class of characters is written into the script as it is served
//! ([`app_js`]), from the one list in `hetsched_core::text`.

use crate::convert::Wire;
use crate::logs::LogRelay;
use crate::metrics::Metrics;
use crate::state::State;
use crate::state::types::StateFilter;
use crate::users::{Caller, TokenIndex, token_hash};
use axum::body::Bytes;
use axum::http::{HeaderMap, HeaderValue, StatusCode, Uri, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use hetsched_proto as pb;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

mod grants;

use grants::{Grants, Hash};

/// The read-only token's file in a data directory.
pub const READ_TOKEN: &str = "read-token";
/// How long a session lasts.
const SESSION: Duration = Duration::from_secs(12 * 3600);
/// How long a login ticket is valid.
const TICKET: Duration = Duration::from_secs(60);
/// Most live sessions one caller holds (a user, the client token's admin, the read-only
/// token): a new login evicts the caller's oldest session.
pub const MAX_SESSIONS_PER_CALLER: usize = 64;
/// Most live sessions in all: every caller's bound (a session of a removed user or a replaced
/// token counts until it is next presented or expires). A login past it answers 503.
const MAX_SESSIONS: usize = MAX_SESSIONS_PER_CALLER * (crate::users::MAX_USERS + 2);
/// Most unused login tickets one caller holds: a new one evicts the caller's oldest.
pub const MAX_TICKETS_PER_CALLER: usize = 16;
/// Most unused login tickets in all: `POST /api/ticket` past it answers 503.
pub const MAX_TICKETS: usize = 4096;
/// The session cookie's name.
const COOKIE: &str = "hetsched_session";
/// Most tasks one filtered listing call scans.
const SCAN_LIMIT: u64 = 100_000;
/// Tasks a filtered listing reads per page of the state.
const SCAN_CHUNK: u32 = 1000;
/// Most rows a page returns.
const MAX_ROWS: u32 = 1000;
/// Newest jobs whose counts ride on each event.
const EVENT_JOBS: u64 = 50;
/// Most event streams (`/api/events`) one caller holds open at once (a user, the client token's
/// admin, the read-only token: a browser tab each): one more answers 429. Each stream reads the
/// state under its lock twice a second.
pub const MAX_EVENT_STREAMS_PER_CALLER: usize = 8;
/// Most event streams open at once in all: one more answers 503.
pub const MAX_EVENT_STREAMS: usize = 64;

const INDEX: &str = include_str!("index.html");
const APP_JS: &str = include_str!("app.js");

/// The character class of `app.js` that the server fills as it serves the script.
const ESCAPED_PLACEHOLDER: &str = "/[__ESCAPED__]/gu";

/// `app.js` as served: its [`ESCAPED_PLACEHOLDER`] class filled with the characters the CLI
/// escapes ([`hetsched_core::text::escaped_class`]), so that the page escapes the same ones.
fn app_js() -> &'static str {
    static SERVED: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
        let class = format!("/[{}]/gu", hetsched_core::text::escaped_class());
        APP_JS.replacen(ESCAPED_PLACEHOLDER, &class, 1)
    });
    &SERVED
}
const APP_CSS: &str = include_str!("app.css");
const UPLOT_JS: &[u8] = include_bytes!("vendor/uPlot.iife.min.js");
const UPLOT_CSS: &[u8] = include_bytes!("vendor/uPlot.min.css");

/// What the dashboard's handlers share.
pub struct Dashboard {
    state: Arc<Mutex<State>>,
    metrics: Arc<Metrics>,
    relay: Arc<LogRelay>,
    /// `Bearer …` of the client token and of the read-only token.
    tokens: [String; 2],
    /// The SHA-256 of the client token and of the read-only token: the credentials their
    /// sessions and tickets are bound to.
    token_hashes: [Hash; 2],
    /// Users' tokens by hash (shared with the state, [`crate::users`]).
    users: TokenIndex,
    /// Sessions by the SHA-256 of their cookie, each bound to the token that opened it.
    sessions: Mutex<Grants>,
    /// Unused login tickets by their SHA-256, each bound to the token that asked for it.
    tickets: Mutex<Grants>,
    /// `; Secure` when the listener speaks HTTPS (the browser then never sends the cookie in
    /// clear), else empty.
    secure: &'static str,
    tick: Duration,
    /// Open event streams by caller (name), bounded ([`MAX_EVENT_STREAMS`],
    /// [`MAX_EVENT_STREAMS_PER_CALLER`]): each holds an [`EventSlot`] until its client goes.
    streams: Mutex<std::collections::HashMap<Arc<str>, usize>>,
    /// A read-only store connection (opened on first use): finished jobs' task pages are read
    /// through it without the state's lock.
    reader: std::sync::OnceLock<Option<Arc<crate::store::StoreReader>>>,
}

/// Reads `DATA_DIR/read-token`, creating it (256 random bits in hex, mode 0600) on first start
/// or when empty; a kept one open to others is made 0600 again, and one shorter than
/// `datadir::MIN_TOKEN_CHARS` is refused. Never through a symbolic link.
pub fn read_token(data_dir: &Path) -> std::io::Result<String> {
    use std::io::{Read, Write};
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let path = data_dir.join(READ_TOKEN);
    let no_follow = nix::fcntl::OFlag::O_NOFOLLOW.bits();
    match std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(no_follow)
        .open(&path)
    {
        Ok(mut f) => {
            let mut t = String::new();
            f.read_to_string(&mut t)?;
            // The server's own file is made private; another user's is only warned about.
            crate::datadir::keep_private(&f, &path, "the read-only token file", true)?;
            if !t.trim().is_empty() {
                // A hand-written short one is refused, as the other tokens are.
                if let Some(why) = crate::datadir::weak_token(t.trim()) {
                    return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, why));
                }
                return Ok(t.trim().to_string());
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    let token = random_hex();
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .custom_flags(no_follow)
        .open(&path)?;
    // `mode` applies to a file created now only: an empty one found here keeps its own.
    f.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    f.write_all(token.as_bytes())?;
    f.sync_all()?;
    Ok(token)
}

fn random_hex() -> String {
    let a: u128 = rand::random();
    let b: u128 = rand::random();
    format!("{a:032x}{b:032x}")
}

/// The token of an `Authorization` value of the Bearer scheme: `hetsched_proto::bearer_token`,
/// the one reading gRPC's token check shares (the scheme in any case, RFC 7235). Every route
/// that reads the header (the API, the page, `/metrics`, `POST /api/ticket`) goes through it.
fn bearer_token(value: &str) -> Option<&str> {
    pb::bearer_token(value)
}

fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Whether a request that signs in or out comes from a page of another site (a form or a
/// script there): the browser says so in `Sec-Fetch-Site` (anything but `same-origin`, or
/// `none` — typed, a bookmark, a program opening the URL) or, where it sends no such header,
/// in an `Origin` that is not this listener's own (`null` included). A request with neither
/// comes from no browser's page (curl, a script): nothing to forge then.
fn cross_site(headers: &HeaderMap) -> bool {
    let text = |name| headers.get(name).map(|v| v.to_str().unwrap_or("?"));
    if let Some(site) = text("sec-fetch-site") {
        return !matches!(site, "same-origin" | "none");
    }
    match text(header::ORIGIN.as_str()) {
        None => false,
        Some(origin) => {
            let at = origin
                .strip_prefix("https://")
                .or_else(|| origin.strip_prefix("http://"));
            at.is_none() || at != text(header::HOST.as_str())
        }
    }
}

/// Whether a navigation is a browser's that does not say which site it comes from: browsers
/// send `Sec-Fetch-Site` only to HTTPS and loopback addresses, so over plain HTTP to another
/// host a link on another site's page would look typed. Every browser's navigation carries
/// `Upgrade-Insecure-Requests`, which a program fetching a login link (curl, a script) does not.
fn unsure_site(headers: &HeaderMap) -> bool {
    !headers.contains_key("sec-fetch-site") && headers.contains_key("upgrade-insecure-requests")
}

/// The answer to a sign-in or sign-out from another site's page: nothing changes.
fn cross_site_refused(what: &str) -> Response {
    login_page(
        StatusCode::FORBIDDEN,
        &format!(
            "Refused: that {what} came from another site's page. Sign in here, with this form."
        ),
    )
}

/// A page asking to go on with the login link `ticket` (a navigation from another site's
/// page): its button posts the ticket from this page, so another site cannot sign a browser in
/// under a ticket of its own without the person's click here. `ticket` is hex (checked); `opened`
/// says what is known of where the link was opened (a sentence, no markup).
fn ticket_page(ticket: &str, opened: &str) -> Response {
    let body = format!(
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>hetsched — sign in</title>\
         <style>body{{font:15px system-ui,sans-serif;margin:15vh auto;max-width:28em;color:#223}}\
         button{{padding:.5em 1.2em;font:inherit}}</style></head><body><h1>hetsched</h1>\
         <p>{opened} Sign in to this dashboard with it only \
         if you asked for it yourself: whoever made the link is whom you will act as.</p>\
         <form method=\"post\" action=\"/login\"><input type=\"hidden\" name=\"ticket\" \
         value=\"{ticket}\"><button type=\"submit\">Sign in with this link</button></form>\
         </body></html>"
    );
    (
        StatusCode::OK,
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CACHE_CONTROL, "no-store"),
            (header::X_FRAME_OPTIONS, "DENY"),
        ],
        body,
    )
        .into_response()
}

/// The query string's `key`, percent-decoded.
fn query(uri: &Uri, key: &str) -> Option<String> {
    form_value(uri.query()?, key)
}

/// `key`'s value in an `application/x-www-form-urlencoded` string.
fn form_value(body: &str, key: &str) -> Option<String> {
    body.split('&').find_map(|pair| {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        (k == key).then(|| percent_decode(v))
    })
}

fn percent_decode(s: &str) -> String {
    let hex = |c: u8| (c as char).to_digit(16);
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < b.len() => match (hex(b[i + 1]), hex(b[i + 2])) {
                (Some(h), Some(l)) => {
                    out.push((h * 16 + l) as u8);
                    i += 2;
                }
                _ => out.push(b'%'),
            },
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `key`'s value as a number (`None`: not given, or empty); an error naming `key` when it is
/// not one, which the API answers 400 (a filter dropped silently would answer another question).
fn num<T: std::str::FromStr>(uri: &Uri, key: &str) -> Result<Option<T>, String> {
    match query(uri, key) {
        None => Ok(None),
        Some(v) if v.is_empty() => Ok(None),
        Some(v) => v.parse().map(Some).map_err(|_| {
            format!(
                "{key}: `{}` is not a number of the right size (a whole number, at least 0)",
                hetsched_core::text::clip(&v)
            )
        }),
    }
}

/// The page size `limit` asks for: 1 to [`MAX_ROWS`], 100 when not given.
fn limit_of(uri: &Uri) -> Result<u32, String> {
    match num::<u32>(uri, "limit")? {
        None => Ok(100),
        Some(0) => Err(format!("limit: at least 1 (at most {MAX_ROWS})")),
        Some(n) => Ok(n.min(MAX_ROWS)),
    }
}

/// Answers 400 with `e` (a parameter's error, naming it).
fn bad_parameter(e: String) -> Response {
    (StatusCode::BAD_REQUEST, e).into_response()
}

/// Where `/api/log` reads and how much: `offset` (bytes from the start of the output; negative:
/// that many before its end — the `ReadLog` call's own rule) and `limit` (1 to
/// [`crate::logs::MAX_PAGE`]). By default the last MiB: what a person looks at first. The error
/// names the parameter.
fn log_span(uri: &Uri) -> Result<(i64, u32), String> {
    let max = crate::logs::MAX_PAGE;
    let offset = match query(uri, "offset").filter(|v| !v.is_empty()) {
        None => -i64::from(max),
        Some(v) => v.parse::<i64>().map_err(|_| {
            format!(
                "offset: `{}` is not a whole number (bytes from the start; negative: from the end)",
                hetsched_core::text::clip(&v)
            )
        })?,
    };
    let limit = match num::<u32>(uri, "limit")? {
        None => max,
        Some(0) => return Err(format!("limit: at least 1 byte (at most {max})")),
        Some(n) => n.min(max),
    };
    Ok((offset, limit))
}

/// Says where a page of a task's output lies in the whole (see [`log_page`]).
const LOG_OFFSET: &str = "x-hetsched-log-offset";
/// See [`LOG_OFFSET`].
const LOG_SIZE: &str = "x-hetsched-log-size";
/// See [`LOG_OFFSET`].
const LOG_TRUNCATED: &str = "x-hetsched-truncated";

/// `/api/log`'s answer: the bytes read, as they are — nothing at all when the task printed
/// nothing on the stream (as `hetsched log` prints nothing: a script reads the output, not a
/// note about it; the page says what an empty tab means) — with where they lie in the whole:
/// `X-Hetsched-Log-Offset` (where the body starts), `X-Hetsched-Log-Size` (the whole output's
/// size when it was read) and `X-Hetsched-Truncated` (`true` when the body is not the whole
/// output: a page at most a MiB long; the rest is read with `offset` and `limit`).
fn log_page(r: pb::ReadLogReply) -> Response {
    let end = r.offset.saturating_add(r.data.len() as u64);
    let truncated = r.offset > 0 || end < r.size;
    let mut resp = (
        [
            (header::CONTENT_TYPE, "text/plain; charset=utf-8"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        r.data,
    )
        .into_response();
    let h = resp.headers_mut();
    h.insert(LOG_OFFSET, HeaderValue::from(r.offset));
    h.insert(LOG_SIZE, HeaderValue::from(r.size));
    h.insert(
        LOG_TRUNCATED,
        HeaderValue::from_static(if truncated { "true" } else { "false" }),
    );
    resp
}

/// A refused `/api/log` in the status a program can act on: 400 for a task named in no form
/// the job knows (`task=yes:abc`, naming the parameter, as every 400 of the API does), 403 for
/// another user's job, 404 for what does not exist or has no output (no such job, task or
/// attempt; a task that has not run, or whose stream is discarded; an agent that serves no
/// output), 429 when the caller has too many calls in flight, 503 when the agent holding the
/// output cannot be reached now (it left, died, or does not answer: try again once it is back).
fn log_refusal(s: &tonic::Status) -> Response {
    use tonic::Code;
    let message = s.message();
    let (code, message) = match s.code() {
        Code::InvalidArgument if message.starts_with("task") => {
            (StatusCode::BAD_REQUEST, message.to_string())
        }
        Code::InvalidArgument => (StatusCode::BAD_REQUEST, format!("task: {message}")),
        Code::PermissionDenied => (StatusCode::FORBIDDEN, message.to_string()),
        Code::NotFound | Code::FailedPrecondition | Code::OutOfRange => {
            (StatusCode::NOT_FOUND, message.to_string())
        }
        Code::ResourceExhausted => (StatusCode::TOO_MANY_REQUESTS, message.to_string()),
        Code::Unavailable | Code::DeadlineExceeded => {
            (StatusCode::SERVICE_UNAVAILABLE, message.to_string())
        }
        _ => (StatusCode::INTERNAL_SERVER_ERROR, message.to_string()),
    };
    refused(code, message)
}

/// Days `/api/usage` covers when `since` is not given: the last 7, `until` included.
const USAGE_DAYS: u32 = 7;

/// `/api/usage`'s span: `since` and `until` (each `YYYY-MM-DD`, `today` or `Nd`; `until`
/// today, `since` [`USAGE_DAYS`] days to `until` when not given), bounded as the `Usage` RPC's
/// ([`crate::accounting::check_span`]), and `by_day` (`true`/`1` or `false`/`0`). The error
/// names the parameter.
fn usage_span(uri: &Uri, today: u32) -> Result<(u32, u32, bool), String> {
    let day = |key: &str| {
        query(uri, key)
            .map(|v| crate::accounting::parse_day(&v, today).map_err(|e| format!("{key}: {e}")))
            .transpose()
    };
    let until = day("until")?.unwrap_or(today);
    let since = day("since")?.unwrap_or(until.saturating_sub(USAGE_DAYS - 1));
    crate::accounting::check_span(since, until, ["since", "until"])?;
    let by_day = match query(uri, "by_day").as_deref() {
        None | Some("false" | "0") => false,
        Some("true" | "1") => true,
        Some(other) => {
            return Err(format!(
                "by_day: `{}` is not true, false, 1 or 0",
                hetsched_core::text::clip(other)
            ));
        }
    };
    Ok((since, until, by_day))
}

/// `/api/topology`'s `name`: given, not empty, and at most
/// [`MAX_NAME`](crate::jobs::topology::MAX_NAME) bytes (a submission refuses a longer one, so
/// no topology has it). The error names the parameter.
fn topology_name(uri: &Uri) -> Result<String, String> {
    use crate::jobs::topology::MAX_NAME;
    match query(uri, "name") {
        None => Err(
            "name: missing: ask /api/topology?name=NAME (the names are in \
                     /api/topologies)"
                .into(),
        ),
        Some(n) if n.is_empty() => Err("name: empty: ask /api/topology?name=NAME".into()),
        Some(n) if n.len() > MAX_NAME => Err(format!(
            "name: {} bytes long; a topology's name is at most {MAX_NAME} bytes",
            n.len()
        )),
        Some(n) => Ok(n),
    }
}

/// A refused request: `code` with `message` as plain text (never sniffed as a page, though it
/// may repeat what the request said: the listener marks every response `nosniff`,
/// [`crate::http`]).
fn refused(code: StatusCode, message: String) -> Response {
    (
        code,
        [
            (header::CONTENT_TYPE, "text/plain; charset=utf-8"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        message,
    )
        .into_response()
}

fn json(value: &impl serde::Serialize) -> Response {
    match serde_json::to_string(value) {
        Ok(text) => (
            [
                (header::CONTENT_TYPE, "application/json"),
                (header::CACHE_CONTROL, "no-store"),
            ],
            text,
        )
            .into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    }
}

fn login_page(status: StatusCode, message: &str) -> Response {
    let body = format!(
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>hetsched — sign in</title>\
         <style>body{{font:15px system-ui,sans-serif;margin:15vh auto;max-width:28em;color:#223}}\
         input{{width:100%;padding:.5em;margin:.5em 0;font:inherit}}button{{padding:.5em 1.2em;font:inherit}}\
         .err{{color:#b00}}</style></head><body><h1>hetsched</h1>\
         <p>Sign in with your own token (the one <code>hetsched user add</code> gave you), the \
         client token (<code>DATA_DIR/token</code>) or the read-only token \
         (<code>DATA_DIR/read-token</code>).</p><p class=\"err\">{message}</p>\
         <form method=\"post\" action=\"/login\"><input type=\"password\" name=\"token\" \
         autocomplete=\"current-password\" placeholder=\"token\" autofocus>\
         <button type=\"submit\">Sign in</button></form></body></html>"
    );
    (
        status,
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        body,
    )
        .into_response()
}

/// The page's answer without a session: the sign-in form (401).
fn sign_in() -> Response {
    let mut r = login_page(StatusCode::UNAUTHORIZED, "");
    r.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        HeaderValue::from_static("Bearer realm=\"hetsched\""),
    );
    r
}

/// An API call's (and an asset's) answer without a valid token or session: 401 in words a
/// script reads, not the sign-in page's HTML (the page's own script goes to `/login` on the
/// status alone).
fn unauthorized() -> Response {
    (
        StatusCode::UNAUTHORIZED,
        [(header::WWW_AUTHENTICATE, "Bearer realm=\"hetsched\"")],
        "no valid token or session: send Authorization: Bearer TOKEN (DATA_DIR/token, \
         DATA_DIR/read-token or a user's own), or sign in at /login\n",
    )
        .into_response()
}

impl Dashboard {
    /// A dashboard over `state`, accepting the client token and the read-only token.
    pub fn new(
        state: Arc<Mutex<State>>,
        metrics: Arc<Metrics>,
        relay: Arc<LogRelay>,
        client_token: &str,
        read_token: &str,
    ) -> Self {
        let users = state.lock().map(|s| s.users_index()).unwrap_or_default();
        Self {
            state,
            metrics,
            relay,
            tokens: [pb::bearer(client_token), pb::bearer(read_token)],
            token_hashes: [token_hash(client_token), token_hash(read_token)],
            users,
            sessions: Mutex::new(Grants::new(SESSION, MAX_SESSIONS_PER_CALLER, MAX_SESSIONS)),
            tickets: Mutex::new(Grants::new(TICKET, MAX_TICKETS_PER_CALLER, MAX_TICKETS)),
            secure: "",
            tick: Duration::from_millis(500),
            streams: Mutex::new(std::collections::HashMap::new()),
            reader: std::sync::OnceLock::new(),
        }
    }

    /// Marks its session cookies `Secure`: the listener speaks HTTPS.
    pub fn secure_cookies(mut self) -> Self {
        self.secure = "; Secure";
        self
    }

    /// Who an `authorization` value (`Bearer …`) proves to be: the admin for the client token,
    /// the read-only viewer for the read-only token (it sees what the admin sees but reads no
    /// task output; the dashboard changes nothing either way), a user for its own token.
    fn caller_of(&self, bearer: &[u8]) -> Option<Caller> {
        // Both comparisons always run.
        let a = same(bearer, self.tokens[0].as_bytes());
        let b = same(bearer, self.tokens[1].as_bytes());
        if a {
            return Some(Caller::admin());
        }
        if b {
            return Some(Caller::read_only());
        }
        crate::users::user_of_bearer(&self.users, bearer)
    }

    /// Who a presented token is, and the SHA-256 of the token (the credential a session or a
    /// ticket it obtains is bound to).
    fn token_ok(&self, presented: &str) -> Option<(Caller, Hash)> {
        let token = presented.trim();
        let who = self.caller_of(pb::bearer(token).as_bytes())?;
        Some((who, token_hash(token)))
    }

    /// Who the token of SHA-256 `credential` is now (`None`: no one any more — a user's token
    /// was rotated or the user removed, so what it obtained ends).
    fn caller_of_credential(&self, credential: &Hash) -> Option<Caller> {
        // Both comparisons always run.
        let a = same(credential, &self.token_hashes[0]);
        let b = same(credential, &self.token_hashes[1]);
        if a {
            return Some(Caller::admin());
        }
        if b {
            return Some(Caller::read_only());
        }
        let users = self.users.read().ok()?;
        users.get(credential).map(|name| Caller::user(name))
    }

    fn session_of(headers: &HeaderMap) -> Option<String> {
        headers
            .get_all(header::COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(';'))
            .find_map(|c| {
                let (k, v) = c.trim().split_once('=')?;
                (k == COOKIE).then(|| v.to_string())
            })
    }

    /// Who a request's token or session says it comes from (`None`: neither is valid).
    fn authed(&self, headers: &HeaderMap) -> Option<Caller> {
        if let Some(who) = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(bearer_token)
            .and_then(|t| self.caller_of(pb::bearer(t).as_bytes()))
        {
            return Some(who);
        }
        let key = token_hash(&Self::session_of(headers)?);
        let credential = self.sessions().get(Instant::now(), &key)?;
        match self.caller_of_credential(&credential) {
            Some(who) => Some(who),
            None => {
                // Its token was rotated or its user removed: the session ends.
                self.sessions().remove(&key);
                None
            }
        }
    }

    fn sessions(&self) -> std::sync::MutexGuard<'_, Grants> {
        self.sessions.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn tickets(&self) -> std::sync::MutexGuard<'_, Grants> {
        self.tickets.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A new session for `who`, bound to `credential` (the SHA-256 of the token that proved
    /// it): the cookie, evicting `who`'s oldest session when it holds
    /// [`MAX_SESSIONS_PER_CALLER`].
    fn new_session(&self, who: Caller, credential: Hash) -> Response {
        let id = random_hex();
        let kept = self
            .sessions()
            .insert(Instant::now(), token_hash(&id), credential, who.name);
        if kept.is_err() {
            return refused(
                StatusCode::SERVICE_UNAVAILABLE,
                format!(
                    "the server holds {MAX_SESSIONS} dashboard sessions, the most it keeps: try \
                     again once some end (sign out: POST /logout), or send the token with each \
                     request (Authorization: Bearer)"
                ),
            );
        }
        let cookie = format!(
            "{COOKIE}={id}; Path=/; HttpOnly; SameSite=Strict; Max-Age={}{}",
            SESSION.as_secs(),
            self.secure
        );
        (
            StatusCode::SEE_OTHER,
            [
                (header::LOCATION, "/".to_string()),
                (header::SET_COOKIE, cookie),
                (header::CACHE_CONTROL, "no-store".to_string()),
            ],
        )
            .into_response()
    }

    /// Trades the login link's `ticket` for a session (once: the ticket is gone either way).
    fn redeem(&self, ticket: &str) -> Response {
        // Single use: removed whether or not its token still works.
        let credential = self.tickets().take(Instant::now(), &token_hash(ticket));
        // The session is bound to the token the ticket was asked for with.
        match credential.and_then(|c| Some((self.caller_of_credential(&c)?, c))) {
            Some((who, credential)) => self.new_session(who, credential),
            None => login_page(
                StatusCode::UNAUTHORIZED,
                "That login link has expired, was used already, or its token was replaced.",
            ),
        }
    }

    /// Runs `f` on the state under its lock, off the async workers.
    async fn read<T: Send + 'static>(
        self: &Arc<Self>,
        f: impl FnOnce(&State) -> T + Send + 'static,
    ) -> Option<T> {
        let me = self.clone();
        tokio::task::spawn_blocking(move || me.state.lock().ok().map(|s| f(&s)))
            .await
            .ok()
            .flatten()
    }

    /// A slot for one more event stream of `who`, or the refusal: 429 past
    /// [`MAX_EVENT_STREAMS_PER_CALLER`] of its own, 503 past [`MAX_EVENT_STREAMS`] in all.
    fn event_slot(self: &Arc<Self>, who: &Caller) -> Result<EventSlot, Box<Response>> {
        let mut open = self.streams.lock().unwrap_or_else(|p| p.into_inner());
        let mine = open.get(&who.name).copied().unwrap_or(0);
        if mine >= MAX_EVENT_STREAMS_PER_CALLER {
            return Err(Box::new(refused(
                StatusCode::TOO_MANY_REQUESTS,
                format!(
                    "{} already open under these credentials, the most one caller holds: close \
                     a dashboard tab (its live updates end with it), or try again once one has \
                     gone",
                    hetsched_core::text::count(MAX_EVENT_STREAMS_PER_CALLER as u64, "event stream")
                ),
            )));
        }
        if open.values().sum::<usize>() >= MAX_EVENT_STREAMS {
            let mut r = refused(
                StatusCode::SERVICE_UNAVAILABLE,
                format!(
                    "the server holds {MAX_EVENT_STREAMS} event streams open, the most it keeps: \
                     try again once some dashboard tabs have closed (the JSON API answers \
                     meanwhile)"
                ),
            );
            r.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(10u32));
            return Err(Box::new(r));
        }
        *open.entry(who.name.clone()).or_insert(0) += 1;
        Ok(EventSlot {
            d: self.clone(),
            who: who.name.clone(),
        })
    }

    /// One event of the live stream.
    fn snapshot(&self, s: &State) -> serde_json::Value {
        let counts = s.task_counts();
        // A divisible load's units, which `counts` leaves out: the header counts them apart.
        let units = s.running_units();
        // `nodes`, as before, are those `hetsched nodes` lists; of the nodes whose agents left
        // (automatic allocation leaves many behind) only their number goes out at every tick,
        // and the page asks `/api/nodes?all=1` for them while a person wants them shown.
        let (left, nodes): (Vec<_>, Vec<_>) = s
            .nodes(true)
            .nodes
            .into_iter()
            .partition(|n| !n.left.is_empty());
        let n = s.job_count();
        let from = n.saturating_sub(EVENT_JOBS) + 1;
        let jobs = s.jobs_page(from, EVENT_JOBS as u32).jobs;
        serde_json::json!({
            "t": crate::state::now_ns() as f64 / 1e9,
            "counts": counts,
            "units": {"jobs": units.jobs, "done": units.done, "units": units.units},
            "dispatched": self.metrics.dispatched_total(),
            "jobs": jobs.iter().map(|j| serde_json::json!({
                "id": j.id, "state": j.state, "tasks": j.tasks, "counts": j.counts,
                "name": j.name, "waiting": j.waiting, "held": j.held, "deferred": j.deferred,
                "owner": j.owner,
                // The job's title counts tasks, instances or units by it.
                "kind": j.kind,
                // The row's hover says why it waits, live as on the first load.
                "pending_reason": j.pending_reason,
            })).collect::<Vec<_>>(),
            "nodes": nodes.iter().map(node_event).collect::<Vec<_>>(),
            "nodes_left": left.len(),
        })
    }
}

/// One node in an event of the live stream.
fn node_event(n: &pb::NodeInfo) -> serde_json::Value {
    serde_json::json!({
        "name": n.name, "rack": n.rack, "alive": n.alive, "running": n.running,
        "cores": n.cores, "free_cores": n.free_cores, "gpus": n.accelerators.len(),
        "free_gpus": n.free_gpus, "drained": n.drained, "draining": n.draining,
        "drain_reason": n.drain_reason,
        "attributes": n.attributes, "time_left_ms": n.time_left_ms,
        "returning_ms": n.returning_ms,
        "held_for": n.held_for,
        // The open node detail's state line follows these, in `hetsched nodes`' words.
        "left": n.left, "stopping": n.stopping,
        "gpu_util": if n.gpus.is_empty() { serde_json::Value::Null } else {
            serde_json::json!(n.gpus.iter().map(|g| f64::from(g.percent)).sum::<f64>() / n.gpus.len() as f64)
        },
    })
}

/// One open event stream of a caller, counted until it is dropped: when its stream ends (its
/// client went away: the next event cannot be sent) or the server stops.
struct EventSlot {
    d: Arc<Dashboard>,
    who: Arc<str>,
}

impl Drop for EventSlot {
    fn drop(&mut self) {
        let mut open = self.d.streams.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = open.get_mut(&self.who) {
            *n -= 1;
            if *n == 0 {
                open.remove(&self.who);
            }
        }
    }
}

/// `routes` (`/metrics`) behind the admin's or the read-only credentials (a token or a
/// session): a request without them gets `401` with `WWW-Authenticate: Bearer` and a one-line
/// text body (for programs such as Prometheus, which are no browsers to show the login page to);
/// a user's gets `403`, since the metrics carry every user's accounts and caps, and a user sees
/// its own only (`/api/usage`, `/api/users`).
pub fn guarded(d: Arc<Dashboard>, routes: axum::Router) -> axum::Router {
    routes.layer(axum::middleware::from_fn(
        move |req: axum::extract::Request, next: axum::middleware::Next| {
            let d = d.clone();
            async move {
                let who = d.authed(req.headers());
                if who.as_ref().is_some_and(|w| w.admin) {
                    next.run(req).await
                } else if who.is_some() {
                    (
                        StatusCode::FORBIDDEN,
                        "the metrics carry every user's accounts: scrape with DATA_DIR/read-token \
                         (or DATA_DIR/token); a user reads its own in /api/usage\n",
                    )
                        .into_response()
                } else {
                    (
                        StatusCode::UNAUTHORIZED,
                        [(header::WWW_AUTHENTICATE, "Bearer realm=\"hetsched\"")],
                        "no valid token: send Authorization: Bearer TOKEN (DATA_DIR/read-token or DATA_DIR/token)\n",
                    )
                        .into_response()
                }
            }
        },
    ))
}

/// The dashboard's routes, to merge into the HTTP listener's router.
pub fn router(d: Arc<Dashboard>) -> axum::Router {
    let guard = |d: &Arc<Dashboard>, headers: &HeaderMap| d.authed(headers).is_some();
    let page = {
        let d = d.clone();
        move |headers: HeaderMap| async move {
            if !guard(&d, &headers) {
                return sign_in();
            }
            (
                [
                    (header::CONTENT_TYPE, "text/html; charset=utf-8"),
                    (header::CACHE_CONTROL, "no-store"),
                    (header::X_FRAME_OPTIONS, "DENY"),
                    (
                        header::CONTENT_SECURITY_POLICY,
                        "default-src 'self'; frame-ancestors 'none'",
                    ),
                ],
                INDEX,
            )
                .into_response()
        }
    };
    let asset = |d: Arc<Dashboard>, ctype: &'static str, body: &'static [u8]| {
        move |headers: HeaderMap| async move {
            if d.authed(&headers).is_none() {
                return unauthorized();
            }
            ([(header::CONTENT_TYPE, ctype)], body).into_response()
        }
    };
    let login_get = {
        let d = d.clone();
        move |headers: HeaderMap, uri: Uri| async move {
            let Some(ticket) = query(&uri, "ticket") else {
                return login_page(StatusCode::OK, "");
            };
            let opened = if cross_site(&headers) {
                Some("This login link was opened from another site.")
            } else if unsure_site(&headers) {
                Some(
                    "This browser does not say which site opened this login link (it does not \
                     over plain HTTP to another machine).",
                )
            } else {
                None
            };
            if let Some(opened) = opened {
                // Not used yet: the person confirms on this site's page (a POST from it).
                if !ticket.is_empty()
                    && ticket.len() <= 64
                    && ticket.bytes().all(|b| b.is_ascii_hexdigit())
                {
                    return ticket_page(&ticket, opened);
                }
                return login_page(StatusCode::UNAUTHORIZED, "That is no login link.");
            }
            d.redeem(&ticket)
        }
    };
    let login_post = {
        let d = d.clone();
        move |headers: HeaderMap, body: Bytes| async move {
            // Login CSRF: another site's form would sign this browser in as the token (or the
            // ticket) of that site's choosing.
            if cross_site(&headers) {
                return cross_site_refused("sign-in");
            }
            let body = String::from_utf8_lossy(&body).into_owned();
            if let Some(ticket) = form_value(&body, "ticket") {
                return d.redeem(&ticket);
            }
            match form_value(&body, "token") {
                Some(t) => match d.token_ok(&t) {
                    Some((who, credential)) => d.new_session(who, credential),
                    None => login_page(StatusCode::UNAUTHORIZED, "Wrong token."),
                },
                None => login_page(StatusCode::UNAUTHORIZED, "Wrong token."),
            }
        }
    };
    // Signing out changes what the browser holds: a POST from this site's page only (the
    // page's button); a GET shows that button.
    let logout_get = move || async move {
        (
            [
                (header::CONTENT_TYPE, "text/html; charset=utf-8"),
                (header::CACHE_CONTROL, "no-store"),
                (header::X_FRAME_OPTIONS, "DENY"),
            ],
            "<!doctype html><html><head><meta charset=\"utf-8\"><title>hetsched — sign out</title>\
             </head><body><form method=\"post\" action=\"/logout\">\
             <button type=\"submit\">Sign out</button></form></body></html>",
        )
            .into_response()
    };
    let logout = {
        let d = d.clone();
        move |headers: HeaderMap| async move {
            if cross_site(&headers) {
                return cross_site_refused("sign-out");
            }
            if let Some(id) = Dashboard::session_of(&headers) {
                d.sessions().remove(&token_hash(&id));
            }
            (
                StatusCode::SEE_OTHER,
                [
                    (header::LOCATION, "/login".to_string()),
                    (
                        header::SET_COOKIE,
                        format!(
                            "{COOKIE}=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0{}",
                            d.secure
                        ),
                    ),
                ],
            )
                .into_response()
        }
    };
    let ticket = {
        let d = d.clone();
        move |headers: HeaderMap| async move {
            // Only a token (not a session) may mint a login link.
            let who = headers
                .get(header::AUTHORIZATION)
                .and_then(|v| v.to_str().ok())
                .and_then(bearer_token)
                .and_then(|t| d.token_ok(t));
            let Some((who, credential)) = who else {
                return unauthorized();
            };
            let t = random_hex();
            // A caller holding MAX_TICKETS_PER_CALLER loses its oldest.
            let kept = d
                .tickets()
                .insert(Instant::now(), token_hash(&t), credential, who.name);
            if kept.is_err() {
                let mut r = refused(
                    StatusCode::SERVICE_UNAVAILABLE,
                    format!(
                        "{MAX_TICKETS} login links are waiting to be used, the most the server \
                         keeps: try again within {} s, once the oldest have expired",
                        TICKET.as_secs()
                    ),
                );
                r.headers_mut()
                    .insert(header::RETRY_AFTER, HeaderValue::from(TICKET.as_secs()));
                return r;
            }
            json(&serde_json::json!({ "ticket": t, "expires_in_s": TICKET.as_secs() }))
        }
    };
    let jobs = {
        let d = d.clone();
        move |headers: HeaderMap, uri: Uri| async move {
            if d.authed(&headers).is_none() {
                return unauthorized();
            }
            let (cursor, limit) = match (num(&uri, "cursor"), limit_of(&uri)) {
                (Ok(c), Ok(l)) => (c.unwrap_or(0u64), l),
                (Err(e), _) | (_, Err(e)) => return bad_parameter(e),
            };
            match d
                .read(move |s| {
                    (
                        s.jobs_page(cursor, limit),
                        s.job_count(),
                        s.purged_job_count(),
                    )
                })
                .await
            {
                // `total`: jobs ever submitted (ids run 1 to it); `purged`: how many of them are
                // gone.
                // Each job as `hetsched jobs --output json` writes it (`null` where its table
                // shows `-`): the one builder of both.
                Some((page, total, purged)) => json(&serde_json::json!({
                    "jobs": page.jobs.iter().map(crate::json::job).collect::<Vec<_>>(),
                    "next_cursor": page.next_cursor, "total": total, "purged": purged,
                })),
                None => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
            }
        }
    };
    let job = {
        let d = d.clone();
        move |headers: HeaderMap, uri: Uri| async move {
            if d.authed(&headers).is_none() {
                return unauthorized();
            }
            let id: u64 = match num(&uri, "id") {
                Ok(Some(id)) => id,
                Ok(None) => return bad_parameter("id: give the job's id (`?id=7`)".into()),
                Err(e) => return bad_parameter(e),
            };
            match d
                .read(move |s| s.job(id).map_err(|e| s.explain(e).to_string()))
                .await
            {
                // As `hetsched job N --output json` writes it.
                Some(Ok(j)) => json(&crate::json::job(&j)),
                // The state's words: a purged job says it was purged, as `hetsched job` does.
                Some(Err(why)) => (StatusCode::NOT_FOUND, why).into_response(),
                None => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
            }
        }
    };
    let tasks = {
        let d = d.clone();
        move |headers: HeaderMap, uri: Uri| async move {
            let Some(who) = d.authed(&headers) else {
                return unauthorized();
            };
            let (job, cursor, limit) = match (num(&uri, "job"), num(&uri, "cursor"), limit_of(&uri))
            {
                (Ok(j), Ok(c), Ok(l)) => (j.unwrap_or(0u64), c.unwrap_or(0u64), l),
                (Err(e), _, _) | (_, Err(e), _) | (_, _, Err(e)) => return bad_parameter(e),
            };
            let state = query(&uri, "state").filter(|s| !s.is_empty() && s != "all");
            // A state no task has is the request's mistake, as another bad parameter is.
            if let Some(s) = &state
                && let Err(e) = crate::state::types::StateFilter::parse(std::slice::from_ref(s))
            {
                return bad_parameter(format!("state: {e}"));
            }
            let relay = d.relay.clone();
            let page = filtered_tasks(&d, job, cursor, limit, state.as_deref()).await;
            match page {
                Some(Ok(mut p)) => {
                    let ran: Vec<(u64, String)> = p
                        .tasks
                        .iter()
                        .filter(|t| t.attempt > 0)
                        .map(|t| (t.job_id, t.app.clone()))
                        .collect();
                    let own = d
                        .read(move |s| s.own_streams(&ran))
                        .await
                        .unwrap_or_default();
                    relay.fill_outputs(&mut p.tasks, &own);
                    let jobs = crate::service::owners_job_ids(&who, &p.tasks);
                    if !jobs.is_empty() {
                        let owners = d
                            .read(move |s| {
                                jobs.iter()
                                    .map(|&j| (j, s.owner_of(j).to_string()))
                                    .collect()
                            })
                            .await
                            .unwrap_or_default();
                        crate::service::hide_others_tasks(&who, &owners, &mut p.tasks);
                    }
                    // As `hetsched tasks --output json` writes them (`null` where its table
                    // shows `-`, each id also as `id_text`): the one builder of both. The next
                    // page's cursor travels as a string too: it is a task id.
                    let tasks: Vec<serde_json::Value> =
                        p.tasks.iter().map(crate::json::task).collect();
                    json(&serde_json::json!({
                        "tasks": tasks, "next_cursor": p.next_cursor,
                        "next_cursor_text": p.next_cursor.to_string(), "total": p.total,
                    }))
                }
                Some(Err(e)) => (StatusCode::NOT_FOUND, e).into_response(),
                None => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
            }
        }
    };
    let nodes = {
        let d = d.clone();
        move |headers: HeaderMap, uri: Uri| async move {
            if d.authed(&headers).is_none() {
                return unauthorized();
            }
            // `?all=1`: the nodes whose agents left too, as `hetsched nodes --all` lists them.
            let all = query(&uri, "all").is_some_and(|v| v == "1" || v == "true");
            match d.read(move |s| s.nodes(all)).await {
                // As `hetsched nodes --output json` writes them: the one builder of both.
                Some(n) => json(&n.nodes.iter().map(crate::json::node).collect::<Vec<_>>()),
                None => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
            }
        }
    };
    // Who the page is signed in as, so that it offers only what that caller may follow: the
    // read-only token reads no task output, and its page shows no links that would answer 403.
    let me = {
        let d = d.clone();
        move |headers: HeaderMap| async move {
            let Some(who) = d.authed(&headers) else {
                return unauthorized();
            };
            // The read-only token sees what the admin sees (`Caller::admin` is set for that)
            // but may change nothing: it is said to be no admin.
            let read_only = !who.reads_output();
            json(&serde_json::json!({
                "name": &*who.name,
                "admin": who.admin && !read_only,
                "read_only": read_only,
                "reads_output": who.reads_output(),
            }))
        }
    };
    let allocations = {
        let d = d.clone();
        move |headers: HeaderMap| async move {
            if d.authed(&headers).is_none() {
                return unauthorized();
            }
            match d.read(|s| s.allocation_queues()).await {
                Some(a) => json(&a.queues),
                None => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
            }
        }
    };
    let users = {
        let d = d.clone();
        move |headers: HeaderMap| async move {
            let Some(who) = d.authed(&headers) else {
                return unauthorized();
            };
            match d
                .read(move |s| (s.users_overview(&who), s.fair_share_half_life_ns()))
                .await
            {
                Some((users, half_life)) => json(&serde_json::json!({
                    "fair_share": half_life.map(|ns| serde_json::json!({ "half_life_s": ns / 1_000_000_000 })),
                    // In `hetsched user list --output json`'s words: the one builder of both.
                    "users": users
                        .into_iter()
                        .map(|u| crate::json::user(&u.into()))
                        .collect::<Vec<_>>(),
                })),
                None => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
            }
        }
    };
    let usage = {
        let d = d.clone();
        move |headers: HeaderMap, uri: Uri| async move {
            let Some(who) = d.authed(&headers) else {
                return unauthorized();
            };
            let (since, until, by_day) = match usage_span(&uri, crate::accounting::today()) {
                Ok(span) => span,
                Err(e) => return (StatusCode::BAD_REQUEST, e).into_response(),
            };
            // The `Usage` RPC's rule: the admin reads every owner's, a user its own.
            match d.read(move |s| s.usage_for(&who, since, until)).await {
                Some(Ok(rows)) => {
                    json(&crate::accounting::Summary::of(since, until, &rows).json(by_day))
                }
                Some(Err(e)) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
                None => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
            }
        }
    };
    // The stream topologies, as `hetsched topology list|show --output json` print them: the
    // state's own documents, whoever reads the dashboard.
    let topologies = {
        let d = d.clone();
        move |headers: HeaderMap| async move {
            if d.authed(&headers).is_none() {
                return unauthorized();
            }
            match d.read(|s| s.topology_list()).await {
                Some(list) => json(&list),
                None => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
            }
        }
    };
    let topology = {
        let d = d.clone();
        move |headers: HeaderMap, uri: Uri| async move {
            if d.authed(&headers).is_none() {
                return unauthorized();
            }
            let name = match topology_name(&uri) {
                Ok(name) => name,
                Err(e) => return refused(StatusCode::BAD_REQUEST, e),
            };
            match d.read(move |s| s.topology_show(&name)).await {
                Some(Ok(shown)) => json(&shown),
                Some(Err(crate::state::StateError::Topology(
                    crate::jobs::topology::TopologyError::NotFound(e),
                ))) => refused(StatusCode::NOT_FOUND, e),
                Some(Err(e)) => refused(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
                None => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
            }
        }
    };
    let log = {
        let d = d.clone();
        move |headers: HeaderMap, uri: Uri| async move {
            let Some(who) = d.authed(&headers) else {
                return unauthorized();
            };
            if !who.reads_output() {
                // The token monitoring holds reads no one's task output.
                return (
                    StatusCode::FORBIDDEN,
                    "the read-only token reads no task output: sign in with the client token or \
                     your own",
                )
                    .into_response();
            }
            let (job_id, attempt) = match (num(&uri, "job"), num(&uri, "attempt")) {
                (Ok(Some(j)), Ok(a)) => (j, a.unwrap_or(0)),
                (Ok(None), _) => return bad_parameter("job: give the job's id (`?job=7`)".into()),
                (Err(e), _) | (_, Err(e)) => return bad_parameter(e),
            };
            let Some(task) = query(&uri, "task").filter(|t| !t.is_empty()) else {
                return bad_parameter("task: give a task id or APP:INDEX (`&task=sim:3`)".into());
            };
            let stderr = match query(&uri, "stream").as_deref() {
                None | Some("" | "stdout") => false,
                Some("stderr") => true,
                Some(other) => {
                    return bad_parameter(format!(
                        "stream: `{}` is neither stdout nor stderr",
                        hetsched_core::text::clip(other)
                    ));
                }
            };
            let (offset, limit) = match log_span(&uri) {
                Ok(span) => span,
                Err(e) => return bad_parameter(e),
            };
            let req = pb::ReadLogRequest {
                job_id,
                task,
                stderr,
                attempt,
                offset,
                limit,
                follow: false,
            };
            // A user reads the logs of its own jobs only, as with `hetsched log`.
            match crate::logs::read_log(&d.state, &d.relay, req, &who).await {
                Ok(r) => log_page(r),
                Err(s) => log_refusal(&s),
            }
        }
    };
    let events = {
        let d = d.clone();
        move |headers: HeaderMap| async move {
            let Some(who) = d.authed(&headers) else {
                return unauthorized();
            };
            let slot = match d.event_slot(&who) {
                Ok(slot) => slot,
                Err(refusal) => return *refusal,
            };
            let (tx, rx) = tokio::sync::mpsc::channel::<Result<Event, std::convert::Infallible>>(4);
            let d = d.clone();
            tokio::spawn(async move {
                // Counted while this runs: dropped when the browser goes.
                let _slot = slot;
                let mut tick = tokio::time::interval(d.tick);
                loop {
                    tick.tick().await;
                    let me = d.clone();
                    let Some(snap) = d.read(move |s| me.snapshot(s)).await else {
                        break;
                    };
                    let event = Event::default().event("tick").data(snap.to_string());
                    if tx.send(Ok(event)).await.is_err() {
                        break; // the browser went away
                    }
                }
            });
            Sse::new(tokio_stream::wrappers::ReceiverStream::new(rx))
                .keep_alive(KeepAlive::default())
                .into_response()
        }
    };
    axum::Router::new()
        .route("/", get(page))
        .route("/login", get(login_get).post(login_post))
        .route("/logout", get(logout_get).post(logout))
        .route("/api/ticket", post(ticket))
        .route("/api/jobs", get(jobs))
        .route("/api/job", get(job))
        .route("/api/tasks", get(tasks))
        .route("/api/nodes", get(nodes))
        .route("/api/me", get(me))
        .route("/api/allocations", get(allocations))
        .route("/api/users", get(users))
        .route("/api/usage", get(usage))
        .route("/api/topologies", get(topologies))
        .route("/api/topology", get(topology))
        .route("/api/log", get(log))
        .route("/api/events", get(events))
        .route(
            "/assets/app.js",
            get(asset(d.clone(), "text/javascript", app_js().as_bytes())),
        )
        .route(
            "/assets/app.css",
            get(asset(d.clone(), "text/css", APP_CSS.as_bytes())),
        )
        .route(
            "/assets/uPlot.iife.min.js",
            get(asset(d.clone(), "text/javascript", UPLOT_JS)),
        )
        .route(
            "/assets/uPlot.min.css",
            get(asset(d.clone(), "text/css", UPLOT_CSS)),
        )
}

impl Dashboard {
    /// One page of `job`'s tasks from task id `cursor`: planned under the state's lock (held for
    /// this page only); a batch job's page is read from the store after the lock is released,
    /// filtered there by `states` (other pages come whole: the caller keeps what it wants).
    async fn tasks_page(
        self: &Arc<Self>,
        job: u64,
        cursor: u64,
        limit: u32,
        states: &StateFilter,
    ) -> Option<Result<pb::ListTasksReply, String>> {
        use crate::state::TasksListing;
        let states = states.clone();
        let plan = self
            .read(move |s| s.plan_tasks(job, cursor, limit, &states))
            .await?;
        let page = match plan {
            Err(e) => return Some(Err(e.to_string())),
            Ok(TasksListing::Ready(page)) => Ok(page),
            Ok(TasksListing::FromStore(stored)) => {
                let me = self.clone();
                let reader = match self.reader.get() {
                    Some(r) => r.clone(),
                    None => {
                        let r = self
                            .read(|s| s.store_reader().ok().flatten().map(Arc::new))
                            .await?;
                        self.reader.get_or_init(|| r).clone()
                    }
                };
                match reader {
                    Some(reader) => tokio::task::spawn_blocking(move || stored.read(&reader))
                        .await
                        .ok()?,
                    // A store in memory: read under the lock.
                    None => me.read(move |s| s.list_tasks(job, cursor, limit)).await?,
                }
            }
        };
        Some(page.map(Into::into).map_err(|e| e.to_string()))
    }
}

/// A page of `job`'s tasks (all when `state` is None, else those in `state`), from task id
/// `cursor`: scans at most [`SCAN_LIMIT`] tasks, one page of the state at a time (the state's
/// lock is taken per page, and a finished job's pages are read from the store without it), and
/// says where to go on.
async fn filtered_tasks(
    d: &Arc<Dashboard>,
    job: u64,
    cursor: u64,
    limit: u32,
    state: Option<&str>,
) -> Option<Result<pb::ListTasksReply, String>> {
    let Some(state) = state else {
        return d
            .tasks_page(job, cursor, limit, &StateFilter::default())
            .await;
    };
    Some(filter_pages(d, job, cursor, limit, state).await)
}

async fn filter_pages(
    d: &Arc<Dashboard>,
    job: u64,
    cursor: u64,
    limit: u32,
    state: &str,
) -> Result<pb::ListTasksReply, String> {
    // A batch job's store filters its rows (each page holds only matching tasks); pages of
    // other kinds are scanned here.
    let filter = StateFilter::parse(&[state.to_string()]).map_err(|e| e.to_string())?;
    // `total` is the listing's size before the filter, the number the same call without
    // `state` answers, whatever the job's kind and with or without `job`: a paging client
    // learns the end from `next_cursor` 0, and wants the size of what it pages through to stay
    // one figure as it switches filters. (How many match is known cheaply for a batch job
    // only — its store counts them — and would cost every other listing a scan of all its
    // tasks, which one call bounds to SCAN_LIMIT; so it is no part of the answer.)
    let total = d
        .tasks_page(job, cursor, 1, &StateFilter::default())
        .await
        .ok_or_else(|| "the server's state is unavailable".to_string())??
        .total;
    let mut out = Vec::new();
    let mut cursor = cursor;
    let mut scanned = 0u64;
    loop {
        let page = d
            .tasks_page(job, cursor, SCAN_CHUNK, &filter)
            .await
            .ok_or_else(|| "the server's state is unavailable".to_string())??;
        for (k, t) in page.tasks.into_iter().enumerate() {
            if out.len() as u32 >= limit || scanned >= SCAN_LIMIT {
                // Stopped inside this chunk: the cursor of its k-th task is where the chunk's
                // first k end (cursors are the listing's own, not task ids).
                let next = if k == 0 {
                    cursor
                } else {
                    d.tasks_page(job, cursor, k as u32, &filter)
                        .await
                        .ok_or_else(|| "the server's state is unavailable".to_string())??
                        .next_cursor
                };
                return Ok(pb::ListTasksReply {
                    tasks: out,
                    next_cursor: next,
                    total,
                });
            }
            scanned += 1;
            // As `hetsched tasks --state`: `pending` keeps a workflow's waiting and ready
            // instances too.
            if filter.admits(&t.state) {
                out.push(t);
            }
        }
        if page.next_cursor == 0 {
            return Ok(pb::ListTasksReply {
                tasks: out,
                next_cursor: 0,
                total,
            });
        }
        cursor = page.next_cursor;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hetsched_core::testkit::ScratchDir;

    /// Headers as a browser (or a program) sends them: `name: value` lines.
    fn headers(lines: &[&str]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for line in lines {
            let (k, v) = line.split_once(": ").expect("name: value");
            h.insert(
                header::HeaderName::from_bytes(k.as_bytes()).expect("name"),
                HeaderValue::from_str(v).expect("value"),
            );
        }
        h
    }

    /// The read-only token's file is private whatever was there before: one kept from an
    /// earlier start open to others is made 0600, and so is an empty one the server fills with
    /// a new token (`create` + `mode` leaves an existing file's mode as it was).
    #[test]
    fn the_read_only_token_file_is_made_private_when_kept_or_refilled() {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        let d = ScratchDir::new("dashboard", "read-token");
        let path = d.join(READ_TOKEN);
        let mode = || std::fs::metadata(&path).expect("meta").mode() & 0o777;
        let open = || {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).expect("chmod")
        };
        let t = read_token(&d).expect("created");
        assert_eq!(mode(), 0o600);
        open();
        assert_eq!(read_token(&d).expect("kept"), t);
        assert_eq!(mode(), 0o600, "a kept token file open to others");
        std::fs::write(&path, "").expect("emptied");
        open();
        let fresh = read_token(&d).expect("refilled");
        assert_ne!(fresh, t);
        assert_eq!(mode(), 0o600, "an empty file refilled with a new token");
    }

    #[test]
    fn a_browsers_navigation_that_does_not_say_its_site_is_unsure_and_a_programs_is_not() {
        // Chromium over plain HTTP to a host name that is not loopback: no Sec-Fetch-Site.
        let plain = ["Host: dash.example:7421", "Upgrade-Insecure-Requests: 1"];
        assert!(unsure_site(&headers(&plain)) && !cross_site(&headers(&plain)));
        let with_referer = [plain[0], plain[1], "Referer: http://evil.example/"];
        assert!(unsure_site(&headers(&with_referer)));
        // Where the browser says the site, that answers; a program (curl) says nothing.
        for site in ["none", "same-origin", "cross-site"] {
            let said = [plain[0], plain[1], &format!("Sec-Fetch-Site: {site}")];
            assert!(!unsure_site(&headers(&said)), "{site}");
        }
        assert!(!unsure_site(&headers(&["Host: dash.example:7421"])));
    }

    /// The script escapes in names and messages the characters the CLI escapes (a bidi override
    /// among them): the served script holds the class from `hetsched_core::text`, once, and no
    /// placeholder, which would escape the letters `_ E S C A P D` instead.
    #[test]
    fn the_served_script_escapes_the_characters_the_cli_escapes() {
        let class = hetsched_core::text::escaped_class();
        assert_eq!(APP_JS.matches(ESCAPED_PLACEHOLDER).count(), 1);
        assert!(APP_JS.contains(&format!("const ESCAPED = {ESCAPED_PLACEHOLDER};")));
        let served = app_js();
        assert!(
            served.contains(&format!("const ESCAPED = /[{class}]/gu;")),
            "{served}"
        );
        assert!(!served.contains("__ESCAPED__"));
        assert!(
            class.contains("\\u{202e}") && class.contains("\\u{b}-\\u{1f}"),
            "{class}"
        );
    }

    #[test]
    fn form_values_are_percent_decoded() {
        assert_eq!(
            form_value("a=1&token=ab%2Bc+d", "token").as_deref(),
            Some("ab+c d")
        );
        assert_eq!(form_value("token=", "token").as_deref(), Some(""));
        assert_eq!(form_value("x=1", "token"), None);
        assert_eq!(percent_decode("%zz%4"), "%zz%4");
    }

    #[test]
    fn a_topology_name_is_given_and_no_longer_than_a_submission_may_give() {
        use crate::jobs::topology::MAX_NAME;
        let name = |q: &str| topology_name(&format!("/api/topology?{q}").parse().expect("uri"));
        assert_eq!(name("name=wc%20live"), Ok("wc live".into()));
        assert_eq!(
            name(&format!("name={}", "a".repeat(MAX_NAME))).map(|n| n.len()),
            Ok(MAX_NAME)
        );
        assert!(name("").is_err_and(|e| e.starts_with("name: missing")));
        assert!(name("name=").is_err_and(|e| e.starts_with("name: empty")));
        assert_eq!(
            name(&format!("name={}", "a".repeat(MAX_NAME + 1))),
            Err(format!(
                "name: {} bytes long; a topology's name is at most {MAX_NAME} bytes",
                MAX_NAME + 1
            ))
        );
    }

    #[test]
    fn the_usage_span_is_the_last_7_days_unless_given() {
        let span = |q: &str| usage_span(&format!("/api/usage?{q}").parse().expect("uri"), 100);
        assert_eq!(span(""), Ok((94, 100, false)));
        assert_eq!(span("until=90d"), Ok((4, 10, false)));
        assert_eq!(span("since=today&by_day=true"), Ok((100, 100, true)));
        assert_eq!(
            span("until=3d&since=0d"),
            Err("since: 1970-04-11 is after until 1970-04-08".into())
        );
    }
}
