//! A task's `accelerator = "required" | "preferred" | "none"` and an ANode's full queue (spec 01)
//! as the scheduler's view applies them: every policy places through [`SchedulerView::fits`], so
//! the one batch policy (HDAS here) obeys them without a fork.

use hetsched_core::model::application::AcceleratorNeed;
use hetsched_core::model::{AppId, NodeId, SchedulerView, TaskId, Variant};
use hetsched_core::policy::batch::BatchPolicyKind;
use hetsched_core::testkit::{app, node};

/// Node 0: an ANode (1 GPU); node 1: an NNode bound to it (seen with its device); node 2: a CPU
/// node (an NNode of a rack without ANode). One application of `tasks` tasks with both variants.
fn view(need: AcceleratorNeed, tasks: u32) -> SchedulerView {
    let mut v = SchedulerView::new();
    v.add_node(node("anode").cores(4).gpus(1, "k20").build(NodeId(0)))
        .expect("anode");
    v.add_node(node("nnode-bound").cores(4).build(NodeId(1)))
        .expect("nnode");
    v.add_node(node("cpu-node").cores(4).build(NodeId(2)))
        .expect("cpu node");
    let anode_devices = v.node(NodeId(0)).node.accelerators.clone();
    v.set_attached_accelerators(NodeId(1), anode_devices)
        .expect("bound");
    let a = app("solve")
        .tasks(tasks)
        .cpu(2.0, 0.0)
        .gpu(1.0, 0.0, 0.0)
        .build(AppId(0));
    v.add_application(a, (0..tasks as u64).map(TaskId).collect::<Vec<_>>())
        .expect("app");
    v.set_accelerator_need(AppId(0), need).expect("need");
    v
}

/// The variants HDAS places on `node` at one heartbeat (each task holds one core).
fn beat(v: &mut SchedulerView, node: u32) -> Vec<Variant> {
    let mut p = BatchPolicyKind::Hdas.build();
    p.on_node_update(v, NodeId(node), 1_000_000_000)
        .into_iter()
        .map(|a| a.variant)
        .collect()
}

#[test]
fn a_required_task_runs_only_where_a_device_is_reachable() {
    let mut v = view(AcceleratorNeed::Required, 20);
    assert_eq!(beat(&mut v, 2), vec![], "the CPU node gets none");
    assert_eq!(
        beat(&mut v, 0),
        vec![Variant::Gpu],
        "the ANode: its device only"
    );
    assert_eq!(
        beat(&mut v, 1),
        vec![Variant::Gpu],
        "the bound NNode: offloaded"
    );
    assert!(!v.fits(AppId(0), NodeId(0), Variant::Cpu));
}

#[test]
fn a_preferred_task_goes_to_devices_first_and_to_a_cpu_node_only_when_none_is_free() {
    let mut v = view(AcceleratorNeed::Preferred, 20);
    // Devices are free (the ANode's, the one the bound NNode reaches): the CPU node waits.
    assert_eq!(beat(&mut v, 2), vec![]);
    // Nodes that reach a device never run it on their cores.
    assert_eq!(beat(&mut v, 0), vec![Variant::Gpu]);
    assert_eq!(beat(&mut v, 1), vec![Variant::Gpu]);
    // Every reachable device is taken: now the CPU node runs it on its cores.
    assert_eq!(beat(&mut v, 2), vec![Variant::Cpu; 4]);
}

#[test]
fn a_task_without_the_field_is_placed_as_before() {
    let mut v = view(AcceleratorNeed::None, 20);
    // HDAS fills the ANode's device and its free cores alike.
    let on_anode = beat(&mut v, 0);
    assert!(on_anode.contains(&Variant::Gpu) && on_anode.contains(&Variant::Cpu));
    assert_eq!(beat(&mut v, 2), vec![Variant::Cpu; 4]);
}

#[test]
fn an_nnode_held_for_its_anodes_full_queue_gets_no_accelerator_work_until_released() {
    let mut v = view(AcceleratorNeed::Required, 20);
    v.set_accelerator_held(NodeId(1), true).expect("held");
    assert_eq!(beat(&mut v, 1), vec![], "the ANode's queue is full");
    v.set_accelerator_held(NodeId(1), false).expect("released");
    assert_eq!(beat(&mut v, 1), vec![Variant::Gpu]);
    // A preferred task whose only free device sits behind a full queue goes to the CPU node.
    let mut v = view(AcceleratorNeed::Preferred, 20);
    assert_eq!(beat(&mut v, 0), vec![Variant::Gpu]);
    v.set_accelerator_held(NodeId(1), true).expect("held");
    assert_eq!(beat(&mut v, 2), vec![Variant::Cpu; 4]);
}

/// A node bound to an ANode, or unbound, changes its capacity and its `gpu` attribute: a cache
/// of where work can run (kept by the placement generation) must be computed again; the binding
/// said again with as many devices changes neither.
#[test]
fn binding_a_node_to_devices_or_unbinding_it_moves_the_placement_generation() {
    let mut v = view(AcceleratorNeed::None, 1);
    let generation = v.placement_generation();
    let devices = v.node(NodeId(0)).node.accelerators.clone();
    v.set_attached_accelerators(NodeId(1), devices.clone())
        .expect("bound again, as before");
    assert_eq!(v.placement_generation(), generation, "nothing changed");
    v.set_attached_accelerators(NodeId(1), Vec::new())
        .expect("unbound");
    assert!(v.placement_generation() > generation, "its device went");
    let generation = v.placement_generation();
    v.set_attached_accelerators(NodeId(2), devices)
        .expect("bound");
    assert!(v.placement_generation() > generation, "it reaches a device");
}
