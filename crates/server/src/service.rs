//! The gRPC services: `Agent` (register, heartbeat) and `Client` (submit, jobs, tasks, nodes,
//! cancel), each behind a check of its own role's token (agents and users hold different ones), plus the standard gRPC health service (unauthenticated, so
//! load balancers and `grpc_health_probe` can use it).
//!
//! Handlers take the state's lock, run one event, and answer only once the event's writes are
//! durable (see [`crate::durable`]). Heartbeats — the hot path — run on the async worker itself
//! when the lock is free: under the lock they only change memory and append to the WAL (no
//! fsync), and their replies wait ([`Durable::wait`]) for one `fdatasync` of the WAL shared by
//! every reply waiting at that moment, made outside the lock. Other calls, which are rare and may
//! read or write many rows (a 1,000,000-task submission, a page read from the store, a purge),
//! run inside `block_in_place` and sync before releasing the lock, as every call did before
//! group commit.

use crate::ServerError;
use crate::config::TlsConfig;
use crate::convert::Wire;
use crate::datadir::Credentials;
use crate::durable::Durable;
use crate::logs::LogRelay;
use crate::metrics::Metrics;
use crate::state::nodes::Presence;
use crate::state::{CapChange, State, StateError, TasksListing};
use crate::store::StoreReader;
use crate::users::{Caller, TokenIndex};
use hetsched_proto as pb;
use hetsched_proto::agent_server::{Agent, AgentServer};
use hetsched_proto::client_server::{Client, ClientServer};
use std::sync::{Arc, Mutex};
use tonic::service::interceptor::InterceptedService;
use tonic::{Request, Response, Status};

pub(crate) type Shared = Arc<Mutex<State>>;

/// The most node names a task listing filters on (`hetsched tasks --node`).
pub const MAX_LISTED_NODES: usize = 1024;

pub(crate) fn status(e: StateError) -> Status {
    match e {
        StateError::Divisible(e) => crate::divisible_service::status(e),
        StateError::Input(e) => Status::invalid_argument(e.to_string()),
        StateError::Invalid(m) => Status::invalid_argument(m),
        StateError::NoJob(j) => Status::not_found(format!("no job {j}")),
        e @ StateError::Purged(_) => Status::not_found(e.to_string()),
        e @ StateError::NameTaken(_) => Status::already_exists(e.to_string()),
        // The agent retries: the name is free once the node is declared dead.
        e @ StateError::NameAwaited { .. } => Status::failed_precondition(e.to_string()),
        e @ StateError::NoNode(_) => Status::not_found(e.to_string()),
        e @ (StateError::NotOwner { .. }
        | StateError::AdminOnly { .. }
        | StateError::NotTheNodesAgent(_)
        | StateError::ChunkNotOutTo { .. }) => Status::permission_denied(e.to_string()),
        e @ StateError::NoUser(_) => Status::not_found(e.to_string()),
        // The agent waits and asks again: its heartbeat (or registration) brings the node back.
        e @ StateError::NodeNotWorking { .. } => Status::failed_precondition(e.to_string()),
        e @ StateError::UserExists(_) => Status::already_exists(e.to_string()),
        StateError::Topology(e) => crate::topology_service::status(e),
        e => {
            tracing::error!("{e}");
            Status::internal(e.to_string())
        }
    }
}

/// How a handler runs its event.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Run {
    /// On the async worker when the lock is free (short: memory and WAL appends only); inside
    /// `block_in_place` when another call holds it.
    Inline,
    /// Inside `block_in_place` (may read or write many rows).
    Blocking,
}

/// Runs `f` under the state's lock and returns its answer once every write made up to the end
/// of `f` is durable (a call that wrote nothing may have read what another call wrote: it
/// waits for that too, so nothing it acknowledges can be lost).
pub(crate) async fn with_state<T: Send + 'static>(
    state: &Shared,
    durable: &Durable,
    how: Run,
    f: impl FnOnce(&mut State) -> Result<T, StateError> + Send + 'static,
) -> Result<Response<T>, Status> {
    let (answer, written) = run_event(state, durable, how, f)?;
    let answer = answer?;
    if let Err(e) = durable.wait(written).await {
        // What this call (and others) committed may not be on disk: roll memory back to the
        // store and pause, as after a refused commit.
        blocking(|| {
            if let Ok(mut s) = state.lock() {
                s.sync_failed(&e);
            }
        });
        return Err(unavailable(e));
    }
    Ok(Response::new(answer))
}

/// Runs `f`, which may block on I/O or a lock, without stalling the async worker's other tasks
/// (a current-thread runtime, in tests, cannot hand its only worker over: `f` runs in place).
fn blocking<T>(f: impl FnOnce() -> T) -> T {
    if tokio::runtime::Handle::current().runtime_flavor()
        == tokio::runtime::RuntimeFlavor::MultiThread
    {
        tokio::task::block_in_place(f)
    } else {
        f()
    }
}

/// The synchronous part of [`with_state`]: `f`'s answer and the store's write count after it.
fn run_event<T>(
    state: &Shared,
    durable: &Durable,
    how: Run,
    f: impl FnOnce(&mut State) -> Result<T, StateError>,
) -> Result<(Result<T, Status>, u64), Status> {
    let poisoned = || Status::internal("server state poisoned");
    let exec = move |s: &mut State| {
        s.begin_event();
        let answer = f(s);
        if let Err(e) = &answer {
            // Every event's refused store-first write pauses dispatch as a refused commit does.
            s.note_refused_write(e);
        }
        (answer.map_err(|e| status(s.explain(e))), s.written())
    };
    // Inline only while the lock is free: a heartbeat must not park the async worker behind a
    // long call (a big submission) that holds it.
    if how == Run::Inline {
        match state.try_lock() {
            Ok(mut guard) => return Ok(exec(&mut guard)),
            Err(std::sync::TryLockError::WouldBlock) => {}
            Err(std::sync::TryLockError::Poisoned(_)) => return Err(poisoned()),
        }
    }
    // The worker thread is replaced while this one may block on the lock or on I/O.
    blocking(|| {
        let mut guard = state.lock().map_err(|_| poisoned())?;
        let (answer, written) = exec(&mut guard);
        if how == Run::Blocking {
            // A rare call (registration, submission, cancel …): synced before the lock is
            // released, so no other call sees its change before it is durable.
            if let Err(e) = durable.wait_blocking(written) {
                guard.sync_failed(&e);
                return Err(unavailable(e));
            }
        }
        Ok((answer, written))
    })
}

fn unavailable(e: crate::durable::SyncError) -> Status {
    tracing::error!("{e}");
    Status::unavailable(format!("{e}: nothing was recorded for this call; retry"))
}

/// Runs a read-only `f` under the state's lock (inside `block_in_place`: a page may be read
/// from the store). Reads do not wait for durability: they acknowledge nothing.
pub(crate) async fn read_state<T: Send + 'static>(
    state: &Shared,
    f: impl FnOnce(&mut State) -> Result<T, StateError> + Send + 'static,
) -> Result<Response<T>, Status> {
    blocking(|| {
        let mut guard = state
            .lock()
            .map_err(|_| Status::internal("server state poisoned"))?;
        let answer = f(&mut guard);
        answer.map_err(|e| status(guard.explain(e)))
    })
    .map(Response::new)
}

