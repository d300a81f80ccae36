//! The `[[divisible]]` section of a job file (spec 03 in the runtime): one divisible load of
//! `units` units that the server cuts into chunks sized for each node's measured speed, link and
//! memory, and runs as `command` with `{start}`, `{end}` (the half-open unit range), `{chunk}` (the
//! chunk's number) and `{input}` (the path of the chunk's slice of `input`) replaced.
//!
//! ```toml
//! [[divisible]]
//! name = "rows"
//! units = 600                      # total load: matrix rows
//! command = "matmul {start} {end} < {input}"
//! input = "a.bin"                  # on the submitting side; chunk k gets bytes
//! unit_bytes = 512                 #   [start·unit_bytes, end·unit_bytes)
//! output = "concat"                # chunk outputs (stdout) gathered in unit order
//! algo = "umrlm"                   # or "rumr", "umr", "static"
//! memory_per_unit = "4KiB"
//! retries = 2
//! time_limit = "60s"
//! ```
//!
//! Parsed by [`super::workload::parse_workload`] beside `[[application]]` with the same located
//! errors; what only the submitter's disk can tell (the input file's length) is checked by
//! [`DivisibleSpec::check_input_len`].

use super::cluster::at;
use super::limits::task_memory_problem;
use super::units::Duration;
use super::workload::{Command, MAX_RETRIES};
use super::{InputError, Source, Step};
use crate::policy::divisible::Algo;
use bytesize::ByteSize;
use serde::{Deserialize, Serialize};
use serde_spanned::Spanned;

/// Most units one divisible load may have (chunk ranges travel as integers; 2^40 is far beyond
/// any row count one server gathers).
pub const MAX_UNITS: u64 = 1 << 40;

/// What to do with the chunks' outputs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum OutputMode {
    /// Each chunk's stdout, gathered in unit order into one file on the server.
    Concat,
}

/// The planner as written (`algo = "umrlm"`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum AlgoName {
    /// [`Algo::Umrlm`] (the default).
    Umrlm,
    /// [`Algo::Rumr`].
    Rumr,
    /// [`Algo::Umr`].
    Umr,
    /// [`Algo::Static`].
    Static,
}

impl AlgoName {
    /// The core planner.
    pub fn algo(self) -> Algo {
        match self {
            AlgoName::Umrlm => Algo::Umrlm,
            AlgoName::Rumr => Algo::Rumr,
            AlgoName::Umr => Algo::Umr,
            AlgoName::Static => Algo::Static,
        }
    }
}

/// One `[[divisible]]` table as written.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct DivisibleSpec {
    /// Name (chunk outputs on the agents are named after it).
    pub name: Spanned<String>,
    /// Total load `W`, in units.
    pub units: Spanned<u64>,
    /// What a chunk runs: `{start}` and `{end}` are required.
    pub command: Spanned<Command>,
    /// A file on the submitting side (relative to where `hetsched submit` runs); the server holds
    /// it and ships each chunk its slice.
    #[serde(default)]
    pub input: Option<Spanned<String>>,
    /// Bytes per unit of `input`.
    #[serde(default)]
    pub unit_bytes: Option<Spanned<u64>>,
    /// `"concat"`: gather the chunks' stdout in unit order.
    #[serde(default)]
    pub output: Option<OutputMode>,
    /// The planner; UMRLM when absent.
    #[serde(default)]
    pub algo: Option<Spanned<AlgoName>>,
    /// Memory one unit needs on a node (chunks are capped by the node's memory with it).
    #[serde(default, deserialize_with = "super::units::optional_byte_size")]
    pub memory_per_unit: Option<ByteSize>,
    /// Times a failed chunk runs again (at most [`MAX_RETRIES`]).
    #[serde(default)]
    pub retries: Option<Spanned<u32>>,
    /// Wall-clock limit of one chunk: at least 1 ms (agents count it in milliseconds).
    #[serde(default)]
    pub time_limit: Option<Duration>,
    /// Node attributes a worker needs (`requires = ["bigmem"]`): only agents whose `attributes`
    /// include them all take chunks (the plan's workers are those agents). Slurm's
    /// `--constraint`, as for batch applications.
    #[serde(default)]
    pub requires: Vec<Spanned<String>>,
}

impl DivisibleSpec {
    /// The planner.
    pub fn algo(&self) -> Algo {
        self.algo
            .as_ref()
            .map_or(Algo::Umrlm, |a| a.get_ref().algo())
    }

