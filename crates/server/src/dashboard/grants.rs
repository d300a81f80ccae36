//! The dashboard's sessions and login tickets: secrets handed to a browser, each bound to the
//! credential (token) that obtained it and to its owner (the caller's name), looked up by key.
//!
//! A grant is kept under the SHA-256 of its secret (the cookie or the ticket), never the secret
//! itself, and holds the SHA-256 of the token that made it: the dashboard admits it only while
//! that hash still names a caller ([`super::Dashboard`]), so a rotated token or a removed user
//! ends its sessions and tickets at their next use. Every grant of one kind lives as long, so
//! creation order is expiry order: the expired ones are dropped from the front of that order
//! at each call (each grant once), never by scanning them all. Each owner holds at most
//! `per_owner` grants (a new one evicts the owner's oldest), and all owners together at most
//! `total` (a new one is then refused: [`Full`]).

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A SHA-256: of a grant's secret (its key) or of the token that made it (its credential).
pub(super) type Hash = [u8; 32];

/// What a grant holds.
#[derive(Debug)]
struct Grant {
    /// Its place in the creation order.
    seq: u64,
    until: Instant,
    /// The SHA-256 of the token that made it.
    credential: Hash,
    owner: Arc<str>,
}

/// All owners together hold the most grants the table keeps: a new one is refused.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Full;

/// Sessions or tickets (see the module documentation).
#[derive(Debug)]
pub(super) struct Grants {
    life: Duration,
    per_owner: usize,
    total: usize,
    next_seq: u64,
    by_key: HashMap<Hash, Grant>,
    /// Keys in creation order, which is expiry order (every grant lives `life`).
    order: BTreeMap<u64, Hash>,
    /// Each owner's grants (their `seq`), oldest first; no owner holds an empty list.
    by_owner: HashMap<Arc<str>, VecDeque<u64>>,
}

impl Grants {
    /// Grants that live `life`, at most `per_owner` per owner and `total` in all.
    pub(super) fn new(life: Duration, per_owner: usize, total: usize) -> Self {
        Grants {
            life,
            per_owner: per_owner.max(1),
            total: total.max(1),
            next_seq: 0,
            by_key: HashMap::new(),
            order: BTreeMap::new(),
            by_owner: HashMap::new(),
        }
    }

