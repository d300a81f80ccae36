//! Spec 01's examples, replayed: each test builds the situation the spec describes and checks the
//! stacks it names.

#![allow(clippy::unwrap_used)] // a failing test should panic with the error

use super::*;

/// `a1:[n1,n3] a2:[n2]` — every stack of `rack`, by ANode name, units bottom to top.
fn stacks(b: &Binding, rack: &str) -> String {
    let mut s = b.stacks(rack);
    s.sort_by(|x, y| x.0.cmp(&y.0));
    s.iter()
        .map(|(a, units)| {
            let units: Vec<String> = units.iter().map(ToString::to_string).collect();
            format!("{a}:[{}]", units.join(","))
        })
        .collect::<Vec<_>>()
        .join(" ")
}

fn nnodes(b: &mut Binding, rack: &str, names: &[&str]) {
    for n in names {
        b.add_nnode(n, rack).expect("a new NNode");
    }
}

fn bound(unit: &str, anode: &str) -> BindingEvent {
    BindingEvent::Bound {
        nnode: Unit {
            nnode: Arc::from(unit),
            container: None,
        },
        anode: Arc::from(anode),
    }
}

#[test]
fn nnodes_go_to_the_smallest_stack_ties_by_anode_name() {
    let mut b = Binding::new(BindingMode::Plain);
    b.add_anode("a2", "r", 1.0).unwrap();
    b.add_anode("a1", "r", 1.0).unwrap();
    nnodes(&mut b, "r", &["n1", "n2", "n3"]);
    assert_eq!(stacks(&b, "r"), "a1:[n1,n3] a2:[n2]");
}

#[test]
fn figure_3_a_new_anode_steals_from_the_largest_stacks_3_3_becomes_2_2_2() {
    let mut b = Binding::new(BindingMode::Plain);
    b.add_anode("a1", "r", 1.0).unwrap();
    b.add_anode("a2", "r", 1.0).unwrap();
    nnodes(&mut b, "r", &["n1", "n2", "n3", "n4", "n5", "n6"]);
    assert_eq!(stacks(&b, "r"), "a1:[n1,n3,n5] a2:[n2,n4,n6]");
    let events = b.add_anode("a3", "r", 1.0).unwrap();
    // The largest of two size-3 stacks is the later name, a2; then a1 (3 ≥ 1 + 2).
    assert_eq!(events, vec![bound("n6", "a3"), bound("n5", "a3")]);
    assert_eq!(stacks(&b, "r"), "a1:[n1,n3] a2:[n2,n4] a3:[n6,n5]");
}

#[test]
fn stacks_2_1_and_a_new_anode_steal_once_to_1_1_1() {
    let mut b = Binding::new(BindingMode::Plain);
    b.add_anode("a1", "r", 1.0).unwrap();
    b.add_anode("a2", "r", 1.0).unwrap();
    nnodes(&mut b, "r", &["n1", "n2", "n3"]);
    assert_eq!(stacks(&b, "r"), "a1:[n1,n3] a2:[n2]");
    assert_eq!(
        b.add_anode("a3", "r", 1.0).unwrap(),
        vec![bound("n3", "a3")]
    );
    assert_eq!(stacks(&b, "r"), "a1:[n1] a2:[n2] a3:[n3]");
}

#[test]
fn one_anode_with_one_nnode_and_a_new_anode_moves_nothing() {
    // The paper's literal balance test would never stop here.
    let mut b = Binding::new(BindingMode::Plain);
    b.add_anode("a1", "r", 1.0).unwrap();
    nnodes(&mut b, "r", &["n1"]);
    assert_eq!(b.add_anode("a2", "r", 1.0).unwrap(), vec![]);
    assert_eq!(stacks(&b, "r"), "a1:[n1] a2:[]");
}