    /// Total units.
    pub fn units(&self) -> u64 {
        *self.units.get_ref()
    }

    /// The attributes it `requires`, sorted and without repeats.
    pub fn requires(&self) -> Vec<String> {
        let mut r: Vec<String> = self.requires.iter().map(|r| r.get_ref().clone()).collect();
        r.sort();
        r.dedup();
        r
    }

    /// Whether node `name` with `attributes` (with `gpu` where it has accelerators, as
    /// [`crate::model::cluster::Node::all_attributes`] lists them) may take its chunks
    /// ([`crate::model::cluster::meets`]).
    pub fn admits(&self, name: &str, attributes: &[String]) -> bool {
        let required: Vec<String> = self.requires.iter().map(|r| r.get_ref().clone()).collect();
        crate::model::cluster::meets(Some(name), attributes, &required)
    }

    /// Whether a chunk may run longer than an agent with `time_left` has (its `time_limit` is
    /// longer; `None`: the agent has no end, and a job without a limit fits anywhere).
    pub fn outlasts(&self, time_left: Option<std::time::Duration>) -> bool {
        match (self.time_limit, time_left) {
            (Some(limit), Some(left)) => std::time::Duration::from_nanos(limit.0) > left,
            _ => false,
        }
    }

    /// Retries per chunk.
    pub fn retries(&self) -> u32 {
        self.retries.as_ref().map_or(0, |r| *r.get_ref())
    }

    /// Bytes per unit of the input (0 without input).
    pub fn unit_bytes(&self) -> u64 {
        self.unit_bytes.as_ref().map_or(0, |b| *b.get_ref())
    }

    /// Bytes of input the load needs: `units · unit_bytes` (0 without input).
    pub fn input_bytes(&self) -> u64 {
        self.units().saturating_mul(self.unit_bytes())
    }

    /// Checks the length of the `input` file the submitter read against `units · unit_bytes`;
    /// a longer file is fine (the load uses its first bytes).
    pub fn check_input_len(
        &self,
        src: &Source<'_>,
        index: usize,
        len: u64,
    ) -> Result<(), InputError> {
        let Some(input) = &self.input else {
            return Ok(());
        };
        let need = self.input_bytes();
        if len < need {
            return Err(src.error(
                at(input),
                Some(format!("divisible[{index}].input")),
                format!(
                    "`{}` is {len} bytes, shorter than units × unit_bytes = {} × {} = {need}",
                    input.get_ref(),
                    self.units(),
                    self.unit_bytes()
                ),
            ));
        }
        Ok(())
    }
}

fn words(c: &Command) -> Vec<&str> {
    match c {
        Command::Shell(s) => vec![s.as_str()],
        Command::Argv(v) => v.iter().map(String::as_str).collect(),
    }
}

