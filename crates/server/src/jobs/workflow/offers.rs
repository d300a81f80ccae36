//! What a PCDDB workflow's launch node has offered and not yet had answered: each allocation
//! request it granted (its cluster, send time and underloaded table) and each of its instances
//! that no node has claimed (`reply`) or handed back (`return`) since. The server checks a
//! node's PCDDB messages against it before the launch node acts on them.
//!
//! The grant an agent verifies (`balance::Balancer::check_peer`) proves only that the launch
//! node made the request; a node balancing the workflow sees the grants that pass through it
//! and could replay one to a node it was not meant for, or name in its own `reply` instances
//! it was never offered. Here the server holds the other half: an instance is placed on a node
//! from its `reply` only while it is offered, by a request whose table listed that node (a
//! request visits only nodes of the table it left with: each hop forwards to the first entry
//! of the table it carries, which only loses entries on the way), and once — the first claim
//! consumes the offer, so a replayed grant or a repeated reply claims nothing. Memory only: a
//! restart starts a new launch-node epoch, whose agents drop what the old one offered.
//!
//! Bounded by the workflow's instances: each instance is offered by one request at most (the
//! latest), and a request is forgotten once none of its instances is still offered.
//!
//! A request that stops on its way — an agent keeps it, sends it to a node off its table (whose
//! claims are refused), or dies holding it, or the heartbeat reply carrying it is lost — would
//! leave its instances offered and placed nowhere for ever: after the offer's time to live
//! (`[workflow] offer_ttl`, 60 s by default) its instances still offered are withdrawn and
//! placed again ([`Offers::expire`]). A genuine request is
//! answered within seconds (each hop is one gRPC call, each reply rides the next heartbeat, which
//! an agent sends at once for it), and a claim that comes later is refused as any claim of an
//! instance no longer offered, so nothing runs twice either way.

use hetsched_core::NodeId;
use hetsched_core::policy::graph::pcddb::SharedTable;
use std::collections::{HashMap, HashSet, VecDeque};
use std::time::Duration;

/// One granted request with instances still offered.
struct Offer {
    cluster: u32,
    sent_at: u64,
    /// The underloaded table it was sent with (shared with the request, not copied).
    table: SharedTable,
    /// How many of its instances are still offered by it.
    left: usize,
}

/// Why a node's claim of an instance is not taken ([`Offers::claim`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Refused {
    /// No request offers it now: never offered, already claimed or handed back, or offered by
    /// a launch node before a restart.
    NotOffered,
    /// The request that offers it was not sent to the claiming node: neither its table nor its
    /// cluster names it (a replay or a diverted request). The offer stands for the nodes it
    /// was sent to.
    NotForThisNode,
    /// Offered to this node, but the node does not meet the instance's requirements (now):
    /// the offer is withdrawn, and the instance is to be placed again.
    Unmet,
}

/// What became of the instances one `reply` of a node claims ([`Offers::claim_reply`]).
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Claimed {
    /// Placed on the node, in the order claimed.
    pub placed: Vec<u32>,
    /// Not offered to the node ([`Refused::NotOffered`], [`Refused::NotForThisNode`]): the
    /// offer, if any, stands for the nodes it was sent to; the node's machine forgets them.
    pub refused: Vec<u32>,
    /// Offered to the node, which does not meet their requirements ([`Refused::Unmet`]): no
    /// longer offered, to be placed again.
    pub unmet: Vec<u32>,
    /// Offered to the node, but past what the acceptance rule lets it take now (`MT × cores −
    /// x`, [`hetsched_core::policy::graph::Thresholds::room`]): no longer offered, to be
    /// placed again, and the node's machine forgets them.
    pub over: Vec<u32>,
}

/// The outstanding offers of one PCDDB workflow.
#[derive(Default)]
pub(super) struct Offers {
    /// Each offered instance → (the serial of the request offering it, its requirements).
    instances: HashMap<u32, (u64, u64)>,
    requests: HashMap<u64, Offer>,
    /// (when granted, ns; serial) in grant order, for [`Offers::expire`]; a request forgotten
    /// since is skipped there.
    granted: VecDeque<(u64, u64)>,
    /// Per node: the instances placed on it from its own replies that it may still hold (its
    /// `x`, once those it no longer holds are pruned at its next reply), and each such
    /// instance's node. An instance is listed for one node at most: bounded by the instances.
    taken: HashMap<u32, HashSet<u32>>,
    taker: HashMap<u32, u32>,
}

