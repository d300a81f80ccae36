//! `hetsched agent --run-as-owner`: a user's job runs as the Unix account of the user's name, the
//! admin's as the agent's own user (root). Needs root, as the setting does (CI runs as root).

use crate::stream_workers::{a_restarted_agent_ends_them, all_end, signal, sleeper_topology};
use crate::support::*;
use std::time::Duration;

/// Whether this test process is root; says so when it is not.
fn root() -> bool {
    use std::os::unix::fs::MetadataExt;
    let root = std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0);
    if !root {
        eprintln!("skipped: needs root");
    }
    root
}

/// The real, effective, saved and file-system uids of process `pid`.
fn uids(pid: u32) -> Vec<String> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("the process");
    status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .expect("its uids")
        .split_whitespace()
        .map(str::to_string)
        .collect()
}

#[test]
fn with_run_as_owner_a_users_job_runs_as_its_account_and_the_admins_as_root() {
    if !root() {
        return;
    }
    let mut c = Cluster::start("run-as", false);
    c.start_agent("a", 2, &["--run-as-owner"]);
    c.wait_for_nodes(1);
    // Debian's `nobody` is a valid hetsched user name: its account on the node.
    let token = c.add_user("nobody");
    c.ok_as(
        &token,
        None,
        &["submit", "--wait", "--", "sh", "-c", "id -un; echo $HOME"],
    );
    assert_eq!(c.ok(&["log", "1", "--all"]), "nobody\n/nonexistent\n");
    c.ok(&["submit", "--wait", "--", "id", "-un"]);
    assert_eq!(c.ok(&["log", "2", "--all"]), "root\n");
    // The user's job ran from the account's own directory in the agent's, which others pass
    // through but cannot list.
    use std::os::unix::fs::MetadataExt;
    let work = c.dir.join("agent-a");
    assert_eq!(
        std::fs::metadata(&work).expect("work dir").mode() & 0o777,
        0o711
    );
    assert_eq!(
        std::fs::metadata(work.join("users/nobody"))
            .expect("area")
            .uid(),
        65534
    );
    // An agent that is not root refuses the setting (run as nobody, where `setpriv` is).
    let token = c.dir.join("agent-token-nobody");
    std::fs::copy(c.data().join("agent-token"), &token).expect("token");
    std::os::unix::fs::chown(&token, Some(65534), Some(65534)).expect("chown");
    let out = std::process::Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", BIN])
        .args([
            "agent",
            "--run-as-owner",
            "--server",
            &c.url(),
            "--name",
            "x",
        ])
        .arg("--token-file")
        .arg(&token)
        .arg("--work-dir")
        .arg(c.dir.join("agent-x"))
        .output();
    match out {
        Err(e) => eprintln!("skipped the non-root agent: setpriv: {e}"),
        Ok(out) => {
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(!out.status.success(), "{err}");
            assert!(
                err.contains(
                    "`run_as_owner` needs the agent to run as root (it runs as uid 65534)"
                ),
                "{err}"
            );
        }
    }
}

/// With `--run-as-owner` the agent is root, and a user's task starts from the account's
/// environment, not the agent's: before, it inherited all of it (root's `PATH`, a service's
/// secrets in the agent's environment), only `HOME`, `USER` and `LOGNAME` replaced.
#[test]
fn with_run_as_owner_a_users_task_sees_none_of_the_agents_environment() {
    if !root() {
        return;
    }
    let mut c = Cluster::start("run-as-env", false);
    c.start_agent("a", 1, &["--run-as-owner"]);
    c.wait_for_nodes(1);
    let token = c.add_user("nobody");
    c.ok_as(
        &token,
        None,
        &["submit", "--wait", "--env", "MINE=1", "--", "env"],
    );
    let env = c.ok(&["log", "1", "--all"]);
    let vars: std::collections::BTreeMap<&str, &str> =
        env.lines().filter_map(|l| l.split_once('=')).collect();
    assert_eq!(
        vars.get("PATH"),
        Some(&"/usr/local/bin:/usr/bin:/bin"),
        "{env}"
    );
    assert_eq!(vars.get("USER"), Some(&"nobody"), "{env}");
    assert_eq!(vars.get("MINE"), Some(&"1"), "the job's own: {env}");
    assert_eq!(vars.get("HETSCHED_JOB_ID"), Some(&"1"), "{env}");
    // The agent inherited this test's environment (cargo's variables among it).
    assert!(std::env::var_os("CARGO_MANIFEST_DIR").is_some());
    assert!(
        !vars.keys().any(|k| k.starts_with("CARGO")),
        "the agent's environment leaked: {env}"
    );
    // The admin's tasks run as the agent's own user, with its environment.
    c.ok(&["submit", "--wait", "--", "env"]);
    assert!(c.ok(&["log", "2", "--all"]).contains("CARGO_MANIFEST_DIR="));
    // A root agent without the setting runs everyone's tasks as root: it says so at its start.
    c.start_agent("plain", 1, &[]);
    c.wait_for_nodes(2);
    let warning =
        "runs as root without --run-as-owner: every task, whoever submitted it, runs as root";
    assert!(
        c.agent_log("plain").contains(warning),
        "{}",
        c.agent_log("plain")
    );
    assert!(!c.agent_log("a").contains(warning), "{}", c.agent_log("a"));
}

