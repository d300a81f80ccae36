//! Multi-node tasks (`nodes = N`): the job file's rules, and the view's side — no policy places
//! one, and what such a task holds (every resource of each of its nodes) comes back whole however
//! it ends.

use hetsched_core::input::workload::{MissingProfile, parse_workload};
use hetsched_core::model::{AppId, NodeId, SchedulerView, TaskId, Variant};
use hetsched_core::policy::batch::BatchPolicyKind;
use hetsched_core::testkit::{app, node};

fn job(app_fields: &str, cpu: &str) -> String {
    format!(
        "[[application]]\nname = \"mpi\"\ntasks = 2\n{app_fields}\n[application.cpu]\ncommand = \"true\"\n{cpu}\n"
    )
}

fn error(text: &str) -> String {
    parse_workload("job.toml", text)
        .expect_err("refused")
        .to_string()
}

#[test]
fn nodes_is_parsed_and_what_a_whole_node_task_cannot_have_is_refused_at_its_field() {
    let w = parse_workload("job.toml", &job("nodes = 4", "")).expect("valid");
    let apps = w
        .to_applications(0, MissingProfile::Estimate(1))
        .expect("applications");
    assert_eq!(apps[0].nodes, 4);
    assert!(apps[0].is_multi_node());
    let one = parse_workload("job.toml", &job("nodes = 1", "cores = 2")).expect("valid");
    assert!(
        !one.to_applications(0, MissingProfile::Estimate(1))
            .expect("apps")[0]
            .is_multi_node()
    );
    for (fields, cpu, expected) in [
        (
            "nodes = 0",
            "",
            "job.toml:4:9: application[0].nodes: must be 1 to 1024",
        ),
        (
            "nodes = 2000",
            "",
            "application[0].nodes: must be 1 to 1024",
        ),
        (
            "nodes = 2",
            "cores = 4",
            "application[0].cpu.cores: a multi-node task holds every core",
        ),
        (
            "nodes = 2",
            "memory = \"1GiB\"",
            "application[0].cpu.memory: a multi-node task holds",
        ),
        (
            "nodes = 2\npin = true",
            "",
            "application[0].pin: a multi-node task (`nodes = 2`) cannot have `pin`",
        ),
        (
            "nodes = 2\n[application.gpu]\ncommand = \"x\"",
            "",
            "application[0].gpu: a multi-node task holds every core, all memory and every device of its nodes: give it only an [application.cpu] variant",
        ),
    ] {
        let e = error(&job(fields, cpu));
        assert!(e.contains(expected), "{fields} / {cpu}: {e}");
    }
}

#[test]
fn the_cluster_must_have_as_many_nodes_with_the_attributes_as_a_task_holds() {
    let cluster: Vec<_> = (0..3)
        .map(|i| {
            let attrs: &[&str] = if i < 2 { &["ib"] } else { &[] };
            node(&format!("n{i}"))
                .cores(4)
                .attributes(attrs)
                .build(NodeId(i))
        })
        .collect();
    let w = parse_workload("job.toml", &job("nodes = 3", "")).expect("valid");
    assert!(w.check_runnable(&cluster).is_ok());
    let w = parse_workload("job.toml", &job("nodes = 3\nrequires = [\"ib\"]", "")).expect("valid");
    let e = w.check_runnable(&cluster).expect_err("too few").to_string();
    assert!(
        e.contains("application[0].nodes: application `mpi` needs 3 whole nodes per task, and the cluster has 2 nodes with ib"),
        "{e}"
    );
}

/// Node `n` beats, every node taking work: whether the gatherer has no task ready to start.
fn waits(
    g: &mut hetsched_core::policy::batch::multi_node::Gatherer,
    v: &mut SchedulerView,
    n: u32,
    wake: &mut Vec<NodeId>,
) -> bool {
    g.on_node_update(v, NodeId(n), &|_| true, wake).is_none()
}

