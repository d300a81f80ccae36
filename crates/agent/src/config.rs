//! The agent's TOML configuration (`hetsched agent --config agent.toml`); command-line flags
//! override it. Resources not given are detected (cores, memory, NVIDIA GPUs through NVML).
//!
//! ```toml
//! server = "http://10.0.0.1:7420"
//! name = "gpu-node-3"               # default: the host name
//! token_file = "/etc/hetsched/token"
//! ca = "/etc/hetsched/ca.pem"       # with an https:// server
//! work_dir = "/var/lib/hetsched-agent" # task stdout/stderr
//! cores = 16                        # default: detected
//! memory = "64GiB"                  # default: detected
//! core_speed = 1.0
//! disk_read = "200MB/s"             # bytes/s; "1Gb/s" or "1Gbit/s" is bits (125 MB/s)
//! log_listen = "0.0.0.0:0"          # task outputs for `hetsched log` (default: any port; "none": off)
//! rack = "r1"                       # binding stays within a rack (default: "default")
//! accel_listen = "0.0.0.0:0"        # the accelerator service of a node with GPUs
//! advertise = "10.0.0.7:7431"       # where other agents reach this one (workflow data, PCDDB)
//! attributes = ["fpga", "bigmem"]   # what jobs and workflow tasks may `require` (`gpu` comes with GPUs)
//! kill_grace = "10s"                # a stopped task's time between SIGTERM and SIGKILL
//! time_limit = "11h 50m"            # how long the agent runs (its batch allocation, less a margin; "auto": ask Slurm or PBS)
//! idle_timeout = "5m"               # exit once nothing has run here for this long (at least 1s)
//! stale_keep = "7d"                 # delete job directories set aside in stale/ after this ("never": keep)
//! run_as_owner = true               # a user's tasks run as its Unix account (agent as root)
//! max_input_bytes = "64GiB"         # the most written for one fetched workflow input
//! min_free_disk = "1GiB"            # fetched workflow inputs leave this free on work_dir's disk (0: off)
//! fetch_bandwidth = "100MiB"        # bytes/s all workflow input fetches together (0: no cap)
//! log_format = "text"               # or "json": one JSON object a line (`--log-format`)
//! log_file = "/var/log/hetsched/agent.log" # append the log here, not to stderr; reopened on SIGHUP
//! [tls]                             # optional: workflow data and PCDDB between agents over TLS
//! cert = "agent.pem"                # (peers verify it with their `ca`; same as the server's)
//! key = "agent.key"
//! [[accelerator]]                   # declared GPUs replace detected ones
//! kind = "a100"
//! count = 4
//! memory = "40GiB"
//! speed = 3.0
//! [[accelerator]]                   # MIG instances: tasks see each by its UUID
//! kind = "h100-1g"
//! memory = "10GiB"
//! visible = ["MIG-5c4b7a2e-9d1f-5e0b-8c3a-1f2e3d4c5b6a", "MIG-9e0a1b2c-3d4e-5f60-7182-93a4b5c6d7e8"]
//!                                   # `CUDA_VISIBLE_DEVICES` names, one a device (`count` = 2)
//! ```
//!
//! **Workflow inputs and the node's disk.** A workflow instance's inputs are fetched from their
//! producers' agents into `work_dir` ([`crate::dataflow`]). Two settings bound what that writes:
//!
//! - `max_input_bytes` (default 64 GiB, at least 1 byte) bounds **one** input: a producer's
//!   agent that sends more (misbehaving, or any holder of the agent token) fails the fetch as
//!   soon as it goes over. It is per input, and stays so.
//! - `min_free_disk` (default 1 GiB; `0` turns it off) is the free space fetches leave on the
//!   filesystem holding `work_dir`: read with `statvfs` (the space an unprivileged process may
//!   still use) before each input is asked for, and again every 16 MiB written and before any
//!   refusal, the fetch counting its own writes in between. A fetch that would take the disk
//!   below it stops before writing the chunk that would, and the instance's attempt is
//!   reported interrupted (`dataflow::NO_ROOM`: the server runs it again elsewhere, a lost
//!   attempt, not a failure) with the input, the producer, the directory, the free space and the
//!   floor named; its input copies, the partial one and those fetched before it, are removed. A
//!   write the disk refuses for want of space (a floor of 0, or other writers faster than the
//!   checks) ends the same way.
//!
//! There is no third bound on the total of one instance's inputs: a full disk is what breaks a
//! node (its ledger, task logs, other tasks' outputs), and the floor protects against it
//! whatever fills it — one instance with many inputs, many instances fetching at once, or
//! both — which a per-instance total would not (many instances, each under it, still fill the
//! disk), while it would refuse an instance whose inputs the disk holds with room to spare.
//! The number and size of an instance's inputs are its workflow's, which its submitter wrote
//! (and `core::input::limits` bounds); only one input's size is up to another node's agent,
//! which `max_input_bytes` bounds. Concurrent fetches each count only their own writes between
//! two readings, so together they may go below the floor by up to 16 MiB each before the next
//! reading stops them: set the floor with that margin.
//!
//! **Workflow inputs and the node's link.** `fetch_bandwidth` caps the rate at which the agent
//! fetches workflow inputs from other agents, in bytes per second: all its fetches together (many
//! instances fetching at once, each with many inputs) share one token bucket
//! ([`crate::fetch_bandwidth`]), so that input fetches leave room on the node's link for the
//! tasks running on it. Written as a size (`"100MiB"`, `"1.5GB"`, a number of bytes), with or
//! without `/s` (`"100MiB/s"`, as `disk_read` is written; with `/s` a lowercase `b` or `bit` counts
//! bits, `"800Mb/s"`, as in every rate). Absent or `0`: no cap (the
//! default). Otherwise at least 64 KiB/s ([`crate::fetch_bandwidth::MIN_FETCH_BANDWIDTH`]):
//! below that, more likely a typo for a larger unit than a setting, it is refused at its line.
//! A capped instance shows `fetching` (`hetsched tasks`, `hetsched job`) for as long as its
//! inputs take; its `fetch_ms` says how long that was.
//!
//! On an ANode the same two settings bound the input files NNodes ship with their offloads
//! (`accel::service`): each file at most `max_input_bytes`, and none taking `work_dir`'s disk
//! below `min_free_disk`; such an offload is refused, its files removed, and the NNode reports
//! the attempt interrupted.
//!
//! A fetch stopped by the floor is the node's condition, not the task's fault, yet it is
//! reported as a failure of the attempt (the task's `retries` apply, and the message says why),
//! not as interrupted: the server runs an interrupted workflow instance again without counting,
//! and as nothing steers it off the node whose disk is full, it could come back there for ever.

