//! Stream topologies are a job kind of the one state: their records live in the server's one
//! store (no `topologies.sqlite`), written in the state's transaction (so a full disk refuses a
//! submission and rolls it back like any other event), they are read back at restart, and each
//! running worker holds its executors' declared cores on its node, so batch tasks do not
//! oversubscribe the node.

use crate::common;
use crate::common::Scratch;

use common::{IDENTITY, heartbeat_request};
use hetsched_proto as pb;
use hetsched_server::ServerConfig;
use hetsched_server::convert::Wire;
use hetsched_server::jobs::topology::{TopologySubmission, WorkerSeen, WorkersSeen};
use hetsched_server::state::State;
use hetsched_server::store::Store;
use std::path::Path;

fn scratch(name: &str) -> Scratch {
    Scratch::new("topology-kind", name)
}

/// Two spout executors and two bolt executors at 50 % each: one worker, 2 declared cores.
pub(crate) const TOPOLOGY: &str = r#"
name = "pipe"

[[component]]
name = "numbers"
kind = "spout"
parallelism = 2
cpu = 50.0
builtin = "sequence-spout"

[[component]]
name = "keep"
kind = "bolt"
parallelism = 2
cpu = 50.0
builtin = "filter"

[[stream]]
from = "numbers"
to = "keep"
grouping = "shuffle"
rate = 10.0
"#;

/// Four one-core tasks.
const JOB: &str =
    "[[application]]\nname = \"a\"\ntasks = 4\n[application.cpu]\ncommand = \"true\"\n";

fn open(dir: &Path) -> State {
    let config = ServerConfig {
        data_dir: dir.to_path_buf(),
        ..Default::default()
    };
    State::open(&config, Store::open(&dir.join("state.db")).expect("store")).expect("state")
}

/// The topology above as submitted (also `users`' topology).
pub(crate) fn submission() -> TopologySubmission {
    TopologySubmission {
        origin: "pipe.toml".into(),
        text: TOPOLOGY.into(),
        base_dir: "/".into(),
        placer: "one-phase".into(),
        interval_ms: 0,
        max_utilisation: 0.9,
        ..Default::default()
    }
}

pub(crate) fn sync(s: &mut State, workers: Vec<WorkerSeen>) -> usize {
    s.topology_sync(
        WorkersSeen {
            restated: false,
            start_errors: Vec::new(),
            node: "n".into(),
            cores: 4,
            attributes: Vec::new(),
            workers,
        },
        None,
    )
    .expect("sync")
    .workers
    .len()
}

pub(crate) fn running_worker(generation: u64) -> WorkerSeen {
    WorkerSeen {
        topology: "pipe".into(),
        generation,
        worker: 0,
        addr: "127.0.0.1:1".into(),
        pid: 4242,
        report: None,
    }
}

#[test]
fn a_running_worker_holds_its_declared_cores_and_topologies_live_in_the_one_store() {
    let dir = scratch("booking");
    let mut s = open(&dir);
    let n = common::register(&mut s, "n", 4);
    // The agent's worker sync makes the node a candidate; the submission places on it.
    assert_eq!(sync(&mut s, vec![]), 0);
    let shown = s.topology_submit(submission()).expect("submit");
    assert_eq!(shown["generation"], 1);
    assert_eq!(
        sync(&mut s, vec![]),
        1,
        "the node is told to run one worker"
    );
    assert_eq!(
        s.list_nodes()[0].free_cores,
        4,
        "not running yet: nothing held"
    );
    // The worker runs: its 4 executors × 50 % = 2 declared cores are held on the node, and its
    // agent is told so (it starts the tasks it queues only in the cores its workers leave).
    let told = s
        .topology_sync(
            WorkersSeen {
                restated: false,
                start_errors: Vec::new(),
                node: "n".into(),
                cores: 4,
                attributes: Vec::new(),
                workers: vec![running_worker(1)],
            },
            None,
        )
        .expect("sync");
    assert_eq!(
        told.workers.iter().map(|w| w.cores).collect::<Vec<_>>(),
        [2]
    );
    assert_eq!(s.topology_held_cores(n), 2);
    assert_eq!(s.list_nodes()[0].free_cores, 2);
    // A batch job of four one-core tasks gets only the two cores left.
    s.submit("job.toml", JOB, "/").expect("submit job");
    let r = s.heartbeat(heartbeat_request(n, &[], &[])).expect("beat");
    assert_eq!(
        r.assignments.len(),
        2,
        "batch tasks do not oversubscribe the node"
    );
    // Killed: the worker's cores go back.
    s.topology_kill("pipe").expect("kill");
    assert_eq!(s.topology_held_cores(n), 0);
    assert_eq!(
        s.list_nodes()[0].free_cores,
        2,
        "the two batch tasks still run"
    );
    drop(s);
    assert!(
        !dir.join("topologies.sqlite").exists(),
        "no store beside the server's one"
    );
    // Restart: the record, its placement and its state come back from the one store.
    let s = open(&dir);
    let list = s.topology_list();
    assert_eq!(list[0]["name"], "pipe");
    assert_eq!(list[0]["state"], "killed");
    assert_eq!(list[0]["generation"], 1);
    assert_eq!(list[0]["placement"].as_array().map(Vec::len), Some(4));
}

#[test]
fn a_full_disk_refuses_a_submission_and_keeps_nothing_of_it() {
    let dir = scratch("full");
    let mut s = open(&dir);
    sync(&mut s, vec![]);
    s.simulate_full_disk(true);
    s.topology_submit(submission())
        .expect_err("the store refused the submission's commit");
    assert!(s.is_paused());
    assert_eq!(
        s.topology_list().as_array().map(Vec::len),
        Some(0),
        "memory rolled back to the store"
    );
    s.simulate_full_disk(false);
    std::thread::sleep(hetsched_server::state::PROBE_INTERVAL);
    // The nodes seen by the agents' syncs survive the rollback: the retry places at once.
    let shown = s
        .topology_submit(submission())
        .expect("submit once the disk has room");
    assert_eq!(shown["generation"], 1);
    drop(s);
    let s = open(&dir);
    assert_eq!(s.topology_list()[0]["state"], "running");
}

#[test]
fn a_node_the_dead_node_check_declares_dead_loses_its_workers_to_the_nodes_left() {
    let dir = scratch("dead");
    let config = ServerConfig {
        data_dir: dir.clone(),
        dead_timeout: "1s".parse().expect("duration"),
        ..Default::default()
    };
    let mut s =
        State::open(&config, Store::open(&dir.join("state.db")).expect("store")).expect("state");
    let mut ids = std::collections::HashMap::new();
    for name in ["n", "m"] {
        let id = s
            .register(pb::RegisterRequest {
                name: name.into(),
                cores: 4,
                memory_bytes: 1 << 30,
                identity: IDENTITY.into(),
                ..Default::default()
            })
            .expect("register")
            .node_id;
        ids.insert(name.to_string(), id);
    }
    let sync_both = |s: &mut State| {
        for name in ["n", "m"] {
            s.topology_sync(
                WorkersSeen {
                    restated: false,
                    start_errors: Vec::new(),
                    node: name.into(),
                    cores: 4,
                    attributes: Vec::new(),
                    workers: vec![],
                },
                None,
            )
            .expect("sync");
        }
    };
    sync_both(&mut s);
    let shown = s.topology_submit(submission()).expect("submit");
    let placed = shown["workers"][0]["node"]
        .as_str()
        .expect("placed")
        .to_string();
    let other = if placed == "n" { "m" } else { "n" };
    // Past the restart grace, both agents' worker syncs are fresh; only the placed node's
    // heartbeats stop, and the dead-node check declares it dead.
    std::thread::sleep(std::time::Duration::from_millis(1050));
    sync_both(&mut s);
    s.heartbeat(heartbeat_request(ids[&placed], &[], &[]))
        .expect("beat");
    std::thread::sleep(crate::common::SILENCE);
    s.heartbeat(heartbeat_request(ids[other], &[], &[]))
        .expect("beat");
    s.check_dead(crate::common::DEAD_TIMEOUT)
        .expect("dead check");
    s.topology_tick().expect("tick");
    let shown = s.topology_show("pipe").expect("show");
    assert_eq!(shown["generation"], 2, "placed again");
    assert_eq!(shown["reschedules"][0]["cause"], "node-lost");
    assert_eq!(shown["workers"][0]["node"], other);
    drop(s);
}

/// A topology no packing fits on the nodes it may run on (their whole cores, other work left
/// out) is refused at submission when one executor alone is larger than every node, naming the
/// CPU it declares against theirs, and nothing is stored; one that only overcommits its nodes
/// is placed, and its reply names where. Before, 4 executors of 500 % on three 4-core nodes were accepted silently, placed at
/// 500–1000 % of a node, and their workers held every core while batch jobs waited for good.
#[test]
fn an_executor_larger_than_every_node_is_refused_and_an_overcommit_is_placed_and_named() {
    let dir = scratch("too-big");
    let mut s = open(&dir);
    for name in ["a", "b", "c"] {
        join(&mut s, name, Vec::new());
    }
    let sized = |cpu: &str| TopologySubmission {
        text: TOPOLOGY.replace("cpu = 50.0", &format!("cpu = {cpu}")),
        ..submission()
    };
    let e = s.topology_submit(sized("500.0")).expect_err("too big");
    assert_eq!(
        e.to_string(),
        "pipe.toml: topology `pipe` needs more CPU than the 3 nodes it may run on have: its 4 \
         executors declare 2000 % (100 % = one core) against their 1200 %; `numbers#0` alone \
         declares 500 %, more than the largest node's 400 % (and one-phase fills a node to \
         --max-utilisation 0.9 of it: 1080 % in all); no node can hold that executor. Lower \
         the executors' `cpu` or `parallelism`, or add nodes"
    );
    assert_eq!(s.topology_list(), serde_json::json!([]), "nothing stored");
    // Every executor fits a node, but not all of them together: placed, and the reply names
    // the node it overcommits (`topology submit` prints it as a warning).
    let shown = s
        .topology_submit(TopologySubmission {
            placer: "even".into(),
            ..sized("300.0")
        })
        .expect("an overcommit is placed");
    let over = shown["overcommitted"].as_str().unwrap_or("");
    assert!(over.contains("600 % of its 400 %"), "{shown}");
}

