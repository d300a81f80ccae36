//! Accelerator sharing at the command line (spec 01, issue 11): the agent's rack and accelerator
//! service flags.

use super::human::shown;

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
    if let Some(problem) = rack_problem(&rack) {
        // Named as it was given: a file's value is no `--rack` of the user's.
        let given = if a.rack.is_some() {
            "--rack"
        } else {
            "the configuration's `rack`"
        };
        anyhow::bail!("{given} `{}`: {problem}", shown(&rack));
    }
    let listen = super::serve::agent_listen(
        "--accel-listen",
        a.accel_listen.as_deref(),
        config.accel_listen,
    )?;
    let tls = match (&a.accel_cert, &a.accel_key) {
        (Some(c), Some(k)) => Some(super::serve::read_listener_tls(
            "--accel-cert",
            c,
            "--accel-key",
            k,
        )?),
        _ => None,
    };
    Ok(hetsched_agent::accel::AccelOptions { rack, listen, tls })
}

/// Why the agent cannot name rack `rack`, if it cannot: it must be 1 to
/// [`MAX_RACK_NAME_BYTES`](hetsched_core::model::cluster::MAX_RACK_NAME_BYTES) bytes without
/// control or invisible formatting characters — the bounds the server checks at registration
/// ([`hetsched_server::limits::rack`], with the same [`hetsched_core::text::unshown_problem`]),
/// so an agent it would refuse stops at its start, naming the flag, rather than registering
/// in a loop.
fn rack_problem(rack: &str) -> Option<String> {
    use hetsched_core::model::cluster::MAX_RACK_NAME_BYTES;
    const RULE: &str =
        "a rack name is 1 to 128 bytes, no control or invisible formatting characters";
    const _: () = assert!(MAX_RACK_NAME_BYTES == 128, "RULE states the bound");
    if rack.is_empty() {
        return Some(format!("is empty; {RULE}"));
    }
    if rack.len() > MAX_RACK_NAME_BYTES {
        return Some(format!("is {} bytes long; {RULE}", rack.len()));
    }
    hetsched_core::text::unshown_problem(rack).map(|problem| format!("{problem}; {RULE}"))
}

/// A node's role in accelerator sharing: `ANode` (has accelerators) or `NNode`.
pub fn role(n: &hetsched_proto::NodeInfo) -> &'static str {
    if n.role == "anode" || (n.role.is_empty() && !n.accelerators.is_empty()) {
        "ANode"
    } else {
        "NNode"
    }
}

/// The `binding` cell of `hetsched nodes`: an NNode's ANode, `unbound`, or `-` for an ANode.
pub fn binding_cell(n: &hetsched_proto::NodeInfo) -> String {
    if role(n) == "ANode" {
        "-".into()
    } else if n.bound_to.is_empty() {
        "unbound".into()
    } else {
        format!("-> {}", n.bound_to)
    }
}

/// The accelerator service's queue lengths: receiving / process queue / write queue.
pub fn queues_cell(n: &hetsched_proto::NodeInfo) -> String {
    match &n.accel {
        Some(a) => format!("{}/{}/{}", a.reading, a.process_queue, a.write_queue),
        None => "-".into(),
    }
}

/// The binding map per rack, as `hetsched bindings` prints it.
#[derive(Debug, serde::Serialize)]
pub struct RackMap {
    /// The rack.
    pub rack: String,
    /// Its live ANodes, by name, with their NNodes.
    pub anodes: Vec<AnodeEntry>,
    /// Live NNodes with no ANode (their rack has none).
    pub unbound: Vec<String>,
}

/// One ANode of a [`RackMap`].
#[derive(Debug, serde::Serialize)]
pub struct AnodeEntry {
    /// The ANode.
    pub name: String,
    /// NNodes bound to it, by name (`NNODE/k` for container `k` with `binding = "container"`).
    pub nnodes: Vec<String>,
    /// Its accelerator service's queues (null when it reports no service).
    pub reading: Option<u32>,
    /// Tasks waiting for a device.
    pub process_queue: Option<u32>,
    /// Results waiting to be sent back.
    pub write_queue: Option<u32>,
    /// Devices running a task now.
    pub busy_devices: Option<u32>,
}