#[test]
fn cluster_4_3_gives_one_anode_two_users() {
    // Spec 01 "Known weakness": 4 nodes, 3 GPUs.
    let mut b = Binding::new(BindingMode::Plain);
    for a in ["a1", "a2", "a3"] {
        b.add_anode(a, "r", 1.0).unwrap();
    }
    nnodes(&mut b, "r", &["n1"]);
    assert_eq!(stacks(&b, "r"), "a1:[n1] a2:[] a3:[]");
}

#[test]
fn nnodes_of_a_rack_without_anodes_wait_and_bind_in_join_order() {
    let mut b = Binding::new(BindingMode::Plain);
    nnodes(&mut b, "r", &["n2", "n1", "n3"]);
    assert!(b.stacks("r").is_empty());
    let waiting: Vec<String> = b.waiting("r").iter().map(ToString::to_string).collect();
    assert_eq!(waiting, ["n2", "n1", "n3"]);
    let events = b.add_anode("a1", "r", 1.0).unwrap();
    assert_eq!(
        events,
        vec![bound("n2", "a1"), bound("n1", "a1"), bound("n3", "a1")]
    );
    assert_eq!(stacks(&b, "r"), "a1:[n2,n1,n3]");
}

#[test]
fn removing_an_nnode_does_not_rebalance() {
    let mut b = Binding::new(BindingMode::Plain);
    b.add_anode("a1", "r", 1.0).unwrap();
    b.add_anode("a2", "r", 1.0).unwrap();
    nnodes(&mut b, "r", &["n1", "n2", "n3", "n4"]);
    b.remove("n2").unwrap();
    b.remove("n4").unwrap();
    assert_eq!(stacks(&b, "r"), "a1:[n1,n3] a2:[]");
    // A later addition evens them out.
    nnodes(&mut b, "r", &["n5"]);
    assert_eq!(stacks(&b, "r"), "a1:[n1,n3] a2:[n5]");
}

#[test]
fn removing_an_anode_re_adds_its_nnodes_in_push_order() {
    let mut b = Binding::new(BindingMode::Plain);
    for a in ["a1", "a2", "a3"] {
        b.add_anode(a, "r", 1.0).unwrap();
    }
    nnodes(&mut b, "r", &["n1", "n2", "n3", "n4", "n5"]);
    assert_eq!(stacks(&b, "r"), "a1:[n1,n4] a2:[n2,n5] a3:[n3]");
    let events = b.remove("a1").unwrap();
    // n1 to the smaller a3, then n4 to the tie a2/a3 → a2 by name.
    assert_eq!(events, vec![bound("n1", "a3"), bound("n4", "a2")]);
    assert_eq!(stacks(&b, "r"), "a2:[n2,n5,n4] a3:[n3,n1]");
}

#[test]
fn when_the_last_anode_leaves_its_nnodes_wait_in_push_order() {
    let mut b = Binding::new(BindingMode::Plain);
    b.add_anode("a1", "r", 1.0).unwrap();
    nnodes(&mut b, "r", &["n3", "n1", "n2"]);
    let events = b.remove("a1").unwrap();
    assert_eq!(events.len(), 3);
    assert!(
        events
            .iter()
            .all(|e| matches!(e, BindingEvent::Unbound { .. }))
    );
    let waiting: Vec<String> = b.waiting("r").iter().map(ToString::to_string).collect();
    assert_eq!(waiting, ["n3", "n1", "n2"]);
    b.add_anode("a2", "r", 1.0).unwrap();
    assert_eq!(stacks(&b, "r"), "a2:[n3,n1,n2]");
}

#[test]
fn racks_are_isolated() {
    let mut b = Binding::new(BindingMode::Plain);
    b.add_anode("a1", "r1", 1.0).unwrap();
    nnodes(&mut b, "r2", &["n1"]);
    nnodes(&mut b, "r1", &["n2"]);
    assert_eq!(stacks(&b, "r1"), "a1:[n2]");
    assert_eq!(b.waiting("r2").len(), 1);
    let unit = Unit {
        nnode: Arc::from("n1"),
        container: None,
    };
    assert_eq!(b.anode_of(&unit), None);
}

