//! Multi-node tasks (`nodes = N`): the server gathers N whole nodes, holding each as it drains,
//! starts the task on the node whose beat completed the gathering with every node's host name,
//! keeps them across a restart, and gives them back when the task ends or one of them is gone.

use crate::common;

use common::beat;
use hetsched_proto as pb;
use hetsched_server::ServerConfig;
use hetsched_server::convert::Wire;
use hetsched_server::state::State;
use hetsched_server::store::Store;
use std::path::Path;

fn open(d: &Path) -> State {
    open_with(d, hetsched_server::state::prefetch::Setting::default())
}

fn open_with(d: &Path, prefetch: hetsched_server::state::prefetch::Setting) -> State {
    let config = ServerConfig {
        data_dir: d.to_path_buf(),
        prefetch,
        ..Default::default()
    };
    State::open(&config, Store::open(&d.join("state.db")).expect("store")).expect("state")
}

fn register(s: &mut State, name: &str, cores: u32) -> u32 {
    s.register(pb::RegisterRequest {
        identity: common::IDENTITY.into(),
        name: name.into(),
        hostname: format!("{name}.cluster"),
        cores,
        memory_bytes: 1 << 30,
        ..Default::default()
    })
    .expect("register")
    .node_id
}

fn submit(s: &mut State, app: &str, tasks: u32, extra: &str, cpu: &str) -> u64 {
    s.submit(
        "job.toml",
        &format!(
            "[[application]]\nname = \"{app}\"\ntasks = {tasks}\n{extra}\n[application.cpu]\ncommand = \"true\"\n{cpu}\n"
        ),
        "/",
    )
    .expect("submit")
    .job_id
}

fn assigned(r: &pb::HeartbeatReply) -> Vec<u64> {
    r.assignments.iter().map(|a| a.task_id).collect()
}

/// What each node is held for (`hetsched nodes`).
fn held_for(s: &State) -> Vec<String> {
    s.nodes(true)
        .nodes
        .into_iter()
        .map(|n| n.held_for)
        .collect()
}

/// The multi-node tasks (task, attempt) a reply tells its node it is a member of.
fn member_of(r: &pb::HeartbeatReply) -> Vec<(u64, u32)> {
    r.member_of.iter().map(|t| (t.task_id, t.attempt)).collect()
}

fn reason(s: &State, job: u64) -> String {
    s.job(job).expect("job").pending_reason
}

