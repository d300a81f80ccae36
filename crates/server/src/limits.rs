//! Bounds on what an agent may claim when it registers, and on the envelope of a submission. A
//! node's figures feed every scheduling decision and every `hetsched nodes` listing, so absurd
//! ones (2^32−1 cores, NaN speeds, a megabyte-long name, 100,000 GPUs) are refused with a message
//! naming the field and the limit, instead of being stored and breaking things for everyone
//! later. A submission's file, name, key and directory are checked here for every job kind before
//! any kind parses it; what a file holds is bounded by the core's `input::limits`.

use hetsched_core::{Accelerator, Node, NodeId, RackId};
use hetsched_proto as pb;

/// Longest node name (a DNS host name's limit).
pub const MAX_NODE_NAME: usize = 253;
/// Most cores one node may offer: a cluster file's bound on a node, the one constant.
pub const MAX_CORES: u32 = hetsched_core::input::cluster::MAX_NODE_CORES;
/// Most accelerators one node may offer.
pub const MAX_ACCELERATORS: usize = hetsched_core::input::cluster::MAX_NODE_ACCELERATORS as usize;
/// Longest accelerator kind.
pub const MAX_KIND: usize = 64;
/// Largest memory one node (or device) may offer, 1 PiB: a cluster file's bound on a node, the
/// one constant.
pub const MAX_MEMORY: u64 = hetsched_core::input::cluster::MAX_NODE_MEMORY;
/// Largest relative speed (cores, devices).
pub const MAX_SPEED: f64 = 1e6;
/// Largest bandwidth, bytes/s (10 TB/s): a file's bound on a bandwidth, the one constant.
pub const MAX_BANDWIDTH: f64 = hetsched_core::input::MAX_BANDWIDTH;
/// Longest agent identity.
pub const MAX_IDENTITY: usize = 128;

/// Characters a node name may hold: letters, digits, `.`, `-`, `_` (host names and more).
fn name_ok(name: &str) -> bool {
    name.bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_'))
}

/// A figure that must be finite and positive when given; 0 means "not given" → `default`.
fn positive(value: f64, default: f64, max: f64, field: &str) -> Result<f64, String> {
    if value == 0.0 {
        return Ok(default);
    }
    if !value.is_finite() || value < 0.0 || value > max {
        return Err(format!(
            "{field} is {value}; it must be a positive number of at most {max}"
        ));
    }
    Ok(value)
}

/// Why a node's stored description (a row of the store's `nodes`, read at a restart) is past a
/// bound [`node_spec`] enforces at registration, if it is: the first figure past one, named by
/// its field in the row (`memory_bytes`, `accelerators[2].memory_bytes`, `core_speed`…). A
/// row edited by hand, or written by a version with looser bounds, could otherwise bring figures
/// into the scheduler's view that overflow its sums.
pub fn stored_node_problem(node: &Node) -> Option<String> {
    let finite_positive = |value: f64, max: f64, field: &str| {
        (!value.is_finite() || value <= 0.0 || value > max).then(|| {
            format!("{field} is {value}; a registration gives a positive number of at most {max}")
        })
    };
    if node.cores == 0 || node.cores > MAX_CORES {
        return Some(format!(
            "cores is {}; a registration gives 1 to {MAX_CORES}",
            node.cores
        ));
    }
    if node.memory_bytes > MAX_MEMORY {
        return Some(format!(
            "memory_bytes is {}; a registration gives at most {MAX_MEMORY} (1 PiB)",
            node.memory_bytes
        ));
    }
    if let Some(p) = finite_positive(node.core_speed, MAX_SPEED, "core_speed")
        .or_else(|| finite_positive(node.disk_read_bw, MAX_BANDWIDTH, "disk_read_bw"))
        .or_else(|| finite_positive(node.net_bw, MAX_BANDWIDTH, "net_bw"))
    {
        return Some(p);
    }
    if let Some(p) = devices_problem(node) {
        return Some(p);
    }
    attributes(&node.name, &node.attributes)
        .err()
        .map(|e| format!("attributes: {e}"))
}

