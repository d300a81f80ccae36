//! The topology services at the gRPC edge (`TopologyClient`, `TopologyAgent`): protobuf in,
//! the topology kind's own types through the state ([`crate::state::State::topology_submit`]
//! and the rest), protobuf out. Every call runs under the state's lock like the batch services
//! ([`crate::service::with_state`]) and answers once what it wrote is durable. The controller's
//! tick (every 250 ms while a topology runs or waits to be placed; none otherwise) runs here
//! too. A sync from an agent running no worker may be held until the server has one for it
//! (`hold_ms`), so an idle cluster costs the server a call per agent every few seconds.

use crate::durable::Durable;
use crate::jobs::topology::{
    TopologyError, TopologySubmission, WorkerSeen, WorkerStartError, WorkersSeen, WorkersToRun,
};
use crate::service::{Run, Shared, with_state};
use crate::state::nodes::Presence;
use hetsched_proto as pb;
use hetsched_stream::WorkerReport;
use hetsched_stream::metrics::{ExecutorReport, LatencySummary, PairCount};
use std::sync::Arc;
use std::time::Duration;
use tonic::{Request, Response, Status};

/// The gRPC status of a refused topology request.
pub fn status(e: TopologyError) -> Status {
    match e {
        TopologyError::Invalid(m) => Status::invalid_argument(m),
        TopologyError::NotFound(m) => Status::not_found(m),
        TopologyError::Exists(m) => Status::already_exists(m),
        TopologyError::Precondition(m) => Status::failed_precondition(m),
    }
}

fn submission(r: pb::SubmitTopologyRequest) -> TopologySubmission {
    TopologySubmission {
        origin: r.origin,
        text: r.text,
        base_dir: r.base_dir,
        placer: r.placer,
        workers: r.workers,
        interval_ms: r.interval_ms,
        gain_threshold: r.gain_threshold,
        max_utilisation: r.max_utilisation,
    }
}

fn workers_seen(r: pb::SyncWorkersRequest) -> WorkersSeen {
    WorkersSeen {
        restated: false,
        start_errors: r
            .start_errors
            .into_iter()
            .map(|e| WorkerStartError {
                topology: e.topology,
                generation: e.generation,
                worker: e.worker,
                message: e.message,
            })
            .collect(),
        node: r.node,
        cores: r.cores,
        // Set by the state from the agent's registration.
        attributes: Vec::new(),
        workers: r
            .workers
            .into_iter()
            .map(|w| WorkerSeen {
                topology: w.topology,
                generation: w.generation,
                worker: w.worker,
                addr: w.addr,
                pid: w.pid,
                report: w.report.map(report),
            })
            .collect(),
    }
}

/// A worker's counters as the topology kind reads them.
fn report(c: pb::WorkerCounters) -> WorkerReport {
    let latency = c.latency.unwrap_or_default();
    WorkerReport {
        worker: c.worker,
        at_ns: c.at_ns,
        pairs: c
            .pairs
            .into_iter()
            .map(|p| PairCount {
                from: p.from,
                to: p.to,
                tuples: p.tuples,
            })
            .collect(),
        executors: c
            .executors
            .into_iter()
            .map(|e| ExecutorReport {
                executor: e.executor,
                name: e.name,
                cpu_ns: e.cpu_ns,
                emitted: e.emitted,
                received: e.received,
                acked: e.acked,
                failed: e.failed,
                done: e.done,
                started_ns: e.started_ns,
                unacked: e.unacked,
                expired: e.expired,
                restarts: e.restarts,
                ended: e.ended,
                gave_up: e.gave_up,
            })
            .collect(),
        remote_out: c.remote_out,
        remote_in: c.remote_in,
        dropped: c.dropped,
        latency: LatencySummary {
            count: latency.count,
            p50_us: latency.p50_us,
            p99_us: latency.p99_us,
            max_us: latency.max_us,
        },
        rss_bytes: c.rss_bytes,
        encrypted: c.encrypted,
        refused_connections: c.refused_connections,
    }
}

fn to_run(r: WorkersToRun) -> pb::SyncWorkersReply {
    pb::SyncWorkersReply {
        workers: r
            .workers
            .into_iter()
            .map(|w| pb::WorkerAssignment {
                topology: w.topology,
                generation: w.generation,
                worker: w.worker,
                config: Some(pb::WorkerSpec {
                    topology_origin: w.config.topology_origin,
                    topology_text: w.config.topology_text,
                    worker: w.config.worker,
                    assignment: w.config.assignment,
                    base_dir: w.config.base_dir.to_string_lossy().into_owned(),
                    started_ns: w.config.started_ns,
                    await_state: w.config.await_state,
                }),
                peers: w.peers,
                keep_generation: w.keep_generation,
                keep_worker: w.keep_worker,
                run_as: w.run_as,
                cores: w.cores,
                ..Default::default()
            })
            .collect(),
        report_now: r.report_now,
    }
}

/// A status document as the typed message (its keys are the message's field names); `None`
/// if it does not fit, which would be a bug the JSON field still covers.
fn typed(v: &serde_json::Value) -> Option<pb::TopologyStatus> {
    serde_json::from_value(v.clone())
        .map_err(|e| tracing::error!("a topology status does not fit TopologyStatus: {e}"))
        .ok()
}

