//! The built-in components (`builtin = "..."`, see `hetsched_core::input::stream_code`): two
//! spouts with replay, and split, count, filter, join and file-sink bolts.

use crate::tuple::{Tuple, Value};
use crate::worker::BoltOut;
use hetsched_core::model::stream_code::Builtin;
use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};

/// What a spout offers next.
#[derive(Debug, PartialEq)]
pub enum SpoutNext {
    /// Emit `values` as message `msg` (the id it can be replayed by).
    Emit(u64, Vec<Value>),
    /// Nothing more, ever.
    Done,
}

/// A built-in spout's source of messages. Message ids are the source's own positions, so a
/// failed tree is replayed by asking for the same id again.
pub trait SpoutCode: Send {
    /// The next new message.
    fn next(&mut self) -> SpoutNext;
    /// The values of message `msg`, emitted earlier, for a replay.
    fn replay(&mut self, msg: u64) -> Vec<Value>;
    /// Where the spout is (handed to the executor's next home when a placement moves it).
    fn position(&self) -> Option<u64> {
        None
    }
    /// Goes on from a position [`SpoutCode::position`] gave.
    fn resume(&mut self, _position: u64) {}
}

/// A bolt's code: called once per input tuple.
pub trait BoltCode: Send {
    /// Processes one tuple; emits through `out` (anchored to `input` automatically).
    fn execute(&mut self, input: &Tuple, out: &mut BoltOut<'_>);
    /// Called about every 100 ms with the time, nanoseconds since the Unix epoch.
    fn tick(&mut self, _now_ns: u64) {}
    /// Called once when the worker stops, or the executor moves away.
    fn finish(&mut self) {}
    /// What the bolt keeps, handed to the executor's next home when a placement moves it
    /// (`None`: nothing to keep).
    fn state(&mut self) -> Option<Vec<u8>> {
        None
    }
    /// Takes the state an earlier home of this executor handed over ([`BoltCode::state`]).
    fn restore(&mut self, _state: &[u8]) {}
}

/// Executor `index` of `parallelism` emits message ids `index, index + parallelism, …` below
/// `limit` (`None`: for ever).
struct Stride {
    next: u64,
    step: u64,
    limit: Option<u64>,
}

impl Stride {
    fn take(&mut self) -> Option<u64> {
        let n = self.next;
        if self.limit.is_some_and(|l| n >= l) {
            return None;
        }
        self.next += self.step;
        Some(n)
    }
}

/// Lines of a corpus, `repeat` passes; message id = pass × lines + line.
pub struct CorpusSpout {
    lines: Vec<String>,
    ids: Stride,
}

impl CorpusSpout {
    /// Executor `index` of `parallelism` over `lines`, `repeat` passes (0 = for ever).
    pub fn new(lines: Vec<String>, repeat: u64, index: u32, parallelism: u32) -> Self {
        let n = lines.len() as u64;
        Self {
            ids: Stride {
                next: u64::from(index),
                step: u64::from(parallelism),
                limit: (repeat > 0).then(|| n.saturating_mul(repeat)),
            },
            lines,
        }
    }
}

impl SpoutCode for CorpusSpout {
    fn next(&mut self) -> SpoutNext {
        if self.lines.is_empty() {
            return SpoutNext::Done;
        }
        match self.ids.take() {
            Some(id) => SpoutNext::Emit(id, self.replay(id)),
            None => SpoutNext::Done,
        }
    }
    fn replay(&mut self, msg: u64) -> Vec<Value> {
        let line = (msg % self.lines.len().max(1) as u64) as usize;
        vec![Value::Str(
            self.lines.get(line).cloned().unwrap_or_default(),
        )]
    }
    fn position(&self) -> Option<u64> {
        Some(self.ids.next)
    }
    fn resume(&mut self, position: u64) {
        self.ids.next = position;
    }
}

/// 0, 1, 2, … (each executor its stride).
pub struct SequenceSpout {
    ids: Stride,
}

impl SequenceSpout {
    /// Executor `index` of `parallelism`, numbers below `count` (0 = for ever).
    pub fn new(count: u64, index: u32, parallelism: u32) -> Self {
        Self {
            ids: Stride {
                next: u64::from(index),
                step: u64::from(parallelism),
                limit: (count > 0).then_some(count),
            },
        }
    }
}

impl SpoutCode for SequenceSpout {
    fn next(&mut self) -> SpoutNext {
        match self.ids.take() {
            Some(n) => SpoutNext::Emit(n, vec![Value::Int(n as i64)]),
            None => SpoutNext::Done,
        }
    }
    fn replay(&mut self, msg: u64) -> Vec<Value> {
        vec![Value::Int(msg as i64)]
    }
    fn position(&self) -> Option<u64> {
        Some(self.ids.next)
    }
    fn resume(&mut self, position: u64) {
        self.ids.next = position;
    }
}

/// Splits field 0 into words.
pub struct Split {
    separator: Option<String>,
    lowercase: bool,
}

impl BoltCode for Split {
    fn execute(&mut self, input: &Tuple, out: &mut BoltOut<'_>) {
        let Some(v) = input.values.first() else {
            return;
        };
        let text = v.as_text();
        let text = if self.lowercase {
            std::borrow::Cow::Owned(text.to_lowercase())
        } else {
            text
        };
        match &self.separator {
            None => {
                for w in text.split_whitespace() {
                    out.emit(vec![Value::Str(w.to_owned())]);
                }
            }
            Some(sep) => {
                for w in text.split(sep.as_str()).filter(|w| !w.is_empty()) {
                    out.emit(vec![Value::Str(w.to_owned())]);
                }
            }
        }
    }
}

/// Counts by field 0.
pub struct Count {
    counts: HashMap<String, u64>,
    output: Option<PathBuf>,
    every_ns: u64,
    last_write: u64,
    dirty: bool,
    emits: bool,
}

impl Count {
    fn write(&mut self) {
        let Some(path) = &self.output else { return };
        if !self.dirty {
            return;
        }
        let mut keys: Vec<(&String, &u64)> = self.counts.iter().collect();
        keys.sort();
        let mut text = String::with_capacity(keys.len() * 12);
        for (k, c) in keys {
            text.push_str(k);
            text.push('\t');
            text.push_str(&c.to_string());
            text.push('\n');
        }
        // Write then rename, so a reader never sees half a snapshot.
        let tmp = path.with_extension("tmp");
        let result = std::fs::write(&tmp, text).and_then(|()| std::fs::rename(&tmp, path));
        match result {
            Ok(()) => self.dirty = false,
            Err(e) => tracing::warn!("count: cannot write {}: {e}", path.display()),
        }
    }
}

impl BoltCode for Count {
    fn execute(&mut self, input: &Tuple, out: &mut BoltOut<'_>) {
        let Some(v) = input.values.first() else {
            return;
        };
        let key = v.as_text();
        let c = match self.counts.get_mut(key.as_ref()) {
            Some(c) => {
                *c += 1;
                *c
            }
            None => {
                self.counts.insert(key.clone().into_owned(), 1);
                1
            }
        };
        self.dirty = true;
        if self.emits {
            out.emit(vec![Value::Str(key.into_owned()), Value::Int(c as i64)]);
        }
    }
    fn tick(&mut self, now_ns: u64) {
        if now_ns.saturating_sub(self.last_write) >= self.every_ns {
            self.last_write = now_ns;
            self.write();
        }
    }
    fn finish(&mut self) {
        self.write();
    }
    fn state(&mut self) -> Option<Vec<u8>> {
        serde_json::to_vec(&self.counts).ok()
    }
    fn restore(&mut self, state: &[u8]) {
        // Added, not replaced: what this executor counted before the state arrived stays.
        match serde_json::from_slice::<HashMap<String, u64>>(state) {
            Ok(counts) => {
                for (k, n) in counts {
                    *self.counts.entry(k).or_default() += n;
                }
                self.dirty = true;
            }
            Err(e) => tracing::warn!("count: a handed-over table does not decode: {e}"),
        }
    }
}

/// Passes tuples whose field matches.
pub struct Filter {
    field: usize,
    contains: Option<String>,
    min_length: usize,
}

impl BoltCode for Filter {
    fn execute(&mut self, input: &Tuple, out: &mut BoltOut<'_>) {
        let Some(v) = input.values.get(self.field) else {
            return;
        };
        let text = v.as_text();
        if text.chars().count() < self.min_length {
            return;
        }
        if let Some(c) = &self.contains
            && !text.contains(c.as_str())
        {
            return;
        }
        out.emit(input.values.clone());
    }
}

/// Joins the latest tuple of each side by field 0.
pub struct Join {
    /// Component of every executor (to tell the sides apart).
    components: Vec<usize>,
    left: usize,
    latest: [HashMap<String, Value>; 2],
}

impl BoltCode for Join {
    fn execute(&mut self, input: &Tuple, out: &mut BoltOut<'_>) {
        let Some(key) = input.values.first() else {
            return;
        };
        let side = match self.components.get(input.src as usize) {
            Some(&c) if c == self.left => 0,
            Some(_) => 1,
            None => return,
        };
        let value = input
            .values
            .get(1)
            .cloned()
            .unwrap_or(Value::Str(String::new()));
        let key = key.as_text().into_owned();
        if let Some(other) = self.latest[1 - side].get(&key) {
            let (l, r) = if side == 0 {
                (value.clone(), other.clone())
            } else {
                (other.clone(), value.clone())
            };
            out.emit(vec![Value::Str(key.clone()), l, r]);
        }
        self.latest[side].insert(key, value);
    }
}

/// Appends every tuple as a line.
pub struct FileSink {
    out: Option<std::io::BufWriter<std::fs::File>>,
}

impl BoltCode for FileSink {
    fn execute(&mut self, input: &Tuple, _out: &mut BoltOut<'_>) {
        let Some(w) = self.out.as_mut() else { return };
        let mut line = String::new();
        for (i, v) in input.values.iter().enumerate() {
            if i > 0 {
                line.push('\t');
            }
            line.push_str(&v.as_text());
        }
        line.push('\n');
        if let Err(e) = w.write_all(line.as_bytes()) {
            tracing::warn!("file-sink: {e}");
            self.out = None;
        }
    }
    fn tick(&mut self, _now_ns: u64) {
        if let Some(w) = self.out.as_mut() {
            let _ = w.flush();
        }
    }
    fn finish(&mut self) {
        self.tick(0);
    }
}

/// A path from a component's params: `{index}` becomes the executor's index; relative paths
/// are taken from `base`.
pub fn resolve(base: &Path, pattern: &str, index: u32) -> PathBuf {
    let p = PathBuf::from(pattern.replace("{index}", &index.to_string()));
    if p.is_absolute() { p } else { base.join(p) }
}

/// A built-in bolt for executor `index` of its component `component`.
pub fn bolt(
    b: &Builtin,
    base: &Path,
    index: u32,
    emits: bool,
    components: &[usize],
    inputs: &[usize],
) -> Result<Box<dyn BoltCode>, String> {
    Ok(match b {
        Builtin::Split {
            separator,
            lowercase,
        } => Box::new(Split {
            separator: separator.clone(),
            lowercase: *lowercase,
        }),
        Builtin::Count { output, every_ns } => Box::new(Count {
            counts: HashMap::new(),
            output: output.as_deref().map(|o| resolve(base, o, index)),
            every_ns: *every_ns,
            last_write: 0,
            dirty: true,
            emits,
        }),
        Builtin::Filter {
            field,
            contains,
            min_length,
        } => Box::new(Filter {
            field: *field,
            contains: contains.clone(),
            min_length: *min_length,
        }),
        Builtin::Join => Box::new(Join {
            components: components.to_vec(),
            left: inputs.first().copied().unwrap_or(0),
            latest: [HashMap::new(), HashMap::new()],
        }),
        Builtin::FileSink { path } => {
            let path = resolve(base, path, index);
            // Append: a worker restarted after a failure adds to what its predecessor wrote
            // (replayed tuples may then appear twice: at-least-once).
            let f = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&path)
                .map_err(|e| format!("file-sink: cannot create {}: {e}", path.display()))?;
            Box::new(FileSink {
                out: Some(std::io::BufWriter::new(f)),
            })
        }
        Builtin::CorpusSpout { .. } | Builtin::SequenceSpout { .. } => {
            return Err(format!("`{}` is a spout", b.name()));
        }
    })
}

