//! PCDDB over several proximity clusters (spec 05 §2 and §4): the launch node keeps one
//! underloaded-node table per cluster, an allocation request travels among the members of one
//! cluster, and what it could not place there returns and goes into the next cluster. Also:
//! instances that must run again join the next request (`resubmit`), and only nodes with the
//! required attributes take an instance.

use hetsched_core::NodeId;
use hetsched_core::input::workflow::parse_workflow;
use hetsched_core::policy::graph::dag::InstanceGraph;
use hetsched_core::policy::graph::pcddb::{LaunchNode, PcddbNode};
use hetsched_core::policy::graph::{
    Body, ClusterId, GraphNode, InstanceId, LaunchEvent, Message, NodeEvent, Outgoing, Thresholds,
};
use std::collections::VecDeque;

const L: NodeId = NodeId(100);
const SC1: ClusterId = ClusterId(0);
const SC2: ClusterId = ClusterId(1);
const GPU: u64 = 1;

/// Four single-core nodes, LT = 2, MT = 3: Sc1 = {0, 1}, Sc2 = {2, 3}; node 3 has a GPU.
struct Net {
    launch: LaunchNode,
    nodes: Vec<PcddbNode>,
    /// Every message sent: (from, to, kind, cluster of a request).
    hops: Vec<(NodeId, NodeId, &'static str, Option<ClusterId>)>,
    runs: Vec<(NodeId, InstanceId)>,
}

impl Net {
    fn new(instances: u32, requires: u64) -> Net {
        let wf = parse_workflow(
            "c.toml",
            &format!("[[task]]\nname = \"A\"\ninstances = {instances}\ncost = \"1s\"\n"),
        )
        .unwrap_or_else(|e| panic!("{e}"))
        .workflow;
        let launch =
            LaunchNode::with_clusters(L, vec![SC1, SC2], InstanceGraph::new(&wf, &[requires]));
        let nodes = (0..4)
            .map(|i| {
                PcddbNode::new(
                    GraphNode {
                        id: NodeId(i),
                        cores: 1,
                        attributes: if i == 3 { GPU } else { 0 },
                    },
                    Thresholds { lt: 2, mt: 3 },
                    vec![(if i < 2 { SC1 } else { SC2 }, L)],
                )
            })
            .collect();
        Net {
            launch,
            nodes,
            hops: Vec::new(),
            runs: Vec::new(),
        }
    }

    fn run(&mut self, first: Vec<Outgoing>, at: NodeId) {
        let mut queue: VecDeque<(NodeId, Outgoing)> = first.into_iter().map(|o| (at, o)).collect();
        while let Some((at, out)) = queue.pop_front() {
            match out {
                Outgoing::Send(m) => {
                    let cluster = match &m.body {
                        Body::Request(r) | Body::Return(r) => Some(r.cluster),
                        _ => None,
                    };
                    self.hops.push((m.from, m.to, m.body.kind(), cluster));
                    let to = m.to;
                    let next = if to == L {
                        self.launch.handle(LaunchEvent::Deliver(m), 0)
                    } else {
                        self.nodes[to.index()].handle(NodeEvent::Deliver(m), 0)
                    };
                    queue.extend(next.into_iter().map(|o| (to, o)));
                }
                Outgoing::Run { instance, .. } => self.runs.push((at, instance)),
                Outgoing::Ready(_) => {}
            }
        }
    }

    /// Every node checks itself (all idle: each reports to the launch node).
    fn self_checks(&mut self) {
        for i in 0..self.nodes.len() {
            let out = self.nodes[i].handle(NodeEvent::SelfCheck, 0);
            self.run(out, NodeId(i as u32));
        }
    }

    fn requests(&self) -> Vec<(NodeId, NodeId, Option<ClusterId>)> {
        self.hops
            .iter()
            .filter(|h| h.2 == "request")
            .map(|h| (h.0, h.1, h.3))
            .collect()
    }

