//! `preemption = "requeue"`: a batch task of a higher priority that fits nowhere stops
//! lower-priority tasks on a node — the agent is told to kill them in the same reply that
//! starts it — and they run again later; a preempted attempt counts neither as a failure nor
//! against `max_attempts`, and a restart keeps the count.

use crate::common;

use common::{beat, register};
use hetsched_proto as pb;
use hetsched_server::ServerConfig;
use hetsched_server::config::PreemptionMode;
use hetsched_server::convert::Wire;
use hetsched_server::state::State;
use hetsched_server::store::Store;
use std::path::Path;

fn open(d: &Path, preemption: PreemptionMode) -> State {
    open_exempting(d, preemption, 0)
}

/// A state whose tasks that ran less than `exempt_ns` are not preempted.
fn open_exempting(d: &Path, preemption: PreemptionMode, exempt_ns: u64) -> State {
    open_with(d, preemption, exempt_ns, 0)
}

/// As [`open_exempting`], the nodes lent `prefetch` cores.
fn open_with(d: &Path, preemption: PreemptionMode, exempt_ns: u64, prefetch: u32) -> State {
    let config = ServerConfig {
        data_dir: d.to_path_buf(),
        preemption,
        preempt_exempt_time: hetsched_core::input::Duration(exempt_ns),
        // A second loss fails a task: a preempted attempt counted as lost would show.
        max_attempts: 2,
        // Unless asked, no queueing beyond the free cores: what starts is what fits.
        prefetch: hetsched_server::state::prefetch::Setting::Cores(prefetch),
        ..Default::default()
    };
    State::open(&config, Store::open(&d.join("state.db")).expect("store")).expect("state")
}

/// A job of one application `name` of `tasks` one-core tasks at `priority`.
fn submit(s: &mut State, name: &str, tasks: u32, priority: i32) -> u64 {
    let text = format!(
        "[[application]]\nname = \"{name}\"\ntasks = {tasks}\npriority = {priority}\n\
         [application.cpu]\ncommand = \"true\"\n"
    );
    s.submit("job.toml", &text, "/").expect("submit").job_id
}

fn sent(r: &pb::HeartbeatReply) -> Vec<(u64, u32)> {
    r.assignments
        .iter()
        .map(|a| (a.task_id, a.attempt))
        .collect()
}

fn killed(r: &pb::HeartbeatReply) -> Vec<(u64, u32)> {
    r.kill.iter().map(|k| (k.task_id, k.attempt)).collect()
}

fn tasks(s: &State, job: u64) -> Vec<pb::TaskInfo> {
    s.tasks(job).expect("tasks").tasks
}

#[test]
fn a_waiting_higher_priority_task_takes_the_place_of_the_youngest_lower_priority_one() {
    let d = common::scratch("preemption", "requeue");
    let (low, high, victim, kept);
    {
        let mut s = open(&d, PreemptionMode::Requeue);
        let n = register(&mut s, "n", 2);
        low = submit(&mut s, "low", 2, 0);
        let first = sent(&beat(&mut s, n, &[], &[]));
        assert_eq!(first.len(), 2, "both low tasks start: {first:?}");
        // The later of two tasks started at once goes first (the higher id).
        kept = first[0];
        victim = first[1];
        high = submit(&mut s, "high", 1, 5);
        let r = beat(&mut s, n, &first, &[]);
        assert_eq!(
            killed(&r),
            vec![victim],
            "the agent is told to stop the victim"
        );
        let started = sent(&r);
        assert_eq!(started.len(), 1, "the high task starts in the same reply");
        let h = started[0];
        assert_eq!(tasks(&s, high)[0].state, "running");
        let t = tasks(&s, low);
        let v = t.iter().find(|t| t.id == victim.0).expect("victim");
        assert_eq!(v.state, "pending");
        assert_eq!((v.preemptions, v.failed_attempts), (1, 0));
        assert_eq!(v.reason, "preempted");
        assert!(
            v.message.contains(&format!(
                "attempt 1 preempted for job {high} (`high`, priority 5)"
            )),
            "{}",
            v.message
        );
        // The victim's attempt ends (killed): its result is not its task's.
        let r = beat(&mut s, n, &[kept, h], &[(victim.0, victim.1, false)]);
        assert!(sent(&r).is_empty(), "nothing fits: {:?}", sent(&r));
        assert_eq!(tasks(&s, low)[1].state, "pending");
        assert_eq!(
            tasks(&s, low)[1].reason,
            "preempted",
            "nor is its reason the killed attempt's"
        );
        // The high task ends: the victim runs again, as attempt 2.
        let r = beat(&mut s, n, &[kept], &[(h.0, h.1, true)]);
        assert_eq!(sent(&r), vec![(victim.0, 2)]);
        // It is lost once: with max_attempts = 2 it runs again, the preempted attempt not
        // counted as lost.
        let r = beat(&mut s, n, &[kept], &[]);
        assert_eq!(sent(&r), vec![(victim.0, 3)], "lost, and placed again");
        let v = &tasks(&s, low)[1];
        assert_eq!(
            (
                v.state.as_str(),
                v.attempt,
                v.preemptions,
                v.reason.as_str()
            ),
            ("running", 3, 1, "")
        );
        common::assert_metrics(s, "hdas", &["hetsched_tasks_preempted_total 1"]);
    }
    // A restart keeps the count.
    let s = open(&d, PreemptionMode::Requeue);
    let v = &tasks(&s, low)[1];
    assert_eq!((v.id, v.preemptions, v.failed_attempts), (victim.0, 1, 0));
    assert_eq!(tasks(&s, high)[0].state, "succeeded");
}

