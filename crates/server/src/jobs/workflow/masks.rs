//! What the live nodes offer each running workflow's words, kept from one heartbeat to the next.
//!
//! A workflow's machine sees each live node with a mask over the workflow's own vocabulary
//! ([`Word`]): the attributes it has, the instance sizes it can hold, the time limits it has time
//! left for, and room for inputs. Matching every live node against every running vocabulary at
//! every heartbeat cost a heartbeat on 1,000 nodes beside 100 running workflows of their own
//! vocabularies 44 ms under the state's lock (`docs/performance.md`, session 72). [`NodeMasks`]
//! keeps each live node's [`Offer`] and each vocabulary's masks over the nodes, and at a
//! heartbeat matches again only:
//! - the nodes whose offer changed: a scalar [`Key`] (its cores, capacity, end, room for
//!   inputs) is read at a heartbeat only for the nodes whose registry record changed since the
//!   last one (`Nodes::take_changed`: liveness, removal, description, end, a beat's disk report)
//!   or whose room the workflows themselves took away or gave back ([`NodeMasks::note`]), so a
//!   beat costs O(those nodes), not O(every node); every node's key and attributes (the only
//!   strings) are read again when the view's placement generation moved (every change of a
//!   node's attributes or capacity moves it). Debug builds check after each heartbeat that
//!   every node's key equals the one kept;
//! - a vocabulary's time-limit words ([`Word::Lasts`]) once the clock passes the first instant
//!   one of them turns off on some node ([`View::flips_at`]): a node's time left shrinks with
//!   the clock, nothing else changes it.
//!
//! A vocabulary is matched in full when a running workflow first asks for it, and forgotten at
//! the first heartbeat no running workflow asks for it. A workflow learns whether its members
//! changed from [`View::stamp`] (unique over all vocabularies), not by comparing them.

use super::Word;
use hetsched_core::NodeId;
use hetsched_core::Resources;
use hetsched_core::model::NodeList;
use hetsched_core::policy::graph::{AttrMask, GraphNode};
use std::time::{Duration, Instant};

/// What one live node offers: each workflow matches its own vocabulary against it
/// ([`Offer::mask`]).
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Offer {
    pub id: u32,
    pub cores: u32,
    /// None: the node is not in the registry or the view (it offers no word).
    pub facts: Option<Facts>,
}

#[derive(Clone, Debug, PartialEq)]
pub(super) struct Facts {
    /// The attributes it has (`Workflows::attributes_of`).
    pub attrs: Vec<String>,
    /// The instance sizes it can hold (a bound NNode's with its ANodes' devices).
    pub capacity: Resources,
    /// When its agent stops its tasks (None: no end).
    pub ends_at: Option<Instant>,
    /// `Workflows::room_for_inputs`.
    pub room: bool,
}

/// The scalars of a node's offer read at every heartbeat; a change of any of them reads its
/// [`Offer`] again. Its attributes are not here (see the module's docs).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct Key {
    pub cores: u32,
    /// Its capacity and whether it has accelerators (the `gpu` attribute); None: not in the
    /// registry or the view.
    pub seen: Option<(Resources, bool)>,
    pub ends_at: Option<Instant>,
    pub room: bool,
}

impl Offer {
    /// Its mask over `vocab` at `now`: the attributes it has, every instance size it can hold,
    /// every time limit it has time left for, and room for inputs.
    pub fn mask(&self, vocab: &[Word], now: Instant) -> AttrMask {
        let Some(f) = &self.facts else {
            return 0;
        };
        vocab
            .iter()
            .enumerate()
            .filter(|(_, w)| match w {
                Word::Attr(a) => f.attrs.contains(a),
                Word::Fits(r) => f.capacity.fits(r),
                Word::Lasts(limit) => f.ends_at.is_none_or(|e| {
                    e.saturating_duration_since(now) >= Duration::from_nanos(*limit)
                }),
                Word::Room => f.room,
            })
            .fold(0, |m, (k, _)| m | (1 << k))
    }

    /// The first instant after which one of `vocab`'s time-limit words this node has time left
    /// for at `now` is no longer met (None: none will be, while its end stays).
    fn flips_at(&self, vocab: &[Word], now: Instant) -> Option<Instant> {
        let ends_at = self.facts.as_ref()?.ends_at?;
        vocab
            .iter()
            .filter_map(|w| match w {
                Word::Lasts(limit) => ends_at.checked_sub(Duration::from_nanos(*limit)),
                _ => None,
            })
            .filter(|&f| f >= now)
            .min()
    }

    fn graph_node(&self, attributes: AttrMask) -> GraphNode {
        GraphNode {
            id: NodeId(self.id),
            cores: self.cores,
            attributes,
        }
    }
}

