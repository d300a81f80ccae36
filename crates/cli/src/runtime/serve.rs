//! `hetsched server` and `hetsched agent`: configuration files plus flags, then the long-running
//! loops of the `hetsched-server` and `hetsched-agent` crates until Ctrl-C or SIGTERM.

use anyhow::{Context, bail};
use clap::Args;
use hetsched_agent::config::AgentConfig;
use hetsched_core::policy::batch::BatchPolicyKind;
use hetsched_server::ServerConfig;
use std::net::SocketAddr;
use std::path::PathBuf;

/// `hetsched server`.
#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct ServerArgs {
    /// An operation on a server's data directory instead of running the server.
    #[command(subcommand)]
    pub command: Option<ServerCommand>,
    /// Configuration file (TOML); flags override it.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Data directory (store, token, address).
    #[arg(long, help = format!("Data directory (store, tokens, address) [default: {}]", ServerConfig::default().data_dir.display()))]
    pub data_dir: Option<PathBuf>,
    /// Address to listen on (port 0 = any free port; the bound address goes to DATA_DIR/address).
    #[arg(long, value_parser = hetsched_core::input::listen::parse, help = format!("Address to listen on, an IP address and port (port 0 = any free port; the bound address goes to DATA_DIR/address) [default: {}]", ServerConfig::default().listen))]
    pub listen: Option<SocketAddr>,
    /// Batch policy (every policy the core has).
    #[arg(
        long,
        value_parser = |s: &str| s.parse::<BatchPolicyKind>().map_err(|e| e.to_string()),
        help = format!(
            "Batch policy: {} [default: {}]",
            BatchPolicyKind::ALL.map(BatchPolicyKind::as_str).join(", "),
            ServerConfig::default().policy
        )
    )]
    pub policy: Option<BatchPolicyKind>,
    /// Declare a node dead after this long without a heartbeat (e.g. `10s`).
    #[arg(long, value_parser = super::duration_flag, help = format!("Declare a node dead after this long without a heartbeat [default: {}]", humantime::format_duration(std::time::Duration::from_nanos(ServerConfig::default().dead_timeout.0))))]
    pub dead_timeout: Option<humantime::Duration>,
    /// How often an agent with work heartbeats when nothing happens (e.g. `500ms`).
    #[arg(long, value_parser = super::duration_flag, help = format!("How often an agent with work (a task running, queued or unreported) heartbeats when nothing happens [default: {}]", humantime::format_duration(std::time::Duration::from_nanos(ServerConfig::default().heartbeat_interval.0))))]
    pub heartbeat_interval: Option<humantime::Duration>,
    /// How often an agent with nothing to report heartbeats (e.g. `10s`).
    #[arg(
        long,
        help = "How often an agent with nothing to report heartbeats: new work reaches it at once \
                anyway, and its open wait for work says it lives, so idle beats only refresh what \
                `hetsched nodes` shows [default: 60s; one below --heartbeat-interval is raised to it]",
        value_parser = super::duration_flag
    )]
    pub idle_heartbeat_interval: Option<humantime::Duration>,
    /// Serve the dashboard, Prometheus `/metrics` (both need a token: DATA_DIR/read-token) and
    /// `/healthz` over HTTP on this address — HTTPS when the configuration has `[tls]` (port 0 =
    /// any free port, the bound address goes to DATA_DIR/http-address).
    #[arg(long, value_parser = hetsched_core::input::listen::parse)]
    pub http_listen: Option<SocketAddr>,
    /// Set aside stored job JOB, whose file this version no longer reads (the start refuses
    /// it, naming it): before the state is restored, its file and a record of it (owner,
    /// origin, state, tasks) go to DATA_DIR/set-aside and its rows are dropped as `hetsched
    /// purge` drops them (its running tasks are killed when their agents report). A job whose
    /// file still reads is refused. Repeat for more jobs; one start only (a job set aside
    /// already is passed over).
    #[arg(long, value_name = "JOB")]
    pub set_aside: Vec<u64>,
    /// Set aside stored topology NAME, whose file this version no longer reads, as
    /// `--set-aside` does a job. Repeat for more.
    #[arg(long, value_name = "NAME")]
    pub set_aside_topology: Vec<String>,
    /// Check the configuration (the file and these flags) as a start would — bounds, the
    /// `[tls]` certificate, key and `agent_ca`, the data directory — and exit: 0 if it would
    /// start. Starts nothing and changes nothing, so it may check the file a running server
    /// will restart with.
    #[arg(long)]
    pub check: bool,
    #[command(flatten)]
    pub logs: super::logging::LogArgs,
}

/// `hetsched server backup|restore`.
#[derive(Debug, clap::Subcommand)]
pub enum ServerCommand {
    /// Copy the store (DATA_DIR/state.db) into a new FILE, consistently, while the server runs
    /// or not (SQLite's online backup: one commit's state, the WAL's included; copying the
    /// file itself under a running server is not safe). FILE is created mode 0600, never over
    /// an existing file, and not in the data directory. It holds the data directory's tokens
    /// and secrets too, the files of the divisible jobs the copy holds (DATA_DIR/divisible/:
    /// inputs, chunk outputs, gathered outputs) and those of DATA_DIR/set-aside/; a restore
    /// writes them all back (see docs/runtime.md, "Backup and restore").
    #[command(
        after_help = "Example:\n  hetsched server backup --config /etc/hetsched/server.toml /backup/hetsched-$(date +%F).db"
    )]
    Backup {
        /// The backup file to create.
        file: PathBuf,
        #[command(flatten)]
        dir: DataDirArgs,
    },
    /// Put backup FILE in place as the store of a STOPPED server's data directory (created if
    /// missing), and the backup's tokens and secrets (0600), divisible jobs' files
    /// (DATA_DIR/divisible/) and set-aside files (DATA_DIR/set-aside/) beside it; the store and
    /// files it replaces, the store with its WAL, are kept in DATA_DIR/before-restore-SECS/.
    /// Refused while a server runs on the directory, and for a file that is no sound hetsched
    /// store.
    Restore {
        /// The backup file (`hetsched server backup`'s).
        file: PathBuf,
        #[command(flatten)]
        dir: DataDirArgs,
    },
}

/// Which data directory `hetsched server backup|restore` acts on.
#[derive(Debug, Args)]
pub struct DataDirArgs {
    /// The server's configuration file, for its `data_dir`.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// The server's data directory (overrides the configuration's).
    #[arg(long, help = format!("The server's data directory (overrides the configuration's) [default: {}]", ServerConfig::default().data_dir.display()))]
    pub data_dir: Option<PathBuf>,
}

impl DataDirArgs {
    fn resolve(&self) -> anyhow::Result<PathBuf> {
        if let Some(d) = &self.data_dir {
            return Ok(d.clone());
        }
        Ok(match &self.config {
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .with_context(|| format!("reading {}", path.display()))?;
                ServerConfig::parse(&path.display().to_string(), &text)?.data_dir
            }
            None => ServerConfig::default().data_dir,
        })
    }
}

/// The data directory's files a backup holds or a restore wrote back, for its line: ` with
/// token, agent-token` (`word` = `with`), or nothing when none.
fn with_files(files: &[String], word: &str) -> String {
    if files.is_empty() {
        String::new()
    } else {
        format!(" {word} {}", files.join(", "))
    }
}

/// The files of a data directory's tree a backup holds or a restore wrote back, for its line:
/// ` and 3 divisible-job files (1234 bytes)` (`what` = `divisible-job`).
fn with_carried(c: hetsched_server::backup::Carried, what: &str) -> String {
    format!(
        " and {} {what} file{} ({} bytes)",
        c.files,
        if c.files == 1 { "" } else { "s" },
        c.bytes
    )
}

/// ` and 2 set-aside files (B bytes)`, or nothing when there are none (`set-aside/` is rare).
fn with_set_aside(c: Option<hetsched_server::backup::Carried>) -> String {
    c.filter(|c| c.files > 0)
        .map_or(String::new(), |c| with_carried(c, "set-aside"))
}

