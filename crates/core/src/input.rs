//! Everything a user submits, parsed in one place with precise errors: cluster descriptions
//! ([`cluster`]) and workload/job files ([`workload`]). The simulator and the runtime share these
//! parsers, so a file that one accepts the other reads the same way.
//!
//! Every error is an [`InputError`] that names the file, line, column and field, and says what was
//! expected: `cluster.toml:12:9: node[1].cores: invalid value: integer `-2`, expected a whole number from 1 to 65536`.

pub mod binding;
pub mod cluster;
pub mod divisible;
pub mod latency;
pub mod limits;
pub mod listen;
pub mod log_format;
pub mod output_path;
pub mod star_platform;
pub mod stream_code;
pub mod topology;
mod units;
pub mod workflow;
pub mod workflow_runtime;
pub mod workload;

pub use units::{
    Bandwidth, Duration, MAX_BANDWIDTH, MAX_DURATION, TASK_SIGNALS, WarnSignal, optional_byte_size,
    rate_bytes_per_sec, size_bytes, spanned_byte_size, task_signal,
};

use std::fmt;
use thiserror::Error;

/// A problem in a submitted file, located as precisely as the parser can.
#[derive(Clone, Debug, Error, PartialEq)]
pub struct InputError {
    /// The file (or other origin) the text came from.
    pub origin: String,
    /// 1-based line, if known.
    pub line: Option<usize>,
    /// 1-based column, if known.
    pub column: Option<usize>,
    /// Dotted path of the field, e.g. `application[2].gpu.gpus`, if known.
    pub field: Option<String>,
    /// What is wrong and what was expected.
    pub message: String,
}

impl fmt::Display for InputError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.origin)?;
        if let Some(line) = self.line {
            write!(f, ":{line}")?;
            if let Some(col) = self.column {
                write!(f, ":{col}")?;
            }
        }
        write!(f, ": ")?;
        if let Some(field) = &self.field {
            write!(f, "{field}: ")?;
        }
        write!(f, "{}", self.message)
    }
}

/// The text of one submitted file and where it came from; turns byte offsets into lines.
#[derive(Clone, Copy, Debug)]
pub struct Source<'a> {
    /// File name or other origin, used in every error.
    pub origin: &'a str,
    /// The text.
    pub text: &'a str,
}

impl<'a> Source<'a> {
    /// A source named `origin` holding `text`.
    pub fn new(origin: &'a str, text: &'a str) -> Self {
        Self { origin, text }
    }

    /// 1-based (line, column) of byte `offset`. An offset past the end, or inside a character,
    /// counts as the start of that character (or the end of the text): a parser's slip in
    /// locating an error must never turn the error into a panic.
    pub fn line_col(&self, offset: usize) -> (usize, usize) {
        let mut end = offset.min(self.text.len());
        while !self.text.is_char_boundary(end) {
            end -= 1;
        }
        let before = &self.text[..end];
        let line = before.matches('\n').count() + 1;
        let line_start = before.rfind('\n').map_or(0, |i| i + 1);
        (line, before[line_start..].chars().count() + 1)
    }

    /// An error at byte `offset` (or unlocated), on `field`.
    pub fn error(
        &self,
        offset: Option<usize>,
        field: Option<String>,
        message: impl Into<String>,
    ) -> InputError {
        let (line, column) = match offset.map(|o| self.line_col(o)) {
            Some((l, c)) => (Some(l), Some(c)),
            None => (None, None),
        };
        InputError {
            origin: self.origin.to_string(),
            line,
            column,
            field,
            message: message.into(),
        }
    }

    /// Deserializes the whole text as TOML into `T`, keeping the failing field's path and position.
    pub fn parse_toml<T: serde::de::DeserializeOwned>(&self) -> Result<T, InputError> {
        let de = toml::de::Deserializer::parse(self.text).map_err(|e| self.toml_error(&e, None))?;
        serde_path_to_error::deserialize(de).map_err(|e| {
            let path = e.path().to_string();
            let field = (path != ".").then(|| normalise_path(&path));
            self.toml_error(e.inner(), field)
        })
    }

