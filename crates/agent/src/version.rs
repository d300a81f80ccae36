//! Which hetsched version this agent runs, and what it tells the operator when its server runs
//! another. Mixed versions refuse some requests between them (docs/runtime.md, "Upgrading"): the
//! upgrade order is the server first, then the agents, and an agent that finds its server older
//! says what will not work and how to fix it, once per registration.

use std::cmp::Ordering;

/// This agent's hetsched version, sent at each registration (`RegisterRequest.version`). The
/// build exposes no commit, so the package version alone.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// `MAJOR.MINOR.PATCH` of a version string, ignoring a pre-release (`-rc1`) or build (`+abc`)
/// suffix; `None` if it does not read so (then versions are only said to differ).
fn numbers(v: &str) -> Option<(u64, u64, u64)> {
    let core = v.split(['-', '+']).next()?;
    let mut parts = core.split('.').map(str::parse::<u64>);
    let n = (
        parts.next()?.ok()?,
        parts.next()?.ok()?,
        parts.next()?.ok()?,
    );
    parts.next().is_none().then_some(n)
}

/// What the agent logs as a warning when the server's registration reply says version `server`
/// (empty: a server that predates saying it, hence older than this agent) and this agent runs
/// `own`; `None` when they agree.
pub fn server_version_warning(own: &str, server: &str) -> Option<String> {
    if own == server {
        return None;
    }
    // What an agent of this version misses under an older server (docs/runtime.md): the data
    // key that every heartbeat reply of a server with fetch and log tickets carries.
    let older = |server: &str| {
        format!(
            "the server runs hetsched {server}, older than this agent's {own}: if it predates \
             fetch and log tickets it gives this agent no data key, so workflow fetches from \
             this node and log reads of its tasks are refused, and so are PCDDB requests from \
             other agents if it predates grants. Upgrade the server first, then the agents \
             (docs/runtime.md, \"Upgrading\")"
        )
    };
    if server.is_empty() {
        return Some(older(
            "of an unknown version (it says none: older than version reporting)",
        ));
    }
    Some(
        match numbers(server).zip(numbers(own)).map(|(s, o)| s.cmp(&o)) {
            Some(Ordering::Less) => older(server),
            Some(Ordering::Greater) => format!(
                "the server runs hetsched {server}, newer than this agent's {own}: some requests \
             between agents of different versions are refused (workflow fetches, PCDDB \
             requests, offloads). Upgrade this agent to {server} (docs/runtime.md, \"Upgrading\")"
            ),
            // Same numbers with another suffix, or a version that does not read as numbers.
            _ => format!(
                "the server runs hetsched {server}, this agent {own}: run one version on the \
             cluster; upgrade the server first, then the agents (docs/runtime.md, \"Upgrading\")"
            ),
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_older_or_silent_server_is_named_with_what_fails_and_the_fix() {
        assert_eq!(server_version_warning("0.2.0", "0.2.0"), None);
        for (server, says) in [
            (
                "",
                "the server runs hetsched of an unknown version (it says none",
            ),
            (
                "0.1.9",
                "the server runs hetsched 0.1.9, older than this agent's 0.2.0",
            ),
        ] {
            let w = server_version_warning("0.2.0", server).expect("a warning");
            assert!(w.starts_with(says), "{w}");
            assert!(
                w.contains("no data key")
                    && w.contains("workflow fetches")
                    && w.contains("log reads")
                    && w.contains("Upgrade the server first"),
                "{w}"
            );
        }
    }

    #[test]
    fn a_newer_server_asks_to_upgrade_this_agent_and_unreadable_ones_only_differ() {
        let w = server_version_warning("0.1.0", "0.10.0").expect("newer");
        assert!(
            w.contains("0.10.0, newer than this agent's 0.1.0") && w.contains("Upgrade this agent"),
            "{w}"
        );
        let w = server_version_warning("0.1.0", "0.1.0+abc").expect("another build");
        assert!(w.contains("run one version"), "{w}");
        assert!(
            server_version_warning("0.1.0", "weird")
                .is_some_and(|w| w.contains("hetsched weird, this agent 0.1.0")),
        );
    }
}
