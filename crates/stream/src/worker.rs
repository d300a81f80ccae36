//! A worker: one process (or, in tests and benches, one in-process instance) running the
//! executors of one topology that a placement puts on one (node, process). Executors are
//! threads; a tuple between two executors of the worker passes through the receiver's bounded
//! inbox (batches of up to [`BATCH`] tuples, at most [`INBOX_BATCHES`] batches queued), so a
//! slow executor blocks its producers instead of growing memory; between workers it goes over
//! TCP ([`crate::net`]).
//!
//! ## Reliability (ack/fail, at-least-once)
//! A reliable spout gives each tuple tree a root id (its own executor id + 1 in the top 16 bits)
//! and each edge a random 64-bit id; it keeps, per tree, the XOR of the edges it emitted. A bolt
//! that processes an input XORs the input's edge and the edges of the children it emitted
//! (anchored to the input) into one ack sent to the tree's spout — Storm's acker, kept in the
//! spout's executor. The value returns to 0 exactly when every edge has been acked, and the tree
//! is done. A tree failed by a bolt, or not done after the spout's `timeout`, is replayed:
//! the spout emits the same message again (new root). Tuples lost with a dead worker or a broken
//! connection are thus replayed, and a user gets **at-least-once**: every message's effects
//! happen at least once, some twice after a failure (a count may be higher than exact after a
//! replay, never lower). Bolt state (a count's table) lives in its worker and is lost with it.
//! Unreliable spouts send root 0 and nothing is tracked (at-most-once).
//!
//! ## Moving executors ([`Worker::reassign`])
//! A new placement that changes which executors a running worker hosts does not restart it:
//! executors that stay keep running (same thread, same state); executors that leave stop and
//! hand their state over ([`Frame::State`](crate::tuple::Frame::State) to their new worker: a
//! count's table, a built-in spout's position with its tuple trees still in flight); executors
//! that arrive start, and those whose earlier worker hands state over wait for it (at most
//! [`STATE_WAIT`]) before they take tuples, keeping what arrives meanwhile (a bolt that keeps
//! nothing hands over an empty state, so its next worker does not wait). A tuple, an ack or a
//! state that reaches a worker whose executor has left, or is not there yet (its sender did not
//! know yet, or reached the worker that had its index before a renumbering placement), is
//! parked and sent on to where the routes say once they agree ([`Shared::sweep`]), so nothing
//! in flight is lost on the way. Multi-lang programs and `join` keep no state across a move
//! (the program is started again at the new worker).

use crate::components::{self, BoltCode, SpoutCode, SpoutNext};
use crate::metrics::{
    ExecutorCounters, ExecutorReport, Histogram, PairCount, WorkerReport, bump, current_tid,
    now_ns, rss_bytes, thread_cpu_ns,
};
use crate::multilang;
use crate::net::{self, PeerLink};
use crate::tuple::{AckMsg, Tuple, Value};
use crossbeam_channel::{Receiver, RecvTimeoutError, Sender, bounded, unbounded};
use hetsched_core::input::stream_code::parse_runnable_topology;
use hetsched_core::model::stream_code::{ComponentCode, RunnableTopology, SpoutSettings};
use hetsched_core::model::topology::{ComponentKind, ExecutorId, Grouping};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeSet, HashMap};
use std::net::{SocketAddr, TcpListener};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use thiserror::Error;

/// Tuples per batch between executors.
pub const BATCH: usize = 256;
/// Batches an executor's inbox holds before its producers block.
pub const INBOX_BATCHES: usize = 32;
/// How often executors call their component's `tick` and check for a stop.
const TICK: Duration = Duration::from_millis(100);
/// Longest wait of an arriving executor for the state its earlier worker hands over; after it,
/// the executor starts empty (its earlier worker died with the state).
pub const STATE_WAIT: Duration = Duration::from_secs(10);
/// A parked tuple or ack is sent on by the routes after this long even if they did not change
/// (the sender's routes were newer than this worker's, and this worker has them now).
const PARK: Duration = Duration::from_millis(300);
/// Parked items older than this are dropped (counted in `dropped`; reliable spouts replay).
const PARK_LIMIT: Duration = Duration::from_secs(30);

/// Everything a worker needs to start.
#[derive(Clone, Serialize, Deserialize)]
pub struct WorkerConfig {
    /// Where the topology text came from (for error messages).
    pub topology_origin: String,
    /// The topology file's text (TOML with `builtin`/`command` per component).
    pub topology_text: String,
    /// This worker's index among the placement's workers.
    pub worker: u32,
    /// The worker index of every executor, indexed by executor id.
    pub assignment: Vec<u32>,
    /// Directory relative paths in params (corpus files, outputs, commands' working directory)
    /// are taken from.
    pub base_dir: PathBuf,
    /// Directory for the worker's own files (multi-lang pid files).
    pub work_dir: PathBuf,
    /// Address to listen on for other workers' tuples (`127.0.0.1:0`: any free port).
    pub listen: String,
    /// When the topology started, nanoseconds since the Unix epoch: the origin of spouts'
    /// `rate_schedule` (0: this worker's own start).
    #[serde(default)]
    pub started_ns: u64,
    /// Executors of this worker that move here from a running worker, which hands their state
    /// over: they wait for it (at most [`STATE_WAIT`]) before they start.
    #[serde(default)]
    pub await_state: Vec<u32>,
    /// The topology's worker key ([`crate::auth`]): other workers' connections must prove it
    /// before anything they send is read. At least [`crate::auth::MIN_KEY_LEN`] bytes; an agent
    /// derives it with [`crate::auth::topology_key`].
    #[serde(default)]
    pub key: String,
    /// Whether connections between workers are TLS ([`crate::channel`]): an agent sets it when
    /// it reaches its server over TLS.
    #[serde(default)]
    pub encrypt: bool,
}

impl std::fmt::Debug for WorkerConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkerConfig")
            .field("topology_origin", &self.topology_origin)
            .field("worker", &self.worker)
            .field("assignment", &self.assignment)
            .field("base_dir", &self.base_dir)
            .field("work_dir", &self.work_dir)
            .field("listen", &self.listen)
            .field("started_ns", &self.started_ns)
            .field("await_state", &self.await_state)
            .field("key", &"<hidden>")
            .field("encrypt", &self.encrypt)
            .finish_non_exhaustive()
    }
}

/// A worker that cannot start.
#[derive(Debug, Error)]
pub enum WorkerError {
    /// The topology file is invalid.
    #[error("{0}")]
    Topology(#[from] hetsched_core::input::InputError),
    /// The assignment does not fit the topology.
    #[error("the assignment names {got} executors, but the topology has {want}")]
    Assignment {
        /// Entries given.
        got: usize,
        /// Executors in the topology.
        want: usize,
    },
    /// A component cannot start (a corpus file missing, an output not writable, a program
    /// that does not run).
    #[error("{executor}: {message}")]
    Component {
        /// `<component>#<index>`.
        executor: String,
        /// What went wrong.
        message: String,
    },
    /// The listener cannot bind.
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        /// The address.
        addr: String,
        /// Why.
        source: std::io::Error,
    },
    /// TLS between workers cannot be set up.
    #[error("cannot set up TLS between workers: {0}")]
    Tls(std::io::Error),
    /// The worker key is missing or too short.
    #[error(
        "the worker key has {got} bytes; at least {} are needed (an agent derives it from the agent token)",
        crate::auth::MIN_KEY_LEN
    )]
    Key {
        /// Bytes given.
        got: usize,
    },
}