#[test]
fn a_multi_node_task_gathers_whole_nodes_as_they_drain_and_holds_them_until_it_ends() {
    let d = common::scratch("multi-node", "gather");
    let (a, b, c);
    {
        let mut s = open(&d);
        a = register(&mut s, "a", 2);
        b = register(&mut s, "b", 2);
        c = register(&mut s, "c", 2);
        // A two-core task fills node a.
        submit(&mut s, "long", 1, "", "cores = 2");
        assert_eq!(assigned(&beat(&mut s, a, &[], &[])), vec![0]);
        // The three-node task gathers b and c at once, and a as it drains.
        let mpi = submit(&mut s, "mpi", 1, "nodes = 3", "");
        assert!(beat(&mut s, b, &[], &[]).assignments.is_empty());
        assert!(beat(&mut s, c, &[], &[]).assignments.is_empty());
        assert!(beat(&mut s, a, &[(0, 1)], &[]).assignments.is_empty());
        assert_eq!(
            reason(&s, mpi),
            "gathering 3 whole nodes for `mpi`: 3 held, waiting for what runs on them to end"
        );
        assert_eq!(held_for(&s), ["gathering for job 2 (`mpi`)"; 3]);
        // Held nodes take no other work, however small.
        let small = submit(&mut s, "small", 2, "", "");
        assert!(beat(&mut s, b, &[], &[]).assignments.is_empty());
        assert!(beat(&mut s, c, &[], &[]).assignments.is_empty());
        assert_eq!(
            reason(&s, small),
            "resources: every node that can run it is held whole for a multi-node task"
        );
        // Node a drains: the task starts there, a first in its node list.
        let r = beat(&mut s, a, &[], &[(0, 1, true)]);
        assert_eq!(assigned(&r), vec![1]);
        let t = &r.assignments[0];
        assert_eq!(t.hosts, ["a.cluster", "b.cluster", "c.cluster"]);
        assert_eq!(t.node_names, ["a", "b", "c"]);
        assert_eq!(t.node_cores, [2, 2, 2]);
        assert_eq!(held_for(&s), ["task 1 of job 2 (`mpi`)"; 3]);
        assert_eq!(t.cores, 2, "its agent counts all of the node's cores busy");
        let listed = &s.tasks(mpi).expect("tasks").tasks[0];
        assert_eq!(listed.state, "running", "{listed:?}");
        assert_eq!(
            (listed.node.as_str(), &listed.nodes[..]),
            ("a", &["a", "b", "c"].map(String::from)[..])
        );
        assert!(beat(&mut s, b, &[], &[]).assignments.is_empty());
        assert_eq!(
            reason(&s, small),
            "resources: every node that can run it is held whole for a multi-node task"
        );
    } // the server stops; its store remains
    let mut s = open(&d);
    // Restarted, it holds the running task's three nodes again.
    assert!(beat(&mut s, b, &[], &[]).assignments.is_empty());
    assert!(beat(&mut s, c, &[], &[]).assignments.is_empty());
    assert!(beat(&mut s, a, &[(1, 1)], &[]).assignments.is_empty());
    assert_eq!(s.tasks(2).expect("tasks").tasks[0].nodes, ["a", "b", "c"]);
    // The task ends: its nodes take the small tasks, and its listing still names them all.
    let r = beat(&mut s, a, &[], &[(1, 1, true)]);
    assert_eq!(assigned(&r), vec![2, 3]);
    assert_eq!(held_for(&s), ["", "", ""], "held for nothing once it ended");
    let listed = &s.tasks(2).expect("tasks").tasks[0];
    assert_eq!(
        (
            listed.state.as_str(),
            listed.node.as_str(),
            &listed.nodes[..]
        ),
        ("succeeded", "a", &["a", "b", "c"].map(String::from)[..])
    );
    drop(s);
    // Nothing of the ended task is held after another restart; it is listed as before, and so
    // is it from every job's listing.
    let mut s = open(&d);
    assert_eq!(s.tasks(2).expect("tasks").tasks[0].nodes, ["a", "b", "c"]);
    let every = s.tasks(0).expect("tasks");
    let mpi = every.tasks.iter().find(|t| t.id == 1).expect("listed");
    assert_eq!(mpi.nodes, ["a", "b", "c"]);
    assert!(
        every
            .tasks
            .iter()
            .filter(|t| t.id != 1)
            .all(|t| t.nodes.is_empty()),
        "{every:?}"
    );
    let late = submit(&mut s, "later", 2, "", "");
    assert_eq!(late, 4);
    assert_eq!(assigned(&beat(&mut s, b, &[], &[])).len(), 2);
}

#[test]
fn a_store_of_the_earlier_version_keeps_its_running_multi_node_tasks_nodes() {
    // The previous version kept a running multi-node task's nodes in `meta` rows
    // `multi-node/TASK/K`; opening such a store moves them into the task's row.
    let d = common::scratch("multi-node", "upgrade");
    {
        let mut s = open(&d);
        let a = register(&mut s, "a", 1);
        let b = register(&mut s, "b", 1);
        submit(&mut s, "mpi", 1, "nodes = 2", "");
        beat(&mut s, a, &[], &[]);
        assert_eq!(assigned(&beat(&mut s, b, &[], &[])), vec![0]);
    }
    {
        let db = rusqlite::Connection::open(d.join("state.db")).expect("db");
        let others: String = db
            .query_row("SELECT other_nodes FROM tasks WHERE id = 0", [], |r| {
                r.get(0)
            })
            .expect("row");
        assert_eq!(others, "0", "node a's id, beside node b where it runs");
        db.execute_batch(
            "UPDATE tasks SET other_nodes = '' WHERE id = 0;
             INSERT INTO meta(key, value) VALUES ('multi-node/0/0000', 1), ('multi-node/0/0001', 0);",
        )
        .expect("the earlier version's rows");
    }
    let mut s = open(&d);
    let t = &s.tasks(1).expect("tasks").tasks[0];
    assert_eq!(
        (t.state.as_str(), &t.nodes[..]),
        ("running", &["b", "a"].map(String::from)[..])
    );
    // Both are held: a one-core task waits until it ends.
    submit(&mut s, "small", 1, "", "");
    assert!(beat(&mut s, 0, &[], &[]).assignments.is_empty());
    assert_eq!(assigned(&beat(&mut s, 1, &[], &[(0, 1, true)])), vec![1]);
    let db = rusqlite::Connection::open(d.join("state.db")).expect("db");
    let left: i64 = db
        .query_row(
            "SELECT COUNT(*) FROM meta WHERE key LIKE 'multi-node/%'",
            [],
            |r| r.get(0),
        )
        .expect("count");
    assert_eq!(left, 0, "moved, not copied");
}