/// `hetsched server backup|restore`.
fn server_command(command: ServerCommand) -> anyhow::Result<()> {
    match command {
        ServerCommand::Backup { file, dir } => {
            let data_dir = dir.resolve()?;
            let b = hetsched_server::backup::backup(&data_dir, &file)
                .with_context(|| format!("backing up the store of {}", data_dir.display()))?;
            for why in &b.skipped {
                eprintln!("warning: {why}");
            }
            println!(
                "backed up {} into {} ({} bytes, {} jobs){}{}{}",
                data_dir.join(hetsched_server::datadir::STORE).display(),
                b.path.display(),
                b.bytes,
                b.jobs,
                with_files(&b.files, "with"),
                with_carried(b.divisible, "divisible-job"),
                with_set_aside(Some(b.set_aside))
            );
        }
        ServerCommand::Restore { file, dir } => {
            let data_dir = dir.resolve()?;
            let r = hetsched_server::backup::restore(&data_dir, &file).with_context(|| {
                format!("restoring {} into {}", file.display(), data_dir.display())
            })?;
            println!(
                "restored {} into {} ({} jobs){}{}{}{}; start the server",
                file.display(),
                r.store.display(),
                r.jobs,
                with_files(&r.files, "and"),
                r.divisible
                    .map_or(String::new(), |c| with_carried(c, "divisible-job")),
                with_set_aside(r.set_aside),
                r.replaced.map_or(String::new(), |d| format!(
                    "; the store it replaced is in {}",
                    d.display()
                ))
            );
            if r.files.is_empty() {
                eprintln!("{}", no_secrets_note(&file, &data_dir));
            }
        }
    }
    Ok(())
}

/// What a restore of `file` into `data_dir` that brought no tokens or secrets back says: a
/// plain copy of `state.db` (or an older backup) holds none, and those the data directory lacks
/// the first start writes anew — every agent, user and dashboard holding the old ones is then
/// refused, which nothing said before.
fn no_secrets_note(file: &std::path::Path, data_dir: &std::path::Path) -> String {
    let missing: Vec<&str> = hetsched_server::backup::SECRETS
        .into_iter()
        .filter(|name| !data_dir.join(name).exists())
        .collect();
    let then = if missing.is_empty() {
        format!(
            "the data directory's own ({}) stay",
            hetsched_server::backup::SECRETS.join(", ")
        )
    } else {
        format!(
            "the first start writes new {} in {}: agents, users and dashboards holding the old \
             ones are refused until given the new (or copy the old files there before it \
             starts)",
            missing.join(", "),
            data_dir.display()
        )
    };
    format!(
        "note: {} held no tokens or secrets (a copy of state.db, not a `hetsched server backup`          file, which keeps them): none were restored; {then}",
        file.display()
    )
}

/// An allocation queue's agent command line, read as `hetsched agent` reads it.
#[derive(Debug, clap::Parser)]
#[command(name = "hetsched agent")]
struct AgentLine {
    #[command(flatten)]
    agent: AgentArgs,
}

/// Each `[[allocation]]` queue's agents' command line parses as `hetsched agent`'s: an
/// `agent_args` entry the agent does not know, or one the server gives itself, would otherwise
/// fail every allocation's agents at their start, on a node, long after the server started.
fn check_agent_args(config: &ServerConfig, file: Option<&std::path::Path>) -> anyhow::Result<()> {
    for q in &config.allocation {
        let node = hetsched_server::allocation::NODE_ARGS;
        let line = q
            .agent_command("http://127.0.0.1:7420", std::path::Path::new("agent-token"))
            .into_iter()
            // The placeholders' values are never read: only the flags' shape is checked.
            .chain([node[0], "node-1", node[1], "/tmp/hetsched-work"].map(String::from));
        if let Err(e) = <AgentLine as clap::Parser>::try_parse_from(line) {
            // clap's error and its tip (`a similar argument exists: '--attributes'`), without
            // its usage lines, which speak of this stand-in command line.
            let why = e.render().to_string();
            let why = why
                .lines()
                .map(str::trim)
                .filter(|l| l.starts_with("error: ") || l.starts_with("tip: "))
                .map(|l| l.trim_start_matches("error: "))
                .collect::<Vec<_>>()
                .join("; ");
            bail!(
                "invalid server configuration{}: allocation queue `{}`: agent_args {:?}: its \
                 agents would refuse their command line: {why} (the server itself gives \
                 `--server`, `--token-file`, `--time-limit`, `--idle-timeout`, `--kill-grace` \
                 unless agent_args do, `--attributes` from `attributes`, and each node's `{}` \
                 and `{}`; see `hetsched agent --help`)",
                file.map_or(String::new(), |p| format!(" ({})", p.display())),
                q.name,
                q.agent_args,
                node[0],
                node[1],
            );
        }
    }
    Ok(())
}