/// Why a stored node's devices are past a registration's bounds, if they are
/// ([`stored_node_problem`]).
pub fn devices_problem(node: &Node) -> Option<String> {
    if node.accelerators.len() > MAX_ACCELERATORS {
        return Some(format!(
            "accelerators holds {}; a registration gives at most {MAX_ACCELERATORS}",
            node.accelerators.len()
        ));
    }
    node.accelerators.iter().enumerate().find_map(|(i, a)| {
        if a.kind.len() > MAX_KIND || !name_ok(&a.kind) {
            Some(format!(
                "accelerators[{i}].kind is not at most {MAX_KIND} letters, digits, `.`, `-` or `_`"
            ))
        } else if a.memory_bytes > MAX_MEMORY {
            Some(format!(
                "accelerators[{i}].memory_bytes is {}; a registration gives at most {MAX_MEMORY} \
                 (1 PiB)",
                a.memory_bytes
            ))
        } else if !a.speed.is_finite() || a.speed <= 0.0 || a.speed > MAX_SPEED {
            Some(format!(
                "accelerators[{i}].speed is {}; a registration gives a positive number of at \
                 most {MAX_SPEED}",
                a.speed
            ))
        } else {
            None
        }
    })
}

/// Checks a registration's figures and builds the node's description (id 0: the caller sets it).
pub fn node_spec(req: &pb::RegisterRequest) -> Result<Node, String> {
    let name = &req.name;
    if name.trim().is_empty() {
        return Err("node name must not be empty".into());
    }
    if name.len() > MAX_NODE_NAME {
        return Err(format!(
            "node name is {} bytes long; at most {MAX_NODE_NAME}",
            name.len()
        ));
    }
    if !name_ok(name) {
        return Err(format!(
            "node name `{}` may hold only letters, digits, `.`, `-` and `_`",
            name.escape_debug()
        ));
    }
    if req.cores == 0 {
        return Err(format!("node `{name}` has no cores"));
    }
    if req.cores > MAX_CORES {
        return Err(format!(
            "node `{name}` offers {} cores; at most {MAX_CORES}",
            req.cores
        ));
    }
    if req.memory_bytes > MAX_MEMORY {
        return Err(format!(
            "node `{name}` offers {} bytes of memory; at most {MAX_MEMORY} (1 PiB)",
            req.memory_bytes
        ));
    }
    if req.accelerators.len() > MAX_ACCELERATORS {
        return Err(format!(
            "node `{name}` offers {} accelerators; at most {MAX_ACCELERATORS}",
            req.accelerators.len()
        ));
    }
    let mut accelerators = Vec::with_capacity(req.accelerators.len());
    for (i, a) in req.accelerators.iter().enumerate() {
        if a.kind.len() > MAX_KIND || !name_ok(&a.kind) {
            return Err(format!(
                "accelerator {i} of node `{name}`: kind must be at most {MAX_KIND} letters, digits, `.`, `-` or `_`"
            ));
        }
        if a.memory_bytes > MAX_MEMORY {
            return Err(format!(
                "accelerator {i} of node `{name}` has {} bytes of memory; at most {MAX_MEMORY}",
                a.memory_bytes
            ));
        }
        accelerators.push(Accelerator {
            kind: a.kind.clone(),
            memory_bytes: a.memory_bytes,
            speed: positive(a.speed, 1.0, MAX_SPEED, &format!("accelerator {i} speed"))?,
        });
    }
    Ok(Node {
        id: NodeId(0),
        name: name.clone(),
        rack: RackId(0),
        cores: req.cores,
        core_speed: positive(req.core_speed, 1.0, MAX_SPEED, "core speed")?,
        memory_bytes: req.memory_bytes,
        disk_read_bw: positive(
            req.disk_read_bw,
            128e6,
            MAX_BANDWIDTH,
            "disk read bandwidth",
        )?,
        net_bw: positive(req.net_bw, 125e6, MAX_BANDWIDTH, "network bandwidth")?,
        net_latency: 100_000,
        accelerators,
        attributes: attributes(name, &req.attributes)?,
    })
}