/// As [`read_state`] for a short read (a job's counts, added up per application): on the async
/// worker itself when the lock is free — no hand-off of the worker, as for heartbeats — and
/// inside `block_in_place` otherwise. Clients polling a job (`hetsched wait`, `bench-dispatch`)
/// call it many times a second.
pub(crate) async fn read_state_inline<T: Send + 'static>(
    state: &Shared,
    f: impl FnOnce(&mut State) -> Result<T, StateError> + Send + 'static,
) -> Result<Response<T>, Status> {
    let f = {
        // The guard is dropped before any await.
        match state.try_lock() {
            Ok(mut guard) => {
                let answer = f(&mut guard);
                return answer
                    .map(Response::new)
                    .map_err(|e| status(guard.explain(e)));
            }
            Err(std::sync::TryLockError::WouldBlock) => f,
            Err(std::sync::TryLockError::Poisoned(_)) => {
                return Err(Status::internal("server state poisoned"));
            }
        }
    };
    read_state(state, f).await
}

/// The `Agent` service; heartbeats are counted and timed in its [`Metrics`]; where each agent's
/// log listener is goes to the [`LogRelay`]. The fifth field turns true when the server stops
/// (an `AwaitWork` held open answers at once).
pub struct AgentService(
    Shared,
    Arc<Metrics>,
    Arc<LogRelay>,
    Arc<Durable>,
    tokio::sync::watch::Receiver<bool>,
);

/// The longest an `AwaitWork` is held ([`pb::MAX_HOLD`]; the agent calls again at once). The open
/// call is the idle node's sign of life, and the kernel's TCP keepalive ([`incoming`]) ends it if
/// the agent's host vanishes. A relay between agent and server that hangs while its own host
/// answers probes is seen when the hold ends: the node is dead a dead timeout later.
const MAX_WAKE_HOLD: std::time::Duration = pb::MAX_HOLD;

#[tonic::async_trait]
impl Agent for AgentService {
    async fn register(
        &self,
        req: Request<pb::RegisterRequest>,
    ) -> Result<Response<pb::RegisterReply>, Status> {
        let ip = req.remote_addr().map(|a| a.ip());
        let r = req.into_inner();
        let (name, port, work_dir) = (r.name.clone(), r.log_port, r.work_dir.clone());
        let reply = with_state(&self.0, &self.3, Run::Blocking, move |s| s.register(r)).await?;
        self.2
            .seen(reply.get_ref().node_id, Some(&name), ip, port, &work_dir);
        // A registering agent holds no data key (until its first heartbeat reply).
        self.2.registered(reply.get_ref().node_id);
        Ok(reply)
    }

    async fn heartbeat(
        &self,
        req: Request<pb::HeartbeatRequest>,
    ) -> Result<Response<pb::HeartbeatReply>, Status> {
        let start = std::time::Instant::now();
        let ip = req.remote_addr().map(|a| a.ip());
        let mut r = req.into_inner();
        // Where other agents reach this one (issue 13): its `advertise`, else the address it
        // calls from with its listener's port (its TLS data listener's, as https://, if any).
        if r.advertise.is_empty()
            && let Some(ip) = ip
        {
            if r.data_port != 0 {
                let at = std::net::SocketAddr::new(ip, r.data_port as u16);
                r.advertise = format!("https://{at}");
            } else if r.log_port != 0 {
                r.advertise = std::net::SocketAddr::new(ip, r.log_port as u16).to_string();
            }
        }
        let (id, port, work_dir) = (r.node_id, r.log_port, r.work_dir.clone());
        let relay = self.2.clone();
        let reply = with_state(&self.0, &self.3, Run::Inline, move |s| {
            s.note_peer(id, ip);
            let rep = s.heartbeat(r)?;
            // Where the node's agent listens, learnt in the event that records what its beat
            // reports: a client woken by a result in it (`wait`) then reads that task's log at
            // once. Before, the relay learnt it after the reply, and the first `log` after a
            // restart could hear that the node "has not heartbeated since the server started".
            if !rep.reregister {
                // First heartbeat since a restart: the name comes from the state.
                let name = if relay.knows(id) {
                    None
                } else {
                    s.node_name(id)
                };
                relay.seen(id, name.as_deref(), ip, port, &work_dir);
            }
            Ok(rep)
        })
        .await;
        self.1.heartbeat(start.elapsed());
        if let Ok(rep) = &reply
            && !rep.get_ref().reregister
        {
            // The key this reply gives the agent signs the log reads relayed to it.
            self.2.keyed(id, &rep.get_ref().data_key);
        }
        reply
    }

    /// Held until the node has work waiting (its wake-up counter moves past `seen`), at most
    /// [`MAX_WAKE_HOLD`], or the server stops; see `state::wakes`.
    async fn await_work(
        &self,
        req: Request<pb::AwaitWorkRequest>,
    ) -> Result<Response<pb::AwaitWorkReply>, Status> {
        let r = req.into_inner();
        let (id, identity, seen) = (r.node_id, r.identity, r.seen);
        let Some(mut wakes) = read_state_inline(&self.0, move |s| Ok(s.await_work(id, &identity)))
            .await?
            .into_inner()
        else {
            return Err(Status::failed_precondition(
                "no node with this id and identity: register first",
            ));
        };
        // Until this call ends — answered, or dropped with its connection — the node counts as
        // alive without heartbeats (`State::check_dead`).
        let _present = Present::open(&self.0, Presence::Node(id))?;
        let until = tokio::time::Instant::now() + MAX_WAKE_HOLD;
        let mut stopping = self.4.clone();
        loop {
            let wake = *wakes.borrow_and_update();
            if wake != seen || *stopping.borrow() || tokio::time::Instant::now() >= until {
                return Ok(Response::new(pb::AwaitWorkReply { wake }));
            }
            held(&mut wakes, until, &mut stopping).await;
        }
    }

    /// Which of the jobs whose files an agent holds were purged: it deletes their files.
    async fn purged_jobs(
        &self,
        req: Request<pb::PurgedJobsRequest>,
    ) -> Result<Response<pb::PurgedJobsReply>, Status> {
        let r = req.into_inner();
        if r.job_ids.len() > pb::MAX_PURGED_JOBS_ASKED {
            return Err(Status::invalid_argument(format!(
                "job_ids: {} ids, at most {} per call",
                r.job_ids.len(),
                pb::MAX_PURGED_JOBS_ASKED
            )));
        }
        if r.name.len() > crate::limits::MAX_NODE_NAME {
            return Err(Status::invalid_argument(format!(
                "name: at most {} bytes",
                crate::limits::MAX_NODE_NAME
            )));
        }
        let purged = read_state(&self.0, move |s| {
            // `agent --check`: would a registration under this name be refused?
            if r.node_id == 0 && !r.name.is_empty() {
                s.check_name_free(&r.name, &r.identity)?;
            }
            Ok(s.purged_jobs(r.node_id, &r.identity, &r.job_ids))
        })
        .await?
        .into_inner()
        .ok_or_else(|| {
            Status::failed_precondition("no node with this id and identity: register first")
        })?;
        Ok(Response::new(pb::PurgedJobsReply { purged }))
    }

