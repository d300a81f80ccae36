//! Cluster description files (TOML): racks and nodes with cores, clock, memory, disk, network and
//! accelerators. The simulator models them; the runtime uses the same format for resources an
//! agent declares. See `examples/cluster-hdas-paper.toml` for a commented example.

use super::units::{Bandwidth, Duration};
use super::{InputError, Source};
use crate::model::{Accelerator, Cluster, Node, NodeId, Rack, RackId};
use bytesize::ByteSize;
use serde::{Deserialize, Serialize};
use serde_spanned::Spanned;
use std::collections::HashMap;

/// A cluster file as written.
#[derive(Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterFile {
    /// Racks; nodes that name none go to a rack called `default`.
    #[serde(default)]
    pub rack: Vec<RackSpec>,
    /// Node groups.
    #[serde(default)]
    pub node: Vec<NodeSpec>,
}

/// A rack as written.
#[derive(Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RackSpec {
    /// Unique name.
    pub name: Spanned<String>,
}

/// A group of identical nodes as written.
#[derive(Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct NodeSpec {
    /// Name; with `count` > 1 the nodes are named `name-1` … `name-N`. As the runtime's node
    /// names ([`node_name_problem`]): 1 to [`MAX_NODE_NAME_BYTES`] bytes of letters, digits, `.`,
    /// `-` and `_`.
    pub name: Spanned<String>,
    /// How many identical nodes this entry stands for.
    #[serde(default = "one")]
    pub count: Spanned<u32>,
    /// Rack name.
    pub rack: Option<Spanned<String>>,
    /// CPU cores.
    pub cores: Spanned<u32>,
    /// Relative core speed (1.0 = the reference core of the profiles).
    #[serde(default = "unit_speed")]
    pub core_speed: Spanned<f64>,
    /// Main memory, e.g. `"64GiB"`; more than 0.
    #[serde(default = "default_memory")]
    pub memory: Spanned<Size>,
    /// Disk read bandwidth, e.g. `"128MB/s"` (bytes; a rate with a lowercase `b` or `bit`,
    /// `"800Mb/s"`, counts bits: see [`rate_bytes_per_sec`](super::rate_bytes_per_sec)).
    #[serde(default = "default_disk")]
    pub disk_read: Bandwidth,
    /// Network bandwidth, e.g. `"125MB/s"`, or the same written in bits, `"1Gb/s"` or
    /// `"1Gbit/s"`.
    #[serde(default = "default_network")]
    pub network: Bandwidth,
    /// One-way network latency, e.g. `"100us"`.
    #[serde(default = "default_latency")]
    pub latency: Duration,
    /// Accelerators.
    #[serde(default)]
    pub accelerator: Vec<AcceleratorSpec>,
    /// Worker-process slots for stream topologies (spec 04); [`DEFAULT_SLOTS`] when absent.
    #[serde(default)]
    pub slots: Option<Spanned<u32>>,
    /// Free-form attributes a workflow task may `require` (e.g. `"fpga"`, `"bigmem"`); read by
    /// [`parse_node_attributes`]. A node with accelerators also has the attribute `gpu`.
    #[serde(default)]
    pub attributes: Vec<Spanned<String>>,
}

/// A size in bytes as written (`"64GiB"` or a number of bytes), read with
/// [`byte_size`](super::units::byte_size)'s messages; spanned where it is written, so a bad one is
/// named at its line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Size(pub ByteSize);

impl<'de> Deserialize<'de> for Size {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        super::units::byte_size(d).map(Size)
    }
}

impl Serialize for Size {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(s)
    }
}

/// Longest node name, in bytes (a DNS host name's limit, and the runtime's).
pub const MAX_NODE_NAME_BYTES: usize = 253;

/// Why `name` is not a node name, if it is not. The runtime's rule for the names agents register
/// with: 1 to [`MAX_NODE_NAME_BYTES`] bytes of ASCII letters, digits, `.`, `-` and `_` (no
/// blanks, control characters or newlines, which would break every listing and requirement).
pub fn node_name_problem(name: &str) -> Option<String> {
    if name.is_empty() {
        return Some("a node name must not be empty".into());
    }
    if name.len() > MAX_NODE_NAME_BYTES {
        return Some(format!(
            "node name is {} bytes long; at most {MAX_NODE_NAME_BYTES}",
            name.len()
        ));
    }
    let ok = name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_'));
    (!ok).then(|| {
        format!(
            "node name `{}` may hold only letters, digits, `.`, `-` and `_`",
            name.escape_debug()
        )
    })
}

