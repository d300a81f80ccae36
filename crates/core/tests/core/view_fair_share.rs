//! Fair share over time ([`SchedulerView::set_fair_share`]; the runtime's `[fair_share]`):
//! within a priority level, every policy serves the group (user) that used least first; usage
//! accrues from what a group's running tasks hold and decays with the half-life; off, nothing
//! changes.

use hetsched_core::model::{AppId, Assignment, NodeId, SchedulerView, TaskId};
use hetsched_core::policy::batch::BatchPolicyKind;
use hetsched_core::testkit::{app, node};
use hetsched_core::time::NANOS_PER_SEC as SEC;

const HOUR: u64 = 3600 * SEC;

/// One 4-core node; application 0 (group 0, "alice", submitted first) and application 1
/// (group 1, "bob", a second later), 10 one-core tasks each; application 2 in no group when
/// `admin` (submitted last).
fn view(admin: bool) -> SchedulerView {
    let mut v = SchedulerView::new();
    v.add_node(node("n").cores(4).build(NodeId(0)))
        .expect("node");
    let apps = if admin { 3 } else { 2 };
    for i in 0..apps {
        let a = app(&format!("a{i}"))
            .tasks(10)
            .cpu(10.0, 0.0)
            .submitted_at(u64::from(i) * SEC)
            .build(AppId(i));
        v.add_application(a, (0..10).map(TaskId).collect::<Vec<_>>())
            .expect("app");
        if i < 2 {
            v.set_app_group(AppId(i), Some(i)).expect("group");
        }
    }
    v
}

/// Share-seconds a group holding `rate` of the cluster for `secs` seconds has accrued, its
/// usage decaying with a one-hour half-life meanwhile.
fn accrued(rate: f64, secs: f64) -> f64 {
    let h = 3600.0;
    rate * h / std::f64::consts::LN_2 * (1.0 - 0.5f64.powf(secs / h))
}

/// Starts `tasks` one-core tasks of `app` on the node and moves the clock second by second
/// through `secs`: what they hold meanwhile is sampled into usage.
fn hold(
    v: &mut SchedulerView,
    app: AppId,
    tasks: usize,
    secs: std::ops::RangeInclusive<u64>,
) -> Vec<Assignment> {
    let started = (0..tasks)
        .map(|_| {
            v.assign(app, NodeId(0), hetsched_core::model::Variant::Cpu)
                .expect("fits")
        })
        .collect();
    for t in secs {
        v.set_now(t * SEC);
    }
    started
}

fn per_app(placed: &[Assignment]) -> [usize; 3] {
    let mut n = [0; 3];
    for a in placed {
        n[a.app.index()] += 1;
    }
    n
}

#[test]
fn under_fair_share_the_group_that_used_least_goes_first_under_every_policy() {
    for kind in BatchPolicyKind::ALL {
        // Off: alice, first in, gets at least her turn.
        let mut v = view(false);
        v.set_fair_usage(Some(0), 100.0);
        let placed = kind.build().on_node_update(&mut v, NodeId(0), 10 * SEC);
        assert!(per_app(&placed)[0] >= 2, "{kind:?} off: {placed:?}");
        // On: alice used the cluster for 100 s, bob never: bob's tasks take the node.
        let mut v = view(false);
        v.set_fair_share(Some(HOUR));
        v.set_fair_usage(Some(0), 100.0);
        let placed = kind.build().on_node_update(&mut v, NodeId(0), 10 * SEC);
        assert_eq!(per_app(&placed), [0, 4, 0], "{kind:?} on");
        // A higher priority still goes first: fair share orders within a priority level.
        let mut v = view(false);
        v.set_fair_share(Some(HOUR));
        v.set_fair_usage(Some(0), 100.0);
        v.set_priority(AppId(0), 1).expect("priority");
        let placed = kind.build().on_node_update(&mut v, NodeId(0), 10 * SEC);
        assert_eq!(per_app(&placed), [4, 0, 0], "{kind:?} priority");
    }
}

/// Usage accrues from what a group's running tasks hold, as a share of the cluster over time;
/// the work in no group (the runtime's admin) is one more group; and usage halves every
/// half-life, so an old heavy user comes back ahead of a recent light one.
#[test]
fn usage_accrues_from_running_work_and_decays_with_the_half_life() {
    let mut v = view(true);
    v.set_fair_share(Some(HOUR));
    v.set_now(0);
    // Alice holds the whole node for 100 s.
    let alice = hold(&mut v, AppId(0), 4, 1..=100);
    let used = v.fair_usage(Some(0));
    assert!(
        (used - accrued(1.0, 100.0)).abs() < 1e-6,
        "alice used {used} share-seconds"
    );
    assert!((used - 100.0).abs() < 1.0);
    assert_eq!(v.fair_usage(Some(1)), 0.0);
    assert_eq!(v.fair_usage(None), 0.0);
    for a in &alice {
        v.task_finished(a);
    }
    // Bob and the admin are ahead of her now; between them, submission decides (equal usage).
    let next = BatchPolicyKind::Fifo
        .build()
        .on_node_update(&mut v, NodeId(0), 100 * SEC);
    assert_eq!(per_app(&next), [0, 4, 0], "bob first: {next:?}");
    // The admin's (ungrouped) work accrues to the admin: half the node for 50 s...
    for a in &next {
        v.task_finished(a);
    }
    let admin = hold(&mut v, AppId(2), 2, 101..=150);
    let admin_used = v.fair_usage(None);
    assert!(
        (admin_used - accrued(0.5, 50.0)).abs() < 1e-6,
        "admin used {admin_used}"
    );
    for a in &admin {
        v.task_finished(a);
    }
    // Ten half-lives later alice's 99 share-seconds are under 0.1; bob and the admin, having
    // used 1 share-second each since, are behind her now.
    v.set_now(150 * SEC + 10 * HOUR);
    assert!(v.fair_usage(Some(0)) < 0.1);
    v.set_fair_usage(Some(1), 1.0);
    v.set_fair_usage(None, 1.0);
    let placed =
        BatchPolicyKind::Fifo
            .build()
            .on_node_update(&mut v, NodeId(0), 150 * SEC + 10 * HOUR);
    assert_eq!(per_app(&placed), [4, 0, 0], "alice first again: {placed:?}");
}

/// Shares divide usage (Slurm's `Shares`): a user with 200 shares who used 100 share-seconds
/// stands ahead of one with 1 share who used 1.
#[test]
fn a_user_with_more_shares_may_use_more_before_falling_behind() {
    let mut v = view(false);
    v.set_fair_share(Some(HOUR));
    v.set_fair_usage(Some(0), 100.0);
    v.set_fair_usage(Some(1), 1.0);
    let placed = BatchPolicyKind::Fifo
        .build()
        .on_node_update(&mut v, NodeId(0), 10 * SEC);
    assert_eq!(per_app(&placed), [0, 4, 0], "one share each: bob first");
    let mut v = view(false);
    v.set_fair_share(Some(HOUR));
    v.set_fair_usage(Some(0), 100.0);
    v.set_fair_usage(Some(1), 1.0);
    v.set_fair_shares(0, 200);
    let placed = BatchPolicyKind::Fifo
        .build()
        .on_node_update(&mut v, NodeId(0), 10 * SEC);
    assert_eq!(per_app(&placed), [4, 0, 0], "200 shares: alice first");
}
