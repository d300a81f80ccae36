//! The agent's side of divisible jobs (spec 03 in the runtime): it asks the server's `Divisible`
//! service for chunks whenever it has room (it computes one chunk and buffers at most one more,
//! the one-port protocol's receive buffer), fetches each chunk's input slice (streamed; the agent
//! writes it to the chunk's working file, passed as `{input}`), runs the command with `{start}`,
//! `{end}`, `{chunk}` and `{input}` replaced, and uploads the chunk's stdout with the two times the
//! server's estimator needs: the input transfer (first piece to last: the link, not the wait for
//! the server's port) and the compute (process start to exit).
//!
//! Files live in `WORK_DIR/divisible/job-J/`: `chunk-K.in`, `chunk-K.out`, `chunk-K.err`. A chunk's
//! result is uploaded until the server answers (it may be restarting); chunks are run in the order
//! they were received, one at a time.
//!
//! A chunk's input keeps the work directory's disk at least `min_free_disk` free, as a workflow
//! instance's inputs do ([`crate::room`]): a chunk whose input finds no room there (below the
//! floor before or while it is fetched, or a write refused for want of space) is not run; its
//! partial input is removed and it is reported with the [`NO_ROOM`] prefix, which the server
//! counts as a loss (bounded, as other chunk losses), not a failure, and re-plans elsewhere.
//! Every ask with room says whether the disk is below the floor (`disk_short`): the server hands
//! such an agent no chunk that carries input until it has room again.
//!
//! An operator's signal for a chunk (`hetsched signal JOB` on a divisible job) arrives in a
//! heartbeat reply (`TaskSignal.chunk_of`); [`Computing`] sends it to the chunk's process group,
//! once, if the chunk is being computed.

use crate::room::{FreeSpace, NO_ROOM, NoRoom, Room};
use hetsched_core::input::divisible::substitute;
use hetsched_proto as pb;
use hetsched_proto::divisible_client::DivisibleClient;
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::AsyncWriteExt;
use tracing::{info, warn};

type Client = DivisibleClient<
    tonic::service::interceptor::InterceptedService<
        tonic::transport::Channel,
        pb::TokenInterceptor,
    >,
>;

/// How often an agent asks for work (and says it is alive).
pub const POLL: Duration = Duration::from_millis(100);

/// The longest pause between asks the server refused (`FailedPrecondition`: the node is
/// dead, left, kept out, drained or asked to stop, which may last hours) or that failed
/// otherwise (the server restarting, unreachable). The pause doubles from [`POLL`] with each
/// refusal in a row, up to this, and is back to none once an ask is answered; a node that
/// works again gets its chunks at most this late. 5 s: the longest the server holds an ask of
/// an agent that holds chunks (a working node waits as long for its next chunk).
pub const REFUSED_MAX: Duration = Duration::from_secs(5);

/// How long an agent with room waits before asking again when it got nothing. The server holds
/// such an ask open until divisible jobs change (a new job, a result, whose turn it is) or for a
/// few seconds, so this is a pause between held asks, not a polling period.
pub const ROOM_POLL: Duration = Duration::from_millis(20);

/// The longest the server may hold an ask of an agent that holds no chunk (the open call keeps
/// the agent present meanwhile): the longest it holds any.
const IDLE_HOLD: Duration = pb::MAX_HOLD;

/// Largest chunk output uploaded in one piece.
const PIECE: usize = 256 << 10;

/// The chunks being computed here, by (job, chunk): each one's process group and the seqs of
/// the signals already sent to it. Shared with the heartbeat loop, which delivers operators'
/// signals ([`Computing::signal`]).
#[derive(Clone, Debug, Default)]
pub struct Computing(Arc<Mutex<std::collections::HashMap<(u64, u64), Signalled>>>);

/// A chunk being computed: its process group, and the seqs of the signals sent to it.
type Signalled = (u32, HashSet<u64>);

impl Computing {
    fn started(&self, key: (u64, u64), group: u32) {
        if let Ok(mut m) = self.0.lock() {
            m.insert(key, (group, HashSet::new()));
        }
    }

    fn ended(&self, key: (u64, u64)) {
        if let Ok(mut m) = self.0.lock() {
            m.remove(&key);
        }
    }

    /// Sends `signal` (seq `seq`) to chunk `key`'s process group if it is being computed and
    /// has not had this seq yet; whether it was sent.
    pub fn signal(&self, key: (u64, u64), seq: u64, signal: nix::sys::signal::Signal) -> bool {
        let Ok(mut m) = self.0.lock() else {
            return false;
        };
        let Some((group, sent)) = m.get_mut(&key) else {
            return false;
        };
        sent.insert(seq) && crate::launch::signal_group(*group, signal)
    }
}

/// What the divisible loop needs from the agent.
pub struct DivisibleAgent {
    /// Node name and identity, as registered.
    pub name: String,
    /// The agent's identity.
    pub identity: String,
    /// Memory offered, bytes.
    pub memory_bytes: u64,
    /// The work directory.
    pub work_dir: PathBuf,
    /// How long a chunk asked to stop (its job cancelled or purged, the chunk re-planned) has
    /// between SIGTERM and SIGKILL (`--kill-grace`).
    pub kill_grace: Duration,
    /// Where the agent reads how many chunks it holds now (its idle timeout, and its queue,
    /// which leaves their core free).
    pub held: crate::outside::Outside,
    /// `run_as_owner`: a user's chunk runs as its owner's account ([`crate::run_as`]).
    pub run_as_owner: bool,
    /// The chunks being computed, for operators' signals.
    pub computing: Computing,
    /// The free space chunk inputs leave on the work directory's filesystem (`min_free_disk`,
    /// as for workflow inputs; 0: not checked).
    pub min_free_disk: u64,
    /// Where that free space is read (`statvfs`, or a test's stand-in).
    pub free_space: FreeSpace,
}

/// Publishes how many chunks the agent holds.
fn count(held: &Held, to: &crate::outside::Outside) {
    to.set_chunks(held.all.len());
}

struct Ready {
    order: pb::ChunkOrder,
    input: PathBuf,
    transfer_ns: u64,
}

/// What the downloader and the runner share: the chunks held, and a signal rung when the server
/// says some are no longer this agent's.
struct Shared {
    held: Mutex<Held>,
    dropped: tokio::sync::Notify,
    /// The durable record of the chunks' processes (`WORK_DIR/running.chunks`).
    ledger: Mutex<crate::ledger::Ledger>,
}

impl Shared {
    /// The runner takes chunk `key` up: whether to run it (the server has not dropped it). From
    /// then until [`Shared::ran`] its process may run, so the agent lists it even once dropped.
    fn start(&self, key: (u64, u64)) -> bool {
        let mut h = self.held.lock().unwrap_or_else(|p| p.into_inner());
        let run = !h.dropped.contains(&key);
        if run {
            h.running.insert(key);
        }
        run
    }

    /// Chunk `key`'s process has ended (or never started).
    fn ran(&self, key: (u64, u64)) {
        if let Ok(mut h) = self.held.lock() {
            h.running.remove(&key);
        }
    }

    fn is_dropped(&self, key: (u64, u64)) -> bool {
        self.held
            .lock()
            .map(|h| h.dropped.contains(&key))
            .unwrap_or(false)
    }

    /// Returns once the server has said chunk `key` is no longer this agent's.
    async fn until_dropped(&self, key: (u64, u64)) {
        loop {
            let notified = self.dropped.notified();
            tokio::pin!(notified);
            // Registered before the check: a drop between the two still wakes this.
            notified.as_mut().enable();
            if self.is_dropped(key) {
                return;
            }
            notified.await;
        }
    }
}

#[derive(Default)]
struct Held {
    /// Every chunk the agent holds (receiving, waiting, computing, uploading).
    all: HashSet<(u64, u64)>,
    /// Received or being received, not yet finished computing.
    slots: usize,
    /// Chunks the server said are no longer ours.
    dropped: HashSet<(u64, u64)>,
    /// Chunks the runner took up whose process may still run ([`Shared::start`]): a dropped
    /// chunk stays listed to the server while it is one of them — the server waits for a
    /// cancelled job's chunks' processes to end (its `stopping`) until its agent no longer
    /// lists them — and leaves the list at once otherwise.
    running: HashSet<(u64, u64)>,
}

