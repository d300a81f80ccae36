//! Tuples and the frames that carry them between workers.
//!
//! A [`Tuple`] names its sender and receiver executors (so the receiver can count the pair, spec
//! 04's tuple-received record), the tuple tree it belongs to (`root`, 0 = untracked) and its own
//! edge id (for the XOR acker, see [`crate::worker::Tracker`]), and the time its spout emitted the tree's
//! root (nanoseconds since the Unix epoch, for end-to-end latency).
//!
//! Between workers, tuples travel in length-delimited frames: a 4-byte big-endian length, then a
//! kind byte and the payload. A frame holds a batch of tuples (many destinations mixed), or a
//! batch of acks and fails for spouts.

use std::io::{self, Read, Write};

/// One field of a tuple.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    /// An integer.
    Int(i64),
    /// A floating-point number.
    Float(f64),
    /// Text.
    Str(String),
}

impl Value {
    /// The value as text (integers and floats in decimal).
    pub fn as_text(&self) -> std::borrow::Cow<'_, str> {
        match self {
            Value::Str(s) => std::borrow::Cow::Borrowed(s),
            Value::Int(i) => std::borrow::Cow::Owned(i.to_string()),
            Value::Float(f) => std::borrow::Cow::Owned(f.to_string()),
        }
    }

    /// The value as JSON (multi-lang).
    pub fn to_json(&self) -> serde_json::Value {
        match self {
            Value::Int(i) => serde_json::Value::from(*i),
            Value::Float(f) => serde_json::Value::from(*f),
            Value::Str(s) => serde_json::Value::from(s.as_str()),
        }
    }

    /// A JSON value as a tuple field: numbers stay numbers, anything else becomes its text.
    pub fn from_json(v: &serde_json::Value) -> Value {
        match v {
            serde_json::Value::String(s) => Value::Str(s.clone()),
            serde_json::Value::Number(n) => match n.as_i64() {
                Some(i) => Value::Int(i),
                None => Value::Float(n.as_f64().unwrap_or(f64::NAN)),
            },
            other => Value::Str(other.to_string()),
        }
    }

    /// A stable hash for `fields` grouping: the same key goes to the same receiver in every
    /// worker (FNV-1a over the text).
    pub fn key_hash(&self) -> u64 {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        let mut eat = |bytes: &[u8]| {
            for b in bytes {
                h ^= u64::from(*b);
                h = h.wrapping_mul(0x0100_0000_01b3);
            }
        };
        match self {
            Value::Str(s) => eat(s.as_bytes()),
            Value::Int(i) => eat(&i.to_le_bytes()),
            Value::Float(f) => eat(&f.to_bits().to_le_bytes()),
        }
        h
    }
}

/// A tuple in flight from one executor to another.
#[derive(Clone, Debug, PartialEq)]
pub struct Tuple {
    /// Sending executor.
    pub src: u32,
    /// Receiving executor.
    pub dst: u32,
    /// Tuple tree (spout executor in the top 16 bits + 1, random below); 0 = not tracked.
    pub root: u64,
    /// This edge's random id in the tree (XOR acker).
    pub edge: u64,
    /// When the spout emitted the tree's root, nanoseconds since the Unix epoch.
    pub emitted_ns: u64,
    /// The fields.
    pub values: Vec<Value>,
}

/// An acknowledgement for a spout: XOR `xor` into tree `root`'s value; `fail` fails the tree.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AckMsg {
    /// The tuple tree.
    pub root: u64,
    /// Edge ids to XOR in (the acked input's and its anchored children's).
    pub xor: u64,
    /// The tree failed: replay it.
    pub fail: bool,
}

impl AckMsg {
    /// The spout executor that owns tree `root`.
    pub fn spout_of(root: u64) -> Option<u32> {
        let top = (root >> 48) as u32;
        top.checked_sub(1)
    }
}