#[test]
fn a_free_node_replaces_a_busy_member_and_a_task_whose_other_node_dies_runs_again() {
    let d = common::scratch("multi-node", "death");
    let mut s = open(&d);
    let a = register(&mut s, "a", 1);
    let b = register(&mut s, "b", 1);
    submit(&mut s, "long", 1, "", "");
    assert_eq!(assigned(&beat(&mut s, a, &[], &[])), vec![0]);
    submit(&mut s, "mpi", 1, "nodes = 2\nretries = 0", "");
    // a (busy) joins first; then b; then c, wholly free, replaces a and the task starts on c.
    assert!(beat(&mut s, a, &[(0, 1)], &[]).assignments.is_empty());
    assert!(beat(&mut s, b, &[], &[]).assignments.is_empty());
    let c = register(&mut s, "c", 1);
    let r = beat(&mut s, c, &[], &[]);
    assert_eq!(assigned(&r), vec![1]);
    assert_eq!(r.assignments[0].node_names, ["c", "b"]);
    // b falls silent and is declared dead: the task is lost, c's agent is told to kill it, and
    // it runs again (a lost attempt is not a failure).
    std::thread::sleep(crate::common::SILENCE);
    beat(&mut s, c, &[(1, 1)], &[]);
    beat(&mut s, a, &[(0, 1)], &[]);
    s.check_dead(crate::common::DEAD_TIMEOUT).expect("check");
    let r = beat(&mut s, c, &[(1, 1)], &[]);
    assert_eq!(
        r.kill
            .iter()
            .map(|k| (k.task_id, k.attempt))
            .collect::<Vec<_>>(),
        vec![(1, 1)]
    );
    let t = &s.tasks(2).expect("tasks").tasks[0];
    assert_eq!(t.state, "pending", "{t:?}");
    assert!(
        t.message
            .contains("node `b` of the multi-node task is gone"),
        "{t:?}"
    );
    // Two live nodes remain: once a drains, the task starts again on a and c.
    beat(&mut s, c, &[], &[]);
    let r = beat(&mut s, a, &[], &[(0, 1, true)]);
    assert_eq!(assigned(&r), vec![1]);
    assert_eq!(r.assignments[0].attempt, 2);
    let mut nodes = r.assignments[0].node_names.clone();
    nodes.sort();
    assert_eq!(nodes, ["a", "c"]);
}

#[test]
fn a_multi_node_task_needs_as_many_nodes_as_it_holds() {
    let d = common::scratch("multi-node", "few");
    let mut s = open(&d);
    let a = register(&mut s, "a", 2);
    register(&mut s, "b", 2);
    let e = s
        .submit(
            "job.toml",
            "[[application]]\nname = \"mpi\"\ntasks = 1\nnodes = 3\n[application.cpu]\ncommand = \"true\"\n",
            "/",
        )
        .expect_err("refused");
    assert!(
        e.to_string().contains(
            "application `mpi` needs 3 whole nodes per task, and the cluster has 2 nodes"
        ),
        "{e}"
    );
    // Two of two: it runs, and a node drained meanwhile leaves it waiting, saying why.
    let job = submit(&mut s, "mpi", 1, "nodes = 2", "");
    s.drain_node("b", true, "").expect("drain");
    assert!(beat(&mut s, a, &[], &[]).assignments.is_empty());
    assert_eq!(
        reason(&s, job),
        "`mpi` needs 2 whole nodes per task, and 1 live node can run it"
    );
    assert!(s.job(job).expect("job").blocked);
}

