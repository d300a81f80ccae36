//! Workflows in the runtime (issue 13), end to end with the real `hetsched` binary on loopback:
//! a server and three agents as child processes, a 60-instance workflow in four stages with
//! fan-out and fan-in whose every instance reads its inputs (fetched from the producers' agents)
//! and writes an output computed from them. Checked: the final outputs, each instance ran once,
//! no instance started before its producers ended, PCDDB requests travelled between agents, and
//! the same outputs under the centralised balancer; an agent or the server SIGKILLed mid-way;
//! bad files refused at submission with file:line and nothing stored.

use crate::support;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};
use support::{Cluster, tls_file, wait_until};

/// Four stages, 60 instances:
/// - `seed` ×4: a_k = 10·k;
/// - `spread` ×24 (fan-out: every instance reads all four `a`): b_i = Σa + i = 100 + i;
/// - `double` ×24 (instance by instance on `spread`): c_i = 2·b_i;
/// - `gather` ×8 (fan-in: every instance reads all 24 `c`): d_j = Σc + j = 5400 + j.
///
/// Every instance appends its name to `RUNLOG` (each must appear once).
/// The test workflow: `seed_pause` and `pause` go before the work of each `seed` and each
/// `double` instance (e.g. `sleep 0.3; `).
fn workflow(balancer: &str, runlog: &Path, seed_pause: &str, pause: &str) -> String {
    format!(
        r#"balancer = "{balancer}"

[[task]]
name = "seed"
instances = 4
cost = "1s"
outputs = ["a"]
command = "echo seed-{{index}} >> $RUNLOG; {seed_pause}echo $(({{index}} * 10)) > {{output:a}}"
env = {{ RUNLOG = "{log}" }}

[[task]]
name = "spread"
instances = "1..=24"
cost = "1s"
inputs = ["a"]
outputs = ["b"]
command = "echo spread-{{index}} >> $RUNLOG; s=0; for f in {{input:a}}; do s=$((s + $(cat $f))); done; echo $((s + {{index}})) > {{output:b}}"
env = {{ RUNLOG = "{log}" }}

[[task]]
name = "double"
instances = "1..=24"
cost = "1s"
inputs = ["b"]
outputs = ["c"]
command = "echo double-{{index}} >> $RUNLOG; {pause} echo $(( $(cat {{input:b}}) * 2 )) > {{output:c}}"
env = {{ RUNLOG = "{log}" }}
retries = 1

[[task]]
name = "gather"
instances = 8
cost = "1s"
inputs = ["c"]
outputs = ["d"]
command = "echo gather-{{index}} >> $RUNLOG; s=0; for f in {{input:c}}; do s=$((s + $(cat $f))); done; echo $((s + {{index}})) > {{output:d}}"
env = {{ RUNLOG = "{log}" }}
"#,
        log = runlog.display()
    )
}

/// Proximity clusters of at least three nodes (spec 05 §2's ⌊0.3·3⌋ would make each agent a
/// cluster of its own, where no request travels from one agent to another).
const SERVER_CONFIG: &str = "[workflow]\ncluster_size = 3\n";

fn start(name: &str) -> Cluster {
    let mut c = Cluster::start_configured(name, false, SERVER_CONFIG);
    for a in ["n1", "n2", "n3"] {
        c.start_agent(a, 2, &[]);
    }
    c.wait_for_nodes(3);
    c
}

fn submit(c: &Cluster, file: &Path) -> u64 {
    let v = c.json(&["submit", &file.display().to_string()]);
    v["job_id"]
        .as_u64()
        .unwrap_or_else(|| panic!("no job id in {v}"))
}