/// `hetsched agent`.
#[derive(Debug, Args)]
pub struct AgentArgs {
    /// Server URL; then the configuration's `server`, then $HETSCHED_SERVER [default:
    /// http://127.0.0.1:7420].
    // No clap `env`: it would make the environment a flag and so override the file; an agent
    // reads it below the file instead ([`from_env`]).
    #[arg(long)]
    pub server: Option<String>,
    /// Configuration file (TOML); flags override it.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Unique node name [default: the host name].
    #[arg(long)]
    pub name: Option<String>,
    /// File holding the server's agent token; then the configuration's `token_file`, then
    /// $HETSCHED_AGENT_TOKEN_FILE (default: hetsched-data/agent-token).
    #[arg(long)]
    pub token_file: Option<PathBuf>,
    /// CA certificate (PEM) for an `https://` server; then the configuration's `ca`, then
    /// $HETSCHED_CA.
    #[arg(long)]
    pub ca: Option<PathBuf>,
    #[arg(long, value_parser = parse_cores, help = format!("Cores to offer, 1 to {} [default: detected]", hetsched_core::input::cluster::MAX_NODE_CORES))]
    pub cores: Option<u32>,
    /// Work directory: task outputs, the running-task record and the agent's identity; one per
    /// agent (default: $XDG_STATE_HOME/hetsched/agent-NAME, ~/.local/state/…, or
    /// /var/lib/hetsched/agent-NAME for root).
    #[arg(long)]
    pub work_dir: Option<PathBuf>,
    /// Benchmarks only: acknowledge every task as succeeded without starting a process.
    #[arg(long, hide = true)]
    pub no_exec: bool,
    /// Where the agent serves its task outputs to the server (`hetsched log`), token-checked
    /// with the agent token; the server connects to the address the agent registered from, at
    /// this port. `none` = no listener. [default: 0.0.0.0:0, any free port]
    #[arg(long, value_name = "ADDR")]
    pub log_listen: Option<String>,
    /// Certificate (PEM) of the log listener: with `--log-key`, it speaks TLS (the server then
    /// needs the CA that signed it as `[tls] agent_ca`). The certificate must name the address
    /// the server reaches the agent at. Without it, an agent of a TLS server that names no
    /// `agent_ca` gets its certificate from the server at start.
    #[arg(long, requires = "log_key", value_name = "FILE")]
    pub log_cert: Option<PathBuf>,
    /// Private key (PEM) of the log listener.
    #[arg(long, requires = "log_cert", value_name = "FILE")]
    pub log_key: Option<PathBuf>,
    /// On SIGTERM/SIGINT, wait for the running tasks to end instead of killing them (a second
    /// signal kills them and exits at once).
    #[arg(long)]
    pub drain: bool,
    /// How long a task asked to stop (cancelled, past its time limit, the agent shutting down)
    /// has between SIGTERM and SIGKILL to save its state [default: the configuration's
    /// `kill_grace`, else 10s].
    #[arg(long, value_name = "DURATION", value_parser = super::duration_flag)]
    pub kill_grace: Option<humantime::Duration>,
    /// How long the agent runs (`11h50m`; HyperQueue's worker `--time-limit`): inside a batch
    /// allocation, its length less a margin, or `auto` to ask Slurm (`squeue`) or PBS (`qstat`)
    /// for the allocation's time left, less a minute. The server sends it no task whose
    /// `time_limit` is longer than the time it has left; the kill grace before the end it stops
    /// the tasks still running (the server runs them again elsewhere, without counting a
    /// failure) and exits [default: the configuration's `time_limit`, else none].
    #[arg(long, value_name = "DURATION|auto")]
    pub time_limit: Option<String>,
    /// Exit once nothing has run or waited on this node for this long (`5m`; HyperQueue's worker
    /// `--idle-timeout`): a batch allocation holding the agent then ends when the work does,
    /// instead of holding its nodes to its time limit [default: the configuration's
    /// `idle_timeout`, else never].
    #[arg(long, value_name = "DURATION", value_parser = super::duration_flag)]
    pub idle_timeout: Option<humantime::Duration>,
    /// Run each user's tasks and divisible chunks as the Unix account of the user's name (as
    /// Slurm does), the admin's as the agent's own user; the agent must run as root. An
    /// account missing on this node, or one with uid 0, is refused as a failure to start
    /// [default: the configuration's `run_as_owner`, else off: every task runs as the agent's
    /// user].
    #[arg(long)]
    pub run_as_owner: bool,
    /// How long job directories the agent set aside into `WORK_DIR/stale/` (another
    /// incarnation's of a job id, after a server restore or a new data directory) are kept
    /// before it deletes them (at start and every hour), or `never` [default: the
    /// configuration's `stale_keep`, else 7d].
    #[arg(long, value_name = "DURATION|never", value_parser = stale_keep_flag)]
    pub stale_keep: Option<StaleKeep>,
    /// Attributes jobs and workflow tasks may `requires` of this node (`bigmem,ssd`; repeat the
    /// flag or separate with commas; `gpu` comes with GPUs) [default: the configuration's
    /// `attributes`, which the flag replaces].
    #[arg(long, value_name = "ATTR", value_delimiter = ',')]
    pub attributes: Vec<String>,
    /// The rack this node sits in: accelerator binding never crosses racks (spec 01)
    /// [default: the agent configuration's `rack`, else `default`].
    #[arg(long)]
    pub rack: Option<String>,
    /// Where a node with accelerators serves its accelerator service to the NNodes bound to it
    /// (token-checked with the agent token); `none` = no service. [default: 0.0.0.0:0, any free
    /// port]
    #[arg(long, value_name = "ADDR")]
    pub accel_listen: Option<String>,
    /// Certificate (PEM) of the accelerator service: with `--accel-key`, it speaks TLS.
    #[arg(long, requires = "accel_key")]
    pub accel_cert: Option<PathBuf>,
    /// Private key (PEM) of the accelerator service.
    #[arg(long, requires = "accel_cert")]
    pub accel_key: Option<PathBuf>,
    /// Check the configuration (the file, these flags and the environment) as a start would —
    /// bounds, the token file, certificates, the work directory — and ask the server whether it
    /// takes the agent token, then print what the agent would offer and exit: 0 if it would
    /// start. Creates, locks and registers nothing (the work directory may be a running agent's).
    #[arg(long)]
    pub check: bool,
    /// With `--check`: do not ask the server (the configuration of a node whose server is not
    /// up yet).
    #[arg(long, requires = "check")]
    pub offline: bool,
    #[command(flatten)]
    pub logs: super::logging::LogArgs,
}

/// `--stale-keep`'s value: a keep, or `never` (`StaleKeep(None)`).
#[derive(Clone, Copy, Debug)]
pub struct StaleKeep(pub Option<std::time::Duration>);

fn stale_keep_flag(s: &str) -> Result<StaleKeep, String> {
    hetsched_agent::config::parse_stale_keep(s).map(StaleKeep)
}

/// `--cores`: a number of cores, refused here (naming the flag) as the configuration's `cores`
/// is, rather than by the server at registration.
fn parse_cores(s: &str) -> Result<u32, String> {
    let cores = s.parse::<u32>().map_err(|e| e.to_string())?;
    hetsched_agent::config::check_cores(cores)
}

/// Where an agent's listener binds (`flag`: `--log-listen`, `--accel-listen`): the flag's
/// `given` value (`none`: no listener), else the configuration's, else any free port on every
/// interface. An address must be an IP address and port ([`hetsched_core::input::listen`]).
pub(super) fn agent_listen(
    flag: &str,
    given: Option<&str>,
    configured: Option<Option<SocketAddr>>,
) -> anyhow::Result<Option<SocketAddr>> {
    Ok(match given {
        Some("none") => None,
        // The file's `none` (`Some(None)`) too.
        None => configured.unwrap_or(Some(SocketAddr::from(([0, 0, 0, 0], 0)))),
        Some(s) => Some(
            hetsched_core::input::listen::parse(s)
                .map_err(|e| anyhow::anyhow!("{flag} `{s}`: {e}, or none for no listener"))?,
        ),
    })
}

/// Where (line, column) the first configuration key `message` names is written in `src`: a
/// word of the message that reads as a key (`max_attempts`, `fair_share.half_life`,
/// `allocation[0].server`; a flag, `--dead-timeout`, is none) and that the file holds. `None`
/// when it names none the file holds (its value is a default, or came by flag).
fn first_key_written(
    src: &hetsched_core::input::Source<'_>,
    message: &str,
) -> Option<(usize, usize)> {
    let keyish = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '[' | ']');
    message
        .split(|c: char| !keyish(c))
        .map(|w| w.trim_end_matches('.'))
        .filter(|w| w.contains('_') || w.contains('.'))
        .find_map(|w| src.key_at(w))
        .map(|at| src.line_col(at))
}

/// `message` with each whole-word `field` (not part of a longer name: `heartbeat_interval` in
/// `idle_heartbeat_interval`) written as `flag`.
fn name_field_by_flag(message: &str, field: &str, flag: &str) -> String {
    let word = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let mut out = String::with_capacity(message.len());
    let mut rest = message;
    while let Some(at) = rest.find(field) {
        let (before, after) = (&rest[..at], &rest[at + field.len()..]);
        let whole = !before.ends_with(word) && !after.starts_with(word);
        out.push_str(before);
        out.push_str(if whole { flag } else { field });
        rest = after;
    }
    out.push_str(rest);
    out
}

fn nanos(d: humantime::Duration) -> u64 {
    std::time::Duration::from(d).as_nanos() as u64
}

/// The `[tls]` keys an error about a certificate or key names (`tls.cert: cannot read …`).
const TLS_KEYS: &[&str] = &["tls.cert", "tls.key", "tls.agent_ca"];

/// `e`, which names a file of the configuration `config` (`src`), prefixed with the file and
/// the line and column of the first of `keys` it names that the file holds — as a bound's or a
/// parse error's is — or `e` as it is when it names none (a flag's value, a default).
fn at_config_key(
    e: anyhow::Error,
    config: &std::path::Path,
    src: &hetsched_core::input::Source<'_>,
    keys: &[&str],
) -> anyhow::Error {
    let message = format!("{e:#}");
    let Some((line, column)) = keys
        .iter()
        .filter(|k| message.contains(**k))
        .find_map(|k| src.key_at(k))
        .map(|at| src.line_col(at))
    else {
        return e;
    };
    // An error that names the file already (`server.toml: log_file …`) names it once.
    let file = config.display().to_string();
    let message = message
        .strip_prefix(&format!("{file}: "))
        .unwrap_or(&message);
    anyhow::anyhow!("{file}:{line}:{column}: {message}")
}

/// Warns of what the configuration accepts but most likely did not mean, at its line: an
/// empty `[retention]` table (no `keep_finished`, no `keep_jobs`) purges nothing, as no table
/// would — its writer meant some rule.
fn warn_of_slips(
    config: &ServerConfig,
    file: Option<&std::path::Path>,
    src: &hetsched_core::input::Source<'_>,
) {
    if config.retention.as_ref().is_some_and(|r| r.is_empty()) {
        let at = match (file, src.key_at("retention")) {
            (Some(p), Some(at)) => {
                let (line, column) = src.line_col(at);
                format!("{}:{line}:{column}: ", p.display())
            }
            (Some(p), None) => format!("{}: ", p.display()),
            (None, _) => String::new(),
        };
        tracing::warn!(
            "{at}[retention] names neither keep_finished nor keep_jobs: it purges nothing, and \
             finished jobs are kept until `hetsched purge` (docs/runtime.md, \"Retention\")"
        );
    }
}

