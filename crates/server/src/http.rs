//! The server's optional HTTP listener (`http_listen`): the dashboard at `/` with its JSON API,
//! Prometheus `/metrics` (both behind the dashboard's credentials) and `/healthz`, which answers
//! `ok` to anyone so that liveness probes need no secret and learn nothing else.
//!
//! When the server has `[tls] cert` and `key`, this listener speaks HTTPS with the same
//! certificate as gRPC (rustls, TLS 1.2 and 1.3, HTTP/1.1), so the tokens, the session cookie
//! (then also `Secure`) and everything the dashboard shows never travel in clear. Both ways it
//! is served by axum-server, and bounded as the gRPC listener is ([`Limits`]): a connection
//! whose first request's headers have not arrived within `limits.greeting` of its accept (of
//! its TLS handshake over HTTPS, which has as long again) is closed — a silent one too, which
//! hyper's header timeout alone missed: it starts once the first byte chose HTTP/1 — and so is
//! one that keeps a later request's headers waiting as long, or a request's body
//! ([`body_in_time`]), and one whose socket has refused every byte sent to it for
//! `limits.write_stall` (a peer that reads nothing: pipelined requests or an event stream it
//! never drains) ([`Held`]): no connection stays open idle, trickling or unread, whoever sends
//! it; past `limits.max_connections` open at once a new connection is closed as soon as it is
//! accepted ([`Capped`]). It speaks HTTP/1.1 only (the ALPN it offers over TLS), so these bounds hold for
//! every connection: an HTTP/2 one (h2c by prior knowledge) could idle between requests with
//! none of them.
//!
//! Every response it sends, whatever route or refusal made it (a handler's error, the 404 of an
//! unknown path, `/healthz`), carries `X-Content-Type-Options: nosniff` ([`nosniff`], one layer
//! over the whole router): a refusal's text may repeat what the request said, and a browser
//! must never read it as a page or a script.

use crate::config::TlsConfig;
use axum_server::tls_rustls::RustlsConfig;
use hetsched_proto::listen::{ConnectionCap, Held, Limits};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// How long open connections (the dashboard's event streams) get to end once the server stops.
const DRAIN: Duration = Duration::from_secs(1);

/// The largest request body read ([`body_in_time`]): the API's bodies are small forms.
const MAX_BODY_BYTES: usize = 2 << 20;

/// Why the HTTP listener could not start.
#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    /// The address cannot be bound.
    #[error("cannot listen on {addr} for HTTP: {source}")]
    Listen {
        /// The address.
        addr: SocketAddr,
        /// The error.
        source: std::io::Error,
    },
    /// The certificate or key cannot be used.
    #[error("{}: {message}", path.display())]
    Tls {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        message: String,
    },
}

/// The bound HTTP listener and its router, ready to serve.
pub struct HttpServer {
    /// The bound address.
    pub addr: SocketAddr,
    listener: tokio::net::TcpListener,
    router: axum::Router,
    tls: Option<RustlsConfig>,
    limits: Limits,
}

/// The acceptor under TLS (if any) that gives each connection its place under the listener's
/// [`ConnectionCap`], or closes it at once when none is left.
#[derive(Clone)]
struct Capped {
    cap: Arc<ConnectionCap>,
    /// How long a connection's socket may refuse every byte before it is closed.
    write_stall: Duration,
    /// The listener, as the log names it.
    what: String,
}

impl<S> axum_server::accept::Accept<tokio::net::TcpStream, S> for Capped {
    type Stream = Held<tokio::net::TcpStream>;
    type Service = S;
    type Future = std::future::Ready<std::io::Result<(Self::Stream, S)>>;

    fn accept(&self, stream: tokio::net::TcpStream, service: S) -> Self::Future {
        let peer = stream.peer_addr().ok();
        std::future::ready(match self.cap.admit(peer) {
            Some(place) => {
                // A write is refused only while the peer reads nothing, not while the socket
                // holds megabytes it does read (see `hetsched_proto::listen`).
                hetsched_proto::listen::notsent_lowat(&stream);
                let held = Held::new(stream, place, self.write_stall, peer, &self.what);
                Ok((held, service))
            }
            // axum-server drops the stream: the connection is closed.
            None => Err(std::io::Error::other(
                "the listener's connections are at their cap",
            )),
        })
    }
}

