//! The accepting side of every gRPC listener — the server's, and an agent's log, data and
//! accelerator listeners — and the connection cap the server's HTTP listener shares.
//!
//! A peer that connects and then says nothing would otherwise hold its connection, and a file
//! descriptor, for good: HTTP/2 reads the client's preface with no time limit, a TLS handshake
//! has none in tonic unless asked, and TCP keepalive only sees hosts that vanished, not ones
//! that stay silent. So each listener bounds both:
//!
//! - **time:** a connection must finish its greeting within [`Limits::greeting`]
//!   ([`GREETING_TIMEOUT`], 10 s, from the accept): the TLS handshake if the listener speaks
//!   TLS, then HTTP/2's client preface and its first frame (the client's SETTINGS). One that has
//!   not is closed, however it paces its bytes; every gRPC client sends these at once on
//!   connecting, so only idle or trickling peers meet the bound;
//! - **idleness:** after its greeting, a connection with no call open (no HTTP/2 stream: the
//!   frames both ways are followed, [`Streams`]) for [`Limits::idle`] ([`IDLE_TIMEOUT`], 5 min)
//!   is closed, however it answers pings; a client reconnects at its next call. And every gRPC
//!   server built with [`server`] pings a connection that has been silent for
//!   [`HTTP2_KEEPALIVE_INTERVAL`] and closes it when no answer comes within
//!   [`HTTP2_KEEPALIVE_TIMEOUT`], so a peer that greeted and then went silent (or stopped
//!   reading) holds its connection for under a minute even with a call open;
//! - **a peer that reads nothing:** one that goes on calling is never pinged (each call tells
//!   hyper it is there), so a connection whose socket has refused every byte written to it
//!   for [`Limits::write_stall`] ([`WRITE_STALL_TIMEOUT`], 5 min) is closed ([`Stall`]), with
//!   a line in the log naming the peer: before, it held the connection, and every reply hyper
//!   had buffered for it, for good. Bytes taken end a stall, and each accepted socket has
//!   `TCP_NOTSENT_LOWAT` ([`NOTSENT_LOWAT`]), so that a write is refused only while the peer
//!   takes nothing: a peer that reads, however slowly, has its window open again within the
//!   bound (on loopback, whose 64 KiB segments make the longest wait, a peer reading 1 KiB/s
//!   does every two minutes or so). A gRPC client reading a long reply slowly never gets there:
//!   its HTTP/2 layer reads the socket as bytes come and flow control holds the server back;
//!   only a client whose process stops reading its socket does (suspended, say, or blocked in
//!   a write to a full pipe on its only thread);
//! - **number:** at most [`Limits::max_connections`] connections are open on one listener at
//!   once, greeting or not; one more is closed as soon as it is accepted, with a warning in the
//!   log ([`ConnectionCap`], at most one per [`CAP_WARNING_EVERY`]), so a flood of connections
//!   exhausts neither the process's file descriptors nor its memory.
//!
//! The listener's TLS is done here too ([`tls_config`]; HTTP/2 by ALPN), not by tonic, so that
//! one deadline covers the handshake and the greeting after it, which only the decrypted
//! bytes show.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};
use tokio_stream::{Stream, StreamExt};
use tonic::transport::server::{Connected, TcpConnectInfo};

/// How long a new connection has for its greeting (see the module's docs) by default.
pub const GREETING_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a connection may have no call open before it is closed, by default.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(5 * 60);

/// How long a connection's socket may refuse every byte written to it — its peer reading
/// nothing, its TCP receive window shut — before the connection is closed, by default.
pub const WRITE_STALL_TIMEOUT: Duration = Duration::from_secs(5 * 60);

/// The `TCP_NOTSENT_LOWAT` of an accepted socket (Linux): the kernel takes no more bytes once
/// this many wait unsent, and says the socket is writable again once half of them went out. So
/// a write refused for long means the peer took nothing for that long, whatever the size of the
/// send buffer: without it, a buffer the kernel grew to 4 MiB stays unwritable until about a
/// third of it drained (on loopback, a peer reading 16 KiB/s left it so for over 70 s at a
/// time; with it, 8 s). Dispatch's small messages never come near it.
const NOTSENT_LOWAT: u32 = 128 * 1024;

/// After this long without a frame from the peer, a gRPC server ([`server`]) pings it …
pub const HTTP2_KEEPALIVE_INTERVAL: Duration = Duration::from_secs(30);
/// … and closes the connection when the answer has not come this long after.
pub const HTTP2_KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(20);

/// The most connections an agent's listener holds at once: the server's relayed reads and
/// other agents' fetches and PCDDB messages each need one at a time per peer, so this leaves
/// room for a thousand peers at once.
pub const AGENT_MAX_CONNECTIONS: usize = 1024;

/// At most one warning about connections closed at the cap per this long (each says how many
/// were closed since the last).
pub const CAP_WARNING_EVERY: Duration = Duration::from_secs(10);

/// The pause after an accept that failed (the process out of file descriptors, say), so that
/// a failing accept does not spin.
const ACCEPT_ERROR_PAUSE: Duration = Duration::from_millis(50);

/// HTTP/2's client connection preface (RFC 9113 §3.4); a SETTINGS frame follows it.
const PREFACE_LEN: usize = 24;
/// An HTTP/2 frame header: a 24-bit length, a type, flags and a stream id.
const FRAME_HEADER_LEN: usize = 9;

/// How a listener bounds the connections it accepts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// How long a connection has, from its accept, to finish its greeting.
    pub greeting: Duration,
    /// The most connections open at once.
    pub max_connections: usize,
    /// How long a connection may have no call (HTTP/2 stream) open before it is closed.
    pub idle: Duration,
    /// How long a connection's socket may refuse every byte written to it before it is closed.
    pub write_stall: Duration,
}

impl Limits {
    /// An agent's listeners' bounds: [`GREETING_TIMEOUT`], [`AGENT_MAX_CONNECTIONS`],
    /// [`IDLE_TIMEOUT`] and [`WRITE_STALL_TIMEOUT`].
    pub const AGENT: Limits = Limits {
        greeting: GREETING_TIMEOUT,
        max_connections: AGENT_MAX_CONNECTIONS,
        idle: IDLE_TIMEOUT,
        write_stall: WRITE_STALL_TIMEOUT,
    };

    /// [`Limits::AGENT`] with the cap fitted to the open-file limit ([`fit_agent_cap`]).
    pub fn agent() -> Limits {
        Limits {
            max_connections: AGENT_CAP.load(std::sync::atomic::Ordering::Relaxed),
            ..Limits::AGENT
        }
    }
}

/// The open-file limit kept for a process's own files besides its listeners' connections (its
/// store, logs, outgoing connections, a task's pipes): a quarter of the limit, from 32 to 1,024.
pub fn files_reserved(limit: u64) -> u64 {
    (limit / 4).clamp(32, 1024)
}