/// A topology placed again on the nodes left after one is lost is not refused however little
/// room they have: it keeps running, and `topology show` says which node it overcommits and by
/// how much (JSON `overcommitted`), as the server's log warns.
#[test]
fn a_placement_after_a_node_loss_that_overcommits_the_nodes_left_is_shown() {
    let dir = scratch("lost-overcommits");
    let config = ServerConfig {
        data_dir: dir.clone(),
        dead_timeout: "1s".parse().expect("duration"),
        ..Default::default()
    };
    let mut s =
        State::open(&config, Store::open(&dir.join("state.db")).expect("store")).expect("state");
    let mut ids = std::collections::HashMap::new();
    for name in ["n", "m"] {
        ids.insert(name, join(&mut s, name, Vec::new()));
    }
    // 4 × 150 % = 600 %: two executors on each 4-core node.
    let shown = s
        .topology_submit(TopologySubmission {
            text: TOPOLOGY.replace("cpu = 50.0", "cpu = 150.0"),
            ..submission()
        })
        .expect("submit");
    assert_eq!(nodes_used(&shown), vec!["m".to_string(), "n".to_string()]);
    assert_eq!(shown["overcommitted"], "");
    std::thread::sleep(std::time::Duration::from_millis(1050));
    for name in ["n", "m"] {
        sync_node(&mut s, name, vec![]);
    }
    s.heartbeat(heartbeat_request(ids["n"], &[], &[]))
        .expect("beat");
    std::thread::sleep(crate::common::SILENCE);
    s.heartbeat(heartbeat_request(ids["m"], &[], &[]))
        .expect("beat");
    s.check_dead(crate::common::DEAD_TIMEOUT)
        .expect("dead check");
    s.topology_tick().expect("tick");
    let shown = s.topology_show("pipe").expect("show");
    assert_eq!(shown["reschedules"][0]["cause"], "node-lost", "{shown}");
    assert_eq!(nodes_used(&shown), vec!["m".to_string()]);
    assert_eq!(
        shown["overcommitted"],
        "its executors declare more CPU than their nodes have (100 % = one core): m 600 % of \
         its 400 %; its workers hold every core there and other work waits"
    );
}

/// Registers a 4-core node `name` with `attributes`, and its agent syncs no workers; its id.
fn join(s: &mut State, name: &str, attributes: Vec<String>) -> u32 {
    let id = s
        .register(pb::RegisterRequest {
            name: name.into(),
            cores: 4,
            memory_bytes: 1 << 30,
            identity: IDENTITY.into(),
            attributes,
            ..Default::default()
        })
        .expect("register")
        .node_id;
    s.topology_sync(
        WorkersSeen {
            restated: false,
            start_errors: Vec::new(),
            node: name.into(),
            cores: 4,
            // The state fills it in from the registration.
            attributes: Vec::new(),
            workers: vec![],
        },
        None,
    )
    .expect("sync");
    id
}

/// A state with two 4-core nodes, `a` and `b`, both syncing workers; `batch_on_a` runs a job of
/// four one-core tasks on `a` first.
fn two_nodes(dir: &Path, batch_on_a: bool) -> State {
    let mut s = open(dir);
    let ids: Vec<u32> = ["a", "b"]
        .iter()
        .map(|name| join(&mut s, name, Vec::new()))
        .collect();
    if batch_on_a {
        s.submit("job.toml", JOB, "/").expect("submit job");
        let r = s
            .heartbeat(heartbeat_request(ids[0], &[], &[]))
            .expect("beat");
        assert_eq!(r.assignments.len(), 4, "the batch job fills node a");
    }
    s
}

fn nodes_used(shown: &serde_json::Value) -> Vec<String> {
    let mut v: Vec<String> = shown["placement"]
        .as_array()
        .expect("placement")
        .iter()
        .filter_map(|p| p["node"].as_str().map(str::to_string))
        .collect();
    v.sort();
    v.dedup();
    v
}

#[test]
fn the_placer_sees_the_cores_batch_tasks_and_other_topologies_hold() {
    // Without batch work the topology (2 declared cores) goes to the first of two empty nodes.
    let dir = scratch("busy-free");
    let mut s = two_nodes(&dir, false);
    let shown = s.topology_submit(submission()).expect("submit");
    assert_eq!(nodes_used(&shown), vec!["a".to_string()]);
    // Its worker runs on a and holds 2 cores there: a second topology of 4 × 80 % (one-phase
    // fills a node to 90 %: 360 %) no longer fits on a beside it, and goes to b.
    s.topology_sync(
        WorkersSeen {
            restated: false,
            start_errors: Vec::new(),
            node: "a".into(),
            cores: 4,
            attributes: Vec::new(),
            workers: vec![running_worker(1)],
        },
        None,
    )
    .expect("sync");
    let second = TopologySubmission {
        text: TOPOLOGY
            .replace("name = \"pipe\"", "name = \"other\"")
            .replace("cpu = 50.0", "cpu = 80.0"),
        ..submission()
    };
    let shown = s.topology_submit(second).expect("submit");
    assert_eq!(nodes_used(&shown), vec!["b".to_string()], "{shown}");
    // With node a's four cores held by batch tasks, the placer sees it full and uses b.
    let dir = scratch("busy-full");
    let mut s = two_nodes(&dir, true);
    let shown = s.topology_submit(submission()).expect("submit");
    assert_eq!(nodes_used(&shown), vec!["b".to_string()], "{shown}");
}

#[test]
fn the_placer_puts_no_more_declared_memory_on_a_node_than_it_has_free() {
    // Four executors of 400 MiB on two empty 4-core nodes of 1 GiB: their 2 cores fit on one
    // node, their 1.6 GiB do not, so two go to each node.
    let dir = scratch("memory");
    let mut s = two_nodes(&dir, false);
    let big = TopologySubmission {
        text: TOPOLOGY.replace("cpu = 50.0", "cpu = 50.0\nmemory = \"400MiB\""),
        ..submission()
    };
    let shown = s.topology_submit(big).expect("submit");
    assert_eq!(
        nodes_used(&shown),
        vec!["a".to_string(), "b".to_string()],
        "{shown}"
    );
    for node in ["a", "b"] {
        let here = shown["placement"]
            .as_array()
            .expect("placement")
            .iter()
            .filter(|p| p["node"] == node)
            .count();
        assert_eq!(here, 2, "{node}: {shown}");
    }
    // A worker count past the executors a topology may have is refused, naming the field.
    let dir = scratch("memory-workers");
    let mut s = two_nodes(&dir, false);
    let many = TopologySubmission {
        placer: "even".into(),
        workers: 4_000_000_000,
        ..submission()
    };
    let e = s.topology_submit(many).expect_err("too many workers");
    assert!(
        e.to_string()
            .contains("workers: 4000000000 is more than the 4096"),
        "{e}"
    );
    // Small executors still share one node.
    let dir = scratch("memory-small");
    let mut s = two_nodes(&dir, false);
    let small = TopologySubmission {
        text: TOPOLOGY.replace("cpu = 50.0", "cpu = 50.0\nmemory = \"200MiB\""),
        ..submission()
    };
    let shown = s.topology_submit(small).expect("submit");
    assert_eq!(nodes_used(&shown), vec!["a".to_string()], "{shown}");
}

/// A running worker holds its executors' declared memory on its node, as it holds their cores:
/// batch tasks placed later get only what it leaves, a restart books it again before any sync,
/// and a kill gives it back. (Before, a worker held cores only, and tasks took the memory its
/// placement had counted on.)
#[test]
fn a_running_worker_holds_its_declared_memory_so_later_tasks_do_not_take_it() {
    let dir = scratch("worker-memory");
    let mut s = open(&dir);
    let n = common::register(&mut s, "n", 4);
    assert_eq!(sync(&mut s, vec![]), 0);
    // Four executors of 25 % and 150 MiB each: one worker of one core and 600 MiB.
    let sub = TopologySubmission {
        text: TOPOLOGY.replace("cpu = 50.0", "cpu = 25.0\nmemory = \"150MiB\""),
        ..submission()
    };
    s.topology_submit(sub).expect("submit");
    sync(&mut s, vec![running_worker(1)]);
    assert_eq!(s.topology_held_cores(n), 1);
    assert_eq!(s.topology_held_memory(n), 600 << 20);
    // Four one-core tasks of 200 MiB: three cores are free, but only 424 MiB of the 1 GiB.
    let job = JOB.replace(
        "[application.cpu]",
        "[application.cpu]\nmemory = \"200MiB\"",
    );
    s.submit("job.toml", &job, "/").expect("submit job");
    let r = s.heartbeat(heartbeat_request(n, &[], &[])).expect("beat");
    assert_eq!(
        r.assignments.len(),
        2,
        "tasks get only the memory the worker leaves"
    );
    drop(s);
    // After a restart the worker holds its memory again before its agent syncs.
    let mut s = open(&dir);
    assert_eq!(s.topology_held_memory(n), 600 << 20);
    s.topology_kill("pipe").expect("kill");
    assert_eq!(s.topology_held_memory(n), 0, "a kill gives the memory back");
    assert_eq!(s.topology_held_cores(n), 0);
}

