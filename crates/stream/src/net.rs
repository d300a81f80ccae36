//! Tuples between workers over TCP: one listener per worker, and one outgoing connection per
//! peer worker, fed by a bounded channel of tuple batches (back-pressure: when the peer reads
//! slowly, TCP's window fills, the sender thread blocks, the channel fills, and the emitting
//! executors block) and an unbounded channel of acks (acks flow against the tuples, and blocking
//! them could close a cycle of full buffers; they are bounded by the spouts' `max_pending`).
//!
//! The sender thread coalesces whatever batches are waiting into one write. A broken connection
//! loses the frame being written (counted as `dropped`; reliable spouts replay those trees) and is
//! re-established, to the peer's current address.
//!
//! Every connection opens with the handshake of [`crate::auth`]: the listener reads nothing but a
//! `Hello` proving the topology's worker key (at most [`MAX_HANDSHAKE_FRAME`] bytes, the whole
//! handshake within [`HANDSHAKE_TIMEOUT`] however the peer paces its bytes), and the connecting worker sends nothing before the listener proved the
//! key back. At most [`MAX_HANDSHAKING`] accepted connections may be in their handshake at once,
//! and at most [`MAX_HANDSHAKING_PER_IP`] from one source address; more are closed at once, so
//! unauthenticated connections cannot pile up threads, nor one address crowd out the workers.
//!
//! Every connection between workers, accepted or dialled, has TCP keepalive with short timings
//! ([`KEEPALIVE_IDLE`]), and an authenticated one a write timeout ([`WRITE_TIMEOUT`]): a peer
//! whose host vanished without a FIN or RST would otherwise hold a receiver thread for good and
//! block its sender's writes for the kernel's retransmission time (about 15 minutes).

use crate::auth::{self, Transcript};
use crate::channel::Conn;
use crate::tuple::{AckMsg, Frame, MAX_HANDSHAKE_FRAME, StateParts, Tuple};
use crate::worker::Shared;
use crossbeam_channel::{Receiver, Sender, bounded, select, unbounded};
use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Batches queued per peer before emitters block.
pub const PEER_QUEUE: usize = 64;
/// How long either side of a connection gives the whole handshake (TLS's included), however
/// the other side paces its bytes.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);
/// Accepted connections that may be in their handshake at once (a handshake takes a round trip
/// or two, so even every worker of a large topology connecting at its start rarely meets it; a
/// worker turned away tries again a second later).
pub const MAX_HANDSHAKING: usize = 256;
/// Accepted connections from one source address that may be in their handshake at once. One
/// host runs a handful of workers, each dialling a peer once per link (again only after a break),
/// so 16 is well above what genuine workers on one host need at once, and one that meets it
/// retries a second later; yet one address opening connections as fast as it can holds at most
/// 16 of the [`MAX_HANDSHAKING`] slots, and the other hosts' workers still get through.
pub const MAX_HANDSHAKING_PER_IP: usize = 16;
/// TCP keepalive's idle time before the first probe, on every connection between workers. A quiet
/// stream is normal, so reads have no timeout; keepalive is what notices a peer whose host
/// vanished (no FIN, no RST). With [`KEEPALIVE_INTERVAL`] and [`KEEPALIVE_RETRIES`] such a
/// connection is given up after about 10 + 3 × 5 = 25 s, against the kernel's default of two
/// hours, while a live peer costs one small probe per 10 s of silence.
pub const KEEPALIVE_IDLE: Duration = Duration::from_secs(10);
/// Time between keepalive probes that get no answer.
pub const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(5);
/// Keepalive probes unanswered before the connection is given up.
pub const KEEPALIVE_RETRIES: u32 = 3;
/// How long one write on an authenticated connection may block before the connection counts as
/// broken (what it carried is `dropped`, reliable spouts replay, and it is dialled again). A
/// peer that reads slowly only slows the write down (back-pressure), so this fires only when it
/// read nothing for that long: its host vanished (keepalive cannot tell while data is unacked;
/// the kernel would retry for about 15 minutes), it stopped reading, or its executors took
/// nothing for that long (then the trees are replayed, as after any break).
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(30);
/// Pause before connecting again to a peer that failed the handshake.
const REFUSED_PAUSE: Duration = Duration::from_secs(1);
/// At most one warning about refused connections per this long.
const REFUSAL_WARNING_EVERY: Duration = Duration::from_secs(10);

