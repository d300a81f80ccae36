//! The gRPC edge of divisible jobs ([`crate::jobs::divisible`]): the `Divisible` service
//! (agents: next chunk, chunk input, chunk result) and the `DivisibleClient` service (users: the
//! gathered output), and the conversions between the wire's messages and the kind's own types,
//! so protobuf stays at the service edge.
//!
//! Chunks' bytes are the one thing of a divisible job that does not go through the state: the
//! handlers take the state's lock (through the same `with_state`/`read_state` as every other
//! call, so replies wait for the store's sync) only to ask where a chunk's input is or to record
//! a result, and stream the bytes outside it. The one port is a lock of this service: one
//! chunk's input is streamed at a time.

use crate::durable::Durable;
use crate::jobs::divisible::{ChunkKey, ChunkRequest, ChunkResult, DivError, DivisibleInfo, PIECE};
use crate::service::{Run, read_state, with_state};
use crate::state::State;
use crate::state::nodes::Presence;
use hetsched_proto as pb;
use std::io::Write;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use tonic::{Request, Response, Status};

type Shared = Arc<Mutex<State>>;

/// A refusal as a gRPC status.
pub fn status(e: DivError) -> Status {
    match e {
        DivError::Invalid(m) => Status::invalid_argument(m),
        DivError::NotFound(m) => Status::not_found(m),
        DivError::NotReady(m) => Status::failed_precondition(m),
        e @ DivError::Internal(_) => Status::internal(e.to_string()),
    }
}

fn internal(e: impl std::fmt::Display) -> Status {
    status(DivError::Internal(e.to_string()))
}

/// A divisible job's view as the `divisible` message of its `JobInfo`.
pub fn info_to_pb(i: DivisibleInfo) -> pb::DivisibleInfo {
    pb::DivisibleInfo {
        name: i.name,
        algo: i.algo,
        units: i.units,
        units_done: i.units_done,
        lower_bound_s: i.lower_bound_s,
        message: i.message,
        workers: i
            .workers
            .into_iter()
            .map(|w| pb::DivisibleWorker {
                name: w.name,
                speed: w.speed,
                compute_latency: w.compute_latency,
                bandwidth: w.bandwidth,
                network_latency: w.network_latency,
                memory_units: w.memory_units,
                units_done: w.units_done,
                chunks_done: w.chunks_done,
                alive: w.alive,
            })
            .collect(),
        chunks: i
            .chunks
            .into_iter()
            .map(|c| pb::DivisibleChunk {
                chunk: c.chunk,
                round: c.round,
                worker: c.worker,
                start: c.start,
                end: c.end,
                state: c.state,
                reason: c.reason,
                transfer_s: c.transfer_s,
                compute_s: c.compute_s,
            })
            .collect(),
        output_bytes: i.output_bytes,
        rounds: i.rounds,
        requires: i.requires,
    }
}

fn blocking<T>(f: impl FnOnce() -> T) -> T {
    if tokio::runtime::Handle::current().runtime_flavor()
        == tokio::runtime::RuntimeFlavor::MultiThread
    {
        tokio::task::block_in_place(f)
    } else {
        f()
    }
}

type DataStream =
    std::pin::Pin<Box<dyn tokio_stream::Stream<Item = Result<pb::ChunkData, Status>> + Send>>;

/// Streams `len` bytes of `path` from `offset`, holding `guard` (the port) until the last piece
/// has been handed over.
fn stream_file<G: Send + 'static>(path: PathBuf, offset: u64, len: u64, guard: G) -> DataStream {
    let (tx, rx) = tokio::sync::mpsc::channel(1);
    tokio::task::spawn_blocking(move || {
        use std::io::{Read, Seek};
        let _port = guard;
        let mut f = match std::fs::File::open(&path) {
            Ok(f) => f,
            Err(e) => {
                let _ = tx.blocking_send(Err(internal(format!("{}: {e}", path.display()))));
                return;
            }
        };
        if let Err(e) = f.seek(std::io::SeekFrom::Start(offset)) {
            let _ = tx.blocking_send(Err(internal(e)));
            return;
        }
        let mut left = len;
        let mut buf = vec![0u8; PIECE];
        while left > 0 {
            let n = (left as usize).min(PIECE);
            if let Err(e) = f.read_exact(&mut buf[..n]) {
                let _ = tx.blocking_send(Err(internal(format!("{}: {e}", path.display()))));
                return;
            }
            if tx
                .blocking_send(Ok(pb::ChunkData {
                    data: buf[..n].to_vec(),
                }))
                .is_err()
            {
                return;
            }
            left -= n as u64;
        }
    });
    Box::pin(tokio_stream::wrappers::ReceiverStream::new(rx))
}

