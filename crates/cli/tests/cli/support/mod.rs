//! A throw-away cluster for the operator tests: the real `hetsched` binary as a server and agents
//! on loopback, driven through the CLI as a user would. Every wait is bounded. The commands that
//! need no cluster run through [`binary`].
#![allow(dead_code)]

pub mod binary;
pub mod cdp;

use hetsched_core::testkit::ScratchDir;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

pub const BIN: &str = env!("CARGO_BIN_EXE_hetsched");

pub struct Cluster {
    /// The cluster's directory (data, work directories, logs): [`Cluster::scratch`]'s path.
    pub dir: PathBuf,
    server: Option<Child>,
    pub listen: String,
    pub agents: BTreeMap<String, Child>,
    pub http: bool,
    /// TLS with the test certificates in `tests/tls` (see [`Cluster::start_tls`]).
    pub tls: bool,
    /// With `tls`: the server's `[tls]` names no `agent_ca`, so it certifies its agents'
    /// listeners itself ([`Cluster::start_tls_certifying`]).
    pub certifies_agents: bool,
    /// More server configuration (TOML text), written after the TLS part, if any.
    pub server_config: Option<String>,
    /// The server's `--heartbeat-interval` and `--dead-timeout`.
    pub beat: (&'static str, &'static str),
    /// More flags for `hetsched server` (its next start).
    pub server_args: Vec<String>,
    /// Removes `dir` when the cluster drops, after [`Drop`] has stopped its agents and server
    /// (the fields drop after `drop` ran); kept when the test failed.
    scratch: ScratchDir,
}

/// A file of the test TLS material (`crates/cli/tests/tls`).
pub fn tls_file(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/tls")
        .join(name)
}

/// A TLS client connection to `localhost` that trusts the test CA only.
pub fn https_client() -> rustls::ClientConnection {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(tls_file("ca.pem")).expect("ca.pem") {
        roots.add(cert.expect("a certificate")).expect("a CA");
    }
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("TLS versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
    let name = rustls::pki_types::ServerName::try_from("localhost").expect("a name");
    rustls::ClientConnection::new(std::sync::Arc::new(config), name).expect("a TLS client")
}

/// The core-seconds `user`'s work held in the accounts `usage` (`hetsched usage --output json`;
/// 0 when the user has no row).
pub fn core_seconds_of(usage: &serde_json::Value, user: &str) -> f64 {
    usage["users"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|u| u["user"] == user)
        .and_then(|u| u["core_seconds"].as_f64())
        .unwrap_or(0.0)
}

/// The lines of a file the tasks wrote (none while it does not exist yet).
pub fn lines(path: &std::path::Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

pub fn wait_until(what: &str, timeout: Duration, mut f: impl FnMut() -> bool) {
    let start = Instant::now();
    while !f() {
        assert!(start.elapsed() < timeout, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(25));
    }
}

/// Every process whose process group is `pgid` (from `/proc/*/stat`), zombies excepted.
pub fn group_members(pgid: u32) -> Vec<u32> {
    let mut found = Vec::new();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else {
            continue;
        };
        let Some(i) = stat.rfind(')') else { continue };
        let f: Vec<&str> = stat[i + 1..].split_whitespace().collect();
        // state, ppid, pgrp
        if f.len() > 2 && f[2] == pgid.to_string() && f[0] != "Z" && f[0] != "X" {
            found.push(pid);
        }
    }
    found
}

/// A multi-lang bolt of a topology from [`numbers_into`]: its component's name, its `command`
/// and its `params` (the inside of a TOML inline table; empty for none).
pub struct CommandBolt<'a> {
    pub name: &'a str,
    pub command: &'a [&'a str],
    pub params: &'a str,
}