/// Runs the loop until the task is aborted. Calls go over the agent's current connection
/// (`connection`), which its heartbeats replace when one times out; an ask held on the old one
/// is given up and asked again on the new.
pub async fn run(
    mut connection: crate::Connection,
    mut registered: crate::Registered,
    token: pb::TokenInterceptor,
    me: DivisibleAgent,
) {
    let on = |c: &crate::Connection| -> Client {
        DivisibleClient::with_interceptor(c.borrow().clone(), token.clone())
    };
    let client: Client = on(&connection);
    let incarnation = format!("{:032x}", rand::random::<u128>());
    // Before the first chunk: kill what a SIGKILLed predecessor left running (its chunks were
    // re-planned onto others, or will be).
    let ledger = match crate::ledger::Ledger::recover_file(
        &me.work_dir,
        crate::ledger::CHUNKS_FILE_NAME,
    ) {
        Ok((ledger, found)) => {
            if !found.killed.is_empty() {
                warn!(
                    chunks = found.killed.len(),
                    "killed divisible chunks left running by a previous agent in this work directory"
                );
            }
            ledger
        }
        Err(e) => {
            warn!(
                "{}: {e}; chunks run unrecorded",
                me.work_dir.join(crate::ledger::CHUNKS_FILE_NAME).display()
            );
            crate::ledger::Ledger::disabled()
        }
    };
    // The predecessor's chunks are killed at once, but chunks are asked for only as a registered
    // node.
    if !crate::first_registration(&mut registered).await {
        return;
    }
    let shared = Arc::new(Shared {
        held: Mutex::default(),
        dropped: tokio::sync::Notify::new(),
        ledger: Mutex::new(ledger),
    });
    // Rung when a chunk's compute ends: the agent has room again and asks at once.
    let freed = Arc::new(tokio::sync::Notify::new());
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Ready>();
    let me = Arc::new(me);
    // The runner: one chunk at a time, in the order received.
    {
        let (shared, me, freed) = (shared.clone(), me.clone(), freed.clone());
        let (uploads, token) = (connection.clone(), token.clone());
        tokio::spawn(async move {
            while let Some(r) = rx.recv().await {
                let key = (r.order.job_id, r.order.chunk);
                // A chunk dropped before it started is not run; one dropped while it runs is
                // stopped (its result is not needed: the job was cancelled or purged, or the
                // chunk re-planned) and its agent has room for the next job's chunks at once.
                let header = if shared.start(key) {
                    let h = run_chunk(&me, &r, &shared).await;
                    (!shared.is_dropped(key)).then_some(h)
                } else {
                    None
                };
                shared.ran(key);
                if let Ok(mut h) = shared.held.lock() {
                    h.slots = h.slots.saturating_sub(1);
                    // Not uploaded: off the list before the next ask, which says its process
                    // ended.
                    if header.is_none() {
                        h.all.remove(&key);
                        count(&h, &me.held);
                    }
                }
                freed.notify_one();
                if let Some((h, out)) = header {
                    // Over the connection current now.
                    let client: Client =
                        DivisibleClient::with_interceptor(uploads.borrow().clone(), token.clone());
                    let (shared, counter) = (shared.clone(), me.held.clone());
                    tokio::spawn(async move {
                        upload(client, h, out).await;
                        if let Ok(mut g) = shared.held.lock() {
                            g.all.remove(&key);
                            count(&g, &counter);
                        }
                    });
                }
            }
        });
    }
    let mut client = client;
    // Whether this node's disk was below the floor at the last ask with room.
    let mut short = false;
    let mut refusals = Refusals::default();
    loop {
        if connection.has_changed().unwrap_or(false) {
            connection.mark_unchanged();
            client = on(&connection);
        }
        let (holding, room) = {
            let h = shared.held.lock().unwrap_or_else(|p| p.into_inner());
            (
                h.all
                    .iter()
                    .map(|&(job_id, chunk)| pb::ChunkKey { job_id, chunk })
                    .collect::<Vec<_>>(),
                h.slots < 2,
            )
        };
        // Read for every ask with room (one `statvfs`), so that the ask after a chunk found no
        // room says so: the server hands an agent whose disk is below the floor no chunk that
        // carries input (it would find no room either), and re-plans them onto the others.
        if room {
            short = disk_short(&me).await;
        }
        // Holding no chunk, the agent may wait long for one: the open ask keeps it present
        // there, and the server answers when it has a chunk (or when the hold ends). Below the
        // floor it asks again within the server's look period, to say when it has room again.
        let hold_ms = if room && holding.is_empty() && !short {
            IDLE_HOLD.as_millis() as u64
        } else {
            0
        };
        let req = pb::NextChunkRequest {
            name: me.name.clone(),
            identity: me.identity.clone(),
            memory_bytes: me.memory_bytes,
            incarnation: incarnation.clone(),
            holding,
            room,
            hold_ms,
            disk_short: short,
        };
        let reply = tokio::select! {
            r = client.next_chunk(req) => r,
            // The agent moved to a new connection (this one may be dead): ask there.
            changed = connection.changed() => {
                if changed.is_err() {
                    return;
                }
                connection.mark_changed();
                continue;
            }
        };
        match reply {
            Ok(reply) => {
                if refusals.answered() {
                    info!("the server answers this node's chunk asks again");
                }
                let reply = reply.into_inner();
                if let Ok(mut h) = shared.held.lock() {
                    for k in &reply.drop {
                        let key = (k.job_id, k.chunk);
                        h.dropped.insert(key);
                        // No process of it runs (it waits for the runner, which will skip it,
                        // or is uploaded): the next ask no longer lists it.
                        if !h.running.contains(&key) && h.all.remove(&key) {
                            count(&h, &me.held);
                        }
                    }
                }
                if !reply.drop.is_empty() {
                    shared.dropped.notify_waiters();
                }
                for order in reply.orders {
                    let key = (order.job_id, order.chunk);
                    if let Ok(mut h) = shared.held.lock() {
                        h.all.insert(key);
                        h.slots += 1;
                        count(&h, &me.held);
                    }
                    match fetch(&mut client, &me, &order).await {
                        Ok(r) => {
                            let _ = tx.send(r);
                        }
                        Err(InputError::NoRoom(e)) => {
                            // Reported, so that the server re-plans it at once (a loss for this
                            // node's disk, not a failure); listed as held until the server has
                            // the report, so that it is not also found lost meanwhile.
                            warn!(
                                job = order.job_id,
                                chunk = order.chunk,
                                "no room for the chunk's input: {e}"
                            );
                            short = true;
                            if let Ok(mut h) = shared.held.lock() {
                                h.slots = h.slots.saturating_sub(1);
                            }
                            let header = no_room_header(&me, &order, &e);
                            let (shared, counter) = (shared.clone(), me.held.clone());
                            let client = client.clone();
                            tokio::spawn(async move {
                                upload(client, header, None).await;
                                if let Ok(mut g) = shared.held.lock() {
                                    g.all.remove(&key);
                                    count(&g, &counter);
                                }
                            });
                        }
                        Err(e) => {
                            warn!(job = order.job_id, chunk = order.chunk, "chunk input: {e}");
                            if let Ok(mut h) = shared.held.lock() {
                                h.all.remove(&key);
                                h.slots = h.slots.saturating_sub(1);
                                count(&h, &me.held);
                            }
                        }
                    }
                }
                // With room, ask again soon (the server answered because something changed, or
                // its hold ended); when full, when a compute ends (or at the liveness poll).
                let room = shared.held.lock().map(|h| h.slots < 2).unwrap_or(false);
                let wait = if room { ROOM_POLL } else { POLL };
                tokio::select! {
                    _ = freed.notified() => {}
                    _ = tokio::time::sleep(wait) => {}
                }
            }
            Err(s) if s.code() == tonic::Code::Unimplemented => {
                // A server without divisible jobs.
                tokio::time::sleep(Duration::from_secs(5)).await;
            }
            Err(s) => {
                let refused = s.code() == tonic::Code::FailedPrecondition;
                // The server's refusal names why (drained, declared dead …); other failures
                // (the server restarting or unreachable) are told by their code as well.
                let why = if refused {
                    s.message().to_string()
                } else {
                    format!("{:?}: {}", s.code(), s.message())
                };
                let (pause, changed) = refusals.failed(why);
                if changed && refused {
                    warn!(
                        "the server refuses this node's chunk asks: {}; asking again with pauses \
                         growing to {REFUSED_MAX:?}",
                        s.message()
                    );
                } else if changed {
                    warn!(
                        "a chunk ask failed: {:?}: {}; asking again with pauses growing to \
                         {REFUSED_MAX:?}",
                        s.code(),
                        s.message()
                    );
                }
                tokio::select! {
                    _ = tokio::time::sleep(pause) => {}
                    // A new connection (the old one may be dead): ask there at once.
                    changed = connection.changed() => {
                        if changed.is_err() {
                            return;
                        }
                        connection.mark_changed();
                    }
                }
            }
        }
    }
}

