//! Priority preemption through the real binaries (`preemption = "requeue"`): a job of a higher
//! priority submitted to a full cluster starts at once; the lower-priority task it displaces
//! gets SIGTERM (it can save its state), runs again later, and ends well, its preempted
//! attempt shown apart from failures.

use crate::support::{Cluster, lines, wait_until};
use std::time::Duration;

/// Waits for job 2 (the high-priority one) to end within `within` — it did not wait for a low
/// task's whole run — then for job 1 (the low one, its stopped task run again) to end well.
fn high_then_low(c: &Cluster, within: &str, log: &std::path::Path) {
    let out = c.cli(&["wait", "2", "--timeout", within]);
    assert!(
        out.status.success(),
        "the high job waited for a low task's whole run: {}\n{:?}",
        String::from_utf8_lossy(&out.stderr),
        lines(log)
    );
    let out = c.cli(&["wait", "1", "--timeout", "30s"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn a_higher_priority_job_displaces_a_running_task_which_is_told_and_runs_again() {
    let mut c = Cluster::start_configured(
        "preemption",
        false,
        "preemption = \"requeue\"\nprefetch = 0\n",
    );
    c.start_agent("n", 2, &[]);
    c.wait_for_nodes(1);
    let (log, marks) = (c.dir.join("events"), c.dir.join("marks"));
    std::fs::create_dir_all(&marks).expect("marks");
    // Job 1, priority 0: each task's first run takes 8 s unless stopped (SIGTERM: it logs it
    // and exits); a second run ends at once.
    c.submit_file(
        "low.toml",
        &format!(
            "[[application]]\nname = \"low\"\ntasks = 2\npriority = 0\n[application.cpu]\n\
             command = \"echo start {{index}} >> {log}; if [ -e {marks}/{{index}} ]; then echo \
             again {{index}} >> {log}; exit 0; fi; touch {marks}/{{index}}; trap 'echo term \
             {{index}} >> {log}; exit 143' TERM; sleep 8 & wait; echo slept {{index}} >> {log}\"\n",
            log = log.display(),
            marks = marks.display()
        ),
    );
    wait_until("both low tasks to start", Duration::from_secs(20), || {
        lines(&log)
            .iter()
            .filter(|l| l.starts_with("start"))
            .count()
            == 2
    });
    // Job 2, priority 5: the node is full.
    c.submit_file(
        "high.toml",
        &format!(
            "[[application]]\nname = \"high\"\ntasks = 1\npriority = 5\n[application.cpu]\n\
             command = \"echo high >> {}\"\n",
            log.display()
        ),
    );
    high_then_low(&c, "6s", &log);
    let events = lines(&log);
    let term: Vec<&String> = events.iter().filter(|l| l.starts_with("term")).collect();
    assert_eq!(
        term.len(),
        1,
        "one low task was stopped with SIGTERM: {events:?}"
    );
    let victim = term[0].trim_start_matches("term ").to_string();
    let pos = |line: &str| events.iter().position(|l| l == line);
    assert!(
        pos(term[0]) < pos("high") && pos("high") < pos(&format!("again {victim}")),
        "stopped, then the high task, then the stopped task again: {events:?}"
    );
    let tasks = c.tasks(1);
    let v = tasks
        .iter()
        .find(|t| t["index"].as_u64().map(|i| i.to_string()) == Some(victim.clone()))
        .expect("the victim's row");
    assert_eq!(v["state"], "succeeded", "{v}");
    assert_eq!(
        (
            v["attempt"].as_u64(),
            v["preemptions"].as_u64(),
            v["failed_attempts"].as_u64()
        ),
        (Some(2), Some(1), Some(0)),
        "{v}"
    );
    let table = c.ok(&["tasks", "--job", "1"]);
    assert!(table.contains("2 (1 preempted)"), "{table}");
}

/// The server gives a preempted task's GPU to the waiting task at once; the agent starts that
/// task only once the victim has ended (here, a SIGTERM handler that takes a second and a half),
/// so two programs never share a device: whether the agent runs GPU tasks itself
/// (`--accel-listen none`) or through its accelerator service.
#[test]
fn the_displacing_task_waits_for_the_victims_gpu_to_be_free() {
    for service in [false, true] {
        gpu_preemption(service);
    }
}

fn gpu_preemption(service: bool) {
    let mut c = Cluster::start_configured(
        if service {
            "preemption-gpu-service"
        } else {
            "preemption-gpu"
        },
        false,
        "preemption = \"requeue\"\nprefetch = 0\n",
    );
    c.start_agent_with_config_and(
        "g",
        "cores = 4\nmemory = \"8GiB\"\nkill_grace = \"10s\"\n[[accelerator]]\nkind = \"test-gpu\"\ncount = 1\n",
        if service { &[] } else { &["--accel-listen", "none"] },
    );
    c.wait_for_nodes(1);
    let (log, mark) = (c.dir.join("events"), c.dir.join("ran-once"));
    c.submit_file(
        "low.toml",
        &format!(
            "[[application]]\nname = \"low\"\ntasks = 1\npriority = 0\n[application.gpu]\n\
             kind = \"test-gpu\"\ncommand = \"echo start $CUDA_VISIBLE_DEVICES >> {log}; if [ -e \
             {mark} ]; then exit 0; fi; touch {mark}; trap 'echo term >> {log}; sleep 1.5; echo \
             released >> {log}; exit 143' TERM; sleep 30 & wait\"\n",
            log = log.display(),
            mark = mark.display()
        ),
    );
    wait_until("the low task to start", Duration::from_secs(20), || {
        lines(&log).iter().any(|l| l.starts_with("start"))
    });
    // Three of the node's four cores are free: only the GPU is wanted.
    c.submit_file(
        "high.toml",
        &format!(
            "[[application]]\nname = \"high\"\ntasks = 1\npriority = 5\n[application.gpu]\n\
             kind = \"test-gpu\"\ncommand = \"echo high $CUDA_VISIBLE_DEVICES >> {}\"\n",
            log.display()
        ),
    );
    high_then_low(&c, "8s", &log);
    let events = lines(&log);
    let pos = |prefix: &str| events.iter().position(|l| l.starts_with(prefix));
    assert!(
        pos("term") < pos("released") && pos("released") < pos("high"),
        "the victim released the GPU before the high task started on it (service {service}): \
         {events:?}"
    );
    assert_eq!(
        events.iter().filter(|l| l.starts_with("start")).count(),
        2,
        "the low task ran again: {events:?}"
    );
    assert_eq!(c.tasks(1)[0]["preemptions"], 1);
}

/// With `prefetch`, the agent holds tasks beyond its free cores in a queue. Preemption stops a
/// task that runs (a queued one holds no core), and the displacing task starts on its core
/// before the queue: the urgent job does not wait for the long tasks queued ahead of it.
#[test]
fn with_prefetch_the_displacing_task_starts_before_the_agents_queue() {
    let mut c = Cluster::start_configured(
        "preemption-prefetch",
        false,
        "preemption = \"requeue\"\nprefetch = 4\n",
    );
    c.start_agent("n", 2, &[]);
    c.wait_for_nodes(1);
    c.ok(&[
        "submit",
        "--tasks",
        "8",
        "--priority",
        "0",
        "--",
        "sleep",
        "60",
    ]);
    wait_until(
        "two low tasks to run and four to be queued",
        Duration::from_secs(20),
        || {
            c.tasks(1)
                .iter()
                .filter(|t| t["state"] == "running")
                .count()
                == 6
        },
    );
    let started = std::time::Instant::now();
    c.ok(&["submit", "--priority", "5", "--", "true"]);
    let out = c.cli(&["wait", "2", "--timeout", "20s"]);
    assert!(
        out.status.success() && started.elapsed() < Duration::from_secs(20),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let preempted: Vec<u64> = c
        .tasks(1)
        .iter()
        .filter(|t| t["preemptions"] == 1)
        .filter_map(|t| t["index"].as_u64())
        .collect();
    assert_eq!(
        preempted.len(),
        1,
        "one low task was stopped: {preempted:?}"
    );
    assert!(
        preempted[0] < 2,
        "a running one, not a queued one: {preempted:?}"
    );
}
