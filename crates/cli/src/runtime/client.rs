//! The client commands: connect with the token, call the server, print a table or JSON.

use super::human::{TIMED_OUT_STATUS, shown};
use super::select::Selected;
use super::{ClientArgs, Output};
use anyhow::{Context, bail};
use comfy_table::{Table, presets::UTF8_FULL_CONDENSED};
use hetsched_core::text::{agree, count};
use hetsched_proto as pb;
use hetsched_proto::client_client::ClientClient;
use std::path::PathBuf;
use std::time::{Duration, Instant};
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;

/// A connected client.
pub type Api = ClientClient<InterceptedService<Channel, pb::TokenInterceptor>>;

/// Connects to the server named in `args` with its token.
pub async fn connect(args: &ClientArgs) -> anyhow::Result<Api> {
    let (server, token, ca) = client_setup(args)?;
    connect_with(&server, &token, ca.as_deref()).await
}

/// What a connection needs from here, read and checked without the network: the server's URL,
/// the token and the CA certificate, if any. A mistake here (a token file that cannot be read,
/// an `https://` URL without `--ca`) is final: retrying cannot mend it.
fn client_setup(args: &ClientArgs) -> anyhow::Result<(String, String, Option<Vec<u8>>)> {
    let token = args.token()?;
    let server = args.url();
    super::serve::check_tls(&server, args.ca.is_some())?;
    if server.starts_with("https://") && args.ca.is_none() {
        bail!(
            "the server URL `{server}` is https://: give the CA certificate that signed the \
             server's certificate (--ca FILE or HETSCHED_CA)"
        );
    }
    let ca = match &args.ca {
        Some(p) => {
            let pem = std::fs::read(p).with_context(|| format!("reading {}", p.display()))?;
            if !String::from_utf8_lossy(&pem).contains("-----BEGIN CERTIFICATE-----") {
                bail!(
                    "--ca {}: holds no PEM certificate (`-----BEGIN CERTIFICATE-----`)",
                    p.display()
                );
            }
            Some(pem)
        }
        None => None,
    };
    Ok((server, token, ca))
}

/// The server the command connected to first (a client command talks to one), for
/// [`diagnose`].
static CONNECTED: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// Connects to `server` with `token`.
pub async fn connect_with(server: &str, token: &str, ca: Option<&[u8]>) -> anyhow::Result<Api> {
    let _ = CONNECTED.set(server.to_string());
    let channel = match pb::endpoint(server, ca)?.connect().await {
        Ok(c) => c,
        Err(e) if super::human::refused_connection(&e) => {
            return Err(anyhow::Error::new(e).context(super::human::Exit {
                status: super::human::UNAVAILABLE_STATUS,
                message: super::human::start_hint(server),
            }));
        }
        Err(e) if certificate_refused(&e).is_some() => {
            // Final, as a wrong scheme is: the same certificate is refused on every try.
            let why = certificate_refused(&e).unwrap_or_default();
            return Err(anyhow::Error::new(e).context(super::human::Exit {
                status: super::human::PROTOCOL_STATUS,
                message: format!(
                    "connecting to {server}: the server's certificate is refused: {why}"
                ),
            }));
        }
        Err(e) => {
            // TLS to a plain server: rustls reads its HTTP/2 bytes as a corrupt TLS record.
            let plain =
                server.starts_with("https://") && hetsched_agent::probe::answered_in_plain(&e);
            if plain {
                return Err(anyhow::Error::new(e).context(super::human::Exit {
                    status: super::human::PROTOCOL_STATUS,
                    message: format!(
                        "connecting to {server}: the server does not speak TLS; use an http:// \
                         URL (without --ca)"
                    ),
                }));
            }
            return Err(anyhow::Error::new(e).context(super::human::Exit {
                status: super::human::UNAVAILABLE_STATUS,
                message: format!("connecting to {server}"),
            }));
        }
    };
    Ok(ClientClient::with_interceptor(
        channel,
        pb::TokenInterceptor::new(token)?,
    ))
}

/// Why the server's certificate was refused, when that is why a connection failed (rustls's
/// verdict, somewhere in the error's chain of causes; an I/O error carries it inside), in
/// words that say what to change.
fn certificate_refused(error: &(dyn std::error::Error + 'static)) -> Option<String> {
    use rustls::CertificateError as C;
    let mut cause = Some(error);
    while let Some(c) = cause {
        let tls = c.downcast_ref::<rustls::Error>().or_else(|| {
            c.downcast_ref::<std::io::Error>()
                .and_then(|io| io.get_ref())
                .and_then(|inner| inner.downcast_ref::<rustls::Error>())
        });
        if let Some(rustls::Error::InvalidCertificate(why)) = tls {
            return Some(match why {
                C::Other(o)
                    if matches!(
                        o.0.downcast_ref::<webpki::Error>(),
                        Some(webpki::Error::CaUsedAsEndEntity)
                    ) =>
                {
                    "it is a CA certificate (basicConstraints CA:TRUE), not a server's: the \
                     server's [tls] cert must be one signed by the CA given with --ca (or a \
                     self-signed one without CA:TRUE; docs/runtime.md, TLS)"
                        .into()
                }
                C::UnknownIssuer => "it is not signed by the CA given with --ca".into(),
                C::NotValidForName | C::NotValidForNameContext { .. } => format!(
                    "it is not for the host name in the URL ({why}): use a name or address \
                     its subjectAltName lists"
                ),
                other => other.to_string(),
            });
        }
        cause = c.source();
    }
    None
}

/// A server error as users read it: the message alone where the server wrote it for people (it
/// names file, line and field), else what went wrong in words — never a gRPC code's name.
pub fn refused(s: tonic::Status) -> anyhow::Error {
    // Escaped: an older or hostile server's message could hold a terminal escape.
    let message = super::human::shown(s.message().trim());
    let message = message.as_ref();
    // The server's own words, when it sent some, after ours.
    let with = |what: &str| {
        if message.is_empty() {
            what.to_string()
        } else {
            format!("{what}: {message}")
        }
    };
    let said = |what: &str| anyhow::anyhow!("{}", with(what));
    // A script tells these from a refused request (1) by their exit status.
    let exit = |status: u8, what: &str| {
        anyhow::Error::new(super::human::Exit {
            status,
            message: with(what),
        })
    };
    match s.code() {
        // A job id that never was (a purged one is said so by the server): where the ids are.
        tonic::Code::NotFound
            if message
                .strip_prefix("no job ")
                .is_some_and(|id| !id.is_empty() && id.bytes().all(|b| b.is_ascii_digit())) =>
        {
            anyhow::anyhow!("{message} (`hetsched jobs` lists the jobs there are)")
        }
        tonic::Code::InvalidArgument
        | tonic::Code::NotFound
        | tonic::Code::AlreadyExists
        | tonic::Code::FailedPrecondition
        | tonic::Code::OutOfRange
            if !message.is_empty() =>
        {
            anyhow::anyhow!("{message}")
        }
        tonic::Code::Unauthenticated => exit(
            super::human::NO_PERMISSION_STATUS,
            "the server refused the token",
        ),
        tonic::Code::PermissionDenied => exit(
            super::human::NO_PERMISSION_STATUS,
            "the server refused this call",
        ),
        // Plain HTTP/2 to a TLS port: the server drops the connection before any answer, or
        // answers with a TLS alert, which is no HTTP/2 (`h2 protocol error`: another protocol,
        // whatever it is). A dropped connection may also be a server that died mid-call:
        // [`diagnose`] asks the address whether it speaks TLS.
        code if code == tonic::Code::Cancelled
            || code == tonic::Code::Unknown
            || message.contains("h2 protocol error") =>
        {
            let what = format!(
                "{}; if the server uses TLS, use an https:// URL with --ca",
                with("the call ended without an answer")
            );
            if message.contains("h2 protocol error") {
                anyhow::Error::new(super::human::Exit {
                    status: super::human::PROTOCOL_STATUS,
                    message: what,
                })
            } else {
                anyhow::Error::new(NoAnswer(what))
            }
        }
        // Something else listens there: an agent's log or accelerator port, or another program
        // speaking gRPC; or a server older than this client.
        tonic::Code::Unimplemented => exit(
            super::human::PROTOCOL_STATUS,
            "the server does not offer this call: is --server (HETSCHED_SERVER) the address of a \
             hetsched server (DATA_DIR/address), not of an agent or another program, and is the \
             server as new as this client (`hetsched --version` here, `hetsched user whoami` says \
             the server's)?",
        ),
        tonic::Code::Unavailable => exit(
            super::human::UNAVAILABLE_STATUS,
            "the server is unavailable",
        ),
        tonic::Code::DeadlineExceeded => exit(
            super::human::UNAVAILABLE_STATUS,
            "the server did not answer in time",
        ),
        tonic::Code::ResourceExhausted => {
            said("the server refused this call over one of its bounds")
        }
        tonic::Code::Aborted => said("the server aborted the call; try it again"),
        tonic::Code::Internal | tonic::Code::DataLoss => said("the server failed"),
        _ => said("the server refused this call"),
    }
}

/// A call that ended without an answer ([`refused`]'s words), which [`diagnose`] looks into.
#[derive(Debug)]
struct NoAnswer(String);

impl std::fmt::Display for NoAnswer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for NoAnswer {}

/// A client command's failure, diagnosed further where the network can tell more: a call that
/// ended without an answer (or with one in another protocol) from a server reached over
/// `http://` that in fact speaks TLS — it drops the connection or answers with a TLS alert, at
/// random — is a protocol mismatch ([`super::human::PROTOCOL_STATUS`]), said so with what to
/// change.
pub async fn diagnose(e: anyhow::Error) -> anyhow::Error {
    let Some(url) = CONNECTED.get() else {
        return e;
    };
    let unanswered = e.chain().any(|c| c.is::<NoAnswer>())
        || super::human::exit_status(&e) == Some(super::human::PROTOCOL_STATUS);
    if unanswered && speaks_tls(url).await {
        return anyhow::Error::new(super::human::Exit {
            status: super::human::PROTOCOL_STATUS,
            message: format!(
                "the server at {url} speaks TLS: use an https:// URL with --ca (--server or \
                 HETSCHED_SERVER)"
            ),
        });
    }
    e
}

pub(super) fn json<T: serde::Serialize>(value: &T) -> anyhow::Result<()> {
    println!("{}", serde_json::to_string_pretty(value)?);
    Ok(())
}

/// One JSON document on one line (JSON Lines): what `submit --wait` and `resubmit --wait`
/// print, the submission as soon as it is taken (a script learns the job's id while it runs)
/// and then the job as it ended, each a line that `jq` or a line reader takes alone.
fn json_line<T: serde::Serialize>(value: &T) -> anyhow::Result<()> {
    println!("{}", serde_json::to_string(value)?);
    Ok(())
}

pub(super) fn table(header: &[&str]) -> Table {
    let mut t = Table::new();
    t.load_preset(UTF8_FULL_CONDENSED);
    t.set_header(header.iter().copied());
    t
}

fn span(start: u64, end: u64) -> String {
    if start == 0 || end < start {
        "-".into()
    } else {
        super::human::duration(Duration::from_nanos(end - start))
    }
}

fn counts(c: &Option<pb::TaskCounts>) -> pb::TaskCounts {
    (*c).unwrap_or_default()
}

/// How long a command that finds the server unreachable at its start goes on trying by default
/// (`submit` sending its submission, `wait` its first look): a minute, which a restart fits in,
/// so a script's `hetsched submit …; hetsched wait last` outlives a restart between the two.
/// `wait` rides out ten once the server answered it (`SERVER_GONE_LIMIT`), but a command that
/// blocks a script for that long while nothing has ever answered is more likely given a wrong
/// address. `HETSCHED_SUBMIT_RETRY_FOR` sets it (`0s`: one try); the name is older than `wait`'s
/// use of it.
const RETRY_FOR: Duration = Duration::from_secs(60);

/// The time a command retries an unreachable server at its start: `HETSCHED_SUBMIT_RETRY_FOR`
/// if set, else [`RETRY_FOR`].
fn retry_for() -> anyhow::Result<Duration> {
    match std::env::var("HETSCHED_SUBMIT_RETRY_FOR") {
        Ok(v) => super::duration_flag(&v)
            .map(Duration::from)
            .map_err(|e| anyhow::anyhow!("HETSCHED_SUBMIT_RETRY_FOR: {e}")),
        Err(_) => Ok(RETRY_FOR),
    }
}

/// The tries of a command at a server that does not answer (yet), shared by `submit` and
/// `wait`'s start so that both say and bound it alike: for [`retry_for`] (or less, `cap`), with
/// backoff (0.2 s, 0.4 s, … at most 3 s between tries), each pause said on stderr.
struct Retries {
    start: Instant,
    limit: Duration,
    /// What set `limit`, for the give-up message.
    set_by: String,
    delay: Duration,
    tries: u32,
    /// Whether the current try is the last: the next would start past `limit`.
    last: bool,
}

impl Retries {
    fn new(cap: Option<Duration>) -> anyhow::Result<Retries> {
        let limit = retry_for()?;
        let (limit, set_by) = match cap {
            Some(cap) if cap < limit => (
                cap,
                format!("--timeout {}", humantime::format_duration(cap)),
            ),
            _ => (limit, format!("HETSCHED_SUBMIT_RETRY_FOR: {limit:?}")),
        };
        Ok(Retries {
            start: Instant::now(),
            limit,
            set_by,
            delay: Duration::from_millis(200),
            tries: 0,
            last: false,
        })
    }

    /// Starts a try; whether it is the last.
    fn next(&mut self) -> bool {
        self.tries += 1;
        self.last = self.start.elapsed() + self.delay > self.limit;
        self.last
    }

    /// Says why this try failed (`warning: WHY; retrying in D HOW`) and waits before the next.
    async fn pause(&mut self, why: &str, how: &str) {
        eprintln!("warning: {why}; retrying in {:?}{how}", self.delay);
        tokio::time::sleep(self.delay).await;
        self.delay = (self.delay * 2).min(Duration::from_secs(3));
    }

    /// The last try's failure `e`, saying how long it was tried and what bounded that.
    fn gave_up(&self, e: anyhow::Error) -> anyhow::Error {
        e.context(format!(
            "gave up after {} tr{} in {:.1} s ({})",
            self.tries,
            if self.tries == 1 { "y" } else { "ies" },
            self.start.elapsed().as_secs_f64(),
            self.set_by
        ))
    }

    /// Connects to `server`, trying again while the time lasts; a mistake that another try
    /// cannot mend (a server that does not speak TLS does not learn to) fails at once. The
    /// give-up keeps the connection's exit status (69, naming the server).
    async fn connect(
        &mut self,
        server: &str,
        token: &str,
        ca: Option<&[u8]>,
    ) -> anyhow::Result<Api> {
        loop {
            let last = self.next();
            match connect_with(server, token, ca).await {
                Ok(api) => return Ok(api),
                Err(e) if last => return Err(self.gave_up(e)),
                Err(e) if super::human::exit_status(&e) == Some(super::human::PROTOCOL_STATUS) => {
                    return Err(e);
                }
                Err(e) => self.pause(&super::human::error_chain(&e), "").await,
            }
        }
    }
}

/// Connects as [`connect`], but a server that does not answer at the start (not running yet,
/// restarting) is tried again as `submit` tries it ([`Retries`]), at most `cap` (`wait
/// --timeout`): for `wait`, which a script runs right after a `submit` that may have ridden out
/// the same restart.
pub async fn connect_retrying(args: &ClientArgs, cap: Option<Duration>) -> anyhow::Result<Api> {
    let (server, token, ca) = client_setup(args)?;
    Retries::new(cap)?
        .connect(&server, &token, ca.as_deref())
        .await
}

/// A fresh submission key: 128 random bits in hex.
pub fn new_submission_key() -> String {
    format!("{:032x}", rand::random::<u128>())
}

/// How long `wait` (and `submit --wait`) waits for a server that stopped answering mid-wait to
/// come back before it gives up: a restart takes seconds.
const SERVER_GONE_LIMIT: Duration = Duration::from_secs(600);

/// Whether a failed call may have failed before or after the server acted, so that sending it
/// again (with the same submission key) is the way to find out.
fn retryable(s: &tonic::Status) -> bool {
    matches!(
        s.code(),
        tonic::Code::Unavailable
            | tonic::Code::Unknown
            | tonic::Code::DeadlineExceeded
            | tonic::Code::Aborted
    )
}

use hetsched_agent::probe::speaks_tls;

/// Whether the server connected to ([`CONNECTED`]) is reached over `http://` but speaks TLS: a
/// call that got no answer then never will, and [`diagnose`] says what to change.
async fn plain_to_tls() -> bool {
    match CONNECTED.get() {
        Some(url) if url.starts_with("http://") => speaks_tls(url).await,
        _ => false,
    }
}

/// The most bytes the server decodes in one gRPC message: tonic's default decoding limit, which
/// the server's client service keeps (crates/server/src/service.rs sets no
/// `max_decoding_message_size`), so a submission past it was refused with gRPC's bare `decoded
/// message length too large`. A submission is one message: the job file and a divisible job's
/// input together.
pub(super) const MESSAGE_LIMIT: usize = 4 << 20;

/// The job file from `from` (named `what` in errors), read up to the server's bound on a job
/// file: a larger one (or `/dev/zero`) is refused without being read whole.
fn read_bounded(from: impl std::io::Read, what: &str) -> anyhow::Result<String> {
    let bound = hetsched_core::input::limits::MAX_JOB_FILE_BYTES as u64;
    let mut bytes = Vec::new();
    std::io::Read::read_to_end(&mut std::io::Read::take(from, bound + 1), &mut bytes)
        .with_context(|| format!("reading {what}"))?;
    if bytes.len() as u64 > bound {
        bail!("{what}: a job file is at most {bound} bytes (2 MiB)");
    }
    String::from_utf8(bytes).map_err(|e| anyhow::anyhow!("{what}: not UTF-8 text ({e})"))
}

/// Submits with `key`, retrying on transport errors and `Unavailable` (bounded, with backoff):
/// the key makes a repeated submission return the job the first one stored.
pub async fn submit_with_retries(
    args: &ClientArgs,
    req: pb::SubmitRequest,
) -> anyhow::Result<(Api, pb::SubmitReply)> {
    // Local mistakes fail at once; only the network is retried.
    let (server, token, ca) = client_setup(args)?;
    let mut retries = Retries::new(None)?;
    loop {
        let mut api = retries.connect(&server, &token, ca.as_deref()).await?;
        let last = retries.last;
        match api.submit(req.clone()).await {
            Ok(r) => return Ok((api, r.into_inner())),
            Err(s)
                if retryable(&s)
                    && args.url().starts_with("http://")
                    && speaks_tls(&args.url()).await =>
            {
                return Err(anyhow::Error::new(super::human::Exit {
                    status: super::human::PROTOCOL_STATUS,
                    message: format!(
                        "the server at {} speaks TLS: use an https:// URL with --ca ({}: {})",
                        args.url(),
                        s.code(),
                        shown(s.message())
                    ),
                }));
            }
            Err(s) if retryable(&s) && !last => {
                let why = format!(
                    "submission got no answer ({}: {})",
                    s.code(),
                    shown(s.message())
                );
                retries.pause(&why, " with the same key").await;
            }
            Err(s) => return Err(refused(s)),
        }
    }
}

/// A job as the commands that take one name it: its id, `last` — the newest job the server
/// lists (as HyperQueue's `last`), so `hetsched wait last` follows a `submit` without its id —
/// or `name:NAME`, a job by its name (`submit --name`; for one job, the newest of that name; in
/// `--after` lists, every job of that name).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum JobRef {
    /// This job id.
    Id(u64),
    /// The newest job.
    Last,
    /// The jobs of this name.
    Name(String),
}

