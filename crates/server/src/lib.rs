//! hetsched's server (resource manager): the gRPC API for agents and clients, the SQLite store, and
//! the scheduler loop that runs the core's batch policies on every agent heartbeat.
//!
//! - [`backoff`]: the failing-node back-off (consecutive start failures keep an application off
//!   a node for a while);
//! - [`config`]: the TOML configuration;
//! - [`dashboard`]: the web dashboard at `/` of the HTTP listener (token or session, read-only,
//!   live charts over Server-Sent Events);
//! - [`jobs::divisible`]: divisible jobs (`[[divisible]]`, spec 03), a job kind: the one-port
//!   master, its rows in the store's transaction, chunk input and output files;
//! - [`divisible_service`]: the gRPC edge of divisible jobs (chunks for agents, outputs for
//!   users);
//! - [`datadir`]: the private data directory, the client and agent tokens, the offload secret,
//!   the directory lock;
//! - [`tickets`]: the ANodes' offload keys, the nodes' data keys, and the tickets that
//!   authorise each offload and each fetch of a workflow input;
//! - [`limits`]: bounds on what an agent may claim at registration;
//! - [`store`]: durable state (SQLite, WAL, `synchronous=NORMAL`);
//! - [`durable`]: group commit — replies wait for one shared `fdatasync` of the WAL;
//! - [`state`]: the live state every job kind shares (nodes, the resource ledger, the store's
//!   transaction, the full-disk pause) and the one dispatch path that routes each event to the
//!   job kind that owns it; its own request/reply types in [`state::types`];
//! - [`jobs`]: the job kinds and their contract ([`jobs::JobKind`]); batch jobs in [`jobs::batch`];
//! - [`convert`]: the protobuf edge (conversions, [`convert::Wire`]);
//! - [`service`]: the gRPC services, authentication, health;
//! - [`users`]: the admin and users, their tokens, which jobs are whose;
//! - [`logs`]: relays `hetsched log` to the agent that ran the task;
//! - [`metrics`]: Prometheus metrics (`/metrics`);
//! - [`http`]: the optional HTTP listener (dashboard, `/metrics`, `/healthz`; HTTPS with `[tls]`);
//! - [`json`]: the JSON of jobs, tasks and users that the CLI's `--output json` and the HTTP API
//!   both write.
//!
//! [`start`] runs a server in the current tokio runtime and returns a [`ServerHandle`]; the
//! `hetsched server` command and `hetsched demo` both use it.

pub mod accounting;
pub mod agent_ca;
pub mod allocation;
pub mod backoff;
pub mod backup;
pub mod config;
pub mod convert;
pub mod dashboard;
pub mod datadir;
pub mod divisible_service;
pub mod durable;
pub mod http;
pub mod job_nonces;
pub mod jobs;
pub mod json;
pub mod limits;
pub mod logs;
pub mod metrics;
pub mod service;
pub mod set_aside;
pub mod state;
pub mod store;
pub mod throttle;
pub mod tickets;
pub mod topology_service;
pub mod users;

pub use config::{ServerConfig, TlsConfig};