#[test]
fn a_topology_status_is_a_typed_message_with_the_keys_of_the_json_document() {
    let dir = scratch("typed");
    let mut s = two_nodes(&dir, false);
    s.topology_submit(submission()).expect("submit");
    s.topology_sync(
        WorkersSeen {
            restated: false,
            start_errors: Vec::new(),
            node: "a".into(),
            cores: 4,
            attributes: Vec::new(),
            workers: vec![running_worker(1)],
        },
        None,
    )
    .expect("sync");
    s.topology_rebalance("pipe").expect("rebalance");
    let shown = s.topology_show("pipe").expect("show");
    // What the service puts in `TopologyReply.status`, and what the CLI prints from it.
    let typed: pb::TopologyStatus = serde_json::from_value(shown.clone()).expect("fits");
    assert_eq!(typed.name, "pipe");
    assert_eq!(typed.workers[0].pid, Some(4242));
    assert_eq!(typed.placement.len(), 4);
    assert_eq!(serde_json::to_value(&typed).expect("json"), shown);
}

/// What lets an idle cluster cost the server (almost) nothing: an agent running no worker has
/// its sync held until where workers run changes, and the controller's tick sleeps while no
/// topology runs. Both wait on `topology_changes`, which must fire when a submission places a
/// worker or a kill stops one, and stay quiet on syncs and ticks that change nothing.
#[test]
fn held_syncs_and_the_idle_tick_wake_when_workers_are_placed_or_stopped_and_only_then() {
    let dir = scratch("changes");
    let mut s = open(&dir);
    s.register(pb::RegisterRequest {
        name: "n".into(),
        cores: 4,
        memory_bytes: 1 << 30,
        identity: IDENTITY.into(),
        ..Default::default()
    })
    .expect("register");
    assert!(
        !s.topology_running(),
        "no topology: the tick has nothing to do"
    );
    let (mut changes, hold) = s.topology_changes();
    assert_eq!(
        hold,
        std::time::Duration::from_millis(2500),
        "held a quarter of the default 10 s dead timeout"
    );
    // Idle syncs and ticks change nothing a held sync could answer.
    assert_eq!(sync(&mut s, vec![]), 0);
    s.topology_tick().expect("tick");
    assert_eq!(sync(&mut s, vec![]), 0);
    assert!(
        !changes.has_changed().expect("sender alive"),
        "an idle sync or tick must not wake held syncs"
    );
    // A submission places a worker on the node: held syncs wake and the tick has work.
    s.topology_submit(submission()).expect("submit");
    assert!(changes.has_changed().expect("sender alive"));
    changes.borrow_and_update();
    assert!(s.topology_running());
    assert_eq!(sync(&mut s, vec![]), 1, "the woken sync names the worker");
    // The worker runs and reports: nothing moves, nothing wakes.
    sync(&mut s, vec![running_worker(1)]);
    s.topology_tick().expect("tick");
    assert!(!changes.has_changed().expect("sender alive"));
    // Killed: the worker is to stop, and the tick goes back to sleep.
    s.topology_kill("pipe").expect("kill");
    assert!(changes.has_changed().expect("sender alive"));
    assert!(!s.topology_running());
}

/// A topology that `requires` node attributes is placed only on the live nodes whose
/// registration has them (here `b`, although `a` comes first), and one that requires what no live
/// node has is refused, naming what they offer, at the requirement's place in the file (as the
/// parser's own refusals are, `file:line:column: field: …`; before, the message named neither
/// file, line nor field): the entry no node has, or the list when each is had by some node
/// but no node has them all.
#[test]
fn a_topology_that_requires_an_attribute_is_placed_on_the_nodes_that_have_it() {
    let dir = scratch("requires");
    let mut s = open(&dir);
    join(&mut s, "a", Vec::new());
    join(&mut s, "b", vec!["ssd".to_string()]);
    join(&mut s, "c", vec!["gpu".to_string()]);
    let requiring = |what: &str| TopologySubmission {
        text: format!("requires = [{what}]\n{TOPOLOGY}"),
        ..submission()
    };
    let shown = s.topology_submit(requiring("\"ssd\"")).expect("submit");
    assert_eq!(nodes_used(&shown), vec!["b".to_string()], "{shown}");
    assert_eq!(
        shown["requires"],
        serde_json::json!(["ssd"]),
        "`topology show` says so"
    );
    s.topology_kill("pipe").expect("kill");
    let e = s
        .topology_submit(requiring("\"ssd\", \"fpga\""))
        .expect_err("no node has it");
    assert_eq!(
        e.to_string(),
        "pipe.toml:1:20: requires[1]: unknown requirement `fpga`: no live node has it \
         (attributes offered: gpu, ssd)"
    );
    let e = s
        .topology_submit(requiring("\"ssd\", \"gpu\""))
        .expect_err("no node has both");
    assert_eq!(
        e.to_string(),
        "pipe.toml:1:13: requires: no live node has them all, gpu + ssd \
         (attributes offered: gpu, ssd)"
    );
    // Without the requirement the first node serves.
    let shown = s.topology_submit(submission()).expect("submit");
    assert_eq!(nodes_used(&shown), vec!["a".to_string()], "{shown}");
}

/// Stream workers outlive a server restart, so a restarted server holds their cores on their
/// nodes from the start, as the server before it did: batch tasks dispatched before the agent's
/// first worker sync do not oversubscribe the node. (Until this test, the cores were free until
/// that sync.)
#[test]
fn after_a_restart_a_running_workers_cores_are_held_before_its_agent_syncs() {
    let dir = scratch("restart-held");
    let n = {
        let mut s = open(&dir);
        let n = common::register(&mut s, "n", 4);
        sync(&mut s, vec![]);
        s.topology_submit(submission()).expect("submit");
        sync(&mut s, vec![running_worker(1)]);
        assert_eq!(s.topology_held_cores(n), 2);
        n
    }; // the server dies; the worker runs on
    let mut s = open(&dir);
    assert_eq!(s.topology_held_cores(n), 2, "held before any sync");
    s.submit("job.toml", JOB, "/").expect("submit job");
    let r = s.heartbeat(heartbeat_request(n, &[], &[])).expect("beat");
    assert_eq!(
        r.assignments.len(),
        2,
        "batch tasks get only the cores the worker does not hold"
    );
    // The agent syncs and runs the worker: still held, now as a worker seen running.
    sync(&mut s, vec![running_worker(1)]);
    assert_eq!(s.topology_held_cores(n), 2);
}

/// A state whose restart grace (the dead timeout) is 1 s, with 4-core nodes `names` joined.
fn short_grace(dir: &Path, names: &[&str]) -> State {
    let config = ServerConfig {
        data_dir: dir.to_path_buf(),
        dead_timeout: "1s".parse().expect("duration"),
        ..Default::default()
    };
    let mut s =
        State::open(&config, Store::open(&dir.join("state.db")).expect("store")).expect("state");
    for name in names {
        join(&mut s, name, Vec::new());
    }
    s
}

/// The agent of `node` syncs, running `workers`.
fn sync_node(s: &mut State, node: &str, workers: Vec<WorkerSeen>) {
    s.topology_sync(
        WorkersSeen {
            restated: false,
            start_errors: Vec::new(),
            node: node.into(),
            cores: 4,
            attributes: Vec::new(),
            workers,
        },
        None,
    )
    .expect("sync");
}

#[test]
fn a_drain_moves_a_topologys_workers_off_the_node_handing_their_state_over() {
    let dir = scratch("drain-moves");
    let mut s = short_grace(&dir, &["a", "b"]);
    let shown = s.topology_submit(submission()).expect("submit");
    assert_eq!(nodes_used(&shown), vec!["a".to_string()]);
    // Past the restart grace, with the worker running on a.
    std::thread::sleep(std::time::Duration::from_millis(1050));
    sync_node(&mut s, "a", vec![running_worker(1)]);
    sync_node(&mut s, "b", vec![]);
    let drained = s.on_drain("a", true).expect("drain");
    assert_eq!(drained.stream_workers, 1, "the reply says what moves");
    s.topology_tick().expect("tick");
    let shown = s.topology_show("pipe").expect("show");
    assert_eq!(shown["generation"], 2, "placed again");
    assert_eq!(shown["reschedules"][0]["cause"], "node-drained");
    assert_eq!(nodes_used(&shown), vec!["b".to_string()]);
    assert_eq!(
        shown["workers_draining"], 1,
        "the worker on a stays until its executors handed their state over"
    );
    // Every executor moved, and each waits for the state of the one it replaces.
    assert_eq!(shown["reschedules"][0]["executors_moved"], 4);
    assert_eq!(
        s.on_drain("a", true).expect("drain again").stream_workers,
        0,
        "nothing placed on a any more"
    );
    // Later passes leave it on b.
    sync_node(&mut s, "b", vec![]);
    s.topology_tick().expect("tick");
    assert_eq!(s.topology_show("pipe").expect("show")["generation"], 2);
    drop(s);
}