/// A node's attributes, checked (at most [`MAX_ATTRIBUTES`](hetsched_core::model::cluster::MAX_ATTRIBUTES),
/// each as [`check_attribute`](hetsched_core::model::cluster::check_attribute)), sorted and
/// without repeats.
pub fn attributes(node: &str, list: &[String]) -> Result<Vec<String>, String> {
    hetsched_core::model::cluster::attribute_set(list.iter().map(String::as_str))
        .map_err(|(_, e)| format!("node `{node}`: {e}"))
}

/// Longest message of a task's result kept (bytes): what an agent says of an attempt (why it
/// failed, was interrupted or could not fetch an input) is a line or two, and it is kept with
/// the task, in memory and in the store, until the job is purged.
pub const MAX_RESULT_MESSAGE: usize = 4096;

/// Cuts `message` (an agent's, for a task's result or a divisible chunk's) to
/// [`MAX_RESULT_MESSAGE`] bytes, on a character boundary, marking the cut, with its control
/// characters and invisible formatting characters (a bidi override) escaped
/// ([`escape_controls`](hetsched_core::text::escape_controls)): it may quote what the task's
/// owner wrote (its command, its output), and every user's `hetsched tasks` prints it.
pub fn clip_result_message(message: &mut String) {
    // Cut before escaping (an escape is up to 10 bytes), and again after.
    let long = message.len() > MAX_RESULT_MESSAGE;
    truncate(message, MAX_RESULT_MESSAGE);
    hetsched_core::text::escape_controls(message);
    if !long && message.len() <= MAX_RESULT_MESSAGE {
        return;
    }
    truncate(message, MAX_RESULT_MESSAGE - '…'.len_utf8());
    message.push('…');
}

/// Cuts `text` to at most `max` bytes, on a character boundary.
pub fn truncate(text: &mut String, max: usize) {
    if text.len() <= max {
        return;
    }
    let mut cut = max;
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    text.truncate(cut);
}

/// Longest address an agent may advertise to its peers (`https://`, a DNS name's 253 bytes and
/// a port).
pub const MAX_PEER_ADDRESS: usize = 8 + 253 + 6;

/// Whether `address`, what an agent says other agents reach it at (its heartbeat's
/// `advertise`), has the form agents dial: `host:port`, or `https://host:port` for a TLS
/// listener, the host an IP address (IPv6 in brackets) or a DNS name. The server relays it to
/// every agent balancing a workflow and names it in every fetch of that node's outputs, so
/// anything else (a megabyte of text, a URL to elsewhere) is not passed on.
pub fn peer_address(address: &str) -> bool {
    if address.len() > MAX_PEER_ADDRESS {
        return false;
    }
    let at = address.strip_prefix("https://").unwrap_or(address);
    if at.parse::<std::net::SocketAddr>().is_ok() {
        return true;
    }
    let Some((host, port)) = at.rsplit_once(':') else {
        return false;
    };
    port.parse::<u16>().is_ok_and(|p| p != 0)
        && !host.is_empty()
        && host.len() <= MAX_NODE_NAME
        && host.split('.').all(|label| {
            !label.is_empty()
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_'))
        })
}

/// Longest origin (the submitted file's path as the client names it).
pub const MAX_ORIGIN: usize = 4096;

/// Checks what every submission carries besides its file's contents: the file's size, the job
/// name given with `--name`, the submission key and the client's directory. Stored and shown for
/// every kind of job, so checked once, before any kind parses the file.
pub fn submission(sub: &crate::state::types::Submission) -> Result<(), String> {
    use crate::jobs::batch::MAX_SUBMISSION_KEY;
    use hetsched_core::input::workload::MAX_JOB_NAME;
    file("job", &sub.origin, &sub.text)?;
    let name = &sub.name;
    if !name.is_empty()
        && (name.trim().is_empty()
            || name.len() > MAX_JOB_NAME
            || name.chars().any(char::is_control))
    {
        return Err(format!(
            "a job name must be 1 to {MAX_JOB_NAME} bytes without control characters"
        ));
    }
    // Every user's `hetsched jobs` shows it: a bidi override would make it read otherwise.
    if let Some(problem) = hetsched_core::text::hidden_problem(name) {
        return Err(format!("the job name (--name): {problem}"));
    }
    if sub.key.len() > MAX_SUBMISSION_KEY {
        return Err(format!(
            "the submission key is {} bytes long; at most {MAX_SUBMISSION_KEY}",
            sub.key.len()
        ));
    }
    workdir("the working directory", &sub.workdir)
}

