//! Two steps of spec 05 §4 as the original paper (seed 004 §2.4–2.5) words them, beyond the
//! worked example: a) a node reports to the launch node at *every* periodic self-check that finds
//! it below LT; b) every event that readies instances packs them into a request at once — the
//! launch node does not wait for an earlier request to end.

use hetsched_core::NodeId;
use hetsched_core::input::workflow::parse_workflow;
use hetsched_core::policy::graph::dag::InstanceGraph;
use hetsched_core::policy::graph::pcddb::{LaunchNode, PcddbNode};
use hetsched_core::policy::graph::{
    Body, ClusterId, GraphNode, InstanceId, LaunchEvent, Message, NodeEvent, Outgoing, Thresholds,
};

const SC: ClusterId = ClusterId(0);
const L: NodeId = NodeId(0);

fn sent(out: &[Outgoing]) -> Vec<&Message> {
    out.iter()
        .filter_map(|o| match o {
            Outgoing::Send(m) => Some(m),
            _ => None,
        })
        .collect()
}

/// Node 1: two cores, LT 2 and MT 10 per core, in cluster `SC` of launch node `L`.
fn dual_core_node() -> PcddbNode {
    PcddbNode::new(
        GraphNode {
            id: NodeId(1),
            cores: 2,
            attributes: 0,
        },
        Thresholds { lt: 2, mt: 10 },
        vec![(SC, L)],
    )
}

#[test]
fn a_node_below_lt_reports_at_every_self_check_and_stops_once_loaded() {
    let mut node = dual_core_node();
    for t in 0..3 {
        let out = node.handle(NodeEvent::SelfCheck, t);
        let msgs = sent(&out);
        assert_eq!(msgs.len(), 1, "check {t}: one status");
        assert!(matches!(msgs[0].body, Body::Status { .. }) && msgs[0].to == L);
    }
    assert_eq!(
        node.table(SC).map(|t| t.entries().to_vec()),
        Some(vec![NodeId(1)])
    );
    // Holding LT × cores = 4 instances it is no longer underloaded: no report, and it leaves its
    // own table.
    node.preset(4, SC, vec![NodeId(1)]);
    assert!(sent(&node.handle(NodeEvent::SelfCheck, 3)).is_empty());
    assert_eq!(node.table(SC).map(|t| t.entries().to_vec()), Some(vec![]));
}

#[test]
fn a_result_that_readies_instances_sends_a_new_request_while_the_first_still_travels() {
    let wf = parse_workflow(
        "loop.toml",
        "[[task]]\nname = \"A\"\ninstances = \"1..=2\"\ncost = \"1s\"\noutputs = [\"m\"]\n\
         [[task]]\nname = \"B\"\ninstances = \"1..=2\"\ncost = \"1s\"\ninputs = [\"m\"]\n",
    )
    .unwrap_or_else(|e| panic!("{e}"))
    .workflow;
    let mut launch = LaunchNode::new(L, SC, InstanceGraph::new(&wf, &[0, 0]));
    launch.preset_table(vec![NodeId(1), NodeId(2)]);
    // Program start: A1 and A2 go out in one request to the table's first node.
    let out = launch.handle(LaunchEvent::Start, 0);
    let first = sent(&out);
    assert_eq!(first.len(), 1);
    assert!(matches!(&first[0].body, Body::Request(r) if r.instances.len() == 2));
    assert!(launch.request_in_flight());
    // A1's result arrives before any reply: B1 is ready and leaves at once in a second request.
    let out = launch.handle(
        LaunchEvent::Deliver(Message {
            from: NodeId(1),
            to: L,
            body: Body::Result {
                instance: InstanceId(0),
            },
        }),
        1,
    );
    let second = sent(&out);
    assert_eq!(second.len(), 1, "{out:?}");
    match &second[0].body {
        Body::Request(r) => {
            assert_eq!(
                r.instances.iter().map(|w| w.instance).collect::<Vec<_>>(),
                vec![InstanceId(2)],
                "B1 alone"
            );
            assert_eq!(
                second[0].to,
                NodeId(1),
                "the first node of the launch table"
            );
        }
        other => panic!("expected a request, got {other:?}"),
    }
}

/// The runtime can hand a node a request carrying an instance that node already took (a retried
/// request and a lost reply, or a server restart): it keeps one core slot for it, so the node's
/// instance table comes back to zero once that instance ends.
#[test]
fn an_instance_taken_twice_holds_one_slot_and_frees_it_once() {
    use hetsched_core::policy::graph::{AllocationRequest, Wanted};
    let mut node = dual_core_node();
    let request = |ids: &[u32]| {
        NodeEvent::Deliver(Message {
            from: L,
            to: NodeId(1),
            body: Body::Request(AllocationRequest {
                cluster: SC,
                launch: L,
                sent_at: 0,
                instances: ids
                    .iter()
                    .map(|&i| Wanted {
                        instance: InstanceId(i),
                        requires: 0,
                    })
                    .collect(),
                table: vec![NodeId(1)].into(),
            }),
        })
    };
    let runs = |out: &[Outgoing]| -> Vec<(u32, u32)> {
        out.iter()
            .filter_map(|o| match o {
                Outgoing::Run { instance, core } => Some((instance.0, *core)),
                _ => None,
            })
            .collect()
    };
    let first = node.handle(request(&[7]), 0);
    let placed = runs(&first);
    assert_eq!(placed.len(), 1);
    assert_eq!(node.held(), 1);
    // The same instance again, with a new one: both are in the reply (the launch node learns
    // where they are), only the new one is placed.
    let second = node.handle(request(&[7, 8]), 1);
    assert_eq!(
        runs(&second).iter().map(|r| r.0).collect::<Vec<_>>(),
        vec![8],
        "7 is not placed twice"
    );
    let replies: Vec<Vec<u32>> = sent(&second)
        .iter()
        .filter_map(|m| match &m.body {
            Body::Reply { taken, .. } => Some(taken.iter().map(|i| i.0).collect()),
            _ => None,
        })
        .collect();
    assert_eq!(replies, vec![vec![7, 8]]);
    assert_eq!(node.held(), 2);
    let (_, core7) = placed[0];
    let (_, core8) = runs(&second)[0];
    let results = |out: Vec<Outgoing>| sent(&out).len();
    assert_eq!(
        results(node.handle(
            NodeEvent::Finished {
                instance: InstanceId(7),
                core: core7
            },
            2
        )),
        1,
        "one result for 7"
    );
    assert_eq!(
        results(node.handle(
            NodeEvent::Finished {
                instance: InstanceId(8),
                core: core8
            },
            3
        )),
        1
    );
    assert_eq!(node.held(), 0, "nothing stays counted");
}
