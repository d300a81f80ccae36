//! Divisible jobs end to end (docs/divisible.md, "In the runtime"): the real `hetsched` binary as
//! a server and three agents on loopback, one of them twice as slow (its environment sets
//! `HETSCHED_MATROWS_SLOWDOWN=2`, which the chunk program reads), running a row-wise matrix
//! product whose input the server ships chunk by chunk. Every wait is bounded.

use crate::support;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;
use support::{BIN, Cluster, wait_until};

/// The tests that measure speeds run one at a time: two clusters of sleeping chunk programs
/// side by side on a 2-core machine would blur each other's measurements.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner())
}

/// Emulated cost of a row on a normal agent, ms: large against the start-up of a chunk's
/// process (tens of ms on a loaded machine), so that two calibration chunks measure the speed.
const ROW_MS: f64 = 16.0;

/// Rows of A, and columns.
const ROWS: u64 = 480;
const COLS: usize = 32;

fn start_agent(c: &mut Cluster, name: &str, slowdown: &str, memory: &str) {
    let config = c.write(
        &format!("agent-{name}.toml"),
        &format!("memory = \"{memory}\"\n"),
    );
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(c.dir.join(format!("agent-{name}.log")))
        .expect("log");
    let child = Command::new(BIN)
        .args([
            "agent",
            "--server",
            &c.url(),
            "--name",
            name,
            "--cores",
            "2",
        ])
        .arg("--config")
        .arg(&config)
        .arg("--token-file")
        .arg(c.data().join("agent-token"))
        .arg("--work-dir")
        .arg(c.dir.join(format!("agent-{name}")))
        .args(["--log-listen", "none"])
        .env("HETSCHED_MATROWS_SLOWDOWN", slowdown)
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("spawn agent");
    c.agents.insert(name.to_string(), child);
}

/// A server and agents `a`, `b` (normal, 1 GiB) and `slow` (2× slower, 256 MiB: 256 units of
/// the job's 1 MiB, so no chunk of more than 128 — it holds two at once); A written to `a.bin`.
fn cluster(name: &str) -> Cluster {
    let mut c = Cluster::start(name, false);
    start_agent(&mut c, "a", "1", "1GiB");
    start_agent(&mut c, "b", "1", "1GiB");
    start_agent(&mut c, "slow", "2", "256MiB");
    c.wait_for_nodes(3);
    let a: Vec<u8> = (0..ROWS as usize * COLS)
        .flat_map(|k| (((k * 7919) % 1000) as f64 / 250.0 - 2.0).to_le_bytes())
        .collect();
    std::fs::write(c.dir.join("a.bin"), a).expect("a.bin");
    c
}

fn job_file(algo: &str, row_ms: f64) -> String {
    format!(
        r#"name = "rows-{algo}"
[[divisible]]
name = "product"
units = {ROWS}
command = ["{BIN}", "matrows", "--start", "{{start}}", "--end", "{{end}}", "--input", "{{input}}", "--cols", "{COLS}", "--row-ms", "{row_ms}"]
input = "a.bin"
unit_bytes = {}
output = "concat"
algo = "{algo}"
memory_per_unit = "1MiB"
"#,
        COLS * 8
    )
}

fn submit(c: &Cluster, file: &str, text: &str) -> u64 {
    let path = c.write(file, text);
    let v = c.json(&["submit", path.to_str().expect("utf-8")]);
    v["job_id"].as_u64().expect("job id")
}

fn job(c: &Cluster, id: u64) -> serde_json::Value {
    c.json(&["job", &id.to_string()])
}

