//! Spec 05's worked example (the paper's figure 3), replayed message by message through the PCDDB
//! state machines.
//!
//! Single-core nodes, LT = 3 and MT = 6 (the figure's node 6 holds 2 < LT and takes MT − 2 = 4).
//! The launch node L has 5 instances of component D and 4 of component C to place, and the
//! underloaded-node table [6, 8, 9, 3, 4, 2, 11]; node 8 is listed but no longer underloaded.
//! The nodes' own tables are as stale as the figure's text implies (node 6 still lists 12; node
//! 9 lists 6 and 8 but not 4 and 2; node 3 lists 8, 6 and 9 but not 11).

use hetsched_core::NodeId;
use hetsched_core::input::workflow::parse_workflow;
use hetsched_core::policy::graph::dag::InstanceGraph;
use hetsched_core::policy::graph::pcddb::{LaunchNode, PcddbNode};
use hetsched_core::policy::graph::{
    Body, ClusterId, GraphNode, InstanceId, LaunchEvent, Message, NodeEvent, Outgoing, Thresholds,
};
use std::collections::VecDeque;

const L: u32 = 0;
const SC: ClusterId = ClusterId(0);

fn name(i: InstanceId) -> String {
    if i.0 < 5 {
        format!("D{}", i.0 + 1)
    } else {
        format!("C{}", i.0 - 4)
    }
}

fn names(v: impl IntoIterator<Item = InstanceId>) -> String {
    v.into_iter().map(name).collect::<Vec<_>>().join(" ")
}

fn ids(v: &[NodeId]) -> String {
    v.iter()
        .map(|n| n.0.to_string())
        .collect::<Vec<_>>()
        .join(" ")
}

fn who(n: NodeId) -> String {
    if n.0 == L {
        "L".into()
    } else {
        n.0.to_string()
    }
}

fn describe(m: &Message) -> String {
    let what = match &m.body {
        Body::Request(r) => format!(
            "request [{}] table [{}]",
            names(r.instances.iter().map(|w| w.instance)),
            ids(&r.table)
        ),
        Body::Reply {
            taken, remaining, ..
        } => format!(
            "reply took [{}], {remaining} left",
            names(taken.iter().copied())
        ),
        Body::Return(r) => format!("return [{}]", names(r.instances.iter().map(|w| w.instance))),
        other => other.kind().to_string(),
    };
    format!("{} → {}: {what}", who(m.from), who(m.to))
}

struct Figure {
    launch: LaunchNode,
    nodes: Vec<PcddbNode>,
    transcript: Vec<String>,
}

impl Figure {
    fn new() -> Self {
        let wf = parse_workflow(
            "figure3.toml",
            "[[task]]\nname = \"D\"\ninstances = 5\ncost = \"10s\"\n\
             [[task]]\nname = \"C\"\ninstances = 4\ncost = \"10s\"\n",
        )
        .unwrap_or_else(|e| panic!("{e}"))
        .workflow;
        let mut launch = LaunchNode::new(NodeId(L), SC, InstanceGraph::new(&wf, &[0, 0]));
        launch.preset_table([6, 8, 9, 3, 4, 2, 11].map(NodeId).to_vec());
        let thresholds = Thresholds { lt: 3, mt: 6 };
        let mut nodes: Vec<PcddbNode> = (0..=12)
            .map(|i| {
                PcddbNode::new(
                    GraphNode {
                        id: NodeId(i),
                        cores: 1,
                        attributes: 0,
                    },
                    thresholds,
                    vec![(SC, NodeId(L))],
                )
            })
            .collect();
        let preset = |n: &mut PcddbNode, held: u32, table: &[u32]| {
            n.preset(held, SC, table.iter().map(|&i| NodeId(i)).collect());
        };
        preset(&mut nodes[6], 2, &[8, 12, 4, 2, 11]);
        preset(&mut nodes[8], 4, &[9, 3]);
        preset(&mut nodes[9], 2, &[6, 8, 9, 3, 11]);
        preset(&mut nodes[3], 1, &[8, 6, 9, 3, 4, 2]);
        Self {
            launch,
            nodes,
            transcript: Vec::new(),
        }
    }

    /// Delivers every message in the order sent, writing the transcript.
    fn run(&mut self, first: Vec<Outgoing>) {
        let mut queue: VecDeque<(NodeId, Outgoing)> =
            first.into_iter().map(|o| (NodeId(L), o)).collect();
        while let Some((at, out)) = queue.pop_front() {
            match out {
                Outgoing::Send(m) => {
                    self.transcript.push(describe(&m));
                    let to = m.to;
                    let next = if m.body.for_manager() && to.0 == L {
                        self.launch.handle(LaunchEvent::Deliver(m), 0)
                    } else {
                        self.nodes[to.index()].handle(NodeEvent::Deliver(m), 0)
                    };
                    queue.extend(next.into_iter().map(|o| (to, o)));
                }
                Outgoing::Run { instance, core } => self.transcript.push(format!(
                    "{} runs {} on core {core}",
                    who(at),
                    name(instance)
                )),
                Outgoing::Ready(_) => {}
            }
        }
    }