pub(crate) fn wait_done(c: &Cluster, job: u64, timeout: Duration) -> serde_json::Value {
    let mut last = serde_json::Value::Null;
    let start = Instant::now();
    loop {
        let out = c.cli(&["job", &job.to_string(), "--output", "json"]);
        if out.status.success()
            && let Ok(v) = serde_json::from_slice::<serde_json::Value>(&out.stdout)
        {
            if ["completed", "failed", "cancelled"].contains(&v["state"].as_str().unwrap_or("")) {
                return v;
            }
            last = v;
        }
        assert!(
            start.elapsed() < timeout,
            "workflow {job} not finished in {timeout:?}: {last}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The final outputs d_1..d_8, read from the agents that produced them.
fn final_outputs(c: &Cluster, job: u64) -> Vec<i64> {
    let seq = job & 0xff_ffff_ffff_ffff;
    let mut d = BTreeMap::new();
    for t in c.tasks(job) {
        if t["app"] == "gather" {
            let node = t["node"].as_str().unwrap_or_default().to_string();
            let k = t["index"].as_u64().unwrap_or(0);
            // The directory is by instance number within the task (0-based).
            let path = c
                .dir
                .join(format!("agent-{node}"))
                .join(format!("wf/{seq}"));
            let file = path.join(format!("gather-{}/out/d", k - 1));
            let v: i64 = std::fs::read_to_string(&file)
                .unwrap_or_else(|e| panic!("{}: {e}", file.display()))
                .trim()
                .parse()
                .expect("a number");
            d.insert(k, v);
        }
    }
    d.into_values().collect()
}

/// Instance `app[i]` of workflow `job` as `hetsched tasks` lists it.
fn instance(c: &Cluster, job: u64, app: &str, i: u64) -> serde_json::Value {
    c.tasks(job)
        .into_iter()
        .find(|t| t["app"] == app && t["index"].as_u64() == Some(i))
        .unwrap_or_else(|| panic!("{app}[{i}]"))
}

fn expected() -> Vec<i64> {
    (1..=8).map(|j| 5400 + j).collect()
}

/// Every instance's (task, index) → (started, finished) from the server's records.
fn times(c: &Cluster, job: u64) -> BTreeMap<(String, u64), (u64, u64)> {
    c.tasks(job)
        .iter()
        .map(|t| {
            (
                (
                    t["app"].as_str().unwrap_or_default().to_string(),
                    t["index"].as_u64().unwrap_or(0),
                ),
                (
                    t["started_ns"].as_u64().expect("a recorded start"),
                    t["finished_ns"].as_u64().expect("a recorded end"),
                ),
            )
        })
        .collect()
}

/// No instance started before every producer it waits for ended.
fn check_order(t: &BTreeMap<(String, u64), (u64, u64)>) {
    let all_end = |task: &str| {
        t.iter()
            .filter(|((n, _), _)| n == task)
            .map(|(_, (_, e))| *e)
            .max()
            .unwrap_or(u64::MAX)
    };
    let first_start = |task: &str| {
        t.iter()
            .filter(|((n, _), _)| n == task)
            .map(|(_, (s, _))| *s)
            .min()
            .unwrap_or(0)
    };
    assert!(
        first_start("spread") >= all_end("seed"),
        "spread before seed ended"
    );
    assert!(
        first_start("gather") >= all_end("double"),
        "gather before double ended"
    );
    for i in 1..=24 {
        let b = t[&("spread".to_string(), i)];
        let c = t[&("double".to_string(), i)];
        assert!(c.0 >= b.1, "double[{i}] started before spread[{i}] ended");
    }
}

fn runs(log: &Path) -> BTreeMap<String, usize> {
    let mut m = BTreeMap::new();
    for l in std::fs::read_to_string(log).unwrap_or_default().lines() {
        *m.entry(l.to_string()).or_insert(0) += 1;
    }
    m
}

#[test]
fn a_sixty_instance_workflow_balanced_by_pcddb_and_by_the_centralised_dispatcher() {
    let c = start("wf-modes");
    let mut figures = Vec::new();
    for mode in ["pcddb", "centralised"] {
        let log = c.dir.join(format!("runs-{mode}.log"));
        // The seeds take 0.3 s (three self-check periods), so every idle agent has reported
        // itself underloaded when the 24 `spread` instances become ready: the first agent of
        // the launch node's table takes MT × cores = 20 and passes the rest to another agent.
        let file = c.write(
            &format!("wf-{mode}.toml"),
            &workflow(mode, &log, "sleep 0.3; ", ""),
        );
        let t0 = Instant::now();
        let job = submit(&c, &file);
        let v = wait_done(&c, job, Duration::from_secs(60));
        let took = t0.elapsed();
        assert_eq!(v["state"], "completed", "{v}");
        assert_eq!(final_outputs(&c, job), expected(), "{mode}");
        let r = runs(&log);
        assert_eq!(r.len(), 60, "{mode}: {r:?}");
        assert!(
            r.values().all(|&n| n == 1),
            "{mode}: an instance ran twice: {r:?}"
        );
        assert!(c.tasks(job).iter().all(|t| t["attempt"] == 1), "{mode}");
        // Every instance's process was measured, as a batch task's is.
        assert!(
            c.tasks(job)
                .iter()
                .all(|t| t["usage"]["max_rss_bytes"].as_u64().is_some()),
            "{mode}: an instance without its usage"
        );
        check_order(&times(&c, job));
        // Per-task progress: every task done.
        let apps = v["apps"].as_array().cloned().unwrap_or_default();
        assert_eq!(apps.len(), 4);
        assert!(
            apps.iter().all(|a| a["counts"]["succeeded"] == a["tasks"]),
            "{v}"
        );
        let nodes = c.json(&["nodes"]);
        let sent: Vec<u64> = nodes
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|n| n["balance_sent"].as_u64().unwrap_or(0))
                    .collect()
            })
            .unwrap_or_default();
        let hops: u64 = nodes
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|n| n["balance_received"].as_u64().unwrap_or(0))
                    .sum()
            })
            .unwrap_or(0);
        assert_eq!(v["balancer"], mode);
        figures.push(format!(
            "{mode}: {:.2}s from submission to completion; launch node sent {} and received {} \
             messages; agents sent {sent:?}; requests received from other agents: {hops}",
            took.as_secs_f64(),
            v["launch_sent"],
            v["launch_received"]
        ));
        if mode == "pcddb" {
            assert!(
                hops > 0,
                "no PCDDB request travelled from one agent to another: {nodes}"
            );
            // Proximity clusters from the round trips the agents measured (spec 05 §2; with
            // three nodes m = ⌊0.3·3⌋ → 1, so each node is a cluster of its own).
            let clusters: Vec<String> = nodes
                .as_array()
                .map(|a| {
                    a.iter()
                        .map(|n| n["clusters"].as_str().unwrap_or("").to_string())
                        .collect()
                })
                .unwrap_or_default();
            assert!(clusters.iter().all(|c| c.starts_with("Sc")), "{nodes}");
            figures.push(format!("clusters: {clusters:?}"));
        }
    }
    eprintln!("{}", figures.join("\n"));
}

fn kill_mid_workflow(mode: &str) {
    let mut c = start(&format!("wf-kill-{mode}"));
    let log = c.dir.join("runs.log");
    // `double` takes a moment, so the kills land while instances run.
    let file = c.write("wf.toml", &workflow(mode, &log, "", "sleep 0.4;"));
    let job = submit(&c, &file);
    // The victim: the agent that holds or runs `double` instances once they run.
    let mut victim = String::new();
    let mut held = Vec::new();
    wait_until("double to be running", Duration::from_secs(30), || {
        let tasks = c.tasks(job);
        let on = |n: &str| {
            tasks
                .iter()
                .filter(|t| t["app"] == "double" && t["node"] == n && t["state"] != "ready")
                .filter_map(|t| t["index"].as_u64())
                .collect::<Vec<_>>()
        };
        for n in ["n1", "n2", "n3"] {
            if !on(n).is_empty() {
                victim = n.to_string();
                held = on(n);
                return true;
            }
        }
        false
    });
    c.signal_agent(&victim, "KILL");
    let _ = c.agent_exit(&victim, Duration::from_secs(10));
    // And the server, mid-way (the last stage has not begun).
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        !runs(&log).keys().any(|k| k.starts_with("gather")),
        "too late"
    );
    c.kill_server();
    c.start_server();
    let v = wait_done(&c, job, Duration::from_secs(60));
    assert_eq!(v["state"], "completed", "{mode}: {v}");
    assert_eq!(final_outputs(&c, job), expected(), "{mode}");
    let tasks = c.tasks(job);
    // Every `double` the dead agent ran or held (gather needs them all) was produced again on
    // a live agent.
    for i in &held {
        let t = tasks
            .iter()
            .find(|t| t["app"] == "double" && t["index"].as_u64() == Some(*i))
            .expect("task");
        assert!(
            t["node"] != victim.as_str() && t["attempt"].as_u64() >= Some(2),
            "{mode}: double[{i}] held by {victim}: {t}"
        );
    }
    eprintln!("{mode}: {victim} killed holding double {held:?}; all produced again elsewhere");
    assert!(
        tasks.iter().any(|t| t["attempt"].as_u64() > Some(1)),
        "what the dead agent ran or held was run again"
    );
    // Every gather instance (the last stage) ran on a live agent with inputs fetched from live
    // agents only: the outputs above came out right.
    assert!(
        tasks
            .iter()
            .filter(|t| t["app"] == "gather")
            .all(|t| t["node"] != victim.as_str())
    );
}

#[test]
fn a_killed_agent_and_a_killed_server_do_not_stop_the_workflow() {
    kill_mid_workflow("centralised");
    kill_mid_workflow("pcddb");
}