/// Where executors run, as this worker knows it: its own index and every executor's worker.
/// Replaced as a whole when the server applies a placement that keeps this worker's executors
/// ([`Worker::reassign`]).
#[derive(Debug)]
pub struct Routes {
    /// This worker's index.
    pub worker: u32,
    /// Worker of every executor.
    pub assignment: Vec<u32>,
}

/// State shared by a worker's threads.
#[derive(Debug)]
pub struct Shared {
    /// The routes now; `routes_gen` counts replacements so emitters notice.
    pub routes: RwLock<Arc<Routes>>,
    /// Replacements of `routes` so far.
    pub routes_gen: AtomicU64,
    /// The topology and its code.
    pub topo: RunnableTopology,
    /// Component of every executor.
    pub components: Vec<usize>,
    /// Inboxes of this worker's bolts.
    pub inboxes: RwLock<HashMap<u32, Sender<Vec<Tuple>>>>,
    /// Ack inboxes of this worker's spouts.
    pub ack_boxes: RwLock<HashMap<u32, Sender<AckMsg>>>,
    /// Links to other workers, made on first use.
    pub peers: Mutex<HashMap<u32, PeerLink>>,
    /// Other workers' addresses, as the controller last said.
    pub peer_addrs: RwLock<HashMap<u32, SocketAddr>>,
    /// Counters of every executor this worker has run (cumulative; those that left stop
    /// growing).
    pub counters: RwLock<HashMap<u32, Arc<ExecutorCounters>>>,
    /// The executors running here now.
    pub hosted: RwLock<BTreeSet<u32>>,
    /// Executor threads, by executor (a thread that left may still be handing over).
    threads: Mutex<Vec<JoinHandle<()>>>,
    /// Tuples and acks for executors not here, waiting for the routes to say where they go.
    limbo: Mutex<Vec<Parked>>,
    /// States handed over by earlier workers, not yet taken by their executors.
    states: Mutex<HashMap<u32, Vec<u8>>>,
    /// Origin of spouts' rate schedules, nanoseconds since the Unix epoch.
    pub started_ns: u64,
    /// Set to stop every thread.
    pub stop: AtomicBool,
    /// Tuples sent over TCP.
    pub remote_out: AtomicU64,
    /// Tuples received over TCP.
    pub remote_in: AtomicU64,
    /// Tuples dropped (broken connections, executors not here).
    pub dropped: AtomicU64,
    /// Latency at terminal executors.
    pub latency: Mutex<Histogram>,
    /// Where relative paths start.
    pub base_dir: PathBuf,
    /// The worker's own directory.
    pub work_dir: PathBuf,
    /// Proves and checks the worker key on every connection between workers.
    pub handshake: crate::auth::Handshake,
    /// TLS for connections between workers, when [`WorkerConfig::encrypt`].
    pub tls: Option<crate::channel::Tls>,
    /// Connections accepted that have not finished their handshake, in all and per source
    /// address.
    pub handshakes: crate::net::HandshakeSlots,
    /// Refused connections, warned about at a bounded rate.
    pub refusals: crate::net::Refusals,
}

impl Shared {
    /// The routes now.
    pub fn routes(&self) -> Arc<Routes> {
        match self.routes.read() {
            Ok(r) => r.clone(),
            Err(p) => p.into_inner().clone(),
        }
    }