#[test]
fn no_placement_uses_a_drained_node_and_a_topology_with_nowhere_else_to_go_stays() {
    let dir = scratch("drain-places");
    let mut s = short_grace(&dir, &["a", "b"]);
    // Without the drain the topology would go to a, the first of two empty nodes (above).
    s.on_drain("a", true).expect("drain");
    let shown = s.topology_submit(submission()).expect("submit");
    assert_eq!(nodes_used(&shown), vec!["b".to_string()]);
    std::thread::sleep(std::time::Duration::from_millis(1050));
    sync_node(&mut s, "a", vec![]);
    sync_node(&mut s, "b", vec![running_worker(1)]);
    // Both drained: there is no node to move to, so it stays on b, and a rebalance says why.
    let drained = s.on_drain("b", true).expect("drain");
    assert_eq!(drained.stream_workers, 1);
    s.topology_tick().expect("tick");
    let shown = s.topology_show("pipe").expect("show");
    assert_eq!(shown["generation"], 1, "not moved: nowhere to go");
    assert_eq!(nodes_used(&shown), vec!["b".to_string()]);
    let refused = s.topology_rebalance("pipe").expect_err("nowhere to go");
    assert!(
        refused.to_string().contains("drained"),
        "the refusal names the drain: {refused}"
    );
    // a resumed: the topology leaves the drained b for it.
    s.on_drain("a", false).expect("resume");
    sync_node(&mut s, "a", vec![]);
    sync_node(&mut s, "b", vec![running_worker(1)]);
    s.topology_tick().expect("tick");
    let shown = s.topology_show("pipe").expect("show");
    assert_eq!(shown["generation"], 2);
    assert_eq!(shown["reschedules"][0]["cause"], "node-drained");
    assert_eq!(nodes_used(&shown), vec!["a".to_string()]);
    // A drain is kept across a restart, and so is what it means for placements: the restarted
    // server does not move the topology back to b.
    drop(s);
    let mut s = short_grace(&dir, &[]);
    std::thread::sleep(std::time::Duration::from_millis(1050));
    sync_node(&mut s, "a", vec![running_worker(2)]);
    sync_node(&mut s, "b", vec![]);
    s.topology_rebalance("pipe").expect("rebalance");
    let shown = s.topology_show("pipe").expect("show");
    assert_eq!(nodes_used(&shown), vec!["a".to_string()]);
    drop(s);
}

/// A restarted server gives nodes its dead timeout to sync again before a placement on them
/// counts as lost, and `topology rebalance` keeps to that as the controller does. Found by
/// `chaos::streams_soak` (seed 1007): a rebalance in that window placed the topology on the
/// nodes heard from so far, moving every executor off a live node whose agent had not synced
/// yet (their state lost: no running worker of theirs was known to hand it over).
#[test]
fn a_rebalance_right_after_a_restart_waits_for_the_nodes_the_topology_runs_on() {
    let dir = scratch("restart-rebalance");
    {
        let mut s = short_grace(&dir, &["a", "b"]);
        let shown = s.topology_submit(submission()).expect("submit");
        assert_eq!(nodes_used(&shown), vec!["a".to_string()]);
        sync_node(&mut s, "a", vec![running_worker(1)]);
    } // the server dies; the worker on a runs on
    let mut s = short_grace(&dir, &[]);
    // b's agent syncs first; a's has not yet, though its worker runs.
    sync_node(&mut s, "b", vec![]);
    let refused = s
        .topology_rebalance("pipe")
        .expect_err("a is not lost: its agent has its dead timeout to sync");
    assert!(
        refused.to_string().contains("restarted"),
        "the refusal says why: {refused}"
    );
    let shown = s.topology_show("pipe").expect("show");
    assert_eq!(shown["generation"], 1, "not moved: {shown}");
    assert_eq!(nodes_used(&shown), vec!["a".to_string()]);
    // a's agent syncs: the rebalance works again, and the topology stays where it runs.
    sync_node(&mut s, "a", vec![running_worker(1)]);
    let shown = s.topology_rebalance("pipe").expect("rebalance");
    assert_eq!(nodes_used(&shown), vec!["a".to_string()]);
    drop(s);
}

/// A new placement that keeps a running worker tells its agent which running worker to hand
/// the new routes to (`keep_generation`/`keep_worker`); a server restarted before that agent's
/// next sync tells it the same, instead of having it stop the worker and start another (its
/// executors' state lost). Found by `chaos::streams_soak` (seed 1002): a server killed moments
/// after a reschedule restarted every worker the reschedule kept.
#[test]
fn a_server_restarted_before_the_agents_sync_still_hands_a_kept_worker_its_new_placement() {
    let dir = scratch("restart-kept");
    let keep_order = |s: &mut State| {
        s.topology_sync(
            WorkersSeen {
                restated: false,
                start_errors: Vec::new(),
                node: "a".into(),
                cores: 4,
                attributes: Vec::new(),
                workers: vec![running_worker(1)],
            },
            None,
        )
        .expect("sync")
        .workers
        .iter()
        .map(|o| (o.generation, o.worker, o.keep_generation, o.keep_worker))
        .collect::<Vec<_>>()
    };
    {
        let mut s = short_grace(&dir, &["a", "b", "c"]);
        let mut sub = submission();
        sub.placer = "even".into();
        sub.workers = 2;
        let shown = s.topology_submit(sub).expect("submit");
        assert_eq!(nodes_used(&shown), vec!["a".to_string(), "b".to_string()]);
        // Past the restart grace; b is drained: its worker moves to c, a's is kept.
        std::thread::sleep(std::time::Duration::from_millis(1050));
        sync_node(&mut s, "b", vec![]);
        sync_node(&mut s, "c", vec![]);
        assert_eq!(keep_order(&mut s), vec![(1, 0, 0, 0)]);
        s.on_drain("b", true).expect("drain");
        s.topology_tick().expect("tick");
        let shown = s.topology_show("pipe").expect("show");
        assert_eq!(shown["generation"], 2, "{shown}");
        assert_eq!(shown["reschedules"][0]["workers_kept"], 1, "{shown}");
    } // the server dies before a's agent syncs: its worker still runs as (generation 1, 0)
    let mut s = short_grace(&dir, &[]);
    assert_eq!(
        keep_order(&mut s),
        vec![(2, 0, 1, 0)],
        "the restarted server hands a's running worker the new placement"
    );
    drop(s);
}

/// A move hands executors' state over: the worker left behind drains (it is still ordered, as a
/// worker beyond the placement's, until its executors have handed over) and the new worker
/// waits for the state (`await_state`). Both are stored with the topology, so a server
/// restarted before the handover completes still orders the draining worker (its agent does
/// not stop it, its executors' state with it) and has the new worker wait for that state.
#[test]
fn a_server_restarted_during_a_move_still_drains_the_old_worker_and_the_new_one_awaits_its_state() {
    let dir = scratch("restart-draining");
    // (generation, worker, keep_generation, keep_worker, await_state) of the orders `node` gets.
    let orders = |s: &mut State, node: &str, workers: Vec<WorkerSeen>| {
        s.topology_sync(
            WorkersSeen {
                restated: false,
                start_errors: Vec::new(),
                node: node.into(),
                cores: 4,
                attributes: Vec::new(),
                workers,
            },
            None,
        )
        .expect("sync")
        .workers
        .iter()
        .map(|o| {
            (
                o.generation,
                o.worker,
                o.keep_generation,
                o.keep_worker,
                o.config.await_state.clone(),
            )
        })
        .collect::<Vec<_>>()
    };
    {
        let mut s = short_grace(&dir, &["a", "b"]);
        let shown = s.topology_submit(submission()).expect("submit");
        assert_eq!(nodes_used(&shown), vec!["a".to_string()]);
        // Past the restart grace, with the worker running on a; a is drained: it moves to b.
        std::thread::sleep(std::time::Duration::from_millis(1050));
        sync_node(&mut s, "a", vec![running_worker(1)]);
        sync_node(&mut s, "b", vec![]);
        s.on_drain("a", true).expect("drain");
        s.topology_tick().expect("tick");
        let shown = s.topology_show("pipe").expect("show");
        assert_eq!(shown["generation"], 2, "{shown}");
        assert_eq!(shown["workers_draining"], 1, "{shown}");
    } // the server dies before either agent syncs: a's worker still runs as (generation 1, 0)
    let mut s = short_grace(&dir, &[]);
    assert_eq!(
        orders(&mut s, "a", vec![running_worker(1)]),
        vec![(2, 1, 1, 0, vec![])],
        "the restarted server has a's running worker drain (hand over), not stop"
    );
    assert_eq!(
        orders(&mut s, "b", vec![]),
        vec![(2, 0, 0, 0, vec![0, 1, 2, 3])],
        "the new worker waits for the state of every executor that moves to it"
    );
    assert_eq!(
        s.topology_show("pipe").expect("show")["workers_draining"],
        1
    );
    // The new worker runs and reports: it has taken what was handed over (stored too).
    let mut reported = running_worker(2);
    reported.report = Some(worker_report(&[], 0));
    sync_node(&mut s, "b", vec![reported]);
    drop(s);
    // A handover that never completes still ends: the drain is measured from when it began,
    // which the store keeps (here set back past the drain limit while the server is down).
    {
        let db = rusqlite::Connection::open(dir.join("state.db")).expect("db");
        let text: String = db
            .query_row(
                "SELECT record FROM topologies WHERE name = 'pipe'",
                [],
                |r| r.get(0),
            )
            .expect("record");
        let mut rec: serde_json::Value = serde_json::from_str(&text).expect("json");
        assert_eq!(rec["draining"]["1"][0], "a", "{rec}");
        assert!(rec.get("await_state").is_none(), "{rec}");
        let began = rec["draining"]["1"][1].as_u64().expect("since_ms");
        rec["draining"]["1"][1] = (began - 60_000).into();
        db.execute(
            "UPDATE topologies SET record = ?1 WHERE name = 'pipe'",
            [rec.to_string()],
        )
        .expect("update");
    }
    let mut s = short_grace(&dir, &[]);
    assert_eq!(
        orders(&mut s, "a", vec![running_worker(1)]),
        vec![],
        "past the drain limit: a's worker is no longer ordered (its agent stops it)"
    );
    assert_eq!(
        orders(&mut s, "b", vec![]),
        vec![(2, 0, 0, 0, vec![])],
        "the new worker took the state already: a restart of it waits for none"
    );
    drop(s);
}

