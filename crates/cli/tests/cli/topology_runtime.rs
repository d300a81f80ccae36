//! End-to-end tests of stream topologies on the runtime (issue 16) with the real `hetsched`
//! binary: a server and three agents on loopback, topologies submitted with
//! `hetsched topology submit`, worker processes started by the agents.

use crate::support::{self, Cluster};

use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;
use support::wait_until;

const CORPUS: [&str; 4] = [
    "the quick brown fox jumps over the lazy dog",
    "a stitch in time saves nine",
    "the early bird catches the worm",
    "actions speak louder than words",
];

/// A cluster of the shared harness ([`support::Cluster`]) as these tests want it: the server
/// at its default heartbeat (500 ms) and a 2 s dead timeout, for the stream workers' pace, with
/// its HTTP listener (`/metrics`), and `agents` of two cores each.
fn start(name: &str, agents: &[&str]) -> Cluster {
    start_with_cores(name, agents, 2)
}

/// [`start`], each agent declaring `cores` cores.
fn start_with_cores(name: &str, agents: &[&str], cores: u32) -> Cluster {
    let mut c = Cluster::stopped(name);
    c.http = true;
    c.beat = ("500ms", "2s");
    c.start_server();
    for a in agents {
        c.start_agent(a, cores, &[]);
    }
    c
}

/// What these tests read of a cluster beyond what the shared harness reads.
trait Topologies {
    /// `hetsched topology show NAME --output json`, which must succeed.
    fn show(&self, name: &str) -> Value;
    /// The body of `GET /metrics` on the server's HTTP listener, with the read-only token.
    fn metrics(&self) -> String;
}

impl Topologies for Cluster {
    fn show(&self, name: &str) -> Value {
        self.json(&["topology", "show", name])
    }

    fn metrics(&self) -> String {
        self.http_get("/metrics").2
    }
}

/// Word count: 2 reliable corpus spouts → 3 splits → 3 counts, 8 executors of 40 % of a core
/// each (320 %: more than one 2-core node holds at one-phase's 90 % limit).
pub(crate) fn wordcount(name: &str, repeat: u64, rate: u64) -> String {
    let lines: Vec<String> = CORPUS.iter().map(|l| format!("\"{l}\"")).collect();
    format!(
        r#"name = "{name}"
[[component]]
name = "sentences"
kind = "spout"
parallelism = 2
cpu = 40.0
builtin = "corpus-spout"
params = {{ lines = [{}], repeat = {repeat}, reliable = true, rate = {rate}, timeout = "3s" }}
[[component]]
name = "split"
kind = "bolt"
parallelism = 3
cpu = 40.0
builtin = "split"
[[component]]
name = "count"
kind = "bolt"
parallelism = 3
cpu = 40.0
builtin = "count"
params = {{ output = "{name}-counts-{{index}}.tsv", every = "100ms" }}
[[stream]]
from = "sentences"
to = "split"
rate = 300.0
[[stream]]
from = "split"
to = "count"
grouping = "fields"
rate = 2000.0
"#,
        lines.join(", ")
    )
}

pub(crate) fn expected(repeat: u64) -> BTreeMap<String, u64> {
    let mut m = BTreeMap::new();
    for line in CORPUS {
        for w in line.split_whitespace() {
            *m.entry(w.to_string()).or_default() += repeat;
        }
    }
    m
}

pub(crate) fn read_counts(dir: &Path, name: &str) -> BTreeMap<String, u64> {
    let mut m = BTreeMap::new();
    for i in 0..3 {
        let text =
            std::fs::read_to_string(dir.join(format!("{name}-counts-{i}.tsv"))).unwrap_or_default();
        for line in text.lines() {
            if let Some((w, c)) = line.split_once('\t') {
                *m.entry(w.to_string()).or_default() += c.parse::<u64>().unwrap_or(0);
            }
        }
    }
    m
}

/// The words whose count in `got` is not the one `want` has: `word: Some(got) of want`.
fn count_diff(want: &BTreeMap<String, u64>, got: &BTreeMap<String, u64>) -> Vec<String> {
    want.iter()
        .filter(|(w, n)| got.get(*w) != Some(n))
        .map(|(w, n)| format!("{w}: {:?} of {n}", got.get(w)))
        .collect()
}

fn nodes_of_workers(s: &Value) -> Vec<String> {
    s["workers"]
        .as_array()
        .expect("workers")
        .iter()
        .map(|w| w["node"].as_str().unwrap_or("").to_string())
        .collect()
}