/// Warnings about refused connections, at most one per [`REFUSAL_WARNING_EVERY`] with a count of
/// those not warned about: a scan of a worker's port must not fill its log.
#[derive(Debug, Default)]
pub struct Refusals {
    next_ns: std::sync::atomic::AtomicU64,
    quiet: std::sync::atomic::AtomicU64,
    total: std::sync::atomic::AtomicU64,
}

impl Refusals {
    /// Records a refusal at `now_ns`: `Some(n)` when it is to be warned about, `n` refusals
    /// since the last warning having gone unwarned.
    pub fn record(&self, now_ns: u64) -> Option<u64> {
        self.total.fetch_add(1, Ordering::Relaxed);
        let next = self.next_ns.load(Ordering::Acquire);
        let every = REFUSAL_WARNING_EVERY.as_nanos() as u64;
        if now_ns >= next
            && self
                .next_ns
                .compare_exchange(next, now_ns + every, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
        {
            Some(self.quiet.swap(0, Ordering::AcqRel))
        } else {
            self.quiet.fetch_add(1, Ordering::AcqRel);
            None
        }
    }

    /// Refusals recorded so far.
    pub fn total(&self) -> u64 {
        self.total.load(Ordering::Relaxed)
    }

    fn warn(&self, message: std::fmt::Arguments<'_>) {
        match self.record(crate::metrics::now_ns()) {
            Some(0) => tracing::warn!("{message}"),
            Some(n) => tracing::warn!("{message} ({n} more refused since the last warning)"),
            None => {}
        }
    }
}

/// Why an accepted connection gets no handshake slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Crowded {
    /// [`MAX_HANDSHAKING`] connections are in their handshake.
    #[error("{MAX_HANDSHAKING} others are in their handshake")]
    Everywhere,
    /// [`MAX_HANDSHAKING_PER_IP`] connections from this address are in their handshake.
    #[error("{MAX_HANDSHAKING_PER_IP} others from its address are in their handshake")]
    FromThere,
}

/// The handshake slots of a worker's accepted connections: at most [`MAX_HANDSHAKING`] in all
/// and [`MAX_HANDSHAKING_PER_IP`] per source address.
#[derive(Debug, Default)]
pub struct HandshakeSlots {
    /// Slots taken in all, and per address (an address with none taken has no entry).
    taken: Mutex<(usize, HashMap<IpAddr, usize>)>,
}

impl HandshakeSlots {
    fn lock(&self) -> std::sync::MutexGuard<'_, (usize, HashMap<IpAddr, usize>)> {
        // The counts are updated whole under the lock: a panic elsewhere leaves them sound.
        self.taken.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Takes a slot for a connection from `ip` (give it back with [`HandshakeSlots::release`]).
    pub fn take(&self, ip: IpAddr) -> Result<(), Crowded> {
        // An IPv4 peer reaching an IPv6 listener shows as ::ffff:a.b.c.d: the same address.
        let ip = ip.to_canonical();
        let mut t = self.lock();
        if t.0 >= MAX_HANDSHAKING {
            return Err(Crowded::Everywhere);
        }
        let from = t.1.entry(ip).or_insert(0);
        if *from >= MAX_HANDSHAKING_PER_IP {
            return Err(Crowded::FromThere);
        }
        *from += 1;
        t.0 += 1;
        Ok(())
    }

    /// Gives back a slot taken for `ip`.
    pub fn release(&self, ip: IpAddr) {
        let ip = ip.to_canonical();
        let mut t = self.lock();
        if let Some(from) = t.1.get_mut(&ip) {
            *from = from.saturating_sub(1);
            if *from == 0 {
                // No entry for an address with nothing in its handshake: a scan from many
                // addresses must not grow the map for good.
                t.1.remove(&ip);
            }
            t.0 = t.0.saturating_sub(1);
        }
    }

    /// Slots taken in all.
    pub fn taken(&self) -> usize {
        self.lock().0
    }

