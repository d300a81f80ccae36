//! The agent's log listener over TLS: an agent started with `--log-cert`/`--log-key` serves task
//! output only over TLS, still only to callers with the agent token and the server's log ticket
//! (the agent token alone reads nothing: every agent holds it), and a server with
//! `[tls] agent_ca` reads it through there for `hetsched log` and `submit --wait`. The test CA
//! and certificate of `tests/tls` (for `127.0.0.1`) play both the server's and the agent's part.

use crate::support;

use hetsched_proto as pb;
use std::time::Duration;
use support::{Cluster, tls_file, wait_until};

/// The address the agent's log listener bound, from its log.
fn listener_addr(c: &Cluster, agent: &str) -> String {
    let mut addr = String::new();
    wait_until("the agent's log listener", Duration::from_secs(20), || {
        let log = c.agent_log(agent);
        let Some(line) = log
            .lines()
            .find(|l| l.contains("serving task outputs to the server"))
        else {
            return false;
        };
        addr = line
            .split_whitespace()
            .find_map(|w| w.strip_prefix("addr="))
            .unwrap_or_default()
            .to_string();
        !addr.is_empty()
    });
    addr
}

/// One `AgentLogs.ReadLog` call at `url` with `token`.
fn read_log(url: &str, ca: Option<&[u8]>, token: &str) -> Result<pb::ReadLogReply, String> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let ch = pb::endpoint(url, ca)
            .map_err(|e| e.to_string())?
            .timeout(Duration::from_secs(5))
            .connect()
            .await
            .map_err(|e| format!("connect: {e}"))?;
        let mut client = pb::agent_logs_client::AgentLogsClient::with_interceptor(
            ch,
            pb::TokenInterceptor::new(token).expect("token"),
        );
        client
            .read_log(pb::AgentLogRequest {
                job_id: 1,
                app: "t".into(),
                index: 0,
                attempt: 1,
                stderr: true,
                ..Default::default()
            })
            .await
            .map(tonic::Response::into_inner)
            .map_err(|s| format!("{:?}: {}", s.code(), s.message()))
    })
}

#[test]
fn the_log_listener_speaks_tls_with_a_certificate_and_still_checks_the_token() {
    let mut c = Cluster::start_tls("log-tls");
    let (cert, key) = (tls_file("server.pem"), tls_file("server.key"));
    c.start_agent(
        "a",
        1,
        &[
            "--log-cert",
            cert.to_str().expect("path"),
            "--log-key",
            key.to_str().expect("path"),
        ],
    );
    c.wait_for_nodes(1);
    let job = c.write(
        "job.toml",
        "[[application]]\nname = \"t\"\ntasks = 1\nretries = 0\n[application.cpu]\n\
         command = 'echo through-tls-stderr >&2; exit 3'\n",
    );
    // The failing task's stderr comes back through the server from the TLS listener.
    let out = c.cli(&["submit", job.to_str().expect("path"), "--wait"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("through-tls-stderr"), "{err}");
    let out = c.cli(&["log", "1", "t:0", "--stderr"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "through-tls-stderr\n");

    // Directly: TLS with the agent token but no ticket from the server is refused (any agent
    // node holds that token); TLS with another token is refused; plain text gets nothing.
    let addr = listener_addr(&c, "a");
    let ca = std::fs::read(tls_file("ca.pem")).expect("ca");
    let agent_token = std::fs::read_to_string(c.data().join("agent-token")).expect("agent token");
    let client_token = std::fs::read_to_string(c.data().join("token")).expect("token");
    let https = format!("https://{addr}");
    let refused = read_log(&https, Some(&ca), agent_token.trim()).expect_err("no ticket");
    assert!(
        refused.starts_with("PermissionDenied") && refused.contains("no ticket from the server"),
        "{refused}"
    );
    let refused = read_log(&https, Some(&ca), client_token.trim()).expect_err("the client token");
    assert!(refused.starts_with("Unauthenticated"), "{refused}");
    let plain = read_log(&format!("http://{addr}"), None, agent_token.trim());
    assert!(plain.is_err(), "plain text was answered: {plain:?}");
}

#[test]
fn agent_log_flags_come_in_pairs() {
    let out = std::process::Command::new(support::BIN)
        .args(["agent", "--log-cert", "x.pem"])
        .output()
        .expect("runs");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--log-key"), "{err}");
}