#[test]
fn weighted_gives_a_twice_faster_gpu_twice_the_users() {
    let mut b = Binding::new(BindingMode::Weighted);
    b.add_anode("fast", "r", 2.0).unwrap();
    b.add_anode("slow", "r", 1.0).unwrap();
    nnodes(&mut b, "r", &["n1", "n2", "n3", "n4"]);
    assert_eq!(stacks(&b, "r"), "fast:[n1,n2,n3] slow:[n4]");
    assert_eq!(b.users("fast"), Some(4));
    assert_eq!(b.users("slow"), Some(2));
}

#[test]
fn weighted_a_fast_newcomer_steals_more() {
    let mut b = Binding::new(BindingMode::Weighted);
    b.add_anode("a1", "r", 1.0).unwrap();
    nnodes(&mut b, "r", &["n1", "n2", "n3", "n4", "n5"]);
    // a1 has 6 users on weight 1. A weight-2 ANode takes NNodes while a1's load exceeds its own
    // after the steal: 6/1 > 2/2, 5/1 > 3/2, 4/1 > 4/2, 3/1 > 5/2; 2/1 > 6/2 fails.
    let events = b.add_anode("a2", "r", 2.0).unwrap();
    assert_eq!(events.len(), 4);
    assert_eq!(stacks(&b, "r"), "a1:[n1] a2:[n5,n4,n3,n2]");
}

#[test]
fn weighted_with_equal_weights_is_plain() {
    let mut p = Binding::new(BindingMode::Plain);
    let mut w = Binding::new(BindingMode::Weighted);
    for b in [&mut p, &mut w] {
        b.add_anode("a1", "r", 1.0).unwrap();
        nnodes(b, "r", &["n1", "n2", "n3", "n4", "n5", "n6", "n7"]);
        b.add_anode("a2", "r", 1.0).unwrap();
        b.add_anode("a3", "r", 1.0).unwrap();
        b.remove("n2").unwrap();
        nnodes(b, "r", &["n8"]);
    }
    assert_eq!(stacks(&p, "r"), stacks(&w, "r"));
}

#[test]
fn container_binding_spreads_one_nnode_over_the_anodes() {
    let mut b = Binding::new(BindingMode::Container { slots: 4 });
    for a in ["a1", "a2", "a3"] {
        b.add_anode(a, "r", 1.0).unwrap();
    }
    let events = b.add_nnode("n", "r").unwrap();
    assert_eq!(events.len(), 4);
    assert_eq!(stacks(&b, "r"), "a1:[n/0,n/3] a2:[n/1] a3:[n/2]");
    assert_eq!(
        (b.users("a1"), b.users("a2"), b.users("a3")),
        (Some(6), Some(5), Some(5))
    );
    // Removing the NNode unbinds each of its containers.
    assert_eq!(b.remove("n").unwrap().len(), 4);
    assert_eq!(stacks(&b, "r"), "a1:[] a2:[] a3:[]");
}

#[test]
fn bad_changes_are_refused_and_change_nothing() {
    let mut b = Binding::new(BindingMode::Plain);
    b.add_anode("a1", "r", 1.0).unwrap();
    nnodes(&mut b, "r", &["n1"]);
    assert_eq!(
        b.add_nnode("n1", "r"),
        Err(BindingError::Duplicate("n1".into()))
    );
    assert_eq!(
        b.add_anode("n1", "r", 1.0),
        Err(BindingError::Duplicate("n1".into()))
    );
    assert_eq!(b.remove("zz"), Err(BindingError::Unknown("zz".into())));
    assert!(matches!(
        b.add_anode("a2", "r", 0.0),
        Err(BindingError::BadWeight { .. })
    ));
    assert!(!b.contains("a2"));
    assert_eq!(stacks(&b, "r"), "a1:[n1]");
}
