//! `hetsched server --check`: a configuration (file and flags) checked as a start would check
//! it, without starting anything or touching the data directory, so an operator can check the
//! file a running server will restart with.

use crate::support::{BIN, Cluster, temp_dir, tls_file};
use std::process::Command;

fn check(dir: &std::path::Path, args: &[&str]) -> (bool, String, String) {
    run_in(dir, &[&["server", "--check"], args].concat())
}

/// `hetsched ARGS` run in `dir`: (success, stdout, stderr).
fn run_in(dir: &std::path::Path, args: &[&str]) -> (bool, String, String) {
    let out = Command::new(BIN)
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run hetsched");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_server_configuration_is_checked_without_starting_or_touching_the_data_directory() {
    let dir = temp_dir("config-check");
    let data = dir.join("data");
    let write = |name: &str, text: String| {
        let p = dir.join(name);
        std::fs::write(&p, text).expect("write");
        p.to_str().expect("path").to_string()
    };
    let good = write(
        "good.toml",
        format!(
            "data_dir = \"{}\"\nlisten = \"127.0.0.1:0\"\n[tls]\ncert = \"{}\"\nkey = \"{}\"\n",
            data.display(),
            tls_file("server.pem").display(),
            tls_file("server.key").display()
        ),
    );
    let (ok, stdout, stderr) = check(&dir, &["--config", &good]);
    assert!(ok, "{stdout}{stderr}");
    assert!(
        stdout.contains("good.toml") && stdout.contains("OK"),
        "{stdout}"
    );
    assert!(!data.exists(), "the check creates nothing");

    // A key file that is no key, named.
    let bad_key = write(
        "bad-tls.toml",
        format!(
            "data_dir = \"{}\"\n[tls]\ncert = \"{}\"\nkey = \"{}\"\n",
            data.display(),
            tls_file("server.pem").display(),
            tls_file("server.pem").display()
        ),
    );
    let (ok, _, stderr) = check(&dir, &["--config", &bad_key]);
    assert!(!ok && stderr.contains("server.pem"), "{stderr}");
    // A missing agent CA, named.
    let no_ca = write(
        "no-ca.toml",
        format!(
            "data_dir = \"{}\"\n[tls]\ncert = \"{}\"\nkey = \"{}\"\nagent_ca = \"{}\"\n",
            data.display(),
            tls_file("server.pem").display(),
            tls_file("server.key").display(),
            dir.join("nosuch-ca.pem").display()
        ),
    );
    let (ok, _, stderr) = check(&dir, &["--config", &no_ca]);
    assert!(!ok && stderr.contains("nosuch-ca.pem"), "{stderr}");
    // A flag out of bounds, named by its flag as at a start.
    let (ok, _, stderr) = check(&dir, &["--config", &good, "--dead-timeout", "0s"]);
    assert!(!ok && stderr.contains("--dead-timeout"), "{stderr}");
    // A data directory that is a file.
    let file = write("file", String::new());
    let (ok, _, stderr) = check(&dir, &["--data-dir", &file]);
    assert!(!ok && stderr.contains("not a directory"), "{stderr}");
    assert!(!data.exists());

    // The configuration of a running server checks while it runs, and leaves it be.
    let c = Cluster::start("config-check-live", false);
    let lock = std::fs::read_to_string(c.data().join("server.lock")).expect("lock");
    let (ok, stdout, stderr) = check(&dir, &["--data-dir", c.data().to_str().expect("path")]);
    assert!(ok, "{stdout}{stderr}");
    assert!(stdout.contains("a server runs on"), "{stdout}");
    // The store it would open: its schema number and the binary that last opened it.
    assert!(
        stdout.contains(&format!(
            "store schema {}, last opened by hetsched {}",
            hetsched_server::store::SCHEMA_VERSION,
            env!("CARGO_PKG_VERSION")
        )),
        "{stdout}"
    );
    assert_eq!(
        std::fs::read_to_string(c.data().join("server.lock")).expect("lock"),
        lock
    );
    c.ok(&["jobs"]);
}