/// Runs the server until a signal.
pub async fn server(a: ServerArgs) -> anyhow::Result<()> {
    if let Some(command) = a.command {
        return server_command(command);
    }
    // The file's text is kept: a bound refused once it has parsed is located in it.
    let mut text = String::new();
    let mut config = match &a.config {
        Some(path) => {
            text = std::fs::read_to_string(path)
                .with_context(|| format!("reading {}", path.display()))?;
            ServerConfig::parse(&path.display().to_string(), &text)?
        }
        None => ServerConfig::default(),
    };
    if let Some(d) = a.data_dir {
        config.data_dir = d;
    }
    if let Some(l) = a.listen {
        config.listen = l;
    }
    if let Some(p) = a.policy {
        config.policy = p;
    }
    // Which timings came by flag: (dead timeout, heartbeat, idle heartbeat).
    let timing_flags = (
        a.dead_timeout.is_some(),
        a.heartbeat_interval.is_some(),
        a.idle_heartbeat_interval.is_some(),
    );
    if let Some(d) = a.dead_timeout {
        config.dead_timeout = hetsched_core::input::Duration(nanos(d));
    }
    if let Some(d) = a.heartbeat_interval {
        config.heartbeat_interval = hetsched_core::input::Duration(nanos(d));
    }
    if let Some(d) = a.idle_heartbeat_interval {
        config.idle_heartbeat_interval = Some(hetsched_core::input::Duration(nanos(d)));
    }
    if let Some(h) = a.http_listen {
        config.http_listen = Some(h);
    }
    config.set_aside = a.set_aside;
    config.set_aside_topologies = a.set_aside_topology;
    // The server checks the bounds again, naming the configuration's fields: a value given by
    // flag is named here by its flag (`--dead-timeout 0s` is no `dead_timeout` of the user's).
    config.validate().map_err(|e| {
        let e = [
            (
                timing_flags.2,
                "idle_heartbeat_interval",
                "--idle-heartbeat-interval",
            ),
            (timing_flags.1, "heartbeat_interval", "--heartbeat-interval"),
            (timing_flags.0, "dead_timeout", "--dead-timeout"),
        ]
        .into_iter()
        .filter(|&(given, ..)| given)
        .fold(e, |e, (_, field, flag)| name_field_by_flag(&e, field, flag));
        match a.config.as_deref() {
            // The file its fields are in, when one was read, at the first key the message
            // names that the file holds (`server.toml:1:1: max_attempts must be …`), as a
            // parse error is.
            Some(p) => {
                let src = hetsched_core::input::Source::new("", &text);
                match first_key_written(&src, &e) {
                    Some((line, column)) => anyhow::anyhow!(
                        "invalid server configuration: {}:{line}:{column}: {e}",
                        p.display()
                    ),
                    None => anyhow::anyhow!("invalid server configuration ({}): {e}", p.display()),
                }
            }
            None => anyhow::anyhow!("invalid server configuration: {e}"),
        }
    })?;
    check_agent_args(&config, a.config.as_deref())?;
    let logs = super::logging::Settings::resolve(
        &a.logs,
        config.log_format,
        config.log_file.as_deref(),
        a.config.as_deref(),
    );
    // A `log_file` from the file is named at its line, as its other keys are.
    let src = hetsched_core::input::Source::new("", &text);
    let at_key = |e: anyhow::Error, keys: &[&str]| match a.config.as_deref() {
        Some(p) => at_config_key(e, p, &src, keys),
        None => e,
    };
    if a.check {
        // The check writes nothing, so its own log goes to standard error.
        logs.check().map_err(|e| at_key(e, &["log_file"]))?;
        super::logging::init("info", logs.format, None);
        warn_of_slips(&config, a.config.as_deref(), &src);
        let running = hetsched_server::check(&config).map_err(|e| at_key(e.into(), TLS_KEYS))?;
        let stamp = hetsched_server::store_stamp(&config.data_dir)?;
        println!(
            "{}: OK (listen {}, policy {}, data in {}{}{}{}{}){}",
            a.config
                .as_deref()
                .map_or("the default configuration".into(), |p| p
                    .display()
                    .to_string()),
            config.listen,
            config.policy,
            config.data_dir.display(),
            config
                .http_listen
                .map_or(String::new(), |h| format!(", HTTP on {h}")),
            if config.tls.is_some() { ", TLS" } else { "" },
            logs.file.as_ref().map_or(String::new(), |(f, _)| format!(
                ", {} log in {}",
                logs.format,
                f.display()
            )),
            // What a start would open: its schema, and the binary that last opened it.
            stamp.map_or(String::new(), |s| format!(
                ", store schema {}, last opened by hetsched {}",
                s.schema,
                s.version.as_deref().unwrap_or("unknown")
            )),
            running.map_or(String::new(), |pid| format!(
                "; a server runs on {} (PID {pid}): it reads the configuration when it restarts",
                config.data_dir.display()
            ))
        );
        return Ok(());
    }
    let log_file = logs.open().map_err(|e| at_key(e, &["log_file"]))?;
    super::logging::init("info", logs.format, log_file.clone());
    warn_of_slips(&config, a.config.as_deref(), &src);
    super::logging::on_hangups(
        "the server goes on: it reads its configuration only when it starts (check a new one \
         with `hetsched server --check`, then restart it) and logs to standard error, which its \
         supervisor keeps and rotates (with --log-file, a SIGHUP reopens that file)",
        log_file,
    );
    // Registered before the start writes DATA_DIR/address: a SIGTERM sent as soon as the
    // address is there stops the server cleanly instead of killing it.
    let mut signals = hetsched_agent::shutdown::Signals::new();
    let handle = hetsched_server::start(config.clone())
        .await
        .map_err(|e| at_key(e.into(), TLS_KEYS))?;
    println!(
        "hetsched server listening on {} (policy {}, data in {}, client token in {}, agent token in {})",
        handle.addr,
        config.policy,
        config.data_dir.display(),
        hetsched_server::token_path(&config.data_dir).display(),
        hetsched_server::agent_token_path(&config.data_dir).display()
    );
    if let Some(h) = handle.http_addr {
        let scheme = if config.tls.is_some() {
            "https"
        } else {
            "http"
        };
        println!(
            "dashboard on {scheme}://{h}/ and metrics on {scheme}://{h}/metrics (token in {})",
            config
                .data_dir
                .join(hetsched_server::dashboard::READ_TOKEN)
                .display()
        );
    }
    // Said in the log, as the agents say theirs: a log that just ends reads as a crash.
    let signal = signals.next().await;
    tracing::info!(
        "{signal}: stopping: no new calls; the state stays in {dir} (`hetsched server \
         --data-dir {dir}` goes on from it)",
        dir = config.data_dir.display()
    );
    handle.stop().await?;
    tracing::info!("server stopped");
    Ok(())
}

/// Reads the private key of a listener's certificate (`flag`, e.g. `--log-key`), and the
/// warning to print when other users may read it (a secret, as the agent token is; the server
/// warns of its own TLS key the same way).
pub fn read_private_key(
    flag: &str,
    path: &std::path::Path,
) -> anyhow::Result<(Vec<u8>, Option<String>)> {
    use std::os::unix::fs::MetadataExt;
    let key = std::fs::read(path).with_context(|| format!("{flag}: reading {}", path.display()))?;
    let warning = std::fs::metadata(path)
        .ok()
        .filter(|m| m.mode() & 0o077 != 0)
        .map(|m| {
            format!(
                "{flag}: {} is readable by other users (mode {:o}): `chmod 600` it",
                path.display(),
                m.mode() & 0o777
            )
        });
    Ok((key, warning))
}