/// Checks a submitted file's name (`origin`, shown in every listing and status, and the job's
/// name when neither `--name` nor the file gives one: at most [`MAX_ORIGIN`] bytes without
/// control or invisible formatting characters) and size (at most 2 MiB: the text is stored
/// and goes to agents); `what` names its kind in the error (`job`, `topology`).
pub fn file(what: &str, origin: &str, text: &str) -> Result<(), String> {
    use hetsched_core::input::limits::MAX_JOB_FILE_BYTES;
    if origin.len() > MAX_ORIGIN || origin.chars().any(char::is_control) {
        return Err(format!(
            "the file's name must be at most {MAX_ORIGIN} bytes without control characters"
        ));
    }
    // Refused, not replaced: the name is the one the user gave the file, and a listing that
    // showed another would not say which file it was. A bidi override would make it read
    // otherwise in every user's listing (`report\u{202e}txt.exe` reads `reportexe.txt`).
    if let Some(problem) = hetsched_core::text::hidden_problem(origin) {
        // The name is the path as given: say which part to rename, the file or a directory
        // above it.
        let in_the_name = origin
            .rsplit_once('/')
            .is_none_or(|(_, name)| hetsched_core::text::hidden_problem(name).is_some());
        let rename = if in_the_name {
            "rename the file"
        } else {
            "rename the directory (or submit the file from a path without it)"
        };
        return Err(format!(
            "the {what} file's name \"{}\": {problem} (a file's name is shown in every listing \
             and names the {what} when nothing else does): {rename}",
            hetsched_core::text::clip(origin)
        ));
    }
    if text.len() > MAX_JOB_FILE_BYTES {
        return Err(format!(
            "{origin}: the {what} file is {} bytes; at most {MAX_JOB_FILE_BYTES} (2 MiB)",
            text.len()
        ));
    }
    Ok(())
}

/// The submitter's directory a submission carries (a job's working directory, a topology's base
/// directory), checked before it is stored: at most [`crate::jobs::batch::MAX_WORKDIR`] bytes,
/// no control characters (a NUL, a newline or a terminal escape would be stored and shown as
/// such), and absolute when given (tasks run there, and relative paths start there). `what`
/// names it in the error.
pub fn workdir(what: &str, dir: &str) -> Result<(), String> {
    use crate::jobs::batch::MAX_WORKDIR;
    if dir.len() > MAX_WORKDIR {
        return Err(format!(
            "{what} is {} bytes long; at most {MAX_WORKDIR}",
            dir.len()
        ));
    }
    if dir.chars().any(char::is_control) {
        return Err(format!(
            "{what} \"{}\" holds a control character",
            hetsched_core::text::clip(dir)
        ));
    }
    if !dir.is_empty() && !dir.starts_with('/') {
        return Err(format!(
            "{what} `{}` is not an absolute path",
            hetsched_core::text::clip(dir)
        ));
    }
    Ok(())
}

/// Longest host name an agent may register with (a DNS name's limit).
pub const MAX_HOSTNAME: usize = 255;