    /// Certifies an agent's listeners' key for the address its call came from.
    async fn listener_certificate(
        &self,
        req: Request<pb::ListenerCertificateRequest>,
    ) -> Result<Response<pb::ListenerCertificateReply>, Status> {
        let Some(ca) = &self.2.issuer else {
            return Err(Status::failed_precondition(
                "this server certifies no agent listeners: it has no [tls], or its [tls] names \
                 an agent_ca (give agents --log-cert and --log-key)",
            ));
        };
        let ip = req
            .remote_addr()
            .map(|a| a.ip())
            .ok_or_else(|| Status::failed_precondition("the call's address is unknown"))?;
        let r = req.into_inner();
        let host = (!r.advertise_host.is_empty()).then_some(r.advertise_host.as_str());
        let dns = host
            .map(str::trim)
            .filter(|h| crate::agent_ca::is_dns_name(h))
            .map(str::to_string);
        if let Some(h) = &dns {
            ca.server_names.check(h).map_err(Status::invalid_argument)?;
        }
        // By node when the agent says which it is (and proves it), whatever it advertises: a
        // request naming a live node with another identity is refused with or without a host
        // (before, only with a DNS name). A DNS name is also certified only if no other live
        // agent advertises it: by node, or by the caller's address for an agent that predates
        // `node` and `identity`.
        let (node, identity, name) = (r.node.clone(), r.identity.clone(), dns.clone());
        read_state(&self.0, move |s| {
            match (node.is_empty(), &name) {
                (false, Some(h)) => s.check_listener_name_for_node(h, &node, &identity),
                (false, None) => s.check_listener_claim(&node, &identity).map(drop),
                (true, Some(h)) => s.check_listener_name(h, ip),
                (true, None) => Ok(()),
            }
            .map_err(crate::state::StateError::Invalid)
        })
        .await?;
        // Signing costs CPU and a DNS name a blocking lookup: bounded per caller address (an
        // agent asks once at each start). Counted before the lookup, so that a token holder's
        // asks refused by it are counted too (counted after, they started lookups without
        // bound); a request refused above (by the node's claim or the names already taken)
        // neither looks up nor signs, and does not use up the bound of the agents behind that
        // address.
        self.2
            .certify_rate
            .admit(ip, std::time::Instant::now())
            .map_err(Status::resource_exhausted)?;
        // A DNS name only if it resolves to the caller's address here (an IP address must be
        // the caller's: `names_for`).
        if let Some(name) = dns {
            tokio::task::spawn_blocking(move || crate::agent_ca::check_resolves_to(&name, ip))
                .await
                .map_err(|e| Status::internal(e.to_string()))?
                .map_err(Status::invalid_argument)?;
        }
        let names = ca
            .names_for(&r.public_key, ip, host)
            .map_err(Status::invalid_argument)?;
        let cert_pem = ca
            .sign(&r.public_key, ip, names)
            .map_err(Status::internal)?;
        tracing::info!(%ip, host = host.unwrap_or(""), "agent listener certified");
        Ok(Response::new(pb::ListenerCertificateReply {
            cert_pem,
            ca_pem: ca.cert_pem.clone(),
        }))
    }
}

/// A call held open that says its agent lives ([`Presence`]): counted open when made, closed
/// when dropped — the call answered, or cancelled because its connection closed.
struct Present {
    state: Shared,
    who: Presence,
}

impl Present {
    /// Counts `who` open. Synchronous, so no cancellation can fall between the count and the
    /// guard that undoes it.
    fn open(state: &Shared, who: Presence) -> Result<Present, Status> {
        let open = |s: &mut State| s.presence(&who, true);
        match state.try_lock() {
            Ok(mut s) => open(&mut s),
            Err(std::sync::TryLockError::WouldBlock) => blocking(|| match state.lock() {
                Ok(mut s) => {
                    open(&mut s);
                    Ok(())
                }
                Err(_) => Err(Status::internal("server state poisoned")),
            })?,
            Err(std::sync::TryLockError::Poisoned(_)) => {
                return Err(Status::internal("server state poisoned"));
            }
        }
        Ok(Present {
            state: state.clone(),
            who,
        })
    }
}

impl Drop for Present {
    fn drop(&mut self) {
        match self.state.try_lock() {
            Ok(mut s) => s.presence(&self.who, false),
            Err(std::sync::TryLockError::WouldBlock) => {
                // A long call holds the lock: do not park this worker behind it.
                let (state, who) = (self.state.clone(), self.who.clone());
                if let Ok(rt) = tokio::runtime::Handle::try_current() {
                    rt.spawn_blocking(move || {
                        if let Ok(mut s) = state.lock() {
                            s.presence(&who, false);
                        }
                    });
                }
            }
            Err(std::sync::TryLockError::Poisoned(_)) => {}
        }
    }
}

/// The `Client` service; task outputs are read through the [`LogRelay`].
/// The fourth field is a read-only connection to the store: pages of finished jobs' tasks are
/// read through it after the state's lock is released.
pub struct ClientService(
    Shared,
    Arc<LogRelay>,
    Arc<Durable>,
    Option<Arc<StoreReader>>,
    /// True once the server stops: a `GetJob` held open answers at once.
    tokio::sync::watch::Receiver<bool>,
);

/// The longest a `GetJob` with `wait_ms` is held.
const MAX_JOB_WAIT: std::time::Duration = std::time::Duration::from_secs(60);

/// The longest a call held open on an event is left unanswered ([`held_event`]).
pub const MAX_HELD: std::time::Duration = pb::MAX_HOLD;

/// A call held open on an event: `look` runs as an event (under the state's lock, answered once
/// its writes are durable) and returns the answer, a receiver of the changes that could alter it
/// (subscribed under the same lock, so none is missed between) and the longest the state lets
/// pass between two looks (looking notes the agent alive in its kind). The call is answered
/// when `ready(&answer)`, when the server stops, or when `answer_within` (at most [`MAX_HELD`];
/// None: one look period) has passed since the first look; otherwise it waits for a change or
/// the next look period and looks again. With a `presence`, the open call itself is the agent's
/// sign of life in its kind from the first look until it ends, so it is looked at again only
/// on a change. Idle agents' `NextChunk` and `SyncWorkers` are held so: an idle agent costs one
/// call per hold.
pub(crate) async fn held_event<T: Send + 'static>(
    state: &Shared,
    durable: &Durable,
    stopping: &tokio::sync::watch::Receiver<bool>,
    answer_within: Option<std::time::Duration>,
    presence: Option<Presence>,
    look: impl Fn(
        &mut State,
    )
        -> Result<(T, tokio::sync::watch::Receiver<u64>, std::time::Duration), StateError>
    + Clone
    + Send
    + 'static,
    ready: impl Fn(&T) -> bool,
) -> Result<T, Status> {
    let mut stopping = stopping.clone();
    let mut deadline: Option<tokio::time::Instant> = None;
    // Counted open after the first look (which notes the agent in its kind), closed when this
    // call ends.
    let mut to_open = presence;
    let mut present: Option<Present> = None;
    loop {
        let (answer, mut changes, period) = with_state(state, durable, Run::Inline, look.clone())
            .await?
            .into_inner();
        if let Some(who) = to_open.take() {
            present = Some(Present::open(state, who)?);
        }
        let now = tokio::time::Instant::now();
        let deadline = *deadline
            .get_or_insert_with(|| now + answer_within.map_or(period, |d| d.min(MAX_HELD)));
        if ready(&answer) || *stopping.borrow() || now >= deadline {
            return Ok(answer);
        }
        let until = if present.is_some() {
            deadline
        } else {
            deadline.min(now + period)
        };
        held(&mut changes, until, &mut stopping).await;
    }
}

/// One wait of a call held open: until `changes` sees a change, `until`, or the server stops.
/// The caller looks again afterwards (a wake-up is a reason to look, not an answer).
pub(crate) async fn held(
    changes: &mut tokio::sync::watch::Receiver<u64>,
    until: tokio::time::Instant,
    stopping: &mut tokio::sync::watch::Receiver<bool>,
) {
    tokio::select! {
        changed = changes.changed() => {
            if changed.is_err() {
                // The sender is gone (the state is going away): answer at the end.
                tokio::time::sleep_until(until).await;
            }
        }
        () = tokio::time::sleep_until(until) => {}
        _ = stopping.changed() => {}
    }
}