/// A worker its agent cannot start (`start_errors` in the sync): `show` says why until the
/// worker runs; what another node says of it, or of a worker of an older generation, is ignored,
/// and a long message is cut.
#[test]
fn a_worker_its_agent_cannot_start_shows_why_until_it_runs() {
    use hetsched_server::jobs::topology::{MAX_START_ERROR, WorkerStartError};
    let dir = scratch("start-error");
    let mut s = open(&dir);
    common::register(&mut s, "n", 4);
    sync(&mut s, vec![]);
    s.topology_submit(submission()).expect("submit");
    let error = |node: &str, generation: u64, message: &str| WorkersSeen {
        restated: false,
        start_errors: vec![WorkerStartError {
            topology: "pipe".into(),
            generation,
            worker: 0,
            message: message.into(),
        }],
        node: node.into(),
        cores: 4,
        attributes: Vec::new(),
        workers: Vec::new(),
    };
    let shown =
        |s: &State| s.topology_show("pipe").expect("show")["workers"][0]["start_error"].clone();
    s.topology_sync(error("other", 1, "not mine"), None)
        .expect("sync");
    assert!(shown(&s).is_null(), "another node's word is ignored");
    s.topology_sync(error("n", 0, "old"), None).expect("sync");
    assert!(shown(&s).is_null(), "an older generation's is ignored");
    s.topology_sync(error("n", 1, "no Unix account `alice`"), None)
        .expect("sync");
    assert_eq!(shown(&s), "no Unix account `alice`");
    let long = "é".repeat(MAX_START_ERROR);
    s.topology_sync(error("n", 1, &long), None).expect("sync");
    let cut = shown(&s);
    let cut = cut.as_str().expect("a message");
    assert!(
        cut.len() <= MAX_START_ERROR && cut.len() >= MAX_START_ERROR - 1,
        "{}",
        cut.len()
    );
    // The worker's last words are the owner's components' stderr, shown to every user by
    // `hetsched topology show`: no terminal escape in them, and still bounded once escaped.
    s.topology_sync(
        error("n", 1, "exited: \u{1b}[2J\u{1b}]0;owned\u{7}\r"),
        None,
    )
    .expect("sync");
    assert_eq!(shown(&s), "exited: \\u{1b}[2J\\u{1b}]0;owned\\u{7}\\r");
    let escapes = "\u{1b}".repeat(MAX_START_ERROR);
    s.topology_sync(error("n", 1, &escapes), None)
        .expect("sync");
    let cut = shown(&s);
    let cut = cut.as_str().expect("a message");
    assert!(
        cut.len() <= MAX_START_ERROR && cut.starts_with("\\u{1b}"),
        "{cut}"
    );
    assert!(!cut.chars().any(char::is_control), "{cut:?}");
    // Said no more: gone.
    sync(&mut s, vec![]);
    assert!(shown(&s).is_null());
    s.topology_sync(error("n", 1, "again"), None).expect("sync");
    assert_eq!(shown(&s), "again");
    // It runs: no error.
    sync(&mut s, vec![running_worker(1)]);
    assert!(shown(&s).is_null());
}

/// A worker that cannot start is started again by its agent after a back-off; a sync that
/// comes while the new process lives (before it fails again) reports it running. Once its
/// agent says again that it cannot start it, and runs it no more, it is not running: `show`
/// says why, with no pid and none of the workers running. It read running for ever after
/// the first such sync (a slow-failing worker on a loaded node: the dashboard's
/// `N cannot start` never came back).
#[test]
fn a_worker_that_fails_again_after_a_sync_saw_it_running_shows_why_and_runs_no_more() {
    use hetsched_server::jobs::topology::WorkerStartError;
    let dir = scratch("start-error-again");
    let mut s = open(&dir);
    common::register(&mut s, "n", 4);
    sync(&mut s, vec![]);
    s.topology_submit(submission()).expect("submit");
    let seen = |workers: Vec<WorkerSeen>, message: &str| WorkersSeen {
        restated: false,
        start_errors: vec![WorkerStartError {
            topology: "pipe".into(),
            generation: 1,
            worker: 0,
            message: message.into(),
        }],
        node: "n".into(),
        cores: 4,
        attributes: Vec::new(),
        workers,
    };
    let worker = |s: &State| s.topology_show("pipe").expect("show")["workers"][0].clone();
    let running = |s: &State| s.topology_show("pipe").expect("show")["workers_running"].clone();
    s.topology_sync(
        seen(vec![], "its worker process exited (exit status: 1)"),
        None,
    )
    .expect("sync");
    assert_eq!(
        worker(&s)["start_error"],
        "its worker process exited (exit status: 1)"
    );
    // Started again and not failed yet: the agent reports the process, and still its last
    // words (it keeps them until the worker listens).
    let starting = WorkerSeen {
        addr: String::new(),
        ..running_worker(1)
    };
    s.topology_sync(
        seen(vec![starting], "its worker process exited (exit status: 1)"),
        None,
    )
    .expect("sync");
    assert!(worker(&s)["start_error"].is_null(), "{}", worker(&s));
    assert_eq!(worker(&s)["pid"], 4242);
    assert_eq!(running(&s), 1);
    // It failed again: reaped, not reported, and why said.
    let again = "its worker process exited (exit status: 1), 2 times in a row without listening";
    s.topology_sync(seen(vec![], again), None).expect("sync");
    let w = worker(&s);
    assert_eq!(w["start_error"], again, "{w}");
    assert!(w["pid"].is_null(), "no process runs it: {w}");
    assert_eq!(running(&s), 0, "{w}");
    let listed = s.topology_list();
    assert_eq!(listed[0]["workers"][0]["start_error"], again, "{listed}");
    assert_eq!(listed[0]["workers_running"], 0, "{listed}");
    // It runs at last: no error.
    sync(&mut s, vec![running_worker(1)]);
    assert!(worker(&s)["start_error"].is_null());
    assert_eq!(running(&s), 1);
}

/// A killed topology moves no tuple: its status shows no rate, even after the controller's
/// tick rolls the window that held its last reports.
#[test]
fn a_killed_topology_shows_no_rate_after_the_next_window() {
    use hetsched_stream::WorkerReport;
    use hetsched_stream::metrics::ExecutorReport;
    let dir = scratch("killed-rates");
    let mut s = open(&dir);
    common::register(&mut s, "n", 4);
    sync(&mut s, vec![]);
    s.topology_submit(submission()).expect("submit");
    let report = |tuples: u64| WorkerReport {
        executors: vec![ExecutorReport {
            executor: 0,
            name: "numbers#0".into(),
            cpu_ns: tuples * 1_000,
            emitted: tuples,
            received: 0,
            acked: 0,
            failed: 0,
            done: false,
            started_ns: 1,
            unacked: 0,
            expired: 0,
            restarts: 0,
            ended: None,
            gave_up: false,
        }],
        ..worker_report(&[(0, 2)], tuples)
    };
    let mut worker = running_worker(1);
    worker.report = Some(report(10));
    sync(&mut s, vec![worker.clone()]);
    std::thread::sleep(std::time::Duration::from_millis(1100));
    worker.report = Some(report(1_000));
    sync(&mut s, vec![worker]);
    s.topology_kill("pipe").expect("killed");
    std::thread::sleep(std::time::Duration::from_millis(2100));
    s.topology_tick().expect("tick");
    let shown = s.topology_show("pipe").expect("show");
    assert_eq!(shown["throughput_tuples_per_s"], 0.0, "{shown}");
    assert_eq!(shown["inter_node_tuples_per_s"], 0.0, "{shown}");
}

/// What a worker says of its multi-lang executors — a bolt's unacked and expired inputs, its
/// program's restarts, why the program last ended, whether the worker gave up on it — reaches
/// `topology show` (the JSON and the typed status share its keys) and `/metrics`; why the
/// program ended is the owner's program's doing, so it is shown with no terminal escape.
#[test]
fn an_executors_program_restarts_and_unacked_inputs_reach_topology_show_and_metrics() {
    use hetsched_stream::metrics::ExecutorReport;
    let dir = scratch("multilang-figures");
    let mut s = open(&dir);
    let mut registry = prometheus_client::registry::Registry::with_prefix("hetsched");
    s.register_topology_metrics(&mut registry);
    common::register(&mut s, "n", 4);
    sync(&mut s, vec![]);
    s.topology_submit(submission()).expect("submit");
    let bolt = |executor: u32, restarts: u64, ended: Option<&str>, gave_up: bool| ExecutorReport {
        executor,
        name: format!("keep#{}", executor - 2),
        cpu_ns: 0,
        emitted: 0,
        received: 0,
        acked: 0,
        failed: 0,
        done: false,
        started_ns: 1,
        unacked: 7 * u64::from(executor),
        expired: 3,
        restarts,
        ended: ended.map(String::from),
        gave_up,
    };
    let mut worker = running_worker(1);
    worker.report = Some(hetsched_stream::WorkerReport {
        executors: vec![
            bolt(
                2,
                2,
                Some("keep#0: the program exited (exit status: 3)\u{1b}[2J"),
                false,
            ),
            bolt(
                3,
                5,
                Some("keep#1: the program ended 6 times within 300 s"),
                true,
            ),
        ],
        ..worker_report(&[], 0)
    });
    sync(&mut s, vec![worker]);
    let shown = s.topology_show("pipe").expect("show");
    let x = |e: usize, k: &str| shown["executors"][e][k].clone();
    assert_eq!(x(2, "unacked"), 14, "{shown}");
    assert_eq!(x(2, "expired"), 3);
    assert_eq!(x(2, "restarts"), 2);
    assert_eq!(
        x(2, "ended"),
        "keep#0: the program exited (exit status: 3)\\u{1b}[2J"
    );
    assert_eq!(x(2, "gave_up"), false);
    assert_eq!(x(3, "gave_up"), true);
    assert_eq!(x(3, "restarts"), 5);
    // An executor its worker has not reported: nothing said of it.
    assert!(x(0, "restarts").is_null() && x(0, "ended").is_null());
    let typed: pb::TopologyStatus = serde_json::from_value(shown.clone()).expect("typed");
    let t = &typed.executors[3];
    assert_eq!(
        (t.unacked, t.expired, t.restarts, t.gave_up),
        (Some(21), Some(3), Some(5), Some(true))
    );
    assert_eq!(
        t.ended.as_deref(),
        Some("keep#1: the program ended 6 times within 300 s")
    );
    s.topology_tick().expect("tick");
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).expect("encode");
    for line in [
        "hetsched_topology_program_restarts{topology=\"pipe\"} 7",
        "hetsched_topology_executors_given_up{topology=\"pipe\"} 1",
        "hetsched_topology_unacked_inputs{topology=\"pipe\"} 35",
        "hetsched_topology_expired_inputs{topology=\"pipe\"} 6",
    ] {
        assert!(text.contains(line), "no `{line}` in\n{text}");
    }
    // No latency measured yet: no p99 series (Prometheus practice), not a p99 of 0 s.
    let p99 = "hetsched_topology_latency_p99_seconds{topology=\"pipe\"}";
    assert!(!text.contains(p99), "`{p99}` with no sample in\n{text}");
    // Once a worker measured some, the series says their 99th percentile.
    let mut worker = running_worker(1);
    worker.report = Some(hetsched_stream::WorkerReport {
        latency: hetsched_stream::metrics::LatencySummary {
            count: 10,
            p50_us: 1_000,
            p99_us: 250_000,
            max_us: 300_000,
        },
        ..worker_report(&[], 0)
    });
    sync(&mut s, vec![worker]);
    s.topology_tick().expect("tick");
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).expect("encode");
    assert!(
        text.lines().any(|l| l == format!("{p99} 0.25")),
        "`{p99} 0.25` in\n{text}"
    );
}

