//! A `centralised` workflow beside other work: the dispatcher counts the cores batch tasks (and
//! stream workers, other workflows) hold on a node as its load, and an instance it placed on a
//! node that cannot start it moves to a node with room; meanwhile the job says why it waits.

use crate::common;

use common::{beat, register};
use hetsched_server::ServerConfig;
use hetsched_server::config::WorkflowConfig;
use hetsched_server::convert::Wire;
use hetsched_server::state::State;
use hetsched_server::state::types::Submission;
use hetsched_server::store::Store;
use std::collections::HashMap;

fn open(dir: &std::path::Path) -> State {
    let config = ServerConfig {
        data_dir: dir.to_path_buf(),
        workflow: Some(WorkflowConfig::default()),
        ..Default::default()
    };
    State::open(&config, Store::open(&dir.join("state.db")).expect("store")).expect("state")
}

/// A batch task holding both of node `b`'s cores stays there the whole test; six one-core
/// instances start only on `a`. `b` registers first: on equal loads the dispatcher picks the
/// lowest id, so once `a` is full it places instances on `b`, where they wait until `a` has
/// room, then move there. Before, the dispatcher counted only the workflow's instances running
/// on a node: `b` read idle, half the instances waited there behind the batch task, for ever
/// while it ran, and the job gave no reason.
#[test]
fn a_centralised_workflow_moves_instances_off_a_node_other_work_holds() {
    let dir = common::scratch("workflow-busy-nodes", "moves");
    let mut s = open(&dir);
    let b = register(&mut s, "b", 2);
    let a = register(&mut s, "a", 2);
    beat(&mut s, b, &[], &[]);
    beat(&mut s, a, &[], &[]);
    let hold = s
        .on_submit(Submission {
            origin: "hold.toml".into(),
            text: "[[application]]\nname = \"hold\"\ntasks = 1\nrequires = [\"node:b\"]\n\
                   [application.cpu]\ncommand = \"sleep 600\"\ncores = 2\n"
                .into(),
            workdir: "/".into(),
            ..Default::default()
        })
        .expect("submit")
        .job_id;
    let held: Vec<(u64, u32)> = beat(&mut s, b, &[], &[])
        .assignments
        .iter()
        .map(|x| (x.task_id, x.attempt))
        .collect();
    assert_eq!(held.len(), 1, "the batch task runs on b");
    let job = s
        .submit(
            "wf.toml",
            "balancer = \"centralised\"\n[[task]]\nname = \"A\"\ninstances = 6\ncost = \"1s\"\n\
             command = \"true\"\n",
            "/",
        )
        .expect("submit")
        .job_id;
    // Placed by load: a's two cores first, then, every node full, in turn (b first on ties).
    assert_eq!(
        s.job(job).expect("job").pending_reason,
        "resources: 6 ready instances wait for the busy nodes they were placed on: a (4), b (2)"
    );
    // The listing agrees: each of them is `ready` on the node it waits on, saying so, and has
    // run nowhere (so `tasks --node a` finds the four on a). Before, they were listed with no
    // node and no word.
    let mut waiting: HashMap<String, usize> = HashMap::new();
    for t in s.tasks(job).expect("tasks").tasks {
        assert_eq!(t.state, "ready", "{t:?}");
        assert_eq!(
            t.message,
            format!("placed on {}: waits there to start", t.node),
            "{t:?}"
        );
        assert_eq!(t.executed_node, "", "{t:?}");
        *waiting.entry(t.node).or_default() += 1;
    }
    assert_eq!(
        waiting,
        HashMap::from([("a".to_string(), 4), ("b".to_string(), 2)])
    );
    // The agents: each beat reports what runs there, and what a's agent was sent ends by its
    // next beat.
    let mut ran: HashMap<u64, String> = HashMap::new();
    let mut running_on_a: Vec<(u64, u32)> = Vec::new();
    for round in 0..20 {
        let done: Vec<(u64, u32, bool)> = running_on_a
            .drain(..)
            .map(|(t, at)| (t, at, true))
            .collect();
        let r = beat(&mut s, a, &[], &done);
        for x in &r.assignments {
            ran.insert(x.task_id, "a".into());
            running_on_a.push((x.task_id, x.attempt));
        }
        let r = beat(&mut s, b, &held, &[]);
        for x in &r.assignments {
            ran.insert(x.task_id, format!("b (round {round})"));
        }
        if s.job(job).expect("job").state == "completed" {
            break;
        }
    }
    let j = s.job(job).expect("job");
    assert_eq!(j.state, "completed", "{j:?}");
    assert_eq!(ran.len(), 6, "{ran:?}");
    assert!(ran.values().all(|n| n == "a"), "{ran:?}");
    assert!(j.pending_reason.is_empty(), "{}", j.pending_reason);
    assert_eq!(s.job(hold).expect("batch job").state, "running");
}