#[tonic::async_trait]
impl Client for ClientService {
    async fn submit(
        &self,
        req: Request<pb::SubmitRequest>,
    ) -> Result<Response<pb::SubmitReply>, Status> {
        let who = caller(&req)?;
        let r = req.into_inner();
        with_state(&self.0, &self.2, Run::Blocking, move |s| {
            let _audit = who.span();
            let done = s.on_submit_as(
                crate::state::types::Submission {
                    origin: r.origin,
                    text: r.text,
                    workdir: r.workdir,
                    key: r.submission_key,
                    name: r.name,
                    divisible_input: r.divisible_input,
                    after: r.after,
                    after_any: r.after_any,
                    after_notok: r.after_notok,
                    after_corr: r.after_corr,
                    singleton: r.singleton,
                    after_start: r.after_start,
                    hold: r.hold,
                    begin_ms: (r.begin_ms > 0).then_some(r.begin_ms),
                    // The owner's, filled by the state.
                    max_priority: None,
                    task_room: None,
                    cap: Default::default(),
                    owner: String::new(),
                },
                &who.name,
            )?;
            // A job accepted while no node can run it (every capable node drained, say) is
            // told at once, not found out later from a wait that never ends.
            let blocked_reason = if done.existing {
                String::new()
            } else {
                s.get_job(done.job_id)
                    .ok()
                    .filter(|j| j.blocked)
                    .map(|j| j.pending_reason)
                    .unwrap_or_default()
            };
            let mut reply: pb::SubmitReply = done.into();
            reply.blocked_reason = blocked_reason;
            Ok(reply)
        })
        .await
    }

    async fn list_jobs(
        &self,
        req: Request<pb::ListJobsRequest>,
    ) -> Result<Response<pb::ListJobsReply>, Status> {
        let who = caller(&req)?;
        let r = req.into_inner();
        // u32::MAX means "everything" in process; over the wire it is just a large page.
        let limit = r.limit.min(crate::state::MAX_PAGE);
        if r.owner.len() > crate::users::MAX_NAME {
            return Err(Status::invalid_argument(format!(
                "owner: a user name is at most {} characters",
                crate::users::MAX_NAME
            )));
        }
        // Under the lock: the page's entries (each a lookup and a few additions, no scan of
        // tasks); the reply is encoded after the lock is released.
        let mut owner = (!r.owner.is_empty()).then_some(r.owner);
        if r.selectable && !who.admin {
            if owner.as_deref().is_some_and(|o| o != &*who.name) {
                // Another user's jobs, of which the caller may change none.
                return Ok(Response::new(pb::ListJobsReply::default()));
            }
            owner = Some(who.name.to_string());
        }
        let page = read_state(&self.0, move |s| {
            if let Some(o) = owner
                .as_deref()
                .filter(|o| r.cursor == 0 && !s.knows_owner(o))
            {
                // Slurm's `squeue --user` refuses an unknown user too: an empty list would
                // read as "nothing running" for a misspelt name.
                return Err(StateError::NoUser(o.to_string()));
            }
            Ok(s.list_jobs_of(r.cursor, limit, owner.as_deref()))
        })
        .await?
        .into_inner();
        Ok(Response::new(page.into()))
    }

    async fn get_job(
        &self,
        req: Request<pb::GetJobRequest>,
    ) -> Result<Response<pb::JobInfo>, Status> {
        let who = caller(&req);
        let r = req.into_inner();
        let id = r.job_id;
        let wait = std::time::Duration::from_millis(r.wait_ms.into()).min(MAX_JOB_WAIT);
        if wait.is_zero() {
            return read_state_inline(&self.0, move |s| s.job(id)).await;
        }
        // A held call counts among the caller's calls in flight until it ends.
        let _slot = self.1.calls.enter(&who?.name, "GetJob (held)")?;
        // Held until the job ends and none of its stopped tasks' processes may still run
        // (`State::job_over`): looked at again after each commit that ended a job or the last
        // stopping task of an ended one (what can end this one), not polled by the client, and
        // not woken by the commits that end no job. A look asks only whether the job is over
        // (look-ups); the whole entry is built once, for the answer.
        let until = tokio::time::Instant::now() + wait;
        let mut stopping = self.4.clone();
        loop {
            let answer_now = *stopping.borrow() || tokio::time::Instant::now() >= until;
            // Subscribed under the same lock as the look: no end is missed between.
            let (job, mut ends) = read_state_inline(&self.0, move |s| {
                let job = if answer_now || s.job_over(id)? {
                    Some(s.job(id)?)
                } else {
                    None
                };
                Ok((job, s.job_ends()))
            })
            .await?
            .into_inner();
            if let Some(job) = job {
                return Ok(Response::new(job));
            }
            held(&mut ends, until, &mut stopping).await;
        }
    }

    async fn list_tasks(
        &self,
        req: Request<pb::ListTasksRequest>,
    ) -> Result<Response<pb::ListTasksReply>, Status> {
        let who = caller(&req)?;
        let r = req.into_inner();
        let limit = r.limit.min(crate::state::MAX_PAGE);
        let (job, cursor) = (r.job_id, r.cursor);
        let states = crate::state::types::StateFilter::parse(&r.states).map_err(status)?;
        if r.nodes.len() > MAX_LISTED_NODES {
            return Err(Status::invalid_argument(format!(
                "nodes: {} names, more than the {MAX_LISTED_NODES} accepted",
                r.nodes.len()
            )));
        }
        let nodes: std::collections::HashSet<String> = r.nodes.into_iter().collect();
        let filter = states.clone();
        // Under the lock: the page itself, or what it takes to read it from the store.
        let plan = read_state(&self.0, move |s| s.plan_tasks(job, cursor, limit, &filter))
            .await?
            .into_inner();
        let page = match (plan, &self.3) {
            (TasksListing::Ready(page), _) => page,
            // A finished job's rows: read without the state's lock.
            (TasksListing::FromStore(stored), Some(reader)) => {
                blocking(|| stored.read(reader)).map_err(status)?
            }
            (TasksListing::FromStore(_), None) => {
                read_state(&self.0, move |s| s.list_tasks(job, cursor, limit))
                    .await?
                    .into_inner()
            }
        };
        // Pages the store did not filter (other kinds, every job) keep what the filter admits;
        // the cursor still says where the listing goes on.
        let mut page = page;
        page.tasks.retain(|t| {
            states.admits(&t.state)
                && (nodes.is_empty()
                    || nodes.contains(&t.node)
                    || nodes.contains(&t.executed_node)
                    || t.nodes.iter().any(|m| nodes.contains(m)))
        });
        let mut reply = Response::new(pb::ListTasksReply::from(page));
        let ran: Vec<(u64, String)> = reply
            .get_ref()
            .tasks
            .iter()
            .filter(|t| t.attempt > 0)
            .map(|t| (t.job_id, t.app.clone()))
            .collect();
        let own = if ran.is_empty() {
            Default::default()
        } else {
            read_state(&self.0, move |s| Ok(s.own_streams(&ran)))
                .await?
                .into_inner()
        };
        self.1.fill_outputs(&mut reply.get_mut().tasks, &own);
        let jobs = owners_job_ids(&who, &reply.get_ref().tasks);
        if !jobs.is_empty() {
            let owners = read_state(&self.0, move |s| {
                Ok(jobs
                    .iter()
                    .map(|&j| (j, s.owner_of(j).to_string()))
                    .collect())
            })
            .await?
            .into_inner();
            hide_others_tasks(&who, &owners, &mut reply.get_mut().tasks);
        }
        Ok(reply)
    }

    async fn workflow_graph(
        &self,
        req: Request<pb::GetJobRequest>,
    ) -> Result<Response<pb::WorkflowGraphReply>, Status> {
        let id = req.into_inner().job_id;
        read_state(&self.0, move |s| {
            s.workflow_dot(id).map(|dot| pb::WorkflowGraphReply { dot })
        })
        .await
    }

    async fn read_log(
        &self,
        req: Request<pb::ReadLogRequest>,
    ) -> Result<Response<pb::ReadLogReply>, Status> {
        let who = caller(&req)?;
        crate::logs::read_log(&self.0, &self.1, req.into_inner(), &who)
            .await
            .map(Response::new)
    }

