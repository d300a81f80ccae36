//! What a stream component runs in the runtime (issue 16): a built-in Rust component chosen with
//! `builtin = "..."` and its `[component.params]`, or any program speaking Apache Storm's
//! multi-lang protocol, chosen with `command = [...]`. The simulator ignores this; the runtime's
//! worker (`hetsched-stream`) reads it. Parsed by `input::topology::parse_runnable_topology`.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

use super::topology::Topology;

/// A topology with the code each component runs, indexed like `topology.components`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunnableTopology {
    /// Components, streams, declared rates: what placers read.
    pub topology: Topology,
    /// The code of each component, in component order.
    pub code: Vec<ComponentCode>,
}

/// The code one component runs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ComponentCode {
    /// A built-in component.
    Builtin(Builtin),
    /// A program speaking Storm's multi-lang protocol (JSON over stdin/stdout).
    Command {
        /// Program and arguments (no shell).
        argv: Vec<String>,
        /// The component's `params`, passed in the handshake's `conf` (values as strings).
        conf: BTreeMap<String, String>,
    },
}

/// The `params` key of a `command` component that bounds how long its program may leave the
/// worker without a message while the worker waits for one (bolts: heartbeats unanswered;
/// spouts: `next`, `ack` or `fail` without its `sync`), after which the worker kills it. Storm's
/// own name for it, so it reaches the program in the handshake's `conf` as Storm's topology
/// conf would carry it.
pub const SUBPROCESS_TIMEOUT_KEY: &str = "topology.subprocess.timeout.secs";
/// [`SUBPROCESS_TIMEOUT_KEY`]'s default, seconds: what Storm falls back to
/// (`supervisor.worker.timeout.secs`).
pub const DEFAULT_SUBPROCESS_TIMEOUT_SECS: u64 = 30;
/// [`SUBPROCESS_TIMEOUT_KEY`]'s largest value, seconds (a day): longer is a hung program kept
/// for ever in practice.
pub const MAX_SUBPROCESS_TIMEOUT_SECS: u64 = 86_400;

/// The `params` key of a `command` component that sets how long its worker waits before it
/// starts the program again the first time after it ended, in milliseconds; each further
/// restart waits twice the last, up to 30 s. Not Storm's (Storm restarts the whole worker): a
/// program known to recover at once may be started again sooner than after the default.
pub const RESTART_WAIT_KEY: &str = "topology.subprocess.restart.wait.ms";
/// [`RESTART_WAIT_KEY`]'s default, milliseconds.
pub const DEFAULT_RESTART_WAIT_MS: u64 = 1_000;
/// [`RESTART_WAIT_KEY`]'s largest value, milliseconds: the longest wait between restarts.
pub const MAX_RESTART_WAIT_MS: u64 = 30_000;

/// A `command` component's [`RESTART_WAIT_KEY`] in milliseconds, from its `conf`: the default
/// when absent; an error naming the key when it is not a whole number of milliseconds from 1
/// to [`MAX_RESTART_WAIT_MS`].
pub fn restart_wait_ms(conf: &BTreeMap<String, String>) -> Result<u64, String> {
    let Some(text) = conf.get(RESTART_WAIT_KEY) else {
        return Ok(DEFAULT_RESTART_WAIT_MS);
    };
    match text.trim().parse::<u64>() {
        Ok(ms) if (1..=MAX_RESTART_WAIT_MS).contains(&ms) => Ok(ms),
        _ => Err(format!(
            "`{RESTART_WAIT_KEY}` = {text}: expected whole milliseconds from 1 to \
             {MAX_RESTART_WAIT_MS} (how long the worker waits before it first starts the program \
             again after it ended; default {DEFAULT_RESTART_WAIT_MS})"
        )),
    }
}

/// A `command` component's [`SUBPROCESS_TIMEOUT_KEY`] in seconds, from its `conf`: the default
/// when absent; an error naming the key when it is not a whole number of seconds from 1 to
/// [`MAX_SUBPROCESS_TIMEOUT_SECS`].
pub fn subprocess_timeout_secs(conf: &BTreeMap<String, String>) -> Result<u64, String> {
    let Some(text) = conf.get(SUBPROCESS_TIMEOUT_KEY) else {
        return Ok(DEFAULT_SUBPROCESS_TIMEOUT_SECS);
    };
    match text.trim().parse::<u64>() {
        Ok(s) if (1..=MAX_SUBPROCESS_TIMEOUT_SECS).contains(&s) => Ok(s),
        _ => Err(format!(
            "`{SUBPROCESS_TIMEOUT_KEY}` = {text}: expected whole seconds from 1 to \
             {MAX_SUBPROCESS_TIMEOUT_SECS} (how long the program may go without answering \
             before the worker kills it; default {DEFAULT_SUBPROCESS_TIMEOUT_SECS})"
        )),
    }
}