/// With `prefetch`, a node's agent holds the tasks sent beyond its free cores in a queue: they
/// hold no core, so stopping one would free nothing. The victim is a task that runs, and the
/// waiting task is sent as one that starts on its cores (not `prefetched`: the agent starts it
/// before its queue).
#[test]
fn tasks_queued_on_a_node_are_never_preempted_only_running_ones() {
    let d = common::scratch("preemption", "prefetch");
    let mut s = open_with(&d, PreemptionMode::Requeue, 0, 2);
    let n = register(&mut s, "n", 2);
    submit(&mut s, "low", 6, 0);
    let r = beat(&mut s, n, &[], &[]);
    let first = sent(&r);
    let queued: Vec<bool> = r.assignments.iter().map(|a| a.prefetched).collect();
    assert_eq!(
        queued,
        [false, false, true, true],
        "two start, two are queued: {first:?}"
    );
    let high = submit(&mut s, "high", 2, 5);
    let r = beat(&mut s, n, &first, &[]);
    assert_eq!(
        killed(&r),
        vec![first[1]],
        "the younger of the two that run is stopped, not a queued one"
    );
    assert_eq!(sent(&r).len(), 1, "{:?}", sent(&r));
    assert!(
        !r.assignments[0].prefetched,
        "the high task starts on the victim's core"
    );
    let h = sent(&r)[0];
    assert_eq!(tasks(&s, high)[0].state, "running");
    // The second high task: the high one just sent is no queued task; the two queued low ones
    // still are. The low task that still runs is the victim.
    let r = beat(
        &mut s,
        n,
        &[first[0], first[2], first[3], h],
        &[(first[1].0, first[1].1, false)],
    );
    assert_eq!(killed(&r), vec![first[0]], "{:?}", sent(&r));
    assert_eq!(tasks(&s, high)[1].state, "running");
}

#[test]
fn off_by_default_never_for_equal_priority_nor_before_the_exempt_time() {
    let hour = 3_600_000_000_000;
    for (mode, low_priority, exempt) in [
        (PreemptionMode::Off, 0, 0),
        (PreemptionMode::Requeue, 5, 0),
        (PreemptionMode::Requeue, 0, hour),
    ] {
        let d = common::scratch("preemption", &format!("none-{mode:?}-{low_priority}"));
        let mut s = open_exempting(&d, mode, exempt);
        let n = register(&mut s, "n", 1);
        submit(&mut s, "low", 1, low_priority);
        let first = sent(&beat(&mut s, n, &[], &[]));
        assert_eq!(first.len(), 1);
        let high = submit(&mut s, "high", 1, 5);
        let r = beat(&mut s, n, &first, &[]);
        assert!(killed(&r).is_empty(), "{mode:?}: {:?}", killed(&r));
        assert!(sent(&r).is_empty(), "{mode:?}");
        assert_eq!(tasks(&s, high)[0].state, "pending", "{mode:?}");
    }
    assert_eq!(ServerConfig::default().preemption, PreemptionMode::Off);
}