/// A user's workflow on agents with `--run-as-owner`: every instance runs as the account, reads
/// its inputs (fetched from the producer's agent, served as the account) and writes its output in
/// its instance directory, the account's.
#[test]
fn with_run_as_owner_a_users_workflow_instances_run_as_its_account() {
    use std::os::unix::fs::MetadataExt;
    if !root() {
        return;
    }
    let mut c = Cluster::start("run-as-wf", false);
    for a in ["n1", "n2"] {
        c.start_agent(a, 1, &["--run-as-owner"]);
    }
    c.wait_for_nodes(2);
    let token = c.add_user("nobody");
    let file = c.write(
        "wf.toml",
        r#"balancer = "centralised"

[[task]]
name = "p"
instances = 2
cost = "1s"
outputs = ["a"]
command = "echo $(id -un) {index} > {output:a}"

[[task]]
name = "c"
instances = 1
cost = "1s"
inputs = ["a"]
outputs = ["r"]
command = "cat {input:a} > {output:r}; id -un >> {output:r}"
"#,
    );
    c.ok_as(
        &token,
        None,
        &["submit", file.to_str().expect("path"), "--wait"],
    );
    let consumer = c
        .tasks(1)
        .into_iter()
        .find(|t| t["app"] == "c")
        .expect("the consumer");
    let node = consumer["node"].as_str().expect("its node").to_string();
    let dir = c.dir.join(format!("agent-{node}/wf/1/c-0"));
    let text = std::fs::read_to_string(dir.join("out/r")).expect("its output");
    let mut lines: Vec<&str> = text.lines().collect();
    lines.sort_unstable();
    assert_eq!(lines.len(), 3, "{text}");
    assert!(lines.iter().all(|l| l.starts_with("nobody")), "{text}");
    assert_eq!(std::fs::metadata(&dir).expect("instance dir").uid(), 65534);
}