/// Checks one section: what [`super::workload::parse_workload`] calls for every `[[divisible]]`.
pub fn check(src: &Source<'_>, index: usize, d: &DivisibleSpec) -> Result<(), InputError> {
    let field = |f: &str| Some(format!("divisible[{index}].{f}"));
    let name = d.name.get_ref();
    if name.trim().is_empty() {
        return Err(src.error(at(&d.name), field("name"), "must not be empty"));
    }
    if let Some(problem) = super::limits::app_name_problem(name) {
        return Err(src.error(at(&d.name), field("name"), problem));
    }
    if d.units() == 0 {
        return Err(src.error(at(&d.units), field("units"), "must be at least 1"));
    }
    if d.units() > MAX_UNITS {
        return Err(src.error(
            at(&d.units),
            field("units"),
            format!("must be at most {MAX_UNITS}"),
        ));
    }
    let command = words(d.command.get_ref());
    let joined = command.join(" ");
    if command.is_empty() || joined.trim().is_empty() {
        return Err(src.error(at(&d.command), field("command"), "must not be empty"));
    }
    if joined.len() > super::limits::MAX_COMMAND_BYTES || joined.contains('\0') {
        return Err(src.error(
            at(&d.command),
            field("command"),
            format!(
                "must be at most {} bytes without NUL",
                super::limits::MAX_COMMAND_BYTES
            ),
        ));
    }
    for needed in ["{start}", "{end}"] {
        if !joined.contains(needed) {
            return Err(src.error(
                at(&d.command),
                field("command"),
                format!(
                    "must contain `{needed}`: each chunk runs the command on the unit range [{{start}}, {{end}})"
                ),
            ));
        }
    }
    match (&d.input, &d.unit_bytes) {
        (Some(i), None) => {
            return Err(src.error(
                at(i),
                field("unit_bytes"),
                "missing: with `input`, say how many bytes one unit is",
            ));
        }
        (None, Some(b)) => {
            return Err(src.error(
                at(b),
                field("input"),
                "missing: `unit_bytes` needs an `input` file",
            ));
        }
        (Some(i), Some(b)) => {
            if i.get_ref().is_empty() || i.get_ref().contains('\0') {
                return Err(src.error(at(i), field("input"), "must be a file path"));
            }
            if *b.get_ref() == 0 {
                return Err(src.error(at(b), field("unit_bytes"), "must be at least 1"));
            }
            if d.units().checked_mul(*b.get_ref()).is_none() {
                return Err(src.error(
                    at(b),
                    field("unit_bytes"),
                    "units × unit_bytes overflows 64 bits",
                ));
            }
        }
        (None, None) => {
            if joined.contains("{input}") {
                return Err(src.error(
                    at(&d.command),
                    field("command"),
                    "uses `{input}` but the section has no `input` file",
                ));
            }
        }
    }
    if let Some(r) = &d.retries
        && *r.get_ref() > MAX_RETRIES
    {
        return Err(src.error(
            at(r),
            field("retries"),
            format!("must be at most {MAX_RETRIES}"),
        ));
    }
    super::cluster::requirement_list(src, &d.requires, &format!("divisible[{index}].requires"))?;
    if let Some(m) = d.memory_per_unit
        && m.as_u64() == 0
    {
        return Err(src.error(
            value_at(src, index, "memory_per_unit").or_else(|| at(&d.name)),
            field("memory_per_unit"),
            "must be at least 1 byte (leave it out when a unit needs no memory worth counting)",
        ));
    }
    // One unit runs on one node: past what a batch task may hold (1 PiB, what one node may
    // have), it fits no node; refused in the batch bound's words.
    if let Some(problem) = d
        .memory_per_unit
        .and_then(|m| task_memory_problem(m.as_u64()))
    {
        return Err(src.error(
            value_at(src, index, "memory_per_unit").or_else(|| at(&d.name)),
            field("memory_per_unit"),
            problem,
        ));
    }
    // Agents count a chunk's time limit in whole milliseconds, 0 meaning none: a shorter one
    // (`"500us"`, `"0s"`) was accepted and ran every chunk without a limit.
    if d.time_limit
        .is_some_and(|t| t.0 < crate::time::NANOS_PER_SEC / 1000)
    {
        return Err(src.error(
            value_at(src, index, "time_limit").or_else(|| at(&d.name)),
            field("time_limit"),
            "must be at least 1ms (leave it out for no limit)",
        ));
    }
    Ok(())
}

/// Where the value of `key` in the `index`th `[[divisible]]` table is written: for the fields
/// kept without their place (a `time_limit`, a `memory_per_unit`), read again from the text
/// when one of them is refused ([`Source::value_at`]).
fn value_at(src: &Source<'_>, index: usize, key: &str) -> Option<usize> {
    src.value_at(&[Step::Key("divisible"), Step::Index(index), Step::Key(key)])
}

/// Replaces `{start}`, `{end}`, `{chunk}` and `{input}` in one word of a chunk's command.
pub fn substitute(word: &str, start: u64, end: u64, chunk: u64, input: &str) -> String {
    word.replace("{start}", &start.to_string())
        .replace("{end}", &end.to_string())
        .replace("{chunk}", &chunk.to_string())
        .replace("{input}", input)
}

#[cfg(test)]
mod tests {
    use crate::input::workload::parse_workload;

    fn job(body: &str) -> String {
        format!("[[divisible]]\nname = \"rows\"\n{body}")
    }

    fn err(body: &str) -> String {
        parse_workload("job.toml", &job(body))
            .expect_err("refused")
            .to_string()
    }

    #[test]
    fn a_divisible_job_parses_with_its_defaults() {
        let w = parse_workload(
            "job.toml",
            &job("units = 600\ncommand = \"mm {start} {end} < {input}\"\ninput = \"a.bin\"\nunit_bytes = 512\noutput = \"concat\"\nmemory_per_unit = \"4KiB\"\n"),
        )
        .expect("parses");
        assert!(w.applications.is_empty());
        let d = &w.divisible[0];
        assert_eq!(d.units(), 600);
        assert_eq!(d.algo(), crate::policy::divisible::Algo::Umrlm);
        assert_eq!(d.input_bytes(), 600 * 512);
        assert_eq!(d.memory_per_unit.map(|m| m.as_u64()), Some(4096));
    }

