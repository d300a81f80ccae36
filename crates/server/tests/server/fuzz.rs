//! Mangled submissions through the whole server state: a job file, divisible load or workflow
//! with hostile values, dropped or doubled lines and stray bytes is submitted; either it is
//! refused with an error that names the file, or it is stored — and then dispatched to two
//! agents, run to its end or to the beats' budget, and found again, unchanged, by a server
//! restarted from the same store. Nothing panics on the way, and nothing accepted is lost.

use crate::common::{self, heartbeat_request, register_with};
use hetsched_core::testkit::mangle::mangle;
use hetsched_server::ServerConfig;
use hetsched_server::convert::Wire;
use hetsched_server::state::State;
use hetsched_server::store::Store;
use proptest::prelude::*;
use std::path::Path;

const SEEDS: &[&str] = &[
    r#"
[[application]]
name = "hello"
tasks = 4
indices = "1-7:2"
max_running = 2
retries = 1
priority = 5
requires = ["ssd"]
[application.cpu]
command = ["echo", "{index}"]
cores = 1
memory = "64MiB"
time_limit = "10s"
kill_grace = "1s"
env = { A = "1" }
"#,
    r#"
[[application]]
name = "mixed"
tasks = 3
[application.cpu]
command = "true"
cores = 2
[application.gpu]
command = "true"
gpus = 1
kind = "k80"
"#,
    r#"
[[divisible]]
name = "product"
units = 480
command = ["hetsched", "matrows", "--start", "{start}", "--end", "{end}"]
algo = "umrlm"
memory_per_unit = "1MiB"
retries = 2
time_limit = "60s"
"#,
    r#"balancer = "centralised"
[[task]]
name = "A"
instances = "1..=3"
processes = 2
cost = "1s"
outputs = ["m"]
command = "echo {index} > {output:m}"
[[task]]
name = "B"
instances = "1..=3"
cost = "1s"
inputs = ["m"]
command = ["cat", "{input:m}"]
"#,
];

fn open(dir: &Path) -> State {
    let config = ServerConfig {
        data_dir: dir.to_path_buf(),
        ..Default::default()
    };
    State::open(&config, Store::open(&dir.join("state.db")).expect("store")).expect("state")
}

/// Each job's id, state and task count, as a listing shows them.
fn listing(s: &State) -> Vec<(u64, String, u64)> {
    s.jobs()
        .jobs
        .into_iter()
        .map(|j| (j.id, j.state, j.tasks))
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn a_mangled_submission_is_refused_by_name_or_runs_and_survives_a_restart(
        seed in 0..SEEDS.len(),
        draws in prop::collection::vec(any::<(u8, usize, usize)>(), 1..5),
    ) {
        let dir = common::scratch("fuzz", "submission");
        let text = mangle(SEEDS[seed], &draws);
        let mut s = open(&dir);
        let nodes = [
            register_with(&mut s, "a", 4, &["ssd"]),
            register_with(&mut s, "b", 2, &[]),
        ];
        match s.submit("job.toml", &text, "/") {
            Err(e) => {
                let shown = e.to_string();
                prop_assert!(shown.contains("job.toml"), "the refusal names no file: {shown}\n{text}");
                prop_assert_eq!(s.job_count(), 0);
            }
            Ok(reply) => {
                prop_assert_eq!(s.job_count(), 1, "{}", text);
                // Every node runs what it is given and reports it done on its next beat.
                let mut running: Vec<Vec<(u64, u32)>> = vec![Vec::new(); nodes.len()];
                for _ in 0..12 {
                    for (i, &n) in nodes.iter().enumerate() {
                        let done: Vec<(u64, u32, bool)> =
                            running[i].iter().map(|&(t, a)| (t, a, true)).collect();
                        let r = s.heartbeat(heartbeat_request(n, &[], &done));
                        let r = r.map_err(|e| TestCaseError::fail(format!("heartbeat: {e}\n{text}")))?;
                        running[i] = r.assignments.iter().map(|a| (a.task_id, a.attempt)).collect();
                    }
                }
                let before = listing(&s);
                prop_assert_eq!(before.len(), 1);
                prop_assert_eq!(before[0].0, reply.job_id);
                drop(s);
                let s = open(&dir);
                prop_assert_eq!(listing(&s), before, "after a restart\n{}", text);
            }
        }
    }
}