    /// Whether the worker is stopping.
    pub fn stopping(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    /// Sends `item` on a bounded channel, blocking while it is full (back-pressure) but giving
    /// up when the worker stops. False when not sent.
    pub fn send_blocking<T>(&self, ch: &Sender<T>, mut item: T) -> bool {
        loop {
            match ch.send_timeout(item, Duration::from_millis(50)) {
                Ok(()) => return true,
                Err(crossbeam_channel::SendTimeoutError::Timeout(i)) => {
                    if self.stopping() {
                        return false;
                    }
                    item = i;
                }
                Err(crossbeam_channel::SendTimeoutError::Disconnected(_)) => return false,
            }
        }
    }

    /// The routes now with their generation (`routes_gen`), read in that order: a link asked
    /// for with this generation ([`Shared::link`]) is refused if the routes changed since, so a
    /// worker index is never looked up in a numbering it does not belong to.
    pub fn routes_now(&self) -> (u64, Arc<Routes>) {
        let g = self.routes_gen.load(Ordering::Acquire);
        (g, self.routes())
    }

    /// The link to worker `w` of the routes of generation `generation`, started on first use;
    /// `None` when the routes have changed since (a new placement may have renumbered the
    /// workers: `w` may now be another worker, or this one). [`Worker::reassign`] replaces the
    /// routes and the links under the same lock, so a link given out belongs to
    /// `generation`'s numbering.
    pub fn link(self: &Arc<Self>, w: u32, generation: u64) -> Option<PeerLink> {
        let mut peers = lock(&self.peers);
        if self.routes_gen.load(Ordering::Acquire) != generation {
            return None;
        }
        Some(
            peers
                .entry(w)
                .or_insert_with(|| net::spawn_peer(self.clone(), w, generation))
                .clone(),
        )
    }

    /// Hands tuples that arrived from another worker to their local executors; tuples for an
    /// executor not here are parked ([`Shared::sweep`] sends them on).
    pub fn deliver_local(&self, tuples: Vec<Tuple>) {
        let mut by_dst: HashMap<u32, Vec<Tuple>> = HashMap::new();
        for t in tuples {
            by_dst.entry(t.dst).or_default().push(t);
        }
        for (dst, batch) in by_dst {
            let inbox = read(&self.inboxes).get(&dst).cloned();
            match inbox {
                Some(inbox) => {
                    let n = batch.len() as u64;
                    if let Err(batch) = self.send_or_return(&inbox, batch) {
                        if self.stopping() {
                            self.dropped.fetch_add(n, Ordering::Relaxed);
                        } else {
                            self.park(Held::Tuples(dst, batch));
                        }
                    }
                }
                None => self.park(Held::Tuples(dst, batch)),
            }
        }
    }

    /// Like [`Shared::send_blocking`], but gives the item back when the receiver is gone.
    fn send_or_return<T>(&self, ch: &Sender<T>, mut item: T) -> Result<(), T> {
        loop {
            match ch.send_timeout(item, Duration::from_millis(50)) {
                Ok(()) => return Ok(()),
                Err(crossbeam_channel::SendTimeoutError::Timeout(i)) => {
                    if self.stopping() {
                        return Err(i);
                    }
                    item = i;
                }
                Err(crossbeam_channel::SendTimeoutError::Disconnected(i)) => return Err(i),
            }
        }
    }

    fn park(&self, item: Held) {
        let routes_at = self.routes_gen.load(Ordering::Acquire);
        lock(&self.limbo).push(Parked {
            at: Instant::now(),
            routes_at,
            item,
        });
    }

    /// Sends an ack towards the spout that owns its tree, here or in another worker. An ack
    /// that came from another worker (`from_remote`) for a spout not here is parked rather than
    /// sent straight back: the two workers' routes may disagree for a moment during a move.
    pub fn route_ack(self: &Arc<Self>, a: AckMsg, from_remote: bool) {
        let Some(spout) = AckMsg::spout_of(a.root) else {
            return;
        };
        let local = read(&self.ack_boxes).get(&spout).cloned();
        if let Some(b) = local {
            if let Err(e) = b.send(a) {
                self.park(Held::Ack(e.into_inner()));
            }
            return;
        }
        let (generation, routes) = self.routes_now();
        match routes.assignment.get(spout as usize) {
            Some(&w) if w != routes.worker && !from_remote => match self.link(w, generation) {
                Some(link) => {
                    let _ = link.acks.send(a);
                }
                // The routes just changed: parked, and sent by the new ones.
                None => self.park(Held::Ack(a)),
            },
            Some(_) => self.park(Held::Ack(a)),
            None => {}
        }
    }

    /// Keeps a state an earlier worker handed over, for its executor to take.
    pub fn take_state(&self, executor: u32, bytes: Vec<u8>) {
        lock(&self.states).insert(executor, bytes);
    }

    /// A state another worker handed over: kept when the routes put its executor here, else
    /// parked and sent on like a tuple ([`Shared::sweep`]). The sender may have reached the
    /// wrong worker (its routes or its peers' addresses were a placement ahead or behind this
    /// worker's); a state kept where its executor does not run would be lost, and the executor
    /// would start empty.
    pub fn receive_state(&self, executor: u32, bytes: Vec<u8>) {
        let routes = self.routes();
        if routes.assignment.get(executor as usize) == Some(&routes.worker) {
            self.take_state(executor, bytes);
        } else {
            self.park(Held::State(executor, bytes));
        }
    }

    /// Sends executor `e`'s state to the worker the routes now put it in.
    fn hand_over(self: &Arc<Self>, e: u32, bytes: Vec<u8>) {
        let (generation, routes) = self.routes_now();
        match routes.assignment.get(e as usize) {
            Some(&w) if w != routes.worker => match self.link(w, generation) {
                Some(link) => {
                    let _ = link.states.send((e, bytes));
                }
                None => self.park(Held::State(e, bytes)),
            },
            Some(_) => self.take_state(e, bytes),
            None => {}
        }
    }

    /// Sends parked tuples and acks on: to the local executor once it is here, else to the
    /// worker the routes name once the routes changed since parking or [`PARK`] has passed.
    pub fn sweep(self: &Arc<Self>) {
        let items = std::mem::take(&mut *lock(&self.limbo));
        if items.is_empty() {
            return;
        }
        let (routes_at, routes) = self.routes_now();
        let mut keep = Vec::new();
        for p in items {
            let due = p.routes_at != routes_at || p.at.elapsed() >= PARK;
            match p.item {
                Held::Tuples(dst, batch) => {
                    let inbox = read(&self.inboxes).get(&dst).cloned();
                    if let Some(inbox) = inbox {
                        if let Err(batch) = self.send_or_return(&inbox, batch) {
                            keep.push(Parked {
                                item: Held::Tuples(dst, batch),
                                ..p
                            });
                        }
                        continue;
                    }
                    match routes.assignment.get(dst as usize) {
                        Some(&w) if due && w != routes.worker => {
                            let n = batch.len() as u64;
                            // Routes changed meanwhile: kept for the next sweep.
                            let Some(link) = self.link(w, routes_at) else {
                                keep.push(Parked {
                                    item: Held::Tuples(dst, batch),
                                    ..p
                                });
                                continue;
                            };
                            if !self.send_blocking(&link.tuples, batch) {
                                self.dropped.fetch_add(n, Ordering::Relaxed);
                            }
                        }
                        Some(_) if p.at.elapsed() < PARK_LIMIT => keep.push(Parked {
                            item: Held::Tuples(dst, batch),
                            ..p
                        }),
                        _ => {
                            self.dropped
                                .fetch_add(batch.len() as u64, Ordering::Relaxed);
                        }
                    }
                }
                Held::State(e, bytes) => match routes.assignment.get(e as usize) {
                    Some(&w) if w == routes.worker => self.take_state(e, bytes),
                    Some(&w) if due => match self.link(w, routes_at) {
                        Some(link) => {
                            let _ = link.states.send((e, bytes));
                        }
                        None => keep.push(Parked {
                            item: Held::State(e, bytes),
                            ..p
                        }),
                    },
                    Some(_) if p.at.elapsed() < PARK_LIMIT => keep.push(Parked {
                        item: Held::State(e, bytes),
                        ..p
                    }),
                    _ => tracing::warn!(
                        "{}: a handed-over state found no worker: dropped",
                        self.topo.topology.executor_name(ExecutorId(e))
                    ),
                },
                Held::Ack(a) => {
                    let Some(spout) = AckMsg::spout_of(a.root) else {
                        continue;
                    };
                    let local = read(&self.ack_boxes).get(&spout).cloned();
                    if let Some(b) = local {
                        if let Err(e) = b.send(a) {
                            keep.push(Parked {
                                item: Held::Ack(e.into_inner()),
                                ..p
                            });
                        }
                        continue;
                    }
                    match routes.assignment.get(spout as usize) {
                        Some(&w) if due && w != routes.worker => match self.link(w, routes_at) {
                            Some(link) => {
                                let _ = link.acks.send(a);
                            }
                            None => keep.push(Parked {
                                item: Held::Ack(a),
                                ..p
                            }),
                        },
                        Some(_) if p.at.elapsed() < PARK_LIMIT => keep.push(Parked {
                            item: Held::Ack(a),
                            ..p
                        }),
                        _ => {}
                    }
                }
            }
        }
        lock(&self.limbo).extend(keep);
    }

    /// The counters of executor `e`, if it ever ran here.
    pub fn counter(&self, e: u32) -> Option<Arc<ExecutorCounters>> {
        read(&self.counters).get(&e).cloned()
    }

    /// Whether executor `e` runs here now.
    pub fn hosts(&self, e: u32) -> bool {
        read(&self.hosted).contains(&e)
    }
}

/// A tuple batch, an ack or a handed-over state waiting in [`Shared::sweep`]'s limbo.
#[derive(Debug)]
enum Held {
    Tuples(u32, Vec<Tuple>),
    Ack(AckMsg),
    /// An executor's state, for the worker the routes put it in.
    State(u32, Vec<u8>),
}

#[derive(Debug)]
struct Parked {
    at: Instant,
    /// `routes_gen` when parked.
    routes_at: u64,
    item: Held,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}

fn read<T>(m: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    match m.read() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}

fn write<T>(m: &RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    match m.write() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}

/// One outgoing stream of an executor.
#[derive(Debug)]
struct Out {
    grouping: Grouping,
    targets: Vec<u32>,
    next: usize,
}

/// An executor's sending side: routes each emitted tuple by its streams' groupings and buffers
/// it per local receiver or per peer worker, sending a buffer when it holds [`BATCH`] tuples or
/// when the executor has nothing else to do ([`Emitter::flush`]).
#[derive(Debug)]
pub struct Emitter {
    shared: Arc<Shared>,
    me: u32,
    outs: Vec<Out>,
    local: HashMap<u32, Vec<Tuple>>,
    remote: HashMap<u32, Vec<Tuple>>,
    routes: Arc<Routes>,
    routes_seen: u64,
    rng: u64,
    emitted: u64,
    counters: Option<Arc<ExecutorCounters>>,
}

impl Emitter {
    pub(crate) fn new(shared: Arc<Shared>, me: u32) -> Self {
        let c = shared.components[me as usize];
        let (routes_seen, routes) = shared.routes_now();
        let topo = &shared.topo.topology;
        let outs = topo
            .streams
            .iter()
            .filter(|s| s.from == c)
            .map(|s| {
                let first = topo.first_executor(s.to).0;
                Out {
                    grouping: s.grouping,
                    targets: (first..first + topo.components[s.to].parallelism).collect(),
                    next: me as usize,
                }
            })
            .collect();
        Self {
            counters: shared.counter(me),
            routes_seen,
            routes,
            rng: 0x9e37_79b9_7f4a_7c15 ^ (u64::from(me) << 17) ^ now_ns(),
            shared,
            me,
            outs,
            local: HashMap::new(),
            remote: HashMap::new(),
            emitted: 0,
        }
    }