/// Builds the per-rack map from a node listing (live nodes only).
pub fn rack_maps(nodes: &[hetsched_proto::NodeInfo]) -> Vec<RackMap> {
    use std::collections::BTreeMap;
    let mut racks: BTreeMap<String, RackMap> = BTreeMap::new();
    let live = nodes.iter().filter(|n| n.alive);
    for n in live.clone() {
        let r = racks.entry(n.rack.clone()).or_insert_with(|| RackMap {
            rack: n.rack.clone(),
            anodes: Vec::new(),
            unbound: Vec::new(),
        });
        if role(n) == "ANode" {
            r.anodes.push(AnodeEntry {
                name: n.name.clone(),
                nnodes: Vec::new(),
                reading: n.accel.as_ref().map(|a| a.reading),
                process_queue: n.accel.as_ref().map(|a| a.process_queue),
                write_queue: n.accel.as_ref().map(|a| a.write_queue),
                busy_devices: n
                    .accel
                    .as_ref()
                    .map(|a| a.devices.iter().filter(|d| d.busy).count() as u32),
            });
        }
    }
    for n in live {
        if role(n) == "ANode" {
            continue;
        }
        let Some(r) = racks.get_mut(&n.rack) else {
            continue;
        };
        // With container binding each container is bound on its own: `NNODE/k`.
        let units: Vec<(String, &str)> = if n.containers.is_empty() {
            vec![(n.name.clone(), n.bound_to.as_str())]
        } else {
            n.containers
                .iter()
                .enumerate()
                .map(|(k, a)| (format!("{}/{k}", n.name), a.as_str()))
                .collect()
        };
        for (unit, anode) in units {
            match r.anodes.iter_mut().find(|a| a.name == anode) {
                Some(a) if !anode.is_empty() => a.nnodes.push(unit),
                _ => r.unbound.push(unit),
            }
        }
    }
    let mut out: Vec<RackMap> = racks.into_values().collect();
    for r in &mut out {
        r.anodes.sort_by(|a, b| a.name.cmp(&b.name));
        for a in &mut r.anodes {
            a.nnodes.sort();
        }
        r.unbound.sort();
    }
    out
}

/// `hetsched bindings`.
pub async fn bindings(args: &super::ClientArgs) -> anyhow::Result<()> {
    let reply = super::client::connect(args)
        .await?
        .list_nodes(hetsched_proto::ListNodesRequest::default())
        .await
        .map_err(super::client::refused)?
        .into_inner();
    let maps = rack_maps(&reply.nodes);
    if args.output == super::Output::Json {
        println!("{}", serde_json::to_string_pretty(&maps)?);
        return Ok(());
    }
    if maps.is_empty() {
        println!("no live nodes");
    }
    for r in &maps {
        println!("rack {}", shown(&r.rack));
        if r.anodes.is_empty() {
            println!("  (no ANode: its NNodes cannot run accelerator work)");
        }
        for a in &r.anodes {
            let queues = match (a.reading, a.process_queue, a.write_queue) {
                (Some(x), Some(y), Some(z)) => format!("queues r/p/w {x}/{y}/{z}"),
                _ => "no accelerator service".to_string(),
            };
            let nn = if a.nnodes.is_empty() {
                "-".to_string()
            } else {
                a.nnodes.join(", ")
            };
            println!("  {} ({queues}) <- {}", shown(&a.name), shown(&nn));
        }
        if !r.unbound.is_empty() {
            println!("  unbound: {}", shown(&r.unbound.join(", ")));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    /// `hetsched agent`'s flags alone.
    #[derive(Parser)]
    struct Agent {
        #[command(flatten)]
        args: crate::runtime::serve::AgentArgs,
    }

    fn options_with_rack(rack: &str) -> anyhow::Result<hetsched_agent::accel::AccelOptions> {
        let agent = Agent::try_parse_from(["agent", "--rack", rack]).expect("flags");
        agent_accel_options(&agent.args, &Default::default())
    }

    /// A rack the server would refuse at registration (an invisible formatting character: a
    /// bidi override, a zero-width space) stops the agent at its start, naming `--rack` and
    /// the character by its place. Before, only control characters were refused here, and such
    /// an agent was refused at every registration.
    #[test]
    fn a_rack_with_an_invisible_character_is_refused_at_the_agents_start_naming_the_flag() {
        for (rack, problem) in [
            (
                "r1\u{202e}",
                "character 3 is U+202E RIGHT-TO-LEFT OVERRIDE, which is not allowed",
            ),
            ("r\u{200b}1", "character 2 is U+200B ZERO WIDTH SPACE"),
            ("r\u{1b}1", "character 2 is U+001B (a control character)"),
        ] {
            let err = options_with_rack(rack).expect_err(rack).to_string();
            assert!(err.starts_with("--rack `"), "{err}");
            assert!(err.contains(problem), "{err}");
            assert!(
                !err.chars().any(hetsched_core::text::hidden),
                "the message shows the rack escaped: {err}"
            );
            assert!(
                hetsched_server::limits::rack(rack).is_err(),
                "the server refuses it too"
            );
        }
        let err = options_with_rack("").expect_err("empty").to_string();
        assert!(err.starts_with("--rack ``: is empty"), "{err}");
        let long = "r".repeat(129);
        let err = options_with_rack(&long).expect_err("long").to_string();
        assert!(err.contains("is 129 bytes long"), "{err}");
    }

    /// A rack the server takes is taken here too.
    #[test]
    fn a_rack_the_server_takes_is_taken_at_the_agents_start() {
        for rack in ["r1", "salle-b/rangée 3", &"r".repeat(128)] {
            assert!(hetsched_server::limits::rack(rack).is_ok());
            let options = options_with_rack(rack).expect(rack);
            assert_eq!(options.rack, rack);
        }
    }
}