/// The pauses between chunk asks that the server refused or that failed, and the reason last
/// logged: a node the server refuses (drained, dead …) may stay so for hours, and asking every
/// [`POLL`] meanwhile cost the server ten calls a second per agent, and the log a line each.
#[derive(Debug, Default)]
struct Refusals {
    /// The pause after the last failed ask; zero once an ask is answered.
    pause: Duration,
    /// Why the last ask failed, while asks fail: logged when it changes, not at every ask.
    why: Option<String>,
}

impl Refusals {
    /// An ask failed for `why`: the pause before the next one ([`POLL`] after an answered ask,
    /// then doubling up to [`REFUSED_MAX`]), and whether `why` differs from the last failure's
    /// (to be logged).
    fn failed(&mut self, why: String) -> (Duration, bool) {
        self.pause = if self.pause.is_zero() {
            POLL
        } else {
            (self.pause * 2).min(REFUSED_MAX)
        };
        let changed = self.why.as_deref() != Some(why.as_str());
        self.why = Some(why);
        (self.pause, changed)
    }

    /// An ask was answered: the next failure starts over from [`POLL`]. Whether asks had been
    /// failing (to log that they are answered again).
    fn answered(&mut self) -> bool {
        self.pause = Duration::ZERO;
        self.why.take().is_some()
    }
}

/// Gives a chunk's input (fetched into the agent's private chunk directory) to `account`:
/// owned by it, moved into its directory ([`crate::run_as::area`]). The new path and the
/// directory the chunk runs in (the account's).
fn give_input(
    work_dir: &Path,
    account: &crate::run_as::Account,
    r: &Ready,
) -> std::io::Result<(PathBuf, PathBuf)> {
    let area = crate::run_as::area(work_dir, account)?;
    // Given while still in the agent's directory, where nobody else can swap it.
    account.give(&std::fs::File::open(&r.input)?)?;
    let to = area.join(format!(
        "divisible-job-{}-chunk-{}.in",
        r.order.job_id, r.order.chunk
    ));
    // A rename replaces whatever the account left at that name, without following it.
    std::fs::rename(&r.input, &to)?;
    Ok((to, area))
}

fn chunk_dir(work_dir: &Path, job: u64) -> PathBuf {
    work_dir.join("divisible").join(format!("job-{job}"))
}

/// Where chunk `chunk` of divisible job `job` writes its stdout (or stderr): the one place
/// [`run_chunk`] and the log listener agree on. The stdout file is removed once the server
/// holds it; the stderr file stays for `hetsched log`.
pub fn chunk_output_path(work_dir: &Path, job: u64, chunk: u64, stderr: bool) -> PathBuf {
    chunk_dir(work_dir, job).join(format!(
        "chunk-{chunk}.{}",
        if stderr { "err" } else { "out" }
    ))
}