/// An agent that dies holding a PCDDB request — killed mid-hop, while it passes the request's
/// rest to the next node of its table, which is stopped and never takes it — leaves instances
/// that no node claimed or handed back: after `[workflow] offer_ttl` the server withdraws them
/// and places them again, and the workflow completes on the agent left. Without the offer's
/// time to live they stayed offered for ever and the workflow never ended.
#[test]
fn instances_of_a_request_an_agent_died_holding_run_elsewhere_after_the_offer_ttl() {
    // One core each, MT = 2: the first node of a request takes two instances and passes the
    // rest on. Nodes stopped for the hop are declared dead after 3 s, not before the test
    // found which of them holds the request.
    let mut c = Cluster::start_configured_beating(
        "wf-offer-ttl",
        "[workflow]\ncluster_size = 3\nlt = 1\nmt = 2\noffer_ttl = \"3s\"\n",
        "100ms",
        "3s",
    );
    for a in ["n1", "n2", "n3"] {
        c.start_agent(a, 1, &[]);
    }
    c.wait_for_nodes(3);
    let go = c.dir.join("go");
    // `gate` holds its node until `go` exists; then the eight `work` instances are ready at
    // once, and a `sum` reads them all.
    let file = c.write(
        "wf.toml",
        &format!(
            r#"balancer = "pcddb"

[[task]]
name = "gate"
instances = 1
cost = "1s"
outputs = ["g"]
command = "while [ ! -e {go} ]; do sleep 0.05; done; echo 1 > {{output:g}}"

[[task]]
name = "work"
instances = 8
cost = "1s"
inputs = ["g"]
outputs = ["w"]
command = "echo $(( $(cat {{input:g}}) + {{index}} )) > {{output:w}}"

[[task]]
name = "sum"
instances = 1
cost = "1s"
inputs = ["w"]
outputs = ["s"]
command = "s=0; for f in {{input:w}}; do s=$((s + $(cat $f))); done; echo $s > {{output:s}}"
"#,
            go = go.display()
        ),
    );
    let job = submit(&c, &file);
    let running_on = |app: &str| -> Vec<String> {
        c.tasks(job)
            .iter()
            .filter(|t| t["app"] == app && t["state"] != "ready")
            .filter_map(|t| t["node"].as_str().map(str::to_string))
            .collect()
    };
    let mut gate = Vec::new();
    wait_until("the gate to run", Duration::from_secs(20), || {
        gate = running_on("gate");
        !gate.is_empty()
    });
    let survivor = gate[0].clone();
    let others: Vec<&str> = ["n1", "n2", "n3"]
        .into_iter()
        .filter(|n| *n != survivor)
        .collect();
    // Both idle agents report themselves underloaded (a PCDDB message sent, as their
    // heartbeats tell the server) before they are stopped, so the launch node's table lists
    // them; stopped, neither takes the request sent to the first of them until it runs again.
    wait_until(
        "both idle agents to report themselves underloaded",
        Duration::from_secs(20),
        || {
            let nodes = c.json(&["nodes"]);
            others
                .iter()
                .all(|n| node_named(&nodes, n)["balance_sent"].as_u64() > Some(0))
        },
    );
    for n in &others {
        c.signal_agent(n, "STOP");
    }
    let launch_sent = |c: &Cluster| c.json(&["job", &job.to_string()])["launch_sent"].as_u64();
    let before = launch_sent(&c);
    std::fs::write(&go, "").expect("go");
    // The gate ended and the launch node sent the request of the eight `work` instances (to
    // the first of the stopped agents: nothing else is underloaded).
    wait_until(
        "the gate to end and the request to go out",
        Duration::from_secs(20),
        || {
            c.tasks(job)
                .iter()
                .any(|t| t["app"] == "gate" && t["state"] == "succeeded")
                && launch_sent(&c) > before
        },
    );
    // Run one of them again: if the request waits for it, the reply to its first heartbeat
    // brings it, it takes two instances and passes the rest to the other, stopped one (the hop
    // waits for an answer for up to 5 s), and its next heartbeat claims the two, which the
    // server then lists on it. Once it was heard three times with no `work` instance listed
    // on it, the request is not for it: stop it again and try the other.
    let mut holder = None;
    for (i, n) in others.iter().enumerate() {
        c.signal_agent(n, "CONT");
        let mut beats = Beats::since(Instant::now());
        wait_until(
            &format!("{n} to take the request or be heard three times without it"),
            Duration::from_secs(30),
            || {
                if running_on("work").iter().any(|w| w == n) {
                    holder = Some((n.to_string(), others[1 - i].to_string()));
                    return true;
                }
                beats.look(&c, n) >= 3
            },
        );
        if holder.is_some() {
            break;
        }
        eprintln!("{n} was heard {} times without the request", beats.count);
        c.signal_agent(n, "STOP");
    }
    let (holder, next) = holder.expect("one of the idle agents took the request");
    eprintln!("{holder} took the request and passed it on to {next}");
    // Killed mid-hop, and the next node with it: nobody claims or returns the rest.
    c.signal_agent(&holder, "KILL");
    c.signal_agent(&next, "KILL");
    let _ = c.agent_exit(&holder, Duration::from_secs(10));
    let _ = c.agent_exit(&next, Duration::from_secs(10));
    let v = wait_done(&c, job, Duration::from_secs(25));
    assert_eq!(v["state"], "completed", "{v}");
    let log = std::fs::read_to_string(c.dir.join("server.log")).unwrap_or_default();
    assert!(
        log.contains("went unanswered for 3s"),
        "the request's instances were not placed again for want of an answer: {log}"
    );
    let tasks = c.tasks(job);
    assert!(
        tasks
            .iter()
            .filter(|t| t["app"] == "work" || t["app"] == "sum")
            .all(|t| t["node"] == survivor.as_str()),
        "every instance ends on {survivor}, the agent left: {tasks:?}"
    );
    // The sum of 1 + i over the eight instances, read where it was made.
    let seq = job & 0xff_ffff_ffff_ffff;
    let out = c
        .dir
        .join(format!("agent-{survivor}"))
        .join(format!("wf/{seq}/sum-0/out/s"));
    let sum = std::fs::read_to_string(&out).unwrap_or_else(|e| panic!("{}: {e}", out.display()));
    let indices: i64 = tasks
        .iter()
        .filter(|t| t["app"] == "work")
        .filter_map(|t| t["index"].as_i64())
        .sum();
    assert_eq!(sum.trim(), (8 + indices).to_string(), "{tasks:?}");
}

