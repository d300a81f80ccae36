//! Stream workers' processes through a real agent: what the multi-lang programs of a worker
//! that was SIGKILLed (it could end nothing) left running is ended by the agent that started it.

use crate::support;

use std::time::{Duration, Instant};
use support::{Cluster, wait_until};

/// Whether process `pid` runs (a zombie does not).
fn running(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        !s.rsplit_once(')')
            .is_some_and(|(_, r)| r.trim_start().starts_with('Z'))
    })
}

/// A multi-lang bolt whose program (`sh`, passes its handshake then waits) runs a `sleep` in
/// its group and one in a session of its own (`setsid`): its worker is SIGKILLed, and the
/// program and both sleeps end within a deadline.
#[test]
fn a_sigkilled_workers_program_and_what_it_started_end() {
    let mut c = Cluster::start("stream-worker-sigkill", false);
    c.start_agent("a", 2, &[]);
    c.wait_for_nodes(1);
    let listed = c.dir.join("pids");
    let program = c.write(
        "sleeper.sh",
        "while read -r l; do [ \"$l\" = end ] && break; done\n\
         setsid sleep 300 </dev/null >/dev/null 2>&1 &\n\
         echo $! >> \"$1\"\n\
         sleep 300 </dev/null >/dev/null 2>&1 &\n\
         echo $! >> \"$1\"\n\
         echo $$ >> \"$1\"\n\
         printf '{\"pid\": %d}\\nend\\n' $$\n\
         wait\n",
    );
    let topology = format!(
        r#"name = "sleeper"
[[component]]
name = "numbers"
kind = "spout"
parallelism = 1
cpu = 10.0
builtin = "sequence-spout"
params = {{ rate = 2.0 }}
[[component]]
name = "sleeper"
kind = "bolt"
parallelism = 1
cpu = 10.0
command = ["sh", "{}", "{}"]
params = {{ "topology.subprocess.timeout.secs" = 600 }}
[[stream]]
from = "numbers"
to = "sleeper"
rate = 2.0
"#,
        program.display(),
        listed.display()
    );
    let file = c.write("sleeper.toml", &topology);
    c.ok(&["topology", "submit", file.to_str().expect("path")]);
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
    let killed = std::process::Command::new("kill")
        .args(["-9", &worker.to_string()])
        .status()
        .expect("kill");
    assert!(killed.success());
    let since = Instant::now();
    while pids.iter().any(|&p| running(p)) {
        if since.elapsed() > Duration::from_secs(20) {
            let left: Vec<u32> = pids.iter().copied().filter(|&p| running(p)).collect();
            for p in &left {
                let _ = std::process::Command::new("kill")
                    .args(["-9", &p.to_string()])
                    .status();
            }
            panic!(
                "{left:?} of {pids:?} (sleeps, program) outlive their SIGKILLed worker {worker}"
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    c.ok(&["topology", "kill", "sleeper"]);
}