use bytesize::ByteSize;
use hetsched_core::input::Bandwidth;
use hetsched_core::input::cluster::AcceleratorSpec;
use serde::Deserialize;
use std::path::PathBuf;

/// Agent settings as written.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AgentConfig {
    /// Server URL.
    pub server: Option<String>,
    /// Node name (unique in the cluster).
    pub name: Option<String>,
    /// File holding the server's token.
    pub token_file: Option<PathBuf>,
    /// CA certificate (PEM) for a TLS server.
    pub ca: Option<PathBuf>,
    /// Where task outputs go.
    pub work_dir: Option<PathBuf>,
    /// Cores offered to tasks (1 to `MAX_NODE_CORES`).
    pub cores: Option<serde_spanned::Spanned<u32>>,
    /// Memory offered to tasks (kept with where it is written: a figure no node has is refused
    /// at its line).
    #[serde(deserialize_with = "hetsched_core::input::spanned_byte_size")]
    pub memory: Option<serde_spanned::Spanned<ByteSize>>,
    /// Relative core speed.
    pub core_speed: Option<f64>,
    /// Disk read bandwidth.
    pub disk_read: Option<Bandwidth>,
    /// Where the log listener binds (`hetsched log` reads task outputs through it); `none`
    /// (`Some(None)`): no listener, as `--log-listen none`.
    #[serde(deserialize_with = "hetsched_core::input::listen::deserialize_or_none")]
    pub log_listen: Option<Option<std::net::SocketAddr>>,
    /// The rack the node sits in (spec 01: binding never crosses racks).
    pub rack: Option<String>,
    /// Where a node with accelerators serves its accelerator service (spec 01's AcCt); `none`
    /// (`Some(None)`): no service, as `--accel-listen none`.
    #[serde(deserialize_with = "hetsched_core::input::listen::deserialize_or_none")]
    pub accel_listen: Option<Option<std::net::SocketAddr>>,
    /// Where other agents reach this agent (`host:port` of its log listener, or of its TLS
    /// data listener with `[tls]`; issue 13).
    pub advertise: Option<String>,
    /// Attributes batch applications and workflow tasks may `require` (spec 05 §1; `gpu` is
    /// added for a node with accelerators); sent when the agent registers.
    pub attributes: Vec<String>,
    /// How long a task asked to stop (cancelled, out of time, the agent shutting down) has
    /// between SIGTERM and SIGKILL.
    pub kill_grace: Option<serde_spanned::Spanned<hetsched_core::input::Duration>>,
    /// How long the agent runs (e.g. the length of the batch allocation it runs in, less a
    /// margin): the server sends it no task whose time limit is longer than the time it has
    /// left, and `kill_grace` before the end it stops what still runs and exits. `"auto"` asks
    /// the batch allocation the agent runs in, as `--time-limit auto` does.
    pub time_limit: Option<TimeLimit>,
    /// Exit once nothing has run or waited on the node for this long.
    pub idle_timeout: Option<hetsched_core::input::Duration>,
    /// How long job directories set aside into `WORK_DIR/stale/` are kept (a duration, or
    /// `never`; [`crate::job_nonce::DEFAULT_STALE_KEEP`] when not given); read by
    /// [`AgentConfig::stale_keep`].
    pub stale_keep: Option<serde_spanned::Spanned<String>>,
    /// Run a user's tasks and divisible chunks as the Unix account of the user's name (the
    /// admin's as the agent's own user); the agent must then run as root
    /// ([`crate::run_as`]). Off by default: everything runs as the agent's user.
    pub run_as_owner: bool,
    /// TLS between agents (workflow data, PCDDB): the same options as the server's `[tls]`.
    pub tls: Option<TlsFiles>,
    /// The most the agent writes for one workflow input it fetches from a producer's agent
    /// (default [`crate::dataflow::DEFAULT_MAX_INPUT_BYTES`]): a producer's agent that sends
    /// more (misbehaving, or any holder of the agent token) fails the fetch instead of filling
    /// this node's disk.
    #[serde(deserialize_with = "hetsched_core::input::spanned_byte_size")]
    pub max_input_bytes: Option<serde_spanned::Spanned<ByteSize>>,
    /// The free space fetched workflow inputs, divisible chunks' inputs and (on an ANode) the
    /// input files NNodes ship with offloads leave on the filesystem of `work_dir` (default
    /// [`crate::room::DEFAULT_MIN_FREE_DISK`]; 0 turns the check off): a fetch that would go
    /// below stops, and the instance's attempt, the chunk or the offload runs again where there
    /// is room, instead of filling the node's disk.
    #[serde(deserialize_with = "hetsched_core::input::optional_byte_size")]
    pub min_free_disk: Option<ByteSize>,
    /// The most bytes per second this agent fetches workflow inputs at, all fetches together
    /// (absent or 0: no cap; otherwise at least
    /// [`crate::fetch_bandwidth::MIN_FETCH_BANDWIDTH`]).
    pub fetch_bandwidth: Option<serde_spanned::Spanned<FetchRate>>,
    /// Declared accelerators (replace detected ones).
    #[serde(default)]
    pub accelerator: Vec<AcceleratorSpec>,
    /// The format of the agent's own log (`--log-format` overrides it).
    pub log_format: hetsched_core::input::log_format::LogFormat,
    /// The file the agent appends its log to, reopened on SIGHUP; none: standard error
    /// (`--log-file` overrides it).
    pub log_file: Option<PathBuf>,
}