/// Checks a registration's host name: empty (the node's name stands for it), or at most
/// [`MAX_HOSTNAME`] bytes of printable ASCII (it is written into multi-node tasks' node files,
/// one per line). A refusal names the field, `hostname`, and the first character that is not
/// printable ASCII by its place and code point (a control character, a bidi override, a space).
pub fn hostname(host: &str) -> Result<(), String> {
    let rule = format!(
        "the agent's host name must be at most {MAX_HOSTNAME} printable ASCII characters \
         without spaces"
    );
    if host.len() > MAX_HOSTNAME {
        return Err(format!("hostname: is {} bytes long; {rule}", host.len()));
    }
    if let Some(problem) = hetsched_core::text::unshown_problem(host) {
        return Err(format!("hostname: {problem}; {rule}"));
    }
    if let Some((i, c)) = host
        .chars()
        .enumerate()
        .find(|(_, c)| !c.is_ascii_graphic())
    {
        return Err(format!(
            "hostname: character {} is {}, which is not printable ASCII; {rule}",
            i + 1,
            hetsched_core::text::code_point(c)
        ));
    }
    Ok(())
}

/// Checks the rack an agent names (its registration's and heartbeats' `rack`, its `--rack`):
/// empty (the default rack), or a rack name as a cluster file's
/// ([`MAX_RACK_NAME_BYTES`](hetsched_core::model::cluster::MAX_RACK_NAME_BYTES) bytes, no control
/// or invisible formatting characters), since `hetsched nodes` and `hetsched bindings` show it
/// to every user as written. A refusal names the field, `rack`, and the first such character by
/// its place and code point.
pub fn rack(rack: &str) -> Result<(), String> {
    use hetsched_core::model::cluster::MAX_RACK_NAME_BYTES;
    if rack.len() > MAX_RACK_NAME_BYTES {
        return Err(format!(
            "rack: is {} bytes long; at most {MAX_RACK_NAME_BYTES}",
            rack.len()
        ));
    }
    match hetsched_core::text::unshown_problem(rack) {
        Some(problem) => Err(format!("rack: {problem}")),
        None => Ok(()),
    }
}

/// Longest version string an agent may register with (a package version and a commit fit).
pub const MAX_VERSION: usize = 64;

/// Checks a registration's version: empty (an agent that predates the field), or at most
/// [`MAX_VERSION`] bytes of printable ASCII without spaces (listings show it in a table column
/// and `/metrics` in a label).
pub fn version(v: &str) -> Result<(), String> {
    if v.len() > MAX_VERSION || !v.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(format!(
            "the agent's version must be at most {MAX_VERSION} printable ASCII characters \
             without spaces"
        ));
    }
    Ok(())
}