/// The nodes of `offers` as a workflow of vocabulary `vocab` sees them at `now`.
pub(super) fn members_over(offers: &[Offer], vocab: &[Word], now: Instant) -> Vec<GraphNode> {
    offers
        .iter()
        .map(|o| o.graph_node(o.mask(vocab, now)))
        .collect()
}

/// One vocabulary's masks over the live nodes.
pub(super) struct View {
    vocab: Vec<Word>,
    /// By node id (0 where no live node is).
    masks: Vec<AttrMask>,
    /// The live nodes with their masks, by id; rebuilt when `stale`.
    members: Vec<GraphNode>,
    /// Changes with every rebuild of `members`; unique over all views.
    pub stamp: u64,
    stale: bool,
    /// The first instant after which a time-limit word met on some node no longer is: then
    /// every node is matched again.
    flips_at: Option<Instant>,
    /// Asked for since the last [`NodeMasks::forget_unasked`].
    asked: bool,
}

impl View {
    /// The live nodes as this vocabulary sees them, by id.
    pub fn members(&self) -> &[GraphNode] {
        &self.members
    }

    /// Node `n`'s mask (0: not live).
    pub fn mask_of(&self, n: u32) -> AttrMask {
        self.masks.get(n as usize).copied().unwrap_or(0)
    }

    /// Matches every live node of `nodes` again.
    fn match_all(&mut self, nodes: &[Option<(Key, Offer)>], now: Instant) {
        self.masks.resize(nodes.len(), 0);
        self.flips_at = None;
        for (n, slot) in nodes.iter().enumerate() {
            let m = slot.as_ref().map_or(0, |(_, o)| {
                self.flips_at = min_instant(self.flips_at, o.flips_at(&self.vocab, now));
                o.mask(&self.vocab, now)
            });
            if self.masks[n] != m {
                self.masks[n] = m;
                self.stale = true;
            }
        }
    }
}

fn min_instant(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, None) => a,
        (None, b) => b,
    }
}

/// The live nodes' offers and each running vocabulary's masks over them (module docs).
#[derive(Default)]
pub(super) struct NodeMasks {
    /// The view's placement generation when every node's attributes were last read.
    generation: Option<u64>,
    /// By node id: its key and offer while it is live.
    nodes: Vec<Option<(Key, Offer)>>,
    views: Vec<View>,
    /// The last stamp given.
    stamps: u64,
    /// The nodes [`NodeMasks::note`]d since the last refresh.
    noted: NodeList,
    /// What a refresh took from `noted`, kept for its capacity.
    visit: Vec<NodeId>,
}

impl NodeMasks {
    /// Node `n`'s offer may have changed in a way the registry does not list (the workflows'
    /// own `no_room`): its key is read at the next [`NodeMasks::refresh`].
    pub fn note(&mut self, n: u32) {
        self.noted.note(NodeId(n));
    }

    /// Brings the offers of `count` nodes up to date at `now`: `key(n)` (None: node `n` is not
    /// live) for the nodes whose key may have changed since the last call, `offer(n)` for those
    /// whose key did; each vocabulary matches again the nodes whose offer changed. Those are
    /// the nodes `changed` lists (all those whose record changed since the last call), those
    /// [`NodeMasks::note`]d and those new since; every node when the view's placement
    /// `generation` moved (the attributes, the capacities), and then every offer is read again.
    pub fn refresh(
        &mut self,
        count: u32,
        generation: u64,
        changed: impl IntoIterator<Item = u32>,
        now: Instant,
        key: impl Fn(u32) -> Option<Key>,
        offer: impl Fn(u32) -> Offer,
    ) {
        let all = self.generation != Some(generation);
        self.generation = Some(generation);
        let known = self.nodes.len() as u32;
        self.nodes.resize(count as usize, None);
        for v in &mut self.views {
            v.masks.resize(count as usize, 0);
        }
        let mut noted = std::mem::take(&mut self.visit);
        self.noted.take(&mut noted);
        if all {
            for n in 0..count {
                self.read(n, true, now, &key, &offer);
            }
        } else {
            let listed = changed.into_iter().chain(noted.iter().map(|n| n.0));
            for n in listed.chain(known.min(count)..count) {
                if n < count {
                    self.read(n, false, now, &key, &offer);
                }
            }
        }
        self.visit = noted;
        // Every key read afresh equals the one kept: no node whose offer changed went unlisted.
        debug_assert!(
            (0..count).all(|n| self.nodes[n as usize].as_ref().map(|(k, _)| *k) == key(n)),
            "a node's key changed without being listed"
        );
    }