/// Three 4-core nodes (node 2 with a GPU) and a multi-node application of 2 tasks, 2 nodes each.
fn view() -> SchedulerView {
    let mut v = SchedulerView::new();
    for i in 0..3 {
        let n = node(&format!("n{i}")).cores(4).memory(8 << 30);
        let n = if i == 2 { n.gpus(1, "a100") } else { n };
        v.add_node(n.build(NodeId(i))).expect("node");
    }
    let a = app("mpi").tasks(2).cpu(1.0, 0.0).nodes(2).build(AppId(0));
    v.add_application(a, [TaskId(0), TaskId(1)]).expect("app");
    v
}

#[test]
fn no_policy_places_a_multi_node_task() {
    for kind in BatchPolicyKind::ALL {
        let mut v = view();
        let mut p = kind.build();
        for n in 0..3 {
            assert!(
                p.on_node_update(&mut v, NodeId(n), 1).is_empty(),
                "{kind:?}"
            );
            assert!(!v.fits(AppId(0), NodeId(n), Variant::Cpu));
            assert!(v.could_run(AppId(0), NodeId(n)));
        }
    }
}

#[test]
fn a_multi_node_task_holds_its_nodes_whole_until_it_ends_however_it_ends() {
    let mut v = view();
    let whole =
        |v: &SchedulerView, n: u32| v.node(NodeId(n)).free == v.node(NodeId(n)).node.capacity();
    // Node 1 runs a 1-core task of another application: holding it takes its 3 free cores.
    let other = app("other").tasks(1).cpu(1.0, 0.0).build(AppId(1));
    v.add_application(other, [TaskId(9)]).expect("app");
    let small = v.assign(AppId(1), NodeId(1), Variant::Cpu).expect("fits");
    let mut held1 = v.hold_free(NodeId(1));
    assert_eq!(held1.resources.cores, 3);
    assert!(!v.holds_whole(&held1));
    assert_eq!(v.node(NodeId(1)).free.cores, 0, "nothing else starts there");
    assert!(v.is_held(NodeId(1)) && !v.is_held(NodeId(0)));
    v.task_finished(&small);
    v.hold_more(&mut held1);
    assert!(v.holds_whole(&held1), "what ended there is taken too");
    let held2 = v.hold_free(NodeId(2));
    assert!(
        v.holds_whole(&held2) && held2.devices == [0],
        "GPUs included"
    );
    let a = v
        .start_multi_node(AppId(0), vec![held2, held1])
        .expect("a pending task");
    assert_eq!((a.task, a.node), (TaskId(0), NodeId(2)));
    assert_eq!(v.app(AppId(0)).running, 1);
    let nodes: Vec<NodeId> = v
        .multi_node_held(AppId(0), TaskId(0))
        .expect("held")
        .iter()
        .map(|h| h.node)
        .collect();
    assert_eq!(nodes, [NodeId(2), NodeId(1)]);
    // Requeued (a lost node): both come back whole, and the task is pending again.
    v.requeue(&a);
    assert!(whole(&v, 1) && whole(&v, 2));
    assert!(
        !v.is_held(NodeId(1)) && !v.is_held(NodeId(2)),
        "held no more"
    );
    assert_eq!(v.node(NodeId(2)).device_free, [true]);
    assert_eq!(v.app(AppId(0)).pending.len(), 2);
    // Restored after a restart, then finished: the same.
    v.restore_multi_node(&a, &[NodeId(0), NodeId(1)])
        .expect("restored");
    assert!(!whole(&v, 0) && !whole(&v, 1));
    v.task_finished(&a);
    assert!(whole(&v, 0) && whole(&v, 1));
    // Nothing pending: the nodes are handed back to the caller.
    let mut empty = SchedulerView::new();
    empty
        .add_node(node("x").cores(1).build(NodeId(0)))
        .expect("node");
    empty
        .add_application(
            app("mpi").tasks(1).cpu(1.0, 0.0).nodes(2).build(AppId(0)),
            [],
        )
        .expect("app");
    let h = empty.hold_free(NodeId(0));
    let back = empty
        .start_multi_node(AppId(0), vec![h])
        .expect_err("nothing pending");
    empty.give_back(&back[0]);
    assert_eq!(empty.node(NodeId(0)).free.cores, 1);
}

