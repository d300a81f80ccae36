//! What each component of a topology runs in the runtime (issue 16): the topology file of
//! [`super::topology`] plus, per component, either `builtin = "NAME"` with an optional
//! `[component.params]` table, or `command = ["python3", "bolt.py"]` (a program speaking Storm's
//! multi-lang protocol; its `params` go into the handshake's `conf`). One parser: this reads the
//! same file [`parse_topology`] reads, and the simulator ignores the extra fields.
//!
//! ```toml
//! [[component]]
//! name = "sentences"
//! kind = "spout"
//! parallelism = 2
//! cpu = 30.0
//! builtin = "corpus-spout"
//! params = { file = "corpus.txt", repeat = 1, reliable = true }
//! ```
//!
//! | builtin | kind | params (defaults) |
//! |---|---|---|
//! | `corpus-spout` | spout | `lines` (inline) or `file`; `repeat` (1; 0 = for ever); spout settings |
//! | `sequence-spout` | spout | `count` (0 = for ever); spout settings |
//! | `split` | bolt | `separator` (whitespace), `lowercase` (false) |
//! | `count` | bolt | `output` (none; `{index}` = executor index), `every` ("1s") |
//! | `filter` | bolt | `field` (0), `contains`, `min_length` (0) |
//! | `join` | bolt | none; exactly two input components |
//! | `file-sink` | bolt | `path` (required; `{index}` = executor index) |
//!
//! Spout settings: `reliable` (false; true = ack/fail and replay, at-least-once), `max_pending`
//! (1000), `timeout` ("30s"), `rate` (tuples/s per executor; none = unlimited), `rate_schedule`
//! (a scripted rate change: `[{ after = "6s", rate = 200.0 }, ...]`, times after the topology
//! started, in increasing order; each step's rate holds until the next).
//!
//! Refused with `file:line:column: field: message`: both or neither of `builtin` and `command`
//! (the runtime needs code for every component), an unknown builtin, a spout builtin on a bolt or
//! the reverse, unknown or mistyped params, an empty command, a `join` without exactly two input
//! components, a corpus spout without lines, a command's `"topology.subprocess.timeout.secs"`
//! (Storm's key, how long its program may go without answering before the worker kills it)
//! that is not whole seconds from 1 to a day, or written unquoted (a nested TOML table).

use super::cluster::at;
use super::topology::parse_topology;
use super::{Duration, InputError, Source};
use crate::model::stream_code::{
    BUILTIN_NAMES, Builtin, ComponentCode, RESTART_WAIT_KEY, RateStep, RunnableTopology,
    SUBPROCESS_TIMEOUT_KEY, SpoutSettings, restart_wait_ms, subprocess_timeout_secs,
};
use crate::model::topology::ComponentKind;
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_spanned::Spanned;
use std::collections::{BTreeMap, BTreeSet};

#[derive(Debug, Deserialize)]
struct CodeFile {
    #[serde(default)]
    component: Vec<CodeSpec>,
    /// Read again here for their places in the file (a cycle is named at its closing stream).
    #[serde(default)]
    stream: Vec<CodeStream>,
}

#[derive(Debug, Deserialize)]
struct CodeStream {
    to: Spanned<String>,
}