/// Reads a listener's certificate chain (`cert_flag`, e.g. `--log-cert`) and private key
/// (`key_flag`), printing [`read_private_key`]'s warning, and checks them as the listener will
/// (`hetsched_proto::listen::tls_config`), so that a bad one stops the agent at start naming
/// the flag and the file (`--log-cert /path: the certificate: no certificate in the PEM`).
pub fn read_listener_tls(
    cert_flag: &str,
    cert: &std::path::Path,
    key_flag: &str,
    key: &std::path::Path,
) -> anyhow::Result<(Vec<u8>, Vec<u8>)> {
    let cert_pem = std::fs::read(cert)
        .with_context(|| format!("{cert_flag} {}: reading it", cert.display()))?;
    let (key_pem, warning) = read_private_key(key_flag, key)?;
    if let Some(w) = warning {
        eprintln!("warning: {w}");
    }
    use hetsched_proto::listen::TlsError;
    match hetsched_proto::listen::tls_config(&cert_pem, &key_pem) {
        Ok(_) => Ok((cert_pem, key_pem)),
        Err(e @ TlsError::Certificate(_)) => {
            anyhow::bail!("{cert_flag} {}: {e}", cert.display())
        }
        Err(e @ TlsError::Key(_)) => anyhow::bail!("{key_flag} {}: {e}", key.display()),
        Err(e @ TlsError::Refused(_)) => anyhow::bail!(
            "{cert_flag} {} and {key_flag} {}: {e}",
            cert.display(),
            key.display()
        ),
    }
}

/// Who reads a token ([`read_token`]): each finds it elsewhere, and the error says where.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TokenReader {
    /// A client command.
    Client,
    /// An agent.
    Agent,
}

/// How to write `host`, an IPv6 address with or without a port and no brackets, as a server
/// address: the whole as the address (`::1:7420` is one), or the part before the last `:` as
/// the address and the rest as the port (`::1:41845`: 41845 is no group of an address).
fn ipv6_hint(host: &str, address: &str, port: &str) -> String {
    let whole = host.parse::<std::net::Ipv6Addr>().is_ok();
    let split = address.parse::<std::net::Ipv6Addr>().is_ok() && port.parse::<u16>().is_ok();
    match (whole, split) {
        (true, true) => {
            format!("`[{host}]:{DEFAULT_PORT}`, or `[{address}]:{port}` if {port} is the port")
        }
        (false, true) => format!("`[{address}]:{port}`"),
        (true, false) => format!("`[{host}]:{DEFAULT_PORT}`"),
        (false, false) => "`[ADDRESS]:PORT`".to_string(),
    }
}

/// Reads a token from `path` for `reader`: refuses an empty file and warns when other users may
/// read it.
pub fn read_token(path: &std::path::Path, reader: TokenReader) -> anyhow::Result<String> {
    use std::os::unix::fs::MetadataExt;
    let t = std::fs::read_to_string(path).with_context(|| match reader {
        TokenReader::Client => format!(
            "reading the token from {} (the server writes DATA_DIR/token for the admin; a \
             user's own comes from `hetsched user add`; pass --token-file or \
             HETSCHED_TOKEN_FILE, or put yours in ~/.config/hetsched/token)",
            path.display()
        ),
        TokenReader::Agent => format!(
            "reading the agent token from {} (the server writes DATA_DIR/agent-token; pass \
             --token-file or HETSCHED_AGENT_TOKEN_FILE, or set `token_file` in the agent's \
             configuration)",
            path.display()
        ),
    })?;
    if let Ok(m) = std::fs::metadata(path)
        && m.mode() & 0o077 != 0
    {
        eprintln!(
            "warning: {} is readable by other users (mode {:o}): `chmod 600` it",
            path.display(),
            m.mode() & 0o777
        );
    }
    let t = t.trim();
    if t.is_empty() {
        bail!("{}: the token file is empty", path.display());
    }
    Ok(t.to_string())
}

/// Refuses a CA certificate with a plain `http://` URL: the token would travel in clear while
/// the user believes TLS protects it.
/// The port `hetsched server` listens on unless told otherwise: a server named without a port
/// is looked for there.
pub const DEFAULT_PORT: u16 = 7420;

/// The URL of a server named `raw` on the command line or in a configuration: `http://HOST:PORT`
/// and `https://HOST:PORT` as written; a bare `HOST[:PORT]` (what the server writes to
/// `DATA_DIR/address`) with `https://` when a CA certificate is given (`tls`), else `http://`,
/// and port [`DEFAULT_PORT`] when it has none. Anything else is refused, saying what is expected.
pub fn server_url(raw: &str, tls: bool) -> anyhow::Result<String> {
    const EXPECTED: &str = "expected http://HOST:PORT, https://HOST:PORT or HOST[:PORT]";
    let raw = raw.trim();
    let url = match raw.split_once("://") {
        Some((scheme, rest)) => {
            if !matches!(scheme, "http" | "https") {
                bail!(
                    "`{raw}`: the scheme `{scheme}://` is neither http:// nor https:// ({EXPECTED})"
                );
            }
            if rest.trim_end_matches('/').is_empty() {
                bail!("`{raw}`: no host ({EXPECTED})");
            }
            raw.trim_end_matches('/').to_string()
        }
        None => {
            let host = raw.trim_end_matches('/');
            if host.is_empty() {
                bail!("empty ({EXPECTED})");
            }
            if host.contains('/') {
                bail!("`{raw}`: a bare host takes no path ({EXPECTED})");
            }
            let has_port = match host.rsplit_once(':') {
                // `[v6]:port`, or `host:port`
                Some((h, _)) if host.starts_with('[') => h.ends_with(']'),
                Some((h, port)) if h.contains(':') => {
                    bail!(
                        "`{raw}`: write an IPv6 address in brackets ({})",
                        ipv6_hint(host, h, port)
                    )
                }
                Some(_) => true,
                None => false,
            };
            let scheme = if tls { "https" } else { "http" };
            if has_port {
                format!("{scheme}://{host}")
            } else {
                format!("{scheme}://{host}:{DEFAULT_PORT}")
            }
        }
    };
    let uri: tonic::codegen::http::Uri = url
        .parse()
        .map_err(|e| anyhow::anyhow!("`{raw}`: {e} ({EXPECTED})"))?;
    if uri.host().is_none_or(str::is_empty) {
        bail!("`{raw}`: no host ({EXPECTED})");
    }
    if uri.path_and_query().is_some_and(|p| p.as_str() != "/") {
        bail!("`{raw}`: a server URL takes no path ({EXPECTED})");
    }
    let authority = uri.authority().map_or("", |a| a.as_str());
    if let Some((_, port)) = authority
        .rsplit_once(':')
        .filter(|_| !authority.ends_with(']'))
        && !port.parse::<u16>().is_ok_and(|p| p > 0)
    {
        bail!("`{raw}`: the port `{port}` is not a number from 1 to 65535 ({EXPECTED})");
    }
    Ok(url)
}

pub fn check_tls(server: &str, ca: bool) -> anyhow::Result<()> {
    if ca && !server.starts_with("https://") {
        bail!(
            "a CA certificate (--ca / HETSCHED_CA) is given but the server URL `{server}` is not \
             https://: the token would travel in clear; use an https:// URL"
        );
    }
    Ok(())
}

fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .ok()
        .filter(|s| !s.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "node".into())
}

/// The environment variables an agent reads below its flags and its configuration file.
const SERVER_ENV: &str = "HETSCHED_SERVER";
const TOKEN_FILE_ENV: &str = "HETSCHED_AGENT_TOKEN_FILE";
const CA_ENV: &str = "HETSCHED_CA";

/// Environment variable `name`'s value, if set and not empty (as clap's `env` reads one: an
/// empty value is no value).
fn from_env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