/// The `Divisible` service (agents).
pub struct DivisibleService {
    state: Shared,
    durable: Arc<Durable>,
    /// The one port: held while a chunk's input is streamed.
    port: Arc<tokio::sync::Mutex<()>>,
    /// True once the server stops: asks held open are answered at once.
    stopping: tokio::sync::watch::Receiver<bool>,
}

impl DivisibleService {
    /// The service over `state`; replies wait for `durable`; `stopping` turns true when the
    /// server stops.
    pub fn new(
        state: Shared,
        durable: Arc<Durable>,
        stopping: tokio::sync::watch::Receiver<bool>,
    ) -> Self {
        DivisibleService {
            state,
            durable,
            port: Arc::new(tokio::sync::Mutex::new(())),
            stopping,
        }
    }
}

#[tonic::async_trait]
impl pb::divisible_server::Divisible for DivisibleService {
    async fn next_chunk(
        &self,
        req: Request<pb::NextChunkRequest>,
    ) -> Result<Response<pb::NextChunkReply>, Status> {
        let r = req.into_inner();
        let hold_ms = r.hold_ms;
        // Only the node's own agent asks for it (as its heartbeats must prove): checked at
        // every look, in the event that hands a chunk out.
        let identity = r.identity;
        let r = ChunkRequest {
            name: r.name,
            memory_bytes: r.memory_bytes,
            incarnation: r.incarnation,
            holding: r
                .holding
                .into_iter()
                .map(|k| ChunkKey {
                    job_id: k.job_id,
                    chunk: k.chunk,
                })
                .collect(),
            room: r.room,
            disk_short: r.disk_short,
            // Set by the state from the agent's registration, its node's drain and heartbeats.
            attributes: Vec::new(),
            drained: false,
            time_left: None,
            capped: Vec::new(),
        };
        // An ask with room that gets nothing (no job, or not this agent's turn in the plan) is
        // held open and looked at again when divisible jobs change and every look period: an
        // idle agent costs one call per hold, not one per poll, and a chunk goes out as soon as
        // it is this agent's turn.
        let room = r.room;
        // An agent holding no chunk may be held longer than a look period: the open call keeps
        // it present in the kind (`Divisible::held`). A chunk the server believes out on it is
        // judged lost at the first look, or, while the reply carrying it may still be on its
        // way, when that grace ends: the kind wakes held asks then (`Divisible::next_chunk`), so
        // the empty `holding` list is never left standing for the whole hold.
        let long = r.holding.is_empty() && hold_ms > 0;
        let answer_within = long.then(|| std::time::Duration::from_millis(hold_ms));
        let presence = long.then(|| Presence::Chunks(r.name.clone()));
        let reply = crate::service::held_event(
            &self.state,
            &self.durable,
            &self.stopping,
            answer_within,
            presence,
            move |s| {
                s.prove_agent(&r.name, &identity)?;
                let (changes, hold) = s.divisible_changes();
                Ok((s.on_next_chunk(r.clone())?, changes, hold))
            },
            |reply| !room || !reply.orders.is_empty() || !reply.drop.is_empty(),
        )
        .await?;
        Ok(Response::new(pb::NextChunkReply {
            orders: reply
                .orders
                .into_iter()
                .map(|o| pb::ChunkOrder {
                    job_id: o.job_id,
                    chunk: o.chunk,
                    round: o.round,
                    start: o.start,
                    end: o.end,
                    argv: o.argv,
                    input_bytes: o.input_bytes,
                    time_limit_ms: o.time_limit_ms,
                    name: o.name,
                    run_as: o.run_as,
                    job_nonce: o.job_nonce,
                })
                .collect(),
            drop: reply
                .drop
                .into_iter()
                .map(|k| pb::ChunkKey {
                    job_id: k.job_id,
                    chunk: k.chunk,
                })
                .collect(),
        }))
    }

    type ChunkInputStream = DataStream;

    async fn chunk_input(
        &self,
        req: Request<pb::ChunkInputRequest>,
    ) -> Result<Response<DataStream>, Status> {
        let r = req.into_inner();
        let key = ChunkKey {
            job_id: r.job_id,
            chunk: r.chunk,
        };
        // Only to the agent the chunk is out to.
        let (path, offset, len) = read_state(&self.state, move |s| {
            s.chunk_input_for(&r.name, &r.identity, &key)
        })
        .await?
        .into_inner();
        // One port: one chunk's input is streamed at a time.
        let guard = self.port.clone().lock_owned().await;
        Ok(Response::new(stream_file(path, offset, len, guard)))
    }