#[test]
fn the_gatherer_serves_the_highest_priority_first_holds_nodes_as_they_drain_and_wakes_them() {
    use hetsched_core::policy::batch::multi_node::Gatherer;
    let mut v = SchedulerView::new();
    for i in 0..3 {
        v.add_node(node(&format!("n{i}")).cores(2).build(NodeId(i)))
            .expect("node");
    }
    let low = app("low").tasks(1).cpu(1.0, 0.0).nodes(2).build(AppId(0));
    let high = app("high")
        .tasks(1)
        .cpu(1.0, 0.0)
        .nodes(3)
        .priority(5)
        .build(AppId(1));
    let busy = app("busy").tasks(1).cpu(1.0, 0.0).build(AppId(2));
    v.add_application(low, [TaskId(0)]).expect("app");
    v.add_application(high, [TaskId(1)]).expect("app");
    v.add_application(busy, [TaskId(2)]).expect("app");
    let small = v.assign(AppId(2), NodeId(2), Variant::Cpu).expect("fits");
    let open = |_: NodeId| true;
    let mut g = Gatherer::default();
    let mut wake = Vec::new();
    assert!(waits(&mut g, &mut v, 0, &mut wake));
    assert_eq!(
        g.gatherings().collect::<Vec<_>>(),
        [(AppId(1), 1)],
        "the higher priority first"
    );
    assert_eq!(
        wake,
        [NodeId(0), NodeId(1), NodeId(2)],
        "its nodes are woken to join"
    );
    assert!(waits(&mut g, &mut v, 2, &mut wake));
    assert!(waits(&mut g, &mut v, 1, &mut wake));
    assert_eq!(g.gatherings().collect::<Vec<_>>(), [(AppId(1), 3)]);
    assert_eq!(v.node(NodeId(2)).free.cores, 0, "n2 is held as it drains");
    // n2's task ends: its next beat completes the gathering, n2 first.
    v.task_finished(&small);
    let (app, held) = g
        .on_node_update(&mut v, NodeId(2), &open, &mut wake)
        .expect("whole");
    assert_eq!(app, AppId(1));
    let nodes: Vec<NodeId> = held.iter().map(|h| h.node).collect();
    assert_eq!(nodes, [NodeId(2), NodeId(0), NodeId(1)]);
    let a = v.start_multi_node(app, held).expect("pending");
    // The lower priority one waits: every node is taken, so it cannot gather...
    wake.clear();
    assert!(waits(&mut g, &mut v, 0, &mut wake));
    assert_eq!(g.gatherings().collect::<Vec<_>>(), [(AppId(0), 1)]);
    // ...and a node that stops taking work leaves the gathering (given back, untouched).
    let closed = |n: NodeId| n != NodeId(0);
    assert!(
        g.on_node_update(&mut v, NodeId(1), &closed, &mut wake)
            .is_none()
    );
    assert_eq!(
        g.gatherings().collect::<Vec<_>>(),
        [(AppId(0), 1)],
        "n1 joined, n0 left"
    );
    v.task_finished(&a);
    assert!(
        g.on_node_update(&mut v, NodeId(1), &closed, &mut wake)
            .is_none()
    );
    let (app, held) = g
        .on_node_update(&mut v, NodeId(2), &closed, &mut wake)
        .expect("whole");
    assert_eq!(app, AppId(0));
    assert_eq!(
        held.iter().map(|h| h.node).collect::<Vec<_>>(),
        [NodeId(2), NodeId(1)]
    );
}

