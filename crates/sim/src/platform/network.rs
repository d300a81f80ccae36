//! The network: every node has one full-duplex link to the rack switch, with a bandwidth (the
//! cluster file's `network`, each direction) and a one-way latency (`latency`). A transfer from
//! `src` to `dst` first waits the path latency `latency(src) + latency(dst)`, then moves its bytes
//! over `src`'s outgoing and `dst`'s incoming direction.
//!
//! **Sharing.** The moving transfers share the link directions max-min fairly (progressive
//! filling), recomputed at every start and completion: the direction whose bandwidth, split
//! equally among the transfers on it, gives the smallest share is the bottleneck of those
//! transfers, which move at that share; what they take is left out of the other direction each
//! uses, and the rest is shared again the same way. So a transfer held back at one end (a slow
//! receiver) leaves the rest of its sender's bandwidth to the sender's other transfers. The switch
//! itself is not a bottleneck. (Until session 27 a transfer moved at `min(bw(src) / n_out(src),
//! bw(dst) / n_in(dst))`, which hands no unused share on; checked against SimGrid, which shares
//! max-min fairly, it ended such transfers up to 213 ms late — docs/results/accelerators.md, "The
//! network beside SimGrid".)
//!
//! **Driving it.** Like [`super::disk::SharedDisk`], the network keeps a **generation** that every
//! change bumps; the owner schedules one wake-up at [`Network::next_event`] tagged with the current
//! generation and calls [`Network::handle`] when it fires; a stale wake-up returns `false` and is
//! ignored, so nothing has to be removed from the event queue. Each change costs `O(k)` in the `k`
//! transfers in flight (rates are recomputed for all of them); the mechanisms that use it have
//! tens of transfers in flight, not thousands.
//!
//! It knows nothing about what the bytes are: the offload pipeline (`crate::accel`) ships task
//! inputs and results with it, and later mechanisms (divisible-load masters, stream traffic) can
//! ship their own tags.

use hetsched_core::time::{NANOS_PER_SEC, Time};
use std::collections::BTreeMap;

/// Bytes under which a transfer counts as done (absorbs `f64` rounding).
const SLACK_BYTES: f64 = 1e-3;

/// One node's link.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Link {
    /// Bytes per second in each direction; must be positive and finite (a zero rate would never
    /// finish a transfer — the cluster parser refuses it, hand-built clusters must too).
    pub bandwidth: f64,
    /// One-way latency to the switch.
    pub latency: Time,
}

#[derive(Clone, Debug)]
struct Transfer<T> {
    src: usize,
    dst: usize,
    /// Bytes left to move.
    left: f64,
    /// When the bytes start moving (after the path latency).
    ready_at: Time,
    /// Whether the bytes are moving (the latency has passed).
    moving: bool,
    /// Bytes per nanosecond while moving.
    rate: f64,
    tag: T,
}

/// The links of a cluster and the transfers in flight; `T` tags a transfer for its owner.
#[derive(Clone, Debug)]
pub struct Network<T: Copy> {
    links: Vec<Link>,
    transfers: BTreeMap<u64, Transfer<T>>,
    next_id: u64,
    last_update: Time,
    generation: u64,
    bytes_moved: f64,
}

impl<T: Copy> Network<T> {
    /// A network of the given links, indexed like the nodes.
    pub fn new(links: Vec<Link>) -> Self {
        Self {
            links,
            transfers: BTreeMap::new(),
            next_id: 0,
            last_update: 0,
            generation: 0,
            bytes_moved: 0.0,
        }
    }

    /// The generation a wake-up must carry to be current.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Transfers in flight (waiting out their latency or moving).
    pub fn in_flight(&self) -> usize {
        self.transfers.len()
    }

    /// Bytes delivered so far.
    pub fn bytes_moved(&self) -> f64 {
        self.bytes_moved
    }

    /// Moves every moving transfer forward to `now` at its current rate.
    fn advance(&mut self, now: Time) {
        let dt = now.saturating_sub(self.last_update) as f64;
        if dt > 0.0 {
            for t in self.transfers.values_mut().filter(|t| t.moving) {
                let moved = (t.rate * dt).min(t.left);
                t.left -= moved;
                self.bytes_moved += moved;
            }
        }
        self.last_update = now;
    }