/// The cap on each of `listeners` listeners that the process's open-file limit
/// (`RLIMIT_NOFILE`) leaves room for, at most `max_connections`, and a warning when it is less.
/// With `raise` (at a start), the soft limit is first raised toward the hard one as far as
/// `max_connections` on each listener and [`files_reserved`] need; without (`--check`), the
/// limit a start would reach is judged. Past the limit, accepting fails (`Too many open
/// files`) before the cap is reached, and so does every other file the process opens: the
/// store, the log, a client's call. `setting` names what sets the cap in the warning.
pub fn fit_open_files(
    max_connections: usize,
    listeners: usize,
    setting: &str,
    raise: bool,
) -> (usize, Option<String>) {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) else {
        return (max_connections, None);
    };
    let listeners = listeners.max(1);
    let want = (max_connections as u64).saturating_mul(listeners as u64);
    let target = hard.min(want.saturating_add(files_reserved(u64::MAX)));
    // Without `raise`, the limit a start would reach.
    let limit =
        if soft >= target || (raise && setrlimit(Resource::RLIMIT_NOFILE, target, hard).is_err()) {
            soft
        } else {
            target
        };
    let cap = cap_within(max_connections, listeners, limit);
    if cap >= max_connections {
        return (max_connections, None);
    }
    let each = if listeners == 1 {
        "the listener".to_string()
    } else {
        format!("each of the {listeners} listeners")
    };
    let warning = format!(
        "the open-file limit (RLIMIT_NOFILE; hard limit {hard}) is {limit}, too low for \
         {setting} {max_connections} on {each} and the process's own files: {each} holds at \
         most {cap} connections at once instead; raise the limit (`ulimit -n`, `LimitNOFILE=` \
         in a systemd unit) or lower {setting}"
    );
    (cap, Some(warning))
}

/// The most connections each of `listeners` listeners may hold with the open-file limit
/// `limit`, at most `max_connections` (and at least 16, or `max_connections` if less).
fn cap_within(max_connections: usize, listeners: usize, limit: u64) -> usize {
    let room = limit.saturating_sub(files_reserved(limit)) / listeners.max(1) as u64;
    usize::try_from(room)
        .unwrap_or(usize::MAX)
        .clamp(16.min(max_connections), max_connections)
}

/// The most connections each of an agent's listeners holds ([`Limits::agent`]): at most
/// [`AGENT_MAX_CONNECTIONS`], less when the open-file limit leaves less ([`fit_agent_cap`]).
static AGENT_CAP: std::sync::atomic::AtomicUsize =
    std::sync::atomic::AtomicUsize::new(AGENT_MAX_CONNECTIONS);

/// Fits an agent's cap to its open-file limit, raising the soft limit as far as
/// [`AGENT_MAX_CONNECTIONS`] on each of its `listeners` needs ([`fit_open_files`]), and logs a
/// warning when the limit leaves less. Called once as the agent starts.
pub fn fit_agent_cap(listeners: usize) {
    let (cap, warning) = fit_open_files(
        AGENT_MAX_CONNECTIONS,
        listeners,
        "the agent's cap of connections per listener",
        true,
    );
    if let Some(w) = warning {
        tracing::warn!("{w}");
    }
    AGENT_CAP.store(cap, std::sync::atomic::Ordering::Relaxed);
}

/// A gRPC server builder whose connections answer for themselves: HTTP/2 keepalive pings
/// ([`HTTP2_KEEPALIVE_INTERVAL`], [`HTTP2_KEEPALIVE_TIMEOUT`]), so a peer that stays connected
/// but silent is closed, call open or not (TCP keepalive only sees hosts that vanished: a
/// silent peer's kernel still acknowledges). Every gRPC listener is built from it.
pub fn server() -> tonic::transport::Server {
    tonic::transport::Server::builder()
        .http2_keepalive_interval(Some(HTTP2_KEEPALIVE_INTERVAL))
        .http2_keepalive_timeout(Some(HTTP2_KEEPALIVE_TIMEOUT))
}

/// An agent's listener's TCP settings: `TCP_NODELAY` (small messages must not wait for
/// Nagle's algorithm and a delayed ACK: 40 ms a fetch, an offload, a PCDDB hop) and the
/// kernel's TCP keepalive, as the agent's own connections to the server have
/// ([`crate::CLIENT_KEEPALIVE_IDLE`]): a connection from a host that vanished (no FIN, no RST)
/// is closed about 35 s after its last traffic.
pub fn agent_tcp(listener: tokio::net::TcpListener) -> tonic::transport::server::TcpIncoming {
    tonic::transport::server::TcpIncoming::from(listener)
        .with_nodelay(Some(true))
        .with_keepalive(Some(crate::CLIENT_KEEPALIVE_IDLE))
        .with_keepalive_interval(Some(crate::CLIENT_KEEPALIVE_INTERVAL))
        .with_keepalive_retries(Some(crate::CLIENT_KEEPALIVE_PROBES))
}

/// Why a listener's TLS cannot be set up.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// The certificate chain does not read as PEM, or holds no certificate.
    #[error("the certificate: {0}")]
    Certificate(String),
    /// The private key does not read as PEM.
    #[error("the private key: {0}")]
    Key(String),
    /// rustls refuses the pair (a key that does not fit the certificate, say).
    #[error("{0}")]
    Refused(String),
}

/// The TLS configuration of a gRPC listener with the certificate chain `cert_pem` and the
/// private key `key_pem` (PEM): TLS 1.2 and 1.3 (rustls, ring), no client certificates, and
/// HTTP/2 by ALPN, which tonic's clients require.
pub fn tls_config(cert_pem: &[u8], key_pem: &[u8]) -> Result<Arc<rustls::ServerConfig>, TlsError> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let certs = CertificateDer::pem_slice_iter(cert_pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsError::Certificate(e.to_string()))?;
    if certs.is_empty() {
        return Err(TlsError::Certificate("no certificate in the PEM".into()));
    }
    let key = PrivateKeyDer::from_pem_slice(key_pem).map_err(|e| TlsError::Key(e.to_string()))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Refused(e.to_string()))?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| TlsError::Refused(e.to_string()))?;
    config.alpn_protocols = vec![b"h2".to_vec()];
    Ok(Arc::new(config))
}

/// The places of one listener's connections: [`ConnectionCap::admit`] gives one while fewer
/// than the most are open, and the place is given back when the connection it holds ends.
pub struct ConnectionCap {
    places: Arc<Semaphore>,
    max: usize,
    /// The listener, as the log names it (`gRPC listener 0.0.0.0:7420`).
    what: String,
    /// When the last warning was logged, and the connections closed since.
    warned: Mutex<(Option<Instant>, u64)>,
    /// At most one warning per this long: [`CAP_WARNING_EVERY`] (tests shorten it).
    every: Duration,
}

impl ConnectionCap {
    /// A cap of `max` connections for the listener `what`.
    pub fn new(what: impl Into<String>, max: usize) -> Arc<Self> {
        Arc::new(Self {
            places: Arc::new(Semaphore::new(max.min(Semaphore::MAX_PERMITS))),
            max,
            what: what.into(),
            warned: Mutex::new((None, 0)),
            every: CAP_WARNING_EVERY,
        })
    }