    /// Slots taken by connections from `ip`.
    pub fn taken_by(&self, ip: IpAddr) -> usize {
        self.lock().1.get(&ip.to_canonical()).copied().unwrap_or(0)
    }
}

/// Turns TCP keepalive on `s` with [`KEEPALIVE_IDLE`], [`KEEPALIVE_INTERVAL`] and
/// [`KEEPALIVE_RETRIES`].
pub fn keep_alive(s: &TcpStream) -> io::Result<()> {
    let k = socket2::TcpKeepalive::new()
        .with_time(KEEPALIVE_IDLE)
        .with_interval(KEEPALIVE_INTERVAL);
    #[cfg(any(target_os = "linux", target_os = "android", target_os = "macos"))]
    let k = k.with_retries(KEEPALIVE_RETRIES);
    socket2::SockRef::from(s).set_tcp_keepalive(&k)
}

/// Dials `addr` for a connection to another worker: no Nagle delay (a batch is one write), and
/// keepalive on.
pub fn dial(addr: &SocketAddr) -> io::Result<TcpStream> {
    let s = TcpStream::connect_timeout(addr, Duration::from_secs(2))?;
    s.set_nodelay(true)?;
    keep_alive(&s)?;
    Ok(s)
}

/// Prepares a connection another worker dialled: blocking (the listener is not), keepalive on
/// from the start, so that even a handshake whose peer vanished is noticed.
pub fn accepted(s: TcpStream) -> io::Result<TcpStream> {
    s.set_nonblocking(false)?;
    keep_alive(&s)?;
    Ok(s)
}

/// What an authenticated connection gets: writes that block longer than `write_timeout` fail,
/// and the connection counts as broken. Reads keep no timeout of their own (the receiver's short
/// one only lets it see the worker stop): keepalive covers them.
pub fn authenticated(c: &Conn, write_timeout: Duration) -> io::Result<()> {
    c.tcp().set_write_timeout(Some(write_timeout))
}

/// The sending ends towards one peer worker.
#[derive(Clone, Debug)]
pub struct PeerLink {
    /// Tuple batches (bounded).
    pub tuples: Sender<Vec<Tuple>>,
    /// Acks and fails (unbounded).
    pub acks: Sender<AckMsg>,
    /// States of executors moving to the peer (unbounded: a state must not wait behind tuples
    /// its executor has to take first).
    pub states: Sender<(u32, Vec<u8>)>,
}

/// Starts the sender thread towards worker `peer` of the routes of generation `generation`.
/// If the routes change before it has connected, `peer` may name another worker (or this
/// one): it does not connect, and hands what it carries back to its worker, which parks it
/// and sends it by the new routes.
pub fn spawn_peer(shared: Arc<Shared>, peer: u32, generation: u64) -> PeerLink {
    let (tuples, tuples_rx) = bounded(PEER_QUEUE);
    let (acks, acks_rx) = unbounded();
    let (states, states_rx) = unbounded();
    let link = PeerLink {
        tuples,
        acks,
        states,
    };
    std::thread::Builder::new()
        .name(format!("peer-{peer}"))
        .spawn(move || sender_loop(&shared, peer, generation, &tuples_rx, &acks_rx, &states_rx))
        .map_err(|e| tracing::error!("cannot start the sender thread to worker {peer}: {e}"))
        .ok();
    link
}

/// Why no connection was made.
enum NoConn {
    /// The worker stops.
    Stopping,
    /// The routes changed since the link was made: `peer` may be another worker now.
    Stale,
}