/// Settings shared by the built-in spouts.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SpoutSettings {
    /// Track every tuple tree (ack/fail) and replay what fails or times out: at-least-once.
    pub reliable: bool,
    /// Reliable spouts: most tuple trees in flight per executor (Storm's `max.spout.pending`).
    pub max_pending: u32,
    /// Reliable spouts: a tuple tree not fully acknowledged after this many nanoseconds fails
    /// and is replayed.
    pub timeout_ns: u64,
    /// Tuples per second each executor emits at most; `None`: as fast as the topology takes them.
    pub rate: Option<f64>,
    /// A scripted rate change: from `after_ns` after the topology started, each executor emits
    /// at most `rate` tuples per second (steps in increasing `after_ns`; before the first step,
    /// `rate` above holds).
    #[serde(default)]
    pub rate_schedule: Vec<RateStep>,
}

/// One step of a spout's scripted rate ([`SpoutSettings::rate_schedule`]).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct RateStep {
    /// Nanoseconds after the topology started.
    pub after_ns: u64,
    /// Tuples per second per executor from then on.
    pub rate: f64,
}

/// The rate in force at one time, and since when ([`SpoutSettings::rate_at`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RateSegment {
    /// Index of the segment: 0 before the first step, `k + 1` from step `k` on.
    pub index: usize,
    /// Nanoseconds after the topology started at which the segment began (0 for the first).
    pub since_ns: u64,
    /// Tuples per second per executor; `None`: unlimited.
    pub rate: Option<f64>,
}

impl SpoutSettings {
    /// The rate in force `t_ns` after the topology started: the last step whose `after_ns` has
    /// passed, or `rate` before the first step.
    pub fn rate_at(&self, t_ns: u64) -> RateSegment {
        let mut seg = RateSegment {
            index: 0,
            since_ns: 0,
            rate: self.rate,
        };
        for (k, step) in self.rate_schedule.iter().enumerate() {
            if step.after_ns <= t_ns {
                seg = RateSegment {
                    index: k + 1,
                    since_ns: step.after_ns,
                    rate: Some(step.rate),
                };
            }
        }
        seg
    }
}

/// The built-in components and their parameters.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Builtin {
    /// Emits the lines of a corpus (one tuple `[line]` each), `repeat` times (0 = for ever).
    /// Executor `k` of `p` emits lines `k, k + p, k + 2p, …` of each pass.
    CorpusSpout {
        /// The lines, given inline.
        lines: Vec<String>,
        /// A file to read the lines from instead (relative to the submitting directory).
        file: Option<String>,
        /// Passes over the corpus; 0 = for ever.
        repeat: u64,
        /// Reliability and rate.
        spout: SpoutSettings,
    },
    /// Emits `[n]` for n = 0, 1, …, count − 1 (0 = for ever), spread over the executors like
    /// the corpus spout's lines.
    SequenceSpout {
        /// How many numbers in all; 0 = for ever.
        count: u64,
        /// Reliability and rate.
        spout: SpoutSettings,
    },
    /// Splits field 0 into words and emits `[word]` for each.
    Split {
        /// Separator; `None` splits on any whitespace.
        separator: Option<String>,
        /// Lower-case the words first.
        lowercase: bool,
    },
    /// Counts tuples by field 0; emits `[key, count]` after each update when it has an outgoing
    /// stream, and writes its counts to `output` (if given) every `every_ns` and on shutdown.
    Count {
        /// File to write `key<TAB>count` lines to; `{index}` becomes the executor's index.
        output: Option<String>,
        /// Period of the snapshot, nanoseconds.
        every_ns: u64,
    },
    /// Passes on tuples whose field `field` (as text) contains `contains` and is at least
    /// `min_length` characters long.
    Filter {
        /// Field to test.
        field: usize,
        /// Substring that must occur, if given.
        contains: Option<String>,
        /// Least length in characters.
        min_length: usize,
    },
    /// Joins by field 0 the latest tuple from each of two input components: on a tuple from one
    /// side whose key the other side has seen, emits `[key, left field 1, right field 1]` (left =
    /// the first input component in file order).
    Join,
    /// Appends every tuple as a tab-separated line to `path` (`{index}` = executor index).
    FileSink {
        /// Output file.
        path: String,
    },
}

impl Builtin {
    /// The name users write in `builtin = "..."`.
    pub fn name(&self) -> &'static str {
        match self {
            Builtin::CorpusSpout { .. } => "corpus-spout",
            Builtin::SequenceSpout { .. } => "sequence-spout",
            Builtin::Split { .. } => "split",
            Builtin::Count { .. } => "count",
            Builtin::Filter { .. } => "filter",
            Builtin::Join => "join",
            Builtin::FileSink { .. } => "file-sink",
        }
    }

    /// Whether this built-in is a spout (the others are bolts).
    pub fn is_spout(&self) -> bool {
        matches!(
            self,
            Builtin::CorpusSpout { .. } | Builtin::SequenceSpout { .. }
        )
    }
}

/// Every built-in's name, spouts first.
pub const BUILTIN_NAMES: [&str; 7] = [
    "corpus-spout",
    "sequence-spout",
    "split",
    "count",
    "filter",
    "join",
    "file-sink",
];