#[test]
fn max_running_holds_back_the_next_multi_node_task_and_its_nodes_stay_free() {
    let d = common::scratch("multi-node", "throttle");
    let mut s = open(&d);
    let n: Vec<u32> = ["a", "b", "c", "d"]
        .iter()
        .map(|name| register(&mut s, name, 1))
        .collect();
    submit(&mut s, "mpi", 2, "nodes = 2\nmax_running = 1", "");
    assert!(beat(&mut s, n[0], &[], &[]).assignments.is_empty());
    assert_eq!(assigned(&beat(&mut s, n[1], &[], &[])), vec![0]);
    // The second task may not start: c and d are not held for it, and take other work.
    assert!(beat(&mut s, n[2], &[], &[]).assignments.is_empty());
    submit(&mut s, "small", 1, "", "");
    assert_eq!(assigned(&beat(&mut s, n[3], &[], &[])), vec![2]);
    // The first ends: the second gathers a and b again.
    assert!(
        beat(&mut s, n[1], &[], &[(0, 1, true)])
            .assignments
            .is_empty()
    );
    let r = beat(&mut s, n[0], &[], &[]);
    assert_eq!(assigned(&r), vec![1]);
    assert_eq!(r.assignments[0].node_names, ["a", "b"]);
}

#[test]
fn prefetch_lends_nothing_on_a_held_node() {
    let d = common::scratch("multi-node", "prefetch");
    let mut s = open_with(&d, hetsched_server::state::prefetch::Setting::Cores(4));
    let a = register(&mut s, "a", 2);
    let b = register(&mut s, "b", 2);
    submit(&mut s, "long", 1, "", "cores = 2");
    assert_eq!(assigned(&beat(&mut s, a, &[], &[])), vec![0]);
    submit(&mut s, "mpi", 1, "nodes = 2", "");
    submit(&mut s, "small", 8, "", "");
    // b is held for the gathering, a as it drains: neither is handed tasks to queue.
    assert!(beat(&mut s, b, &[], &[]).assignments.is_empty());
    assert!(beat(&mut s, a, &[(0, 1)], &[]).assignments.is_empty());
    let r = beat(&mut s, a, &[], &[(0, 1, true)]);
    assert_eq!(assigned(&r), vec![1], "only the multi-node task");
    assert!(beat(&mut s, b, &[], &[]).assignments.is_empty());
    // It ends: both nodes take small tasks again, queued ones included.
    let r = beat(&mut s, a, &[], &[(1, 1, true)]);
    assert!(
        r.assignments.iter().any(|t| t.prefetched),
        "{:?}",
        assigned(&r)
    );
}

