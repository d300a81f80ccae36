//! Stream topologies (spec 04): a directed graph of components — sources (*spouts*) and operators
//! (*bolts*) — joined by streams with a grouping. Each component runs as `parallelism`
//! **executors**; placers put executors into worker processes on nodes.
//!
//! Traffic between executors follows from the streams (spec 04, "Problem"; issue 8, item 1):
//! `rate` is the number of tuples per second that *each* executor of `from` emits on the stream,
//! and the grouping decides who receives them:
//!
//! | grouping | per (sender, receiver) pair |
//! |---|---|
//! | `shuffle`, `fields` | `rate / parallelism(to)` to every receiver (spread evenly) |
//! | `all` | `rate` to every receiver (every tuple to every receiver) |
//! | `global` | `rate` to the receiver's first executor only |
//!
//! Since a grouping spreads a stream's rate uniformly, the declared traffic is kept per stream
//! ([`Traffic::Streams`]): one entry however many executor pairs the stream joins (a shuffle
//! between two components of 50,000 executors joins 2.5 × 10⁹ pairs). Per-pair figures are
//! derived on demand; only the placers that walk every pair build them ([`Traffic`]).
//!
//! Executors are numbered densely, component by component in file order: executor `k` of
//! component `c` has id `first_executor(c) + k` and is written `<component>#<k>`.

use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::fmt;

/// An executor (one thread of a component), dense from 0 across one topology.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ExecutorId(pub u32);

impl ExecutorId {
    /// The identifier as an index into a dense table.
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

impl fmt::Display for ExecutorId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "executor{}", self.0)
    }
}

/// Whether a component produces tuples from outside (spout) or processes tuples (bolt).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ComponentKind {
    /// A source of tuples.
    Spout,
    /// An operator on tuples.
    Bolt,
}

/// How a stream's tuples are spread over the receiving component's executors.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Grouping {
    /// Random, even spread.
    Shuffle,
    /// By key; modelled as an even spread (keys assumed uniform).
    Fields,
    /// Every tuple to every receiver.
    All,
    /// Every tuple to the receiver's first executor.
    Global,
}

/// A component: a spout or bolt and how many executors run it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Component {
    /// Unique name within the topology.
    pub name: String,
    /// Spout or bolt.
    pub kind: ComponentKind,
    /// Number of executors (at least 1).
    pub parallelism: u32,
    /// CPU demand of one executor at the declared rates, in per cent of one core.
    pub cpu: f64,
    /// Memory of one executor in bytes.
    pub memory_bytes: u64,
}

/// A stream from one component to another.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Stream {
    /// Index of the sending component.
    pub from: usize,
    /// Index of the receiving component.
    pub to: usize,
    /// How tuples are spread over the receivers.
    pub grouping: Grouping,
    /// Tuples per second that each executor of `from` emits on this stream.
    pub rate: f64,
}

/// Traffic between two executors, in tuples per second.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct ExecutorPair {
    /// Sender.
    pub from: ExecutorId,
    /// Receiver.
    pub to: ExecutorId,
    /// Tuples per second from `from` to `to`.
    pub tuples_per_s: f64,
}

/// A whole topology.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Topology {
    /// The topology's name.
    pub name: String,
    /// Components in file order.
    pub components: Vec<Component>,
    /// Streams in file order.
    pub streams: Vec<Stream>,
    /// Node attributes every node running one of its workers needs (`requires`, sorted);
    /// empty: any node.
    #[serde(default)]
    pub requires: Vec<String>,
}

impl Topology {
    /// Id of executor 0 of component `c`.
    pub fn first_executor(&self, c: usize) -> ExecutorId {
        ExecutorId(
            self.components[..c]
                .iter()
                .map(|comp| comp.parallelism)
                .sum(),
        )
    }

    /// Number of executors.
    pub fn executor_count(&self) -> usize {
        self.components.iter().map(|c| c.parallelism as usize).sum()
    }

    /// The component of every executor, indexed by executor id.
    pub fn executor_components(&self) -> Vec<usize> {
        self.components
            .iter()
            .enumerate()
            .flat_map(|(c, comp)| std::iter::repeat_n(c, comp.parallelism as usize))
            .collect()
    }