impl std::str::FromStr for JobRef {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        if s == "last" {
            return Ok(JobRef::Last);
        }
        if let Some(name) = s.strip_prefix("name:") {
            if name.is_empty() {
                return Err("`name:` names no job: give the name, as `name:prepare`".into());
            }
            return Ok(JobRef::Name(name.to_string()));
        }
        s.parse()
            .map(JobRef::Id)
            .map_err(|_| format!("`{s}` is not a job id (a number), `name:NAME` or `last`"))
    }
}

impl JobRef {
    /// The job id: as given, the newest job's, or the newest job's of the name (one paged
    /// `ListJobs`, only for `last` and `name:`). A name none of the caller's jobs has names the
    /// newest job of that name another user has, as its id would: `job`, `tasks` and `job
    /// --graph` show anyone's job, and `log`, `output` and `resubmit` of it are refused by the
    /// server as not the caller's (exit 77), not as unknown.
    pub async fn resolve(self, args: &ClientArgs) -> anyhow::Result<u64> {
        if let JobRef::Name(name) = &self {
            let own = super::select::listed(args).await?;
            if let Some(id) = own.iter().filter(|j| &j.name == name).map(|j| j.id).max() {
                return Ok(id);
            }
            let everyone = super::select::listed_by_everyone(args).await?;
            return everyone
                .iter()
                .filter(|j| &j.name == name)
                .map(|j| j.id)
                .max()
                .ok_or_else(|| {
                    anyhow::anyhow!("`name:{name}`: the server lists no job named `{name}`")
                });
        }
        let ids = self.clone().resolve_all(args).await?;
        ids.into_iter()
            .max()
            .ok_or_else(|| anyhow::anyhow!("no job"))
    }

    /// The job ids it names: the id, the newest job's, or every job of the caller's of the name
    /// (as `--after name:prepare` waits for every job named so); an error names what matched
    /// nothing, and other users' jobs of the name by id (a dependency on another user's job is
    /// taken by its id, never picked by a name the caller may not know is shared).
    pub async fn resolve_all(self, args: &ClientArgs) -> anyhow::Result<Vec<u64>> {
        let listed = match &self {
            JobRef::Id(id) => return Ok(vec![*id]),
            JobRef::Last | JobRef::Name(_) => super::select::listed(args).await?,
        };
        match self {
            JobRef::Name(name) => {
                let ids: Vec<u64> = listed
                    .iter()
                    .filter(|j| j.name == name)
                    .map(|j| j.id)
                    .collect();
                if !ids.is_empty() {
                    return Ok(ids);
                }
                let theirs: Vec<u64> = super::select::listed_by_everyone(args)
                    .await?
                    .iter()
                    .filter(|j| j.name == name)
                    .map(|j| j.id)
                    .collect();
                if theirs.is_empty() {
                    anyhow::bail!("`name:{name}`: the server lists no job named `{name}`");
                }
                anyhow::bail!(
                    "`name:{name}`: the server lists no job of yours named `{name}` ({}: name \
                     another user's job by its id to wait for it)",
                    super::select::not_yours_ids(&theirs)
                )
            }
            _ => {
                let newest = listed.iter().map(|j| j.id).max();
                Ok(vec![newest.ok_or_else(|| {
                    anyhow::anyhow!("`last`: the server lists no job")
                })?])
            }
        }
    }
}

/// What `hetsched submit` sends: a job file, or a job written on the command line.
pub enum JobSource {
    /// `hetsched submit FILE`.
    File(PathBuf),
    /// `hetsched submit [OPTIONS] -- COMMAND…`, already built and checked.
    Command(super::command_job::CommandJob),
}

/// What a submission's tasks wait for before they run: the jobs it runs after (`--after`,
/// `--after-any`), and a `release` when it is submitted held (`--hold`).
#[derive(Debug, Default)]
pub struct After {
    /// Once each has completed.
    pub completed: Vec<u64>,
    /// Once each has ended, however.
    pub ended: Vec<u64>,
    /// Once each has ended failed or cancelled.
    pub failed: Vec<u64>,
    /// Each task once their tasks of the same index succeeded (`--after-corr`).
    pub corresponding: Vec<u64>,
    /// Once every unfinished job of its name ended (`--singleton`).
    pub singleton: bool,
    /// Once each has started (`--after-start`).
    pub started: Vec<u64>,
    /// Until `hetsched release`.
    pub release: bool,
    /// Not before this time (ms since the Unix epoch; `submit --begin`).
    pub begin_ms: Option<u64>,
}

/// `hetsched submit`.
pub async fn submit(
    args: &ClientArgs,
    source: JobSource,
    wait_for_it: bool,
    key: Option<String>,
    name: Option<String>,
    after: After,
) -> anyhow::Result<()> {
    let workdir = std::env::current_dir()?.display().to_string();
    let held = after.release;
    let begin_ms = after.begin_ms;
    let (origin, text, divisible_input, name) = match &source {
        // `-`: the job file on standard input (a script that writes its jobs).
        JobSource::File(file) if file.as_os_str() == "-" => {
            let text = read_bounded(std::io::stdin(), "standard input")?;
            let origin = PathBuf::from("<stdin>");
            let input = super::divisible::read_input(&origin, &text)?;
            (
                origin.display().to_string(),
                text,
                input,
                name.unwrap_or_default(),
            )
        }
        JobSource::File(file) => {
            let opened =
                std::fs::File::open(file).with_context(|| format!("reading {}", file.display()))?;
            let text = read_bounded(opened, &file.display().to_string())?;
            let input = super::divisible::read_input(file, &text)?;
            (
                file.display().to_string(),
                text,
                input,
                name.unwrap_or_default(),
            )
        }
        // The job's name is in the generated text.
        JobSource::Command(job) => (
            super::command_job::ORIGIN.to_string(),
            job.text.clone(),
            Vec::new(),
            String::new(),
        ),
    };
    // A job's commands: `{word}`s the agents will not replace (the server checks the rest).
    for warning in super::placeholders::for_file(&origin, &text) {
        eprintln!("{warning}");
    }
    let request = pb::SubmitRequest {
        origin,
        text,
        workdir,
        submission_key: key.unwrap_or_else(new_submission_key),
        name,
        divisible_input,
        after: after.completed,
        after_any: after.ended,
        after_notok: after.failed,
        after_corr: after.corresponding,
        singleton: after.singleton,
        after_start: after.started,
        hold: held,
        begin_ms: after.begin_ms.unwrap_or(0),
    };
    // Said here, naming what made it large: the server would answer only gRPC's `decoded
    // message length too large`, and retrying cannot shrink it.
    let size = prost::Message::encoded_len(&request);
    if size > MESSAGE_LIMIT {
        let file = PathBuf::from(&request.origin);
        return Err(
            super::divisible::submission_too_large(&file, &request.text, size).unwrap_or_else(
                || {
                    anyhow::anyhow!(
                        "{}: the submission is {size} bytes; the server takes at most \
                         {MESSAGE_LIMIT} bytes ({}) in one",
                        request.origin,
                        bytesize::ByteSize(MESSAGE_LIMIT as u64)
                    )
                },
            ),
        );
    }
    let submitted = submit_with_retries(args, request).await;
    let (mut api, reply) = match (submitted, &source) {
        (Ok(done), _) => done,
        // The server's checks against its nodes name the generated text's lines: say the flags.
        // Its exit status kept (an unreachable server's, a refused token's).
        (Err(e), JobSource::Command(job)) => {
            let message =
                super::command_job::relocate(&super::human::error_chain(&e), job.requires);
            return Err(match super::human::exit_status(&e) {
                Some(status) => anyhow::Error::new(super::human::Exit { status, message }),
                None => anyhow::anyhow!("{message}"),
            });
        }
        (Err(e), JobSource::File(_)) => return Err(e),
    };
    match args.output {
        Output::Json if wait_for_it => json_line(&reply)?,
        Output::Json => json(&reply)?,
        Output::Table if reply.existing => println!(
            "job {} was already submitted with this key ({})",
            reply.job_id,
            submitted_size(&reply)
        ),
        Output::Table | Output::Dot => {
            println!(
                "job {} submitted ({}){}",
                reply.job_id,
                submitted_size(&reply),
                if held {
                    format!(", held: `hetsched release {}` lets it run", reply.job_id)
                } else if let Some(b) = begin_ms.filter(|&b| b > super::begin::now_ms()) {
                    format!(", deferred: begins {}", super::begin::describe(b))
                } else {
                    String::new()
                }
            );
            // (`--wait` says it as it waits.)
            if !reply.blocked_reason.is_empty() && !wait_for_it {
                eprintln!(
                    "warning: job {} waits: {}",
                    reply.job_id,
                    shown(&reply.blocked_reason)
                );
            }
        }
    }
    if wait_for_it {
        let looker = api.clone();
        let waiting = wait_on(&mut api, args.output, reply.job_id, None, true);
        unless_interrupted(looker, &[reply.job_id], waiting).await?;
    }
    Ok(())
}