/// Why a chunk's input could not be had.
#[derive(Debug, thiserror::Error)]
enum InputError {
    /// No room for it on this node's disk (below `min_free_disk`, or a write refused for want
    /// of space): the node's condition, reported to the server ([`no_room_header`]).
    #[error(transparent)]
    NoRoom(#[from] NoRoom),
    /// Anything else (the server, the connection, the work directory): the chunk is dropped
    /// here, and the server finds it lost when this agent's asks no longer list it.
    #[error("{0}")]
    Other(String),
}

/// A failed write into `path`: for want of space, the node's disk ([`NoRoom::Disk`]).
fn write_error(path: &Path, e: &std::io::Error) -> InputError {
    let what = format!("{}: {e}", path.display());
    if crate::room::is_full(e) {
        NoRoom::Disk(what).into()
    } else {
        InputError::Other(what)
    }
}

/// Fetches a chunk's input into `chunk-K.in` (the transfer the estimator measures), as the
/// node's agent (its name and identity: the server hands a chunk's input only to the agent it
/// is out to), keeping the disk at least `min_free_disk` free. A fetch that fails leaves no
/// file: a partial input is never computed on, and one cut at the floor is what the floor keeps
/// off the disk.
async fn fetch(
    client: &mut Client,
    me: &DivisibleAgent,
    o: &pb::ChunkOrder,
) -> Result<Ready, InputError> {
    let dir = chunk_dir(&me.work_dir, o.job_id);
    // This incarnation's of the job id: an older job's of the same id goes aside first
    // (`crate::job_nonce`).
    crate::job_nonce::claim(&me.work_dir, &dir, o.job_nonce).map_err(|e| write_error(&dir, &e))?;
    let input = dir.join(format!("chunk-{}.in", o.chunk));
    // The job's data: private to the agent's user (0600).
    let mut f = crate::workdir::create_regular(&input, 0o600)
        .map(tokio::fs::File::from_std)
        .map_err(|e| write_error(&input, &e))?;
    let fetched = async {
        if o.input_bytes == 0 {
            return Ok((0, None));
        }
        // Read before the server is asked: a node already below the floor, or one the whole
        // input cannot fit on, costs the server's one port nothing. The pieces are then counted
        // as they come, as a workflow input's are, so that what other writers take meanwhile
        // stops the fetch too.
        let mut whole = Room::new(me.min_free_disk, &me.free_space, &dir).await?;
        whole
            .take(o.input_bytes, Some(&mut f))
            .await
            .map_err(|e| taken(&input, e))?;
        let room = Room::new(me.min_free_disk, &me.free_space, &dir).await?;
        let pieces = client
            .chunk_input(pb::ChunkInputRequest {
                job_id: o.job_id,
                chunk: o.chunk,
                name: me.name.clone(),
                identity: me.identity.clone(),
            })
            .await
            .map_err(|e| InputError::Other(e.message().to_string()))?
            .into_inner();
        write_pieces(pieces, &mut f, room, &input).await
    }
    .await;
    let fetched = match fetched {
        Ok((got, first)) => match f.flush().await {
            Err(e) => Err(write_error(&input, &e)),
            Ok(()) if got != o.input_bytes => Err(InputError::Other(format!(
                "got {got} input bytes of {}",
                o.input_bytes
            ))),
            Ok(()) => Ok(first),
        },
        Err(e) => Err(e),
    };
    match fetched {
        Ok(first) => Ok(Ready {
            order: o.clone(),
            input,
            transfer_ns: first.map_or(0, |t: Instant| t.elapsed().as_nanos() as u64),
        }),
        Err(e) => {
            drop(f);
            if let Err(e) = tokio::fs::remove_file(&input).await {
                warn!("removing the partial chunk input {}: {e}", input.display());
            }
            Err(e)
        }
    }
}

/// [`Room::take`]'s refusal as the fetch's error.
fn taken(input: &Path, e: crate::room::TakeError) -> InputError {
    match e {
        crate::room::TakeError::NoRoom(e) => e.into(),
        crate::room::TakeError::Write(e) => write_error(input, &e),
    }
}

/// Writes a chunk's input `pieces` into `f` (at `input`), each only once `room` has room for
/// it: the bytes written and when the first piece came. The transfer is timed from the first
/// piece to the last: waiting for the server's one port (another agent's transfer) and the
/// call's set-up are the master's queue, not this link.
async fn write_pieces(
    mut pieces: impl tokio_stream::Stream<Item = Result<pb::ChunkData, tonic::Status>> + Unpin,
    f: &mut tokio::fs::File,
    mut room: Room<'_>,
    input: &Path,
) -> Result<(u64, Option<Instant>), InputError> {
    use tokio_stream::StreamExt;
    let mut got = 0u64;
    let mut first: Option<Instant> = None;
    while let Some(piece) = pieces.next().await {
        let piece = piece.map_err(|e| InputError::Other(e.message().to_string()))?;
        first.get_or_insert_with(Instant::now);
        let len = piece.data.len() as u64;
        // Checked before the piece is written: the file never takes the disk below the floor.
        room.take(len, Some(&mut *f))
            .await
            .map_err(|e| taken(input, e))?;
        f.write_all(&piece.data)
            .await
            .map_err(|e| write_error(input, &e))?;
        got = got.saturating_add(len);
    }
    Ok((got, first))
}

/// What an agent reports for chunk `o` whose input found no room on its disk (`e`): not a
/// success, its message beginning with [`NO_ROOM`], which the server counts as a loss of the
/// chunk for this node's disk (re-planned, bounded as other losses), not a failure.
fn no_room_header(me: &DivisibleAgent, o: &pb::ChunkOrder, e: &NoRoom) -> pb::ChunkResultHeader {
    pb::ChunkResultHeader {
        job_id: o.job_id,
        chunk: o.chunk,
        success: false,
        message: format!(
            "{NO_ROOM}chunk {} of job {} ({} of input) on node {}: {e}; its partial input was \
             removed, and it runs again where there is room (free space on this node's disk, \
             or lower `min_free_disk` in this agent's configuration; 0 turns the floor off)",
            o.chunk,
            o.job_id,
            bytesize::ByteSize(o.input_bytes),
            me.name
        ),
        exit_code: -1,
        name: me.name.clone(),
        identity: me.identity.clone(),
        // Not the chunk's fault: the server re-plans it as lost with its node's disk.
        end: pb::TaskEnd::Interrupted.into(),
        ..Default::default()
    }
}

/// Whether this node's disk is below the floor (`min_free_disk`), read now: a disk whose free
/// space cannot be read counts as below, as a fetch would refuse to write on it.
async fn disk_short(me: &DivisibleAgent) -> bool {
    me.min_free_disk > 0
        && !me
            .free_space
            .of(&me.work_dir)
            .await
            .is_ok_and(|free| free >= me.min_free_disk)
}

/// Runs one chunk: its result header and its output file (on success). Its process is in the
/// chunks' ledger while it runs. When the server drops the chunk first, its process group gets
/// SIGTERM, and SIGKILL after the kill grace.
async fn run_chunk(
    me: &DivisibleAgent,
    r: &Ready,
    shared: &Shared,
) -> (pb::ChunkResultHeader, Option<PathBuf>) {
    let o = &r.order;
    // The ledger's (task, attempt) are (job, chunk) here.
    let entry = (o.job_id, u32::try_from(o.chunk).unwrap_or(u32::MAX));
    let stop = shared.until_dropped((o.job_id, o.chunk));
    let dir = chunk_dir(&me.work_dir, o.job_id);
    let out = chunk_output_path(&me.work_dir, o.job_id, o.chunk, false);
    let err = chunk_output_path(&me.work_dir, o.job_id, o.chunk, true);
    let mut header = pb::ChunkResultHeader {
        job_id: o.job_id,
        chunk: o.chunk,
        transfer_ns: r.transfer_ns,
        // The server takes a chunk's result only from the agent it is out to.
        name: me.name.clone(),
        identity: me.identity.clone(),
        exit_code: -1,
        // Every failure before its command runs is a failure to start; set anew once it runs.
        end: pb::TaskEnd::StartFailed.into(),
        ..Default::default()
    };
    let fail = |mut h: pb::ChunkResultHeader, m: String| {
        h.message = m;
        (h, None)
    };
    // `run_as_owner`: a user's chunk runs as its account, in the account's directory, where its
    // input goes (the account's); its output files stay the agent's (it reads stdout's).
    let account = match crate::run_as::resolve(me.run_as_owner, &o.run_as, &me.name).await {
        Ok(account) => account,
        Err(e) => {
            let _ = std::fs::remove_file(&r.input);
            return fail(header, e.to_string());
        }
    };
    let (input, cwd) = match &account {
        None => (r.input.clone(), dir.clone()),
        Some(acc) => match give_input(&me.work_dir, acc, r) {
            Ok(moved) => moved,
            Err(e) => {
                let _ = std::fs::remove_file(&r.input);
                return fail(
                    header,
                    format!(
                        "node {}: the chunk's input for account `{}`: {e}",
                        me.name, acc.name
                    ),
                );
            }
        },
    };
    let shown = input.display().to_string();
    let argv: Vec<String> = o
        .argv
        .iter()
        .map(|w| substitute(w, o.start, o.end, o.chunk, &shown))
        .collect();
    let Some((program, args)) = argv.split_first() else {
        let _ = std::fs::remove_file(&input);
        return fail(header, "empty command".into());
    };
    // Private to the agent's user (0600), as a task's captured streams are.
    let create = |p: &Path| crate::workdir::open_no_follow(p, true);
    let (stdout, stderr) = match (create(&out), create(&err)) {
        (Ok(a), Ok(b)) => (a, b),
        (Err(e), _) | (_, Err(e)) => {
            let _ = std::fs::remove_file(&input);
            return fail(header, format!("{}: {e}", dir.display()));
        }
    };
    let start = Instant::now();
    let mut cmd = tokio::process::Command::new(program);
    if let Some(acc) = &account {
        acc.environment(&mut cmd);
    }
    cmd.args(args)
        .current_dir(&cwd)
        .env("HETSCHED_JOB_ID", o.job_id.to_string())
        .env("HETSCHED_CHUNK", o.chunk.to_string())
        .env("HETSCHED_CHUNK_START", o.start.to_string())
        .env("HETSCHED_CHUNK_END", o.end.to_string())
        .env("HETSCHED_CHUNK_OUTPUT", &out)
        .env("HETSCHED_NODE", &me.name)
        .env(crate::marker::VAR, &me.work_dir)
        .stdin(Stdio::null())
        .stdout(stdout)
        .stderr(stderr)
        .kill_on_drop(true)
        .process_group(0);
    // With the setting, on a thread that has become the account (and has the tasks' umask).
    let child = if me.run_as_owner {
        crate::run_as::hop(account.as_ref(), || cmd.spawn())
            .map_err(|e| format!("node {}: {e}", me.name))
            .and_then(|spawned| spawned.map_err(|e| e.to_string()))
    } else {
        cmd.spawn().map_err(|e| e.to_string())
    };
    let mut child = match child {
        Ok(c) => c,
        Err(e) => {
            let _ = std::fs::remove_file(&input);
            let who = account
                .as_ref()
                .map(|a| format!(" as `{}`", a.name))
                .unwrap_or_default();
            return fail(header, format!("cannot start `{program}`{who}: {e}"));
        }
    };
    // It started: how it ends is said below (a failure to wait says nothing).
    header.set_end(pb::TaskEnd::Unsaid);
    // The chunk's whole process group: its leader and whatever it started.
    let group = child.id();
    if let (Some(pid), Ok(mut l)) = (group, shared.ledger.lock()) {
        l.started(entry.0, entry.1, pid);
    }
    if let Some(pid) = group {
        me.computing.started((o.job_id, o.chunk), pid);
    }
    let status = wait_chunk(me, o, &mut child, group, stop).await;
    me.computing.ended((o.job_id, o.chunk));
    if let Ok(mut l) = shared.ledger.lock() {
        l.ended(entry.0, entry.1);
    }
    header.compute_ns = start.elapsed().as_nanos() as u64;
    let _ = std::fs::remove_file(&input);
    let status = match status {
        Waited::Exited(s) => s,
        Waited::TimedOut => {
            header.set_end(pb::TaskEnd::TimeLimit);
            return fail(
                header,
                crate::launch::time_limit_exceeded(std::time::Duration::from_millis(
                    o.time_limit_ms,
                )),
            );
        }
        Waited::Stopped => {
            header.set_end(pb::TaskEnd::Killed);
            return fail(
                header,
                "stopped: the server no longer needs this chunk".into(),
            );
        }
    };
    match status {
        Ok(s) if s.success() => {
            header.exit_code = 0;
            header.set_end(pb::TaskEnd::Exited);
            // The output must still be there to be gathered.
            match std::fs::metadata(&out) {
                Ok(m) => {
                    header.success = true;
                    header.output_bytes = m.len();
                    (header, Some(out))
                }
                Err(e) => {
                    header.set_end(pb::TaskEnd::OutputsMissing);
                    fail(
                        header,
                        format!("its output cannot be gathered: {}: {e}", out.display()),
                    )
                }
            }
        }
        Ok(s) => {
            header.exit_code = s.code().unwrap_or(-1);
            // As a task's: 126 and 127 are the shell's "cannot execute" / "not found".
            header.set_end(match s.code() {
                Some(126 | 127) => pb::TaskEnd::StartFailed,
                Some(_) => pb::TaskEnd::Exited,
                None => pb::TaskEnd::Signalled,
            });
            let m = format!("exited with {s}");
            fail(header, m)
        }
        Err(e) => fail(header, format!("wait: {e}")),
    }
}

/// How a chunk's process ended.
enum Waited {
    /// On its own.
    Exited(std::io::Result<std::process::ExitStatus>),
    /// Killed at its time limit.
    TimedOut,
    /// Stopped because the server dropped the chunk.
    Stopped,
}

/// Waits for a chunk's process (`group` leads its process group): until it exits, its time
/// limit passes (SIGKILL to the group), or `stop` resolves (SIGTERM to the group, SIGKILL after
/// the kill grace).
async fn wait_chunk(
    me: &DivisibleAgent,
    o: &pb::ChunkOrder,
    child: &mut tokio::process::Child,
    group: Option<u32>,
    stop: impl std::future::Future<Output = ()>,
) -> Waited {
    use nix::sys::signal::Signal;
    let signal = |s| {
        if let Some(pid) = group {
            crate::launch::signal_group(pid, s);
        }
    };
    let limit = async {
        match o.time_limit_ms {
            0 => std::future::pending().await,
            ms => tokio::time::sleep(Duration::from_millis(ms)).await,
        }
    };
    tokio::select! {
        s = child.wait() => Waited::Exited(s),
        () = limit => {
            signal(Signal::SIGKILL);
            let _ = child.kill().await;
            Waited::TimedOut
        }
        () = stop => {
            signal(Signal::SIGTERM);
            if tokio::time::timeout(me.kill_grace, child.wait()).await.is_err() {
                let _ = child.kill().await;
            }
            // What it started and left behind.
            signal(Signal::SIGKILL);
            Waited::Stopped
        }
    }
}

/// The first `bytes` bytes of a chunk's output file `p`, a regular file only
/// ([`crate::workdir::open_regular`]): without `run_as_owner` the chunk's command runs as the
/// agent's user and could have put a FIFO in its place, which a plain read would wait on for
/// good, and the chunk's result would never be sent.
async fn read_output(p: &Path, bytes: u64) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let p = p.to_path_buf();
    tokio::task::spawn_blocking(move || {
        let mut d = Vec::new();
        crate::workdir::open_regular(&p, false)?
            .take(bytes)
            .read_to_end(&mut d)?;
        Ok(d)
    })
    .await
    .map_err(std::io::Error::other)?
}