    /// A place for a connection just accepted from `peer`, or `None` when `max` are open: the
    /// caller closes it then. Refusals are logged, one warning per [`CAP_WARNING_EVERY`].
    pub fn admit(&self, peer: Option<SocketAddr>) -> Option<OwnedSemaphorePermit> {
        let mut warned = self
            .warned
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Ok(place) = self.places.clone().try_acquire_owned() {
            // Those closed since the last warning, once its interval is over, so that the
            // count is not lost when a flood stops within it.
            if warned.1 > 0 && warned.0.is_none_or(|t| t.elapsed() >= self.every) {
                tracing::warn!(
                    listener = %self.what,
                    max_connections = self.max,
                    closed = warned.1,
                    "{}: {} more connections were closed at the cap of {} after the last \
                     warning; it admits new ones again",
                    self.what,
                    warned.1,
                    self.max
                );
                *warned = (Some(Instant::now()), 0);
            }
            return Some(place);
        }
        warned.1 += 1;
        if warned.0.is_none_or(|t| t.elapsed() >= self.every) {
            let peer = peer.map_or_else(|| "an unknown address".to_string(), |p| p.to_string());
            tracing::warn!(
                listener = %self.what,
                max_connections = self.max,
                closed = warned.1,
                "{}: {} connections are open, the most it holds at once: new ones are closed \
                 at once until some end ({} closed so far, the latest from {peer})",
                self.what,
                self.max,
                warned.1
            );
            *warned = (Some(Instant::now()), 0);
        }
        None
    }

    /// The connections open now.
    pub fn open(&self) -> usize {
        self.max
            .min(Semaphore::MAX_PERMITS)
            .saturating_sub(self.places.available_permits())
    }
}

/// A connection that holds its place under a [`ConnectionCap`] until it is dropped, and fails
/// its reads and writes once its socket has refused every byte for [`Limits::write_stall`]
/// (which closes it), as a guarded listener's [`Conn`] does: the HTTP listener's connections,
/// whose server (axum) takes accepted streams rather than a listener's.
pub struct Held<T> {
    inner: T,
    stall: Stall,
    /// The peer and the listener, as the log names them.
    peer: Option<SocketAddr>,
    what: String,
    _place: OwnedSemaphorePermit,
}

impl<T> Held<T> {
    /// `inner`, from `peer`, holding `place` under listener `what`'s cap, closed once its
    /// writes have been refused for `write_stall`.
    pub fn new(
        inner: T,
        place: OwnedSemaphorePermit,
        write_stall: Duration,
        peer: Option<SocketAddr>,
        what: &str,
    ) -> Self {
        Self {
            inner,
            stall: Stall::new(write_stall),
            peer,
            what: what.to_string(),
            _place: place,
        }
    }

    /// The connection.
    pub fn get_ref(&self) -> &T {
        &self.inner
    }

    /// `Err` once the socket has refused every byte past the limit (logged once).
    fn check_stall(&mut self, cx: &mut Context<'_>) -> io::Result<()> {
        if !self.stall.expired(cx) {
            return Ok(());
        }
        if !self.stall.logged {
            self.stall.logged = true;
            let peer = self
                .peer
                .map_or_else(|| "an unknown address".to_string(), |p| p.to_string());
            tracing::info!(
                listener = %self.what,
                %peer,
                "{}: closed the connection from {peer}: it read nothing of what was sent to it \
                 for {:?}",
                self.what,
                self.stall.limit
            );
        }
        Err(io::Error::new(
            io::ErrorKind::TimedOut,
            "the peer read nothing of what was sent to it for too long",
        ))
    }

