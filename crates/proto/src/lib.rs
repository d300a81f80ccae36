//! hetsched's wire protocol: the gRPC services between the server, its agents and clients, compiled
//! from `proto/hetsched.proto` by protox at build time. This is the only crate that knows protobuf;
//! the server and agent convert to and from the core's types at their edges.
//!
//! Also holds the authentication convention shared by every party: the server's token travels as
//! `authorization: Bearer <token>` metadata ([`AUTH_HEADER`], [`bearer`], read back by
//! [`bearer_token`] wherever a token is checked); the accepting side of the gRPC listeners
//! ([`listen`]: greeting deadline, connection cap, TLS); and the one rule of
//! tickets ([`ticket`]: offloads, workflow data fetches, log reads and PCDDB allocation
//! grants), which the server signs and the agent that serves the call verifies.

#[allow(missing_docs, clippy::all)]
mod generated {
    tonic::include_proto!("hetsched.v1");
}

pub use generated::*;

pub mod listen;
pub mod ticket;

/// The longest the server holds an agent's call open while the agent is idle (`AwaitWork`, and
/// `NextChunk` / `SyncWorkers` asked to be held): the agent calls again at once, so an idle agent
/// costs the server one call of each per hold. The open call is the agent's sign of life and the
/// kernel's TCP keepalive ends it if the agent's host vanishes, so the hold can be long; it
/// still bounds what keepalive cannot see (a relay between the two that hangs while its own
/// host answers the probes).
pub const MAX_HOLD: std::time::Duration = std::time::Duration::from_secs(300);

/// Largest page of a task's output one `ReadLog` call returns.
pub const LOG_MAX_PAGE: u32 = 1 << 20;

/// Metadata on an agent's `NotFound` for a task's output it does not hold: what its records
/// say of the attempt, so that the server, which asks every agent for an earlier attempt
/// (it records only the latest attempt's node), says what is true. [`LOG_RAN_HERE`]: the
/// attempt ran on this node and its files are gone; [`LOG_NOT_RUN_HERE`]: the node holds the
/// job's directory but never ran the attempt. None: the node holds nothing of this job.
pub const LOG_ABSENT_HEADER: &str = "x-hetsched-output-absent";
/// [`LOG_ABSENT_HEADER`]: the attempt ran here; its output was removed since.
pub const LOG_RAN_HERE: &str = "ran-here";
/// [`LOG_ABSENT_HEADER`]: the job's directory is here, but the attempt never ran here.
pub const LOG_NOT_RUN_HERE: &str = "not-run-here";

/// Most output one divisible chunk may send the server (`ChunkDone`), 4 GiB: chunk outputs are
/// stored in the server's data directory, beside its store, so one chunk printing without end
/// must not fill that disk. A chunk past it fails, saying so.
pub const MAX_CHUNK_OUTPUT: u64 = 4 << 30;

/// Most job ids one `PurgedJobs` call may ask about (an agent with more asks in several calls).
pub const MAX_PURGED_JOBS_ASKED: usize = 10_000;

/// The most workflow jobs a heartbeat's `holds_outputs_of` lists (an agent lists its newest
/// first) and a server reads: a bound on what one beat costs the server, far above the
/// workflows one cluster runs at once.
pub const MAX_HELD_OUTPUT_JOBS: usize = 4096;

/// The page size of a `ReadLog` call that does not say (`limit = 0`).
pub const LOG_DEFAULT_PAGE: u32 = 64 << 10;

/// How an agent's result message begins when its own clean shutdown (a signal, `hetsched node
/// stop`, its `--time-limit`) killed the attempt, which the result marks `interrupted`. The
/// server reads it to tell such an interruption, an operator's act that does not count against
/// `max_attempts`, from the others (an offload an ANode refused or broke), which count as a
/// lost attempt: `interrupted` alone does not say which.
pub const SHUTDOWN_KILLED: &str = "killed: its agent shut down";

/// Reads one page of an output file as `ReadLog` defines it: at most `limit` bytes (0 =
/// [`LOG_DEFAULT_PAGE`], capped at [`LOG_MAX_PAGE`]) from `offset`, or, for a negative
/// `offset`, from that many bytes before the end. Returns the data, where it starts, and the
/// file's size. The one paging rule of the agents' listeners and the server's own files.
pub fn log_page(
    file: &mut std::fs::File,
    offset: i64,
    limit: u32,
) -> std::io::Result<(Vec<u8>, u64, u64)> {
    use std::io::{Read, Seek, SeekFrom};
    let limit = u64::from(match limit {
        0 => LOG_DEFAULT_PAGE,
        n => n.min(LOG_MAX_PAGE),
    });
    let size = file.metadata()?.len();
    let start = if offset < 0 {
        size.saturating_sub(offset.unsigned_abs())
    } else {
        (offset as u64).min(size)
    };
    file.seek(SeekFrom::Start(start))?;
    let mut data = Vec::with_capacity(limit.min(size - start) as usize);
    file.take(limit).read_to_end(&mut data)?;
    Ok((data, start, size))
}

