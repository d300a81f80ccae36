//! Properties of spec 01's binding over random membership changes, in all three modes:
//! - it gives the same stacks as a naive, line-by-line transcription of the spec's rules (so the
//!   tie rules are followed exactly);
//! - no binding crosses racks; every NNode of a rack with an ANode is bound, none of a rack without;
//! - with additions only (`plain`), stack sizes in a rack differ by at most one;
//! - an event moves only the NNodes the rules move, and the events replayed on the old map give the
//!   new one.

#![allow(clippy::unwrap_used)] // a failing test should panic with the error

use hetsched_core::policy::binding::{Binding, BindingEvent, BindingMode, Unit};
use proptest::prelude::*;
use std::collections::BTreeMap;
use std::sync::Arc;

#[derive(Clone, Debug)]
enum Op {
    NNode(u8, u8),
    ANode(u8, u8, u8),
    Remove(u8),
}

fn op(additions_only: bool) -> impl Strategy<Value = Op> {
    let add = prop_oneof![
        (0u8..24, 0u8..3).prop_map(|(n, r)| Op::NNode(n, r)),
        (0u8..24, 0u8..3, 1u8..4).prop_map(|(n, r, w)| Op::ANode(n, r, w)),
    ];
    if additions_only {
        add.boxed()
    } else {
        prop_oneof![3 => add, 1 => (0u8..24).prop_map(Op::Remove)].boxed()
    }
}

fn mode() -> impl Strategy<Value = BindingMode> {
    prop_oneof![
        Just(BindingMode::Plain),
        Just(BindingMode::Weighted),
        (1u32..4).prop_map(|slots| BindingMode::Container { slots }),
    ]
}

/// An ANode in the naive model: (name, own users, capacity, units bottom to top).
type NaiveStack = (String, u64, u64, Vec<Unit>);

/// The spec's rules written as plainly as possible: linear scans, no clever structures.
#[derive(Default)]
struct Naive {
    /// rack → ANodes.
    racks: BTreeMap<String, Vec<NaiveStack>>,
    waiting: BTreeMap<String, Vec<Unit>>,
}

impl Naive {
    fn less(a: (u64, u64, &str), b: (u64, u64, &str)) -> bool {
        let (x, y) = (
            u128::from(a.0) * u128::from(b.1),
            u128::from(b.0) * u128::from(a.1),
        );
        x < y || (x == y && a.2 < b.2)
    }

    fn push(&mut self, rack: &str, unit: Unit) {
        let stacks = self.racks.entry(rack.into()).or_default();
        let mut best: Option<usize> = None;
        for (i, s) in stacks.iter().enumerate() {
            let key = (s.1 + s.3.len() as u64 + 1, s.2, s.0.as_str());
            if best.is_none_or(|b| {
                let t = &stacks[b];
                Self::less(key, (t.1 + t.3.len() as u64 + 1, t.2, t.0.as_str()))
            }) {
                best = Some(i);
            }
        }
        match best {
            Some(i) => stacks[i].3.push(unit),
            None => self.waiting.entry(rack.into()).or_default().push(unit),
        }
    }

    fn add_anode(&mut self, name: &str, rack: &str, own: u64, cap: u64) {
        let stacks = self.racks.entry(rack.into()).or_default();
        let mut new: Vec<Unit> = Vec::new();
        loop {
            // The largest stack that has a unit: the last in (load, name) order.
            let mut largest: Option<usize> = None;
            for (i, s) in stacks.iter().enumerate() {
                if s.3.is_empty() {
                    continue;
                }
                let key = (s.1 + s.3.len() as u64, s.2, s.0.as_str());
                if largest.is_none_or(|b| {
                    let t = &stacks[b];
                    Self::less((t.1 + t.3.len() as u64, t.2, t.0.as_str()), key)
                }) {
                    largest = Some(i);
                }
            }
            let Some(l) = largest else { break };
            let users_l = stacks[l].1 + stacks[l].3.len() as u64;
            let users_new = own + new.len() as u64;
            if u128::from(users_l) * u128::from(cap)
                <= u128::from(users_new + 1) * u128::from(stacks[l].2)
            {
                break;
            }
            let unit = stacks[l].3.pop().expect("non-empty");
            new.push(unit);
        }
        stacks.push((name.into(), own, cap, new));
        for unit in self.waiting.remove(rack).unwrap_or_default() {
            self.push(rack, unit);
        }
    }