/// Worker-process slots of a node whose entry names none: Storm's default of four supervisor
/// ports (6700–6703).
pub const DEFAULT_SLOTS: u32 = 4;
/// Most nodes one cluster file describes (`count` included): a typo such as `count = 4294967295`
/// is refused instead of exhausting memory.
pub const MAX_CLUSTER_NODES: u64 = 100_000;
/// Most accelerators on one node, all its entries together (the runtime's bound on an agent's
/// registration too).
pub const MAX_NODE_ACCELERATORS: u64 = 256;
/// Most cores one node may have: the runtime's bound on an agent's registration. A cluster's
/// cores in all are at most `u32::MAX` besides ([`Cluster::totals`](crate::model::Cluster::totals)
/// holds them), as its memory in all is at most 16 EiB: two nodes of 4294967295 cores, or of
/// 15 EiB, made every simulation panic on the overflow of their sum.
pub const MAX_NODE_CORES: u32 = 65_536;
/// Most memory one node, or one of its accelerators, may have: 1 PiB, the runtime's bound on an
/// agent's registration too. More is a typo (`"15EiB"` for `"15GiB"`) that no real machine
/// matches, and it leaves the cluster's memory in all ([`Cluster::totals`](crate::model::Cluster::totals),
/// at most 16 EiB) room for 16,384 such nodes.
pub const MAX_NODE_MEMORY: u64 = 1 << 50;
/// The range of a core's or an accelerator's `speed` relative to the reference: wide enough for
/// any real pair of machines, narrow enough that run times stay within the simulator's clock and
/// the makespan bound's LP stays well conditioned.
pub const SPEED_RANGE: std::ops::RangeInclusive<f64> = 1e-3..=1e3;

/// Why `speed` is not a usable relative speed, if it is not (a cluster file's `core_speed`
/// and devices' `speed`, an agent configuration's `core_speed`).
pub fn speed_problem(speed: f64) -> Option<String> {
    (!SPEED_RANGE.contains(&speed)).then(|| {
        format!(
            "must be between {} and {} (relative to the reference, 1.0); got {}",
            SPEED_RANGE.start(),
            SPEED_RANGE.end(),
            super::units::shown(speed)
        )
    })
}

/// A group of identical accelerators on a node, as written.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct AcceleratorSpec {
    /// Kind, e.g. `"tesla-c2050"`: named as an attribute is
    /// ([`check_attribute`](crate::model::cluster::check_attribute)), as a GPU variant's `kind`.
    pub kind: Spanned<String>,
    /// How many devices.
    #[serde(default = "one")]
    pub count: Spanned<u32>,
    /// Device memory, as the node's `memory`; more than 0.
    #[serde(default = "default_gpu_memory")]
    pub memory: Spanned<Size>,
    /// Relative speed (1.0 = the reference device of the profiles).
    #[serde(default = "unit_speed")]
    pub speed: Spanned<f64>,
    /// An agent's only: what a task given each device finds in `CUDA_VISIBLE_DEVICES`, one name
    /// per device in order (a MIG instance's `MIG-…` UUID, a GPU's `GPU-…` UUID); `count`,
    /// when written, must agree. Left out: the device's index among the node's devices.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub visible: Option<Spanned<Vec<String>>>,
}

/// Longest device name [`AcceleratorSpec::visible`] accepts (a UUID is 40 bytes).
pub const MAX_VISIBLE_NAME: usize = 128;

fn one() -> Spanned<u32> {
    Spanned::new(0..0, 1)
}
fn unit_speed() -> Spanned<f64> {
    Spanned::new(0..0, 1.0)
}
fn default_memory() -> Spanned<Size> {
    Spanned::new(0..0, Size(ByteSize::gib(16)))
}
fn default_gpu_memory() -> Spanned<Size> {
    Spanned::new(0..0, Size(ByteSize::gib(4)))
}
fn default_disk() -> Bandwidth {
    Bandwidth(128.0 * 1e6)
}
fn default_network() -> Bandwidth {
    Bandwidth(125.0 * 1e6)
}
fn default_latency() -> Duration {
    Duration(100_000)
}