/// The agent's configuration file (`--config`), parsed: the configuration, the file's name and
/// its text (for errors at a line); the defaults without one.
fn read_agent_config(a: &AgentArgs) -> anyhow::Result<(AgentConfig, String, String)> {
    Ok(match &a.config {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("reading {}", path.display()))?;
            let origin = path.display().to_string();
            (AgentConfig::parse(&origin, &text)?, origin, text)
        }
        None => (AgentConfig::default(), String::new(), String::new()),
    })
}

/// Builds the agent's options from its configuration file (as [`read_agent_config`] reads it),
/// flags and detection.
pub fn agent_options(
    a: &AgentArgs,
    (mut config, origin, text): (AgentConfig, String, String),
) -> anyhow::Result<hetsched_agent::AgentOptions> {
    if !a.attributes.is_empty() {
        hetsched_core::model::cluster::attribute_set(a.attributes.iter().map(String::as_str))
            .map_err(|(_, e)| anyhow::anyhow!("--attributes: {e}"))?;
        config.attributes.clone_from(&a.attributes);
    }
    // Flag, then file, then environment, then default: the environment a login shell sets
    // for client commands (`HETSCHED_SERVER` is recommended there) must not silently point an
    // agent started from that shell away from the server its file names.
    let (server, server_from) = match (&a.server, &config.server, from_env(SERVER_ENV)) {
        (Some(s), _, _) => (s.clone(), "--server".to_string()),
        (None, Some(s), _) => (s.clone(), format!("{origin}: `server`")),
        (None, None, Some(s)) => (s, SERVER_ENV.to_string()),
        (None, None, None) => ("http://127.0.0.1:7420".into(), String::new()),
    };
    let token_file = a
        .token_file
        .clone()
        .or(config.token_file.clone())
        .or(from_env(TOKEN_FILE_ENV).map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from("hetsched-data/agent-token"));
    let token = read_token(&token_file, TokenReader::Agent)?;
    let ca =
        a.ca.clone()
            .or(config.ca.clone())
            .or(from_env(CA_ENV).map(PathBuf::from));
    let server = server_url(&server, ca.is_some()).with_context(|| server_from.clone())?;
    // With `[tls]` the CA also verifies the other agents' data listeners.
    check_tls(&server, ca.is_some() && config.tls.is_none())?;
    // The agent trusts no system store: without the CA it can never connect over TLS, and
    // retrying every second would hide a mistake that no wait mends (the client commands
    // refuse it alike).
    if server.starts_with("https://") && ca.is_none() {
        let from = if server_from.is_empty() {
            String::new()
        } else {
            format!(" ({server_from})")
        };
        bail!(
            "the server URL `{server}`{from} is https://: give the CA certificate that signed \
             the server's certificate (--ca FILE, the configuration's `ca` or HETSCHED_CA)"
        );
    }
    let ca_pem = match ca {
        Some(p) => Some(std::fs::read(&p).with_context(|| format!("reading {}", p.display()))?),
        None => None,
    };
    let src = hetsched_core::input::Source::new(&origin, &text);
    // The cluster file's rules, all entries together (at most 256 devices a node, a count of
    // at least 1), each error at its line.
    let mut accelerators: Vec<hetsched_proto::Accelerator> =
        hetsched_core::input::cluster::node_accelerators(&src, &config.accelerator, "accelerator")?
            .into_iter()
            .map(|d| hetsched_proto::Accelerator {
                kind: d.kind,
                memory_bytes: d.memory_bytes,
                speed: d.speed,
            })
            .collect();
    // What tasks see of each: the declared names (`visible`), else the index.
    let mut device_names: hetsched_agent::launch::DeviceNames =
        hetsched_core::input::cluster::visible_names(&config.accelerator).into();
    if accelerators.is_empty() {
        // Detected: each GPU, or each MIG instance of a split one, with the names tasks see.
        let detected = hetsched_agent::detect::Gpus::init().devices();
        accelerators = detected.accelerators;
        device_names = detected.names.into();
    }
    hetsched_agent::detect::log_disks();
    let (name, name_from) = match (&a.name, &config.name) {
        (Some(n), _) => (n.clone(), "--name".to_string()),
        (None, Some(n)) => (n.clone(), format!("{origin}: `name`")),
        (None, None) => (host_name(), "the host's name (pass --name)".to_string()),
    };
    // Checked here, as the server would at registration, before any path is made of it: the
    // default work directory is named after it, and `a/../../x` made directories outside it.
    if let Some(problem) = hetsched_core::input::cluster::node_name_problem(&name) {
        anyhow::bail!("{name_from}: {problem}");
    }
    let work_dir = match a.work_dir.clone().or(config.work_dir.clone()) {
        // Absolute from here on: workflow placeholders paste it into commands that run in the
        // submission's directory, not the agent's, and tasks `cd` elsewhere.
        Some(d) => std::path::absolute(&d)
            .with_context(|| format!("--work-dir {}: no absolute path", d.display()))?,
        None => hetsched_agent::workdir::default_dir(
            &name,
            hetsched_agent::workdir::euid(),
            std::env::var("XDG_STATE_HOME").ok().as_deref(),
            std::env::var("HOME").ok().as_deref(),
        )
        .context("no private default work directory (neither XDG_STATE_HOME nor HOME is set): pass --work-dir")?,
    };
    Ok(hetsched_agent::AgentOptions {
        server,
        token,
        ca_pem,
        resources: hetsched_agent::detect::Resources {
            cores: a
                .cores
                .or(config.cores.as_ref().map(|c| *c.get_ref()))
                .unwrap_or_else(hetsched_agent::detect::cores),
            memory_bytes: hetsched_agent::detect::node_memory(
                config.memory.as_ref().map(|m| m.get_ref().as_u64()),
            ),
            accelerators,
            device_names,
        },
        core_speed: config.core_speed.unwrap_or(1.0),
        disk_read_bw: config.disk_read.map_or(200e6, |b| b.0),
        work_dir,
        name,
        no_exec: a.no_exec,
        exe: std::env::current_exe().ok(),
        // Set by [`agent`], which has resolved the log settings.
        log: Default::default(),
        log_listen: agent_listen("--log-listen", a.log_listen.as_deref(), config.log_listen)?,
        log_tls: match (&a.log_cert, &a.log_key) {
            (Some(c), Some(k)) => Some(read_listener_tls("--log-cert", c, "--log-key", k)?),
            _ => None,
        },
        drain: a.drain,
        kill_grace: match a.kill_grace.map(std::time::Duration::from) {
            Some(g) if g > hetsched_agent::launch::MAX_KILL_GRACE => anyhow::bail!(
                "--kill-grace {}: at most {}",
                humantime::format_duration(g),
                humantime::format_duration(hetsched_agent::launch::MAX_KILL_GRACE)
            ),
            Some(g) => g,
            None => config
                .kill_grace()
                .unwrap_or(hetsched_agent::launch::DEFAULT_KILL_GRACE),
        },
        time_limit: match a.time_limit.as_deref() {
            Some("auto") => super::allocation::auto_time_limit()?,
            Some(t) => Some(agent_time_limit(t)?),
            None => match config.time_limit() {
                // The file's `auto` means what the flag's does.
                Some(hetsched_agent::config::TimeLimit::Auto) => {
                    super::allocation::auto_time_limit()
                        .with_context(|| format!("{origin}: time_limit = \"auto\""))?
                }
                Some(hetsched_agent::config::TimeLimit::For(t)) => Some(t),
                None => None,
            },
        },
        idle_timeout: match a.idle_timeout.map(std::time::Duration::from) {
            // As the file's `idle_timeout` is (`AgentConfig::parse`): an agent that leaves the
            // moment it is idle never takes work.
            Some(t) if t.as_nanos() < u128::from(hetsched_agent::config::MIN_IDLE_TIMEOUT_NS) => {
                anyhow::bail!(
                    "--idle-timeout ({}): at least 1s (leave it out for never)",
                    humantime::format_duration(t)
                )
            }
            Some(t) => Some(t),
            None => config.idle_timeout(),
        },
        run_as_owner: a.run_as_owner || config.run_as_owner,
        stale_keep: match a.stale_keep {
            Some(StaleKeep(k)) => k,
            None => config
                .stale_keep()
                .unwrap_or(Some(hetsched_agent::job_nonce::DEFAULT_STALE_KEEP)),
        },
        processes: Default::default(),
        accel: super::accel_cli::agent_accel_options(a, &config)?,
        advertise: config.advertise.clone(),
        data: super::workflow::agent_data_options(&config)?,
    })
}

