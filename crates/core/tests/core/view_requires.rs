//! An application's `requires` (node attributes, Slurm's `--constraint`) as the scheduler's view
//! applies it: every policy places through [`SchedulerView::fits`], so each one keeps the tasks
//! on nodes with the attributes, and the submission check names an attribute no node has.

use hetsched_core::input::workload::parse_workload;
use hetsched_core::model::{AppId, NodeId, SchedulerView, TaskId};
use hetsched_core::policy::batch::BatchPolicyKind;
use hetsched_core::testkit::{app, node};

/// Node 0: plain; node 1: `bigmem` and `ssd`; node 2: `ssd` and a GPU. One application of 12
/// one-core CPU tasks requiring `required`.
fn view(required: &[&str]) -> SchedulerView {
    let mut v = SchedulerView::new();
    v.add_node(node("plain").cores(4).build(NodeId(0)))
        .expect("plain");
    v.add_node(
        node("fat")
            .cores(4)
            .attributes(&["ssd", "bigmem"])
            .build(NodeId(1)),
    )
    .expect("fat");
    v.add_node(
        node("gpu")
            .cores(4)
            .gpus(1, "k20")
            .attributes(&["ssd"])
            .build(NodeId(2)),
    )
    .expect("gpu");
    let a = app("solve")
        .tasks(12)
        .cpu(2.0, 0.0)
        .requires(required)
        .build(AppId(0));
    v.add_application(a, (0..12).map(TaskId).collect::<Vec<_>>())
        .expect("app");
    v
}

/// How many tasks each node takes at one heartbeat of its own, under every batch policy.
fn placed(required: &[&str]) -> Vec<(BatchPolicyKind, [usize; 3])> {
    BatchPolicyKind::ALL
        .iter()
        .map(|&kind| {
            let mut v = view(required);
            let mut p = kind.build();
            let mut counts = [0; 3];
            for (n, count) in counts.iter_mut().enumerate() {
                *count = p
                    .on_node_update(&mut v, NodeId(n as u32), 1_000_000_000)
                    .len();
            }
            (kind, counts)
        })
        .collect()
}

#[test]
fn every_policy_places_tasks_only_on_nodes_with_the_required_attributes() {
    for (kind, counts) in placed(&["bigmem"]) {
        assert_eq!(counts, [0, 4, 0], "{kind:?}: only the bigmem node");
    }
    for (kind, counts) in placed(&["ssd"]) {
        assert_eq!(counts, [0, 4, 4], "{kind:?}: both ssd nodes");
    }
    // `gpu` is every node with accelerators, whether or not it lists it.
    for (kind, counts) in placed(&["gpu", "ssd"]) {
        assert_eq!(counts, [0, 0, 4], "{kind:?}: the GPU node");
    }
    for (kind, counts) in placed(&[]) {
        assert_eq!(counts, [4, 4, 4], "{kind:?}: no requirement, any node");
    }
}

#[test]
fn a_requirement_no_node_has_is_refused_at_its_field_naming_what_the_nodes_offer() {
    let text = "[[application]]\nname = \"x\"\ntasks = 1\nrequires = [\"ssd\", \"avx512\"]\n\
                [application.cpu]\ncompute = \"1s\"\n";
    let w = parse_workload("w.toml", text).expect("valid");
    let nodes = [
        node("a").cores(2).attributes(&["ssd"]).build(NodeId(0)),
        node("b").cores(2).gpus(1, "k20").build(NodeId(1)),
    ];
    let e = w.check_runnable(&nodes).expect_err("no avx512 node");
    assert_eq!(
        e.to_string(),
        "w.toml:4:20: application[0].requires[1]: application `x` requires `avx512`, which no \
         node has (attributes offered: gpu, ssd)"
    );
    // Each attribute exists, but no node has both.
    let text = text.replace("avx512", "gpu");
    let w = parse_workload("w.toml", &text).expect("valid");
    let e = w.check_runnable(&nodes).expect_err("no node has ssd + gpu");
    assert!(
        e.to_string()
            .ends_with("application `x` requires gpu + ssd, and no node has them all"),
        "{e}"
    );
    // Resources are checked among the nodes with the attributes.
    let big = text
        .replace("\"gpu\"", "\"ssd\"")
        .replace("compute = \"1s\"", "compute = \"1s\"\ncores = 4");
    let w = parse_workload("w.toml", &big).expect("valid");
    let e = w
        .check_runnable(&nodes)
        .expect_err("the ssd node has 2 cores");
    assert!(e.to_string().ends_with("among the nodes with ssd"), "{e}");
    // A bad name is refused at parse time.
    let e = parse_workload("w.toml", &text.replace("\"gpu\"", "\"two words\""))
        .expect_err("whitespace");
    assert_eq!(
        e.field.as_deref(),
        Some("application[0].requires[1]"),
        "{e}"
    );
}