#[test]
fn word_count_is_exact_under_one_phase_and_even_and_one_phase_sends_less_between_nodes() {
    let c = start("wc", &["n1", "n2", "n3"]);
    wait_until("three nodes", Duration::from_secs(20), || {
        let out = c.cli(&["topology", "list", "--output", "json"]);
        out.status.success()
    });
    // Agents sync every 500 ms; let all three be seen before placing.
    std::thread::sleep(Duration::from_millis(1200));
    // 1,800 sentences per topology at 300 sentences/s: about 6 s, three 2 s windows of rates.
    let repeat = 450;
    let one = c.write("one.toml", &wordcount("wc-one", repeat, 150));
    let even = c.write("even.toml", &wordcount("wc-even", repeat, 150));
    c.ok(&[
        "topology",
        "submit",
        one.to_str().expect("path"),
        "--placer",
        "one-phase",
        "--interval",
        "0s",
    ]);
    c.ok(&[
        "topology",
        "submit",
        even.to_str().expect("path"),
        "--placer",
        "even",
        "--workers",
        "3",
        "--interval",
        "0s",
    ]);
    let s1 = c.show("wc-one");
    let s2 = c.show("wc-even");
    // one-phase: one worker per node it uses; even: the three workers asked for.
    let n1 = nodes_of_workers(&s1);
    let mut distinct = n1.clone();
    distinct.sort();
    distinct.dedup();
    assert_eq!(n1.len(), distinct.len(), "one worker per node: {n1:?}");
    assert!(
        n1.len() >= 2,
        "320 % of CPU needs two 2-core nodes at 90 %: {n1:?}"
    );
    assert_eq!(nodes_of_workers(&s2).len(), 3);
    // Sample the measured rates while both run: per topology, the inter-node tuples/s and all
    // its tuples/s (the traffic between its executors), summed over the samples. Their ratio is
    // the share of its traffic that crossed nodes by the measured rates; a peak rate alone
    // would also follow how fast each happened to run (the two peaks once came 1,820 / 1,799).
    let mut rates = [(0.0f64, 0.0f64); 2];
    let sample = |s: &Value, r: &mut (f64, f64)| {
        r.0 += s["inter_node_tuples_per_s"].as_f64().unwrap_or(0.0);
        r.1 += s["traffic"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|p| p["tuples_per_s"].as_f64())
            .sum::<f64>();
    };
    wait_until(
        "both word counts to finish",
        Duration::from_secs(40),
        || {
            let (a, b) = (c.show("wc-one"), c.show("wc-even"));
            sample(&a, &mut rates[0]);
            sample(&b, &mut rates[1]);
            a["spouts_done"] == true && b["spouts_done"] == true
        },
    );
    let share = |r: (f64, f64)| if r.1 > 0.0 { r.0 / r.1 } else { f64::NAN };
    let (share_one, share_even) = (share(rates[0]), share(rates[1]));
    let want = expected(repeat);
    wait_until("exact counts", Duration::from_secs(10), || {
        read_counts(&c.dir, "wc-one") == want && read_counts(&c.dir, "wc-even") == want
    });
    let (a, b) = (c.show("wc-one"), c.show("wc-even"));
    for w in a["workers"].as_array().into_iter().flatten() {
        assert_eq!(w["encrypted"], false, "no TLS on this cluster: {w}");
    }
    let (ta, tb) = (
        a["inter_node_tuples_total"].as_u64().unwrap_or(0),
        b["inter_node_tuples_total"].as_u64().unwrap_or(0),
    );
    eprintln!(
        "one-phase: {} nodes, inter-node {ta} of {} tuples, {share_one:.2} of the measured rates; even: {} nodes, inter-node {tb} of {} tuples, {share_even:.2} of the measured rates",
        a["nodes_used"], a["tuples_total"], b["nodes_used"], b["tuples_total"]
    );
    assert!(ta < tb, "one-phase {ta} vs even {tb} tuples between nodes");
    assert!(
        share_one < share_even,
        "by the measured rates, one-phase sent {share_one:.2} of its traffic between nodes, even {share_even:.2}"
    );
    let m = c.metrics();
    assert!(
        m.contains("hetsched_topology_inter_node_tuples_per_second{topology=\"wc-one\"}"),
        "{m}"
    );
    assert!(
        m.contains("hetsched_topology_nodes_used{topology=\"wc-even\"} 3"),
        "{m}"
    );
    // Each agent derived the same worker key per topology, a different one per topology, and
    // keeps it in a file only its user reads.
    let mut keys: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for node in ["n1", "n2", "n3"] {
        let stream = c.dir.join(format!("agent-{node}")).join("stream");
        for entry in std::fs::read_dir(&stream).into_iter().flatten().flatten() {
            let path = entry.path().join("config.json");
            let Ok(text) = std::fs::read_to_string(&path) else {
                continue;
            };
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&path).expect("meta").permissions().mode() & 0o777;
            assert_eq!(mode, 0o600, "{}", path.display());
            let cfg: Value = serde_json::from_str(&text).expect("json");
            let key = cfg["key"].as_str().expect("a key").to_string();
            assert_eq!(key.len(), 64, "{}", path.display());
            let name = entry.file_name().to_string_lossy().into_owned();
            let topology = if name.starts_with("wc-one") {
                "wc-one"
            } else {
                "wc-even"
            };
            keys.entry(topology.into()).or_default().push(key);
        }
    }
    assert_eq!(keys.len(), 2, "{keys:?}");
    for ks in keys.values() {
        assert!(ks.iter().all(|k| k == &ks[0]), "{keys:?}");
    }
    assert_ne!(keys["wc-one"][0], keys["wc-even"][0]);
    c.ok(&["topology", "kill", "wc-one"]);
    // Its workers' directories (their keys) go with them.
    support::wait_until(
        "wc-one's worker directories to go",
        Duration::from_secs(20),
        || {
            c.agents.keys().all(|a| {
                std::fs::read_dir(c.dir.join(format!("agent-{a}/stream"))).map_or(true, |d| {
                    d.flatten()
                        .all(|e| !e.file_name().to_string_lossy().starts_with("wc-one"))
                })
            })
        },
    );
    let list = c.ok(&["topology", "list"]);
    assert!(list.contains("killed"), "{list}");
    // A killed topology moves no tuple: it shows no rate, and what it passed on stays told.
    let shown = c.show("wc-one");
    assert_eq!(shown["throughput_tuples_per_s"], 0.0, "{shown}");
    assert_eq!(shown["inter_node_tuples_per_s"], 0.0, "{shown}");
    assert!(shown["tuples_total"].as_u64() > Some(0), "{shown}");
    // Killed again: nothing changes, what it passed on included.
    let again = c.ok(&["topology", "kill", "wc-one"]);
    assert!(
        again.contains("was killed before: nothing changed"),
        "{again}"
    );
    assert_eq!(c.show("wc-one")["tuples_total"], shown["tuples_total"]);
    // Its name may be taken again, and the submission says what that gives up.
    let again = c.ok(&["topology", "submit", one.to_str().expect("path")]);
    assert!(
        again.contains("it replaces the killed topology of this name"),
        "{again}"
    );
    c.ok(&["topology", "kill", "wc-one"]);
}