/// A purged topology has no series in `/metrics`: `topology show` no longer knows it, so its
/// throughput, workers and nodes do not stay at their last running values. A killed one keeps
/// its series, reading 0. Before, a purged topology's gauges stayed as they were, for ever.
#[test]
fn a_purged_topology_leaves_no_series_in_metrics() {
    let dir = scratch("purged-metrics");
    let mut s = open(&dir);
    let mut registry = prometheus_client::registry::Registry::with_prefix("hetsched");
    s.register_topology_metrics(&mut registry);
    common::register(&mut s, "n", 4);
    sync(&mut s, vec![]);
    s.topology_submit(submission()).expect("submit");
    sync(&mut s, vec![running_worker(1)]);
    s.topology_tick().expect("tick");
    let scrape = || {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).expect("encode");
        text
    };
    let text = scrape();
    for line in [
        "hetsched_topology_workers_running{topology=\"pipe\"} 1",
        "hetsched_topology_nodes_used{topology=\"pipe\"} 1",
    ] {
        assert!(text.lines().any(|l| l == line), "no `{line}` in\n{text}");
    }
    s.topology_kill("pipe").expect("kill");
    s.topology_tick().expect("tick");
    let text = scrape();
    assert!(
        text.lines()
            .any(|l| l == "hetsched_topology_workers_running{topology=\"pipe\"} 0"),
        "killed: still listed, no worker running\n{text}"
    );
    s.topology_purge("pipe").expect("purge");
    let text = scrape();
    assert!(
        !text.contains("topology=\"pipe\""),
        "purged, before any tick: no series of it\n{text}"
    );
    s.topology_tick().expect("tick");
    let text = scrape();
    assert!(
        !text.contains("topology=\"pipe\""),
        "purged: no series of it\n{text}"
    );
}

/// The server's log as a test reads it: what `tracing` writes while `f` runs on this thread.
fn logged<T>(f: impl FnOnce() -> T) -> (T, String) {
    #[derive(Clone, Default)]
    struct Buffer(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);
    impl std::io::Write for Buffer {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().expect("log").extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let buffer = Buffer::default();
    let writer = buffer.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_ansi(false)
        .with_max_level(tracing::Level::WARN)
        .with_writer(move || writer.clone())
        .finish();
    let out = tracing::subscriber::with_default(subscriber, f);
    let text = String::from_utf8_lossy(&buffer.0.lock().expect("log")).into_owned();
    (out, text)
}

/// An executor its worker gave up on passes no tuple: before, only its own row said so
/// (`gave_up`), and the topology read `running` in `topology show`, `topology list` and
/// `/metrics` as if it were whole. Now the topology is `degraded` there, naming the
/// executor, and the server warns once per give-up (not at every sync), again when a later
/// run of the executor (started anew) is given up on too.
#[test]
fn an_executor_given_up_on_makes_its_topology_degraded_and_is_warned_about_once() {
    use hetsched_stream::metrics::ExecutorReport;
    let dir = scratch("multilang-degraded");
    let mut s = open(&dir);
    let mut registry = prometheus_client::registry::Registry::with_prefix("hetsched");
    s.register_topology_metrics(&mut registry);
    common::register(&mut s, "n", 4);
    sync(&mut s, vec![]);
    s.topology_submit(submission()).expect("submit");
    let report = |gave_up: bool, started_ns: u64| {
        let mut worker = running_worker(1);
        worker.report = Some(hetsched_stream::WorkerReport {
            executors: vec![ExecutorReport {
                executor: 3,
                name: "keep#1".into(),
                cpu_ns: 0,
                emitted: 0,
                received: 0,
                acked: 0,
                failed: 0,
                done: false,
                started_ns,
                unacked: 0,
                expired: 0,
                restarts: 5,
                ended: Some("keep#1: the program ended 6 times within 300 s".into()),
                gave_up,
            }],
            ..worker_report(&[], 0)
        });
        worker
    };
    sync(&mut s, vec![report(false, 1)]);
    let shown = s.topology_show("pipe").expect("show");
    assert_eq!(shown["degraded"], false, "{shown}");
    assert_eq!(shown["executors_given_up"], serde_json::json!([]));
    let (_, log) = logged(|| {
        for _ in 0..3 {
            sync(&mut s, vec![report(true, 1)]);
        }
    });
    assert_eq!(
        log.matches("topology degraded").count(),
        1,
        "one warning per give-up:\n{log}"
    );
    assert!(
        log.contains("executor keep#1 was given up on")
            && log.contains("the program ended 6 times within 300 s"),
        "{log}"
    );
    let shown = s.topology_show("pipe").expect("show");
    assert_eq!(shown["state"], "running", "the state keeps its values");
    assert_eq!(shown["degraded"], true, "{shown}");
    assert_eq!(shown["executors_given_up"], serde_json::json!(["keep#1"]));
    let typed: pb::TopologyStatus = serde_json::from_value(shown).expect("typed");
    assert!(typed.degraded);
    assert_eq!(typed.executors_given_up, ["keep#1"]);
    let listed = s.topology_list();
    assert_eq!(listed[0]["degraded"], true, "{listed}");
    assert_eq!(
        listed[0]["executors_given_up"],
        serde_json::json!(["keep#1"])
    );
    s.topology_tick().expect("tick");
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).expect("encode");
    assert!(
        text.contains("hetsched_topology_degraded{topology=\"pipe\"} 1"),
        "{text}"
    );
    // A later run of the executor given up on too is warned about again.
    let (_, log) = logged(|| sync(&mut s, vec![report(true, 2)]));
    assert_eq!(log.matches("topology degraded").count(), 1, "{log}");
    // A killed topology is not degraded: nothing of it runs.
    s.topology_kill("pipe").expect("kill");
    let shown = s.topology_show("pipe").expect("show");
    assert_eq!(shown["degraded"], false, "{shown}");
}

/// `hetsched topology purge NAME` forgets a killed topology — its record, traffic and owner
/// leave the store, so a restart does not bring it back and its name is free for anyone — and
/// refuses a running one; the `[retention]` rule's `keep_finished` purges killed topologies by
/// itself.
#[test]
fn a_killed_topology_is_purged_by_hand_or_by_the_retention_rule_and_its_name_is_free() {
    let dir = scratch("purge");
    let mut s = open(&dir);
    s.on_add_user("alice", false).expect("alice");
    common::register(&mut s, "n", 4);
    sync(&mut s, vec![]);
    s.topology_submit_as(submission(), "alice")
        .expect("alice's");
    let e = s.topology_purge("pipe").expect_err("running");
    assert!(e.to_string().contains("is running: kill it first"), "{e}");
    s.topology_kill("pipe").expect("killed");
    s.topology_purge("pipe").expect("purged");
    assert_eq!(s.topology_list().as_array().map(Vec::len), Some(0));
    let e = s.topology_purge("pipe").expect_err("gone");
    assert!(e.to_string().contains("pipe"), "{e}");
    drop(s);
    let mut s = open(&dir);
    assert_eq!(
        s.topology_list().as_array().map(Vec::len),
        Some(0),
        "a restart does not bring it back"
    );
    // Its name is free: the admin (or another user) may take it.
    s.topology_submit(submission()).expect("the admin's now");
    assert_eq!(s.topology_show("pipe").expect("show")["owner"], "admin");
    // The retention rule: killed longer ago than `keep_finished`.
    s.topology_kill("pipe").expect("killed");
    assert_eq!(
        s.purge_killed_topologies(3_600_000_000_000).expect("kept"),
        0
    );
    std::thread::sleep(std::time::Duration::from_millis(20));
    assert_eq!(s.purge_killed_topologies(10_000_000).expect("purged"), 1);
    assert_eq!(s.topology_list().as_array().map(Vec::len), Some(0));
}