/// `agent --check`'s line: what the agent would offer, where it works and what the server said.
fn agent_check_line(
    a: &AgentArgs,
    opts: &hetsched_agent::AgentOptions,
    found: &hetsched_agent::check::Checked,
) -> String {
    use hetsched_agent::check::WorkDir;
    let r = &opts.resources;
    let mut offers = vec![
        hetsched_core::text::count(u64::from(r.cores), "core"),
        format!(
            "{} memory",
            bytesize::ByteSize(r.memory_bytes).display().iec()
        ),
    ];
    if !r.accelerators.is_empty() {
        offers.push(hetsched_core::text::count(
            r.accelerators.len() as u64,
            "GPU",
        ));
    }
    if opts.core_speed != 1.0 {
        offers.push(format!("core speed {}", opts.core_speed));
    }
    if !opts.data.attributes.is_empty() {
        offers.push(format!("attributes {}", opts.data.attributes.join(",")));
    }
    offers.push(format!("rack {}", opts.accel.rack));
    if let Some(t) = opts.time_limit {
        offers.push(format!("time limit {}", humantime::format_duration(t)));
    }
    if let Some(t) = opts.idle_timeout {
        offers.push(format!("idle timeout {}", humantime::format_duration(t)));
    }
    if opts.run_as_owner {
        offers.push("tasks run as their owners".into());
    }
    let dir = opts.work_dir.display();
    let work_dir = match &found.work_dir {
        WorkDir::Missing => format!("work dir {dir} (made at start)"),
        WorkDir::Ready { opened: false } => format!("work dir {dir}"),
        WorkDir::Ready { opened: true } => {
            format!("work dir {dir} (open to other users: closed to 0700 at start)")
        }
        WorkDir::Held(pid) => format!(
            "work dir {dir}; an agent runs there{}: a second one waits for it to exit",
            pid.map_or(String::new(), |p| format!(" (PID {p})"))
        ),
    };
    let server = if found.server_asked {
        format!("server {} takes the agent token", opts.server)
    } else {
        format!("server {} not asked (--offline)", opts.server)
    };
    format!(
        "{}: OK (node {}: {}; {work_dir}; {server})",
        a.config
            .as_deref()
            .map_or("the default configuration".into(), |p| p
                .display()
                .to_string()),
        opts.name,
        offers.join(", ")
    )
}

/// Runs an agent until a signal.
pub async fn agent(a: AgentArgs) -> anyhow::Result<()> {
    let config = read_agent_config(&a)?;
    let logs = super::logging::Settings::resolve(
        &a.logs,
        config.0.log_format,
        config.0.log_file.as_deref(),
        a.config.as_deref(),
    );
    if a.check {
        // The check writes nothing, so its own log (detection's words) goes to standard error.
        logs.check()?;
        super::logging::init("warn", logs.format, None);
        let opts = agent_options(&a, config)?;
        let found = hetsched_agent::check::check(&opts, !a.offline).await?;
        println!("{}", agent_check_line(&a, &opts, &found));
        return Ok(());
    }
    let log_file = logs.open()?;
    super::logging::init("info", logs.format, log_file.clone());
    // Where the log is not standard error (a file), or is read by a program (JSON), the
    // reason the agent exits is its last line there too: standard error alone may go nowhere
    // anyone looks, and the log would end on the retries before it. (Text on standard error
    // already gets it, from `main`.)
    let logged = log_file.is_some()
        || matches!(
            logs.format,
            hetsched_core::input::log_format::LogFormat::Json
        );
    run_agent(a, config, &logs, log_file)
        .await
        .inspect_err(|e| {
            if logged {
                tracing::error!("the agent stops: {e:#}");
            }
        })
}

/// [`agent`] once its log is set up: the agent's run, until a signal or a fatal error.
async fn run_agent(
    a: AgentArgs,
    config: (AgentConfig, String, String),
    logs: &super::logging::Settings,
    log_file: Option<std::sync::Arc<super::logging::LogFile>>,
) -> anyhow::Result<()> {
    super::logging::on_hangups(
        "the agent goes on with its tasks: it reads its configuration only when it starts, and \
         logs to standard error, which its supervisor keeps and rotates (SIGTERM stops it; with \
         --log-file, a SIGHUP reopens that file)",
        log_file,
    );
    let mut opts = agent_options(&a, config)?;
    // The guard writes its line where this log goes, opening the file by the same path (made
    // absolute: nothing ties the guard to this process's working directory).
    opts.log = hetsched_agent::guard::LogTo {
        file: logs
            .file
            .as_ref()
            .map(|(path, _)| std::path::absolute(path).unwrap_or_else(|_| path.clone())),
        format: logs.format,
    };
    tracing::info!(
        name = %opts.name,
        version = hetsched_agent::version::VERSION,
        server = %opts.server,
        cores = opts.resources.cores,
        memory = opts.resources.memory_bytes,
        gpus = opts.resources.accelerators.len(),
        time_limit = %opts
            .time_limit
            .map_or("none".to_string(), |t| humantime::format_duration(t).to_string()),
        fetch_bandwidth = %opts.data.fetch_bandwidth,
        "agent starting"
    );
    // The first SIGTERM/SIGINT shuts the agent down gracefully (see hetsched_agent::shutdown);
    // a second one kills the running tasks' process groups and exits at once.
    let processes = opts.processes.clone();
    let (first_tx, first_rx) = tokio::sync::oneshot::channel::<()>();
    let mut signals = hetsched_agent::shutdown::Signals::new();
    tokio::spawn(async move {
        let name = signals.next().await;
        tracing::info!("{name}: shutting down (send another signal to exit at once)");
        let _ = first_tx.send(());
        let name = signals.next().await;
        let killed = processes.kill_all();
        tracing::warn!(
            "{name} again: killed {}; exiting now",
            hetsched_core::text::count(killed as u64, "running task")
        );
        std::process::exit(130);
    });
    hetsched_agent::run(opts, async {
        let _ = first_rx.await;
    })
    .await
    .map_err(|e| match e {
        // A script or supervisor tells a wrong URL or server version from a failure that may
        // pass, as with the client commands.
        hetsched_agent::AgentError::Protocol(message) => anyhow::Error::new(super::human::Exit {
            status: super::human::PROTOCOL_STATUS,
            message,
        }),
        e => e.into(),
    })
}

/// The agent's `--time-limit` other than `auto`: a duration as job files write it (`11h50m`),
/// or as a clock, Slurm's and HyperQueue's `11:50:00` (`1-00:00:00` with days).
fn agent_time_limit(t: &str) -> anyhow::Result<std::time::Duration> {
    t.parse::<hetsched_core::input::Duration>()
        .map(|d| std::time::Duration::from_nanos(d.0))
        .map_err(|e| anyhow::anyhow!("--time-limit: {e} (a duration, or auto)"))
}

#[cfg(test)]
mod tests {
    use super::server_url;
    use hetsched_core::testkit::ScratchDir;

