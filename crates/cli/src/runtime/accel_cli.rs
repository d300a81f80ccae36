//! Accelerator sharing at the command line (spec 01, issue 11): the agent's rack and accelerator
//! service flags.

use super::human::shown;
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
