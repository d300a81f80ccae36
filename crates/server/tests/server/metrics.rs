//! The metrics the state keeps, without a network: a scripted sequence of heartbeats (a success, a
//! retried failure, a lost task, a final failure, a repeated result, a repeated submission) and
//! the exposition text the registry encodes afterwards.

use crate::common;
use crate::common::Scratch;

use common::heartbeat_request;
use hetsched_proto as pb;
use hetsched_server::ServerConfig;
use hetsched_server::convert::Wire;
use hetsched_server::metrics::registry;
use hetsched_server::state::State;
use hetsched_server::store::Store;
use std::sync::{Arc, Mutex};

fn beat(
    s: &mut State,
    node: u32,
    running: &[(u64, u32)],
    results: &[(u64, u32, bool)],
) -> Vec<(u64, u32)> {
    s.heartbeat(pb::HeartbeatRequest {
        read_bytes_per_sec: 1.5e6,
        available_memory_bytes: 3 << 30,
        disk_free_bytes: Some(5 << 30),
        min_free_disk: 1 << 30,
        gpus: vec![pb::GpuUtilisation {
            device: 0,
            percent: 50,
        }],
        ..heartbeat_request(node, running, results)
    })
    .expect("heartbeat")
    .assignments
    .iter()
    .map(|a| (a.task_id, a.attempt))
    .collect()
}

const FLAKY: &str =
    "[[application]]\nname = \"f\"\ntasks = 3\nretries = 1\n[application.cpu]\ncommand = \"x\"\n";

#[test]
fn counters_follow_results_losses_and_submissions_and_gauges_the_state() {
    let d = Scratch::new("metrics", "scrape");
    let config = ServerConfig {
        data_dir: d.clone(),
        max_attempts: 2,
        ..Default::default()
    };
    let mut s =
        State::open(&config, Store::open(&d.join("state.db")).expect("store")).expect("state");
    let n = common::register(&mut s, "n", 2);
    s.submit_keyed("job.toml", FLAKY, "/", "k").expect("submit");
    s.submit_keyed("job.toml", FLAKY, "/", "k")
        .expect("same key: the same job");
    assert_eq!(beat(&mut s, n, &[], &[]), vec![(0, 1), (1, 1)]);
    // 0 fails and is retried, 1 succeeds.
    assert_eq!(
        beat(&mut s, n, &[], &[(0, 1, false), (1, 1, true)]),
        vec![(0, 2), (2, 1)]
    );
    // 0 vanishes from the node: lost, dispatched again.
    assert_eq!(beat(&mut s, n, &[(2, 1)], &[]), vec![(0, 3)]);
    // 0 fails for good (retries spent), 2 succeeds; 1's result again is not counted again.
    assert!(beat(&mut s, n, &[], &[(0, 3, false), (2, 1, true), (1, 1, true)]).is_empty());

    // An agent that says its version (`n` is an older one that does not).
    let drained = s
        .register(pb::RegisterRequest {
            version: "0.9.1".into(),
            ..common::registration("d", 1)
        })
        .expect("register")
        .node_id;
    s.heartbeat(common::heartbeat_request(drained, &[], &[]))
        .expect("beat");
    s.on_drain("d", true).expect("drained");
    let metrics = s.metrics();
    let reg = registry(&metrics, Arc::new(Mutex::new(s)), "fifo");
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &reg).expect("encode");
    for line in [
        "hetsched_tasks_dispatched_total{variant=\"cpu\"} 5",
        "hetsched_tasks_dispatched_total{variant=\"gpu\"} 0",
        "hetsched_task_results_total{outcome=\"succeeded\"} 2",
        "hetsched_task_results_total{outcome=\"retried\"} 1",
        "hetsched_task_results_total{outcome=\"failed\"} 1",
        "hetsched_tasks_lost_total{cause=\"node\"} 1",
        "hetsched_tasks_lost_total{cause=\"disk\"} 0",
        "hetsched_jobs_submitted_total 1",
        "hetsched_scheduler_decision_duration_seconds_count 3",
        "hetsched_policy_info{policy=\"fifo\"} 1",
        "hetsched_tasks{state=\"succeeded\"} 2",
        "hetsched_tasks{state=\"failed\"} 1",
        "hetsched_tasks{state=\"pending\"} 0",
        "hetsched_tasks{state=\"running\"} 0",
        "hetsched_nodes{state=\"alive\"} 2",
        "hetsched_nodes{state=\"dead\"} 0",
        "hetsched_node_up{node=\"n\"} 1",
        "hetsched_node_drained{node=\"n\"} 0",
        "hetsched_node_drained{node=\"d\"} 1",
        "hetsched_node_free_cores{node=\"n\"} 2",
        "hetsched_node_running_tasks{node=\"n\"} 0",
        "hetsched_node_disk_read_bytes_per_second{node=\"n\"} 1500000.0",
        "hetsched_node_available_memory_bytes{node=\"n\"} 3221225472.0",
        "hetsched_node_disk_free_bytes{node=\"n\"} 5368709120.0",
        "hetsched_node_min_free_disk_bytes{node=\"n\"} 1073741824.0",
        "hetsched_node_gpu_utilisation_ratio{node=\"n\",device=\"0\"} 0.5",
    ] {
        assert!(text.lines().any(|l| l == line), "{line} in\n{text}");
    }
    // Which version each agent runs (`unknown`: an agent that predates saying it), and the
    // server's own.
    for line in [
        format!(
            "hetsched_server_info{{version=\"{}\"}} 1",
            env!("CARGO_PKG_VERSION")
        ),
        "hetsched_node_agent_info{node=\"n\",version=\"unknown\"} 1".to_string(),
        "hetsched_node_agent_info{node=\"d\",version=\"0.9.1\"} 1".to_string(),
    ] {
        assert!(text.lines().any(|l| l == line), "{line} in\n{text}");
    }
    let _ = std::fs::remove_dir_all(&d);
}