    async fn resubmit(
        &self,
        req: Request<pb::ResubmitRequest>,
    ) -> Result<Response<pb::ResubmitReply>, Status> {
        let who = caller(&req)?;
        let r = req.into_inner();
        with_state(&self.0, &self.2, Run::Blocking, move |s| {
            let _audit = who.span();
            s.authorize(&who, r.job_id, "resubmit its tasks")?;
            s.on_resubmit_told(r.job_id, r.failed, r.cancelled)
                .map(Into::into)
        })
        .await
    }

    async fn drain_node(
        &self,
        req: Request<pb::DrainNodeRequest>,
    ) -> Result<Response<pb::DrainNodeReply>, Status> {
        let who = caller(&req)?;
        require_admin(&who, "draining or resuming a node")?;
        let r = req.into_inner();
        with_state(&self.0, &self.2, Run::Blocking, move |s| {
            let _audit = who.span();
            s.drain_node(&r.name, r.drain, &r.reason)
        })
        .await
    }

    async fn stop_node(
        &self,
        req: Request<pb::StopNodeRequest>,
    ) -> Result<Response<pb::DrainNodeReply>, Status> {
        let who = caller(&req)?;
        require_admin(&who, "stopping a node")?;
        let r = req.into_inner();
        with_state(&self.0, &self.2, Run::Blocking, move |s| {
            let _audit = who.span();
            s.on_stop_node(&r.name, r.drain).map(Into::into)
        })
        .await
    }

    async fn list_nodes(
        &self,
        req: Request<pb::ListNodesRequest>,
    ) -> Result<Response<pb::ListNodesReply>, Status> {
        let all = req.into_inner().all;
        read_state(&self.0, move |s| Ok(s.nodes(all))).await
    }

    async fn list_allocations(
        &self,
        _: Request<pb::ListAllocationsRequest>,
    ) -> Result<Response<pb::ListAllocationsReply>, Status> {
        read_state(&self.0, |s| Ok(s.allocation_queues())).await
    }

    async fn pause_allocations(
        &self,
        req: Request<pb::PauseAllocationsRequest>,
    ) -> Result<Response<pb::ListAllocationsReply>, Status> {
        let who = caller(&req)?;
        require_admin(&who, "pausing or resuming an allocation queue")?;
        let r = req.into_inner();
        if r.queue.len() > 32 {
            return Err(Status::invalid_argument(
                "queue: a queue name is at most 32 characters",
            ));
        }
        with_state(&self.0, &self.2, Run::Blocking, move |s| {
            let _audit = who.span();
            s.pause_allocations(&r.queue, r.paused)?;
            Ok(s.allocation_queues())
        })
        .await
    }

    async fn check_allocations(
        &self,
        req: Request<pb::CheckAllocationsRequest>,
    ) -> Result<Response<pb::CheckAllocationsReply>, Status> {
        let who = caller(&req)?;
        require_admin(&who, "checking the allocation queues")?;
        let name = req.into_inner().queue;
        // Queue names are at most 32 characters (`allocation::QueueConfig::validate`).
        if name.len() > 32 {
            return Err(Status::invalid_argument(
                "queue: a queue name is at most 32 characters",
            ));
        }
        let queues: Vec<_> = read_state(&self.0, |s| {
            Ok(s.allocations().into_iter().map(|q| q.queue).collect())
        })
        .await?
        .into_inner();
        if queues.is_empty() {
            return Err(Status::failed_precondition(
                "no automatic allocation: the server's configuration has no [[allocation]] queue",
            ));
        }
        let names: Vec<&str> = queues.iter().map(|q| q.config.name.as_str()).collect();
        if !name.is_empty() && !names.contains(&name.as_str()) {
            return Err(Status::not_found(format!(
                "no allocation queue `{}`: the server's queues are {}",
                hetsched_core::text::clip(&name),
                names.join(", ")
            )));
        }
        let mut checks = Vec::new();
        // One at a time: each is a batch-system command or two, bounded by its timeout.
        for q in queues
            .iter()
            .filter(|q| name.is_empty() || q.config.name == name)
        {
            let (answer, script) = q.check().await;
            let (ok, message) = match answer {
                Ok(m) => (true, m),
                Err(e) => (false, e),
            };
            checks.push(pb::AllocationCheck {
                queue: q.config.name.clone(),
                ok,
                message,
                script,
            });
        }
        Ok(Response::new(pb::CheckAllocationsReply { checks }))
    }

    async fn remove_node(
        &self,
        req: Request<pb::RemoveNodeRequest>,
    ) -> Result<Response<pb::RemoveNodeReply>, Status> {
        let who = caller(&req)?;
        require_admin(&who, "removing a node")?;
        let name = req.into_inner().name;
        with_state(&self.0, &self.2, Run::Blocking, move |s| {
            let _audit = who.span();
            s.remove_node(&name)
                .map(|node_id| pb::RemoveNodeReply { node_id })
        })
        .await
    }

    async fn cancel(
        &self,
        req: Request<pb::CancelRequest>,
    ) -> Result<Response<pb::CancelReply>, Status> {
        let who = caller(&req)?;
        let r = req.into_inner();
        if r.indices.is_empty() && r.app.is_empty() {
            return with_state(&self.0, &self.2, Run::Blocking, move |s| {
                let _audit = who.span();
                s.authorize(&who, r.job_id, "cancel it")?;
                let kind = s.job_kind(r.job_id).map(|k| k.as_str().to_string());
                s.on_cancel_by(r.job_id, &who.name)
                    .map(|cancelled| pb::CancelReply {
                        cancelled,
                        kind: kind.unwrap_or_default(),
                    })
            })
            .await;
        }
        use hetsched_core::input::limits::MAX_APP_NAME;
        if r.indices.len() > MAX_CANCEL_INDICES_BYTES || r.app.len() > MAX_APP_NAME {
            return Err(Status::invalid_argument(format!(
                "--tasks is at most {MAX_CANCEL_INDICES_BYTES} bytes and --app at most {MAX_APP_NAME}"
            )));
        }
        if r.indices.is_empty() {
            return Err(Status::invalid_argument(
                "--app picks the application of --tasks: give --tasks too",
            ));
        }
        with_state(&self.0, &self.2, Run::Blocking, move |s| {
            let _audit = who.span();
            s.authorize(&who, r.job_id, "cancel its tasks")?;
            s.cancel_tasks_by(r.job_id, &r.app, &r.indices, &who.name)
        })
        .await
    }

    async fn signal(
        &self,
        req: Request<pb::SignalRequest>,
    ) -> Result<Response<pb::SignalReply>, Status> {
        let who = caller(&req)?;
        let r = req.into_inner();
        use hetsched_core::input::limits::MAX_APP_NAME;
        if r.indices.len() > MAX_CANCEL_INDICES_BYTES
            || r.app.len() > MAX_APP_NAME
            || r.signal.len() > 16
        {
            return Err(Status::invalid_argument(format!(
                "--tasks is at most {MAX_CANCEL_INDICES_BYTES} bytes, --app at most {MAX_APP_NAME} \
                 and --signal at most 16"
            )));
        }
        with_state(&self.0, &self.2, Run::Blocking, move |s| {
            let _audit = who.span();
            s.authorize(&who, r.job_id, "signal its tasks")?;
            s.signal(&r)
        })
        .await
    }

    async fn update(
        &self,
        req: Request<pb::UpdateRequest>,
    ) -> Result<Response<pb::UpdateReply>, Status> {
        let who = caller(&req)?;
        let r = req.into_inner();
        use hetsched_core::input::limits::MAX_APP_NAME;
        if r.app.len() > MAX_APP_NAME {
            return Err(Status::invalid_argument(format!(
                "--app is at most {MAX_APP_NAME} bytes"
            )));
        }
        with_state(&self.0, &self.2, Run::Blocking, move |s| {
            let _audit = who.span();
            s.authorize(&who, r.job_id, "update it")?;
            if let Some(p) = r.priority {
                s.check_priority(&who.name, p, "--priority")?;
            }
            s.update(&r)
        })
        .await
    }