    /// Reads node `n`'s key, and its offer if the key changed (or `all`); each vocabulary
    /// matches it again if its offer changed.
    fn read(
        &mut self,
        n: u32,
        all: bool,
        now: Instant,
        key: impl Fn(u32) -> Option<Key>,
        offer: impl Fn(u32) -> Offer,
    ) {
        let slot = &mut self.nodes[n as usize];
        let k = key(n);
        let (was_live, old_cores) = (slot.is_some(), slot.as_ref().map(|(_, o)| o.cores));
        let changed = match (slot.as_mut(), k) {
            (None, None) => false,
            (Some(_), None) => {
                *slot = None;
                true
            }
            (None, Some(k)) => {
                *slot = Some((k, offer(n)));
                true
            }
            (Some((old, o)), Some(k)) => {
                if all || *old != k {
                    *old = k;
                    let fresh = offer(n);
                    let moved = *o != fresh;
                    *o = fresh;
                    moved
                } else {
                    false
                }
            }
        };
        if !changed {
            return;
        }
        let o = slot.as_ref().map(|(_, o)| o);
        // A node that joined or left, or whose cores changed, changes the members even at an
        // equal mask.
        let moved = was_live != o.is_some() || old_cores != o.map(|o| o.cores);
        for v in &mut self.views {
            let m = o.map_or(0, |o| {
                v.flips_at = min_instant(v.flips_at, o.flips_at(&v.vocab, now));
                o.mask(&v.vocab, now)
            });
            v.stale |= moved || v.masks[n as usize] != m;
            v.masks[n as usize] = m;
        }
    }

    /// The view of `vocab` at `now`, matched in full if no running workflow asked for it
    /// before, its time-limit words matched again if the clock passed one, its members rebuilt
    /// if anything changed. `hint`: where the caller found it last (kept up to date).
    pub fn view(&mut self, vocab: &[Word], hint: &mut usize, now: Instant) -> &View {
        let at = if self.views.get(*hint).is_some_and(|v| v.vocab == vocab) {
            *hint
        } else if let Some(at) = self.views.iter().position(|v| v.vocab == vocab) {
            at
        } else {
            let mut v = View {
                vocab: vocab.to_vec(),
                masks: Vec::new(),
                members: Vec::new(),
                stamp: 0,
                stale: true,
                flips_at: None,
                asked: false,
            };
            v.match_all(&self.nodes, now);
            self.views.push(v);
            self.views.len() - 1
        };
        *hint = at;
        let v = &mut self.views[at];
        v.asked = true;
        if v.flips_at.is_some_and(|f| now > f) {
            v.match_all(&self.nodes, now);
        }
        if v.stale {
            v.stale = false;
            v.members = self
                .nodes
                .iter()
                .flatten()
                .map(|(_, o)| o.graph_node(v.masks.get(o.id as usize).copied().unwrap_or(0)))
                .collect();
            self.stamps += 1;
            v.stamp = self.stamps;
        }
        v
    }