    fn remove_unit(&mut self, unit: &Unit) {
        for stacks in self.racks.values_mut() {
            for s in stacks.iter_mut() {
                s.3.retain(|u| u != unit);
            }
        }
        for w in self.waiting.values_mut() {
            w.retain(|u| u != unit);
        }
    }

    fn remove_anode(&mut self, rack: &str, name: &str) {
        let stacks = self.racks.entry(rack.into()).or_default();
        let Some(i) = stacks.iter().position(|s| s.0 == name) else {
            return;
        };
        let (_, _, _, units) = stacks.remove(i);
        for u in units {
            self.push(rack, u);
        }
    }

    fn map(&self) -> BTreeMap<Unit, Option<String>> {
        let mut m = BTreeMap::new();
        for stacks in self.racks.values() {
            for s in stacks {
                for u in &s.3 {
                    m.insert(u.clone(), Some(s.0.clone()));
                }
            }
        }
        for w in self.waiting.values() {
            for u in w {
                m.insert(u.clone(), None);
            }
        }
        m
    }
}

fn real_map(b: &Binding) -> BTreeMap<Unit, Option<String>> {
    b.map()
        .into_iter()
        .map(|(u, a)| (u, a.map(|a| a.to_string())))
        .collect()
}

fn units(mode: BindingMode, name: &str) -> Vec<Unit> {
    match mode {
        BindingMode::Container { slots } => (0..slots)
            .map(|k| Unit {
                nnode: Arc::from(name),
                container: Some(k),
            })
            .collect(),
        _ => vec![Unit {
            nnode: Arc::from(name),
            container: None,
        }],
    }
}