    /// Max-min fair rates of the moving transfers by progressive filling. A link direction is a
    /// resource (sender `src`'s outgoing: `2·src`, receiver `dst`'s incoming: `2·dst + 1`).
    fn recompute_rates(&mut self) {
        // The directions in use: (resource, bandwidth left, transfers not yet fixed on it).
        let mut used: Vec<(usize, f64, u32)> = Vec::new();
        for t in self.transfers.values().filter(|t| t.moving) {
            for r in [2 * t.src, 2 * t.dst + 1] {
                match used.binary_search_by_key(&r, |u| u.0) {
                    Ok(i) => used[i].2 += 1,
                    Err(i) => used.insert(i, (r, self.links[r / 2].bandwidth, 1)),
                }
            }
        }
        let mut unfixed: Vec<u64> = self
            .transfers
            .iter()
            .filter(|(_, t)| t.moving)
            .map(|(id, _)| *id)
            .collect();
        while !unfixed.is_empty() {
            // The bottleneck: the smallest equal share of what is left (ties: the first).
            let Some((bottleneck, share)) = used
                .iter()
                .filter(|u| u.2 > 0)
                .map(|u| (u.0, u.1.max(0.0) / f64::from(u.2)))
                .min_by(|a, b| a.1.total_cmp(&b.1))
            else {
                break;
            };
            let transfers = &mut self.transfers;
            unfixed.retain(|id| {
                let Some(t) = transfers.get_mut(id) else {
                    return false;
                };
                let ends = [2 * t.src, 2 * t.dst + 1];
                if !ends.contains(&bottleneck) {
                    return true;
                }
                t.rate = share / NANOS_PER_SEC as f64;
                for r in ends {
                    if let Ok(i) = used.binary_search_by_key(&r, |u| u.0) {
                        used[i].1 -= share;
                        used[i].2 -= 1;
                    }
                }
                false
            });
        }
    }

    /// Starts sending `bytes` from node `src` to node `dst` at `now`, tagged `tag`. A transfer
    /// within one node takes no time. The caller then schedules a wake-up at
    /// [`Network::next_event`] with the new [`Network::generation`].
    pub fn start(&mut self, now: Time, src: usize, dst: usize, bytes: u64, tag: T) {
        self.advance(now);
        let latency = if src == dst {
            0
        } else {
            self.links[src].latency + self.links[dst].latency
        };
        let left = if src == dst { 0.0 } else { bytes as f64 };
        self.transfers.insert(
            self.next_id,
            Transfer {
                src,
                dst,
                left,
                ready_at: now.saturating_add(latency),
                moving: false,
                rate: 0.0,
                tag,
            },
        );
        self.next_id += 1;
        self.generation += 1;
    }

    /// When something next happens (a latency ends or a transfer completes), if anything is in
    /// flight.
    pub fn next_event(&self) -> Option<Time> {
        self.transfers
            .values()
            .map(|t| {
                if !t.moving {
                    t.ready_at
                } else if t.left <= SLACK_BYTES || t.rate <= 0.0 {
                    self.last_update
                } else {
                    // Round up, less a hair so an exact result stays on its nanosecond.
                    let dt = (t.left / t.rate - 1e-6).ceil().max(0.0);
                    self.last_update.saturating_add(dt as Time)
                }
            })
            .min()
    }