    /// Whether this executor has any outgoing stream.
    pub fn has_outputs(&self) -> bool {
        !self.outs.is_empty()
    }

    fn random_edge(&mut self) -> u64 {
        // xorshift64*: fast, and edge ids only need to be distinct with high probability.
        let mut x = self.rng;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.rng = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d) | 1
    }

    /// Emits `values` on every outgoing stream, in tree `root` (0: untracked) with the root's
    /// emit time `emitted_ns`. Returns the XOR of the new edges' ids (0 when untracked), and
    /// pushes the receiving executors into `targets` when given.
    pub fn emit(
        &mut self,
        values: Vec<Value>,
        root: u64,
        emitted_ns: u64,
        mut targets: Option<&mut Vec<u32>>,
    ) -> u64 {
        let mut xor = 0;
        let mut dsts: Vec<u32> = Vec::with_capacity(2);
        for o in &mut self.outs {
            match o.grouping {
                Grouping::Shuffle => {
                    o.next = (o.next + 1) % o.targets.len();
                    dsts.push(o.targets[o.next]);
                }
                Grouping::Fields => {
                    let h = values.first().map_or(0, Value::key_hash);
                    dsts.push(o.targets[(h % o.targets.len() as u64) as usize]);
                }
                Grouping::Global => dsts.push(o.targets[0]),
                Grouping::All => dsts.extend_from_slice(&o.targets),
            }
        }
        let n = dsts.len();
        let mut values = Some(values);
        for (i, dst) in dsts.into_iter().enumerate() {
            let edge = if root != 0 { self.random_edge() } else { 0 };
            xor ^= edge;
            let v = if i + 1 == n {
                values.take().unwrap_or_default()
            } else {
                values.clone().unwrap_or_default()
            };
            self.push(Tuple {
                src: self.me,
                dst,
                root,
                edge,
                emitted_ns,
                values: v,
            });
            if let Some(t) = targets.as_deref_mut() {
                t.push(dst);
            }
        }
        self.emitted += n as u64;
        xor
    }

    fn push(&mut self, t: Tuple) {
        let w = self.routes.assignment[t.dst as usize];
        if w == self.routes.worker {
            let dst = t.dst;
            let buf = self.local.entry(dst).or_default();
            buf.push(t);
            if buf.len() >= BATCH {
                let b = std::mem::take(buf);
                self.send_local(dst, b);
            }
        } else {
            let buf = self.remote.entry(w).or_default();
            buf.push(t);
            if buf.len() >= BATCH {
                let b = std::mem::take(buf);
                self.send_remote(w, b);
            }
        }
    }

    fn send_local(&self, dst: u32, b: Vec<Tuple>) {
        let n = b.len() as u64;
        let inbox = read(&self.shared.inboxes).get(&dst).cloned();
        // An executor that just left (these routes are older than the worker's): parked, and
        // sent on to its new worker.
        let Some(inbox) = inbox else {
            self.shared.park(Held::Tuples(dst, b));
            return;
        };
        if let Err(b) = self.shared.send_or_return(&inbox, b) {
            if self.shared.stopping() {
                self.shared.dropped.fetch_add(n, Ordering::Relaxed);
            } else {
                self.shared.park(Held::Tuples(dst, b));
            }
        }
    }

    fn send_remote(&self, w: u32, b: Vec<Tuple>) {
        let n = b.len() as u64;
        // `w` is a worker index of this emitter's routes; when the worker's routes changed
        // since, `w` may name another worker now (or this one, and a link to itself never
        // connects): the batch is taken here and parked instead, and sent on by the new routes.
        let Some(link) = self.shared.link(w, self.routes_seen) else {
            self.shared.deliver_local(b);
            return;
        };
        if !self.shared.send_blocking(&link.tuples, b) {
            self.shared.dropped.fetch_add(n, Ordering::Relaxed);
        }
    }

    /// Sends every buffered tuple now, and publishes the emitted count. When the routes changed,
    /// buffered tuples are routed again first.
    pub fn flush(&mut self) {
        let (g, routes) = self.shared.routes_now();
        if g != self.routes_seen {
            self.routes_seen = g;
            self.routes = routes;
            let pending: Vec<Tuple> = self
                .local
                .drain()
                .chain(self.remote.drain())
                .flat_map(|(_, b)| b)
                .collect();
            for t in pending {
                self.push(t);
            }
        }
        let local: Vec<(u32, Vec<Tuple>)> = self
            .local
            .iter_mut()
            .filter(|(_, b)| !b.is_empty())
            .map(|(d, b)| (*d, std::mem::take(b)))
            .collect();
        for (d, b) in local {
            self.send_local(d, b);
        }
        let remote: Vec<(u32, Vec<Tuple>)> = self
            .remote
            .iter_mut()
            .filter(|(_, b)| !b.is_empty())
            .map(|(w, b)| (*w, std::mem::take(b)))
            .collect();
        for (w, b) in remote {
            self.send_remote(w, b);
        }
        if self.emitted > 0
            && let Some(c) = &self.counters
        {
            bump(&c.emitted, self.emitted);
            self.emitted = 0;
        }
    }

    /// The worker's shared state.
    pub fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }
}

