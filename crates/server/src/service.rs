//! The gRPC services: `Agent` (register, heartbeat) and `Client` (submit, jobs, tasks, nodes,
//! cancel), both behind a token check, plus the standard gRPC health service (unauthenticated, so
//! load balancers and `grpc_health_probe` can use it).
//!
//! Handlers take the state's lock inside `block_in_place`: a heartbeat may commit to SQLite, and an
//! fsync must not stall the other async tasks of the worker it runs on.

use crate::ServerError;
use crate::config::TlsConfig;
use crate::metrics::Metrics;
use crate::state::{State, StateError};
use hetsched_proto as pb;
use hetsched_proto::agent_server::{Agent, AgentServer};
use hetsched_proto::client_server::{Client, ClientServer};
use std::sync::{Arc, Mutex};
use tonic::{Request, Response, Status};

type Shared = Arc<Mutex<State>>;

fn status(e: StateError) -> Status {
    match e {
        StateError::Input(e) => Status::invalid_argument(e.to_string()),
        StateError::Invalid(m) => Status::invalid_argument(m),
        StateError::NoJob(j) => Status::not_found(format!("no job {j}")),
        e => {
            tracing::error!("{e}");
            Status::internal(e.to_string())
        }
    }
}

async fn with_state<T: Send + 'static>(
    state: &Shared,
    f: impl FnOnce(&mut State) -> Result<T, StateError> + Send + 'static,
) -> Result<Response<T>, Status> {
    // `block_in_place` (not `spawn_blocking`): the handler runs on this worker thread, which the
    // runtime replaces while it may block on the lock or an fsync — no hand-off to another thread.
    let run = || {
        let mut guard = state
            .lock()
            .map_err(|_| Status::internal("server state poisoned"))?;
        f(&mut guard).map_err(status)
    };
    let multi_thread = tokio::runtime::Handle::current().runtime_flavor()
        == tokio::runtime::RuntimeFlavor::MultiThread;
    if multi_thread {
        tokio::task::block_in_place(run)
    } else {
        run() // a current-thread runtime (tests) cannot hand its only worker over
    }
    .map(Response::new)
}

/// The `Agent` service; heartbeats are counted and timed in its [`Metrics`].
pub struct AgentService(Shared, Arc<Metrics>);

#[tonic::async_trait]
impl Agent for AgentService {
    async fn register(
        &self,
        req: Request<pb::RegisterRequest>,
    ) -> Result<Response<pb::RegisterReply>, Status> {
        let r = req.into_inner();
        with_state(&self.0, move |s| s.register(r)).await
    }

    async fn heartbeat(
        &self,
        req: Request<pb::HeartbeatRequest>,
    ) -> Result<Response<pb::HeartbeatReply>, Status> {
        let start = std::time::Instant::now();
        let r = req.into_inner();
        let reply = with_state(&self.0, move |s| s.heartbeat(r)).await;
        self.1.heartbeat(start.elapsed());
        reply
    }
}

/// The `Client` service.
pub struct ClientService(Shared);

#[tonic::async_trait]
impl Client for ClientService {
    async fn submit(
        &self,
        req: Request<pb::SubmitRequest>,
    ) -> Result<Response<pb::SubmitReply>, Status> {
        let r = req.into_inner();
        with_state(&self.0, move |s| {
            s.submit_keyed(&r.origin, &r.text, &r.workdir, &r.submission_key)
        })
        .await
    }

    async fn list_jobs(
        &self,
        _: Request<pb::ListJobsRequest>,
    ) -> Result<Response<pb::ListJobsReply>, Status> {
        with_state(&self.0, |s| Ok(s.jobs())).await
    }

    async fn get_job(
        &self,
        req: Request<pb::GetJobRequest>,
    ) -> Result<Response<pb::JobInfo>, Status> {
        let id = req.into_inner().job_id;
        with_state(&self.0, move |s| s.job(id)).await
    }

    async fn list_tasks(
        &self,
        req: Request<pb::ListTasksRequest>,
    ) -> Result<Response<pb::ListTasksReply>, Status> {
        let id = req.into_inner().job_id;
        with_state(&self.0, move |s| s.tasks(id)).await
    }

    async fn list_nodes(
        &self,
        _: Request<pb::ListNodesRequest>,
    ) -> Result<Response<pb::ListNodesReply>, Status> {
        with_state(&self.0, |s| Ok(s.nodes())).await
    }

    async fn cancel(
        &self,
        req: Request<pb::CancelRequest>,
    ) -> Result<Response<pb::CancelReply>, Status> {
        let id = req.into_inner().job_id;
        with_state(&self.0, move |s| s.cancel(id)).await
    }
}

/// Refuses calls without `authorization: Bearer <token>`.
#[derive(Clone)]
pub struct CheckToken {
    expected: Arc<str>,
}

impl CheckToken {
    /// A check for `token`.
    pub fn new(token: &str) -> Self {
        Self {
            expected: pb::bearer(token).into(),
        }
    }
}

/// Compares without an early exit, so the time taken does not reveal the matching prefix.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

impl tonic::service::Interceptor for CheckToken {
    fn call(&mut self, req: Request<()>) -> Result<Request<()>, Status> {
        match req.metadata().get(pb::AUTH_HEADER) {
            Some(v) if same(v.as_bytes(), self.expected.as_bytes()) => Ok(req),
            Some(_) => Err(Status::unauthenticated("wrong token")),
            None => Err(Status::unauthenticated(
                "missing token: send `authorization: Bearer <token>` (the token is in the server's data directory)",
            )),
        }
    }
}

/// The whole gRPC router: agent and client services behind the token check, and health.
pub async fn router(
    state: Shared,
    metrics: Arc<Metrics>,
    token: &str,
    tls: Option<&TlsConfig>,
) -> Result<tonic::transport::server::Router, ServerError> {
    let (reporter, health) = tonic_health::server::health_reporter();
    reporter.set_serving::<AgentServer<AgentService>>().await;
    reporter.set_serving::<ClientServer<ClientService>>().await;
    let check = CheckToken::new(token);
    let mut builder = tonic::transport::Server::builder();
    if let Some(tls) = tls {
        let read = |p: &std::path::Path| {
            std::fs::read(p).map_err(|source| ServerError::Io {
                path: p.to_path_buf(),
                source,
            })
        };
        let identity = tonic::transport::Identity::from_pem(read(&tls.cert)?, read(&tls.key)?);
        builder =
            builder.tls_config(tonic::transport::ServerTlsConfig::new().identity(identity))?;
    }
    Ok(builder
        .add_service(health)
        .add_service(AgentServer::with_interceptor(
            AgentService(state.clone(), metrics),
            check.clone(),
        ))
        .add_service(ClientServer::with_interceptor(ClientService(state), check)))
}