    async fn chunk_done(
        &self,
        req: Request<tonic::Streaming<pb::ChunkDonePiece>>,
    ) -> Result<Response<pb::ChunkDoneReply>, Status> {
        use pb::chunk_done_piece::Piece;
        let mut s = req.into_inner();
        let Some(Piece::Header(h)) = s.message().await?.and_then(|p| p.piece) else {
            return Err(Status::invalid_argument("ChunkDone starts with its header"));
        };
        let reason = crate::convert::chunk_end_reason(&h);
        let (node, identity) = (h.name, h.identity);
        let declared = h.output_bytes;
        // An agent's words, kept with the job and shown to every user: bounded and without
        // terminal escapes, as a task's result's.
        let mut message = h.message;
        crate::limits::clip_result_message(&mut message);
        let mut h = ChunkResult {
            job_id: h.job_id,
            chunk: h.chunk,
            success: h.success,
            message,
            transfer_ns: h.transfer_ns,
            compute_ns: h.compute_ns,
            reason,
        };
        // Only from the agent the chunk is out to: another caller is refused before its output
        // is taken, and again in the event that records it.
        {
            let (node, identity, h) = (node.clone(), identity.clone(), h.clone());
            read_state(&self.state, move |s| {
                s.check_chunk_done_from(&node, &identity, &h)
            })
            .await?;
        }
        // What it stores is bounded (it lands beside the store): more than a chunk may send is
        // refused before a byte is written, and a stream past what it declared is cut off, the
        // bytes taken so far removed; either way the chunk is recorded as failed, saying why.
        let mut over = (h.success && declared > pb::MAX_CHUNK_OUTPUT).then(|| {
            format!(
                "its output is {declared} bytes, more than the {} GiB of output one chunk may \
                 send the server",
                pb::MAX_CHUNK_OUTPUT >> 30
            )
        });
        let tmp = if h.success && over.is_none() {
            let dir = read_state(&self.state, |s| Ok(s.divisible_dir()))
                .await?
                .into_inner();
            let path = crate::jobs::divisible::temp_output(&dir, &h);
            let mut f = crate::datadir::create_private(&path).map_err(internal)?;
            let mut taken = 0u64;
            let received = async {
                while let Some(p) = s.message().await? {
                    if let Some(Piece::Data(d)) = p.piece {
                        taken = taken.saturating_add(d.len() as u64);
                        if taken > declared {
                            over = Some(format!(
                                "it sent more than the {declared} bytes of output it declared"
                            ));
                            break;
                        }
                        f.write_all(&d).map_err(internal)?;
                    }
                }
                Ok::<(), Status>(())
            }
            .await;
            if let Err(e) = received {
                let _ = std::fs::remove_file(&path);
                return Err(e);
            }
            if over.is_some() {
                drop(f);
                let _ = std::fs::remove_file(&path);
                None
            } else {
                blocking(|| f.sync_all()).map_err(internal)?;
                Some(path)
            }
        } else {
            None
        };
        if let Some(why) = over {
            tracing::warn!(node = %node, job = h.job_id, chunk = h.chunk, "chunk output refused: {why}");
            h.success = false;
            h.message = why;
        }
        let tmp2 = tmp.clone();
        let recorded = with_state(&self.state, &self.durable, Run::Blocking, move |s| {
            s.on_chunk_done_from(&node, &identity, &h, tmp2.as_deref())
        })
        .await;
        if let Some(t) = &tmp
            && t.exists()
        {
            let _ = std::fs::remove_file(t);
        }
        Ok(Response::new(pb::ChunkDoneReply {
            recorded: recorded?.into_inner(),
        }))
    }
}

/// The `DivisibleClient` service (users).
/// The second field holds each user's calls in flight ([`crate::throttle::InFlight`], the
/// relay's): a `ReadOutput` stream counts among them until it ends, since it holds a blocking
/// thread while its reader is slow; and among the server's streams of all users together
/// (the relay's [`crate::throttle::OutputStreams`]).
pub struct DivisibleClientService(pub Shared, pub Arc<crate::logs::LogRelay>);

#[tonic::async_trait]
impl pb::divisible_client_server::DivisibleClient for DivisibleClientService {
    type ReadOutputStream = DataStream;

    async fn read_output(
        &self,
        req: Request<pb::ReadOutputRequest>,
    ) -> Result<Response<DataStream>, Status> {
        let who = crate::service::caller(&req)?;
        // Counted until the stream ends (its reader done, or gone).
        let slot = self.1.calls.enter(&who.name, "ReadOutput")?;
        // And among the server's streams of all users (`max_output_streams`), until it ends.
        let permit = self.1.output_streams.enter()?;
        let id = req.into_inner().job_id;
        let path = read_state(&self.0, move |s| {
            s.authorize(&who, id, "read its output")?;
            s.divisible_output(id)
        })
        .await?
        .into_inner();
        let len = std::fs::metadata(&path).map_err(internal)?.len();
        Ok(Response::new(stream_file(path, 0, len, (slot, permit))))
    }
}