/// `[tls]`: the certificate and key (PEM files) of the agent's data listener.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsFiles {
    /// Certificate chain.
    pub cert: PathBuf,
    /// Private key.
    pub key: PathBuf,
}

/// `time_limit`'s value: a duration as every duration of the file is written, or `"auto"`,
/// which `--time-limit auto` also takes: the time left in the batch allocation the agent runs
/// in, asked of Slurm or PBS when the agent starts (the binary does that; this crate runs no
/// batch system's commands).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimeLimit {
    /// Ask the batch system.
    Auto,
    /// This long.
    For(std::time::Duration),
}

impl<'de> Deserialize<'de> for TimeLimit {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use hetsched_core::input::Duration;
        use serde::de::IntoDeserializer;
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Secs(f64),
            Text(String),
        }
        // Anything but `auto` is read as any other duration of the file, with its errors.
        let d = match Raw::deserialize(d)? {
            Raw::Text(t) if t.trim() == "auto" => return Ok(TimeLimit::Auto),
            Raw::Text(t) => Duration::deserialize(t.into_deserializer())?,
            Raw::Secs(s) => Duration::deserialize(s.into_deserializer())?,
        };
        Ok(TimeLimit::For(std::time::Duration::from_nanos(d.0)))
    }
}

/// `fetch_bandwidth`'s value: bytes per second, written as a size (`"100MiB"`, `"1.5GB"`, a
/// number of bytes; the core's size syntax and its errors), or as a rate with `/s`, read as every
/// rate is (`"100MiB/s"`; `"800Mb/s"` and `"800Mbit/s"` are bits, 100 MB/s).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FetchRate(pub u64);