    /// Handles a wake-up of `generation` at `now`: transfers whose latency has passed start moving,
    /// finished ones are pushed onto `done` (in start order) and removed. Returns false (and does
    /// nothing) for a stale wake-up.
    pub fn handle(&mut self, now: Time, generation: u64, done: &mut Vec<T>) -> bool {
        if generation != self.generation {
            return false;
        }
        self.advance(now);
        let finished: Vec<u64> = self
            .transfers
            .iter()
            .filter(|(_, t)| t.moving && t.left <= SLACK_BYTES)
            .map(|(id, _)| *id)
            .collect();
        for id in finished {
            if let Some(t) = self.transfers.remove(&id) {
                self.bytes_moved += t.left.max(0.0);
                done.push(t.tag);
            }
        }
        // Latency over: the bytes start moving (a zero-byte transfer is done at once).
        let ready: Vec<u64> = self
            .transfers
            .iter()
            .filter(|(_, t)| !t.moving && t.ready_at <= now)
            .map(|(id, _)| *id)
            .collect();
        for id in ready {
            let empty = self
                .transfers
                .get(&id)
                .is_some_and(|t| t.left <= SLACK_BYTES);
            if empty {
                if let Some(t) = self.transfers.remove(&id) {
                    done.push(t.tag);
                }
                continue;
            }
            if let Some(t) = self.transfers.get_mut(&id) {
                t.moving = true;
            }
        }
        self.recompute_rates();
        self.generation += 1;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MB: u64 = 1_000_000;

    fn net(n: usize) -> Network<u32> {
        Network::new(vec![
            Link {
                bandwidth: 100.0 * MB as f64,
                latency: 0,
            };
            n
        ])
    }

    fn drain(n: &mut Network<u32>) -> Vec<(Time, u32)> {
        let mut out = Vec::new();
        let mut done = Vec::new();
        while let Some(t) = n.next_event() {
            assert!(n.handle(t, n.generation(), &mut done));
            out.extend(done.drain(..).map(|d| (t, d)));
        }
        out
    }

    #[test]
    fn one_transfer_takes_latency_plus_bytes_over_bandwidth() {
        let mut n = Network::new(vec![
            Link {
                bandwidth: 100.0 * MB as f64,
                latency: 1_000,
            };
            2
        ]);
        n.start(0, 0, 1, 100 * MB, 7);
        // 2 µs of path latency, then 1 s.
        assert_eq!(drain(&mut n), vec![(1_000_002_000, 7)]);
    }

    #[test]
    fn two_transfers_into_one_node_share_its_incoming_link() {
        let mut n = net(3);
        n.start(0, 0, 2, 100 * MB, 1);
        n.start(0, 1, 2, 100 * MB, 2);
        assert_eq!(drain(&mut n), vec![(2_000_000_000, 1), (2_000_000_000, 2)]);
    }

    #[test]
    fn opposite_directions_do_not_share() {
        let mut n = net(2);
        n.start(0, 0, 1, 100 * MB, 1);
        n.start(0, 1, 0, 100 * MB, 2);
        assert_eq!(drain(&mut n), vec![(1_000_000_000, 1), (1_000_000_000, 2)]);
    }

    #[test]
    fn a_late_transfer_slows_the_first_and_the_shared_receiver_decides() {
        // 0 → 2 alone for 0.5 s (50 MB), then 1 → 2 joins: each gets 50 MB/s at node 2. The first
        // has 50 MB left → 1 s more (t = 1.5 s), the second has then moved 50 MB of its 60 MB and
        // finishes its last 10 MB alone at 100 MB/s (t = 1.6 s).
        let mut n = net(3);
        n.start(0, 0, 2, 100 * MB, 1);
        let mut done = Vec::new();
        assert!(n.handle(0, n.generation(), &mut done));
        n.start(500_000_000, 1, 2, 60 * MB, 2);
        assert_eq!(drain(&mut n), vec![(1_500_000_000, 1), (1_600_000_000, 2)]);
    }

    #[test]
    fn a_transfer_within_a_node_is_instant_and_stale_wakeups_are_ignored() {
        let mut n = net(2);
        n.start(5, 1, 1, 100 * MB, 9);
        let old = n.generation();
        n.start(5, 0, 1, MB, 3);
        let mut done = Vec::new();
        assert!(!n.handle(5, old - 1, &mut done));
        assert!(done.is_empty());
        assert_eq!(drain(&mut n), vec![(5, 9), (10_000_005, 3)]);
    }

    #[test]
    fn a_share_a_slow_receiver_cannot_use_goes_to_the_senders_other_transfer() {
        // Node 0 (100 MB/s) sends 100 MB to node 1 (100 MB/s) and 100 MB to node 2 (25 MB/s).
        // Max-min: the transfer to 2 is held to 25 MB/s by its receiver, so the one to 1 gets the
        // other 75 MB/s and ends at 4/3 s; the transfer to 2 then has 200/3 MB left at 25 MB/s
        // and ends at 4 s. (An equal split of node 0's link would end the first at 2 s.)
        let mut n = Network::new(vec![
            Link {
                bandwidth: 100.0 * MB as f64,
                latency: 0,
            },
            Link {
                bandwidth: 100.0 * MB as f64,
                latency: 0,
            },
            Link {
                bandwidth: 25.0 * MB as f64,
                latency: 0,
            },
        ]);
        n.start(0, 0, 1, 100 * MB, 1);
        n.start(0, 0, 2, 100 * MB, 2);
        let ends = drain(&mut n);
        assert_eq!(ends.len(), 2);
        assert_eq!(ends[0].1, 1);
        assert!(ends[0].0.abs_diff(1_333_333_334) <= 1, "{ends:?}");
        assert_eq!(ends[1], (4_000_000_000, 2));
    }
}