#[test]
fn the_node_whose_stop_loses_least_preempts_whichever_beats_first() {
    let d = common::scratch("preemption", "cheapest");
    let mut s = open(&d, PreemptionMode::Requeue);
    let (a, b) = (register(&mut s, "a", 1), register(&mut s, "b", 1));
    // `a` runs a priority-3 task, `b` a priority-1 one; a priority-5 task waits.
    submit(&mut s, "mid", 1, 3);
    let on_a = sent(&beat(&mut s, a, &[], &[]));
    submit(&mut s, "low", 1, 1);
    let on_b = sent(&beat(&mut s, b, &[], &[]));
    let high = submit(&mut s, "high", 1, 5);
    let r = beat(&mut s, a, &on_a, &[]);
    assert!(
        killed(&r).is_empty() && sent(&r).is_empty(),
        "a's task is worth more"
    );
    let r = beat(&mut s, b, &on_b, &[]);
    assert_eq!(killed(&r), on_b);
    assert_eq!(sent(&r).len(), 1);
    assert_eq!(tasks(&s, high)[0].node, "b");
}

#[test]
fn a_drained_node_neither_holds_room_for_waiting_work_nor_preempts() {
    let d = common::scratch("preemption", "drained");
    let mut s = open(&d, PreemptionMode::Requeue);
    let b = register(&mut s, "b", 1);
    submit(&mut s, "low", 2, 0);
    let on_b = sent(&beat(&mut s, b, &[], &[]));
    // `a` runs the other low task and is then drained, its task still running there: it takes
    // no work, so neither its task nor, once that ends, its free core counts.
    let a = register(&mut s, "a", 1);
    let on_a = sent(&beat(&mut s, a, &[], &[]));
    assert_eq!(on_a.len(), 1);
    s.on_drain("a", true).expect("drain a");
    let high = submit(&mut s, "high", 1, 5);
    // `a`'s task started last (it loses least) but `a` is drained: `b` preempts.
    let r = beat(&mut s, a, &on_a, &[]);
    assert!(killed(&r).is_empty() && sent(&r).is_empty());
    let r = beat(&mut s, b, &on_b, &[]);
    assert_eq!(killed(&r), on_b);
    assert_eq!(tasks(&s, high)[0].node, "b");
}

/// A job of one application at `priority`.
fn job_at(priority: i32) -> String {
    format!(
        "[[application]]\nname = \"a\"\ntasks = 1\npriority = {priority}\n\
         [application.cpu]\ncommand = \"true\"\n"
    )
}