/// A worker that started on a full node holds its cores as the node's tasks end: the cores a
/// heartbeat's results free go to it before the batch policy fills the node, so new tasks
/// never take what the worker runs on (its agent, which counts the worker's cores, would hold
/// them queued for as long as the topology runs).
#[test]
fn the_cores_tasks_free_go_to_a_worker_short_of_its_cores_before_new_tasks() {
    let dir = scratch("short");
    let mut s = open(&dir);
    let mut agent = common::Agent::new(&mut s, 4);
    sync(&mut s, vec![]);
    s.topology_submit(submission()).expect("submit");
    assert_eq!(sync(&mut s, vec![]), 1, "told to run the worker");
    // Before the worker runs, four tasks take the node's four cores.
    s.submit(
        "job.toml",
        "[[application]]\nname = \"a\"\ntasks = 8\n[application.cpu]\ncommand = \"true\"\n",
        "/",
    )
    .expect("submit job");
    let sent = agent.beat(&mut s, &[]);
    assert_eq!(sent.len(), 4);
    // The worker runs: nothing free to book yet.
    sync(&mut s, vec![running_worker(1)]);
    assert_eq!(s.topology_held_cores(agent.node), 0);
    // Two tasks end: their cores go to the worker, and no new task is sent.
    let done: Vec<(u64, u32, bool)> = sent[..2].iter().map(|&(t, a)| (t, a, true)).collect();
    let more = agent.beat(&mut s, &done);
    assert_eq!(s.topology_held_cores(agent.node), 2);
    assert!(more.is_empty(), "the worker's cores were given to {more:?}");
    // The other two end: the node has room for two tasks again.
    let done: Vec<(u64, u32, bool)> = sent[2..].iter().map(|&(t, a)| (t, a, true)).collect();
    assert_eq!(agent.beat(&mut s, &done).len(), 2);
    assert_eq!(s.topology_held_cores(agent.node), 2);
}

/// A stream worker runs on while the server is down, and the accounts say so: its two cores
/// are credited for the time between the last stored accounts and the restart once its agent's
/// first sync lists it running.
#[test]
fn the_accounts_credit_a_worker_for_the_time_the_server_was_down() {
    use hetsched_server::state::now_ns;
    let dir = scratch("down");
    let today = hetsched_server::accounting::day_of(now_ns());
    let booked = {
        let mut s = open(&dir);
        let n = common::register(&mut s, "n", 4);
        sync(&mut s, vec![]);
        s.topology_submit(submission()).expect("submit");
        sync(&mut s, vec![]);
        sync(&mut s, vec![running_worker(1)]);
        assert_eq!(s.topology_held_cores(n), 2);
        let booked = now_ns();
        // The accounts as stored every minute; then the server is gone (no stop).
        s.store_usage().expect("stored");
        booked
    };
    std::thread::sleep(std::time::Duration::from_millis(1_000));
    let mut s = open(&dir);
    sync(&mut s, vec![running_worker(1)]);
    let span = (now_ns() - booked) as f64 / 1e9;
    let admin: f64 = s
        .usage_report(today, today + 1, None)
        .expect("report")
        .iter()
        .filter(|r| r.owner == hetsched_server::users::ADMIN)
        .map(|r| r.held.core_seconds)
        .sum();
    assert!(
        admin >= 2.0 * (span - 0.1) && admin <= 2.0 * span + 0.1,
        "the worker's two cores all along ({span:.2} s): {admin:.3} core-seconds"
    );
}

/// A topology with more executor pairs than `one-phase` can walk is refused at submission, naming
/// the stream, even with no node up (before, it was accepted and its placement failed at the
/// first node's beat); `even`, which never walks pairs, takes it.
#[test]
fn too_many_pairs_for_a_traffic_aware_placer_is_refused_at_submission_with_no_node_up() {
    let dir = scratch("too-many-pairs");
    let mut s = open(&dir);
    let wide = TOPOLOGY.replace(
        "parallelism = 2\ncpu = 50.0",
        "parallelism = 2048\ncpu = 1.0",
    );
    assert_eq!(wide.matches("parallelism = 2048").count(), 2);
    let one_phase = TopologySubmission {
        text: wide.clone(),
        ..submission()
    };
    let e = s.topology_submit(one_phase).expect_err("4,194,304 pairs");
    let said = e.to_string();
    assert!(
        said.contains("`numbers` -> `keep`") && said.contains("4,194,304 pairs"),
        "{said}"
    );
    let even = TopologySubmission {
        text: wide,
        placer: "even".into(),
        ..submission()
    };
    s.topology_submit(even).expect("even places without pairs");
}

/// Pair counts an agent reports between executors that do not exist, or that no stream joins,
/// are not kept nor shown (before, every pair a report named was kept, whatever it was: the
/// server's measurement grew with whatever its agents sent).
#[test]
fn traffic_reported_between_executors_no_stream_joins_is_not_kept() {
    let dir = scratch("bad-pairs");
    let mut s = open(&dir);
    common::register(&mut s, "n", 4);
    sync(&mut s, vec![]);
    s.topology_submit(submission()).expect("submit");
    // numbers#0 -> keep#0 is a stream's; keep#0 -> numbers#0 (backwards), numbers#0 ->
    // numbers#1 (no stream) and executors 9 and 4,000,000,000 (none) are not.
    let report = |tuples: u64| {
        worker_report(
            &[(0, 2), (2, 0), (0, 1), (9, 2), (0, 4_000_000_000)],
            tuples,
        )
    };
    let mut worker = running_worker(1);
    worker.report = Some(report(10));
    sync(&mut s, vec![worker.clone()]);
    std::thread::sleep(std::time::Duration::from_millis(2100));
    worker.report = Some(report(1_000));
    sync(&mut s, vec![worker]);
    s.topology_tick().expect("tick");
    let shown = s.topology_show("pipe").expect("show");
    let traffic: Vec<(String, String)> = shown["traffic"]
        .as_array()
        .expect("traffic")
        .iter()
        .map(|p| (p["from"].to_string(), p["to"].to_string()))
        .collect();
    assert_eq!(
        traffic,
        vec![("\"numbers#0\"".to_string(), "\"keep#0\"".to_string())],
        "{shown}"
    );
}

/// Worker 0's counters: `tuples` on each (sender, receiver) executor pair of `pairs`, nothing
/// else.
fn worker_report(pairs: &[(u32, u32)], tuples: u64) -> hetsched_stream::WorkerReport {
    use hetsched_stream::metrics::{LatencySummary, PairCount};
    hetsched_stream::WorkerReport {
        worker: 0,
        at_ns: hetsched_server::state::now_ns(),
        pairs: pairs
            .iter()
            .map(|&(from, to)| PairCount { from, to, tuples })
            .collect(),
        executors: Vec::new(),
        remote_out: 0,
        remote_in: 0,
        dropped: 0,
        latency: LatencySummary::default(),
        rss_bytes: 0,
        encrypted: false,
        refused_connections: 0,
    }
}

/// A sync speaks only for the workers placed on (or draining from) its own node: node `a`
/// reporting the worker the placement puts on `b` is not taken. Before, it was: `a`'s address
/// replaced the worker's, every other worker was sent there for its peer, and the cores it
/// declares were booked on `b`, which ran nothing of it.
#[test]
fn a_sync_does_not_speak_for_a_worker_placed_on_another_node() {
    let dir = scratch("other-node");
    let mut s = open(&dir);
    let ids: Vec<u32> = ["a", "b"]
        .iter()
        .map(|name| join(&mut s, name, Vec::new()))
        .collect();
    let mut sub = submission();
    sub.placer = "even".into();
    sub.workers = 2;
    let shown = s.topology_submit(sub).expect("submit");
    assert_eq!(shown["workers"][0]["node"], "a", "{shown}");
    assert_eq!(shown["workers"][1]["node"], "b", "{shown}");
    // a's agent runs its own worker 0, and says it runs b's worker 1 too.
    let mut own = running_worker(1);
    own.report = Some(worker_report(&[(0, 2)], 10));
    let mut other = running_worker(1);
    other.worker = 1;
    other.addr = "10.9.9.9:9".into();
    other.pid = 666;
    other.report = Some(worker_report(&[(1, 3)], 10));
    sync_node(&mut s, "a", vec![own, other]);
    let shown = s.topology_show("pipe").expect("show");
    assert_eq!(shown["workers"][0]["addr"], "127.0.0.1:1", "{shown}");
    assert!(
        shown["workers"][1]["addr"].is_null() && shown["workers"][1]["pid"].is_null(),
        "b's worker does not run until b says so: {shown}"
    );
    assert_eq!(shown["workers_running"], 1, "{shown}");
    assert_eq!(s.topology_held_cores(ids[1]), 0, "nothing of it runs on b");
    // b's agent is told no peer at a's false address.
    let told = s
        .topology_sync(
            WorkersSeen {
                restated: false,
                start_errors: Vec::new(),
                node: "b".into(),
                cores: 4,
                attributes: Vec::new(),
                workers: vec![],
            },
            None,
        )
        .expect("sync");
    assert_eq!(told.workers.len(), 1);
    assert!(
        told.workers[0]
            .peers
            .values()
            .all(|addr| addr != "10.9.9.9:9"),
        "{:?}",
        told.workers[0].peers
    );
}