/// `hetsched resubmit JOB --failed [--wait]`.
pub async fn resubmit(
    args: &ClientArgs,
    id: u64,
    failed: bool,
    cancelled: bool,
    wait_for_it: bool,
) -> anyhow::Result<()> {
    let mut api = connect(args).await?;
    let reply = api
        .resubmit(pb::ResubmitRequest {
            job_id: id,
            failed,
            cancelled,
        })
        .await
        .map_err(refused)?
        .into_inner();
    let which = match (failed, cancelled) {
        (true, true) => "failed or cancelled",
        (false, true) => "cancelled",
        _ => "failed",
    };
    // With its `job_id`, as every command acting on a job answers.
    let mut value = serde_json::to_value(&reply)?;
    if let Some(o) = value.as_object_mut() {
        o.insert("job_id".into(), id.into());
    }
    match args.output {
        Output::Json if wait_for_it => json_line(&value)?,
        Output::Json => json(&value)?,
        Output::Table | Output::Dot => {
            println!(
                "job {id}: {} queued again",
                count(reply.tasks, &format!("{which} task"))
            );
            if reply.cancelled_again > 0 {
                println!(
                    "job {id}: {} cancelled again at once, as what it runs after (--after-corr) \
                     has not run again ({}): resubmit that job's failed or cancelled tasks first",
                    count(reply.cancelled_again, "task"),
                    shown(&reply.cancelled_again_why)
                );
            }
        }
    }
    if wait_for_it {
        let looker = api.clone();
        let waiting = wait_on(&mut api, args.output, id, None, true);
        unless_interrupted(looker, &[id], waiting).await?;
    }
    Ok(())
}

/// How many finished jobs `hetsched jobs` shows by default, the newest: HyperQueue's `job list`
/// and Slurm's `squeue` show running work only, and a long-lived server's finished jobs would
/// bury it.
const FINISHED_SHOWN: usize = 20;

/// Which jobs `hetsched jobs` lists.
pub struct JobsSelect<'a> {
    /// `--state`: any of these (none: every state).
    pub states: &'a [super::JobStateFilter],
    /// `--last N`: the newest N of those selected.
    pub last: Option<usize>,
    /// `--name`.
    pub name: Option<&'a str>,
    /// `--user`, `--mine`.
    pub owner: Option<&'a str>,
    /// `--all`: every finished job in the table too.
    pub all: bool,
}

/// `hetsched jobs`.
pub async fn jobs(args: &ClientArgs, select: JobsSelect<'_>) -> anyhow::Result<()> {
    let JobsSelect {
        states,
        last,
        name,
        owner,
        all: every,
    } = select;
    let mut api = connect(args).await?;
    let mut all = Vec::new();
    let mut cursor = 0;
    loop {
        let page = api
            .list_jobs(pb::ListJobsRequest {
                cursor,
                limit: PAGE,
                owner: owner.unwrap_or_default().to_string(),
                selectable: false,
            })
            .await
            .map_err(refused)?
            .into_inner();
        all.extend(
            page.jobs
                .into_iter()
                .filter(|j| states.is_empty() || states.iter().any(|s| s.selects(j)))
                .filter(|j| name.is_none_or(|n| j.name == n)),
        );
        if page.next_cursor == 0 {
            break;
        }
        cursor = page.next_cursor;
    }
    if let Some(n) = last {
        all.sort_by_key(|j| j.id);
        all.drain(..all.len().saturating_sub(n));
    }
    let reply = pb::ListJobsReply {
        jobs: all,
        next_cursor: 0,
    };
    if args.output == Output::Json {
        let jobs: Vec<_> = reply.jobs.iter().map(super::human::job_json).collect();
        return json(&jobs);
    }
    let mut reply = reply;
    // The table: every unfinished job and the newest finished ones, unless the user chose.
    let mut left_out = 0;
    if !every && states.is_empty() && last.is_none() && name.is_none() {
        let finished = reply.jobs.iter().filter(|j| !unfinished(j)).count();
        left_out = finished.saturating_sub(FINISHED_SHOWN);
        let mut older = left_out;
        // Listed oldest first: the first finished ones are the older.
        reply.jobs.retain(|j| {
            if older > 0 && !unfinished(j) {
                older -= 1;
                false
            } else {
                true
            }
        });
    }
    // Why pending tasks wait, where the state does not say it already (held; `waiting` does not
    // say for which job, so its reason shows): a column only when some job has such a reason.
    let reason = |j: &pb::JobInfo| {
        if j.held {
            String::new()
        } else if j.deferred && j.begin_ms > 0 {
            // As `submit` and `job` say it (the local date and time), not as the server's
            // reason does (RFC 3339, UTC).
            format!("begins {}", super::begin::describe(j.begin_ms))
        } else {
            j.pending_reason.clone()
        }
    };
    let reasons = reply.jobs.iter().any(|j| !reason(j).is_empty());
    // Whose each job is: a column once a user's job is listed (a server without users, or the
    // admin's jobs alone, read as before).
    let owners = reply
        .jobs
        .iter()
        .any(|j| !j.owner.is_empty() && j.owner != "admin");
    let mut header = vec!["job"];
    if owners {
        header.push("user");
    }
    // Its kind, so that batch jobs, workflows and divisible loads listed together are told
    // apart (`JobInfo.kind`, which the JSON has as `kind`).
    header.extend([
        "name",
        "kind",
        "state",
        "tasks",
        "pending",
        "running",
        "ok",
        "failed",
        "cancelled",
        "duration",
    ]);
    if reasons {
        header.push("pending because");
    }
    let mut t = table(&header);
    for j in &reply.jobs {
        let c = counts(&j.counts);
        let mut row = vec![j.id.to_string()];
        if owners {
            row.push(j.owner.clone());
        }
        row.extend([
            j.name.clone(),
            kind_of(j).to_string(),
            shown_state(j),
            j.tasks.to_string(),
            c.pending.to_string(),
            super::human::running(&c),
            c.succeeded.to_string(),
            c.failed.to_string(),
            c.cancelled.to_string(),
            span(j.submitted_ns, j.finished_ns),
        ]);
        if reasons {
            row.push(reason(j));
        }
        t.add_row(super::human::row(row));
    }
    println!("{t}");
    if left_out > 0 {
        println!(
            "{} not shown (`hetsched jobs --all` lists every job, `--state completed` those \
             that completed)",
            count(left_out as u64, "older finished job")
        );
    }
    Ok(())
}

/// A job's state as listings show it: `held`, `waiting` or `deferred` where its pending tasks
/// wait for that, and `running (held)` (…) where tasks of it run meanwhile.
fn shown_state(j: &pb::JobInfo) -> String {
    let why = if !unfinished(j) {
        // A job held (or waiting, deferred) that then ended keeps the flag on the server.
        return ended_state(j);
    } else if j.held {
        "held"
    } else if j.waiting {
        "waiting"
    } else if j.deferred {
        "deferred"
    } else {
        return j.state.clone();
    };
    if j.state == "running" {
        format!("running ({why})")
    } else {
        why.to_string()
    }
}

/// An ended job's state as listings and waits show it: `cancelled (stopping 3)` while the
/// processes of 3 of its stopped tasks may still run (their SIGTERM handlers), else its state.
fn ended_state(j: &pb::JobInfo) -> String {
    if j.stopping > 0 {
        format!("{} (stopping {})", j.state, j.stopping)
    } else {
        j.state.clone()
    }
}

/// Whether job `j` is over for a wait: it ended, and none of its stopped tasks' processes may
/// still run (`stopping`, Slurm's *completing*): a script after `wait` does not race a task's
/// SIGTERM handler.
pub(super) fn is_over(j: &pb::JobInfo) -> bool {
    is_final(&j.state) && j.stopping == 0
}

/// Whether job `j` is pending or running: only such a job is `held`, `waiting` or `deferred`
/// (the server keeps those flags on a job that ended meanwhile, as `hold` left them).
pub(super) fn unfinished(j: &pb::JobInfo) -> bool {
    matches!(j.state.as_str(), "pending" | "running")
}