    async fn hold(&self, req: Request<pb::HoldRequest>) -> Result<Response<pb::HoldReply>, Status> {
        let who = caller(&req)?;
        let r = req.into_inner();
        with_state(&self.0, &self.2, Run::Blocking, move |s| {
            let _audit = who.span();
            s.authorize(&who, r.job_id, "hold or release it")?;
            s.hold(r.job_id, r.hold)
        })
        .await
    }

    async fn purge(
        &self,
        req: Request<pb::PurgeRequest>,
    ) -> Result<Response<pb::PurgeReply>, Status> {
        let who = caller(&req)?;
        let mut sel: crate::state::types::PurgeSelection = (&req.into_inner()).into();
        // A user's `--older-than` and `--keep` pick among its own jobs; the ids it names must
        // be its own.
        if !who.admin {
            sel.owner = Some(who.name.to_string());
        }
        let (reply, target, failures, mut progress) =
            with_state(&self.0, &self.2, Run::Blocking, move |s| {
                let _audit = who.span();
                let purged = s.on_purge(&sel)?;
                let (target, progress) = s.purge_progress();
                let failures = progress.borrow().failures;
                Ok((purged, target, failures, progress))
            })
            .await?
            .into_inner();
        // The jobs are purged for every reader; the purger task deletes the rest of their task
        // rows in steps, releasing the state between them. The reply waits for it so that it
        // still means what it did when one transaction deleted everything: the rows are gone
        // and their pages given back. A client that stops waiting loses nothing (the purger
        // goes on, and a restart finishes it); a step the store refuses ends the wait, and so
        // does the server stopping (the purger stops first).
        let mut stopping = self.4.clone();
        if !*stopping.borrow() {
            tokio::select! {
                _ = progress.wait_for(|p| p.deleted >= target || p.failures > failures) => {}
                _ = stopping.changed() => {}
            }
        }
        Ok(Response::new(reply.into()))
    }

    async fn add_user(
        &self,
        req: Request<pb::AddUserRequest>,
    ) -> Result<Response<pb::AddUserReply>, Status> {
        let who = caller(&req)?;
        require_admin(&who, "adding a user")?;
        let r = req.into_inner();
        with_state(&self.0, &self.2, Run::Blocking, move |s| {
            let _audit = who.span();
            if let Some(n) = r.shares {
                check_shares(n)?;
            }
            let token = s.on_add_user(&r.name, r.rotate)?;
            let caps = CapChange {
                max_cores: r.max_cores,
                max_memory_bytes: r.max_memory_bytes,
                max_gpus: r.max_gpus,
            };
            if !caps.is_empty() {
                s.on_limit_user(&r.name, caps)?;
            }
            if let Some(n) = r.shares {
                s.on_share_user(&r.name, n)?;
            }
            if let Some(p) = r.max_priority {
                s.on_priority_limit_user(&r.name, Some(p))?;
            }
            Ok(pb::AddUserReply {
                name: r.name,
                token,
            })
        })
        .await
    }

    async fn remove_user(
        &self,
        req: Request<pb::RemoveUserRequest>,
    ) -> Result<Response<pb::RemoveUserReply>, Status> {
        let who = caller(&req)?;
        require_admin(&who, "removing a user")?;
        let name = req.into_inner().name;
        if name.len() > crate::users::MAX_NAME {
            return Err(Status::invalid_argument(format!(
                "name: a user name is at most {} characters",
                crate::users::MAX_NAME
            )));
        }
        with_state(&self.0, &self.2, Run::Blocking, move |s| {
            let _audit = who.span();
            s.on_remove_user(&name)
                .map(|unfinished_jobs| pb::RemoveUserReply { unfinished_jobs })
        })
        .await
    }

    async fn list_users(
        &self,
        req: Request<pb::ListUsersRequest>,
    ) -> Result<Response<pb::ListUsersReply>, Status> {
        let who = caller(&req)?;
        require_admin(&who, "listing the users")?;
        // The dashboard's rows (`/api/users`), less the admin's own: `user list` lists users.
        read_state(&self.0, |s| {
            Ok(pb::ListUsersReply {
                users: s
                    .users_overview(&crate::users::Caller::admin())
                    .into_iter()
                    .filter(|u| !u.admin)
                    .map(Into::into)
                    .collect(),
            })
        })
        .await
    }

    async fn limit_user(
        &self,
        req: Request<pb::LimitUserRequest>,
    ) -> Result<Response<pb::UserInfo>, Status> {
        let who = caller(&req)?;
        require_admin(&who, "limiting a user")?;
        let r = req.into_inner();
        if r.name.len() > crate::users::MAX_NAME {
            return Err(Status::invalid_argument(format!(
                "name: a user name is at most {} characters",
                crate::users::MAX_NAME
            )));
        }
        with_state(&self.0, &self.2, Run::Blocking, move |s| {
            let _audit = who.span();
            let caps = CapChange {
                max_cores: r.max_cores,
                max_memory_bytes: r.max_memory_bytes,
                max_gpus: r.max_gpus,
            };
            if let Some(n) = r.shares {
                check_shares(n)?;
            }
            let priority = match (r.max_priority, r.no_max_priority) {
                (Some(_), true) => {
                    return Err(StateError::Invalid(
                        "max_priority: give a cap or none, not both".into(),
                    ));
                }
                (Some(p), false) => Some(Some(p)),
                (None, true) => Some(None),
                (None, false) => None,
            };
            // A limit names at least one thing: a cap (refused there when none is), shares or
            // a priority cap.
            if !caps.is_empty() || (r.shares.is_none() && priority.is_none()) {
                s.on_limit_user(&r.name, caps)?;
            }
            if let Some(n) = r.shares {
                s.on_share_user(&r.name, n)?;
            }
            if let Some(p) = priority {
                s.on_priority_limit_user(&r.name, p)?;
            }
            s.users_overview(&crate::users::Caller::admin())
                .into_iter()
                .find(|u| !u.admin && u.entry.name == r.name)
                .map(Into::into)
                .ok_or(StateError::NoUser(r.name))
        })
        .await
    }

    async fn who_am_i(
        &self,
        req: Request<pb::WhoAmIRequest>,
    ) -> Result<Response<pb::WhoAmIReply>, Status> {
        let who = caller(&req)?;
        Ok(Response::new(pb::WhoAmIReply {
            name: who.name.to_string(),
            admin: who.admin,
            server_version: crate::VERSION.to_string(),
        }))
    }

    async fn usage(
        &self,
        req: Request<pb::UsageRequest>,
    ) -> Result<Response<pb::UsageReply>, Status> {
        let who = caller(&req)?;
        let r = req.into_inner();
        let until = if r.until_day == 0 {
            crate::accounting::today()
        } else {
            r.until_day
        };
        crate::accounting::check_span(r.since_day, until, ["since_day", "until_day"])
            .map_err(Status::invalid_argument)?;
        // A user reads its own account only; the admin every owner's.
        let every_owner = who.admin;
        read_state(&self.0, move |s| {
            let rows = s.usage_for(&who, r.since_day, until)?;
            Ok(pb::UsageReply {
                rows: rows
                    .into_iter()
                    .map(|u| pb::UsageRow {
                        owner: u.owner,
                        day: u.day,
                        core_seconds: u.held.core_seconds,
                        gpu_seconds: u.held.gpu_seconds,
                        memory_byte_seconds: u.held.memory_byte_seconds,
                    })
                    .collect(),
                since_day: r.since_day,
                until_day: until,
                every_owner,
            })
        })
        .await
    }
}

