//! Priority preemption (`policy::batch::preempt`): a waiting task of a higher priority that fits
//! nowhere stops the cheapest set of strictly lower-priority tasks on one node — lowest priority,
//! then least work lost — and only the tasks its fit needs; nothing else bypasses a rule of
//! `fits` (caps, `max_running`, capacity).

use hetsched_core::model::{AppId, Application, NodeId, Resources, SchedulerView, TaskId, Variant};
use hetsched_core::policy::batch::preempt::{Candidate, Preemption, Rules, preempt_on};
use hetsched_core::testkit::{app, node};
use hetsched_core::time::Time;
use proptest::prelude::*;

/// A view of `cores` per node, with the applications given (ids in order).
fn view(cores: &[u32], apps: Vec<Application>) -> SchedulerView {
    let mut v = SchedulerView::new();
    for (i, &c) in cores.iter().enumerate() {
        v.add_node(
            node(&format!("n{i}"))
                .cores(c)
                .memory(64 << 30)
                .build(NodeId(i as u32)),
        )
        .expect("node");
    }
    for a in apps {
        let tasks = a.tasks;
        v.add_application(
            a,
            (0..tasks).map(|t| TaskId(u64::from(t))).collect::<Vec<_>>(),
        )
        .expect("app");
    }
    v
}

/// Application `id` of `tasks` CPU tasks of `cores` cores each, at `priority`.
fn cpu_app(id: u32, priority: i32, cores: u32, tasks: u32) -> Application {
    app(&format!("a{id}"))
        .tasks(tasks)
        .priority(priority)
        .cpu(1.0, 0.0)
        .cpu_cores(cores)
        .build(AppId(id))
}

/// Starts a task of `app` on `node` at `at`; its candidate.
fn start(v: &mut SchedulerView, app: u32, node: u32, at: Time) -> Candidate {
    v.set_now(at);
    let running = v
        .assign(AppId(app), NodeId(node), Variant::Cpu)
        .expect("the task fits");
    Candidate {
        running,
        started: at,
    }
}

/// The rule's terms: tasks that ran less than `exempt` are not stopped; `variants` run.
fn rules(exempt: Time, variants: &[Variant]) -> Rules<'_> {
    Rules { exempt, variants }
}

/// Both variants, as every policy but `cpu-only` runs.
const BOTH: &[Variant] = &[Variant::Cpu, Variant::Gpu];

fn on(all: &[Candidate]) -> impl Fn(NodeId) -> Vec<Candidate> + '_ {
    move |n| {
        all.iter()
            .filter(|c| c.running.node == n)
            .cloned()
            .collect()
    }
}

fn victims(p: &Preemption) -> Vec<(u32, u64)> {
    let mut v: Vec<(u32, u64)> = p
        .victims
        .iter()
        .map(|c| (c.running.app.0, c.started))
        .collect();
    v.sort_unstable();
    v
}

#[test]
fn the_cheapest_node_stops_its_youngest_lowest_priority_task_and_no_other_node_stops_anything() {
    // Two 2-core nodes: n0 runs priority-1 and priority-0 work, n1 two priority-0 tasks; a
    // priority-5 task waits.
    let mut v = view(
        &[2, 2],
        vec![
            cpu_app(0, 0, 1, 4),
            cpu_app(1, 1, 1, 4),
            cpu_app(2, 5, 1, 4),
        ],
    );
    let all = vec![
        start(&mut v, 1, 0, 10),
        start(&mut v, 0, 0, 20),
        start(&mut v, 0, 1, 30),
        start(&mut v, 0, 1, 40),
    ];
    v.set_now(100);
    // n0 could stop its priority-0 task, started at 20: more work lost than n1's youngest.
    assert_eq!(
        preempt_on(&v, NodeId(0), v.now(), &rules(0, BOTH), |_| true, on(&all)),
        None
    );
    let p = preempt_on(&v, NodeId(1), v.now(), &rules(0, BOTH), |_| true, on(&all))
        .expect("a preemption on n1");
    assert_eq!(
        (p.app, p.variant, p.node),
        (AppId(2), Variant::Cpu, NodeId(1))
    );
    assert_eq!(victims(&p), vec![(0, 40)], "the task that started last");
    // Once it is stopped the waiting task fits.
    let freed: Vec<_> = p.victims.iter().map(|c| &c.running).collect();
    assert!(v.fits_freeing(AppId(2), NodeId(1), Variant::Cpu, &freed));
    assert!(!v.fits(AppId(2), NodeId(1), Variant::Cpu));
}