fn wait_done(c: &Cluster, id: u64) -> serde_json::Value {
    for _ in 0..1800 {
        let last = job(c, id);
        if matches!(last["state"].as_str(), Some("completed" | "failed")) {
            return last;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!(
        "the divisible job did not finish: {}\nserver log:\n{}",
        String::from_utf8_lossy(&c.cli(&["job", &id.to_string()]).stdout),
        std::fs::read_to_string(c.dir.join("server.log")).unwrap_or_default()
    );
}

/// The product computed in one piece, by the same program, without chunks.
fn whole_product(c: &Cluster) -> Vec<u8> {
    let out = Command::new(BIN)
        .args(["matrows", "--start", "0", "--end", &ROWS.to_string()])
        .args(["--input", "a.bin", "--cols", &COLS.to_string()])
        .current_dir(&c.dir)
        .output()
        .expect("matrows");
    assert!(out.status.success());
    assert_eq!(out.stdout.len() as u64, ROWS * COLS as u64 * 8);
    out.stdout
}

fn gathered(c: &Cluster, id: u64) -> Vec<u8> {
    let to = c.dir.join(format!("out-{id}"));
    let out = c.cli(&["output", &id.to_string(), "-o", to.to_str().expect("utf-8")]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::read(to.join(format!("job-{id}.out"))).expect("output")
}

/// Done chunks cover every unit exactly once (no success recorded twice).
fn check_exactly_once(j: &serde_json::Value) {
    check_tiles(j, ROWS);
}

/// Done chunks cover the `units` units exactly once; returns them, `(start, end)` in order.
pub(crate) fn check_tiles(j: &serde_json::Value, units: u64) -> Vec<(u64, u64)> {
    let mut done: Vec<(u64, u64)> = j["divisible"]["chunks"]
        .as_array()
        .expect("chunks")
        .iter()
        .filter(|c| c["state"] == "done")
        .map(|c| {
            (
                c["start"].as_u64().expect("start"),
                c["end"].as_u64().expect("end"),
            )
        })
        .collect();
    done.sort();
    let mut at = 0;
    for &(s, e) in &done {
        assert_eq!(
            s, at,
            "done chunks must tile the units: {s}..{e} after {at}"
        );
        at = e;
    }
    assert_eq!(at, units);
    done
}

fn units_of(j: &serde_json::Value) -> BTreeMap<String, u64> {
    j["divisible"]["workers"]
        .as_array()
        .expect("workers")
        .iter()
        .map(|w| {
            (
                w["name"].as_str().expect("name").to_string(),
                w["units_done"].as_u64().expect("units"),
            )
        })
        .collect()
}

#[test]
fn umrlm_sizes_chunks_by_measured_speed_and_gathers_the_exact_product() {
    let _one = serial();
    let c = cluster("div-e2e");
    let expected = whole_product(&c);
    let id = submit(&c, "umrlm.toml", &job_file("umrlm", ROW_MS));
    let j = wait_done(&c, id);
    assert_eq!(j["state"], "completed", "{j:#}");
    assert_eq!(gathered(&c, id), expected, "byte for byte");
    check_exactly_once(&j);
    // The slow agent gets about half the units of a fast one.
    let units = units_of(&j);
    let fast = (units["a"] + units["b"]) as f64 / 2.0;
    let ratio = units["slow"] as f64 / fast;
    eprintln!(
        "{}",
        String::from_utf8_lossy(&c.cli(&["job", &id.to_string()]).stdout)
    );
    eprintln!(
        "umrlm units per agent: {units:?}; slow/fast = {ratio:.2}; duration {} s; lower bound {} s",
        j["duration_s"], j["divisible"]["lower_bound_s"]
    );
    // Measured speeds on a loaded machine also shift the fast agents' latency, hence the wide
    // band; an even split (1.0) or the slow agent starved (below 0.3) both fail.
    assert!(
        (0.3..0.9).contains(&ratio),
        "slow/fast = {ratio}: {units:?}"
    );
    // No chunk exceeds its agent's declared memory (in units of the job's 1 MiB; two chunks
    // held at once, so at most half of it each).
    assert_memory_respected(&j);
    for w in j["divisible"]["workers"].as_array().expect("workers") {
        assert!(w["speed"].as_f64().expect("speed") > 0.0);
    }
    // The table view names the rounds and the lower bound.
    let table = c.cli(&["job", &id.to_string()]);
    let text = String::from_utf8_lossy(&table.stdout);
    assert!(
        text.contains("0 (calibration)") && text.contains("lower bound W/ΣS"),
        "{text}"
    );

    // The same job with the naive equal split: every agent gets a third.
    let id = submit(&c, "static.toml", &job_file("static", ROW_MS));
    let s = wait_done(&c, id);
    assert_eq!(s["state"], "completed", "{s:#}");
    assert_eq!(gathered(&c, id), expected);
    let units = units_of(&s);
    assert_eq!(
        units.values().copied().collect::<Vec<_>>(),
        vec![ROWS / 3; 3]
    );
    eprintln!(
        "static duration {} s vs umrlm {} s",
        s["duration_s"], j["duration_s"]
    );
}

/// Every chunk is at most half its agent's memory in units (the memory rule: a chunk computing
/// and one received).
fn assert_memory_respected(j: &serde_json::Value) {
    let memory: BTreeMap<String, u64> = j["divisible"]["workers"]
        .as_array()
        .expect("workers")
        .iter()
        .map(|w| {
            (
                w["name"].as_str().expect("name").to_string(),
                w["memory_units"].as_u64().expect("memory"),
            )
        })
        .collect();
    assert_eq!(memory["slow"], 256, "{memory:?}");
    assert_eq!(memory["a"], 1024, "{memory:?}");
    for ch in j["divisible"]["chunks"].as_array().expect("chunks") {
        let size = ch["end"].as_u64().expect("end") - ch["start"].as_u64().expect("start");
        let cap = memory[ch["worker"].as_str().expect("worker")] / 2;
        assert!(
            size <= cap,
            "chunk {ch} is over half its agent's memory ({cap} units)"
        );
    }
}

#[test]
fn a_job_survives_the_sigkill_of_an_agent_and_of_the_server() {
    let _one = serial();
    let mut c = cluster("div-kill");
    let expected = whole_product(&c);
    // Rows of 32 ms: what is left after the agent's death takes seconds, far longer than the
    // server's 1 s dead timeout plus one poll of `job`, so the server is killed while the job runs.
    let id = submit(&c, "umrlm.toml", &job_file("umrlm", 32.0));
    // Killed while computing a chunk of a later round (seconds long), so its chunk is lost and
    // the job cannot end before the server declares the agent lost. (Waiting for an eighth of
    // the units instead could see them only when b had already finished its last chunk: units
    // are counted in chunk-sized steps, and faster round trips make round 0 smaller.)
    wait_until(
        "b to compute a chunk of round 1",
        Duration::from_secs(60),
        || {
            job(&c, id)["divisible"]["chunks"]
                .as_array()
                .is_some_and(|chunks| {
                    chunks.iter().any(|ch| {
                        ch["worker"] == "b"
                            && ch["state"] == "out"
                            && ch["round"].as_u64() >= Some(1)
                    })
                })
        },
    );
    c.kill_agent("b");
    // The server is killed once it has declared the agent lost (its chunks re-queued), not at a
    // fraction of the units: units finish in chunk-sized steps, and a burst of them could end the
    // job between two looks.
    let b_lost = |j: &serde_json::Value| {
        j["divisible"]["workers"]
            .as_array()
            .is_some_and(|ws| ws.iter().any(|w| w["name"] == "b" && w["alive"] == false))
    };
    let mut before = serde_json::Value::Null;
    wait_until(
        "the server to declare the agent lost",
        Duration::from_secs(60),
        || {
            before = job(&c, id);
            before["state"] != "running" || b_lost(&before)
        },
    );
    assert_eq!(
        before["state"], "running",
        "the server is killed mid-job: {before:#}"
    );
    c.kill_server();
    c.start_server();
    let j = wait_done(&c, id);
    assert_eq!(j["state"], "completed", "{j:#}");
    assert_eq!(gathered(&c, id), expected, "byte for byte");
    check_exactly_once(&j);
    let b = &j["divisible"]["workers"]
        .as_array()
        .expect("workers")
        .iter()
        .find(|w| w["name"] == "b")
        .cloned()
        .expect("b");
    assert_eq!(b["alive"], false, "the killed agent is lost: {b}");
}

/// A divisible job's input travels inside its submission, one message, which the server takes
/// up to 4 MiB: a larger input is refused before anything is sent, at the job file's `input`,
/// with the file's size, the bound and what to do instead. It was refused by gRPC, `decoded
/// message length too large`, naming no file, field or bound.
#[test]
fn a_divisible_input_past_the_servers_message_bound_is_refused_naming_it() {
    let c = Cluster::start("div-big-input", false);
    let submit = |file: &str, input: &str, bytes: usize| {
        std::fs::write(c.dir.join(input), vec![0u8; bytes]).expect("input");
        let p = c.write(
            file,
            &format!(
                "[[divisible]]\nname = \"x\"\nunits = 10\ncommand = \"cat {{input}} # {{start}} {{end}}\"\ninput = \"{input}\"\nunit_bytes = 8\n"
            ),
        );
        c.cli(&["submit", p.to_str().expect("utf-8")])
    };
    let out = submit("big.toml", "big.bin", 5 << 20);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("big.toml:5:9: divisible[0].input: `big.bin` is 5242880 bytes (5.0 MiB)")
            && err.contains("up to 4194304 bytes (4.0 MiB, job file included)")
            && err.contains("leave `input` and `unit_bytes` out")
            && err.contains("a file system every node shares")
            && !err.contains("decoded message length"),
        "{err}"
    );
    // Exactly 4 MiB fits alone, not with the job file: said the same, with the whole size.
    let out = submit("edge.toml", "edge.bin", 4 << 20);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("edge.toml:5:9: divisible[0].input: `edge.bin` is 4194304 bytes (4.0 MiB), ")
            && err.contains(" bytes with the job file,")
            && !err.contains("decoded message length"),
        "{err}"
    );
    assert_eq!(c.json(&["jobs"]).as_array().map(Vec::len), Some(0));
    // Below the bound it is taken.
    let out = submit("fits.toml", "fits.bin", 3 << 20);
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && said.contains("job 1 submitted (10 units)"),
        "{said}{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn bad_divisible_input_is_refused_naming_the_field_or_the_chunk() {
    let c = Cluster::start("div-bad", false);
    let refused = |file: &str, text: &str, expect: &str| {
        let p = c.write(file, text);
        let out = c.cli(&["submit", p.to_str().expect("utf-8")]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && err.contains(expect),
            "{file}: {err}"
        );
    };
    refused(
        "no-start.toml",
        "[[divisible]]\nname = \"x\"\nunits = 10\ncommand = \"echo {end}\"\n",
        "no-start.toml:4:11: divisible[0].command: must contain `{start}`",
    );
    refused(
        "zero.toml",
        "[[divisible]]\nname = \"x\"\nunits = 0\ncommand = \"echo {start} {end}\"\n",
        "zero.toml:3:9: divisible[0].units: must be at least 1",
    );
    std::fs::write(c.dir.join("short.bin"), [0u8; 79]).expect("short input");
    refused(
        "short.toml",
        "[[divisible]]\nname = \"x\"\nunits = 10\ncommand = \"cat {input} # {start} {end}\"\ninput = \"short.bin\"\nunit_bytes = 8\n",
        "divisible[0].input: `short.bin` is 79 bytes, shorter than units × unit_bytes = 10 × 8 = 80",
    );
    // Nothing was stored.
    assert_eq!(c.json(&["jobs"]).as_array().map(Vec::len), Some(0));

    // A chunk whose output is gone when it ends cannot be gathered: the job fails, naming it.
    let mut c = c;
    start_agent(&mut c, "a", "1", "1GiB");
    c.wait_for_nodes(1);
    let id = submit(
        &c,
        "lost-output.toml",
        "[[divisible]]\nname = \"x\"\nunits = 6\ncommand = \"echo {start} {end}; rm -f \\\"$HETSCHED_CHUNK_OUTPUT\\\"\"\n",
    );
    let j = wait_done(&c, id);
    assert_eq!(j["state"], "failed");
    let why = j["divisible"]["message"].as_str().expect("message");
    assert!(
        why.starts_with("chunk ")
            && why.contains(" (units ")
            && why.contains(") failed: its output cannot be gathered: "),
        "{why}"
    );
    let wait = c.cli(&["wait", &id.to_string()]);
    assert!(!wait.status.success());

    // A job that fails on unit 7 (no retries) counts as failed only the units of the chunk that
    // ran and failed; those never run (stopped with it, or never sent) count as cancelled, and
    // `job N` says they were not run. Before, every unit not done read as failed.
    let id = submit(
        &c,
        "unit-7.toml",
        "[[divisible]]\nname = \"x\"\nunits = 1000\ncommand = \"if [ {start} -le 7 ] && [ 7 -lt {end} ]; then exit 3; fi; echo {start} {end}\"\n",
    );
    let j = wait_done(&c, id);
    assert_eq!(j["state"], "failed");
    let counts = &j["counts"];
    let n = |k: &str| counts[k].as_u64().unwrap_or(0);
    let ran_and_failed: u64 = j["divisible"]["chunks"]
        .as_array()
        .expect("chunks")
        .iter()
        .filter(|k| k["state"] == "failed")
        .map(|k| k["end"].as_u64().unwrap_or(0) - k["start"].as_u64().unwrap_or(0))
        .sum();
    assert!(ran_and_failed > 0, "{j}");
    assert_eq!(n("failed"), ran_and_failed, "{counts}");
    assert_eq!(
        n("succeeded") + n("failed") + n("cancelled"),
        1000,
        "{counts}"
    );
    assert!(n("cancelled") > 0, "{counts}");
    let out = c.cli(&["job", &id.to_string(), "--output", "table"]);
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.contains(&format!(
            "units: {} done, {} ran and failed, {} not run (stopped or never sent when the job failed)",
            n("succeeded"),
            n("failed"),
            n("cancelled")
        )),
        "{said}"
    );

    // A cancelled job stops: it ends `cancelled`, and its output is not served.
    let id = submit(
        &c,
        "long.toml",
        "[[divisible]]\nname = \"x\"\nunits = 100\ncommand = \"sleep 0.2; echo {start} {end}\"\n",
    );
    let out = c.cli(&["cancel", &id.to_string()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // It says what it cancelled in the job's words, and every unit is counted: done or
    // cancelled.
    let said = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(said.contains("units cancelled"), "{said}");
    let j = job(&c, id);
    assert_eq!(j["state"], "cancelled");
    let counts = &j["counts"];
    let n = |k: &str| counts[k].as_u64().unwrap_or(0);
    assert_eq!(n("succeeded") + n("cancelled"), 100, "{counts}");
    assert!(
        n("cancelled") > 0 && n("pending") + n("running") == 0,
        "{counts}"
    );
    assert!(
        said.contains(&format!("{} units cancelled", n("cancelled"))),
        "{said}"
    );
    let out = c.cli(&["output", &id.to_string()]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("is cancelled"));
    assert!(Path::new(&c.dir).exists());
    // Refused into a directory: a file fetched there before is left as it was, nothing else
    // written.
    let dir = c.dir.join("fetched");
    std::fs::create_dir_all(&dir).expect("dir");
    let kept = dir.join(format!("job-{id}.out"));
    std::fs::write(&kept, "fetched before\n").expect("write");
    let out = c.cli(&[
        "output",
        &id.to_string(),
        "-o",
        dir.to_str().expect("utf-8"),
    ]);
    assert!(!out.status.success());
    assert_eq!(
        std::fs::read_to_string(&kept).expect("kept"),
        "fetched before\n"
    );
    assert_eq!(std::fs::read_dir(&dir).expect("dir").count(), 1);
    // Refused into a directory that did not exist: it is not left behind, empty.
    let fresh = c.dir.join("new").join("out");
    let out = c.cli(&[
        "output",
        &id.to_string(),
        "-o",
        fresh.to_str().expect("utf-8"),
    ]);
    assert!(!out.status.success());
    assert!(!c.dir.join("new").exists(), "created by a refused output");
}

/// What a user debugging a divisible job relies on: `hetsched log JOB CHUNK` prints a chunk's
/// stdout (a done chunk's from the server's copy, its agent having removed its own) and stderr;
/// a failed job's `wait` prints why and its failed chunks' last stderr lines; `tasks` says that
/// the job runs chunks. The agent runs from its own directory with a relative `--work-dir`, so
/// `{input}` must not depend on the agent's working directory (it once did, and every chunk ran
/// on a path that did not exist from the chunk's directory).
#[test]
fn a_chunks_output_and_errors_are_readable_and_inputs_resolve_from_a_relative_work_dir() {
    let mut c = Cluster::start("div-log", false);
    let log = std::fs::File::create(c.dir.join("agent-rel.log")).expect("log");
    let child = Command::new(BIN)
        .args([
            "agent",
            "--server",
            &c.url(),
            "--name",
            "rel",
            "--cores",
            "2",
        ])
        .arg("--token-file")
        .arg(c.data().join("agent-token"))
        .args(["--work-dir", "agent-rel", "--log-listen", "127.0.0.1:0"])
        .current_dir(&c.dir)
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("spawn agent");
    c.agents.insert("rel".to_string(), child);
    c.wait_for_nodes(1);
    let numbers: String = (0..100).map(|i| format!("{i:03}\n")).collect();
    std::fs::write(c.dir.join("numbers.txt"), numbers).expect("input");
    let id = submit(
        &c,
        "sum.toml",
        "[[divisible]]\nname = \"sum\"\nunits = 100\n\
         command = \"echo units {start}..{end} >&2; awk '{ s += $1 } END { print s }' {input}\"\n\
         input = \"numbers.txt\"\nunit_bytes = 4\n",
    );
    let j = wait_done(&c, id);
    assert_eq!(j["state"], "completed", "{j}");
    let sum: u64 = String::from_utf8_lossy(&gathered(&c, id))
        .lines()
        .map(|l| l.trim().parse::<u64>().expect("a chunk's sum"))
        .sum();
    assert_eq!(sum, 4950);
    let chunks = j["divisible"]["chunks"].as_array().expect("chunks");
    assert!(chunks.len() >= 2, "{j}");
    for ch in chunks {
        let (k, start, end) = (
            ch["chunk"].as_u64().expect("chunk"),
            ch["start"].as_u64().expect("start"),
            ch["end"].as_u64().expect("end"),
        );
        let job_id = id.to_string();
        let stdout = c.ok(&["log", &job_id, &k.to_string()]);
        assert_eq!(
            stdout.trim(),
            (start..end).sum::<u64>().to_string(),
            "chunk {k}"
        );
        let stderr = c.ok(&["log", &job_id, &format!("chunk:{k}"), "--stderr"]);
        assert_eq!(stderr, format!("units {start}..{end}\n"), "chunk {k}");
    }
    c.refused(
        &["log", &id.to_string(), "x"],
        "job 1 is a divisible job: name one of its chunks by number",
    );
    c.refused(&["log", &id.to_string(), "0", "--attempt", "2"], "ran once");
    c.refused(&["log", &id.to_string(), "999"], "has no chunk 999");

    let id = submit(
        &c,
        "bad.toml",
        "[[divisible]]\nname = \"bad\"\nunits = 100\nretries = 1\n\
         command = \"echo cannot read units {start}..{end} >&2; exit 3\"\n",
    );
    let out = c.cli(&["wait", &id.to_string()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains(&format!("job {id} failed: chunk "))
            && err.contains("failed: exited with exit status: 3")
            && err.contains("chunk 0 (units 0..4) failed on rel")
            && err.contains("  | cannot read units 0..4"),
        "{err}"
    );
    assert_eq!(
        c.ok(&["log", &id.to_string(), "0", "--stderr"]),
        "cannot read units 0..4\n"
    );
    let out = c.cli(&["tasks", "--job", &id.to_string()]);
    assert!(out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("is a divisible job: it runs chunks"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A chunk runs in its own process group, so it outlives an agent that is SIGKILLed; the server
/// re-plans its units. The restarted agent (same work directory) kills it before it asks for a
/// chunk, as it does a batch task's (its ledger, `running.chunks`), so the old copy does not
/// compete with the new one.
#[test]
fn a_restarted_agent_kills_the_chunk_its_killed_predecessor_left_running() {
    let mut c = Cluster::start("div-orphan", false);
    c.start_agent("a", 2, &[]);
    c.wait_for_nodes(1);
    let id = submit(
        &c,
        "orphan.toml",
        "[[divisible]]\nname = \"o\"\nunits = 4\n\
         command = \"echo $$ > ../../../pid-{chunk}; sleep 60 # {start} {end}\"\n",
    );
    let pid_file = c.dir.join("pid-0");
    wait_until("chunk 0 to start", Duration::from_secs(30), || {
        std::fs::read_to_string(&pid_file).is_ok_and(|t| t.ends_with('\n'))
    });
    let pid: u32 = std::fs::read_to_string(&pid_file)
        .expect("pid")
        .trim()
        .parse()
        .expect("a pid");
    // Running, and not a zombie waiting for its reaper.
    let alive = |pid: u32| {
        std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
            !s.rsplit_once(')')
                .is_some_and(|(_, r)| r.trim_start().starts_with('Z'))
        })
    };
    // Without its guard, which would kill it at once (the guard's unit test covers chunks).
    c.kill_guard("a");
    c.kill_agent("a");
    assert!(alive(pid), "the chunk outlives its agent");
    c.start_agent("a", 2, &[]);
    wait_until(
        "the orphaned chunk to be killed",
        Duration::from_secs(30),
        || !alive(pid),
    );
    // The agent says so once the kill returned: its line may follow the process's end.
    wait_until(
        "the agent to say it killed the chunk",
        Duration::from_secs(10),
        || {
            c.agent_log("a")
                .contains("killed divisible chunks left running by a previous agent")
        },
    );
    c.ok(&["cancel", &id.to_string()]);
}

/// `hetsched cancel N; hetsched wait N` on a divisible job does not race its chunk's own
/// SIGTERM handler, as for a batch job: the cancel is recorded at once, but the job stays
/// `cancelled (stopping 1)` (its JSON's `stopping`) until its agent no longer lists the chunk,
/// whose process it stops with SIGTERM, and `wait` returns only then. Before, the wait returned
/// at the cancel while the handler still ran.
#[test]
fn wait_after_cancelling_a_divisible_job_returns_once_its_chunks_sigterm_handler_has_finished() {
    let mut c = Cluster::start("div-stopping", false);
    c.start_agent("a", 2, &["--kill-grace", "30s"]);
    c.wait_for_nodes(1);
    let started = c.dir.join("started");
    let done = c.dir.join("done");
    // (It ends by itself after 30 s, should the test fail and leave it behind.)
    let id = submit(
        &c,
        "tidy.toml",
        &format!(
            "[[divisible]]\nname = \"tidy\"\nunits = 1\n\
             command = \"trap 'sleep 3; echo > {}; exit 0' TERM; echo > {}; \
             for i in $(seq 600); do sleep 0.05; done # {{start}} {{end}}\"\n",
            done.display(),
            started.display()
        ),
    );
    let job_id = id.to_string();
    wait_until("the chunk to start", Duration::from_secs(30), || {
        started.exists()
    });
    c.ok(&["cancel", &job_id]);
    let j = job(&c, id);
    assert_eq!(
        (&j["state"], &j["stopping"]),
        (&"cancelled".into(), &1.into()),
        "{j}"
    );
    let shown = c.ok(&["job", &job_id]);
    assert!(shown.contains("cancelled (stopping 1)"), "{shown}");
    // A wait that times out first says why the job is not over.
    let out = c.cli(&["wait", &job_id, "--timeout", "500ms"]);
    assert_eq!(out.status.code(), Some(124));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("job {id} still cancelled (stopping 1)")),
        "{err}"
    );
    assert!(!done.exists(), "the handler was still sleeping");
    // The wait returns (the job was cancelled: status 1) once the handler has finished.
    let out = c.cli(&["wait", &job_id]);
    assert!(!out.status.success());
    assert!(
        done.exists(),
        "wait returned before the chunk's SIGTERM handler had finished"
    );
    let j = job(&c, id);
    assert_eq!(
        (&j["state"], &j["stopping"]),
        (&"cancelled".into(), &0.into()),
        "{j}"
    );
}

/// The reviewer's stall, end to end: while the server is down (SIGKILLed with both agents'
/// chunks out), `b`'s chunk ends and agent `a` is SIGKILLed and started again — a new process,
/// holding nothing. When the server is back, `a`'s first ask loses its chunk at once and its
/// units are planned again, so the job ends in seconds. Before, the rebuilt chunk got a fresh
/// 2 s grace; `a`'s ask (listing nothing) was held open for its 5-minute hold, `b`'s upload
/// and ask came within that grace, nothing else changed, and the job ended 5 minutes late.
#[test]
fn a_chunk_of_an_agent_restarted_while_the_server_was_down_is_planned_again_at_once() {
    let mut c = Cluster::start("div-restarts", false);
    c.start_agent("a", 2, &[]);
    c.start_agent("b", 2, &[]);
    c.wait_for_nodes(2);
    // `static`: one chunk of 20 units for each agent; a's first one is long (its agent is killed
    // during it), every other one takes 1 s.
    let id = submit(
        &c,
        "slow.toml",
        "[[divisible]]\nname = \"r\"\nunits = 40\nalgo = \"static\"\n\
         command = \"if [ \\\"$HETSCHED_NODE\\\" = a ] && [ {chunk} -lt 2 ]; then sleep 60; \
         else sleep 1; fi; echo {start} {end}\"\n",
    );
    wait_until("a chunk out on each agent", Duration::from_secs(30), || {
        job(&c, id)["divisible"]["chunks"]
            .as_array()
            .is_some_and(|chunks| {
                ["a", "b"].iter().all(|w| {
                    chunks
                        .iter()
                        .any(|ch| ch["worker"] == *w && ch["state"] == "out")
                })
            })
    });
    c.kill_server();
    // b's chunk ends meanwhile (its upload waits for the server).
    std::thread::sleep(Duration::from_secs(2));
    c.kill_agent("a");
    c.start_agent("a", 2, &[]);
    std::thread::sleep(Duration::from_millis(500));
    let back = std::time::Instant::now();
    c.start_server();
    let j = wait_done(&c, id);
    assert_eq!(j["state"], "completed", "{j:#}");
    assert!(
        back.elapsed() < Duration::from_secs(30),
        "the job ended {:?} after the server came back (a stall of a 5-minute hold?)",
        back.elapsed()
    );
    // Each chunk printed its range: the gathered output tiles the units once, in order.
    let out = String::from_utf8(gathered(&c, id)).expect("utf-8");
    let mut at = 0;
    for line in out.lines() {
        let (s, e) = line.split_once(' ').expect("start end");
        assert_eq!(s.parse::<u64>().expect("start"), at, "{out}");
        at = e.parse().expect("end");
    }
    assert_eq!(at, 40, "{out}");
}

/// The figures of docs/divisible.md ("In the runtime"): the same job under `static` (the equal
/// split) and `umrlm`, twice each per row cost, one job at a time on one cluster. Timing, so not
/// part of the suite: `cargo test -p hetsched-cli --test divisible_runtime -- --ignored
/// --nocapture`.
#[test]
#[ignore = "an experiment that prints timings; run it by hand"]
fn static_versus_umrlm_figures() {
    let _one = serial();
    let c = cluster("div-figures");
    println!(
        "| row cost (ms) | algo | run | makespan (s) | lower bound W/ΣS (s) | units a/b/slow |"
    );
    println!("|---|---|---|---|---|---|");
    for row_ms in [8.0, 16.0] {
        for run in 1..=2 {
            for algo in ["static", "umrlm", "umr", "rumr"] {
                let id = submit(
                    &c,
                    &format!("{algo}-{row_ms}-{run}.toml"),
                    &job_file(algo, row_ms),
                );
                let j = wait_done(&c, id);
                assert_eq!(j["state"], "completed");
                let u = units_of(&j);
                println!(
                    "| {row_ms} | {algo} | {run} | {:.2} | {:.2} | {}/{}/{} |",
                    j["duration_s"].as_f64().unwrap_or(0.0),
                    j["divisible"]["lower_bound_s"].as_f64().unwrap_or(0.0),
                    u["a"],
                    u["b"],
                    u["slow"]
                );
            }
        }
    }
}

/// `hetsched signal` on a divisible job reaches the chunk each agent computes: chunks that
/// wait for `USR1` end when signalled, and the job completes with what they printed.
#[test]
fn a_signal_reaches_a_divisible_jobs_chunks_being_computed() {
    let mut c = Cluster::start("div-signal", false);
    c.start_agent("s1", 2, &[]);
    c.wait_for_nodes(1);
    let id = submit(
        &c,
        "wait.toml",
        "[[divisible]]\nname = \"wait\"\nunits = 4\n\
         command = \"trap 'echo got USR1 {start} {end}; exit 0' USR1; echo ready >&2; while true; do sleep 0.05; done\"\n",
    );
    let job_id = id.to_string();
    let mut said = String::new();
    wait_until(
        "the chunks to end by the signal",
        Duration::from_secs(60),
        || {
            let j = job(&c, id);
            if j["state"] == "completed" {
                return true;
            }
            // Signal once a chunk is computing (its trap set).
            let computing = j["divisible"]["chunks"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|ch| ch["state"] == "out")
                .any(|ch| {
                    let k = ch["chunk"].as_u64().unwrap_or(0);
                    c.cli(&["log", &job_id, &format!("chunk:{k}"), "--stderr"])
                        .stdout
                        .starts_with(b"ready")
                });
            if computing {
                // Each chunk ends by its signal; the chunk seen computing may have ended (and
                // its result come in) between the look and the signal, which then finds none
                // out: what the test checks is a signal that reached one.
                let r = c.ok(&["signal", &job_id, "--signal", "USR1"]);
                if r.contains("sent to") {
                    said = r;
                }
            }
            false
        },
    );
    assert!(
        said.contains("SIGUSR1 sent to 1 chunk out to agents"),
        "{said}"
    );
    let out = String::from_utf8_lossy(&gathered(&c, id)).into_owned();
    assert!(
        !out.is_empty() && out.lines().all(|l| l.starts_with("got USR1 ")),
        "{out}"
    );
    // A divisible job is made of units, and says so.
    let shown = c.ok(&["job", &job_id]);
    assert!(shown.contains("completed — 4 units: "), "{shown}");
}

/// The process id of the cluster's server (the `hetsched server` whose command line names its
/// data directory), from `/proc`.
fn server_pid(c: &Cluster) -> Option<u32> {
    let data = c.data().display().to_string();
    std::fs::read_dir("/proc")
        .ok()?
        .flatten()
        .filter_map(|e| {
            let pid = e.file_name().to_str()?.parse::<u32>().ok()?;
            let cmd = std::fs::read(e.path().join("cmdline")).ok()?;
            let args: Vec<String> = cmd
                .split(|&b| b == 0)
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect();
            (args.iter().any(|a| a == "server") && args.contains(&data)).then_some(pid)
        })
        .next()
}

/// The server's CPU seconds so far and its peak resident memory, KiB (Linux `/proc`).
fn server_usage(pid: u32) -> (f64, u64) {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let ticks: u64 = stat
        .rfind(')')
        .map(|i| stat[i + 1..].split_whitespace().collect::<Vec<_>>())
        .map_or(0, |f| {
            f.get(11).and_then(|u| u.parse::<u64>().ok()).unwrap_or(0)
                + f.get(12).and_then(|s| s.parse::<u64>().ok()).unwrap_or(0)
        });
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let hwm = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0);
    // Clock ticks are 100 a second on Linux.
    (ticks as f64 / 100.0, hwm)
}

/// A job of `units` units whose command returns at once (`true {start} {end}`: every chunk's
/// time is its process start), on `agents` agents of `memory`, `per_unit` a unit: (its final
/// JSON, wall seconds, the server's CPU seconds during it, its peak RSS in KiB).
fn constant_overhead_job(
    name: &str,
    agents: usize,
    memory: &str,
    units: u64,
    per_unit: &str,
) -> (serde_json::Value, f64, f64, u64) {
    let mut c = Cluster::start(name, false);
    for k in 0..agents {
        start_agent(&mut c, &format!("a{k}"), "1", memory);
    }
    c.wait_for_nodes(agents);
    let pid = server_pid(&c).expect("the server's process");
    let cpu = server_usage(pid).0;
    let start = std::time::Instant::now();
    let id = submit(
        &c,
        "overhead.toml",
        &format!(
            "[[divisible]]\nname = \"d\"\nunits = {units}\ncommand = [\"true\", \"{{start}}\", \"{{end}}\"]\n\
             output = \"concat\"\nmemory_per_unit = \"{per_unit}\"\n"
        ),
    );
    let mut j = job(&c, id);
    while !matches!(j["state"].as_str(), Some("completed" | "failed")) {
        assert!(
            start.elapsed() < Duration::from_secs(600),
            "the job did not finish: {}",
            j["divisible"]["units_done"]
        );
        std::thread::sleep(Duration::from_millis(500));
        j = job(&c, id);
    }
    let wall = start.elapsed().as_secs_f64();
    let (cpu_after, peak) = server_usage(pid);
    (j, wall, cpu_after - cpu, peak)
}

/// (chunks, chunks of one unit, rounds, largest chunk) of a finished job.
fn chunk_figures(j: &serde_json::Value) -> (usize, usize, u64, u64) {
    let chunks = j["divisible"]["chunks"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let sizes: Vec<u64> = chunks
        .iter()
        .filter(|c| c["state"] == "done")
        .map(|c| c["end"].as_u64().unwrap_or(0) - c["start"].as_u64().unwrap_or(0))
        .collect();
    (
        chunks.len(),
        sizes.iter().filter(|&&s| s == 1).count(),
        j["divisible"]["rounds"].as_u64().unwrap_or(0),
        sizes.iter().copied().max().unwrap_or(0),
    )
}

/// A command whose every chunk takes its process start whatever its size: the fit read a
/// compute latency of 0 and the planners cut the load ever smaller — 6,000 units on four agents
/// holding 30-unit chunks went out as 4,246 chunks, 3,715 of one unit (a release build, 34 s).
/// The fitted latency is now the overhead, and no planned chunk is below a unit.
#[test]
fn a_command_that_returns_at_once_is_not_cut_into_single_units() {
    let _one = serial();
    let (j, wall, _, _) = constant_overhead_job("div-overhead", 4, "6000MiB", 6_000, "100MiB");
    assert_eq!(j["state"], "completed", "{j:#}");
    check_tiles(&j, 6_000);
    let (chunks, ones, rounds, largest) = chunk_figures(&j);
    // 6,000 MiB hold 60 units of 100 MiB: at most 30 a chunk (two held at once).
    assert!(largest <= 30, "a chunk of {largest} units");
    eprintln!(
        "{chunks} chunks ({ones} of one unit), {rounds} rounds, largest {largest}, {wall:.1} s"
    );
    // At most 30 units a chunk: at least 200 chunks.
    assert!(
        chunks <= 400,
        "{chunks} chunks for 6,000 units of at most 30"
    );
    assert!(ones <= 8, "{ones} chunks of one unit");
    // The overhead is measured as latency (every one read 0.0 before); an agent's line may
    // still pass below the origin on a loaded machine, so not every one.
    let latencies: Vec<f64> = j["divisible"]["workers"]
        .as_array()
        .expect("workers")
        .iter()
        .map(|w| w["compute_latency"].as_f64().expect("latency"))
        .collect();
    assert!(latencies.iter().any(|&l| l > 0.0), "{latencies:?}");
}

/// The scale review's job (docs/divisible.md, "In the runtime", figures): ten agents, a command
/// that returns at once, 200 MiB a unit on agents of 24,000 MiB (chunks of at most 60 units).
/// Prints the chunks, rounds, wall time and the server's CPU and peak memory. Timing, so not
/// part of the suite: `cargo test --release -p hetsched-cli --test cli -- --ignored --nocapture
/// divisible_runtime::ten_agents_scale_figures`.
#[test]
#[ignore = "an experiment that prints timings; run it by hand"]
fn ten_agents_scale_figures() {
    let _one = serial();
    println!(
        "| units | chunks | of one unit | rounds | largest | wall (s) | server CPU (s) | server peak RSS (MiB) |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for units in [20_000, 100_000] {
        let (j, wall, cpu, peak) =
            constant_overhead_job("div-scale", 10, "24000MiB", units, "200MiB");
        assert_eq!(j["state"], "completed");
        let (chunks, ones, rounds, largest) = chunk_figures(&j);
        println!(
            "| {units} | {chunks} | {ones} | {rounds} | {largest} | {wall:.1} | {cpu:.1} | {:.0} |",
            peak as f64 / 1024.0
        );
    }
}
