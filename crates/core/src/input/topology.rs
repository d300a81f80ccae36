//! Stream topology files (TOML, spec 04 / issue 8): components with parallelism, per-executor CPU
//! demand and memory, and streams with a grouping and a per-executor rate. See
//! `examples/topology-wordcount.toml`.
//!
//! ```toml
//! name = "wordcount"
//! requires = ["ssd"]    # optional: node attributes every worker's node needs
//! [[component]]
//! name = "sentences"
//! kind = "spout"        # or "bolt"
//! parallelism = 4
//! cpu = 30.0            # per executor, in per cent of one core
//! memory = "256MiB"     # per executor, optional
//! [[stream]]
//! from = "sentences"
//! to = "split"
//! grouping = "shuffle"  # shuffle | fields | all | global
//! rate = 1000.0         # tuples/s that EACH executor of `from` emits on this stream
//! ```
//!
//! Besides syntax and types, the parser refuses, with `file:line:column: field: message`:
//! a duplicate component name; zero parallelism; a stream naming an unknown component; a stream
//! into a spout that closes a cycle (*cycle through spouts*); any other stream into a spout or with
//! an empty `to` (*stream to nowhere*: a spout takes no input); a topology without a spout; a
//! negative or non-finite `cpu` or `rate`, or a `rate` over [`MAX_TUPLES_PER_S`]; more than [`MAX_TOPOLOGY_EXECUTORS`] executors in all
//! (at the `parallelism` that passes the bound); an executor's `memory` over
//! [`MAX_EXECUTOR_MEMORY`].
//!
//! `--traffic FILE` measurements (CSV `from,to,tuples_per_s`, executors written
//! `<component>#<index>`) are read by [`parse_traffic`]; a line naming two executors with no
//! stream between their components, a pair already given on an earlier line, or a rate out of
//! range, is refused at its line; a file without a row is refused.