    /// `(component, index within the component)` of `e`, if it exists.
    pub fn locate(&self, e: ExecutorId) -> Option<(usize, u32)> {
        let mut first = 0u32;
        for (c, comp) in self.components.iter().enumerate() {
            if e.0 < first + comp.parallelism {
                return Some((c, e.0 - first));
            }
            first += comp.parallelism;
        }
        None
    }

    /// The executor's name as users write it: `<component>#<index>`.
    pub fn executor_name(&self, e: ExecutorId) -> String {
        match self.locate(e) {
            Some((c, k)) => format!("{}#{k}", self.components[c].name),
            None => format!("?#{}", e.0),
        }
    }

    /// The executor named `<component>#<index>`, if there is one.
    pub fn executor_by_name(&self, name: &str) -> Option<ExecutorId> {
        let (comp, index) = name.rsplit_once('#')?;
        let index: u32 = index.parse().ok()?;
        let c = self.components.iter().position(|x| x.name == comp)?;
        (index < self.components[c].parallelism)
            .then(|| ExecutorId(self.first_executor(c).0 + index))
    }

    /// Index of the component named `name`.
    pub fn component_index(&self, name: &str) -> Option<usize> {
        self.components.iter().position(|c| c.name == name)
    }

    /// Per-executor CPU demand at the declared rates (per cent of one core).
    pub fn declared_loads(&self) -> Vec<f64> {
        self.executor_components()
            .into_iter()
            .map(|c| self.components[c].cpu)
            .collect()
    }

    /// Per-executor memory in bytes.
    pub fn memory(&self) -> Vec<u64> {
        self.executor_components()
            .into_iter()
            .map(|c| self.components[c].memory_bytes)
            .collect()
    }

    /// The traffic the declared rates imply, one entry per stream with a positive rate (O(streams),
    /// whatever the parallelism): per-pair rates follow from the groupings and are derived on
    /// demand ([`Traffic`]).
    pub fn declared_traffic(&self) -> Traffic {
        self.traffic_scaled(|_| 1.0)
    }

    /// The declared traffic with each stream's rate multiplied by `factor(stream index)`; streams
    /// whose rate becomes zero (or not a number) carry none and are left out.
    pub fn traffic_scaled(&self, factor: impl Fn(usize) -> f64) -> Traffic {
        Traffic::Streams(
            self.streams
                .iter()
                .enumerate()
                .map(|(s, stream)| Stream {
                    rate: stream.rate * factor(s),
                    ..stream.clone()
                })
                .filter(carries_traffic)
                .collect(),
        )
    }

    /// Per-executor throughput in tuples per second implied by the pair list `traffic`: what a
    /// bolt receives, or what a spout sends (a spout receives nothing). See
    /// [`Traffic::executor_rates`] for any traffic.
    pub fn executor_rates(&self, traffic: &[ExecutorPair]) -> Vec<f64> {
        let comps = self.executor_components();
        let mut rate = vec![0.0; comps.len()];
        for p in traffic {
            let (f, t) = (p.from.index(), p.to.index());
            if f < comps.len() && self.components[comps[f]].kind == ComponentKind::Spout {
                rate[f] += p.tuples_per_s;
            }
            if t < comps.len() {
                rate[t] += p.tuples_per_s;
            }
        }
        rate
    }

    /// Per-executor CPU demand under measured `traffic` (spec 04, configuration self-tuning, OPEN
    /// load unit): the declared demand scaled by the executor's measured throughput over its
    /// declared throughput. An executor with no declared throughput keeps its declared demand.
    pub fn loads_from_traffic(&self, traffic: &[ExecutorPair]) -> Vec<f64> {
        self.loads_from_rates(&self.executor_rates(traffic))
    }

    /// [`Topology::loads_from_traffic`] for any [`Traffic`].
    pub fn loads_under(&self, traffic: &Traffic) -> Vec<f64> {
        self.loads_from_rates(&traffic.executor_rates(self))
    }

    fn loads_from_rates(&self, measured: &[f64]) -> Vec<f64> {
        let declared = self.declared_traffic().executor_rates(self);
        self.declared_loads()
            .into_iter()
            .enumerate()
            .map(|(e, cpu)| {
                let m = measured.get(e).copied().unwrap_or(0.0);
                if declared[e] > 0.0 {
                    cpu * m / declared[e]
                } else {
                    cpu
                }
            })
            .collect()
    }