impl<'de> Deserialize<'de> for FetchRate {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use hetsched_core::input::cluster::Size;
        use serde::de::IntoDeserializer;
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Number(i64),
            Text(String),
        }
        let how = "a rate in bytes per second such as \"100MiB\" or \"100MiB/s\" (0: no cap)";
        let size = match Raw::deserialize(d)
            .map_err(|_| serde::de::Error::custom(format!("not a rate: write {how}")))?
        {
            Raw::Number(n) => {
                Size::deserialize(IntoDeserializer::<D::Error>::into_deserializer(n))?
            }
            // With `/s` it is a rate, read as the simulator's `network` is (`"800Mb/s"` is
            // bits); rounded to whole bytes, which is all the bucket counts.
            Raw::Text(t) => match hetsched_core::input::rate_bytes_per_sec(&t) {
                Some(rate) => {
                    let rate = rate.map_err(|e| {
                        serde::de::Error::custom(format!(
                            "invalid rate `{}`: {e}",
                            hetsched_core::text::clip(t.trim())
                        ))
                    })?;
                    if !(rate.is_finite() && rate < u64::MAX as f64) {
                        return Err(serde::de::Error::custom(format!("not a rate: write {how}")));
                    }
                    return Ok(FetchRate(rate.round() as u64));
                }
                None => {
                    Size::deserialize(IntoDeserializer::<D::Error>::into_deserializer(t.trim()))?
                }
            },
        };
        Ok(FetchRate(size.0.as_u64()))
    }
}

/// The least idle timeout an agent takes (`idle_timeout`, `--idle-timeout`), in ns.
pub const MIN_IDLE_TIMEOUT_NS: u64 = 1_000_000_000;

/// Whether `cores` is a number of cores a node may offer: 1 to `MAX_NODE_CORES` (what the server
/// accepts at registration); why not.
pub fn check_cores(cores: u32) -> Result<u32, String> {
    use hetsched_core::input::cluster::MAX_NODE_CORES;
    if cores == 0 || cores > MAX_NODE_CORES {
        return Err(format!(
            "{cores} cores; an agent offers 1 to {MAX_NODE_CORES}"
        ));
    }
    Ok(cores)
}

/// `stale_keep` and `--stale-keep`: a duration of at least a minute, or `never` (`Ok(None)`).
pub fn parse_stale_keep(text: &str) -> Result<Option<std::time::Duration>, String> {
    if text.trim() == "never" {
        return Ok(None);
    }
    let d: hetsched_core::input::Duration = text.parse()?;
    // A keep of seconds would delete what a restore back is meant to find before anyone could
    // notice: a slip ("0s"), refused.
    if d.0 < 60_000_000_000 {
        return Err(format!(
            "`{}`: at least 1m (`never` keeps what is set aside)",
            text.trim()
        ));
    }
    Ok(Some(std::time::Duration::from_nanos(d.0)))
}

/// The least memory a node's agent may declare (`memory`): 1 MiB, as for a task — mostly a
/// bare number meant as megabytes (Slurm's `RealMemory`), which would offer almost none.
pub const MIN_NODE_MEMORY: u64 = 1 << 20;