    /// Counts a write's outcome against the stall.
    fn saw<R>(&mut self, cx: &mut Context<'_>, wrote: &Poll<io::Result<R>>, took: bool) {
        match wrote {
            Poll::Pending => self.stall.saw(cx, false),
            Poll::Ready(Ok(_)) if took => self.stall.saw(cx, true),
            Poll::Ready(_) => {}
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Held<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        self.check_stall(cx)?;
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Held<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.check_stall(cx)?;
        let wrote = Pin::new(&mut self.inner).poll_write(cx, buf);
        let took = matches!(wrote, Poll::Ready(Ok(n)) if n > 0);
        self.saw(cx, &wrote, took);
        wrote
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.check_stall(cx)?;
        // A TCP socket's flush is always ready and says nothing of what the peer took: only a
        // refusal counts.
        let flushed = Pin::new(&mut self.inner).poll_flush(cx);
        self.saw(cx, &flushed, false);
        flushed
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.check_stall(cx)?;
        let wrote = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        let took = matches!(wrote, Poll::Ready(Ok(n)) if n > 0);
        self.saw(cx, &wrote, took);
        wrote
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

/// What a connection has shown of its greeting so far, and until when it may take.
struct Greeting {
    deadline: Pin<Box<tokio::time::Sleep>>,
    /// The preface and the first frame's header, as far as read.
    head: [u8; PREFACE_LEN + FRAME_HEADER_LEN],
    seen: usize,
    /// The first frame's payload bytes still to come, once its header is whole.
    rest: usize,
}

impl Greeting {
    fn until(deadline: tokio::time::Instant) -> Self {
        Self {
            deadline: Box::pin(tokio::time::sleep_until(deadline)),
            head: [0; PREFACE_LEN + FRAME_HEADER_LEN],
            seen: 0,
            rest: 0,
        }
    }

    /// Counts `bytes`, read from the peer; whether the preface and the first frame are whole.
    /// Their contents are HTTP/2's to check: it closes a connection that sends anything else.
    fn saw(&mut self, mut bytes: &[u8]) -> bool {
        let head_len = self.head.len();
        if self.seen < head_len {
            let n = (head_len - self.seen).min(bytes.len());
            self.head[self.seen..self.seen + n].copy_from_slice(&bytes[..n]);
            self.seen += n;
            bytes = &bytes[n..];
            if self.seen < head_len {
                return false;
            }
            let h = &self.head[PREFACE_LEN..];
            self.rest = usize::from(h[0]) << 16 | usize::from(h[1]) << 8 | usize::from(h[2]);
        }
        self.rest = self.rest.saturating_sub(bytes.len());
        self.rest == 0
    }
}

/// The frames of one direction of an HTTP/2 connection, read from its bytes as they pass: only
/// each frame's header is looked at (its type, flags and stream), the payloads are skipped.
struct Frames {
    /// Bytes still to skip: the client's preface at first, then each frame's payload.
    skip: usize,
    head: [u8; FRAME_HEADER_LEN],
    seen: usize,
}

/// A frame's type, its flags and its stream, as [`Frames::feed`] reports it.
type FrameHead = (u8, u8, u32);

impl Frames {
    /// The client's frames (after its preface) or the server's (`preface` 0).
    fn after(preface: usize) -> Self {
        Self {
            skip: preface,
            head: [0; FRAME_HEADER_LEN],
            seen: 0,
        }
    }

    /// Reads on through `bytes`, calling `frame` with each frame's header once whole.
    fn feed(&mut self, mut bytes: &[u8], mut frame: impl FnMut(FrameHead)) {
        while !bytes.is_empty() {
            if self.skip > 0 {
                let n = self.skip.min(bytes.len());
                self.skip -= n;
                bytes = &bytes[n..];
                continue;
            }
            let n = (FRAME_HEADER_LEN - self.seen).min(bytes.len());
            self.head[self.seen..self.seen + n].copy_from_slice(&bytes[..n]);
            self.seen += n;
            bytes = &bytes[n..];
            if self.seen == FRAME_HEADER_LEN {
                let h = &self.head;
                self.seen = 0;
                self.skip = usize::from(h[0]) << 16 | usize::from(h[1]) << 8 | usize::from(h[2]);
                let stream = u32::from_be_bytes([h[5] & 0x7f, h[6], h[7], h[8]]);
                frame((h[3], h[4], stream));
            }
        }
    }
}

/// The HTTP/2 streams (calls) open on a connection, from the frames both ways: a client's
/// `HEADERS` opens one; it ends once each side has ended its half (`END_STREAM` on a `DATA` or
/// `HEADERS` frame) or either reset it (`RST_STREAM`). Frames on streams it does not know are
/// ignored, so a stream it missed the end of only keeps the connection from counting as idle.
#[derive(Default)]
struct Streams {
    /// Each open stream: whether the client ended its half, and the server.
    open: std::collections::HashMap<u32, (bool, bool)>,
}

const DATA: u8 = 0x0;
const HEADERS: u8 = 0x1;
const RST_STREAM: u8 = 0x3;
const END_STREAM: u8 = 0x1;

impl Streams {
    /// A frame from the client (`from_client`) or from the server.
    fn saw(&mut self, from_client: bool, (kind, flags, stream): FrameHead) {
        if stream == 0 {
            return;
        }
        if kind == RST_STREAM {
            self.open.remove(&stream);
            return;
        }
        if kind != DATA && kind != HEADERS {
            return;
        }
        if from_client && kind == HEADERS {
            self.open.entry(stream).or_insert((false, false));
        }
        if flags & END_STREAM == 0 {
            return;
        }
        if let Some(ended) = self.open.get_mut(&stream) {
            if from_client {
                ended.0 = true;
            } else {
                ended.1 = true;
            }
            if *ended == (true, true) {
                self.open.remove(&stream);
            }
        }
    }

    fn idle(&self) -> bool {
        self.open.is_empty()
    }
}

/// When a connection counts as idle and until when it may stay so.
struct Idle {
    limit: Duration,
    /// Reset to `limit` from the moment the last open stream ended.
    deadline: Pin<Box<tokio::time::Sleep>>,
    streams: Streams,
    from_client: Frames,
    from_server: Frames,
}

impl Idle {
    fn new(limit: Duration) -> Self {
        Self {
            limit,
            deadline: Box::pin(tokio::time::sleep(limit)),
            streams: Streams::default(),
            from_client: Frames::after(PREFACE_LEN),
            from_server: Frames::after(0),
        }
    }

    /// Counts `bytes`, sent by the client (`from_client`) or the server; the idle deadline
    /// starts anew when the last open stream ends.
    fn saw(&mut self, from_client: bool, bytes: &[u8]) {
        let was_idle = self.streams.idle();
        let (frames, streams) = if from_client {
            (&mut self.from_client, &mut self.streams)
        } else {
            (&mut self.from_server, &mut self.streams)
        };
        frames.feed(bytes, |f| streams.saw(from_client, f));
        if !was_idle && self.streams.idle() {
            let until = tokio::time::Instant::now() + self.limit;
            self.deadline.as_mut().reset(until);
        }
    }

    /// Whether the connection has been idle past its limit; registers the task to be woken at
    /// the deadline while it is idle.
    fn expired(&mut self, cx: &mut Context<'_>) -> bool {
        self.streams.idle() && self.deadline.as_mut().poll(cx).is_ready()
    }
}

/// Since when a connection's socket has refused every byte written to it, and until when it
/// may ([`Limits::write_stall`]). Only a refusal reads the clock (one `Instant` per `Pending`,
/// no system call); bytes taken end the stall. The deadline's timer wakes the connection's
/// task even when hyper polls nothing more (it waits for the socket to become writable), so
/// the next read or write fails.
struct Stall {
    limit: Duration,
    /// Armed at the first refusal after bytes were taken; made at the first refusal.
    deadline: Option<Pin<Box<tokio::time::Sleep>>>,
    stalled: bool,
    /// Whether the close was logged (once per connection).
    logged: bool,
}

impl Stall {
    fn new(limit: Duration) -> Self {
        Self {
            limit,
            deadline: None,
            stalled: false,
            logged: false,
        }
    }

    /// A write or flush that took bytes (`true`) or was refused (`false`): a refusal after
    /// progress starts the clock, and registers the task to be woken at the deadline.
    fn saw(&mut self, cx: &mut Context<'_>, progress: bool) {
        if progress {
            // The timer, if armed, fires once more at most: a spurious wake-up, no close.
            self.stalled = false;
            return;
        }
        if !self.stalled {
            self.stalled = true;
            let until = tokio::time::Instant::now() + self.limit;
            match &mut self.deadline {
                Some(d) => d.as_mut().reset(until),
                None => self.deadline = Some(Box::pin(tokio::time::sleep_until(until))),
            }
        }
        // Not expired (checked before the write): registers the wake-up.
        let _ = self.expired(cx);
    }

    /// Whether the socket has refused every byte for longer than the limit; registers the
    /// task to be woken at the deadline while it refuses.
    fn expired(&mut self, cx: &mut Context<'_>) -> bool {
        self.stalled
            && self
                .deadline
                .as_mut()
                .is_some_and(|d| d.as_mut().poll(cx).is_ready())
    }
}

/// The stream of a listener's connection, plain or TLS.
enum Io {
    Plain(TcpStream),
    Tls(Box<tokio_rustls::server::TlsStream<TcpStream>>),
}

/// A connection accepted by a guarded listener ([`incoming`]): it fails its reads and writes
/// once its greeting's deadline passed before the greeting was whole, which closes it, and
/// holds its place under the listener's [`ConnectionCap`] until it ends.
pub struct Conn {
    io: Io,
    greeting: Option<Greeting>,
    idle: Idle,
    stall: Stall,
    info: TcpConnectInfo,
    /// The listener, as the log names it.
    what: String,
    _place: OwnedSemaphorePermit,
}

impl Conn {
    /// `Err` once the greeting's deadline passed with the greeting not whole, the connection
    /// was idle past its limit, or its socket refused every byte past its limit; registers the
    /// task to be woken at the deadlines otherwise.
    fn check_deadline(&mut self, cx: &mut Context<'_>) -> io::Result<()> {
        if let Some(g) = &mut self.greeting
            && g.deadline.as_mut().poll(cx).is_ready()
        {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the peer did not finish its HTTP/2 greeting in time",
            ));
        }
        if self.idle.expired(cx) {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the connection had no call open for too long",
            ));
        }
        if self.stall.expired(cx) {
            if !self.stall.logged {
                self.stall.logged = true;
                let peer = self
                    .info
                    .remote_addr
                    .map_or_else(|| "an unknown address".to_string(), |p| p.to_string());
                tracing::info!(
                    listener = %self.what,
                    %peer,
                    "{}: closed the connection from {peer}: it read nothing of what was \
                     sent to it for {:?}",
                    self.what,
                    self.stall.limit
                );
            }
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the peer read nothing of what was sent to it for too long",
            ));
        }
        Ok(())
    }

    /// Counts the `n` bytes the server just wrote from `bufs` (any ends a stall), and arms the
    /// idle deadline's wake-up if they ended the last open stream.
    fn wrote(&mut self, cx: &mut Context<'_>, bufs: &[io::IoSlice<'_>], mut n: usize) {
        if n > 0 {
            self.stall.saw(cx, true);
        }
        for b in bufs {
            if n == 0 {
                break;
            }
            let k = n.min(b.len());
            self.idle.saw(false, &b[..k]);
            n -= k;
        }
        // Not expired: it was just armed (or was not idle before the check that preceded).
        let _ = self.idle.expired(cx);
    }
}