    fn taken_by(&self, n: u32) -> usize {
        self.runs.iter().filter(|(at, _)| at.0 == n).count()
    }
}

#[test]
fn a_request_travels_within_its_cluster_first_then_into_the_next() {
    let mut net = Net::new(10, 0);
    net.self_checks();
    assert_eq!(net.launch.table_of(SC1), vec![NodeId(0), NodeId(1)]);
    assert_eq!(net.launch.table_of(SC2), vec![NodeId(2), NodeId(3)]);
    let out = net.launch.handle(LaunchEvent::Start, 0);
    net.run(out, L);
    // L → 0 → 1 inside Sc1 (3 + 3 taken), back to L with 4 left, then L → 2 → 3 inside Sc2.
    assert_eq!(
        net.requests(),
        vec![
            (L, NodeId(0), Some(SC1)),
            (NodeId(0), NodeId(1), Some(SC1)),
            (L, NodeId(2), Some(SC2)),
            (NodeId(2), NodeId(3), Some(SC2)),
        ]
    );
    let returns: Vec<_> = net.hops.iter().filter(|h| h.2 == "return").collect();
    assert_eq!(returns, vec![&(NodeId(1), L, "return", Some(SC1))]);
    assert_eq!(
        (0..4).map(|n| net.taken_by(n)).collect::<Vec<_>>(),
        vec![3, 3, 3, 1]
    );
    assert!(!net.launch.request_in_flight());
}

#[test]
fn instances_run_again_go_through_the_next_request_and_only_to_nodes_that_meet_requirements() {
    let mut net = Net::new(2, GPU);
    net.self_checks();
    let out = net.launch.handle(LaunchEvent::Start, 0);
    net.run(out, L);
    // Only node 3 has the GPU: Sc1's nodes pass the request on and it comes back; Sc2's node 2
    // passes it to node 3, which takes both.
    assert_eq!(net.taken_by(3), 2);
    assert_eq!(net.runs.len(), 2);
    // Instance 0 failed on node 3 with retries left: it runs again through a request.
    let out = net.nodes[3].handle(
        NodeEvent::Finished {
            instance: InstanceId(0),
            core: 0,
        },
        0,
    );
    drop(out); // the runtime's result travels with the heartbeat, not this message
    for i in 0..4 {
        let out = net.nodes[i].handle(NodeEvent::SelfCheck, 0);
        net.run(out, NodeId(i as u32));
    }
    let before = net.requests().len();
    let out = net.launch.resubmit(&[InstanceId(0)], 0);
    net.run(out, L);
    assert!(net.requests().len() > before, "a new request carried it");
    assert_eq!(net.runs.last(), Some(&(NodeId(3), InstanceId(0))));
}

#[test]
fn clusters_that_change_keep_the_tables_of_the_members_that_stay() {
    let mut net = Net::new(1, 0);
    net.self_checks();
    // Node 1 moves to Sc2; Sc1 is {0}.
    net.launch.set_clusters(&[
        (SC1, vec![NodeId(0)]),
        (SC2, vec![NodeId(1), NodeId(2), NodeId(3)]),
    ]);
    assert_eq!(net.launch.table_of(SC1), vec![NodeId(0)]);
    assert_eq!(net.launch.table_of(SC2), vec![NodeId(2), NodeId(3)]);
    net.nodes[1].set_memberships(vec![(SC2, L)]);
    assert_eq!(net.nodes[1].clusters(), vec![SC2]);
    // Its next self-check reports it to Sc2's table.
    let out = net.nodes[1].handle(NodeEvent::SelfCheck, 0);
    assert!(matches!(
        out.as_slice(),
        [Outgoing::Send(Message {
            body: Body::Status { cluster: SC2 },
            ..
        })]
    ));
    net.run(out, NodeId(1));
    assert_eq!(
        net.launch.table_of(SC2),
        vec![NodeId(2), NodeId(3), NodeId(1)]
    );
}