impl AgentConfig {
    /// Parses a configuration file's text; errors name the line and field.
    pub fn parse(origin: &str, text: &str) -> Result<Self, hetsched_core::input::InputError> {
        let src = hetsched_core::input::Source::new(origin, text);
        let config: Self = src.parse_toml()?;
        if let Some(g) = &config.kill_grace
            && std::time::Duration::from_nanos(g.get_ref().0) > crate::launch::MAX_KILL_GRACE
        {
            return Err(src.error(
                Some(g.span().start),
                Some("kill_grace".into()),
                format!(
                    "at most {}",
                    humantime::format_duration(crate::launch::MAX_KILL_GRACE)
                ),
            ));
        }
        if let Some(k) = &config.stale_keep
            && let Err(e) = parse_stale_keep(k.get_ref())
        {
            return Err(src.error(Some(k.span().start), Some("stale_keep".into()), e));
        }
        // An agent that exits the moment it is idle starts, finds nothing, and leaves: below a
        // second is a slip (`"0s"`), refused as allocation queues refuse it.
        if config
            .idle_timeout
            .is_some_and(|d| d.0 < MIN_IDLE_TIMEOUT_NS)
        {
            return Err(src.error(
                src.key_at("idle_timeout"),
                Some("idle_timeout".into()),
                "at least 1s (leave it out for never)",
            ));
        }
        if config.rack.as_deref() == Some("") {
            return Err(src.error(
                src.key_at("rack"),
                Some("rack".into()),
                "is empty; a rack name is 1 to 128 bytes (leave it out for `default`)",
            ));
        }
        // Refused here, naming the field, rather than by the server at registration (which
        // only took the default in its place).
        if let Some(problem) = config
            .core_speed
            .and_then(hetsched_core::input::cluster::speed_problem)
        {
            return Err(src.error(src.key_at("core_speed"), Some("core_speed".into()), problem));
        }
        // Refused here, naming the field, rather than by the server at registration.
        if let Some(c) = &config.cores
            && let Err(e) = check_cores(*c.get_ref())
        {
            return Err(src.error(Some(c.span().start), Some("cores".into()), e));
        }
        if let Some(m) = &config.memory
            && m.get_ref().as_u64() < MIN_NODE_MEMORY
        {
            let bytes = m.get_ref().as_u64();
            return Err(src.error(
                Some(m.span().start),
                Some("memory".into()),
                format!(
                    "{bytes} bytes is less than any node has (at least 1 MiB; leave it out to \
                     detect it): a size without a unit is bytes (Slurm's `RealMemory` counts \
                     megabytes): write e.g. `{bytes}MiB`"
                ),
            ));
        }
        if let Some(m) = &config.max_input_bytes
            && m.get_ref().as_u64() == 0
        {
            return Err(src.error(
                Some(m.span().start),
                Some("max_input_bytes".into()),
                "must be at least 1 byte (leave it out for the default, 64 GiB)",
            ));
        }
        if let Some(r) = &config.fetch_bandwidth
            && r.get_ref().0 != 0
            && r.get_ref().0 < crate::fetch_bandwidth::MIN_FETCH_BANDWIDTH
        {
            return Err(src.error(
                Some(r.span().start),
                Some("fetch_bandwidth".into()),
                format!(
                    "{} bytes/s is below the least cap, {}/s (0 or leaving it out: no cap)",
                    r.get_ref().0,
                    ByteSize(crate::fetch_bandwidth::MIN_FETCH_BANDWIDTH)
                ),
            ));
        }
        Ok(config)
    }

    /// The cap on the rate this agent fetches workflow inputs at, in bytes per second:
    /// `fetch_bandwidth`, or 0 (no cap).
    pub fn fetch_bandwidth(&self) -> u64 {
        self.fetch_bandwidth.as_ref().map_or(0, |r| r.get_ref().0)
    }

    /// The most written for one fetched workflow input: `max_input_bytes`, or the default.
    pub fn max_input_bytes(&self) -> u64 {
        self.max_input_bytes
            .as_ref()
            .map_or(crate::dataflow::DEFAULT_MAX_INPUT_BYTES, |m| {
                m.get_ref().as_u64()
            })
    }

    /// The free space fetched workflow inputs leave on the work directory's filesystem:
    /// `min_free_disk`, or the default (0: not checked).
    pub fn min_free_disk(&self) -> u64 {
        self.min_free_disk
            .map_or(crate::dataflow::DEFAULT_MIN_FREE_DISK, |m| m.as_u64())
    }

    /// The time limit written, if any.
    pub fn time_limit(&self) -> Option<TimeLimit> {
        self.time_limit
    }

    /// The idle timeout written, if any.
    pub fn idle_timeout(&self) -> Option<std::time::Duration> {
        self.idle_timeout
            .map(|t| std::time::Duration::from_nanos(t.0))
    }

    /// How long job directories set aside into `stale/` are kept: `Some(None)` for `never`,
    /// None when the file does not say.
    pub fn stale_keep(&self) -> Option<Option<std::time::Duration>> {
        // Checked by [`AgentConfig::parse`].
        self.stale_keep
            .as_ref()
            .and_then(|k| parse_stale_keep(k.get_ref()).ok())
    }