#[derive(Debug, Deserialize)]
struct CodeSpec {
    name: Spanned<String>,
    /// Read again here for its place in the file ([`MAX_RUNTIME_EXECUTORS`]).
    #[serde(default)]
    parallelism: Option<Spanned<u32>>,
    #[serde(default)]
    builtin: Option<Spanned<String>>,
    #[serde(default)]
    command: Option<Spanned<Vec<String>>>,
    #[serde(default)]
    params: Option<Spanned<toml::Table>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CorpusParams {
    #[serde(default)]
    lines: Vec<String>,
    file: Option<String>,
    #[serde(default = "one")]
    repeat: u64,
    #[serde(default)]
    reliable: bool,
    #[serde(default = "max_pending")]
    max_pending: u32,
    #[serde(default = "timeout")]
    timeout: Duration,
    rate: Option<f64>,
    #[serde(default)]
    rate_schedule: Vec<StepParams>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SequenceParams {
    #[serde(default)]
    count: u64,
    #[serde(default)]
    reliable: bool,
    #[serde(default = "max_pending")]
    max_pending: u32,
    #[serde(default = "timeout")]
    timeout: Duration,
    rate: Option<f64>,
    #[serde(default)]
    rate_schedule: Vec<StepParams>,
}

/// One step of `rate_schedule = [{ after = "6s", rate = 200.0 }, ...]`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct StepParams {
    after: Duration,
    rate: f64,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SplitParams {
    separator: Option<String>,
    #[serde(default)]
    lowercase: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CountParams {
    output: Option<String>,
    #[serde(default = "every")]
    every: Duration,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FilterParams {
    #[serde(default)]
    field: usize,
    contains: Option<String>,
    #[serde(default)]
    min_length: usize,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NoParams {}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SinkParams {
    path: String,
}

fn one() -> u64 {
    1
}
fn max_pending() -> u32 {
    1000
}
fn timeout() -> Duration {
    Duration(30 * crate::time::NANOS_PER_SEC)
}
fn every() -> Duration {
    Duration(crate::time::NANOS_PER_SEC)
}

/// The most executors (the components' `parallelism` summed) one topology runs on the runtime:
/// each is a thread with its queues in a worker, and every listing carries its place. (The
/// simulator's topologies, [`super::topology::parse_topology`], have no such cap.)
pub const MAX_RUNTIME_EXECUTORS: u64 = 4096;

/// Parses a topology file with the code of every component (see the module documentation).
pub fn parse_runnable_topology(origin: &str, text: &str) -> Result<RunnableTopology, InputError> {
    let topology = parse_topology(origin, text)?;
    let src = Source::new(origin, text);
    let file: CodeFile = src.parse_toml()?;
    let mut executors = 0u64;
    for (i, c) in file.component.iter().enumerate() {
        executors += topology.components[i].parallelism as u64;
        if executors > MAX_RUNTIME_EXECUTORS {
            let total: u64 = topology
                .components
                .iter()
                .map(|c| c.parallelism as u64)
                .sum();
            return Err(src.error(
                c.parallelism.as_ref().and_then(at),
                Some(format!("component[{i}].parallelism")),
                format!(
                    "the topology runs {total} executors (the components' parallelism summed; \
                     `{}` has {}); at most {MAX_RUNTIME_EXECUTORS} on the runtime",
                    c.name.get_ref(),
                    topology.components[i].parallelism
                ),
            ));
        }
    }
    // A cycle among bolts: the simulator's rates allow one, but on the runtime the tuples sent
    // round it fill the bounded queues on its way and the topology stalls.
    // (The last stream of the file on a cycle is the one that closes it.)
    for (i, s) in topology.streams.iter().enumerate().rev() {
        if let Some(round) = super::topology::path(&topology.streams, s.to, s.from) {
            let mut names: Vec<&str> = round
                .iter()
                .map(|&c| topology.components[c].name.as_str())
                .collect();
            names.push(&topology.components[s.to].name);
            return Err(src.error(
                file.stream.get(i).and_then(|s| at(&s.to)),
                Some(format!("stream[{i}].to")),
                format!(
                    "cycle: {}; the runtime runs acyclic topologies (tuples sent round a cycle \
                     fill its queues and stall it)",
                    names.join(" -> ")
                ),
            ));
        }
    }
    let mut code = Vec::with_capacity(file.component.len());
    for (i, c) in file.component.iter().enumerate() {
        let field = |f: &str| Some(format!("component[{i}].{f}"));
        let kind = topology.components[i].kind;
        let name = c.name.get_ref();
        let params = c.params.as_ref();
        let params_at = params.and_then(at).or_else(|| at(&c.name));
        let parsed = match (&c.builtin, &c.command) {
            (Some(_), Some(cmd)) => {
                return Err(src.error(
                    at(cmd),
                    field("command"),
                    format!("component `{name}` has both `builtin` and `command`: choose one"),
                ));
            }
            (None, None) => {
                return Err(src.error(
                    at(&c.name),
                    field("builtin"),
                    format!(
                        "component `{name}` runs no code: give `builtin = \"...\"` (one of: {}) or `command = [...]` (a Storm multi-lang program)",
                        BUILTIN_NAMES.join(", ")
                    ),
                ));
            }
            (None, Some(cmd)) => {
                if cmd.get_ref().is_empty() || cmd.get_ref()[0].is_empty() {
                    return Err(src.error(
                        at(cmd),
                        field("command"),
                        "empty command: give the program and its arguments",
                    ));
                }
                let mut conf = BTreeMap::new();
                if let Some(p) = params {
                    for (k, v) in p.get_ref() {
                        let text = match v {
                            toml::Value::String(s) => s.clone(),
                            other => other.to_string(),
                        };
                        conf.insert(k.clone(), text);
                    }
                    // A worker's key written unquoted is a TOML dotted key, i.e. nested
                    // tables: it would reach the program as one `topology` entry and the
                    // worker would not see it, so the user is told to quote it.
                    for (key, example) in [(SUBPROCESS_TIMEOUT_KEY, 30), (RESTART_WAIT_KEY, 1000)] {
                        let nested = key
                            .rsplit_once('.')
                            .and_then(|(path, last)| {
                                path.split('.')
                                    .try_fold(p.get_ref(), |t, k| match t.get(k) {
                                        Some(toml::Value::Table(inner)) => Some(inner),
                                        _ => None,
                                    })
                                    .map(|t| t.contains_key(last))
                            })
                            .unwrap_or(false);
                        if nested {
                            return Err(src.error(
                                params_at,
                                field("params"),
                                format!(
                                    "`{key}` unquoted is a nested TOML table: quote the key (`\"{key}\" = {example}`)"
                                ),
                            ));
                        }
                    }
                }
                subprocess_timeout_secs(&conf)
                    .and_then(|_| restart_wait_ms(&conf))
                    .map_err(|message| src.error(params_at, field("params"), message))?;
                ComponentCode::Command {
                    argv: cmd.get_ref().clone(),
                    conf,
                }
            }
            (Some(b), None) => {
                let table = params.map(|p| p.get_ref().clone()).unwrap_or_default();
                let typed = |table: toml::Table| -> Result<Builtin, InputError> {
                    builtin(b.get_ref(), table).map_err(|message| {
                        src.error(params_at.or_else(|| at(b)), field("params"), message)
                    })
                };
                let builtin = match b.get_ref().as_str() {
                    known if BUILTIN_NAMES.contains(&known) => typed(table)?,
                    other => {
                        return Err(src.error(
                            at(b),
                            field("builtin"),
                            format!(
                                "unknown builtin `{other}` (expected one of: {})",
                                BUILTIN_NAMES.join(", ")
                            ),
                        ));
                    }
                };
                let wants_spout = builtin.is_spout();
                if wants_spout != (kind == ComponentKind::Spout) {
                    return Err(src.error(
                        at(b),
                        field("builtin"),
                        format!(
                            "`{}` is a {} but component `{name}` is a {}",
                            builtin.name(),
                            if wants_spout { "spout" } else { "bolt" },
                            if wants_spout { "bolt" } else { "spout" },
                        ),
                    ));
                }
                if let Builtin::CorpusSpout { lines, file, .. } = &builtin
                    && lines.is_empty()
                    && file.is_none()
                {
                    return Err(src.error(
                        params_at,
                        field("params"),
                        "a corpus spout needs `lines = [...]` or `file = \"...\"`",
                    ));
                }
                if let Builtin::Join = builtin {
                    let inputs: BTreeSet<usize> = topology
                        .streams
                        .iter()
                        .filter(|s| s.to == i)
                        .map(|s| s.from)
                        .collect();
                    if inputs.len() != 2 {
                        return Err(src.error(
                            at(b),
                            field("builtin"),
                            format!(
                                "a join needs streams from exactly two components; `{name}` has {}",
                                inputs.len()
                            ),
                        ));
                    }
                }
                ComponentCode::Builtin(builtin)
            }
        };
        code.push(parsed);
    }
    Ok(RunnableTopology { topology, code })
}

fn typed<T: DeserializeOwned>(table: toml::Table) -> Result<T, String> {
    T::deserialize(toml::Value::Table(table)).map_err(|e| e.message().trim().to_string())
}

fn spout(
    reliable: bool,
    max_pending: u32,
    timeout: Duration,
    rate: Option<f64>,
    schedule: Vec<StepParams>,
) -> Result<SpoutSettings, String> {
    if let Some(r) = rate
        && !(r.is_finite() && r > 0.0)
    {
        return Err("rate must be a positive number of tuples per second".into());
    }
    if max_pending == 0 {
        return Err("max_pending must be at least 1".into());
    }
    if timeout.0 == 0 {
        return Err("timeout must be positive".into());
    }
    let mut rate_schedule: Vec<RateStep> = Vec::with_capacity(schedule.len());
    for (k, step) in schedule.into_iter().enumerate() {
        if !(step.rate.is_finite() && step.rate > 0.0) {
            return Err(format!(
                "rate_schedule[{k}].rate must be a positive number of tuples per second"
            ));
        }
        if let Some(prev) = rate_schedule.last()
            && step.after.0 <= prev.after_ns
        {
            return Err(format!(
                "rate_schedule[{k}].after must be later than the step before it"
            ));
        }
        rate_schedule.push(RateStep {
            after_ns: step.after.0,
            rate: step.rate,
        });
    }
    Ok(SpoutSettings {
        reliable,
        max_pending,
        timeout_ns: timeout.0,
        rate,
        rate_schedule,
    })
}

fn builtin(name: &str, table: toml::Table) -> Result<Builtin, String> {
    Ok(match name {
        "corpus-spout" => {
            let p: CorpusParams = typed(table)?;
            Builtin::CorpusSpout {
                lines: p.lines,
                file: p.file,
                repeat: p.repeat,
                spout: spout(
                    p.reliable,
                    p.max_pending,
                    p.timeout,
                    p.rate,
                    p.rate_schedule,
                )?,
            }
        }
        "sequence-spout" => {
            let p: SequenceParams = typed(table)?;
            Builtin::SequenceSpout {
                count: p.count,
                spout: spout(
                    p.reliable,
                    p.max_pending,
                    p.timeout,
                    p.rate,
                    p.rate_schedule,
                )?,
            }
        }
        "split" => {
            let p: SplitParams = typed(table)?;
            if p.separator.as_deref() == Some("") {
                return Err("separator must not be empty".into());
            }
            Builtin::Split {
                separator: p.separator,
                lowercase: p.lowercase,
            }
        }
        "count" => {
            let p: CountParams = typed(table)?;
            if p.every.0 == 0 {
                return Err("every must be positive".into());
            }
            Builtin::Count {
                output: p.output,
                every_ns: p.every.0,
            }
        }
        "filter" => {
            let p: FilterParams = typed(table)?;
            Builtin::Filter {
                field: p.field,
                contains: p.contains,
                min_length: p.min_length,
            }
        }
        "join" => {
            let _: NoParams = typed(table)?;
            Builtin::Join
        }
        "file-sink" => {
            let p: SinkParams = typed(table)?;
            if p.path.is_empty() {
                return Err("path must not be empty".into());
            }
            Builtin::FileSink { path: p.path }
        }
        other => return Err(format!("unknown builtin `{other}`")),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const WORDCOUNT: &str = r#"name = "wc"
[[component]]
name = "sentences"
kind = "spout"
parallelism = 2
cpu = 10.0
builtin = "corpus-spout"
params = { lines = ["a b", "b c"], repeat = 3, reliable = true }
[[component]]
name = "split"
kind = "bolt"
parallelism = 2
cpu = 10.0
command = ["python3", "split.py"]
params = { lowercase = true, n = 2 }
[[component]]
name = "count"
kind = "bolt"
parallelism = 2
cpu = 10.0
builtin = "count"
[[stream]]
from = "sentences"
to = "split"
rate = 10.0
[[stream]]
from = "split"
to = "count"
grouping = "fields"
rate = 20.0
"#;

    fn err(text: &str) -> String {
        parse_runnable_topology("t.toml", text)
            .expect_err("refused")
            .to_string()
    }

    #[test]
    fn builtins_and_commands_parse_with_their_params() {
        let r = parse_runnable_topology("t.toml", WORDCOUNT).expect("parses");
        assert_eq!(r.topology.executor_count(), 6);
        match &r.code[0] {
            ComponentCode::Builtin(Builtin::CorpusSpout {
                lines,
                repeat,
                spout,
                ..
            }) => {
                assert_eq!(lines.len(), 2);
                assert_eq!(*repeat, 3);
                assert!(spout.reliable);
                assert_eq!(spout.max_pending, 1000);
            }
            other => panic!("{other:?}"),
        }
        match &r.code[1] {
            ComponentCode::Command { argv, conf } => {
                assert_eq!(argv, &["python3", "split.py"]);
                assert_eq!(conf["lowercase"], "true");
                assert_eq!(conf["n"], "2");
            }
            other => panic!("{other:?}"),
        }
        // The simulator's parser reads the same file.
        assert!(parse_topology("t.toml", WORDCOUNT).is_ok());
    }

    /// A cycle among bolts is refused at the stream that closes it (the runtime would stall on
    /// it); the simulator's parser reads the file.
    #[test]
    fn a_cycle_among_bolts_is_refused_at_the_stream_that_closes_it() {
        let cycle =
            format!("{WORDCOUNT}[[stream]]\nfrom = \"count\"\nto = \"split\"\nrate = 1.0\n");
        let e = err(&cycle);
        assert!(
            e.contains(":33:6: stream[2].to: cycle: split -> count -> split"),
            "{e}"
        );
        assert!(parse_topology("t.toml", &cycle).is_ok());
    }

    /// A topology of more executors than the runtime runs is refused before anything is
    /// stored, at the parallelism that passes the cap; the simulator reads it.
    #[test]
    fn a_topology_of_more_executors_than_the_runtime_runs_is_refused_at_its_parallelism() {
        let big = WORDCOUNT.replacen("parallelism = 2", "parallelism = 4100", 1);
        let e = err(&big);
        assert!(
            e.starts_with(
                "t.toml:5:15: component[0].parallelism: the topology runs 4104 executors"
            ),
            "{e}"
        );
        assert!(e.contains("`sentences` has 4100"), "{e}");
        assert!(e.contains("at most 4096 on the runtime"), "{e}");
        assert!(parse_topology("t.toml", &big).is_ok());
        let most = WORDCOUNT.replacen("parallelism = 2", "parallelism = 4092", 1);
        assert!(parse_runnable_topology("t.toml", &most).is_ok());
    }

    #[test]
    fn a_component_without_code_is_refused_for_the_runtime() {
        let e = err(&WORDCOUNT.replace("builtin = \"count\"\n", ""));
        assert!(
            e.starts_with("t.toml:17:8: component[2].builtin: component `count` runs no code"),
            "{e}"
        );
    }

    #[test]
    fn unknown_builtins_wrong_kinds_and_bad_params_are_located() {
        let e = err(&WORDCOUNT.replace("builtin = \"count\"", "builtin = \"counter\""));
        assert!(
            e.starts_with("t.toml:21:11: component[2].builtin: unknown builtin `counter`"),
            "{e}"
        );
        let e = err(&WORDCOUNT.replace("builtin = \"count\"", "builtin = \"sequence-spout\""));
        assert!(
            e.contains("`sequence-spout` is a spout but component `count` is a bolt"),
            "{e}"
        );
        let e = err(&WORDCOUNT.replace("repeat = 3", "repeats = 3"));
        assert!(
            e.starts_with("t.toml:8:10: component[0].params: unknown field `repeats`"),
            "{e}"
        );
        let e = err(&WORDCOUNT.replace("lines = [\"a b\", \"b c\"], ", ""));
        assert!(e.contains("a corpus spout needs `lines"), "{e}");
        let e = err(&WORDCOUNT.replace("[\"python3\", \"split.py\"]", "[]"));
        assert!(e.contains("component[1].command: empty command"), "{e}");
    }

    /// Storm's `topology.subprocess.timeout.secs` in a command's params reaches the program's
    /// conf and the worker; a value the worker could not use, or the key unquoted (a nested
    /// TOML table the worker would never see), is refused at the params.
    #[test]
    fn a_commands_subprocess_timeout_is_checked_where_it_is_written() {
        let with = |v: &str| {
            WORDCOUNT.replace(
                "params = { lowercase = true, n = 2 }",
                &format!("params = {{ lowercase = true, {v} }}"),
            )
        };
        let r =
            parse_runnable_topology("t.toml", &with("\"topology.subprocess.timeout.secs\" = 5"))
                .expect("parses");
        match &r.code[1] {
            ComponentCode::Command { conf, .. } => {
                assert_eq!(subprocess_timeout_secs(conf), Ok(5));
                assert_eq!(conf[SUBPROCESS_TIMEOUT_KEY], "5");
            }
            other => panic!("{other:?}"),
        }
        match &parse_runnable_topology("t.toml", WORDCOUNT)
            .expect("parses")
            .code[1]
        {
            ComponentCode::Command { conf, .. } => {
                assert_eq!(subprocess_timeout_secs(conf), Ok(30))
            }
            other => panic!("{other:?}"),
        }
        for bad in ["0", "-1", "2.5", "\"soon\"", "86401"] {
            let e = err(&with(&format!(
                "\"topology.subprocess.timeout.secs\" = {bad}"
            )));
            assert!(
                e.starts_with(
                    "t.toml:15:10: component[1].params: `topology.subprocess.timeout.secs`"
                ),
                "{bad}: {e}"
            );
            assert!(e.contains("whole seconds from 1 to 86400"), "{e}");
        }
        let e = err(&with("topology.subprocess.timeout.secs = 5"));
        assert!(e.starts_with("t.toml:15:10: component[1].params:"), "{e}");
        assert!(e.contains("quote the key"), "{e}");
    }

    /// `topology.subprocess.restart.wait.ms` in a command's params reaches the worker (default
    /// 1 s); a value it could not use, or the key unquoted, is refused at the params.
    #[test]
    fn a_commands_restart_wait_is_checked_where_it_is_written() {
        let with = |v: &str| {
            WORDCOUNT.replace(
                "params = { lowercase = true, n = 2 }",
                &format!("params = {{ lowercase = true, {v} }}"),
            )
        };
        let r = parse_runnable_topology(
            "t.toml",
            &with("\"topology.subprocess.restart.wait.ms\" = 100"),
        )
        .expect("parses");
        let ComponentCode::Command { conf, .. } = &r.code[1] else {
            panic!("{:?}", r.code[1]);
        };
        assert_eq!(restart_wait_ms(conf), Ok(100));
        let r = parse_runnable_topology("t.toml", WORDCOUNT).expect("parses");
        let ComponentCode::Command { conf, .. } = &r.code[1] else {
            panic!("{:?}", r.code[1]);
        };
        assert_eq!(restart_wait_ms(conf), Ok(1000));
        for bad in ["0", "-1", "2.5", "\"soon\"", "30001"] {
            let e = err(&with(&format!(
                "\"topology.subprocess.restart.wait.ms\" = {bad}"
            )));
            assert!(
                e.starts_with(
                    "t.toml:15:10: component[1].params: `topology.subprocess.restart.wait.ms`"
                ),
                "{bad}: {e}"
            );
            assert!(e.contains("whole milliseconds from 1 to 30000"), "{e}");
        }
        let e = err(&with("topology.subprocess.restart.wait.ms = 5"));
        assert!(e.contains("quote the key"), "{e}");
    }

    #[test]
    fn a_scripted_rate_change_parses_and_says_which_rate_holds_when() {
        let text = WORDCOUNT.replace(
            "repeat = 3, reliable = true",
            "repeat = 3, reliable = true, rate = 50, rate_schedule = [{ after = \"6s\", rate = 200.0 }, { after = \"14s\", rate = 50.0 }]",
        );
        let r = parse_runnable_topology("t.toml", &text).expect("parses");
        let ComponentCode::Builtin(Builtin::CorpusSpout { spout, .. }) = &r.code[0] else {
            panic!("{:?}", r.code[0]);
        };
        let s = crate::time::NANOS_PER_SEC;
        assert_eq!(spout.rate_schedule.len(), 2);
        let at = |t| spout.rate_at(t);
        assert_eq!((at(0).index, at(0).rate), (0, Some(50.0)));
        assert_eq!((at(6 * s - 1).index, at(6 * s - 1).rate), (0, Some(50.0)));
        assert_eq!(
            (at(6 * s).index, at(6 * s).since_ns, at(6 * s).rate),
            (1, 6 * s, Some(200.0))
        );
        assert_eq!((at(20 * s).index, at(20 * s).rate), (2, Some(50.0)));
        // Out of order, or not a rate: refused with the params' location.
        let e = err(&WORDCOUNT.replace(
            "reliable = true",
            "reliable = true, rate_schedule = [{ after = \"6s\", rate = 2.0 }, { after = \"5s\", rate = 1.0 }]",
        ));
        assert!(
            e.starts_with("t.toml:8:10: component[0].params: rate_schedule[1].after must be later"),
            "{e}"
        );
        let e = err(&WORDCOUNT.replace(
            "reliable = true",
            "reliable = true, rate_schedule = [{ after = \"6s\", rate = 0.0 }]",
        ));
        assert!(
            e.contains("rate_schedule[0].rate must be a positive"),
            "{e}"
        );
    }
}