#[test]
fn a_gathering_yields_its_nodes_to_higher_priority_work_but_not_to_equal_priority() {
    let d = common::scratch("multi-node", "priority");
    let mut s = open(&d);
    let a = register(&mut s, "a", 2);
    let b = register(&mut s, "b", 2);
    // A one-core task on a; the two-node task holds b whole and a's free core.
    submit(&mut s, "long", 1, "", "");
    assert_eq!(assigned(&beat(&mut s, a, &[], &[])), vec![0]);
    let mpi = submit(&mut s, "mpi", 1, "nodes = 2", "");
    assert!(beat(&mut s, b, &[], &[]).assignments.is_empty());
    assert!(beat(&mut s, a, &[(0, 1)], &[]).assignments.is_empty());
    // Work of the same priority waits for it...
    let same = submit(&mut s, "same", 1, "", "");
    assert!(beat(&mut s, b, &[], &[]).assignments.is_empty());
    assert_eq!(
        reason(&s, same),
        "resources: every node that can run it is held whole for a multi-node task"
    );
    // ...work of a higher priority does not: b is given back, and its tasks start there.
    let urgent = submit(&mut s, "urgent", 3, "priority = 5", "cores = 2");
    assert_eq!(assigned(&beat(&mut s, b, &[], &[])), vec![3]);
    assert_eq!(
        reason(&s, mpi),
        "`mpi` waits for 2 whole nodes: higher priority work may start on 2 of the 2 that can run it"
    );
    assert_eq!(
        reason(&s, urgent),
        "resources: the nodes that can run it are busy"
    );
    // Once nothing of a higher priority is left to start, the gathering resumes.
    assert_eq!(
        assigned(&beat(&mut s, a, &[(0, 1)], &[(0, 1, true)])),
        vec![4]
    );
    assert_eq!(assigned(&beat(&mut s, b, &[], &[(3, 1, true)])), vec![5]);
    assert!(beat(&mut s, a, &[(4, 1)], &[]).assignments.is_empty());
    assert!(beat(&mut s, b, &[(5, 1)], &[]).assignments.is_empty());
    assert_eq!(
        reason(&s, mpi),
        "gathering 2 whole nodes for `mpi`: 2 held, waiting for what runs on them to end"
    );
    assert!(beat(&mut s, a, &[], &[(4, 1, true)]).assignments.is_empty());
    let r = beat(&mut s, b, &[], &[(5, 1, true)]);
    assert_eq!(assigned(&r), vec![1]);
    assert_eq!(r.assignments[0].node_names, ["b", "a"]);
}

#[test]
fn a_full_disk_rolls_memory_back_with_a_running_multi_node_task_holding_all_its_nodes() {
    let d = common::scratch("multi-node", "full-disk");
    let mut s = open(&d);
    let a = register(&mut s, "a", 1);
    let b = register(&mut s, "b", 1);
    submit(&mut s, "mpi", 1, "nodes = 2", "");
    beat(&mut s, a, &[], &[]);
    assert_eq!(assigned(&beat(&mut s, b, &[], &[])), vec![0]);
    submit(&mut s, "small", 1, "", "");
    // Its end cannot be stored: memory is rebuilt from the store, where it still runs.
    s.simulate_full_disk(true);
    s.heartbeat(common::heartbeat_request(b, &[], &[(0, 1, true)]))
        .expect_err("the store refused the commit");
    assert!(s.is_paused());
    // Paused, the server still tells member a that it holds its cores for the task (its
    // agent would otherwise end under it at its idle timeout).
    let r = beat(&mut s, a, &[], &[]);
    assert!(s.is_paused());
    assert_eq!(member_of(&r), [(0, 1)]);
    s.simulate_full_disk(false);
    std::thread::sleep(hetsched_server::state::PROBE_INTERVAL);
    // Node a is still held by it: the small task does not start there.
    assert!(beat(&mut s, a, &[], &[]).assignments.is_empty());
    assert!(!s.is_paused());
    let t = &s.tasks(1).expect("tasks").tasks[0];
    assert_eq!(
        (t.state.as_str(), &t.nodes[..]),
        ("running", &["b", "a"].map(String::from)[..])
    );
    // The end, reported again, is stored, and the nodes are free.
    assert_eq!(assigned(&beat(&mut s, b, &[], &[(0, 1, true)])), vec![1]);
    assert_eq!(s.tasks(1).expect("tasks").tasks[0].state, "succeeded");
}