/// A node's `attributes` as written, checked ([`check_attribute`](crate::model::cluster::check_attribute),
/// at most [`MAX_ATTRIBUTES`](crate::model::cluster::MAX_ATTRIBUTES)); sorted, without repeats.
/// Errors name `field[j]`.
pub(crate) fn attribute_list(
    src: &Source<'_>,
    list: &[Spanned<String>],
    field: &str,
) -> Result<Vec<String>, InputError> {
    spanned_set(src, list, field, false)
}

/// A task's `requires` as written — attributes, `node:NAME`, either after `!` — checked
/// ([`check_requirement`](crate::model::cluster::check_requirement)); as [`attribute_list`].
pub(crate) fn requirement_list(
    src: &Source<'_>,
    list: &[Spanned<String>],
    field: &str,
) -> Result<Vec<String>, InputError> {
    spanned_set(src, list, field, true)
}

/// [`attribute_list`] (`requirements` false) or [`requirement_list`].
fn spanned_set(
    src: &Source<'_>,
    list: &[Spanned<String>],
    field: &str,
    requirements: bool,
) -> Result<Vec<String>, InputError> {
    let names = list.iter().map(|a| a.get_ref().as_str());
    let checked = if requirements {
        crate::model::cluster::requirement_set(names)
    } else {
        crate::model::cluster::attribute_set(names)
    };
    checked.map_err(|(j, e)| match j {
        Some(j) => src.error(at(&list[j]), Some(format!("{field}[{j}]")), e),
        None => src.error(list.first().and_then(at), Some(field.to_string()), e),
    })
}

/// Why `name` cannot be a device's name in `CUDA_VISIBLE_DEVICES` (a comma-separated list).
pub fn visible_name_problem(name: &str) -> Option<String> {
    if name.is_empty() {
        return Some("empty".into());
    }
    if name.len() > MAX_VISIBLE_NAME {
        return Some(format!("{} bytes; at most {MAX_VISIBLE_NAME}", name.len()));
    }
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/' | ':')))
    {
        return Some(format!(
            "holds `{}`; a device name is letters, digits and `-_./:` (as `nvidia-smi -L` prints \
             them: `MIG-…`, `GPU-…`, or an index)",
            c.escape_debug()
        ));
    }
    None
}

/// The device names of one node's accelerator entries, in device order
/// ([`AcceleratorSpec::visible`]; `None` for a device whose entry names none). Check the entries
/// first ([`node_accelerators`]); a name given twice is refused there.
pub fn visible_names(specs: &[AcceleratorSpec]) -> Vec<Option<String>> {
    specs
        .iter()
        .flat_map(|a| {
            let count = a.count() as usize;
            (0..count).map(move |i| a.visible.as_ref().and_then(|v| v.get_ref().get(i).cloned()))
        })
        .collect()
}

/// Offset of a spanned value, `None` for defaults (which have an empty span).
pub(crate) fn at<T>(s: &Spanned<T>) -> Option<usize> {
    let span = s.span();
    (span.end > span.start).then_some(span.start)
}

impl AcceleratorSpec {
    /// How many devices: `count`, or the number of `visible` names where `count` is left out.
    pub fn count(&self) -> u32 {
        match &self.visible {
            Some(v) if at(&self.count).is_none() => {
                u32::try_from(v.get_ref().len()).unwrap_or(u32::MAX)
            }
            _ => *self.count.get_ref(),
        }
    }