/// A built-in spout's source for executor `index` of `parallelism`.
pub fn spout(
    b: &Builtin,
    base: &Path,
    index: u32,
    parallelism: u32,
) -> Result<Box<dyn SpoutCode>, String> {
    match b {
        Builtin::CorpusSpout {
            lines,
            file,
            repeat,
            ..
        } => {
            let mut all = lines.clone();
            if let Some(f) = file {
                let path = resolve(base, f, index);
                let text = std::fs::read_to_string(&path)
                    .map_err(|e| format!("corpus-spout: cannot read {}: {e}", path.display()))?;
                all.extend(text.lines().map(str::to_owned));
            }
            Ok(Box::new(CorpusSpout::new(all, *repeat, index, parallelism)))
        }
        Builtin::SequenceSpout { count, .. } => {
            Ok(Box::new(SequenceSpout::new(*count, index, parallelism)))
        }
        other => Err(format!("`{}` is a bolt", other.name())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn corpus_executors_share_the_lines_without_overlap() {
        let lines: Vec<String> = (0..5).map(|i| format!("l{i}")).collect();
        let mut got = Vec::new();
        for k in 0..2 {
            let mut s = CorpusSpout::new(lines.clone(), 2, k, 2);
            while let SpoutNext::Emit(id, v) = s.next() {
                got.push((id, v));
            }
        }
        assert_eq!(got.len(), 10);
        let mut ids: Vec<u64> = got.iter().map(|g| g.0).collect();
        ids.sort_unstable();
        assert_eq!(ids, (0..10).collect::<Vec<_>>());
        let mut s = CorpusSpout::new(lines, 1, 0, 1);
        assert_eq!(s.replay(7), vec![Value::Str("l2".into())]);
    }
}