/// A bolt's view while it processes one input: what it emits is anchored to the input.
pub struct BoltOut<'a> {
    em: &'a mut Emitter,
    root: u64,
    emitted_ns: u64,
    xor: u64,
}

impl BoltOut<'_> {
    /// Emits `values`, anchored to the input being processed.
    pub fn emit(&mut self, values: Vec<Value>) {
        self.xor ^= self.em.emit(values, self.root, self.emitted_ns, None);
    }
}

/// A running worker.
#[derive(Debug)]
pub struct Worker {
    shared: Arc<Shared>,
    addr: SocketAddr,
}

/// An executor's code, built and ready to run on its thread.
type Start = Box<dyn FnOnce() + Send>;

impl Shared {
    /// Builds executor `e`'s component and its inbox (or ack inbox), ready to start; the inbox
    /// is registered at once, so tuples sent to it from now on wait in it.
    fn build(self: &Arc<Self>, e: u32, await_state: bool) -> Result<Start, WorkerError> {
        let components = &self.components;
        let c = components[e as usize];
        let comp = &self.topo.topology.components[c];
        let index = e - self.topo.topology.first_executor(c).0;
        let name = self.topo.topology.executor_name(ExecutorId(e));
        let fail = |message: String| WorkerError::Component {
            executor: name.clone(),
            message,
        };
        let n = self.components.len();
        let counters = {
            let mut all = write(&self.counters);
            let c = all
                .entry(e)
                .or_insert_with(|| Arc::new(ExecutorCounters::new(n)));
            c.moved.store(false, Ordering::Relaxed);
            // An executor started again here (a placement moved it back) ends afresh.
            c.unacked.store(0, Ordering::Relaxed);
            if let Ok(mut ended) = c.ended.lock() {
                *ended = None;
            }
            c.gave_up.store(false, Ordering::Relaxed);
            c.clone()
        };
        let _ = counters;
        let sh = self.clone();
        let start: Start = match (&self.topo.code[c], comp.kind) {
            (ComponentCode::Builtin(b), ComponentKind::Spout) => {
                let code =
                    components::spout(b, &self.base_dir, index, comp.parallelism).map_err(fail)?;
                let settings = spout_settings(b);
                let (tx, rx) = unbounded();
                write(&self.ack_boxes).insert(e, tx);
                Box::new(move || run_spout(sh, e, code, settings, rx, await_state))
            }
            (ComponentCode::Builtin(b), ComponentKind::Bolt) => {
                let inputs: Vec<usize> = {
                    let mut v: Vec<usize> = self
                        .topo
                        .topology
                        .streams
                        .iter()
                        .filter(|s| s.to == c)
                        .map(|s| s.from)
                        .collect();
                    v.sort_unstable();
                    v.dedup();
                    v
                };
                let emits = self.topo.topology.streams.iter().any(|s| s.from == c);
                let code = components::bolt(b, &self.base_dir, index, emits, components, &inputs)
                    .map_err(fail)?;
                let (tx, rx) = bounded(INBOX_BATCHES);
                write(&self.inboxes).insert(e, tx);
                Box::new(move || run_bolt(sh, e, code, rx, await_state))
            }
            (ComponentCode::Command { argv, conf }, kind) => {
                // One that cannot start is started again on its thread, as one that ended.
                let shell = multilang::Shell::start(self, e, argv, conf);
                let code = multilang::ProgramCode {
                    argv: argv.clone(),
                    conf: conf.clone(),
                };
                if kind == ComponentKind::Spout {
                    let (tx, rx) = unbounded();
                    write(&self.ack_boxes).insert(e, tx);
                    Box::new(move || multilang::run_shell_spout(sh, e, shell, code, rx))
                } else {
                    let (tx, rx) = bounded(INBOX_BATCHES);
                    write(&self.inboxes).insert(e, tx);
                    Box::new(move || multilang::run_shell_bolt(sh, e, shell, code, rx))
                }
            }
        };
        Ok(start)
    }

    /// Starts built executors on their threads and marks them hosted.
    fn launch(self: &Arc<Self>, starts: Vec<(u32, Start)>) -> Result<(), WorkerError> {
        for (e, start) in starts {
            let name = self.topo.topology.executor_name(ExecutorId(e));
            let sh = self.clone();
            write(&self.hosted).insert(e);
            let h = std::thread::Builder::new()
                .name(name.clone())
                .spawn(move || {
                    if let Some(c) = sh.counter(e) {
                        c.tid.store(current_tid(), Ordering::Relaxed);
                        c.started_ns.store(now_ns(), Ordering::Relaxed);
                    }
                    start();
                })
                .map_err(|err| WorkerError::Component {
                    executor: name,
                    message: format!("cannot start its thread: {err}"),
                })?;
            lock(&self.threads).push(h);
        }
        Ok(())
    }
}

impl Worker {
    /// Starts the worker: parses the topology, binds the listener, starts every local executor.
    pub fn start(config: WorkerConfig) -> Result<Worker, WorkerError> {
        if config.key.len() < crate::auth::MIN_KEY_LEN {
            return Err(WorkerError::Key {
                got: config.key.len(),
            });
        }
        let topo = parse_runnable_topology(&config.topology_origin, &config.topology_text)?;
        let tls = if config.encrypt {
            Some(crate::channel::Tls::new().map_err(WorkerError::Tls)?)
        } else {
            None
        };
        let n = topo.topology.executor_count();
        if config.assignment.len() != n {
            return Err(WorkerError::Assignment {
                got: config.assignment.len(),
                want: n,
            });
        }
        let listener = TcpListener::bind(&config.listen).map_err(|source| WorkerError::Listen {
            addr: config.listen.clone(),
            source,
        })?;
        let addr = listener
            .local_addr()
            .map_err(|source| WorkerError::Listen {
                addr: config.listen.clone(),
                source,
            })?;
        let components = topo.topology.executor_components();
        let mine: Vec<u32> = (0..n as u32)
            .filter(|&e| config.assignment[e as usize] == config.worker)
            .collect();
        let _ = std::fs::create_dir_all(&config.work_dir);
        let shared = Arc::new(Shared {
            routes: RwLock::new(Arc::new(Routes {
                worker: config.worker,
                assignment: config.assignment.clone(),
            })),
            routes_gen: AtomicU64::new(0),
            components,
            inboxes: RwLock::new(HashMap::new()),
            ack_boxes: RwLock::new(HashMap::new()),
            peers: Mutex::new(HashMap::new()),
            peer_addrs: RwLock::new(HashMap::new()),
            counters: RwLock::new(HashMap::new()),
            hosted: RwLock::new(BTreeSet::new()),
            threads: Mutex::new(Vec::new()),
            limbo: Mutex::new(Vec::new()),
            states: Mutex::new(HashMap::new()),
            started_ns: if config.started_ns > 0 {
                config.started_ns
            } else {
                now_ns()
            },
            stop: AtomicBool::new(false),
            remote_out: AtomicU64::new(0),
            remote_in: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
            latency: Mutex::new(Histogram::default()),
            base_dir: config.base_dir.clone(),
            work_dir: config.work_dir.clone(),
            handshake: crate::auth::Handshake::new(&config.key),
            tls,
            handshakes: crate::net::HandshakeSlots::default(),
            refusals: crate::net::Refusals::default(),
            topo,
        });
        // Build every component before starting any thread, so a bad one stops the worker
        // cleanly.
        let mut starts = Vec::new();
        for &e in &mine {
            let wait = config.await_state.contains(&e);
            match shared.build(e, wait) {
                Ok(s) => starts.push((e, s)),
                Err(err) => {
                    shared.stop.store(true, Ordering::Relaxed);
                    return Err(err);
                }
            }
        }
        net::spawn_listener(shared.clone(), listener);
        let sweeper = shared.clone();
        std::thread::Builder::new()
            .name("limbo".into())
            .spawn(move || {
                while !sweeper.stopping() {
                    std::thread::sleep(Duration::from_millis(50));
                    sweeper.sweep();
                }
            })
            .map_err(|err| WorkerError::Component {
                executor: "limbo".into(),
                message: format!("cannot start its thread: {err}"),
            })?;
        shared.launch(starts)?;
        Ok(Worker { shared, addr })
    }