    fn table(&self, n: u32) -> Vec<u32> {
        self.nodes[n as usize]
            .table(SC)
            .map(|t| t.entries().iter().map(|n| n.0).collect())
            .unwrap_or_default()
    }
}

#[test]
fn figure_3_gives_the_papers_acceptances_message_by_message() {
    let mut fig = Figure::new();
    let start = fig.launch.handle(LaunchEvent::Start, 0);
    fig.run(start);
    let expected = [
        // b) L packs 5 D and 4 C with its table and sends the request to the table's first node.
        "L → 6: request [D1 D2 D3 D4 D5 C1 C2 C3 C4] table [6 8 9 3 4 2 11]",
        // c)(b) node 6 holds 2 < LT: it takes MT − 2 = 4 D, replies, forwards to its first node, 8.
        "6 runs D1 on core 0",
        "6 runs D2 on core 0",
        "6 runs D3 on core 0",
        "6 runs D4 on core 0",
        "6 → L: reply took [D1 D2 D3 D4], 5 left",
        "6 → 8: request [D5 C1 C2 C3 C4] table [8 9 3 4 2 11]",
        // c)(a) node 8 is not underloaded: it removes itself and forwards to its first node, 9.
        "8 → 9: request [D5 C1 C2 C3 C4] table [9 3 4 2 11]",
        // c)(b) node 9 holds 2 < LT: it takes 1 D and 3 C, replies, forwards to node 3.
        "9 runs D5 on core 0",
        "9 runs C1 on core 0",
        "9 runs C2 on core 0",
        "9 runs C3 on core 0",
        "9 → L: reply took [D5 C1 C2 C3], 1 left",
        "9 → 3: request [C4] table [3 4 2 11]",
        // c)(b) node 3 holds 1 < LT: it takes the last C; the request is done.
        "3 runs C4 on core 0",
        "3 → L: reply took [C4], 0 left",
    ];
    assert_eq!(fig.transcript, expected, "{:#?}", fig.transcript);

    // The tables change as the figure's text says.
    // Node 6 added 3, 6 and 9 and dropped 12 — then removed itself after taking work.
    assert_eq!(fig.table(6), vec![8, 9, 3, 4, 2, 11]);
    // Node 9 dropped 6 and 8 and added 4 and 2 (and removed itself).
    assert_eq!(fig.table(9), vec![3, 4, 2, 11]);
    // Node 3 dropped 8, 6 and 9 and added 11 (and removed itself).
    assert_eq!(fig.table(3), vec![4, 2, 11]);
    // d) The launch node removed every replying node; 8 stays until a request disproves it.
    assert_eq!(fig.launch.table(), [8, 4, 2, 11].map(NodeId).to_vec());
    assert!(!fig.launch.request_in_flight());
    // Holdings: 6 and 9 are at MT; 3 holds 2.
    assert_eq!(
        [6, 8, 9, 3].map(|n| fig.nodes[n].held()),
        [6, 4, 6, 2],
        "nodes 6, 8, 9, 3"
    );
}

#[test]
fn a_request_whose_table_runs_dry_returns_to_the_launch_node() {
    let mut fig = Figure::new();
    // Only node 8 (loaded) is listed: it passes the request on, finds its table empty, returns it.
    fig.launch.preset_table(vec![NodeId(8)]);
    let start = fig.launch.handle(LaunchEvent::Start, 0);
    fig.run(start);
    assert_eq!(
        fig.transcript,
        [
            "L → 8: request [D1 D2 D3 D4 D5 C1 C2 C3 C4] table [8]",
            "8 → L: return [D1 D2 D3 D4 D5 C1 C2 C3 C4]",
        ]
    );
    assert!(
        fig.launch.table().is_empty(),
        "the return disproved node 8's entry"
    );
    // a) Node 4 checks itself (0 < LT), reports, and the launch node sends it the request.
    let status = fig.nodes[4].handle(NodeEvent::SelfCheck, 1);
    fig.transcript.clear();
    for o in status {
        let Outgoing::Send(m) = o else { continue };
        fig.transcript.push(describe(&m));
        let next = fig.launch.handle(LaunchEvent::Deliver(m), 1);
        fig.run(next);
    }
    assert_eq!(fig.transcript[0], "4 → L: status");
    assert_eq!(
        fig.transcript[1],
        "L → 4: request [D1 D2 D3 D4 D5 C1 C2 C3 C4] table [4]"
    );
    assert!(
        fig.transcript
            .contains(&"4 → L: reply took [D1 D2 D3 D4 D5 C1], 3 left".to_string()),
        "{:#?}",
        fig.transcript
    );
    // e) Its table is now empty, so the rest goes home for reallocation.
    assert_eq!(
        fig.transcript.last().map(String::as_str),
        Some("4 → L: return [C2 C3 C4]")
    );
    assert_eq!(fig.nodes[4].held(), 6, "MT × 1 core");
}