    /// Total declared CPU demand (per cent of one core).
    pub fn total_load(&self) -> f64 {
        self.declared_loads().iter().sum()
    }
}

/// Whether `stream` carries traffic: a positive rate (a zero or NaN rate sends nothing).
fn carries_traffic(stream: &Stream) -> bool {
    !stream.rate.is_nan() && stream.rate > 0.0
}

/// The executor traffic of a placement problem (spec 04, "Problem"), in one of two forms.
///
/// - [`Traffic::Streams`]: per stream, as the declared rates give it. A grouping spreads a
///   stream's rate uniformly (module docs), so one entry per stream describes all its
///   `parallelism(from) × parallelism(to)` pairs and nothing quadratic is stored: 100,000
///   executors joined by shuffles cost a few bytes, not 10⁹ pairs. Per-pair figures are derived on
///   demand: [`Traffic::adjacency`] for the traffic-aware placers (which walk every pair, and are
///   bounded by [`crate::policy::stream::MAX_TRAFFIC_PAIRS`]), [`Traffic::executor_rates`] and
///   `evaluate`'s inter-node traffic at component level, in O(executors + streams).
/// - [`Traffic::Pairs`]: an explicit list per (sender, receiver) pair, as the traffic monitor
///   measures it or a `--traffic` file gives it.
///
/// Both forms of one traffic give the placers the same adjacency, bit for bit (several streams
/// between two executors summed in stream order, as [`Traffic::pairs`] lists them), so a placer
/// decides the same whichever it is given.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Traffic {
    /// One entry per stream (`rate`: tuples/s each executor of `from` emits on it).
    Streams(Vec<Stream>),
    /// One entry per directed executor pair.
    Pairs(Vec<ExecutorPair>),
}

impl Default for Traffic {
    fn default() -> Self {
        Traffic::Pairs(Vec::new())
    }
}

impl From<Vec<ExecutorPair>> for Traffic {
    fn from(pairs: Vec<ExecutorPair>) -> Self {
        Traffic::Pairs(pairs)
    }
}

/// The pairs from component `A` to component `B` (one *block* of the pair list): every stream
/// from `A` to `B` sends each receiver the same rate, except that `global` sends only to the
/// receiver's first executor. So the block's pairs take two values at most: towards `B`'s
/// executor 0 (`to_first`) and towards every other executor of `B` (`to_rest`), each with the
/// position of the first stream that contributes to it (where [`Traffic::pairs`] lists those
/// pairs) and the sum of the contributions in stream order (as the pair list merges them).
#[derive(Clone, Copy, Debug, Default)]
struct Block {
    to_first: Option<(usize, f64)>,
    to_rest: Option<(usize, f64)>,
}

impl Block {
    /// The rate from any executor of `A` to executor `j` of `B`, if any.
    fn rate(&self, j: u32) -> Option<f64> {
        if j == 0 { self.to_first } else { self.to_rest }.map(|(_, v)| v)
    }
}

/// The blocks of `streams`, by (from, to) component.
fn blocks(
    topology: &Topology,
    streams: &[Stream],
) -> std::collections::BTreeMap<(usize, usize), Block> {
    let mut out: std::collections::BTreeMap<(usize, usize), Block> = Default::default();
    for (i, s) in streams.iter().enumerate() {
        if !carries_traffic(s) {
            continue;
        }
        let q = topology.components[s.to].parallelism;
        let per_pair = match s.grouping {
            Grouping::Shuffle | Grouping::Fields => s.rate / f64::from(q),
            Grouping::All | Grouping::Global => s.rate,
        };
        let add = |slot: &mut Option<(usize, f64)>| match slot {
            Some((_, v)) => *v += per_pair,
            None => *slot = Some((i, per_pair)),
        };
        let b = out.entry((s.from, s.to)).or_default();
        add(&mut b.to_first);
        if s.grouping != Grouping::Global && q > 1 {
            add(&mut b.to_rest);
        }
    }
    out
}

