//! Users' shares and caps in the simulator (`SimConfig::users`, a workload's `[[user]]`): each
//! user's group in the scheduler's view gets its caps (always) and its shares (counted under fair
//! share), as the runtime's `hetsched user limit` gives them, and every policy keeps to them.

use crate::common::{aligned, cluster, run};
use hetsched_core::policy::batch::BatchPolicyKind;
use hetsched_core::testkit::{app, node};
use hetsched_core::time::NANOS_PER_SEC as SEC;
use hetsched_core::{AppId, Application, NodeId, Resources, UserLimits};
use hetsched_sim::{SimConfig, SimError, SimResult};

const GIB: u64 = 1 << 30;

fn by(user: &str, mut a: Application) -> Application {
    a.user = Some(user.into());
    a
}

/// Alice: a sweep of 2-core, 4 GiB CPU tasks that may also run on a GPU, and a job of 1-core
/// tasks; Bob: a job of 1-core tasks. Enough work to fill two 8-core nodes with 2 GPUs each.
fn workload() -> Vec<Application> {
    vec![
        by(
            "alice",
            app("alice-sweep")
                .tasks(60)
                .cpu(20.0, 0.0)
                .cpu_cores(2)
                .cpu_memory(4 * GIB)
                .gpu(5.0, 0.0, 0.0)
                .build(AppId(0)),
        ),
        by(
            "alice",
            app("alice-small")
                .tasks(40)
                .cpu(10.0, 0.0)
                .submitted_at(5 * SEC)
                .build(AppId(1)),
        ),
        by(
            "bob",
            app("bob")
                .tasks(40)
                .cpu(10.0, 0.0)
                .submitted_at(5 * SEC)
                .build(AppId(2)),
        ),
    ]
}

fn two_nodes() -> hetsched_core::Cluster {
    cluster(
        (0..2)
            .map(|i| {
                node(&format!("n{i}"))
                    .cores(8)
                    .memory(64 * GIB)
                    .gpus(2, "k")
                    .build(NodeId(i))
            })
            .collect(),
    )
}

/// The most each of `user`'s resources its running tasks held at any one moment, from the
/// per-task records (a task holds its variant's request over `[start, end)`).
fn peak_held(r: &SimResult, apps: &[Application], user: &str) -> Resources {
    let mut changes: Vec<(u64, bool, Resources)> = Vec::new();
    for t in &r.tasks {
        let a = &apps[t.app.0 as usize];
        if a.user.as_deref() != Some(user) {
            continue;
        }
        let held = a.request(t.variant).expect("the variant it ran as");
        changes.push((t.start_ns, true, held));
        changes.push((t.end_ns, false, held));
    }
    // At one instant, ends before starts: a task that ends when another starts gave its
    // resources back first.
    changes.sort_by_key(|&(t, start, _)| (t, start));
    let (mut now, mut peak) = (Resources::default(), Resources::default());
    for (_, start, held) in changes {
        now = if start { now + held } else { now - held };
        peak = Resources::new(
            peak.cores.max(now.cores),
            peak.memory_bytes.max(now.memory_bytes),
            peak.gpus.max(now.gpus),
        );
    }
    peak
}

fn capped(cap: Resources) -> SimConfig {
    let mut alice = UserLimits::new("alice");
    alice.cap = cap;
    SimConfig {
        users: vec![alice],
        ..aligned()
    }
}

#[test]
fn a_users_cap_holds_at_every_moment_under_every_policy() {
    let (c, apps) = (two_nodes(), workload());
    for kind in BatchPolicyKind::ALL {
        let free = run(&c, &apps, kind, &aligned()).unwrap_or_else(|e| panic!("{kind}: {e}"));
        let free_peak = peak_held(&free, &apps, "alice");
        // Uncapped, Alice's work spreads over both nodes.
        assert!(free_peak.cores > 5, "{kind}: {free_peak:?}");
        for cap in [
            Resources::new(5, 0, 0),
            Resources::new(0, 12 * GIB, 0),
            Resources::new(0, 0, 1),
            Resources::new(6, 8 * GIB, 1),
        ] {
            let r = run(&c, &apps, kind, &capped(cap)).unwrap_or_else(|e| panic!("{kind}: {e}"));
            assert_eq!(r.tasks.len(), 140, "{kind}: every task ran");
            let peak = peak_held(&r, &apps, "alice");
            for (name, held, max) in [
                ("cores", u64::from(peak.cores), u64::from(cap.cores)),
                ("memory", peak.memory_bytes, cap.memory_bytes),
                ("GPUs", u64::from(peak.gpus), u64::from(cap.gpus)),
            ] {
                assert!(
                    max == 0 || held <= max,
                    "{kind}, cap {cap:?}: alice held {held} {name} at once"
                );
            }
            let alice = &r.users[0];
            assert_eq!(
                (alice.user.as_str(), alice.max_cores, alice.max_gpus),
                (
                    "alice",
                    (cap.cores > 0).then_some(cap.cores),
                    (cap.gpus > 0).then_some(cap.gpus)
                )
            );
            assert_eq!(
                alice.max_memory_bytes,
                (cap.memory_bytes > 0).then_some(cap.memory_bytes)
            );
            assert_eq!((r.users[1].shares, r.users[1].max_cores), (1, None));
        }
        // The cap binds: with 5 cores Alice's sweep runs 2 tasks (4 cores) at a time at most
        // and ends later than without it.
        let five = run(&c, &apps, kind, &capped(Resources::new(5, 0, 0))).expect("runs");
        assert!(
            five.users[0].last_end_s > free.users[0].last_end_s,
            "{kind}: {} vs {}",
            five.users[0].last_end_s,
            free.users[0].last_end_s
        );
    }
}