/// `--check` checks the log settings as a start would, creating no log file: a `log_file` in a
/// directory that does not exist is refused naming the file, the key and the directory (the
/// flag when given by flag), a `log_format` that is none at its line with the formats taken.
#[test]
fn the_check_checks_the_log_file_and_format_without_creating_the_file() {
    let dir = temp_dir("config-check-logs");
    let data = dir.join("data");
    let write = |name: &str, text: String| {
        let p = dir.join(name);
        std::fs::write(&p, text).expect("write");
        p.to_str().expect("path").to_string()
    };
    let log = dir.join("server.log");
    let good = write(
        "good.toml",
        format!(
            "data_dir = \"{}\"\nlog_format = \"json\"\nlog_file = \"{}\"\n",
            data.display(),
            log.display()
        ),
    );
    let (ok, stdout, stderr) = check(&dir, &["--config", &good]);
    assert!(ok, "{stdout}{stderr}");
    assert!(
        stdout.contains(&format!("json log in {}", log.display())),
        "{stdout}"
    );
    assert!(!log.exists(), "the check created the log file");

    let missing = dir.join("nosuch").join("server.log");
    let bad_dir = write(
        "bad-dir.toml",
        format!(
            "data_dir = \"{}\"\nlog_file = \"{}\"\n",
            data.display(),
            missing.display()
        ),
    );
    let (ok, _, stderr) = check(&dir, &["--config", &bad_dir]);
    assert!(!ok, "{stderr}");
    assert!(
        stderr.contains(&format!("bad-dir.toml:2:1: log_file {}", missing.display()))
            && stderr.contains(&format!(
                "the directory {} does not exist",
                dir.join("nosuch").display()
            )),
        "{stderr}"
    );
    // The flag overrides the key, and is named.
    let (ok, stdout, stderr) = check(
        &dir,
        &[
            "--config",
            &bad_dir,
            "--log-file",
            log.to_str().expect("path"),
        ],
    );
    assert!(ok, "{stdout}{stderr}");
    let (ok, _, stderr) = check(
        &dir,
        &[
            "--config",
            &good,
            "--log-file",
            missing.to_str().expect("path"),
        ],
    );
    assert!(!ok && stderr.contains("--log-file"), "{stderr}");

    let bad_format = write(
        "bad-format.toml",
        format!("data_dir = \"{}\"\nlog_format = \"xml\"\n", data.display()),
    );
    let (ok, _, stderr) = check(&dir, &["--config", &bad_format]);
    assert!(!ok, "{stderr}");
    assert!(
        stderr.contains("bad-format.toml:2:")
            && stderr.contains("log_format")
            && stderr.contains("expected `text` or `json`"),
        "{stderr}"
    );
    assert!(!log.exists() && !data.exists());
}