    /// `memory_per_unit` past what a batch task may hold (1 PiB) is refused at its line and
    /// column, in the batch bound's words; 1 PiB itself is taken. Before, any figure was taken.
    #[test]
    fn a_memory_per_unit_past_a_batch_tasks_bound_is_refused_naming_the_field() {
        use crate::input::limits::MAX_TASK_MEMORY;
        let past = MAX_TASK_MEMORY + 1;
        let e = err(&format!(
            "units = 10\ncommand = \"mm {{start}} {{end}}\"\nmemory_per_unit = {past}\n"
        ));
        assert!(
            e.starts_with("job.toml:5:19: divisible[0].memory_per_unit: ")
                && e.contains(&format!(
                    "{past} bytes is more than a task may take, {MAX_TASK_MEMORY} (1 PiB)"
                )),
            "{e}"
        );
        let w = parse_workload(
            "job.toml",
            &job("units = 10\ncommand = \"mm {start} {end}\"\nmemory_per_unit = \"1PiB\"\n"),
        )
        .expect("at the bound");
        assert_eq!(
            w.divisible[0].memory_per_unit.map(|m| m.as_u64()),
            Some(MAX_TASK_MEMORY)
        );
    }

    #[test]
    fn requires_lists_the_attributes_a_worker_needs_and_bad_ones_are_refused_at_their_place() {
        let w = parse_workload(
            "job.toml",
            &job("units = 10\ncommand = \"mm {start} {end}\"\nrequires = [\"bigmem\", \"ssd\", \"bigmem\"]\n"),
        )
        .expect("parses");
        let d = &w.divisible[0];
        assert_eq!(d.requires(), ["bigmem", "ssd"]);
        let has = |a: &[&str]| d.admits("n1", &a.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        assert!(has(&["bigmem", "gpu", "ssd"]));
        assert!(!has(&["bigmem"]), "a node without `ssd` takes no chunk");
        assert!(!has(&[]));
        assert_eq!(
            err("units = 10\ncommand = \"mm {start} {end}\"\nrequires = [\"ok\", \"no spaces\"]\n"),
            "job.toml:5:19: divisible[0].requires[1]: attribute `no spaces` has whitespace or a control character"
        );
    }

    #[test]
    fn a_command_without_start_is_refused_naming_the_field() {
        assert_eq!(
            err("units = 10\ncommand = \"mm {end}\"\n"),
            "job.toml:4:11: divisible[0].command: must contain `{start}`: each chunk runs the command on the unit range [{start}, {end})"
        );
    }

    #[test]
    fn zero_units_are_refused() {
        assert_eq!(
            err("units = 0\ncommand = \"mm {start} {end}\"\n"),
            "job.toml:3:9: divisible[0].units: must be at least 1"
        );
    }

    #[test]
    fn input_needs_unit_bytes_and_input_placeholder_needs_input() {
        assert!(
            err("units = 4\ncommand = \"mm {start} {end}\"\ninput = \"a\"\n")
                .contains("divisible[0].unit_bytes: missing")
        );
        assert!(
            err("units = 4\ncommand = \"mm {start} {end} {input}\"\n")
                .contains("divisible[0].command: uses `{input}`")
        );
        assert!(
            err("units = 4\ncommand = \"mm {start} {end}\"\nalgo = \"fast\"\n")
                .contains("divisible[0].algo")
        );
    }

    #[test]
    fn a_short_input_file_is_refused_with_the_sizes() {
        let text =
            job("units = 10\ncommand = \"mm {start} {end}\"\ninput = \"a.bin\"\nunit_bytes = 8\n");
        let w = parse_workload("job.toml", &text).expect("parses");
        let src = crate::input::Source::new("job.toml", &text);
        assert!(w.divisible[0].check_input_len(&src, 0, 80).is_ok());
        assert_eq!(
            w.divisible[0]
                .check_input_len(&src, 0, 79)
                .expect_err("short")
                .to_string(),
            "job.toml:5:9: divisible[0].input: `a.bin` is 79 bytes, shorter than units × unit_bytes = 10 × 8 = 80"
        );
    }

    #[test]
    fn placeholders_are_replaced() {
        assert_eq!(
            super::substitute("mm {start}-{end} #{chunk} {input}", 3, 9, 2, "/w/c2.in"),
            "mm 3-9 #2 /w/c2.in"
        );
    }
}