impl AsyncRead for Conn {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        // Checked before every read, not only when none is ready: a peer trickling a byte at a
        // time always has one ready.
        this.check_deadline(cx)?;
        let before = buf.filled().len();
        let read = match &mut this.io {
            Io::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        };
        if let Poll::Ready(Ok(())) = &read {
            let got = &buf.filled()[before..];
            if let Some(g) = &mut this.greeting
                && g.saw(got)
            {
                this.greeting = None;
            }
            this.idle.saw(true, got);
            // Armed anew if these bytes ended the last open stream.
            let _ = this.idle.expired(cx);
        }
        read
    }
}

impl AsyncWrite for Conn {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        this.check_deadline(cx)?;
        let wrote = match &mut this.io {
            Io::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        };
        match wrote {
            Poll::Ready(Ok(n)) => this.wrote(cx, &[io::IoSlice::new(buf)], n),
            Poll::Pending => this.stall.saw(cx, false),
            Poll::Ready(Err(_)) => {}
        }
        wrote
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        this.check_deadline(cx)?;
        let wrote = match &mut this.io {
            Io::Plain(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_write_vectored(cx, bufs),
        };
        match wrote {
            Poll::Ready(Ok(n)) => this.wrote(cx, bufs, n),
            Poll::Pending => this.stall.saw(cx, false),
            Poll::Ready(Err(_)) => {}
        }
        wrote
    }