#[tokio::test]
async fn the_admin_caps_the_priority_a_user_may_give_its_work() {
    use hetsched_proto::client_client::ClientClient;
    let d = common::scratch("preemption", "max-priority");
    let config = ServerConfig {
        data_dir: d.to_path_buf(),
        preemption: PreemptionMode::Requeue,
        ..Default::default()
    };
    let api = |channel: &tonic::transport::Channel, token: &str| {
        ClientClient::with_interceptor(
            channel.clone(),
            pb::TokenInterceptor::new(token).expect("ascii token"),
        )
    };
    let submit = |priority: i32| pb::SubmitRequest {
        origin: "job.toml".into(),
        text: job_at(priority),
        hold: true,
        ..Default::default()
    };
    let (server, channel) = common::serve(config.clone()).await;
    let mut admin = api(&channel, &server.token);
    let token = admin
        .add_user(pb::AddUserRequest {
            name: "bob".into(),
            max_priority: Some(3),
            ..Default::default()
        })
        .await
        .expect("added")
        .into_inner()
        .token;
    let mut bob = api(&channel, &token);
    // Up to 3 is bob's; 4 is refused, naming the cap and who sets it.
    let ok = bob
        .submit(submit(3))
        .await
        .expect("priority 3")
        .into_inner()
        .job_id;
    let refused = bob.submit(submit(4)).await.expect_err("priority 4");
    assert_eq!(refused.code(), tonic::Code::InvalidArgument);
    assert!(
        refused.message().contains("priority 4 is above 3")
            && refused.message().contains("--max-priority"),
        "{}",
        refused.message()
    );
    let update = |priority| pb::UpdateRequest {
        job_id: ok,
        priority: Some(priority),
        ..Default::default()
    };
    let refused = bob.update(update(9)).await.expect_err("update to 9");
    assert!(
        refused.message().contains("priority 9 is above 3"),
        "{}",
        refused.message()
    );
    bob.update(update(-5))
        .await
        .expect("lowering is always allowed");
    // The admin is not capped, on bob's job or its own.
    admin.update(update(9)).await.expect("the admin raises it");
    admin.submit(submit(50)).await.expect("the admin's own job");
    // The cap is listed, survives a restart and can be lifted.
    let listed = |users: pb::ListUsersReply| {
        users
            .users
            .into_iter()
            .find(|u| u.name == "bob")
            .and_then(|u| u.max_priority)
    };
    let users = admin
        .list_users(pb::ListUsersRequest {})
        .await
        .expect("list")
        .into_inner();
    assert_eq!(listed(users), Some(3));
    server.stop().await.expect("stops");
    let (server, channel) = common::serve(config).await;
    let mut admin = api(&channel, &server.token);
    let mut bob = api(&channel, &token);
    assert!(
        bob.submit(submit(4)).await.is_err(),
        "still capped after a restart"
    );
    let lifted = admin
        .limit_user(pb::LimitUserRequest {
            name: "bob".into(),
            no_max_priority: true,
            ..Default::default()
        })
        .await
        .expect("lifted")
        .into_inner();
    assert_eq!(lifted.max_priority, None);
    bob.submit(submit(4)).await.expect("no cap now");
    let both = admin
        .limit_user(pb::LimitUserRequest {
            name: "bob".into(),
            max_priority: Some(1),
            no_max_priority: true,
            ..Default::default()
        })
        .await
        .expect_err("a cap and none");
    assert!(both.message().contains("not both"), "{}", both.message());
    server.stop().await.expect("stops");
}

/// A task the policy places in a reply and preemption then stops in the same reply never goes
/// out: the reply does not both send and kill it (its agent, finding nothing to kill, would
/// start it while the server holds it pending, and it would run twice for a while). Found by
/// the preemption-day fuzz.
#[test]
fn a_task_placed_and_preempted_by_one_reply_is_not_sent() {
    let d = common::scratch("preemption", "placed-and-stopped");
    let mut s = open(&d, PreemptionMode::Requeue);
    let n = register(&mut s, "n", 4);
    submit(&mut s, "low", 3, 0);
    let first = sent(&beat(&mut s, n, &[], &[]));
    assert_eq!(first.len(), 3);
    // One core left: a waiting low task fits it, the high task of three cores fits nowhere.
    let late = submit(&mut s, "late", 1, 0);
    let text = "[[application]]\nname = \"high\"\ntasks = 1\npriority = 5\n\
                [application.cpu]\ncommand = \"true\"\ncores = 3\n";
    let high = s.submit("high.toml", text, "/").expect("submit").job_id;
    let r = beat(&mut s, n, &first, &[]);
    let (out, stopped) = (sent(&r), killed(&r));
    assert!(
        out.iter().all(|t| !stopped.contains(t)),
        "sent {out:?} and killed {stopped:?}"
    );
    let high_task = tasks(&s, high)[0].id;
    assert!(out.iter().any(|t| t.0 == high_task), "{out:?}");
    // What the reply carries is what the server holds running there.
    for t in tasks(&s, late) {
        let went = out.iter().any(|o| o.0 == t.id);
        assert_eq!(t.state == "running", went, "{t:?} (sent {out:?})");
    }
    let cores: u32 =
        r.assignments.iter().map(|a| a.cores).sum::<u32>() + (first.len() - stopped.len()) as u32;
    assert!(cores <= 4, "the node's four cores: {r:?}");
}
