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
use std::collections::HashMap;
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

/// Everything a worker needs to start.
#[derive(Clone, Debug, Serialize, Deserialize)]
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
    pub inboxes: HashMap<u32, Sender<Vec<Tuple>>>,
    /// Ack inboxes of this worker's spouts.
    pub ack_boxes: HashMap<u32, Sender<AckMsg>>,
    /// Links to other workers, made on first use.
    pub peers: Mutex<HashMap<u32, PeerLink>>,
    /// Other workers' addresses, as the controller last said.
    pub peer_addrs: RwLock<HashMap<u32, SocketAddr>>,
    /// Counters of this worker's executors.
    pub counters: HashMap<u32, ExecutorCounters>,
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

    /// The link to worker `w`, started on first use.
    pub fn peer(self: &Arc<Self>, w: u32) -> PeerLink {
        let mut peers = match self.peers.lock() {
            Ok(p) => p,
            Err(poisoned) => poisoned.into_inner(),
        };
        peers
            .entry(w)
            .or_insert_with(|| net::spawn_peer(self.clone(), w))
            .clone()
    }

    /// Hands tuples that arrived from another worker to their local executors.
    pub fn deliver_local(&self, tuples: Vec<Tuple>) {
        let mut by_dst: HashMap<u32, Vec<Tuple>> = HashMap::new();
        for t in tuples {
            by_dst.entry(t.dst).or_default().push(t);
        }
        for (dst, batch) in by_dst {
            match self.inboxes.get(&dst) {
                Some(inbox) => {
                    let n = batch.len() as u64;
                    if !self.send_blocking(inbox, batch) {
                        self.dropped.fetch_add(n, Ordering::Relaxed);
                    }
                }
                None => {
                    self.dropped
                        .fetch_add(batch.len() as u64, Ordering::Relaxed);
                }
            }
        }
    }

    /// Sends an ack towards the spout that owns its tree, here or in another worker.
    pub fn route_ack(self: &Arc<Self>, a: AckMsg) {
        let Some(spout) = AckMsg::spout_of(a.root) else {
            return;
        };
        if let Some(b) = self.ack_boxes.get(&spout) {
            let _ = b.send(a);
            return;
        }
        let routes = self.routes();
        if let Some(&w) = routes.assignment.get(spout as usize)
            && w != routes.worker
        {
            let _ = self.peer(w).acks.send(a);
        }
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
}

impl Emitter {
    pub(crate) fn new(shared: Arc<Shared>, me: u32) -> Self {
        let c = shared.components[me as usize];
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
            routes: shared.routes(),
            routes_seen: shared.routes_gen.load(Ordering::Acquire),
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
        match self.shared.inboxes.get(&dst) {
            Some(inbox) if self.shared.send_blocking(inbox, b) => {}
            _ => {
                self.shared.dropped.fetch_add(n, Ordering::Relaxed);
            }
        }
    }

    fn send_remote(&self, w: u32, b: Vec<Tuple>) {
        let n = b.len() as u64;
        let link = self.shared.peer(w);
        if !self.shared.send_blocking(&link.tuples, b) {
            self.shared.dropped.fetch_add(n, Ordering::Relaxed);
        }
    }