#[test]
fn a_multi_node_task_whose_nodes_are_free_starts_while_one_served_before_it_gathers() {
    let d = common::scratch("multi-node", "backfill");
    let mut s = open(&d);
    let a = common::register_with(&mut s, "a", 1, &["ib"]);
    let b = common::register_with(&mut s, "b", 1, &["ib"]);
    let c = register(&mut s, "c", 1);
    // Long tasks run on a and b.
    submit(&mut s, "long", 2, "", "");
    assert_eq!(assigned(&beat(&mut s, a, &[], &[])), vec![0]);
    assert_eq!(assigned(&beat(&mut s, b, &[], &[])), vec![1]);
    // The wide task needs both InfiniBand nodes and is served first; it holds them as they drain.
    let wide = submit(
        &mut s,
        "wide",
        1,
        "nodes = 2\npriority = 5\nrequires = [\"ib\"]",
        "",
    );
    let narrow = submit(&mut s, "narrow", 1, "nodes = 2", "");
    assert!(beat(&mut s, a, &[(0, 1)], &[]).assignments.is_empty());
    assert!(beat(&mut s, b, &[(1, 1)], &[]).assignments.is_empty());
    assert!(beat(&mut s, c, &[], &[]).assignments.is_empty());
    assert_eq!(
        reason(&s, narrow),
        "`narrow` waits for multi-node tasks served before it to gather their nodes"
    );
    // Another node joins: the narrow task's two nodes are free, so it starts at once on them.
    let e = register(&mut s, "e", 1);
    assert!(beat(&mut s, c, &[], &[]).assignments.is_empty());
    let r = beat(&mut s, e, &[], &[]);
    assert_eq!(assigned(&r), vec![3]);
    assert_eq!(r.assignments[0].node_names, ["e", "c"]);
    assert_eq!(
        reason(&s, wide),
        "gathering 2 whole nodes for `wide`: 2 held, waiting for what runs on them to end"
    );
    // The long tasks end: the wide task starts.
    assert!(beat(&mut s, a, &[], &[(0, 1, true)]).assignments.is_empty());
    let r = beat(&mut s, b, &[], &[(1, 1, true)]);
    assert_eq!(assigned(&r), vec![2]);
    assert_eq!(r.assignments[0].node_names, ["b", "a"]);
}

#[test]
fn a_gathering_gives_back_the_nodes_that_lack_what_an_update_requires() {
    let d = common::scratch("multi-node", "requires-update");
    let mut s = open(&d);
    let a = common::register_with(&mut s, "a", 2, &[]);
    let b = common::register_with(&mut s, "b", 2, &["ib"]);
    let c = common::register_with(&mut s, "c", 2, &["ib"]);
    // Two-core tasks fill b and c.
    submit(&mut s, "long", 2, "", "cores = 2");
    assert_eq!(assigned(&beat(&mut s, b, &[], &[])), vec![0]);
    assert_eq!(assigned(&beat(&mut s, c, &[], &[])), vec![1]);
    // A two-node task gathers a (free) and b (as it drains).
    let mpi = submit(&mut s, "mpi", 1, "nodes = 2", "");
    assert!(beat(&mut s, a, &[], &[]).assignments.is_empty());
    assert!(beat(&mut s, b, &[(0, 1)], &[]).assignments.is_empty());
    assert_eq!(
        held_for(&s),
        [
            "gathering for job 2 (`mpi`)",
            "gathering for job 2 (`mpi`)",
            ""
        ]
    );
    // Its tasks now require InfiniBand: a is given back at its next beat, and takes other work.
    let r = s
        .update(&pb::UpdateRequest {
            job_id: mpi,
            requires: Some("ib".into()),
            ..Default::default()
        })
        .expect("a multi-node application's requires change");
    assert_eq!(r.apps[0].requires, ["ib"]);
    let small = submit(&mut s, "small", 1, "", "");
    let r = beat(&mut s, a, &[], &[]);
    assert_eq!(assigned(&r), vec![3], "a is free for job {small}");
    assert!(beat(&mut s, c, &[(1, 1)], &[]).assignments.is_empty());
    assert_eq!(
        held_for(&s),
        [
            "",
            "gathering for job 2 (`mpi`)",
            "gathering for job 2 (`mpi`)"
        ]
    );
    // b and c drain: the task starts on them.
    assert!(beat(&mut s, b, &[], &[(0, 1, true)]).assignments.is_empty());
    let r = beat(&mut s, c, &[], &[(1, 1, true)]);
    assert_eq!(assigned(&r), vec![2]);
    assert_eq!(r.assignments[0].node_names, ["c", "b"]);
}