/// Refuses fair-share shares out of 1 to [`crate::state::MAX_SHARES`] before anything is
/// changed.
fn check_shares(shares: u32) -> Result<(), StateError> {
    if (1..=crate::state::MAX_SHARES).contains(&shares) {
        Ok(())
    } else {
        Err(StateError::Invalid(format!(
            "shares: {shares} is not 1 to {}",
            crate::state::MAX_SHARES
        )))
    }
}

/// [`crate::state::require_admin`] as a call's answer.
fn require_admin(caller: &Caller, what: &'static str) -> Result<(), Status> {
    crate::state::require_admin(caller, what).map_err(status)
}

/// Longest index list `hetsched cancel --tasks` (or `signal --tasks`) may send (a range covers
/// many indices).
const MAX_CANCEL_INDICES_BYTES: usize = 64 << 10;

/// Who a call's token says the caller is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// A user: the `Client` service.
    Client,
    /// An agent: the `Agent` service.
    Agent,
}

/// Admits a call only with a token of the service's role: `authorization: Bearer <token>`.
/// A missing or unknown token is `Unauthenticated`; the other role's token is `PermissionDenied`
/// (a user cannot register a node or send heartbeats; an agent cannot read jobs). A client call
/// carries the admin token (`DATA_DIR/token`) or a user's ([`crate::users`]); the check puts
/// who it is, a [`Caller`], in the call's extensions for the handler.
#[derive(Clone)]
pub struct CheckToken {
    role: Role,
    client: Arc<str>,
    agent: Arc<str>,
    users: TokenIndex,
}

impl CheckToken {
    /// The check of the `role` service, knowing both credentials and the users' tokens.
    pub fn new(role: Role, creds: &Credentials, users: TokenIndex) -> Self {
        Self {
            role,
            client: pb::bearer(&creds.client).into(),
            agent: pb::bearer(&creds.agent).into(),
            users,
        }
    }

    /// The role `value` (the metadata's bytes) proves, if any, and who it is.
    fn role_of(&self, value: &[u8]) -> Option<(Role, Caller)> {
        // Both comparisons always run, so the time taken says nothing about which matched.
        let client = same(value, self.client.as_bytes());
        let agent = same(value, self.agent.as_bytes());
        match (client, agent) {
            (true, _) => Some((Role::Client, Caller::admin())),
            (_, true) => Some((Role::Agent, Caller::admin())),
            _ => crate::users::user_of_bearer(&self.users, value).map(|who| (Role::Client, who)),
        }
    }
}

/// What a user sees of other users' tasks in a listing (`hetsched tasks`, `/api/tasks`): their
/// states, nodes, times, exit codes, end reasons and the server's own words (`cancelled by the
/// admin`, `exited with status 3`), as Slurm's `squeue`/`sacct` show anyone's, but not the end
/// message of a start failure or of outputs missing, which names the owner's paths (`cannot
/// start `/home/alice/bin/prog``, a missing work directory, a capture file), and no output path.
/// Listings hold no commands, environments or outputs; the owner and the admin (and the
/// read-only token, which sees what the admin sees) get the whole task. `owners`: the owner of
/// each job the tasks belong to, read under the state's lock.
pub(crate) fn hide_others_tasks(
    who: &Caller,
    owners: &std::collections::HashMap<u64, String>,
    tasks: &mut [pb::TaskInfo],
) {
    if who.admin {
        return;
    }
    for t in tasks {
        if owners.get(&t.job_id).is_none_or(|o| **o != *who.name) {
            if matches!(t.reason.as_str(), "start_failed" | "outputs_missing") {
                t.message.clear();
            }
            t.output.clear();
        }
    }
}

/// The owners of the jobs `tasks` belong to, for [`hide_others_tasks`]; none for the admin.
pub(crate) fn owners_job_ids(who: &Caller, tasks: &[pb::TaskInfo]) -> Vec<u64> {
    if who.admin {
        return Vec::new();
    }
    let mut jobs: Vec<u64> = tasks.iter().map(|t| t.job_id).collect();
    jobs.sort_unstable();
    jobs.dedup();
    jobs
}

/// Who made a client call (put there by [`CheckToken`]).
pub(crate) fn caller<T>(req: &Request<T>) -> Result<Caller, Status> {
    req.extensions()
        .get::<Caller>()
        .cloned()
        .ok_or_else(|| Status::unauthenticated("the call carries no checked token"))
}

/// Compares without an early exit, so the time taken does not reveal the matching prefix.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

impl tonic::service::Interceptor for CheckToken {
    fn call(&mut self, mut req: Request<()>) -> Result<Request<()>, Status> {
        let Some(v) = req.metadata().get(pb::AUTH_HEADER) else {
            return Err(Status::unauthenticated(
                "missing token: send `authorization: Bearer <token>` (the tokens are in the server's data directory)",
            ));
        };
        // Read as the HTTP listener reads it (the scheme in any case, spaces around), then
        // compared in the one form the tokens are kept in.
        let value = v.to_str().ok().and_then(pb::bearer_token).map(pb::bearer);
        if value.is_none() {
            // Another scheme (`Basic <token>`), or none: the token is not even looked at.
            let text = v.to_str().unwrap_or("").trim();
            let scheme = text.split(' ').next().unwrap_or("");
            let said = if scheme.eq_ignore_ascii_case("bearer") {
                "the Bearer scheme but no token".to_string()
            } else if text.contains(' ') && scheme.chars().all(|c| c.is_ascii_alphanumeric()) {
                format!("the scheme `{}`", hetsched_core::text::clip(scheme))
            } else {
                "no scheme".to_string()
            };
            return Err(Status::unauthenticated(format!(
                "the authorization header has {said}: send `authorization: Bearer <token>` (the \
                 tokens are in the server's data directory)"
            )));
        }
        match value.and_then(|v| self.role_of(v.as_bytes())) {
            Some((r, who)) if r == self.role => {
                req.extensions_mut().insert(who);
                Ok(req)
            }
            Some((Role::Client, _)) => Err(Status::permission_denied(
                "a client's token (the admin's or a user's) cannot call the agent service: agents \
                 use DATA_DIR/agent-token",
            )),
            Some((Role::Agent, _)) => Err(Status::permission_denied(
                "the agent token cannot call the client service: users use DATA_DIR/token",
            )),
            None => Err(Status::unauthenticated(
                "wrong token: not the admin's (DATA_DIR/token), the agents' or a user's (the \
                 read-only DATA_DIR/read-token serves /metrics and the dashboard only)",
            )),
        }
    }
}

/// The connections the gRPC router serves, from `listener`: `TCP_NODELAY` (small
/// request/response messages: without it, Nagle's algorithm and delayed ACKs add tens of
/// milliseconds to every heartbeat round trip) and the kernel's TCP keepalive, sized from the
/// dead timeout so that a silent connection is probed after half of it and closed after about
/// one: an idle agent lives by its open `AwaitWork` call, and this is how the call of an agent
/// whose host vanished (no FIN) ends. The probes are the kernel's own — the server and the agent
/// processes never wake for them. Keepalive sees only vanished hosts, so the connections are
/// also guarded (`hetsched_proto::listen`): TLS with `tls`, a connection that has not sent its
/// greeting (handshake, HTTP/2 preface and first frame) within `limits.greeting` is closed, so
/// is one with no call open for `limits.idle`, and at most `limits.max_connections` are open at
/// once; and the router's HTTP/2 pings ([`router_with`]) close a peer that stays connected but
/// does not answer, within about ¾ of a dead timeout ([`http2_keepalive`]).
pub fn incoming(
    listener: tokio::net::TcpListener,
    dead_timeout: std::time::Duration,
    tls: Option<Arc<rustls::ServerConfig>>,
    limits: hetsched_proto::listen::Limits,
) -> hetsched_proto::listen::Incoming {
    let what = match listener.local_addr() {
        Ok(a) => format!("the gRPC listener {a}"),
        Err(_) => "the gRPC listener".to_string(),
    };
    let (idle, interval, probes) = tcp_keepalive(dead_timeout);
    let tcp = tonic::transport::server::TcpIncoming::from(listener)
        .with_nodelay(Some(true))
        .with_keepalive(Some(idle))
        .with_keepalive_interval(Some(interval))
        .with_keepalive_retries(Some(probes));
    hetsched_proto::listen::incoming(tcp, tls, limits, what)
}