    /// The kill grace written, if any.
    pub fn kill_grace(&self) -> Option<std::time::Duration> {
        self.kill_grace
            .as_ref()
            .map(|g| std::time::Duration::from_nanos(g.get_ref().0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The file's slips are refused at the key's line and column, naming the key, not a flag
    /// that was not given: an empty `rack`, an `idle_timeout` under a second (the agent exited
    /// at once); `none` turns a listener off in the file as `--log-listen none` does.
    #[test]
    fn file_values_are_refused_at_their_key_and_none_turns_a_listener_off() {
        let head = "name = \"t\"\n";
        for (line, said) in [
            (
                "rack = \"\"",
                "agent.toml:2:1: rack: is empty; a rack name is 1 to 128 bytes (leave it out for \
                 `default`)",
            ),
            (
                "idle_timeout = \"0s\"",
                "agent.toml:2:1: idle_timeout: at least 1s (leave it out for never)",
            ),
            (
                "idle_timeout = \"500ms\"",
                "agent.toml:2:1: idle_timeout: at least 1s (leave it out for never)",
            ),
        ] {
            let e = AgentConfig::parse("agent.toml", &format!("{head}{line}\n")).expect_err(line);
            assert_eq!(e.to_string(), said);
        }
        let c = AgentConfig::parse(
            "agent.toml",
            "log_listen = \"none\"\naccel_listen = \"none\"\nidle_timeout = \"1s\"\n",
        )
        .expect("valid");
        assert_eq!((c.log_listen, c.accel_listen), (Some(None), Some(None)));
        let c = AgentConfig::parse("agent.toml", "log_listen = \"127.0.0.1:7\"\n").expect("valid");
        assert_eq!(c.log_listen, Some(Some(([127, 0, 0, 1], 7).into())));
        assert_eq!(AgentConfig::default().log_listen, None);
        let e = AgentConfig::parse("agent.toml", "log_listen = \"nowhere\"\n").expect_err("bad");
        assert!(e.to_string().contains("or none for no listener"), "{e}");
    }

    #[test]
    fn cores_are_read_and_zero_or_too_many_are_refused_at_their_line() {
        let c = AgentConfig::parse("agent.toml", "cores = 2\n").expect("valid");
        assert_eq!(c.cores.map(|c| *c.get_ref()), Some(2));
        for (text, said) in [
            (
                "cores = 0\n",
                "agent.toml:1:9: cores: 0 cores; an agent offers 1 to 65536",
            ),
            (
                "cores = 100000\n",
                "agent.toml:1:9: cores: 100000 cores; an agent offers 1 to 65536",
            ),
        ] {
            let e = AgentConfig::parse("agent.toml", text).expect_err(text);
            assert_eq!(e.to_string(), said);
        }
    }

    #[test]
    fn a_kill_grace_is_read_and_one_over_an_hour_is_refused_at_its_line() {
        let c =
            AgentConfig::parse("agent.toml", "cores = 2\nkill_grace = \"30s\"\n").expect("valid");
        assert_eq!(c.kill_grace(), Some(std::time::Duration::from_secs(30)));
        let e = AgentConfig::parse("agent.toml", "cores = 2\nkill_grace = \"2h\"\n")
            .expect_err("too long");
        assert_eq!(e.to_string(), "agent.toml:2:14: kill_grace: at most 1h");
    }

    #[test]
    fn a_core_speed_outside_the_cluster_files_range_is_refused_at_its_line() {
        let c = AgentConfig::parse("agent.toml", "core_speed = 1.5\n").expect("valid");
        assert_eq!(c.core_speed, Some(1.5));
        for (text, got) in [
            ("cores = 2\ncore_speed = -1.0\n", "-1"),
            ("cores = 2\ncore_speed = 0.0\n", "0"),
            ("cores = 2\ncore_speed = nan\n", "NaN"),
            ("cores = 2\ncore_speed = 5000.0\n", "5000"),
        ] {
            let e = AgentConfig::parse("agent.toml", text).expect_err(text);
            assert_eq!(
                e.to_string(),
                format!(
                    "agent.toml:2:1: core_speed: must be between 0.001 and 1000 (relative to the \
                     reference, 1.0); got {got}"
                ),
                "{text}"
            );
        }
    }

    #[test]
    fn run_as_owner_is_off_unless_set_and_a_bad_value_names_its_line() {
        assert!(!AgentConfig::default().run_as_owner);
        assert!(
            !AgentConfig::parse("agent.toml", "cores = 2\n")
                .expect("valid")
                .run_as_owner
        );
        let c = AgentConfig::parse("agent.toml", "run_as_owner = true\n").expect("valid");
        assert!(c.run_as_owner);
        let e = AgentConfig::parse("agent.toml", "cores = 2\nrun_as_owner = \"yes\"\n")
            .expect_err("not a boolean");
        assert!(
            e.to_string().starts_with("agent.toml:2:16: run_as_owner"),
            "{e}"
        );
    }

    #[test]
    fn max_input_bytes_is_read_defaults_to_64_gib_and_zero_is_refused_at_its_line() {
        assert_eq!(AgentConfig::default().max_input_bytes(), 64 << 30);
        let c = AgentConfig::parse("agent.toml", "max_input_bytes = \"2GiB\"\n").expect("valid");
        assert_eq!(c.max_input_bytes(), 2 << 30);
        let e =
            AgentConfig::parse("agent.toml", "cores = 2\nmax_input_bytes = 0\n").expect_err("zero");
        assert!(
            e.to_string()
                .starts_with("agent.toml:2:19: max_input_bytes: must be at least 1 byte"),
            "{e}"
        );
        let e = AgentConfig::parse("agent.toml", "max_input_bytes = \"lots\"\n")
            .expect_err("not a size");
        assert!(e.to_string().starts_with("agent.toml:1:19"), "{e}");
    }

    /// A node's `memory` written as Slurm's `RealMemory` (megabytes, no unit) would offer a few
    /// kilobytes: refused at its line, saying how to write it; a size that is not one says how
    /// to write one, as a job file's does (not the `bytesize` crate's "expected parsable
    /// string"), for every size of the file.
    #[test]
    fn a_node_memory_of_a_few_bytes_and_a_size_that_is_none_are_refused_saying_how_to_write_them() {
        let e = AgentConfig::parse("agent.toml", "cores = 2\nmemory = \"4000\"\n")
            .expect_err("4000 bytes");
        let e = e.to_string();
        assert!(
            e.starts_with("agent.toml:2:10: memory: 4000 bytes is less than any node has")
                && e.contains("write e.g. `4000MiB`"),
            "{e}"
        );
        let c = AgentConfig::parse("agent.toml", "memory = \"4000MiB\"\n").expect("valid");
        assert_eq!(c.memory.map(|m| m.get_ref().as_u64()), Some(4000 << 20));
        for field in ["memory", "max_input_bytes", "min_free_disk"] {
            let e = AgentConfig::parse("agent.toml", &format!("{field} = \"lots\"\n"))
                .expect_err("not a size")
                .to_string();
            assert!(
                e.starts_with(&format!("agent.toml:1:{}: {field}", field.len() + 4))
                    && e.contains("write a number of bytes or a size such as \"512MiB\""),
                "{e}"
            );
        }
    }

    #[test]
    fn min_free_disk_is_read_defaults_to_1_gib_zero_turns_it_off_and_a_bad_one_names_its_line() {
        assert_eq!(AgentConfig::default().min_free_disk(), 1 << 30);
        assert_eq!(
            AgentConfig::parse("agent.toml", "cores = 2\n")
                .expect("valid")
                .min_free_disk(),
            1 << 30
        );
        let c = AgentConfig::parse("agent.toml", "min_free_disk = \"20GiB\"\n").expect("valid");
        assert_eq!(c.min_free_disk(), 20 << 30);
        let c = AgentConfig::parse("agent.toml", "min_free_disk = 0\n").expect("valid");
        assert_eq!(c.min_free_disk(), 0, "0 turns the floor off");
        for bad in ["\"lots\"", "-1", "true"] {
            let e =
                AgentConfig::parse("agent.toml", &format!("cores = 2\nmin_free_disk = {bad}\n"))
                    .expect_err(bad);
            assert!(
                e.to_string().starts_with("agent.toml:2:17: min_free_disk"),
                "{bad}: {e}"
            );
        }
    }

    #[test]
    fn fetch_bandwidth_is_read_as_a_size_with_or_without_per_second_and_absent_or_0_is_no_cap() {
        assert_eq!(AgentConfig::default().fetch_bandwidth(), 0);
        for (written, bytes_per_sec) in [
            ("\"10MiB\"", 10 << 20),
            ("\"10MiB/s\"", 10 << 20),
            ("\"1.5 GB/s\"", 1_500_000_000),
            ("65536", 64 << 10),
            ("\"64KiB\"", 64 << 10),
            ("0", 0),
            ("\"0/s\"", 0),
        ] {
            let c = AgentConfig::parse("agent.toml", &format!("fetch_bandwidth = {written}\n"))
                .unwrap_or_else(|e| panic!("{written}: {e}"));
            assert_eq!(c.fetch_bandwidth(), bytes_per_sec, "{written}");
        }
    }

    #[test]
    fn a_rate_written_in_bits_is_read_in_bits_as_the_simulators_cluster_files_read_it() {
        let c = AgentConfig::parse(
            "agent.toml",
            "disk_read = \"1Gb/s\"\nfetch_bandwidth = \"800Mbit/s\"\n",
        )
        .expect("valid");
        assert_eq!(c.disk_read.map(|b| b.0), Some(125e6));
        assert_eq!(c.fetch_bandwidth(), 100_000_000);
        let c = AgentConfig::parse("agent.toml", "fetch_bandwidth = \"800Mb/s\"\n").expect("valid");
        assert_eq!(c.fetch_bandwidth(), 100_000_000);
        // Bytes stay bytes, with or without `/s`; a bare size keeps a size's meaning.
        let c = AgentConfig::parse(
            "agent.toml",
            "disk_read = \"1GB/s\"\nfetch_bandwidth = \"1Mb\"\n",
        )
        .expect("valid");
        assert_eq!(c.disk_read.map(|b| b.0), Some(1e9));
        assert_eq!(c.fetch_bandwidth(), 1_000_000);
        let e = AgentConfig::parse("agent.toml", "fetch_bandwidth = \"1Gbx/s\"\n")
            .expect_err("no unit");
        assert!(
            e.to_string()
                .starts_with("agent.toml:1:19: fetch_bandwidth: invalid rate `1Gbx/s`: not a rate"),
            "{e}"
        );
    }

    #[test]
    fn a_fetch_bandwidth_below_64_kib_or_not_a_rate_is_refused_at_its_line() {
        let e = AgentConfig::parse("agent.toml", "cores = 2\nfetch_bandwidth = 64\n")
            .expect_err("a typo for 64MiB");
        assert_eq!(
            e.to_string(),
            "agent.toml:2:19: fetch_bandwidth: 64 bytes/s is below the least cap, 64.0 KiB/s \
             (0 or leaving it out: no cap)"
        );
        let e = AgentConfig::parse("agent.toml", "fetch_bandwidth = \"65535\"\n")
            .expect_err("one byte short");
        assert!(
            e.to_string()
                .starts_with("agent.toml:1:19: fetch_bandwidth: 65535 bytes/s"),
            "{e}"
        );
        for bad in ["\"fast\"", "-1", "true", "\"10MiB/h\""] {
            let e = AgentConfig::parse(
                "agent.toml",
                &format!("cores = 2\nfetch_bandwidth = {bad}\n"),
            )
            .expect_err(bad);
            assert!(
                e.to_string()
                    .starts_with("agent.toml:2:19: fetch_bandwidth"),
                "{bad}: {e}"
            );
        }
    }

    #[test]
    fn a_time_limit_is_read_and_a_bad_one_names_its_line() {
        let c = AgentConfig::parse("agent.toml", "time_limit = \"11h 50m\"\n").expect("valid");
        assert_eq!(
            c.time_limit(),
            Some(TimeLimit::For(std::time::Duration::from_secs(
                11 * 3600 + 50 * 60
            )))
        );
        assert_eq!(AgentConfig::default().time_limit(), None);
        // `--time-limit auto`'s word is the file's too (it was refused as a duration).
        let c = AgentConfig::parse("agent.toml", "time_limit = \"auto\"\n").expect("auto");
        assert_eq!(c.time_limit(), Some(TimeLimit::Auto));
        let c = AgentConfig::parse("agent.toml", "time_limit = 90\n").expect("seconds");
        assert_eq!(
            c.time_limit(),
            Some(TimeLimit::For(std::time::Duration::from_secs(90)))
        );
        let e = AgentConfig::parse("agent.toml", "cores = 2\ntime_limit = \"soon\"\n")
            .expect_err("not a duration");
        assert!(
            e.to_string().starts_with("agent.toml:2:14: time_limit"),
            "{e}"
        );
    }

    /// `stale_keep` reads a duration or `never`; a keep under a minute, or what is no duration,
    /// is refused at its line and column.
    #[test]
    fn stale_keep_reads_a_duration_or_never_and_refuses_slips_at_its_line() {
        let c =
            AgentConfig::parse("agent.toml", "cores = 2\nstale_keep = \"2d\"\n").expect("valid");
        assert_eq!(
            c.stale_keep(),
            Some(Some(std::time::Duration::from_secs(2 * 86_400)))
        );
        let c = AgentConfig::parse("agent.toml", "stale_keep = \"never\"\n").expect("valid");
        assert_eq!(c.stale_keep(), Some(None));
        let c = AgentConfig::parse("agent.toml", "cores = 2\n").expect("valid");
        assert_eq!(c.stale_keep(), None);
        let e = AgentConfig::parse("agent.toml", "cores = 2\nstale_keep = \"0s\"\n")
            .expect_err("a slip");
        assert_eq!(
            e.to_string(),
            "agent.toml:2:14: stale_keep: `0s`: at least 1m (`never` keeps what is set aside)"
        );
        let e = AgentConfig::parse("agent.toml", "stale_keep = \"forever\"\n")
            .expect_err("no duration");
        assert!(
            e.to_string().starts_with("agent.toml:1:14: stale_keep: "),
            "{e}"
        );
    }
}