#[test]
fn the_lowest_priority_goes_first_whatever_the_work_lost() {
    let mut v = view(
        &[1, 1],
        vec![
            cpu_app(0, 0, 1, 1),
            cpu_app(1, 3, 1, 1),
            cpu_app(2, 5, 1, 1),
        ],
    );
    // The priority-0 task has run far longer: it still goes first.
    let all = vec![start(&mut v, 0, 0, 1), start(&mut v, 1, 1, 90)];
    v.set_now(100);
    assert_eq!(
        preempt_on(&v, NodeId(1), v.now(), &rules(0, BOTH), |_| true, on(&all)),
        None
    );
    let p = preempt_on(&v, NodeId(0), v.now(), &rules(0, BOTH), |_| true, on(&all))
        .expect("n0 preempts");
    assert_eq!(victims(&p), vec![(0, 1)]);
}

#[test]
fn equal_priority_work_that_fits_and_work_no_stop_would_start_preempt_nothing() {
    let mut v = view(&[2], vec![cpu_app(0, 3, 1, 4), cpu_app(1, 3, 1, 4)]);
    let all = vec![start(&mut v, 0, 0, 1), start(&mut v, 0, 0, 2)];
    v.set_now(10);
    assert_eq!(
        preempt_on(&v, NodeId(0), v.now(), &rules(0, BOTH), |_| true, on(&all)),
        None,
        "equal priority"
    );

    let mut v = view(&[2], vec![cpu_app(0, 0, 1, 4), cpu_app(1, 5, 1, 4)]);
    let all = vec![start(&mut v, 0, 0, 1)];
    v.set_now(10);
    assert_eq!(
        preempt_on(&v, NodeId(0), v.now(), &rules(0, BOTH), |_| true, on(&all)),
        None,
        "a core is free"
    );

    let mut v = view(&[2], vec![cpu_app(0, 0, 1, 4), cpu_app(1, 5, 3, 1)]);
    let all = vec![start(&mut v, 0, 0, 1), start(&mut v, 0, 0, 2)];
    v.set_now(10);
    assert_eq!(
        preempt_on(&v, NodeId(0), v.now(), &rules(0, BOTH), |_| true, on(&all)),
        None,
        "3 cores on a 2-core node"
    );

    // The waiting application is at its max_running.
    let mut v = view(
        &[1, 1],
        vec![
            cpu_app(0, 0, 1, 4),
            app("capped")
                .tasks(4)
                .priority(5)
                .max_running(1)
                .cpu(1.0, 0.0)
                .build(AppId(1)),
        ],
    );
    let all = vec![start(&mut v, 0, 0, 1), start(&mut v, 1, 1, 2)];
    v.set_now(10);
    assert_eq!(
        preempt_on(&v, NodeId(0), v.now(), &rules(0, BOTH), |_| true, on(&all)),
        None,
        "max_running"
    );
}

/// A 4-core node running a 2-core task that started first (at 5) and two 1-core tasks (at 50
/// and 60), all of priority 0, with a task of `cores` cores of priority 5 waiting: the
/// preemption at 100.
fn three_on_four(cores: u32) -> Preemption {
    let mut v = view(
        &[4],
        vec![
            cpu_app(0, 0, 2, 1),
            cpu_app(1, 0, 1, 2),
            cpu_app(2, 5, cores, 1),
        ],
    );
    let all = vec![
        start(&mut v, 0, 0, 5),
        start(&mut v, 1, 0, 50),
        start(&mut v, 1, 0, 60),
    ];
    v.set_now(100);
    preempt_on(&v, NodeId(0), v.now(), &rules(0, BOTH), |_| true, on(&all)).expect("a preemption")
}