/// Warns when `[tls] key` is readable by other users (a start and `hetsched server --check`
/// alike: the check said nothing of it): the key is the operator's file, so it is not changed.
pub fn warn_if_key_open(tls: &TlsConfig) {
    use std::os::unix::fs::MetadataExt;
    if let Ok(meta) = std::fs::metadata(&tls.key)
        && meta.mode() & 0o077 != 0
    {
        tracing::warn!(
            file = %tls.key.display(),
            mode = format!("{:o}", meta.mode() & 0o777),
            "the TLS private key is readable by other users: `chmod 600` it"
        );
    }
}

/// The gRPC listener's TLS from `[tls]`'s certificate chain and key (HTTP/2 by ALPN), with a
/// warning when the key is readable by other users.
pub fn grpc_tls(tls: &TlsConfig) -> Result<Arc<rustls::ServerConfig>, ServerError> {
    let read = |p: &std::path::Path| {
        std::fs::read(p).map_err(|source| ServerError::Io {
            path: p.to_path_buf(),
            source,
        })
    };
    warn_if_key_open(tls);
    hetsched_proto::listen::tls_config(&read(&tls.cert)?, &read(&tls.key)?)
        .map_err(|e| ServerError::Config(format!("[tls] for gRPC: {e}")))
}

/// TCP keepalive for a dead timeout: the idle time before the first probe, the time between
/// probes, and how many go unanswered before the kernel closes the connection. The kernel counts
/// in whole seconds, so each time is at least one.
pub fn tcp_keepalive(
    dead_timeout: std::time::Duration,
) -> (std::time::Duration, std::time::Duration, u32) {
    let second = std::time::Duration::from_secs(1);
    let whole = |d: std::time::Duration| std::time::Duration::from_secs(d.as_secs()).max(second);
    (whole(dead_timeout / 2), whole(dead_timeout / 4), 2)
}

/// HTTP/2 keepalive for a dead timeout: how long a connection is silent before the server
/// pings its peer, and how long the answer may take before the connection is closed. A frozen
/// agent (SIGSTOP, a hung process) holds its `AwaitWork` call open while its kernel still
/// answers TCP keepalive, and an open call keeps an idle node alive: only the peer process
/// answers a ping, so its call ends about `dead_timeout` × ¾ into the freeze and the node is
/// judged by its beats (dead a dead timeout later). Half and a quarter of the dead timeout, as
/// the TCP probes; at least 1 s and 2 s (a loaded host answers late), at most
/// [`hetsched_proto::listen::HTTP2_KEEPALIVE_INTERVAL`] and
/// [`hetsched_proto::listen::HTTP2_KEEPALIVE_TIMEOUT`]. A healthy idle agent wakes to answer a
/// ping every half dead timeout of silence, in its HTTP/2 task.
pub fn http2_keepalive(
    dead_timeout: std::time::Duration,
) -> (std::time::Duration, std::time::Duration) {
    use hetsched_proto::listen::{HTTP2_KEEPALIVE_INTERVAL, HTTP2_KEEPALIVE_TIMEOUT};
    let s = std::time::Duration::from_secs;
    (
        (dead_timeout / 2).clamp(s(1), HTTP2_KEEPALIVE_INTERVAL),
        (dead_timeout / 4).clamp(s(2), HTTP2_KEEPALIVE_TIMEOUT),
    )
}

/// The largest request message, encoded, that the server's services decode: 4 MiB (tonic's
/// default, set here so that it is a stated bound, not an accident of the library). The CLI
/// refuses a submission over the same size before sending it (`MESSAGE_LIMIT` in
/// `crates/cli/src/runtime/client.rs`); a client that sends one anyway gets `OutOfRange`
/// naming the size found and this limit, in bytes.
pub const MAX_REQUEST_BYTES: usize = 4 << 20;

/// The whole gRPC router: agent and client services behind the token check, and health, with
/// the [`LogRelay`] shared with the dashboard; `stopping` turns true when the server stops (calls
/// held open answer then). A vanished host's connection is closed by the kernel's TCP keepalive
/// ([`incoming`]), sized from the dead timeout; HTTP/2 pings, after half a dead timeout without a
/// frame from the peer ([`http2_keepalive`]), close one whose host still acknowledges but whose
/// peer says nothing (a frozen agent) — a connection held open for good otherwise, call or none.
pub async fn router_with(
    state: Shared,
    metrics: Arc<Metrics>,
    creds: &Credentials,
    relay: Arc<LogRelay>,
    stopping: tokio::sync::watch::Receiver<bool>,
) -> Result<tonic::transport::server::Router, ServerError> {
    let (durable, reader, users, dead_timeout) = {
        let s = state.lock().map_err(|_| ServerError::Poisoned)?;
        let reader = s.store_reader().unwrap_or_else(|e| {
            tracing::warn!("no read-only store connection ({e}): listings read under the lock");
            None
        });
        (
            s.durable(),
            reader.map(Arc::new),
            s.users_index(),
            s.dead_timeout(),
        )
    };
    durable.start();
    let (reporter, health) = tonic_health::server::health_reporter();
    reporter.set_serving::<AgentServer<AgentService>>().await;
    reporter.set_serving::<ClientServer<ClientService>>().await;
    // TLS is the listener's (`incoming`), so that one deadline covers the handshake too; HTTP/2
    // pings close a peer that stays connected but silent (`hetsched_proto::listen::server`),
    // sized from the dead timeout (`http2_keepalive`).
    let (ping_after, ping_timeout) = http2_keepalive(dead_timeout);
    let mut builder = hetsched_proto::listen::server()
        .http2_keepalive_interval(Some(ping_after))
        .http2_keepalive_timeout(Some(ping_timeout));
    let router = builder
        .add_service(health)
        .add_service(InterceptedService::new(
            AgentServer::new(AgentService(
                state.clone(),
                metrics,
                relay.clone(),
                durable.clone(),
                stopping.clone(),
            ))
            .max_decoding_message_size(MAX_REQUEST_BYTES),
            CheckToken::new(Role::Agent, creds, users.clone()),
        ))
        .add_service(InterceptedService::new(
            ClientServer::new(ClientService(
                state.clone(),
                relay.clone(),
                durable.clone(),
                reader,
                stopping.clone(),
            ))
            .max_decoding_message_size(MAX_REQUEST_BYTES),
            CheckToken::new(Role::Client, creds, users.clone()),
        ));
    Ok(router
        .add_service(InterceptedService::new(
            pb::divisible_server::DivisibleServer::new(
                crate::divisible_service::DivisibleService::new(state.clone(), durable, stopping),
            )
            .max_decoding_message_size(MAX_REQUEST_BYTES),
            CheckToken::new(Role::Agent, creds, users.clone()),
        ))
        .add_service(InterceptedService::new(
            pb::divisible_client_server::DivisibleClientServer::new(
                crate::divisible_service::DivisibleClientService(state, relay),
            )
            .max_decoding_message_size(MAX_REQUEST_BYTES),
            CheckToken::new(Role::Client, creds, users.clone()),
        )))
}