impl Offers {
    /// The launch node sent granted request `serial` of `cluster` at `sent_at` with `table` at
    /// `now` (ns), offering `instances` (instance, requirements). An instance an earlier request
    /// still offered is offered by this one only.
    pub(super) fn grant(
        &mut self,
        now: u64,
        serial: u64,
        cluster: u32,
        sent_at: u64,
        table: SharedTable,
        instances: impl IntoIterator<Item = (u32, u64)>,
    ) {
        let mut left = 0;
        for (i, requires) in instances {
            match self.instances.insert(i, (serial, requires)) {
                Some((s, _)) if s == serial => continue,
                Some((s, _)) => self.forget_one(s),
                None => {}
            }
            left += 1;
        }
        if left > 0 {
            self.granted.push_back((now, serial));
            self.requests.insert(
                serial,
                Offer {
                    cluster,
                    sent_at,
                    table,
                    left,
                },
            );
        }
    }

    /// One instance of request `serial` is no longer offered by it.
    fn forget_one(&mut self, serial: u64) {
        if let Some(o) = self.requests.get_mut(&serial) {
            o.left = o.left.saturating_sub(1);
            if o.left == 0 {
                self.requests.remove(&serial);
            }
        }
    }

    /// Whether request `serial` was sent to `node` in `cluster`.
    fn sent_to(&self, serial: u64, cluster: u32, node: u32) -> bool {
        self.requests
            .get(&serial)
            .is_some_and(|o| o.cluster == cluster && o.table.iter().any(|n| n.0 == node))
    }

    /// `node`, with attribute mask `attributes`, says in a `reply` of `cluster` that it took
    /// instance `i`: taken (the offer is used up) only if a request of that cluster sent to the
    /// node offers it and the node meets its requirements.
    pub(super) fn claim(
        &mut self,
        node: u32,
        cluster: u32,
        attributes: u64,
        i: u32,
    ) -> Result<(), Refused> {
        let &(serial, requires) = self.instances.get(&i).ok_or(Refused::NotOffered)?;
        if !self.sent_to(serial, cluster, node) {
            return Err(Refused::NotForThisNode);
        }
        self.instances.remove(&i);
        self.forget_one(serial);
        if requires & attributes != requires {
            return Err(Refused::Unmet);
        }
        Ok(())
    }

    /// `node`, with attribute mask `attributes`, claims `taken` in one `reply` of `cluster`.
    /// Each is checked as [`Offers::claim`] does, and those offered to it are placed only up
    /// to `room(x)` — the acceptance rule (`MT × cores − x` while underloaded) for `x`, the
    /// instances placed on the node from its earlier replies that it `still_holds` (queued
    /// or running there) — in the order claimed. An instance it already holds and claims
    /// again (a request re-sent after a retry or a restart) takes no second place, as its
    /// machine gives it none. The excess is no longer offered: a node that claims more
    /// than the rule allows (an insider, or a faulty agent) gets no more than an honest one.
    pub(super) fn claim_reply(
        &mut self,
        node: u32,
        cluster: u32,
        attributes: u64,
        room: impl FnOnce(u32) -> u32,
        mut still_holds: impl FnMut(u32) -> bool,
        taken: impl IntoIterator<Item = u32>,
    ) -> Claimed {
        let held = match self.taken.get_mut(&node) {
            Some(set) => {
                let gone: Vec<u32> = set.iter().copied().filter(|&i| !still_holds(i)).collect();
                for i in gone {
                    set.remove(&i);
                    self.taker.remove(&i);
                }
                set.len() as u32
            }
            None => 0,
        };
        let room = room(held) as usize;
        let mut out = Claimed::default();
        let mut new = 0usize;
        for i in taken {
            match self.claim(node, cluster, attributes, i) {
                Ok(()) => {
                    let again = self.taken.get(&node).is_some_and(|s| s.contains(&i));
                    if !again && new >= room {
                        out.over.push(i);
                        continue;
                    }
                    if !again {
                        new += 1;
                        if let Some(before) = self.taker.insert(i, node)
                            && let Some(set) = self.taken.get_mut(&before)
                        {
                            set.remove(&i);
                        }
                        self.taken.entry(node).or_default().insert(i);
                    }
                    out.placed.push(i);
                }
                Err(Refused::Unmet) => out.unmet.push(i),
                Err(_) => out.refused.push(i),
            }
        }
        self.taken.retain(|_, set| !set.is_empty());
        out
    }

    /// `node` hands back a request of `cluster` sent at `sent_at` (event e) with `table` and
    /// `instances`: those of them a request with those fields, sent to the node, still offers,
    /// each with the requirements it was offered with (not those the return says). They are no
    /// longer offered (the launch node places them again); any other is left as it stands. A
    /// return whose table is not the request's less the nodes it visited (a suffix of the table
    /// it was granted with) hands back nothing: the launch node would drop the entries it
    /// lacks from its own table, and a node on the path could prune the underloaded nodes it
    /// liked (the request's instances stay offered, placed again after the offer's time to
    /// live, [`Offers::expire`]).
    pub(super) fn hand_back(
        &mut self,
        node: u32,
        cluster: u32,
        sent_at: u64,
        table: &[NodeId],
        instances: impl IntoIterator<Item = u32>,
    ) -> Vec<(u32, u64)> {
        let mut back = Vec::new();
        for i in instances {
            let Some(&(serial, requires)) = self.instances.get(&i) else {
                continue;
            };
            let fields = self
                .requests
                .get(&serial)
                .is_some_and(|o| o.sent_at == sent_at && o.table.ends_with(table));
            if fields && self.sent_to(serial, cluster, node) {
                self.instances.remove(&i);
                self.forget_one(serial);
                back.push((i, requires));
            }
        }
        back
    }