/// Alice and Bob each submit 200 ten-second tasks at 0 s on one 8-core node, Alice's first.
fn even_backlogs() -> Vec<Application> {
    ["alice", "bob"]
        .iter()
        .enumerate()
        .map(|(i, &user)| {
            by(
                user,
                app(&format!("{user}-batch"))
                    .tasks(200)
                    .cpu(10.0, 0.0)
                    .build(AppId(i as u32)),
            )
        })
        .collect()
}

#[test]
fn with_fair_share_a_user_with_more_shares_is_served_earlier() {
    let c = cluster(vec![node("n").cores(8).build(NodeId(0))]);
    let apps = even_backlogs();
    let config = |bob_shares: u32, fair: bool| {
        let mut bob = UserLimits::new("bob");
        bob.shares = bob_shares;
        SimConfig {
            fair_share: fair.then_some(3600 * SEC),
            users: vec![bob],
            ..aligned()
        }
    };
    for kind in [
        BatchPolicyKind::Fifo,
        BatchPolicyKind::Drf,
        BatchPolicyKind::Hdas,
    ] {
        let bob = |r: &SimResult| r.users.iter().find(|u| u.user == "bob").cloned().unwrap();
        let one = run(&c, &apps, kind, &config(1, true)).unwrap();
        let three = run(&c, &apps, kind, &config(3, true)).unwrap();
        assert_eq!(bob(&three).shares, 3);
        // Equal shares: the two users take turns and end together; three shares to Bob give
        // him about three cores in four until his batch is done.
        assert!(
            bob(&three).last_end_s + 60.0 < bob(&one).last_end_s,
            "{kind}: bob ends at {} s with 3 shares, {} s with 1",
            bob(&three).last_end_s,
            bob(&one).last_end_s
        );
        assert!(bob(&three).mean_turnaround_s < bob(&one).mean_turnaround_s);
        // The same work, the same end.
        assert_eq!(three.makespan_s, one.makespan_s, "{kind}");
        // Without fair share, shares change nothing.
        let off_one = run(&c, &apps, kind, &config(1, false)).unwrap();
        let off_three = run(&c, &apps, kind, &config(3, false)).unwrap();
        assert_eq!(off_one.apps, off_three.apps, "{kind}");
    }
}

#[test]
fn a_task_its_users_cap_can_never_hold_and_bad_limits_are_refused() {
    let (c, apps) = (two_nodes(), workload());
    // Alice's sweep asks 2 cores on a CPU and 1 GPU + 1 core on a GPU: a 1-core cap leaves only
    // the GPU variant, a cap of 1 core and a GPU-less policy nothing.
    run(
        &c,
        &apps,
        BatchPolicyKind::Fifo,
        &capped(Resources::new(1, 0, 0)),
    )
    .expect("on GPUs");
    match run(
        &c,
        &apps,
        BatchPolicyKind::CpuOnly,
        &capped(Resources::new(1, 0, 0)),
    ) {
        Err(SimError::Unrunnable { app, reason, .. }) => {
            assert_eq!(app, "alice-sweep");
            assert!(
                reason.contains(
                    "its CPU task asks for more cores than user `alice` may hold at once \
                     (max_cores = 1)"
                ),
                "{reason}"
            );
        }
        other => panic!("{other:?}"),
    }
    let mut zero = UserLimits::new("bob");
    zero.shares = 0;
    let dup = vec![UserLimits::new("bob"), UserLimits::new("bob")];
    for (users, says) in [(vec![zero], "shares are 1 to"), (dup, "listed twice")] {
        let config = SimConfig { users, ..aligned() };
        match run(&c, &apps, BatchPolicyKind::Fifo, &config) {
            Err(SimError::Config { field, problem }) => {
                assert_eq!(field, "users");
                assert!(problem.contains(says), "{problem}");
            }
            other => panic!("{other:?}"),
        }
    }
}