/// A frame between workers.
#[derive(Debug, PartialEq)]
pub enum Frame {
    /// The listener's first frame on a connection: its nonce ([`crate::auth`]).
    Challenge(crate::auth::Nonce),
    /// The connecting worker's answer: its index, its nonce and its proof of the worker key.
    Hello {
        /// The sending worker's index.
        worker: u32,
        /// Its nonce.
        nonce: crate::auth::Nonce,
        /// `HMAC(key, "hello" ‖ listener's nonce ‖ nonce ‖ worker)`.
        proof: crate::auth::Proof,
    },
    /// The listener's proof of the worker key, after which the connecting worker sends.
    Welcome(crate::auth::Proof),
    /// A batch of tuples.
    Tuples(Vec<Tuple>),
    /// A batch of acks and fails.
    Acks(Vec<AckMsg>),
    /// The state of an executor that moved here from the sending worker (a new placement):
    /// what its component kept (a count's table, a spout's position and tuple trees in flight),
    /// as [`crate::worker::Handoff`] encodes it.
    State {
        /// The executor.
        executor: u32,
        /// Its state.
        bytes: Vec<u8>,
    },
    /// A part of a state larger than a frame; the `State` frame after the parts ends it
    /// ([`encode_state`], [`StateParts`]).
    StatePart {
        /// The executor.
        executor: u32,
        /// The part.
        bytes: Vec<u8>,
    },
}

/// Largest frame accepted (a batch is far smaller; this bounds a corrupt length).
pub const MAX_FRAME: usize = 64 << 20;

const KIND_HELLO: u8 = 0;
const KIND_TUPLES: u8 = 1;
const KIND_ACKS: u8 = 2;
const KIND_STATE: u8 = 3;
const KIND_CHALLENGE: u8 = 4;
const KIND_WELCOME: u8 = 5;
const KIND_STATE_PART: u8 = 6;

/// Largest handshake frame accepted (a `Hello`), so a connection that has not proved the key
/// cannot make a worker allocate [`MAX_FRAME`].
pub const MAX_HANDSHAKE_FRAME: usize = 128;

fn put_u32(b: &mut Vec<u8>, v: u32) {
    b.extend_from_slice(&v.to_be_bytes());
}
fn put_u64(b: &mut Vec<u8>, v: u64) {
    b.extend_from_slice(&v.to_be_bytes());
}