/// Uploads a chunk's result until the server has it.
/// An output past what the server stores of one chunk ([`pb::MAX_CHUNK_OUTPUT`]) is not read
/// nor sent: the chunk is reported failed, saying so; and only the bytes measured when the
/// chunk ended (`output_bytes`) are sent, should something still write to the file.
async fn upload(mut client: Client, mut header: pb::ChunkResultHeader, mut out: Option<PathBuf>) {
    let mut delay = Duration::from_millis(100);
    if out.is_some() && header.output_bytes > pb::MAX_CHUNK_OUTPUT {
        header.success = false;
        // Its command exited 0 and wrote its output: no reason of a task's fits (the server
        // says the same of an output past the bound that reaches it).
        header.set_end(pb::TaskEnd::Unsaid);
        header.message = format!(
            "its output is {} bytes, more than the {} GiB of output one chunk may send the server",
            header.output_bytes,
            pb::MAX_CHUNK_OUTPUT >> 30
        );
        if let Some(p) = out.take() {
            let _ = tokio::fs::remove_file(p).await;
        }
    }
    loop {
        let data = match &out {
            Some(p) => match read_output(p, header.output_bytes).await {
                Ok(d) => d,
                Err(e) => {
                    let mut h = header.clone();
                    h.success = false;
                    h.set_end(pb::TaskEnd::OutputsMissing);
                    h.message = match crate::workdir::not_regular(&e) {
                        Some(n) => format!("its output cannot be gathered: {n}"),
                        None => format!("its output cannot be gathered: {}: {e}", p.display()),
                    };
                    let _ = client
                        .chunk_done(tokio_stream::iter(vec![pb::ChunkDonePiece {
                            piece: Some(pb::chunk_done_piece::Piece::Header(h)),
                        }]))
                        .await;
                    return;
                }
            },
            None => Vec::new(),
        };
        let mut pieces = vec![pb::ChunkDonePiece {
            piece: Some(pb::chunk_done_piece::Piece::Header(header.clone())),
        }];
        for c in data.chunks(PIECE) {
            pieces.push(pb::ChunkDonePiece {
                piece: Some(pb::chunk_done_piece::Piece::Data(c.to_vec())),
            });
        }
        match client.chunk_done(tokio_stream::iter(pieces)).await {
            Ok(r) => {
                if !r.into_inner().recorded {
                    info!(
                        job = header.job_id,
                        chunk = header.chunk,
                        "the server did not need this chunk's result (recorded already, or re-planned)"
                    );
                }
                if let Some(p) = &out {
                    let _ = tokio::fs::remove_file(p).await;
                }
                return;
            }
            // PermissionDenied: the server does not take this node's word for the chunk (it
            // is out to another node, or this agent's identity is not the node's): retrying
            // would not change that.
            Err(s)
                if s.code() == tonic::Code::Internal
                    || s.code() == tonic::Code::InvalidArgument
                    || s.code() == tonic::Code::PermissionDenied =>
            {
                warn!(
                    job = header.job_id,
                    chunk = header.chunk,
                    "the server refused the chunk's result: {}",
                    s.message()
                );
                return;
            }
            Err(_) => {
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_millis(500));
            }
        }
    }
}

/// Stops the divisible loop when the agent's `run` returns.
pub struct Running(pub tokio::task::JoinHandle<()>);