    /// The requests granted `ttl` (`[workflow] offer_ttl`) or longer before `now` (ns) offer
    /// nothing any more: their instances still offered, ascending, which the launch node is to
    /// place again.
    pub(super) fn expire(&mut self, now: u64, ttl: Duration) -> Vec<u32> {
        let ttl = u64::try_from(ttl.as_nanos()).unwrap_or(u64::MAX);
        let mut expired = std::collections::HashSet::new();
        while let Some(&(at, serial)) = self.granted.front() {
            if at.saturating_add(ttl) > now {
                break;
            }
            self.granted.pop_front();
            if self.requests.remove(&serial).is_some() {
                expired.insert(serial);
            }
        }
        if expired.is_empty() {
            return Vec::new();
        }
        let mut back = Vec::new();
        self.instances.retain(|&i, &mut (serial, _)| {
            let gone = expired.contains(&serial);
            if gone {
                back.push(i);
            }
            !gone
        });
        back.sort_unstable();
        back
    }

    /// How many instances are offered (for tests and memory bounds).
    #[cfg(test)]
    fn len(&self) -> (usize, usize) {
        (self.instances.len(), self.requests.len())
    }

    /// How many instances are listed as placed on nodes (for tests and memory bounds).
    #[cfg(test)]
    fn taken_len(&self) -> usize {
        debug_assert_eq!(
            self.taker.len(),
            self.taken.values().map(HashSet::len).sum::<usize>()
        );
        self.taker.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::DEFAULT_OFFER_TTL as OFFER_TTL;

    fn table(nodes: &[u32]) -> SharedTable {
        nodes.iter().map(|&n| NodeId(n)).collect()
    }

    #[test]
    fn an_offer_is_claimed_once_by_a_node_it_was_sent_to_that_meets_its_requirements() {
        let mut o = Offers::default();
        o.grant(0, 1, 0, 10, table(&[3, 4]), [(0, 0), (1, 0b10), (2, 0)]);
        assert_eq!(o.claim(5, 0, 0, 0), Err(Refused::NotForThisNode));
        assert_eq!(o.claim(3, 1, 0, 0), Err(Refused::NotForThisNode), "cluster");
        assert_eq!(o.claim(3, 0, 0, 9), Err(Refused::NotOffered));
        assert_eq!(o.claim(3, 0, 0, 0), Ok(()));
        assert_eq!(o.claim(4, 0, 0, 0), Err(Refused::NotOffered), "used up");
        assert_eq!(o.claim(3, 0, 0, 0), Err(Refused::NotOffered), "replayed");
        assert_eq!(o.claim(4, 0, 0b01, 1), Err(Refused::Unmet));
        assert_eq!(
            o.claim(4, 0, 0b10, 1),
            Err(Refused::NotOffered),
            "withdrawn"
        );
        assert_eq!(o.len(), (1, 1));
        o.grant(0, 2, 0, 10, table(&[3, 4]), [(2, 0b100)]);
        let rest = table(&[4]);
        assert_eq!(o.hand_back(4, 0, 11, &rest, [2]), [], "send time");
        assert_eq!(o.hand_back(6, 0, 10, &rest, [2]), [], "not sent there");
        assert_eq!(o.hand_back(4, 0, 10, &rest, [2, 0, 7, 2]), [(2, 0b100)]);
        assert_eq!(o.len(), (0, 0), "nothing left: nothing kept");
    }

    /// The acceptance rule of a node of 2 cores under LT = 1, MT = 2 per core.
    fn rule(held: u32) -> u32 {
        hetsched_core::policy::graph::Thresholds { lt: 1, mt: 2 }.room(2, held)
    }

    #[test]
    fn a_reply_places_no_more_than_mt_times_cores_less_what_the_node_holds() {
        let mut o = Offers::default();
        o.grant(0, 1, 0, 10, table(&[3, 4]), (0..8).map(|i| (i, 0)));
        // Node 3 holds nothing: it may take 4; it claims 6 (and one never offered).
        let c = o.claim_reply(3, 0, 0, rule, |_| true, [5, 0, 1, 9, 2, 3, 4]);
        assert_eq!(
            c,
            Claimed {
                placed: vec![5, 0, 1, 2],
                refused: vec![9],
                unmet: vec![],
                over: vec![3, 4],
            }
        );
        assert_eq!(
            o.len(),
            (2, 1),
            "the excess is offered no more: placed again"
        );
        // Holding 4 (≥ LT × cores = 2), it is not underloaded: it may take nothing.
        o.grant(0, 2, 0, 20, table(&[3]), [(3, 0), (4, 0)]);
        let c = o.claim_reply(3, 0, 0, rule, |_| true, [3]);
        assert_eq!((c.placed, c.over), (vec![], vec![3]));
        // Three of its four ended (no longer queued or running there): x = 1, so it may take
        // 3; the one it still holds, claimed again, takes no second place.
        o.grant(0, 3, 0, 30, table(&[3]), [(0, 0), (6, 0), (7, 0), (3, 0)]);
        o.grant(0, 4, 0, 40, table(&[3]), [(4, 0)]);
        let c = o.claim_reply(3, 0, 0, rule, |i| i == 0, [0, 6, 7, 3, 4]);
        assert_eq!((c.placed, c.over), (vec![0, 6, 7, 3], vec![4]));
        assert_eq!(o.taken_len(), 4);
        // An instance placed on another node since is counted there only.
        o.grant(0, 5, 0, 50, table(&[4]), [(6, 0)]);
        let c = o.claim_reply(4, 0, 0, rule, |_| true, [6]);
        assert_eq!(c.placed, vec![6]);
        assert_eq!(o.taken_len(), 4, "6 moved from node 3 to node 4");
        let c = o.claim_reply(3, 0, 0, rule, |_| false, []);
        assert_eq!(c, Claimed::default());
        assert_eq!(
            o.taken_len(),
            1,
            "node 3 holds nothing any more: nothing kept"
        );
        assert_eq!(o.len(), (0, 0));
    }

    #[test]
    fn a_return_whose_table_was_altered_on_the_way_hands_back_nothing() {
        let mut o = Offers::default();
        o.grant(0, 1, 0, 10, table(&[3, 4, 5]), [(0, 0), (1, 0b1)]);
        for altered in [&[5, 4][..], &[3, 5], &[4, 5, 6], &[5, 3], &[4, 3, 5]] {
            assert_eq!(
                o.hand_back(3, 0, 10, &table(altered), [0, 1]),
                [],
                "{altered:?}"
            );
        }
        assert_eq!(o.len(), (2, 1), "still offered");
        // Node 4 could not reach node 5: the request returns with the table it left node 4
        // with, the granted one less the nodes visited.
        assert_eq!(
            o.hand_back(5, 0, 10, &table(&[5]), [0, 1]),
            [(0, 0), (1, 0b1)]
        );
        assert_eq!(o.len(), (0, 0));
    }

    #[test]
    fn a_later_request_takes_over_an_instance_an_earlier_one_offered() {
        let mut o = Offers::default();
        o.grant(0, 1, 0, 10, table(&[3]), [(0, 0), (1, 0)]);
        o.grant(0, 2, 0, 20, table(&[4]), [(1, 0)]);
        assert_eq!(o.claim(3, 0, 0, 1), Err(Refused::NotForThisNode));
        assert_eq!(o.claim(4, 0, 0, 1), Ok(()));
        assert_eq!(o.claim(3, 0, 0, 0), Ok(()));
        assert_eq!(o.len(), (0, 0));
    }

    #[test]
    fn a_request_unanswered_for_the_ttl_offers_nothing_and_its_instances_are_placed_again() {
        let ttl = OFFER_TTL.as_nanos() as u64;
        let mut o = Offers::default();
        o.grant(100, 1, 0, 10, table(&[3]), [(5, 0), (4, 0), (6, 0)]);
        o.grant(200, 2, 0, 20, table(&[3]), [(7, 0)]);
        o.grant(300, 3, 0, 30, table(&[3]), [(8, 0)]);
        assert_eq!(o.claim(3, 0, 0, 4), Ok(()));
        assert_eq!(o.claim(3, 0, 0, 7), Ok(()), "request 2 answered in full");
        assert_eq!(o.expire(100 + ttl - 1, OFFER_TTL), Vec::<u32>::new());
        assert_eq!(o.expire(200 + ttl, OFFER_TTL), [5, 6]);
        assert_eq!(o.claim(3, 0, 0, 5), Err(Refused::NotOffered), "too late");
        assert_eq!(o.claim(3, 0, 0, 8), Ok(()), "request 3 stands");
        assert_eq!(o.len(), (0, 0));
        assert_eq!(
            o.expire(u64::MAX, OFFER_TTL),
            Vec::<u32>::new(),
            "nothing offered, nothing expires"
        );
    }
}