impl Frame {
    /// Appends the frame, length prefix included, to `out`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        let start = out.len();
        out.extend_from_slice(&[0; 4]);
        match self {
            Frame::Challenge(n) => {
                out.push(KIND_CHALLENGE);
                out.extend_from_slice(n);
            }
            Frame::Hello {
                worker,
                nonce,
                proof,
            } => {
                out.push(KIND_HELLO);
                put_u32(out, *worker);
                out.extend_from_slice(nonce);
                out.extend_from_slice(proof);
            }
            Frame::Welcome(p) => {
                out.push(KIND_WELCOME);
                out.extend_from_slice(p);
            }
            Frame::Tuples(ts) => {
                out.push(KIND_TUPLES);
                put_u32(out, ts.len() as u32);
                for t in ts {
                    put_u32(out, t.src);
                    put_u32(out, t.dst);
                    put_u64(out, t.root);
                    put_u64(out, t.edge);
                    put_u64(out, t.emitted_ns);
                    out.extend_from_slice(&(t.values.len() as u16).to_be_bytes());
                    for v in &t.values {
                        match v {
                            Value::Int(i) => {
                                out.push(0);
                                out.extend_from_slice(&i.to_be_bytes());
                            }
                            Value::Float(f) => {
                                out.push(1);
                                put_u64(out, f.to_bits());
                            }
                            Value::Str(s) => {
                                out.push(2);
                                put_u32(out, s.len() as u32);
                                out.extend_from_slice(s.as_bytes());
                            }
                        }
                    }
                }
            }
            Frame::Acks(acks) => {
                out.push(KIND_ACKS);
                put_u32(out, acks.len() as u32);
                for a in acks {
                    put_u64(out, a.root);
                    put_u64(out, a.xor);
                    out.push(u8::from(a.fail));
                }
            }
            Frame::State { executor, bytes } | Frame::StatePart { executor, bytes } => {
                out.push(if matches!(self, Frame::State { .. }) {
                    KIND_STATE
                } else {
                    KIND_STATE_PART
                });
                put_u32(out, *executor);
                put_u32(out, bytes.len() as u32);
                out.extend_from_slice(bytes);
            }
        }
        let len = (out.len() - start - 4) as u32;
        out[start..start + 4].copy_from_slice(&len.to_be_bytes());
    }

    /// Reads one frame; `Ok(None)` at a clean end of stream.
    pub fn read(r: &mut impl Read, buf: &mut Vec<u8>) -> io::Result<Option<Frame>> {
        Self::read_at_most(r, buf, MAX_FRAME)
    }

    /// Reads one frame of at most `max` bytes; `Ok(None)` at a clean end of stream.
    pub fn read_at_most(
        r: &mut impl Read,
        buf: &mut Vec<u8>,
        max: usize,
    ) -> io::Result<Option<Frame>> {
        let mut len = [0u8; 4];
        match r.read_exact(&mut len) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
            Err(e) => return Err(e),
        }
        let len = u32::from_be_bytes(len) as usize;
        if len == 0 || len > max {
            return Err(bad(format!("frame of {len} bytes")));
        }
        buf.resize(len, 0);
        r.read_exact(buf)?;
        Frame::decode(buf).map(Some)
    }

    /// Decodes a frame's body (after the length).
    pub fn decode(body: &[u8]) -> io::Result<Frame> {
        let mut c = Cursor { b: body, at: 0 };
        match c.u8()? {
            KIND_CHALLENGE => Ok(Frame::Challenge(c.array()?)),
            KIND_HELLO => Ok(Frame::Hello {
                worker: c.u32()?,
                nonce: c.array()?,
                proof: c.array()?,
            }),
            KIND_WELCOME => Ok(Frame::Welcome(c.array()?)),
            KIND_TUPLES => {
                let n = c.u32()? as usize;
                let mut ts = Vec::with_capacity(n.min(1 << 16));
                for _ in 0..n {
                    let src = c.u32()?;
                    let dst = c.u32()?;
                    let root = c.u64()?;
                    let edge = c.u64()?;
                    let emitted_ns = c.u64()?;
                    let nv = u16::from_be_bytes([c.u8()?, c.u8()?]) as usize;
                    let mut values = Vec::with_capacity(nv);
                    for _ in 0..nv {
                        values.push(match c.u8()? {
                            0 => Value::Int(c.u64()? as i64),
                            1 => Value::Float(f64::from_bits(c.u64()?)),
                            2 => {
                                let l = c.u32()? as usize;
                                let bytes = c.take(l)?;
                                Value::Str(
                                    std::str::from_utf8(bytes)
                                        .map_err(|_| bad("a text field is not UTF-8".into()))?
                                        .to_owned(),
                                )
                            }
                            t => return Err(bad(format!("unknown value tag {t}"))),
                        });
                    }
                    ts.push(Tuple {
                        src,
                        dst,
                        root,
                        edge,
                        emitted_ns,
                        values,
                    });
                }
                Ok(Frame::Tuples(ts))
            }
            KIND_ACKS => {
                let n = c.u32()? as usize;
                let mut acks = Vec::with_capacity(n.min(1 << 16));
                for _ in 0..n {
                    acks.push(AckMsg {
                        root: c.u64()?,
                        xor: c.u64()?,
                        fail: c.u8()? != 0,
                    });
                }
                Ok(Frame::Acks(acks))
            }
            kind @ (KIND_STATE | KIND_STATE_PART) => {
                let executor = c.u32()?;
                let l = c.u32()? as usize;
                let bytes = c.take(l)?.to_vec();
                Ok(if kind == KIND_STATE {
                    Frame::State { executor, bytes }
                } else {
                    Frame::StatePart { executor, bytes }
                })
            }
            k => Err(bad(format!("unknown frame kind {k}"))),
        }
    }

    /// Writes the frame to `w` (not flushed).
    pub fn write(&self, w: &mut impl Write, scratch: &mut Vec<u8>) -> io::Result<()> {
        scratch.clear();
        self.encode(scratch);
        w.write_all(scratch)
    }
}