/// `field` (`tls.cert`) for an error about `path`, with where a relative path is read from:
/// the server's working directory (`/` under the documented systemd unit), not the
/// configuration file's.
fn field_of(field: &str, path: &std::path::Path) -> String {
    if path.is_relative() {
        let cwd =
            std::env::current_dir().map_or_else(|_| "?".to_string(), |d| d.display().to_string());
        format!("{field} (relative: read from the working directory {cwd})")
    } else {
        field.to_string()
    }
}

/// The rustls configuration of `tls`'s certificate chain and key.
fn rustls_config(tls: &TlsConfig) -> Result<RustlsConfig, HttpError> {
    let bad = |path: &PathBuf, message: String| HttpError::Tls {
        path: path.clone(),
        message,
    };
    let certs = CertificateDer::pem_file_iter(&tls.cert)
        .and_then(|it| it.collect::<Result<Vec<_>, _>>())
        .map_err(|e| {
            bad(
                &tls.cert,
                format!(
                    "{}: cannot read the certificate chain: {e}",
                    field_of("tls.cert", &tls.cert)
                ),
            )
        })?;
    if certs.is_empty() {
        return Err(bad(
            &tls.cert,
            "tls.cert: no certificate in the file".into(),
        ));
    }
    if let Some(why) = refused_as_server_certificate(&certs) {
        return Err(bad(
            &tls.cert,
            format!("{}: {why}", field_of("tls.cert", &tls.cert)),
        ));
    }
    let key = PrivateKeyDer::from_pem_file(&tls.key).map_err(|e| {
        bad(
            &tls.key,
            format!(
                "{}: cannot read the private key: {e}",
                field_of("tls.key", &tls.key)
            ),
        )
    })?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| bad(&tls.cert, e.to_string()))?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| bad(&tls.key, format!("does not fit the certificate: {e}")))?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(RustlsConfig::from_config(Arc::new(config)))
}

/// Why every client and agent would refuse `chain`'s first certificate as a server's, found
/// before the server starts: a CA certificate (`basicConstraints CA:TRUE`, what `openssl req
/// -x509` makes by default) is no server certificate to rustls, which the CLI and the agents
/// use, so each connection would fail with `CaUsedAsEndEntity`. The certificate is checked by
/// rustls's own verifier against itself as the only root: its other findings (an issuer that
/// is not itself, a name) need the real CA and are not judged here.
fn refused_as_server_certificate(chain: &[CertificateDer<'static>]) -> Option<String> {
    let leaf = chain.first()?;
    let mut roots = rustls::RootCertStore::empty();
    // A certificate that is no trust anchor (not self-signed, say) cannot be the case here.
    roots.add(leaf.clone()).ok()?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier =
        rustls::client::WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider)
            .build()
            .ok()?;
    let name = rustls::pki_types::ServerName::try_from("localhost").ok()?;
    let now = rustls::pki_types::UnixTime::now();
    let refused = rustls::client::danger::ServerCertVerifier::verify_server_cert(
        verifier.as_ref(),
        leaf,
        &chain[1..],
        &name,
        &[],
        now,
    )
    .err()?;
    let rustls::Error::InvalidCertificate(rustls::CertificateError::Other(other)) = &refused else {
        return None;
    };
    matches!(
        other.0.downcast_ref::<webpki::Error>(),
        Some(webpki::Error::CaUsedAsEndEntity)
    )
    .then(|| {
        "the first certificate is a CA certificate (basicConstraints CA:TRUE), which clients \
         and agents refuse as a server's (rustls: CaUsedAsEndEntity): sign a server \
         certificate with that CA and give the CA to clients (`--ca`), or make a self-signed \
         certificate without CA:TRUE (docs/runtime.md, TLS, has the commands)"
            .to_string()
    })
}

/// Checks that `tls`'s certificate chain and key read and fit together, and that its
/// `agent_ca`, if any, holds a certificate, as a start would (`hetsched server --check`).
pub fn check_tls(tls: &TlsConfig) -> Result<(), HttpError> {
    rustls_config(tls)?;
    if let Some(ca) = &tls.agent_ca {
        let certs = CertificateDer::pem_file_iter(ca)
            .and_then(|it| it.collect::<Result<Vec<_>, _>>())
            .map_err(|e| HttpError::Tls {
                path: ca.clone(),
                message: format!(
                    "{}: cannot read the certificates: {e}",
                    field_of("tls.agent_ca", ca)
                ),
            })?;
        if certs.is_empty() {
            return Err(HttpError::Tls {
                path: ca.clone(),
                message: "tls.agent_ca: no certificate in the file".into(),
            });
        }
    }
    Ok(())
}