    /// The devices this entry describes, checked.
    pub fn devices(&self, src: &Source<'_>, field: &str) -> Result<Vec<Accelerator>, InputError> {
        // Matched against a GPU variant's `kind` and shown in every listing: the rule that one
        // follows (an empty kind or an ANSI escape in it was accepted).
        if let Err(problem) = crate::model::cluster::check_attribute(self.kind.get_ref()) {
            return Err(src.error(
                at(&self.kind),
                Some(format!("{field}.kind")),
                format!("an accelerator kind is named as a node attribute: {problem}"),
            ));
        }
        let count = self.count();
        if u64::from(count) > MAX_NODE_ACCELERATORS {
            // Where the number was written: `count`, or the `visible` list it comes from.
            let (at, what) = match &self.visible {
                Some(v) if at(&self.count).is_none() => (at(v), "visible"),
                _ => (at(&self.count), "count"),
            };
            return Err(src.error(
                at,
                Some(format!("{field}.{what}")),
                format!("{count} accelerators; a node has at most {MAX_NODE_ACCELERATORS}"),
            ));
        }
        if let Some(visible) = &self.visible {
            let names = visible.get_ref();
            let problem = |p: String| src.error(at(visible), Some(format!("{field}.visible")), p);
            if at(&self.count).is_some() && names.len() != count as usize {
                return Err(problem(format!(
                    "names {} devices; `count` is {count} (leave `count` out: it is the number \
                     of names)",
                    names.len()
                )));
            }
            if names.is_empty() {
                return Err(problem(
                    "names no device (leave the accelerator table out for none)".into(),
                ));
            }
            for (i, name) in names.iter().enumerate() {
                if let Some(p) = visible_name_problem(name) {
                    return Err(problem(format!(
                        "name {} `{}`: {p}",
                        i + 1,
                        name.escape_debug()
                    )));
                }
            }
        }
        let speed = *self.speed.get_ref();
        if let Some(problem) = speed_problem(speed) {
            return Err(src.error(at(&self.speed), Some(format!("{field}.speed")), problem));
        }
        // As a node's `memory`: a device without memory holds no task's data.
        let memory = self.memory.get_ref().0.as_u64();
        if memory == 0 {
            return Err(src.error(
                at(&self.memory),
                Some(format!("{field}.memory")),
                "must be more than 0 (e.g. \"16GiB\"; 4 GiB when left out)",
            ));
        }
        if memory > MAX_NODE_MEMORY {
            return Err(src.error(
                at(&self.memory),
                Some(format!("{field}.memory")),
                format!(
                    "{} ({memory} bytes); a device has at most 1 PiB ({MAX_NODE_MEMORY} bytes)",
                    ByteSize(memory)
                ),
            ));
        }
        Ok((0..count)
            .map(|_| Accelerator {
                kind: self.kind.get_ref().clone(),
                memory_bytes: memory,
                speed,
            })
            .collect())
    }
}

/// The devices of one node's accelerator entries (`field` names them: `node[0].accelerator`),
/// each checked as [`AcceleratorSpec::devices`] and with at least one device, and at most
/// [`MAX_NODE_ACCELERATORS`] in all: the bound is the node's, so three entries of 256 are as
/// wrong as one of 768, and the error names the entry that passes it.
pub fn node_accelerators(
    src: &Source<'_>,
    specs: &[AcceleratorSpec],
    field: &str,
) -> Result<Vec<Accelerator>, InputError> {
    let mut accelerators = Vec::new();
    let mut names = std::collections::HashSet::new();
    for (j, a) in specs.iter().enumerate() {
        let count = a.count();
        if count == 0 && a.visible.is_some() {
            // Its own check says so, at `visible`.
            a.devices(src, &format!("{field}[{j}]"))?;
        }
        if count == 0 {
            return Err(src.error(
                at(&a.count),
                Some(format!("{field}[{j}].count")),
                "must be at least 1 (leave the accelerator table out for none)",
            ));
        }
        let total = accelerators.len() as u64 + u64::from(count);
        if j > 0 && total > MAX_NODE_ACCELERATORS {
            return Err(src.error(
                at(&a.count),
                Some(format!("{field}[{j}].count")),
                format!(
                    "{total} accelerators on the node with these {count}; a node has at most \
                     {MAX_NODE_ACCELERATORS} in all"
                ),
            ));
        }
        accelerators.extend(a.devices(src, &format!("{field}[{j}]"))?);
        if let Some(visible) = &a.visible {
            for name in visible.get_ref() {
                if !names.insert(name.as_str()) {
                    return Err(src.error(
                        at(visible),
                        Some(format!("{field}[{j}].visible")),
                        format!(
                            "names `{}` twice on the node: two tasks would share the device",
                            name.escape_debug()
                        ),
                    ));
                }
            }
        }
    }
    Ok(accelerators)
}

/// Parses a cluster file into a validated [`Cluster`].
pub fn parse_cluster(origin: &str, text: &str) -> Result<Cluster, InputError> {
    parse_cluster_with_slots(origin, text).map(|(cluster, _)| cluster)
}

