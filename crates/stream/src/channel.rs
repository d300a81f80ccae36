//! The byte channel under a connection between workers: plain TCP, or TLS 1.3 over it when the
//! cluster runs TLS ([`crate::WorkerConfig::encrypt`]), so that tuples, acks and executor state
//! never cross the network in clear there.
//!
//! TLS gives the channel confidentiality and integrity; who is at the other end is proved by the
//! worker key's handshake ([`crate::auth`]), whose proofs cover the TLS session's exporter value
//! (RFC 8446 §7.5). A party in the middle that ended TLS on each side would hold two sessions
//! with two exporter values, and neither side's proof would check on the other. So no
//! certificate authority is needed: each worker serves a throw-away self-signed certificate
//! made when it starts, and the connecting side accepts any certificate while still checking
//! the handshake's signature with it.

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, PrivatePkcs8KeyDer, ServerName, UnixTime};
use rustls::{
    ClientConnection, DigitallySignedStruct, ServerConnection, SignatureScheme, StreamOwned,
};
use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::time::Instant;

/// The exporter label of the value the worker key's proofs cover.
const EXPORTER_LABEL: &[u8] = b"EXPORTER-hetsched-stream-worker-key";
/// The name in the throw-away certificates (never checked: see the module's text).
const NAME: &str = "hetsched-stream-worker";

/// What binds the worker key's proofs to one channel: the TLS exporter value, or zeros for plain
/// TCP (nothing to bind to).
pub type Binding = [u8; 32];

/// The TLS side of a worker: its server configuration (with its throw-away certificate) and the
/// client configuration it connects to other workers with.
#[derive(Debug, Clone)]
pub struct Tls {
    server: Arc<rustls::ServerConfig>,
    client: Arc<rustls::ClientConfig>,
}

fn tls_error(e: impl std::fmt::Display) -> io::Error {
    io::Error::other(format!("TLS: {e}"))
}

impl Tls {
    /// A fresh throw-away certificate and the two configurations, TLS 1.3 only.
    pub fn new() -> io::Result<Tls> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let made = rcgen::generate_simple_self_signed(vec![NAME.to_string()]).map_err(tls_error)?;
        let cert: CertificateDer<'static> = made.cert.der().clone();
        let key = PrivatePkcs8KeyDer::from(made.signing_key.serialize_der());
        let mut server = rustls::ServerConfig::builder_with_provider(provider.clone())
            .with_protocol_versions(&[&rustls::version::TLS13])
            .map_err(tls_error)?
            .with_no_client_auth()
            .with_single_cert(vec![cert], key.into())
            .map_err(tls_error)?;
        // The connecting side only writes after the handshake: nothing it would have to read.
        server.send_tls13_tickets = 0;
        let client = rustls::ClientConfig::builder_with_provider(provider.clone())
            .with_protocol_versions(&[&rustls::version::TLS13])
            .map_err(tls_error)?
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AnyCertificate(provider)))
            .with_no_client_auth();
        Ok(Tls {
            server: Arc::new(server),
            client: Arc::new(client),
        })
    }
}

/// Accepts any certificate — the worker key's proofs, bound to the session, authenticate the
/// peer — but checks that the peer holds the certificate's key.
#[derive(Debug)]
struct AnyCertificate(Arc<CryptoProvider>);

impl ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// The TCP connection under a [`Conn`], with an optional deadline for every read and write.
///
/// A socket's read timeout bounds one read, not a handshake: a peer that sends a byte now and
/// then (a TLS record, or the worker key's hello, a byte at a time) would hold its handshake
/// slot for minutes. Before each read or write the socket's timeout is cut to what is left
/// until the deadline, under TLS's reads as under the frames' own.
#[derive(Debug)]
pub struct Sock {
    tcp: TcpStream,
    deadline: Option<Instant>,
}