/// Binds `addr` (HTTPS with `tls`'s certificate when given) with `GET /healthz` (`ok`), its
/// connections bounded by `limits`.
pub async fn bind(
    addr: SocketAddr,
    tls: Option<&TlsConfig>,
    limits: Limits,
) -> Result<HttpServer, HttpError> {
    let tls = tls.map(rustls_config).transpose()?;
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| HttpError::Listen { addr, source })?;
    let bound = listener
        .local_addr()
        .map_err(|source| HttpError::Listen { addr, source })?;
    let router = axum::Router::new().route("/healthz", axum::routing::get(|| async { "ok" }));
    Ok(HttpServer {
        addr: bound,
        listener,
        router,
        tls,
        limits,
    })
}

/// Marks `response` `X-Content-Type-Options: nosniff`: the browser takes its `Content-Type` as
/// said (a `text/plain` refusal that quotes the request is never sniffed into HTML or script).
async fn nosniff(mut response: axum::response::Response) -> axum::response::Response {
    response.headers_mut().insert(
        axum::http::header::X_CONTENT_TYPE_OPTIONS,
        axum::http::HeaderValue::from_static("nosniff"),
    );
    response
}

/// Reads a request's body whole within `limit` of its headers, before any handler sees it, or
/// answers `408 Request Timeout` and closes the connection (its body unread): a client that
/// sends `Content-Length: 100000` and then a byte a second held its connection, and a place
/// under the cap, for a day. A body over [`MAX_BODY_BYTES`] is refused `413`.
async fn body_in_time(
    limit: Duration,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    let (parts, body) = request.into_parts();
    match tokio::time::timeout(limit, axum::body::to_bytes(body, MAX_BODY_BYTES)).await {
        Ok(Ok(bytes)) => {
            next.run(axum::extract::Request::from_parts(parts, bytes.into()))
                .await
        }
        Ok(Err(e)) => (
            axum::http::StatusCode::PAYLOAD_TOO_LARGE,
            format!("the request's body: {e} (at most {MAX_BODY_BYTES} bytes)"),
        )
            .into_response(),
        Err(_) => (
            axum::http::StatusCode::REQUEST_TIMEOUT,
            [(axum::http::header::CONNECTION, "close")],
            format!(
                "the request's body did not arrive within {} s of its headers",
                limit.as_secs_f64()
            ),
        )
            .into_response(),
    }
}

impl HttpServer {
    /// Adds `routes` to the listener.
    pub fn with_routes(mut self, routes: axum::Router) -> Self {
        self.router = self.router.merge(routes);
        self
    }

    /// Whether it speaks HTTPS.
    pub fn is_tls(&self) -> bool {
        self.tls.is_some()
    }

    /// Serves until `shutdown` completes.
    pub async fn serve(
        self,
        shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
        let handle = axum_server::Handle::new();
        let stopper = handle.clone();
        tokio::spawn(async move {
            shutdown.await;
            stopper.graceful_shutdown(Some(DRAIN));
        });
        let what = format!("the HTTP listener {}", self.addr);
        let cap = Capped {
            cap: ConnectionCap::new(what.clone(), self.limits.max_connections),
            write_stall: self.limits.write_stall,
            what,
        };
        let greeting = self.limits.greeting;
        let listener = self.listener.into_std()?;
        // Over everything, the fallback (404) included.
        let service = self
            .router
            .layer(axum::middleware::from_fn(move |request, next| {
                body_in_time(greeting, request, next)
            }))
            .layer(axum::middleware::map_response(nosniff))
            .into_make_service();
        // hyper's own header timeout starts only once HTTP/1 is chosen, which the protocol
        // detection before it does at the first byte, so alone it never closed a connection
        // that sends nothing; it still bounds the headers of a kept-alive connection's later
        // requests. The first request's timeout starts at the accept (after the handshake
        // over HTTPS) and covers the detection.
        match self.tls {
            Some(tls) => {
                let acceptor = axum_server::tls_rustls::RustlsAcceptor::new(tls)
                    .handshake_timeout(greeting)
                    .acceptor(cap);
                let mut server = axum_server::from_tcp(listener)?
                    .http1_only()
                    .acceptor(acceptor)
                    .handle(handle)
                    .first_request_timeout(greeting);
                server.http_builder().http1().header_read_timeout(greeting);
                server.serve(service).await
            }
            None => {
                let mut server = axum_server::from_tcp(listener)?
                    .http1_only()
                    .acceptor(cap)
                    .handle(handle)
                    .first_request_timeout(greeting);
                server.http_builder().http1().header_read_timeout(greeting);
                server.serve(service).await
            }
        }
    }
}