#[test]
fn a_gathering_yields_its_nodes_to_higher_priority_work_and_holds_them_against_equal_priority() {
    use hetsched_core::policy::batch::multi_node::Gatherer;
    let mut v = SchedulerView::new();
    for i in 0..2 {
        v.add_node(node(&format!("n{i}")).cores(2).build(NodeId(i)))
            .expect("node");
    }
    let mpi = app("mpi").tasks(1).cpu(1.0, 0.0).nodes(2).build(AppId(0));
    let same = app("same").tasks(2).cpu(1.0, 0.0).build(AppId(1));
    v.add_application(mpi, [TaskId(0)]).expect("app");
    v.add_application(same, [TaskId(1), TaskId(2)])
        .expect("app");
    let open = |_: NodeId| true;
    let mut g = Gatherer::default();
    let mut wake = Vec::new();
    assert!(waits(&mut g, &mut v, 0, &mut wake));
    assert_eq!(g.gatherings().collect::<Vec<_>>(), [(AppId(0), 1)]);
    assert!(
        !v.fits(AppId(1), NodeId(0), Variant::Cpu),
        "held against work of the same priority"
    );
    // Work of a higher priority arrives: the held node is given back and woken, and neither
    // node is held while that work may start on it.
    let urgent = app("urgent")
        .tasks(1)
        .cpu(1.0, 0.0)
        .priority(5)
        .build(AppId(2));
    v.add_application(urgent, [TaskId(3)]).expect("app");
    wake.clear();
    assert!(waits(&mut g, &mut v, 1, &mut wake));
    assert_eq!(g.gatherings().count(), 0, "too few nodes are left to it");
    assert!(wake.contains(&NodeId(0)), "{wake:?}");
    assert!(!v.is_held(NodeId(0)) && !v.is_held(NodeId(1)));
    assert!(v.fits(AppId(2), NodeId(0), Variant::Cpu));
    assert!(v.fits(AppId(2), NodeId(1), Variant::Cpu));
    // Once it runs, the gathering resumes and holds what is free around it.
    let urgent_task = v.assign(AppId(2), NodeId(1), Variant::Cpu).expect("fits");
    assert!(waits(&mut g, &mut v, 0, &mut wake));
    assert!(waits(&mut g, &mut v, 1, &mut wake));
    assert_eq!(g.gatherings().collect::<Vec<_>>(), [(AppId(0), 2)]);
    assert!(!v.fits(AppId(1), NodeId(0), Variant::Cpu));
    assert!(!v.fits(AppId(1), NodeId(1), Variant::Cpu));
    v.task_finished(&urgent_task);
    let (app, held) = g
        .on_node_update(&mut v, NodeId(1), &open, &mut wake)
        .expect("whole");
    assert_eq!(app, AppId(0));
    assert_eq!(
        held.iter().map(|h| h.node).collect::<Vec<_>>(),
        [NodeId(1), NodeId(0)]
    );
}

/// The nodes of a gathering answered ready.
fn nodes_of(ready: Option<(AppId, Vec<hetsched_core::model::Held>)>) -> (AppId, Vec<NodeId>) {
    let (app, held) = ready.expect("ready");
    (app, held.iter().map(|h| h.node).collect())
}