fn run(mode: BindingMode, ops: &[Op], additions_only: bool) {
    let mut b = Binding::new(mode);
    let mut naive = Naive::default();
    let (own, weighted) = match mode {
        BindingMode::Plain => (0, false),
        BindingMode::Weighted => (1, true),
        BindingMode::Container { slots } => (u64::from(slots), true),
    };
    for op in ops {
        let before = real_map(&b);
        let (events, touched): (Vec<BindingEvent>, Vec<Unit>) = match op {
            Op::NNode(n, r) => {
                let name = format!("n{n}");
                let Ok(ev) = b.add_nnode(&name, &format!("r{r}")) else {
                    assert!(b.contains(&name));
                    continue;
                };
                for u in units(mode, &name) {
                    naive.push(&format!("r{r}"), u);
                }
                // Only the new NNode's own units are bound.
                for e in &ev {
                    assert!(
                        matches!(e, BindingEvent::Bound { nnode, .. } if *nnode.nnode == *name)
                    );
                }
                (ev, units(mode, &name))
            }
            Op::ANode(n, r, w) => {
                let name = format!("a{n}");
                let Ok(ev) = b.add_anode(&name, &format!("r{r}"), f64::from(*w)) else {
                    assert!(b.contains(&name));
                    continue;
                };
                let cap = if weighted { u64::from(*w) * 1000 } else { 1 };
                naive.add_anode(&name, &format!("r{r}"), own, cap);
                // Every move goes to the new ANode, from the same rack.
                for e in &ev {
                    let BindingEvent::Bound { nnode, anode } = e else {
                        panic!("adding an ANode unbinds nothing: {e}");
                    };
                    assert_eq!(**anode, *name);
                    assert_eq!(
                        b.rack_of(&nnode.nnode).map(|r| r.to_string()),
                        Some(format!("r{r}"))
                    );
                }
                let moved = ev
                    .iter()
                    .map(|e| match e {
                        BindingEvent::Bound { nnode, .. } | BindingEvent::Unbound { nnode } => {
                            nnode.clone()
                        }
                    })
                    .collect();
                (ev, moved)
            }
            Op::Remove(n) => {
                let (name, is_anode) = if n % 2 == 0 {
                    (format!("n{}", n / 2), false)
                } else {
                    (format!("a{}", n / 2), true)
                };
                let rack = b.rack_of(&name).map(|r| r.to_string());
                let Ok(ev) = b.remove(&name) else {
                    assert!(!b.contains(&name));
                    continue;
                };
                let rack = rack.expect("a known node has a rack");
                let moved: Vec<Unit> = if is_anode {
                    // Only the NNodes that were on the removed ANode move.
                    before
                        .iter()
                        .filter(|(_, a)| a.as_deref() == Some(name.as_str()))
                        .map(|(u, _)| u.clone())
                        .collect()
                } else {
                    units(mode, &name)
                };
                if is_anode {
                    naive.remove_anode(&rack, &name);
                } else {
                    for u in units(mode, &name) {
                        naive.remove_unit(&u);
                    }
                }
                (ev, moved)
            }
        };
        let after = real_map(&b);
        // Same map as the naive transcription of the rules.
        assert_eq!(after, naive.map(), "after {op:?}");
        // Events replayed on the old map give the new one, and touch only what the rule moves.
        let mut shadow = before.clone();
        for e in &events {
            match e {
                BindingEvent::Bound { nnode, anode } => {
                    assert!(touched.contains(nnode), "{e} is not moved by {op:?}");
                    shadow.insert(nnode.clone(), Some(anode.to_string()));
                }
                BindingEvent::Unbound { nnode } => {
                    assert!(touched.contains(nnode), "{e} is not moved by {op:?}");
                    if matches!(op, Op::Remove(n) if n % 2 == 0) {
                        shadow.remove(nnode);
                    } else {
                        shadow.insert(nnode.clone(), None);
                    }
                }
            }
        }
        for (u, a) in &after {
            if shadow.get(u) != Some(a) {
                // A unit that waited keeps waiting silently; anything else must match.
                assert!(
                    a.is_none() && !shadow.contains_key(u),
                    "{u}: {a:?} vs {:?}",
                    shadow.get(u)
                );
            }
        }
        for (u, a) in &shadow {
            if a.is_some() {
                assert_eq!(after.get(u), Some(a), "{u}");
            }
        }
        check_invariants(&b, additions_only && mode == BindingMode::Plain);
    }
}

fn check_invariants(b: &Binding, balanced: bool) {
    for rack in b.racks() {
        let stacks = b.stacks(rack);
        for (anode, units) in &stacks {
            assert_eq!(b.rack_of(anode), Some(rack));
            for u in units {
                // Never across racks.
                assert_eq!(b.rack_of(&u.nnode), Some(rack), "{u} bound across racks");
                assert_eq!(b.anode_of(u), Some(anode));
            }
        }
        let waiting = b.waiting(rack);
        // Waiting only where the rack has no ANode.
        assert!(
            stacks.is_empty() || waiting.is_empty(),
            "{rack}: waiting beside ANodes"
        );
        if balanced && !stacks.is_empty() {
            let sizes: Vec<usize> = stacks.iter().map(|s| s.1.len()).collect();
            let (min, max) = (sizes.iter().min(), sizes.iter().max());
            assert!(
                max.zip(min).is_some_and(|(a, b)| a - b <= 1),
                "{rack}: sizes {sizes:?}"
            );
        }
    }
    for (u, a) in b.map() {
        let rack = b.rack_of(&u.nnode).expect("known");
        assert_eq!(a.is_some(), !b.stacks(rack).is_empty(), "{u}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn any_changes_follow_the_rules(mode in mode(), ops in prop::collection::vec(op(false), 1..80)) {
        run(mode, &ops, false);
    }

    #[test]
    fn additions_only_keep_stacks_within_one(mode in mode(), ops in prop::collection::vec(op(true), 1..60)) {
        run(mode, &ops, true);
    }
}