    /// Forgets the vocabularies not asked for since the last call (no running workflow has
    /// them).
    pub fn forget_unasked(&mut self) {
        self.views.retain(|v| v.asked);
        for v in &mut self.views {
            v.asked = false;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn offer(id: u32, attrs: &[&str], cores: u32, ends_at: Option<Instant>, room: bool) -> Offer {
        Offer {
            id,
            cores,
            facts: Some(Facts {
                attrs: attrs.iter().map(|a| a.to_string()).collect(),
                capacity: Resources::new(cores, 0, 0),
                ends_at,
                room,
            }),
        }
    }

    fn key_of(o: &Offer) -> Key {
        Key {
            cores: o.cores,
            seen: o.facts.as_ref().map(|f| (f.capacity, false)),
            ends_at: o.facts.as_ref().and_then(|f| f.ends_at),
            room: o.facts.as_ref().is_some_and(|f| f.room),
        }
    }

    /// The kept masks equal matching every live node afresh, through joins, leaves, changed
    /// offers, attributes changed under a new generation, and time-limit words the clock turns
    /// off; and the stamp moves exactly when the members do.
    #[test]
    fn kept_masks_equal_masks_matched_afresh_and_the_stamp_moves_with_them() {
        let t0 = Instant::now();
        let vocab = vec![
            Word::Attr("a".into()),
            Word::Fits(Resources::new(4, 0, 0)),
            Word::Lasts(10_000_000_000),
            Word::Room,
        ];
        let other = vec![Word::Attr("b".into())];
        // The cluster: Some(offer) while live.
        let mut cluster: Vec<Option<Offer>> = vec![
            Some(offer(0, &["a"], 4, None, true)),
            Some(offer(
                1,
                &["b"],
                2,
                Some(t0 + Duration::from_secs(15)),
                true,
            )),
            None,
            Some(offer(
                3,
                &["a", "b"],
                8,
                Some(t0 + Duration::from_secs(60)),
                false,
            )),
        ];
        let mut masks = NodeMasks::default();
        let mut generation = 1;
        let (mut hint, mut hint2) = (0, 0);
        let mut last_stamp = 0;
        let mut last_members: Vec<GraphNode> = Vec::new();
        // Each step changes the cluster or the clock, lists the nodes it changed as the
        // registry would (or notes them as the workflows do), then checks against a fresh
        // match.
        for step in 0..10u64 {
            let now = t0 + Duration::from_secs(step * 2);
            let mut changed = Vec::new();
            match step {
                2 => {
                    cluster[2] = Some(offer(2, &["a"], 4, None, true));
                    changed.push(2);
                }
                6 => {
                    cluster[0] = None;
                    changed.push(0);
                }
                4 => {
                    // Attributes change with the key unchanged: only a new generation tells.
                    if let Some(f) = cluster[3].as_mut().and_then(|o| o.facts.as_mut()) {
                        f.attrs = vec!["b".into()];
                    }
                    generation += 1;
                }
                5 => {
                    if let Some(f) = cluster[3].as_mut().and_then(|o| o.facts.as_mut()) {
                        f.room = true;
                    }
                    changed.push(3);
                }
                7 => {
                    // A key that changes with every mask unchanged: the members stay.
                    if let Some(f) = cluster[2].as_mut().and_then(|o| o.facts.as_mut()) {
                        f.capacity = Resources::new(4, 1 << 30, 0);
                    }
                    changed.push(2);
                }
                8 => {
                    // The workflows took its room away: noted, not listed by the registry.
                    if let Some(f) = cluster[3].as_mut().and_then(|o| o.facts.as_mut()) {
                        f.room = false;
                    }
                    masks.note(3);
                }
                _ => {}
            }
            masks.refresh(
                cluster.len() as u32,
                generation,
                changed,
                now,
                |n| cluster[n as usize].as_ref().map(key_of),
                |n| cluster[n as usize].clone().expect("read only while live"),
            );
            let live: Vec<Offer> = cluster.iter().flatten().cloned().collect();
            let fresh = members_over(&live, &vocab, now);
            let v = masks.view(&vocab, &mut hint, now);
            assert_eq!(v.members(), fresh.as_slice(), "step {step}");
            for g in &fresh {
                assert_eq!(v.mask_of(g.id.0), g.attributes, "step {step}");
            }
            assert_eq!(
                v.stamp != last_stamp,
                fresh != last_members,
                "step {step}: the stamp moves exactly when the members do"
            );
            last_stamp = v.stamp;
            last_members = fresh;
            let w = masks.view(&other, &mut hint2, now);
            assert_eq!(w.members(), members_over(&live, &other, now).as_slice());
            masks.forget_unasked();
        }
        // Node 1's time-limit word turned off after 5 s (15 s left, 10 s asked), with nothing
        // but the clock moving.
        assert_eq!(
            masks
                .view(&vocab, &mut hint, t0 + Duration::from_secs(14))
                .mask_of(1)
                & 0b100,
            0
        );
    }

    /// Debug builds catch a node whose key changed but that nobody listed: its offer would stay
    /// stale, and workflows would place on what it no longer offers.
    #[test]
    #[cfg(debug_assertions)]
    #[should_panic(expected = "without being listed")]
    fn a_change_nobody_listed_fails_the_debug_check() {
        let now = Instant::now();
        let mut masks = NodeMasks::default();
        let mut o = offer(0, &["a"], 1, None, true);
        masks.refresh(1, 0, [], now, |_| Some(key_of(&o)), |_| o.clone());
        if let Some(f) = o.facts.as_mut() {
            f.room = false;
        }
        masks.refresh(1, 0, [], now, |_| Some(key_of(&o)), |_| o.clone());
    }

    /// A vocabulary no running workflow asked for at a heartbeat is forgotten.
    #[test]
    fn a_vocabulary_nobody_asks_for_is_forgotten() {
        let now = Instant::now();
        let mut masks = NodeMasks::default();
        let o = offer(0, &["a"], 1, None, true);
        masks.refresh(1, 0, [], now, |_| Some(key_of(&o)), |_| o.clone());
        let (a, b) = (vec![Word::Attr("a".into())], vec![Word::Attr("b".into())]);
        let (mut ha, mut hb) = (0, 0);
        masks.view(&a, &mut ha, now);
        masks.view(&b, &mut hb, now);
        masks.forget_unasked();
        masks.view(&b, &mut hb, now);
        masks.forget_unasked();
        assert_eq!(masks.views.len(), 1);
        assert_eq!(masks.views[0].vocab, b);
    }
}