impl Traffic {
    /// Whether there is no traffic at all.
    pub fn is_empty(&self) -> bool {
        match self {
            Traffic::Streams(s) => !s.iter().any(carries_traffic),
            Traffic::Pairs(p) => p.is_empty(),
        }
    }

    /// How many directed executor pairs carry traffic (the length of [`Traffic::pairs`]),
    /// counted without listing them.
    pub fn pair_count(&self, topology: &Topology) -> u64 {
        match self {
            Traffic::Streams(streams) => blocks(topology, streams)
                .iter()
                .map(|(&(from, to), b)| {
                    let p = u64::from(topology.components[from].parallelism);
                    let q = u64::from(topology.components[to].parallelism);
                    p * (u64::from(b.to_first.is_some())
                        + if b.to_rest.is_some() { q - 1 } else { 0 })
                })
                .sum(),
            Traffic::Pairs(p) => p.len() as u64,
        }
    }

    /// The streams and how many executor pairs each one adds to the pair list (a pair two
    /// streams share counted at the first), largest first, ties in stream order; empty for a
    /// pair list. What an error about too many pairs names.
    pub fn pairs_by_stream(&self, topology: &Topology) -> Vec<(Stream, u64)> {
        let Traffic::Streams(streams) = self else {
            return Vec::new();
        };
        let blocks = blocks(topology, streams);
        let mut out: Vec<(Stream, u64)> = streams
            .iter()
            .enumerate()
            .filter(|(_, s)| carries_traffic(s))
            .map(|(i, s)| {
                let b = &blocks[&(s.from, s.to)];
                let p = u64::from(topology.components[s.from].parallelism);
                let q = u64::from(topology.components[s.to].parallelism);
                let first = b.to_first.is_some_and(|(f, _)| f == i);
                let rest = b.to_rest.is_some_and(|(f, _)| f == i);
                (
                    s.clone(),
                    p * (u64::from(first) + if rest { q - 1 } else { 0 }),
                )
            })
            .collect();
        out.sort_by_key(|x| std::cmp::Reverse(x.1));
        out
    }

    /// Every directed executor pair with traffic, in stream order then sender then receiver;
    /// several streams between the same two executors summed into one entry (at the first).
    /// Quadratic in the parallelism for a per-stream traffic: for the simulator, which moves
    /// tuples pair by pair, and for tests; placers use [`Traffic::adjacency`] or component-level
    /// sums.
    pub fn pairs(&self, topology: &Topology) -> Vec<ExecutorPair> {
        let streams = match self {
            Traffic::Pairs(p) => return p.clone(),
            Traffic::Streams(s) => s,
        };
        let mut index: HashMap<(u32, u32), usize> = HashMap::new();
        let mut pairs: Vec<ExecutorPair> = Vec::new();
        for stream in streams {
            if !carries_traffic(stream) {
                continue;
            }
            let rate = stream.rate;
            let from = &topology.components[stream.from];
            let to = &topology.components[stream.to];
            let f0 = topology.first_executor(stream.from).0;
            let t0 = topology.first_executor(stream.to).0;
            for i in 0..from.parallelism {
                let receivers: Vec<(u32, f64)> = match stream.grouping {
                    Grouping::Shuffle | Grouping::Fields => (0..to.parallelism)
                        .map(|j| (j, rate / f64::from(to.parallelism)))
                        .collect(),
                    Grouping::All => (0..to.parallelism).map(|j| (j, rate)).collect(),
                    Grouping::Global => vec![(0, rate)],
                };
                for (j, t) in receivers {
                    let key = (f0 + i, t0 + j);
                    match index.get(&key) {
                        Some(&k) => pairs[k].tuples_per_s += t,
                        None => {
                            index.insert(key, pairs.len());
                            pairs.push(ExecutorPair {
                                from: ExecutorId(key.0),
                                to: ExecutorId(key.1),
                                tuples_per_s: t,
                            });
                        }
                    }
                }
            }
        }
        pairs
    }

    /// The undirected traffic between executors: for each executor, its neighbours and the
    /// tuples/s exchanged in both directions together, neighbours in increasing id order; an
    /// executor's traffic with itself left out. As large as the pairs (what the traffic-aware
    /// placers walk), but built straight from the streams: no pair list, no index.
    pub fn adjacency(&self, topology: &Topology) -> Vec<Vec<(usize, f64)>> {
        match self {
            Traffic::Pairs(pairs) => pair_adjacency(topology.executor_count(), pairs),
            Traffic::Streams(streams) => stream_adjacency(topology, streams),
        }
    }