/// The metadata key that carries the token.
pub const AUTH_HEADER: &str = "authorization";

/// The metadata value for `token`.
pub fn bearer(token: &str) -> String {
    format!("Bearer {token}")
}

/// The token of an `authorization` value of the Bearer scheme, whatever the case the scheme is
/// written in (`Bearer`, `bearer`, `BEARER`: RFC 7235 §2.1 makes it case-insensitive, and
/// clients differ) and with spaces around the value and between the scheme and the token;
/// `None` for another scheme or no token. The one reading of the header: the server's gRPC
/// token check, its HTTP listener and the agents' listeners all call it, so a value one
/// accepts the others do.
pub fn bearer_token(value: &str) -> Option<&str> {
    let (scheme, token) = value.trim().split_once(' ')?;
    let token = token.trim_start();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

/// A client-side interceptor that adds the token to every call.
#[derive(Clone)]
pub struct TokenInterceptor {
    value: tonic::metadata::MetadataValue<tonic::metadata::Ascii>,
}

impl TokenInterceptor {
    /// An interceptor sending `token`; fails if the token is not valid ASCII metadata.
    pub fn new(token: &str) -> Result<Self, tonic::metadata::errors::InvalidMetadataValue> {
        Ok(Self {
            value: bearer(token).parse()?,
        })
    }
}

impl tonic::service::Interceptor for TokenInterceptor {
    fn call(&mut self, mut req: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        req.metadata_mut().insert(AUTH_HEADER, self.value.clone());
        Ok(req)
    }
}

/// After this long without traffic a client's kernel probes the server (TCP keepalive) …
pub const CLIENT_KEEPALIVE_IDLE: std::time::Duration = std::time::Duration::from_secs(20);
/// … every this long, and closes the connection when this many probes went unanswered: a server
/// host that vanished (no FIN, no RST) is given up about 35 s after the last traffic. The probes
/// wake no process. The idle time is under an idle agent's 60 s beat, so an agent that only
/// holds its calls open notices before its next beat would find the connection dead.
pub const CLIENT_KEEPALIVE_INTERVAL: std::time::Duration = std::time::Duration::from_secs(5);
/// See [`CLIENT_KEEPALIVE_INTERVAL`].
pub const CLIENT_KEEPALIVE_PROBES: u32 = 3;

/// An endpoint for `url` (`http://host:port`, or `https://…` with `ca_pem`, the PEM certificate
/// of the authority that signed the server's certificate). Connects lazily and reconnects by
/// itself, so a caller survives a server restart; the kernel's TCP keepalive closes a connection
/// to a vanished host, so the caller reconnects instead of waiting on it.
pub fn endpoint(
    url: &str,
    ca_pem: Option<&[u8]>,
) -> Result<tonic::transport::Endpoint, tonic::transport::Error> {
    let mut ep = tonic::transport::Endpoint::from_shared(url.to_string())?
        .connect_timeout(std::time::Duration::from_secs(5))
        .tcp_nodelay(true)
        .tcp_keepalive(Some(CLIENT_KEEPALIVE_IDLE))
        .tcp_keepalive_interval(Some(CLIENT_KEEPALIVE_INTERVAL))
        .tcp_keepalive_retries(Some(CLIENT_KEEPALIVE_PROBES));
    if let Some(ca) = ca_pem {
        ep = ep.tls_config(
            tonic::transport::ClientTlsConfig::new()
                .ca_certificate(tonic::transport::Certificate::from_pem(ca)),
        )?;
    }
    Ok(ep)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The scheme in any case, spaces around; another scheme, no token or no space are refused.
    #[test]
    fn a_bearer_token_is_read_whatever_the_schemes_case_and_the_spaces_around() {
        for value in ["Bearer t0k", "bearer t0k", "BEARER t0k", "  Bearer   t0k  "] {
            assert_eq!(bearer_token(value), Some("t0k"), "{value:?}");
        }
        assert_eq!(bearer_token(&bearer("abc")), Some("abc"));
        for value in ["Basic t0k", "Bearer", "Bearer   ", "t0k", "Bearert0k", ""] {
            assert_eq!(bearer_token(value), None, "{value:?}");
        }
    }
}