impl Sock {
    /// Sets the socket's timeout (`set`) to what is left until the deadline, if there is one.
    fn arm(
        &self,
        set: fn(&TcpStream, Option<std::time::Duration>) -> io::Result<()>,
    ) -> io::Result<()> {
        let Some(d) = self.deadline else {
            return Ok(());
        };
        let left = d.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the handshake took too long",
            ));
        }
        set(&self.tcp, Some(left))
    }
}

impl Read for Sock {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.arm(TcpStream::set_read_timeout)?;
        self.tcp.read(buf)
    }
}

impl Write for Sock {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.arm(TcpStream::set_write_timeout)?;
        self.tcp.write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.tcp.flush()
    }
}

/// One connection between workers.
#[derive(Debug)]
pub enum Conn {
    /// Plain TCP.
    Plain(Sock),
    /// TLS, this worker connecting.
    Client(Box<StreamOwned<ClientConnection, Sock>>),
    /// TLS, this worker accepting.
    Server(Box<StreamOwned<ServerConnection, Sock>>),
}

impl Conn {
    /// The connecting side over `s`: TLS with `tls`, else plain. The TLS handshake runs with
    /// the first read or write.
    pub fn connecting(tls: Option<&Tls>, s: TcpStream) -> io::Result<Conn> {
        let s = Sock {
            tcp: s,
            deadline: None,
        };
        let Some(tls) = tls else {
            return Ok(Conn::Plain(s));
        };
        let name = ServerName::try_from(NAME).map_err(tls_error)?;
        let c = ClientConnection::new(tls.client.clone(), name).map_err(tls_error)?;
        Ok(Conn::Client(Box::new(StreamOwned::new(c, s))))
    }

    /// The accepting side over `s`: TLS with `tls`, else plain.
    pub fn accepting(tls: Option<&Tls>, s: TcpStream) -> io::Result<Conn> {
        let s = Sock {
            tcp: s,
            deadline: None,
        };
        let Some(tls) = tls else {
            return Ok(Conn::Plain(s));
        };
        let c = ServerConnection::new(tls.server.clone()).map_err(tls_error)?;
        Ok(Conn::Server(Box::new(StreamOwned::new(c, s))))
    }

    /// The TCP connection under it (for time-outs).
    pub fn tcp(&self) -> &TcpStream {
        match self {
            Conn::Plain(s) => &s.tcp,
            Conn::Client(t) => &t.get_ref().tcp,
            Conn::Server(t) => &t.get_ref().tcp,
        }
    }

    /// Every read and write from now on fails with `TimedOut` once `deadline` has passed
    /// (the handshake's, [`Sock`]); `None` lifts it and clears the socket's timeouts.
    pub fn set_deadline(&mut self, deadline: Option<Instant>) -> io::Result<()> {
        let sock = match self {
            Conn::Plain(s) => s,
            Conn::Client(t) => t.get_mut(),
            Conn::Server(t) => t.get_mut(),
        };
        sock.deadline = deadline;
        if deadline.is_none() {
            sock.tcp.set_read_timeout(None)?;
            sock.tcp.set_write_timeout(None)?;
        }
        Ok(())
    }

    /// The value the worker key's proofs cover on this channel (once its TLS handshake is
    /// done: after the first frame either way).
    pub fn binding(&self) -> io::Result<Binding> {
        let exported = match self {
            Conn::Plain(_) => return Ok([0; 32]),
            Conn::Client(t) => t.conn.export_keying_material([0; 32], EXPORTER_LABEL, None),
            Conn::Server(t) => t.conn.export_keying_material([0; 32], EXPORTER_LABEL, None),
        };
        exported.map_err(tls_error)
    }
}

impl Read for Conn {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Conn::Plain(s) => s.read(buf),
            Conn::Client(t) => t.read(buf),
            Conn::Server(t) => t.read(buf),
        }
    }
}

impl Write for Conn {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Conn::Plain(s) => s.write(buf),
            Conn::Client(t) => t.write(buf),
            Conn::Server(t) => t.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Conn::Plain(s) => s.flush(),
            Conn::Client(t) => t.flush(),
            Conn::Server(t) => t.flush(),
        }
    }
}