    /// Per-executor throughput in tuples per second: what a bolt receives, or what a spout sends
    /// (a spout receives nothing). For a per-stream traffic, O(executors + Σ parallelism over
    /// streams), and the same numbers, bit for bit, as summing [`Traffic::pairs`] in its order.
    pub fn executor_rates(&self, topology: &Topology) -> Vec<f64> {
        let streams = match self {
            Traffic::Pairs(p) => return topology.executor_rates(p),
            Traffic::Streams(s) => s,
        };
        let comps = &topology.components;
        // A stream into a spout (refused by the parser, possible in a topology built in code)
        // mixes a spout's sending and receiving in pair order: the pair list's sums then.
        if streams
            .iter()
            .any(|s| carries_traffic(s) && comps[s.to].kind == ComponentKind::Spout)
        {
            return topology.executor_rates(&self.pairs(topology));
        }
        let blocks = blocks(topology, streams);
        // What executor 0 / every other executor of a component receives, and what every
        // executor of a spout sends, summed in pair-list order: a block's pairs are listed at
        // the first stream contributing to them, one per sender (for a receiver) or per
        // receiver (for a sender).
        let mut to_first = vec![0.0; comps.len()];
        let mut to_rest = vec![0.0; comps.len()];
        let mut sends = vec![0.0; comps.len()];
        for (i, s) in streams.iter().enumerate() {
            if !carries_traffic(s) {
                continue;
            }
            let b = &blocks[&(s.from, s.to)];
            let first = b.to_first.filter(|&(f, _)| f == i).map(|(_, v)| v);
            let rest = b.to_rest.filter(|&(f, _)| f == i).map(|(_, v)| v);
            let (p, q) = (comps[s.from].parallelism, comps[s.to].parallelism);
            for _ in 0..p {
                if let Some(v) = first {
                    to_first[s.to] += v;
                }
                if let Some(v) = rest {
                    to_rest[s.to] += v;
                }
            }
            if comps[s.from].kind == ComponentKind::Spout {
                if let Some(v) = first {
                    sends[s.from] += v;
                }
                if let Some(v) = rest {
                    for _ in 1..q {
                        sends[s.from] += v;
                    }
                }
            }
        }
        comps
            .iter()
            .enumerate()
            .flat_map(|(c, comp)| {
                let (first, rest) = match comp.kind {
                    ComponentKind::Spout => (sends[c], sends[c]),
                    ComponentKind::Bolt => (to_first[c], to_rest[c]),
                };
                std::iter::once(first).chain(std::iter::repeat_n(
                    rest,
                    comp.parallelism.saturating_sub(1) as usize,
                ))
            })
            .collect()
    }
}

/// [`Traffic::adjacency`] of a pair list.
fn pair_adjacency(n: usize, pairs: &[ExecutorPair]) -> Vec<Vec<(usize, f64)>> {
    let mut adj: Vec<Vec<(usize, f64)>> = vec![Vec::new(); n];
    for p in pairs {
        let (a, b) = (p.from.index(), p.to.index());
        if a == b || p.tuples_per_s.is_nan() || p.tuples_per_s <= 0.0 {
            continue;
        }
        adj[a].push((b, p.tuples_per_s));
        adj[b].push((a, p.tuples_per_s));
    }
    for list in &mut adj {
        list.sort_by_key(|&(v, _)| v);
        list.dedup_by(|next, kept| {
            if next.0 == kept.0 {
                kept.1 += next.1;
                true
            } else {
                false
            }
        });
    }
    adj
}