/// `hetsched job ID`.
pub async fn job(args: &ClientArgs, id: u64) -> anyhow::Result<()> {
    let j = connect(args)
        .await?
        .get_job(pb::GetJobRequest {
            job_id: id,
            ..Default::default()
        })
        .await
        .map_err(refused)?
        .into_inner();
    if args.output == Output::Json {
        return json(&super::human::job_json(&j));
    }
    let c = counts(&j.counts);
    println!(
        "job {} ({}): {} — {}: {} pending, {} running{}, {} succeeded, {} failed, {} cancelled; {}",
        j.id,
        shown(&j.name),
        // As `hetsched jobs` shows it (`held`, `waiting`, `running (deferred)`…).
        shown_state(&j),
        count(j.tasks, work_noun(kind_of(&j))),
        c.pending,
        c.running,
        super::human::running_notes(&c),
        c.succeeded,
        c.failed,
        c.cancelled,
        if j.finished_ns > 0 {
            end_span(&j)
        } else {
            "not finished".into()
        }
    );
    if !j.owner.is_empty() && j.owner != "admin" {
        println!("user: {}", shown(&j.owner));
    }
    if let Some(line) = used_line(&j) {
        println!("{line}");
    }
    if j.begin_ms > 0 {
        let verb = match (j.deferred, unfinished(&j)) {
            (true, true) => "begins",
            // It ended (cancelled) before its begin time.
            (true, false) => "was to begin",
            (false, _) => "began",
        };
        println!("{verb}: {}", super::begin::describe(j.begin_ms));
    }
    if j.held && unfinished(&j) {
        println!(
            "held: its pending tasks wait for `hetsched release {}`",
            j.id
        );
    } else if !j.waiting && !j.deferred && !j.pending_reason.is_empty() {
        println!("pending because: {}", shown(&j.pending_reason));
    }
    if !j.after.is_empty()
        || !j.after_any.is_empty()
        || !j.after_notok.is_empty()
        || !j.after_corr.is_empty()
        || !j.after_start.is_empty()
    {
        let list = |ids: &[u64]| {
            ids.iter()
                .map(u64::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        };
        let mut parts = Vec::new();
        if !j.after.is_empty() {
            parts.push(format!(
                "job{} {} (once completed)",
                if j.after.len() > 1 { "s" } else { "" },
                list(&j.after)
            ));
        }
        if !j.after_any.is_empty() {
            parts.push(format!(
                "job{} {} (once ended, however)",
                if j.after_any.len() > 1 { "s" } else { "" },
                list(&j.after_any)
            ));
        }
        if !j.after_notok.is_empty() {
            parts.push(format!(
                "job{} {} (once failed or cancelled)",
                if j.after_notok.len() > 1 { "s" } else { "" },
                list(&j.after_notok)
            ));
        }
        if !j.after_start.is_empty() {
            parts.push(format!(
                "job{} {} (once started)",
                if j.after_start.len() > 1 { "s" } else { "" },
                list(&j.after_start)
            ));
        }
        if !j.after_corr.is_empty() {
            parts.push(format!(
                "job{} {} (each task once their task of its index succeeded)",
                if j.after_corr.len() > 1 { "s" } else { "" },
                list(&j.after_corr)
            ));
        }
        println!(
            "runs after {}{}",
            parts.join(" and "),
            if j.waiting { ": waiting" } else { "" }
        );
    }
    if let Some(d) = &j.divisible {
        super::divisible::print(d, &j.state, &counts(&j.counts));
        return Ok(());
    }
    if super::workflow::is_workflow(&j) {
        println!("{}", super::workflow::progress(&j));
        return Ok(());
    }
    let mut t = table(&[
        "app",
        "tasks",
        "ok",
        "failed",
        // Wall-clock time of a finished task per variant (its CPU time is `cpu time`).
        "mean run, cpu (ms)",
        "mean run, gpu (ms)",
        "cpu time",
        "max rss",
        "gpu mem",
        "per task",
        "requires",
        "priority",
        "max running",
        "time limit",
    ]);
    for a in &j.apps {
        let c = counts(&a.counts);
        let ms = |v: f64| {
            if v > 0.0 {
                format!("{v:.1}")
            } else {
                "-".into()
            }
        };
        t.add_row(super::human::row(vec![
            a.name.clone(),
            a.tasks.to_string(),
            c.succeeded.to_string(),
            c.failed.to_string(),
            ms(a.mean_cpu_ms),
            ms(a.mean_gpu_ms),
            super::human::measured_cpu_time(a.cpu_ms, a.max_rss_bytes),
            super::human::memory(a.max_rss_bytes),
            super::human::memory(a.max_gpu_memory_bytes),
            if a.nodes > 1 {
                format!("{} nodes", a.nodes)
            } else {
                super::human::per_task(
                    (a.cpu_cores, a.cpu_memory_bytes, 0),
                    (a.gpu_cores, a.gpu_memory_bytes, a.gpus),
                    &a.gpu_kind,
                )
            },
            if a.requires.is_empty() {
                "-".to_string()
            } else {
                a.requires.join(",")
            },
            a.priority.to_string(),
            if a.max_running == 0 {
                "-".to_string()
            } else {
                a.max_running.to_string()
            },
            super::human::time_limit(a.cpu_time_limit_ms, a.gpu_time_limit_ms),
        ]));
    }
    println!("{t}");
    // Where output goes, and pinning, for the applications that chose.
    for a in &j.apps {
        let goes = |what: &str, to: &str| match to {
            "none" => format!("{what} discarded"),
            path => format!("{what} to {path}"),
        };
        let mut said = Vec::new();
        match (a.stdout.as_str(), a.stderr.as_str()) {
            ("", "") => {}
            (out, err) if out == err => said.push(goes("stdout and stderr", out)),
            (out, err) => {
                for (stream, to) in [("stdout", out), ("stderr", err)] {
                    if !to.is_empty() {
                        said.push(goes(stream, to));
                    }
                }
            }
        }
        if a.pin {
            said.push("each task bound to CPUs of its own".into());
        }
        if a.nodes > 1 {
            said.push(format!(
                "each task holds {} whole nodes (HETSCHED_NODE_FILE)",
                a.nodes
            ));
        }
        if !said.is_empty() {
            println!("{}: {}", shown(&a.name), shown(&said.join("; ")));
        }
    }
    Ok(())
}

/// `hetsched tasks`.
/// Page size the list commands ask for.
const PAGE: u32 = 1000;

/// `hetsched tasks`: pages through the listing (the server holds its lock for one page at a
/// time), printing each page as it arrives: a table per page, or one JSON array streamed.
pub async fn tasks(
    args: &ClientArgs,
    job: Option<u64>,
    limit: Option<u64>,
    states: Vec<String>,
    nodes: Vec<String>,
) -> anyhow::Result<()> {
    use std::io::Write;
    let mut api = connect(args).await?;
    let mut cursor = 0;
    let mut shown = 0u64;
    let mut rows: Vec<pb::TaskInfo> = Vec::new();
    let out = std::io::stdout();
    let mut out = std::io::BufWriter::new(out.lock());
    // The JSON array opens once the first page is in: a refused call (no such job, a bad
    // state, a refused token) leaves standard output empty, not a lone `[`.
    let mut opened = false;
    // With a filter the server reads `limit` rows and keeps those that match: ask for whole
    // pages and stop at the limit here, or `--limit 1` would make a call per row scanned.
    let filtered = !states.is_empty() || !nodes.is_empty();
    loop {
        let left = limit.map_or(u64::MAX, |l| l.saturating_sub(shown));
        if left == 0 {
            break;
        }
        let want = if filtered {
            PAGE as u64
        } else {
            left.min(PAGE as u64)
        };
        let mut page = api
            .list_tasks(pb::ListTasksRequest {
                job_id: job.unwrap_or(0),
                cursor,
                limit: want as u32,
                states: states.clone(),
                nodes: nodes.clone(),
            })
            .await
            .map_err(refused)?
            .into_inner();
        page.tasks
            .truncate(usize::try_from(left).unwrap_or(usize::MAX));
        if args.output == Output::Json && !page.tasks.is_empty() {
            if !opened {
                write!(out, "[")?;
                opened = true;
            }
            for t in &page.tasks {
                if shown > 0 {
                    write!(out, ",")?;
                }
                write!(
                    out,
                    "\n{}",
                    serde_json::to_string(&super::human::task_json(t))?
                )?;
                shown += 1;
            }
        } else {
            shown += page.tasks.len() as u64;
            // A filtered page can hold a few matches only: rows are gathered into tables of a
            // page's size, not one table per page the server answered.
            rows.extend(page.tasks);
            if rows.len() >= PAGE as usize {
                writeln!(out, "{}", tasks_table(&rows))?;
                rows.clear();
            }
        }
        out.flush()?;
        if page.next_cursor == 0 {
            break;
        }
        cursor = page.next_cursor;
    }
    if !rows.is_empty() {
        writeln!(out, "{}", tasks_table(&rows))?;
    }
    out.flush()?;
    if shown == 0 && !nodes.is_empty() {
        // A name no node has matches nothing: say so rather than "no tasks match", which reads
        // as "none ran there" (a typo, or another cluster's node). Checked only when nothing
        // matched: a removed node is no longer listed, yet its tasks still name it.
        let known: Vec<String> = api
            .list_nodes(pb::ListNodesRequest { all: true })
            .await
            .map_err(refused)?
            .into_inner()
            .nodes
            .into_iter()
            .map(|n| n.name)
            .collect();
        let unknown: Vec<&str> = nodes
            .iter()
            .filter(|n| !known.contains(n))
            .map(String::as_str)
            .collect();
        if !unknown.is_empty() {
            let listed: Vec<String> = known.iter().map(|n| format!("`{n}`")).collect();
            bail!(
                "--node {}: no node is named so (the nodes: {})",
                unknown.join(","),
                if listed.is_empty() {
                    "none registered".to_string()
                } else {
                    listed.join(", ")
                }
            );
        }
    }
    if args.output == Output::Json {
        // Nothing matched: an empty array, once the node names are known to be nodes'.
        writeln!(out, "{}]", if opened { "\n" } else { "[" })?;
        out.flush()?;
        return Ok(());
    }
    if shown > 0 || limit == Some(0) {
        return Ok(());
    }
    if let Some(id) = job
        && let Ok(j) = api
            .get_job(pb::GetJobRequest {
                job_id: id,
                wait_ms: 0,
            })
            .await
        && j.get_ref().divisible.is_some()
    {
        // An empty table would say nothing: a divisible job's work is its chunks.
        eprintln!(
            "job {id} is a divisible job: it runs chunks, not tasks. `hetsched job {id}` shows \
             its rounds and workers (`--output json`: every chunk), `hetsched log {id} CHUNK` a \
             chunk's output"
        );
    } else {
        // Nothing printed would read like a hang or a fault: say what matched nothing (on
        // stderr, so that the output a script reads stays empty).
        let mut filters = Vec::new();
        if let Some(id) = job {
            filters.push(format!("job {id}"));
        }
        if !states.is_empty() {
            filters.push(format!("--state {}", states.join(",")));
        }
        if !nodes.is_empty() {
            filters.push(format!("--node {}", nodes.join(",")));
        }
        if filters.is_empty() {
            eprintln!("no tasks");
        } else {
            eprintln!("no tasks match {}", filters.join(", "));
        }
    }
    Ok(())
}

/// Prints tasks as a table.
pub fn print_tasks(tasks: &[pb::TaskInfo]) {
    println!("{}", tasks_table(tasks));
}

/// A task's attempt number, with how many of its attempts failed and were preempted:
/// `3 (1 failed, 1 preempted)`.
fn attempt_cell(x: &pb::TaskInfo) -> String {
    let notes: Vec<String> = [(x.failed_attempts, "failed"), (x.preemptions, "preempted")]
        .into_iter()
        .filter(|(n, _)| *n > 0)
        .map(|(n, what)| format!("{n} {what}"))
        .collect();
    if notes.is_empty() {
        x.attempt.to_string()
    } else {
        format!("{} ({})", x.attempt, notes.join(", "))
    }
}

/// A task's state, with why its latest attempt ended without success when there is a reason:
/// `failed (time_limit)`, `failed (signal SEGV)`, `pending (preempted)` (the JSON's `reason`
/// and `signal`).
fn state_cell(x: &pb::TaskInfo) -> String {
    if x.fetching {
        // Running on its node, its inputs still being fetched: its program has not started.
        return "fetching".into();
    }
    match (x.reason.as_str(), x.signal.as_str()) {
        ("", _) => x.state.clone(),
        ("signal", signal) if !signal.is_empty() => format!("{} (signal {signal})", x.state),
        (reason, _) => format!("{} ({reason})", x.state),
    }
}

fn tasks_table(tasks: &[pb::TaskInfo]) -> Table {
    let mut t = table(&[
        "task", "job", "app", "index", "state", "attempt", "node", "variant", "devices", "fetch",
        "run time", "cpu", "max rss", "gpu mem", "message", "output",
    ]);
    for x in tasks {
        t.add_row(super::human::row(vec![
            x.id.to_string(),
            x.job_id.to_string(),
            x.app.clone(),
            x.index.to_string(),
            state_cell(x),
            attempt_cell(x),
            // A multi-node task: its first node, and how many more it holds.
            match x.nodes.len() {
                0 | 1 => x.node.clone(),
                n => format!("{} (+{})", x.node, n - 1),
            },
            x.variant.clone(),
            x.devices
                .iter()
                .map(u32::to_string)
                .collect::<Vec<_>>()
                .join(","),
            // How long a workflow instance's inputs took to fetch before its program started
            // (0: none, or not known yet while it still fetches).
            match x.fetch_ms {
                0 => "-".into(),
                ms => super::human::duration(Duration::from_millis(ms)),
            },
            if x.finished_ns > 0 {
                span(x.started_ns, x.finished_ns)
            } else if x.queued {
                // Sent to its node, waiting in the agent's queue (`prefetch`).
                "queued".into()
            } else if x.state == "running" {
                // So far (Slurm's `squeue` TIME), by this machine's clock.
                span(
                    x.started_ns,
                    super::begin::now_ms().saturating_mul(1_000_000),
                )
            } else {
                "-".into()
            },
            x.usage.map_or("-".into(), |u| {
                // A measured 0 ms (a sleeping task) is shown as such.
                super::human::duration(Duration::from_millis(
                    u.cpu_user_ms.saturating_add(u.cpu_system_ms),
                ))
            }),
            x.usage
                .map_or("-".into(), |u| super::human::memory(u.max_rss_bytes)),
            // Peak GPU memory: `-` when not measured (a CPU task, a node without NVML).
            x.usage
                .map_or("-".into(), |u| super::human::memory(u.max_gpu_memory_bytes)),
            x.message.clone(),
            x.output.clone(),
        ]));
    }
    t
}

/// `job N`'s `used:` line: what the job's tasks used, as `sacct` sums it (CPU time, the largest
/// peak resident memory, and the largest peak GPU memory when any task's was measured); `None`
/// while nothing was measured.
fn used_line(j: &pb::JobInfo) -> Option<String> {
    if j.cpu_ms == 0 && j.max_rss_bytes == 0 && j.max_gpu_memory_bytes == 0 {
        return None;
    }
    let gpu = match j.max_gpu_memory_bytes {
        0 => String::new(),
        b => format!(", max gpu memory {}", super::human::memory(b)),
    };
    Some(format!(
        "used: cpu time {}, max rss {}{gpu} (its tasks' latest attempts)",
        super::human::measured_cpu_time(j.cpu_ms, j.max_rss_bytes),
        super::human::memory(j.max_rss_bytes)
    ))
}

/// `hetsched nodes [--all]`.
pub async fn nodes(
    args: &ClientArgs,
    all: bool,
    names: &[String],
    states: &[super::NodeStateFilter],
) -> anyhow::Result<()> {
    let mut reply = connect(args)
        .await?
        .list_nodes(pb::ListNodesRequest { all })
        .await
        .map_err(refused)?
        .into_inner();
    // Names and states select on this side: a node list is small.
    for name in names {
        if !reply.nodes.iter().any(|n| &n.name == name) {
            eprintln!(
                "warning: no node `{name}`{}",
                if all {
                    ""
                } else {
                    " (`--all` also lists those that left)"
                }
            );
        }
    }
    reply.nodes.retain(|n| {
        (names.is_empty() || names.contains(&n.name))
            && (states.is_empty() || states.iter().any(|s| s.selects(n)))
    });
    if args.output == Output::Json {
        let nodes: Vec<_> = reply.nodes.iter().map(super::human::node_json).collect();
        return json(&nodes);
    }
    let mut t = table(&[
        "node",
        "name",
        "alive",
        "cores",
        "free cores",
        "gpus",
        "free gpus",
        "running",
        "last seen",
        "time left",
        "disk read/s",
        "mem available",
        "disk free",
        "backed off",
        "rack",
        "attributes",
        "role",
        "binding",
        "queues r/p/w",
        // Always shown, not only when the nodes differ: a rolling upgrade that has reached no
        // agent yet lists equal versions that still differ from the server's.
        "version",
    ]);
    for n in &reply.nodes {
        t.add_row(super::human::row(vec![
            n.id.to_string(),
            n.name.clone(),
            if !n.left.is_empty() {
                format!("left ({})", n.left)
            } else if !n.alive && n.drained {
                // It comes back drained: say so beside its death.
                format!(
                    "DEAD, {}",
                    super::human::drained(&n.drain_reason, n.drained_since_ms)
                )
            } else if !n.out_of_bounds.is_empty() {
                // Not dead: the server keeps it out until its agent registers again.
                format!("no: stored {}", n.out_of_bounds)
            } else if let Some(ms) = n.returning_ms.filter(|_| !n.alive) {
                // Restored at a restart, its agent not back yet: not dead (yet).
                format!(
                    "not back since the server's restart (dead in {})",
                    super::human::duration(std::time::Duration::from_millis(ms))
                )
            } else if !n.alive {
                "DEAD".into()
            } else if n.draining {
                "shutting down".into()
            } else if n.stopping {
                "stopping (hetsched node stop)".into()
            } else if n.drained {
                super::human::drained(&n.drain_reason, n.drained_since_ms)
            } else if !n.held_for.is_empty() {
                format!("yes, held for {}", n.held_for)
            } else {
                "yes".into()
            },
            n.cores.to_string(),
            n.free_cores.to_string(),
            n.accelerators.len().to_string(),
            n.free_gpus.to_string(),
            if n.queued > 0 {
                // Of those, waiting in its agent's queue (`prefetch`).
                format!("{} ({} queued)", n.running, n.queued)
            } else {
                n.running.to_string()
            },
            // A dead node: when it was last heard, if the server knows (after a restart too).
            if n.alive || n.last_heard_ms > 0 {
                super::human::ago(Duration::from_millis(n.last_seen_ms))
            } else {
                "-".to_string()
            },
            // Until its agent stops its tasks (`--time-limit`); `-`: no end.
            match n.time_left_ms {
                Some(ms) if n.alive => super::human::duration(Duration::from_millis(ms)),
                _ => "-".to_string(),
            },
            format!("{:.1} MB/s", n.read_bytes_per_sec / 1e6),
            super::human::memory(n.available_memory_bytes),
            super::human::disk_free(n),
            if n.backed_off.is_empty() {
                "-".to_string()
            } else {
                n.backed_off
                    .iter()
                    .map(|b| {
                        format!(
                            "{} (job {}, {} start failures, {}s left)",
                            b.app,
                            b.job_id,
                            b.failures,
                            b.remaining_ms.div_ceil(1000)
                        )
                    })
                    .collect::<Vec<_>>()
                    .join("; ")
            },
            n.rack.clone(),
            if n.attributes.is_empty() {
                "-".to_string()
            } else {
                n.attributes.join(",")
            },
            super::accel_cli::role(n).to_string(),
            super::accel_cli::binding_cell(n),
            super::accel_cli::queues_cell(n),
            // `-`: an agent (or a server) that predates saying it.
            if n.version.is_empty() {
                "-".to_string()
            } else {
                n.version.clone()
            },
        ]));
    }
    println!("{t}");
    if let Some(w) = super::workflow::nodes(&reply) {
        println!("{w}");
    }
    Ok(())
}

/// `hetsched allocations`.
pub async fn allocations(args: &ClientArgs) -> anyhow::Result<()> {
    let reply = connect(args)
        .await?
        .list_allocations(pb::ListAllocationsRequest {})
        .await
        .map_err(refused)?
        .into_inner();
    if args.output == Output::Json {
        return json(&reply.queues);
    }
    if reply.queues.is_empty() {
        println!("no automatic allocation: the server's configuration has no [[allocation]] queue");
        return Ok(());
    }
    let mut t = table(&["queue", "allocation", "state", "agents"]);
    for q in &reply.queues {
        if q.allocations.is_empty() {
            t.add_row(super::human::row(vec![
                q.name.clone(),
                "-".into(),
                "-".into(),
                "-".into(),
            ]));
        }
        for a in &q.allocations {
            let agents = if a.agents.is_empty() {
                "-".to_string()
            } else {
                a.agents.join(", ")
            };
            t.add_row(super::human::row(vec![
                q.name.clone(),
                a.id.clone(),
                a.state.clone(),
                agents,
            ]));
        }
    }
    println!("{t}");
    for q in &reply.queues {
        println!(
            "{}{}: {}, {} for {} per allocation, at most {} at once, at most {} of them waiting{}; {} submitted since the server started",
            shown(&q.name),
            if q.paused {
                " (paused: `hetsched allocations --resume` it)"
            } else {
                ""
            },
            shown(&q.manager),
            count(q.nodes, "node"),
            super::human::duration(Duration::from_millis(q.time_limit_ms)),
            q.max_allocations,
            q.backlog,
            if q.attributes.is_empty() {
                String::new()
            } else {
                format!(", agents offer {}", shown(&q.attributes.join(",")))
            } + &if q.agent_cores == 0 {
                String::new()
            } else {
                format!(
                    ", agents of {} core{} and {}",
                    q.agent_cores,
                    if q.agent_cores == 1 { "" } else { "s" },
                    super::human::memory(q.agent_memory_bytes)
                )
            },
            q.submitted
        );
        if !q.error.is_empty() {
            println!(
                "{}: the batch system failed at the last look: {}",
                shown(&q.name),
                shown(&q.error)
            );
        }
    }
    Ok(())
}

/// `hetsched allocations --pause QUEUE` (`paused`) / `--resume QUEUE`.
pub async fn pause_allocations(
    args: &ClientArgs,
    queue: String,
    paused: bool,
) -> anyhow::Result<()> {
    let reply = connect(args)
        .await?
        .pause_allocations(pb::PauseAllocationsRequest {
            queue: queue.clone(),
            paused,
        })
        .await
        .map_err(refused)?
        .into_inner();
    if args.output == Output::Json {
        return json(&reply.queues);
    }
    if paused {
        println!(
            "queue `{queue}` paused: it submits no allocation until `hetsched allocations --resume {queue}` (those it has go on)"
        );
    } else {
        println!("queue `{queue}` resumed: it submits allocations while work waits");
    }
    Ok(())
}

/// `hetsched allocations --check [--queue NAME]`: fails (exit 1) when the batch system would not
/// take a queue's allocation.
pub async fn check_allocations(args: &ClientArgs, queue: String) -> anyhow::Result<()> {
    let reply = connect(args)
        .await?
        .check_allocations(pb::CheckAllocationsRequest { queue })
        .await
        .map_err(refused)?
        .into_inner();
    if args.output == Output::Json {
        json(&reply.checks)?;
    } else {
        for c in &reply.checks {
            let verdict = if c.ok { "ok" } else { "FAILED" };
            println!("{}: {verdict}: {}", shown(&c.queue), shown(&c.message));
        }
    }
    let failed: Vec<&str> = reply
        .checks
        .iter()
        .filter(|c| !c.ok)
        .map(|c| c.queue.as_str())
        .collect();
    if !failed.is_empty() {
        anyhow::bail!(
            "the batch system would not take an allocation of {}",
            failed.join(", ")
        );
    }
    Ok(())
}

/// The reply of a call that changed something: JSON with `--output json`, else the line `line`
/// writes for people.
pub(super) fn answer<T: serde::Serialize>(
    args: &ClientArgs,
    reply: &T,
    line: impl FnOnce(&T) -> String,
) -> anyhow::Result<()> {
    match args.output {
        Output::Json => json(reply),
        Output::Table | Output::Dot => {
            println!("{}", shown(&line(reply)));
            Ok(())
        }
    }
}

/// `hetsched node remove NAME…`: several in turn, a line each, as `node drain` does them.
pub async fn remove_node(args: &ClientArgs, names: &[String]) -> anyhow::Result<()> {
    let api = connect(args).await?;
    let remove = |name: &String| {
        let mut api = api.clone();
        let name = name.clone();
        async move {
            let r = api
                .remove_node(pb::RemoveNodeRequest { name: name.clone() })
                .await
                .map_err(refused)?
                .into_inner();
            let line = format!("node `{name}` (id {}) removed", r.node_id);
            Ok((serde_json::to_value(r)?, line))
        }
    };
    if let [name] = names {
        let (value, line) = remove(name).await?;
        return one_answer(args, "name", name.as_str(), value, &line);
    }
    each_in_turn(args, names, "name", "node", "removed", remove).await
}

/// `hetsched node drain NAME [--reason TEXT]` (`drain`) and `hetsched node resume NAME`.
/// Several nodes (`node drain a,b`) are drained in turn, a line each (`--output json`: an
/// array, each entry with `name`, and `error` for a refusal), going on past a refusal and failing
/// at the end naming the nodes not drained. Each node's JSON, one or several, has its `name`,
/// `drained` as it now stands and `was_drained` before, beside the counts of what runs there.
pub async fn drain_node(
    args: &ClientArgs,
    names: &[String],
    drain: bool,
    reason: &str,
) -> anyhow::Result<()> {
    let api = connect(args).await?;
    let act = |name: &String| {
        let mut api = api.clone();
        let name = name.clone();
        async move {
            let r = drain_one(&mut api, &name, drain, reason).await?;
            let line = drained_line(&name, drain, reason, &r);
            let mut value = serde_json::to_value(r)?;
            // What the node now is: drain and resume answered alike without it.
            if let Some(o) = value.as_object_mut() {
                o.insert("drained".into(), drain.into());
            }
            Ok((value, line))
        }
    };
    if let [name] = names {
        let (value, line) = act(name).await?;
        return one_answer(args, "name", name.as_str(), value, &line);
    }
    let done = if drain { "drained" } else { "resumed" };
    each_in_turn(args, names, "name", "node", done, act).await
}

/// `hetsched node stop NAME… [--drain]`: each node's agent is asked to shut down.
pub async fn stop_node(args: &ClientArgs, names: &[String], drain: bool) -> anyhow::Result<()> {
    let api = connect(args).await?;
    let stop = |name: &String| {
        let mut api = api.clone();
        let name = name.clone();
        async move {
            let r = api
                .stop_node(pb::StopNodeRequest {
                    name: name.clone(),
                    drain,
                })
                .await
                .map_err(refused)?
                .into_inner();
            let line = format!(
                "node `{name}`: its agent is asked to stop; {} {}",
                count(r.running, "running task"),
                match (drain, r.running == 1) {
                    (true, true) => "ends there first",
                    (true, false) => "end there first",
                    (false, true) => "is stopped and runs again elsewhere",
                    (false, false) => "are stopped and run again elsewhere",
                }
            );
            Ok((serde_json::to_value(r)?, line))
        }
    };
    if let [name] = names {
        let (value, line) = stop(name).await?;
        return one_answer(args, "name", name.as_str(), value, &line);
    }
    each_in_turn(args, names, "name", "node", "stopped", stop).await
}

async fn drain_one(
    api: &mut Api,
    name: &str,
    drain: bool,
    reason: &str,
) -> anyhow::Result<pb::DrainNodeReply> {
    Ok(api
        .drain_node(pb::DrainNodeRequest {
            name: name.to_string(),
            drain,
            reason: reason.to_string(),
        })
        .await
        .map_err(refused)?
        .into_inner())
}

/// What `node drain` or `node resume` says of one node.
fn drained_line(name: &str, drain: bool, reason: &str, r: &pb::DrainNodeReply) -> String {
    if !drain && !r.was_drained {
        return format!("node `{name}` was not drained: it takes new work, as before");
    }
    if !drain {
        return format!("node `{name}` resumed: it takes new work again");
    }
    // The server's kept reason (a drain again without one keeps the first); an older server
    // sends none: the one given.
    let kept = if r.reason.trim().is_empty() {
        reason.trim()
    } else {
        r.reason.trim()
    };
    let why = match kept {
        "" => String::new(),
        r => format!(" ({r})"),
    };
    let already = if r.was_drained { "already " } else { "" };
    let mut said = format!(
        "node `{name}` {already}drained{why}: no new work; {} {} there",
        count(r.running, "running task"),
        agree(r.running, "finishes", "finish")
    );
    if r.chunks > 0 {
        said += &format!(
            "; {} {} there",
            count(r.chunks, "divisible chunk"),
            agree(r.chunks, "finishes", "finish")
        );
    }
    if r.stream_workers > 0 {
        said += &format!(
            "; {} to other nodes (`hetsched topology show` lists the moves)",
            match r.stream_workers {
                1 => "1 stream worker moves".to_string(),
                n => format!("{n} stream workers move"),
            }
        );
    }
    said
}

/// `hetsched cancel`.
pub async fn cancel(
    args: &ClientArgs,
    sel: &Selected,
    tasks: Option<&str>,
    app: Option<&str>,
) -> anyhow::Result<()> {
    check_tasks(sel, tasks)?;
    let api = connect(args).await?;
    each_job(args, sel, "cancelled", |id| {
        let mut api = api.clone();
        async move {
            let r = api
                .cancel(pb::CancelRequest {
                    job_id: id,
                    indices: tasks.unwrap_or_default().to_string(),
                    app: app.unwrap_or_default().to_string(),
                })
                .await
                .map_err(refused)?
                .into_inner();
            let mut line = format!(
                "job {id}: {} cancelled",
                count(r.cancelled, work_noun(&r.kind))
            );
            if r.cancelled == 0 {
                // Nothing was left to cancel: say why, when the job had ended.
                if let Ok(j) = api
                    .get_job(pb::GetJobRequest {
                        job_id: id,
                        wait_ms: 0,
                    })
                    .await
                    && is_final(&j.get_ref().state)
                {
                    line = format!(
                        "job {id}: nothing to cancel, it had already ended ({})",
                        j.get_ref().state
                    );
                }
            }
            Ok((serde_json::to_value(r)?, line))
        }
    })
    .await
}

/// A `--tasks` list (of `cancel`, `signal`) names tasks of one job, in the syntax of
/// `indices`: refused here with the same words as the server would, without a round trip.
fn check_tasks(sel: &Selected, tasks: Option<&str>) -> anyhow::Result<()> {
    if let Some(t) = tasks {
        if sel.ids.len() != 1 {
            bail!(
                "--tasks names tasks of one job; {} jobs are selected",
                sel.ids.len()
            );
        }
        hetsched_core::input::workload::parse_indices(t)
            .map_err(|e| anyhow::anyhow!("--tasks: {e}"))?;
    }
    Ok(())
}

/// `hetsched signal`.
pub async fn signal(
    args: &ClientArgs,
    sel: &Selected,
    signal: &str,
    tasks: Option<&str>,
    app: Option<&str>,
) -> anyhow::Result<()> {
    // Refused here with the same words as the server would, without a round trip.
    let signal = hetsched_core::input::task_signal(signal).map_err(|e| anyhow::anyhow!(e))?;
    check_tasks(sel, tasks)?;
    let api = connect(args).await?;
    each_job(args, sel, "signalled", |id| {
        let mut api = api.clone();
        async move {
            let r = api
                .signal(pb::SignalRequest {
                    job_id: id,
                    signal: signal.to_string(),
                    indices: tasks.unwrap_or_default().to_string(),
                    app: app.unwrap_or_default().to_string(),
                })
                .await
                .map_err(refused)?
                .into_inner();
            let line = match (r.tasks, r.chunks) {
                (0, 0) => format!("job {id}: no running task to signal"),
                (0, n) => format!(
                    "job {id}: SIG{signal} sent to {} out to agents (each agent delivers it to \
                     the chunk it computes, at its next heartbeat)",
                    count(n, "chunk")
                ),
                (n, _) => format!(
                    "job {id}: SIG{signal} sent to {} (their agents deliver it at their next \
                     heartbeat)",
                    count(n, "running task")
                ),
            };
            Ok((serde_json::to_value(r)?, line))
        }
    })
    .await
}

/// `hetsched hold` (`hold`) and `hetsched release`.
pub async fn hold(args: &ClientArgs, sel: &Selected, hold: bool) -> anyhow::Result<()> {
    let api = connect(args).await?;
    let done = if hold { "held" } else { "released" };
    each_job(args, sel, done, |id| {
        let mut api = api.clone();
        async move {
            let r = api
                .hold(pb::HoldRequest { job_id: id, hold })
                .await
                .map_err(refused)?
                .into_inner();
            // Counted in the job's own words (a divisible job's units, a workflow's
            // instances): the reply does not say its kind, the job does. Before, a divisible
            // job's 200 units read `200 pending tasks released`.
            let kind = match api
                .get_job(pb::GetJobRequest {
                    job_id: id,
                    wait_ms: 0,
                })
                .await
            {
                Ok(j) => kind_of(j.get_ref()).to_string(),
                Err(_) => "batch".to_string(),
            };
            let noun = format!("pending {}", work_noun(&kind));
            let line = format!("job {id}: {} {done}", count(r.tasks, &noun));
            Ok((serde_json::to_value(r)?, line))
        }
    })
    .await
}

/// What `hetsched update` changes (`None`: unchanged).
pub struct Update {
    /// The application to change; empty: every application of the job.
    pub app: String,
    /// The new priority.
    pub priority: Option<i32>,
    /// The new max_running (0: no limit).
    pub max_running: Option<u32>,
    /// The new time limit of a task, ms (0: no limit).
    pub time_limit_ms: Option<u64>,
    /// The new cores of one task.
    pub cores: Option<u32>,
    /// The new memory of one task, bytes (0: none).
    pub memory_bytes: Option<u64>,
    /// The new devices of one task of the GPU variant.
    pub gpus: Option<u32>,
    /// The accelerator kind of the GPU variant's tasks (empty: any).
    pub gpu_kind: Option<String>,
    /// The variant whose cores and memory change (`cpu`, `gpu`; empty: every variant).
    pub variant: String,
    /// The node attributes its tasks require from now on, comma-separated (empty: none).
    pub requires: Option<String>,
    /// The job's new begin time, ms since the Unix epoch.
    pub begin_ms: Option<u64>,
}

/// `hetsched update`: each selected job's applications (or `update.app`) take the new
/// priority, max_running or time limit.
pub async fn update(args: &ClientArgs, sel: &Selected, update: &Update) -> anyhow::Result<()> {
    let api = connect(args).await?;
    each_job(args, sel, "updated", |id| {
        let mut api = api.clone();
        let req = pb::UpdateRequest {
            job_id: id,
            app: update.app.clone(),
            priority: update.priority,
            max_running: update.max_running,
            time_limit_ms: update.time_limit_ms,
            cores: update.cores,
            memory_bytes: update.memory_bytes,
            gpus: update.gpus,
            gpu_kind: update.gpu_kind.clone(),
            variant: update.variant.clone(),
            requires: update.requires.clone(),
            begin_ms: update.begin_ms,
        };
        let begin = update.begin_ms;
        let resources =
            update.cores.is_some() || update.memory_bytes.is_some() || update.gpus.is_some();
        let requires = update.requires.is_some();
        let gpu_kind = update.gpu_kind.is_some();
        async move {
            let r = api.update(req).await.map_err(refused)?.into_inner();
            let apps: Vec<String> = r
                .apps
                .iter()
                .map(|a| {
                    let cap = match a.max_running {
                        0 => "no max_running".to_string(),
                        m => format!("max_running {m}"),
                    };
                    let limit =
                        match super::human::time_limit(a.cpu_time_limit_ms, a.gpu_time_limit_ms)
                            .as_str()
                        {
                            "-" => "no time limit".to_string(),
                            l => format!("time limit {l}"),
                        };
                    let request = |v: &str, cores: u32, memory: u64, gpus: u32| {
                        let mut said = match (cores, memory) {
                            (0, _) => return None,
                            (c, 0) => format!("{v} {}", count(c, "core")),
                            (c, m) => {
                                format!("{v} {} {}", count(c, "core"), super::human::memory(m))
                            }
                        };
                        if gpus > 0 {
                            said.push_str(&format!(" {}", count(gpus, "GPU")));
                        }
                        Some(said)
                    };
                    let requests: Vec<String> = [
                        request("cpu", a.cpu_cores, a.cpu_memory_bytes, 0),
                        request("gpu", a.gpu_cores, a.gpu_memory_bytes, a.gpus),
                    ]
                    .into_iter()
                    .flatten()
                    .collect();
                    let mut line = format!("`{}` priority {}, {cap}, {limit}", a.name, a.priority);
                    // What one task holds, when the update changed it.
                    if resources {
                        line.push_str(&format!(", {}", requests.join(", ")));
                        if a.running_kept > 0 {
                            line.push_str(&format!(
                                " ({})",
                                match a.running_kept {
                                    1 => "1 running task keeps what it was given".to_string(),
                                    n => format!("{n} running tasks keep what they were given"),
                                }
                            ));
                        }
                    }
                    if gpu_kind {
                        match a.gpu_kind.as_str() {
                            "" => line.push_str(", GPUs of any kind"),
                            k => line.push_str(&format!(", GPUs of kind {k}")),
                        }
                    }
                    if requires {
                        match a.requires.as_slice() {
                            [] => line.push_str(", requires nothing"),
                            r => line.push_str(&format!(", requires {}", r.join(" + "))),
                        }
                    }
                    line
                })
                .collect();
            // (A workflow's update changes its begin time only: no applications.)
            let mut line = if apps.is_empty() {
                format!("job {id}")
            } else {
                format!("job {id}: {}", apps.join("; "))
            };
            if let Some(b) = begin {
                if b > super::begin::now_ms() {
                    line.push_str(&format!("; begins {}", super::begin::describe(b)));
                } else {
                    line.push_str("; its tasks may start now");
                }
            }
            // Kept, but no live node can run what it left pending: said as `submit` says it.
            if !r.warning.is_empty() {
                eprintln!("warning: job {id} waits: {}", shown(&r.warning));
            }
            let mut value = serde_json::to_value(&r)?;
            if r.warning.is_empty() {
                value["warning"] = serde_json::Value::Null;
            }
            Ok((value, line))
        }
    })
    .await
}

/// Runs `act` on each selected job in turn: one job named alone as before (its reply with its
/// `job_id`, or its error), a selection of several with a line (or a JSON array entry with `job_id`, and `error`
/// for a refusal) per job, going on past refusals and failing at the end if there was one. An
/// empty selection (`all` with nothing unfinished) says so and succeeds.
async fn each_job<F, Fut>(
    args: &ClientArgs,
    sel: &Selected,
    done: &str,
    act: F,
) -> anyhow::Result<()>
where
    F: Fn(u64) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<(serde_json::Value, String)>>,
{
    let ids = &sel.ids[..];
    if let ([id], false) = (ids, sel.many) {
        let (value, line) = act(*id).await?;
        return one_answer(args, "job_id", *id, value, &line);
    }
    if ids.is_empty() {
        return nothing_selected(args, sel, &format!("nothing {done}"));
    }
    each_in_turn(args, ids, "job_id", "job", done, |&id| act(id)).await
}

/// What a command acting on one job or node says: its reply `value` in JSON, with `key` =
/// `item` as each entry of several has it (unless the reply names it already), else its `line`.
fn one_answer(
    args: &ClientArgs,
    key: &str,
    item: impl Into<serde_json::Value>,
    mut value: serde_json::Value,
    line: &str,
) -> anyhow::Result<()> {
    if let Some(o) = value.as_object_mut() {
        o.entry(key).or_insert(item.into());
    }
    match args.output {
        Output::Json => json(&value),
        Output::Table | Output::Dot => {
            println!("{}", shown(line));
            Ok(())
        }
    }
}

/// Runs `act` on each of `items` (jobs, nodes) in turn, for a command given several: a line each
/// (`--output json`: an array of the replies, each with `key` = its item, and `error` for a
/// refusal), going on past refusals and failing at the end naming them (`1 of 2 jobs not
/// held: 99`). A refusal that does not name its item (`job 4`) is told with it.
async fn each_in_turn<T, F, Fut>(
    args: &ClientArgs,
    items: &[T],
    key: &str,
    noun: &str,
    done: &str,
    act: F,
) -> anyhow::Result<()>
where
    T: std::fmt::Display + Clone + Into<serde_json::Value>,
    F: Fn(&T) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<(serde_json::Value, String)>>,
{
    let (mut all, mut refused) = (Vec::new(), Vec::new());
    for item in items {
        match act(item).await {
            Ok((mut value, line)) => {
                if args.output != Output::Json {
                    println!("{}", shown(&line));
                }
                if let Some(o) = value.as_object_mut() {
                    o.insert(key.into(), item.clone().into());
                }
                all.push(value);
            }
            Err(e) => {
                let (said, line) = refusal(noun, item, &e);
                eprintln!("error: {}", shown(&line));
                let mut entry = serde_json::Map::new();
                entry.insert(key.into(), item.clone().into());
                entry.insert("error".into(), said.into());
                all.push(entry.into());
                refused.push(item.to_string());
            }
        }
    }
    if args.output == Output::Json {
        json(&all)?;
    }
    if !refused.is_empty() {
        bail!(
            "{} of {} not {done}: {}",
            refused.len(),
            count(items.len() as u64, noun),
            refused.join(", ")
        );
    }
    Ok(())
}

/// How [`each_in_turn`] tells that `item` was refused with `e`: the error with each cause once
/// (as `main` prints errors, [`super::human::error_chain`]; `{e:#}` repeats a cause its context
/// already says), for JSON's `error`; and the line for stderr, led by `noun item` unless the
/// error names it already (`job 4: …`).
fn refusal(noun: &str, item: &dyn std::fmt::Display, e: &anyhow::Error) -> (String, String) {
    let said = super::human::error_chain(e);
    let line = if said.contains(&format!("{noun} {item}")) {
        said.clone()
    } else {
        format!("{noun} {item}: {said}")
    };
    (said, line)
}

/// `all` found no unfinished job: says so (`what` was not done) and succeeds, with an empty
/// JSON array for scripts. A user whose `all` found none of its own while other users have
/// unfinished jobs is told those are not its own (it read as if nothing were running).
fn nothing_selected(args: &ClientArgs, sel: &Selected, what: &str) -> anyhow::Result<()> {
    match sel.others_unfinished {
        0 => eprintln!("no unfinished job: {what}"),
        n => eprintln!(
            "no unfinished job of yours: {what} (other users have {}, not yours)",
            count(n as u64, "unfinished job")
        ),
    }
    if args.output == Output::Json {
        json(&serde_json::json!([]))?;
    }
    Ok(())
}

/// `hetsched wait`: one job as [`wait_on`]; several in turn (the time-out bounds them all), a
/// line each (a JSON array of the jobs with `--output json`), failing at the end unless every
/// one completed: with status 1 when one ended otherwise, else with [`TIMED_OUT_STATUS`] when
/// the time-out passed before one ended (a failure says more than a job still running). `api`:
/// from [`connect_retrying`], so that a server restarting as the wait starts is waited for.
pub async fn wait(
    mut api: Api,
    args: &ClientArgs,
    sel: &Selected,
    timeout: Option<Duration>,
) -> anyhow::Result<()> {
    let looker = api.clone();
    let waiting = wait_selected(&mut api, args, sel, timeout);
    unless_interrupted(looker, &sel.ids, waiting).await
}

/// The wait of [`wait`], on a connection.
async fn wait_selected(
    api: &mut Api,
    args: &ClientArgs,
    sel: &Selected,
    timeout: Option<Duration>,
) -> anyhow::Result<()> {
    let ids = &sel.ids[..];
    if let ([id], false) = (ids, sel.many) {
        return wait_on(api, args.output, *id, timeout, false).await;
    }
    if ids.is_empty() {
        return nothing_selected(args, sel, "nothing to wait for");
    }
    let start = Instant::now();
    let mut jobs = Vec::with_capacity(ids.len());
    let mut late = Vec::new();
    // As `each_in_turn`: a job that cannot be waited for (purged, no such job) is an entry with
    // its `error`, and the others are still waited for and told.
    let mut entries = Vec::with_capacity(ids.len());
    let mut refused = Vec::new();
    for &id in ids {
        // Once the time-out has passed, each job left is looked at once, so that a failure
        // among them still counts and the unfinished ones are named.
        let waited = match wait_for(api, id, timeout, start).await {
            Ok(w) => w,
            Err(e) => {
                let (said, line) = refusal("job", &id, &e);
                eprintln!("error: {}", shown(&line));
                entries.push(serde_json::json!({"job_id": id, "error": said}));
                refused.push(id.to_string());
                continue;
            }
        };
        entries.push(waited_json(match &waited {
            Waited::Ended(j) | Waited::Unfinished(j) => j,
        }));
        match waited {
            Waited::Ended(j) => {
                if args.output != Output::Json {
                    println!("{}", ended_line(&j));
                    if counts(&j.counts).failed > 0 {
                        super::log::print_failures(api, &j).await;
                    } else {
                        super::log::print_cancel_cause(api, &j).await;
                    }
                }
                jobs.push(j);
            }
            Waited::Unfinished(j) => {
                late.push(j.clone());
                jobs.push(j);
            }
        }
    }
    if args.output == Output::Json {
        json(&entries)?;
    }
    let mut not: Vec<String> = jobs
        .iter()
        .filter(|j| is_final(&j.state) && j.state != "completed")
        .map(|j| format!("{} {}", j.id, j.state))
        .collect();
    not.extend(refused.iter().map(|id| format!("{id} not waited for")));
    if !not.is_empty() {
        let still = if late.is_empty() {
            String::new()
        } else {
            format!("; {}", still_unfinished(&late))
        };
        bail!(
            "{} of {} jobs did not complete: {}{still}",
            not.len(),
            ids.len(),
            not.join(", ")
        );
    }
    match timeout {
        Some(t) if !late.is_empty() => Err(timed_out(&late, t)),
        _ => Ok(()),
    }
}

/// Runs `waiting`, a wait for the jobs `ids`, unless SIGINT or SIGTERM comes first. Then the
/// jobs are left as they are — the wait watches them, it does not own them, and a user who meant
/// to stop them says so — but each one still unfinished is named with how to stop it, so that
/// none runs on unnoticed; the exit status is the shell's for that signal (130, 143).
async fn unless_interrupted(
    mut api: Api,
    ids: &[u64],
    waiting: impl Future<Output = anyhow::Result<()>>,
) -> anyhow::Result<()> {
    // Registered before the wait starts, so that a signal during it is never the default kill.
    let mut signals = hetsched_agent::shutdown::Signals::new();
    let name = tokio::select! {
        r = waiting => return r,
        name = signals.next() => name,
    };
    let status = if name == "SIGINT" { 130 } else { 143 };
    // A look at each job, bounded: a user who interrupts does not wait for a slow server (a
    // job not seen is named as running, the safe side).
    let mut ended = Vec::new();
    let look = async {
        for &id in ids {
            let req = pb::GetJobRequest {
                job_id: id,
                wait_ms: 0,
            };
            if let Ok(j) = api.get_job(req).await
                && is_final(&j.into_inner().state)
            {
                ended.push(id);
            }
        }
    };
    let _ = tokio::time::timeout(Duration::from_secs(1), look).await;
    for id in ids.iter().filter(|id| !ended.contains(id)) {
        eprintln!("job {id} keeps running: `hetsched cancel {id}` stops it");
    }
    Err(super::human::Exit {
        status,
        message: format!("{name}: stopped waiting"),
    }
    .into())
}

/// How a wait for one job ended: the job ended, or the time-out passed first (the job as last
/// seen).
enum Waited {
    Ended(pb::JobInfo),
    Unfinished(pb::JobInfo),
}

/// `job 3 still running, job 4 still pending`: the jobs a time-out left unfinished.
fn still_unfinished(late: &[pb::JobInfo]) -> String {
    late.iter()
        .map(|j| format!("job {} still {}", j.id, shown(&ended_state(j))))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The failure of a wait whose time-out passed before the jobs `late` ended: exit status
/// [`TIMED_OUT_STATUS`], naming them.
fn timed_out(late: &[pb::JobInfo], timeout: Duration) -> anyhow::Error {
    super::human::Exit {
        status: TIMED_OUT_STATUS,
        message: format!(
            "timed out after {}: {}",
            humantime::format_duration(timeout),
            still_unfinished(late)
        ),
    }
    .into()
}

/// `job N STATE: … succeeded, … failed, … cancelled, makespan …`: how a waited-for job ended.
fn ended_line(j: &pb::JobInfo) -> String {
    let c = counts(&j.counts);
    format!(
        "job {} {}: {} succeeded, {} failed, {} cancelled, {}",
        j.id,
        shown(&j.state),
        c.succeeded,
        c.failed,
        c.cancelled,
        end_span(j)
    )
}

/// `makespan …` of an ended job, submission to its end; `ended … after submission` when every
/// task was cancelled (`--after` a failed job, `cancel` before any ran), which has no makespan.
fn end_span(j: &pb::JobInfo) -> String {
    let c = counts(&j.counts);
    let took = span(j.submitted_ns, j.finished_ns);
    if c.succeeded + c.failed == 0 && c.cancelled > 0 {
        format!("ended {took} after submission")
    } else {
        format!("makespan {took}")
    }
}

/// Whether a job state is final.
pub fn is_final(state: &str) -> bool {
    matches!(state, "completed" | "failed" | "cancelled")
}

/// A waited-for job in JSON: the job's, with `job_id` as every command acting on jobs
/// answers (docs/runtime.md, "Selections").
fn waited_json(j: &pb::JobInfo) -> serde_json::Value {
    let mut v = super::human::job_json(j);
    if let Some(o) = v.as_object_mut() {
        o.insert("job_id".into(), j.id.into());
    }
    v
}

/// How long one `GetJob` of [`wait_on`] is held by the server (the progress bar's refresh).
const WAIT_STEP: Duration = Duration::from_millis(500);

/// How long a wait whose held look the server refused (its bound on one user's calls held
/// open) looks without being held before it asks to be held again.
const UNHELD_FOR: Duration = Duration::from_secs(10);

/// Waits for a job to finish, with a progress bar on a terminal. Each `GetJob` is held by the
/// server until the job ends or [`WAIT_STEP`] passes, so the end is seen as it happens, without
/// polling. `after_submit`: the JSON is a line after the submission's ([`json_line`]).
pub async fn wait_on(
    api: &mut Api,
    output: Output,
    id: u64,
    timeout: Option<Duration>,
    after_submit: bool,
) -> anyhow::Result<()> {
    let print = |j: &pb::JobInfo| match after_submit {
        true => json_line(&waited_json(j)),
        false => json(&waited_json(j)),
    };
    let j = match wait_for(api, id, timeout, Instant::now()).await? {
        Waited::Ended(j) => j,
        Waited::Unfinished(j) => {
            if output == Output::Json {
                print(&j)?;
            }
            return Err(timed_out(&[j], timeout.unwrap_or_default()));
        }
    };
    match output {
        Output::Json => print(&j)?,
        Output::Table | Output::Dot => println!("{}", ended_line(&j)),
    }
    if j.state != "completed" {
        if counts(&j.counts).failed > 0 {
            super::log::print_failures(api, &j).await;
        } else {
            super::log::print_cancel_cause(api, &j).await;
        }
        bail!("job {id} {}", j.state);
    }
    Ok(())
}

/// Waits for job `id` to finish (a progress bar on a terminal) and returns it; returns it
/// unfinished once `timeout` has passed since `start`.
async fn wait_for(
    api: &mut Api,
    id: u64,
    timeout: Option<Duration>,
    start: Instant,
) -> anyhow::Result<Waited> {
    let bar = indicatif::ProgressBar::new(0);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{bar:40} {pos}/{len} tasks {msg} [{elapsed}]")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let mut delay = Duration::from_millis(20);
    let mut told_held = false;
    let mut told_deferred = false;
    let mut told_stuck = String::new();
    // Whether the server answered in this wait, and since when it has not. One that answered
    // is waited for up to `SERVER_GONE_LIMIT`; one that has not yet (connected, but restarting)
    // only as long as a command's start is ([`retry_for`]): an address where nothing ever
    // answers is more likely a mistake than a restart.
    let mut answered = false;
    let start_limit = retry_for()?;
    let mut gone_since: Option<Instant> = None;
    // Until when this wait looks without the server holding its call: the server refused a
    // held look because this user holds as many calls open as it allows (`GetJob` waits of
    // other scripts, log reads). The job runs all the same, so the wait looks every
    // [`WAIT_STEP`] instead of failing, and asks to be held again later.
    let mut unheld_until: Option<Instant> = None;
    let j = loop {
        let asked = Instant::now();
        // The server holds the call until the job changes, at most a step, and never past the
        // timeout (`--timeout 0s` looks once).
        // The first look is not held, so that a server that answers is known before a long
        // call could be cut by a restart.
        let step = timeout.map_or(WAIT_STEP, |t| {
            t.saturating_sub(start.elapsed()).min(WAIT_STEP)
        });
        let unheld = unheld_until.is_some_and(|t| Instant::now() < t);
        let step = if answered && !unheld {
            step
        } else {
            Duration::ZERO
        };
        let j = match api
            .get_job(pb::GetJobRequest {
                job_id: id,
                wait_ms: step.as_millis() as u32,
            })
            .await
        {
            Ok(j) => j.into_inner(),
            // The server is restarting (or its host is briefly unreachable). Its jobs survive
            // that, so the wait goes on, bounded. Unless a plain client reached a TLS port: that
            // never mends, and is said at once ([`diagnose`]).
            Err(s)
                if retryable(&s) && (answered || gone_since.is_some() || !plain_to_tls().await) =>
            {
                let limit = if answered {
                    SERVER_GONE_LIMIT
                } else {
                    start_limit
                };
                let gone = *gone_since.get_or_insert_with(|| {
                    bar.suspend(|| {
                        eprintln!(
                            "warning: the server does not answer ({}: {}); waiting for it to come \
                             back (at most {})",
                            s.code(),
                            shown(s.message()),
                            humantime::format_duration(limit)
                        )
                    });
                    Instant::now()
                });
                if gone.elapsed() >= limit || timeout.is_some_and(|t| start.elapsed() >= t) {
                    bar.abandon();
                    return Err(refused(s).context(format!(
                        "job {id}: the server at {} did not answer for {}",
                        CONNECTED.get().map_or("", |url| url.as_str()),
                        humantime::format_duration(Duration::from_secs(gone.elapsed().as_secs()))
                    )));
                }
                tokio::time::sleep(Duration::from_millis(250)).await;
                continue;
            }
            Err(s) if s.code() == tonic::Code::ResourceExhausted && !step.is_zero() => {
                if unheld_until.is_none() {
                    bar.suspend(|| {
                        eprintln!(
                            "warning: {}; job {id} is looked at every {} ms instead",
                            shown(s.message()),
                            WAIT_STEP.as_millis()
                        )
                    });
                }
                unheld_until = Some(Instant::now() + UNHELD_FOR);
                tokio::time::sleep(step).await;
                continue;
            }
            Err(s) => return Err(refused(s)),
        };
        answered = true;
        if let Some(gone) = gone_since.take() {
            bar.suspend(|| {
                eprintln!(
                    "the server answers again (after {:.1} s)",
                    gone.elapsed().as_secs_f64()
                )
            });
        }
        if j.held && counts(&j.counts).pending > 0 && !told_held {
            // A held job waits for a person: say so rather than seem stuck (not when its pending
            // tasks all started before the hold: it ends by itself).
            told_held = true;
            bar.suspend(|| eprintln!("job {id} is held: it waits for `hetsched release {id}`"));
        }
        if j.deferred && unfinished(&j) && !told_deferred {
            // A deferred job waits for its time: say when rather than seem stuck.
            told_deferred = true;
            let when = super::begin::describe(j.begin_ms);
            bar.suspend(|| eprintln!("job {id} is deferred: it begins {when}"));
        }
        if j.blocked && told_stuck != j.pending_reason {
            // No node can run it now (none has what it needs, or each such node is drained):
            // it waits for an operator, not for time.
            told_stuck.clone_from(&j.pending_reason);
            bar.suspend(|| eprintln!("job {id} waits: {}", shown(&j.pending_reason)));
        }
        let c = counts(&j.counts);
        bar.set_length(j.tasks);
        bar.set_position(c.succeeded + c.failed + c.cancelled);
        bar.set_message(format!(
            "({} running, {} failed)",
            super::human::running(&c),
            c.failed
        ));
        if is_over(&j) {
            break j;
        }
        if timeout.is_some_and(|t| start.elapsed() >= t) {
            bar.abandon();
            return Ok(Waited::Unfinished(j));
        }
        if unheld {
            let left = timeout.map_or(WAIT_STEP, |t| t.saturating_sub(start.elapsed()));
            tokio::time::sleep(WAIT_STEP.min(left)).await;
        } else if asked.elapsed() < WAIT_STEP / 5 {
            // A server that does not hold the call: poll, backing off.
            tokio::time::sleep(delay).await;
            delay = (delay * 2).min(Duration::from_millis(250));
        }
    };
    bar.finish_and_clear();
    Ok(Waited::Ended(j))
}

/// What a submission holds, in its kind's words: a divisible job's units, a workflow's
/// instances, other jobs' tasks.
fn submitted_size(reply: &pb::SubmitReply) -> String {
    count(reply.tasks, work_noun(&reply.kind))
}

/// What a job of kind `kind` (`divisible`, `workflow`, …) is made of, in its own words.
/// Job `j`'s kind (`batch`, `divisible`, `workflow`): as the server says it, else (a server
/// that predates `JobInfo.kind`) as its fields tell it.
fn kind_of(j: &pb::JobInfo) -> &str {
    if !j.kind.is_empty() {
        &j.kind
    } else if j.divisible.is_some() {
        "divisible"
    } else if !j.balancer.is_empty() {
        "workflow"
    } else {
        "batch"
    }
}

fn work_noun(kind: &str) -> &'static str {
    match kind {
        "divisible" => "unit",
        "workflow" => "instance",
        _ => "task",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A GPU task's peak GPU memory shows in `tasks` beside its peak resident memory, and in
    /// `job N`'s `used:` line; a CPU task's (not measured) as `-`, and no `max gpu memory` for
    /// a job none of whose tasks had one.
    #[test]
    fn a_gpu_tasks_peak_gpu_memory_is_shown_like_its_peak_resident_memory() {
        let task = |gpu: u64| pb::TaskInfo {
            state: "succeeded".into(),
            usage: Some(pb::TaskUsage {
                cpu_user_ms: 1_000,
                cpu_system_ms: 0,
                max_rss_bytes: 1 << 20,
                max_gpu_memory_bytes: gpu,
            }),
            ..Default::default()
        };
        let shown = tasks_table(&[task(3 << 30), task(0)]).to_string();
        let header = shown
            .lines()
            .find(|l| l.contains("task"))
            .unwrap_or_default();
        assert!(
            header.contains("max rss") && header.contains("gpu mem"),
            "{shown}"
        );
        let gib = super::super::human::memory(3 << 30);
        let rows: Vec<&str> = shown.lines().filter(|l| l.contains("succeeded")).collect();
        assert_eq!(rows.len(), 2, "{shown}");
        assert!(rows[0].contains(&gib), "{shown}");
        assert!(!rows[1].contains(&gib), "{shown}");
        let mut job = pb::JobInfo {
            cpu_ms: 2_000,
            max_rss_bytes: 1 << 20,
            max_gpu_memory_bytes: 3 << 30,
            ..Default::default()
        };
        let line = used_line(&job).unwrap_or_default();
        assert!(line.contains(&format!("max gpu memory {gib}")), "{line}");
        job.max_gpu_memory_bytes = 0;
        let line = used_line(&job).unwrap_or_default();
        assert!(
            line.starts_with("used: cpu time") && !line.contains("gpu"),
            "{line}"
        );
        assert_eq!(used_line(&pb::JobInfo::default()), None);
    }

    /// An older or hostile server's names and messages reach the terminal escaped: no escape
    /// sequence of theirs acts on it.
    #[test]
    fn a_server_sent_escape_in_a_task_or_job_is_shown_escaped() {
        let evil = "\u{1b}]0;owned\u{7}\u{1b}[2J";
        let task = pb::TaskInfo {
            app: evil.into(),
            node: evil.into(),
            message: format!("failed\r{evil}"),
            exit_code: -1,
            ..Default::default()
        };
        let table = tasks_table(&[task]).to_string();
        assert!(
            !table.contains('\u{1b}') && !table.contains('\r'),
            "{table:?}"
        );
        assert!(table.contains("\\u{1b}]0;owned"), "{table}");
        let job = pb::JobInfo {
            id: 7,
            state: evil.into(),
            ..Default::default()
        };
        let line = ended_line(&job);
        assert!(!line.contains('\u{1b}'), "{line:?}");
        assert!(line.starts_with("job 7 \\u{1b}]0;owned\\u{7}"), "{line}");
    }

    /// A task's message that quotes a name with a bidi override, and a job name holding one (a
    /// server that predates the refusal of such names), are printed with the code points
    /// escaped: `hetsched tasks` does not show `job\u{202e}txt.exe` as `jobexe.txt`.
    #[test]
    fn a_server_sent_bidi_override_in_a_task_or_job_is_shown_escaped() {
        let task = pb::TaskInfo {
            app: "a\u{2067}pp".into(),
            message: "cannot start `job\u{202e}txt.exe`".into(),
            exit_code: -1,
            ..Default::default()
        };
        let table = tasks_table(&[task]).to_string();
        assert!(
            !table.contains('\u{202e}') && !table.contains('\u{2067}'),
            "{table:?}"
        );
        assert!(
            table.contains("cannot start `job\\u{202e}txt.exe`"),
            "{table}"
        );
        assert!(table.contains("a\\u{2067}pp"), "{table}");
        let job = pb::JobInfo {
            id: 7,
            state: "failed\u{200f}".into(),
            ..Default::default()
        };
        let line = ended_line(&job);
        assert!(line.starts_with("job 7 failed\\u{200f}"), "{line}");
    }

    #[test]
    fn a_running_multi_node_task_shows_its_first_node_and_how_many_more() {
        let task = |node: &str, nodes: &[&str]| pb::TaskInfo {
            node: node.into(),
            nodes: nodes.iter().map(|n| (*n).to_string()).collect(),
            exit_code: -1,
            ..Default::default()
        };
        let shown = tasks_table(&[task("a", &["a", "b", "c"]), task("d", &[])]).to_string();
        assert!(shown.contains("a (+2)"), "{shown}");
        assert!(!shown.contains("d (+"), "{shown}");
    }

    /// A job whose pending tasks wait (held, after others, for its begin time) says so; one
    /// that also has tasks running says both, as `job N` and the JSON `state` do.
    #[test]
    fn a_job_that_runs_while_its_pending_tasks_wait_shows_both() {
        let job = |state: &str, held: bool, deferred: bool| pb::JobInfo {
            state: state.into(),
            held,
            deferred,
            ..Default::default()
        };
        assert_eq!(shown_state(&job("pending", false, true)), "deferred");
        assert_eq!(
            shown_state(&job("running", false, true)),
            "running (deferred)"
        );
        assert_eq!(shown_state(&job("running", true, true)), "running (held)");
        assert_eq!(shown_state(&job("running", false, false)), "running");
        assert_eq!(shown_state(&job("completed", false, false)), "completed");
    }

    /// A cancelled job whose stopped tasks' processes may still run shows how many, and a wait
    /// is not over until none is left; a running job with stopped tasks (`cancel --tasks`)
    /// shows its state as before.
    #[test]
    fn an_ended_job_with_stopping_tasks_says_so_and_is_not_over_for_a_wait() {
        let job = |state: &str, stopping: u32| pb::JobInfo {
            state: state.into(),
            stopping,
            ..Default::default()
        };
        assert_eq!(shown_state(&job("cancelled", 3)), "cancelled (stopping 3)");
        assert_eq!(shown_state(&job("running", 1)), "running");
        assert!(!is_over(&job("cancelled", 1)));
        assert!(!is_over(&job("running", 0)));
        assert!(is_over(&job("cancelled", 0)));
        assert_eq!(
            still_unfinished(&[pb::JobInfo {
                id: 5,
                ..job("cancelled", 2)
            }]),
            "job 5 still cancelled (stopping 2)"
        );
    }

    /// The state column says why a task's latest attempt ended (its `reason`), so a table
    /// tells a time limit from a crash without the message.
    #[test]
    fn a_tasks_state_shows_its_reason_and_a_signal_by_name() {
        let task = |state: &str, reason: &str, signal: &str| pb::TaskInfo {
            state: state.into(),
            reason: reason.into(),
            signal: signal.into(),
            exit_code: -1,
            ..Default::default()
        };
        assert_eq!(
            state_cell(&task("failed", "time_limit", "")),
            "failed (time_limit)"
        );
        assert_eq!(
            state_cell(&task("failed", "signal", "SEGV")),
            "failed (signal SEGV)"
        );
        assert_eq!(state_cell(&task("failed", "signal", "")), "failed (signal)");
        assert_eq!(
            state_cell(&task("pending", "preempted", "")),
            "pending (preempted)"
        );
        assert_eq!(state_cell(&task("succeeded", "", "")), "succeeded");
        let shown = tasks_table(&[task("cancelled", "dependency_failed", "")]).to_string();
        assert!(shown.contains("cancelled (dependency_failed)"), "{shown}");
    }

    #[test]
    fn a_running_task_shows_how_long_it_has_run_and_a_pending_one_nothing() {
        let now_ns = super::super::begin::now_ms() * 1_000_000;
        let task = |state: &str| pb::TaskInfo {
            state: state.into(),
            started_ns: now_ns - 125 * 1_000_000_000,
            exit_code: -1,
            ..Default::default()
        };
        let shown = tasks_table(&[task("running")]).to_string();
        assert!(
            shown.contains("2m 5s") || shown.contains("2m 6s"),
            "{shown}"
        );
        let shown = tasks_table(&[task("pending")]).to_string();
        assert!(!shown.contains("2m"), "{shown}");
    }

    /// A workflow instance's fetch time (`fetch_ms`) has a column of its own, `fetch`: how long
    /// its inputs took (`1.2s`), `-` for a task with none (or not known yet, still fetching).
    #[test]
    fn agent_the_tasks_table_shows_each_instances_fetch_time() {
        let task = |id: u64, fetch_ms: u64| pb::TaskInfo {
            id,
            state: "succeeded".into(),
            fetch_ms,
            exit_code: 0,
            ..Default::default()
        };
        let shown = tasks_table(&[task(1, 1234), task(2, 0)]).to_string();
        // Empty cells kept, so that a column is at the same place in every line (the first,
        // before the left border, is empty too).
        let cells = |l: &str| -> Vec<String> {
            l.split(['│', '┆']).map(|c| c.trim().to_string()).collect()
        };
        let header = shown
            .lines()
            .map(cells)
            .find(|c| c.get(1).is_some_and(|f| f == "task"))
            .unwrap_or_default();
        let Some(at) = header.iter().position(|h| h == "fetch") else {
            panic!("a fetch column:\n{shown}");
        };
        let fetch_of = |id: &str| {
            shown
                .lines()
                .map(cells)
                .find(|c| c.get(1).is_some_and(|f| f == id))
                .and_then(|c| c.get(at).cloned())
        };
        assert_eq!(fetch_of("1").as_deref(), Some("1.2s"), "{shown}");
        assert_eq!(fetch_of("2").as_deref(), Some("-"), "{shown}");
    }

    /// A refusal among several items says each cause once, led by its item unless it names
    /// it: `{e:#}` said `refused: no such job: no such job`.
    #[test]
    fn a_refusal_among_several_items_says_each_cause_once() {
        let e = anyhow::anyhow!("no such job").context("refused: no such job");
        let (said, line) = refusal("job", &4, &e);
        assert_eq!(said, "refused: no such job");
        assert_eq!(line, "job 4: refused: no such job");
        let e = anyhow::anyhow!("job 4 has ended").context("refused");
        assert_eq!(
            refusal("job", &4, &e),
            (
                "refused: job 4 has ended".to_string(),
                "refused: job 4 has ended".to_string()
            )
        );
    }
}

#[cfg(test)]
mod job_ref_tests {
    use super::JobRef;

    #[test]
    fn a_job_is_named_by_id_last_or_name() {
        assert_eq!("7".parse::<JobRef>(), Ok(JobRef::Id(7)));
        assert_eq!("last".parse::<JobRef>(), Ok(JobRef::Last));
        assert_eq!(
            "name:prepare".parse::<JobRef>(),
            Ok(JobRef::Name("prepare".into()))
        );
        let e = "name:".parse::<JobRef>().expect_err("no name");
        assert!(e.contains("`name:` names no job"), "{e}");
        let e = "prep".parse::<JobRef>().expect_err("not a job");
        assert!(
            e.contains("`prep` is not a job id (a number), `name:NAME` or `last`"),
            "{e}"
        );
    }
}