use super::cluster::at;
use super::{InputError, Source};
use crate::model::topology::{
    Component, ComponentKind, ExecutorId, ExecutorPair, Grouping, Stream, Topology,
};
use bytesize::ByteSize;
use serde::Deserialize;
use serde_spanned::Spanned;
use std::collections::HashMap;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TopologyFile {
    name: Spanned<String>,
    #[serde(default)]
    component: Vec<ComponentSpec>,
    #[serde(default)]
    stream: Vec<StreamSpec>,
    /// Node attributes its workers' nodes need (Slurm's `--constraint`, as a batch
    /// application's `requires`).
    #[serde(default)]
    requires: Vec<Spanned<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ComponentSpec {
    name: Spanned<String>,
    kind: ComponentKind,
    parallelism: Spanned<u32>,
    cpu: Spanned<f64>,
    #[serde(default, deserialize_with = "super::units::spanned_byte_size")]
    memory: Option<Spanned<ByteSize>>,
    /// Runtime only (issue 16): a built-in component; read by [`super::stream_code`].
    #[serde(default)]
    #[allow(dead_code)]
    builtin: Option<String>,
    /// Runtime only (issue 16): a multi-lang program; read by [`super::stream_code`].
    #[serde(default)]
    #[allow(dead_code)]
    command: Option<Vec<String>>,
    /// Runtime only (issue 16): the component's parameters; read by [`super::stream_code`].
    #[serde(default)]
    #[allow(dead_code)]
    params: Option<toml::Table>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct StreamSpec {
    from: Spanned<String>,
    to: Spanned<String>,
    #[serde(default = "shuffle")]
    grouping: Grouping,
    rate: Spanned<f64>,
}

/// Most executors a topology may have, all components together: Storm's largest topologies run
/// a few thousand; the bound keeps a mistyped parallelism from costing the placer (and the
/// server) memory for billions of executors. `even` and `resource-aware` place this many
/// whatever the groupings (the declared traffic is kept per stream, never per executor pair).
/// The traffic-aware placers walk every executor pair that exchanges traffic and take at most
/// [`crate::policy::stream::MAX_TRAFFIC_PAIRS`] of them, which is the tighter bound when
/// groupings join every executor to every executor (shuffle, fields, all): two such components
/// of 2,000 executors each; with `global` groupings (one pair per sender) the executor bound
/// again.
pub const MAX_TOPOLOGY_EXECUTORS: u64 = 100_000;

/// Most tuples per second a stream's `rate` or a measured pair may carry (a trillion: far beyond
/// any stream engine's), so that loads and traffic summed over a topology stay finite.
pub const MAX_TUPLES_PER_S: f64 = 1e12;

/// Most CPU one executor may declare, in per cent of one core. An executor is one thread, so 100
/// is all one executor can use; the bound is higher on purpose: a declared over-estimate (a
/// demand measured with another thread count, a margin) is accepted and counted in full by the
/// placers, and a stored topology written so must still read after an upgrade. It only keeps
/// sums of loads finite (1e308 gave infinite node loads). The error says all this, so that the
/// bound and the "one thread" do not read as a contradiction.
pub const MAX_EXECUTOR_CPU: f64 = 1e4;

/// Why `rate` cannot be a rate in tuples per second, if it cannot.
fn rate_problem(rate: f64) -> Option<String> {
    (!(rate.is_finite() && (0.0..=MAX_TUPLES_PER_S).contains(&rate))).then(|| {
        format!(
            "must be a number of tuples/s from 0 to {MAX_TUPLES_PER_S:e}; got {}",
            super::units::shown(rate)
        )
    })
}

/// Most memory one executor may declare (1 TiB), so that a sum over every executor
/// (≤ 2⁴⁰ × [`MAX_TOPOLOGY_EXECUTORS`] < 2⁵⁷) never overflows.
pub const MAX_EXECUTOR_MEMORY: u64 = 1 << 40;

/// Longest topology or component name, in bytes (the runtime's bound on a topology's name, which
/// names its workers' directories).
pub const MAX_TOPOLOGY_NAME_BYTES: usize = 128;

/// Why `name` cannot name a topology or a component, if it cannot: it is shown as written in
/// every placement and listing, so it has no control character (an ANSI escape would act on the
/// terminal) nor invisible formatting character (a bidi override would make it read otherwise:
/// [`crate::text::hidden`]) and is at most [`MAX_TOPOLOGY_NAME_BYTES`] long.
fn name_problem(name: &str) -> Option<String> {
    if name.len() > MAX_TOPOLOGY_NAME_BYTES {
        return Some(format!(
            "is {} bytes long; at most {MAX_TOPOLOGY_NAME_BYTES}",
            name.len()
        ));
    }
    if name.chars().any(char::is_control) {
        return Some("holds a control character".into());
    }
    crate::text::hidden_problem(name)
}

fn shuffle() -> Grouping {
    Grouping::Shuffle
}

/// Parses a topology file into a validated [`Topology`].
pub fn parse_topology(origin: &str, text: &str) -> Result<Topology, InputError> {
    let src = Source::new(origin, text);
    let file: TopologyFile = src.parse_toml()?;
    if file.name.get_ref().trim().is_empty() {
        return Err(src.error(at(&file.name), Some("name".into()), "must not be empty"));
    }
    if let Some(problem) = name_problem(file.name.get_ref()) {
        return Err(src.error(at(&file.name), Some("name".into()), problem));
    }
    if file.component.is_empty() {
        return Err(src.error(
            None,
            Some("component".into()),
            "the topology has no components: add at least one [[component]] table",
        ));
    }
    let mut index: HashMap<String, usize> = HashMap::new();
    let mut components = Vec::new();
    let mut executors = 0u64;
    for (i, c) in file.component.iter().enumerate() {
        let field = |f: &str| Some(format!("component[{i}].{f}"));
        let name = c.name.get_ref();
        if name.trim().is_empty() || name.contains('#') {
            return Err(src.error(
                at(&c.name),
                field("name"),
                "must be non-empty and must not contain `#` (executors are written <component>#<index>)",
            ));
        }
        if let Some(problem) = name_problem(name) {
            return Err(src.error(at(&c.name), field("name"), problem));
        }
        if index.insert(name.clone(), i).is_some() {
            return Err(src.error(
                at(&c.name),
                field("name"),
                format!(
                    "duplicate name: component `{}` is declared twice",
                    crate::text::clip(name)
                ),
            ));
        }
        if *c.parallelism.get_ref() == 0 {
            return Err(src.error(
                at(&c.parallelism),
                field("parallelism"),
                format!(
                    "zero parallelism: component `{}` needs at least 1 executor",
                    crate::text::clip(name)
                ),
            ));
        }
        executors += u64::from(*c.parallelism.get_ref());
        if executors > MAX_TOPOLOGY_EXECUTORS {
            return Err(src.error(
                at(&c.parallelism),
                field("parallelism"),
                format!(
                    "the topology has {executors} executors up to here; at most \
                     {MAX_TOPOLOGY_EXECUTORS} in all"
                ),
            ));
        }
        let memory = c.memory.as_ref().map_or(0, |m| m.get_ref().as_u64());
        if memory > MAX_EXECUTOR_MEMORY {
            return Err(src.error(
                c.memory.as_ref().and_then(at),
                field("memory"),
                format!(
                    "{} per executor is over the {} an executor may declare",
                    ByteSize(memory),
                    ByteSize(MAX_EXECUTOR_MEMORY)
                ),
            ));
        }
        let cpu = *c.cpu.get_ref();
        if !(cpu.is_finite() && (0.0..=MAX_EXECUTOR_CPU).contains(&cpu)) {
            return Err(src.error(
                at(&c.cpu),
                field("cpu"),
                format!(
                    "must be a number from 0 to {MAX_EXECUTOR_CPU}: one executor's demand at the \
                     declared rates, in per cent of one core (100 = a whole core; more is taken as \
                     an over-estimate, which placers count in full, though an executor is one \
                     thread and runs on one core at most)"
                ),
            ));
        }
        components.push(Component {
            name: name.clone(),
            kind: c.kind,
            parallelism: *c.parallelism.get_ref(),
            cpu,
            memory_bytes: memory,
        });
    }
    if !components.iter().any(|c| c.kind == ComponentKind::Spout) {
        return Err(src.error(
            None,
            Some("component".into()),
            "the topology has no spout: at least one component needs kind = \"spout\"",
        ));
    }
    let mut streams = Vec::new();
    for (i, s) in file.stream.iter().enumerate() {
        let field = |f: &str| Some(format!("stream[{i}].{f}"));
        let from_name = s.from.get_ref();
        let from = *index.get(from_name).ok_or_else(|| {
            src.error(
                at(&s.from),
                field("from"),
                format!(
                    "unknown component `{}`: declare it in a [[component]] table",
                    super::units::name_shown(from_name)
                ),
            )
        })?;
        let to_name = s.to.get_ref();
        if to_name.trim().is_empty() {
            return Err(src.error(at(&s.to), field("to"), "stream to nowhere: `to` is empty"));
        }
        let to = *index.get(to_name).ok_or_else(|| {
            src.error(
                at(&s.to),
                field("to"),
                format!(
                    "unknown component `{}`: declare it in a [[component]] table",
                    super::units::name_shown(to_name)
                ),
            )
        })?;
        let rate = *s.rate.get_ref();
        if let Some(problem) = rate_problem(rate) {
            return Err(src.error(
                at(&s.rate),
                field("rate"),
                format!("{problem} (tuples/s per sending executor)"),
            ));
        }
        streams.push(Stream {
            from,
            to,
            grouping: s.grouping,
            rate,
        });
    }
    // Streams into spouts: either they close a cycle through the spout, or they lead nowhere.
    for (i, s) in streams.iter().enumerate() {
        if components[s.to].kind != ComponentKind::Spout {
            continue;
        }
        let spec = &file.stream[i];
        let spout = &components[s.to].name;
        let message = match path(&streams, s.to, s.from) {
            Some(p) => {
                let mut names: Vec<&str> = p.iter().map(|&c| components[c].name.as_str()).collect();
                names.push(spout);
                format!("cycle through spout `{spout}`: {}", names.join(" -> "))
            }
            None => format!("stream to nowhere: `{spout}` is a spout, and spouts take no input"),
        };
        return Err(src.error(at(&spec.to), Some(format!("stream[{i}].to")), message));
    }
    let requires = super::cluster::requirement_list(&src, &file.requires, "requires")?;
    Ok(Topology {
        name: file.name.get_ref().clone(),
        components,
        streams,
        requires,
    })
}

/// The error for a topology whose `requires` no node meets, located in its file as the parser's
/// own refusals are (`file:line:column: requires[j]: …`): at the first entry, in the file's
/// order, for which `unmet` holds (no node meets it even alone), or, with none such (each is met
/// by some node, all of them by none), at the list, naming the field `requires`. `message` is
/// given the entry blamed (as written), or `None` for the whole list.
///
/// Which nodes there are is known only where the file is submitted (the server's live nodes),
/// long after [`parse_topology`] dropped the entries' places (the model's list is sorted and
/// deduplicated), so the file is read again here, on this error's path only.
pub fn requirement_error(
    origin: &str,
    text: &str,
    unmet: impl Fn(&str) -> bool,
    message: impl FnOnce(Option<&str>) -> String,
) -> InputError {
    let src = Source::new(origin, text);
    // The text parsed when it was submitted; should it not now, the error is still the same
    // words, unlocated, rather than another one.
    let requires = src
        .parse_toml::<TopologyFile>()
        .map(|f| f.requires)
        .unwrap_or_default();
    match requires
        .iter()
        .enumerate()
        .find(|(_, r)| unmet(r.get_ref()))
    {
        Some((j, r)) => src.error(
            at(r),
            Some(format!("requires[{j}]")),
            message(Some(r.get_ref())),
        ),
        None => src.error(
            requires.first().and_then(at),
            Some("requires".into()),
            message(None),
        ),
    }
}

/// A path of components from `start` to `goal` along streams (breadth-first, so the shortest),
/// if there is one.
pub(super) fn path(streams: &[Stream], start: usize, goal: usize) -> Option<Vec<usize>> {
    let mut prev: HashMap<usize, usize> = HashMap::new();
    let mut queue = std::collections::VecDeque::from([start]);
    let mut seen = std::collections::HashSet::from([start]);
    while let Some(c) = queue.pop_front() {
        if c == goal {
            let mut p = vec![c];
            let mut cur = c;
            while let Some(&b) = prev.get(&cur) {
                p.push(b);
                cur = b;
            }
            p.reverse();
            return Some(p);
        }
        for s in streams.iter().filter(|s| s.from == c) {
            if seen.insert(s.to) {
                prev.insert(s.to, c);
                queue.push_back(s.to);
            }
        }
    }
    None
}

/// Parses measured traffic, CSV `from,to,tuples_per_s` (a header row is optional; blank lines
/// and lines starting with `#` are skipped; a UTF-8 byte-order mark, as spreadsheets write, is
/// ignored), against `topology`. Each pair is given once, and only between executors of
/// components a stream connects (`from`'s component to `to`'s); each rate is at most
/// [`MAX_TUPLES_PER_S`]; a file without a row is refused (it would make every pair's traffic 0).
pub fn parse_traffic(
    origin: &str,
    text: &str,
    topology: &Topology,
) -> Result<Vec<ExecutorPair>, InputError> {
    let src = Source::new(origin, text);
    let mut pairs: Vec<ExecutorPair> = Vec::new();
    // Each pair's first line, 1-based.
    let mut given: HashMap<(ExecutorId, ExecutorId), usize> = HashMap::new();
    let mut offset = 0usize;
    let mut seen_row = false;
    for (n, line) in text.split_inclusive('\n').enumerate() {
        let start = offset;
        offset += line.len();
        // A byte-order mark is no part of the first column (the header was not recognised).
        let body = if n == 0 {
            line.trim_start_matches('\u{feff}')
        } else {
            line
        };
        let l = body.trim();
        if l.is_empty() || l.starts_with('#') {
            continue;
        }
        // Each column, trimmed, with where it starts: an error names the column at fault.
        let mut cols: Vec<&str> = Vec::new();
        let mut col_at: Vec<usize> = Vec::new();
        let mut pos = start + (line.len() - body.trim_start().len());
        for c in l.split(',') {
            let t = c.trim_start();
            cols.push(t.trim_end());
            col_at.push(pos + (c.len() - t.len()));
            pos += c.len() + 1;
        }
        let first_row = !seen_row;
        seen_row = true;
        if first_row && cols.first() == Some(&"from") {
            continue;
        }
        if cols.len() != 3 {
            // At the first column too many, or past the last one written.
            let at = col_at.get(3).copied().unwrap_or(pos - 1);
            return Err(src.error(
                Some(at),
                None,
                format!(
                    "expected 3 columns `from,to,tuples_per_s`, found {}",
                    cols.len()
                ),
            ));
        }
        let exec = |k: usize, col: &str| {
            let name = cols[k];
            topology.executor_by_name(name).ok_or_else(|| {
                src.error(
                    Some(col_at[k]),
                    Some(col.into()),
                    format!(
                        "unknown executor `{}`: write <component>#<index> with a component of topology `{}` and an index below its parallelism",
                        super::units::name_shown(name),
                        topology.name
                    ),
                )
            })
        };
        let from = exec(0, "from")?;
        let to = exec(1, "to")?;
        let t: f64 = cols[2].parse().map_err(|_| {
            src.error(
                Some(col_at[2]),
                Some("tuples_per_s".into()),
                format!(
                    "`{}` is not a non-negative number",
                    crate::text::clip(cols[2])
                ),
            )
        })?;
        if let Some(problem) = rate_problem(t) {
            return Err(src.error(Some(col_at[2]), Some("tuples_per_s".into()), problem));
        }
        let component = |e: ExecutorId| topology.locate(e).map(|(c, _)| c);
        let (cf, ct) = (component(from), component(to));
        let joined = topology
            .streams
            .iter()
            .any(|s| Some(s.from) == cf && Some(s.to) == ct);
        if !joined {
            let name = |c: Option<usize>| {
                c.and_then(|c| topology.components.get(c))
                    .map_or("?", |c| c.name.as_str())
            };
            return Err(src.error(
                Some(col_at[1]),
                Some("to".into()),
                format!(
                    "no stream of topology `{}` goes from `{}` to `{}`, so `{}` sends nothing to \
                     `{}`",
                    topology.name,
                    name(cf),
                    name(ct),
                    cols[0],
                    cols[1]
                ),
            ));
        }
        if let Some(first) = given.insert((from, to), n + 1) {
            return Err(src.error(
                Some(col_at[0]),
                Some("from".into()),
                format!(
                    "the pair `{}` → `{}` is already given on line {first}: give each pair once",
                    cols[0], cols[1]
                ),
            ));
        }
        pairs.push(ExecutorPair {
            from,
            to,
            tuples_per_s: t,
        });
    }
    if pairs.is_empty() {
        return Err(src.error(
            None,
            None,
            "no rows: write one `from,to,tuples_per_s` line per pair of executors measured",
        ));
    }
    Ok(pairs)
}

#[cfg(test)]
mod tests {
    use super::*;

    const WORDCOUNT: &str = r#"name = "wordcount"
[[component]]
name = "sentences"
kind = "spout"
parallelism = 2
cpu = 30.0
memory = "256MiB"
[[component]]
name = "split"
kind = "bolt"
parallelism = 4
cpu = 40.0
[[stream]]
from = "sentences"
to = "split"
grouping = "shuffle"
rate = 1000.0
"#;

    fn err(text: &str) -> String {
        parse_topology("t.toml", text)
            .expect_err("refused")
            .to_string()
    }

    #[test]
    fn the_issue_example_parses() {
        let t = parse_topology("t.toml", WORDCOUNT).expect("parses");
        assert_eq!(t.executor_count(), 6);
        assert_eq!(t.components[0].memory_bytes, 256 << 20);
        assert_eq!(t.declared_traffic().pair_count(&t), 8);
    }

    #[test]
    fn an_unknown_component_is_named_with_its_line() {
        let e = err(&WORDCOUNT.replace("to = \"split\"", "to = \"splitter\""));
        assert!(
            e.starts_with("t.toml:15:6: stream[0].to: unknown component `splitter`"),
            "{e}"
        );
    }

    #[test]
    fn executors_and_their_memory_are_bounded() {
        let e = err(&WORDCOUNT.replace("parallelism = 4", "parallelism = 4000000000"));
        assert!(
            e.starts_with(
                "t.toml:11:15: component[1].parallelism: the topology has 4000000002 executors \
                 up to here; at most 100000 in all"
            ),
            "{e}"
        );
        let e = err(&WORDCOUNT.replace("\"256MiB\"", "\"2PiB\""));
        assert!(
            e.starts_with("t.toml:7:10: component[0].memory: 2.0 PiB per executor"),
            "{e}"
        );
        let e = err(&WORDCOUNT.replace("cpu = 40.0", "cpu = 1e308"));
        assert!(
            e.starts_with("t.toml:12:7: component[1].cpu: must be a number from 0 to 10000"),
            "{e}"
        );
        // The text explains the bound above one core rather than contradicting it.
        assert!(
            e.contains("100 = a whole core; more is taken as an over-estimate")
                && !e.contains("(per cent of one core; one executor is one thread)"),
            "{e}"
        );
        let ok = WORDCOUNT.replace("parallelism = 4", "parallelism = 99998");
        assert_eq!(
            parse_topology("t.toml", &ok)
                .expect("at the bound")
                .executor_count(),
            100_000
        );
    }

    #[test]
    fn zero_parallelism_is_refused() {
        let e = err(&WORDCOUNT.replace("parallelism = 4", "parallelism = 0"));
        assert!(
            e.starts_with("t.toml:11:15: component[1].parallelism: zero parallelism"),
            "{e}"
        );
    }

    #[test]
    fn a_duplicate_name_is_refused() {
        let e = err(&WORDCOUNT.replace("name = \"split\"", "name = \"sentences\""));
        assert!(
            e.starts_with("t.toml:9:8: component[1].name: duplicate name"),
            "{e}"
        );
    }

    #[test]
    fn a_stream_into_a_spout_is_a_stream_to_nowhere_or_a_cycle() {
        let nowhere = format!(
            "{WORDCOUNT}[[component]]\nname = \"other\"\nkind = \"spout\"\nparallelism = 1\ncpu = 1.0\n[[stream]]\nfrom = \"split\"\nto = \"other\"\nrate = 1.0\n"
        );
        let e = err(&nowhere);
        assert!(e.contains("stream[1].to: stream to nowhere"), "{e}");
        let cycle =
            format!("{WORDCOUNT}[[stream]]\nfrom = \"split\"\nto = \"sentences\"\nrate = 1.0\n");
        let e = err(&cycle);
        assert!(
            e.contains(":20:6: stream[1].to: cycle through spout `sentences`: sentences -> split -> sentences"),
            "{e}"
        );
    }

    #[test]
    fn unknown_fields_and_empty_to_are_refused() {
        let e = err(&WORDCOUNT.replace("cpu = 40.0", "cpus = 40.0"));
        assert!(e.starts_with("t.toml:12:1:"), "{e}");
        let e = err(&WORDCOUNT.replace("to = \"split\"", "to = \"\""));
        assert!(e.contains("stream[0].to: stream to nowhere"), "{e}");
    }

    #[test]
    fn measured_traffic_reads_executor_names() {
        let t = parse_topology("t.toml", WORDCOUNT).expect("parses");
        let m = parse_traffic(
            "m.csv",
            "from,to,tuples_per_s\nsentences#0,split#1,10\nsentences#1,split#1,5\n",
            &t,
        )
        .expect("parses");
        assert_eq!(m.len(), 2);
        assert_eq!(m[1].tuples_per_s, 5.0);
        // A pair given twice used to be summed silently; a pair no stream joins was accepted.
        let e = parse_traffic(
            "m.csv",
            "from,to,tuples_per_s\nsentences#0,split#1,10\n# again\nsentences#0,split#1,5\n",
            &t,
        )
        .expect_err("refused");
        assert_eq!(
            e.to_string(),
            "m.csv:4:1: from: the pair `sentences#0` → `split#1` is already given on line 2: \
             give each pair once"
        );
        let e = parse_traffic("m.csv", "split#0,sentences#1,10\n", &t).expect_err("refused");
        assert_eq!(
            e.to_string(),
            "m.csv:1:9: to: no stream of topology `wordcount` goes from `split` to `sentences`, \
             so `split#0` sends nothing to `sentences#1`"
        );
        let e = parse_traffic("m.csv", "sentences#0,split#9,1\n", &t).expect_err("refused");
        assert!(
            e.to_string()
                .starts_with("m.csv:1:13: to: unknown executor `split#9`"),
            "{e}"
        );
    }

    /// A `requires` no node meets is blamed where it is written, as the parser's refusals are:
    /// the first entry, in the file's order (the model's list is sorted), that no node meets
    /// alone, or else the list as a whole.
    #[test]
    fn a_requirement_no_node_meets_is_located_in_the_file() {
        let text = format!(
            "name = \"req\"\nrequires = [\"ssd\", \"fpga\", \"asic\"]\n{}",
            &WORDCOUNT[19..]
        );
        parse_topology("t-req.toml", &text).expect("parses");
        let e = requirement_error(
            "t-req.toml",
            &text,
            |r| r != "ssd",
            |r| format!("blamed {r:?}"),
        );
        assert_eq!(
            e.to_string(),
            "t-req.toml:2:20: requires[1]: blamed Some(\"fpga\")"
        );
        let e = requirement_error("t-req.toml", &text, |_| false, |r| format!("blamed {r:?}"));
        assert_eq!(e.to_string(), "t-req.toml:2:13: requires: blamed None");
    }
}