/// [`Traffic::adjacency`] of per-stream traffic. Executor `a` of `A` and `b` of `B` exchange
/// the block (A, B)'s rate towards `b` plus the block (B, A)'s rate towards `a` — the two
/// directed pairs of the pair list, summed as [`pair_adjacency`] sums them (two terms: the
/// order does not matter) — so the lists equal the pair list's bit for bit. Neighbouring
/// components in index order and their executors in order give the lists sorted.
fn stream_adjacency(topology: &Topology, streams: &[Stream]) -> Vec<Vec<(usize, f64)>> {
    let comps = &topology.components;
    let blocks = blocks(topology, streams);
    let mut linked: Vec<Vec<usize>> = vec![Vec::new(); comps.len()];
    for &(a, b) in blocks.keys() {
        linked[a].push(b);
        linked[b].push(a);
    }
    for l in &mut linked {
        l.sort_unstable();
        l.dedup();
    }
    let mut first = Vec::with_capacity(comps.len());
    let mut next = 0usize;
    for c in comps {
        first.push(next);
        next += c.parallelism as usize;
    }
    let positive = |v: Option<f64>| v.filter(|&t| t > 0.0);
    let mut adj: Vec<Vec<(usize, f64)>> = Vec::with_capacity(next);
    for (ca, comp) in comps.iter().enumerate() {
        for i in 0..comp.parallelism {
            let a = first[ca] + i as usize;
            // Executor `i`'s neighbours in each linked component: every executor of it when
            // some stream joins `i` with all of them, else at most its first (`global`).
            let rates: Vec<(usize, Option<&Block>, Option<f64>)> = linked[ca]
                .iter()
                .map(|&cb| {
                    let out = blocks.get(&(ca, cb));
                    let back = positive(blocks.get(&(cb, ca)).and_then(|b| b.rate(i)));
                    (cb, out, back)
                })
                .collect();
            let degree: usize = rates
                .iter()
                .map(|&(cb, out, back)| {
                    if back.is_some() || out.is_some_and(|o| o.to_rest.is_some()) {
                        comps[cb].parallelism as usize
                    } else {
                        1
                    }
                })
                .sum();
            let mut list = Vec::with_capacity(degree);
            for &(cb, out, back) in &rates {
                for j in 0..comps[cb].parallelism {
                    let b = first[cb] + j as usize;
                    if b == a {
                        continue;
                    }
                    let t = match (positive(out.and_then(|x| x.rate(j))), back) {
                        (Some(x), Some(y)) => x + y,
                        (Some(x), None) | (None, Some(x)) => x,
                        // No stream joins `a` to `b`; past the first, none joins the rest.
                        (None, None) if j == 0 => continue,
                        (None, None) => break,
                    };
                    list.push((b, t));
                }
            }
            adj.push(list);
        }
    }
    adj
}

#[cfg(test)]
mod tests {
    use super::*;

    fn two(grouping: Grouping) -> Topology {
        Topology {
            name: "t".into(),
            requires: Vec::new(),
            components: vec![
                Component {
                    name: "src".into(),
                    kind: ComponentKind::Spout,
                    parallelism: 2,
                    cpu: 10.0,
                    memory_bytes: 0,
                },
                Component {
                    name: "sink".into(),
                    kind: ComponentKind::Bolt,
                    parallelism: 4,
                    cpu: 20.0,
                    memory_bytes: 0,
                },
            ],
            streams: vec![Stream {
                from: 0,
                to: 1,
                grouping,
                rate: 100.0,
            }],
        }
    }

    #[test]
    fn shuffle_spreads_each_senders_rate_over_the_receivers() {
        let topo = two(Grouping::Shuffle);
        let traffic = topo.declared_traffic();
        assert_eq!(traffic.pair_count(&topo), 8);
        let t = traffic.pairs(&topo);
        assert_eq!(t.len(), 8);
        assert!(t.iter().all(|p| p.tuples_per_s == 25.0));
    }

    #[test]
    fn all_sends_every_tuple_to_every_receiver_and_global_to_the_first() {
        let topo = two(Grouping::All);
        let all = topo.declared_traffic().pairs(&topo);
        assert_eq!(all.len(), 8);
        assert!(all.iter().all(|p| p.tuples_per_s == 100.0));
        let topo = two(Grouping::Global);
        let global = topo.declared_traffic();
        assert_eq!(global.pair_count(&topo), 2);
        let global = global.pairs(&topo);
        assert_eq!(global.len(), 2);
        assert!(global.iter().all(|p| p.to == ExecutorId(2)));
    }