/// With `prefetch`, the tasks an agent holds queued are counted among the running, and
/// apart: in all and per node.
#[test]
fn queued_tasks_are_gauged_among_the_running_and_apart() {
    let d = Scratch::new("metrics", "queued");
    let config = ServerConfig {
        data_dir: d.clone(),
        prefetch: hetsched_server::state::prefetch::Setting::Cores(2),
        ..Default::default()
    };
    let mut s =
        State::open(&config, Store::open(&d.join("state.db")).expect("store")).expect("state");
    let n = common::register(&mut s, "n", 1);
    s.submit_keyed("job.toml", FLAKY, "/", "k").expect("submit");
    assert_eq!(
        beat(&mut s, n, &[], &[]).len(),
        3,
        "one on the core, two queued"
    );
    let metrics = s.metrics();
    let reg = registry(&metrics, Arc::new(Mutex::new(s)), "fifo");
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &reg).expect("encode");
    for line in [
        "hetsched_tasks{state=\"running\"} 3",
        "hetsched_tasks_queued 2",
        "hetsched_node_running_tasks{node=\"n\"} 3",
        "hetsched_node_queued_tasks{node=\"n\"} 2",
    ] {
        assert!(text.lines().any(|l| l == line), "{line} in\n{text}");
    }
    let _ = std::fs::remove_dir_all(&d);
}

/// Lost workflow instances are counted as batch tasks are, by cause: one whose inputs found no
/// room on its node's disk (its agent's `no room for inputs: `) under `cause="disk"`, one that
/// vanished from its node under `cause="node"`. Before, neither was counted at all.
#[test]
fn lost_workflow_instances_are_counted_by_cause() {
    let d = Scratch::new("metrics", "lost");
    let config = ServerConfig {
        data_dir: d.clone(),
        ..Default::default()
    };
    let mut s =
        State::open(&config, Store::open(&d.join("state.db")).expect("store")).expect("state");
    let n = common::register(&mut s, "n", 2);
    let beat = |s: &mut State, running: &[(u64, u32)], results: Vec<pb::TaskResult>| {
        let mut req = pb::HeartbeatRequest {
            disk_free_bytes: Some(5 << 30),
            min_free_disk: 1 << 30,
            ..heartbeat_request(n, running, &[])
        };
        req.results = results;
        s.heartbeat(req)
            .expect("heartbeat")
            .assignments
            .iter()
            .map(|a| (a.task_id, a.attempt))
            .collect::<Vec<_>>()
    };
    beat(&mut s, &[], Vec::new());
    s.submit(
        "wf.toml",
        "[[task]]\nname = \"P\"\ninstances = 1\ncost = \"1s\"\noutputs = [\"m\"]\n\
         command = \"true\"\n\
         [[task]]\nname = \"C\"\ninstances = 2\ncost = \"1s\"\ninputs = [\"m\"]\n\
         command = \"true\"\n",
        "/",
    )
    .expect("submit");
    let p = beat(&mut s, &[], Vec::new());
    assert_eq!(p.len(), 1, "the producer runs");
    let done = pb::TaskResult {
        task_id: p[0].0,
        attempt: p[0].1,
        success: true,
        started_ns: 1,
        finished_ns: 2,
        ..Default::default()
    };
    let c = beat(&mut s, &[], vec![done]);
    assert_eq!(c.len(), 2, "both consumers run");
    // The first finds no room for its input; the second runs on.
    let no_room = pb::TaskResult {
        task_id: c[0].0,
        attempt: c[0].1,
        exit_code: -1,
        interrupted: true,
        message: "no room for inputs: input `m` from node 0 (wf/1/P-0/out/m at 127.0.0.1:1): \
                  this node's disk is too full for it"
            .into(),
        started_ns: 1,
        finished_ns: 2,
        ..Default::default()
    };
    beat(&mut s, &c[1..], vec![no_room]);
    // Then the second vanishes from its node.
    beat(&mut s, &[], Vec::new());
    let metrics = s.metrics();
    let reg = registry(&metrics, Arc::new(Mutex::new(s)), "fifo");
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &reg).expect("encode");
    for line in [
        "hetsched_tasks_lost_total{cause=\"disk\"} 1",
        "hetsched_tasks_lost_total{cause=\"node\"} 1",
    ] {
        assert!(text.lines().any(|l| l == line), "{line} in\n{text}");
    }
    let _ = std::fs::remove_dir_all(&d);
}