impl Drop for Running {
    fn drop(&mut self) {
        self.0.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hetsched_core::testkit::ScratchDir;

    /// An agent in `dir`, with or without `run_as_owner`, and its chunks' shared state.
    fn agent(dir: &Path, run_as_owner: bool) -> (DivisibleAgent, Shared) {
        let me = DivisibleAgent {
            name: "n1".into(),
            identity: "id".into(),
            memory_bytes: 1 << 30,
            work_dir: dir.to_path_buf(),
            kill_grace: Duration::from_secs(5),
            held: crate::outside::Outside::default(),
            run_as_owner,
            computing: Computing::default(),
            min_free_disk: crate::room::DEFAULT_MIN_FREE_DISK,
            free_space: FreeSpace::default(),
        };
        let (ledger, _) = crate::ledger::Ledger::recover_file(dir, crate::ledger::CHUNKS_FILE_NAME)
            .expect("ledger");
        let shared = Shared {
            held: Mutex::new(Held::default()),
            dropped: tokio::sync::Notify::new(),
            ledger: Mutex::new(ledger),
        };
        (me, shared)
    }

    /// Runs chunk 4 of job 2 (owner `run_as`) with `input` fetched: its header and output.
    async fn chunk(
        me: &DivisibleAgent,
        shared: &Shared,
        run_as: &str,
        command: &str,
    ) -> (pb::ChunkResultHeader, String) {
        chunk_limited(me, shared, run_as, command, 0).await
    }

    /// [`chunk`] with a time limit of `time_limit_ms` (0: none).
    async fn chunk_limited(
        me: &DivisibleAgent,
        shared: &Shared,
        run_as: &str,
        command: &str,
        time_limit_ms: u64,
    ) -> (pb::ChunkResultHeader, String) {
        let dir = chunk_dir(&me.work_dir, 2);
        std::fs::create_dir_all(&dir).expect("chunk dir");
        let input = dir.join("chunk-4.in");
        std::fs::write(&input, "the slice\n").expect("input");
        let ready = Ready {
            order: pb::ChunkOrder {
                job_id: 2,
                chunk: 4,
                start: 10,
                end: 20,
                argv: vec!["sh".into(), "-c".into(), command.into()],
                run_as: run_as.into(),
                time_limit_ms,
                ..Default::default()
            },
            input,
            transfer_ns: 0,
        };
        let (header, out) = run_chunk(me, &ready, shared).await;
        let out = out.map(|p| std::fs::read_to_string(p).expect("output"));
        (header, out.unwrap_or_default())
    }

    /// What the fake divisible service below was told.
    #[derive(Default)]
    struct Told {
        asks: Vec<pb::NextChunkRequest>,
        inputs: u32,
        done: Vec<pb::ChunkResultHeader>,
        /// Bytes of output received with the results.
        output: u64,
        /// Whether the chunk was handed out.
        handed: bool,
    }

    /// A divisible service that hands chunk 4 of job 2 (`input` bytes of input, sent in 256 KiB
    /// pieces) to the first ask with room it answers, whatever the ask says of its disk, as a server
    /// whose ask crossed the disk's filling would; `on_input` runs as the input is asked for.
    #[derive(Clone)]
    struct Fake {
        told: Arc<Mutex<Told>>,
        input: u64,
        on_input: Arc<dyn Fn() + Send + Sync>,
        /// While set, every ask is refused with `FailedPrecondition` and this message, as the
        /// server refuses a node it does not hold as working (dead, left, drained …).
        refuse: Arc<Mutex<Option<String>>>,
    }

    type Pieces = std::pin::Pin<
        Box<dyn tokio_stream::Stream<Item = Result<pb::ChunkData, tonic::Status>> + Send>,
    >;

    #[tonic::async_trait]
    impl pb::divisible_server::Divisible for Fake {
        async fn next_chunk(
            &self,
            req: tonic::Request<pb::NextChunkRequest>,
        ) -> Result<tonic::Response<pb::NextChunkReply>, tonic::Status> {
            let mut told = self.told.lock().expect("told");
            let req = req.into_inner();
            told.asks.push(req.clone());
            if let Some(why) = self.refuse.lock().expect("refuse").clone() {
                return Err(tonic::Status::failed_precondition(why));
            }
            let first = req.room && !told.handed;
            told.handed |= first;
            let orders = if first {
                vec![pb::ChunkOrder {
                    job_id: 2,
                    chunk: 4,
                    start: 0,
                    end: 1,
                    argv: vec!["true".into()],
                    input_bytes: self.input,
                    ..Default::default()
                }]
            } else {
                Vec::new()
            };
            Ok(tonic::Response::new(pb::NextChunkReply {
                orders,
                drop: Vec::new(),
            }))
        }

        type ChunkInputStream = Pieces;

        async fn chunk_input(
            &self,
            _req: tonic::Request<pb::ChunkInputRequest>,
        ) -> Result<tonic::Response<Pieces>, tonic::Status> {
            self.told.lock().expect("told").inputs += 1;
            (self.on_input)();
            let pieces = (0..self.input.div_ceil(PIECE as u64)).map(move |_| {
                Ok(pb::ChunkData {
                    data: vec![7; PIECE],
                })
            });
            Ok(tonic::Response::new(Box::pin(tokio_stream::iter(pieces))))
        }

        async fn chunk_done(
            &self,
            req: tonic::Request<tonic::Streaming<pb::ChunkDonePiece>>,
        ) -> Result<tonic::Response<pb::ChunkDoneReply>, tonic::Status> {
            let mut pieces = req.into_inner();
            while let Some(p) = pieces.message().await? {
                match p.piece {
                    Some(pb::chunk_done_piece::Piece::Header(h)) => {
                        self.told.lock().expect("told").done.push(h);
                    }
                    Some(pb::chunk_done_piece::Piece::Data(d)) => {
                        self.told.lock().expect("told").output += d.len() as u64;
                    }
                    None => {}
                }
            }
            Ok(tonic::Response::new(pb::ChunkDoneReply { recorded: true }))
        }
    }

    /// Serves `fake` on a local port: a channel to it and the server's task.
    async fn serve(
        fake: Fake,
    ) -> (
        tonic::transport::Channel,
        tokio::task::JoinHandle<Result<(), tonic::transport::Error>>,
    ) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let address = listener.local_addr().expect("address");
        let server = tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(pb::divisible_server::DivisibleServer::new(fake))
                .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
        );
        let channel = tonic::transport::Endpoint::from_shared(format!("http://{address}"))
            .expect("endpoint")
            .connect_lazy();
        (channel, server)
    }

    /// Serves `fake` on a local port and starts the divisible loop of `me` against it, its agent
    /// registered as `registered` says: the loop (aborted when dropped) and the server.
    async fn start(
        me: DivisibleAgent,
        fake: Fake,
        registered: crate::Registered,
    ) -> (
        Running,
        tokio::task::JoinHandle<Result<(), tonic::transport::Error>>,
    ) {
        let (channel, server) = serve(fake).await;
        // The sender lives as long as the loop's task: a closed watch would end the loop.
        let (keep, connection) = tokio::sync::watch::channel(channel);
        let agent = Running(tokio::spawn(async move {
            let _keep = keep;
            run(
                connection,
                registered,
                pb::TokenInterceptor::new("t").expect("token"),
                me,
            )
            .await
        }));
        (agent, server)
    }

    /// Runs the divisible loop of `me` against `fake` until it reported a chunk done (at most
    /// 10 s): what the service was told.
    async fn run_against(me: DivisibleAgent, fake: Fake) -> Arc<Mutex<Told>> {
        let told = fake.told.clone();
        let (_registered, registered) = tokio::sync::watch::channel(Some(1));
        let (agent, server) = start(me, fake, registered).await;
        for _ in 0..1000 {
            if !told.lock().expect("told").done.is_empty() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        // A few more asks, after the report.
        tokio::time::sleep(Duration::from_millis(100)).await;
        drop(agent);
        server.abort();
        told
    }

    /// A chunk's output goes to the server within the bound the server keeps
    /// ([`pb::MAX_CHUNK_OUTPUT`]) and as declared: an output past the bound is reported as the
    /// chunk's failure, naming it, without reading or sending it (it was read whole into
    /// memory), and a file that grew after it was measured sends only the bytes declared.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_chunks_output_past_the_servers_bound_fails_the_chunk_and_only_what_was_declared_is_sent()
     {
        let dir = ScratchDir::new("chunk", "out");
        let fake = Fake {
            told: Arc::default(),
            input: 0,
            on_input: Arc::new(|| {}),
            refuse: Arc::default(),
        };
        let told = fake.told.clone();
        let (channel, server) = serve(fake).await;
        let client: Client =
            DivisibleClient::with_interceptor(channel, pb::TokenInterceptor::new("t").expect("t"));
        let out = dir.join("chunk-4.out");
        std::fs::write(&out, vec![b'x'; 64 << 10]).expect("output");
        let header = |declared: u64| pb::ChunkResultHeader {
            job_id: 2,
            chunk: 4,
            success: true,
            output_bytes: declared,
            ..Default::default()
        };
        upload(
            client.clone(),
            header(pb::MAX_CHUNK_OUTPUT + 1),
            Some(out.clone()),
        )
        .await;
        {
            let told = told.lock().expect("told");
            let h = told.done.last().expect("reported");
            assert!(
                !h.success,
                "an output past the bound was reported done: {h:?}"
            );
            assert!(
                h.message
                    .contains("4 GiB of output one chunk may send the server"),
                "{}",
                h.message
            );
            assert_eq!(told.output, 0, "none of it was sent");
        }
        std::fs::write(&out, vec![b'x'; 64 << 10]).expect("output");
        upload(client, header(4), Some(out)).await;
        {
            let told = told.lock().expect("told");
            assert!(told.done.last().expect("reported").success);
            assert_eq!(told.output, 4, "only the bytes declared were sent");
        }
        server.abort();
    }

    /// The loop asks for no chunk before its agent has registered: the server does not know the
    /// node yet, and the refusal would be logged before — and read as the cause of — a failed
    /// registration's own error.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn agent_asks_for_no_chunk_before_it_has_registered() {
        let dir = ScratchDir::new("chunk", "unregistered");
        let (me, _) = agent(&dir, false);
        let fake = Fake {
            told: Arc::default(),
            input: 0,
            on_input: Arc::new(|| {}),
            refuse: Arc::default(),
        };
        let told = fake.told.clone();
        let (registering, registered) = tokio::sync::watch::channel(None);
        let (agent, server) = start(me, fake, registered).await;
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(told.lock().expect("told").asks.len(), 0);
        registering.send_replace(Some(1));
        let deadline = Instant::now() + Duration::from_secs(10);
        while told.lock().expect("told").asks.is_empty() && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        drop(agent);
        server.abort();
        assert!(
            !told.lock().expect("told").asks.is_empty(),
            "asked once registered"
        );
    }

    /// A node the server refuses (drained, dead, left: `FailedPrecondition`) may stay so for
    /// hours: its agent backs off, doubling its pause from `POLL` up to `REFUSED_MAX`, rather
    /// than asking every `POLL`. In the 2 s after the first ask that is at most 4 more (at 0.1,
    /// 0.3, 0.7 and 1.5 s; a slow machine asks fewer), where asking every `POLL` made about 20. Once the server
    /// answers again, the agent asks on as before and takes its chunk.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn agent_a_refused_chunk_ask_backs_off_until_the_server_answers_again() {
        let dir = ScratchDir::new("chunk", "refused");
        let (me, _) = agent(&dir, false);
        let fake = Fake {
            told: Arc::default(),
            input: 0,
            on_input: Arc::new(|| {}),
            refuse: Arc::new(Mutex::new(Some(
                "node `n1` takes no work now: it is drained".into(),
            ))),
        };
        let (told, refuse) = (fake.told.clone(), fake.refuse.clone());
        let (_registered, registered) = tokio::sync::watch::channel(Some(1));
        let (agent, server) = start(me, fake, registered).await;
        // The first ask opens the window: the loop starts by reading its ledger.
        let deadline = Instant::now() + Duration::from_secs(10);
        while told.lock().expect("told").asks.is_empty() && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let first = told.lock().expect("told").asks.len();
        tokio::time::sleep(Duration::from_secs(2)).await;
        let refused = told.lock().expect("told").asks.len();
        assert!(
            refused > first && refused - first <= 4,
            "asked again, backing off: {} asks in 2 s after the first",
            refused - first
        );
        // The node works again: within the longest pause the agent asks, takes its chunk
        // and reports it.
        *refuse.lock().expect("refuse") = None;
        let deadline = Instant::now() + REFUSED_MAX + Duration::from_secs(10);
        while told.lock().expect("told").done.is_empty() && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        drop(agent);
        server.abort();
        let told = told.lock().expect("told");
        let [h] = &told.done[..] else {
            panic!("one report after the refusals ended: {:?}", told.done);
        };
        assert!(h.success && h.chunk == 4 && h.job_id == 2, "{h:?}");
    }

    /// Refusals in a row double the pause up to `REFUSED_MAX`; a refusal is logged once per
    /// change of reason; an answer starts the pauses over and says the refusals ended.
    #[test]
    fn agent_refusals_back_off_log_once_per_reason_and_start_over_when_answered() {
        let mut r = Refusals::default();
        assert!(!r.answered(), "nothing was refused");
        let drained = || "node `n1` takes no work now: it is drained".to_string();
        let pauses: Vec<_> = (0..8).map(|_| r.failed(drained())).collect();
        let ms = |p: &(Duration, bool)| p.0.as_millis();
        assert_eq!(
            pauses.iter().map(ms).collect::<Vec<_>>(),
            [100, 200, 400, 800, 1600, 3200, 5000, 5000]
        );
        assert_eq!(
            pauses.iter().filter(|p| p.1).count(),
            1,
            "logged once: {pauses:?}"
        );
        let (pause, changed) = r.failed("node `n1` takes no work now: it was declared dead".into());
        assert!(changed, "a new reason is logged");
        assert_eq!(pause, REFUSED_MAX, "and the pause stays long");
        assert!(r.answered(), "the end of the refusals is logged");
        assert!(!r.answered(), "once");
        assert_eq!(r.failed(drained()), (POLL, true), "starts over");
    }

    /// A chunk's input keeps the disk's floor (`min_free_disk`) as a workflow input does. A
    /// node already below it (read for real, with `statvfs`: the floor set above what the
    /// test's disk has) asks nothing of the server's port for a chunk it was handed: no file
    /// is left, and the chunk is reported with the `NO_ROOM` prefix, not as a success, for the
    /// server to count as a loss for this node's disk. Its asks say the disk is short.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_chunk_whose_input_finds_the_disk_below_min_free_disk_is_not_fetched_and_reported_no_room()
     {
        let dir = ScratchDir::new("chunk", "room");
        let (mut me, _) = agent(&dir, false);
        let free = crate::room::statvfs_free(&dir).expect("statvfs");
        me.min_free_disk = free + (1 << 40);
        let fake = Fake {
            told: Arc::default(),
            input: 1 << 20,
            on_input: Arc::new(|| {}),
            refuse: Arc::default(),
        };
        let told = run_against(me, fake).await;
        let told = told.lock().expect("told");
        assert_eq!(told.inputs, 0, "the server's port was not asked");
        let [h] = &told.done[..] else {
            panic!("one report: {:?}", told.done);
        };
        assert!(!h.success && h.chunk == 4 && h.job_id == 2, "{h:?}");
        assert!(
            h.message.starts_with(&format!(
                "{NO_ROOM}chunk 4 of job 2 (1.0 MiB of input) on node n1: this node's disk is \
                 too full for it: the filesystem of {} has ",
                chunk_dir(&dir, 2).display()
            )) && h.message.ends_with("0 turns the floor off)"),
            "{}",
            h.message
        );
        assert!(
            told.asks.iter().filter(|a| a.room).all(|a| a.disk_short),
            "every ask with room says the disk is short: {:?}",
            told.asks
        );
        assert!(
            !chunk_dir(&dir, 2).join("chunk-4.in").exists(),
            "no input file is left"
        );
    }

    /// Another writer fills the disk while a chunk's input is being fetched: the fetch stops
    /// at its next look at the disk (within `FREE_RECHECK`), before crossing the floor; the
    /// partial input is removed and the chunk reported `NO_ROOM`. Asks say whether the disk is
    /// below the floor: not at first, and so after.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_chunk_input_that_would_cross_min_free_disk_stops_and_leaves_nothing() {
        use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
        let dir = ScratchDir::new("chunk", "fill");
        let (mut me, _) = agent(&dir, false);
        let floor = 1 << 20;
        let input = crate::room::FREE_RECHECK + (4 << 20);
        // Room for the whole input, until the transfer starts: then another writer takes the
        // disk just below the floor. What the chunk's file holds is counted off, as a disk
        // would.
        let (base, most) = (
            Arc::new(AtomicU64::new(floor + input)),
            Arc::new(AtomicU64::new(0)),
        );
        let file = chunk_dir(&dir, 2).join("chunk-4.in");
        let (b, m, f) = (base.clone(), most.clone(), file.clone());
        me.min_free_disk = floor;
        me.free_space = FreeSpace::with(move |_| {
            let held = std::fs::metadata(&f).map_or(0, |x| x.len());
            m.fetch_max(held, Relaxed);
            Ok(b.load(Relaxed).saturating_sub(held))
        });
        let fills = base.clone();
        let fake = Fake {
            told: Arc::default(),
            input,
            on_input: Arc::new(move || fills.store(floor - 1, Relaxed)),
            refuse: Arc::default(),
        };
        let told = run_against(me, fake).await;
        let told = told.lock().expect("told");
        assert_eq!(told.inputs, 1);
        let [h] = &told.done[..] else {
            panic!("one report: {:?}", told.done);
        };
        assert!(
            !h.success && h.message.starts_with(NO_ROOM),
            "{}",
            h.message
        );
        assert!(
            most.load(Relaxed) <= crate::room::FREE_RECHECK,
            "stopped at its first look after the disk filled: {}",
            most.load(Relaxed)
        );
        assert!(!file.exists(), "the partial input was removed");
        assert!(
            !told.asks[0].disk_short,
            "room at first: {:?}",
            told.asks[0]
        );
        assert!(
            told.asks.last().is_some_and(|a| a.disk_short),
            "short after: {:?}",
            told.asks.last()
        );
    }

    /// A chunk's captured stdout and stderr are private to the agent's user (mode 0600, whatever
    /// its umask); before, they were created 0644.
    #[tokio::test]
    async fn a_chunks_captured_output_files_are_private() {
        use std::os::unix::fs::PermissionsExt;
        let dir = ScratchDir::new("chunk", "mode");
        let (me, shared) = agent(&dir, false);
        let (h, out) = chunk(&me, &shared, "", "echo out; echo err >&2").await;
        assert!(h.success, "{h:?}");
        assert_eq!(out, "out\n");
        for stderr in [false, true] {
            let p = chunk_output_path(&dir, 2, 4, stderr);
            let mode = std::fs::metadata(&p)
                .expect("captured")
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600, "{}: {mode:o}", p.display());
        }
    }

    /// An operator's signal reaches the chunk being computed, once per seq; one for a chunk
    /// not computed here is not sent.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_signal_reaches_the_chunk_being_computed_once() {
        use nix::sys::signal::Signal;
        let dir = ScratchDir::new("chunk", "sig");
        let (me, shared) = agent(&dir, false);
        let computing = me.computing.clone();
        assert!(
            !computing.signal((2, 4), 1, Signal::SIGUSR1),
            "not computed yet"
        );
        let said = chunk_output_path(&dir, 2, 4, false);
        let sender = tokio::spawn(async move {
            // Once the chunk computes and has set its trap; then the same seq again.
            let mut sent = false;
            for _ in 0..400 {
                let ready = std::fs::read_to_string(&said).is_ok_and(|t| t.contains("ready"));
                if ready && computing.signal((2, 4), 7, Signal::SIGUSR1) {
                    sent = true;
                    break;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            (sent, computing.signal((2, 4), 7, Signal::SIGUSR1))
        });
        let (h, out) = chunk(
            &me,
            &shared,
            "",
            "trap 'echo got USR1; exit 0' USR1; echo ready; while true; do sleep 0.05; done",
        )
        .await;
        let (sent, again) = sender.await.expect("sender");
        assert!(sent && !again, "sent once: {sent} {again}");
        assert!(h.success, "{h:?}");
        assert_eq!(out, "ready\ngot USR1\n");
        assert!(
            !me.computing.signal((2, 4), 8, Signal::SIGUSR1),
            "the chunk ended"
        );
    }

    /// A chunk's result says how its command ended, in a task's words, for the server's
    /// `reason`: an exit code of its own, the shell's "not found", a signal, its time limit.
    #[tokio::test]
    async fn a_chunks_result_says_how_its_command_ended() {
        let dir = ScratchDir::new("chunk", "ends");
        let (me, shared) = agent(&dir, false);
        let ended = |h: &pb::ChunkResultHeader| (h.success, h.end(), h.exit_code);
        let (h, _) = chunk(&me, &shared, "", "exit 3").await;
        assert_eq!(ended(&h), (false, pb::TaskEnd::Exited, 3), "{h:?}");
        let (h, _) = chunk(&me, &shared, "", "exit 127").await;
        assert_eq!(ended(&h), (false, pb::TaskEnd::StartFailed, 127), "{h:?}");
        let (h, _) = chunk(&me, &shared, "", "kill -KILL $$").await;
        assert_eq!(ended(&h), (false, pb::TaskEnd::Signalled, -1), "{h:?}");
        let (h, _) = chunk_limited(&me, &shared, "", "sleep 10", 50).await;
        assert_eq!(ended(&h), (false, pb::TaskEnd::TimeLimit, -1), "{h:?}");
        // Worded as a task's is (`launch`).
        assert_eq!(h.message, "time limit of 0.050s exceeded");
        let (h, _) = chunk(&me, &shared, "", "true").await;
        assert_eq!(ended(&h), (true, pb::TaskEnd::Exited, 0), "{h:?}");
    }

    #[tokio::test]
    async fn a_users_chunk_runs_as_its_account_and_reads_its_input() {
        if !crate::run_as::tests::root() {
            return;
        }
        let dir = ScratchDir::new("chunk", "as");
        let (me, shared) = agent(&dir, true);
        let (h, out) = chunk(
            &me,
            &shared,
            "nobody",
            "id -un; cat {input}; pwd; echo $HOME",
        )
        .await;
        assert!(h.success, "{h:?}");
        let area = dir.join("users/nobody");
        let home = crate::run_as::Account::lookup("n1", "nobody")
            .expect("nobody")
            .home;
        assert_eq!(
            out,
            format!(
                "nobody\nthe slice\n{}\n{}\n",
                area.display(),
                home.display()
            )
        );
        assert!(
            !area.join("divisible-job-2-chunk-4.in").exists(),
            "the input goes with the chunk"
        );
        // The admin's chunk runs as the agent's user; an unknown account is refused.
        let (h, out) = chunk(&me, &shared, "", "id -un").await;
        assert!(h.success, "{h:?}");
        assert_eq!(out, "root\n");
        let (h, _) = chunk(&me, &shared, "no-such-user-x", "id -un").await;
        assert!(!h.success);
        assert!(
            h.message
                .starts_with("node n1: no Unix account `no-such-user-x`"),
            "{h:?}"
        );
        // Without the setting, the owner is not looked at.
        let (me, shared) = agent(&dir, false);
        let (h, out) = chunk(&me, &shared, "nobody", "id -un").await;
        assert!(h.success, "{h:?}");
        assert_eq!(out, "root\n");
    }

    /// A divisible service that hands out chunk 4 of job 2 (`first`, a shell line) and then
    /// chunk 0 of job 3 (`second`), and, once `drop` is set, tells every ask listing them to
    /// drop them: it notes each ask's list and whether `ended` (the file chunk 4's SIGTERM
    /// handler writes as it ends) existed when the ask came.
    #[derive(Clone)]
    struct Dropper {
        first: String,
        second: String,
        ended: PathBuf,
        drop: Arc<std::sync::atomic::AtomicBool>,
        /// Per ask: the chunks it listed, and whether `ended` existed.
        asks: Arc<Mutex<Vec<Asked>>>,
        handed: Arc<std::sync::atomic::AtomicU32>,
    }

    /// An ask as [`Dropper`] notes it: the chunks it listed, and whether chunk 4's handler had
    /// ended.
    type Asked = (Vec<(u64, u64)>, bool);

    #[tonic::async_trait]
    impl pb::divisible_server::Divisible for Dropper {
        async fn next_chunk(
            &self,
            req: tonic::Request<pb::NextChunkRequest>,
        ) -> Result<tonic::Response<pb::NextChunkReply>, tonic::Status> {
            use std::sync::atomic::Ordering;
            let req = req.into_inner();
            let listed: Vec<(u64, u64)> = req.holding.iter().map(|k| (k.job_id, k.chunk)).collect();
            self.asks
                .lock()
                .expect("asks")
                .push((listed, self.ended.exists()));
            let order = |job_id, chunk, line: &str| pb::ChunkOrder {
                job_id,
                chunk,
                start: 0,
                end: 1,
                argv: vec!["sh".into(), "-c".into(), line.into()],
                ..Default::default()
            };
            let mut orders = Vec::new();
            if req.room && !self.drop.load(Ordering::SeqCst) {
                match self.handed.fetch_add(1, Ordering::SeqCst) {
                    0 => orders.push(order(2, 4, &self.first)),
                    1 => orders.push(order(3, 0, &self.second)),
                    _ => {}
                }
            }
            let drop = if self.drop.load(Ordering::SeqCst) {
                req.holding
            } else {
                Vec::new()
            };
            Ok(tonic::Response::new(pb::NextChunkReply { orders, drop }))
        }

        type ChunkInputStream = Pieces;

        async fn chunk_input(
            &self,
            _req: tonic::Request<pb::ChunkInputRequest>,
        ) -> Result<tonic::Response<Pieces>, tonic::Status> {
            Err(tonic::Status::not_found("no input"))
        }

        async fn chunk_done(
            &self,
            _req: tonic::Request<tonic::Streaming<pb::ChunkDonePiece>>,
        ) -> Result<tonic::Response<pb::ChunkDoneReply>, tonic::Status> {
            Ok(tonic::Response::new(pb::ChunkDoneReply { recorded: false }))
        }
    }

    /// The server waits for a cancelled job's chunks' processes to end until the agent no
    /// longer lists them (the job's `stopping`): a chunk being computed when the server drops
    /// it stays listed until its process, SIGTERMed, has ended — its handler sleeps first — and
    /// a chunk waiting behind it, which never runs, leaves the list at once rather than when the
    /// other ends.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_dropped_chunk_is_listed_until_its_process_ended_and_a_waiting_one_not_at_all() {
        use std::sync::atomic::Ordering;
        let dir = ScratchDir::new("chunk", "dropped");
        let (me, _) = agent(&dir, false);
        let (started, ended, ran) = (dir.join("started"), dir.join("ended"), dir.join("ran"));
        let fake = Dropper {
            first: format!(
                "trap 'sleep 1; echo > {}; exit 0' TERM; echo > {}; \
                 for i in $(seq 600); do sleep 0.05; done",
                ended.display(),
                started.display()
            ),
            second: format!("echo > {}", ran.display()),
            ended: ended.clone(),
            drop: Arc::default(),
            asks: Arc::default(),
            handed: Arc::default(),
        };
        let (asks, drop_them) = (fake.asks.clone(), fake.drop.clone());
        let (channel, server) = {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
                .await
                .expect("bind");
            let address = listener.local_addr().expect("address");
            let server = tokio::spawn(
                tonic::transport::Server::builder()
                    .add_service(pb::divisible_server::DivisibleServer::new(fake))
                    .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
            );
            let channel = tonic::transport::Endpoint::from_shared(format!("http://{address}"))
                .expect("endpoint")
                .connect_lazy();
            (channel, server)
        };
        let (keep, connection) = tokio::sync::watch::channel(channel);
        let (_registered, registered) = tokio::sync::watch::channel(Some(1));
        let agent = Running(tokio::spawn(async move {
            let _keep = keep;
            run(
                connection,
                registered,
                pb::TokenInterceptor::new("t").expect("token"),
                me,
            )
            .await
        }));
        let listing = |both: &[(u64, u64)]| {
            let deadline = Instant::now() + Duration::from_secs(20);
            let asks = asks.clone();
            let both = both.to_vec();
            async move {
                while Instant::now() < deadline {
                    if asks.lock().expect("asks").last().is_some_and(|(l, _)| {
                        let mut l = l.clone();
                        l.sort_unstable();
                        l == both
                    }) {
                        return true;
                    }
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                false
            }
        };
        assert!(listing(&[(2, 4), (3, 0)]).await, "both chunks held");
        let deadline = Instant::now() + Duration::from_secs(20);
        while !started.exists() && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(started.exists(), "chunk 4 computes");
        drop_them.store(true, Ordering::SeqCst);
        let from = asks.lock().expect("asks").len();
        assert!(listing(&[]).await, "both leave the list");
        drop(agent);
        server.abort();
        let asks = asks.lock().expect("asks");
        let after = &asks[from..];
        assert!(
            after.iter().any(|(l, done)| l == &[(2, 4)] && !done),
            "the waiting chunk left the list while the other's handler ran: {after:?}"
        );
        for (l, done) in after {
            assert!(
                l.contains(&(2, 4)) || *done,
                "chunk 4 left the list before its process ended: {after:?}"
            );
        }
        assert!(!ran.exists(), "the dropped chunk that waited never ran");
    }
}
