//! What the static balancer's placement costs the heap: a few bytes per member, not one entry per
//! core of the cluster (tens of GB for 100,000 nodes of 65,536 cores). Its own test binary: the
//! heap is counted by a global allocator (`cap`), and only this test may allocate meanwhile.

use hetsched_core::NodeId;
use hetsched_core::input::workflow::parse_workflow;
use hetsched_core::policy::graph::GraphNode;
use hetsched_core::policy::graph::dag::InstanceGraph;
use hetsched_core::policy::graph::static_placement::StaticLauncher;
use std::alloc::System;

#[global_allocator]
static HEAP: cap::Cap<System> = cap::Cap::new(System, usize::MAX);

#[test]
fn static_placement_on_nodes_of_many_cores_holds_no_card_per_core() {
    // 4,096 nodes of 65,536 cores: 268 million cards, 2 GiB as a whole deck.
    let members: Vec<GraphNode> = (0..4096)
        .map(|i| GraphNode {
            id: NodeId(i),
            cores: 65_536,
            attributes: 0,
        })
        .collect();
    let wf = parse_workflow(
        "w.toml",
        "[[task]]\nname = \"A\"\ninstances = 10000\ncost = \"1s\"\n",
    )
    .expect("workflow")
    .workflow;
    let graph = InstanceGraph::new(&wf, &[0]);
    // 16 MiB more than now: the placement of 10,000 instances and a round of 4,096 members.
    HEAP.set_limit(HEAP.allocated() + (16 << 20))
        .expect("limit");
    let l = StaticLauncher::new(NodeId(0), &members, graph);
    HEAP.set_limit(usize::MAX).expect("no limit");
    // The first round deals one instance to every node in order, then the second round starts.
    assert_eq!(
        l.assigned(hetsched_core::policy::graph::InstanceId(0)),
        Some(NodeId(0))
    );
    assert_eq!(
        l.assigned(hetsched_core::policy::graph::InstanceId(4097)),
        Some(NodeId(1))
    );
}