fn connect(shared: &Shared, peer: u32, generation: u64) -> Result<Conn, NoConn> {
    loop {
        if shared.stopping() {
            return Err(NoConn::Stopping);
        }
        // Read under the addresses' lock, which [`crate::Worker::reassign`] holds while it
        // changes the routes: the address is `peer`'s in generation `generation`'s numbering.
        let addr: Option<SocketAddr> = {
            let m = match shared.peer_addrs.read() {
                Ok(m) => m,
                Err(p) => p.into_inner(),
            };
            if shared.routes_gen.load(Ordering::Acquire) != generation {
                return Err(NoConn::Stale);
            }
            m.get(&peer).copied()
        };
        if let Some(addr) = addr {
            match dial(&addr) {
                Ok(s) => {
                    match Conn::connecting(shared.tls.as_ref(), s).and_then(|mut c| {
                        prove(shared, &mut c)?;
                        authenticated(&c, WRITE_TIMEOUT)?;
                        Ok(c)
                    }) {
                        Ok(c) => return Ok(c),
                        Err(e) => {
                            tracing::warn!("worker {peer} at {addr}: {e}");
                            std::thread::sleep(REFUSED_PAUSE);
                        }
                    }
                }
                Err(e) => tracing::debug!("connecting to worker {peer} at {addr}: {e}"),
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The connecting side of the handshake: answers the listener's challenge with this worker's
/// proof and checks the listener's.
fn prove(shared: &Shared, s: &mut Conn) -> io::Result<()> {
    s.set_deadline(Some(Instant::now() + HANDSHAKE_TIMEOUT))?;
    let mut scratch = Vec::new();
    let listener = match Frame::read_at_most(s, &mut scratch, MAX_HANDSHAKE_FRAME)? {
        Some(Frame::Challenge(n)) => n,
        _ => {
            return Err(io::Error::other(
                "it sent no challenge (busy with other handshakes, or not a worker of this topology)",
            ));
        }
    };
    let t = Transcript {
        listener,
        connector: auth::nonce()?,
        worker: shared.routes().worker,
        binding: s.binding()?,
    };
    Frame::Hello {
        worker: t.worker,
        nonce: t.connector,
        proof: shared.handshake.hello(&t),
    }
    .write(s, &mut scratch)?;
    match Frame::read_at_most(s, &mut scratch, MAX_HANDSHAKE_FRAME)? {
        Some(Frame::Welcome(p)) if shared.handshake.check_welcome(&t, &p) => {
            s.set_deadline(None)?;
            Ok(())
        }
        _ => Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            "it did not prove the topology's worker key; nothing sent",
        )),
    }
}

/// The listening side of the handshake: challenges the connection and answers a valid proof
/// with its own. Whether the connection proved the key.
fn admit(shared: &Shared, s: &mut Conn) -> bool {
    let from = s
        .tcp()
        .peer_addr()
        .map_or_else(|_| "an unknown address".to_string(), |a| a.to_string());
    let outcome = (|| -> io::Result<bool> {
        s.tcp().set_nonblocking(false)?;
        // The whole handshake, TLS's included, within HANDSHAKE_TIMEOUT: a per-read timeout
        // alone would let a peer that sends a byte now and then hold its slot for minutes.
        s.set_deadline(Some(Instant::now() + HANDSHAKE_TIMEOUT))?;
        let listener = auth::nonce()?;
        let mut scratch = Vec::new();
        Frame::Challenge(listener).write(s, &mut scratch)?;
        let binding = s.binding()?;
        match Frame::read_at_most(s, &mut scratch, MAX_HANDSHAKE_FRAME)? {
            Some(Frame::Hello {
                worker,
                nonce,
                proof,
            }) => {
                let t = Transcript {
                    listener,
                    connector: nonce,
                    worker,
                    binding,
                };
                if !shared.handshake.check_hello(&t, &proof) {
                    return Ok(false);
                }
                Frame::Welcome(shared.handshake.welcome(&t)).write(s, &mut scratch)?;
                s.flush()?;
                s.set_deadline(None)?;
                Ok(true)
            }
            _ => Ok(false),
        }
    })();
    match outcome {
        Ok(true) => true,
        Ok(false) => {
            shared.refusals.warn(format_args!(
                "refused a connection from {from}: it did not prove the topology's worker key"
            ));
            false
        }
        Err(e) => {
            shared.refusals.warn(format_args!(
                "refused a connection from {from}: handshake failed ({e})"
            ));
            false
        }
    }
}

fn sender_loop(
    shared: &Arc<Shared>,
    peer: u32,
    generation: u64,
    tuples_rx: &Receiver<Vec<Tuple>>,
    acks_rx: &Receiver<AckMsg>,
    states_rx: &Receiver<(u32, Vec<u8>)>,
) {
    let mut conn: Option<Conn> = None;
    let mut buf: Vec<u8> = Vec::with_capacity(1 << 20);
    loop {
        if shared.stopping() {
            return;
        }
        // Wait for something to send.
        let mut batches: Vec<Vec<Tuple>> = Vec::new();
        let mut acks: Vec<AckMsg> = Vec::new();
        let mut states: Vec<(u32, Vec<u8>)> = Vec::new();
        // The link was dropped (a new placement renumbered the workers): send what is still
        // queued, then end.
        let mut closing = false;
        select! {
            recv(tuples_rx) -> m => match m { Ok(b) => batches.push(b), Err(_) => closing = true },
            recv(acks_rx) -> m => match m { Ok(a) => acks.push(a), Err(_) => closing = true },
            recv(states_rx) -> m => match m { Ok(s) => states.push(s), Err(_) => closing = true },
            default(Duration::from_millis(100)) => continue,
        }
        if closing && tuples_rx.is_empty() && acks_rx.is_empty() && states_rx.is_empty() {
            return;
        }
        // Coalesce what else is waiting (bounded, to keep frames moderate).
        while batches.len() < 16 {
            match tuples_rx.try_recv() {
                Ok(b) => batches.push(b),
                Err(_) => break,
            }
        }
        while let Ok(a) = acks_rx.try_recv() {
            acks.push(a);
        }
        while let Ok(st) = states_rx.try_recv() {
            states.push(st);
        }
        if conn.is_none() {
            match connect(shared, peer, generation) {
                Ok(s) => conn = Some(s),
                Err(NoConn::Stopping) => return,
                Err(NoConn::Stale) => {
                    // Back to this worker, which parks what is not its own and sends it by
                    // the routes now.
                    for b in batches {
                        shared.deliver_local(b);
                    }
                    for a in acks {
                        shared.route_ack(a, true);
                    }
                    for (executor, bytes) in states {
                        shared.receive_state(executor, bytes);
                    }
                    continue;
                }
            }
        }
        buf.clear();
        let mut n = 0u64;
        for b in batches {
            let len = b.len() as u64;
            let left_out = crate::tuple::encode_tuples(b, &mut buf);
            if left_out > 0 {
                tracing::warn!(
                    "{left_out} tuples for worker {peer} dropped: each is larger than a frame ({} bytes)",
                    crate::tuple::MAX_FRAME
                );
                shared.dropped.fetch_add(left_out, Ordering::Relaxed);
            }
            n += len - left_out;
        }
        if !acks.is_empty() {
            Frame::Acks(acks).encode(&mut buf);
        }
        for (executor, bytes) in states {
            let len = bytes.len();
            if !crate::tuple::encode_state(executor, bytes, &mut buf) {
                tracing::error!(
                    "executor {executor}'s state ({len} bytes) is over {} bytes: not handed over",
                    crate::tuple::MAX_STATE
                );
            }
        }
        let Some(s) = conn.as_mut() else { return };
        match s.write_all(&buf) {
            Ok(()) => {
                shared.remote_out.fetch_add(n, Ordering::Relaxed);
            }
            Err(e) => {
                tracing::warn!("connection to worker {peer} broke ({e}); {n} tuples dropped");
                shared.dropped.fetch_add(n, Ordering::Relaxed);
                conn = None;
            }
        }
    }
}

/// A reader that waits out read timeouts until the worker stops, so a frame is never cut.
struct Patient<'a> {
    s: Conn,
    shared: &'a Shared,
}

impl Read for Patient<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            match self.s.read(buf) {
                Err(e) if read_timed_out(&e) => {
                    if self.shared.stopping() {
                        return Err(io::Error::other("worker stopping"));
                    }
                }
                r => return r,
            }
        }
    }
}