fn reply(v: Response<serde_json::Value>) -> Response<pb::TopologyReply> {
    let v = v.into_inner();
    Response::new(pb::TopologyReply {
        status: typed(&v),
        status_json: v.to_string(),
    })
}

/// The client-facing service; the relay reaches the agents' log listeners (`topology log`).
#[derive(Clone)]
pub struct ClientService(Shared, Arc<Durable>, Arc<crate::logs::LogRelay>);

/// The agent-facing service; the receiver turns true when the server stops (a held sync then
/// answers at once).
#[derive(Clone)]
pub struct AgentService(Shared, Arc<Durable>, tokio::sync::watch::Receiver<bool>);

#[tonic::async_trait]
impl pb::topology_client_server::TopologyClient for ClientService {
    async fn submit_topology(
        &self,
        r: Request<pb::SubmitTopologyRequest>,
    ) -> Result<Response<pb::TopologyReply>, Status> {
        let who = crate::service::caller(&r)?;
        let sub = submission(r.into_inner());
        with_state(&self.0, &self.1, Run::Blocking, move |s| {
            let _audit = who.span();
            s.topology_submit_as(sub, &who.name)
        })
        .await
        .map(reply)
    }
    async fn list_topologies(
        &self,
        _r: Request<pb::ListTopologiesRequest>,
    ) -> Result<Response<pb::ListTopologiesReply>, Status> {
        let list = with_state(&self.0, &self.1, Run::Blocking, |s| Ok(s.topology_list())).await?;
        let list = list.into_inner();
        Ok(Response::new(pb::ListTopologiesReply {
            statuses: list
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(typed)
                .collect(),
            statuses_json: list.to_string(),
        }))
    }
    async fn worker_log(
        &self,
        r: Request<pb::WorkerLogRequest>,
    ) -> Result<Response<pb::ReadLogReply>, Status> {
        let who = crate::service::caller(&r)?;
        // Counted among the caller's calls in flight until answered (it calls an agent).
        let _slot = self.2.calls.enter(&who.name, "WorkerLog")?;
        let r = r.into_inner();
        let name = r.name.clone();
        let (generation, started_as, node, run_as) =
            crate::service::read_state(&self.0, move |s| {
                s.check_topology_owner(&who.name, &name, "read its workers' logs")?;
                s.topology_worker(&name, r.worker)
            })
            .await?
            .into_inner();
        let req = pb::AgentLogRequest {
            topology: r.name.clone(),
            generation,
            worker: started_as,
            run_as,
            offset: r.offset,
            limit: r.limit.min(crate::logs::MAX_PAGE),
            ..Default::default()
        };
        self.2.read_from(&node, req).await.map(Response::new)
    }
    async fn purge_topology(
        &self,
        r: Request<pb::TopologyName>,
    ) -> Result<Response<pb::PurgeTopologyReply>, Status> {
        let who = crate::service::caller(&r)?;
        let name = r.into_inner().name;
        with_state(&self.0, &self.1, Run::Blocking, move |s| {
            let _audit = who.span();
            s.check_topology_owner(&who.name, &name, "purge it")?;
            s.topology_purge(&name)?;
            Ok(pb::PurgeTopologyReply { name })
        })
        .await
    }
    async fn show_topology(
        &self,
        r: Request<pb::TopologyName>,
    ) -> Result<Response<pb::TopologyReply>, Status> {
        let name = r.into_inner().name;
        with_state(&self.0, &self.1, Run::Blocking, move |s| {
            s.topology_show(&name)
        })
        .await
        .map(reply)
    }
    async fn kill_topology(
        &self,
        r: Request<pb::TopologyName>,
    ) -> Result<Response<pb::TopologyReply>, Status> {
        let who = crate::service::caller(&r)?;
        let name = r.into_inner().name;
        with_state(&self.0, &self.1, Run::Blocking, move |s| {
            let _audit = who.span();
            s.check_topology_owner(&who.name, &name, "kill it")?;
            s.topology_kill(&name)
        })
        .await
        .map(reply)
    }
    async fn rebalance_topology(
        &self,
        r: Request<pb::TopologyName>,
    ) -> Result<Response<pb::TopologyReply>, Status> {
        let who = crate::service::caller(&r)?;
        let name = r.into_inner().name;
        with_state(&self.0, &self.1, Run::Blocking, move |s| {
            let _audit = who.span();
            s.check_topology_owner(&who.name, &name, "rebalance it")?;
            s.topology_rebalance(&name)
        })
        .await
        .map(reply)
    }
}