/// This server's hetsched version: said to each agent at registration and to clients
/// (`hetsched user whoami`), and compared with each agent's to warn of a mixed-version cluster.
/// The build exposes no commit, so the package version alone.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use thiserror::Error;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// Why the server could not start or stopped.
#[derive(Debug, Error)]
pub enum ServerError {
    /// The data directory, token file or address file.
    #[error("{path}: {source}")]
    Io {
        /// The path.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// The data directory, a token file or the lock.
    #[error(transparent)]
    DataDir(#[from] datadir::DataDirError),
    /// The state could not be rebuilt from the store.
    #[error("cannot open the state: {0}")]
    State(#[from] state::StateError),
    /// The store.
    #[error(transparent)]
    Store(#[from] store::StoreError),
    /// gRPC transport.
    #[error("transport: {0}")]
    Transport(#[from] tonic::transport::Error),
    /// The HTTP (metrics) listener.
    #[error(transparent)]
    Http(#[from] http::HttpError),
    /// The state's lock was poisoned (a panic while it was held).
    #[error("the server state is poisoned")]
    Poisoned,
    /// A configuration value out of its bounds (the message names the field).
    #[error("invalid server configuration: {0}")]
    Config(String),
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> ServerError + '_ {
    move |source| ServerError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// The client token's file in a data directory (users' commands read it).
pub fn token_path(data_dir: &Path) -> PathBuf {
    data_dir.join(datadir::CLIENT_TOKEN)
}

/// The agent token's file in a data directory (agents read it).
pub fn agent_token_path(data_dir: &Path) -> PathBuf {
    data_dir.join(datadir::AGENT_TOKEN)
}

/// A running server.
pub struct ServerHandle {
    /// The address it listens on.
    pub addr: SocketAddr,
    /// The token clients must send (`DATA_DIR/token`).
    pub token: String,
    /// The token agents must send (`DATA_DIR/agent-token`).
    pub agent_token: String,
    /// The address of the HTTP listener (`/metrics`, `/healthz`), if it was configured.
    pub http_addr: Option<SocketAddr>,
    shutdown: Option<oneshot::Sender<()>>,
    /// Turned true first when stopping, so that calls held open (`NextChunk`) answer at once
    /// and the graceful shutdown does not wait for them.
    stopping: tokio::sync::watch::Sender<bool>,
    join: JoinHandle<Result<(), ServerError>>,
    reaper: JoinHandle<()>,
    /// Deletes purged jobs' task rows in steps (`state::purging`).
    purger: JoinHandle<()>,
    http: Option<(oneshot::Sender<()>, JoinHandle<()>)>,
}

impl ServerHandle {
    /// Stops the server and waits for it.
    pub async fn stop(mut self) -> Result<(), ServerError> {
        self.stopping.send_replace(true);
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        self.reaper.abort();
        self.purger.abort();
        if let Some((tx, mut join)) = self.http.take() {
            let _ = tx.send(());
            // Graceful: in-flight scrapes finish; a client that holds its connection open does not
            // hold the shutdown for more than a few seconds.
            if tokio::time::timeout(std::time::Duration::from_secs(5), &mut join)
                .await
                .is_err()
            {
                join.abort();
            }
        }
        match self.join.await {
            Ok(r) => r,
            Err(_) => Ok(()),
        }
    }

    /// Waits until the server stops by itself (it does not, unless the transport fails).
    pub async fn wait(self) -> Result<(), ServerError> {
        match self.join.await {
            Ok(r) => r,
            Err(_) => Ok(()),
        }
    }
}

/// The cap of connections on each listener (gRPC, and HTTP with `http_listen`) that the
/// open-file limit leaves room for, at most `max_connections`, and the warning when it is
/// less (`hetsched_proto::listen::fit_open_files`; `raise` at a start).
fn fit_open_files(config: &ServerConfig, raise: bool) -> (usize, Option<String>) {
    let listeners = 1 + usize::from(config.http_listen.is_some());
    hetsched_proto::listen::fit_open_files(
        config.max_connections as usize,
        listeners,
        "`max_connections`",
        raise,
    )
}

/// Checks `config` as [`start`] would before it opens anything — its bounds, the `[tls]`
/// certificate, key and `agent_ca`, the data directory — changing nothing (`hetsched server
/// --check`). The PID of the server that runs on the data directory, if one does.
pub fn check(config: &ServerConfig) -> Result<Option<String>, ServerError> {
    config.validate().map_err(ServerError::Config)?;
    // Said, not refused: a start serves with the cap the limit leaves.
    if let (_, Some(w)) = fit_open_files(config, false) {
        tracing::warn!("{w}");
    }
    if let Some(tls) = &config.tls {
        http::check_tls(tls)?;
        service::warn_if_key_open(tls);
    }
    Ok(datadir::check(
        &config.data_dir,
        config.http_listen.is_some(),
    )?)
}

/// The stamp of the store in `data_dir` (`hetsched server --check` says it), read without
/// changing anything; `None` when there is no store yet. A store whose schema is newer than this
/// binary's is refused ([`store::StoreError::Newer`]), as a start refuses it.
pub fn store_stamp(data_dir: &Path) -> Result<Option<store::Stamp>, ServerError> {
    let path = data_dir.join(datadir::STORE);
    if !path.is_file() {
        return Ok(None);
    }
    let conn = rusqlite::Connection::open_with_flags(
        &path,
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(store::StoreError::from)?;
    Ok(Some(store::stamp(&conn)?))
}

/// Starts a server: opens (or creates) the data directory, the token and the store, rebuilds the
/// state, binds `config.listen`, writes the bound address to `DATA_DIR/address`, and serves; with
/// `config.http_listen`, also serves `/metrics` and `/healthz` there and writes that bound address
/// to `DATA_DIR/http-address`.
pub async fn start(config: ServerConfig) -> Result<ServerHandle, ServerError> {
    config.validate().map_err(ServerError::Config)?;
    // A certificate no client would accept is refused before anything opens, as `check` does.
    if let Some(tls) = &config.tls {
        http::check_tls(tls)?;
    }
    let grpc_tls = config.tls.as_ref().map(service::grpc_tls).transpose()?;
    // Both listeners' bounds on their connections (`hetsched_proto::listen`), the cap within
    // the open-file limit (raised toward the hard limit as far as the cap needs).
    let (max_connections, warning) = fit_open_files(&config, true);
    if let Some(w) = warning {
        tracing::warn!("{w}");
    }
    let limits = hetsched_proto::listen::Limits {
        greeting: config.greeting_timeout,
        max_connections,
        idle: config.idle_timeout,
        write_stall: config.write_stall_timeout,
    };
    let dir = config.data_dir.clone();
    datadir::prepare(&dir)?;
    let lock = datadir::lock(&dir)?;
    let creds = datadir::credentials(&dir)?;
    if config.http_listen.is_none() {
        // Read (and so made private) only with an HTTP listener; `--check` says any start
        // makes it 0600, so this one does too.
        datadir::protect_read_token(&dir)?;
    }
    let db = store::Store::open(&datadir::protect_store(&dir)?)?;
    let mut state = state::State::open(&config, db)?;
    // Kept across restarts: tickets sent before one still verify with the keys given after.
    state.set_offload_keys(tickets::OffloadKeys::new(&datadir::offload_secret(&dir)?));
    let metrics = state.metrics();
    let durable = state.durable();
    let shared = Arc::new(Mutex::new(state));
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .map_err(|e| ServerError::Io {
            path: PathBuf::from(config.listen.to_string()),
            source: e,
        })?;
    let addr = listener.local_addr().map_err(io_err(&dir))?;
    let mut relay = logs::LogRelay::new(&creds.agent);
    relay.output_streams = throttle::OutputStreams::new(config.max_output_streams);
    for (id, name, work_dir) in shared
        .lock()
        .map_err(|_| ServerError::Poisoned)?
        .node_work_dirs()
    {
        relay.restored(id, &name, &work_dir);
    }
    match config.tls.as_ref().map(|t| (t, t.agent_ca.as_ref())) {
        Some((_, Some(ca))) => {
            relay.agent_ca = Some(std::fs::read(ca).map_err(|e| ServerError::Io {
                path: ca.clone(),
                source: e,
            })?);
        }
        Some((tls, None)) => {
            // The server certifies its agents' listeners itself and calls them over TLS.
            let mut ca = agent_ca::AgentCa::open(&dir).map_err(|e| {
                ServerError::Config(format!("the agents' CA in {}: {e}", dir.display()))
            })?;
            // Never for the server's own names.
            ca.server_names =
                agent_ca::ServerNames::new(&agent_ca::ServerNames::this_host(), Some(&tls.cert))
                    .map_err(|e| ServerError::Config(format!("[tls] cert: {e}")))?;
            relay.agent_ca = Some(ca.cert_pem.clone().into_bytes());
            relay.issuer = Some(ca);
            tracing::info!(
                "[tls] has no agent_ca: this server certifies its agents' listeners ({})",
                dir.join(agent_ca::CERT_FILE).display()
            );
        }
        None => {}
    }
    let relay = Arc::new(relay);
    let http = match config.http_listen {
        Some(at) => {
            let policy = config.policy.to_string();
            let mut registry = metrics::registry(&metrics, shared.clone(), &policy);
            shared
                .lock()
                .map_err(|_| ServerError::Poisoned)?
                .register_topology_metrics(&mut registry);
            let read_token_file = dir.join(dashboard::READ_TOKEN);
            let read_token = dashboard::read_token(&dir).map_err(io_err(&read_token_file))?;
            let listener = http::bind(at, config.tls.as_ref(), limits).await?;
            let mut board = dashboard::Dashboard::new(
                shared.clone(),
                metrics.clone(),
                relay.clone(),
                &creds.client,
                &read_token,
            );
            if listener.is_tls() {
                board = board.secure_cookies();
            }
            let board = Arc::new(board);
            Some(
                listener
                    .with_routes(dashboard::guarded(board.clone(), metrics::router(registry)))
                    .with_routes(dashboard::router(board)),
            )
        }
        None => None,
    };
    let http_addr = http.as_ref().map(|h| h.addr);
    let http_file = dir.join("http-address");
    match http_addr {
        Some(a) => datadir::write_private(&http_file, a.to_string().as_bytes())
            .map_err(io_err(&http_file))?,
        None => match std::fs::remove_file(&http_file) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(io_err(&http_file)(e));
            }
            _ => {}
        },
    }
    let address_file = dir.join("address");
    // 0600 as every file of the data directory: the CLI that reads it runs as the server's
    // user (the directory is 0700 anyway).
    datadir::write_private(&address_file, addr.to_string().as_bytes())
        .map_err(io_err(&address_file))?;

    // Dead-node detection and each kind's housekeeping: the reaper runs when something can be
    // due (`state::alarm`), and sleeps until then or until an event moves that earlier.
    let timeout = std::time::Duration::from_nanos(config.dead_timeout.0.max(1_000_000));
    let reaper_state = shared.clone();
    let mut alarm = shared.lock().map_err(|_| ServerError::Poisoned)?.alarm();
    let reaper = tokio::spawn(async move {
        // When the next pass is due: its lateness is the server's own stall.
        let mut due = std::time::Instant::now();
        loop {
            let s = reaper_state.clone();
            let r = tokio::task::spawn_blocking(move || {
                match s.lock() {
                    Ok(mut st) => {
                        st.begin_event();
                        // Before the kinds' housekeeping (the divisible kind's reaper): what the
                        // server did not hear so far is no agent's silence.
                        st.server_stalled(timeout, due.elapsed());
                        // Retention first: a store failure there must not skip the dead-node check.
                        if let Err(e) = st.apply_retention() {
                            tracing::error!("retention: {e}");
                        }
                        // As long as this pass ran late (the process was stopped: SIGSTOP, a
                        // paused VM), waited for the state and its retention held it (a purge
                        // of millions of tasks), the agents' beats waited too. The monotonic
                        // clock runs on while the process is stopped, so lateness shows it.
                        // (What the call above recorded of it counts once.)
                        let stalled = due.elapsed();
                        let failed = st.check_dead_after(timeout, stalled).map_err(|e| {
                            tracing::error!("dead-node check: {e}");
                        });
                        let next = st.plan_housekeeping();
                        // What failed is tried again a quarter of a dead timeout on, not at once.
                        Some(match failed {
                            Ok(()) => next,
                            Err(()) => next.max(std::time::Instant::now() + timeout / 4),
                        })
                    }
                    Err(_) => None,
                }
            })
            .await;
            let Ok(Some(mut next)) = r else {
                // A panic poisoned the state: every call fails from here on.
                tracing::error!("the server's state is poisoned: housekeeping stops");
                return;
            };
            // Never sooner than this after a pass: a deadline that stays past must not spin.
            let soonest = std::time::Instant::now() + std::time::Duration::from_millis(20);
            loop {
                // The moment this wake-up is for: the plan's, or now when an event moved the
                // plan to a time already gone by (a retention pass due while nothing woke the
                // reaper). Lateness counts from here: before, it counted from that past time,
                // so the quiet time before an event read as a stall of the server and gave
                // every node a fresh dead timeout (a node that had just died waited that long).
                let at = next.max(soonest).max(std::time::Instant::now());
                tokio::select! {
                    () = tokio::time::sleep_until(at.into()) => {
                        due = at;
                        break;
                    }
                    changed = alarm.changed() => {
                        if changed.is_err() {
                            return;
                        }
                        // An event moved the plan earlier: sleep until then instead.
                        next = next.min(*alarm.borrow_and_update());
                    }
                }
            }
        }
    });

    // The purger: deletes what purges left of their jobs' rows (`state::purging`), one
    // bounded step at a time, taking the state for each step only so that other calls are
    // served between steps; first what a purge the last run did not finish left.
    let purger_state = shared.clone();
    let purge_work = shared
        .lock()
        .map_err(|_| ServerError::Poisoned)?
        .purge_work();
    let purger = tokio::spawn(async move {
        // Said once when the store starts refusing steps, and once when it takes them again.
        let mut failing = false;
        loop {
            let s = purger_state.clone();
            let r = tokio::task::spawn_blocking(move || {
                let mut st = s.lock().ok()?;
                st.begin_event();
                Some(st.purge_step())
            })
            .await;
            if failing && matches!(r, Ok(Some(Ok(_)))) {
                failing = false;
                tracing::info!("purge: the store takes the deletion of purged jobs' rows again");
            }
            match r {
                Ok(Some(Ok(0))) => purge_work.notified().await,
                Ok(Some(Ok(_))) => tokio::time::sleep(state::purging::PURGE_PAUSE).await,
                Ok(Some(Err(e))) => {
                    if !failing {
                        failing = true;
                        tracing::error!(
                            "purge: deleting purged jobs' rows: {e}; trying again every \
                             second (the jobs stay purged)"
                        );
                    }
                    tokio::time::sleep(state::purging::PURGE_RETRY).await;
                }
                // A panic poisoned the state: every call fails from here on.
                _ => return,
            }
        }
    });

    // Automatic allocation: agents reach the server at the address it listens on, unless a
    // queue names another.
    let scheme = if config.tls.is_some() {
        "https"
    } else {
        "http"
    };
    let allocations = allocation::spawn(
        &config.allocation,
        allocation::Context {
            state: shared.clone(),
            data_dir: dir.clone(),
            server_url: (!addr.ip().is_unspecified()).then(|| format!("{scheme}://{addr}")),
        },
    )
    .map_err(ServerError::Config)?;
    shared
        .lock()
        .map_err(|_| ServerError::Poisoned)?
        .set_allocations(allocations);

    let (tx, rx) = oneshot::channel();
    let (stopping, stopping_rx) = tokio::sync::watch::channel(false);
    let router =
        service::router_with(shared.clone(), metrics, &creds, relay.clone(), stopping_rx).await?;
    let router = topology_service::add_services(
        router,
        shared.clone(),
        durable,
        &creds,
        relay,
        stopping.subscribe(),
    );
    let at_stop = shared;
    let incoming = service::incoming(listener, timeout, grpc_tls, limits);
    let join = tokio::spawn(async move {
        // The data directory stays locked while the server serves.
        let _lock = lock;
        let served = router
            .serve_with_incoming_shutdown(incoming, async {
                let _ = rx.await;
            })
            .await
            .map_err(ServerError::from);
        // A planned stop keeps every second of the accounts and fair-share usage accrued.
        if let Ok(mut state) = at_stop.lock()
            && let Err(e) = state.store_usage()
        {
            tracing::error!("storing the accounts at stop failed: {e}");
        }
        // When each node was last heard, for `hetsched nodes` after the restart.
        if let Ok(mut state) = at_stop.lock()
            && let Err(e) = state.store_heard()
        {
            tracing::error!("storing when the nodes were last heard at stop failed: {e}");
        }
        served
    });
    tracing::info!(%addr, policy = %config.policy, version = VERSION, "server listening");
    let http = http.map(|h| {
        let (tx, rx) = oneshot::channel::<()>();
        let scheme = if h.is_tls() { "HTTPS" } else { "HTTP" };
        tracing::info!(addr = %h.addr, "serving the dashboard (/), /metrics and /healthz over {scheme}");
        let join = tokio::spawn(async move {
            let stop = async {
                let _ = rx.await;
            };
            if let Err(e) = h.serve(stop).await {
                tracing::error!("HTTP listener: {e}");
            }
        });
        (tx, join)
    });
    Ok(ServerHandle {
        addr,
        token: creds.client,
        agent_token: creds.agent,
        http_addr,
        shutdown: Some(tx),
        stopping,
        join,
        reaper,
        purger,
        http,
    })
}