/// Whether a read failed only because the socket's read timeout passed. On Unix that is
/// `EAGAIN` (`WouldBlock`); `ETIMEDOUT` (`TimedOut`) there is keepalive giving the peer up, which
/// ends the connection. Windows reports a read timeout as `TimedOut`.
fn read_timed_out(e: &io::Error) -> bool {
    match e.kind() {
        io::ErrorKind::WouldBlock => true,
        io::ErrorKind::TimedOut => cfg!(not(unix)),
        _ => false,
    }
}

/// Accepts peers' connections until the worker stops.
pub fn spawn_listener(shared: Arc<Shared>, listener: TcpListener) {
    let _ = listener.set_nonblocking(true);
    std::thread::Builder::new()
        .name("listener".into())
        .spawn(move || {
            while !shared.stopping() {
                match listener.accept() {
                    Ok((s, from)) => {
                        if let Err(why) = shared.handshakes.take(from.ip()) {
                            shared
                                .refusals
                                .warn(format_args!("closed a connection from {from}: {why}"));
                            continue;
                        }
                        let receiver = shared.clone();
                        let spawned = std::thread::Builder::new()
                            .name("receiver".into())
                            .spawn(move || receive(&receiver, s, from.ip()));
                        if spawned.is_err() {
                            shared.handshakes.release(from.ip());
                        }
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        std::thread::sleep(Duration::from_millis(20));
                    }
                    Err(e) => {
                        tracing::warn!("accept: {e}");
                        std::thread::sleep(Duration::from_millis(20));
                    }
                }
            }
        })
        .map_err(|e| tracing::error!("cannot start the listener thread: {e}"))
        .ok();
}

