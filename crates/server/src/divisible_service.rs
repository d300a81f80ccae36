//! The gRPC edge of divisible jobs ([`crate::jobs::divisible`]): the `Divisible` service
//! (agents: next chunk, chunk input, chunk result) and the `DivisibleClient` service (users: the
//! gathered output), and the conversions between the wire's messages and the module's own types,
//! so protobuf stays at the service edge.

use crate::jobs::divisible::{
    ChunkKey, ChunkRequest, ChunkResult, DivError, Divisible, DivisibleView, PIECE,
};
use hetsched_proto as pb;
use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use tonic::{Request, Response, Status};

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

/// Puts a divisible job's view into its listing row: state, units as tasks, and the
/// `divisible` message.
pub fn fill(v: DivisibleView, j: &mut pb::JobInfo) {
    j.state = v.state;
    j.tasks = v.units;
    j.finished_ns = v.finished_ns;
    j.counts = Some(pb::TaskCounts {
        pending: v.pending,
        running: v.running,
        succeeded: v.succeeded,
        failed: v.failed,
        cancelled: 0,
    });
    let i = v.info;
    j.divisible = Some(pb::DivisibleInfo {
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
                transfer_s: c.transfer_s,
                compute_s: c.compute_s,
            })
            .collect(),
        output_bytes: i.output_bytes,
        rounds: i.rounds,
    });
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
pub struct DivisibleService(pub Arc<Divisible>);

#[tonic::async_trait]
impl pb::divisible_server::Divisible for DivisibleService {
    async fn next_chunk(
        &self,
        req: Request<pb::NextChunkRequest>,
    ) -> Result<Response<pb::NextChunkReply>, Status> {
        let r = req.into_inner();
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
        };
        let reply = blocking(|| self.0.next_chunk(r)).map_err(status)?;
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
        req: Request<pb::ChunkKey>,
    ) -> Result<Response<DataStream>, Status> {
        let key = req.into_inner();
        let key = ChunkKey {
            job_id: key.job_id,
            chunk: key.chunk,
        };
        let (path, offset, len) = self.0.input_slice(&key).map_err(status)?;
        // One port: one chunk's input is streamed at a time.
        let guard = self.0.port().lock_owned().await;
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
        let h = ChunkResult {
            job_id: h.job_id,
            chunk: h.chunk,
            success: h.success,
            message: h.message,
            transfer_ns: h.transfer_ns,
            compute_ns: h.compute_ns,
        };
        let tmp = if h.success {
            let path = self.0.temp_output(&h);
            let mut f = std::fs::File::create(&path).map_err(internal)?;
            while let Some(p) = s.message().await? {
                if let Some(Piece::Data(d)) = p.piece {
                    f.write_all(&d).map_err(internal)?;
                }
            }
            blocking(|| f.sync_all()).map_err(internal)?;
            Some(path)
        } else {
            None
        };
        let recorded = blocking(|| self.0.record(&h, tmp.as_deref()));
        if let Some(t) = &tmp
            && t.exists()
        {
            let _ = std::fs::remove_file(t);
        }
        Ok(Response::new(pb::ChunkDoneReply {
            recorded: recorded.map_err(status)?,
        }))
    }
}

/// The `DivisibleClient` service (users).
pub struct DivisibleClientService(pub Arc<Divisible>);

#[tonic::async_trait]
impl pb::divisible_client_server::DivisibleClient for DivisibleClientService {
    type ReadOutputStream = DataStream;

    async fn read_output(
        &self,
        req: Request<pb::ReadOutputRequest>,
    ) -> Result<Response<DataStream>, Status> {
        let path = self
            .0
            .output_path(req.into_inner().job_id)
            .map_err(status)?;
        let len = std::fs::metadata(&path).map_err(internal)?.len();
        Ok(Response::new(stream_file(path, 0, len, ())))
    }
}
