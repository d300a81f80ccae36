//! Stream workers' processes through a real agent: what the multi-lang programs of a worker
//! that was SIGKILLed (it could end nothing) left running is ended by the agent that started it,
//! or, when the agent died with it, by the agent started again.

use crate::support;

use std::time::{Duration, Instant};
use support::{Cluster, wait_until};

/// Whether process `pid` runs (a zombie does not).
pub(crate) fn running(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        !s.rsplit_once(')')
            .is_some_and(|(_, r)| r.trim_start().starts_with('Z'))
    })
}

/// Starts cluster `name` with one agent, `a` (2 cores, with `agent_flags`), and submits
/// topology `sleeper`: a multi-lang bolt whose program (`sh`, passes its handshake then waits)
/// runs a `sleep` in its group and one in a session of its own (`setsid`). The admin submits
/// it, or with `user` (its name and its account's uid on the node) that user, from a directory
/// of the account's holding the program and the file it lists pids in, which the program, run
/// as the account, reads and writes. Returns the cluster, the pids of both sleeps and the program,
/// once they run, and the worker's pid.
pub(crate) fn sleeper_topology(
    name: &str,
    agent_flags: &[&str],
    user: Option<(&str, u32)>,
) -> (Cluster, Vec<u32>, u32) {
    let mut c = Cluster::start(name, false);
    c.start_agent("a", 2, agent_flags);
    c.wait_for_nodes(1);
    let base = match user {
        Some((user, _)) => c.dir.join(user),
        None => c.dir.clone(),
    };
    std::fs::create_dir_all(&base).expect("dir");
    let listed = base.join("pids");
    let program = base.join("sleeper.sh");
    std::fs::write(
        &program,
        "while read -r l; do [ \"$l\" = end ] && break; done\n\
         setsid sleep 300 </dev/null >/dev/null 2>&1 &\n\
         echo $! >> \"$1\"\n\
         sleep 300 </dev/null >/dev/null 2>&1 &\n\
         echo $! >> \"$1\"\n\
         echo $$ >> \"$1\"\n\
         printf '{\"pid\": %d}\\nend\\n' $$\n\
         wait\n",
    )
    .expect("program");
    let topology = support::numbers_into(
        "sleeper",
        &[support::CommandBolt {
            name: "sleeper",
            command: &[
                "sh",
                program.to_str().expect("path"),
                listed.to_str().expect("path"),
            ],
            params: "\"topology.subprocess.timeout.secs\" = 600",
        }],
    );
    let file = base.join("sleeper.toml");
    std::fs::write(&file, topology).expect("topology");
    let submit = ["topology", "submit", file.to_str().expect("path")];
    match user {
        Some((user, uid)) => {
            std::os::unix::fs::chown(&base, Some(uid), Some(uid)).expect("chown");
            let token = c.add_user(user);
            c.ok_as(&token, Some(&base), &submit);
        }
        None => {
            c.ok(&submit);
        }
    }
    let mut pids: Vec<u32> = Vec::new();
    wait_until(
        "the program to list itself and its sleeps",
        Duration::from_secs(60),
        || {
            pids = std::fs::read_to_string(&listed)
                .unwrap_or_default()
                .lines()
                .filter_map(|l| l.trim().parse().ok())
                .take(3)
                .collect();
            pids.len() == 3
        },
    );
    let mut worker = 0;
    wait_until("the worker's pid", Duration::from_secs(30), || {
        worker = c.json(&["topology", "show", "sleeper"])["workers"][0]["pid"]
            .as_u64()
            .unwrap_or(0);
        worker != 0
    });
    assert!(pids.iter().all(|&p| running(p)), "{pids:?}");
    (c, pids, u32::try_from(worker).expect("a pid"))
}

/// Sends `signal` (`KILL`, `STOP`) to `pid`.
pub(crate) fn signal(pid: u32, signal: &str) {
    let sent = std::process::Command::new("kill")
        .args([format!("-{signal}"), pid.to_string()])
        .status()
        .expect("kill");
    assert!(sent.success(), "kill -{signal} {pid}");
}

/// Waits (20 s at most) for every process of `pids` to end; SIGKILLs those left and fails
/// saying `what` if some outlive it.
pub(crate) fn all_end(pids: &[u32], what: &str) {
    let since = Instant::now();
    while pids.iter().any(|&p| running(p)) {
        if since.elapsed() > Duration::from_secs(20) {
            let left: Vec<u32> = pids.iter().copied().filter(|&p| running(p)).collect();
            for &p in &left {
                let _ = std::process::Command::new("kill")
                    .args(["-9", &p.to_string()])
                    .status();
            }
            panic!("{left:?} of {pids:?} (sleeps, program) {what}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A multi-lang bolt's program runs a `sleep` in its group and one with `setsid`: its worker
/// is SIGKILLed, and the program and both sleeps end within a deadline.
#[test]
fn a_sigkilled_workers_program_and_what_it_started_end() {
    let (c, pids, worker) = sleeper_topology("stream-worker-sigkill", &[], None);
    signal(worker, "KILL");
    all_end(&pids, &format!("outlive their SIGKILLed worker {worker}"));
    c.ok(&["topology", "kill", "sleeper"]);
}

/// SIGKILLs agent `a` of a [`sleeper_topology`] and its `worker` (stopped first, so that it
/// cannot see its stdin close and end its programs itself), checks that nothing ended the
/// programs `pids` then, starts `a` again with `agent_flags`, and asserts that every one of
/// `pids` ends within a deadline.
pub(crate) fn a_restarted_agent_ends_them(
    c: &mut Cluster,
    pids: &[u32],
    worker: u32,
    agent_flags: &[&str],
) {
    signal(worker, "STOP");
    c.kill_agent("a");
    signal(worker, "KILL");
    wait_until("the worker to end", Duration::from_secs(10), || {
        !running(worker)
    });
    assert!(
        pids.iter().all(|&p| running(p)),
        "with no agent, nothing ended them yet: {pids:?}"
    );
    c.start_agent("a", 2, agent_flags);
    all_end(
        pids,
        &format!(
            "outlive their worker {worker}, SIGKILLed with its agent, after the agent started again"
        ),
    );
}

/// The agent and its worker are both SIGKILLed: nothing ends the programs then. The agent
/// started again sweeps what carries the dead worker's mark before it starts workers, and the
/// program and both sleeps end within a deadline.
#[test]
fn a_restarted_agent_ends_what_the_workers_that_died_with_it_left() {
    let (mut c, pids, worker) = sleeper_topology("stream-worker-agent-sigkill", &[], None);
    a_restarted_agent_ends_them(&mut c, &pids, worker, &[]);
    c.ok(&["topology", "kill", "sleeper"]);
}