/// A user's stream topology on an agent with `--run-as-owner`: its worker process runs as the
/// account, from the account's own directory, and what its executors write (a count bolt's
/// output file) is the account's.
#[test]
fn with_run_as_owner_a_users_topology_workers_run_as_its_account() {
    use std::os::unix::fs::MetadataExt;
    if !root() {
        return;
    }
    let mut c = Cluster::start("run-as-topo", false);
    c.start_agent("a", 2, &["--run-as-owner"]);
    c.wait_for_nodes(1);
    let token = c.add_user("nobody");
    // The topology's files live where the user submits from: a directory of the account's.
    let base = c.dir.join("mine");
    std::fs::create_dir_all(&base).expect("dir");
    std::fs::write(base.join("corpus.txt"), "to be or not to be\n").expect("corpus");
    std::os::unix::fs::chown(&base, Some(65534), Some(65534)).expect("chown");
    std::fs::write(
        base.join("mine.toml"),
        r#"name = "mine"

[[component]]
name = "sentences"
kind = "spout"
parallelism = 1
cpu = 40.0
builtin = "corpus-spout"
params = { file = "corpus.txt", repeat = 0, rate = 50 }

[[component]]
name = "count"
kind = "bolt"
parallelism = 1
cpu = 40.0
builtin = "count"
params = { output = "counts-{index}.tsv", every = "200ms" }

[[stream]]
from = "sentences"
to = "count"
grouping = "shuffle"
rate = 50.0
"#,
    )
    .expect("topology");
    c.ok_as(&token, Some(&base), &["topology", "submit", "mine.toml"]);
    let mut pid = 0;
    wait_until("the worker to run", Duration::from_secs(30), || {
        let v = c.json(&["topology", "show", "mine"]);
        pid = v["workers"][0]["pid"].as_u64().unwrap_or(0) as u32;
        pid != 0
    });
    assert_eq!(
        uids(pid),
        ["65534"; 4],
        "real, effective, saved and file-system uid are nobody's"
    );
    let dir = c.dir.join("agent-a/users/nobody/stream/mine-g1-w0");
    let config = std::fs::metadata(dir.join("config.json")).expect("its configuration");
    assert_eq!((config.uid(), config.mode() & 0o777), (65534, 0o600));
    let counts = base.join("counts-0.tsv");
    wait_until("the count bolt's output", Duration::from_secs(30), || {
        counts.exists()
    });
    assert_eq!(std::fs::metadata(&counts).expect("counts").uid(), 65534);
    // Its stderr is read from the account's directory, as the account, for its owner.
    let err = c
        .command(&["topology", "log", "mine"])
        .env("HETSCHED_TOKEN_FILE", &token)
        .output()
        .expect("topology log");
    assert!(
        err.status.success(),
        "{}",
        String::from_utf8_lossy(&err.stderr)
    );
    c.ok(&["topology", "kill", "mine"]);
    // A user with no account on the node: its worker cannot start, and `topology show` says why.
    let ghost = c.add_user("hetsched-ghost");
    let text = std::fs::read_to_string(base.join("mine.toml")).expect("topology");
    std::fs::write(
        base.join("theirs.toml"),
        text.replace("name = \"mine\"", "name = \"theirs\""),
    )
    .expect("topology");
    c.ok_as(&ghost, Some(&base), &["topology", "submit", "theirs.toml"]);
    let says = "node a: no Unix account `hetsched-ghost` to run the task of hetsched user \
                `hetsched-ghost` as";
    wait_until("the start error", Duration::from_secs(30), || {
        c.json(&["topology", "show", "theirs"])["workers"][0]["start_error"]
            .as_str()
            .is_some_and(|e| e.contains(says))
    });
    let shown = c.ok(&["topology", "show", "theirs"]);
    assert!(
        shown.contains(&format!("worker 0 cannot start on a: {says}")),
        "{shown}"
    );
}

/// A user's worker is SIGKILLed on an agent with `--run-as-owner` that runs on: the worker's
/// programs, which run as the user's account, and what they started (in their group and under
/// `setsid`) are ended by the agent, which finds them by the worker's mark, as the admin's are
/// (`stream_workers::a_sigkilled_workers_program_and_what_it_started_end`).
#[test]
fn with_run_as_owner_a_users_sigkilled_workers_programs_end() {
    if !root() {
        return;
    }
    let (c, pids, worker) = sleeper_topology(
        "run-as-worker-sigkill",
        &["--run-as-owner"],
        Some(("nobody", 65534)),
    );
    assert_eq!(uids(worker), ["65534"; 4], "the worker runs as nobody");
    signal(worker, "KILL");
    all_end(&pids, &format!("outlive their SIGKILLed worker {worker}"));
    c.ok(&["topology", "kill", "sleeper"]);
}

/// A user's worker and its agent are both SIGKILLed on an agent with `--run-as-owner`: the
/// worker's programs, which run as the user's account, and what they started (in their group
/// and under `setsid`) are ended by the agent started again, as the admin's are
/// (`stream_workers::a_restarted_agent_ends_what_the_workers_that_died_with_it_left`).
#[test]
fn with_run_as_owner_a_restarted_agent_ends_what_a_users_dead_worker_left() {
    if !root() {
        return;
    }
    let run_as_owner = ["--run-as-owner"];
    let (mut c, pids, worker) = sleeper_topology(
        "run-as-agent-sigkill",
        &run_as_owner,
        Some(("nobody", 65534)),
    );
    for p in pids.iter().copied().chain([worker]) {
        assert_eq!(uids(p), ["65534"; 4], "process {p} runs as nobody");
    }
    a_restarted_agent_ends_them(&mut c, &pids, worker, &run_as_owner);
    c.ok(&["topology", "kill", "sleeper"]);
}
