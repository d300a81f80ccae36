//! Accelerator sharing at the command line (spec 01, issue 11): the agent's rack and accelerator
//! service flags.

use anyhow::Context;
use std::net::SocketAddr;

/// The rack a node joins when none is given.
pub const DEFAULT_RACK: &str = "default";

/// `--rack`, `--accel-listen`, `--accel-cert`/`--accel-key` (flags override the configuration).
pub fn agent_accel_options(
    a: &super::serve::AgentArgs,
    config: &hetsched_agent::config::AgentConfig,
) -> anyhow::Result<hetsched_agent::accel::AccelOptions> {
    let rack = a
        .rack
        .clone()
        .or(config.rack.clone())
        .unwrap_or_else(|| DEFAULT_RACK.to_string());
    if rack.is_empty() || rack.len() > 128 || rack.chars().any(char::is_control) {
        anyhow::bail!("--rack `{rack}`: a rack name is 1 to 128 characters, no control characters");
    }
    let listen = match a.accel_listen.as_deref() {
        Some("none") => None,
        None => Some(
            config
                .accel_listen
                .unwrap_or(SocketAddr::from(([0, 0, 0, 0], 0))),
        ),
        Some(s) => Some(
            s.parse()
                .with_context(|| format!("--accel-listen `{s}`: expected HOST:PORT or none"))?,
        ),
    };
    let tls = match (&a.accel_cert, &a.accel_key) {
        (Some(c), Some(k)) => Some((
            std::fs::read(c).with_context(|| format!("reading {}", c.display()))?,
            std::fs::read(k).with_context(|| format!("reading {}", k.display()))?,
        )),
        _ => None,
    };
    Ok(hetsched_agent::accel::AccelOptions { rack, listen, tls })
}