/// The text of topology `name`: a `sequence-spout` `numbers` (2 tuples/s) feeding each of
/// `bolts` (shuffle grouping), every component one executor of 10 % of a core.
pub fn numbers_into(name: &str, bolts: &[CommandBolt]) -> String {
    let mut text = format!(
        r#"name = "{name}"
[[component]]
name = "numbers"
kind = "spout"
parallelism = 1
cpu = 10.0
builtin = "sequence-spout"
params = {{ rate = 2.0 }}
"#
    );
    for bolt in bolts {
        let command: Vec<String> = bolt.command.iter().map(|a| format!("\"{a}\"")).collect();
        text.push_str(&format!(
            r#"[[component]]
name = "{}"
kind = "bolt"
parallelism = 1
cpu = 10.0
command = [{}]
"#,
            bolt.name,
            command.join(", ")
        ));
        if !bolt.params.is_empty() {
            text.push_str(&format!("params = {{ {} }}\n", bolt.params));
        }
    }
    for bolt in bolts {
        text.push_str(&format!(
            r#"[[stream]]
from = "numbers"
to = "{}"
grouping = "shuffle"
rate = 2.0
"#,
            bolt.name
        ));
    }
    text
}

/// A fresh directory for one test or cluster, `TMP/hetsched-op-NAME-XXXXXX`: removed when it drops
/// after the test passed, kept (and its path printed) when the test failed. Whatever was started
/// to write into it is to be stopped first: hold it longer than those processes.
pub fn temp_dir(name: &str) -> ScratchDir {
    ScratchDir::new("op", name)
}

impl Cluster {
    pub fn start(name: &str, http: bool) -> Cluster {
        Cluster::new(name, http, false, None)
    }

    /// A cluster whose server speaks TLS (the test certificate, for `localhost`/`127.0.0.1`) and
    /// checks the agents' log listeners against the test CA (`[tls] agent_ca`); the CLI and the
    /// agents trust the same CA.
    pub fn start_tls(name: &str) -> Cluster {
        Cluster::new(name, false, true, None)
    }

    /// A cluster whose server speaks TLS (the test certificate) with no `agent_ca`: it is its
    /// agents' CA, and agents started without certificates get theirs from it. `config` is more
    /// server configuration.
    pub fn start_tls_certifying(name: &str, config: &str) -> Cluster {
        let mut c = Cluster::new_stopped(name, false, true, Some(config.to_string()));
        c.certifies_agents = true;
        c.start_server();
        c
    }

    /// As [`Cluster::start_tls`], with the HTTP listener on (which then speaks HTTPS).
    pub fn start_tls_http(name: &str) -> Cluster {
        Cluster::new(name, true, true, None)
    }

    /// A cluster whose server is not started yet: set `server_args` or `server_config`, then
    /// [`Cluster::start_server`].
    pub fn stopped(name: &str) -> Cluster {
        Cluster::new_stopped(name, false, false, None)
    }

    /// As [`Cluster::start`], the server also reading the configuration `config` (TOML text).
    pub fn start_configured(name: &str, http: bool, config: &str) -> Cluster {
        Cluster::new(name, http, false, Some(config.to_string()))
    }

    /// As [`Cluster::start`], with agents told to heartbeat every `heartbeat` (100 ms elsewhere)
    /// and nodes declared dead after `dead_timeout` of silence (1 s elsewhere).
    pub fn start_beating(
        name: &str,
        heartbeat: &'static str,
        dead_timeout: &'static str,
    ) -> Cluster {
        let mut c = Cluster::new_stopped(name, false, false, None);
        c.beat = (heartbeat, dead_timeout);
        c.start_server();
        c
    }

    /// As [`Cluster::start_configured`], with agents told to heartbeat every `heartbeat` and
    /// nodes declared dead after `dead_timeout` of silence.
    pub fn start_configured_beating(
        name: &str,
        config: &str,
        heartbeat: &'static str,
        dead_timeout: &'static str,
    ) -> Cluster {
        let mut c = Cluster::new_stopped(name, false, false, Some(config.to_string()));
        c.beat = (heartbeat, dead_timeout);
        c.start_server();
        c
    }

    fn new(name: &str, http: bool, tls: bool, server_config: Option<String>) -> Cluster {
        let mut c = Cluster::new_stopped(name, http, tls, server_config);
        c.start_server();
        c
    }

    fn new_stopped(name: &str, http: bool, tls: bool, server_config: Option<String>) -> Cluster {
        let scratch = temp_dir(name);
        Cluster {
            dir: scratch.to_path_buf(),
            server: None,
            listen: "127.0.0.1:0".into(),
            agents: BTreeMap::new(),
            http,
            tls,
            certifies_agents: false,
            server_config,
            beat: ("100ms", "1s"),
            server_args: Vec::new(),
            scratch,
        }
    }