#[test]
fn a_multi_node_task_whose_nodes_are_free_starts_while_one_served_before_it_waits_for_its_own() {
    use hetsched_core::policy::batch::multi_node::Gatherer;
    // n0–n2 have InfiniBand, n3–n4 not; a long task runs on n0.
    let mut v = SchedulerView::new();
    for i in 0..5 {
        let n = node(&format!("n{i}")).cores(2);
        let n = if i < 3 { n.attributes(&["ib"]) } else { n };
        v.add_node(n.build(NodeId(i))).expect("node");
    }
    let long = app("long").tasks(1).cpu(1.0, 0.0).build(AppId(0));
    let wide = app("wide")
        .tasks(1)
        .cpu(1.0, 0.0)
        .nodes(3)
        .requires(&["ib"])
        .priority(5)
        .build(AppId(1));
    let narrow = app("narrow")
        .tasks(1)
        .cpu(1.0, 0.0)
        .nodes(2)
        .build(AppId(2));
    v.add_application(long, [TaskId(0)]).expect("app");
    v.add_application(wide, [TaskId(1)]).expect("app");
    v.add_application(narrow, [TaskId(2)]).expect("app");
    let running = v.assign(AppId(0), NodeId(0), Variant::Cpu).expect("fits");
    let open = |_: NodeId| true;
    let mut g = Gatherer::default();
    let mut wake = Vec::new();
    for n in [1, 2, 0] {
        assert!(waits(&mut g, &mut v, n, &mut wake));
    }
    assert_eq!(
        g.gatherings().collect::<Vec<_>>(),
        [(AppId(1), 3), (AppId(2), 0)],
        "the wide task holds the InfiniBand nodes, n0 as it drains; the narrow one gathers too"
    );
    // The narrow task's nodes are free: it starts now, before the wide one.
    assert!(waits(&mut g, &mut v, 3, &mut wake));
    let ready = g.on_node_update(&mut v, NodeId(4), &open, &mut wake);
    assert_eq!(nodes_of(ready), (AppId(2), vec![NodeId(4), NodeId(3)]));
    assert_eq!(g.gatherings().collect::<Vec<_>>(), [(AppId(1), 3)]);
    // n0 drains: the wide task starts.
    v.task_finished(&running);
    let ready = g.on_node_update(&mut v, NodeId(0), &open, &mut wake);
    let (app, mut nodes) = nodes_of(ready);
    nodes.sort();
    assert_eq!(
        (app, nodes),
        (AppId(1), vec![NodeId(0), NodeId(1), NodeId(2)])
    );
}

#[test]
fn a_gathering_served_before_another_takes_its_members() {
    use hetsched_core::policy::batch::multi_node::Gatherer;
    let mut v = SchedulerView::new();
    for i in 0..3 {
        v.add_node(node(&format!("n{i}")).cores(1).build(NodeId(i)))
            .expect("node");
    }
    let long = app("long").tasks(1).cpu(1.0, 0.0).build(AppId(0));
    let low = app("low").tasks(1).cpu(1.0, 0.0).nodes(2).build(AppId(1));
    v.add_application(long, [TaskId(0)]).expect("app");
    v.add_application(low, [TaskId(1)]).expect("app");
    let running = v.assign(AppId(0), NodeId(2), Variant::Cpu).expect("fits");
    let open = |_: NodeId| true;
    let mut g = Gatherer::default();
    let mut wake = Vec::new();
    // The low priority task holds n0 and waits for n2 to drain.
    assert!(waits(&mut g, &mut v, 0, &mut wake));
    assert!(waits(&mut g, &mut v, 2, &mut wake));
    assert_eq!(g.gatherings().collect::<Vec<_>>(), [(AppId(1), 2)]);
    // A higher priority one arrives: it gathers first, and takes n0 from the other.
    let high = app("high")
        .tasks(1)
        .cpu(1.0, 0.0)
        .nodes(2)
        .priority(5)
        .build(AppId(2));
    v.add_application(high, [TaskId(2)]).expect("app");
    assert!(waits(&mut g, &mut v, 1, &mut wake));
    assert_eq!(
        g.gatherings().collect::<Vec<_>>(),
        [(AppId(2), 1), (AppId(1), 2)]
    );
    let ready = g.on_node_update(&mut v, NodeId(0), &open, &mut wake);
    assert_eq!(nodes_of(ready), (AppId(2), vec![NodeId(0), NodeId(1)]));
    assert_eq!(
        g.gatherings().collect::<Vec<_>>(),
        [(AppId(1), 1)],
        "the other keeps n2 as it drains"
    );
    v.task_finished(&running);
    assert!(waits(&mut g, &mut v, 2, &mut wake));
    assert!(!v.fits(AppId(0), NodeId(2), Variant::Cpu), "n2 is held");
}