/// Node `name` in a `hetsched nodes` listing (null when it is not listed).
fn node_named<'a>(nodes: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    nodes
        .as_array()
        .and_then(|a| a.iter().find(|n| n["name"] == name))
        .unwrap_or(&serde_json::Value::Null)
}

/// Counts a node's heartbeats after an instant from what `hetsched nodes` says (the time since
/// its last beat), counting a beat only when it provably came after the last one counted: the
/// server's "ms since" is read at some instant between the command's start and its end, so a
/// beat lies in [start − since, end − since]. No clock is compared with the agent's, and a slow
/// machine only makes the count slower, never too high.
struct Beats {
    /// The latest instant the last beat counted (or the start) may have been at.
    after: Instant,
    count: u32,
}

impl Beats {
    fn since(start: Instant) -> Beats {
        Beats {
            after: start,
            count: 0,
        }
    }

    /// Reads the listing once; the beats counted so far.
    fn look(&mut self, c: &Cluster, name: &str) -> u32 {
        let start = Instant::now();
        let nodes = c.json(&["nodes"]);
        let end = Instant::now();
        if let Some(since) = node_named(&nodes, name)["last_seen_ms"]
            .as_u64()
            .map(Duration::from_millis)
            && let Some(earliest) = start.checked_sub(since + Duration::from_millis(1))
            && earliest > self.after
        {
            self.count += 1;
            self.after = end.checked_sub(since).unwrap_or(end);
        }
        self.count
    }
}

#[test]
fn bad_workflows_are_refused_at_submission_and_nothing_is_stored() {
    let c = Cluster::start("wf-bad", false);
    let log = c.dir.join("r.log");
    let good = workflow("centralised", &log, "", "");
    let cases = [
        (
            good.replace("inputs = [\"b\"]", "inputs = [\"b\", \"d\"]"),
            "cycle",
        ),
        (
            good.replace("$(cat {input:b})", "$(cat {input:x})"),
            "{input:x}",
        ),
        (
            good.replacen(
                "command = \"echo seed-{index} >> $RUNLOG; echo $(({index} * 10)) > {output:a}\"\n",
                "",
                1,
            ),
            "missing",
        ),
    ];
    for (text, what) in cases {
        let file = c.write("bad.toml", &text);
        let out = c.cli(&["submit", &file.display().to_string()]);
        let err = String::from_utf8_lossy(&out.stderr).to_string();
        assert!(!out.status.success(), "{what}: accepted");
        assert!(err.contains("bad.toml:"), "{what}: no file:line in {err}");
        assert!(err.contains(what), "{what}: {err}");
        assert!(err.contains("task["), "{what}: no field in {err}");
    }
    let jobs = c.json(&["jobs"]);
    assert_eq!(jobs.as_array().map(Vec::len), Some(0), "{jobs}");
}

#[test]
fn a_failed_instance_fails_its_dependants_the_rest_goes_on_and_resubmit_completes_it() {
    fail_then_resubmit("centralised");
}

#[test]
fn under_pcddb_resubmit_completes_a_failed_workflow_through_the_agents_machines() {
    fail_then_resubmit("pcddb");
}