#[test]
fn the_other_nodes_are_told_at_every_beat_that_they_hold_cores_for_the_task_after_a_restart_too() {
    let d = common::scratch("multi-node", "member-of");
    let (a, b, c);
    {
        let mut s = open(&d);
        a = register(&mut s, "a", 1);
        b = register(&mut s, "b", 1);
        c = register(&mut s, "c", 1);
        submit(&mut s, "mpi", 1, "nodes = 3", "");
        // Gathered, not started: nothing to hold yet.
        assert!(member_of(&beat(&mut s, b, &[], &[])).is_empty());
        assert!(member_of(&beat(&mut s, c, &[], &[])).is_empty());
        let mut b_waits = s.await_work(b, common::IDENTITY).expect("b's wake-ups");
        b_waits.borrow_and_update();
        // It starts on a, which runs its command (and lists it among its running tasks).
        let r = beat(&mut s, a, &[], &[]);
        assert_eq!(assigned(&r), vec![0]);
        assert_eq!(r.assignments[0].node_names, ["a", "b", "c"]);
        assert!(member_of(&r).is_empty(), "a runs it: {r:?}");
        // b and c run no process of it: they hear at once, and at every beat, that they hold
        // their cores for it (their agents' idle timeout and `--drain` wait for it).
        assert!(
            b_waits.has_changed().unwrap_or(false),
            "b is woken to hear it at once"
        );
        for _ in 0..2 {
            assert_eq!(member_of(&beat(&mut s, b, &[], &[])), [(0, 1)]);
            assert_eq!(member_of(&beat(&mut s, c, &[], &[])), [(0, 1)]);
            assert!(member_of(&beat(&mut s, a, &[(0, 1)], &[])).is_empty());
        }
        // Draining or stopping a member counts the task among what runs there.
        assert_eq!(s.on_drain("c", true).expect("drain c").running, 1);
        assert_eq!(s.on_stop_node("b", true).expect("stop b").running, 1);
        assert_eq!(s.on_drain("a", true).expect("drain a").running, 1);
    } // the server stops; its store remains
    let mut s = open(&d);
    // Restarted, it tells them again.
    let r = beat(&mut s, b, &[], &[]);
    assert_eq!(
        (member_of(&r), r.stop, r.stop_drain),
        (vec![(0, 1)], true, true)
    );
    assert_eq!(member_of(&beat(&mut s, c, &[], &[])), [(0, 1)]);
    assert!(member_of(&beat(&mut s, a, &[(0, 1)], &[])).is_empty());
    // The task ends: they hold nothing any more.
    assert!(member_of(&beat(&mut s, a, &[], &[(0, 1, true)])).is_empty());
    assert!(member_of(&beat(&mut s, b, &[], &[])).is_empty());
    assert!(member_of(&beat(&mut s, c, &[], &[])).is_empty());
    assert_eq!(s.on_drain("c", true).expect("drain c").running, 0);
}

/// Every reply to a node a gathering holds says so (`gathering`), so that its agent's idle
/// timeout waits (before, an idle held node could leave, and the gathering waited on for
/// another); the flag ends when the task starts (the members are told `member_of` instead) and
/// is not set before a gathering holds the node.
#[test]
fn a_node_held_by_a_gathering_is_told_so_at_every_beat_until_the_task_starts() {
    let d = common::scratch("multi-node", "gathering-flag");
    let mut s = open(&d);
    let a = register(&mut s, "a", 2);
    let b = register(&mut s, "b", 2);
    // A two-core task fills node a.
    submit(&mut s, "long", 1, "", "cores = 2");
    assert_eq!(assigned(&beat(&mut s, a, &[], &[])), vec![0]);
    assert!(!beat(&mut s, b, &[], &[]).gathering, "nothing gathers yet");
    submit(&mut s, "mpi", 1, "nodes = 2", "");
    for _ in 0..2 {
        assert!(beat(&mut s, b, &[], &[]).gathering, "b is held, idle");
        assert!(
            beat(&mut s, a, &[(0, 1)], &[]).gathering,
            "a is held as it drains"
        );
    }
    // a drains: the task starts there; b is a member from now on.
    let r = beat(&mut s, a, &[], &[(0, 1, true)]);
    assert_eq!(assigned(&r), vec![1]);
    assert!(!r.gathering);
    let r = beat(&mut s, b, &[], &[]);
    assert_eq!(member_of(&r), [(1, 1)]);
    assert!(!r.gathering);
}