    /// Where the value at `path` is written (`task`, 2, `env`, `A=B`), read again from the
    /// text: for the fields a parser keeps without their place (an application variant's fields,
    /// a workflow task's `env`, a cost's `mean` and `cv`, a divisible load's `time_limit`),
    /// looked up only when one is refused, so the error names the value's own line and column. `None` when the text does not hold it (a
    /// default, or text that no longer parses).
    pub(crate) fn value_at(&self, path: &[Step<'_>]) -> Option<usize> {
        let root = toml::de::DeValue::Table(toml::de::DeTable::parse(self.text).ok()?.into_inner());
        let mut value = &root;
        let mut span = None;
        for step in path {
            let next = match step {
                Step::Key(k) => value.get(*k),
                Step::Index(i) => value.get(*i),
            }?;
            span = Some(next.span());
            value = next.get_ref();
        }
        span.filter(|s| s.end > s.start).map(|s| s.start)
    }

    /// Where key `path` is written (`max_attempts`, `fair_share.half_life`, `allocation[0].server`):
    /// the byte offset of its name, for an error about a value refused once the file has parsed
    /// (a bound that depends on other values), so that it names the key's line and column as a
    /// parse error does. `None` when the text does not hold it (a default, a flag's value, or
    /// text that no longer parses).
    pub fn key_at(&self, path: &str) -> Option<usize> {
        let root = toml::de::DeTable::parse(self.text).ok()?.into_inner();
        let mut table = &root;
        let mut steps = path.split('.').peekable();
        while let Some(step) = steps.next() {
            // `allocation[0]`: the key, then the element of its array (of tables).
            let (name, index) = match step.split_once('[') {
                Some((name, rest)) => (name, Some(rest.strip_suffix(']')?.parse::<usize>().ok()?)),
                None => (step, None),
            };
            let (key, value) = table.iter().find(|(k, _)| k.get_ref() == name)?;
            let mut value = value.get_ref();
            let mut at = key.span().start;
            if let Some(i) = index {
                let element = value.as_array()?.get(i)?;
                at = element.span().start;
                value = element.get_ref();
            }
            if steps.peek().is_none() {
                return Some(at);
            }
            table = value.as_table()?;
        }
        None
    }

    fn toml_error(&self, e: &toml::de::Error, field: Option<String>) -> InputError {
        let mut message = in_words(e.message());
        // TOML's "duplicate key" names no key: the text at its span is the key written again.
        if message == "duplicate key"
            && let Some(key) = e
                .span()
                .and_then(|s| self.text.get(s))
                .map(str::trim)
                .filter(|k| !k.is_empty() && k.len() <= 128 && !k.contains('\n'))
        {
            message = format!(
                "duplicate key `{}`: a key is written once in its table",
                key.escape_debug()
            );
        }
        if let Some(meant) = nearest_field(&message) {
            message.push_str(&format!(": did you mean `{meant}`?"));
        }
        self.error(e.span().map(|s| s.start), field, message)
    }
}

/// The known field nearest a mistyped one, from serde's ``unknown field `taks`, expected one of
/// `name`, `tasks`, …`` (or ``expected `a` or `b` ``): the listed name within two edits
/// (`strsim::levenshtein`, as a misspelt workflow placeholder is told), the first listed of the
/// nearest; `None` for any other message or when none is that near. A name within two edits of a
/// one- or two-letter key would be any key: those get none.
fn nearest_field(message: &str) -> Option<&str> {
    let rest = message.strip_prefix("unknown field `")?;
    let (typo, rest) = rest.split_once('`')?;
    let listed = rest.strip_prefix(", expected ")?;
    listed
        .split('`')
        .skip(1)
        .step_by(2)
        .enumerate()
        .map(|(i, known)| (strsim::levenshtein(typo, known), i, known))
        .filter(|&(d, _, known)| d <= 2 && d < typo.chars().count().min(known.chars().count()))
        .min()
        .map(|(_, _, known)| known)
}

/// A TOML or serde message in a user's words: the Rust type a field is read as (`expected
/// u32`) is said as what the file may hold, with the type's range (`expected a whole number from
/// 0 to 4294967295`), so that a value too large says the largest one read; a number too large
/// for any integer (`integer `…` as i128`, toml's internal type) is said to be out of range.
/// A field whose parser refuses more than its type does says its own range ([`whole_number_range`]).
pub(crate) fn in_words(message: &str) -> String {
    fn range(min: i128, max: i128) -> String {
        format!("a whole number from {min} to {max}")
    }
    let types: [(&str, String); 12] = [
        ("u8", range(0, u8::MAX.into())),
        ("u16", range(0, u16::MAX.into())),
        ("u32", range(0, u32::MAX.into())),
        ("u64", range(0, u64::MAX.into())),
        ("usize", range(0, usize::MAX as i128)),
        ("i8", range(i8::MIN.into(), i8::MAX.into())),
        ("i16", range(i16::MIN.into(), i16::MAX.into())),
        ("i32", range(i32::MIN.into(), i32::MAX.into())),
        ("i64", range(i64::MIN.into(), i64::MAX.into())),
        ("isize", range(isize::MIN as i128, isize::MAX as i128)),
        ("f32", "a number".into()),
        ("f64", "a number".into()),
    ];
    let mut out = message.trim().to_string();
    for (ty, words) in types {
        let expected = format!("expected {ty}");
        // Whole words only: `expected u32` is not the start of `expected u32s`.
        let found = out.match_indices(&expected).map(|(at, _)| at).find(|&at| {
            !out[at + expected.len()..].starts_with(|c: char| c.is_ascii_alphanumeric())
        });
        if let Some(at) = found {
            out.replace_range(at..at + expected.len(), &format!("expected {words}"));
        }
    }
    // serde writes a float out in full (`floating point `1000…0``, 301 digits for `1e300`, where
    // a whole number is expected): shown as the file could have written it.
    if let Some(at) = out.find("floating point `")
        && let start = at + "floating point `".len()
        && let Some(len) = out[start..].find('`')
        && let Ok(x) = out[start..start + len].parse::<f64>()
    {
        out.replace_range(start..start + len, &units::shown(x));
    }
    // `invalid type: integer `1…0` as i128, expected …`: the number is an integer, too large
    // (or too small) for any field; i128 is only how toml read it.
    if let Some(rest) = out.strip_prefix("invalid type: integer `")
        && let Some((number, tail)) = rest.split_once("` as i128")
    {
        out = format!("invalid value: integer `{number}` is out of range{tail}");
    }
    out
}

/// `e`, a type error on a whole-number field listed in `ranges` (its path without indices,
/// `node.cores`, and the least and most the parser accepts once it is read), with the field's own
/// range instead of its type's: `cores = -4` must not be told `0 or more` when `cores = 0` is
/// refused next, nor `tasks = 10000000000` told the type's limit when the file's is lower.
pub(crate) fn whole_number_range(mut e: InputError, ranges: &[(&str, u64, u64)]) -> InputError {
    let Some(field) = e.field.as_deref() else {
        return e;
    };
    // `application[2].cpu.cores` → `application.cpu.cores`.
    let mut path = String::with_capacity(field.len());
    let mut in_index = false;
    for c in field.chars() {
        match c {
            '[' => in_index = true,
            ']' => in_index = false,
            c if !in_index => path.push(c),
            _ => {}
        }
    }
    let Some(&(_, min, max)) = ranges.iter().find(|(f, _, _)| *f == path) else {
        return e;
    };
    if let Some(at) = e.message.find(", expected a whole number from ") {
        e.message.replace_range(
            at..,
            &format!(", expected a whole number from {min} to {max}"),
        );
    }
    e
}

/// One step of a path into a file's TOML ([`Source::value_at`]).
#[derive(Clone, Copy, Debug)]
pub(crate) enum Step<'a> {
    /// The value of this key of a table.
    Key(&'a str),
    /// The element at this index of an array (of tables: `[[task]]`).
    Index(usize),
}

/// serde_path_to_error writes `application[0].cpu`, already in the user's terms; drop the root
/// marker and the private segments that span-keeping wrappers add.
fn normalise_path(path: &str) -> String {
    path.split('.')
        .filter(|seg| !seg.is_empty() && !seg.starts_with("$__serde_spanned"))
        .collect::<Vec<_>>()
        .join(".")
}

#[cfg(test)]
mod key_tests {
    use super::{Source, nearest_field};