    fn is_write_vectored(&self) -> bool {
        match &self.io {
            Io::Plain(s) => s.is_write_vectored(),
            Io::Tls(s) => s.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        this.check_deadline(cx)?;
        let flushed = match &mut this.io {
            Io::Plain(s) => Pin::new(s).poll_flush(cx),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        };
        match (&flushed, &this.io) {
            (Poll::Pending, _) => this.stall.saw(cx, false),
            // TLS's records held back went out; a TCP socket's flush is always ready, and
            // says nothing of what the peer took.
            (Poll::Ready(Ok(())), Io::Tls(_)) => this.stall.saw(cx, true),
            _ => {}
        }
        flushed
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.get_mut().io {
            Io::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}

impl Connected for Conn {
    // The TCP addresses, TLS or not: handlers read the caller's address (`remote_addr`), and
    // no listener asks for client certificates.
    type ConnectInfo = TcpConnectInfo;

    fn connect_info(&self) -> TcpConnectInfo {
        self.info.clone()
    }
}

/// The connections a guarded listener hands to tonic (`serve_with_incoming…`). Dropping it —
/// tonic does when it stops serving — stops the accepting, which closes the listening socket.
pub struct Incoming {
    rx: mpsc::Receiver<Conn>,
}

impl Stream for Incoming {
    type Item = Result<Conn, io::Error>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.rx.poll_recv(cx).map(|c| c.map(Ok))
    }
}

/// Guards the connections of `tcp` (tonic's `TcpIncoming` from the listening socket, with its
/// `TCP_NODELAY` and keepalive settings), speaking TLS with `tls` when given, under `limits`;
/// `what` names the listener in the log. Each connection's handshake runs in a task of its own,
/// so a slow one holds up no other. Must be called within a tokio runtime.
pub fn incoming<S>(
    tcp: S,
    tls: Option<Arc<rustls::ServerConfig>>,
    limits: Limits,
    what: impl Into<String>,
) -> Incoming
where
    S: Stream<Item = io::Result<TcpStream>> + Send + Unpin + 'static,
{
    let (tx, rx) = mpsc::channel(64);
    let cap = ConnectionCap::new(what, limits.max_connections);
    tokio::spawn(accept(tcp, tls, limits, cap, tx));
    Incoming { rx }
}

/// The accept loop of [`incoming`]: ends when its [`Incoming`] is dropped or `tcp` ends.
async fn accept<S>(
    mut tcp: S,
    tls: Option<Arc<rustls::ServerConfig>>,
    limits: Limits,
    cap: Arc<ConnectionCap>,
    tx: mpsc::Sender<Conn>,
) where
    S: Stream<Item = io::Result<TcpStream>> + Unpin,
{
    let mut last_error: Option<Instant> = None;
    loop {
        let next = tokio::select! {
            () = tx.closed() => return,
            next = tcp.next() => next,
        };
        let stream = match next {
            None => return,
            Some(Ok(s)) => s,
            Some(Err(e)) => {
                if last_error.is_none_or(|t| t.elapsed() >= CAP_WARNING_EVERY) {
                    tracing::warn!(listener = %cap.what, "{}: accepting a connection failed: {e}", cap.what);
                    last_error = Some(Instant::now());
                }
                tokio::time::sleep(ACCEPT_ERROR_PAUSE).await;
                continue;
            }
        };
        let peer = stream.peer_addr().ok();
        notsent_lowat(&stream);
        // Closed at once (dropped) past the cap.
        let Some(place) = cap.admit(peer) else {
            continue;
        };
        let info = TcpConnectInfo {
            local_addr: stream.local_addr().ok(),
            remote_addr: peer,
        };
        let deadline = tokio::time::Instant::now() + limits.greeting;
        let (tls, tx, what) = (tls.clone(), tx.clone(), cap.what.clone());
        tokio::spawn(async move {
            let io = match tls {
                None => Io::Plain(stream),
                Some(config) => {
                    let handshake = tokio_rustls::TlsAcceptor::from(config).accept(stream);
                    match tokio::time::timeout_at(deadline, handshake).await {
                        Ok(Ok(s)) => Io::Tls(Box::new(s)),
                        Ok(Err(e)) => {
                            tracing::debug!(listener = %what, ?peer, "TLS handshake failed: {e}");
                            return;
                        }
                        Err(_) => {
                            tracing::debug!(listener = %what, ?peer, "no TLS handshake in time: closed");
                            return;
                        }
                    }
                }
            };
            let conn = Conn {
                io,
                greeting: Some(Greeting::until(deadline)),
                idle: Idle::new(limits.idle),
                stall: Stall::new(limits.write_stall),
                info,
                what,
                _place: place,
            };
            // Refused only once the listener stopped: the connection is closed then.
            let _ = tx.send(conn).await;
        });
    }
}

/// Sets [`NOTSENT_LOWAT`] on an accepted socket, where the system has it; without it (or if
/// it is refused) a slow reader counts as reading only once it drained about a third of the
/// socket's send buffer within [`Limits::write_stall`].
pub fn notsent_lowat(stream: &TcpStream) {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    if let Err(e) = socket2::SockRef::from(stream).set_tcp_notsent_lowat(NOTSENT_LOWAT) {
        tracing::debug!("TCP_NOTSENT_LOWAT refused: {e}");
    }
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    let _ = stream;
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    const PREFACE: &[u8; PREFACE_LEN] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

    /// A greeting of the preface and a SETTINGS frame with `payload` bytes.
    fn greeting(payload: usize) -> Vec<u8> {
        let mut g = PREFACE.to_vec();
        let len = u32::try_from(payload).expect("small");
        g.extend_from_slice(&len.to_be_bytes()[1..]);
        g.extend_from_slice(&[4, 0, 0, 0, 0, 0]);
        g.extend(std::iter::repeat_n(0u8, payload));
        g
    }

    /// A frame of `kind` with `flags` on `stream`, with `payload` zero bytes.
    fn frame(kind: u8, flags: u8, stream: u32, payload: usize) -> Vec<u8> {
        let len = u32::try_from(payload).expect("small");
        let mut f = len.to_be_bytes()[1..].to_vec();
        f.extend_from_slice(&[kind, flags]);
        f.extend_from_slice(&stream.to_be_bytes());
        f.extend(std::iter::repeat_n(0u8, payload));
        f
    }

    /// The streams are followed through frames cut anywhere, both ways: a call is open from
    /// its client's HEADERS until both sides ended it or either reset it; pings, SETTINGS and
    /// frames on unknown streams change nothing.
    #[test]
    fn the_open_streams_are_followed_through_the_frames_both_ways() {
        let client: Vec<u8> = [
            greeting(6),
            frame(HEADERS, 0x4, 1, 20),
            frame(DATA, END_STREAM, 1, 100),
            frame(HEADERS, 0x4 | END_STREAM, 3, 7),
            frame(6, 0, 0, 8), // PING
        ]
        .concat();
        let server: Vec<u8> = [
            frame(4, 0, 0, 12), // SETTINGS
            frame(HEADERS, 0x4, 1, 9),
            frame(DATA, 0, 1, 300),
            frame(DATA, END_STREAM, 9, 0),          // an unknown stream
            frame(HEADERS, 0x4 | END_STREAM, 1, 4), // trailers: stream 1 ends
        ]
        .concat();
        for cut in [1, 3, 9, 10, 64, usize::MAX] {
            let mut s = Streams::default();
            let (mut from_client, mut from_server) = (Frames::after(PREFACE_LEN), Frames::after(0));
            for piece in client.chunks(cut.min(client.len())) {
                from_client.feed(piece, |f| s.saw(true, f));
            }
            let mut open: Vec<u32> = s.open.keys().copied().collect();
            open.sort_unstable();
            assert_eq!(open, [1, 3], "cut {cut}");
            for piece in server.chunks(cut.min(server.len())) {
                from_server.feed(piece, |f| s.saw(false, f));
            }
            assert_eq!(s.open.keys().copied().collect::<Vec<_>>(), [3], "cut {cut}");
            from_server.feed(&frame(RST_STREAM, 0, 3, 4), |f| s.saw(false, f));
            assert!(s.idle(), "cut {cut}");
        }
    }

    /// The cap each listener holds within an open-file limit: what is left after the files
    /// kept for the process, shared by the listeners, never above the setting.
    #[test]
    fn the_cap_fits_the_open_file_limit() {
        assert_eq!(cap_within(4096, 2, 65_536), 4096);
        assert_eq!(cap_within(4096, 2, 1_024), (1_024 - 256) / 2);
        assert_eq!(cap_within(4096, 1, 128), 128 - 32);
        assert_eq!(cap_within(1024, 3, 128), (128 - 32) / 3);
        assert_eq!(cap_within(4096, 2, 20), 16, "at least 16");
        let (cap, warning) = fit_open_files(4096, 2, "`max_connections`", false);
        assert!(
            cap <= 4096 && (cap == 4096) == warning.is_none(),
            "{warning:?}"
        );
    }

    #[tokio::test]
    async fn a_greeting_is_whole_after_the_preface_and_the_first_frame_however_it_is_cut() {
        let whole = greeting(12);
        for cut in [1, 5, 24, 32, 33, 40, whole.len()] {
            let mut g = Greeting::until(tokio::time::Instant::now());
            let mut done = false;
            for (i, piece) in whole.chunks(cut).enumerate() {
                assert!(!done, "cut {cut}: whole before piece {i}");
                done = g.saw(piece);
            }
            assert!(done, "cut {cut}");
        }
        let mut empty = Greeting::until(tokio::time::Instant::now());
        assert!(!empty.saw(&PREFACE[..]));
        assert!(
            empty.saw(&greeting(0)[PREFACE_LEN..]),
            "an empty SETTINGS frame"
        );
    }

    /// A listener on a free port with `limits`, its connections handed to the test.
    async fn listener(
        limits: Limits,
        tls: Option<Arc<rustls::ServerConfig>>,
    ) -> (SocketAddr, Incoming) {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = l.local_addr().expect("addr");
        let tcp = tonic::transport::server::TcpIncoming::from(l);
        (addr, incoming(tcp, tls, limits, "test listener"))
    }

    /// Whether the server closed `s` within `within`: a read ends (EOF or reset) rather than
    /// waiting.
    async fn closed_within(s: &mut TcpStream, within: Duration) -> bool {
        let mut buf = [0u8; 256];
        let started = tokio::time::Instant::now();
        loop {
            let left = within.saturating_sub(started.elapsed());
            match tokio::time::timeout(left, s.read(&mut buf)).await {
                Err(_) => return false,
                Ok(Ok(0) | Err(_)) => return true,
                // The server's own bytes (TLS's, say): read on.
                Ok(Ok(_)) => {}
            }
        }
    }

    const SHORT: Limits = Limits {
        greeting: Duration::from_millis(300),
        max_connections: 4,
        idle: Duration::from_secs(60),
        write_stall: WRITE_STALL_TIMEOUT,
    };

    /// Silent and trickling connections are closed at the greeting's deadline; one that sent
    /// its greeting is not, however long it then stays quiet.
    #[tokio::test]
    async fn a_connection_that_does_not_greet_in_time_is_closed_and_one_that_did_stays() {
        let (addr, mut incoming) = listener(SHORT, None).await;
        // The server side reads as HTTP/2 would, and reports how each connection ended.
        let (ended_tx, mut ended) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            while let Some(Ok(mut conn)) = incoming.next().await {
                let ended_tx = ended_tx.clone();
                tokio::spawn(async move {
                    let mut buf = [0u8; 64];
                    let why = loop {
                        match conn.read(&mut buf).await {
                            Ok(0) => break io::ErrorKind::UnexpectedEof,
                            Ok(_) => {}
                            Err(e) => break e.kind(),
                        }
                    };
                    let _ = ended_tx.send(why);
                });
            }
        });
        let started = Instant::now();
        let mut silent = TcpStream::connect(addr).await.expect("connect");
        let mut trickling = TcpStream::connect(addr).await.expect("connect");
        let mut greeted = TcpStream::connect(addr).await.expect("connect");
        greeted.write_all(&greeting(6)).await.expect("greet");
        let whole = greeting(6);
        let trickle = tokio::spawn(async move {
            for b in &whole[..whole.len() - 1] {
                if trickling.write_all(&[*b]).await.is_err() {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            trickling
        });
        assert!(closed_within(&mut silent, Duration::from_secs(3)).await);
        let waited = started.elapsed();
        assert!(
            waited >= SHORT.greeting && waited < Duration::from_secs(2),
            "closed after {waited:?}"
        );
        let mut trickling = trickle.await.expect("trickled");
        assert!(closed_within(&mut trickling, Duration::from_secs(2)).await);
        for _ in 0..2 {
            let why = ended.recv().await.expect("ended");
            assert_eq!(why, io::ErrorKind::TimedOut);
        }
        // The greeted one outlives the deadline several times over.
        assert!(!closed_within(&mut greeted, SHORT.greeting * 3).await);
        assert!(ended.try_recv().is_err(), "the greeted connection is open");
    }

    /// A connection with no call open is closed once idle for `idle`, from its accept or the
    /// end of its last call, however it answers; one with a call open stays, however long.
    #[tokio::test]
    async fn a_connection_with_no_call_open_is_closed_once_idle_and_one_with_a_call_stays() {
        let limits = Limits {
            greeting: Duration::from_secs(5),
            max_connections: 8,
            idle: Duration::from_millis(400),
            write_stall: WRITE_STALL_TIMEOUT,
        };
        let (addr, mut incoming) = listener(limits, None).await;
        // The server side reads, and answers a call on stream 1 when told to.
        let (answer_tx, answer) = tokio::sync::watch::channel(false);
        tokio::spawn(async move {
            while let Some(Ok(mut conn)) = incoming.next().await {
                let mut answer = answer.clone();
                tokio::spawn(async move {
                    let mut buf = [0u8; 64];
                    loop {
                        tokio::select! {
                            r = conn.read(&mut buf) => if !matches!(r, Ok(n) if n > 0) { break },
                            Ok(()) = answer.changed() => {
                                // Ignored on a connection with no stream 1 open.
                                let end = frame(HEADERS, 0x4 | END_STREAM, 1, 3);
                                if conn.write_all(&end).await.is_err() { break }
                            }
                        }
                    }
                });
            }
        });
        // A call opened and held: open past the idle limit several times over.
        let mut calling = TcpStream::connect(addr).await.expect("connect");
        calling.write_all(&greeting(0)).await.expect("greet");
        calling
            .write_all(&frame(HEADERS, 0x4 | END_STREAM, 1, 10))
            .await
            .expect("call");
        // Greeted, no call: closed at the idle limit however often it says something.
        let mut idle = TcpStream::connect(addr).await.expect("connect");
        idle.write_all(&greeting(0)).await.expect("greet");
        let started = Instant::now();
        for _ in 0..3 {
            tokio::time::sleep(Duration::from_millis(50)).await;
            let _ = idle.write_all(&frame(6, 0, 0, 8)).await; // a PING
        }
        assert!(closed_within(&mut idle, Duration::from_secs(3)).await);
        let waited = started.elapsed();
        assert!(
            waited >= limits.idle && waited < Duration::from_secs(2),
            "closed after {waited:?}"
        );
        assert!(
            !closed_within(&mut calling, limits.idle * 3).await,
            "the call is open"
        );
        // Answered: the call ended, the connection is idle and closed in its turn.
        answer_tx.send(true).expect("answer");
        let answered = Instant::now();
        assert!(closed_within(&mut calling, Duration::from_secs(3)).await);
        assert!(
            answered.elapsed() >= limits.idle,
            "{:?}",
            answered.elapsed()
        );
    }

    /// What is logged at `level` and above while the guard lives, on this thread (a
    /// current-thread runtime's tasks included).
    fn log_capture(
        level: tracing::Level,
    ) -> (tracing::subscriber::DefaultGuard, Arc<Mutex<Vec<u8>>>) {
        #[derive(Clone)]
        struct Buffer(Arc<Mutex<Vec<u8>>>);
        impl io::Write for Buffer {
            fn write(&mut self, b: &[u8]) -> io::Result<usize> {
                self.0.lock().expect("log").extend_from_slice(b);
                Ok(b.len())
            }
            fn flush(&mut self) -> io::Result<()> {
                Ok(())
            }
        }
        let text = Arc::new(Mutex::new(Vec::new()));
        let writer = Buffer(text.clone());
        let subscriber = tracing_subscriber::fmt()
            .with_ansi(false)
            .with_max_level(level)
            .with_writer(move || writer.clone())
            .finish();
        (tracing::subscriber::set_default(subscriber), text)
    }

    /// Past the cap, a new connection is closed at once, with a warning naming the listener
    /// and the cap; a place given back is taken again.
    #[tokio::test]
    async fn connections_past_the_cap_are_closed_at_once() {
        let (_logging, log) = log_capture(tracing::Level::WARN);
        let limits = Limits {
            greeting: Duration::from_secs(30),
            max_connections: 2,
            idle: Duration::from_secs(60),
            write_stall: WRITE_STALL_TIMEOUT,
        };
        let (addr, mut incoming) = listener(limits, None).await;
        let mut held = Vec::new();
        for _ in 0..2 {
            let mut c = TcpStream::connect(addr).await.expect("connect");
            c.write_all(&greeting(0)).await.expect("greet");
            let conn = incoming.next().await.expect("yielded").expect("conn");
            held.push((c, conn));
        }
        let mut third = TcpStream::connect(addr).await.expect("connect");
        assert!(closed_within(&mut third, Duration::from_secs(2)).await);
        let logged = String::from_utf8_lossy(&log.lock().expect("log")).into_owned();
        assert!(
            logged.contains(
                "test listener: 2 connections are open, the most it holds at once: new ones \
                 are closed at once until some end (1 closed so far, the latest from 127.0.0.1:"
            ),
            "{logged}"
        );
        drop(held.pop());
        // The accept loop sees the freed place on the next connection.
        let mut fourth = TcpStream::connect(addr).await.expect("connect");
        let conn = tokio::time::timeout(Duration::from_secs(2), incoming.next())
            .await
            .expect("yielded in time");
        assert!(conn.is_some());
        assert!(!closed_within(&mut fourth, Duration::from_millis(200)).await);
    }

    /// The connections closed at the cap after a warning, within its interval, are logged at
    /// the first admission after the interval: before, they were lost when the flood stopped
    /// within it.
    #[test]
    fn the_last_count_of_closed_connections_is_logged_when_one_is_admitted_again() {
        let (_logging, log) = log_capture(tracing::Level::WARN);
        let mut cap = ConnectionCap::new("test listener", 1);
        Arc::get_mut(&mut cap).expect("unique").every = Duration::from_millis(100);
        let held = cap.admit(None).expect("a place");
        for _ in 0..3 {
            assert!(cap.admit(None).is_none(), "past the cap");
        }
        drop(held);
        let again = cap.admit(None).expect("a place again, within the interval");
        let logged = || String::from_utf8_lossy(&log.lock().expect("log")).into_owned();
        assert!(!logged().contains("more connections"), "{}", logged());
        drop(again);
        std::thread::sleep(Duration::from_millis(150));
        let _third = cap.admit(None).expect("a place again");
        assert!(
            logged().contains(
                "test listener: 2 more connections were closed at the cap of 1 after the last \
                 warning; it admits new ones again"
            ),
            "{}",
            logged()
        );
        assert_eq!(logged().lines().count(), 2, "two warnings: {}", logged());
    }

    /// Over TLS, the deadline covers the handshake and the greeting after it.
    #[tokio::test]
    async fn over_tls_a_silent_connection_is_closed_in_time_and_a_greeted_one_stays() {
        let key = rcgen::KeyPair::generate().expect("key");
        let cert = rcgen::CertificateParams::new(vec!["localhost".to_string()])
            .expect("params")
            .self_signed(&key)
            .expect("cert");
        let config =
            tls_config(cert.pem().as_bytes(), key.serialize_pem().as_bytes()).expect("tls config");
        assert_eq!(config.alpn_protocols, vec![b"h2".to_vec()]);
        let (addr, mut incoming) = listener(SHORT, Some(config)).await;
        tokio::spawn(async move {
            while let Some(Ok(mut conn)) = incoming.next().await {
                tokio::spawn(async move {
                    let mut buf = [0u8; 64];
                    while matches!(conn.read(&mut buf).await, Ok(n) if n > 0) {}
                });
            }
        });
        let mut silent = TcpStream::connect(addr).await.expect("connect");
        assert!(closed_within(&mut silent, Duration::from_secs(2)).await);

        // A client that finishes the handshake but sends no greeting is closed too.
        let mut roots = rustls::RootCertStore::empty();
        roots.add(cert.der().clone()).expect("root");
        let client = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
        let connector = tokio_rustls::TlsConnector::from(Arc::new(client));
        let name = rustls::pki_types::ServerName::try_from("localhost").expect("name");
        let tcp = TcpStream::connect(addr).await.expect("connect");
        let mut quiet = connector
            .connect(name.clone(), tcp)
            .await
            .expect("handshake");
        let mut buf = [0u8; 16];
        let read = tokio::time::timeout(Duration::from_secs(2), quiet.read(&mut buf)).await;
        assert!(
            matches!(read, Ok(Ok(0) | Err(_))),
            "closed after the handshake: {read:?}"
        );
        let tcp = TcpStream::connect(addr).await.expect("connect");
        let mut greeted = connector.connect(name, tcp).await.expect("handshake");
        greeted.write_all(&greeting(0)).await.expect("greet");
        let read = tokio::time::timeout(SHORT.greeting * 3, greeted.read(&mut buf)).await;
        assert!(read.is_err(), "still open: {read:?}");
    }

    /// The TLS configuration of a listener with a throw-away certificate, and a connector
    /// that trusts it.
    fn tls_pair() -> (Arc<rustls::ServerConfig>, tokio_rustls::TlsConnector) {
        let key = rcgen::KeyPair::generate().expect("key");
        let cert = rcgen::CertificateParams::new(vec!["localhost".to_string()])
            .expect("params")
            .self_signed(&key)
            .expect("cert");
        let config =
            tls_config(cert.pem().as_bytes(), key.serialize_pem().as_bytes()).expect("tls config");
        let mut roots = rustls::RootCertStore::empty();
        roots.add(cert.der().clone()).expect("root");
        let client = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
        (config, tokio_rustls::TlsConnector::from(Arc::new(client)))
    }

    /// A client's end of a connection, plain or TLS.
    trait Peer: AsyncRead + AsyncWrite + Unpin + Send {}
    impl<T: AsyncRead + AsyncWrite + Unpin + Send> Peer for T {}

    /// A connection to `addr` that has sent its greeting, over TLS with `connector`.
    async fn greeted_peer(
        addr: SocketAddr,
        connector: Option<&tokio_rustls::TlsConnector>,
    ) -> Box<dyn Peer> {
        let tcp = TcpStream::connect(addr).await.expect("connect");
        let mut peer: Box<dyn Peer> = match connector {
            None => Box::new(tcp),
            Some(c) => {
                let name = rustls::pki_types::ServerName::try_from("localhost").expect("name");
                Box::new(c.connect(name, tcp).await.expect("handshake"))
            }
        };
        peer.write_all(&greeting(0)).await.expect("greet");
        peer.flush().await.expect("greet");
        peer
    }

    /// How a connection's writer ended: the error, and how long after the last write that
    /// took bytes.
    type WriterEnd = (io::ErrorKind, Duration);

    /// Serves each connection of `incoming` with a writer that reads the greeting and then
    /// writes as fast as the socket takes bytes (as hyper does a long reply) until a write
    /// fails.
    fn write_without_end(mut incoming: Incoming) -> mpsc::UnboundedReceiver<WriterEnd> {
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            while let Some(Ok(mut conn)) = incoming.next().await {
                let tx = tx.clone();
                tokio::spawn(async move {
                    let mut greeted = vec![0u8; greeting(0).len()];
                    conn.read_exact(&mut greeted).await.expect("the greeting");
                    let chunk = vec![0u8; 16 << 10];
                    let mut last = Instant::now();
                    let why = loop {
                        match conn.write(&chunk).await {
                            Ok(_) => last = Instant::now(),
                            Err(e) => break e.kind(),
                        }
                    };
                    let _ = tx.send((why, last.elapsed()));
                });
            }
        });
        rx
    }