#[test]
fn only_the_tasks_the_fit_needs_are_stopped() {
    // Two cores: the two young one-core tasks.
    assert_eq!(victims(&three_on_four(2)), vec![(1, 50), (1, 60)]);
    // Three cores: the two one-core tasks are taken, then the wide one; sparing the most
    // valuable first, the one-core task that ran longer is not needed, the wide one is.
    assert_eq!(victims(&three_on_four(3)), vec![(0, 5), (1, 60)]);
}

#[test]
fn a_gpu_task_stops_the_task_that_holds_a_device_of_its_kind() {
    let mut v = SchedulerView::new();
    v.add_node(
        node("g")
            .cores(8)
            .memory(64 << 30)
            .gpus(1, "a100")
            .gpus(1, "t4")
            .build(NodeId(0)),
    )
    .expect("node");
    for (i, (p, kind)) in [(0, "a100"), (0, "t4"), (5, "a100")]
        .into_iter()
        .enumerate()
    {
        let mut a = app(&format!("g{i}"))
            .tasks(2)
            .priority(p)
            .gpu(1.0, 0.0, 0.0)
            .build(AppId(i as u32));
        if let Some(g) = a.gpu.as_mut() {
            g.kind = Some(kind.to_string());
        }
        v.add_application(a, vec![TaskId(0), TaskId(1)])
            .expect("app");
    }
    v.set_now(1);
    let a100 = v.assign(AppId(0), NodeId(0), Variant::Gpu).expect("a100");
    v.set_now(2);
    let t4 = v.assign(AppId(1), NodeId(0), Variant::Gpu).expect("t4");
    let all = vec![
        Candidate {
            running: a100,
            started: 1,
        },
        Candidate {
            running: t4,
            started: 2,
        },
    ];
    v.set_now(10);
    let p = preempt_on(&v, NodeId(0), v.now(), &rules(0, BOTH), |_| true, on(&all))
        .expect("a preemption");
    assert_eq!(p.variant, Variant::Gpu);
    assert_eq!(
        victims(&p),
        vec![(0, 1)],
        "the t4 task started last but frees no a100"
    );
    // Under a policy that runs CPU tasks only, GPU work preempts nothing.
    assert_eq!(
        preempt_on(
            &v,
            NodeId(0),
            v.now(),
            &rules(0, &[Variant::Cpu]),
            |_| true,
            on(&all)
        ),
        None
    );
}

#[test]
fn a_task_that_ran_less_than_the_exempt_time_is_not_stopped() {
    let mut v = view(&[2], vec![cpu_app(0, 0, 1, 4), cpu_app(1, 5, 1, 4)]);
    let all = vec![start(&mut v, 0, 0, 10), start(&mut v, 0, 0, 60)];
    v.set_now(100);
    // Without an exempt time the task started last goes; with 50 ns only the older one may.
    let p =
        preempt_on(&v, NodeId(0), v.now(), &rules(0, BOTH), |_| true, on(&all)).expect("preempts");
    assert_eq!(victims(&p), vec![(0, 60)]);
    let p =
        preempt_on(&v, NodeId(0), v.now(), &rules(50, BOTH), |_| true, on(&all)).expect("preempts");
    assert_eq!(victims(&p), vec![(0, 10)]);
    assert_eq!(
        preempt_on(&v, NodeId(0), v.now(), &rules(91, BOTH), |_| true, on(&all)),
        None
    );
}

#[test]
fn nodes_that_take_no_work_neither_hold_room_nor_defer_the_choice() {
    // n0 is drained (its driver places nothing there): its free core does not count, and the
    // cheaper task it runs does not keep n1 from preempting.
    let mut v = view(&[2, 1], vec![cpu_app(0, 0, 1, 4), cpu_app(1, 5, 1, 4)]);
    let all = vec![start(&mut v, 0, 1, 1), start(&mut v, 0, 0, 50)];
    v.set_now(100);
    let drained = |n: NodeId| n != NodeId(0);
    assert_eq!(
        preempt_on(&v, NodeId(1), v.now(), &rules(0, BOTH), |_| true, on(&all)),
        None,
        "n0's free core holds it"
    );
    let p = preempt_on(&v, NodeId(1), v.now(), &rules(0, BOTH), drained, on(&all))
        .expect("n1 preempts");
    assert_eq!(victims(&p), vec![(0, 1)]);
    assert_eq!(
        preempt_on(&v, NodeId(0), v.now(), &rules(0, BOTH), drained, on(&all)),
        None,
        "a drained node preempts nothing"
    );
}