    /// The address other workers send tuples to.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Tells the worker where the other workers listen (replacing what it knew; a worker that
    /// moved is reached at its new address on the next connection).
    pub fn set_peers(&self, peers: HashMap<u32, SocketAddr>) {
        if let Ok(mut m) = self.shared.peer_addrs.write() {
            *m = peers;
        }
    }

    /// Takes a new placement: the worker becomes worker `worker` of `assignment`. Executors that
    /// stay here keep running (and their state); executors the placement takes away stop and
    /// hand their state to their new worker; executors it brings start — those in
    /// `await_state` first wait for the state their earlier worker hands over. Tuples go by the
    /// new routes from now on. Connections to other workers are dropped, and their addresses
    /// forgotten (their indices may mean other workers now): nothing goes to another worker
    /// until the new peers are given with [`Worker::set_peers`]. Returns the executors started
    /// and stopped.
    pub fn reassign(
        &self,
        worker: u32,
        assignment: Vec<u32>,
        await_state: &[u32],
    ) -> Result<(Vec<u32>, Vec<u32>), String> {
        let sh = &self.shared;
        if assignment.len() != sh.components.len() {
            return Err(format!(
                "the assignment names {} executors, but the topology has {}",
                assignment.len(),
                sh.components.len()
            ));
        }
        let before: BTreeSet<u32> = read(&sh.hosted).clone();
        let after: BTreeSet<u32> = (0..assignment.len() as u32)
            .filter(|&e| assignment[e as usize] == worker)
            .collect();
        let arriving: Vec<u32> = after.difference(&before).copied().collect();
        let leaving: Vec<u32> = before.difference(&after).copied().collect();
        // Arriving executors get their inboxes before the routes change, so nothing routed here
        // by the new routes finds none.
        let mut starts = Vec::new();
        for &e in &arriving {
            let start = sh
                .build(e, await_state.contains(&e))
                .map_err(|err| err.to_string())?;
            starts.push((e, start));
        }
        // Worker indices may name other workers now: the links and the addresses go, and a
        // link waits for the new addresses ([`Worker::set_peers`], given next). A link made
        // with an old address would carry what is meant for worker `w` to the worker that was
        // `w`, for as long as that connection lasts. The routes, their generation, the links
        // and the addresses change together, under the links' and the addresses' locks: a
        // sender holding routes of the old generation gets no link ([`Shared::link`]), and a
        // link of the old generation that has not connected yet connects nowhere
        // ([`net::spawn_peer`]); what they carry is parked and sent by the new routes. Else a
        // tuple routed to worker `w` by the old routes could take the new numbering's link `w`
        // (this worker itself, after a renumbering: lost), and its tree be replayed: counted
        // twice where the rest of it arrived.
        {
            let mut peers = lock(&sh.peers);
            let mut addrs = write(&sh.peer_addrs);
            *write(&sh.routes) = Arc::new(Routes { worker, assignment });
            peers.clear();
            addrs.clear();
            sh.routes_gen.fetch_add(1, Ordering::AcqRel);
        }
        // Leaving executors: no new input reaches them (their inboxes close; what is queued is
        // still taken), then they hand over and end.
        for &e in &leaving {
            write(&sh.hosted).remove(&e);
            if let Some(c) = sh.counter(e) {
                c.moved.store(true, Ordering::Release);
            }
            write(&sh.inboxes).remove(&e);
            write(&sh.ack_boxes).remove(&e);
        }
        sh.launch(starts).map_err(|err| err.to_string())?;
        Ok((arriving, leaving))
    }

    /// Executor `e`'s live counters, if it ever ran here: what reports are made of, read at
    /// any moment (an executor that left is no longer in the reports).
    pub fn counter(&self, e: u32) -> Option<Arc<ExecutorCounters>> {
        self.shared.counter(e)
    }

    /// The counters now.
    pub fn report(&self) -> WorkerReport {
        report(&self.shared)
    }

    /// Whether every local spout has emitted everything and has nothing in flight.
    pub fn spouts_done(&self) -> bool {
        let hosted = read(&self.shared.hosted).clone();
        hosted.iter().all(|e| {
            !self.shared.ack_boxes_has(*e)
                || self
                    .shared
                    .counter(*e)
                    .is_some_and(|c| c.done.load(Ordering::Relaxed))
        })
    }

    /// Stops every thread (components' `finish` runs, e.g. counts write their last snapshot).
    /// Tuples and acks parked for executors that left are sent on first, and what is queued
    /// towards other workers is given a moment to leave (at most about 2 s in all).
    pub fn stop(self) {
        let sh = &self.shared;
        let until = Instant::now() + Duration::from_secs(1);
        while !lock(&sh.limbo).is_empty() && Instant::now() < until {
            let items = std::mem::take(&mut *lock(&sh.limbo));
            // Forced: the routes this worker has are the newest it will get.
            lock(&sh.limbo).extend(items.into_iter().map(|mut p| {
                p.routes_at = u64::MAX;
                p
            }));
            sh.sweep();
            std::thread::sleep(Duration::from_millis(20));
        }
        let until = Instant::now() + Duration::from_secs(1);
        while Instant::now() < until
            && lock(&sh.peers)
                .values()
                .any(|l| !l.tuples.is_empty() || !l.acks.is_empty() || !l.states.is_empty())
        {
            std::thread::sleep(Duration::from_millis(20));
        }
        self.shared.stop.store(true, Ordering::Relaxed);
        let threads = std::mem::take(&mut *lock(&self.shared.threads));
        for t in threads {
            let _ = t.join();
        }
    }
}

impl Shared {
    fn ack_boxes_has(&self, e: u32) -> bool {
        read(&self.ack_boxes).contains_key(&e)
    }
}

