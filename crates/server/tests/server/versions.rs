//! Which hetsched version each node's agent runs: said at registration, listed with the node
//! (and kept across a server restart, since agents do not register again then), and the
//! server's own in the reply; an agent that predates the field lists as unknown.

use crate::common::IDENTITY;
use crate::common::Scratch;

use hetsched_proto as pb;
use hetsched_server::ServerConfig;
use hetsched_server::convert::Wire;
use hetsched_server::state::State;
use hetsched_server::state::nodes::agent_version_warning;
use hetsched_server::store::Store;
use std::path::Path;

fn dir(name: &str) -> Scratch {
    Scratch::new("versions", name)
}

fn open(d: &Path) -> State {
    let config = ServerConfig {
        data_dir: d.to_path_buf(),
        ..Default::default()
    };
    State::open(&config, Store::open(&d.join("state.db")).expect("store")).expect("state")
}

fn registration(name: &str, version: &str) -> pb::RegisterRequest {
    pb::RegisterRequest {
        name: name.into(),
        cores: 2,
        memory_bytes: 1 << 30,
        identity: IDENTITY.into(),
        version: version.into(),
        ..Default::default()
    }
}

fn versions(s: &State) -> Vec<(String, String)> {
    s.nodes(false)
        .nodes
        .into_iter()
        .map(|n| (n.name, n.version))
        .collect()
}

#[test]
fn each_nodes_agent_version_is_listed_and_kept_and_the_reply_says_the_servers() {
    let d = dir("listed");
    let mut s = open(&d);
    let reply = s.register(registration("new", "0.9.1")).expect("register");
    assert_eq!(reply.version, env!("CARGO_PKG_VERSION"), "{reply:?}");
    // An agent that predates the field says nothing: unknown (empty), and still registered.
    let reply = s.register(registration("old", "")).expect("an older agent");
    assert_eq!(reply.version, env!("CARGO_PKG_VERSION"));
    assert_eq!(
        versions(&s),
        [
            ("new".into(), "0.9.1".into()),
            ("old".into(), String::new())
        ]
    );
    // Upgraded in place: the next registration's version replaces the last.
    s.register(registration("old", "0.9.2")).expect("upgraded");
    assert_eq!(versions(&s)[1], ("old".into(), "0.9.2".into()));
    // A restarted server lists them before they are heard from again (agents do not register
    // again after a server restart: they heartbeat on).
    drop(s);
    let s = open(&d);
    assert_eq!(
        versions(&s),
        [
            ("new".into(), "0.9.1".into()),
            ("old".into(), "0.9.2".into())
        ]
    );
}

#[test]
fn a_version_with_control_characters_or_too_long_is_refused() {
    let d = dir("refused");
    let mut s = open(&d);
    for bad in ["0.1.0\u{1b}[2J".to_string(), "9".repeat(65)] {
        let e = s
            .register(registration("n", &bad))
            .expect_err("refused")
            .to_string();
        assert!(e.contains("at most 64 printable ASCII"), "{e}");
    }
    assert!(versions(&s).is_empty());
}

#[test]
fn the_servers_warning_names_the_node_both_versions_and_the_upgrade_order() {
    assert_eq!(agent_version_warning("n1", "0.1.0", "0.1.0"), None);
    let w = agent_version_warning("n1", "0.1.0", "0.2.0").expect("differs");
    assert!(
        w.contains("node `n1`'s agent runs hetsched 0.1.0, this server 0.2.0")
            && w.contains("upgrade the server first, then the agents"),
        "{w}"
    );
    let w = agent_version_warning("n2", "", "0.2.0").expect("unknown");
    assert!(
        w.contains("node `n2`'s agent runs hetsched an unknown version"),
        "{w}"
    );
}