#[test]
fn could_run_tells_work_that_waits_for_busy_nodes_from_work_no_node_can_run() {
    use hetsched_core::model::Variant;
    let mut v = view(&["bigmem"]);
    let mut wide = app("wide").tasks(1).cpu(1.0, 0.0).build(AppId(1));
    if let Some(c) = wide.cpu.as_mut() {
        c.request.cores = 8;
    }
    v.add_application(wide, vec![TaskId(100)]).expect("wide");
    v.add_application(
        app("cuda").tasks(1).gpu(1.0, 0.0, 0.0).build(AppId(2)),
        vec![TaskId(200)],
    )
    .expect("cuda");
    let could = |v: &SchedulerView, a: u32| -> Vec<bool> {
        (0..3).map(|n| v.could_run(AppId(a), NodeId(n))).collect()
    };
    assert_eq!(could(&v, 0), [false, true, false], "only the bigmem node");
    assert_eq!(
        could(&v, 1),
        [false, false, false],
        "8 cores: no 4-core node"
    );
    assert_eq!(
        could(&v, 2),
        [false, false, true],
        "a GPU variant: the GPU node"
    );
    // Busy is not unable: with the bigmem node's cores all taken, a task no longer fits there
    // now, but could run there once they are free.
    let mut p = BatchPolicyKind::ALL[0].build();
    assert_eq!(p.on_node_update(&mut v, NodeId(1), 1_000_000_000).len(), 4);
    assert!(!v.fits(AppId(0), NodeId(1), Variant::Cpu));
    assert!(v.could_run(AppId(0), NodeId(1)));
    // A back-off keeps the application off the node, and says so; it could still run there.
    v.set_excluded(AppId(0), NodeId(1), true);
    assert!(v.is_excluded(AppId(0), NodeId(1)) && v.could_run(AppId(0), NodeId(1)));
    // A dead node runs nothing.
    v.set_alive(NodeId(1), false).expect("dead");
    assert!(!v.could_run(AppId(0), NodeId(1)));
}

/// `!ATTR` keeps tasks off the nodes with an attribute (Kubernetes' `NotIn`), `node:NAME` on
/// the node of that name (Slurm's `--nodelist` of one node) and `!node:NAME` off it (Slurm's
/// `--exclude`), under every policy.
#[test]
fn a_requirement_after_an_exclamation_mark_keeps_tasks_off_and_node_names_pick_nodes() {
    for (kind, counts) in placed(&["!bigmem"]) {
        assert_eq!(counts, [4, 0, 4], "{kind:?}: every node but the bigmem one");
    }
    for (kind, counts) in placed(&["ssd", "!gpu"]) {
        assert_eq!(counts, [0, 4, 0], "{kind:?}: ssd without a GPU");
    }
    for (kind, counts) in placed(&["node:gpu"]) {
        assert_eq!(counts, [0, 0, 4], "{kind:?}: the node named gpu");
    }
    for (kind, counts) in placed(&["!node:fat", "!node:plain"]) {
        assert_eq!(counts, [0, 0, 4], "{kind:?}: every node but fat and plain");
    }
}

#[test]
fn requirements_are_checked_and_node_attributes_may_not_look_like_them() {
    use hetsched_core::model::cluster::{attribute_set, meets, requirement_set};
    let set = |r: &[&str]| requirement_set(r.iter().copied()).map_err(|(_, e)| e);
    assert_eq!(
        set(&["!node:n1", "ssd", "node:n2", "!gpu"]),
        Ok(vec![
            "!gpu".to_string(),
            "!node:n1".to_string(),
            "node:n2".to_string(),
            "ssd".to_string()
        ])
    );
    for (bad, says) in [
        ("!", "must name what a node must lack"),
        ("node:", "must name a node"),
        ("!node:", "must name a node"),
        ("! ssd", "whitespace"),
        ("!!ssd", "begins with `!`"),
    ] {
        let e = set(&[bad]).expect_err(bad);
        assert!(e.contains(says), "{bad}: {e}");
    }
    for bad in ["!ssd", "node:n1"] {
        let e = attribute_set([bad].into_iter()).expect_err(bad).1;
        assert!(e.contains("a requirement reads otherwise"), "{bad}: {e}");
    }
    // A node not known by name (an allocation's agent to come) meets `!node:NAME`, not
    // `node:NAME`.
    let ssd = ["ssd".to_string()];
    let req = |r: &[&str]| r.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    assert!(meets(None, &ssd, &req(&["ssd", "!node:n1", "!gpu"])));
    assert!(!meets(None, &ssd, &req(&["node:n1"])));
    assert!(meets(Some("n1"), &ssd, &req(&["node:n1"])));
    assert!(!meets(Some("n1"), &ssd, &req(&["!node:n1"])));
}

#[test]
fn a_requirement_no_node_meets_names_what_stops_it() {
    let nodes = [
        node("a").cores(2).attributes(&["ssd"]).build(NodeId(0)),
        node("b").cores(2).attributes(&["ssd"]).build(NodeId(1)),
    ];
    let check = |requires: &str| {
        let text = format!(
            "[[application]]\nname = \"x\"\ntasks = 1\nrequires = [{requires}]\n\
             [application.cpu]\ncompute = \"1s\"\n"
        );
        parse_workload("w.toml", &text)
            .expect("valid")
            .check_runnable(&nodes)
            .map_err(|e| e.to_string())
    };
    assert_eq!(check("\"!node:a\""), Ok(()));
    assert_eq!(
        check("\"!ssd\"").expect_err("every node has ssd"),
        "w.toml:4:13: application[0].requires[0]: application `x` requires `!ssd`, and every \
         node has `ssd`"
    );
    assert_eq!(
        check("\"node:c\"").expect_err("no node c"),
        "w.toml:4:13: application[0].requires[0]: application `x` requires `node:c`, and no \
         node is named `c`"
    );
    assert!(
        check("\"!node:a\", \"!node:b\"")
            .expect_err("both excluded")
            .ends_with("application `x` requires !node:a + !node:b, and no node has them all")
    );
}