/// The executor traffic the controller measured is stored with each computation and read back
/// at a restart, so a restarted server places by what it measured, as the running one did.
/// Before, the stored list was never read: a `topology rebalance` (or a node's loss or drain)
/// right after a restart placed by the declared rates instead, and moved a topology measured
/// onto one node back over two.
#[test]
fn a_restarted_server_places_by_the_traffic_measured_before_the_restart() {
    let dir = scratch("restart-traffic");
    // Each of the 4 executors declares a whole core: over two 4-core nodes as declared (one
    // holds 360 % at most), on one as measured (the spouts run at a fraction of the declared
    // rate).
    let sub = || TopologySubmission {
        text: TOPOLOGY.replace("cpu = 50.0", "cpu = 100.0"),
        interval_ms: 200,
        gain_threshold: 0.1,
        ..submission()
    };
    // Every node syncs the workers `running` places on it, each with a report of measured
    // traffic if `reporting` (none, as right after a restart, if not).
    let sync_all = |s: &mut State, running: &[(String, u64, u32)], reporting: bool| {
        for node in ["a", "b", "c"] {
            let workers = running
                .iter()
                .filter(|(n, _, _)| n == node)
                .map(|(_, generation, worker)| WorkerSeen {
                    worker: *worker,
                    report: reporting.then(|| worker_report(&[(0, 2), (0, 3), (1, 2), (1, 3)], 1)),
                    ..running_worker(*generation)
                })
                .collect();
            sync_node(s, node, workers);
        }
    };
    let workers = |shown: &serde_json::Value, generation: u64| -> Vec<(String, u64, u32)> {
        shown["workers"]
            .as_array()
            .expect("workers")
            .iter()
            .map(|w| {
                (
                    w["node"].as_str().expect("node").to_string(),
                    generation,
                    w["worker"].as_u64().expect("index") as u32,
                )
            })
            .collect()
    };
    {
        let mut s = short_grace(&dir, &["a", "b", "c"]);
        let shown = s.topology_submit(sub()).expect("submit");
        assert_eq!(nodes_used(&shown).len(), 2, "as declared: {shown}");
        let running = workers(&shown, 1);
        std::thread::sleep(std::time::Duration::from_millis(600));
        sync_all(&mut s, &running, true);
        // The controller asks for fresh reports, gets them, and computes from them.
        s.topology_tick().expect("tick");
        sync_all(&mut s, &running, true);
        s.topology_tick().expect("tick");
        let shown = s.topology_show("pipe").expect("show");
        assert_eq!(shown["reschedules"][0]["cause"], "traffic", "{shown}");
        assert_eq!(nodes_used(&shown).len(), 1, "as measured: {shown}");
    } // the server dies
    let mut s = short_grace(&dir, &[]);
    let shown = s.topology_show("pipe").expect("show");
    let running = workers(&shown, 2);
    // Past the restart grace, every node synced; no worker has reported since the restart.
    std::thread::sleep(std::time::Duration::from_millis(1050));
    sync_all(&mut s, &running, false);
    let shown = s.topology_rebalance("pipe").expect("rebalance");
    assert_eq!(
        nodes_used(&shown).len(),
        1,
        "placed by the traffic measured before the restart: {shown}"
    );
    // Killed and submitted again, it is a new topology: what the old one measured is not its
    // traffic, before a restart or after.
    s.topology_kill("pipe").expect("kill");
    let shown = s.topology_submit(sub()).expect("submit again");
    assert_eq!(shown["replaced_killed"], true);
    assert_eq!(nodes_used(&shown).len(), 2, "as declared: {shown}");
    let running = workers(&shown, 1);
    drop(s);
    let mut s = short_grace(&dir, &[]);
    std::thread::sleep(std::time::Duration::from_millis(1050));
    sync_all(&mut s, &running, false);
    let shown = s.topology_rebalance("pipe").expect("rebalance");
    assert_eq!(
        nodes_used(&shown).len(),
        2,
        "placed as declared, not by the killed topology's traffic: {shown}"
    );
    drop(s);
}

/// A topology's `gain_threshold` is refused as `sim stream-paper --gain-threshold` refuses it
/// (one check, `hetsched_core::policy::stream::reschedule::check_gain_threshold`): NaN, infinite
/// and negative thresholds, each with the value given.
#[test]
fn a_gain_threshold_that_is_not_a_finite_number_0_or_more_is_refused_with_its_value() {
    let dir = scratch("gain-threshold");
    let mut s = two_nodes(&dir, false);
    for bad in [f64::NAN, f64::INFINITY, -0.1] {
        let e = s
            .topology_submit(TopologySubmission {
                gain_threshold: bad,
                ..submission()
            })
            .expect_err("refused");
        assert!(
            e.to_string().contains(&format!(
                "gain_threshold must be a finite number, 0 or more, got {bad}"
            )),
            "{bad}: {e}"
        );
    }
    s.topology_submit(TopologySubmission {
        gain_threshold: 0.0,
        ..submission()
    })
    .expect("0 is a threshold");
}

/// A store in `dir` where node `n`'s agent runs topology `pipe`'s one worker (pid 4242).
fn pipe_running_on_n(dir: &Path) -> State {
    let mut s = open(dir);
    common::register(&mut s, "n", 4);
    sync(&mut s, vec![]);
    s.topology_submit(submission()).expect("submit");
    sync(&mut s, vec![running_worker(1)]);
    assert_eq!(worker(&s)["pid"], 4242);
    s
}

/// `pipe`'s first worker as `topology show` shows it.
fn worker(s: &State) -> serde_json::Value {
    s.topology_show("pipe").expect("show")["workers"][0].clone()
}

/// An agent speaks for every worker of its node: one it no longer reports runs no more, and
/// `topology show` drops its process and address at once (its peers are not sent a dead
/// address either). Before, the server kept the last process it heard of until a new one was
/// reported: an agent killed and started again (its workers die with it) left `show` naming
/// the dead process, and a server restarted then adopted "a new pid" (`chaos::topology_soak`,
/// seed 9200).
#[test]
fn a_worker_its_agent_no_longer_reports_shows_no_process_until_one_runs_again() {
    let dir = scratch("agent-restarted");
    let mut s = pipe_running_on_n(&dir);
    // The agent was killed and started again: its first sync runs no worker.
    assert_eq!(
        sync(&mut s, vec![]),
        1,
        "it is told to start the worker again"
    );
    let w = worker(&s);
    assert!(w["pid"].is_null(), "no process runs it: {w}");
    assert_eq!(s.topology_show("pipe").expect("show")["workers_running"], 0);
    // The new process.
    sync(
        &mut s,
        vec![WorkerSeen {
            pid: 5151,
            ..running_worker(1)
        }],
    );
    assert_eq!(worker(&s)["pid"], 5151);
    drop(s);
}

/// A held sync looked at again (`WorkersSeen::restated`) speaks only for when it was sent: an
/// agent started again may have reported a new process in another call since, and the old
/// call's empty lists neither forget that process nor replace what the node said it cannot
/// start. The first look of a call still speaks for every worker of the node.
#[test]
fn a_held_sync_looked_at_again_forgets_no_worker_reported_since() {
    use hetsched_server::jobs::topology::WorkerStartError;
    let dir = scratch("restated-sync");
    let mut s = pipe_running_on_n(&dir);
    let restated = |start_errors: Vec<WorkerStartError>| WorkersSeen {
        restated: true,
        start_errors,
        node: "n".into(),
        cores: 4,
        attributes: Vec::new(),
        workers: Vec::new(),
    };
    let told = s.topology_sync(restated(Vec::new()), None).expect("sync");
    assert_eq!(told.workers.len(), 1, "it is still told what runs there");
    assert_eq!(
        worker(&s)["pid"],
        4242,
        "the process runs on: {}",
        worker(&s)
    );
    assert_eq!(s.topology_show("pipe").expect("show")["workers_running"], 1);
    // Nor does an old call's start error stop a worker reported running since.
    s.topology_sync(
        restated(vec![WorkerStartError {
            topology: "pipe".into(),
            generation: 1,
            worker: 0,
            message: "old words".into(),
        }]),
        None,
    )
    .expect("sync");
    let w = worker(&s);
    assert_eq!(w["pid"], 4242, "{w}");
    assert!(w["start_error"].is_null(), "{w}");
    // A call's first look speaks for the node.
    sync(&mut s, vec![]);
    assert!(worker(&s)["pid"].is_null(), "{}", worker(&s));
    drop(s);
}

/// A worker a new placement keeps runs on under its old key until its agent has taken the new
/// routes: reported so, it still runs (its process and counters are kept), and a worker of
/// the node reported under no key at all does not.
#[test]
fn a_kept_worker_reported_under_its_old_key_still_runs() {
    let dir = scratch("kept-old-key");
    let mut s = short_grace(&dir, &["a", "b", "c"]);
    let mut sub = submission();
    sub.placer = "even".into();
    sub.workers = 2;
    s.topology_submit(sub).expect("submit");
    std::thread::sleep(std::time::Duration::from_millis(1050));
    sync_node(&mut s, "a", vec![running_worker(1)]);
    sync_node(
        &mut s,
        "b",
        vec![WorkerSeen {
            worker: 1,
            pid: 4343,
            ..running_worker(1)
        }],
    );
    sync_node(&mut s, "c", vec![]);
    s.on_drain("b", true).expect("drain");
    s.topology_tick().expect("tick");
    let shown = s.topology_show("pipe").expect("show");
    assert_eq!(shown["generation"], 2, "{shown}");
    assert_eq!(shown["reschedules"][0]["workers_kept"], 1, "{shown}");
    // a's agent has not synced since: it still reports the worker as (generation 1, 0).
    sync_node(&mut s, "a", vec![running_worker(1)]);
    let shown = s.topology_show("pipe").expect("show");
    let on_a: Vec<&serde_json::Value> = shown["workers"]
        .as_array()
        .expect("workers")
        .iter()
        .filter(|w| w["node"] == "a")
        .collect();
    assert_eq!(on_a.len(), 1, "{shown}");
    assert_eq!(on_a[0]["pid"], 4242, "the kept worker runs on: {shown}");
    drop(s);
}