    /// Every duration flag of the server and the agent reads what `--time-limit` and job files
    /// read (`1.5m`, Slurm's `05:00`), and what it read before (`1h 30m`): before, these took
    /// only humantime's forms and refused `1.5m` and `05:00`.
    #[test]
    fn the_server_and_agent_duration_flags_read_as_job_files_do() {
        use clap::Parser;
        use std::time::Duration;
        #[derive(Parser)]
        struct Agent {
            #[command(flatten)]
            args: super::AgentArgs,
        }
        #[derive(Parser)]
        struct Server {
            #[command(flatten)]
            args: super::ServerArgs,
        }
        let agent =
            Agent::try_parse_from(["agent", "--idle-timeout", "05:00", "--kill-grace", "1.5m"])
                .expect("a clock and a fractional unit");
        let secs = |d: Option<humantime::Duration>| d.map(|d| Duration::from(d).as_secs());
        assert_eq!(secs(agent.args.idle_timeout), Some(300));
        assert_eq!(secs(agent.args.kill_grace), Some(90));
        let agent = Agent::try_parse_from(["agent", "--idle-timeout", "1h 30m"])
            .expect("humantime's form, as before");
        assert_eq!(secs(agent.args.idle_timeout), Some(5_400));
        let server = Server::try_parse_from([
            "server",
            "--dead-timeout",
            "0.5m",
            "--heartbeat-interval",
            "00:02",
            "--idle-heartbeat-interval",
            "1m",
        ])
        .expect("the server's too");
        assert_eq!(secs(server.args.dead_timeout), Some(30));
        assert_eq!(secs(server.args.heartbeat_interval), Some(2));
        assert_eq!(secs(server.args.idle_heartbeat_interval), Some(60));
        let refused = Agent::try_parse_from(["agent", "--idle-timeout", "soon"])
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            refused.contains("--idle-timeout") && refused.contains("invalid duration `soon`"),
            "{refused}"
        );
    }

    /// A relative `--work-dir` is made absolute once, at the start: workflow placeholders paste
    /// it into commands that run in the submission's directory, where a relative path named
    /// another place (or nothing).
    #[test]
    fn a_relative_work_directory_is_made_absolute_at_the_start() {
        use clap::Parser;
        #[derive(Parser)]
        struct Agent {
            #[command(flatten)]
            args: super::AgentArgs,
        }
        let dir = ScratchDir::new("serve", "absolute-work-dir");
        let token = dir.path().join("agent-token");
        std::fs::write(&token, "0123456789abcdef0123456789abcdef\n").expect("token");
        std::fs::set_permissions(
            &token,
            <std::fs::Permissions as std::os::unix::fs::PermissionsExt>::from_mode(0o600),
        )
        .expect("mode");
        let agent = Agent::try_parse_from([
            "agent",
            "--name",
            "a1",
            "--work-dir",
            "rel/work",
            "--token-file",
            token.to_str().expect("utf-8"),
        ])
        .expect("flags");
        let opts = super::agent_options(
            &agent.args,
            (Default::default(), String::new(), String::new()),
        )
        .expect("options");
        let here = std::env::current_dir().expect("cwd");
        assert_eq!(opts.work_dir, here.join("rel/work"));
        assert!(opts.work_dir.is_absolute());
    }

    /// An agent inside an allocation takes its length as the batch system writes it.
    #[test]
    fn an_agents_time_limit_reads_as_a_duration_or_a_slurm_clock() {
        use super::agent_time_limit;
        use std::time::Duration;
        assert_eq!(
            agent_time_limit("11h50m").ok(),
            Some(Duration::from_secs(42_600))
        );
        assert_eq!(
            agent_time_limit("11:50:00").ok(),
            Some(Duration::from_secs(42_600))
        );
        assert_eq!(
            agent_time_limit("1-00:00:00").ok(),
            Some(Duration::from_secs(86_400))
        );
        let e = agent_time_limit("11:75:00")
            .expect_err("bad minutes")
            .to_string();
        assert!(
            e.starts_with("--time-limit: invalid duration `11:75:00`"),
            "{e}"
        );
    }

    /// The private key of an agent's listener certificate (`--log-key`, `--accel-key`) is a
    /// secret as its token is: one other users may read is used with a warning naming the flag,
    /// the file and its mode, as the server warns of its own TLS key; a private one, without.
    #[test]
    fn a_listener_key_others_may_read_is_warned_about() {
        use super::read_private_key;
        use std::os::unix::fs::PermissionsExt;
        let dir = ScratchDir::new("serve", "listener-key");
        let key = dir.join("agent.key");
        std::fs::write(&key, "KEY").expect("key");
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).expect("open");
        let (bytes, warning) = read_private_key("--log-key", &key).expect("read");
        assert_eq!(bytes, b"KEY");
        let warning = warning.expect("warned");
        assert!(
            warning.contains("--log-key")
                && warning.contains(&key.display().to_string())
                && warning.contains("mode 644")
                && warning.contains("chmod 600"),
            "{warning}"
        );
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).expect("close");
        assert_eq!(read_private_key("--log-key", &key).expect("read").1, None);
    }

    /// A listener's certificate or key that the listener would refuse stops the agent at
    /// start naming the flag and the file (before, the agent said only `the certificate: no
    /// certificate in the PEM`, naming neither).
    #[test]
    fn a_bad_listener_certificate_or_key_names_the_flag_and_the_file() {
        use super::read_listener_tls;
        use std::os::unix::fs::PermissionsExt;
        let dir = ScratchDir::new("serve", "listener-tls");
        let tls = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/tls");
        let (cert, key) = (tls.join("server.pem"), dir.join("agent.key"));
        std::fs::copy(tls.join("server.key"), &key).expect("key");
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).expect("close");
        read_listener_tls("--log-cert", &cert, "--log-key", &key).expect("a good pair");
        let junk = dir.join("junk.pem");
        std::fs::write(&junk, "not PEM").expect("junk");
        let e = read_listener_tls("--log-cert", &junk, "--log-key", &key).expect_err("no cert");
        assert_eq!(
            format!("{e:#}"),
            format!(
                "--log-cert {}: the certificate: no certificate in the PEM",
                junk.display()
            )
        );
        std::fs::set_permissions(&junk, std::fs::Permissions::from_mode(0o600)).expect("close");
        let e = read_listener_tls("--accel-cert", &cert, "--accel-key", &junk).expect_err("no key");
        let e = format!("{e:#}");
        assert!(
            e.starts_with(&format!(
                "--accel-key {}: the private key: ",
                junk.display()
            )),
            "{e}"
        );
    }

    #[test]
    fn a_server_is_named_by_url_or_by_the_address_the_server_writes() {
        let read = |raw, tls| server_url(raw, tls).map_err(|e| format!("{e:#}"));
        assert_eq!(
            read("http://head:7420", false),
            Ok("http://head:7420".into())
        );
        assert_eq!(
            read("https://head:7420/", true),
            Ok("https://head:7420".into())
        );
        // DATA_DIR/address: host and port, no scheme.
        assert_eq!(
            read("127.0.0.1:39551", false),
            Ok("http://127.0.0.1:39551".into())
        );
        assert_eq!(read("head:7420", true), Ok("https://head:7420".into()));
        assert_eq!(read(" head ", false), Ok("http://head:7420".into()));
        assert_eq!(read("[::1]", false), Ok("http://[::1]:7420".into()));
        assert_eq!(read("[::1]:9", false), Ok("http://[::1]:9".into()));
        for (raw, says) in [
            (
                "ftp://head:7420",
                "the scheme `ftp://` is neither http:// nor https://",
            ),
            ("http://", "no host"),
            ("", "empty"),
            ("head:7420/api", "a bare host takes no path"),
            ("http://head:7420/api", "a server URL takes no path"),
            (
                "::1:7420",
                "write an IPv6 address in brackets (`[::1:7420]:7420`, or `[::1]:7420` if 7420 \
                 is the port)",
            ),
            (
                "::1:41845",
                "write an IPv6 address in brackets (`[::1]:41845`)",
            ),
            (
                "fe80::1",
                "write an IPv6 address in brackets (`[fe80::1]:7420`)",
            ),
            (
                "a:b:c",
                "write an IPv6 address in brackets (`[ADDRESS]:PORT`)",
            ),
            (
                "head:port",
                "the port `port` is not a number from 1 to 65535",
            ),
            ("http://head:0", "the port `0` is not"),
        ] {
            let e = read(raw, false).expect_err(raw);
            assert!(e.contains(says), "{raw}: {e}");
            assert!(
                e.contains("expected http://HOST:PORT") || e.contains("IPv6 address in brackets"),
                "{raw}: {e}"
            );
        }
    }
}