    /// A peer that keeps its connection but reads nothing, its TCP receive window shut, is
    /// closed once the socket has refused every byte for `write_stall` — plain and TLS — with
    /// a line in the log naming the listener and the peer. Before, the writes stayed pending
    /// for good and the connection, and what the server had buffered for it, with them.
    #[tokio::test]
    async fn a_peer_that_reads_nothing_is_closed_once_writes_stall_past_the_bound() {
        let (_logging, log) = log_capture(tracing::Level::INFO);
        let limits = Limits {
            greeting: Duration::from_secs(5),
            max_connections: 8,
            idle: Duration::from_secs(60),
            write_stall: Duration::from_millis(400),
        };
        let (config, connector) = tls_pair();
        for tls in [false, true] {
            let (addr, incoming) = listener(limits, tls.then(|| config.clone())).await;
            let mut ends = write_without_end(incoming);
            let mut peer = greeted_peer(addr, tls.then_some(&connector)).await;
            let (why, stalled) = tokio::time::timeout(Duration::from_secs(10), ends.recv())
                .await
                .expect("the writes end in time")
                .expect("an end");
            assert_eq!(why, io::ErrorKind::TimedOut, "tls {tls}");
            assert!(
                stalled >= limits.write_stall && stalled < Duration::from_secs(3),
                "tls {tls}: closed {stalled:?} after the last write that took bytes"
            );
            // The peer finds its connection closed once it reads what had reached it.
            let drained = tokio::time::timeout(Duration::from_secs(5), async {
                let mut buf = vec![0u8; 64 << 10];
                while matches!(peer.read(&mut buf).await, Ok(n) if n > 0) {}
            })
            .await;
            assert!(drained.is_ok(), "tls {tls}: the connection is closed");
        }
        let logged = String::from_utf8_lossy(&log.lock().expect("log")).into_owned();
        let line = "test listener: closed the connection from 127.0.0.1:";
        assert_eq!(logged.matches(line).count(), 2, "{logged}");
        assert!(
            logged.contains("it read nothing of what was sent to it for 400ms"),
            "{logged}"
        );
    }

    /// A peer that reads, however little at a time, is never closed: each time its window
    /// opens the socket takes bytes again, which ends the stall. It reads 8 KiB every 20 ms
    /// (the socket refuses bytes most of the time) over several bounds.
    #[tokio::test]
    async fn a_slow_reader_is_not_closed_however_long_its_writes_wait() {
        let limits = Limits {
            greeting: Duration::from_secs(5),
            max_connections: 8,
            idle: Duration::from_secs(60),
            write_stall: Duration::from_secs(1),
        };
        let (addr, incoming) = listener(limits, None).await;
        let mut ends = write_without_end(incoming);
        let mut peer = greeted_peer(addr, None).await;
        let started = Instant::now();
        let mut read = 0;
        let mut buf = vec![0u8; 8 << 10];
        while started.elapsed() < limits.write_stall * 4 {
            tokio::time::sleep(Duration::from_millis(20)).await;
            match peer.read(&mut buf).await {
                Ok(n) if n > 0 => read += n,
                r => panic!("closed after {:?}: {r:?}", started.elapsed()),
            }
            assert!(ends.try_recv().is_err(), "the writer ended");
        }
        // It read much less than the writer would have written unchecked: the writer waited.
        assert!(read < 64 << 20, "read {read} bytes");
    }
}