    /// Sends every buffered tuple now, and publishes the emitted count. When the routes changed,
    /// buffered tuples are routed again first.
    pub fn flush(&mut self) {
        let g = self.shared.routes_gen.load(Ordering::Acquire);
        if g != self.routes_seen {
            self.routes_seen = g;
            self.routes = self.shared.routes();
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
            && let Some(c) = self.shared.counters.get(&self.me)
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
    threads: Vec<JoinHandle<()>>,
    addr: SocketAddr,
}

impl Worker {
    /// Starts the worker: parses the topology, binds the listener, starts every local executor.
    pub fn start(config: WorkerConfig) -> Result<Worker, WorkerError> {
        let topo = parse_runnable_topology(&config.topology_origin, &config.topology_text)?;
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
        let mut inboxes = HashMap::new();
        let mut inbox_rx = HashMap::new();
        let mut ack_boxes = HashMap::new();
        let mut ack_rx = HashMap::new();
        let mut counters = HashMap::new();
        for &e in &mine {
            let c = components[e as usize];
            if topo.topology.components[c].kind == ComponentKind::Spout {
                let (tx, rx) = unbounded();
                ack_boxes.insert(e, tx);
                ack_rx.insert(e, rx);
            } else {
                let (tx, rx) = bounded(INBOX_BATCHES);
                inboxes.insert(e, tx);
                inbox_rx.insert(e, rx);
            }
            counters.insert(e, ExecutorCounters::new(n));
        }
        let _ = std::fs::create_dir_all(&config.work_dir);
        let shared = Arc::new(Shared {
            routes: RwLock::new(Arc::new(Routes {
                worker: config.worker,
                assignment: config.assignment.clone(),
            })),
            routes_gen: AtomicU64::new(0),
            components: components.clone(),
            inboxes,
            ack_boxes,
            peers: Mutex::new(HashMap::new()),
            peer_addrs: RwLock::new(HashMap::new()),
            counters,
            stop: AtomicBool::new(false),
            remote_out: AtomicU64::new(0),
            remote_in: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
            latency: Mutex::new(Histogram::default()),
            base_dir: config.base_dir.clone(),
            work_dir: config.work_dir.clone(),
            topo,
        });
        // Build every component before starting any thread, so a bad one stops the worker
        // cleanly.
        let mut starts: Vec<Box<dyn FnOnce() + Send>> = Vec::new();
        for &e in &mine {
            let c = components[e as usize];
            let comp = &shared.topo.topology.components[c];
            let index = e - shared.topo.topology.first_executor(c).0;
            let name = shared.topo.topology.executor_name(ExecutorId(e));
            let fail = |message: String| WorkerError::Component {
                executor: name.clone(),
                message,
            };
            let sh = shared.clone();
            match (&shared.topo.code[c], comp.kind) {
                (ComponentCode::Builtin(b), ComponentKind::Spout) => {
                    let code = components::spout(b, &shared.base_dir, index, comp.parallelism)
                        .map_err(fail)?;
                    let settings = spout_settings(b);
                    let rx = ack_rx
                        .remove(&e)
                        .ok_or_else(|| fail("no ack inbox".into()))?;
                    starts.push(Box::new(move || run_spout(sh, e, code, settings, rx)));
                }
                (ComponentCode::Builtin(b), ComponentKind::Bolt) => {
                    let inputs: Vec<usize> = {
                        let mut v: Vec<usize> = shared
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
                    let emits = shared.topo.topology.streams.iter().any(|s| s.from == c);
                    let code =
                        components::bolt(b, &shared.base_dir, index, emits, &components, &inputs)
                            .map_err(fail)?;
                    let rx = inbox_rx.remove(&e).ok_or_else(|| fail("no inbox".into()))?;
                    starts.push(Box::new(move || run_bolt(sh, e, code, rx)));
                }
                (ComponentCode::Command { argv, conf }, kind) => {
                    let shell = multilang::Shell::start(&shared, e, argv, conf).map_err(fail)?;
                    if kind == ComponentKind::Spout {
                        let rx = ack_rx
                            .remove(&e)
                            .ok_or_else(|| fail("no ack inbox".into()))?;
                        starts.push(Box::new(move || {
                            multilang::run_shell_spout(sh, e, shell, rx)
                        }));
                    } else {
                        let rx = inbox_rx.remove(&e).ok_or_else(|| fail("no inbox".into()))?;
                        starts.push(Box::new(move || {
                            multilang::run_shell_bolt(sh, e, shell, rx)
                        }));
                    }
                }
            }
        }
        net::spawn_listener(shared.clone(), listener);
        let mut threads = Vec::new();
        for (start, &e) in starts.into_iter().zip(&mine) {
            let name = shared.topo.topology.executor_name(ExecutorId(e));
            let sh = shared.clone();
            let h = std::thread::Builder::new()
                .name(name.clone())
                .spawn(move || {
                    if let Some(c) = sh.counters.get(&e) {
                        c.tid.store(current_tid(), Ordering::Relaxed);
                    }
                    start();
                })
                .map_err(|err| WorkerError::Component {
                    executor: name,
                    message: format!("cannot start its thread: {err}"),
                })?;
            threads.push(h);
        }
        Ok(Worker {
            shared,
            threads,
            addr,
        })
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

    /// Takes a new placement that keeps exactly this worker's executors here: the worker becomes
    /// worker `worker` of `assignment`, its executors keep running (and their state), and tuples
    /// go by the new routes from now on. Connections to other workers are dropped (their indices
    /// may mean other workers now); give the new peers with [`Worker::set_peers`]. Refused (and
    /// nothing changes) when the new placement moves an executor into or out of this worker.
    pub fn reassign(&self, worker: u32, assignment: Vec<u32>) -> Result<(), String> {
        if assignment.len() != self.shared.components.len() {
            return Err(format!(
                "the assignment names {} executors, but the topology has {}",
                assignment.len(),
                self.shared.components.len()
            ));
        }
        let mut mine: Vec<u32> = self.shared.counters.keys().copied().collect();
        mine.sort_unstable();
        let theirs: Vec<u32> = (0..assignment.len() as u32)
            .filter(|&e| assignment[e as usize] == worker)
            .collect();
        if mine != theirs {
            return Err(
                "the new placement moves executors into or out of this worker: start a new one"
                    .into(),
            );
        }
        if let Ok(mut r) = self.shared.routes.write() {
            *r = Arc::new(Routes { worker, assignment });
        }
        if let Ok(mut p) = self.shared.peers.lock() {
            p.clear();
        }
        self.shared.routes_gen.fetch_add(1, Ordering::AcqRel);
        Ok(())
    }

    /// The worker's counters now.
    pub fn report(&self) -> WorkerReport {
        report(&self.shared)
    }

    /// Whether every local spout has emitted everything and has nothing in flight.
    pub fn spouts_done(&self) -> bool {
        self.shared
            .ack_boxes
            .keys()
            .all(|e| self.shared.counters[e].done.load(Ordering::Relaxed))
    }

    /// Stops every thread (components' `finish` runs, e.g. counts write their last snapshot).
    pub fn stop(self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        for t in self.threads {
            let _ = t.join();
        }
    }
}

fn spout_settings(b: &hetsched_core::model::stream_code::Builtin) -> SpoutSettings {
    use hetsched_core::model::stream_code::Builtin;
    match b {
        Builtin::CorpusSpout { spout, .. } | Builtin::SequenceSpout { spout, .. } => spout.clone(),
        _ => SpoutSettings {
            reliable: false,
            max_pending: 1000,
            timeout_ns: 30_000_000_000,
            rate: None,
        },
    }
}

/// The counters of `shared` now.
pub fn report(shared: &Shared) -> WorkerReport {
    let mut pairs = Vec::new();
    let mut executors = Vec::new();
    let mut ids: Vec<&u32> = shared.counters.keys().collect();
    ids.sort();
    for &e in ids {
        let c = &shared.counters[&e];
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
        executors.push(ExecutorReport {
            executor: e,
            name: shared.topo.topology.executor_name(ExecutorId(e)),
            cpu_ns: thread_cpu_ns(c.tid.load(Ordering::Relaxed)),
            emitted: c.emitted.load(Ordering::Relaxed),
            received,
            acked: c.acked.load(Ordering::Relaxed),
            failed: c.failed.load(Ordering::Relaxed),
            done: c.done.load(Ordering::Relaxed),
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
    next_root: u64,
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

fn run_spout(
    shared: Arc<Shared>,
    me: u32,
    mut code: Box<dyn SpoutCode>,
    settings: SpoutSettings,
    acks: Receiver<AckMsg>,
) {
    let Some(counters) = shared.counters.get(&me) else {
        return;
    };
    let mut em = Emitter::new(shared.clone(), me);
    let mut tracker = Tracker::default();
    let mut replay: Vec<u64> = Vec::new();
    let mut source_done = false;
    let start = Instant::now();
    let mut emitted_total: u64 = 0;
    let mut last_check = Instant::now();
    let timeout = Duration::from_nanos(settings.timeout_ns);
    let mut since_flush = 0usize;
    while !shared.stopping() {
        // Acks first: they free room under max_pending.
        while let Ok(a) = acks.try_recv() {
            if let Some((msg, ok)) = tracker.apply(a) {
                if ok {
                    bump(&counters.acked, 1);
                } else {
                    bump(&counters.failed, 1);
                    replay.push(msg);
                }
            }
        }
        if settings.reliable && last_check.elapsed() >= TICK {
            last_check = Instant::now();
            for msg in tracker.expire(timeout) {
                bump(&counters.failed, 1);
                replay.push(msg);
            }
        }
        let full = settings.reliable && tracker.pending.len() >= settings.max_pending as usize;
        let throttled = settings
            .rate
            .is_some_and(|r| emitted_total as f64 >= r * start.elapsed().as_secs_f64());
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
                Ok(a) => {
                    if let Some((msg, ok)) = tracker.apply(a) {
                        if ok {
                            bump(&counters.acked, 1);
                        } else {
                            bump(&counters.failed, 1);
                            replay.push(msg);
                        }
                    }
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => return,
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
        emitted_total += 1;
        since_flush += 1;
        if since_flush >= BATCH {
            em.flush();
            since_flush = 0;
        }
    }
    em.flush();
}

fn run_bolt(
    shared: Arc<Shared>,
    me: u32,
    mut code: Box<dyn BoltCode>,
    inbox: Receiver<Vec<Tuple>>,
) {
    let Some(counters) = shared.counters.get(&me) else {
        return;
    };
    let mut em = Emitter::new(shared.clone(), me);
    let terminal = !em.has_outputs();
    let mut hist = Histogram::default();
    let mut last_tick = Instant::now();
    loop {
        let batch = match inbox.try_recv() {
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
                    shared.route_ack(AckMsg {
                        root: t.root,
                        xor,
                        fail: false,
                    });
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
}