pub(crate) fn spout_settings(b: &hetsched_core::model::stream_code::Builtin) -> SpoutSettings {
    use hetsched_core::model::stream_code::Builtin;
    match b {
        Builtin::CorpusSpout { spout, .. } | Builtin::SequenceSpout { spout, .. } => spout.clone(),
        _ => SpoutSettings {
            reliable: false,
            max_pending: 1000,
            timeout_ns: 30_000_000_000,
            rate: None,
            rate_schedule: Vec::new(),
        },
    }
}

/// The counters of `shared` now.
pub fn report(shared: &Shared) -> WorkerReport {
    let mut pairs = Vec::new();
    let mut executors = Vec::new();
    let mut all: Vec<(u32, Arc<ExecutorCounters>)> = read(&shared.counters)
        .iter()
        .map(|(e, c)| (*e, c.clone()))
        .collect();
    all.sort_by_key(|(e, _)| *e);
    let hosted = read(&shared.hosted).clone();
    for (e, c) in all {
        let mut received = 0;
        for (from, n) in c.received_from.iter().enumerate() {
            let n = n.load(Ordering::Relaxed);
            if n > 0 {
                received += n;
                pairs.push(PairCount {
                    from: from as u32,
                    to: e,
                    tuples: n,
                });
            }
        }
        // An executor that left is not this worker's any more: its pairs stay (cumulative,
        // they no longer grow), its entry goes.
        if !hosted.contains(&e) {
            continue;
        }
        executors.push(ExecutorReport {
            executor: e,
            name: shared.topo.topology.executor_name(ExecutorId(e)),
            cpu_ns: thread_cpu_ns(c.tid.load(Ordering::Relaxed)),
            emitted: c.emitted.load(Ordering::Relaxed),
            received,
            acked: c.acked.load(Ordering::Relaxed),
            failed: c.failed.load(Ordering::Relaxed),
            done: c.done.load(Ordering::Relaxed),
            started_ns: c.started_ns.load(Ordering::Relaxed),
            unacked: c.unacked.load(Ordering::Relaxed),
            expired: c.expired.load(Ordering::Relaxed),
            restarts: c.restarts.load(Ordering::Relaxed),
            ended: c.ended.lock().ok().and_then(|e| e.clone()),
            gave_up: c.gave_up.load(Ordering::Relaxed),
        });
    }
    let latency = shared
        .latency
        .lock()
        .map(|h| h.summary())
        .unwrap_or_default();
    WorkerReport {
        worker: shared.routes().worker,
        at_ns: now_ns(),
        pairs,
        executors,
        remote_out: shared.remote_out.load(Ordering::Relaxed),
        remote_in: shared.remote_in.load(Ordering::Relaxed),
        dropped: shared.dropped.load(Ordering::Relaxed),
        latency,
        rss_bytes: rss_bytes(),
        encrypted: shared.tls.is_some(),
        refused_connections: shared.refusals.total(),
    }
}

/// A tuple tree in flight from a reliable spout.
#[derive(Debug)]
pub struct Pending {
    /// XOR of the edges not yet acked.
    pub xor: u64,
    /// When it was emitted (`Instant` for timeouts).
    pub at: Instant,
    /// The spout's message id.
    pub msg: u64,
}

/// The reliable-spout bookkeeping shared by built-in and multi-lang spouts.
#[derive(Debug, Default)]
pub struct Tracker {
    /// Trees in flight by root.
    pub pending: HashMap<u64, Pending>,
    pub(crate) next_root: u64,
}

impl Tracker {
    /// A new root id for spout executor `me`.
    pub fn new_root(&mut self, me: u32) -> u64 {
        self.next_root = self.next_root.wrapping_add(1) & ((1 << 48) - 1);
        if self.next_root == 0 {
            self.next_root = 1;
        }
        (u64::from(me + 1) << 48) | self.next_root
    }

    /// Applies an ack; returns `Some((msg, ok))` when the tree is done (acked) or failed.
    pub fn apply(&mut self, a: AckMsg) -> Option<(u64, bool)> {
        if a.fail {
            return self.pending.remove(&a.root).map(|p| (p.msg, false));
        }
        let p = self.pending.get_mut(&a.root)?;
        p.xor ^= a.xor;
        if p.xor == 0 {
            return self.pending.remove(&a.root).map(|p| (p.msg, true));
        }
        None
    }

    /// Removes and returns the message ids of trees older than `timeout`.
    pub fn expire(&mut self, timeout: Duration) -> Vec<u64> {
        let now = Instant::now();
        let old: Vec<u64> = self
            .pending
            .iter()
            .filter(|(_, p)| now.duration_since(p.at) >= timeout)
            .map(|(r, _)| *r)
            .collect();
        old.into_iter()
            .filter_map(|r| self.pending.remove(&r).map(|p| p.msg))
            .collect()
    }
}

/// What a built-in spout hands to its next worker when a placement moves it: where its code
/// is, its tuple trees still in flight (the new worker takes their acks, and replays those
/// that fail or time out) and the messages waiting for a replay.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct Handoff {
    /// The code's position ([`SpoutCode::position`]).
    pub position: Option<u64>,
    /// The tracker's last root.
    pub next_root: u64,
    /// Trees in flight: (root, XOR of the edges not yet acked, message id).
    pub pending: Vec<(u64, u64, u64)>,
    /// Messages waiting for a replay.
    pub replay: Vec<u64>,
    /// Whether the code had emitted everything.
    pub source_done: bool,
}

/// Waits for the state an earlier worker hands over for executor `me` (at most [`STATE_WAIT`];
/// `None` when none came, or the worker stops). `keep` is called meanwhile, so a bolt can take
/// its inbox and not block its senders.
fn wait_state(shared: &Shared, me: u32, mut keep: impl FnMut()) -> Option<Vec<u8>> {
    let until = Instant::now() + STATE_WAIT;
    while Instant::now() < until && !shared.stopping() {
        if let Some(s) = lock(&shared.states).remove(&me) {
            return Some(s);
        }
        keep();
        std::thread::sleep(Duration::from_millis(10));
    }
    tracing::warn!(
        "{}: no state handed over within {STATE_WAIT:?}: starting empty",
        shared.topo.topology.executor_name(ExecutorId(me))
    );
    None
}