    /// An unknown key is told the known one it most likely meant, if one is within two edits.
    #[test]
    fn an_unknown_field_is_told_the_nearest_known_one() {
        let listed = |typo: &str| {
            format!("unknown field `{typo}`, expected one of `name`, `tasks`, `split`, `cpu`")
        };
        assert_eq!(nearest_field(&listed("taks")), Some("tasks"));
        assert_eq!(nearest_field(&listed("nmae")), Some("name"));
        assert_eq!(nearest_field(&listed("threads")), None);
        // Two edits turn `x` into `cpu`: no guess for so short a key.
        assert_eq!(nearest_field(&listed("x")), None);
        assert_eq!(
            nearest_field("unknown field `mean2`, expected `mean` or `cv`"),
            Some("mean")
        );
        assert_eq!(nearest_field("invalid type: string, expected u32"), None);
    }

    /// A key is found at its name's line and column: top level, in a table (header or inline),
    /// in an element of an array of tables; one not written is not found.
    #[test]
    fn key_at_finds_a_keys_name_where_it_is_written() {
        let text = "max_attempts = 0\n\n[fair_share]\n  half_life = \"10s\"\n\
                    [[allocation]]\nname = \"a\"\n[[allocation]]\nserver = \"x\"\n";
        let src = Source::new("s.toml", text);
        let at = |k: &str| src.key_at(k).map(|o| src.line_col(o));
        assert_eq!(at("max_attempts"), Some((1, 1)));
        assert_eq!(at("fair_share.half_life"), Some((4, 3)));
        assert_eq!(at("allocation[1].server"), Some((8, 1)));
        assert_eq!(at("dead_timeout"), None);
        assert_eq!(at("allocation[2].server"), None);
        let inline = Source::new("s.toml", "x = 1\nfair_share = { half_life = \"10s\" }\n");
        assert_eq!(
            inline
                .key_at("fair_share.half_life")
                .map(|o| inline.line_col(o)),
            Some((2, 16))
        );
    }
}