    /// How many grants are live (not yet dropped) now.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.by_key.len()
    }

    /// Keeps a grant under `key` for `owner`, made with `credential` at `now`, evicting the
    /// owner's oldest while it holds `per_owner`; [`Full`] when all owners together hold
    /// `total`. Returns how many of the owner's grants it evicted.
    pub(super) fn insert(
        &mut self,
        now: Instant,
        key: Hash,
        credential: Hash,
        owner: Arc<str>,
    ) -> Result<usize, Full> {
        self.expire(now);
        let mut evicted = 0;
        while self
            .by_owner
            .get(&owner)
            .is_some_and(|seqs| seqs.len() >= self.per_owner)
        {
            let oldest = self
                .by_owner
                .get(&owner)
                .and_then(|seqs| seqs.front())
                .and_then(|seq| self.order.get(seq))
                .copied();
            match oldest {
                Some(k) => {
                    self.remove(&k);
                    evicted += 1;
                }
                // Not reached (the lists follow the order); never loop on it.
                None => break,
            }
        }
        if self.by_key.len() >= self.total {
            return Err(Full);
        }
        // A second grant under a live key would orphan the first's entries: drop it (keys are
        // 256 random bits, so this is for consistency, not for an expected case).
        self.remove(&key);
        let seq = self.next_seq;
        self.next_seq += 1;
        self.order.insert(seq, key);
        self.by_owner
            .entry(owner.clone())
            .or_default()
            .push_back(seq);
        self.by_key.insert(
            key,
            Grant {
                seq,
                until: now + self.life,
                credential,
                owner,
            },
        );
        Ok(evicted)
    }

    /// The credential of the live grant under `key` at `now`.
    pub(super) fn get(&mut self, now: Instant, key: &Hash) -> Option<Hash> {
        self.expire(now);
        self.by_key.get(key).map(|g| g.credential)
    }

    /// Takes the live grant under `key` at `now` away (a ticket is used once): its credential.
    pub(super) fn take(&mut self, now: Instant, key: &Hash) -> Option<Hash> {
        self.expire(now);
        self.remove(key)
    }

    /// Drops the grant under `key`, if any: its credential.
    pub(super) fn remove(&mut self, key: &Hash) -> Option<Hash> {
        let g = self.by_key.remove(key)?;
        self.order.remove(&g.seq);
        if let Some(seqs) = self.by_owner.get_mut(&g.owner) {
            // Oldest first: the front in the common cases (eviction, expiry).
            if let Some(at) = seqs.iter().position(|s| *s == g.seq) {
                seqs.remove(at);
            }
            if seqs.is_empty() {
                self.by_owner.remove(&g.owner);
            }
        }
        Some(g.credential)
    }

    /// Drops the grants that have expired at `now`: the front of the creation order.
    fn expire(&mut self, now: Instant) {
        while let Some((_, key)) = self.order.first_key_value() {
            let key = *key;
            match self.by_key.get(&key) {
                Some(g) if g.until > now => break,
                Some(_) => {
                    self.remove(&key);
                }
                // Not reached (the order follows the table); never loop on it.
                None => {
                    self.order.pop_first();
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(n: u8) -> Hash {
        [n; 32]
    }

    #[test]
    fn a_grant_is_found_by_its_key_with_its_credential_until_it_expires() {
        let t0 = Instant::now();
        let mut g = Grants::new(Duration::from_secs(60), 4, 100);
        assert_eq!(g.insert(t0, h(1), h(101), "alice".into()), Ok(0));
        assert_eq!(
            g.insert(t0 + Duration::from_secs(10), h(2), h(102), "bob".into()),
            Ok(0)
        );
        assert_eq!(g.get(t0 + Duration::from_secs(59), &h(1)), Some(h(101)));
        assert_eq!(g.get(t0, &h(3)), None);
        // Expired: dropped at the next call, whichever key it asks for.
        assert_eq!(g.get(t0 + Duration::from_secs(60), &h(2)), Some(h(102)));
        assert_eq!(g.len(), 1);
        assert_eq!(g.get(t0 + Duration::from_secs(60), &h(1)), None);
        assert_eq!(g.get(t0 + Duration::from_secs(70), &h(2)), None);
        assert_eq!(g.len(), 0);
        assert!(g.by_owner.is_empty() && g.order.is_empty());
    }

    #[test]
    fn a_ticket_is_taken_once() {
        let t0 = Instant::now();
        let mut g = Grants::new(Duration::from_secs(60), 4, 100);
        g.insert(t0, h(1), h(101), "alice".into()).expect("room");
        assert_eq!(g.take(t0, &h(1)), Some(h(101)));
        assert_eq!(g.take(t0, &h(1)), None);
        assert!(g.by_owner.is_empty() && g.order.is_empty());
    }

    #[test]
    fn an_owner_at_its_bound_loses_its_oldest_grant_and_no_one_elses() {
        let t0 = Instant::now();
        let mut g = Grants::new(Duration::from_secs(60), 3, 100);
        g.insert(t0, h(50), h(150), "bob".into()).expect("room");
        for k in 1..=3 {
            assert_eq!(g.insert(t0, h(k), h(100), "alice".into()), Ok(0));
        }
        assert_eq!(g.insert(t0, h(4), h(100), "alice".into()), Ok(1));
        assert_eq!(g.get(t0, &h(1)), None, "alice's oldest is evicted");
        for k in 2..=4 {
            assert_eq!(g.get(t0, &h(k)), Some(h(100)));
        }
        assert_eq!(g.get(t0, &h(50)), Some(h(150)), "bob's stays");
        // A logout makes room: no eviction then.
        g.remove(&h(3));
        assert_eq!(g.insert(t0, h(5), h(100), "alice".into()), Ok(0));
        assert_eq!(g.get(t0, &h(2)), Some(h(100)));
        assert_eq!(g.len(), 4);
    }

    #[test]
    fn all_owners_together_are_refused_past_the_total_until_one_expires() {
        let t0 = Instant::now();
        let mut g = Grants::new(Duration::from_secs(60), 1, 3);
        g.insert(t0, h(1), h(101), "a".into()).expect("room");
        g.insert(t0 + Duration::from_secs(1), h(2), h(102), "b".into())
            .expect("room");
        g.insert(t0 + Duration::from_secs(2), h(3), h(103), "c".into())
            .expect("room");
        assert_eq!(
            g.insert(t0 + Duration::from_secs(3), h(4), h(104), "d".into()),
            Err(Full)
        );
        // An owner at its own bound still makes room for itself.
        assert_eq!(
            g.insert(t0 + Duration::from_secs(3), h(5), h(101), "a".into()),
            Ok(1)
        );
        assert_eq!(g.len(), 3);
        assert_eq!(g.get(t0, &h(1)), None);
        assert_eq!(g.get(t0, &h(5)), Some(h(101)));
        // b's expired: room again.
        assert_eq!(
            g.insert(t0 + Duration::from_secs(61), h(4), h(104), "d".into()),
            Ok(0)
        );
        assert_eq!(g.get(t0 + Duration::from_secs(61), &h(2)), None);
        assert_eq!(g.get(t0 + Duration::from_secs(61), &h(3)), Some(h(103)));
    }
}