/// A store that refuses writes (a full disk) pauses dispatch and refuses submissions: the
/// metrics say so, and how much room the store's filesystem has left, so an alert fires before
/// and while it happens (`/healthz` stays `ok`: the server runs, and a restart frees nothing).
#[test]
fn a_store_that_refuses_writes_and_the_room_left_for_it_are_gauged() {
    let d = Scratch::new("metrics", "disk");
    let config = ServerConfig {
        data_dir: d.clone(),
        ..Default::default()
    };
    let mut s =
        State::open(&config, Store::open(&d.join("state.db")).expect("store")).expect("state");
    let n = common::register(&mut s, "n", 2);
    s.submit("job.toml", FLAKY, "/").expect("submit");
    assert_eq!(beat(&mut s, n, &[], &[]), vec![(0, 1), (1, 1)]);
    let metrics = s.metrics();
    let state = Arc::new(Mutex::new(s));
    let reg = registry(&metrics, state.clone(), "fifo");
    let scrape = || {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &reg).expect("encode");
        text
    };
    let text = scrape();
    assert!(text.contains("hetsched_store_writable 1\n"), "{text}");
    let free = text
        .lines()
        .find_map(|l| l.strip_prefix("hetsched_store_disk_free_bytes "))
        .unwrap_or_else(|| panic!("no hetsched_store_disk_free_bytes in {text}"));
    assert!(free.parse::<f64>().is_ok_and(|b| b > 0.0), "{free}");
    // The store's size, its WAL apart (a WAL that keeps growing: checkpoints held back).
    for file in ["db", "wal"] {
        let size = text
            .lines()
            .find_map(|l| l.strip_prefix(&format!("hetsched_store_bytes{{file=\"{file}\"}} ")))
            .unwrap_or_else(|| panic!("no hetsched_store_bytes of the {file} in {text}"));
        assert!(size.parse::<f64>().is_ok_and(|b| b > 0.0), "{file}: {size}");
    }
    {
        let mut s = state.lock().expect("lock");
        s.simulate_full_disk(true);
        s.heartbeat(heartbeat_request(n, &[], &[(1, 1, true)]))
            .expect_err("the store refused the beat's commit");
    }
    let text = scrape();
    assert!(text.contains("hetsched_store_writable 0\n"), "{text}");
    {
        let mut s = state.lock().expect("lock");
        s.simulate_full_disk(false);
        std::thread::sleep(hetsched_server::state::PROBE_INTERVAL);
        s.heartbeat(heartbeat_request(n, &[], &[(1, 1, true)]))
            .expect("the store accepts writes again");
    }
    let text = scrape();
    assert!(text.contains("hetsched_store_writable 1\n"), "{text}");
    let _ = std::fs::remove_dir_all(&d);
}

/// After a server restart, a node whose agent has not beaten yet is `returning` (`hetsched nodes
/// --state returning`), not dead: `/metrics` says so (`hetsched_nodes{state="returning"}`) and
/// keeps `hetsched_node_up` at 1, so that the usual `hetsched_node_up == 0` alert does not fire
/// at every server restart; once the node is declared dead it is 0.
#[test]
fn nodes_returning_after_a_restart_are_up_and_counted_apart_from_dead_ones() {
    let d = Scratch::new("metrics", "returning");
    let config = ServerConfig {
        data_dir: d.clone(),
        ..Default::default()
    };
    let open =
        || State::open(&config, Store::open(&d.join("state.db")).expect("store")).expect("state");
    {
        let mut s = open();
        common::register(&mut s, "a", 2);
        common::register(&mut s, "b", 2);
    }
    // Right after a restart, before any agent beats: both returning, both up.
    let s = open();
    assert!(
        s.nodes(false)
            .nodes
            .iter()
            .all(|n| !n.alive && n.returning_ms.is_some()),
        "both returning"
    );
    common::assert_metrics(
        s,
        "hdas",
        &[
            "hetsched_nodes{state=\"alive\"} 0",
            "hetsched_nodes{state=\"returning\"} 2",
            "hetsched_nodes{state=\"dead\"} 0",
            "hetsched_node_up{node=\"a\"} 1",
            "hetsched_node_up{node=\"b\"} 1",
        ],
    );
    // `b` is declared dead once its wait after the restart (at least 5 s) runs out; `a` came
    // back meanwhile.
    let mut s = open();
    std::thread::sleep(std::time::Duration::from_millis(5_100));
    s.heartbeat(heartbeat_request(0, &[], &[]))
        .expect("a is back");
    s.check_dead(std::time::Duration::from_secs(1))
        .expect("check");
    common::assert_metrics(
        s,
        "hdas",
        &[
            "hetsched_nodes{state=\"alive\"} 1",
            "hetsched_nodes{state=\"returning\"} 0",
            "hetsched_nodes{state=\"dead\"} 1",
            "hetsched_node_up{node=\"a\"} 1",
            "hetsched_node_up{node=\"b\"} 0",
        ],
    );
}