    #[test]
    fn declared_traffic_is_one_entry_per_stream_whatever_the_parallelism() {
        let mut topo = two(Grouping::Shuffle);
        topo.components[0].parallelism = 50_000;
        topo.components[1].parallelism = 50_000;
        let traffic = topo.declared_traffic();
        assert!(matches!(&traffic, Traffic::Streams(s) if s.len() == 1));
        assert_eq!(traffic.pair_count(&topo), 2_500_000_000);
        // A zero rate carries nothing.
        assert!(topo.traffic_scaled(|_| 0.0).is_empty());
        // Rates straight from the streams: each sink receives 50,000 × 0.002 tuples/s (summed
        // pair by pair, as the pair list would: not quite 100).
        let rates = traffic.executor_rates(&topo);
        assert!((rates[0] - 100.0).abs() < 1e-6);
        assert!((rates[50_000] - 100.0).abs() < 1e-6);
    }

    #[test]
    fn per_stream_traffic_gives_the_pair_lists_adjacency_and_rates_bit_for_bit() {
        // Two streams between the same components (merged pairs), a global one beside a
        // shuffle, a bolt's self-loop and a stream back up between bolts.
        let mut topo = two(Grouping::Shuffle);
        topo.components.push(Component {
            name: "mid".into(),
            kind: ComponentKind::Bolt,
            parallelism: 3,
            cpu: 5.0,
            memory_bytes: 0,
        });
        for (from, to, grouping, rate) in [
            (0, 1, Grouping::Global, 7.0),
            (0, 1, Grouping::Fields, 0.3),
            (1, 2, Grouping::All, 1.7),
            (2, 2, Grouping::Shuffle, 2.9),
            (2, 1, Grouping::Global, 0.1),
            (0, 2, Grouping::Shuffle, 0.0),
        ] {
            topo.streams.push(Stream {
                from,
                to,
                grouping,
                rate,
            });
        }
        let traffic = topo.traffic_scaled(|s| 1.0 + s as f64 / 7.0);
        let pairs = Traffic::Pairs(traffic.pairs(&topo));
        assert_eq!(traffic.pair_count(&topo), pairs.pair_count(&topo));
        assert_eq!(traffic.adjacency(&topo), pairs.adjacency(&topo));
        assert_eq!(traffic.executor_rates(&topo), pairs.executor_rates(&topo));
        let stream_pairs: u64 = traffic.pairs_by_stream(&topo).iter().map(|x| x.1).sum();
        assert_eq!(stream_pairs, traffic.pair_count(&topo));
    }

    #[test]
    fn a_global_streams_adjacency_holds_one_neighbour_per_sender_and_reserves_no_more() {
        // A global stream from 30,000 executors into 30,000: one pair per sender. Reserving
        // each executor's list by the whole neighbouring component took 30,000 × 30,000 entries
        // of address space (a one-phase placement of 100,000 executors failed to allocate).
        let mut topo = two(Grouping::Global);
        topo.components[0].parallelism = 30_000;
        topo.components[1].parallelism = 30_000;
        let adj = topo.declared_traffic().adjacency(&topo);
        let entries: usize = adj.iter().map(Vec::len).sum();
        let reserved: usize = adj.iter().map(Vec::capacity).sum();
        assert_eq!(entries, 2 * 30_000);
        assert!(reserved <= 2 * entries, "{reserved} reserved for {entries}");
        assert_eq!(adj[30_000].len(), 30_000);
        assert_eq!(adj[30_001].len(), 0);
    }

    #[test]
    fn executors_are_named_component_hash_index() {
        let t = two(Grouping::Shuffle);
        assert_eq!(t.executor_name(ExecutorId(3)), "sink#1");
        assert_eq!(t.executor_by_name("sink#1"), Some(ExecutorId(3)));
        assert_eq!(t.executor_by_name("sink#4"), None);
    }

    #[test]
    fn measured_traffic_scales_the_declared_demand() {
        let t = two(Grouping::Shuffle);
        let doubled = t.traffic_scaled(|_| 2.0);
        let loads = t.loads_from_traffic(&doubled.pairs(&t));
        assert_eq!(loads, vec![20.0, 20.0, 40.0, 40.0, 40.0, 40.0]);
        assert_eq!(t.loads_under(&doubled), loads);
    }
}