/// Serves one accepted connection from `ip` (holding a handshake slot the listener took): the
/// handshake, then frames until it ends.
fn receive(shared: &Arc<Shared>, s: TcpStream, ip: IpAddr) {
    let admitted = accepted(s)
        .and_then(|s| Conn::accepting(shared.tls.as_ref(), s))
        .ok()
        .and_then(|mut c| admit(shared, &mut c).then_some(c));
    shared.handshakes.release(ip);
    let Some(s) = admitted else {
        return;
    };
    // This side writes nothing after the handshake today; the timeout keeps it so if it ever
    // does.
    let _ = authenticated(&s, WRITE_TIMEOUT);
    let _ = s.tcp().set_read_timeout(Some(Duration::from_millis(200)));
    let _ = s.tcp().set_nodelay(true);
    let mut r = io::BufReader::with_capacity(
        1 << 16,
        Patient {
            s,
            shared: shared.as_ref(),
        },
    );
    let mut scratch = Vec::new();
    // States larger than a frame come in parts; a connection that ends mid-state (its worker
    // died) takes the parts with it, and the new executor starts without that state.
    let mut parts = StateParts::default();
    loop {
        match Frame::read(&mut r, &mut scratch) {
            Ok(Some(Frame::Challenge(_) | Frame::Hello { .. } | Frame::Welcome(_))) => {
                tracing::debug!("a peer sent a handshake frame after its handshake");
                return;
            }
            Ok(Some(Frame::Tuples(ts))) => {
                shared
                    .remote_in
                    .fetch_add(ts.len() as u64, Ordering::Relaxed);
                shared.deliver_local(ts);
            }
            Ok(Some(Frame::Acks(acks))) => {
                for a in acks {
                    shared.route_ack(a, true);
                }
            }
            Ok(Some(f @ (Frame::State { .. } | Frame::StatePart { .. }))) => match parts.take(f) {
                Ok(Some((executor, bytes))) => shared.receive_state(executor, bytes),
                Ok(None) => {}
                Err(e) => {
                    tracing::warn!("a peer's connection closed: {e}");
                    return;
                }
            },
            Ok(None) => return,
            Err(e) => {
                if !shared.stopping() {
                    tracing::debug!("a peer's connection ended: {e}");
                }
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_are_warned_about_once_per_period_with_a_count_of_the_rest() {
        let r = Refusals::default();
        let every = REFUSAL_WARNING_EVERY.as_nanos() as u64;
        assert_eq!(r.record(1_000), Some(0), "the first is warned about");
        for t in 1..=500 {
            assert_eq!(r.record(1_000 + t), None, "a scan's next ones are not");
        }
        assert_eq!(
            r.record(1_000 + every),
            Some(500),
            "then one warning counts them"
        );
        assert_eq!(r.record(2_000 + every), None);
        assert_eq!(r.total(), 503, "every refusal is counted");
    }

    #[test]
    fn handshake_slots_are_capped_per_address_and_in_all_and_given_back() {
        let slots = HandshakeSlots::default();
        let one: IpAddr = [10, 0, 0, 1].into();
        for _ in 0..MAX_HANDSHAKING_PER_IP {
            assert_eq!(slots.take(one), Ok(()));
        }
        assert_eq!(slots.take(one), Err(Crowded::FromThere), "one too many");
        // The same address over an IPv6 listener is the same address.
        let mapped: IpAddr = std::net::Ipv4Addr::new(10, 0, 0, 1).to_ipv6_mapped().into();
        assert_eq!(slots.take(mapped), Err(Crowded::FromThere));
        assert_eq!(slots.taken_by(one), MAX_HANDSHAKING_PER_IP);
        assert_eq!(
            slots.taken(),
            MAX_HANDSHAKING_PER_IP,
            "refusals take nothing"
        );
        let other: IpAddr = [10, 0, 0, 2].into();
        assert_eq!(slots.take(other), Ok(()), "another address still gets in");
        slots.release(one);
        assert_eq!(slots.take(one), Ok(()), "a released slot is free again");
        for _ in 0..MAX_HANDSHAKING_PER_IP {
            slots.release(one);
        }
        slots.release(other);
        assert_eq!((slots.taken(), slots.taken_by(one)), (0, 0));
        assert!(
            slots.lock().1.is_empty(),
            "no entry is left for idle addresses"
        );
        slots.release(one);
        assert_eq!(
            slots.taken(),
            0,
            "a release too many takes nothing below zero"
        );

        // The global cap: from many addresses, MAX_HANDSHAKING and no more.
        let ips = (0..MAX_HANDSHAKING).map(|i| IpAddr::from([10, 1, (i / 256) as u8, i as u8]));
        for ip in ips {
            assert_eq!(slots.take(ip), Ok(()));
        }
        assert_eq!(slots.take(one), Err(Crowded::Everywhere));
        slots.release([10, 1, 0, 0].into());
        assert_eq!(slots.take(one), Ok(()));
    }

    /// A connected pair on loopback: (dialled, accepted).
    fn pair() -> (TcpStream, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").expect("binds");
        let addr = listener.local_addr().expect("addr");
        let dialled = dial(&addr).expect("dials");
        let (s, _) = listener.accept().expect("accepts");
        (dialled, accepted(s).expect("accepted"))
    }

    #[test]
    fn dialled_and_accepted_connections_have_keepalive_with_short_timings() {
        let (dialled, accepted) = pair();
        for s in [&dialled, &accepted] {
            let r = socket2::SockRef::from(s);
            assert!(r.keepalive().expect("reads SO_KEEPALIVE"));
            #[cfg(target_os = "linux")]
            {
                assert_eq!(r.tcp_keepalive_time().expect("idle"), KEEPALIVE_IDLE);
                assert_eq!(
                    r.tcp_keepalive_interval().expect("interval"),
                    KEEPALIVE_INTERVAL
                );
                assert_eq!(
                    r.tcp_keepalive_retries().expect("retries"),
                    KEEPALIVE_RETRIES
                );
            }
        }
    }

    #[test]
    fn a_write_to_a_peer_that_stopped_reading_fails_within_the_write_timeout() {
        let (dialled, _never_read) = pair();
        let mut c = Conn::connecting(None, dialled).expect("conn");
        let timeout = Duration::from_millis(500);
        authenticated(&c, timeout).expect("write timeout");
        // Far more than both sockets' buffers hold: the write blocks once they are full.
        let buf = vec![0u8; 256 << 20];
        let start = Instant::now();
        let written = c.write_all(&buf);
        let took = start.elapsed();
        let Err(e) = written else {
            panic!("the whole buffer was written")
        };
        assert!(
            matches!(
                e.kind(),
                io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
            ),
            "{e}"
        );
        // The sender takes any write error as a broken connection (sender_loop).
        assert!(
            took >= timeout && took < timeout + Duration::from_secs(5),
            "the write failed after {took:?}"
        );
    }

    #[test]
    fn only_wouldblock_is_a_read_timeout_on_unix() {
        assert!(read_timed_out(&io::ErrorKind::WouldBlock.into()));
        assert_eq!(
            read_timed_out(&io::ErrorKind::TimedOut.into()),
            cfg!(not(unix))
        );
        assert!(!read_timed_out(&io::ErrorKind::ConnectionReset.into()));
    }
}
