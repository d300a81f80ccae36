//! Priority preemption in the simulator (`SimConfig::preemption`, the runtime's `preemption =
//! "requeue"`), pinned by hand: a waiting task of a higher priority starts at the first heartbeat
//! after it arrives, the task it displaces loses its progress and runs again from the start, and
//! a read it had in progress stops sharing the disk at once.

use crate::common::{aligned, cluster, run};
use hetsched_core::policy::batch::BatchPolicyKind;
use hetsched_core::testkit::{app, node};
use hetsched_core::time::Time;
use hetsched_core::{AppId, NodeId};
use hetsched_sim::SimConfig;

const S: Time = 1_000_000_000;

/// (task, start, end) of every task, by task.
fn runs(r: &hetsched_sim::SimResult) -> Vec<(u64, Time, Time)> {
    let mut v: Vec<_> = r
        .tasks
        .iter()
        .map(|t| (t.task.0, t.start_ns, t.end_ns))
        .collect();
    v.sort_unstable();
    v
}

fn preempting() -> SimConfig {
    SimConfig {
        preemption: true,
        ..aligned()
    }
}

#[test]
fn a_late_high_priority_task_displaces_a_long_low_priority_one() {
    // One core. `low` (priority 0) computes 100 s from t = 0; `high` (priority 5, 1.5 s)
    // arrives at 10.5 s.
    let c = cluster(vec![node("n").cores(1).build(NodeId(0))]);
    let apps = [
        app("low")
            .split_mib(0)
            .tasks(1)
            .cpu(100.0, 0.0)
            .build(AppId(0)),
        app("high")
            .split_mib(0)
            .tasks(1)
            .priority(5)
            .submitted_at(10 * S + S / 2)
            .cpu(1.5, 0.0)
            .build(AppId(1)),
    ];
    for kind in BatchPolicyKind::ALL {
        // Without preemption `high` waits for the core.
        let r = run(&c, &apps, kind, &aligned()).expect("runs");
        assert_eq!(
            runs(&r),
            vec![(0, 0, 100 * S), (1, 100 * S, 101 * S + S / 2)],
            "{kind}"
        );
        assert_eq!(r.preemptions, 0);
        // With it, `high` starts at the beat after it arrives; `low` starts over at the beat
        // after it ends.
        let r = run(&c, &apps, kind, &preempting()).expect("runs");
        assert_eq!(
            runs(&r),
            vec![(0, 13 * S, 113 * S), (1, 11 * S, 12 * S + S / 2)],
            "{kind}"
        );
        assert_eq!(
            (r.preemptions, r.apps[0].preempted, r.apps[1].preempted),
            (1, 1, 0)
        );
        assert_eq!(r.apps[0].first_start_ns, Some(0), "its first start is kept");
        // Exempt for 20 s: `low` is not stopped before t = 20 s.
        let exempt = SimConfig {
            preempt_exempt_time: 20 * S,
            ..preempting()
        };
        let r = run(&c, &apps, kind, &exempt).expect("runs");
        assert_eq!(
            runs(&r),
            vec![(0, 22 * S, 122 * S), (1, 20 * S, 21 * S + S / 2)],
            "{kind}"
        );
    }
}

#[test]
fn a_stopped_read_gives_its_disk_share_back_at_once() {
    // Two cores, 128 MiB/s. `low` (priority 0) and `mid` (priority 3) each read 256 MiB from
    // t = 0, at 64 MiB/s each. `high` (priority 5, 1 s of compute) arrives at 1.5 s and
    // displaces `low` at 2 s: by then each read 128 MiB; `mid` reads its last 128 MiB alone
    // in 1 s (not 2 s). `low` starts over at 3 s, when `high` ends, and reads alone for 2 s.
    let c = cluster(vec![node("n").cores(2).disk_mib_s(128.0).build(NodeId(0))]);
    let apps = [
        app("low")
            .split_mib(256)
            .tasks(1)
            .cpu(0.0, 2.0)
            .build(AppId(0)),
        app("mid")
            .split_mib(256)
            .tasks(1)
            .priority(3)
            .cpu(0.0, 2.0)
            .build(AppId(1)),
        app("high")
            .split_mib(0)
            .tasks(1)
            .priority(5)
            .submitted_at(S + S / 2)
            .cpu(1.0, 0.0)
            .build(AppId(2)),
    ];
    let config = SimConfig {
        cpu_read_chunks: 1,
        ..preempting()
    };
    let r = run(&c, &apps, BatchPolicyKind::Fifo, &config).expect("runs");
    assert_eq!(
        runs(&r),
        vec![(0, 3 * S, 5 * S), (1, 0, 3 * S), (2, 2 * S, 3 * S)]
    );
    assert_eq!(r.apps[0].preempted, 1);
}