/// Checks an agent identity: present, short, printable ASCII.
pub fn identity(id: &str) -> Result<(), String> {
    if id.is_empty() {
        return Err(
            "the registration carries no agent identity (an agent older than the server? \
                    upgrade it)"
                .into(),
        );
    }
    if id.len() > MAX_IDENTITY || !id.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(format!(
            "the agent identity must be at most {MAX_IDENTITY} printable ASCII characters"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req() -> pb::RegisterRequest {
        pb::RegisterRequest {
            name: "n-1".into(),
            cores: 4,
            memory_bytes: 1 << 30,
            identity: "x".into(),
            ..Default::default()
        }
    }

    #[test]
    fn absurd_registrations_are_refused_with_the_limit() {
        let cases: Vec<(pb::RegisterRequest, &str)> = vec![
            (
                pb::RegisterRequest {
                    cores: u32::MAX,
                    ..req()
                },
                "at most 65536",
            ),
            (
                pb::RegisterRequest {
                    core_speed: f64::NAN,
                    ..req()
                },
                "core speed is NaN",
            ),
            (
                pb::RegisterRequest {
                    name: "n".repeat(1 << 20),
                    ..req()
                },
                "at most 253",
            ),
            (
                pb::RegisterRequest {
                    name: "../etc".into(),
                    ..req()
                },
                "may hold only",
            ),
            (
                pb::RegisterRequest {
                    accelerators: vec![pb::Accelerator::default(); 100_000],
                    ..req()
                },
                "100000 accelerators",
            ),
            (
                pb::RegisterRequest {
                    disk_read_bw: f64::INFINITY,
                    ..req()
                },
                "disk read bandwidth",
            ),
        ];
        for (r, expected) in cases {
            let e = node_spec(&r).expect_err(expected);
            assert!(e.contains(expected), "{e}");
        }
        let ok = node_spec(&req()).expect("a plain node");
        assert_eq!((ok.cores, ok.core_speed), (4, 1.0));
    }

    /// An agent's rack and host name are shown to every user (`hetsched nodes`, `hetsched
    /// bindings`, a multi-node task's node file): a control character, an invisible formatting
    /// character or an overlong one is refused naming the field and the character's place and
    /// code point, as the registration goes through [`crate::convert::registration`].
    #[test]
    fn a_rack_or_host_name_with_a_hidden_or_control_character_or_too_long_is_refused() {
        let refused = |r: pb::RegisterRequest| {
            crate::convert::registration(&r)
                .err()
                .map(|e| e.to_string())
                .expect("refused")
        };
        let cases = [
            (
                pb::RegisterRequest {
                    rack: "r1\u{202e}".into(),
                    ..req()
                },
                "rack: character 3 is U+202E RIGHT-TO-LEFT OVERRIDE, which is not allowed",
            ),
            (
                pb::RegisterRequest {
                    rack: "r\u{1b}[2J".into(),
                    ..req()
                },
                "rack: character 2 is U+001B (a control character), which is not allowed",
            ),
            (
                pb::RegisterRequest {
                    rack: "r".repeat(129),
                    ..req()
                },
                "rack: is 129 bytes long; at most 128",
            ),
            (
                pb::RegisterRequest {
                    hostname: "n1\u{200b}.lab".into(),
                    ..req()
                },
                "hostname: character 3 is U+200B ZERO WIDTH SPACE, which is not allowed",
            ),
            (
                pb::RegisterRequest {
                    hostname: "n1\r".into(),
                    ..req()
                },
                "hostname: character 3 is U+000D (a control character), which is not allowed",
            ),
            (
                pb::RegisterRequest {
                    hostname: "n1 lab".into(),
                    ..req()
                },
                "hostname: character 3 is U+0020, which is not printable ASCII",
            ),
            (
                pb::RegisterRequest {
                    hostname: "h".repeat(256),
                    ..req()
                },
                "hostname: is 256 bytes long",
            ),
        ];
        for (r, expected) in cases {
            let e = refused(r);
            assert!(e.contains(expected), "{expected}: {e}");
        }
        let ok = pb::RegisterRequest {
            rack: "salle B – rangée 2".into(),
            hostname: "n1.lab".into(),
            ..req()
        };
        crate::convert::registration(&ok).expect("a plain rack and host name");
        crate::convert::registration(&req()).expect("no rack or host name");
    }

    #[test]
    fn a_version_is_short_printable_and_may_be_absent() {
        for ok in ["", "0.1.0", "0.1.0+g1a2b3c4"] {
            assert_eq!(version(ok), Ok(()), "{ok:?}");
        }
        for bad in [
            "0.1.0\n",
            "0.1.0 beta",
            "\u{1b}[31m",
            &"9".repeat(MAX_VERSION + 1),
        ] {
            let e = version(bad).expect_err(bad);
            assert!(e.contains("at most 64 printable"), "{e}");
        }
    }

    /// A hidden character in a file's name says to rename the file; one in a directory of the
    /// path as given says to rename the directory (before, it said the file either way).
    #[test]
    fn a_hidden_character_names_the_part_of_the_path_to_rename() {
        let e = file("job", "dir/job\u{202e}lmot.toml", "x").expect_err("in the name");
        assert!(e.ends_with("rename the file"), "{e}");
        let e = file("job", "job\u{202e}lmot.toml", "x").expect_err("no directory");
        assert!(e.ends_with("rename the file"), "{e}");
        let e = file("job", "/tmp/dir\u{202e}/job.toml", "x").expect_err("in a directory");
        assert!(
            e.ends_with("rename the directory (or submit the file from a path without it)"),
            "{e}"
        );
        file("job", "/tmp/dir/job.toml", "x").expect("a plain path");
    }
}