#[test]
fn a_user_at_its_cap_does_not_preempt() {
    let mut v = view(&[2], vec![cpu_app(0, 0, 1, 4), cpu_app(1, 5, 1, 4)]);
    v.set_group_cap(0, Resources::new(1, 0, 0));
    v.set_app_group(AppId(1), Some(0)).expect("group");
    let all = vec![start(&mut v, 0, 0, 1), start(&mut v, 1, 0, 2)];
    v.set_now(10);
    assert_eq!(
        preempt_on(&v, NodeId(0), v.now(), &rules(0, BOTH), |_| true, on(&all)),
        None
    );
}

proptest! {
    /// On random clusters and workloads: a preemption stops only strictly lower-priority tasks
    /// of the heartbeating node, the waiting task fits once they stop (and not before), and
    /// sparing any one of them breaks the fit.
    #[test]
    fn a_preemption_is_needed_sufficient_and_minimal(
        cores in prop::collection::vec(1u32..6, 1..4),
        apps in prop::collection::vec((0i32..4, 1u32..4), 1..5),
        starts in prop::collection::vec((0usize..4, 0usize..5, 1u64..1000), 0..20),
        waiting in (0i32..6, 1u32..5),
        beat in 0usize..4,
    ) {
        let mut all_apps: Vec<Application> = apps
            .iter()
            .enumerate()
            .map(|(i, &(p, c))| cpu_app(i as u32, p, c, 8))
            .collect();
        let w = all_apps.len() as u32;
        all_apps.push(cpu_app(w, waiting.0, waiting.1, 1));
        let mut v = view(&cores, all_apps);
        let mut running = Vec::new();
        let mut sorted = starts.clone();
        sorted.sort_by_key(|s| s.2);
        for (n, a, at) in sorted {
            let (n, a) = (n % cores.len(), a % apps.len());
            v.set_now(at);
            if let Some(r) = v.assign(AppId(a as u32), NodeId(n as u32), Variant::Cpu) {
                running.push(Candidate { running: r, started: at });
            }
        }
        v.set_now(2000);
        let node = NodeId((beat % cores.len()) as u32);
        if let Some(p) = preempt_on(&v, node, v.now(), &rules(0, BOTH), |_| true, on(&running)) {
            let priority = v.app(p.app).app.priority;
            prop_assert!(!p.victims.is_empty());
            for c in &p.victims {
                prop_assert_eq!(c.running.node, node);
                prop_assert!(v.app(c.running.app).app.priority < priority);
            }
            prop_assert!((0..cores.len()).all(|n| !v.fits(p.app, NodeId(n as u32), Variant::Cpu)));
            let freed: Vec<_> = p.victims.iter().map(|c| &c.running).collect();
            prop_assert!(v.fits_freeing(p.app, node, p.variant, &freed));
            for skip in 0..freed.len() {
                let fewer: Vec<_> = freed.iter().enumerate().filter(|(i, _)| *i != skip).map(|(_, a)| *a).collect();
                prop_assert!(!v.fits_freeing(p.app, node, p.variant, &fewer));
            }
        } else if apps.iter().all(|&(p, _)| p < waiting.0) {
            // The waiting application comes first. No preemption here although stopping every
            // lower-priority task here would make room and it fits nowhere now: another node
            // must be as cheap or cheaper.
            let lower: Vec<_> = running
                .iter()
                .filter(|c| c.running.node == node && v.app(c.running.app).app.priority < waiting.0)
                .map(|c| &c.running)
                .collect();
            let blocked = (0..cores.len()).all(|n| !v.fits(AppId(w), NodeId(n as u32), Variant::Cpu));
            if blocked && !lower.is_empty() && v.fits_freeing(AppId(w), node, Variant::Cpu, &lower) {
                let elsewhere = (0..cores.len() as u32).filter(|&n| n != node.0).any(|n| {
                    preempt_on(&v, NodeId(n), v.now(), &rules(0, BOTH), |_| true, on(&running)).is_some()
                });
                prop_assert!(elsewhere, "a blocked task that stopping work here would start");
            }
        }
    }
}