fn fail_then_resubmit(balancer: &str) {
    let mut c = Cluster::start(&format!("wf-fail-{balancer}"), false);
    c.start_agent("n1", 2, &[]);
    c.wait_for_nodes(1);
    // src[2] fails until the file `fixed` exists (the user repairs what broke it).
    let fixed = c.dir.join("fixed");
    let file = c.write(
        "wf.toml",
        &r#"
name = "repairable"
balancer = "BALANCER"

[[task]]
name = "src"
instances = 3
cost = "1s"
outputs = ["s"]
command = "if [ {index} = 2 ] && [ ! -e FIXED ]; then echo boom >&2; exit 3; fi; echo {index} > {output:s}"
retries = 1

[[task]]
name = "mid"
instances = "1..=3"
cost = "1s"
inputs = ["s"]
outputs = ["m"]
command = "cat {input:s} > {output:m}"

[[task]]
name = "all"
instances = 1
cost = "1s"
inputs = ["m"]
outputs = ["z"]
command = "cat {input:m} > {output:z}"

[[task]]
name = "other"
instances = 2
cost = "1s"
outputs = ["o"]
command = "echo ok > {output:o}"
"#
        .replace("FIXED", &fixed.display().to_string())
        .replace("BALANCER", balancer),
    );
    let job = submit(&c, &file);
    let v = wait_done(&c, job, Duration::from_secs(30));
    assert_eq!(v["state"], "failed", "{v}");
    assert_eq!(v["name"], "repairable", "the file's `name`: {v}");
    let state = |app: &str, i: u64| instance(&c, job, app, i);
    let src2 = state("src", 2);
    assert_eq!(src2["state"], "failed");
    assert_eq!(src2["attempt"], 2, "one retry: {src2}");
    let mid2 = state("mid", 2);
    assert_eq!(mid2["state"], "failed");
    assert!(
        mid2["message"]
            .as_str()
            .unwrap_or("")
            .contains("its producer src[2] failed"),
        "{mid2}"
    );
    assert_eq!(state("all", 1)["state"], "failed");
    // `wait` names the node a failed instance ran on, and no node for one that never ran.
    let out = c.cli(&["wait", &job.to_string()]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("(src:2) failed on n1: "), "{err}");
    assert!(
        err.contains("(mid:2) failed: ") && err.contains("its producer src[2] failed"),
        "{err}"
    );
    assert!(!err.contains("failed on -"), "{err}");
    // A bare number that is no task id: the hint names an index the workflow has (from 1).
    let out = c.cli(&["log", &job.to_string(), "5"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("or name one as APP:INDEX (`src:1`)"), "{err}");
    for (app, i) in [
        ("src", 1),
        ("src", 3),
        ("mid", 1),
        ("mid", 3),
        ("other", 1),
        ("other", 2),
    ] {
        assert_eq!(state(app, i)["state"], "succeeded", "{app}[{i}]");
    }
    // The per-task view and the graph.
    let out = c.cli(&["job", &job.to_string()]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("ready") && text.contains("mid"), "{text}");
    let out = c.cli(&["job", &job.to_string(), "--graph", "--output", "dot"]);
    let dot = String::from_utf8_lossy(&out.stdout);
    assert!(dot.starts_with("digraph"), "{dot}");
    assert!(dot.contains("\"src\" -> \"mid\""), "{dot}");
    assert!(
        dot.contains("\"mid\" -> \"all\" [label=\"m (all)\"]"),
        "{dot}"
    );
    // As JSON: the DOT text and the edges the table lists, so a script need not parse DOT.
    let g = c.json(&["job", &job.to_string(), "--graph"]);
    assert!(
        g["dot"].as_str().is_some_and(|d| d.starts_with("digraph")),
        "{g}"
    );
    assert!(
        g["edges"].as_array().is_some_and(|e| e
            .iter()
            .any(|e| e["producer"] == "mid" && e["consumer"] == "all" && e["data"] == "m (all)")),
        "{g}"
    );

    // Repaired: `resubmit --failed` runs src[2], then mid[2] and all; nothing else runs again.
    std::fs::write(&fixed, "").expect("write");
    let resubmitted = Instant::now();
    let out = c.cli(&["resubmit", &job.to_string(), "--failed", "--wait"]);
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("3 failed tasks queued again"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    // An idle agent beats about once a minute: the resubmit woke it (under pcddb it must hear
    // of the workflow again before its machine reports itself underloaded).
    assert!(
        resubmitted.elapsed() < Duration::from_secs(30),
        "the idle agent was not woken: {:?}",
        resubmitted.elapsed()
    );
    let v = wait_done(&c, job, Duration::from_secs(30));
    assert_eq!(v["state"], "completed", "{v}");
    let src2 = state("src", 2);
    assert_eq!(src2["state"], "succeeded");
    assert_eq!(
        src2["attempt"], 3,
        "a new attempt after the two that failed: {src2}"
    );
    assert_eq!(state("mid", 2)["attempt"], 1, "run once, now");
    assert_eq!(state("all", 1)["state"], "succeeded");
    for (app, i) in [("src", 1), ("src", 3), ("mid", 1), ("mid", 3), ("other", 1)] {
        assert_eq!(state(app, i)["attempt"], 1, "{app}[{i}] did not run again");
    }
    // Nothing failed any more.
    let out = c.cli(&["resubmit", &job.to_string(), "--failed"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn cancelling_a_running_instance_kills_it_skips_its_dependants_and_the_rest_completes() {
    // `src[2]` sleeps until it is cancelled (`hetsched cancel JOB --app src --tasks 2`): its
    // process is killed, `mid[2]` and `all` are not run, the other instances complete, and the
    // workflow ends `cancelled`, under pcddb between a real agent's machine and the server.
    let mut c = Cluster::start("wf-cancel", false);
    c.start_agent("n1", 2, &[]);
    c.wait_for_nodes(1);
    let file = c.write(
        "wf.toml",
        r#"
balancer = "pcddb"

[[task]]
name = "src"
instances = 3
cost = "1s"
outputs = ["s"]
command = "if [ {index} = 2 ]; then sleep 300; fi; echo {index} > {output:s}"

[[task]]
name = "mid"
instances = "1..=3"
cost = "1s"
inputs = ["s"]
outputs = ["m"]
command = "cat {input:s} > {output:m}"

[[task]]
name = "all"
instances = 1
cost = "1s"
inputs = ["m"]
command = "cat {input:m}"
"#,
    );
    let job = submit(&c, &file);
    let state = |app: &str, i: u64| instance(&c, job, app, i);
    let start = Instant::now();
    while state("src", 2)["state"] != "running" || state("mid", 1)["state"] != "succeeded" {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "src[2] never ran"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let out = c.cli(&["cancel", &job.to_string(), "--app", "src", "--tasks", "9"]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("no task with index 9 in task `src`"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = c.cli(&["cancel", &job.to_string(), "--app", "src", "--tasks", "2"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v = wait_done(&c, job, Duration::from_secs(30));
    assert_eq!(v["state"], "cancelled", "{v}");
    assert!(
        start.elapsed() < Duration::from_secs(60),
        "the sleeping instance was not killed"
    );
    assert_eq!(state("src", 2)["state"], "cancelled");
    assert_eq!(state("src", 2)["reason"], "cancelled");
    let mid2 = state("mid", 2);
    assert_eq!(mid2["state"], "cancelled");
    assert_eq!(
        mid2["message"],
        "not run: its producer src[2] was cancelled"
    );
    assert_eq!(mid2["reason"], "dependency_failed", "{mid2}");
    // Its log says it never ran, and why, not that it has not run yet.
    let out = c.cli(&["log", &job.to_string(), "mid:2"]);
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(
        !out.status.success()
            && err.contains(
                "never ran (it is cancelled: not run: its producer src[2] was cancelled): it \
                 has no output"
            ),
        "{err}"
    );
    assert_eq!(state("all", 1)["state"], "cancelled");
    for (app, i) in [("src", 1), ("src", 3), ("mid", 1), ("mid", 3)] {
        assert_eq!(state(app, i)["state"], "succeeded", "{app}[{i}]");
    }
}

#[test]
fn agents_exchange_workflow_data_and_pcddb_requests_over_tls_and_requirements_pick_the_agent() {
    let mut c = Cluster::start_configured("wf-tls", false, SERVER_CONFIG);
    // The agents' `[tls]` (the test certificate for 127.0.0.1) and the CA that verifies it; n1
    // also declares the attribute `bigmem`.
    for (a, attributes) in [("n1", "attributes = [\"bigmem\"]\n"), ("n2", "")] {
        let config = c.write(
            &format!("{a}.toml"),
            &format!(
                "{attributes}ca = \"{}\"\n[tls]\ncert = \"{}\"\nkey = \"{}\"\n",
                tls_file("ca.pem").display(),
                tls_file("server.pem").display(),
                tls_file("server.key").display()
            ),
        );
        c.start_agent(a, 2, &["--config", &config.display().to_string()]);
    }
    c.wait_for_nodes(2);
    let log = c.dir.join("runs.log");
    // Plus a task only an agent with `bigmem` may run (matched by the PCDDB machines).
    let text = workflow("pcddb", &log, "", "")
        + "\n[[task]]\nname = \"pinned\"\ninstances = 3\ncost = \"1s\"\n\
           requires = [\"bigmem\"]\noutputs = [\"p\"]\ncommand = \"echo > {output:p}\"\n";
    let file = c.write("wf.toml", &text);
    let job = submit(&c, &file);
    let v = wait_done(&c, job, Duration::from_secs(60));
    assert_eq!(v["state"], "completed", "{v}");
    // `gather` reads all 24 `double` outputs, which both agents produced (one agent holds at
    // most MT × cores = 20): inputs crossed between the agents, over TLS.
    assert_eq!(final_outputs(&c, job), expected());
    let tasks = c.tasks(job);
    let on = |n: &str| tasks.iter().filter(|t| t["node"] == n).count();
    assert!(on("n1") > 0 && on("n2") > 0, "both agents ran instances");
    let pinned: Vec<&serde_json::Value> = tasks.iter().filter(|t| t["app"] == "pinned").collect();
    assert_eq!(pinned.len(), 3);
    assert!(
        pinned.iter().all(|t| t["node"] == "n1"),
        "`requires = [\"bigmem\"]` runs only on n1: {pinned:?}"
    );
    for a in ["n1", "n2"] {
        let l = c.agent_log(a);
        assert!(
            l.contains("serving workflow data and PCDDB to other agents over TLS"),
            "{a}: {l}"
        );
        assert!(!l.contains("input unavailable"), "{a}: {l}");
    }
}

/// A TLS server with no `agent_ca` is its agents' CA: agents started without certificates get
/// their listeners certified at start, the server reads task output from them over TLS
/// (`hetsched log`), and a workflow's data and PCDDB requests cross between the agents over TLS,
/// each checking the other's certificate against the server's agent CA; the agents' listeners
/// answer no plain-text call.
#[test]
fn a_tls_server_certifies_its_agents_listeners_and_they_exchange_workflow_data_over_tls() {
    let mut c = Cluster::start_tls_certifying("wf-auto-tls", SERVER_CONFIG);
    for a in ["n1", "n2"] {
        c.start_agent(a, 2, &[]);
    }
    c.wait_for_nodes(2);
    let ca = c.data().join("agent-ca.pem");
    assert!(ca.exists(), "the server keeps its agent CA");
    use std::os::unix::fs::PermissionsExt;
    let key_mode = std::fs::metadata(c.data().join("agent-ca.key"))
        .expect("the CA key")
        .permissions()
        .mode();
    assert_eq!(key_mode & 0o777, 0o600);
    let log = c.dir.join("runs.log");
    let file = c.write("wf.toml", &workflow("pcddb", &log, "", ""));
    let job = submit(&c, &file);
    let v = wait_done(&c, job, Duration::from_secs(60));
    assert_eq!(v["state"], "completed", "{v}");
    // `gather` reads the `double` outputs both agents produced: inputs crossed over TLS.
    assert_eq!(final_outputs(&c, job), expected());
    let tasks = c.tasks(job);
    let on = |n: &str| tasks.iter().filter(|t| t["node"] == n).count();
    assert!(on("n1") > 0 && on("n2") > 0, "both agents ran instances");
    for a in ["n1", "n2"] {
        let l = c.agent_log(a);
        assert!(
            l.contains("the server certified this agent's listeners")
                && l.contains("serving workflow data and PCDDB to other agents over TLS"),
            "{a}: {l}"
        );
        assert!(!l.contains("travel in clear"), "{a}: {l}");
        assert!(!l.contains("input unavailable"), "{a}: {l}");
    }
    // A batch task's stderr, read from its agent over TLS.
    let file = c.write(
        "job.toml",
        "[[application]]\nname = \"t\"\ntasks = 1\n[application.cpu]\n\
         command = 'echo certified >&2'\n",
    );
    let batch = submit(&c, &file);
    c.ok(&["wait", &batch.to_string()]);
    assert_eq!(
        c.ok(&["log", &batch.to_string(), "t:0", "--stderr"]),
        "certified\n"
    );
}

/// A workflow task's `time_limit` against agents that end (`--time-limit`, inside a batch
/// allocation): its instances go only to nodes with that long left, under both balancers; the
/// others run anywhere. With no node that has the time, the workflow says why.
#[test]
fn instances_go_only_to_nodes_with_time_left_for_their_time_limit() {
    let mut c = Cluster::start_configured("wf-time-left", false, "[workflow]\ncluster_size = 2\n");
    c.start_agent("ending", 2, &["--time-limit", "1m", "--kill-grace", "1s"]);
    c.start_agent("staying", 2, &[]);
    c.wait_for_nodes(2);
    for balancer in ["centralised", "pcddb"] {
        let text = format!(
            "balancer = \"{balancer}\"\n\
             [[task]]\nname = \"long\"\ninstances = 6\ncost = \"1s\"\ntime_limit = \"10m\"\n\
             outputs = [\"l\"]\ncommand = \"echo > {{output:l}}\"\n\
             [[task]]\nname = \"short\"\ninstances = 12\ncost = \"1s\"\ntime_limit = \"20s\"\n\
             outputs = [\"s\"]\ncommand = \"sleep 0.2; echo > {{output:s}}\"\n"
        );
        let file = c.write(&format!("wf-{balancer}.toml"), &text);
        let job = submit(&c, &file);
        let v = wait_done(&c, job, Duration::from_secs(60));
        assert_eq!(v["state"], "completed", "{balancer}: {v}");
        let tasks = c.tasks(job);
        let on = |app: &str, node: &str| {
            tasks
                .iter()
                .filter(|t| t["app"] == app && t["node"] == node)
                .count()
        };
        assert_eq!(
            (on("long", "ending"), on("long", "staying")),
            (0, 6),
            "{balancer}: a 10-minute limit, and one node has under a minute left: {tasks:?}"
        );
        assert_eq!(on("short", "ending") + on("short", "staying"), 12);
    }
    // Only the ending node: the long task's instances wait, and the workflow says why.
    c.signal_agent("staying", "TERM");
    assert_eq!(c.agent_exit("staying", Duration::from_secs(20)), Some(0));
    let text = "balancer = \"centralised\"\n[[task]]\nname = \"long\"\ninstances = 2\n\
                cost = \"1s\"\ntime_limit = \"10m\"\noutputs = [\"l\"]\n\
                command = \"echo > {output:l}\"\n";
    let file = c.write("wf-wait.toml", text);
    let job = submit(&c, &file);
    wait_until("the reason", Duration::from_secs(10), || {
        c.json(&["job", &job.to_string()])["pending_reason"]
            .as_str()
            .is_some_and(|r| {
                r.starts_with("task `long`'s time limit (10m) is longer than the time left on every node that can run it (at most ")
            })
    });
    assert_eq!(
        c.tasks(job)
            .iter()
            .filter(|t| t["state"] == "running")
            .count(),
        0
    );
}

/// A batch job after a workflow (a post-processing step, `submit --after WORKFLOW`): it is
/// listed waiting for the workflow while the workflow runs, runs once the workflow completed,
/// and a job after the workflow's failure (`--after-notok`) is then cancelled; a workflow after
/// that batch job starts once it completed.
#[test]
fn a_batch_job_after_a_workflow_waits_for_it_and_runs_once_it_completed() {
    let mut c = Cluster::start("wf-after", false);
    c.start_agent("n1", 2, &[]);
    c.wait_for_nodes(1);
    let gate = c.dir.join("gate");
    let file = c.write(
        "wf.toml",
        &r#"
balancer = "centralised"

[[task]]
name = "src"
instances = 2
cost = "1s"
outputs = ["s"]
command = "while [ ! -e GATE ]; do sleep 0.05; done; echo {index} > {output:s}"
"#
        .replace("GATE", &gate.display().to_string()),
    );
    let wf = c.json(&["submit", "--name", "pipeline", &file.display().to_string()])["job_id"]
        .as_u64()
        .expect("job id");
    // Job ids are one sequence across kinds: the workflow is job 1. The post-processing job
    // names it by its name.
    c.ok(&[
        "submit",
        "--after",
        "name:pipeline",
        "--shell",
        "--",
        "touch post",
    ]);
    c.ok(&[
        "submit",
        "--after-notok",
        &wf.to_string(),
        "--shell",
        "--",
        "touch fallback",
    ]);
    let (post, fallback) = (wf + 1, wf + 2);
    // A second workflow after the post-processing batch job: it waits for it in turn.
    let second = c.write(
        "second.toml",
        &format!(
            "balancer = \"centralised\"\n[[task]]\nname = \"last\"\ninstances = 1\ncost = \"1s\"\ncommand = \"touch {}\"\n",
            c.dir.join("second-ran").display()
        ),
    );
    let said = c.ok(&[
        "submit",
        "--after",
        &post.to_string(),
        &second.display().to_string(),
    ]);
    let last = wf + 3;
    assert_eq!(said, format!("job {last} submitted (1 instance)\n"));
    let shown = c.json(&["job", &last.to_string()]);
    assert_eq!(
        (shown["waiting"].as_bool(), shown["pending_reason"].as_str()),
        (Some(true), Some(format!("waiting for job {post}").as_str())),
        "{shown}"
    );
    let shown = c.json(&["job", &post.to_string()]);
    assert_eq!(shown["waiting"], true, "{shown}");
    assert_eq!(shown["after"], serde_json::json!([wf]), "{shown}");
    let said = c.ok(&["job", &post.to_string()]);
    assert!(
        said.contains(&format!("runs after job {wf} (once completed): waiting")),
        "{said}"
    );
    std::thread::sleep(Duration::from_millis(500));
    assert!(!c.dir.join("post").exists(), "it waits for the workflow");
    std::fs::write(&gate, b"").expect("gate");
    let v = wait_done(&c, wf, Duration::from_secs(30));
    assert_eq!(v["state"], "completed", "{v}");
    c.ok(&["wait", &post.to_string(), "--timeout", "20s"]);
    assert!(c.dir.join("post").exists());
    let v = wait_done(&c, fallback, Duration::from_secs(10));
    assert_eq!(v["state"], "cancelled", "{v}");
    assert!(!c.dir.join("fallback").exists());
    let v = wait_done(&c, last, Duration::from_secs(20));
    assert_eq!(v["state"], "completed", "{v}");
    assert!(c.dir.join("second-ran").exists());
}

/// Producer and consumer of the same range and the same `processes` (spec 05's loop example,
/// `<map>default</map>`): MPI process p of C(i) reads the output of process p of P(i) only. Each
/// C rank once read all three of P(i)'s outputs.
#[test]
fn a_consumer_process_reads_the_output_of_its_own_rank() {
    let mut c = Cluster::start_configured("wf-one-to-one", false, SERVER_CONFIG);
    c.start_agent("n1", 4, &[]);
    c.wait_for_nodes(1);
    let file = c.write(
        "one-to-one.toml",
        "[[task]]\nname = \"P\"\ninstances = \"1..=2\"\nprocesses = 3\noutputs = [\"x\"]\n\
         command = \"echo {index}.$HETSCHED_PROCESS > {output:x}\"\n\
         [[task]]\nname = \"C\"\ninstances = \"1..=2\"\nprocesses = 3\ninputs = [\"x\"]\n\
         command = \"set -- {input:x}; echo {index}.$HETSCHED_PROCESS $# $(cat {input:x})\"\n",
    );
    let job = submit(&c, &file);
    let v = wait_done(&c, job, Duration::from_secs(60));
    assert_eq!(v["state"], "completed", "{v}");
    let mut heard = Vec::new();
    for t in c.tasks(job).iter().filter(|t| t["app"] == "C") {
        let id = t["id"].as_u64().expect("id");
        heard.push(c.ok(&["log", &job.to_string(), &id.to_string()]));
    }
    heard.sort();
    // `rank inputs what-they-hold`: one input each, its own rank's.
    assert_eq!(
        heard,
        [
            "1.1 1 1.1\n",
            "1.2 1 1.2\n",
            "1.3 1 1.3\n",
            "2.1 1 2.1\n",
            "2.2 1 2.2\n",
            "2.3 1 2.3\n"
        ]
    );
    // The graph says so: each C process reads its own P process's `x`.
    let out = c.cli(&["job", &job.to_string(), "--graph", "--output", "dot"]);
    let dot = String::from_utf8_lossy(&out.stdout);
    assert!(
        dot.contains("\"P\" -> \"C\" [label=\"x (per process)\"]"),
        "{dot}"
    );
}

/// A task of `processes = 3` runs three instances per argument value, sharing its `{index}`:
/// each keeps its own stdout (its files are `APP-INDEX-pPROCESS.ATTEMPT`), `tasks` lists each
/// one's, and `hetsched log JOB TASK_ID` reads each. They once shared one file, and two of
/// three outputs were lost.
#[test]
fn the_processes_of_one_instance_keep_their_own_output() {
    let mut c = Cluster::start_configured("wf-processes", false, SERVER_CONFIG);
    c.start_agent("n1", 4, &[]);
    c.wait_for_nodes(1);
    let file = c.write(
        "procs.toml",
        "[[task]]\nname = \"P\"\ninstances = \"1..=2\"\nprocesses = 3\n\
         command = \"echo P{index} $HETSCHED_TASK_ID $HETSCHED_PROCESS\"\n",
    );
    let job = submit(&c, &file);
    let v = wait_done(&c, job, Duration::from_secs(60));
    assert_eq!(v["state"], "completed", "{v}");
    let tasks = c.json(&["tasks", "--job", &job.to_string()]);
    let tasks = tasks.as_array().expect("tasks");
    assert_eq!(tasks.len(), 6);
    let outputs: std::collections::BTreeSet<&str> =
        tasks.iter().filter_map(|t| t["output"].as_str()).collect();
    assert_eq!(outputs.len(), 6, "each process its own files: {tasks:?}");
    let mut ranks: std::collections::BTreeMap<String, std::collections::BTreeSet<String>> =
        Default::default();
    for t in tasks {
        let id = t["id"].as_u64().expect("id");
        let said = c.ok(&["log", &job.to_string(), &id.to_string()]);
        let (own, rank) = said.trim().rsplit_once(' ').expect("three words");
        assert_eq!(
            own,
            format!("P{} {id}", t["index"]),
            "task {id}'s own output: {t}"
        );
        ranks
            .entry(t["index"].to_string())
            .or_default()
            .insert(rank.to_string());
    }
    // Each process knows its rank among those of its index: 1 to 3.
    for (index, of) in &ranks {
        assert_eq!(
            of.iter().map(String::as_str).collect::<Vec<_>>(),
            ["1", "2", "3"],
            "{index}"
        );
    }
}

/// A `centralised` workflow submitted while a batch task holds every core of one node (the
/// review's case, with short sleeps): the dispatcher counts those cores as the node's load and
/// moves what it placed there once another node has room, so the workflow completes while the
/// batch task still runs, nothing of it on that node. `g1` registers first: on equal loads the
/// dispatcher picks the lowest id, so instances do reach it once `n1` and `n2` are full. Before,
/// the dispatcher counted only the workflow's own instances running on a node: `g1` read idle,
/// and the instances sent there started only when the batch task ended (a makespan of 27 s
/// instead of ~5 s with a 25 s task; with a stream topology holding the node, never).
#[test]
fn a_centralised_workflow_completes_beside_a_batch_task_holding_one_node() {
    beside_a_batch_task_holding_g1("wf-busy-node", SERVER_CONFIG, "centralised", 8);
}

/// The same under `pcddb` (LT 1 and MT 2 per core, so that the batch task's two cores fill
/// `g1`): every heartbeat reply tells `g1`'s machine the cores the batch task holds there
/// (`PcddbJob.foreign_cores`), which its instance table counts, so it never reports itself
/// underloaded and takes nothing; the workflow completes on `n1` and `n2` while the batch task
/// still runs. Before, the machine counted its workflow's instances only: `g1` read idle, took
/// MT × cores instances from a request, and they waited there for the batch task's end.
#[test]
fn a_pcddb_workflow_completes_beside_a_batch_task_holding_one_node() {
    beside_a_batch_task_holding_g1(
        "wf-busy-node-pcddb",
        "[workflow]\ncluster_size = 3\nlt = 1\nmt = 2\n",
        "pcddb",
        20,
    );
}

/// A batch task holding `g1`'s two cores for `hold_s` seconds, then a three-stage workflow
/// under `balancer`: it completes within 30 s, before the batch task, none of it on `g1`.
fn beside_a_batch_task_holding_g1(name: &str, config: &str, balancer: &str, hold_s: u32) {
    let mut c = Cluster::start_configured(name, false, config);
    c.start_agent("g1", 2, &[]);
    c.wait_for_nodes(1);
    c.start_agent("n1", 4, &[]);
    c.start_agent("n2", 2, &[]);
    c.wait_for_nodes(3);
    let out = c.cli(&[
        "submit",
        "--output",
        "json",
        "--requires",
        "node:g1",
        "--cores",
        "2",
        "--",
        "sleep",
        &hold_s.to_string(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let hold = serde_json::from_slice::<serde_json::Value>(&out.stdout).expect("json")["job_id"]
        .as_u64()
        .expect("job id");
    wait_until("the batch task to run", Duration::from_secs(10), || {
        c.tasks(hold).iter().any(|t| t["state"] == "running")
    });
    let file = c.write(
        "wf.toml",
        &(format!("balancer = \"{balancer}\"\n")
            + "[[task]]\nname = \"A\"\ninstances = 8\ncost = \"1s\"\noutputs = [\"m\"]\n\
         command = \"echo $(( {index} * 10 )) > {output:m}\"\n\
         [[task]]\nname = \"B\"\ninstances = 8\ncost = \"1s\"\ninputs = [\"m\"]\noutputs = [\"b\"]\n\
         command = \"sleep 1; cat {input:m} > {output:b}\"\n\
         [[task]]\nname = \"C\"\ninstances = 1\ncost = \"1s\"\ninputs = [\"b\"]\n\
         command = \"cat {input:b} > /dev/null\"\n"),
    );
    let job = submit(&c, &file);
    let v = wait_done(&c, job, Duration::from_secs(30));
    assert_eq!(v["state"], "completed", "{v}");
    let tasks = c.tasks(job);
    assert!(
        tasks.iter().all(|t| t["node"] != "g1"),
        "an instance ran on the node the batch task holds: {tasks:?}"
    );
    assert_eq!(
        c.json(&["job", &hold.to_string()])["state"],
        "running",
        "the workflow completed only after the batch task: {tasks:?}"
    );
}

/// An agent with `--idle-timeout` that holds the output of a running workflow stays while
/// the workflow runs, however long its consumer waits, and leaves once the workflow ended.
/// Before, it left at its idle timeout with the output, and the producer ran again elsewhere
/// (`attempt=2`; here nowhere else could, and the workflow never ended).
#[test]
fn an_idle_timeout_agent_holding_a_running_workflows_outputs_stays_until_the_workflow_ends() {
    // Idle agents beat often here, so that the holder hears of the workflow's end at once.
    let mut c = Cluster::start_configured(
        "wf-idle-holds",
        false,
        "idle_heartbeat_interval = \"200ms\"\n",
    );
    c.start_agent("prod", 1, &["--idle-timeout", "1s", "--attributes", "prod"]);
    c.start_agent("gate", 1, &["--attributes", "gate"]);
    c.wait_for_nodes(2);
    let runlog = c.dir.join("runs");
    let file = c.write(
        "idle.toml",
        &format!(
            r#"[[task]]
name = "p"
instances = 1
requires = ["prod"]
outputs = ["o"]
command = "echo p >> {log}; echo 7 > {{output:o}}"
[[task]]
name = "gate"
instances = 1
requires = ["gate"]
outputs = ["g"]
command = "sleep 4; echo ok > {{output:g}}"
[[task]]
name = "q"
instances = 1
requires = ["gate"]
inputs = ["o", "g"]
command = "cat {{input:o}} >> {log}"
"#,
            log = runlog.display()
        ),
    );
    let job = submit(&c, &file);
    let done = wait_done(&c, job, Duration::from_secs(60));
    assert_eq!(done["state"], "completed", "{done}");
    assert_eq!(
        std::fs::read_to_string(&runlog).unwrap_or_default(),
        "p\n7\n",
        "the producer ran once, and its consumer read its output from the agent that stayed"
    );
    let log = c.agent_log("prod");
    assert!(
        !log.contains("idle for the idle timeout"),
        "left early: {log}"
    );
    // Then it is idle, and leaves.
    assert_eq!(c.agent_exit("prod", Duration::from_secs(30)), Some(0));
    let log = c.agent_log("prod");
    assert!(
        log.contains("workflows ended: the outputs held for them no longer keep this agent")
            && log.contains("idle for the idle timeout"),
        "{log}"
    );
}
