//! Fair share in the simulator (`SimConfig::fair_share`, `hetsched sim run --fair-share`): the
//! workload's users are groups of the scheduler's view, as the runtime's are, and the same core
//! orders their work.

use crate::common::{aligned, cluster, run};
use hetsched_core::policy::batch::BatchPolicyKind;
use hetsched_core::testkit::{app, node};
use hetsched_core::time::NANOS_PER_SEC as SEC;
use hetsched_core::{AppId, Application};

/// Alice submits 400 ten-second tasks at 0 s; Bob a job of 4 at 20, 40 and 60 s.
fn two_users() -> Vec<Application> {
    let mut apps = Vec::new();
    let mut alice = app("alice-sweep").tasks(400).cpu(10.0, 0.0).build(AppId(0));
    alice.user = Some("alice".into());
    apps.push(alice);
    for k in 1..=3u32 {
        let mut bob = app(&format!("bob-{k}"))
            .tasks(4)
            .cpu(10.0, 0.0)
            .submitted_at(u64::from(k) * 20 * SEC)
            .build(AppId(k));
        bob.user = Some("bob".into());
        apps.push(bob);
    }
    apps
}

#[test]
fn with_fair_share_the_light_users_jobs_pass_the_heavy_users_backlog_under_fifo() {
    let c = cluster(vec![node("n").cores(8).build(hetsched_core::NodeId(0))]);
    let apps = two_users();
    let off = run(&c, &apps, BatchPolicyKind::Fifo, &aligned()).unwrap();
    let config = hetsched_sim::SimConfig {
        fair_share: Some(3600 * SEC),
        ..aligned()
    };
    let on = run(&c, &apps, BatchPolicyKind::Fifo, &config).unwrap();
    let bob = |r: &hetsched_sim::SimResult| {
        r.users
            .iter()
            .find(|u| u.user == "bob")
            .map(|u| u.mean_turnaround_s)
            .unwrap()
    };
    // Without fair share Bob's jobs wait behind Alice's 500 s backlog; with it each starts at
    // the next task end (10 s tasks, beats on whole seconds) and runs in one wave.
    assert!(bob(&off) > 400.0, "off: {:?}", off.users);
    assert!(bob(&on) <= 21.0, "on: {:?}", on.users);
    // The same work, the same end.
    assert_eq!(on.makespan_s, off.makespan_s);
    assert_eq!(on.users.len(), 2);
    assert_eq!(on.users[0].user, "alice");
    assert_eq!(on.users[0].tasks, 400);
    // A workload without users reports none, and fair share changes nothing in it.
    let anonymous: Vec<Application> = apps
        .iter()
        .cloned()
        .map(|mut a| {
            a.user = None;
            a
        })
        .collect();
    let plain = run(&c, &anonymous, BatchPolicyKind::Fifo, &aligned()).unwrap();
    let plain_fair = run(&c, &anonymous, BatchPolicyKind::Fifo, &config).unwrap();
    assert!(plain.users.is_empty());
    assert_eq!(plain.apps, plain_fair.apps);
}