#[test]
fn bad_topologies_are_refused_with_their_line() {
    let c = start("bad", &[]);
    let bad = c.write(
        "bad.toml",
        &wordcount("bad", 1, 10).replace("builtin = \"split\"", "builtin = \"splitter\""),
    );
    let out = c.cli(&["topology", "submit", bad.to_str().expect("path")]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("bad.toml:14:11: component[1].builtin: unknown builtin `splitter`"),
        "{err}"
    );
    let out = c.cli(&["topology", "show", "nothing"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("no topology named `nothing`"));
}

/// `--workers` fixes the worker count of `even` and `two-phase-traffic` only: with the default
/// `one-phase` placer (and `resource-aware`) the submission says it is ignored, as `stream
/// place` does, rather than run fewer workers than asked without a word; and
/// `--max-utilisation` is one-phase's alone.
#[test]
fn topology_submit_says_when_workers_or_max_utilisation_is_ignored_by_its_placer() {
    let c = start("ignored-workers", &["n1"]);
    let file = c.write("one.toml", &wordcount("wc-ignored", 1, 10));
    let path = file.to_str().expect("path");
    let out = c.cli(&["topology", "submit", path, "--workers", "3"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("note: --workers is ignored by one-phase (it chooses its processes itself)"),
        "{err}"
    );
    c.ok(&["topology", "kill", "wc-ignored"]);
    // `even` takes it: no note.
    let file = c.write("even.toml", &wordcount("wc-even-taken", 1, 10));
    let path = file.to_str().expect("path");
    let out = c.cli(&[
        "topology",
        "submit",
        path,
        "--placer",
        "even",
        "--workers",
        "1",
        "--max-utilisation",
        "0.5",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(!err.contains("--workers is ignored"), "{err}");
    // One-phase's own limit changes nothing under `even`: said, as `stream place` says it.
    assert!(
        err.contains(
            "note: --max-utilisation is ignored by even (only one-phase fills nodes to a limit)"
        ),
        "{err}"
    );
    c.ok(&["topology", "kill", "wc-even-taken"]);
    // One-phase takes it: no note.
    let file = c.write("limit.toml", &wordcount("wc-limit-taken", 1, 10));
    let path = file.to_str().expect("path");
    let out = c.cli(&["topology", "submit", path, "--max-utilisation", "0.5"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(!err.contains("is ignored"), "{err}");
    c.ok(&["topology", "kill", "wc-limit-taken"]);
}

fn pid_alive(pid: u64) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        !s.rsplit_once(')')
            .is_some_and(|(_, r)| r.trim_start().starts_with('Z'))
    })
}

fn worker_pids(s: &Value) -> Vec<u64> {
    s["workers"]
        .as_array()
        .expect("workers")
        .iter()
        .filter_map(|w| w["pid"].as_u64())
        .collect()
}

fn total(s: &Value) -> u64 {
    s["tuples_total"].as_u64().unwrap_or(0)
}

#[test]
fn workers_agents_and_the_server_can_die() {
    let mut c = start("faults", &["n1", "n2", "n3"]);
    std::thread::sleep(Duration::from_millis(1500));
    let file = c.write("wc.toml", &wordcount("wc", 0, 200));
    c.ok(&[
        "topology",
        "submit",
        file.to_str().expect("path"),
        "--placer",
        "even",
        "--workers",
        "3",
        "--interval",
        "0s",
    ]);
    wait_until("three workers producing", Duration::from_secs(20), || {
        let s = c.show("wc");
        worker_pids(&s).len() == 3 && total(&s) > 0
    });
    // 1. SIGKILL one worker process: its agent starts it again (a new pid), counts go on.
    let s = c.show("wc");
    let victim = worker_pids(&s)[0];
    Command::new("kill")
        .args(["-9", &victim.to_string()])
        .status()
        .expect("kill");
    wait_until("the worker restarted", Duration::from_secs(20), || {
        let s = c.show("wc");
        let p = worker_pids(&s);
        p.len() == 3 && !p.contains(&victim)
    });
    let before = total(&c.show("wc"));
    wait_until(
        "tuples flowing after the worker restart",
        Duration::from_secs(20),
        || total(&c.show("wc")) > before + 500,
    );
    // 2. SIGKILL an agent: after the dead timeout its executors are placed on the two nodes left.
    let generation = c.show("wc")["generation"].as_u64().unwrap_or(0);
    c.kill_agent("n3");
    wait_until("re-placement without n3", Duration::from_secs(30), || {
        let s = c.show("wc");
        s["generation"].as_u64().unwrap_or(0) > generation
            && worker_pids(&s).len() == s["workers"].as_array().map_or(0, Vec::len)
            && !nodes_of_workers(&s).contains(&"n3".to_string())
            && total(&s) > 500
    });
    let s = c.show("wc");
    assert!(
        s["reschedules"]
            .as_array()
            .is_some_and(|r| r.iter().any(|x| x["cause"] == "node-lost"))
    );
    // 3. SIGKILL the server: workers keep running; after the restart the server adopts them.
    let pids = worker_pids(&s);
    let generation = s["generation"].as_u64().unwrap_or(0);
    c.kill_server();
    std::thread::sleep(Duration::from_millis(1500));
    assert!(
        pids.iter().all(|p| pid_alive(*p)),
        "workers survive the server: {pids:?}"
    );
    c.start_server();
    wait_until(
        "the restarted server adopting the workers",
        Duration::from_secs(30),
        || {
            let out = c.cli(&["topology", "show", "wc", "--output", "json"]);
            if !out.status.success() {
                return false;
            }
            let s: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
            let mut p = worker_pids(&s);
            p.sort_unstable();
            let mut want = pids.clone();
            want.sort_unstable();
            p == want && s["generation"].as_u64() == Some(generation) && total(&s) > 0
        },
    );
}

/// Word count whose spouts follow a scripted rate: 50 sentences/s per spout (the declared
/// rate — streams declare the rate per sending executor —: 80 % of a core in all) until 5 s
/// after the topology started, 200/s (320 %: more than a 3-core node) until 11 s, then 50/s
/// again; 1,700 sentences per spout.
fn scripted(name: &str) -> String {
    let lines: Vec<String> = CORPUS.iter().map(|l| format!("\"{l}\"")).collect();
    format!(
        r#"name = "{name}"
[[component]]
name = "sentences"
kind = "spout"
parallelism = 2
cpu = 10.0
builtin = "corpus-spout"
params = {{ lines = [{}], repeat = 1000, reliable = true, rate = 50, rate_schedule = [{{ after = "5s", rate = 200.0 }}, {{ after = "11s", rate = 50.0 }}] }}
[[component]]
name = "split"
kind = "bolt"
parallelism = 3
cpu = 10.0
builtin = "split"
[[component]]
name = "count"
kind = "bolt"
parallelism = 3
cpu = 10.0
builtin = "count"
params = {{ output = "{name}-counts-{{index}}.tsv", every = "100ms" }}
[[stream]]
from = "sentences"
to = "split"
rate = 50.0
[[stream]]
from = "split"
to = "count"
grouping = "fields"
rate = 208.0
"#,
        lines.join(", ")
    )
}

/// Every computation the controller lists obeys spec 04's rules: overload → applied at once;
/// otherwise applied only for a gain above the threshold; never two within the interval. The
/// reschedules are exactly the applied computations.
fn check_controller(s: &Value) {
    let c = &s["controller"];
    let interval_ns = c["interval_ms"].as_u64().expect("interval") * 1_000_000;
    let threshold = c["gain_threshold"].as_f64().expect("threshold");
    let comps = c["computations"].as_array().expect("computations");
    let mut applied = Vec::new();
    let mut last: Option<u64> = None;
    for x in comps {
        let (at, gain) = (
            x["at_ns"].as_u64().unwrap_or(0),
            x["gain"].as_f64().unwrap_or(0.0),
        );
        let overloaded = x["overloaded_nodes"].as_u64().unwrap_or(0);
        match x["decision"].as_str().unwrap_or("") {
            "overload" => {
                assert!(overloaded > 0, "{x}");
                applied.push("overload");
            }
            "traffic" => {
                assert!(overloaded == 0 && gain > threshold, "{x}");
                applied.push("traffic");
            }
            "keep" => assert!(
                gain <= threshold && (overloaded == 0 || gain == 0.0),
                "kept although the thresholds say apply: {x}"
            ),
            other => panic!("decision {other}"),
        }
        if let Some(l) = last {
            assert!(
                at + 50_000_000 >= l + interval_ns,
                "two computations within the interval: {comps:?}"
            );
        }
        last = Some(at);
    }
    let causes: Vec<&str> = s["reschedules"]
        .as_array()
        .expect("reschedules")
        .iter()
        .filter_map(|r| r["cause"].as_str())
        .collect();
    assert_eq!(causes, applied, "{s}");
}

/// (pid, thread start, node) of every executor, by name, once every executor reports from the
/// worker the placement puts it in.
fn executor_starts(s: &Value) -> Option<BTreeMap<String, (u64, u64, String)>> {
    let mut m = BTreeMap::new();
    let placement = s["placement"].as_array()?;
    for (x, p) in s["executors"].as_array()?.iter().zip(placement) {
        if x["running_in_worker"] != p["worker"] {
            return None;
        }
        m.insert(
            x["executor"].as_str()?.to_string(),
            (
                x["pid"].as_u64()?,
                x["started_ns"].as_u64()?,
                x["node"].as_str()?.to_string(),
            ),
        );
    }
    Some(m)
}

#[test]
fn a_scripted_rate_change_reschedules_exactly_when_the_thresholds_say_and_loses_no_count() {
    // Two copies of the scripted word count, one with a 10 % gain threshold, one with 1000.
    // At the declared rate one node holds each; when the rate quadruples, the running placement
    // overloads its node, and both are rescheduled onto more nodes at the next computation
    // whatever their threshold; when the rate falls back, one-phase can halve the nodes again,
    // cutting all inter-node traffic: applied under the 10 % threshold, not under 1000.
    // Three 3-core nodes: each topology's worker holds one core (80 % declared), which the
    // other's placer sees; one node still holds either at the declared rate.
    // 4,000 lines: 500 at 100/s, 2,400 at 400/s (5–11 s), then about 11 s at 100/s — several
    // computations after the fall, so the traffic reschedule comes even when the first of them
    // still measures the high rate (a loaded machine delays the computations).
    let c = start_with_cores("scripted", &["n1", "n2", "n3"], 3);
    std::thread::sleep(Duration::from_millis(1500));
    let on = c.write("on.toml", &scripted("rc-on"));
    let off = c.write("off.toml", &scripted("rc-off"));
    for (f, threshold) in [(&on, "0.1"), (&off, "1000")] {
        c.ok(&[
            "topology",
            "submit",
            f.to_str().expect("path"),
            "--interval",
            "2s",
            "--gain-threshold",
            threshold,
        ]);
    }
    assert_eq!(c.show("rc-on")["nodes_used"], 1);
    assert_eq!(c.show("rc-off")["nodes_used"], 1);
    // Watch rc-off across its overload reschedule: the executors that stay on their node keep
    // running (same process, same thread start); those that move start anew.
    let mut before = None;
    let mut after = None;
    wait_until(
        "both word counts to finish",
        Duration::from_secs(90),
        || {
            let (a, b) = (c.show("rc-on"), c.show("rc-off"));
            let generation = b["generation"].as_u64().unwrap_or(0);
            if generation == 1 {
                before = executor_starts(&b).or(before.take());
            } else if generation == 2
                && after.is_none()
                && b["workers_draining"] == 0
                && b["workers_running"] == b["workers"].as_array().map_or(0, Vec::len) as u64
            {
                after = executor_starts(&b);
            }
            a["spouts_done"] == true && b["spouts_done"] == true
        },
    );
    let want = expected(1000);
    let t0 = std::time::Instant::now();
    while !(read_counts(&c.dir, "rc-on") == want && read_counts(&c.dir, "rc-off") == want)
        && t0.elapsed() < Duration::from_secs(15)
    {
        std::thread::sleep(Duration::from_millis(200));
    }
    let (a, b) = (c.show("rc-on"), c.show("rc-off"));
    for name in ["rc-on", "rc-off"] {
        let diff = count_diff(&want, &read_counts(&c.dir, name));
        assert!(
            diff.is_empty(),
            "{name}: counts differ: {diff:?}\n{}\n{}",
            if name == "rc-on" { &a } else { &b }["reschedules"],
            if name == "rc-on" { &a } else { &b }["controller"]
        );
    }
    for s in [&a, &b] {
        let t0 = s["submitted_ns"].as_u64().unwrap_or(0);
        let r: Vec<String> = s["reschedules"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|r| {
                format!(
                    "{:.1} s {} gain {:.2} -> {} node(s), {} executor(s) moved, {} worker(s) kept",
                    (r["at_ns"].as_u64().unwrap_or(0).saturating_sub(t0)) as f64 / 1e9,
                    r["cause"].as_str().unwrap_or(""),
                    r["gain"].as_f64().unwrap_or(0.0),
                    r["nodes"],
                    r["executors_moved"],
                    r["workers_kept"]
                )
            })
            .collect();
        eprintln!("{}: {r:?}", s["name"]);
    }
    eprintln!(
        "rc-on controller: {}\nrc-off controller: {}",
        a["controller"], b["controller"]
    );
    check_controller(&a);
    check_controller(&b);
    let submitted = |s: &Value| s["submitted_ns"].as_u64().unwrap_or(0);
    for s in [&a, &b] {
        let r = s["reschedules"].as_array().expect("reschedules");
        // Nothing before the rate rises; the rise overloads the node, applied at once.
        assert!(!r.is_empty(), "{s}");
        assert_eq!(r[0]["cause"], "overload", "{s}");
        assert!(r[0]["at_ns"].as_u64().unwrap_or(0) >= submitted(s) + 5_000_000_000);
        assert!(
            r.iter()
                .all(|x| x["executors_moved"].as_u64().unwrap_or(0) > 0)
        );
    }
    // The fall: a traffic reschedule back to one node under 10 %, none under 1000.
    let r = a["reschedules"].as_array().expect("reschedules");
    let last = &r[r.len() - 1];
    // On a loaded machine a computation after the fall may still see a node overloaded (the
    // executors moved at the rise catching up); its reschedule then lands on one node itself, and
    // no traffic reschedule is left to make. Either way the fall ends on one node.
    assert!(
        last["cause"] == "traffic" || (last["cause"] == "overload" && last["nodes"] == 1),
        "{a}"
    );
    assert!(last["at_ns"].as_u64().unwrap_or(0) >= submitted(&a) + 11_000_000_000);
    assert_eq!(a["nodes_used"], 1);
    // Under 1000 only overloads are applied (a loaded machine may measure the rise in two
    // steps: a first computation straddling it sees part of the new rate).
    let r = b["reschedules"].as_array().expect("reschedules");
    assert!(r.iter().all(|x| x["cause"] == "overload"), "{b}");
    assert!(b["nodes_used"].as_u64().unwrap_or(0) >= 2);
    // Executor by executor across rc-off's reschedule.
    let (before, after) = (before.expect("starts before"), after.expect("starts after"));
    let mut stayed = 0;
    for (name, (pid, started, node)) in &before {
        let (pid2, started2, node2) = &after[name];
        if node == node2 {
            stayed += 1;
            assert_eq!(
                (pid, started),
                (pid2, started2),
                "{name} stayed on {node} but restarted"
            );
        } else {
            assert_ne!(started, started2, "{name} moved from {node} to {node2}");
        }
    }
    eprintln!(
        "rc-off: {stayed} of {} executors stayed and ran on",
        before.len()
    );
}

/// Two independent pipelines (spout → count), each 160 % of CPU: one-phase gives each its own
/// 2-core node.
fn two_pipelines() -> String {
    let mut t = String::from("name = \"pipes\"\n");
    for p in ["a", "b"] {
        t.push_str(&format!(
            r#"[[component]]
name = "words-{p}"
kind = "spout"
parallelism = 2
cpu = 40.0
builtin = "corpus-spout"
params = {{ lines = ["one two three", "two three", "three"], repeat = 0, reliable = true, rate = 100 }}
[[component]]
name = "count-{p}"
kind = "bolt"
parallelism = 2
cpu = 40.0
builtin = "count"
[[stream]]
from = "words-{p}"
to = "count-{p}"
grouping = "fields"
rate = 100.0
"#
        ));
    }
    t
}

#[test]
fn a_new_placement_restarts_only_the_workers_whose_executors_move() {
    // One-phase puts each pipeline on its own node. When the agent of pipeline b's node dies,
    // pipeline b is placed on the third node; pipeline a's worker runs the same executors on the
    // same node before and after, so it is kept: same process, new routes, no restart.
    let mut c = start("keep", &["n1", "n2", "n3"]);
    std::thread::sleep(Duration::from_millis(1500));
    let file = c.write("pipes.toml", &two_pipelines());
    c.ok(&[
        "topology",
        "submit",
        file.to_str().expect("path"),
        "--interval",
        "0s",
    ]);
    wait_until("two workers producing", Duration::from_secs(20), || {
        let s = c.show("pipes");
        worker_pids(&s).len() == 2 && total(&s) > 0 && executor_starts(&s).is_some()
    });
    let s = c.show("pipes");
    let starts_before = executor_starts(&s).expect("every executor reports");
    let placement = s["placement"].as_array().expect("placement").clone();
    let node_of = |x: &str| {
        placement
            .iter()
            .find(|p| p["executor"] == x)
            .and_then(|p| p["node"].as_str())
            .expect("placed")
            .to_string()
    };
    let (node_a, node_b) = (node_of("words-a#0"), node_of("words-b#0"));
    assert_ne!(node_a, node_b, "one node per pipeline: {s}");
    let kept_pid = s["workers"]
        .as_array()
        .expect("workers")
        .iter()
        .find(|w| w["node"] == node_a.as_str())
        .and_then(|w| w["pid"].as_u64())
        .expect("pid");
    c.kill_agent(&node_b);
    wait_until(
        "re-placement without the lost node",
        Duration::from_secs(30),
        || {
            let s = c.show("pipes");
            s["generation"].as_u64() == Some(2)
                && worker_pids(&s).len() == 2
                && !nodes_of_workers(&s).contains(&node_b)
        },
    );
    let s = c.show("pipes");
    let r = &s["reschedules"][0];
    assert_eq!(r["cause"], "node-lost");
    assert_eq!(r["workers_kept"], 1, "{s}");
    assert!(
        worker_pids(&s).contains(&kept_pid),
        "the kept worker still runs: {s}"
    );
    // Its log is read where it started (its directory is named after generation 1).
    let kept = s["workers"]
        .as_array()
        .expect("workers")
        .iter()
        .find(|w| w["pid"].as_u64() == Some(kept_pid))
        .and_then(|w| w["worker"].as_u64())
        .expect("the kept worker's index");
    let out = c.cli(&["topology", "log", "pipes", "--worker", &kept.to_string()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Executor by executor: pipeline a's ran on (same process, same thread start).
    let mut starts_after = None;
    wait_until("every executor reporting", Duration::from_secs(20), || {
        starts_after = executor_starts(&c.show("pipes"));
        starts_after.is_some()
    });
    let starts_after = starts_after.expect("starts");
    for (name, before) in &starts_before {
        if name.ends_with("-a#0") || name.ends_with("-a#1") {
            assert_eq!(before, &starts_after[name], "{name} was restarted");
        } else {
            assert_ne!(before.1, starts_after[name].1, "{name} moved");
        }
    }
    let before = total(&s);
    let received = |s: &Value, prefix: &str| -> f64 {
        s["executors"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|x| {
                x["executor"]
                    .as_str()
                    .is_some_and(|n| n.starts_with(prefix))
            })
            .map(|x| x["received_per_s"].as_f64().unwrap_or(0.0))
            .sum()
    };
    wait_until("both pipelines counting", Duration::from_secs(20), || {
        let s = c.show("pipes");
        total(&s) > before + 300 && received(&s, "count-a") > 0.0 && received(&s, "count-b") > 0.0
    });
}

#[test]
fn on_a_tls_cluster_the_workers_speak_tls_to_each_other_and_count_exactly() {
    let mut c = support::Cluster::start_tls("topology-tls");
    c.start_agent("n1", 2, &[]);
    c.start_agent("n2", 2, &[]);
    c.wait_for_nodes(2);
    // Agents sync every 500 ms; let both be seen before placing.
    std::thread::sleep(Duration::from_millis(1200));
    let repeat = 100;
    let file = c.write("tls.toml", &wordcount("wc-tls", repeat, 200));
    c.ok(&[
        "topology",
        "submit",
        file.to_str().expect("path"),
        "--placer",
        "even",
        "--workers",
        "2",
        "--interval",
        "0s",
    ]);
    let show = || -> Value {
        serde_json::from_str(&c.ok(&["topology", "show", "wc-tls", "--output", "json"]))
            .expect("json")
    };
    wait_until("the word count to finish", Duration::from_secs(40), || {
        show()["spouts_done"] == true
    });
    let want = expected(repeat);
    wait_until("exact counts", Duration::from_secs(10), || {
        read_counts(&c.dir, "wc-tls") == want
    });
    let s = show();
    assert_eq!(nodes_of_workers(&s).len(), 2, "{s}");
    for w in s["workers"].as_array().expect("workers") {
        assert_eq!(w["encrypted"], true, "{w}");
        assert_eq!(w["refused_connections"], 0, "{w}");
    }
    let table = c.ok(&["topology", "show", "wc-tls"]);
    assert!(table.contains("tls"), "{table}");
    assert!(
        s["inter_node_tuples_total"].as_u64().unwrap_or(0) > 0,
        "tuples crossed between the nodes: {s}"
    );
    // Both agents told their workers to speak TLS, and no connection was refused.
    for node in ["n1", "n2"] {
        let stream = c.dir.join(format!("agent-{node}")).join("stream");
        let configs: Vec<Value> = std::fs::read_dir(&stream)
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| std::fs::read_to_string(e.path().join("config.json")).ok())
            .map(|t| serde_json::from_str(&t).expect("json"))
            .collect();
        assert!(!configs.is_empty(), "a worker on {node}");
        assert!(configs.iter().all(|v| v["encrypt"] == true), "{configs:?}");
        for entry in std::fs::read_dir(&stream).into_iter().flatten().flatten() {
            let err = std::fs::read_to_string(entry.path().join("worker.err")).unwrap_or_default();
            assert!(!err.contains("refused a connection"), "{err}");
        }
    }
}

#[test]
fn a_drained_node_is_emptied_of_stream_workers_and_the_count_stays_exact() {
    // 320 % of CPU on three 2-core nodes: one-phase uses two, the third is free. Draining one
    // of the two moves its executors to the free node; the worker there hands its executors'
    // state over and stops, so the drained node runs nothing of the topology, and no count is
    // lost or repeated.
    let c = start("drain", &["n1", "n2", "n3"]);
    std::thread::sleep(Duration::from_millis(1500));
    // 2,400 sentences at 300 sentences/s: about 8 s.
    let repeat = 600;
    let file = c.write("wc.toml", &wordcount("wc-drain", repeat, 150));
    c.ok(&[
        "topology",
        "submit",
        file.to_str().expect("path"),
        "--interval",
        "0s",
    ]);
    let before = c.show("wc-drain");
    let used = nodes_of_workers(&before);
    assert_eq!(used.len(), 2, "{before}");
    let target = used[0].clone();
    // Let it count for a while (and the server's 2 s restart grace pass) before the drain.
    wait_until("the workers to run", Duration::from_secs(20), || {
        let s = c.show("wc-drain");
        s["workers_running"] == 2 && total(&s) > 0
    });
    std::thread::sleep(Duration::from_millis(1500));
    let pid_there: Vec<u64> = c.show("wc-drain")["workers"]
        .as_array()
        .expect("workers")
        .iter()
        .filter(|w| w["node"] == target.as_str())
        .filter_map(|w| w["pid"].as_u64())
        .collect();
    assert_eq!(pid_there.len(), 1, "one worker on {target}");
    let passed_before = total(&c.show("wc-drain"));
    let said = c.ok(&["node", "drain", &target]);
    assert!(
        said.contains("1 stream worker moves to other nodes"),
        "the drain says what moves: {said}"
    );
    wait_until(
        "the drained node to host no worker",
        Duration::from_secs(20),
        || {
            let s = c.show("wc-drain");
            !nodes_of_workers(&s).contains(&target)
                && s["workers_draining"] == 0
                && !pid_alive(pid_there[0])
        },
    );
    let moved = c.show("wc-drain");
    let r = moved["reschedules"].as_array().expect("reschedules");
    assert_eq!(r.len(), 1, "{moved}");
    assert_eq!(r[0]["cause"], "node-drained", "{moved}");
    wait_until("the spouts to finish", Duration::from_secs(40), || {
        c.show("wc-drain")["spouts_done"] == true
    });
    let want = expected(repeat);
    let t0 = std::time::Instant::now();
    while read_counts(&c.dir, "wc-drain") != want && t0.elapsed() < Duration::from_secs(15) {
        std::thread::sleep(Duration::from_millis(200));
    }
    let diff = count_diff(&want, &read_counts(&c.dir, "wc-drain"));
    assert!(diff.is_empty(), "counts differ across the drain: {diff:?}");
    // `tuples_total` is cumulative: the drained worker's tuples stay counted. Every sentence
    // passed from a spout to a split, and every word from a split to a count (more where a
    // tree was replayed), which the workers' next reports (each second) say. It never falls
    // meanwhile. Before, the drained process took its count with it.
    let least = CORPUS.len() as u64 * repeat + want.values().sum::<u64>();
    let mut passed = passed_before;
    let t0 = std::time::Instant::now();
    loop {
        let now = total(&c.show("wc-drain"));
        assert!(now >= passed, "tuples_total fell from {passed} to {now}");
        passed = now;
        if passed >= least {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "tuples_total {passed}: at least {least} passed ({passed_before} before the drain)"
        );
        std::thread::sleep(Duration::from_millis(300));
    }
    assert!(
        c.ok(&["topology", "rebalance", "wc-drain"])
            .contains("wc-drain"),
        "a rebalance still works"
    );
    assert!(
        !nodes_of_workers(&c.show("wc-drain")).contains(&target),
        "and leaves the drained node out"
    );
}

/// A worker that cannot start on its node (its spout's file is not there) keeps being placed;
/// `topology show` says why, as the worker said it, instead of leaving the user to the agent's
/// log.
#[test]
fn a_worker_that_cannot_start_says_why_in_topology_show() {
    let c = start("no-start", &["a"]);
    let text = wordcount("nofile", 1, 10).replace(
        "params = { lines = [",
        "params = { file = \"no-such-corpus.txt\", lines = [",
    );
    assert!(text.contains("no-such-corpus.txt"), "{text}");
    let file = c.write("nofile.toml", &text);
    c.ok(&["topology", "submit", file.to_str().expect("path")]);
    let mut shown = Value::Null;
    support::wait_until("the worker's error", Duration::from_secs(30), || {
        shown = c.show("nofile");
        shown["workers"][0]["start_error"]
            .as_str()
            .is_some_and(|e| e.contains("no-such-corpus.txt"))
    });
    let why = shown["workers"][0]["start_error"].as_str().unwrap_or("");
    assert!(
        why.starts_with("its worker process exited (exit status: 1)"),
        "{why}"
    );
    // It keeps failing: started again after a back-off that doubles (0.5, 1, 2, 4 s …), not at
    // every sync — within 5 s of its first exit, at most 4 more starts (10 without it).
    let times = |s: &Value| -> u64 {
        s["workers"][0]["start_error"]
            .as_str()
            .and_then(|e| e.split(", ").nth(1))
            .and_then(|t| t.split(' ').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or(1)
    };
    let first = times(&shown);
    std::thread::sleep(Duration::from_secs(5));
    let later = c.show("nofile");
    let n = times(&later);
    assert!(n > first && n <= first + 4, "{first} → {n}: {later}");
    assert!(
        later["workers"][0]["start_error"]
            .as_str()
            .is_some_and(|e| e.contains("times in a row without listening, started again in")),
        "{later}"
    );
    // Its directory (its key) is gone with it, between two starts.
    support::wait_until(
        "the worker's directory to go",
        Duration::from_secs(20),
        || std::fs::read_dir(c.dir.join("agent-a/stream")).map_or(true, |mut d| d.next().is_none()),
    );
    let printed = c.ok(&["topology", "show", "nofile"]);
    assert!(
        printed.contains("worker 0 cannot start on a: its worker process exited"),
        "{printed}"
    );
}

/// `hetsched topology log NAME --worker W` prints a running worker's stderr (here what a
/// multi-language bolt's program wrote), read from its agent through the server: whole, its
/// `--tail`, to the topology's owner and the admin only, and a worker it does not have is
/// named.
#[test]
fn topology_log_prints_a_running_workers_stderr_to_its_owner() {
    let c = start("worker-log", &["a"]);
    let text = r#"name = "talk"
[[component]]
name = "lines"
kind = "spout"
parallelism = 1
cpu = 10.0
builtin = "corpus-spout"
params = { lines = ["a b c"], repeat = 0, rate = 5 }
[[component]]
name = "talker"
kind = "bolt"
parallelism = 1
cpu = 10.0
command = ["sh", "-c", "read l; read l; echo '{\"pid\": '$$'}'; echo end; echo '{\"command\": \"log\", \"msg\": \"LOG-FROM-BOLT\"}'; echo end; echo hello from the bolt >&2; exec sleep 600"]
[[stream]]
from = "lines"
to = "talker"
grouping = "shuffle"
rate = 5.0
"#;
    let file = c.write("talk.toml", text);
    c.ok(&["topology", "submit", file.to_str().expect("path")]);
    let mut whole = String::new();
    // The program's own stderr, and its multi-lang `log` message, which the worker logs
    // (its log is the same `worker.err`: it was lost while the worker had no subscriber).
    support::wait_until(
        "the bolt's lines in the worker's log",
        Duration::from_secs(30),
        || {
            let out = c.cli(&["topology", "log", "talk", "--worker", "0"]);
            whole = String::from_utf8_lossy(&out.stdout).into_owned();
            out.status.success()
                && whole.contains("hello from the bolt\n")
                && whole.contains("talker#0: LOG-FROM-BOLT")
        },
    );
    let tail = c.ok(&["topology", "log", "talk", "--tail", "5"]);
    assert!(
        tail.len() <= 5 && whole.ends_with(&tail),
        "{tail:?} of {whole:?}"
    );
    let out = c.cli(&["topology", "log", "talk", "--worker", "3"]);
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("topology `talk` has 1 worker, 0 to 0: no worker 3"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Another user may see the topology, not its workers' logs.
    let bob = c.dir.join("bob.token");
    c.ok(&["user", "add", "bob", "--save", bob.to_str().expect("path")]);
    let out = c
        .command(&["topology", "log", "talk"])
        .env("HETSCHED_TOKEN_FILE", &bob)
        .output()
        .expect("run hetsched");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("read its workers' logs"),
        "{err}"
    );
    // `--follow` prints on until the worker stops.
    let mut follow = c
        .command(&["topology", "log", "talk", "--follow"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("follow");
    std::thread::sleep(Duration::from_millis(500));
    c.ok(&["topology", "kill", "talk"]);
    let mut ended = None;
    support::wait_until(
        "--follow to end with the worker",
        Duration::from_secs(20),
        || {
            ended = follow.try_wait().expect("wait");
            ended.is_some()
        },
    );
    assert!(ended.is_some_and(|s| s.success()), "{ended:?}");
    let mut followed = String::new();
    std::io::Read::read_to_string(&mut follow.stdout.take().expect("stdout"), &mut followed)
        .expect("read");
    assert!(followed.contains("hello from the bolt\n"), "{followed:?}");
    let out = c.cli(&["topology", "log", "talk"]);
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("its workers no longer run"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Killed, it is purged on request: no longer listed.
    assert_eq!(
        c.ok(&["topology", "purge", "talk"]),
        "topology talk purged\n"
    );
    assert!(!c.ok(&["topology", "list"]).contains("talk"));
}

/// Every worker in an agent's sync reply comes with its topology's whole text (up to the
/// 2 MiB a topology file may have), so a node running workers of a few large topologies is
/// sent a reply past gRPC's default 4 MiB: the agent reads it and runs them all. With the
/// default limit it could decode no sync at all, and none of its workers started.
#[test]
fn an_agent_runs_the_workers_of_topologies_whose_texts_together_pass_4_mib() {
    let c = start_with_cores("big-texts", &["a"], 16);
    // A comment of 1.5 MB in front of each: three of them make a reply of about 4.5 MB.
    let pad = format!("# {}\n", "x".repeat(1_500_000));
    let names = ["big1", "big2", "big3"];
    for name in names {
        let file = c.write(
            &format!("{name}.toml"),
            &format!("{pad}{}", wordcount(name, 1, 10)),
        );
        c.ok(&[
            "topology",
            "submit",
            file.to_str().expect("path"),
            "--workers",
            "1",
        ]);
    }
    support::wait_until(
        "every topology's worker to run",
        Duration::from_secs(60),
        || names.iter().all(|n| worker_pids(&c.show(n)).len() == 1),
    );
    for name in names {
        support::wait_until("tuples to flow", Duration::from_secs(30), || {
            total(&c.show(name)) > 0
        });
    }
}

/// A multi-lang bolt whose program passes its handshake and exits at once is started again
/// in place 5 times (after 1, 2, 4, 8 and 16 s), then given up on: `topology show`'s
/// executor table says its restarts and `failed`, a line says why it ended, and the topology
/// reads degraded there, in `topology list` and in `/metrics`. A second bolt's program leaves
/// two `sleep 300`s behind, one in a session of its own (`setsid`) and one orphaned as well
/// (its parent exited, as a daemon forks twice): both end when the topology is killed.
#[test]
fn a_multilang_executor_that_keeps_failing_shows_its_restarts_and_give_up_and_leaves_nothing_behind()
 {
    let c = start("multilang-flaky", &["a"]);
    let flaky = c.write(
        "flaky.sh",
        "while read -r l; do [ \"$l\" = end ] && break; done\n\
         printf '{\"pid\": %d}\\nend\\n' $$\n\
         exit 3\n",
    );
    let escapees = c.dir.join("escapees");
    let escaper = c.write(
        "escaper.sh",
        "while read -r l; do [ \"$l\" = end ] && break; done\n\
         setsid sleep 300 </dev/null >/dev/null 2>&1 &\n\
         echo $! >> \"$1\"\n\
         sh -c 'setsid sleep 300 </dev/null >/dev/null 2>&1 & echo $!' >> \"$1\"\n\
         printf '{\"pid\": %d}\\nend\\n' $$\n\
         exec sleep 600\n",
    );
    let text = support::numbers_into(
        "flaky",
        &[
            support::CommandBolt {
                name: "sink",
                command: &["sh", flaky.to_str().expect("path")],
                params: "",
            },
            support::CommandBolt {
                name: "escaper",
                command: &[
                    "sh",
                    escaper.to_str().expect("path"),
                    escapees.to_str().expect("path"),
                ],
                params: "\"topology.subprocess.timeout.secs\" = 600",
            },
        ],
    );
    let file = c.write("flaky.toml", &text);
    c.ok(&["topology", "submit", file.to_str().expect("path")]);
    let sink = |s: &Value| -> Value {
        s["executors"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|x| x["executor"] == "sink#0")
            .cloned()
            .unwrap_or(Value::Null)
    };
    let mut shown = Value::Null;
    support::wait_until("sink#0 to be given up on", Duration::from_secs(120), || {
        shown = c.show("flaky");
        sink(&shown)["gave_up"] == true
    });
    let x = sink(&shown);
    assert_eq!(x["restarts"], 5, "{x}");
    let why = x["ended"].as_str().unwrap_or("");
    assert!(
        why.starts_with(
            "sink#0: the program ended 6 times within 300 s (at most 5 restarts): not started again; last: sink#0: the program exited (exit status: 3)"
        ),
        "{why}"
    );
    assert_eq!(shown["state"], "running", "{shown}");
    assert_eq!(shown["degraded"], true, "{shown}");
    assert_eq!(shown["executors_given_up"], serde_json::json!(["sink#0"]));
    let printed = c.ok(&["topology", "show", "flaky"]);
    assert!(
        printed.contains("topology flaky (running, degraded: sink#0 given up)"),
        "{printed}"
    );
    let row = printed
        .lines()
        .find(|l| l.contains("│ sink#0"))
        .unwrap_or_else(|| panic!("no sink#0 row in\n{printed}"));
    let cells: Vec<&str> = row
        .split(['│', '┆'])
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .collect();
    // executor, node, received/s, emitted/s, cpu %, unacked, expired, restarts, state
    assert_eq!(cells.len(), 9, "{row}");
    assert_eq!((cells[7], cells[8]), ("5", "failed"), "{row}");
    assert!(
        printed.contains("sink#0 failed for good: sink#0: the program ended 6 times within 300 s"),
        "{printed}"
    );
    let listed = c.ok(&["topology", "list"]);
    assert!(
        listed.contains("running, degraded: sink#0 given up"),
        "{listed}"
    );
    support::wait_until("/metrics to say degraded", Duration::from_secs(10), || {
        c.metrics()
            .contains("hetsched_topology_degraded{topology=\"flaky\"} 1")
    });
    // What the escaper's program left behind runs until the topology is killed.
    let left: Vec<u32> = std::fs::read_to_string(&escapees)
        .expect("the escapees' pids")
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect();
    assert_eq!(left.len(), 2, "{left:?}");
    assert!(left.iter().all(|&p| pid_alive(u64::from(p))), "{left:?}");
    c.ok(&["topology", "kill", "flaky"]);
    let killed = std::time::Instant::now();
    while left.iter().any(|&p| pid_alive(u64::from(p))) {
        if killed.elapsed() > Duration::from_secs(20) {
            let running: Vec<String> = left
                .iter()
                .filter(|&&p| pid_alive(u64::from(p)))
                .map(|p| p.to_string())
                .collect();
            let _ = Command::new("kill").arg("-9").args(&running).status();
            panic!("{running:?} outlive the killed topology's worker");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}