/// Bytes of a `Tuples` frame's body before its tuples (kind, count).
const TUPLES_HEAD: usize = 1 + 4;

impl Tuple {
    /// Bytes this tuple takes in a `Tuples` frame ([`Frame::encode`]).
    pub fn encoded_len(&self) -> usize {
        let values: usize = self
            .values
            .iter()
            .map(|v| match v {
                Value::Int(_) | Value::Float(_) => 1 + 8,
                Value::Str(s) => 1 + 4 + s.len(),
            })
            .sum();
        4 + 4 + 8 + 8 + 8 + 2 + values
    }
}

/// Appends `ts` to `out` as `Tuples` frames of at most [`MAX_FRAME`] bytes each, in order: a
/// receiver refuses a larger frame, so a batch of large tuples (each well below it) would
/// otherwise be lost whole, and replayed into the same loss. A tuple that no frame can hold, or
/// with more than 65,535 fields, is left out (it could never be delivered); the number left out.
pub fn encode_tuples(ts: Vec<Tuple>, out: &mut Vec<u8>) -> u64 {
    let mut left_out = 0;
    let mut frame: Vec<Tuple> = Vec::new();
    let mut size = TUPLES_HEAD;
    for t in ts {
        let n = t.encoded_len();
        // A frame counts a tuple's fields in 16 bits: more would be written as fewer, and the
        // receiver would read the rest as other tuples.
        if TUPLES_HEAD.saturating_add(n) > MAX_FRAME || t.values.len() > usize::from(u16::MAX) {
            left_out += 1;
            continue;
        }
        if size + n > MAX_FRAME {
            Frame::Tuples(std::mem::take(&mut frame)).encode(out);
            size = TUPLES_HEAD;
        }
        size += n;
        frame.push(t);
    }
    if !frame.is_empty() {
        Frame::Tuples(frame).encode(out);
    }
    left_out
}

/// Largest handed-over state a worker sends or takes: far above any count's table that a worker
/// could keep, and a bound on what a corrupt stream of parts makes a receiver hold.
pub const MAX_STATE: usize = 1 << 30;
/// Bytes of a state in one frame (the frame's kind, executor and length take the rest).
const STATE_PIECE: usize = MAX_FRAME - (1 + 4 + 4);

/// Appends executor `executor`'s handed-over state to `out`: one `State` frame, or when it is
/// larger than a frame (a count's table of millions of keys) `StatePart` frames then a last
/// `State` — a receiver refuses a frame over [`MAX_FRAME`], and the state would be lost. False
/// (nothing appended) for a state over [`MAX_STATE`].
pub fn encode_state(executor: u32, bytes: Vec<u8>, out: &mut Vec<u8>) -> bool {
    if bytes.len() > MAX_STATE {
        return false;
    }
    if bytes.len() <= STATE_PIECE {
        Frame::State { executor, bytes }.encode(out);
        return true;
    }
    let mut pieces = bytes.chunks(STATE_PIECE).peekable();
    while let Some(piece) = pieces.next() {
        let kind = if pieces.peek().is_some() {
            KIND_STATE_PART
        } else {
            KIND_STATE
        };
        put_u32(out, (1 + 4 + 4 + piece.len()) as u32);
        out.push(kind);
        put_u32(out, executor);
        put_u32(out, piece.len() as u32);
        out.extend_from_slice(piece);
    }
    true
}

/// What one connection has received of states sent in parts ([`encode_state`]).
#[derive(Debug, Default)]
pub struct StateParts {
    parts: std::collections::HashMap<u32, Vec<u8>>,
}