    pub fn data(&self) -> PathBuf {
        self.dir.join("data")
    }

    pub fn start_server(&mut self) {
        let address = self.data().join("address");
        let _ = std::fs::remove_file(&address);
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("server.log"))
            .expect("log");
        let config = self.dir.join("server.toml");
        let text = if self.tls && self.certifies_agents {
            format!(
                "[tls]\ncert = \"{}\"\nkey = \"{}\"\n",
                tls_file("server.pem").display(),
                tls_file("server.key").display(),
            )
        } else if self.tls {
            format!(
                "[tls]\ncert = \"{}\"\nkey = \"{}\"\nagent_ca = \"{}\"\n",
                tls_file("server.pem").display(),
                tls_file("server.key").display(),
                tls_file("ca.pem").display()
            )
        } else {
            String::new()
        };
        let text = text + self.server_config.as_deref().unwrap_or("");
        std::fs::write(&config, text).expect("server config");
        let child = Command::new(BIN)
            .args([
                "server",
                "--listen",
                &self.listen,
                "--dead-timeout",
                self.beat.1,
            ])
            .arg("--config")
            .arg(&config)
            .args(["--heartbeat-interval", self.beat.0, "--data-dir"])
            .arg(self.data())
            .args(if self.http {
                vec!["--http-listen", "127.0.0.1:0"]
            } else {
                vec![]
            })
            .args(&self.server_args)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("spawn server");
        self.server = Some(child);
        wait_until("the server's address file", Duration::from_secs(20), || {
            std::fs::read_to_string(&address).is_ok_and(|s| !s.is_empty())
        });
        self.listen = std::fs::read_to_string(&address).expect("address");
    }

    pub fn kill_server(&mut self) {
        if let Some(mut s) = self.server.take() {
            s.kill().expect("SIGKILL server");
            let _ = s.wait();
        }
    }

    /// Sends `signal` (e.g. `TERM`) to the server and waits (bounded) for it to exit; its exit
    /// code (None: killed by a signal).
    pub fn stop_server(&mut self, signal: &str, timeout: Duration) -> Option<i32> {
        let mut child = self.server.take().expect("a running server");
        send_signal(child.id(), signal);
        exit_within(&mut child, timeout, || {
            format!("the server did not exit within {timeout:?} of SIG{signal}")
        })
    }

    /// Sends `signal` (e.g. `HUP`) to the running server, and does not wait.
    pub fn signal_server(&self, signal: &str) {
        send_signal(self.server.as_ref().expect("a running server").id(), signal);
    }

    pub fn url(&self) -> String {
        format!(
            "{}://{}",
            if self.tls { "https" } else { "http" },
            self.listen
        )
    }

    pub fn start_agent(&mut self, name: &str, cores: u32, extra: &[&str]) {
        let url = self.url();
        self.start_agent_at(&url, name, cores, extra);
    }

    /// As [`Cluster::start_agent`], with the agent told the server is at `url` (a relay).
    pub fn start_agent_at(&mut self, url: &str, name: &str, cores: u32, extra: &[&str]) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join(format!("agent-{name}.log")))
            .expect("log");
        let child = Command::new(BIN)
            .args(["agent", "--server", url, "--name", name])
            .arg("--cores")
            .arg(cores.to_string())
            .arg("--token-file")
            .arg(self.data().join("agent-token"))
            .arg("--work-dir")
            .arg(self.dir.join(format!("agent-{name}")))
            .args(["--log-listen", "127.0.0.1:0"])
            .args(if self.tls {
                vec!["--ca".to_string(), tls_file("ca.pem").display().to_string()]
            } else {
                vec![]
            })
            .args(extra)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("spawn agent");
        self.agents.insert(name.to_string(), child);
    }

    /// `GET path` on the server's HTTP listener (a cluster started with `http`) with the
    /// read-only token: (status line, lower-cased headers, body). Bounded by socket time-outs.
    pub fn http_get(&self, path: &str) -> (String, String, String) {
        let token = std::fs::read_to_string(self.data().join("read-token")).expect("read-token");
        self.http_request(
            &format!(
                "GET {path} HTTP/1.1\r\nAuthorization: Bearer {}\r\n",
                token.trim()
            ),
            "",
        )
    }

    /// One request on the server's HTTP listener — `head` is the request line and any headers,
    /// each ending in CRLF; `Host`, `Connection: close` and, with a `body`, its
    /// `Content-Length` are added — over HTTPS, trusting the test CA, when the cluster has TLS:
    /// (status line, lower-cased headers, body).
    pub fn http_request(&self, head: &str, body: &str) -> (String, String, String) {
        use std::io::{Read, Write};
        let addr = std::fs::read_to_string(self.data().join("http-address")).expect("http-address");
        let addr = addr.trim();
        let s = std::net::TcpStream::connect(addr).expect("connect to the HTTP listener");
        s.set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        s.set_write_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        let length = if body.is_empty() {
            String::new()
        } else {
            format!("Content-Length: {}\r\n", body.len())
        };
        let request = format!("{head}Host: {addr}\r\nConnection: close\r\n{length}\r\n{body}");
        let mut raw = Vec::new();
        if self.tls {
            let mut tls = rustls::StreamOwned::new(https_client(), s);
            tls.write_all(request.as_bytes()).expect("send request");
            // A peer closing without close_notify ends the body all the same.
            if let Err(e) = tls.read_to_end(&mut raw) {
                assert_eq!(e.kind(), std::io::ErrorKind::UnexpectedEof, "{e}");
            }
        } else {
            let mut s = s;
            s.write_all(request.as_bytes()).expect("send request");
            s.read_to_end(&mut raw).expect("read response");
        }
        let raw = String::from_utf8_lossy(&raw).into_owned();
        let (head, body) = raw.split_once("\r\n\r\n").expect("header/body separator");
        let (status, headers) = head.split_once("\r\n").unwrap_or((head, ""));
        (
            status.to_string(),
            headers.to_ascii_lowercase(),
            body.to_string(),
        )
    }

    /// An agent configured by a TOML file (flags still give server, token and work directory).
    pub fn start_agent_with_config(&mut self, name: &str, config: &str) {
        self.start_agent_with_config_and(name, config, &[]);
    }

    /// As [`Cluster::start_agent_with_config`], with `extra` flags.
    pub fn start_agent_with_config_and(&mut self, name: &str, config: &str, extra: &[&str]) {
        let path = self.write(&format!("agent-{name}.toml"), config);
        let log = std::fs::File::create(self.dir.join(format!("agent-{name}.log"))).expect("log");
        let child = Command::new(BIN)
            .args(["agent", "--server", &self.url(), "--name", name, "--config"])
            .arg(path)
            .arg("--token-file")
            .arg(self.data().join("agent-token"))
            .arg("--work-dir")
            .arg(self.dir.join(format!("agent-{name}")))
            .args(extra)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("spawn agent");
        self.agents.insert(name.to_string(), child);
    }

    /// SIGKILLs agent `name` and reaps it.
    pub fn kill_agent(&mut self, name: &str) {
        if let Some(mut a) = self.agents.remove(name) {
            a.kill().expect("SIGKILL agent");
            let _ = a.wait();
        }
    }

    /// The live processes of agent `name`'s guard (`hetsched agent-guard --work-dir DIR`).
    pub fn guards(&self, name: &str) -> Vec<u32> {
        let dir = self.dir.join(format!("agent-{name}"));
        guards_where(|work_dir| work_dir == dir.as_path())
    }

    /// SIGKILLs agent `name`'s guard, so that the agent's death leaves its tasks running (for a
    /// restarted agent to kill).
    pub fn kill_guard(&self, name: &str) {
        let pids = self.guards(name);
        assert_eq!(pids.len(), 1, "agent {name} has one guard: {pids:?}");
        let status = Command::new("kill")
            .args(["-KILL", &pids[0].to_string()])
            .status()
            .expect("kill");
        assert!(status.success());
        wait_until("the guard to die", Duration::from_secs(5), || {
            self.guards(name).is_empty()
        });
    }

    /// How many of job `job`'s tasks have succeeded (0 while the job is unknown).
    pub fn succeeded(&self, job: u64) -> u64 {
        self.json(&["job", &job.to_string()])["counts"]["succeeded"]
            .as_u64()
            .unwrap_or(0)
    }

    pub fn agent_log(&self, name: &str) -> String {
        std::fs::read_to_string(self.dir.join(format!("agent-{name}.log"))).unwrap_or_default()
    }

    /// Sends `signal` (e.g. `TERM`) to agent `name`.
    pub fn signal_agent(&self, name: &str, signal: &str) {
        send_signal(self.agents[name].id(), signal);
    }

    /// Waits (bounded) for agent `name` to exit; its exit code (None: killed by a signal).
    pub fn agent_exit(&mut self, name: &str, timeout: Duration) -> Option<i32> {
        let mut child = self.agents.remove(name).expect("agent");
        exit_within(&mut child, timeout, || {
            format!(
                "agent {name} did not exit within {timeout:?}; its log:\n{}",
                self.agent_log(name)
            )
        })
    }

    pub fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(BIN);
        cmd.args(args)
            .env("HETSCHED_SERVER", self.url())
            .env("HETSCHED_TOKEN_FILE", self.data().join("token"))
            .envs(self.tls.then(|| ("HETSCHED_CA", tls_file("ca.pem"))))
            // A submission to a server a test stopped on purpose gives up in seconds, not in
            // the minute a user's gets (a test that needs more sets its own).
            .env("HETSCHED_SUBMIT_RETRY_FOR", "5s")
            .env_remove("NO_COLOR")
            .current_dir(&self.dir);
        cmd
    }

    pub fn cli(&self, args: &[&str]) -> Output {
        self.command(args).output().expect("run hetsched")
    }

    /// Runs `hetsched ARGS`, asserts it succeeded, and returns its standard output.
    pub fn ok(&self, args: &[&str]) -> String {
        let out = self.cli(args);
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Runs `hetsched ARGS` as the user whose token file is `token`, from `dir` (the cluster's
    /// directory when `None`), asserts it succeeded, and returns its standard output.
    pub fn ok_as(
        &self,
        token: &std::path::Path,
        dir: Option<&std::path::Path>,
        args: &[&str],
    ) -> String {
        let mut cmd = self.command(args);
        cmd.env("HETSCHED_TOKEN_FILE", token);
        if let Some(dir) = dir {
            cmd.current_dir(dir);
        }
        let out = cmd.output().expect("run hetsched");
        assert!(
            out.status.success(),
            "{args:?} as {}: {}{}",
            token.display(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Runs `hetsched ARGS`, asserts it failed saying `says` on standard error.
    pub fn refused(&self, args: &[&str], says: &str) {
        let out = self.cli(args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && err.contains(says),
            "{args:?}: {err}"
        );
    }

    pub fn json(&self, args: &[&str]) -> serde_json::Value {
        let mut full = args.to_vec();
        full.extend(["--output", "json"]);
        let out = self.cli(&full);
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).expect("json")
    }

    /// `hetsched user add NAME --save DIR/NAME.token` as the admin: the user's token file.
    pub fn add_user(&self, name: &str) -> PathBuf {
        let token = self.dir.join(format!("{name}.token"));
        self.ok(&["user", "add", name, "--save", token.to_str().expect("path")]);
        token
    }

    pub fn wait_for_nodes(&self, n: usize) {
        wait_until("agents to register", Duration::from_secs(30), || {
            let out = self.cli(&["nodes", "--output", "json"]);
            out.status.success()
                && serde_json::from_slice::<serde_json::Value>(&out.stdout)
                    .ok()
                    .and_then(|v| {
                        v.as_array()
                            .map(|a| a.iter().filter(|n| n["alive"] == true).count())
                    })
                    == Some(n)
        });
    }

    pub fn write(&self, name: &str, text: &str) -> PathBuf {
        let p = self.dir.join(name);
        std::fs::write(&p, text).expect("write");
        p
    }

    /// Writes job file `name` with `text` and submits it, which must succeed.
    pub fn submit_file(&self, name: &str, text: &str) {
        let job = self.write(name, text);
        let out = self.cli(&["submit", job.to_str().expect("path")]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Agents `maker` (attribute `producer`) and `user` (attribute `consumer`, its fetches
    /// capped at 1 MiB/s by its configuration file), one core each, once both are registered:
    /// an input `user` fetches takes a second a MiB.
    pub fn start_producer_and_capped_consumer(&mut self) {
        self.start_agent("maker", 1, &["--attributes", "producer"]);
        let config = self.write(
            "consumer.toml",
            "attributes = [\"consumer\"]\nfetch_bandwidth = \"1MiB/s\"\n",
        );
        self.start_agent("user", 1, &["--config", &config.display().to_string()]);
        self.wait_for_nodes(2);
    }

    /// Submits workflow `wf.toml` for the agents of
    /// [`Cluster::start_producer_and_capped_consumer`]: `make` (on `producer`) writes `bytes`
    /// bytes as its output `blob`, `use` (on `consumer`) checks that its input `blob` holds
    /// them, then runs `and_then` (the rest of its shell command, e.g. ` && sleep 2`). The job's
    /// id.
    pub fn submit_blob_workflow(&self, bytes: u64, and_then: &str) -> u64 {
        let file = self.write(
            "wf.toml",
            &format!(
                r#"balancer = "centralised"

[[task]]
name = "make"
instances = 1
cost = "1s"
requires = ["producer"]
outputs = ["blob"]
command = "head -c {bytes} /dev/zero > {{output:blob}}"

[[task]]
name = "use"
instances = 1
cost = "1s"
requires = ["consumer"]
inputs = ["blob"]
command = "test $(wc -c < {{input:blob}}) -eq {bytes}{and_then}"
"#
            ),
        );
        let v = self.json(&["submit", &file.display().to_string()]);
        v["job_id"]
            .as_u64()
            .unwrap_or_else(|| panic!("no job id in {v}"))
    }

    pub fn tasks(&self, job: u64) -> Vec<serde_json::Value> {
        self.json(&["tasks", "--job", &job.to_string()])
            .as_array()
            .cloned()
            .unwrap_or_default()
    }
}

/// The live `hetsched agent-guard --work-dir DIR` processes whose `DIR` passes `wanted`.
fn guards_where(wanted: impl Fn(&std::path::Path) -> bool) -> Vec<u32> {
    let mut pids = Vec::new();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|p| p.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
            continue;
        };
        let args: Vec<&[u8]> = cmdline.split(|&b| b == 0).collect();
        let state = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let zombie = state
            .rfind(')')
            .and_then(|i| state[i + 1..].split_whitespace().next())
            .is_some_and(|s| s == "Z" || s == "X");
        let work_dir = args
            .iter()
            .position(|a| *a == b"--work-dir".as_slice())
            .and_then(|i| args.get(i + 1))
            .and_then(|d| std::str::from_utf8(d).ok());
        if !zombie
            && args.contains(&b"agent-guard".as_slice())
            && work_dir.is_some_and(|d| wanted(std::path::Path::new(d)))
        {
            pids.push(pid);
        }
    }
    pids
}

/// Stops the agents and the server, then waits for what they leave working in the cluster's
/// directory; then the `scratch` field drops, which removes the directory (or keeps it, when the
/// test failed) once nothing writes into it any more.
impl Drop for Cluster {
    fn drop(&mut self) {
        for (_, mut a) in std::mem::take(&mut self.agents) {
            let _ = a.kill();
            let _ = a.wait();
        }
        self.kill_server();
        // A SIGKILLed agent's guard (a process group of its own) wakes at its agent's death,
        // takes the work directory's lock (writing `agent.lock` again) and kills the tasks the
        // agent left: removed meanwhile, the directory would lose the race and stay. The guard
        // waits at most `LOCK_WAIT` (10 s) for the lock, so this wait is bounded a little above.
        let start = Instant::now();
        while !guards_where(|d| d.starts_with(&self.dir)).is_empty()
            && start.elapsed() < Duration::from_secs(15)
        {
            std::thread::sleep(Duration::from_millis(25));
        }
    }
}

/// Sends `signal` (e.g. `TERM`) to process `pid`.
fn send_signal(pid: u32, signal: &str) {
    let ok = Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(pid.to_string())
        .status()
        .expect("kill");
    assert!(ok.success(), "kill -{signal} {pid}");
}

/// Waits (bounded) for `child` to exit; its exit code (None: killed by a signal). Past
/// `timeout` it is killed and the test fails with `why()`.
fn exit_within(child: &mut Child, timeout: Duration, why: impl FnOnce() -> String) -> Option<i32> {
    let start = Instant::now();
    loop {
        if let Some(s) = child.try_wait().expect("try_wait") {
            return s.code();
        }
        if start.elapsed() > timeout {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{}", why());
        }
        std::thread::sleep(Duration::from_millis(25));
    }
}