#[test]
fn an_allocation_queues_agent_arguments_are_checked_as_its_agents_would_read_them() {
    let dir = temp_dir("config-check-agent-args");
    let queue = |agent_args: &str| {
        let p = dir.join("alloc.toml");
        std::fs::write(
            &p,
            format!(
                "data_dir = \"{}\"\nlisten = \"127.0.0.1:0\"\n[[allocation]]\nname = \"cpu\"\n\
                 manager = \"slurm\"\ntime_limit = \"1h\"\nattributes = [\"fast\"]\n\
                 agent_args = {agent_args}\n",
                dir.join("data").display()
            ),
        )
        .expect("write");
        check(&dir, &["--config", p.to_str().expect("path")])
    };
    // What the agent reads is accepted.
    let (ok, stdout, stderr) = queue(r#"["--attributes=bigmem", "--kill-grace", "30s"]"#);
    assert!(ok, "{stdout}{stderr}");
    // A misspelt flag would stop every allocation's agent at its start: refused, with the tip.
    let (ok, _, stderr) = queue(r#"["--atributes=bigmem"]"#);
    assert!(!ok, "{stderr}");
    assert!(
        stderr.contains("allocation queue `cpu`")
            && stderr.contains("alloc.toml")
            && stderr.contains("unexpected argument '--atributes'")
            && stderr.contains("a similar argument exists: '--attributes'"),
        "{stderr}"
    );
    // One the server gives each node itself.
    let (ok, _, stderr) = queue(r#"["--name=x"]"#);
    assert!(
        !ok && stderr.contains("'--name <NAME>' cannot be used multiple times"),
        "{stderr}"
    );
    // A value the agent's flag does not take.
    let (ok, _, stderr) = queue(r#"["--kill-grace", "soon"]"#);
    assert!(!ok && stderr.contains("--kill-grace"), "{stderr}");
}

/// `--check` says what a start would set right with a warning — a data directory open to other
/// users (0755), a token file others may read (0644) — as the start says it (it said OK and
/// nothing else), and still passes; it changes no mode.
#[test]
fn the_check_warns_of_a_data_directory_and_token_files_open_to_other_users() {
    use std::os::unix::fs::PermissionsExt;
    let dir = temp_dir("config-check-modes");
    let data = dir.join("data");
    std::fs::create_dir(&data).expect("dir");
    std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let token = data.join("token");
    std::fs::write(&token, "0123456789abcdef".repeat(4)).expect("token");
    std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    let (ok, stdout, stderr) = check(&dir, &["--data-dir", data.to_str().expect("path")]);
    assert!(ok, "{stdout}{stderr}");
    assert!(
        stderr.contains("data directory is open to other users: a start sets it to 0700"),
        "{stderr}"
    );
    assert!(
        stderr.contains("token is readable by other users: a start sets it to 0600"),
        "{stderr}"
    );
    let mode =
        |p: &std::path::Path| std::fs::metadata(p).expect("meta").permissions().mode() & 0o777;
    assert_eq!(
        (mode(&data), mode(&token)),
        (0o755, 0o644),
        "nothing changed"
    );
}

/// `a` then `b`.
fn joined<'a>(a: &[&'a str], b: &[&'a str]) -> Vec<&'a str> {
    [a, b].concat()
}

/// `hetsched agent --check ARGS` against `c`'s server: (success, stdout, stderr).
fn agent_check(c: &Cluster, args: &[&str]) -> (bool, String, String) {
    let url = c.url();
    run_in(
        &c.dir,
        &[&["agent", "--check", "--server", &url], args].concat(),
    )
}

#[test]
fn an_agent_configuration_is_checked_and_its_token_asked_of_the_server_without_registering() {
    let mut c = Cluster::start("agent-check", false);
    let token = c.data().join("agent-token");
    let token = token.to_str().expect("path").to_string();
    let work = c.dir.join("work-n1");
    let work = work.to_str().expect("path").to_string();
    let base = ["--name", "n1", "--cores", "2", "--work-dir", &work];
    let (ok, stdout, stderr) = agent_check(
        &c,
        &joined(&base, &["--token-file", &token, "--attributes", "ssd"]),
    );
    assert!(ok, "{stdout}{stderr}");
    assert!(
        stdout.contains("OK (node n1: 2 cores")
            && stdout.contains("attributes ssd")
            && stdout.contains("(made at start)")
            && stdout.contains("takes the agent token"),
        "{stdout}"
    );
    // Nothing made, nothing registered.
    assert!(!std::path::Path::new(&work).exists());
    assert_eq!(c.json(&["nodes", "--all"]), serde_json::json!([]));

    // The client's token is refused as the role it is, a wrong one as wrong.
    let admin = c.data().join("token");
    let (ok, _, stderr) = agent_check(
        &c,
        &joined(&base, &["--token-file", admin.to_str().expect("path")]),
    );
    assert!(!ok && stderr.contains("agent-token"), "{stderr}");
    let wrong = c.dir.join("wrong-token");
    std::fs::write(&wrong, "0123456789abcdef0123456789abcdef\n").expect("write");
    std::fs::set_permissions(&wrong, std::os::unix::fs::PermissionsExt::from_mode(0o600))
        .expect("chmod");
    let (ok, _, stderr) = agent_check(
        &c,
        &joined(&base, &["--token-file", wrong.to_str().expect("path")]),
    );
    assert!(!ok && stderr.contains("refused the token"), "{stderr}");

    // A running agent's work directory: reported, its lock and pid left as they were.
    c.start_agent("n1", 2, &[]);
    let running = c.dir.join("agent-n1");
    crate::support::wait_until(
        "the agent holds its work dir",
        std::time::Duration::from_secs(20),
        || crate::support::lines(&running.join("agent.lock")).len() == 1,
    );
    let pid = crate::support::lines(&running.join("agent.lock"));
    let (ok, stdout, stderr) = agent_check(
        &c,
        &[
            "--name",
            "n1",
            "--token-file",
            &token,
            "--work-dir",
            running.to_str().expect("path"),
        ],
    );
    assert!(ok, "{stdout}{stderr}");
    assert!(
        stdout.contains(&format!("an agent runs there (PID {})", pid[0])),
        "{stdout}"
    );
    assert_eq!(crate::support::lines(&running.join("agent.lock")), pid);
    // Its name from another work directory (another identity): a start would be refused, and
    // so is the check, with the start's words.
    let (ok, stdout, stderr) = agent_check(&c, &joined(&base, &["--token-file", &token]));
    assert!(
        !ok && stderr.contains("node name `n1` is held by a live agent with another identity"),
        "{stdout}{stderr}"
    );
    assert!(!std::path::Path::new(&work).exists(), "nothing made");

    // A bad value in the file, at its line; `--offline` asks no server.
    let file = c.dir.join("agent.toml");
    std::fs::write(&file, "cores = 2\ncore_speed = -1.0\n").expect("write");
    let (ok, _, stderr) = agent_check(&c, &["--offline", "--config", file.to_str().expect("path")]);
    assert!(
        !ok && stderr.contains("agent.toml:2:1: core_speed: must be between"),
        "{stderr}"
    );
    c.kill_server();
    let (ok, stdout, stderr) =
        agent_check(&c, &joined(&base, &["--token-file", &token, "--offline"]));
    assert!(
        ok && stdout.contains("not asked (--offline)"),
        "{stdout}{stderr}"
    );
    let (ok, _, stderr) = agent_check(&c, &joined(&base, &["--token-file", &token]));
    assert!(!ok && stderr.contains("did not answer"), "{stderr}");
}

/// An `https://` server without a CA certificate can never be reached (the agent trusts no
/// system store): `agent --check` and a start refuse it at once, as the client commands do,
/// naming where the URL came from. Before, a start retried every second for good ("the
/// server is not reachable yet (Connecting to HTTPS without TLS enabled)").
#[test]
fn an_https_server_without_a_ca_is_refused_by_an_agents_check_and_start() {
    let dir = temp_dir("agent-https-no-ca");
    let token = dir.join("agent-token");
    std::fs::write(&token, "0123456789abcdef0123456789abcdef\n").expect("token");
    std::fs::set_permissions(&token, std::os::unix::fs::PermissionsExt::from_mode(0o600))
        .expect("chmod");
    let token = token.to_str().expect("path").to_string();
    let work = dir.join("work");
    let work = work.to_str().expect("path").to_string();
    let base = [
        "agent",
        "--token-file",
        &token,
        "--work-dir",
        &work,
        "--name",
        "n1",
        "--log-listen",
        "127.0.0.1:0",
    ];
    let says = "give the CA certificate that signed the server's certificate (--ca FILE, the \
                configuration's `ca` or HETSCHED_CA)";
    let (ok, _, stderr) = run_in(
        &dir,
        &joined(&base, &["--server", "https://127.0.0.1:17499", "--check"]),
    );
    assert!(
        !ok && stderr.contains("the server URL `https://127.0.0.1:17499` (--server) is https://")
            && stderr.contains(says),
        "{stderr}"
    );
    // A start: refused at once, not retried.
    let started = std::time::Instant::now();
    let mut child = Command::new(BIN)
        .args(joined(&base, &["--server", "https://127.0.0.1:17499"]))
        .current_dir(&dir)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("agent");
    while child.try_wait().expect("wait").is_none() {
        if started.elapsed() > std::time::Duration::from_secs(20) {
            let _ = child.kill();
            panic!("the agent retried an https:// server it cannot reach without --ca");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let out = child.wait_with_output().expect("agent");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && stderr.contains(says), "{stderr}");
    // From the environment, named as such.
    let out = Command::new(BIN)
        .args(joined(&base, &["--check"]))
        .env("HETSCHED_SERVER", "https://head:7420")
        .env_remove("HETSCHED_CA")
        .current_dir(&dir)
        .output()
        .expect("agent --check");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && stderr.contains("(HETSCHED_SERVER) is https://"),
        "{stderr}"
    );
}

/// The file-mode warnings say the truth, and the same at `--check` and at a start: `--check`
/// warns of a `[tls] key` others may read, as a start does; a start without `http_listen`
/// makes `read-token` 0600, as `--check` says any start does (it left it 0644); and the
/// warning for `offload-secret` names that file, not "the token file".
#[test]
fn file_mode_warnings_agree_between_the_check_and_a_start_and_name_the_file() {
    use std::os::unix::fs::PermissionsExt;
    let dir = temp_dir("config-check-file-modes");
    let key = dir.join("server.key");
    std::fs::copy(tls_file("server.key"), &key).expect("key");
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    let config = dir.join("tls.toml");
    std::fs::write(
        &config,
        format!(
            "data_dir = \"{}\"\n[tls]\ncert = \"{}\"\nkey = \"{}\"\n",
            dir.join("tls-data").display(),
            tls_file("server.pem").display(),
            key.display()
        ),
    )
    .expect("config");
    let (ok, stdout, stderr) = check(&dir, &["--config", config.to_str().expect("path")]);
    assert!(ok, "{stdout}{stderr}");
    assert!(
        stderr.contains("the TLS private key is readable by other users: `chmod 600` it"),
        "{stderr}"
    );

    let data = dir.join("data");
    std::fs::create_dir(&data).expect("data");
    std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o700)).expect("chmod");
    for name in ["read-token", "offload-secret"] {
        let p = data.join(name);
        std::fs::write(&p, "0123456789abcdef".repeat(4)).expect("secret");
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    }
    let data_arg = data.to_str().expect("path");
    let (ok, _, stderr) = check(&dir, &["--data-dir", data_arg]);
    assert!(
        ok && stderr.contains("read-token is readable by other users: a start sets it to 0600"),
        "{stderr}"
    );
    let log = dir.join("server.err");
    let mut server = Command::new(BIN)
        .args(["server", "--data-dir", data_arg, "--listen", "127.0.0.1:0"])
        .current_dir(&dir)
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&log).expect("log"))
        .spawn()
        .expect("server");
    let started = std::time::Instant::now();
    while !data.join("address").exists() && started.elapsed() < std::time::Duration::from_secs(30) {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let _ = server.kill();
    let _ = server.wait();
    let stderr = std::fs::read_to_string(&log).expect("log");
    assert!(
        data.join("address").exists(),
        "the server started: {stderr}"
    );
    let mode =
        |p: &std::path::Path| std::fs::metadata(p).expect("meta").permissions().mode() & 0o777;
    assert_eq!(
        (
            mode(&data.join("read-token")),
            mode(&data.join("offload-secret"))
        ),
        (0o600, 0o600),
        "{stderr}"
    );
    assert!(
        stderr.contains("the offload secret file was readable by other users: setting it to 0600")
            && stderr.contains("the read-only token file was readable by other users")
            && !stderr.contains("the token file"),
        "{stderr}"
    );
}

/// Slips in a configuration are named at their line: a `[tls] cert` or `log_file` that cannot
/// be read (the file and line of the key, not only the path), a `start_failure_backoff` of 0s
/// with `start_failures` on (it turned the back-off off silently) and a `profile_estimate` of
/// 0s are refused, and an empty `[retention]` table, which purges nothing, is warned of.
#[test]
fn configuration_slips_are_refused_or_warned_of_at_their_line() {
    let dir = temp_dir("config-check-slips");
    let write = |name: &str, body: &str| {
        let p = dir.join(name);
        std::fs::write(
            &p,
            format!(
                "data_dir = \"{}\"\nlisten = \"127.0.0.1:0\"\n{body}",
                dir.join("data").display()
            ),
        )
        .expect("write");
        p.to_str().expect("path").to_string()
    };
    let refused = |file: &str, needle: &str| {
        let (ok, _, stderr) = check(&dir, &["--config", file]);
        assert!(!ok && stderr.contains(needle), "{needle} not in: {stderr}");
    };
    let tls = write(
        "tls.toml",
        &format!(
            "[tls]\ncert = \"{}\"\nkey = \"{}\"\n",
            dir.join("nosuch.pem").display(),
            tls_file("server.key").display()
        ),
    );
    refused(
        &tls,
        &format!(
            "{tls}:4:1: {}: tls.cert: cannot read the certificate chain",
            dir.join("nosuch.pem").display()
        ),
    );
    let log = write("log.toml", "log_file = \"/nonexistent-dir/s.log\"\n");
    refused(
        &log,
        &format!("{log}:3:1: log_file /nonexistent-dir/s.log: the directory /nonexistent-dir"),
    );
    let backoff = write(
        "backoff.toml",
        "start_failures = 3\nstart_failure_backoff = \"0s\"\n",
    );
    refused(
        &backoff,
        &format!("{backoff}:4:1: start_failure_backoff (0s) must be at least 1s"),
    );
    // Off on purpose: no back-off, whatever its length.
    let off = write(
        "off.toml",
        "start_failures = 0\nstart_failure_backoff = \"0s\"\n",
    );
    let (ok, _, stderr) = check(&dir, &["--config", &off]);
    assert!(ok, "{stderr}");
    let estimate = write("estimate.toml", "profile_estimate = \"0s\"\n");
    refused(
        &estimate,
        &format!("{estimate}:3:1: profile_estimate (0s) must be at least 1ms"),
    );
    let retention = write("retention.toml", "[retention]\n");
    let (ok, _, stderr) = check(&dir, &["--config", &retention]);
    assert!(ok, "{stderr}");
    assert!(
        stderr.contains(&format!(
            "{retention}:3:2: [retention] names neither keep_finished nor keep_jobs: it purges \
             nothing"
        )),
        "{stderr}"
    );
}
