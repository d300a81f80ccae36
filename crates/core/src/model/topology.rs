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

    /// The traffic the declared rates imply, one entry per (sender, receiver) executor pair with
    /// positive traffic, in stream order then sender then receiver. Several streams between the
    /// same two executors are summed into one entry.
    pub fn declared_traffic(&self) -> Vec<ExecutorPair> {
        self.traffic_scaled(|_| 1.0)
    }

    /// The declared traffic with each stream's rate multiplied by `factor(stream index)`.
    pub fn traffic_scaled(&self, factor: impl Fn(usize) -> f64) -> Vec<ExecutorPair> {
        let mut index: HashMap<(u32, u32), usize> = HashMap::new();
        let mut pairs: Vec<ExecutorPair> = Vec::new();
        for (s, stream) in self.streams.iter().enumerate() {
            let rate = stream.rate * factor(s);
            if rate.is_nan() || rate <= 0.0 {
                continue;
            }
            let from = &self.components[stream.from];
            let to = &self.components[stream.to];
            let f0 = self.first_executor(stream.from).0;
            let t0 = self.first_executor(stream.to).0;
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

    /// Per-executor throughput in tuples per second implied by `traffic`: what a bolt receives,
    /// or what a spout sends (a spout receives nothing).
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
        let declared = self.executor_rates(&self.declared_traffic());
        let measured = self.executor_rates(traffic);
        self.declared_loads()
            .into_iter()
            .enumerate()
            .map(|(e, cpu)| {
                if declared[e] > 0.0 {
                    cpu * measured[e] / declared[e]
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
        let t = two(Grouping::Shuffle).declared_traffic();
        assert_eq!(t.len(), 8);
        assert!(t.iter().all(|p| p.tuples_per_s == 25.0));
    }

    #[test]
    fn all_sends_every_tuple_to_every_receiver_and_global_to_the_first() {
        let all = two(Grouping::All).declared_traffic();
        assert_eq!(all.len(), 8);
        assert!(all.iter().all(|p| p.tuples_per_s == 100.0));
        let global = two(Grouping::Global).declared_traffic();
        assert_eq!(global.len(), 2);
        assert!(global.iter().all(|p| p.to == ExecutorId(2)));
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
        let loads = t.loads_from_traffic(&doubled);
        assert_eq!(loads, vec![20.0, 20.0, 40.0, 40.0, 40.0, 40.0]);
    }
}