#[tonic::async_trait]
impl pb::topology_agent_server::TopologyAgent for AgentService {
    async fn sync_workers(
        &self,
        r: Request<pb::SyncWorkersRequest>,
    ) -> Result<Response<pb::SyncWorkersReply>, Status> {
        let from = r.remote_addr().map(|a| a.ip());
        let r = r.into_inner();
        let hold_ms = r.hold_ms;
        // Only the node's own agent speaks for its workers (as its heartbeats must prove):
        // checked at every look, in the event that takes the report.
        let identity = r.identity.clone();
        let seen = workers_seen(r);
        // An agent running no worker has nothing to report: while the answer names no worker
        // for it either, the call is held until where workers run changes (or the hold ends),
        // then looked at again.
        let may_hold = hold_ms > 0 && seen.workers.is_empty();
        // Held, the open call keeps the node alive in the kind (`Topology::held`).
        let presence = may_hold.then(|| Presence::Workers(seen.node.clone()));
        // Looked at again after a wait, the call's lists are as old as the call: an agent
        // started again meanwhile may run workers this one did not (`WorkersSeen::restated`).
        let looked = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let answer = crate::service::held_event(
            &self.0,
            &self.1,
            &self.2,
            Some(Duration::from_millis(hold_ms)),
            presence,
            move |s| {
                s.prove_agent(&seen.node, &identity)?;
                let (changes, hold) = s.topology_changes();
                let mut seen = seen.clone();
                seen.restated = looked.swap(true, std::sync::atomic::Ordering::Relaxed);
                Ok((s.topology_sync(seen, from)?, changes, hold))
            },
            |answer| !may_hold || !answer.workers.is_empty(),
        )
        .await?;
        Ok(Response::new(to_run(answer)))
    }
}

/// Adds the topology services (behind the token checks) to the server's router and starts the
/// controller's tick.
pub fn add_services(
    router: tonic::transport::server::Router,
    state: Shared,
    durable: Arc<Durable>,
    creds: &crate::datadir::Credentials,
    relay: Arc<crate::logs::LogRelay>,
    stopping: tokio::sync::watch::Receiver<bool>,
) -> tonic::transport::server::Router {
    let users = state.lock().map(|s| s.users_index()).unwrap_or_default();
    let (ticker, d) = (state.clone(), durable.clone());
    tokio::spawn(async move {
        let mut every = tokio::time::interval(Duration::from_millis(250));
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            // When this pass was due: how late it runs, waiting for the state included, is
            // the server's own stall (the monotonic clock runs on while it is stopped).
            let due = every.tick().await.into_std();
            let (s, d) = (ticker.clone(), d.clone());
            let idle = tokio::task::spawn_blocking(move || {
                let (written, idle) = match s.lock() {
                    Ok(mut st) => {
                        // Before the pass judges any node: this timer may run before the
                        // reaper after a stop, and the syncs queued meanwhile are not read.
                        let timeout = st.dead_timeout();
                        st.server_stalled(timeout, due.elapsed());
                        if let Err(e) = st.topology_tick() {
                            tracing::error!("topology controller: {e}");
                        }
                        // Subscribed under the lock that saw no topology: a submission after
                        // it is seen.
                        let idle = (!st.topology_running()).then(|| st.topology_changes().0);
                        (st.written(), idle)
                    }
                    Err(_) => return None,
                };
                // What the tick wrote (a new placement, the traffic list) is synced like every
                // other event's writes; a failed sync rolls back and pauses.
                if let Err(e) = d.wait_blocking(written)
                    && let Ok(mut st) = s.lock()
                {
                    st.sync_failed(&e);
                }
                idle
            })
            .await;
            // No topology runs or waits: nothing to tick until one is submitted (or restored
            // by a rollback).
            if let Ok(Some(mut changes)) = idle {
                if changes.changed().await.is_err() {
                    return;
                }
                // The ticks missed while idle are no lateness: the next is a period from now.
                every.reset();
            }
        }
    });
    router
        .add_service(tonic::service::interceptor::InterceptedService::new(
            pb::topology_client_server::TopologyClientServer::new(ClientService(
                state.clone(),
                durable.clone(),
                relay,
            ))
            .max_decoding_message_size(crate::service::MAX_REQUEST_BYTES),
            crate::service::CheckToken::new(crate::service::Role::Client, creds, users.clone()),
        ))
        .add_service(tonic::service::interceptor::InterceptedService::new(
            pb::topology_agent_server::TopologyAgentServer::new(AgentService(
                state, durable, stopping,
            ))
            .max_decoding_message_size(crate::service::MAX_REQUEST_BYTES),
            crate::service::CheckToken::new(crate::service::Role::Agent, creds, users),
        ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An agent's report of a multi-lang executor keeps what the worker said of its program
    /// (`topology show` and `/metrics` read it from here).
    #[test]
    fn a_reported_executor_keeps_its_programs_restarts_and_unacked_inputs() {
        let r = report(pb::WorkerCounters {
            executors: vec![pb::ExecutorCounters {
                executor: 1,
                name: "sink#0".into(),
                unacked: 7,
                expired: 3,
                restarts: 2,
                ended: Some("sink#0: the program exited (exit status: 3)".into()),
                gave_up: true,
                ..Default::default()
            }],
            ..Default::default()
        });
        let e = &r.executors[0];
        assert_eq!(
            (e.unacked, e.expired, e.restarts, e.gave_up),
            (7, 3, 2, true)
        );
        assert_eq!(
            e.ended.as_deref(),
            Some("sink#0: the program exited (exit status: 3)")
        );
    }
}