fn run_spout(
    shared: Arc<Shared>,
    me: u32,
    mut code: Box<dyn SpoutCode>,
    settings: SpoutSettings,
    acks: Receiver<AckMsg>,
    await_state: bool,
) {
    let Some(counters) = shared.counter(me) else {
        return;
    };
    let mut em = Emitter::new(shared.clone(), me);
    let mut tracker = Tracker::default();
    let mut replay: Vec<u64> = Vec::new();
    let mut source_done = false;
    if await_state && let Some(bytes) = wait_state(&shared, me, || {}) {
        match serde_json::from_slice::<Handoff>(&bytes) {
            Ok(h) => {
                if let Some(p) = h.position {
                    code.resume(p);
                }
                tracker.next_root = h.next_root;
                for (root, xor, msg) in h.pending {
                    tracker.pending.insert(
                        root,
                        Pending {
                            xor,
                            at: Instant::now(),
                            msg,
                        },
                    );
                }
                replay = h.replay;
                source_done = h.source_done;
            }
            Err(e) => tracing::warn!("a spout's handed-over state does not decode: {e}"),
        }
    }
    let timed = settings.rate.is_some() || !settings.rate_schedule.is_empty();
    // The rate in force (spec: `rate`, then `rate_schedule`'s steps, from the topology's start)
    // is kept per segment: emissions since the segment began (or this executor started).
    let mut segment = usize::MAX;
    let mut segment_start = Instant::now();
    let mut segment_emitted: u64 = 0;
    let mut last_check = Instant::now();
    let timeout = Duration::from_nanos(settings.timeout_ns);
    let mut since_flush = 0usize;
    let on_ack = |tracker: &mut Tracker, replay: &mut Vec<u64>, a: AckMsg| {
        if let Some((msg, ok)) = tracker.apply(a) {
            if ok {
                bump(&counters.acked, 1);
            } else {
                bump(&counters.failed, 1);
                replay.push(msg);
            }
        }
    };
    while !shared.stopping() && !counters.moved.load(Ordering::Acquire) {
        // Acks first: they free room under max_pending.
        while let Ok(a) = acks.try_recv() {
            on_ack(&mut tracker, &mut replay, a);
        }
        if settings.reliable && last_check.elapsed() >= TICK {
            last_check = Instant::now();
            for msg in tracker.expire(timeout) {
                bump(&counters.failed, 1);
                replay.push(msg);
            }
        }
        let full = settings.reliable && tracker.pending.len() >= settings.max_pending as usize;
        let throttled = timed && {
            let seg = settings.rate_at(now_ns().saturating_sub(shared.started_ns));
            if seg.index != segment {
                segment = seg.index;
                segment_start = Instant::now();
                segment_emitted = 0;
            }
            seg.rate.is_some_and(|r| {
                segment_emitted as f64 >= r * segment_start.elapsed().as_secs_f64()
            })
        };
        let nothing = source_done && replay.is_empty();
        if full || throttled || nothing {
            em.flush();
            since_flush = 0;
            let idle_done = nothing && tracker.pending.is_empty();
            counters.done.store(idle_done, Ordering::Relaxed);
            let wait = if throttled && !full && !nothing {
                Duration::from_millis(1)
            } else {
                Duration::from_millis(20)
            };
            match acks.recv_timeout(wait) {
                Ok(a) => on_ack(&mut tracker, &mut replay, a),
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => break,
            }
            continue;
        }
        let (msg, values) = if let Some(msg) = replay.pop() {
            (msg, code.replay(msg))
        } else {
            match code.next() {
                SpoutNext::Emit(msg, values) => (msg, values),
                SpoutNext::Done => {
                    source_done = true;
                    continue;
                }
            }
        };
        let now = now_ns();
        if settings.reliable {
            let root = tracker.new_root(me);
            let xor = em.emit(values, root, now, None);
            if xor != 0 {
                tracker.pending.insert(
                    root,
                    Pending {
                        xor,
                        at: Instant::now(),
                        msg,
                    },
                );
            } else {
                bump(&counters.acked, 1);
            }
        } else {
            em.emit(values, 0, now, None);
        }
        segment_emitted += 1;
        since_flush += 1;
        if since_flush >= BATCH {
            em.flush();
            since_flush = 0;
        }
    }
    em.flush();
    if !counters.moved.load(Ordering::Acquire) {
        return;
    }
    // Moved: take the acks still on their way here (the inbox closed: this ends once every
    // sender is done), then hand the spout over.
    let until = Instant::now() + Duration::from_secs(2);
    while Instant::now() < until {
        match acks.recv_timeout(Duration::from_millis(20)) {
            Ok(a) => on_ack(&mut tracker, &mut replay, a),
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => break,
        }
    }
    let h = Handoff {
        position: code.position(),
        next_root: tracker.next_root,
        pending: tracker
            .pending
            .iter()
            .map(|(r, p)| (*r, p.xor, p.msg))
            .collect(),
        replay,
        source_done,
    };
    match serde_json::to_vec(&h) {
        Ok(bytes) => shared.hand_over(me, bytes),
        Err(e) => tracing::error!("cannot encode a spout's state: {e}"),
    }
}

fn run_bolt(
    shared: Arc<Shared>,
    me: u32,
    mut code: Box<dyn BoltCode>,
    inbox: Receiver<Vec<Tuple>>,
    await_state: bool,
) {
    let Some(counters) = shared.counter(me) else {
        return;
    };
    let mut em = Emitter::new(shared.clone(), me);
    let terminal = !em.has_outputs();
    let mut hist = Histogram::default();
    let mut last_tick = Instant::now();
    // Tuples that arrived while waiting for the state: taken first.
    let mut early: Vec<Vec<Tuple>> = Vec::new();
    if await_state {
        let state = wait_state(&shared, me, || {
            while let Ok(b) = inbox.try_recv() {
                early.push(b);
            }
        });
        if let Some(st) = state.filter(|st| !st.is_empty()) {
            code.restore(&st);
        }
    }
    let mut early = early.into_iter();
    loop {
        let batch = match early.next() {
            Some(b) => Some(b),
            None => match inbox.try_recv() {
                Ok(b) => Some(b),
                Err(_) => {
                    em.flush();
                    if let Ok(mut h) = shared.latency.lock() {
                        hist.drain_into(&mut h);
                    }
                    match inbox.recv_timeout(TICK) {
                        Ok(b) => Some(b),
                        Err(RecvTimeoutError::Timeout) => None,
                        Err(RecvTimeoutError::Disconnected) => break,
                    }
                }
            },
        };
        if let Some(batch) = batch {
            let now = if terminal { now_ns() } else { 0 };
            for t in &batch {
                if let Some(c) = counters.received_from.get(t.src as usize) {
                    bump(c, 1);
                }
                if terminal {
                    hist.record(now.saturating_sub(t.emitted_ns) / 1000);
                }
                let mut out = BoltOut {
                    em: &mut em,
                    root: t.root,
                    emitted_ns: t.emitted_ns,
                    xor: 0,
                };
                code.execute(t, &mut out);
                if t.root != 0 {
                    let xor = t.edge ^ out.xor;
                    shared.route_ack(
                        AckMsg {
                            root: t.root,
                            xor,
                            fail: false,
                        },
                        false,
                    );
                }
            }
        }
        if last_tick.elapsed() >= TICK {
            last_tick = Instant::now();
            code.tick(now_ns());
            if shared.stopping() {
                break;
            }
        }
    }
    code.finish();
    em.flush();
    if let Ok(mut h) = shared.latency.lock() {
        hist.drain_into(&mut h);
    }
    // Moved (its inbox closed and every queued tuple is taken): hand what it keeps over —
    // nothing (empty) for a bolt that keeps nothing, so that its next worker, which waits for
    // a state, starts it at once rather than after [`STATE_WAIT`].
    if counters.moved.load(Ordering::Acquire) && !shared.stopping() {
        shared.hand_over(me, code.state().unwrap_or_default());
    }
}