impl StateParts {
    /// Takes a `State` or `StatePart` frame: `Some((executor, state))` once a state is whole,
    /// `None` for a part (or another frame). An error for a state over [`MAX_STATE`].
    pub fn take(&mut self, f: Frame) -> io::Result<Option<(u32, Vec<u8>)>> {
        let (executor, bytes, last) = match f {
            Frame::State { executor, bytes } => (executor, bytes, true),
            Frame::StatePart { executor, bytes } => (executor, bytes, false),
            _ => return Ok(None),
        };
        let whole = match self.parts.remove(&executor) {
            Some(mut so_far) => {
                if so_far.len().saturating_add(bytes.len()) > MAX_STATE {
                    return Err(bad(format!(
                        "executor {executor}'s state is over {MAX_STATE} bytes"
                    )));
                }
                so_far.extend_from_slice(&bytes);
                so_far
            }
            None => bytes,
        };
        if last {
            Ok(Some((executor, whole)))
        } else {
            self.parts.insert(executor, whole);
            Ok(None)
        }
    }
}

fn bad(message: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, message)
}

struct Cursor<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> io::Result<&'a [u8]> {
        let end = self
            .at
            .checked_add(n)
            .filter(|&e| e <= self.b.len())
            .ok_or_else(|| bad("truncated frame".into()))?;
        let s = &self.b[self.at..end];
        self.at = end;
        Ok(s)
    }
    fn u8(&mut self) -> io::Result<u8> {
        Ok(self.take(1)?[0])
    }
    fn array<const N: usize>(&mut self) -> io::Result<[u8; N]> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N)?);
        Ok(a)
    }
    fn u32(&mut self) -> io::Result<u32> {
        let mut a = [0u8; 4];
        a.copy_from_slice(self.take(4)?);
        Ok(u32::from_be_bytes(a))
    }
    fn u64(&mut self) -> io::Result<u64> {
        let mut a = [0u8; 8];
        a.copy_from_slice(self.take(8)?);
        Ok(u64::from_be_bytes(a))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip_and_truncation_is_an_error() {
        let frame = Frame::Tuples(vec![Tuple {
            src: 1,
            dst: 7,
            root: 42,
            edge: 9,
            emitted_ns: 123,
            values: vec![Value::Str("word".into()), Value::Int(-3), Value::Float(0.5)],
        }]);
        let mut buf = Vec::new();
        frame.encode(&mut buf);
        Frame::Acks(vec![AckMsg {
            root: 1,
            xor: 2,
            fail: true,
        }])
        .encode(&mut buf);
        let mut r = &buf[..];
        let mut scratch = Vec::new();
        assert_eq!(
            Frame::read(&mut r, &mut scratch).ok().flatten(),
            Some(frame)
        );
        assert!(matches!(
            Frame::read(&mut r, &mut scratch),
            Ok(Some(Frame::Acks(a))) if a[0].fail
        ));
        assert!(matches!(Frame::read(&mut r, &mut scratch), Ok(None)));
        let mut buf = Vec::new();
        Frame::State {
            executor: 7,
            bytes: b"{}".to_vec(),
        }
        .encode(&mut buf);
        assert!(matches!(
            Frame::read(&mut &buf[..], &mut scratch),
            Ok(Some(Frame::State { executor: 7, bytes })) if bytes == b"{}"
        ));
        let mut short = &buf[..10];
        assert!(Frame::read(&mut short, &mut scratch).is_err());
    }

    #[test]
    fn handshake_frames_round_trip_and_a_large_frame_is_refused_before_the_handshake() {
        let mut buf = Vec::new();
        let frames = [
            Frame::Challenge([3; 32]),
            Frame::Hello {
                worker: 5,
                nonce: [4; 32],
                proof: [6; 32],
            },
            Frame::Welcome([7; 32]),
        ];
        for f in &frames {
            f.encode(&mut buf);
        }
        let mut r = &buf[..];
        let mut scratch = Vec::new();
        for f in frames {
            let got = Frame::read_at_most(&mut r, &mut scratch, MAX_HANDSHAKE_FRAME);
            assert_eq!(got.ok().flatten(), Some(f));
        }
        let mut buf = Vec::new();
        Frame::State {
            executor: 1,
            bytes: vec![0; 4096],
        }
        .encode(&mut buf);
        let err = Frame::read_at_most(&mut &buf[..], &mut scratch, MAX_HANDSHAKE_FRAME)
            .expect_err("too large for a handshake");
        assert!(err.to_string().contains("frame of 4105 bytes"), "{err}");
        assert!(scratch.len() < 4096, "nothing of it was read");
    }

    #[test]
    fn a_batch_of_large_tuples_goes_in_frames_a_receiver_takes() {
        // 256 tuples of 300 KiB: each far below MAX_FRAME, together above it.
        let big = |i: u32| Tuple {
            src: 0,
            dst: i,
            root: 0,
            edge: 0,
            emitted_ns: 0,
            values: vec![Value::Str("x".repeat(300 << 10)), Value::Int(i.into())],
        };
        let mut out = Vec::new();
        assert_eq!(encode_tuples((0..256).map(big).collect(), &mut out), 0);
        let mut r = &out[..];
        let mut scratch = Vec::new();
        let mut got = Vec::new();
        loop {
            match Frame::read(&mut r, &mut scratch) {
                Ok(Some(Frame::Tuples(ts))) => got.extend(ts.into_iter().map(|t| t.dst)),
                Ok(None) => break,
                other => panic!("a receiver refuses it: {other:?}"),
            }
        }
        assert_eq!(got, (0..256).collect::<Vec<_>>(), "every tuple, in order");
        // One tuple that no frame holds is left out, the others still go.
        let mut too_big = big(1);
        too_big.values = vec![Value::Str("y".repeat(MAX_FRAME))];
        let mut out = Vec::new();
        assert_eq!(encode_tuples(vec![big(0), too_big, big(2)], &mut out), 1);
        let mut r = &out[..];
        let mut got = Vec::new();
        while let Some(f) = Frame::read(&mut r, &mut scratch).expect("frames a receiver takes") {
            let Frame::Tuples(ts) = f else {
                panic!("tuples")
            };
            got.extend(ts.into_iter().map(|t| t.dst));
        }
        assert_eq!(got, vec![0, 2]);
        // Nor does one with more fields than a frame counts (a program's emit may have any).
        let mut wide = big(1);
        wide.values = vec![Value::Int(7); 70_000];
        let mut out = Vec::new();
        assert_eq!(encode_tuples(vec![big(0), wide, big(2)], &mut out), 1);
        let mut r = &out[..];
        let mut got = Vec::new();
        while let Some(f) = Frame::read(&mut r, &mut scratch).expect("frames a receiver takes") {
            let Frame::Tuples(ts) = f else {
                panic!("tuples")
            };
            got.extend(ts.into_iter().map(|t| t.dst));
        }
        assert_eq!(got, vec![0, 2]);
        // The size counted is the size encoded.
        let t = big(3);
        let mut one = Vec::new();
        let n = t.encoded_len();
        Frame::Tuples(vec![t]).encode(&mut one);
        assert_eq!(one.len(), 4 + TUPLES_HEAD + n);
    }

    #[test]
    fn a_state_larger_than_a_frame_is_handed_over_whole() {
        let state: Vec<u8> = (0..MAX_FRAME + (MAX_FRAME >> 1)).map(|i| i as u8).collect();
        let mut out = Vec::new();
        assert!(encode_state(7, state.clone(), &mut out));
        assert!(encode_state(8, b"{}".to_vec(), &mut out));
        let mut r = &out[..];
        let mut scratch = Vec::new();
        let mut parts = StateParts::default();
        let mut got = Vec::new();
        loop {
            match Frame::read(&mut r, &mut scratch) {
                Ok(Some(f)) => got.extend(parts.take(f).expect("a part in order")),
                Ok(None) => break,
                Err(e) => panic!("a receiver refuses it: {e}"),
            }
        }
        assert_eq!(got.len(), 2);
        assert!(got[0].0 == 7 && got[0].1 == state, "the large state, whole");
        assert_eq!(got[1], (8, b"{}".to_vec()));
    }

    #[test]
    fn a_tree_root_names_its_spout() {
        assert_eq!(AckMsg::spout_of((4 << 48) | 99), Some(3));
        assert_eq!(AckMsg::spout_of(5), None);
    }
}