/// The whole-number fields whose range the checks below narrow from their type's: a value of the
/// wrong type or size is told this range, not one they then refuse part of.
const CLUSTER_RANGES: &[(&str, u64, u64)] = &[
    ("node.count", 1, MAX_CLUSTER_NODES),
    ("node.cores", 1, MAX_NODE_CORES as u64),
    ("node.slots", 1, u32::MAX as u64),
    ("node.accelerator.count", 1, MAX_NODE_ACCELERATORS),
];

/// Parses a cluster file into a validated [`Cluster`] and every node's worker-process slots
/// (indexed like `cluster.nodes`; [`DEFAULT_SLOTS`] where the entry names none).
pub fn parse_cluster_with_slots(
    origin: &str,
    text: &str,
) -> Result<(Cluster, Vec<u32>), InputError> {
    let mut slots = Vec::new();
    let src = Source::new(origin, text);
    let file: ClusterFile = src
        .parse_toml()
        .map_err(|e| super::whole_number_range(e, CLUSTER_RANGES))?;
    let mut racks = Vec::new();
    let mut rack_ids = HashMap::new();
    for (i, r) in file.rack.iter().enumerate() {
        let name = r.name.get_ref();
        if let Some(problem) = crate::model::cluster::rack_name_problem(name) {
            return Err(src.error(at(&r.name), Some(format!("rack[{i}].name")), problem));
        }
        if rack_ids
            .insert(name.clone(), RackId(racks.len() as u32))
            .is_some()
        {
            return Err(src.error(
                at(&r.name),
                Some(format!("rack[{i}].name")),
                format!("rack `{name}` is declared twice"),
            ));
        }
        racks.push(Rack {
            id: RackId(racks.len() as u32),
            name: name.clone(),
        });
    }
    if file.node.is_empty() {
        return Err(src.error(
            None,
            Some("node".into()),
            "the cluster has no nodes: add at least one [[node]] table",
        ));
    }
    let mut nodes: Vec<Node> = Vec::new();
    let mut names = HashMap::new();
    let (mut total_cores, mut total_memory) = (0u64, 0u128);
    for (i, spec) in file.node.iter().enumerate() {
        let field = |f: &str| Some(format!("node[{i}].{f}"));
        let rack = match &spec.rack {
            Some(r) => *rack_ids.get(r.get_ref()).ok_or_else(|| {
                src.error(
                    at(r),
                    field("rack"),
                    format!(
                        "unknown rack `{}`: declare it in a [[rack]] table",
                        super::units::name_shown(r.get_ref())
                    ),
                )
            })?,
            None => *rack_ids.entry("default".to_string()).or_insert_with(|| {
                racks.push(Rack {
                    id: RackId(racks.len() as u32),
                    name: "default".into(),
                });
                RackId(racks.len() as u32 - 1)
            }),
        };
        let count = *spec.count.get_ref();
        if count == 0 {
            return Err(src.error(at(&spec.count), field("count"), "must be at least 1"));
        }
        let total = nodes.len() as u64 + u64::from(count);
        if total > MAX_CLUSTER_NODES {
            // Named where it is written: the `count` that passes the bound, or, when `count` is
            // left out (one node per entry), the entry itself, which a default has no place for.
            let error = match at(&spec.count) {
                Some(offset) => src.error(
                    Some(offset),
                    field("count"),
                    format!(
                        "{total} nodes in all with these {count}; a cluster file describes at \
                         most {MAX_CLUSTER_NODES}"
                    ),
                ),
                None => src.error(
                    src.key_at(&format!("node[{i}]")).or_else(|| at(&spec.name)),
                    Some(format!("node[{i}]")),
                    format!(
                        "this [[node]] table brings the cluster to {total} nodes; a cluster \
                         file describes at most {MAX_CLUSTER_NODES}"
                    ),
                ),
            };
            return Err(error);
        }
        let cores = *spec.cores.get_ref();
        if cores == 0 {
            return Err(src.error(at(&spec.cores), field("cores"), "must be at least 1"));
        }
        if cores > MAX_NODE_CORES {
            return Err(src.error(
                at(&spec.cores),
                field("cores"),
                format!("{cores} cores; a node has at most {MAX_NODE_CORES}"),
            ));
        }
        let memory = spec.memory.get_ref().0.as_u64();
        if memory == 0 {
            return Err(src.error(
                at(&spec.memory),
                field("memory"),
                "must be more than 0 (e.g. \"16GiB\"; 16 GiB when left out)",
            ));
        }
        if memory > MAX_NODE_MEMORY {
            return Err(src.error(
                at(&spec.memory),
                field("memory"),
                format!(
                    "{} ({memory} bytes); a node has at most 1 PiB ({MAX_NODE_MEMORY} bytes)",
                    ByteSize(memory)
                ),
            ));
        }
        // What the model's totals hold (`Resources`: cores in a u32, memory in a u64).
        total_cores += u64::from(count) * u64::from(cores);
        if total_cores > u64::from(u32::MAX) {
            return Err(src.error(
                at(&spec.cores),
                field("cores"),
                format!(
                    "{} of {cores} cores {} the cluster to {total_cores} cores; at most {} \
                     in all",
                    crate::text::count(u64::from(count), "node"),
                    crate::text::agree(count, "brings", "bring"),
                    u32::MAX
                ),
            ));
        }
        total_memory += u128::from(count) * u128::from(memory);
        if total_memory > u128::from(u64::MAX) {
            return Err(src.error(
                at(&spec.memory),
                field("memory"),
                format!(
                    "{} of {} {} the cluster past 16 EiB of memory, the most it may have in \
                     all",
                    crate::text::count(u64::from(count), "node"),
                    ByteSize(memory),
                    crate::text::agree(count, "brings", "bring")
                ),
            ));
        }
        let speed = *spec.core_speed.get_ref();
        if let Some(problem) = speed_problem(speed) {
            return Err(src.error(at(&spec.core_speed), field("core_speed"), problem));
        }
        let node_slots = spec.slots.as_ref().map_or(DEFAULT_SLOTS, |s| *s.get_ref());
        if let Some(s) = &spec.slots
            && *s.get_ref() == 0
        {
            return Err(src.error(at(s), field("slots"), "must be at least 1"));
        }
        let accelerators =
            node_accelerators(&src, &spec.accelerator, &format!("node[{i}].accelerator"))?;
        if let Some((j, v)) = spec
            .accelerator
            .iter()
            .enumerate()
            .find_map(|(j, a)| Some((j, a.visible.as_ref()?)))
        {
            return Err(src.error(
                at(v),
                Some(format!("node[{i}].accelerator[{j}].visible")),
                "names the devices an agent's tasks see (`CUDA_VISIBLE_DEVICES`): an agent's \
                 setting; a simulated node runs no program",
            ));
        }
        let attributes = attribute_list(&src, &spec.attributes, &format!("node[{i}].attributes"))?;
        if let Some(problem) = node_name_problem(spec.name.get_ref()) {
            return Err(src.error(at(&spec.name), field("name"), problem));
        }
        for k in 1..=count {
            let name = if count == 1 {
                spec.name.get_ref().clone()
            } else {
                format!("{}-{k}", spec.name.get_ref())
            };
            if let Some(problem) = node_name_problem(&name) {
                return Err(src.error(at(&spec.name), field("name"), problem));
            }
            if names.insert(name.clone(), i).is_some() {
                return Err(src.error(
                    at(&spec.name),
                    field("name"),
                    format!("node name `{name}` is used twice"),
                ));
            }
            slots.push(node_slots);
            nodes.push(Node {
                id: NodeId(nodes.len() as u32),
                name,
                rack,
                cores,
                core_speed: speed,
                memory_bytes: memory,
                disk_read_bw: spec.disk_read.0,
                net_bw: spec.network.0,
                net_latency: spec.latency.0,
                accelerators: accelerators.clone(),
                attributes: attributes.clone(),
            });
        }
    }
    let cluster = Cluster { racks, nodes };
    cluster
        .validate()
        .map_err(|e| src.error(None, None, e.to_string()))?;
    Ok((cluster, slots))
}

/// The attributes of every node of a cluster file, in the node order of [`parse_cluster`]: its
/// [`Node::attributes`], plus `gpu` when the node has accelerators. Sorted and deduplicated.
/// Workflow tasks `require` attributes (spec 05 §3).
pub fn parse_node_attributes(origin: &str, text: &str) -> Result<Vec<Vec<String>>, InputError> {
    let cluster = parse_cluster(origin, text)?;
    Ok(cluster.nodes.iter().map(Node::all_attributes).collect())
}
